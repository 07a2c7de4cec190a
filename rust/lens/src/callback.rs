//! The one `extern "C"` callback handed to `msptiSubscribe`.
//!
//! It reads only `callbackSite` and `functionName`: a real MSPTI fills nothing else, and
//! `correlationData` in particular is a garbage pointer (docs/reference.md, "Callback data"). ENTER pushes a
//! timestamp on this thread's stack (and, for an HCCL call, keeps it as the call's arrival,
//! core/arrivals.rs); EXIT pops the matching one and records the duration in this
//! thread's shard. Once a (thread, key) has been seen it allocates nothing; it takes no lock on
//! any path (a thread's first call claims a shard lock-free); it never calls Python, and no panic
//! crosses back into the library.

use std::ffi::{c_char, c_void};
use std::sync::atomic::Ordering;

use mspti_abi::{MsptiCallbackData, MSPTI_API_ENTER, MSPTI_API_EXIT, MSPTI_CB_DOMAIN_HCCL};

use crate::activity::launch_hooks as hook;
use crate::core::shard::{self, RawKey, Shard};
use crate::core::windows::{self, Stamp, POISONED, RECORDING, RUN, SLOWEST, WINDOW};
use crate::core::{arrivals, clock, seqlock};

/// The callback to subscribe: `on_callback` with the write sections' fences this process uses,
/// chosen once, after `seqlock::prepare_fences` (the choice never changes afterwards), so the
/// callback reads no flag for them.
pub fn subscriber() -> unsafe extern "C" fn(*mut c_void, u32, u32, *const MsptiCallbackData) {
    match seqlock::fences_in_use() {
        seqlock::ASYMMETRIC => on_callback_in::<{ seqlock::ASYMMETRIC }>,
        _ => on_callback_in::<{ seqlock::SYMMETRIC }>,
    }
}

/// The subscriber callback, reading which fences the process uses at each write section (for
/// callers that did not take it from `subscriber`).
///
/// # Safety
/// As `on_callback_in`.
pub unsafe extern "C" fn on_callback(
    userdata: *mut c_void,
    domain: u32,
    cbid: u32,
    cbdata: *const MsptiCallbackData,
) {
    // SAFETY: the caller's promise, passed on.
    unsafe { on_callback_in::<{ seqlock::RUNTIME }>(userdata, domain, cbid, cbdata) }
}

/// The subscriber callback, its store-load fences of kind `F` (seqlock.rs `light_fence_in`).
///
/// # Safety
/// `cbdata` is NULL or points to a `msptiCallbackData` whose first two fields are valid for the
/// duration of the call (the MSPTI contract; the other fields are never read).
pub unsafe extern "C" fn on_callback_in<const F: u8>(
    userdata: *mut c_void,
    domain: u32,
    cbid: u32,
    cbdata: *const MsptiCallbackData,
) {
    // After a caught panic recording is halted, so the callback does no more than pop an open
    // call; POISONED is checked where recording would start again.
    if cbdata.is_null() {
        return;
    }
    // Open before the run word is read, closed after the last write: a stop waits for it. It
    // finds this thread's shard, the one lookup of the callback.
    let inside = crate::core::sections::Section::enter_in::<F>();
    // One callback in 256 per thread is timed, for the live self cost: out of line, the timed
    // call runs this function again, inside this section (core/self_cost.rs).
    if inside.due() {
        // SAFETY: the caller's promise, passed on.
        return unsafe { crate::core::self_cost::timed(on_callback_in::<F>, userdata, domain, cbid, cbdata) };
    }
    // SAFETY: MSPTI writes callbackSite (offset 0) and functionName (offset 8) before every
    // call; these two reads touch nothing else of the struct.
    let (site, name) = unsafe {
        (
            std::ptr::addr_of!((*cbdata).callback_site).read(),
            std::ptr::addr_of!((*cbdata).function_name).read() as *const c_char,
        )
    };
    // The activity hooks (device time) wrap the pairing, out of line; off by default (one load and a
    // branch), and then the pairing is inlined here.
    // AssertUnwindSafe: the shard passed in is the one the pairing would look up itself; a panic
    // halts recording for good (below), after which a shard is only popped from.
    let own = inside.shard();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if hook::wanted(domain, cbid) {
            hook::around(userdata as usize, domain, cbid, site, name as usize, handle);
        } else {
            handle_on::<F>(own, domain, cbid, site, name as usize);
        }
    }));
    if r.is_err() {
        POISONED.store(true, Ordering::Relaxed);
        windows::halt();
    }
}

/// The pairing as the activity hooks call it (`launch_hooks::around`): finds the shard itself.
fn handle(domain: u32, cbid: u32, site: u32, name: usize) {
    handle_on::<{ seqlock::RUNTIME }>(shard::existing(), domain, cbid, site, name);
}

/// The pairing, given this thread's shard if it has one (`shard::existing`).
#[inline(always)]
fn handle_on<const F: u8>(own: Option<&'static Shard>, domain: u32, cbid: u32, site: u32, name: usize) {
    // Acquire pairs with start/stop's AcqRel update: the clock (kind, rate, function) chosen
    // before the run began is seen by every callback of that run (clock.rs reads it Relaxed).
    let run = RUN.load(Ordering::Acquire);
    let recording = run & RECORDING != 0;
    let key = RawKey::new(domain, cbid, name);
    let stamp = Stamp::of(run);
    match site {
        MSPTI_API_ENTER => {
            if !recording {
                return;
            }
            let Some(s) = own.or_else(shard::current_slow) else { return };
            // Clock last on ENTER, so bookkeeping is not inside the measured interval (but for an
            // HCCL call's arrival: a few stores, out of line, against a collective's microseconds).
            let start = clock::now();
            if domain == MSPTI_CB_DOMAIN_HCCL {
                arrivals::keep(s, cbid, name, start, stamp.epoch());
            }
            s.enter(key, start, stamp);
        }
        MSPTI_API_EXIT => {
            // Clock first on EXIT, for the same reason.
            let end = clock::now();
            // Not recording (stopped, or a forked child): only a thread that has a shard pops a
            // matching open call, counting nothing; claiming one is for recording threads.
            let shard = if recording { own.or_else(shard::current_slow) } else { own };
            let Some(s) = shard else { return };
            if !recording {
                crate::core::sections::exit_while_stopped(s);
            }
            let Some(start) = s.exit(key, stamp, recording) else { return };
            if !recording {
                return;
            }
            // A failed reading, or a clock stepped backwards (end < start): dropped, never 0 ns. A
            // failed start (FAILED is u64::MAX) is past every end but a failed one: to_ns drops it.
            let ns = if end == clock::FAILED { None } else { clock::to_ns(start, end) };
            let Some(ns) = ns else {
                s.count_dropped();
                return;
            };
            let Some(h) = s.histogram(key) else { return };
            // Acquire: the window's closer cleared this bank before advancing to it.
            let window = || WINDOW.load(Ordering::Acquire);
            if run & SLOWEST != 0 {
                // A call past the slowest-call gate (one of the slowest) is kept in the same write section.
                h.hist.record_and_in::<F>(ns, window, |w| h.slowest.keep(ns, start, w));
            } else {
                h.hist.record_in::<F>(ns, window);
            }
        }
        _ => {
            if let Some(s) = own {
                s.count_bad_site();
            }
        }
    }
}
