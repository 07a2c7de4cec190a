//! What the activity side does inside the callback, called once per callback from `callback.rs`
//! (`around`). Off by default: then it is one relaxed load and a branch.
//!
//! - Spans: each launch's ENTER and EXIT time on the activity clock (MSPTI's `msptiGetTimestamp`
//!   where present, else CLOCK_REALTIME, the clock activity records use), with the OS thread id,
//!   in a per-thread ring the drain thread reads: the host side of the host-device join.
//! - Marks (`mark_launches`, the guide's scenario 2): `mstxMarkA(functionName, stream)` at ENTER
//!   before the callback's clock, and at EXIT after it, so the marks' cost stays outside the
//!   measured window.
//! - External correlation (CANN 8.x, no RUNTIME_API records): push (CUSTOM2, span id) at ENTER
//!   and pop with a real out pointer at EXIT (a NULL pop fails and leaves the id pushed). The
//!   stack is process-global, so a span that overlapped another pushed span is flagged.
//!
//! Writers are the calling threads (single writer per ring); the rings are leaked and reused by
//! later threads, as shards are.

use std::cell::Cell;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::core::locks::lock;

use mspti_abi::MSPTI_CB_DOMAIN_RUNTIME;

use super::layout::{FnPopExternal, FnPushExternal, EXTERNAL_CUSTOM2};
use super::loom_atomics::AtomicU64 as GateU64;

pub const SPANS: u8 = 1;
pub const MARKS: u8 = 2;
pub const EXTERNAL: u8 = 4;

/// The hooks that are on, and the sampled join's window generation, in one word (hooks in the
/// low 8 bits, the generation above): what `around` reads and the collector (`configure`) and
/// the drain's sample windows (`open_window`, `close_window`) write.
///
/// The window protocol (a sampled RUNTIME_API join): the drain opens a window by adding one
/// generation and SPANS in one step, and closes it by clearing SPANS. An ENTER that sees SPANS
/// notes the generation read with it in its thread's `Mine`; its EXIT logs the span only if it
/// still sees SPANS with the same generation. One word, because two would let an ENTER read
/// window 1's SPANS with window 2's generation (the drain closing and reopening between its two
/// loads: a preemption does it on any CPU), and then pair with a later launch's EXIT in window
/// 2 (the loom model found it). In one word, reads of one thread follow the word's order: an
/// EXIT that saw the window closed can only see SPANS again with a newer generation.
pub(crate) struct Gate {
    word: GateU64,
}

const HOOK_BITS: u64 = 0xff;
const GENERATION: u64 = 1 << 8;

impl Gate {
    #[cfg(not(loom))]
    const fn new() -> Gate {
        Gate { word: GateU64::new(0) }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Gate {
        Gate { word: GateU64::new(0) }
    }

    /// Open a sample window: a new generation and SPANS on, in one step (SPANS is off: the
    /// drain opens only a closed window, and the sampled join's hooks never hold SPANS).
    pub(crate) fn open(&self) {
        let was = self.word.fetch_add(GENERATION | u64::from(SPANS), Ordering::AcqRel);
        debug_assert_eq!(hooks_of(was) & SPANS, 0, "a window opened twice");
    }

    /// Close the window: SPANS off (the generation stays until the next open).
    pub(crate) fn close(&self) {
        self.word.fetch_and(!u64::from(SPANS), Ordering::AcqRel);
    }

    /// The word as `around` reads it: hooks (`hooks_of`) and generation together.
    #[inline(always)]
    pub(crate) fn read(&self) -> u64 {
        self.word.load(Ordering::Acquire)
    }

    /// The hooks with one relaxed load (`wanted`).
    #[inline(always)]
    fn hooks_relaxed(&self) -> u8 {
        (self.word.load(Ordering::Relaxed) & HOOK_BITS) as u8
    }

    /// Set the hooks, keeping the generation.
    fn set_hooks(&self, hooks: u8) {
        let _ = self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |w| Some((w & !HOOK_BITS) | u64::from(hooks)));
    }
}

/// The hooks of a gate word.
#[inline(always)]
pub(crate) fn hooks_of(word: u64) -> u8 {
    (word & HOOK_BITS) as u8
}

/// The generation of a gate word.
#[inline(always)]
pub(crate) fn generation_of(word: u64) -> u64 {
    word >> 8
}

#[cfg(not(loom))]
static GATE: Gate = Gate::new();

#[cfg(not(loom))]
#[inline(always)]
fn gate() -> &'static Gate {
    &GATE
}

/// In model builds the gate's atomics are loom's (not const): made on first use; the model tests
/// make their own.
#[cfg(loom)]
fn gate() -> &'static Gate {
    static G: std::sync::OnceLock<Gate> = std::sync::OnceLock::new();
    G.get_or_init(Gate::new)
}

/// Open a sample window of the sampled join (the drain, after enabling RUNTIME_API): launches
/// whose ENTER and EXIT both fall in it log their span.
pub fn open_window() {
    gate().open();
}

/// Close the sample window (the drain, before disabling RUNTIME_API).
pub fn close_window() {
    gate().close();
}

/// Callback ids whose spans are logged: the launch family (LAUNCH .. FFTS_LAUNCH).
pub const LAUNCH_FIRST: u32 = 10;
pub const LAUNCH_LAST: u32 = 14;

/// Whether a runtime-domain enable mask (bit n: callback id n) holds a launch callback: the
/// callbacks whose spans the join needs.
pub fn traces_launches(runtime_mask: u64) -> bool {
    (LAUNCH_FIRST..=LAUNCH_LAST).any(|c| runtime_mask >> c & 1 != 0)
}

/// Spans a thread's ring holds before the oldest is overwritten (8 MiB, its pages touched only
/// as spans fill them, so a thread that launched less holds less; rings are reused by later
/// threads). The drain reads them every few ms (sooner while a thread launches fast:
/// `drain::next_poll`), so this only matters when the drain is starved: at 2.4 million launches
/// per second (a simulated training step on the virtual clock) a ring lasts about 110 ms, time
/// for the drain to get a core on a loaded 2-core machine. A quarter of that (27 ms) lost spans
/// in 2 of 10 such processes there, each overwritten before the drain was scheduled.
pub const RING: usize = 1 << 18;
/// Threads with rings at once; more threads' launches are counted as not logged.
pub const MAX_RINGS: usize = 4096;

static TIMESTAMP: AtomicUsize = AtomicUsize::new(0);
static MARK_FN: AtomicUsize = AtomicUsize::new(0);
static PUSH_FN: AtomicUsize = AtomicUsize::new(0);
static POP_FN: AtomicUsize = AtomicUsize::new(0);
/// Launch spans with an external id pushed now, and a count of ENTERs that found one open.
static PUSHED_OPEN: AtomicU32 = AtomicU32::new(0);
static OVERLAP_EPOCH: AtomicU64 = AtomicU64::new(0);
/// Launches not logged: no ring could be had for the thread (counted at their ENTER).
pub static UNLOGGED: AtomicU64 = AtomicU64::new(0);
/// Marks that could not be made (no `mstxMarkA`).
pub static MARK_FAILURES: AtomicU64 = AtomicU64::new(0);

pub type FnMark = unsafe extern "C" fn(message: *const c_char, stream: *mut c_void);
type FnTimestamp = unsafe extern "C" fn(*mut u64) -> u32;

/// Spans' meta word: tid in the high 32 bits, cbid in bits 0..8, flags above.
pub const FLAG_OVERLAPPED: u64 = 1 << 8;

pub struct SpanSlot {
    pub name: AtomicU64,
    pub meta: AtomicU64,
    pub enter: AtomicU64,
    pub exit: AtomicU64,
}

pub struct Ring {
    pub head: AtomicU64,
    in_use: AtomicBool,
    pub slots: [SpanSlot; RING],
}

static RINGS: Mutex<Vec<&'static Ring>> = Mutex::new(Vec::new());
/// Rings made so far (readers index them without the mutex through `rings()`).
static RING_COUNT: AtomicUsize = AtomicUsize::new(0);

/// The rings, in registry order (index = ring id in external correlation ids).
pub fn rings() -> Vec<&'static Ring> {
    lock(&RINGS).clone()
}

/// How many rings `rings` would return now, without its lock (the registry only grows): a
/// reader fetches the rings again only when this passed its copy.
pub fn ring_count() -> usize {
    RING_COUNT.load(Ordering::Acquire)
}

struct Mine {
    ring: Cell<Option<&'static Ring>>,
    index: Cell<u32>,
    tid: Cell<u32>,
    enter: Cell<u64>,
    overlap: Cell<u64>,
    pushed: Cell<bool>,
    /// An ENTER was logged and its EXIT not yet (a timestamp of 0 is a valid reading).
    open: Cell<bool>,
    /// The window generation the logged ENTER saw (`Gate`).
    gen: Cell<u64>,
}

struct Release;
impl Drop for Release {
    fn drop(&mut self) {
        let _ = MINE.try_with(|m| {
            if let Some(r) = m.ring.take() {
                r.in_use.store(false, Ordering::Release);
            }
        });
    }
}

thread_local! {
    static MINE: Mine = const {
        Mine { ring: Cell::new(None), index: Cell::new(0), tid: Cell::new(0), enter: Cell::new(0),
               overlap: Cell::new(0), pushed: Cell::new(false), open: Cell::new(false),
               gen: Cell::new(0) }
    };
    static RELEASE: Release = const { Release };
}

extern "C" {
    fn gettid() -> i32;
}

/// This thread's OS id (what MSPTI records as `pt.threadId`).
pub fn os_tid() -> u32 {
    // SAFETY: gettid has no preconditions (glibc >= 2.30).
    unsafe { gettid() as u32 }
}

fn claim() -> Option<(&'static Ring, u32)> {
    let mut all = lock(&RINGS);
    for (i, r) in all.iter().enumerate() {
        if r.in_use.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            return Some((r, i as u32));
        }
    }
    if all.len() >= MAX_RINGS {
        return None;
    }
    let r: &'static Ring = new_ring()?;
    r.in_use.store(true, Ordering::Relaxed);
    all.push(r);
    RING_COUNT.store(all.len(), Ordering::Release);
    Some((r, all.len() as u32 - 1))
}

/// A zeroed ring, leaked: an anonymous mapping (never built on the stack: it is 8 MiB, more than
/// a thread's stack may hold) whose pages are touched only as spans fill them, so a thread that
/// launched a few times holds a few pages, not 8 MiB (a process may have many launching threads).
/// Filling a whole ring costs its thread about 2,048 page faults once (~5 ms); after that the
/// pages stay. None when the mapping cannot be had (that thread's launches are counted as not
/// logged).
fn new_ring() -> Option<&'static Ring> {
    let size = std::mem::size_of::<Ring>();
    // SAFETY: an anonymous private mapping (no file, no address hint), checked for failure.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the mapping is page-aligned (more than Ring's alignment), `size` bytes long,
    // zero-filled, and never unmapped, so the reference is 'static; all-zero bytes are a valid
    // Ring (it holds only atomics: AtomicU64 and AtomicBool of 0 / false).
    Some(unsafe { &*p.cast::<Ring>() })
}

fn my_ring(m: &Mine) -> Option<(&'static Ring, u32)> {
    if let Some(r) = m.ring.get() {
        return Some((r, m.index.get()));
    }
    let (r, i) = claim()?;
    m.ring.set(Some(r));
    m.index.set(i);
    m.tid.set(os_tid());
    // Registers the destructor that returns the ring when the thread ends.
    let _ = RELEASE.try_with(|_| ());
    Some((r, i))
}

/// The activity clock now, in ns.
#[inline]
pub fn activity_now() -> u64 {
    let f = TIMESTAMP.load(Ordering::Relaxed);
    if f != 0 {
        // SAFETY: TIMESTAMP only holds a `msptiGetTimestamp` of a library that is never unloaded.
        let f: FnTimestamp = unsafe { std::mem::transmute::<usize, FnTimestamp>(f) };
        let mut t = 0u64;
        // SAFETY: a valid out pointer.
        if unsafe { f(&mut t) } == 0 {
            return t;
        }
    }
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Use the library's `msptiGetTimestamp` (or, with None, CLOCK_REALTIME) as the activity clock.
pub fn set_timestamp(f: Option<FnTimestamp>) {
    TIMESTAMP.store(f.map_or(0, |f| f as usize), Ordering::Relaxed);
}

/// Set the hooks: which are on, the mark function, the push/pop functions.
pub fn configure(hooks: u8, mark: Option<FnMark>, push: Option<FnPushExternal>, pop: Option<FnPopExternal>) {
    MARK_FN.store(mark.map_or(0, |f| f as usize), Ordering::Relaxed);
    PUSH_FN.store(push.map_or(0, |f| f as usize), Ordering::Relaxed);
    POP_FN.store(pop.map_or(0, |f| f as usize), Ordering::Relaxed);
    gate().set_hooks(hooks);
}

pub fn hooks() -> u8 {
    hooks_of(gate().read())
}

/// The external id of the span a ring will write next.
#[inline]
pub fn external_id(ring: u32, seq: u64) -> u64 {
    (u64::from(ring) << 40) | (seq & ((1 << 40) - 1))
}

/// Whether this callback has hooks to run (`around`): one relaxed load and a branch when off.
#[inline(always)]
pub fn wanted(domain: u32, cbid: u32) -> bool {
    gate().hooks_relaxed() != 0
        && domain == MSPTI_CB_DOMAIN_RUNTIME
        && (LAUNCH_FIRST..=LAUNCH_LAST).contains(&cbid)
}

/// The callback's own work, as `around` calls it: (domain, cbid, site, name).
pub type Work = fn(u32, u32, u32, usize);

/// Run the callback's own work `f` with the activity hooks around it (when `wanted`). Out of
/// line, and `f` a function pointer, so the common path inlines the work and nothing of this.
// Everything here runs before the callback's ENTER clock and after its EXIT clock (`f`), so
// the hooks' own cost stays outside the window the histograms measure; the span brackets it.
#[inline(never)]
pub fn around(userdata: usize, domain: u32, cbid: u32, site: u32, name: usize, f: Work) {
    let word = gate().read();
    let hooks = hooks_of(word);
    let f = || f(domain, cbid, site, name);
    match site {
        mspti_abi::MSPTI_API_ENTER => {
            if hooks & MARKS != 0 {
                mark(name, userdata);
            }
            if hooks & (SPANS | EXTERNAL) != 0 {
                let _ = MINE.try_with(|m| {
                    let Some((r, idx)) = my_ring(m) else {
                        UNLOGGED.fetch_add(1, Ordering::Relaxed);
                        return;
                    };
                    if hooks & EXTERNAL != 0 && !m.pushed.replace(true) {
                        let before = PUSHED_OPEN.fetch_add(1, Ordering::AcqRel);
                        if before > 0 {
                            OVERLAP_EPOCH.fetch_add(1, Ordering::AcqRel);
                        }
                        m.overlap.set(OVERLAP_EPOCH.load(Ordering::Acquire) | u64::from(before > 0) << 63);
                        push(external_id(idx, r.head.load(Ordering::Relaxed)));
                    }
                    m.gen.set(generation_of(word));
                    m.enter.set(activity_now());
                    m.open.set(true);
                });
            }
            f();
        }
        mspti_abi::MSPTI_API_EXIT => {
            f();
            if hooks & (SPANS | EXTERNAL) != 0 {
                let exit = activity_now();
                let _ = MINE.try_with(|m| {
                    // No ring: its ENTER, if it ran the hooks, counted the launch unlogged; one
                    // that did not (a sample window opened during the call) is no loss.
                    let Some(r) = m.ring.get() else { return };
                    // An EXIT whose ENTER this thread did not log (enabled mid-call), or logged
                    // in an earlier sample window (its own EXIT came while none was open): no
                    // span (`Gate`).
                    let logged = m.open.replace(false) && m.gen.get() == generation_of(word);
                    let enter = m.enter.get();
                    let mut meta = (u64::from(m.tid.get()) << 32) | u64::from(cbid & 0xff);
                    if m.pushed.replace(false) {
                        pop();
                        let o = m.overlap.get();
                        let now = OVERLAP_EPOCH.load(Ordering::Acquire);
                        PUSHED_OPEN.fetch_sub(1, Ordering::AcqRel);
                        if o >> 63 != 0 || (o & !(1 << 63)) != now {
                            meta |= FLAG_OVERLAPPED;
                        }
                    }
                    if !logged {
                        return;
                    }
                    write_span(r, name, meta, enter, exit);
                });
            }
            if hooks & MARKS != 0 {
                mark(name, userdata);
            }
        }
        _ => f(),
    }
}

/// Log a span in this thread's ring (its only writer).
#[inline(always)]
fn write_span(r: &Ring, name: usize, meta: u64, enter: u64, exit: u64) {
    let h = r.head.load(Ordering::Relaxed);
    let s = &r.slots[(h as usize) % RING];
    // The seqlock's write side: the head h (stored by the last span) must be seen before any of
    // this slot's new fields, or a reader that loaded a new field could still load the old head
    // and hand on a torn span. TSO keeps stores in order; aarch64 may not (a compiler barrier on
    // x86, a dmb on aarch64).
    fence(Ordering::Release);
    s.name.store(name as u64, Ordering::Relaxed);
    s.meta.store(meta, Ordering::Relaxed);
    s.enter.store(enter, Ordering::Relaxed);
    s.exit.store(exit, Ordering::Relaxed);
    // Release: a reader that sees the new head sees the slot's fields.
    r.head.store(h + 1, Ordering::Release);
}

/// Log a finished launch's span in this thread's ring with the given times, as a traced
/// launch's EXIT does (`bench::join_rate`: the drain's side of the join without a library).
/// False when no ring could be had.
pub fn log_span(name: usize, cbid: u32, enter: u64, exit: u64) -> bool {
    MINE.try_with(|m| {
        let Some((r, _)) = my_ring(m) else { return false };
        write_span(r, name, (u64::from(m.tid.get()) << 32) | u64::from(cbid & 0xff), enter, exit);
        true
    })
    .unwrap_or(false)
}

/// `mstxMarkA(functionName, stream)`, the stream being the subscription data (scenario 2).
fn mark(name: usize, stream: usize) {
    let f = MARK_FN.load(Ordering::Relaxed);
    if f == 0 || name == 0 {
        MARK_FAILURES.fetch_add(1, Ordering::Relaxed);
        return;
    }
    // SAFETY: MARK_FN holds an `mstxMarkA` of a library that is never unloaded; `name` is the
    // callback's functionName, a NUL-terminated string MSPTI keeps for the process.
    unsafe {
        let f: FnMark = std::mem::transmute::<usize, FnMark>(f);
        f(name as *const c_char, stream as *mut c_void);
    }
}

fn push(id: u64) {
    let f = PUSH_FN.load(Ordering::Relaxed);
    if f != 0 {
        // SAFETY: PUSH_FN holds `msptiActivityPushExternalCorrelationId` of a loaded library.
        unsafe { std::mem::transmute::<usize, FnPushExternal>(f)(EXTERNAL_CUSTOM2, id) };
    }
}

fn pop() {
    let f = POP_FN.load(Ordering::Relaxed);
    if f != 0 {
        let mut last = 0u64;
        // SAFETY: POP_FN holds `msptiActivityPopExternalCorrelationId`; `last` is a real out
        // pointer (a NULL one makes MSPTI fail without popping).
        unsafe { std::mem::transmute::<usize, FnPopExternal>(f)(EXTERNAL_CUSTOM2, &mut last) };
    }
}

/// A span read back from a ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    pub ring: u32,
    pub seq: u64,
    pub tid: u32,
    pub cbid: u32,
    pub overlapped: bool,
    pub name: usize,
    pub enter: u64,
    pub exit: u64,
}

/// Spans read from a ring between two checks of its head (`read_ring`).
const READ_BATCH: usize = 32;

/// Read a ring's spans from `*cursor` on, handing each to `f` (in order) once it is known whole;
/// returns how many were overwritten before they could be read (they are lost, and counted).
/// Spans go straight to `f` from a small batch on the stack: no queue between the ring and the
/// drain's per-thread queues.
#[inline(always)]
pub fn read_ring(ring: &Ring, index: u32, cursor: &mut u64, mut f: impl FnMut(Span)) -> u64 {
    let head = ring.head.load(Ordering::Acquire);
    let mut lost = 0;
    let mut from = *cursor;
    if head.saturating_sub(from) > RING as u64 {
        lost += head - RING as u64 - from;
        from = head - RING as u64;
    }
    let mut batch = [Span::default(); READ_BATCH];
    let mut at = from;
    while at < head {
        let n = (head - at).min(READ_BATCH as u64) as usize;
        for (k, b) in batch[..n].iter_mut().enumerate() {
            let i = at + k as u64;
            let s = &ring.slots[(i as usize) % RING];
            let meta = s.meta.load(Ordering::Relaxed);
            *b = Span {
                ring: index,
                seq: i,
                tid: (meta >> 32) as u32,
                cbid: (meta & 0xff) as u32,
                overlapped: meta & FLAG_OVERLAPPED != 0,
                name: s.name.load(Ordering::Relaxed) as usize,
                enter: s.enter.load(Ordering::Relaxed),
                exit: s.exit.load(Ordering::Relaxed),
            };
        }
        // Seqlock check: spans whose slot the writer may have begun to reuse while they were
        // read (its head reached their seq + RING) are dropped, never handed on torn.
        fence(Ordering::Acquire);
        let safe_from = ring.head.load(Ordering::Relaxed).saturating_sub(RING as u64 - 1);
        for b in &batch[..n] {
            if b.seq < safe_from {
                lost += 1;
            } else {
                f(*b);
            }
        }
        at += n as u64;
    }
    *cursor = head;
    lost
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The gate is process-wide: tests that open windows take turns.
    static GATE_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn head() -> Option<u64> {
        MINE.with(|m| m.ring.get().map(|r| r.head.load(Ordering::Acquire)))
    }

    #[test]
    fn an_enter_logged_in_an_earlier_window_never_pairs_with_a_later_windows_exit() {
        let _turn = GATE_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // A name of its own: tests run at once, and every State reads every thread's ring.
        let name = c"aclrtLaunchKernelWithHostArgs".as_ptr() as usize;
        let work: Work = |_, _, _, _| {};
        let (rt, cb) = (MSPTI_CB_DOMAIN_RUNTIME, LAUNCH_FIRST);
        let call = |site| around(0, rt, cb, site, name, work);
        configure(0, None, None, None);
        // Launch 1's ENTER is logged in window 1; its EXIT comes after the close, when the
        // callback runs no hooks (not `wanted`), so its ENTER stays noted.
        open_window();
        call(mspti_abi::MSPTI_API_ENTER);
        close_window();
        assert!(!wanted(rt, cb));
        // Launch 2's ENTER comes while no window is open; window 2 opens before its EXIT.
        open_window();
        let before = head().expect("the ENTER claimed a ring");
        call(mspti_abi::MSPTI_API_EXIT);
        assert_eq!(head(), Some(before), "launch 1's ENTER paired with launch 2's EXIT");
        // Launch 3, wholly in window 2, logs its span.
        call(mspti_abi::MSPTI_API_ENTER);
        call(mspti_abi::MSPTI_API_EXIT);
        assert_eq!(head(), Some(before + 1));
        close_window();
        assert_eq!(hooks() & SPANS, 0);
    }

    #[test]
    fn a_launch_whose_window_opened_during_it_is_not_counted_unlogged() {
        let _turn = GATE_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // A thread's first launch began before a window opened (its ENTER ran no hooks, so it has
        // no ring yet) and ends inside it: that is no span lost, and no ring was refused.
        let name = c"aclrtLaunchKernelV2".as_ptr() as usize;
        let before = UNLOGGED.load(Ordering::Relaxed);
        std::thread::spawn(move || {
            let work: Work = |_, _, _, _| {};
            let (rt, cb) = (MSPTI_CB_DOMAIN_RUNTIME, LAUNCH_FIRST);
            configure(0, None, None, None);
            assert!(!wanted(rt, cb), "no window open: the ENTER runs no hooks");
            open_window();
            around(0, rt, cb, mspti_abi::MSPTI_API_EXIT, name, work);
            close_window();
            assert!(head().is_none(), "no ring was claimed");
        })
        .join()
        .expect("the launching thread");
        assert_eq!(UNLOGGED.load(Ordering::Relaxed), before);
    }
}

/// Model test of the sample window protocol (`Gate`; `make test-loom`): the drain opens, closes
/// and reopens a window while a launching thread makes calls, each ENTER/EXIT as `wanted` and
/// `around` do them (a relaxed look first, then the Acquire read). In every interleaving, a span
/// logged pairs the ENTER and the EXIT of one call.
#[cfg(loom)]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// A thread's `Mine` as the protocol uses it: the logged ENTER's call and generation.
    #[derive(Default)]
    struct Thread {
        open: bool,
        gen: u64,
        call: u32,
    }

    fn enter(g: &Gate, t: &mut Thread, call: u32) {
        if g.hooks_relaxed() == 0 {
            return; // wanted(): nothing to run
        }
        let word = g.read();
        if hooks_of(word) & SPANS != 0 {
            t.gen = generation_of(word);
            t.call = call;
            t.open = true;
        }
    }

    /// A gate, and the drain's thread opening, closing and reopening a window on it.
    fn drain_opens_closes_reopens() -> (Arc<Gate>, loom::thread::JoinHandle<()>) {
        let g = Arc::new(Gate::new());
        let g2 = g.clone();
        let drain = loom::thread::spawn(move || {
            g2.open();
            g2.close();
            g2.open();
        });
        (g, drain)
    }

    /// The span an EXIT logs: (ENTER's call, EXIT's call).
    fn exit(g: &Gate, t: &mut Thread, call: u32) -> Option<(u32, u32)> {
        if g.hooks_relaxed() == 0 {
            return None;
        }
        let word = g.read();
        if hooks_of(word) & SPANS == 0 {
            return None;
        }
        let logged = std::mem::take(&mut t.open) && t.gen == generation_of(word);
        logged.then_some((t.call, call))
    }

    #[test]
    fn a_span_never_pairs_an_enter_of_one_window_with_a_later_exit() {
        let mut b = loom::model::Builder::new();
        // Every interleaving (the model is small).
        b.preemption_bound = None;
        b.check(|| {
            let (g, drain) = drain_opens_closes_reopens();
            let mut t = Thread::default();
            let mut spans = Vec::new();
            for call in 0..3 {
                enter(&g, &mut t, call);
                spans.extend(exit(&g, &mut t, call));
            }
            drain.join().unwrap();
            for (e, x) in spans {
                assert_eq!(e, x, "a span paired call {e}'s ENTER with call {x}'s EXIT");
            }
        });
    }

    #[test]
    fn without_the_generation_a_stale_enter_would_pair_with_a_later_exit() {
        // The check the generation adds is needed: with it left out, some interleaving logs a
        // wrong span (the model finds it), so the test above is not vacuous.
        let mut b = loom::model::Builder::new();
        // Every interleaving (the model is small).
        b.preemption_bound = None;
        let wrong = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let w = wrong.clone();
        b.check(move || {
            let (g, drain) = drain_opens_closes_reopens();
            let mut t = Thread::default();
            for call in 0..3 {
                enter(&g, &mut t, call);
                // The EXIT without the generation check, and without its relaxed look.
                if hooks_of(g.read()) & SPANS != 0 && std::mem::take(&mut t.open) && t.call != call {
                    w.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
            drain.join().unwrap();
        });
        assert!(wrong.load(std::sync::atomic::Ordering::Relaxed));
    }
}
