"""The watcher: polls a run directory, feeds each new window to the rules, reports what changed.

``python -m mspti_lens watch DIR --when RULE ...`` and ``open_run(DIR).watch(RULE, ...)``. It runs
wherever the run directory is visible (a terminal beside the job, a notebook, another host of a
shared filesystem): it only reads the windows the ranks write, so it costs the job nothing. That
is the default place, not inside a rank, so one watcher sees every rank, a crashed rank does not
take the watcher with it, and a rule is changed without restarting the job.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ..runs import runfiles
from ..runs.run import register_view
from .capture import CapturePolicy, Capturer, captures_dir, captures_folder, captures_frame
from .evaluate import JOB, Baseline, Evaluator, Transition
from .rules import Rule, check_names, parse_rule, parse_rules
from .source import RunWindows

DEFAULT_EVERY = 1.0  # seconds between two polls of the run directory
# Between polls, once a rank's next window is due, its known name is looked for this often until
# it lands (a window is read as soon as it is written, not up to a poll later): a stat each, for
# the few tens of milliseconds a window takes to write.
LAND_CHECK_S = 0.02
TRIGGERS_METRIC = "mspti_lens_watch_triggers_total"
BASELINES_FILE = "baselines.json"


def _read_baselines(root: Path) -> dict:
    """The baselines kept in the run (``{}`` if none, or unreadable or untrusted: a planted file
    is not read, runs/runfiles.py)."""
    try:
        data = captures_folder(root).read_json(BASELINES_FILE)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class Watcher:
    """Rules kept on a run's windows: :meth:`poll` once, :meth:`run` until the job ends,
    :meth:`start` in a background thread (a notebook). ``on_transition`` is called with each
    :class:`Transition` (an alert changing state), in order. ``capture`` (True: the defaults, a
    CapturePolicy, or False: none) takes a capture when a rule fires (watch/capture.py); ``say``
    hears what the captures do."""

    def __init__(
        self,
        root: str | Path,
        rules: Sequence[Rule | str],
        *,
        baseline: Baseline | None = None,
        every: float = DEFAULT_EVERY,
        grace: float | None = None,
        on_transition: Callable[[Transition], Any] | None = None,
        capture: CapturePolicy | bool = True,
        say: Callable[[str], Any] | None = None,
    ):
        if not isinstance(every, (int, float)) or not every > 0:
            raise ValueError(f"every is a number of seconds > 0 between polls, not {every!r}")
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(
                f"no run at {self.root} (record one with `python -m mspti_lens record --out DIR`)"
            )
        # Every rule is read before anything starts (parse_rules([]) says a rule is needed).
        self.rules = [r if isinstance(r, Rule) else parse_rule(r) for r in rules] or parse_rules([])
        self.every = float(every)
        self.evaluator = Evaluator(self.rules, baseline)
        self.windows = RunWindows(self.root, grace=grace)
        self.transitions: list[Transition] = []
        #: Every window evaluated: (subject, index, start, end), wall clock.
        self.evaluated: list[tuple[str, int, float, float]] = []
        self.on_transition = on_transition
        self._names_checked = False
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.triggers: dict[str, int] = {}  # rule -> alerts that went firing (exported)
        self.started_ns = time.time_ns()
        self.metrics_file: Path | None = None  # rewritten with the triggers on each change
        # Baselines survive a restart: learnt ones are kept in the run (captures/baselines.json).
        self.baselines_file = captures_dir(self.root) / BASELINES_FILE
        self._saved_baselines = self.evaluator.restore_baselines(_read_baselines(self.root))
        self._baselines_known = sum(len(v) for v in self.evaluator.baselines().values())
        self.capturer: Capturer | None = None
        if capture is not False:
            policy = capture if isinstance(capture, CapturePolicy) else CapturePolicy()
            self.capturer = Capturer(
                self.root, policy, say=say or _say, baseline_of=self.evaluator.baseline_snapshot
            )
            self.capturer.recover()  # a capture a stopped watcher left: its ranks restored first

    def poll(self) -> list[Transition]:
        """Read the windows written since the last poll and evaluate them: the transitions."""
        rank_windows, job_windows = self.windows.poll()
        if not self._names_checked and (rank_windows or job_windows):
            self._check_names([w.snapshot for w in rank_windows])
        out: list[Transition] = []
        for w in [*rank_windows, *job_windows]:
            out += self.evaluator.feed(w)
            self.evaluated.append((w.subject, w.index, w.start, w.end))
        for t in out:
            self.transitions.append(t)
            if t.after == "firing":
                self.triggers[t.rule.text()] = self.triggers.get(t.rule.text(), 0) + 1
            if self.on_transition is not None:
                self.on_transition(t)
        learnt = self.evaluator.baselines()
        if sum(len(v) for v in learnt.values()) > self._baselines_known:
            self._baselines_known = sum(len(v) for v in learnt.values())
            merged = {**_read_baselines(self.root), **learnt}  # other rules' kept as they were
            captures_folder(self.root, writer=True).write(
                BASELINES_FILE, json.dumps(merged, indent=1).encode()
            )
        if out and self.metrics_file is not None:
            runfiles.write_named_file(self.metrics_file, self.metrics("prometheus").encode())
        if self.capturer is not None:
            self.capturer.tick()
            for t in out:
                self.capturer.consider(t)
        return out

    def _check_names(self, snaps: Iterable[Any]) -> None:
        kernels: set[str] = set()
        collectives: set[str] = set()
        for s in snaps:
            if s.activity is not None:
                kernels |= set(s.kernels()["name"].to_list())
                collectives |= set(s.collectives()["op"].to_list())
        check_names(self.rules, kernels, collectives)
        self._names_checked = bool(kernels or collectives) or not any(
            r.kind in ("kernel", "collective") for r in self.rules
        )

    def done(self) -> bool:
        """Every rank seen has written its final window and every job window was evaluated."""
        return self.windows.done()

    def run(self, *, timeout: float | None = None) -> Watcher:
        """Poll every ``every`` seconds until the job ends, ``timeout`` passes, :meth:`stop` or
        an interrupt."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not self._stop.is_set():
                self.poll()
                if self.done() or (deadline is not None and time.monotonic() >= deadline):
                    break
                self._wait()
        except KeyboardInterrupt:
            pass
        finally:
            if self.capturer is not None:  # a capture still running: its ranks restored now
                self.capturer.tick(force=True)
        return self

    def _wait(self) -> None:
        """Until the next poll: ``every`` seconds, or less when a rank's next window lands first
        (looked for from when it is due, every LAND_CHECK_S)."""
        now = time.monotonic()
        until = now + self.every
        due = self.windows.due()
        at = None if due is None else now + (due - time.time())  # on the monotonic clock
        if at is None or at >= until:
            self._stop.wait(self.every)
            return
        if self._stop.wait(max(0.0, at - now)):
            return
        while (left := until - time.monotonic()) > 0:
            if self.windows.landed() or self._stop.wait(min(LAND_CHECK_S, left)):
                return

    def start(self, *, timeout: float | None = None) -> Watcher:
        """:meth:`run` in a daemon thread (a notebook keeps working while it watches)."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.run, kwargs={"timeout": timeout}, name="mspti-lens-watch", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def metrics(self, format: str = "prometheus") -> Any:
        """The triggers per rule (alerts that went firing, every rule listed) as a Prometheus
        counter (text exposition) or an OTLP Sum (``format="otlp"``: a request dict)."""
        counts = {r.text(): self.triggers.get(r.text(), 0) for r in self.rules}
        help_ = "alerts of a watch rule that went firing (per rank, or the job)"
        if format == "prometheus":
            from ..export.prometheus import counter_text

            return counter_text(TRIGGERS_METRIC, help_, counts, "rule")
        if format == "otlp":
            from ..export.otlp import counter_otlp

            return counter_otlp(TRIGGERS_METRIC, help_, counts, "rule", self.started_ns)
        raise ValueError(f"unknown metrics format {format!r}; valid formats are prometheus, otlp")

    def alerts(self) -> pl.DataFrame:
        """The state of every rule on every subject (Evaluator.alerts)."""
        return self.evaluator.alerts()

    def history(self) -> pl.DataFrame:
        """Every transition so far: at (wall time), rule, subject, before, after, window, value,
        baseline, ranks."""
        schema: dict[str, Any] = {
            "at": pl.Datetime("us", "UTC"),
            "rule": pl.String,
            "subject": pl.String,
            "before": pl.String,
            "after": pl.String,
            "window": pl.Int64,
            "value": pl.Float64,
            "baseline": pl.Float64,
            "ranks": pl.List(pl.Int64),
        }
        rows = [
            (
                int(t.at * 1e6),
                t.rule.text(),
                t.subject,
                t.before,
                t.after,
                t.window,
                t.value,
                t.baseline,
                [r for _, r in t.ranks],
            )
            for t in self.transitions
        ]
        df = pl.DataFrame(rows, schema={**schema, "at": pl.Int64}, orient="row")
        return df.with_columns(pl.col("at").cast(pl.Datetime("us")).dt.replace_time_zone("UTC"))

    def __repr__(self) -> str:
        firing = sum(1 for a in self.evaluator.firing())
        return f"<mspti_lens.Watcher {self.root}: {len(self.rules)} rules, {firing} firing>"


def watch_run(run: Any, *rules: str | Rule, **options: Any) -> Watcher:
    """``Run.watch``: a :class:`Watcher` of the run's directory (not started: ``.run()``,
    ``.start()`` or ``.poll()``)."""
    return Watcher(run.root, list(rules), **options)


def run_captures(run: Any) -> pl.DataFrame:
    """``Run.captures``: the run's captures, one row each (capture.CAPTURE_SCHEMA)."""
    return captures_frame(run.root)


register_view(watch=watch_run, captures=run_captures)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="the run's directory (record --out)")
    p.add_argument(
        "--when",
        action="append",
        default=[],
        metavar="RULE",
        help="a rule, e.g. 'HcclAllReduce p99 > 3x baseline' (repeat for more)",
    )
    p.add_argument("--every", type=float, default=DEFAULT_EVERY, help="seconds between polls of the run")
    p.add_argument("--baseline-skip", type=int, default=Baseline.skip, help="windows before the baseline's")
    p.add_argument(
        "--baseline-windows", type=int, default=Baseline.windows, help="windows the baseline merges"
    )
    p.add_argument("--timeout", type=float, default=None, help="stop watching after this many seconds")
    p.add_argument(
        "--capture",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="when a rule fires, capture the moment on the ranks it names (default; --no-capture: only say)",
    )
    d = CapturePolicy()
    p.add_argument(
        "--metrics-file",
        default=None,
        metavar="PATH",
        help="keep the triggers per rule here as Prometheus text (a textfile collector .prom file)",
    )
    p.add_argument("--capture-for", type=float, default=d.for_s, help="seconds a capture records")
    p.add_argument(
        "--cooldown", type=float, default=d.cooldown_s, help="seconds between captures of one rule"
    )
    p.add_argument(
        "--captures-per-hour", type=int, default=d.per_hour, help="captures a run may take per hour"
    )
    p.add_argument(
        "--capture-bytes", type=int, default=d.max_bytes, help="bytes of captures past which none starts"
    )


def main(args: argparse.Namespace) -> int:
    rules = parse_rules(args.when)  # every rule read before anything starts
    baseline = Baseline(args.baseline_skip, args.baseline_windows)
    capture: CapturePolicy | bool = False
    if args.capture:
        capture = CapturePolicy(args.capture_for, args.cooldown, args.captures_per_hour, args.capture_bytes)
    w = Watcher(args.run, rules, baseline=baseline, every=args.every, on_transition=_said, capture=capture)
    if args.metrics_file:
        w.metrics_file = Path(args.metrics_file)
        runfiles.write_named_file(w.metrics_file, w.metrics("prometheus").encode())
    scopes = ", ".join(sorted({"each rank" if r.scope == "rank" else JOB for r in rules}))
    learn = f"after {baseline.skip} window(s), {baseline.windows} with the statistic"
    _say(f"watching {args.run}: {len(rules)} rule(s) on {scopes}; baselines: {learn}")
    for r in rules:
        _say(f"  {r.text()}")
    w.run(timeout=args.timeout)
    firing = w.evaluator.firing()
    _say(f"watch ended: {len(w.transitions)} change(s), {len(firing)} alert(s) firing")
    return 0


def _said(t: Transition) -> None:
    """A terminal hears of an alert pending, firing or resolved (not of baselines being learnt)."""
    if t.after in ("pending", "firing", "resolved"):
        _say(t.line())


def _say(text: str) -> None:
    print(text, file=sys.stdout, flush=True)
