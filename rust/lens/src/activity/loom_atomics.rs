//! The atomics of the activity side's concurrency protocols: std's, or loom's in `--cfg loom`
//! builds (the model tests in `pool.rs` and `launch_hooks.rs`). Process-wide statics stay std
//! (loom's are not const).

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(not(loom))]
pub use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize};
