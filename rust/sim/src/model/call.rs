//! One simulated call, from its correlation id to its device work: the id bump of MSPTI's
//! launch and memory wrappers, ENTER, the runtime's work (modelled, or the real function an
//! interposed wrapper forwards to), the multi-rank meeting of a collective, the device work of a
//! launch or collective, the call's records, EXIT. Every way into the simulated runtime ends
//! here: the interposed wrappers (`model::interpose`), the workloads, and the `msim*` calls.

use std::ffi::CStr;

use mspti_abi::*;

use crate::ground::clock::{self, host_now};
use crate::ground::ids;
use crate::ground::state::{self, Fidelity};
use crate::model::device::{self, CallSpec};
use crate::model::records::{self, HostCall};
use crate::model::{apis, cann, multirank};

/// `MSPTI_CBID_RUNTIME_STREAM_SYNCHRONIZED` (aclrtSynchronizeStream).
const CBID_STREAM_SYNCHRONIZE: u32 = 9;

/// Whether the wrapper of runtime callback `cbid` takes a new correlation id: MSPTI's launch
/// wrappers (LAUNCH .. FFTS_LAUNCH) and its memory wrappers (MALLOC .. MEM_SET_PID_TO_SHAREABLE_HANDLE)
/// call `UpdateAndReportCorrelationId`; device, context, stream and synchronize wrappers do not
/// (upstream csrc/common/inject/acl_inject.cpp, acl_mem_inject.cpp). Huawei's st check of
/// samples/mspti_external_correlation counts on it: launch, kernel, copy are ids 7, 8, 9.
fn bumps_correlation(cbid: u32) -> bool {
    (10..=36).contains(&cbid)
}

/// One simulated call: ENTER, `work_ns` of modelled work, EXIT. Returns 0, or -1 for an unknown API.
pub fn call(api: u32, work_ns: u64) -> i32 {
    let sync = apis::table()
        .get(api as usize)
        .is_some_and(|a| a.domain == MSPTI_CB_DOMAIN_RUNTIME && a.cbid == CBID_STREAM_SYNCHRONIZE);
    call_with(api, device::take_next(), work_ns, || {
        // A stream synchronize returns when the stream's device work is done, or after its own
        // cost if the stream is idle by then.
        clock::spend(if sync { work_ns.max(device::sync_wait_ns()) } else { work_ns });
        0
    })
}

/// One call of `api` whose work is `body` (modelled work, or the real function an interception
/// forwards to): ENTER, body, the call's records (`spec` says what it does on the device), EXIT.
/// `work_ns` is what documented mode's `functionParams` report. Returns the body's result (a
/// collective's peer wait failing wins), or -1 for an unknown API.
pub fn call_with(api: u32, spec: Option<device::CallSpec>, work_ns: u64, body: impl FnOnce() -> i32) -> i32 {
    let Some(a) = apis::table().get(api as usize) else { return -1 };
    let _call = clock::begin_call();
    let fidelity = state::fidelity();
    let Some(name) = a.name(fidelity) else {
        // Not hooked in this library version: the call happens, no callback fires.
        return body();
    };
    if a.domain == MSPTI_CB_DOMAIN_RUNTIME
        && bumps_correlation(a.cbid)
        && state::any_kind_enabled()
        && state::hooked()
    {
        // The launch and memory wrappers bump the thread's correlation id right before ENTER. Ids
        // are seen only in records, so with no kind enabled the shared counter is left alone.
        records::bump_correlation();
    }
    let corr = if fidelity == Fidelity::Documented { ids::take_callback_correlation() } else { 0 };
    let mut frame = apis::CallFrame::new(corr, work_ns);
    apis::fire(a.domain, a.cbid, MSPTI_API_ENTER, name.as_ptr(), fidelity, &mut frame);
    let t0 = if state::any_kind_enabled() { host_now() } else { 0 };
    if a.domain == MSPTI_CB_DOMAIN_HCCL {
        // A collective completes when every rank of its group has entered it (multi-process jobs);
        // the group learns where this rank's task would start on its stream (the records' clock).
        frame.ret = multirank::wait_for_peers(|| device::collective_start(host_now()));
    }
    let ret = body();
    if frame.ret == 0 {
        frame.ret = ret;
    }
    device_work_and_records(a.domain, a.cbid, name, t0, spec);
    apis::fire(a.domain, a.cbid, MSPTI_API_EXIT, name.as_ptr(), fidelity, &mut frame);
    frame.ret
}

/// Fire one ENTER or EXIT of `api` on its own, as replay and fault injection need.
pub fn fire_site(api: u32, site: u32) -> i32 {
    let Some(a) = apis::table().get(api as usize) else { return -1 };
    let fidelity = state::fidelity();
    let Some(name) = a.name(fidelity) else { return 0 };
    apis::fire(a.domain, a.cbid, site, name.as_ptr(), fidelity, &mut apis::CallFrame::new(0, 0));
    0
}

/// The device work and records of one hooked host call, made between its host work and its EXIT
/// callback: the kernels of a launch or the task of a collective, then the call's records
/// (`records::host_call`). A call made with a device spec (the workloads', `launch`'s) runs on
/// the device whether or not anything records it, so a synchronize waits for it either way.
fn device_work_and_records(
    domain: u32,
    cbid: u32,
    function_name: &'static CStr,
    t0: u64,
    spec: Option<CallSpec>,
) {
    let recording = state::recording();
    if !recording && spec.is_none() {
        return;
    }
    let t1 = host_now();
    let spec = spec.unwrap_or_default();
    if domain == MSPTI_CB_DOMAIN_HCCL {
        device::submit_collective(function_name, cbid, &spec, t1);
    } else if domain == MSPTI_CB_DOMAIN_RUNTIME && (10..=14).contains(&cbid) {
        device::submit_kernels(&spec, t1);
    }
    if recording {
        records::host_call(&HostCall {
            domain,
            cbid,
            function_name,
            t0,
            t1,
            device: device::thread_device(),
            stream: device::thread_stream(),
            bytes: spec.bytes,
            copy_kind: spec.copy_kind,
            node: spec.node,
        });
    }
}

/// `count` calls of `api`, each of `work_ns`: 0, or -1 as soon as one fails.
pub fn call_many(api: u32, work_ns: u64, count: u64) -> i32 {
    for _ in 0..count {
        if call(api, work_ns) != 0 {
            return -1;
        }
    }
    0
}

/// One launch call of simulated API `api` (a LAUNCH-family entry) taking `host_ns` on the host,
/// on (this thread's device, `stream`), running `spec` on the device. Returns 0, or -1 if `api`
/// is unknown or no launch.
pub fn launch(api: u32, host_ns: u64, stream: u32, spec: CallSpec) -> i32 {
    let Some(a) = apis::table().get(api as usize) else { return -1 };
    if a.domain != MSPTI_CB_DOMAIN_RUNTIME || !(10..=14).contains(&a.cbid) {
        return -1;
    }
    let before = device::thread_stream();
    device::set_thread_stream(stream);
    device::set_next(spec);
    let rc = call(api, host_ns);
    device::set_thread_stream(before);
    rc
}

/// One call of simulated API `api` taking `host_ns` that moves `bytes`: a copy (`copy_kind` a
/// `msptiActivityMemcpyKind`, 0 for the API's usual direction), a memset, an allocation or free,
/// or a collective over `ranks` ranks, on this thread's stream. Returns 0, or -1 if unknown.
pub fn call_bytes(api: u32, host_ns: u64, bytes: u64, copy_kind: u32, ranks: u32) -> i32 {
    if apis::table().get(api as usize).is_none() {
        return -1;
    }
    device::set_next(CallSpec { bytes, copy_kind, ranks: ranks.max(1), ..CallSpec::default() });
    call(api, host_ns)
}

/// `aclrtSynchronizeStream` of this thread's stream: the call's host time is `host_ns` or, if
/// longer, until the stream's last task ends (the virtual clock jumps there; the real one waits);
/// every call of the API waits so (`call`).
pub fn synchronize(host_ns: u64) -> i32 {
    let Some(api) = apis::find("aclrtSynchronizeStream") else { return -1 };
    call(api, host_ns)
}

/// One collective of simulated HCCL API `api` taking `host_ns` on the host: `count` elements of
/// `HcclDataType` `data_type` over `ranks` ranks, on this thread's stream (as `HcclAllReduce`'s
/// arguments give them). Returns 0, or -1 if `api` is no HCCL API or `data_type` is unknown.
pub fn collective(api: u32, host_ns: u64, count: u64, data_type: u32, ranks: u32) -> i32 {
    let Some(a) = apis::table().get(api as usize) else { return -1 };
    let Some(size) = cann::data_type_bytes(data_type) else { return -1 };
    if a.domain != MSPTI_CB_DOMAIN_HCCL {
        return -1;
    }
    let bytes = count.saturating_mul(size);
    device::set_next(CallSpec { bytes, data_type, ranks: ranks.max(1), ..CallSpec::default() });
    call(api, host_ns)
}
