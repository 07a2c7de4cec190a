//! `NativeSession`: the native side of `mspti_lens.Session`, one subscription.

use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::library::PyLibrary;
use super::snapshot::{PyCut, PySnapshot};
use crate::core::clock::ClockKind;
use crate::core::locks::lock;
use crate::core::windows;
use crate::ffi::MsptiLibrary;
use crate::session::Session;

/// The clocks a recording takes, by name: the clock asked for (the session falls back to
/// monotonic where the TSC is unreliable: "auto" is that fallback's name) and what a message says
/// of it. The one list; `mspti_lens.Session` reads its names through `NativeSession.CLOCKS`.
const CLOCKS: [(&str, ClockKind, &str); 4] = [
    ("auto", ClockKind::Tsc, "TSC where reliable, else monotonic"),
    ("tsc", ClockKind::Tsc, ""),
    ("monotonic", ClockKind::Monotonic, ""),
    ("mspti", ClockKind::Mspti, "the library's msptiGetTimestamp"),
];

fn parse_clock(name: &str) -> PyResult<ClockKind> {
    if let Some(&(_, kind, _)) = CLOCKS.iter().find(|c| c.0 == name) {
        return Ok(kind);
    }
    let valid: Vec<String> = CLOCKS
        .iter()
        .map(|&(n, _, note)| if note.is_empty() { format!("'{n}'") } else { format!("'{n}' ({note})") })
        .collect();
    Err(PyValueError::new_err(format!("unknown clock {name:?}; valid clocks are {}", valid.join(", "))))
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
    /// The clock names `start` takes, in the order a message lists them.
    #[classattr]
    #[allow(non_snake_case)]
    fn CLOCKS() -> Vec<&'static str> {
        CLOCKS.iter().map(|c| c.0).collect()
    }

    /// The callback domains: (name, MSPTI value, highest callback id `set_callback` takes; ids
    /// start at 1).
    #[classattr]
    #[allow(non_snake_case)]
    fn DOMAINS() -> Vec<(&'static str, u32, u32)> {
        crate::session::DOMAINS
            .iter()
            .map(|&(name, d)| (name, d, mspti_abi::domain_max_cbid(d).unwrap_or(0)))
            .collect()
    }

    #[new]
    #[pyo3(signature = (library, userdata=0, slowest=true))]
    fn new(py: Python<'_>, library: &PyLibrary, userdata: usize, slowest: bool) -> PyResult<PySession> {
        let lib = library.lib.clone();
        let l2 = lib.clone();
        // The live self cost's clock, chosen before the first callback can be timed.
        let mut s = py.detach(move || {
            crate::core::self_cost::calibrate();
            Session::with_userdata(l2, userdata)
        })?;
        s.set_slowest(slowest);
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

    /// Cut the calls since the last reset or cut out of the current window (`windows::cut`);
    /// the window goes on (a flight recorder's fine window).
    fn cut(&self, py: Python<'_>) -> PyResult<PyCut> {
        self.with(py, |s| s.check_readable().map(|()| windows::cut())).map(PyCut)
    }

    /// Close the current window and start a new one; returns the closed window.
    fn reset(&self, py: Python<'_>) -> PyResult<PySnapshot> {
        self.with(py, |s| s.check_readable().map(|()| windows::snapshot_and_reset()))
            .map(PySnapshot::from_totals)
    }
}
