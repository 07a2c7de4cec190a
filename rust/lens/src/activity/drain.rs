//! The drain thread and what it shares with the collector: the parse state behind one mutex,
//! the pools' hand-backs, and the library's flush.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::aggregate::State;
use super::counters::ActivityCounter as D;
use super::layout::KIND_RUNTIME_API;
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
    /// The sampled join's windows (taken before `state` where both are held).
    pub sampler: Mutex<Sampler>,
}

/// The sampled RUNTIME_API join's windows: once per period (`config::DEFAULT_JOIN_PERIOD`), a
/// window of `fraction` of it at a random offset (so it does not alias a training step's
/// period). The drain thread opens and closes them (`Shared::sample_tick`); the collector settles
/// an open one before a snapshot, a stop or a change of what is enabled.
pub(super) struct Sampler {
    /// The join is sampled and the collector running: windows open.
    pub on: bool,
    pub fraction: f64,
    pub period: Duration,
    /// The open window: when it is due to close, and when it opened (the instant its spans
    /// went on).
    open: Option<(Instant, Instant)>,
    /// When the next window opens (wall clock).
    next_open: Instant,
    /// The period the next window falls in begins here.
    period_start: Instant,
    rng: u64,
    /// Since when the join's active time has not been counted: Some while the join is on
    /// (sampled or exact).
    pub active_since: Option<Instant>,
    /// The join is exact: its active time is all sampled.
    pub exact: bool,
}

impl Sampler {
    pub fn new(period: Duration) -> Sampler {
        let now = Instant::now();
        // A seed that differs per process and per collector (ranks must not share offsets).
        let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let seed = wall.map_or(0, |d| d.as_nanos() as u64) ^ u64::from(std::process::id()).rotate_left(32);
        Sampler {
            on: false,
            fraction: 1.0,
            period,
            open: None,
            next_open: now,
            period_start: now,
            rng: seed | 1,
            active_since: None,
            exact: false,
        }
    }

    /// A uniform number in [0, 1) (xorshift64*: a cheap PRNG is enough for offsets).
    fn uniform(&mut self) -> f64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn window_len(&self) -> Duration {
        self.period.mul_f64(self.fraction)
    }

    /// Schedule the window of the period beginning at `start`.
    fn schedule(&mut self, start: Instant) {
        self.period_start = start;
        let slack = self.period.saturating_sub(self.window_len());
        self.next_open = start + slack.mul_f64(self.uniform());
    }

    /// Windows begin (with the next period from now).
    pub fn begin(&mut self, fraction: f64) {
        self.on = true;
        self.exact = false;
        self.fraction = fraction;
        self.schedule(Instant::now());
    }

    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }
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

    /// Open or close the sample window when due; returns how long until the next is due (None:
    /// no windows). Called by the drain thread each round.
    pub fn sample_tick(&self) -> Option<Duration> {
        let mut sm = lock(&self.sampler);
        if !sm.on {
            return None;
        }
        let now = Instant::now();
        match sm.open {
            Some((close_at, _)) if now >= close_at => {
                self.close_window(&mut sm);
                let next = (sm.period_start + sm.period).max(now);
                sm.schedule(next);
                Some(sm.next_open.saturating_duration_since(now))
            }
            Some((close_at, _)) => Some(close_at - now),
            None if now >= sm.next_open => {
                self.open_window(&mut sm);
                Some(sm.window_len())
            }
            None => Some(sm.next_open - now),
        }
    }

    /// Open a window: what the library holds flushed and ingested first (the kernels of
    /// launches made before the window count as unsampled at once, without waiting: the drain's
    /// activity clock cannot always tell, as the simulator's per-thread virtual clocks show),
    /// then RUNTIME_API on, then the launches' spans (`launch_hooks::Gate`). A library that
    /// refuses the kind leaves the window closed (this period samples nothing).
    fn open_window(&self, sm: &mut Sampler) {
        self.flush_all();
        self.drain_now();
        // SAFETY: msptiActivityEnable takes a kind value.
        if unsafe { (self.api.enable)(KIND_RUNTIME_API) } != 0 {
            let next = sm.period_start + sm.period;
            sm.schedule(next);
            return;
        }
        let at = launch_hooks::activity_now();
        // Kernels that start from now on may be this window's launches': they wait for it.
        lock(&self.state).open_sample_window(at);
        let opened = Instant::now();
        launch_hooks::open_window();
        sm.open = Some((opened + sm.window_len(), opened));
    }

    /// Close the open window and settle it: spans off, RUNTIME_API off, everything the library
    /// holds flushed and ingested (twice: API records that found no span yet get their second
    /// chance); kernels still waiting for a launch then count as unsampled. The window's time
    /// (CLOCK_MONOTONIC, from spans on to spans off) is added to the sampled time, and the
    /// active time brought up to now.
    pub fn close_window(&self, sm: &mut Sampler) {
        let Some((_, opened)) = sm.open.take() else { return };
        launch_hooks::close_window();
        let closed = Instant::now();
        // SAFETY: msptiActivityDisable takes a kind value.
        unsafe { (self.api.disable)(KIND_RUNTIME_API) };
        self.flush_all();
        self.drain_now();
        self.drain_now();
        let mut st = lock(&self.state);
        st.settle_sample_window();
        st.counters[D::JoinSampledNs] += closed.saturating_duration_since(opened).as_nanos() as u64;
        st.counters[D::JoinWindows] += 1;
        account_active(sm, &mut st, closed);
    }

    /// Close an open sample window and settle it (the next opens a period on), and count the
    /// join's active time up to now (a snapshot, a stop, a change of the join).
    pub fn settle_window(&self, sm: &mut Sampler) {
        if sm.is_open() {
            self.close_window(sm);
            let now = Instant::now();
            let next = (sm.period_start + sm.period).max(now);
            sm.schedule(next);
        }
        account_active(sm, &mut lock(&self.state), Instant::now());
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

/// Count the join's active time up to `now`, all of it sampled when exact. Measured on
/// CLOCK_MONOTONIC by the drain (windows too): the real MSPTI's activity clock, CLOCK_REALTIME,
/// runs at its rate, while the simulator's virtual clocks are per thread (the drain's does not
/// move).
pub(super) fn account_active(sm: &mut Sampler, st: &mut State, now: Instant) {
    if let Some(since) = sm.active_since {
        sm.active_since = Some(now);
        let d = now.saturating_duration_since(since).as_nanos() as u64;
        st.counters[D::JoinActiveNs] += d;
        if sm.exact {
            st.counters[D::JoinSampledNs] += d;
        }
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
        let window = sh.sample_tick();
        if sh.flushing.load(Ordering::Acquire) && last_flush.elapsed() >= interval {
            sh.flush_all();
            last_flush = Instant::now();
        }
        poll = sh.drain_now();
        if let Some(w) = window {
            // Wake for the sample window's next open or close (not before the poll floor).
            poll = poll.min(w.max(DRAIN_POLL_MIN));
        }
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
