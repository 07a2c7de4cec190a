"""The Session API on the simulator: what to trace, start/stop/reset windows, snapshots, files."""

from __future__ import annotations

import threading

import polars as pl
import pytest

import mspti_lens
from mspti_lens import Session, Snapshot
from mspti_lens.snapshot import SUMMARY_COLUMNS

RUNTIME_ALL = ((1 << 37) - 1) & ~1
HCCL_ALL = ((1 << 13) - 1) & ~1


@pytest.mark.parametrize(
    "target,domain,mask",
    [
        ("runtime", 1, RUNTIME_ALL),
        ("HCCL", 2, HCCL_ALL),
        ("MSPTI_CBID_RUNTIME_LAUNCH", 1, 1 << 10),
        ("LAUNCH", 1, 1 << 10),
        ("aclrtLaunchKernel", 1, 1 << 10),
        ("rtKernelLaunch", 1, 1 << 10),  # a CANN 8.x name enables the same id
        ("aclrtMallocCached", 1, 1 << 15),  # 26.x reports it under MALLOC
        ("HcclAlltoAll", 2, 1 << 6),
        (("runtime", 22), 1, 1 << 22),
        ((2, "ALLREDUCE"), 2, 1 << 1),
    ],
)
def test_every_way_of_naming_a_target_reaches_the_library_on_the_simulator(sim, target, domain, mask):
    with Session(library="sim", enable=[target]) as s:
        assert sim.enabled_mask(domain) == mask
        assert sim.enabled_mask(3 - domain) == 0
        assert s.running


def test_enable_and_disable_while_running_take_effect_at_once_on_the_simulator(sim):
    with Session(library="sim", enable=[]) as s:
        assert sim.enabled_mask(1) == 0 and s.enabled == []
        sim.call("aclrtLaunchKernel", 0, 10)
        s.enable("LAUNCH", "HcclAllReduce")
        assert sim.enabled_mask(1) == 1 << 10 and sim.enabled_mask(2) == 1 << 1
        assert s.enabled == ["MSPTI_CBID_RUNTIME_LAUNCH", "MSPTI_CBID_HCCL_ALLREDUCE"]
        sim.call("aclrtLaunchKernel", 0, 20)
        sim.call("HcclAllReduce", 0, 3)
        s.disable("hccl")
        sim.call("HcclAllReduce", 0, 5)
        counts = dict(s.snapshot().summary().select("name", "num_calls").iter_rows())
    assert counts == {"aclrtLaunchKernel": 20, "HcclAllReduce": 3}


def test_enable_from_another_thread_while_calls_run_on_the_simulator(sim):
    with Session(library="sim", enable=[]) as s:
        stop = threading.Event()

        def caller():
            while not stop.is_set():
                sim.call("aclrtMemcpyAsync", 0, 200)

        t = threading.Thread(target=caller)
        t.start()
        try:
            s.enable("MEMCPY_ASYNC")
            while s.snapshot().total_calls < 1000:
                pass
            s.disable("MEMCPY_ASYNC")
        finally:
            stop.set()
            t.join()
        # A call that passed the library's enable check just before disable() may still land
        # (as with the real library); once the caller is done, nothing more does.
        frozen = s.snapshot().total_calls
        sim.call("aclrtMemcpyAsync", 0, 500)
        assert s.snapshot().total_calls == frozen >= 1000
        # The caller may be inside a call when enable() lands: that call's EXIT comes without its
        # ENTER (counted unmatched, as with the real library). One thread, one enable: at most one.
        assert s.snapshot().unmatched <= 1


def test_stop_disables_everything_in_the_library_and_start_restores_it_on_the_simulator(sim):
    s = Session(library="sim", enable=["hccl", "LAUNCH", "MEMCPY"])
    try:
        assert sim.enabled_mask(1) == 0  # nothing before start
        s.start()
        assert sim.enabled_mask(1) == (1 << 10) | (1 << 22) and sim.enabled_mask(2) == HCCL_ALL
        s.stop()
        assert sim.enabled_mask(1) == 0 and sim.enabled_mask(2) == 0 and not s.running
        s.start()
        assert sim.enabled_mask(1) == (1 << 10) | (1 << 22)
    finally:
        s.close()
    assert not sim.subscribed


def test_reset_returns_the_closed_window_and_starts_an_empty_one_on_the_simulator(sim):
    with Session(library="sim") as s:
        sim.call("aclrtLaunchKernel", 1000, 300)
        closed = s.reset()
        assert closed.total_calls == 300
        assert s.snapshot().total_calls == 0 and len(s.snapshot()) == 0
        sim.call("aclrtLaunchKernel", 1000, 7)
        snap = s.snapshot()
        assert snap.total_calls == 7
        assert closed.meta["window_end"] == snap.meta["window_start"]  # the windows tile time


def test_a_new_session_starts_with_an_empty_window_on_the_simulator(sim):
    with Session(library="sim") as s:
        sim.call("aclrtMalloc", 0, 5)
        assert s.snapshot().total_calls == 5
    with Session(library="sim") as s:
        assert s.snapshot().total_calls == 0


def test_summary_has_the_columns_users_know_and_labels_simulated_data(sim):
    sim.set_clock("virtual")
    with Session(library="sim", clock="mspti") as s:
        for ns in (1_000, 2_000, 3_000, 4_000):
            sim.call("aclrtLaunchKernel", ns)
        sim.call("HcclAllReduce", 30_000, 2)
        snap = s.snapshot()
    df = snap.summary()
    assert tuple(df.columns) == SUMMARY_COLUMNS
    assert df["name"].to_list() == ["HcclAllReduce", "aclrtLaunchKernel"]  # by total time
    launch = df.filter(pl.col("name") == "aclrtLaunchKernel").row(0, named=True)
    assert launch["num_calls"] == 4 and launch["total_ns"] == 10_000
    assert launch["min_ns"] == 1_000 and launch["max_ns"] == 4_000
    assert abs(launch["med_ns"] - 2_000) <= 2_000 / 128  # a bucket midpoint, within 0.78 %
    assert launch["avg_ns"] == 2_500 and launch["callback"] == "LAUNCH" and launch["domain"] == "runtime"
    assert launch["stddev_ns"] == pytest.approx(1290.994, rel=1e-5)
    assert df["time_pct"].sum() == pytest.approx(100.0)
    assert set(df["source"]) == {"simulated"}
    assert snap.simulated and "SIMULATED" in snap.label and "SIMULATED" in repr(snap)
    assert "SIMULATED DATA" in snap._repr_html_()
    assert snap.meta["clock"] == "mspti"


def test_histogram_rows_sum_to_the_counts_on_the_simulator(sim):
    with Session(library="sim") as s:
        sim.run_workload("inference", steps=2, ranks=4, time_scale=0.05)
        snap = s.snapshot()
    h = snap.histogram()
    sums = dict(h.group_by("name").agg(pl.col("count").sum()).iter_rows())
    assert sums == dict(snap.summary().select("name", "num_calls").iter_rows())
    assert (h["upper_ns"] > h["lower_ns"]).all() and (h["count"] > 0).all()


def test_save_and_load_round_trip_exactly_on_the_simulator(sim, tmp_path):
    with Session(library="sim") as s:
        sim.run_workload("training", steps=2, ranks=4, time_scale=0.05)
        snap = s.snapshot()
    path = tmp_path / "snap.parquet"
    snap.save(path)
    back = mspti_lens.load(path)
    assert back.summary().equals(snap.summary())
    assert back.histogram().equals(snap.histogram())
    assert back.counters == snap.counters
    assert back.simulated and back.label == snap.label and back.meta["loaded_from"] == str(path)


def test_diff_compares_before_and_after_on_the_simulator(sim):
    sim.set_clock("virtual")
    with Session(library="sim", clock="mspti") as s:
        sim.call("aclrtLaunchKernel", 4_000, 10)
        before = s.reset()
        sim.call("aclrtLaunchKernel", 6_000, 10)
        sim.call("aclrtMemcpy", 100, 1)
        after = s.snapshot()
    d = before.diff(after)
    row = d.filter(pl.col("name") == "aclrtLaunchKernel").row(0, named=True)
    assert row["num_calls_before"] == 10 and row["num_calls_after"] == 10
    assert row["med_change_pct"] == pytest.approx(50.0)
    new = d.filter(pl.col("name") == "aclrtMemcpy").row(0, named=True)
    assert new["num_calls_before"] is None and new["num_calls_after"] == 1
    with pytest.raises(TypeError):
        before.diff("not a snapshot")  # type: ignore[arg-type]


def test_merge_of_windows_equals_the_whole_on_the_simulator(sim):
    sim.set_clock("virtual")
    with Session(library="sim", clock="mspti") as s:
        sim.run_workload("training", steps=2, ranks=2, seed=3)
        a = s.reset()
        sim.run_workload("training", steps=2, ranks=2, seed=4)
        b = s.snapshot()
    with Session(library="sim", clock="mspti") as s:
        sim.run_workload("training", steps=2, ranks=2, seed=3)
        sim.run_workload("training", steps=2, ranks=2, seed=4)
        whole = s.snapshot()
    m = a.merge(b)
    assert (
        m.histogram()
        .drop("index")
        .sort("name", "lower_ns")
        .equals(whole.histogram().drop("index").sort("name", "lower_ns"))
    )


def test_calls_cut_out_of_a_window_and_added_back_make_the_whole_window_on_the_simulator(sim):
    sim.set_clock("virtual")
    with Session(library="sim", clock="mspti") as s:
        start = s.window_facts()["window_start"]
        sim.run_workload("training", steps=2, ranks=2, seed=3)
        first = s.cut_calls()
        sim.run_workload("training", steps=2, ranks=2, seed=4)
        s.snapshot()  # an epoch closed into the window between cuts is cut as well
        sim.run_workload("training", steps=1, ranks=2, seed=5)
        cuts = first.merge(s.cut_calls())
        sim.call("aclrtLaunchKernel", 1000, 7)
        rest = s.reset()
    with Session(library="sim", clock="mspti") as s:
        for seed, steps in ((3, 2), (4, 2), (5, 1)):
            sim.run_workload("training", steps=steps, ranks=2, seed=seed)
        sim.call("aclrtLaunchKernel", 1000, 7)
        whole = s.snapshot()
    assert rest.total_calls == 7 and rest.meta["window_start"] == start  # the window went on
    back = rest.with_calls_of(cuts)
    assert (
        back.histogram()
        .drop("index")
        .sort("name", "lower_ns")
        .equals(whole.histogram().drop("index").sort("name", "lower_ns"))
    )
    assert back.counters["threads"] == rest.counters["threads"]  # a moment, not added
    assert Snapshot(cuts.snapshot(), rest.meta).total_calls == back.total_calls - 7


def test_status_reports_the_state_on_the_simulator(session, sim):
    session.start()
    sim.call("aclrtFree", 0, 3)
    st = session.status()
    assert st["running"] and st["calls"] == 3 and st["backend"].startswith("SIMULATED")
    assert st["unmatched"] == 0 and st["poisoned"] is False and "MSPTI_CBID_HCCL_ALLREDUCE" in st["enabled"]
    assert "stopped" not in repr(session) and "running" in repr(session)


def test_snapshot_repr_of_an_empty_window_on_the_simulator(session):
    snap = session.snapshot()
    assert isinstance(snap, Snapshot) and len(snap) == 0 and "no calls recorded" in repr(snap)


def test_unsubscribing_while_other_threads_are_inside_callbacks_is_safe_on_the_simulator(sim):
    stop = threading.Event()

    def caller(api):
        while not stop.is_set():
            sim.call(api, 0, 2_000)

    ts = [
        threading.Thread(target=caller, args=(a,))
        for a in ("aclrtLaunchKernel", "HcclAllReduce", "aclrtMemcpy")
    ]
    for t in ts:
        t.start()
    try:
        for _ in range(30):
            s = Session(library="sim").start()
            snap = s.snapshot()
            s.close()
            # At most one call per thread was entered before enabling and exited after.
            assert not sim.subscribed and snap.unmatched <= 3
    finally:
        stop.set()
        for t in ts:
            t.join()
    with Session(library="sim") as s:
        sim.call("aclrtLaunchKernel", 0, 10)
        snap = s.snapshot()
    assert snap.total_calls == 10 and snap.unmatched == 0


def test_the_last_window_stays_readable_after_the_with_block_on_the_simulator(sim):
    with Session(library="sim") as s:
        sim.call("aclrtLaunchKernel", 0, 5)
    assert s.closed and s.snapshot().total_calls == 5
    assert s.snapshot() is s.snapshot()  # the same final window, not a new read


# -- a constructor that fails, arguments refused at the call ---------------------------------------
@pytest.mark.filterwarnings("ignore::mspti_lens.NotPreloadedWarning")
def test_a_session_that_fails_in_its_constructor_gives_the_subscriber_slot_back_at_once(fake_lib_path, fake):
    # The stand-in has no Activity API: asking for activity fails after subscribing. The
    # exception is kept alive, as IPython keeps the last one (sys.last_value).
    with pytest.raises(ValueError, match="no Activity API") as failed:
        Session(library=fake_lib_path, activity=["communication"])
    kept = failed.value
    with Session(library=fake_lib_path, enable=["aclrtMalloc"]) as s:
        fake.loop("aclrtMalloc", [], 3)
        assert s.snapshot().total_calls == 3
    assert kept.__traceback__ is not None  # the failed Session's frame is still referenced


@pytest.mark.parametrize(
    "options, says",
    [
        ({"interval": float("inf")}, "interval must be a finite number of seconds >= 0.001"),
        ({"interval": float("nan")}, "interval must be a finite number of seconds >= 0.001"),
        ({"activity_buffers": (-1, 8)}, r"positive ints such as \(8388608, 8\), not \(-1, 8\)"),
        ({"activity_buffers": (1 << 20, 10**30)}, "positive ints such as"),
        ({"activity_buffers": (1 << 20, 0), "activity": ["kernel"]}, "positive ints such as"),
        ({"activity_buffers": (1 << 20, 8, 0)}, "memory cap in bytes"),
        ({"activity_buffers": 8 << 20}, r"bytes per buffer, buffers at the start\[, memory cap in bytes\]"),
    ],
)
def test_bad_arguments_are_refused_at_the_call_before_subscribing_on_the_simulator(sim, options, says):
    with pytest.raises(ValueError, match=says):
        Session(library="sim", **options)
    assert sim.enabled_mask(1) == 0
    Session(library="sim").close()  # nothing was taken


def test_buffers_outside_the_collectors_limits_are_refused_naming_them_on_the_simulator(sim):
    with pytest.raises(ValueError, match="at least 1024 bytes each") as failed:
        Session(library="sim", activity=["kernel"], activity_buffers=(100, 8))
    kept = failed.value  # noqa: F841 - the failed Session's frame stays referenced
    Session(library="sim").close()  # the slot was given back


def _window(source, end, in_flight, threads):
    from mspti_lens import _native
    from mspti_lens.snapshot import Snapshot

    counters = {"in_flight": in_flight, "threads": threads, "unmatched": 1}
    native = _native.NativeSnapshot.from_state([], [], [], [], [], [], [], [], [], [], [], counters)
    return Snapshot(native, {"label": "t", "window_start": end - 1, "window_end": end, "source": source})


def test_moment_counters_merge_as_the_latest_reading_of_each_session_and_add_across_sessions(tmp_path):
    # in_flight and threads are read when a window closes: two windows of one session are not
    # twice its open calls, while two processes' readings add. Every other counter adds.
    a1, a2, b = _window("a", 10.0, 2, 3), _window("a", 20.0, 1, 4), _window("b", 15.0, 5, 1)
    for merged in (a1.merge(a2), a2.merge(a1)):
        assert (merged.counters["in_flight"], merged.counters["threads"]) == (1, 4)
        assert merged.counters["unmatched"] == 2
    three = a1.merge(b).merge(a2)
    assert (three.in_flight, three.counters["threads"], three.counters["unmatched"]) == (6, 5, 3)
    # The readings travel with a saved snapshot, so a later window of the same session still
    # replaces its reading after a round trip.
    path = tmp_path / "a1b.parquet"
    a1.merge(b).save(path)
    loaded = type(a1).load(path)
    assert loaded.in_flight == 7
    assert loaded.merge(a2).in_flight == 6
    # A snapshot of unknown origin is a session of its own.
    from mspti_lens import _native
    from mspti_lens.snapshot import Snapshot

    bare = _native.NativeSnapshot.from_state([], [], [], [], [], [], [], [], [], [], [], {"in_flight": 4})
    assert Snapshot(bare, {}).merge(Snapshot(bare, {})).in_flight == 8


def test_windows_of_one_live_session_carry_its_name_for_the_moment_counters_on_the_simulator(sim):
    with Session(library="sim") as s:
        sim.run_workload("training", steps=2)
        first = s.reset()
        sim.run_workload("training", steps=2)
        second = s.snapshot()
    assert first.meta["source"] == second.meta["source"]
    assert first.counters["threads"] > 0 and second.counters["threads"] > 0
    assert first.merge(second).counters["threads"] == second.counters["threads"]


# -- a snapshot's window: one frozen value, built complete -------------------------------------
def test_a_sessions_snapshot_is_made_complete_with_its_activity_and_timeline_on_the_simulator(sim):
    import dataclasses

    from mspti_lens import _native

    sim.set_clock("virtual")
    with Session(library="sim", clock="mspti", interval=3600.0, activity=["kernel"], enable=["LAUNCH"]) as s:
        sim.call("aclrtLaunchKernel", 1_000, 3)
        _native.timeline_tick()  # one interval ended by hand: the ticker never reaches an hour
        closed = s.reset()
        snap = s.snapshot()
    for w in (closed, snap):
        info = w.window
        assert (info.join, info.clock_bridge) == (w.activity.info["join"], w.activity.info["clock_bridge"])
        assert info.clock == "mspti" and info.simulated and info.source == w.meta["source"]
        assert w.meta == info.as_dict() and w.meta["join"] == info.join
        with pytest.raises(dataclasses.FrozenInstanceError):
            info.join = "other"  # type: ignore[misc]
    assert closed.timeline()["num_calls"].to_list() == [3]
    assert closed.window.end == snap.window.start  # the windows tile time
    assert closed.duration_s == closed.window.end - closed.window.start


def test_the_dict_form_of_a_window_holds_exactly_the_facts_given():
    from mspti_lens.snapshot import WindowInfo

    meta = {"label": "t", "window_start": 1.5, "window_end": 4.0, "rank": 3, "join": None,
            "moments": {"s": [4.0, 1, 2]}, "host": "h"}  # fmt: skip
    info = WindowInfo.of(meta)
    assert (info.label, info.start, info.end, info.join) == ("t", 1.5, 4.0, None)
    assert dict(info.extra) == {"rank": 3, "join": None, "host": "h"} and info.moments == {"s": (4.0, 1, 2)}
    assert info.as_dict() == meta and WindowInfo.of({}).as_dict() == {}
    assert (
        info.duration_s == 2.5 and info.with_facts({"rank": 4}).extra["rank"] == 4 and info.extra["rank"] == 3
    )


def test_a_snapshots_meta_reads_as_a_dict_refuses_writes_and_with_meta_makes_a_new_snapshot():
    import copy
    import json

    from mspti_lens import _native

    snap = Snapshot(_native.NativeSnapshot.from_values([5, 7], "f"), {"label": "t", "window_end": 2.0})
    before = snap.window
    meta = snap.meta
    assert meta == before.as_dict() and meta["label"] == "t" and meta.get("rank") is None
    assert dict(meta) == json.loads(json.dumps(meta)) == {**meta}  # read and written as a dict
    writes = [
        lambda m: m.update(rank=3),
        lambda m: m.__setitem__("window_start", 1.0),
        lambda m: m.__delitem__("label"),
        lambda m: m.setdefault("rank", 3),
        lambda m: m.pop("label"),
        lambda m: m.popitem(),
        lambda m: m.clear(),
        lambda m: m.__ior__({"rank": 3}),
    ]
    for write in writes:
        with pytest.raises(TypeError, match=r"snap\.with_meta\(key=value\)"):
            write(snap.meta)
    with pytest.raises(AttributeError, match=r"with_meta"):
        snap.meta = {"label": "u"}  # type: ignore[misc]
    with pytest.raises(AttributeError, match=r"activity=\.\.\."):
        snap.activity = None  # type: ignore[misc]
    assert snap.window is before and snap.meta == before.as_dict()  # nothing changed
    mine = copy.copy(snap.meta)  # a copy is a plain dict, the caller's to change
    mine["rank"] = 1
    assert type(mine) is dict and "rank" not in snap.meta
    other = snap.with_meta(rank=9, simulated=True)
    assert other.simulated and other.meta["rank"] == 9 and "rank" not in snap.meta and not snap.simulated
    assert other.summary().drop("source").equals(snap.summary().drop("source"))
    assert set(other.summary()["source"]) == {"simulated"} and other.counters == snap.counters
