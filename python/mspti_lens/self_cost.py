"""What mspti-lens costs the process it profiles, and what it lost, measured while it runs.

- **callbacks**: the CPU inside mspti-lens's callback. Each thread times one callback in
  ``sample_every`` (256), the clock reads' own cost (measured when the session is made) taken off;
  the total is the sampled time times 256 (rust/lens/src/core/self_cost.rs). The library's
  dispatch of a callback, the same for any subscriber, is not in it.
- **drain**: the CPU of the activity drain thread (its thread CPU clock).
- **writer**: the CPU of writing a recorded run's windows (the writing thread's CPU clock,
  runs/writer.py).
- **records dropped**: every pair or record lost (:data:`DROP_COUNTERS`: the callbacks' pairs,
  MSPTI's own count where the library reports it, buffer requests the pool refused, device events
  past the log's cap), over every window this process closed and the current one.
- **pool pressure**: the most activity buffers out at once, over the pool's cap.
- **subscriber busy**: the library's refusal when another tool held MSPTI's only subscriber slot.

One reading per process: :func:`measure`. Before any callback was timed, the cost per call is the
estimate :data:`ESTIMATE_NS_PER_PAIR` (from BENCHMARKS.md), and every display says "estimate".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from . import _native

#: What "dropped" adds up: the callbacks' pairs lost to a failed clock reading or a full key table,
#: records MSPTI says it dropped, buffer requests the pool refused (MSPTI then drops the records),
#: and device events past the event log's cap (counted in the tables, not logged). The watch
#: rule ``dropped > 0`` reads the same list.
DROP_COUNTERS = ("dropped", "library_dropped", "pool_exhausted", "device_events_dropped")

# What profiling costs per call when nothing was measured yet: the callback's ENTER+EXIT pair
# into a histogram, the added ns per pair bench/run.py measures (BENCHMARKS.md, section 1).
ESTIMATE_NS_PER_PAIR = 50.0
ESTIMATE_SOURCE = "BENCHMARKS.md, section 1: mspti-lens's added ns per ENTER/EXIT pair"

_lock = threading.Lock()
_writer_cpu_ns = 0
_closed_drops: dict[str, int] = {}  # the drop counters of every window this process closed
_peak_pressure = 0.0
_subscriber_busy: str | None = None
_since: float | None = None  # when this process's first session was made (time.monotonic)


def started() -> None:
    """A session was made: the self cost's share of a core counts from the first one."""
    global _since
    with _lock:
        if _since is None:
            _since = time.monotonic()


def add_writer_cpu(ns: int) -> None:
    """CPU a window's write took (runs/writer.py)."""
    global _writer_cpu_ns
    with _lock:
        _writer_cpu_ns += max(0, int(ns))


def note_subscriber_busy(why: str) -> None:
    """The library refused our subscription: another tool holds MSPTI's only subscriber slot."""
    global _subscriber_busy
    with _lock:
        _subscriber_busy = why


def note_subscribed() -> None:
    """A subscription succeeded: the slot is ours now."""
    global _subscriber_busy
    with _lock:
        _subscriber_busy = None


def drops_of(counters: Mapping[str, Any]) -> dict[str, int]:
    """The drop counters among ``counters`` (callback and activity counters of one window)."""
    return {k: int(counters.get(k) or 0) for k in DROP_COUNTERS}


def note_closed_window(drops: Mapping[str, int], pressure: float | None) -> None:
    """A window was closed (``Session.reset``): its drops join the process's totals."""
    global _peak_pressure
    with _lock:
        for k, v in drops.items():
            _closed_drops[k] = _closed_drops.get(k, 0) + int(v)
        if pressure is not None:
            _peak_pressure = max(_peak_pressure, pressure)


def measure(
    current_drops: Mapping[str, int] | None = None,
    pressure: float | None = None,
    library_reports_drops: bool | None = None,
) -> dict[str, Any]:
    """The process's self cost now: every figure of the module docstring, with the drops and pool
    pressure of the current (open) window added when given. ``measured`` says whether a
    callback was timed yet (else ``ns_per_pair`` is :data:`ESTIMATE_NS_PER_PAIR`)."""
    n = _native.self_cost()
    with _lock:
        drops = dict(_closed_drops)
        writer_ns, peak, busy, since = _writer_cpu_ns, _peak_pressure, _subscriber_busy, _since
    for k, v in (current_drops or {}).items():
        drops[k] = drops.get(k, 0) + int(v)
    if pressure is not None:
        peak = max(peak, pressure)
    measured = n["ns_per_pair"] is not None
    cpu_s = (n["callback_cpu_ns"] + n["drain_cpu_ns"] + writer_ns) / 1e9
    elapsed = time.monotonic() - since if since is not None else 0.0
    return {
        "measured": measured,
        "ns_per_pair": float(n["ns_per_pair"]) if measured else ESTIMATE_NS_PER_PAIR,
        "callback_cpu_s": n["callback_cpu_ns"] / 1e9,
        "callback_samples": int(n["samples"]),
        "sample_every": int(n["sample_every"]),
        "clock_overhead_ns": int(n["clock_overhead_ns"]),
        "drain_cpu_s": n["drain_cpu_ns"] / 1e9,
        "writer_cpu_s": writer_ns / 1e9,
        "cpu_s": cpu_s,
        # The share of one core all of it took since the first session was made.
        "core_pct": cpu_s / elapsed * 100.0 if elapsed > 0 else 0.0,
        "records_dropped": sum(drops.values()),
        "drops": {k: v for k, v in drops.items() if v},
        "library_reports_drops": library_reports_drops,
        "pool_pressure": peak,
        "subscriber_busy": busy,
        # When the figures began (the first session), wall clock: a counter's start.
        "since": time.time() - elapsed if since is not None else None,
    }


def per_pair_text(cost: Mapping[str, Any]) -> str:
    """ "41.2 ns per call (measured, 1 in 64 timed)" or "50 ns per call (estimate, ...)"."""
    if cost.get("measured"):
        return (
            f"{cost['ns_per_pair']:.1f} ns per call (measured, 1 in {cost['sample_every']} callbacks timed)"
        )
    return f"{ESTIMATE_NS_PER_PAIR:.0f} ns per call (estimate: nothing measured yet; {ESTIMATE_SOURCE})"


def drops_text(cost: Mapping[str, Any]) -> str:
    """The sentence for drops: empty when nothing was lost (a drop is never only in a log)."""
    n = int(cost.get("records_dropped") or 0)
    if not n:
        return ""
    parts = ", ".join(f"{k} {v:,}" for k, v in (cost.get("drops") or {}).items())
    return f"DROPPED {n:,} records or pairs ({parts})"


def summary_text(cost: Mapping[str, Any]) -> str:
    """One line: what mspti-lens costs this process and what it lost."""
    line = (
        f"self cost: {per_pair_text(cost)}; CPU callbacks {cost['callback_cpu_s']:.3f} s, drain "
        f"{cost['drain_cpu_s']:.3f} s, writer {cost['writer_cpu_s']:.3f} s "
        f"({cost['core_pct']:.3f} % of a core); pool pressure {cost['pool_pressure']:.0%}"
    )
    if cost.get("library_reports_drops") is False:
        line += "; the library cannot report its own drops"
    lost = drops_text(cost)
    if lost:
        line += "; " + lost
    if cost.get("subscriber_busy"):
        line += f"; SUBSCRIBER HELD BY ANOTHER TOOL: {cost['subscriber_busy']}"
    return line


#: What the exports say of mspti-lens itself (Prometheus name, OTLP name, kind, unit, help, the
#: key of :func:`measure`'s dict), from the ``self_cost`` a window's metadata keeps.
METRICS = (
    ("mspti_lens_self_callback_cpu_seconds_total", "mspti_lens.self.callback.cpu_time", "counter", "s",
     "CPU mspti-lens's own callbacks took in this process (1 callback in 256 timed, scaled)",
     "callback_cpu_s"),
    ("mspti_lens_self_drain_cpu_seconds_total", "mspti_lens.self.drain.cpu_time", "counter", "s",
     "CPU of mspti-lens's own activity drain thread in this process", "drain_cpu_s"),
    ("mspti_lens_self_writer_cpu_seconds_total", "mspti_lens.self.writer.cpu_time", "counter", "s",
     "CPU mspti-lens itself took writing a recorded run's windows in this process", "writer_cpu_s"),
    ("mspti_lens_self_records_dropped_total", "mspti_lens.self.records_dropped", "counter", "1",
     "Pairs and records lost while mspti-lens profiled this process (its counters and MSPTI's own)",
     "records_dropped"),
    ("mspti_lens_self_callback_pair_nanoseconds", "mspti_lens.self.callback.pair_time", "gauge", "ns",
     "mspti-lens's own measured CPU per ENTER/EXIT pair (absent before a callback was timed)",
     "ns_per_pair"),
    ("mspti_lens_self_pool_pressure_ratio", "mspti_lens.self.pool_pressure", "gauge", "1",
     "The most of mspti-lens's activity buffers out at once, over its pool's cap", "pool_pressure"),
    ("mspti_lens_self_subscriber_busy", "mspti_lens.self.subscriber_busy", "gauge", "1",
     "1 when another tool held MSPTI's only subscriber slot, so mspti-lens could not subscribe",
     "subscriber_busy"),
)  # fmt: skip


def since_unix_ns(snap: Any) -> int:
    """When the snapshot's self-cost counters began, in Unix ns (0 where unknown)."""
    cost = (getattr(snap, "meta", None) or {}).get("self_cost")
    since = cost.get("since") if isinstance(cost, Mapping) else None
    return int(float(since) * 1e9) if since else 0


def samples_of(snap: Any) -> list[tuple[str, str, str, str, str, float]]:
    """(Prometheus name, OTLP name, kind, unit, help, value) of every :data:`METRICS` entry the
    snapshot's ``self_cost`` metadata has (none for a snapshot without it)."""
    cost = (getattr(snap, "meta", None) or {}).get("self_cost")
    if not isinstance(cost, Mapping):
        return []
    out = []
    for prom, otlp, kind, unit, help_, key in METRICS:
        if key == "ns_per_pair" and not cost.get("measured"):
            continue  # the estimate is not a measurement of this process
        value = cost.get(key)
        if key == "subscriber_busy":
            value = 1.0 if value else 0.0
        if value is None:
            continue
        out.append((prom, otlp, kind, unit, help_, float(value)))
    return out
