"""Replay of the real PyTorch-profiler traces on the simulator's virtual clock: per-API counts equal
the trace's and p50/p90/p99/max are within the histogram's error of the exact values."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from mspti_lens import Session, _native
from mspti_lens.sim.replay import Trace

from conftest import TRACES

REL = _native.MAX_RELATIVE_ERROR
FILES = sorted(p.name for p in TRACES.glob("*.json.gz"))


def test_the_traces_are_there():
    assert len(FILES) == 5, FILES


@pytest.mark.parametrize("name", FILES)
def test_replay_matches_the_trace_exactly_on_the_simulator(sim, name):
    trace = Trace.read(TRACES / name)
    assert trace.calls, f"{name}: nothing mappable"
    sim.set_clock("virtual")
    with Session(library="sim", clock="mspti") as s:
        result = sim.replay(trace)
        snap = s.snapshot()
    assert result.calls == len(trace.calls)
    assert snap.unmatched == 0 and snap.in_flight == 0
    df = snap.summary()
    got = dict(df.select("name", "num_calls").iter_rows())
    assert got == dict(trace.counts())
    for row in df.iter_rows(named=True):
        d = np.sort(np.array(trace.durations(row["name"]), dtype=np.int64))
        assert row["total_ns"] == int(d.sum())
        assert row["min_ns"] == int(d[0]) and row["max_ns"] == int(d[-1])
        for col, q in (("med_ns", 0.5), ("p90_ns", 0.9), ("p99_ns", 0.99)):
            exact = float(np.quantile(d, q, method="inverted_cdf"))
            assert abs(row[col] - exact) <= exact * REL + 0.5, (row["name"], col, exact, row[col])


def test_mapping_and_skips_are_reported():
    t = Trace.read(TRACES / "a100_2rank_nccl.json.gz")
    c = t.counts()
    assert c["aclrtLaunchKernel"] == 2550 and c["aclrtLaunchKernelWithConfig"] == 150
    assert c["aclrtMemcpyAsync"] == 960
    assert c["HcclAllReduce"] == 15 and c["HcclBroadcast"] == 6
    assert t.skipped["cudaEventRecord"] == 1077 and t.skipped["record_param_comms:wait"] == 6
    # Older traces without "Collective name" fall back to the c10d operators.
    v = Trace.read(TRACES / "sampled_128rank_rank0.json.gz").counts()
    assert v["HcclAllReduce"] == 4 and v["HcclAlltoAll"] == 4 and v["HcclAllGather"] == 2
    hip = Trace.read(TRACES / "mi250_hip_minitoy.json.gz").counts()
    assert hip["aclrtLaunchKernel"] == 12 and hip["aclrtLaunchKernelV2"] == 2


def test_overlapping_calls_keep_their_durations_on_extra_lanes():
    doc = {
        "traceEvents": [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaMalloc", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaFree", "pid": 1, "tid": 1, "ts": 5, "dur": 10},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpy", "pid": 1, "tid": 1, "ts": 2, "dur": 3},
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaEventQuery",
                "pid": 1,
                "tid": 1,
                "ts": 1,
                "dur": 1,
            },
        ]
    }
    t = Trace.from_document(doc)
    lanes = t.lanes()
    assert [[c.api for c in lane] for lane in lanes] == [["aclrtMalloc", "aclrtMemcpy"], ["aclrtFree"]]
    assert t.skipped == {"cudaEventQuery": 1}


def test_real_clock_replay_takes_the_trace_durations_on_the_simulator(sim):
    # Busy-waited durations on the real clock are at least the trace's. How much longer depends on
    # the machine's load, so no upper bound here: the exact durations are checked on the virtual
    # clock (test_replay_matches_the_trace_exactly_on_the_simulator).
    doc = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaStreamSynchronize",
                "pid": 1,
                "tid": 7,
                "ts": i * 10_000.0,
                "dur": 2_000.0,
            }
            for i in range(5)
        ]
    }
    with Session(library="sim") as s:
        sim.replay(Trace.from_document(doc))
        row = s.snapshot().summary().row(0, named=True)
    assert row["num_calls"] == 5 and row["min_ns"] >= 2_000_000


@pytest.mark.parametrize(
    "content,msg",
    [
        (b"not json", "not a readable"),
        (b'{"foo": 1}', "no traceEvents"),
        (b"\x1f\x8bgarbage", "not a readable"),
    ],
)
def test_bad_trace_files_are_rejected_clearly(tmp_path, content, msg):
    p = tmp_path / "t.json"
    p.write_bytes(content)
    with pytest.raises(ValueError, match=msg):
        Trace.read(p)


def test_gzip_and_plain_json_read_alike(tmp_path):
    raw = gzip.decompress((TRACES / "mi250_hip_minitoy.json.gz").read_bytes())
    (tmp_path / "plain.json").write_bytes(raw)
    a = Trace.read(tmp_path / "plain.json")
    b = Trace.from_document(json.loads(raw))
    assert a.counts() == b.counts() and len(a.calls) == len(b.calls)
