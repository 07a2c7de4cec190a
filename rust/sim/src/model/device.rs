//! The simulated device: one timeline per (device, stream), and the channel that turns finished
//! device work into activity records later, on a thread of its own.
//!
//! A launch returns before its kernel runs: the kernel is submitted at the end of the launch's
//! host work and starts `launch_latency` later, or when the stream's previous task ends, whichever
//! is later; kernels on one stream never overlap. Its KERNEL record becomes available on the
//! channel `record_delay` after the kernel ends (in virtual-clock mode at once), and is written
//! then by the channel thread (`ParserManager`'s role), which may call the user's request callback.
//! FlushAll does not wait for the channel; `msimDeviceDrain` does (tests), from 26.x on
//! `msptiActivityDisable` of a device kind writes what is already available, and
//! `msptiUnsubscribe` waits for the device's launched work and writes all of it (`stop_and_flush`).
//! A launch made with a device spec runs here whether or not anything records it, so a stream
//! synchronize waits for it either way.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_void, CStr};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Condvar;
use std::time::Duration;

use mspti_abi::*;

use crate::ground::clock::{self, host_now};
use crate::ground::ids::{current_correlation, take_mark_ids};
use crate::ground::intern::intern_c;
use crate::ground::locks::{self, wait_timeout, ForkLock, Rank};
use crate::ground::process::ProcessThread;
use crate::ground::state::{hooked, kind_enabled, recording};
use crate::model::buffers::{self, stat_add, STAT_DEVICE_DISCARDED, STAT_DEVICE_LOST, STAT_KERNELS};
use crate::model::records::bump_correlation;
use crate::model::{cann, multirank};

/// Latency model, ns (`msimSetDeviceModel`).
static LAUNCH_LATENCY_NS: AtomicU64 = AtomicU64::new(DEFAULT_LAUNCH_LATENCY_NS);
static RECORD_DELAY_NS: AtomicU64 = AtomicU64::new(DEFAULT_RECORD_DELAY_NS);
static DEFAULT_KERNEL_NS: AtomicU64 = AtomicU64::new(DEFAULT_DEFAULT_KERNEL_NS);
pub const DEFAULT_LAUNCH_LATENCY_NS: u64 = 3_000;
pub const DEFAULT_RECORD_DELAY_NS: u64 = 1_000_000;
pub const DEFAULT_DEFAULT_KERNEL_NS: u64 = 20_000;
/// Link bandwidth of the collective model, bytes per ns (= GB/s), and its fixed latency.
const LINK_BYTES_PER_NS: f64 = 25.0;
const COLLECTIVE_LATENCY_NS: u64 = 15_000;

/// The timelines' map, keyed by (device, stream) with a multiply hash: SipHash's resistance to
/// chosen keys buys nothing here and cost more than the rest of placing a kernel.
type Timelines = HashMap<(u32, u32), u64, BuildHasherDefault<StreamKeyHasher>>;

#[derive(Default)]
struct StreamKeyHasher(u64);

impl Hasher for StreamKeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

thread_local! {
    static STREAM: Cell<u32> = const { Cell::new(0) };
    static DEVICE: Cell<u32> = const { Cell::new(0) };
    static NEXT: Cell<Option<CallSpec>> = const { Cell::new(None) };
}

/// What the next simulated call on this thread does on the device and in its records; set by
/// the msim* call functions just before `call::call`, and for a launch by the runtime
/// (`msimSetNextLaunch`) or a workload just before the intercepted call, whose wrapper takes it.
#[derive(Clone, Copy, Debug)]
pub struct CallSpec {
    /// Kernel name of a launch.
    pub kernel: &'static CStr,
    /// When not empty, kernel i of the call is named `names[i % len]` instead (a graph's tasks).
    pub names: &'static [&'static CStr],
    /// Operator (node) name: node-level API/NODE_API records are written when set.
    pub node: Option<&'static CStr>,
    pub device_ns: u64,
    pub kernels: u32,
    /// Graph replay: every kernel carries the launching call's correlation id (no per-kernel bump).
    pub graph: bool,
    /// Bytes of a copy, memset, allocation or collective.
    pub bytes: u64,
    pub copy_kind: u32,
    /// Ranks of a collective's communicator.
    pub ranks: u32,
    /// The `HcclDataType` of a collective's elements: its COMMUNICATION record's dataType, and
    /// count = bytes / element size.
    pub data_type: u32,
}

impl Default for CallSpec {
    fn default() -> Self {
        CallSpec {
            kernel: c"SimKernel",
            names: &[],
            node: None,
            device_ns: DEFAULT_KERNEL_NS.load(Ordering::Relaxed),
            kernels: 1,
            graph: false,
            bytes: 0,
            copy_kind: MSPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN,
            ranks: 8,
            data_type: MSPTI_ACTIVITY_COMMUNICATION_FP16,
        }
    }
}

pub fn set_next(spec: CallSpec) {
    NEXT.with(|n| n.set(Some(spec)));
}

pub fn take_next() -> Option<CallSpec> {
    NEXT.with(|n| n.take())
}

pub fn thread_stream() -> u32 {
    STREAM.with(|s| s.get())
}

pub fn set_thread_stream(stream: u32) {
    STREAM.with(|s| s.set(stream));
}

pub fn thread_device() -> u32 {
    DEVICE.with(|d| d.get())
}

/// A record waiting on the channel until `avail`.
struct Pending {
    avail: u64,
    /// When the device finished the task: a channel flush can write the record from then on.
    done: u64,
    seq: u64,
    kind: u32,
    len: usize,
    bytes: [u8; 72],
}

/// The pending records, one FIFO per (device, stream): a stream's tasks end in order, so each
/// lane's records become available in order and the reader only compares the lanes' heads.
struct Lanes {
    lanes: Vec<((u32, u32), VecDeque<Pending>)>,
    len: usize,
}

impl Lanes {
    const fn new() -> Lanes {
        Lanes { lanes: Vec::new(), len: 0 }
    }
    fn push(&mut self, key: (u32, u32), p: Pending) {
        match self.lanes.iter_mut().find(|l| l.0 == key) {
            Some(l) => l.1.push_back(p),
            None => self.lanes.push((key, VecDeque::from([p]))),
        }
        self.len += 1;
    }
    fn min_lane(&self) -> Option<usize> {
        (0..self.lanes.len()).filter(|&i| !self.lanes[i].1.is_empty()).min_by_key(|&i| {
            let h = &self.lanes[i].1[0];
            (h.avail, h.seq)
        })
    }
    fn peek(&self) -> Option<&Pending> {
        self.min_lane().map(|i| &self.lanes[i].1[0])
    }
    fn pop(&mut self) -> Option<Pending> {
        let p = self.min_lane().and_then(|i| self.lanes[i].1.pop_front());
        self.len -= usize::from(p.is_some());
        p
    }
    /// Up to `max` records in all in `out`, taking those available by `ready` in availability
    /// order (as `pop` takes them); with one lane holding records, straight off its front.
    fn pop_ready(&mut self, out: &mut Vec<Pending>, max: usize, ready: impl Fn(u64) -> bool) {
        let mut busy = self.lanes.iter_mut().filter(|l| !l.1.is_empty());
        if let (Some(only), None) = (busy.next(), busy.next()) {
            let before = out.len();
            while out.len() < max && only.1.front().is_some_and(|p| ready(p.avail)) {
                out.extend(only.1.pop_front());
            }
            self.len -= out.len() - before;
            return;
        }
        while out.len() < max && self.peek().is_some_and(|t| ready(t.avail)) {
            out.extend(self.pop());
        }
    }
    /// Every record whose task is done by `ready`, in availability order.
    fn take_done(&mut self, ready: impl Fn(u64) -> bool) -> Vec<Pending> {
        let mut out = Vec::new();
        for l in &mut self.lanes {
            while l.1.front().is_some_and(|p| ready(p.done)) {
                out.extend(l.1.pop_front());
            }
        }
        self.len -= out.len();
        out.sort_by_key(|p| (p.avail, p.seq));
        out
    }
    fn clear(&mut self) {
        self.lanes.clear();
        self.len = 0;
    }
    /// When the device finishes the last task it has a record pending for.
    fn last_done(&self) -> Option<u64> {
        self.lanes.iter().filter_map(|l| l.1.back().map(|p| p.done)).max()
    }
}

/// What the channel's reader is doing, so that a push wakes it only when it has to (a wake-up is
/// a system call on the launching thread and a context switch).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reader {
    /// Reading, writing a batch, or already woken: no push needs to wake it.
    Busy,
    /// Waiting on an empty channel, for as long as it stays empty: the first push wakes it.
    Idle,
    /// Waiting until the earliest record becomes available: a push of an earlier one wakes it.
    Waiting,
    /// Letting ready records accumulate between two reads (`CHANNEL_POLL_NS`): only a push that
    /// fills a batch wakes it.
    Pausing,
}

struct Channel {
    heap: Lanes,
    seq: u64,
    /// Records taken off the heap and not yet written.
    in_flight: u64,
    reader: Reader,
    /// Threads waiting in `drain` on DRAINED_CV.
    drain_waiters: u32,
    /// Free-at time (ns, MSPTI's clock) of each (device, stream). Under the channel's lock: a
    /// launch places its kernel and queues its record in one critical section, so one stream's
    /// records also reach its lane in the order their tasks end.
    timelines: Option<Timelines>,
}

static CHANNEL: ForkLock<Channel> = ForkLock::new(
    Rank::Channel,
    Channel {
        heap: Lanes::new(),
        seq: 0,
        in_flight: 0,
        reader: Reader::Busy,
        drain_waiters: 0,
        timelines: None,
    },
);
static CHANNEL_CV: Condvar = Condvar::new();
static DRAINED_CV: Condvar = Condvar::new();
/// The channel's reader thread (a `fork()` child starts its own).
static CHANNEL_THREAD: ProcessThread = ProcessThread::new();

/// Data the device moves for an asynchronous runtime call (`aclrtMemcpyAsync`,
/// `aclrtMemsetAsync`, an all-gather's copies), queued on its stream: as a device's copy engine
/// does it while the host goes on, the calling thread does not; it is done when the host next
/// waits for the stream (or the device, or frees memory), or another stream waits for it.
#[derive(Clone, Copy)]
struct DataWork {
    device: u32,
    stream: u32,
    dst: usize,
    /// The source of a copy (unused by a fill).
    src: usize,
    len: usize,
    /// A fill's byte, or None for a copy.
    fill: Option<u8>,
}

static DATA_WORK: ForkLock<Vec<DataWork>> = ForkLock::new(Rank::DataWork, Vec::new());

fn queue_data_work(stream: *mut c_void, w: DataWork) {
    let stream = if stream.is_null() { thread_stream() } else { stream_of(stream) };
    DATA_WORK.lock().push(DataWork { device: thread_device(), stream, ..w });
}

/// Do the data work queued on `stream` of this thread's device (every stream of it: None), in
/// the order it was queued.
pub fn run_data_work(stream: Option<u32>) {
    let device = thread_device();
    // The work is done under the queue's lock: a thread that runs the queue before freeing memory
    // (the runtime's free) then waits for any copy another thread has taken off the queue and not
    // finished, instead of finding the queue empty and freeing memory that copy still writes.
    DATA_WORK.lock().retain(|w| {
        let mine = w.device == device && stream.is_none_or(|s| s == w.stream);
        if mine {
            match w.fill {
                // SAFETY: the runtime queued `len` writable bytes at `dst` (msimQueueFill's
                // contract), still allocated: it runs the queue, under this lock, before freeing.
                Some(v) => unsafe { std::ptr::write_bytes(w.dst as *mut u8, v, w.len) },
                // SAFETY: as above, and `len` readable bytes at `src` (msimQueueCopy's contract);
                // `copy` allows the two to overlap, as memmove does.
                None => unsafe { std::ptr::copy(w.src as *const u8, w.dst as *mut u8, w.len) },
            }
        }
        !mine
    });
}

/// Queue a copy of `len` bytes from `src` to `dst` on `stream` (NULL: this thread's stream),
/// for the device to do (see `DataWork`).
///
/// # Safety
/// `dst` must stay valid for `len` bytes of writes and `src` for `len` bytes of reads until the
/// queue of that stream is run (`run_queued`), which the runtime does before freeing memory.
pub unsafe fn queue_copy(stream: *mut c_void, dst: *mut c_void, src: *const c_void, len: usize) {
    if len > 0 {
        let w = DataWork { device: 0, stream: 0, dst: dst as usize, src: src as usize, len, fill: None };
        queue_data_work(stream, w);
    }
}

/// Queue a fill of `len` bytes at `dst` with the low byte of `value` on `stream` (see
/// `queue_copy`).
///
/// # Safety
/// `dst` must stay valid for `len` bytes of writes until the stream's queue is run.
pub unsafe fn queue_fill(stream: *mut c_void, dst: *mut c_void, value: i32, len: usize) {
    if len > 0 {
        let w = DataWork { device: 0, stream: 0, dst: dst as usize, src: 0, len, fill: Some(value as u8) };
        queue_data_work(stream, w);
    }
}

/// Do the data work queued on `stream` of this thread's device (NULL: on every stream of it), as
/// the runtime does before the host reads results (a synchronize, an operator computing on the
/// host) or frees memory.
pub fn run_queued(stream: *mut c_void) {
    run_data_work((!stream.is_null()).then(|| stream_of(stream)));
}

fn ensure_channel_thread() {
    CHANNEL_THREAD.ensure("msim-channel", channel_loop);
}

/// A record of the channel, available `record_delay` after its task ends at `done` (its place
/// in the sequence is given when it is queued).
fn pending<T: Copy>(done: u64, kind: u32, rec: &T) -> Pending {
    let avail = done.saturating_add(record_delay());
    let len = std::mem::size_of::<T>();
    let mut bytes = [0u8; 72];
    // SAFETY: `T` is a packed record struct of at most 72 bytes (plain data, explicit pads).
    let src = unsafe { std::slice::from_raw_parts((rec as *const T).cast::<u8>(), len) };
    bytes[..len].copy_from_slice(src);
    Pending { avail, done, seq: 0, kind, len, bytes }
}

fn push_pending<T: Copy>(key: (u32, u32), done: u64, kind: u32, rec: &T) {
    let p = pending(done, kind, rec);
    ensure_channel_thread();
    push_locked(&mut CHANNEL.lock(), key, p);
}

/// Queue record `p` on lane `key` of the channel, whose lock the caller holds (`c`).
fn push_locked(c: &mut Channel, key: (u32, u32), mut p: Pending) {
    c.seq += 1;
    p.seq = c.seq;
    let avail = p.avail;
    // Wake the reader only when it would otherwise sleep past this record: the channel was
    // empty, this record is available before the one it waits for, or this one fills a batch.
    let wake = match c.reader {
        Reader::Busy => false,
        Reader::Idle => true,
        Reader::Waiting => c.heap.peek().is_none_or(|top| avail < top.avail),
        Reader::Pausing => c.heap.len + 1 >= CHANNEL_BATCH,
    };
    c.heap.push(key, p);
    if wake {
        // Woken: later pushes need not wake it again before it next waits.
        c.reader = Reader::Busy;
        CHANNEL_CV.notify_one();
    }
}

/// The reader sleeps at least this long between reads, as MSPTI's channel-pool threads read the
/// driver's channels in batches rather than per report: a record appears up to 1 ms after it is
/// available, and a busy job pays one wake-up per millisecond (or per `CHANNEL_BATCH` records),
/// not one per kernel. A `drain` does not wait for it.
const CHANNEL_POLL_NS: u64 = 1_000_000;
/// The most records one read takes; that many waiting wake the reader from its pause.
const CHANNEL_BATCH: usize = 4096;

fn ready(avail: u64) -> bool {
    clock::is_virtual() || host_now() >= avail
}

fn channel_loop() {
    // One batch buffer for the thread's life: no allocation per read.
    let mut batch: Vec<Pending> = Vec::with_capacity(CHANNEL_BATCH);
    loop {
        {
            let mut c = CHANNEL.lock();
            // Whether the reader has slept since its last read: a record that was ready when it
            // came back from one is read at once, one found ready right after a read (or after
            // the wake-up of an empty channel's first push) waits for the poll period.
            let mut slept = false;
            loop {
                let (state, wait) = match c.heap.peek() {
                    None => (Reader::Idle, None),
                    Some(top) if ready(top.avail) => {
                        if slept || c.heap.len >= CHANNEL_BATCH || c.drain_waiters > 0 {
                            break;
                        }
                        (Reader::Pausing, Some(Duration::from_nanos(CHANNEL_POLL_NS)))
                    }
                    Some(top) => (
                        Reader::Waiting,
                        Some(Duration::from_nanos(
                            top.avail.saturating_sub(host_now()).clamp(CHANNEL_POLL_NS, 50_000_000),
                        )),
                    ),
                };
                c.reader = state;
                c = match wait {
                    None => locks::wait(&CHANNEL_CV, c),
                    Some(d) => wait_timeout(&CHANNEL_CV, c, d),
                };
                c.reader = Reader::Busy;
                slept = state != Reader::Idle;
            }
            // Everything ready, in one batch (as a channel read returns many reports at once).
            c.heap.pop_ready(&mut batch, CHANNEL_BATCH, ready);
            c.in_flight += batch.len() as u64;
        }
        write_all(&batch);
        let mut c = CHANNEL.lock();
        c.in_flight -= batch.len() as u64;
        if c.drain_waiters > 0 {
            DRAINED_CV.notify_all();
        }
        drop(c);
        batch.clear();
    }
}

/// Write, on this thread, every record whose task the device has finished, whether or not it
/// has reached the channel's reader yet (26.x's flush of the device channels on disable).
pub fn flush_ready() {
    let ready_now: Vec<Pending> = {
        let mut c = CHANNEL.lock();
        let now = c.heap.take_done(ready);
        c.in_flight += now.len() as u64;
        now
    };
    write_all(&ready_now);
    let mut c = CHANNEL.lock();
    c.in_flight -= ready_now.len() as u64;
    if c.drain_waiters > 0 {
        DRAINED_CV.notify_all();
    }
}

/// Hand device records to the activity manager. A record whose kind was disabled while it waited
/// on the channel is discarded, as MSPTI's parsers drop records of a kind that is off, and counted
/// (`STAT_DEVICE_DISCARDED`): the simulator loses nothing without a counter.
fn write_all(ps: &[Pending]) {
    // The record lock is taken once per chunk: bounded, so that a flush or a host record on
    // another thread waits for at most this many.
    const CHUNK: usize = 256;
    for chunk in ps.chunks(CHUNK) {
        let mut w = buffers::record_writer();
        for p in chunk {
            if kind_enabled(p.kind) {
                w.record_bytes(p.kind, &p.bytes[..p.len]);
            } else {
                stat_add(STAT_DEVICE_DISCARDED, 1);
            }
        }
    }
}

/// How long `msptiUnsubscribe` waits, on the real clock, for the device to finish the work it was
/// given before its profiling stops. Past it, what is still pending is counted as lost.
pub const STOP_WAIT_MAX_MS: u64 = 2_000;

/// `msptiUnsubscribe`'s stop of every device's profiling task (MSPTI's `ResetAllDevice`: each
/// device's profiling task is stopped and its channels read to the end before the subscriber goes):
/// wait until the device has finished every task it has a record pending for (virtual clock: at
/// once; real clock: at most `STOP_WAIT_MAX_MS`), then write those records on this thread, after
/// any batch the channel reader holds. Records of tasks still unfinished after the wait are
/// dropped and counted (`STAT_DEVICE_LOST`).
pub fn stop_and_flush() {
    let last = CHANNEL.lock().heap.last_done();
    if let (Some(last), false) = (last, clock::is_virtual()) {
        let deadline = std::time::Instant::now() + Duration::from_millis(STOP_WAIT_MAX_MS);
        loop {
            let now = host_now();
            if now >= last || std::time::Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_nanos((last - now).min(1_000_000)));
        }
    }
    flush_ready();
    // The reader may be writing a batch it took before the flush: let it finish (bounded).
    let deadline = std::time::Instant::now() + Duration::from_millis(STOP_WAIT_MAX_MS);
    let mut c = CHANNEL.lock();
    while c.in_flight > 0 && std::time::Instant::now() < deadline {
        c.drain_waiters += 1;
        c = wait_timeout(&DRAINED_CV, c, Duration::from_millis(5));
        c.drain_waiters -= 1;
    }
    let lost = c.heap.len as u64;
    c.heap.clear();
    drop(c);
    stat_add(STAT_DEVICE_LOST, lost);
}

/// Wait until the channel is empty (every pending device record written), at most `timeout_ms`.
pub fn drain(timeout_ms: u64) -> bool {
    ensure_channel_thread();
    let deadline = std::time::Instant::now() + Duration::from_millis(timeout_ms);
    let mut c = CHANNEL.lock();
    while c.heap.len > 0 || c.in_flight > 0 {
        let now = std::time::Instant::now();
        if now >= deadline {
            return false;
        }
        CHANNEL_CV.notify_one();
        c.drain_waiters += 1;
        c = wait_timeout(&DRAINED_CV, c, (deadline - now).min(Duration::from_millis(20)));
        c.drain_waiters -= 1;
    }
    true
}

pub fn reset() {
    let mut c = CHANNEL.lock();
    c.heap.clear();
    c.timelines = None;
    drop(c);
    LAUNCH_LATENCY_NS.store(DEFAULT_LAUNCH_LATENCY_NS, Ordering::Relaxed);
    RECORD_DELAY_NS.store(DEFAULT_RECORD_DELAY_NS, Ordering::Relaxed);
    DEFAULT_KERNEL_NS.store(DEFAULT_DEFAULT_KERNEL_NS, Ordering::Relaxed);
}

fn record_delay() -> u64 {
    RECORD_DELAY_NS.load(Ordering::Relaxed)
}

/// Place a task of `dur` ns submitted at `t_submit` on (device, stream): its start and end.
fn place(device: u32, stream: u32, t_submit: u64, dur: u64) -> (u64, u64) {
    place_on(&mut CHANNEL.lock().timelines, device, stream, t_submit, dur)
}

/// `place` on the timelines `t` (under the channel's lock, which the caller holds).
fn place_on(t: &mut Option<Timelines>, device: u32, stream: u32, t_submit: u64, dur: u64) -> (u64, u64) {
    let lat = LAUNCH_LATENCY_NS.load(Ordering::Relaxed);
    let free = t.get_or_insert_with(Timelines::default).entry((device, stream)).or_insert(0);
    let start = (t_submit.saturating_add(lat)).max(*free);
    let end = start.saturating_add(dur);
    *free = end;
    (start, end)
}

/// A collective task of a multi-process job: from this rank's own start (or when its stream is
/// free) until `dur` after the group's latest start.
fn place_meeting(device: u32, stream: u32, m: multirank::Meeting, dur: u64) -> (u64, u64) {
    let mut c = CHANNEL.lock();
    let free = c.timelines.get_or_insert_with(Timelines::default).entry((device, stream)).or_insert(0);
    let start = m.own_start_ns.max(*free);
    let end = start.max(m.latest_start_ns).saturating_add(dur);
    *free = end;
    (start, end)
}

/// When (device, stream) becomes idle.
pub fn free_at(device: u32, stream: u32) -> u64 {
    CHANNEL.lock().timelines.as_ref().and_then(|m| m.get(&(device, stream)).copied()).unwrap_or(0)
}

/// When the last task of any stream ends (0 if nothing ran).
pub fn latest_free() -> u64 {
    CHANNEL.lock().timelines.as_ref().and_then(|m| m.values().copied().max()).unwrap_or(0)
}

/// This thread's stream waits on the device for everything already queued on `other` (an event
/// recorded there and waited on here, as DDP's optimizer waits for the gradient all-reduce): its
/// next task starts no earlier than `other`'s last one ends. No host call, no callback.
pub fn stream_wait(other: u32) {
    // What the device has done by then includes `other`'s data work.
    run_data_work(Some(other));
    let device = thread_device();
    let mut c = CHANNEL.lock();
    let m = c.timelines.get_or_insert_with(Timelines::default);
    let after = m.get(&(device, other)).copied().unwrap_or(0);
    let own = m.entry((device, thread_stream())).or_insert(0);
    *own = (*own).max(after);
}

/// How long a synchronize of this thread's stream called now waits for the device: until the
/// stream's last task ends (0 if it is idle).
pub fn sync_wait_ns() -> u64 {
    sync_wait_ns_on(thread_stream())
}

/// `sync_wait_ns` for `stream` of this thread's device.
pub fn sync_wait_ns_on(stream: u32) -> u64 {
    free_at(thread_device(), stream).saturating_sub(host_now())
}

/// Kernels of one launch call, submitted at `t_submit` on this thread's stream.
pub fn submit_kernels(spec: &CallSpec, t_submit: u64) {
    let (device, stream) = (thread_device(), thread_stream());
    let kernel_on = recording() && kind_enabled(MSPTI_ACTIVITY_KIND_KERNEL);
    for i in 0..spec.kernels.max(1) as usize {
        let name = if spec.names.is_empty() { spec.kernel } else { spec.names[i % spec.names.len()] };
        // The task-track report bumps the thread's id per kernel while KERNEL is enabled; a
        // graph replay re-records its captured tasks with the launching call's id.
        let corr = if kernel_on && !spec.graph { bump_correlation() } else { current_correlation() };
        if !kernel_on {
            place(device, stream, t_submit, spec.device_ns);
            stat_add(STAT_KERNELS, 1);
            continue;
        }
        let type_ = cann::kernel_type_static(name).as_ptr();
        ensure_channel_thread();
        // Placed and queued under one lock (one round-trip per kernel).
        let mut c = CHANNEL.lock();
        let (start, end) = place_on(&mut c.timelines, device, stream, t_submit, spec.device_ns);
        stat_add(STAT_KERNELS, 1);
        let r = MsptiActivityKernel {
            kind: MSPTI_ACTIVITY_KIND_KERNEL,
            start,
            end,
            ds: MsptiIdPair::ds(device, stream),
            correlation_id: corr,
            type_,
            name: name.as_ptr(),
            _pad: [0; 4],
        };
        push_locked(&mut c, (device, stream), pending(end, MSPTI_ACTIVITY_KIND_KERNEL, &r));
    }
}

/// A device marker (the `aclrtProfTrace` task of an MSTX call with a stream): a zero-length task
/// on `stream`; its record has an empty name and domain.
pub fn submit_marker(stream: u32, flag: u32, id: u64, t_submit: u64) {
    let device = thread_device();
    let (ts, _) = place(device, stream, t_submit, 0);
    let r = MsptiActivityMarker {
        kind: MSPTI_ACTIVITY_KIND_MARKER,
        flag,
        source_kind: MSPTI_ACTIVITY_SOURCE_KIND_DEVICE,
        timestamp: ts,
        id,
        object_id: MsptiIdPair::ds(device, stream),
        name: c"".as_ptr(),
        domain: c"".as_ptr(),
        _pad: [0; 4],
    };
    push_pending((device, stream), ts, MSPTI_ACTIVITY_KIND_MARKER, &r);
}

/// The name of the communicator the records carry (`msimSetCommName`).
static COMM_NAME: ForkLock<Option<&'static CStr>> = ForkLock::new(Rank::CommName, None);

pub fn comm_name() -> &'static CStr {
    COMM_NAME.lock().unwrap_or(c"hccl_world_group")
}

/// Where a collective submitted now (`t_submit`) would start on this thread's stream.
pub fn collective_start(t_submit: u64) -> u64 {
    let lat = LAUNCH_LATENCY_NS.load(Ordering::Relaxed);
    t_submit.saturating_add(lat).max(free_at(thread_device(), thread_stream()))
}

/// A collective (HCCL callback id `cbid`, function `op`) of `spec.bytes` over `spec.ranks`
/// submitted at `t_submit` on this thread's stream: its device time (latency + ring transfer),
/// HCCL and COMMUNICATION records. In a multi-process job its task starts where this rank arrived
/// and ends a transfer after the group's last task started (`multirank::take_meeting`), as HCCL's
/// device-side wait does: the last rank to arrive has the shortest collective. HCCL records carry
/// the function name, COMMUNICATION records HCCL's op name (`hcom_allReduce_`), the data type,
/// count and algorithm.
pub fn submit_collective(op: &'static CStr, cbid: u32, spec: &CallSpec, t_submit: u64) {
    let (bytes, ranks) = (spec.bytes, spec.ranks);
    let (device, stream) = (thread_device(), thread_stream());
    let n = f64::from(ranks.max(1));
    let moved = bytes as f64 * 2.0 * (n - 1.0) / n;
    let dur = COLLECTIVE_LATENCY_NS + (moved / LINK_BYTES_PER_NS) as u64;
    let meeting = multirank::take_meeting();
    let recording = recording();
    let hccl_on = recording && kind_enabled(MSPTI_ACTIVITY_KIND_HCCL) && hooked();
    let comm_on = recording && kind_enabled(MSPTI_ACTIVITY_KIND_COMMUNICATION);
    if hccl_on {
        // MSPTI's HCCL hook puts inner START/END marks around the op: they use mark ids.
        take_mark_ids(2);
    }
    let corr = if comm_on { bump_correlation() } else { current_correlation() };
    let (start, end) = match meeting {
        Some(m) => place_meeting(device, stream, m, dur),
        None => place(device, stream, t_submit, dur),
    };
    let comm = comm_name();
    if hccl_on {
        let r = MsptiActivityHccl {
            kind: MSPTI_ACTIVITY_KIND_HCCL,
            start,
            end,
            ds: MsptiIdPair::ds(device, stream),
            band_width: band_width(cbid, bytes, ranks, start, end),
            name: op.as_ptr(),
            comm_name: comm.as_ptr(),
            _pad: [0; 4],
        };
        push_pending((device, stream), end, MSPTI_ACTIVITY_KIND_HCCL, &r);
    }
    if comm_on {
        let r = MsptiActivityCommunication {
            kind: MSPTI_ACTIVITY_KIND_COMMUNICATION,
            data_type: spec.data_type,
            count: bytes / cann::data_type_bytes(spec.data_type).unwrap_or(1),
            ds: MsptiIdPair::ds(device, stream),
            start,
            end,
            alg_type: cann::alg_type(cbid, ranks, bytes).as_ptr(),
            name: cann::comm_op_name(cbid).as_ptr(),
            comm_name: comm.as_ptr(),
            correlation_id: corr,
        };
        push_pending((device, stream), end, MSPTI_ACTIVITY_KIND_COMMUNICATION, &r);
    }
}

/// The HCCL record's `bandWidth` (bytes per ns = GB/s) as MSPTI's parser computes it (upstream
/// `csrc/activity/ascend/parser/hccl_calculator.cpp`): count x type size, times the rank count
/// for AllGather, ReduceScatter, Scatter and AlltoAll (`CalculateCollectiveBandWidth`), alone for
/// AllReduce, Broadcast, Reduce, Send and Recv (`CalculateP2pBandWidth`), over the duration; 0
/// where it computes none (an op without a formula, such as the barrier, or no duration).
/// AlltoAllV and BatchSendRecv divide the bytes moved (the larger of sent and received, the sum
/// of the sends), which is what a call's bytes are here.
fn band_width(hccl_cbid: u32, bytes: u64, ranks: u32, start: u64, end: u64) -> f64 {
    /// HCCL callback ids (mspti_cbid.h): ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, SCATTER.
    const TIMES_RANKS: [u32; 4] = [3, 4, 6, 9];
    /// BARRIER has no formula.
    const BARRIER: u32 = 8;
    if end <= start || hccl_cbid == BARRIER {
        return 0.0;
    }
    let ranks = if TIMES_RANKS.contains(&hccl_cbid) { u64::from(ranks.max(1)) } else { 1 };
    bytes.saturating_mul(ranks) as f64 / (end - start) as f64
}

// ---------------------------------------------------------------------------------------------
// The device's settings and its reads, for the simulator's controls.

/// Latency model: launch-to-start latency, how long after a task ends its record reaches the
/// channel (real clock only; the virtual clock delivers at once), and the kernel time of a launch
/// made without a kernel spec (`msimCall` of a launch API, the workloads' default).
pub fn set_model(launch_latency_ns: u64, record_delay_ns: u64, default_kernel_ns: u64) {
    LAUNCH_LATENCY_NS.store(launch_latency_ns, Ordering::Relaxed);
    RECORD_DELAY_NS.store(record_delay_ns, Ordering::Relaxed);
    DEFAULT_KERNEL_NS.store(default_kernel_ns, Ordering::Relaxed);
}

/// The stream (and device) this thread's launches, copies, collectives go to (default 0, 0).
pub fn set_thread_device_stream(device: u32, stream: u32) {
    DEVICE.with(|d| d.set(device));
    set_thread_stream(stream);
}

/// The `aclrtStream` handle the simulator maps to stream id `stream` (for MSTX calls):
/// `stream + 1` as a pointer, so that stream 0 is not NULL.
pub fn stream_handle(stream: u32) -> *mut c_void {
    (stream as usize + 1) as *mut c_void
}

/// The stream id of a simulator stream handle (inverse of `stream_handle`).
pub fn stream_of(handle: *mut c_void) -> u32 {
    (handle as usize).wrapping_sub(1) as u32
}

/// Device records still on the channel.
pub fn pending_count() -> u64 {
    let c = CHANNEL.lock();
    c.heap.len as u64 + c.in_flight
}

/// The communicator name of HCCL/COMMUNICATION records (None: "hccl_world_group").
pub fn set_comm_name(name: Option<&CStr>) {
    *COMM_NAME.lock() = name.map(intern_c);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The device's timelines are under the channel's mutex, which every launch takes: a child
    /// forked while another thread held it must still be able to launch (the fork handlers hold
    /// it across the fork).
    #[test]
    fn forked_children_can_place_work_while_another_thread_launches() {
        let (hung, failed) = crate::ground::forktest::hung_children(
            60,
            |i| {
                place(0, 41, i, 1_000);
            },
            |_| place(0, 41, 0, 1_000).1 > 0 && free_at(0, 41) > 0,
        );
        assert_eq!(
            (hung, failed),
            (0, 0),
            "of 60 forked children, {hung} hung placing a task, {failed} failed"
        );
    }
}
