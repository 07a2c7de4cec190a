"""What a figure says is whole and true: no title, caption or note cut at the figure's edge when
drawn at twice the CSS size (the notebook's PNG); a plot with nothing to draw says what is missing
and how to record it, in a figure one message tall; the bandwidth plot names the ops it leaves
out and how to draw them. Checked on the figures' own artists, on small simulated jobs."""

from __future__ import annotations

import polars as pl
import pytest

from mspti_lens import Session, plots
from mspti_lens.plots.figure import CSS_DPI, PIXEL_RATIO
from mspti_lens.plots.timeline import NO_INTERVALS

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")


@pytest.fixture(scope="module")
def device_snap():
    """Kernels and collectives (all-reduce, broadcast, barrier in HCCL's world group, whose rank
    count the records do not carry)."""
    from mspti_lens.sim import Simulator

    s = Simulator()
    s.reset()
    with Session(library="sim", activity=["kernel", "communication"]) as session:
        s.run_workload("training", steps=1, ranks=2, threads=1, seed=5)
        return session.snapshot()


@pytest.fixture(scope="module")
def marked_snap():
    """Kernel and marker activity, no collectives: the window the audit plotted collectives of."""
    from mspti_lens.sim import Simulator

    s = Simulator()
    s.reset()
    with Session(library="sim", activity=["kernel", "marker"]) as session:
        s.run_workload("training", steps=1, ranks=2, threads=1, seed=5)
        return session.snapshot()


def _timeline_frame():
    start = pl.datetime(2026, 1, 1, 12, 0, 0, time_zone="UTC")
    frame = pl.DataFrame(
        {
            "k": [0, 1, 2],
            "name": ["aclrtLaunchKernelWithHostArgs"] * 3,
            "num_calls": [9, 9, 9],
            "p50_ns": [2_000, 2_100, 1_900],
            "p99_ns": [9_000, 9_100, 8_900],
        }  # fmt: skip
    )
    return frame.select(
        (start + pl.duration(milliseconds=pl.col("k") * 500)).alias("start"),
        (start + pl.duration(milliseconds=pl.col("k") * 500 + 500)).alias("end"),
        "name",
        "num_calls",
        "p50_ns",
        "p99_ns",
    )


# Every figure with a caption, note or message of its own, and a host and a device plot with
# tick labels on narrow axes (the other host plots' legends and labels: test_plot_look.py).
FIGURES = {
    "timeline-empty": lambda d, m: plots.timeline(m.timeline()),
    "plot-timeline-empty": lambda d, m: plots.plot(m, "timeline"),
    "timeline": lambda d, m: plots.timeline(_timeline_frame()),
    "distribution": lambda d, m: plots.distribution(d, top=2),
    "hccl": lambda d, m: plots.compare_hccl(d),
    "launch_split-note": lambda d, m: plots.launch_split(
        d.with_meta(window_end=d.meta["window_start"] + 1e-6)
    ),
    "collectives": lambda d, m: plots.collectives(d),
    "collectives-none": lambda d, m: plots.collectives(m),
    "kernels-none": lambda d, m: plots.kernel_distributions(plots_without_activity(m)),
    "launch_split-none": lambda d, m: plots.launch_split(plots_without_activity(m)),
    "bandwidth": lambda d, m: plots.bandwidth(d),
    "bandwidth-none": lambda d, m: plots.bandwidth(m),
}


def plots_without_activity(snap):
    """The same calls, no activity data (as a Session without ``activity=``)."""
    from mspti_lens import Snapshot

    return Snapshot(snap._native, snap.meta)


def overhang_px(fig) -> float:
    """How far, in pixels of the notebook's PNG (PIXEL_RATIO x the CSS size), anything drawn
    reaches past the figure's edges, or a value label past its axes (0: nothing cut)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig.set_dpi(CSS_DPI * PIXEL_RATIO)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    box = fig.get_tightbbox(renderer)  # inches
    w, h = fig.get_size_inches()
    over = [0.0, -box.x0, -box.y0, box.x1 - w, box.y1 - h]
    for ax in fig.axes:  # value labels clipped to their axes: cut at its edge if they reach past it
        area = ax.get_window_extent(renderer)
        for t in ax.texts:
            if ax.axison and t.get_clip_on():
                b = t.get_window_extent(renderer)
                over += [(area.x0 - b.x0) / fig.dpi, (b.x1 - area.x1) / fig.dpi]
    return max(over) * fig.dpi


def overlapping_ticks(fig) -> list[tuple[str, str]]:
    """Neighbouring x tick labels of an axes that overlap (as last drawn)."""
    renderer = fig.canvas.get_renderer()
    out = []
    for ax in fig.axes:
        if not (ax.get_visible() and ax.axison):
            continue
        lo, hi = sorted(ax.get_xlim())
        labels = [t for x, t in zip(ax.get_xticks(), ax.get_xticklabels()) if lo <= x <= hi and t.get_text()]
        spans = sorted((b.x0, b.x1, t.get_text()) for t in labels for b in [t.get_window_extent(renderer)])
        out += [(a[2], b[2]) for a, b in zip(spans, spans[1:]) if a[1] > b[0]]
    return out


@pytest.mark.parametrize("kind", list(FIGURES))
def test_nothing_is_cut_at_the_figures_edges_at_twice_the_css_size(device_snap, marked_snap, kind):
    fig = FIGURES[kind](device_snap, marked_snap)
    assert overhang_px(fig) <= 1.0, kind
    assert not overlapping_ticks(fig), kind


def test_a_timeline_without_intervals_says_all_of_how_to_get_them_in_one_short_figure(marked_snap):
    fig = plots.plot(marked_snap, "timeline")
    (text,) = [t for ax in fig.axes for t in ax.texts]
    assert text.get_text().replace("\n", " ") == NO_INTERVALS  # every word, ending "interval=0.5)"
    assert fig.get_size_inches()[1] < 1.5


def test_collectives_of_a_window_without_them_say_what_is_missing_in_one_short_figure(marked_snap):
    assert len(marked_snap.kernels())  # kernel activity is there
    fig = plots.plot(marked_snap, "collectives")
    texts = [t.get_text().replace("\n", " ") for ax in fig.axes for t in ax.texts]
    assert len(texts) == 1, texts
    (text,) = texts
    assert "no device activity" not in text
    assert text.startswith("no collectives: this snapshot has ") and "kernel" in text and "marker" in text
    assert "not communication or hccl" in text and "%%mspti -a communication" in text
    assert fig.get_size_inches()[1] < 1.5  # a message, not a large empty frame
    assert not any(ax.axison for ax in fig.axes)
    # without any activity, that is what it says
    bare = plots.collectives(plots_without_activity(marked_snap))
    assert any("no device activity" in t.get_text() for ax in bare.axes for t in ax.texts)


def test_the_bandwidth_plot_names_the_ops_it_leaves_out_and_draws_them_given_the_rank_count(device_snap):
    table = device_snap.collectives(by="size")
    assert table.filter(pl.col("op") == "all_reduce")["busbw_gbps"].is_null().all()  # no rank count
    fig = plots.bandwidth(device_snap)
    drawn = {line.get_label().split()[0] for line in fig.axes[0].get_lines()}
    assert drawn == {"broadcast"}
    notes = [t.get_text() for t in fig.texts if t.get_text().startswith("Not drawn")]
    assert len(notes) == 1 and "\n" not in notes[0], notes  # one visible line
    assert "all_reduce (rank count unknown" in notes[0] and "ranks=8" in notes[0], notes
    assert "barrier (moves no data)" in notes[0]
    assert "size buckets" not in fig.get_suptitle()
    given = plots.bandwidth(device_snap, ranks=2)
    assert {line.get_label().split()[0] for line in given.axes[0].get_lines()} == {"all_reduce", "broadcast"}
    assert not any("all_reduce" in t.get_text() for t in given.texts)
