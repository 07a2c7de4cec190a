//! The MSPTI "sys" layer: the C ABI (re-exported from `mspti-abi`), where a library is looked for
//! (`discovery`), the check before dlopen (`elf`) and the binding of its symbols (`symbols`).

pub use mspti_abi::*;

pub mod discovery;
pub mod elf;
pub mod symbols;

pub use symbols::{MsptiLibrary, Origin};
