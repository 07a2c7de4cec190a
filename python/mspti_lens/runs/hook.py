"""The interpreter-start hook: makes a process record when mspti-lens's variable is set.

``python -m mspti_lens record`` sets the variables below for the command it runs and puts
``runs/_site`` (a ``sitecustomize`` that chains any existing one) first on ``PYTHONPATH``, so every
Python process the command starts calls :func:`start`. Without ``MSPTI_LENS_RECORD`` it does
nothing. It never breaks the program: an output directory that cannot be written, or a failure to
subscribe, is one line on stderr at start and the program runs on unrecorded.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

RECORD_VARIABLE = "MSPTI_LENS_RECORD"  # the output directory; the hook is inert without it
INTERVAL_VARIABLE = "MSPTI_LENS_INTERVAL"
LIBRARY_VARIABLE = "MSPTI_LENS_LIBRARY"
CLOCK_VARIABLE = "MSPTI_LENS_CLOCK"
ENABLE_VARIABLE = "MSPTI_LENS_ENABLE"
ACTIVITY_VARIABLE = "MSPTI_LENS_ACTIVITY"  # `record --activity KINDS`; "none" turns activity off
PROMETHEUS_VARIABLE = "MSPTI_LENS_PROMETHEUS"  # `record --prometheus PORT`: each process serves /metrics
PAUSED_VARIABLE = "MSPTI_LENS_PAUSED"  # `record --paused`: "1", no Session until `control start`
GENERATION_VARIABLE = "MSPTI_LENS_GENERATION"  # the command generation `record` launched the job at
DEFAULT_INTERVAL = 10.0
DEFAULT_ENABLE = "runtime,hccl"
# On by default: one COMMUNICATION record per collective is cheap (no per-kernel records), and it
# gives each collective instance its device start and end, which Run.stragglers() votes on.
DEFAULT_ACTIVITY = "communication"
# Buffers for collective records alone (about 100 bytes each): 4 x 1 MiB to start with, not the
# DEFAULT_ACTIVITY_BUFFERS a kernel trace needs (the pool grows on demand either way).
COMMUNICATION_BUFFERS = (1 << 20, 4)
SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_site")

_writer: Any = None
_recorder: Any = None
_server: Any = None  # the /metrics server of `record --prometheus`, kept alive with the process


def _say(text: str) -> None:
    print(f"mspti-lens: {' '.join(str(text).split())}", file=sys.stderr, flush=True)


def start(env: dict[str, str] | os._Environ = os.environ) -> Any:
    """Start recording this process if asked to; returns the WindowWriter, or None. With
    ``record --paused`` the process holds no Session (no MSPTI subscriber) until a ``control
    start`` command; either way it obeys the run's commands (runs/control.py)."""
    global _writer, _recorder
    out = env.get(RECORD_VARIABLE)
    if not out or _writer is not None:
        return _writer
    try:
        from .writer import WindowWriter, check_writable, host_name, install_signal_handlers, rank_identity

        rank = rank_identity(env)  # a rank no run can hold is refused before subscribing

        try:
            interval = float(env.get(INTERVAL_VARIABLE) or DEFAULT_INTERVAL)
        except ValueError:
            interval = -1.0
        if not interval > 0:
            raise ValueError(
                f"{INTERVAL_VARIABLE}={env.get(INTERVAL_VARIABLE)!r} is not a number of seconds > 0"
            )
        try:
            check_writable(out)
        except OSError as e:
            _say(f"not recording this process: {e} (the output directory of `record --out`); it runs on")
            return None
        recorder = Recorder(env)
        paused = env.get(PAUSED_VARIABLE) == "1"
        writer = WindowWriter(None, out, interval, host=host_name(env), rank=rank)
        recorder.writer = writer
        from .compact import Compactor

        writer.compactor = Compactor(writer.folder, os.getpid())
        if not paused:
            recorder.turn_on(recorder.enable, recorder.activity, None, int(env.get(GENERATION_VARIABLE) or 0))
        writer.start()
        install_signal_handlers(writer)
        os.register_at_fork(after_in_child=_forked, after_in_parent=_counted_fork)
        _writer, _recorder = writer, recorder
        if writer.session is not None:
            _serve_metrics(writer, env)
        recorder.control_start(out, int(env.get(GENERATION_VARIABLE) or 0))
        return writer
    except Exception as e:  # noqa: BLE001 - never break the program being recorded
        _say(f"not recording this process ({type(e).__name__}: {e}); it runs on")
        return None


class Recorder:
    """What a recorded process does on each command: subscribe (a Session with the enable set),
    retarget the Session in place, or end the period and unsubscribe."""

    def __init__(self, env: dict[str, str] | os._Environ):
        self.env = env
        self.enable = [t for t in (env.get(ENABLE_VARIABLE) or DEFAULT_ENABLE).split(",") if t]
        self.activity = activity_kinds(env)
        self.writer: Any = None
        self.control: Any = None
        self.until: float | None = None  # a `start --for` ends here (time.monotonic)
        self.on_enable: list[str] = []
        self.on_activity: list[str] = []
        self.library: Any = None  # loaded ahead of a paused process's first start (prepare)
        self.intervals: Any = None  # the writer's interval as commands set it (fine_windows.py)
        self.flight: Any = None  # the last seconds in fine windows while watched (flight_recorder.py)

    # -- commands ------------------------------------------------------------------------------
    def apply(self, cmd: dict[str, Any]) -> None:
        gen = int(cmd["generation"])
        if cmd["command"] == "stop":
            self.until = None
            self.writer.end("stop")
            return
        enable = self.enable if cmd.get("enable") is None else list(cmd["enable"])
        activity = self.activity if cmd.get("activity") is None else list(cmd["activity"])
        if self.writer.session is None:
            self.turn_on(enable, activity, cmd.get("for_s"), gen)
        else:
            self.retarget(enable, activity, cmd.get("for_s"), gen)

    def tick(self) -> None:
        if self.until is not None and time.monotonic() >= self.until:
            self.until = None
            self.writer.end("for ended")
            if self.intervals is not None:
                self.intervals.release()
            if self.control is not None:
                self.control.write()

    def state(self) -> dict[str, Any]:
        from .. import self_cost

        on = self.writer is not None and self.writer.session is not None
        left = None if self.until is None else max(0.0, self.until - time.monotonic())
        return {
            "state": "on" if on else "off",
            "enable": list(self.on_enable) if on else [],
            "activity": list(self.on_activity) if on else [],
            "until": None if left is None else time.time() + left,
            "period": self.writer.period if self.writer is not None else 0,
            "windows": self.writer.seq if self.writer is not None else 0,
            "calls": self.writer.calls if self.writer is not None else 0,
            "last_window": self.writer.last_window if self.writer is not None else None,
            "calls_per_s": self.writer.calls_per_s if on else 0.0,
            # What mspti-lens has cost this process and lost (control status, the run panel).
            "self_cost": self_cost.measure(),
            **(self.intervals.state() if self.intervals is not None else {}),
        }

    def _meta(self, gen: int) -> dict[str, Any]:
        return {"enable": list(self.on_enable), "activity": list(self.on_activity), "generation": gen}

    def turn_on(self, enable: list[str], activity: list[str], for_s: float | None, gen: int) -> None:
        session = self._session(enable, activity)
        self.on_enable, self.on_activity = list(enable), list(session.activity)
        self.until = None if not for_s else time.monotonic() + float(for_s)
        self.writer.begin(session, self._meta(gen))

    def retarget(self, enable: list[str], activity: list[str], for_s: float | None, gen: int) -> None:
        from .control import resolved_callbacks

        session = self.writer.session
        old, new = resolved_callbacks(self.on_enable), resolved_callbacks(enable)
        old_kinds, new_kinds = set(session.activity), set(activity)

        def change() -> None:
            # Callback by callback: what is in both sets is never off for a moment.
            for d, c in sorted(new - old):
                session.enable((d, c))
            for d, c in sorted(old - new):
                session.disable((d, c))
            if new_kinds - old_kinds:
                session.enable_activity(*sorted(new_kinds - old_kinds))
            if old_kinds - new_kinds:
                session.disable_activity(*sorted(old_kinds - new_kinds))

        self.on_enable, self.on_activity = list(enable), sorted(new_kinds)
        self.until = None if not for_s else time.monotonic() + float(for_s)
        self.writer.retarget(change, self._meta(gen))

    def _session(self, enable: list[str], kinds: list[str]) -> Any:
        from ..activity import DEFAULT_ACTIVITY_BUFFERS
        from ..session import Session

        env = self.env
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            options: dict[str, Any] = {
                "library": env.get(LIBRARY_VARIABLE) or None,
                "enable": enable,
                "clock": env.get(CLOCK_VARIABLE) or "auto",
            }
            try:
                only_collectives = set(kinds) <= {"communication", "hccl"}
                buffers = COMMUNICATION_BUFFERS if only_collectives else DEFAULT_ACTIVITY_BUFFERS
                session = Session(**options, activity=kinds, activity_buffers=buffers)
            except Exception as e:  # noqa: BLE001 - callbacks alone are still worth recording
                if not kinds:
                    raise
                session = Session(**options)  # fails alike if the library itself is the trouble
                _say(f"recording without activity records ({type(e).__name__}: {e})")
            session.start()
        for w in caught[:1]:
            _say(str(w.message).split(". ")[0] + ".")  # one line per process, not a paragraph
        return session

    def prepare(self) -> None:
        """Load the MSPTI library before the first start, so that a start only subscribes.
        Loading is most of a first start's CPU (resolving the library and its symbols, about 6 ms
        against 1 ms for the Session); with 128 processes on a few cores, that CPU, not the poll,
        set the time to the last acknowledgement. Loading subscribes nothing and enables nothing:
        no callback fires (a real libmspti.so is already mapped by the preload, so this is only a
        lookup there)."""
        if self.writer is None or self.writer.session is not None or self.library is not None:
            return
        from ..backend import load_library

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the Session says it, once, at its start
            self.library = load_library(self.env.get(LIBRARY_VARIABLE) or None)

    def control_start(self, out: str, generation: int) -> None:
        from .control import ProcessControl
        from .fine_windows import IntervalHold
        from .flight_recorder import FlightRecorder

        w = self.writer
        self.intervals = IntervalHold(w)
        self.flight = FlightRecorder(out, w, server=_server)
        self.control = ProcessControl(
            out,
            host=w.host,
            rank=w.rank,
            rank_source=w.rank_source,
            apply=self.flight.after(self.intervals.after(self.apply)),
            state=self.flight.state_of(self.state),
            tick=self.flight.after_tick(self.tick),
            generation=generation,
            prepare=self.prepare,
        )
        w.on_finish.append(self.control.end)
        w.on_window.append(self.control.write)
        self.control.start()


def activity_kinds(env: dict[str, str] | os._Environ = os.environ) -> list[str]:
    """The activity kinds a recorded process enables (``record --activity``; "none": none)."""
    text = env.get(ACTIVITY_VARIABLE)
    text = DEFAULT_ACTIVITY if text is None else text
    if text.strip().lower() in ("", "none", "off"):
        return []
    return [k.strip() for k in text.split(",") if k.strip()]


def metrics_port(base: int, env: dict[str, str] | os._Environ = os.environ) -> int:
    """The port a recorded process serves ``/metrics`` on: ``base`` + its local rank (the launcher's
    LOCAL_RANK and kin, 0 without one); ``base`` 0 gives each process a free port of its own."""
    from .writer import local_rank

    return 0 if base == 0 else base + local_rank(env)


def metrics_url_name(pid: int) -> str:
    """The file a process writes the address it serves to: beside its rank's window files."""
    return f"metrics-pid{pid}.url"


def metrics_url_file(writer: Any) -> Path:
    return Path(writer.dir) / metrics_url_name(os.getpid())


def _serve_metrics(writer: Any, env: dict[str, str] | os._Environ) -> None:
    global _server
    text = env.get(PROMETHEUS_VARIABLE)
    if not text:
        return
    try:
        from ..export.serve import serve

        port = metrics_port(int(text), env)
        _server = serve(port, writer.session, rank=writer.rank, host=writer.host)
        writer.folder.write(metrics_url_name(os.getpid()), (_server.url + "\n").encode())
    except Exception as e:  # noqa: BLE001 - the recording and the program go on without /metrics
        _say(f"not serving /metrics for this process ({type(e).__name__}: {e}); recording goes on")


def _counted_fork() -> None:
    if _writer is not None:
        _writer.note_fork()


def _forked() -> None:
    # A forked child shares the parent's rank and files: the parent records (and serves), the
    # child does not.
    global _writer, _server, _recorder
    _writer = None
    _server = None
    _recorder = None
