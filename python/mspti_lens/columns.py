"""Column vocabularies shared by several frames and the snapshot file, each defined once, and the
statistics columns built from a native histogram (the API summary's and the device tables')."""

from __future__ import annotations

from typing import Any

import polars as pl

# The quantiles every summary computes, in the order of its med/p90/p99/p999 columns.
QUANTILES = (0.5, 0.9, 0.99, 0.999)
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


def stat_columns(s: dict[str, Any]) -> dict[str, pl.Series]:
    """The summary's statistics columns (num_calls .. stddev_ns, in ns) of a native ``stats()``
    result taken with QUANTILES: shared by the API summary and the device tables."""
    return {
        "num_calls": pl.Series(s["count"], dtype=pl.UInt64),
        "total_ns": pl.Series(s["total"], dtype=pl.UInt64),
        "avg_ns": pl.Series(s["mean"], dtype=pl.Float64),
        "min_ns": pl.Series(s["min"], dtype=pl.UInt64),
        **{
            c: pl.Series(s[f"q{i}"], dtype=pl.UInt64)
            for i, c in enumerate(("med_ns", "p90_ns", "p99_ns", "p999_ns"))
        },
        "max_ns": pl.Series(s["max"], dtype=pl.UInt64),
        "stddev_ns": pl.Series(s["std"], dtype=pl.Float64),
    }
