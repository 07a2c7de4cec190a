//! The callback's clock. Two reads per call are most of the callback's cost, so the default is
//! the cheapest monotonic clock there is: the TSC, where the kernel itself trusts it as its
//! clocksource (invariant, synchronised across cores); `CLOCK_MONOTONIC` otherwise. On request,
//! the library's own `msptiGetTimestamp`, which puts callback times on MSPTI's clock (and lets the
//! simulator's virtual clock drive exact tests).

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
#[cfg(not(target_arch = "aarch64"))]
use std::time::Duration;
use std::time::Instant;

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

/// The kernel's clocksource, as it names it.
fn kernel_clocksource() -> Option<String> {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Whether the CPU's counter is usable here: where the kernel itself trusts it as its clocksource
/// (invariant and synchronised across cores): the TSC on x86-64 (`tsc`), the generic timer's
/// virtual counter CNTVCT_EL0 on aarch64 (`arch_sys_counter`, the Kunpeng default).
pub fn tsc_reliable() -> bool {
    let want = if cfg!(target_arch = "x86_64") {
        "tsc"
    } else if cfg!(target_arch = "aarch64") {
        "arch_sys_counter"
    } else {
        return false;
    };
    kernel_clocksource().as_deref() == Some(want)
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtsc() -> u64 {
    // SAFETY: RDTSC exists on every x86-64 CPU and has no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn rdtsc() -> u64 {
    let v: u64;
    // SAFETY: CNTVCT_EL0 is readable at EL0 on Linux (the vDSO reads it too); the ISB keeps the
    // read from being speculated ahead of the code before it, as the kernel's own reader does.
    unsafe { core::arch::asm!("isb", "mrs {v}, cntvct_el0", v = out(reg) v, options(nomem, nostack)) };
    v
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
#[inline(always)]
fn rdtsc() -> u64 {
    0
}

fn monotonic_ns() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// The counter's rate as ns = ticks * mult >> 32, and a bound on its relative error.
#[derive(Clone, Copy, Debug)]
pub struct Calibration {
    pub mult: u64,
    pub relative_error: f64,
}

/// aarch64: the counter's frequency is architectural (CNTFRQ_EL0), nothing to measure.
#[cfg(target_arch = "aarch64")]
fn calibrate_counter() -> Calibration {
    let f: u64;
    // SAFETY: CNTFRQ_EL0 is readable at EL0; reading it has no side effects.
    unsafe { core::arch::asm!("mrs {f}, cntfrq_el0", f = out(reg) f, options(nomem, nostack)) };
    Calibration { mult: ((1_000_000_000u128 << 32) / u128::from(f.max(1))) as u64, relative_error: 0.0 }
}

/// One counter reading bracketed between two CLOCK_MONOTONIC readings: (counter, the brackets'
/// midpoint, half their distance), the narrowest of a few tries (a try is wide when the thread was
/// interrupted between the reads).
#[cfg(not(target_arch = "aarch64"))]
fn bracketed_reading() -> (u64, f64, f64) {
    let mut best = (0, 0.0, f64::INFINITY);
    for _ in 0..16 {
        let a = monotonic_ns();
        let c = rdtsc();
        let b = monotonic_ns();
        let half = (b - a) as f64 / 2.0;
        if half < best.2 {
            best = (c, (a as f64 + b as f64) / 2.0, half);
        }
    }
    best
}

/// x86-64: measure the TSC rate against CLOCK_MONOTONIC over ~20 ms. Each counter read lies
/// between two clock reads, so the error is bounded by the brackets' widths, whatever the load.
#[cfg(not(target_arch = "aarch64"))]
fn calibrate_counter() -> Calibration {
    let (c0, t0, e0) = bracketed_reading();
    std::thread::sleep(Duration::from_millis(20));
    let (c1, t1, e1) = bracketed_reading();
    let (ns, ticks) = (t1 - t0, c1.wrapping_sub(c0).max(1));
    Calibration { mult: ((ns * 4_294_967_296.0) / ticks as f64) as u64, relative_error: (e0 + e1 + 1.0) / ns }
}

/// The counter's calibration (measured once per process).
pub fn calibration() -> Calibration {
    static CAL: std::sync::OnceLock<Calibration> = std::sync::OnceLock::new();
    *CAL.get_or_init(calibrate_counter)
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
        ClockKind::Tsc => TSC_MULT.store(calibration().mult, Ordering::Relaxed),
        ClockKind::Mspti => {
            MSPTI_FN.store(mspti.map_or(0, |f| f as usize), Ordering::Relaxed);
            TSC_MULT.store(IDENTITY, Ordering::Relaxed);
        }
        ClockKind::Monotonic => {
            monotonic_ns();
            TSC_MULT.store(IDENTITY, Ordering::Relaxed);
        }
    }
    // Release, and the callback reads KIND and TSC_MULT Relaxed: they are set before the run
    // begins, and the callback's Acquire load of the RUN word (windows.rs) orders them.
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

/// CLOCK_REALTIME now, in ns: the scale activity records, windows and kept calls are reported on.
pub fn wall_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// A raw reading taken earlier as CLOCK_REALTIME ns, given a reading and the wall clock both taken
/// now. MSPTI's clock is already on that scale (activity records share it, so host and device
/// times line up, the simulator's virtual clock included); the others are bridged as the wall
/// clock now minus the time elapsed since the reading.
pub fn to_wall_ns(raw: u64, raw_now: u64, wall_now: u64) -> u64 {
    if KIND.load(Ordering::Relaxed) == ClockKind::Mspti as u8 {
        return raw;
    }
    wall_now.saturating_sub(to_ns(raw, raw_now).unwrap_or(0))
}

/// The reading `now()` gives when the clock failed (only `msptiGetTimestamp` can); a pair with
/// such a reading is dropped, never recorded.
pub const FAILED: u64 = u64::MAX;

/// The duration in ns between two raw readings; None when the clock went backwards (MSPTI's
/// timestamps follow CLOCK_REALTIME, which can be stepped back): such a pair is dropped.
#[inline(always)]
pub fn to_ns(start: u64, end: u64) -> Option<u64> {
    let d = end.checked_sub(start)?;
    // Exact for the ns clocks (d * 2^32 >> 32 = d; no overflow in u128).
    Some(((u128::from(d) * u128::from(TSC_MULT.load(Ordering::Relaxed))) >> 32) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::locks::lock;

    /// The clock is process-wide: tests that select one take turns.
    static CLOCK_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn ns_clocks_convert_exactly_and_a_backwards_clock_gives_none() {
        let _g = lock(&CLOCK_LOCK);
        select(ClockKind::Monotonic, None);
        for (a, b) in [(0u64, 0u64), (5, 1_000_005), (0, u64::MAX)] {
            assert_eq!(to_ns(a, b), Some(b - a));
        }
        assert_eq!(to_ns(10, 3), None);
    }

    #[test]
    fn the_cpu_counter_is_chosen_exactly_where_the_kernel_trusts_it_and_agrees_with_monotonic() {
        let _g = lock(&CLOCK_LOCK);
        let chosen = select(ClockKind::Tsc, None);
        if !tsc_reliable() {
            // This machine's kernel does not trust the counter: the fallback must be taken.
            assert_eq!(chosen, ClockKind::Monotonic, "clocksource {:?}", kernel_clocksource());
            return;
        }
        assert_eq!(chosen, ClockKind::Tsc);
        // The counter read lies between two monotonic reads at each end, so the true interval is
        // within [inner, outer]; the conversion may add the calibration's own bounded error.
        let t0 = monotonic_ns();
        let a = now();
        let t1 = monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let t2 = monotonic_ns();
        let b = now();
        let t3 = monotonic_ns();
        let d = to_ns(a, b).unwrap() as f64;
        let err = calibration().relative_error;
        let (inner, outer) = ((t2 - t1) as f64, (t3 - t0) as f64);
        assert!(
            d >= inner * (1.0 - err) - 1.0 && d <= outer * (1.0 + err) + 1.0,
            "{d} not in [{inner}, {outer}] ± {err}"
        );
        select(ClockKind::Monotonic, None);
    }
}
