"""Matplotlib figures of snapshots, public as :mod:`mspti_lens.plots`. One module per subject:
:mod:`.host` (API latency: distributions, CDFs, comparisons), :mod:`.runs` (whole jobs: per-rank
heat maps). Plots read Snapshot frames only."""

from .host import (
    BINS_PER_DECADE,
    KINDS,
    PERCENTILES,
    before_after,
    cdf,
    compare_hccl,
    compare_launch,
    distribution,
    plot,
    to_png,
)
from .runs import rank_heatmap

__all__ = [
    "BINS_PER_DECADE",
    "KINDS",
    "PERCENTILES",
    "before_after",
    "cdf",
    "compare_hccl",
    "compare_launch",
    "distribution",
    "plot",
    "rank_heatmap",
    "to_png",
]
