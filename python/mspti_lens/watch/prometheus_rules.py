"""Watch rules as Prometheus alerting rules over the exported native histograms.

``python -m mspti_lens watch --prometheus-rules --when RULE ...`` prints one rule group (YAML, for
``rule_files``; ``promtool check rules`` accepts it). A fleet whose Prometheus already scrapes the
ranks (``record --prometheus PORT``, export/serve.py) then keeps the rules itself, Alertmanager
wakes people, and its webhook to ``python -m mspti_lens receive DIR`` starts the capture
(watch/alert_receiver.py).

How a rule reads in PromQL (``M`` is ``mspti_lens_call_duration_nanoseconds``, a native
histogram in ns: Prometheus needs ``--enable-feature=native-histograms``):

- the rule's histogram ``H = sum by (G, domain, callback, api) (rate(M{NAME}[WINDOW]))``, where
  ``NAME`` is the label matcher of the rule's name (a function: ``api``; a callback id:
  ``domain`` and ``callback``; a domain: ``domain``) and ``G`` is ``host, rank`` for a rule per
  rank and nothing for one across ranks (histograms add: the merge is exact). ``WINDOW`` is the
  rule's window, ``record --interval`` (10 s by default) or longer (four scrape intervals at
  least, so that ``rate`` has samples to work on).
- a quantile is ``histogram_quantile(q, H)``; ``max`` is ``histogram_quantile(1, H)``, the upper
  bound of the highest bucket (at most 2^(1/128), 0.54 %, above the exact max); ``mean`` is
  ``histogram_sum(H) / histogram_count(H)``; ``rate`` is ``histogram_count(H)`` and ``count``
  that times the window's seconds. A name that covers several functions gives the worst of them
  (``max by (G)``, ``min by (G)`` for ``<``), count and rate their sum, as the file watcher does.
- ``Nx baseline``: the same statistic over the ``BASELINE`` (1 h by default) before ``offset`` =
  the window plus the rule's ``for:``: histograms add, so it is the exact statistic of every call
  of that hour, and the offset keeps the windows that fire the rule out of their own baseline.
  Prometheus keeps no memory of a job's first windows (the file watcher's fixed baseline), so the
  baseline slides: a slowdown that lasts longer than the offset plus half of ``BASELINE`` becomes
  the new normal (the alert resolves); until a job has data that far back the rule has no
  baseline and stays silent, as the file watcher's "learning".
- ``for:`` is K windows: the condition has held for K windows' time before the alert fires.
- the labels ``host`` and ``rank`` (per rank) say which ranks to capture; ``mspti_lens_rule``
  carries the rule's text; the annotations ``value`` and ``baseline`` what fired it.

Kernel, collective, skew and dropped rules read device records and counters the exposition does
not carry: each is one comment line in the output saying so, and the file watcher keeps them.

The rank's /metrics is its current window (``record --prometheus``: a counter reset at every
window), which ``rate`` reads as counter resets: calls between a window's last scrape and its
end are missed by Prometheus (a fraction scrape interval / 2 / window on average, not a bias in
a quantile).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence

from ..catalog import DOMAIN_NAMES, callback, resolve
from ..export.prometheus import METRIC
from .rules import Rule, parse_rule, parse_rules

GROUP = "mspti-lens-watch"
RULE_LABEL = "mspti_lens_rule"  #: the label that carries a rule's text to the receiver
DEFAULT_WINDOW_S = 10.0  #: record's --interval
DEFAULT_BASELINE_S = 3600.0
QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p99.9": 0.999, "max": 1.0}
PER_RANK = ("host", "rank")
SERIES = ("domain", "callback", "api")


class NotExpressible(ValueError):
    """A rule PromQL cannot say over the exported metrics (the reason, in one line)."""


def duration(seconds: float) -> str:
    """A Prometheus duration (``1h``, ``30s``, ``1500ms``) of ``seconds`` (whole milliseconds)."""
    ms = round(seconds * 1000)
    if ms <= 0:
        raise ValueError(f"a duration is > 0 s, not {seconds!r}")
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _selector(rule: Rule, extra: str = "") -> str:
    """The label matchers of the rule's name (the same rows the file watcher reads)."""
    domain, cbid = resolve(rule.name)
    c = callback(domain, cbid) if cbid is not None else None
    if c is not None and (rule.name in c.names_26x or rule.name in c.names_8x):
        pairs = [("api", rule.name)]
    elif c is not None:
        pairs = [("domain", DOMAIN_NAMES[domain]), ("callback", c.short)]
    else:
        pairs = [("domain", DOMAIN_NAMES[domain])]
    return "{" + ",".join(f"{k}={json.dumps(v)}" for k, v in pairs) + extra + "}"


def statistic(rule: Rule, window_s: float, *, offset_s: float | None = None, range_s: float | None = None,
              extra: str = "") -> str:  # fmt: skip
    """The PromQL of the rule's statistic per subject (labels ``host, rank`` per rank, none
    across ranks); with ``offset_s``/``range_s``, over that range that long ago (the baseline)."""
    if rule.kind != "api":
        raise NotExpressible(_WHY[rule.kind])
    group = PER_RANK if rule.scope == "rank" else ()
    rng = duration(range_s if range_s is not None else window_s)
    off = f" offset {duration(offset_s)}" if offset_s else ""
    h = f"sum by ({', '.join((*group, *SERIES))}) (rate({METRIC}{_selector(rule, extra)}[{rng}]{off}))"
    by = f" by ({', '.join(group)})" if group else ""
    if rule.statistic in ("count", "rate"):
        per = f" * {float(window_s)!r}" if rule.statistic == "count" else ""
        return f"sum{by} (histogram_count({h}){per})"
    worst = "max" if rule.op in (">", ">=") else "min"
    if rule.statistic == "mean":
        return f"{worst}{by} (histogram_sum({h}) / histogram_count({h}))"
    return f"{worst}{by} (histogram_quantile({QUANTILES[rule.statistic]:g}, {h}))"


_WHY = {
    "kernel": "kernel device times are not exported to Prometheus (the file watcher keeps this rule)",
    "collective": "collective device times are not exported to Prometheus (the file watcher keeps this rule)",
    "skew": "arrival skew needs the ranks' device records, which Prometheus does not scrape "
    "(the file watcher keeps this rule)",
    "dropped": "the drop counters are not exported to Prometheus (the file watcher keeps this rule)",
}


def alert_expression(rule: Rule, window_s: float, baseline_s: float = DEFAULT_BASELINE_S) -> str:
    """The rule's alerting expression: its statistic compared with the threshold (ns, calls,
    calls/s) or with ``threshold x`` the baseline."""
    value = statistic(rule, window_s)
    if not rule.baseline:
        return f"{value} {rule.op} {float(rule.threshold)!r}"
    base = statistic(rule, window_s, offset_s=baseline_offset(rule, window_s), range_s=baseline_s)
    return f"{value} {rule.op} {float(rule.threshold)!r} * {base}"


def baseline_offset(rule: Rule, window_s: float) -> float:
    """How long before now a baseline ends: the window and the rule's ``for:`` (module docstring)."""
    return window_s * (1 + rule.windows)


def alert_name(rule: Rule) -> str:
    """A valid Prometheus alert name (a metric name) from the rule's text."""
    return "MsptiLens_" + re.sub(r"[^A-Za-z0-9_]", "_", rule.slug()).strip("_")


def _baseline_annotation(rule: Rule, window_s: float, baseline_s: float) -> str:
    """A template that queries the alert's own baseline when it fires (its subject's labels)."""
    if rule.scope == "rank":
        extra = ',host="%s",rank="%s"'
        q = statistic(
            rule, window_s, offset_s=baseline_offset(rule, window_s), range_s=baseline_s, extra=extra
        )
        query = f"printf `{q}` $labels.host $labels.rank"
    else:
        q = statistic(rule, window_s, offset_s=baseline_offset(rule, window_s), range_s=baseline_s)
        query = f"`{q}`"
    return "{{ with " + query + " | query }}{{ . | first | value }}{{ end }}"


def _quoted(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar


def prometheus_rules(
    rules: Sequence[Rule | str], *, window_s: float = DEFAULT_WINDOW_S, baseline_s: float = DEFAULT_BASELINE_S
) -> str:
    """The rules as one Prometheus rule group (YAML text); a rule PromQL cannot say is a comment
    line saying why."""
    parsed = [r if isinstance(r, Rule) else parse_rule(r) for r in rules] or parse_rules([])
    if not window_s > 0 or not baseline_s > window_s:
        raise ValueError(
            f"the window is > 0 s and the baseline longer than it, not {window_s!r} and {baseline_s!r}"
        )
    head = [
        "# mspti-lens watch rules as Prometheus alerting rules (`watch --prometheus-rules`).",
        f"# Over {METRIC} (native histograms: --enable-feature=native-histograms); window "
        f"{duration(window_s)}, baselines over {duration(baseline_s)}.",
        "# Route their alerts to `python -m mspti_lens receive DIR` (Alertmanager webhook_configs).",
    ]
    body, names = [], set()
    for rule in parsed:
        try:
            expr = alert_expression(rule, window_s, baseline_s)
        except NotExpressible as e:
            head.append(f"# not expressible in PromQL: {rule.text()}: {e}")
            continue
        name = alert_name(rule)
        while name in names:
            name += "_"
        names.add(name)
        annotations = {
            "summary": f"mspti-lens: {rule.text()}"
            + (" on rank {{ $labels.rank }} ({{ $labels.host }})" if rule.scope == "rank" else ""),
            "value": "{{ $value }}",
        }  # fmt: skip
        if rule.baseline:
            annotations["baseline"] = _baseline_annotation(rule, window_s, baseline_s)
        body += [
            f"      - alert: {name}",
            f"        expr: {_quoted(expr)}",
            f"        for: {duration(window_s * rule.windows)}",
            "        labels:",
            f"          {RULE_LABEL}: {_quoted(rule.text())}",
            "        annotations:",
            *(f"          {k}: {_quoted(v)}" for k, v in annotations.items()),
        ]
    if not body:
        return "\n".join([*head, "groups: []"]) + "\n"
    return "\n".join([*head, "groups:", f"  - name: {GROUP}", "    rules:", *body]) + "\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``watch --prometheus-rules``."""
    p.add_argument(
        "--prometheus-rules",
        action="store_true",
        help="print the rules as Prometheus alerting rules (YAML for rule_files) and exit",
    )
    p.add_argument(
        "--window",
        type=float,
        default=DEFAULT_WINDOW_S,
        metavar="S",
        help=f"with --prometheus-rules: seconds of one window, rate()'s range and for:'s unit "
        f"(default {DEFAULT_WINDOW_S:g}, record's --interval; at least 4 scrape intervals)",
    )
    p.add_argument(
        "--baseline-range",
        type=float,
        default=DEFAULT_BASELINE_S,
        metavar="S",
        help=f"with --prometheus-rules: seconds a baseline covers (default {DEFAULT_BASELINE_S:g})",
    )


def main(args: argparse.Namespace) -> int:
    """Print the rule group of ``args.when``."""
    sys.stdout.write(
        prometheus_rules(parse_rules(args.when), window_s=args.window, baseline_s=args.baseline_range)
    )
    return 0
