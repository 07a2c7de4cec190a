"""The device event log (Snapshot.device_events()) on the bundled simulator: the contract's
schema and values, sequence numbers across windows, the per-window cap, files, merge, and the
clock bridge through msptiActivityRegisterTimestampCallback."""

from __future__ import annotations

import ctypes

import polars as pl
import pytest
from _sim_activity import AHEAD_NS, ERAS, bind

from mspti_lens import Session, Snapshot
from mspti_lens.activity import DEVICE_EVENTS_SCHEMA

pytestmark = pytest.mark.filterwarnings("ignore::mspti_lens.errors.SimulatedBackendWarning")


def fresh(sim):
    """The simulator from its defaults, on the virtual clock (far ahead of real time, so the
    calls keep the models' spacing), with an exact device model."""
    sim.reset()
    lib = bind(sim.lib)
    sim.set_clock("virtual")
    lib.msimVirtualSet(AHEAD_NS)
    lib.msimSetDeviceModel(2000, 0, 1000)  # launch-to-start 2 us, records at once
    return lib


@pytest.fixture
def L(sim):
    lib = fresh(sim)
    yield lib
    lib.msimSetActivityEra(ERAS["follow"])
    lib.msimSetCommName(None)
    lib.msimSetThreadStream(0, 0)


def kernels(sim, L, n: int, stream: int = 1, kernel_ns: int = 3000) -> None:
    api = sim.api("aclrtLaunchKernel")
    for _ in range(n):
        L.msimLaunch(api, 5000, stream, kernel_ns, 1, b"MatMul", None, 0)


def collectives(sim, L, ops: list[tuple[str, bytes, int]]) -> None:
    """(op, communicator, bytes) per call, on HCCL stream 9."""
    L.msimSetThreadStream(0, 9)
    for op, group, nbytes in ops:
        L.msimSetCommName(group)
        L.msimCallBytes(sim.api(op), 30_000, nbytes, 0, 8)
    L.msimSetThreadStream(0, 0)
    L.msimSetCommName(None)


KINDS = ["kernel", "communication", "hccl"]


def test_the_event_log_has_the_contracts_schema_and_every_records_values_on_the_simulator(sim, L):
    with Session(library="sim", enable=["LAUNCH"], clock="mspti", activity=KINDS, join_sample=1.0) as s:
        kernels(sim, L, 3)
        collectives(sim, L, [("HcclAllReduce", b"tp0", 64 << 20), ("HcclAllGather", b"tp0", 4 << 20)])
        snap = s.snapshot()
    ev = snap.device_events()
    assert ev.schema == pl.Schema(DEVICE_EVENTS_SCHEMA)
    assert ev["start_ns"].is_sorted()
    assert (ev["duration_ns"] == ev["end_ns"] - ev["start_ns"]).all()
    assert set(ev["source"]) == {"simulated"}
    k = ev.filter(pl.col("kind") == "kernel")
    assert k["name"].to_list() == ["MatMul"] * 3 and k["duration_ns"].to_list() == [3000] * 3
    assert k["group"].is_null().all() and k["sequence"].is_null().all() and k["bytes"].is_null().all()
    assert set(k["stream_id"]) == {1} and (k["correlation_id"] > 0).all()
    # Every kernel of the log is one the histograms counted.
    assert len(k) == snap.kernels()["num_calls"].sum()
    # HCCL: bandwidth x duration, exact here: the data size MSPTI's hccl_calculator.cpp divides,
    # which for an all-gather counts every rank's part (8 ranks).
    for kind, names, nbytes in (
        ("communication", ["hcom_allReduce_", "hcom_allGather_"], [64 << 20, 4 << 20]),
        ("hccl", ["HcclAllReduce", "HcclAllGather"], [64 << 20, 8 * (4 << 20)]),
    ):
        c = ev.filter(pl.col("kind") == kind)
        assert c["name"].to_list() == names  # COMMUNICATION: HCCL's op names; HCCL: the functions
        assert c["group"].to_list() == ["tp0", "tp0"] and set(c["stream_id"]) == {9}
        assert c["sequence"].to_list() == [0, 0]  # one instance each of two (group, op) pairs
        assert c["bytes"].to_list() == nbytes
    assert snap.activity.counters["device_events_dropped"] == 0


def test_sequences_count_since_the_session_started_across_window_resets_on_the_simulator(sim, L):
    ops = [("HcclAllReduce", b"dp", 1 << 20), ("HcclAllReduce", b"tp", 1 << 20)]
    with Session(
        library="sim", enable=["LAUNCH"], clock="mspti", activity=["communication"], join_sample=1.0
    ) as s:
        collectives(sim, L, ops * 2)
        first = s.reset()
        collectives(sim, L, ops)
        second = s.snapshot()
    a, b = first.device_events(), second.device_events()
    assert list(zip(a["group"], a["sequence"])) == [("dp", 0), ("tp", 0), ("dp", 1), ("tp", 1)]
    # The closed window's events went with its snapshot; numbering carries on.
    assert list(zip(b["group"], b["sequence"])) == [("dp", 2), ("tp", 2)]


def test_the_cap_per_window_counts_what_it_drops_and_zero_turns_the_log_off_on_the_simulator(sim, L):
    with Session(
        library="sim", enable=["LAUNCH"], clock="mspti", activity=["kernel"], device_events=5, join_sample=1.0
    ) as s:
        kernels(sim, L, 8)
        snap = s.snapshot()
    assert len(snap.device_events()) == 5 and snap.activity.counters["device_events_dropped"] == 3
    assert snap.kernels()["num_calls"].sum() == 8  # the histograms keep everything
    with Session(
        library="sim", enable=["LAUNCH"], clock="mspti", activity=["kernel"], device_events=0, join_sample=1.0
    ) as s:
        kernels(sim, L, 4)
        snap = s.snapshot()
    assert len(snap.device_events()) == 0 and snap.activity.counters["device_events_dropped"] == 0
    assert snap.kernels()["num_calls"].sum() == 4


@pytest.mark.parametrize("bad", [-1, 1.5, "many", True, None, (1 << 24) + 1])
def test_bad_device_events_values_say_what_is_valid(bad):
    with pytest.raises(ValueError, match="device_events .* an int from 0"):
        Session(library="sim", activity=["kernel"], device_events=bad)


def test_no_activity_gives_an_empty_frame_with_the_schema_on_the_simulator(sim):
    with Session(library="sim", enable=["LAUNCH"]) as s:
        snap = s.snapshot()
    ev = snap.device_events()
    assert len(ev) == 0 and ev.schema == pl.Schema(DEVICE_EVENTS_SCHEMA)


def test_events_save_and_load_with_the_snapshot_file_on_the_simulator(sim, L, tmp_path):
    with Session(library="sim", enable=["LAUNCH"], clock="mspti", activity=KINDS, join_sample=1.0) as s:
        kernels(sim, L, 2)
        collectives(sim, L, [("HcclBroadcast", b"pp", 1 << 16)])
        snap = s.snapshot()
    snap.save(tmp_path / "s.parquet")
    back = Snapshot.load(tmp_path / "s.parquet")
    assert back.device_events().equals(snap.device_events()) and len(back.device_events()) == 4


def test_a_file_with_a_bad_event_kind_is_refused_and_an_older_file_loads_on_the_simulator(sim, L, tmp_path):
    import json

    import pyarrow.parquet as pq

    with Session(library="sim", enable=["LAUNCH"], clock="mspti", activity=["kernel"], join_sample=1.0) as s:
        kernels(sim, L, 1)
        snap = s.snapshot()
    p = tmp_path / "s.parquet"
    snap.save(p)
    t = pq.read_table(p)
    head = json.loads(t.schema.metadata[b"mspti_lens"])
    head["device"]["events"]["kind"] = ["warp"]
    pq.write_table(t.replace_schema_metadata({"mspti_lens": json.dumps(head)}), p)
    with pytest.raises(ValueError, match='unknown device event kind "warp"; valid kinds are kernel'):
        Snapshot.load(p)
    # A file written before the event log loads with an empty one (its histograms intact).
    del head["device"]["events"]
    pq.write_table(t.replace_schema_metadata({"mspti_lens": json.dumps(head)}), p)
    old = Snapshot.load(p)
    assert len(old.device_events()) == 0 and old.kernels()["num_calls"].sum() == 1


def run_windows(sim, L, split: bool) -> list[Snapshot]:
    """The same work as one window or two, each from the simulator's defaults (exact durations)."""
    fresh(sim)
    with Session(
        library="sim", enable=["LAUNCH"], clock="mspti", activity=KINDS + ["marker"], join_sample=1.0
    ) as s:
        kernels(sim, L, 5, kernel_ns=3000)
        collectives(sim, L, [("HcclAllReduce", b"tp0", 8 << 20)])
        out = [s.reset()] if split else []
        kernels(sim, L, 7, kernel_ns=9000)
        kernels(sim, L, 2, stream=2, kernel_ns=1000)
        collectives(sim, L, [("HcclAllReduce", b"tp0", 2 << 20), ("HcclAllGather", b"dp", 1 << 20)])
        out.append(s.snapshot())
    return out


def test_merge_keeps_device_data_exactly_on_the_simulator(sim, L):
    (whole,) = run_windows(sim, L, split=False)
    a, b = run_windows(sim, L, split=True)
    merged = a.merge(b)
    assert merged.activity is not None
    for frame in ("kernels", "launches", "collectives", "memcpy", "ranges"):
        got, want = getattr(merged, frame)(), getattr(whole, frame)()
        assert got.equals(want), frame
    assert merged.kernels()["num_calls"].sum() == 14
    hist = ("table", "key0", "key1", "key2", "metric", "lower_ns")
    from mspti_lens import activity

    assert activity.histogram(merged).sort(hist).equals(activity.histogram(whole).sort(hist))
    # Events concatenate (ordered by start); sequences are the session's, so they match the whole run.
    want = pl.concat([a.device_events(), b.device_events()]).sort("start_ns", maintain_order=True)
    assert merged.device_events().equals(want) and len(want) == 14 + 2 * 3
    strip = ["kind", "name", "group", "sequence", "duration_ns", "bytes"]
    assert merged.device_events().select(strip).equals(whole.device_events().select(strip))
    c = merged.activity.counters
    assert c["records"] == a.activity.counters["records"] + b.activity.counters["records"]
    # A snapshot without activity data merges as the other's.
    bare = Snapshot.from_histogram(whole.histogram().head(0))
    assert bare.activity is None and a.merge(bare).device_events().equals(a.device_events())


# -- the clock bridge --------------------------------------------------------------------------


def test_the_timestamp_callback_puts_records_on_the_sessions_clock_on_the_simulator(sim, L):
    # Newest dev has msptiActivityRegisterTimestampCallback: MSPTI takes every timestamp from our
    # callback (the session's clock on the CLOCK_REALTIME scale), not from its own clock, which
    # here is the simulator's virtual clock (set far ahead of real time).
    L.msimSetActivityEra(ERAS["newest"])
    with Session(
        library="sim", enable=["LAUNCH"], clock="monotonic", activity=["kernel"], join_sample=1.0
    ) as s:
        assert s.snapshot().meta["clock_bridge"] == "timestamp_callback"
        kernels(sim, L, 3)
        snap = s.snapshot()
    ev = snap.device_events()
    assert len(ev) == 3 and ((ev["start_ns"] > 10**18) & (ev["start_ns"] < AHEAD_NS)).all()  # realtime
    assert snap.launches()["kernel_num"].sum() == 3 and snap.activity.counters["clock_skew"] == 0
    # Closing unregisters it: MSPTI's clock is the simulator's (virtual) one again.
    t = ctypes.c_uint64(0)
    assert L.msptiGetTimestamp(ctypes.byref(t)) == 0 and t.value >= AHEAD_NS


def test_without_the_timestamp_callback_records_keep_msptis_clock_on_the_simulator(sim, L):
    L.msimSetActivityEra(ERAS["cann26"])  # no msptiActivityRegisterTimestampCallback
    with Session(
        library="sim", enable=["LAUNCH"], clock="monotonic", activity=["kernel"], join_sample=1.0
    ) as s:
        kernels(sim, L, 3)
        snap = s.snapshot()
    assert snap.meta["clock_bridge"] != "timestamp_callback"  # both clocks sampled, as before
    ev = snap.device_events()
    assert len(ev) == 3 and (ev["start_ns"] >= AHEAD_NS).all()  # the simulator's own (virtual) clock


def test_the_bridge_stays_off_when_the_session_runs_on_msptis_clock_on_the_simulator(sim, L):
    # clock="mspti" already is MSPTI's clock: no callback (the virtual clock keeps exact numbers).
    L.msimSetActivityEra(ERAS["newest"])
    with Session(library="sim", enable=["LAUNCH"], clock="mspti", activity=["kernel"], join_sample=1.0) as s:
        kernels(sim, L, 4)
        snap = s.snapshot()
    assert snap.meta["clock_bridge"] == "msptiGetTimestamp"
    la = snap.launches().row(0, named=True)
    assert (la["kernel_num"], la["queue_med_ns"], la["kernel_med_ns"]) == (4, 7000, 3000)
