"""Kineto (PyTorch-profiler) traces for the replay tests and the trace fuzzer's seeds.

- Small ones this project writes (`job_trace`): a three-rank data-parallel job's per-rank traces
  with known calls and durations, so the replay path is covered in every run.
- Real ones, captured by other people on real GPUs, are not in the repository: they are read from
  the directory `$MSPTI_LENS_TRACES` names (`*.json.gz` at any depth; .ci/run sets it when the
  project's shared trace directory is there). Without it, the tests that need them skip.
"""

from __future__ import annotations

import os
from pathlib import Path

TRACES_VAR = "MSPTI_LENS_TRACES"
NO_TRACES = (
    f"no real Kineto traces: set {TRACES_VAR} to a directory of PyTorch-profiler traces (*.json.gz), "
    "e.g. HolisticTraceAnalysis's tests/data"
)


def real_traces() -> dict[str, Path]:
    """The real traces by file name (the first of a name, in path order), or {} without any."""
    where = os.environ.get(TRACES_VAR)
    if not where or not Path(where).is_dir():
        return {}
    found: dict[str, Path] = {}
    for p in sorted(Path(where).rglob("*.json.gz")):
        found.setdefault(p.name, p)
    return found


# The synthetic job: RANKS ranks, STEPS training steps each. Per step a rank launches
# LAUNCHES + rank kernels, copies its batch in (cudaMemcpyAsync), all-reduces its gradients (a
# c10d::allreduce_ op around its record_param_comms, and the NCCL kernel on the device), waits for
# the step (cudaStreamSynchronize, longer on the last rank: a straggler's peers wait) and polls an
# event (cudaEventQuery, which has no MSPTI counterpart); every other step starts with a broadcast.
# Before the steps: cudaSetDevice, and two cudaMalloc; after them two cudaFree. Durations in µs.
RANKS, STEPS, LAUNCHES = 3, 4, 3
LAUNCH_US = (4.25, 5.5, 7.125, 9.75)  # launch j of a step takes LAUNCH_US[j % 4] + rank / 8
SYNC_US = 120.0  # + 30 µs on the last rank
ALLREDUCE_US, BROADCAST_US, MEMCPY_US, MALLOC_US, FREE_US, SET_DEVICE_US = (
    40.5,
    22.0,
    11.0,
    180.0,
    35.0,
    900.0,
)


def job_trace(rank: int) -> dict:
    """Rank `rank`'s trace of the synthetic job, as Kineto writes it (Chrome trace events)."""
    events: list[dict] = []
    t = 1_000.0
    main, comm = 100 + rank, 200 + rank

    def x(name: str, dur: float, cat: str = "cuda_runtime", tid: int = main, at: float | None = None, **args):
        nonlocal t
        start = t if at is None else at
        e = {"ph": "X", "cat": cat, "name": name, "pid": rank, "tid": tid, "ts": start, "dur": dur}
        if args:
            e["args"] = args
        events.append(e)
        if at is None:
            t = start + dur + 1.0
        return e

    def collective(name: str, dur: float, elements: int) -> dict:
        """A c10d op on the communication thread around its record_param_comms (whose args are
        as recent PyTorch writes them); the op."""
        nonlocal t
        op = x(f"c10d::{name}_", dur + 4, cat="cpu_op", tid=comm, at=t)
        args = {"Collective name": name, "In msg nelems": elements, "dtype": "Float", "Group size": RANKS}
        x("record_param_comms", dur, cat="cpu_op", tid=comm, at=op["ts"] + 1, **args)
        t += dur + 6
        return op

    x("cudaSetDevice", SET_DEVICE_US)
    for _ in range(2):
        x("cudaMalloc", MALLOC_US)
    for step in range(STEPS):
        if step % 2 == 0:
            collective("broadcast", BROADCAST_US, 1024)
        x("cudaMemcpyAsync", MEMCPY_US)
        for j in range(LAUNCHES + rank):
            k = x("cudaLaunchKernel", LAUNCH_US[j % 4] + rank / 8)
            x(f"void step_kernel_{j}<float>", 15.0, cat="kernel", tid=7, at=k["ts"] + 20)
        op = collective("allreduce", ALLREDUCE_US, 4096)
        x("ncclKernel_AllReduce_RING_LL_Sum_float", 60.0, cat="kernel", tid=8, at=op["ts"] + 2)
        x("cudaStreamSynchronize", SYNC_US + (30.0 if rank == RANKS - 1 else 0.0))
        x("cudaEventQuery", 1.5)
    for _ in range(2):
        x("cudaFree", FREE_US)
    return {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": RANKS}, "traceEvents": events}
