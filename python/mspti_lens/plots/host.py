"""Latency plots (matplotlib). Each function takes a Snapshot (or its ``histogram()`` frame) and
returns a Figure; none computes statistics of its own beyond re-binning the snapshot's buckets
for display. Titles say when the data is simulated."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import polars as pl

from ..snapshot import SCALE, Snapshot
from ..timeline import empty_timeline
from ..units import format_ns
from .device import collectives, kernel_distributions, launch_split
from .figure import _count_axis, _legend_outside, _new_figure, _ns_axis, _title
from .timeline import TIMELINE_COLUMNS, timeline

PERCENTILES = (0.5, 0.9, 0.99, 0.999)
_PCT_STYLE = {0.5: ("p50", "-"), 0.9: ("p90", "--"), 0.99: ("p99", "-."), 0.999: ("p99.9", ":")}
# Display bins of a distribution: at most about BINS_PER_DECADE per decade (groups of _COARSEST
# native buckets), finer when a function's calls spread over fewer than MIN_BINS of them.
BINS_PER_DECADE = 24
MIN_BINS = 10
_COARSEST = 2 ** math.floor(math.log2(2**SCALE / (BINS_PER_DECADE * math.log10(2))))


def _frame(data: Snapshot | pl.DataFrame) -> tuple[pl.DataFrame, bool, Snapshot]:
    """The histogram frame to draw, whether it is simulated, and the Snapshot its quantiles come
    from (a frame is turned into one by :meth:`Snapshot.from_histogram`)."""
    if isinstance(data, Snapshot):
        return data.histogram(), data.simulated, data
    if isinstance(data, pl.DataFrame):
        need = {"name", "index", "lower_ns", "upper_ns", "count"}
        if not need <= set(data.columns):
            raise ValueError(f"a histogram frame needs columns {sorted(need)}; got {data.columns}")
        snap = Snapshot.from_histogram(data)
        return data, snap.simulated, snap
    raise TypeError(f"expected a Snapshot or its histogram() DataFrame, not {type(data).__name__}")


def _pick(frame: pl.DataFrame, names: Iterable[str] | None, top: int) -> list[str]:
    totals = (
        frame.with_columns(((pl.col("lower_ns") + pl.col("upper_ns")) / 2 * pl.col("count")).alias("t"))
        .group_by("name")
        .agg(pl.col("t").sum(), pl.col("count").sum())
        .sort("t", descending=True)
    )
    have = totals["name"].to_list()
    if names is None:
        return have[:top]
    names = list(names)
    unknown = [n for n in names if n not in have]
    if unknown:
        raise ValueError(f"no data for {unknown}; functions in this snapshot: {', '.join(have) or '(none)'}")
    return names


def _rebin(
    sub: pl.DataFrame, span: pl.DataFrame | None = None, extremes: tuple[float, float] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Sum the native buckets into display bins: groups of :data:`_COARSEST` buckets (about
    BINS_PER_DECADE per decade), halved until ``span`` (default ``sub``) covers MIN_BINS of them,
    down to the buckets themselves, so calls close together are never drawn as one wide bar. The
    bins holding ``extremes`` (the exact shortest and longest call, when known) are cut at them: no
    bar reaches past the data. Curves drawn together (one ``span``) share their inner bin edges."""
    sub = sub.filter(pl.col("upper_ns").is_finite())  # the overflow row has no finite bin
    rng = sub if span is None else span.filter(pl.col("upper_ns").is_finite())
    have = rng["index"].drop_nulls()
    i_lo = int(have.min()) if len(have) else 0  # type: ignore[arg-type]
    i_hi = int(have.max()) if len(have) else 0  # type: ignore[arg-type]
    m = _COARSEST
    while m > 1 and i_hi // m - i_lo // m + 1 < MIN_BINS:
        m //= 2
    g0, g1 = i_lo // m, i_hi // m
    edges = 2.0 ** (np.arange(g0, g1 + 2) * m / 2**SCALE)
    # the zero bucket (0 ns, no index) goes in the first bin: a log axis has no 0
    idx = sub["index"].fill_null(i_lo).to_numpy().astype(np.int64) // m - g0
    vals = np.bincount(idx, weights=sub["count"].to_numpy().astype(float), minlength=g1 - g0 + 1)
    if extremes is not None:  # the bins holding the shortest and the longest call end at them
        for side, x in enumerate(extremes):  # side 0: a lower edge moves up; 1: an upper one down
            j = int(np.searchsorted(edges, x)) - 1
            if 0 <= j < len(vals) and edges[j] < x < edges[j + 1]:
                edges[j + side] = x
    return vals, edges


def _extremes(snap: Snapshot, names: Iterable[str]) -> tuple[float, float] | None:
    """The exact shortest and longest call of ``names`` (the summary's min and max; None for a
    snapshot made of a histogram frame, which has no extremes)."""
    s = snap.summary().filter(pl.col("name").is_in(list(names)))
    lo, hi = s["min_ns"].min(), s["max_ns"].max()
    return None if lo is None or hi is None else (float(lo), float(hi))  # type: ignore[arg-type]


def _exact_calls(snap: Snapshot, name: str, calls: int) -> np.ndarray | None:
    """Every call's exact duration, when the snapshot has them all: its slowest calls kept are all
    its calls, or the shortest and the longest call are equal. None otherwise, and when a call
    took 0 ns (a log axis has no place for it)."""
    ext = _extremes(snap, [name])
    if not calls or ext is None or ext[0] < 1:
        return None
    if ext[0] == ext[1]:
        return np.full(calls, ext[0])
    kept = snap.slowest().filter(pl.col("name") == name)["duration_ns"]
    return kept.to_numpy().astype(float) if len(kept) == calls else None


def _quantiles(snap: Snapshot, name: str, qs: Sequence[float]) -> dict[float, float]:
    """One function's quantiles, as the Snapshot computes them (the summary's nearest-rank
    rule): plots hold no statistics of their own."""
    out = {}
    for q in qs:
        v = snap.quantile(q, name)["value"]
        out[q] = float(v[0]) if len(v) and v[0] is not None else math.nan
    return out


# Exact durations closer than this share of the time axis' span (about a stem's width) are one
# stem as high as their count: calls of one duration give one stem of their count, not several
# lines of height 1 drawn over each other.
STEM_SHARE = 1 / 150


def _stems(exact: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where to draw the stems of exact durations (each group's shortest) and how many calls each
    stands for: sorted durations less than STEM_SHARE of their log span apart are one stem."""
    v = np.sort(exact)
    near = max(math.log10(v[-1] / v[0]), 0.01) * STEM_SHARE  # decades
    starts = [0]
    for i in range(1, len(v)):
        if math.log10(v[i] / v[starts[-1]]) > near:
            starts.append(i)
    return v[starts], np.diff([*starts, len(v)])


def distribution(
    data: Snapshot | pl.DataFrame,
    names: Sequence[str] | None = None,
    *,
    density: bool = False,
    percentiles: Sequence[float] = PERCENTILES,
    top: int = 6,
    title: str | None = None,
):
    """Latency distribution per API on a log duration axis, with percentile markers.

    ``names`` picks functions (default: the ``top`` by total time); ``density`` plots the share of
    calls per display bin instead of counts."""
    frame, simulated, snap = _frame(data)
    picked = _pick(frame, names, top) if len(frame) else []
    n = max(len(picked), 1)
    cols = 2 if n > 1 else 1
    rows = math.ceil(n / cols)
    fig, axes = _new_figure((7.2 * cols, 2.8 * rows + 0.6), rows, cols)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    if not picked:
        axes[0][0].text(
            0.5, 0.5, "no calls recorded", ha="center", va="center", transform=axes[0][0].transAxes
        )
    for ax, name in zip(axes.flat, picked):
        sub = frame.filter(pl.col("name") == name).sort("lower_ns")
        vals, edges = _rebin(sub, extremes=_extremes(snap, [name]))
        total = vals.sum()
        exact = _exact_calls(snap, name, int(total))
        if exact is not None:  # every call known exactly: stems at their durations, no bins at all
            at, n_at = _stems(exact)
            y = n_at / total if density else n_at
            ax.vlines(at, 0, y, color="C0", linewidth=2)
            ax.plot(at, y, "o", color="C0", markersize=4, label="each call's duration (exact)")
            pad = (at[-1] / at[0]) ** 0.08 if at[-1] > at[0] else 1.01  # room beside the outer stems
            ax.set_xlim(at[0] / pad, at[-1] * pad)
            ax.set_ylim(0, float(y.max()) * 1.1)
        else:
            y = vals / total if density else vals
            ax.stairs(y, edges, fill=True, alpha=0.55, color="C0")
            ax.stairs(y, edges, color="C0")
        _count_axis(ax, density)
        marks = _quantiles(snap, name, percentiles)
        for q in percentiles:
            v = marks[q]
            label, style = _PCT_STYLE.get(q, (f"p{q * 100:g}", ":"))
            ax.axvline(v, color="C3", linestyle=style, linewidth=1.1, label=f"{label} {format_ns(v)}")
        slow = snap.slowest().filter(pl.col("name") == name)["duration_ns"]
        if exact is None and len(slow):  # the slowest calls kept, as ticks on the duration axis
            ax.plot(slow, [0] * len(slow), "|", color="C1", markersize=14, label=f"slowest {len(slow)}")
        ax.set_title(f"{name} · {int(total):,} call{'' if total == 1 else 's'}", fontsize=10)
        _ns_axis(ax)
        _legend_outside(ax)
        ax.grid(True, which="major", axis="x", alpha=0.3)
    fig.suptitle(_title(title or "Host API latency distribution", simulated), fontsize=12)
    fig.tight_layout()
    return fig


def cdf(
    data: Snapshot | pl.DataFrame,
    names: Sequence[str] | None = None,
    *,
    top: int = 8,
    title: str | None = None,
):
    """Cumulative distribution of several APIs on one log duration axis."""
    frame, simulated, _ = _frame(data)
    picked = _pick(frame, names, top) if len(frame) else []
    fig, axes = _new_figure((9.5, 4.5))
    ax = axes[0][0]
    if not picked:
        ax.text(0.5, 0.5, "no calls recorded", ha="center", va="center", transform=ax.transAxes)
    for i, name in enumerate(picked):
        sub = frame.filter(pl.col("name") == name).sort("lower_ns")
        upper = sub["upper_ns"].to_numpy().astype(float)
        cum = np.cumsum(sub["count"].to_numpy()) / sub["count"].sum()
        ax.step(np.r_[sub["lower_ns"][0], upper], np.r_[0, cum], where="post", label=name, color=f"C{i % 10}")
    if picked:
        _ns_axis(ax)
    for q in (0.5, 0.9, 0.99):
        ax.axhline(q, color="grey", linewidth=0.6, linestyle=":")
    ax.set_ylim(0, 1.005)
    ax.set_ylabel("fraction of calls ≤ duration", fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    if picked:
        _legend_outside(ax)
    ax.set_title(_title(title or "Host API latency CDF", simulated))
    fig.tight_layout()
    return fig


def _compare(
    frame: pl.DataFrame, snap: Snapshot, names: list[str], simulated: bool, title: str, density: bool = True
):
    """Two panels: the distributions overlaid (top) and, per function, the spread from min to
    max with p50-p99 as a bar and ticks at p90 and p99.9 (bottom), on one log time axis."""
    fig, axes = _new_figure((10.5, 4.0 + 0.42 * max(len(names), 1)), 2, 1)
    ax, strip = axes[0][0], axes[1][0]
    if not names:
        ax.text(0.5, 0.5, "no calls recorded", ha="center", va="center", transform=ax.transAxes)
        strip.set_visible(False)
    span = frame.filter(pl.col("name").is_in(names))
    for i, name in enumerate(names):
        sub = frame.filter(pl.col("name") == name).sort("lower_ns")
        vals, edges = _rebin(sub, span, _extremes(snap, [name]))
        y = vals / vals.sum() if density else vals
        colour = f"C{i % 10}"
        q = _quantiles(snap, name, (0.5, 0.9, 0.99, 0.999))
        # earlier curves wider and under later ones: identical distributions all stay visible
        ax.stairs(
            y,
            edges,
            color=colour,
            linewidth=1.4 + 1.6 * (len(names) - 1 - i),
            alpha=0.9,
            zorder=2 + i,
            label=f"{name} ({int(vals.sum()):,}; p50 {format_ns(q[0.5])}, p99 {format_ns(q[0.99])})",
        )
        row = len(names) - 1 - i
        lo, hi = _extremes(snap, [name]) or (float(sub["lower_ns"].min()), float(sub["upper_ns"].max()))  # type: ignore[arg-type]
        strip.hlines(row, max(lo, 1.0), hi, color=colour, linewidth=1)
        strip.hlines(row, q[0.5], q[0.99], color=colour, linewidth=7, alpha=0.55)
        strip.plot([q[0.5]], [row], marker="|", markersize=14, color="black")
        strip.plot([q[0.9], q[0.999]], [row, row], linestyle="none", marker="|", markersize=9, color=colour)
    _count_axis(ax, density)
    ax.grid(True, which="major", axis="x", alpha=0.3)
    if names:
        _ns_axis(ax, "host time per call")
        _legend_outside(ax)
        strip.set_yticks(range(len(names)), list(reversed(names)), fontsize=8)
        strip.set_ylim(-0.6, len(names) - 0.4)
        strip.set_xlim(ax.get_xlim())
        _ns_axis(strip, "host time per call · bar p50-p99, black tick p50, ticks p90 and p99.9, line min-max")
        strip.grid(True, which="major", axis="x", alpha=0.3)
    ax.set_title(_title(title, simulated))
    fig.tight_layout()
    return fig


def compare_hccl(
    data: Snapshot | pl.DataFrame,
    names: Sequence[str] | None = None,
    *,
    density: bool = True,
    title: str | None = None,
):
    """Every HCCL operation's host-time distribution in one figure (``names`` picks some)."""
    frame, simulated, snap = _frame(data)
    hccl = (
        frame.filter(pl.col("domain") == "hccl")
        if "domain" in frame.columns
        else frame.filter(pl.col("name").str.starts_with("Hccl"))
    )
    picked = _pick(hccl, names, 12) if len(hccl) or names else []
    return _compare(
        hccl, snap, picked, simulated, title or "HCCL operations: host time (enqueue + waits)", density
    )


def compare_launch(
    data: Snapshot | pl.DataFrame,
    names: Sequence[str] | None = None,
    *,
    density: bool = True,
    title: str | None = None,
):
    """The kernel-launch functions (LAUNCH and the other launch ids) in one figure."""
    frame, simulated, snap = _frame(data)
    if "callback" in frame.columns:
        launch = frame.filter(pl.col("callback").str.contains("LAUNCH"))
    else:
        launch = frame.filter(pl.col("name").str.contains("(?i)launch"))
    picked = _pick(launch, names, 12) if len(launch) or names else []
    return _compare(launch, snap, picked, simulated, title or "Kernel launch functions: host time", density)


def before_after(
    before: Snapshot | pl.DataFrame,
    after: Snapshot | pl.DataFrame,
    names: Sequence[str] | None = None,
    *,
    top: int = 4,
    labels: tuple[str, str] = ("before", "after"),
):
    """Before/after: each API's distribution in both snapshots, overlaid, with medians.
    ``labels`` names the two sides (e.g. ``("training", "inference")``)."""
    fb, sb, snap_b = _frame(before)
    fa, sa, snap_a = _frame(after)
    cols = ["name", "lower_ns", "upper_ns", "count"]
    both = pl.concat([fb.select(cols), fa.select(cols)])
    # the top APIs of both sides: an API one side lacks would get a panel with one curve
    common = set(fb["name"]) & set(fa["name"])
    if names is None and common:
        both = both.filter(pl.col("name").is_in(sorted(common)))
    picked = _pick(both, names, top) if len(both) else []
    n = max(len(picked), 1)
    fig, axes = _new_figure((10, 2.6 * n + 0.6), n, 1)
    for ax, name in zip(axes[:, 0], picked):
        for frame, snap, label, color in ((fb, snap_b, labels[0], "C0"), (fa, snap_a, labels[1], "C1")):
            sub = frame.filter(pl.col("name") == name).sort("lower_ns")
            if not len(sub):
                continue
            vals, edges = _rebin(sub, extremes=_extremes(snap, [name]))
            med = _quantiles(snap, name, (0.5,))[0.5]
            ax.stairs(
                vals / vals.sum(),
                edges,
                color=color,
                linewidth=1.5,
                label=f"{label}: {int(vals.sum()):,} calls, p50 {format_ns(med)}",
            )
            ax.axvline(med, color=color, linestyle="--", linewidth=0.9)
        _ns_axis(ax)
        ax.set_title(name, fontsize=10)
        ax.set_ylabel("share of calls", fontsize=9)
        _legend_outside(ax)
    if not picked:
        axes[0][0].text(
            0.5, 0.5, "no calls recorded", ha="center", va="center", transform=axes[0][0].transAxes
        )
    fig.suptitle(
        _title(
            f"A: {labels[0]} / B: {labels[1]}" if labels != ("before", "after") else "Before / after",
            sb or sa,
        )
    )
    fig.tight_layout()
    return fig


# The plots the panel and the magics offer, by kind: the one dispatch both use. The last three
# are of device time (a snapshot with activity); without it their axes say how to collect it.
KINDS = ("distribution", "cdf", "hccl", "launch", "timeline", "launch_split", "kernels", "collectives")


def plot(
    data: Snapshot | pl.DataFrame, kind: str = "distribution", *, density: bool | None = None, top: int = 6
):
    """The figure of ``kind`` (one of :data:`KINDS`). ``density`` None keeps each plot's default;
    ``top`` is the number of functions a distribution (or a timeline) shows. A timeline needs a
    Snapshot of a ``Session(interval=...)``; without one its axes say so."""
    if kind not in KINDS:
        raise ValueError(f"unknown plot kind {kind!r}; valid kinds are {', '.join(KINDS)}")
    dens: dict[str, Any] = {} if density is None else {"density": density}
    if kind == "distribution":
        return distribution(data, top=top, **dens)
    if kind == "cdf":
        return cdf(data)
    if kind == "hccl":
        return compare_hccl(data, **dens)
    if kind in ("launch_split", "kernels", "collectives"):
        if not isinstance(data, Snapshot):
            raise TypeError(f"the {kind} plot takes a Snapshot with activity, not {type(data).__name__}")
        if kind == "launch_split":
            return launch_split(data)
        return kernel_distributions(data, top=top) if kind == "kernels" else collectives(data)
    if kind == "timeline":
        keeps = isinstance(data, Snapshot) or set(TIMELINE_COLUMNS) <= set(data.columns)
        return timeline(data if keeps else empty_timeline(), top=top)
    return compare_launch(data, **dens)
