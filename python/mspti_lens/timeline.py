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


# -- the snapshot file and Snapshot.merge ------------------------------------------------------
# In the file: the frame's columns, times as integer ns since 1970 (UTC), nulls as null.
_TIME_COLUMNS = ("start", "end")


def save_into(snap: Any, head: dict) -> None:
    """Put the snapshot's timeline (when it keeps one) in the file's metadata."""
    t = getattr(snap, "_timeline", None)
    if t is None:
        return
    head["timeline"] = {
        c: (t[c].dt.epoch("ns") if c in _TIME_COLUMNS else t[c]).to_list() for c in TIMELINE_SCHEMA
    }


def read(head: dict) -> pl.DataFrame | None:
    """The timeline a snapshot file's metadata holds (None: the file keeps none)."""
    s = head.get("timeline")
    if s is None:
        return None
    if not isinstance(s, dict) or any(not isinstance(s.get(c), list) for c in TIMELINE_SCHEMA):
        raise ValueError(f"the snapshot file's timeline is not columns {list(TIMELINE_SCHEMA)}")
    try:
        cols = {
            c: pl.Series(s[c], dtype=pl.Int64).cast(pl.Datetime("ns")).dt.replace_time_zone("UTC")
            if c in _TIME_COLUMNS
            else pl.Series(s[c], dtype=TIMELINE_SCHEMA[c], strict=True)
            for c in TIMELINE_SCHEMA
        }
        return pl.DataFrame(cols, schema=TIMELINE_SCHEMA)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError) as e:
        raise ValueError(f"the snapshot file's timeline is malformed: {e}") from None


def merged(a: pl.DataFrame | None, b: pl.DataFrame | None) -> pl.DataFrame | None:
    """The timeline of the sum of two snapshots: both timelines' rows, oldest interval first.

    An interval's p50/p99 cannot be combined without its histogram, so rows are never summed: a
    row both hold identically (the same session's interval, seen by two of its snapshots) is kept
    once; rows that differ stay separate rows (other processes or ranks over the same time, or one
    session's older intervals after the ring merged them coarser: those may overlap finer ones).
    None when neither snapshot keeps a timeline."""
    if a is None or b is None:
        return a if b is None else b
    return (
        pl.concat([a, b], how="vertical")
        .unique(maintain_order=True)
        .sort(["start", "end", "domain", "name"], maintain_order=True)
    )
