"""A recorded run: every rank's windows, read lazily and merged exactly.

``mspti_lens.open_run(DIR)`` reads the files ``DIR/host=H/rank=R/window-*.parquet`` that
``python -m mspti_lens record`` writes (on a local disk, a shared file system, or any URL polars
reads). Nothing holds ranks x calls: the per-key rows of every window are merged by a lazy polars
query into one row per key and bucket, so memory grows with keys and buckets. A file that cannot
be read (corrupt, or not a mspti-lens window) is skipped with a warning naming it. A window's host
and rank are those in its own metadata; the folder names must agree (a window in a renamed folder
is skipped, named) and are never parsed as data (``host=7`` is the host named "7").
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import polars as pl

from ..catalog import DOMAIN_NAMES
from ..snapshot import COUNTERS, MOMENT_COUNTERS, Snapshot
from ..snapshot_file import FORMAT, LOADABLE_VERSIONS, merge_saved, native_from_state
from . import runfiles
from .compact import covered_paths
from .control import CONTROL_DIR, RunControl, read_processes
from .stragglers import (  # noqa: F401 - latest_starters is re-exported
    INSTANCE_COLUMNS,
    fold_instances,
    instance_votes,
    latest_starters,
    tally,
    window_votes,
)
from .writer import ARRIVALS_GLOB, EVENTS_GLOB, WINDOW_GLOB, arrival_schema

# How a run shows itself in a notebook: the functions notebook/run_view.py registers when the
# package loads (the model imports no display code).
_views: dict[str, Callable[..., Any]] = {}


def register_view(**functions: Callable[..., Any]) -> None:
    """Make these (run_html, run_widget, show_live; watch, from mspti_lens.watch) how every Run
    shows itself and is watched."""
    _views.update(functions)


def _view(name: str) -> Callable[..., Any]:
    try:
        return _views[name]
    except KeyError:  # mspti_lens/__init__.py loads the notebook's; only a broken install lacks it
        raise RuntimeError("no run view registered: import mspti_lens.notebook.run_view") from None


# Snapshot.counters: the native counters (added over windows) and MOMENT_COUNTERS (the last
# window's reading of each process, added over processes).
FILE_COUNTERS = (*COUNTERS, *MOMENT_COUNTERS)
HCCL_DOMAIN = next(d for d, n in DOMAIN_NAMES.items() if n.lower() == "hccl")
# complete: every process of the rank wrote its final window; running: not, and its last window is
# at most stale_after old (a slow rank still writing while the others have finished is running);
# incomplete: no window for longer than stale_after while at least half of the ranks are complete
# (the job ended without it: killed, crashed); stale: no window for longer than stale_after, the
# others not done (hung, or a loaded machine); missing: expected from the job's world size, never seen.
# paused: alive, profiling off (a run recorded with `record --paused` or stopped by `control stop`).
STATUSES = ("complete", "running", "paused", "incomplete", "stale", "missing")


# The device event columns collective_events() reads (Snapshot.device_events' contract).
INSTANCE_EVENT_SCHEMA = {
    "host": pl.String,
    "rank": pl.Int64,
    "kind": pl.String,
    "group": pl.String,
    "name": pl.String,
    "sequence": pl.UInt64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
}


# How many times a reader lists a run again when a file it listed is gone (merged by compaction
# since: the segment replacing it was written first, and merged files stay compact.KEEP_MERGED_S,
# so one more listing finds it; more only when it was merged on meanwhile).
RELIST_TRIES = 5


class EmptyRunError(ValueError):
    """The run has no readable window (yet)."""


class RunWarning(UserWarning):
    """A file of a run was skipped (corrupt, half-written by something else, or not a window)."""


def _is_url(root: str) -> bool:
    return "://" in root and not root.startswith("file://")


def list_windows(root: str, glob: str = WINDOW_GLOB) -> list[str]:
    """Every window file of a run (or with ``glob`` EVENTS_GLOB, every device event file), local
    or at a URL (listing a URL uses fsspec when installed, else polars' own glob)."""
    pattern = f"host=*/rank=*/{glob}"
    if _is_url(root):
        try:
            import fsspec  # type: ignore[import-not-found]  # optional: remote runs only
        except ImportError:
            found = (
                runfiles.scan_parquet([f"{root.rstrip('/')}/{pattern}"], include_file_paths="p")
                .select("p")
                .unique()
            )
            try:
                return sorted(found.collect()["p"].to_list())
            except (pl.exceptions.PolarsError, OSError):
                if glob == WINDOW_GLOB:
                    raise
                return []  # no event files: a run recorded without activity records
        fs, path = fsspec.core.url_to_fs(root)
        proto = root.split("://", 1)[0]
        return sorted(f"{proto}://{p}" for p in fs.glob(f"{path.rstrip('/')}/{pattern}"))
    p = Path(root.removeprefix("file://"))
    if not p.exists():
        raise FileNotFoundError(
            f"no run at {p} (record one with `python -m mspti_lens record --out {p} -- CMD`)"
        )
    if not p.is_dir():
        raise ValueError(f"{p} is not a directory; open_run() reads the directory `record --out` wrote")
    return runfiles.glob(p, pattern)  # no symlink followed, no dot-file, folders checked


def _read_head(path: str) -> dict[str, Any]:
    raw = runfiles.read_parquet_metadata(path).get("mspti_lens")
    head = json.loads(raw) if raw else None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise ValueError(f"not a mspti-lens window (no '{FORMAT}' metadata of a loadable version)")
    if head.get("version") not in LOADABLE_VERSIONS:
        loadable = ", ".join(str(v) for v in LOADABLE_VERSIONS)
        raise ValueError(f"a window of snapshot format version {head.get('version')}; this reads {loadable}")
    return head


FILE_SCHEMA = {
    "path": pl.String,
    "host": pl.String,
    "rank": pl.Int64,
    "pid": pl.Int64,
    "window": pl.Int64,
    "window_first": pl.Int64,
    "period": pl.Int64,
    "generation": pl.Int64,
    "final": pl.Boolean,
    # The window ended its on period (a stop, a `--for` running out, the process's exit).
    "period_end": pl.Boolean,
    "window_start": pl.Float64,
    "window_end": pl.Float64,
    "written": pl.Float64,
    "interval_s": pl.Float64,
    "world_size": pl.Int64,
    "simulated": pl.Boolean,
    "label": pl.String,
    "clock": pl.String,
    # HCCL calls' arrivals a full ring dropped in the window (runs/writer.py).
    "arrivals_dropped": pl.UInt64,
    # Device records (kernels; collectives are kept) compaction left out of this segment's log.
    "events_dropped": pl.UInt64,
    # Calls a stop could not put in its window (runs/writer.py): EXITs MSPTI delivered after the
    # disable returned, and callbacks a stop could not wait for.
    "late_exits": pl.UInt64,
    "stop_unsettled": pl.UInt64,
    **{c: pl.UInt64 for c in FILE_COUNTERS},
}


def folder_of(path: str) -> tuple[str, str] | None:
    """(host, rank) as the folders ``host=H/rank=R`` holding a run's file name them, as text."""
    parts = path.replace("\\", "/").split("/")
    if len(parts) >= 3 and parts[-3].startswith("host=") and parts[-2].startswith("rank="):
        return parts[-3].removeprefix("host="), parts[-2].removeprefix("rank=")
    return None


def _identity(path: str, meta: dict[str, Any]) -> tuple[str, int]:
    """A window's host and rank: its own metadata, checked against the folders it is in (they
    are names only: a renamed folder must not move a rank's data to another rank)."""
    host, rank = str(meta["host"]), int(meta["rank"])
    if not -(1 << 63) <= rank < 1 << 63:
        raise ValueError(f"its rank {rank} is not a 64-bit integer")
    folder = folder_of(path)
    if folder is not None and folder != (host, str(rank)):
        raise ValueError(
            f"it is in folder host={folder[0]}/rank={folder[1]} but is the window of host={host} "
            f"rank={rank} (was the folder renamed?); move it to host={host}/rank={rank}"
        )
    return host, rank


def _file_row(path: str) -> dict[str, Any] | Exception:
    """One window file's row of :meth:`Run.files`, from its footer, or why it is unreadable."""
    try:
        head = _read_head(path)
        m, counters = dict(head.get("meta") or {}), dict(head.get("counters") or {})
        host, rank = _identity(path, m)
        return {
            "path": path,
            "host": host,
            "rank": rank,
            "pid": int(m.get("pid") or 0),
            "window": int(m.get("window") or 0),
            "window_first": int(m.get("window_first") or m.get("window") or 0),
            "period": int(m.get("period") or 1),
            "generation": int(m.get("generation") or 0),
            "final": bool(m.get("final")),
            "period_end": bool(m.get("period_end") or m.get("final")),
            "window_start": float(m.get("window_start") or 0.0),
            "window_end": float(m.get("window_end") or 0.0),
            "written": float(m.get("written") or m.get("window_end") or 0.0),
            "interval_s": float(m.get("interval_s") or 0.0),
            "world_size": m.get("world_size"),
            "simulated": bool(m.get("simulated")),
            "label": str(m.get("label", "unknown backend")),
            "clock": str(m.get("clock", "")),
            "arrivals_dropped": int(m.get("arrivals_dropped") or 0),
            "events_dropped": int(m.get("events_dropped_in_compaction") or 0),
            "late_exits": int(m.get("late_exits") or 0),
            "stop_unsettled": int(m.get("stop_unsettled") or 0),
            **{c: int(counters.get(c, 0)) for c in FILE_COUNTERS},
            "_periods": m.get("periods")
            or [[int(m.get("period") or 1), m.get("window_start"), m.get("window_end"), m.get("enable")]],
            # The command generations of its windows (a merged segment's may be several).
            "_generations": [int(g) for g in m.get("generations") or [m.get("generation") or 0]],
        }
    except Exception as e:  # noqa: BLE001 - any unreadable file is skipped, named
        return e


class Run:
    """Every rank of a recorded job. Frames are computed on demand from the files on disk;
    :meth:`refresh` (or :meth:`follow`) picks up windows written since."""

    def __init__(self, root: str | os.PathLike, *, stale_after: float | None = None):
        self.root = os.fspath(root)
        self.stale_after = stale_after
        # A skipped file is a RunWarning; a view that says them itself (the run panel) sets
        # this False and reads ``skipped``.
        self.warn = True
        self.skipped: dict[str, str] = {}
        self._rows: dict[str, dict[str, Any]] = {}
        self._event_paths: list[str] = []
        self._arrival_paths: list[str] = []
        self.refresh()
        if not self._rows and not self.skipped and not _is_url(self.root):
            _check_run_root(Path(self.root.removeprefix("file://")))

    # -- files ---------------------------------------------------------------------------------
    def refresh(self) -> Run:
        """Re-list the run's files (new windows, new ranks, segments compaction merged, event
        files). A window file never changes once written, so only new files are read."""
        for _ in range(RELIST_TRIES):
            if not self._relist():
                break
        rows = [{k: v for k, v in r.items() if not k.startswith("_")} for r in self._rows.values()]
        self._files = pl.DataFrame(rows, schema=FILE_SCHEMA).sort("path")
        self._snapshot: Snapshot | None = None
        self._current_snapshot: Snapshot | None = None
        self._current_paths: dict[str, str] | None = None  # _current_files' choice, per listing
        self._collectives: pl.DataFrame | None = None
        self._arrivals: pl.DataFrame | None = None
        return self

    def _relist(self) -> bool:
        """List the run's files once and read the new windows' footers; True when a listed
        window was gone by then (merged into a segment this listing may not have seen)."""
        listed = list_windows(self.root)
        # Older windows are merged into segments as a rank runs (runs/compact.py): a window a
        # listed segment covers is left out, so nothing counts twice.
        covered = covered_paths(listed)
        here = [p for p in listed if p not in covered]
        keep = set(here)
        for gone in [p for p in self._rows if p not in keep]:
            del self._rows[gone]
        new = [p for p in here if p not in self._rows and p not in self.skipped]
        vanished = False
        with ThreadPoolExecutor(max_workers=8) as pool:  # footers: latency-bound on shared storage
            for path, row in zip(new, pool.map(_file_row, new)):
                if isinstance(row, FileNotFoundError):
                    vanished = True  # merged since the listing: the next one has its segment
                elif isinstance(row, Exception):
                    self._skip(path, row)
                else:
                    self._rows[path] = row
        events = list_windows(self.root, EVENTS_GLOB)
        hidden = covered_paths(events)
        arrivals = list_windows(self.root, ARRIVALS_GLOB)
        # A skipped file merged away since (gone, or covered by a listed segment) is no longer
        # the run's: its windows are the segment's, and it is not an unreadable file of the run.
        present = keep | (set(events) - hidden) | set(arrivals)
        self.skipped = {p: why for p, why in self.skipped.items() if p in present}
        self._event_paths = [p for p in events if p not in self.skipped and p not in hidden]
        self._arrival_paths = [p for p in arrivals if p not in self.skipped]
        return vanished

    def _skip(self, path: str, why: Exception | str) -> None:
        reason = str(why).splitlines()[0] if str(why) else type(why).__name__
        self.skipped[path] = reason
        if self.warn:
            warnings.warn(RunWarning(f"skipped {path}: {reason}"), stacklevel=3)

    def files(self) -> pl.DataFrame:
        """One row per window file read: host, rank, pid, window (a merged segment's windows are
        window_first..window), final, times, counters, and the device records compaction left
        out of the segment's event log (``events_dropped``), and the calls a stop could not put in
        a window (``late_exits``, ``stop_unsettled``)."""
        return self._files

    def _scan(self, files: pl.DataFrame | None = None) -> pl.LazyFrame:
        files = self._files if files is None else files
        paths = files["path"].to_list()
        if not paths:
            raise EmptyRunError(f"the run at {self.root} has no readable windows yet")
        # Host and rank come from each file's metadata (checked against its folders when read),
        # not from hive partitioning, which would guess a type from the folder names (host=7).
        ids = files.lazy().select("path", "host", "rank")
        rows = runfiles.scan_parquet(paths, hive_partitioning=False, include_file_paths="path")
        return rows.join(ids, on="path", how="inner")

    def _collect(
        self, query: Callable[[pl.LazyFrame], Any], pick: Callable[[], pl.DataFrame] | None = None
    ) -> Any:
        """Run ``query`` on the scan (of the files ``pick()`` gives, default every file). A file
        gone since the listing (merged by compaction): list again and run it again. A file
        unreadable past its footer: skip it (checking each file) and run it again."""
        pick = pick or (lambda: self._files)
        for _ in range(RELIST_TRIES):
            listed = self._files["path"].to_list()
            try:
                return query(self._scan(pick()))
            except (pl.exceptions.PolarsError, OSError):
                pass
            self.refresh()
            if self._files["path"].to_list() == listed:
                break  # the same files: one of them is unreadable, not replaced
        try:
            return query(self._scan(pick()))
        except (pl.exceptions.PolarsError, OSError) as e:
            if isinstance(e, pl.exceptions.SchemaError):
                odd = _odd_schemas(self._files["path"].to_list())
                if odd:
                    raise pl.exceptions.SchemaError(odd) from None
            gone = False
            for path in self._files["path"].to_list():
                try:
                    runfiles.read_parquet(path)
                except FileNotFoundError:
                    gone = True  # merged meanwhile: listed again below
                except Exception as e:  # noqa: BLE001 - any unreadable file is skipped, named
                    self._skip(path, e)
            for path in self.skipped:
                self._rows.pop(path, None)
            if gone:
                self.refresh()
            self._files = self._files.filter(~pl.col("path").is_in(list(self.skipped)))
            return query(self._scan(pick()))

    # -- merged --------------------------------------------------------------------------------
    def _meta(self, files: pl.DataFrame) -> dict[str, Any]:
        labels = sorted(set(files["label"].to_list())) or ["no data"]
        return {
            "label": " + ".join(labels),
            "simulated": bool(files["simulated"].any()) if files.height else False,
            "clock": ",".join(sorted(set(files["clock"].to_list()))),
            "window_start": float(cast(float, files["window_start"].min()) or 0.0) if files.height else 0.0,
            "window_end": float(cast(float, files["window_end"].max()) or 0.0) if files.height else 0.0,
            "run": self.root,
            "ranks": files.select("host", "rank").n_unique() if files.height else 0,
        }

    @staticmethod
    def _counters(files: pl.DataFrame) -> dict[str, int]:
        last = files.sort("window").group_by("host", "rank", "pid").last()
        out = {c: int(files[c].sum() or 0) for c in COUNTERS}
        out.update({c: int(last[c].sum() or 0) for c in MOMENT_COUNTERS})
        return out

    def snapshot(self, *, current: bool = False) -> Snapshot:
        """Every window of every rank merged exactly into one Snapshot. With ``current=True``,
        only the windows of what is on now (:meth:`current`: each process's since its on period
        began or a command last retargeted it), its metadata saying since when (``since``, s since
        the epoch, None when nothing is on) and after which commands (``generations``)."""
        if not isinstance(current, bool):
            raise ValueError(f"current is True (what is on now) or False (the whole run), not {current!r}")
        if current:
            if self._current_snapshot is None:
                self._current_snapshot = self._merged_current()
            return self._current_snapshot
        if self._snapshot is None:
            self._snapshot = self._merged(lambda: self._files)
        return self._snapshot

    def _merged_current(self) -> Snapshot:
        """:meth:`snapshot` of what is on now; the whole run's merge when every window is of it
        (a job on from its start and never retargeted: one merge per refresh, not two)."""
        if self._current_files().height == self._files.height:
            whole = self.snapshot()  # it may list the run again: compared again below
            files = self._current_files()
            if files.height == self._files.height:
                return Snapshot(whole._native, {**whole.meta, **_since(files)})
        return self._merged(self._current_files)

    def _merged(self, pick: Callable[[], pl.DataFrame]) -> Snapshot:
        """The files ``pick()`` gives merged exactly into one Snapshot."""
        if pick().height:

            def q(lf: pl.LazyFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
                state, buckets = pl.collect_all(merge_saved(lf), engine="streaming")  # one pass
                return state, buckets

            state, buckets = self._collect(q, pick)
            files = pick()  # as the scan read them (a file merged meanwhile made it list again)
            native = native_from_state(state, buckets, self._counters(files))
        else:
            files = pick()
            native = _empty_native()
        meta = self._meta(files)
        if "_since" in files.columns:
            meta.update(_since(files))
        return Snapshot(native, meta)

    def current(self) -> pl.DataFrame:
        """What is on now: one row per process with profiling on and a window of it written:
        host, rank, pid, its on ``period``, the ``generation`` of the command that set what it
        traces, ``since`` (the start of the first of those windows, s since the epoch),
        ``windows`` and ``enable``. Its windows are those since its on period began or a command
        last retargeted it, whichever is later (a segment compaction merged across that moment is
        left out: it holds older windows too). A process is on as its control file says (a run
        recorded with control), else when its newest window neither ended a period nor was its
        last. :meth:`snapshot` with ``current=True`` merges those windows."""
        files = self._current_files()
        schema = {
            "host": pl.String,
            "rank": pl.Int64,
            "pid": pl.Int64,
            "period": pl.Int64,
            "generation": pl.Int64,
            "since": pl.Float64,
            "windows": pl.Int64,
            "enable": pl.String,
        }
        if not files.height:
            return pl.DataFrame(schema=schema)
        out = (
            files.sort("window")
            .group_by("host", "rank", "pid", maintain_order=True)
            .agg(
                pl.col("period").last(),
                pl.col("generation").last(),
                pl.col("_since").min().alias("since"),
                _windows().alias("windows"),
                pl.col("_enable").last().alias("enable"),
            )
        )
        return out.select(list(schema)).cast(schema).sort("rank", "host", "pid")  # type: ignore[arg-type]

    def _current_files(self) -> pl.DataFrame:
        """The rows of :meth:`files` that :meth:`current` covers, with ``_since`` (window_start)
        and ``_enable`` (the on period's enable set, comma-joined). The choice reads the control
        files once per listing; the rows follow :meth:`files` (a file skipped as unreadable
        since leaves them)."""
        if self._current_paths is None:
            self._current_paths = self._choose_current()
        paths = self._current_paths
        return self._files.filter(pl.col("path").is_in(list(paths))).with_columns(
            pl.col("window_start").alias("_since"),
            pl.col("path").replace_strict(paths, default="", return_dtype=pl.String).alias("_enable"),
        )

    def _choose_current(self) -> dict[str, str]:
        """The paths of :meth:`_current_files`, each with its on period's enable set."""
        by_pid: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
        for r in self._rows.values():
            by_pid.setdefault((r["host"], r["rank"], r["pid"]), []).append(r)
        procs = self.processes()
        on: dict[tuple[str, int, int], int | None] = {}
        if procs.height:  # the control files say who is on, and in which period
            for h, rk, pid, period in (
                procs.filter(pl.col("state") == "on").select("host", "rank", "pid", "period").iter_rows()
            ):
                on[(h, rk, pid)] = period
        else:  # no control files: the newest window says whether its period goes on
            for key, rows in by_pid.items():
                newest = max(rows, key=lambda r: r["window"])
                if not newest["period_end"]:
                    on[key] = None
        chosen: list[dict[str, Any]] = []
        for key, period in on.items():
            rows = by_pid.get(key) or []
            if not rows:
                continue  # on, no window yet
            if period is None:
                period = max(rows, key=lambda r: r["window"])["period"]
            mine = [r for r in rows if {int(p[0]) for p in r["_periods"]} == {period}]
            if not mine:
                continue  # turned on, its period's first window not written yet
            gen = max(r["generation"] for r in mine)
            mine = [r for r in mine if set(r["_generations"]) == {gen}]
            newest = max(mine, key=lambda r: r["window"])
            enable = ",".join(next((p[3] or [] for p in newest["_periods"] if int(p[0]) == period), []))
            chosen += [{**r, "_enable": enable} for r in mine]
        return {r["path"]: r["_enable"] for r in chosen}

    def summary(self) -> pl.DataFrame:
        """Every rank merged exactly, with the columns of :meth:`Snapshot.summary`."""
        return self.snapshot().summary()

    def by_rank(self) -> pl.DataFrame:
        """The summary of each rank: host, rank, then the summary's columns."""
        if not self._files.height:
            return pl.DataFrame(schema={"host": pl.String, "rank": pl.Int64, **self.summary().schema})

        def q(lf: pl.LazyFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
            state, buckets = pl.collect_all(merge_saved(lf, by=("host", "rank")), engine="streaming")
            return state, buckets

        state, buckets = self._collect(q)
        parts = []
        by_b = buckets.partition_by("host", "rank", as_dict=True)
        by_f = self._files.partition_by("host", "rank", as_dict=True)
        for (host, rank), s in state.partition_by("host", "rank", as_dict=True).items():
            b = by_b.get((host, rank), buckets.clear())
            files = by_f[(host, rank)]
            native = native_from_state(s.drop("host", "rank"), b.drop("host", "rank"), self._counters(files))
            snap = Snapshot(native, self._meta(files))
            parts.append(
                snap.summary().select(
                    pl.lit(host).alias("host"), pl.lit(rank, dtype=pl.Int64).alias("rank"), pl.all()
                )
            )
        return pl.concat(parts).sort("host", "rank", pl.col("total_ns"), descending=[False, False, True])

    def timeline(self) -> pl.DataFrame:
        """Per window and rank, per function: calls, total, mean, min and max (ns), with the
        window's wall-clock start and end (s since the epoch) and its on period (a gap between
        two periods is time profiling was off; :meth:`periods` lists them)."""

        def q(lf: pl.LazyFrame) -> pl.DataFrame:
            rows = lf.select("path", "host", "rank", "domain", "name", "count", "sum", "min", "max")
            return rows.collect(engine="streaming")

        rows = self._collect(q)  # first: it may list the run again
        windows = self._files.select("path", "pid", "window", "window_start", "window_end", "period")
        rows = rows.join(windows, on="path", how="inner")
        out = rows.group_by("host", "rank", "window", "domain", "name").agg(
            pl.col("window_start").min(),
            pl.col("window_end").max(),
            pl.col("period").max(),
            pl.col("count").sum().alias("num_calls"),
            pl.col("sum").sum().alias("total_ns"),
            pl.col("min").min().alias("min_ns"),
            pl.col("max").max().alias("max_ns"),
        )
        out = out.with_columns(
            (pl.col("total_ns").cast(pl.Float64) / pl.col("num_calls").cast(pl.Float64)).alias("avg_ns"),
            pl.col("domain").replace_strict(DOMAIN_NAMES, default="unknown", return_dtype=pl.String),
        )
        cols = [
            "host",
            "rank",
            "window",
            "window_start",
            "window_end",
            "period",
            "domain",
            "name",
            "num_calls",
            "total_ns",
            "avg_ns",
            "min_ns",
            "max_ns",
        ]
        return out.select(cols).sort("host", "rank", "window", "name")

    # -- ranks ---------------------------------------------------------------------------------
    def ranks(self, now: float | None = None) -> pl.DataFrame:
        """One row per rank: processes, windows, calls, last update and its age, whether every
        process of the rank ended cleanly (``complete``: its final window written, or it ended
        with profiling off), a status (``STATUSES``) and, for a run recorded with control, its
        profiling ``state`` (on, off, ended, lost; ``paused`` status: alive and off)."""
        now = time.time() if now is None else now
        if self._files.height:  # first: a file merged since the listing makes it list again
            calls = self._collect(
                lambda lf: lf.group_by("host", "rank").agg(pl.col("count").sum().alias("calls")).collect()
            )
        else:
            calls = pl.DataFrame(schema={"host": pl.String, "rank": pl.Int64, "calls": pl.UInt64})
        f = self._files
        interval = float(cast(float, f["interval_s"].max()) or 0.0) if f.height else 0.0
        stale_after = self.stale_after if self.stale_after is not None else max(3 * interval, 1.0)
        per_pid = f.group_by("host", "rank", "pid").agg(pl.col("final").any(), pl.col("written").max())
        procs = self.processes()
        if procs.height:
            # A launcher or a helper (control.is_launcher) is no rank, unless windows say otherwise.
            with_windows = per_pid.select("host", "rank", "pid").with_columns(pl.lit(True).alias("_w"))
            procs = procs.join(with_windows, on=["host", "rank", "pid"], how="left").filter(
                ~pl.col("launcher").fill_null(False) | pl.col("_w").fill_null(False)
            )
            per_pid = per_pid.join(
                procs.select("host", "rank", "pid", "state", "heartbeat"),
                on=["host", "rank", "pid"],
                how="full",
                coalesce=True,
            ).with_columns(
                (pl.col("final").fill_null(False) | (pl.col("state") == "ended").fill_null(False)).alias(
                    "final"
                ),
                pl.when(pl.col("state").is_in(["on", "off"]))
                .then(pl.max_horizontal("written", "heartbeat"))
                .otherwise(pl.col("written").fill_null(pl.col("heartbeat")))
                .alias("written"),
            )
        else:
            per_pid = per_pid.with_columns(pl.lit(None, dtype=pl.String).alias("state"))
        per_rank = per_pid.group_by("host", "rank").agg(
            pl.col("pid").n_unique().cast(pl.UInt32).alias("processes"),
            pl.col("final").all().alias("complete"),
            pl.col("written").max().alias("last_update"),
            pl.when((pl.col("state") == "on").any())
            .then(pl.lit("on"))
            .when((pl.col("state") == "off").any())
            .then(pl.lit("off"))
            .when((pl.col("state") == "lost").any())
            .then(pl.lit("lost"))
            .otherwise(pl.col("state").drop_nulls().first())
            .alias("state"),
        )
        nwin = f.group_by("host", "rank").agg(_windows().cast(pl.UInt32).alias("windows"))
        out = per_rank.join(nwin, on=["host", "rank"], how="left").join(
            calls, on=["host", "rank"], how="left"
        )
        out = out.with_columns(
            (pl.lit(now) - pl.col("last_update")).alias("age_s"),
            pl.col("calls").fill_null(0).cast(pl.UInt64),
            pl.col("windows").fill_null(0).cast(pl.UInt32),
        ).with_columns(
            pl.when(pl.col("complete"))
            .then(pl.lit("complete"))
            .when(pl.col("state") == "on")
            .then(pl.lit("running"))
            .when(pl.col("state") == "off")
            .then(pl.lit("paused"))
            .when(pl.col("state") == "lost")  # its process died (killed, crashed): no final window
            .then(pl.lit("incomplete"))
            .when(pl.col("age_s") <= stale_after)
            .then(pl.lit("running"))
            .when(pl.col("complete").sum() * 2 >= pl.len())
            .then(pl.lit("incomplete"))
            .otherwise(pl.lit("stale"))
            .alias("status")
        )
        cols = ["host", "rank", "status", "complete", "processes", "windows", "calls", "last_update"]
        cols += ["age_s", "state"]
        out = out.select(cols)
        world = f["world_size"].drop_nulls().max() if f.height else None
        if world:
            seen = set(out["rank"].to_list())
            missing = [r for r in range(int(cast(int, world))) if r not in seen]
            if missing:
                gone = pl.DataFrame(
                    {"host": [None] * len(missing), "rank": missing, "status": ["missing"] * len(missing)},
                    schema={"host": pl.String, "rank": pl.Int64, "status": pl.String},
                )
                out = pl.concat([out, gone], how="diagonal_relaxed")
        return out.sort("rank", "host")

    def processes(self) -> pl.DataFrame:
        """The run's processes as their control files say (host, rank, pid, state, heartbeat,
        rank_source, launcher: no rank, see control.is_launcher); empty for a run without control
        (or at a URL)."""
        schema = {
            "host": pl.String,
            "rank": pl.Int64,
            "pid": pl.Int64,
            "state": pl.String,
            "heartbeat": pl.Float64,
            "rank_source": pl.String,
            "launcher": pl.Boolean,
            "period": pl.Int64,  # the process's on period (its windows' ``period``)
        }
        if _is_url(self.root):
            return pl.DataFrame(schema=schema)
        rows = [{k: p.get(k) for k in schema} for p in read_processes(self.root.removeprefix("file://"))]
        return pl.DataFrame(rows, schema=schema, orient="row")

    def periods(self) -> pl.DataFrame:
        """When profiling was on: one row per rank, process and on period, with its start and
        end (s since the epoch) and what was enabled (compacted windows keep their periods)."""
        rows = []
        for r in self._rows.values():
            for p in r.get("_periods") or []:
                rows.append((r["host"], r["rank"], r["pid"], int(p[0]), p[1], p[2], ",".join(p[3] or [])))
        schema = {
            "host": pl.String,
            "rank": pl.Int64,
            "pid": pl.Int64,
            "period": pl.Int64,
            "start": pl.Float64,
            "end": pl.Float64,
            "enable": pl.String,
        }
        df = pl.DataFrame(rows, schema=schema, orient="row")
        return (
            df.group_by("host", "rank", "pid", "period")
            .agg(pl.col("start").min(), pl.col("end").max(), pl.col("enable").max())
            .sort("host", "rank", "pid", "period")
        )

    def watch(self, *rules: str, **options: Any) -> Any:
        """Keep rules on this run's windows as they are written, e.g. ``run.watch("HcclAllReduce
        p99 > 3x baseline", "dropped > 0")``: a ``mspti_lens.watch.Watcher`` (``.run()``,
        ``.start()``, ``.poll()``, ``.alerts()``), registered by the watch package when it loads."""
        return _view("watch")(self, *rules, **options)

    def captures(self) -> pl.DataFrame:
        """What the watchers caught: one row per capture folder (``captures/<time>-<rule>/``):
        fired_at (wall time), rule, value, baseline, ranks, subject, state, note, bytes, path."""
        return _view("captures")(self)

    @property
    def control(self) -> RunControl:
        """Start, stop and retarget profiling in the job while it runs (``.start()``,
        ``.stop()``, ``.status()``, ``.wait()``): see ``python -m mspti_lens control``."""
        return RunControl(self.root)

    # -- stragglers ----------------------------------------------------------------------------
    def collective_times(self) -> pl.DataFrame:
        """Per HCCL function, rank and instance (a window number, or null for the whole run):
        calls and mean time (ns), the input of :meth:`stragglers`."""

        def q(lf: pl.LazyFrame) -> pl.DataFrame:
            rows = lf.filter(pl.col("domain") == HCCL_DOMAIN).select(
                "path", "host", "rank", "name", "count", "sum"
            )
            return rows.collect(engine="streaming")

        rows = self._collect(q)  # first: it may list the run again
        rows = rows.join(self._files.select("path", "window"), on="path", how="inner")
        per_window = rows.group_by("host", "rank", "name", pl.col("window").alias("instance")).agg(
            pl.col("count").sum().alias("num_calls"), pl.col("sum").sum().alias("total_ns")
        )
        whole = rows.group_by("host", "rank", "name").agg(
            pl.col("count").sum().alias("num_calls"), pl.col("sum").sum().alias("total_ns")
        )
        whole = whole.with_columns(pl.lit(None, dtype=pl.Int64).alias("instance"))
        both = pl.concat([whole.select(per_window.columns), per_window])
        both = both.with_columns(
            (pl.col("total_ns").cast(pl.Float64) / pl.col("num_calls").cast(pl.Float64)).alias("mean_ns")
        )
        return both.sort("name", "instance", "host", "rank", nulls_last=False)

    def device_events(self, kinds: tuple[str, ...] | None = None) -> pl.DataFrame:
        """Every rank's device event log (host, rank, then Snapshot.device_events' columns), of
        ``kinds`` if given. Read on demand; a file that cannot be read is skipped, named; one
        merged by compaction since the listing makes the run list again (:meth:`refresh`)."""
        for attempt in range(RELIST_TRIES):
            last = attempt == RELIST_TRIES - 1
            try:
                self._event_paths, lf, gone = self._scan_rank_files(self._event_paths)
                if not gone or last:
                    if lf is None:
                        return pl.DataFrame(schema={"host": pl.String, "rank": pl.Int64})
                    if kinds is not None:
                        lf = lf.filter(pl.col("kind").is_in(list(kinds)))
                    return lf.collect()
            except FileNotFoundError:
                if last:
                    raise
            self.refresh()
        raise AssertionError("unreachable: the last try returns or raises")

    def _scan_rank_files(self, paths: list[str]) -> tuple[list[str], pl.LazyFrame | None, bool]:
        """The readable files of ``paths`` (the others skipped, named), a scan of them with host
        and rank first, and whether one was gone (merged since the listing)."""
        good = []
        gone = False
        for path in paths:
            try:
                runfiles.read_parquet_schema(path)
                good.append(path)
            except FileNotFoundError:
                gone = True
            except Exception as e:  # noqa: BLE001 - any unreadable file is skipped, named
                self._skip(path, e)
        # A rank folder's file has the host and rank of the windows in its folder (their
        # metadata, checked against the folder's name); a folder without a readable window has no
        # rank yet (its first window is being written) or none that can be trusted (skipped, named).
        folders = {_folder_path(p): (r["host"], r["rank"]) for p, r in self._rows.items()}
        ids = [(p, *folders[f]) for p in good if (f := _folder_path(p)) in folders]
        if not ids:
            return good, None, gone
        who = pl.LazyFrame(
            ids, schema={"_path": pl.String, "host": pl.String, "rank": pl.Int64}, orient="row"
        )
        paths = [p for p, _, _ in ids]
        lf = runfiles.scan_parquet(paths, hive_partitioning=False, include_file_paths="_path")
        lf = lf.join(who, on="_path", how="inner").drop("_path")
        return good, lf.select("host", "rank", pl.exclude("host", "rank")), gone

    def collective_arrivals(self) -> pl.DataFrame:
        """One row per rank and HCCL API call from the Callback API (runs/writer.py's arrivals
        files): host, rank, group (null: callbacks do not name the communicator), name
        (HcclAllReduce, ...), sequence (the rank's call index of that function, 0 first),
        start_ns (its ENTER, CLOCK_REALTIME ns), end_ns (null); by host, rank, name, sequence."""
        if self._arrivals is None:
            self._arrival_paths, lf, _ = self._scan_rank_files(self._arrival_paths)  # replaced, never removed
            schema = {"host": pl.String, "rank": pl.Int64, **arrival_schema()}
            ev = lf.collect().cast(schema) if lf is not None else pl.DataFrame(schema=schema)  # type: ignore[arg-type]
            self._arrivals = ev.select(
                "host",
                "rank",
                pl.lit(None, pl.String).alias("group"),
                "name",
                "sequence",
                "start_ns",
                pl.lit(None, pl.Int64).alias("end_ns"),
            ).sort("host", "rank", "name", "sequence")
        return self._arrivals

    def collective_events(self) -> pl.DataFrame:
        """One row per rank and collective instance from the device event log: host, rank,
        group, name, sequence, start_ns, end_ns. COMMUNICATION records when the run has them,
        else HCCL records (both describe the same collectives; counting both would double them)."""
        if self._collectives is None:
            cols = ["host", "rank", "kind", "group", "name", "sequence", "start_ns", "end_ns"]
            ev = self.device_events(("communication", "hccl"))
            if not ev.height:
                ev = pl.DataFrame(schema={c: INSTANCE_EVENT_SCHEMA[c] for c in cols})
            kind = "communication" if (ev["kind"] == "communication").any() else "hccl"
            self._collectives = ev.filter(pl.col("kind") == kind).select(cols[:2] + cols[3:])
        return self._collectives

    def stragglers(self, fold: bool = False) -> pl.DataFrame:
        """The slow rank of each collective instance (columns ``INSTANCE_COLUMNS``); with
        ``fold=True`` consecutive instances that reached one verdict are one row
        (``stragglers.fold_instances``: a 20-step job is one row, not 20 identical ones).

        With device events (``record --activity communication``, the default) an instance is one
        collective of a communicator across the ranks (runs/instances.py aligns each rank's numbers
        by time, whatever its on/off history), and two rules vote: msprof-analyze's (the rank
        whose collective time is abnormally SHORT arrived last: Dixon's Q test up to 100 ranks,
        else 3 sigma; ``slow_rank``) and HTA's (the rank whose collective started last on the
        device; ``late_rank``; it compares timestamps across hosts, so it assumes synchronised
        clocks). Instances missing on a rank, or whose intervals do not overlap, get no vote and a
        ``note``. Without device events each window number is an instance, msprof-analyze's rule
        votes on the windows' mean HCCL API times, and ``basis`` says so. Point-to-point
        operations (send/receive) are left out, as msprof-analyze does."""
        if not isinstance(fold, bool):
            raise ValueError(f"fold is True (one row per run of equal verdicts) or False, not {fold!r}")
        ev = self.collective_events() if self._files.height else None
        if ev is not None and ev.height:
            votes = self._noted_drops(instance_votes(ev))
        elif not self._files.height:
            votes = pl.DataFrame(schema=INSTANCE_COLUMNS)
        else:
            votes = window_votes(self.collective_times().filter(pl.col("instance").is_not_null()))
        return fold_instances(votes) if fold else votes

    def skew(self, clock_error_ns: int | None = None) -> pl.DataFrame:
        """Arrival skew per collective instance across ranks (runs.skew: columns SKEW_COLUMNS):
        from the device records when the run has them, else from the HCCL calls' ENTER times
        (the Callback API alone); ``basis`` says which."""
        from .skew import run_skew

        s = run_skew(self, clock_error_ns)
        return self._noted_drops(s) if s.height and s["basis"][0] == "device" else s

    def _noted_drops(self, rows: pl.DataFrame) -> pl.DataFrame:
        """``rows`` (skew's, stragglers') with a note when compaction left device records out
        (runs/compact.py keeps every collective; older versions did not): instances may be missing."""
        n = int(self._files["events_dropped"].sum() or 0) if self._files.height else 0
        if not n or not rows.height:
            return rows
        say = f"{n:,} device records were left out when older windows were merged (files()' events_dropped)"
        note = pl.when(pl.col("note").is_null()).then(pl.lit(say)).otherwise(pl.col("note") + "; " + say)
        return rows.with_columns(note.alias("note"))

    def slow_ranks(self) -> pl.DataFrame:
        """Per rank named at least once: how many instances of :meth:`stragglers` named it by
        msprof-analyze's rule (``slow_affect_count``, its SlowRank table) and by HTA's
        (``late_count``), out of ``instances`` voted on."""
        return tally(self.stragglers())

    # -- live ----------------------------------------------------------------------------------
    def follow(
        self, every: float = 2.0, *, timeout: float | None = None, show: Callable[[Run], None] | None = None
    ) -> Run:
        """Refresh every ``every`` seconds while the job runs, showing the ranks' state (in a
        notebook, the run view in place; elsewhere one line). Returns when every rank seen is
        complete, after ``timeout`` seconds, or on interrupt."""
        if not every > 0:
            raise ValueError(f"every must be a number of seconds > 0, not {every!r}")
        show = show or _view("show_live")()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                self.refresh()
                show(self)
                r = self.ranks()
                if r.height and bool((r["status"] == "complete").all()):
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    break
                time.sleep(every)
        except KeyboardInterrupt:
            pass
        return self

    def __repr__(self) -> str:
        r = self._files.select("host", "rank").n_unique() if self._files.height else 0
        n = self._files.select(_windows()).item() if self._files.height else 0
        return f"<mspti_lens.Run {self.root}: {r} ranks, {n} windows>"

    def _repr_html_(self) -> str:
        return _view("run_html")(self)


def _since(files: pl.DataFrame) -> dict[str, Any]:
    """A current snapshot's metadata: since when (``since``, the first window's start, None for
    no window) and after which commands (``generations``) its windows were written."""
    since = files["_since"].min() if files.height else None
    return {
        "since": None if since is None else float(cast(float, since)),
        "generations": sorted(set(files["generation"].to_list())),
    }


def _windows() -> pl.Expr:
    """How many windows (time slots a process wrote) files hold: a merged segment holds its span,
    so compaction does not change the count."""
    return (pl.col("window") - pl.col("window_first") + 1).sum()


def _odd_schemas(paths: list[str]) -> str | None:
    """Which windows' column types differ from those of most windows of the run, as a sentence
    naming each such file and column, or None when they all agree."""
    schemas: dict[str, dict[str, pl.DataType]] = {}
    for path in paths:
        try:
            schemas[path] = dict(runfiles.read_parquet_schema(path))
        except Exception:  # noqa: BLE001, S112 - an unreadable file is the caller's to skip
            continue
    kinds: dict[tuple, int] = {}
    for sch in schemas.values():
        kinds[tuple(sch.items())] = kinds.get(tuple(sch.items()), 0) + 1
    if len(kinds) < 2:
        return None
    common = dict(max(kinds.items(), key=lambda kv: kv[1])[0])
    odd = []
    for path, sch in schemas.items():
        diffs = [f"{c} is {t} (not {common.get(c, 'absent')})" for c, t in sch.items() if common.get(c) != t]
        diffs += [f"{c} is missing" for c in common if c not in sch]
        if diffs:
            odd.append(f"{path}: {', '.join(diffs)}")
    return (
        f"{len(odd)} window file(s) of the run have column types unlike the other "
        f"{len(schemas) - len(odd)}, so they cannot be read together: "
        + "; ".join(odd[:8])
        + ("; ..." if len(odd) > 8 else "")
        + ". They were not written by this mspti-lens's writer: move them out of the run to read the rest"
    )


def _check_run_root(p: Path) -> None:
    """A local run with no window at all: is ``p`` inside a run, or above runs? ValueError saying
    where the run root is; else a RunWarning saying what is there (a run being recorded may
    have written nothing yet, so an empty run is still a Run)."""
    layout = "host=H/rank=R/window-*.parquet"
    if (p / CONTROL_DIR).is_dir():
        return  # `record` started here: a run whose processes have written no window yet
    if p.name.startswith("rank=") and p.parent.name.startswith("host="):
        raise ValueError(
            f"{p} is one rank's folder of a run; open the run's root, the directory `record --out` "
            f"wrote: open_run({str(p.parent.parent)!r})"
        )
    if p.name.startswith("host="):
        raise ValueError(
            f"{p} is one host's folder of a run; open the run's root, the directory `record --out` "
            f"wrote: open_run({str(p.parent)!r})"
        )
    windows = f"host=*/rank=*/{WINDOW_GLOB}"
    roots = sorted(
        {
            str(Path(f).parents[2])
            for pattern in (f"*/{windows}", f"*/*/{windows}")
            for f in runfiles.glob(p, pattern)
        }
    )
    if roots:
        shown = ", ".join(roots[:5]) + (", ..." if len(roots) > 5 else "")
        raise ValueError(
            f"{p} is not a run but holds {len(roots)} below it ({shown}); open one of them, "
            f"e.g. open_run({roots[0]!r})"
        )
    entries = runfiles.RunFolder(p, follow_root=True).names()
    shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
    found = f"it holds {len(entries)} entries, none of a run ({shown})" if entries else "it is empty"
    warnings.warn(
        RunWarning(
            f"no windows in {p} yet: {found}. A run root is the directory `record --out` wrote, "
            f"holding {layout}; a run being recorded shows its windows as they are written"
        ),
        stacklevel=3,
    )


def _folder_path(path: str) -> str:
    """The folder of a run's file (local path or URL)."""
    return path.replace("\\", "/").rpartition("/")[0]


def _empty_native():
    from .. import _native

    return _native.NativeSnapshot.from_state([], [], [], [], [], [], [], [], [], [], [], {})


def open_run(root: str | os.PathLike, *, stale_after: float | None = None) -> Run:
    """Open a run recorded by ``python -m mspti_lens record --out DIR``."""
    return Run(root, stale_after=stale_after)


def open_view(path: str, every: float = 2.0):
    """A recorded run's live view (a widget when ipywidgets is there, else the HTML once). Here,
    not in view.py: the view formats any run it is given and opens none."""
    run = open_run(os.path.expanduser(path))
    try:
        return _view("run_widget")(run, every=every)
    except ImportError:
        from IPython.display import HTML

        return HTML(_view("run_html")(run))
