#!/usr/bin/env python3
"""CANN's official Python monitors against mspti-lens's activity collector, side by side: records
per second delivered to the user and the collector's CPU seconds per million records, on the same
simulated workload, in separate processes alternated in one run. A section of BENCHMARKS.md
(registered in bench/run.py); also runs alone:

    python bench/cann_monitors.py [--quick] [--rounds N] [--out bench-out/cann_monitors.md]
    python bench/cann_monitors.py --report BENCHMARKS.md     # the full run, its section updated

The official side is Huawei's own Python package (mspti/: the mspti_C extension and its
KernelMonitor), vendored unmodified in tests/data/ascend-mspti and built from its CMake files on
a simulated CANN tree (``python -m mspti_lens.sim cann DIR``) by the same helper the tests use
(tests/test_cann_samples.py), and kept by the hash of its sources where those tests keep theirs.
Its user callback is a minimal dict aggregator: per kernel name a list [count, total, min, max] of
end - start.
The mspti-lens side is ``Session(enable=[], activity=["kernel"])``: no host callbacks, only the
KERNEL records, aggregated by its drain thread into the kernels frame (with no launch callback
traced there is no launch to join kernels to, so mspti-lens asks the library for KERNEL records
only, as the official monitor does; the bench checks that the library wrote no other record).

The workload is a small C loop compiled here against the tree (``lib64/libascendcl.so``): per
launch it announces the kernel to the simulated runtime (``msimSetNextLaunch``, what the tree's
aclnn operators do before they launch) and calls ``aclrtLaunchKernel``, which the preloaded
``libmspti.so`` (the simulator) intercepts as MSPTI does on a machine; then
``aclrtSynchronizeStream``. Kernel names and device durations come from a fixed-seed generator,
so every process sees the same records on the simulator's virtual clock, and the per-name count,
total, min and max must agree exactly between the two sides; the bench fails when they do not.
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
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TESTS = ROOT / "tests"
UPSTREAM = TESTS / "data" / "ascend-mspti"

# Threads of the simulated library that produce records, as the kernel names them
# (/proc/self/task/*/comm, 15 characters): its device-to-host channel and its activity manager
# (which hands full buffers to per-buffer "msim-complete" threads; those run only the
# collector's complete callback, so they count as the collector's).
PRODUCER_THREADS = ("msim-channel", "ActivityManag")
KERNEL_NAMES = 16
SEED = 0x9E3779B97F4A7C15
GOAL_RATIO = 10.0
# mspti-lens gets the pool bound the official package has (8 MiB buffers, at most 256 MiB: its
# DEFAULT_BUFFER_SIZE and MAX_BUFFER_SIZE in mspti/csrc/mspti_adapter.h). With mspti-lens's default
# (8 MiB x 8) this workload runs the pool dry whenever the drain is descheduled for a few hundred
# ms on a loaded machine: the library then gets NULL buffers and drops records (counted:
# null_buffers, pool_exhausted), and the exact check fails. --lens-buffers 8 shows it.
LENS_BUFFER_BYTES = 8 << 20
LENS_BUFFERS = 32

WORKLOAD_C = r"""
#include <stdint.h>
#include <stdio.h>
#include <stddef.h>
typedef int aclError;
aclError aclrtSetDevice(int32_t deviceId);
aclError aclrtCreateStream(void **stream);
aclError aclrtSynchronizeStream(void *stream);
aclError aclrtDestroyStream(void *stream);
aclError aclrtResetDevice(int32_t deviceId);
aclError aclrtLaunchKernel(void *funcHandle, uint32_t blockDim, const void *argsData, size_t argsSize,
                           void *stream);
void msimSetNextLaunch(const char *kernel, const char *node, uint64_t device_ns, uint32_t kernels);

#define NAMES %(names)d
static char names[NAMES][64];

/* The kernel index and device time (ns) of launch i: a fixed-seed xorshift, the same in every
 * process. Durations are 1..64 us, spread per name so min, max and totals differ by name. */
static uint64_t next(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }

int bench_launches(uint64_t n, uint64_t seed)
{
    void *stream = NULL;
    uint64_t s = seed;
    if (aclrtSetDevice(0) || aclrtCreateStream(&stream)) return 1;
    for (int k = 0; k < NAMES; k++) {
        snprintf(names[k], sizeof names[k], "BenchOp%%02d_%%08x_high_performance", k, 0x5eedu * (k + 1));
    }
    for (uint64_t i = 0; i < n; i++) {
        uint64_t r = next(&s);
        unsigned k = (unsigned)(r %% NAMES);
        uint64_t dev = 1000 + ((r >> 16) %% (1000u * (k + 1)));
        msimSetNextLaunch(names[k], NULL, dev, 1);
        if (aclrtLaunchKernel(NULL, 1, NULL, 0, stream)) return 2;
    }
    if (aclrtSynchronizeStream(stream)) return 3;
    if (aclrtDestroyStream(stream) || aclrtResetDevice(0)) return 4;
    return 0;
}
"""


# ------------------------------------------------------------------------------------------------
# Setup (parent): the tree, the official package, the workload library


def _helpers():
    """tests/test_cann_samples.py: the package build and the tree's environment, defined once."""
    sys.path.insert(0, str(TESTS))
    import test_cann_samples  # noqa: PLC0415

    return test_cann_samples


def official_package(tree, log) -> Path:
    """The official package built on the tree, kept by tests/test_cann_samples.py's helpers under
    the hash of its sources (the extension links libmspti.so by name, so it runs on any tree): a
    build the CANN samples' tests made is used as it is."""
    t = _helpers()
    key = t.package_key()
    if t.built(key):
        return key
    log(f"building the official package (mspti_C) into {key} ...")
    with tempfile.TemporaryDirectory() as tmp:
        root, build_log = t.build_package(tree, t.tree_env(tree), Path(tmp))
        if not t.built(root):
            sys.exit("the official package did not build:\n" + build_log[-4000:])
        return t.keep_package(root)


def workload_library(tree, where: Path) -> Path:
    src = where / "cann_monitors_workload.c"
    so = where / "libcann_monitors_workload.so"
    src.write_text(WORKLOAD_C % {"names": KERNEL_NAMES})
    lib = str(tree.lib64)
    cmd = [
        "gcc",
        "-O2",
        "-fPIC",
        "-shared",
        "-o",
        str(so),
        str(src),
        f"-L{lib}",
        "-lascendcl",
        "-lascend_hal",
    ]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit("bench/cann_monitors.py needs gcc to build its workload (apt-get install gcc)")
    except subprocess.CalledProcessError as e:
        sys.exit(f"gcc failed on the workload:\n{e.stderr}")
    return so


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
    the launch loop, minus the simulated library's record-producing threads. What is left is the
    collector's: its own threads (mspti-lens's drain thread), the simulator's per-buffer threads
    that run its complete callback (where the official package parses records and calls Python),
    and this thread's work after the loop (flushes, waiting for the last record)."""

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


DELIVERY_TIMEOUT_S = 120.0


def sim_stats(g: ctypes.CDLL) -> dict[str, int]:
    """The simulated library's activity counters (records written, dropped, completes, ...)."""
    from mspti_lens.sim.activity import STATS  # noqa: PLC0415

    g.msimActivityStat.restype = ctypes.c_uint64
    return {name: int(g.msimActivityStat(i)) for i, name in enumerate(STATS)}


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


def child(side: str, launches: int, workload_so: str, buffers: int) -> dict:
    g = ctypes.CDLL(None)
    g.msimSetClock(1)  # the virtual clock: the same durations in every process
    wl = ctypes.CDLL(workload_so)
    wl.bench_launches.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
    meter = Meter()
    if side == "official":
        from mspti import KernelMonitor, MsptiResult  # noqa: PLC0415

        agg: dict[str, list[int]] = {}

        def cb(k) -> None:  # the minimal dict aggregator
            d = k.end - k.start
            a = agg.get(k.name)
            if a is None:
                agg[k.name] = [1, d, d, d]
            else:
                a[0] += 1
                a[1] += d
                if d < a[2]:
                    a[2] = d
                if d > a[3]:
                    a[3] = d

        def count() -> int:
            return sum(a[0] for a in agg.values())

        mon = KernelMonitor()
        if mon.start(cb) != MsptiResult.MSPTI_SUCCESS:
            raise RuntimeError("KernelMonitor.start failed")
        meter.begin()
        rc = meter.workload(lambda: wl.bench_launches(launches, SEED))
        trace: dict = {}
        ok = wait_for(launches, count, KernelMonitor.flush_all, trace)
        m = meter.end()
        mon.stop()
        m["library"] = sim_stats(g)
        per_name = {name: a for name, a in agg.items()}
    elif side == "lens":
        warnings.simplefilter("ignore")  # the simulated-backend warning: the report says SIMULATED
        import mspti_lens  # noqa: PLC0415

        s = mspti_lens.Session(
            enable=[], activity=["kernel"], activity_buffers=(LENS_BUFFER_BYTES, buffers)
        ).start()
        act = s._activity
        m_join = s.join

        def lens_count() -> int:
            # The kernels aggregated so far.
            st = act.snapshot().stats([])
            return sum(
                c
                for t, m, c in zip(st["table"], st["metric"], st["count"])
                if t == "kernels" and m == "duration"
            )

        meter.begin()
        rc = meter.workload(lambda: wl.bench_launches(launches, SEED))
        trace = {}
        ok = wait_for(launches, lens_count, lambda: act.flush(False), trace)
        m = meter.end()
        snap = s.snapshot()
        df = snap.device.kernels("bench")
        m["records_parsed"] = int(snap.device.counters["records"])
        m["join"] = m_join
        m["counters"] = {k: int(v) for k, v in snap.device.counters.items() if v}
        m["library"] = sim_stats(g)
        s.close()
        per_name = {
            r["name"]: [r["num_calls"], r["total_ns"], r["min_ns"], r["max_ns"]]
            for r in df.iter_rows(named=True)
        }
    else:
        raise ValueError(f"unknown side {side!r}; valid: official, lens")
    return {
        "side": side,
        "rc": rc,
        "delivered": ok,
        "tail": trace,
        "launches": launches,
        "per_name": per_name,
        **m,
    }


# ------------------------------------------------------------------------------------------------
# The run (parent): alternate the sides, compare, summarise

SIDES = ("official", "lens")


def run(
    quick: bool,
    log=print,
    rounds: int | None = None,
    launches: int | None = None,
    lens_buffers: int = LENS_BUFFERS,
) -> dict:
    rounds = rounds or (2 if quick else 5)
    launches = launches or (100_000 if quick else 1_000_000)
    t = _helpers()
    from mspti_lens.sim import cann  # noqa: PLC0415

    for tool in ("cmake", "c++", "gcc"):
        if shutil.which(tool) is None:
            sys.exit(
                f"bench/cann_monitors.py needs {tool} (the official package's build and the workload): "
                "apt-get install cmake g++ (make system-deps)"
            )
    with tempfile.TemporaryDirectory(prefix="cann-monitors-") as tmp:
        where = Path(tmp)
        tree = cann.write_tree(where / "toolkit")
        package = official_package(tree, log)
        so = workload_library(tree, where)
        env = {**t.python_env(tree, package), "LD_PRELOAD": str(tree.mspti)}
        load = [os.getloadavg()[0]]
        sides = SIDES
        runs: dict[str, list[dict]] = {s: [] for s in sides}
        for r in range(rounds):
            order = sides if r % 2 == 0 else sides[::-1]
            for side in order:
                me = str(Path(__file__).resolve())
                cmd = [
                    sys.executable,
                    me,
                    "--child",
                    side,
                    "--launches",
                    str(launches),
                    "--workload",
                    str(so),
                    "--lens-buffers",
                    str(lens_buffers),
                ]
                out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
                if out.returncode != 0:
                    sys.exit(f"the {side} process failed (rc {out.returncode}):\n{out.stderr[-4000:]}")
                res = json.loads(out.stdout.strip().splitlines()[-1])
                if res["rc"] != 0 or not res["delivered"]:
                    got = sum(v[0] for v in res["per_name"].values())
                    log(f"{side}: {got:,} of {launches:,} kernels; counters {res.get('counters')}")
                    log(f"{side}: the simulator's stats {res.get('library')}")
                    sys.exit(
                        f"the {side} process: workload rc {res['rc']}, "
                        f"all records delivered: {res['delivered']}"
                    )
                if side == "lens" and res["library"]["records"] != launches:
                    sys.exit(
                        f"the simulated library wrote {res['library']['records']:,} records for "
                        f"{launches:,} launches in the mspti-lens process (join: {res['join']}): a "
                        "kernel-only session must ask for KERNEL records only"
                    )
                runs[side].append(res)
                log(
                    f"round {r + 1}/{rounds} {side:8s}: {rate(res) / 1e3:8.1f} k records/s, "
                    f"{cpu_per_m(res):6.3f} collector CPU s per M records"
                )
        load.append(os.getloadavg()[0])
    return {
        "quick": quick,
        "cores": os.cpu_count(),
        "load": load,
        "rounds": rounds,
        "launches": launches,
        "lens_buffers": lens_buffers,
        "runs": runs,
        "agreement": agreement(runs),
    }


def rate(res: dict) -> float:
    return res["launches"] / (res["wall_ns"] * 1e-9)


def cpu_per_m(res: dict) -> float:
    return res["collector_cpu_ns"] * 1e-9 / (res["launches"] / 1e6)


def agreement(runs: dict[str, list[dict]]) -> dict:
    """Every process's per-name [count, total, min, max] against the first official one's."""
    ref = runs["official"][0]["per_name"]
    mismatches = []
    for side in SIDES:
        for i, res in enumerate(runs[side]):
            got = res["per_name"]
            for name in sorted(set(ref) | set(got)):
                if ref.get(name) != got.get(name):
                    mismatches.append((side, i, name, ref.get(name), got.get(name)))
    return {
        "names": len(ref),
        "records": sum(v[0] for v in ref.values()),
        "reference": ref,
        "mismatches": mismatches,
        "exact": not mismatches,
    }


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def render(r: dict) -> list[str]:
    """The section's Markdown lines (bench/run.py joins its modules' lines)."""
    runs, ag = r["runs"], r["agreement"]
    rates = {s: [rate(x) for x in runs[s]] for s in SIDES}
    cpus = {s: [cpu_per_m(x) for x in runs[s]] for s in SIDES}
    rate_ratio = [b / a for a, b in zip(rates["official"], rates["lens"])]
    cpu_ratio = [a / max(b, 1e-12) for a, b in zip(cpus["official"], cpus["lens"])]
    L = []
    w = L.append
    w(HEADING)
    w("")
    w(
        f"{r['launches']:,} kernel launches per process, {r['rounds']} rounds, the two sides in separate "
        "processes alternated (the order flips every round); medians over rounds, ratios within a round, "
        "spread min .. max." + (" QUICK MODE: proves it runs, not a measurement." if r["quick"] else "")
    )
    w("")
    w("| side | records/s to the user | spread | collector CPU s per M records | spread |")
    w("|---|---:|---:|---:|---:|")
    label = {
        "official": "official KernelMonitor, dict aggregator callback",
        "lens": 'mspti-lens Session(activity=["kernel"])',
    }
    for s in SIDES:
        w(
            f"| {label[s]} | {med(rates[s]) / 1e3:,.1f} k "
            f"| {min(rates[s]) / 1e3:,.1f} .. {max(rates[s]) / 1e3:,.1f} k "
            f"| {med(cpus[s]):.3f} | {min(cpus[s]):.3f} .. {max(cpus[s]):.3f} |"
        )
    rr, cr = med(rate_ratio), med(cpu_ratio)
    w(
        f"| **mspti-lens / official** | **{rr:.1f}x** | {min(rate_ratio):.1f} .. {max(rate_ratio):.1f}x | "
        f"**{cr:.1f}x less** | {min(cpu_ratio):.1f} .. {max(cpu_ratio):.1f}x |"
    )
    # A bound that charges mspti-lens with everything extra its workload thread did (the library's
    # work done because of what mspti-lens asks for; with KERNEL records only there is none to find).
    extra = [
        (ln["collector_cpu_ns"] + max(0, ln["workload_cpu_ns"] - of["workload_cpu_ns"]))
        * 1e-9
        / (ln["launches"] / 1e6)
        for of, ln in zip(runs["official"], runs["lens"])
    ]
    bound = [a / b for a, b in zip(cpus["official"], extra)]
    w(
        "| mspti-lens charged also with its workload thread's extra CPU (vs the official run of the "
        "round) | | "
        f"| {med(extra):.3f} | {med(bound):.1f}x less ({min(bound):.1f} .. {max(bound):.1f}x) |"
    )
    w("")
    w(
        "The last row charges mspti-lens also with what its workload thread spent above the official "
        "run's in the same round (work the library would do because mspti-lens asks for it). Both sides "
        "ask for KERNEL records only: mspti-lens joins kernels to launches (RUNTIME_API records, the "
        "launches frame) only while the session traces a launch callback, and this one traces none."
    )
    w("")
    goal = lambda x: "met" if x >= GOAL_RATIO else f"**missed** ({x:.1f}x of {GOAL_RATIO:.0f}x)"  # noqa: E731
    w(f"Goal >= {GOAL_RATIO:.0f}x on both: records/s {goal(rr)}; CPU per record {goal(cr)}.")
    w("")
    med_of = lambda s, k: med([x[k] for x in runs[s]]) * 1e-9  # noqa: E731
    w(
        "Median CPU seconds per process over the measured interval: "
        + "; ".join(
            f"{s}: process {med_of(s, 'process_cpu_ns'):.3f}, workload thread (launch loop) "
            f"{med_of(s, 'workload_cpu_ns'):.3f}, simulator's producer threads "
            f"{med_of(s, 'producer_cpu_ns'):.3f}, "
            f"collector {med_of(s, 'collector_cpu_ns'):.3f}, wall {med_of(s, 'wall_ns'):.3f}"
            for s in SIDES
        )
        + "."
    )
    w("")
    for s in SIDES:
        at_end = [x["tail"]["at_loop_end"] / x["launches"] * 100 for x in runs[s]]
        loop = [x["loop_wall_ns"] / x["wall_ns"] * 100 for x in runs[s]]
        w(
            f"- {s}: {med(at_end):.1f} % of the records had reached the user when the launch loop returned "
            f"({min(at_end):.1f} .. {max(at_end):.1f} %); the loop is {med(loop):.0f} % of the wall time "
            f"({min(loop):.0f} .. {max(loop):.0f} %); launch-loop CPU per M launches on the workload thread "
            f"{med([x['workload_cpu_ns'] / x['launches'] * 1e-3 for x in runs[s]]):.3f} s."
        )
    lens_parsed = [x.get("records_parsed", 0) for x in runs["lens"]]
    lib_written = [x["library"]["records"] for x in runs["lens"]]
    joins = sorted({x.get("join", "") for x in runs["lens"]})
    w(
        f"- mspti-lens parsed {med(lens_parsed):,.0f} records per process, and the simulated library wrote "
        f"{med(lib_written):,.0f} ({min(lib_written):,} .. {max(lib_written):,}): one KERNEL record per "
        f"launch, as for the official KernelMonitor (the session's join: {', '.join(joins)}; the bench "
        "fails if the library wrote any other record)."
    )
    w("")
    # What bounds each side: the official one by its own CPU per record, mspti-lens by the workload.
    of_cpu_rec = med(cpus["official"])  # CPU s per M records = us per record
    loop_us = {k: med([x["workload_cpu_ns"] / x["launches"] * 1e-3 for x in v]) for k, v in runs.items()}
    cores = med([x["workload_cpu_ns"] / x["loop_wall_ns"] for x in runs["lens"]])
    w(
        f"What bounds each side. The official monitor spends {of_cpu_rec:.2f} us of CPU per record (a dict "
        "built by Py_BuildValue, a KernelData with an enum conversion, a Python call under the GIL), so even "
        f"with a whole core to itself it could not deliver more than {1e3 / of_cpu_rec:,.0f} k records/s; "
        "here it delivers most records after the launch loop has ended. mspti-lens has every record by "
        "the time the loop returns, so its rate is the workload's own: the loop thread costs "
        f"{loop_us['lens']:.2f} us of CPU per launch (libascendcl, the simulated libmspti's interception "
        f"and its record writing) and got {cores:.2f} of a core on this machine. On idle cores "
        "the ratio of records/s would be the official CPU per record over the loop's CPU per launch: "
        f"{of_cpu_rec / loop_us['lens']:.1f}x; no collector can deliver records faster than the program "
        "makes them."
    )
    w("")
    verdict = "**identical**" if ag["exact"] else f"**DIFFERENT** ({len(ag['mismatches'])} mismatches)"
    w(
        "Exact agreement: per kernel name count, total, min and max of end - start, every process of "
        f"both sides "
        f"against the first official one: {ag['names']} names, {ag['records']:,} records: {verdict}."
    )
    w("")
    w("| kernel name | count | total ns | min ns | max ns |")
    w("|---|---:|---:|---:|---:|")
    for name, (n, tot, lo, hi) in sorted(ag["reference"].items()):
        w(f"| `{name}` | {n:,} | {tot:,} | {lo:,} | {hi:,} |")
    w("")
    w(
        "Method. Records per second to the user: the records / the wall time from just before the "
        "workload's first launch until the last record reached the user (the official callback has "
        "aggregated all of them, or mspti-lens's drain has counted all of them), found by counting "
        "what the user holds when the loop returns and, until it is all, flushing (the official "
        "`flush_all`, mspti-lens `flush(settle=False)`) and counting again every ms, bounded. "
        "Collector CPU: over the same interval, the process's CPU time (CLOCK_PROCESS_CPUTIME_ID, which "
        "keeps the time of threads that ended) minus the workload thread's own CPU time while it ran "
        "the launch loop (`time.thread_time_ns`) minus the simulated library's record-producing threads "
        f"(by name in /proc/self/task/*/comm: {', '.join(PRODUCER_THREADS)}; schedstat ns): what is left is "
        "the collector's threads (mspti-lens's drain), the simulator's per-buffer threads that only run "
        "the collector's complete callback (where the official package turns each record into a dict "
        "and a KernelData and calls Python under the GIL), and the main thread's flushes and polling "
        "after the loop. The workload: a C loop on the simulated CANN tree, `msimSetNextLaunch` "
        "(what the tree's aclnn operators announce) then `aclrtLaunchKernel` through libascendcl, "
        "intercepted by the preloaded libmspti.so, then `aclrtSynchronizeStream`; "
        f"{KERNEL_NAMES} kernel names, device durations 1 .. 17 us from a fixed-seed generator on the "
        "simulator's virtual clock. Buffers of 8 MiB, at most 32 for the official package (its "
        f"default), {r.get('lens_buffers', LENS_BUFFERS)} for mspti-lens (its default is 8: under this "
        "machine's load the drain was descheduled long enough for 8 to run dry, the library then dropped "
        "records, counted as null_buffers and pool_exhausted, and the exact check failed; 32 is the "
        "official package's own bound). All SIMULATED; other jobs may share this machine"
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


HEADING = "## CANN's official Python monitors vs mspti-lens (bench/cann_monitors.py)"


def update_report(report: Path, lines: list[str]) -> None:
    """Put this section into `report`: in place of its last version, or at the end; the other
    sections are left as they are."""
    old = report.read_text().splitlines() if report.exists() else []
    if HEADING in old:
        i = old.index(HEADING)
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
    p.add_argument("--launches", type=int, default=None)
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
        default=LENS_BUFFERS,
        help=f"mspti-lens's pool: this many 8 MiB buffers (default {LENS_BUFFERS}: the official package's)",
    )
    p.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    p.add_argument("--workload", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        res = child(a.child, a.launches, a.workload, a.lens_buffers)
        print(json.dumps(res))
        return
    if a.from_json:
        r = json.loads(a.from_json.read_text())
    else:
        r = run(
            a.quick,
            rounds=a.rounds,
            launches=a.launches,
            log=lambda s: print(s, file=sys.stderr),
            lens_buffers=a.lens_buffers,
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
    if not r["agreement"]["exact"]:
        for m in r["agreement"]["mismatches"][:20]:
            print("MISMATCH", m, file=sys.stderr)
        sys.exit("mspti-lens's frames do not reproduce the official monitor's per-name numbers")


if __name__ == "__main__":
    main()
