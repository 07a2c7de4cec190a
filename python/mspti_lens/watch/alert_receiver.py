"""Alertmanager's webhook in, a capture out: ``python -m mspti_lens receive DIR``.

When Prometheus keeps the watch rules (watch/prometheus_rules.py), its alerts go to Alertmanager,
and Alertmanager's webhook (``webhook_configs``, payload version 4) to this receiver: a small HTTP
server on 127.0.0.1 (another address only when given) beside the run directory. Each firing alert
that carries a rule (the label ``mspti_lens_rule``) and, for a rule per rank, its ``host`` and
``rank`` becomes a capture through the run's control path, the same files the file watcher's
captures go through (runs/control.py): no port reaches a rank.

- **Once per alert**: Alertmanager sends an alert again (every ``repeat_interval``, after a
  restart, from each member of an HA pair); an alert is its ``fingerprint`` and ``startsAt``, and
  the receiver claims it with a file ``DIR/alerts/KEY.json`` created with O_EXCL, so a resent
  alert, a restarted receiver and a second receiver on the same run never capture it twice.
- **One capture per rule and payload**: the new alerts of one rule in one payload (Alertmanager
  groups them) are one capture of all their ranks.
- **Cool-down**: no second capture of a rule within ``cooldown_s`` (10 minutes; read from the
  claim files, so a restarted receiver keeps it), and none while another capture runs. An alert
  refused for its cool-down stays claimed (it was seen); one refused because a capture runs, or
  because no rank it names is live, is released, so Alertmanager's next resend may capture it.
- An alert that is resolved, not ours, or whose rule does not parse is skipped and said so.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ..runs.control import ControlError, RunControl
from .prometheus_rules import RULE_LABEL
from .rules import Rule, RuleError, parse_rule

ALERTS_DIR = "alerts"
DEFAULT_PORT = 9096  # beside Alertmanager's 9093 and its cluster port 9094
DEFAULT_FOR_S = 10.0
DEFAULT_COOLDOWN_S = 600.0
MAX_BODY_BYTES = 1 << 20
#: What a capture turns on beside what each rank already records: the device's side of the moment.
CAPTURE_ACTIVITY = ("kernel", "communication", "marker")


@dataclass(frozen=True)
class Firing:
    """One firing alert of a watch rule, as Alertmanager sent it."""

    rule: Rule
    ranks: tuple[tuple[str, int], ...]  #: (host, rank) it names; () for a rule across ranks: all
    value: float | None
    baseline: float | None
    at: float  #: ``startsAt``, wall clock (s since 1970)
    key: str  #: fingerprint and startsAt, hashed: the alert's identity across resends


def _wall(text: str) -> float:
    """RFC 3339 (Alertmanager writes nanoseconds; Python reads up to microseconds)."""
    m = re.match(r"^(.*?T\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", text)
    if not m:
        raise ValueError(f"startsAt {text!r} is not an RFC 3339 time")
    frac = (m.group(2) or ".0")[:7]
    return datetime.fromisoformat(m.group(1) + frac + m.group(3).replace("Z", "+00:00")).timestamp()


def _number(text: Any) -> float | None:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if v == v else None  # NaN: no value


def firings(payload: Any) -> tuple[list[Firing], list[str]]:
    """The firing alerts of watch rules in one webhook payload, and a line for each alert
    skipped (resolved, not a watch rule's, a rule that does not parse, a rank that is no number)."""
    if not isinstance(payload, dict) or not isinstance(payload.get("alerts"), list):
        raise ValueError("not an Alertmanager webhook payload (a JSON object with 'alerts')")
    if str(payload.get("version")) != "4":
        raise ValueError(f"webhook payload version {payload.get('version')!r}; this reads version 4")
    out, skipped = [], []
    for a in payload["alerts"]:
        labels = a.get("labels") if isinstance(a, dict) else None
        if not isinstance(labels, dict):
            skipped.append("an alert without labels")
            continue
        name = labels.get("alertname", "?")
        if RULE_LABEL not in labels:
            skipped.append(f"{name}: not a watch rule's alert (no {RULE_LABEL} label)")
            continue
        if a.get("status") != "firing":
            skipped.append(f"{name}: {a.get('status')}")
            continue
        try:
            rule = parse_rule(str(labels[RULE_LABEL]))
            ranks: tuple[tuple[str, int], ...] = ()
            if rule.scope == "rank":
                ranks = ((str(labels.get("host", "")), int(labels["rank"])),)
            fingerprint, starts = str(a.get("fingerprint", "")), str(a.get("startsAt", ""))
            at = _wall(starts)
        except (RuleError, KeyError, ValueError) as e:
            skipped.append(f"{name}: {e}")
            continue
        notes = a.get("annotations") if isinstance(a.get("annotations"), dict) else {}
        key = hashlib.sha256(f"{fingerprint}\0{starts}\0{rule.text()}".encode()).hexdigest()[:40]
        out.append(Firing(rule, ranks, _number(notes.get("value")), _number(notes.get("baseline")), at, key))
    return out, skipped


def start_capture(run: Path, ranks: tuple[tuple[str, int], ...], for_s: float) -> Callable[[], None]:
    """Turn on what explains the moment (CAPTURE_ACTIVITY's activity records) on ``ranks`` (all
    for ``()``) through the control path; returns the restore, which puts each rank back as it
    was. A rank that records nothing is started with ``for_s`` (it stops by itself: its state
    before); a recording rank is retargeted, and the restore retargets it back.

    The receiver's own capture, until the watch package's captures (folders, the flight
    recorder, restore) land: then it calls those."""
    control = RunControl(run)
    spec = ",".join(str(r) for r in sorted({r for _, r in ranks})) or None
    wanted = {r for _, r in ranks}
    procs = [p for p in control.processes() if p["live"] and (not wanted or int(p["rank"]) in wanted)]
    prior: dict[tuple[tuple[str, ...], tuple[str, ...]], set[int]] = {}
    off: set[int] = set()
    for p in procs:
        if p.get("state") == "on":
            prior.setdefault((tuple(p.get("enable") or ()), tuple(p.get("activity") or ())), set()).add(
                int(p["rank"])
            )
        else:
            off.add(int(p["rank"]))
    if off:
        control.start(activity=list(CAPTURE_ACTIVITY), for_s=for_s, ranks=",".join(map(str, sorted(off))))
    for (enable, activity), rs in prior.items():
        both = sorted({*activity, *CAPTURE_ACTIVITY})
        control.start(enable=list(enable), activity=both, ranks=",".join(map(str, sorted(rs))))
    if not procs:
        control.start(activity=list(CAPTURE_ACTIVITY), for_s=for_s, ranks=spec)  # says why it cannot

    def restore() -> None:
        for (enable, activity), rs in prior.items():
            with contextlib.suppress(ControlError):  # the ranks ended meanwhile: nothing to restore
                control.start(
                    enable=list(enable), activity=list(activity), ranks=",".join(map(str, sorted(rs)))
                )

    return restore


class AlertReceiver:
    """The webhook server of one run (module docstring). ``handle(payload)`` is what a POST does,
    apart from HTTP; ``close()`` stops the server."""

    def __init__(
        self,
        run: str | os.PathLike,
        *,
        port: int = DEFAULT_PORT,
        address: str = "127.0.0.1",
        for_s: float = DEFAULT_FOR_S,
        cooldown_s: float = DEFAULT_COOLDOWN_S,
        say: Callable[[str], Any] | None = None,
    ):
        self.run = Path(run)
        if not self.run.is_dir():
            raise ValueError(
                f"no run at {self.run} (record one with `python -m mspti_lens record --out DIR`)"
            )
        for name, v in (("for", for_s), ("cooldown", cooldown_s)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or (name == "for" and v == 0):
                raise ValueError(
                    f"--{name} is a number of seconds {'> 0' if name == 'for' else '>= 0'}, not {v!r}"
                )
        self.for_s, self.cooldown_s = float(for_s), float(cooldown_s)
        self.say = say or (lambda line: print(line, flush=True))
        self.alerts = self.run / ALERTS_DIR
        self.alerts.mkdir(mode=0o700, exist_ok=True)
        self._lock = threading.Lock()
        self._timers: list[threading.Timer] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                code, text = receiver._post(self)
                self._answer(code, text)

            def do_GET(self) -> None:  # noqa: N802
                self._answer(HTTPStatus.OK, f"mspti-lens alert receiver for {receiver.run}\n")

            def _answer(self, code: HTTPStatus, text: str) -> None:
                body = text.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the receiver says what it did with each alert; not every request

        try:
            self._server = ThreadingHTTPServer((address, port), Handler)
        except OSError as e:
            raise OSError(
                e.errno, f"cannot listen on {address}:{port} ({e.strerror or e}); pick another --port"
            ) from None
        self._server.daemon_threads = True
        self.address: str = str(self._server.server_address[0])
        self.port: int = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="mspti-lens-receive", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}/"

    def _post(self, request: BaseHTTPRequestHandler) -> tuple[HTTPStatus, str]:
        try:
            n = int(request.headers.get("Content-Length") or 0)
        except ValueError:
            return HTTPStatus.BAD_REQUEST, "bad Content-Length\n"
        if not 0 < n <= MAX_BODY_BYTES:
            return HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"a payload is 1 to {MAX_BODY_BYTES} bytes\n"
        try:
            payload = json.loads(request.rfile.read(n))
            lines = self.handle(payload)
        except ValueError as e:  # JSON and payload errors alike
            self.say(f"refused a webhook call: {e}")
            return HTTPStatus.BAD_REQUEST, f"{e}\n"
        return HTTPStatus.OK, "".join(f"{line}\n" for line in lines)

    def handle(self, payload: Any, now: float | None = None) -> list[str]:
        """Capture what the payload's new firing alerts ask for; the lines said about it."""
        found, skipped = firings(payload)
        lines = [f"skipped {s}" for s in skipped]
        with self._lock:
            by_rule: dict[str, list[Firing]] = {}
            for f in found:
                if self._claim(f):
                    by_rule.setdefault(f.rule.text(), []).append(f)
                else:
                    lines.append(f"seen before: {f.rule.text()} {_who(f.ranks)} since {_iso(f.at)}")
            for text, fs in by_rule.items():
                lines.append(self._capture(text, fs, time.time() if now is None else now))
        for line in lines:
            self.say(line)
        return lines

    def _claim(self, f: Firing) -> bool:
        """Create the alert's claim file; False if it exists (the alert was seen)."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            os.close(os.open(self.alerts / f"{f.key}.json", flags, 0o600))
        except FileExistsError:
            return False
        self._write_claim(f)
        return True

    def _write_claim(self, f: Firing, **more: Any) -> None:
        """The claim's content, written whole (a temporary file renamed over it)."""
        doc = {"rule": f.rule.text(), "ranks": [list(r) for r in f.ranks], "value": f.value,
               "baseline": f.baseline, "fired_at": f.at, **more}  # fmt: skip
        path = self.alerts / f"{f.key}.json"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(doc, out)
        os.replace(tmp, path)

    def captures(self) -> list[dict[str, Any]]:
        """Every capture this run's receivers started (their claim files), oldest first."""
        out = []
        for path in self.alerts.glob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                doc = json.loads(path.read_text())
                if isinstance(doc, dict) and isinstance(doc.get("captured_at"), (int, float)):
                    out.append(doc)
        return sorted(out, key=lambda d: d["captured_at"])

    def _refusal(self, text: str, now: float) -> tuple[str, bool] | None:
        """Why a capture of rule ``text`` may not start now, and whether a resend may retry."""
        for cap in reversed(self.captures()):
            at = cap["captured_at"]
            if now - at < self.for_s:
                return f"a capture ({cap['rule']}) is running", True
            if cap["rule"] == text and now - at < self.cooldown_s:
                return (
                    f"cooling down ({now - at:.0f} s since its last capture, "
                    f"cool-down {self.cooldown_s:g} s)",
                    False,
                )
        return None

    def _capture(self, text: str, fs: list[Firing], now: float) -> str:
        ranks = () if any(not f.ranks for f in fs) else tuple(sorted({r for f in fs for r in f.ranks}))
        refused = self._refusal(text, now)
        if refused is None:
            try:
                restore = start_capture(self.run, ranks, self.for_s)
            except ControlError as e:
                refused = str(e), True
        if refused is not None:
            why, retry = refused
            for f in fs if retry else ():  # a resend may try again
                (self.alerts / f"{f.key}.json").unlink(missing_ok=True)
            return f"not captured: {text} {_who(ranks)}: {why}"
        for f in fs:
            self._write_claim(f, captured_at=now, captured_ranks=[list(r) for r in ranks])
        timer = threading.Timer(self.for_s, restore)
        timer.daemon = True
        timer.start()
        self._timers.append(timer)
        value = ", ".join(f"{f.value:g}" for f in fs if f.value is not None) or "?"
        base = [f.baseline for f in fs if f.baseline is not None]
        return (
            f"captured: {text} {_who(ranks)} for {self.for_s:g} s (value {value}"
            + (f", baseline {', '.join(f'{b:g}' for b in base)}" if base else "")
            + f", firing since {_iso(min(f.at for f in fs))})"
        )

    def close(self) -> None:
        """Stop serving; a capture under way is restored at once."""
        self._server.shutdown()
        self._server.server_close()
        for t in self._timers:
            if t.is_alive():
                t.cancel()
                t.function()
        self._thread.join(timeout=30)

    def __enter__(self) -> AlertReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _who(ranks: tuple[tuple[str, int], ...]) -> str:
    return "on every rank" if not ranks else "on " + ", ".join(f"rank {r} ({h})" for h, r in ranks)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="the run's directory (record --out)")
    p.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port to listen on (default {DEFAULT_PORT}; 0: a free one)",
    )
    p.add_argument("--address", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--for", dest="for_s", type=float, default=DEFAULT_FOR_S, metavar="S",
                   help=f"seconds a capture lasts (default {DEFAULT_FOR_S:g})")  # fmt: skip
    p.add_argument("--cooldown", type=float, default=DEFAULT_COOLDOWN_S, metavar="S",
                   help=f"seconds before a rule captures again (default {DEFAULT_COOLDOWN_S:g})")  # fmt: skip


def main(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in 0..65535 (0: a free one), not {args.port}")
    try:
        receiver = AlertReceiver(
            args.run, port=args.port, address=args.address, for_s=args.for_s, cooldown_s=args.cooldown
        )
    except OSError as e:
        raise ValueError(str(e)) from None
    with receiver as r:
        print(f"receiving Alertmanager's webhook on {r.url} for {args.run} (Ctrl-C ends)", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0
