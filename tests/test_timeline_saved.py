"""`Snapshot.timeline()` survives the snapshot file and `Snapshot.merge`, on the simulator.

Intervals are ended by hand (`_native.timeline_tick()`) with an interval the ticker never reaches
during the test, and durations come from the virtual clock, so the rows are exact."""

from __future__ import annotations

from mspti_lens import Session, Snapshot, _native
from mspti_lens.timeline import TIMELINE_SCHEMA

HOUR = 3600.0
LAUNCH = "aclrtLaunchKernel"


def counts(snap: Snapshot) -> list[int]:
    tl = snap.timeline()
    return tl.filter(tl["name"] == LAUNCH)["num_calls"].to_list()


def test_a_loaded_snapshot_gives_back_the_same_timeline_on_the_simulator(virtual, tmp_path):
    sim = virtual
    with Session(library="sim", clock="mspti", interval=HOUR) as s:
        sim.call(LAUNCH, work_ns=1_000, count=99)
        sim.call(LAUNCH, work_ns=100_000, count=1)
        _native.timeline_tick()
        sim.call(LAUNCH, work_ns=50_000, count=10)
        sim.call("aclrtSynchronizeStream", work_ns=7, count=2)
        _native.timeline_tick()
        snap = s.snapshot()
    assert counts(snap) == [100, 10]
    snap.save(tmp_path / "w.parquet")
    loaded = Snapshot.load(tmp_path / "w.parquet")
    assert loaded.timeline().schema == TIMELINE_SCHEMA
    assert loaded.timeline().equals(snap.timeline())


def test_a_snapshot_without_a_timeline_loads_without_one_on_the_simulator(virtual, tmp_path):
    with Session(library="sim", clock="mspti") as s:
        virtual.call(LAUNCH, work_ns=10)
        snap = s.snapshot()
    snap.save(tmp_path / "w.parquet")
    loaded = Snapshot.load(tmp_path / "w.parquet")
    assert loaded.timeline().is_empty() and loaded.timeline().schema == TIMELINE_SCHEMA


def test_merge_keeps_both_timelines_oldest_first_on_the_simulator(virtual, tmp_path):
    sim = virtual
    parts = []
    for n in (3, 5):
        with Session(library="sim", clock="mspti", interval=HOUR) as s:
            sim.call(LAUNCH, work_ns=1_000, count=n)
            _native.timeline_tick()
            parts.append(s.snapshot())
    a, b = parts
    m = a.merge(b)
    assert counts(m) == [3, 5]
    a.save(tmp_path / "a.parquet")
    b.save(tmp_path / "b.parquet")
    from_files = Snapshot.load(tmp_path / "a.parquet").merge(Snapshot.load(tmp_path / "b.parquet"))
    assert from_files.timeline().equals(m.timeline())


def test_merging_successive_windows_of_one_session_counts_each_interval_once_on_the_simulator(virtual):
    sim = virtual
    with Session(library="sim", clock="mspti", interval=HOUR) as s:
        sim.call(LAUNCH, work_ns=1_000, count=3)
        _native.timeline_tick()
        first = s.reset()  # its timeline: the session's so far
        sim.call(LAUNCH, work_ns=1_000, count=4)
        _native.timeline_tick()
        second = s.snapshot()  # the session's timeline: both intervals
    assert counts(first) == [3] and counts(second) == [3, 4]
    assert first.merge(second).timeline().equals(second.timeline())
