"""Plots of a run (``mspti_lens.plots.rank_heatmap``): what each rank spent in one function, per
window. The numbers come from :meth:`Run.timeline`; the plot computes nothing of its own."""

from __future__ import annotations

import numpy as np
import polars as pl

from ..snapshot import UNITS, check_unit
from .host import _new_figure, _title

METRICS = ("avg_ns", "total_ns", "num_calls", "max_ns", "min_ns")


def rank_heatmap(run, name: str, metric: str = "avg_ns", unit: str = "us"):
    """A rank x window heat map of ``metric`` of function ``name`` (e.g. "HcclAllReduce"). A slow
    rank shows as the one row whose collectives are SHORT (it waits least), the others long."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; valid metrics are {', '.join(METRICS)}")
    check_unit(unit)
    t = run.timeline()
    names = sorted(set(t["name"].to_list()))
    if name not in names:
        raise ValueError(
            f"no data for {name!r} in this run; functions recorded: {', '.join(names) or '(none)'}"
        )
    t = t.filter(pl.col("name") == name)
    rows = t.select("host", "rank").unique().sort("rank", "host")
    windows = sorted(set(t["window"].to_list()))
    grid = np.full((rows.height, len(windows)), np.nan)
    where = {(h, r): i for i, (h, r) in enumerate(rows.iter_rows())}
    col = {w: j for j, w in enumerate(windows)}
    scale = 1.0 if metric == "num_calls" else UNITS[unit]
    for h, r, w, v in t.select("host", "rank", "window", metric).iter_rows():
        grid[where[(h, r)], col[w]] = float(v) / scale
    fig, axes = _new_figure((max(5.0, 0.35 * len(windows) + 3), max(3.0, 0.3 * rows.height + 1.5)))
    ax = axes[0][0]
    im = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis")
    ax.set_yticks(
        range(rows.height),
        [f"{h} r{r}" if rows["host"].n_unique() > 1 else f"rank {r}" for h, r in rows.iter_rows()],
    )
    ax.set_xticks(range(len(windows)), [str(w) for w in windows])
    ax.set_xlabel("window")
    label = metric.removesuffix("_ns").replace("_", " ")
    fig.colorbar(im, ax=ax, label=label if metric == "num_calls" else f"{label} ({unit})")
    simulated = bool(run.files()["simulated"].any())
    ax.set_title(_title(f"{name}: {label} per rank and window", simulated))
    fig.tight_layout()
    return fig
