//! `Library`: a loaded MSPTI library, and the functions that find one.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;

use crate::ffi::{discovery, MsptiLibrary};

/// A loaded MSPTI library (real or simulated). Libraries stay loaded for the process.
#[pyclass(name = "Library", module = "mspti_lens._native", frozen)]
pub struct PyLibrary {
    pub(crate) lib: Arc<MsptiLibrary>,
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

/// Find and load an MSPTI library in the order of `search_order()` (`simulator` last, if given).
#[pyfunction]
#[pyo3(signature = (path=None, simulator=None))]
pub fn load_library(
    py: Python<'_>,
    path: Option<PathBuf>,
    simulator: Option<PathBuf>,
) -> PyResult<PyLibrary> {
    let lib = py.detach(|| discovery::discover(path.as_deref(), simulator.as_deref()))?;
    Ok(PyLibrary { lib })
}

/// Where `load_library` would look, without opening anything: (path or None, origin, tried).
/// An explicit path or MSPTI_LIBRARY is returned even when no file is there.
#[pyfunction]
#[pyo3(signature = (path=None, simulator=None))]
pub fn find_library(
    path: Option<PathBuf>,
    simulator: Option<PathBuf>,
) -> (Option<String>, Option<&'static str>, Vec<String>) {
    let s = discovery::search(path.as_deref(), simulator.as_deref());
    match s.found {
        Some((p, o)) => (Some(p.display().to_string()), Some(o.name()), s.tried),
        None => (None, None, s.tried),
    }
}

/// The discovery order: (origin, where), one row per place searched.
#[pyfunction]
pub fn search_order() -> Vec<(&'static str, &'static str)> {
    discovery::SEARCH_ORDER.iter().map(|(o, w)| (o.name(), *w)).collect()
}

/// Path of a libmspti.so mapped into this process, if any.
#[pyfunction]
pub fn mapped_libmspti() -> Option<String> {
    discovery::mapped_libmspti().map(|p| p.display().to_string())
}
