"""Replay of PyTorch-profiler (Kineto) traces on the simulator's virtual clock: per-API counts equal
the trace's and p50/p90/p99/max are within the histogram's error of the exact values. Always on the
small three-rank job this project writes (tests/kineto_traces.py); on real traces too where
$MSPTI_LENS_TRACES names a directory of them (else those tests skip, saying so)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from mspti_lens import Session, _native
from mspti_lens.sim.replay import Trace

from kineto_traces import (
    ALLREDUCE_US,
    LAUNCH_US,
    LAUNCHES,
    NO_TRACES,
    RANKS,
    STEPS,
    SYNC_US,
    TRACES_VAR,
    job_trace,
    real_traces,
)

REL = _native.MAX_RELATIVE_ERROR
REAL = real_traces()


def real(name: str) -> Trace:
    if name not in REAL:
        pytest.skip(NO_TRACES if not REAL else f"{name} is not in ${TRACES_VAR}")
    return Trace.read(REAL[name])


@pytest.fixture(scope="module")
def job_files(tmp_path_factory) -> list:
    """The synthetic job's traces, one file per rank, gzip'd as Kineto writes them."""
    where = tmp_path_factory.mktemp("kineto")
    files = []
    for rank in range(RANKS):
        f = where / f"rank{rank}.json.gz"
        f.write_bytes(gzip.compress(json.dumps(job_trace(rank)).encode()))
        files.append(f)
    return files


def test_the_jobs_calls_map_with_their_counts_and_durations(job_files):
    for rank, f in enumerate(job_files):
        t = Trace.read(f)
        assert dict(t.counts()) == {
            "aclrtSetDevice": 1,
            "aclrtMalloc": 2,
            "aclrtFree": 2,
            "aclrtMemcpyAsync": STEPS,
            "aclrtLaunchKernel": STEPS * (LAUNCHES + rank),
            "HcclAllReduce": STEPS,
            "HcclBroadcast": STEPS // 2,
            "aclrtSynchronizeStream": STEPS,
        }
        # What has no MSPTI counterpart is counted, not dropped: the event polls, and the c10d ops
        # whose record_param_comms (with a collective name) is what is replayed.
        assert dict(t.skipped) == {
            "cudaEventQuery": STEPS,
            "c10d::allreduce_ (replayed as its record_param_comms)": STEPS,
            "c10d::broadcast_ (replayed as its record_param_comms)": STEPS // 2,
        }
        assert set(t.durations("HcclAllReduce")) == {int(ALLREDUCE_US * 1000)}
        assert set(t.durations("aclrtSynchronizeStream")) == {
            int((SYNC_US + 30 * (rank == RANKS - 1)) * 1000)
        }
        assert sorted(set(t.durations("aclrtLaunchKernel"))) == sorted(
            {int((LAUNCH_US[j % 4] + rank / 8) * 1000) for j in range(LAUNCHES + rank)}
        )


def check_replay(sim, trace: Trace) -> None:
    assert trace.calls, "nothing mappable"
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


@pytest.mark.parametrize("rank", range(RANKS))
def test_replay_of_each_rank_of_the_job_matches_its_trace_exactly_on_the_simulator(sim, job_files, rank):
    check_replay(sim, Trace.read(job_files[rank]))


@pytest.mark.parametrize("name", sorted(REAL) or ["no-real-traces"])
def test_replay_of_a_real_trace_matches_it_exactly_on_the_simulator(sim, name):
    check_replay(sim, real(name))


def test_mapping_and_skips_of_real_traces_are_reported():
    t = real("a100_2rank_nccl.json.gz")
    c = t.counts()
    assert c["aclrtLaunchKernel"] == 2550 and c["aclrtLaunchKernelWithConfig"] == 150
    assert c["aclrtMemcpyAsync"] == 960
    assert c["HcclAllReduce"] == 15 and c["HcclBroadcast"] == 6
    assert t.skipped["cudaEventRecord"] == 1077 and t.skipped["record_param_comms:wait"] == 6
    # Older traces without "Collective name" fall back to the c10d operators.
    v = real("sampled_128rank_rank0.json.gz").counts()
    assert v["HcclAllReduce"] == 4 and v["HcclAlltoAll"] == 4 and v["HcclAllGather"] == 2
    hip = real("mi250_hip_minitoy.json.gz").counts()
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


def test_gzip_and_plain_json_read_alike(tmp_path, job_files):
    raw = gzip.decompress(job_files[1].read_bytes())
    (tmp_path / "plain.json").write_bytes(raw)
    a = Trace.read(tmp_path / "plain.json")
    b = Trace.from_document(json.loads(raw))
    assert a.counts() == b.counts() and len(a.calls) == len(b.calls)
