//! Device activity beside host API time (issue 11): the MSPTI Activity API through our own
//! buffer pool and a drain thread, aggregated into the same native histograms as the callbacks,
//! with the host-device join per launch function. Knows no Python.
//!
//! ```text
//!  MSPTI record thread ──request──▶ pool (lend)      MSPTI complete ──▶ pool (mark ready, O(1))
//!                                                                          │
//!  callback ──hook::around──▶ span rings ──────────────▶ drain thread ◀────┘  (+ FlushAll loop)
//!                                                          │ parse, intern, join
//!                                                          ▼
//!                                                    State (tables of Histogram) ──▶ snapshot
//! ```

pub mod aggregate;
pub mod bench;
pub mod clock_bridge;
pub mod events;
pub mod hook;
pub mod layout;
pub mod names;
pub mod pool;
pub mod records;
pub mod symbols;
mod sync;
pub mod tables;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::core::clock::ClockKind;
use crate::core::hist::Histogram;
use crate::core::windows::FORKED;
use crate::error::{Error, Result};
use aggregate::{Counters, State};
use layout::*;
use symbols::ActivityApi;
use tables::*;

/// The kinds a user may ask for, by their short names in the ABI's kind table (external
/// correlation and overhead are the collector's own business).
pub const KINDS: [u32; 11] = [
    KIND_KERNEL,
    KIND_API,
    KIND_ACL_API,
    KIND_RUNTIME_API,
    KIND_NODE_API,
    KIND_MARKER,
    KIND_HCCL,
    KIND_COMMUNICATION,
    KIND_MEMORY,
    KIND_MEMCPY,
    KIND_MEMSET,
];

pub fn kind_name(kind: u32) -> &'static str {
    mspti_abi::activity::activity_kind_info(kind).map_or("unknown", |k| k.short)
}

/// The user-facing kind names, in `KINDS` order.
pub fn kind_names() -> Vec<&'static str> {
    KINDS.iter().map(|&k| kind_name(k)).collect()
}

/// The kind of a name, or an error naming the valid ones.
pub fn kind_by_name(name: &str) -> Result<u32> {
    let n = name.trim().to_ascii_lowercase();
    KINDS.iter().copied().find(|&k| kind_name(k) == n).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "unknown activity kind {name:?}; valid kinds are {}",
            kind_names().join(", ")
        ))
    })
}

/// How launches are joined to their kernels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JoinMode {
    /// KERNEL is not enabled.
    Off,
    /// 26.x: thread id + time containment with RUNTIME_API records, then correlationId.
    RuntimeApi,
    /// 8.x: external correlation (CUSTOM2) pushed around each launch.
    External,
    /// Neither is possible with this library; the reason.
    Unavailable(String),
}

impl JoinMode {
    pub fn describe(&self) -> String {
        match self {
            JoinMode::Off => "off (enable the \"kernel\" kind)".to_owned(),
            JoinMode::RuntimeApi => "runtime_api".to_owned(),
            JoinMode::External => "external_correlation".to_owned(),
            JoinMode::Unavailable(why) => format!("unavailable: {why}"),
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub buffer_size: usize,
    pub buffers: usize,
    /// How often the drain calls FlushAll while running (FlushPeriod never delivers partial
    /// buffers).
    pub flush_interval: Duration,
    /// `mark_launches`: the stream (an `aclrtStream`) to mark each launch on.
    pub mark_stream: Option<usize>,
    /// Device events kept per window (0: no event log).
    pub device_events: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            buffer_size: 8 << 20,
            buffers: 8,
            flush_interval: Duration::from_millis(500),
            mark_stream: None,
            device_events: events::DEFAULT_CAP,
        }
    }
}

struct Shared {
    state: Mutex<State>,
    stop: AtomicBool,
    /// Tests hold the drain thread still to fill the pool deterministically.
    paused: AtomicBool,
    /// Whether the drain's FlushAll loop should run (kinds enabled and recording).
    flushing: AtomicBool,
    pool: &'static pool::Pool,
    api: ActivityApi,
}

impl Shared {
    /// Parse every buffer handed back so far, and return them to their pools.
    fn drain_now(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.ingest_spans();
        for p in pool::all_pools() {
            for (slot, valid) in p.take_ready() {
                st.ingest_buffer(p.bytes(slot, valid));
                p.release(slot);
            }
        }
    }

    fn flush_all(&self) {
        // SAFETY: msptiActivityFlushAll takes a flag it ignores; it may call our complete
        // callback on this thread, which only touches atomics.
        unsafe { (self.api.flush_all)(0) };
    }
}

/// One window of activity data, names resolved, ready for the binding layer.
#[derive(Clone, Debug, Default)]
pub struct ActivityTotals {
    /// (table, key0, key1, key2, metric, histogram, bytes).
    pub rows: Vec<HistRow>,
    /// (domain, message, with device, count) of instantaneous marks.
    pub marks: Vec<(String, String, bool, u64)>,
    pub counters: Vec<(&'static str, u64)>,
    pub join: String,
    pub clock_bridge: String,
    pub kinds: Vec<&'static str>,
    /// The window's device event log.
    pub events: events::EventLog,
}

impl ActivityTotals {
    /// The exact sum of two windows (threads, runs, ranks): histograms of one row add, marks and
    /// counters add, events concatenate (ordered by start).
    pub fn merge(&self, o: &ActivityTotals) -> ActivityTotals {
        use std::collections::BTreeMap;
        let mut rows: BTreeMap<(&'static str, [String; 3], &'static str), HistRow> = BTreeMap::new();
        for r in self.rows.iter().chain(&o.rows) {
            match rows.entry((r.table, r.keys.clone(), r.metric)) {
                std::collections::btree_map::Entry::Occupied(mut e) => {
                    let row = e.get_mut();
                    row.hist.merge(&r.hist);
                    row.bytes = row.bytes.saturating_add(r.bytes);
                }
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(r.clone());
                }
            }
        }
        let mut marks: BTreeMap<(String, String, bool), u64> = BTreeMap::new();
        for (d, n, dev, c) in self.marks.iter().chain(&o.marks) {
            *marks.entry((d.clone(), n.clone(), *dev)).or_default() += c;
        }
        let value = |t: &ActivityTotals, n: &str| t.counters.iter().find(|c| c.0 == n).map(|c| c.1);
        let counters = COUNTER_NAMES
            .iter()
            .filter_map(|&n| {
                let (a, b) = (value(self, n), value(o, n));
                let v = match n {
                    // A flag, not a count.
                    "library_reports_drops" => a.max(b)?,
                    _ => a.or(b).map(|_| a.unwrap_or(0).saturating_add(b.unwrap_or(0)))?,
                };
                Some((n, v))
            })
            .collect();
        let both = |a: &str, b: &str| {
            if a == b || b.is_empty() {
                a.to_owned()
            } else if a.is_empty() {
                b.to_owned()
            } else {
                format!("{a} + {b}")
            }
        };
        let kinds =
            kind_names().into_iter().filter(|k| self.kinds.contains(k) || o.kinds.contains(k)).collect();
        ActivityTotals {
            rows: rows.into_values().collect(),
            marks: marks.into_iter().map(|((d, n, dev), c)| (d, n, dev, c)).collect(),
            counters,
            join: both(&self.join, &o.join),
            clock_bridge: both(&self.clock_bridge, &o.clock_bridge),
            kinds,
            events: self.events.concat(&o.events),
        }
    }
}

#[derive(Clone, Debug)]
pub struct HistRow {
    pub table: &'static str,
    pub keys: [String; 3],
    pub metric: &'static str,
    pub hist: Histogram,
    pub bytes: u64,
}

pub struct Collector {
    shared: Arc<Shared>,
    drain: Option<JoinHandle<()>>,
    wanted: BTreeSet<u32>,
    /// Kinds enabled in the library now (user's and the join's own).
    active: BTreeSet<u32>,
    running: bool,
    closed: bool,
    join: JoinMode,
    mark_stream: Option<usize>,
    baseline: Counters,
    base_pool: pool::PoolCounters,
    lib_dropped: u64,
    base_lib_dropped: u64,
    /// The session's clock at the last start.
    session_clock: ClockKind,
    /// Our timestamp callback is registered with the library (see `clock_bridge`).
    bridged: bool,
    anchored: bool,
}

/// Every counter a device snapshot reports, in order (defined once).
pub const COUNTER_NAMES: [&str; 25] = [
    "records",
    "buffers",
    "bad_records",
    "skipped_bytes",
    "negative",
    "unpaired_markers",
    "unjoined_kernels",
    "ambiguous",
    "zero_correlation",
    "clock_skew",
    "overlapped",
    "spans_lost",
    "into_other",
    "names_overflow",
    "bad_pointers",
    "pool_exhausted",
    "null_buffers",
    "foreign_buffers",
    "buffers_lent",
    "library_dropped",
    "library_reports_drops",
    "kernels_pending",
    "unlogged_launches",
    "mark_failures",
    "device_events_dropped",
];

fn counter_values(c: &Counters) -> [(&'static str, u64); 15] {
    [
        ("records", c.records),
        ("buffers", c.buffers),
        ("bad_records", c.bad_records),
        ("skipped_bytes", c.skipped_bytes),
        ("negative", c.negative),
        ("unpaired_markers", c.unpaired_markers),
        ("unjoined_kernels", c.unjoined_kernels),
        ("ambiguous", c.ambiguous),
        ("zero_correlation", c.zero_correlation),
        ("clock_skew", c.clock_skew),
        ("overlapped", c.overlapped),
        ("spans_lost", c.spans_lost),
        ("into_other", c.into_other),
        ("names_overflow", c.names_overflow),
        ("bad_pointers", c.bad_pointers),
    ]
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
        let api = symbols::bind(path)?;
        mstx::offer(path);
        let pool = pool::pool(config.buffer_size, config.buffers).map_err(Error::InvalidArgument)?;
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
        hook::set_timestamp(api.get_timestamp);
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
        });
        let s2 = shared.clone();
        let interval = config.flush_interval;
        let drain = std::thread::Builder::new()
            .name("mspti-lens-drain".to_owned())
            .spawn(move || drain_loop(&s2, interval))
            .map_err(|e| Error::InvalidArgument(format!("could not start the activity drain thread: {e}")))?;
        pool.set_waker(drain.thread().clone());
        Ok(Collector {
            shared,
            drain: Some(drain),
            wanted: BTreeSet::new(),
            active: BTreeSet::new(),
            running: false,
            closed: false,
            join: JoinMode::Off,
            mark_stream: config.mark_stream,
            baseline: Counters::default(),
            base_pool: pool.counters(),
            lib_dropped: 0,
            base_lib_dropped: 0,
            session_clock: ClockKind::Monotonic,
            bridged: false,
            anchored: false,
        })
    }

    /// Hold the drain thread (buffers handed back wait in the pool); explicit flushes still
    /// drain. For tests of pool exhaustion.
    pub fn pause_drain(&self, paused: bool) {
        self.shared.paused.store(paused, Ordering::Release);
    }

    pub fn api(&self) -> &ActivityApi {
        &self.shared.api
    }

    pub fn wanted(&self) -> Vec<&'static str> {
        self.wanted.iter().map(|&k| kind_name(k)).collect()
    }

    pub fn join(&self) -> &JoinMode {
        &self.join
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

    /// Bring the library's enabled kinds to `wanted` plus what the join needs.
    fn apply(&mut self) -> Result<()> {
        let api_enable = self.shared.api.enable;
        let api_disable = self.shared.api.disable;
        let mut target = self.wanted.clone();
        let kernel = target.contains(&KIND_KERNEL);
        let mut join = JoinMode::Off;
        let mut hooks = 0u8;
        if kernel {
            // The join's own kinds, tried newest first.
            if self.active.contains(&KIND_RUNTIME_API)
                || self.call(api_enable, "msptiActivityEnable", KIND_RUNTIME_API).is_ok()
            {
                self.active.insert(KIND_RUNTIME_API);
                target.insert(KIND_RUNTIME_API);
                join = JoinMode::RuntimeApi;
                hooks |= hook::SPANS;
            } else if self.shared.api.push_external.is_some() && self.shared.api.pop_external.is_some() {
                if self.active.contains(&KIND_EXTERNAL_CORRELATION)
                    || self.call(api_enable, "msptiActivityEnable", KIND_EXTERNAL_CORRELATION).is_ok()
                {
                    self.active.insert(KIND_EXTERNAL_CORRELATION);
                    target.insert(KIND_EXTERNAL_CORRELATION);
                    join = JoinMode::External;
                    hooks |= hook::EXTERNAL;
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
        let mut mark: Option<hook::FnMark> = None;
        if self.mark_stream.is_some() {
            mark = self.shared.api.mstx_mark.or_else(crate::activity::mstx_mark_fn);
            if mark.is_some() {
                hooks |= hook::MARKS;
            } else if first_err.is_none() {
                first_err = Some(Error::InvalidArgument(
                    "mark_launches needs MSTX (mstxMarkA in libms_tools_ext.so): none was found; set \
                     MSTX_LIBRARY or source CANN's set_env.sh"
                        .to_owned(),
                ));
            }
        }
        hook::configure(hooks, mark, self.shared.api.push_external, self.shared.api.pop_external);
        self.join = join;
        let active = matches!(self.join, JoinMode::RuntimeApi | JoinMode::External);
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner()).join_active = active;
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
            hook::set_timestamp(Some(clock_bridge::session_get_timestamp));
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
        hook::set_timestamp(self.shared.api.get_timestamp);
        self.bridged = false;
    }

    /// Flush what MSPTI holds and drain it. `settle`: repeat FlushAll until two polls in a row
    /// bring nothing (device records arrive after FlushAll returns), at most about a second.
    pub fn flush(&mut self, settle: bool) {
        if self.closed || FORKED.load(Ordering::Relaxed) {
            return;
        }
        let sh = &self.shared;
        let t0 = Instant::now();
        let mut quiet = 0;
        loop {
            let before = sh.pool.counters().completed;
            sh.flush_all();
            sh.drain_now();
            if !settle {
                break;
            }
            quiet = if sh.pool.counters().completed == before { quiet + 1 } else { 0 };
            if quiet >= 2 || t0.elapsed() > Duration::from_secs(1) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some(f) = sh.api.dropped {
            let mut n = 0usize;
            // SAFETY: msptiActivityGetNumDroppedRecords ignores context and stream; valid out
            // pointer. It returns and resets the library's count, so we accumulate it.
            if unsafe { f(std::ptr::null_mut(), 0, &mut n) } == 0 {
                self.lib_dropped += n as u64;
            }
        }
    }

    /// Stop collecting (with the session's stop): everything recorded so far is drained first.
    pub fn stop(&mut self) {
        if !self.running {
            return;
        }
        self.flush(true);
        let api_disable = self.shared.api.disable;
        for k in std::mem::take(&mut self.active) {
            let _ = self.call(api_disable, "msptiActivityDisable", k);
        }
        hook::configure(0, None, None, None);
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
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner()).give_up_pending();
        self.unbridge();
        self.closed = true;
    }

    /// The current window (flushed first); `reset` starts a new one.
    pub fn snapshot(&mut self, reset: bool) -> ActivityTotals {
        if self.running {
            // Settled: device records still in MSPTI's channels arrive after one FlushAll.
            self.flush(true);
        }
        let pc = self.shared.pool.counters();
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut t = ActivityTotals {
            join: self.join.describe(),
            clock_bridge: self.clock_bridge().to_owned(),
            kinds: self.wanted(),
            ..Default::default()
        };
        let all = st.all_counters();
        let now = counter_values(&all);
        let base = counter_values(&self.baseline);
        for ((n, v), (_, b)) in now.iter().zip(base.iter()) {
            t.counters.push((n, v.saturating_sub(*b)));
        }
        t.counters.push(("pool_exhausted", pc.exhausted - self.base_pool.exhausted));
        t.counters.push(("null_buffers", pc.null_buffers - self.base_pool.null_buffers));
        t.counters.push(("foreign_buffers", pc.foreign_buffers - self.base_pool.foreign_buffers));
        t.counters.push(("buffers_lent", self.shared.pool.lent() as u64));
        t.counters.push(("library_dropped", self.lib_dropped - self.base_lib_dropped));
        t.counters.push(("library_reports_drops", u64::from(self.shared.api.dropped.is_some())));
        t.counters.push(("kernels_pending", st.pending_kernels()));
        t.counters.push(("unlogged_launches", hook::UNLOGGED.load(Ordering::Relaxed)));
        t.counters.push(("mark_failures", hook::MARK_FAILURES.load(Ordering::Relaxed)));
        rows_of(&st, &mut t);
        // A closed window's events go with its snapshot; sequence numbers carry on.
        let (events, dropped) =
            if reset { st.events.take_window() } else { (st.events.events.clone(), st.events.dropped) };
        t.counters.push(("device_events_dropped", dropped));
        t.events = events::EventLog::resolve(&events, |id| st.name(id));
        if reset {
            self.baseline = all;
            self.base_pool = pc;
            self.base_lib_dropped = self.lib_dropped;
            let s = &mut *st;
            s.kernels = Table::new(KERNEL_KEYS);
            s.apis = Table::new(OTHER_KEYS);
            s.collectives = Table::new(OTHER_KEYS);
            s.memcpy = Table::new(OTHER_KEYS);
            s.ranges = Table::new(OTHER_KEYS);
            s.marks.clear();
            s.launches = Launches::default();
            // into_other was part of the baseline's counters; the new tables start at zero.
            self.baseline.into_other = 0;
        }
        t
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.close();
    }
}

/// How often the drain wakes on its own (the complete callback wakes it sooner when the pool runs
/// low, and snapshots drain at once). Each wake costs a context switch; 20 ms keeps the drain's
/// share of a training job's CPU near 1 % while a thread's launch-span ring (`hook::RING` spans)
/// would need over 800,000 launches per second to overflow between two wakes.
const DRAIN_POLL: Duration = Duration::from_millis(20);

fn drain_loop(sh: &Shared, interval: Duration) {
    let mut last_flush = Instant::now();
    while !sh.stop.load(Ordering::Acquire) {
        std::thread::park_timeout(DRAIN_POLL);
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
        sh.drain_now();
    }
}

fn rows_of(st: &State, t: &mut ActivityTotals) {
    let name = |id: u32| st.name(id).to_owned();
    let mut push =
        |table: &'static str, keys: [String; 3], metric: &'static str, h: &Histogram, bytes: u64| {
            if h.count > 0 {
                t.rows.push(HistRow { table, keys, metric, hist: h.clone(), bytes });
            }
        };
    for (&(n, ty, _), r) in st.kernels.iter() {
        push("kernels", [name(n), name(ty), String::new()], "duration", &r.hist, 0);
    }
    for (&(kind, n, _), r) in st.apis.iter() {
        push("apis", [kind_name(kind).to_owned(), name(n), String::new()], "duration", &r.hist, 0);
    }
    for (&(g, op, src), r) in st.collectives.iter() {
        let keys = [name(g), name(op), COLL_SOURCES.get(src as usize).copied().unwrap_or("?").to_owned()];
        push("collectives", keys.clone(), "duration", &r.hist, r.bytes);
        if let Some(bw) = &r.second {
            push("collectives", keys, "bandwidth", bw, r.bytes);
        }
    }
    for (&(kind, sub, _), r) in st.memcpy.iter() {
        let direction = match kind {
            KIND_MEMCPY => MEMCPY_KINDS.get(sub as usize).copied().unwrap_or("UNKNOWN").to_owned(),
            KIND_MEMORY => {
                let op = if sub / 16 == 0 { "ALLOCATION" } else { "RELEASE" };
                let mk = match sub % 16 {
                    1 => "DEVICE",
                    2 => "HOST",
                    3 => "MANAGED",
                    _ => "UNKNOWN",
                };
                format!("{op} {mk}")
            }
            _ => String::new(),
        };
        let keys = [kind_name(kind).to_owned(), direction, String::new()];
        push("memcpy", keys.clone(), "duration", &r.hist, r.bytes);
        if let Some(b) = &r.second {
            push("memcpy", keys, "bytes", b, r.bytes);
        }
    }
    for (&(d, n, src), r) in st.ranges.iter() {
        let source = if src == RANGE_DEVICE { "device" } else { "host" };
        push("ranges", [name(d), name(n), source.to_owned()], "duration", &r.hist, 0);
    }
    for (&(n, src), r) in &st.launches.rows {
        let keys =
            [name(n), JOIN_SOURCES.get(src as usize).copied().unwrap_or("?").to_owned(), String::new()];
        push("launches", keys.clone(), "api", &r.api, 0);
        push("launches", keys.clone(), "queue", &r.queue, 0);
        push("launches", keys, "kernel", &r.kernel, 0);
    }
    for (&(d, n, dev), &c) in &st.marks {
        t.marks.push((name(d), name(n), dev == 1, c));
    }
    t.rows.sort_by(|a, b| (a.table, &a.keys, a.metric).cmp(&(b.table, &b.keys, b.metric)));
    t.marks.sort();
}

/// `mstxMarkA` from libms_tools_ext.so (see `mstx`), for `mark_launches`.
pub fn mstx_mark_fn() -> Option<hook::FnMark> {
    mstx::functions().ok().map(|f| f.mark)
}

pub mod mstx;
