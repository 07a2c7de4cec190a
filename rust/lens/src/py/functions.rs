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

/// [lower, upper) of bucket `i`.
#[pyfunction]
pub fn bucket_bounds(i: usize) -> PyResult<(u64, u64)> {
    if i >= hist::BUCKETS {
        return Err(PyValueError::new_err(format!("bucket {i} is outside 0..{}", hist::BUCKETS)));
    }
    Ok(hist::bucket_bounds(i))
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
