"""`Session`: one MSPTI subscription whose callbacks become latency histograms."""

from __future__ import annotations

import math
import os
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Iterable

import polars as pl

from . import _native, self_cost
from .activity import (
    ACTIVITY_POOL_CAP,
    DEFAULT_ACTIVITY_BUFFERS,
    DEFAULT_DEVICE_EVENTS,
    JOIN_SAMPLE,
    ActivityData,
    check_device_events,
    check_join_sample,
    check_kinds,
)
from .backend import BackendInfo, info_of, load_library
from .catalog import DOMAIN_NAMES, Target, callback, resolve
from .errors import NotPreloadedWarning, SessionError, SubscriberBusyError
from .snapshot import Snapshot, make_meta

#: The clocks a Session takes, as the native session names them (rust/lens/src/py/session.rs).
CLOCKS: tuple[str, ...] = tuple(_native.NativeSession.CLOCKS)
#: The latest Session (MSPTI allows one per process): what mspti_lens.serve() exposes by default.
_active: weakref.ref[Session] | None = None


def _check_buffers(buffers: object) -> tuple[int, int, int | None]:
    """``activity_buffers`` as (bytes per buffer, buffers at the start[, memory cap in bytes]);
    the collector checks their limits, naming them."""
    if (
        isinstance(buffers, (tuple, list))
        and len(buffers) in (2, 3)
        and all(isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 63 for v in buffers)
    ):
        return buffers[0], buffers[1], (buffers[2] if len(buffers) == 3 else None)
    raise ValueError(
        "activity_buffers takes (bytes per buffer, buffers at the start[, memory cap in bytes]), "
        f"positive ints such as {tuple(DEFAULT_ACTIVITY_BUFFERS)}, not {buffers!r}"
    )


def _holder() -> Session | None:
    """The latest Session, if it is still alive (the one holding MSPTI's slot when one does)."""
    return _active() if _active is not None else None


def _slowest_choice(slowest: object, exemplars: object) -> bool:
    """Session(slowest=...), given by its name or by its old one (``exemplars=``)."""
    for name, v in (("slowest", slowest), ("exemplars", exemplars)):
        if not isinstance(v, bool) and (name == "slowest" or v is not None):
            raise ValueError(f"{name} is True (keep the slowest calls) or False, not {v!r}")
    if isinstance(exemplars, bool):
        if slowest is False and exemplars:
            raise ValueError(
                "slowest=False and exemplars=True disagree: exemplars is slowest's old name; give one"
            )
        return exemplars
    return bool(slowest)


class Session:
    """Subscribe to MSPTI and record how long every enabled Runtime/HCCL API call takes.

    >>> with Session(library="sim", enable=["LAUNCH", "hccl"]) as s:   # doctest: +SKIP
    ...     run_my_step()
    ...     print(s.snapshot().summary())

    ``library`` is a path to ``libmspti.so``, ``"sim"`` for the bundled simulator, or None for the
    discovery order of :func:`mspti_lens.backend_info`. ``enable`` names what to trace
    (domains, callbacks or function names; see :mod:`mspti_lens.catalog`). ``clock`` is
    ``"auto"`` (the TSC where the kernel trusts it, else CLOCK_MONOTONIC), ``"tsc"``,
    ``"monotonic"`` or ``"mspti"`` (the library's ``msptiGetTimestamp``, MSPTI's own clock).

    ``interval`` (seconds) keeps latency over time: one histogram per interval in a bounded ring,
    read with :meth:`timeline`. ``slowest`` (on by default) keeps the K=8 slowest calls per
    thread, API and window (``Snapshot.slowest()``); ``slowest=False`` saves the one compare
    per call they cost (``exemplars=`` is its old name, still accepted).

    ``join_sample`` is the fraction of time the launch join (KERNEL with LAUNCH traced, on MSPTI
    26.x's RUNTIME_API records) records launches: in windows at random offsets of every 50 ms, so
    the library writes a RUNTIME_API record for about that share of launches only.
    ``Snapshot.launches()`` reports the measured fraction and each row's rank error; ``1.0`` joins
    every launch (exact), as does asking for the ``runtime_api`` kind yourself.

    ``device_events`` caps the device event log (``Snapshot.device_events()``: timed KERNEL and
    collective records) per window; 0 turns it off; records past the cap are counted as
    ``device_events_dropped`` in the snapshot's activity counters.

    One Session may be active per process (MSPTI has one subscriber slot). Entering the ``with``
    block starts recording; leaving it unsubscribes. ``enable``/``disable`` work at any time,
    also from another thread while calls are being recorded.
    """

    def __init__(
        self,
        library: str | os.PathLike | None = None,
        *,
        enable: Iterable[Target] | str = ("runtime", "hccl"),
        clock: str = "auto",
        interval: float | None = None,
        activity: Iterable[str] | str = (),
        mark_launches: int | None = None,
        activity_buffers: tuple[int, ...] = DEFAULT_ACTIVITY_BUFFERS,
        device_events: int = DEFAULT_DEVICE_EVENTS,
        slowest: bool = True,
        exemplars: bool | None = None,
        join_sample: float = JOIN_SAMPLE,
    ):
        if clock not in CLOCKS:
            raise ValueError(f"unknown clock {clock!r}; valid clocks are {', '.join(CLOCKS)}")
        # Latency over time, one histogram per `interval` seconds (see timeline()).
        if interval is not None and (
            isinstance(interval, bool)
            or not isinstance(interval, (int, float))
            or not (math.isfinite(interval) and interval >= 0.001)
        ):
            raise ValueError(
                f"interval must be a finite number of seconds >= 0.001 (or None: no timeline), "
                f"not {interval!r}"
            )
        self._interval = None if interval is None else float(interval)
        slowest = _slowest_choice(slowest, exemplars)
        self._timeline_on = False
        # A lone string is one target; any other iterable is a list of targets, so a single
        # (domain, id) pair is written enable=[("runtime", 10)].
        targets: list[Target]
        if isinstance(enable, str):
            targets = [enable]
        elif isinstance(enable, Iterable) and not isinstance(enable, (bytes, dict)):
            targets = list(enable)
        else:
            raise ValueError(
                f"enable takes a list of targets, not {enable!r}: domains ('runtime', 'hccl'), callbacks "
                "('LAUNCH', 'MSPTI_CBID_RUNTIME_LAUNCH', 'aclrtLaunchKernel') or (domain, id) pairs; "
                "pass [] to enable nothing"
            )
        resolved = [resolve(t) for t in targets]  # validate before subscribing
        kinds = check_kinds(activity)
        self._device_events = check_device_events(device_events)
        self._join_sample = check_join_sample(join_sample)
        if mark_launches is not None:
            # The guide's scenario 2: LAUNCH only, the stream as subscription data, MARKER and KERNEL.
            if not isinstance(mark_launches, int) or isinstance(mark_launches, bool) or mark_launches < 0:
                raise ValueError(f"mark_launches takes a stream handle (an int), not {mark_launches!r}")
            resolved = [resolve("LAUNCH")]
            kinds = sorted(set(kinds) | {"marker", "kernel"})
        size, count, cap = _check_buffers(activity_buffers)
        self._lib = load_library(library)
        self.backend: BackendInfo = info_of(self._lib)
        self._clock = clock
        # Names this session's windows, so that merging them keeps its latest moment counters.
        self._source = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._lock = threading.Lock()
        self._window_start = time.time()
        self._preload_warned = False
        self._final: Snapshot | None = None
        self._activity = None
        # Who holds this session and how its user frees the slot, when that is not session.close()
        # (the magics' session: the user has no such object): (holder, what to do), one line each.
        self.close_hint: tuple[str, str] | None = None
        # The activity pool's most buffers, for its pressure (self_cost.py).
        self._pool_buffers = max(1, (cap or ACTIVITY_POOL_CAP) // size)
        try:
            self._native = _native.NativeSession(self._lib, mark_launches or 0, slowest)
            self_cost.note_subscribed()
        except SubscriberBusyError as e:
            self_cost.note_subscriber_busy(str(e))
            raise
        except SessionError:
            holder = _holder()
            if holder is not None and not holder.closed and holder.close_hint:
                raise SessionError(
                    f"{holder.close_hint[0]} is already active in this process (MSPTI has one subscriber "
                    f"slot); {holder.close_hint[1]} before starting a new one"
                ) from None
            raise
        try:
            if kinds or mark_launches is not None:
                self._activity = _native.NativeActivity(
                    self._native,
                    buffer_size=size,
                    buffers=count,
                    pool_cap=cap,
                    mark_stream=mark_launches,
                    device_events=self._device_events,
                    join_sample=self._join_sample,
                )
                self._activity.enable(kinds)
            for d, c in resolved:
                self._apply(d, c, True)
        except BaseException:
            # MSPTI has one subscriber slot: give it back now, not when the exception (and
            # this half-made Session with it) is freed; IPython keeps the last one alive.
            self._release()
            raise
        global _active
        _active = weakref.ref(self)
        self_cost.started()

    # -- what is traced ------------------------------------------------------------------------
    def _apply(self, domain: int, cbid: int | None, on: bool) -> None:
        if cbid is None:
            self._native.set_domain(domain, on)
        else:
            self._native.set_callback(domain, cbid, on)

    def enable(self, *what: Target) -> Session:
        """Trace these domains or callbacks (at once if running). Returns self."""
        for d, c in [resolve(w) for w in what]:
            self._apply(d, c, True)
        return self

    def disable(self, *what: Target) -> Session:
        """Stop tracing these domains or callbacks (at once if running). Returns self."""
        for d, c in [resolve(w) for w in what]:
            self._apply(d, c, False)
        return self

    def enable_activity(self, *kinds: str) -> Session:
        """Collect these activity kinds too (at once if running). Returns self."""
        names = check_kinds(list(kinds))
        if self._activity is None:
            self._activity = _native.NativeActivity(
                self._native, device_events=self._device_events, join_sample=self._join_sample
            )
        self._activity.enable(names)
        return self

    def disable_activity(self, *kinds: str) -> Session:
        """Stop collecting these activity kinds (what was recorded is kept). Returns self."""
        names = check_kinds(list(kinds))
        if self._activity is not None:
            self._activity.disable(names)
        return self

    def flush_activity(self, settle: bool = True) -> Session:
        """Hand the activity records MSPTI still holds to the collector now, so they land in the
        current window (MSPTI delivers a buffer only when it is full or flushed). ``settle`` also
        waits for device records that trail the flush, on evidence: while launches seen under
        LAUNCH have not had their kernel record, or the library (the simulator) says it holds
        device records, and until two polls in a row bring nothing; at most
        ``activity.SETTLE_TIMEOUT_S`` seconds (2; ``session._activity.settle_timeout`` changes it).
        A wait that ends at its bound counts ``settle_timeouts`` and stops waiting for those
        launches, which stay counted as ``launches_pending`` (they join if their kernels come
        later). Snapshots, ``stop()`` and ``close()`` settle the same way. Nothing to do without
        activity kinds. Returns self."""
        if self._activity is not None:
            self._activity.flush(bool(settle))
        return self

    @property
    def activity(self) -> list[str]:
        """The activity kinds asked for."""
        return list(self._activity.wanted) if self._activity is not None else []

    @property
    def join_sample(self) -> float:
        """The fraction of time the launch join records launches (1.0: every launch)."""
        return self._join_sample

    @property
    def join(self) -> str:
        """How launches are joined to kernels: runtime_api (", sampled" below ``join_sample=1.0``),
        external_correlation, or why not."""
        return self._activity.join if self._activity is not None else "off (no activity kinds)"

    @property
    def enabled(self) -> list[str]:
        """The enabled callbacks by enum name."""
        out = []
        for d in DOMAIN_NAMES:
            mask = self._native.wanted(d)
            for cbid in range(1, 64):
                if mask >> cbid & 1:
                    cb = callback(d, cbid)
                    out.append(cb.enum if cb else f"({d}, {cbid})")
        return out

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> Session:
        """Begin (or resume) recording. Returns self."""
        self._native.start(self._clock)
        if self._interval is not None and not self._timeline_on:
            _native.timeline_start(self._interval)
            self._timeline_on = True
        b = self.backend
        if not self._preload_warned and not b.simulated and not b.preloaded and b.origin != "preloaded":
            self._preload_warned = True
            warnings.warn(NotPreloadedWarning(b.preload_hint), stacklevel=2)
        return self

    def stop(self) -> Session:
        """Stop recording and disable the callbacks in MSPTI; data is kept. Returns self."""
        self._native.stop()
        return self

    def close(self) -> None:
        """Stop and unsubscribe. Idempotent. The last window stays readable: ``snapshot()`` on a
        closed session returns it, so leaving a ``with`` block loses nothing."""
        with self._lock:
            if self._timeline_on:  # the last, partial interval, then no more ticks
                _native.timeline_tick()
                _native.timeline_stop()
                self._timeline_on = False
            if self._final is None and not self._native.closed:
                try:
                    self._final = self._window(self._native.snapshot(), self._window_start)
                except SessionError:
                    pass  # a forked child: nothing of its own to keep
            self._native.close()

    def __enter__(self) -> Session:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _release(self) -> None:
        """Close the activity collector and the subscription, best effort (a failed constructor)."""
        for part in (self._activity, self._native):
            try:
                if part is not None:
                    part.close()
            except Exception:  # noqa: BLE001, S110 - the constructor's own error is the one to raise
                pass

    def __del__(self) -> None:
        try:
            self._native.close()
        except Exception:  # nothing can be reported from a finaliser
            pass

    @property
    def running(self) -> bool:
        return self._native.running

    @property
    def interval(self) -> float | None:
        """Seconds per timeline interval (``Session(interval=...)``), None without a timeline."""
        return self._interval

    @property
    def closed(self) -> bool:
        return self._native.closed

    @property
    def clock(self) -> str:
        """The clock of the current (or last) recording: tsc, monotonic or mspti."""
        return self._native.clock

    # -- data ----------------------------------------------------------------------------------
    def _meta(self, start: float) -> dict:
        return make_meta(
            self.backend.label,
            self.backend.simulated,
            self._native.clock,
            start,
            library=self.backend.path,
            fidelity=self.backend.fidelity,
            source=self._source,
        )

    def _window(
        self, native: _native.NativeSnapshot, start: float, end: float | None = None, reset: bool = False
    ) -> Snapshot:
        """The window of ``native``, made complete at once: its metadata (ending now, or at
        ``end``), the timeline when the session keeps one, and the activity data with how it was
        joined and put on the wall clock."""
        meta = self._meta(start)
        if end is not None:
            meta["window_end"] = end
        timeline = self.timeline() if self._interval is not None else None
        data = None
        if self._activity is not None:
            data = ActivityData(self._activity.snapshot(reset))
            meta["join"] = data.info["join"]
            meta["clock_bridge"] = data.info["clock_bridge"]
        meta["self_cost"] = self._self_cost(native.counters(), data, closing=reset)
        return Snapshot(native, meta, activity=data, timeline=timeline)

    def _self_cost(self, counters: dict, data: ActivityData | None, closing: bool) -> dict:
        """The process's self cost (self_cost.py) with this window's drops and pool pressure;
        a window being closed adds them to the process's totals."""
        device = data.counters if data is not None else {}
        drops = self_cost.drops_of({**counters, **device})
        pressure = device["pool_peak_in_use"] / self._pool_buffers if data is not None else None
        reports = bool(device.get("library_reports_drops")) if data is not None else None
        if closing:
            self_cost.note_closed_window(drops, pressure)
            return self_cost.measure(library_reports_drops=reports)
        return self_cost.measure(drops, pressure, reports)

    def snapshot(self) -> Snapshot:
        """The current window, merged over every thread, while recording goes on (after close(),
        the last window)."""
        with self._lock:
            if self._native.closed and self._final is not None:
                return self._final
            return self._window(self._native.snapshot(), self._window_start)

    def reset(self) -> Snapshot:
        """Start a new window without unsubscribing; returns the window just closed (nothing is
        lost: every call is in exactly one of the two)."""
        with self._lock:
            # One reading ends the closed window and starts the new one, so windows tile time.
            now = time.time()
            start, self._window_start = self._window_start, now
            return self._window(self._native.reset(), start, end=now, reset=True)

    def cut_calls(self) -> _native.NativeCut:
        """Cut the calls since the last ``reset()`` or cut out of the current window and return
        them (a ``NativeCut``: per API, the values of its non-empty buckets, the counters' change
        and the slowest calls; ``.snapshot()`` makes them a NativeSnapshot). The window itself goes
        on (its start, activity records, self cost), and its next ``reset()`` or ``snapshot()``
        no longer holds the calls cut: whoever cuts adds them back
        (``Snapshot.with_calls_of``), as a flight recorder does with its fine windows
        (runs/flight_recorder.py). Every call is in exactly one cut or window, whole."""
        with self._lock:
            return self._native.cut()

    def window_facts(self) -> dict:
        """The facts of the current window's metadata known at its start (backend, clock, source,
        ``window_start``): what a window cut out of it carries."""
        with self._lock:
            return self._meta(self._window_start)

    def timeline(self) -> pl.DataFrame:
        """Latency over time (``Session(interval=...)``): per interval and API, num_calls, p50_ns,
        p99_ns; older intervals are merged into longer ones, so memory stays bounded."""
        from .timeline import empty_timeline, timeline_frame

        if self._interval is None:
            return empty_timeline()
        return timeline_frame(self.backend.simulated)

    def status(self) -> dict:
        """State at a glance: backend, running, clock, enabled callbacks, counters of the window."""
        snap = self.snapshot()
        return {
            "backend": self.backend.label,
            "library": self.backend.path,
            "running": self.running,
            "clock": self.clock,
            "enabled": self.enabled,
            "calls": snap.total_calls,
            **snap.counters,
            **_native.health(),
            "self_cost": snap.meta.get("self_cost") or self_cost.measure(),
        }

    def __repr__(self) -> str:
        state = "closed" if self.closed else "running" if self.running else "stopped"
        return f"<mspti_lens.Session {state} on {self.backend.label} ({self.backend.path})>"
