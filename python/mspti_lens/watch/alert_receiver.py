"""Alertmanager's webhook in, a capture out: ``python -m mspti_lens receive DIR``.

When Prometheus keeps the watch rules (watch/prometheus_rules.py), its alerts go to Alertmanager,
and Alertmanager's webhook (``webhook_configs``, payload version 4) to this receiver: a small HTTP
server on 127.0.0.1 (another address only when given) beside the run directory. Each firing alert
that carries a rule (the label ``mspti_lens_rule``) and, for a rule per rank, its ``host`` and
``rank`` becomes a capture: the watch package's own (watch/capture.py: its folder under
``captures/``, the flight recorder, the ranks put back as they were), through the run's control
path (runs/control.py): no port reaches a rank.

- **Once per alert**: Alertmanager sends an alert again (every ``repeat_interval``, after a
  restart, from each member of an HA pair); an alert is its ``fingerprint`` and ``startsAt``, and
  the receiver claims it with a file ``DIR/alerts/KEY.json`` created only if absent (runs/runfiles.py),
  so a resent alert, a restarted receiver and a second receiver on the same run never capture it
  twice.
- **One capture per rule and payload**: the new alerts of one rule in one payload (Alertmanager
  groups them) are one capture of all their ranks.
- **Cool-down and budget**: the captures' own (capture.py: no second capture of a rule within
  ``cooldown_s``, 10 minutes, read from the captures on disk, so a restarted receiver keeps it;
  one capture at a time per run). An alert refused for its cool-down stays claimed (it was seen);
  one refused for any other reason (a capture runs, the budget, no rank it names is live) is
  released, so Alertmanager's next resend may capture it.
- An alert that is resolved, not ours, or whose rule does not parse is skipped and said so.
- **The seconds before**: while it runs, the receiver keeps the run marked watched (the watcher's
  heartbeat, capture.Capturer.watching), so every rank keeps its flight recorder
  (runs/flight_recorder.py) and a capture starts with the rank's last fine windows, as a file
  watcher's does; a rank serving /metrics keeps one too.
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

from ..runs import runfiles
from ..runs.control import HEARTBEAT_S, ControlError
from .capture import CapturePolicy, Capturer
from .evaluate import JOB, Transition
from .prometheus_rules import RULE_LABEL
from .rules import Rule, RuleError, parse_rule

ALERTS_DIR = "alerts"
DEFAULT_PORT = 9096  # beside Alertmanager's 9093 and its cluster port 9094
DEFAULT_FOR_S = 10.0
DEFAULT_COOLDOWN_S = CapturePolicy.cooldown_s
MAX_BODY_BYTES = 1 << 20


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
        try:
            root = runfiles.open_run_folder(self.run, writer=True)
        except (FileNotFoundError, NotADirectoryError):
            raise ValueError(
                f"no run at {self.run} (record one with `python -m mspti_lens record --out DIR`)"
            ) from None
        for name, v in (("for", for_s), ("cooldown", cooldown_s)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or (name == "for" and v == 0):
                raise ValueError(
                    f"--{name} is a number of seconds {'> 0' if name == 'for' else '>= 0'}, not {v!r}"
                )
        self.for_s, self.cooldown_s = float(for_s), float(cooldown_s)
        self.say = say or (lambda line: print(line, flush=True))
        self.alerts = root.child(ALERTS_DIR).make()
        self._lock = threading.Lock()
        self._timers: list[threading.Timer] = []
        self.capturer = Capturer(
            self.run, CapturePolicy(for_s=self.for_s, cooldown_s=self.cooldown_s), say=self.say
        )
        self.capturer.recover()  # a capture a stopped receiver or watcher left: its ranks restored
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
        self._closing = threading.Event()
        self.capturer.watching()  # marked watched now: the ranks' flight recorders start
        self._heart = threading.Thread(target=self._beat, name="mspti-lens-receive-watched", daemon=True)
        self._heart.start()

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}/"

    def _beat(self) -> None:
        """The watched marker's heartbeat while the receiver runs (Capturer.watching touches it
        every HEARTBEAT_S): a receiver that is gone stops the ranks' flight recorders."""
        while not self._closing.wait(HEARTBEAT_S / 2):
            with self._lock:
                self.capturer.watching()

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

    @staticmethod
    def _claim_doc(f: Firing, **more: Any) -> bytes:
        doc = {"rule": f.rule.text(), "ranks": [list(r) for r in f.ranks], "value": f.value,
               "baseline": f.baseline, "fired_at": f.at, **more}  # fmt: skip
        return json.dumps(doc).encode()

    def _claim(self, f: Firing) -> bool:
        """Create the alert's claim file, whole, unless it exists (False: the alert was seen)."""
        return self.alerts.publish(f"{f.key}.json", self._claim_doc(f))

    def captures(self) -> list[dict[str, Any]]:
        """Every capture this run's receivers started (their claim files), oldest first."""
        out = []
        for name in self.alerts.names("*.json"):
            with contextlib.suppress(OSError, ValueError):
                doc = self.alerts.read_json(name)
                if isinstance(doc, dict) and isinstance(doc.get("captured_at"), (int, float)):
                    out.append(doc)
        return sorted(out, key=lambda d: d["captured_at"])

    def _live_ranks(self, ranks: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
        """The live processes' (host, rank) an alert names: every live one for ``()``; a named
        rank on its host, or on any host when no live process has that host (a label that says
        the host otherwise). ControlError if the run has none to control."""
        live = {(str(p["host"]), int(p["rank"])) for p in self.capturer.control.processes() if p["live"]}
        if not ranks:
            return tuple(sorted(live))
        hosts = {h for h, _ in live}
        named = [(h if h in hosts else None, r) for h, r in ranks]
        return tuple(sorted((h, r) for h, r in live if (h, r) in named or (None, r) in named))

    def _capture(self, text: str, fs: list[Firing], now: float) -> str:
        ranks = () if any(not f.ranks for f in fs) else tuple(sorted({r for f in fs for r in f.ranks}))
        why, retry = None, True
        try:
            targets = self._live_ranks(ranks)
        except ControlError as e:
            why = str(e)
        else:
            if not targets:
                live = ", ".join(f"{r}@{h}" for h, r in self._live_ranks(())) or "none"
                why = f"no live rank of the run is one it names (live: {live})"
            else:
                first = max(fs, key=lambda f: f.value if f.value is not None else float("-inf"))
                subject = JOB if first.rule.scope != "rank" else ",".join(f"{h}/{r}" for h, r in targets)
                t = Transition(first.rule, subject, "pending", "firing", 0, min(f.at for f in fs),
                               first.value, first.baseline, targets)  # fmt: skip
                folder, why = self.capturer.take(t, now)
                retry = why is None or not why.startswith("cool-down:")
        if why is not None:
            for f in fs if retry else ():  # a resend may try again
                self.alerts.remove(f"{f.key}.json")
            return f"not captured: {text} {_who(ranks)}: {why}"
        for f in fs:
            self.alerts.write(
                f"{f.key}.json",
                self._claim_doc(f, captured_at=now, captured_ranks=[list(r) for r in targets],
                                capture=str(folder)),
            )  # fmt: skip
        timer = threading.Timer(self.for_s, self._finish)
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

    def _finish(self) -> None:
        """The capture's time is up: its ranks put back as they were, its folder finished."""
        self.capturer.tick(force=True)

    def close(self) -> None:
        """Stop serving; a capture under way is restored and finished at once."""
        self._closing.set()
        self._heart.join()
        self._server.shutdown()
        self._server.server_close()
        for t in self._timers:
            t.cancel()
            t.join()
        self._finish()
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
