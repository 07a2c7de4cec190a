//! Run state and windows: whether callbacks record (the RUN word), the reset windows, and the
//! merge of every shard into a snapshot.
//!
//! Windows: shards only ever add. `reset()` takes the current totals as a baseline and later
//! snapshots subtract it, so a reset never races with a writer and no count is lost or counted
//! twice: each record is read either by the baseline or by the window after it. min and max are
//! tagged with the window they were set in, so a window's extremes are its own.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use super::clock;
use super::counters::Counters;
use super::hist::Histogram;
use super::shard;

/// The recording run, read with one load per callback: bit 0 says whether callbacks record
/// (start/stop), the bits above are the run's epoch, bumped at every start and stop so an ENTER of
/// an earlier run never pairs with a later EXIT.
pub static RUN: AtomicU64 = AtomicU64::new(2);

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
    pub counters: Counters,
    /// Calls entered and not yet exited (now; not windowed).
    pub in_flight: u64,
    pub threads: u64,
}

fn collect(window: u64) -> Totals {
    let mut t = Totals::default();
    for s in shard::all_shards() {
        t.threads += 1;
        for kh in s.histograms() {
            let h = t.keys.entry((kh.domain, kh.cbid, kh.name.clone())).or_default();
            kh.hist.read_into(h, window);
        }
        t.counters.add(&s.counters());
        t.in_flight += s.in_flight();
    }
    t
}

fn subtract(h: &mut Histogram, base: &Histogram) {
    for (a, b) in h.counts.iter_mut().zip(&base.counts) {
        *a = a.saturating_sub(*b);
    }
    h.count = h.count.saturating_sub(base.count);
    h.sum = h.sum.wrapping_sub(base.sum);
    // sum_sq, min and max are already the window's own (see AtomicHistogram::record).
    h.overflow = h.overflow.saturating_sub(base.overflow);
    if h.count == 0 {
        h.min = None;
        h.max = None;
        h.sum = 0;
        h.sum_sq = 0.0;
    }
}

static BASELINE: Mutex<Option<Totals>> = Mutex::new(None);

fn window_of(current: Totals, base: Option<&Totals>) -> Totals {
    let mut t = current;
    if let Some(b) = base {
        for (k, h) in t.keys.iter_mut() {
            if let Some(bh) = b.keys.get(k) {
                subtract(h, bh);
            }
        }
        t.keys.retain(|_, h| h.count > 0);
        t.counters.subtract(&b.counters);
    }
    t
}

/// Close the current window and start a new one; returns the window just closed. Every record
/// is read by exactly one of the two: the totals read here are both the closed window's end and
/// the new window's baseline.
pub fn snapshot_and_reset() -> Totals {
    let mut base = BASELINE.lock().unwrap_or_else(|e| e.into_inner());
    let current = collect(WINDOW.load(Ordering::Acquire));
    WINDOW.fetch_add(1, Ordering::AcqRel);
    let closed = window_of(current.clone(), base.as_ref());
    *base = Some(current);
    closed
}

/// Start a new window: everything recorded so far belongs to the previous one.
pub fn reset() {
    snapshot_and_reset();
}

/// The current window: every shard merged, minus the baseline of the last reset.
pub fn snapshot() -> Totals {
    let base = BASELINE.lock().unwrap_or_else(|e| e.into_inner());
    window_of(collect(WINDOW.load(Ordering::Acquire)), base.as_ref())
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
