"""`Snapshot.slowest()` survives the snapshot file and `Snapshot.merge`, on the simulator.

The virtual clock (`clock="mspti"` + `sim.set_clock("virtual")`) makes every duration exactly the
simulated work, so the kept calls are known exactly."""

from __future__ import annotations

import threading

import pytest

from mspti_lens import Session, Snapshot
from mspti_lens.slowest import PER_KEY

LAUNCH, SYNC = "aclrtLaunchKernel", "aclrtSynchronizeStream"


def window(sim, launches: range, syncs: tuple[int, ...] = ()) -> Snapshot:
    with Session(library="sim", clock="mspti") as s:
        for w in launches:
            sim.call(LAUNCH, work_ns=w)
        for w in syncs:
            sim.call(SYNC, work_ns=w)
        return s.snapshot()


def durations(snap: Snapshot, name: str) -> list[int]:
    df = snap.slowest()
    return df.filter(df["name"] == name)["duration_ns"].to_list()


def test_a_loaded_snapshot_gives_back_the_same_slowest_calls_on_the_simulator(virtual, tmp_path):
    snap = window(virtual, range(10, 210, 10), syncs=(5, 7, 3))
    assert durations(snap, LAUNCH) == list(range(200, 200 - 10 * PER_KEY, -10))
    snap.save(tmp_path / "w.parquet")
    loaded = Snapshot.load(tmp_path / "w.parquet")
    assert loaded.slowest().equals(snap.slowest())
    assert loaded.slowest(per_api=2).equals(snap.slowest(per_api=2))
    assert durations(loaded, SYNC) == [7, 5, 3]
    assert set(loaded.slowest()["thread_id"]) == {threading.get_native_id()}


def test_merge_keeps_the_k_slowest_of_the_union_per_thread_and_api_on_the_simulator(virtual, tmp_path):
    a = window(virtual, range(1, 21), syncs=(4,))  # keeps 13..20
    b = window(virtual, range(15, 25), syncs=(9, 2))  # keeps 17..24
    m = a.merge(b)
    assert durations(m, LAUNCH) == [24, 23, 22, 21, 20, 20, 19, 19]
    assert durations(m, SYNC) == [9, 4, 2]  # fewer than K: all of both
    # The native merge keeps the same calls as the rule above (its rule is also the one a flight
    # recorder's cuts merge and are added back with: NativeCut.merge, with_calls_of).
    native = Snapshot(a._native.merge(b._native), m.meta)
    assert native.slowest().equals(m.slowest())
    with Session(library="sim", clock="mspti") as s:  # the same calls cut twice, added back
        cuts = []
        for launches, syncs in ((range(1, 21), (4,)), (range(15, 25), (9, 2))):
            for w in launches:
                virtual.call(LAUNCH, work_ns=w)
            for w in syncs:
                virtual.call(SYNC, work_ns=w)
            cuts.append(s.cut_calls())
        back = s.reset().with_calls_of(cuts[0].merge(cuts[1]))
    assert durations(back, LAUNCH) == durations(m, LAUNCH) and durations(back, SYNC) == [9, 4, 2]
    # The same frame whether the parts were saved first or the sum was.
    a.save(tmp_path / "a.parquet")
    b.save(tmp_path / "b.parquet")
    from_files = Snapshot.load(tmp_path / "a.parquet").merge(Snapshot.load(tmp_path / "b.parquet"))
    assert from_files.slowest().equals(m.slowest())
    m.save(tmp_path / "m.parquet")
    assert Snapshot.load(tmp_path / "m.parquet").slowest().equals(m.slowest())


def test_a_file_with_malformed_slowest_calls_is_refused_with_the_reason(virtual, tmp_path):
    import json

    import pyarrow.parquet as pq

    window(virtual, range(1, 4)).save(tmp_path / "w.parquet")
    table = pq.read_table(tmp_path / "w.parquet")
    head = json.loads(table.schema.metadata[b"mspti_lens"])
    head["slowest"]["duration_ns"] = head["slowest"]["duration_ns"][:-1]
    bad = table.replace_schema_metadata({"mspti_lens": json.dumps(head)})
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="slowest-call columns have different lengths"):
        Snapshot.load(tmp_path / "bad.parquet")
