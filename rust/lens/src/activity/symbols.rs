//! The Activity API of a loaded MSPTI library, bound at run time. Every symbol is optional: a
//! library without the basic ones cannot collect activity (one clear error says so), the
//! newer ones (struct size, dropped count, timestamps, external correlation, marker domains)
//! are used where present.

use std::ffi::c_char;
use std::path::Path;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

use super::layout::*;
use crate::error::{Error, Result};

pub type FnGetTimestamp = unsafe extern "C" fn(*mut u64) -> u32;
pub type FnMark = unsafe extern "C" fn(*const c_char, *mut core::ffi::c_void);
pub type FnDevicePending = unsafe extern "C" fn() -> u64;

pub struct ActivityApi {
    pub register_callbacks: FnRegisterCallbacks,
    pub enable: FnKind,
    pub disable: FnKind,
    pub flush_all: FnFlushAll,
    pub flush_period: Option<FnFlushPeriod>,
    pub push_external: Option<FnPushExternal>,
    pub pop_external: Option<FnPopExternal>,
    pub enable_marker_domain: Option<FnMarkerDomain>,
    pub disable_marker_domain: Option<FnMarkerDomain>,
    pub struct_size: Option<FnStructSize>,
    pub dropped: Option<FnDropped>,
    pub get_timestamp: Option<FnGetTimestamp>,
    pub register_timestamp: Option<FnRegisterTimestamp>,
    /// The simulator exports MSTX too (one file stands in for libmspti and libms_tools_ext).
    pub mstx_mark: Option<FnMark>,
    /// The simulator's count of device records it still holds (`msimDevicePending`); MSPTI has
    /// no such call, so the settle wait uses it only where it exists.
    pub device_pending: Option<FnDevicePending>,
    /// Which optional symbols exist, by name.
    pub present: Vec<&'static str>,
}

/// Bind the Activity API of the library at `path` (already loaded by the session: this dlopen
/// only takes another reference, and it is never closed).
pub fn bind(path: &Path) -> Result<ActivityApi> {
    // SAFETY: the session already loaded this library (its initialisers have run); opening it
    // again returns the same mapping.
    let opened = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) };
    let lib = opened.map_err(|e| Error::NotALibrary {
        path: path.display().to_string(),
        reason: e.to_string(),
        hint: "The MSPTI library could not be opened again for its Activity API.".to_owned(),
    })?;
    let lib: &'static Library = Box::leak(Box::new(lib));
    let mut present = Vec::new();
    macro_rules! opt {
        ($name:literal, $ty:ty) => {{
            // SAFETY: each symbol has this C type in every MSPTI release that has it
            // (upstream mspti_activity.h; msimDevicePending is the simulator's, rust/sim/src/c_face/);
            // the library is never unloaded.
            let s = unsafe { lib.get::<$ty>($name.as_bytes()) }.ok().map(|s| *s);
            if s.is_some() {
                present.push($name);
            }
            s
        }};
    }
    let register_callbacks = opt!("msptiActivityRegisterCallbacks", FnRegisterCallbacks);
    let enable = opt!("msptiActivityEnable", FnKind);
    let disable = opt!("msptiActivityDisable", FnKind);
    let flush_all = opt!("msptiActivityFlushAll", FnFlushAll);
    let api = ActivityApi {
        register_callbacks: register_callbacks
            .ok_or_else(|| missing(path, "msptiActivityRegisterCallbacks"))?,
        enable: enable.ok_or_else(|| missing(path, "msptiActivityEnable"))?,
        disable: disable.ok_or_else(|| missing(path, "msptiActivityDisable"))?,
        flush_all: flush_all.ok_or_else(|| missing(path, "msptiActivityFlushAll"))?,
        flush_period: opt!("msptiActivityFlushPeriod", FnFlushPeriod),
        push_external: opt!("msptiActivityPushExternalCorrelationId", FnPushExternal),
        pop_external: opt!("msptiActivityPopExternalCorrelationId", FnPopExternal),
        enable_marker_domain: opt!("msptiActivityEnableMarkerDomain", FnMarkerDomain),
        disable_marker_domain: opt!("msptiActivityDisableMarkerDomain", FnMarkerDomain),
        struct_size: opt!("msptiActivityGetStructSize", FnStructSize),
        dropped: opt!("msptiActivityGetNumDroppedRecords", FnDropped),
        get_timestamp: opt!("msptiGetTimestamp", FnGetTimestamp),
        register_timestamp: opt!("msptiActivityRegisterTimestampCallback", FnRegisterTimestamp),
        mstx_mark: opt!("mstxMarkA", FnMark),
        device_pending: opt!("msimDevicePending", FnDevicePending),
        present: Vec::new(),
    };
    Ok(ActivityApi { present, ..api })
}

fn missing(path: &Path, symbol: &'static str) -> Error {
    Error::InvalidArgument(format!(
        "{} has no Activity API ({symbol} is missing), so device activity cannot be collected; \
         use a CANN with MSPTI's Activity API (CANN 8.0.RC3 or later) or Session(library=\"sim\"), \
         or leave activity=[] for host API times only",
        path.display()
    ))
}
