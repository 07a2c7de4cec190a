"""Immutable snapshots of the latency histograms, as polars DataFrames and Parquet files."""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

import polars as pl

from . import _native, device
from .catalog import DOMAIN_NAMES, callback
from .columns import FILE_COLUMNS, QUANTILES, SUMMARY_COLUMNS, stat_columns
from .units import check_unit

# The histogram's constants (defined once, in rust/lens/src/core/hist.rs): exponential buckets
# at SCALE 7 (base 2^(2^-7)); bucket `index` i holds integer-ns values v with base^i < v <=
# base^(i+1) (OpenTelemetry's convention; Prometheus native index = i + 1), for
# MIN_INDEX..=MAX_INDEX, i.e. 1 ns .. RANGE_MAX_NS = 2^42 ns; 0 ns in a zero bucket; larger values
# counted as overflow in no bucket. bucket_bounds(i) -> (lower, upper) in ns.
SCALE: int = _native.SCALE
MIN_INDEX: int = _native.MIN_INDEX
MAX_INDEX: int = _native.MAX_INDEX
RANGE_MAX_NS: int = _native.RANGE_MAX_NS
MAX_RELATIVE_ERROR: float = _native.MAX_RELATIVE_ERROR
bucket_bounds = _native.bucket_bounds
bucket_index = _native.bucket_index

FORMAT = "mspti-lens-snapshot"
# Version 2: the exponential buckets above and an exact integer sum of squares. Version 1 (the
# log-linear buckets before it) cannot be re-bucketed exactly and is refused with a sentence.
FORMAT_VERSION = 2
LOADABLE_VERSIONS = (2,)
# name -> meaning of every native counter (defined once, in rust/lens/src/core/counters.rs).
COUNTERS: dict[str, str] = dict(_native.COUNTERS)
#: Readings of one moment of one process, taken when its window closed: calls open then, and its
#: per-thread shards. Windows of one session keep the latest reading when merged; readings of
#: different sessions (other processes, ranks) add. Every other counter counts what happened in
#: its window, so windows add.
MOMENT_COUNTERS = ("in_flight", "threads")


def _short(domain: int, cbid: int) -> str:
    c = callback(domain, cbid)
    return c.short if c else f"CBID_{cbid}"


class Snapshot:
    """One window of latency histograms, merged over every thread. Immutable.

    - :meth:`summary`: one row per (domain, callback, function) with the columns of nsys
      ``cuda_api_sum`` / msprof-analyze ``CannApiSum`` plus tail percentiles, in ns.
    - :meth:`histogram`: one row per non-empty bucket.
    - :meth:`diff`: before/after comparison with another snapshot.
    - :meth:`save` / :meth:`load`: a Parquet file that round-trips exactly.
    """

    def __init__(self, native: _native.NativeSnapshot, meta: dict[str, Any]):
        self._native = native
        self.meta = dict(meta)
        if "moments" not in self.meta:
            # This window's own reading of MOMENT_COUNTERS, under its session's id (a fresh one
            # for a snapshot of unknown origin): {source: [window_end, *values]}.
            got = dict(native.counters())
            source = str(self.meta.get("source") or uuid.uuid4().hex)
            when = float(self.meta.get("window_end", 0.0))
            self.meta["moments"] = {source: [when, *(int(got.get(c, 0)) for c in MOMENT_COUNTERS)]}
        self._summary: pl.DataFrame | None = None
        #: The session's timeline when the snapshot was taken (None: not kept).
        self._timeline: pl.DataFrame | None = None
        #: The slowest calls when loaded from a file or merged (None: the native's own).
        self._exemplars: dict[str, list] | None = None
        self.device: device.DeviceData | None = None  # activity data, set by the Session

    # -- facts ---------------------------------------------------------------------------------
    @property
    def simulated(self) -> bool:
        return bool(self.meta.get("simulated", False))

    @property
    def label(self) -> str:
        return str(self.meta.get("label", "unknown backend"))

    @property
    def counters(self) -> dict[str, int]:
        """What was not a clean pair, per window: one entry per name of :data:`COUNTERS`
        (``unmatched``, ``stack_full``, ``dropped``, ``abandoned``, ``orphaned``, ``bad_site``,
        ``toggled``: pairs discarded because their id or domain was enabled or disabled while the
        call was open; their meanings are its values); and now: ``in_flight`` (open calls), ``threads``
        (per-thread shards): :data:`MOMENT_COUNTERS`, the latest reading of each session added."""
        out = dict(self._native.counters())
        readings = list(self.meta["moments"].values())
        for i, c in enumerate(MOMENT_COUNTERS, 1):
            out[c] = sum(int(r[i]) for r in readings)
        return out

    @property
    def unmatched(self) -> int:
        return self.counters["unmatched"]

    @property
    def in_flight(self) -> int:
        return self.counters["in_flight"]

    @property
    def duration_s(self) -> float:
        return float(self.meta.get("window_end", 0.0)) - float(self.meta.get("window_start", 0.0))

    @property
    def total_calls(self) -> int:
        return int(self.summary()["num_calls"].sum()) if len(self) else 0

    def __len__(self) -> int:
        return len(self._native)

    # -- frames --------------------------------------------------------------------------------
    def summary(self) -> pl.DataFrame:
        """One row per (domain, callback, function), sorted by total time, all times in ns.

        Quantiles are nearest-rank (numpy ``quantile(..., method="inverted_cdf")``): the
        ceil(q·n)-th smallest call, the rank computed in integers (q to 9 decimals, so q = 0.55 of
        100 calls is the 55th), estimated by its bucket (within MAX_RELATIVE_ERROR, exact below 129
        ns, exact max). ``beyond_range`` counts calls longer than RANGE_MAX_NS (2^42 ns): they are in
        num_calls, total, min, max and stddev exactly, but in no bucket, so a quantile that falls
        among them is null, never invented; a non-zero ``beyond_range`` flags the row."""
        if self._summary is None:
            s = self._native.stats(list(QUANTILES))
            n = len(s["name"])
            df = pl.DataFrame(
                {
                    "domain": [DOMAIN_NAMES.get(d, str(d)) for d in s["domain"]],
                    "callback": [_short(d, c) for d, c in zip(s["domain"], s["cbid"])],
                    "name": s["name"],
                    **stat_columns(s),
                    "beyond_range": pl.Series(s["overflow"], dtype=pl.UInt64),
                    "source": ["simulated" if self.simulated else "libmspti"] * n,
                },
                schema_overrides={"domain": pl.String, "callback": pl.String, "name": pl.String},
            )
            total = df["total_ns"].sum() if n else 0
            df = df.with_columns(
                (pl.col("total_ns").cast(pl.Float64) * 100.0 / max(total, 1)).alias("time_pct")
            )
            self._summary = df.select(SUMMARY_COLUMNS).sort(
                ["total_ns", "domain", "name"], descending=[True, False, False]
            )
        return self._summary

    def histogram(self) -> pl.DataFrame:
        """One row per non-empty bucket: domain, callback, name, index (Int32: the OpenTelemetry
        index at scale SCALE; null for the zero bucket and the overflow row), lower_ns (Float64,
        exclusive), upper_ns (Float64, inclusive), count (UInt64), source. The zero bucket holds
        0 ns exactly (lower_ns = upper_ns = 0); the overflow row counts values beyond RANGE_MAX_NS
        (lower_ns = 2^42, upper_ns = inf)."""
        b = self._native.buckets()
        s = self._native.stats([])
        keys = b["key"]
        return pl.DataFrame(
            {
                "domain": [DOMAIN_NAMES.get(s["domain"][k], str(s["domain"][k])) for k in keys],
                "callback": [_short(s["domain"][k], s["cbid"][k]) for k in keys],
                "name": [s["name"][k] for k in keys],
                "index": pl.Series(b["index"], dtype=pl.Int32),
                "lower_ns": pl.Series(b["lower"], dtype=pl.Float64),
                "upper_ns": pl.Series(b["upper"], dtype=pl.Float64),
                "count": pl.Series(b["count"], dtype=pl.UInt64),
                "source": ["simulated" if self.simulated else "libmspti"] * len(keys),
            },
            schema_overrides={
                "domain": pl.String,
                "callback": pl.String,
                "name": pl.String,
                "source": pl.String,
            },
        )

    def slowest(self, per_api: int | None = None) -> pl.DataFrame:
        """The slowest calls kept per (thread, API) in this window (8 each), slowest first: domain,
        callback, name, thread_id, start (wall clock), start_unix_ns, duration_ns, source."""
        from .slowest import slowest_frame

        return slowest_frame(self, per_api)

    def timeline(self) -> pl.DataFrame:
        """Latency over time (``Session(interval=...)``): per interval and API, num_calls, p50_ns,
        p99_ns; empty when the session keeps no timeline."""
        from .timeline import empty_timeline

        return self._timeline if self._timeline is not None else empty_timeline()

    def quantile(self, q: float, name: str | None = None) -> pl.DataFrame:
        """Any quantile per function (ns, nearest rank as in :meth:`summary`): columns domain,
        name, value (null when it falls among calls beyond the histogram's range)."""
        s = self._native.stats([float(q)])
        df = pl.DataFrame(
            {
                "domain": [DOMAIN_NAMES.get(d, str(d)) for d in s["domain"]],
                "name": s["name"],
                "value": pl.Series(s["q0"], dtype=pl.UInt64),
            },
            schema_overrides={"domain": pl.String, "name": pl.String},
        )
        return df.filter(pl.col("name") == name) if name else df

    def diff(self, other: Snapshot) -> pl.DataFrame:
        """Compare ``self`` (before) with ``other`` (after): per function, calls and avg/med/p99 of
        each side and the change in percent. Functions seen on one side only have nulls."""
        if not isinstance(other, Snapshot):
            raise TypeError(f"diff() takes a Snapshot, not {type(other).__name__}")
        cols = ["num_calls", "avg_ns", "med_ns", "p99_ns", "max_ns"]
        a = self.summary().select(["domain", "name", *cols])
        b = other.summary().select(["domain", "name", *cols])
        j = a.join(b, on=["domain", "name"], how="full", suffix="_after", coalesce=True)
        j = j.rename({c: f"{c}_before" for c in cols})
        for c in ("avg_ns", "med_ns", "p99_ns"):
            j = j.with_columns(
                (
                    (pl.col(f"{c}_after").cast(pl.Float64) - pl.col(f"{c}_before").cast(pl.Float64))
                    * 100.0
                    / pl.col(f"{c}_before").cast(pl.Float64)
                ).alias(f"{c.removesuffix('_ns')}_change_pct")
            )
        return j.sort("domain", "name")

    def merge(self, other: Snapshot) -> Snapshot:
        """The exact sum of two snapshots (threads, runs, ranks)."""
        if not isinstance(other, Snapshot):
            raise TypeError(f"merge() takes a Snapshot, not {type(other).__name__}")
        meta = dict(self.meta)
        meta["simulated"] = self.simulated or other.simulated
        meta["label"] = self.label if self.label == other.label else f"{self.label} + {other.label}"
        meta["window_start"] = min(self.meta.get("window_start", 0), other.meta.get("window_start", 0))
        meta["window_end"] = max(self.meta.get("window_end", 0), other.meta.get("window_end", 0))
        moments = dict(self.meta["moments"])
        for source, reading in other.meta["moments"].items():
            if source not in moments or reading[0] >= moments[source][0]:
                moments[source] = reading  # a session's later window holds its latest moment
        meta["moments"] = moments
        from . import slowest, timeline  # the slowest calls and the timeline

        out = Snapshot(self._native.merge(other._native), meta)
        out.device = device.merge(self, other)  # device histograms add, device events concatenate
        out._exemplars = slowest.merged(self, other)
        out._timeline = timeline.merged(self._timeline, other._timeline)
        return out

    @classmethod
    def from_histogram(cls, frame: pl.DataFrame) -> Snapshot:
        """The Snapshot of a ``histogram()`` frame (perhaps filtered): one key per function name,
        with the frame's buckets (the overflow row, upper_ns = inf, counts as overflow), so its
        quantiles follow the summary's rule. Sums and extremes are not in a frame: use it for
        counts and quantiles only."""
        names = frame["name"].unique(maintain_order=True).to_list()
        key = {n: i for i, n in enumerate(names)}
        k = len(names)
        over = frame.filter(pl.col("upper_ns").is_infinite()).group_by("name").agg(pl.col("count").sum())
        overflow = [0] * k
        for n, c in over.iter_rows():
            overflow[key[n]] = int(c)
        rows = frame.filter(pl.col("upper_ns").is_finite())
        native = _native.NativeSnapshot.from_state(
            [0] * k,
            [0] * k,
            names,
            [0] * k,
            [0] * k,
            [None] * k,
            [None] * k,
            overflow,
            [key[n] for n in rows["name"].to_list()],
            rows["index"].to_list(),
            rows["count"].to_list(),
            {},
        )
        sim = "source" in frame.columns and bool((frame["source"] == "simulated").any())
        return cls(native, {"simulated": sim, "label": "histogram frame"})

    # -- files ---------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """Write a Parquet file: one row per key with its exact state and non-empty buckets, and the
        metadata (backend, simulated, clock, window, counters) in the file's key-value metadata."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        k = self._native.key_state()
        b = self._native.buckets()
        n = len(k["name"])
        indices: list[list[int]] = [[] for _ in range(n)]
        counts: list[list[int]] = [[] for _ in range(n)]
        for key, index, count in zip(b["key"], b["index"], b["count"]):
            if index is not None:  # the zero bucket and overflow have their own columns
                indices[key].append(index)
                counts[key].append(count)
        mask = (1 << 64) - 1
        table = pa.table(
            {
                "domain": pa.array(k["domain"], pa.uint32()),
                "cbid": pa.array(k["cbid"], pa.uint32()),
                "name": pa.array(k["name"], pa.string()),
                "count": pa.array(k["count"], pa.uint64()),
                "sum": pa.array(k["sum"], pa.uint64()),
                # The exact u128 sum of squares as two u64 halves (Parquet has no 128-bit integer).
                "sum_sq_hi": pa.array([v >> 64 for v in k["sum_sq"]], pa.uint64()),
                "sum_sq_lo": pa.array([v & mask for v in k["sum_sq"]], pa.uint64()),
                "min": pa.array(k["min"], pa.uint64()),
                "max": pa.array(k["max"], pa.uint64()),
                "zero": pa.array(k["zero"], pa.uint64()),
                "overflow": pa.array(k["overflow"], pa.uint64()),
                "index": pa.array(indices, pa.list_(pa.int32())),
                "counts": pa.array(counts, pa.list_(pa.uint64())),
            }
        )
        meta = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "scale": SCALE,
            "meta": self.meta,
            "counters": self.counters,
        }
        device.save_into(self, meta)
        from . import slowest, timeline  # the slowest calls and the timeline

        slowest.save_into(self, meta)
        timeline.save_into(self, meta)
        table = table.replace_schema_metadata({"mspti_lens": json.dumps(meta)})
        pq.write_table(table, os.fspath(path))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Snapshot:
        """Read a file written by :meth:`save`. Anything else raises ValueError (or
        FileNotFoundError), never a wrong snapshot."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        p = os.fspath(path)
        if not os.path.exists(p):
            raise FileNotFoundError(f"no snapshot file at {p}")
        if not os.path.isfile(p):
            raise ValueError(f"{p} is not a file; Snapshot.load() reads one file written by Snapshot.save()")
        try:
            table = pq.read_table(p)
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
        snap = cls(native, meta)
        from . import slowest, timeline  # the slowest calls and the timeline

        try:
            device.load_from(snap, head)
            slowest.load_from(snap, head)
            timeline.load_from(snap, head)
        except ValueError as e:
            raise ValueError(f"{p}: {e}") from None
        return snap

    # -- device time (built in device.py) ----------------------------------------------
    def kernels(self) -> pl.DataFrame:
        """Device duration per kernel name (KERNEL records), ns."""
        return device.frame(self, "kernels")

    def launches(self) -> pl.DataFrame:
        """Per launch function: API time, queue delay (ENTER to kernel start), kernel time."""
        return device.frame(self, "launches")

    def ranges(self) -> pl.DataFrame:
        """MSTX ranges per (domain, message), host and device side, and marks counted."""
        return device.frame(self, "ranges")

    def collectives(self) -> pl.DataFrame:
        """Device collective time and bandwidth per (communicator, op)."""
        return device.frame(self, "collectives")

    def memcpy(self) -> pl.DataFrame:
        """MEMCPY per direction (and MEMSET, MEMORY) with bytes."""
        return device.frame(self, "memcpy")

    def device_events(self) -> pl.DataFrame:
        """One row per KERNEL / COMMUNICATION / HCCL record, by start (device.DEVICE_EVENTS_SCHEMA)."""
        return device.device_events(self)

    # -- display -------------------------------------------------------------------------------
    def _title(self) -> str:
        from .notebook.tables import count_of

        n = self.total_calls
        extra = []
        if self.unmatched:
            extra.append(f"{self.unmatched} unmatched")
        if self.in_flight:
            extra.append(f"{self.in_flight} in flight")
        if self.device is not None:  # device records lost or still missing (device.LOSS_COUNTERS)
            extra.extend(f"{v:,} {k.replace('_', ' ')}" for k, v in self.device.losses().items())
        tail = f" ({', '.join(extra)})" if extra else ""
        return (
            f"mspti-lens snapshot · {self.label} · {count_of(n, 'call')} in {count_of(len(self), 'API')} · "
            f"{self.duration_s:.2f} s{tail}"
        )

    #: The summary columns :meth:`table` shows, in this order.
    TABLE_COLUMNS = ("domain", "name", "num_calls", "time_pct", "total_ns", "avg_ns", "min_ns", "med_ns",
                     "p90_ns", "p99_ns", "p999_ns", "max_ns", "stddev_ns")  # fmt: skip

    def table(self, unit: str | None = None, top: int | None = None):
        """The summary for reading (a :class:`mspti_lens.notebook.tables.Table`; its ``frame`` is
        the polars frame, in ns): durations with units (per value, or all in ``unit``), the
        first ``top`` APIs by total time with a caption saying when rows are cut."""
        from .notebook.tables import Table, count_of

        if unit is not None:
            check_unit(unit)
        if top is not None and (not isinstance(top, int) or isinstance(top, bool) or top < 1):
            raise ValueError(f"top must be a positive int (rows to show), not {top!r}")
        df = self.summary().select(self.TABLE_COLUMNS).rename({"time_pct": "time_%"})
        n = len(df)
        if top is not None and top < n:
            return Table(df.head(top), f"{top} of {count_of(n, 'API')} by total time", top=0, unit=unit)
        return Table(df, top=0, unit=unit)

    def __repr__(self) -> str:
        if not len(self):
            return self._title() + "\n(no calls recorded)"
        return self._title() + "\n" + self.table().text()

    def _repr_html_(self) -> str:
        import html

        banner = SIMULATED_BANNER_HTML if self.simulated else ""
        body = self.table().html() if len(self) else "<p>(no calls recorded)</p>"
        return f"{banner}<div><b>{html.escape(self._title())}</b></div>{body}"


#: The banner above every rendering of simulated data (tables, panel views).
SIMULATED_BANNER_HTML = (
    '<div style="background:#fff3cd;color:#664d03;padding:2px 6px;font-weight:bold">'
    "SIMULATED DATA: produced by the mspti-lens simulator, not measured on an NPU</div>"
)


def frame_html(df: pl.DataFrame, caption: str = "") -> str:
    """A DataFrame as an HTML table for notebooks, every row, each column in its unit
    (:class:`mspti_lens.notebook.tables.Table`)."""
    from .notebook.tables import Table

    return Table(df, top=0).html(caption)


def make_meta(backend_label: str, simulated: bool, clock: str, window_start: float, **extra: Any) -> dict:
    return {
        "label": backend_label,
        "simulated": simulated,
        "clock": clock,
        "window_start": window_start,
        "window_end": time.time(),
        **extra,
    }


# -- many snapshots at once (runs) ---------------------------------------------------
# The rows Snapshot.save writes, merged over many files without building a Snapshot per file.
STATE_KEY = ("domain", "cbid", "name")
_HALF = 1 << 32


def merge_saved(rows: pl.LazyFrame, by: tuple[str, ...] = ()) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """Merge the rows of many saved snapshots exactly, per ``by`` columns and key: the per-key state
    (counts, sums, zero and overflow counts added; min of mins, max of maxes; the u128 sum of
    squares added in u64 limbs) and the buckets (counts added per index). Lazy: memory grows with
    keys x buckets, not with the files. :func:`snapshot_from_state` makes a Snapshot of it."""
    keys = [*by, *STATE_KEY]
    lo = pl.col("sum_sq_lo")
    state = rows.group_by(keys).agg(
        pl.col("count").sum(),
        pl.col("sum").sum(),
        # Exact: the high halves add in u64; the low halves are split in 32-bit parts whose sums
        # fit in u64 for up to 2^32 rows. snapshot_from_state joins the three.
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


def snapshot_from_state(
    state: pl.DataFrame, buckets: pl.DataFrame, meta: dict[str, Any], counters: dict[str, int]
) -> Snapshot:
    """A Snapshot of per-key state and buckets in the shape :func:`merge_saved` returns."""
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
    native = _native.NativeSnapshot.from_state(
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
    return Snapshot(native, meta)
