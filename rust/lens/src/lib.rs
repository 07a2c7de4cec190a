//! mspti-lens native core: binds an MSPTI library at run time, pairs every ENTER/EXIT callback
//! into per-thread latency histograms, and merges them into snapshots. The Python binding layer
//! (`py`, feature `python`) only converts.

pub mod activity;
pub mod callback;
pub mod core;
pub mod error;
pub mod ffi;

#[cfg(feature = "python")]
mod py;

pub use error::{Error, Result};
