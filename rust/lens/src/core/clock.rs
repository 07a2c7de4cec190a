//! The callback's clock. Two reads per call are most of the callback's cost, so the default is
//! the cheapest monotonic clock there is: the TSC, where the kernel itself trusts it as its
//! clocksource (invariant, synchronised across cores); `CLOCK_MONOTONIC` otherwise. On request,
//! the library's own `msptiGetTimestamp`, which puts callback times on MSPTI's clock (and lets the
//! simulator's virtual clock drive exact tests).

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mspti_abi::FnGetTimestamp;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ClockKind {
    Tsc = 0,
    Monotonic = 1,
    Mspti = 2,
}

impl ClockKind {
    pub fn name(self) -> &'static str {
        match self {
            ClockKind::Tsc => "tsc",
            ClockKind::Monotonic => "monotonic",
            ClockKind::Mspti => "mspti",
        }
    }
}

static KIND: AtomicU8 = AtomicU8::new(ClockKind::Monotonic as u8);
/// ns = reading * MULT >> 32: the calibrated rate for the TSC, 2^32 (identity) for the ns clocks,
/// so converting a duration is one multiply with no branch on the clock kind.
const IDENTITY: u64 = 1 << 32;
static TSC_MULT: AtomicU64 = AtomicU64::new(IDENTITY);
static MSPTI_FN: AtomicUsize = AtomicUsize::new(0);
/// Calls to `msptiGetTimestamp` that failed (their reading counts as 0).
pub static MSPTI_CLOCK_ERRORS: AtomicU64 = AtomicU64::new(0);

/// Whether the TSC is usable here: x86-64 and the kernel's clocksource is `tsc`.
pub fn tsc_reliable() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .map(|s| s.trim() == "tsc")
            .unwrap_or(false)
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtsc() -> u64 {
    // SAFETY: RDTSC exists on every x86-64 CPU and has no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn rdtsc() -> u64 {
    0
}

fn monotonic_ns() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Measure the TSC rate against CLOCK_MONOTONIC over ~20 ms (once per process).
fn calibrate_tsc() -> u64 {
    static MULT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *MULT.get_or_init(|| {
        let (t0, c0) = (Instant::now(), rdtsc());
        std::thread::sleep(Duration::from_millis(20));
        let (ns, ticks) = (t0.elapsed().as_nanos(), u128::from(rdtsc() - c0));
        ((ns << 32) / ticks.max(1)) as u64
    })
}

/// Choose the clock for the next recording. `Tsc` falls back to `Monotonic` where the TSC is
/// not reliable; returns the clock actually chosen.
pub fn select(kind: ClockKind, mspti: Option<FnGetTimestamp>) -> ClockKind {
    let kind = match kind {
        ClockKind::Tsc if !tsc_reliable() => ClockKind::Monotonic,
        ClockKind::Mspti if mspti.is_none() => ClockKind::Monotonic,
        k => k,
    };
    match kind {
        ClockKind::Tsc => TSC_MULT.store(calibrate_tsc(), Ordering::Relaxed),
        ClockKind::Mspti => {
            MSPTI_FN.store(mspti.map_or(0, |f| f as usize), Ordering::Relaxed);
            TSC_MULT.store(IDENTITY, Ordering::Relaxed);
        }
        ClockKind::Monotonic => {
            monotonic_ns();
            TSC_MULT.store(IDENTITY, Ordering::Relaxed);
        }
    }
    KIND.store(kind as u8, Ordering::Release);
    kind
}

/// A raw reading: TSC ticks, or ns for the other clocks. Convert differences with `to_ns`.
#[inline(always)]
pub fn now() -> u64 {
    match KIND.load(Ordering::Relaxed) {
        0 => rdtsc(),
        2 => mspti_now(),
        _ => monotonic_ns(),
    }
}

#[inline(never)]
fn mspti_now() -> u64 {
    let f = MSPTI_FN.load(Ordering::Relaxed);
    if f == 0 {
        return FAILED;
    }
    // SAFETY: MSPTI_FN only ever holds a `msptiGetTimestamp` pointer from a library that is never
    // unloaded (see loader.rs), so it has that type and stays valid.
    let f: FnGetTimestamp = unsafe { std::mem::transmute::<usize, FnGetTimestamp>(f) };
    let mut t = 0u64;
    // SAFETY: `t` is a valid out pointer for the call.
    if unsafe { f(&mut t) } != 0 || t == FAILED {
        MSPTI_CLOCK_ERRORS.fetch_add(1, Ordering::Relaxed);
        return FAILED;
    }
    t
}

/// The reading `now()` gives when the clock failed (only `msptiGetTimestamp` can); a pair with
/// such a reading is dropped, never recorded.
pub const FAILED: u64 = u64::MAX;

/// The duration in ns between two raw readings (0 if the clock went backwards).
#[inline(always)]
pub fn to_ns(start: u64, end: u64) -> u64 {
    let d = end.saturating_sub(start);
    // Exact for the ns clocks (d * 2^32 >> 32 = d; no overflow in u128).
    ((u128::from(d) * u128::from(TSC_MULT.load(Ordering::Relaxed))) >> 32) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clock is process-wide: tests that select one take turns.
    static CLOCK_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn ns_clocks_convert_exactly() {
        let _g = CLOCK_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        select(ClockKind::Monotonic, None);
        for (a, b) in [(0u64, 0u64), (5, 1_000_005), (0, u64::MAX), (10, 3)] {
            assert_eq!(to_ns(a, b), b.saturating_sub(a));
        }
    }

    #[test]
    fn tsc_and_monotonic_agree_on_a_sleep() {
        let _g = CLOCK_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        if !tsc_reliable() {
            return;
        }
        select(ClockKind::Tsc, None);
        let (a, t) = (now(), Instant::now());
        std::thread::sleep(Duration::from_millis(30));
        let (d, real) = (to_ns(a, now()), t.elapsed().as_nanos() as f64);
        assert!(((d as f64) - real).abs() / real < 0.02, "tsc {d} vs {real}");
        select(ClockKind::Monotonic, None);
    }
}
