"""Plots of a run (``mspti_lens.plots.rank_heatmap``): what each rank spent in one function, per
interval of the run's own time axis. The numbers come from :meth:`Run.timeline`; the plot only
places each rank's windows on that axis (and adds up the windows that share a cell)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from ..units import UNITS, check_unit
from .figure import CSS_DPI, PIXEL_RATIO, _new_figure, _title

METRICS = ("avg_ns", "total_ns", "num_calls", "max_ns", "min_ns")
EMPTY_COLOUR = "#e6e6e6"
OFF_HATCH = "////"  # cells where profiling was off on that rank: grey, hatched


def _unit_text(unit: str) -> str:
    return "µs" if unit == "us" else unit


def time_cells(t: pl.DataFrame, interval_s: float, t0: float | None = None) -> pl.DataFrame:
    """Each timeline row's column on the run's time axis: ``cell`` = the interval of the run (of
    ``interval_s`` seconds from ``t0``, default the earliest window start of any rank) in which
    the window ended, so the same column is the same wall-clock time on every rank."""
    if t0 is None:
        t0 = float(t["window_start"].min())  # type: ignore[arg-type]
    return t.with_columns(
        ((pl.col("window_end") - t0) / interval_s - 1e-9)
        .floor()
        .clip(lower_bound=0)
        .cast(pl.Int64)
        .alias("cell")
    )


# A long run's intervals are binned into at most this many columns, so that the figure stays
# within MAX_WIDTH_IN and its 8 pt labels are never scaled down (the run panel shows plots at
# most 760 CSS px wide: a wider figure shrank its labels to ~6 px).
MAX_COLUMNS = 40
MAX_WIDTH_IN = 7.6
MAX_HEIGHT_IN = 9.0
# Sequential, light to hot: the slow rank is the hot row. For a collective the slow rank's
# calls are the SHORT ones (it arrives last and waits least), so there the map runs the other way.
CMAP = "YlOrRd"


def _is_collective(t: pl.DataFrame) -> bool:
    return "domain" in t.columns and bool((t["domain"] == "hccl").any())


def rank_heatmap(run, name: str, metric: str = "avg_ns", unit: str = "us"):
    """A rank x time heat map of ``metric`` of function ``name`` (e.g. "HcclAllReduce"): one row
    per rank, one column per recording interval of the run, or per several consecutive
    intervals of a long run (at most :data:`MAX_COLUMNS`; the columns line up in wall-clock time
    across ranks and begin at the run's first interval with a call of ``name``). Hot (red) is
    slow: long calls, or for a collective (HCCL) SHORT ones, since the slow rank arrives last
    and waits least; the rank the run's vote names is outlined and labelled. Hatched cells:
    profiling was off on that rank (no on period of ``run.periods()`` covers them); grey cells:
    that rank finished no call of ``name`` in that interval (it was elsewhere in its step).
    Segments compaction merged span many intervals and are left out, said in the caption."""
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
    # a window that holds the key but no call of it is no data (it would be a grey column)
    t = t.filter((pl.col("name") == name) & (pl.col("num_calls") > 0))
    if not t.height:
        raise ValueError(f"no call of {name!r} finished in any window of this run yet")
    # A segment compaction merged (runs/compact.py) spans many intervals: in the one column it
    # ended in it would stand for all of them. Left out (said in the caption) while fine windows
    # remain; its calls are in the run's summary.
    t0 = float(t["window_start"].min())  # type: ignore[arg-type]  # the run's first window with a call
    fine, left_out = t, 0
    if {"host", "rank", "window", "window_first"} <= set(files.columns):
        segments = files.filter(pl.col("window_first") < pl.col("window")).select("host", "rank", "window")
        fine = t.join(segments.unique(), on=["host", "rank", "window"], how="anti")
        left_out = t.height - fine.height  # rows of one function: one per (host, rank, window)
    t = fine if fine.height else t
    left_out = left_out if fine.height else 0
    collective = _is_collective(t)
    t = time_cells(t, interval, t0)
    # The axis starts at the first interval with a call and bins a long run's intervals.
    first = int(t["cell"].min())  # type: ignore[arg-type]
    span = int(t["cell"].max()) - first + 1  # type: ignore[arg-type]
    per_column = math.ceil(span / MAX_COLUMNS)
    t = t.with_columns(((pl.col("cell") - first) // per_column).alias("cell"))
    # Windows of one rank in the same column add up (avg = total / calls).
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
    off = _off_cells(_periods(run), rows, t0, interval, first, per_column, ncols)
    off &= np.isnan(grid)
    width = min(MAX_WIDTH_IN, max(5.5, 0.1 * ncols + 3.6))
    fig, axes = _new_figure((width, min(MAX_HEIGHT_IN, max(3.2, 0.32 * rows.height + 2.0))))
    ax = axes[0][0]
    ax.set_facecolor(EMPTY_COLOUR)
    # for a collective's times, short is hot; a count is hot where high, as a long time is
    short_is_slow = collective and metric != "num_calls"
    cmap = CMAP + "_r" if short_is_slow else CMAP
    im = ax.imshow(np.ma.masked_invalid(grid), aspect="auto", interpolation="nearest", cmap=cmap)
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
    from matplotlib.patches import Rectangle

    for i, c0, c1 in _runs_of(off):  # one hatched patch per run of off cells in a row
        ax.add_patch(
            Rectangle((c0 - 0.5, i - 0.5), c1 - c0, 1, fill=False, hatch=OFF_HATCH, edgecolor="#9e9e9e", lw=0)
        )
    for i, (label, (h, r)) in enumerate(zip(ax.get_yticklabels(), rows.iter_rows())):
        if (h, r) in slow:  # the flagged rank: its label and its row outlined
            label.set_color(SLOW_COLOUR)
            label.set_fontweight("bold")
            ax.add_patch(
                Rectangle(
                    (-0.5, i - 0.5), ncols, 1, fill=False, edgecolor=SLOW_COLOUR, linewidth=2, clip_on=False
                )
            )
    # ticks on the columns' edges, each the time its column begins (at most about 10 labels)
    step = max(1, math.ceil(ncols / 10))
    edges = list(range(0, ncols + 1, step))
    seconds = per_column * interval
    ax.set_xticks(
        [c - 0.5 for c in edges], [f"{(first + c * per_column) * interval:g}" for c in edges], fontsize=8
    )
    ax.set_xlabel(
        f"time since the run's first window (s), one column per {seconds:g} s"
        + (f" ({per_column} intervals)" if per_column > 1 else ""),
        fontsize=9,
    )
    label = metric.removesuffix("_ns").replace("_", " ")
    bar = fig.colorbar(im, ax=ax)
    unit_label = label if metric == "num_calls" else f"{label} ({_unit_text(unit)})"
    if short_is_slow:
        bar.ax.invert_yaxis()  # hot at the top, as in every other map
        unit_label += ", red = short"
    bar.set_label(unit_label, fontsize=9)
    simulated = bool(files["simulated"].any())
    ax.set_title(_title(f"{name}: {label} per rank over the run", simulated), fontsize=10)
    notes = []
    if off.any():
        notes.append(
            "hatched: profiling was off on that rank (paused, stopped, or the rank was not running)."
        )
    if (np.isnan(grid) & ~off).any():
        notes.append(
            f"grey: the rank finished no {name} call in that interval while profiling was on "
            "(elsewhere in its step, or not enabled)."
            if off.any() or _has_periods(run)
            else f"grey: the rank finished no {name} call in that interval (not started yet, done, or "
            "elsewhere in its step)."
        )
    if short_is_slow:
        notes.append(
            "Red = short: a collective ends when its last rank arrives, so the slow rank waits least."
        )
    if slow:
        notes.append("◀ slow, outlined: the rank the run's vote names.")
    if left_out:
        notes.append(
            f"Not drawn: {left_out} segment(s) of older windows merged by compaction, each spanning "
            "many intervals (their calls are in the summary)."
        )
    _footnote(fig, " ".join(notes))
    return fig


def _periods(run) -> pl.DataFrame | None:
    """The run's on periods (``run.periods()``: host, rank, start, end), or None for a run that
    does not say when profiling was on."""
    periods = getattr(run, "periods", None)
    if periods is None:
        return None
    try:
        p = periods()
    except Exception:  # noqa: BLE001 - a run without periods: no cell is said to be off
        return None
    return p if len(p) and {"host", "rank", "start", "end"} <= set(p.columns) else None


def _has_periods(run) -> bool:
    return _periods(run) is not None


def _off_cells(
    periods: pl.DataFrame | None,
    rows: pl.DataFrame,
    t0: float,
    interval: float,
    first: int,
    per_column: int,
    ncols: int,
) -> np.ndarray:
    """(rank row, column): True where no on period of the rank overlaps the column's time (the
    columns of :func:`time_cells`: a window belongs to the interval it ended in)."""
    off = np.zeros((rows.height, ncols), dtype=bool)
    if periods is None:
        return off
    off[:] = True
    where = {(h, r): i for i, (h, r) in enumerate(rows.iter_rows())}
    for h, r, start, end in periods.select("host", "rank", "start", "end").iter_rows():
        i = where.get((h, r))
        if i is None or start is None or end is None:
            continue
        a = math.floor((float(start) - t0) / interval) - first
        b = math.floor((float(end) - t0) / interval - 1e-9) - first
        lo, hi = max(a, 0) // per_column, min(b // per_column, ncols - 1)
        if hi >= lo:
            off[i, lo : hi + 1] = False
    return off


def _runs_of(mask: np.ndarray) -> list[tuple[int, int, int]]:
    """(row, first column, column after the last) of each run of True cells in ``mask``."""
    out = []
    for i, row in enumerate(mask):
        c = 0
        while c < len(row):
            if row[c]:
                e = c
                while e < len(row) and row[e]:
                    e += 1
                out.append((i, c, e))
                c = e
            else:
                c += 1
    return out


SLOW_COLOUR = "#1f4e9c"  # the flagged rank's outline and label: apart from the map's reds


def _footnote(fig, note: str) -> None:
    """``note`` in 7.5 pt under the axes, wrapped to the figure's width as drawn (measured, not
    estimated: an estimate cut its end off at the right edge), and the axes laid out above it.
    Measured at every resolution the figure is drawn at: at the figure's own 100 dpi Agg draws
    text about 7 % narrower than at the 2x of the notebook's PNG, which cut line ends off."""
    import textwrap

    if not note:
        fig.tight_layout()
        return
    text = fig.text(0.01, 0.01, note, fontsize=7.5, ha="left", va="bottom")
    chars = len(note)
    while True:
        text.set_text(textwrap.fill(note, width=chars))
        right, height = _text_extent(fig, text)
        if right <= 0.985 or chars <= 20:
            break
        chars = max(20, int(chars * 0.97 / right) - 1)
    fig.tight_layout(rect=(0, height + 0.02 / fig.get_size_inches()[1], 1, 1))


def _text_extent(fig, text) -> tuple[float, float]:
    """The right end and the height of ``text``, as fractions of the figure's width and height,
    the largest at the figure's dpi and at the dpi its PNG is rendered at (figure.render_figure)."""
    from matplotlib.backends.backend_agg import RendererAgg

    w, h = fig.get_size_inches()
    dpi = fig.dpi
    right = height = 0.0
    try:
        for d in sorted({float(dpi), float(CSS_DPI * PIXEL_RATIO)}):
            fig.dpi = d
            box = text.get_window_extent(RendererAgg(w * d, h * d, d))
            right, height = max(right, box.x1 / (w * d)), max(height, box.height / (h * d))
    finally:
        fig.dpi = dpi
    return right, height


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
