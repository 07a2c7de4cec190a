//! The thin binding layer: converts between the core and Python, and nothing else. One file per
//! class, module-level functions in `functions`, exceptions and the error mapping in `errors`;
//! the module itself is assembled in `lib.rs`.

pub mod errors;
pub mod functions;
pub mod library;
pub mod session;
pub mod snapshot;
