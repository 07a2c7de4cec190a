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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use mspti_abi::*;

use crate::activity;
use crate::clock;
use crate::device;
use crate::locks::lock;

static MARK_ID: AtomicU64 = AtomicU64::new(0);

/// Take `n` consecutive mark ids; returns the first.
pub fn take_mark_ids(n: u64) -> u64 {
    MARK_ID.fetch_add(n, Ordering::Relaxed) + 1
}

struct Domain {
    name: &'static CStr,
    live: AtomicBool,
}

/// Every domain handle ever created (never freed, so a stale handle stays harmless).
static DOMAINS: Mutex<Vec<&'static Domain>> = Mutex::new(Vec::new());

#[derive(Clone, Copy)]
struct Range {
    domain: &'static CStr,
    stream: Option<u32>,
}
static RANGES: Mutex<Option<HashMap<u64, Range>>> = Mutex::new(None);

const DEFAULT_DOMAIN: &CStr = c"default";

/// MSTX's locks, for the fork handlers: neither is held while taking another lock.
pub(crate) fn leaf_guards() -> Vec<Box<dyn std::any::Any>> {
    vec![Box::new(lock(&DOMAINS)), Box::new(lock(&RANGES))]
}

pub fn reset() {
    MARK_ID.store(0, Ordering::Relaxed);
    *lock(&RANGES) = None;
    for d in lock(&DOMAINS).iter() {
        d.live.store(false, Ordering::Relaxed);
    }
}

fn active(domain: &CStr) -> bool {
    activity::subscribed()
        && activity::kind_enabled(MSPTI_ACTIVITY_KIND_MARKER)
        && activity::marker_domain_enabled(&domain.to_string_lossy())
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
        Ok(text) => activity::intern(text),
        Err(_) => activity::intern(&String::from_utf8_lossy(bytes)),
    })
}

/// Resolve a domain handle without dereferencing anything unknown.
fn domain_of(handle: MstxDomainHandle) -> Option<&'static CStr> {
    let g = lock(&DOMAINS);
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
        timestamp: activity::host_now(),
        id,
        object_id: MsptiIdPair::pt(activity::pid(), activity::gettid()),
        name: name.as_ptr(),
        domain: domain.as_ptr(),
        _pad: [0; 4],
    };
    activity::record(MSPTI_ACTIVITY_KIND_MARKER, &r);
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
        device::submit_marker(s, flag, id, activity::host_now());
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
    lock(&RANGES).get_or_insert_with(HashMap::new).insert(id, Range { domain, stream: s });
    host_record(flag, id, name, domain);
    if let Some(s) = s {
        device::submit_marker(s, flag, id, activity::host_now());
    }
    id
}

pub fn range_end(id: MstxRangeId) {
    let _call = clock::begin_call();
    let Some(r) = lock(&RANGES).as_mut().and_then(|m| m.remove(&id)) else { return };
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
        device::submit_marker(s, flag, id, activity::host_now());
    }
}

// ---------------------------------------------------------------------------------------------
// The exported MSTX functions.

/// # Safety
/// `message` must be NULL or a readable C string; `stream` NULL or a simulator stream handle.
#[no_mangle]
pub unsafe extern "C" fn mstxMarkA(message: *const c_char, stream: AclrtStream) {
    mark(DEFAULT_DOMAIN, message, stream);
}

/// # Safety
/// As `mstxMarkA`.
#[no_mangle]
pub unsafe extern "C" fn mstxRangeStartA(message: *const c_char, stream: AclrtStream) -> MstxRangeId {
    range_start(DEFAULT_DOMAIN, message, stream)
}

#[no_mangle]
pub extern "C" fn mstxRangeEnd(id: MstxRangeId) {
    range_end(id);
}

/// A domain handle, or NULL for NULL or "default". A name that starts with an existing domain's
/// name gets that domain (MSPTI compares `strncmp(existing, new, strlen(existing))`).
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mstxDomainCreateA(name: *const c_char) -> MstxDomainHandle {
    if name.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: a non-NULL C string from the caller.
    let n = unsafe { CStr::from_ptr(name) }.to_bytes();
    if n == DEFAULT_DOMAIN.to_bytes() {
        return std::ptr::null_mut();
    }
    let mut g = lock(&DOMAINS);
    if let Some(d) = g.iter().find(|d| d.live.load(Ordering::Relaxed) && n.starts_with(d.name.to_bytes())) {
        return (*d as *const Domain).cast_mut().cast();
    }
    let d: &'static Domain = Box::leak(Box::new(Domain {
        name: activity::intern(&String::from_utf8_lossy(n)),
        live: AtomicBool::new(true),
    }));
    g.push(d);
    (d as *const Domain).cast_mut().cast()
}

#[no_mangle]
pub extern "C" fn mstxDomainDestroy(domain: MstxDomainHandle) {
    let g = lock(&DOMAINS);
    if let Some(d) = g.iter().find(|d| std::ptr::eq(**d as *const Domain, domain.cast::<Domain>())) {
        d.live.store(false, Ordering::Relaxed);
    }
}

/// # Safety
/// As `mstxMarkA`; `domain` may be anything (unknown handles are ignored).
#[no_mangle]
pub unsafe extern "C" fn mstxDomainMarkA(
    domain: MstxDomainHandle,
    message: *const c_char,
    stream: AclrtStream,
) {
    if let Some(d) = domain_of(domain) {
        mark(d, message, stream);
    }
}

/// # Safety
/// As `mstxDomainMarkA`.
#[no_mangle]
pub unsafe extern "C" fn mstxDomainRangeStartA(
    domain: MstxDomainHandle,
    message: *const c_char,
    stream: AclrtStream,
) -> MstxRangeId {
    domain_of(domain).map_or(MSTX_INVALID_ID, |d| range_start(d, message, stream))
}

#[no_mangle]
pub extern "C" fn mstxDomainRangeEnd(domain: MstxDomainHandle, id: MstxRangeId) {
    if domain_of(domain).is_some() {
        range_end(id);
    }
}
