"""Watch rules: text a person reads and writes, parsed into one frozen :class:`Rule` each.

Grammar (words are case-insensitive, spaces free; ``text()`` writes the canonical form, which
parses back to the same rule)::

    RULE      := TARGET OP THRESHOLD [SCOPE] [for K windows]
    TARGET    := NAME STAT                 an API: any name `enable` takes (aclrtLaunchKernel,
                                           HcclAllReduce, LAUNCH, MSPTI_CBID_..., a domain)
               | kernel NAME STAT          a kernel of the device records (KERNEL)
               | collective NAME STAT      a collective's device time (COMMUNICATION/HCCL op)
               | skew NAME                 arrival spread of a collective (an HCCL function)
               | dropped                   calls and records lost (DROP_COUNTERS)
    STAT      := count | rate | mean | p50 | p90 | p99 | p99.9 | max
    OP        := > | >= | < | <=
    THRESHOLD := NUMBER UNIT               a time: ns, us (µs), ms, s (units.UNITS)
               | NUMBER[/s]                a count (count, dropped) or calls per second (rate)
               | NUMBER x baseline         a multiple of the rule's own statistic over the job's
                                           earlier windows (the baseline, watch/evaluate.py)
    SCOPE     := per rank                  each rank's windows on their own (the default)
               | across ranks              the job's windows merged over ranks (histograms add)
    K         := an integer >= 1           windows in a row the condition must hold (default 2)

Examples: ``HcclAllReduce p99 > 3x baseline``, ``aclrtSynchronizeStream p50 > 20ms``,
``skew HcclAllReduce > 5ms`` (always across ranks: it names the rank that arrived last),
``dropped > 0``, ``kernel MatMulV2 p99 > 2x baseline across ranks for 3 windows``.

A rule that does not parse raises :class:`RuleError`: one line saying what is wrong, the valid
choices, and the near word when the user mistyped one (the catalog's did-you-mean; API names are
checked by ``catalog.resolve``, the one resolver of names). Kernel and collective names come from
a job's device records, so they are checked against a run's names by :func:`check_names`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .. import catalog
from ..self_cost import DROP_COUNTERS  # noqa: F401 - what "dropped" adds up (evaluate.py reads it)
from ..units import UNITS

#: The statistics of a histogram a rule may name, each with the Snapshot.summary() column it reads
#: (rate is num_calls over the window's length).
STATISTICS = {
    "count": "num_calls",
    "rate": "num_calls",
    "mean": "avg_ns",
    "p50": "med_ns",
    "p90": "p90_ns",
    "p99": "p99_ns",
    "p99.9": "p999_ns",
    "max": "max_ns",
}
#: Other spellings people use for a statistic.
STATISTIC_ALIASES = {"median": "p50", "avg": "mean", "average": "mean", "p999": "p99.9", "calls": "count"}
TIME_STATISTICS = ("mean", "p50", "p90", "p99", "p99.9", "max")
#: What a rule watches: an API's histogram, a kernel's or a collective's device time, the arrival
#: spread of a collective across ranks, or lost calls and records.
KINDS = ("api", "kernel", "collective", "skew", "dropped")
KEYWORDS = ("kernel", "collective", "skew", "dropped")
OPERATORS = (">=", "<=", ">", "<")
SCOPES = ("rank", "job")
SCOPE_WORDS = {"per rank": "rank", "across ranks": "job"}
DEFAULT_WINDOWS = 2


class RuleError(ValueError):
    """A rule that cannot be read: one line saying why, with the valid choices."""


@dataclass(frozen=True)
class Rule:
    """One watch rule. ``threshold`` is in ns for a time statistic, calls or records for count
    and dropped, calls per second for rate, or the multiple of the baseline when ``baseline``."""

    kind: str  #: one of KINDS
    name: str  #: the API, kernel or collective ("" for dropped)
    statistic: str  #: one of STATISTICS; "spread" for skew, "dropped" for dropped
    op: str  #: one of OPERATORS
    threshold: float
    baseline: bool = False  #: threshold is a multiple of the rule's baseline
    scope: str = "rank"  #: "rank": each rank's windows; "job": merged across ranks
    windows: int = DEFAULT_WINDOWS  #: windows in a row the condition must hold

    @property
    def is_time(self) -> bool:
        """The statistic is a duration (ns)."""
        return self.statistic in TIME_STATISTICS or self.kind == "skew"

    def holds(self, value: float | None, baseline: float | None = None) -> bool:
        """Whether ``value`` crosses the threshold (a multiple of ``baseline`` for a baseline
        rule); a missing value, or a baseline rule without its baseline, never does."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return False
        limit = self.limit(baseline)
        if limit is None:
            return False
        return {">": value > limit, ">=": value >= limit, "<": value < limit, "<=": value <= limit}[self.op]

    def limit(self, baseline: float | None = None) -> float | None:
        """The value the statistic is compared with: the threshold, or threshold x baseline."""
        if not self.baseline:
            return self.threshold
        return None if baseline is None else self.threshold * baseline

    def text(self) -> str:
        """The canonical text of the rule; ``parse_rule(rule.text()) == rule``."""
        if self.kind == "dropped":
            target = "dropped"
        elif self.kind == "skew":
            target = f"skew {self.name}"
        elif self.kind == "api":
            target = f"{self.name} {self.statistic}"
        else:
            target = f"{self.kind} {self.name} {self.statistic}"
        if self.baseline:
            threshold = f"{_number(self.threshold)}x baseline"
        elif self.is_time:
            threshold = _duration(self.threshold)
        elif self.statistic == "rate":
            threshold = f"{_number(self.threshold)}/s"
        else:
            threshold = _number(self.threshold)
        scope = " across ranks" if self.scope == "job" and self.kind != "skew" else ""
        windows = "window" if self.windows == 1 else "windows"
        return f"{target} {self.op} {threshold}{scope} for {self.windows} {windows}"

    def slug(self) -> str:
        """The rule as a file-name part (a capture folder's): letters, digits, dots, dashes."""
        return re.sub(r"[^A-Za-z0-9.]+", "-", self.text().replace(">", "gt").replace("<", "lt")).strip("-")

    def __str__(self) -> str:
        return self.text()


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _duration(ns: float) -> str:
    """``ns`` in the largest unit that writes it exactly (so it parses back to the same float)."""
    for unit in ("s", "ms", "us"):
        v = ns / UNITS[unit]
        if abs(v) >= 1 and float(_number(v)) * UNITS[unit] == ns:
            return f"{_number(v)}{unit}"
    return f"{_number(ns)}ns"


_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_COMPARISON = re.compile(r"^(?P<left>.*?)\s*(?P<op>>=|<=|>|<)\s*(?P<right>.*)$")
_FOR = re.compile(r"\bfor\s+(?P<k>\S+)\s+windows?$")
_BASELINE = re.compile(rf"^(?P<n>{_NUMBER})\s*x\s*baseline$")
_TIME = re.compile(rf"^(?P<n>{_NUMBER})\s*(?P<unit>[a-zµ]+)$")
_PLAIN = re.compile(rf"^(?P<n>{_NUMBER})\s*(?P<per>/\s*s)?$")

_GRAMMAR = (
    "a rule is TARGET OP THRESHOLD [per rank | across ranks] [for K windows], e.g. "
    "'HcclAllReduce p99 > 3x baseline', 'aclrtSynchronizeStream p50 > 20ms', "
    "'skew HcclAllReduce > 5ms', 'dropped > 0'"
)


def parse_rule(text: str) -> Rule:
    """One :class:`Rule` from its text (grammar in the module's docstring); RuleError if bad."""
    if not isinstance(text, str):
        raise RuleError(f"a rule is text, not {type(text).__name__}: {text!r}; {_GRAMMAR}")
    given = " ".join(text.split())
    try:
        return _parse(given)
    except RuleError as e:
        raise RuleError(f"bad rule {given!r}: {e}") from None


def parse_rules(texts: Iterable[str]) -> list[Rule]:
    """Every rule of ``texts``, or RuleError for the first bad one (nothing is half-accepted)."""
    rules = [parse_rule(t) for t in texts]
    if not rules:
        raise RuleError(f"no rule given; {_GRAMMAR}")
    return rules


def _parse(text: str) -> Rule:
    m = _COMPARISON.match(text)
    if not m or not m.group("left") or not m.group("right"):
        raise RuleError(f"no comparison: compare with one of {', '.join(OPERATORS)}; {_GRAMMAR}")
    op, right = m.group("op"), m.group("right").strip().lower()
    if any(o in right for o in OPERATORS):
        raise RuleError("one comparison per rule (give each condition its own rule)")
    windows = DEFAULT_WINDOWS
    f = _FOR.search(right)
    if f:
        k = f.group("k")
        if not k.isdigit() or int(k) < 1:
            raise RuleError(f"'for {k} windows' needs a whole number of windows >= 1")
        windows, right = int(k), right[: f.start()].strip()
    elif re.search(r"\bfor\b", right):
        raise RuleError("write the windows as 'for K windows', e.g. 'for 3 windows'")
    scope = None
    for words, value in SCOPE_WORDS.items():
        if right.endswith(" " + words) or right == words:
            scope, right = value, right[: -len(words)].strip()
            break
    kind, name, statistic = _target(m.group("left").split())
    if kind == "skew":
        if scope == "rank":
            raise RuleError("skew compares the ranks' arrivals, so it is across ranks, never per rank")
        scope = "job"
    baseline, threshold = _threshold(right, kind, statistic)
    return Rule(kind, name, statistic, op, threshold, baseline, scope or "rank", windows)


def _target(words: list[str]) -> tuple[str, str, str]:
    first = words[0].lower()
    if first == "dropped":
        if len(words) > 1:
            raise RuleError("'dropped' takes no name or statistic: write 'dropped > 0'")
        return "dropped", "", "dropped"
    if first == "skew":
        if len(words) != 2:
            raise RuleError("skew names one collective: 'skew HcclAllReduce > 5ms'")
        return "skew", _collective_call(words[1]), "spread"
    kind = first if first in ("kernel", "collective") else "api"
    rest = words[1:] if kind != "api" else words
    if len(rest) < 2:
        what = "a name and a statistic" if kind != "api" else "a statistic after the name"
        raise RuleError(f"{what} are needed; statistics: {', '.join(STATISTICS)}; {_GRAMMAR}")
    stat = rest[-1].lower()
    stat = STATISTIC_ALIASES.get(stat, stat)
    if stat not in STATISTICS:
        hint = catalog.suggest(rest[-1], [*STATISTICS, *STATISTIC_ALIASES])
        raise RuleError(f"unknown statistic {rest[-1]!r}{hint} (valid: {', '.join(STATISTICS)})")
    name = " ".join(rest[:-1])
    if kind == "api":
        if name.lower() in KEYWORDS:
            raise RuleError(f"{name!r} is a keyword: 'kernel NAME STAT', 'skew NAME', 'dropped'")
        try:
            catalog.resolve(name)  # the one resolver of names: did-you-mean included
        except ValueError as e:
            raise RuleError(f"{e} (or 'kernel NAME', 'collective NAME', 'skew NAME', 'dropped')") from None
    return kind, name, stat


def _collective_call(name: str) -> str:
    try:
        domain, cbid = catalog.resolve(name)
    except ValueError as e:
        raise RuleError(f"skew needs an HCCL function: {e}") from None
    if catalog.DOMAIN_NAMES[domain] != "hccl" or cbid is None or name.lower() == "hccl":
        hccl = [c.label for c in catalog.enableable() if catalog.DOMAIN_NAMES[c.domain] == "hccl"]
        raise RuleError(f"skew needs an HCCL function, not {name!r} (e.g. {', '.join(hccl[:4])})")
    return name


def _threshold(right: str, kind: str, statistic: str) -> tuple[bool, float]:
    low = right
    b = _BASELINE.match(low)
    if b:
        if kind == "dropped":
            raise RuleError("dropped takes a count, not a multiple of a baseline: 'dropped > 0'")
        factor = float(b.group("n"))
        if not factor > 0:
            raise RuleError("a baseline multiple is > 0, e.g. '3x baseline'")
        return True, factor
    if low.endswith("baseline"):
        raise RuleError(f"write a baseline threshold as 'Nx baseline', e.g. '3x baseline', not {right!r}")
    time_stat = statistic in TIME_STATISTICS or kind == "skew"
    if time_stat:
        t = _TIME.match(low)
        if t and t.group("unit") in UNITS:
            return False, float(t.group("n")) * UNITS[t.group("unit")]
        if t:
            hint = catalog.suggest(t.group("unit"), UNITS)
            raise RuleError(f"unknown time unit {t.group('unit')!r}{hint} (valid: {', '.join(UNITS)})")
        if _PLAIN.match(low):
            raise RuleError(f"a time needs its unit ({', '.join(UNITS)}), e.g. '{right}ms', or 'Nx baseline'")
        raise RuleError(f"cannot read {right!r} as a time (e.g. '20ms', '150us') or 'Nx baseline'")
    p = _PLAIN.match(low)
    if p and (p.group("per") is None or statistic == "rate"):
        return False, float(p.group("n"))
    what = "calls per second, e.g. '1000/s'" if statistic == "rate" else "a count, e.g. '0'"
    raise RuleError(f"{statistic} is compared with {what}, or 'Nx baseline', not {right!r}")


def check_names(rules: Iterable[Rule], kernels: Iterable[str], collectives: Iterable[str]) -> None:
    """RuleError for a kernel or collective rule whose name is not among the names a run has
    seen (with did-you-mean); names are checked only when the run has seen some of that kind
    (a job that has not run its first step yet has none)."""
    from ..collectives import op_of  # a collective by its HCCL function or its records' op name

    seen = {"kernel": sorted(set(kernels)), "collective": sorted(set(collectives))}
    for rule in rules:
        names = seen.get(rule.kind)
        if not names:
            continue
        if rule.kind == "kernel":
            known = rule.name in names
        else:
            known = op_of(rule.name) in {op_of(n) for n in names}
        if not known:
            hint = catalog.suggest(rule.name, names)
            shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
            raise RuleError(
                f"bad rule {rule.text()!r}: the run has no {rule.kind} {rule.name!r}{hint} (it has {shown})"
            )
