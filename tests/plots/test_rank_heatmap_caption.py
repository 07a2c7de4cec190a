"""The rank heat map's caption (plots/runs.py): it says where profiling was off on a rank (those
cells hatched) apart from where a rank was profiled but made no call, and no line of it is cut
at the right edge of the PNG the notebook shows (rendered at 2x). A run made of frames: no job."""

from __future__ import annotations

import io

import numpy as np
import polars as pl
import pytest

pytest.importorskip("matplotlib")

from matplotlib.image import imread

from mspti_lens.plots import rank_heatmap
from mspti_lens.plots.figure import render_figure

T0 = 1.8e9


class PausedRun:
    """Two ranks, a window a second for 12 s; rank 1 paused from 4 s to 8 s (no window, two on
    periods); rank 0 profiled throughout but made no call in its window ending at 6 s."""

    def timeline(self) -> pl.DataFrame:
        rows = []
        for rank in (0, 1):
            for w in range(12):
                if rank == 1 and 4 <= w < 8:
                    continue  # paused: no window written
                calls = 0 if (rank == 0 and w == 5) else 10
                rows.append(
                    {
                        "host": "h",
                        "rank": rank,
                        "window": w + 1,
                        "window_start": T0 + w,
                        "window_end": T0 + w + 1,
                        "period": 1 if w < 4 else 2,
                        "domain": "hccl",
                        "name": "HcclAllReduce",
                        "num_calls": calls,
                        "total_ns": calls * 1_000_000 * (1 + rank),
                        "avg_ns": 1e6 * (1 + rank) if calls else None,
                        "min_ns": 1_000_000,
                        "max_ns": 2_000_000,
                    }
                )
        return pl.DataFrame(rows)

    def files(self) -> pl.DataFrame:
        return pl.DataFrame({"interval_s": [1.0], "simulated": [True]})

    def periods(self) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "host": ["h", "h", "h"],
                "rank": [0, 1, 1],
                "pid": [1, 2, 2],
                "period": [1, 1, 2],
                "start": [T0, T0, T0 + 8],
                "end": [T0 + 12, T0 + 4, T0 + 12],
                "enable": ["hccl"] * 3,
            }
        )


def caption(fig) -> str:
    return " ".join(t.get_text() for t in fig.texts).replace("\n", " ")


def test_the_heat_map_says_where_profiling_was_off_apart_from_no_call():
    fig = rank_heatmap(PausedRun(), "HcclAllReduce")
    text = caption(fig)
    assert "hatched: profiling was off on that rank" in text, text
    assert "grey: the rank finished no HcclAllReduce call in that interval while profiling was on" in text
    ax = fig.axes[0]
    hatched = [(p.get_x(), p.get_y(), p.get_width()) for p in ax.patches if p.get_hatch()]
    # rank 1 (row 1) was off in the columns of the windows that would have ended at 5..8 s
    assert hatched == [(3.5, 0.5, 4)], hatched


@pytest.mark.parametrize("name_pad", [7, 15])
def test_no_line_of_the_caption_is_cut_at_the_right_of_the_2x_png(name_pad):
    class Run(PausedRun):  # caption lines of several lengths
        name = "HcclAllReduce" + "x" * name_pad

        def timeline(self) -> pl.DataFrame:
            return super().timeline().with_columns(pl.lit(self.name).alias("name"))

    run = Run()
    png, width, height = render_figure(rank_heatmap(run, run.name))
    img = imread(io.BytesIO(png))
    ink = img[..., :3].min(axis=2) < 0.6  # dark pixels: text
    band = ink[int(img.shape[0] * 0.82) :]  # under the axes: the caption
    assert band.any()
    right = np.nonzero(band.any(axis=0))[0].max()
    assert right < img.shape[1] * 0.99, (right, img.shape)  # its ink ends before the edge


def test_a_segment_compaction_merged_is_not_drawn_as_one_interval():
    class Compacted(PausedRun):  # rank 0's first 8 windows merged into one segment
        def timeline(self) -> pl.DataFrame:
            t = super().timeline()
            early = (pl.col("rank") == 0) & (pl.col("window") <= 8)
            seg = (
                t.filter(early)
                .select(
                    "host",
                    "rank",
                    pl.col("window").max(),
                    pl.col("window_start").min(),
                    pl.col("window_end").max(),
                    pl.col("period").max(),
                    "domain",
                    "name",
                    pl.col("num_calls").sum(),
                    pl.col("total_ns").sum(),
                    pl.lit(99e6).alias("avg_ns"),
                    pl.col("min_ns").min(),
                    pl.col("max_ns").max(),
                )
                .unique()
            )
            return pl.concat([t.filter(~early), seg], how="vertical_relaxed")

        def files(self) -> pl.DataFrame:  # the segment's file says which windows it holds
            return pl.DataFrame(
                {
                    "host": ["h"] * 5,
                    "rank": [0, 0, 0, 0, 1],
                    "window": [8, 9, 10, 11, 1],
                    "window_first": [1, 9, 10, 11, 1],
                    "interval_s": [1.0] * 5,
                    "simulated": [True] * 5,
                }
            )

    fig = rank_heatmap(Compacted(), "HcclAllReduce")
    assert "Not drawn: 1 segment(s) of older windows merged by compaction" in caption(fig)
    grid = fig.axes[0].images[0].get_array()
    # rank 0's column of 8 s holds its own window (1 ms), not the 8-window segment's mean
    assert grid[0, 8] == pytest.approx(1000.0), grid[0]
    assert grid.mask[0, :8].all()
