//! The thin binding layer: converts between the core and Python, and nothing else. One file per
//! class, module-level functions in `functions`, exceptions and the error mapping in `errors`;
//! the module itself is declared in `lib.rs`.

pub(crate) mod activity;
pub(crate) mod arrivals;
pub(crate) mod errors;
pub(crate) mod functions;
pub(crate) mod library;
pub(crate) mod session;
pub(crate) mod snapshot;
pub(crate) mod timeline;
