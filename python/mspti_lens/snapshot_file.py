"""The snapshot file: a Parquet table of every key's exact state and buckets, with the window's
metadata in the file's key-value metadata. Writes and reads the native state of any snapshot it is
given; Snapshot.save and Snapshot.load call it, so it imports nothing of snapshot.py."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import IO, Any, TypeVar

import polars as pl

from . import _native, activity, slowest, timeline
from .columns import FILE_COLUMNS

FORMAT = "mspti-lens-snapshot"
# Version 2: the exponential buckets (snapshot.SCALE) and an exact integer sum of squares. Version 1 (the
# log-linear buckets before it) cannot be re-bucketed exactly and is refused with a sentence.
FORMAT_VERSION = 2
LOADABLE_VERSIONS = (2,)

S = TypeVar("S")
# The most rows a snapshot file may claim: it holds one row per (domain, callback, name), a few
# hundred in any real snapshot, merged ones included; far more is a corrupt footer.
MAX_ROWS = 1 << 20


def _checked_target(path: object, verb: str, method: str) -> None:
    """Refuse anything that is neither a path nor a binary file object with one sentence, before
    pyarrow words it in its own terms (which change between its versions)."""
    if isinstance(path, (str, os.PathLike)) or hasattr(path, "read" if verb == "read" else "write"):
        return
    raise TypeError(
        f"Snapshot.{method}() takes a path (str or os.PathLike) or a binary file object to {verb}, "
        f"not {type(path).__name__}"
    )


# The file's columns, in order: as polars builds them and as the file stores them (pyarrow).
_POLARS_COLUMNS: dict[str, pl.DataType | type[pl.DataType]] = {
    "domain": pl.UInt32,
    "cbid": pl.UInt32,
    "name": pl.String,
    "count": pl.UInt64,
    "sum": pl.UInt64,
    "sum_sq_hi": pl.UInt64,
    "sum_sq_lo": pl.UInt64,
    "min": pl.UInt64,
    "max": pl.UInt64,
    "zero": pl.UInt64,
    "overflow": pl.UInt64,
    "index": pl.List(pl.Int32),
    "counts": pl.List(pl.UInt64),
}


def _arrow_schema(pa: Any) -> Any:
    """_POLARS_COLUMNS as the file's pyarrow types (strings and lists of 32-bit offsets)."""
    types = {
        "domain": pa.uint32(),
        "cbid": pa.uint32(),
        "name": pa.string(),
        "index": pa.list_(pa.int32()),
        "counts": pa.list_(pa.uint64()),
    }
    return pa.schema([(c, types.get(c, pa.uint64())) for c in _POLARS_COLUMNS])


def save(snap: Any, path: str | os.PathLike | IO[bytes], event_log: bool = True) -> None:
    """Write ``snap`` (a Snapshot) to ``path``: see :meth:`Snapshot.save`."""
    _checked_target(path, "write", "save")
    import pyarrow as pa
    import pyarrow.parquet as pq

    k = snap._native.key_state()
    b = snap._native.buckets()
    n = len(k["name"])
    indices: list[list[int]] = [[] for _ in range(n)]
    counts: list[list[int]] = [[] for _ in range(n)]
    for key, index, count in zip(b["key"], b["index"], b["count"]):
        if index is not None:  # the zero bucket and overflow have their own columns
            indices[key].append(index)
            counts[key].append(count)
    mask = (1 << 64) - 1
    columns = {
        "domain": k["domain"],
        "cbid": k["cbid"],
        "name": k["name"],
        "count": k["count"],
        "sum": k["sum"],
        # The exact u128 sum of squares as two u64 halves (Parquet has no 128-bit integer).
        "sum_sq_hi": [v >> 64 for v in k["sum_sq"]],
        "sum_sq_lo": [v & mask for v in k["sum_sq"]],
        "min": k["min"],
        "max": k["max"],
        "zero": k["zero"],
        "overflow": k["overflow"],
        "index": indices,
        "counts": counts,
    }
    # The columns are built by polars and handed to pyarrow, not built by pa.array(): pyarrow asks
    # whether a Python list is a pandas object by importing pandas, over a second of CPU in every
    # process that saves a window (each rank of a recorded job). The cast gives the file the types
    # it always had (polars makes large strings and lists).
    table = pl.DataFrame(columns, schema=_POLARS_COLUMNS).to_arrow().cast(_arrow_schema(pa))
    meta = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "scale": _native.SCALE,
        "meta": dict(snap.meta),
        "counters": snap.counters,
    }
    activity.save_into(snap, meta)
    if not event_log and isinstance(meta.get("device"), dict):
        meta["device"]["events"] = None  # kept elsewhere (a run's events files): read as none
    slowest.save_into(snap, meta)
    timeline.save_into(snap, meta)
    table = table.replace_schema_metadata({"mspti_lens": json.dumps(meta)})
    pq.write_table(table, path if hasattr(path, "write") else os.fspath(path))  # a run's file: opened


def _check_row_counts(meta: Any, p: str) -> None:
    """Refuse a footer whose row counts cannot be true before pyarrow sizes its buffers by them (a
    4 KB file whose one row group claimed 5e10 rows made ``read_table`` allocate 20 GB)."""
    groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    if any(n < 0 for n in groups) or sum(groups) != meta.num_rows or meta.num_rows > MAX_ROWS:
        raise ValueError(
            f"{p} is not a mspti-lens snapshot (a corrupt Parquet footer: row groups of {groups[:4]} "
            f"rows for a file of {meta.num_rows}; a snapshot holds at most {MAX_ROWS:,} rows)"
        )


def load(path: str | os.PathLike | IO[bytes], make: Callable[..., S]) -> S:
    """Read a file written by :func:`save`, the snapshot made by ``make(native, meta,
    timeline=..., activity=..., slowest=...)`` (the Snapshot class): see :meth:`Snapshot.load`."""
    _checked_target(path, "read", "load")
    import pyarrow as pa
    import pyarrow.parquet as pq

    opened = not isinstance(path, (str, os.PathLike))  # a run's file, opened and checked by runfiles
    p = str(getattr(path, "name", "the file")) if opened else os.fspath(path)  # type: ignore[arg-type]
    if not opened and not os.path.exists(p):
        raise FileNotFoundError(f"no snapshot file at {p}")
    if not opened and not os.path.isfile(p):
        raise ValueError(f"{p} is not a file; Snapshot.load() reads one file written by Snapshot.save()")
    try:
        parquet = pq.ParquetFile(path if opened else p)
        _check_row_counts(parquet.metadata, p)
        table = parquet.read()
    except (pa.ArrowException, OSError) as e:
        raise ValueError(f"{p} is not a mspti-lens snapshot (not a readable Parquet file: {e})") from None
    raw = (table.schema.metadata or {}).get(b"mspti_lens")
    try:
        head = json.loads(raw) if raw else None
    except ValueError:
        head = None
    if isinstance(head, dict) and str(head.get("format", "")).startswith(FORMAT + "/"):
        # Version 1 wrote its version into the format string.
        head = {**head, "format": FORMAT, "version": head["format"].rsplit("/", 1)[1]}
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise ValueError(
            f"{p} is a Parquet file but not a mspti-lens snapshot (no '{FORMAT}' metadata); "
            "snapshots are written by Snapshot.save()"
        )
    version = head.get("version")
    if version not in LOADABLE_VERSIONS:
        loadable = ", ".join(str(v) for v in LOADABLE_VERSIONS)
        raise ValueError(
            f"{p} is a mspti-lens snapshot of format version {version}; this mspti-lens loads "
            f"version {loadable} (version 1 files, with the log-linear buckets of mspti-lens 0.1, "
            "cannot be re-bucketed exactly: load them with the version that wrote them)"
        )
    missing = [c for c in FILE_COLUMNS if c not in table.column_names]
    if missing:
        raise ValueError(f"{p} lacks snapshot columns {missing}")
    try:
        c = {name: table.column(name).to_pylist() for name in FILE_COLUMNS}
        bkey: list[int] = []
        bidx: list[int | None] = []
        bcnt: list[int] = []
        for i, (bs, cs, zero) in enumerate(zip(c["index"], c["counts"], c["zero"])):
            if bs is None or cs is None or len(bs) != len(cs):
                raise ValueError(f"key {i} has {len(bs or [])} buckets but {len(cs or [])} counts")
            if zero:
                bkey.append(i)
                bidx.append(None)
                bcnt.append(int(zero))
            bkey.extend([i] * len(bs))
            bidx.extend(bs)
            bcnt.extend(cs)
        counters = {str(k): int(v) for k, v in dict(head.get("counters") or {}).items()}
        native = _native.NativeSnapshot.from_state(
            c["domain"],
            c["cbid"],
            c["name"],
            c["sum"],
            [(hi << 64) | lo for hi, lo in zip(c["sum_sq_hi"], c["sum_sq_lo"])],
            c["min"],
            c["max"],
            c["overflow"],
            bkey,
            bidx,
            bcnt,
            counters,
        )
        declared = [int(x) for x in c["count"]]
    except (ValueError, TypeError, OverflowError, pa.ArrowException) as e:
        raise ValueError(f"{p} holds a malformed snapshot: {e}") from None
    actual = native.stats([])["count"]
    if declared != list(actual):
        raise ValueError(f"{p} is inconsistent: per-key counts {declared} do not match its buckets")
    meta = dict(head.get("meta") or {})
    meta["loaded_from"] = p
    try:
        # Read in this order so a file broken in several places names the same part first.
        snap = make(
            native,
            meta,
            timeline=timeline.read(head),
            activity=activity.read(head),
            slowest=slowest.read(head),
        )
    except ValueError as e:
        raise ValueError(f"{p}: {e}") from None
    return snap


# -- many snapshots at once (runs) ---------------------------------------------------
# The rows Snapshot.save writes, merged over many files without building a Snapshot per file.
STATE_KEY = ("domain", "cbid", "name")
_HALF = 1 << 32


def merge_saved(rows: pl.LazyFrame, by: tuple[str, ...] = ()) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """Merge the rows of many saved snapshots exactly, per ``by`` columns and key: the per-key state
    (counts, sums, zero and overflow counts added; min of mins, max of maxes; the u128 sum of
    squares added in u64 limbs) and the buckets (counts added per index). Lazy: memory grows with
    keys x buckets, not with the files. :func:`native_from_state` makes a native snapshot of it."""
    keys = [*by, *STATE_KEY]
    lo = pl.col("sum_sq_lo")
    state = rows.group_by(keys).agg(
        pl.col("count").sum(),
        pl.col("sum").sum(),
        # Exact: the high halves add in u64; the low halves are split in 32-bit parts whose sums
        # fit in u64 for up to 2^32 rows. native_from_state joins the three.
        pl.col("sum_sq_hi").sum(),
        (lo // _HALF).sum().alias("sum_sq_lo_hi"),
        (lo % _HALF).sum().alias("sum_sq_lo_lo"),
        pl.col("min").min(),
        pl.col("max").max(),
        pl.col("zero").sum(),
        pl.col("overflow").sum(),
    )
    buckets = (
        rows.select([*keys, "index", "counts"])
        .explode(["index", "counts"])
        .drop_nulls("index")
        .group_by([*keys, "index"])
        .agg(pl.col("counts").sum())
    )
    return state, buckets


def native_from_state(
    state: pl.DataFrame, buckets: pl.DataFrame, counters: dict[str, int]
) -> _native.NativeSnapshot:
    """The native snapshot of per-key state and buckets in the shape :func:`merge_saved` returns
    (``Snapshot(native, meta)`` makes the Snapshot)."""
    state = state.sort(list(STATE_KEY))
    keyed = state.with_row_index("key")
    index = keyed.select("key", *STATE_KEY)
    zeros = keyed.filter(pl.col("zero") > 0).select(
        "key", pl.lit(None, dtype=pl.Int32).alias("index"), pl.col("zero").alias("counts")
    )  # the zero bucket: index None
    b = buckets.join(index, on=list(STATE_KEY), how="inner").select("key", "index", "counts")
    b = pl.concat([zeros, b], how="vertical_relaxed").sort("key", "index", nulls_last=False)
    bkey, bidx, bcnt = b["key"].to_list(), b["index"].to_list(), b["counts"].to_list()
    sum_sq = [
        (hi << 64) + (lh << 32) + ll
        for hi, lh, ll in zip(state["sum_sq_hi"], state["sum_sq_lo_hi"], state["sum_sq_lo_lo"])
    ]
    return _native.NativeSnapshot.from_state(
        state["domain"].to_list(),
        state["cbid"].to_list(),
        state["name"].to_list(),
        state["sum"].to_list(),
        sum_sq,
        state["min"].to_list(),
        state["max"].to_list(),
        state["overflow"].to_list(),
        bkey,
        bidx,
        bcnt,
        {k: int(v) for k, v in counters.items()},
    )
