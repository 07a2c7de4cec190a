"""How a Snapshot reads in a notebook and a terminal: its title line, its summary table, its text
and HTML forms, and the banner over simulated data. Registered with the model as its
:class:`~mspti_lens.snapshot.Rendering` when this module loads (mspti_lens/__init__.py loads it),
so Snapshot's reprs call these without the model importing the notebook; they take any snapshot
they are given."""

from __future__ import annotations

import html
from typing import Any

import polars as pl

from ..snapshot import Rendering, register_rendering
from ..units import check_unit
from .tables import Table, count_of

#: What every rendering of simulated data says first (its plain-text line).
SIMULATED_TEXT = "SIMULATED DATA: produced by the mspti-lens simulator, not measured on an NPU"
#: The banner above every rendering of simulated data (tables, panel views).
SIMULATED_BANNER_HTML = (
    f'<div style="background:#fff3cd;color:#664d03;padding:2px 6px;font-weight:bold">{SIMULATED_TEXT}</div>'
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
    if snap.activity is not None:  # device records lost or still missing (activity.LOSS_COUNTERS)
        extra.extend(f"{v:,} {k.replace('_', ' ')}" for k, v in snap.activity.losses().items())
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
    df = snap.summary().select(TABLE_COLUMNS)  # time_pct, as in kernels() and run summaries
    n = len(df)
    if top is not None and top < n:
        return Table(df.head(top), f"{top} of {count_of(n, 'API')} by total time", top=0, unit=unit)
    return Table(df, top=0, unit=unit)


def as_text(snap: Any) -> str:
    """The title and the table (``snap.table()``, so a subclass's settings hold) as plain text."""
    dev = device_text(snap)
    tail = "\n\n" + dev if dev else ""
    if not len(snap):
        return snap._title() + "\n(no calls recorded)" + tail
    return snap._title() + "\n" + snap.table().text() + tail


def as_html(snap: Any) -> str:
    """The banner when simulated, the title and the table as HTML."""
    banner = SIMULATED_BANNER_HTML if snap.simulated else ""
    body = snap.table().html() if len(snap) else "<p>(no calls recorded)</p>"
    return f"{banner}<div><b>{html.escape(snap._title())}</b></div>{body}{device_html(snap)}"


#: What the device frames show under the host table: (method, caption, columns shown as named).
_LAUNCH_COLUMNS = {"name": "name", "join": "join", "api_num": "launches", "api_med_ns": "host_enqueue_med_ns",
                   "queue_med_ns": "queue_delay_med_ns", "kernel_med_ns": "device_med_ns",
                   "kernel_total_ns": "device_total_ns"}  # fmt: skip
_KERNEL_COLUMNS = (
    "name",
    "type",
    "num_calls",
    "time_pct",
    "total_ns",
    "avg_ns",
    "med_ns",
    "p99_ns",
    "max_ns",
)
_COLLECTIVE_COLUMNS = (
    "group",
    "op",
    "from",
    "num_calls",
    "total_ns",
    "med_ns",
    "p99_ns",
    "bytes",
    "bw_med_gbps",
    "busbw_gbps",
)
_RANGE_COLUMNS = (
    "domain",
    "name",
    "side",
    "num_calls",
    "total_ns",
    "avg_ns",
    "med_ns",
    "p99_ns",
    "max_ns",
)
DEVICE_PLOTS = "`%mspti plot -k launch_split` (or kernels, collectives)"


def _collected(snap: Any) -> bool:
    """True when the snapshot's window collected activity kinds (device time)."""
    d = getattr(snap, "device", None)
    return d is not None and bool(d.info.get("kinds"))


def device_tables(snap: Any, unit: str | None = None, top: int | None = None) -> list[Table]:
    """The device time of a snapshot with activity, as tables for under its host table: the launch
    split (host enqueue, queue delay, device time per launch function), the kernels, the
    collectives and the MSTX ranges (marks last: they have no duration), each by total time, the
    first ``top`` rows. Empty without activity."""
    if getattr(snap, "device", None) is None:
        return []
    out = []
    la = snap.launches()
    if len(la):
        caption = "launch split per launch function · by total device time" + sampled_label(la)
        la = la.sort("kernel_total_ns", descending=True, nulls_last=True)
        la = la.select([pl.col(c).alias(n) for c, n in _LAUNCH_COLUMNS.items() if c in la.columns])
        out.append(_cut(la, caption, unit, top))
    k = snap.kernels()
    if len(k):
        k = k.sort("total_ns", descending=True).select([c for c in _KERNEL_COLUMNS if c in k.columns])
        out.append(_cut(k, "kernels (device time) · by total time", unit, top))
    col = snap.collectives()
    if len(col):
        col = col.sort("total_ns", descending=True).select(
            [c for c in _COLLECTIVE_COLUMNS if c in col.columns]
        )
        out.append(_cut(col, "collectives (device time, bandwidth) · by total time", unit, top))
    rg = snap.ranges()
    if len(rg):
        rg = rg.sort("total_ns", "domain", "name", descending=[True, False, False], nulls_last=True)
        rg = rg.select([c for c in _RANGE_COLUMNS if c in rg.columns])
        out.append(_cut(rg, "MSTX ranges (host and device side) and marks · by total time", unit, top))
    return out


def sampled_label(la: pl.DataFrame) -> str:
    """The launch split's label when its join was sampled (``Session(join_sample=...)``): the
    measured fraction of time, and the largest rank error of its rows (95 %); empty when exact."""
    if "sampled_fraction" not in la.columns or not len(la) or la["sampled_fraction"][0] >= 1.0:
        return ""
    errors = [e for e in la["rank_error_95"].to_list() if e is not None]
    bound = f", quantiles within ±{max(errors):.1%} of ranks (95 %)" if errors else ""
    return f" · join sampled {float(la['sampled_fraction'][0]):.1%} of the time{bound}"


def _cut(df: pl.DataFrame, caption: str, unit: str | None, top: int | None) -> Table:
    n = len(df)
    if top and top < n:
        return Table(df.head(top), f"{caption} · {top} of {n:,} rows", top=0, unit=unit)
    return Table(df, caption, top=0, unit=unit)


def device_note(snap: Any) -> str:
    """One line under the device tables: where the rest is; or why there are none although
    activity was collected."""
    if getattr(snap, "device", None) is None:
        return ""
    if not (len(snap.launches()) or len(snap.kernels()) or len(snap.collectives()) or len(snap.ranges())):
        if not _collected(snap):
            return ""
        kinds = ", ".join(snap.activity.info["kinds"])
        return (
            f"no device records of {kinds} in this window: "
            "did it launch kernels or collectives, or mark MSTX ranges?"
        )
    frames = "`_.launches()`, `_.kernels()`, `_.collectives()`, `_.ranges()`"
    return f"device time: {frames} as frames; {DEVICE_PLOTS}"


def device_text(snap: Any, unit: str | None = None, top: int | None = None) -> str:
    parts = [t.text() for t in device_tables(snap, unit, top)]
    note = device_note(snap)
    return "\n\n".join([*parts, note] if note else parts)


def device_html(snap: Any, unit: str | None = None, top: int | None = None) -> str:
    tables = "".join(f"<div style='margin-top:6px'>{t.html()}</div>" for t in device_tables(snap, unit, top))
    note = device_note(snap)
    if not tables and not note:
        return ""
    return (
        "<div class='mspti-lens-device'><div style='margin-top:8px'><b>Device time</b></div>"
        f"{tables}<div style='font-size:12px;color:#555'>{html.escape(note)}</div></div>"
    )


register_rendering(Rendering(title=title, table=summary_table, text=as_text, html=as_html))
