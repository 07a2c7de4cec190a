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

/// Find and load an MSPTI library: `path`, else MSPTI_LIBRARY, a preloaded libmspti, the CANN
/// locations, then `simulator`.
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

/// Path of a libmspti.so mapped into this process, if any.
#[pyfunction]
pub fn mapped_libmspti() -> Option<String> {
    discovery::mapped_libmspti().map(|p| p.display().to_string())
}

/// The CANN locations searched for libmspti.so, in order.
#[pyfunction]
pub fn cann_candidates() -> Vec<String> {
    discovery::cann_candidates().into_iter().map(|p| p.display().to_string()).collect()
}
