//! Our own activity buffers. MSPTI asks for a buffer from whatever thread is recording, possibly
//! under its record lock (`request`), and hands a full one back, possibly under that same lock
//! (`complete`, 26.x FlushAll). Both only touch atomics here (a request that grows the pool also
//! allocates): `request` takes a free slot with one compare-and-swap per slot tried, `complete`
//! marks the slot ready with three stores and at most one wake-up. All parsing happens later on
//! the drain thread.
//!
//! The pool grows on demand, as CUPTI's clients allocate on request: a request that finds every
//! buffer out (lent to MSPTI, or handed back and not yet drained) allocates a new chunk of as
//! many buffers as the pool has (doubling it), up to the pool's memory cap
//! (`config::DEFAULT_POOL_CAP` unless asked otherwise). One request grows at a time; a request
//! that finds another growing waits for it (bounded: a mapping takes microseconds) and looks
//! again; one that finds the cap reached is answered with NULL and counted (`exhausted`), and
//! MSPTI drops its record and counts it too. Chunks are never freed, so the pool's size is its
//! peak.
//!
//! Buffers of a chunk are one contiguous allocation, so `complete` finds a buffer's slot by
//! arithmetic (O(1) per chunk, at most `MAX_CHUNKS` of them). Pools live for the process: MSPTI
//! may hand a buffer back after the session that lent it has closed.

use std::fmt;
use std::sync::atomic::Ordering;
use std::thread::Thread;

use super::loom_atomics::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize};
// Statistics: std's atomics in model builds too, so the model explores the protocol
// (slot states, chunk publication, growth), not every order of two counter increments.
use std::sync::atomic::{AtomicU64 as StatU64, AtomicUsize as StatUsize};

const FREE: u8 = 0;
const LENT: u8 = 1;
const READY: u8 = 2;
const DRAINING: u8 = 3;

/// Distinct pools a process may create (one per buffer configuration).
pub const MAX_POOLS: usize = 8;
/// Chunks of one pool: the first holds the buffers asked for, each later one as many as the
/// pool then has, so 32 chunks are far beyond any memory cap.
pub const MAX_CHUNKS: usize = 32;
/// The smallest buffer and the most buffers asked for at the start.
pub const MIN_BUFFER_SIZE: usize = 1024;
pub const MAX_START_BUFFERS: usize = 4096;

/// Yields a request waits at most for another's growth of the pool (`Pool::wait_for_growth`).
const GROWTH_WAIT_SPINS: usize = 1000;

/// What a request's attempt to grow the pool came to.
enum Grown {
    Got(*mut u8),
    /// Another request is growing it.
    Busy,
    /// At the memory cap (or out of chunks or memory).
    Full,
}

#[cfg(not(loom))]
fn pause() {
    std::thread::yield_now();
}

#[cfg(loom)]
fn pause() {
    loom::thread::yield_now();
}

/// Why a pool could not be had.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolError {
    /// Buffers below `MIN_BUFFER_SIZE`, or a count outside 1..=`MAX_START_BUFFERS`.
    BadShape { buffer_size: usize, buffers: usize },
    /// A memory cap below what the start already takes.
    CapBelowStart { cap: usize, start: usize },
    /// The allocator refused the first chunk.
    Allocation { buffer_size: usize, buffers: usize },
    /// `MAX_POOLS` pools of other shapes exist already.
    TooManyPools,
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::BadShape { buffer_size, buffers } => write!(
                f,
                "activity buffers must be at least {MIN_BUFFER_SIZE} bytes each and 1-{MAX_START_BUFFERS} \
                 of them at the start (asked: {buffers} of {buffer_size} bytes)"
            ),
            PoolError::CapBelowStart { cap, start } => write!(
                f,
                "the activity pool's memory cap ({cap} bytes) is below what its first buffers take \
                 ({start} bytes): raise the cap or ask for fewer or smaller buffers"
            ),
            PoolError::Allocation { buffer_size, buffers } => {
                write!(f, "could not allocate {buffers} activity buffers of {buffer_size} bytes")
            }
            PoolError::TooManyPools => write!(
                f,
                "this process already made {MAX_POOLS} activity buffer pools of other shapes; reuse one"
            ),
        }
    }
}

impl std::error::Error for PoolError {}

struct Slot {
    state: AtomicU8,
    valid: AtomicUsize,
    /// Completion order: buffers are drained in the order MSPTI handed them back.
    seq: AtomicU64,
}

/// Buffers allocated together: global slots `first..first + slots.len()`.
struct Chunk {
    base: *mut u8,
    first: usize,
    slots: Box<[Slot]>,
}

impl Chunk {
    /// A chunk of `n` buffers, the first of them already LENT when `lend_first`.
    fn new(buffer_size: usize, n: usize, first: usize, lend_first: bool) -> Option<Chunk> {
        let base = map_zeroed(buffer_size.checked_mul(n)?)?;
        let slots = (0..n)
            .map(|i| Slot {
                state: AtomicU8::new(if lend_first && i == 0 { LENT } else { FREE }),
                valid: AtomicUsize::new(0),
                seq: AtomicU64::new(0),
            })
            .collect();
        Some(Chunk { base, first, slots })
    }
}

/// `bytes` of page-aligned, zero-filled memory that takes no resident memory until written: an
/// anonymous private mapping (chunks are never unmapped: pools live for the process). Not
/// `alloc_zeroed`: with an alignment above 16 it writes every byte, which put a 64 MiB memset in
/// every session's start and a 64-128 MiB one inside the MSPTI request that grew the pool (tens
/// of ms under MSPTI's record lock, while other threads' requests were answered NULL and their
/// records dropped).
fn map_zeroed(bytes: usize) -> Option<*mut u8> {
    if bytes == 0 {
        return None;
    }
    // SAFETY: a fresh anonymous mapping, no address hint and no file: it touches no existing
    // memory; the result is checked against MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p.cast::<u8>())
}

/// Counters of the buffer traffic (cumulative for the pool).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounters {
    pub requested: u64,
    /// Requests answered with NULL: every buffer was out and the pool could not grow (at its
    /// cap, or another request was growing it). MSPTI drops the records it could not place (its
    /// own count, where it exposes one, says how many).
    pub exhausted: u64,
    pub completed: u64,
    /// `complete` called with a NULL buffer (26.0/26.1 do after a NULL request).
    pub null_buffers: u64,
    /// `complete` called with a buffer that is not ours: ignored.
    pub foreign_buffers: u64,
    /// The most buffers out at once (lent, or handed back and not yet released).
    pub peak_in_use: u64,
    /// Chunks added on demand.
    pub grown: u64,
}

pub struct Pool {
    pub buffer_size: usize,
    /// Buffers of the first chunk.
    start: usize,
    /// The most buffers the memory cap allows.
    max_buffers: usize,
    chunks: [AtomicPtr<Chunk>; MAX_CHUNKS],
    /// Chunks installed (each `chunks[i]` below it is set before it is published).
    chunk_count: AtomicUsize,
    /// Buffers allocated (published after their chunk).
    total: AtomicUsize,
    /// One request grows the pool at a time.
    growing: AtomicBool,
    next_seq: AtomicU64,
    /// Buffers out now (LENT, READY or DRAINING), so `complete` knows the pressure without a scan.
    /// Raised after a slot is taken and lowered before it is freed: never above the true count.
    out: StatUsize,
    peak_in_use: StatU64,
    requested: StatU64,
    exhausted: StatU64,
    completed: StatU64,
    null_buffers: StatU64,
    foreign: StatU64,
    grown: StatU64,
    /// The drain thread, woken when few buffers are left free.
    waker: std::sync::atomic::AtomicPtr<Thread>,
}

// SAFETY: the chunks' memory is leaked and only ever written through slots that the atomic state
// machine gives to one party at a time (MSPTI while LENT, the drain while DRAINING); chunk
// pointers are published with Release after they are complete.
unsafe impl Sync for Pool {}
// SAFETY: as above; the raw pointers are never freed.
unsafe impl Send for Pool {}

static POOLS: [std::sync::atomic::AtomicPtr<Pool>; MAX_POOLS] =
    [const { std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()) }; MAX_POOLS];
static CURRENT: std::sync::atomic::AtomicPtr<Pool> = std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
/// Counted when `complete` finds no pool at all (called before any was made).
static ORPHAN_COMPLETES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Pool {
    /// A pool of `buffers` buffers at the start, growing on demand to at most `cap` bytes.
    pub(crate) fn new(buffer_size: usize, buffers: usize, cap: usize) -> Option<Pool> {
        let first = Chunk::new(buffer_size, buffers, 0, false)?;
        let chunks: [AtomicPtr<Chunk>; MAX_CHUNKS] =
            std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut()));
        chunks[0].store(Box::into_raw(Box::new(first)), Ordering::Release);
        Some(Pool {
            buffer_size,
            start: buffers,
            max_buffers: (cap / buffer_size).max(buffers),
            chunks,
            chunk_count: AtomicUsize::new(1),
            total: AtomicUsize::new(buffers),
            growing: AtomicBool::new(false),
            next_seq: AtomicU64::new(0),
            out: StatUsize::new(0),
            peak_in_use: StatU64::new(0),
            requested: StatU64::new(0),
            exhausted: StatU64::new(0),
            completed: StatU64::new(0),
            null_buffers: StatU64::new(0),
            foreign: StatU64::new(0),
            grown: StatU64::new(0),
            waker: std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()),
        })
    }

    /// Buffers allocated now (the pool's peak: it never shrinks).
    pub fn buffers(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    /// The most bytes this pool may take.
    pub fn cap(&self) -> usize {
        self.max_buffers * self.buffer_size
    }

    /// The installed chunks.
    fn chunks(&self) -> impl Iterator<Item = &Chunk> + '_ {
        let n = self.chunk_count.load(Ordering::Acquire);
        // SAFETY: chunks below chunk_count were stored (Release) before chunk_count was
        // published, and are leaked: valid for the process.
        self.chunks[..n].iter().filter_map(|c| unsafe { c.load(Ordering::Acquire).as_ref() })
    }

    /// The chunk and local index of global slot `i`.
    fn locate(&self, i: usize) -> Option<(&Chunk, usize)> {
        self.chunks().find(|c| i >= c.first && i < c.first + c.slots.len()).map(|c| (c, i - c.first))
    }

    fn took(&self) {
        let out = self.out.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak_in_use.fetch_max(out as u64, Ordering::Relaxed);
    }

    /// Lend a free buffer, growing the pool if none is; None when none can be had (the
    /// request then answers NULL).
    #[inline]
    pub fn lend(&self) -> Option<*mut u8> {
        self.requested.fetch_add(1, Ordering::Relaxed);
        // A second scan only after waiting for another request's growth, whose new chunk (a
        // mapping: microseconds) this one may then lend from instead of dropping its record.
        for _ in 0..2 {
            if let Some(b) = self.take_free() {
                return Some(b);
            }
            match self.grow() {
                Grown::Got(b) => return Some(b),
                Grown::Full => break,
                Grown::Busy => self.wait_for_growth(),
            }
        }
        self.exhausted.fetch_add(1, Ordering::Relaxed);
        self.wake();
        None
    }

    /// A free buffer taken (FREE -> LENT): the first free one, in slot order. First fit, not a
    /// rotation: the buffers the drain handed back last are lent again while their pages are
    /// resident (and warm in cache), so a job whose records fit a few buffers at a time touches
    /// only those few; a rotation over the whole pool made the library fault in every page of
    /// every buffer once (64 MiB of 8 MiB buffers), on whichever thread wrote the record: the
    /// workload thread, for the API and marker records.
    #[inline]
    fn take_free(&self) -> Option<*mut u8> {
        // No allocation: a request allocates only to grow.
        for c in self.chunks() {
            for (j, s) in c.slots.iter().enumerate() {
                if s.state.load(Ordering::Relaxed) == FREE
                    && s.state.compare_exchange(FREE, LENT, Ordering::Acquire, Ordering::Relaxed).is_ok()
                {
                    self.took();
                    // SAFETY: j < the chunk's length, so the offset stays inside its allocation.
                    return Some(unsafe { c.base.add(j * self.buffer_size) });
                }
            }
        }
        None
    }

    /// Until the request growing the pool has published its chunk (a mapping and a slot table),
    /// bounded: a grower descheduled for longer leaves this request to answer NULL.
    #[cold]
    fn wait_for_growth(&self) {
        for _ in 0..GROWTH_WAIT_SPINS {
            if !self.growing.load(Ordering::Acquire) {
                return;
            }
            pause();
        }
    }

    /// Add a chunk as large as the pool (within the cap), its first buffer lent to the caller.
    #[cold]
    fn grow(&self) -> Grown {
        if self.growing.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return Grown::Busy;
        }
        let total = self.total.load(Ordering::Acquire);
        let k = self.chunk_count.load(Ordering::Acquire);
        let add = total.min(self.max_buffers.saturating_sub(total));
        let chunk =
            if add == 0 || k >= MAX_CHUNKS { None } else { Chunk::new(self.buffer_size, add, total, true) };
        let got = chunk.map(|c| {
            let base = c.base;
            self.chunks[k].store(Box::into_raw(Box::new(c)), Ordering::Release);
            self.chunk_count.store(k + 1, Ordering::Release);
            self.total.store(total + add, Ordering::Release);
            self.grown.fetch_add(1, Ordering::Relaxed);
            self.took();
            base
        });
        self.growing.store(false, Ordering::Release);
        // Growing means the drain is behind: wake it.
        self.wake();
        got.map_or(Grown::Full, Grown::Got)
    }

    /// The chunk and local index of a buffer of this pool.
    #[inline]
    fn find(&self, buf: *mut u8) -> Option<(&Chunk, usize)> {
        self.chunks().find_map(|c| {
            let off = (buf as usize).checked_sub(c.base as usize)?;
            let i = off / self.buffer_size;
            (off % self.buffer_size == 0 && i < c.slots.len()).then_some((c, i))
        })
    }

    /// The global slot of a buffer of this pool (the tests' view of `find`).
    #[cfg(any(test, loom))]
    pub(crate) fn slot_of(&self, buf: *mut u8) -> Option<usize> {
        self.find(buf).map(|(c, i)| c.first + i)
    }

    fn slot(&self, i: usize) -> &Slot {
        let (c, j) = self.locate(i).expect("a slot of this pool");
        &c.slots[j]
    }

    /// A buffer came back: mark its slot (found by address, O(1) per chunk) ready for the drain
    /// thread; false if it is not this pool's. No lock.
    #[inline]
    pub(crate) fn give_back_buffer(&self, buf: *mut u8, valid: usize) -> bool {
        match self.find(buf) {
            Some((c, j)) => {
                self.ready(&c.slots[j], valid);
                true
            }
            None => false,
        }
    }

    #[inline]
    fn ready(&self, s: &Slot, valid: usize) {
        s.valid.store(valid.min(self.buffer_size), Ordering::Relaxed);
        s.seq.store(self.next_seq.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        // Release: the drain thread that sees READY also sees the records MSPTI wrote.
        s.state.store(READY, Ordering::Release);
        self.completed.fetch_add(1, Ordering::Relaxed);
        // Wake the drain only under pressure; otherwise its short poll picks the buffer up, so
        // the common completion makes no system call.
        let total = self.total.load(Ordering::Relaxed);
        if self.free_count() * 4 < total {
            self.wake();
        }
    }

    fn free_count(&self) -> usize {
        self.total.load(Ordering::Relaxed).saturating_sub(self.out.load(Ordering::Relaxed))
    }

    fn wake(&self) {
        let t = self.waker.load(Ordering::Acquire);
        if !t.is_null() {
            // SAFETY: `waker` only holds leaked `Thread` handles (see set_waker).
            unsafe { (*t).unpark() };
        }
    }

    /// Tell the pool which thread drains it.
    pub fn set_waker(&self, t: Thread) {
        // Leaked: a stale handle stays valid; unpark of an ended thread is harmless.
        let p = Box::into_raw(Box::new(t));
        self.waker.store(p, Ordering::Release);
    }

    /// Take every ready buffer, in completion order, as (slot, valid bytes).
    pub fn take_ready(&self) -> Vec<(usize, usize)> {
        let mut v: Vec<(u64, usize, usize)> = Vec::new();
        for c in self.chunks() {
            for (j, s) in c.slots.iter().enumerate() {
                if s.state.load(Ordering::Acquire) == READY
                    && s.state.compare_exchange(READY, DRAINING, Ordering::Acquire, Ordering::Relaxed).is_ok()
                {
                    v.push((s.seq.load(Ordering::Relaxed), c.first + j, s.valid.load(Ordering::Relaxed)));
                }
            }
        }
        v.sort_unstable();
        v.into_iter().map(|(_, i, n)| (i, n)).collect()
    }

    /// The valid bytes of a slot taken by `take_ready`.
    pub fn bytes(&self, slot: usize, valid: usize) -> &[u8] {
        let (c, j) = self.locate(slot).expect("a slot of this pool");
        // SAFETY: the slot is DRAINING, so MSPTI no longer writes it (it handed it back) and no
        // one else reads it; `valid` was clamped to the buffer size.
        unsafe { std::slice::from_raw_parts(c.base.add(j * self.buffer_size), valid) }
    }

    /// Return a drained buffer to the free list.
    pub fn release(&self, slot: usize) {
        self.out.fetch_sub(1, Ordering::Relaxed);
        self.slot(slot).state.store(FREE, Ordering::Release);
    }

    /// Buffers now lent to MSPTI (not yet handed back).
    pub fn lent(&self) -> usize {
        self.chunks().flat_map(|c| c.slots.iter()).filter(|s| s.state.load(Ordering::Relaxed) == LENT).count()
    }

    pub fn counters(&self) -> PoolCounters {
        PoolCounters {
            requested: self.requested.load(Ordering::Relaxed),
            exhausted: self.exhausted.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
            null_buffers: self.null_buffers.load(Ordering::Relaxed),
            foreign_buffers: self.foreign.load(Ordering::Relaxed),
            peak_in_use: self.peak_in_use.load(Ordering::Relaxed),
            grown: self.grown.load(Ordering::Relaxed),
        }
    }
}

/// Every pool made in this process (the drain empties them all: a retired pool may still get
/// buffers back).
pub fn all_pools() -> impl Iterator<Item = &'static Pool> {
    // SAFETY: POOLS only holds leaked pools.
    POOLS.iter().filter_map(|p| unsafe { p.load(Ordering::Acquire).as_ref() })
}

/// The pool for this configuration (buffer size, buffers at the start, memory cap): an earlier
/// one if it matches, else a new one (at most `MAX_POOLS` per process); it becomes current.
pub fn pool(buffer_size: usize, buffers: usize, cap: usize) -> Result<&'static Pool, PoolError> {
    if buffer_size < MIN_BUFFER_SIZE || buffers == 0 || buffers > MAX_START_BUFFERS {
        return Err(PoolError::BadShape { buffer_size, buffers });
    }
    let start = buffer_size.checked_mul(buffers).ok_or(PoolError::BadShape { buffer_size, buffers })?;
    if cap < start {
        return Err(PoolError::CapBelowStart { cap, start });
    }
    for p in &POOLS {
        let p = p.load(Ordering::Acquire);
        // SAFETY: POOLS only holds leaked pools.
        if let Some(p) = unsafe { p.as_ref() } {
            if p.buffer_size == buffer_size
                && p.start == buffers
                && p.max_buffers == (cap / buffer_size).max(buffers)
            {
                CURRENT.store(p as *const Pool as *mut Pool, Ordering::Release);
                return Ok(p);
            }
        }
    }
    let p = Pool::new(buffer_size, buffers, cap).ok_or(PoolError::Allocation { buffer_size, buffers })?;
    let p: &'static Pool = Box::leak(Box::new(p));
    let raw = p as *const Pool as *mut Pool;
    for s in &POOLS {
        if s.compare_exchange(std::ptr::null_mut(), raw, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            CURRENT.store(raw, Ordering::Release);
            return Ok(p);
        }
    }
    Err(PoolError::TooManyPools)
}

/// `msptiBuffersCallbackRequestFunc`: lend a buffer of the current pool; NULL when none is free
/// (MSPTI then drops the record and counts it). Calls nothing else.
///
/// # Safety
/// The pointers are MSPTI's out parameters (NULL-checked).
pub unsafe extern "C" fn on_request(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    if buffer.is_null() || size.is_null() {
        return;
    }
    // SAFETY: CURRENT holds NULL or a leaked pool.
    let got = unsafe { CURRENT.load(Ordering::Acquire).as_ref() }.and_then(|p| p.lend().map(|b| (p, b)));
    // SAFETY: non-NULL out pointers from MSPTI, valid for this call.
    unsafe {
        match got {
            Some((p, b)) => {
                *buffer = b;
                *size = p.buffer_size;
            }
            None => {
                *buffer = std::ptr::null_mut();
                *size = 0;
            }
        }
        if !max_records.is_null() {
            // 0: as many as fit (MSPTI ignores the value anyway).
            *max_records = 0;
        }
    }
}

/// `msptiBuffersCallbackCompleteFunc`: hand a buffer to the drain thread. O(1), lock-free.
///
/// # Safety
/// `buffer` is NULL or a pointer MSPTI got from `on_request`.
pub unsafe extern "C" fn on_complete(buffer: *mut u8, _size: usize, valid: usize) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: CURRENT holds NULL or a leaked pool.
        let current = unsafe { CURRENT.load(Ordering::Acquire).as_ref() };
        if buffer.is_null() {
            if let Some(p) = current {
                p.null_buffers.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        if current.is_some_and(|p| p.give_back_buffer(buffer, valid)) {
            return;
        }
        for p in &POOLS {
            // SAFETY: POOLS only holds leaked pools.
            if unsafe { p.load(Ordering::Acquire).as_ref() }
                .is_some_and(|p| p.give_back_buffer(buffer, valid))
            {
                return;
            }
        }
        match current {
            Some(p) => p.foreign.fetch_add(1, Ordering::Relaxed),
            None => ORPHAN_COMPLETES.fetch_add(1, Ordering::Relaxed),
        };
    });
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_pool_doubles_on_demand_up_to_its_cap_and_counts_every_refusal() {
        // 2 buffers at the start, room for 5: 2, then 2 more, then the 1 the cap leaves.
        // Pools live for the process (a published one is leaked into POOLS); this one is kept
        // reachable the same way, so that valgrind's leak check (make memcheck) sees no loss.
        static KEPT: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
        let p: &'static Pool = Box::leak(Box::new(Pool::new(1024, 2, 5 * 1024).expect("pool")));
        KEPT.lock().unwrap().push(p as *const Pool as usize);
        let lent: Vec<*mut u8> = (0..5).map(|_| p.lend().expect("within the cap")).collect();
        assert_eq!((p.buffers(), p.counters().grown), (5, 2));
        assert_eq!(p.lend(), None, "the cap holds");
        assert_eq!(p.lend(), None);
        let c = p.counters();
        assert_eq!((c.requested, c.exhausted, c.peak_in_use), (7, 2, 5));
        let mut slots: Vec<usize> = lent.iter().map(|&b| p.slot_of(b).expect("ours")).collect();
        slots.sort_unstable();
        assert_eq!(slots, vec![0, 1, 2, 3, 4], "every buffer is a slot of its own");
        assert_eq!(p.slot_of(lent[4].wrapping_add(1)), None, "not a buffer's start");
        for (i, &b) in lent.iter().enumerate() {
            assert!(p.give_back_buffer(b, 100 + i));
        }
        assert!(!p.give_back_buffer(lent[4].wrapping_add(1), 1), "not a buffer of this pool");
        let ready = p.take_ready();
        assert_eq!(
            ready.iter().map(|r| r.1).collect::<Vec<_>>(),
            vec![100, 101, 102, 103, 104],
            "in completion order"
        );
        for (slot, valid) in ready {
            assert_eq!(p.bytes(slot, valid).len(), valid);
            p.release(slot);
        }
        assert_eq!((p.lent(), p.free_count()), (0, 5));
        assert!(p.lend().is_some(), "released buffers are lent again, without growing");
        assert_eq!(p.counters().grown, 2);
    }

    #[test]
    fn the_buffer_handed_back_last_is_lent_again_before_one_never_written() {
        // First fit: records that need two buffers at a time keep reusing those two, so the
        // pages of the others are never faulted in.
        static KEPT: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
        let p: &'static Pool = Box::leak(Box::new(Pool::new(1024, 8, 8 * 1024).expect("pool")));
        KEPT.lock().unwrap().push(p as *const Pool as usize);
        let mut used = std::collections::BTreeSet::new();
        let mut a = p.lend().expect("a buffer");
        for i in 0..20 {
            let b = p.lend().expect("a second buffer");
            used.extend([p.slot_of(a).expect("ours"), p.slot_of(b).expect("ours")]);
            assert!(p.give_back_buffer(a, i + 1));
            for (slot, _) in p.take_ready() {
                p.release(slot);
            }
            a = b;
        }
        assert_eq!(used.into_iter().collect::<Vec<_>>(), vec![0, 1], "two slots served all 21 buffers");
        assert_eq!(p.counters().grown, 0);
    }

    #[test]
    fn buffers_take_no_resident_memory_until_written() {
        // A pool of 64 MiB is mapped, not written: its pages become resident only as MSPTI
        // fills them (mincore: bit 0 of each page's byte says resident).
        static KEPT: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
        let p: &'static Pool = Box::leak(Box::new(Pool::new(8 << 20, 8, 64 << 20).expect("pool")));
        KEPT.lock().unwrap().push(p as *const Pool as usize);
        let page = 4096;
        let resident = |b: *mut u8, len: usize| -> usize {
            let mut v = vec![0u8; len / page];
            // SAFETY: `b` is the page-aligned start of a mapping at least `len` long; `v` has
            // one byte per page.
            let rc = unsafe { libc::mincore(b.cast(), len, v.as_mut_ptr()) };
            assert_eq!(rc, 0);
            v.iter().filter(|&&x| x & 1 != 0).count()
        };
        let b = p.lend().expect("a buffer");
        assert_eq!(b as usize % page, 0, "page-aligned");
        assert_eq!(resident(b, p.buffer_size), 0, "no page of an unwritten buffer is resident");
        // SAFETY: a lent buffer of buffer_size bytes belongs to its borrower.
        unsafe { std::ptr::write_bytes(b, 1, 3 * page) };
        assert_eq!(resident(b, p.buffer_size), 3, "exactly the pages written");
        // SAFETY: as above; the rest of the buffer reads as zero.
        assert_eq!(unsafe { *b.add(3 * page) }, 0);
    }

    #[test]
    fn shapes_and_caps_outside_their_ranges_are_refused_with_the_fix() {
        assert_eq!(pool(512, 2, 1 << 20).err(), Some(PoolError::BadShape { buffer_size: 512, buffers: 2 }));
        assert_eq!(pool(1024, 0, 1 << 20).err(), Some(PoolError::BadShape { buffer_size: 1024, buffers: 0 }));
        let e = pool(4096, 4, 8192).err().expect("cap below the start");
        assert_eq!(e, PoolError::CapBelowStart { cap: 8192, start: 16384 });
        assert!(e.to_string().contains("raise the cap or ask for fewer or smaller buffers"));
    }
}

/// Model tests of the slot protocol (`RUSTFLAGS="--cfg loom" cargo test -p mspti-lens --release
/// --lib activity::pool::loom_tests`): every interleaving of two MSPTI threads lending and handing
/// back buffers against the drain taking and releasing them.
#[cfg(loom)]
mod loom_tests {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    struct Model {
        pool: Pool,
        /// What MSPTI "wrote" into each buffer before handing it back: plain memory, so loom
        /// reports any access not ordered by the slot protocol (a data race).
        payload: [UnsafeCell<u64>; 2],
    }

    static GREW: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    // SAFETY: the model's raw buffer memory is never touched; Pool is Sync.
    unsafe impl Sync for Model {}
    // SAFETY: as above.
    unsafe impl Send for Model {}

    static RACED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    #[test]
    fn a_buffer_is_lent_to_one_thread_and_its_records_are_seen_by_the_drain() {
        let mut b = loom::model::Builder::new();
        // Every interleaving with up to 3 preemptions (the protocol's races need 2).
        b.preemption_bound = Some(3);
        b.check(|| {
            let m = Arc::new(Model {
                pool: Pool::new(1024, 2, 2048).expect("pool"),
                payload: [UnsafeCell::new(0), UnsafeCell::new(0)],
            });
            let producers: Vec<_> = (1..=2u64)
                .map(|id| {
                    let m = m.clone();
                    loom::thread::spawn(move || {
                        if let Some(b) = m.pool.lend() {
                            let i = m.pool.slot_of(b).expect("a lent buffer is the pool's");
                            // SAFETY: a LENT slot belongs to its borrower alone (what loom checks).
                            m.payload[i].with_mut(|p| unsafe {
                                assert_eq!(*p, 0);
                                *p = id;
                            });
                            assert!(m.pool.give_back_buffer(b, 512));
                            Some(i)
                        } else {
                            None
                        }
                    })
                })
                .collect();
            // A drain pass racing the producers, on its own thread.
            let drain = {
                let m = m.clone();
                loom::thread::spawn(move || {
                    let mut drained = Vec::new();
                    let racing = m.pool.take_ready();
                    if !racing.is_empty() {
                        RACED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    for (slot, valid) in racing {
                        assert_eq!(valid, 512);
                        // Acquire on READY: the drain sees what was written before the hand-back.
                        // SAFETY: a DRAINING slot belongs to the drain alone (what loom checks).
                        m.payload[slot].with_mut(|p| unsafe {
                            assert_ne!(*p, 0);
                            *p = 0;
                        });
                        m.pool.release(slot);
                        drained.push(slot);
                    }
                    drained
                })
            };
            let lent: Vec<usize> = producers.into_iter().filter_map(|p| p.join().unwrap()).collect();
            let mut drained = drain.join().unwrap();
            for (slot, _) in m.pool.take_ready() {
                // SAFETY: a DRAINING slot belongs to the drain alone (what loom checks).
                m.payload[slot].with_mut(|p| unsafe {
                    assert_ne!(*p, 0);
                    *p = 0;
                });
                m.pool.release(slot);
                drained.push(slot);
            }
            drained.sort_unstable();
            let mut want = lent.clone();
            want.sort_unstable();
            assert_eq!(drained, want, "every handed-back buffer is drained exactly once");
            assert_eq!(m.pool.lent(), 0);
            assert_eq!(m.pool.free_count(), 2);
        });
        // The model explored drains that raced a hand-back (else it proves nothing).
        assert!(RACED.load(std::sync::atomic::Ordering::Relaxed) > 0);
    }

    #[test]
    fn a_request_that_finds_the_pool_growing_waits_and_gets_a_buffer_below_the_cap() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            // One buffer at the start, already out; room for two more. Two producers race: each
            // either grows the pool or finds the other growing, waits, and grows it again. Below
            // the cap neither may be refused (a refusal is a dropped record).
            let m = Arc::new(Model {
                pool: Pool::new(1024, 1, 3 * 1024).expect("pool"),
                payload: [UnsafeCell::new(0), UnsafeCell::new(0)],
            });
            let first = m.pool.lend().expect("the first buffer");
            let producers: Vec<_> = (0..2)
                .map(|_| {
                    let m = m.clone();
                    loom::thread::spawn(move || m.pool.lend().map(|b| m.pool.slot_of(b).expect("ours")))
                })
                .collect();
            let mut got: Vec<usize> =
                producers.into_iter().map(|p| p.join().unwrap().expect("lent")).collect();
            got.sort_unstable();
            assert_eq!(got, vec![1, 2], "each grown buffer lent once");
            assert_eq!(m.pool.counters().exhausted, 0);
            assert_eq!((m.pool.buffers(), m.pool.counters().grown), (3, 2));
            assert_eq!(m.pool.slot_of(first), Some(0));
        });
    }

    #[test]
    fn a_pool_grown_on_demand_lends_each_buffer_once_and_counts_every_refusal() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            // One buffer at the start, room for one more: two producers race for them (one
            // lends the first, one grows the pool, or one is refused while the other grows)
            // while the drain takes and releases what comes back.
            let m = Arc::new(Model {
                pool: Pool::new(1024, 1, 2048).expect("pool"),
                payload: [UnsafeCell::new(0), UnsafeCell::new(0)],
            });
            let producers: Vec<_> = (1..=2u64)
                .map(|id| {
                    let m = m.clone();
                    loom::thread::spawn(move || {
                        let b = m.pool.lend()?;
                        let i = m.pool.slot_of(b).expect("a lent buffer is the pool's");
                        // SAFETY: a LENT slot belongs to its borrower alone (what loom checks).
                        m.payload[i].with_mut(|p| unsafe {
                            assert_eq!(*p, 0, "a buffer lent twice");
                            *p = id;
                        });
                        assert!(m.pool.give_back_buffer(b, 512));
                        Some(i)
                    })
                })
                .collect();
            let drain = {
                let m = m.clone();
                loom::thread::spawn(move || {
                    let mut drained = Vec::new();
                    for (slot, _) in m.pool.take_ready() {
                        // SAFETY: a DRAINING slot belongs to the drain alone (what loom checks).
                        m.payload[slot].with_mut(|p| unsafe {
                            assert_ne!(*p, 0);
                            *p = 0;
                        });
                        m.pool.release(slot);
                        drained.push(slot);
                    }
                    drained
                })
            };
            let lent: Vec<usize> = producers.into_iter().filter_map(|p| p.join().unwrap()).collect();
            let mut drained = drain.join().unwrap();
            for (slot, _) in m.pool.take_ready() {
                // SAFETY: as above.
                m.payload[slot].with_mut(|p| unsafe {
                    assert_ne!(*p, 0);
                    *p = 0;
                });
                m.pool.release(slot);
                drained.push(slot);
            }
            drained.sort_unstable();
            let mut want = lent.clone();
            want.sort_unstable();
            assert_eq!(drained, want, "every handed-back buffer is drained exactly once");
            let c = m.pool.counters();
            // Every request either got a buffer or was counted as refused: the drop count is exact.
            assert_eq!(lent.len() as u64 + c.exhausted, 2);
            assert!(m.pool.buffers() <= 2, "the cap holds");
            assert_eq!(m.pool.buffers() == 2, c.grown == 1);
            if c.grown == 1 {
                GREW.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            assert!(c.peak_in_use <= m.pool.buffers() as u64);
            assert_eq!(m.pool.lent(), 0);
            assert_eq!(m.pool.free_count(), m.pool.buffers());
        });
        // The model explored interleavings that grew the pool (else it proves nothing of growth).
        assert!(GREW.load(std::sync::atomic::Ordering::Relaxed) > 0);
    }
}
