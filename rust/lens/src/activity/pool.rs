//! Our own activity buffers. MSPTI asks for a buffer from whatever thread is recording, possibly
//! under its record lock (`request`), and hands a full one back, possibly under that same lock
//! (`complete`, 26.x FlushAll). Both only touch atomics here: `request` takes a free slot with
//! one compare-and-swap per slot tried, `complete` marks the slot ready with three stores and at
//! most one wake-up. All parsing happens later on the drain thread.
//!
//! Buffers of a pool are one contiguous allocation, so `complete` finds a buffer's slot by
//! arithmetic (O(1)). Pools live for the process: MSPTI may hand a buffer back after the session
//! that lent it has closed.

use std::sync::atomic::{AtomicPtr, Ordering};
use std::thread::Thread;

use super::sync::{AtomicU64, AtomicU8, AtomicUsize};

const FREE: u8 = 0;
const LENT: u8 = 1;
const READY: u8 = 2;
const DRAINING: u8 = 3;

/// MSPTI's buffers are 8-byte aligned in every Huawei consumer; ours are 4 KiB aligned.
const ALIGN: usize = 4096;
/// Distinct pools a process may create (one per buffer configuration).
pub const MAX_POOLS: usize = 8;

struct Slot {
    state: AtomicU8,
    valid: AtomicUsize,
    /// Completion order: buffers are drained in the order MSPTI handed them back.
    seq: AtomicU64,
}

/// Counters of the buffer traffic (cumulative for the pool).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounters {
    pub requested: u64,
    /// Requests answered with NULL because every buffer was lent or waiting: MSPTI drops the
    /// records it could not place (its own count, where it exposes one, says how many).
    pub exhausted: u64,
    pub completed: u64,
    /// `complete` called with a NULL buffer (26.0/26.1 do after a NULL request).
    pub null_buffers: u64,
    /// `complete` called with a buffer that is not ours: ignored.
    pub foreign_buffers: u64,
}

pub struct Pool {
    base: *mut u8,
    pub buffer_size: usize,
    slots: Box<[Slot]>,
    next_seq: AtomicU64,
    hint: AtomicUsize,
    /// Slots FREE now (so `complete` knows the pressure without a scan).
    free: AtomicUsize,
    requested: AtomicU64,
    exhausted: AtomicU64,
    completed: AtomicU64,
    null_buffers: AtomicU64,
    foreign: AtomicU64,
    /// The drain thread, woken when few buffers are left free.
    waker: AtomicPtr<Thread>,
}

// SAFETY: `base` is a leaked allocation only ever written through slots that the atomic state
// machine gives to one party at a time (MSPTI while LENT, the drain while DRAINING).
unsafe impl Sync for Pool {}
// SAFETY: as above; the raw pointer is never freed.
unsafe impl Send for Pool {}

static POOLS: [AtomicPtr<Pool>; MAX_POOLS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_POOLS];
static CURRENT: AtomicPtr<Pool> = AtomicPtr::new(std::ptr::null_mut());
/// Counted when `complete` finds no pool at all (called before any was made).
static ORPHAN_COMPLETES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Pool {
    pub(crate) fn new(buffer_size: usize, buffers: usize) -> Option<Pool> {
        let layout = std::alloc::Layout::from_size_align(buffer_size.checked_mul(buffers)?, ALIGN).ok()?;
        // SAFETY: the layout has a non-zero size (checked by the caller). Zeroed pages are only
        // touched when MSPTI writes them.
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        if base.is_null() {
            return None;
        }
        let slots = (0..buffers)
            .map(|_| Slot { state: AtomicU8::new(FREE), valid: AtomicUsize::new(0), seq: AtomicU64::new(0) })
            .collect();
        Some(Pool {
            base,
            buffer_size,
            slots,
            next_seq: AtomicU64::new(0),
            hint: AtomicUsize::new(0),
            free: AtomicUsize::new(buffers),
            requested: AtomicU64::new(0),
            exhausted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            null_buffers: AtomicU64::new(0),
            foreign: AtomicU64::new(0),
            waker: AtomicPtr::new(std::ptr::null_mut()),
        })
    }

    pub fn buffers(&self) -> usize {
        self.slots.len()
    }

    /// Lend a free buffer, or None when all are out (the request then answers NULL).
    #[inline]
    pub fn lend(&self) -> Option<*mut u8> {
        self.requested.fetch_add(1, Ordering::Relaxed);
        let n = self.slots.len();
        let start = self.hint.load(Ordering::Relaxed);
        for k in 0..n {
            let i = (start + k) % n;
            let s = &self.slots[i];
            if s.state.load(Ordering::Relaxed) == FREE
                && s.state.compare_exchange(FREE, LENT, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                self.hint.store((i + 1) % n, Ordering::Relaxed);
                self.free.fetch_sub(1, Ordering::Relaxed);
                // SAFETY: i < n, so the offset stays inside the allocation.
                return Some(unsafe { self.base.add(i * self.buffer_size) });
            }
        }
        self.exhausted.fetch_add(1, Ordering::Relaxed);
        self.wake();
        None
    }

    /// The slot of a buffer of this pool.
    #[inline]
    pub(crate) fn slot_of(&self, buf: *mut u8) -> Option<usize> {
        let off = (buf as usize).checked_sub(self.base as usize)?;
        let i = off / self.buffer_size;
        (off % self.buffer_size == 0 && i < self.slots.len()).then_some(i)
    }

    /// A buffer came back: mark it ready for the drain thread. O(1), no lock.
    #[inline]
    pub(crate) fn give_back(&self, i: usize, valid: usize) {
        let s = &self.slots[i];
        s.valid.store(valid.min(self.buffer_size), Ordering::Relaxed);
        s.seq.store(self.next_seq.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        // Release: the drain thread that sees READY also sees the records MSPTI wrote.
        s.state.store(READY, Ordering::Release);
        self.completed.fetch_add(1, Ordering::Relaxed);
        // Wake the drain only under pressure; otherwise its short poll picks the buffer up, so
        // the common completion makes no system call.
        if self.free_count() * 4 < self.slots.len() {
            self.wake();
        }
    }

    fn free_count(&self) -> usize {
        self.free.load(Ordering::Relaxed)
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
        for (i, s) in self.slots.iter().enumerate() {
            if s.state.load(Ordering::Acquire) == READY
                && s.state.compare_exchange(READY, DRAINING, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                v.push((s.seq.load(Ordering::Relaxed), i, s.valid.load(Ordering::Relaxed)));
            }
        }
        v.sort_unstable();
        v.into_iter().map(|(_, i, n)| (i, n)).collect()
    }

    /// The valid bytes of a slot taken by `take_ready`.
    pub fn bytes(&self, slot: usize, valid: usize) -> &[u8] {
        // SAFETY: the slot is DRAINING, so MSPTI no longer writes it (it handed it back) and no
        // one else reads it; `valid` was clamped to the buffer size.
        unsafe { std::slice::from_raw_parts(self.base.add(slot * self.buffer_size), valid) }
    }

    /// Return a drained buffer to the free list.
    pub fn release(&self, slot: usize) {
        self.slots[slot].state.store(FREE, Ordering::Release);
        self.free.fetch_add(1, Ordering::Relaxed);
    }

    /// Buffers now lent to MSPTI (not yet handed back).
    pub fn lent(&self) -> usize {
        self.slots.iter().filter(|s| s.state.load(Ordering::Relaxed) == LENT).count()
    }

    pub fn counters(&self) -> PoolCounters {
        PoolCounters {
            requested: self.requested.load(Ordering::Relaxed),
            exhausted: self.exhausted.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
            null_buffers: self.null_buffers.load(Ordering::Relaxed),
            foreign_buffers: self.foreign.load(Ordering::Relaxed),
        }
    }
}

/// Every pool made in this process (the drain empties them all: a retired pool may still get
/// buffers back).
pub fn all_pools() -> impl Iterator<Item = &'static Pool> {
    // SAFETY: POOLS only holds leaked pools.
    POOLS.iter().filter_map(|p| unsafe { p.load(Ordering::Acquire).as_ref() })
}

/// The pool for this configuration: the current one if it matches, else a new one (at most
/// `MAX_POOLS` per process), which becomes current.
pub fn pool(buffer_size: usize, buffers: usize) -> Result<&'static Pool, String> {
    if buffer_size < 1024 || buffers == 0 || buffers > 4096 {
        return Err(format!(
            "activity buffers must be at least 1 KiB each and 1-4096 of them (asked: {buffers} of {buffer_size} bytes)"
        ));
    }
    for p in &POOLS {
        let p = p.load(Ordering::Acquire);
        // SAFETY: POOLS only holds leaked pools.
        if let Some(p) = unsafe { p.as_ref() } {
            if p.buffer_size == buffer_size && p.buffers() == buffers {
                CURRENT.store(p as *const Pool as *mut Pool, Ordering::Release);
                return Ok(p);
            }
        }
    }
    let p = Pool::new(buffer_size, buffers)
        .ok_or_else(|| format!("could not allocate {buffers} activity buffers of {buffer_size} bytes"))?;
    let p: &'static Pool = Box::leak(Box::new(p));
    let raw = p as *const Pool as *mut Pool;
    for s in &POOLS {
        if s.compare_exchange(std::ptr::null_mut(), raw, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            CURRENT.store(raw, Ordering::Release);
            return Ok(p);
        }
    }
    Err(format!("this process already made {MAX_POOLS} activity buffer pools of other sizes; reuse one"))
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
        if let Some(p) = current {
            if let Some(i) = p.slot_of(buffer) {
                return p.give_back(i, valid);
            }
        }
        for p in &POOLS {
            // SAFETY: POOLS only holds leaked pools.
            if let Some(p) = unsafe { p.load(Ordering::Acquire).as_ref() } {
                if let Some(i) = p.slot_of(buffer) {
                    return p.give_back(i, valid);
                }
            }
        }
        match current {
            Some(p) => p.foreign.fetch_add(1, Ordering::Relaxed),
            None => ORPHAN_COMPLETES.fetch_add(1, Ordering::Relaxed),
        };
    });
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
                pool: Pool::new(1024, 2).expect("pool"),
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
                            m.pool.give_back(i, 512);
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
}
