"""Plots of a run (``mspti_lens.plots.rank_heatmap``): what each rank spent in one function, per
interval of the run's own time axis. The numbers come from :meth:`Run.timeline`; the plot only
places each rank's windows on that axis (and adds up the windows that share a cell)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from ..units import UNITS, check_unit
from .figure import _new_figure, _title

METRICS = ("avg_ns", "total_ns", "num_calls", "max_ns", "min_ns")
EMPTY_COLOUR = "#e6e6e6"


def _unit_text(unit: str) -> str:
    return "µs" if unit == "us" else unit


def time_cells(t: pl.DataFrame, interval_s: float) -> pl.DataFrame:
    """Each timeline row's column on the run's time axis: ``cell`` = the interval of the run (of
    ``interval_s`` seconds from the earliest window start of any rank) in which the window ended,
    so the same column is the same wall-clock time on every rank."""
    t0 = float(t["window_start"].min())  # type: ignore[arg-type]
    return t.with_columns(
        ((pl.col("window_end") - t0) / interval_s - 1e-9)
        .floor()
        .clip(lower_bound=0)
        .cast(pl.Int64)
        .alias("cell")
    )


def rank_heatmap(run, name: str, metric: str = "avg_ns", unit: str = "us"):
    """A rank x time heat map of ``metric`` of function ``name`` (e.g. "HcclAllReduce"): one row
    per rank, one column per recording interval of the run (the columns line up in wall-clock
    time across ranks). A slow rank shows as the one row whose collectives are SHORT (it waits
    least), the others long. Grey cells: that rank finished no call of ``name`` in that interval
    (it had not started, had finished, or was elsewhere in its step)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; valid metrics are {', '.join(METRICS)}")
    check_unit(unit)
    t = run.timeline()
    names = sorted(set(t["name"].to_list()))
    if name not in names:
        raise ValueError(
            f"no data for {name!r} in this run; functions recorded: {', '.join(names) or '(none)'}"
        )
    files = run.files()
    intervals = files["interval_s"].drop_nulls() if "interval_s" in files.columns else pl.Series([])
    lengths = (t["window_end"] - t["window_start"]).filter(t["window_end"] > t["window_start"])
    interval = float(intervals.max()) if len(intervals) else float(lengths.median() or 1.0)  # type: ignore[arg-type]
    t = time_cells(t.filter(pl.col("name") == name), interval)
    # Windows of one rank that end in the same interval add up (avg = total / calls).
    per = t.group_by("host", "rank", "cell").agg(
        pl.col("num_calls").sum(),
        pl.col("total_ns").sum(),
        pl.col("max_ns").max(),
        pl.col("min_ns").min(),
    )
    per = per.with_columns((pl.col("total_ns").cast(pl.Float64) / pl.col("num_calls")).alias("avg_ns"))
    rows = per.select("host", "rank").unique().sort("rank", "host")
    ncols = int(per["cell"].max()) + 1  # type: ignore[arg-type]
    grid = np.full((rows.height, ncols), np.nan)
    where = {(h, r): i for i, (h, r) in enumerate(rows.iter_rows())}
    scale = 1.0 if metric == "num_calls" else UNITS[unit]
    for h, r, c, v in per.select("host", "rank", "cell", metric).iter_rows():
        grid[where[(h, r)], c] = float(v) / scale
    # At most 12 x 9 inches: a long run's columns get narrower, its labels keep their size (a
    # wider figure is scaled down to the notebook's width, labels and all).
    width = min(12.0, max(5.5, 0.45 * ncols + 3.5))
    fig, axes = _new_figure((width, min(9.0, max(3.2, 0.32 * rows.height + 2.0))))
    ax = axes[0][0]
    ax.set_facecolor(EMPTY_COLOUR)
    im = ax.imshow(np.ma.masked_invalid(grid), aspect="auto", interpolation="nearest", cmap="viridis")
    slow = _flagged(run)
    ax.set_yticks(
        range(rows.height),
        [
            (f"{h} r{r}" if rows["host"].n_unique() > 1 else f"rank {r}")
            + (" ◀ slow" if (h, r) in slow else "")
            for h, r in rows.iter_rows()
        ],
        fontsize=8,
    )
    for label, (h, r) in zip(ax.get_yticklabels(), rows.iter_rows()):
        if (h, r) in slow:  # the flagged rank: its collectives are the SHORT ones (it waits least)
            label.set_color("#b02a37")
            label.set_fontweight("bold")
    step = max(1, math.ceil(ncols / 12))  # at most about 12 labels
    ticks = list(range(0, ncols, step))
    ax.set_xticks(ticks, [f"{(c + 1) * interval:g}" for c in ticks], fontsize=8)
    ax.set_xlabel(
        f"time since the run's first window (s), one column per {interval:g} s interval", fontsize=9
    )
    label = metric.removesuffix("_ns").replace("_", " ")
    fig.colorbar(im, ax=ax, label=label if metric == "num_calls" else f"{label} ({_unit_text(unit)})")
    simulated = bool(files["simulated"].any())
    ax.set_title(_title(f"{name}: {label} per rank over the run", simulated), fontsize=10)
    if np.isnan(grid).any():
        import textwrap

        note = (
            f"grey: the rank finished no {name} call in that interval (not started yet, done, or "
            "elsewhere in its step)"
            + (
                "; ◀ slow: the rank the run's vote names (its collectives are "
                "the shortest: it arrives last and waits least)"
                if slow
                else ""
            )
        )
        lines = textwrap.fill(note, width=int(width * 100 / 4.6))  # ~4.6 px per 7.5 pt character
        fig.text(0.01, 0.005, lines, fontsize=7.5, ha="left", va="bottom")
        fig.tight_layout(
            rect=(0, 0.03 + 0.035 * (lines.count("\n") + 1) * 3.2 / fig.get_size_inches()[1], 1, 1)
        )
    else:
        fig.tight_layout()
    return fig


def _flagged(run) -> set[tuple[str, int]]:
    """(host, rank) of the ranks the run's vote names slow most often (``run.slow_ranks()``)."""
    votes = getattr(run, "slow_ranks", None)
    if votes is None:
        return set()
    try:
        t = votes()
    except Exception:  # a run without the data to vote: nothing to mark
        return set()
    if not len(t) or "slow_affect_count" not in t.columns:
        return set()
    top = t["slow_affect_count"].max()
    if not top:
        return set()
    return {
        (h, r) for h, r in t.filter(pl.col("slow_affect_count") == top).select("host", "rank").iter_rows()
    }
