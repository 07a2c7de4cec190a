//! Time in the simulator: real busy-waits for modelled work, or a per-thread virtual clock.
//!
//! The virtual clock is per thread because callbacks are synchronous on the calling thread: a
//! thread's ENTER and EXIT read its own clock, so a call's measured duration is exactly the
//! duration it was given, whatever other threads do.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::state::CLOCK_VIRTUAL;

/// Where every thread's virtual clock starts: a CLOCK_REALTIME-sized instant (2023-11-14 22:13:20
/// UTC), so virtual timestamps have the 19 digits real ones have (Huawei's st checks match
/// `\d{19}`), yet stay the same from run to run.
pub const VIRTUAL_BASE_NS: u64 = 1_700_000_000_000_000_000;

thread_local! {
    static VIRTUAL_NS: Cell<u64> = const { Cell::new(VIRTUAL_BASE_NS) };
}

pub fn is_virtual() -> bool {
    CLOCK_VIRTUAL.load(Ordering::Relaxed) != 0
}

pub fn virtual_now() -> u64 {
    VIRTUAL_NS.with(|c| c.get())
}

pub fn virtual_set(ns: u64) {
    VIRTUAL_NS.with(|c| c.set(ns));
}

/// What `msptiGetTimestamp` returns: CLOCK_REALTIME ns (the real library's default), or the
/// calling thread's virtual time.
pub fn timestamp_ns() -> u64 {
    if is_virtual() {
        virtual_now()
    } else {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
    }
}

/// Spend `ns` of modelled work: advance the virtual clock, or really let that much time pass,
/// sleeping for the coarse part of long waits and spinning for the rest.
pub fn spend(ns: u64) {
    if ns == 0 {
        return;
    }
    if is_virtual() {
        VIRTUAL_NS.with(|c| c.set(c.get().saturating_add(ns)));
        return;
    }
    let start = Instant::now();
    let total = Duration::from_nanos(ns);
    const SPIN_TAIL: Duration = Duration::from_micros(150);
    if total > SPIN_TAIL * 2 {
        std::thread::sleep(total - SPIN_TAIL);
    }
    while start.elapsed() < total {
        std::hint::spin_loop();
    }
}

/// Spin (or sleep) until `deadline`; used by real-time replay to keep a trace's own spacing.
pub fn wait_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        spend((deadline - now).as_nanos() as u64);
    }
}
