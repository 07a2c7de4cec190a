//! Time in the simulator: real busy-waits for modelled work, or a per-thread virtual clock.
//!
//! The virtual clock is per thread because callbacks are synchronous on the calling thread: a
//! thread's ENTER and EXIT read its own clock, so a call's measured duration is exactly the
//! duration it was given, whatever other threads do.
//!
//! It lives in the present, as real MSPTI timestamps (CLOCK_REALTIME ns) do, so a client that
//! compares records with its own clock (msMonitor drops every record that ended before its start)
//! sees them: a thread's clock starts at CLOCK_REALTIME when first read, and it is never behind
//! CLOCK_REALTIME when a call starts: a call that finds its thread's clock lagging starts
//! `LEAD_NS` ahead of real time (`begin_call`). Within a call, and from one call to the next, it
//! advances only by the models: the lead keeps a thread's back-to-back calls from finding the
//! clock behind again while simulating them takes real time (a loaded machine, modelled calls
//! shorter than the simulator's own work), so durations are exactly the models' and runs repeat
//! exactly.

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Modes of `msptiGetTimestamp`: real (CLOCK_REALTIME, as the real library's default) or a
/// per-thread virtual clock that calls advance by exactly their modelled duration.
static CLOCK_VIRTUAL: AtomicU8 = AtomicU8::new(0);

/// The newest dev's timestamp callback (`msptiActivityRegisterTimestampCallback`), 0 when none.
static TIMESTAMP_CALLBACK: AtomicUsize = AtomicUsize::new(0);

/// How far ahead of CLOCK_REALTIME a call that found its thread's clock lagging starts, and a
/// job's threads start (`job_start_ns`): more than a loaded machine takes to run a thread's
/// next calls or to start a job's threads, so those find the clock ahead and keep the models'
/// spacing, and every thread of a job starts at the same instant.
pub const LEAD_NS: u64 = 1_000_000_000;

thread_local! {
    /// The thread's virtual time; 0 until first read (then CLOCK_REALTIME).
    static VIRTUAL_NS: Cell<u64> = const { Cell::new(0) };
    /// How many simulated calls are in progress on this thread (a call's work may make another).
    static CALL_DEPTH: Cell<u32> = const { Cell::new(0) };
}

pub fn is_virtual() -> bool {
    CLOCK_VIRTUAL.load(Ordering::Relaxed) != 0
}

/// The clock mode: virtual (`true`) or CLOCK_REALTIME.
pub fn set_virtual(on: bool) {
    CLOCK_VIRTUAL.store(u8::from(on), Ordering::Relaxed);
}

/// CLOCK_REALTIME in ns.
pub fn realtime_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// The calling thread's virtual time (CLOCK_REALTIME the first time a thread reads it).
pub fn virtual_now() -> u64 {
    VIRTUAL_NS.with(|c| match c.get() {
        0 => {
            let now = realtime_ns();
            c.set(now);
            now
        }
        ns => ns,
    })
}

/// Set the calling thread's virtual time (0: CLOCK_REALTIME at the next read). A time behind
/// CLOCK_REALTIME holds until the thread's next call starts (see `begin_call`).
pub fn virtual_set(ns: u64) {
    VIRTUAL_NS.with(|c| c.set(ns));
}

/// Where a job's threads start on the virtual clock: `LEAD_NS` ahead of CLOCK_REALTIME, and not
/// before `after` (the device's last task, the starting thread's time).
pub fn job_start_ns(after: u64) -> u64 {
    realtime_ns().saturating_add(LEAD_NS).max(after)
}

/// What `msptiGetTimestamp` returns: CLOCK_REALTIME ns (the real library's default), or the
/// calling thread's virtual time.
pub fn timestamp_ns() -> u64 {
    if is_virtual() {
        virtual_now()
    } else {
        realtime_ns()
    }
}

/// MSPTI's host clock: the registered timestamp callback, else the simulator's clock
/// (CLOCK_REALTIME ns, or the calling thread's virtual time).
pub fn host_now() -> u64 {
    let f = TIMESTAMP_CALLBACK.load(Ordering::Acquire);
    if f == 0 {
        return timestamp_ns();
    }
    // SAFETY: only ever stored from a non-NULL `unsafe extern "C" fn() -> u64` (see
    // `set_timestamp_callback`), so the transmute restores that type.
    let f: unsafe extern "C" fn() -> u64 = unsafe { std::mem::transmute(f) };
    // SAFETY: the user's callback takes nothing and returns a u64 (C contract).
    unsafe { f() }
}

/// The host clock's source from now on: the user's callback, or None for the simulator's clock.
pub fn set_timestamp_callback(callback: Option<unsafe extern "C" fn() -> u64>) {
    TIMESTAMP_CALLBACK.store(callback.map_or(0, |f| f as usize), Ordering::Release);
}

/// A simulated call in progress on this thread: made by `begin_call`, ended when dropped.
pub struct Call(());

/// A simulated call starts on this thread (before its ENTER): on the virtual clock an outermost
/// call whose thread's clock lags CLOCK_REALTIME starts `LEAD_NS` ahead of it; a call made inside
/// another's work keeps the outer call's clock, which advances only by the models.
#[must_use]
pub fn begin_call() -> Call {
    let depth = CALL_DEPTH.with(|d| {
        let v = d.get();
        d.set(v + 1);
        v
    });
    if depth == 0 && is_virtual() {
        let now = realtime_ns();
        VIRTUAL_NS.with(|c| {
            if c.get() < now {
                c.set(now.saturating_add(LEAD_NS));
            }
        });
    }
    Call(())
}

impl Drop for Call {
    fn drop(&mut self) {
        CALL_DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Spend `ns` of modelled work: advance the virtual clock, or really let that much time pass,
/// sleeping for the coarse part of long waits and spinning for the rest.
pub fn spend(ns: u64) {
    if ns == 0 {
        return;
    }
    if is_virtual() {
        virtual_set(virtual_now().saturating_add(ns));
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
