"""Immutable snapshots of the latency histograms, as polars DataFrames: the data model. Its file is
:mod:`.snapshot_file` (Snapshot.save and Snapshot.load call it); how it reads (title, table, text
and HTML) is the :class:`Rendering` the display code registers (:mod:`.notebook.snapshot_repr`,
loaded with the package), so the model imports nothing of the notebook."""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import IO, Any

import polars as pl

from . import _native, activity, snapshot_file
from .activity import ActivityData
from .catalog import DOMAIN_NAMES, callback
from .columns import QUANTILES, SUMMARY_COLUMNS, stat_columns

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

# name -> meaning of every native counter (defined once, in rust/lens/src/core/counters.rs).
COUNTERS: dict[str, str] = dict(_native.COUNTERS)
#: Readings of one moment of one process, taken when its window closed: calls open then, and its
#: per-thread shards. Windows of one session keep the latest reading when merged; readings of
#: different sessions (other processes, ranks) add. Every other counter counts what happened in
#: its window, so windows add.
MOMENT_COUNTERS = ("in_flight", "threads")


@dataclass(frozen=True)
class Rendering:
    """How a snapshot reads: its title line, its table (``table(snap, unit, top)``), its text and
    its HTML. Registered by the code that draws snapshots, which knows the model, not the reverse."""

    title: Callable[[Snapshot], str]
    table: Callable[[Snapshot, str | None, int | None], Any]
    text: Callable[[Snapshot], str]
    html: Callable[[Snapshot], str]


_rendering: Rendering | None = None


def register_rendering(rendering: Rendering) -> None:
    """Make ``rendering`` how every Snapshot reads (the last one registered wins)."""
    global _rendering
    _rendering = rendering


def _rendered() -> Rendering:
    if _rendering is None:  # mspti_lens/__init__.py loads the notebook's; only a broken install lacks it
        raise RuntimeError("no Snapshot rendering registered: import mspti_lens.notebook.snapshot_repr")
    return _rendering


def _short(domain: int, cbid: int) -> str:
    c = callback(domain, cbid)
    return c.short if c else f"CBID_{cbid}"


#: The facts the model reads, by their key in the metadata dict (``Snapshot.meta``, the snapshot
#: file's) -> their field in :class:`WindowInfo`.
_FIELDS = {
    "label": "label",
    "simulated": "simulated",
    "clock": "clock",
    "window_start": "start",
    "window_end": "end",
    "library": "library",
    "fidelity": "fidelity",
    "source": "source",
    "join": "join",
    "clock_bridge": "clock_bridge",
    "moments": "moments",
}


@dataclass(frozen=True)
class WindowInfo:
    """What a snapshot's window is and where it came from: one frozen value, built with
    everything when the snapshot is made. A fact a window does not have is None (so the dict form
    holds exactly the facts given)."""

    label: str | None = None  #: the backend's label
    simulated: bool | None = None
    clock: str | None = None  #: the clock the calls were timed with
    start: float | None = None  #: the window's start, wall clock (s since 1970)
    end: float | None = None
    library: str | None = None  #: the library's path
    fidelity: str | None = None
    source: str | None = None  #: the session's id: merged windows keep each session's latest moments
    join: str | None = None  #: how launches were joined to kernels (windows with activity)
    clock_bridge: str | None = None  #: how activity timestamps were put on the wall clock
    #: Each session's reading of MOMENT_COUNTERS: {source: (window_end, *values)}.
    moments: Mapping[str, tuple[float, ...]] | None = None
    #: Every other fact, in the order given (a run's writer adds host, rank, window, ...).
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, meta: Mapping[str, Any]) -> WindowInfo:
        """The value of a metadata dict (keys of the snapshot file's ``meta``)."""
        typed: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in meta.items():
            if key in _FIELDS and value is not None:
                typed[_FIELDS[key]] = value
            else:  # a null fact stays in the dict form as given
                extra[key] = value
        moments = typed.get("moments")
        if isinstance(moments, Mapping) and all(isinstance(r, (list, tuple)) for r in moments.values()):
            typed["moments"] = MappingProxyType({s: tuple(r) for s, r in moments.items()})
        return cls(**typed, extra=MappingProxyType(extra))

    def as_dict(self) -> dict[str, Any]:
        """The metadata dict: the facts present, then ``extra``'s, then the moments."""
        out = {key: getattr(self, f) for key, f in _FIELDS.items() if key != "moments"}
        out = {k: v for k, v in out.items() if v is not None}
        out.update(self.extra)
        if isinstance(self.moments, Mapping):
            out["moments"] = {s: list(r) for s, r in self.moments.items()}
        elif self.moments is not None:  # as a file gave it: counters say what is wrong with it
            out["moments"] = self.moments
        return out

    def with_facts(self, facts: Mapping[str, Any]) -> WindowInfo:
        """A new value with ``facts`` (metadata keys) added or changed."""
        return WindowInfo.of({**self.as_dict(), **facts})

    @property
    def duration_s(self) -> float:
        return float(self.end or 0.0) - float(self.start or 0.0)


_READ_ONLY = (
    "a snapshot's meta is read-only (its window is one frozen value): snap.with_meta(key=value) "
    "returns a new snapshot with the fact added or changed"
)


class _ReadOnlyMeta(dict):
    """``Snapshot.meta``: the snapshot's WindowInfo in its dict form, read like any dict (and
    written to JSON as one); every write raises TypeError saying what to do instead."""

    def _refused(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(_READ_ONLY)

    __setitem__ = __delitem__ = update = setdefault = pop = popitem = clear = _refused
    __ior__ = _refused

    def __reduce__(self) -> tuple[Any, ...]:  # a copy (copy, pickle) is a plain dict, the caller's
        return (dict, (dict(self),))


class Snapshot:
    """One window of latency histograms, merged over every thread. Immutable.

    - :meth:`summary`: one row per (domain, callback, function) with the columns of nsys
      ``cuda_api_sum`` / msprof-analyze ``CannApiSum`` plus tail percentiles, in ns.
    - :meth:`histogram`: one row per non-empty bucket.
    - :meth:`diff`: before/after comparison with another snapshot.
    - :meth:`save` / :meth:`load`: a Parquet file that round-trips exactly.
    - :attr:`window`: what window it is and where it came from (:class:`WindowInfo`, frozen;
      :attr:`meta` is its dict form).
    """

    def __init__(
        self,
        native: _native.NativeSnapshot,
        meta: Mapping[str, Any] | WindowInfo,
        *,
        activity: ActivityData | None = None,
        timeline: pl.DataFrame | None = None,
        slowest: dict[str, list] | None = None,
    ):
        self._native = native
        self._window = self._with_moments(meta if isinstance(meta, WindowInfo) else WindowInfo.of(meta))
        self._summary: pl.DataFrame | None = None
        #: The session's timeline when the snapshot was taken (None: not kept).
        self._timeline = timeline
        #: The slowest calls when loaded from a file or merged (None: the native's own).
        self._slowest = slowest
        self._activity = activity

    def _with_moments(self, window: WindowInfo) -> WindowInfo:
        """``window`` with this window's own reading of MOMENT_COUNTERS when it holds none, under
        its session's id (a fresh one for a snapshot of unknown origin)."""
        if window.moments is not None:
            return window
        got = dict(self._native.counters())
        source = str(window.source or uuid.uuid4().hex)
        reading = (float(window.end or 0.0), *(int(got.get(c, 0)) for c in MOMENT_COUNTERS))
        return dataclasses.replace(window, moments=MappingProxyType({source: reading}))

    @property
    def window(self) -> WindowInfo:
        """What window this is and where it came from (frozen; :attr:`meta` is its dict form)."""
        return self._window

    @property
    def meta(self) -> Mapping[str, Any]:
        """The window's facts as a read-only dict (:meth:`WindowInfo.as_dict`), the form the
        snapshot file keeps. Writing to it raises TypeError: :meth:`with_meta` returns a new
        snapshot with the facts added."""
        return _ReadOnlyMeta(self._window.as_dict())

    @meta.setter
    def meta(self, meta: Mapping[str, Any]) -> None:
        raise AttributeError(_READ_ONLY)

    @property
    def activity(self) -> ActivityData | None:
        """The activity data of the window (the Activity API's records: kernels, launches, MSTX
        ranges, collectives, memory), when the session collected any (given when the snapshot is
        made: ``Snapshot(native, meta, activity=...)``)."""
        return self._activity

    @activity.setter
    def activity(self, data: ActivityData | None) -> None:
        raise AttributeError(
            "a snapshot's activity data is given when it is made: Snapshot(native, meta, activity=...)"
        )

    #: The old name of :attr:`activity`.
    device = activity

    def with_meta(self, **facts: Any) -> Snapshot:
        """A new snapshot of the same histograms, activity data, timeline and slowest calls, its
        metadata with ``facts`` added (or changed)."""
        return self._with_window(self._window.with_facts(facts))

    def _with_window(self, meta: Mapping[str, Any] | WindowInfo) -> Snapshot:
        """A new snapshot of the same histograms, activity data, timeline and slowest calls, with
        ``meta`` as its whole metadata (a compacted segment's, built from both halves')."""
        return Snapshot(
            self._native, meta, activity=self._activity, timeline=self._timeline, slowest=self._slowest
        )

    # -- facts ---------------------------------------------------------------------------------
    @property
    def simulated(self) -> bool:
        return bool(self._window.simulated or False)

    @property
    def label(self) -> str:
        return str(self._window.label if self._window.label is not None else "unknown backend")

    @property
    def counters(self) -> dict[str, int]:
        """What was not a clean pair, per window: one entry per name of :data:`COUNTERS`
        (``unmatched``, ``stack_full``, ``dropped``, ``abandoned``, ``orphaned``, ``bad_site``,
        ``toggled``: pairs discarded because their id or domain was enabled or disabled while the
        call was open; their meanings are its values); and now: ``in_flight`` (open calls), ``threads``
        (per-thread shards): :data:`MOMENT_COUNTERS`, the latest reading of each session added."""
        out = dict(self._native.counters())
        readings = list((self._window.moments or {}).values())
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
        return self._window.duration_s

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
        """Compare ``self`` (before) with ``other`` (after): per function, calls, total and
        avg/med/p99 of each side, the change in percent, and ``total_change_ns``, the time it
        gained (a side without the function counts 0). One-sided functions have nulls."""
        if not isinstance(other, Snapshot):
            raise TypeError(f"diff() takes a Snapshot, not {type(other).__name__}")
        cols = ["num_calls", "total_ns", "avg_ns", "med_ns", "p99_ns", "max_ns"]
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
        total = [pl.col(f"total_ns_{s}").cast(pl.Int64).fill_null(0) for s in ("after", "before")]
        j = j.with_columns((total[0] - total[1]).alias("total_change_ns"))
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

        return Snapshot(
            self._native.merge(other._native),
            meta,
            activity=activity.merge(self, other),  # activity histograms add, device events concatenate
            timeline=timeline.merged(self._timeline, other._timeline),
            slowest=slowest.merged(self, other),
        )

    def with_calls_of(self, cut: _native.NativeCut) -> Snapshot:
        """This window with the calls of ``cut`` added: calls its session cut out of this window
        earlier (``Session.cut_calls``: a flight recorder's fine windows, runs/flight_recorder.py).
        Histograms and counters add and the slowest calls merge (natively); the metadata (times,
        moments, self cost), activity data and timeline stay this window's, which the session kept
        whole."""
        if self._slowest is not None:  # calls held in Python (a loaded file): not a session's window
            raise ValueError("with_calls_of() adds to a session's own window, not to a loaded one")
        merged = self._native.with_cut(cut)
        return Snapshot(merged, self._window, activity=self._activity, timeline=self._timeline)

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
    def save(self, path: str | os.PathLike | IO[bytes], *, event_log: bool = True) -> None:
        """Write a Parquet file: one row per key with its exact state and non-empty buckets, and the
        metadata (backend, simulated, clock, window, counters) in the file's key-value metadata.
        ``event_log=False`` leaves the device event log out (a recorded window's events have their
        own file, a fraction of the size of the log in the metadata)."""
        snapshot_file.save(self, path, event_log)

    @classmethod
    def load(cls, path: str | os.PathLike | IO[bytes]) -> Snapshot:
        """Read a file written by :meth:`save`. Anything else raises ValueError (or
        FileNotFoundError), never a wrong snapshot."""
        return snapshot_file.load(path, cls)

    # -- device time, from the activity data (built in activity.py) -----------------------
    def kernels(self) -> pl.DataFrame:
        """Device duration per kernel name (KERNEL records), ns."""
        return activity.frame(self, "kernels")

    def launches(self) -> pl.DataFrame:
        """Per launch function: API time, queue delay (ENTER to kernel start), kernel time."""
        return activity.frame(self, "launches")

    def ranges(self) -> pl.DataFrame:
        """MSTX ranges per (domain, message), host and device side, and marks counted."""
        return activity.frame(self, "ranges")

    def collectives(self, by: str | None = None, ranks: Any = None) -> pl.DataFrame:
        """Device collective time and bandwidth per (communicator, op); ``by="size"``: nccl-tests'
        table per message-size bucket (mspti_lens.collectives; ``ranks``: the rank count)."""
        return activity.collectives(self, by, ranks)

    def memcpy(self) -> pl.DataFrame:
        """MEMCPY per direction (and MEMSET, MEMORY) with bytes."""
        return activity.frame(self, "memcpy")

    def device_events(self) -> pl.DataFrame:
        """One row per KERNEL / COMMUNICATION / HCCL record, by start (activity.DEVICE_EVENTS_SCHEMA)."""
        return activity.device_events(self)

    # -- display -------------------------------------------------------------------------------
    def _title(self) -> str:
        return _rendered().title(self)

    def table(self, unit: str | None = None, top: int | None = None):
        """The summary for reading (a :class:`mspti_lens.notebook.tables.Table`; its ``frame`` is
        the polars frame, in ns): durations with units (per value, or all in ``unit``), the
        first ``top`` APIs by total time with a caption saying when rows are cut."""
        return _rendered().table(self, unit, top)

    def __repr__(self) -> str:
        return _rendered().text(self)

    def _repr_html_(self) -> str:
        return _rendered().html(self)


def make_meta(backend_label: str, simulated: bool, clock: str, window_start: float, **extra: Any) -> dict:
    return {
        "label": backend_label,
        "simulated": simulated,
        "clock": clock,
        "window_start": window_start,
        "window_end": time.time(),
        **extra,
    }
