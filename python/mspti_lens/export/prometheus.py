"""Prometheus exposition: the text format (classic buckets) and the protobuf format (native
histograms at schema 7, with the classic buckets too for scrapers without native support).

Durations are in **nanoseconds** (``mspti_lens_call_duration_nanoseconds``): a native
histogram's buckets are powers of 2^(2^-7) in the metric's own unit, so in ns they are exactly
mspti-lens's buckets, while in seconds (1 ns = 2^-29.897 s) every bucket would straddle two.
Classic buckets are the powers of two from 64 ns to 2^36 ns (69 s): boundaries of the
exponential family, so their cumulative counts are exact too. Labels: domain, api, rank, host,
callback (with domain and api, what makes a series' key unique).
``mspti_lens_info`` says whether the data is simulated; ``mspti_lens_self_*`` say what mspti-lens
itself cost the process and lost (self_cost.METRICS). Collectives add the gauges
``mspti_lens_collective_{algbw,busbw}_gbps`` (the window's medians per group, op, data type and
message-size bucket, nccl-tests' definitions; a bucket without a bandwidth has no sample).

The protobuf encoder is a small hand encoder of ``io.prometheus.client.MetricFamily`` (the
fields are those of prometheus/client_model's metrics.proto), checked against a real
Prometheus server in tests/export/test_export_prometheus_server.py.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from ..self_cost import samples_of
from .series import (
    SCALE,
    BandwidthPoint,
    Resource,
    Series,
    bandwidth_of,
    check_format,
    resource_of,
    series_of,
)

METRIC = "mspti_lens_call_duration_nanoseconds"
HELP = "Host time of each MSPTI-traced API call, from its ENTER callback to its EXIT callback, in ns."
#: Classic bucket upper bounds (ns, inclusive): 2^6 .. 2^36, then +Inf.
CLASSIC_BOUNDS_NS = tuple(float(2**k) for k in range(6, 37))
TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PROTOBUF_CONTENT_TYPE = (
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
)
FORMATS = ("text", "protobuf")

# nccl-tests' bandwidths per (group, op, data_type, bytes bucket): gauges of the window's medians.
BANDWIDTH_METRICS = (
    ("mspti_lens_collective_algbw_gbps", "algbw_gbps", "Median algorithm bandwidth of the collectives "
     "of one message-size bucket (nccl-tests' algbw: bytes / device time), GB/s."),
    ("mspti_lens_collective_busbw_gbps", "busbw_gbps", "Median bus bandwidth of the collectives of one "
     "message-size bucket (nccl-tests' busbw: algbw x the op's bus factor), GB/s."),
)  # fmt: skip


def _bandwidth_labels(p: BandwidthPoint, r: Resource) -> list[tuple[str, str]]:
    return [("group", p.group), ("op", p.op), ("data_type", p.data_type), ("bytes", str(p.bytes)),
            ("rank", r.rank), ("host", r.host)]  # fmt: skip


def _bandwidth_text(points: list[BandwidthPoint], r: Resource) -> list[str]:
    lines = []
    for name, attr, help_ in BANDWIDTH_METRICS:
        have = [(p, getattr(p, attr)) for p in points if getattr(p, attr) is not None]
        if not have:
            continue
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} gauge"]
        lines += [f"{name}{_label_text(_bandwidth_labels(p, r))} {_num(float(v))}" for p, v in have]
    return lines


def _bandwidth_pb(points: list[BandwidthPoint], r: Resource) -> bytes:
    out = b""
    for name, attr, help_ in BANDWIDTH_METRICS:
        ms = [
            _label_pb(_bandwidth_labels(p, r)) + _f_bytes(2, _f_double(1, float(getattr(p, attr))))
            for p in points
            if getattr(p, attr) is not None
        ]
        if ms:
            out += _family_pb(name, help_, _GAUGE, ms)
    return out


# io.prometheus.client.MetricType
_COUNTER, _GAUGE, _HISTOGRAM = 0, 1, 4


def _labels(s: Series, r: Resource) -> list[tuple[str, str]]:
    # A key is (domain, callback, name): one name can come under two callbacks (a library that
    # passes no name gives "<null>" under LAUNCH and CPU_LAUNCH alike), so the callback is a label
    # too, else two series would share one label set and a scraper would drop one.
    return [
        ("domain", s.domain),
        ("api", s.api),
        ("rank", r.rank),
        ("host", r.host),
        ("callback", s.callback),
    ]


def classic_cumulative(s: Series) -> list[int]:
    """Cumulative counts at :data:`CLASSIC_BOUNDS_NS` (each bound 2^k ns is the upper bound of
    OTel bucket 128k-1, so a bucket is at or below it iff its index is below 128k)."""
    out, acc = [], s.zero_count
    items = sorted(s.buckets.items())
    j = 0
    for k in range(6, 37):
        limit = k << SCALE
        while j < len(items) and items[j][0] < limit:
            acc += items[j][1]
            j += 1
        out.append(acc)
    return out


# -- text exposition ---------------------------------------------------------------------------


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _label_text(pairs: list[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _num(x: float) -> str:
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x)) if x != int(x) or abs(x) >= 1e15 else str(int(x))


def counter_text(name: str, help_: str, values: dict[str, int], label: str) -> str:
    """A counter family in the text exposition format, one sample per ``label`` value (the
    watcher's triggers per rule; a node_exporter textfile collector reads it as written)."""
    lines = [f"# HELP {name} {help_}", f"# TYPE {name} counter"]
    lines += [f"{name}{_label_text([(label, k)])} {_num(v)}" for k, v in sorted(values.items())]
    return "\n".join(lines) + "\n"


def _text(
    series: list[Series],
    r: Resource,
    points: list[BandwidthPoint] | None = None,
    self_samples: list | None = None,
) -> str:
    lines = [
        "# HELP mspti_lens_info mspti-lens exporter; source says whether the data is simulated.",
        "# TYPE mspti_lens_info gauge",
        f"mspti_lens_info{_label_text(_info_labels(r))} 1",
        f"# HELP {METRIC} {HELP}",
        f"# TYPE {METRIC} histogram",
    ]
    for s in series:
        base = _labels(s, r)
        for bound, cum in zip(CLASSIC_BOUNDS_NS, classic_cumulative(s)):
            lines.append(f"{METRIC}_bucket{_label_text([*base, ('le', _num(bound))])} {cum}")
        lines.append(f"{METRIC}_bucket{_label_text([*base, ('le', '+Inf')])} {s.count}")
        lines.append(f"{METRIC}_sum{_label_text(base)} {_num(float(s.sum_ns))}")
        lines.append(f"{METRIC}_count{_label_text(base)} {s.count}")
    lines += _bandwidth_text(points or [], r)
    lines += _self_text(self_samples or [], r)
    return "\n".join(lines) + "\n"


def _self_text(samples: list, r: Resource) -> list[str]:
    """mspti-lens's own cost and losses (self_cost.METRICS), labelled as the info metric."""
    lines: list[str] = []
    for name, _, kind, _, help_, value in samples:
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        lines.append(f"{name}{_label_text(_info_labels(r))} {_num(value)}")
    return lines


def _self_pb(samples: list, r: Resource) -> bytes:
    out = b""
    for name, _, kind, _, help_, value in samples:
        # Metric.counter = 3 (Counter.value = 1), Metric.gauge = 2 (Gauge.value = 1)
        field, type_ = (3, _COUNTER) if kind == "counter" else (2, _GAUGE)
        out += _family_pb(
            name, help_, type_, [_label_pb(_info_labels(r)) + _f_bytes(field, _f_double(1, value))]
        )
    return out


def _info_labels(r: Resource) -> list[tuple[str, str]]:
    return [("source", "simulated" if r.simulated else "libmspti"), ("rank", r.rank), ("host", r.host)]


# -- protobuf exposition -----------------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1  # negative int64/int32 are sent as their 64-bit two's complement
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _f_varint(field: int, n: int) -> bytes:
    return _key(field, 0) + _varint(n)


def _f_sint(field: int, n: int) -> bytes:
    return _key(field, 0) + _varint(_zigzag(n))


def _f_double(field: int, x: float) -> bytes:
    return _key(field, 1) + struct.pack("<d", x)


def _f_bytes(field: int, b: bytes) -> bytes:
    return _key(field, 2) + _varint(len(b)) + b


def _f_str(field: int, s: str) -> bytes:
    return _f_bytes(field, s.encode())


def _label_pb(pairs: list[tuple[str, str]]) -> bytes:
    # Metric.label = 1; LabelPair.name = 1, value = 2
    return b"".join(_f_bytes(1, _f_str(1, k) + _f_str(2, v)) for k, v in pairs)


def native_spans(buckets: dict[int, int]) -> tuple[list[tuple[int, int]], list[int]]:
    """Prometheus sparse buckets from OTel indices: (offset, length) spans over Prometheus
    indices (OTel index + 1) and the delta-encoded counts. Gaps of one or two empty buckets are
    filled with zero counts (cheaper than a new span, as client_golang does)."""
    spans: list[tuple[int, int]] = []
    counts: list[int] = []
    prev_end: int | None = None  # Prometheus index after the last bucket of the current span
    for i, c in sorted(buckets.items()):
        p = i + 1
        if prev_end is not None and 0 <= p - prev_end <= 2:
            counts.extend([0] * (p - prev_end))
            spans[-1] = (spans[-1][0], spans[-1][1] + (p - prev_end) + 1)
        else:
            spans.append((p if prev_end is None else p - prev_end, 1))
        counts.append(c)
        prev_end = p + 1
    deltas, prev = [], 0
    for c in counts:
        deltas.append(c - prev)
        prev = c
    return spans, deltas


def _histogram_pb(s: Series) -> bytes:
    # Histogram: sample_count=1, sample_sum=2, bucket=3, schema=5, zero_threshold=6,
    # zero_count=7, positive_span=12, positive_delta=13. Bucket: cumulative_count=1, upper_bound=2.
    out = [_f_varint(1, s.count), _f_double(2, float(s.sum_ns))]
    for bound, cum in zip(CLASSIC_BOUNDS_NS, classic_cumulative(s)):
        out.append(_f_bytes(3, _f_varint(1, cum) + _f_double(2, bound)))
    out.append(_f_bytes(3, _f_varint(1, s.count) + _f_double(2, math.inf)))
    out.append(_f_sint(5, SCALE))
    out.append(_f_double(6, 0.0))
    out.append(_f_varint(7, s.zero_count))
    spans, deltas = native_spans(s.buckets)
    if not spans:
        spans = [(0, 0)]  # the no-op span marks a native histogram without positive buckets
    for off, length in spans:
        out.append(_f_bytes(12, _f_sint(1, off) + _f_varint(2, length)))
    packed = b"".join(_varint(_zigzag(d)) for d in deltas)
    if packed:
        out.append(_f_bytes(13, packed))
    return b"".join(out)


def _family_pb(name: str, help_: str, type_: int, metrics: list[bytes]) -> bytes:
    # MetricFamily: name=1, help=2, type=3, metric=4
    body = (
        _f_str(1, name) + _f_str(2, help_) + _f_varint(3, type_) + b"".join(_f_bytes(4, m) for m in metrics)
    )
    return _varint(len(body)) + body  # length-delimited, as the "encoding=delimited" stream


def _protobuf(
    series: list[Series],
    r: Resource,
    points: list[BandwidthPoint] | None = None,
    self_samples: list | None = None,
) -> bytes:
    info = _label_pb(_info_labels(r)) + _f_bytes(2, _f_double(1, 1.0))  # Metric.gauge = 2
    hists = [_label_pb(_labels(s, r)) + _f_bytes(7, _histogram_pb(s)) for s in series]  # histogram = 7
    return (
        _family_pb(
            "mspti_lens_info",
            "mspti-lens exporter; source says whether the data is simulated.",
            _GAUGE,
            [info],
        )
        + (_family_pb(METRIC, HELP, _HISTOGRAM, hists) if hists else b"")
        + _bandwidth_pb(points or [], r)
        + _self_pb(self_samples or [], r)
    )


# -- the export --------------------------------------------------------------------------------


def to_prometheus(
    snap: Any, format: str = "text", *, rank: int | str | None = None, host: str | None = None
) -> str | bytes:
    """A snapshot in the Prometheus exposition format: ``format="text"`` (str; classic buckets)
    or ``"protobuf"`` (bytes, length-delimited MetricFamily messages; native histograms at
    schema 7 plus the classic buckets). ``rank``/``host`` default to the snapshot's metadata,
    the RANK environment variable and this host's name."""
    check_format(format, FORMATS, "Prometheus format")
    series, r, points = series_of(snap), resource_of(snap, rank, host), bandwidth_of(snap)
    own = samples_of(snap)
    return _text(series, r, points, own) if format == "text" else _protobuf(series, r, points, own)


def content_type(format: str) -> str:
    return (
        TEXT_CONTENT_TYPE
        if check_format(format, FORMATS, "Prometheus format") == "text"
        else PROTOBUF_CONTENT_TYPE
    )


def negotiate(accept: str | None) -> str:
    """The format a scraper asked for in its Accept header: protobuf when it accepts the
    delimited MetricFamily stream (Prometheus does with native histograms enabled), else text."""
    a = (accept or "").lower().replace(" ", "")
    if "application/vnd.google.protobuf" in a and "proto=io.prometheus.client.metricfamily" in a:
        return "protobuf"
    return "text"
