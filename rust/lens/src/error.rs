//! One error type for the crate; `py/errors.rs` maps each variant to an exception class.

use mspti_abi::{
    result_name, MsptiResult, MSPTI_ERROR_DEVICE_OFFLINE, MSPTI_ERROR_INVALID_PARAMETER,
    MSPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, MSPTI_ERROR_NOT_INITIALIZED,
    MSPTI_ERROR_WITHOUT_LD_PRELOAD,
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no MSPTI library was found. Tried: {tried}. {hint}")]
    LibraryNotFound { tried: String, hint: String },

    #[error("{path} could not be loaded as a shared library ({reason}). {hint}")]
    NotALibrary { path: String, reason: String, hint: String },

    #[error(
        "{path} is not a usable MSPTI library: it lacks the required symbol {symbol}. \
             Point MSPTI_LIBRARY (or Session(library=...)) at CANN's lib64/libmspti.so."
    )]
    SymbolMissing { path: String, symbol: &'static str },

    #[error("{function} returned {name} ({code}){library_says}. {fix}")]
    Mspti { function: &'static str, code: MsptiResult, name: String, library_says: String, fix: String },

    #[error(
        "{requested} is not the libmspti.so already mapped in this process ({mapped}, by LD_PRELOAD or \
             a linked library): loading it would make a second MSPTI, which the runtime never calls, so no \
             callback would arrive. Use Session(library=\"{mapped}\"), or leave `library` unset (the mapped \
             one is found first), or preload {requested} instead"
    )]
    SecondInstance { mapped: String, requested: String },

    #[error(
        "another mspti_lens Session is already active in this process; close it (session.close(), \
             or leave its `with` block) before starting a new one"
    )]
    AlreadyActive,

    #[error("this Session is closed; create a new mspti_lens.Session()")]
    Closed,

    #[error("{0}")]
    InvalidArgument(String),

    #[error(
        "this process is a fork() of one that used mspti_lens: it holds a copy of the parent's \
             recording and of MSPTI's subscriber state, not a working subscription, so it cannot record \
             or read here. Profile the parent, or start worker processes fresh (multiprocessing start \
             method 'spawn' or 'forkserver') and create a Session in them"
    )]
    Forked,

    #[error(
        "the callback caught a panic and stopped recording to protect the process; the counts \
             recorded before it are kept. Please report this with the snapshot attached"
    )]
    Poisoned,
}

impl Error {
    /// The error for an MSPTI call that did not return success, with the fix for the codes users
    /// meet in practice.
    pub fn from_code(function: &'static str, code: MsptiResult, library_says: Option<String>) -> Error {
        let name = result_name(code).map_or_else(|| format!("an unknown msptiResult {code}"), str::to_owned);
        let fix = match code {
            MSPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED => {
                "MSPTI allows one subscriber per process and something else holds it: CANN's `mspti` \
                 Python monitors (KernelMonitor, HcclMonitor, ... while started), torch_npu's MSPTI-based \
                 profiler, msMonitor (dynolog's npu-monitor / nputrace), or an earlier mspti_lens Session \
                 that was not closed. Stop that tool (or restart the kernel) and try again."
                    .to_owned()
            }
            MSPTI_ERROR_WITHOUT_LD_PRELOAD => {
                "The process was not started with LD_PRELOAD naming libmspti.so, so MSPTI cannot intercept \
                  the runtime. Start it as `LD_PRELOAD=$ASCEND_HOME_PATH/lib64/libmspti.so python ...`; for \
                  Jupyter run `python -m mspti_lens install-kernel` and pick that kernel."
                    .to_owned()
            }
            MSPTI_ERROR_INVALID_PARAMETER => {
                "An argument was rejected by the library (unknown domain or callback id, or a stale \
                  subscriber handle)."
                    .to_owned()
            }
            MSPTI_ERROR_NOT_INITIALIZED => "MSPTI is not initialised: no subscriber is active.".to_owned(),
            MSPTI_ERROR_DEVICE_OFFLINE => "The device is offline: check `npu-smi info`.".to_owned(),
            _ => "See the MSPTI documentation for this code.".to_owned(),
        };
        let library_says = library_says.map_or_else(String::new, |s| format!(": \"{s}\""));
        Error::Mspti { function, code, name, library_says, fix }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
