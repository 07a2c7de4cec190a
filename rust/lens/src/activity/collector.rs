//! The collector of one session: binds the Activity API, registers the pool, runs the drain
//! thread, enables kinds and the join's own, settles and takes windows.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::aggregate::State;
use super::config::{check_join_sample, Config, DEFAULT_JOIN_PERIOD, MAX_SETTLE_TIMEOUT};
use super::counters::{ActivityCounter as D, ActivityCounts};
use super::drain::{account_active, drain_loop, Sampler, Shared};
use super::join::JoinMode;
use super::kinds::kind_name;
use super::layout::*;
use super::totals::{new_collector_id, rows_of, ActivityTotals};
use super::{clock_bridge, events, launch_hooks, mstx, pool, symbols};
use crate::core::clock::ClockKind;
use crate::core::locks::lock;
use crate::core::windows::FORKED;
use crate::error::{Error, Result};

pub struct Collector {
    shared: Arc<Shared>,
    drain: Option<JoinHandle<()>>,
    wanted: BTreeSet<u32>,
    /// Kinds enabled in the library now (user's and the join's own).
    active: BTreeSet<u32>,
    running: bool,
    closed: bool,
    join: JoinMode,
    /// The session traces a launch callback (`launch_hooks::LAUNCH_FIRST..=LAUNCH_LAST`): the
    /// only source of the launch spans the join needs, so without one the join and its records
    /// stay off.
    launch_callbacks: bool,
    mark_stream: Option<usize>,
    /// The sums at the last reset (windows are differences).
    baseline: ActivityCounts,
    /// Records the library reported dropped, accumulated (its call returns and resets them).
    lib_dropped: u64,
    /// The session's clock at the last start.
    session_clock: ClockKind,
    /// Our timestamp callback is registered with the library (see `clock_bridge`).
    bridged: bool,
    anchored: bool,
    settle_timeout: Duration,
    /// A settle wait gave up on the library's own pending count: later ones do not wait on it
    /// until it has been seen at zero.
    library_pending_given_up: bool,
    /// Dropped records (`lib_dropped`) already taken as the reason launches wait in vain.
    drops_explained: u64,
    /// This collector in merged windows, and its snapshot number.
    id: u64,
    windows: u64,
    /// The fraction of time the RUNTIME_API join records (`config::DEFAULT_JOIN_SAMPLE`).
    join_sample: f64,
}

impl Collector {
    /// Bind the Activity API of the subscribed library at `path` and register our buffers.
    ///
    /// # Errors
    /// The library lacks the Activity API, the pool cannot be made, or registration fails.
    pub fn new(path: &Path, config: Config) -> Result<Collector> {
        if config.device_events > events::MAX_CAP {
            return Err(Error::InvalidArgument(format!(
                "device_events must be between 0 (no event log) and {} events per window, not {}",
                events::MAX_CAP,
                config.device_events
            )));
        }
        check_settle_timeout(config.settle_timeout)?;
        let join_sample = check_join_sample(config.join_sample).map_err(Error::InvalidArgument)?;
        let api = symbols::bind(path)?;
        mstx::offer(path);
        let pool = pool::pool(config.buffer_size, config.buffers, config.pool_cap)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        // SAFETY: our two callbacks have MSPTI's signatures and only touch the leaked pools.
        let rc = unsafe { (api.register_callbacks)(Some(pool::on_request), Some(pool::on_complete)) };
        if rc != 0 {
            return Err(Error::from_code("msptiActivityRegisterCallbacks", rc, None));
        }
        let mut state = State::default();
        if let Some(f) = api.struct_size {
            for k in 1..KIND_COUNT {
                let mut n = 0usize;
                // SAFETY: msptiActivityGetStructSize with a valid out pointer.
                let ok = unsafe { f(k, 0, &mut n) } == 0;
                // Larger records keep our fields as a prefix; smaller ones would not.
                if ok && n >= state.sizes.0[k as usize] && state.sizes.0[k as usize] > 0 {
                    state.sizes.0[k as usize] = n;
                }
            }
        }
        launch_hooks::set_timestamp(api.get_timestamp);
        state.pair_launch_marks = config.mark_stream.is_some();
        state.events = events::Recorder::new(config.device_events);
        state.skip_old_spans();
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            stop: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            flushing: AtomicBool::new(false),
            pool,
            api,
            sampler: Mutex::new(Sampler::new(DEFAULT_JOIN_PERIOD)),
        });
        let s2 = shared.clone();
        let interval = config.flush_interval;
        let drain = std::thread::Builder::new()
            .name("mspti-lens-drain".to_owned())
            .spawn(move || drain_loop(&s2, interval))
            .map_err(|e| Error::InvalidArgument(format!("could not start the activity drain thread: {e}")))?;
        pool.set_waker(drain.thread().clone());
        let mut c = Collector {
            shared,
            drain: Some(drain),
            wanted: BTreeSet::new(),
            active: BTreeSet::new(),
            running: false,
            closed: false,
            join: JoinMode::Off,
            launch_callbacks: false,
            mark_stream: config.mark_stream,
            baseline: ActivityCounts::default(),
            lib_dropped: 0,
            session_clock: ClockKind::Monotonic,
            bridged: false,
            anchored: false,
            settle_timeout: config.settle_timeout,
            library_pending_given_up: false,
            drops_explained: 0,
            id: new_collector_id(),
            windows: 0,
            join_sample,
        };
        // A pool reused from an earlier session keeps its cumulative counts: start from them.
        c.baseline = c.read_counters(&lock(&c.shared.state));
        Ok(c)
    }

    /// Hold the drain thread (buffers handed back wait in the pool); explicit flushes still
    /// drain. For tests of pool exhaustion.
    pub fn pause_drain(&self, paused: bool) {
        self.shared.paused.store(paused, Ordering::Release);
    }

    pub fn api(&self) -> &symbols::ActivityApi {
        &self.shared.api
    }

    pub fn wanted(&self) -> Vec<&'static str> {
        self.wanted.iter().map(|&k| kind_name(k)).collect()
    }

    pub fn join(&self) -> &JoinMode {
        &self.join
    }

    /// The bound of a settle wait (see `config::DEFAULT_SETTLE_TIMEOUT`).
    pub fn settle_timeout(&self) -> Duration {
        self.settle_timeout
    }

    /// # Errors
    /// A bound outside 0..=`MAX_SETTLE_TIMEOUT`.
    pub fn set_settle_timeout(&mut self, t: Duration) -> Result<()> {
        check_settle_timeout(t)?;
        self.settle_timeout = t;
        Ok(())
    }

    pub fn clock_bridge(&self) -> &'static str {
        if self.bridged {
            "timestamp_callback"
        } else if self.shared.api.get_timestamp.is_some() {
            "msptiGetTimestamp"
        } else {
            "CLOCK_REALTIME"
        }
    }

    fn call(&self, f: FnKind, name: &'static str, kind: u32) -> Result<()> {
        // SAFETY: msptiActivityEnable/Disable take a kind value.
        let rc = unsafe { f(kind) };
        if rc == 0 {
            Ok(())
        } else {
            Err(Error::from_code(name, rc, None))
        }
    }

    /// Ask for these kinds (applied at once while running).
    ///
    /// # Errors
    /// The library's error for a kind (for HCCL/MEMORY/MEMCPY/MEMSET on 26.x without LD_PRELOAD:
    /// code 6, with the fix).
    pub fn enable(&mut self, kinds: &[u32]) -> Result<()> {
        for &k in kinds {
            self.wanted.insert(k);
        }
        if self.running {
            self.apply()?;
        }
        Ok(())
    }

    pub fn disable(&mut self, kinds: &[u32]) -> Result<()> {
        for &k in kinds {
            self.wanted.remove(&k);
        }
        if self.running {
            self.flush(true);
            self.apply()?;
        }
        Ok(())
    }

    /// Whether the session traces a launch callback (the session says so whenever its callbacks
    /// change). The join, and the RUNTIME_API or EXTERNAL_CORRELATION records it asks the library
    /// for, is on only while it does: without launch spans those records could join nothing and
    /// would only double what the library writes per launch. Applied at once while running,
    /// after a settle: the records of launches made before the change are ingested as they were
    /// made (joined while traced; not waiting for a launch that was never seen otherwise).
    ///
    /// # Errors
    /// As `enable`.
    pub fn set_launch_callbacks(&mut self, on: bool) -> Result<()> {
        if self.launch_callbacks == on {
            return Ok(());
        }
        if self.running {
            self.flush(true);
        }
        self.launch_callbacks = on;
        if !self.running {
            return Ok(());
        }
        self.apply()
    }

    /// Bring the library's enabled kinds to `wanted` plus what the join needs.
    fn apply(&mut self) -> Result<()> {
        // An open sample window is settled first, and none opens until the join is set again.
        let shared = self.shared.clone();
        let mut sm = lock(&shared.sampler);
        shared.settle_window(&mut sm);
        let api_enable = self.shared.api.enable;
        let api_disable = self.shared.api.disable;
        let mut target = self.wanted.clone();
        let kernel = target.contains(&KIND_KERNEL);
        let mut join = if kernel { JoinMode::NoLaunchCallbacks } else { JoinMode::Off };
        let mut hooks = 0u8;
        if kernel && self.launch_callbacks {
            // The join's own kinds, tried newest first.
            if self.active.contains(&KIND_RUNTIME_API)
                || self.call(api_enable, "msptiActivityEnable", KIND_RUNTIME_API).is_ok()
            {
                self.active.insert(KIND_RUNTIME_API);
                if self.wanted.contains(&KIND_RUNTIME_API) {
                    // Its records come anyway (the apis table): every launch joins.
                    join = JoinMode::RuntimeApiAsked;
                    hooks |= launch_hooks::SPANS;
                } else if self.join_sample >= 1.0 {
                    target.insert(KIND_RUNTIME_API);
                    join = JoinMode::RuntimeApi;
                    hooks |= launch_hooks::SPANS;
                } else {
                    // Sampled: the drain's windows enable the kind and the spans; it is disabled
                    // below until the first window (the enable above only asked if it can be).
                    join = JoinMode::RuntimeApiSampled(self.join_sample);
                }
            } else if self.shared.api.push_external.is_some() && self.shared.api.pop_external.is_some() {
                if self.active.contains(&KIND_EXTERNAL_CORRELATION)
                    || self.call(api_enable, "msptiActivityEnable", KIND_EXTERNAL_CORRELATION).is_ok()
                {
                    self.active.insert(KIND_EXTERNAL_CORRELATION);
                    target.insert(KIND_EXTERNAL_CORRELATION);
                    join = JoinMode::External;
                    hooks |= launch_hooks::EXTERNAL;
                } else {
                    join =
                        JoinMode::Unavailable("the library rejects EXTERNAL_CORRELATION records".to_owned());
                }
            } else {
                join = JoinMode::Unavailable(
                    "this MSPTI has neither RUNTIME_API records (26.x) nor external correlation (CANN 8.1+), \
                     so kernels cannot be matched to launches; kernel times per name are still collected"
                        .to_owned(),
                );
            }
        }
        let mut first_err = None;
        for &k in &target {
            if !self.active.contains(&k) {
                match self.call(api_enable, "msptiActivityEnable", k) {
                    Ok(()) => {
                        self.active.insert(k);
                    }
                    Err(e) => {
                        self.wanted.remove(&k);
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
        let extra: Vec<u32> = self.active.difference(&target).copied().collect();
        for k in extra {
            let _ = self.call(api_disable, "msptiActivityDisable", k);
            self.active.remove(&k);
        }
        let mut mark: Option<launch_hooks::FnMark> = None;
        if self.mark_stream.is_some() {
            mark = self.shared.api.mstx_mark.or_else(mstx_mark_fn);
            if mark.is_some() {
                hooks |= launch_hooks::MARKS;
            } else if first_err.is_none() {
                first_err = Some(Error::InvalidArgument(
                    "mark_launches needs MSTX (mstxMarkA in libms_tools_ext.so): none was found; set \
                     MSTX_LIBRARY or source CANN's set_env.sh"
                        .to_owned(),
                ));
            }
        }
        launch_hooks::configure(hooks, mark, self.shared.api.push_external, self.shared.api.pop_external);
        self.join = join;
        let active = self.join.active();
        let sampled = matches!(self.join, JoinMode::RuntimeApiSampled(_));
        let tabled = self.wanted.iter().filter(|&&k| k < 64).fold(0u64, |m, &k| m | 1 << k);
        let now = Instant::now();
        let mut st = lock(&self.shared.state);
        st.join_active = active;
        st.join_sampled = sampled;
        st.tabled_api_kinds = tabled;
        // The join's active time so far counts as it was (sampled or exact); from now, as it is.
        account_active(&mut sm, &mut st, now);
        drop(st);
        sm.active_since = active.then_some(now);
        sm.exact = active && !sampled;
        if !sampled {
            sm.on = false;
        } else if !sm.on || sm.fraction != self.join_sample {
            sm.begin(self.join_sample);
        }
        drop(sm);
        self.shared.flushing.store(!self.active.is_empty(), Ordering::Release);
        first_err.map_or(Ok(()), Err)
    }

    /// Begin collecting (with the session's start).
    ///
    /// # Errors
    /// The library's error for one of the kinds (the others stay enabled).
    pub fn start(&mut self, clock: ClockKind) -> Result<()> {
        if self.closed || FORKED.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.session_clock = clock;
        self.bridge(clock);
        self.running = true;
        self.apply()
    }

    /// The session's clock at the last start.
    pub fn session_clock(&self) -> ClockKind {
        self.session_clock
    }

    /// Register our timestamp callback where the library has one (before any kind is enabled,
    /// as the library requires), unless the session's clock is MSPTI's own.
    fn bridge(&mut self, clock: ClockKind) {
        let Some(register) = self.shared.api.register_timestamp else { return };
        if clock == ClockKind::Mspti {
            self.unbridge();
            return;
        }
        if self.bridged {
            return;
        }
        clock_bridge::anchor(!self.anchored);
        self.anchored = true;
        // SAFETY: our callback has msptiTimestampCallbackFunc's signature and lives for the
        // process (this library is never unloaded).
        if unsafe { register(Some(clock_bridge::session_timestamp)) } == 0 {
            self.bridged = true;
            launch_hooks::set_timestamp(Some(clock_bridge::session_get_timestamp));
        } else {
            clock_bridge::off();
        }
    }

    fn unbridge(&mut self) {
        if !self.bridged {
            return;
        }
        if let Some(register) = self.shared.api.register_timestamp {
            // SAFETY: NULL asks the library for its own clock again.
            unsafe { register(None) };
        }
        clock_bridge::off();
        launch_hooks::set_timestamp(self.shared.api.get_timestamp);
        self.bridged = false;
    }

    /// Add what the library says it dropped since it was last asked.
    fn read_library_dropped(&mut self) {
        if let Some(f) = self.shared.api.dropped {
            let mut n = 0usize;
            // SAFETY: msptiActivityGetNumDroppedRecords ignores context and stream; valid out
            // pointer. It returns and resets the library's count, so we accumulate it.
            if unsafe { f(std::ptr::null_mut(), 0, &mut n) } == 0 {
                self.lib_dropped += n as u64;
            }
        }
    }

    /// Device records known to be missing now: launches whose kernel has not come (not yet
    /// given up on, and more than the records the library says it dropped since the last wait
    /// gave up, which can never come), and what the library says it still holds (where it can
    /// say).
    fn missing(&mut self) -> (u64, u64) {
        let awaited = lock(&self.shared.state).awaited_launches();
        let launches = awaited.saturating_sub(self.lib_dropped - self.drops_explained);
        let library = match self.shared.library_pending() {
            Some(0) => {
                self.library_pending_given_up = false;
                0
            }
            Some(n) if !self.library_pending_given_up => n,
            _ => 0,
        };
        (launches, library)
    }

    /// Flush what MSPTI holds and drain it. `settle`: keep flushing and draining while device
    /// records are known to be missing (`missing`), and until two polls in a row bring nothing
    /// (records with no such evidence, such as memory copies, trail FlushAll too), at most
    /// `settle_timeout`. A wait that ends at the bound counts a `settle_timeouts`; one that ends
    /// because the library dropped as many records as launches wait does not. Either gives up on
    /// the launches it waited for (they stay `launches_pending`, and join if their kernels come
    /// later), so each costs at most one wait.
    pub fn flush(&mut self, settle: bool) {
        if self.closed || FORKED.load(Ordering::Relaxed) {
            return;
        }
        let t0 = Instant::now();
        let mut quiet = 0;
        loop {
            let before = self.shared.pool.counters().completed;
            self.shared.flush_all();
            self.shared.drain_now();
            self.read_library_dropped();
            if !settle {
                break;
            }
            quiet = if self.shared.pool.counters().completed == before { quiet + 1 } else { 0 };
            let (launches, library) = self.missing();
            if launches == 0 && library == 0 && quiet >= 2 {
                // Every launch still waited for is one whose record the library dropped; the
                // drops so far explain nothing later.
                lock(&self.shared.state).give_up_waiting();
                self.drops_explained = self.lib_dropped;
                break;
            }
            if t0.elapsed() >= self.settle_timeout {
                let mut st = lock(&self.shared.state);
                st.give_up_waiting();
                st.counters[D::SettleTimeouts] += 1;
                self.drops_explained = self.lib_dropped;
                self.library_pending_given_up = library > 0;
                break;
            }
            let missing = launches + library > 0;
            std::thread::sleep(if missing { Duration::from_millis(1) } else { Duration::from_millis(5) });
        }
    }

    /// Stop collecting (with the session's stop): everything recorded so far is drained first.
    pub fn stop(&mut self) {
        if !self.running {
            return;
        }
        {
            let mut sm = lock(&self.shared.sampler);
            self.shared.settle_window(&mut sm);
            sm.on = false;
            sm.active_since = None;
        }
        self.flush(true);
        let api_disable = self.shared.api.disable;
        for k in std::mem::take(&mut self.active) {
            let _ = self.call(api_disable, "msptiActivityDisable", k);
        }
        launch_hooks::configure(0, None, None, None);
        self.shared.flushing.store(false, Ordering::Release);
        self.flush(false);
        self.running = false;
    }

    /// Stop, drain, and end the drain thread. Idempotent; nothing stays in a buffer.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        if FORKED.load(Ordering::Relaxed) {
            // A forked child has no drain thread and no MSPTI of its own: touch nothing.
            self.closed = true;
            if let Some(h) = self.drain.take() {
                std::mem::forget(h);
            }
            return;
        }
        self.stop();
        self.flush(false);
        self.shared.stop.store(true, Ordering::Release);
        if let Some(h) = self.drain.take() {
            h.thread().unpark();
            let _ = h.join();
        }
        lock(&self.shared.state).give_up_pending();
        self.unbridge();
        self.closed = true;
    }

    /// Every counter as it reads now: sums cumulative, the others their current reading.
    fn read_counters(&self, st: &State) -> ActivityCounts {
        let pool = self.shared.pool;
        let pc = pool.counters();
        let mut c = st.all_counters();
        c[D::PoolExhausted] = pc.exhausted;
        c[D::NullBuffers] = pc.null_buffers;
        c[D::ForeignBuffers] = pc.foreign_buffers;
        c[D::BuffersLent] = pool.lent() as u64;
        c[D::PoolBuffers] = pool.buffers() as u64;
        c[D::PoolPeakInUse] = pc.peak_in_use;
        c[D::LibraryDropped] = self.lib_dropped;
        c[D::LibraryReportsDrops] = u64::from(self.shared.api.dropped.is_some());
        c[D::UnloggedLaunches] = launch_hooks::UNLOGGED.load(Ordering::Relaxed);
        c[D::MarkFailures] = launch_hooks::MARK_FAILURES.load(Ordering::Relaxed);
        c
    }

    /// The current window (settled first while running); `reset` starts a new one.
    pub fn snapshot(&mut self, reset: bool) -> ActivityTotals {
        if self.running {
            // An open sample window is closed and settled first (the next opens a period on).
            self.shared.settle_window(&mut lock(&self.shared.sampler));
            self.flush(true);
        }
        let mut st = lock(&self.shared.state);
        let mut t = ActivityTotals {
            join: self.join.describe(),
            clock_bridge: self.clock_bridge().to_owned(),
            kinds: self.wanted(),
            ..Default::default()
        };
        let now = self.read_counters(&st);
        let mut values = now.since(&self.baseline);
        rows_of(&st, &mut t);
        // A closed window's events go with its snapshot; sequence numbers carry on.
        let (events, dropped) = if reset { st.events.take_window() } else { (Vec::new(), st.events.dropped) };
        let window = if reset { &events } else { &st.events.events };
        values[D::DeviceEventsDropped] = dropped;
        t.events = events::EventLog::resolve(window, |id| st.name(id));
        self.windows += 1;
        t.set_counters(self.id, self.windows, values);
        if reset {
            self.baseline = now;
            st.new_window();
            // into_other was part of the baseline's counters; the new tables start at zero.
            self.baseline[D::IntoOther] = 0;
        }
        t
    }
}

fn check_settle_timeout(t: Duration) -> Result<()> {
    if t > MAX_SETTLE_TIMEOUT {
        return Err(Error::InvalidArgument(format!(
            "the settle timeout is the longest a snapshot waits for device records known to be missing: \
             0 to {} s, not {} s",
            MAX_SETTLE_TIMEOUT.as_secs(),
            t.as_secs_f64()
        )));
    }
    Ok(())
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.close();
    }
}

/// `mstxMarkA` from libms_tools_ext.so (see `mstx`), for `mark_launches`.
fn mstx_mark_fn() -> Option<launch_hooks::FnMark> {
    mstx::functions().ok().map(|f| f.mark)
}
