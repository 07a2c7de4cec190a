//! Module-level functions: process health and the tables of the ABI and the histogram.

use std::collections::BTreeMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::core::hist;
use crate::core::windows;

/// Process-wide faults outside any shard.
#[pyfunction]
pub fn health(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let h = windows::health();
    let d = PyDict::new(py);
    d.set_item("poisoned", h.poisoned)?;
    d.set_item("forked", h.forked)?;
    d.set_item("late_threads", h.late_threads)?;
    d.set_item("clock_errors", h.clock_errors)?;
    d.set_item("stop_unsettled", h.stop_unsettled)?;
    d.set_item("late_exits", h.late_exits)?;
    Ok(d)
}

/// What mspti-lens has cost this process so far (core/self_cost.rs): the callbacks' CPU from
/// the sampled ones, the drain threads' CPU.
#[pyfunction]
pub fn self_cost(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    use crate::core::self_cost as sc;
    let c = sc::read();
    let d = PyDict::new(py);
    d.set_item("sample_every", sc::SAMPLE_EVERY)?;
    d.set_item("samples", c.samples)?;
    d.set_item("skipped", c.skipped)?;
    d.set_item("sampled_ns", c.sampled_ns)?;
    d.set_item("callback_cpu_ns", c.callback_cpu_ns())?;
    d.set_item("ns_per_pair", c.ns_per_pair())?;
    d.set_item("clock_overhead_ns", c.clock_overhead_ns)?;
    d.set_item("clock", c.clock)?;
    d.set_item("drain_cpu_ns", c.drain_cpu_ns)?;
    Ok(d)
}

/// Every callback id: (domain, cbid, short name, enum name, 26.x names, 8.x names).
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn callbacks() -> Vec<(u32, u32, &'static str, String, Vec<&'static str>, Vec<&'static str>)> {
    mspti_abi::CALLBACKS
        .iter()
        .map(|c| {
            (
                c.domain,
                c.cbid,
                c.short,
                format!("{}{}", c.prefix(), c.short),
                c.names_26x.to_vec(),
                c.names_8x.to_vec(),
            )
        })
        .collect()
}

/// Every msptiResult: (code, enum name, the library's string).
#[pyfunction]
pub fn results() -> Vec<(u32, &'static str, &'static str)> {
    mspti_abi::RESULTS.to_vec()
}

/// (lower, upper) of bucket `index` in ns: base^index (exclusive) and base^(index+1) (inclusive).
#[pyfunction]
pub fn bucket_bounds(index: i32) -> PyResult<(f64, f64)> {
    if !(hist::MIN_INDEX..=hist::MAX_INDEX).contains(&index) {
        return Err(PyValueError::new_err(format!(
            "bucket index {index} is outside {}..={} (scale {})",
            hist::MIN_INDEX,
            hist::MAX_INDEX,
            hist::SCALE
        )));
    }
    Ok((hist::bucket_lower(index), hist::bucket_upper(index)))
}

/// The bucket index of `value_ns`; None for 0 (the zero bucket) and beyond RANGE_MAX_NS (overflow).
#[pyfunction]
pub fn bucket_index(value_ns: u64) -> Option<i32> {
    (1..=hist::RANGE_MAX_NS).contains(&value_ns).then(|| hist::index_of(value_ns))
}

/// The 1-based nearest rank of quantile q among n samples (integer arithmetic; see hist.rs).
#[pyfunction]
pub fn nearest_rank(q: f64, n: u64) -> PyResult<u64> {
    if !(0.0..=1.0).contains(&q) {
        return Err(PyValueError::new_err(format!("quantile {q} is outside [0, 1]")));
    }
    Ok(hist::nearest_rank(q, n))
}

/// The bucket computation's tables and slot layout (for the C comparison callback in bench/).
#[pyfunction]
pub fn bucket_tables(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("mantissa_bounds", hist::MANTISSA_BOUNDS.to_vec())?;
    d.set_item("cell_floor", hist::CELL_FLOOR.to_vec())?;
    d.set_item("slots", hist::SLOTS)?;
    d.set_item("direct_max", hist::DIRECT_MAX)?;
    d.set_item("first_indexed", hist::FIRST_INDEXED)?;
    d.set_item("range_max", hist::RANGE_MAX_NS)?;
    Ok(d)
}

/// Offsets of msptiCallbackData's fields and its size, as compiled.
#[pyfunction]
pub fn callback_data_layout() -> BTreeMap<&'static str, usize> {
    use mspti_abi::MsptiCallbackData as D;
    use std::mem::offset_of;
    BTreeMap::from([
        ("callbackSite", offset_of!(D, callback_site)),
        ("functionName", offset_of!(D, function_name)),
        ("functionParams", offset_of!(D, function_params)),
        ("functionReturnValue", offset_of!(D, function_return_value)),
        ("symbolName", offset_of!(D, symbol_name)),
        ("correlationId", offset_of!(D, correlation_id)),
        ("reserved1", offset_of!(D, reserved1)),
        ("reserved2", offset_of!(D, reserved2)),
        ("correlationData", offset_of!(D, correlation_data)),
        ("size", std::mem::size_of::<D>()),
    ])
}

/// Route `signum` to the main thread, in front of the handler `signal.signal` installed, so that
/// handler runs also when another thread takes the signal, or when it lands just before the main
/// thread begins a wait (crate::signals).
#[pyfunction]
pub fn route_signal_to_main_thread(signum: i32) -> PyResult<()> {
    crate::signals::route_to_main_thread(signum).map_err(pyo3::exceptions::PyValueError::new_err)
}

/// Called first by the Python handler of a routed signal: it runs, so the main thread needs no
/// more kicks.
#[pyfunction]
pub fn signal_handled(signum: i32) {
    crate::signals::handled(signum);
}

/// Test hook: a routed signal's C handler runs on this thread and the signal is pending, but no
/// wait of the main thread is interrupted (a signal that landed just before the wait began).
#[cfg(feature = "test-hooks")]
#[pyfunction]
pub fn _trip_without_waking(signum: i32) -> PyResult<()> {
    crate::signals::trip_without_waking(signum).map_err(pyo3::exceptions::PyValueError::new_err)
}
