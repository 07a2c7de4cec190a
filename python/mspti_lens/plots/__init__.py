"""Matplotlib figures of snapshots, public as :mod:`mspti_lens.plots`. One module per subject:
:mod:`.host` (API latency: distributions, CDFs, comparisons). Plots read Snapshot frames only."""

from .host import (
    BINS_PER_DECADE,
    PERCENTILES,
    before_after,
    cdf,
    compare_hccl,
    compare_launch,
    distribution,
    to_png,
)

__all__ = [
    "BINS_PER_DECADE",
    "PERCENTILES",
    "before_after",
    "cdf",
    "compare_hccl",
    "compare_launch",
    "distribution",
    "to_png",
]
