//! The process's id counters: correlation ids (one global counter, each thread's current id),
//! the documented mode's callback correlation ids, and MSTX mark ids (one global counter, shared
//! with HCCL's inner marks).
//!
//! Correlation ids as MSPTI takes them: a hooked runtime wrapper bumps the thread's id right
//! before ENTER (`model::call`), each kernel task-track bumps it again while KERNEL is enabled,
//! each collective node launch while COMMUNICATION is enabled (`model::device`); records carry
//! the thread's current id.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::ground::padded::Padded;

static NEXT_CORRELATION: Padded<AtomicU64> = Padded(AtomicU64::new(0));
thread_local! {
    static CURRENT_CORRELATION: Cell<u64> = const { Cell::new(0) };
}

/// The calling thread's current correlation id (0 until something took one).
pub fn current_correlation() -> u64 {
    CURRENT_CORRELATION.with(|c| c.get())
}

/// Take the next correlation id as this thread's.
pub fn take_correlation() -> u64 {
    let id = NEXT_CORRELATION.fetch_add(1, Ordering::Relaxed) + 1;
    CURRENT_CORRELATION.with(|c| c.set(id));
    id
}

/// The `correlationId` documented mode writes into a call's callback data (no real library does).
static CALLBACK_CORRELATION: AtomicU64 = AtomicU64::new(0);

/// The next call's callback correlation id (documented mode).
pub fn take_callback_correlation() -> u64 {
    CALLBACK_CORRELATION.fetch_add(1, Ordering::Relaxed) + 1
}

static MARK_ID: AtomicU64 = AtomicU64::new(0);

/// Take `n` consecutive mark ids; returns the first.
pub fn take_mark_ids(n: u64) -> u64 {
    MARK_ID.fetch_add(n, Ordering::Relaxed) + 1
}

/// Both counters back to 0, and the calling thread's current correlation id (for tests).
pub fn reset() {
    NEXT_CORRELATION.store(0, Ordering::Relaxed);
    CURRENT_CORRELATION.with(|c| c.set(0));
    MARK_ID.store(0, Ordering::Relaxed);
}
