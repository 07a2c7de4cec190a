//! The C face's argument conversions: C strings as Rust strings, or as the process-lifetime
//! names records carry.

use std::ffi::{c_char, CStr};

use crate::ground::intern::intern_c;

/// A C string argument, or None for NULL.
///
/// # Safety
/// `s` must be NULL or a NUL-terminated string.
pub(crate) unsafe fn string_arg(s: *const c_char) -> Option<String> {
    // SAFETY: NULL or a C string (this function's contract).
    unsafe { cstr_arg(s) }.map(|c| c.to_string_lossy().into_owned())
}

/// A C string argument as it is, or None for NULL.
///
/// # Safety
/// `s` must be NULL or a NUL-terminated string that outlives the returned value's use.
pub(crate) unsafe fn cstr_arg<'a>(s: *const c_char) -> Option<&'a CStr> {
    // SAFETY: a non-NULL C string from the caller (this function's contract).
    (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) })
}

/// A C string argument as a name that lives for the process (interned), or None for NULL.
///
/// # Safety
/// `s` must be NULL or a NUL-terminated string.
pub(crate) unsafe fn name_arg(s: *const c_char) -> Option<&'static CStr> {
    // SAFETY: NULL or a C string (this function's contract); it is copied before returning.
    unsafe { cstr_arg(s) }.map(intern_c)
}
