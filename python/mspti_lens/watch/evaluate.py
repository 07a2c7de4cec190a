"""Rules evaluated window by window, with a baseline and an alert state per rule and subject.

A **subject** is what one alert is about: one rank (``host/rank``, the rank's own windows) for a
rule ``per rank``, or the job (``job``: the job's k-th window, every rank's k-th window merged:
histograms add, so its quantiles are exact) for a rule ``across ranks`` and for skew. Every
statistic is read from the window's :class:`~mspti_lens.Snapshot` (``summary()``, ``kernels()``,
``collectives()``, ``counters``; the merged one from ``Snapshot.merge``) or, for skew, from
:func:`mspti_lens.runs.skew.skew` on the window's device records: nothing is re-derived here.

**Baseline.** A rule ``> Nx baseline`` compares with its own statistic over the subject's
earlier windows: after the subject's first ``skip`` windows (1 by default: start-up, compilation
and warm-up), the first ``windows`` windows (5) that have the statistic (a call of that API, a
complete instance of that collective), merged exactly into one snapshot and the statistic taken
on the merge (for skew, the largest spread of their instances). So a baseline needs at least
``skip + windows`` windows (6 at the defaults: a minute at `record`'s 10 s); until then the rule
is ``learning`` and never fires. The baseline is fixed once learnt:
a slowdown that lasts does not become the new normal, and a week-long job is compared with how
it ran at its start (restart the watcher, or give ``--baseline-skip``, to learn it again).

**States** (Prometheus's and Grafana's alert states): ``inactive``; ``pending`` while the
condition has held for fewer than the rule's K windows in a row; ``firing`` from the K-th;
``resolved`` for the window in which a firing condition stops holding, then ``inactive``. A window
without the statistic (no call of that API in it, no complete collective instance) leaves the
state as it was: an empty window is no evidence either way (a job that stops calling is what a
``count`` or ``rate`` rule, whose value is then 0, is for).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from ..collectives import op_of
from ..snapshot import Snapshot
from .rules import DROP_COUNTERS, STATISTICS, Rule

STATES = ("learning", "inactive", "pending", "firing", "resolved")
JOB = "job"
BASELINE_SKIP = 1
BASELINE_WINDOWS = 5
_QUANTILE_COLUMN = {**STATISTICS}  # statistic -> the summary column it reads


@dataclass(frozen=True)
class Baseline:
    """Which earlier windows of a subject make its baseline (module docstring)."""

    skip: int = BASELINE_SKIP
    windows: int = BASELINE_WINDOWS

    def __post_init__(self) -> None:
        if not isinstance(self.skip, int) or self.skip < 0:
            raise ValueError(f"baseline skip is a number of windows >= 0, not {self.skip!r}")
        if not isinstance(self.windows, int) or self.windows < 1:
            raise ValueError(f"baseline windows is a number of windows >= 1, not {self.windows!r}")

    @property
    def needs(self) -> int:
        """Windows a subject has had when its baseline is known."""
        return self.skip + self.windows


@dataclass(frozen=True)
class Window:
    """One window of a subject: a rank's own window, or the job's k-th window merged over ranks."""

    subject: str  #: "host/rank" or "job"
    index: int  #: the window's number (the writer's, 1 first)
    snapshot: Snapshot
    ranks: tuple[tuple[str, int], ...]  #: the (host, rank) whose windows it holds
    events: pl.DataFrame | None = None  #: device records with host and rank (job windows, for skew)

    @property
    def start(self) -> float:
        return float(self.snapshot.window.start or 0.0)

    @property
    def end(self) -> float:
        return float(self.snapshot.window.end or 0.0)


@dataclass(frozen=True)
class Transition:
    """An alert changed state at the end of ``window``."""

    rule: Rule
    subject: str
    before: str
    after: str
    window: int
    at: float  #: the window's end, wall clock (s since 1970)
    value: float | None
    baseline: float | None
    ranks: tuple[tuple[str, int], ...]  #: the ranks it implicates

    def line(self) -> str:
        """One line for a terminal or a log."""
        from ..units import format_ns

        def show(v: float | None) -> str:
            if v is None:
                return "—"
            return format_ns(v) if self.rule.is_time else f"{v:,.6g}"

        who = ", ".join(f"rank {r} ({h})" for h, r in self.ranks) or "no rank"
        base = f", baseline {show(self.baseline)}" if self.rule.baseline else ""
        return (
            f"{self.after.upper():8} {self.rule.text()} | {self.subject} window {self.window}: "
            f"{show(self.value)}{base} | {who}"
        )


@dataclass
class Alert:
    """The state of one rule on one subject."""

    rule: Rule
    subject: str
    state: str = "inactive"
    held: int = 0  #: windows in a row the condition held
    value: float | None = None
    baseline: float | None = None
    window: int = 0
    ranks: tuple[tuple[str, int], ...] = ()


@dataclass
class _Learning:
    """One rule's baseline on one subject: its windows so far, merged (for skew, the largest
    spread among them), and the baseline once they are enough."""

    windows: int = 0
    merged: Snapshot | None = None
    spread: float | None = None
    value: float | None = None
    done: bool = False


def statistic(rule: Rule, snap: Snapshot) -> float | None:
    """The rule's statistic on one window (None: nothing of it there). A name that covers
    several rows (a domain, a callback id's functions, a kernel's types, a collective's
    communicators) gives the worst of them: the largest for > and >=, the smallest for < and <=;
    count and rate add them."""
    if rule.kind == "dropped":
        counters = dict(snap.counters)
        if snap.activity is not None:
            counters.update(snap.activity.counters)
        return float(sum(int(counters.get(c, 0)) for c in DROP_COUNTERS))
    rows = _rows(rule, snap)
    if not rows.height:
        return None if rule.statistic not in ("count", "rate") else 0.0
    column = _QUANTILE_COLUMN[rule.statistic]
    if rule.statistic in ("count", "rate"):
        n = float(rows["num_calls"].sum())
        if rule.statistic == "count":
            return n
        return n / snap.duration_s if snap.duration_s > 0 else None
    values = [float(v) for v in rows[column].to_list() if v is not None]
    if not values:
        return None
    return max(values) if rule.op in (">", ">=") else min(values)


def _rows(rule: Rule, snap: Snapshot) -> pl.DataFrame:
    if rule.kind == "kernel":
        return snap.kernels().filter(pl.col("name") == rule.name)
    if rule.kind == "collective":
        ops = snap.collectives()
        ops = ops.filter(pl.col("op").map_elements(op_of, return_dtype=pl.String) == op_of(rule.name))
        if ops.height and "from" in ops.columns:  # COMMUNICATION and HCCL records are the same calls
            prefer = "communication" if (ops["from"] == "communication").any() else ops["from"][0]
            ops = ops.filter(pl.col("from") == prefer)
        return ops
    from ..catalog import DOMAIN_NAMES, callback, resolve

    domain, cbid = resolve(rule.name)
    s = snap.summary()
    c = callback(domain, cbid) if cbid is not None else None
    if c is not None and (rule.name in c.names_26x or rule.name in c.names_8x):
        return s.filter(pl.col("name") == rule.name)
    s = s.filter(pl.col("domain") == DOMAIN_NAMES[domain])
    return s.filter(pl.col("callback") == c.short) if c is not None else s


def skew_statistic(
    rule: Rule, events: pl.DataFrame | None
) -> tuple[float | None, tuple[tuple[str, int], ...]]:
    """A skew rule's statistic on a job window's device records: the largest arrival spread
    among the window's complete instances of the collective (runs.skew), and the rank that
    arrived last in that instance (none when it is within the clock error or a tie)."""
    from ..runs.skew import skew

    if events is None or not events.height:
        return None, ()
    # The rule names the HCCL function (HcclAllReduce), records the op (hcom_allReduce_).
    s = skew(events.filter(pl.col("name").map_elements(op_of, return_dtype=pl.String) == op_of(rule.name)))
    if not s.height:
        return None, ()
    worst = s.sort("spread_ns", descending=True).row(0, named=True)
    late = () if worst["last_rank"] is None else ((str(worst["last_host"]), int(worst["last_rank"])),)
    return float(worst["spread_ns"]), late


class Evaluator:
    """Every rule's alerts, fed one subject's window at a time (in order per subject)."""

    def __init__(self, rules: Sequence[Rule], baseline: Baseline | None = None):
        self.rules = list(rules)
        self.baseline = baseline or Baseline()
        self._alerts: dict[tuple[int, str], Alert] = {}
        self._learning: dict[tuple[int, str], _Learning] = {}
        self._seen: dict[str, int] = {}  # windows each subject has had
        self._base: dict[str, Snapshot] = {}  # each subject's baseline windows merged (comparisons)

    def rules_for(self, subject: str) -> list[tuple[int, Rule]]:
        job = subject == JOB
        return [(i, r) for i, r in enumerate(self.rules) if (r.scope == "job") == job]

    def feed(self, window: Window) -> list[Transition]:
        """Evaluate the rules of ``window``'s subject on it; the alerts that changed state."""
        seen = self._seen[window.subject] = self._seen.get(window.subject, 0) + 1
        if self.baseline.skip < seen <= self.baseline.needs:  # the subject's own baseline windows
            kept = self._base.get(window.subject)
            self._base[window.subject] = window.snapshot if kept is None else kept.merge(window.snapshot)
        out = []
        for i, rule in self.rules_for(window.subject):
            if rule.kind == "skew":
                value, late = skew_statistic(rule, window.events)
            else:
                value, late = statistic(rule, window.snapshot), ()
            ranks = late or window.ranks
            alert = self._alerts.setdefault((i, window.subject), Alert(rule, window.subject))
            before = alert.state
            base = None
            if rule.baseline:
                learning = self._learning.setdefault((i, window.subject), _Learning())
                base = learning.value
                if not learning.done:
                    self._learn(rule, learning, window, value, seen)
            if rule.baseline and base is None:
                alert.state, alert.held = "learning", 0
            elif value is None:
                pass  # no evidence either way (no call of it in the window): the state stays
            elif rule.holds(value, base):
                alert.held += 1
                alert.state = "firing" if alert.held >= rule.windows else "pending"
            else:
                alert.state = "resolved" if before == "firing" else "inactive"
                alert.held = 0
            alert.value, alert.baseline, alert.window, alert.ranks = value, base, window.index, ranks
            if alert.state != before:
                after = alert.state
                out.append(
                    Transition(
                        rule, window.subject, before, after, window.index, window.end, value, base, ranks
                    )
                )
        return out

    def _learn(self, rule: Rule, learning: _Learning, window: Window, value: float | None, seen: int) -> None:
        """Fold the window into the rule's baseline when it is one of its windows: after the
        subject's first ``skip``, those with the statistic. The window that completes it is not
        compared with it (the next one is the first)."""
        if seen <= self.baseline.skip or value is None:
            return
        learning.windows += 1
        if rule.kind == "skew":
            learning.spread = max(value, learning.spread if learning.spread is not None else value)
        else:
            snap = window.snapshot
            learning.merged = snap if learning.merged is None else learning.merged.merge(snap)
        if learning.windows >= self.baseline.windows:
            learning.done = True
            if rule.kind == "skew":
                learning.value = learning.spread
            elif learning.merged is not None:
                learning.value = statistic(rule, learning.merged)
            learning.merged = None  # the baseline is a number from now on

    def baselines(self) -> dict[str, dict[str, float]]:
        """The baselines learnt: {rule text: {subject: value}} (what a restarted watcher reloads)."""
        out: dict[str, dict[str, float]] = {}
        for (i, subject), ln in self._learning.items():
            if ln.done and ln.value is not None:
                out.setdefault(self.rules[i].text(), {})[subject] = ln.value
        return out

    def restore_baselines(self, saved: dict[str, dict[str, float]]) -> int:
        """Take baselines an earlier watcher learnt for these rules (by rule text); how many."""
        n = 0
        for i, rule in enumerate(self.rules):
            for subject, value in (saved.get(rule.text()) or {}).items():
                if rule.baseline and isinstance(value, (int, float)):
                    self._learning[(i, str(subject))] = _Learning(done=True, value=float(value))
                    n += 1
        return n

    def baseline_snapshot(self, subjects: Iterable[str]) -> Snapshot | None:
        """The subjects' baseline windows (after ``skip``, the next ``windows``) merged: what a
        capture is compared with. None before any subject has one."""
        snaps = [self._base[s] for s in subjects if s in self._base]
        return merge_windows(snaps) if snaps else None

    def alerts(self) -> pl.DataFrame:
        """One row per rule and subject seen: rule, subject, state, held, value, baseline,
        window, ranks."""
        rows = [
            {
                "rule": a.rule.text(),
                "subject": a.subject,
                "state": a.state,
                "held": a.held,
                "value": a.value,
                "baseline": a.baseline,
                "window": a.window,
                "ranks": [r for _, r in a.ranks],
            }
            for a in self._alerts.values()
        ]
        schema: dict[str, Any] = {
            "rule": pl.String,
            "subject": pl.String,
            "state": pl.String,
            "held": pl.Int64,
            "value": pl.Float64,
            "baseline": pl.Float64,
            "window": pl.Int64,
            "ranks": pl.List(pl.Int64),
        }
        return pl.DataFrame(rows, schema=schema, orient="row")

    def firing(self) -> list[Alert]:
        return [a for a in self._alerts.values() if a.state == "firing"]


def merge_windows(snapshots: Iterable[Snapshot]) -> Snapshot:
    """The exact merge of several windows (Snapshot.merge: histograms add)."""
    it = iter(snapshots)
    out = next(it)
    for s in it:
        out = out.merge(s)
    return out
