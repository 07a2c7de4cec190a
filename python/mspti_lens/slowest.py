"""The slowest calls mspti-lens kept (exemplars) as a frame: `Snapshot.slowest()`.

Per (thread, API) and window the native core keeps the K slowest calls (K = 8) with their start
on the wall clock, duration and OS thread id, at the cost of one compare per call.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from .catalog import DOMAIN_NAMES, callback

SLOWEST_SCHEMA: dict[str, Any] = {
    "domain": pl.String,
    "callback": pl.String,
    "name": pl.String,
    "thread_id": pl.UInt32,
    "start": pl.Datetime("ns", "UTC"),
    "start_unix_ns": pl.UInt64,
    "duration_ns": pl.UInt64,
    "source": pl.String,
}


def slowest_frame(native: Any, simulated: bool, per_api: int | None = None) -> pl.DataFrame:
    """One row per kept call, slowest first; ``per_api`` keeps only that many per API (over all
    threads)."""
    if per_api is not None and (not isinstance(per_api, int) or isinstance(per_api, bool) or per_api < 1):
        raise ValueError(
            f"per_api must be a positive int (calls to keep per API), or None for all, not {per_api!r}"
        )
    e = native.exemplars()
    n = len(e["name"])

    def short(d: int, c: int) -> str:
        cb = callback(d, c)
        return cb.short if cb else f"CBID_{c}"

    df = pl.DataFrame(
        {
            "domain": [DOMAIN_NAMES.get(d, str(d)) for d in e["domain"]],
            "callback": [short(d, c) for d, c in zip(e["domain"], e["cbid"])],
            "name": e["name"],
            "thread_id": pl.Series(e["thread_id"], dtype=pl.UInt32),
            "start": pl.Series(e["start_unix_ns"], dtype=pl.Int64)
            .cast(pl.Datetime("ns"))
            .dt.replace_time_zone("UTC"),
            "start_unix_ns": pl.Series(e["start_unix_ns"], dtype=pl.UInt64),
            "duration_ns": pl.Series(e["duration_ns"], dtype=pl.UInt64),
            "source": ["simulated" if simulated else "libmspti"] * n,
        },
        schema=SLOWEST_SCHEMA,
    ).sort(["duration_ns", "start_unix_ns"], descending=[True, False])
    if per_api is not None:
        df = df.filter(pl.int_range(pl.len()).over(["domain", "name"]) < per_api)
    return df
