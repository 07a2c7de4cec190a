//! The simulator's controls and counters: its modes (fidelity, era, clock, LD_PRELOAD check),
//! injected faults, delivery and buffer counters, the device's model and reads, and the reset
//! tests start from. None of these exist in a real libmspti.

use std::ffi::{c_char, c_void};
use std::sync::atomic::Ordering;

use mspti_abi::*;

use crate::c_face::args::{cstr_arg, string_arg};
use crate::ground::clock;
use crate::ground::era::{self, era};
use crate::ground::state::*;
use crate::model::{activity, apis, buffers, device, workload};

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
    clock::set_virtual(mode != 0);
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
    u32::from(subscribed())
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

/// 0 follow the fidelity mode (default), 1 CANN 8.x, 2 MSPTI 26.0/26.1, 3 newest dev.
/// Returns 0, or 1 for an unknown value.
#[no_mangle]
pub extern "C" fn msimSetActivityEra(era: u32) -> u32 {
    u32::from(!era::set_era_override(era))
}

/// The era in effect: 1 CANN 8.x, 2 MSPTI 26.x, 3 newest dev.
#[no_mangle]
pub extern "C" fn msimGetActivityEra() -> u32 {
    match era() {
        AbiEra::Cann8 => 1,
        AbiEra::Mspti26 => 2,
        AbiEra::NewestDev => 3,
    }
}

/// 1 when a real library of the current era exports `name`, else 0.
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn msimHasSymbol(name: *const c_char) -> u32 {
    // SAFETY: NULL or a C string, by this function's contract.
    unsafe { string_arg(name) }.map_or(0, |n| u32::from(era::has_symbol(&n)))
}

/// Answer every `n`-th buffer request with NULL without calling the user (0: never).
#[no_mangle]
pub extern "C" fn msimSetNullBufferEvery(n: u64) {
    buffers::set_null_every(n);
}

/// A counter of the activity side (see the `buffers::STAT_*` constants); u64::MAX for an unknown one.
#[no_mangle]
pub extern "C" fn msimActivityStat(which: u32) -> u64 {
    buffers::stat(which).unwrap_or(u64::MAX)
}

/// Back to defaults, for tests (`activity::reset`).
#[no_mangle]
pub extern "C" fn msimActivityReset() {
    activity::reset();
}

/// Latency model: launch-to-start latency, how long after a task ends its record reaches the
/// channel (real clock only; the virtual clock delivers at once), and the kernel time of a launch
/// made without a kernel spec (`msimCall` of a launch API, the workloads' default).
#[no_mangle]
pub extern "C" fn msimSetDeviceModel(launch_latency_ns: u64, record_delay_ns: u64, default_kernel_ns: u64) {
    device::set_model(launch_latency_ns, record_delay_ns, default_kernel_ns);
}

/// The stream (and device) this thread's launches, copies, collectives go to (default 0, 0).
#[no_mangle]
pub extern "C" fn msimSetThreadStream(device: u32, stream: u32) {
    device::set_thread_device_stream(device, stream);
}

/// The `aclrtStream` handle the simulator maps to stream id `stream` (for MSTX calls):
/// `stream + 1` as a pointer, so that stream 0 is not NULL.
#[no_mangle]
pub extern "C" fn msimStreamHandle(stream: u32) -> *mut c_void {
    device::stream_handle(stream)
}

/// When (device, stream)'s last task ends, in MSPTI's clock (0 if nothing ran there).
#[no_mangle]
pub extern "C" fn msimStreamFreeAt(device: u32, stream: u32) -> u64 {
    device::free_at(device, stream)
}

/// Wait until every pending device record has been written (at most `timeout_ms`): 0 drained,
/// 1 timed out.
#[no_mangle]
pub extern "C" fn msimDeviceDrain(timeout_ms: u64) -> u32 {
    u32::from(!device::drain(timeout_ms))
}

/// Device records still on the channel.
#[no_mangle]
pub extern "C" fn msimDevicePending() -> u64 {
    device::pending_count()
}

/// The communicator name of HCCL/COMMUNICATION records (NULL: "hccl_world_group").
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn msimSetCommName(name: *const c_char) {
    // SAFETY: NULL or a C string, by this function's contract.
    device::set_comm_name(unsafe { cstr_arg(name) });
}

/// Whether the workloads started from now on put every compute thread on stream 0.
#[no_mangle]
pub extern "C" fn msimSetWorkloadStreams(shared: u32) {
    workload::set_shared_stream(shared != 0);
}
