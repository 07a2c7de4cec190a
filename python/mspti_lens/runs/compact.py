"""Compaction of a process's older windows, so a rank on for days keeps a bounded number of files.

The newest :data:`FINE_WINDOWS` windows of a process stay as written (their fine time resolution).
Older ones are merged exactly (``Snapshot.merge``: histograms, counts, sums and extremes add) like
a binary counter: two neighbouring segments of the same size become one of twice the size, so a
process that wrote N windows keeps at most ``FINE_WINDOWS + log2(N) + 1`` window files (and as
many event files): 32 + 14 for a day at 10 s. A merged segment is named
``window-FFFFFF-LLLLLL-pidP.parquet`` (windows F..L) and its metadata says so (``window_first``,
``window``); its device event log is the concatenation of its windows' logs. Collective
records (the kinds in :data:`KEPT_EVENT_KINDS`) are all kept: they are small and skew and
stragglers pair every rank's instances. Other records (kernels) are capped at
:data:`MAX_EVENT_ROWS` a segment, the newest kept; the number left out is the segment's
``events_dropped_in_compaction``, which ``Run.files()``, skew, stragglers and the run panel show.

A merged segment is written (temporary name, renamed) before the files it replaces are removed,
and those are removed only :data:`KEEP_MERGED_S` after the segment was written (at once after the
process's last window): a reader that lists both drops the files a segment covers
(``covered_paths``), so it never counts a call twice, and a reader that listed the inputs just
before the merge can still read them. A reader that finds a listed file gone lists again
(``Run.refresh``): the segment that replaced it was written before it was removed.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Mapping
from typing import Any

from . import runfiles

FINE_WINDOWS = 32
MAX_EVENT_ROWS = 20_000
# Device record kinds a merged event log keeps whole (the collectives skew and stragglers pair).
KEPT_EVENT_KINDS = ("communication", "hccl")
# How long a merged file stays after the segment replacing it is written: longer than a reader
# takes between listing a run's files and opening them, on a loaded machine or shared storage.
KEEP_MERGED_S = 15.0
# Window metadata that counts per window, so a merged segment holds the sum of its windows'.
ADDED_META = ("arrivals_dropped", "events_dropped_in_compaction", "late_exits", "stop_unsettled")
SEGMENT_NAME = re.compile(r"^(window|events)-(\d+)(?:-(\d+))?-pid(\d+)\.parquet$")


def segment_name(kind: str, first: int, last: int, pid: int) -> str:
    if first == last:
        return f"{kind}-{last:06d}-pid{pid}.parquet"
    return f"{kind}-{first:06d}-{last:06d}-pid{pid}.parquet"


def parse(name: str) -> tuple[str, int, int, int] | None:
    """(kind, first window, last window, pid) of a window or event file's name, or None."""
    m = SEGMENT_NAME.match(name)
    if not m:
        return None
    first = int(m[2])
    return m[1], first, int(m[3]) if m[3] else first, int(m[4])


def covered_paths(paths: list[str]) -> set[str]:
    """The files of ``paths`` that a merged segment of the same folder and pid covers (kept a
    while after it is written, see the module's docstring): a reader leaves them out."""
    return set(covering(paths))


def covering(paths: list[str]) -> dict[str, str]:
    """Each file of ``paths`` that a merged segment of the same folder, kind and pid covers: the
    smallest such segment of ``paths`` (the first written). Merges only join neighbouring
    segments, so spans nest or are apart: one sweep, containers before what they contain."""
    spans: dict[tuple[str, str, int], list[tuple[int, int, str]]] = {}
    for p in paths:
        folder, _, name = p.replace("\\", "/").rpartition("/")
        parsed = parse(name)
        if parsed:
            kind, a, b, pid = parsed
            spans.setdefault((folder, kind, pid), []).append((a, b, p))
    out: dict[str, str] = {}
    for items in spans.values():
        open_: list[tuple[int, int, str]] = []  # merged segments around the sweep, innermost last
        for a, b, p in sorted(items, key=lambda s: (s[0], -s[1])):
            while open_ and open_[-1][1] < a:
                open_.pop()
            cover = next((q for qa, qb, q in reversed(open_) if qa <= a and b <= qb), None)
            if cover is not None:
                out[p] = cover
            if b > a:
                open_.append((a, b, p))
    return out


def _level(first: int, last: int) -> int:
    return (last - first + 1).bit_length() - 1


Segment = tuple[int, int]  # (first window, last window)


def due_merges(segments: list[Segment], fine: int = FINE_WINDOWS) -> list[tuple[Segment, Segment]]:
    """The merges due, in order, for a process's segments (first, last window; sorted): the
    newest ``fine`` single windows stay; older segments merge like a binary counter's carries,
    the two newest old ones while they are of one size (1+1, 2+2, ...)."""
    segs = sorted(segments)
    out: list[tuple[Segment, Segment]] = []
    while True:
        tail = 0
        for a, b in reversed(segs):
            if a != b or tail >= fine:
                break
            tail += 1
        old = segs[: len(segs) - tail]
        if len(old) < 2 or _level(*old[-1]) != _level(*old[-2]):
            return out
        x, y = old[-2], old[-1]
        out.append((x, y))
        segs = [*segs[: len(old) - 2], (x[0], y[1]), *segs[len(old) :]]


class Compactor:
    """Compacts the windows of one process (``pid``) in one rank folder; ``compact()`` after
    each window written (WindowWriter does), ``compact(last=True)`` after the process's last."""

    def __init__(
        self,
        folder: str | os.PathLike | runfiles.RunFolder,
        pid: int,
        fine: int = FINE_WINDOWS,
        keep_merged_s: float = KEEP_MERGED_S,
    ):
        self.files = folder if isinstance(folder, runfiles.RunFolder) else runfiles.RunFolder(folder)
        self.dir = self.files.path
        self.pid = pid
        self.fine = fine
        self.keep_merged_s = keep_merged_s
        self.merges = 0
        self._written: dict[str, float] = {}  # segment -> when this compactor wrote it

    def _names(self) -> list[str]:
        """This process's window and event files."""
        return [
            n
            for kind in ("window", "events")
            for n in self.files.names(f"{kind}-*-pid{self.pid}.parquet")
            if (parsed := parse(n)) and parsed[3] == self.pid
        ]

    def segments(self) -> list[tuple[int, int]]:
        """This process's window segments (first, last window), merged inputs still kept left out."""
        names = [n for n in self._names() if n.startswith("window-")]
        covered = covered_paths(names)
        return sorted((p[1], p[2]) for n in names if n not in covered and (p := parse(n)))

    def compact(self, last: bool = False) -> int:
        """Merge what :func:`due_merges` says is due, then remove the merged files whose
        replacement is older than ``keep_merged_s`` (every merged file when ``last``: nothing
        will call again); returns the number of merges made."""
        merges = due_merges(self.segments(), self.fine)
        for x, y in merges:
            self._merge(x, y)
        self.merges += len(merges)
        self.remove_merged(None if last else time.time() - self.keep_merged_s)
        return len(merges)

    def remove_merged(self, written_before: float | None) -> list[str]:
        """Remove this process's files a segment covers, when the first segment covering one was
        written before ``written_before`` (all of them when None); returns their names."""
        removed = []
        names = self._names()
        for name, cover in sorted(covering(names).items()):
            if written_before is not None:
                try:
                    since = self._written.get(cover) or self.files.stat(cover).st_mtime
                except FileNotFoundError:
                    continue  # its segment was merged on meanwhile: the next call sees the new one
                if since >= written_before:
                    continue
            self.files.remove(name)
            removed.append(name)
        here = set(names) - set(removed)
        self._written = {n: t for n, t in self._written.items() if n in here}
        return removed

    def _merge(self, x: tuple[int, int], y: tuple[int, int]) -> tuple[int, int]:
        from ..snapshot import Snapshot

        first, last = x[0], y[1]
        a = self.files.read_with(segment_name("window", *x, self.pid), Snapshot.load)
        b = self.files.read_with(segment_name("window", *y, self.pid), Snapshot.load)
        out = a.merge(b)
        moments = out.meta["moments"]  # the merge's rule: each session's latest reading
        out = out._with_window({**merged_meta(a.meta, b.meta, first, last), "moments": moments})
        dropped = self._merge_events(x, y)
        if dropped:
            out = out.with_meta(
                events_dropped_in_compaction=out.meta.get("events_dropped_in_compaction", 0) + dropped
            )
        # The events files hold the log (windows the writer wrote); the events segment is written
        # first, so a window segment that exists has its events. The inputs stay (remove_merged).
        name = segment_name("window", first, last, self.pid)
        self.files.write(name, lambda f: out.save(f, event_log=False))
        self._written[name] = time.time()
        return first, last

    def _merge_events(self, x: tuple[int, int], y: tuple[int, int]) -> int:
        """Write the events segment of ``x`` and ``y``; returns the records left out (past
        MAX_EVENT_ROWS of kinds other than KEPT_EVENT_KINDS)."""
        import polars as pl

        parts = [segment_name("events", *s, self.pid) for s in (x, y)]
        frames = []
        for p in parts:
            with contextlib.suppress(FileNotFoundError):
                frames.append(self.files.read_parquet(p))
        if not frames:
            return 0
        ev = pl.concat(frames, how="diagonal_relaxed")
        capped = ~pl.col("kind").is_in(list(KEPT_EVENT_KINDS)) if "kind" in ev.columns else pl.lit(True)
        ev = ev.with_columns(capped.alias("_capped"))
        dropped = max(0, int(ev["_capped"].sum()) - MAX_EVENT_ROWS)
        # Every collective, and the newest others (those with at most MAX_EVENT_ROWS from them on).
        newest = pl.col("_capped").cast(pl.UInt32).cum_sum(reverse=True) <= MAX_EVENT_ROWS
        ev = ev.filter(~pl.col("_capped") | newest).drop("_capped")
        name = segment_name("events", x[0], y[1], self.pid)
        self.files.write(name, ev.write_parquet)
        self._written[name] = time.time()
        return dropped


def merged_meta(a: Mapping[str, Any], b: Mapping[str, Any], first: int, last: int) -> dict[str, Any]:
    """The metadata of segment ``first..last`` from its older (``a``) and newer (``b``) halves:
    the newer's, with the span, the on periods of both and every enable set either had."""
    m = dict(b)
    m["window_first"] = first
    m["window"] = last
    m["window_start"] = min(a.get("window_start") or 0, b.get("window_start") or 0)
    m["window_end"] = max(a.get("window_end") or 0, b.get("window_end") or 0)
    m["moments"] = {**(a.get("moments") or {}), **(b.get("moments") or {})}
    m["windows_merged"] = int(a.get("windows_merged") or 1) + int(b.get("windows_merged") or 1)
    for counted in ADDED_META:  # counts of what each window lost: the segment lost both halves'
        if counted in a or counted in b:
            m[counted] = int(a.get(counted) or 0) + int(b.get(counted) or 0)
    m["period_end"] = bool(b.get("period_end"))
    # Every command generation of the segment's windows (the newer half's alone is "generation"):
    # a reader that wants the windows since a command leaves out a segment reaching before it.
    m["generations"] = sorted({int(g) for h in (a, b) for g in _generations(h)})
    periods: dict[int, list[Any]] = {}
    for p in [*(a.get("periods") or []), *(b.get("periods") or [])]:
        k = int(p[0])
        if k in periods:
            q = periods[k]
            periods[k] = [k, min(q[1], p[1]), max(q[2], p[2]), sorted({*(q[3] or []), *(p[3] or [])})]
        else:
            periods[k] = list(p)
    m["periods"] = [periods[k] for k in sorted(periods)]
    sets = {tuple(s) for s in (a.get("enable_sets") or [a.get("enable") or []])}
    sets |= {tuple(s) for s in (b.get("enable_sets") or [b.get("enable") or []])}
    m["enable_sets"] = [list(s) for s in sorted(sets)]
    m["enable"] = sorted({x for s in sets for x in s})
    return m


def _generations(meta: Mapping[str, Any]) -> list[int]:
    """The command generations of a window's or segment's windows (a window: its own)."""
    return list(meta.get("generations") or [meta.get("generation") or 0])
