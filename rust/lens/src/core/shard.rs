//! Per-thread shards: each thread that makes calls owns one, with its ENTER stack and one
//! histogram per (domain, cbid, function) it has seen. Only the owner writes; snapshots read
//! every shard at any time. Shards live for the whole process (a callback may still run after
//! unsubscribe), and a thread that ends hands its shard, counts included, to the next new thread,
//! so thousands of short-lived threads cost no more memory than the most alive at once.
//!
//! No lock anywhere: the registry is a lock-free list (a forked child whose parent was mid-
//! snapshot cannot block on it), and a shard is given back by a pthread-key destructor, which
//! also runs for a thread whose first callback came from another key's destructor.

use std::cell::{Cell, UnsafeCell};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::arrival_ring::Ring;
use super::counters::{AtomicCounters, Counter, Counters};
use super::hist::AtomicHistogram;
use super::quiescence::Quiescence;
use super::run_word::Stamp;
use super::slowest::SlowestCalls;

/// Open calls a thread may nest; deeper ENTERs are counted as stack_full.
pub const STACK_DEPTH: usize = 64;
/// Distinct (domain, cbid, function) keys per thread; more are dropped and counted.
pub const KEY_LIMIT: usize = 256;
/// Slots of the key table: twice the limit, so the table is never more than half full and every
/// lookup, of a key present or not, ends within a few probes (an absent key of a thread that has
/// reached the limit costs no walk over the table).
pub const KEY_SLOTS: usize = 2 * KEY_LIMIT;

/// An API's identity in merged data (snapshots, windows, the timeline): (domain, cbid, function
/// name), the owned form of a [`RawKey`].
pub type Key = (u32, u32, String);

/// Identity of an API as the callback sees it: the name pointer is a static string in the
/// library, so its address is a cheap key (docs/reference.md, "Callback data").
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RawKey {
    /// (domain, cbid) as one word, so a key is compared in two.
    tag: u64,
    pub name: usize,
}

impl RawKey {
    #[inline(always)]
    pub fn new(domain: u32, cbid: u32, name: usize) -> RawKey {
        RawKey { tag: (u64::from(domain) << 32) | u64::from(cbid), name }
    }

    #[inline(always)]
    pub fn domain(&self) -> u32 {
        (self.tag >> 32) as u32
    }

    #[inline(always)]
    pub fn cbid(&self) -> u32 {
        self.tag as u32
    }

    #[inline(always)]
    fn tag(&self) -> u64 {
        self.tag
    }
    /// A slot index < KEY_SLOTS: one multiply of the name's address (Fibonacci hashing; the top
    /// bits of the product depend on every bit of it). The name alone: each API passes its own
    /// static string, so (domain, cbid) add nothing to the spread, only instructions to every EXIT
    /// (a name shared by several ids just probes a slot further; the tag still tells them apart).
    #[inline(always)]
    fn hash(&self) -> usize {
        let h = (self.name as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> (64 - KEY_SLOTS.trailing_zeros())) as usize
    }
}

/// A key's histogram and the name it was first seen with, copied out of the library.
pub struct KeyHistogram {
    pub domain: u32,
    pub cbid: u32,
    pub name: String,
    pub hist: Box<AtomicHistogram>,
    /// The slowest calls of this (thread, key) per window.
    pub slowest: SlowestCalls,
}

struct KeySlot {
    tag: AtomicU64,
    name: AtomicU64,
    /// Published last (Release): readers see tag, name and histogram once this is non-null.
    hist: AtomicPtr<KeyHistogram>,
}

#[derive(Clone, Copy)]
struct Open {
    key: RawKey,
    start: u64,
    /// The run's epoch and toggle generation at ENTER.
    stamp: Stamp,
}

const NO_CALL: Open = Open { key: RawKey { tag: 0, name: 0 }, start: 0, stamp: Stamp::ZERO };

/// Aligned to 128 bytes (and so a multiple of 128 long): no cache line of a shard, which its
/// owner writes on every call, is shared with another thread's data. In declaration order, so the
/// depth shares a line with the bottom of the stack.
#[repr(C, align(128))]
pub struct Shard {
    in_use: AtomicBool,
    /// The owner's thread pointer (`thread_pointer`), 0 while free: `existing` trusts a cached
    /// shard only when this is its own. Written by the owner only (claim, give-back).
    owner: AtomicUsize,
    /// Open calls now (owner writes, snapshots read for "in flight").
    depth: AtomicU32,
    /// The run epoch of every open call (a push onto a stale stack clears it first, so they share
    /// one): snapshots count a stack left by an earlier run as not in flight.
    open_epoch: AtomicU32,
    /// Odd while this thread is inside the callback (quiescence.rs: a stop waits for it).
    pub quiescence: Quiescence,
    stack: UnsafeCell<[Open; STACK_DEPTH]>,
    /// Open-addressed by `RawKey::hash`; inline, so a lookup is one load from the shard.
    keys: [KeySlot; KEY_SLOTS],
    /// Keys in `keys` (owner only).
    keys_used: AtomicU32,
    counters: AtomicCounters,
    /// When this shard's HCCL calls entered (arrivals.rs): made at its first one, published
    /// (Release) for `take`, never freed while the shard lives.
    arrivals: AtomicPtr<Ring>,
    /// The registry's list (written once, before the shard is published).
    next: AtomicPtr<Shard>,
}

// SAFETY: `stack` is only touched by the shard's current owner thread (ownership passes through
// the `in_use` flag: Acquire on claim, Release on give-back); everything else is atomics or
// immutable after publication.
unsafe impl Sync for Shard {}

impl Shard {
    fn new() -> Shard {
        Shard {
            in_use: AtomicBool::new(true),
            owner: AtomicUsize::new(0),
            depth: AtomicU32::new(0),
            open_epoch: AtomicU32::new(0),
            quiescence: Quiescence::new(),
            stack: UnsafeCell::new([NO_CALL; STACK_DEPTH]),
            keys: [const {
                KeySlot {
                    tag: AtomicU64::new(0),
                    name: AtomicU64::new(0),
                    hist: AtomicPtr::new(std::ptr::null_mut()),
                }
            }; KEY_SLOTS],
            keys_used: AtomicU32::new(0),
            counters: AtomicCounters::new(),
            arrivals: AtomicPtr::new(std::ptr::null_mut()),
            next: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// ENTER: remember when this call began.
    #[inline(always)]
    pub fn enter(&self, key: RawKey, start: u64, stamp: Stamp) {
        let epoch = stamp.epoch();
        let mut d = self.depth.load(Ordering::Relaxed) as usize;
        // SAFETY: only the owner thread reaches here; d - 1 < STACK_DEPTH when d > 0.
        if d > 0 && unsafe { (*self.stack.get())[d - 1].stamp.epoch() } != epoch {
            // Epochs only grow and the stack is pushed in order, so a stale top means every open
            // call here began in an earlier run: their EXITs will never be recorded.
            self.counters.add(Counter::Abandoned, d as u64);
            d = 0;
        }
        if d >= STACK_DEPTH {
            // 64 calls open at once on one thread means ENTERs whose EXIT will never come (the
            // id was disabled mid-call): give up the oldest so the thread keeps recording. Its
            // EXIT, should it come after all, is counted as unmatched.
            self.evict_oldest();
            self.counters.bump(Counter::StackFull);
            self.counters.bump(Counter::Orphaned);
            d = STACK_DEPTH - 1;
        }
        if d == 0 {
            self.open_epoch.store(epoch, Ordering::Relaxed);
        }
        // SAFETY: only the owner thread reaches here, and d < STACK_DEPTH.
        unsafe { (*self.stack.get())[d] = Open { key, start, stamp } };
        self.depth.store(d as u32 + 1, Ordering::Relaxed);
    }

    #[cold]
    fn evict_oldest(&self) {
        // SAFETY: only the owner thread touches the stack; the range is within the array.
        unsafe { (*self.stack.get()).copy_within(1..STACK_DEPTH, 0) };
    }

    /// An EXIT below the top: the open calls above its ENTER lost their EXITs (disabled
    /// mid-call); abandon them and return the depth of the match, or None.
    #[cold]
    fn find_below(&self, key: RawKey, d: usize) -> Option<usize> {
        // SAFETY: only the owner thread touches the stack, and d <= STACK_DEPTH.
        let stack = unsafe { &*self.stack.get() };
        let i = (0..d.saturating_sub(1)).rev().find(|&i| stack[i].key == key)?;
        let above = (d - 1 - i) as u64;
        self.counters.add(Counter::Orphaned, above);
        Some(i + 1)
    }

    /// EXIT: pop the matching ENTER and return its start, or None (counted) when there is none.
    /// An ENTER of an earlier run (the stamp's epoch differs) is popped and counted as abandoned;
    /// one from before a toggle of its id or domain (some toggle since, the toggle generation
    /// differs, and toggles.rs says it was this id's: it may be an earlier call's ENTER, whose EXIT
    /// was never delivered) is popped and counted as toggled.
    #[inline(always)]
    pub fn exit(&self, key: RawKey, stamp: Stamp, count_unmatched: bool) -> Option<u64> {
        let d = self.depth.load(Ordering::Relaxed) as usize;
        if d == 0 {
            if count_unmatched {
                self.counters.bump(Counter::Unmatched);
            }
            return None;
        }
        // SAFETY: only the owner thread reaches here, and 0 < d <= STACK_DEPTH: the depth is
        // written only by `enter` (at most STACK_DEPTH), this function and `find_below` (lower),
        // and `claim` (0).
        let mut top = unsafe { *(*self.stack.get()).get_unchecked(d - 1) };
        let mut d = d;
        if top.key != key {
            // Strict nesting: an EXIT that matches no open call had its ENTER missed (the id was
            // enabled in between); one that matches a deeper call closes it, abandoning the calls
            // above it, whose EXITs were lost.
            match self.find_below(key, d) {
                Some(depth) => {
                    d = depth;
                    // SAFETY: only the owner thread reaches here, and 0 < d <= STACK_DEPTH.
                    top = unsafe { (*self.stack.get())[d - 1] };
                }
                None => {
                    if count_unmatched {
                        self.counters.bump(Counter::Unmatched);
                    }
                    return None;
                }
            }
        }
        self.depth.store(d as u32 - 1, Ordering::Relaxed);
        // One comparison for the common case: the same run, no toggle since the ENTER.
        if top.stamp != stamp && !self.still_paired(key, top.stamp, stamp, count_unmatched) {
            return None;
        }
        Some(top.start)
    }

    /// An EXIT whose ENTER's stamp differs: whether the pairing stands (a toggle of another id);
    /// counted when not.
    #[cold]
    fn still_paired(&self, key: RawKey, entered: Stamp, now: Stamp, count_unmatched: bool) -> bool {
        if entered.epoch() != now.epoch() {
            self.counters.bump(Counter::Abandoned);
            return false;
        }
        if super::toggles::since(key.domain(), key.cbid(), entered.toggles()) {
            if count_unmatched {
                self.counters.bump(Counter::Toggled);
            }
            return false;
        }
        true
    }

    /// The histogram of `key` on this thread, created on first sight (the only allocation).
    #[inline(always)]
    pub fn histogram(&self, key: RawKey) -> Option<&KeyHistogram> {
        let tag = key.tag();
        let mut i = key.hash();
        // At most KEY_LIMIT of the KEY_SLOTS slots are ever used, so an empty slot ends the walk.
        loop {
            // SAFETY: i < KEY_SLOTS always: hash() is reduced modulo KEY_SLOTS, and so is every
            // step below.
            let slot = unsafe { self.keys.get_unchecked(i) };
            // Relaxed: only this thread (the owner) publishes slots of its table.
            let h = slot.hist.load(Ordering::Relaxed);
            if h.is_null() {
                return self.insert(slot, key);
            }
            if slot.tag.load(Ordering::Relaxed) == tag && slot.name.load(Ordering::Relaxed) == key.name as u64
            {
                // SAFETY: published histograms are never freed (process lifetime).
                return Some(unsafe { &*h });
            }
            i = (i + 1) % KEY_SLOTS;
        }
    }

    #[cold]
    fn insert(&self, slot: &KeySlot, key: RawKey) -> Option<&KeyHistogram> {
        let used = self.keys_used.load(Ordering::Relaxed);
        if used as usize >= KEY_LIMIT {
            self.counters.bump(Counter::Dropped);
            return None;
        }
        self.keys_used.store(used + 1, Ordering::Relaxed);
        let kh = Box::new(KeyHistogram {
            domain: key.domain(),
            cbid: key.cbid(),
            name: name_of(key.name as *const c_char),
            hist: AtomicHistogram::new(),
            slowest: SlowestCalls::new(),
        });
        slot.tag.store(key.tag(), Ordering::Relaxed);
        slot.name.store(key.name as u64, Ordering::Relaxed);
        let p = Box::into_raw(kh);
        slot.hist.store(p, Ordering::Release);
        // SAFETY: just leaked; lives for the process.
        Some(unsafe { &*p })
    }

    /// This shard's arrival ring, made on first use (the owner only; the one allocation of an
    /// HCCL-calling thread's arrivals).
    #[inline]
    pub fn arrivals(&self) -> &Ring {
        // Relaxed: only the owner publishes the ring.
        let p = self.arrivals.load(Ordering::Relaxed);
        if p.is_null() {
            return self.make_arrivals();
        }
        // SAFETY: a published ring is freed only with the shard (Drop, tests).
        unsafe { &*p }
    }

    #[cold]
    fn make_arrivals(&self) -> &Ring {
        let p = Box::into_raw(Box::new(Ring::new()));
        // Release: the ring's initialisation happens before a reader that finds it.
        self.arrivals.store(p, Ordering::Release);
        // SAFETY: just leaked; lives as long as the shard.
        unsafe { &*p }
    }

    /// The arrival ring if this shard has made one (for readers).
    pub fn arrivals_if_any(&self) -> Option<&Ring> {
        // Acquire pairs with make_arrivals' Release: the ring is seen whole.
        let p = self.arrivals.load(Ordering::Acquire);
        // SAFETY: a published ring is freed only with the shard.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    pub fn count_bad_site(&self) {
        self.counters.bump(Counter::BadSite);
    }

    pub fn count_dropped(&self) {
        self.counters.bump(Counter::Dropped);
    }

    /// Every histogram published so far.
    pub fn histograms(&self) -> impl Iterator<Item = &KeyHistogram> {
        self.keys.iter().filter_map(|s| {
            let h = s.hist.load(Ordering::Acquire);
            // SAFETY: published histograms are never freed.
            (!h.is_null()).then(|| unsafe { &*h })
        })
    }

    pub fn counters(&self) -> Counters {
        self.counters.load()
    }

    /// Calls open now that were entered in run `epoch`; those of an earlier run (their thread
    /// ended, or their EXIT was never delivered) will never be recorded, and are counted as
    /// abandoned when a new run or a new owner clears them.
    pub fn in_flight(&self, epoch: u32) -> u64 {
        let d = self.depth.load(Ordering::Relaxed);
        if d > 0 && self.open_epoch.load(Ordering::Relaxed) == epoch {
            u64::from(d)
        } else {
            0
        }
    }
}

impl Drop for Shard {
    /// Shards in use are leaked (`claim`), so this runs only for shards a test owns: free the
    /// histograms they made.
    fn drop(&mut self) {
        for slot in self.keys.iter() {
            let p = slot.hist.swap(std::ptr::null_mut(), Ordering::Relaxed);
            if !p.is_null() {
                // SAFETY: `p` came from Box::into_raw in `insert` and, swapped out, is freed once.
                drop(unsafe { Box::from_raw(p) });
            }
        }
        let r = self.arrivals.swap(std::ptr::null_mut(), Ordering::Relaxed);
        if !r.is_null() {
            // SAFETY: `r` came from Box::into_raw in `make_arrivals` and, swapped out, is freed once.
            drop(unsafe { Box::from_raw(r) });
        }
    }
}

/// The name a library passed, copied (at most 255 bytes); NULL becomes "<null>".
pub(crate) fn name_of(p: *const c_char) -> String {
    if p.is_null() {
        return "<null>".to_owned();
    }
    // SAFETY: a real MSPTI passes a static NUL-terminated `__FUNCTION__` string here (the one
    // field besides callbackSite it always fills); we read it once, at a key's first sighting.
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    String::from_utf8_lossy(&bytes[..bytes.len().min(255)]).into_owned()
}

/// The newest shard; each links to the one made before it. Shards are pushed, never removed.
static REGISTRY: AtomicPtr<Shard> = AtomicPtr::new(std::ptr::null_mut());

/// Every shard ever created (for snapshots).
pub fn all_shards() -> Vec<&'static Shard> {
    let mut v = Vec::new();
    // Acquire pairs with the Release of the push: a shard is seen whole.
    let mut p = REGISTRY.load(Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: registry entries are leaked, process-lifetime shards.
        let s: &'static Shard = unsafe { &*p };
        v.push(s);
        p = s.next.load(Ordering::Relaxed);
    }
    v
}

/// Take a free shard or make one (no lock: a CAS on a free shard's flag, or a CAS push). Stale
/// open calls of a previous owner are abandoned.
fn claim() -> &'static Shard {
    for s in all_shards() {
        // Acquire pairs with the Release of `give_back`: the last owner's writes are seen.
        if s.in_use.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            let d = u64::from(s.depth.swap(0, Ordering::Relaxed));
            s.counters.add(Counter::Abandoned, d);
            return s;
        }
    }
    let s: &'static Shard = Box::leak(Box::new(Shard::new()));
    let mut head = REGISTRY.load(Ordering::Relaxed);
    loop {
        s.next.store(head, Ordering::Relaxed);
        // Release: the shard's initialisation happens before any reader that finds it.
        match REGISTRY.compare_exchange_weak(
            head,
            s as *const Shard as *mut Shard,
            Ordering::Release,
            Ordering::Relaxed,
        ) {
            Ok(_) => return s,
            Err(h) => head = h,
        }
    }
}

thread_local! {
    /// The hot path's view: a plain pointer with no destructor, so it is readable at any time,
    /// even while the thread's destructors run.
    static CURRENT: Cell<*const Shard> = const { Cell::new(std::ptr::null()) };
}

/// Threads whose shard could not be tied to a pthread key (calls not recorded).
pub static LATE_THREADS: AtomicU64 = AtomicU64::new(0);

extern "C" {
    fn pthread_key_create(key: *mut c_uint, destructor: Option<unsafe extern "C" fn(*mut c_void)>) -> c_int;
    fn pthread_key_delete(key: c_uint) -> c_int;
    fn pthread_setspecific(key: c_uint, value: *const c_void) -> c_int;
}

/// The pthread key whose destructor gives a thread's shard back (u32::MAX until created).
static OWNER_KEY: AtomicU32 = AtomicU32::new(u32::MAX);

/// Runs when a thread that holds a shard ends, including one that took its shard inside another
/// key's destructor (glibc runs destructors again for keys set during a round).
unsafe extern "C" fn give_back(p: *mut c_void) {
    CURRENT.with(|c| c.set(std::ptr::null()));
    // SAFETY: the value set for OWNER_KEY is always a leaked, process-lifetime shard.
    let s = unsafe { &*(p as *const Shard) };
    // Before the hand-back: a callback this thread makes later (another key's destructor) misses
    // the cache; the next owner's claim overwrites it anyway.
    s.owner.store(0, Ordering::Relaxed);
    // Release: this owner's writes happen before the next claimer's Acquire.
    s.in_use.store(false, Ordering::Release);
}

fn owner_key() -> Option<c_uint> {
    let k = OWNER_KEY.load(Ordering::Acquire);
    if k != u32::MAX {
        return Some(k);
    }
    let mut new: c_uint = 0;
    // SAFETY: a valid out pointer and a destructor with the C signature.
    if unsafe { pthread_key_create(&mut new, Some(give_back)) } != 0 {
        return None;
    }
    match OWNER_KEY.compare_exchange(u32::MAX, new, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(new),
        Err(theirs) => {
            // SAFETY: our key, never handed out.
            unsafe { pthread_key_delete(new) };
            Some(theirs)
        }
    }
}

/// Create the pthread key up front (session start), so a thread's first callback need not.
pub fn prepare() {
    let _ = owner_key();
}

/// This thread's shard, claiming one on the thread's first call.
#[inline(always)]
pub fn current() -> Option<&'static Shard> {
    existing().or_else(current_slow)
}

/// Shards by thread pointer, direct-mapped: the callback's way to its shard. A `thread_local!`
/// in a dlopen'ed library is a call to `__tls_get_addr` on every access (two per pair, ~10% of the
/// callback); the thread pointer is one instruction. An entry is only a hint: a shard is this
/// thread's when its `owner` is this thread's pointer (only an owner writes its own pointer
/// there, and clears it before giving the shard back, so no other live thread's shard can carry
/// it); a miss (empty, another thread's shard, a collision) falls back to `CURRENT` and refills
/// the entry. A forked child inherits the entries; a new thread of the child may then find the
/// shard of a parent thread that no longer exists and had its thread pointer: a shard no one else
/// can touch, which the child only pops calls from (it never records).
const BY_THREAD_SLOTS: usize = 256;
static BY_THREAD: [AtomicPtr<Shard>; BY_THREAD_SLOTS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; BY_THREAD_SLOTS];

/// This thread's pointer: on x86-64 Linux the word at %fs:0 (the thread control block's address,
/// which glibc and musl store there as THREAD_SELF); on aarch64 TPIDR_EL0. Unique among live
/// threads, never 0.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[inline(always)]
fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: on x86-64 Linux %fs:0 holds the thread control block's self-pointer, set before the
    // thread runs any code and readable by it at any time; the load has no side effects.
    unsafe {
        std::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags, pure))
    };
    tp
}

#[cfg(all(target_os = "linux", target_arch = "aarch64"))]
#[inline(always)]
fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: TPIDR_EL0 is readable at EL0 and holds the thread pointer the C library set.
    unsafe {
        std::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nomem, nostack, preserves_flags, pure))
    };
    tp
}

/// Elsewhere: no cache (every lookup misses, and goes through `CURRENT`).
#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
#[inline(always)]
fn thread_pointer() -> usize {
    0
}

#[inline(always)]
fn by_thread(tp: usize) -> &'static AtomicPtr<Shard> {
    // Fibonacci hashing; thread control blocks lie a stack apart, so neighbours spread.
    let i =
        ((tp as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - BY_THREAD_SLOTS.trailing_zeros())) as usize;
    // SAFETY: i < BY_THREAD_SLOTS, the shift keeps log2(BY_THREAD_SLOTS) bits.
    unsafe { BY_THREAD.get_unchecked(i) }
}

/// This thread's shard if it has one; never claims (the callback's path while not recording).
#[inline(always)]
pub fn existing() -> Option<&'static Shard> {
    let tp = thread_pointer();
    // Acquire pairs with the Release of `remember`: the shard it points to is seen whole.
    let p = by_thread(tp).load(Ordering::Acquire);
    // SAFETY: the cache only holds pointers to leaked, process-lifetime shards.
    // No test of tp against 0: where `thread_pointer` is 0 (no cache), `remember` never fills an
    // entry, so p is null.
    if !p.is_null() && unsafe { (*p).owner.load(Ordering::Relaxed) } == tp {
        // SAFETY: as above.
        return Some(unsafe { &*p });
    }
    existing_slow(tp)
}

#[cold]
#[inline(never)]
fn existing_slow(tp: usize) -> Option<&'static Shard> {
    let p = CURRENT.with(|c| c.get());
    if p.is_null() {
        return None;
    }
    // SAFETY: CURRENT only holds pointers to leaked, process-lifetime shards.
    let s = unsafe { &*p };
    remember(tp, s);
    Some(s)
}

/// Make `s`, this thread's shard, what the cache finds for it.
fn remember(tp: usize, s: &'static Shard) {
    if tp == 0 {
        return;
    }
    s.owner.store(tp, Ordering::Relaxed);
    // Release: a thread that loads this entry sees the shard initialised.
    by_thread(tp).store(s as *const Shard as *mut Shard, Ordering::Release);
}

/// Claim a shard for this thread, which has none (`existing` found none): `current`'s slow path,
/// and the callback's on a thread's first call.
#[cold]
pub fn current_slow() -> Option<&'static Shard> {
    let Some(key) = owner_key() else {
        LATE_THREADS.fetch_add(1, Ordering::Relaxed);
        return None;
    };
    let s = claim();
    // SAFETY: a key we created; the value is a process-lifetime shard.
    if unsafe { pthread_setspecific(key, s as *const Shard as *const c_void) } != 0 {
        s.in_use.store(false, Ordering::Release);
        LATE_THREADS.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    CURRENT.with(|c| c.set(s));
    remember(thread_pointer(), s);
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(cbid: u32) -> RawKey {
        RawKey::new(1, cbid, c"aclrtLaunchKernel".as_ptr() as usize)
    }

    #[test]
    fn nested_calls_pair_innermost_first() {
        let s = Shard::new();
        s.enter(key(10), 100, Stamp::new(1, 0));
        s.enter(key(22), 150, Stamp::new(1, 0));
        assert_eq!(s.exit(key(22), Stamp::new(1, 0), true), Some(150));
        assert_eq!(s.exit(key(10), Stamp::new(1, 0), true), Some(100));
        assert_eq!(s.counters(), Counters::default());
    }

    #[test]
    fn exit_without_enter_is_counted_not_guessed() {
        let s = Shard::new();
        assert_eq!(s.exit(key(10), Stamp::new(1, 0), true), None);
        s.enter(key(10), 5, Stamp::new(1, 0));
        assert_eq!(s.exit(key(22), Stamp::new(1, 0), true), None);
        assert_eq!(s.in_flight(1), 1);
        assert_eq!(s.counters()[Counter::Unmatched], 2);
    }

    #[test]
    fn an_enter_of_an_earlier_run_is_abandoned() {
        let s = Shard::new();
        s.enter(key(10), 5, Stamp::new(1, 0));
        assert_eq!(s.exit(key(10), Stamp::new(2, 0), true), None);
        assert_eq!(s.counters()[Counter::Abandoned], 1);
        assert_eq!(s.in_flight(1), 0);
    }

    #[test]
    fn a_new_run_abandons_the_open_calls_of_the_last() {
        let s = Shard::new();
        s.enter(key(10), 5, Stamp::new(1, 0));
        s.enter(key(22), 6, Stamp::new(1, 0));
        s.enter(key(10), 7, Stamp::new(2, 0));
        assert_eq!(s.counters()[Counter::Abandoned], 2);
        assert_eq!((s.in_flight(1), s.in_flight(2)), (0, 1));
        assert_eq!(s.exit(key(10), Stamp::new(2, 0), true), Some(7));
    }

    #[test]
    fn open_calls_of_an_earlier_run_are_not_in_flight_in_a_later_one() {
        // Their thread ended, or their EXITs were never delivered: a later run never sees them
        // close, so counting them as in flight there would be a lie.
        let s = Shard::new();
        s.enter(key(10), 5, Stamp::new(1, 0));
        s.enter(key(22), 6, Stamp::new(1, 0));
        assert_eq!((s.in_flight(1), s.in_flight(3)), (2, 0));
    }

    #[test]
    fn an_exit_below_the_top_abandons_the_calls_above_it() {
        let s = Shard::new();
        s.enter(key(10), 100, Stamp::new(1, 0));
        s.enter(key(22), 150, Stamp::new(1, 0)); // its EXIT is lost
        s.enter(key(24), 160, Stamp::new(1, 0)); // and this one's
        assert_eq!(s.exit(key(10), Stamp::new(1, 0), true), Some(100));
        assert_eq!(s.counters()[Counter::Orphaned], 2);
        assert_eq!(s.in_flight(1), 0);
        assert_eq!(s.counters()[Counter::Unmatched], 0);
    }

    #[test]
    fn overflowing_the_stack_is_counted() {
        let s = Shard::new();
        for i in 0..(STACK_DEPTH + 3) {
            s.enter(key(10), i as u64, Stamp::new(1, 0));
        }
        assert_eq!(s.counters()[Counter::StackFull], 3);
        assert_eq!(s.in_flight(1), STACK_DEPTH as u64);
    }

    #[test]
    fn shards_and_histograms_share_no_cache_line_with_other_threads() {
        // Every block a thread writes on the hot path starts on a 128-byte boundary and is a
        // whole number of 128-byte blocks long (x86 prefetches adjacent lines in pairs).
        assert_eq!(std::mem::align_of::<Shard>(), 128);
        assert_eq!(std::mem::size_of::<Shard>() % 128, 0);
        let shards: Vec<&'static Shard> = (0..4)
            .map(|_| {
                std::thread::spawn(|| current().map(|s| s as *const Shard as usize)).join().unwrap().unwrap()
            })
            // SAFETY: shards are leaked, process-lifetime objects; the address came from one.
            .map(|p| unsafe { &*(p as *const Shard) })
            .collect();
        for s in &shards {
            assert_eq!(*s as *const Shard as usize % 128, 0);
        }
        // Histograms: see hist::tests::atomic_histograms_are_cache_line_isolated.
        let own = Shard::new();
        let h = own.histogram(key(10)).unwrap();
        assert_eq!(&*h.hist as *const _ as usize % 128, 0);
    }

    #[test]
    fn a_new_thread_never_finds_an_ended_threads_shard() {
        // glibc reuses an ended thread's stack, and with it its thread pointer, for the next
        // thread: the cache entry it left must not hand that thread a shard it never claimed.
        let addr = |s: Option<&'static Shard>| s.map(|s| s as *const Shard as usize);
        for _ in 0..4 {
            let (mine, found_again) =
                std::thread::spawn(move || (addr(current()), addr(existing()))).join().unwrap();
            assert!(mine.is_some());
            assert_eq!(found_again, mine);
            assert_eq!(std::thread::spawn(move || addr(existing())).join().unwrap(), None);
        }
    }

    #[test]
    fn keys_are_found_again_and_a_full_table_drops() {
        let s = Shard::new();
        let names: Vec<std::ffi::CString> =
            (0..KEY_LIMIT + 10).map(|i| std::ffi::CString::new(format!("f{i}")).unwrap()).collect();
        for (i, n) in names.iter().enumerate() {
            let k = RawKey::new(2, 1, n.as_ptr() as usize);
            assert_eq!(s.histogram(k).is_some(), i < KEY_LIMIT, "key {i}");
        }
        assert_eq!(s.histograms().count(), KEY_LIMIT);
        assert_eq!(s.counters()[Counter::Dropped], 10);
        let k = RawKey::new(2, 1, names[7].as_ptr() as usize);
        assert_eq!(s.histogram(k).unwrap().name, "f7");
    }

    #[test]
    fn a_full_key_table_finds_absent_keys_in_a_few_probes() {
        // The table is at most half full, so the walk from any slot to an empty one is short:
        // the longest run of occupied slots bounds every lookup of an absent key.
        let s = Shard::new();
        let names: Vec<std::ffi::CString> =
            (0..KEY_LIMIT).map(|i| std::ffi::CString::new(format!("api{i}")).unwrap()).collect();
        for n in &names {
            s.histogram(RawKey::new(1, 3, n.as_ptr() as usize)).unwrap();
        }
        let used: Vec<bool> = s.keys.iter().map(|k| !k.hist.load(Ordering::Relaxed).is_null()).collect();
        let (mut run, mut longest) = (0, 0);
        for &u in used.iter().chain(used.iter()) {
            run = if u { run + 1 } else { 0 };
            longest = longest.max(run);
        }
        assert!(longest < KEY_SLOTS / 8, "a run of {longest} occupied slots");
    }

    #[test]
    fn a_pairing_across_a_toggle_of_its_id_is_discarded_and_counted() {
        let s = Shard::new();
        let k = key(10);
        s.enter(k, 100, Stamp::new(1, 7)); // its EXIT is never delivered: the id is disabled and re-enabled
        crate::core::toggles::mark(k.domain(), Some(k.cbid()), 9);
        // ... and the EXIT of a later call arrives (generation 7 -> 9).
        assert_eq!(s.exit(k, Stamp::new(1, 9), true), None);
        assert_eq!(s.counters()[Counter::Toggled], 1);
        assert_eq!(s.in_flight(1), 0);
        s.enter(key(10), 200, Stamp::new(1, 9));
        assert_eq!(s.exit(key(10), Stamp::new(1, 9), true), Some(200));
    }

    #[test]
    fn a_toggle_of_another_id_keeps_the_pairing() {
        let s = Shard::new();
        let k = key(11);
        s.enter(k, 100, Stamp::new(1, 19));
        crate::core::toggles::mark(k.domain(), Some(12), 20);
        assert_eq!(s.exit(k, Stamp::new(1, 20), true), Some(100));
        assert_eq!(s.counters()[Counter::Toggled], 0);
    }
}
