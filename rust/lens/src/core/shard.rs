//! Per-thread shards: each thread that makes calls owns one, with its ENTER stack and one
//! histogram per (domain, cbid, function) it has seen. Only the owner writes; snapshots read
//! every shard at any time. Shards live for the whole process (a callback may still run after
//! unsubscribe), and a thread that ends hands its shard, counts included, to the next new thread,
//! so thousands of short-lived threads cost no more memory than the most alive at once.

use std::cell::{Cell, UnsafeCell};
use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use super::counters::{AtomicCounters, Counter, Counters};
use super::hist::AtomicHistogram;

/// Open calls a thread may nest; deeper ENTERs are counted as stack_full.
pub const STACK_DEPTH: usize = 64;
/// Distinct (domain, cbid, function) keys per thread; more are dropped and counted.
pub const KEY_SLOTS: usize = 256;

/// Identity of an API as the callback sees it: the name pointer is a static string in the
/// library, so its address is a cheap key (DESIGN.md fact 5).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RawKey {
    pub domain: u32,
    pub cbid: u32,
    pub name: usize,
}

impl RawKey {
    #[inline(always)]
    fn tag(&self) -> u64 {
        (u64::from(self.domain) << 32) | u64::from(self.cbid)
    }
    /// A slot index < KEY_SLOTS: one multiply of name, cbid and domain mixed (Fibonacci hashing;
    /// the top bits of the product depend on every input bit).
    #[inline(always)]
    fn hash(&self) -> usize {
        let h = (self.name as u64 ^ (u64::from(self.cbid) << 48) ^ (u64::from(self.domain) << 56))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> 56) as usize % KEY_SLOTS
    }
}

/// A key's histogram and the name it was first seen with, copied out of the library.
pub struct KeyHistogram {
    pub domain: u32,
    pub cbid: u32,
    pub name: String,
    pub hist: Box<AtomicHistogram>,
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
    epoch: u32,
}

/// Aligned to 128 bytes (and so a multiple of 128 long): no cache line of a shard, which its
/// owner writes on every call, is shared with another thread's data.
#[repr(align(128))]
pub struct Shard {
    in_use: AtomicBool,
    /// Open calls now (owner writes, snapshots read for "in flight").
    depth: AtomicU32,
    stack: UnsafeCell<[Open; STACK_DEPTH]>,
    /// Open-addressed by `RawKey::hash`; inline, so a lookup is one load from the shard.
    keys: [KeySlot; KEY_SLOTS],
    counters: AtomicCounters,
}

// SAFETY: `stack` is only touched by the shard's current owner thread (ownership passes through
// the registry mutex); everything else is atomics or immutable after publication.
unsafe impl Sync for Shard {}

impl Shard {
    fn new() -> Shard {
        Shard {
            in_use: AtomicBool::new(true),
            depth: AtomicU32::new(0),
            stack: UnsafeCell::new(
                [Open { key: RawKey { domain: 0, cbid: 0, name: 0 }, start: 0, epoch: 0 }; STACK_DEPTH],
            ),
            keys: [const {
                KeySlot {
                    tag: AtomicU64::new(0),
                    name: AtomicU64::new(0),
                    hist: AtomicPtr::new(std::ptr::null_mut()),
                }
            }; KEY_SLOTS],
            counters: AtomicCounters::new(),
        }
    }

    /// ENTER: remember when this call began.
    #[inline(always)]
    pub fn enter(&self, key: RawKey, start: u64, epoch: u32) {
        let mut d = self.depth.load(Ordering::Relaxed) as usize;
        // SAFETY: only the owner thread reaches here; d - 1 < STACK_DEPTH when d > 0.
        if d > 0 && unsafe { (*self.stack.get())[d - 1].epoch } != epoch {
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
        // SAFETY: only the owner thread reaches here, and d < STACK_DEPTH.
        unsafe { (*self.stack.get())[d] = Open { key, start, epoch } };
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
    /// An ENTER of an earlier run (`epoch` differs) is popped and counted as abandoned.
    #[inline(always)]
    pub fn exit(&self, key: RawKey, epoch: u32, count_unmatched: bool) -> Option<u64> {
        let d = self.depth.load(Ordering::Relaxed) as usize;
        if d == 0 {
            if count_unmatched {
                self.counters.bump(Counter::Unmatched);
            }
            return None;
        }
        // SAFETY: only the owner thread reaches here, and 0 < d <= STACK_DEPTH.
        let mut top = unsafe { (*self.stack.get())[d - 1] };
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
        if top.epoch != epoch {
            self.counters.bump(Counter::Abandoned);
            return None;
        }
        Some(top.start)
    }

    /// The histogram of `key` on this thread, created on first sight (the only allocation).
    #[inline(always)]
    pub fn histogram(&self, key: RawKey) -> Option<&KeyHistogram> {
        let tag = key.tag();
        let mut i = key.hash();
        for _ in 0..KEY_SLOTS {
            // SAFETY: i < KEY_SLOTS always: hash() is reduced modulo KEY_SLOTS, and so is every
            // step below.
            let slot = unsafe { self.keys.get_unchecked(i) };
            let h = slot.hist.load(Ordering::Acquire);
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
        self.counters.bump(Counter::Dropped);
        None
    }

    #[cold]
    fn insert(&self, slot: &KeySlot, key: RawKey) -> Option<&KeyHistogram> {
        let kh = Box::new(KeyHistogram {
            domain: key.domain,
            cbid: key.cbid,
            name: name_of(key.name as *const c_char),
            hist: AtomicHistogram::new(),
        });
        slot.tag.store(key.tag(), Ordering::Relaxed);
        slot.name.store(key.name as u64, Ordering::Relaxed);
        let p = Box::into_raw(kh);
        slot.hist.store(p, Ordering::Release);
        // SAFETY: just leaked; lives for the process.
        Some(unsafe { &*p })
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

    pub fn in_flight(&self) -> u64 {
        u64::from(self.depth.load(Ordering::Relaxed))
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
    }
}

/// The name a library passed, copied (at most 255 bytes); NULL becomes "<null>".
fn name_of(p: *const c_char) -> String {
    if p.is_null() {
        return "<null>".to_owned();
    }
    // SAFETY: a real MSPTI passes a static NUL-terminated `__FUNCTION__` string here (the one
    // field besides callbackSite it always fills); we read it once, at a key's first sighting.
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    String::from_utf8_lossy(&bytes[..bytes.len().min(255)]).into_owned()
}

static REGISTRY: Mutex<Vec<&'static Shard>> = Mutex::new(Vec::new());

/// Every shard ever created (for snapshots).
pub fn all_shards() -> Vec<&'static Shard> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Take a free shard or make one. Stale open calls of a previous owner are abandoned.
fn claim() -> &'static Shard {
    let mut reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    for s in reg.iter() {
        if s.in_use.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            let d = u64::from(s.depth.swap(0, Ordering::Relaxed));
            s.counters.add(Counter::Abandoned, d);
            return s;
        }
    }
    let s: &'static Shard = Box::leak(Box::new(Shard::new()));
    reg.push(s);
    s
}

struct ShardOwner(Cell<Option<&'static Shard>>);

impl Drop for ShardOwner {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(std::ptr::null()));
        if let Some(s) = self.0.get() {
            s.in_use.store(false, Ordering::Release);
        }
    }
}

thread_local! {
    /// The hot path's view: a plain pointer with no destructor, readable at any time.
    static CURRENT: Cell<*const Shard> = const { Cell::new(std::ptr::null()) };
    /// Owns the claim and gives the shard back when the thread ends.
    static OWNER: ShardOwner = const { ShardOwner(Cell::new(None)) };
}

/// Threads that called back while their thread-locals were being torn down (not recorded).
pub static LATE_THREADS: AtomicU64 = AtomicU64::new(0);

/// This thread's shard, claiming one on the thread's first call.
#[inline(always)]
pub fn current() -> Option<&'static Shard> {
    let p = CURRENT.with(|c| c.get());
    if !p.is_null() {
        // SAFETY: CURRENT only holds pointers to leaked, process-lifetime shards.
        return Some(unsafe { &*p });
    }
    current_slow()
}

#[cold]
fn current_slow() -> Option<&'static Shard> {
    // A thread past its thread-local teardown cannot give a shard back: do not take one.
    let ok = OWNER.try_with(|_| ()).is_ok();
    if !ok {
        LATE_THREADS.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    let s = claim();
    if OWNER.try_with(|o| o.0.set(Some(s))).is_err() {
        s.in_use.store(false, Ordering::Release);
        return None;
    }
    CURRENT.with(|c| c.set(s));
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(cbid: u32) -> RawKey {
        RawKey { domain: 1, cbid, name: c"aclrtLaunchKernel".as_ptr() as usize }
    }

    #[test]
    fn nested_calls_pair_innermost_first() {
        let s = Shard::new();
        s.enter(key(10), 100, 1);
        s.enter(key(22), 150, 1);
        assert_eq!(s.exit(key(22), 1, true), Some(150));
        assert_eq!(s.exit(key(10), 1, true), Some(100));
        assert_eq!(s.counters(), Counters::default());
    }

    #[test]
    fn exit_without_enter_is_counted_not_guessed() {
        let s = Shard::new();
        assert_eq!(s.exit(key(10), 1, true), None);
        s.enter(key(10), 5, 1);
        assert_eq!(s.exit(key(22), 1, true), None);
        assert_eq!(s.in_flight(), 1);
        assert_eq!(s.counters()[Counter::Unmatched], 2);
    }

    #[test]
    fn an_enter_of_an_earlier_run_is_abandoned() {
        let s = Shard::new();
        s.enter(key(10), 5, 1);
        assert_eq!(s.exit(key(10), 2, true), None);
        assert_eq!(s.counters()[Counter::Abandoned], 1);
        assert_eq!(s.in_flight(), 0);
    }

    #[test]
    fn a_new_run_abandons_the_open_calls_of_the_last() {
        let s = Shard::new();
        s.enter(key(10), 5, 1);
        s.enter(key(22), 6, 1);
        s.enter(key(10), 7, 2);
        assert_eq!(s.counters()[Counter::Abandoned], 2);
        assert_eq!(s.in_flight(), 1);
        assert_eq!(s.exit(key(10), 2, true), Some(7));
    }

    #[test]
    fn an_exit_below_the_top_abandons_the_calls_above_it() {
        let s = Shard::new();
        s.enter(key(10), 100, 1);
        s.enter(key(22), 150, 1); // its EXIT is lost
        s.enter(key(24), 160, 1); // and this one's
        assert_eq!(s.exit(key(10), 1, true), Some(100));
        assert_eq!(s.counters()[Counter::Orphaned], 2);
        assert_eq!(s.in_flight(), 0);
        assert_eq!(s.counters()[Counter::Unmatched], 0);
    }

    #[test]
    fn overflowing_the_stack_is_counted() {
        let s = Shard::new();
        for i in 0..(STACK_DEPTH + 3) {
            s.enter(key(10), i as u64, 1);
        }
        assert_eq!(s.counters()[Counter::StackFull], 3);
        assert_eq!(s.in_flight(), STACK_DEPTH as u64);
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
    fn keys_are_found_again_and_a_full_table_drops() {
        let s = Shard::new();
        let names: Vec<std::ffi::CString> =
            (0..KEY_SLOTS + 1).map(|i| std::ffi::CString::new(format!("f{i}")).unwrap()).collect();
        for n in &names {
            let k = RawKey { domain: 2, cbid: 1, name: n.as_ptr() as usize };
            let h = s.histogram(k);
            assert!(h.is_some() || s.counters()[Counter::Dropped] == 1);
        }
        assert_eq!(s.histograms().count(), KEY_SLOTS);
        let k = RawKey { domain: 2, cbid: 1, name: names[7].as_ptr() as usize };
        assert_eq!(s.histogram(k).unwrap().name, "f7");
    }
}
