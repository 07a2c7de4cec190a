//! The MSPTI callback API as C sees it (`mspti_callback.h`, `mspti_cbid.h`, `mspti_result.h`);
//! the Activity API's kinds, records and functions in `activity`, MSTX's in `mstx`.
//!
//! Values and layouts are those of docs/reference.md ("Result codes", "Callback data", "Callback ids
//! and function names"), from the upstream headers; they have not changed
//! from 2024 to the newest sources, versions only add. Shared by the core (which binds a real
//! `libmspti.so`) and by the simulator (which exports the same symbols), so the two cannot drift.

#![no_std]

use core::ffi::{c_char, c_void};

pub mod activity;
pub mod mstx;

pub use activity::*;
pub use mstx::*;

/// `msptiResult` (4-byte C enum).
pub type MsptiResult = u32;
pub const MSPTI_SUCCESS: MsptiResult = 0;
pub const MSPTI_ERROR_INVALID_PARAMETER: MsptiResult = 1;
pub const MSPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: MsptiResult = 2;
pub const MSPTI_ERROR_MAX_LIMIT_REACHED: MsptiResult = 3;
pub const MSPTI_ERROR_DEVICE_OFFLINE: MsptiResult = 4;
pub const MSPTI_ERROR_QUEUE_EMPTY: MsptiResult = 5;
pub const MSPTI_ERROR_WITHOUT_LD_PRELOAD: MsptiResult = 6;
pub const MSPTI_ERROR_NOT_INITIALIZED: MsptiResult = 7;
pub const MSPTI_ERROR_INVALID_KIND: MsptiResult = 8;
pub const MSPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT: MsptiResult = 9;
pub const MSPTI_ERROR_INNER: MsptiResult = 999;
pub const MSPTI_ERROR_FORCE_INT: MsptiResult = 0x7fff_ffff;

/// Every defined `msptiResult`: (value, enum name, the library's own string from §1c).
pub const RESULTS: [(MsptiResult, &str, &str); 11] = [
    (0, "MSPTI_SUCCESS", "Success."),
    (1, "MSPTI_ERROR_INVALID_PARAMETER", "One or more of the parameters is invalid."),
    (2, "MSPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED", "Multiple subscribers are not supported."),
    (3, "MSPTI_ERROR_MAX_LIMIT_REACHED", "The maximum limit is reached."),
    (4, "MSPTI_ERROR_DEVICE_OFFLINE", "The device is offline."),
    (5, "MSPTI_ERROR_QUEUE_EMPTY", "The queue is empty."),
    (6, "MSPTI_ERROR_WITHOUT_LD_PRELOAD", "The operation requires LD_PRELOAD injection."),
    (7, "MSPTI_ERROR_NOT_INITIALIZED", "MSPTI is not initialized."),
    (8, "MSPTI_ERROR_INVALID_KIND", "The kind is invalid."),
    (9, "MSPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT", "The parameter size is not sufficient."),
    (999, "MSPTI_ERROR_INNER", "An unknown internal error has occurred."),
];

/// The enum name of a result code, if it is one MSPTI defines.
pub fn result_name(code: MsptiResult) -> Option<&'static str> {
    RESULTS.iter().find(|r| r.0 == code).map(|r| r.1)
}

/// The string `msptiGetResultString` gives for a code, if it is one MSPTI defines.
pub fn result_string(code: MsptiResult) -> Option<&'static str> {
    RESULTS.iter().find(|r| r.0 == code).map(|r| r.2)
}

/// `msptiCallbackDomain`.
pub type MsptiCallbackDomain = u32;
pub const MSPTI_CB_DOMAIN_INVALID: MsptiCallbackDomain = 0;
pub const MSPTI_CB_DOMAIN_RUNTIME: MsptiCallbackDomain = 1;
pub const MSPTI_CB_DOMAIN_HCCL: MsptiCallbackDomain = 2;
pub const MSPTI_CB_DOMAIN_SIZE: MsptiCallbackDomain = 3;
pub const MSPTI_CB_DOMAIN_FORCE_INT: MsptiCallbackDomain = 0x7fff_ffff;

/// `msptiApiCallbackSite`.
pub type MsptiApiCallbackSite = u32;
pub const MSPTI_API_ENTER: MsptiApiCallbackSite = 0;
pub const MSPTI_API_EXIT: MsptiApiCallbackSite = 1;
pub const MSPTI_API_CBSITE_FORCE_INT: MsptiApiCallbackSite = 0x7fff_ffff;

/// `msptiCallbackId` is a plain `uint32_t`.
pub type MsptiCallbackId = u32;
/// `MSPTI_CBID_RUNTIME_SIZE`: runtime ids are 0..37.
pub const MSPTI_CBID_RUNTIME_SIZE: u32 = 37;
/// `MSPTI_CBID_HCCL_SIZE`: HCCL ids are 0..13.
pub const MSPTI_CBID_HCCL_SIZE: u32 = 13;
/// The enable state is a 64-bit bitmap per domain, so ids 37..63 are accepted and >= 64 rejected.
pub const CBID_BITMAP_BITS: u32 = 64;

/// Opaque `struct msptiSubscriber_st`; only pointers to it cross the ABI.
#[repr(C)]
pub struct MsptiSubscriber {
    _private: [u8; 0],
}
/// `msptiSubscriberHandle`.
pub type MsptiSubscriberHandle = *mut MsptiSubscriber;

/// `msptiCallbackData`: 72 bytes, alignment 8 (offsets in docs/reference.md, "Callback data").
/// A real library fills only `callback_site` and `function_name`; the rest is stack garbage.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MsptiCallbackData {
    pub callback_site: MsptiApiCallbackSite,
    pub function_name: *const c_char,
    pub function_params: *const c_void,
    pub function_return_value: *const c_void,
    pub symbol_name: *const c_char,
    pub correlation_id: u64,
    pub reserved1: u64,
    pub reserved2: u64,
    pub correlation_data: *mut u64,
}

/// `msptiCallbackFunc`.
pub type MsptiCallbackFunc = Option<
    unsafe extern "C" fn(
        userdata: *mut c_void,
        domain: MsptiCallbackDomain,
        cbid: MsptiCallbackId,
        cbdata: *const MsptiCallbackData,
    ),
>;

pub type FnSubscribe = unsafe extern "C" fn(
    subscriber: *mut MsptiSubscriberHandle,
    callback: MsptiCallbackFunc,
    userdata: *mut c_void,
) -> MsptiResult;
pub type FnUnsubscribe = unsafe extern "C" fn(subscriber: MsptiSubscriberHandle) -> MsptiResult;
pub type FnEnableCallback = unsafe extern "C" fn(
    enable: u32,
    subscriber: MsptiSubscriberHandle,
    domain: MsptiCallbackDomain,
    cbid: MsptiCallbackId,
) -> MsptiResult;
pub type FnEnableDomain = unsafe extern "C" fn(
    enable: u32,
    subscriber: MsptiSubscriberHandle,
    domain: MsptiCallbackDomain,
) -> MsptiResult;
pub type FnGetResultString =
    unsafe extern "C" fn(result: MsptiResult, str_: *mut *const c_char) -> MsptiResult;
pub type FnGetVersion = unsafe extern "C" fn(version: *mut u32) -> MsptiResult;
pub type FnGetTimestamp = unsafe extern "C" fn(timestamp: *mut u64) -> MsptiResult;

/// One row of `tests/data/reference/cbids.csv`: the id, its enum name, and the `functionName` strings seen at run time.
#[derive(Clone, Copy, Debug)]
pub struct CallbackInfo {
    pub domain: MsptiCallbackDomain,
    pub cbid: u32,
    /// Enum name without the prefix, for example `LAUNCH` (prefix `MSPTI_CBID_RUNTIME_`).
    pub short: &'static str,
    /// `functionName` strings of MSPTI 26.x (hooks on libascendcl); empty when never fired there.
    pub names_26x: &'static [&'static str],
    /// `functionName` strings of CANN 8.x (hooks on libruntime).
    pub names_8x: &'static [&'static str],
}

impl CallbackInfo {
    /// The full enum name, for example `MSPTI_CBID_RUNTIME_LAUNCH`.
    pub fn prefix(&self) -> &'static str {
        if self.domain == MSPTI_CB_DOMAIN_HCCL {
            "MSPTI_CBID_HCCL_"
        } else {
            "MSPTI_CBID_RUNTIME_"
        }
    }
}

macro_rules! cb {
    ($d:expr, $id:expr, $short:expr, [$($a:expr),*], [$($b:expr),*]) => {
        CallbackInfo { domain: $d, cbid: $id, short: $short, names_26x: &[$($a),*], names_8x: &[$($b),*] }
    };
}
const R: u32 = MSPTI_CB_DOMAIN_RUNTIME;
const H: u32 = MSPTI_CB_DOMAIN_HCCL;

/// Every runtime (0-36) and HCCL (0-12) callback id of `tests/data/reference/cbids.csv`, INVALID included.
pub const CALLBACKS: [CallbackInfo; 50] = [
    cb!(R, 0, "INVALID", [], []),
    cb!(R, 1, "DEVICE_SET", ["aclrtSetDevice"], ["rtSetDevice"]),
    cb!(R, 2, "DEVICE_RESET", ["aclrtResetDevice"], ["rtDeviceReset"]),
    cb!(R, 3, "DEVICE_SET_EX", [], ["rtSetDeviceEx"]),
    cb!(R, 4, "CONTEXT_CREATED_EX", [], ["rtCtxCreateEx"]),
    cb!(R, 5, "CONTEXT_CREATED", ["aclrtCreateContext"], ["rtCtxCreate"]),
    cb!(R, 6, "CONTEXT_DESTROY", ["aclrtDestroyContext"], ["rtCtxDestroy"]),
    cb!(R, 7, "STREAM_CREATED", ["aclrtCreateStream"], ["rtStreamCreate"]),
    cb!(R, 8, "STREAM_DESTROY", ["aclrtDestroyStream"], ["rtStreamDestroy"]),
    cb!(R, 9, "STREAM_SYNCHRONIZED", ["aclrtSynchronizeStream"], ["rtStreamSynchronize"]),
    cb!(
        R,
        10,
        "LAUNCH",
        [
            "aclrtLaunchKernel",
            "aclrtLaunchKernelV2",
            "aclrtLaunchKernelWithConfig",
            "aclrtLaunchKernelWithHostArgs"
        ],
        [
            "rtKernelLaunch",
            "rtKernelLaunchWithFlag",
            "rtKernelLaunchWithFlagV2",
            "rtKernelLaunchWithHandleV2",
            "rtLaunch",
            "rtLaunchKernelByFuncHandle",
            "rtLaunchKernelByFuncHandleV2",
            "rtLaunchKernelByFuncHandleV3"
        ]
    ),
    cb!(R, 11, "CPU_LAUNCH", [], ["rtCpuKernelLaunch", "rtCpuKernelLaunchWithFlag"]),
    cb!(
        R,
        12,
        "AICPU_LAUNCH",
        [],
        ["rtAicpuKernelLaunch", "rtAicpuKernelLaunchWithFlag", "rtAicpuKernelLaunchExWithArgs"]
    ),
    cb!(R, 13, "AIV_LAUNCH", [], ["rtVectorCoreKernelLaunch", "rtVectorCoreKernelLaunchWithHandle"]),
    cb!(R, 14, "FFTS_LAUNCH", [], ["rtFftsTaskLaunch", "rtFftsTaskLaunchWithFlag", "rtFftsPlusTaskLaunch"]),
    cb!(
        R,
        15,
        "MALLOC",
        ["aclrtMalloc", "aclrtMallocWithCfg", "aclrtMallocForTaskScheduler", "aclrtMallocCached"],
        ["rtMalloc"]
    ),
    cb!(R, 16, "FREE", ["aclrtFree"], ["rtFree"]),
    cb!(R, 17, "MALLOC_HOST", ["aclrtMallocHost"], ["rtMallocHost"]),
    cb!(R, 18, "FREE_HOST", ["aclrtFreeHost"], ["rtFreeHost"]),
    cb!(R, 19, "MALLOC_CACHED", [], ["rtMallocCached"]),
    cb!(R, 20, "FLUSH_CACHE", ["aclrtMemFlush"], ["rtFlushCache"]),
    cb!(R, 21, "INVALID_CACHE", ["aclrtMemInvalidate"], ["rtInvalidCache"]),
    cb!(R, 22, "MEMCPY", ["aclrtMemcpy"], ["rtMemcpy", "rtMemcpyEx"]),
    cb!(R, 23, "MEMCPY_HOST", [], ["rtMemcpyHostTask"]),
    cb!(R, 24, "MEMCPY_ASYNC", ["aclrtMemcpyAsync"], ["rtMemcpyAsync"]),
    cb!(R, 25, "MEM_CPY2D", ["aclrtMemcpy2d"], ["rtMemcpy2d"]),
    cb!(R, 26, "MEM_CPY2D_ASYNC", ["aclrtMemcpy2dAsync"], ["rtMemcpy2dAsync"]),
    cb!(R, 27, "MEM_SET", ["aclrtMemset"], ["rtMemset"]),
    cb!(R, 28, "MEM_SET_ASYNC", ["aclrtMemsetAsync"], ["rtMemsetAsync"]),
    cb!(R, 29, "MEM_GET_INFO", ["aclrtGetMemInfo"], ["rtMemGetInfo", "rtMemGetInfoEx"]),
    cb!(R, 30, "RESERVE_MEM_ADDRESS", ["aclrtReserveMemAddress"], ["rtReserveMemAddress"]),
    cb!(R, 31, "RELEASE_MEM_ADDRESS", ["aclrtReleaseMemAddress"], ["rtReleaseMemAddress"]),
    cb!(R, 32, "MALLOC_PHYSICAL", ["aclrtMallocPhysical"], ["rtMallocPhysical"]),
    cb!(R, 33, "FREE_PHYSICAL", ["aclrtFreePhysical"], ["rtFreePhysical"]),
    cb!(
        R,
        34,
        "MEM_EXPORT_TO_SHAREABLE_HANDLE",
        ["aclrtMemExportToShareableHandle"],
        ["rtMemExportToShareableHandle"]
    ),
    cb!(
        R,
        35,
        "MEM_IMPORT_FROM_SHAREABLE_HANDLE",
        ["aclrtMemImportFromShareableHandle"],
        ["rtMemImportFromShareableHandle"]
    ),
    cb!(
        R,
        36,
        "MEM_SET_PID_TO_SHAREABLE_HANDLE",
        ["aclrtMemSetPidToShareableHandle"],
        ["rtMemSetPidToShareableHandle"]
    ),
    cb!(H, 0, "INVALID", [], []),
    cb!(H, 1, "ALLREDUCE", ["HcclAllReduce"], ["HcclAllReduce"]),
    cb!(H, 2, "BROADCAST", ["HcclBroadcast"], ["HcclBroadcast"]),
    cb!(H, 3, "ALLGATHER", ["HcclAllGather"], ["HcclAllGather"]),
    cb!(H, 4, "REDUCE_SCATTER", ["HcclReduceScatter"], ["HcclReduceScatter"]),
    cb!(H, 5, "REDUCE", ["HcclReduce"], ["HcclReduce"]),
    cb!(H, 6, "ALL_TO_ALL", ["HcclAlltoAll"], ["HcclAlltoAll"]),
    cb!(H, 7, "ALL_TO_ALLV", ["HcclAlltoAllV"], ["HcclAlltoAllV"]),
    cb!(H, 8, "BARRIER", ["HcclBarrier"], ["HcclBarrier"]),
    cb!(H, 9, "SCATTER", ["HcclScatter"], ["HcclScatter"]),
    cb!(H, 10, "SEND", ["HcclSend"], ["HcclSend"]),
    cb!(H, 11, "RECV", ["HcclRecv"], ["HcclRecv"]),
    cb!(H, 12, "SENDRECV", ["HcclBatchSendRecv"], ["HcclBatchSendRecv"]),
];

/// The table row of (domain, cbid), if MSPTI defines that id.
pub fn callback_info(domain: MsptiCallbackDomain, cbid: u32) -> Option<&'static CallbackInfo> {
    CALLBACKS.iter().find(|c| c.domain == domain && c.cbid == cbid)
}

/// The highest cbid `msptiEnableDomain` turns on for a domain (1-36 runtime, 1-12 HCCL).
pub fn domain_max_cbid(domain: MsptiCallbackDomain) -> Option<u32> {
    match domain {
        MSPTI_CB_DOMAIN_RUNTIME => Some(MSPTI_CBID_RUNTIME_SIZE - 1),
        MSPTI_CB_DOMAIN_HCCL => Some(MSPTI_CBID_HCCL_SIZE - 1),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{align_of, offset_of, size_of};

    #[test]
    fn callback_data_layout_matches_the_real_header() {
        assert_eq!(size_of::<MsptiCallbackData>(), 72);
        assert_eq!(align_of::<MsptiCallbackData>(), 8);
        assert_eq!(offset_of!(MsptiCallbackData, callback_site), 0);
        assert_eq!(offset_of!(MsptiCallbackData, function_name), 8);
        assert_eq!(offset_of!(MsptiCallbackData, function_params), 16);
        assert_eq!(offset_of!(MsptiCallbackData, function_return_value), 24);
        assert_eq!(offset_of!(MsptiCallbackData, symbol_name), 32);
        assert_eq!(offset_of!(MsptiCallbackData, correlation_id), 40);
        assert_eq!(offset_of!(MsptiCallbackData, reserved1), 48);
        assert_eq!(offset_of!(MsptiCallbackData, reserved2), 56);
        assert_eq!(offset_of!(MsptiCallbackData, correlation_data), 64);
    }

    #[test]
    fn every_runtime_and_hccl_id_is_in_the_table_once() {
        for d in [MSPTI_CB_DOMAIN_RUNTIME, MSPTI_CB_DOMAIN_HCCL] {
            let max = domain_max_cbid(d).unwrap();
            for id in 0..=max {
                let n = CALLBACKS.iter().filter(|c| c.domain == d && c.cbid == id).count();
                assert_eq!(n, 1, "domain {d} cbid {id}");
            }
        }
        assert_eq!(CALLBACKS.len(), 37 + 13);
        assert_eq!(callback_info(MSPTI_CB_DOMAIN_RUNTIME, 10).unwrap().names_26x.len(), 4);
        assert_eq!(callback_info(MSPTI_CB_DOMAIN_HCCL, 6).unwrap().names_26x[0], "HcclAlltoAll");
    }

    #[test]
    fn result_codes_have_names_and_strings() {
        assert_eq!(result_name(2), Some("MSPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"));
        assert_eq!(result_string(6), Some("The operation requires LD_PRELOAD injection."));
        assert_eq!(result_name(10), None);
        assert_eq!(result_name(999), Some("MSPTI_ERROR_INNER"));
    }
}
