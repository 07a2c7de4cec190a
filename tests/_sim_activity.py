"""ctypes view of the simulator's Activity API and MSTX, and the test environment (:class:`Env`) the
tests of the simulator's activity side share (tests/test_sim_activity_*.py, test_sim_fidelity.py).

The record structs are written from the upstream header's offsets (``mspti_activity.h``), not from
the Rust definitions, so parsing the simulator's buffers with them checks its layouts.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field

u8, u32, u64, f64 = ctypes.c_uint8, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_double
cstr, vp = ctypes.c_char_p, ctypes.c_void_p

MARKER, KERNEL, API, HCCL, MEMORY, MEMSET, MEMCPY, EXTERNAL_CORRELATION, COMMUNICATION = range(1, 10)
ACL_API, NODE_API, RUNTIME_API, OVERHEAD = 10, 11, 12, 13
ERAS = {"follow": 0, "cann8": 1, "cann26": 2, "newest": 3}
STAT = {
    "records": 0, "dropped": 1, "requests": 2, "completes": 3, "null_completes": 4, "worker_completes": 5,
    "flush_completes": 6, "partial_completes": 7, "kernels": 8, "device_discarded": 9, "device_lost": 10,
}  # fmt: skip


class Packed(ctypes.Structure):
    _pack_ = 1


class Pair(Packed):
    _fields_ = [("first", u32), ("second", u32)]


class Marker(Packed):
    _fields_ = [("kind", u32), ("flag", u32), ("sourceKind", u32), ("timestamp", u64), ("id", u64),
                ("objectId", Pair), ("name", cstr), ("domain", cstr), ("_pad", u8 * 4)]  # fmt: skip


class Kernel(Packed):
    _fields_ = [("kind", u32), ("start", u64), ("end", u64), ("ds", Pair), ("correlationId", u64),
                ("type", cstr), ("name", cstr), ("_pad", u8 * 4)]  # fmt: skip


class Api(Packed):
    _fields_ = [("kind", u32), ("start", u64), ("end", u64), ("pt", Pair), ("correlationId", u64),
                ("name", cstr), ("_pad", u8 * 4)]  # fmt: skip


class Hccl(Packed):
    _fields_ = [("kind", u32), ("start", u64), ("end", u64), ("ds", Pair), ("bandWidth", f64),
                ("name", cstr), ("commName", cstr), ("_pad", u8 * 4)]  # fmt: skip


class Memory(Packed):
    _fields_ = [("kind", u32), ("memoryOperationType", u32), ("memoryKind", u32), ("correlationId", u64),
                ("start", u64), ("end", u64), ("address", u64), ("bytes", u64), ("processId", u32),
                ("deviceId", u32), ("streamId", u32)]  # fmt: skip


class Memset(Packed):
    _fields_ = [("kind", u32), ("value", u32), ("bytes", u64), ("start", u64), ("end", u64),
                ("deviceId", u32), ("streamId", u32), ("correlationId", u64), ("isAsync", u8),
                ("_pad", u8 * 7)]  # fmt: skip


class Memcpy(Packed):
    _fields_ = [("kind", u32), ("copyKind", u32), ("bytes", u64), ("start", u64), ("end", u64),
                ("deviceId", u32), ("streamId", u32), ("correlationId", u64), ("isAsync", u8),
                ("_pad", u8 * 7)]  # fmt: skip


class ExternalCorrelation(Packed):
    _fields_ = [("kind", u32), ("externalKind", u32), ("externalId", u64), ("correlationId", u64)]


class Communication(Packed):
    _fields_ = [("kind", u32), ("dataType", u32), ("count", u64), ("ds", Pair), ("start", u64), ("end", u64),
                ("algType", cstr), ("name", cstr), ("commName", cstr), ("correlationId", u64)]  # fmt: skip


class Overhead(Packed):  # newest dev only; layout from its docs (msptiActivityOverhead.md)
    _fields_ = [("kind", u32), ("overheadKind", u32), ("objectId", Pair), ("start", u64), ("end", u64),
                ("correlationId", u64), ("overheadData", vp), ("objectKind", u32),
                ("_pad", u8 * 4)]  # fmt: skip


STRUCTS = {
    MARKER: Marker, KERNEL: Kernel, API: Api, HCCL: Hccl, MEMORY: Memory, MEMSET: Memset, MEMCPY: Memcpy,
    EXTERNAL_CORRELATION: ExternalCorrelation, COMMUNICATION: Communication, ACL_API: Api, NODE_API: Api,
    RUNTIME_API: Api, OVERHEAD: Overhead,
}  # fmt: skip

REQUEST = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.POINTER(u8)), ctypes.POINTER(ctypes.c_size_t),
                           ctypes.POINTER(ctypes.c_size_t))  # fmt: skip
COMPLETE = ctypes.CFUNCTYPE(None, ctypes.POINTER(u8), ctypes.c_size_t, ctypes.c_size_t)
TIMESTAMP = ctypes.CFUNCTYPE(u64)
CALLBACK = ctypes.CFUNCTYPE(None, vp, u32, u32, vp)


def bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Declare the argument and result types of the activity, MSTX and msim* functions."""
    L = lib
    sz = ctypes.c_size_t
    sigs = {
        "msptiActivityRegisterCallbacks": ([REQUEST, COMPLETE], u32),
        "msptiActivityEnable": ([u32], u32),
        "msptiActivityDisable": ([u32], u32),
        "msptiActivityIsEnabled": ([u32], ctypes.c_bool),
        "msptiActivityGetNextRecord": ([vp, sz, ctypes.POINTER(vp)], u32),
        "msptiActivityFlushAll": ([u32], u32),
        "msptiActivityFlushPeriod": ([u32], u32),
        "msptiActivityPushExternalCorrelationId": ([u32, u64], u32),
        "msptiActivityPopExternalCorrelationId": ([u32, ctypes.POINTER(u64)], u32),
        "msptiActivityEnableMarkerDomain": ([cstr], u32),
        "msptiActivityDisableMarkerDomain": ([cstr], u32),
        "msptiActivityGetStructSize": ([u32, u32, ctypes.POINTER(sz)], u32),
        "msptiActivityGetEnabledKinds": (
            [vp, ctypes.POINTER(u32), ctypes.POINTER(u32), ctypes.POINTER(u32)],
            u32,
        ),
        "msptiActivityGetNumDroppedRecords": ([vp, u32, ctypes.POINTER(sz)], u32),
        "msptiActivityRegisterTimestampCallback": ([TIMESTAMP], u32),
        "msptiGetTimestamp": ([ctypes.POINTER(u64)], u32),
        "msptiSubscribe": ([ctypes.POINTER(vp), CALLBACK, vp], u32),
        "msptiUnsubscribe": ([vp], u32),
        "msptiEnableCallback": ([u32, vp, u32, u32], u32),
        "mstxMarkA": ([cstr, vp], None),
        "mstxRangeStartA": ([cstr, vp], u64),
        "mstxRangeEnd": ([u64], None),
        "mstxDomainCreateA": ([cstr], vp),
        "mstxDomainDestroy": ([vp], None),
        "mstxDomainMarkA": ([vp, cstr, vp], None),
        "mstxDomainRangeStartA": ([vp, cstr, vp], u64),
        "mstxDomainRangeEnd": ([vp, u64], None),
        "msimSetActivityEra": ([u32], u32),
        "msimGetActivityEra": ([], u32),
        "msimHasSymbol": ([cstr], u32),
        "msimSetNullBufferEvery": ([u64], None),
        "msimActivityStat": ([u32], u64),
        "msimActivityReset": ([], None),
        "msimSetDeviceModel": ([u64, u64, u64], None),
        "msimSetThreadStream": ([u32, u32], None),
        "msimStreamHandle": ([u32], vp),
        "msimStreamFreeAt": ([u32, u32], u64),
        "msimDeviceDrain": ([u64], u32),
        "msimDevicePending": ([], u64),
        "msimSetCommName": ([cstr], None),
        "msimLaunch": ([u32, u64, u32, u64, u32, cstr, cstr, u32], ctypes.c_int32),
        "msimCallBytes": ([u32, u64, u64, u32, u32], ctypes.c_int32),
        "msimCallCollective": ([u32, u64, u64, u32, u32], ctypes.c_int32),
        "msimSynchronizeStream": ([u64], ctypes.c_int32),
        "msimCall": ([u32, u64], ctypes.c_int32),
        "msimVirtualSet": ([u64], None),
        "msimVirtualNow": ([], u64),
        "msimSetClock": ([u32], None),
        "msimSetFidelity": ([u32], u32),
        "msimSetPreloadCheck": ([u32], None),
    }
    for name, (args, res) in sigs.items():
        f = getattr(L, name)
        f.argtypes, f.restype = args, res
    return L


def read(ptr: int, st: type) -> Packed:
    return st.from_address(ptr)


def text(p: bytes | None) -> str | None:
    return None if p is None else p.decode()


@dataclass
class Buffer:
    """One completed buffer: its size, valid bytes, and the records parsed from it."""

    size: int
    valid: int
    records: list = field(default_factory=list)
    offsets: list = field(default_factory=list)
    thread: str = ""


class Collector:
    """A consumer of the simulator's Activity API: a pool of ``pool`` buffers of ``size`` bytes
    (NULL once the pool is empty; completed buffers go back to it if ``recycle``), records parsed
    in the complete callback with msptiActivityGetNextRecord into plain dicts (copies)."""

    def __init__(self, lib: ctypes.CDLL, size: int = 1 << 16, pool: int = 64, recycle: bool = True):
        self.lib, self.size, self.recycle = lib, size, recycle
        self.free = [(ctypes.c_uint8 * size)() for _ in range(pool)]
        self.out: dict[int, ctypes.Array] = {}
        self.kept: list[ctypes.Array] = []
        self.buffers: list[Buffer] = []
        self.null_completes = 0
        self.requests = 0
        self.lock = threading.Lock()
        self._req = REQUEST(self._on_request)
        self._comp = COMPLETE(self._on_complete)
        assert lib.msptiActivityRegisterCallbacks(self._req, self._comp) == 0

    def _on_request(self, buf, size, max_records):
        with self.lock:
            self.requests += 1
            if not self.free:
                buf[0] = ctypes.POINTER(u8)()
                size[0] = 0
                return
            b = self.free.pop()
            addr = ctypes.addressof(b)
            self.out[addr] = b
        buf[0] = ctypes.cast(b, ctypes.POINTER(u8))
        size[0] = self.size
        max_records[0] = 0

    def _on_complete(self, buf, size, valid):
        addr = ctypes.cast(buf, ctypes.c_void_p).value
        if not addr:
            with self.lock:
                self.null_completes += 1
            return
        out = Buffer(size, valid, thread=threading.current_thread().name)
        rec = ctypes.c_void_p()
        while True:
            rc = self.lib.msptiActivityGetNextRecord(addr, valid, ctypes.byref(rec))
            if rc == 3:
                break
            assert rc == 0, f"GetNextRecord gave {rc}"
            kind = ctypes.c_uint32.from_address(rec.value).value
            st = STRUCTS[kind]
            r = read(rec.value, st)
            d = {name: getattr(r, name) for name, _ in st._fields_ if not name.startswith("_")}
            for k in ("ds", "pt", "objectId"):
                if k in d:
                    d[k] = (d[k].first, d[k].second)
            for k, v in list(d.items()):
                if isinstance(v, bytes):
                    d[k] = v.decode()
            out.offsets.append(rec.value - addr)
            out.records.append(d)
        with self.lock:
            self.buffers.append(out)
            b = self.out.pop(addr)
            if self.recycle:
                self.free.append(b)
            else:
                self.kept.append(b)

    def records(self, kind: int | None = None) -> list[dict]:
        with self.lock:
            rs = [r for b in self.buffers for r in b.records]
        return rs if kind is None else [r for r in rs if r["kind"] == kind]

    def drain(self) -> None:
        """Everything the simulator holds, delivered: the device channel, then FlushAll."""
        assert self.lib.msimDeviceDrain(10_000) == 0
        assert self.lib.msptiActivityFlushAll(1) == 0


class Subscription:
    """An MSPTI subscriber (activity needs one), optionally recording LAUNCH ENTER/EXIT times."""

    def __init__(self, lib: ctypes.CDLL, on_callback=None):
        self.lib = lib
        self.handle = ctypes.c_void_p()
        self.events: list[tuple[int, int, int, int]] = []

        def cb(_ud, domain, cbid, data):
            site = ctypes.c_uint32.from_address(data).value
            self.events.append((domain, cbid, site, lib.msimVirtualNow()))
            if on_callback is not None:
                on_callback(domain, cbid, site)

        self._cb = CALLBACK(cb)
        assert lib.msptiSubscribe(ctypes.byref(self.handle), self._cb, None) == 0

    def enable(self, domain: int, cbid: int) -> None:
        assert self.lib.msptiEnableCallback(1, self.handle, domain, cbid) == 0

    def close(self) -> None:
        self.lib.msptiUnsubscribe(self.handle)


# A virtual time far ahead of CLOCK_REALTIME (2065): a thread whose clock is set there keeps it
# exactly from call to call, where a clock behind real time starts its next call at real time.
AHEAD_NS = 3_000_000_000_000_000_000


class Env:
    """A subscriber on the simulator, its activity side reset and its virtual clock on, at
    `AHEAD_NS` + 1 ms."""

    def __init__(self, sim):
        self.sim = sim
        self.lib = bind(sim.lib)
        self.lib.msimActivityReset()
        self.lib.msimSetClock(1)
        self.lib.msimVirtualSet(AHEAD_NS + 1_000_000)
        self.sub = Subscription(self.lib)
        self.collectors: list[Collector] = []

    def collect(self, size: int = 1 << 16, pool: int = 64, recycle: bool = True) -> Collector:
        c = Collector(self.lib, size, pool, recycle)
        self.collectors.append(c)
        return c

    def enable(self, *kinds: int) -> None:
        for k in kinds:
            assert self.lib.msptiActivityEnable(k) == 0, k

    def launch(
        self, n: int = 1, stream: int = 0, host_ns: int = 5_000, device_ns: int = 20_000, **kw
    ) -> None:
        api = self.sim.api(kw.pop("api", "aclrtLaunchKernelV2"))
        name = kw.pop("kernel", b"MatMul")
        for _ in range(n):
            rc = self.lib.msimLaunch(api, host_ns, stream, device_ns, kw.get("kernels", 1), name,
                                     kw.get("node"), kw.get("graph", 0))  # fmt: skip
            assert rc == 0

    def close(self) -> None:
        self.lib.msimActivityReset()  # hands every buffer back while the collectors still live
        self.sub.close()
