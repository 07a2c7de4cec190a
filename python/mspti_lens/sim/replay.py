"""Read PyTorch-profiler (Kineto) Chrome traces and turn their host API calls into MSPTI calls.

Runtime calls are the ``cuda_runtime`` events (ENTER = ``ts``, EXIT = ``ts + dur``, thread =
``(pid, tid)``); collectives are ``record_param_comms`` events with a "Collective name" or, in
older traces without it, the ``c10d::*`` operators. Each maps to the MSPTI function of the same
job (``cudaLaunchKernel`` -> ``aclrtLaunchKernel``, ``allreduce`` -> ``HcclAllReduce``; see
``RUNTIME_MAP`` and ``COLLECTIVE_MAP``). Nothing is dropped silently: every candidate event not
replayed is counted by kind in :attr:`Trace.skipped` (no MSPTI counterpart, like ``cudaEventQuery``;
a ``record_param_comms`` with neither a collective name nor an enclosing ``c10d`` op; the duplicate
of a collective replayed through its other event), and events whose ``ts``/``dur`` are not usable
times in :attr:`Trace.invalid` (bad input). Times are read exactly: JSON numbers are parsed as
decimals, so a µs timestamp with a ns fraction keeps every digit.
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
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


# Times in ns are u64 in the simulator: a call must end below 2^64 ns.
_END_NS = 1 << 64


def _ns(v: Any) -> int | None:
    """A ts or dur in µs as exact integer ns (half-even), or None when it is not a usable time:
    not a number, not finite, negative, or past 2^64 ns. Floats (from a document parsed without
    decimals) are taken at their shortest repr, the digits the JSON text most likely had."""
    if isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
        return None
    try:
        d = v if isinstance(v, Decimal) else Decimal(v) if isinstance(v, int) else Decimal(repr(v))
        if not d.is_finite() or d < 0:
            return None
        ns = int((d * 1000).to_integral_value(rounding=ROUND_HALF_EVEN))
    except (InvalidOperation, ValueError, OverflowError):
        return None
    return ns if ns < _END_NS else None


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
    #: Candidate events not replayed, by kind (each kind names why).
    skipped: Counter = field(default_factory=Counter)
    #: Bad input, by event name: ts/dur not a time in µs (finite, >= 0, ending below 2^64 ns).
    invalid: Counter = field(default_factory=Counter)

    @classmethod
    def read(cls, path: str | os.PathLike) -> Trace:
        """Read a Kineto JSON trace (gzip or plain). Raises ValueError for anything else."""
        p = os.fspath(path)
        try:
            with open(p, "rb") as f:
                raw = f.read()
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.decompress(raw)
            doc = json.loads(raw, parse_float=Decimal)
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
        invalid: Counter = Counter()
        xs = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
        has_named = any(
            e.get("name") == "record_param_comms"
            and isinstance(e.get("args"), dict)
            and e["args"].get("Collective name")
            for e in xs
        )
        # Older traces: a record_param_comms inside a c10d op is that op's bookkeeping (the op is
        # replayed); one outside any c10d op has no collective to replay, and is counted.
        c10d_spans: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
        if not has_named:
            for e in xs:
                name = e.get("name")
                if e.get("cat") == "cpu_op" and isinstance(name, str) and name.startswith("c10d::"):
                    ts, dur = _ns(e.get("ts")), _ns(e.get("dur"))
                    if ts is not None and dur is not None:
                        c10d_spans[(str(e.get("pid")), str(e.get("tid")))].append((ts, ts + dur))
            for spans in c10d_spans.values():
                spans.sort()

        def in_c10d(thread: tuple[str, str], ts: int, end: int) -> bool:
            spans = c10d_spans.get(thread, [])
            i = bisect.bisect_right(spans, (ts, _END_NS))
            return any(s <= ts and end <= e for s, e in spans[:i])

        for e in xs:
            name, cat = e.get("name"), e.get("cat")
            api: str | None = None
            kind: str | None = None  # why it is not replayed
            if cat in ("cuda_runtime", "cuda_driver"):
                if not isinstance(name, str):
                    invalid[f"{cat} event without a name"] += 1
                    continue
                api = RUNTIME_MAP.get(name)
                if api is None:
                    kind = name  # no MSPTI counterpart
            elif cat == "cpu_op" and name == "record_param_comms":
                args = e.get("args")
                coll = args.get("Collective name") if isinstance(args, dict) else None
                if has_named:
                    api = COLLECTIVE_MAP.get(str(coll).lower()) if coll else None
                    if api is None:
                        kind = f"record_param_comms:{coll}"
                else:
                    kind = "record_param_comms without a collective name"  # refined below
            elif cat == "cpu_op" and isinstance(name, str) and name.startswith("c10d::"):
                if has_named:
                    kind = f"{name} (replayed as its record_param_comms)"
                else:
                    op = name.removeprefix("c10d::").rstrip("_")
                    api = COLLECTIVE_MAP.get(op) or COLLECTIVE_MAP.get(op + "_")
                    if api is None:
                        kind = name
            else:
                continue  # not an API call: operators, kernels, annotations
            ts, dur = _ns(e.get("ts")), _ns(e.get("dur"))
            if ts is None or dur is None or ts + dur >= _END_NS:
                invalid[str(name)] += 1
                continue
            # Thread ids are kept as text: any JSON value names a thread, and text sorts and hashes.
            thread = (str(e.get("pid")), str(e.get("tid")))
            if kind == "record_param_comms without a collective name":
                kind += (
                    " (inside its c10d op, which is replayed)"
                    if in_c10d(thread, ts, ts + dur)
                    else (" or enclosing c10d op")
                )
            if kind is not None:
                skipped[kind] += 1
                continue
            assert api is not None
            calls.append(TraceCall(thread, api, ts, dur, str(name)))
        return cls(path, calls, skipped, invalid)

    def counts(self) -> Counter:
        """Calls per MSPTI function name."""
        return Counter(c.api for c in self.calls)

    def durations(self, api: str) -> list[int]:
        """Every duration (ns) of one MSPTI function, as recorded."""
        return [c.dur_ns for c in self.calls if c.api == api]

    def lanes(self, longest_ns: int | None = None) -> list[list[TraceCall]]:
        """Calls per replay thread: a trace thread's calls, well nested. A call that overlaps
        another without nesting in it (rare in traces) goes to an extra lane of its own thread, so
        every call keeps its exact time and duration. Calls longer than ``longest_ns`` are left
        out."""
        by_thread: dict[Any, list[TraceCall]] = defaultdict(list)
        for c in self.calls:
            if longest_ns is None or c.dur_ns <= longest_ns:
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

    def events(self, sim: ApiIndex, *, longest_ns: int | None = None) -> list[list[tuple[int, int, int]]]:
        """Per replay thread, the (api index, site, t_ns) events in firing order. Calls longer
        than ``longest_ns`` (if given) are left out; the calls inside them stay."""
        index = {name: sim.api(name) for name in set(c.api for c in self.calls)}
        out = []
        for lane in self.lanes(longest_ns):
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
