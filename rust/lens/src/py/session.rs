//! `NativeSession`: the native side of `mspti_lens.Session`, one subscription.

use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::library::PyLibrary;
use super::snapshot::PySnapshot;
use crate::core::clock::ClockKind;
use crate::core::locks::lock;
use crate::core::windows;
use crate::ffi::MsptiLibrary;
use crate::session::Session;

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
    pub(crate) inner: Mutex<Session>,
    lib: Arc<MsptiLibrary>,
}

impl PySession {
    fn with<T>(&self, py: Python<'_>, f: impl FnOnce(&mut Session) -> crate::Result<T> + Send) -> PyResult<T>
    where
        T: Send,
    {
        py.detach(|| {
            let mut s = lock(&self.inner);
            f(&mut s)
        })
        .map_err(PyErr::from)
    }
}

#[pymethods]
impl PySession {
    #[new]
    #[pyo3(signature = (library, userdata=0, exemplars=true))]
    fn new(py: Python<'_>, library: &PyLibrary, userdata: usize, exemplars: bool) -> PyResult<PySession> {
        let lib = library.lib.clone();
        let l2 = lib.clone();
        let mut s = py.detach(move || Session::with_userdata(l2, userdata))?;
        s.set_exemplars(exemplars);
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
        lock(&self.inner).is_running()
    }

    #[getter]
    fn closed(&self) -> bool {
        lock(&self.inner).is_closed()
    }

    #[getter]
    fn clock(&self) -> &'static str {
        lock(&self.inner).clock().name()
    }

    /// The current window.
    fn snapshot(&self, py: Python<'_>) -> PyResult<PySnapshot> {
        self.with(py, |s| s.check_readable().map(|()| windows::snapshot())).map(PySnapshot::from_totals)
    }

    /// Close the current window and start a new one; returns the closed window.
    fn reset(&self, py: Python<'_>) -> PyResult<PySnapshot> {
        self.with(py, |s| s.check_readable().map(|()| windows::snapshot_and_reset()))
            .map(PySnapshot::from_totals)
    }
}
