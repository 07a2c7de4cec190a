"""Matplotlib figures of snapshots, public as :mod:`mspti_lens.plots`. One module per subject:
:mod:`.host` (API latency: distributions, CDFs, comparisons), :mod:`.timeline` (latency over
time). Plots read Snapshot frames only."""

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
from .timeline import timeline  # issue 13

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
    "timeline",
    "to_png",
]
