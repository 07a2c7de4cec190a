"""A snapshot's activity data: what the MSPTI Activity API recorded (device time beside host time:
kernels, launches, MSTX ranges, collectives, memory), as frames built from the native activity
snapshot (histograms stay native; no Python object per record).

The words: "activity" is the Activity API and what is collected through it (kinds, buffers, this
data); "device" is the NPU itself (device ids, device time, the device event log of work it ran)."""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from . import _native
from . import collectives as collectives_model
from .catalog import suggest
from .columns import QUANTILES, STAT_COLUMNS, stat_columns

KINDS: tuple[str, ...] = tuple(_native.activity_kinds())
EVENT_KINDS: tuple[str, ...] = tuple(_native.device_event_kinds())
# Snapshot.device_events(): one row per KERNEL / COMMUNICATION / HCCL record, by start_ns. `group`,
# `sequence` (the collective's 0-based instance of its (group, name) since the session started)
# and `bytes` are null for kernels; HCCL records carry no correlation id (0) and no byte count
# (bandwidth x duration); `data_type` is a COMMUNICATION record's dataType by name (fp16, ...;
# unknown:N for a value the ABI does not name), null otherwise; times are the records'
# CLOCK_REALTIME-scale ns.
DEVICE_EVENTS_SCHEMA: dict[str, pl.DataType] = {
    "kind": pl.String(),
    "name": pl.String(),
    "group": pl.String(),
    "device_id": pl.UInt32(),
    "stream_id": pl.UInt32(),
    "correlation_id": pl.UInt64(),
    "sequence": pl.UInt64(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "duration_ns": pl.Int64(),
    "bytes": pl.UInt64(),
    "data_type": pl.String(),
    "source": pl.String(),
}
# The events' limit per window (Session(device_events=...)): 0 turns the log off.
DEFAULT_DEVICE_EVENTS: int = _native.DEVICE_EVENTS_DEFAULT
MAX_DEVICE_EVENTS: int = _native.DEVICE_EVENTS_MAX
# Session(activity_buffers=(bytes per buffer, buffers at the start[, memory cap])): the defaults and
# their reasons are in rust/lens/src/activity/config.rs. The pool grows on demand up to the cap.
DEFAULT_ACTIVITY_BUFFERS: tuple[int, int] = tuple(_native.ACTIVITY_BUFFERS_DEFAULT)  # type: ignore[assignment]
ACTIVITY_POOL_CAP: int = _native.ACTIVITY_POOL_CAP
# The longest a settle (snapshot, stop, close, flush_activity) waits for device records known to
# be missing (Session.flush_activity says on what evidence).
SETTLE_TIMEOUT_S: float = _native.ACTIVITY_SETTLE_TIMEOUT_S
# Session(join_sample=...): the fraction of time the RUNTIME_API launch join records launches, by
# default (its reason: rust/lens/src/activity/config.rs); 1.0 joins every launch.
JOIN_SAMPLE: float = _native.ACTIVITY_JOIN_SAMPLE_DEFAULT
# Snapshot.launches()' rank_error_95: the Dvoretzky-Kiefer-Wolfowitz bound at this confidence.
RANK_ERROR_CONFIDENCE = 0.95
# Every activity counter, declared once in rust/lens/src/activity/counters.rs: name -> meaning; how
# windows of it combine (sum: windows add; moment: each collector's latest reading, collectors add;
# peak: each collector's highest, collectors add; flag: the highest); and which count a loss.
COUNTERS: dict[str, str] = {name: meaning for name, _, _, meaning in _native.ACTIVITY_COUNTERS}
COMBINE: dict[str, str] = {name: combine for name, combine, _, _ in _native.ACTIVITY_COUNTERS}
LOSS_COUNTERS: tuple[str, ...] = tuple(name for name, _, loss, _ in _native.ACTIVITY_COUNTERS if loss)


def check_kinds(kinds: Any) -> list[str]:
    """Activity kinds by name; an unknown one raises ValueError in one line: the near kind
    ("did you mean") when there is one, and the valid ones."""
    if isinstance(kinds, str):
        kinds = [kinds]
    out = []
    for k in kinds:
        if not isinstance(k, str) or k.strip().lower() not in KINDS:
            hint = suggest(k, KINDS) if isinstance(k, str) else ""
            raise ValueError(f"unknown activity kind {k!r}{hint} (valid kinds: {', '.join(KINDS)})")
        out.append(k.strip().lower())
    return out


class ActivityData:
    """One window of activity aggregates (immutable)."""

    def __init__(self, native: Any):
        self._native = native
        self._rows_made: pl.DataFrame | None = None
        self.info = dict(native.info())
        self.counters = dict(native.counters())

    @property
    def _rows(self) -> pl.DataFrame:
        """The aggregates as one frame, made on first use: a window that is only merged or saved
        (a flight recorder's fine window, every second) never pays for it."""
        if self._rows_made is None:
            s = self._native.stats(list(QUANTILES))
            self._rows_made = pl.DataFrame(
                {
                    "table": s["table"],
                    "key0": s["key0"],
                    "key1": s["key1"],
                    "key2": s["key2"],
                    "metric": s["metric"],
                    **stat_columns(s),
                    "bytes": pl.Series(s["bytes"], dtype=pl.UInt64),
                },
                schema_overrides={c: pl.String for c in ("table", "key0", "key1", "key2", "metric")},
            )
        return self._rows_made

    def _table(self, table: str, metric: str | None = None) -> pl.DataFrame:
        df = self._rows.filter(pl.col("table") == table)
        return df.filter(pl.col("metric") == metric) if metric else df

    def kernels(self, source: str) -> pl.DataFrame:
        df = self._table("kernels", "duration")
        total = df["total_ns"].sum() if len(df) else 0
        return df.select(
            pl.col("key0").alias("name"),
            pl.col("key1").alias("type"),
            *STAT_COLUMNS,
            (pl.col("total_ns").cast(pl.Float64) * 100.0 / max(total, 1)).alias("time_pct"),
            pl.lit(source).alias("source"),
        ).sort(["total_ns", "name"], descending=[True, False])

    def sampled_fraction(self) -> float:
        """The measured fraction of the time the launch join recorded launches
        (``join_sampled_ns / join_active_ns``; 1.0 when exact or never on)."""
        active = self.counters.get("join_active_ns", 0)
        sampled = self.counters.get("join_sampled_ns", 0)
        return min(1.0, sampled / active) if active and sampled < active else 1.0

    def launches(self, source: str) -> pl.DataFrame:
        """Per launch function and join: API time, queue delay, kernel time (nsys
        cuda_kern_exec_sum). Under a sampled join (``Session(join_sample=...)`` below 1),
        ``sampled_fraction`` is the measured share of time whose launches were joined, and
        ``rank_error_95`` each row's Dvoretzky-Kiefer-Wolfowitz bound: with 95 % confidence every
        quantile of its queue and kernel columns is within that fraction of ranks of the quantile
        over all its launches, sqrt(ln(2 / 0.05) / (2 n)) for n joined launches, assuming the
        sampled launches represent the others (windows at random offsets); 0 where exact."""
        df = self._table("launches")
        parts = []
        for metric in ("api", "queue", "kernel"):
            m = df.filter(pl.col("metric") == metric).select(
                pl.col("key0").alias("name"),
                pl.col("key1").alias("join"),
                pl.col("num_calls").alias(f"{metric}_num"),
                *[
                    pl.col(c).alias(f"{metric}_{c}")
                    for c in ("avg_ns", "med_ns", "p99_ns", "max_ns", "total_ns")
                ],
            )
            parts.append(m)
        out = parts[0]
        for p in parts[1:]:
            out = out.join(p, on=["name", "join"], how="full", coalesce=True)
        fraction = self.sampled_fraction()
        n = pl.col("kernel_num").cast(pl.Float64)
        bound = math.log(2.0 / (1.0 - RANK_ERROR_CONFIDENCE)) / 2.0
        sampled = (pl.col("join") == "runtime_api") & pl.lit(fraction < 1.0)
        return out.with_columns(
            pl.lit(fraction, dtype=pl.Float64).alias("sampled_fraction"),
            pl.when(~sampled)
            .then(pl.lit(0.0))
            .when(n > 0)
            .then((pl.lit(bound) / n).sqrt())
            .otherwise(pl.lit(None, dtype=pl.Float64))
            .alias("rank_error_95"),
            pl.lit(source).alias("source"),
        ).sort(["name", "join"])

    def ranges(self, source: str) -> pl.DataFrame:
        df = self._table("ranges", "duration").select(
            pl.col("key0").alias("domain"),
            pl.col("key1").alias("name"),
            pl.col("key2").alias("side"),
            *STAT_COLUMNS,
        )
        marks = self._native.marks()
        if marks:
            m = pl.DataFrame(
                {
                    "domain": [x[0] for x in marks],
                    "name": [x[1] for x in marks],
                    "side": ["mark+device" if x[2] else "mark" for x in marks],
                    "num_calls": pl.Series([x[3] for x in marks], dtype=pl.UInt64),
                }
            )
            df = pl.concat([df, m], how="diagonal")
        return df.with_columns(pl.lit(source).alias("source")).sort(["domain", "name", "side"])

    def collectives(self, source: str, ranks: Any = None) -> pl.DataFrame:
        """Per (communicator, op, record source): device duration and bandwidth (GB/s), with
        nccl-tests' median algbw_gbps, busbw_gbps and bytes (``nccl_bytes``) from the event log
        (``ranks``: the communicators' rank count, see collectives.per_collective)."""
        d = self._table("collectives", "duration").select(
            pl.col("key0").alias("group"),
            pl.col("key1").alias("op"),
            pl.col("key2").alias("from"),
            *STAT_COLUMNS,
            "bytes",
        )
        bw = self._table("collectives", "bandwidth").select(
            pl.col("key0").alias("group"),
            pl.col("key1").alias("op"),
            pl.col("key2").alias("from"),
            (pl.col("med_ns").cast(pl.Float64) / 1000.0).alias("bw_med_gbps"),
            (pl.col("p90_ns").cast(pl.Float64) / 1000.0).alias("bw_p90_gbps"),
            (pl.col("min_ns").cast(pl.Float64) / 1000.0).alias("bw_min_gbps"),
        )
        out = d.join(bw, on=["group", "op", "from"], how="left")
        # nccl-tests' algbw and busbw from the event log (null without events or known ranks).
        nccl = collectives_model.per_op(self.device_events(source), ranks).select(
            "group", pl.col("name").alias("op"), "from", "algbw_gbps", "busbw_gbps", "nccl_bytes"
        )
        out = out.join(nccl, on=["group", "op", "from"], how="left", nulls_equal=True)
        return out.with_columns(pl.lit(source).alias("source")).sort(["group", "op", "from"])

    def collectives_by_size(self, source: str, ranks: Any = None) -> pl.DataFrame:
        """nccl-tests' table per (communicator, op, size bucket): collectives.by_size."""
        out = collectives_model.by_size(self.device_events(source), ranks)
        return out.with_columns(pl.lit(source).alias("source"))

    def memcpy(self, source: str) -> pl.DataFrame:
        d = self._table("memcpy", "duration").select(
            pl.col("key0").alias("kind"), pl.col("key1").alias("direction"), *STAT_COLUMNS, "bytes"
        )
        b = self._table("memcpy", "bytes").select(
            pl.col("key0").alias("kind"),
            pl.col("key1").alias("direction"),
            pl.col("med_ns").alias("bytes_med"),
            pl.col("max_ns").alias("bytes_max"),
        )
        out = d.join(b, on=["kind", "direction"], how="left")
        return out.with_columns(pl.lit(source).alias("source")).sort(["kind", "direction"])

    def histogram(self, source: str) -> pl.DataFrame:
        """Non-empty buckets of every device histogram: table, key0-2, metric, lower_ns, upper_ns,
        count, source (bucket bounds as Snapshot.histogram() gives them)."""
        b = self._native.buckets()
        idx = b["row"]
        r = self._rows
        return pl.DataFrame(
            {
                **{c: [r[c][i] for i in idx] for c in ("table", "key0", "key1", "key2", "metric")},
                "lower_ns": pl.Series(b["lower"], dtype=pl.Float64),
                "upper_ns": pl.Series(b["upper"], dtype=pl.Float64),
                "count": pl.Series(b["count"], dtype=pl.UInt64),
                "source": [source] * len(idx),
            },
            schema_overrides={c: pl.String for c in ("table", "key0", "key1", "key2", "metric", "source")},
        )

    def device_events(self, source: str) -> pl.DataFrame:
        """The window's device event log (DEVICE_EVENTS_SCHEMA), by start_ns."""
        return events_frame(self._native.events(), source)

    def losses(self) -> dict[str, int]:
        """The non-zero counters of :data:`LOSS_COUNTERS` (what summaries show), in their order."""
        return {k: v for k, v in self.counters.items() if v and k in LOSS_COUNTERS}

    def merge(self, other: ActivityData) -> ActivityData:
        """The exact sum: histograms and marks add, events concatenate, and each counter combines
        as :data:`COMBINE` declares it (a moment is each collector's latest reading, not a sum of
        windows)."""
        return ActivityData(self._native.merge(other._native))

    # -- files ---------------------------------------------------------------------------------
    def state(self) -> dict:
        s = dict(self._native.state())
        s["marks"] = [list(m) for m in s["marks"]]
        return s

    @classmethod
    def from_state(cls, s: dict) -> ActivityData:
        try:
            marks = [(str(a), str(b), bool(c), int(d)) for a, b, c, d in s.get("marks", [])]
            native = _native.NativeActivitySnapshot.from_state(
                s["table"],
                s["key0"],
                s["key1"],
                s["key2"],
                s["metric"],
                s["bytes"],
                s["sum"],
                s["sum_sq"],
                s["min"],
                s["max"],
                s["overflow"],
                s["buckets"],
                s["counts"],
                marks,
                {str(k): int(v) for k, v in dict(s.get("counters") or {}).items()},
                str(s.get("join", "")),
                str(s.get("clock_bridge", "")),
                [str(k) for k in s.get("kinds", [])],
                _event_columns(s.get("events")),
                _readings(s.get("readings")),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise ValueError(f"malformed activity data: {e}") from None
        return cls(native)


def check_join_sample(f: Any) -> float:
    """``join_sample`` as a float in (0, 1]; anything else raises ValueError in one line."""
    if isinstance(f, (int, float)) and not isinstance(f, bool) and 0.0 < f <= 1.0:
        return float(f)
    raise ValueError(
        "join_sample is the fraction of time the launch join records launches: a number in (0, 1] "
        f"(1.0 joins every launch), not {f!r}"
    )


def check_device_events(n: Any) -> int:
    """Session(device_events=n): the cap per window, an int in [0, MAX_DEVICE_EVENTS]."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_DEVICE_EVENTS:
        raise ValueError(
            f"device_events is the number of device events kept per window: an int from 0 (no event "
            f"log) to {MAX_DEVICE_EVENTS}, default {DEFAULT_DEVICE_EVENTS}; not {n!r}"
        )
    return n


def events_frame(cols: dict, source: str) -> pl.DataFrame:
    """A frame of native event columns (start_ns ... as u64) with DEVICE_EVENTS_SCHEMA."""
    native = dict(cols)
    df = pl.DataFrame(
        {
            "kind": pl.Series(native.get("kind", []), dtype=pl.String),
            "name": pl.Series(native.get("name", []), dtype=pl.String),
            "group": pl.Series(native.get("group", []), dtype=pl.String),
            "device_id": pl.Series(native.get("device_id", []), dtype=pl.UInt32),
            "stream_id": pl.Series(native.get("stream_id", []), dtype=pl.UInt32),
            "correlation_id": pl.Series(native.get("correlation_id", []), dtype=pl.UInt64),
            "sequence": pl.Series(native.get("sequence", []), dtype=pl.UInt64),
            "start_ns": pl.Series(native.get("start_ns", []), dtype=pl.UInt64).cast(pl.Int64),
            "end_ns": pl.Series(native.get("end_ns", []), dtype=pl.UInt64).cast(pl.Int64),
            "bytes": pl.Series(native.get("bytes", []), dtype=pl.UInt64),
            "data_type": pl.Series(
                native.get("data_type", [None] * len(native.get("kind", []))), dtype=pl.String
            ),
        }
    )
    df = df.with_columns(
        (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"), pl.lit(source).alias("source")
    )
    return df.select(list(DEVICE_EVENTS_SCHEMA)).cast(DEVICE_EVENTS_SCHEMA)  # type: ignore[arg-type]


def _event_columns(e: Any) -> dict | None:
    """A snapshot file's events (None in files written before the event log)."""
    if e is None:
        return None
    if not isinstance(e, dict):
        raise TypeError("device events are not an object")
    keys = ("kind", "name", "group", "device_id", "stream_id", "correlation_id", "sequence", "start_ns")
    out = {k: list(e[k]) for k in (*keys, "end_ns", "bytes")}
    if "data_type" in e:  # files written before the column have none
        out["data_type"] = list(e["data_type"])
    return out


def _readings(r: Any) -> list[tuple[int, int, dict[str, int]]] | None:
    """A snapshot file's per-collector readings (None in files written before them)."""
    if r is None:
        return None
    return [(int(c), int(w), {str(k): int(v) for k, v in dict(values).items()}) for c, w, values in r]


def merge(a: Any, b: Any) -> ActivityData | None:
    """Snapshot.merge's activity part: either side may have none."""
    da, db = _data_of(a), _data_of(b)
    if da is None or db is None:
        return da if db is None else db
    return da.merge(db)


def device_events(snap: Any) -> pl.DataFrame:
    """Snapshot.device_events(): the event log (an empty frame with the schema without activity)."""
    source = "simulated" if snap.simulated else "measured"  # the contract's words for this frame
    d = _data_of(snap)
    return events_frame({}, source) if d is None else d.device_events(source)


EMPTY_NOTE = (
    "no device activity in this snapshot: pass Session(activity=[...]) with kinds among " + ", ".join(KINDS)
)


def _source(snap: Any) -> str:
    return "simulated" if snap.simulated else "libmspti"


def _data_of(snap: Any) -> ActivityData | None:
    return getattr(snap, "activity", None)


def frame(snap: Any, name: str, **kw: Any) -> pl.DataFrame:
    """Snapshot.<name>() for the device frames; an empty frame (with the right columns) when the
    snapshot has no activity."""
    d = _data_of(snap)
    if d is None:
        d = ActivityData(
            _native.NativeActivitySnapshot.from_state(
                [], [], [], [], [], [], [], [], [], [], [], [], [], [], {}, "off", "", []
            )
        )
    return getattr(d, name)(_source(snap), **kw)


def collectives(snap: Any, by: str | None = None, ranks: Any = None) -> pl.DataFrame:
    """Snapshot.collectives(): per (communicator, op, source), or with ``by="size"`` nccl-tests'
    table per message-size bucket. The rank counts the snapshot knows besides its records (the
    launcher's world size) complete ``ranks``."""
    ranks = collectives_model.snapshot_ranks(snap, ranks)
    if by is None:
        return frame(snap, "collectives", ranks=ranks)
    if by != "size":
        raise ValueError(f"collectives(by=...) takes 'size' or None, not {by!r}")
    return frame(snap, "collectives_by_size", ranks=ranks)


def histogram(snap: Any) -> pl.DataFrame:
    """The device histograms' buckets of a snapshot (empty without activity)."""
    return frame(snap, "histogram")


def save_into(snap: Any, head: dict) -> None:
    d = _data_of(snap)
    if d is not None:
        head["device"] = d.state()


def read(head: dict) -> ActivityData | None:
    """The activity data a snapshot file's metadata holds (None: the file keeps none)."""
    s = head.get("device")  # the file's key keeps its first name, so every file reads
    if s is None:
        return None
    if not isinstance(s, dict):
        raise ValueError("the snapshot file's activity data is not an object")
    return ActivityData.from_state(s)


#: The old name of :class:`ActivityData`.
DeviceData = ActivityData
