"""The simulator's Activity API and MSTX side, as tests and notebooks drive it: which MSPTI era it
imitates, injected NULL buffers, the device latency model, streams, launches with named kernels
(graph replays among them), calls that move bytes, draining the device channel, and counters.

None of this exists in a real libmspti; every function maps to one ``msim*`` export of the bundled
library (see ``rust/sim/src/c_face/``: ``activity.rs``, ``control.rs``, ``mstx.rs``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

#: Which MSPTI the activity side imitates: ``follow`` the fidelity (cann8 -> 8.x, cann26 -> 26.0/26.1,
#: documented -> newest dev), or one of them whatever the fidelity.
ERAS = ("follow", "cann8", "cann26", "newest")
#: The counters ``stat`` reads, in the library's order.
STATS = (
    "records",
    "dropped",
    "requests",
    "completes",
    "null_completes",
    "worker_completes",
    "flush_completes",
    "partial_completes",
    "kernels",
    "device_discarded",
    "device_lost",
)
#: ``msptiActivityMemcpyKind`` values for :meth:`SimActivity.call_bytes`.
COPY_KINDS = {"default": 0, "htoh": 1, "htod": 2, "dtoh": 3, "dtod": 4}

_u32, _u64 = ctypes.c_uint32, ctypes.c_uint64


class SimActivity:
    """Control of the simulated Activity API (``Simulator.activity``): the simulator's library and
    its lookup of an API index by name, not the Simulator, which builds this."""

    def __init__(self, lib: ctypes.CDLL, api_index: Callable[[str], int]):
        self._api_index = api_index
        L = self.lib = lib
        sigs = {
            "msimSetActivityEra": ([_u32], _u32),
            "msimGetActivityEra": ([], _u32),
            "msimHasSymbol": ([ctypes.c_char_p], _u32),
            "msimSetNullBufferEvery": ([_u64], None),
            "msimActivityStat": ([_u32], _u64),
            "msimActivityReset": ([], None),
            "msimSetDeviceModel": ([_u64, _u64, _u64], None),
            "msimSetThreadStream": ([_u32, _u32], None),
            "msimStreamHandle": ([_u32], ctypes.c_void_p),
            "msimStreamFreeAt": ([_u32, _u32], _u64),
            "msimDeviceDrain": ([_u64], _u32),
            "msimDevicePending": ([], _u64),
            "msimSetCommName": ([ctypes.c_char_p], None),
            "msimLaunch": (
                [_u32, _u64, _u32, _u64, _u32, ctypes.c_char_p, ctypes.c_char_p, _u32],
                ctypes.c_int32,
            ),
            "msimCallBytes": ([_u32, _u64, _u64, _u32, _u32], ctypes.c_int32),
            "msimSynchronizeStream": ([_u64], ctypes.c_int32),
            "msimSetWorkloadStreams": ([_u32], None),
        }
        for name, (args, res) in sigs.items():
            f = getattr(L, name)
            f.argtypes, f.restype = args, res

    @property
    def era(self) -> str:
        """The MSPTI era in effect (``cann8``, ``cann26`` or ``newest``)."""
        return ERAS[self.lib.msimGetActivityEra()]

    @era.setter
    def era(self, era: str) -> None:
        if era not in ERAS:
            raise ValueError(f"unknown era {era!r}; valid eras are {', '.join(ERAS)}")
        self.lib.msimSetActivityEra(ERAS.index(era))

    def has_symbol(self, name: str) -> bool:
        """Whether a real libmspti of the current era exports ``name`` (the simulator exports all;
        those absent in the era return 999 and do nothing)."""
        return bool(self.lib.msimHasSymbol(name.encode()))

    def null_buffer_every(self, n: int) -> None:
        """Answer every ``n``-th buffer request with NULL, without asking the user (0: never)."""
        if n < 0:
            raise ValueError("n must be >= 0 (0 turns NULL buffers off)")
        self.lib.msimSetNullBufferEvery(n)

    def device_model(
        self,
        launch_latency_ns: int = 3_000,
        record_delay_ns: int = 1_000_000,
        default_kernel_ns: int = 20_000,
    ) -> None:
        """Launch-to-start latency, how long after a task ends its record reaches the channel (real
        clock only), and the device time of a launch made without one (the defaults shown)."""
        for name, v in (("launch_latency_ns", launch_latency_ns), ("record_delay_ns", record_delay_ns),
                        ("default_kernel_ns", default_kernel_ns)):  # fmt: skip
            if v < 0:
                raise ValueError(f"{name} must be >= 0, not {v}")
        self.lib.msimSetDeviceModel(launch_latency_ns, record_delay_ns, default_kernel_ns)

    def thread_stream(self, stream: int, device: int = 0) -> None:
        """The stream (and device) this thread's launches, copies and collectives go to."""
        self.lib.msimSetThreadStream(device, stream)

    def stream_handle(self, stream: int) -> int:
        """The ``aclrtStream`` value the simulator maps to stream id ``stream`` (for MSTX calls)."""
        return self.lib.msimStreamHandle(stream)

    def stream_free_at(self, stream: int, device: int = 0) -> int:
        """When the stream's last task ends, in MSPTI's clock (ns; 0 if nothing ran there)."""
        return self.lib.msimStreamFreeAt(device, stream)

    def launch(
        self,
        api: str | int = "aclrtLaunchKernelV2",
        *,
        host_ns: int = 5_000,
        stream: int = 0,
        device_ns: int = 20_000,
        kernels: int = 1,
        kernel: str = "SimKernel",
        node: str | None = None,
        graph: bool = False,
    ) -> None:
        """One launch call: ``kernels`` kernels of ``device_ns`` each on ``stream``; ``node`` names
        the operator (adds API / NODE_API records); ``graph`` replays a graph (all kernels carry the
        call's correlation id)."""
        idx = self._api_index(api) if isinstance(api, str) else api
        rc = self.lib.msimLaunch(idx, host_ns, stream, device_ns, kernels, kernel.encode(),
                                 node.encode() if node else None, int(graph))  # fmt: skip
        if rc != 0:
            raise ValueError(f"{api!r} is not a kernel-launch API of the simulator")

    def call_bytes(
        self, api: str | int, nbytes: int, *, host_ns: int = 5_000, copy_kind: str = "default", ranks: int = 8
    ) -> None:
        """One call that moves ``nbytes``: a copy (``copy_kind`` one of :data:`COPY_KINDS`), a
        memset, an allocation or free, or a collective over ``ranks`` ranks."""
        if copy_kind not in COPY_KINDS:
            raise ValueError(f"unknown copy kind {copy_kind!r}; valid kinds are {', '.join(COPY_KINDS)}")
        idx = self._api_index(api) if isinstance(api, str) else api
        if self.lib.msimCallBytes(idx, host_ns, nbytes, COPY_KINDS[copy_kind], ranks) != 0:
            raise ValueError(f"unknown simulated API {api!r}")

    def synchronize(self, host_ns: int = 2_000) -> None:
        """``aclrtSynchronizeStream`` of this thread's stream: waits until its last task ends."""
        self.lib.msimSynchronizeStream(host_ns)

    def comm_name(self, name: str | None) -> None:
        """The communicator name HCCL / COMMUNICATION records carry (None: ``hccl_world_group``)."""
        self.lib.msimSetCommName(name.encode() if name else None)

    def shared_stream(self, on: bool) -> None:
        """Workloads started from now on put every compute thread on stream 0 (else one each)."""
        self.lib.msimSetWorkloadStreams(1 if on else 0)

    def drain(self, timeout_s: float = 10.0) -> bool:
        """Wait until every device record on the channel is written (FlushAll does not wait)."""
        return self.lib.msimDeviceDrain(int(timeout_s * 1000)) == 0

    @property
    def pending(self) -> int:
        """Device records still on the channel."""
        return self.lib.msimDevicePending()

    def stat(self, name: str) -> int:
        """One counter: records written, dropped, buffer requests, completes (NULL, from
        completing threads, from FlushAll, partial), kernels run, device records discarded because
        their kind was disabled while they waited on the channel, device records lost because their
        task was still unfinished when ``msptiUnsubscribe``'s bounded wait ended."""
        if name not in STATS:
            raise ValueError(f"unknown counter {name!r}; valid ones are {', '.join(STATS)}")
        return self.lib.msimActivityStat(STATS.index(name))

    def stats(self) -> dict[str, int]:
        return {name: self.stat(name) for name in STATS}

    def reset(self) -> None:
        """Every kind off, buffers handed back (FlushAll), callbacks forgotten, device timelines,
        counters, correlation ids, external-correlation stacks, marker domains, MSTX ranges and
        this module's settings back to their defaults."""
        self.lib.msimActivityReset()
        self.lib.msimSetWorkloadStreams(0)
