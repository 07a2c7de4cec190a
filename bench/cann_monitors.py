#!/usr/bin/env python3
"""The Ascend monitors side by side on one simulated workload, in separate processes alternated
in one run: no profiler, the simulated library alone (the peers' activity kinds, a minimal C
consumer: its record writing, which every side pays, measured apart), CANN's official Python
monitors, msMonitor's Monitor API (when an installed msMonitor is importable), and mspti-lens. Per
side: the collector's CPU per record, with what it adds to the workload thread (charged) and
without the library's shared part, the wall time it adds to the workload, the records it lost, and
per name (count, total, min, max of end - start) whether it agrees with the others. A section of
BENCHMARKS.md (registered in bench/run.py); also runs alone:

    python bench/cann_monitors.py [--quick] [--rounds N] [--out bench-out/cann_monitors.md]
    python bench/cann_monitors.py --report BENCHMARKS.md     # the full run, its section updated

Two workloads, small C programs compiled here against a simulated CANN tree
(``python -m mspti_lens.sim cann DIR``), whose calls the preloaded ``libmspti.so`` (the
simulator) intercepts as MSPTI does on a machine:

- ``kernels``: a launch loop, per launch ``msimSetNextLaunch`` (what the tree's aclnn operators
  announce) then ``aclrtLaunchKernel``; then ``aclrtSynchronizeStream``. The sides ask for KERNEL
  records only (mspti-lens: ``Session(enable=[], activity=["kernel"])``, which traces no launch
  callback and so asks for no RUNTIME_API records; the bench checks the library wrote no other).
- ``mixed``: training steps, each an MSTX range ``step`` around ranges ``forward`` and ``backward``
  (MSTX marks ``layer`` between their launches), gradient all-reduces on a communication stream
  (HCCL, one rank) and an optimizer's launches. The sides ask for KERNEL, COMMUNICATION and MARKER
  records; mspti-lens runs as its default session does (``Session(activity=["kernel",
  "communication", "marker"])``: runtime and HCCL callbacks traced, kernels joined to their
  launches through RUNTIME_API records, which it asks the library for too).

The peers are measured where they are installed; the repository carries no copy of either and no
recipe to build one. CANN's official Python monitors (the ``mspti`` package: KernelMonitor,
CommunicationMonitor, MstxMonitor; on an Ascend machine CANN's tree holds it in
``$ASCEND_HOME_PATH/python/site-packages``) run when their process can import them: from
``--official-path DIR`` (or ``MSPTI_LENS_OFFICIAL_PATH=DIR``), a directory put first on that
process's sys.path, else from the interpreter's own paths (PYTHONPATH, site-packages, the tree
``$ASCEND_HOME_PATH`` names); their user callbacks are minimal dict aggregators. msMonitor's
Monitor API (the ``msmonitor`` package) likewise, from ``--msmonitor-path DIR`` (or
``MSPTI_LENS_MSMONITOR_PATH``); its records are counted after ``Monitor.stop()`` (it holds them in
C++ vectors) and aggregated from ``get_result()``, whose cost is reported apart. A side that its
process cannot import is reported "not installed", with how to point the bench at it.

Kernel names and device times come from a fixed-seed generator, and the workloads run on the
simulator's virtual clock, so every process sees the same records and the per-name numbers must
agree exactly between the sides; the bench fails when they do not, or when a side loses records.
All SIMULATED: no Ascend NPU here.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# Threads of the simulated library that produce records, as the kernel names them
# (/proc/self/task/*/comm, 15 characters): its device-to-host channel and its activity manager
# (which hands full buffers to per-buffer "msim-complete" threads; those run only the
# collector's complete callback, so they count as the collector's).
PRODUCER_THREADS = ("msim-channel", "ActivityManag")
KERNEL_NAMES = 16
SEED = 0x9E3779B97F4A7C15
# Goals: how many times below a side mspti-lens's CPU per record is (the median of the ratios
# within a round), per case, on one measure: "collector" (its collector CPU) or "charged" (with
# its workload-thread extra); and the wall time it adds.
GOALS = {
    "mixed/virtual": {
        ("msmonitor", "collector"): 3.0,
        ("msmonitor", "charged"): 2.0,
        ("official", "charged"): 15.0,
    },
    "kernels/virtual": {("msmonitor", "charged"): 8.0},
}
GOAL_WALL_PCT = 3.0

SIDES = ("none", "library", "official", "msmonitor", "lens")
# Sides that profile nothing: the baselines of a round. "library": the simulated library writing
# the records the peers ask for, to a minimal C consumer (WORKLOAD_C's bench_library_*), so what
# it adds to the workload thread is the library's own cost, the same for every side.
BASELINES = ("none", "library")
LABEL = {
    "none": "no profiler",
    "library": "the simulated library alone (the same kinds, a minimal C consumer that frees buffers)",
    "official": "CANN's official monitors (mspti package), dict aggregator callbacks",
    "msmonitor": "msMonitor Monitor API (start, stop, get_result)",
    "lens": "mspti-lens Session, default buffers",
}
WORKLOADS = ("kernels", "mixed")
# (workload, clock) cases of one run: collector CPU per record where the workload's own CPU is
# small (the virtual clock: calls take their modelled time without spinning), wall time added
# where the workload takes real time (the real clock: each call spins its modelled host time).
CASES = (("kernels", "virtual"), ("mixed", "virtual"), ("mixed", "real"))
CLOCKS = {"real": 0, "virtual": 1}

# The mixed workload's step, defined once here and in the C below (MIXED_C's #defines).
FORWARD_LAUNCHES, BACKWARD_LAUNCHES, OPTIMIZER_LAUNCHES = 384, 512, 64
LAYERS = 32  # an MSTX mark per layer, in forward
ALLREDUCES = 12
RANGES = ("step", "forward", "backward")
MARKS = ("layer",)


def expected(workload: str, n: int) -> dict[str, int]:
    """The records each side must deliver: n launches, or n steps of the mixed workload."""
    if workload == "kernels":
        return {"kernels": n, "collectives": 0, "markers": 0}
    return {
        "kernels": n * (FORWARD_LAUNCHES + BACKWARD_LAUNCHES + OPTIMIZER_LAUNCHES),
        "collectives": n * ALLREDUCES,
        # MSPTI writes a MARKER record at each end of a range, one per mark.
        "markers": n * (2 * len(RANGES) + LAYERS),
    }


WORKLOAD_C = r"""
#include <stdint.h>
#include <stdio.h>
#include <stddef.h>
typedef int aclError;
typedef int HcclResult;
typedef void *HcclComm;
typedef struct { char internal[4108]; } HcclRootInfo;
typedef uint64_t mstxRangeId;
aclError aclrtSetDevice(int32_t deviceId);
aclError aclrtCreateStream(void **stream);
aclError aclrtSynchronizeStream(void *stream);
aclError aclrtDestroyStream(void *stream);
aclError aclrtResetDevice(int32_t deviceId);
aclError aclrtMalloc(void **devPtr, size_t size, int policy);
aclError aclrtFree(void *devPtr);
aclError aclrtLaunchKernel(void *funcHandle, uint32_t blockDim, const void *argsData, size_t argsSize,
                           void *stream);
HcclResult HcclGetRootInfo(HcclRootInfo *rootInfo);
HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank, HcclComm *comm);
HcclResult HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count, int dataType, int op, HcclComm comm,
                         void *stream);
HcclResult HcclCommDestroy(HcclComm comm);
void mstxMarkA(const char *message, void *stream);
mstxRangeId mstxRangeStartA(const char *message, void *stream);
void mstxRangeEnd(mstxRangeId id);
void msimSetNextLaunch(const char *kernel, const char *node, uint64_t device_ns, uint32_t kernels);

#define NAMES %(names)d
#define FORWARD %(forward)d
#define BACKWARD %(backward)d
#define OPTIMIZER %(optimizer)d
#define LAYERS %(layers)d
#define ALLREDUCES %(allreduces)d
#define FP32 4
#define SUM 0
static char names[NAMES][64];

/* The kernel index and device time (ns) of a launch: a fixed-seed xorshift, the same in every
 * process. Durations are 1..17 us, spread per name so min, max and totals differ by name. */
static uint64_t next(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }

static void init_names(void) {
    for (int k = 0; k < NAMES; k++) {
        snprintf(names[k], sizeof names[k], "BenchOp%%02d_%%08x_high_performance", k, 0x5eedu * (k + 1));
    }
}

static int launch(uint64_t *s, void *stream) {
    uint64_t r = next(s);
    unsigned k = (unsigned)(r %% NAMES);
    uint64_t dev = 1000 + ((r >> 16) %% (1000u * (k + 1)));
    msimSetNextLaunch(names[k], NULL, dev, 1);
    return aclrtLaunchKernel(NULL, 1, NULL, 0, stream) != 0;
}

/* The "library" side: the same activity kinds the peers ask for, consumed by the least a
 * client can do: a subscriber (MSPTI makes records only for one) that enables no callback, a
 * buffer per request, its records counted by kind (MSPTI's own walk) and the buffer freed. What
 * it adds to the workload thread is the library writing its records. */
typedef int msptiResult;
msptiResult msptiSubscribe(void **subscriber, void (*callback)(void *, int, uint32_t, const void *),
                           void *userdata);
msptiResult msptiActivityRegisterCallbacks(void (*)(uint8_t **, size_t *, size_t *),
                                           void (*)(uint8_t *, size_t, size_t));
msptiResult msptiActivityEnable(int kind);
msptiResult msptiActivityDisable(int kind);
msptiResult msptiActivityFlushAll(uint32_t flag);
msptiResult msptiActivityGetNextRecord(uint8_t *buffer, size_t valid, void **record);
void *malloc(size_t);
void free(void *);
#define KIND_MARKER 1
#define KIND_KERNEL 2
#define KIND_COMMUNICATION 9
#define LIBRARY_BUFFER (8u << 20)
static uint64_t library_got[3]; /* kernels, collectives, markers */

static void library_request(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = malloc(LIBRARY_BUFFER);
    *size = *buffer ? LIBRARY_BUFFER : 0;
    *max_records = 0;
}

static void library_complete(uint8_t *buffer, size_t size, size_t valid) {
    void *r = NULL;
    (void)size;
    if (!buffer) return;
    while (msptiActivityGetNextRecord(buffer, valid, &r) == 0 && r) {
        uint32_t kind = *(uint32_t *)r;
        int at = kind == KIND_KERNEL ? 0 : kind == KIND_COMMUNICATION ? 1 : kind == KIND_MARKER ? 2 : -1;
        if (at >= 0) __atomic_add_fetch(&library_got[at], 1, __ATOMIC_RELAXED);
    }
    free(buffer);
}

static void library_no_callback(void *userdata, int domain, uint32_t id, const void *data) {
    (void)userdata; (void)domain; (void)id; (void)data;
}

int bench_library_start(int mixed) {
    static void *subscriber;
    if (msptiSubscribe(&subscriber, library_no_callback, NULL)) return 4;
    if (msptiActivityRegisterCallbacks(library_request, library_complete)) return 1;
    if (msptiActivityEnable(KIND_KERNEL)) return 2;
    if (mixed && (msptiActivityEnable(KIND_COMMUNICATION) || msptiActivityEnable(KIND_MARKER))) return 3;
    return 0;
}

uint64_t bench_library_got(int what) { return __atomic_load_n(&library_got[what], __ATOMIC_RELAXED); }

void bench_library_flush(void) { msptiActivityFlushAll(1); }

int bench_launches(uint64_t n, uint64_t seed)
{
    void *stream = NULL;
    uint64_t s = seed;
    if (aclrtSetDevice(0) || aclrtCreateStream(&stream)) return 1;
    init_names();
    for (uint64_t i = 0; i < n; i++) {
        if (launch(&s, stream)) return 2;
    }
    if (aclrtSynchronizeStream(stream)) return 3;
    if (aclrtDestroyStream(stream) || aclrtResetDevice(0)) return 4;
    return 0;
}

/* Training steps: ranges step > forward, backward; a mark per layer in forward; the gradient
 * all-reduces (1,024 fp32, in place) on their own stream after backward; the optimizer. */
int bench_mixed(uint64_t steps, uint64_t seed)
{
    void *stream = NULL, *comm_stream = NULL, *grad = NULL;
    HcclComm comm = NULL;
    static HcclRootInfo root;
    uint64_t s = seed;
    if (aclrtSetDevice(0) || aclrtCreateStream(&stream) || aclrtCreateStream(&comm_stream)) return 1;
    if (aclrtMalloc(&grad, 4096, 0)) return 5;
    if (HcclGetRootInfo(&root) || HcclCommInitRootInfo(1, &root, 0, &comm)) return 6;
    init_names();
    for (uint64_t i = 0; i < steps; i++) {
        mstxRangeId step = mstxRangeStartA("step", NULL);
        mstxRangeId fwd = mstxRangeStartA("forward", NULL);
        for (int j = 0; j < FORWARD; j++) {
            if (j %% (FORWARD / LAYERS) == 0) mstxMarkA("layer", NULL);
            if (launch(&s, stream)) return 2;
        }
        mstxRangeEnd(fwd);
        mstxRangeId bwd = mstxRangeStartA("backward", NULL);
        for (int j = 0; j < BACKWARD; j++) {
            if (launch(&s, stream)) return 2;
        }
        mstxRangeEnd(bwd);
        for (int j = 0; j < ALLREDUCES; j++) {
            if (HcclAllReduce(grad, grad, 1024, FP32, SUM, comm, comm_stream)) return 7;
        }
        if (aclrtSynchronizeStream(comm_stream)) return 3;
        for (int j = 0; j < OPTIMIZER; j++) {
            if (launch(&s, stream)) return 2;
        }
        if (aclrtSynchronizeStream(stream)) return 3;
        mstxRangeEnd(step);
    }
    if (HcclCommDestroy(comm) || aclrtFree(grad)) return 8;
    if (aclrtDestroyStream(comm_stream) || aclrtDestroyStream(stream) || aclrtResetDevice(0)) return 4;
    return 0;
}
"""


# ------------------------------------------------------------------------------------------------
# Setup (parent): the tree, the peers where they are installed, the workload library

# Per peer side: its package, a name only that package has (so another module of the same name is
# not taken for it), the option and the environment variable that point the bench at it.
PEERS = {
    "official": ("mspti", "KernelMonitor", "--official-path", "MSPTI_LENS_OFFICIAL_PATH"),
    "msmonitor": ("msmonitor", "Monitor", "--msmonitor-path", "MSPTI_LENS_MSMONITOR_PATH"),
}
PROBE = (
    "import os, sys; m = __import__(sys.argv[1]); getattr(m, sys.argv[2]); print(os.path.dirname(m.__file__))"
)


def side_env(env: dict[str, str], path: str | None) -> dict[str, str]:
    """The environment of a side's process: `path`, when given, first on its sys.path."""
    if not path:
        return env
    rest = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": os.pathsep.join([path, rest] if rest else [path])}


def peer_install(side: str, env: dict[str, str], path: str | None) -> str | None:
    """Where the side's package is (its directory) as the side's process would import it, or None
    when that process cannot import it. Never built or fetched: only looked for."""
    package, name, _, _ = PEERS[side]
    p = subprocess.run(
        [sys.executable, "-c", PROBE, package, name],
        env=side_env(env, path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return (p.stdout.strip() or None) if p.returncode == 0 else None


def peer_paths(given: dict[str, str | None], environ: dict[str, str]) -> dict[str, str | None]:
    """The directory each peer side's process gets first on its sys.path: the option's, else the
    environment variable's, else (CANN's package only) the site-packages of the CANN tree the
    user's ``$ASCEND_HOME_PATH`` names, where CANN installs it; None: the interpreter's own paths."""
    out = {}
    for side, (_, _, _, var) in PEERS.items():
        path = given.get(side) or environ.get(var) or None
        home = environ.get("ASCEND_HOME_PATH")
        if path is None and side == "official" and home:
            path = str(Path(home) / "python" / "site-packages")
        out[side] = path
    return out


def not_installed_hint(side: str, path: str | None) -> str:
    """How to point the bench at a side's installation, after where it looked."""
    package, _, option, var = PEERS[side]
    looked = f" (looked in {path} and " if path else " (looked in "
    where = "; CANN's tree holds it in $ASCEND_HOME_PATH/python/site-packages" if side == "official" else ""
    return (
        f"**not installed**{looked}the interpreter's own paths: its process cannot `import {package}`). "
        f"Point the bench at an installation with `{option} DIR` or `{var}=DIR`, DIR being the directory "
        f"that holds the `{package}` package{where}."
    )


def workload_library(tree, where: Path) -> Path:
    src = where / "cann_monitors_workload.c"
    so = where / "libcann_monitors_workload.so"
    src.write_text(
        WORKLOAD_C
        % {
            "names": KERNEL_NAMES,
            "forward": FORWARD_LAUNCHES,
            "backward": BACKWARD_LAUNCHES,
            "optimizer": OPTIMIZER_LAUNCHES,
            "layers": LAYERS,
            "allreduces": ALLREDUCES,
        }
    )
    lib = str(tree.lib64)
    cmd = ["gcc", "-O2", "-fPIC", "-shared", "-o", str(so), str(src), f"-L{lib}"]
    cmd += ["-lascendcl", "-lhccl", "-lms_tools_ext", "-lascend_hal"]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit("bench/cann_monitors.py needs gcc to build its workload (apt-get install gcc)")
    except subprocess.CalledProcessError as e:
        sys.exit(f"gcc failed on the workload:\n{e.stderr}")
    return so


MSMONITOR_START_S = 0.1


# ------------------------------------------------------------------------------------------------
# One side, in its own process (child)


def thread_cpu_ns(names: tuple[str, ...]) -> int:
    """CPU time so far of this process's live threads named `names` (schedstat, ns)."""
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            comm = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
            if comm in names:
                total += int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    return total


class Meter:
    """The collector's CPU time over [begin, end]: the process's CPU time (every thread, ended
    ones included: CLOCK_PROCESS_CPUTIME_ID) minus the workload thread's CPU time while it ran
    the workload, minus the simulated library's record-producing threads. What is left is the
    collector's: its own threads (mspti-lens's drain, msMonitor's), the simulator's per-buffer
    threads that run its complete callback (where the official package parses records and calls
    Python), and this thread's work after the workload (flushes, stop, waiting for the last
    record). What a side adds on the workload thread itself (host callbacks, the records it asks
    the library for) is charged to it against the no-profiler run of the round (`render`)."""

    def begin(self) -> None:
        self.p0 = time.process_time_ns()
        self.s0 = thread_cpu_ns(PRODUCER_THREADS)
        self.w0 = time.perf_counter_ns()

    def workload(self, fn) -> int:
        t0 = time.thread_time_ns()
        rc = fn()
        self.workload_ns = time.thread_time_ns() - t0
        self.loop_wall_ns = time.perf_counter_ns() - self.w0
        return rc

    def end(self) -> dict:
        wall = time.perf_counter_ns() - self.w0
        producer = thread_cpu_ns(PRODUCER_THREADS) - self.s0
        process = time.process_time_ns() - self.p0
        return {
            "wall_ns": wall,
            "loop_wall_ns": self.loop_wall_ns,
            "process_cpu_ns": process,
            "workload_cpu_ns": self.workload_ns,
            "producer_cpu_ns": producer,
            "collector_cpu_ns": process - self.workload_ns - producer,
        }


# A side whose records stop coming is recorded with what it got (its loss is the finding).
DELIVERY_TIMEOUT_S = 30.0


def sim_stats_raw(g: ctypes.CDLL, count: int) -> list[int]:
    """The simulated library's first `count` activity counters (records written, dropped,
    completes, ...), unnamed: the child imports nothing of mspti_lens that its side does not
    need (importing it costs a process more than the quick mode's whole workload); the parent
    names them (`sim_stats`)."""
    g.msimActivityStat.restype = ctypes.c_uint64
    return [int(g.msimActivityStat(i)) for i in range(count)]


def sim_stats(raw: list[int]) -> dict[str, int]:
    from mspti_lens.sim.activity import STATS  # noqa: PLC0415

    return dict(zip(STATS, raw))


def wait_for(n: int, count, flush, trace: dict) -> bool:
    """Until `count()` reaches n, flush and look again every ms (bounded): the moment the last
    record reached the user. Evidence, not a fixed sleep: the records themselves. `trace` gets
    what had arrived when the loop ended, how long the first flush took, how many there were."""
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    t0 = time.perf_counter_ns()
    trace["at_loop_end"] = got = count()
    trace["flushes"] = 0
    while got < n:
        if time.monotonic() > deadline:
            return False
        if trace["flushes"]:
            time.sleep(0.001)
        flush()
        trace["flushes"] += 1
        trace.setdefault("first_flush_ns", time.perf_counter_ns() - t0)
        got = count()
    return True


def wait_device(g: ctypes.CDLL) -> int:
    """Until the simulated device has delivered every record it holds (bounded); the ns waited."""
    g.msimDevicePending.restype = ctypes.c_uint64
    t0 = time.perf_counter_ns()
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    while g.msimDevicePending() and time.monotonic() < deadline:
        time.sleep(0.001)
    return time.perf_counter_ns() - t0


class Agg:
    """Per name [count, total, min, max] of end - start: the users' minimal aggregator. One dict
    per thread: the official package calls it from every thread that completes a buffer, and an
    update of a shared Python list is no atomic step (the interpreter may switch threads inside
    `a[0] += 1`: counts were lost that way, 64 marks of 303,000 records in one round); a lock
    instead made those threads queue on it, and the side's CPU per record 3 to 5 times what it is
    unlocked. `d` merges them (read after the records are in)."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._parts: list[dict[str, list[int]]] = []
        self._parts_lock = threading.Lock()  # taken once per thread, for its first record

    def _mine(self) -> dict[str, list[int]]:
        d = getattr(self._local, "d", None)
        if d is None:
            d = self._local.d = {}
            with self._parts_lock:
                self._parts.append(d)
        return d

    def add(self, name: str, d: int) -> None:
        mine = self._mine()
        a = mine.get(name)
        if a is None:
            mine[name] = [1, d, d, d]
        else:
            a[0] += 1
            a[1] += d
            if d < a[2]:
                a[2] = d
            if d > a[3]:
                a[3] = d

    @property
    def d(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        with self._parts_lock:
            parts = list(self._parts)
        for part in parts:
            for name, a in list(part.items()):
                o = out.get(name)
                if o is None:
                    out[name] = list(a)
                else:
                    out[name] = [o[0] + a[0], o[1] + a[1], min(o[2], a[2]), max(o[3], a[3])]
        return out

    def count(self) -> int:
        with self._parts_lock:
            parts = list(self._parts)
        return sum(a[0] for part in parts for a in list(part.values()))


def delivered_of(per: dict) -> dict[str, int]:
    """Records delivered, by kind, from a side's per-name results (a range is two MARKER records)."""
    n = lambda d: sum(v[0] for v in d.values())  # noqa: E731
    return {
        "kernels": n(per["kernels"]),
        "collectives": n(per["collectives"]),
        "markers": 2 * n(per["ranges"]) + sum(per["marks"].values()),
    }


def child(
    side: str,
    workload: str,
    clock: str,
    n: int,
    workload_so: str,
    buffers: int | None,
    stats: int,
    join_sample: float | None = None,
) -> dict:
    g = ctypes.CDLL(None)
    g.msimSetClock(CLOCKS[clock])
    wl = ctypes.CDLL(workload_so)
    fn = wl.bench_launches if workload == "kernels" else wl.bench_mixed
    fn.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
    want = expected(workload, n)
    total = sum(want.values())
    mixed = workload == "mixed"
    meter = Meter()
    extra: dict = {}
    per: dict[str, dict] = {"kernels": {}, "collectives": {}, "ranges": {}, "marks": {}}
    trace: dict = {}
    if side == "none":
        meter.begin()
        rc = meter.workload(lambda: fn(n, SEED))
        ok = True
        m = meter.end()
    elif side == "library":
        wl.bench_library_got.restype = ctypes.c_uint64
        if wl.bench_library_start(int(mixed)) != 0:
            raise RuntimeError("the library side could not register its callbacks or enable its kinds")
        got_by_kind = lambda: [int(wl.bench_library_got(i)) for i in range(3)]  # noqa: E731
        meter.begin()
        rc = meter.workload(lambda: fn(n, SEED))
        ok = wait_for(total, lambda: sum(got_by_kind()), wl.bench_library_flush, trace)
        m = meter.end()
        extra["library_got"] = dict(zip(want, got_by_kind()))
    elif side == "official":
        from mspti import CommunicationMonitor, KernelMonitor, MsptiResult, MstxMonitor  # noqa: PLC0415

        kern, coll, rng, mk_agg = Agg(), Agg(), Agg(), Agg()

        def mark_cb(mk) -> None:
            mk_agg.add(mk.name, 0)  # counted per thread, as Agg's records

        monitors = [(KernelMonitor(), (lambda k: kern.add(k.name, k.end - k.start),))]
        if mixed:
            monitors.append((CommunicationMonitor(), (lambda c: coll.add(c.name, c.end - c.start),)))
            monitors.append((MstxMonitor(), (mark_cb, lambda r: rng.add(r.name, r.end - r.start))))

        def count() -> int:
            return kern.count() + coll.count() + 2 * rng.count() + mk_agg.count()

        for mon, cbs in monitors:
            if mon.start(*cbs) != MsptiResult.MSPTI_SUCCESS:
                raise RuntimeError(f"{type(mon).__name__}.start failed")
        meter.begin()
        rc = meter.workload(lambda: fn(n, SEED))
        ok = wait_for(total, count, KernelMonitor.flush_all, trace)
        m = meter.end()
        for mon, _ in monitors:
            mon.stop()
        marks = {name: a[0] for name, a in mk_agg.d.items()}
        per = {"kernels": kern.d, "collectives": coll.d, "ranges": rng.d, "marks": marks}
    elif side == "msmonitor":
        from msmonitor import ActivityKind, Monitor  # noqa: PLC0415

        mon = Monitor()
        kinds = [ActivityKind.Kernel]
        if mixed:
            kinds += [ActivityKind.Communication, ActivityKind.Marker]
        mon.start(kinds)
        # Its session start time, below which it drops every record, is set by its own thread once
        # that thread runs (MonitorProcessManager::RunPreTask, after Start has returned): a job's
        # first records can end before it. A user starts it well before the job; so does this.
        time.sleep(MSMONITOR_START_S)
        meter.begin()
        rc = meter.workload(lambda: fn(n, SEED))
        # Its stop flushes once: device records still on their way to MSPTI's buffers would be
        # lost (docs/simulated_cann.md), so the device's tail is let in first, on the simulator's
        # evidence (msimDevicePending; MSPTI itself has no such call), bounded.
        extra["tail_wait_ns"] = wait_device(g)
        mon.stop()  # flushes: its records are in its C++ vectors now
        m = meter.end()
        c0, w0 = time.process_time_ns(), time.perf_counter_ns()
        res = mon.get_result()
        kern, coll, rng = Agg(), Agg(), Agg()
        marks = {}
        for k in res.get(ActivityKind.Kernel, []):
            kern.add(k.name, k.endNs - k.startNs)
        for c in res.get(ActivityKind.Communication, []):
            coll.add(c.name, c.endNs - c.startNs)
        for mk in res.get(ActivityKind.Marker, []):
            if mk.name in RANGES:
                rng.add(mk.name, mk.endNs - mk.startNs)
            else:
                marks[mk.name] = marks.get(mk.name, 0) + 1
        extra["results_cpu_ns"] = time.process_time_ns() - c0
        extra["results_wall_ns"] = time.perf_counter_ns() - w0
        per = {"kernels": kern.d, "collectives": coll.d, "ranges": rng.d, "marks": marks}
        ok = True
    elif side == "lens":
        warnings.simplefilter("ignore")  # the simulated-backend warning: the report says SIMULATED
        import mspti_lens  # noqa: PLC0415

        kw: dict = {} if buffers is None else {"activity_buffers": (8 << 20, buffers)}
        if join_sample is not None:
            kw["join_sample"] = join_sample
        if mixed:
            s = mspti_lens.Session(activity=["kernel", "communication", "marker"], **kw).start()
        else:
            s = mspti_lens.Session(enable=[], activity=["kernel"], **kw).start()
        act = s._activity
        tables = {"kernels": 1, "collectives": 1, "ranges": 2}

        extra["count_cpu_ns"] = 0

        def lens_count() -> int:
            # The records aggregated so far: kernels, COMMUNICATION collectives, range ends, marks.
            # Flushed and settled first (the tail's records drained on this thread: the
            # collector's work); then the count's own CPU, a snapshot of the tables and the event
            # log read back here, is the bench's, measured apart (`count_cpu_ns`) and left in the
            # collector's figure.
            act.flush(True)
            c0 = time.thread_time_ns()
            t = act.snapshot()
            st = t.stats([])
            got = sum(
                c * tables[tb]
                for tb, k2, mt, c in zip(st["table"], st["key2"], st["metric"], st["count"])
                if tb in tables and mt == "duration" and (tb != "collectives" or k2 == "communication")
            )
            got += sum(x[3] for x in t.marks())
            extra["count_cpu_ns"] += time.thread_time_ns() - c0
            return got

        meter.begin()
        rc = meter.workload(lambda: fn(n, SEED))
        ok = wait_for(total, lens_count, lambda: act.flush(False), trace)
        m = meter.end()
        snap = s.snapshot()
        dev = snap.activity
        extra["records_parsed"] = int(dev.counters["records"])
        # The join as the snapshot says it: its mode, and when sampled the measured fraction.
        extra["join"] = dev.info.get("join") or s.join
        extra["sampled_fraction"] = dev.sampled_fraction()
        extra["counters"] = {k: int(v) for k, v in dev.counters.items() if v}
        extra["losses"] = {k: int(v) for k, v in dev.losses().items() if v}
        s.close()
        stat = lambda r: [r["num_calls"], r["total_ns"], r["min_ns"], r["max_ns"]]  # noqa: E731
        per["kernels"] = {r["name"]: stat(r) for r in dev.kernels("bench").iter_rows(named=True)}
        if mixed:
            for r in dev.collectives("bench").iter_rows(named=True):
                if r["from"] == "communication":
                    per["collectives"][r["op"]] = stat(r)
            for r in dev.ranges("bench").iter_rows(named=True):
                if r["side"] in ("mark", "mark+device"):
                    per["marks"][r["name"]] = int(r["num_calls"])
                else:
                    per["ranges"][r["name"]] = stat(r)
    else:
        raise ValueError(f"unknown side {side!r}; valid: {', '.join(SIDES)}")
    m["library_raw"] = sim_stats_raw(g, stats)
    got = extra.pop("library_got", None) or (delivered_of(per) if side != "none" else dict.fromkeys(want, 0))
    return {
        "side": side,
        "workload": workload,
        "clock": clock,
        "n": n,
        "rc": rc,
        "delivered": ok,
        "tail": trace,
        "expected": want,
        "got": got,
        "per_name": per,
        **m,
        **extra,
    }


# ------------------------------------------------------------------------------------------------
# The run (parent): alternate the sides, compare, summarise


def run(
    quick: bool,
    log=print,
    rounds: int | None = None,
    launches: int | None = None,
    steps: int | None = None,
    real_steps: int | None = None,
    lens_buffers: int | None = None,
    lens_join_sample: float | None = None,
    cases: tuple[tuple[str, str], ...] = CASES,
    peer_path: dict[str, str | None] | None = None,
) -> dict:
    """`peer_path`: per peer side, the directory its process gets first on sys.path (`PEERS`)."""
    rounds = rounds or (2 if quick else 9)
    sizes = {
        ("kernels", "virtual"): launches or (50_000 if quick else 1_000_000),
        ("mixed", "virtual"): steps or (10 if quick else 300),
        ("mixed", "real"): real_steps or (2 if quick else 100),
    }
    from mspti_lens.sim import cann  # noqa: PLC0415

    if shutil.which("gcc") is None:
        sys.exit("bench/cann_monitors.py needs gcc to build its workload: apt-get install gcc")
    out: dict = {
        "quick": quick,
        "cores": os.cpu_count(),
        "rounds": rounds,
        "lens_buffers": lens_buffers,
        "lens_join_sample": lens_join_sample,
        "cases": {},
    }
    with tempfile.TemporaryDirectory(prefix="cann-monitors-") as tmp:
        where = Path(tmp)
        tree = cann.write_tree(where / "toolkit")
        so = workload_library(tree, where)
        # The user's environment as `source set_env.sh` of the simulated tree leaves it; their own
        # PYTHONPATH and site-packages stay, where an installed peer may be.
        base = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_") and k != "LD_PRELOAD"}
        env = {**tree.environ(base), "LD_PRELOAD": str(tree.mspti)}
        paths = peer_paths(peer_path or {}, dict(os.environ))
        out["peers"] = {
            side: {"path": paths[side], "at": peer_install(side, env, paths[side])} for side in PEERS
        }
        envs = {side: side_env(env, paths.get(side)) for side in SIDES}
        sides = tuple(s for s in SIDES if s not in PEERS or out["peers"][s]["at"])
        out["sides"] = sides
        out["load"] = [os.getloadavg()[0]]
        for wl, clock in cases:
            n = sizes[(wl, clock)]
            runs: dict[str, list[dict]] = {s: [] for s in sides}
            for r in range(rounds):
                order = sides if r % 2 == 0 else sides[::-1]
                for side in order:
                    res = run_child(side, wl, clock, n, so, envs[side], lens_buffers, lens_join_sample)
                    runs[side].append(res)
                    log(
                        f"{wl}/{clock} round {r + 1}/{rounds} {side:9s}: "
                        f"wall {res['wall_ns'] * 1e-9:6.3f} s, "
                        f"collector CPU {res['collector_cpu_ns'] * 1e-9:6.3f} s"
                        + (f", lost {lost(res):,}" if side != "none" else "")
                    )
            out["cases"][f"{wl}/{clock}"] = {
                "workload": wl,
                "clock": clock,
                "n": n,
                "runs": runs,
                "agreement": agreement(runs, timed_on_host=clock == "real"),
            }
        out["load"].append(os.getloadavg()[0])
    return out


def run_child(
    side: str,
    wl: str,
    clock: str,
    n: int,
    so: Path,
    env: dict,
    lens_buffers: int | None,
    lens_join_sample: float | None = None,
) -> dict:
    me = str(Path(__file__).resolve())
    cmd = [sys.executable, me, "--child", side, "--workload-kind", wl, "--clock", clock]
    from mspti_lens.sim.activity import STATS  # noqa: PLC0415

    cmd += ["--n", str(n), "--workload", str(so), "--stats", str(len(STATS))]
    if lens_buffers is not None:
        cmd += ["--lens-buffers", str(lens_buffers)]
    if lens_join_sample is not None:
        cmd += ["--lens-join-sample", repr(lens_join_sample)]
    # In the run's directory: msMonitor writes its log (msmonitor_log/) where it runs.
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=so.parent)
    if out.returncode != 0:
        sys.exit(f"the {side} process ({wl}/{clock}) failed (rc {out.returncode}):\n{out.stderr[-4000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["library"] = sim_stats(res.pop("library_raw"))
    if res["rc"] != 0 or (side in ("lens", "library") and not res["delivered"]):
        sys.exit(
            f"the {side} process ({wl}/{clock}): workload rc {res['rc']}, all records delivered: "
            f"{res['delivered']} (got {res['got']} of {res['expected']}; the simulator's stats "
            f"{res.get('library')}; counters {res.get('counters')})"
        )
    if side == "lens" and wl == "kernels" and res["library"]["records"] != n:
        sys.exit(
            f"the simulated library wrote {res['library']['records']:,} records for {n:,} launches "
            f"in the mspti-lens process (join: {res['join']}): a kernel-only session must ask for "
            "KERNEL records only"
        )
    return res


def lost(res: dict) -> int:
    return sum(res["expected"].values()) - sum(res["got"].values())


def agreement(runs: dict[str, list[dict]], timed_on_host: bool = False) -> dict:
    """Every process that lost no record against the first one that lost none of the first side
    that ran (official, msMonitor, mspti-lens: the peers' numbers are the reference), per name.
    Device times
    are the models' on either clock; a range's is host time, which on the real clock differs run
    to run, so there only its count is compared (`timed_on_host`)."""
    measured = [x for side in ("official", "msmonitor", "lens") for x in runs.get(side, [])]
    ref = ([x for x in measured if lost(x) == 0] or measured)[0]["per_name"]
    mismatches = []
    compared = {}
    for side, rs in runs.items():
        if side in BASELINES:
            continue
        complete = [(i, x) for i, x in enumerate(rs) if lost(x) == 0]
        compared[side] = len(complete)
        for i, res in complete:
            for kind, want in ref.items():
                got = res["per_name"][kind]
                for name in sorted(set(want) | set(got)):
                    a, b = want.get(name), got.get(name)
                    if timed_on_host and kind == "ranges" and a and b:
                        a, b = a[0], b[0]
                    if a != b:
                        mismatches.append((side, i, kind, name, a, b))
    return {
        "names": sum(len(v) for v in ref.values()),
        "records": sum(delivered_of(ref).values()),
        "reference": ref,
        "compared": compared,
        "mismatches": mismatches,
        "exact": not mismatches,
    }


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def spread(xs: list[float], fmt: str = "{:.3f}") -> str:
    return f"{fmt.format(min(xs))} .. {fmt.format(max(xs))}"


def charged_ns(res: dict, none: dict) -> int:
    """The side's collector CPU plus what its workload thread spent above the no-profiler run of
    the same round (host callbacks, records the side asks the library for)."""
    return res["collector_cpu_ns"] + max(0, res["workload_cpu_ns"] - none["workload_cpu_ns"])


def shared_ns(lib: dict, none: dict) -> int:
    """The simulated library's own cost of writing the records the peers ask for, on the workload
    thread: the library side's workload CPU above the no-profiler run of the same round. The same
    for every side (it stands in for MSPTI's): not a lever for the cost goals."""
    return max(0, lib["workload_cpu_ns"] - none["workload_cpu_ns"])


def records_of(res: dict) -> int:
    return sum(res["expected"].values())


def side_label(side: str, rs: list[dict]) -> str:
    """A side's row label; mspti-lens's says its launch join's mode where it joins: exact, or
    sampled with the median measured fraction of time."""
    if side != "lens":
        return LABEL[side]
    joins = {x.get("join", "") for x in rs}
    fractions = [x["sampled_fraction"] for x in rs if "sampled_fraction" in x]
    if any("sampled" in j for j in joins) and fractions:
        return f"{LABEL[side]}, launch join sampled ({med(fractions):.3f} of the time, measured)"
    if any(j.startswith("runtime_api") or j.startswith("external") for j in joins):
        return f"{LABEL[side]}, launch join exact"
    return LABEL[side]


def render(r: dict) -> list[str]:
    """The section's Markdown lines (bench/run.py joins its modules' lines)."""
    L: list[str] = []
    w = L.append
    w(HEADING)
    w("")
    sides = r["sides"]
    w(
        f"Each workload runs in a separate process per side, {r['rounds']} rounds, the sides alternated "
        "(the order flips every round), on the simulator's virtual clock (the workload's own CPU is "
        "small: its calls take their modelled time without spinning); medians over rounds, ratios "
        "within a round, spread min .. max."
        + (" QUICK MODE: proves it runs, not a measurement." if r["quick"] else "")
    )
    w("")
    for side, peer in r["peers"].items():
        name = LABEL[side].split(" (")[0].split(",")[0]
        w(
            f"{name}: "
            + (
                f"measured, installed at `{peer['at']}`."
                if peer["at"]
                else not_installed_hint(side, peer["path"])
            )
        )
        w("")
    for case, d in r["cases"].items():
        wl, clock = d["workload"], d["clock"]
        runs = d["runs"]
        none = runs["none"]
        n_rec = records_of(none[0])
        title = "Kernel-only launch loop" if wl == "kernels" else "Mixed training step"
        w(f"### {title}, {clock} clock ({case})")
        w("")
        want = none[0]["expected"]
        what = ", ".join(f"{v:,} {k}" for k, v in want.items() if v)
        w(
            f"{d['n']:,} {'launches' if wl == 'kernels' else 'steps'} per process: {what} "
            f"({n_rec:,} records)."
            + (
                " On the real clock each call spins its modelled host time, so the workload's wall "
                "time is a job's and the wall added is what a job would see; its CPU is the spinning's."
                if clock == "real"
                else " On the virtual clock the calls take their modelled time without spinning: the "
                "workload's own CPU is small, so what the collector costs per record stands out."
            )
        )
        w("")
        # The library's own record writing, per round (the library side's workload-thread extra);
        # zeros when this run had no library side (results of an older bench).
        lib_runs = runs.get("library")
        shared = [shared_ns(x, nn) / n_rec * 1e-3 for x, nn in zip(lib_runs, none)] if lib_runs else []
        w(
            "| side | collector CPU us per record | spread | charged: with its workload-thread extra "
            "| spread | of which the library writing records (shared) | charged less the shared part "
            "| spread | wall added | spread | records lost |"
        )
        w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        per_rec: dict[str, dict[str, list[float]]] = {}
        for side in sides:
            rs = runs[side]
            if side == "none":
                base = med([x["wall_ns"] for x in rs]) * 1e-9
                w(f"| {LABEL[side]} | | | | | | | | (wall {base:.3f} s) | | |")
                continue
            cpu = [x["collector_cpu_ns"] / n_rec * 1e-3 for x in rs]
            chg = [charged_ns(x, nn) / n_rec * 1e-3 for x, nn in zip(rs, none)]
            # A side cannot make the workload thread cheaper than the library's own record
            # writing: an extra below it is noise, and the round counts the collector alone (else
            # a side near zero made the ratios against it meaningless: 2e12x).
            net = [max(c - sh, k) for c, sh, k in zip(chg, shared, cpu)] if shared else chg
            wall = [(x["wall_ns"] - nn["wall_ns"]) / nn["wall_ns"] * 100 for x, nn in zip(rs, none)]
            per_rec[side] = {"collector": cpu, "charged": net, "charged with the library's part": chg}
            losses = [lost(x) for x in rs]
            own = f"{med(shared):.3f}" if shared else "not measured"
            w(
                f"| {side_label(side, rs)} | {med(cpu):.3f} | {spread(cpu)} | {med(chg):.3f} | {spread(chg)} "
                f"| {own} | {med(net):.3f} | {spread(net)} "
                f"| {med(wall):+.1f} % | {spread(wall, '{:+.1f}')} % | {max(losses):,} |"
            )
        w("")
        if shared:
            w(
                f"- The simulated library writing the records the peers ask for costs the workload thread "
                f"{med(shared):.3f} us per record ({spread(shared)}): the library side's workload-thread "
                "CPU above the no-profiler run of the round. Every side pays it (it stands in for MSPTI's "
                "own cost), so it is no lever: the goals are judged on charged less this shared part "
                "(per round; at least the collector's own: a workload-thread extra below the shared "
                "part is noise), with the charged figure that includes it beside."
            )
        else:
            w(
                "- This run had no library side: the library's own record writing is not measured apart, "
                "and the goals are judged on charged CPU with it included."
            )
        if "lens" in per_rec:
            for other in ("official", "msmonitor"):
                if other not in per_rec:
                    continue
                ratio = {
                    m: [a / max(b, 1e-12) for a, b in zip(per_rec[other][m], per_rec["lens"][m])]
                    for m in per_rec["lens"]
                }
                less = " less the shared part" if shared else ""
                verdicts = "".join(
                    f" Goal >= {goal:.0f}x {m}{less if m == 'charged' else ''}: "
                    + (
                        "met."
                        if med(ratio[m]) >= goal
                        else f"**missed** ({med(ratio[m]):.1f}x of {goal:.0f}x)."
                    )
                    for (o, m), goal in GOALS.get(case, {}).items()
                    if o == other
                )
                net, col = ratio["charged"], ratio["collector"]
                gross = ratio["charged with the library's part"]
                what = "charged less the library's shared part" if shared else "charged"
                with_part = (
                    f" charged with the library's part {med(gross):.1f}x less ({spread(gross, '{:.1f}')}x);"
                    if shared
                    else ""
                )
                w(
                    f"- mspti-lens against {LABEL[other].split(',')[0].split(' (')[0]}: {med(net):.1f}x "
                    f"less CPU per record ({spread(net, '{:.1f}')}x; {what});{with_part} collector CPU "
                    f"alone {med(col):.1f}x less ({spread(col, '{:.1f}')}x).{verdicts}"
                )
            lw = [(x["wall_ns"] - nn["wall_ns"]) / nn["wall_ns"] * 100 for x, nn in zip(runs["lens"], none)]
            if case == "mixed/real":
                ok = med(lw) <= GOAL_WALL_PCT
                w(
                    f"- mspti-lens wall added: {med(lw):+.1f} % (goal <= {GOAL_WALL_PCT:.0f} %: "
                    + ("met" if ok else "**missed**")
                    + "); records lost with default settings: "
                    + f"{max(lost(x) for x in runs['lens']):,} (goal 0)."
                )
        for side in sides:
            lost_rounds = sum(1 for x in runs[side] if lost(x))
            if side != "none" and lost_rounds:
                got = [sum(x["got"].values()) for x in runs[side]]
                w(
                    f"- **{LABEL[side].split(' (')[0].split(',')[0]} lost records** in {lost_rounds} of "
                    f"{len(runs[side])} rounds: it delivered {spread(got, '{:,}')} of {n_rec:,}."
                )
        if "msmonitor" in runs:
            rc = [x["results_cpu_ns"] / n_rec * 1e-3 for x in runs["msmonitor"]]
            w(
                f"- msMonitor's `get_result()` (its records turned into Python objects, then aggregated "
                f"by the same dict aggregator) costs {med(rc):.3f} us of CPU per record more "
                f"({spread(rc)}), not in the table."
            )
        med_of = lambda s, k, runs=runs: med([x[k] for x in runs[s]]) * 1e-9  # noqa: E731
        w(
            "- Median CPU seconds per process: "
            + "; ".join(
                f"{s}: workload thread {med_of(s, 'workload_cpu_ns'):.3f}, producer threads "
                f"{med_of(s, 'producer_cpu_ns'):.3f}, collector {med_of(s, 'collector_cpu_ns'):.3f}, "
                f"wall {med_of(s, 'wall_ns'):.3f}"
                for s in sides
            )
            + "."
        )
        if "lens" in runs:
            parsed = [x.get("records_parsed", 0) for x in runs["lens"]]
            # The join's mode without the per-process measured fraction, which follows as a median.
            joins = sorted({x.get("join", "").split(" (")[0] for x in runs["lens"]})
            fractions = [x["sampled_fraction"] for x in runs["lens"] if "sampled_fraction" in x]
            sampled = (
                f", measured fraction {med(fractions):.3f} ({spread(fractions)})"
                if fractions and min(fractions) < 1
                else ""
            )
            pool = sorted({x.get("counters", {}).get("pool_buffers", 0) for x in runs["lens"]})
            w(
                f"- mspti-lens parsed {med(parsed):,.0f} records per process (the records above plus any "
                f"it asks for to join kernels to launches; join: {', '.join(joins)}{sampled}); its pool "
                f"held {', '.join(str(p) for p in pool)} buffers of 8 MiB at the end."
            )
        ag = d["agreement"]
        verdict = "**identical**" if ag["exact"] else f"**DIFFERENT** ({len(ag['mismatches'])} mismatches)"
        w(
            "- Exact agreement, per name count, total, min and max of end - start (kernels, collectives, "
            "ranges; marks by count), every process of every side that lost nothing against the first "
            "one that lost nothing of the first side that ran (official, msMonitor, mspti-lens): "
            f"{ag['names']} names, {ag['records']:,} records: {verdict}"
            + (
                " (ranges by count: on the real clock their host time differs run to run)"
                if clock == "real"
                else ""
            )
            + "; processes compared (those that lost nothing): "
            + ", ".join(f"{k} {v}" for k, v in ag["compared"].items())
            + "."
        )
        w("")
    w(
        "Method. Collector CPU: from just before the workload's first call until the last record "
        "reached the user (the official callbacks have aggregated all of them, mspti-lens's drain has "
        "counted all of them, found by counting when the workload returns and, until it is all, "
        "flushing and counting again every ms, bounded; msMonitor's `stop()` has returned, called once "
        "the simulated device has delivered its last record, since its single flush at stop misses "
        "the device's tail otherwise), the "
        "process's CPU time (CLOCK_PROCESS_CPUTIME_ID, which keeps the time of threads that ended) minus "
        "the workload thread's own CPU time (`time.thread_time_ns`) minus the simulated library's "
        f"record-producing threads (by name in /proc/self/task/*/comm: {', '.join(PRODUCER_THREADS)}; "
        "schedstat ns). The charged column adds what the side's workload thread spent above the "
        "no-profiler run of the same round: host callbacks, and the library writing records the side "
        "asked for (mspti-lens's RUNTIME_API records for its launch join, on the mixed workload). The "
        "library side enables the kinds the peers ask for (KERNEL; on the mixed step COMMUNICATION and "
        "MARKER too) and consumes them with a few lines of C (a malloc'd buffer per request, its records "
        "counted by kind, the buffer freed): its workload-thread extra is the library's own record "
        "writing, the part every side pays, taken off each side's charged figure in the same round "
        "(what mspti-lens's RUNTIME_API records cost stays its own). Per "
        "record: divided by the workload's records (kernels + collectives + MARKER records, the same for "
        "every side). Wall added: the side's wall time over the same interval against the no-profiler "
        "run of the round. Records lost: the workload's records minus those the user got. mspti-lens "
        "runs with its default buffers (8 MiB, 8 at the start, growing on demand up to 256 MiB)"
        + (f"; this run asked for {r['lens_buffers']} at the start" if r.get("lens_buffers") else "")
        + ". All SIMULATED; other jobs share this machine"
        + (
            f" ({r['cores']} cores, 1-minute load average {r['load'][0]:.1f} at the start of the run and "
            f"{r['load'][1]:.1f} at its end)"
            if "load" in r
            else ""
        )
        + ": trust the within-round ratios over single figures."
    )
    w("")
    return L


HEADING = (
    "## The Ascend monitors side by side: no profiler, CANN's official monitors, msMonitor, "
    "mspti-lens (bench/cann_monitors.py)"
)
OLD_HEADINGS = ("## CANN's official Python monitors vs mspti-lens (bench/cann_monitors.py)",)


def update_report(report: Path, lines: list[str]) -> None:
    """Put this section into `report`: in place of its last version (under this heading or an
    earlier one), or at the end; the other sections are left as they are."""
    old = report.read_text().splitlines() if report.exists() else []
    at = next((h for h in (HEADING, *OLD_HEADINGS) if h in old), None)
    if at is not None:
        i = old.index(at)
        j = next((k for k in range(i + 1, len(old)) if old[k].startswith("## ")), len(old))
        new = old[:i] + lines + old[j:]
    else:
        new = old + ([""] if old and old[-1] else []) + lines
    while new and not new[-1]:
        new.pop()
    report.write_text("\n".join(new) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick", action="store_true", help="a few seconds (after the first build): proves it runs"
    )
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--launches", type=int, default=None, help="launches of the kernels workload")
    p.add_argument("--steps", type=int, default=None, help="steps of the mixed workload")
    p.add_argument(
        "--real-steps", type=int, default=None, help="steps of the mixed workload on the real clock"
    )
    p.add_argument(
        "--cases",
        default=",".join(f"{w}/{c}" for w, c in CASES),
        help=f"workload/clock cases, among {', '.join(f'{w}/{c}' for w, c in CASES)}",
    )
    p.add_argument("--out", type=Path, default=None, help="write the section here (Markdown)")
    p.add_argument("--json", type=Path, default=None, help="write the raw results here")
    p.add_argument(
        "--from-json", type=Path, default=None, help="render the results --json wrote; run nothing"
    )
    p.add_argument(
        "--report",
        type=Path,
        default=None,
        help="put the section into this report (e.g. BENCHMARKS.md), replacing its previous version only",
    )
    p.add_argument(
        "--lens-buffers",
        type=int,
        default=None,
        help="mspti-lens's pool: this many 8 MiB buffers at the start (default: its own default)",
    )
    p.add_argument(
        "--lens-join-sample",
        type=float,
        default=None,
        help="mspti-lens's Session(join_sample=...): the fraction of time its launch join records "
        "(default: its own default, sampled; 1.0 joins every launch)",
    )
    for side, (package, _, option, var) in PEERS.items():
        p.add_argument(
            option,
            default=None,
            metavar="DIR",
            help=f"a directory holding the `{package}` package, put first on sys.path of the {side} "
            f"side's process (default: ${var}; not built or fetched, only looked for)",
        )
    p.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    p.add_argument("--workload-kind", choices=WORKLOADS, help=argparse.SUPPRESS)
    p.add_argument("--clock", choices=tuple(CLOCKS), help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--stats", type=int, help=argparse.SUPPRESS)
    p.add_argument("--workload", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        res = child(
            a.child, a.workload_kind, a.clock, a.n, a.workload, a.lens_buffers, a.stats, a.lens_join_sample
        )
        print(json.dumps(res))
        return
    valid = {f"{w}/{c}": (w, c) for w, c in CASES}
    names = [x.strip() for x in a.cases.split(",") if x.strip()]
    bad = [x for x in names if x not in valid]
    if bad or not names:
        p.error(f"unknown case {bad[0] if bad else a.cases!r}; valid: {', '.join(valid)}")
    if a.from_json:
        r = json.loads(a.from_json.read_text())
    else:
        r = run(
            a.quick,
            rounds=a.rounds,
            launches=a.launches,
            steps=a.steps,
            log=lambda s: print(s, file=sys.stderr),
            real_steps=a.real_steps,
            lens_buffers=a.lens_buffers,
            lens_join_sample=a.lens_join_sample,
            cases=tuple(valid[x] for x in names),
            peer_path={"official": a.official_path, "msmonitor": a.msmonitor_path},
        )
    lines = render(r)
    text = "\n".join(lines) + "\n"
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text)
    if a.report:
        update_report(a.report, lines)
    if a.json:
        a.json.write_text(json.dumps(r, indent=1))
    print(text)
    failed = []
    for case, d in r["cases"].items():
        for m in d["agreement"]["mismatches"][:20]:
            print("MISMATCH", case, m, file=sys.stderr)
        if not d["agreement"]["exact"]:
            failed.append(f"{case}: the sides' per-name numbers do not agree (MISMATCH lines above)")
        if any(lost(x) for x in d["runs"]["lens"]):
            failed.append(f"{case}: mspti-lens lost records")
    if failed:
        sys.exit("; ".join(failed))


if __name__ == "__main__":
    main()
