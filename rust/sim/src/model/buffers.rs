//! The activity buffers, as MSPTI's `ActivityManager` keeps them (upstream
//! `csrc/activity/activity_manager.cpp`): buffers obtained from the user's request callback, the
//! complete callback on other threads or inside FlushAll, and the record writes every producer of
//! records goes through.
//!
//! - `record` takes the record lock (`buf_mtx_`), requests a buffer there when it has none, and
//!   hands the current buffer over once it is >= 80 % full, at the next record; a record that does
//!   not fit, or meets a NULL buffer, is dropped and counted.
//! - The manager thread wakes when a buffer is full (or at the flush period) and spawns one thread
//!   per full buffer to call complete, so completes run concurrently and out of order. A partly
//!   filled buffer is delivered only by `msptiActivityFlushAll`, on the caller's thread; from 26.x
//!   on, under the record lock.
//! - 26.0/26.1 hand a NULL buffer to complete as (NULL, size, 0) later; newest dev discards it.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use mspti_abi::*;

use crate::ground::clock::host_now;
use crate::ground::era::era;
use crate::ground::locks::{wait_timeout, ForkLock, Rank};
use crate::ground::padded::Padded;
use crate::ground::process::{gettid, pid, ProcessThread};
use crate::ground::state::kind_enabled;

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

static CALLBACKS: ForkLock<Callbacks> =
    ForkLock::new(Rank::Callbacks, Callbacks { request: None, complete: None });

fn callbacks() -> Callbacks {
    *CALLBACKS.lock()
}

/// `buf_mtx_` and `cur_buf_`: every record write takes it.
static CURRENT: Padded<ForkLock<Option<Buf>>> = Padded(ForkLock::new(Rank::Record, None));

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
static QUEUE: ForkLock<Queue> = ForkLock::with_child_hook(
    Rank::Queue,
    Queue {
        full: VecDeque::new(),
        buf_full: false,
        period_ms: DEFAULT_PERIOD_MS,
        period_on: false,
        workers: Vec::new(),
        generation: 0,
    },
    // The queue's completing threads do not exist in a `fork()` child: never join them.
    |q| std::mem::forget(std::mem::take(&mut q.workers)),
);
static QUEUE_CV: Condvar = Condvar::new();
/// The manager thread (a `fork()` child starts its own).
static MANAGER: ProcessThread = ProcessThread::new();
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
    let mut q = QUEUE.lock();
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
    write_locked(&mut CURRENT.lock(), bytes)
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
    RecordWriter(CURRENT.lock())
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
    MANAGER.ensure("ActivityManager", manager_loop);
}

fn manager_loop() {
    loop {
        let mut q = QUEUE.lock();
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
    let queued: Vec<Buf> = QUEUE.lock().full.drain(..).collect();
    for b in queued {
        complete(b, STAT_FLUSH_COMPLETES);
    }
    let me = std::thread::current().id();
    let workers: Vec<JoinHandle<()>> = {
        let mut q = QUEUE.lock();
        let (mine, others): (Vec<_>, Vec<_>) = q.workers.drain(..).partition(|h| h.thread().id() == me);
        q.workers = mine;
        others
    };
    for h in workers {
        let _ = h.join();
    }
    let mut cur = CURRENT.lock();
    if let Some(b) = cur.take() {
        if era().flush_completes_under_record_lock() {
            complete(b, STAT_FLUSH_COMPLETES);
        } else {
            drop(cur);
            complete(b, STAT_FLUSH_COMPLETES);
        }
    }
}

/// `msptiActivityRegisterCallbacks` with both functions given: the manager thread starts.
pub fn register_callbacks(
    request: MsptiBuffersCallbackRequestFunc,
    complete: MsptiBuffersCallbackCompleteFunc,
) {
    *CALLBACKS.lock() = Callbacks { request, complete };
    start_manager();
}

/// `msptiActivityFlushPeriod`: the manager hands full buffers over every `time` ms (0: only
/// when one is full, and at the default period).
pub fn flush_period(time: u32) {
    let mut q = QUEUE.lock();
    if time == 0 {
        q.period_ms = DEFAULT_PERIOD_MS;
        q.period_on = false;
    } else {
        q.period_ms = u64::from(time);
        q.period_on = true;
        q.generation += 1;
        QUEUE_CV.notify_one();
    }
}

/// `msptiActivityGetNextRecord` of a buffer of `valid` bytes at `buffer` (not NULL): the next
/// record's address, or the result code. The offset is the real library's `static thread_local
/// size_t pos`: it ignores the record the caller passes back.
///
/// # Safety
/// `buffer` must hold `valid` readable bytes.
pub unsafe fn next_record(buffer: *mut u8, valid: usize) -> Result<*mut MsptiActivity, MsptiResult> {
    thread_local! {
        static POS: Cell<usize> = const { Cell::new(0) };
    }
    let pos = POS.with(|p| p.get());
    if pos >= valid {
        POS.with(|p| p.set(0));
        return Err(MSPTI_ERROR_MAX_LIMIT_REACHED);
    }
    let e = era();
    let kind = if valid - pos >= 4 {
        // SAFETY: 4 bytes at `pos` lie inside the valid part of the caller's buffer.
        unsafe { std::ptr::read_unaligned(buffer.add(pos).cast::<u32>()) }
    } else {
        MSPTI_ACTIVITY_KIND_INVALID
    };
    let size = if e.has_kind(kind) { record_size(kind) } else { None };
    let Some(size) = size else {
        // The offset stays where it is, as in the real library.
        return Err(e.unknown_kind_result());
    };
    POS.with(|p| p.set(pos + size));
    // SAFETY: `pos` is inside the buffer.
    Ok(unsafe { buffer.add(pos) }.cast())
}

/// The records dropped since the last call (`msptiActivityGetNumDroppedRecords`).
pub fn take_dropped() -> u64 {
    DROPPED_SINCE_READ.swap(0, Ordering::Relaxed)
}

/// Answer every `n`-th buffer request with NULL without calling the user (0: never).
pub fn set_null_every(n: u64) {
    NULL_EVERY.store(n, Ordering::Relaxed);
}

/// A counter of the buffers (see the `STAT_*` constants), None for an unknown one.
pub fn stat(which: u32) -> Option<u64> {
    STATS.get(which as usize).map(|s| s.load(Ordering::Relaxed))
}

/// Back to defaults, for tests: buffers handed back (FlushAll), callbacks forgotten, the flush
/// period and the NULL answers off, counters 0.
pub fn reset() {
    flush_all();
    *CALLBACKS.lock() = Callbacks { request: None, complete: None };
    NULL_EVERY.store(0, Ordering::Relaxed);
    {
        let mut q = QUEUE.lock();
        q.period_ms = DEFAULT_PERIOD_MS;
        q.period_on = false;
        q.generation += 1;
        QUEUE_CV.notify_one();
    }
    for s in &STATS {
        s.store(0, Ordering::Relaxed);
    }
    DROPPED_SINCE_READ.store(0, Ordering::Relaxed);
}
