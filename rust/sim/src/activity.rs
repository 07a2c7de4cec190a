//! The simulated MSPTI Activity API: the activity manager (buffers obtained from the user's
//! request callback, the complete callback on other threads or inside FlushAll), enabled kinds,
//! correlation ids, external correlation, marker domains and the newest-dev extras.
//!
//! Behaviour follows the real `ActivityManager` (upstream `csrc/activity/activity_manager.cpp`):
//! - `record` takes the record lock (`buf_mtx_`), requests a buffer there when it has none, and
//!   hands the current buffer over once it is >= 80 % full, at the next record; a record that does
//!   not fit, or meets a NULL buffer, is dropped and counted.
//! - The manager thread wakes when a buffer is full (or at the flush period) and spawns one thread
//!   per full buffer to call complete, so completes run concurrently and out of order. A partly
//!   filled buffer is delivered only by `msptiActivityFlushAll`, on the caller's thread; from 26.x
//!   on, under the record lock.
//! - 26.0/26.1 hand a NULL buffer to complete as (NULL, size, 0) later; newest dev discards it.
//! - Correlation ids: one global counter; a hooked runtime wrapper bumps the thread's id right
//!   before ENTER, each kernel task-track bumps it again while KERNEL is enabled, each collective
//!   node launch while COMMUNICATION is enabled; records carry the thread's current id.

use std::cell::Cell;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use mspti_abi::*;

use crate::clock;
use crate::device;
use crate::locks::{lock, wait_timeout};
use crate::padded::Padded;
use crate::state::{self, Fidelity};

// ---------------------------------------------------------------------------------------------
// Era: which MSPTI the activity side imitates. By default it follows the fidelity mode.

/// 0 follow the fidelity (cann8 → 8.x, cann26 → 26.0/26.1, documented → newest dev); 1 8.x;
/// 2 26.x; 3 newest dev.
static ERA_OVERRIDE: AtomicU32 = AtomicU32::new(0);

pub fn era() -> AbiEra {
    match ERA_OVERRIDE.load(Ordering::Relaxed) {
        1 => AbiEra::Cann8,
        2 => AbiEra::Mspti26,
        3 => AbiEra::NewestDev,
        _ => match state::fidelity() {
            Fidelity::Cann8 => AbiEra::Cann8,
            Fidelity::Cann26 => AbiEra::Mspti26,
            Fidelity::Documented => AbiEra::NewestDev,
        },
    }
}

/// Every MSPTI symbol this library exports, with the first era a real library has it
/// (the headers of each era). A real library of an older era has no such symbol: the simulator's
/// copy then returns `MSPTI_ERROR_INNER` without effect, and `msimHasSymbol` says 0, so a
/// loader can treat it as absent.
pub const SYMBOLS: [(&str, AbiEra); 30] = [
    ("msptiSubscribe", AbiEra::Cann8),
    ("msptiUnsubscribe", AbiEra::Cann8),
    ("msptiEnableCallback", AbiEra::Cann8),
    ("msptiEnableDomain", AbiEra::Cann8),
    ("msptiActivityRegisterCallbacks", AbiEra::Cann8),
    ("msptiActivityEnable", AbiEra::Cann8),
    ("msptiActivityDisable", AbiEra::Cann8),
    ("msptiActivityGetNextRecord", AbiEra::Cann8),
    ("msptiActivityFlushAll", AbiEra::Cann8),
    ("msptiActivityFlushPeriod", AbiEra::Cann8),
    ("msptiActivityPushExternalCorrelationId", AbiEra::Cann8),
    ("msptiActivityPopExternalCorrelationId", AbiEra::Cann8),
    ("msptiActivityEnableMarkerDomain", AbiEra::Cann8),
    ("msptiActivityDisableMarkerDomain", AbiEra::Cann8),
    ("msptiActivityIsEnabled", AbiEra::Mspti26),
    ("msptiGetResultString", AbiEra::NewestDev),
    ("msptiGetVersion", AbiEra::NewestDev),
    ("msptiGetTimestamp", AbiEra::NewestDev),
    ("msptiActivityGetStructSize", AbiEra::NewestDev),
    ("msptiActivityGetEnabledKinds", AbiEra::NewestDev),
    ("msptiActivityGetNumDroppedRecords", AbiEra::NewestDev),
    ("msptiActivityRegisterTimestampCallback", AbiEra::NewestDev),
    // libms_tools_ext.so, which this library also stands in for.
    ("mstxMarkA", AbiEra::Cann8),
    ("mstxRangeStartA", AbiEra::Cann8),
    ("mstxRangeEnd", AbiEra::Cann8),
    ("mstxDomainCreateA", AbiEra::Cann8),
    ("mstxDomainDestroy", AbiEra::Cann8),
    ("mstxDomainMarkA", AbiEra::Cann8),
    ("mstxDomainRangeStartA", AbiEra::Cann8),
    ("mstxDomainRangeEnd", AbiEra::Cann8),
];

pub fn has_symbol(name: &str) -> bool {
    SYMBOLS.iter().any(|s| s.0 == name && s.1 <= era())
}

fn exists_since(since: AbiEra) -> bool {
    since <= era()
}

// ---------------------------------------------------------------------------------------------
// Host clock, and the newest-dev timestamp callback.

static TIMESTAMP_CALLBACK: AtomicUsize = AtomicUsize::new(0);

/// MSPTI's host clock: the registered timestamp callback, else the simulator's clock
/// (CLOCK_REALTIME ns, or the calling thread's virtual time).
pub fn host_now() -> u64 {
    let f = TIMESTAMP_CALLBACK.load(Ordering::Acquire);
    if f == 0 {
        return clock::timestamp_ns();
    }
    // SAFETY: only ever stored from a non-NULL `unsafe extern "C" fn() -> u64` (see
    // msptiActivityRegisterTimestampCallback), so the transmute restores that type.
    let f: unsafe extern "C" fn() -> u64 = unsafe { std::mem::transmute(f) };
    // SAFETY: the user's callback takes nothing and returns a u64 (C contract).
    unsafe { f() }
}

// ---------------------------------------------------------------------------------------------
// Enabled kinds and counters.

static KINDS: AtomicU32 = AtomicU32::new(0);

pub fn kind_enabled(kind: MsptiActivityKind) -> bool {
    kind < 32 && KINDS.load(Ordering::Relaxed) & (1 << kind) != 0
}

pub fn any_enabled() -> bool {
    KINDS.load(Ordering::Relaxed) != 0
}

/// Statistics, for tests (`msimActivityStat`).
pub const STAT_RECORDS: usize = 0;
pub const STAT_DROPPED: usize = 1;
pub const STAT_REQUESTS: usize = 2;
pub const STAT_COMPLETES: usize = 3;
pub const STAT_NULL_COMPLETES: usize = 4;
pub const STAT_WORKER_COMPLETES: usize = 5;
pub const STAT_FLUSH_COMPLETES: usize = 6;
pub const STAT_PARTIAL_COMPLETES: usize = 7;
pub const STAT_KERNELS: usize = 8;
/// Device records that reached the channel's end after their kind was disabled (not written).
pub const STAT_DEVICE_DISCARDED: usize = 9;
/// Device records still unfinished when `msptiUnsubscribe`'s bounded wait ended (not written).
pub const STAT_DEVICE_LOST: usize = 10;
pub const STAT_COUNT: usize = 11;
/// Each on lines of its own: the launching thread counts kernels while the channel thread counts
/// records.
pub static STATS: [Padded<AtomicU64>; STAT_COUNT] = [const { Padded(AtomicU64::new(0)) }; STAT_COUNT];
/// The dropped count `msptiActivityGetNumDroppedRecords` returns and resets.
static DROPPED_SINCE_READ: AtomicU64 = AtomicU64::new(0);

pub fn stat_add(which: usize, n: u64) {
    STATS[which].fetch_add(n, Ordering::Relaxed);
}

/// Every N-th buffer request is answered with NULL without asking the user (0: never).
static NULL_EVERY: AtomicU64 = AtomicU64::new(0);

// ---------------------------------------------------------------------------------------------
// Buffers.

struct Buf {
    ptr: *mut u8,
    size: usize,
    valid: usize,
}
// SAFETY: the buffer is the user's memory, handed to MSPTI until complete; only one owner
// (the record lock, the queue, or a completing thread) touches it at a time.
unsafe impl Send for Buf {}

#[derive(Clone, Copy)]
struct Callbacks {
    request: MsptiBuffersCallbackRequestFunc,
    complete: MsptiBuffersCallbackCompleteFunc,
}

static CALLBACKS: Mutex<Callbacks> = Mutex::new(Callbacks { request: None, complete: None });

fn callbacks() -> Callbacks {
    *lock(&CALLBACKS)
}

/// `buf_mtx_` and `cur_buf_`: every record write takes it.
static CURRENT: Padded<Mutex<Option<Buf>>> = Padded(Mutex::new(None));

struct Queue {
    full: VecDeque<Buf>,
    buf_full: bool,
    period_ms: u64,
    period_on: bool,
    workers: Vec<JoinHandle<()>>,
    /// Bumped by FlushPeriod so the manager restarts its wait with the new period.
    generation: u64,
}

/// `DEFAULT_PERIOD_FLUSH_TIME`: the manager's wake-up period while periodic flush is off.
const DEFAULT_PERIOD_MS: u64 = 60_000;
const THRESHOLD: f64 = 0.8;

/// `cv_mtx_` and the queue of full buffers.
static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    full: VecDeque::new(),
    buf_full: false,
    period_ms: DEFAULT_PERIOD_MS,
    period_on: false,
    workers: Vec::new(),
    generation: 0,
});
static QUEUE_CV: Condvar = Condvar::new();
/// Whether this process has started the manager thread (a `fork()` child has none: it starts
/// its own, see `fork_child`).
static MANAGER_STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// `getpid()`, cached (a system call per record otherwise); `fork_child` renews it.
static PID: AtomicU32 = AtomicU32::new(0);

pub fn pid() -> u32 {
    match PID.load(Ordering::Relaxed) {
        0 => {
            install_fork_handlers();
            let p = std::process::id();
            PID.store(p, Ordering::Relaxed);
            p
        }
        p => p,
    }
}

#[allow(unknown_lints, clippy::manual_is_multiple_of)]
fn request_buffer() -> Option<Buf> {
    let n = STATS[STAT_REQUESTS].fetch_add(1, Ordering::Relaxed) + 1;
    let every = NULL_EVERY.load(Ordering::Relaxed);
    let mut ptr: *mut u8 = std::ptr::null_mut();
    let mut size = 0usize;
    let mut max_records = 0usize;
    let overhead = era() == AbiEra::NewestDev && kind_enabled(MSPTI_ACTIVITY_KIND_OVERHEAD);
    let t0 = if overhead { host_now() } else { 0 };
    if every == 0 || n % every != 0 {
        if let Some(req) = callbacks().request {
            // SAFETY: the user's request callback with valid out pointers (C contract); it runs
            // on the recording thread under the record lock, as in the real library.
            unsafe { req(&mut ptr, &mut size, &mut max_records) };
        }
    }
    if ptr.is_null() {
        if era() == AbiEra::NewestDev {
            // Newest dev discards an invalid buffer at once.
            return None;
        }
        if every != 0 && n % every == 0 {
            size = 0;
        }
    }
    let mut b = Buf { ptr, size, valid: 0 };
    if overhead && !ptr.is_null() {
        // Newest dev reports the request's own cost as the new buffer's first record.
        let r = MsptiActivityOverhead {
            kind: MSPTI_ACTIVITY_KIND_OVERHEAD,
            overhead_kind: MSPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST,
            object_id: MsptiIdPair::pt(pid(), gettid()),
            start: t0,
            end: host_now(),
            correlation_id: 0,
            overhead_data: std::ptr::null_mut(),
            object_kind: MSPTI_ACTIVITY_OBJECT_THREAD,
            _pad: [0; 4],
        };
        write_into(&mut b, &r);
    }
    Some(b)
}

/// Append a record struct to a buffer held by the record lock; false if it does not fit.
fn write_into<T: Copy>(b: &mut Buf, rec: &T) -> bool {
    let len = std::mem::size_of::<T>();
    if b.ptr.is_null() || len > b.size - b.valid {
        return false;
    }
    // SAFETY: the user gave `size` writable bytes at `ptr` and `valid + len <= size`; `T` is a
    // packed record struct (plain data, explicit pads), copied byte for byte.
    unsafe { std::ptr::copy_nonoverlapping((rec as *const T).cast::<u8>(), b.ptr.add(b.valid), len) };
    b.valid += len;
    stat_add(STAT_RECORDS, 1);
    true
}

fn queue_full(b: Buf) {
    let mut q = lock(&QUEUE);
    q.full.push_back(b);
    q.buf_full = true;
    QUEUE_CV.notify_one();
}

/// Write one record of `kind` (its bytes, exactly the C struct) as `ActivityManager::Record`
/// does. Returns whether it was written.
pub fn record_bytes(kind: MsptiActivityKind, bytes: &[u8]) -> bool {
    if !kind_enabled(kind) {
        return false;
    }
    write_locked(&mut lock(&CURRENT), bytes)
}

/// The record lock held across several records: the device channel writes its batches so, one
/// lock round-trip per batch rather than per record. Each record is written as `record_bytes`
/// writes it (same hand-over, requests, drops and counters), in order.
pub struct RecordWriter(MutexGuard<'static, Option<Buf>>);

impl RecordWriter {
    pub fn record_bytes(&mut self, kind: MsptiActivityKind, bytes: &[u8]) -> bool {
        kind_enabled(kind) && write_locked(&mut self.0, bytes)
    }
}

/// Take the record lock for a run of `RecordWriter::record_bytes`.
pub fn record_writer() -> RecordWriter {
    RecordWriter(lock(&CURRENT))
}

/// `record_bytes` of an enabled kind, under the record lock (`cur` is the current buffer).
fn write_locked(cur: &mut Option<Buf>, bytes: &[u8]) -> bool {
    let hand_over = match cur.as_ref() {
        None => {
            *cur = request_buffer();
            false
        }
        Some(b) => b.valid as f64 >= THRESHOLD * b.size as f64,
    };
    if hand_over {
        if let Some(full) = cur.take() {
            queue_full(full);
        }
        *cur = request_buffer();
    }
    match cur.as_mut() {
        Some(b) if !b.ptr.is_null() && bytes.len() <= b.size - b.valid => {
            // SAFETY: the user gave `size` writable bytes at `ptr`; `valid + len <= size`.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), b.ptr.add(b.valid), bytes.len()) };
            b.valid += bytes.len();
            stat_add(STAT_RECORDS, 1);
            true
        }
        _ => {
            stat_add(STAT_DROPPED, 1);
            DROPPED_SINCE_READ.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

/// Write one record struct.
pub(crate) fn record<T: Copy>(kind: MsptiActivityKind, rec: &T) -> bool {
    let (ptr, len) = ((rec as *const T).cast::<u8>(), std::mem::size_of::<T>());
    // SAFETY: `T` is one of the packed `repr(C)` record structs: plain data, no padding bytes
    // left uninitialised (tail pads are explicit fields), so viewing it as bytes is sound.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
    record_bytes(kind, bytes)
}

fn complete(b: Buf, from: usize) {
    let Some(c) = callbacks().complete else { return };
    stat_add(STAT_COMPLETES, 1);
    stat_add(from, 1);
    if b.ptr.is_null() {
        stat_add(STAT_NULL_COMPLETES, 1);
    } else if (b.valid as f64) < THRESHOLD * b.size as f64 {
        stat_add(STAT_PARTIAL_COMPLETES, 1);
    }
    // SAFETY: the user's complete callback, given back the buffer it handed out (C contract).
    unsafe { c(b.ptr, b.size, b.valid) };
}

fn start_manager() {
    if !MANAGER_STARTED.swap(true, Ordering::AcqRel) {
        install_fork_handlers();
        let _ = std::thread::Builder::new().name("ActivityManager".into()).spawn(manager_loop);
    }
}

thread_local! {
    /// The locks `fork()` holds across the fork (see `install_fork_handlers`).
    static FORK_GUARDS: std::cell::RefCell<Vec<Box<dyn std::any::Any>>> = const {
        std::cell::RefCell::new(Vec::new())
    };
}

extern "C" fn fork_prepare() {
    // In the lock order every path uses: record lock, queue, callbacks, device channel; then the
    // leaf locks (nobody takes another lock while holding one of them), so a child finds each free.
    let mut guards: Vec<Box<dyn std::any::Any>> = vec![
        Box::new(lock(&CURRENT)),
        Box::new(lock(&QUEUE)),
        Box::new(lock(&CALLBACKS)),
        Box::new(device::lock_channel()),
        Box::new(lock(&EXTERNAL)),
        Box::new(lock(&DISABLED_DOMAINS)),
    ];
    guards.extend(device::leaf_guards());
    guards.extend(crate::acl::leaf_guards());
    guards.extend(crate::mstx::leaf_guards());
    FORK_GUARDS.with(|g| *g.borrow_mut() = guards);
}

extern "C" fn fork_parent() {
    FORK_GUARDS.with(|g| g.borrow_mut().clear());
}

extern "C" fn fork_child() {
    PID.store(std::process::id(), Ordering::Relaxed);
    MANAGER_STARTED.store(false, Ordering::Relaxed);
    device::forget_channel_thread();
    FORK_GUARDS.with(|g| {
        let mut g = g.borrow_mut();
        // The queue's completing threads do not exist in the child: never join them.
        if let Some(q) = g.get_mut(1).and_then(|q| q.downcast_mut::<MutexGuard<'static, Queue>>()) {
            std::mem::forget(std::mem::take(&mut q.workers));
        }
        g.clear();
    });
}

/// A `fork()` child gets the simulator's locks free (none held mid-update by a thread that is
/// gone) and starts its own manager and channel threads when it next needs them.
pub(crate) fn install_fork_handlers() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        extern "C" {
            fn pthread_atfork(
                prepare: Option<extern "C" fn()>,
                parent: Option<extern "C" fn()>,
                child: Option<extern "C" fn()>,
            ) -> i32;
        }
        // SAFETY: libc's pthread_atfork with three handlers of the `void (*)(void)` type.
        unsafe { pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
    });
}

fn manager_loop() {
    loop {
        let mut q = lock(&QUEUE);
        let gen = q.generation;
        let mut waited = Duration::ZERO;
        loop {
            if q.buf_full {
                break;
            }
            let period = Duration::from_millis(q.period_ms.max(1));
            if waited >= period {
                waited = Duration::ZERO;
                if q.period_on {
                    break;
                }
            }
            let step = period - waited;
            let t0 = std::time::Instant::now();
            q = wait_timeout(&QUEUE_CV, q, step);
            waited += t0.elapsed();
            if q.generation != gen {
                // FlushPeriod: wake now (hand over what is full) and restart with the new period.
                break;
            }
        }
        q.workers.retain(|h| !h.is_finished());
        let full: Vec<Buf> = q.full.drain(..).collect();
        for b in full {
            let worker = std::thread::Builder::new().name("msim-complete".into());
            if let Ok(h) = worker.spawn(move || complete(b, STAT_WORKER_COMPLETES)) {
                q.workers.push(h);
            }
        }
        q.buf_full = false;
    }
}

/// `msptiActivityFlushAll`: queued full buffers completed on this thread, completing threads
/// joined, then the current buffer (partial) completed: under the record lock from 26.x on.
pub fn flush_all() {
    let queued: Vec<Buf> = lock(&QUEUE).full.drain(..).collect();
    for b in queued {
        complete(b, STAT_FLUSH_COMPLETES);
    }
    let me = std::thread::current().id();
    let workers: Vec<JoinHandle<()>> = {
        let mut q = lock(&QUEUE);
        let (mine, others): (Vec<_>, Vec<_>) = q.workers.drain(..).partition(|h| h.thread().id() == me);
        q.workers = mine;
        others
    };
    for h in workers {
        let _ = h.join();
    }
    let mut cur = lock(&CURRENT);
    if let Some(b) = cur.take() {
        if era().flush_completes_under_record_lock() {
            complete(b, STAT_FLUSH_COMPLETES);
        } else {
            drop(cur);
            complete(b, STAT_FLUSH_COMPLETES);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Correlation ids and external correlation.

static NEXT_CORRELATION: Padded<AtomicU64> = Padded(AtomicU64::new(0));
thread_local! {
    static CURRENT_CORRELATION: Cell<u64> = const { Cell::new(0) };
}
/// `ExternalCorrelationReporter` (upstream `csrc/activity/ascend/reporter/
/// external_correlation_reporter.cpp`): one process-global stack per kind (any value: no kind is
/// checked), in a map ordered by kind, under one mutex (not per thread, whatever the header says);
/// a kind whose stack empties leaves the map.
static EXTERNAL: Mutex<BTreeMap<u32, Vec<u64>>> = Mutex::new(BTreeMap::new());

/// The calling thread's current correlation id (0 until something bumped it).
pub fn current_correlation() -> u64 {
    CURRENT_CORRELATION.with(|c| c.get())
}

/// `UpdateAndReportCorrelationId`: take the next id as this thread's, and write one
/// EXTERNAL_CORRELATION record per kind with a pushed id.
pub fn bump_correlation() -> u64 {
    let id = NEXT_CORRELATION.fetch_add(1, Ordering::Relaxed) + 1;
    CURRENT_CORRELATION.with(|c| c.set(id));
    if kind_enabled(MSPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
        let tops: Vec<(u32, u64)> =
            lock(&EXTERNAL).iter().filter_map(|(&k, s)| s.last().map(|&top| (k, top))).collect();
        for (k, top) in tops {
            let r = MsptiActivityExternalCorrelation {
                kind: MSPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                external_kind: k,
                external_id: top,
                correlation_id: id,
            };
            record(MSPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, &r);
        }
    }
    id
}

// ---------------------------------------------------------------------------------------------
// Marker domains (MSTX), enabled by default; may be disabled before they exist.

static DISABLED_DOMAINS: Mutex<Option<HashSet<String>>> = Mutex::new(None);

pub fn marker_domain_enabled(name: &str) -> bool {
    !matches!(lock(&DISABLED_DOMAINS).as_ref(), Some(s) if s.contains(name))
}

// ---------------------------------------------------------------------------------------------
// Records of host calls (the hooks in apis.rs).

/// The kernel's `gettid()`: MSPTI's `GetTid` (`syscall(SYS_gettid)`).
pub fn gettid() -> u32 {
    extern "C" {
        fn gettid() -> i32;
    }
    thread_local! {
        static TID: Cell<u32> = const { Cell::new(0) };
    }
    TID.with(|t| {
        if t.get() == 0 {
            // SAFETY: glibc's gettid takes nothing and cannot fail.
            t.set(unsafe { gettid() } as u32);
        }
        t.get()
    })
}

/// A string that stays valid for the life of the process, like the real library's name caches
/// (lock-free: see `crate::intern`).
pub fn intern(s: &str) -> &'static CStr {
    crate::intern::intern(s)
}

/// The runtime's internal name of an API in RUNTIME_API records (not the callback's
/// `functionName`). The reference names "LaunchKernelV2", "MemCopySync" and "DevMalloc"; the
/// others are INFERENCE, built from the callback id.
pub fn runtime_api_name(cbid: u32, function_name: &str) -> &'static CStr {
    let n = match cbid {
        10 if function_name.ends_with("V2") => "LaunchKernelV2",
        10 => "KernelLaunch",
        15 => "DevMalloc",
        16 => "DevFree",
        22 => "MemCopySync",
        24 => "MemcpyAsync",
        27 => "MemSetSync",
        28 => "MemsetAsync",
        9 => "StreamSynchronize",
        _ => {
            let short = callback_info(MSPTI_CB_DOMAIN_RUNTIME, cbid).map_or("Unknown", |c| c.short);
            let camel: String = short
                .split('_')
                .map(|w| {
                    let mut cs = w.chars();
                    cs.next().map_or(String::new(), |f| f.to_string() + &cs.as_str().to_ascii_lowercase())
                })
                .collect();
            return intern(&camel);
        }
    };
    intern(n)
}

pub fn api_record(kind: MsptiActivityKind, name: &'static CStr, start: u64, end: u64) {
    if !kind_enabled(kind) || !era().has_kind(kind) {
        return;
    }
    let r = MsptiActivityApi {
        kind,
        start,
        end,
        pt: MsptiIdPair::pt(pid(), gettid()),
        correlation_id: current_correlation(),
        name: name.as_ptr(),
        _pad: [0; 4],
    };
    record(kind, &r);
}

/// Whether MSPTI's wrappers run (libmspti preloaded): the hooked wrappers' bumps, HCCL's
/// inner marks and (before newest dev) the memory records need them.
pub fn hooked() -> bool {
    !state::not_interposed()
}

/// Whether a subscriber exists: every producer of records needs one (MSPTI registers its report
/// callbacks and MSTX handlers in `msptiSubscribe`).
pub fn subscribed() -> bool {
    !state::SUBSCRIBER.load(Ordering::Acquire).is_null()
}

/// Whether records are being made at all: a subscriber and some kind enabled.
pub fn recording() -> bool {
    any_enabled() && subscribed()
}

static NEXT_ADDRESS: AtomicU64 = AtomicU64::new(0x1240_0000_0000);

/// The device work and records of one hooked host call, made between its host work and its EXIT
/// callback (as MSPTI's memory records are): device work of launches and collectives, MEMCPY /
/// MEMSET / MEMORY records with the call's host window [t0, now], then ACL_API and RUNTIME_API
/// records (26.x on) for runtime calls, API / NODE_API records for node-level (operator) calls,
/// and the API record HCCL reports for a collective under its op name; all carry the thread's id
/// after the kernels' bumps. A call made with a device spec (the workloads', `msimLaunch`'s) runs
/// on the device whether or not anything records it, so a synchronize waits for it either way.
pub fn host_call_records(
    domain: u32,
    cbid: u32,
    function_name: &'static CStr,
    t0: u64,
    spec: Option<device::CallSpec>,
) {
    let recording = recording();
    if !recording && spec.is_none() {
        return;
    }
    let t1 = host_now();
    let spec = spec.unwrap_or_default();
    if !recording {
        if domain == MSPTI_CB_DOMAIN_HCCL {
            device::submit_collective(function_name, cbid, &spec, t1);
        } else if domain == MSPTI_CB_DOMAIN_RUNTIME && (10..=14).contains(&cbid) {
            device::submit_kernels(&spec, t1);
        }
        return;
    }
    let e = era();
    let memory_reported = e == AbiEra::NewestDev || hooked();
    let (dev, stream) = (device::thread_device(), device::thread_stream());
    if domain == MSPTI_CB_DOMAIN_HCCL {
        device::submit_collective(function_name, cbid, &spec, t1);
        api_record(MSPTI_ACTIVITY_KIND_API, crate::cann::comm_op_name(cbid), t0, t1);
    } else if domain == MSPTI_CB_DOMAIN_RUNTIME {
        match cbid {
            10..=14 => device::submit_kernels(&spec, t1),
            22..=26 if memory_reported && kind_enabled(MSPTI_ACTIVITY_KIND_MEMCPY) => {
                let copy_kind = match (spec.copy_kind, cbid) {
                    (k, _) if k != MSPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN => k,
                    (_, 22) => MSPTI_ACTIVITY_MEMCPY_KIND_DTOH,
                    _ => MSPTI_ACTIVITY_MEMCPY_KIND_HTOD,
                };
                let r = MsptiActivityMemcpy {
                    kind: MSPTI_ACTIVITY_KIND_MEMCPY,
                    copy_kind,
                    bytes: spec.bytes,
                    start: t0,
                    end: t1,
                    device_id: dev,
                    stream_id: stream,
                    correlation_id: current_correlation(),
                    is_async: u8::from(cbid == 24 || cbid == 26),
                    _pad: [0; 7],
                };
                record(MSPTI_ACTIVITY_KIND_MEMCPY, &r);
            }
            27 | 28 if memory_reported && kind_enabled(MSPTI_ACTIVITY_KIND_MEMSET) => {
                let r = MsptiActivityMemset {
                    kind: MSPTI_ACTIVITY_KIND_MEMSET,
                    value: 0,
                    bytes: spec.bytes,
                    start: t0,
                    end: t1,
                    device_id: dev,
                    stream_id: stream,
                    correlation_id: current_correlation(),
                    is_async: u8::from(cbid == 28),
                    _pad: [0; 7],
                };
                record(MSPTI_ACTIVITY_KIND_MEMSET, &r);
            }
            15 | 16 | 17 | 18 | 19 | 32 | 33
                if memory_reported && kind_enabled(MSPTI_ACTIVITY_KIND_MEMORY) =>
            {
                let release = matches!(cbid, 16 | 18 | 33);
                let host = matches!(cbid, 17 | 18);
                let r = MsptiActivityMemory {
                    kind: MSPTI_ACTIVITY_KIND_MEMORY,
                    memory_operation_type: if release {
                        MSPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE
                    } else {
                        MSPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION
                    },
                    memory_kind: match (host, e) {
                        (false, _) => MSPTI_ACTIVITY_MEMORY_DEVICE,
                        (true, AbiEra::NewestDev) => MSPTI_ACTIVITY_MEMORY_HOST,
                        (true, _) => MSPTI_ACTIVITY_MEMORY_UNKNOWN,
                    },
                    correlation_id: current_correlation(),
                    start: t0,
                    end: t1,
                    address: NEXT_ADDRESS
                        .fetch_add(spec.bytes.max(512).next_multiple_of(512), Ordering::Relaxed),
                    bytes: spec.bytes,
                    process_id: pid(),
                    device_id: dev,
                    stream_id: MSPTI_INVALID_STREAM_ID,
                };
                record(MSPTI_ACTIVITY_KIND_MEMORY, &r);
            }
            _ => {}
        }
        if e >= AbiEra::Mspti26 {
            api_record(MSPTI_ACTIVITY_KIND_ACL_API, function_name, t0, t1);
            if kind_enabled(MSPTI_ACTIVITY_KIND_RUNTIME_API) {
                let n = runtime_api_name(cbid, &function_name.to_string_lossy());
                api_record(MSPTI_ACTIVITY_KIND_RUNTIME_API, n, t0, t1);
            }
        }
    }
    if let Some(node) = spec.node {
        api_record(MSPTI_ACTIVITY_KIND_API, node, t0, t1);
        api_record(MSPTI_ACTIVITY_KIND_NODE_API, node, t0, t1);
    }
}

// ---------------------------------------------------------------------------------------------
// The exported Activity API.

fn absent(since: AbiEra) -> bool {
    !exists_since(since)
}

#[no_mangle]
pub extern "C" fn msptiActivityRegisterCallbacks(
    func_buffer_requested: MsptiBuffersCallbackRequestFunc,
    func_buffer_completed: MsptiBuffersCallbackCompleteFunc,
) -> MsptiResult {
    if func_buffer_requested.is_none() || func_buffer_completed.is_none() {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    *lock(&CALLBACKS) = Callbacks { request: func_buffer_requested, complete: func_buffer_completed };
    start_manager();
    MSPTI_SUCCESS
}

#[no_mangle]
pub extern "C" fn msptiActivityEnable(kind: MsptiActivityKind) -> MsptiResult {
    let e = era();
    if !e.has_kind(kind) {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    if e.kind_needs_preload(kind) && state::not_interposed() {
        return MSPTI_ERROR_WITHOUT_LD_PRELOAD;
    }
    KINDS.fetch_or(1 << kind, Ordering::Relaxed);
    MSPTI_SUCCESS
}

#[no_mangle]
pub extern "C" fn msptiActivityDisable(kind: MsptiActivityKind) -> MsptiResult {
    let e = era();
    if !e.has_kind(kind) {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    let device_kind = matches!(
        kind,
        MSPTI_ACTIVITY_KIND_MARKER
            | MSPTI_ACTIVITY_KIND_KERNEL
            | MSPTI_ACTIVITY_KIND_HCCL
            | MSPTI_ACTIVITY_KIND_COMMUNICATION
    );
    if device_kind && e >= AbiEra::Mspti26 {
        // 26.x flushes the device channels before the kind goes off; 8.x does not, and what is
        // still in the channel is then lost.
        device::flush_ready();
    }
    KINDS.fetch_and(!(1 << kind), Ordering::Relaxed);
    MSPTI_SUCCESS
}

#[no_mangle]
pub extern "C" fn msptiActivityIsEnabled(kind: MsptiActivityKind) -> bool {
    exists_since(AbiEra::Mspti26) && era().has_kind(kind) && kind_enabled(kind)
}

/// # Safety
/// `buffer` must hold `valid_buffer_size_bytes` readable bytes; `record` must be writable.
#[no_mangle]
pub unsafe extern "C" fn msptiActivityGetNextRecord(
    buffer: *mut u8,
    valid_buffer_size_bytes: usize,
    record: *mut *mut MsptiActivity,
) -> MsptiResult {
    thread_local! {
        // The real library's `static thread_local size_t pos`: it ignores `*record`.
        static POS: Cell<usize> = const { Cell::new(0) };
    }
    if buffer.is_null() || record.is_null() {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    let pos = POS.with(|p| p.get());
    if pos >= valid_buffer_size_bytes {
        POS.with(|p| p.set(0));
        return MSPTI_ERROR_MAX_LIMIT_REACHED;
    }
    let e = era();
    let kind = if valid_buffer_size_bytes - pos >= 4 {
        // SAFETY: 4 bytes at `pos` lie inside the valid part of the caller's buffer.
        unsafe { std::ptr::read_unaligned(buffer.add(pos).cast::<u32>()) }
    } else {
        MSPTI_ACTIVITY_KIND_INVALID
    };
    let size = if e.has_kind(kind) { record_size(kind) } else { None };
    let Some(size) = size else {
        // The offset stays where it is, as in the real library.
        return e.unknown_kind_result();
    };
    // SAFETY: `pos` is inside the buffer; `record` was checked non-NULL.
    unsafe { *record = buffer.add(pos).cast() };
    POS.with(|p| p.set(pos + size));
    MSPTI_SUCCESS
}

#[no_mangle]
pub extern "C" fn msptiActivityFlushAll(_flag: u32) -> MsptiResult {
    flush_all();
    MSPTI_SUCCESS
}

#[no_mangle]
pub extern "C" fn msptiActivityFlushPeriod(time: u32) -> MsptiResult {
    let mut q = lock(&QUEUE);
    if time == 0 {
        q.period_ms = DEFAULT_PERIOD_MS;
        q.period_on = false;
    } else {
        q.period_ms = u64::from(time);
        q.period_on = true;
        q.generation += 1;
        QUEUE_CV.notify_one();
    }
    MSPTI_SUCCESS
}

#[no_mangle]
pub extern "C" fn msptiActivityPushExternalCorrelationId(
    kind: MsptiExternalCorrelationKind,
    id: u64,
) -> MsptiResult {
    lock(&EXTERNAL).entry(kind).or_default().push(id);
    MSPTI_SUCCESS
}

/// # Safety
/// `last_id`, when not NULL, must point to a writable u64.
#[no_mangle]
pub unsafe extern "C" fn msptiActivityPopExternalCorrelationId(
    kind: MsptiExternalCorrelationKind,
    last_id: *mut u64,
) -> MsptiResult {
    if last_id.is_null() {
        // The real library returns 1 and does not pop, whatever the header says.
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    let mut g = lock(&EXTERNAL);
    let Some(stack) = g.get_mut(&kind) else { return MSPTI_ERROR_QUEUE_EMPTY };
    let id = stack.pop().unwrap_or_default();
    if stack.is_empty() {
        g.remove(&kind);
    }
    // SAFETY: checked non-NULL above.
    unsafe { *last_id = id };
    MSPTI_SUCCESS
}

fn domain_arg(name: *const c_char) -> Option<String> {
    if name.is_null() {
        return None;
    }
    // SAFETY: a non-NULL C string from the caller (C contract).
    Some(unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned())
}

/// # Safety
/// `name` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn msptiActivityEnableMarkerDomain(name: *const c_char) -> MsptiResult {
    let Some(n) = domain_arg(name) else { return MSPTI_ERROR_INVALID_PARAMETER };
    if let Some(s) = lock(&DISABLED_DOMAINS).as_mut() {
        s.remove(&n);
    }
    MSPTI_SUCCESS
}

/// # Safety
/// `name` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn msptiActivityDisableMarkerDomain(name: *const c_char) -> MsptiResult {
    let Some(n) = domain_arg(name) else { return MSPTI_ERROR_INVALID_PARAMETER };
    lock(&DISABLED_DOMAINS).get_or_insert_with(HashSet::new).insert(n);
    MSPTI_SUCCESS
}

/// # Safety
/// `size`, when not NULL, must point to a writable size_t.
#[no_mangle]
pub unsafe extern "C" fn msptiActivityGetStructSize(
    kind: MsptiActivityKind,
    _version: u32,
    size: *mut usize,
) -> MsptiResult {
    if absent(AbiEra::NewestDev) {
        return MSPTI_ERROR_INNER;
    }
    if size.is_null() {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    match record_size(kind) {
        Some(s) => {
            // SAFETY: checked non-NULL above.
            unsafe { *size = s };
            MSPTI_SUCCESS
        }
        None => MSPTI_ERROR_INVALID_KIND,
    }
}

/// # Safety
/// Out pointers, when not NULL, must be writable; `buffer` must hold `*buffer_size` kinds.
#[no_mangle]
pub unsafe extern "C" fn msptiActivityGetEnabledKinds(
    _subscriber: MsptiSubscriberHandle,
    buffer: *mut MsptiActivityKind,
    buffer_size: *mut u32,
    enabled_kinds_count: *mut u32,
) -> MsptiResult {
    if absent(AbiEra::NewestDev) {
        return MSPTI_ERROR_INNER;
    }
    if enabled_kinds_count.is_null() {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    let kinds: Vec<u32> = (0..32).filter(|&k| kind_enabled(k)).collect();
    // SAFETY: checked non-NULL above.
    unsafe { *enabled_kinds_count = kinds.len() as u32 };
    if buffer.is_null() {
        return MSPTI_SUCCESS;
    }
    if buffer_size.is_null() {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    // SAFETY: checked non-NULL; the caller's buffer holds `*buffer_size` entries.
    let n = unsafe { *buffer_size }.min(kinds.len() as u32) as usize;
    for (i, k) in kinds.iter().take(n).enumerate() {
        // SAFETY: `i < *buffer_size`.
        unsafe { *buffer.add(i) = *k };
    }
    MSPTI_SUCCESS
}

/// # Safety
/// `dropped`, when not NULL, must point to a writable size_t.
#[no_mangle]
pub unsafe extern "C" fn msptiActivityGetNumDroppedRecords(
    _context: *mut c_void,
    _stream_id: u32,
    dropped: *mut usize,
) -> MsptiResult {
    if absent(AbiEra::NewestDev) {
        return MSPTI_ERROR_INNER;
    }
    if dropped.is_null() {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    // SAFETY: checked non-NULL above.
    unsafe { *dropped = DROPPED_SINCE_READ.swap(0, Ordering::Relaxed) as usize };
    MSPTI_SUCCESS
}

#[no_mangle]
pub extern "C" fn msptiActivityRegisterTimestampCallback(
    callback: MsptiTimestampCallbackFunc,
) -> MsptiResult {
    if absent(AbiEra::NewestDev) {
        return MSPTI_ERROR_INNER;
    }
    TIMESTAMP_CALLBACK.store(callback.map_or(0, |f| f as usize), Ordering::Release);
    MSPTI_SUCCESS
}

// ---------------------------------------------------------------------------------------------
// Simulator control of the activity side. None of these exist in a real libmspti.

/// 0 follow the fidelity mode (default), 1 CANN 8.x, 2 MSPTI 26.0/26.1, 3 newest dev.
/// Returns 0, or 1 for an unknown value.
#[no_mangle]
pub extern "C" fn msimSetActivityEra(era: u32) -> u32 {
    if era > 3 {
        return 1;
    }
    ERA_OVERRIDE.store(era, Ordering::Relaxed);
    0
}

/// The era in effect: 1 CANN 8.x, 2 MSPTI 26.x, 3 newest dev.
#[no_mangle]
pub extern "C" fn msimGetActivityEra() -> u32 {
    match era() {
        AbiEra::Cann8 => 1,
        AbiEra::Mspti26 => 2,
        AbiEra::NewestDev => 3,
    }
}

/// 1 when a real library of the current era exports `name`, else 0.
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn msimHasSymbol(name: *const c_char) -> u32 {
    domain_arg(name).map_or(0, |n| u32::from(has_symbol(&n)))
}

/// Answer every `n`-th buffer request with NULL without calling the user (0: never).
#[no_mangle]
pub extern "C" fn msimSetNullBufferEvery(n: u64) {
    NULL_EVERY.store(n, Ordering::Relaxed);
}

/// A counter of the activity side (see the `STAT_*` constants); u64::MAX for an unknown one.
#[no_mangle]
pub extern "C" fn msimActivityStat(which: u32) -> u64 {
    STATS.get(which as usize).map_or(u64::MAX, |s| s.load(Ordering::Relaxed))
}

/// Back to defaults, for tests: every kind off, buffers handed back (FlushAll), callbacks and
/// the timestamp callback forgotten, device timelines and pending device records cleared,
/// counters, correlation ids, external stacks, marker domains and MSTX ranges reset, and the
/// calling thread's virtual clock back in the present.
#[no_mangle]
pub extern "C" fn msimActivityReset() {
    KINDS.store(0, Ordering::Relaxed);
    clock::virtual_set(0);
    device::reset();
    flush_all();
    *lock(&CALLBACKS) = Callbacks { request: None, complete: None };
    TIMESTAMP_CALLBACK.store(0, Ordering::Release);
    ERA_OVERRIDE.store(0, Ordering::Relaxed);
    NULL_EVERY.store(0, Ordering::Relaxed);
    {
        let mut q = lock(&QUEUE);
        q.period_ms = DEFAULT_PERIOD_MS;
        q.period_on = false;
        q.generation += 1;
        QUEUE_CV.notify_one();
    }
    for s in &STATS {
        s.store(0, Ordering::Relaxed);
    }
    DROPPED_SINCE_READ.store(0, Ordering::Relaxed);
    NEXT_CORRELATION.store(0, Ordering::Relaxed);
    CURRENT_CORRELATION.with(|c| c.set(0));
    lock(&EXTERNAL).clear();
    *lock(&DISABLED_DOMAINS) = None;
    crate::mstx::reset();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_symbol_is_exported_once() {
        let src = [include_str!("activity.rs"), include_str!("lib.rs"), include_str!("mstx.rs")].concat();
        for (name, _) in SYMBOLS {
            let n = SYMBOLS.iter().filter(|s| s.0 == name).count();
            assert_eq!(n, 1, "{name} listed twice");
            assert!(src.contains(&format!("fn {name}(")), "{name} is listed but not exported");
        }
    }

    #[test]
    fn runtime_api_names_are_the_runtimes_not_the_callbacks() {
        assert_eq!(runtime_api_name(10, "aclrtLaunchKernelV2").to_bytes(), b"LaunchKernelV2");
        assert_eq!(runtime_api_name(22, "aclrtMemcpy").to_bytes(), b"MemCopySync");
        assert_eq!(runtime_api_name(15, "aclrtMalloc").to_bytes(), b"DevMalloc");
        assert_eq!(runtime_api_name(1, "aclrtSetDevice").to_bytes(), b"DeviceSet");
    }
}
