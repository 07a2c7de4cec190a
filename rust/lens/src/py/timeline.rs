//! The timeline's functions (latency over time): start/stop the per-interval ring, tick it, read its rows.

use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::core::locks::lock;
use crate::core::{timeline, windows};

/// Keep a timeline of `interval_s` intervals (replacing any earlier one): `levels` levels of
/// `per_level` intervals each, every level's intervals twice as long as the one before.
#[pyfunction]
#[pyo3(signature = (interval_s, levels=8, per_level=64, ticking=true))]
pub fn timeline_start(
    py: Python<'_>,
    interval_s: f64,
    levels: usize,
    per_level: usize,
    ticking: bool,
) -> PyResult<()> {
    if !(interval_s.is_finite() && interval_s >= 0.001) {
        return Err(PyValueError::new_err(format!(
            "interval must be a number of seconds >= 0.001, not {interval_s}"
        )));
    }
    if !(1..=32).contains(&levels) || !(2..=4096).contains(&per_level) {
        return Err(PyValueError::new_err("levels must be in 1..32 and per_level in 2..4096"));
    }
    let interval = Duration::from_secs_f64(interval_s);
    py.detach(|| {
        timeline::start(interval, levels, per_level, ticking.then_some(windows::timeline_tick as fn()))
    });
    Ok(())
}

/// Stop the ticker thread (the timeline stays readable).
#[pyfunction]
pub fn timeline_stop(py: Python<'_>) {
    py.detach(timeline::stop);
}

/// End the interval in progress now (the ticker does this every interval).
#[pyfunction]
pub fn timeline_tick(py: Python<'_>) {
    py.detach(windows::timeline_tick);
}

/// The timeline's rows as columns (start_ns, end_ns, domain, cbid, name, count, p50, p99), oldest
/// first; empty when no timeline is kept.
#[pyfunction]
pub fn timeline_rows(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let rows = py.detach(|| lock(&timeline::TIMELINE).as_ref().map(|t| t.rows()).unwrap_or_default());
    let d = PyDict::new(py);
    d.set_item("start_ns", rows.iter().map(|r| r.start_ns).collect::<Vec<_>>())?;
    d.set_item("end_ns", rows.iter().map(|r| r.end_ns).collect::<Vec<_>>())?;
    d.set_item("domain", rows.iter().map(|r| r.key.0).collect::<Vec<_>>())?;
    d.set_item("cbid", rows.iter().map(|r| r.key.1).collect::<Vec<_>>())?;
    d.set_item("name", rows.iter().map(|r| r.key.2.as_str()).collect::<Vec<_>>())?;
    d.set_item("count", rows.iter().map(|r| r.count).collect::<Vec<_>>())?;
    d.set_item("p50", rows.iter().map(|r| r.p50).collect::<Vec<_>>())?;
    d.set_item("p99", rows.iter().map(|r| r.p99).collect::<Vec<_>>())?;
    Ok(d)
}
