"""`python -m mspti_lens export FILE.parquet --format ...` on a snapshot saved from the simulator,
and the live exports of a real session's snapshot (the histogram-v2 frames end to end)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mspti_lens import Session
from mspti_lens.__main__ import main
from mspti_lens.export import to_hdr_log, to_otlp, to_perfetto, to_prometheus


@pytest.fixture
def saved(sim, tmp_path):
    sim.set_clock("virtual")
    try:
        with Session(library="sim", clock="mspti") as s:
            sim.call("aclrtLaunchKernel", work_ns=4_000, count=300)
            sim.call("aclrtLaunchKernel", work_ns=90_000, count=3)
            sim.call("aclrtSynchronizeStream", work_ns=0, count=5)  # zero-ns calls: the zero bucket
            snap = s.snapshot()
    finally:
        sim.set_clock("real")
    path = tmp_path / "snap.parquet"
    snap.save(path)
    return snap, path


def test_every_format_exports_from_a_saved_snapshot_on_the_simulator(saved, tmp_path, capsys):
    snap, path = saved
    for fmt, suffix in [
        ("prometheus", "prom"),
        ("prometheus-protobuf", "pb"),
        ("otlp", "json"),
        ("hdr", "hlog"),
        ("perfetto", "trace.json"),
    ]:
        out = tmp_path / f"out.{suffix}"
        assert main(["export", str(path), "--format", fmt, "--out", str(out), "--rank", "5"]) == 0
        assert out.stat().st_size > 0
    text = (tmp_path / "out.prom").read_text()
    assert 'api="aclrtLaunchKernel",rank="5"' in text
    assert 'mspti_lens_call_duration_nanoseconds_count{domain="runtime",api="aclrtLaunchKernel"' in text
    otlp = json.loads((tmp_path / "out.json").read_text())
    points = otlp["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["exponentialHistogram"]["dataPoints"]
    by_api = {
        next(a["value"]["stringValue"] for a in p["attributes"] if a["key"] == "api"): p for p in points
    }
    assert by_api["aclrtLaunchKernel"]["count"] == "303"
    assert by_api["aclrtSynchronizeStream"]["zeroCount"] == "5"
    assert "Tag=runtime/aclrtLaunchKernel" in (tmp_path / "out.hlog").read_text()
    assert "rank 5" in (tmp_path / "out.trace.json").read_text()
    # The saved file keeps the slowest calls, so the exports of it carry them as the live ones do.
    trace = json.loads((tmp_path / "out.trace.json").read_text())
    spans = sorted(round(e["dur"] * 1000) for e in trace["traceEvents"] if e["ph"] == "X")
    assert len(spans) == len(snap.slowest()) and spans[-3:] == [90_000] * 3
    assert sorted(int(e["asInt"]) for e in by_api["aclrtLaunchKernel"]["exemplars"])[-3:] == [90_000] * 3


def test_export_to_stdout_as_a_subprocess_on_the_simulator(saved):
    _snap, path = saved
    r = subprocess.run(
        [sys.executable, "-m", "mspti_lens", "export", str(path), "--format", "prometheus"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "# TYPE mspti_lens_call_duration_nanoseconds histogram" in r.stdout


def test_bad_cli_input_is_one_clear_error(saved, tmp_path, capsys):
    _snap, path = saved
    assert main(["export", str(tmp_path / "missing.parquet"), "--format", "otlp"]) == 2
    assert "no snapshot file" in capsys.readouterr().err
    assert main(["export", str(path), "--format", "hdr", "--otlp-url", "http://127.0.0.1:1"]) == 2
    assert "--otlp-url goes with --format otlp" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["export", str(path), "--format", "csv"])
    assert "invalid choice: 'csv'" in capsys.readouterr().err


def test_a_live_snapshot_exports_its_exact_counts_on_the_simulator(saved):
    snap, _path = saved
    s = {r["name"]: r for r in snap.summary().iter_rows(named=True)}
    text = to_prometheus(snap)
    count_line = next(
        ln
        for ln in text.splitlines()
        if ln.startswith("mspti_lens_call_duration_nanoseconds_count{") and 'api="aclrtLaunchKernel"' in ln
    )
    assert count_line.endswith(" 303")
    points = to_otlp(snap)["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["exponentialHistogram"]
    for p in points["dataPoints"]:
        api = next(a["value"]["stringValue"] for a in p["attributes"] if a["key"] == "api")
        assert int(p["count"]) == s[api]["num_calls"]
        assert p["sum"] == float(s[api]["total_ns"])
        assert int(p["zeroCount"]) + sum(
            int(c) for c in p.get("positive", {}).get("bucketCounts", [])
        ) == int(p["count"])
    assert "HIST" in to_hdr_log(snap)
    trace = to_perfetto(snap)
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert sorted(round(e["dur"] * 1000) for e in xs if e["name"] == "aclrtLaunchKernel")[-3:] == [90_000] * 3


def test_a_live_workloads_trace_is_valid_json_on_the_simulator(sim, tmp_path):
    with Session(library="sim") as s:
        sim.run_workload("training", steps=3, threads=2, ranks=8, seed=1)
        snap = s.snapshot()
    path = tmp_path / "trace.json"
    to_perfetto(snap, path)
    doc = json.loads(path.read_text())
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(snap.slowest()) > 0
    assert all(isinstance(e["args"].get("start"), str) for e in spans)
