"""Latency over time as a frame: `Snapshot.timeline()` / `Session.timeline()`.

With ``Session(interval=1.0)`` the native core keeps a bounded ring of per-interval histograms
(exact: every call in exactly one interval; older intervals merged into longer ones), and each
row here is one interval of one API: its calls and p50/p99 by the histogram's own rule.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from . import _native
from .catalog import DOMAIN_NAMES, callback

TIMELINE_SCHEMA: dict[str, Any] = {
    "start": pl.Datetime("ns", "UTC"),
    "end": pl.Datetime("ns", "UTC"),
    "domain": pl.String,
    "callback": pl.String,
    "name": pl.String,
    "num_calls": pl.UInt64,
    "p50_ns": pl.UInt64,
    "p99_ns": pl.UInt64,
    "source": pl.String,
}


def empty_timeline() -> pl.DataFrame:
    return pl.DataFrame(schema=TIMELINE_SCHEMA)


def timeline_frame(simulated: bool) -> pl.DataFrame:
    """The process's timeline now (empty when no Session keeps one), oldest interval first."""
    r = _native.timeline_rows()
    n = len(r["name"])
    if not n:
        return empty_timeline()

    def short(d: int, c: int) -> str:
        cb = callback(d, c)
        return cb.short if cb else f"CBID_{c}"

    def when(col: str) -> pl.Series:
        return pl.Series(r[col], dtype=pl.Int64).cast(pl.Datetime("ns")).dt.replace_time_zone("UTC")

    return pl.DataFrame(
        {
            "start": when("start_ns"),
            "end": when("end_ns"),
            "domain": [DOMAIN_NAMES.get(d, str(d)) for d in r["domain"]],
            "callback": [short(d, c) for d, c in zip(r["domain"], r["cbid"])],
            "name": r["name"],
            "num_calls": pl.Series(r["count"], dtype=pl.UInt64),
            "p50_ns": pl.Series(r["p50"], dtype=pl.UInt64),
            "p99_ns": pl.Series(r["p99"], dtype=pl.UInt64),
            "source": ["simulated" if simulated else "libmspti"] * n,
        },
        schema=TIMELINE_SCHEMA,
    )
