"""Read PyTorch-profiler (Kineto) Chrome traces and turn their host API calls into MSPTI calls.

Runtime calls are the ``cuda_runtime`` events (ENTER = ``ts``, EXIT = ``ts + dur``, thread =
``(pid, tid)``); collectives are ``record_param_comms`` events with a "Collective name" or, in
older traces without it, the ``c10d::*`` operators. Each maps to the MSPTI function of the same
job (``cudaLaunchKernel`` -> ``aclrtLaunchKernel``, ``allreduce`` -> ``HcclAllReduce``; see
``RUNTIME_MAP`` and ``COLLECTIVE_MAP``). Calls with no MSPTI counterpart (``cudaEventQuery``,
``cudaStreamIsCapturing``, ...) are **skipped** and counted in :attr:`Trace.skipped`.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Protocol


class ApiIndex(Protocol):
    """What replay needs of the simulator: the index of an MSPTI function (a Simulator is one).
    A protocol, so this module imports nothing of the driver and the driver imports this one."""

    def api(self, name: str) -> int: ...


RUNTIME_MAP: dict[str, str] = {
    "cudaLaunchKernel": "aclrtLaunchKernel",
    "hipLaunchKernel": "aclrtLaunchKernel",
    "cudaLaunchKernelExC": "aclrtLaunchKernelWithConfig",
    "cudaLaunchCooperativeKernel": "aclrtLaunchKernelWithConfig",
    "hipExtModuleLaunchKernel": "aclrtLaunchKernelV2",
    "hipModuleLaunchKernel": "aclrtLaunchKernelV2",
    "cudaMalloc": "aclrtMalloc",
    "hipMalloc": "aclrtMalloc",
    "cudaFree": "aclrtFree",
    "hipFree": "aclrtFree",
    "cudaMallocHost": "aclrtMallocHost",
    "cudaHostAlloc": "aclrtMallocHost",
    "hipHostMalloc": "aclrtMallocHost",
    "cudaFreeHost": "aclrtFreeHost",
    "hipHostFree": "aclrtFreeHost",
    "cudaMemcpy": "aclrtMemcpy",
    "hipMemcpy": "aclrtMemcpy",
    "hipMemcpyWithStream": "aclrtMemcpy",
    "cudaMemcpyAsync": "aclrtMemcpyAsync",
    "hipMemcpyAsync": "aclrtMemcpyAsync",
    "cudaMemcpy2D": "aclrtMemcpy2d",
    "cudaMemcpy2DAsync": "aclrtMemcpy2dAsync",
    "cudaMemset": "aclrtMemset",
    "hipMemset": "aclrtMemset",
    "cudaMemsetAsync": "aclrtMemsetAsync",
    "hipMemsetAsync": "aclrtMemsetAsync",
    "cudaStreamSynchronize": "aclrtSynchronizeStream",
    "hipStreamSynchronize": "aclrtSynchronizeStream",
    "cudaStreamCreate": "aclrtCreateStream",
    "cudaStreamCreateWithFlags": "aclrtCreateStream",
    "cudaStreamCreateWithPriority": "aclrtCreateStream",
    "hipStreamCreate": "aclrtCreateStream",
    "cudaStreamDestroy": "aclrtDestroyStream",
    "hipStreamDestroy": "aclrtDestroyStream",
    "cudaSetDevice": "aclrtSetDevice",
    "hipSetDevice": "aclrtSetDevice",
    "cudaDeviceReset": "aclrtResetDevice",
    "cudaMemGetInfo": "aclrtGetMemInfo",
    "hipMemGetInfo": "aclrtGetMemInfo",
}

COLLECTIVE_MAP: dict[str, str] = {
    "allreduce": "HcclAllReduce",
    "all_reduce": "HcclAllReduce",
    "broadcast": "HcclBroadcast",
    "allgather": "HcclAllGather",
    "all_gather": "HcclAllGather",
    "_allgather_base": "HcclAllGather",
    "allgather_into_tensor_coalesced": "HcclAllGather",
    "reduce_scatter": "HcclReduceScatter",
    "_reduce_scatter_base": "HcclReduceScatter",
    "reduce_scatter_tensor_coalesced": "HcclReduceScatter",
    "reduce": "HcclReduce",
    "all_to_all": "HcclAlltoAll",
    "alltoall": "HcclAlltoAll",
    "alltoall_base": "HcclAlltoAll",
    "all_to_allv": "HcclAlltoAllV",
    "barrier": "HcclBarrier",
    "scatter": "HcclScatter",
    "send": "HcclSend",
    "recv": "HcclRecv",
    "recv_": "HcclRecv",
    "recv_any_source": "HcclRecv",
}


def _finite_time(v: Any) -> bool:
    """A usable ts or dur (µs): a finite, non-negative number below 2^64 ns."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v < 1.8e16


@dataclass(frozen=True)
class TraceCall:
    thread: tuple[Any, Any]
    api: str
    ts_ns: int
    dur_ns: int
    source: str


@dataclass
class Trace:
    """The MSPTI-mappable host calls of one trace."""

    path: str
    calls: list[TraceCall]
    skipped: Counter = field(default_factory=Counter)

    @classmethod
    def read(cls, path: str | os.PathLike) -> Trace:
        """Read a Kineto JSON trace (gzip or plain). Raises ValueError for anything else."""
        p = os.fspath(path)
        try:
            with open(p, "rb") as f:
                raw = f.read()
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.decompress(raw)
            doc = json.loads(raw)
        except FileNotFoundError:
            raise
        except (OSError, EOFError, ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"{p} is not a readable Chrome/Kineto JSON trace: {e}") from None
        return cls.from_document(doc, p)

    @classmethod
    def from_document(cls, doc: Any, path: str = "<memory>") -> Trace:
        events = doc.get("traceEvents") if isinstance(doc, dict) else doc
        if not isinstance(events, list):
            raise ValueError(f"{path} has no traceEvents list; expected a Chrome/Kineto trace")
        calls: list[TraceCall] = []
        skipped: Counter = Counter()
        xs = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
        has_named = any(
            e.get("name") == "record_param_comms"
            and isinstance(e.get("args"), dict)
            and e["args"].get("Collective name")
            for e in xs
        )
        for e in xs:
            name, cat = e.get("name"), e.get("cat")
            api: str | None = None
            if cat == "cuda_runtime":
                if not isinstance(name, str):
                    continue
                api = RUNTIME_MAP.get(name)
                if api is None:
                    skipped[name] += 1
                    continue
            elif cat == "cpu_op" and isinstance(name, str):
                if has_named and name == "record_param_comms":
                    args = e.get("args")
                    coll = args.get("Collective name") if isinstance(args, dict) else None
                    api = COLLECTIVE_MAP.get(str(coll).lower()) if coll else None
                    if api is None:
                        skipped[f"record_param_comms:{coll}"] += 1
                        continue
                elif not has_named and name.startswith("c10d::"):
                    op = name.removeprefix("c10d::").rstrip("_")
                    api = COLLECTIVE_MAP.get(op) or COLLECTIVE_MAP.get(op + "_")
                    if api is None:
                        skipped[name] += 1
                        continue
                else:
                    continue
            else:
                continue
            ts, dur = e.get("ts"), e.get("dur")
            if not (_finite_time(ts) and _finite_time(dur)):
                skipped[f"{name} (bad ts/dur)"] += 1
                continue
            # Thread ids are kept as text: any JSON value names a thread, and text sorts and hashes.
            thread = (str(e.get("pid")), str(e.get("tid")))
            calls.append(TraceCall(thread, api, round(ts * 1000), round(dur * 1000), name))
        return cls(path, calls, skipped)

    def counts(self) -> Counter:
        """Calls per MSPTI function name."""
        return Counter(c.api for c in self.calls)

    def durations(self, api: str) -> list[int]:
        """Every duration (ns) of one MSPTI function, as recorded."""
        return [c.dur_ns for c in self.calls if c.api == api]

    def lanes(self) -> list[list[TraceCall]]:
        """Calls per replay thread: a trace thread's calls, well nested. A call that overlaps
        another without nesting in it (rare in traces) goes to an extra lane of its own thread, so
        every call keeps its exact time and duration."""
        by_thread: dict[Any, list[TraceCall]] = defaultdict(list)
        for c in self.calls:
            by_thread[c.thread].append(c)
        lanes: list[list[TraceCall]] = []
        for thread in sorted(by_thread):
            calls = sorted(by_thread[thread], key=lambda c: (c.ts_ns, -c.dur_ns))
            mine: list[tuple[list[TraceCall], list[int]]] = []  # (calls, stack of open end times)
            for c in calls:
                end = c.ts_ns + c.dur_ns
                for lane, stack in mine:
                    while stack and stack[-1] <= c.ts_ns:
                        stack.pop()
                    if not stack or end <= stack[-1]:
                        lane.append(c)
                        stack.append(end)
                        break
                else:
                    mine.append(([c], [end]))
            lanes.extend(lane for lane, _ in mine)
        return lanes

    def events(self, sim: ApiIndex) -> list[list[tuple[int, int, int]]]:
        """Per replay thread, the (api index, site, t_ns) events in firing order."""
        index = {name: sim.api(name) for name in set(c.api for c in self.calls)}
        out = []
        for lane in self.lanes():
            ev: list[tuple[int, int, int]] = []
            stack: list[tuple[int, int]] = []  # (end, api)
            for c in lane:
                while stack and stack[-1][0] <= c.ts_ns:
                    end, api = stack.pop()
                    ev.append((api, 1, end))
                a = index[c.api]
                ev.append((a, 0, c.ts_ns))
                stack.append((c.ts_ns + c.dur_ns, a))
            while stack:
                end, api = stack.pop()
                ev.append((api, 1, end))
            out.append(ev)
        return out
