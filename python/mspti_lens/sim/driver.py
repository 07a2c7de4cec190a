"""Driver of the bundled simulator: a stand-in libmspti with a simulated ACL runtime and HCCL.

The simulator is the same shared object the core loads as its MSPTI library (``dlopen`` of one
file gives one instance), so what this module configures is what the Session sees.

See :mod:`mspti_lens.sim` for an example.
"""

from __future__ import annotations

import ctypes
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from .. import _native
from ..backend import FIDELITIES, simulator_path
from .activity import SimActivity
from .replay import Trace

FAULT_SLOTS = {
    "msptiSubscribe": 0,
    "msptiUnsubscribe": 1,
    "msptiEnableCallback": 2,
    "msptiEnableDomain": 3,
    "msptiGetTimestamp": 4,
    "msptiGetVersion": 5,
    "msptiGetResultString": 6,
}
WORKLOADS = {"training": 0, "inference": 1, "graph": 2}
CLOCK_MODES = ("real", "virtual")
ENTER, EXIT = 0, 1


class _WorkloadConfig(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_uint32),
        ("steps", ctypes.c_uint32),
        ("ranks", ctypes.c_uint32),
        ("threads", ctypes.c_uint32),
        ("seed", ctypes.c_uint64),
        ("time_scale", ctypes.c_double),
    ]


@dataclass(frozen=True)
class SimApi:
    """One simulated entry point: a function of a callback id."""

    index: int
    domain: int
    cbid: int
    name_26x: str | None
    name_8x: str | None


@dataclass(frozen=True)
class JobResult:
    """How a job ended: ``done`` of ``total`` (a workload counts each thread's steps, so 300 steps
    on 2 threads is 600; a replay counts events), the simulated calls made, the wall time, and
    whether it was cancelled or interrupted before the end."""

    done: int
    total: int
    calls: int
    wall_s: float
    stopped_early: bool = False
    #: Replay on the real clock: calls left out, by MSPTI function, because they last longer than
    #: the histogram's range (they would have been waited out in real time).
    not_replayed: dict[str, int] = field(default_factory=dict)


# How often a waiting join wakes up: it waits in Python (never blocked in C), so a
# KeyboardInterrupt (Jupyter's stop button) surfaces at once and the job can be cancelled.
POLL_S = 0.02
# In Jupyter a job still running after this many seconds gets a progress bar unless told not to.
AUTO_PROGRESS_S = 1.0


@dataclass(frozen=True)
class NotebookProgress:
    """How a notebook shows a job's progress: ``active()``, whether this process is a notebook's
    kernel now; ``bar(what, total, unit, started)``, a bar not shown yet (:func:`progress_bar`'s
    contract; ImportError: it cannot be drawn here). Registered by the notebook's code, which
    knows the driver, not the reverse."""

    active: Callable[[], bool]
    bar: Callable[[str, int, str, float | None], Any]


_notebook_progress: NotebookProgress | None = None


def register_notebook_progress(progress: NotebookProgress) -> None:
    """Make ``progress`` how jobs show their progress in a notebook (the last one registered wins;
    none registered: a terminal bar everywhere)."""
    global _notebook_progress
    _notebook_progress = progress


def _in_jupyter() -> bool:
    return _notebook_progress is not None and _notebook_progress.active()


class Job:
    """Work running on simulator threads (a workload or a replay).

    Progress bars and ``join(progress=...)`` callbacks count ``unit`` (``steps``, ``events``);
    ``per_unit`` is how many of the simulator's ticks make one (each thread of a workload ticks
    once per step, so a bar says 300/300 steps, not 600/600)."""

    def __init__(self, sim: Simulator, handle: int, what: str, unit: str = "events", per_unit: int = 1):
        self._sim, self.handle, self.what = sim, handle, what
        self.unit, self.per_unit = unit, max(1, per_unit)
        self._t0 = time.perf_counter()
        self._result: JobResult | None = None

    def progress(self) -> tuple[int, int, int]:
        """(ticks done, total ticks, simulated calls made); see :class:`JobResult`."""
        if self._result is not None:
            return self._result.done, self._result.total, self._result.calls
        d, t, c = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64()
        if self._sim.lib.msimJobProgress(self.handle, ctypes.byref(d), ctypes.byref(t), ctypes.byref(c)):
            raise RuntimeError(f"simulator job {self.handle} is unknown")
        return d.value, t.value, c.value

    def units(self) -> tuple[int, int]:
        """(done, total) in :attr:`unit`: what progress bars show."""
        done, total, _ = self.progress()
        return done // self.per_unit, total // self.per_unit

    @property
    def finished(self) -> bool:
        return self._result is not None or bool(self._sim.lib.msimJobFinished(self.handle))

    def cancel(self) -> None:
        """Ask the job's threads to stop at their next step (or event); :meth:`join` waits."""
        if self._result is None:
            self._sim.lib.msimJobCancel(self.handle)

    def join(
        self, progress: Callable[[int, int], None] | bool | None = None, interval: float = 0.2
    ) -> JobResult:
        """Wait for the job, calling ``progress(done, total)`` every ``interval`` seconds
        (``progress=True``: a progress bar, see :func:`progress_bar`; ``None``: a bar in
        Jupyter once the job has run for :data:`AUTO_PROGRESS_S`, none elsewhere).

        Interruptible: on KeyboardInterrupt (or any exception while waiting) the job is cancelled
        and its threads are joined before the exception propagates, so nothing of it keeps
        running into later windows. The KeyboardInterrupt carries one line saying how far the
        job got (``exc.mspti_lens_job``), for ``%%mspti`` to show instead of a traceback."""
        if self._result is not None:
            return self._result
        bar = None
        auto = progress is None and _in_jupyter()
        try:
            # A bar is held here before it is shown: an interrupt while it is being displayed
            # still closes it and puts the interrupted line in its place.
            if progress is True:
                bar = progress_bar(self.what, self.units()[1], self.unit)
                bar.show()
            show = bar.update if bar is not None else progress if callable(progress) else None
            next_show = 0.0
            while not self._sim.lib.msimJobFinished(self.handle):
                if auto and bar is None and time.perf_counter() - self._t0 >= AUTO_PROGRESS_S:
                    bar = progress_bar(self.what, self.units()[1], self.unit, started=self._t0)
                    bar.show()
                    show = bar.update
                if show is not None and time.perf_counter() >= next_show:
                    show(*self.units())
                    next_show = time.perf_counter() + interval
                time.sleep(min(POLL_S, interval))
        except BaseException as e:
            self.stop()
            done, total = self.units()
            if isinstance(e, KeyboardInterrupt):
                e.mspti_lens_job = (  # type: ignore[attr-defined]
                    f"{self.what} interrupted after {done:,} of {total:,} {self.unit}"
                )
                e.mspti_lens_bar = bar  # type: ignore[attr-defined]  # its line can be replaced
            if bar is not None:
                bar.close(done, interrupted=True)
            raise
        result = self._reap()
        if bar is not None:
            bar.close(self.units()[0], interrupted=result.stopped_early)
        elif show is not None:
            show(*self.units())
        return result

    def stop(self) -> JobResult:
        """Cancel the job and wait for its threads (each stops at its next step or event)."""
        if self._result is None:
            self.cancel()
            self._reap(stopped_early=True)
        assert self._result is not None
        return self._result

    def _reap(self, stopped_early: bool = False) -> JobResult:
        """Join the (finished or cancelled) threads and release the job."""
        rc = self._sim.lib.msimJobJoin(self.handle)
        done, total, calls = self.progress()
        self._sim.lib.msimJobRelease(self.handle)
        self._result = JobResult(
            done, total, calls, time.perf_counter() - self._t0, stopped_early or done < total
        )
        if rc == 2:
            raise RuntimeError(f"a simulator thread of {self.what} failed")
        return self._result


class TerminalBar:
    """A one-line progress bar for a terminal (stderr), redrawn in place."""

    WIDTH = 30

    def __init__(self, what: str, total: int, unit: str, stream=None):
        self.what, self.total, self.unit = what, total, unit
        self.stream = stream if stream is not None else sys.stderr
        self._t0 = time.perf_counter()
        self._last = -1

    def _line(self, done: int) -> str:
        frac = min(done / self.total, 1.0) if self.total else 1.0
        fill = round(frac * self.WIDTH)
        bar = "#" * fill + "." * (self.WIDTH - fill)
        t = time.perf_counter() - self._t0
        return f"\r{self.what} [{bar}] {done:,}/{self.total:,} {self.unit} {frac:4.0%} {t:.1f} s"

    def update(self, done: int, total: int | None = None) -> None:
        if done == self._last:
            return
        self._last = done
        self.stream.write(self._line(done))
        self.stream.flush()

    def show(self) -> None:
        """Nothing to show before the first update (the bar is drawn by ``update``)."""

    def close(self, done: int, interrupted: bool = False) -> None:
        self.stream.write(self._line(done) + (" interrupted\n" if interrupted else "\n"))
        self.stream.flush()


def progress_bar(what: str, total: int, unit: str, started: float | None = None):
    """A progress bar with ``show()``, ``update(done)`` and ``close(done, interrupted)``: an
    ipywidgets bar in Jupyter (with rate and time left; ``started``: the job's ``perf_counter``
    start), a terminal bar on stderr elsewhere. Not shown until ``show()``."""
    notebook = _notebook_progress
    try:
        if notebook is not None and notebook.active():
            return notebook.bar(what, total, unit, started)
    except ImportError:  # no IPython / ipywidgets: a terminal it is
        pass
    return TerminalBar(what, total, unit)


def print_progress(what: str, unit: str = "steps") -> Callable[[int, int], None]:
    """A ``progress(done, total)`` callable drawing a terminal bar (kept for scripts)."""
    bar: list[TerminalBar] = []

    def show(done: int, total: int) -> None:
        if not bar:
            bar.append(TerminalBar(what, total, unit))
        bar[0].update(done)
        if done >= total:
            bar[0].close(done)

    return show


class Simulator:
    """Control the simulated libmspti: fidelity, LD_PRELOAD check, clock, faults, and the
    simulated runtime/HCCL calls, workloads and trace replay."""

    def __init__(self, path: str | None = None):
        p = path or str(simulator_path())
        self.path = p
        self.lib = ctypes.CDLL(p)
        L = self.lib
        u32, u64, i32 = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32
        L.msimVersion.restype = u32
        L.msimSetFidelity.argtypes, L.msimSetFidelity.restype = [u32], u32
        L.msimGetFidelity.restype = u32
        L.msimSetPreloadCheck.argtypes = [u32]
        L.msimSetClock.argtypes = [u32]
        L.msimGetClock.restype = u32
        L.msimVirtualSet.argtypes = [u64]
        L.msimVirtualNow.restype = u64
        L.msimSetFault.argtypes, L.msimSetFault.restype = [u32, u32], u32
        L.msimSetCounting.argtypes = [u32]
        L.msimDelivered.argtypes, L.msimDelivered.restype = [u32, u32, u32], u64
        L.msimEnabledMask.argtypes, L.msimEnabledMask.restype = [u32], u64
        L.msimSubscribed.restype = u32
        L.msimApiCount.restype = u32
        L.msimApiInfo.argtypes = [u32] + [ctypes.c_void_p] * 4
        L.msimApiInfo.restype = u32
        L.msimCall.argtypes, L.msimCall.restype = [u32, u64], i32
        L.msimCallMany.argtypes, L.msimCallMany.restype = [u32, u64, u64], i32
        L.msimFire.argtypes, L.msimFire.restype = [u32, u32], i32
        L.msimInject.argtypes = [u32, u32, u32, ctypes.c_void_p, u32]
        L.msimInject.restype = i32
        L.msimWorkloadStart.argtypes, L.msimWorkloadStart.restype = [ctypes.POINTER(_WorkloadConfig)], u64
        L.msimReplayStart.argtypes = [u32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        L.msimReplayStart.restype = u64
        L.msimJobProgress.argtypes = [u64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        L.msimJobProgress.restype = u32
        L.msimJobCancel.argtypes, L.msimJobCancel.restype = [u64], u32
        L.msimJobFinished.argtypes, L.msimJobFinished.restype = [u64], u32
        L.msimJobJoin.argtypes, L.msimJobJoin.restype = [u64], u32
        L.msimJobRelease.argtypes, L.msimJobRelease.restype = [u64], None
        self.activity = SimActivity(self.lib, self.api)

    # -- configuration -------------------------------------------------------------------------
    @property
    def fidelity(self) -> str:
        """``documented`` (fills every field as the seed guide says), ``cann26`` (the default: only
        callbackSite and functionName, the rest garbage, like real MSPTI 26.x) or ``cann8`` (as
        cann26 with CANN 8.x ``rt*`` function names)."""
        return FIDELITIES[self.lib.msimGetFidelity()]

    @fidelity.setter
    def fidelity(self, mode: str) -> None:
        if mode not in FIDELITIES:
            raise ValueError(f"unknown fidelity {mode!r}; valid modes are {', '.join(FIDELITIES)}")
        self.lib.msimSetFidelity(FIDELITIES.index(mode))

    def preload_check(self, on: bool) -> None:
        """Simulate a process started without LD_PRELOAD (off by default): when on and the
        LD_PRELOAD variable, read now, does not name libmspti.so, the 26.x enable calls return 6, as
        MSPTI 26.x does, and in ``cann8`` fidelity they succeed but no callback is ever delivered,
        as CANN 8.x did."""
        self.lib.msimSetPreloadCheck(1 if on else 0)

    def set_clock(self, mode: str) -> None:
        """``real`` (work takes real time; msptiGetTimestamp is CLOCK_REALTIME) or ``virtual`` (a
        per-thread clock that each call advances by exactly its modelled duration)."""
        if mode not in CLOCK_MODES:
            raise ValueError(f"unknown clock mode {mode!r}; valid modes are {', '.join(CLOCK_MODES)}")
        self.lib.msimSetClock(CLOCK_MODES.index(mode))

    @property
    def clock(self) -> str:
        """The clock mode now: ``real`` or ``virtual``."""
        return CLOCK_MODES[self.lib.msimGetClock()]

    def set_fault(self, function: str, code: int) -> None:
        """Make an MSPTI function return ``code`` (0 clears it)."""
        if function not in FAULT_SLOTS:
            raise ValueError(f"unknown function {function!r}; valid ones are {', '.join(FAULT_SLOTS)}")
        self.lib.msimSetFault(FAULT_SLOTS[function], int(code))

    def clear_faults(self) -> None:
        for slot in FAULT_SLOTS.values():
            self.lib.msimSetFault(slot, 0)

    def reset(self) -> None:
        """Defaults: cann26, real clock, no preload check, no faults, counting off, activity reset."""
        self.fidelity = "cann26"
        self.set_clock("real")
        self.preload_check(False)
        self.clear_faults()
        self.counting(False)
        self.activity.reset()

    def counting(self, on: bool) -> None:
        """Count delivered callbacks per (domain, cbid, site); turning it on zeroes the counts."""
        self.lib.msimSetCounting(1 if on else 0)

    def delivered(self, domain: int, cbid: int, site: int = EXIT) -> int:
        return self.lib.msimDelivered(domain, cbid, site)

    def delivered_total(self, site: int = EXIT) -> int:
        return sum(self.delivered(d, c, site) for d in (1, 2) for c in range(64))

    def enabled_mask(self, domain: int) -> int:
        """The library's enable bitmap for a domain (what the toolkit actually enabled)."""
        return self.lib.msimEnabledMask(domain)

    @property
    def subscribed(self) -> bool:
        return bool(self.lib.msimSubscribed())

    # -- simulated runtime ---------------------------------------------------------------------
    @cached_property
    def apis(self) -> tuple[SimApi, ...]:
        out = []
        d, c = ctypes.c_uint32(), ctypes.c_uint32()
        a, b = ctypes.c_char_p(), ctypes.c_char_p()
        for i in range(self.lib.msimApiCount()):
            self.lib.msimApiInfo(i, ctypes.byref(d), ctypes.byref(c), ctypes.byref(a), ctypes.byref(b))
            out.append(
                SimApi(
                    i,
                    d.value,
                    c.value,
                    a.value.decode() if a.value else None,
                    b.value.decode() if b.value else None,
                )
            )
        return tuple(out)

    def api(self, name: str) -> int:
        """The index of a simulated API by its 26.x (or 8.x) function name."""
        for a in self.apis:
            if a.name_26x == name:
                return a.index
        for a in self.apis:
            if a.name_8x == name:
                return a.index
        names = sorted({a.name_26x for a in self.apis if a.name_26x})
        raise ValueError(f"the simulator has no API {name!r}; valid names include {', '.join(names)}")

    def call(self, api: str | int, work_ns: int = 0, count: int = 1) -> None:
        """Call a simulated API ``count`` times, each taking ``work_ns`` (ENTER, work, EXIT)."""
        i = self.api(api) if isinstance(api, str) else int(api)
        if not 0 <= i < len(self.apis):
            raise ValueError(f"API index {i} is outside 0..{len(self.apis) - 1}")
        if work_ns < 0 or count < 0:
            raise ValueError("work_ns and count must be >= 0")
        rc = self.lib.msimCallMany(i, int(work_ns), int(count))
        if rc != 0:
            raise RuntimeError(f"simulated call of API {i} failed ({rc})")

    def fire(self, api: str | int, site: int) -> None:
        """Fire a lone ENTER (0) or EXIT (1) of an API: unbalanced sequences for tests."""
        i = self.api(api) if isinstance(api, str) else int(api)
        self.lib.msimFire(i, site)

    def inject(self, domain: int, cbid: int, site: int, name: bytes | None, garbage: bool = True) -> int:
        """Invoke the subscriber's callback directly, enable bits bypassed (fault injection).
        ``name`` None passes a NULL functionName. Returns 0, or 1 if nobody is subscribed."""
        buf = ctypes.c_char_p(name) if name is not None else None
        ptr = ctypes.cast(buf, ctypes.c_void_p) if buf is not None else None
        return self.lib.msimInject(domain, cbid, site, ptr, 1 if garbage else 0)

    # -- workloads and replay ------------------------------------------------------------------
    def start_workload(
        self,
        kind: str = "training",
        *,
        steps: int = 20,
        ranks: int = 8,
        threads: int = 1,
        seed: int = 0,
        time_scale: float = 1.0,
    ) -> Job:
        """Start a simulated workload on its own threads: ``training`` (forward/backward launches,
        gradient all-reduce on a second thread per training thread, optimizer, sync) or
        ``inference`` (prefill and decode launches, small tensor-parallel all-reduces).

        Its calls take a program's path: the simulator's interposed wrappers, which forward to the
        simulated CANN runtime libraries (the package's own unless ``ASCEND_HOME_PATH`` names a
        tree; docs/simulated_cann.md). A call that fails (no runtime library found: the wrapper
        says so on stderr) fails the job, and joining it raises RuntimeError."""
        if kind not in WORKLOADS:
            raise ValueError(f"unknown workload {kind!r}; valid workloads are {', '.join(WORKLOADS)}")
        for name, v, lo, hi in (
            ("steps", steps, 0, 10**7),
            ("ranks", ranks, 1, 65536),
            ("threads", threads, 1, 256),
        ):
            if not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{name} must be an int in {lo}..{hi}, not {v!r}")
        if not time_scale >= 0:
            raise ValueError(f"time_scale must be >= 0, not {time_scale!r}")
        cfg = _WorkloadConfig(WORKLOADS[kind], steps, ranks, threads, seed & (2**64 - 1), float(time_scale))
        h = self.lib.msimWorkloadStart(ctypes.byref(cfg))
        if h == 0:
            raise ValueError(f"the simulator rejected the workload settings {cfg!r}")
        return Job(self, h, f"{kind} workload", unit="steps", per_unit=threads)

    def run_workload(self, kind: str = "training", *, progress: bool | None = None, **kw) -> JobResult:
        """Run a workload to the end (see :meth:`start_workload`); ``progress=True`` shows a bar
        counting steps (a widget in Jupyter, a terminal bar elsewhere), ``None`` (the default)
        one in Jupyter for workloads longer than about a second, ``False`` none. Interruptible:
        a KeyboardInterrupt stops the workload's threads before it propagates."""
        job = self.start_workload(kind, **kw)
        try:
            return job.join(progress=progress)
        finally:
            job.stop()  # a no-op after a clean join; after an interrupt the threads are gone

    def start_replay(self, threads: Sequence[Sequence[tuple[int, int, int]]]) -> Job:
        """Replay per-thread event lists of (api index, site, t_ns), each sorted in time."""
        lens = [len(t) for t in threads]
        flat = [e for t in threads for e in t]
        n = len(flat)
        if not threads:
            raise ValueError("nothing to replay: no threads")
        L = (ctypes.c_uint64 * len(lens))(*lens)
        api = (ctypes.c_uint32 * n)(*[e[0] for e in flat])
        site = (ctypes.c_uint32 * n)(*[e[1] for e in flat])
        t = (ctypes.c_uint64 * n)(*[e[2] for e in flat])
        h = self.lib.msimReplayStart(len(lens), L, api, site, t)
        if h == 0:
            raise ValueError("the simulator rejected the replay (an unknown API index or site)")
        return Job(self, h, "replay")

    def replay(self, trace, *, progress: bool | None = None) -> JobResult:
        """Replay a :class:`mspti_lens.sim.Trace` (or a path to a Kineto trace) to the end.

        On the real clock a call longer than the histogram's range is not waited out: it is left
        out (the calls inside it are replayed) and counted in ``JobResult.not_replayed``."""
        tr = trace if isinstance(trace, Trace) else Trace.read(trace)
        longest = None if self.clock == "virtual" else _native.RANGE_MAX_NS
        too_long = Counter(c.api for c in tr.calls if longest is not None and c.dur_ns > longest)
        job = self.start_replay(tr.events(self, longest_ns=longest))
        try:
            result = job.join(progress=progress)
        finally:
            job.stop()
        return replace(result, not_replayed=dict(too_long))


# -- command line (python -m mspti_lens demo / replay) ---------------------------------------------
def demo_main(args) -> int:
    """``python -m mspti_lens demo``: a simulated workload, its summary, plots and snapshot."""
    from .. import plots
    from ..session import Session

    sim = Simulator()
    sim.reset()
    print("mspti-lens demo on the bundled SIMULATOR: a stand-in libmspti.so with a simulated ACL runtime")
    print("and HCCL. Every number below is SIMULATED, not measured on an Ascend NPU.\n")
    with Session(library="sim", enable=["runtime", "hccl"]) as session:
        job = sim.start_workload(
            args.workload, steps=args.steps, ranks=args.ranks, threads=args.threads, seed=args.seed
        )
        result = job.join(print_progress(f"{args.workload}, {args.threads} thread(s), {args.ranks} ranks"))
        snap = session.snapshot()
    print(f"\n{result.calls:,} simulated calls in {result.wall_s:.1f} s\n")
    import polars as pl

    with pl.Config(tbl_rows=40, tbl_cols=20, tbl_width_chars=220, tbl_hide_dataframe_shape=True):
        print(snap)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    figures = {
        "distribution.png": plots.distribution(snap),
        "cdf.png": plots.cdf(snap),
        "hccl.png": plots.compare_hccl(snap),
        "launch.png": plots.compare_launch(snap),
    }
    for name, fig in figures.items():
        fig.savefig(out / name, dpi=110)
    snap.save(out / "snapshot.parquet")
    print(f"\nplots: {', '.join(str(out / n) for n in figures)}")
    print(f"snapshot: {out / 'snapshot.parquet'} (mspti_lens.load() reads it back)")
    print("(SIMULATED data)")
    return 0


def replay_main(args) -> int:
    """``python -m mspti_lens replay TRACE``: a Kineto trace replayed on the simulator."""
    from ..session import Session

    trace = Trace.read(args.trace)
    sim = Simulator()
    sim.reset()
    if args.virtual:
        sim.set_clock("virtual")
    try:
        with Session(library="sim", clock="mspti" if args.virtual else "auto") as session:
            result = sim.replay(trace, progress=True)
            snap = session.snapshot()
    finally:
        sim.set_clock("real")
    print(snap)
    for line in replay_report(trace, result):
        print(line)
    if args.save:
        snap.save(args.save)
    return 0


def _top(counts: Counter | dict, n: int = 8) -> str:
    """The ``n`` largest entries, then how many more kinds and events there are."""
    c = Counter(counts)
    shown = c.most_common(n)
    text = ", ".join(f"{k} x{v}" for k, v in shown)
    rest = len(c) - len(shown)
    if rest:
        hidden = sum(c.values()) - sum(v for _, v in shown)
        text += f", and {rest} more kind{'s' if rest > 1 else ''} ({hidden} events)"
    return text


def replay_report(trace: Trace, result: JobResult) -> list[str]:
    """What replay left out, each reason on its own line (none when everything was replayed)."""
    out = []
    if trace.skipped:
        out.append(f"skipped (not replayed; {sum(trace.skipped.values())} events): {_top(trace.skipped)}")
    if trace.invalid:
        n = sum(trace.invalid.values())
        out.append(f"bad input (ts/dur not a time in µs; {n} events): {_top(trace.invalid)}")
    if result.not_replayed:
        out.append(
            "not replayed in real time (longer than the histogram's range; --virtual replays them): "
            + _top(result.not_replayed)
        )
    return out
