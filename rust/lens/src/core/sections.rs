//! The callback's quiescence section on its thread's shard, and the stop's wait for every shard's
//! (the protocol and its loom model: quiescence.rs). Apart from it so that the shard, which holds a
//! section word, does not know the code that walks the shards.

use super::quiescence::{LATE, UNSETTLED};
use super::seqlock::heavy_fence;
use super::shard::{self, Shard};
use super::windows;

/// The callback's section on this thread's shard (none on a thread's first callback), closed when
/// dropped: bind it for the whole callback.
pub struct Section(Option<(&'static Shard, bool)>);

impl Section {
    #[inline(always)]
    pub fn enter() -> Section {
        Section(shard::existing().map(|s| (s, s.quiescence.enter())))
    }
}

impl Drop for Section {
    #[inline(always)]
    fn drop(&mut self) {
        if let Some((s, opened)) = self.0 {
            s.quiescence.leave(opened);
        }
    }
}

/// The stop's half, after the run word says "not recording": wait, at most `bound`, until every
/// callback that may have read the recording run has left. Returns the threads it stopped waiting
/// for (also added to `UNSETTLED`).
pub fn settle_all(bound: std::time::Duration) -> u64 {
    heavy_fence();
    let deadline = std::time::Instant::now() + bound;
    let mut unsettled = 0;
    for s in shard::all_shards() {
        if !s.quiescence.settle(|| std::time::Instant::now() < deadline) {
            unsettled += 1;
        }
    }
    if unsettled > 0 {
        UNSETTLED.fetch_add(unsettled, std::sync::atomic::Ordering::Relaxed);
    }
    unsettled
}

/// An EXIT arrived while not recording (the callbacks are disabled then, so only one racing a
/// stop): counted in `LATE` if its thread has a call open from the last recording run.
#[cold]
pub fn exit_while_stopped(s: &Shard) {
    if s.in_flight(windows::started_epoch()) > 0 {
        LATE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}
