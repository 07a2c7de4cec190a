"""Collective bandwidth as nccl-tests defines it, from the device event log.

Per collective: ``bytes`` is nccl-tests' size (count x type size, x ranks for all-gather,
reduce-scatter, scatter and all-to-all), ``algbw_gbps`` = bytes / device time (bytes per ns =
GB/s), ``busbw_gbps`` = algbw x the op's bus factor over n ranks (2(n-1)/n all-reduce; (n-1)/n
all-gather, reduce-scatter, scatter, all-to-all; 1 broadcast, reduce, send, recv). HCCL records
carry HCCL's own bandWidth (upstream hccl_calculator.cpp: count x type size, x rankSize for
all-gather, reduce-scatter, scatter and all-to-all, over the duration), so their bytes (bandwidth
x duration) are already nccl-tests' size; COMMUNICATION records carry count and data type (their
bytes are count x type size) but not the rank count. The rank count of a communicator is, first
found: the caller's (``ranks=``); HCCL's rankSize where both kinds of record describe one
all-gather, reduce-scatter, scatter or all-to-all (HCCL's bytes over COMMUNICATION's, the k-th
record of each: :func:`ranks_from_records`); the job's world size for HCCL's world group
(:func:`ranks_of`, for a snapshot: its window's ``world_size`` or the launcher's variables); a
Run counts the ranks seen in each communicator. Nothing else the library gives carries it: an
all-reduce's HCCL bandWidth has no rankSize factor, COMMUNICATION's algType names an algorithm,
torch_npu's MSTX message names the group and a peer rank, and a callback's parameters (those of
HcclGetRankSize too) are not filled in (docs/reference.md, the ABI notes). Unknown, ``ranks`` is
null and an op whose bytes or bus factor need it gets no busbw, and :func:`missing_ranks_note`
says in one line how to give it. A collective without known bytes, ranks or a positive
duration gets no bandwidth (null, shown as "—"), never a division error or an infinite value."""

from __future__ import annotations

import math
from typing import Any

import polars as pl

# The ops by their nccl-tests name: how bytes scale with the rank count and the bus factor.
TIMES_RANKS = frozenset({"all_gather", "reduce_scatter", "scatter", "all_to_all"})
NO_BYTES = frozenset({"barrier"})
FACTOR_ONE = frozenset({"broadcast", "reduce", "send", "recv", "batch_send_recv"})
# HCCL function names (HcclAllReduce) and its op names in COMMUNICATION records
# (hcom_allReduce_), lower-cased without "hccl"/"hcom" and underscores -> nccl-tests' name.
_OPS = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "allgatherv": "all_gather",
    "reducescatter": "reduce_scatter",
    "reducescatterv": "reduce_scatter",
    "alltoall": "all_to_all",
    "alltoallv": "all_to_all",
    "alltoallvc": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "scatter": "scatter",
    "send": "send",
    "recv": "recv",
    "receive": "recv",
    "batchsendrecv": "batch_send_recv",
    "barrier": "barrier",
}
# HCCL's default communicator (HCCL_WORLD_GROUP): every rank of the job.
WORLD_GROUP = "hccl_world_group"
# A pair's HCCL / COMMUNICATION byte ratio is a rank count when this close to a whole number.
RATIO_TOLERANCE = 0.01
NO_HCCL_NOTE = (
    "no HCCL collectives in this data: enable the communication or hccl activity kind "
    "(Session(activity=['communication']) or record --activity communication) on a job that runs them"
)
BY_SIZE_KEYS = ("group", "op", "data_type", "bytes")
BY_SIZE_SCHEMA: dict[str, pl.DataType] = {
    "group": pl.String(),
    "op": pl.String(),
    "data_type": pl.String(),
    "bytes": pl.UInt64(),
    "ranks": pl.UInt32(),
    "num_calls": pl.UInt64(),
    "med_ns": pl.Float64(),
    "p10_ns": pl.Float64(),
    "p90_ns": pl.Float64(),
    "algbw_gbps": pl.Float64(),
    "algbw_p10_gbps": pl.Float64(),
    "algbw_p90_gbps": pl.Float64(),
    "busbw_gbps": pl.Float64(),
    "busbw_p10_gbps": pl.Float64(),
    "busbw_p90_gbps": pl.Float64(),
    "hccl_bw_gbps": pl.Float64(),
    "from": pl.String(),
}


def op_of(name: str) -> str:
    """nccl-tests' name of an HCCL function or op name; the name itself when unknown."""
    n = name.lower().replace("_", "")
    for prefix in ("hccl", "hcom"):
        if n.startswith(prefix):
            n = n[len(prefix) :]
            break
    return _OPS.get(n, name)


def bus_factor(op: str, ranks: int | None) -> float | None:
    """nccl-tests' busbw / algbw for ``op`` over ``ranks`` ranks (None when it needs an unknown n)."""
    if op in FACTOR_ONE:
        return 1.0
    if not ranks or ranks < 1 or op in NO_BYTES:
        return None
    if op == "all_reduce":
        return 2.0 * (ranks - 1) / ranks
    if op in TIMES_RANKS:
        return (ranks - 1) / ranks
    return None


def size_bucket(nbytes: int | None) -> int | None:
    """The power of two at or below ``nbytes`` (nccl-tests' sizes are powers of two)."""
    if nbytes is None or nbytes <= 0:
        return None
    return 1 << (int(nbytes).bit_length() - 1)


def _ranks_for(ranks: Any, group: str | None) -> int | None:
    if isinstance(ranks, dict):
        r = ranks.get(group)
    else:
        r = ranks
    if r is None:
        return None
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise ValueError(
            f"ranks is the rank count of a communicator: an int >= 1 (or a dict group -> int), not {r!r}"
        )
    return r


def ranks_from_records(events: pl.DataFrame) -> dict[str, int]:
    """Each communicator's rank count where HCCL and COMMUNICATION records both describe its
    all-gathers (reduce-scatters, scatters, all-to-alls): HCCL's bytes (bandWidth x duration,
    x rankSize for these ops) over COMMUNICATION's (count x type size), the k-th record of one
    op of each kind paired; the most common whole ratio, when it is within RATIO_TOLERANCE."""
    need = {"kind", "name", "group", "sequence", "bytes"}
    if not need <= set(events.columns):
        return {}
    ev = events.filter(
        pl.col("kind").is_in(["communication", "hccl"])
        & pl.col("group").is_not_null()
        & pl.col("sequence").is_not_null()
        & (pl.col("bytes") > 0)
    ).select(
        "kind",
        "group",
        "sequence",
        "bytes",
        pl.col("name").map_elements(op_of, return_dtype=pl.String).alias("op"),
    )
    ev = ev.filter(pl.col("op").is_in(list(TIMES_RANKS)))
    if not ev.height:
        return {}
    keys = ["group", "op", "sequence"]
    comm = ev.filter(pl.col("kind") == "communication").select(*keys, pl.col("bytes").alias("comm"))
    hccl = ev.filter(pl.col("kind") == "hccl").select(*keys, pl.col("bytes").alias("hccl"))
    pairs = comm.join(hccl, on=keys).with_columns((pl.col("hccl") / pl.col("comm")).alias("ratio"))
    pairs = pairs.with_columns(pl.col("ratio").round().cast(pl.Int64).alias("n")).filter(
        (pl.col("n") >= 1) & ((pl.col("ratio") - pl.col("n")).abs() <= RATIO_TOLERANCE * pl.col("n"))
    )
    out: dict[str, int] = {}
    for group, n in pairs.group_by("group").agg(pl.col("n").mode().sort().first()).iter_rows():
        out[str(group)] = int(n)
    return out


def ranks_of(snap: Any) -> dict[str, int]:
    """The rank counts a snapshot's collectives can know besides its records: HCCL's world group
    has the job's world size (its window's ``world_size``; for a live snapshot, the launcher's
    variables of this process, runs/writer.py WORLD_VARIABLES)."""
    from .runs.writer import world_size

    meta = getattr(snap, "meta", None) or {}
    n = meta.get("world_size") if isinstance(meta, dict) else None
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        n = world_size()
    return {WORLD_GROUP: n} if n else {}


def snapshot_ranks(snap: Any, ranks: Any = None) -> Any:
    """The ``ranks`` a snapshot's collectives use: an int as given; a dict (or None) completed
    with what the snapshot knows besides its records (:func:`ranks_of`), the caller's entries
    winning. None when nothing is known (the records may still say it)."""
    if ranks is not None and not isinstance(ranks, dict):
        return ranks
    known = {**ranks_of(snap), **(ranks or {})}
    return known or None


def needs_ranks(op: str) -> bool:
    """True when ``op``'s busbw (or, from COMMUNICATION records, its bytes) needs the rank count."""
    return op == "all_reduce" or op in TIMES_RANKS


def missing_ranks_note(frame: pl.DataFrame) -> str | None:
    """One line naming the communicators and ops of ``frame`` (by_size's, or
    Snapshot.collectives()' per op) that have no busbw because their rank count is unknown, and
    how to give it; None when there are none."""
    op_col = "op" if "op" in frame.columns else "name" if "name" in frame.columns else None
    if op_col is None or not {"group", "busbw_gbps"} <= set(frame.columns):
        return None
    rows = frame.filter(pl.col("busbw_gbps").is_null())
    if "ranks" in frame.columns:
        rows = rows.filter(pl.col("ranks").is_null())
    missing: dict[str, set[str]] = {}
    for group, name in rows.select("group", op_col).iter_rows():
        op = op_of(name or "")
        if needs_ranks(op):
            missing.setdefault(group or "?", set()).add(op)
    if not missing:
        return None
    what = "; ".join(f"{', '.join(sorted(ops))} [{g}]" for g, ops in sorted(missing.items()))
    example = next(iter(sorted(missing)))
    launcher = " (or set WORLD_SIZE / RANK_SIZE, as a launcher does)" if WORLD_GROUP in missing else ""
    has = "it has" if len(missing) == 1 else "each has"
    return (
        f"no busbw for {what}: the records do not say how many ranks {has}; pass ranks=N, "
        f"e.g. snap.collectives(by='size', ranks=8) or ranks={{'{example}': 8}}{launcher}"
    )


def _known_ranks(events: pl.DataFrame, ranks: Any) -> Any:
    """``ranks`` as given (an int applies to every communicator), with the communicators a dict
    (or None) leaves out taken from the records."""
    if ranks is not None and not isinstance(ranks, dict):
        return ranks
    return {**ranks_from_records(events), **(ranks or {})}


def per_collective(events: pl.DataFrame, ranks: Any = None) -> pl.DataFrame:
    """One row per COMMUNICATION / HCCL event: group, op, name, from, ranks, duration_ns, bytes
    (nccl-tests' size), algbw_gbps, busbw_gbps. ``ranks``: the rank count (an int, or a dict
    group -> int; communicators it leaves out: :func:`ranks_from_records`); COMMUNICATION bytes
    of all-gather and co. need it."""
    ranks = _known_ranks(events, ranks)
    ev = events.filter(pl.col("kind").is_in(["communication", "hccl"]))
    if "data_type" not in ev.columns:  # event logs written before the column
        ev = ev.with_columns(pl.lit(None, pl.String).alias("data_type"))
    rows = []
    cols = ("kind", "name", "group", "data_type", "duration_ns", "bytes")
    for kind, name, group, dt, dur, b in ev.select(cols).iter_rows():
        op = op_of(name)
        n = _ranks_for(ranks, group)
        nbytes: int | None = None if op in NO_BYTES or not b else int(b)
        if kind == "communication" and nbytes is not None and op in TIMES_RANKS:
            nbytes = nbytes * n if n else None
        good = nbytes is not None and dur is not None and dur > 0
        alg = nbytes / dur if good else None  # type: ignore[operator]
        f = bus_factor(op, n)
        bus = alg * f if alg is not None and f is not None else None
        if alg is not None and not math.isfinite(alg):
            alg = bus = None
        rows.append((group, op, name, kind, dt, n, dur, nbytes, alg, bus))
    return pl.DataFrame(
        rows,
        schema={
            "group": pl.String,
            "op": pl.String,
            "name": pl.String,
            "from": pl.String,
            "data_type": pl.String,
            "ranks": pl.UInt32,
            "duration_ns": pl.Int64,
            "bytes": pl.UInt64,
            "algbw_gbps": pl.Float64,
            "busbw_gbps": pl.Float64,
        },
        orient="row",
    )


def _source(per: pl.DataFrame) -> str:
    """COMMUNICATION records when there are any, else HCCL (both describe the same collectives)."""
    return "communication" if (per["from"] == "communication").any() else "hccl"


def by_size(events: pl.DataFrame, ranks: Any = None) -> pl.DataFrame:
    """nccl-tests' table: per (communicator, op, data type (COMMUNICATION records; null from HCCL
    records), message-size bucket in powers of two) the count,
    device time (median, p10, p90) and algbw / busbw (median, p10, p90), with HCCL's own
    bandWidth (median) beside it when HCCL records are present (BY_SIZE_SCHEMA)."""
    per = per_collective(events, ranks)
    if not per.height:
        return pl.DataFrame(schema=BY_SIZE_SCHEMA)
    per = per.with_columns(pl.col("bytes").map_elements(size_bucket, return_dtype=pl.UInt64).alias("bucket"))
    src = _source(per)
    main = per.filter(pl.col("from") == src)
    q = lambda c, p: pl.col(c).quantile(p, "linear")  # noqa: E731
    out = main.group_by("group", "op", "data_type", "bucket").agg(
        pl.col("ranks").first(),
        pl.len().cast(pl.UInt64).alias("num_calls"),
        pl.col("duration_ns").median().cast(pl.Float64).alias("med_ns"),
        q("duration_ns", 0.1).cast(pl.Float64).alias("p10_ns"),
        q("duration_ns", 0.9).cast(pl.Float64).alias("p90_ns"),
        pl.col("algbw_gbps").median().alias("algbw_gbps"),
        q("algbw_gbps", 0.1).alias("algbw_p10_gbps"),
        q("algbw_gbps", 0.9).alias("algbw_p90_gbps"),
        pl.col("busbw_gbps").median().alias("busbw_gbps"),
        q("busbw_gbps", 0.1).alias("busbw_p10_gbps"),
        q("busbw_gbps", 0.9).alias("busbw_p90_gbps"),
    )
    hccl = (
        per.filter(pl.col("from") == "hccl")
        .group_by("group", "op", "bucket")
        .agg(pl.col("algbw_gbps").median().alias("hccl_bw_gbps"))
    )
    # HCCL records carry no data type: its bandwidth sits beside every type of the bucket.
    out = out.join(hccl, on=["group", "op", "bucket"], how="left", nulls_equal=True)
    out = out.rename({"bucket": "bytes"}).with_columns(pl.lit(src).alias("from"))
    out = out.select(list(BY_SIZE_SCHEMA)).cast(BY_SIZE_SCHEMA)  # type: ignore[arg-type]
    return out.sort("group", "op", "data_type", "bytes", nulls_last=True)


def per_op(events: pl.DataFrame, ranks: Any = None) -> pl.DataFrame:
    """Per (group, name, from): median algbw_gbps and busbw_gbps and the median nccl-tests
    bytes, the three columns snap.collectives() gains."""
    per = per_collective(events, ranks)
    return per.group_by("group", "name", "from").agg(
        pl.col("bytes").median().alias("nccl_bytes"),
        pl.col("algbw_gbps").median().alias("algbw_gbps"),
        pl.col("busbw_gbps").median().alias("busbw_gbps"),
    )


def note(events: pl.DataFrame) -> str | None:
    """One sentence when the data has no HCCL collective at all, else None."""
    if events.filter(pl.col("kind").is_in(["communication", "hccl"])).height:
        return None
    return NO_HCCL_NOTE


def format_gbps(x: float | None) -> str:
    """A bandwidth for reading: "—" when there is none."""
    return "—" if x is None or not math.isfinite(x) else f"{x:.2f}"


def run_by_size(run: Any) -> pl.DataFrame:
    """nccl-tests' table over every rank of a recorded run: each communicator's rank count is the
    number of ranks whose event logs have it (every rank's collectives counted once each)."""
    ev = run.device_events(("communication", "hccl"))
    if not ev.height:
        return pl.DataFrame(schema=BY_SIZE_SCHEMA)
    ranks = {g: int(n) for g, n in ev.group_by("group").agg(pl.struct("host", "rank").n_unique()).iter_rows()}
    return by_size(ev, ranks)
