//! Activity timestamps on the session's clock. Where the library has
//! `msptiActivityRegisterTimestampCallback` (newest dev only; it must be registered before any
//! kind is enabled), MSPTI takes its timestamps from our callback, which reads the session's own
//! clock and puts it on the CLOCK_REALTIME scale with one offset sampled when the bridge is set:
//! records, launch spans and callbacks then share one clock, without MSPTI's 7 s re-anchoring
//! steps. Elsewhere the spans sample MSPTI's clock (`msptiGetTimestamp`) or CLOCK_REALTIME beside
//! ours, as before. Not when the session's clock is MSPTI's own (`clock="mspti"`): it already is.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::core::clock;

static ON: AtomicBool = AtomicBool::new(false);
static ANCHOR_READING: AtomicU64 = AtomicU64::new(0);
static ANCHOR_REALTIME: AtomicU64 = AtomicU64::new(0);

/// Our `msptiTimestampCallbackFunc`: the session's clock as CLOCK_REALTIME-scale ns. MSPTI may
/// call it on any of its threads, under its locks: it reads atomics and a clock, nothing else.
pub extern "C" fn session_timestamp() -> u64 {
    // ON is only set while the session's clock is not MSPTI's, so clock::now() never calls back
    // into MSPTI (which would call us again).
    if ON.load(Ordering::Acquire) {
        let r = clock::now();
        if r != clock::FAILED {
            if let Some(d) = clock::to_ns(ANCHOR_READING.load(Ordering::Relaxed), r) {
                return ANCHOR_REALTIME.load(Ordering::Relaxed).wrapping_add(d);
            }
        }
    }
    clock::wall_ns()
}

/// `session_timestamp` with `msptiGetTimestamp`'s signature, for the launch spans.
///
/// # Safety
/// `t` must be a valid pointer to a u64.
pub unsafe extern "C" fn session_get_timestamp(t: *mut u64) -> u32 {
    if t.is_null() {
        return 1;
    }
    // SAFETY: non-NULL, and valid by the contract.
    unsafe { *t = session_timestamp() };
    0
}

/// Anchor the bridge to the session's clock (selected already) and turn it on. The anchor is
/// taken once per collector, so every window of a session shares one offset.
pub fn anchor(first: bool) {
    if first {
        let rt0 = clock::wall_ns();
        let r = clock::now();
        let rt1 = clock::wall_ns();
        ANCHOR_READING.store(r, Ordering::Relaxed);
        ANCHOR_REALTIME.store(rt0 + (rt1.saturating_sub(rt0)) / 2, Ordering::Relaxed);
    }
    ON.store(true, Ordering::Release);
}

pub fn off() {
    ON.store(false, Ordering::Release);
}

pub fn is_on() -> bool {
    ON.load(Ordering::Acquire)
}
