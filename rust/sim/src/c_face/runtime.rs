//! What the simulated CANN tree's runtime libraries (rust/sim/cann/src) call to drive the
//! simulated device and clock: the tree's `libascend_hal.so` is this library. None of these
//! exist in a real CANN.

use std::ffi::{c_char, c_void};

use crate::c_face::args::{cstr_arg, name_arg};
use crate::model::device::{self, CallSpec};
use crate::model::interpose;

/// The device this thread's calls go to (`aclrtSetDevice`).
#[no_mangle]
pub extern "C" fn msimSetThreadDevice(device: u32) {
    device::set_thread_device_stream(device, device::thread_stream());
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
    // SAFETY: NULL or C strings, by this function's contract.
    let (kernel, node) = unsafe { (name_arg(kernel), name_arg(node)) };
    device::set_next(CallSpec {
        kernel: kernel.unwrap_or(c"SimKernel"),
        node,
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

/// The modelled host time of this thread's next runtime call, in place of the runtime's own
/// constant: the simulator's workloads draw each call's from their latency models.
#[no_mangle]
pub extern "C" fn msimSetNextHostWork(ns: u64) {
    interpose::set_next_host_work(ns);
}

/// The stream id this thread's next `aclrtCreateStream` gives its stream (the workloads keep
/// theirs: compute thread t on stream t, its collectives on stream 1000 + t).
#[no_mangle]
pub extern "C" fn msimSetNextStream(stream: u32) {
    interpose::set_next_stream(stream);
}

/// A new stream's handle for `aclrtCreateStream`: the announced id, else the device's next one
/// (1, 2, ...; stream 0 is the default stream).
#[no_mangle]
pub extern "C" fn msimCreateStream() -> *mut c_void {
    interpose::create_stream()
}

/// Modelled host work of a runtime function: the virtual clock advances by `ns`, the real one
/// passes that long. An announced host time (`msimSetNextHostWork`) takes the place of `ns`.
#[no_mangle]
pub extern "C" fn msimHostWork(ns: u64) {
    interpose::host_work(ns);
}

/// Block until this thread's device has finished everything on `stream` (a stream handle), as
/// `aclrtSynchronizeStream` does: the virtual clock jumps there, the real one waits.
#[no_mangle]
pub extern "C" fn msimWaitStream(stream: *mut c_void) {
    interpose::wait_stream(stream);
}

/// `aclrtSynchronizeStream`'s time: until `stream`'s work is done, or until the call's own host
/// work `ns` (the announced one, if any) has passed if the stream is idle by then.
#[no_mangle]
pub extern "C" fn msimSyncWait(stream: *mut c_void, ns: u64) {
    interpose::sync_wait(stream, ns);
}

/// Where the bundled runtime libraries are (`libascendcl.so`, `libhccl.so` and what they link),
/// for a process whose `ASCEND_HOME_PATH` names no CANN tree: by default `cann_tree/lib64` beside
/// this library's file. Takes effect if set before the first intercepted call. Returns 0, or 1
/// for NULL.
///
/// # Safety
/// `dir` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn msimSetRuntimeDir(dir: *const c_char) -> u32 {
    // SAFETY: NULL or a C string, by this function's contract.
    let Some(dir) = (unsafe { cstr_arg(dir) }) else { return 1 };
    let path = std::path::PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(
        dir.to_bytes(),
    ));
    interpose::set_runtime_dir(path);
    0
}

/// Queue a copy of `len` bytes from `src` to `dst` on `stream` (NULL: this thread's stream),
/// for the device to do (`device::queue_copy`).
///
/// # Safety
/// `dst` must stay valid for `len` bytes of writes and `src` for `len` bytes of reads until the
/// queue of that stream is run (`msimRunQueued`), which the runtime does before freeing memory.
#[no_mangle]
pub unsafe extern "C" fn msimQueueCopy(
    stream: *mut c_void,
    dst: *mut c_void,
    src: *const c_void,
    len: usize,
) {
    // SAFETY: forwarded contract.
    unsafe { device::queue_copy(stream, dst, src, len) }
}

/// Queue a fill of `len` bytes at `dst` with the low byte of `value` on `stream` (see
/// `msimQueueCopy`).
///
/// # Safety
/// `dst` must stay valid for `len` bytes of writes until the stream's queue is run.
#[no_mangle]
pub unsafe extern "C" fn msimQueueFill(stream: *mut c_void, dst: *mut c_void, value: i32, len: usize) {
    // SAFETY: forwarded contract.
    unsafe { device::queue_fill(stream, dst, value, len) }
}

/// Do the data work queued on `stream` of this thread's device (NULL: on every stream of it), as
/// the runtime does before the host reads results (a synchronize, an operator computing on the
/// host) or frees memory.
#[no_mangle]
pub extern "C" fn msimRunQueued(stream: *mut c_void) {
    device::run_queued(stream);
}
