"""How the host-latency figures read. Time axes in one unit with the unit in an
x-axis label (never "7x10^6, 8x10^6, 10 ms" on one axis), legends of at least 8 pt clear of the
data, whole numbers on "calls" axes. Checked on the figures' own artists, on the simulator's data."""

from __future__ import annotations

import re

import pytest

from mspti_lens import Session, plots
from mspti_lens.plots.figure import _ns_axis

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


# Each test draws only the figure it checks (drawing all six for each took most of the module's time).
FIGURES = {
    "distribution": lambda snap: plots.distribution(snap, top=6),
    "distribution-narrow": lambda snap: plots.distribution(snap, names=["aclrtMemset"]),
    "cdf": plots.cdf,
    "hccl": plots.compare_hccl,
    "launch": plots.compare_launch,
    "before_after": lambda snap: plots.before_after(snap, snap),
}


def time_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_xscale() == "log"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind", ["distribution", "distribution-narrow", "cdf", "hccl", "launch", "before_after"]
)
def test_time_axes_use_one_unit_named_in_the_label(snap, kind):
    fig = FIGURES[kind](snap)
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


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["distribution", "cdf", "hccl", "before_after"])
def test_legends_are_readable_and_clear_of_the_data(snap, kind):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = FIGURES[kind](snap)
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


# -- device and job plots: as readable as the host-latency ones ------------------------------------
@pytest.fixture(scope="module")
def device_snap():
    from mspti_lens.sim import Simulator

    s = Simulator()
    s.reset()
    with Session(library="sim", activity=["kernel", "communication"], join_sample=1.0) as session:
        s.run_workload("training", steps=3, ranks=8, threads=1, seed=5)
        return session.snapshot()


DEVICE_FIGURES = {
    "launch_split": plots.launch_split,
    "kernels": lambda snap: plots.kernel_distributions(snap, top=4),
    "collectives": plots.collectives,
}


@pytest.mark.parametrize("kind", ["launch_split", "kernels", "collectives"])
def test_device_plots_have_time_units_legends_off_the_data_and_labels_inside(device_snap, kind):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = DEVICE_FIGURES[kind](device_snap)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    axes = time_axes(fig)
    assert axes, kind
    for ax in axes:
        assert re.search(r"\((ns|µs|ms|s)\)$", ax.get_xlabel()), ax.get_xlabel()
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)
    assert legends, kind
    areas = [ax.get_window_extent(renderer) for ax in fig.axes if ax.get_visible() and ax.axison]
    for legend in legends:
        box = legend.get_window_extent(renderer)
        assert all(t.get_fontsize() >= 8 for t in legend.get_texts())
        assert not any(box.overlaps(a) for a in areas), (kind, box)
        assert box.x1 <= fig.bbox.x1 + 1 and box.x0 >= -1
    for ax in axes:  # every value label inside its axes, not cut at the edge
        area = ax.get_window_extent(renderer)
        for t in ax.texts:
            b = t.get_window_extent(renderer)
            assert area.x0 <= b.x0 and b.x1 <= area.x1 + 0.5, (kind, t.get_text(), b, area)


def test_launch_split_notes_queue_delays_longer_than_the_window(device_snap):
    la = device_snap.launches()
    total = float(la["queue_total_ns"].sum())
    assert total > 0
    start = device_snap.meta["window_start"]
    # a window shorter than the queue delays it holds: launches waited at the same time
    short = device_snap.with_meta(window_end=start + total / 1e9 / 10)
    long = device_snap.with_meta(window_end=start + total / 1e9 * 10)
    note = plots.device.queue_note(short)
    assert note and "queue delays add up to" in note and "ran ahead of the device" in note
    assert plots.device.queue_note(long) is None
    texts = [t.get_text() for t in plots.launch_split(short).texts]
    assert any("queue delays add up to" in t for t in texts), texts
    assert not any("queue delays" in t for t in plots.launch_split(long).texts)


def test_plots_called_directly_show_at_twice_the_css_size_in_ipython(device_snap):
    import struct

    from IPython.terminal.interactiveshell import TerminalInteractiveShell
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython() or TerminalInteractiveShell.instance()
    formatter = ip.display_formatter.formatters["image/png"]
    was = formatter.enabled
    formatter.enabled = True  # as in a Jupyter kernel
    try:
        for kind, draw in DEVICE_FIGURES.items():
            fig = draw(device_snap)
            data, metadata = ip.display_formatter.format(fig)
            png = data["image/png"]
            w, h = struct.unpack(">II", png[16:24])
            css = metadata["image/png"]
            assert (w, h) == (2 * css["width"], 2 * css["height"]), (kind, w, h, css)
        other = matplotlib.figure.Figure()  # a figure of the user's own keeps its printer
        assert ip.display_formatter.format(other)[1].get("image/png", {}).get("width") is None
    finally:
        formatter.enabled = was


class _FakeRun:
    """Two ranks whose windows are numbered alike but lie at different times of the run."""

    def __init__(self):
        t0 = 1_000.0
        rows = []
        # rank 2: its windows 1-2 are the run's seconds 1.5-2.5; rank 6: its windows 1-2 are 0.5-1.5
        for rank, start in ((2, 1.5), (6, 0.5)):
            for w in (1, 2):
                a = t0 + start + (w - 1) * 0.5
                rows.append(("h", rank, w, a, a + 0.5, "hccl", "HcclAllReduce", 4, 4_000_000 * rank, 1, 2))
        rows.append(("h", 6, 0, t0, t0 + 0.5, "hccl", "HcclAllReduce", 1, 1_000, 1_000, 1_000))
        cols = ["host", "rank", "window", "window_start", "window_end", "domain", "name", "num_calls",
                "total_ns", "min_ns", "max_ns"]  # fmt: skip
        import polars as pl

        t = pl.DataFrame(rows, schema=cols, orient="row")
        self._t = t.with_columns((pl.col("total_ns") / pl.col("num_calls")).alias("avg_ns"))
        self._f = pl.DataFrame({"interval_s": [0.5, 0.5], "simulated": [True, True]})

    def timeline(self):
        return self._t

    def files(self):
        return self._f


def test_the_rank_heatmap_is_on_the_runs_time_axis_and_explains_empty_cells():
    fig = plots.rank_heatmap(_FakeRun(), "HcclAllReduce")
    ax = fig.axes[0]
    grid = ax.images[0].get_array()
    import numpy as np

    filled = {r: [c for c in range(grid.shape[1]) if not np.ma.is_masked(grid[r, c])] for r in range(2)}
    # row 0 is rank 2 (seconds 1.5-2.5: columns 3, 4), row 1 rank 6 (0-1.5: columns 0, 1, 2)
    assert filled == {0: [3, 4], 1: [0, 1, 2]}, filled
    assert "time since the run's first window (s)" in ax.get_xlabel()
    assert any("grey: the rank finished no HcclAllReduce call" in t.get_text() for t in fig.texts)
    assert fig.axes[1].get_ylabel() == "avg (µs), red = short"  # a collective: short is hot


def test_collectives_draw_host_time_beside_each_device_bar_on_the_rows_of_both_panels(device_snap):
    col = device_snap.collectives()
    fig = plots.collectives(device_snap)
    ax, bx = fig.axes[:2]
    device_bars, host_bars = ax.containers
    # the COMMUNICATION record's op (hcom_allReduce_) is the summary's HCCL call (HcclAllReduce)
    assert [round(b.get_width()) for b in host_bars] == [
        device_snap.summary().filter(name=n)["med_ns"][0]
        for n in ("HcclBarrier", "HcclAllReduce", "HcclBroadcast")
    ], list(col["op"])
    assert ax.get_shared_y_axes().joined(ax, bx) and ax.get_ylim() == bx.get_ylim()
    bw = {round(t.get_position()[1]): t.get_text().strip() for t in bx.texts}
    assert bw[list(col["op"]).index("hccl_barrier_")] == "—"
    assert bw[list(col["op"]).index("hcom_allReduce_")].endswith("GB/s")


def test_the_launch_comparison_shows_every_curve_on_one_bin_grid(snap):
    fig = plots.compare_launch(snap)
    curves = fig.axes[0].patches  # one StepPatch per launch function
    assert len(curves) >= 2
    # the same bins in every curve, but for the bins holding a curve's shortest and longest call,
    # which end at them
    summary = snap.summary()
    drawn = []
    for c in curves:
        row = summary.filter(summary["name"] == c.get_label().split(" (")[0]).row(0, named=True)
        drawn.append((c.get_data().edges, {float(row["min_ns"]), float(row["max_ns"])}))
    for edges, ends in drawn:
        for other, other_ends in drawn:
            assert len(edges) == len(other)
            assert all(e == o or e in ends or o in other_ends for e, o in zip(edges, other))
    widths = [c.get_linewidth() for c in curves]
    assert widths == sorted(widths, reverse=True) and len(set(widths)) == len(widths)  # none hides another


class _LongRun(_FakeRun):
    """Eight ranks over 300 windows, rank 6 flagged slow by the run's vote."""

    def __init__(self):
        import polars as pl

        super().__init__()
        rows = [("h", r, w, 1000.0 + w * 0.5, 1000.5 + w * 0.5, "hccl", "HcclAllReduce", 4, 4_000_000, 1, 2)
                for r in range(8) for w in range(300) if (r, w) != (0, 5)]  # fmt: skip
        t = pl.DataFrame(rows, schema=self._t.drop("avg_ns").columns, orient="row")
        self._t = t.with_columns((pl.col("total_ns") / pl.col("num_calls")).alias("avg_ns"))

    def slow_ranks(self):
        import polars as pl

        return pl.DataFrame({"host": ["h", "h"], "rank": [6, 2], "slow_affect_count": [9, 1]})


def test_a_long_runs_heatmap_keeps_its_labels_readable_marks_the_slow_rank_and_cuts_no_note():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from mspti_lens.notebook.runpanel import MAX_PLOT_WIDTH

    fig = plots.rank_heatmap(_LongRun(), "HcclAllReduce")
    # shown at its size, never scaled down to the run panel's width: 8 pt labels stay 8 pt
    assert fig.get_size_inches()[0] * 100 <= MAX_PLOT_WIDTH
    assert fig.axes[0].images[0].get_array().shape[1] <= 40  # 300 intervals binned into columns
    assert "one column per 4 s (8 intervals)" in fig.axes[0].get_xlabel()
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[6] == "rank 6 ◀ slow" and sum("slow" in x for x in labels) == 1, labels
    renderer = canvas.get_renderer()
    for t in fig.texts:  # the footnote ends inside the figure
        box = t.get_window_extent(renderer)
        assert box.x1 <= fig.bbox.x1 and box.y0 >= 0, (t.get_text(), box, fig.bbox)


class _ShortRun(_FakeRun):
    """A 20-step job: eight ranks, two windows each that end a little after each interval (the
    write takes a moment), rank 5 the slow one (its collectives the short ones)."""

    def __init__(self):
        import polars as pl

        super().__init__()
        rows = [("h", r, w, 1000.0 + 0.01 * r + (w - 1) * 0.5, 1000.53 + 0.01 * r + (w - 1) * 0.5, "hccl",
                 "HcclAllReduce", 10, 10 * (300_000 if r == 5 else 800_000), 1, 2)
                for r in range(8) for w in (1, 2)]  # fmt: skip
        t = pl.DataFrame(rows, schema=self._t.drop("avg_ns").columns, orient="row")
        self._t = t.with_columns((pl.col("total_ns") / pl.col("num_calls")).alias("avg_ns"))

    def slow_ranks(self):
        import polars as pl

        return pl.DataFrame({"host": ["h"], "rank": [5], "slow_affect_count": [20]})


def test_a_short_jobs_heatmap_fills_its_columns_and_shows_the_slow_rank_hot_and_outlined():
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = plots.rank_heatmap(_ShortRun(), "HcclAllReduce")
    ax = fig.axes[0]
    im = ax.images[0]
    grid = im.get_array()
    # every column holds data: no all-grey leading column
    assert grid.shape == (8, 2) and not np.ma.getmaskarray(grid).all(axis=0).any(), grid
    # hot is slow: the flagged rank's short collectives take the map's hottest colour
    hot = matplotlib.colormaps["YlOrRd"](1.0)
    assert im.cmap(im.norm(grid[5, 0])) == pytest.approx(hot), (im.cmap.name, grid[5])
    assert im.cmap(im.norm(grid[0, 0])) != pytest.approx(hot)
    assert "red = short" in fig.axes[1].get_ylabel()
    # the slow rank is marked on its row: its label and an outline around the row
    assert [t.get_text() for t in ax.get_yticklabels()][5] == "rank 5 ◀ slow"
    (outline,) = ax.patches
    assert outline.get_y() == pytest.approx(4.5) and outline.get_width() == 2
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    for t in fig.texts:  # the footnote of a narrow figure ends inside it
        box = t.get_window_extent(canvas.get_renderer())
        assert box.x1 <= fig.bbox.x1 and box.y0 >= 0, (t.get_text(), box, fig.bbox)


class _FlaggedFakeRun(_FakeRun):
    def slow_ranks(self):
        import polars as pl

        return pl.DataFrame({"host": ["h"], "rank": [2], "slow_affect_count": [3]})


def test_a_narrow_heatmaps_footnote_is_not_cut_at_the_right_edge():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = plots.rank_heatmap(_FlaggedFakeRun(), "HcclAllReduce")  # grey cells, a slow rank: a long note
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    (note,) = fig.texts
    assert "grey: the rank finished no HcclAllReduce call" in note.get_text()
    assert note.get_window_extent(canvas.get_renderer()).x1 <= fig.bbox.x1


def test_a_heatmap_of_a_function_with_no_finished_call_says_so():
    import polars as pl

    run = _FakeRun()
    run._t = run._t.with_columns(pl.lit(0).alias("num_calls"))  # keys written, no call in any window
    with pytest.raises(ValueError, match="no call of 'HcclAllReduce' finished in any window"):
        plots.rank_heatmap(run, "HcclAllReduce")
