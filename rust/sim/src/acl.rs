//! MSPTI's interception of the ACL runtime and HCCL, as the real library does it: by symbol
//! interposition. Preloaded (`LD_PRELOAD=.../libmspti.so`), this library defines `aclrtMalloc`,
//! `aclrtLaunchKernelWithHostArgs`, `HcclAllReduce`, ... ahead of `libascendcl.so` and `libhccl.so`;
//! each wrapper fires ENTER, forwards to the real function, writes the call's records and fires
//! EXIT (upstream `csrc/common/inject/acl_inject.cpp`, `hccl_inject.cpp`). The real function is
//! found as upstream's `function_loader.cpp` finds it: `dlopen($ASCEND_HOME_PATH/lib64/<lib>.so)`
//! (or the bare name when that is unset or missing), then `dlsym`.
//!
//! In the simulated CANN tree (`python -m mspti_lens.sim cann DIR`, docs/simulated_cann.md) the
//! real functions are the project's C runtime libraries (rust/sim/cann/), which keep the program's
//! state (memory, streams, operator results) and reach the simulated device through the `msim*`
//! functions at the end of this file: the device lives here, and the tree's `libascend_hal.so` is
//! a link to this file, so preloaded or not a process has one device.
//!
//! The wrappers drive the device model (kernels, copies, collectives placed on their stream's
//! timeline) as the simulator's own calls do, so a program and `run_workload` produce the same
//! records. Without the preload none of this runs: the program works and nothing is delivered.

use core::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use mspti_abi::*;

use crate::device::{self, CallSpec};
use crate::{apis, clock};

/// `aclError` and `HcclResult` values the wrappers return on their own (CANN's `acl_base.h`,
/// `hccl_types.h`): the real function could not be found.
const ACL_ERROR_INTERNAL_ERROR: c_int = 500_000;
const HCCL_E_INTERNAL: c_int = 4;

const RTLD_LAZY: c_int = 1;

#[link(name = "dl")]
extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// The runtime libraries whose functions are intercepted, as upstream's loader names them.
#[derive(Clone, Copy)]
enum Lib {
    AscendCl = 0,
    Hccl = 1,
}

const LIB_FILES: [&str; 2] = ["libascendcl.so", "libhccl.so"];
static HANDLES: [AtomicPtr<c_void>; 2] =
    [AtomicPtr::new(std::ptr::null_mut()), AtomicPtr::new(std::ptr::null_mut())];

/// `$ASCEND_HOME_PATH/lib64/<file>` when that file exists, else the bare file name (the dynamic
/// loader's search then decides), as upstream's `FunctionLoader::CanonicalSoPath`.
fn library_path(file: &str) -> std::ffi::CString {
    let home = std::env::var_os("ASCEND_HOME_PATH").filter(|h| !h.is_empty());
    let path = home
        .map(|h| std::path::Path::new(&h).join("lib64").join(file))
        .filter(|p| p.is_file())
        .map(|p| p.into_os_string().into_string().unwrap_or_else(|_| file.to_owned()))
        .unwrap_or_else(|| file.to_owned());
    std::ffi::CString::new(path).unwrap_or_else(|_| std::ffi::CString::new(file).expect("no NUL in names"))
}

fn handle(lib: Lib) -> *mut c_void {
    let slot = &HANDLES[lib as usize];
    let h = slot.load(Ordering::Acquire);
    if !h.is_null() {
        return h;
    }
    let path = library_path(LIB_FILES[lib as usize]);
    // SAFETY: `path` is a NUL-terminated string; dlopen is thread-safe and returns NULL on failure.
    let h = unsafe { dlopen(path.as_ptr(), RTLD_LAZY) };
    if !h.is_null() {
        // Two racing first calls may both open it: dlopen counts references, both get the same handle.
        slot.store(h, Ordering::Release);
    }
    h
}

/// `cache` value of a function found missing (no function lives at address 1).
const MISSING: usize = 1;

/// The real `name` in `lib`, cached in `cache`; None (and, the first time, one line on stderr)
/// when it is missing, where upstream throws `THROW_FUNC_NOTFOUND`.
fn real(lib: Lib, name: &CStr, cache: &AtomicUsize, own: usize) -> Option<usize> {
    match cache.load(Ordering::Acquire) {
        0 => {}
        MISSING => return None,
        f => return Some(f),
    }
    let h = handle(lib);
    let f = if h.is_null() {
        0
    } else {
        // SAFETY: `h` is a live dlopen handle and `name` a NUL-terminated string.
        unsafe { dlsym(h, name.as_ptr()) as usize }
    };
    if f == 0 || f == own {
        eprintln!(
            "mspti-sim: {} not found in {} (set ASCEND_HOME_PATH to the CANN tree)",
            name.to_string_lossy(),
            LIB_FILES[lib as usize]
        );
        cache.store(MISSING, Ordering::Release);
        return None;
    }
    cache.store(f, Ordering::Release);
    Some(f)
}

/// The index in the simulated API table of `name` (looked up once per wrapper).
fn api_index(name: &str, cache: &AtomicUsize) -> u32 {
    let v = cache.load(Ordering::Relaxed);
    if v != 0 {
        return (v - 1) as u32;
    }
    let i = apis::find(name).unwrap_or(u32::MAX);
    cache.store(i as usize + 1, Ordering::Relaxed);
    i
}

/// One intercepted call: `spec` says what it does on the device, `stream` (when not NULL) is the
/// stream it goes to for the duration of the call, `forward` runs the real function.
fn intercept(api: u32, spec: CallSpec, stream: Option<*mut c_void>, forward: impl FnOnce() -> i32) -> i32 {
    if api == u32::MAX {
        // No callback id for this name (cannot happen for the names below; see the test): the
        // call still happens.
        return forward();
    }
    let before = device::thread_stream();
    if let Some(s) = stream.filter(|s| !s.is_null()) {
        device::set_thread_stream(device::stream_of(s));
    }
    let rc = apis::call_with(api, Some(spec), 0, forward);
    device::set_thread_stream(before);
    rc
}

/// Define one intercepted function: its C signature, library, what it does on the device (a
/// `CallSpec` expression over the arguments) and its stream argument.
macro_rules! intercept {
    ($lib:expr, $missing:expr, fn $name:ident($($a:ident : $t:ty),* $(,)?), spec = $spec:expr, stream = $stream:expr) => {
        /// Intercepted: fires MSPTI's callbacks and records around the real function.
        ///
        /// # Safety
        /// The C contract of the real function of that name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            static REAL: AtomicUsize = AtomicUsize::new(0);
            static API: AtomicUsize = AtomicUsize::new(0);
            let own = $name as *const () as usize;
            // Checked at compile time: no scan for the NUL per call.
            const NAME: &CStr = match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                Ok(n) => n,
                Err(_) => panic!("a name with one NUL"),
            };
            let Some(f) = real($lib, NAME, &REAL, own) else { return $missing };
            // SAFETY: `f` is the address dlsym gave for this very function name, whose C
            // signature is the one this wrapper is declared with (CANN's headers).
            let f: unsafe extern "C" fn($($t),*) -> c_int = unsafe { std::mem::transmute(f) };
            let api = api_index(stringify!($name), &API);
            let spec: CallSpec = $spec;
            let stream: Option<*mut c_void> = $stream;
            // SAFETY: the arguments are the caller's, passed on unchanged under the same contract.
            intercept(api, spec, stream, || unsafe { f($($a),*) })
        }
    };
}

fn plain() -> CallSpec {
    CallSpec::default()
}

fn bytes(n: usize) -> CallSpec {
    CallSpec { bytes: n as u64, ..CallSpec::default() }
}

/// `aclrtMemcpyKind` (HOST_TO_HOST 0 ... DEFAULT 4) as `msptiActivityMemcpyKind` (HTOH 1 ... DEFAULT 5).
fn copy(n: usize, kind: c_int) -> CallSpec {
    let copy_kind = match kind {
        0..=4 => kind as u32 + 1,
        _ => MSPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN,
    };
    CallSpec { bytes: n as u64, copy_kind, ..CallSpec::default() }
}

/// What the runtime announced for the launch about to happen on this thread (`msimSetNextLaunch`),
/// or a default kernel.
fn launch() -> CallSpec {
    device::take_next().unwrap_or_default()
}

type Ptr = *mut c_void;
type CPtr = *const c_void;
type Stream = *mut c_void;

const ACL: Lib = Lib::AscendCl;
const ACL_MISSING: c_int = ACL_ERROR_INTERNAL_ERROR;

intercept!(ACL, ACL_MISSING, fn aclrtSetDevice(device_id: i32), spec = plain(), stream = None);
intercept!(ACL, ACL_MISSING, fn aclrtResetDevice(device_id: i32), spec = plain(), stream = None);
intercept!(ACL, ACL_MISSING, fn aclrtCreateContext(context: *mut Ptr, device_id: i32), spec = plain(), stream = None);
intercept!(ACL, ACL_MISSING, fn aclrtDestroyContext(context: Ptr), spec = plain(), stream = None);
intercept!(ACL, ACL_MISSING, fn aclrtCreateStream(stream: *mut Stream), spec = plain(), stream = None);
intercept!(ACL, ACL_MISSING, fn aclrtDestroyStream(stream: Stream), spec = plain(), stream = Some(stream));
intercept!(ACL, ACL_MISSING, fn aclrtSynchronizeStream(stream: Stream), spec = plain(), stream = Some(stream));
intercept!(ACL, ACL_MISSING, fn aclrtMalloc(dev_ptr: *mut Ptr, size: usize, policy: c_int), spec = bytes(size), stream = None);
intercept!(ACL, ACL_MISSING, fn aclrtMallocHost(host_ptr: *mut Ptr, size: usize), spec = bytes(size), stream = None);
intercept!(ACL, ACL_MISSING, fn aclrtFree(dev_ptr: Ptr), spec = plain(), stream = None);
intercept!(ACL, ACL_MISSING, fn aclrtFreeHost(host_ptr: Ptr), spec = plain(), stream = None);
intercept!(
    ACL,
    ACL_MISSING,
    fn aclrtMemcpy(dst: Ptr, dest_max: usize, src: CPtr, count: usize, kind: c_int),
    spec = copy(count, kind),
    stream = None
);
intercept!(
    ACL,
    ACL_MISSING,
    fn aclrtMemcpyAsync(dst: Ptr, dest_max: usize, src: CPtr, count: usize, kind: c_int, stream: Stream),
    spec = copy(count, kind),
    stream = Some(stream)
);
intercept!(
    ACL,
    ACL_MISSING,
    fn aclrtMemset(dev_ptr: Ptr, max_count: usize, value: i32, count: usize),
    spec = bytes(count),
    stream = None
);
intercept!(
    ACL,
    ACL_MISSING,
    fn aclrtMemsetAsync(dev_ptr: Ptr, max_count: usize, value: i32, count: usize, stream: Stream),
    spec = bytes(count),
    stream = Some(stream)
);
intercept!(
    ACL,
    ACL_MISSING,
    fn aclrtLaunchKernel(func: Ptr, block_dim: u32, args: CPtr, args_size: usize, stream: Stream),
    spec = launch(),
    stream = Some(stream)
);
intercept!(
    ACL,
    ACL_MISSING,
    fn aclrtLaunchKernelWithHostArgs(
        func: Ptr,
        block_dim: u32,
        stream: Stream,
        cfg: Ptr,
        host_args: Ptr,
        args_size: usize,
        place_holders: Ptr,
        place_holder_num: usize,
    ),
    spec = launch(),
    stream = Some(stream)
);

/// A collective's device spec: its bytes, and the rank count and name of its communicator, asked
/// of libhccl as upstream's HCCL hook does (`HcclGetRankSize`, `HcclGetCommName`).
fn collective(count: u64, data_type: c_int, comm: Ptr) -> CallSpec {
    static RANK_SIZE: AtomicUsize = AtomicUsize::new(0);
    static COMM_NAME: AtomicUsize = AtomicUsize::new(0);
    let mut ranks = 1u32;
    if let Some(f) = real(Lib::Hccl, c"HcclGetRankSize", &RANK_SIZE, 0) {
        // SAFETY: dlsym's address of HcclGetRankSize(HcclComm, uint32_t *) (hccl.h).
        let f: unsafe extern "C" fn(Ptr, *mut u32) -> c_int = unsafe { std::mem::transmute(f) };
        // SAFETY: `comm` is the caller's communicator; `ranks` is writable.
        if unsafe { f(comm, &mut ranks) } != 0 {
            ranks = 1;
        }
    }
    if let Some(f) = real(Lib::Hccl, c"HcclGetCommName", &COMM_NAME, 0) {
        // SAFETY: dlsym's address of HcclGetCommName(HcclComm, char *commName) (hccl.h), which
        // writes at most ROOTINFO_INDENTIFIER_MAX_LENGTH (128) bytes.
        let f: unsafe extern "C" fn(Ptr, *mut c_char) -> c_int = unsafe { std::mem::transmute(f) };
        let mut name = [0 as c_char; 128];
        // SAFETY: `name` has the 128 bytes the contract asks for.
        if unsafe { f(comm, name.as_mut_ptr()) } == 0 {
            name[127] = 0;
            // SAFETY: NUL-terminated just above.
            unsafe { device::msimSetCommName(name.as_ptr()) };
        }
    }
    let data_type = data_type as u32;
    let elem = crate::cann::data_type_bytes(data_type).unwrap_or(1);
    CallSpec { bytes: count.saturating_mul(elem), data_type, ranks: ranks.max(1), ..CallSpec::default() }
}

const HCCL: Lib = Lib::Hccl;

intercept!(
    HCCL,
    HCCL_E_INTERNAL,
    fn HcclAllReduce(send: Ptr, recv: Ptr, count: u64, data_type: c_int, op: c_int, comm: Ptr, stream: Stream),
    spec = collective(count, data_type, comm),
    stream = Some(stream)
);
intercept!(
    HCCL,
    HCCL_E_INTERNAL,
    fn HcclBroadcast(buf: Ptr, count: u64, data_type: c_int, root: u32, comm: Ptr, stream: Stream),
    spec = collective(count, data_type, comm),
    stream = Some(stream)
);
intercept!(
    HCCL,
    HCCL_E_INTERNAL,
    fn HcclAllGather(send: Ptr, recv: Ptr, count: u64, data_type: c_int, comm: Ptr, stream: Stream),
    spec = collective(count, data_type, comm),
    stream = Some(stream)
);
intercept!(
    HCCL,
    HCCL_E_INTERNAL,
    fn HcclReduceScatter(send: Ptr, recv: Ptr, count: u64, data_type: c_int, op: c_int, comm: Ptr, stream: Stream),
    spec = collective(count, data_type, comm),
    stream = Some(stream)
);

// ---------------------------------------------------------------------------------------------
// The simulated device as the runtime libraries drive it (the tree's libascend_hal.so). None of
// these exist in a real CANN.

/// The device this thread's calls go to (`aclrtSetDevice`).
#[no_mangle]
pub extern "C" fn msimSetThreadDevice(device: u32) {
    device::msimSetThreadStream(device, device::thread_stream());
}

/// What the launch this thread makes next runs on the device, as the runtime tells the profiler
/// (CANN's compact info): `kernels` kernels of `device_ns` each named `kernel`, of operator `node`
/// (may be NULL: no node-level API records). The next intercepted launch takes it.
///
/// # Safety
/// `kernel` and `node` must be NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn msimSetNextLaunch(
    kernel: *const c_char,
    node: *const c_char,
    device_ns: u64,
    kernels: u32,
) {
    let name = |s: *const c_char| {
        // SAFETY: NULL or a C string, by this function's contract.
        (!s.is_null()).then(|| crate::intern::intern_c(unsafe { CStr::from_ptr(s) }))
    };
    device::set_next(CallSpec {
        kernel: name(kernel).unwrap_or(c"SimKernel"),
        node: name(node),
        device_ns,
        kernels: kernels.max(1),
        ..CallSpec::default()
    });
}

/// Forget an announced launch that no interception took (the program runs without the preload).
#[no_mangle]
pub extern "C" fn msimClearNextLaunch() {
    device::take_next();
}

/// Modelled host work of a runtime function: the virtual clock advances by `ns`, the real one
/// passes that long.
#[no_mangle]
pub extern "C" fn msimHostWork(ns: u64) {
    clock::spend(ns);
}

/// Block until this thread's device has finished everything on `stream` (a stream handle), as
/// `aclrtSynchronizeStream` does: the virtual clock jumps there, the real one waits.
#[no_mangle]
pub extern "C" fn msimWaitStream(stream: *mut c_void) {
    let s = if stream.is_null() { device::thread_stream() } else { device::stream_of(stream) };
    clock::spend(device::sync_wait_ns_on(s));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every function defined here, by name.
    const INTERPOSED: [&str; 21] = [
        "aclrtSetDevice",
        "aclrtResetDevice",
        "aclrtCreateContext",
        "aclrtDestroyContext",
        "aclrtCreateStream",
        "aclrtDestroyStream",
        "aclrtSynchronizeStream",
        "aclrtMalloc",
        "aclrtMallocHost",
        "aclrtFree",
        "aclrtFreeHost",
        "aclrtMemcpy",
        "aclrtMemcpyAsync",
        "aclrtMemset",
        "aclrtMemsetAsync",
        "aclrtLaunchKernel",
        "aclrtLaunchKernelWithHostArgs",
        "HcclAllReduce",
        "HcclBroadcast",
        "HcclAllGather",
        "HcclReduceScatter",
    ];

    #[test]
    fn every_interposed_function_has_its_callback_id_and_name() {
        let src = include_str!("acl.rs");
        for name in INTERPOSED {
            assert!(src.contains(&format!("fn {name}(")), "{name} is listed but not defined");
            let i = apis::find(name).unwrap_or_else(|| panic!("{name} has no callback id"));
            let a = &apis::table()[i as usize];
            let domain =
                if name.starts_with("Hccl") { MSPTI_CB_DOMAIN_HCCL } else { MSPTI_CB_DOMAIN_RUNTIME };
            assert_eq!(a.domain, domain, "{name}");
            assert_eq!(a.name_26x.map(|n| n.to_str().unwrap()), Some(name));
        }
        assert_eq!(src.matches("\nintercept!(").count(), INTERPOSED.len());
    }

    #[test]
    fn memcpy_kinds_map_to_msptis() {
        assert_eq!(copy(8, 1).copy_kind, MSPTI_ACTIVITY_MEMCPY_KIND_HTOD);
        assert_eq!(copy(8, 2).copy_kind, MSPTI_ACTIVITY_MEMCPY_KIND_DTOH);
        assert_eq!(copy(8, 4).copy_kind, MSPTI_ACTIVITY_MEMCPY_KIND_DEFAULT);
        assert_eq!(copy(8, 9).copy_kind, MSPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN);
    }
}
