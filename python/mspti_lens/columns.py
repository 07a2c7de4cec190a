"""Column vocabularies shared by several frames and the snapshot file, each defined once: the
unit each column is shown in by its name (:data:`COLUMN_UNITS`, every table's one unit table),
and the statistics columns built from a native histogram (the API summary's and the device
tables')."""

from __future__ import annotations

from typing import Any

import polars as pl

# How a column is shown, by its name: the first pattern that matches the whole name wins.
# Kinds: time (ns durations), seconds (durations in s), age (seconds ago), clock_ns / clock_s
# (wall-clock instants as Unix time), bytes, gbps (GB/s), pct (percent), id (integers that name something: no
# thousands separators), count (integers) and number (other floats); text otherwise.
COLUMN_UNITS: tuple[tuple[str, str], ...] = (
    (r"(thread_id|device_id|stream_id|correlation_id|context_id|pid|tid|rank|slow_rank|late_rank"
     r"|window|instance|sequence|cbid|index|seed|step|port)", "id"),
    (r"(\w+_)?(start|end)_ns|\w*_unix_ns", "clock_ns"),  # first_start_ns too: an instant
    (r"start|end|last_update|first_update|window_start|window_end|written|\w*_unix", "clock_s"),
    (r"\w*_ns", "time"),
    (r"age_s", "age"),
    (r"\w*_s", "seconds"),
    (r"bytes|bytes_\w+|\w+_bytes", "bytes"),
    (r"\w*_gbps", "gbps"),
    (r"\w*_pct|\w*_%|\w* Δ", "pct"),
)  # fmt: skip
# The kinds whose cells carry a unit: a frame with such a column reads wrong as raw numbers.
UNIT_KINDS = frozenset({"time", "clock_ns", "clock_s", "age", "seconds", "bytes", "gbps", "pct"})
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
