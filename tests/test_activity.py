"""Device activity on the C stand-in tests/c/fake_activity.c: a libmspti with the
Activity API that writes the packed record layouts with garbage in every unfilled field."""

from __future__ import annotations

import ctypes
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT, compile_c, run_python

u32, u64 = ctypes.c_uint32, ctypes.c_uint64


@pytest.fixture(scope="session")
def fa_path(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("fake_activity")
    return compile_c(ROOT / "tests" / "c" / "fake_activity.c", d / "libfake_activity.so")


@pytest.fixture(scope="session")
def fa8_path(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("fake_activity8")
    return compile_c(ROOT / "tests" / "c" / "fake_activity.c", d / "libfake_activity8.so", "-DCANN8")


def driver(path: Path):
    L = ctypes.CDLL(str(path))
    L.fa_launch.argtypes = [u32, u32, ctypes.c_char_p, u32, u64, u64]
    L.fa_replay.argtypes = [u32]
    L.fa_emitted.argtypes, L.fa_emitted.restype = [u32], u64
    L.fa_dropped_total.restype = u64
    L.fa_bad_record.argtypes = [u32]
    L.fa_memcpy.argtypes = [u64, u32]
    L.fa_hccl.argtypes = [ctypes.c_char_p, ctypes.c_char_p, u64, ctypes.c_double]
    L.fa_communication.argtypes = [ctypes.c_char_p, ctypes.c_char_p, u32, u64, u64]
    L.fa_set_device_delay.argtypes = [u32]
    L.fa_set_handover.argtypes = [ctypes.c_size_t]
    L.fa_set_device_delay(0)
    L.fa_set_handover(0)
    L.fa_pause_device(0)
    L.fa_reset_counts()
    return L


def settled(fa) -> None:
    """Wait until the stand-in's device thread has delivered every queued record (it delivers
    later, as a device does; under load it may be starved for longer than a snapshot's settling)."""
    deadline = time.monotonic() + 120
    while not fa.fa_device_idle():
        assert time.monotonic() < deadline, "the stand-in's device thread delivered nothing for 120 s"
        time.sleep(0.001)


@pytest.fixture
def fa(fa_path):
    return driver(fa_path)


def session(path, **kw):
    from mspti_lens import Session

    kw.setdefault("enable", ["LAUNCH", "MEMCPY"])
    kw.setdefault("clock", "mspti")
    # These tests are about the join's exactness: every launch joins (the default samples).
    kw.setdefault("join_sample", 1.0)
    return Session(str(path), **kw)


def rows(df, **match):
    for k, v in match.items():
        df = df.filter(df[k] == v)
    return df


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_counts_per_kernel_equal_the_records_emitted_on_the_stand_in(fa_path, fa):
    with session(fa_path, activity=["kernel"]) as s:
        for i in range(300):
            fa.fa_launch(0, 1, b"MatMul" if i % 3 else b"Add", 1, 5000, 0)
        settled(fa)
        snap = s.snapshot()
    k = snap.kernels()
    assert dict(zip(k["name"], k["num_calls"])) == {"MatMul": 200, "Add": 100}
    assert fa.fa_emitted(2) == 300
    assert set(k["type"]) == {"KERNEL_AICORE"} and (k["min_ns"] == 5000).all()
    assert snap.activity.counters["bad_pointers"] == 0 and snap.activity.counters["records"] >= 300


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_the_join_splits_api_queue_and_kernel_exactly_on_the_stand_ins_virtual_clock(fa_path, fa):
    with session(fa_path, activity=["kernel"]) as s:
        assert s.join == "runtime_api"
        for _ in range(50):
            fa.fa_launch(1, 2, b"MatMul", 1, 7000, 3000)
            fa.fa_memcpy(4096, 2)  # a runtime API record that is no launch's
        settled(fa)
        snap = s.snapshot()
    launch = rows(snap.launches(), name="aclrtLaunchKernelV2").row(0, named=True)
    # Virtual clock, one tick (1 us) per reading: ENTER hook, callback, API start | end, callback,
    # EXIT hook -> the span is 5 ticks; the kernel is ready 3 us after the API start (2 ticks in).
    assert (launch["api_num"], launch["queue_num"], launch["kernel_num"]) == (50, 50, 50)
    assert launch["api_med_ns"] == 5000 and launch["kernel_med_ns"] == 7000
    assert launch["queue_med_ns"] == 2000 + 3000
    c = snap.activity.counters
    assert c["unjoined_kernels"] == 0 and c["ambiguous"] == 0 and c["kernels_pending"] == 0


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
@pytest.mark.parametrize("shared_stream", [True, False])
def test_four_threads_launching_join_every_kernel_to_its_launch_on_the_stand_in(fa_path, fa, shared_stream):
    n = 400
    with session(fa_path, activity=["kernel"]) as s:
        names = [b"K0", b"K1", b"K2", b"K3"]

        def work(i: int) -> None:
            for _ in range(n):
                fa.fa_launch(i % 3, 1 if shared_stream else 1 + i, names[i], 1, 2000, 0)

        ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        settled(fa)
        snap = s.snapshot()
    la = snap.launches()
    assert la["kernel_num"].sum() == 4 * n and la["api_num"].sum() == 4 * n
    # Thread 3 used launch function 0 like thread 0: its kernels must join to that function.
    per = dict(zip(la["name"], la["kernel_num"]))
    assert per == {"aclrtLaunchKernel": 2 * n, "aclrtLaunchKernelV2": n, "aclrtLaunchKernelWithConfig": n}
    assert (la["queue_min_ns"] if "queue_min_ns" in la.columns else la["queue_med_ns"]).min() >= 0
    c = snap.activity.counters
    assert c["unjoined_kernels"] == 0 and c["ambiguous"] == 0 and c["clock_skew"] == 0


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_graph_replay_joins_every_replayed_kernel_to_its_one_launch_on_the_stand_in(fa_path, fa):
    with session(fa_path, activity=["kernel"]) as s:
        for _ in range(10):
            fa.fa_launch(0, 3, b"Graph", 1, 1000, 0)
            fa.fa_replay(4)
        settled(fa)
        snap = s.snapshot()
    launch = rows(snap.launches(), name="aclrtLaunchKernel").row(0, named=True)
    assert launch["api_num"] == 10 and launch["kernel_num"] == 50
    assert rows(snap.kernels(), name="Graph")["num_calls"][0] == 50


def test_cann8_joins_through_external_correlation_on_the_stand_in(fa8_path):
    # In a fresh interpreter: the process-global external-correlation hooks start clean.
    code = f"""
import ctypes, time, warnings
warnings.simplefilter("ignore")
from mspti_lens import Session
fa = ctypes.CDLL({str(fa8_path)!r})
fa.fa_launch.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint64,
                         ctypes.c_uint64]
with Session({str(fa8_path)!r}, enable=["LAUNCH"], activity=["kernel"]) as s:
    assert s.join == "external_correlation", s.join
    for _ in range(20):
        fa.fa_launch(0, 1, b"MatMul", 1, 4000, 0)
    while not fa.fa_device_idle():  # the stand-in's device delivers later (see settled())
        time.sleep(0.001)
    snap = s.snapshot()
la = snap.launches().row(0, named=True)
print(la["name"], la["kernel_num"], la["kernel_med_ns"], snap.meta["clock_bridge"])
"""
    r = run_python(code, timeout=90)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["aclrtLaunchKernel", "20", "4000", "CLOCK_REALTIME"]


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_pool_exhaustion_is_counted_by_us_and_by_the_library_on_the_stand_in(fa_path, fa):
    # Two 1 KiB buffers, a memory cap of those two and the drain held still: once both are handed
    # back and not yet drained, every request answers NULL and the library drops (and counts) the
    # record.
    with session(fa_path, activity=["kernel"], activity_buffers=(1024, 2, 2048)) as s:
        s._activity._pause_drain(True)
        for _ in range(200):
            fa.fa_launch(0, 1, b"MatMul", 1, 1000, 0)
        s._activity._pause_drain(False)
        settled(fa)
        snap = s.snapshot()
    c = snap.activity.counters
    written, dropped = fa.fa_emitted(2) + fa.fa_emitted(12), fa.fa_dropped_total()
    assert written + dropped == 400  # every record was either placed in our buffers or dropped
    assert dropped > 0 and c["pool_exhausted"] > 0
    assert c["library_dropped"] == dropped  # msptiActivityGetNumDroppedRecords, accumulated
    assert c["pool_exhausted"] == dropped  # one NULL answer per dropped record: exact
    assert snap.kernels()["num_calls"].sum() == fa.fa_emitted(2)  # every placed kernel counted
    assert c["pool_buffers"] == 2  # at its cap: never grown
    # The launches whose kernel was dropped are not waited for: the library said it dropped them.
    assert c["settle_timeouts"] == 0


def _fill_while_the_drain_is_held(fa, s, launches: int) -> None:
    """Launches whose records the stand-in hands over 32 KiB at a time (as a short flush period
    does) while our drain thread is held still: only the pool's free buffers take them."""
    fa.fa_set_handover(32 << 10)
    s._activity._pause_drain(True)
    for _ in range(launches):
        fa.fa_launch(0, 1, b"MatMul", 1, 1000, 0)
    settled(fa)  # every kernel record placed in a buffer (or dropped) before the drain runs again
    s._activity._pause_drain(False)
    fa.fa_set_handover(0)


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_the_pool_grows_on_demand_under_fast_small_hand_overs_and_drops_nothing_on_the_stand_in(fa_path, fa):
    # 4,000 launches: 4,000 RUNTIME_API records (48 B) and 4,000 kernels (56 B), 416 KB, handed
    # over in 32 KiB buffers: 13 buffers, while the pool starts with 8 and the drain never runs.
    # A fixed pool of 8 drops over a third of them; one that grows on demand drops none.
    size = 64 << 10
    with session(fa_path, activity=["kernel"], activity_buffers=(size, 8)) as s:
        _fill_while_the_drain_is_held(fa, s, 4000)
        snap = s.snapshot()
    c = snap.activity.counters
    assert fa.fa_dropped_total() == 0 and c["pool_exhausted"] == 0 and c["library_dropped"] == 0
    assert snap.kernels()["num_calls"].sum() == 4000
    assert rows(snap.launches(), name="aclrtLaunchKernel")["kernel_num"][0] == 4000
    assert 13 <= c["pool_peak_in_use"] <= c["pool_buffers"] == 16  # grown once: 8 more
    assert "pool_peak_in_use" not in snap.activity.losses()


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_the_pool_stops_growing_at_its_memory_cap_and_counts_every_drop_on_the_stand_in(fa_path, fa):
    size = 64 << 10
    with session(fa_path, activity=["kernel"], activity_buffers=(size, 8, 10 * size)) as s:
        _fill_while_the_drain_is_held(fa, s, 4000)
        snap = s.snapshot()
    c = snap.activity.counters
    dropped = fa.fa_dropped_total()
    assert c["pool_buffers"] == 10 and c["pool_peak_in_use"] == 10  # the cap, reached
    assert dropped > 0 and c["pool_exhausted"] == dropped == c["library_dropped"]
    assert fa.fa_emitted(2) + fa.fa_emitted(12) + dropped == 8000
    assert snap.kernels()["num_calls"].sum() == fa.fa_emitted(2)
    assert snap.activity.losses()["pool_exhausted"] == dropped


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_a_pool_cap_below_the_first_buffers_is_refused_with_the_fix(fa_path):
    with pytest.raises(ValueError, match="memory cap .* is below what its first buffers take"):
        session(fa_path, activity=["kernel"], activity_buffers=(1 << 20, 4, 1 << 20))


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_close_leaves_nothing_undelivered_on_the_stand_in(fa_path, fa):
    s = session(fa_path, activity=["kernel"]).start()
    for _ in range(100):
        fa.fa_launch(0, 1, b"MatMul", 1, 1000, 0)
    settled(fa)  # every kernel is in MSPTI's buffers: what close must not leave behind
    s.close()  # no snapshot before: close flushes (FlushAll until quiet) and drains
    snap = s.snapshot()
    assert snap.kernels()["num_calls"].sum() == fa.fa_emitted(2) == 100
    assert snap.activity.counters["buffers_lent"] == 0


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_mark_launches_is_the_guides_scenario_2_on_the_stand_in(fa_path, fa):
    with session(fa_path, mark_launches=5) as s:
        assert s.enabled == ["MSPTI_CBID_RUNTIME_LAUNCH"] and set(s.activity) == {"kernel", "marker"}
        for _ in range(10):
            fa.fa_launch(0, 5, b"MatMul", 1, 5000, 0)
        settled(fa)
        snap = s.snapshot()
    m = rows(snap.launches(), join="mstx_marks").row(0, named=True)
    # Host marks at ENTER (first) and EXIT (last): 7 ticks apart; the stream reaches the ENTER
    # mark at once (queue 0) and the EXIT mark after the 5 us kernel that started 3 ticks in.
    assert (m["api_num"], m["api_med_ns"], m["queue_med_ns"], m["kernel_med_ns"]) == (10, 7000, 0, 8000)
    marks = rows(snap.ranges(), name="aclrtLaunchKernel").row(0, named=True)
    assert (marks["side"], marks["num_calls"]) == ("mark+device", 20)
    assert snap.activity.counters["unpaired_markers"] == 0


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_mstx_ranges_become_histograms_and_torch_npu_collectives_on_the_stand_in(fa_path, fa):
    import json

    from mspti_lens import mstx

    with session(fa_path, activity=["marker"]) as s:

        @mstx.range("forward", domain="model")
        def forward() -> None:
            mstx.mark("inside")

        for _ in range(3):
            with mstx.range("train_step"):
                forward()
        comm = mstx.domain("communication")
        msg = json.dumps({"opName": "HcclAllreduce", "groupName": "hccl_world_group", "count": 4})
        for _ in range(4):
            with comm.range(msg, stream=7):
                pass
        settled(fa)
        snap = s.snapshot()
    r = snap.ranges()
    assert rows(r, domain="default", name="train_step")["num_calls"][0] == 3
    assert rows(r, domain="model", name="forward", side="host")["med_ns"][0] == 2000  # 2 ticks: the mark
    assert rows(r, name="inside")["side"][0] == "mark"
    col = snap.collectives()
    dev = rows(col, group="hccl_world_group", op="HcclAllreduce", **{"from": "mstx_device"})
    assert dev["num_calls"][0] == 4
    assert snap.activity.counters["unpaired_markers"] == 0 and snap.activity.counters["bad_pointers"] == 0


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_unknown_record_kinds_and_null_buffers_are_skipped_safely_on_the_stand_in(fa_path, fa):
    from mspti_lens import _native

    with session(fa_path, activity=["memcpy"]) as s:
        a = s._activity
        fa.fa_memcpy(100, 2)
        a.flush()
        fa.fa_bad_record(77)
        for _ in range(3):
            fa.fa_memcpy(100, 3)
        a.flush()
        fa.fa_memcpy(100, 4)
        fa.fa_null_complete()
        settled(fa)
        snap = s.snapshot()
    m = snap.memcpy()
    assert dict(zip(m["direction"], m["num_calls"])) == {"HTOD": 1, "DTOD": 1}
    c = snap.activity.counters
    assert c["bad_records"] == 1 and c["skipped_bytes"] == 40 + 3 * 56 and c["null_buffers"] == 1
    assert isinstance(_native.activity_kinds(), list)


def test_unknown_kinds_name_the_valid_ones():
    from mspti_lens import activity

    with pytest.raises(ValueError, match=r"did you mean 'kernel'\? \(valid kinds: kernel, api, acl_api"):
        activity.check_kinds(["kernels"])


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_device_frames_save_and_load_with_the_snapshot_on_the_stand_in(fa_path, fa, tmp_path):
    from mspti_lens import Snapshot

    with session(fa_path, activity=["kernel", "memcpy", "hccl", "communication"]) as s:
        for _ in range(5):
            fa.fa_launch(0, 1, b"MatMul", 1, 5000, 0)
            fa.fa_memcpy(1 << 20, 2)
        fa.fa_hccl(b"HcclAllReduce", b"world", 100_000, 12.5)
        fa.fa_communication(b"HcclAllReduce", b"world", 4, 1 << 20, 100_000)
        settled(fa)
        snap = s.snapshot()
    col = snap.collectives()
    assert set(col["from"]) == {"hccl", "communication"}
    assert rows(col, **{"from": "hccl"})["bw_med_gbps"][0] == pytest.approx(12.5, rel=0.01)
    assert rows(col, **{"from": "communication"})["bytes"][0] == 4 << 20
    p = tmp_path / "s.parquet"
    snap.save(p)
    back = Snapshot.load(p)
    for f in ("kernels", "launches", "collectives", "memcpy", "ranges"):
        assert getattr(back, f)().equals(getattr(snap, f)()), f


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_the_old_names_of_the_activity_data_are_the_same_objects_on_the_stand_in(fa_path, fa):
    from mspti_lens import activity, device

    with session(fa_path, activity=["kernel"]) as s:
        fa.fa_launch(0, 1, b"MatMul", 1, 5000, 0)
        settled(fa)
        snap = s.snapshot()
    assert isinstance(snap.activity, activity.ActivityData) and snap.activity.counters["records"] >= 1
    assert snap.device is snap.activity and device.DeviceData is activity.ActivityData
    for name in ("activity", "device"):
        with pytest.raises(
            AttributeError, match=r"given when it is made: Snapshot\(native, meta, activity=\.\.\.\)"
        ):
            setattr(snap, name, None)


CHILD = """
import ctypes, os, signal, sys, threading, time
signal.alarm(60)  # watchdog: a hang fails the test instead of blocking CI
from mspti_lens import Session
path = sys.argv[1] if len(sys.argv) > 1 else {path!r}
fa = ctypes.CDLL(path)
fa.fa_launch.argtypes = [
    ctypes.c_uint32,
    ctypes.c_uint32,
    ctypes.c_char_p,
    ctypes.c_uint32,
    ctypes.c_uint64,
    ctypes.c_uint64,
]
s = Session(path, enable=["LAUNCH"], activity=["kernel", "marker"], join_sample=1.0).start()
for _ in range(500):
    fa.fa_launch(0, 1, b"K", 1, 1000, 0)
{action}
print("ok")
"""


@pytest.mark.parametrize(
    "action",
    [
        "os._exit(0) if False else None",  # interpreter exit with buffers in flight
        (
            "pid = os.fork()\nif pid == 0:\n    signal.alarm(20)\n    s.close()\n    os._exit(0)\n"
            "os.waitpid(pid, 0)\nwhile not fa.fa_device_idle():\n    time.sleep(0.001)\n"
            "print(s.snapshot().kernels()['num_calls'].sum() >= 500)"
        ),
        "s.close()\nfa.fa_launch(0, 1, b'K', 1, 1000, 0)\nprint(s.snapshot().kernels()['num_calls'].sum())",
    ],
    ids=["exit", "fork", "unsubscribe"],
)
def test_exit_fork_and_unsubscribe_with_activity_in_flight_neither_hang_nor_crash_on_the_stand_in(
    fa_path, action
):
    r = run_python(CHILD.format(path=str(fa_path), action=action), timeout=90)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("ok"), r.stdout
    assert "True" in r.stdout or "fork" not in action


def test_a_library_without_the_activity_api_says_so_in_one_sentence_on_the_stand_in(fake_lib_path):
    # tests/c/fake_mspti.c has the Callback API only.
    r = run_python(
        f"""
import warnings; warnings.simplefilter("ignore")
from mspti_lens import Session
try:
    Session({str(fake_lib_path)!r}, activity=["kernel"])
except ValueError as e:
    print("ERR", e)
"""
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "has no Activity API (msptiActivityRegisterCallbacks is missing)" in r.stdout
    assert "activity=[]" in r.stdout


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_runaway_kernel_names_end_in_one_other_row_on_the_stand_in(fa_path, fa):
    names = [f"Kernel_{i:04d}".encode() for i in range(600)]
    with session(fa_path, activity=["kernel"]) as s:
        for n in names:
            fa.fa_launch(0, 1, n, 1, 1000, 0)
        settled(fa)
        snap = s.snapshot()
    k = snap.kernels()
    assert len(k) == 512 + 1  # the cap, then "(other)"
    assert rows(k, name="(other)")["num_calls"][0] == 600 - 512
    assert k["num_calls"].sum() == 600 and snap.activity.counters["into_other"] == 600 - 512


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_flush_activity_is_public_chains_and_is_a_no_op_without_activity_on_the_stand_in(fa_path, fa):
    # The runs writer flushes before a run's last window through this method, not a private one.
    with session(fa_path, activity=["kernel"]) as s:
        for _ in range(5):
            fa.fa_launch(0, 1, b"MatMul", 1, 1000, 0)
        assert s.flush_activity(settle=True) is s
        settled(fa)
        assert s.snapshot().kernels()["num_calls"].sum() == 5
    with session(fa_path) as plain:
        assert plain.flush_activity() is plain and plain.activity == []


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_kernels_that_trail_their_launches_by_300_ms_are_in_the_window_after_the_with_block_on_the_stand_in(
    fa_path, fa
):
    # Every kernel record comes 300 ms after its launch: long after two quiet polls. The settle
    # wait sees 2,000 launches whose kernel has not come and waits for them (the bound is raised
    # so that a loaded machine cannot end the wait first; the wait ends on the records).
    fa.fa_set_device_delay(300)
    try:
        with session(fa_path, activity=["kernel"]) as s:
            s._activity.settle_timeout = 120.0
            for _ in range(2000):
                fa.fa_launch(0, 1, b"MatMul", 1, 1000, 0)
        snap = s.snapshot()
    finally:
        fa.fa_set_device_delay(0)
        settled(fa)
    assert snap.kernels()["num_calls"].sum() == 2000
    assert rows(snap.launches(), name="aclrtLaunchKernel")["kernel_num"][0] == 2000
    c = snap.activity.counters
    assert (c["launches_pending"], c["settle_timeouts"], c["unjoined_launches"], c["unjoined_kernels"]) == (
        0,
        0,
        0,
        0,
    )


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_kernels_that_have_not_come_by_the_bound_are_counted_and_join_when_they_come_on_the_stand_in(
    fa_path, fa
):
    with session(fa_path, activity=["kernel"]) as s:
        s._activity.settle_timeout = 0.05
        fa.fa_pause_device(1)  # the device holds every kernel record until told
        try:
            for _ in range(100):
                fa.fa_launch(0, 1, b"MatMul", 1, 1000, 0)
            first = s.snapshot()
            again = s.snapshot()  # given up once: not waited for again
        finally:
            fa.fa_pause_device(0)
        settled(fa)
        late = s.snapshot()
    c = first.activity.counters
    assert first.kernels()["num_calls"].sum() == 0
    assert (c["launches_pending"], c["settle_timeouts"]) == (100, 1)
    assert first.activity.losses() == {"launches_pending": 100, "settle_timeouts": 1}
    assert "100 launches pending" in first._title()  # what the snapshot's summary line shows
    assert (again.activity.counters["launches_pending"], again.activity.counters["settle_timeouts"]) == (
        100,
        1,
    )
    c = late.activity.counters
    assert late.kernels()["num_calls"].sum() == 100 and late.launches()["kernel_num"][0] == 100
    assert (c["launches_pending"], c["late_kernels"], c["settle_timeouts"]) == (0, 100, 1)


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_launches_whose_kernel_never_comes_are_counted_in_the_last_window_on_the_stand_in(fa_path, fa):
    s = session(fa_path, activity=["kernel"]).start()
    s._activity.settle_timeout = 0.05
    fa.fa_pause_device(1)
    try:
        for _ in range(30):
            fa.fa_launch(0, 1, b"MatMul", 1, 1000, 0)
        s.close()  # the last window is taken (settled, at most the bound) before the collector closes
    finally:
        fa.fa_pause_device(0)
        settled(fa)
    last = s.snapshot()
    c = last.activity.counters
    assert (c["launches_pending"], c["settle_timeouts"], last.kernels()["num_calls"].sum()) == (30, 1, 0)
    assert "30 launches pending" in last._title()


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_the_settle_bound_is_refused_outside_its_range_with_the_range(fa_path):
    with session(fa_path, activity=["kernel"]) as s:
        for bad in (-1.0, float("nan"), float("inf"), 1e9):
            with pytest.raises(ValueError, match="seconds from 0 to 3600"):
                s._activity.settle_timeout = bad
        assert s._activity.settle_timeout == pytest.approx(2.0)


@pytest.mark.filterwarnings("ignore::mspti_lens.errors.NotPreloadedWarning")
def test_a_moment_counter_merged_over_windows_is_the_latest_reading_not_a_sum_on_the_stand_in(
    fa_path, fa, tmp_path
):
    from mspti_lens import Snapshot, activity

    # The device holds every kernel record, so every launch waits for its kernel:
    # launches_pending reads 25, 50, 75, 100 in four windows of 25 launches.
    windows = []
    with session(fa_path, activity=["kernel"]) as s:
        s._activity.settle_timeout = 0.0
        fa.fa_pause_device(1)
        try:
            for _ in range(4):
                for _ in range(25):
                    fa.fa_launch(0, 1, b"MatMul", 1, 1000, 0)
                windows.append(s.reset())
        finally:
            fa.fa_pause_device(0)
        settled(fa)
    assert [w.activity.counters["launches_pending"] for w in windows] == [25, 50, 75, 100]
    assert activity.COMBINE["launches_pending"] == "moment" and activity.COMBINE["records"] == "sum"
    merged = windows[0]
    for w in windows[1:]:
        merged = merged.merge(w)
    shuffled = windows[3].merge(windows[1]).merge(windows[0].merge(windows[2]))
    for m in (merged, shuffled):
        assert m.activity.counters["launches_pending"] == 100  # not 250
        assert m.activity.counters["records"] == sum(w.activity.counters["records"] for w in windows)
    # Saved and loaded, a window still knows whose reading it is.
    p = tmp_path / "w3.parquet"
    windows[3].save(p)
    assert Snapshot.load(p).merge(windows[2]).activity.counters["launches_pending"] == 100
    # Another collector's (another process's, rank's) moment adds.
    with session(fa_path, activity=["kernel"]) as s2:
        s2._activity.settle_timeout = 0.0
        fa.fa_pause_device(1)
        try:
            for _ in range(10):
                fa.fa_launch(0, 1, b"MatMul", 1, 1000, 0)
            other = s2.snapshot()
        finally:
            fa.fa_pause_device(0)
        settled(fa)
    assert merged.merge(other).activity.counters["launches_pending"] == 110
    # One list of counters: what a window reports is what the declaration names, in its order.
    assert list(other.activity.counters) == list(activity.COUNTERS) == list(activity.COMBINE)
    assert (
        set(activity.LOSS_COUNTERS) < set(activity.COUNTERS) and "launches_pending" in activity.LOSS_COUNTERS
    )
