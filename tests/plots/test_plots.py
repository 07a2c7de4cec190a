"""Plots take a snapshot (or its histogram frame), return a Figure, label simulated data, and draw
percentile markers from the same histogram math as summary()."""

from __future__ import annotations

import matplotlib
import pytest

from mspti_lens import Session, plots

matplotlib.use("Agg")


@pytest.fixture
def snap(sim):
    sim.set_clock("virtual")
    with Session(library="sim", clock="mspti") as s:
        sim.run_workload("training", steps=3, ranks=8, threads=1, seed=2)
        return s.snapshot()


def test_every_plot_returns_a_labelled_figure(snap):
    from matplotlib.figure import Figure

    figs = [
        plots.distribution(snap),
        plots.distribution(snap.histogram(), density=True),
        plots.cdf(snap),
        plots.compare_hccl(snap),
        plots.compare_launch(snap),
        plots.before_after(snap, snap),
    ]
    for fig in figs:
        assert isinstance(fig, Figure)
        titles = [fig._suptitle.get_text() if fig._suptitle else ""] + [a.get_title() for a in fig.axes]
        assert any("SIMULATED" in t for t in titles), titles


def test_percentile_markers_agree_with_the_summary(snap):
    fig = plots.distribution(snap, ["aclrtLaunchKernel"])
    lines = {ln.get_label().split()[0]: ln.get_xdata()[0] for ln in fig.axes[0].lines}
    row = snap.summary().filter(snap.summary()["name"] == "aclrtLaunchKernel").row(0, named=True)
    for label, col in (("p50", "med_ns"), ("p90", "p90_ns"), ("p99", "p99_ns")):
        assert abs(lines[label] - row[col]) <= row[col] / 128 + 1, (label, lines[label], row[col])


def test_unknown_function_and_bad_frames_are_refused(snap):
    with pytest.raises(ValueError, match="no data for"):
        plots.distribution(snap, ["cudaLaunchKernel"])
    with pytest.raises(ValueError, match="needs columns"):
        plots.cdf(snap.summary())
    with pytest.raises(TypeError):
        plots.cdf([1, 2, 3])
