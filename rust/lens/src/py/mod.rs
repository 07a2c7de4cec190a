//! The thin binding layer: converts between the core and Python, and nothing else.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::core::clock::ClockKind;
use crate::core::hist::{self, Histogram};
use crate::core::recorder::{self, Totals};
use crate::core::session::Session;
use crate::core::shard::ShardCounters;
use crate::error::Error;
use crate::ffi::loader::{self, MsptiLibrary};

mod activity;

create_exception!(mspti_lens, MsptiError, PyException, "Base of every mspti_lens error.");
create_exception!(mspti_lens, LibraryError, MsptiError, "No usable MSPTI library could be loaded.");
create_exception!(mspti_lens, MsptiCallError, MsptiError, "An MSPTI function returned an error code.");
create_exception!(
    mspti_lens,
    SubscriberBusyError,
    MsptiCallError,
    "MSPTI's only subscriber slot is taken (msptiResult 2)."
);
create_exception!(
    mspti_lens,
    PreloadRequiredError,
    MsptiCallError,
    "The process was not started with LD_PRELOAD of libmspti.so (msptiResult 6)."
);
create_exception!(mspti_lens, SessionError, MsptiError, "The session cannot do that in its state.");

fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::LibraryNotFound { .. } | Error::NotALibrary { .. } | Error::SymbolMissing { .. } => {
            LibraryError::new_err(msg)
        }
        Error::Mspti { code, name, function, .. } => {
            let args = (msg, code, name, function);
            match code {
                2 => SubscriberBusyError::new_err(args),
                6 => PreloadRequiredError::new_err(args),
                _ => MsptiCallError::new_err(args),
            }
        }
        Error::InvalidArgument(_) => PyValueError::new_err(msg),
        Error::AlreadyActive | Error::Closed | Error::Forked | Error::Poisoned => SessionError::new_err(msg),
    }
}

/// A loaded MSPTI library (real or simulated). Libraries stay loaded for the process.
#[pyclass(name = "Library", module = "mspti_lens._native", frozen)]
pub struct PyLibrary {
    lib: Arc<MsptiLibrary>,
}

#[pymethods]
impl PyLibrary {
    #[getter]
    fn path(&self) -> String {
        self.lib.path.display().to_string()
    }
    #[getter]
    fn origin(&self) -> &'static str {
        self.lib.origin.name()
    }
    #[getter]
    fn simulated(&self) -> bool {
        self.lib.simulated
    }
    #[getter]
    fn optional_symbols(&self) -> Vec<&'static str> {
        self.lib.optional_present.clone()
    }
    #[getter]
    fn version(&self) -> Option<u32> {
        self.lib.version()
    }
    #[getter]
    fn preloaded(&self) -> bool {
        self.lib.preloaded_by_env()
    }
    #[getter]
    fn sim_fidelity(&self) -> Option<u32> {
        self.lib.sim_fidelity()
    }
    /// The library's own text for a result code (None without `msptiGetResultString`).
    fn result_string(&self, code: u32) -> Option<String> {
        self.lib.result_string(code)
    }
    fn __repr__(&self) -> String {
        format!(
            "Library(path={:?}, origin={:?}, simulated={})",
            self.lib.path.display().to_string(),
            self.lib.origin.name(),
            self.lib.simulated
        )
    }
}

/// Find and load an MSPTI library: `path`, else MSPTI_LIBRARY, a preloaded libmspti, the CANN
/// locations, then `simulator`.
#[pyfunction]
#[pyo3(signature = (path=None, simulator=None))]
fn load_library(py: Python<'_>, path: Option<PathBuf>, simulator: Option<PathBuf>) -> PyResult<PyLibrary> {
    let lib = py.detach(|| loader::discover(path.as_deref(), simulator.as_deref())).map_err(to_py)?;
    Ok(PyLibrary { lib })
}

/// Path of a libmspti.so mapped into this process, if any.
#[pyfunction]
fn mapped_libmspti() -> Option<String> {
    loader::mapped_libmspti().map(|p| p.display().to_string())
}

/// The CANN locations searched for libmspti.so, in order.
#[pyfunction]
fn cann_candidates() -> Vec<String> {
    loader::cann_candidates().into_iter().map(|p| p.display().to_string()).collect()
}

fn parse_clock(name: &str) -> PyResult<ClockKind> {
    match name {
        "tsc" | "auto" => Ok(ClockKind::Tsc),
        "monotonic" => Ok(ClockKind::Monotonic),
        "mspti" => Ok(ClockKind::Mspti),
        other => Err(PyValueError::new_err(format!(
            "unknown clock {other:?}; valid clocks are 'auto' (TSC where reliable, else monotonic), 'tsc', \
             'monotonic', 'mspti' (the library's msptiGetTimestamp)"
        ))),
    }
}

/// The native side of `mspti_lens.Session`: one subscription.
#[pyclass(name = "NativeSession", module = "mspti_lens._native", frozen)]
pub struct PySession {
    inner: Mutex<Session>,
    lib: Arc<MsptiLibrary>,
}

impl PySession {
    fn with<T>(&self, py: Python<'_>, f: impl FnOnce(&mut Session) -> crate::Result<T> + Send) -> PyResult<T>
    where
        T: Send,
    {
        py.detach(|| {
            let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut s)
        })
        .map_err(to_py)
    }
}

#[pymethods]
impl PySession {
    #[new]
    fn new(py: Python<'_>, library: &PyLibrary) -> PyResult<PySession> {
        let lib = library.lib.clone();
        let l2 = lib.clone();
        let s = py.detach(move || Session::new(l2)).map_err(to_py)?;
        Ok(PySession { inner: Mutex::new(s), lib })
    }

    #[getter]
    fn library(&self) -> PyLibrary {
        PyLibrary { lib: self.lib.clone() }
    }

    fn set_domain(&self, py: Python<'_>, domain: u32, on: bool) -> PyResult<()> {
        self.with(py, |s| s.set_domain(domain, on))
    }

    fn set_callback(&self, py: Python<'_>, domain: u32, cbid: u32, on: bool) -> PyResult<()> {
        self.with(py, |s| s.set_callback(domain, cbid, on))
    }

    /// The wanted enable bitmap of a domain.
    fn wanted(&self, py: Python<'_>, domain: u32) -> PyResult<u64> {
        self.with(py, |s| Ok(s.wanted(domain)))
    }

    /// Start recording; returns the clock in use.
    #[pyo3(signature = (clock="auto"))]
    fn start(&self, py: Python<'_>, clock: &str) -> PyResult<&'static str> {
        let kind = parse_clock(clock)?;
        self.with(py, |s| s.start(kind).map(ClockKind::name))
    }

    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |s| s.stop())
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |s| s.close())
    }

    #[getter]
    fn running(&self) -> bool {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).is_running()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).is_closed()
    }

    #[getter]
    fn clock(&self) -> &'static str {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).clock().name()
    }

    /// The current window.
    fn snapshot(&self, py: Python<'_>) -> PyResult<PySnapshot> {
        self.with(py, |s| s.check_readable().map(|()| recorder::snapshot())).map(PySnapshot::from_totals)
    }

    /// Close the current window and start a new one; returns the closed window.
    fn reset(&self, py: Python<'_>) -> PyResult<PySnapshot> {
        self.with(py, |s| s.check_readable().map(|()| recorder::snapshot_and_reset()))
            .map(PySnapshot::from_totals)
    }
}

/// Process-wide faults outside any shard.
#[pyfunction]
fn health(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let h = recorder::health();
    let d = PyDict::new(py);
    d.set_item("poisoned", h.poisoned)?;
    d.set_item("forked", h.forked)?;
    d.set_item("late_threads", h.late_threads)?;
    d.set_item("clock_errors", h.clock_errors)?;
    Ok(d)
}

type KeyRow = (u32, u32, String, Histogram);

/// An immutable set of merged histograms, one per (domain, cbid, function).
#[pyclass(name = "NativeSnapshot", module = "mspti_lens._native", frozen)]
pub struct PySnapshot {
    keys: Vec<KeyRow>,
    counters: ShardCounters,
    in_flight: u64,
    threads: u64,
}

impl PySnapshot {
    fn from_totals(t: Totals) -> PySnapshot {
        PySnapshot {
            keys: t.keys.into_iter().map(|((d, c, n), h)| (d, c, n, h)).collect(),
            counters: t.counters,
            in_flight: t.in_flight,
            threads: t.threads,
        }
    }
}

fn check_quantile(q: f64) -> PyResult<()> {
    if (0.0..=1.0).contains(&q) {
        Ok(())
    } else {
        Err(PyValueError::new_err(format!("quantile {q} is outside [0, 1]")))
    }
}

#[pymethods]
impl PySnapshot {
    /// Statistics per key as columns: domain, cbid, name, count, total, mean, min, max, std, and
    /// one column `q{i}` per requested quantile.
    fn stats<'py>(&self, py: Python<'py>, quantiles: Vec<f64>) -> PyResult<Bound<'py, PyDict>> {
        for &q in &quantiles {
            check_quantile(q)?;
        }
        let d = PyDict::new(py);
        d.set_item("domain", self.keys.iter().map(|k| k.0).collect::<Vec<_>>())?;
        d.set_item("cbid", self.keys.iter().map(|k| k.1).collect::<Vec<_>>())?;
        d.set_item("name", self.keys.iter().map(|k| k.2.clone()).collect::<Vec<_>>())?;
        d.set_item("count", self.keys.iter().map(|k| k.3.count).collect::<Vec<_>>())?;
        d.set_item("total", self.keys.iter().map(|k| k.3.sum).collect::<Vec<_>>())?;
        d.set_item("mean", self.keys.iter().map(|k| k.3.mean()).collect::<Vec<_>>())?;
        d.set_item("min", self.keys.iter().map(|k| k.3.min_value()).collect::<Vec<_>>())?;
        d.set_item("max", self.keys.iter().map(|k| k.3.max_value()).collect::<Vec<_>>())?;
        d.set_item("std", self.keys.iter().map(|k| k.3.std_sample()).collect::<Vec<_>>())?;
        d.set_item("overflow", self.keys.iter().map(|k| k.3.overflow).collect::<Vec<_>>())?;
        for (i, &q) in quantiles.iter().enumerate() {
            d.set_item(format!("q{i}"), self.keys.iter().map(|k| k.3.quantile(q)).collect::<Vec<_>>())?;
        }
        Ok(d)
    }

    /// Non-empty buckets as columns: key (row index of `stats`), bucket, lower, upper, count.
    fn buckets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (mut key, mut bucket, mut lower, mut upper, mut count) = (vec![], vec![], vec![], vec![], vec![]);
        for (k, row) in self.keys.iter().enumerate() {
            for (i, c) in row.3.nonzero() {
                let (lo, hi) = hist::bucket_bounds(i);
                key.push(k as u32);
                bucket.push(i as u32);
                lower.push(lo);
                upper.push(hi);
                count.push(c);
            }
        }
        let d = PyDict::new(py);
        d.set_item("key", key)?;
        d.set_item("bucket", bucket)?;
        d.set_item("lower", lower)?;
        d.set_item("upper", upper)?;
        d.set_item("count", count)?;
        Ok(d)
    }

    /// The exact per-key state for saving: domain, cbid, name, count, sum, sum_sq, min, max, overflow.
    fn key_state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("domain", self.keys.iter().map(|k| k.0).collect::<Vec<_>>())?;
        d.set_item("cbid", self.keys.iter().map(|k| k.1).collect::<Vec<_>>())?;
        d.set_item("name", self.keys.iter().map(|k| k.2.clone()).collect::<Vec<_>>())?;
        d.set_item("count", self.keys.iter().map(|k| k.3.count).collect::<Vec<_>>())?;
        d.set_item("sum", self.keys.iter().map(|k| k.3.sum).collect::<Vec<_>>())?;
        d.set_item("sum_sq", self.keys.iter().map(|k| k.3.sum_sq).collect::<Vec<_>>())?;
        d.set_item("min", self.keys.iter().map(|k| k.3.min).collect::<Vec<_>>())?;
        d.set_item("max", self.keys.iter().map(|k| k.3.max).collect::<Vec<_>>())?;
        d.set_item("overflow", self.keys.iter().map(|k| k.3.overflow).collect::<Vec<_>>())?;
        Ok(d)
    }

    /// unmatched, overflow, dropped, abandoned, orphaned, bad_site, in_flight, threads.
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.counters;
        let d = PyDict::new(py);
        d.set_item("unmatched", c.unmatched)?;
        d.set_item("overflow", c.overflow)?;
        d.set_item("dropped", c.dropped)?;
        d.set_item("abandoned", c.abandoned)?;
        d.set_item("orphaned", c.orphaned)?;
        d.set_item("bad_site", c.bad_site)?;
        d.set_item("in_flight", self.in_flight)?;
        d.set_item("threads", self.threads)?;
        Ok(d)
    }

    fn __len__(&self) -> usize {
        self.keys.len()
    }

    /// Rebuild a snapshot from `key_state`-shaped columns, sparse buckets and counters; every
    /// value is checked, so a corrupt file gives ValueError, never a wrong snapshot.
    #[staticmethod]
    #[allow(clippy::too_many_arguments)]
    fn from_state(
        domain: Vec<u32>,
        cbid: Vec<u32>,
        name: Vec<String>,
        sum: Vec<u64>,
        sum_sq: Vec<f64>,
        min: Vec<Option<u64>>,
        max: Vec<Option<u64>>,
        overflow: Vec<u64>,
        bucket_key: Vec<u32>,
        bucket: Vec<u32>,
        bucket_count: Vec<u64>,
        counters: BTreeMap<String, u64>,
    ) -> PyResult<PySnapshot> {
        let n = domain.len();
        if [cbid.len(), name.len(), sum.len(), sum_sq.len(), min.len(), max.len(), overflow.len()]
            .iter()
            .any(|&l| l != n)
            || bucket.len() != bucket_key.len()
            || bucket_count.len() != bucket_key.len()
        {
            return Err(PyValueError::new_err("snapshot columns have different lengths"));
        }
        let mut hs: Vec<Histogram> = vec![Histogram::default(); n];
        for ((&k, &b), &c) in bucket_key.iter().zip(&bucket).zip(&bucket_count) {
            let h = hs.get_mut(k as usize).ok_or_else(|| {
                PyValueError::new_err(format!("bucket row names key {k}, but there are {n} keys"))
            })?;
            if b as usize >= hist::BUCKETS {
                return Err(PyValueError::new_err(format!(
                    "bucket index {b} is outside 0..{}",
                    hist::BUCKETS
                )));
            }
            h.counts[b as usize] = h.counts[b as usize]
                .checked_add(c)
                .ok_or_else(|| PyValueError::new_err("bucket count overflows"))?;
            h.count = h.count.checked_add(c).ok_or_else(|| PyValueError::new_err("count overflows"))?;
        }
        let mut keys = Vec::with_capacity(n);
        for (i, mut h) in hs.into_iter().enumerate() {
            h.sum = sum[i];
            if !sum_sq[i].is_finite() || sum_sq[i] < 0.0 {
                return Err(PyValueError::new_err(format!(
                    "sum_sq of key {i} is not a finite non-negative number"
                )));
            }
            h.sum_sq = sum_sq[i];
            h.min = min[i];
            h.max = max[i];
            h.overflow = overflow[i];
            if let (Some(lo), Some(hi)) = (h.min, h.max) {
                if lo > hi {
                    return Err(PyValueError::new_err(format!("key {i} has min {lo} > max {hi}")));
                }
            }
            if h.count == 0 {
                return Err(PyValueError::new_err(format!("key {i} ({}) has no samples", name[i])));
            }
            keys.push((domain[i], cbid[i], name[i].clone(), h));
        }
        let get = |k: &str| counters.get(k).copied().unwrap_or(0);
        Ok(PySnapshot {
            keys,
            counters: ShardCounters {
                unmatched: get("unmatched"),
                overflow: get("overflow"),
                dropped: get("dropped"),
                abandoned: get("abandoned"),
                orphaned: get("orphaned"),
                bad_site: get("bad_site"),
            },
            in_flight: get("in_flight"),
            threads: get("threads"),
        })
    }

    /// One histogram of `values` (ns) under key (0, 0, name): for checking the histogram's math.
    #[staticmethod]
    #[pyo3(signature = (values, name="values"))]
    fn from_values(values: Vec<u64>, name: &str) -> PySnapshot {
        let mut h = Histogram::default();
        for v in values {
            h.record(v);
        }
        let keys = if h.count > 0 { vec![(0, 0, name.to_owned(), h)] } else { vec![] };
        PySnapshot { keys, counters: ShardCounters::default(), in_flight: 0, threads: 0 }
    }

    /// The sum of two snapshots (threads, runs or ranks): histograms of equal keys add exactly.
    fn merge(&self, other: &PySnapshot) -> PySnapshot {
        let mut m: BTreeMap<(u32, u32, String), Histogram> = BTreeMap::new();
        for (d, c, n, h) in self.keys.iter().chain(&other.keys) {
            m.entry((*d, *c, n.clone())).or_default().merge(h);
        }
        let (a, b) = (self.counters, other.counters);
        PySnapshot {
            keys: m.into_iter().map(|((d, c, n), h)| (d, c, n, h)).collect(),
            counters: ShardCounters {
                unmatched: a.unmatched + b.unmatched,
                overflow: a.overflow + b.overflow,
                dropped: a.dropped + b.dropped,
                abandoned: a.abandoned + b.abandoned,
                orphaned: a.orphaned + b.orphaned,
                bad_site: a.bad_site + b.bad_site,
            },
            in_flight: self.in_flight + other.in_flight,
            threads: self.threads + other.threads,
        }
    }
}

/// Every callback id: (domain, cbid, short name, enum name, 26.x names, 8.x names).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn callbacks() -> Vec<(u32, u32, &'static str, String, Vec<&'static str>, Vec<&'static str>)> {
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
fn results() -> Vec<(u32, &'static str, &'static str)> {
    mspti_abi::RESULTS.to_vec()
}

/// [lower, upper) of bucket `i`.
#[pyfunction]
fn bucket_bounds(i: usize) -> PyResult<(u64, u64)> {
    if i >= hist::BUCKETS {
        return Err(PyValueError::new_err(format!("bucket {i} is outside 0..{}", hist::BUCKETS)));
    }
    Ok(hist::bucket_bounds(i))
}

/// Offsets of msptiCallbackData's fields and its size, as compiled.
#[pyfunction]
fn callback_data_layout() -> BTreeMap<&'static str, usize> {
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

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("BUCKETS", hist::BUCKETS)?;
    m.add("MAX_RELATIVE_ERROR", hist::MAX_RELATIVE_ERROR)?;
    m.add("RANGE_END_NS", hist::RANGE_END_NS)?;
    m.add("HISTOGRAM_BYTES", hist::AtomicHistogram::footprint())?;
    m.add("TSC_RELIABLE", crate::core::clock::tsc_reliable())?;
    m.add("build_profile", if cfg!(debug_assertions) { "debug" } else { "release" })?;
    m.add("MsptiError", py.get_type::<MsptiError>())?;
    m.add("LibraryError", py.get_type::<LibraryError>())?;
    m.add("MsptiCallError", py.get_type::<MsptiCallError>())?;
    m.add("SubscriberBusyError", py.get_type::<SubscriberBusyError>())?;
    m.add("PreloadRequiredError", py.get_type::<PreloadRequiredError>())?;
    m.add("SessionError", py.get_type::<SessionError>())?;
    m.add_class::<PyLibrary>()?;
    m.add_class::<PySession>()?;
    m.add_class::<PySnapshot>()?;
    m.add_function(wrap_pyfunction!(load_library, m)?)?;
    m.add_function(wrap_pyfunction!(mapped_libmspti, m)?)?;
    m.add_function(wrap_pyfunction!(cann_candidates, m)?)?;
    m.add_function(wrap_pyfunction!(health, m)?)?;
    m.add_function(wrap_pyfunction!(callbacks, m)?)?;
    m.add_function(wrap_pyfunction!(results, m)?)?;
    m.add_function(wrap_pyfunction!(bucket_bounds, m)?)?;
    m.add_function(wrap_pyfunction!(callback_data_layout, m)?)?;
    activity::register(m)?;
    Ok(())
}
