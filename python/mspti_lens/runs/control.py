"""Steering a recorded job while it runs: ``python -m mspti_lens control DIR start|stop|status``.

Control travels through files of the run directory, nothing else (no daemon, no port):

- ``DIR/control/command.json``: the latest command, replaced atomically (a temporary file
  renamed over it). Its ``generation`` orders commands: a process applies a command only if
  its generation is higher than the last one it applied.
- ``DIR/control/issued/GGGGGG.json``: every command ever issued, one file per generation,
  created with ``link()`` (which fails if the name exists): two controllers can never issue the
  same generation. After publishing, a controller republishes the highest issued one if
  command.json holds a lower one, so command.json always ends at the highest generation.
- ``DIR/control/processes/H-pidP.json``: one per recorded process: host, rank, pid, state
  (on/off/ended), the enable set, the generation applied, a refused command if any, calls per
  second; rewritten (under the same name) whenever the state changes; every
  :data:`HEARTBEAT_S` seconds its modification time is set to now, the heartbeat (one
  ``utime``: rewriting an unchanged row cost a paused process more CPU than its polls).

Each process polls command.json with one ``stat()`` every :data:`POLL_S` seconds from a daemon
thread, and reads it only when its inode, size or modification time changed. It obeys only a
command file that is a regular file owned by its own user and not writable by group or others;
commands name no paths (what they may hold is checked field by field).
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONTROL_DIR = "control"
COMMAND_FILE = "command.json"
ISSUED_DIR = "issued"
PROCESSES_DIR = "processes"
POLL_S = 0.25  # a process looks at command.json this often (one stat call)
HEARTBEAT_S = 5.0  # and rewrites its process file at least this often
# A process file older than this, of a process on another host, is a process that is gone
# (killed with -9, or its host is down); on this host the pid tells at once.
LOST_AFTER_S = 4 * HEARTBEAT_S
COMMANDS = ("start", "stop")
COMMAND_FIELDS = {"generation", "command", "enable", "activity", "for_s", "ranks", "issued", "by"}
# What profiling costs per call while on: the callback's ENTER+EXIT pair into a histogram, the
# added ns per pair bench/run.py measures (BENCHMARKS.md, section 1: 49.7 ns); an estimate.
COST_PER_CALL_NS = 50.0
COST_SOURCE = "BENCHMARKS.md, section 1: mspti-lens's added ns per ENTER/EXIT pair"


class ControlError(ValueError):
    """A command that cannot be issued (said in one line; nothing was written)."""


# -- paths ---------------------------------------------------------------------------------------
def control_dir(run: str | os.PathLike) -> Path:
    return Path(run) / CONTROL_DIR


def command_path(run: str | os.PathLike) -> Path:
    return control_dir(run) / COMMAND_FILE


def process_path(run: str | os.PathLike, host: str, pid: int) -> Path:
    return control_dir(run) / PROCESSES_DIR / f"{host}-pid{pid}.json"


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON to a fresh temporary file (never one that exists: no symlink is
    followed) and rename it over ``path`` (readers see the old file or the new one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


# -- rank specs ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RankSpec:
    """Which processes a command is for: ranks (``0-3,7``), a host (``host=NAME``), or all."""

    ranks: tuple[tuple[int, int], ...] = ()  # inclusive ranges
    hosts: tuple[str, ...] = ()

    @property
    def all(self) -> bool:
        return not self.ranks and not self.hosts

    def matches(self, host: str, rank: int) -> bool:
        if self.all:
            return True
        return host in self.hosts or any(a <= rank <= b for a, b in self.ranks)

    def text(self) -> str:
        parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in self.ranks]
        parts += [f"host={h}" for h in self.hosts]
        return ",".join(parts) or "all"

    def to_json(self) -> dict[str, Any] | None:
        return None if self.all else {"ranks": [list(r) for r in self.ranks], "hosts": list(self.hosts)}

    @classmethod
    def from_json(cls, data: Any) -> RankSpec:
        if data is None:
            return cls()
        if not isinstance(data, dict) or set(data) - {"ranks", "hosts"}:
            raise ValueError("ranks is not a rank selection")
        ranks = data.get("ranks") or []
        hosts = data.get("hosts") or []
        if not all(
            isinstance(r, list) and len(r) == 2 and all(type(v) is int for v in r) for r in ranks
        ) or not all(isinstance(h, str) for h in hosts):
            raise ValueError("ranks is not a rank selection")
        return cls(tuple((a, b) for a, b in ranks), tuple(hosts))


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def parse_ranks(text: str | None) -> RankSpec:
    """``0-3,7``, ``host=NAME`` (several, comma-separated, mixed with ranks), ``all`` or None."""
    if text is None or text.strip().lower() in ("", "all"):
        return RankSpec()
    ranks: list[tuple[int, int]] = []
    hosts: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if part.startswith("host="):
            name = part.removeprefix("host=")
            if not name or "/" in name:
                raise ControlError(f"--ranks: {part!r} names no host; write host=NAME")
            hosts.append(name)
            continue
        m = _RANGE.match(part)
        if not m:
            raise ControlError(
                f"--ranks: {part!r} is not a rank, a range or a host; write e.g. 0-3,7 or host=NAME or all"
            )
        a, b = int(m[1]), int(m[2] or m[1])
        if b < a:
            raise ControlError(f"--ranks: the range {part!r} ends before it starts; write {b}-{a}")
        ranks.append((a, b))
    return RankSpec(tuple(ranks), tuple(hosts))


# -- what a command may enable -------------------------------------------------------------------
def _enable_names() -> list[str]:
    from ..catalog import DOMAINS, enableable

    names = list(DOMAINS)
    for c in enableable():
        names += [c.short, c.enum, *c.names_26x, *c.names_8x]
    return names


def check_enable(names: list[str]) -> list[str]:
    """The enable names, checked: an unknown one raises ControlError with a did-you-mean."""
    from ..catalog import resolve

    out = []
    for n in names:
        try:
            resolve(n)
        except ValueError:
            near = difflib.get_close_matches(n, _enable_names(), n=1, cutoff=0.6)
            near = near or difflib.get_close_matches(n.upper(), [x.upper() for x in _enable_names()], n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise ControlError(
                f"unknown enable name {n!r}: {hint}give domains (runtime, hccl) or callbacks "
                "(LAUNCH, aclrtLaunchKernel, HcclAllReduce, ...)"
            ) from None
        out.append(n)
    return out


def check_activity(kinds: list[str]) -> list[str]:
    from ..activity import KINDS

    out = []
    for k in kinds:
        if k.lower() not in KINDS:
            near = difflib.get_close_matches(k.lower(), list(KINDS), n=1, cutoff=0.6)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise ControlError(f"unknown activity kind {k!r}: {hint}valid kinds are {', '.join(KINDS)}")
        out.append(k.lower())
    return out


def split_list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    if text.strip().lower() in ("none", "off"):
        return []
    return [t.strip() for t in text.split(",") if t.strip()]


def resolved_callbacks(names: list[str]) -> set[tuple[int, int]]:
    """Every (domain, cbid) the names enable (a domain is all its callbacks)."""
    from ..catalog import enableable, resolve

    out: set[tuple[int, int]] = set()
    for n in names:
        d, c = resolve(n)
        if c is None:
            out |= {(x.domain, x.cbid) for x in enableable() if x.domain == d}
        else:
            out.add((d, c))
    return out


# -- commands ------------------------------------------------------------------------------------
def validate_command(data: Any) -> dict[str, Any]:
    """A command file's content, checked field by field (it names no path; anything else is
    refused with the reason)."""
    if not isinstance(data, dict):
        raise ValueError("not a command (a JSON object)")
    extra = set(data) - COMMAND_FIELDS
    if extra:
        raise ValueError(f"unknown field(s) {', '.join(sorted(extra))}")
    gen = data.get("generation")
    if type(gen) is not int or gen < 0:
        raise ValueError("generation is not a whole number")
    if data.get("command") not in COMMANDS:
        raise ValueError(f"command is not one of {', '.join(COMMANDS)}")
    for field in ("enable", "activity"):
        v = data.get(field)
        if v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise ValueError(f"{field} is not a list of names")
    if data.get("enable") is not None:
        check_enable(data["enable"])
    if data.get("activity") is not None:
        check_activity(data["activity"])
    f = data.get("for_s")
    if f is not None and (isinstance(f, bool) or not isinstance(f, (int, float)) or not f > 0):
        raise ValueError("for_s is not a number of seconds > 0")
    RankSpec.from_json(data.get("ranks"))
    return data


def read_command(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(the command, None), (None, why it is refused) or (None, None) when there is none. The
    file is opened without following a symlink and checked on the open descriptor: a regular
    file of this process's user, writable by no one else."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, f"cannot open {path.name}: {e.strerror or e}"
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None, f"{path.name} is not a regular file"
        if st.st_uid != os.getuid():
            return None, f"{path.name} belongs to uid {st.st_uid}, not to this process's user ({os.getuid()})"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return None, f"{path.name} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
        raw = f.read(1 << 16)
    try:
        return validate_command(json.loads(raw)), None
    except (ValueError, UnicodeDecodeError) as e:
        return None, f"{path.name} is refused: {str(e).splitlines()[0]}"


def latest_issued(run: str | os.PathLike) -> int:
    """The highest generation issued in the run (0: none)."""
    d = control_dir(run) / ISSUED_DIR
    gens = [int(p.stem) for p in d.glob("*.json") if p.stem.isdigit()] if d.is_dir() else []
    return max(gens, default=0)


def issue(run: str | os.PathLike, command: dict[str, Any]) -> int:
    """Issue ``command`` (without a generation) as the next generation; returns it. Safe against
    other controllers issuing at the same moment (see the module's docstring)."""
    cdir = control_dir(run)
    issued = cdir / ISSUED_DIR
    issued.mkdir(parents=True, exist_ok=True)
    (cdir / PROCESSES_DIR).mkdir(parents=True, exist_ok=True)
    for d in (cdir, issued, cdir / PROCESSES_DIR):
        with contextlib.suppress(OSError):  # not ours: the processes refuse what others write
            os.chmod(d, stat.S_IMODE(d.stat().st_mode) & ~0o022)
    tmp = issued / f".new-{socket.gethostname()}-{os.getpid()}-{threading.get_ident()}.tmp"
    while True:
        gen = latest_issued(run) + 1
        data = {**command, "generation": gen, "issued": time.time(), "by": _who()}
        validate_command(data)
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        try:
            os.link(tmp, issued / f"{gen:06d}.json")  # fails if another controller took gen
        except FileExistsError:
            continue
        finally:
            tmp.unlink(missing_ok=True)
        break
    _write_atomic(command_path(run), data)
    _republish_latest(run)
    return gen


def _republish_latest(run: str | os.PathLike) -> None:
    """If command.json holds a lower generation than the highest issued (a slower controller
    renamed its older command over a newer one), put the highest back."""
    for _ in range(8):
        top = latest_issued(run)
        try:
            current = json.loads(command_path(run).read_text()).get("generation", 0)
        except (OSError, ValueError):
            current = 0
        if current >= top:
            return
        data = json.loads((control_dir(run) / ISSUED_DIR / f"{top:06d}.json").read_text())
        _write_atomic(command_path(run), data)


def _who() -> str:
    try:
        user = os.getlogin()
    except OSError:
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()} pid {os.getpid()}"


# -- processes -----------------------------------------------------------------------------------
def read_processes(run: str | os.PathLike, now: float | None = None) -> list[dict[str, Any]]:
    """Every process file of the run, with ``live`` (False for an ended or lost process)."""
    now = time.time() if now is None else now
    here = socket.gethostname()
    out = []
    d = control_dir(run) / PROCESSES_DIR
    for p in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            row = json.loads(p.read_text())
            touched = p.stat().st_mtime  # the heartbeat between rewrites
        except (OSError, ValueError):
            continue  # being replaced: read it next time
        if not isinstance(row, dict) or "pid" not in row:
            continue
        row["heartbeat"] = max(float(row.get("heartbeat") or 0), touched)
        state = row.get("state")
        if state != "ended":
            gone = (
                not _alive(int(row["pid"]))
                if row.get("node") == here
                else now - float(row.get("heartbeat") or 0) > LOST_AFTER_S
            )
            if gone:
                row["state"] = "lost"
        row["live"] = row["state"] in ("on", "off")
        out.append(row)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- the rank's side -----------------------------------------------------------------------------
class ProcessControl:
    """One recorded process's end of control: its process file and the thread polling
    command.json. ``apply(command)`` is the recorder's (hook.Recorder): it turns profiling on,
    retargets it or turns it off, and returns nothing; what it did is read from ``state()``."""

    def __init__(
        self,
        run: str | os.PathLike,
        *,
        host: str,
        rank: int,
        rank_source: str,
        apply: Callable[[dict[str, Any]], None],
        state: Callable[[], dict[str, Any]],
        tick: Callable[[], None],
        generation: int = 0,
        prepare: Callable[[], None] | None = None,
    ):
        self.run = Path(run)
        self.host, self.rank, self.rank_source = host, rank, rank_source
        self.pid = os.getpid()
        self._apply, self._state, self._tick = apply, state, tick
        self._prepare = prepare
        self.generation = generation  # the last generation applied
        self.refused: dict[str, Any] | None = None
        self._seen: tuple[int, ...] | None = None
        self._beat = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.path = process_path(self.run, host, self.pid)
        self._command = os.fspath(command_path(self.run))  # stat'ed 4 times a second: made once
        self.started = time.time()
        self._thread = threading.Thread(target=self._loop, name="mspti-lens-control", daemon=True)

    def start(self) -> ProcessControl:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.poll()
        self.write()
        self._thread.start()
        return self

    def _loop(self) -> None:
        if self._prepare is not None:
            try:
                self._prepare()  # on this thread: the program's own start does not wait for it
            except Exception as e:  # noqa: BLE001 - a start then does the same work, and says why
                print(f"mspti-lens: could not prepare this process's start: {e}", file=sys.stderr)
        while not self._stop.wait(POLL_S):
            try:
                self.poll()
                if time.time() - self._beat >= HEARTBEAT_S:
                    self.beat()
            except Exception as e:  # noqa: BLE001 - control must never end the program
                print(f"mspti-lens: control of this process failed once: {e}", file=sys.stderr)

    def poll(self) -> None:
        """One look at command.json (a stat; the file is read only when it changed)."""
        self._tick()  # the recorder's own clock: a --for that ran out stops here
        try:
            st = os.stat(self._command, follow_symlinks=False)
        except FileNotFoundError:
            return
        sig = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)  # ctime: a chmod too
        if sig == self._seen:
            return
        self._seen = sig
        cmd, why = read_command(command_path(self.run))
        if why is not None:
            if self.refused is None or self.refused.get("why") != why:
                self.refused = {"why": why, "at": time.time()}
                print(f"mspti-lens: not obeying {command_path(self.run)}: {why}", file=sys.stderr)
                self.write()
            return
        if cmd is None or cmd["generation"] <= self.generation:
            return
        self.refused = None
        with self._lock:
            if RankSpec.from_json(cmd.get("ranks")).matches(self.host, self.rank):
                try:
                    self._apply(cmd)
                except Exception as e:  # noqa: BLE001 - said in status, the program runs on
                    self.refused = {"why": f"{type(e).__name__}: {e}", "generation": cmd["generation"]}
            self.generation = cmd["generation"]
        self.write()

    def write(self, ended: bool = False) -> None:
        row = {
            "host": self.host,
            "node": socket.gethostname(),
            "rank": self.rank,
            "rank_source": self.rank_source,
            "pid": self.pid,
            "started": self.started,
            "generation": self.generation,
            "refused": self.refused,
            "heartbeat": time.time(),
            **self._state(),
        }
        if ended:
            row["state"] = "ended"
        with contextlib.suppress(OSError):  # status then shows an older heartbeat
            _write_atomic(self.path, row)
        self._beat = row["heartbeat"]

    def beat(self) -> None:
        """The heartbeat: the process file's modification time set to now (its row is unchanged;
        every change of state rewrites it)."""
        now = time.time()
        try:
            os.utime(self.path, (now, now))
        except OSError:
            self.write()  # gone (a cleaned directory): written again
            return
        self._beat = now

    def end(self) -> None:
        """The process is exiting: stop polling, say so in the process file. A process without
        a rank variable that wrote no window (a launcher, a helper) leaves no file."""
        self._stop.set()
        if self.rank_source == "pid" and not self._state().get("windows"):
            with contextlib.suppress(OSError):
                self.path.unlink()
            return
        self.write(ended=True)


# -- the controller's side -----------------------------------------------------------------------
STATUS_COLUMNS = (
    "host",
    "rank",
    "pid",
    "state",
    "enable",
    "generation",
    "last_window",
    "calls_per_s",
)


class RunControl:
    """``open_run(DIR).control``: start, stop and status of the run's processes."""

    def __init__(self, run: str | os.PathLike):
        self.run = Path(os.fspath(run).removeprefix("file://"))

    # commands
    def start(
        self,
        enable: list[str] | str | None = None,
        activity: list[str] | str | None = None,
        *,
        for_s: float | None = None,
        ranks: str | None = None,
    ) -> int:
        """Turn profiling on (a paused process subscribes) or retarget it (a running process
        keeps counting what stays enabled). Returns the command's generation."""
        en = split_list(enable) if isinstance(enable, str) else enable
        act = split_list(activity) if isinstance(activity, str) else activity
        if en is not None:
            check_enable(list(en))
        if act is not None:
            check_activity(list(act))
        if for_s is not None and (
            isinstance(for_s, bool) or not isinstance(for_s, (int, float)) or not for_s > 0
        ):
            raise ControlError(f"--for must be a number of seconds > 0, not {for_s!r}")
        spec = self._targets(ranks)
        return issue(
            self.run,
            {
                "command": "start",
                "enable": None if en is None else list(en),
                "activity": None if act is None else list(act),
                "for_s": None if for_s is None else float(for_s),
                "ranks": spec.to_json(),
            },
        )

    def stop(self, *, ranks: str | None = None) -> int:
        """Write each process's last window of the period and unsubscribe. Returns the generation."""
        spec = self._targets(ranks)
        return issue(self.run, {"command": "stop", "ranks": spec.to_json()})

    def _targets(self, ranks: str | None) -> RankSpec:
        """The rank spec, checked against the live processes (ControlError if there is no run,
        no live process, or none the spec names)."""
        spec = parse_ranks(ranks)
        procs = self._processes()
        live = [p for p in procs if p["live"]]
        if not live:
            ended = f"all {len(procs)} of its processes have ended" if procs else "no process registered"
            raise ControlError(f"nothing to control in {self.run}: {ended}")
        if not any(spec.matches(p["host"], int(p["rank"])) for p in live):
            have = ", ".join(sorted({f"{p['rank']}@{p['host']}" for p in live})[:8])
            raise ControlError(f"--ranks {spec.text()} names no live rank of the run (live: {have})")
        return spec

    def _processes(self) -> list[dict[str, Any]]:
        if not self.run.is_dir():
            raise ControlError(
                f"no run at {self.run} (start one with "
                "`python -m mspti_lens record --paused --out DIR -- CMD`)"
            )
        if not control_dir(self.run).is_dir():
            raise ControlError(
                f"{self.run} has no controllable run (no {CONTROL_DIR}/ folder: record it with "
                "`python -m mspti_lens record --out DIR -- CMD`)"
            )
        return read_processes(self.run)

    # state
    def latest(self) -> int:
        return latest_issued(self.run)

    def processes(self) -> list[dict[str, Any]]:
        """Every process of the run as its process file says (``live``: on or off, not ended)."""
        return self._processes()

    def status(self):
        """One row per process: host, rank, pid, state, enable, generation applied, last window,
        calls per second, refused (a command file not obeyed, and why), estimated cost."""
        import polars as pl

        rows = []
        for p in self._processes():
            rows.append(
                {
                    "host": p.get("host"),
                    "rank": int(p.get("rank", -1)),
                    "pid": int(p["pid"]),
                    "state": p.get("state"),
                    "enable": ",".join(p.get("enable") or []) if p.get("state") == "on" else "",
                    "generation": int(p.get("generation") or 0),
                    "last_window": p.get("last_window"),
                    "calls_per_s": float(p.get("calls_per_s") or 0.0) if p.get("state") == "on" else 0.0,
                    "cost_pct": cost_pct(p) if p.get("state") == "on" else 0.0,
                    "rank_source": p.get("rank_source"),
                    "refused": (p.get("refused") or {}).get("why"),
                    "live": bool(p["live"]),
                }
            )
        schema = {
            "host": pl.String,
            "rank": pl.Int64,
            "pid": pl.Int64,
            "state": pl.String,
            "enable": pl.String,
            "generation": pl.Int64,
            "last_window": pl.Float64,
            "calls_per_s": pl.Float64,
            "cost_pct": pl.Float64,
            "rank_source": pl.String,
            "refused": pl.String,
            "live": pl.Boolean,
        }
        return pl.DataFrame(rows, schema=schema, orient="row").sort("rank", "host", "pid")

    def pending(self, generation: int | None = None) -> list[dict[str, Any]]:
        """The live processes that have not applied ``generation`` (default: the latest)."""
        gen = self.latest() if generation is None else generation
        return [p for p in self._processes() if p["live"] and int(p.get("generation") or 0) < gen]

    def wait(self, timeout: float, generation: int | None = None) -> list[dict[str, Any]]:
        """Wait until every live process applied ``generation`` (default: the latest); returns
        those that had not after ``timeout`` seconds (empty: all did)."""
        end = time.monotonic() + timeout
        while True:
            left = self.pending(generation)
            if not left or time.monotonic() >= end:
                return left
            time.sleep(0.05)


def cost_pct(p: dict[str, Any]) -> float:
    """The estimated share of a process's time profiling costs: calls/s x cost per call."""
    return float(p.get("calls_per_s") or 0.0) * COST_PER_CALL_NS / 1e9 * 100.0


def cost_sentence(rows: list[dict[str, Any]]) -> str:
    on = [p for p in rows if p.get("state") == "on"]
    if not on:
        return "profiling is off: it costs nothing (no MSPTI subscriber, no callback, no activity buffer)"
    rate = sum(float(p.get("calls_per_s") or 0.0) for p in on) / len(on)
    worst = max(cost_pct(p) for p in on)
    return (
        f"profiling is on in {len(on)} process(es): about {rate:,.0f} calls/s each x "
        f"{COST_PER_CALL_NS:.0f} ns per call = about {rate * COST_PER_CALL_NS / 1e7:.3f} % of a core "
        f"(at most {worst:.3f} %; an estimate, per-call cost from {COST_SOURCE}); "
        "off, it costs nothing"
    )


# -- the command line ----------------------------------------------------------------------------
def add_arguments(p: Any) -> None:
    p.add_argument("dir", help="the run's directory (record's --out)")
    sub = p.add_subparsers(dest="action", required=True)
    s = sub.add_parser("start", help="turn profiling on, or retarget it where it is on")
    s.add_argument("--enable", default=None, help="what to trace, comma-separated (default: record's)")
    s.add_argument(
        "--activity", default=None, metavar="KINDS", help="activity kinds, or 'none' (default: record's)"
    )
    s.add_argument(
        "--for",
        dest="for_s",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop by itself after SECONDS",
    )
    s.add_argument("--ranks", default=None, metavar="SPEC", help="0-3,7 or host=NAME or all (default)")
    t = sub.add_parser("stop", help="write the last window of the period and unsubscribe")
    t.add_argument("--ranks", default=None, metavar="SPEC", help="0-3,7 or host=NAME or all (default)")
    st = sub.add_parser("status", help="a table per process: state, enable set, generation, calls/s")
    st.add_argument(
        "--wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="exit 0 once every live process applied the latest command, non-zero after SECONDS",
    )
    st.add_argument("--json", action="store_true", help="print JSON instead of a table")


def main(args: Any) -> int:
    ctl = RunControl(args.dir)
    if args.action == "start":
        gen = ctl.start(args.enable, args.activity, for_s=args.for_s, ranks=args.ranks)
        print(f"mspti-lens: issued start (generation {gen}) to {parse_ranks(args.ranks).text()} in {ctl.run}")
        return 0
    if args.action == "stop":
        gen = ctl.stop(ranks=args.ranks)
        print(f"mspti-lens: issued stop (generation {gen}) to {parse_ranks(args.ranks).text()} in {ctl.run}")
        return 0
    procs = ctl.processes()  # ControlError for no run
    left: list[dict[str, Any]] = []
    if args.wait is not None:
        if not args.wait >= 0:
            raise ControlError(f"--wait takes seconds >= 0, not {args.wait}")
        left = ctl.wait(args.wait)
        procs = ctl.processes()
    latest = ctl.latest()
    if args.json:
        print(
            json.dumps(
                {
                    "run": str(ctl.run),
                    "latest_generation": latest,
                    "pending": [{"host": p["host"], "rank": p["rank"], "pid": p["pid"]} for p in left],
                    "cost": cost_sentence(procs),
                    "processes": procs,
                },
                default=str,
            )
        )
    else:
        print(status_text(ctl.run, procs, latest))
    if left:
        names = ", ".join(f"rank {p['rank']} on {p['host']} (pid {p['pid']})" for p in left[:10])
        print(
            f"mspti-lens: {len(left)} live process(es) did not apply generation {latest} within "
            f"{args.wait:g} s: {names}",
            file=sys.stderr,
        )
        return 1
    return 0


# Lines other rooms add to `status` about the run (the watch package: its last capture); each
# takes the run's directory and returns a line or None.
STATUS_LINES: list[Callable[[Path], str | None]] = []


def status_text(run: Path, procs: list[dict[str, Any]], latest: int) -> str:
    head = ("host", "rank", "pid", "state", "enable", "gen", "last window", "calls/s", "note")
    rows = []
    for p in sorted(procs, key=lambda p: (int(p.get("rank", 0)), str(p.get("host")), int(p["pid"]))):
        on = p.get("state") == "on"
        lw = p.get("last_window")
        note = []
        if p.get("refused"):
            note.append(f"refused: {p['refused'].get('why')}")
        if p["live"] and int(p.get("generation") or 0) < latest:
            note.append("pending")
        if on and p.get("until"):
            note.append(f"stops in {max(0.0, float(p['until']) - time.time()):.0f} s")
        rows.append(
            (
                str(p.get("host")),
                str(p.get("rank")),
                str(p["pid"]),
                str(p.get("state")),
                ",".join(p.get("enable") or []) if on else "-",
                str(p.get("generation") or 0),
                time.strftime("%H:%M:%S", time.localtime(float(lw))) if lw else "-",
                f"{float(p.get('calls_per_s') or 0):,.0f}" if on else "-",
                "; ".join(note),
            )
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    lines = [f"mspti-lens run {run}: latest command generation {latest}, {len(procs)} process(es)"]
    lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip())
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.append(cost_sentence(procs))
    lines += [line for say in STATUS_LINES if (line := say(run))]
    return "\n".join(lines)
