//! MSPTI's interception of the ACL runtime and HCCL, as the real library does it: by symbol
//! interposition. Preloaded (`LD_PRELOAD=.../libmspti.so`), this library defines `aclrtMalloc`,
//! `aclrtLaunchKernelWithHostArgs`, `HcclAllReduce`, ... ahead of `libascendcl.so` and `libhccl.so`
//! (the C face's exports of `interposed_functions`, each calling its namesake here); each wrapper
//! fires ENTER, forwards to the real function, writes the call's records and fires EXIT
//! (upstream `csrc/common/inject/acl_inject.cpp`, `hccl_inject.cpp`). The real function is
//! found as upstream's `function_loader.cpp` finds it: `dlopen($ASCEND_HOME_PATH/lib64/<lib>.so)`
//! (or the bare name when that is unset or missing), then `dlsym`. Where neither finds it (a
//! process that loaded the simulator from the Python package or a build directory), the runtime
//! bundled beside the simulator is loaded (`bundled`), so that its device is this one.
//!
//! In the simulated CANN tree (`python -m mspti_lens.sim cann DIR`, docs/simulated_cann.md) the
//! real functions are the project's C runtime libraries (rust/sim/cann/), which keep the program's
//! state (memory, streams, operator results) and reach the simulated device through the `msim*`
//! functions of the C face (`c_face::runtime`), which call the services at the end of this file
//! and the device: the device lives in this library, and the tree's `libascend_hal.so` is a link
//! to it, so preloaded or not a process has one device.
//!
//! The simulator's own workloads (`workload.rs`) call these very wrappers (the functions the
//! exports call), as the dynamic loader binds a preloaded program's calls to them, so
//! `run_workload` takes a program's path through the runtime libraries. Without the preload none of this runs for a program: it works and
//! nothing is delivered.

use core::ffi::{c_char, c_int, c_void, CStr};
use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mspti_abi::*;

use crate::ground::clock;
use crate::ground::locks::{ForkLock, Rank};
use crate::model::device::{self, CallSpec};
use crate::model::{apis, call, cann};

/// `aclError` and `HcclResult` values the wrappers return on their own (CANN's `acl_base.h`,
/// `hccl_types.h`): the real function could not be found.
const ACL_ERROR_INTERNAL_ERROR: c_int = 500_000;
const HCCL_E_INTERNAL: c_int = 4;

const RTLD_LAZY: c_int = 1;

#[link(name = "dl")]
extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dladdr(addr: *const c_void, info: *mut DlInfo) -> c_int;
}

/// The base address of the loaded object `addr` lies in (0 if none).
fn object_base(addr: *const c_void) -> usize {
    let mut info = DlInfo {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the address's mapping; `info` is writable.
    if unsafe { dladdr(addr, &mut info) } == 0 {
        return 0;
    }
    info.dli_fbase as usize
}

/// Whether `addr` lies in this library (one of its own functions, found where a runtime
/// library's was looked for).
fn in_this_library(addr: usize) -> bool {
    let own = object_base(in_this_library as *const c_void);
    own != 0 && object_base(addr as *const c_void) == own
}

/// glibc's `Dl_info` (dlfcn.h).
#[repr(C)]
struct DlInfo {
    dli_fname: *const c_char,
    dli_fbase: *mut c_void,
    dli_sname: *const c_char,
    dli_saddr: *mut c_void,
}

/// The runtime libraries whose functions are intercepted, as upstream's loader names them.
#[derive(Clone, Copy)]
enum Lib {
    AscendCl = 0,
    Hccl = 1,
}

const LIB_FILES: [&str; 2] = ["libascendcl.so", "libhccl.so"];
/// The same names for `dlopen`.
const LIB_NAMES: [&CStr; 2] = [c"libascendcl.so", c"libhccl.so"];
static HANDLES: [AtomicPtr<c_void>; 2] =
    [AtomicPtr::new(std::ptr::null_mut()), AtomicPtr::new(std::ptr::null_mut())];

/// `$ASCEND_HOME_PATH/lib64/<file>` when that file exists, as upstream's
/// `FunctionLoader::CanonicalSoPath`.
fn installed_path(file: &str) -> Option<std::ffi::CString> {
    let home = std::env::var_os("ASCEND_HOME_PATH").filter(|h| !h.is_empty())?;
    let path = std::path::Path::new(&home).join("lib64").join(file);
    if !path.is_file() {
        return None;
    }
    std::ffi::CString::new(path.into_os_string().into_encoded_bytes()).ok()
}

fn open(path: &CStr) -> *mut c_void {
    // SAFETY: `path` is a NUL-terminated string; dlopen is thread-safe and returns NULL on failure.
    unsafe { dlopen(path.as_ptr(), RTLD_LAZY) }
}

/// The runtime library `lib`: the installed one (`$ASCEND_HOME_PATH`), else what the dynamic
/// loader finds by name (upstream's rule, and a program linked against it has it loaded), else
/// the runtime bundled beside the simulator. NULL when none is there.
fn handle(lib: Lib) -> *mut c_void {
    let slot = &HANDLES[lib as usize];
    let h = slot.load(Ordering::Acquire);
    if !h.is_null() {
        return h;
    }
    let file = LIB_FILES[lib as usize];
    let h = match installed_path(file) {
        Some(path) => open(&path),
        None => {
            let h = open(LIB_NAMES[lib as usize]);
            if h.is_null() {
                bundled::handles()[lib as usize] as *mut c_void
            } else {
                h
            }
        }
    };
    if !h.is_null() {
        bundled::check_same_device(h, file);
        // Two racing first calls may both open it: dlopen counts references, both get the same handle.
        slot.store(h, Ordering::Release);
    }
    h
}

/// The runtime libraries the Python package and the build ship beside the simulator
/// (`cann_tree/lib64/`, rust/lens/build.rs), for a process that loaded the simulator from there
/// with no CANN tree installed: the Python `Simulator`, the Rust tests.
///
/// Those libraries need `libascend_hal.so`, which they find through their RUNPATH `$ORIGIN`, the
/// directory of the path they were loaded by (symbolic links are not resolved), and which must
/// be this very object, or the process would have a second simulator with a device of its own.
/// So they are loaded through a private directory of symbolic links: `libascend_hal.so` to this
/// library's file and the runtime's files to the bundled ones. The dynamic loader, finding
/// `libascend_hal.so` to be a file it has loaded (same device and inode), uses the loaded object.
/// The directory is removed once both libraries are loaded.
mod bundled {
    use std::ffi::{CStr, CString, OsStr};
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Path, PathBuf};
    use std::sync::OnceLock;

    use super::*;

    /// Set by `msimSetRuntimeDir` before the first intercepted call.
    static RUNTIME_DIR: ForkLock<Option<PathBuf>> = ForkLock::new(Rank::RuntimeDir, None);

    pub(super) fn set_runtime_dir(dir: PathBuf) {
        *RUNTIME_DIR.lock() = Some(dir);
    }

    /// The file this library was loaded from (as the loader was given it).
    fn own_file() -> Option<PathBuf> {
        let mut info = DlInfo {
            dli_fname: std::ptr::null(),
            dli_fbase: std::ptr::null_mut(),
            dli_sname: std::ptr::null(),
            dli_saddr: std::ptr::null_mut(),
        };
        // SAFETY: the address is one of this library's functions; `info` is writable.
        let found = unsafe { dladdr(own_file as *const c_void, &mut info) } != 0;
        if !found || info.dli_fname.is_null() {
            return None;
        }
        // SAFETY: dladdr's file name is a NUL-terminated string owned by the loader.
        let name = unsafe { CStr::from_ptr(info.dli_fname) };
        std::fs::canonicalize(OsStr::from_bytes(name.to_bytes())).ok()
    }

    /// The bundled runtime's directory: the one `msimSetRuntimeDir` named, else `cann_tree/lib64`
    /// beside this library's file.
    fn runtime_dir(own: &Path) -> Option<PathBuf> {
        let set = RUNTIME_DIR.lock().clone();
        let dir = set.or_else(|| own.parent().map(|d| d.join("cann_tree").join("lib64")))?;
        dir.join(LIB_FILES[0]).is_file().then_some(dir)
    }

    /// A new directory only this process uses, under `$TMPDIR`.
    fn private_dir() -> Option<PathBuf> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        (0..16).find_map(|i| {
            let dir = base.join(format!("mspti-sim-runtime-{}-{nanos}-{i}", std::process::id()));
            std::fs::DirBuilder::new().mode(0o700).create(&dir).ok().map(|()| dir)
        })
    }

    /// Load the bundled libascendcl.so and libhccl.so through a private directory (see above).
    fn load() -> [usize; 2] {
        let mut handles = [0usize; 2];
        let Some(own) = own_file() else { return handles };
        let Some(dir) = runtime_dir(&own) else { return handles };
        let Some(links) = private_dir() else { return handles };
        let mut ok = std::os::unix::fs::symlink(&own, links.join("libascend_hal.so")).is_ok();
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name();
            if name.as_bytes().ends_with(b".so") && name != "libascend_hal.so" && name != "libmspti.so" {
                ok &= std::os::unix::fs::symlink(entry.path(), links.join(&name)).is_ok();
            }
        }
        if ok {
            for (h, file) in handles.iter_mut().zip(LIB_FILES) {
                if let Ok(path) = CString::new(links.join(file).into_os_string().into_encoded_bytes()) {
                    *h = open(&path) as usize;
                }
            }
        }
        let _ = std::fs::remove_dir_all(&links);
        handles
    }

    /// The bundled runtime's handles (0 where it is not there), loaded once per process.
    pub(super) fn handles() -> [usize; 2] {
        static HANDLES: OnceLock<[usize; 2]> = OnceLock::new();
        *HANDLES.get_or_init(load)
    }

    /// Say once when the runtime library found drives another simulator than this one (its
    /// `libascend_hal.so` is another file, as with an `ASCEND_HOME_PATH` tree whose libmspti.so
    /// is not the library this process loaded): its device work never reaches this device.
    pub(super) fn check_same_device(h: *mut c_void, file: &str) {
        // SAFETY: `h` is a live dlopen handle and the name a NUL-terminated string.
        let theirs = unsafe { dlsym(h, c"msimHostWork".as_ptr()) } as usize;
        if theirs != 0 && !in_this_library(theirs) {
            eprintln!(
                "mspti-sim: the {file} found drives another copy of the simulator than this process's \
                 (its libascend_hal.so is another file): its device work is not this device's"
            );
        }
    }
}

/// `cache` value of a function found missing (no function lives at address 1).
const MISSING: usize = 1;

/// The real `name` in `lib`, cached in `cache`; None (and, the first time, one line on stderr)
/// when it is missing (or only this library's own wrapper is found), where upstream throws
/// `THROW_FUNC_NOTFOUND`.
fn real(lib: Lib, name: &CStr, cache: &AtomicUsize) -> Option<usize> {
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
    if f == 0 || in_this_library(f) {
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
    // Documented mode's functionParams report the call's modelled host time: the announced one
    // (the simulator's workloads), else 0 (a program's call spends the runtime's own constant).
    let work_ns = NEXT_HOST_WORK.with(Cell::get).unwrap_or(0);
    let rc = call::call_with(api, Some(spec), work_ns, || {
        WORK_START.with(|w| w.set(Some(Instant::now())));
        forward()
    });
    // A call that failed before its host work leaves nothing for the next call to take.
    clear_announced_host_work();
    device::set_thread_stream(before);
    rc
}

/// Define one intercepted function (the C face exports a wrapper of that name calling it): its C
/// signature, library, what it does on the device (a `CallSpec` expression over the arguments)
/// and its stream argument.
macro_rules! intercept {
    ($lib:expr, $missing:expr, fn $name:ident($($a:ident : $t:ty),* $(,)?), spec = $spec:expr, stream = $stream:expr) => {
        /// Intercepted: fires MSPTI's callbacks and records around the real function.
        ///
        /// # Safety
        /// The C contract of the real function of that name.
        // The C function's name and arguments (CANN's headers).
        #[allow(non_snake_case, clippy::too_many_arguments)]
        pub unsafe fn $name($($a: $t),*) -> c_int {
            static REAL: AtomicUsize = AtomicUsize::new(0);
            static API: AtomicUsize = AtomicUsize::new(0);
            // Checked at compile time: no scan for the NUL per call.
            const NAME: &CStr = match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                Ok(n) => n,
                Err(_) => panic!("a name with one NUL"),
            };
            let Some(f) = real($lib, NAME, &REAL) else { return $missing };
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

pub type Ptr = *mut c_void;
pub type CPtr = *const c_void;
pub type Stream = *mut c_void;

const ACL: Lib = Lib::AscendCl;
const ACL_MISSING: c_int = ACL_ERROR_INTERNAL_ERROR;

/// A collective's device spec: its bytes, and the rank count and name of its communicator, asked
/// of libhccl as upstream's HCCL hook does (`HcclGetRankSize`, `HcclGetCommName`).
fn collective(count: u64, data_type: c_int, comm: Ptr) -> CallSpec {
    static RANK_SIZE: AtomicUsize = AtomicUsize::new(0);
    static COMM_NAME: AtomicUsize = AtomicUsize::new(0);
    let mut ranks = 1u32;
    if let Some(f) = real(Lib::Hccl, c"HcclGetRankSize", &RANK_SIZE) {
        // SAFETY: dlsym's address of HcclGetRankSize(HcclComm, uint32_t *) (hccl.h).
        let f: unsafe extern "C" fn(Ptr, *mut u32) -> c_int = unsafe { std::mem::transmute(f) };
        // SAFETY: `comm` is the caller's communicator; `ranks` is writable.
        if unsafe { f(comm, &mut ranks) } != 0 {
            ranks = 1;
        }
    }
    if let Some(f) = real(Lib::Hccl, c"HcclGetCommName", &COMM_NAME) {
        // SAFETY: dlsym's address of HcclGetCommName(HcclComm, char *commName) (hccl.h), which
        // writes at most ROOTINFO_INDENTIFIER_MAX_LENGTH (128) bytes.
        let f: unsafe extern "C" fn(Ptr, *mut c_char) -> c_int = unsafe { std::mem::transmute(f) };
        let mut name = [0 as c_char; 128];
        // SAFETY: `name` has the 128 bytes the contract asks for.
        if unsafe { f(comm, name.as_mut_ptr()) } == 0 {
            name[127] = 0;
            // SAFETY: NUL-terminated just above.
            device::set_comm_name(Some(unsafe { CStr::from_ptr(name.as_ptr()) }));
        }
    }
    let data_type = data_type as u32;
    let elem = cann::data_type_bytes(data_type).unwrap_or(1);
    CallSpec { bytes: count.saturating_mul(elem), data_type, ranks: ranks.max(1), ..CallSpec::default() }
}

const HCCL: Lib = Lib::Hccl;

/// HCCL's barrier carries no data; its records say 0 bytes of fp32, as the all-reduce of nothing
/// HCCL runs it as.
const BARRIER_DATA_TYPE: c_int = MSPTI_ACTIVITY_COMMUNICATION_FP32 as c_int;

/// Every function MSPTI interposes, applying the macro `$m` to each: its library, the result when
/// the real function is missing, its C signature, what it does on the device and its stream.
/// Here it defines the wrappers (`intercept`), in the C face their exports.
macro_rules! interposed_functions {
    ($m:ident) => {
        $m!(ACL, ACL_MISSING, fn aclrtSetDevice(device_id: i32), spec = plain(), stream = None);
        $m!(ACL, ACL_MISSING, fn aclrtResetDevice(device_id: i32), spec = plain(), stream = None);
        $m!(ACL, ACL_MISSING, fn aclrtCreateContext(context: *mut Ptr, device_id: i32), spec = plain(), stream = None);
        $m!(ACL, ACL_MISSING, fn aclrtDestroyContext(context: Ptr), spec = plain(), stream = None);
        $m!(ACL, ACL_MISSING, fn aclrtCreateStream(stream: *mut Stream), spec = plain(), stream = None);
        $m!(ACL, ACL_MISSING, fn aclrtDestroyStream(stream: Stream), spec = plain(), stream = Some(stream));
        $m!(ACL, ACL_MISSING, fn aclrtSynchronizeStream(stream: Stream), spec = plain(), stream = Some(stream));
        $m!(ACL, ACL_MISSING, fn aclrtMalloc(dev_ptr: *mut Ptr, size: usize, policy: c_int), spec = bytes(size), stream = None);
        $m!(ACL, ACL_MISSING, fn aclrtMallocHost(host_ptr: *mut Ptr, size: usize), spec = bytes(size), stream = None);
        $m!(ACL, ACL_MISSING, fn aclrtMallocCached(dev_ptr: *mut Ptr, size: usize, policy: c_int), spec = bytes(size), stream = None);
        $m!(ACL, ACL_MISSING, fn aclrtFree(dev_ptr: Ptr), spec = plain(), stream = None);
        $m!(ACL, ACL_MISSING, fn aclrtFreeHost(host_ptr: Ptr), spec = plain(), stream = None);
        $m!(ACL, ACL_MISSING, fn aclrtGetMemInfo(attr: c_int, free: *mut usize, total: *mut usize), spec = plain(), stream = None);
        $m!(ACL, ACL_MISSING, fn aclrtMemcpy(dst: Ptr, dest_max: usize, src: CPtr, count: usize, kind: c_int), spec = copy(count, kind), stream = None);
        $m!(ACL, ACL_MISSING, fn aclrtMemcpyAsync(dst: Ptr, dest_max: usize, src: CPtr, count: usize, kind: c_int, stream: Stream), spec = copy(count, kind), stream = Some(stream));
        $m!(ACL, ACL_MISSING, fn aclrtMemset(dev_ptr: Ptr, max_count: usize, value: i32, count: usize), spec = bytes(count), stream = None);
        $m!(ACL, ACL_MISSING, fn aclrtMemsetAsync(dev_ptr: Ptr, max_count: usize, value: i32, count: usize, stream: Stream), spec = bytes(count), stream = Some(stream));
        $m!(ACL, ACL_MISSING, fn aclrtLaunchKernel(func: Ptr, block_dim: u32, args: CPtr, args_size: usize, stream: Stream), spec = launch(), stream = Some(stream));
        $m!(ACL, ACL_MISSING, fn aclrtLaunchKernelV2(func: Ptr, block_dim: u32, args: CPtr, args_size: usize, cfg: Ptr, stream: Stream), spec = launch(), stream = Some(stream));
        $m!(ACL, ACL_MISSING, fn aclrtLaunchKernelWithConfig(func: Ptr, block_dim: u32, stream: Stream, cfg: Ptr, args: Ptr, reserve: Ptr), spec = launch(), stream = Some(stream));
        $m!(ACL, ACL_MISSING, fn aclrtLaunchKernelWithHostArgs(func: Ptr, block_dim: u32, stream: Stream, cfg: Ptr, host_args: Ptr, args_size: usize, place_holders: Ptr, place_holder_num: usize), spec = launch(), stream = Some(stream));
        $m!(HCCL, HCCL_E_INTERNAL, fn HcclAllReduce(send: Ptr, recv: Ptr, count: u64, data_type: c_int, op: c_int, comm: Ptr, stream: Stream), spec = collective(count, data_type, comm), stream = Some(stream));
        $m!(HCCL, HCCL_E_INTERNAL, fn HcclBroadcast(buf: Ptr, count: u64, data_type: c_int, root: u32, comm: Ptr, stream: Stream), spec = collective(count, data_type, comm), stream = Some(stream));
        $m!(HCCL, HCCL_E_INTERNAL, fn HcclAllGather(send: Ptr, recv: Ptr, count: u64, data_type: c_int, comm: Ptr, stream: Stream), spec = collective(count, data_type, comm), stream = Some(stream));
        $m!(HCCL, HCCL_E_INTERNAL, fn HcclReduceScatter(send: Ptr, recv: Ptr, count: u64, data_type: c_int, op: c_int, comm: Ptr, stream: Stream), spec = collective(count, data_type, comm), stream = Some(stream));
        $m!(HCCL, HCCL_E_INTERNAL, fn HcclBarrier(comm: Ptr, stream: Stream), spec = collective(0, BARRIER_DATA_TYPE, comm), stream = Some(stream));
    };
}
pub(crate) use interposed_functions;

interposed_functions!(intercept);

/// `HcclCommInitRootInfo` of libhccl (MSPTI does not intercept it): a communicator of `ranks`
/// ranks named `name` (at most 127 bytes are kept), whose rank `rank` this thread is.
pub(crate) fn comm_init(ranks: u32, rank: u32, name: &CStr) -> Result<Ptr, c_int> {
    static INIT: AtomicUsize = AtomicUsize::new(0);
    /// `HCCL_ROOT_INFO_BYTES` (hccl_types.h).
    const ROOT_INFO_BYTES: usize = 4108;
    let f = real(Lib::Hccl, c"HcclCommInitRootInfo", &INIT).ok_or(HCCL_E_INTERNAL)?;
    // SAFETY: dlsym's address of HcclCommInitRootInfo(uint32_t, const HcclRootInfo *, uint32_t,
    // HcclComm *) (hccl.h); HcclRootInfo is ROOT_INFO_BYTES bytes of text.
    let f: unsafe extern "C" fn(u32, *const u8, u32, *mut Ptr) -> c_int = unsafe { std::mem::transmute(f) };
    let mut root = [0u8; ROOT_INFO_BYTES];
    let n = name.to_bytes().len().min(127);
    root[..n].copy_from_slice(&name.to_bytes()[..n]);
    let mut comm: Ptr = std::ptr::null_mut();
    // SAFETY: `root` is a whole root info and `comm` writable storage for the handle.
    let rc = unsafe { f(ranks, root.as_ptr(), rank, &mut comm) };
    if rc == 0 {
        Ok(comm)
    } else {
        Err(rc)
    }
}

/// `HcclCommDestroy` of libhccl (not intercepted either).
pub(crate) fn comm_destroy(comm: Ptr) -> c_int {
    static DESTROY: AtomicUsize = AtomicUsize::new(0);
    let Some(f) = real(Lib::Hccl, c"HcclCommDestroy", &DESTROY) else { return HCCL_E_INTERNAL };
    // SAFETY: dlsym's address of HcclCommDestroy(HcclComm) (hccl.h).
    let f: unsafe extern "C" fn(Ptr) -> c_int = unsafe { std::mem::transmute(f) };
    // SAFETY: `comm` is a communicator comm_init made, destroyed once by its owner.
    unsafe { f(comm) }
}

// ---------------------------------------------------------------------------------------------
// The runtime's services: what the tree's runtime libraries ask of the simulated device and the
// clock through the C face's `msim*` functions (none exist in a real CANN).

thread_local! {
    /// The host time (ns) announced for this thread's next runtime call (`msimSetNextHostWork`).
    static NEXT_HOST_WORK: Cell<Option<u64>> = const { Cell::new(None) };
    /// When the real function of the intercepted call in progress on this thread was entered.
    static WORK_START: Cell<Option<Instant>> = const { Cell::new(None) };
    /// The stream id announced for this thread's next `aclrtCreateStream` (`msimSetNextStream`).
    static NEXT_STREAM: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Forget a host time announced for a call that did not take it.
pub(crate) fn clear_announced_host_work() {
    NEXT_HOST_WORK.with(|n| n.set(None));
    WORK_START.with(|w| w.set(None));
}

/// How much of the announced `ns` is still to be spent: all of it on the virtual clock (the
/// runtime's own work takes no virtual time), on the real clock what the call's real work (a
/// real copy, say) has not already taken since its real function was entered.
fn announced_remaining(ns: u64) -> u64 {
    let start = WORK_START.with(Cell::take);
    match start {
        Some(t) if !clock::is_virtual() => {
            let spent = t.elapsed().min(Duration::from_nanos(ns));
            ns - spent.as_nanos() as u64
        }
        _ => ns,
    }
}

/// The modelled host time of this thread's next runtime call, in place of the runtime's own
/// constant: the simulator's workloads draw each call's from their latency models.
pub fn set_next_host_work(ns: u64) {
    NEXT_HOST_WORK.with(|n| n.set(Some(ns)));
}

/// The stream id this thread's next `aclrtCreateStream` gives its stream (the workloads keep
/// theirs: compute thread t on stream t, its collectives on stream 1000 + t).
pub fn set_next_stream(stream: u32) {
    NEXT_STREAM.with(|n| n.set(Some(stream)));
}

/// A new stream's handle for `aclrtCreateStream`: the announced id, else the device's next one
/// (1, 2, ...; stream 0 is the default stream).
pub fn create_stream() -> *mut c_void {
    static NEXT_ID: AtomicU32 = AtomicU32::new(1);
    let id = NEXT_STREAM.with(Cell::take).unwrap_or_else(|| NEXT_ID.fetch_add(1, Ordering::Relaxed));
    device::stream_handle(id)
}

/// Modelled host work of a runtime function: the virtual clock advances by `ns`, the real one
/// passes that long. An announced host time (`set_next_host_work`) takes the place of `ns`.
pub fn host_work(ns: u64) {
    match NEXT_HOST_WORK.with(Cell::take) {
        Some(announced) => clock::spend(announced_remaining(announced)),
        None => clock::spend(ns),
    }
}

/// Block until this thread's device has finished everything on `stream` (a stream handle), as
/// `aclrtSynchronizeStream` does: the virtual clock jumps there, the real one waits.
pub fn wait_stream(stream: *mut c_void) {
    clock::spend(device::sync_wait_ns_on(stream_id(stream)));
    // An announced host time of the call is spent after the wait, as on the virtual clock.
    WORK_START.with(|w| {
        if w.get().is_some() {
            w.set(Some(Instant::now()));
        }
    });
}

/// `aclrtSynchronizeStream`'s time: until `stream`'s work is done, or until the call's own host
/// work `ns` (the announced one, if any) has passed if the stream is idle by then.
pub fn sync_wait(stream: *mut c_void, ns: u64) {
    let wait = device::sync_wait_ns_on(stream_id(stream));
    let own = match NEXT_HOST_WORK.with(Cell::take) {
        Some(announced) => announced_remaining(announced),
        None => ns,
    };
    clock::spend(wait.max(own));
}

/// The stream id of a handle the runtime passes (NULL: this thread's stream).
fn stream_id(stream: *mut c_void) -> u32 {
    if stream.is_null() {
        device::thread_stream()
    } else {
        device::stream_of(stream)
    }
}

/// Where the bundled runtime libraries are (`libascendcl.so`, `libhccl.so` and what they link),
/// for a process whose `ASCEND_HOME_PATH` names no CANN tree: by default `cann_tree/lib64` beside
/// this library's file. Takes effect if set before the first intercepted call.
pub fn set_runtime_dir(dir: std::path::PathBuf) {
    bundled::set_runtime_dir(dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every function defined here, by name.
    const INTERPOSED: [&str; 26] = [
        "aclrtSetDevice",
        "aclrtResetDevice",
        "aclrtCreateContext",
        "aclrtDestroyContext",
        "aclrtCreateStream",
        "aclrtDestroyStream",
        "aclrtSynchronizeStream",
        "aclrtMalloc",
        "aclrtMallocHost",
        "aclrtMallocCached",
        "aclrtFree",
        "aclrtFreeHost",
        "aclrtGetMemInfo",
        "aclrtMemcpy",
        "aclrtMemcpyAsync",
        "aclrtMemset",
        "aclrtMemsetAsync",
        "aclrtLaunchKernel",
        "aclrtLaunchKernelV2",
        "aclrtLaunchKernelWithConfig",
        "aclrtLaunchKernelWithHostArgs",
        "HcclAllReduce",
        "HcclBroadcast",
        "HcclAllGather",
        "HcclReduceScatter",
        "HcclBarrier",
    ];

    #[test]
    fn every_interposed_function_has_its_callback_id_and_name() {
        let src = include_str!("interpose.rs");
        for name in INTERPOSED {
            assert!(src.contains(&format!("fn {name}(")), "{name} is listed but not defined");
            let i = apis::find(name).unwrap_or_else(|| panic!("{name} has no callback id"));
            let a = &apis::table()[i as usize];
            let domain =
                if name.starts_with("Hccl") { MSPTI_CB_DOMAIN_HCCL } else { MSPTI_CB_DOMAIN_RUNTIME };
            assert_eq!(a.domain, domain, "{name}");
            assert_eq!(a.name_26x.map(|n| n.to_str().unwrap()), Some(name));
        }
        assert_eq!(src.matches("\n        $m!(").count(), INTERPOSED.len());
    }

    #[test]
    fn memcpy_kinds_map_to_msptis() {
        assert_eq!(copy(8, 1).copy_kind, MSPTI_ACTIVITY_MEMCPY_KIND_HTOD);
        assert_eq!(copy(8, 2).copy_kind, MSPTI_ACTIVITY_MEMCPY_KIND_DTOH);
        assert_eq!(copy(8, 4).copy_kind, MSPTI_ACTIVITY_MEMCPY_KIND_DEFAULT);
        assert_eq!(copy(8, 9).copy_kind, MSPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN);
    }
}
