//! Single simulated calls, each one call of the model (`model::call`): by API index, by name
//! (`msim_aclrtLaunchKernel`, ...), with a device spec, or one callback site alone.

use std::ffi::c_char;

use crate::c_face::args::name_arg;
use crate::model::device::CallSpec;
use crate::model::{apis, call};

/// One simulated call of API `api` taking `work_ns`: ENTER, the work, EXIT. 0, or -1 if unknown.
#[no_mangle]
pub extern "C" fn msimCall(api: u32, work_ns: u64) -> i32 {
    call::call(api, work_ns)
}

/// `count` calls of `api`, each of `work_ns`, in a loop (for benchmarks: no per-call FFI cost).
#[no_mangle]
pub extern "C" fn msimCallMany(api: u32, work_ns: u64, count: u64) -> i32 {
    call::call_many(api, work_ns, count)
}

/// Fire one ENTER (0) or EXIT (1) of `api` alone: for unbalanced sequences in tests.
#[no_mangle]
pub extern "C" fn msimFire(api: u32, site: u32) -> i32 {
    call::fire_site(api, site)
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
    i32::from(!apis::inject(domain, cbid, site, name, garbage != 0))
}

/// One launch call of simulated API `api` (a LAUNCH-family entry) taking `host_ns` on the host,
/// on (this thread's device, `stream`): `kernels` kernels of `device_ns` each named `kernel`
/// (NULL: "SimKernel"); `node` (may be NULL) names the operator, which adds node-level API and
/// NODE_API records; `graph` 1 makes it a graph replay (all kernels carry the call's correlation
/// id). Returns 0, or -1 if `api` is unknown or no launch.
///
/// # Safety
/// `kernel` and `node` must be NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn msimLaunch(
    api: u32,
    host_ns: u64,
    stream: u32,
    device_ns: u64,
    kernels: u32,
    kernel: *const c_char,
    node: *const c_char,
    graph: u32,
) -> i32 {
    // SAFETY: NULL or C strings, by this function's contract.
    let (kernel, node) = unsafe { (name_arg(kernel), name_arg(node)) };
    let spec = CallSpec {
        kernel: kernel.unwrap_or(c"SimKernel"),
        node,
        device_ns,
        kernels: kernels.max(1),
        graph: graph != 0,
        ..CallSpec::default()
    };
    call::launch(api, host_ns, stream, spec)
}

/// One call of simulated API `api` taking `host_ns` that moves `bytes`: a copy (`copy_kind` a
/// `msptiActivityMemcpyKind`, 0 for the API's usual direction), a memset, an allocation or free,
/// or a collective over `ranks` ranks, on this thread's stream. Returns 0, or -1 if unknown.
#[no_mangle]
pub extern "C" fn msimCallBytes(api: u32, host_ns: u64, bytes: u64, copy_kind: u32, ranks: u32) -> i32 {
    call::call_bytes(api, host_ns, bytes, copy_kind, ranks)
}

/// `aclrtSynchronizeStream` of this thread's stream: the call's host time is `host_ns` or, if
/// longer, until the stream's last task ends (the virtual clock jumps there; the real one waits).
#[no_mangle]
pub extern "C" fn msimSynchronizeStream(host_ns: u64) -> i32 {
    call::synchronize(host_ns)
}

/// One collective of simulated HCCL API `api` taking `host_ns` on the host: `count` elements of
/// `HcclDataType` `data_type` over `ranks` ranks, on this thread's stream (as `HcclAllReduce`'s
/// arguments give them). Returns 0, or -1 if `api` is no HCCL API or `data_type` is unknown.
#[no_mangle]
pub extern "C" fn msimCallCollective(api: u32, host_ns: u64, count: u64, data_type: u32, ranks: u32) -> i32 {
    call::collective(api, host_ns, count, data_type, ranks)
}

macro_rules! named_entry_points {
    ($($export:ident => $name:literal),* $(,)?) => {$(
        /// A simulated runtime/HCCL entry point: one call taking `work_ns` of modelled time.
        #[no_mangle]
        pub extern "C" fn $export(work_ns: u64) -> i32 {
            static API: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
            match *API.get_or_init(|| apis::find($name)) {
                Some(api) => call::call(api, work_ns),
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
