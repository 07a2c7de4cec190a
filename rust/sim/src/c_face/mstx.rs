//! MSTX (`libms_tools_ext.so`, `ms_tools_ext.h`) with MSPTI's handlers injected: this library
//! stands in for both (`model::mstx`).

use std::ffi::{c_char, CStr};

use mspti_abi::*;

use crate::model::mstx::{self, DEFAULT_DOMAIN};

/// # Safety
/// `message` must be NULL or a readable C string; `stream` NULL or a simulator stream handle.
#[no_mangle]
pub unsafe extern "C" fn mstxMarkA(message: *const c_char, stream: AclrtStream) {
    mstx::mark(DEFAULT_DOMAIN, message, stream);
}

/// # Safety
/// As `mstxMarkA`.
#[no_mangle]
pub unsafe extern "C" fn mstxRangeStartA(message: *const c_char, stream: AclrtStream) -> MstxRangeId {
    mstx::range_start(DEFAULT_DOMAIN, message, stream)
}

#[no_mangle]
pub extern "C" fn mstxRangeEnd(id: MstxRangeId) {
    mstx::range_end(id);
}

/// A domain handle, or NULL for NULL or "default" (see `mstx::domain_create`).
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
    mstx::domain_create(n)
}

#[no_mangle]
pub extern "C" fn mstxDomainDestroy(domain: MstxDomainHandle) {
    mstx::domain_destroy(domain);
}

/// # Safety
/// As `mstxMarkA`; `domain` may be anything (unknown handles are ignored).
#[no_mangle]
pub unsafe extern "C" fn mstxDomainMarkA(
    domain: MstxDomainHandle,
    message: *const c_char,
    stream: AclrtStream,
) {
    if let Some(d) = mstx::domain_of(domain) {
        mstx::mark(d, message, stream);
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
    mstx::domain_of(domain).map_or(MSTX_INVALID_ID, |d| mstx::range_start(d, message, stream))
}

#[no_mangle]
pub extern "C" fn mstxDomainRangeEnd(domain: MstxDomainHandle, id: MstxRangeId) {
    if mstx::domain_of(domain).is_some() {
        mstx::range_end(id);
    }
}
