//! The simulated MSTX (`libms_tools_ext.so`, `ms_tools_ext.h`) with MSPTI's handlers injected:
//! this library stands in for both, so `mstx*` calls produce MARKER records directly.
//!
//! As MSPTI's `mstx_parser.cpp` (upstream `csrc/activity/ascend/parser/`): nothing happens (a range start
//! returns 0) unless a subscriber exists, MARKER is enabled and the domain is enabled; a NULL
//! message or one of 255 bytes or more is rejected. A host record (flag 1/2/4, or 8/16/32 with a
//! stream) is written synchronously on the calling thread with its name and domain; with a stream,
//! a device record with the same id, `ds = {device, stream}` and an empty name and domain follows
//! later from the channel. Range END records (host and device) have an empty name and domain.
//! Ids come from one global counter shared with HCCL's inner marks. A range may end on another
//! thread; an unknown id does nothing.

use std::collections::HashMap;
use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicBool, Ordering};

use mspti_abi::*;

use crate::ground::clock::{self, host_now};
use crate::ground::ids::take_mark_ids;
use crate::ground::intern::intern;
use crate::ground::locks::{ForkLock, Rank};
use crate::ground::process::{gettid, pid};
use crate::ground::state::{kind_enabled, subscribed};
use crate::model::buffers::record;
use crate::model::device;
use crate::model::records::marker_domain_enabled;

struct Domain {
    name: &'static CStr,
    live: AtomicBool,
}

/// Every domain handle ever created (never freed, so a stale handle stays harmless).
static DOMAINS: ForkLock<Vec<&'static Domain>> = ForkLock::new(Rank::MstxDomains, Vec::new());

#[derive(Clone, Copy)]
struct Range {
    domain: &'static CStr,
    stream: Option<u32>,
}
static RANGES: ForkLock<Option<HashMap<u64, Range>>> = ForkLock::new(Rank::MstxRanges, None);

/// The domain of `mstxMarkA`, `mstxRangeStartA` and a NULL domain handle.
pub const DEFAULT_DOMAIN: &CStr = c"default";

/// Open ranges forgotten and every domain handle dead (for tests; the mark ids are reset with
/// the other ids, `ids::reset`).
pub fn reset() {
    *RANGES.lock() = None;
    for d in DOMAINS.lock().iter() {
        d.live.store(false, Ordering::Relaxed);
    }
}

fn active(domain: &CStr) -> bool {
    subscribed()
        && kind_enabled(MSPTI_ACTIVITY_KIND_MARKER)
        && marker_domain_enabled(&domain.to_string_lossy())
}

/// The message as MSPTI caches it, or None when it is rejected.
fn message(msg: *const c_char) -> Option<&'static CStr> {
    if msg.is_null() {
        return None;
    }
    let mut len = 0;
    loop {
        if len == MSTX_MAX_MESSAGE_LEN {
            return None;
        }
        // SAFETY: a non-NULL C string from the caller, read byte by byte up to its NUL (strnlen
        // with MSPTI's limit), so nothing past the terminator is touched.
        if unsafe { *msg.cast::<u8>().add(len) } == 0 {
            break;
        }
        len += 1;
    }
    // SAFETY: the `len` bytes before the NUL were just read one by one.
    let bytes = unsafe { std::slice::from_raw_parts(msg.cast::<u8>(), len) };
    Some(match std::str::from_utf8(bytes) {
        Ok(text) => intern(text),
        Err(_) => intern(&String::from_utf8_lossy(bytes)),
    })
}

/// Resolve a domain handle without dereferencing anything unknown.
pub fn domain_of(handle: MstxDomainHandle) -> Option<&'static CStr> {
    let g = DOMAINS.lock();
    g.iter()
        .find(|d| {
            std::ptr::eq(**d as *const Domain, handle.cast::<Domain>()) && d.live.load(Ordering::Relaxed)
        })
        .map(|d| d.name)
}

fn host_record(flag: u32, id: u64, name: &'static CStr, domain: &'static CStr) {
    let r = MsptiActivityMarker {
        kind: MSPTI_ACTIVITY_KIND_MARKER,
        flag,
        source_kind: MSPTI_ACTIVITY_SOURCE_KIND_HOST,
        timestamp: host_now(),
        id,
        object_id: MsptiIdPair::pt(pid(), gettid()),
        name: name.as_ptr(),
        domain: domain.as_ptr(),
        _pad: [0; 4],
    };
    record(MSPTI_ACTIVITY_KIND_MARKER, &r);
}

fn stream_arg(stream: AclrtStream) -> Option<u32> {
    (!stream.is_null()).then(|| device::stream_of(stream))
}

pub fn mark(domain: &'static CStr, msg: *const c_char, stream: AclrtStream) {
    let _call = clock::begin_call();
    if !active(domain) {
        return;
    }
    let Some(name) = message(msg) else { return };
    let id = take_mark_ids(1);
    let s = stream_arg(stream);
    let flag = if s.is_some() {
        MSPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS_WITH_DEVICE
    } else {
        MSPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS
    };
    host_record(flag, id, name, domain);
    if let Some(s) = s {
        device::submit_marker(s, flag, id, host_now());
    }
}

pub fn range_start(domain: &'static CStr, msg: *const c_char, stream: AclrtStream) -> MstxRangeId {
    let _call = clock::begin_call();
    if !active(domain) {
        return MSTX_INVALID_ID;
    }
    let Some(name) = message(msg) else { return MSTX_INVALID_ID };
    let id = take_mark_ids(1);
    let s = stream_arg(stream);
    let flag = if s.is_some() {
        MSPTI_ACTIVITY_FLAG_MARKER_START_WITH_DEVICE
    } else {
        MSPTI_ACTIVITY_FLAG_MARKER_START
    };
    RANGES.lock().get_or_insert_with(HashMap::new).insert(id, Range { domain, stream: s });
    host_record(flag, id, name, domain);
    if let Some(s) = s {
        device::submit_marker(s, flag, id, host_now());
    }
    id
}

pub fn range_end(id: MstxRangeId) {
    let _call = clock::begin_call();
    let Some(r) = RANGES.lock().as_mut().and_then(|m| m.remove(&id)) else { return };
    if !active(r.domain) {
        return;
    }
    let flag = if r.stream.is_some() {
        MSPTI_ACTIVITY_FLAG_MARKER_END_WITH_DEVICE
    } else {
        MSPTI_ACTIVITY_FLAG_MARKER_END
    };
    host_record(flag, id, c"", c"");
    if let Some(s) = r.stream {
        device::submit_marker(s, flag, id, host_now());
    }
}

/// `mstxDomainCreateA` of the name `n` (not "default"): a domain handle. A name that starts with
/// an existing domain's name gets that domain (MSPTI compares `strncmp(existing, new,
/// strlen(existing))`).
pub fn domain_create(n: &[u8]) -> MstxDomainHandle {
    let mut g = DOMAINS.lock();
    if let Some(d) = g.iter().find(|d| d.live.load(Ordering::Relaxed) && n.starts_with(d.name.to_bytes())) {
        return (*d as *const Domain).cast_mut().cast();
    }
    let d: &'static Domain = Box::leak(Box::new(Domain {
        name: intern(&String::from_utf8_lossy(n)),
        live: AtomicBool::new(true),
    }));
    g.push(d);
    (d as *const Domain).cast_mut().cast()
}

/// `mstxDomainDestroy`: the handle stays harmless (unknown handles are ignored).
pub fn domain_destroy(domain: MstxDomainHandle) {
    let g = DOMAINS.lock();
    if let Some(d) = g.iter().find(|d| std::ptr::eq(**d as *const Domain, domain.cast::<Domain>())) {
        d.live.store(false, Ordering::Relaxed);
    }
}
