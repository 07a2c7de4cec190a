"""The core against a stand-in libmspti.so written in C that behaves like the real one: only
callbackSite and functionName filled (every other field an invalid pointer), one subscriber,
cbid >= 64 and bad domains rejected, no optional symbols."""

from __future__ import annotations

import ctypes
import threading

import pytest

from mspti_lens import NotPreloadedWarning, Session, SessionError, SubscriberBusyError

# The stand-in is loaded with dlopen, not LD_PRELOAD: starting warns (checked once below).
pytestmark = pytest.mark.filterwarnings("ignore::mspti_lens.NotPreloadedWarning")


@pytest.fixture
def fake_session(fake_lib_path, fake):
    s = Session(library=fake_lib_path, enable=["runtime", "hccl"])
    yield s
    s.close()


def test_backend_info_of_a_library_without_optional_symbols(fake_session, fake_lib_path):
    b = fake_session.backend
    assert b.simulated is False
    assert b.origin == "explicit"
    assert b.path == str(fake_lib_path.resolve())
    assert b.optional_symbols == () and b.version is None
    assert b.preloaded is False and "LD_PRELOAD=" in b.preload_hint


@pytest.mark.filterwarnings("error::mspti_lens.NotPreloadedWarning")
def test_starting_on_a_real_library_without_ld_preload_warns_once(fake_session, fake_lib_path):
    with pytest.warns(NotPreloadedWarning, match=f"LD_PRELOAD={fake_lib_path.resolve()}"):
        fake_session.start()
    fake_session.stop()
    fake_session.start()  # once per session


def test_threads_with_nested_calls_are_counted_exactly(fake_session, fake):
    threads, n = 6, 20_000
    fake_session.start()
    plan = [
        ("aclrtLaunchKernel", ["aclrtMemcpy"]),
        ("HcclAllReduce", ["aclrtLaunchKernelV2", "aclrtMemcpyAsync"]),
        ("aclrtSynchronizeStream", []),
    ]

    def work(i: int) -> None:
        api, inner = plan[i % len(plan)]
        fake.loop(api, inner, n)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    snap = fake_session.snapshot()
    counts = dict(zip(snap.summary()["name"], snap.summary()["num_calls"]))
    per_plan = threads // len(plan) * n
    expected = {}
    for api, inner in plan:
        for name in [api, *inner]:
            expected[name] = expected.get(name, 0) + per_plan
    assert counts == expected
    assert snap.unmatched == 0 and snap.in_flight == 0
    # Nesting is paired innermost first: an outer call lasts at least as long as its inner one.
    s = snap.summary()
    hccl = s.filter(s["name"] == "HcclAllReduce").row(0, named=True)
    v2 = s.filter(s["name"] == "aclrtLaunchKernelV2").row(0, named=True)
    assert hccl["total_ns"] >= v2["total_ns"]


def test_exit_without_enter_is_unmatched_and_enter_without_exit_in_flight(fake_session, fake):
    fake_session.start()
    fake.fire("aclrtMemcpy", 1)  # EXIT with no ENTER
    fake.fire("aclrtMalloc", 0)  # ENTER whose EXIT has not come
    snap = fake_session.snapshot()
    assert snap.unmatched == 1
    assert snap.in_flight == 1
    assert len(snap) == 0
    fake.fire("aclrtMalloc", 1)
    snap = fake_session.snapshot()
    assert snap.in_flight == 0 and snap.summary()["name"].to_list() == ["aclrtMalloc"]


def test_one_subscriber_per_process(fake_session, fake):
    handle = ctypes.c_void_p()
    rc = fake.lib.msptiSubscribe(ctypes.byref(handle), None, None)
    assert rc == 2
    with pytest.raises(SessionError, match="already active"):
        Session(library=fake.lib._name)


def test_someone_else_holding_the_slot_is_named(fake_lib_path, fake):
    handle = ctypes.c_void_p()
    assert fake.lib.msptiSubscribe(ctypes.byref(handle), None, None) == 0
    try:
        with pytest.raises(SubscriberBusyError) as e:
            Session(library=fake_lib_path)
        msg = str(e.value)
        assert "MSPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED" in msg
        for owner in ("mspti", "torch_npu", "msMonitor"):
            assert owner in msg
        assert e.value.args[1] == 2
        # What failed, as attributes (the same values as args[1:]).
        assert (e.value.code, e.value.code_name, e.value.function) == (
            2,
            "MSPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED",
            "msptiSubscribe",
        )
        assert e.value.args[1:] == (e.value.code, e.value.code_name, e.value.function)
    finally:
        assert fake.lib.msptiUnsubscribe(handle) == 0
    # The slot is free again: a session now works.
    Session(library=fake_lib_path).close()


def test_the_stand_in_rejects_what_the_real_one_rejects(fake):
    L = fake.lib
    h = ctypes.c_void_p()
    assert L.msptiSubscribe(None, None, None) == 1
    assert L.msptiSubscribe(ctypes.byref(h), None, None) == 0
    try:
        assert L.msptiEnableCallback(1, h, 1, 64) == 1
        assert L.msptiEnableCallback(1, h, 1, 63) == 0
        assert L.msptiEnableCallback(1, h, 3, 1) == 1
        assert L.msptiEnableDomain(1, h, 0) == 1
        assert L.msptiEnableDomain(1, ctypes.c_void_p(h.value + 8), 1) == 1
        assert L.msptiEnableDomain(1, h, 2) == 0 and L.fake_enabled(2) == ((1 << 13) - 1) & ~1
    finally:
        assert L.msptiUnsubscribe(h) == 0
    assert L.fake_enabled(1) == 0 and L.fake_enabled(2) == 0


def test_start_and_stop_reach_the_library(fake_session, fake):
    fake_session.start()
    assert fake.lib.fake_enabled(1) == ((1 << 37) - 1) & ~1
    assert fake.lib.fake_enabled(2) == ((1 << 13) - 1) & ~1
    fake_session.stop()
    assert fake.lib.fake_enabled(1) == 0 and fake.lib.fake_enabled(2) == 0


def test_stop_start_keeps_counts_and_reset_opens_a_new_window(fake_session, fake):
    fake_session.start()
    fake.loop("aclrtLaunchKernel", [], 1000)
    fake_session.stop()
    fake.loop("aclrtLaunchKernel", [], 500)  # disabled in the library: not seen
    fake_session.start()
    fake.loop("aclrtLaunchKernel", [], 250)
    assert fake_session.snapshot().total_calls == 1250
    closed = fake_session.reset()
    assert closed.total_calls == 1250
    fake.loop("HcclAllGather", [], 7)
    snap = fake_session.snapshot()
    assert snap.summary()["name"].to_list() == ["HcclAllGather"] and snap.total_calls == 7
