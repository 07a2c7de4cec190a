//! Simulated workloads: a data-parallel training step, an inference loop and a graph replay, each
//! a program of the simulated CANN runtime as a torch_npu job is one of the real one.
//!
//! Every runtime and HCCL call a workload thread makes is a call of the exported C function that
//! a program linked against `libascendcl.so` and `libhccl.so`, with libmspti preloaded, is bound
//! to: the simulator's interposed wrapper (`model::interpose`). It fires the callbacks, forwards to the
//! runtime library (the tree's C runtime, rust/sim/cann/src, found as `interpose.rs` says: the bundled
//! one when no CANN tree is installed), which keeps the program's state and drives the device
//! through the `msim*` functions, and writes the call's records. The arguments are real: streams
//! from `aclrtCreateStream`, memory from `aclrtMalloc` that copies and memsets really write, a
//! communicator from `HcclCommInitRootInfo` with the configuration's ranks. A call that fails
//! (its runtime library missing, or the runtime refusing it) fails the job.
//!
//! What stays modelled is what the runtime cannot know: each call's host time is drawn from
//! `models` and announced to the runtime (`interpose::set_next_host_work`), which spends it in place
//! of its own constant (on the real clock a real copy's own time counts toward it); each launch's
//! kernels are announced as the runtime's operators announce theirs (`device::set_next`); streams
//! keep the ids the workloads have always used (compute thread t on stream t, or 0 when streams
//! are shared, its collectives on `COMM_STREAM_BASE` + t), announced to `aclrtCreateStream`
//! (`interpose::set_next_stream`). The communicator is named as `msimSetCommName` set when the
//! workload starts, so the HCCL and COMMUNICATION records carry that name.
//!
//! Data the runtime really moves per training step: two 8 MiB host-to-device copies, three 1 MiB
//! memsets, and every tenth step an all-gather of 4 MiB per rank (`ranks` x 4 MiB written). The
//! gradient all-reduces are in place in bf16, which the simulated HCCL does not reduce (docs/
//! simulated_cann.md), so they move nothing; the 256 MiB allocations are zeroed memory whose
//! untouched pages cost nothing.

use std::collections::HashSet;
use std::ffi::{c_int, c_void};
use std::sync::mpsc;
use std::sync::Arc;

use mspti_abi::{MSPTI_ACTIVITY_COMMUNICATION_FP16, MSPTI_ACTIVITY_COMMUNICATION_FP32};

use crate::ground::clock;
use crate::model::cann;
use crate::model::device::{self, CallSpec};
use crate::model::interpose;
use crate::model::jobs::Job;
use crate::model::models::{self, Model, Rng};

/// Workload settings as C passes them (`msimWorkloadStart`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct WorkloadConfig {
    /// 0: training, 1: inference, 2: graph replay.
    pub kind: u32,
    /// Training steps, or inference requests, per compute thread.
    pub steps: u32,
    /// Ranks in the communicator: shapes HCCL host time.
    pub ranks: u32,
    /// Compute threads; each training thread has its own communication thread.
    pub threads: u32,
    pub seed: u64,
    /// Every modelled duration is multiplied by this (1.0 = realistic; smaller runs faster).
    pub time_scale: f64,
}

/// Stream ids of the communication threads' collectives: this base + the thread's index.
pub const COMM_STREAM_BASE: u32 = 1000;

pub const TRAINING: u32 = 0;
pub const INFERENCE: u32 = 1;
/// A captured graph replayed each step: one launch call, many kernels with its correlation id.
pub const GRAPH: u32 = 2;

/// 1: every compute thread launches on stream 0 (shared); 0: a stream per thread (default).
static SHARED_STREAM: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Whether the workloads started from now on put every compute thread on stream 0.
pub fn set_shared_stream(shared: bool) {
    SHARED_STREAM.store(u32::from(shared), std::sync::atomic::Ordering::Relaxed);
}

fn compute_stream(t: u32) -> u32 {
    if SHARED_STREAM.load(std::sync::atomic::Ordering::Relaxed) != 0 {
        0
    } else {
        t
    }
}

const MIB: usize = 1 << 20;

/// A stretch of memory the runtime gave out (device memory is host memory in the simulated
/// runtime), by address so that threads can pass it along.
#[derive(Clone, Copy)]
struct Region {
    addr: usize,
    len: usize,
}

impl Region {
    const NONE: Region = Region { addr: 0, len: 0 };

    fn ptr(self) -> *mut c_void {
        self.addr as *mut c_void
    }

    /// The part from `offset` on (none when the region is none or too short).
    fn skip(self, offset: usize) -> Region {
        if self.addr == 0 || offset > self.len {
            Region::NONE
        } else {
            Region { addr: self.addr + offset, len: self.len - offset }
        }
    }
}

/// An `aclrtStream`, by address.
#[derive(Clone, Copy)]
struct Stream(usize);

impl Stream {
    fn ptr(self) -> *mut c_void {
        self.0 as *mut c_void
    }
}

/// `aclrtMemcpyKind` values (acl_rt.h).
const HOST_TO_DEVICE: c_int = 1;
const DEVICE_TO_HOST: c_int = 2;
/// `aclrtMemMallocPolicy` ACL_MEM_MALLOC_HUGE_FIRST, torch_npu's.
const HUGE_FIRST: c_int = 0;
/// `aclrtMemAttr` ACL_HBM_MEM.
const HBM: c_int = 1;
/// `HcclReduceOp` HCCL_REDUCE_SUM.
const SUM: c_int = 0;
/// AI cores an Atlas A2 launch spans.
const BLOCK_DIM: u32 = 24;
/// Bytes of a launch's kernel arguments.
const ARGS_BYTES: usize = 256;

/// The runtime calls the workloads make, each through the interposed wrapper (what a preloaded
/// program's call binds to). Regions and streams are the runtime's own, or none (NULL), which the
/// runtime refuses: each function's arguments meet the C contract of its wrapper.
mod rt {
    use super::*;

    pub fn set_device(device: i32) -> c_int {
        // SAFETY: no pointer arguments.
        unsafe { interpose::aclrtSetDevice(device) }
    }

    pub fn reset_device(device: i32) -> c_int {
        // SAFETY: no pointer arguments.
        unsafe { interpose::aclrtResetDevice(device) }
    }

    pub fn create_context(device: i32) -> (c_int, usize) {
        let mut ctx: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ctx` is writable storage for the handle.
        let rc = unsafe { interpose::aclrtCreateContext(&mut ctx, device) };
        (rc, ctx as usize)
    }

    pub fn destroy_context(ctx: usize) -> c_int {
        // SAFETY: a context create_context made (or NULL, which the runtime refuses).
        unsafe { interpose::aclrtDestroyContext(ctx as *mut c_void) }
    }

    /// A new stream, whose id is `id`.
    pub fn create_stream(id: u32) -> (c_int, Stream) {
        interpose::set_next_stream(id);
        let mut s: *mut c_void = std::ptr::null_mut();
        // SAFETY: `s` is writable storage for the handle.
        let rc = unsafe { interpose::aclrtCreateStream(&mut s) };
        (rc, Stream(s as usize))
    }

    pub fn destroy_stream(s: Stream) -> c_int {
        // SAFETY: a stream handle create_stream made (or NULL, which the runtime refuses).
        unsafe { interpose::aclrtDestroyStream(s.ptr()) }
    }

    pub fn synchronize(s: Stream) -> c_int {
        // SAFETY: a stream handle create_stream made (or NULL: the default stream).
        unsafe { interpose::aclrtSynchronizeStream(s.ptr()) }
    }

    fn allocated(rc: c_int, p: *mut c_void, len: usize) -> (c_int, Region) {
        if rc == 0 && !p.is_null() {
            (rc, Region { addr: p as usize, len })
        } else {
            (rc, Region::NONE)
        }
    }

    pub fn malloc(len: usize) -> (c_int, Region) {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is writable storage for the pointer.
        let rc = unsafe { interpose::aclrtMalloc(&mut p, len, HUGE_FIRST) };
        allocated(rc, p, len)
    }

    pub fn malloc_cached(len: usize) -> (c_int, Region) {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is writable storage for the pointer.
        let rc = unsafe { interpose::aclrtMallocCached(&mut p, len, HUGE_FIRST) };
        allocated(rc, p, len)
    }

    pub fn malloc_host(len: usize) -> (c_int, Region) {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is writable storage for the pointer.
        let rc = unsafe { interpose::aclrtMallocHost(&mut p, len) };
        allocated(rc, p, len)
    }

    pub fn free(r: Region) -> c_int {
        // SAFETY: memory malloc or malloc_cached gave, freed once (or NULL, which is refused).
        unsafe { interpose::aclrtFree(r.ptr()) }
    }

    pub fn free_host(r: Region) -> c_int {
        // SAFETY: memory malloc_host gave, freed once (or NULL, which is refused).
        unsafe { interpose::aclrtFreeHost(r.ptr()) }
    }

    pub fn mem_info() -> c_int {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both out pointers are writable.
        unsafe { interpose::aclrtGetMemInfo(HBM, &mut free, &mut total) }
    }

    /// Copy the first `count` bytes of `src` to `dst`, synchronously or on `stream`.
    pub fn memcpy(dst: Region, src: Region, count: usize, kind: c_int, stream: Option<Stream>) -> c_int {
        // A region too short (or none) is passed as NULL, which the runtime refuses.
        let (d, s) = if count <= dst.len.min(src.len) { (dst, src) } else { (Region::NONE, Region::NONE) };
        match stream {
            // SAFETY: `d` holds `d.len` bytes and `s` at least `count` (checked above), or both
            // are NULL.
            Some(st) => unsafe {
                interpose::aclrtMemcpyAsync(d.ptr(), d.len, s.ptr(), count, kind, st.ptr())
            },
            // SAFETY: as above.
            None => unsafe { interpose::aclrtMemcpy(d.ptr(), d.len, s.ptr(), count, kind) },
        }
    }

    pub fn memset_async(dst: Region, count: usize, stream: Stream) -> c_int {
        // SAFETY: the runtime writes at most `count` <= `dst.len` bytes (it checks count <=
        // maxCount), or refuses a NULL region.
        unsafe { interpose::aclrtMemsetAsync(dst.ptr(), dst.len, 0, count, stream.ptr()) }
    }

    /// A kernel launch through one of the four launch functions (`via`, as `KERNELS` says). The
    /// simulated runtime loads no kernel binaries: the function handle is NULL, as its own
    /// operators pass; `args` (device memory) and `host_args` hold the arguments.
    pub fn launch(via: usize, args: Region, host_args: Region, stream: Stream) -> c_int {
        let null = std::ptr::null_mut();
        let (a, h) = (args.ptr(), host_args.ptr());
        let n = ARGS_BYTES.min(args.len);
        let hn = ARGS_BYTES.min(host_args.len);
        // SAFETY: the arguments are (pointer, size) pairs of memory the runtime gave (or NULL
        // with size 0), a stream it made and NULL configurations, which the C contracts allow.
        unsafe {
            match via {
                0 => interpose::aclrtLaunchKernel(null, BLOCK_DIM, a, n, stream.ptr()),
                1 => interpose::aclrtLaunchKernelV2(null, BLOCK_DIM, a, n, null, stream.ptr()),
                2 => interpose::aclrtLaunchKernelWithConfig(null, BLOCK_DIM, stream.ptr(), null, null, null),
                _ => interpose::aclrtLaunchKernelWithHostArgs(
                    null,
                    BLOCK_DIM,
                    stream.ptr(),
                    null,
                    h,
                    hn,
                    null,
                    0,
                ),
            }
        }
    }

    /// `count` elements of `data_type` in `buf`, all-reduced in place.
    pub fn all_reduce(buf: Region, count: u64, data_type: u32, comm: usize, stream: Stream) -> c_int {
        let b = if fits(buf, count, data_type, 1) { buf } else { Region::NONE };
        let dt = data_type as c_int;
        // SAFETY: `b` holds `count` elements (checked by fits) or is NULL, which is refused.
        unsafe {
            interpose::HcclAllReduce(b.ptr(), b.ptr(), count, dt, SUM, comm as *mut c_void, stream.ptr())
        }
    }

    pub fn broadcast(buf: Region, count: u64, data_type: u32, comm: usize, stream: Stream) -> c_int {
        let b = if fits(buf, count, data_type, 1) { buf } else { Region::NONE };
        // SAFETY: `b` holds `count` elements or is NULL; root 0 is a rank of every communicator.
        unsafe {
            interpose::HcclBroadcast(b.ptr(), count, data_type as c_int, 0, comm as *mut c_void, stream.ptr())
        }
    }

    /// An all-gather in place: rank 0's `count` elements at the start of `out`, which holds
    /// `ranks` times that.
    pub fn all_gather(
        out: Region,
        count: u64,
        data_type: u32,
        ranks: u32,
        comm: usize,
        stream: Stream,
    ) -> c_int {
        let o = if fits(out, count, data_type, ranks) { out } else { Region::NONE };
        let dt = data_type as c_int;
        // SAFETY: `o` holds `ranks` x `count` elements (checked by fits) or is NULL.
        unsafe { interpose::HcclAllGather(o.ptr(), o.ptr(), count, dt, comm as *mut c_void, stream.ptr()) }
    }

    /// A reduce-scatter in place: rank 0's `count` elements come out at the start of `buf`,
    /// which the contract says holds `ranks` times that; the simulated HCCL reads only rank 0's
    /// part, which `buf` holds.
    pub fn reduce_scatter(buf: Region, count: u64, data_type: u32, comm: usize, stream: Stream) -> c_int {
        let b = if fits(buf, count, data_type, 1) { buf } else { Region::NONE };
        let dt = data_type as c_int;
        // SAFETY: `b` holds rank 0's `count` elements, all the simulated runtime touches, or is NULL.
        unsafe {
            interpose::HcclReduceScatter(b.ptr(), b.ptr(), count, dt, SUM, comm as *mut c_void, stream.ptr())
        }
    }

    pub fn barrier(comm: usize, stream: Stream) -> c_int {
        // SAFETY: a communicator comm_init made (or NULL, which is refused) and a stream.
        unsafe { interpose::HcclBarrier(comm as *mut c_void, stream.ptr()) }
    }

    /// Whether `r` holds `ranks` x `count` elements of `data_type`.
    fn fits(r: Region, count: u64, data_type: u32, ranks: u32) -> bool {
        let elem = cann::data_type_bytes(data_type).unwrap_or(1);
        count
            .checked_mul(elem)
            .and_then(|b| b.checked_mul(u64::from(ranks)))
            .is_some_and(|b| r.addr != 0 && b <= r.len as u64)
    }
}

/// One thread's view: its random stream, the time scale, and the job it reports to.
struct Actor {
    rng: Rng,
    /// Device-time draws, apart from `rng` so the host-time sequences stay as they were.
    dev: Rng,
    scale: f64,
    job: Arc<Job>,
}

impl Actor {
    /// Announce the host time of the next runtime call, drawn from `model`.
    fn host(&mut self, model: &Model) {
        let ns = model.sample(&mut self.rng) * self.scale;
        interpose::set_next_host_work(ns as u64);
    }

    /// Announce a host time of `ns` (before scaling) for the next runtime call.
    fn host_ns(&mut self, ns: f64) {
        interpose::set_next_host_work((ns * self.scale) as u64);
    }

    /// One intercepted call has returned `rc`: count it; a failure fails the job.
    fn done(&self, rc: c_int) -> bool {
        interpose::clear_announced_host_work();
        device::take_next();
        self.job.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if rc != 0 {
            self.job.fail();
        }
        rc == 0
    }

    /// A call the runtime makes on the workload's behalf that MSPTI does not intercept (the
    /// communicator's set-up): no host time of its own (the first collective's models it).
    fn untimed<T>(&self, f: impl FnOnce() -> Result<T, c_int>) -> Option<T> {
        interpose::set_next_host_work(0);
        let r = f();
        interpose::clear_announced_host_work();
        match r {
            Ok(v) => Some(v),
            Err(_) => {
                self.job.fail();
                None
            }
        }
    }

    /// One eager-mode operator: the framework's own host work (dispatch, shape inference, the op's
    /// workspace query: no runtime call, so no callback), then its kernel launch through the launch
    /// function that kind of kernel uses.
    fn op(&mut self, k: Kernel, mem: &Memory) {
        clock::spend((models::FRAMEWORK_OP.sample(&mut self.rng) * self.scale) as u64);
        self.launch(k, mem);
    }

    /// A kernel launch.
    fn launch(&mut self, k: Kernel, mem: &Memory) {
        let (kernel, median_us, via) = KERNELS[k as usize];
        let device_ns = self.dev.lognormal(median_us * 1e3, 0.2) * self.scale;
        device::set_next(CallSpec { kernel, device_ns: device_ns as u64, ..CallSpec::default() });
        self.host(&models::LAUNCH);
        self.done(rt::launch(via, mem.args, mem.host_args, mem.stream));
    }

    /// The operators of `seq`, in order, `n` in all (the sequence repeats).
    fn ops(&mut self, seq: &[Kernel], n: usize, mem: &Memory) {
        for &k in seq.iter().cycle().take(n) {
            self.op(k, mem);
        }
    }
}

/// What a compute thread launches with: its stream and where its kernels' arguments are.
struct Memory {
    stream: Stream,
    args: Region,
    host_args: Region,
}

/// A communicator of the workload's `ranks` ranks (this process is rank 0), named as the
/// simulator's records name communicators (`msimSetCommName`).
fn communicator(actor: &Actor, ranks: u32) -> Option<usize> {
    let name = device::comm_name();
    actor.untimed(|| interpose::comm_init(ranks, 0, name).map(|c| c as usize))
}

fn destroy_communicator(actor: &Actor, comm: usize) {
    actor.untimed(|| match interpose::comm_destroy(comm as *mut c_void) {
        0 => Ok(()),
        rc => Err(rc),
    });
}

/// Kernels a transformer step launches.
#[derive(Clone, Copy)]
enum Kernel {
    MatMul,
    FlashAttention,
    LayerNorm,
    Add,
    Gelu,
    Cast,
    Transpose,
    Softmax,
    AdamW,
}
use Kernel::*;

/// Per kernel: its name, median device time (µs) at realistic scale, and the launch function
/// (index into `Apis::launch`) it goes through: vector kernels through aclrtLaunchKernel, matrix
/// multiplications through aclrtLaunchKernelV2, fused attention with a launch configuration, the
/// fused optimizer (its tensor lists) with host-side arguments. Their task types follow from the
/// names (`cann::kernel_type`).
const KERNELS: [(&std::ffi::CStr, f64, usize); 9] = [
    (c"MatMulV2", 120.0, 1),
    (c"FlashAttentionScore", 250.0, 2),
    (c"LayerNormV3", 15.0, 0),
    (c"Add", 6.0, 0),
    (c"FastGelu", 10.0, 0),
    (c"Cast", 4.0, 0),
    (c"Transpose", 8.0, 0),
    (c"SoftmaxV2", 20.0, 0),
    (c"ApplyAdamW", 150.0, 3),
];

/// A transformer layer's forward operators.
const FORWARD: [Kernel; 10] =
    [LayerNorm, MatMul, FlashAttention, MatMul, Add, LayerNorm, MatMul, Gelu, MatMul, Add];
/// Its backward operators (gradients of the above, last layer first).
const BACKWARD: [Kernel; 10] =
    [Add, MatMul, Gelu, MatMul, LayerNorm, MatMul, Softmax, FlashAttention, MatMul, Transpose];
/// A fused optimizer's operators over chunks of the parameters (memory-bound, so the step ends
/// with the device behind the host and the synchronize waits for it).
const OPTIMIZER: [Kernel; 4] = [Cast, AdamW, AdamW, AdamW];
/// `HcclDataType` BFP16: gradients of mixed-precision training.
const BF16: u32 = 11;
const FP16: u32 = MSPTI_ACTIVITY_COMMUNICATION_FP16;
const FP32: u32 = MSPTI_ACTIVITY_COMMUNICATION_FP32;

/// Zeroed host memory a workload thread owns (a framework's pageable buffers): untouched pages
/// cost nothing.
struct HostBuffer {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl HostBuffer {
    fn new(len: usize) -> Option<HostBuffer> {
        let layout = std::alloc::Layout::from_size_align(len, 64).ok().filter(|l| l.size() > 0)?;
        // SAFETY: the layout's size is not zero.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        (!ptr.is_null()).then_some(HostBuffer { ptr, layout })
    }

    fn region(&self) -> Region {
        Region { addr: self.ptr as usize, len: self.layout.size() }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by alloc_zeroed with this layout in `new`, and freed only here.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

fn region_of(b: &Option<HostBuffer>) -> Region {
    b.as_ref().map_or(Region::NONE, HostBuffer::region)
}

/// Messages from a training thread to its communication thread.
enum Comm {
    /// The stream the collectives go to and the device memory an all-gather's output may use.
    Start {
        stream: Stream,
        gather: Region,
    },
    AllReduce(Region, usize),
    AllGather(usize),
    Broadcast(Region, usize),
    Barrier,
    /// Reply when everything sent before has been issued.
    Flush(mpsc::Sender<()>),
}

/// The collectives of the communication thread, for the first-call-per-operation model.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    AllReduce,
    AllGather,
    Broadcast,
    Barrier,
}

fn comm_thread(rx: mpsc::Receiver<Comm>, mut actor: Actor, ranks: u32) {
    let mut seen: HashSet<(Op, usize)> = HashSet::new();
    let mut stream = Stream(0);
    let mut comm = 0usize;
    let mut gather = Region::NONE;
    // An all-gather's output when the device memory offered is too small for every rank's part.
    let mut own_gather: Option<HostBuffer> = None;
    let mut hccl = |actor: &mut Actor, op: Op, bytes: usize| {
        let first = seen.insert((op, bytes));
        let ns = models::hccl_host_ns(&mut actor.rng, bytes as u64, ranks, first);
        actor.host_ns(ns);
    };
    for msg in rx {
        match msg {
            Comm::Start { stream: s, gather: g } => {
                stream = s;
                gather = g;
                comm = communicator(&actor, ranks).unwrap_or(0);
            }
            // Gradients in bf16, parameters broadcast in fp32, activations gathered in fp16.
            Comm::AllReduce(buf, b) => {
                hccl(&mut actor, Op::AllReduce, b);
                actor.done(rt::all_reduce(buf, (b / 2) as u64, BF16, comm, stream));
            }
            Comm::AllGather(b) => {
                let out_len = b.saturating_mul(ranks as usize);
                if gather.len < out_len && own_gather.as_ref().is_none_or(|o| o.layout.size() < out_len) {
                    own_gather = HostBuffer::new(out_len);
                }
                let out = if gather.len >= out_len { gather } else { region_of(&own_gather) };
                hccl(&mut actor, Op::AllGather, b);
                actor.done(rt::all_gather(out, (b / 2) as u64, FP16, ranks, comm, stream));
            }
            Comm::Broadcast(buf, b) => {
                hccl(&mut actor, Op::Broadcast, b);
                actor.done(rt::broadcast(buf, (b / 4) as u64, FP32, comm, stream));
            }
            Comm::Barrier => {
                hccl(&mut actor, Op::Barrier, 0);
                actor.done(rt::barrier(comm, stream));
            }
            Comm::Flush(reply) => {
                let _ = reply.send(());
            }
        }
    }
    if comm != 0 {
        destroy_communicator(&actor, comm);
    }
}

/// Gradient buckets of a ~350 M-parameter model in fp16 (DDP's 25 MiB default bucket size).
const BUCKETS: [usize; 6] = [25 * MIB, 25 * MIB, 25 * MIB, 25 * MIB, 25 * MIB, 12 * MIB];
/// Device memory the training set-up allocates: 8 blocks of this.
const BLOCK: usize = 256 * MIB;
/// A block the caching allocator adds now and then (torch's large-segment rounding).
const GROWTH: usize = 20 * MIB;
/// An input batch copied to the device.
const BATCH: usize = 8 * MIB;
/// The loss (or logits' argmax) read back each step.
const LOSS: usize = 4;

/// Ask the communication thread to issue everything sent so far, and wait until it has.
fn flush(tx: &mpsc::Sender<Comm>) {
    let (rtx, rrx) = mpsc::channel();
    let _ = tx.send(Comm::Flush(rtx));
    let _ = rrx.recv();
}

fn training_thread(cfg: WorkloadConfig, mut me: Actor, tx: mpsc::Sender<Comm>, t: u32) {
    // Set-up, as torch_npu does on first use of a device.
    me.host(&models::SET_DEVICE);
    me.done(rt::set_device(0));
    me.host(&models::CREATE_CONTEXT);
    let (rc, ctx) = rt::create_context(0);
    me.done(rc);
    me.host(&models::CREATE_STREAM);
    let (rc, stream) = rt::create_stream(compute_stream(t));
    me.done(rc);
    me.host(&models::CREATE_STREAM);
    let (rc, comm_stream) = rt::create_stream(COMM_STREAM_BASE + t);
    me.done(rc);
    // Parameters, activations, gradient buckets, gathered activations, inputs, and the rest.
    let mut dev = [Region::NONE; 8];
    for d in &mut dev {
        me.host(&models::MALLOC);
        let (rc, r) = rt::malloc(BLOCK);
        me.done(rc);
        *d = r;
    }
    let (params, activations, grads, gathered, inputs) = (dev[0], dev[1], dev[2], dev[3], dev[4]);
    me.host(&models::MALLOC_HOST);
    let (rc, staging) = rt::malloc_host(BATCH);
    me.done(rc);
    let mem = Memory { stream, args: activations.skip(BLOCK / 2), host_args: staging };
    let _ = tx.send(Comm::Start { stream: comm_stream, gather: gathered });
    let _ = tx.send(Comm::Broadcast(params, 64 * MIB));
    let mut grown = Vec::new();
    for step in 0..cfg.steps {
        if me.job.cancelled() {
            break;
        }
        // Forward: inputs to the device, then the layers' kernels.
        for half in 0..2 {
            me.host(&models::MEMCPY_ASYNC);
            me.done(rt::memcpy(inputs.skip(half * BATCH), staging, BATCH, HOST_TO_DEVICE, Some(stream)));
        }
        for _ in 0..3 {
            me.host(&models::MEMSET_ASYNC);
            me.done(rt::memset_async(activations, MIB, stream));
            me.ops(&FORWARD, 50, &mem);
        }
        if me.rng.chance(0.05) {
            // The caching allocator grows now and then.
            let plain = me.rng.chance(0.5);
            me.host(&models::MALLOC);
            let (rc, r) = if plain { rt::malloc(GROWTH) } else { rt::malloc_cached(GROWTH) };
            me.done(rc);
            grown.push(r);
        }
        // Backward: kernels, handing each finished gradient bucket to the communication thread.
        let mut at = 0;
        for b in BUCKETS {
            me.ops(&BACKWARD, 50, &mem);
            let _ = tx.send(Comm::AllReduce(grads.skip(at), b));
            at += b;
        }
        if step % 10 == 9 {
            let _ = tx.send(Comm::AllGather(4 * MIB));
        }
        flush(&tx);
        // Optimizer: its kernels wait on the device for the gradients' all-reduce; then the step
        // waits for the stream (so the host never runs more than a step ahead of the device) and
        // reads the loss back.
        device::stream_wait(COMM_STREAM_BASE + t);
        me.ops(&OPTIMIZER, 40, &mem);
        me.host(&models::SYNC_CALL);
        me.done(rt::synchronize(stream));
        me.host(&models::MEMCPY);
        me.done(rt::memcpy(staging, inputs, LOSS, DEVICE_TO_HOST, None));
        if step % 10 == 0 {
            me.host(&models::MEM_GET_INFO);
            me.done(rt::mem_info());
        }
        me.job.tick();
    }
    let _ = tx.send(Comm::Barrier);
    flush(&tx);
    // The caching allocator's blocks go back at the end, as `torch.npu.empty_cache()` returns them.
    for d in dev.into_iter().chain(grown) {
        me.host(&models::FREE);
        me.done(rt::free(d));
    }
    me.host(&models::FREE_HOST);
    me.done(rt::free_host(staging));
    for s in [stream, comm_stream] {
        me.host(&models::DESTROY_STREAM);
        me.done(rt::destroy_stream(s));
    }
    me.host(&models::DESTROY_CONTEXT);
    me.done(rt::destroy_context(ctx));
    me.host(&models::RESET_DEVICE);
    me.done(rt::reset_device(0));
}

/// The kernel names of the simulated graph, in task order.
static GRAPH_TASKS: [&std::ffi::CStr; 12] = [
    c"MatMulV2",
    c"Add",
    c"LayerNormV3",
    c"FlashAttentionScore",
    c"MatMulV2",
    c"FastGelu",
    c"MatMulV2",
    c"Add",
    c"LayerNormV3",
    c"SoftmaxV2",
    c"Cast",
    c"Transpose",
];
/// Tasks per graph replay.
pub const GRAPH_KERNELS: u32 = 48;

fn graph_thread(cfg: WorkloadConfig, mut me: Actor, t: u32) {
    me.host(&models::SET_DEVICE);
    me.done(rt::set_device(0));
    me.host(&models::CREATE_STREAM);
    let (rc, stream) = rt::create_stream(compute_stream(t));
    me.done(rc);
    me.host(&models::MALLOC);
    let (rc, block) = rt::malloc(BLOCK);
    me.done(rc);
    let host = HostBuffer::new(BATCH);
    let input = region_of(&host);
    let args = block.skip(BLOCK / 2);
    for _ in 0..cfg.steps {
        if me.job.cancelled() {
            break;
        }
        me.host(&models::MEMCPY_ASYNC);
        me.done(rt::memcpy(block, input, BATCH, HOST_TO_DEVICE, Some(stream)));
        let device_ns = me.dev.lognormal(40e3, 0.2) * me.scale;
        device::set_next(CallSpec {
            names: &GRAPH_TASKS,
            node: Some(c"aclmdlRIExecuteAsync"),
            kernels: GRAPH_KERNELS,
            device_ns: device_ns as u64,
            graph: true,
            ..CallSpec::default()
        });
        me.host(&models::LAUNCH);
        me.done(rt::launch(1, args, Region::NONE, stream));
        me.host(&models::SYNC_CALL);
        me.done(rt::synchronize(stream));
        me.host(&models::MEMCPY);
        me.done(rt::memcpy(input, block, LOSS, DEVICE_TO_HOST, None));
        me.job.tick();
    }
    me.host(&models::FREE);
    me.done(rt::free(block));
    me.host(&models::DESTROY_STREAM);
    me.done(rt::destroy_stream(stream));
    me.host(&models::RESET_DEVICE);
    me.done(rt::reset_device(0));
}

/// Bytes of a decode step's tensor-parallel all-reduce, and of the occasional reduce-scatter.
const DECODE_ALLREDUCE: usize = 64 * 1024;
const REDUCE_SCATTER: usize = MIB;

fn inference_thread(cfg: WorkloadConfig, mut me: Actor, t: u32) {
    let mut seen: HashSet<u32> = HashSet::new();
    me.host(&models::SET_DEVICE);
    me.done(rt::set_device(0));
    me.host(&models::CREATE_STREAM);
    let (rc, stream) = rt::create_stream(compute_stream(t));
    me.done(rc);
    let mut dev = [Region::NONE; 4];
    for d in &mut dev {
        me.host(&models::MALLOC);
        let (rc, r) = rt::malloc(BLOCK);
        me.done(rc);
        *d = r;
    }
    let (inputs, activations, reduced, scattered) = (dev[0], dev[1], dev[2], dev[3]);
    let comm = if cfg.ranks > 1 { communicator(&me, cfg.ranks).unwrap_or(0) } else { 0 };
    let host = HostBuffer::new(BATCH);
    let input = region_of(&host);
    let mem = Memory { stream, args: activations.skip(BLOCK / 2), host_args: input };
    for _ in 0..cfg.steps {
        if me.job.cancelled() {
            break;
        }
        me.host(&models::MEMCPY_ASYNC);
        me.done(rt::memcpy(inputs, input, BATCH, HOST_TO_DEVICE, Some(stream)));
        // Prefill.
        me.ops(&FORWARD, 200, &mem);
        // Decode: per token, the layers' kernels and (tensor parallel) small all-reduces.
        let tokens = 16 + me.rng.below(32);
        for _ in 0..tokens {
            for layer_group in 0..4u32 {
                me.ops(&FORWARD, 10, &mem);
                if cfg.ranks > 1 {
                    let first = seen.insert(layer_group);
                    let ns = models::hccl_host_ns(&mut me.rng, DECODE_ALLREDUCE as u64, cfg.ranks, first);
                    me.host_ns(ns);
                    me.done(rt::all_reduce(reduced, (DECODE_ALLREDUCE / 2) as u64, FP16, comm, stream));
                }
            }
            me.host(&models::SYNC_CALL);
            me.done(rt::synchronize(stream));
            me.host(&models::MEMCPY);
            me.done(rt::memcpy(input, inputs, LOSS, DEVICE_TO_HOST, None));
        }
        if cfg.ranks > 1 && me.rng.chance(0.1) {
            let ns = models::hccl_host_ns(&mut me.rng, REDUCE_SCATTER as u64, cfg.ranks, false);
            me.host_ns(ns);
            me.done(rt::reduce_scatter(scattered, (REDUCE_SCATTER / 2) as u64, FP16, comm, stream));
        }
        me.job.tick();
    }
    for d in dev {
        me.host(&models::FREE);
        me.done(rt::free(d));
    }
    me.host(&models::DESTROY_STREAM);
    me.done(rt::destroy_stream(stream));
    me.host(&models::RESET_DEVICE);
    me.done(rt::reset_device(0));
    if comm != 0 {
        destroy_communicator(&me, comm);
    }
}

/// Start a workload on its own threads; the returned job counts finished steps.
pub fn start(cfg: WorkloadConfig) -> Result<Arc<Job>, &'static str> {
    if cfg.kind != TRAINING && cfg.kind != INFERENCE && cfg.kind != GRAPH {
        return Err("kind must be 0 (training), 1 (inference) or 2 (graph)");
    }
    if cfg.threads == 0 || cfg.threads > 256 || cfg.ranks == 0 {
        return Err("threads must be 1-256 and ranks at least 1");
    }
    if !(cfg.time_scale.is_finite() && cfg.time_scale >= 0.0) {
        return Err("time_scale must be a finite number >= 0");
    }
    let job = Job::new(u64::from(cfg.steps) * u64::from(cfg.threads));
    // On the virtual clock every thread of the job starts at one instant: after anything earlier
    // (the device's last task, the starting thread's time), a little ahead of real time.
    let t0 = clock::job_start_ns(device::latest_free().max(clock::virtual_now()));
    let begin = move |stream: u32| {
        clock::virtual_set(t0);
        device::set_thread_stream(stream);
    };
    for t in 0..cfg.threads {
        let seed = cfg.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(u64::from(t) * 2 + 1);
        let dev = Rng::new(seed ^ 0xde71ce);
        let me = Actor { rng: Rng::new(seed), dev, scale: cfg.time_scale, job: job.clone() };
        if cfg.kind == TRAINING {
            let (tx, rx) = mpsc::channel();
            let dev = Rng::new(seed ^ 0xc0de);
            let comm = Actor { rng: Rng::new(seed ^ 0xc0ffee), dev, scale: cfg.time_scale, job: job.clone() };
            let ranks = cfg.ranks;
            // Each compute thread launches on a stream of its own; its collectives go to another.
            job.spawn(format!("sim-comm-{t}"), move || {
                begin(COMM_STREAM_BASE + t);
                comm_thread(rx, comm, ranks)
            });
            job.spawn(format!("sim-train-{t}"), move || {
                begin(compute_stream(t));
                training_thread(cfg, me, tx, t)
            });
        } else if cfg.kind == GRAPH {
            job.spawn(format!("sim-graph-{t}"), move || {
                begin(compute_stream(t));
                graph_thread(cfg, me, t)
            });
        } else {
            job.spawn(format!("sim-infer-{t}"), move || {
                begin(compute_stream(t));
                inference_thread(cfg, me, t)
            });
        }
    }
    Ok(job)
}
