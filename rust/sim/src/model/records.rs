//! The records of host calls, external correlation and marker domains: what MSPTI's reporters
//! write besides the device's records (`model::device`) and the markers (`model::mstx`).

use std::collections::{BTreeMap, HashSet};
use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};

use mspti_abi::*;

use crate::ground::era::era;
use crate::ground::ids::{current_correlation, take_correlation};
use crate::ground::intern::intern;
use crate::ground::locks::{ForkLock, Rank};
use crate::ground::process::{gettid, pid};
use crate::ground::state::{hooked, kind_enabled};
use crate::model::buffers::record;
use crate::model::cann;

// ---------------------------------------------------------------------------------------------
// External correlation.

/// `ExternalCorrelationReporter` (upstream `csrc/activity/ascend/reporter/
/// external_correlation_reporter.cpp`): one process-global stack per kind (any value: no kind is
/// checked), in a map ordered by kind, under one mutex (not per thread, whatever the header says);
/// a kind whose stack empties leaves the map.
static EXTERNAL: ForkLock<BTreeMap<u32, Vec<u64>>> = ForkLock::new(Rank::External, BTreeMap::new());

/// `UpdateAndReportCorrelationId`: take the next id as this thread's, and write one
/// EXTERNAL_CORRELATION record per kind with a pushed id.
pub fn bump_correlation() -> u64 {
    let id = take_correlation();
    if kind_enabled(MSPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
        let tops: Vec<(u32, u64)> =
            EXTERNAL.lock().iter().filter_map(|(&k, s)| s.last().map(|&top| (k, top))).collect();
        for (k, top) in tops {
            let r = MsptiActivityExternalCorrelation {
                kind: MSPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                external_kind: k,
                external_id: top,
                correlation_id: id,
            };
            record(MSPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, &r);
        }
    }
    id
}

/// `msptiActivityPushExternalCorrelationId`: any kind is accepted.
pub fn push_external(kind: MsptiExternalCorrelationKind, id: u64) {
    EXTERNAL.lock().entry(kind).or_default().push(id);
}

/// `msptiActivityPopExternalCorrelationId`: the top of `kind`'s stack, or None when it is empty.
pub fn pop_external(kind: MsptiExternalCorrelationKind) -> Option<u64> {
    let mut g = EXTERNAL.lock();
    let stack = g.get_mut(&kind)?;
    let id = stack.pop().unwrap_or_default();
    if stack.is_empty() {
        g.remove(&kind);
    }
    Some(id)
}

// ---------------------------------------------------------------------------------------------
// Marker domains (MSTX), enabled by default; may be disabled before they exist.

static DISABLED_DOMAINS: ForkLock<Option<HashSet<String>>> = ForkLock::new(Rank::MarkerDomains, None);

pub fn marker_domain_enabled(name: &str) -> bool {
    !matches!(DISABLED_DOMAINS.lock().as_ref(), Some(s) if s.contains(name))
}

/// `msptiActivityEnableMarkerDomain` (`on`) or `msptiActivityDisableMarkerDomain`.
pub fn set_marker_domain(name: String, on: bool) {
    let mut g = DISABLED_DOMAINS.lock();
    if on {
        if let Some(s) = g.as_mut() {
            s.remove(&name);
        }
    } else {
        g.get_or_insert_with(HashSet::new).insert(name);
    }
}

/// External stacks emptied and every marker domain enabled (for tests).
pub fn reset() {
    EXTERNAL.lock().clear();
    *DISABLED_DOMAINS.lock() = None;
}

// ---------------------------------------------------------------------------------------------
// Records of host calls.

/// The runtime's internal name of an API in RUNTIME_API records (not the callback's
/// `functionName`). The reference names "LaunchKernelV2", "MemCopySync" and "DevMalloc"; the
/// others are INFERENCE, built from the callback id.
pub fn runtime_api_name(cbid: u32, function_name: &str) -> &'static CStr {
    let n = match cbid {
        10 if function_name.ends_with("V2") => "LaunchKernelV2",
        10 => "KernelLaunch",
        15 => "DevMalloc",
        16 => "DevFree",
        22 => "MemCopySync",
        24 => "MemcpyAsync",
        27 => "MemSetSync",
        28 => "MemsetAsync",
        9 => "StreamSynchronize",
        _ => {
            let short = callback_info(MSPTI_CB_DOMAIN_RUNTIME, cbid).map_or("Unknown", |c| c.short);
            let camel: String = short
                .split('_')
                .map(|w| {
                    let mut cs = w.chars();
                    cs.next().map_or(String::new(), |f| f.to_string() + &cs.as_str().to_ascii_lowercase())
                })
                .collect();
            return intern(&camel);
        }
    };
    intern(n)
}

pub fn api_record(kind: MsptiActivityKind, name: &'static CStr, start: u64, end: u64) {
    if !kind_enabled(kind) || !era().has_kind(kind) {
        return;
    }
    let r = MsptiActivityApi {
        kind,
        start,
        end,
        pt: MsptiIdPair::pt(pid(), gettid()),
        correlation_id: current_correlation(),
        name: name.as_ptr(),
        _pad: [0; 4],
    };
    record(kind, &r);
}

static NEXT_ADDRESS: AtomicU64 = AtomicU64::new(0x1240_0000_0000);

/// What one hooked host call did, for its records: its window [t0, t1] on the host, the
/// device and stream it went to, and what it moved (a copy's kind) or ran (an operator).
pub struct HostCall {
    pub domain: u32,
    pub cbid: u32,
    pub function_name: &'static CStr,
    pub t0: u64,
    pub t1: u64,
    pub device: u32,
    pub stream: u32,
    pub bytes: u64,
    pub copy_kind: u32,
    pub node: Option<&'static CStr>,
}

/// The records of one hooked host call, made after its device work (`model::call`), between its
/// host work and its EXIT callback (as MSPTI's memory records are): MEMCPY / MEMSET / MEMORY
/// records with the call's host window, then ACL_API and RUNTIME_API records (26.x on) for
/// runtime calls, API / NODE_API records for node-level (operator) calls, and the API record
/// HCCL reports for a collective under its op name; all carry the thread's id after the
/// kernels' bumps.
pub fn host_call(call: &HostCall) {
    let HostCall { domain, cbid, function_name, t0, t1, device: dev, stream, .. } = *call;
    let e = era();
    let memory_reported = e == AbiEra::NewestDev || hooked();
    if domain == MSPTI_CB_DOMAIN_HCCL {
        api_record(MSPTI_ACTIVITY_KIND_API, cann::comm_op_name(cbid), t0, t1);
    } else if domain == MSPTI_CB_DOMAIN_RUNTIME {
        match cbid {
            22..=26 if memory_reported && kind_enabled(MSPTI_ACTIVITY_KIND_MEMCPY) => {
                let copy_kind = match (call.copy_kind, cbid) {
                    (k, _) if k != MSPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN => k,
                    (_, 22) => MSPTI_ACTIVITY_MEMCPY_KIND_DTOH,
                    _ => MSPTI_ACTIVITY_MEMCPY_KIND_HTOD,
                };
                let r = MsptiActivityMemcpy {
                    kind: MSPTI_ACTIVITY_KIND_MEMCPY,
                    copy_kind,
                    bytes: call.bytes,
                    start: t0,
                    end: t1,
                    device_id: dev,
                    stream_id: stream,
                    correlation_id: current_correlation(),
                    is_async: u8::from(cbid == 24 || cbid == 26),
                    _pad: [0; 7],
                };
                record(MSPTI_ACTIVITY_KIND_MEMCPY, &r);
            }
            27 | 28 if memory_reported && kind_enabled(MSPTI_ACTIVITY_KIND_MEMSET) => {
                let r = MsptiActivityMemset {
                    kind: MSPTI_ACTIVITY_KIND_MEMSET,
                    value: 0,
                    bytes: call.bytes,
                    start: t0,
                    end: t1,
                    device_id: dev,
                    stream_id: stream,
                    correlation_id: current_correlation(),
                    is_async: u8::from(cbid == 28),
                    _pad: [0; 7],
                };
                record(MSPTI_ACTIVITY_KIND_MEMSET, &r);
            }
            15 | 16 | 17 | 18 | 19 | 32 | 33
                if memory_reported && kind_enabled(MSPTI_ACTIVITY_KIND_MEMORY) =>
            {
                let release = matches!(cbid, 16 | 18 | 33);
                let host = matches!(cbid, 17 | 18);
                let r = MsptiActivityMemory {
                    kind: MSPTI_ACTIVITY_KIND_MEMORY,
                    memory_operation_type: if release {
                        MSPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE
                    } else {
                        MSPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION
                    },
                    memory_kind: match (host, e) {
                        (false, _) => MSPTI_ACTIVITY_MEMORY_DEVICE,
                        (true, AbiEra::NewestDev) => MSPTI_ACTIVITY_MEMORY_HOST,
                        (true, _) => MSPTI_ACTIVITY_MEMORY_UNKNOWN,
                    },
                    correlation_id: current_correlation(),
                    start: t0,
                    end: t1,
                    address: NEXT_ADDRESS
                        .fetch_add(call.bytes.max(512).next_multiple_of(512), Ordering::Relaxed),
                    bytes: call.bytes,
                    process_id: pid(),
                    device_id: dev,
                    stream_id: MSPTI_INVALID_STREAM_ID,
                };
                record(MSPTI_ACTIVITY_KIND_MEMORY, &r);
            }
            _ => {}
        }
        if e >= AbiEra::Mspti26 {
            api_record(MSPTI_ACTIVITY_KIND_ACL_API, function_name, t0, t1);
            if kind_enabled(MSPTI_ACTIVITY_KIND_RUNTIME_API) {
                let n = runtime_api_name(cbid, &function_name.to_string_lossy());
                api_record(MSPTI_ACTIVITY_KIND_RUNTIME_API, n, t0, t1);
            }
        }
    }
    if let Some(node) = call.node {
        api_record(MSPTI_ACTIVITY_KIND_API, node, t0, t1);
        api_record(MSPTI_ACTIVITY_KIND_NODE_API, node, t0, t1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_api_names_are_the_runtimes_not_the_callbacks() {
        assert_eq!(runtime_api_name(10, "aclrtLaunchKernelV2").to_bytes(), b"LaunchKernelV2");
        assert_eq!(runtime_api_name(22, "aclrtMemcpy").to_bytes(), b"MemCopySync");
        assert_eq!(runtime_api_name(15, "aclrtMalloc").to_bytes(), b"DevMalloc");
        assert_eq!(runtime_api_name(1, "aclrtSetDevice").to_bytes(), b"DeviceSet");
    }
}
