//! The MSPTI callback API's rules (MSPTI 26.x, upstream `csrc/callback/callback_manager.cpp`):
//! one subscriber, whose subscribe and unsubscribe clear every enable bit; unsubscribe stops the
//! device's profiling first, whatever the handle; the enable calls' checks (`state::check_enable`).

use std::ffi::{c_void, CStr};
use std::sync::atomic::Ordering;

use mspti_abi::*;

use crate::ground::state::{self, Subscriber, ENABLED, SUBSCRIBER, SUBSCRIBE_LOCK};
use crate::model::device;

/// `msptiSubscribe`: the new subscriber's handle, or 2 when there is one already.
pub fn subscribe(
    callback: MsptiCallbackFunc,
    userdata: *mut c_void,
) -> Result<MsptiSubscriberHandle, MsptiResult> {
    let _g = SUBSCRIBE_LOCK.lock();
    if !SUBSCRIBER.load(Ordering::Acquire).is_null() {
        return Err(MSPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
    }
    state::clear_enabled();
    // Leaked on purpose: a callback racing with msptiUnsubscribe may still read it.
    let s = Box::into_raw(Box::new(Subscriber { callback, userdata }));
    SUBSCRIBER.store(s, Ordering::Release);
    Ok(s.cast())
}

/// `msptiUnsubscribe`.
pub fn unsubscribe(subscriber: MsptiSubscriberHandle) -> MsptiResult {
    // MSPTI's ResetAllDevice comes first, whatever the handle: the device's records of work
    // already launched reach the client's buffers now (its FlushAll then hands them over).
    device::stop_and_flush();
    let _g = SUBSCRIBE_LOCK.lock();
    let cur = SUBSCRIBER.load(Ordering::Acquire);
    if cur.is_null() {
        return MSPTI_SUCCESS;
    }
    if !std::ptr::eq(cur.cast::<MsptiSubscriber>(), subscriber) {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    state::clear_enabled();
    SUBSCRIBER.store(std::ptr::null_mut(), Ordering::Release);
    MSPTI_SUCCESS
}

/// `msptiEnableCallback`.
pub fn enable_callback(
    enable: bool,
    subscriber: MsptiSubscriberHandle,
    domain: MsptiCallbackDomain,
    cbid: MsptiCallbackId,
) -> MsptiResult {
    match state::check_enable(subscriber, domain) {
        Err(code) => code,
        Ok(false) => MSPTI_SUCCESS,
        Ok(true) if cbid >= CBID_BITMAP_BITS => MSPTI_ERROR_INVALID_PARAMETER,
        Ok(true) => {
            let bit = 1u64 << cbid;
            let e = &ENABLED[domain as usize];
            if enable {
                e.fetch_or(bit, Ordering::Relaxed);
            } else {
                e.fetch_and(!bit, Ordering::Relaxed);
            }
            MSPTI_SUCCESS
        }
    }
}

/// `msptiEnableDomain`.
pub fn enable_domain(
    enable: bool,
    subscriber: MsptiSubscriberHandle,
    domain: MsptiCallbackDomain,
) -> MsptiResult {
    match state::check_enable(subscriber, domain) {
        Err(code) => code,
        Ok(false) => MSPTI_SUCCESS,
        Ok(true) => {
            let max = domain_max_cbid(domain).unwrap_or(0);
            // Ids 1..=max: INVALID (0) is never set.
            let bits = ((1u64 << (max + 1)) - 1) & !1;
            let e = &ENABLED[domain as usize];
            if enable {
                e.fetch_or(bits, Ordering::Relaxed);
            } else {
                e.fetch_and(!bits, Ordering::Relaxed);
            }
            MSPTI_SUCCESS
        }
    }
}

/// `msptiGetResultString`'s text of `result`, None for a value MSPTI does not define.
pub fn result_string(result: MsptiResult) -> Option<&'static CStr> {
    static STRINGS: [&CStr; 11] = [
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
    match result {
        0..=9 => Some(STRINGS[result as usize]),
        999 => Some(STRINGS[10]),
        _ => None,
    }
}
