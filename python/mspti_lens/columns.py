"""Column vocabularies shared by several frames and the snapshot file, each defined once."""

from __future__ import annotations

# A histogram's statistics, under the same names in every frame (Snapshot.summary() and the
# device frames: kernels, launches, collectives, memcpy).
STAT_COLUMNS = (
    "num_calls",
    "total_ns",
    "avg_ns",
    "min_ns",
    "med_ns",
    "p90_ns",
    "p99_ns",
    "p999_ns",
    "max_ns",
    "stddev_ns",
)
# Snapshot.summary(): one row per API; its share of the total time follows the total.
SUMMARY_COLUMNS = (
    "domain",
    "callback",
    "name",
    *STAT_COLUMNS[:2],
    "time_pct",
    *STAT_COLUMNS[2:],
    "beyond_range",
    "source",
)
# The histogram table of a snapshot file (Snapshot.save() writes it, Snapshot.load() needs it).
FILE_COLUMNS = (
    "domain",
    "cbid",
    "name",
    "count",
    "sum",
    "sum_sq_hi",
    "sum_sq_lo",
    "min",
    "max",
    "zero",
    "overflow",
    "index",
    "counts",
)
