"""Each recorded process writes its windows to ``DIR/host=H/rank=R/window-NNNNNN-pidP.parquet``.

A window is one :class:`~mspti_lens.Snapshot` (its own file format, :meth:`Snapshot.save`),
written to a temporary name and renamed, so a reader sees whole files or none. A window is
written every ``interval`` seconds and at exit (atexit, SIGTERM; SIGINT ends in atexit), the last
one marked ``final``; a process killed with -9 loses at most its last interval and its rank reads
as incomplete.

Beside each window, ``events-NNNNNN-pidP.parquet`` holds that window's device event log
(:meth:`Snapshot.device_events`: one row per collective or kernel record, when activity records
were on), written the same way and before its window, so a window that exists has its events.
Its rows carry no host or rank column: they come from the directory names, as for windows.
Each process also keeps ``arrivals-pidP.parquet``: its HCCL calls' arrivals from the Callback
API alone (runs/skew.py), one row per HCCL-domain call: ``name`` (HcclAllReduce, ...),
``sequence`` (its index among the process's calls of that function, 0 first, counted from the
Session's start) and ``start_ns`` (its ENTER, CLOCK_REALTIME ns: MSPTI's clock as is, another
clock bridged to it when taken). Rewritten (temporary name, renamed) before each window with the
window's arrivals added, the newest :data:`MAX_ARRIVAL_ROWS` kept, so one file per process of
bounded size. At most ``ARRIVALS_PER_THREAD`` (8192) wait per thread between two windows; past
that they are dropped, and the window's metadata counts them (``arrivals_dropped``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import _native, self_cost
from . import runfiles

if TYPE_CHECKING:
    import polars as pl

# Where a rank's identity comes from, first match wins: torchrun, Open MPI, MPICH/PMI, PMIx,
# MVAPICH, Ascend (RANK_ID). Without any of them the rank is the process id.
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "RANK_ID")
# The job's rank count, same order: torchrun, Open MPI, MPICH/PMI, PMIx, MVAPICH, Ascend (RANK_SIZE).
WORLD_VARIABLES = (
    "WORLD_SIZE",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "PMIX_SIZE",
    "MV2_COMM_WORLD_SIZE",
    "RANK_SIZE",
)
HOST_VARIABLE = "MSPTI_LENS_HOST"
# One file per window and process: a rank may be several processes (spawned workers inherit
# its rank variables), each writing its own windows into the rank's directory.
WINDOW_GLOB = "window-*.parquet"
WINDOW_NAME = re.compile(r"^window-(\d+)-pid(\d+)\.parquet$")
EVENTS_GLOB = "events-*.parquet"
ARRIVALS_GLOB = "arrivals-*.parquet"
MAX_ARRIVAL_ROWS = 65_536  # per process: 2 MiB or so; older arrivals leave the file first
FIRST_WINDOW_S = 1.0  # the first window of an on period is written after at most this long


# In the run's root, one per recorded process that forked: how many children it forked (they
# are not recorded: a fork holds a copy of its parent's subscription, not one of its own).
FORKS_GLOB = ".forks-*"


def forks_name(host: str, pid: int) -> str:
    return f".forks-{host}-pid{pid}"


def events_name(seq: int, pid: int) -> str:
    return f"events-{seq:06d}-pid{pid}.parquet"


_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def window_name(seq: int, pid: int) -> str:
    return f"window-{seq:06d}-pid{pid}.parquet"


# A rank is stored as a 64-bit signed integer (the run's rank column); larger ones are refused.
MAX_RANK = (1 << 63) - 1


def rank_identity(env: dict[str, str] | os._Environ = os.environ) -> tuple[int, str]:
    """(rank, where it came from): the first rank variable that holds an integer, else the pid.
    ValueError for a rank beyond :data:`MAX_RANK`: no run could hold it."""
    for var in RANK_VARIABLES:
        v = env.get(var, "").strip()
        if v.isascii() and v.isdigit():
            if int(v) > MAX_RANK:
                raise ValueError(f"{var}={v} is not a rank: ranks are 0..{MAX_RANK}")
            return int(v), var
    return os.getpid(), "pid"


# A process's index among the ranks of its host: torchrun, Open MPI, MPICH (Hydra), MVAPICH.
LOCAL_RANK_VARIABLES = (
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "MV2_COMM_WORLD_LOCAL_RANK",
)


def local_rank(env: dict[str, str] | os._Environ = os.environ) -> int:
    """This process's rank on its host from the launcher's variables; 0 without any."""
    for var in LOCAL_RANK_VARIABLES:
        v = env.get(var, "").strip()
        if v.isdigit():
            return int(v)
    return 0


def world_size(env: dict[str, str] | os._Environ = os.environ) -> int | None:
    """The job's rank count from its launcher's variables, if any."""
    for var in WORLD_VARIABLES:
        v = env.get(var, "").strip()
        if v.isdigit() and int(v) > 0:
            return int(v)
    return None


def host_name(env: dict[str, str] | os._Environ = os.environ) -> str:
    """This host's name as a path segment (``MSPTI_LENS_HOST`` overrides the real one)."""
    name = env.get(HOST_VARIABLE) or socket.gethostname() or "localhost"
    return _SAFE.sub("_", name)


def rank_dir(out: str | os.PathLike, host: str, rank: int) -> Path:
    return Path(out) / f"host={host}" / f"rank={rank}"


def check_writable(path: str | os.PathLike) -> runfiles.RunFolder:
    """The run's root, made or checked and proven writable (runs/runfiles.py); OSError naming
    it, and the fix, if not."""
    return runfiles.writer_root(path)


class WindowWriter:
    """Takes a window from a Session every ``interval`` seconds and writes it atomically.

    The Session's ``reset()`` hands over each window, so every call is in exactly one file.
    Profiling may be turned on and off while the process runs (:meth:`begin`, :meth:`end`,
    :meth:`retarget`): without a Session (off) it writes nothing. Each window's metadata says
    what was enabled and which on period (``period``) and command (``generation``) it is of.
    """

    def __init__(
        self,
        session: Any,
        out: str | os.PathLike,
        interval: float,
        *,
        host: str | None = None,
        rank: tuple[int, str] | None = None,
        argv: list[str] | None = None,
    ):
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, not {interval!r}")
        self.session = session
        self.interval = float(interval)
        self.host = host or host_name()
        self.rank, self.rank_source = rank or rank_identity()
        self.world_size = world_size() if self.rank_source != "pid" else None
        self.out = Path(out)
        self.dir = rank_dir(out, self.host, self.rank)
        self.forks = 0  # children this process forked (note_fork, called by the start hook)
        self.root = check_writable(out)
        self.folder = self.root.child(self.dir.parent.name, self.dir.name)  # host=H, rank=R
        self.argv = list(argv if argv is not None else sys.argv)
        self.started = time.time()
        self.seq = 0
        self.calls = 0
        # What the windows of the current on period say about it (enable set, generation, ...).
        self.period_meta: dict[str, Any] = {}
        self.period = 1 if session is not None else 0
        self.last_window: float | None = None  # when the last window was written
        self.calls_per_s = 0.0  # calls per second in the last window
        self.simulated = False  # the windows' library is the simulator
        self.on_finish: list[Any] = []  # called once the final window is written (control)
        self.on_window: list[Any] = []  # called after each window written (control's status)
        self.compactor: Any = None  # merges older windows (runs/compact.py), after each write
        self._due = time.monotonic() + self.interval  # the next periodic window
        self.keys: dict[str, int] = {}
        self._unsettled = 0  # callbacks the last stop could not wait for (_stop_recording)
        self._late_seen = _native.health()["late_exits"]  # late EXITs said in a window so far
        # Held for each window's write. The final write, the writer thread and the control thread
        # (begin, end, retarget: each holds it around its own window) take it; a signal handler
        # never waits on it (see finish). Reentrant: end and retarget write a window inside.
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._wake = threading.Event()  # begin() and finish() wake a writer that is off
        # Taken once, without waiting, by the one call of finish that writes the final window.
        self._finish_token = threading.Lock()
        self._closing = False  # no periodic window after the final one
        self._finished = False  # the final window is written (or failed) and the Session closed
        # Signals that arrived while another finish was writing: re-delivered when it is done.
        # A dict, so that whoever pops a signal (the finisher or the handler) delivers it once.
        self._deferred: dict[int, bool] = {}
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._loop, name="mspti-lens-writer", daemon=True)

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> WindowWriter:
        self._thread.start()
        atexit.register(self.finish)
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self.session is None:
                # Off: no tick at all, so that a paused process's only wake-ups are the control
                # poll's (a wake-up costs a Python thread tens of microseconds of CPU).
                self._wake.wait()
                self._wake.clear()
                continue
            # Asleep until the window is due; begin, set_interval and finish wake it early (each
            # sets what it changed first, so a wake-up cleared here is seen on the next turn).
            delay = self._due - time.monotonic()
            if delay > 0:
                self._wake.wait(delay)
                self._wake.clear()
                continue
            try:
                # Windows on a fixed grid: the next is due one interval after this one was due,
                # not after it was written, so n windows span n intervals (a view's "windows per
                # minute" and a rule's "K windows" mean what they say). A process that fell a whole
                # interval behind (suspended, a write slower than the interval) starts again from now.
                now = time.monotonic()
                self._due = self._due + self.interval
                if self._due <= now:
                    self._due = now + self.interval
                self.write_window(final=False)
            except Exception as e:  # noqa: BLE001 - a full disk must not end the program
                print(f"mspti-lens: could not write a window to {self.dir}: {e}", file=sys.stderr)

    # -- on and off ----------------------------------------------------------------------------
    def begin(self, session: Any, meta: dict[str, Any]) -> None:
        """Profiling turned on: take windows from ``session`` (started) from now on."""
        with self._lock:
            if self._closing:
                session.close()
                return
            self.session = session
            self.period += 1
            self.period_meta = dict(meta)
            # The period's first window comes soon, so a view shows what was turned on at once.
            self._due = time.monotonic() + min(self.interval, FIRST_WINDOW_S)
            self._wake.set()

    def end(self, reason: str = "stop") -> None:
        """Profiling turned off: the callbacks stop, the period's last window takes every call
        that completed until then, and the Session is closed (MSPTI unsubscribed: no callback, no
        activity buffer)."""
        with self._lock:
            if self.session is None or self._closing:
                return
            try:
                self._stop_recording()
                self.write_window(final=False, reason=reason, period_end=True)
            finally:
                with contextlib.suppress(Exception):
                    self.session.close()
                self.session = None
                self.calls_per_s = 0.0

    def retarget(self, change: Any, meta: dict[str, Any]) -> None:
        """Change what is enabled (``change()``, on the Session) at a window boundary: the
        window so far says the old set, the next the new one; what stays enabled keeps counting
        and nothing is in both windows (``reset()`` hands each call to exactly one)."""
        with self._lock:
            if self.session is None or self._closing:
                return
            self.write_window(final=False, reason="retarget")
            change()
            self.period_meta = dict(meta)
            # The new set's first window comes soon too, as after begin: a view shows it at once.
            self._due = min(self._due, time.monotonic() + min(self.interval, FIRST_WINDOW_S))
            self._wake.set()

    def set_interval(self, seconds: float) -> None:
        """Windows every ``seconds`` from now on (runs/fine_windows.py): the next one is due at
        most ``seconds`` from now."""
        with self._lock:
            self.interval = float(seconds)
            self._due = min(self._due, time.monotonic() + self.interval)
            self._wake.set()

    def wrap_session(self, wrap: Any) -> None:
        """The Session as ``wrap(session)`` from now on (runs/flight_recorder.py's Tap), swapped
        under the window lock: no window is being taken meanwhile."""
        with self._lock:
            if self.session is not None and not self._closing:
                self.session = wrap(self.session)

    def finish(self, reason: str = "exit") -> bool:
        """Write the last window (marked final), close the Session, print the rank's summary line.

        Never waits for another call of itself: it may run in a signal handler that interrupted
        the final write (a second SIGTERM, or SIGTERM during the atexit call), and waiting there
        would wait forever on what the interrupted code holds. Returns False when another call
        is writing the final window right now (it did nothing), else True."""
        if os.getpid() != self._pid:
            return True  # a forked child inherited this object: the parent owns the files
        if not self._finish_token.acquire(blocking=False):
            return self._finished
        try:
            self._closing = True
            self._stop.set()
            self._wake.set()
            if self.session is not None:
                try:
                    self._stop_recording()
                    self.write_window(final=True, reason=reason)
                except Exception as e:  # noqa: BLE001 - the program's exit must go on
                    _say_line(f"mspti-lens: could not write the last window to {self.dir}: {e}")
                with contextlib.suppress(Exception):  # closing at exit is best effort
                    self.session.close()
            for call in self.on_finish:
                with contextlib.suppress(Exception):  # best effort at exit
                    call()
            if self.seq:
                _say_line(self.summary_line())
        finally:
            self._finished = True
            self._redeliver()
        return True

    def note_fork(self) -> None:
        """Count a child this process forked, in the run's root at once (record's end report
        reads it; a fork server outlives the command, so its exit would be too late)."""
        self.forks += 1
        with contextlib.suppress(OSError):  # the report then just cannot mention them
            self.root.write(forks_name(self.host, self._pid), f"{self.forks}\n".encode())

    def defer_signal(self, signum: int) -> bool:
        """Called by a signal handler when :meth:`finish` returned False: the signal is delivered
        again once the final window is written. Returns False when that write ended meanwhile
        and the handler must act on the signal itself."""
        self._deferred[signum] = True
        if self._finished and self._deferred.pop(signum, None) is not None:
            return False  # the finisher was done before it could see it: the signal is ours again
        return True

    def _redeliver(self) -> None:
        for signum in list(self._deferred):
            if self._deferred.pop(signum, None) is not None:
                os.kill(os.getpid(), signum)

    # -- windows -------------------------------------------------------------------------------
    def write_window(self, final: bool, reason: str | None = None, period_end: bool = False) -> Path | None:
        cpu_ns = time.thread_time_ns()  # the writer's CPU, in the self cost (self_cost.py)
        with self._lock:
            if (self._closing and not final) or self.session is None:
                return None
            self._flush_activity(settle=final or period_end)
            snap = self.session.reset()
            arrivals, arrivals_dropped = collective_arrivals()
            calls = 0
            if len(snap):
                df = snap.summary()
                calls = int(df["num_calls"].sum())
                self.calls += calls
                for name, total in zip(df["name"], df["total_ns"]):
                    self.keys[name] = self.keys.get(name, 0) + int(total)
            dev = getattr(snap, "device", None)
            device_records = dev.counters.get("records", 0) if dev is not None else 0
            if not self.seq and not self.calls and not device_records and not arrivals["name"]:
                # A process that has recorded nothing yet leaves no files: launchers (torchrun's
                # agent) and helpers (data-loader workers that inherit the rank's variables) are not
                # ranks. Device records count: a rank blocked in its first collective has some and
                # no finished call, and skipping that window would lose them; so do its arrivals.
                return None
            self.seq += 1
            late_now = _native.health()["late_exits"]
            late, self._late_seen = late_now - self._late_seen, late_now
            facts = {
                "host": self.host,
                "rank": self.rank,
                "rank_source": self.rank_source,
                "world_size": self.world_size,
                "pid": self._pid,
                "window": self.seq,
                "final": bool(final),
                "end_reason": reason,
                "interval_s": self.interval,
                "process_start": self.started,
                "argv": self.argv[:16],
                "written": time.time(),
                "on": True,  # a window is only written while profiling is on
                "period": self.period,
                "period_end": bool(period_end or final),
                "arrivals_dropped": arrivals_dropped,
                "stop_unsettled": self._unsettled if period_end or final else 0,
                # EXITs that came after an earlier stop (in flight there, in no window's calls).
                "late_exits": late,
                **self.period_meta,
            }
            given = {**snap.meta, **facts}
            facts["periods"] = [
                [self.period, given.get("window_start"), given.get("window_end"), given.get("enable")]
            ]
            snap = snap.with_meta(**facts)
            m = snap.meta
            path = self.dir / window_name(self.seq, self._pid)
            self.folder.make()
            self._write_events(snap)
            self._write_arrivals(arrivals)
            # The events are in the events file: in the window's metadata (JSON, and again in
            # Arrow's schema) the same log took 35 times the space and compaction would carry it.
            self.folder.write(path.name, lambda f: snap.save(f, event_log=False))
            span = float(m.get("window_end") or 0) - float(m.get("window_start") or 0)
            self.calls_per_s = calls / span if span > 0 else 0.0
            self.last_window = m["written"]
            self.simulated = bool(m.get("simulated"))  # said in the summary line
            for call in self.on_window:
                with contextlib.suppress(Exception):  # status then shows the previous window
                    call()
            if self.compactor is not None:
                try:
                    self.compactor.compact(last=bool(final))
                except Exception as e:  # noqa: BLE001 - uncompacted windows are still whole
                    _say_line(f"mspti-lens: could not compact the windows in {self.dir}: {e}")
            self_cost.add_writer_cpu(time.thread_time_ns() - cpu_ns)
            return path

    def _stop_recording(self) -> None:
        """Stop the Session's callbacks before its last window is taken: a window taken first
        and the Session closed after would leave the calls in between in no window (and in no
        counter). Calls still open at the stop are the window's ``in_flight``."""
        with contextlib.suppress(Exception):  # a window of what was recorded beats none
            before = _native.health()["stop_unsettled"]
            self.session.stop()
            # Callbacks the stop could not wait for: each may have a call in no window.
            self._unsettled = _native.health()["stop_unsettled"] - before

    def _flush_activity(self, settle: bool) -> None:
        """Hand over the activity records MSPTI still holds, so they land in this window: its
        buffers reach the collector only when full or flushed, and a final window that missed
        them would lose them (the last window settles: device records trail FlushAll)."""
        with contextlib.suppress(Exception):  # a window without the last records beats none
            if self.session is not None:
                self.session.flush_activity(settle)

    def _write_events(self, snap: Any) -> None:
        """The window's device event log, if it has any (Snapshot.device_events of the contract)."""
        events = getattr(snap, "device_events", None)
        frame = events() if callable(events) else None
        if frame is None or not frame.height:
            return
        frame = frame.drop([c for c in ("host", "rank") if c in frame.columns])
        self.folder.write(events_name(self.seq, self._pid), frame.write_parquet)

    def _write_arrivals(self, arrivals: dict[str, Any]) -> None:
        """This process's arrivals file with the window's added (the newest MAX_ARRIVAL_ROWS)."""
        if not arrivals["name"]:
            return
        import polars as pl

        schema = arrival_schema()
        new = pl.DataFrame({k: arrivals[k] for k in schema}, schema=schema)
        name = arrivals_name(self._pid)
        with contextlib.suppress(FileNotFoundError):
            new = pl.concat([self.folder.read_parquet(name).cast(schema), new])  # type: ignore[arg-type]
        self.folder.write(name, new.tail(MAX_ARRIVAL_ROWS).write_parquet)

    def summary_line(self) -> str:
        top = sorted(self.keys.items(), key=lambda kv: -kv[1])[:3]
        total = sum(self.keys.values()) or 1
        tops = ", ".join(f"{n} {100 * t / total:.0f}%" for n, t in top)
        return (
            f"mspti-lens: host={self.host} rank={self.rank}: {self.calls:,} calls in {len(self.keys)} APIs, "
            f"{self.seq} windows -> {self.dir}"
            + (f" (time: {tops})" if tops else "")
            + (" · SIMULATED" if self.simulated else "")
        )


def arrivals_name(pid: int) -> str:
    return f"arrivals-pid{pid}.parquet"


def arrival_schema() -> dict[str, pl.DataType]:
    """The columns of an arrivals file (polars is imported only when a process writes one)."""
    import polars as pl

    return {"name": pl.String(), "sequence": pl.UInt64(), "start_ns": pl.Int64()}


def collective_arrivals() -> tuple[dict[str, Any], int]:
    """The HCCL calls entered since the last take (the native core's, process-wide) as columns
    name, sequence, start_ns, and how many were dropped meanwhile."""
    a = _native.take_collective_arrivals()
    return {k: a[k] for k in ("name", "sequence", "start_ns")}, int(a["dropped"])


def _say_line(text: str) -> None:
    """One line on stderr, best effort: at exit or in a signal handler stderr may be closed, or
    busy in the very write the signal interrupted."""
    with contextlib.suppress(Exception):
        sys.stderr.flush()  # what the program wrote before stays before this line
    with contextlib.suppress(OSError):
        os.write(2, f"{text}\n".encode(errors="replace"))


def install_signal_handlers(writer: WindowWriter) -> None:
    """On SIGTERM write the last window, then do what the program would have done (its own handler,
    or die of the signal). SIGINT needs nothing: KeyboardInterrupt ends in atexit.

    A SIGTERM that arrives while the final window is being written (a second SIGTERM, or one
    during the write at exit) does not wait for it: it is delivered again when the write is
    done, so the window is written once and whole and the process still ends of the signal."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:
        _native.signal_handled(signum)
        if not writer.finish(reason="SIGTERM") and writer.defer_signal(signum):
            return
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_term)
    # Python runs on_term only on the main thread, and only once that thread is back in the
    # interpreter: a SIGTERM another thread takes (the drain thread, polars' pool, a vendor
    # library's), or one that lands just before the main thread begins to sleep in a lock or a
    # read, would never run it, and a pool worker told to terminate would never end. The native
    # router sends it on to the main thread and interrupts its wait until on_term says it runs.
    _native.route_signal_to_main_thread(signal.SIGTERM)
    # A forked child (a fork pool's worker) inherits the router but not its relay thread: start
    # its own while on_term is still the handler, or a terminate() that lands as the worker begins
    # to wait for its next task leaves it asleep for ever, and the pool's parent waiting for it.
    os.register_at_fork(after_in_child=lambda: _reroute_in_child(on_term))


def _reroute_in_child(on_term: Any) -> None:
    if signal.getsignal(signal.SIGTERM) is on_term:
        with contextlib.suppress(ValueError):  # no relay: as before, the child still runs
            _native.route_signal_to_main_thread(signal.SIGTERM)
