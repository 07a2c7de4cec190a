//! Simulated workloads: a data-parallel training step and an inference loop, each calling the
//! simulated runtime and HCCL the way a torch_npu job calls the real ones.

use std::collections::HashSet;
use std::sync::mpsc;
use std::sync::Arc;

use mspti_abi::{MSPTI_ACTIVITY_COMMUNICATION_FP16, MSPTI_ACTIVITY_COMMUNICATION_FP32};

use crate::apis;
use crate::clock;
use crate::device::{self, CallSpec};
use crate::jobs::Job;
use crate::models::{self, Model, Rng};

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
#[no_mangle]
pub extern "C" fn msimSetWorkloadStreams(shared: u32) {
    SHARED_STREAM.store(shared, std::sync::atomic::Ordering::Relaxed);
}

fn compute_stream(t: u32) -> u32 {
    if SHARED_STREAM.load(std::sync::atomic::Ordering::Relaxed) != 0 {
        0
    } else {
        t
    }
}

/// The APIs a workload calls, resolved once by their 26.x names (the same entries fire the
/// `rt*` names in cann8 mode).
struct Apis {
    launch: [u32; 4],
    memcpy_async: u32,
    memcpy: u32,
    memset_async: u32,
    sync: u32,
    malloc: u32,
    malloc_cached: u32,
    free: u32,
    malloc_host: u32,
    free_host: u32,
    mem_info: u32,
    set_device: u32,
    reset_device: u32,
    create_context: u32,
    destroy_context: u32,
    create_stream: u32,
    destroy_stream: u32,
    allreduce: u32,
    broadcast: u32,
    allgather: u32,
    reduce_scatter: u32,
    barrier: u32,
}

fn api(name: &str) -> u32 {
    apis::find(name).unwrap_or_else(|| panic!("simulated API {name} is in the table"))
}

impl Apis {
    fn resolve() -> Apis {
        Apis {
            launch: [
                api("aclrtLaunchKernel"),
                api("aclrtLaunchKernelV2"),
                api("aclrtLaunchKernelWithConfig"),
                api("aclrtLaunchKernelWithHostArgs"),
            ],
            memcpy_async: api("aclrtMemcpyAsync"),
            memcpy: api("aclrtMemcpy"),
            memset_async: api("aclrtMemsetAsync"),
            sync: api("aclrtSynchronizeStream"),
            malloc: api("aclrtMalloc"),
            malloc_cached: api("aclrtMallocCached"),
            free: api("aclrtFree"),
            malloc_host: api("aclrtMallocHost"),
            free_host: api("aclrtFreeHost"),
            mem_info: api("aclrtGetMemInfo"),
            set_device: api("aclrtSetDevice"),
            reset_device: api("aclrtResetDevice"),
            create_context: api("aclrtCreateContext"),
            destroy_context: api("aclrtDestroyContext"),
            create_stream: api("aclrtCreateStream"),
            destroy_stream: api("aclrtDestroyStream"),
            allreduce: api("HcclAllReduce"),
            broadcast: api("HcclBroadcast"),
            allgather: api("HcclAllGather"),
            reduce_scatter: api("HcclReduceScatter"),
            barrier: api("HcclBarrier"),
        }
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
    fn run(&mut self, api: u32, model: &Model) {
        let ns = model.sample(&mut self.rng) * self.scale;
        apis::call(api, ns as u64);
        self.job.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn run_ns(&mut self, api: u32, ns: f64) {
        apis::call(api, (ns * self.scale) as u64);
        self.job.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// A call that moves `bytes` (a copy, memset, allocation): its activity records carry them.
    fn run_bytes(&mut self, api: u32, model: &Model, bytes: u64) {
        device::set_next(CallSpec { bytes, ..CallSpec::default() });
        self.run(api, model);
    }

    /// One eager-mode operator: the framework's own host work (dispatch, shape inference, the op's
    /// workspace query: no runtime call, so no callback), then its kernel launch through the launch
    /// function that kind of kernel uses.
    fn op(&mut self, a: &Apis, k: Kernel) {
        clock::spend((models::FRAMEWORK_OP.sample(&mut self.rng) * self.scale) as u64);
        self.launch(a, k);
    }

    /// A kernel launch.
    fn launch(&mut self, a: &Apis, k: Kernel) {
        let (kernel, median_us, via) = KERNELS[k as usize];
        let device_ns = self.dev.lognormal(median_us * 1e3, 0.2) * self.scale;
        device::set_next(CallSpec { kernel, device_ns: device_ns as u64, ..CallSpec::default() });
        self.run(a.launch[via], &models::LAUNCH);
    }

    /// The operators of `seq`, in order, `n` in all (the sequence repeats).
    fn ops(&mut self, a: &Apis, seq: &[Kernel], n: usize) {
        for &k in seq.iter().cycle().take(n) {
            self.op(a, k);
        }
    }

    /// A collective of `bytes` in `data_type` elements over `ranks` ranks.
    fn collective(&mut self, api: u32, ns: f64, bytes: u64, ranks: u32, data_type: u32) {
        device::set_next(CallSpec { bytes, ranks, data_type, ..CallSpec::default() });
        self.run_ns(api, ns);
    }
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

/// Messages from a training thread to its communication thread.
enum Comm {
    AllReduce(u64),
    AllGather(u64),
    Broadcast(u64),
    Barrier,
    /// Reply when everything sent before has been issued.
    Flush(mpsc::Sender<()>),
}

fn comm_thread(rx: mpsc::Receiver<Comm>, mut actor: Actor, a: Arc<Apis>, ranks: u32) {
    let mut seen: HashSet<(u32, u64)> = HashSet::new();
    let mut hccl = |actor: &mut Actor, op: u32, bytes: u64, data_type: u32| {
        let first = seen.insert((op, bytes));
        let ns = models::hccl_host_ns(&mut actor.rng, bytes, ranks, first);
        actor.collective(op, ns, bytes, ranks, data_type);
    };
    for msg in rx {
        match msg {
            // Gradients in bf16, parameters broadcast in fp32, activations gathered in fp16.
            Comm::AllReduce(b) => hccl(&mut actor, a.allreduce, b, BF16),
            Comm::AllGather(b) => hccl(&mut actor, a.allgather, b, FP16),
            Comm::Broadcast(b) => hccl(&mut actor, a.broadcast, b, FP32),
            Comm::Barrier => hccl(&mut actor, a.barrier, 0, FP32),
            Comm::Flush(reply) => {
                let _ = reply.send(());
            }
        }
    }
}

const MIB: u64 = 1 << 20;
/// Gradient buckets of a ~350 M-parameter model in fp16 (DDP's 25 MiB default bucket size).
const BUCKETS: [u64; 6] = [25 * MIB, 25 * MIB, 25 * MIB, 25 * MIB, 25 * MIB, 12 * MIB];

fn training_thread(
    cfg: WorkloadConfig,
    mut me: Actor,
    a: Arc<Apis>,
    tx: mpsc::Sender<Comm>,
    comm_stream: u32,
) {
    // Set-up, as torch_npu does on first use of a device.
    me.run(a.set_device, &models::SET_DEVICE);
    me.run(a.create_context, &models::CREATE_CONTEXT);
    me.run(a.create_stream, &models::CREATE_STREAM);
    me.run(a.create_stream, &models::CREATE_STREAM);
    for _ in 0..8 {
        me.run_bytes(a.malloc, &models::MALLOC, 256 * MIB);
    }
    me.run(a.malloc_host, &models::MALLOC_HOST);
    let _ = tx.send(Comm::Broadcast(64 * MIB));
    for step in 0..cfg.steps {
        if me.job.cancelled() {
            break;
        }
        // Forward: inputs to the device, then the layers' kernels.
        me.run_bytes(a.memcpy_async, &models::MEMCPY_ASYNC, 8 * MIB);
        me.run_bytes(a.memcpy_async, &models::MEMCPY_ASYNC, 8 * MIB);
        for _ in 0..3 {
            me.run_bytes(a.memset_async, &models::MEMSET_ASYNC, MIB);
            me.ops(&a, &FORWARD, 50);
        }
        if me.rng.chance(0.05) {
            // The caching allocator grows now and then.
            let m = if me.rng.chance(0.5) { a.malloc } else { a.malloc_cached };
            me.run(m, &models::MALLOC);
        }
        // Backward: kernels, handing each finished gradient bucket to the communication thread.
        for b in BUCKETS {
            me.ops(&a, &BACKWARD, 50);
            let _ = tx.send(Comm::AllReduce(b));
        }
        if step % 10 == 9 {
            let _ = tx.send(Comm::AllGather(4 * MIB));
        }
        let (rtx, rrx) = mpsc::channel();
        let _ = tx.send(Comm::Flush(rtx));
        let _ = rrx.recv();
        // Optimizer: its kernels wait on the device for the gradients' all-reduce; then the step
        // waits for the stream (so the host never runs more than a step ahead of the device) and
        // reads the loss back.
        device::stream_wait(comm_stream);
        me.ops(&a, &OPTIMIZER, 40);
        me.run(a.sync, &models::SYNC_CALL);
        me.run_bytes(a.memcpy, &models::MEMCPY, 4);
        if step % 10 == 0 {
            me.run(a.mem_info, &models::MEM_GET_INFO);
        }
        me.job.tick();
    }
    let _ = tx.send(Comm::Barrier);
    let (rtx, rrx) = mpsc::channel();
    let _ = tx.send(Comm::Flush(rtx));
    let _ = rrx.recv();
    for _ in 0..8 {
        me.run(a.free, &models::FREE);
    }
    me.run(a.free_host, &models::FREE_HOST);
    me.run(a.destroy_stream, &models::DESTROY_STREAM);
    me.run(a.destroy_stream, &models::DESTROY_STREAM);
    me.run(a.destroy_context, &models::DESTROY_CONTEXT);
    me.run(a.reset_device, &models::RESET_DEVICE);
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

fn graph_thread(cfg: WorkloadConfig, mut me: Actor, a: Arc<Apis>) {
    me.run(a.set_device, &models::SET_DEVICE);
    me.run(a.create_stream, &models::CREATE_STREAM);
    me.run_bytes(a.malloc, &models::MALLOC, 256 * MIB);
    for _ in 0..cfg.steps {
        if me.job.cancelled() {
            break;
        }
        me.run_bytes(a.memcpy_async, &models::MEMCPY_ASYNC, 8 * MIB);
        let device_ns = me.dev.lognormal(40e3, 0.2) * me.scale;
        device::set_next(CallSpec {
            names: &GRAPH_TASKS,
            node: Some(c"aclmdlRIExecuteAsync"),
            kernels: GRAPH_KERNELS,
            device_ns: device_ns as u64,
            graph: true,
            ..CallSpec::default()
        });
        me.run(a.launch[1], &models::LAUNCH);
        me.run(a.sync, &models::SYNC_CALL);
        me.run_bytes(a.memcpy, &models::MEMCPY, 4);
        me.job.tick();
    }
    me.run(a.free, &models::FREE);
    me.run(a.destroy_stream, &models::DESTROY_STREAM);
    me.run(a.reset_device, &models::RESET_DEVICE);
}

fn inference_thread(cfg: WorkloadConfig, mut me: Actor, a: Arc<Apis>) {
    let mut seen: HashSet<u32> = HashSet::new();
    me.run(a.set_device, &models::SET_DEVICE);
    me.run(a.create_stream, &models::CREATE_STREAM);
    for _ in 0..4 {
        me.run_bytes(a.malloc, &models::MALLOC, 256 * MIB);
    }
    for _ in 0..cfg.steps {
        if me.job.cancelled() {
            break;
        }
        me.run_bytes(a.memcpy_async, &models::MEMCPY_ASYNC, 8 * MIB);
        // Prefill.
        me.ops(&a, &FORWARD, 200);
        // Decode: per token, the layers' kernels and (tensor parallel) small all-reduces.
        let tokens = 16 + me.rng.below(32);
        for _ in 0..tokens {
            for layer_group in 0..4u32 {
                me.ops(&a, &FORWARD, 10);
                if cfg.ranks > 1 {
                    let first = seen.insert(layer_group);
                    let ns = models::hccl_host_ns(&mut me.rng, 64 * 1024, cfg.ranks, first);
                    me.collective(a.allreduce, ns, 64 * 1024, cfg.ranks, FP16);
                }
            }
            me.run(a.sync, &models::SYNC_CALL);
            me.run_bytes(a.memcpy, &models::MEMCPY, 4);
        }
        if cfg.ranks > 1 && me.rng.chance(0.1) {
            let ns = models::hccl_host_ns(&mut me.rng, MIB, cfg.ranks, false);
            me.collective(a.reduce_scatter, ns, MIB, cfg.ranks, FP16);
        }
        me.job.tick();
    }
    for _ in 0..4 {
        me.run(a.free, &models::FREE);
    }
    me.run(a.destroy_stream, &models::DESTROY_STREAM);
    me.run(a.reset_device, &models::RESET_DEVICE);
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
    let a = Arc::new(Apis::resolve());
    let job = Job::new(u64::from(cfg.steps) * u64::from(cfg.threads));
    // On the virtual clock every thread of the job starts at one instant: after anything earlier
    // (the device's last task, the starting thread's time), never before the clock's base.
    let t0 = clock::VIRTUAL_BASE_NS.max(device::latest_free()).max(clock::virtual_now());
    let begin = move |stream: u32| {
        clock::virtual_set(t0);
        device::set_thread_stream(stream);
    };
    for t in 0..cfg.threads {
        let seed = cfg.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(u64::from(t) * 2 + 1);
        let dev = Rng::new(seed ^ 0xde71ce);
        let me = Actor { rng: Rng::new(seed), dev, scale: cfg.time_scale, job: job.clone() };
        let a2 = a.clone();
        if cfg.kind == TRAINING {
            let (tx, rx) = mpsc::channel();
            let dev = Rng::new(seed ^ 0xc0de);
            let comm = Actor { rng: Rng::new(seed ^ 0xc0ffee), dev, scale: cfg.time_scale, job: job.clone() };
            let a3 = a.clone();
            let ranks = cfg.ranks;
            // Each compute thread launches on a stream of its own; its collectives go to another.
            job.spawn(format!("sim-comm-{t}"), move || {
                begin(COMM_STREAM_BASE + t);
                comm_thread(rx, comm, a3, ranks)
            });
            job.spawn(format!("sim-train-{t}"), move || {
                begin(compute_stream(t));
                training_thread(cfg, me, a2, tx, COMM_STREAM_BASE + t)
            });
        } else if cfg.kind == GRAPH {
            job.spawn(format!("sim-graph-{t}"), move || {
                begin(compute_stream(t));
                graph_thread(cfg, me, a2)
            });
        } else {
            job.spawn(format!("sim-infer-{t}"), move || {
                begin(compute_stream(t));
                inference_thread(cfg, me, a2)
            });
        }
    }
    Ok(job)
}
