//! The callback's quiescence section on its thread's shard, and the stop's wait for every shard's
//! (the protocol and its loom model: quiescence.rs). Apart from it so that the shard, which holds a
//! section word, does not know the code that walks the shards.

use super::quiescence::{LATE, UNSETTLED};
use super::self_cost::SAMPLE_EVERY;
use super::seqlock::{heavy_fence, RUNTIME};
use super::shard::{self, Shard};
use super::windows;

/// The callback's section on this thread's shard (none on a thread's first callback), closed when
/// dropped: bind it for the whole callback. It also hands the callback the shard it found, so the
/// callback looks its shard up once.
pub struct Section {
    shard: Option<&'static Shard>,
    /// The section word as `enter` found it (odd: nested, or no shard; nothing to close).
    found: u64,
}

impl Section {
    #[inline(always)]
    pub fn enter() -> Section {
        Section::enter_in::<RUNTIME>()
    }

    /// `enter` with the store-load fence of kind `F` (seqlock.rs `light_fence_in`).
    #[inline(always)]
    pub fn enter_in<const F: u8>() -> Section {
        match shard::existing() {
            Some(s) => Section { shard: Some(s), found: s.quiescence.enter_in::<F>() },
            None => Section { shard: None, found: 1 },
        }
    }

    /// This thread's shard, if it had one when the section was entered.
    #[inline(always)]
    pub fn shard(&self) -> Option<&'static Shard> {
        self.shard
    }

    /// Whether this callback is the one in `SAMPLE_EVERY` on its thread to time (self_cost.rs):
    /// a section this callback opened, every `SAMPLE_EVERY`-th on the thread. The section word
    /// counts them already (two apart), so sampling costs one test of a word in a register.
    #[inline(always)]
    pub fn due(&self) -> bool {
        self.found & (2 * u64::from(SAMPLE_EVERY) - 1) == 0
    }
}

impl Drop for Section {
    #[inline(always)]
    fn drop(&mut self) {
        if self.found & 1 == 0 {
            // SAFETY: `found` is even only when `enter` found a shard (it is 1 otherwise).
            let s = unsafe { self.shard.unwrap_unchecked() };
            s.quiescence.leave(self.found);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::self_cost::{self, timed};

    #[test]
    fn one_callback_in_sample_every_is_timed_per_thread() {
        // A fresh thread has its own shard and section word, so other tests' callbacks do not
        // shift it.
        std::thread::spawn(|| {
            self_cost::calibrate();
            assert!(Section::enter().shard().is_none() && !Section::enter().due(), "no shard yet");
            shard::current().unwrap();
            let every = SAMPLE_EVERY as usize;
            let before = self_cost::read();
            let mut timed_at = Vec::new();
            extern "C" fn work(n: u64, _: u32, _: u32, _: u64) {
                // As the callback run again inside the timed one: its section is nested.
                assert!(!Section::enter().due());
                std::hint::black_box((0..n).sum::<u64>());
            }
            for i in 0..3 * every {
                let inside = Section::enter();
                if inside.due() {
                    timed_at.push(i);
                    // SAFETY: `work` is a plain function.
                    unsafe { timed(work, 1000, 0, 0, 0) };
                }
            }
            // Where the word stood (a shard handed over from an ended thread keeps its word) shifts
            // the first pick; then one in every SAMPLE_EVERY.
            assert_eq!(timed_at.len(), 3, "{timed_at:?}");
            assert_eq!((timed_at[1] - timed_at[0], timed_at[2] - timed_at[1]), (every, every));
            let after = self_cost::read();
            assert_eq!(after.samples + after.skipped, before.samples + before.skipped + 3);
        })
        .join()
        .unwrap();
    }
}
