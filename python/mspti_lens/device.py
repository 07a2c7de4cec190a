"""Device time beside host time (issue 11): the frames of a snapshot's activity data, built from
the native device snapshot (histograms stay native; no Python object per record)."""

from __future__ import annotations

from typing import Any

import polars as pl

from . import _native

KINDS: tuple[str, ...] = tuple(_native.activity_kinds())
# The summary's vocabulary (Snapshot.summary()): the same statistics under the same names.
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


def check_kinds(kinds: Any) -> list[str]:
    """Activity kinds by name; an unknown one raises ValueError naming the valid ones."""
    if isinstance(kinds, str):
        kinds = [kinds]
    out = []
    for k in kinds:
        if not isinstance(k, str) or k.strip().lower() not in KINDS:
            raise ValueError(f"unknown activity kind {k!r}; valid kinds are {', '.join(KINDS)}")
        out.append(k.strip().lower())
    return out


class DeviceData:
    """One window of activity aggregates (immutable)."""

    def __init__(self, native: Any):
        from .snapshot import QUANTILES, stat_columns  # defined once there

        self._native = native
        s = native.stats(list(QUANTILES))
        self._rows = pl.DataFrame(
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
        self.info = dict(native.info())
        self.counters = dict(native.counters())

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

    def launches(self, source: str) -> pl.DataFrame:
        """Per launch function and join: API time, queue delay, kernel time (nsys
        cuda_kern_exec_sum)."""
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
        return out.with_columns(pl.lit(source).alias("source")).sort(["name", "join"])

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

    def collectives(self, source: str) -> pl.DataFrame:
        """Per (communicator, op, record source): device duration and bandwidth (GB/s)."""
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
        return out.with_columns(pl.lit(source).alias("source")).sort(["group", "op", "from"])

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

    # -- files ---------------------------------------------------------------------------------
    def state(self) -> dict:
        s = dict(self._native.state())
        s["marks"] = [list(m) for m in s["marks"]]
        return s

    @classmethod
    def from_state(cls, s: dict) -> DeviceData:
        try:
            marks = [(str(a), str(b), bool(c), int(d)) for a, b, c, d in s.get("marks", [])]
            native = _native.NativeDeviceSnapshot.from_state(
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
            )
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise ValueError(f"malformed device data: {e}") from None
        return cls(native)


EMPTY_NOTE = (
    "no device activity in this snapshot: pass Session(activity=[...]) with kinds among " + ", ".join(KINDS)
)


def _source(snap: Any) -> str:
    return "simulated" if snap.simulated else "libmspti"


def _dev(snap: Any) -> DeviceData | None:
    return getattr(snap, "device", None)


def frame(snap: Any, name: str) -> pl.DataFrame:
    """Snapshot.<name>() for the device frames; an empty frame (with the right columns) when the
    snapshot has no activity."""
    d = _dev(snap)
    if d is None:
        d = DeviceData(
            _native.NativeDeviceSnapshot.from_state(
                [], [], [], [], [], [], [], [], [], [], [], [], [], [], {}, "off", "", []
            )
        )
    return getattr(d, name)(_source(snap))


def histogram(snap: Any) -> pl.DataFrame:
    """The device histograms' buckets of a snapshot (empty without activity)."""
    return frame(snap, "histogram")


def save_into(snap: Any, head: dict) -> None:
    d = _dev(snap)
    if d is not None:
        head["device"] = d.state()


def load_from(snap: Any, head: dict) -> None:
    s = head.get("device")
    if s is not None:
        if not isinstance(s, dict):
            raise ValueError("the snapshot file's device data is not an object")
        snap.device = DeviceData.from_state(s)
