"""The simulator's Activity API: record layouts, buffer hand-over (request / complete, FlushPeriod
vs FlushAll), NULL and exhausted buffers, kinds and symbols per era. All on the simulator, with
its virtual clock where numbers are compared."""

from __future__ import annotations

import ctypes
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _sim_activity import (
    ACL_API,
    AHEAD_NS,
    API,
    COMMUNICATION,
    ERAS,
    HCCL,
    KERNEL,
    MARKER,
    MEMCPY,
    NODE_API,
    OVERHEAD,
    RUNTIME_API,
    STAT,
    STRUCTS,
    TIMESTAMP,
    Env,
    Subscription,
)

# The upstream header's layouts (mspti_activity.h): size, and each field's offset in declaration order.
REFERENCE_LAYOUTS = {
    "Marker": (56, [0, 4, 8, 12, 20, 28, 36, 44]),
    "Kernel": (56, [0, 4, 12, 20, 28, 36, 44]),
    "Api": (48, [0, 4, 12, 20, 28, 36]),
    "Hccl": (56, [0, 4, 12, 20, 28, 36, 44]),
    "Memory": (64, [0, 4, 8, 12, 20, 28, 36, 44, 52, 56, 60]),
    "Memset": (56, [0, 4, 8, 16, 24, 32, 36, 40, 48]),
    "Memcpy": (56, [0, 4, 8, 16, 24, 32, 36, 40, 48]),
    "ExternalCorrelation": (24, [0, 4, 8, 16]),
    "Communication": (72, [0, 4, 8, 16, 24, 32, 40, 48, 56, 64]),
    "Overhead": (56, [0, 4, 8, 16, 24, 32, 40, 48]),  # newest dev docs, not in the reference's table
}


@pytest.fixture
def env(sim):
    e = Env(sim)
    yield e
    e.close()


def test_record_structs_match_the_reference_offsets():
    for st in set(STRUCTS.values()):
        size, offsets = REFERENCE_LAYOUTS[st.__name__]
        assert ctypes.sizeof(st) == size, st.__name__
        got = [getattr(st, name).offset for name, _ in st._fields_ if not name.startswith("_")]
        assert got == offsets, st.__name__


def test_records_parsed_from_simulator_buffers_have_the_reference_layout(env):
    """Every kind the simulator writes, read back with the reference's offsets: record sizes (the
    offsets msptiActivityGetNextRecord walks) and the field values the calls put there."""
    c = env.collect()
    env.enable(KERNEL, RUNTIME_API, ACL_API, API, NODE_API, MARKER, MEMCPY, COMMUNICATION)
    env.launch(stream=3, node=b"aclnnMatmul")
    env.lib.msimCallBytes(env.sim.api("aclrtMemcpyAsync"), 2_000, 4096, 0, 1)
    env.lib.msimCallBytes(env.sim.api("HcclAllReduce"), 9_000, 1 << 20, 0, 8)
    env.lib.mstxMarkA(b"step", None)
    c.drain()
    sizes = {1: 56, 2: 56, 3: 48, 7: 56, 9: 72, 10: 48, 11: 48, 12: 48}
    kinds = set()
    for b in c.buffers:
        for off, nxt, r in zip(b.offsets, b.offsets[1:] + [b.valid], b.records):
            assert nxt - off == sizes[r["kind"]]
            kinds.add(r["kind"])
    assert kinds == set(sizes)
    (k,) = c.records(KERNEL)
    assert k["name"] == "MatMul" and k["type"].startswith("KERNEL") and k["ds"] == (0, 3)
    assert k["end"] - k["start"] == 20_000
    (m,) = c.records(MEMCPY)
    assert m["bytes"] == 4096 and m["isAsync"] == 1 and m["copyKind"] == 2  # HTOD
    (mk,) = c.records(MARKER)
    assert mk["name"] == "step" and mk["domain"] == "default" and mk["flag"] == 1
    assert mk["objectId"][0] == os.getpid()
    (co,) = c.records(COMMUNICATION)
    assert co["count"] == (1 << 20) // 2 and co["dataType"] == 3 and co["name"] == "hcom_allReduce_"
    assert co["commName"] == "hccl_world_group" and co["algType"] == "MESH"


def test_newest_dev_reports_each_buffer_request_as_an_overhead_record_on_the_simulator(env):
    env.lib.msimSetActivityEra(ERAS["newest"])
    c = env.collect(size=1024)
    env.enable(OVERHEAD, RUNTIME_API)
    for _ in range(40):
        env.lib.msimCall(env.sim.api("aclrtGetMemInfo"), 100)
    env.lib.msptiActivityFlushAll(0)
    assert len(c.buffers) >= 2
    for b in c.buffers:
        head = b.records[0]
        assert head["kind"] == OVERHEAD and head["overheadKind"] == 2 and head["objectKind"] == 2
        assert head["objectId"][0] == os.getpid() and head["start"] <= head["end"]
        assert all(r["kind"] == RUNTIME_API for r in b.records[1:])
    assert len(c.records(RUNTIME_API)) == 40


def test_flush_period_never_delivers_a_partial_buffer_and_flush_all_does_on_the_simulator(env):
    c = env.collect(size=4096)
    env.enable(RUNTIME_API)
    assert env.lib.msptiActivityFlushPeriod(5) == 0
    call = env.sim.api("aclrtGetMemInfo")
    for _ in range(10):  # 10 x 48 bytes: far below 80 % of 4096
        env.lib.msimCall(call, 1_000)
    time.sleep(0.3)  # sixty periods: a partial buffer would have been handed over by now
    assert c.buffers == [] and env.lib.msimActivityStat(STAT["completes"]) == 0
    for _ in range(300):
        env.lib.msimCall(call, 1_000)
    per_buffer = math.ceil(0.8 * 4096 / 48)  # handed over at the first record past 80 %
    expected_full = (310 - 1) // per_buffer
    for _ in range(1000):
        if len(c.buffers) == expected_full:
            break
        time.sleep(0.01)
    full = list(c.buffers)
    assert len(full) == expected_full == 4
    assert all(b.valid >= 0.8 * b.size for b in full)  # only full buffers, from other threads
    assert env.lib.msimActivityStat(STAT["worker_completes"]) == len(full)
    assert env.lib.msptiActivityFlushAll(0) == 0
    assert len(c.buffers) == len(full) + 1 and c.buffers[-1].valid < 0.8 * 4096
    assert env.lib.msimActivityStat(STAT["partial_completes"]) == 1
    assert len(c.records(RUNTIME_API)) == 310  # nothing lost, nothing twice


def test_complete_runs_on_another_thread_for_full_buffers_on_the_simulator(env):
    main = threading.get_ident()
    seen = []
    c = env.collect(size=1024)
    orig = c._on_complete

    def spy(buf, size, valid):
        seen.append(threading.get_ident())
        orig(buf, size, valid)

    c._comp = type(c._comp)(spy)
    assert env.lib.msptiActivityRegisterCallbacks(c._req, c._comp) == 0
    env.enable(RUNTIME_API)
    for _ in range(60):
        env.lib.msimCall(env.sim.api("aclrtGetMemInfo"), 100)
    for _ in range(1000):  # the manager thread hands the full buffers to completing threads
        if env.lib.msimActivityStat(STAT["worker_completes"]) >= 3:
            break
        time.sleep(0.01)
    assert env.lib.msptiActivityFlushAll(0) == 0  # joins the completing threads
    assert seen and seen[-1] == main  # the partial one, inside FlushAll on this thread
    assert any(t != main for t in seen[:-1])


@pytest.mark.parametrize("era", ["cann26", "newest"])
def test_null_buffers_are_counted_as_dropped_on_the_simulator(env, era):
    env.lib.msimSetActivityEra(ERAS[era])
    c = env.collect(size=1 << 16)
    env.enable(RUNTIME_API)
    env.lib.msimSetNullBufferEvery(2)  # the 2nd, 4th, ... request gets NULL
    call = env.sim.api("aclrtGetMemInfo")
    env.lib.msimCall(call, 100)  # request 1: a buffer
    assert env.lib.msptiActivityFlushAll(0) == 0
    env.lib.msimCall(call, 100)  # request 2: NULL, the record is dropped
    env.lib.msimCall(call, 100)  # 26.x: the NULL buffer is handed over, request 3 gives a buffer
    assert env.lib.msptiActivityFlushAll(0) == 0
    stats = {k: env.lib.msimActivityStat(v) for k, v in STAT.items()}
    assert stats["records"] + stats["dropped"] == 3
    if era == "cann26":
        # 26.0/26.1: the NULL buffer comes back later as (NULL, 0, 0); one record lost.
        assert c.null_completes == 1 and stats["dropped"] == 1
        assert len(c.records(RUNTIME_API)) == 2
    else:
        # Newest dev discards it: the record that met it is dropped, the next asks again.
        assert c.null_completes == 0 and stats["dropped"] == 1
        n = ctypes.c_size_t()
        assert env.lib.msptiActivityGetNumDroppedRecords(None, 0, ctypes.byref(n)) == 0 and n.value == 1
        assert env.lib.msptiActivityGetNumDroppedRecords(None, 0, ctypes.byref(n)) == 0 and n.value == 0


def test_exhausted_user_buffers_drop_records_and_count_them_on_the_simulator(env):
    env.lib.msimSetActivityEra(ERAS["newest"])
    c = env.collect(size=512, pool=1, recycle=False)  # one buffer of 9 API records, never reused
    env.enable(RUNTIME_API)
    call = env.sim.api("aclrtGetMemInfo")
    for _ in range(40):
        env.lib.msimCall(call, 100)
    dropped = env.lib.msimActivityStat(STAT["dropped"])
    env.lib.msptiActivityFlushAll(0)
    got = len(c.records(RUNTIME_API))
    assert (got, dropped) == (9, 31)
    n = ctypes.c_size_t()
    assert env.lib.msptiActivityGetNumDroppedRecords(None, 0, ctypes.byref(n)) == 0 and n.value == dropped


def test_records_of_disabled_kinds_are_not_written_on_the_simulator(env):
    c = env.collect()
    env.enable(RUNTIME_API)
    call = env.sim.api("aclrtGetMemInfo")
    env.lib.msimCall(call, 100)
    assert env.lib.msptiActivityDisable(RUNTIME_API) == 0
    env.lib.msimCall(call, 100)
    env.lib.msptiActivityFlushAll(0)
    assert len(c.records(RUNTIME_API)) == 1 and not env.lib.msptiActivityIsEnabled(RUNTIME_API)


def test_records_need_a_subscriber_on_the_simulator(env):
    c = env.collect()
    env.enable(RUNTIME_API, KERNEL)
    env.sub.close()
    env.launch(3)
    c.drain()
    assert c.records() == []
    env.sub = Subscription(env.lib)


def test_get_next_record_rules_on_the_simulator(env):
    L = env.lib
    rec = ctypes.c_void_p()
    assert L.msptiActivityGetNextRecord(None, 8, ctypes.byref(rec)) == 1
    buf = (ctypes.c_uint8 * 64)()
    ctypes.c_uint32.from_buffer(buf, 0).value = 77  # an unknown kind
    assert L.msptiActivityGetNextRecord(ctypes.addressof(buf), 64, ctypes.byref(rec)) == 999  # 26.x
    L.msimSetActivityEra(ERAS["newest"])
    assert L.msptiActivityGetNextRecord(ctypes.addressof(buf), 64, ctypes.byref(rec)) == 8
    ctypes.c_uint32.from_buffer(buf, 0).value = KERNEL
    assert L.msptiActivityGetNextRecord(ctypes.addressof(buf), 56, ctypes.byref(rec)) == 0
    assert rec.value == ctypes.addressof(buf)
    assert L.msptiActivityGetNextRecord(ctypes.addressof(buf), 56, ctypes.byref(rec)) == 3  # end, reset
    assert L.msptiActivityGetNextRecord(ctypes.addressof(buf), 56, ctypes.byref(rec)) == 0
    # The offset is the thread's, not the buffer's: stopping early leaves it for the next buffer.
    assert L.msptiActivityGetNextRecord(ctypes.addressof(buf), 112, ctypes.byref(rec)) == 8
    assert rec.value == ctypes.addressof(buf)  # unchanged: the error left *record alone
    assert L.msptiActivityGetNextRecord(ctypes.addressof(buf), 56, ctypes.byref(rec)) == 3


def test_kinds_and_symbols_per_era_on_the_simulator(env):
    L = env.lib
    L.msimSetActivityEra(ERAS["cann8"])
    for k in (ACL_API, NODE_API, RUNTIME_API, OVERHEAD, 0, 99):
        assert L.msptiActivityEnable(k) == 1, k
    assert L.msptiActivityEnable(COMMUNICATION) == 0 and L.msptiActivityEnable(API) == 0
    assert not L.msptiActivityIsEnabled(API)  # no such symbol in 8.x: the stand-in says false
    assert L.msimHasSymbol(b"msptiActivityIsEnabled") == 0
    assert L.msimHasSymbol(b"msptiActivityFlushPeriod") == 1
    L.msimSetActivityEra(ERAS["cann26"])
    assert L.msptiActivityEnable(RUNTIME_API) == 0 and L.msptiActivityIsEnabled(RUNTIME_API)
    assert L.msptiActivityEnable(OVERHEAD) == 1
    size = ctypes.c_size_t()
    assert L.msptiActivityGetStructSize(KERNEL, 0, ctypes.byref(size)) == 999  # absent before newest dev
    assert L.msimHasSymbol(b"msptiActivityGetNumDroppedRecords") == 0
    L.msimSetActivityEra(ERAS["newest"])
    assert L.msimHasSymbol(b"msptiActivityGetNumDroppedRecords") == 1
    assert L.msptiActivityGetStructSize(KERNEL, 0, ctypes.byref(size)) == 0 and size.value == 56
    assert L.msptiActivityGetStructSize(COMMUNICATION, 0, ctypes.byref(size)) == 0 and size.value == 72
    assert L.msptiActivityGetStructSize(0, 0, ctypes.byref(size)) == 8
    kinds, n, count = (ctypes.c_uint32 * 8)(), ctypes.c_uint32(8), ctypes.c_uint32()
    assert L.msptiActivityGetEnabledKinds(None, kinds, ctypes.byref(n), ctypes.byref(count)) == 0
    assert sorted(kinds[: count.value]) == [API, COMMUNICATION, RUNTIME_API]
    L.msimSetActivityEra(ERAS["follow"])
    for fidelity, era in ((2, 1), (1, 2), (0, 3)):  # cann8, cann26, documented
        L.msimSetFidelity(fidelity)
        assert L.msimGetActivityEra() == era
    L.msimSetFidelity(1)


def test_ld_preload_rule_for_the_hccl_and_memory_kinds_on_the_simulator(env, monkeypatch):
    L = env.lib
    monkeypatch.setenv("LD_PRELOAD", "")
    L.msimSetPreloadCheck(1)
    try:
        for k in (HCCL, 5, 6, MEMCPY):
            assert L.msptiActivityEnable(k) == 6, k  # 26.x: MSPTI_ERROR_WITHOUT_LD_PRELOAD
        assert L.msptiActivityEnable(KERNEL) == 0 and L.msptiActivityEnable(COMMUNICATION) == 0
        L.msimSetActivityEra(ERAS["newest"])
        assert L.msptiActivityEnable(HCCL) == 6 and L.msptiActivityEnable(MEMCPY) == 0
        L.msimSetActivityEra(ERAS["cann8"])
        assert L.msptiActivityEnable(HCCL) == 0  # 8.x had no check ...
        c = env.collect()
        L.msimCallBytes(env.sim.api("HcclAllReduce"), 1_000, 1 << 20, 0, 8)
        c.drain()
        assert c.records(HCCL) == []  # ... and its hooks never ran: no HCCL records
        assert len(c.records(COMMUNICATION)) == 1  # COMMUNICATION needs no hook
    finally:
        L.msimSetPreloadCheck(0)


def test_timestamps_are_realtime_and_match_msptiGetTimestamp_on_the_simulator(env):
    L = env.lib
    L.msimSetClock(0)
    c = env.collect()
    env.enable(RUNTIME_API, MARKER)
    before = time.time_ns()
    L.msimCall(env.sim.api("aclrtGetMemInfo"), 1_000)
    L.mstxMarkA(b"m", None)
    after = time.time_ns()
    L.msptiActivityFlushAll(0)
    (api,) = c.records(RUNTIME_API)
    (mark,) = c.records(MARKER)
    assert before <= api["start"] <= api["end"] <= mark["timestamp"] <= after
    ts = ctypes.c_uint64()
    assert L.msptiGetTimestamp(ctypes.byref(ts)) == 0 and after <= ts.value


def test_virtual_clock_timestamps_are_exact_on_the_simulator(env):
    c = env.collect()
    env.enable(RUNTIME_API, ACL_API)
    env.lib.msimVirtualSet(AHEAD_NS + 5_000_000)
    env.lib.msimCall(env.sim.api("aclrtMalloc"), 42_000)
    env.lib.msptiActivityFlushAll(0)
    (rt,) = c.records(RUNTIME_API)
    (acl,) = c.records(ACL_API)
    assert (
        (rt["start"], rt["end"]) == (AHEAD_NS + 5_000_000, AHEAD_NS + 5_042_000) == (acl["start"], acl["end"])
    )
    assert rt["name"] == "DevMalloc" and acl["name"] == "aclrtMalloc"  # internal name != functionName
    assert rt["pt"][0] == os.getpid() and rt["pt"][1] > 0


def test_a_call_that_starts_behind_real_time_starts_ahead_of_it_on_the_virtual_clock(env):
    # msMonitor drops every record that ended before its own start (system_clock::now()): the
    # virtual clock lives in the present, and only the models move it within and between calls.
    # A lagging call starts clock::LEAD_NS (1 s) ahead, so the calls after it, back to back, find
    # the clock ahead however long simulating them takes.
    lead = 10**9
    c = env.collect()
    env.enable(RUNTIME_API, MARKER)
    malloc = env.sim.api("aclrtMalloc")
    env.lib.msimVirtualSet(5_000_000)  # far behind CLOCK_REALTIME
    before = time.time_ns()
    env.lib.msimCall(malloc, 42_000)
    after = time.time_ns()
    env.lib.msimCall(malloc, 0)
    env.lib.mstxMarkA(b"next", None)
    env.lib.msptiActivityFlushAll(0)
    first, second = c.records(RUNTIME_API)
    (mark,) = c.records(MARKER)
    assert before + lead <= first["start"] <= after + lead and first["end"] - first["start"] == 42_000
    assert second["start"] == second["end"] == mark["timestamp"] == first["end"]


def test_timestamp_callback_sets_the_record_clock_on_the_simulator(env):
    L = env.lib
    L.msimSetActivityEra(ERAS["newest"])
    ticks = iter(range(10**9, 10**9 + 10_000, 100))
    cb = TIMESTAMP(lambda: next(ticks))
    assert L.msptiActivityRegisterTimestampCallback(cb) == 0
    c = env.collect()
    env.enable(RUNTIME_API)
    L.msimCall(env.sim.api("aclrtGetMemInfo"), 1_000)
    ts = ctypes.c_uint64()
    assert L.msptiGetTimestamp(ctypes.byref(ts)) == 0
    L.msptiActivityFlushAll(0)
    (api,) = c.records(RUNTIME_API)
    assert (api["start"], api["end"], ts.value) == (10**9, 10**9 + 100, 10**9 + 200)
    L.msptiActivityRegisterTimestampCallback(TIMESTAMP())
    L.msimSetActivityEra(ERAS["cann26"])
    assert L.msptiActivityRegisterTimestampCallback(cb) == 999  # no such symbol in 26.x


def test_external_correlation_is_one_global_stack_on_the_simulator(env):
    L = env.lib
    c = env.collect()
    env.enable(8, KERNEL, RUNTIME_API)
    last = ctypes.c_uint64()
    assert L.msptiActivityPopExternalCorrelationId(4, ctypes.byref(last)) == 5  # empty: QUEUE_EMPTY
    assert L.msptiActivityPushExternalCorrelationId(4, 777) == 0
    assert L.msptiActivityPopExternalCorrelationId(4, None) == 1  # NULL: 1, and no pop
    env.launch(1)
    other = threading.Thread(target=lambda: L.msptiActivityPopExternalCorrelationId(4, ctypes.byref(last)))
    other.start()
    other.join()  # another thread pops this thread's id: the stack is process-global
    assert last.value == 777
    # external_correlation_reporter.cpp checks no kind: any is pushed; a kind never pushed (or
    # popped empty) is QUEUE_EMPTY.
    assert (
        L.msptiActivityPushExternalCorrelationId(0, 11)
        == L.msptiActivityPushExternalCorrelationId(9, 12)
        == 0
    )
    assert L.msptiActivityPopExternalCorrelationId(9, ctypes.byref(last)) == 0 and last.value == 12
    assert L.msptiActivityPopExternalCorrelationId(9, ctypes.byref(last)) == 5
    assert L.msptiActivityPopExternalCorrelationId(77, ctypes.byref(last)) == 5 and last.value == 12
    assert L.msptiActivityPopExternalCorrelationId(0, ctypes.byref(last)) == 0 and last.value == 11
    c.drain()
    ext = c.records(8)
    (k,) = c.records(KERNEL)
    (rt,) = c.records(RUNTIME_API)
    # One record per bump while 777 was pushed: the wrapper's (before ENTER) and the kernel's.
    assert [e["externalId"] for e in ext] == [777, 777] and {e["externalKind"] for e in ext} == {4}
    assert ext[1]["correlationId"] == k["correlationId"] == rt["correlationId"]
    assert ext[0]["correlationId"] == k["correlationId"] - 1


FORK_SCRIPT = r"""
import os, sys, warnings
sys.path.insert(0, sys.argv[1])
warnings.simplefilter("ignore")
from _sim_activity import Collector, Subscription, bind, KERNEL, RUNTIME_API
from mspti_lens.sim import Simulator
sim = Simulator()
L = bind(sim.lib)
L.msimSetClock(0)
sub = Subscription(L)
c = Collector(L, size=1 << 12)
for k in (KERNEL, RUNTIME_API):
    assert L.msptiActivityEnable(k) == 0
L.msimSetDeviceModel(1000, 2_000_000_000, 1000)  # records stay 2 s on the channel: across the fork
launch = sim.api("aclrtLaunchKernelV2")
for _ in range(200):  # full buffers handed to completing threads, some still in flight
    L.msimLaunch(launch, 1000, 0, 1000, 1, b"K", None, 0)
pid = os.fork()
if pid == 0:
    L.msimSetClock(1)  # the child's own channel thread delivers at once
    pending = L.msimDevicePending() > 0  # the parent's records were on the channel at the fork
    L.msimSetDeviceModel(1000, 0, 1000)
    for _ in range(10):
        L.msimLaunch(launch, 1000, 0, 1000, 1, b"C", None, 0)
    ok = L.msimDeviceDrain(5000) == 0
    L.msptiActivityFlushAll(0)
    ks = [k for k in c.records(KERNEL) if k["name"] == "C"]
    os._exit(0 if ok and pending and len(ks) == 10 else 3)
_, status = os.waitpid(pid, 0)
assert L.msimDeviceDrain(10_000) == 0
L.msptiActivityFlushAll(0)
parent = len(c.records(KERNEL))
L.msimActivityReset()
print(os.waitstatus_to_exitcode(status), parent)
"""


def test_fork_with_records_in_flight_neither_hangs_nor_loses_the_parents_on_the_simulator(tmp_path):
    script = tmp_path / "fork.py"
    script.write_text(FORK_SCRIPT)
    tests = str(Path(__file__).resolve().parents[1])
    cmd = [sys.executable, str(script), tests]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)  # watchdog
    assert out.returncode == 0, out.stderr
    child, parent = map(int, out.stdout.split())
    assert child == 0  # the child recorded, drained and flushed its own launches
    assert parent == 200  # the parent's records, on the channel during the fork, all arrive


def test_concurrent_launchers_and_a_flush_all_loop_lose_and_repeat_nothing_on_the_simulator(env):
    """The collector's situation: threads record (launch wrappers, the channel) while another thread
    loops on FlushAll and completing threads hand full buffers back; small buffers force many
    hand-overs. Every record arrives exactly once."""
    c = env.collect(size=4096, pool=512)
    env.enable(KERNEL, RUNTIME_API)
    stop = threading.Event()

    def flusher():
        while not stop.is_set():
            env.lib.msptiActivityFlushAll(0)

    def launcher(i):
        env.lib.msimVirtualSet(1_000_000_000 * (i + 1))
        env.launch(500, stream=i % 2, kernel=f"K{i}".encode(), host_ns=1_000, device_ns=2_000)

    f = threading.Thread(target=flusher)
    f.start()
    ts = [threading.Thread(target=launcher, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    stop.set()
    f.join()
    c.drain()
    ks, rts = c.records(KERNEL), c.records(RUNTIME_API)
    assert env.lib.msimActivityStat(STAT["dropped"]) == 0
    assert len(ks) == len(rts) == 2000
    assert len({k["correlationId"] for k in ks}) == 2000 == len({r["correlationId"] for r in rts})
    assert {k["correlationId"] for k in ks} == {r["correlationId"] for r in rts}
    assert len(c.buffers) > 20
