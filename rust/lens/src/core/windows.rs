//! Run state and windows: whether callbacks record (the RUN word), the toggle generations, the
//! reset windows, and the merge of every shard into a snapshot.
//!
//! Windows: every histogram has two banks; a call's write section reads WINDOW and records into
//! bank WINDOW & 1 (hist.rs, seqlock.rs). Closing an epoch advances WINDOW, waits for sections
//! still open, then takes and clears the closed bank of every histogram: each call lands, whole,
//! in the epoch its section read. A user window (from one reset to the next) is the sum of the
//! epochs closed in it: `snapshot()` closes one and adds it to the open window, `reset()` also
//! hands the open window over and starts an empty one. Counters are single fields, cumulative in
//! shards; a window's are the difference from the reset's values.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use super::clock;
use super::counters::Counters;
use super::hist::{AtomicHistogram, Histogram, Sparse};
use super::locks::lock;
pub use super::run_word::{epoch_of, toggles_of, Stamp, RECORDING, SLOWEST};
use super::run_word::{EPOCH_MASK, EPOCH_SHIFT, TOGGLES_SHIFT};
use super::seqlock;
use super::shard::{self, Key};
use super::slowest::{self, SlowCall};
use super::timeline;
use super::toggles;

/// The recording run, read with one load per callback: bit 0 (`RECORDING`) says whether callbacks
/// record (start/stop), bit 1 (`SLOWEST`) whether they keep the slowest calls (the session's
/// choice); bits 2..32 are the run's epoch, bumped at every start and stop so an ENTER of an
/// earlier run never pairs with a later EXIT; bits 32.. the generation of toggles (toggles.rs),
/// bumped whenever an id or domain is enabled or disabled while recording.
pub static RUN: AtomicU64 = AtomicU64::new(1 << EPOCH_SHIFT);

/// The RUN value of the run after `run`, with `flags` (the toggle generation carries over).
fn next_run(run: u64, flags: u64) -> u64 {
    let epoch = (u64::from(epoch_of(run)) + 1) & EPOCH_MASK;
    (run >> TOGGLES_SHIFT << TOGGLES_SHIFT) | epoch << EPOCH_SHIFT | flags
}

/// The epoch of the last run that recorded: "in flight" counts only calls entered in it, never the
/// open calls an earlier run left on a thread (or on a shard whose thread ended).
static STARTED: AtomicU32 = AtomicU32::new(0);

/// The epoch of the last run that recorded (the current one while recording).
pub fn started_epoch() -> u32 {
    STARTED.load(Ordering::Acquire)
}

/// A new run that records (start), keeping the slowest calls or not.
pub fn begin_run(slowest: bool) {
    let flags = RECORDING | if slowest { SLOWEST } else { 0 };
    if let Ok(r) = RUN.fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| Some(next_run(r, flags))) {
        STARTED.store(epoch_of(next_run(r, flags)), Ordering::Release);
    }
}

/// A new run that does not record (stop).
pub fn end_run() {
    let _ = RUN.fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| Some(next_run(r, 0)));
}

/// Stop recording at once, in the same run (a panic in the callback, a forked child).
pub fn halt() {
    RUN.fetch_and(!RECORDING, Ordering::AcqRel);
}

/// The current epoch of the windows (see the module's comment). Advanced only by `close_epoch`
/// (AcqRel, under STATE's lock); read by write sections with Acquire.
pub static WINDOW: AtomicU64 = AtomicU64::new(0);

/// Record a toggle of one id, or of a whole domain (`cbid` None), before the enable or disable
/// call reaches MSPTI: a call open across it is discarded (toggles.rs).
pub fn toggled(domain: u32, cbid: Option<u32>) {
    // AcqRel: ordered with the run word's other updates; the callback's Acquire load sees it.
    let before = RUN.fetch_add(1 << TOGGLES_SHIFT, Ordering::AcqRel);
    toggles::mark(domain, cbid, toggles_of(before).wrapping_add(1));
}

/// Set when the callback caught a panic; recording stops for good.
pub static POISONED: AtomicBool = AtomicBool::new(false);
/// Set in a child process after fork(): the child never records into the inherited shards.
pub static FORKED: AtomicBool = AtomicBool::new(false);

/// Merged, cumulative-or-windowed state of every shard.
#[derive(Clone, Debug, Default)]
pub struct Totals {
    pub keys: BTreeMap<Key, Histogram>,
    pub counters: Counters,
    /// Calls entered and not yet exited (now; not windowed).
    pub in_flight: u64,
    pub threads: u64,
    /// The slowest calls per (thread, key) of the window, start times on the wall clock.
    pub slowest: Vec<(Key, SlowCall)>,
}

/// The current window's calls so far (every epoch closed since the last reset), and the
/// counters' cumulative values at that reset.
struct WindowState {
    open: BTreeMap<Key, Histogram>,
    counters_base: Counters,
    /// The window's slowest calls per (shard, key), at most K each.
    slowest: BTreeMap<(usize, Key), Vec<SlowCall>>,
}

static STATE: Mutex<WindowState> = Mutex::new(WindowState {
    open: BTreeMap::new(),
    counters_base: Counters::ZERO,
    slowest: BTreeMap::new(),
});

/// Close the current epoch into `st.open`; returns the shards' cumulative counters, in-flight
/// calls and thread count now (no histograms).
fn close_epoch(st: &mut WindowState) -> Totals {
    close_epoch_with(st, |open, key, hist, closed| {
        hist.take_window(closed, open.entry(key.clone()).or_default())
    })
}

/// `close_epoch`, each (shard, key)'s closed bank taken by `take` (given the window's histograms,
/// the key, the shard's histogram and the epoch closed), before its slowest calls are.
fn close_epoch_with(
    st: &mut WindowState,
    mut take: impl FnMut(&mut BTreeMap<Key, Histogram>, &Key, &AtomicHistogram, u64),
) -> Totals {
    // AcqRel: this close's clearing of banks (below) happens before any write section that reads
    // a later value, so a bank is empty when it is reused two epochs on.
    let closed = WINDOW.fetch_add(1, Ordering::AcqRel);
    seqlock::window_advanced();
    let mut t = Totals::default();
    let started = STARTED.load(Ordering::Acquire);
    for s in shard::all_shards() {
        t.threads += 1;
        for kh in s.histograms() {
            let key = (kh.domain, kh.cbid, kh.name.clone());
            // The slowest calls after the bank: taking it settles the write section that wrote both.
            take(&mut st.open, &key, &kh.hist, closed);
            let kept = st.slowest.entry((s as *const shard::Shard as usize, key)).or_default();
            slowest::take(&kh.slowest, closed, kept);
        }
        t.counters.add(&s.counters());
        t.in_flight += s.in_flight(started);
    }
    t
}

fn window_of(st: &WindowState, mut now: Totals) -> Totals {
    now.keys = st.open.iter().filter(|(_, h)| h.count() > 0).map(|(k, h)| (k.clone(), h.clone())).collect();
    now.counters.subtract(&st.counters_base);
    now.slowest = st.slowest.iter().flat_map(|((_, k), v)| v.iter().map(move |e| (k.clone(), *e))).collect();
    now
}

/// Close the current window and start a new one; returns the window just closed. Every call is
/// in exactly one of the two, whole.
pub fn snapshot_and_reset() -> Totals {
    let mut st = lock(&STATE);
    let mut now = close_epoch(&mut st);
    let cumulative = now.counters;
    timeline::before_reset(&st.open);
    // The window's histograms are handed over, not copied (window_of's clone of each dense
    // histogram was most of a reset): the next epoch's keys start anew, as after a clear.
    now.keys = std::mem::take(&mut st.open).into_iter().filter(|(_, h)| h.count() > 0).collect();
    now.counters.subtract(&st.counters_base);
    now.slowest = std::mem::take(&mut st.slowest)
        .into_iter()
        .flat_map(|((_, k), v)| v.into_iter().map(move |e| (k.clone(), e)))
        .collect();
    st.counters_base = cumulative;
    now
}

/// The calls of a window cut out of it (`cut`): each key's values in its non-empty slots.
#[derive(Clone, Debug, Default)]
pub struct Cut {
    pub keys: Vec<(Key, Sparse)>,
    /// The counters' change since the last reset or cut.
    pub counters: Counters,
    /// Calls entered and not yet exited, and threads, at the cut (moments, not sums).
    pub in_flight: u64,
    pub threads: u64,
    /// The slowest calls per (thread, key) since the last reset or cut.
    pub slowest: Vec<(Key, SlowCall)>,
}

/// `snapshot_and_reset` for a flight recorder's fine window: the calls since the last reset or
/// cut, every call in exactly one, whole, with the window's dense histograms drained in place
/// (kept allocated for the next epochs) rather than handed over, so a cut of a second allocates
/// and writes what it holds, not 36 KiB per key (runs/flight_recorder.py).
pub fn cut() -> Cut {
    let mut st = lock(&STATE);
    let mut keys: BTreeMap<Key, Sparse> = BTreeMap::new();
    let now = if timeline::kept() {
        // The timeline's delta is of the whole window, this epoch included: closed as a reset's.
        let now = close_epoch(&mut st);
        timeline::before_reset(&st.open);
        now
    } else {
        // The shards' banks straight into the cut, their written slots alone.
        close_epoch_with(&mut st, |_, key, hist, closed| {
            if let Some(h) = hist.take_sparse(closed) {
                add_sparse(&mut keys, key, h);
            }
        })
    };
    // Epochs closed into the window since the last cut (a snapshot(), a timeline tick).
    for (key, h) in st.open.iter_mut().filter(|(_, h)| h.count() > 0) {
        let h = h.drain();
        add_sparse(&mut keys, key, h);
    }
    let keys = keys.into_iter().collect();
    let mut counters = now.counters;
    counters.subtract(&st.counters_base);
    st.counters_base = now.counters;
    let slowest = std::mem::take(&mut st.slowest)
        .into_iter()
        .flat_map(|((_, k), v)| v.into_iter().map(move |e| (k.clone(), e)))
        .collect();
    Cut { keys, counters, in_flight: now.in_flight, threads: now.threads, slowest }
}

fn add_sparse(keys: &mut BTreeMap<Key, Sparse>, key: &Key, h: Sparse) {
    match keys.get_mut(key) {
        Some(had) => *had = had.merge(&h),
        None => {
            keys.insert(key.clone(), h);
        }
    }
}

/// End the timeline's interval in progress with the current window's records.
pub fn timeline_tick() {
    let mut st = lock(&STATE);
    close_epoch(&mut st);
    timeline::tick(&st.open);
}

/// Start a new window: everything recorded so far belongs to the previous one.
pub fn reset() {
    snapshot_and_reset();
}

/// The current window: every call recorded since the last reset, merged over every shard.
pub fn snapshot() -> Totals {
    let mut st = lock(&STATE);
    let now = close_epoch(&mut st);
    window_of(&st, now)
}

/// Faults the callback met outside any shard: process-wide, not windowed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Health {
    pub poisoned: bool,
    pub forked: bool,
    pub late_threads: u64,
    pub clock_errors: u64,
    /// Callbacks a stop stopped waiting for (quiescence.rs): each may have a call in no window.
    pub stop_unsettled: u64,
    /// EXITs of calls entered while recording that came after their stop (quiescence.rs).
    pub late_exits: u64,
}

pub fn health() -> Health {
    Health {
        poisoned: POISONED.load(Ordering::Relaxed),
        forked: FORKED.load(Ordering::Relaxed),
        late_threads: shard::LATE_THREADS.load(Ordering::Relaxed),
        clock_errors: clock::MSPTI_CLOCK_ERRORS.load(Ordering::Relaxed),
        stop_unsettled: super::quiescence::UNSETTLED.load(Ordering::Relaxed),
        late_exits: super::quiescence::LATE.load(Ordering::Relaxed),
    }
}

extern "C" fn after_fork_in_child() {
    FORKED.store(true, Ordering::Relaxed);
    halt();
}

/// Register the fork handler once: a forked child (a DataLoader worker, say) inherits the
/// subscription's memory but not MSPTI's state, so it must not record into the parent's counts.
pub fn install_fork_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        extern "C" {
            fn pthread_atfork(
                prepare: Option<extern "C" fn()>,
                parent: Option<extern "C" fn()>,
                child: Option<extern "C" fn()>,
            ) -> i32;
        }
        // SAFETY: registers a handler that only stores two atomics (async-signal-safe).
        unsafe { pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_run_bumps_the_epoch_keeps_the_toggle_generation_and_sets_only_its_flags() {
        let r = 5u64 << TOGGLES_SHIFT | 7 << EPOCH_SHIFT | RECORDING | SLOWEST;
        let n = next_run(r, RECORDING);
        assert_eq!((epoch_of(n), toggles_of(n), n & (RECORDING | SLOWEST)), (8, 5, RECORDING));
        // The epoch wraps within its field, never into the toggle generation.
        let st = Stamp::of(r);
        assert_eq!((st.epoch(), st.toggles()), (epoch_of(r), toggles_of(r)));
        assert_eq!(Stamp::new(7, 5), st);
        let top = 9u64 << TOGGLES_SHIFT | EPOCH_MASK << EPOCH_SHIFT;
        assert_eq!((epoch_of(next_run(top, 0)), toggles_of(next_run(top, 0))), (0, 9));
    }
}
