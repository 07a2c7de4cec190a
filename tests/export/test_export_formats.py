"""Each export, read back with the format's own package and compared with the exact values.

The snapshots here are `export_data.ValuesSnapshot`s: known values in the histogram-v2 layout,
so counts must match exactly and quantiles within one bucket (scale 7: 0.27 %).
"""

from __future__ import annotations

import http.server
import json
import math
import threading
import warnings

import polars as pl
import pytest
from export_data import RANGE_END_NS, ValuesSnapshot, nearest_rank, otel_index, workload

from mspti_lens.export import send_otlp, to_hdr_log, to_otlp, to_perfetto, to_prometheus
from mspti_lens.export.prometheus import CLASSIC_BOUNDS_NS, METRIC, native_spans
from mspti_lens.export.series import series_of

KEYS = [
    ("runtime", "LAUNCH", "aclrtLaunchKernel"),
    ("hccl", "ALL_REDUCE", "HcclAllReduce"),
    ("runtime", "SYNCHRONIZE_STREAM", "aclrtSynchronizeStream"),
]


def within_one_bucket(estimate: float, exact: int) -> bool:
    """The estimate lies in the exact value's bucket or a neighbour (zero: exactly 0)."""
    if exact == 0:
        return estimate < 1
    i = otel_index(exact)
    return 2 ** ((i - 1) / 128) <= estimate <= 2 ** ((i + 2) / 128)


# -- the shared conversion -----------------------------------------------------------------------


def test_series_hold_the_exact_counts_zero_bucket_and_overflow():
    snap = workload()
    by_api = {s.api: s for s in series_of(snap)}
    for (d, cb, name), vals in snap.values.items():
        s = by_api[name]
        assert (s.domain, s.callback, s.count, s.sum_ns) == (d, cb, len(vals), sum(vals))
        assert (s.min_ns, s.max_ns) == (min(vals), max(vals))
        assert s.zero_count == vals.count(0)
        assert s.overflow == sum(v > RANGE_END_NS for v in vals)
        assert sum(s.buckets.values()) + s.zero_count + s.overflow == len(vals)
    assert by_api["aclrtSynchronizeStream"].overflow == 1
    assert by_api["aclrtLaunchKernel"].zero_count == 7


def test_a_snapshot_in_the_old_layout_is_refused_with_the_reason():
    class Old:
        meta = None

        def histogram(self):
            return pl.DataFrame({"domain": ["runtime"], "bucket": [3], "count": [1]})

    with pytest.raises(ValueError, match="exponential layout"):
        to_prometheus(Old())


# -- Prometheus ------------------------------------------------------------------------------------


def test_prometheus_text_parses_with_the_official_client_and_classic_buckets_are_exact():
    parser = pytest.importorskip("prometheus_client.parser")
    snap = workload()
    text = to_prometheus(snap, "text")
    fams = {f.name: f for f in parser.text_string_to_metric_families(text)}
    fam = fams[METRIC.removesuffix("_total")]
    assert fam.type == "histogram"
    info = fams["mspti_lens_info"].samples[0]
    assert info.labels["source"] == "simulated"
    for (d, _cb, name), vals in snap.values.items():
        mine = [s for s in fam.samples if s.labels.get("api") == name]
        assert {s.labels["rank"] for s in mine} == {"3"} and {s.labels["host"] for s in mine} == {"node-a"}
        assert {s.labels["domain"] for s in mine} == {d}
        buckets = {s.labels["le"]: s.value for s in mine if s.name.endswith("_bucket")}
        for bound in CLASSIC_BOUNDS_NS:
            assert buckets[str(int(bound))] == sum(v <= bound for v in vals), (name, bound)
        assert buckets["+Inf"] == len(vals)
        assert next(s.value for s in mine if s.name.endswith("_count")) == len(vals)
        assert next(s.value for s in mine if s.name.endswith("_sum")) == float(sum(vals))


def _metrics_proto():
    """io.prometheus.client's messages, declared from metrics.proto's field numbers (no package
    ships them for Python), to decode what the exporter wrote with the protobuf runtime."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="prom_metrics_test.proto", package="io.prometheus.client")

    def msg(name, *fields):
        m = fd.message_type.add(name=name)
        for fname, num, ftype, label, tname in fields:
            f = m.field.add(name=fname, number=num, type=ftype, label=label)
            if tname:
                f.type_name = tname
        return m

    OPT, R = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    msg("LabelPair", ("name", 1, F.TYPE_STRING, OPT, ""), ("value", 2, F.TYPE_STRING, OPT, ""))
    msg("Gauge", ("value", 1, F.TYPE_DOUBLE, OPT, ""))
    msg("Bucket", ("cumulative_count", 1, F.TYPE_UINT64, OPT, ""), ("upper_bound", 2, F.TYPE_DOUBLE, OPT, ""))
    msg("BucketSpan", ("offset", 1, F.TYPE_SINT32, OPT, ""), ("length", 2, F.TYPE_UINT32, OPT, ""))
    h = msg(
        "Histogram",
        ("sample_count", 1, F.TYPE_UINT64, OPT, ""),
        ("sample_sum", 2, F.TYPE_DOUBLE, OPT, ""),
        ("bucket", 3, F.TYPE_MESSAGE, R, ".io.prometheus.client.Bucket"),
        ("schema", 5, F.TYPE_SINT32, OPT, ""),
        ("zero_threshold", 6, F.TYPE_DOUBLE, OPT, ""),
        ("zero_count", 7, F.TYPE_UINT64, OPT, ""),
        ("positive_span", 12, F.TYPE_MESSAGE, R, ".io.prometheus.client.BucketSpan"),
        ("positive_delta", 13, F.TYPE_SINT64, R, ""),
    )
    h.field[-1].options.packed = True
    msg(
        "Metric",
        ("label", 1, F.TYPE_MESSAGE, R, ".io.prometheus.client.LabelPair"),
        ("gauge", 2, F.TYPE_MESSAGE, OPT, ".io.prometheus.client.Gauge"),
        ("histogram", 7, F.TYPE_MESSAGE, OPT, ".io.prometheus.client.Histogram"),
    )
    msg(
        "MetricFamily",
        ("name", 1, F.TYPE_STRING, OPT, ""),
        ("help", 2, F.TYPE_STRING, OPT, ""),
        ("type", 3, F.TYPE_INT32, OPT, ""),
        ("metric", 4, F.TYPE_MESSAGE, R, ".io.prometheus.client.Metric"),
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("io.prometheus.client.MetricFamily"))


def _delimited(data: bytes):
    from google.protobuf.internal.decoder import _DecodeVarint

    MetricFamily = _metrics_proto()
    pos, out = 0, []
    while pos < len(data):
        n, pos = _DecodeVarint(data, pos)
        m = MetricFamily()
        m.ParseFromString(data[pos : pos + n])
        out.append(m)
        pos += n
    return out


def test_prometheus_protobuf_native_buckets_decode_to_the_exact_counts():
    pytest.importorskip("google.protobuf")
    snap = workload()
    fams = {f.name: f for f in _delimited(to_prometheus(snap, "protobuf"))}
    assert fams["mspti_lens_info"].metric[0].gauge.value == 1.0
    fam = fams[METRIC]
    assert fam.type == 4  # HISTOGRAM
    for m in fam.metric:
        labels = {lp.name: lp.value for lp in m.label}
        assert (labels["rank"], labels["host"]) == ("3", "node-a")
        vals = next(
            v for (d, _c, n), v in snap.values.items() if n == labels["api"] and d == labels["domain"]
        )
        h = m.histogram
        assert (h.schema, h.zero_threshold, h.zero_count) == (7, 0.0, vals.count(0))
        assert (h.sample_count, h.sample_sum) == (len(vals), float(sum(vals)))
        got: dict[int, int] = {}
        idx, count, deltas = 0, 0, iter(h.positive_delta)
        for k, span in enumerate(h.positive_span):
            idx = span.offset if k == 0 else idx + span.offset
            for _ in range(span.length):
                count += next(deltas)
                if count:
                    got[idx - 1] = count  # Prometheus index = OTel index + 1
                idx += 1
        want: dict[int, int] = {}
        for v in vals:
            if 0 < v <= RANGE_END_NS:
                want[otel_index(v)] = want.get(otel_index(v), 0) + 1
        assert got == want
        classic = [(b.upper_bound, b.cumulative_count) for b in h.bucket]
        assert classic[-1] == (math.inf, len(vals))
        assert all(c == sum(v <= ub for v in vals) for ub, c in classic[:-1])


def test_native_spans_bridge_small_gaps_and_open_new_spans_for_large_ones():
    spans, deltas = native_spans({10: 5, 11: 2, 13: 1, 40: 4})
    # Prometheus indices 11, 12, (13 filled), 14, then a gap of 26 to 41.
    assert spans == [(11, 4), (26, 1)]
    assert deltas == [5, -3, -2, 1, 3]


# -- OpenTelemetry ---------------------------------------------------------------------------------


def _parse_otlp(doc: str):
    pytest.importorskip("opentelemetry.proto")
    from google.protobuf import json_format
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    return json_format.Parse(doc, ExportMetricsServiceRequest())


def _check_otlp(req, snap):
    (rm,) = req.resource_metrics
    attrs = {a.key: a.value for a in rm.resource.attributes}
    assert attrs["rank"].int_value == 3 and attrs["host.name"].string_value == "node-a"
    assert attrs["mspti_lens.source"].string_value == "simulated"
    (metric,) = rm.scope_metrics[0].metrics
    assert metric.unit == "ns" and metric.exponential_histogram.aggregation_temporality == 2
    points = metric.exponential_histogram.data_points
    assert len(points) == len(snap.values)
    for p in points:
        labels = {a.key: a.value.string_value for a in p.attributes}
        vals = next(
            v for (d, _c, n), v in snap.values.items() if n == labels["api"] and d == labels["domain"]
        )
        assert (p.scale, p.count, p.sum, p.min, p.max) == (7, len(vals), sum(vals), min(vals), max(vals))
        assert p.zero_count == vals.count(0)
        assert p.count == p.zero_count + sum(p.positive.bucket_counts)  # OTLP's consistency rule
        want: dict[int, int] = {}
        for v in vals:
            if v:  # overflow sits at the exact max's bucket
                i = otel_index(min(v, max(vals)) if v <= RANGE_END_NS else max(vals))
                want[i] = want.get(i, 0) + 1
        got = {p.positive.offset + k: c for k, c in enumerate(p.positive.bucket_counts) if c}
        assert got == want
        assert p.start_time_unix_nano == 1_700_000_000 * 10**9
        assert p.time_unix_nano == 1_700_000_010 * 10**9


def test_otlp_json_file_parses_with_opentelemetry_proto(tmp_path):
    snap = workload()
    out = tmp_path / "metrics.json"
    to_otlp(snap, out)
    _check_otlp(_parse_otlp(out.read_text()), snap)


def test_otlp_http_posts_json_a_collector_parses():
    snap = workload()
    got: list[tuple[str, str, bytes]] = []

    class Collector(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.path, self.headers["Content-Type"], body))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Collector)
    t = threading.Thread(target=srv.handle_request, daemon=True)
    t.start()
    try:
        assert send_otlp(snap, f"http://127.0.0.1:{srv.server_port}", timeout=30) == 200
    finally:
        t.join(timeout=30)
        srv.server_close()
    ((path, ctype, body),) = got
    assert path == "/v1/metrics" and ctype == "application/json"
    _check_otlp(_parse_otlp(body.decode()), snap)


def test_otlp_http_to_nothing_listening_is_one_clear_error():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(ConnectionError, match="cannot reach the OTLP collector"):
        send_otlp(workload(), f"http://127.0.0.1:{port}/v1/metrics", timeout=5)
    with pytest.raises(ValueError, match="http://"):
        send_otlp(workload(), "localhost:4318")


# -- HdrHistogram ----------------------------------------------------------------------------------


def test_hdr_interval_log_reads_back_with_hdrh_on_quantiles(tmp_path):
    hdrh_log = pytest.importorskip("hdrh.log")
    from hdrh.histogram import HdrHistogram

    snap = workload()
    path = tmp_path / "latency.hlog"
    to_hdr_log(snap, path)
    reader = hdrh_log.HistogramLogReader(str(path), HdrHistogram(1, 2**43, 3))
    seen = {}
    while (h := reader.get_next_interval_histogram()) is not None:
        seen[h.get_tag()] = h
    reader.close()
    assert set(seen) == {f"{d}/{n}" for d, _c, n in snap.values}
    for (d, _c, n), vals in snap.values.items():
        h = seen[f"{d}/{n}"]
        assert h.get_total_count() == len(vals)
        assert h.get_start_time_stamp() == 1_700_000_000_000.0
        assert h.get_end_time_stamp() == 1_700_000_010_000.0
        for q in (0.5, 0.9, 0.99, 0.999):
            exact = nearest_rank(vals, q)
            if exact > RANGE_END_NS:
                continue
            got = h.get_value_at_percentile(q * 100)
            assert within_one_bucket(got, exact), (n, q, got, exact)


def test_hdr_log_of_several_intervals_keeps_their_times(tmp_path):
    hdrh_log = pytest.importorskip("hdrh.log")
    from hdrh.histogram import HdrHistogram

    a = ValuesSnapshot({("runtime", "LAUNCH", "aclrtLaunchKernel"): [1000] * 10})
    b = ValuesSnapshot({("runtime", "LAUNCH", "aclrtLaunchKernel"): [5000] * 4})
    path = tmp_path / "two.hlog"
    to_hdr_log(None, path, intervals=[(100.0, 101.0, a), (101.0, 102.5, b)])
    reader = hdrh_log.HistogramLogReader(str(path), HdrHistogram(1, 2**43, 3))
    first, second = reader.get_next_interval_histogram(), reader.get_next_interval_histogram()
    reader.close()
    assert (first.get_total_count(), second.get_total_count()) == (10, 4)
    assert second.get_start_time_stamp() == 101_000.0 and second.get_end_time_stamp() == 102_500.0
    assert within_one_bucket(second.get_value_at_percentile(50), 5000)


# -- Perfetto / Chrome trace -----------------------------------------------------------------------


def _slowest() -> pl.DataFrame:
    t0 = 1_700_000_000_123_456_789
    return pl.DataFrame(
        {
            "domain": ["hccl", "runtime", "runtime"],
            "callback": ["ALL_REDUCE", "LAUNCH", "LAUNCH"],
            "name": ["HcclAllReduce", "aclrtLaunchKernel", "aclrtLaunchKernel"],
            "thread_id": [4242, 4242, 4243],
            "start_unix_ns": [t0, t0 + 1_000, t0 + 50],
            "duration_ns": [2_500_000, 7_001, 9_999],
        }
    )


def test_perfetto_trace_has_nested_host_spans_and_device_lanes(tmp_path):
    kernels = pl.DataFrame(
        {
            "name": ["MatMul_v3", "AllReduce_kernel"],
            "device_id": [0, 0],
            "stream_id": [2, 5],
            "start_unix_ns": [1_700_000_000_123_470_000, 1_700_000_000_123_500_000],
            "end_unix_ns": [1_700_000_000_123_490_000, 1_700_000_000_125_000_000],
        }
    )
    snap = ValuesSnapshot({}, meta={"rank": 1, "host": "node-b"}, slowest=_slowest())
    path = tmp_path / "trace.json"
    trace = to_perfetto(snap, path, kernels=kernels)
    doc = json.loads(path.read_text())
    assert doc == trace and doc["otherData"]["base_time_unix_ns"] == 1_700_000_000_123_456_789
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    host = [e for e in xs if e["pid"] == 1]
    dev = [e for e in xs if e["cat"] == "kernel"]
    assert len(host) == 3 and len(dev) == 2
    # ns precision survives: microseconds with ns decimals from the base time.
    launch = next(e for e in host if e["tid"] == 4242 and e["name"] == "aclrtLaunchKernel")
    assert (launch["ts"], launch["dur"]) == (1.0, 7.001)
    # Spans on one thread nest (the launch is inside the all-reduce).
    outer = next(e for e in host if e["name"] == "HcclAllReduce")
    assert outer["ts"] <= launch["ts"] and launch["ts"] + launch["dur"] <= outer["ts"] + outer["dur"]
    assert {e["tid"] for e in dev} == {2, 5} and len({e["pid"] for e in dev}) == 1
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert "rank 1 (node-b) · SIMULATED" in names


def test_perfetto_trace_loads_with_htas_trace_parser(tmp_path):
    trace_parser = pytest.importorskip(
        "hta.common.trace_parser", reason="HolisticTraceAnalysis is not installed"
    )
    from hta.configs.parser_config import ParserConfig

    snap = ValuesSnapshot({}, meta={"rank": 0, "host": "node-a"}, slowest=_slowest())
    path = tmp_path / "rank0.json"
    to_perfetto(snap, path)
    with warnings.catch_warnings():  # HTA's own pandas deprecation warnings are not ours
        warnings.simplefilter("ignore")
        meta, df, symbols = trace_parser.parse_trace_dataframe(str(path), ParserConfig())
    assert meta["distributedInfo"]["rank"] == 0
    xs = df[df["dur"] > 0]
    names = sorted(symbols.sym_table[i] for i in xs["name"])
    assert names == ["HcclAllReduce", "aclrtLaunchKernel", "aclrtLaunchKernel"]
    assert sorted(int(d) for d in xs["dur"]) == [7, 9, 2500]  # µs (HTA rounds to whole µs)
    assert set(xs["tid"]) == {4242, 4243} and set(xs["pid"]) == {0}


def test_perfetto_rejects_a_frame_without_its_columns():
    bad = pl.DataFrame({"name": ["k"], "device_id": [0]})
    with pytest.raises(ValueError, match="kernels frame lacks"):
        to_perfetto(ValuesSnapshot({}), kernels=bad)


def test_unknown_prometheus_format_names_the_valid_ones():
    with pytest.raises(ValueError, match="text, protobuf"):
        to_prometheus(workload(), "json")


def test_perfetto_leaves_out_aggregate_frames_and_says_so():
    class WithDeviceStats(ValuesSnapshot):
        def kernels(self):  # per-name statistics, as the device frames keep: nothing to draw
            return pl.DataFrame({"name": ["MatMul"], "num_calls": [3], "total_ns": [900]})

    snap = WithDeviceStats({}, slowest=_slowest())
    trace = to_perfetto(snap)
    assert not [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    assert trace["otherData"]["not_drawn"] == ["kernels: the snapshot keeps statistics, not timed events"]
    assert len([e for e in trace["traceEvents"] if e["ph"] == "X"]) == 3


# -- one name under two callbacks --------------------------------------------------------------------


def _null_names_under_two_callbacks():
    """A real Snapshot of a library that passes no function name: "<null>" under LAUNCH (3 calls
    of 100 ns) and under CPU_LAUNCH (1 call of 50 ns), two keys with one (domain, name)."""
    from mspti_lens import Snapshot, _native
    from mspti_lens.snapshot import bucket_index

    native = _native.NativeSnapshot.from_state(
        [1, 1], [10, 11], ["<null>", "<null>"], [300, 50], [30_000, 2_500], [100, 50], [100, 50], [0, 0],
        [0, 1], [bucket_index(100), bucket_index(50)], [3, 1], {},
    )  # fmt: skip
    return Snapshot(native, {"rank": 0, "host": "h", "simulated": True})


def test_prometheus_text_series_of_one_name_under_two_callbacks_are_distinct():
    parser = pytest.importorskip("prometheus_client.parser")
    fams = {
        f.name: f
        for f in parser.text_string_to_metric_families(to_prometheus(_null_names_under_two_callbacks()))
    }
    counts = [s for s in fams[METRIC].samples if s.name.endswith("_count")]
    label_sets = [tuple(sorted(s.labels.items())) for s in counts]
    assert len(set(label_sets)) == len(label_sets) == 2  # no series shadows another
    assert sorted((s.labels["callback"], s.labels["api"], s.value) for s in counts) == [
        ("CPU_LAUNCH", "<null>", 1.0),
        ("LAUNCH", "<null>", 3.0),
    ]
    buckets = [tuple(sorted(s.labels.items())) for s in fams[METRIC].samples if s.name.endswith("_bucket")]
    assert len(set(buckets)) == len(buckets)


def test_prometheus_protobuf_series_of_one_name_under_two_callbacks_are_distinct():
    pytest.importorskip("google.protobuf")
    fams = {f.name: f for f in _delimited(to_prometheus(_null_names_under_two_callbacks(), "protobuf"))}
    seen = {
        tuple(sorted((lp.name, lp.value) for lp in m.label)): m.histogram.sample_count
        for m in fams[METRIC].metric
    }
    assert len(seen) == len(fams[METRIC].metric) == 2
    assert sorted((dict(k)["callback"], n) for k, n in seen.items()) == [("CPU_LAUNCH", 1), ("LAUNCH", 3)]


def test_hdr_tags_of_one_name_under_two_callbacks_are_distinct(tmp_path):
    hdrh_log = pytest.importorskip("hdrh.log")
    from hdrh.histogram import HdrHistogram

    path = tmp_path / "two.hlog"
    to_hdr_log(_null_names_under_two_callbacks(), path)
    reader = hdrh_log.HistogramLogReader(str(path), HdrHistogram(1, 2**43, 3))
    seen = {}
    while (h := reader.get_next_interval_histogram()) is not None:
        seen[h.get_tag()] = h.get_total_count()
    reader.close()
    assert seen == {"runtime/LAUNCH/<null>": 3, "runtime/CPU_LAUNCH/<null>": 1}


def test_otlp_points_of_one_name_under_two_callbacks_keep_their_own_exemplars():
    t0 = 1_700_000_000_000_000_000
    slowest = pl.DataFrame(
        {
            "domain": ["runtime", "runtime"],
            "callback": ["LAUNCH", "CPU_LAUNCH"],
            "name": ["<null>", "<null>"],
            "thread_id": [1, 2],
            "start_unix_ns": [t0, t0],
            "duration_ns": [900, 40],
        }
    )
    snap = ValuesSnapshot(
        {("runtime", "LAUNCH", "<null>"): [900, 100], ("runtime", "CPU_LAUNCH", "<null>"): [40]},
        slowest=slowest,
    )
    (metric,) = to_otlp(snap)["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
    points = metric["exponentialHistogram"]["dataPoints"]
    seen = {
        next(a["value"]["stringValue"] for a in p["attributes"] if a["key"] == "callback"): [
            e["asInt"] for e in p.get("exemplars", [])
        ]
        for p in points
    }
    assert seen == {"LAUNCH": ["900"], "CPU_LAUNCH": ["40"]}
