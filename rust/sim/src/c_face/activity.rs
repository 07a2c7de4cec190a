//! The MSPTI Activity API, as `mspti_activity.h` declares it: the buffers (`model::buffers`),
//! the switches (`model::activity`), external correlation and marker domains
//! (`model::records`). A function a real library of the current era lacks returns
//! `MSPTI_ERROR_INNER` without effect (`era::SYMBOLS`).

use std::ffi::{c_char, c_void};

use mspti_abi::*;

use crate::c_face::args::string_arg;
use crate::ground::clock;
use crate::ground::era::exists_since;
use crate::model::{activity, buffers, records};

#[no_mangle]
pub extern "C" fn msptiActivityRegisterCallbacks(
    func_buffer_requested: MsptiBuffersCallbackRequestFunc,
    func_buffer_completed: MsptiBuffersCallbackCompleteFunc,
) -> MsptiResult {
    if func_buffer_requested.is_none() || func_buffer_completed.is_none() {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    buffers::register_callbacks(func_buffer_requested, func_buffer_completed);
    MSPTI_SUCCESS
}

#[no_mangle]
pub extern "C" fn msptiActivityEnable(kind: MsptiActivityKind) -> MsptiResult {
    activity::enable(kind)
}

#[no_mangle]
pub extern "C" fn msptiActivityDisable(kind: MsptiActivityKind) -> MsptiResult {
    activity::disable(kind)
}

#[no_mangle]
pub extern "C" fn msptiActivityIsEnabled(kind: MsptiActivityKind) -> bool {
    activity::is_enabled(kind)
}

/// # Safety
/// `buffer` must hold `valid_buffer_size_bytes` readable bytes; `record` must be writable.
#[no_mangle]
pub unsafe extern "C" fn msptiActivityGetNextRecord(
    buffer: *mut u8,
    valid_buffer_size_bytes: usize,
    record: *mut *mut MsptiActivity,
) -> MsptiResult {
    if buffer.is_null() || record.is_null() {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    // SAFETY: the caller's buffer holds that many valid bytes (C contract).
    match unsafe { buffers::next_record(buffer, valid_buffer_size_bytes) } {
        Ok(r) => {
            // SAFETY: checked non-NULL above.
            unsafe { *record = r };
            MSPTI_SUCCESS
        }
        Err(code) => code,
    }
}

#[no_mangle]
pub extern "C" fn msptiActivityFlushAll(_flag: u32) -> MsptiResult {
    buffers::flush_all();
    MSPTI_SUCCESS
}

#[no_mangle]
pub extern "C" fn msptiActivityFlushPeriod(time: u32) -> MsptiResult {
    buffers::flush_period(time);
    MSPTI_SUCCESS
}

#[no_mangle]
pub extern "C" fn msptiActivityPushExternalCorrelationId(
    kind: MsptiExternalCorrelationKind,
    id: u64,
) -> MsptiResult {
    records::push_external(kind, id);
    MSPTI_SUCCESS
}

/// # Safety
/// `last_id`, when not NULL, must point to a writable u64.
#[no_mangle]
pub unsafe extern "C" fn msptiActivityPopExternalCorrelationId(
    kind: MsptiExternalCorrelationKind,
    last_id: *mut u64,
) -> MsptiResult {
    if last_id.is_null() {
        // The real library returns 1 and does not pop, whatever the header says.
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    let Some(id) = records::pop_external(kind) else { return MSPTI_ERROR_QUEUE_EMPTY };
    // SAFETY: checked non-NULL above.
    unsafe { *last_id = id };
    MSPTI_SUCCESS
}

/// # Safety
/// `name` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn msptiActivityEnableMarkerDomain(name: *const c_char) -> MsptiResult {
    // SAFETY: NULL or a C string (this function's contract).
    let Some(n) = (unsafe { string_arg(name) }) else { return MSPTI_ERROR_INVALID_PARAMETER };
    records::set_marker_domain(n, true);
    MSPTI_SUCCESS
}

/// # Safety
/// `name` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn msptiActivityDisableMarkerDomain(name: *const c_char) -> MsptiResult {
    // SAFETY: NULL or a C string (this function's contract).
    let Some(n) = (unsafe { string_arg(name) }) else { return MSPTI_ERROR_INVALID_PARAMETER };
    records::set_marker_domain(n, false);
    MSPTI_SUCCESS
}

/// # Safety
/// `size`, when not NULL, must point to a writable size_t.
#[no_mangle]
pub unsafe extern "C" fn msptiActivityGetStructSize(
    kind: MsptiActivityKind,
    _version: u32,
    size: *mut usize,
) -> MsptiResult {
    if !exists_since(AbiEra::NewestDev) {
        return MSPTI_ERROR_INNER;
    }
    if size.is_null() {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    match record_size(kind) {
        Some(s) => {
            // SAFETY: checked non-NULL above.
            unsafe { *size = s };
            MSPTI_SUCCESS
        }
        None => MSPTI_ERROR_INVALID_KIND,
    }
}

/// # Safety
/// Out pointers, when not NULL, must be writable; `buffer` must hold `*buffer_size` kinds.
#[no_mangle]
pub unsafe extern "C" fn msptiActivityGetEnabledKinds(
    _subscriber: MsptiSubscriberHandle,
    buffer: *mut MsptiActivityKind,
    buffer_size: *mut u32,
    enabled_kinds_count: *mut u32,
) -> MsptiResult {
    if !exists_since(AbiEra::NewestDev) {
        return MSPTI_ERROR_INNER;
    }
    if enabled_kinds_count.is_null() {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    let kinds = activity::enabled_kinds();
    // SAFETY: checked non-NULL above.
    unsafe { *enabled_kinds_count = kinds.len() as u32 };
    if buffer.is_null() {
        return MSPTI_SUCCESS;
    }
    if buffer_size.is_null() {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    // SAFETY: checked non-NULL; the caller's buffer holds `*buffer_size` entries.
    let n = unsafe { *buffer_size }.min(kinds.len() as u32) as usize;
    for (i, k) in kinds.iter().take(n).enumerate() {
        // SAFETY: `i < *buffer_size`.
        unsafe { *buffer.add(i) = *k };
    }
    MSPTI_SUCCESS
}

/// # Safety
/// `dropped`, when not NULL, must point to a writable size_t.
#[no_mangle]
pub unsafe extern "C" fn msptiActivityGetNumDroppedRecords(
    _context: *mut c_void,
    _stream_id: u32,
    dropped: *mut usize,
) -> MsptiResult {
    if !exists_since(AbiEra::NewestDev) {
        return MSPTI_ERROR_INNER;
    }
    if dropped.is_null() {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    // SAFETY: checked non-NULL above.
    unsafe { *dropped = buffers::take_dropped() as usize };
    MSPTI_SUCCESS
}

#[no_mangle]
pub extern "C" fn msptiActivityRegisterTimestampCallback(
    callback: MsptiTimestampCallbackFunc,
) -> MsptiResult {
    if !exists_since(AbiEra::NewestDev) {
        return MSPTI_ERROR_INNER;
    }
    clock::set_timestamp_callback(callback);
    MSPTI_SUCCESS
}

#[cfg(test)]
mod tests {
    use crate::ground::era::SYMBOLS;

    #[test]
    fn every_listed_symbol_is_exported_once() {
        let src = [include_str!("activity.rs"), include_str!("mspti.rs"), include_str!("mstx.rs")].concat();
        for (name, _) in SYMBOLS {
            let n = SYMBOLS.iter().filter(|s| s.0 == name).count();
            assert_eq!(n, 1, "{name} listed twice");
            assert!(src.contains(&format!("fn {name}(")), "{name} is listed but not exported");
        }
    }
}
