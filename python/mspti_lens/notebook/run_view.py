"""How a run looks in a notebook (a Run's HTML, ``run.follow()``, ``%mspti run DIR``): ranks
reporting, last update per rank, stale or missing ranks flagged, and the slow rank if one is
named. Formatting only: the numbers come from the Run."""

from __future__ import annotations

import html
import sys
import time
from collections.abc import Callable
from typing import Any

import polars as pl

from ..runs.run import register_view

STATUS_STYLE = {
    "complete": ("#2e7d32", "complete"),
    "running": ("#1565c0", "running"),
    "paused": ("#616161", "paused"),
    "incomplete": ("#c62828", "INCOMPLETE"),
    "stale": ("#e65100", "STALE"),
    "missing": ("#c62828", "MISSING"),
}


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    return f"{seconds / 60:.0f} min ago" if seconds < 5400 else f"{seconds / 3600:.1f} h ago"


def headline(run: Any) -> str:
    """One line: ranks, hosts, how many complete/stale/missing, the slow rank if named."""
    r = run.ranks()
    counts = {s: int((r["status"] == s).sum()) for s in STATUS_STYLE}
    hosts = r["host"].drop_nulls().n_unique()
    parts = [f"{r.height - counts['missing']} ranks reporting on {hosts} host(s)"]
    parts += [f"{n} {s}" for s, n in counts.items() if n and s != "running" or (s == "running" and n)]
    slow = _slow(run)
    if slow:
        parts.append(slow)
    files = run.files()
    dropped = int(files["events_dropped"].sum() or 0) if "events_dropped" in files.columns else 0
    if dropped:  # runs/compact.py keeps every collective; kernels past its cap are counted
        parts.append(f"{dropped:,} device records left out when older windows were merged")
    late = sum(int(files[c].sum() or 0) for c in ("late_exits", "stop_unsettled") if c in files.columns)
    if late:  # a stop waits for the callbacks it can; what it could not is counted, never lost
        parts.append(f"{late:,} calls a stop could not put in a window (files()' late_exits, stop_unsettled)")
    sim = " · SIMULATED" if files.height and bool(files["simulated"].any()) else ""
    return f"mspti-lens run {run.root}{sim}: " + ", ".join(parts)


def _slow(run: Any) -> str | None:
    try:
        s = run.slow_ranks()
    except Exception:  # noqa: BLE001 - a headline without the vote rather than no view
        return None
    s = s.filter(pl.col("slow_affect_count") > 0)
    if not s.height:
        return None
    n = int(s["instances"][0])
    named = ", ".join(f"rank {r} in {c} of {n}" for r, c in zip(s["rank"][:3], s["slow_affect_count"][:3]))
    return f"slow: {named} collective instances"


def run_html(run: Any) -> str:
    """The run as an HTML table, one row per rank (stale and missing ranks flagged)."""
    r = run.ranks()
    rows = []
    for row in r.iter_rows(named=True):
        color, word = STATUS_STYLE[row["status"]]
        rows.append(
            "<tr>"
            f"<td>{html.escape(str(row['host'] or '—'))}</td><td>{row['rank']}</td>"
            f"<td style='color:{color};font-weight:bold'>{word}</td>"
            f"<td>{row['windows'] or 0}</td><td>{(row['calls'] or 0):,}</td>"
            f"<td>{_age(row['age_s'])}</td>"
            "</tr>"
        )
    head = (
        "<tr><th>host</th><th>rank</th><th>status</th><th>windows</th><th>calls</th><th>last update</th></tr>"
    )
    return (
        f"<div class='mspti-lens-run'><b>{html.escape(headline(run))}</b>"
        f"<table>{head}{''.join(rows)}</table></div>"
    )


def refreshed_run_html(run: Any) -> str:
    """The run re-read from disk (new windows, new ranks) as :func:`run_html`; when it cannot be
    read now, a line saying why (the control panel and :func:`run_widget` show it in place)."""
    try:
        return run_html(run.refresh())
    except Exception as e:  # noqa: BLE001 - said in the view, not raised in a refresh thread
        why = html.escape(str(e))
        return f"<b>mspti-lens run {html.escape(run.root)}</b>: cannot read it now ({why})"


def show_live() -> Callable[[Any], None]:
    """A function showing a run's state in place: a display handle in IPython, a line elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import HTML, display

        if get_ipython() is not None:
            handle = display(HTML("<i>mspti-lens: reading the run…</i>"), display_id=True)
            return lambda run: handle.update(HTML(run_html(run)))
    except ImportError:
        pass

    def line(run: Any) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {headline(run)}", file=sys.stderr, flush=True)

    return line


def run_widget(run: Any, every: float = 2.0):
    """An ipywidgets view of the run that refreshes every ``every`` seconds while it is shown
    (for the control panel and ``%mspti run DIR``); ``.close()`` stops it."""
    import threading

    import ipywidgets as w

    view = w.HTML(run_html(run))
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            view.value = refreshed_run_html(run)

    threading.Thread(target=loop, name="mspti-lens-run-view", daemon=True).start()
    close = view.close

    def closing() -> None:
        stop.set()
        close()

    view.close = closing
    return view


register_view(run_html=run_html, run_widget=run_widget, show_live=show_live)
