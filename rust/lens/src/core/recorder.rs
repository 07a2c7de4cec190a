//! Process-wide recording state and the merge of every shard into a snapshot.
//!
//! Windows: shards only ever add. `reset()` takes the current totals as a baseline and later
//! snapshots subtract it, so a reset never races with a writer and no count is lost or counted
//! twice: each record is read either by the baseline or by the window after it. min and max are
//! tagged with the window they were set in, so a window's extremes are its own.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use super::clock;
use super::hist::Histogram;
use super::seqlock;
use super::shard::{self, ShardCounters};

/// The recording run, read with one load per callback: bit 0 says whether callbacks record
/// (start/stop), the bits above are the run's epoch, bumped at every start and stop so an ENTER of
/// an earlier run never pairs with a later EXIT.
pub static RUN: AtomicU64 = AtomicU64::new(2);

/// Whether the callbacks record now.
pub fn recording() -> bool {
    RUN.load(Ordering::Acquire) & 1 != 0
}

/// A new run that records (start).
pub fn begin_run() {
    let _ = RUN.fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| Some(((r >> 1) + 1) << 1 | 1));
}

/// A new run that does not record (stop).
pub fn end_run() {
    let _ = RUN.fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| Some(((r >> 1) + 1) << 1));
}

/// Stop recording at once, in the same run (a panic in the callback, a forked child).
pub fn halt() {
    RUN.fetch_and(!1, Ordering::AcqRel);
}

/// The current reset window.
pub static WINDOW: AtomicU64 = AtomicU64::new(0);
/// Set when the callback caught a panic; recording stops for good.
pub static POISONED: AtomicBool = AtomicBool::new(false);
/// Set in a child process after fork(): the child never records into the inherited shards.
pub static FORKED: AtomicBool = AtomicBool::new(false);

/// (domain, cbid, function name).
pub type Key = (u32, u32, String);

/// Merged, cumulative-or-windowed state of every shard.
#[derive(Clone, Debug, Default)]
pub struct Totals {
    pub keys: BTreeMap<Key, Histogram>,
    pub counters: ShardCounters,
    /// Calls entered and not yet exited (now; not windowed).
    pub in_flight: u64,
    pub threads: u64,
}

/// The current window's records so far (every epoch closed since the last reset) and the
/// counters' values at that reset.
struct WindowState {
    open: BTreeMap<Key, Histogram>,
    counters_base: ShardCounters,
}

static STATE: Mutex<WindowState> =
    Mutex::new(WindowState { open: BTreeMap::new(), counters_base: ShardCounters::ZERO });

/// Close the current epoch: advance WINDOW, then take every histogram's bank of the closed epoch
/// into `open` (see `AtomicHistogram::take_window`). Every call lands in the epoch whose number
/// its write section read, so in exactly one window, whole.
fn close_epoch(st: &mut WindowState) -> Totals {
    // AcqRel: the clearing of banks by the previous close happens before any write section that
    // reads the new value (writers load it with Acquire).
    let closed = WINDOW.fetch_add(1, Ordering::AcqRel);
    seqlock::window_advanced();
    let mut t = Totals::default();
    for s in shard::all_shards() {
        t.threads += 1;
        for kh in s.histograms() {
            let h = st.open.entry((kh.domain, kh.cbid, kh.name.clone())).or_default();
            kh.hist.take_window(closed, h);
        }
        t.counters.add(&s.counters());
        t.in_flight += s.in_flight();
    }
    t
}

fn window_of(st: &WindowState, mut now: Totals) -> Totals {
    now.keys = st.open.iter().filter(|(_, h)| h.count > 0).map(|(k, h)| (k.clone(), h.clone())).collect();
    now.counters = now.counters.minus(&st.counters_base);
    now
}

/// Close the current window and start a new one; returns the window just closed. Every call is
/// in exactly one of the two.
pub fn snapshot_and_reset() -> Totals {
    let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let now = close_epoch(&mut st);
    let cumulative = now.counters;
    let closed = window_of(&st, now);
    st.open.clear();
    st.counters_base = cumulative;
    closed
}

/// Start a new window: everything recorded so far belongs to the previous one.
pub fn reset() {
    snapshot_and_reset();
}

/// The current window: every call recorded since the last reset, merged over every shard.
pub fn snapshot() -> Totals {
    let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
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
}

pub fn health() -> Health {
    Health {
        poisoned: POISONED.load(Ordering::Relaxed),
        forked: FORKED.load(Ordering::Relaxed),
        late_threads: shard::LATE_THREADS.load(Ordering::Relaxed),
        clock_errors: clock::MSPTI_CLOCK_ERRORS.load(Ordering::Relaxed),
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
