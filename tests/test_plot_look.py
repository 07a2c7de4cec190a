"""Issue 14, item 6: how the host-latency figures read. Time axes in one unit with the unit in an
x-axis label (never "7x10^6, 8x10^6, 10 ms" on one axis), legends of at least 8 pt clear of the
data, whole numbers on "calls" axes. Checked on the figures' own artists, on the simulator's data."""

from __future__ import annotations

import re

import pytest
from mspti_lens import Session, plots
from mspti_lens.plots.host import _ns_axis

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")


@pytest.fixture(scope="module")
def snap():
    from mspti_lens.sim import Simulator

    s = Simulator()
    s.reset()
    with Session(library="sim") as session:
        s.run_workload("training", steps=8, ranks=8, threads=1, seed=5)
        # a function whose calls all fall within one decade: the case that got 10^x labels
        s.call("aclrtMemset", 7_000_000, 3)
        s.call("aclrtMemset", 9_000_000, 3)
        return session.snapshot()


def figures(snap):
    return {
        "distribution": plots.distribution(snap, top=6),
        "distribution-narrow": plots.distribution(snap, names=["aclrtMemset"]),
        "cdf": plots.cdf(snap),
        "hccl": plots.compare_hccl(snap),
        "launch": plots.compare_launch(snap),
        "before_after": plots.before_after(snap, snap),
    }


def time_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_xscale() == "log"]


@pytest.mark.parametrize(
    "kind", ["distribution", "distribution-narrow", "cdf", "hccl", "launch", "before_after"]
)
def test_time_axes_use_one_unit_named_in_the_label(snap, kind):
    fig = figures(snap)[kind]
    fig.canvas.draw()
    axes = time_axes(fig)
    assert axes, kind
    for ax in axes:
        label = ax.get_xlabel()
        assert re.search(r"\((ns|µs|ms|s)\)$", label), label
        ticks = [t.get_text() for t in ax.get_xticklabels(which="both") if t.get_text()]
        assert len(ticks) >= 2, (kind, ticks)
        for t in ticks:
            # plain numbers: no mathtext powers, no unit of their own (the label has it)
            assert re.fullmatch(r"[\d,]+(\.\d+)?", t), (kind, t)


@pytest.mark.parametrize("kind", ["distribution", "cdf", "hccl", "before_after"])
def test_legends_are_readable_and_clear_of_the_data(snap, kind):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = figures(snap)[kind]
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    found = 0
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        found += 1
        assert all(t.get_fontsize() >= 8 for t in legend.get_texts())
        box, area = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert box.x0 >= area.x1 or box.y0 >= area.y1, (kind, box, area)  # outside the plot area
        assert box.x1 <= fig.bbox.x1 + 1  # and inside the figure
    assert found, kind


def test_calls_axes_have_whole_numbers(snap):
    fig = plots.distribution(snap, names=["aclrtMemset", "HcclBroadcast"])
    fig.canvas.draw()
    for ax in time_axes(fig):
        assert ax.get_ylabel() == "calls"
        assert all(float(v).is_integer() for v in ax.get_yticks()), ax.get_yticks()
    dens = plots.distribution(snap, names=["aclrtMemset"], density=True)
    assert time_axes(dens)[0].get_ylabel() == "share of calls"


def test_an_axis_unit_follows_its_range():
    from matplotlib.figure import Figure

    for lo, hi, unit in ((200, 900, "ns"), (2e3, 5e5, "µs"), (7e6, 1e7, "ms"), (2e9, 9e9, "s")):
        ax = Figure().subplots()
        ax.plot([lo, hi], [0, 1])
        _ns_axis(ax)
        assert ax.get_xlabel() == f"time per call ({unit})"
