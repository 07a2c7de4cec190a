"""The Perfetto trace of fixed frames is, to the byte, the one recorded in
tests/data/perfetto/golden_trace.json: host calls with extra columns, MSTX ranges on host threads
and device streams, kernels, device events of every kind, unnamed ranges and events, and a
snapshot whose frames hold statistics rather than timed events. Any change to the trace's layout
shows here as the first differing event."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
from export_data import ValuesSnapshot

from mspti_lens.export import to_perfetto

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "perfetto" / "golden_trace.json"
T0 = 1_700_000_000_123_456_789  # CLOCK_REALTIME ns


class TimedSnapshot(ValuesSnapshot):
    """A stand-in whose frames are timed events, as a live Snapshot's are."""

    def slowest(self) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "domain": ["runtime", "runtime", "hccl", "runtime"],
                "callback": ["LAUNCH", "MALLOC", "ALL_REDUCE", "LAUNCH"],
                "name": ["aclrtLaunchKernel", "aclrtMalloc", "HcclAllReduce", "aclrtLaunchKernel"],
                "thread_id": [7, 7, 7, 9],
                "start_unix_ns": [T0 + 1_000, T0 + 1_000, T0 + 90_000, T0 + 500],
                "duration_ns": [5_000, 40_000, 2_000_000, 3_333],
                "start": [datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc)] * 4,
                "note": ["a", None, "c", "d"],
            }
        )

    def mstx(self) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "name": ["step", None, "fwd"],
                "domain": ["default", "default", "train"],
                "start_unix_ns": [T0, T0 + 2_000, T0 + 3_000],
                "end_unix_ns": [T0 + 3_000_000, T0 + 1_000, T0 + 80_000],
                "thread_id": [7, None, None],
                "device_id": [None, 0, 1],
                "stream_id": [None, None, 4],
            }
        )

    def kernels(self) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "name": ["MatMul", "Add"],
                "device_id": [0, 1],
                "stream_id": [2, 4],
                "start_unix_ns": [T0 + 10_000, T0 + 12_345],
                "end_unix_ns": [T0 + 30_000, T0 + 12_000],
                "correlation_id": [11, 12],
            }
        )

    def device_events(self) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "kind": ["kernel", "communication", "hccl"],
                "name": ["Cast", None, "allgather"],
                "device_id": [0, 0, 2],
                "stream_id": [2, 5, 5],
                "start_ns": [T0 + 40_000, T0 + 50_000, T0 + 60_000],
                "end_ns": [T0 + 41_000, T0 + 70_000, T0 + 65_000],
                "duration_ns": [1_000, 20_000, 5_000],
                "group": [None, "world", "world"],
                "bytes": [None, 1 << 20, 4096],
            }
        )


class StatisticsSnapshot(ValuesSnapshot):
    """A stand-in whose frames are per-name statistics: nothing to draw, and said so."""

    def slowest(self) -> pl.DataFrame:
        return pl.DataFrame({"name": ["aclrtMalloc"], "num_calls": [3]})

    def kernels(self) -> pl.DataFrame:
        return pl.DataFrame({"name": ["MatMul"], "total_ns": [10]})


def traces(tmp_path: Path) -> dict:
    written = tmp_path / "trace.json"
    timed = to_perfetto(TimedSnapshot({}, meta={"rank": 3, "host": "node-c"}), written)
    on_disk = json.loads(written.read_text())
    assert on_disk == timed  # what is written is what is returned
    return {
        "timed": timed,
        "statistics": to_perfetto(StatisticsSnapshot({}, meta={"simulated": False}), rank="w1", host="h"),
        "explicit": to_perfetto(
            ValuesSnapshot({}, meta={"rank": 0, "host": "x"}),
            slowest=TimedSnapshot({}).slowest().head(2),
            kernels=TimedSnapshot({}).kernels(),
            rank=5,
        ),
    }


def test_the_trace_of_fixed_frames_is_the_recorded_one(tmp_path):
    got = traces(tmp_path)
    want = json.loads(GOLDEN.read_text())
    for case in want:
        g, w = got[case], want[case]
        assert g.keys() == w.keys(), case
        assert {k: v for k, v in g.items() if k != "traceEvents"} == {
            k: v for k, v in w.items() if k != "traceEvents"
        }, case
        for i, (ge, we) in enumerate(zip(g["traceEvents"], w["traceEvents"])):
            assert ge == we, f"{case}: event {i} differs"
        assert len(g["traceEvents"]) == len(w["traceEvents"]), case
    assert got.keys() == want.keys()
    # The byte form too: key order and float formatting are part of the file.
    assert json.dumps(got, indent=1) + "\n" == GOLDEN.read_text()


if __name__ == "__main__":  # records the golden file from the current to_perfetto
    import sys
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    with tempfile.TemporaryDirectory() as d:
        GOLDEN.write_text(json.dumps(traces(Path(d)), indent=1) + "\n")
