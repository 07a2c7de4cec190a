"""How a Snapshot reads in a notebook and a terminal: its title line, its summary table, its text
and HTML forms, and the banner over simulated data. Snapshot's own reprs call these; they take any
snapshot they are given and import nothing of snapshot.py, which imports them."""

from __future__ import annotations

import html
from typing import Any

from ..units import check_unit
from .tables import Table, count_of

#: The banner above every rendering of simulated data (tables, panel views).
SIMULATED_BANNER_HTML = (
    '<div style="background:#fff3cd;color:#664d03;padding:2px 6px;font-weight:bold">'
    "SIMULATED DATA: produced by the mspti-lens simulator, not measured on an NPU</div>"
)
#: The summary columns :meth:`Snapshot.table` shows, in this order.
TABLE_COLUMNS = ("domain", "name", "num_calls", "time_pct", "total_ns", "avg_ns", "min_ns", "med_ns",
                 "p90_ns", "p99_ns", "p999_ns", "max_ns", "stddev_ns")  # fmt: skip


def title(snap: Any) -> str:
    """One line: backend, calls, APIs, duration, and what was lost or is still open."""
    n = snap.total_calls
    extra = []
    if snap.unmatched:
        extra.append(f"{snap.unmatched} unmatched")
    if snap.in_flight:
        extra.append(f"{snap.in_flight} in flight")
    if snap.device is not None:  # device records lost or still missing (device.LOSS_COUNTERS)
        extra.extend(f"{v:,} {k.replace('_', ' ')}" for k, v in snap.device.losses().items())
    tail = f" ({', '.join(extra)})" if extra else ""
    return (
        f"mspti-lens snapshot · {snap.label} · {count_of(n, 'call')} in {count_of(len(snap), 'API')} · "
        f"{snap.duration_s:.2f} s{tail}"
    )


def summary_table(snap: Any, unit: str | None = None, top: int | None = None) -> Table:
    """:meth:`Snapshot.table`: the summary's :data:`TABLE_COLUMNS`, the first ``top`` APIs by
    total time with a caption saying when rows are cut."""
    if unit is not None:
        check_unit(unit)
    if top is not None and (not isinstance(top, int) or isinstance(top, bool) or top < 1):
        raise ValueError(f"top must be a positive int (rows to show), not {top!r}")
    df = snap.summary().select(TABLE_COLUMNS).rename({"time_pct": "time_%"})
    n = len(df)
    if top is not None and top < n:
        return Table(df.head(top), f"{top} of {count_of(n, 'API')} by total time", top=0, unit=unit)
    return Table(df, top=0, unit=unit)


def as_text(snap: Any) -> str:
    """The title and the table (``snap.table()``, so a subclass's settings hold) as plain text."""
    if not len(snap):
        return snap._title() + "\n(no calls recorded)"
    return snap._title() + "\n" + snap.table().text()


def as_html(snap: Any) -> str:
    """The banner when simulated, the title and the table as HTML."""
    banner = SIMULATED_BANNER_HTML if snap.simulated else ""
    body = snap.table().html() if len(snap) else "<p>(no calls recorded)</p>"
    return f"{banner}<div><b>{html.escape(snap._title())}</b></div>{body}"
