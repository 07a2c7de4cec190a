//! A sequence lock between one writer (the thread that owns a histogram) and a closer (the thread
//! that ends a window), so a window never holds part of a call.
//!
//! The writer brackets every record in a write section: the sequence word goes odd, the window is
//! read *inside* the section, the record goes to that window's bank, the word goes even. The closer
//! advances the window, makes that visible with a full fence, and then `settle`s each lock: waits
//! only while a section is open. Afterwards no section can still write the closed window's bank
//! (one that began later reads the new window: the two SeqCst fences see to that, the store-load
//! pattern of Dekker's algorithm), so the closer reads that bank alone, whole, and clears it.
//! Unlike a classic seqlock reader it never retries, so a writer recording every 50 ns cannot
//! starve it. `loom` checks the protocol (tests at the end; `make test-loom`).
//!
//! The writer's fence is on the hot path, where a full fence (MFENCE, DMB ISH) would cost more
//! than the rest of a record. On Linux the pair is made asymmetric, as folly's and liburcu's are:
//! the closer calls `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which runs a full barrier on
//! every CPU running a thread of this process, so the writer needs only a compiler fence. Where
//! membarrier is unavailable (old kernels, valgrind, qemu-user) both sides use SeqCst fences. The
//! callback is chosen for one or the other once the process has tried to register
//! (`callback::subscriber`, `light_fence_in`), so it reads no flag for it. The loom model uses
//! SeqCst fences on both sides: what the asymmetric pair implements.

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// One writer's sequence word: odd while a write section is open.
pub struct SeqLock {
    seq: AtomicU64,
}

impl Default for SeqLock {
    fn default() -> Self {
        SeqLock::new()
    }
}

impl SeqLock {
    #[cfg(not(loom))]
    pub const fn new() -> SeqLock {
        SeqLock { seq: AtomicU64::new(0) }
    }

    #[cfg(loom)]
    pub fn new() -> SeqLock {
        SeqLock { seq: AtomicU64::new(0) }
    }

    /// Run `record` in a write section with the window `window()` reads inside it. Only the lock's
    /// one writer may call this. `window` must load with Acquire (so the closer's clearing of a
    /// bank happens before this section writes into it again).
    #[inline(always)]
    pub fn write<R>(&self, window: impl FnOnce() -> u64, record: impl FnOnce(u64) -> R) -> R {
        self.write_in::<RUNTIME, R>(window, record)
    }

    /// `write` with its store-load fence of kind `F` (`light_fence_in`).
    #[inline(always)]
    pub fn write_in<const F: u8, R>(&self, window: impl FnOnce() -> u64, record: impl FnOnce(u64) -> R) -> R {
        let s = self.seq.load(Ordering::Relaxed);
        // Release: a closer that sees this odd word (the next section's) also sees the writes of
        // the section before it (a plain store after a release store does not extend its release
        // sequence).
        self.seq.store(s.wrapping_add(1), Ordering::Release);
        // SeqCst: the odd word is visible before the window is read (store-load order), so a
        // closer that saw an even word knows this section will read its new window (pairs with
        // the fence in `window_advanced`).
        light_fence_in::<F>();
        let r = record(window());
        // Release: the section's writes happen before any closer that sees the even word.
        self.seq.store(s.wrapping_add(2), Ordering::Release);
        r
    }

    /// Wait until no write section that may have read a window before the last
    /// `window_advanced()` is open. Afterwards the older window's data is the caller's alone.
    pub fn settle(&self) {
        // Acquire: the writes of the section that closed with this value happen before ours.
        let s = self.seq.load(Ordering::Acquire);
        if s & 1 == 0 {
            return;
        }
        // One open section: it ends within a record's time (a few instructions, unless the
        // writer is descheduled); any later one reads the new window.
        while self.seq.load(Ordering::Acquire) == s {
            spin();
        }
    }
}

/// The closer's half of the store-load pattern: call after advancing the window (an AcqRel
/// read-modify-write) and before `settle`.
pub fn window_advanced() {
    heavy_fence();
}

/// Which store-load fence a writer uses (`light_fence_in`): `RUNTIME` reads whether the process
/// is registered for the asymmetric fences; a callback that knows (it was chosen after the
/// registration, which never changes afterwards: `fences_in_use`) passes `ASYMMETRIC` or
/// `SYMMETRIC` and reads nothing.
pub const RUNTIME: u8 = 0;
pub const ASYMMETRIC: u8 = 1;
pub const SYMMETRIC: u8 = 2;

/// The writer's half of the store-load pattern, of kind `F`.
#[inline(always)]
pub(crate) fn light_fence_in<const F: u8>() {
    match F {
        RUNTIME => light_fence(),
        // The closer's membarrier upgrades this to a full barrier where it matters (loom models
        // what the pair implements: SeqCst fences on both sides).
        ASYMMETRIC if !cfg!(loom) => compiler_fence_seqcst(),
        _ => fence(Ordering::SeqCst),
    }
}

#[inline(always)]
fn compiler_fence_seqcst() {
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

/// The fences a writer needs in this process now (`ASYMMETRIC` once registered, else
/// `SYMMETRIC`): call after `prepare_fences`; the answer never changes afterwards.
#[cfg(not(loom))]
pub fn fences_in_use() -> u8 {
    if asymmetric::registered() {
        ASYMMETRIC
    } else {
        SYMMETRIC
    }
}

#[cfg(loom)]
pub fn fences_in_use() -> u8 {
    SYMMETRIC
}

#[cfg(loom)]
#[inline(always)]
pub(crate) fn light_fence() {
    fence(Ordering::SeqCst);
}

#[cfg(loom)]
pub(crate) fn heavy_fence() {
    fence(Ordering::SeqCst);
}

#[cfg(loom)]
pub fn prepare_fences() {}

#[cfg(not(loom))]
pub use asymmetric::register as prepare_fences;
// Also quiescence.rs's pair (the same store-load pattern around the run word).
#[cfg(not(loom))]
pub(crate) use asymmetric::{heavy_fence, light_fence};

#[cfg(not(loom))]
mod asymmetric {
    use std::sync::atomic::{compiler_fence, fence, AtomicBool, Ordering};

    /// Set once, before any recording run, when this process is registered for expedited
    /// private membarrier; never unset.
    static EXPEDITED: AtomicBool = AtomicBool::new(false);

    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    const SYS_MEMBARRIER: std::ffi::c_long = 324;
    #[cfg(all(target_os = "linux", target_arch = "aarch64"))]
    const SYS_MEMBARRIER: std::ffi::c_long = 283;
    const CMD_PRIVATE_EXPEDITED: std::ffi::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: std::ffi::c_long = 1 << 4;

    #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
    fn membarrier(cmd: std::ffi::c_long) -> bool {
        extern "C" {
            fn syscall(n: std::ffi::c_long, ...) -> std::ffi::c_long;
        }
        // SAFETY: membarrier(cmd, flags = 0, cpu_id = 0) touches no memory of ours.
        unsafe { syscall(SYS_MEMBARRIER, cmd, 0 as std::ffi::c_long, 0 as std::ffi::c_long) == 0 }
    }

    #[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
    fn membarrier(_cmd: std::ffi::c_long) -> bool {
        false
    }

    /// Register for the asymmetric fences (once; `Session::new` calls it before the first run).
    /// Writers read the flag after the run word's Acquire load, so a run sees it set or not
    /// throughout; closers (snapshot, reset) are ordered after the session's creation, and so
    /// after the registration.
    pub fn register() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            if membarrier(CMD_REGISTER_PRIVATE_EXPEDITED) && membarrier(CMD_PRIVATE_EXPEDITED) {
                EXPEDITED.store(true, Ordering::Release);
            }
        });
    }

    /// Whether `register` succeeded (it has run, and the process uses the asymmetric fences).
    pub fn registered() -> bool {
        EXPEDITED.load(Ordering::Acquire)
    }

    #[inline(always)]
    pub fn light_fence() {
        if EXPEDITED.load(Ordering::Relaxed) {
            // The closer's membarrier upgrades this to a full barrier where it matters.
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
    }

    pub fn heavy_fence() {
        fence(Ordering::SeqCst);
        if EXPEDITED.load(Ordering::Acquire) {
            // Cannot fail once registered (the kernel documents no error for a registered mm).
            membarrier(CMD_PRIVATE_EXPEDITED);
        }
        fence(Ordering::SeqCst);
    }
}

#[cfg(not(loom))]
fn spin() {
    std::thread::yield_now();
}

#[cfg(loom)]
fn spin() {
    loom::thread::yield_now();
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The window protocol in loom's model of the C++ memory model: a writer records calls
    //! (count, sum, max of one call per section) into the bank of the window it read; a closer
    //! closes windows as `windows.rs` does (advance, fence, settle, take the closed bank, clear
    //! it). Every interleaving and every allowed stale read is explored.
    use super::*;
    use loom::sync::atomic::AtomicU64;
    use loom::sync::Arc;

    #[derive(Default)]
    struct Bank {
        count: AtomicU64,
        sum: AtomicU64,
        max: AtomicU64,
    }

    struct Model {
        lock: SeqLock,
        window: AtomicU64,
        banks: [Bank; 2],
    }

    impl Model {
        fn new() -> Model {
            Model { lock: SeqLock::new(), window: AtomicU64::new(0), banks: Default::default() }
        }

        /// The writer's record: three separate relaxed stores, as in the histogram.
        fn record(&self, v: u64) {
            self.lock.write(
                || self.window.load(Ordering::Acquire),
                |w| {
                    let b = &self.banks[(w & 1) as usize];
                    let n = b.count.load(Ordering::Relaxed);
                    b.count.store(n + 1, Ordering::Relaxed);
                    b.sum.store(b.sum.load(Ordering::Relaxed) + v, Ordering::Relaxed);
                    if n == 0 || v > b.max.load(Ordering::Relaxed) {
                        b.max.store(v, Ordering::Relaxed);
                    }
                },
            );
        }

        /// Close the current window: returns its (count, sum, max) and clears its bank.
        fn close(&self) -> (u64, u64, u64) {
            let w = self.window.fetch_add(1, Ordering::AcqRel);
            window_advanced();
            self.lock.settle();
            let b = &self.banks[(w & 1) as usize];
            let got = (
                b.count.load(Ordering::Relaxed),
                b.sum.load(Ordering::Relaxed),
                b.max.load(Ordering::Relaxed),
            );
            b.count.store(0, Ordering::Relaxed);
            b.sum.store(0, Ordering::Relaxed);
            b.max.store(0, Ordering::Relaxed);
            got
        }
    }

    /// A window's (count, sum, max) must be made of whole calls: with calls of 1 and 100, sum
    /// determines which calls are in it, and count and max must agree.
    fn check_whole(w: (u64, u64, u64)) {
        let (count, sum, max) = w;
        let expected = match sum {
            0 => (0, 0),
            1 => (1, 1),
            100 => (1, 100),
            101 => (2, 100),
            _ => panic!("window sum {sum} is not a sum of whole calls"),
        };
        assert_eq!((count, max), expected, "window {w:?} splits a call");
    }

    #[test]
    fn a_close_racing_a_writer_never_splits_a_call_and_loses_nothing() {
        loom::model(|| {
            let m = Arc::new(Model::new());
            let m2 = m.clone();
            let writer = loom::thread::spawn(move || {
                m2.record(1);
                m2.record(100);
            });
            let first = m.close();
            writer.join().unwrap();
            let second = m.close();
            check_whole(first);
            check_whole(second);
            assert_eq!(first.0 + second.0, 2);
            assert_eq!(first.1 + second.1, 101);
            assert_eq!(first.2.max(second.2), 100);
        });
    }

    #[test]
    fn two_closes_racing_a_writer_clear_a_bank_before_it_is_reused() {
        // The writer may reach window 2, which reuses bank 0: the first close's clearing must
        // happen before those records, or they would be wiped or added to stale counts.
        loom::model(|| {
            let m = Arc::new(Model::new());
            let m2 = m.clone();
            let writer = loom::thread::spawn(move || {
                m2.record(1);
                m2.record(100);
            });
            let a = m.close();
            let b = m.close();
            writer.join().unwrap();
            let c = m.close();
            for w in [a, b, c] {
                check_whole(w);
            }
            assert_eq!(a.0 + b.0 + c.0, 2);
            assert_eq!(a.1 + b.1 + c.1, 101);
        });
    }

    #[test]
    fn without_the_store_load_fences_a_close_can_lose_a_call() {
        // The fences are needed: the same protocol with the writer's fence weakened to Release
        // lets loom find an interleaving that breaks it (checked by catching the model's panic).
        let broke = std::panic::catch_unwind(|| {
            loom::model(|| {
                let m = Arc::new(Model::new());
                let m2 = m.clone();
                let writer = loom::thread::spawn(move || {
                    let s = m2.lock.seq.load(Ordering::Relaxed);
                    m2.lock.seq.store(s + 1, Ordering::Relaxed);
                    fence(Ordering::Release);
                    let w = m2.window.load(Ordering::Acquire);
                    let b = &m2.banks[(w & 1) as usize];
                    b.count.store(b.count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                    b.sum.store(b.sum.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                    b.max.store(1, Ordering::Relaxed);
                    m2.lock.seq.store(s + 2, Ordering::Release);
                });
                let first = m.close();
                writer.join().unwrap();
                let second = m.close();
                assert_eq!(first.0 + second.0, 1, "a call was lost or doubled");
            });
        });
        let why = broke.expect_err("loom found no interleaving that needs the fences");
        let text = why.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(text.contains("lost or doubled"), "the model failed otherwise: {text}");
    }
}
