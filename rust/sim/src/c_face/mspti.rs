//! The MSPTI callback API and its version and clock functions, as `mspti_callback.h` and
//! `mspti_result.h` declare them; the rules are the model's (`model::callbacks`).

use core::ffi::{c_char, c_void};

use mspti_abi::*;

use crate::ground::clock::host_now;
use crate::ground::era::SIM_MSPTI_VERSION;
use crate::ground::state::*;
use crate::model::callbacks;

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
    match callbacks::subscribe(callback, userdata) {
        Ok(s) => {
            // SAFETY: checked non-NULL above; the caller provides the storage.
            unsafe { *subscriber = s };
            MSPTI_SUCCESS
        }
        Err(code) => code,
    }
}

#[no_mangle]
pub extern "C" fn msptiUnsubscribe(subscriber: MsptiSubscriberHandle) -> MsptiResult {
    let f = fault(FAULT_UNSUBSCRIBE);
    if f != 0 {
        return f;
    }
    callbacks::unsubscribe(subscriber)
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
    callbacks::enable_callback(enable != 0, subscriber, domain, cbid)
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
    callbacks::enable_domain(enable != 0, subscriber, domain)
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
    let Some(s) = callbacks::result_string(result) else { return MSPTI_ERROR_INVALID_PARAMETER };
    // SAFETY: checked non-NULL above.
    unsafe { *str_ = s.as_ptr() };
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
    unsafe { *timestamp = host_now() };
    MSPTI_SUCCESS
}
