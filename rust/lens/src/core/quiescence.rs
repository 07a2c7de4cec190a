//! Quiescence: a stop waits until no callback that may have read a recording run is still inside,
//! so the period's last window holds every call such a callback records.
//!
//! A callback reads the run word (windows::RUN) once, early, and records at its end. A stop that
//! ends the run and takes the last window at once would miss the record of a callback that read
//! "recording" just before the end and writes just after the take: that call would be in no
//! window and no counter. So every callback runs inside a section on its thread's shard: a
//! sequence word goes odd before the run word is read and even after the last write. The stop
//! ends the run, makes that visible with the heavy fence, then waits while any shard's section
//! that was open at that moment is still open. A section that opens later reads the ended run and
//! records nothing (the store-load pattern of Dekker's algorithm, with the asymmetric fences of
//! seqlock.rs: on the hot path only a compiler fence, one load and two stores to the thread's own
//! cache line). `loom` checks the protocol (tests at the end; `make test-loom`). The callback's
//! guard and the stop's wait over every shard are in sections.rs.
//!
//! The wait is bounded: a callback descheduled for longer than the bound keeps the stop waiting no
//! further; it is counted (`UNSETTLED`, in the process's health and the window's metadata), since
//! its one call may then be missing from the window. A thread's very first callback has no shard
//! yet and is not covered: it can only open a call (ENTER) or find nothing to close, never record
//! one.

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(loom)]
use super::seqlock::heavy_fence;
use super::seqlock::{light_fence_in, RUNTIME};

/// Threads a stop stopped waiting for (each may have one call in no window): process-wide,
/// cumulative.
pub static UNSETTLED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// EXITs that reached the callback after a stop took effect, of calls entered while recording: MSPTI
/// had decided to deliver them before the disable returned (nothing in its contract makes the
/// disable wait for a delivery under way). Their calls are in no window (the period's last one
/// counted them in flight); counted here, process-wide and cumulative, so they are shown.
pub static LATE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// One thread's callback section: odd while its callback runs. Written only by its owner thread.
pub struct Quiescence {
    seq: AtomicU64,
}

impl Default for Quiescence {
    fn default() -> Self {
        Quiescence::new()
    }
}

impl Quiescence {
    #[cfg(not(loom))]
    pub const fn new() -> Quiescence {
        Quiescence { seq: AtomicU64::new(0) }
    }

    #[cfg(loom)]
    pub fn new() -> Quiescence {
        Quiescence { seq: AtomicU64::new(0) }
    }

    /// Open the section, before the callback reads the run word; returns the word as found: even
    /// when this opened the section, odd inside an open one (a nested callback is already
    /// covered). Even words count the thread's sections, two apart (self_cost.rs samples by it).
    /// Only the owner calls it.
    #[inline(always)]
    pub fn enter(&self) -> u64 {
        self.enter_in::<RUNTIME>()
    }

    /// `enter` with its store-load fence of kind `F` (seqlock.rs `light_fence_in`).
    #[inline(always)]
    pub fn enter_in<const F: u8>(&self) -> u64 {
        let s = self.seq.load(Ordering::Relaxed);
        if s & 1 != 0 {
            return s;
        }
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        // Store-load order: the odd word is visible before the run word is read (pairs with the
        // stop's heavy fence after it ends the run).
        light_fence_in::<F>();
        s
    }

    /// Close the section `enter` opened (`found` is what it returned). The word is still
    /// `found + 1`: only the owner writes it, and a nested section leaves it alone.
    #[inline(always)]
    pub fn leave(&self, found: u64) {
        if found & 1 == 0 {
            // Release: the callback's records happen before a stop that sees the even word.
            self.seq.store(found.wrapping_add(2), Ordering::Release);
        }
    }

    /// Wait while the section open now (if any) stays open and `more()` says to go on; returns
    /// whether no section that was open is still open.
    pub fn settle(&self, mut more: impl FnMut() -> bool) -> bool {
        // Acquire: the records of the section that closed with this value happen before ours.
        let s = self.seq.load(Ordering::Acquire);
        if s & 1 == 0 {
            return true;
        }
        while self.seq.load(Ordering::Acquire) == s {
            if !more() {
                return false;
            }
            spin();
        }
        true
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_nested_enter_leaves_the_outer_section_open_until_the_outer_leave() {
        let q = Quiescence::new();
        let outer = q.enter();
        let inner = q.enter();
        assert_eq!((outer, inner), (0, 1));
        q.leave(inner);
        assert!(!q.settle(|| false), "the outer section is still open");
        q.leave(outer);
        assert!(q.settle(|| false));
    }

    #[test]
    fn a_section_that_stays_open_is_waited_for_only_while_asked() {
        let q = Quiescence::new();
        let opened = q.enter();
        assert_eq!(opened, 0);
        let mut asked = 0;
        assert!(!q.settle(|| {
            asked += 1;
            asked < 3
        }));
        assert_eq!(asked, 3);
        q.leave(opened);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The stop in loom's model of the C++ memory model: a callback thread runs the callback's
    //! shape (section open, read the run word, record into the window it reads if recording,
    //! section closed); the stopper ends the run, settles every section, and takes the last window
    //! as windows.rs does. Every call whose callback read the recording run must be in that window,
    //! and nothing may be recorded after it.
    use super::*;
    use crate::core::seqlock::{window_advanced, SeqLock};
    use loom::sync::atomic::AtomicU64;
    use loom::sync::Arc;

    const RECORDING: u64 = 1;

    struct Model {
        quiescence: Quiescence,
        run: AtomicU64,
        lock: SeqLock,
        window: AtomicU64,
        banks: [AtomicU64; 2],
        /// Callbacks that read the recording run (what the simulator's count stands for).
        saw_recording: AtomicU64,
    }

    impl Model {
        fn new() -> Model {
            Model {
                quiescence: Quiescence::new(),
                run: AtomicU64::new(RECORDING),
                lock: SeqLock::new(),
                window: AtomicU64::new(0),
                banks: Default::default(),
                saw_recording: AtomicU64::new(0),
            }
        }

        /// One EXIT callback: `covered` false leaves out the section (the broken protocol).
        fn callback(&self, covered: bool) {
            // Not covered: as if inside an open section (an odd word), so nothing opens or closes.
            let found = if covered { self.quiescence.enter() } else { 1 };
            if self.run.load(Ordering::Acquire) & RECORDING != 0 {
                self.saw_recording.fetch_add(1, Ordering::Relaxed);
                self.lock.write(
                    || self.window.load(Ordering::Acquire),
                    |w| {
                        let b = &self.banks[(w & 1) as usize];
                        b.store(b.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                    },
                );
            }
            self.quiescence.leave(found);
        }

        /// The stop: end the run, settle, take the last window (its count).
        fn stop_and_take(&self) -> u64 {
            self.run.fetch_and(!RECORDING, Ordering::AcqRel);
            heavy_fence();
            self.quiescence.settle(|| true);
            let w = self.window.fetch_add(1, Ordering::AcqRel);
            window_advanced();
            self.lock.settle();
            let b = &self.banks[(w & 1) as usize];
            let n = b.load(Ordering::Relaxed);
            b.store(0, Ordering::Relaxed);
            n
        }
    }

    fn run_model(covered: bool) {
        loom::model(move || {
            let m = Arc::new(Model::new());
            let m2 = m.clone();
            let caller = loom::thread::spawn(move || {
                m2.callback(covered);
                m2.callback(covered);
            });
            let last = m.stop_and_take();
            caller.join().unwrap();
            let saw = m.saw_recording.load(Ordering::Relaxed);
            assert_eq!(last, saw, "a call whose callback read the recording run is not in the last window");
        });
    }

    #[test]
    fn the_last_window_holds_every_call_whose_callback_read_the_recording_run() {
        run_model(true);
    }

    #[test]
    fn without_the_section_a_stop_can_lose_a_call() {
        let broke = std::panic::catch_unwind(|| run_model(false));
        let why = broke.expect_err("loom found no interleaving that needs the section");
        let text = why.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(text.contains("not in the last window"), "the model failed otherwise: {text}");
    }
}
