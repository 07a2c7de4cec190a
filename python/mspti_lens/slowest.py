"""The slowest calls mspti-lens kept as a frame: `Snapshot.slowest()`.

Per (thread, API) and window the native core keeps the K slowest calls (K = 8) with their start
on the wall clock, duration and OS thread id, at the cost of one compare per call.

A snapshot's kept calls are its native snapshot's, or (loaded from a file, or merged) rows held
beside it in :data:`RAW_COLUMNS`' shape; :func:`save_into` / :func:`read` /
:func:`merged` are the snapshot file's and ``Snapshot.merge``'s hooks.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from . import _native
from .catalog import DOMAIN_NAMES, callback

#: Calls kept per (thread, key) and window (defined in rust/lens/src/core/slowest.rs).
PER_KEY: int = _native.SLOWEST_PER_KEY
#: The kept calls' raw columns (the native snapshot's ``slowest()``; the file's "slowest" entry).
RAW_COLUMNS = ("domain", "cbid", "name", "thread_id", "start_unix_ns", "duration_ns")

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


def rows_of(snap: Any) -> dict[str, list]:
    """The snapshot's kept calls as columns of :data:`RAW_COLUMNS`."""
    rows = getattr(snap, "_slowest", None)
    if rows is None:
        e = snap._native.slowest()
        rows = {c: list(e[c]) for c in RAW_COLUMNS}
    return rows


def slowest_frame(snap: Any, per_api: int | None = None) -> pl.DataFrame:
    """One row per kept call, slowest first; ``per_api`` keeps only that many per API (over all
    threads)."""
    simulated = bool(snap.simulated)
    if per_api is not None and (not isinstance(per_api, int) or isinstance(per_api, bool) or per_api < 1):
        raise ValueError(
            f"per_api must be a positive int (calls to keep per API), or None for all, not {per_api!r}"
        )
    e = rows_of(snap)
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


# -- the snapshot file and Snapshot.merge ------------------------------------------------------


def save_into(snap: Any, head: dict) -> None:
    """Put the kept calls in the file's metadata (at most PER_KEY per thread and key: small)."""
    head["slowest"] = rows_of(snap)


def read(head: dict) -> dict[str, list] | None:
    """The kept calls a snapshot file's metadata holds (None: the file keeps none)."""
    s = head.get("slowest")
    if s is None:
        return None
    if not isinstance(s, dict) or any(not isinstance(s.get(c), list) for c in RAW_COLUMNS):
        raise ValueError(f"the snapshot file's slowest calls are not columns {list(RAW_COLUMNS)}")
    if len({len(s[c]) for c in RAW_COLUMNS}) != 1:
        raise ValueError("the snapshot file's slowest-call columns have different lengths")
    try:
        numbers = {c: [int(v) for v in s[c]] for c in RAW_COLUMNS if c != "name"}
    except (TypeError, ValueError) as e:
        raise ValueError(f"the snapshot file's slowest calls are malformed: {e}") from None
    if any(v < 0 for col in numbers.values() for v in col):
        raise ValueError("the snapshot file's slowest calls hold negative numbers")
    rows: dict[str, list] = {"name": [str(v) for v in s["name"]], **numbers}
    return {c: rows[c] for c in RAW_COLUMNS}


def merged(a: Any, b: Any) -> dict[str, list]:
    """The kept calls of the sum of two snapshots: per (thread, key), the PER_KEY slowest of the
    union (ties: the earlier start first), as one longer window would have kept them."""
    ra, rb = rows_of(a), rows_of(b)
    both = [r for rows in (ra, rb) for r in zip(*(rows[c] for c in RAW_COLUMNS))]
    # (domain, cbid, name, thread_id, start, duration): slowest first, then the earlier start.
    both.sort(key=lambda r: (r[0], r[1], r[2], r[3], -r[5], r[4]))
    kept: list[tuple] = []
    seen: dict[tuple, int] = {}
    for r in both:
        group = r[:4]
        if seen.get(group, 0) < PER_KEY:
            seen[group] = seen.get(group, 0) + 1
            kept.append(r)
    return {c: [r[i] for r in kept] for i, c in enumerate(RAW_COLUMNS)}
