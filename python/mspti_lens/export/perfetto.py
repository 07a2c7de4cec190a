"""Chrome Trace Event JSON (Perfetto / chrome://tracing / HTA) of the calls mspti-lens kept.

What goes in: the slowest calls per (thread, API) (``Snapshot.slowest()``), MSTX ranges, and the
device events (kernels and collectives, ``Snapshot.device_events()``: the device-event log of the
device-time issue) when the snapshot has them, each as a complete (``ph: "X"``) event. The process
is the rank (``pid``), host calls sit on their thread's lane, device work on one lane per (device,
stream) in a process of its own per device, as Kineto lays traces out. ``ts``/``dur`` are
microseconds (with ns decimals) from the earliest event, whose absolute CLOCK_REALTIME ns is in
``otherData.base_time_unix_ns``: a float of microseconds since 1970 cannot hold nanoseconds. Calls
nest strictly per thread (mspti-lens pairs them with a stack), so the host lanes nest as Perfetto
requires.

One time axis: host calls' starts are wall-clock ns (the native core converts each ENTER reading
of the session's clock to CLOCK_REALTIME when the window closes), and device events carry the
activity records' own timestamps, which MSPTI gives in CLOCK_REALTIME ns. Both are ns since 1970 on
the same clock, so they are drawn against one base with no shift; what separates them is only the
error of that conversion of the host reading, not an offset to estimate.

Frames read (columns; extra columns go into ``args``):
- slowest: domain, callback, name, thread_id, start_unix_ns, duration_ns
- mstx (ranges): name, domain, start_unix_ns, end_unix_ns, and thread_id (host) or
  device_id + stream_id (device)
- kernels: name, device_id, stream_id, start_unix_ns, end_unix_ns
- device events (the device-event log's schema, ``activity.DEVICE_EVENTS_SCHEMA``): kind, name,
  device_id, stream_id, start_ns, end_ns (group, correlation_id, sequence, bytes go into args)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from .series import frame_or_none, resource_of

DEVICE_PID_BASE = 1000  # device d of a rank is process DEVICE_PID_BASE * (rank + 1) + d
SLOWEST_COLUMNS = ("domain", "callback", "name", "thread_id", "start_unix_ns", "duration_ns")
MSTX_COLUMNS = ("name", "domain", "start_unix_ns", "end_unix_ns")
KERNEL_COLUMNS = ("name", "device_id", "stream_id", "start_unix_ns", "end_unix_ns")
DEVICE_EVENT_COLUMNS = ("kind", "name", "device_id", "stream_id", "start_ns", "end_ns")


def _rank_pid(rank: str) -> int:
    return int(rank) if rank.isdigit() else 0


def _need(df: pl.DataFrame, what: str, cols: tuple[str, ...]) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"the {what} frame lacks columns {missing}; it needs {list(cols)}")


def _args(row: dict, used: set[str]) -> dict:
    """The row's other columns as event args, JSON-safe (times as ISO 8601 text)."""
    out = {}
    for k, v in row.items():
        if k in used or v is None:
            continue
        out[k] = (
            v
            if isinstance(v, (str, int, float, bool))
            else v.isoformat()
            if hasattr(v, "isoformat")
            else str(v)
        )
    return out


@dataclass
class _Lanes:
    """The spans of one trace as they are gathered, and the host threads and device (device,
    stream) lanes they sit on (each gets its name event)."""

    pid: int
    spans: list[tuple[int, int, dict]] = field(default_factory=list)  # (start ns, dur ns, event)
    threads: set[int] = field(default_factory=set)
    lanes: set[tuple[int, int]] = field(default_factory=set)

    def device_pid(self, device_id: int) -> int:
        return DEVICE_PID_BASE * (self.pid + 1) + device_id

    def on_thread(self, tid: int) -> dict:
        self.threads.add(tid)
        return {"pid": self.pid, "tid": tid}

    def on_stream(self, lane: tuple[int, int]) -> dict:
        self.lanes.add(lane)
        return {"pid": self.device_pid(lane[0]), "tid": lane[1]}


def _snapshot_frames(snap: Any, given: dict[str, pl.DataFrame | None], not_drawn: list[str]) -> dict:
    """The frames to draw: those given, else the snapshot's own where it holds timed events."""

    def events_of(method: str, cols: tuple[str, ...]) -> pl.DataFrame | None:
        # A snapshot's own frame is used when it holds events; aggregates (per-name statistics,
        # as the device frames keep) have no times to draw and are left out, saying so.
        df = frame_or_none(snap, method)
        if df is not None and not set(cols) <= set(df.columns):
            not_drawn.append(f"{method}: the snapshot keeps statistics, not timed events")
            return None
        return df

    out = {}
    for method, cols in (("slowest", SLOWEST_COLUMNS), ("mstx", MSTX_COLUMNS), ("kernels", KERNEL_COLUMNS)):
        df = given[method]
        out[method] = df if df is not None else events_of(method, cols)
    # Snapshot.device_events() comes with the device-event log; a snapshot without the method
    # (an older mspti-lens, or another object) has none to draw: frame_or_none gives None.
    df = given["device_events"]
    out["device_events"] = df if df is not None else frame_or_none(snap, "device_events")
    return out


def _host_calls(slowest: pl.DataFrame, at: _Lanes) -> None:
    """The slowest calls, each on its thread's lane."""
    _need(slowest, "slowest", SLOWEST_COLUMNS)
    for row in slowest.iter_rows(named=True):
        ev = {"ph": "X", "cat": row["domain"], "name": row["name"], **at.on_thread(int(row["thread_id"]))}
        ev["args"] = {"callback": row["callback"], **_args(row, set(SLOWEST_COLUMNS))}
        at.spans.append((int(row["start_unix_ns"]), int(row["duration_ns"]), ev))


def _mstx_ranges(mstx: pl.DataFrame, at: _Lanes) -> None:
    """MSTX ranges: on a device stream's lane when the range has a device, else on its thread's."""
    _need(mstx, "mstx", MSTX_COLUMNS)
    used = {"name", "domain", "start_unix_ns", "end_unix_ns", "thread_id", "device_id", "stream_id"}
    for row in mstx.iter_rows(named=True):
        start, end = int(row["start_unix_ns"]), int(row["end_unix_ns"])
        ev = {"ph": "X", "cat": "mstx", "name": row["name"] or "(unnamed range)"}
        if row.get("device_id") is not None:
            ev.update(at.on_stream((int(row["device_id"]), int(row.get("stream_id") or 0))))
        else:
            ev.update(at.on_thread(int(row.get("thread_id") or 0)))
        ev["args"] = {"domain": row["domain"], **_args(row, used)}
        at.spans.append((start, max(end - start, 0), ev))


def _kernels(kernels: pl.DataFrame, at: _Lanes) -> None:
    """Kernels of the kernels frame, each on its (device, stream) lane."""
    _need(kernels, "kernels", KERNEL_COLUMNS)
    for row in kernels.iter_rows(named=True):
        lane = (int(row["device_id"]), int(row["stream_id"]))
        start, end = int(row["start_unix_ns"]), int(row["end_unix_ns"])
        ev = {"ph": "X", "cat": "kernel", "name": row["name"], **at.on_stream(lane)}
        ev["args"] = {"device": lane[0], "stream": lane[1], **_args(row, set(KERNEL_COLUMNS))}
        at.spans.append((start, max(end - start, 0), ev))


def _device_events(events: pl.DataFrame, at: _Lanes) -> None:
    """The device-event log's kernels and collectives, each on its (device, stream) lane."""
    _need(events, "device events", DEVICE_EVENT_COLUMNS)
    used = {"kind", "name", "device_id", "stream_id", "start_ns", "end_ns", "duration_ns"}
    for row in events.iter_rows(named=True):
        lane = (int(row["device_id"]), int(row["stream_id"]))
        start, end = int(row["start_ns"]), int(row["end_ns"])
        ev = {
            "ph": "X",
            "cat": row["kind"],  # kernel | communication | hccl
            "name": row["name"] or f"({row['kind']})",
            **at.on_stream(lane),
        }
        ev["args"] = {"device": lane[0], "stream": lane[1], **_args(row, used)}
        at.spans.append((start, max(end - start, 0), ev))


def _name_events(at: _Lanes, label: str) -> list[dict]:
    """The metadata events naming the rank's process, its threads, each device's process and
    each stream's lane."""
    pid = at.pid
    meta = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
    ]
    meta += [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": t, "args": {"name": f"thread {t}"}}
        for t in sorted(at.threads)
    ]
    meta += [
        {"ph": "M", "name": "process_name", "pid": at.device_pid(dev), "tid": 0,
         "args": {"name": f"{label} device {dev}"}}
        for dev in sorted({d for d, _ in at.lanes})
    ]  # fmt: skip
    meta += [
        {"ph": "M", "name": "thread_name", "pid": at.device_pid(d), "tid": s, "args": {"name": f"stream {s}"}}
        for d, s in sorted(at.lanes)
    ]
    return meta


def _timed_events(at: _Lanes, base: int) -> list[dict]:
    """The spans as complete events in microseconds from ``base``, per lane, outer calls first at
    equal starts, so that viewers that build the stack in file order nest right."""
    spans = sorted(at.spans, key=lambda e: (e[2]["pid"], e[2]["tid"], e[0], -e[1]))
    return [{**ev, "ts": (start - base) / 1e3, "dur": dur / 1e3} for start, dur, ev in spans]


def to_perfetto(
    snap: Any,
    path: str | os.PathLike | None = None,
    *,
    slowest: pl.DataFrame | None = None,
    mstx: pl.DataFrame | None = None,
    kernels: pl.DataFrame | None = None,
    device_events: pl.DataFrame | None = None,
    rank: int | str | None = None,
    host: str | None = None,
) -> dict:
    """A trace (dict in the Chrome Trace Event format, object form) of a snapshot's slowest
    calls, MSTX ranges, kernels and device events; frames not given are taken from the snapshot
    where it has them. With ``path``, also written there as JSON (open it in ui.perfetto.dev)."""
    r = resource_of(snap, rank, host)
    not_drawn: list[str] = []
    given = {"slowest": slowest, "mstx": mstx, "kernels": kernels, "device_events": device_events}
    frames = _snapshot_frames(snap, given, not_drawn)
    at = _Lanes(pid=_rank_pid(r.rank))
    for method, draw in (
        ("slowest", _host_calls),
        ("mstx", _mstx_ranges),
        ("kernels", _kernels),
        ("device_events", _device_events),
    ):
        df = frames[method]
        if df is not None and len(df):
            draw(df, at)
    base = min((s for s, _, _ in at.spans), default=r.start_unix_ns)
    label = f"rank {r.rank} ({r.host})" + (" · SIMULATED" if r.simulated else "")
    trace = {
        "traceEvents": _name_events(at, label) + _timed_events(at, base),
        "displayTimeUnit": "ns",
        "distributedInfo": {"rank": at.pid},
        "otherData": {
            "producer": "mspti-lens",
            "base_time_unix_ns": base,
            "rank": r.rank,
            "host": r.host,
            "source": "simulated" if r.simulated else "libmspti",
            "not_drawn": not_drawn,
        },
    }
    if path is not None:
        with open(os.fspath(path), "w", encoding="utf-8") as f:
            json.dump(trace, f)
    return trace
