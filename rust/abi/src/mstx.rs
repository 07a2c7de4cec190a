//! MSTX (`ms_tools_ext.h`, `libms_tools_ext.so`) as C sees it: the types and the function-pointer
//! types of the core and domain functions (docs/reference.md, "MSTX").
//! The functions do nothing unless a tool (MSPTI, while subscribed and MARKER enabled) fills them.

use core::ffi::{c_char, c_void};

/// `mstxRangeId`.
pub type MstxRangeId = u64;
/// `MSTX_INVALID_ID`: what a range start returns when it does nothing.
pub const MSTX_INVALID_ID: MstxRangeId = 0;

/// `aclrtStream` (`void *`, may be NULL: a host-only mark).
pub type AclrtStream = *mut c_void;

/// Opaque `struct mstxDomainRegistration_st`; only pointers cross the ABI.
#[repr(C)]
pub struct MstxDomainRegistration {
    _private: [u8; 0],
}
/// `mstxDomainHandle_t`.
pub type MstxDomainHandle = *mut MstxDomainRegistration;

/// MSPTI rejects a NULL message or one of this many bytes or more (`strnlen(msg, 255) == 255`).
pub const MSTX_MAX_MESSAGE_LEN: usize = 255;
/// The name of the built-in domain; creating a domain of that name fails.
pub const MSTX_DEFAULT_DOMAIN: &str = "default";

pub type FnMstxMarkA = unsafe extern "C" fn(message: *const c_char, stream: AclrtStream);
pub type FnMstxRangeStartA = unsafe extern "C" fn(message: *const c_char, stream: AclrtStream) -> MstxRangeId;
pub type FnMstxRangeEnd = unsafe extern "C" fn(id: MstxRangeId);
pub type FnMstxDomainCreateA = unsafe extern "C" fn(name: *const c_char) -> MstxDomainHandle;
pub type FnMstxDomainDestroy = unsafe extern "C" fn(domain: MstxDomainHandle);
pub type FnMstxDomainMarkA =
    unsafe extern "C" fn(domain: MstxDomainHandle, message: *const c_char, stream: AclrtStream);
pub type FnMstxDomainRangeStartA = unsafe extern "C" fn(
    domain: MstxDomainHandle,
    message: *const c_char,
    stream: AclrtStream,
) -> MstxRangeId;
pub type FnMstxDomainRangeEnd = unsafe extern "C" fn(domain: MstxDomainHandle, id: MstxRangeId);
