"""The flight recorder: while a run is watched, each rank keeps its last seconds in memory, in
fine windows, and writes them into the run directory when a capture asks, so that a capture
starts some seconds before the rule fired, at a second's resolution.

How a rank knows it is watched: the run's ``control/watched.json`` (:data:`WATCHED_FILE`), which a
watcher writes (watch/capture.py) and touches while it watches: its modification time is the
watcher's heartbeat. It says how many fine windows to keep and how fine (:func:`watched_marker`).
Each rank looks at it every :data:`~mspti_lens.runs.control.HEARTBEAT_S` seconds on the control
thread (a stat through the checked control folder; the file is opened and read only when it is
not the one read last time: a marker is written whole, then only touched) and counts the run
watched while the heartbeat is younger than :data:`~mspti_lens.runs.control.LOST_AFTER_S`: a
watcher that is gone stops the recorder.

How it stays cheap and exact: the writer's Session is wrapped in a :class:`Tap` (everything else
passes through to the Session). While watched, every ``interval_s`` the control thread cuts the
calls since the last fine window out of the Session's window (``Session.cut_calls()``): the
callback histograms alone, each key's non-empty buckets taken straight from the threads' banks
(a ``NativeCut``: a few buckets where a dense histogram has 36 KiB), kept as a :class:`Fine` (the
cut, its times and moment reading; a Snapshot only when it is written). The Session's
window itself goes on: its start, its activity records (device records settle once per window on
disk, not once a second: a settle waits for the records still on their way, 0.2 s of wall time
and about 1 ms of CPU a second here), its self cost. The writer's next window on disk is the
Session's whole window with the cut calls added back (``Snapshot.with_calls_of``: the cuts'
buckets add, the slowest calls merge, natively), so every call is still in exactly one window on disk. The
ring holds the last ``windows`` fine windows (the same objects, no copy), and they tile time: what
the writer's own reset took since the last fine window begins the next one. Not watched, the Tap
hands ``reset()`` on and keeps nothing.

What a fine window holds: the calls' histograms, counters and slowest calls of its second. Not
its device records: those stay in the window on disk they belong to, and a capture links the
windows on disk before the trigger, with their device records, into its ``before/`` as well
(watch/capture.py).

The dump: a ``start`` command with ``recorder: true`` (a capture's, runs/control.py) makes each
rank it names write its ring, oldest first, into its rank folder as
``flight-GGGGGG-NN-pidP.parquet`` (G: the command's generation; runs/runfiles.py), before the
command is applied; the capture links them into its ``before/``. A rank whose windows on disk
are as fine as the recorder's keeps no ring: its windows are the seconds before.

A rank serving ``/metrics`` (``record --prometheus``) keeps one as well: its server is given
:meth:`FlightRecorder.window_so_far` (the pending fine windows merged with the Session's window so
far), so a scrape sees the writer's whole window, as without the recorder, not the last fine one.

Cost (bench/watch.py's cost rounds, a simulated 4-rank job, each rank's own count): about
0.15 ms of CPU per second watched (0.146 to 0.164), against 0.24 to 0.27 ms when a fine window was a
dense native cut (36 KiB per key allocated, copied and merged every second) and 1.1 to 1.3 ms when
it was a whole Session window: 0.12 to 0.14 % of the rank process's CPU recorded without rules, and
0.22 to 0.25 % of its workload thread alone, under the goal of 0.5 % (BENCHMARKS.md, "Watching a
job"). Most of what is left is the epoch's close in each cut (the membarrier that keeps the
callback's own fence cheap) and the Python around it. Memory is the ring's cuts plus the pending
one: a few buckets per key each (about 13 KiB a fine window of 21 keys).
The recorder counts the CPU of all its work (its thread clock around each look, fine window, merge
and dump), and the process file says it (``flight.cpu_s``): being watched is measured where it
runs, not guessed.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from . import runfiles

WATCHED_FILE = "watched.json"  # in the run's control/ folder
FLIGHT_NAME = re.compile(r"^flight-(\d{6})-(\d{2})-pid(\d+)\.parquet$")
DEFAULT_WINDOWS = 10  # fine windows kept per rank
DEFAULT_INTERVAL_S = 1.0  # their length
MAX_WINDOWS = 99  # the file name's two digits; more is not a flight recorder's job


def flight_name(generation: int, index: int, pid: int) -> str:
    return f"flight-{generation:06d}-{index:02d}-pid{pid}.parquet"


def watched_marker(windows: int = DEFAULT_WINDOWS, interval_s: float = DEFAULT_INTERVAL_S) -> dict[str, Any]:
    """What a watcher writes to ``control/watched.json`` (ValueError in one line if out of bounds)."""
    from .control import check_interval

    if isinstance(windows, bool) or not isinstance(windows, int) or not 1 <= windows <= MAX_WINDOWS:
        raise ValueError(
            f"flight recorder windows must be a whole number from 1 to {MAX_WINDOWS}, not {windows!r}"
        )
    return {"recorder": {"windows": windows, "interval_s": check_interval(interval_s)}}


def read_marker(data: Any) -> tuple[int, float] | None:
    """(windows, interval_s) from a marker's content, or None for one that is not valid."""
    try:
        rec = watched_marker(data["recorder"]["windows"], data["recorder"]["interval_s"])["recorder"]
        return rec["windows"], rec["interval_s"]
    except (KeyError, TypeError, ValueError):
        return None


class Fine:
    """One fine window in the ring: its calls (a NativeSnapshot), its times (wall clock) and the
    session's moment reading when it was cut; a :class:`Snapshot` only when written."""

    __slots__ = ("native", "start", "end", "moment", "facts")

    def __init__(
        self, native: Any, start: float, end: float, moment: tuple[float, ...], facts: dict[str, Any]
    ):
        self.native, self.start, self.end, self.moment, self.facts = native, start, end, moment, facts

    def snapshot(self, **facts: Any) -> Any:
        """The fine window as a Snapshot: its session's facts, its times and moment, ``facts``."""
        from .. import _native
        from ..snapshot import Snapshot

        meta = {**self.facts, **facts, "window_start": self.start, "window_end": self.end}
        meta["moments"] = {str(self.facts.get("source")): list(self.moment)}
        # A cut (or, for the fine window after a writer's reset, that window with the cut added).
        native = self.native.snapshot() if isinstance(self.native, _native.NativeCut) else self.native
        return Snapshot(native, meta)


class Tap:
    """A Session as the writer sees it: ``reset()`` hands over the Session's window with the
    calls of the fine windows cut out of it since the writer's last one added back; anything
    else is the Session's.

    A fine window is a cut of the callback histograms alone (the native ``reset()``, under the
    Session's lock): the Session's window itself (its start, activity records, self cost) goes on
    until the writer's reset, so the window on disk is the Session's whole window, settled and
    measured once, with every call in it exactly once."""

    def __init__(self, session: Any):
        self.session = session
        # The fine windows not yet in a window on disk, merged as they come: one NativeSnapshot
        # however long the run's interval is.
        self._pending: Any = None
        # What the writer's reset took since the last fine window: on disk already, and the start
        # of the next fine window, so that the fine windows tile time with no gap at the writer's
        # windows' ends.
        self._tail: Any = None
        # The facts every fine window of this Session carries (backend, clock, session id).
        self.facts = session.window_facts()
        self._cut_at = float(self.facts["window_start"])  # the fine window's start
        self._lock = threading.Lock()  # the writer's reset and the control thread's fine tick
        self.merge_ns = 0  # the writer thread's CPU merging the fine windows into its windows

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)

    def reset(self) -> Any:
        from .. import self_cost

        with self._lock:
            pending, self._pending = self._pending, None
            if pending is not None:  # the cut calls' drops join the process's, as a reset's do
                self_cost.note_closed_window(self_cost.drops_of(pending.counters()), None)
            last = self.session.reset()
            # Fine windows are being taken: the next one starts where the previous one ended.
            self._tail = last._native if pending is not None else None
        if pending is None:
            return last
        began = time.thread_time_ns()
        merged = last.with_calls_of(pending)
        self.merge_ns += time.thread_time_ns() - began  # only the writer's thread adds here
        return merged

    def so_far(self) -> Any:
        """The writer's window so far: the Session's window with the pending fine windows' calls."""
        with self._lock:
            now, pending = self.session.snapshot(), self._pending
        return now if pending is None else now.with_calls_of(pending)

    def fine(self) -> Fine:
        """Cut the calls since the last fine window out of the Session's window (they go into the
        writer's next window as well); the fine window since the last one (with what a writer's
        reset took meanwhile)."""
        from ..snapshot import MOMENT_COUNTERS

        with self._lock:
            cut = self.session.cut_calls()
            start, end = self._cut_at, time.time()
            self._cut_at = end
            self._pending = cut if self._pending is None else self._pending.merge(cut)
            tail, self._tail = self._tail, None
        # The moment's reading is the cut's own (a merge keeps the later's).
        moment = (end, *cut.counters_of(list(MOMENT_COUNTERS)))
        return Fine(cut if tail is None else tail.with_cut(cut), start, end, moment, self.facts)


class FlightRecorder:
    """One rank's flight recorder (see the module's docstring). A :class:`Tap` is what the
    writer's Session becomes on its first fine window; ``tick()`` runs on the control thread at
    every poll; ``after(apply)``, ``after_tick(tick)`` and ``state_of(state)`` wrap the
    recorder's own (runs/hook.py)."""

    def __init__(self, run: str | os.PathLike, writer: Any, *, server: Any = None):
        from .control import CONTROL_DIR

        self.writer = writer
        # A rank serving /metrics (record --prometheus): a scrape reads the writer's window so
        # far, fine windows included (a fine reset alone would cut what it sees).
        self._served: Any = None
        if server is not None:
            self._served = server.source
            server.serve_from(self.window_so_far)
        self.control = runfiles.open_run_folder(run, writer=True).child(CONTROL_DIR)
        self.windows = 0  # kept while watched (0: not watched)
        self.interval_s = DEFAULT_INTERVAL_S
        self.ring: deque[Any] = deque()
        self._looked = 0.0  # when the marker was last looked at (time.monotonic)
        # The marker file last read, (device, inode, size), and what it said.
        self._marker: tuple[tuple[int, int, int], tuple[int, float] | None] | None = None
        self._next = 0.0  # the next fine window is due (time.monotonic)
        self.taken = 0  # fine windows taken, ever
        self.dumped: list[str] = []  # the last dump's file names
        self.cpu_ns = 0  # this recorder's CPU on the control thread (looks, fine windows, dumps)
        self._tap: Tap | None = None  # the current on period's
        self._taps_ns = 0  # the writer thread's merges in earlier on periods' Taps

    def cpu_s(self) -> float:
        """All the CPU the recorder has cost this process: its own work and the writer's merges."""
        tap = self._tap.merge_ns if self._tap is not None else 0
        return (self.cpu_ns + self._taps_ns + tap) / 1e9

    def window_so_far(self) -> Any:
        """What /metrics serves: the writer's window so far (its Session's, when it has no fine
        windows pending; the Session the server was given, when the writer is off)."""
        session = self.writer.session
        if isinstance(session, Tap):
            return session.so_far()
        if session is not None:
            return session.snapshot()
        return self._served()

    # -- watched or not --------------------------------------------------------------------------
    def look(self, now: float) -> None:
        """Read the marker (every HEARTBEAT_S): watched, and how, or not."""
        from .control import HEARTBEAT_S

        if now - self._looked < HEARTBEAT_S:
            return
        self._looked = now
        began = time.thread_time_ns()
        try:
            self._look()
        finally:
            self.cpu_ns += time.thread_time_ns() - began

    def _look(self) -> None:
        from .control import LOST_AFTER_S

        wanted = None
        try:
            # The marker is written whole (a new file renamed over it) and then only touched, so
            # the same file (device, inode) of the same size says what it said when it was read:
            # its stat alone (through the checked folder, no symlink followed) gives the heartbeat.
            st = self.control.stat(WATCHED_FILE)
            same = (st.st_dev, st.st_ino, st.st_size)
            if self._marker is not None and self._marker[0] == same and stat.S_ISREG(st.st_mode):
                if self.control.trust.why_not(st, WATCHED_FILE) is not None:
                    raise runfiles.UntrustedError(WATCHED_FILE)
                beat, said = st.st_mtime, self._marker[1]
            else:
                self._marker = None
                with self.control.open(WATCHED_FILE) as f:
                    st = os.fstat(f.fileno())
                    said = read_marker(json.loads(f.read(1 << 12)))
                self._marker = ((st.st_dev, st.st_ino, st.st_size), said)
                beat = st.st_mtime
            if time.time() - beat < LOST_AFTER_S:
                wanted = said
        except (OSError, ValueError):
            wanted = None  # none, being replaced, or not the run's own: not watched
        if wanted is None:
            self.windows = 0
            self.ring.clear()
            return
        self.windows, self.interval_s = wanted
        while len(self.ring) > self.windows:
            self.ring.popleft()

    def tick(self) -> None:
        now = time.monotonic()
        self.look(now)
        if not self.windows or now < self._next or self.writer.interval <= self.interval_s:
            return  # not watched, not yet, or the windows on disk are as fine already
        self._next = now + self.interval_s
        self.take()

    def take(self) -> None:
        """One fine window into the ring (nothing while the writer is off)."""
        began = time.thread_time_ns()
        try:
            self._take()
        finally:
            self.cpu_ns += time.thread_time_ns() - began

    def _take(self) -> None:
        if self.writer.session is None:
            return
        if not isinstance(self.writer.session, Tap):
            self.writer.wrap_session(Tap)  # a new on period's Session, wrapped on its first take
        session = self.writer.session
        if not isinstance(session, Tap):
            return  # turned off meanwhile
        if session is not self._tap:
            if self._tap is not None:
                self._taps_ns += self._tap.merge_ns
            self._tap = session
        try:
            fine = session.fine()
        except Exception:  # noqa: BLE001 - closed meanwhile (turned off): nothing to keep
            return
        self.ring.append(fine)
        self.taken += 1
        while len(self.ring) > self.windows:
            self.ring.popleft()

    # -- the dump ----------------------------------------------------------------------------------
    def dump(self, generation: int) -> list[str]:
        """Write the ring (and the window in progress) into the rank's folder, oldest first; the
        names written (none when not watched, or idle: its windows on disk are as fine)."""
        if not self.windows or self.writer.interval <= self.interval_s:
            return []
        self.take()
        began = time.thread_time_ns()
        try:
            return self._dump(generation)
        finally:
            self.cpu_ns += time.thread_time_ns() - began

    def _dump(self, generation: int) -> list[str]:
        w, names = self.writer, []
        facts = {"host": w.host, "rank": w.rank, "pid": os.getpid(), "flight": True, "generation": generation}
        for i, fine in enumerate(list(self.ring)):
            name = flight_name(generation, i, os.getpid())
            kept = fine.snapshot(**facts, interval_s=self.interval_s)
            w.folder.make()
            w.folder.write(name, lambda f, kept=kept: kept.save(f))
            names.append(name)
        self.dumped = names
        return names

    def after(self, apply: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
        """``apply``, preceded by the dump a capture's command asks for."""

        def applied(command: dict[str, Any]) -> None:
            if command.get("recorder"):
                try:
                    self.dump(int(command["generation"]))
                except Exception as e:  # noqa: BLE001 - the capture goes on without the seconds before
                    print(f"mspti-lens: could not write the flight recorder: {e}", file=sys.stderr)
            apply(command)

        return applied

    def after_tick(self, tick: Callable[[], None]) -> Callable[[], None]:
        """``tick`` (the recorder's clock), then this one's."""

        def ticked() -> None:
            tick()
            self.tick()

        return ticked

    def state_of(self, state: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
        """``state``, with the flight recorder's (the process file says it)."""

        def with_flight() -> dict[str, Any]:
            return {
                **state(),
                "flight": {
                    "windows": self.windows,
                    "kept": len(self.ring),
                    "interval_s": self.interval_s,
                    "taken": self.taken,
                    "cpu_s": self.cpu_s(),
                },
            }

        return with_flight
