"""Trace replay drops nothing silently. Every candidate event that is not replayed is
counted by kind (the CLI shows the top 8 and says how many more), bad ts/dur is bad input, times are
read without float loss, and real-clock replay keeps each nested call's own duration and does not
wait out a call longer than the histogram's range. The traces are small synthetic ones that follow
the patterns of real Kineto traces (HTA's trace_diff control trace: record_param_comms events with
no collective name, some inside a c10d op and some outside any)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mspti_lens import Session, _native
from mspti_lens.sim.replay import Trace


def x(name, ts, dur, cat="cuda_runtime", tid=1, **args):
    e = {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def write(tmp_path: Path, events: list, text: str | None = None) -> Path:
    p = tmp_path / "trace.json"
    p.write_text(text if text is not None else json.dumps({"traceEvents": events}))
    return p


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mspti_lens", *args], capture_output=True, text=True, timeout=240
    )


NO_C10D = "record_param_comms without a collective name or enclosing c10d op"
IN_C10D = "record_param_comms without a collective name (inside its c10d op, which is replayed)"


def test_collectives_without_a_c10d_op_are_counted_not_dropped():
    # An older trace (no "Collective name"): an allreduce through c10d, and all_to_all exchanges
    # issued by a custom op with no c10d op around their record_param_comms.
    events = [
        x("c10d::allreduce_", 100, 50, cat="cpu_op"),
        x("record_param_comms", 110, 20, cat="cpu_op"),
        *[x("All2All_Pooled_Req", 1000 + 100 * i, 60, cat="cpu_op") for i in range(3)],
        *[x("record_param_comms", 1010 + 100 * i, 30, cat="cpu_op") for i in range(3)],
        x("cudaLaunchKernel", 2000, 5),
    ]
    t = Trace.from_document({"traceEvents": events})
    assert t.counts() == {"HcclAllReduce": 1, "aclrtLaunchKernel": 1}
    assert t.skipped == {NO_C10D: 3, IN_C10D: 1}
    # Every API-call candidate is accounted for: replayed, skipped or invalid.
    candidates = 1 + 1 + 3 + 1  # the c10d op, its record_param_comms, 3 outside, the launch
    assert len(t.calls) + sum(t.skipped.values()) + sum(t.invalid.values()) == candidates


def test_with_collective_names_the_c10d_duplicates_are_counted_too():
    events = [
        x("c10d::allreduce_", 100, 50, cat="cpu_op"),
        x("record_param_comms", 110, 20, cat="cpu_op", **{"Collective name": "allreduce"}),
        x("cuLaunchKernel", 200, 3, cat="cuda_driver"),
    ]
    t = Trace.from_document({"traceEvents": events})
    assert t.counts() == {"HcclAllReduce": 1}
    assert t.skipped == {"c10d::allreduce_ (replayed as its record_param_comms)": 1, "cuLaunchKernel": 1}


def test_every_skipped_kind_is_counted_and_the_cli_shows_the_top_8_and_the_rest(tmp_path):
    kinds = [f"cudaUnmapped{i}" for i in range(10)]
    events = [x("cudaMalloc", 0, 2)]
    ts = 10
    for i, k in enumerate(kinds):
        for _ in range(i + 1):
            events.append(x(k, ts, 1))
            ts += 5
    p = write(tmp_path, events)
    assert Trace.read(p).skipped == {k: i + 1 for i, k in enumerate(kinds)}
    r = cli("replay", str(p), "--virtual")
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("skipped"))
    shown = sorted((line.index(f"{k} x"), k) for k in kinds if f"{k} x" in line)
    assert [k for _, k in shown] == kinds[:1:-1]  # the 8 most frequent, most first
    assert "and 2 more kinds (3 events)" in line


def test_bad_ts_or_dur_is_reported_as_bad_input(tmp_path):
    events = [
        x("cudaLaunchKernel", 10, 5),
        x("cudaLaunchKernel", "ten", 5),
        x("cudaMalloc", 20, -1),
        x("cudaEventQuery", None, 1),
        {"ph": "X", "cat": "cuda_runtime", "pid": 7, "tid": 1, "ts": 1, "dur": 1},
    ]
    t = Trace.from_document({"traceEvents": events})
    assert len(t.calls) == 1 and not t.skipped
    assert t.invalid == {
        "cudaLaunchKernel": 1,
        "cudaMalloc": 1,
        "cudaEventQuery": 1,
        "cuda_runtime event without a name": 1,
    }
    r = cli("replay", str(write(tmp_path, events)), "--virtual")
    assert r.returncode == 0, r.stderr
    assert "bad input" in r.stdout and "cudaMalloc x1" in r.stdout
    assert "no MSPTI counterpart" not in r.stdout


def test_timestamps_are_read_without_float_loss(tmp_path):
    # Epoch µs with a ns fraction: 19 significant digits, more than a double holds (253 ns off).
    text = (
        '{"traceEvents": ['
        '{"ph": "X", "cat": "cuda_runtime", "name": "cudaMalloc", "pid": 1, "tid": 1,'
        ' "ts": 1661203462602585.123, "dur": 0.100},'
        '{"ph": "X", "cat": "cuda_runtime", "name": "cudaFree", "pid": 1, "tid": 1,'
        ' "ts": 1661203462602585.223, "dur": 0.007}]}'
    )
    t = Trace.read(write(tmp_path, [], text))
    assert [(c.ts_ns, c.dur_ns) for c in t.calls] == [
        (1661203462602585123, 100),
        (1661203462602585223, 7),
    ]
    # Back to back, not overlapping: one lane, not a false overlap on an extra lane.
    assert len(t.lanes()) == 1


def test_a_nested_call_keeps_its_own_duration_in_real_clock_replay_on_the_simulator(sim, tmp_path):
    # Inside a 2 ms call: 400 back-to-back 1 ns calls (far denser than callbacks can fire, so the
    # schedule falls behind), then a 3 µs call. Each call must still last its own duration.
    events = [x("cudaStreamSynchronize", 0, 2000)]
    events += [x("cudaMemsetAsync", round(1 + 0.002 * i, 3), 0.001) for i in range(400)]
    events += [x("cudaMalloc", 10, 3)]
    t = Trace.read(write(tmp_path, events))
    assert t.counts() == {"aclrtSynchronizeStream": 1, "aclrtMemsetAsync": 400, "aclrtMalloc": 1}
    with Session(library="sim", clock="monotonic") as s:
        sim.replay(t)
        snap = s.snapshot()
    mins = dict(snap.summary().select("name", "min_ns").iter_rows())
    assert mins["aclrtMalloc"] >= 3000
    assert mins["aclrtMemsetAsync"] >= 1
    assert mins["aclrtSynchronizeStream"] >= 2_000_000


def test_a_call_beyond_the_histogram_range_is_not_waited_for_on_the_simulator(sim, tmp_path):
    forever_us = 10**12  # 11.6 days; the histogram's range ends at _native.RANGE_MAX_NS
    assert forever_us * 1000 > _native.RANGE_MAX_NS
    events = [x("cudaStreamSynchronize", 0, forever_us), x("cudaMalloc", 5, 3), x("cudaFree", 10, 2)]
    # First in a subprocess (it has a timeout): the old code waited the call out in real time.
    r = cli("replay", str(write(tmp_path, events)))
    assert r.returncode == 0, r.stderr
    assert "not replayed in real time" in r.stdout and "aclrtSynchronizeStream x1" in r.stdout
    t = Trace.from_document({"traceEvents": events})
    with Session(library="sim", clock="monotonic") as s:
        result = sim.replay(t)
        snap = s.snapshot()
    assert result.not_replayed == {"aclrtSynchronizeStream": 1}
    got = dict(snap.summary().select("name", "num_calls").iter_rows())
    assert got == {"aclrtMalloc": 1, "aclrtFree": 1}
    # On the virtual clock nothing is waited for, so the call is replayed (beyond the range).
    sim.set_clock("virtual")
    with Session(library="sim", clock="mspti") as s:
        assert sim.replay(t).not_replayed == {}
        assert s.snapshot().total_calls == 3
