//! The simulated libmspti's process-wide state: the one subscriber, the enable bitmaps, the
//! enabled activity kinds, the fidelity mode, the LD_PRELOAD check, injected faults and the
//! delivery counters.
//!
//! Rules are those of MSPTI 26.x (upstream `csrc/callback/callback_manager.cpp`): one subscriber
//! (a second gets 2), subscribe and unsubscribe clear every enable bit, enable-domain sets ids
//! 1-36 / 1-12; the enable calls check, in this order, LD_PRELOAD (6), the subscriber (none: a
//! silent 0), the handle (1), the domain (1), then cbid >= 64 (1).

use core::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use mspti_abi::*;

use crate::ground::locks::{ForkLock, Rank};

/// What the library writes into `msptiCallbackData` besides `callbackSite` and `functionName`.
#[repr(u32)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Fidelity {
    /// Fills correlationId, correlationData, symbolName, functionParams, functionReturnValue as
    /// the seed guide describes (no real library does this).
    Documented = 0,
    /// Real MSPTI 26.x: only callbackSite and functionName; the rest is garbage.
    Cann26 = 1,
    /// Real CANN 8.x: as Cann26, with the `rt*` function names of libruntime.
    Cann8 = 2,
}

impl Fidelity {
    pub fn from_u32(v: u32) -> Option<Fidelity> {
        match v {
            0 => Some(Fidelity::Documented),
            1 => Some(Fidelity::Cann26),
            2 => Some(Fidelity::Cann8),
            _ => None,
        }
    }
}

/// The subscriber object a handle points to. Never freed: a callback that loaded it just before
/// `msptiUnsubscribe` may still use it afterwards, as with the real library's shared_ptr copy.
pub struct Subscriber {
    pub callback: MsptiCallbackFunc,
    pub userdata: *mut c_void,
}

pub static SUBSCRIBER: AtomicPtr<Subscriber> = AtomicPtr::new(std::ptr::null_mut());
/// Serialises subscribe/unsubscribe (the real one is thread-safe; enable calls are not required to be).
pub static SUBSCRIBE_LOCK: ForkLock<()> = ForkLock::new(Rank::Subscribe, ());
/// One 64-bit enable bitmap per domain, indexed by domain value.
pub static ENABLED: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
pub static FIDELITY: AtomicU32 = AtomicU32::new(Fidelity::Cann26 as u32);

/// LD_PRELOAD check (26.0+): when on, the enable calls give 6 unless the LD_PRELOAD variable
/// (read once, when the check is turned on) names `libmspti.so`. On from the start in a library
/// loaded as `libmspti.so` (the simulated CANN tree's, see `preload_check_by_default`), off in
/// the bundled simulator (`libmspti_sim.so`) so that it runs in any process.
pub static PRELOAD_CHECK: AtomicBool = AtomicBool::new(false);
pub static PRELOAD_OK: AtomicBool = AtomicBool::new(false);

/// Injected faults: a non-zero value is returned by that MSPTI function instead of doing its work.
pub const FAULT_SUBSCRIBE: usize = 0;
pub const FAULT_UNSUBSCRIBE: usize = 1;
pub const FAULT_ENABLE_CALLBACK: usize = 2;
pub const FAULT_ENABLE_DOMAIN: usize = 3;
pub const FAULT_GET_TIMESTAMP: usize = 4;
pub const FAULT_GET_VERSION: usize = 5;
pub const FAULT_GET_RESULT_STRING: usize = 6;
pub const FAULT_SLOTS: usize = 7;
pub static FAULTS: [AtomicU32; FAULT_SLOTS] = [const { AtomicU32::new(0) }; FAULT_SLOTS];

pub fn fault(slot: usize) -> MsptiResult {
    FAULTS[slot].load(Ordering::Relaxed)
}

/// Delivery counters, per (domain, cbid, site): how many callbacks the library actually invoked.
/// Off by default so benchmarks measure no shared-counter traffic.
pub static COUNTING: AtomicBool = AtomicBool::new(false);
const DOMAINS: usize = 3;
const IDS: usize = 64;
pub static DELIVERED: [[[AtomicU64; 2]; IDS]; DOMAINS] =
    [const { [const { [const { AtomicU64::new(0) }; 2] }; IDS] }; DOMAINS];

/// The activity kinds enabled (`msptiActivityEnable`), one bit per kind.
static KINDS: AtomicU32 = AtomicU32::new(0);

pub fn kind_enabled(kind: MsptiActivityKind) -> bool {
    kind < 32 && KINDS.load(Ordering::Relaxed) & (1 << kind) != 0
}

pub fn any_kind_enabled() -> bool {
    KINDS.load(Ordering::Relaxed) != 0
}

pub fn set_kind_enabled(kind: MsptiActivityKind, on: bool) {
    if on {
        KINDS.fetch_or(1 << kind, Ordering::Relaxed);
    } else {
        KINDS.fetch_and(!(1 << kind), Ordering::Relaxed);
    }
}

pub fn clear_kinds() {
    KINDS.store(0, Ordering::Relaxed);
}

/// Whether a subscriber exists: every producer of records needs one (MSPTI registers its report
/// callbacks and MSTX handlers in `msptiSubscribe`).
pub fn subscribed() -> bool {
    !SUBSCRIBER.load(Ordering::Acquire).is_null()
}

/// Whether records are being made at all: a subscriber and some kind enabled.
pub fn recording() -> bool {
    any_kind_enabled() && subscribed()
}

/// Whether MSPTI's wrappers run (libmspti preloaded): the hooked wrappers' bumps, HCCL's
/// inner marks and (before newest dev) the memory records need them.
pub fn hooked() -> bool {
    !not_interposed()
}

pub fn fidelity() -> Fidelity {
    Fidelity::from_u32(FIDELITY.load(Ordering::Relaxed)).unwrap_or(Fidelity::Cann26)
}

pub fn is_enabled(domain: u32, cbid: u32) -> bool {
    (domain as usize) < DOMAINS
        && cbid < CBID_BITMAP_BITS
        && ENABLED[domain as usize].load(Ordering::Relaxed) & (1u64 << cbid) != 0
}

pub fn clear_enabled() {
    for e in &ENABLED {
        e.store(0, Ordering::Relaxed);
    }
}

pub fn count_delivered(domain: u32, cbid: u32, site: u32) {
    if COUNTING.load(Ordering::Relaxed) && (domain as usize) < DOMAINS && (cbid as usize) < IDS && site < 2 {
        DELIVERED[domain as usize][cbid as usize][site as usize].fetch_add(1, Ordering::Relaxed);
    }
}

pub fn reset_delivered() {
    for d in &DELIVERED {
        for c in d {
            for s in c {
                s.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// Whether `handle` is the live subscriber.
pub fn is_current(handle: MsptiSubscriberHandle) -> bool {
    let cur = SUBSCRIBER.load(Ordering::Acquire);
    !cur.is_null() && std::ptr::eq(cur.cast::<MsptiSubscriber>(), handle)
}

/// The enable calls' shared checks, in upstream's order (`CallbackManager::EnableCallback`,
/// `EnableDomain`): LD_PRELOAD, subscriber, handle, domain. Ok(false): nothing to do (no
/// subscriber, a silent 0).
pub fn check_enable(subscriber: MsptiSubscriberHandle, domain: u32) -> Result<bool, MsptiResult> {
    if not_interposed() && fidelity() != Fidelity::Cann8 {
        // 26.x checks LD_PRELOAD first; CANN 8.x had no check and simply delivered nothing.
        return Err(MSPTI_ERROR_WITHOUT_LD_PRELOAD);
    }
    if SUBSCRIBER.load(Ordering::Acquire).is_null() {
        return Ok(false);
    }
    if !is_current(subscriber) {
        return Err(MSPTI_ERROR_INVALID_PARAMETER);
    }
    if domain != MSPTI_CB_DOMAIN_RUNTIME && domain != MSPTI_CB_DOMAIN_HCCL {
        return Err(MSPTI_ERROR_INVALID_PARAMETER);
    }
    Ok(true)
}

/// Whether the simulated process "was not started with LD_PRELOAD": only when the check is on.
pub fn not_interposed() -> bool {
    PRELOAD_CHECK.load(Ordering::Relaxed) && !PRELOAD_OK.load(Ordering::Relaxed)
}

pub fn read_preload_env() -> bool {
    std::env::var("LD_PRELOAD").map(|v| v.contains("libmspti.so")).unwrap_or(false)
}

/// Turn the LD_PRELOAD check on (reading LD_PRELOAD now) or off.
pub fn set_preload_check(on: bool) {
    PRELOAD_OK.store(read_preload_env(), Ordering::Relaxed);
    PRELOAD_CHECK.store(on, Ordering::Relaxed);
}

/// Whether this library was loaded under the name of the real one: `libmspti.so`, or the
/// simulated CANN tree's `libascend_hal.so` (a link to it). The dynamic loader keeps the name it
/// was given (links unresolved); the bundled simulator is `libmspti_sim.so`.
pub fn preload_check_by_default() -> bool {
    #[repr(C)]
    struct DlInfo {
        dli_fname: *const core::ffi::c_char,
        dli_fbase: *mut c_void,
        dli_sname: *const core::ffi::c_char,
        dli_saddr: *mut c_void,
    }
    #[link(name = "dl")]
    extern "C" {
        fn dladdr(addr: *const c_void, info: *mut DlInfo) -> i32;
    }
    let mut info = DlInfo {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: the address is a function of this library; `info` is writable.
    if unsafe { dladdr(preload_check_by_default as *const c_void, &mut info) } == 0
        || info.dli_fname.is_null()
    {
        return false;
    }
    // SAFETY: dladdr's file name is a NUL-terminated string owned by the loader.
    let path = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_bytes();
    let file = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    file == b"libmspti.so" || file == b"libascend_hal.so"
}
