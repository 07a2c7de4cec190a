"""OpenTelemetry: OTLP exponential histograms as JSON (a file, or OTLP/HTTP to a collector).

One ``ExportMetricsServiceRequest`` in the OTLP/JSON encoding (proto3 JSON mapping: 64-bit
integers as strings, enums as numbers, hex-free since no trace ids appear). The metric
``mspti_lens.call.duration`` (unit ``ns``) has one cumulative exponential-histogram point per
API, at scale 7 with the very buckets mspti-lens holds, exact count/sum/min/max and the zero
bucket; attributes ``domain``, ``api``, ``callback``. The resource carries ``rank`` and
``host.name`` (one writer per rank, as OTel's single-writer rule asks), ``service.name`` and
``mspti_lens.source`` (``simulated`` or ``libmspti``). Calls beyond the histogram range sit at
the exact max's bucket (see :mod:`mspti_lens.export.series`). The slowest calls
(``Snapshot.slowest()``) become the format's exemplars on their API's point. Collectives add
the gauges ``mspti_lens.collective.algbw`` and ``.busbw`` (GBy/s; attributes group, op,
data_type, bytes). ``mspti_lens.self.*`` say what mspti-lens itself cost the process and lost
(self_cost.METRICS: cumulative sums and gauges).
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from typing import Any

from .._native import __version__
from ..self_cost import samples_of, since_unix_ns
from .series import (
    SCALE,
    BandwidthPoint,
    Resource,
    Series,
    bandwidth_of,
    frame_or_none,
    resource_of,
    series_of,
)

METRIC = "mspti_lens.call.duration"
DESCRIPTION = "Host time of each MSPTI-traced API call, from its ENTER callback to its EXIT callback."
CUMULATIVE = 2  # AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
# nccl-tests' bandwidths as gauges of the window's medians per (group, op, data type, bytes bucket).
BANDWIDTH_METRICS = (
    ("mspti_lens.collective.algbw", "algbw_gbps", "Median algorithm bandwidth (bytes / device time)."),
    ("mspti_lens.collective.busbw", "busbw_gbps", "Median bus bandwidth (algbw x the op's bus factor)."),
)


def _bandwidth_metrics(points: list[BandwidthPoint], r: Resource) -> list[dict]:
    out = []
    for name, attr, desc in BANDWIDTH_METRICS:
        dps = [
            {
                "attributes": [
                    _attr("group", p.group),
                    _attr("op", p.op),
                    _attr("data_type", p.data_type),
                    _attr("bytes", p.bytes),
                ],
                "timeUnixNano": str(r.end_unix_ns),
                "asDouble": float(getattr(p, attr)),
            }  # fmt: skip
            for p in points
            if getattr(p, attr) is not None
        ]
        if dps:
            out.append({"name": name, "description": desc, "unit": "GBy/s", "gauge": {"dataPoints": dps}})
    return out


def _attr(key: str, value: Any) -> dict:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}


def _rank_value(rank: str) -> int | str:
    return int(rank) if rank.lstrip("-").isdigit() else rank


def _point(s: Series, r: Resource, exemplars: list[dict]) -> dict:
    b = s.buckets_with_overflow_at_max()
    p: dict[str, Any] = {
        "attributes": [_attr("domain", s.domain), _attr("api", s.api), _attr("callback", s.callback)],
        "startTimeUnixNano": str(r.start_unix_ns),
        "timeUnixNano": str(r.end_unix_ns),
        "count": str(s.count),
        "sum": float(s.sum_ns),
        "scale": SCALE,
        "zeroCount": str(s.zero_count),
        "zeroThreshold": 0.0,
    }
    if b:
        lo, hi = min(b), max(b)
        p["positive"] = {"offset": lo, "bucketCounts": [str(b.get(i, 0)) for i in range(lo, hi + 1)]}
    if s.count:
        p["min"] = float(s.min_ns)
        p["max"] = float(s.max_ns)
    if exemplars:
        p["exemplars"] = exemplars
    return p


def _exemplars_by_key(snap: Any) -> dict[tuple[str, str, str], list[dict]]:
    """The slowest calls per key (domain, callback, name): a name may come under two callbacks."""
    df = frame_or_none(snap, "slowest")
    out: dict[tuple[str, str, str], list[dict]] = {}
    if df is None or not len(df):
        return out
    for row in df.iter_rows(named=True):
        out.setdefault((row["domain"], row["callback"], row["name"]), []).append(
            {
                "timeUnixNano": str(int(row["start_unix_ns"]) + int(row["duration_ns"])),
                "asInt": str(int(row["duration_ns"])),
                "filteredAttributes": [_attr("thread.id", int(row["thread_id"]))],
            }
        )
    return out


def _self_metrics(snap: Any, r: Resource) -> list[dict]:
    """mspti-lens's own cost and losses (self_cost.METRICS): counters as cumulative monotonic sums
    since the window's start, the rest as gauges."""
    out = []
    for _, name, kind, unit, desc, value in samples_of(snap):
        start = since_unix_ns(snap) if kind == "counter" else r.start_unix_ns  # counters count from there
        point = {"startTimeUnixNano": str(start), "timeUnixNano": str(r.end_unix_ns), "asDouble": value}
        if kind == "counter":
            body = {"sum": {"aggregationTemporality": CUMULATIVE, "isMonotonic": True, "dataPoints": [point]}}
        else:
            body = {"gauge": {"dataPoints": [point]}}
        out.append({"name": name, "description": desc, "unit": unit, **body})
    return out


def to_otlp(
    snap: Any,
    path: str | os.PathLike | None = None,
    *,
    rank: int | str | None = None,
    host: str | None = None,
) -> dict:
    """A snapshot as an OTLP ``ExportMetricsServiceRequest`` (a dict in the OTLP/JSON encoding);
    with ``path``, also written there as JSON. ``rank``/``host`` default to the snapshot's
    metadata, the RANK environment variable and this host's name."""
    series, r = series_of(snap), resource_of(snap, rank, host)
    ex = _exemplars_by_key(snap)
    request = {
        "resourceMetrics": [
            {
                "resource": {
                    "attributes": [
                        _attr("service.name", "mspti-lens"),
                        _attr("host.name", r.host),
                        _attr("rank", _rank_value(r.rank)),
                        _attr("mspti_lens.source", "simulated" if r.simulated else "libmspti"),
                    ]
                },
                "scopeMetrics": [
                    {
                        "scope": {"name": "mspti_lens", "version": __version__},
                        "metrics": [
                            {
                                "name": METRIC,
                                "description": DESCRIPTION,
                                "unit": "ns",
                                "exponentialHistogram": {
                                    "aggregationTemporality": CUMULATIVE,
                                    "dataPoints": [
                                        _point(s, r, ex.get((s.domain, s.callback, s.api), []))
                                        for s in series
                                    ],
                                },
                            },
                            *_bandwidth_metrics(bandwidth_of(snap), r),
                            *_self_metrics(snap, r),
                        ],
                    }
                ],
            }
        ]
    }
    if path is not None:
        with open(os.fspath(path), "w", encoding="utf-8") as f:
            json.dump(request, f, indent=1)
            f.write("\n")
    return request


def counter_otlp(name: str, description: str, values: dict[str, int], attribute: str, start_ns: int) -> dict:
    """A monotonic cumulative OTLP Sum, one data point per ``attribute`` value, as an
    ``ExportMetricsServiceRequest`` (the watcher's triggers per rule)."""
    now = time.time_ns()
    points = [
        {
            "attributes": [_attr(attribute, k)],
            "startTimeUnixNano": str(start_ns),
            "timeUnixNano": str(now),
            "asInt": str(v),
        }
        for k, v in sorted(values.items())
    ]
    metric = {
        "name": name,
        "description": description,
        "unit": "1",
        "sum": {"aggregationTemporality": CUMULATIVE, "isMonotonic": True, "dataPoints": points},
    }
    scope = {"scope": {"name": "mspti_lens", "version": __version__}, "metrics": [metric]}
    resource = {"attributes": [_attr("service.name", "mspti-lens"), _attr("host.name", socket.gethostname())]}
    return {"resourceMetrics": [{"resource": resource, "scopeMetrics": [scope]}]}


def send_otlp(
    snap: Any,
    url: str,
    *,
    rank: int | str | None = None,
    host: str | None = None,
    timeout: float = 10.0,
    headers: dict[str, str] | None = None,
) -> int:
    """POST the snapshot to an OTLP/HTTP collector (JSON encoding). ``url`` is the collector's
    base (``http://host:4318``) or its full metrics path (``.../v1/metrics``). Returns the HTTP
    status; a refusal raises :class:`ConnectionError` with the collector's answer."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"url must be an http:// or https:// collector address, not {url!r}")
    target = url if url.rstrip("/").endswith("/v1/metrics") else url.rstrip("/") + "/v1/metrics"
    body = json.dumps(to_otlp(snap, rank=rank, host=host)).encode()
    req = urllib.request.Request(
        target, data=body, method="POST", headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        raise ConnectionError(
            f"the collector at {target} refused the metrics: HTTP {e.code} {e.reason}"
        ) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise ConnectionError(f"cannot reach the OTLP collector at {target}: {reason}") from None
