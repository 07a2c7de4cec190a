//! The simulated ACL runtime and HCCL APIs, and the firing of their callbacks.
//!
//! Each simulated API is one (domain, cbid, function) of `cbids.csv`. Its `functionName` depends
//! on the fidelity mode: the MSPTI 26.x `aclrt*` spelling, or the CANN 8.x `rt*` one. An API with
//! no spelling in the current mode is not hooked there and fires nothing, as in the real library.

use std::ffi::{c_char, CString};
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use mspti_abi::*;

use crate::ground::state::{self, Fidelity, SUBSCRIBER};

pub struct SimApi {
    pub domain: u32,
    pub cbid: u32,
    pub name_26x: Option<&'static std::ffi::CStr>,
    pub name_8x: Option<&'static std::ffi::CStr>,
}

impl SimApi {
    pub fn name(&self, fidelity: Fidelity) -> Option<&'static std::ffi::CStr> {
        match fidelity {
            Fidelity::Cann8 => self.name_8x,
            Fidelity::Cann26 | Fidelity::Documented => self.name_26x,
        }
    }
}

fn leak(s: &str) -> &'static std::ffi::CStr {
    // Names are static for the life of the process, like the real library's __FUNCTION__ strings.
    Box::leak(CString::new(s).expect("no NUL in table names").into_boxed_c_str())
}

/// Every simulated API: for each callback id, one entry per function variant.
pub fn table() -> &'static [SimApi] {
    static TABLE: OnceLock<Vec<SimApi>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut v = Vec::new();
        for c in CALLBACKS.iter().filter(|c| c.cbid != 0) {
            let n = c.names_26x.len().max(c.names_8x.len());
            for i in 0..n {
                v.push(SimApi {
                    domain: c.domain,
                    cbid: c.cbid,
                    name_26x: c.names_26x.get(i).map(|s| leak(s)),
                    // A 26.x variant with no 8.x twin reports the id's first 8.x name.
                    name_8x: c.names_8x.get(i).or(c.names_8x.first()).map(|s| leak(s)),
                });
            }
        }
        v
    })
}

/// The index of the API whose 26.x (or else 8.x) name is `name`.
pub fn find(name: &str) -> Option<u32> {
    let t = table();
    t.iter()
        .position(|a| a.name_26x.is_some_and(|n| n.to_bytes() == name.as_bytes()))
        .or_else(|| t.iter().position(|a| a.name_8x.is_some_and(|n| n.to_bytes() == name.as_bytes())))
        .map(|i| i as u32)
}

static SYMBOL: &std::ffi::CStr = c"SimKernel_0";

/// An address no process maps (non-canonical on x86-64, unmapped elsewhere): any read through a
/// garbage pointer faults at once instead of silently reading something.
pub const GARBAGE_PTR: usize = 0xdead_beef_dead_0000;

/// Parameters the documented mode points `functionParams` at.
#[repr(C)]
pub struct SimParams {
    pub work_ns: u64,
}

/// What one call shares between its ENTER and EXIT (documented mode fills the fields from it).
pub struct CallFrame {
    pub corr: u64,
    pub shared: u64,
    pub params: SimParams,
    pub ret: i32,
}

impl CallFrame {
    pub fn new(corr: u64, work_ns: u64) -> CallFrame {
        CallFrame { corr, shared: 0, params: SimParams { work_ns }, ret: 0 }
    }
}

/// Fire one callback if a subscriber is present and (domain, cbid) is enabled for it.
pub fn fire(
    domain: u32,
    cbid: u32,
    site: u32,
    name: *const c_char,
    fidelity: Fidelity,
    frame: &mut CallFrame,
) {
    let sub = SUBSCRIBER.load(Ordering::Acquire);
    if sub.is_null() || !state::is_enabled(domain, cbid) {
        return;
    }
    if state::not_interposed() {
        // Without LD_PRELOAD the wrappers never run: nothing is delivered (what CANN 8.x users saw).
        return;
    }
    // SAFETY: subscriber objects are leaked on subscribe and never freed, so a pointer loaded
    // from SUBSCRIBER stays valid even if another thread unsubscribes now.
    let sub = unsafe { &*sub };
    let Some(cb) = sub.callback else { return };
    let data = match fidelity {
        Fidelity::Documented => MsptiCallbackData {
            callback_site: site,
            function_name: name,
            function_params: std::ptr::addr_of!(frame.params).cast(),
            function_return_value: if site == MSPTI_API_EXIT {
                std::ptr::addr_of!(frame.ret).cast()
            } else {
                std::ptr::null()
            },
            symbol_name: if domain == MSPTI_CB_DOMAIN_RUNTIME && cbid == 10 {
                SYMBOL.as_ptr()
            } else {
                std::ptr::null()
            },
            correlation_id: frame.corr,
            reserved1: 0,
            reserved2: 0,
            correlation_data: std::ptr::addr_of_mut!(frame.shared),
        },
        Fidelity::Cann26 | Fidelity::Cann8 => garbage(site, name, next_salt()),
    };
    state::count_delivered(domain, cbid, site);
    // SAFETY: `cb` is the subscriber's C callback; `data` and `frame` outlive the call.
    unsafe { cb(sub.userdata, domain, cbid, &data) };
}

/// A per-thread sequence that makes each callback's garbage differ, as stack leftovers do.
fn next_salt() -> u64 {
    thread_local! {
        static SALT: std::cell::Cell<u64> = const { std::cell::Cell::new(0x9e37_79b9) };
    }
    SALT.with(|s| {
        let v = s.get().wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        s.set(v);
        v >> 11
    })
}

/// Callback data as a real library leaves it: site and name set, everything else garbage.
pub fn garbage(site: u32, name: *const c_char, salt: u64) -> MsptiCallbackData {
    let g = GARBAGE_PTR | ((salt as usize & 0xff) << 3);
    MsptiCallbackData {
        callback_site: site,
        function_name: name,
        function_params: g as *const _,
        function_return_value: (g + 8) as *const _,
        symbol_name: (g + 16) as *const _,
        correlation_id: 0x5a5a_5a5a_0000_0000 ^ salt,
        reserved1: !salt,
        reserved2: salt.rotate_left(17),
        correlation_data: (g + 24) as *mut u64,
    }
}

/// Call the subscriber's callback directly, bypassing the enable bits, with chosen fields:
/// `garbage` fills every other field with garbage, else they are zero. False when there is no
/// subscriber or it has no callback.
pub fn inject(domain: u32, cbid: u32, site: u32, name: *const c_char, garbage_fields: bool) -> bool {
    let sub = SUBSCRIBER.load(Ordering::Acquire);
    if sub.is_null() {
        return false;
    }
    // SAFETY: subscriber objects are never freed.
    let sub = unsafe { &*sub };
    let Some(cb) = sub.callback else { return false };
    let data = if garbage_fields {
        garbage(site, name, 0x77)
    } else {
        MsptiCallbackData {
            callback_site: site,
            function_name: name,
            function_params: std::ptr::null(),
            function_return_value: std::ptr::null(),
            symbol_name: std::ptr::null(),
            correlation_id: 0,
            reserved1: 0,
            reserved2: 0,
            correlation_data: std::ptr::null_mut(),
        }
    };
    state::count_delivered(domain, cbid, site);
    // SAFETY: `cb` is the subscriber's C callback and `data` outlives the call; a garbage or
    // NULL `name` is what the test wants the callee to cope with.
    unsafe { cb(sub.userdata, domain, cbid, &data) };
    true
}
