"""Captures: when a rule fires, turn on what explains the moment on the ranks it names, for a
bounded time, then put each rank back exactly as it was; keep it all in one folder of the run.

The path of a capture, all through the run directory (no port, no daemon):

1. The rule fires (watch/evaluate.py) on the watcher. It checks the rule's cool-down (no capture
   of the same rule in the last ``cooldown_s``, read from the captures on disk, so two watchers
   and a restarted one agree) and the budget (captures in the last hour, bytes under
   ``captures/``; past either it says so once and keeps watching).
2. It claims the run's one capture slot: ``captures/.active``, created with O_EXCL (two watchers
   never capture at once, nor the same event twice). The claim holds the capture's folder and
   each rank's state before it, so a watcher that is restarted finishes a capture a dead one left.
3. ``RunControl.start(enable=..., activity=kernel,communication,marker + what was on,
   for_s=for_s + RESTORE_MARGIN_S, interval_s=interval_s, ranks=...)``: the ranks record activity
   records joined to their launches, in windows of ``interval_s`` (fine: a second by default)
   while the command holds (runs/fine_windows.py). The ``for_s`` margin is a dead man's switch:
   a watcher killed mid-capture leaves the ranks to stop by themselves (off, not their prior
   state: a restarted watcher restores that). The command says ``recorder: true``: each rank
   first writes its flight recorder's fine windows of the seconds before (runs/flight_recorder.py).
4. What happened before the trigger, once the command is out (so reading it delays nothing): the
   implicated ranks' last ``before`` windows already on disk (their slowest calls and device
   records) are linked into ``before/``.
5. After ``for_s``: each rank goes back to its prior state and interval (one command per distinct
   prior state, issued together: every rank reads every command in order and applies those
   naming it; then all acknowledged; a command without ``interval_s`` gives a rank its own
   interval back, exactly), then the windows written during the capture are linked into
   ``during/``, their device records gathered (``device.parquet``), a Perfetto trace drawn across
   the ranks (``trace.json``, export/perfetto.py), and the capture compared with the baseline
   (``comparison.parquet``: ``Snapshot.diff`` of the baseline windows and the capture's).
6. ``capture.json`` says it all (rule, value, baseline, ranks, fired_at, the commands, the prior
   states, the files, bytes); the claim is removed.

Every file of it is made, read, linked and removed through runs/runfiles.py (the run directory's
security model): a name another user planted under ``captures/`` is refused, never followed.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import polars as pl

from ..runs import runfiles
from ..runs.control import CONTROL_DIR, HEARTBEAT_S, STATUS_LINES, ControlError, RunControl
from ..runs.flight_recorder import DEFAULT_INTERVAL_S, FLIGHT_NAME, MAX_WINDOWS, WATCHED_FILE, watched_marker
from ..runs.run import list_windows
from ..runs.writer import WINDOW_NAME, events_name
from ..snapshot import Snapshot
from .evaluate import Transition, merge_windows
from .source import window_events

CAPTURES_DIR = "captures"
CLAIM = ".active"
CAPTURE_FILE = "capture.json"
#: What a capture turns on, beside what each rank already records.
CAPTURE_ACTIVITY = ("kernel", "communication", "marker")
RESTORE_MARGIN_S = 60.0  # the capture's --for beyond its length: ranks stop by themselves then
ACK_TIMEOUT_S = 10.0  # how long a restore waits for each command's acknowledgement


@dataclass(frozen=True)
class CapturePolicy:
    """How long a capture lasts and how many the watcher may take (README: Catch a slowdown)."""

    for_s: float = 10.0  #: seconds the ranks record the capture's activity
    cooldown_s: float = 600.0  #: no second capture of one rule within this
    per_hour: int = 6  #: captures a run may take in any hour
    max_bytes: int = 1 << 30  #: bytes under captures/ past which no capture starts
    before: int = 3  #: windows before the trigger kept per rank (the flight recorder)
    interval_s: float | None = 1.0  #: window interval on the ranks during a capture (None: theirs)
    #: fine windows (of ``interval_s``) each rank keeps while watched: the flight recorder (0: none)
    recorder_windows: int = 10

    def __post_init__(self) -> None:
        for name in ("for_s", "cooldown_s"):
            v = getattr(self, name)
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or v < 0
                or (name == "for_s" and v == 0)
            ):
                raise ValueError(f"capture {name} is a number of seconds > 0, not {v!r}")
        if self.interval_s is not None:
            from ..runs.control import check_interval

            try:
                check_interval(self.interval_s)
            except ValueError as e:
                raise ValueError(f"capture {e}") from None
        for name in ("per_hour", "max_bytes", "before", "recorder_windows"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"capture {name} is an int >= 0, not {v!r}")
        if self.recorder_windows > MAX_WINDOWS:
            raise ValueError(
                f"capture recorder_windows is at most {MAX_WINDOWS}, not {self.recorder_windows}"
            )


def captures_dir(root: str | os.PathLike) -> Path:
    return Path(root) / CAPTURES_DIR


def captures_folder(root: str | os.PathLike, *, writer: bool = False) -> runfiles.RunFolder:
    """The run's ``captures/`` (runs/runfiles.py): for a ``writer``, the run's root checked as
    one this process may write into (UntrustedError in one line if not)."""
    if writer:
        return runfiles.open_run_folder(root, writer=True).child(CAPTURES_DIR)
    return runfiles.RunFolder(root, CAPTURES_DIR, follow_root=True)


def read_captures(root: str | os.PathLike) -> list[dict[str, Any]]:
    """Every capture of the run as its capture.json says, oldest first (unreadable or untrusted
    ones left out: one being written is read next time)."""
    out = []
    folder = captures_folder(root)
    try:
        names = folder.names()
    except runfiles.UntrustedError:
        names = []  # captures/ is not the run's: nothing in it is read
    for name in names:
        with contextlib.suppress(OSError, ValueError):
            c = folder.child(name).read_json(CAPTURE_FILE)
            if isinstance(c, dict) and "rule" in c:
                c["path"] = str(folder.path / name)
                out.append(c)
    return sorted(out, key=lambda c: float(c.get("fired_at") or 0.0))


CAPTURE_SCHEMA: dict[str, Any] = {
    "fired_at": pl.Datetime("us", "UTC"),
    "rule": pl.String,
    "value": pl.Float64,
    "baseline": pl.Float64,
    "ranks": pl.List(pl.Int64),
    "subject": pl.String,
    "state": pl.String,
    "note": pl.String,
    "bytes": pl.Int64,
    "path": pl.String,
}


def captures_frame(root: str | os.PathLike) -> pl.DataFrame:
    """``open_run(DIR).captures()``: one row per capture (CAPTURE_SCHEMA), oldest first."""
    rows = [
        {
            "fired_at": int(float(c.get("fired_at") or 0.0) * 1e6),
            "rule": c.get("rule"),
            "value": c.get("value"),
            "baseline": c.get("baseline"),
            "ranks": [int(r) for _, r in c.get("ranks") or []],
            "subject": c.get("subject"),
            "state": c.get("state"),
            "note": c.get("note"),
            "bytes": int(c.get("bytes") or 0),
            "path": c["path"],
        }
        for c in read_captures(root)
    ]
    df = pl.DataFrame(rows, schema={**CAPTURE_SCHEMA, "fired_at": pl.Int64}, orient="row")
    return df.with_columns(pl.col("fired_at").cast(pl.Datetime("us")).dt.replace_time_zone("UTC"))


def last_capture_line(root: Path) -> str | None:
    """``control status``'s line about the run's latest capture, or None without one."""
    caps = read_captures(root)
    if not caps:
        return None
    c = caps[-1]
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(c.get("fired_at") or 0.0)))
    ranks = ",".join(str(r) for _, r in c.get("ranks") or [])
    return f"last capture: {c['rule']} fired {when} on rank(s) {ranks} ({c.get('state')}): {c['path']}"


STATUS_LINES.append(last_capture_line)


def _json(data: dict[str, Any]) -> bytes:
    return json.dumps(data, indent=1, default=str).encode()


def _rank_spec(ranks: Sequence[tuple[str, int]]) -> str:
    return ",".join(str(r) for r in sorted({r for _, r in ranks}))


class Capturer:
    """Takes the captures of one watcher (see the module's docstring). ``say`` hears one line per
    capture started, finished or refused."""

    def __init__(
        self,
        root: str | os.PathLike,
        policy: CapturePolicy | None = None,
        *,
        say: Callable[[str], Any] = print,
        baseline_of: Callable[[Sequence[str]], Snapshot | None] | None = None,
    ):
        self.root = Path(root)
        self.policy = policy or CapturePolicy()
        self.say = say
        self.baseline_of = baseline_of
        self.control = RunControl(self.root)
        self._run_folder: runfiles.RunFolder | None = None
        self.active: dict[str, Any] | None = None  # the capture this watcher runs
        self._folder: runfiles.RunFolder | None = None  # its folder
        self._refused: set[tuple[str, str]] = set()  # (rule, why) said once
        self._beaten = 0.0  # when the run's watched marker was last written or touched
        self._marked = False  # written once by this watcher (then only touched)

    @property
    def run_folder(self) -> runfiles.RunFolder:
        """The run's root, checked as one this process may write into (on first use)."""
        if self._run_folder is None:
            self._run_folder = runfiles.open_run_folder(self.root, writer=True)
        return self._run_folder

    @property
    def files(self) -> runfiles.RunFolder:
        """The run's ``captures/`` (see :attr:`run_folder`)."""
        return self.run_folder.child(CAPTURES_DIR)

    # -- start -----------------------------------------------------------------------------------
    def consider(self, t: Transition, now: float | None = None) -> Path | None:
        """A firing transition: start a capture if the cool-down, the budget and the run's one
        slot allow; its folder, or None (said why, once per rule and reason)."""
        if t.after != "firing":
            return None
        rule = t.rule.text()
        folder, why = self.take(t, now)
        if why is not None and (rule, why.split(":")[0]) not in self._refused:
            self._refused.add((rule, why.split(":")[0]))
            self.say(f"no capture for {rule!r}: {why}")
        return folder

    def take(self, t: Transition, now: float | None = None) -> tuple[Path | None, str | None]:
        """Start a capture of ``t`` on its ranks unless the cool-down, the budget or the run's
        one slot forbids it: (its folder, None), or (None, why not: a sentence that starts with
        ``cool-down:`` when only time will allow it)."""
        now = time.time() if now is None else now
        why = self.refusal(t.rule.text(), now)
        if why is not None:
            return None, why
        folder = self._claim(t, now)
        if isinstance(folder, str):
            return None, folder
        try:
            self._start(t, folder, now)
        except Exception:
            self._release()
            raise
        return folder.path, None

    def refusal(self, rule: str, now: float) -> str | None:
        """Why a capture of ``rule`` may not start at ``now`` (one clause), or None. The cool-down
        counts from each capture's start (its claim), read from the captures on disk."""
        if self.active is not None:
            return "a capture is running (one at a time per run)"
        past = read_captures(self.root)
        last = [c for c in past if c.get("rule") == rule]
        when = [float(c.get("claimed_at") or c.get("fired_at") or 0.0) for c in last]
        if when and now - max(when) < self.policy.cooldown_s:
            return f"cool-down: captured {now - max(when):.0f} s ago ({last[-1]['path']})"
        hour = [c for c in past if now - float(c.get("claimed_at") or c.get("fired_at") or 0.0) < 3600.0]
        if len(hour) >= self.policy.per_hour:
            most = self.policy.per_hour
            return f"over budget: {len(hour)} captures in the last hour (at most {most}); watching on"
        used = self.files.size()
        if used >= self.policy.max_bytes:
            return f"over budget: {used:,} bytes of captures (at most {self.policy.max_bytes:,}); watching on"
        return None

    def _claim(self, t: Transition, now: float) -> runfiles.RunFolder | str:
        """The run's one capture slot (``captures/.active``, created only if absent) and a new
        folder for the capture; or why not."""
        captures = self.files
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        name = f"{stamp}-{t.rule.slug()}"
        n = 1
        while captures.child(name).exists():  # two captures in one second (another rule)
            n += 1
            name = f"{stamp}-{t.rule.slug()}-{n}"
        claim = {"folder": name, "pid": os.getpid(), "node": socket.gethostname(), "claimed": now}
        if not captures.publish(CLAIM, _json(claim)):
            return f"another capture of this run is running ({captures.path / CLAIM})"
        try:
            return captures.child(name).make()
        except BaseException:
            self._release()
            raise

    def _start(self, t: Transition, folder: runfiles.RunFolder, now: float) -> None:
        ranks = sorted(set(t.ranks))
        procs = [p for p in self._processes() if p.get("live") and (p["host"], int(p["rank"])) in ranks]
        prior = [
            {
                "host": p["host"],
                "rank": int(p["rank"]),
                "pid": int(p["pid"]),
                "state": p.get("state"),
                "enable": list(p.get("enable") or []),
                "activity": list(p.get("activity") or []),
                "until": p.get("until"),  # a `start --for` running: it keeps its end
                "interval_s": p.get("interval_s"),
                "own_interval_s": p.get("own_interval_s"),
            }
            for p in procs
        ]
        enable = sorted({e for p in prior if p["state"] == "on" for e in p["enable"]}) or None
        activity = sorted(
            {a for p in prior if p["state"] == "on" for a in p["activity"]} | set(CAPTURE_ACTIVITY)
        )
        # Finer windows only: a rank whose windows are already as fine keeps its own.
        fine = self.policy.interval_s
        if fine is not None and all(float(p.get("interval_s") or math.inf) <= fine for p in prior):
            fine = None
        note, generation = None, None
        try:
            generation = self.control.start(
                enable,
                activity,
                for_s=self.policy.for_s + RESTORE_MARGIN_S,
                ranks=_rank_spec(ranks),
                interval_s=fine,
                recorder=bool(self.policy.recorder_windows),
            )
        except ControlError as e:
            note = f"activity not turned on: {e}"
        issued_at = time.time()
        # The windows before, linked once the command is out: reading them must not delay it.
        try:
            before = self._flight_recorder(ranks, folder, t.at)
        except Exception as e:  # noqa: BLE001 - the command is out: the capture goes on without them
            before, note = [], ((note or "") + f" no windows before: {e}").strip()
        started = now  # the command was issued now (a test's clock is its own)
        self.active = {
            "rule": t.rule.text(),
            "subject": t.subject,
            "window": t.window,
            "value": t.value,
            "baseline": t.baseline,
            "ranks": [list(r) for r in ranks],
            "fired_at": t.at,
            "claimed_at": now,
            "started": started,
            "issued_at": issued_at,  # wall clock when the command was written
            "until": started + self.policy.for_s,
            "state": "running",
            "note": note,
            "policy": asdict(self.policy),
            "commands": [
                {
                    "generation": generation,
                    "command": "start",
                    "enable": enable,
                    "activity": activity,
                    "interval_s": fine,
                }
            ],
            "prior": prior,
            "before": before,
            "watcher": {"pid": os.getpid(), "node": socket.gethostname()},
        }
        self._folder = folder
        folder.write(CAPTURE_FILE, _json(self.active))
        who = ", ".join(f"rank {r} ({h})" for h, r in ranks)
        self.say(f"capture started: {t.rule.text()} on {who} for {self.policy.for_s:g} s -> {folder.path}")

    def _processes(self) -> list[dict[str, Any]]:
        try:
            return self.control.processes()
        except ControlError:
            return []

    def _flight_recorder(
        self, ranks: list[tuple[str, int]], folder: runfiles.RunFolder, at: float
    ) -> list[str]:
        """Link each rank's last ``before`` windows ending by ``at`` (and their device records)
        into ``before/``: what happened before the trigger."""
        out = []
        for host, rank, items in self._rank_windows(ranks):
            done = [x for x in items if x[2].window.end is not None and x[2].window.end <= at + 1e-6]
            for source, name, _ in done[-self.policy.before :] if self.policy.before else []:
                out += _keep(source, name, folder, "before", host, rank)
        return out

    def _rank_windows(
        self, ranks: Sequence[tuple[str, int]]
    ) -> list[tuple[str, int, list[tuple[runfiles.RunFolder, str, Snapshot]]]]:
        """Each rank's single windows on disk, oldest first, loaded: (its folder, its name, it)."""
        want = set(ranks)
        root = self.run_folder
        found: dict[tuple[str, int], list[tuple[runfiles.RunFolder, str, Snapshot]]] = {}
        for p in list_windows(str(self.root)):
            host_dir, rank_dir, name = Path(p).parts[-3:]
            host, rank = host_dir.removeprefix("host="), rank_dir.removeprefix("rank=")
            if not WINDOW_NAME.match(name) or not rank.lstrip("-").isdigit() or (host, int(rank)) not in want:
                continue
            source = root.child(host_dir, rank_dir)
            with contextlib.suppress(Exception):  # gone (compacted), unreadable or untrusted: not kept
                found.setdefault((host, int(rank)), []).append(
                    (source, name, source.read_with(name, Snapshot.load))
                )
        out: list[tuple[str, int, list[tuple[runfiles.RunFolder, str, Snapshot]]]] = []
        for (host, number), items in sorted(found.items()):
            items.sort(key=lambda x: float(x[2].window.end or 0.0))
            out.append((host, number, items))
        return out

    # -- finish ----------------------------------------------------------------------------------
    def tick(self, now: float | None = None, *, force: bool = False) -> Path | None:
        """Finish the running capture once its time is up (or now, ``force``: the job ended):
        its folder, or None."""
        self.watching()
        if self.active is None:
            return None
        now = time.time() if now is None else now
        if not force and now < float(self.active["until"]):
            return None
        folder = self._folder
        assert folder is not None
        try:
            self._restore(self.active)
            self._finish(self.active, folder)
        finally:
            self.active = None
            self._release()
        return folder.path

    def watching(self) -> None:
        """Keep the run marked as watched (runs/flight_recorder.py: ``control/watched.json``, its
        modification time the heartbeat, every HEARTBEAT_S), so that its ranks keep their last
        seconds in fine windows. A run without control (no ranks to tell) is left alone."""
        now = time.time()
        if not self.policy.recorder_windows or now - self._beaten < HEARTBEAT_S:
            return
        self._beaten = now
        try:
            control = self.run_folder.child(CONTROL_DIR)
            if not control.exists():
                return
            if self._marked:
                control.set_mtime(WATCHED_FILE, now)
                return
            marker = watched_marker(
                self.policy.recorder_windows, self.policy.interval_s or DEFAULT_INTERVAL_S
            )
            control.write(
                WATCHED_FILE, _json({**marker, "watcher": {"pid": os.getpid(), "node": socket.gethostname()}})
            )
            self._marked = True
        except OSError as e:
            self._marked = False  # removed meanwhile: written again next time
            if ("watched", "marker") not in self._refused:
                self._refused.add(("watched", "marker"))
                self.say(f"the ranks keep no flight recorder: cannot mark the run watched ({e})")

    def _flight(self, cap: dict[str, Any], folder: runfiles.RunFolder) -> list[str]:
        """The fine windows each rank's flight recorder wrote for this capture's start (the
        seconds before it), moved into ``before/``."""
        generation = (cap["commands"][0] if cap["commands"] else {}).get("generation")
        if generation is None:
            return []
        out = []
        for host, rank in sorted({(h, int(r)) for h, r in cap["ranks"]}):
            source = self.run_folder.child(f"host={host}", f"rank={rank}")
            with contextlib.suppress(OSError):  # no folder yet, or not the run's: nothing kept
                for name in sorted(source.names("flight-*.parquet")):
                    m = FLIGHT_NAME.match(name)
                    if m and int(m.group(1)) == generation:
                        into = folder.child("before", f"host={host}", f"rank={rank}")
                        into.link_from(source, name)
                        source.remove(name)  # the capture holds it now
                        out.append("/".join((*into.parts[len(folder.parts) :], name)))
        return out

    def _restore(self, cap: dict[str, Any]) -> None:
        """Each rank back to its state before the capture: one command per distinct prior state,
        all issued, then acknowledged together (every rank reads every command in order and
        applies those that name it, so a command for other ranks takes nothing from it)."""
        groups: dict[tuple, list[tuple[str, int]]] = {}
        now = time.time()
        for p in cap["prior"]:
            until = p.get("until")
            left = None if until is None else round(float(until) - now, 3)
            state = "off" if left is not None and left <= 0 else p["state"]  # its --for ran out meanwhile
            # An interval another command had set is asked for again; the rank's own needs no asking.
            interval = p.get("interval_s")
            held = interval if state == "on" and interval != p.get("own_interval_s") else None
            key = (state, tuple(p["enable"]), tuple(p["activity"]), left if state == "on" else None, held)
            groups.setdefault(key, []).append((p["host"], int(p["rank"])))
        issued: list[dict[str, Any]] = []
        for (state, enable, activity, left, held), ranks in sorted(groups.items(), key=lambda kv: str(kv[0])):
            try:
                if state == "on":
                    g = self.control.start(
                        list(enable), list(activity), for_s=left, ranks=_rank_spec(ranks), interval_s=held
                    )
                    cmd = {
                        "command": "start",
                        "enable": list(enable),
                        "activity": list(activity),
                        "for_s": left,
                        "interval_s": held,
                    }
                else:
                    g = self.control.stop(ranks=_rank_spec(ranks))
                    cmd = {"command": "stop"}
            except ControlError as e:  # the ranks ended meanwhile: nothing to restore
                cap["commands"].append({"command": "restore", "ranks": _rank_spec(ranks), "skipped": str(e)})
                continue
            issued.append({"generation": g, **cmd, "ranks": _rank_spec(ranks), "_named": set(ranks)})
        if issued:
            late = self.control.wait(ACK_TIMEOUT_S, max(c["generation"] for c in issued))
            for c in issued:
                named = c.pop("_named")
                c["unacknowledged"] = [p["pid"] for p in late if (p["host"], int(p["rank"])) in named]
                cap["commands"].append(c)

    def _finish(self, cap: dict[str, Any], folder: runfiles.RunFolder) -> None:
        ranks = [(h, int(r)) for h, r in cap["ranks"]]
        during_files: list[str] = []
        during: list[Snapshot] = []
        events = []
        for host, rank, items in self._rank_windows(ranks):
            for source, name, snap in items:
                if float(snap.window.end or 0.0) > float(cap["started"]):
                    during_files += _keep(source, name, folder, "during", host, rank)
                    during.append(snap.with_meta(host=host, rank=rank))
                    ev = window_events(source.path / name, host, rank)
                    if ev is not None:
                        events.append(ev)
        cap["during"] = during_files
        cap["before_fine"] = self._flight(cap, folder)
        device = pl.concat(events, how="diagonal_relaxed") if events else None
        if device is not None:
            folder.write_frame("device.parquet", device)
        if during:
            folder.write("trace.json", self._trace(during, device))
            base = self.baseline_of([f"{h}/{r}" for h, r in ranks]) if self.baseline_of else None
            if base is not None:
                folder.write_frame("comparison.parquet", base.diff(merge_windows(during)))
        cap["ended"] = time.time()
        cap["state"] = "done" if during else "done, no window during the capture"
        cap["bytes"] = folder.size()
        folder.write(CAPTURE_FILE, _json(cap))
        self.say(f"capture done: {cap['rule']} -> {folder.path} ({cap['bytes']:,} bytes)")

    @staticmethod
    def _trace(during: list[Snapshot], device: pl.DataFrame | None) -> bytes:
        """One Perfetto trace across the captured ranks: each rank's trace (export/perfetto.py,
        a process per rank) on one time base."""
        from ..export.perfetto import to_perfetto

        traces = []
        for snap in during:
            host, rank = str(snap.meta["host"]), int(snap.meta["rank"])
            ev = None
            if device is not None:
                ev = device.filter((pl.col("host") == host) & (pl.col("rank") == rank)).drop("host", "rank")
            traces.append(to_perfetto(snap, rank=rank, host=host, device_events=ev))
        base = min(int(t["otherData"]["base_time_unix_ns"]) for t in traces)
        merged: list[dict] = []
        for t in traces:
            shift = (int(t["otherData"]["base_time_unix_ns"]) - base) / 1e3
            for e in t["traceEvents"]:
                if "ts" in e:
                    e = {**e, "ts": e["ts"] + shift}
                merged.append(e)
        data = {
            "traceEvents": merged,
            "displayTimeUnit": "ns",
            "otherData": {"producer": "mspti-lens", "base_time_unix_ns": base, "ranks": len(traces)},
        }
        return json.dumps(data).encode()

    def _release(self) -> None:
        self.files.remove(CLAIM)

    # -- restart ---------------------------------------------------------------------------------
    def recover(self) -> Path | None:
        """A claim left by a watcher that is gone (its pid dead on this host): restore the ranks
        it had changed and finish its capture. Returns that capture's folder, or None."""
        captures = self.files
        try:
            claim = captures.read_json(CLAIM)
            if not isinstance(claim, dict):
                raise ValueError("not a claim")
        except runfiles.UntrustedError as e:  # planted: never read, and no capture until removed
            self.say(f"no capture while {e}: remove it")
            return None
        except (OSError, ValueError):
            return None
        if claim.get("node") == socket.gethostname() and _alive(int(claim.get("pid") or 0)):
            return None  # its watcher is alive: it finishes its own capture
        try:
            folder = captures.child(str(claim.get("folder")))
            cap = folder.read_json(CAPTURE_FILE)
            if not isinstance(cap, dict):
                raise ValueError("not a capture")
        except (OSError, ValueError):
            self._release()  # claimed, never started: nothing was changed
            return None
        if cap.get("state") != "running":
            self._release()
            return None
        self.active, self._folder = cap, folder
        cap["note"] = ((cap.get("note") or "") + " finished by a restarted watcher").strip()
        self.say(f"finishing a capture a stopped watcher left: {folder.path}")
        return self.tick(force=True)


def _keep(
    source: runfiles.RunFolder, window: str, capture: runfiles.RunFolder, part: str, host: str, rank: int
) -> list[str]:
    """A window (and its device records) linked into the capture's ``part`` (before/, during/):
    a window never changes once written, and the writer's compaction may remove it later. The
    names kept, relative to the capture's folder."""
    into = capture.child(part, f"host={host}", f"rank={rank}")
    m = WINDOW_NAME.match(window)
    kept = []
    for name in (window, events_name(int(m.group(1)), int(m.group(2))) if m else None):
        if name is not None:
            with contextlib.suppress(OSError):  # no device records, or gone meanwhile
                into.link_from(source, name)
                kept.append("/".join((*into.parts[len(capture.parts) :], name)))
    return kept


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
