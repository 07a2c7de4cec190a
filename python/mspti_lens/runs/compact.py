"""Compaction of a process's older windows, so a rank on for days keeps a bounded number of files.

The newest :data:`FINE_WINDOWS` windows of a process stay as written (their fine time resolution).
Older ones are merged exactly (``Snapshot.merge``: histograms, counts, sums and extremes add) like
a binary counter: two neighbouring segments of the same size become one of twice the size, so a
process that wrote N windows keeps at most ``FINE_WINDOWS + log2(N) + 1`` window files (and as
many event files): 32 + 14 for a day at 10 s. A merged segment is named
``window-FFFFFF-LLLLLL-pidP.parquet`` (windows F..L) and its metadata says so (``window_first``,
``window``); its device event log is the concatenation of its windows' logs, at most
:data:`MAX_EVENT_ROWS` rows (the newest; the number left out is in its metadata).

A merged segment is written (temporary name, renamed) before the files it replaces are removed;
a reader that lists both in between drops the files a segment covers (``covered_paths``), so it
never counts a call twice.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from typing import Any

from . import runfiles

FINE_WINDOWS = 32
MAX_EVENT_ROWS = 20_000
# Window metadata that counts per window, so a merged segment holds the sum of its windows'.
ADDED_META = ("arrivals_dropped", "events_dropped_in_compaction")
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
    """The files of ``paths`` that a merged segment of the same folder and pid covers (written
    just before its inputs are removed): a reader leaves them out."""
    spans: dict[tuple[str, str, int], list[tuple[int, int, str]]] = {}
    for p in paths:
        folder, _, name = p.replace("\\", "/").rpartition("/")
        parsed = parse(name)
        if parsed:
            kind, a, b, pid = parsed
            spans.setdefault((folder, kind, pid), []).append((a, b, p))
    out: set[str] = set()
    for items in spans.values():
        merged = [(a, b, p) for a, b, p in items if b > a]
        for a, b, p in items:
            if any(ma <= a and b <= mb and (ma, mb) != (a, b) for ma, mb, _ in merged):
                out.add(p)
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
    each window written (WindowWriter does)."""

    def __init__(self, folder: str | os.PathLike | runfiles.RunFolder, pid: int, fine: int = FINE_WINDOWS):
        self.files = folder if isinstance(folder, runfiles.RunFolder) else runfiles.RunFolder(folder)
        self.dir = self.files.path
        self.pid = pid
        self.fine = fine
        self.merges = 0

    def segments(self) -> list[tuple[int, int]]:
        out = []
        for name in self.files.names(f"window-*-pid{self.pid}.parquet"):
            parsed = parse(name)
            if parsed and parsed[3] == self.pid:
                out.append((parsed[1], parsed[2]))
        return sorted(out)

    def compact(self) -> int:
        """Merge what :func:`due_merges` says is due; returns the number of merges made."""
        merges = due_merges(self.segments(), self.fine)
        for x, y in merges:
            self._merge(x, y)
        self.merges += len(merges)
        return len(merges)

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
        # The events files hold the log (windows the writer wrote).
        name = segment_name("window", first, last, self.pid)
        self.files.write(name, lambda f: out.save(f, event_log=False))
        for s in (x, y):
            self.files.remove(segment_name("window", *s, self.pid))
        for s in (x, y):
            self.files.remove(segment_name("events", *s, self.pid))
        return first, last

    def _merge_events(self, x: tuple[int, int], y: tuple[int, int]) -> int:
        import polars as pl

        parts = [segment_name("events", *s, self.pid) for s in (x, y)]
        frames = []
        for p in parts:
            with contextlib.suppress(FileNotFoundError):
                frames.append(self.files.read_parquet(p))
        if not frames:
            return 0
        ev = pl.concat(frames, how="diagonal_relaxed")
        dropped = max(0, ev.height - MAX_EVENT_ROWS)
        if dropped:
            ev = ev.tail(MAX_EVENT_ROWS)
        self.files.write(segment_name("events", x[0], y[1], self.pid), ev.write_parquet)
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
