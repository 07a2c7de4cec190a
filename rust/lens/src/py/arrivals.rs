//! `take_collective_arrivals`: the HCCL calls' ENTER times kept since the last take.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::core::arrivals;

/// Every HCCL-domain call entered since the last take, in this process, by start: columns cbid,
/// name, sequence (the call's index among the process's calls of that cbid in the run, 0 first),
/// start_ns (ENTER on CLOCK_REALTIME ns: MSPTI's clock as is, another bridged to it now), and
/// `dropped` (arrivals lost since the last take: a thread's ring was full).
#[pyfunction]
pub fn take_collective_arrivals(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let t = py.detach(arrivals::take);
    let a = &t.arrivals;
    let d = PyDict::new(py);
    d.set_item("cbid", a.iter().map(|x| x.0).collect::<Vec<_>>())?;
    d.set_item("name", a.iter().map(|x| x.1.as_str()).collect::<Vec<_>>())?;
    d.set_item("sequence", a.iter().map(|x| x.2).collect::<Vec<_>>())?;
    d.set_item("start_ns", a.iter().map(|x| x.3).collect::<Vec<_>>())?;
    d.set_item("dropped", t.dropped)?;
    Ok(d)
}
