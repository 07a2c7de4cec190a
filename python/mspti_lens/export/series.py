"""The one conversion every exporter shares: a snapshot's frames -> one exponential histogram per API.

mspti-lens keeps durations in the bucket family of OpenTelemetry exponential histograms and
Prometheus native histograms at scale 7 (OTel index i holds integer-ns values v with
base^i < v <= base^(i+1), base = 2^(2^-7)); zero-ns calls are in a zero bucket, and calls beyond
the range are counted as ``overflow`` (in count/sum/min/max, in no bucket). So every format here
is written from the very buckets mspti-lens holds: nothing is re-bucketed, nothing estimated.

The only place a format forces a choice is overflow: formats whose count must equal the sum of
their buckets (OTLP, HdrHistogram) put those calls at the exact max (an upper bound the calls do
not exceed, and exact when there is one). Prometheus keeps them in the count and in the classic
``+Inf`` bucket only.
"""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass, field
from typing import Any

import polars as pl

# The bucket family, defined once in the native core and re-exported by mspti_lens.snapshot.
from ..snapshot import RANGE_MAX_NS, SCALE, bucket_bounds, bucket_index


def upper_bound(index: int) -> float:
    """The inclusive upper bound (ns) of bucket ``index``."""
    return bucket_bounds(index)[1]


def index_beyond_range(v: int) -> int:
    """The OTel index at :data:`SCALE` a value beyond the histogram's range would have (the
    formats that need every call in a bucket put overflow calls there, see the module's note):
    the i with 2^i < v^(2^SCALE) <= 2^(i+1), in exact integer arithmetic. In range, use
    ``bucket_index``."""
    if int(v) <= RANGE_MAX_NS:
        raise ValueError(f"{v} ns is within the range: its bucket is bucket_index({v})")
    return (int(v) ** (1 << SCALE) - 1).bit_length() - 1


@dataclass(frozen=True)
class Series:
    """One API's histogram in one snapshot: exact counts in mspti-lens's own buckets."""

    domain: str
    callback: str
    api: str
    count: int
    sum_ns: int
    min_ns: int
    max_ns: int
    zero_count: int
    overflow: int
    #: OTel index at SCALE -> count, ascending, non-empty buckets only.
    buckets: dict[int, int] = field(default_factory=dict)

    def buckets_with_overflow_at_max(self) -> dict[int, int]:
        """The buckets with the overflow calls put in the exact max's bucket (for formats whose
        count must equal the sum of their buckets)."""
        if not self.overflow:
            return dict(self.buckets)
        b = dict(self.buckets)
        i = (
            index_beyond_range(self.max_ns)
            if self.max_ns > RANGE_MAX_NS
            else bucket_index(max(self.max_ns, 1))
        )
        assert i is not None  # bucket_index is None only for 0 ns and beyond the range
        b[i] = b.get(i, 0) + self.overflow
        return dict(sorted(b.items()))


@dataclass(frozen=True)
class Resource:
    """Who produced the data: one writer per (rank, host), as OTel's single-writer rule asks."""

    rank: str
    host: str
    simulated: bool
    start_unix_ns: int
    end_unix_ns: int


def resource_of(snap: Any, rank: int | str | None = None, host: str | None = None) -> Resource:
    """The rank and host of a snapshot: explicit arguments, else the snapshot's metadata, else the
    launcher's RANK variable (0 without one) and this machine's host name."""
    meta = dict(getattr(snap, "meta", {}) or {})
    if rank is None:
        rank = meta.get("rank", os.environ.get("RANK", "0"))
    if host is None:
        host = meta.get("host") or socket.gethostname()
    start = float(meta.get("window_start", 0.0) or 0.0)
    end = float(meta.get("window_end", start) or start)
    return Resource(
        rank=str(rank),
        host=str(host),
        simulated=bool(meta.get("simulated", False)),
        start_unix_ns=int(start * 1e9),
        end_unix_ns=int(end * 1e9),
    )


HISTOGRAM_COLUMNS = ("domain", "callback", "name", "index", "lower_ns", "upper_ns", "count")


def series_of(snap: Any) -> list[Series]:
    """Every API of a snapshot as a :class:`Series`, in summary order (by total time).

    Reads only ``snap.histogram()`` (the v2 layout: OTel ``index``; null index with upper 0 for
    the zero bucket, with upper +inf for overflow) and ``snap.summary()`` (exact count, sum,
    min, max)."""
    hist = snap.histogram()
    missing = [c for c in HISTOGRAM_COLUMNS if c not in hist.columns]
    if missing:
        raise ValueError(
            f"this snapshot's histogram() lacks {missing}: the exporters read the exponential layout "
            "(histogram v2: an OTel 'index' column at scale 7); re-record it with this mspti-lens"
        )
    summary = snap.summary()
    per_key: dict[tuple[str, str, str], tuple[dict[int, int], int, int]] = {}
    for d, cb, name, idx, _lo, up, c in hist.select(HISTOGRAM_COLUMNS).iter_rows():
        b, zero, over = per_key.get((d, cb, name), ({}, 0, 0))
        if idx is not None:
            b[int(idx)] = b.get(int(idx), 0) + int(c)
        elif up is not None and math.isinf(up):
            over += int(c)
        else:
            zero += int(c)
        per_key[(d, cb, name)] = (b, zero, over)
    out = []
    for row in summary.select(
        "domain", "callback", "name", "num_calls", "total_ns", "min_ns", "max_ns"
    ).rows():
        d, cb, name, n, total, mn, mx = row
        b, zero, over = per_key.get((d, cb, name), ({}, 0, 0))
        out.append(
            Series(
                domain=d,
                callback=cb,
                api=name,
                count=int(n),
                sum_ns=int(total),
                min_ns=int(mn or 0),
                max_ns=int(mx or 0),
                zero_count=zero,
                overflow=over,
                buckets=dict(sorted(b.items())),
            )
        )
    return out


def check_format(fmt: str, valid: tuple[str, ...], what: str) -> str:
    if fmt not in valid:
        raise ValueError(f"unknown {what} {fmt!r}; valid choices are {', '.join(valid)}")
    return fmt


def frame_or_none(snap: Any, method: str) -> pl.DataFrame | None:
    """``snap.<method>()`` when the snapshot has it (frames other issues add), else None."""
    f = getattr(snap, method, None)
    if f is None:
        return None
    df = f()
    return df if isinstance(df, pl.DataFrame) else None


@dataclass(frozen=True)
class BandwidthPoint:
    """One (communicator, op, data type, message-size bucket)'s median nccl-tests bandwidths (GB/s)
    in one snapshot (collectives.by_size; a null bandwidth is left out of the exports)."""

    group: str
    op: str
    data_type: str
    bytes: int
    num_calls: int
    algbw_gbps: float | None
    busbw_gbps: float | None


def bandwidth_of(snap: Any) -> list[BandwidthPoint]:
    """The snapshot's collectives by size (none without device activity or HCCL records), with
    every rank count it can know (collectives.ranks_of: the world group's size; the records give
    the others), so busbw is exported for every op whose rank count is known."""
    from ..collectives import ranks_of

    f = getattr(snap, "collectives", None)
    if f is None:
        return []
    try:
        df = f(by="size", ranks=ranks_of(snap) or None)
    except TypeError:  # a stand-in snapshot without the by= form
        return []
    if not isinstance(df, pl.DataFrame) or not df.height:
        return []
    out = []
    for r in df.iter_rows(named=True):
        if r["bytes"] is None:
            continue
        out.append(
            BandwidthPoint(
                group=str(r["group"] or ""),
                op=str(r["op"]),
                data_type=str(r.get("data_type") or ""),
                bytes=int(r["bytes"]),
                num_calls=int(r["num_calls"]),
                algbw_gbps=r["algbw_gbps"],
                busbw_gbps=r["busbw_gbps"],
            )
        )
    return out
