//! The drain thread and what it shares with the collector: the parse state behind one mutex,
//! the pools' hand-backs, and the library's flush.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::aggregate::State;
use super::symbols::ActivityApi;
use super::{launch_hooks, pool};
use crate::core::locks::lock;
use crate::core::self_cost;
use crate::core::windows::FORKED;

pub(super) struct Shared {
    pub state: Mutex<State>,
    pub stop: AtomicBool,
    /// Tests hold the drain thread still to fill the pool deterministically.
    pub paused: AtomicBool,
    /// Whether the drain's FlushAll loop should run (kinds enabled and recording).
    pub flushing: AtomicBool,
    pub pool: &'static pool::Pool,
    pub api: ActivityApi,
}

impl Shared {
    /// Parse every buffer handed back so far, and return them to their pools. Returns how long
    /// the drain may sleep before its next round (`next_poll`).
    pub fn drain_now(&self) -> Duration {
        let mut st = lock(&self.state);
        st.ingest_spans();
        for p in pool::all_pools() {
            for (slot, valid) in p.take_ready() {
                st.ingest_buffer(p.bytes(slot, valid));
                p.release(slot);
            }
        }
        next_poll(st.span_rate)
    }

    pub fn flush_all(&self) {
        // SAFETY: msptiActivityFlushAll takes a flag it ignores; it may call our complete
        // callback on this thread, which only touches atomics.
        unsafe { (self.api.flush_all)(0) };
    }

    /// Device records the library says it still holds (the simulator's `msimDevicePending`;
    /// MSPTI itself has no such call): None where it cannot say.
    pub fn library_pending(&self) -> Option<u64> {
        // SAFETY: msimDevicePending takes nothing and only reads the simulator's channel.
        self.api.device_pending.map(|f| unsafe { f() })
    }
}

/// How often the drain wakes on its own (the complete callback wakes it sooner when the pool runs
/// low, and snapshots drain at once). Each wake costs a context switch; 20 ms keeps the drain's
/// share of a training job's CPU near 1 % while a thread's launch-span ring
/// (`launch_hooks::RING` spans) would need over 13 million launches per second to overflow
/// between two wakes; above a quarter of that the drain wakes sooner (`next_poll`).
pub const DRAIN_POLL: Duration = Duration::from_millis(20);
/// The shortest sleep between rounds (while a thread launches faster than its ring allows at
/// `DRAIN_POLL`).
pub const DRAIN_POLL_MIN: Duration = Duration::from_millis(1);

/// How long the drain may sleep: `DRAIN_POLL`, or less while the busiest thread logs launch
/// spans (`span_rate` per second) fast enough to fill a quarter of its ring sooner. A simulated
/// job on the virtual clock launches millions per second; a ring lasts about 110 ms at 2.4
/// million, and the spans it loses leave their kernels unjoined.
pub fn next_poll(span_rate: f64) -> Duration {
    let quarter = (launch_hooks::RING / 4) as f64;
    if span_rate * DRAIN_POLL.as_secs_f64() <= quarter {
        return DRAIN_POLL;
    }
    Duration::from_secs_f64(quarter / span_rate).max(DRAIN_POLL_MIN)
}

pub(super) fn drain_loop(sh: &Shared, interval: Duration) {
    let mut last_flush = Instant::now();
    // This thread's CPU time, added to the process's as it goes (the live self cost).
    let mut cpu = self_cost::ThreadCpu::new(&self_cost::DRAIN_CPU_NS);
    let mut poll = DRAIN_POLL;
    while !sh.stop.load(Ordering::Acquire) {
        std::thread::park_timeout(poll);
        cpu.tick();
        if FORKED.load(Ordering::Relaxed) {
            return;
        }
        if sh.paused.load(Ordering::Acquire) {
            continue;
        }
        if sh.flushing.load(Ordering::Acquire) && last_flush.elapsed() >= interval {
            sh.flush_all();
            last_flush = Instant::now();
        }
        poll = sh.drain_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drain_polls_sooner_only_while_a_ring_would_fill_a_quarter_in_one_poll() {
        assert_eq!(next_poll(0.0), DRAIN_POLL);
        let quarter = (launch_hooks::RING / 4) as f64;
        // Exactly a quarter per poll: the poll stays.
        assert_eq!(next_poll(quarter / DRAIN_POLL.as_secs_f64()), DRAIN_POLL);
        // Twice as fast: half the poll; far faster: the floor.
        let half = next_poll(2.0 * quarter / DRAIN_POLL.as_secs_f64());
        assert!((half.as_secs_f64() - DRAIN_POLL.as_secs_f64() / 2.0).abs() < 1e-9, "{half:?}");
        assert_eq!(next_poll(1e12), DRAIN_POLL_MIN);
    }
}
