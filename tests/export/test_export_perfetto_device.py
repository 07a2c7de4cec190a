"""Perfetto / Chrome trace of device events (kernels and collectives on one lane per (device,
stream), a process per device) beside the host's slowest calls, and of a loaded snapshot file.

The device events are a frame of the device-event log's schema, built by hand here and checked
to be `activity.DEVICE_EVENTS_SCHEMA`."""

from __future__ import annotations

import json
import warnings

import polars as pl
import pytest
from export_data import ValuesSnapshot

from mspti_lens import Session, Snapshot, activity
from mspti_lens.export import to_perfetto
from mspti_lens.export.perfetto import DEVICE_PID_BASE

T0 = 1_700_000_000_123_456_789  # CLOCK_REALTIME ns, as the activity records give them

# The contract's columns and types (activity.DEVICE_EVENTS_SCHEMA).
EVENTS_SCHEMA = {
    "kind": pl.String,
    "name": pl.String,
    "group": pl.String,
    "device_id": pl.UInt32,
    "stream_id": pl.UInt32,
    "correlation_id": pl.UInt64,
    "sequence": pl.UInt64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "duration_ns": pl.Int64,
    "bytes": pl.UInt64,
    "data_type": pl.String,
    "source": pl.String,
}


def device_events() -> pl.DataFrame:
    rows = [
        ("kernel", "MatMul_v3", None, 0, 2, 11, None, T0 + 20_000, T0 + 45_000, None),
        ("kernel", "Add", None, 0, 2, 12, None, T0 + 50_000, T0 + 51_500, None),
        ("hccl", "allreduce", "hccl_world", 0, 5, 13, 0, T0 + 60_000, T0 + 2_060_000, 4 << 20),
        ("kernel", "MatMul_v3", None, 1, 2, 14, None, T0 + 21_000, T0 + 46_000, None),
    ]
    return pl.DataFrame(
        [(*r[:9], r[8] - r[7], r[9], None, "simulated") for r in rows], schema=EVENTS_SCHEMA, orient="row"
    ).sort("start_ns")


def test_the_hand_built_frame_has_the_device_event_logs_schema():
    assert dict(activity.DEVICE_EVENTS_SCHEMA) == EVENTS_SCHEMA


class WithDeviceEvents(ValuesSnapshot):
    def device_events(self) -> pl.DataFrame:
        return device_events()


def slowest() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "domain": ["runtime", "hccl"],
            "callback": ["LAUNCH", "ALL_REDUCE"],
            "name": ["aclrtLaunchKernel", "HcclAllReduce"],
            "thread_id": [4242, 4242],
            "start_unix_ns": [T0, T0 + 55_000],
            "duration_ns": [7_001, 2_500_000],
        }
    )


def test_device_events_are_drawn_on_device_stream_lanes_on_the_host_timeline(tmp_path):
    snap = WithDeviceEvents({}, meta={"rank": 1, "host": "node-b"}, slowest=slowest())
    trace = to_perfetto(snap, tmp_path / "trace.json")
    assert json.loads((tmp_path / "trace.json").read_text()) == trace
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    dev = [e for e in xs if e["pid"] != 1]
    assert sorted((e["cat"], e["name"]) for e in dev) == [
        ("hccl", "allreduce"),
        ("kernel", "Add"),
        ("kernel", "MatMul_v3"),
        ("kernel", "MatMul_v3"),
    ]
    # One process per device of rank 1, one lane (tid) per stream.
    lanes = {(e["pid"] - DEVICE_PID_BASE * 2, e["tid"]) for e in dev}
    assert lanes == {(0, 2), (0, 5), (1, 2)}
    # One time axis: the base is the earliest event (a host call), device times are offsets from it.
    assert trace["otherData"]["base_time_unix_ns"] == T0
    mm = next(e for e in dev if e["name"] == "MatMul_v3" and e["pid"] == DEVICE_PID_BASE * 2)
    assert (mm["ts"], mm["dur"]) == (20.0, 25.0)
    ar = next(e for e in dev if e["cat"] == "hccl")
    assert ar["args"] == {
        "device": 0,
        "stream": 5,
        "group": "hccl_world",
        "correlation_id": 13,
        "sequence": 0,
        "bytes": 4 << 20,
        "source": "simulated",
    }
    meta = {(e["name"], e["pid"], e["tid"]): e["args"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert (
        meta[("process_name", DEVICE_PID_BASE * 2 + 1, 0)]["name"] == "rank 1 (node-b) · SIMULATED device 1"
    )
    assert meta[("thread_name", DEVICE_PID_BASE * 2, 5)]["name"] == "stream 5"


def test_device_events_load_with_htas_trace_parser(tmp_path):
    trace_parser = pytest.importorskip(
        "hta.common.trace_parser", reason="HolisticTraceAnalysis is not installed"
    )
    from hta.configs.parser_config import ParserConfig

    snap = WithDeviceEvents({}, meta={"rank": 0, "host": "node-a"}, slowest=slowest())
    path = tmp_path / "rank0.json"
    to_perfetto(snap, path)
    with warnings.catch_warnings():  # HTA's own pandas deprecation warnings are not ours
        warnings.simplefilter("ignore")
        _meta, df, symbols = trace_parser.parse_trace_dataframe(str(path), ParserConfig())
    xs = df[df["dur"] > 0]
    on_device = xs[xs["pid"] != 0]
    names = sorted(symbols.sym_table[i] for i in on_device["name"])
    assert names == ["Add", "MatMul_v3", "MatMul_v3", "allreduce"]
    assert set(on_device["pid"]) == {DEVICE_PID_BASE, DEVICE_PID_BASE + 1}
    assert sorted(int(d) for d in on_device["dur"]) == [1, 25, 25, 2000]  # µs (HTA rounds)
    host = xs[xs["pid"] == 0]
    assert sorted(symbols.sym_table[i] for i in host["name"]) == ["HcclAllReduce", "aclrtLaunchKernel"]


def test_a_device_events_frame_without_its_columns_is_refused():
    with pytest.raises(ValueError, match="device events frame lacks"):
        to_perfetto(ValuesSnapshot({}), device_events=pl.DataFrame({"name": ["k"]}))


def test_a_trace_of_a_loaded_snapshot_file_carries_its_slowest_calls_on_the_simulator(sim, tmp_path):
    sim.set_clock("virtual")
    try:
        with Session(library="sim", clock="mspti") as s:
            for w in (700, 300, 500):
                sim.call("aclrtLaunchKernel", work_ns=w)
            snap = s.snapshot()
    finally:
        sim.set_clock("real")
    snap.save(tmp_path / "w.parquet")
    loaded = Snapshot.load(tmp_path / "w.parquet")
    live, from_file = to_perfetto(snap), to_perfetto(loaded)
    spans = [e for e in from_file["traceEvents"] if e["ph"] == "X"]
    assert sorted(round(e["dur"] * 1000) for e in spans) == [300, 500, 700]
    assert from_file["traceEvents"] == live["traceEvents"]


# -- end to end: the device-event log of a simulated session -------------------------------------


@pytest.fixture
def activity_sim(sim):
    """The simulator on the virtual clock with an exact device model (as the event log's tests)."""
    from _sim_activity import ERAS, bind

    sim.reset()
    lib = bind(sim.lib)
    sim.set_clock("virtual")
    lib.msimSetDeviceModel(2000, 0, 1000)  # launch-to-start 2 us, records at once
    yield sim, lib
    lib.msimSetActivityEra(ERAS["follow"])
    lib.msimSetCommName(None)
    lib.msimSetThreadStream(0, 0)
    sim.set_clock("real")


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.SimulatedBackendWarning")
def test_a_simulated_sessions_device_events_are_drawn_on_their_lanes_on_the_simulator(activity_sim, tmp_path):
    if not hasattr(Snapshot, "device_events"):
        pytest.skip("Snapshot.device_events() (the device-event log) is not in this mspti-lens yet")
    sim, lib = activity_sim
    launch = sim.api("aclrtLaunchKernel")
    with Session(library="sim", enable=["LAUNCH"], clock="mspti", activity=["kernel", "hccl"]) as s:
        for stream in (1, 1, 3):
            lib.msimLaunch(launch, 5000, stream, 3000, 1, b"MatMul", None, 0)
        lib.msimSetThreadStream(0, 9)
        lib.msimSetCommName(b"tp0")
        lib.msimCallBytes(sim.api("HcclAllReduce"), 30_000, 1 << 20, 0, 8)
        snap = s.snapshot()
    ev = snap.device_events()
    assert sorted(ev["kind"].to_list()) == ["hccl", "kernel", "kernel", "kernel"]
    snap.save(tmp_path / "w.parquet")
    for trace in (to_perfetto(snap), to_perfetto(Snapshot.load(tmp_path / "w.parquet"))):
        base = trace["otherData"]["base_time_unix_ns"]
        dev = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] in ("kernel", "hccl")]
        got = sorted((e["pid"] - DEVICE_PID_BASE, e["tid"], round(e["ts"] * 1e3) + base) for e in dev)
        want = sorted(zip(ev["device_id"], ev["stream_id"], ev["start_ns"]))
        assert got == want
        assert {e["name"] for e in dev} == {"MatMul", "HcclAllReduce"}
        host = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 0]
        assert [e["name"] for e in host] == ["aclrtLaunchKernel"] * 3  # the slowest calls kept
        # Host and device share one axis (MSPTI's clock, here the virtual one): each kernel starts
        # after the first launch began, within the calls' microseconds, not years away.
        first_launch = min(e["ts"] for e in host)
        for e in dev:
            if e["cat"] == "kernel":
                assert 0 <= e["ts"] - first_launch <= 100.0, (e["ts"], first_launch)
    path = tmp_path / "trace.json"
    to_perfetto(snap, path)
    trace_parser = pytest.importorskip("hta.common.trace_parser")
    from hta.configs.parser_config import ParserConfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _meta, df, symbols = trace_parser.parse_trace_dataframe(str(path), ParserConfig())
    on_device = df[(df["dur"] > 0) & (df["pid"] != 0)]
    assert sorted(symbols.sym_table[i] for i in on_device["name"]) == ["HcclAllReduce"] + ["MatMul"] * 3
