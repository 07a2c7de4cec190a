"""A distribution of few calls, or of calls close together, is drawn within the calls' spread:
no bar reaches past the shortest or the longest call, calls the snapshot knows exactly are drawn at
their exact durations, and the time axis carries at least three distinct readable values. Checked
on the figures' own artists, with the simulator on its virtual clock (every duration exact)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from mspti_lens import Session, plots

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

BARRIER = [7_960_000 + 2_000 * i for i in range(5)]  # 5 calls within 8 µs of 7.96 ms
BROADCAST = [10_900_000 + 60_000 * i for i in range(20)]  # more calls than the snapshot keeps exactly


@pytest.fixture
def snap(virtual):
    with Session(library="sim", clock="mspti") as s:
        for ns in BARRIER:
            virtual.call("HcclBarrier", ns)
        for ns in BROADCAST:
            virtual.call("HcclBroadcast", ns)
        return s.snapshot()


def drawn_bars(ax):
    """(left, right, height) of every non-empty bin of the axes' histogram (drawn twice: filled,
    and its outline)."""
    out = set()
    for patch in ax.patches:
        values, edges, _ = patch.get_data()
        out |= {(edges[i], edges[i + 1], v) for i, v in enumerate(values) if v > 0}
    return sorted(out)


def readable_ticks(ax):
    lo, hi = ax.get_xlim()
    labels = [t.get_text() for t, x in zip(ax.get_xticklabels(), ax.get_xticks()) if lo <= x <= hi]
    return [t for t in labels if t]


def test_few_close_calls_are_drawn_within_their_spread_on_a_readable_axis(snap):
    fig = plots.distribution(snap, ["HcclBarrier", "HcclBroadcast"])
    fig.canvas.draw()
    panels = {ax.get_title().split(" · ")[0]: ax for ax in fig.axes if ax.get_visible()}

    barrier = panels["HcclBarrier"]
    assert not drawn_bars(barrier)  # every call is known exactly: no bins
    stems = [seg for c in barrier.collections for seg in c.get_segments()]
    assert sorted(seg[0][0] for seg in stems) == BARRIER
    assert all(seg[1][1] == 1 for seg in stems)  # one call at each duration

    broadcast = panels["HcclBroadcast"]
    bars = drawn_bars(broadcast)
    assert min(b[0] for b in bars) == min(BROADCAST)  # not the 10 ms of a display bin's edge
    assert max(b[1] for b in bars) == max(BROADCAST)
    assert sum(b[2] for b in bars) == len(BROADCAST)
    assert len(bars) >= 8  # the spread is split, not one or two wide bars

    for name, ax in panels.items():
        ticks = readable_ticks(ax)
        assert len(ticks) >= 3 and len(set(ticks)) == len(ticks), (name, ticks)
        assert all(re.fullmatch(r"[\d,]+(\.\d+)?", t) for t in ticks), (name, ticks)
        assert ax.get_xlabel() == "time per call (ms)"


def test_overlaid_curves_each_stay_within_their_own_calls(snap):
    fig = plots.compare_hccl(snap)
    fig.canvas.draw()
    ax = fig.axes[0]
    summary = snap.summary()
    for patch in ax.patches:
        name = patch.get_label().split(" (")[0]
        row = summary.filter(summary["name"] == name).row(0, named=True)
        values, edges, _ = patch.get_data()
        full = np.flatnonzero(values > 0)
        assert edges[full[0]] == row["min_ns"] and edges[full[-1] + 1] == row["max_ns"], name
    for panel in fig.axes:
        assert len(readable_ticks(panel)) >= 3, readable_ticks(panel)


def test_exact_calls_a_stem_width_apart_are_one_stem_as_high_as_their_count(virtual):
    with Session(library="sim", clock="mspti") as s:
        for ns in (7_000_000, 7_001_000, 7_002_000, 9_000_000, 9_000_500, 9_001_000):
            virtual.call("aclrtMemset", ns)
        snap = s.snapshot()
    ax = plots.distribution(snap, ["aclrtMemset"]).axes[0]
    stems = sorted((seg[0][0], seg[1][1]) for c in ax.collections for seg in c.get_segments())
    assert stems == [(7_000_000, 3), (9_000_000, 3)]  # not six lines of height 1 drawn on each other
