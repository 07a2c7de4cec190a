//! The Python exception classes and the one mapping of crate errors to them.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;

use crate::error::Error;
use crate::ffi::{MSPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, MSPTI_ERROR_WITHOUT_LD_PRELOAD};

create_exception!(mspti_lens, MsptiError, PyException, "Base of every mspti_lens error.");
create_exception!(mspti_lens, LibraryError, MsptiError, "No usable MSPTI library could be loaded.");
create_exception!(mspti_lens, MsptiCallError, MsptiError, "An MSPTI function returned an error code.");
create_exception!(
    mspti_lens,
    SubscriberBusyError,
    MsptiCallError,
    "MSPTI's only subscriber slot is taken (MSPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)."
);
create_exception!(
    mspti_lens,
    PreloadRequiredError,
    MsptiCallError,
    "The process was not started with LD_PRELOAD of libmspti.so (MSPTI_ERROR_WITHOUT_LD_PRELOAD)."
);
create_exception!(mspti_lens, SessionError, MsptiError, "The session cannot do that in its state.");

/// What an MsptiCallError says beyond its message, as attributes (`e.code`, `e.code_name`,
/// `e.function`; also in `e.args[1:]`, in that order).
fn call_error_attributes(py: Python<'_>, err: &PyErr, code: u32, name: &str, function: &str) -> PyResult<()> {
    let value = err.value(py);
    value.setattr("code", code)?;
    value.setattr("code_name", name)?;
    value.setattr("function", function)
}

impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        let msg = e.to_string();
        match e {
            Error::LibraryNotFound { .. }
            | Error::NotALibrary { .. }
            | Error::SymbolMissing { .. }
            | Error::SecondInstance { .. } => LibraryError::new_err(msg),
            Error::Mspti { code, name, function, .. } => {
                let args = (msg, code, name.clone(), function);
                let err = match code {
                    MSPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED => SubscriberBusyError::new_err(args),
                    MSPTI_ERROR_WITHOUT_LD_PRELOAD => PreloadRequiredError::new_err(args),
                    _ => MsptiCallError::new_err(args),
                };
                Python::attach(|py| call_error_attributes(py, &err, code, &name, function).map(|()| err))
                    .unwrap_or_else(|e| e)
            }
            Error::InvalidArgument(_) => PyValueError::new_err(msg),
            Error::AlreadyActive | Error::Closed | Error::Forked | Error::Poisoned => {
                SessionError::new_err(msg)
            }
        }
    }
}
