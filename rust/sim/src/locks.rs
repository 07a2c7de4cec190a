//! Taking a mutex (or waking on a condition variable) whose last holder panicked.
//!
//! Poisoning is ignored on purpose: every mutex of the simulator guards state that each update
//! leaves whole (queues, tables, handles and counters changed by single assignments, pushes or
//! drains), and a panic is already caught at the C boundary. Refusing the lock afterwards would
//! turn that one bug into a library whose later calls all fail, or into a second panic inside an
//! `extern "C"` function, where unwinding aborts the program being profiled.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Lock `m`, also when a holder panicked.
#[inline]
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `cv.wait(g)`, also when a holder panicked meanwhile.
pub(crate) fn wait<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(g).unwrap_or_else(PoisonError::into_inner)
}

/// `cv.wait_timeout(g, d)`, also when a holder panicked meanwhile; the guard only (a caller
/// that needs to know whether it timed out checks its own deadline).
pub(crate) fn wait_timeout<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>, d: Duration) -> MutexGuard<'a, T> {
    cv.wait_timeout(g, d).unwrap_or_else(PoisonError::into_inner).0
}
