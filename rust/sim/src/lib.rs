//! mspti-sim: a stand-in `libmspti.so` with a simulated ACL runtime and HCCL.
//!
//! It exports the real MSPTI callback-API symbols with the real C ABI and the subscriber rules of
//! MSPTI 26.x (upstream `csrc/callback/callback_manager.cpp`), so mspti-lens loads it through the same
//! run-time loading path as a real library. Preloaded, it interposes the ACL runtime and HCCL
//! functions as the real libmspti does (`acl`), forwarding to the simulated runtime libraries,
//! which drive the device here; the simulator's own workloads call those same wrappers
//! (`workload`). Its single simulated calls have names of their own (`msimCall`,
//! `msim_aclrtLaunchKernel`, ...). The extra symbol `msimVersion` is how a loader can tell this
//! library is simulated.

use core::ffi::{c_char, c_void};
use std::sync::atomic::Ordering;

use mspti_abi::*;

pub mod acl;
pub mod activity;
pub mod apis;
pub mod cann;
pub mod clock;
pub mod device;
#[cfg(test)]
mod forktest;
pub mod intern;
pub mod jobs;
mod locks;
pub mod models;
pub mod mstx;
pub mod multirank;
mod padded;
pub mod replay;
pub mod state;
pub mod workload;

use locks::lock;
use state::*;

/// When the library is loaded: the fork handlers go in, before any thread can hold a simulator
/// lock (a lock is never taken in a process without them, so a `fork()` child finds every one
/// free), and a library loaded as the real one's name checks LD_PRELOAD as MSPTI 26.x does.
#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = {
    extern "C" fn on_load() {
        activity::install_fork_handlers();
        if preload_check_by_default() {
            set_preload_check(true);
        }
    }
    on_load
};

/// The version `msptiGetVersion` reports (xxyyzz): the simulator follows MSPTI 26.x.
pub const SIM_MSPTI_VERSION: u32 = 260_200;

// ---------------------------------------------------------------------------------------------
// The MSPTI callback API.

/// # Safety
/// `subscriber`, when not NULL, must point to writable storage for a handle (C contract).
#[no_mangle]
pub unsafe extern "C" fn msptiSubscribe(
    subscriber: *mut MsptiSubscriberHandle,
    callback: MsptiCallbackFunc,
    userdata: *mut c_void,
) -> MsptiResult {
    let f = fault(FAULT_SUBSCRIBE);
    if f != 0 {
        return f;
    }
    if subscriber.is_null() {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    let _g = lock(&SUBSCRIBE_LOCK);
    if !SUBSCRIBER.load(Ordering::Acquire).is_null() {
        return MSPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    }
    clear_enabled();
    // Leaked on purpose: a callback racing with msptiUnsubscribe may still read it.
    let s = Box::into_raw(Box::new(Subscriber { callback, userdata }));
    SUBSCRIBER.store(s, Ordering::Release);
    // SAFETY: checked non-NULL above; the caller provides the storage.
    unsafe { *subscriber = s.cast() };
    MSPTI_SUCCESS
}

#[no_mangle]
pub extern "C" fn msptiUnsubscribe(subscriber: MsptiSubscriberHandle) -> MsptiResult {
    let f = fault(FAULT_UNSUBSCRIBE);
    if f != 0 {
        return f;
    }
    // MSPTI's ResetAllDevice comes first, whatever the handle: the device's records of work
    // already launched reach the client's buffers now (its FlushAll then hands them over).
    device::stop_and_flush();
    let _g = lock(&SUBSCRIBE_LOCK);
    let cur = SUBSCRIBER.load(Ordering::Acquire);
    if cur.is_null() {
        return MSPTI_SUCCESS;
    }
    if !std::ptr::eq(cur.cast::<MsptiSubscriber>(), subscriber) {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    clear_enabled();
    SUBSCRIBER.store(std::ptr::null_mut(), Ordering::Release);
    MSPTI_SUCCESS
}

#[no_mangle]
pub extern "C" fn msptiEnableCallback(
    enable: u32,
    subscriber: MsptiSubscriberHandle,
    domain: MsptiCallbackDomain,
    cbid: MsptiCallbackId,
) -> MsptiResult {
    let f = fault(FAULT_ENABLE_CALLBACK);
    if f != 0 {
        return f;
    }
    match check_enable(subscriber, domain) {
        Err(code) => code,
        Ok(false) => MSPTI_SUCCESS,
        Ok(true) if cbid >= CBID_BITMAP_BITS => MSPTI_ERROR_INVALID_PARAMETER,
        Ok(true) => {
            let bit = 1u64 << cbid;
            let e = &ENABLED[domain as usize];
            if enable != 0 {
                e.fetch_or(bit, Ordering::Relaxed);
            } else {
                e.fetch_and(!bit, Ordering::Relaxed);
            }
            MSPTI_SUCCESS
        }
    }
}

#[no_mangle]
pub extern "C" fn msptiEnableDomain(
    enable: u32,
    subscriber: MsptiSubscriberHandle,
    domain: MsptiCallbackDomain,
) -> MsptiResult {
    let f = fault(FAULT_ENABLE_DOMAIN);
    if f != 0 {
        return f;
    }
    match check_enable(subscriber, domain) {
        Err(code) => code,
        Ok(false) => MSPTI_SUCCESS,
        Ok(true) => {
            let max = domain_max_cbid(domain).unwrap_or(0);
            // Ids 1..=max: INVALID (0) is never set.
            let bits = ((1u64 << (max + 1)) - 1) & !1;
            let e = &ENABLED[domain as usize];
            if enable != 0 {
                e.fetch_or(bits, Ordering::Relaxed);
            } else {
                e.fetch_and(!bits, Ordering::Relaxed);
            }
            MSPTI_SUCCESS
        }
    }
}

/// # Safety
/// `str_`, when not NULL, must point to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn msptiGetResultString(result: MsptiResult, str_: *mut *const c_char) -> MsptiResult {
    let f = fault(FAULT_GET_RESULT_STRING);
    if f != 0 {
        return f;
    }
    if str_.is_null() {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    static STRINGS: [&std::ffi::CStr; 11] = [
        c"Success.",
        c"One or more of the parameters is invalid.",
        c"Multiple subscribers are not supported.",
        c"The maximum limit is reached.",
        c"The device is offline.",
        c"The queue is empty.",
        c"The operation requires LD_PRELOAD injection.",
        c"MSPTI is not initialized.",
        c"The kind is invalid.",
        c"The parameter size is not sufficient.",
        c"An unknown internal error has occurred.",
    ];
    let idx = match result {
        0..=9 => result as usize,
        999 => 10,
        _ => return MSPTI_ERROR_INVALID_PARAMETER,
    };
    // SAFETY: checked non-NULL above.
    unsafe { *str_ = STRINGS[idx].as_ptr() };
    MSPTI_SUCCESS
}

/// # Safety
/// `version`, when not NULL, must point to a writable u32.
#[no_mangle]
pub unsafe extern "C" fn msptiGetVersion(version: *mut u32) -> MsptiResult {
    let f = fault(FAULT_GET_VERSION);
    if f != 0 {
        return f;
    }
    if version.is_null() {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    // SAFETY: checked non-NULL above.
    unsafe { *version = SIM_MSPTI_VERSION };
    MSPTI_SUCCESS
}

/// # Safety
/// `timestamp`, when not NULL, must point to a writable u64.
#[no_mangle]
pub unsafe extern "C" fn msptiGetTimestamp(timestamp: *mut u64) -> MsptiResult {
    let f = fault(FAULT_GET_TIMESTAMP);
    if f != 0 {
        return f;
    }
    if timestamp.is_null() {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    // MSPTI's host clock: the registered timestamp callback if any (newest dev), else the sim's.
    // SAFETY: checked non-NULL above.
    unsafe { *timestamp = activity::host_now() };
    MSPTI_SUCCESS
}

// ---------------------------------------------------------------------------------------------
// Simulator control. None of these exist in a real libmspti.

/// Present only in the simulator: the loader's sign that a library is simulated.
#[no_mangle]
pub extern "C" fn msimVersion() -> u32 {
    1
}

/// 0 documented, 1 cann26 (default), 2 cann8. Returns 0, or 1 for an unknown mode.
#[no_mangle]
pub extern "C" fn msimSetFidelity(mode: u32) -> u32 {
    match Fidelity::from_u32(mode) {
        Some(m) => {
            FIDELITY.store(m as u32, Ordering::Relaxed);
            0
        }
        None => 1,
    }
}

#[no_mangle]
pub extern "C" fn msimGetFidelity() -> u32 {
    fidelity() as u32
}

/// Turn the 26.x LD_PRELOAD check on (reading LD_PRELOAD now, once, as the real library caches
/// it) or off.
#[no_mangle]
pub extern "C" fn msimSetPreloadCheck(on: u32) {
    set_preload_check(on != 0);
}

/// 0: `msptiGetTimestamp` is CLOCK_REALTIME and work really takes time; 1: per-thread virtual clock.
#[no_mangle]
pub extern "C" fn msimSetClock(mode: u32) {
    CLOCK_VIRTUAL.store(u8::from(mode != 0), Ordering::Relaxed);
}

/// The clock mode `msimSetClock` set: 0 real, 1 virtual (replay waits only on the real clock).
#[no_mangle]
pub extern "C" fn msimGetClock() -> u32 {
    u32::from(clock::is_virtual())
}

#[no_mangle]
pub extern "C" fn msimVirtualSet(ns: u64) {
    clock::virtual_set(ns);
}

#[no_mangle]
pub extern "C" fn msimVirtualNow() -> u64 {
    clock::virtual_now()
}

/// Make MSPTI function `slot` (0 subscribe, 1 unsubscribe, 2 enableCallback, 3 enableDomain,
/// 4 getTimestamp, 5 getVersion, 6 getResultString) return `code`; 0 clears the fault.
#[no_mangle]
pub extern "C" fn msimSetFault(slot: u32, code: u32) -> u32 {
    match FAULTS.get(slot as usize) {
        Some(f) => {
            f.store(code, Ordering::Relaxed);
            0
        }
        None => 1,
    }
}

/// Count delivered callbacks per (domain, cbid, site); turning it on clears the counters.
#[no_mangle]
pub extern "C" fn msimSetCounting(on: u32) {
    if on != 0 {
        reset_delivered();
    }
    COUNTING.store(on != 0, Ordering::Relaxed);
}

/// Callbacks delivered for (domain, cbid, site) since counting was turned on.
#[no_mangle]
pub extern "C" fn msimDelivered(domain: u32, cbid: u32, site: u32) -> u64 {
    DELIVERED
        .get(domain as usize)
        .and_then(|d| d.get(cbid as usize))
        .and_then(|c| c.get(site as usize))
        .map_or(0, |a| a.load(Ordering::Relaxed))
}

/// The enable bitmap of a domain as the library holds it.
#[no_mangle]
pub extern "C" fn msimEnabledMask(domain: u32) -> u64 {
    ENABLED.get(domain as usize).map_or(0, |e| e.load(Ordering::Relaxed))
}

/// Whether a subscriber is active.
#[no_mangle]
pub extern "C" fn msimSubscribed() -> u32 {
    u32::from(!SUBSCRIBER.load(Ordering::Acquire).is_null())
}

#[no_mangle]
pub extern "C" fn msimApiCount() -> u32 {
    apis::table().len() as u32
}

/// Describe simulated API `api`; the name pointers are static (NULL where the version has none).
///
/// # Safety
/// Every out pointer must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn msimApiInfo(
    api: u32,
    domain: *mut u32,
    cbid: *mut u32,
    name_26x: *mut *const c_char,
    name_8x: *mut *const c_char,
) -> u32 {
    let Some(a) = apis::table().get(api as usize) else { return 1 };
    // SAFETY: the caller passes valid out pointers (C contract, documented above).
    unsafe {
        *domain = a.domain;
        *cbid = a.cbid;
        *name_26x = a.name_26x.map_or(std::ptr::null(), |n| n.as_ptr());
        *name_8x = a.name_8x.map_or(std::ptr::null(), |n| n.as_ptr());
    }
    0
}

/// One simulated call of API `api` taking `work_ns`: ENTER, the work, EXIT. 0, or -1 if unknown.
#[no_mangle]
pub extern "C" fn msimCall(api: u32, work_ns: u64) -> i32 {
    apis::call(api, work_ns)
}

/// `count` calls of `api`, each of `work_ns`, in a loop (for benchmarks: no per-call FFI cost).
#[no_mangle]
pub extern "C" fn msimCallMany(api: u32, work_ns: u64, count: u64) -> i32 {
    for _ in 0..count {
        if apis::call(api, work_ns) != 0 {
            return -1;
        }
    }
    0
}

/// Fire one ENTER (0) or EXIT (1) of `api` alone: for unbalanced sequences in tests.
#[no_mangle]
pub extern "C" fn msimFire(api: u32, site: u32) -> i32 {
    apis::fire_site(api, site)
}

/// Call the subscriber's callback directly, bypassing the enable bits, with chosen fields:
/// `garbage` 1 fills every other field with garbage, 0 zeroes them. For fault injection.
///
/// # Safety
/// `name` may be NULL or garbage; the callee must cope (that is what is being tested).
#[no_mangle]
pub unsafe extern "C" fn msimInject(
    domain: u32,
    cbid: u32,
    site: u32,
    name: *const c_char,
    garbage: u32,
) -> i32 {
    let sub = SUBSCRIBER.load(Ordering::Acquire);
    if sub.is_null() {
        return 1;
    }
    // SAFETY: subscriber objects are never freed.
    let sub = unsafe { &*sub };
    let Some(cb) = sub.callback else { return 1 };
    let data = if garbage != 0 {
        apis::garbage(site, name, 0x77)
    } else {
        MsptiCallbackData {
            callback_site: site,
            function_name: name,
            function_params: std::ptr::null(),
            function_return_value: std::ptr::null(),
            symbol_name: std::ptr::null(),
            correlation_id: 0,
            reserved1: 0,
            reserved2: 0,
            correlation_data: std::ptr::null_mut(),
        }
    };
    count_delivered(domain, cbid, site);
    // SAFETY: `cb` is the subscriber's C callback and `data` outlives the call.
    unsafe { cb(sub.userdata, domain, cbid, &data) };
    0
}

/// Start a workload (see `workload::WorkloadConfig`); returns a job handle, or 0 if the
/// configuration is invalid.
///
/// # Safety
/// `cfg` must point to a valid `WorkloadConfig`.
#[no_mangle]
pub unsafe extern "C" fn msimWorkloadStart(cfg: *const workload::WorkloadConfig) -> u64 {
    if cfg.is_null() {
        return 0;
    }
    // SAFETY: non-NULL, and the caller passes a valid config.
    let cfg = unsafe { *cfg };
    match workload::start(cfg) {
        Ok(job) => jobs::register(job),
        Err(_) => 0,
    }
}

/// Replay `n_threads` event sequences: thread i has `lens[i]` events, laid out one thread after
/// another in `api`, `site` and `t_ns`. Returns a job handle, or 0 if an event is invalid.
///
/// # Safety
/// `lens` must hold `n_threads` values and the three arrays their sum.
#[no_mangle]
pub unsafe extern "C" fn msimReplayStart(
    n_threads: u32,
    lens: *const u64,
    api: *const u32,
    site: *const u32,
    t_ns: *const u64,
) -> u64 {
    if n_threads == 0 || lens.is_null() {
        return 0;
    }
    // SAFETY: the caller passes `n_threads` lengths.
    let lens = unsafe { std::slice::from_raw_parts(lens, n_threads as usize) };
    let total: u64 = lens.iter().sum();
    if total > 0 && (api.is_null() || site.is_null() || t_ns.is_null()) {
        return 0;
    }
    let n = total as usize;
    // SAFETY: the caller passes arrays of `total` elements each.
    let (api, site, t_ns) = unsafe {
        (
            std::slice::from_raw_parts(api, n),
            std::slice::from_raw_parts(site, n),
            std::slice::from_raw_parts(t_ns, n),
        )
    };
    let count = apis::table().len() as u32;
    if api.iter().any(|&a| a >= count) || site.iter().any(|&s| s > 1) {
        return 0;
    }
    let mut threads = Vec::with_capacity(lens.len());
    let mut at = 0usize;
    for &len in lens {
        let end = at + len as usize;
        threads
            .push((at..end).map(|i| replay::Event { api: api[i], site: site[i], t_ns: t_ns[i] }).collect());
        at = end;
    }
    jobs::register(replay::start(threads))
}

/// Progress of a job: steps (or events) done and the total. 1 if the handle is unknown.
///
/// # Safety
/// Out pointers must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn msimJobProgress(
    handle: u64,
    done: *mut u64,
    total: *mut u64,
    calls: *mut u64,
) -> u32 {
    let Some(j) = jobs::get(handle) else { return 1 };
    // SAFETY: the caller passes valid out pointers.
    unsafe {
        *done = j.done.load(Ordering::Relaxed);
        *total = j.total.load(Ordering::Relaxed);
        *calls = j.calls.load(Ordering::Relaxed);
    }
    0
}

/// 1 when every thread of the job has ended (or the handle is unknown), else 0.
#[no_mangle]
pub extern "C" fn msimJobFinished(handle: u64) -> u32 {
    jobs::get(handle).map_or(1, |j| u32::from(j.finished()))
}

/// Ask a job to stop early.
#[no_mangle]
pub extern "C" fn msimJobCancel(handle: u64) -> u32 {
    match jobs::get(handle) {
        Some(j) => {
            j.cancel.store(true, Ordering::Relaxed);
            0
        }
        None => 1,
    }
}

/// Wait for a job's threads: 0 when all finished cleanly, 1 unknown handle, 2 a thread failed.
/// The job's progress stays readable until `msimJobRelease`.
#[no_mangle]
pub extern "C" fn msimJobJoin(handle: u64) -> u32 {
    let Some(j) = jobs::get(handle) else { return 1 };
    if j.join() {
        0
    } else {
        2
    }
}

/// Forget a job (after joining it).
#[no_mangle]
pub extern "C" fn msimJobRelease(handle: u64) {
    jobs::release(handle);
}

macro_rules! named_entry_points {
    ($($export:ident => $name:literal),* $(,)?) => {$(
        /// A simulated runtime/HCCL entry point: one call taking `work_ns` of modelled time.
        #[no_mangle]
        pub extern "C" fn $export(work_ns: u64) -> i32 {
            static API: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
            match *API.get_or_init(|| apis::find($name)) {
                Some(api) => apis::call(api, work_ns),
                None => -1,
            }
        }
    )*};
}

// Every API that fires a callback in MSPTI 26.x (the callback ids of `mspti_cbid.h`).
named_entry_points! {
    msim_aclrtSetDevice => "aclrtSetDevice",
    msim_aclrtResetDevice => "aclrtResetDevice",
    msim_aclrtCreateContext => "aclrtCreateContext",
    msim_aclrtDestroyContext => "aclrtDestroyContext",
    msim_aclrtCreateStream => "aclrtCreateStream",
    msim_aclrtDestroyStream => "aclrtDestroyStream",
    msim_aclrtSynchronizeStream => "aclrtSynchronizeStream",
    msim_aclrtLaunchKernel => "aclrtLaunchKernel",
    msim_aclrtLaunchKernelV2 => "aclrtLaunchKernelV2",
    msim_aclrtLaunchKernelWithConfig => "aclrtLaunchKernelWithConfig",
    msim_aclrtLaunchKernelWithHostArgs => "aclrtLaunchKernelWithHostArgs",
    msim_aclrtMalloc => "aclrtMalloc",
    msim_aclrtMallocWithCfg => "aclrtMallocWithCfg",
    msim_aclrtMallocForTaskScheduler => "aclrtMallocForTaskScheduler",
    msim_aclrtMallocCached => "aclrtMallocCached",
    msim_aclrtFree => "aclrtFree",
    msim_aclrtMallocHost => "aclrtMallocHost",
    msim_aclrtFreeHost => "aclrtFreeHost",
    msim_aclrtMemFlush => "aclrtMemFlush",
    msim_aclrtMemInvalidate => "aclrtMemInvalidate",
    msim_aclrtMemcpy => "aclrtMemcpy",
    msim_aclrtMemcpyAsync => "aclrtMemcpyAsync",
    msim_aclrtMemcpy2d => "aclrtMemcpy2d",
    msim_aclrtMemcpy2dAsync => "aclrtMemcpy2dAsync",
    msim_aclrtMemset => "aclrtMemset",
    msim_aclrtMemsetAsync => "aclrtMemsetAsync",
    msim_aclrtGetMemInfo => "aclrtGetMemInfo",
    msim_aclrtReserveMemAddress => "aclrtReserveMemAddress",
    msim_aclrtReleaseMemAddress => "aclrtReleaseMemAddress",
    msim_aclrtMallocPhysical => "aclrtMallocPhysical",
    msim_aclrtFreePhysical => "aclrtFreePhysical",
    msim_aclrtMemExportToShareableHandle => "aclrtMemExportToShareableHandle",
    msim_aclrtMemImportFromShareableHandle => "aclrtMemImportFromShareableHandle",
    msim_aclrtMemSetPidToShareableHandle => "aclrtMemSetPidToShareableHandle",
    msim_HcclAllReduce => "HcclAllReduce",
    msim_HcclBroadcast => "HcclBroadcast",
    msim_HcclAllGather => "HcclAllGather",
    msim_HcclReduceScatter => "HcclReduceScatter",
    msim_HcclReduce => "HcclReduce",
    msim_HcclAlltoAll => "HcclAlltoAll",
    msim_HcclAlltoAllV => "HcclAlltoAllV",
    msim_HcclBarrier => "HcclBarrier",
    msim_HcclScatter => "HcclScatter",
    msim_HcclSend => "HcclSend",
    msim_HcclRecv => "HcclRecv",
    msim_HcclBatchSendRecv => "HcclBatchSendRecv",
}
