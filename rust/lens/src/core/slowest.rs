//! The K slowest calls per (thread, key) and window: when each began, how long it took, on which
//! thread. Constant memory (2 x K slots per key histogram), and the common path adds one compare.
//!
//! The gate lives in the key's histogram, one word per bank beside the sums every record writes
//! (hist.rs `record_and`), cleared with the bank when its window closes: a call at or past it
//! (every call until K are kept, then only those slower than the K-th) reaches `keep`, the cold
//! path, which rewrites the fastest slot and returns the new gate. A shard handed to a new thread
//! carries the gate with the histogram, ordered by the hand-over.
//!
//! Slots come in two banks, by window parity, and each slot carries its window: the closed
//! window's slowest calls stay readable while the writer fills the next one, and a bank needs no
//! clearing (slots of another window count as empty). Each slot is a one-writer sequence lock
//! (odd while written); a reader retries a slot it saw change, so it never returns half a call.

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// Calls kept per (thread, key) and window. The loom model keeps 2 (the protocol does not depend on
/// K; every slot of a bank is one more set of atomics in the model's state space).
pub const K: usize = if cfg!(loom) { 2 } else { 8 };
/// A reader gives up a slot its writer rewrote this many times in a row (never seen in practice:
/// a rewrite takes a few stores).
const READ_TRIES: usize = if cfg!(loom) { 2 } else { 64 }; // loom: keep the model small

/// One kept call, as read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlowCall {
    /// Duration in ns.
    pub duration: u64,
    /// The clock reading at ENTER (the session's clock: convert with `clock::to_ns`).
    pub start: u64,
    /// OS thread id of the caller.
    pub thread_id: u32,
}

struct Slot {
    /// Odd while the writer rewrites the slot.
    seq: AtomicU64,
    /// The window the slot belongs to, plus 1 (0: never written).
    window: AtomicU64,
    duration: AtomicU64,
    start: AtomicU64,
    thread_id: AtomicU64,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            seq: AtomicU64::new(0),
            window: AtomicU64::new(0),
            duration: AtomicU64::new(0),
            start: AtomicU64::new(0),
            thread_id: AtomicU64::new(0),
        }
    }
}

/// The slowest calls of one (thread, key). Only the owning thread calls `keep`.
pub struct SlowestCalls {
    banks: [[Slot; K]; 2],
}

impl Default for SlowestCalls {
    fn default() -> Self {
        SlowestCalls::new()
    }
}

impl SlowestCalls {
    pub fn new() -> SlowestCalls {
        SlowestCalls { banks: std::array::from_fn(|_| std::array::from_fn(|_| Slot::new())) }
    }

    /// Keep one call of `window` if it is among the K slowest so far (only the owning thread
    /// calls this, for calls at or past the gate); returns the new gate: 0 while a slot is free,
    /// else the K-th largest duration kept + 1.
    #[cold]
    #[inline(never)]
    pub fn keep(&self, duration: u64, start: u64, window: u64) -> u64 {
        let bank = &self.banks[(window & 1) as usize];
        let tag = window.wrapping_add(1);
        // A slot's duration in this window, None when it holds another window's call (free).
        let kept =
            |s: &Slot| (s.window.load(Ordering::Relaxed) == tag).then(|| s.duration.load(Ordering::Relaxed));
        // The slot to replace: a free one, else the fastest kept (None orders before Some).
        let (i, smallest) = bank.iter().map(kept).enumerate().min_by_key(|&(_, d)| d).expect("K > 0");
        if smallest.is_none_or(|m| duration > m) {
            write(&bank[i], tag, duration, start, u64::from(thread_id()));
        }
        bank.iter().map(kept).min().flatten().map_or(0, |kth| kth.saturating_add(1))
    }

    /// The calls kept for `window` (any order). Safe to call from any thread at any time.
    pub fn read(&self, window: u64, out: &mut Vec<SlowCall>) {
        let tag = window.wrapping_add(1);
        for s in &self.banks[(window & 1) as usize] {
            if let Some(e) = read(s, tag) {
                out.push(e);
            }
        }
    }
}

fn write(s: &Slot, tag: u64, duration: u64, start: u64, tid: u64) {
    let q = s.seq.load(Ordering::Relaxed);
    s.seq.store(q.wrapping_add(1), Ordering::Relaxed);
    // Release fence: a reader that sees any of the stores below also sees the odd word.
    fence(Ordering::Release);
    s.window.store(tag, Ordering::Relaxed);
    s.duration.store(duration, Ordering::Relaxed);
    s.start.store(start, Ordering::Relaxed);
    s.thread_id.store(tid, Ordering::Relaxed);
    // Release: a reader that sees the even word sees the whole slot.
    s.seq.store(q.wrapping_add(2), Ordering::Release);
}

fn read(s: &Slot, tag: u64) -> Option<SlowCall> {
    for _ in 0..READ_TRIES {
        let q1 = s.seq.load(Ordering::Acquire);
        if q1 & 1 == 1 {
            spin();
            continue;
        }
        let w = s.window.load(Ordering::Relaxed);
        let e = SlowCall {
            duration: s.duration.load(Ordering::Relaxed),
            start: s.start.load(Ordering::Relaxed),
            thread_id: s.thread_id.load(Ordering::Relaxed) as u32,
        };
        // Acquire fence: the loads above happen before the re-check of the word.
        fence(Ordering::Acquire);
        if s.seq.load(Ordering::Relaxed) == q1 {
            return (w == tag).then_some(e);
        }
        spin();
    }
    None
}

/// Merge the calls kept in the closed window (epoch) `window` into `kept`, the K slowest of this
/// (thread, key) so far in the user's window, their start converted to wall-clock ns
/// (`clock::to_wall_ns`). Call after the window's closer settled the histogram's write section
/// (windows.rs): the slots are then at rest.
pub fn take(ex: &SlowestCalls, window: u64, kept: &mut Vec<SlowCall>) {
    let at = kept.len();
    ex.read(window, kept);
    if kept.len() == at {
        return;
    }
    let (raw_now, wall_now) = (super::clock::now(), super::clock::wall_ns());
    for e in &mut kept[at..] {
        e.start = super::clock::to_wall_ns(e.start, raw_now, wall_now);
    }
    kept.sort_unstable_by(|a, b| b.duration.cmp(&a.duration).then(a.start.cmp(&b.start)));
    kept.truncate(K);
}

#[cfg(not(loom))]
fn spin() {
    std::hint::spin_loop();
}

#[cfg(loom)]
fn spin() {
    loom::thread::yield_now();
}

/// This thread's OS id (gettid), read once per thread.
fn thread_id() -> u32 {
    #[cfg(not(loom))]
    {
        thread_local! {
            static TID: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
        }
        TID.with(|t| {
            if t.get() == 0 {
                t.set(gettid());
            }
            t.get()
        })
    }
    #[cfg(loom)]
    {
        1
    }
}

#[cfg(not(loom))]
fn gettid() -> u32 {
    extern "C" {
        fn syscall(number: std::ffi::c_long, ...) -> std::ffi::c_long;
    }
    #[cfg(target_arch = "x86_64")]
    const SYS_GETTID: std::ffi::c_long = 186;
    #[cfg(target_arch = "aarch64")]
    const SYS_GETTID: std::ffi::c_long = 178;
    // SAFETY: gettid takes no arguments, cannot fail and touches no memory (the raw syscall,
    // since glibc before 2.30 has no gettid() wrapper).
    unsafe { syscall(SYS_GETTID) as u32 }
}

/// hist.rs's half of the protocol, for the tests: a call at or past the window's gate is shown to
/// `keep`, which sets the gate; each window starts with a gate of 0.
#[cfg(test)]
fn offer(e: &SlowestCalls, gate: &AtomicU64, duration: u64, start: u64, window: u64) {
    if duration >= gate.load(Ordering::Relaxed) {
        gate.store(e.keep(duration, start, window), Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn kept(e: &SlowestCalls, window: u64) -> Vec<u64> {
        let mut v = Vec::new();
        e.read(window, &mut v);
        let mut d: Vec<u64> = v.iter().map(|x| x.duration).collect();
        d.sort_unstable();
        d
    }

    #[test]
    fn keeps_the_k_slowest_of_a_window_with_their_start_and_thread() {
        let (e, gate) = (SlowestCalls::new(), AtomicU64::new(0));
        let mut all = Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for i in 0..10_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let d = x % 1_000_000;
            all.push(d);
            offer(&e, &gate, d, 1_000 + i, 0);
        }
        all.sort_unstable();
        assert_eq!(kept(&e, 0), all[all.len() - K..].to_vec());
        let mut v = Vec::new();
        e.read(0, &mut v);
        assert!(v.iter().all(|x| x.thread_id == gettid() && x.start >= 1_000));
    }

    #[test]
    fn fewer_calls_than_k_are_all_kept_and_windows_are_separate() {
        let e = SlowestCalls::new();
        let gates: [AtomicU64; 3] = Default::default();
        for d in [5, 3, 9] {
            offer(&e, &gates[0], d, 0, 0);
        }
        assert_eq!(kept(&e, 0), vec![3, 5, 9]);
        // Window 1 starts empty even with smaller calls; window 0 stays readable.
        offer(&e, &gates[1], 1, 0, 1);
        assert_eq!(kept(&e, 1), vec![1]);
        assert_eq!(kept(&e, 0), vec![3, 5, 9]);
        // Window 2 reuses window 0's bank: its slots of window 0 are free, never mixed in.
        offer(&e, &gates[2], 2, 0, 2);
        assert_eq!(kept(&e, 2), vec![2]);
        assert!(!kept(&e, 0).contains(&2));
    }

    #[test]
    fn a_key_first_seen_late_or_after_a_long_pause_and_huge_durations_are_kept() {
        let e = SlowestCalls::new();
        let late = 1u64 << 40;
        offer(&e, &AtomicU64::new(0), u64::MAX, 7, late);
        offer(&e, &AtomicU64::new(0), 10, 7, late + 1);
        assert_eq!(kept(&e, late + 1), vec![10]);
        assert_eq!(kept(&e, late), vec![u64::MAX]);
        offer(&e, &AtomicU64::new(0), 3, 7, late + 1_000_001);
        assert_eq!(kept(&e, late + 1_000_001), vec![3]);
    }

    #[test]
    fn ties_and_calls_below_the_kth_take_the_fast_path() {
        let (e, gate) = (SlowestCalls::new(), AtomicU64::new(0));
        for _ in 0..K {
            offer(&e, &gate, 100, 0, 0);
        }
        assert_eq!(gate.load(Ordering::Relaxed), 101);
        assert_eq!(e.keep(100, 0, 0), 101, "a tie with the K-th is not kept");
        offer(&e, &gate, 50, 0, 0);
        assert_eq!(gate.load(Ordering::Relaxed), 101);
        assert_eq!(kept(&e, 0), vec![100; K]);
    }

    #[test]
    fn a_reader_racing_the_writer_sees_only_whole_calls() {
        // Every call's start is derived from its duration; a torn read would break that.
        let e = std::sync::Arc::new(SlowestCalls::new());
        let w = e.clone();
        let writer = std::thread::spawn(move || {
            let gates: [AtomicU64; 4] = Default::default();
            for d in 1..200_000u64 {
                offer(&w, &gates[(d / 50_000) as usize], d, d * 3 + 1, d / 50_000);
            }
        });
        let mut seen = 0;
        while !writer.is_finished() {
            for win in 0..4 {
                let mut v = Vec::new();
                e.read(win, &mut v);
                for x in &v {
                    assert_eq!(x.start, x.duration * 3 + 1);
                    assert_eq!(x.duration / 50_000, win);
                }
                seen += v.len();
            }
        }
        writer.join().unwrap();
        assert_eq!(kept(&e, 3), (199_992..200_000).collect::<Vec<_>>());
        let _ = seen;
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The slowest-call protocol in loom's model (`make test-loom`): a reader racing the writer never
    //! returns a call made of two calls' fields; the closed window's bank stays whole while the
    //! writer fills the next one; and a shard handed to a new thread (Release give-back, Acquire
    //! claim, as shard.rs does) carries its gate, so the K slowest stay right across the hand-over.
    //! Small enough to explore every interleaving in well under a second: K = 2 under loom, and the
    //! torn-read race is one whole slot rewrite against a reader (the earlier model, two rewrites
    //! against a retrying reader, did not finish in minutes). A torn read needs only one rewrite.
    use super::*;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::Arc;

    fn durations(e: &SlowestCalls, window: u64) -> Vec<u64> {
        let mut v = Vec::new();
        e.read(window, &mut v);
        for x in &v {
            assert_eq!(x.start, x.duration * 3, "torn read {x:?}");
        }
        let mut d: Vec<u64> = v.iter().map(|x| x.duration).collect();
        d.sort_unstable();
        d
    }

    #[test]
    fn a_racing_reader_never_sees_half_a_call() {
        loom::model(|| {
            let e = Arc::new(SlowestCalls::new());
            // The slot holds a whole call before the race; the writer rewrites it with another.
            write(&e.banks[0][0], 1, 10, 30, 1);
            let w = e.clone();
            let writer = loom::thread::spawn(move || write(&w.banks[0][0], 1, 20, 60, 1));
            if let Some(x) = read(&e.banks[0][0], 1) {
                assert_eq!(x.start, x.duration * 3, "torn read {x:?}");
                assert!(x.duration == 10 || x.duration == 20, "a call never written {x:?}");
            }
            writer.join().unwrap();
            assert_eq!(read(&e.banks[0][0], 1).map(|x| x.duration), Some(20));
        });
    }

    #[test]
    fn the_closed_windows_bank_stays_whole_while_the_next_window_fills() {
        loom::model(|| {
            let e = Arc::new(SlowestCalls::new());
            let gate = AtomicU64::new(0);
            for d in [5, 9, 7] {
                offer(&e, &gate, d, d * 3, 0); // window 0 keeps 7 and 9
            }
            let w = e.clone();
            let writer = loom::thread::spawn(move || {
                let gate = AtomicU64::new(0);
                for d in [1, 4, 2] {
                    offer(&w, &gate, d, d * 3, 1);
                }
            });
            assert_eq!(durations(&e, 0), vec![7, 9]);
            writer.join().unwrap();
            assert_eq!(durations(&e, 1), vec![2, 4]);
            assert_eq!(durations(&e, 0), vec![7, 9]);
        });
    }

    #[test]
    fn a_shard_handed_to_another_thread_keeps_its_gate_and_slots() {
        loom::model(|| {
            let e = Arc::new(SlowestCalls::new());
            // The gate travels with the shard (in its histogram's bank).
            let gate = Arc::new(AtomicU64::new(0));
            let in_use = Arc::new(AtomicBool::new(true));
            let (w, g, flag) = (e.clone(), gate.clone(), in_use.clone());
            let first = loom::thread::spawn(move || {
                for d in [6, 8] {
                    offer(&w, &g, d, d * 3, 0);
                }
                flag.store(false, Ordering::Release); // give back (shard.rs)
            });
            let (w, g, flag) = (e.clone(), gate.clone(), in_use.clone());
            let second = loom::thread::spawn(move || {
                // claim (shard.rs): Acquire pairs with the give-back's Release.
                while flag.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
                    loom::thread::yield_now();
                }
                // Below the gate the first owner left (kth = 6): the fast path, not kept.
                offer(&w, &g, 5, 15, 0);
                offer(&w, &g, 7, 21, 0);
            });
            first.join().unwrap();
            second.join().unwrap();
            assert_eq!(durations(&e, 0), vec![7, 8]);
        });
    }
}
