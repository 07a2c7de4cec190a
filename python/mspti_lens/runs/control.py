"""Steering a recorded job while it runs: ``python -m mspti_lens control DIR start|stop|status``.

Control travels through files of the run directory, nothing else (no daemon, no port), every one
of them made, read and checked by runs/runfiles.py (the run directory's security model):

- ``DIR/control/issued/GGGGGG.json``: every command ever issued, one file per generation, made
  whole and linked into place (``link`` fails if the name exists): two controllers never issue
  the same generation, and generations are consecutive. A command is checked before anything is
  written: known enable names and activity kinds, finite numbers, a non-empty enable set, ranks
  that are live in the run. ``start --for S`` carries ``until``, the wall-clock time it ends.
- Each process reads, in order, every generation above the last it handled, and checks each
  before it acts: a regular file, opened without following a symlink, of the run's user (or of a
  shared run's group), writable by no one else, whose content is a valid command. A command that
  names the process is applied; one that fails a check, or whose start fails (another tool holds
  the subscriber), is refused, and the process file says which generation and why. A start whose
  ``until`` has passed turns nothing on (a DataLoader worker or an elastic restart that registers
  after it, or a process that saw it late). A process that registers after commands were issued
  applies only the last one naming it (the state its peers are in), not their history.
- ``DIR/control/processes/H-pidP.json``: one per recorded process: host, rank, pid, state
  (on/off/ended), the enable set, the generation handled, the last refusal if any, calls per
  second; rewritten (under the same name) whenever the state changes; every
  :data:`HEARTBEAT_S` seconds its modification time is set to now, the heartbeat (one
  ``utime``: rewriting an unchanged row cost a paused process more CPU than its polls).

Each process polls with one ``stat()`` of ``issued/`` every :data:`POLL_S` seconds from a daemon
thread (a new command changes the folder's modification time) and lists it only when that
changed, or every :data:`HEARTBEAT_S` seconds whatever it says (a network filesystem's attribute
cache may hide a change for seconds; a command is then late, never lost).
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..self_cost import ESTIMATE_NS_PER_PAIR, ESTIMATE_SOURCE, drops_text
from . import runfiles
from .runfiles import RunFolder, UntrustedError

CONTROL_DIR = "control"
ISSUED_DIR = "issued"
PROCESSES_DIR = "processes"
POLL_S = 0.25  # a process looks at issued/ this often (one stat call)
HEARTBEAT_S = 5.0  # and rewrites its process file at least this often
# A process file older than this, of a process on another host, is a process that is gone
# (killed with -9, or its host is down); on this host the pid tells at once.
LOST_AFTER_S = 4 * HEARTBEAT_S
COMMANDS = ("start", "stop")
COMMAND_FIELDS = {
    "generation", "command", "enable", "activity", "for_s", "until", "interval_s", "recorder", "ranks",
    "issued", "by",
}  # fmt: skip
# A start's ``recorder: true`` (a capture's): each rank it names first writes its flight recorder's
# fine windows of the seconds before (runs/flight_recorder.py).
# A start's ``interval_s``: the window interval the rank uses while the command holds (a capture's
# fine windows); a start without one puts the rank's own interval back (runs/fine_windows.py).
# Below the bound a window would cost more than it says; above it, it is not a window of a live job.
INTERVAL_BOUNDS_S = (0.1, 3600.0)
MAX_COMMAND_BYTES = 1 << 16
# What profiling costs per call where a process has measured nothing yet (self_cost.py).
COST_PER_CALL_NS = ESTIMATE_NS_PER_PAIR
COST_SOURCE = ESTIMATE_SOURCE


class ControlError(ValueError):
    """A command that cannot be issued (said in one line; nothing was written)."""


# -- paths ---------------------------------------------------------------------------------------
def control_dir(run: str | os.PathLike) -> Path:
    return Path(run) / CONTROL_DIR


def issued_name(generation: int) -> str:
    return f"{generation:06d}.json"


def process_name(host: str, pid: int) -> str:
    return f"{host}-pid{pid}.json"


def process_path(run: str | os.PathLike, host: str, pid: int) -> Path:
    return control_dir(run) / PROCESSES_DIR / process_name(host, pid)


def _folder(run: str | os.PathLike, *parts: str) -> RunFolder:
    return RunFolder(run, CONTROL_DIR, *parts, follow_root=True)


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


def parse_ranks(text: str | int | list[int] | tuple[int, ...] | None) -> RankSpec:
    """``0-3,7``, ``host=NAME`` (several, comma-separated, mixed with ranks), ``all`` or None; or
    a rank (``0``) or a list of ranks (``[0, 1]``)."""
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return RankSpec(((text, text),))
    if isinstance(text, (list, tuple)) and text and all(type(r) is int and r >= 0 for r in text):
        return RankSpec(tuple((r, r) for r in sorted(set(text))))
    if text is not None and not isinstance(text, str):
        raise ControlError(
            f"ranks: {text!r} is not a rank selection; give a rank (0), a list of ranks ([0, 1]) "
            "or text (0-3,7 or host=NAME or all)"
        )
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
def _seconds(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def check_interval(value: Any) -> float:
    """A window interval a command may carry, as float; ValueError in one line if not."""
    low, high = INTERVAL_BOUNDS_S
    if not (_seconds(value) and low <= value <= high):
        raise ValueError(
            f"interval must be a finite number of seconds from {low:g} to {high:g}, not {value!r}"
        )
    return float(value)


def validate_command(data: Any) -> dict[str, Any]:
    """A command's content, checked field by field (it names no path; anything else is refused
    with the reason, in one line)."""
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
        if not data["enable"] and data["command"] == "start":
            raise ValueError("enable is empty: a start must enable something (leave it out for record's set)")
        check_enable(data["enable"])
    if data.get("activity") is not None:
        check_activity(data["activity"])
    f = data.get("for_s")
    if f is not None and not (_seconds(f) and f > 0):
        raise ValueError("for_s is not a finite number of seconds > 0")
    until = data.get("until")
    if until is not None and not (_seconds(until) and until > 0):
        raise ValueError("until is not a finite time")
    if (f is None) != (until is None):
        raise ValueError("for_s and until come together")
    if data.get("interval_s") is not None:
        if data["command"] != "start":
            raise ValueError("interval_s comes with a start")
        check_interval(data["interval_s"])
    if data.get("recorder") is not None:
        if type(data["recorder"]) is not bool or data["command"] != "start":
            raise ValueError("recorder is true or false, and comes with a start")
    for field in ("issued",):
        v = data.get(field)
        if v is not None and not _seconds(v):
            raise ValueError(f"{field} is not a finite time")
    if data.get("by") is not None and not isinstance(data["by"], str):
        raise ValueError("by is not a name")
    RankSpec.from_json(data.get("ranks"))
    return data


def read_issued(folder: RunFolder, generation: int) -> tuple[dict[str, Any] | None, str | None]:
    """(the command, None) or (None, why it is refused, one line): generation ``generation``
    of ``folder`` (the run's control/issued), checked by runfiles (a regular file of the run's
    user, writable by no one else, no symlink followed) and then field by field."""
    name = issued_name(generation)
    try:
        raw = folder.read(name, MAX_COMMAND_BYTES + 1)
    except FileNotFoundError:
        return None, f"{name} is gone"
    except UntrustedError as e:
        return None, f"{name} is refused: {e}"
    except OSError as e:
        return None, f"cannot read {name}: {e.strerror or e}"
    if len(raw) > MAX_COMMAND_BYTES:
        return None, f"{name} is refused: larger than a command can be"
    try:
        cmd = validate_command(json.loads(raw))
    except (ValueError, UnicodeDecodeError) as e:
        return None, f"{name} is refused: {str(e).splitlines()[0]}"
    if cmd["generation"] != generation:
        return None, f"{name} is refused: it says generation {cmd['generation']}"
    return cmd, None


def issued_generations(run: str | os.PathLike) -> list[int]:
    """Every generation issued in the run, in order (names only: each is checked when read)."""
    names = _folder(run, ISSUED_DIR).names("*.json")
    return sorted(int(n[:-5]) for n in names if n[:-5].isdigit())


def latest_issued(run: str | os.PathLike) -> int:
    """The highest generation issued in the run (0: none)."""
    return max(issued_generations(run), default=0)


def writable_run(run: str | os.PathLike) -> RunFolder:
    """The run's root for a controller: ControlError in one line if it cannot be trusted or is
    not this user's (or its shared group's) to steer."""
    try:
        return runfiles.open_run_folder(run, writer=True)
    except UntrustedError as e:
        raise ControlError(f"cannot control the run: {e}") from None
    except OSError as e:
        raise ControlError(f"cannot control the run at {run}: {e.strerror or e}") from None


def issue(run: str | os.PathLike, command: dict[str, Any]) -> int:
    """Issue ``command`` (without a generation) as the next generation; returns it. Its content is
    checked first (ControlError: nothing written). Safe against other controllers issuing at the
    same moment (see the module's docstring)."""
    try:
        validate_command({**command, "generation": 0})
    except ValueError as e:
        raise ControlError(f"not a command: {str(e).splitlines()[0]}") from None
    root = writable_run(run)
    issued = root.child(CONTROL_DIR, ISSUED_DIR)
    try:
        issued.make()
        root.child(CONTROL_DIR, PROCESSES_DIR).make()
        while True:
            gen = max((int(n[:-5]) for n in issued.names("*.json") if n[:-5].isdigit()), default=0) + 1
            data = {**command, "generation": gen, "issued": time.time(), "by": _who()}
            if issued.publish(issued_name(gen), json.dumps(data).encode()):
                return gen
    except UntrustedError as e:
        raise ControlError(f"cannot control the run: {e}") from None
    except PermissionError as e:
        raise ControlError(f"cannot control the run at {run}: {e.strerror or e}") from None


def _who() -> str:
    try:
        user = os.getlogin()
    except OSError:
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()} pid {os.getpid()}"


# -- processes -----------------------------------------------------------------------------------
def is_launcher(p: dict[str, Any]) -> bool:
    """A process without a rank variable that has written no window (made no traced call): the
    job's launcher (``record``'s command, torchrun's agent) or a helper. It obeys commands like
    every process, but it is no rank: no rank count, rank list, error or wait includes it
    (``status`` lists it apart; Run.ranks() leaves it out by its windows)."""
    return p.get("rank_source") == "pid" and not p.get("windows")


def read_processes(run: str | os.PathLike, now: float | None = None) -> list[dict[str, Any]]:
    """Every process file of the run, with ``live`` (False for an ended or lost process) and
    ``launcher`` (:func:`is_launcher`)."""
    now = time.time() if now is None else now
    here = socket.gethostname()
    out = []
    folder = _folder(run, PROCESSES_DIR)
    for name in folder.names("*.json"):
        try:
            with folder.open(name) as f:  # checked: a row another user planted is not read
                row = json.loads(f.read(MAX_COMMAND_BYTES))
                touched = os.fstat(f.fileno()).st_mtime  # the heartbeat between rewrites
        except (OSError, ValueError):
            continue  # being replaced (read it next time), or not the run's own
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
        row["launcher"] = is_launcher(row)
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
def refusal(command: str, e: BaseException) -> str:
    """A failed command as a sentence: the exception's message (an MSPTI error's first argument,
    not its argument tuple) and its kind."""
    text = e.args[0] if e.args and isinstance(e.args[0], str) else str(e)
    text = " ".join(str(text).split()) or type(e).__name__
    return f"could not {command} ({type(e).__name__}): {text}"


class ProcessControl:
    """One recorded process's end of control: its process file and the thread reading the
    run's issued commands. ``apply(command)`` is the recorder's (hook.Recorder): it turns
    profiling on, retargets it or turns it off, and returns nothing; what it did is read from
    ``state()``. A command's ``for_s`` reaches ``apply`` as the seconds left until its ``until``."""

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
        self.generation = generation  # the last generation handled (applied, skipped or refused)
        self.refused: dict[str, Any] | None = None  # the last refusal: generation, why, at
        self._seen: tuple[int, ...] | None = None
        self._listed = 0.0  # when issued/ was last listed
        self._beat = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.path = process_path(self.run, host, self.pid)
        # The job's own trust: a root this process may write (its user's, or a shared group's).
        root = runfiles.open_run_folder(self.run, writer=True)
        self._processes = root.child(CONTROL_DIR, PROCESSES_DIR)
        self._issued = root.child(CONTROL_DIR, ISSUED_DIR)
        self._issued_path = os.fspath(self._issued.path)  # stat'ed 4 times a second: made once
        self.started = time.time()
        self._thread = threading.Thread(target=self._loop, name="mspti-lens-control", daemon=True)

    def start(self) -> ProcessControl:
        self._processes.make()
        self.poll(catch_up=True)
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

    def poll(self, catch_up: bool = False) -> None:
        """One look at issued/ (a stat; listed only when it changed, or every HEARTBEAT_S), then
        every new generation, in order. With ``catch_up`` (a process registering) only the last
        command naming this process is applied: the state its peers are in."""
        self._tick()  # the recorder's own clock: a --for that ran out stops here
        try:
            st = os.stat(self._issued_path, follow_symlinks=False)
        except FileNotFoundError:
            return
        sig = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_nlink)
        now = time.monotonic()
        if sig == self._seen and now - self._listed < HEARTBEAT_S:
            return
        self._seen, self._listed = sig, now
        with self._lock:  # one reader at a time: no generation is handled twice
            try:
                names = self._issued.names("*.json")
            except UntrustedError as e:  # the folder itself: no command in it is obeyed
                self._refuse(None, f"no command is obeyed: {e}")
                self.write()
                return
            gens = sorted(g for n in names if n[:-5].isdigit() and (g := int(n[:-5])) > self.generation)
            if not gens:
                return
            todo: list[dict[str, Any]] = []
            for gen in gens:
                cmd, why = read_issued(self._issued, gen)
                if why is not None:
                    self._refuse(gen, why)
                elif RankSpec.from_json(cmd["ranks"]).matches(self.host, self.rank):  # type: ignore[index]
                    todo.append(cmd)  # type: ignore[arg-type]
            if catch_up:
                todo = todo[-1:]
            for cmd in todo:
                self._run(cmd)
            self.generation = gens[-1]
        self.write()

    def _run(self, cmd: dict[str, Any]) -> None:
        until = cmd.get("until")
        if cmd["command"] == "start" and until is not None:
            left = float(until) - time.time()
            # An expired start turns nothing on: its period is over for every process.
            cmd = {**cmd, "command": "stop"} if left <= 0 else {**cmd, "for_s": left}
        try:
            self._apply(cmd)
        except Exception as e:  # noqa: BLE001 - said in status and to --wait, the program runs on
            self._refuse(cmd["generation"], refusal(cmd["command"], e))
            return
        if self.refused is not None and (self.refused.get("generation") or 0) < cmd["generation"]:
            self.refused = None  # a later command of this process was applied

    def _refuse(self, gen: int | None, why: str) -> None:
        """Record a refusal (the process file says it; status shows it; --wait fails on it)."""
        said = self.refused is not None and self.refused.get("why") == why
        self.refused = {"generation": gen, "why": why, "at": time.time()}
        if not said:  # once per reason on stderr, not every 5 s
            which = f"command {gen}" if gen is not None else "commands"
            print(f"mspti-lens: not obeying {which} of {self.run}: {why}", file=sys.stderr)

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
        try:
            self._processes.write(self.path.name, json.dumps(row).encode())
        except OSError as e:  # status then shows an older heartbeat
            if isinstance(e, UntrustedError):
                print(f"mspti-lens: cannot write this process's status: {e}", file=sys.stderr)
        self._beat = row["heartbeat"]

    def beat(self) -> None:
        """The heartbeat: the process file's modification time set to now (its row is unchanged;
        every change of state rewrites it)."""
        now = time.time()
        try:
            self._processes.set_mtime(self.path.name, now)
        except OSError:
            self.write()  # gone (a cleaned directory): written again
            return
        self._beat = now

    def end(self) -> None:
        """The process is exiting: stop polling, say so in the process file. A process without
        a rank variable that wrote no window (a launcher, a helper) leaves no file."""
        self._stop.set()
        if is_launcher({"rank_source": self.rank_source, "windows": self._state().get("windows")}):
            try:
                self._processes.remove(self.path.name)
            except OSError:
                pass
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


def _rank_key(text: str) -> tuple[int, str]:
    rank, _, host = text.partition("@")
    return (int(rank) if rank.lstrip("-").isdigit() else 0, host)


class RunControl:
    """``open_run(DIR).control``: start, stop and status of the run's processes.

    The Python API of ``control``: ``start(enable=, activity=, for_s=, ranks=)`` and
    ``stop(ranks=)`` issue a command and return its generation; ``wait(timeout, generation)``
    returns the live processes that did not apply it (each with ``why``: ``pending``, or the
    sentence of its refusal). ``ranks`` is a rank (``0``), a list of ranks (``[0, 1]``) or the
    command line's text (``"0-3,7"``, ``"host=NAME"``, ``"all"``; None: all). A command that
    cannot be issued raises :class:`ControlError` (a ValueError) in one line, and writes nothing.
    """

    def __init__(self, run: str | os.PathLike):
        self.run = Path(os.fspath(run).removeprefix("file://"))

    # commands
    def start(
        self,
        enable: list[str] | str | None = None,
        activity: list[str] | str | None = None,
        *,
        for_s: float | None = None,
        ranks: str | int | list[int] | None = None,
        interval_s: float | None = None,
        recorder: bool = False,
    ) -> int:
        """Turn profiling on (a paused process subscribes) or retarget it (a running process
        keeps counting what stays enabled), until stopped or for ``for_s`` seconds from now (an
        absolute end: a process that registers after it does not turn on), with windows every
        ``interval_s`` seconds while it holds (None: the rank's own interval); ``recorder``: each
        rank writes its flight recorder first (a capture's). Returns the command's generation."""
        en = split_list(enable) if isinstance(enable, str) else enable
        act = split_list(activity) if isinstance(activity, str) else activity
        if en is not None:
            if not isinstance(en, (list, tuple)) or not all(isinstance(x, str) for x in en):
                raise ControlError(f"enable: {enable!r} is not a list of names")
            if not en:
                raise ControlError(
                    "--enable names nothing: give domains (runtime, hccl) or callbacks, or leave it "
                    "out for record's set; `control DIR stop` turns profiling off"
                )
            check_enable(list(en))
        if act is not None:
            if not isinstance(act, (list, tuple)) or not all(isinstance(x, str) for x in act):
                raise ControlError(f"activity: {activity!r} is not a list of kinds")
            check_activity(list(act))
        if for_s is not None and not (_seconds(for_s) and for_s > 0):
            raise ControlError(f"--for must be a finite number of seconds > 0, not {for_s!r}")
        if interval_s is not None:
            try:
                interval_s = check_interval(interval_s)
            except ValueError as e:
                raise ControlError(f"--{e}") from None
        spec = self._targets(ranks)
        return issue(
            self.run,
            {
                "command": "start",
                "enable": None if en is None else list(en),
                "activity": None if act is None else list(act),
                "for_s": None if for_s is None else float(for_s),
                "until": None if for_s is None else time.time() + float(for_s),
                "interval_s": interval_s,
                "recorder": True if recorder else None,
                "ranks": spec.to_json(),
            },
        )

    def stop(self, *, ranks: str | int | list[int] | None = None) -> int:
        """Write each process's last window of the period and unsubscribe. Returns the generation."""
        spec = self._targets(ranks)
        return issue(self.run, {"command": "stop", "ranks": spec.to_json()})

    def _targets(self, ranks: str | int | list[int] | None) -> RankSpec:
        """The rank spec, checked against the live processes (ControlError if there is no run,
        no live process, or a rank or host it names has no live process), and the run checked
        as one this user may steer."""
        spec = parse_ranks(ranks)
        procs = self._processes()
        live = [p for p in procs if p["live"]]
        if not live:
            ended = f"all {len(procs)} of its processes have ended" if procs else "no process registered"
            raise ControlError(f"nothing to control in {self.run}: {ended}")
        # A launcher follows every command for all (a host's too), but no rank names it.
        ranked = [p for p in live if not p["launcher"]]
        have = ", ".join(sorted({f"{p['rank']}@{p['host']}" for p in ranked}, key=_rank_key)[:16]) or "none"
        launchers = len(live) - len(ranked)
        if launchers:
            have += f"; not a rank: {launcher_text(launchers)}"
        ranks_live = {int(p["rank"]) for p in ranked}
        hosts_live = {str(p["host"]) for p in live}
        missing = [f"host={h}" for h in spec.hosts if h not in hosts_live]
        for a, b in spec.ranks:
            gone = [r for r in range(a, min(b, a + 1_000_000) + 1) if r not in ranks_live]
            missing += [str(r) for r in gone[:4]] + (["..."] if len(gone) > 4 else [])
        if missing:
            raise ControlError(
                f"--ranks {spec.text()} names {', '.join(missing)}: no live rank of the run (live: {have})"
            )
        writable_run(self.run)
        return spec

    def _processes(self) -> list[dict[str, Any]]:
        if not self.run.is_dir():
            raise ControlError(
                f"no run at {self.run} (start one with "
                "`python -m mspti_lens record --paused --out DIR -- CMD`)"
            )
        try:
            if not control_dir(self.run).is_dir():
                raise ControlError(
                    f"{self.run} has no controllable run (no {CONTROL_DIR}/ folder: record it with "
                    "`python -m mspti_lens record --out DIR -- CMD`)"
                )
            return read_processes(self.run)
        except UntrustedError as e:
            raise ControlError(f"cannot control the run: {e}") from None
        except OSError as e:
            raise ControlError(
                f"cannot read the run at {self.run}: {e.strerror or e} (a run is its user's: run "
                "control as that user)"
            ) from None

    # state
    def latest(self) -> int:
        return latest_issued(self.run)

    def processes(self, launchers: bool = False) -> list[dict[str, Any]]:
        """Every rank's process as its process file says (``live``: on or off, not ended); with
        ``launchers``, the launchers and helpers too (:func:`is_launcher`: no rank)."""
        return [p for p in self._processes() if launchers or not p["launcher"]]

    def status(self):
        """One row per process: host, rank, pid, state, enable, generation applied, last window,
        calls per second, refused (a command file not obeyed, and why), cost (``cost_pct``: measured
        by the process, or ``cost_source`` "estimate" where it measured nothing yet), mspti-lens's own
        CPU seconds so far and the records it dropped."""
        import polars as pl

        rows = []
        for p in self.processes():
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
                    "cost_source": cost_source(p),
                    "self_cpu_s": float(_cost(p).get("cpu_s") or 0.0),
                    "dropped": int(_cost(p).get("records_dropped") or 0),
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
            "cost_source": pl.String,
            "self_cpu_s": pl.Float64,
            "dropped": pl.Int64,
            "rank_source": pl.String,
            "refused": pl.String,
            "live": pl.Boolean,
        }
        return pl.DataFrame(rows, schema=schema, orient="row").sort("rank", "host", "pid")

    def pending(self, generation: int | None = None) -> list[dict[str, Any]]:
        """The live processes that have not handled ``generation`` (default: the latest) or
        every command before it (each process reads them in order), and those whose last command
        up to it was refused; each row with ``why``: "pending" or the refusal's sentence."""
        gen = self.latest() if generation is None else generation
        out = []
        for p in self.processes():
            if not p["live"]:
                continue
            refused = p.get("refused") or {}
            if int(p.get("generation") or 0) < gen:
                out.append({**p, "why": "pending"})
            elif refused and int(refused.get("generation") or 0) <= gen:
                which = f"command {refused['generation']}" if refused.get("generation") else "commands"
                out.append({**p, "why": f"refused {which}: {refused.get('why')}"})
        return out

    def wait(self, timeout: float, generation: int | None = None) -> list[dict[str, Any]]:
        """Wait until every live process handled ``generation`` (default: the latest) and every
        command before it; returns those that had not after ``timeout`` seconds or refused theirs
        (see :meth:`pending`; empty: all applied theirs)."""
        end = time.monotonic() + timeout
        while True:
            left = self.pending(generation)
            if all(p["why"] != "pending" for p in left) or time.monotonic() >= end:
                return left
            time.sleep(0.05)


def _cost(p: dict[str, Any]) -> dict[str, Any]:
    """The process's own self-cost reading (self_cost.measure, in its process file), or {}."""
    c = p.get("self_cost")
    return c if isinstance(c, dict) else {}


def cost_source(p: dict[str, Any]) -> str:
    """ "measured" where the process timed its callbacks, else "estimate"."""
    return "measured" if _cost(p).get("measured") else "estimate"


def ns_per_call(p: dict[str, Any]) -> float:
    """The cost per call the process measured, or the estimate where it measured nothing yet."""
    c = _cost(p)
    return float(c["ns_per_pair"]) if c.get("measured") else COST_PER_CALL_NS


def cost_pct(p: dict[str, Any]) -> float:
    """The share of a core the process's callbacks take: calls/s x its cost per call (measured,
    or the estimate where nothing was measured yet)."""
    return float(p.get("calls_per_s") or 0.0) * ns_per_call(p) / 1e9 * 100.0


def cost_sentence(rows: list[dict[str, Any]]) -> str:
    """What profiling costs the run's ranks now (a launcher, no rank, is not counted)."""
    rows = [p for p in rows if not is_launcher(p)]
    lost = [
        f"rank {p.get('rank')} on {p.get('host')}: {drops_text(_cost(p))}"
        for p in rows
        if drops_text(_cost(p))
    ]
    busy = [f"rank {p.get('rank')} on {p.get('host')}" for p in rows if _cost(p).get("subscriber_busy")]
    tail = "".join(
        [
            f"; {'; '.join(lost[:5])}" if lost else "",
            f"; MSPTI's subscriber slot held by another tool in {', '.join(busy[:5])}" if busy else "",
        ]
    )
    on = [p for p in rows if p.get("state") == "on"]
    if not on:
        return (
            "profiling is off: it costs nothing (no MSPTI subscriber, no callback, no activity buffer)" + tail
        )
    rate = sum(float(p.get("calls_per_s") or 0.0) for p in on) / len(on)
    worst = max(cost_pct(p) for p in on)
    measured = [p for p in on if cost_source(p) == "measured"]
    cpu = sum(float(_cost(p).get("cpu_s") or 0.0) for p in rows)
    if measured:
        per_call = sum(ns_per_call(p) for p in measured) / len(measured)
        how = f"{per_call:.1f} ns per call measured by {len(measured)} of them" + (
            f" (the others: {COST_PER_CALL_NS:.0f} ns, an estimate)" if len(measured) < len(on) else ""
        )
    else:
        per_call = COST_PER_CALL_NS
        how = f"{COST_PER_CALL_NS:.0f} ns per call, an estimate ({COST_SOURCE}): nothing measured yet"
    return (
        f"profiling is on in {len(on)} process(es): about {rate:,.0f} calls/s each x {how} = about "
        f"{rate * per_call / 1e7:.3f} % of a core (at most {worst:.3f} %); mspti-lens's own CPU so far "
        f"{cpu:.3f} s (callbacks, drain, writer); off, it costs nothing" + tail
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
    s.add_argument(
        "--interval",
        dest="interval_s",
        type=float,
        default=None,
        metavar="SECONDS",
        help="window interval while this start holds (default: the rank's own, record's --interval)",
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
        help="exit 0 once every live process applied its commands up to the latest; non-zero, naming "
        "each rank and why, when one refused its command or after SECONDS",
    )
    st.add_argument("--json", action="store_true", help="print JSON instead of a table")


def main(args: Any) -> int:
    ctl = RunControl(args.dir)
    if args.action == "start":
        gen = ctl.start(
            args.enable, args.activity, for_s=args.for_s, ranks=args.ranks, interval_s=args.interval_s
        )
        print(f"mspti-lens: issued start (generation {gen}) to {parse_ranks(args.ranks).text()} in {ctl.run}")
        return 0
    if args.action == "stop":
        gen = ctl.stop(ranks=args.ranks)
        print(f"mspti-lens: issued stop (generation {gen}) to {parse_ranks(args.ranks).text()} in {ctl.run}")
        return 0
    procs = ctl.processes(launchers=True)  # ControlError for no run
    left: list[dict[str, Any]] = []
    if args.wait is not None:
        if not args.wait >= 0:
            raise ControlError(f"--wait takes seconds >= 0, not {args.wait}")
        left = ctl.wait(args.wait)
        procs = ctl.processes(launchers=True)
    latest = ctl.latest()
    if args.json:
        print(
            json.dumps(
                {
                    "run": str(ctl.run),
                    "latest_generation": latest,
                    "pending": [
                        {"host": p["host"], "rank": p["rank"], "pid": p["pid"], "why": p["why"]} for p in left
                    ],
                    "cost": cost_sentence(procs),
                    "processes": procs,
                },
                default=str,
            )
        )
    else:
        print(status_text(ctl.run, procs, latest))
    waiting = [p for p in left if p["why"] == "pending"]
    if waiting:
        names = ", ".join(f"rank {p['rank']} on {p['host']} (pid {p['pid']})" for p in waiting[:10])
        print(
            f"mspti-lens: {len(waiting)} live process(es) did not apply generation {latest} within "
            f"{args.wait:g} s: {names}",
            file=sys.stderr,
        )
    for p in [p for p in left if p["why"] != "pending"][:10]:
        print(f"mspti-lens: rank {p['rank']} on {p['host']} (pid {p['pid']}) {p['why']}", file=sys.stderr)
    return 1 if left else 0


# Lines other rooms add to `status` about the run (the watch package: its last capture); each
# takes the run's directory and returns a line or None.
STATUS_LINES: list[Callable[[Path], str | None]] = []


def launcher_text(n: int) -> str:
    return f"{n} launcher process{'es' if n != 1 else ''} (no rank variable, no traced call)"


def status_text(run: Path, procs: list[dict[str, Any]], latest: int) -> str:
    head = ("host", "rank", "pid", "state", "enable", "gen", "last window", "calls/s", "cost", "note")
    rows = []
    launchers = [p for p in procs if is_launcher(p)]
    procs = [p for p in procs if not is_launcher(p)]
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
        if drops_text(_cost(p)):
            note.append(drops_text(_cost(p)))
        if _cost(p).get("subscriber_busy"):
            note.append("MSPTI's subscriber slot held by another tool")
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
                (f"{cost_pct(p):.3f} %" + (" est." if cost_source(p) == "estimate" else "")) if on else "-",
                "; ".join(note),
            )
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    lines = [f"mspti-lens run {run}: latest command generation {latest}, {len(procs)} rank process(es)"]
    lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip())
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    if launchers:  # they follow the commands too, but are no rank: apart, and in no count
        which = ", ".join(f"pid {p['pid']} on {p.get('host')} ({p.get('state')})" for p in launchers[:5])
        lines.append(f"not ranks: {launcher_text(len(launchers))}: {which}")
    lines.append(cost_sentence(procs))
    lines += [line for say in STATUS_LINES if (line := say(run))]
    return "\n".join(lines)
