//! What mspti-lens itself costs, measured while it runs: the CPU its callbacks add and the drain
//! thread's CPU. The callback's share is sampled so that measuring it costs almost nothing: each
//! thread times one callback in `SAMPLE_EVERY`, picked by its callback section word
//! (sections.rs: the word counts the thread's callbacks anyway, so the pick is one test and a
//! branch per callback), called again out of line, with the cheapest clock there is; the clock read's own cost, measured at `calibrate`, is taken
//! off each sample. The total is the sampled time times `SAMPLE_EVERY`.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// One callback in this many is timed, per thread. A timed callback costs about 90 ns more (two
/// counter reads, two shared atomics, the call again), about 0.7 ns per ENTER/EXIT pair at 1 in
/// 256 (1 in 64 measured 2.7 ns against a build without the hook; 1 in 1024 measured no better
/// than 1 in 256 on a shared machine, so the rest was the thread-local countdown's and the
/// layout's, before the pick moved to the section word). A thread making 10,000 calls a second
/// still gives 80 samples a second.
pub const SAMPLE_EVERY: u32 = 256;
/// A sample longer than this was interrupted (descheduled, a page fault): not the callback's own
/// CPU; counted in `skipped`, not in the sum. No callback path takes a tenth of it.
pub const MAX_SAMPLE_NS: u64 = 200_000;

const STAMP_MONOTONIC: u8 = 0;
const STAMP_TSC: u8 = 1;
/// Which clock the samples read: the CPU's counter where the kernel trusts it, else
/// CLOCK_MONOTONIC (chosen by `calibrate`, independent of the session's clock: the simulator's
/// virtual clock, say, is not CPU time).
static STAMP: AtomicU8 = AtomicU8::new(STAMP_MONOTONIC);
/// ns = ticks * STAMP_MULT >> 32.
static STAMP_MULT: AtomicU64 = AtomicU64::new(1 << 32);
/// Two stamps around an empty call, in ticks (the median of many): what a sample's own reads add.
static OVERHEAD_TICKS: AtomicU64 = AtomicU64::new(0);

static SAMPLES: AtomicU64 = AtomicU64::new(0);
static SAMPLED_TICKS: AtomicU64 = AtomicU64::new(0);
static SKIPPED: AtomicU64 = AtomicU64::new(0);
/// CPU time of the activity drain threads, every one this process ran (their thread CPU clocks).
pub static DRAIN_CPU_NS: AtomicU64 = AtomicU64::new(0);

#[inline(always)]
fn stamp() -> u64 {
    if STAMP.load(Ordering::Relaxed) == STAMP_TSC {
        counter()
    } else {
        monotonic_ns()
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn counter() -> u64 {
    // SAFETY: RDTSC exists on every x86-64 CPU and has no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn counter() -> u64 {
    let v: u64;
    // SAFETY: CNTVCT_EL0 is readable at EL0 on Linux (the vDSO reads it too); the ISB keeps the
    // read in program order, as the kernel's own reader does.
    unsafe { core::arch::asm!("isb", "mrs {v}, cntvct_el0", v = out(reg) v, options(nomem, nostack)) };
    v
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
#[inline(always)]
fn counter() -> u64 {
    monotonic_ns()
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out pointer; clock_gettime writes nothing else.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The calling thread's CPU time in ns.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Choose the samples' clock and measure what reading it costs. Called when a session starts;
/// cheap after the first time (the counter's calibration is the clock module's, made once).
pub fn calibrate() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if super::clock::tsc_reliable() {
            STAMP_MULT.store(super::clock::calibration().mult, Ordering::Relaxed);
            STAMP.store(STAMP_TSC, Ordering::Relaxed);
        }
        // The median of many, not the smallest: the counter reads are not ordered with the
        // work between them, so now and then two land a tick apart (the smallest of 4,000 was
        // 1 tick against a median of 26 here), and taking that off each sample left the live
        // figure 1.6x the benchmark's. Called through a pointer the compiler cannot see, as
        // `timed` calls the callback.
        let f = std::hint::black_box(nothing as extern "C" fn(u64, u32, u32, u64));
        let mut t: Vec<u64> = (0..4000).map(|_| time(|| f(0, 0, 0, 0))).collect();
        t.sort_unstable();
        OVERHEAD_TICKS.store(t[t.len() / 2], Ordering::Relaxed);
    });
}

/// Run `callback(a, b, c, d)` (the callback itself, called again) timed, and add its time to the
/// samples. The arguments travel by value, in registers: the hot path builds nothing for this.
///
/// # Safety
/// `callback(a, b, c, d)` must be sound to call.
#[cold]
#[inline(never)]
pub unsafe fn timed<A, B, C, D>(callback: unsafe extern "C" fn(A, B, C, D), a: A, b: B, c: C, d: D) {
    // SAFETY: the caller's promise that `callback(a, b, c, d)` is sound to call.
    let call = || unsafe { callback(a, b, c, d) };
    let ticks = time(call).saturating_sub(OVERHEAD_TICKS.load(Ordering::Relaxed));
    if to_ns(ticks) > MAX_SAMPLE_NS {
        SKIPPED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    SAMPLED_TICKS.fetch_add(ticks, Ordering::Relaxed);
    SAMPLES.fetch_add(1, Ordering::Relaxed);
}

/// Ticks `f` took, between two stamps.
#[inline(always)]
fn time(f: impl FnOnce()) -> u64 {
    let started = stamp();
    f();
    stamp().wrapping_sub(started)
}

/// What timing adds to a sample: two stamps and the call of a function that does nothing.
#[inline(never)]
extern "C" fn nothing(_: u64, _: u32, _: u32, _: u64) {
    std::hint::black_box(());
}

fn to_ns(ticks: u64) -> u64 {
    ((u128::from(ticks) * u128::from(STAMP_MULT.load(Ordering::Relaxed))) >> 32) as u64
}

/// Accumulates a thread's CPU time into a process-wide total as it goes (and when dropped), so the
/// total is readable from any thread, also after the thread ended.
pub struct ThreadCpu {
    total: &'static AtomicU64,
    last: u64,
}

impl ThreadCpu {
    pub fn new(total: &'static AtomicU64) -> ThreadCpu {
        ThreadCpu { total, last: thread_cpu_ns() }
    }

    pub fn tick(&mut self) {
        let now = thread_cpu_ns();
        self.total.fetch_add(now.saturating_sub(self.last), Ordering::Relaxed);
        self.last = now;
    }
}

impl Drop for ThreadCpu {
    fn drop(&mut self) {
        self.tick();
    }
}

/// The process's figures so far.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SelfCost {
    /// Callbacks timed (each stands for `SAMPLE_EVERY`).
    pub samples: u64,
    /// Their time, the clock reads' own cost taken off, in ns.
    pub sampled_ns: u64,
    /// Samples discarded as interrupted (over `MAX_SAMPLE_NS`).
    pub skipped: u64,
    /// What one sample's two clock reads cost, taken off each.
    pub clock_overhead_ns: u64,
    /// "tsc" or "monotonic": the samples' clock.
    pub clock: &'static str,
    pub drain_cpu_ns: u64,
}

impl SelfCost {
    /// The callbacks' CPU: every callback, estimated from the sampled ones.
    pub fn callback_cpu_ns(&self) -> u64 {
        self.sampled_ns.saturating_mul(u64::from(SAMPLE_EVERY))
    }

    /// ns per ENTER/EXIT pair (two callbacks); None before the first sample.
    pub fn ns_per_pair(&self) -> Option<f64> {
        (self.samples > 0).then(|| 2.0 * self.sampled_ns as f64 / self.samples as f64)
    }
}

pub fn read() -> SelfCost {
    SelfCost {
        samples: SAMPLES.load(Ordering::Relaxed),
        sampled_ns: to_ns(SAMPLED_TICKS.load(Ordering::Relaxed)),
        skipped: SKIPPED.load(Ordering::Relaxed),
        clock_overhead_ns: to_ns(OVERHEAD_TICKS.load(Ordering::Relaxed)),
        clock: if STAMP.load(Ordering::Relaxed) == STAMP_TSC { "tsc" } else { "monotonic" },
        drain_cpu_ns: DRAIN_CPU_NS.load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_cpu_total_grows_with_the_work_and_keeps_it_after_the_thread_ends() {
        static TOTAL: AtomicU64 = AtomicU64::new(0);
        std::thread::spawn(|| {
            let _cpu = ThreadCpu::new(&TOTAL);
            let mut x = 0u64;
            let t0 = thread_cpu_ns();
            while thread_cpu_ns() - t0 < 2_000_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        })
        .join()
        .unwrap();
        assert!(TOTAL.load(Ordering::Relaxed) >= 2_000_000);
    }
}
