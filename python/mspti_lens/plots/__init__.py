"""Matplotlib figures of snapshots, public as :mod:`mspti_lens.plots`. One module per subject:
:mod:`.host` (API latency: distributions, CDFs, comparisons), :mod:`.device` (device time beside
host time: launch split, kernel distributions, collectives), :mod:`.timeline` (latency over
time), :mod:`.runs` (whole jobs: per-rank heat maps). Plots read Snapshot frames only."""

from .bandwidth import bandwidth
from .device import collectives, kernel_distributions, launch_split
from .figure import to_png
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
)
from .runs import rank_heatmap
from .timeline import timeline

__all__ = [
    "BINS_PER_DECADE",
    "bandwidth",
    "KINDS",
    "PERCENTILES",
    "before_after",
    "cdf",
    "collectives",
    "compare_hccl",
    "compare_launch",
    "distribution",
    "kernel_distributions",
    "launch_split",
    "plot",
    "timeline",
    "rank_heatmap",
    "to_png",
]
