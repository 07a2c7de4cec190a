"""Latency over time: p50 and p99 per interval for the busiest APIs (``Session(interval=...)``).

Reads the ``timeline()`` frame only (num_calls, p50_ns, p99_ns per interval and API): each line
steps across its interval, p50 solid and p99 dashed in the API's colour, on a log time axis."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import polars as pl

from ..units import format_ns
from .figure import _message_figure, _new_figure, _title

TIMELINE_COLUMNS = ("start", "end", "name", "num_calls", "p50_ns", "p99_ns")


def _timeline_frame(data: Any) -> tuple[pl.DataFrame, bool]:
    if isinstance(data, pl.DataFrame):
        frame = data
    elif hasattr(data, "timeline"):
        frame = data.timeline()
    else:
        raise ValueError(
            f"timeline() plots a Session, a Snapshot or a timeline frame, not {type(data).__name__}"
        )
    missing = [c for c in TIMELINE_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"a timeline frame needs columns {list(TIMELINE_COLUMNS)}; it lacks {missing}")
    simulated = "source" in frame.columns and bool((frame["source"] == "simulated").any())
    return frame, simulated


def timeline(
    data: Any,
    names: Iterable[str] | None = None,
    top: int = 4,
    title: str | None = None,
    figsize: tuple[float, float] = (9.0, 4.0),
):
    """p50/p99 over time of the ``top`` APIs by calls (or of ``names``). ``data``: a Session
    (``Session(interval=...)``), a Snapshot taken from one, or a ``timeline()`` frame."""
    frame, simulated = _timeline_frame(data)
    if not isinstance(top, int) or isinstance(top, bool) or top < 1:
        raise ValueError(f"top must be a positive int (APIs to draw), not {top!r}")
    if names is not None:
        picked = list(names)
        unknown = sorted(set(picked) - set(frame["name"]))
        if unknown and len(frame):
            raise ValueError(f"no timeline rows for {unknown}; APIs with rows: {sorted(set(frame['name']))}")
    else:
        busiest = (
            frame.group_by("name")
            .agg(pl.col("num_calls").sum())
            .sort(["num_calls", "name"], descending=[True, False])
        )
        picked = busiest["name"].head(top).to_list()
    if not len(frame):  # nothing to draw: a short figure that says how to get intervals
        return _message_figure(NO_INTERVALS, figsize[0])
    fig, axes = _new_figure(figsize)
    ax = axes[0][0]
    from matplotlib.ticker import FuncFormatter

    t0: Any = frame["start"].min()
    series = []  # (label, colour, linestyle, xs, ys) of every line
    for i, name in enumerate(picked):
        sub = frame.filter(pl.col("name") == name).sort("start")
        if not len(sub):
            continue
        xs = [_seconds(t, t0) for t in (*sub["start"].to_list(), sub["end"][-1])]
        for col, style, label in (("p50_ns", "-", "p50"), ("p99_ns", "--", "p99")):
            ys = sub[col].cast(pl.Float64).to_list()
            series.append((f"{name} {label}", f"C{i % 10}", style, xs, ys))
    # A line on another (APIs of one latency) would hide it: each is drawn thinner than the ones
    # it lies on, so every colour shows, and its legend entry names the line it coincides with.
    near = _near_decades(series, 0.6 * figsize[1] * 100)  # the axes' height in CSS px, about
    for j, (label, colour, style, xs, ys) in enumerate(series):
        under = [s[0] for s in series[:j] if _coincide(series[j], s, near)]
        over = sum(_coincide(series[j], s, near) for s in series[j + 1 :])
        ax.step(
            xs,
            [*ys, ys[-1]],
            where="post",
            color=colour,
            linestyle=style,
            linewidth=LINE_WIDTH + COINCIDENT_STEP * over,
            label=label + (f" (≈ {under[0]})" if under else ""),
        )
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_ns(v) if v > 0 else ""))
    ax.set_ylabel("host time per call")
    # seconds since the first interval (a clock axis read "05 06 ... 10" under a date offset)
    start = t0.strftime("%H:%M:%S") if hasattr(t0, "strftime") else str(t0)
    ax.set_xlabel(f"time since the first interval (s; it began at {start} UTC)")
    ax.grid(True, which="major", alpha=0.3)
    # under the axes, so the plot keeps the figure's width however long the names are
    ax.legend(
        fontsize=8, ncol=2, loc="upper left", bbox_to_anchor=(0.0, -0.2), borderaxespad=0, frameon=False
    )
    ax.set_title(_title(title or "Host API latency over time (p50 solid, p99 dashed)", simulated))
    fig.tight_layout()
    return fig


NO_INTERVALS = (
    "no intervals: this session keeps no timeline. In a notebook: %%mspti --interval 0.5 (or "
    "%mspti start --interval 0.5); in code: Session(interval=0.5)"
)


LINE_WIDTH = 1.5  # of a line nothing lies on; COINCIDENT_STEP wider per line drawn on top of it
COINCIDENT_STEP = 1.5
COINCIDENT_PX = 3.0  # lines closer than this everywhere read as one on the log axis


def _near_decades(series: list, height_px: float) -> float:
    """How many decades of the log time axis COINCIDENT_PX is, for the values of ``series``."""
    values = [v for s in series for v in s[4] if v > 0]
    if not values:
        return 0.0
    decades = max(math.log10(max(values) / min(values)), 1.0)  # the axis spans at least one
    return decades * COINCIDENT_PX / max(height_px, 1.0)


def _coincide(a: tuple, b: tuple, near: float) -> bool:
    """Two step lines (``series`` entries) lie on each other: the same intervals, and values
    within ``near`` decades everywhere."""
    (xs, ys), (xs2, ys2) = a[3:5], b[3:5]
    if len(xs) != len(xs2) or any(abs(p - q) > 1e-9 for p, q in zip(xs, xs2)):
        return False
    return all(p == q or (p > 0 and q > 0 and abs(math.log10(p / q)) <= near) for p, q in zip(ys, ys2))


def _seconds(t: Any, t0: Any) -> float:
    """Seconds from ``t0`` to ``t`` (datetimes, or numbers of seconds)."""
    d = t - t0
    return d.total_seconds() if hasattr(d, "total_seconds") else float(d)
