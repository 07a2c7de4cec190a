"""The HCCL calls' ENTER times from the Callback API alone, on the simulator's virtual clock: each
call's arrival is its exact ENTER, numbered per op from the Session's start, bounded per thread
(past it dropped and counted), and a recorded window carries them for Run.skew()."""

from __future__ import annotations

import ctypes

import pytest

import mspti_lens
from mspti_lens import Session, _native
from mspti_lens.runs import writer
from mspti_lens.runs.writer import WindowWriter

pytestmark = pytest.mark.filterwarnings("ignore::mspti_lens.errors.SimulatedBackendWarning")
T0 = 5_000_000_000_000_000_000
CALL_NS = 30_000


def _virtual(sim) -> None:
    sim.set_clock("virtual")
    sim.lib.msimVirtualSet.argtypes = [ctypes.c_uint64]
    sim.lib.msimVirtualSet(T0)


def test_each_hccl_call_arrives_at_its_exact_enter_numbered_per_op(sim):
    _virtual(sim)
    ar, bc, launch = sim.api("HcclAllReduce"), sim.api("HcclBroadcast"), sim.api("aclrtLaunchKernel")
    with Session(library="sim", enable=["hccl", "LAUNCH"], clock="mspti"):
        _native.take_collective_arrivals()  # nothing of earlier tests' runs is left anyway
        for api in (ar, launch, bc, ar, ar):
            assert sim.lib.msimCall(api, CALL_NS) == 0
        a = _native.take_collective_arrivals()
        again = _native.take_collective_arrivals()
    assert a["name"] == ["HcclAllReduce", "HcclBroadcast", "HcclAllReduce", "HcclAllReduce"]
    assert a["sequence"] == [0, 0, 1, 2]
    # Every call takes CALL_NS of virtual time; the launch in between is not an arrival.
    assert a["start_ns"] == [T0 + i * CALL_NS for i in (0, 2, 3, 4)]
    assert a["dropped"] == 0 and again["name"] == [] and again["dropped"] == 0
    # A new Session's calls are numbered from 0 again.
    with Session(library="sim", enable=["hccl"], clock="mspti"):
        sim.lib.msimCall(ar, CALL_NS)
        b = _native.take_collective_arrivals()
    assert (b["name"], b["sequence"]) == (["HcclAllReduce"], [0])
    # A closed Session's arrivals not taken go with it: a later window writer never takes them.
    with Session(library="sim", enable=["hccl"], clock="mspti"):
        sim.lib.msimCall(ar, CALL_NS)
    assert _native.take_collective_arrivals()["name"] == []


def test_a_threads_arrivals_past_the_bound_are_dropped_and_counted(sim):
    _virtual(sim)
    ar = sim.api("HcclAllReduce")
    extra = 5
    with Session(library="sim", enable=["hccl"], clock="mspti"):
        sim.lib.msimCallMany.argtypes = [ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64]
        assert sim.lib.msimCallMany(ar, 1_000, _native.ARRIVALS_PER_THREAD + extra) == 0
        a = _native.take_collective_arrivals()
        sim.lib.msimCall(ar, 1_000)  # the ring is free again; numbering goes on past the dropped
        b = _native.take_collective_arrivals()
    assert len(a["name"]) == _native.ARRIVALS_PER_THREAD and a["dropped"] == extra
    assert a["sequence"] == list(range(_native.ARRIVALS_PER_THREAD))
    assert b["sequence"] == [_native.ARRIVALS_PER_THREAD + extra] and b["dropped"] == 0


def test_recorded_windows_keep_their_arrivals_in_one_bounded_file_and_run_skew_uses_them(
    sim, tmp_path, monkeypatch
):
    _virtual(sim)
    ar = sim.api("HcclAllReduce")
    monkeypatch.setattr(writer, "MAX_ARRIVAL_ROWS", 4)
    s = Session(library="sim", enable=["hccl"], clock="mspti").start()
    w = WindowWriter(s, tmp_path, 60.0, host="h", rank=(0, "RANK"))
    try:
        for calls in (3, 2):
            for _ in range(calls):
                sim.lib.msimCall(ar, CALL_NS)
            w.write_window(final=calls == 2)
    finally:
        s.close()
    # One file per process, rewritten with each window: the newest MAX_ARRIVAL_ROWS of its calls.
    assert [p.name for p in tmp_path.glob("host=h/rank=0/*.parquet") if not p.name.startswith("window-")] == [
        writer.arrivals_name(w._pid)
    ]
    run = mspti_lens.open_run(tmp_path)
    a = run.collective_arrivals()
    assert a["sequence"].to_list() == [1, 2, 3, 4] and a["group"].is_null().all()
    assert a["start_ns"].to_list() == [T0 + i * CALL_NS for i in (1, 2, 3, 4)]
    assert run.device_events().height == 0  # arrivals are no device data
    assert run.files()["arrivals_dropped"].to_list() == [0, 0]
    k = run.skew()
    # One rank: every instance is complete and nobody is late (within the 0 ns clock error).
    assert k["basis"].to_list() == ["callbacks"] * 4 and (k["spread_ns"] == 0).all()
    assert k["last_rank"].is_null().all()
