"""A run directory's windows as the watcher sees them: each rank's new windows in order, and the
job's windows (every rank's windows of one interval merged) once every rank has written its own.

The writer writes each process's windows every ``interval`` seconds, but the ranks' clocks of
windows are not one: each process starts its own (start-up differs by seconds on a loaded host).
So the job's windows are slots of wall-clock time, ``interval`` long from the first window seen;
a rank's window belongs to the slot its end falls in, and job window k merges every rank's windows
of slot k (histograms add: exact). Slot k is ready when every rank seen has written a window
ending after it, or has ended (its final window written), or ``grace`` seconds after the slot's
end (a slow or dead rank must not stop the watch): a window that comes later joins the next slot.
Only single windows are read (``window-NNNNNN-pidP``): a compacted segment holds windows already
seen. Each rank's next window is due one interval after its last one ends, under a name known in
advance (the next number, the same pid): :meth:`RunWindows.landed` looks for just those files
(one stat each), so a watcher reads a window as soon as it lands instead of at its next poll.
A window's device records (its ``events-NNNNNN-pidP`` file) come with it, for skew: a job
window's records are those of the collective instances completed with it (an instance's ranks'
records fall in different windows when the ranks' windows are not cut at one instant).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from ..runs import runfiles
from ..runs.run import _is_url, folder_of, list_windows
from ..runs.writer import WINDOW_NAME, events_name, window_name
from ..snapshot import Snapshot
from .evaluate import JOB, Window, merge_windows

CARRY_WINDOWS = 8  # job windows a collective instance's records wait for its other ranks'
LAND_PATIENCE_S = 2.0  # a rank's next window is looked for this long after it is due


@dataclass
class _Rank:
    last_end: float = 0.0  #: the end of its latest window (wall clock)
    final: bool = False
    seq: int = 0  #: the number of its latest window
    due: float | None = None  #: when its next window ends (wall clock): then it lands soon after
    next_file: tuple[str, str, str] | None = None  #: (host folder, rank folder, name) of that window


class RunWindows:
    """New windows of a run directory, polled: :meth:`poll` returns the rank windows and the job
    windows that became ready since the last poll, each in order."""

    def __init__(self, root: str | Path, *, grace: float | None = None):
        self.root = str(root)
        self.grace = grace
        self._seen: set[str] = set()
        self._ranks: dict[tuple[str, int], _Rank] = {}
        # slot -> the rank windows in it: ((host, rank), snapshot, device records)
        self._slots: dict[int, list[tuple[tuple[str, int], Snapshot, pl.DataFrame | None]]] = {}
        self._next_slot = 0  # slots below it were handed out
        self._origin: float | None = None  # the start of slot 0 (wall clock)
        self._job_index = 0
        self.skipped: dict[str, str] = {}
        self.interval = 0.0
        self._carried: pl.DataFrame | None = None  # records of collective instances not complete yet
        self._members: dict[str | None, set[tuple[str, int]]] = {}  # communicator -> its ranks seen

    def poll(self, now: float | None = None) -> tuple[list[Window], list[Window]]:
        """(rank windows, job windows) new since the last poll; ``now`` is the wall clock."""
        now = time.time() if now is None else now
        fresh: list[tuple[float, str, Window]] = []
        for path in list_windows(self.root):
            name = path.replace("\\", "/").rsplit("/", 1)[-1]
            m = WINDOW_NAME.match(name)
            if path in self._seen or not m or folder_of(path) is None:
                continue
            self._seen.add(path)
            try:
                snap = runfiles.read_with(path, Snapshot.load)
                host, rank = str(snap.meta["host"]), int(snap.meta["rank"])
            except Exception as e:  # noqa: BLE001 - an unreadable window is skipped, named
                self.skipped[path] = str(e).splitlines()[0] if str(e) else type(e).__name__
                continue
            seq = int(m.group(1))
            self.interval = max(self.interval, float(snap.meta.get("interval_s") or 0.0))
            events = window_events(Path(path), host, rank)
            subject = f"{host}/{rank}"
            w = Window(subject, seq, snap, ((host, rank),))
            fresh.append((w.end, subject, w))
            r = self._ranks.setdefault((host, rank), _Rank())
            r.last_end = max(r.last_end, w.end)
            r.final = r.final or bool(snap.meta.get("final"))
            interval = float(snap.meta.get("interval_s") or 0.0)
            folder = folder_of(path)
            if seq > r.seq and folder is not None and not r.final and interval > 0 and not _is_url(self.root):
                r.due = w.end + interval
                name = window_name(seq + 1, int(m.group(2)))  # the same process's next
                r.next_file = (f"host={folder[0]}", f"rank={folder[1]}", name)
            if seq > r.seq:
                r.seq = seq
            if r.final:
                r.due = r.next_file = None
            if self._origin is None:
                self._origin = w.start
            slot = max(self._slot_of(w.end), self._next_slot)  # late for its slot: the next one
            self._slots.setdefault(slot, []).append(((host, rank), snap, events))
        fresh.sort(key=lambda t: (t[0], t[1]))
        return [w for _, _, w in fresh], self._job_windows(now)

    def due(self, now: float | None = None) -> float | None:
        """When the earliest next window of a rank is due to end (wall clock), or None (no rank
        whose next window is known: none yet, all ended, or a remote run). A window overdue by
        LAND_PATIENCE_S (a rank gone, or its interval changed) is left to the polls."""
        now = time.time() if now is None else now
        waiting = [r.due for r in self._ranks.values() if r.due is not None and r.due > now - LAND_PATIENCE_S]
        return min(waiting, default=None)

    def landed(self, now: float | None = None) -> bool:
        """Whether a rank's next window, due by ``now``, is on disk: one stat of its known name per
        rank due (through runs/runfiles.py, like every read of the run)."""
        now = time.time() if now is None else now
        for r in self._ranks.values():
            if r.due is None or not now - LAND_PATIENCE_S < r.due <= now or r.next_file is None:
                continue
            host_dir, rank_dir, name = r.next_file
            try:
                runfiles.RunFolder(self.root, host_dir, rank_dir, follow_root=True).stat(name)
            except OSError:
                continue  # not yet (or not the run's: the next poll says so)
            return True
        return False

    def _slot_of(self, end: float) -> int:
        length = self.interval or 1.0
        return max(0, math.ceil((end - (self._origin or 0.0)) / length) - 1)

    def _job_windows(self, now: float) -> list[Window]:
        out = []
        length = self.interval or 1.0
        grace = self.grace if self.grace is not None else max(2 * length, 2.0)
        while self._slots:
            k = self._next_slot
            slot_end = (self._origin or 0.0) + (k + 1) * length
            behind = [key for key, r in self._ranks.items() if r.last_end < slot_end and not r.final]
            if behind and now < slot_end + grace:
                break
            self._next_slot += 1
            have = self._slots.pop(k, [])
            if not have:
                continue
            self._job_index += 1
            merged = merge_windows(s for _, s, _ in have)
            events = [e for _, _, e in have if e is not None and e.height]
            ranks = tuple(sorted({key for key, _, _ in have}))
            out.append(Window(JOB, self._job_index, merged, ranks, self._instances(events)))
        return out

    def _instances(self, events: list[pl.DataFrame]) -> pl.DataFrame | None:
        """The device records of the collective instances complete with this job window's
        records: those every rank ever seen in the instance's communicator has a record of.
        An instance whose ranks' records fall in different windows is completed by a later
        window's: records of incomplete instances are carried, for CARRY_WINDOWS windows at most."""
        if self._carried is not None:
            events = [self._carried, *events]
        if not events:
            return None
        ev = pl.concat(events, how="diagonal_relaxed").filter(pl.col("sequence").is_not_null())
        if "_carried" not in ev.columns:
            ev = ev.with_columns(pl.lit(0, dtype=pl.Int64).alias("_carried"))
        ev = ev.with_columns(pl.col("_carried").fill_null(0), pl.col("sequence").cast(pl.UInt64))
        for group, host, rank in ev.select("group", "host", "rank").unique().iter_rows():
            self._members.setdefault(group, set()).add((host, rank))
        keys = ["group", "name", "sequence"]
        have = ev.group_by(keys).agg(pl.struct("host", "rank").n_unique().alias("_n"))
        members = pl.DataFrame(
            {"group": list(self._members), "_members": [len(m) for m in self._members.values()]},
            schema={"group": ev.schema["group"], "_members": pl.UInt32},
        )
        done = have.join(members, on="group", nulls_equal=True).filter(pl.col("_n") >= pl.col("_members"))
        complete = ev.join(done.select(keys), on=keys, how="semi", nulls_equal=True)
        rest = ev.join(done.select(keys), on=keys, how="anti", nulls_equal=True)
        rest = rest.with_columns(pl.col("_carried") + 1).filter(pl.col("_carried") <= CARRY_WINDOWS)
        self._carried = rest if rest.height else None
        return complete.drop("_carried")

    def done(self) -> bool:
        """Every rank seen has written its final window, and every job window was handed out."""
        return bool(self._ranks) and all(r.final for r in self._ranks.values()) and not self._slots

    def ranks(self) -> list[tuple[str, int]]:
        return sorted(self._ranks)


def window_events(window: Path, host: str, rank: int) -> pl.DataFrame | None:
    """A window's device records (its ``events-NNNNNN-pidP`` file) with its host and rank, or
    None (no records, or unreadable or untrusted: runs/runfiles.py checks it)."""
    m = WINDOW_NAME.match(window.name)
    if not m:
        return None
    try:
        ev = runfiles.read_parquet(window.with_name(events_name(int(m.group(1)), int(m.group(2)))))
    except Exception:  # noqa: BLE001 - a window without readable records has no skew
        return None
    return ev.with_columns(pl.lit(host).alias("host"), pl.lit(rank, dtype=pl.Int64).alias("rank"))
