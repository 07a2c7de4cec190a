//! The MSPTI "sys" layer: the C ABI (re-exported from `mspti-abi`) and the run-time loader.

pub use mspti_abi::*;

pub mod loader;
