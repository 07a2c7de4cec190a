"""The simulator behaves as CANN does where Huawei's own programs and st checks look
(docs/simulator_fidelity.md): msptiUnsubscribe delivers what the device had, synchronize waits for
the stream, nothing produced is lost without a counter, records carry CANN's names, kernel types,
data and algorithm types, on a CLOCK_REALTIME-sized clock."""

from __future__ import annotations

import ctypes

import pytest
from _sim_activity import API, COMMUNICATION, HCCL, KERNEL, MARKER, STAT, Env

HOST, DEVICE = 0, 1
#: Records reach the channel's reader this long after their task ends: far longer than any test
#: waits, so a record a test sees was delivered by the call under test, not by the reader.
LATE_NS = 30_000_000_000


@pytest.fixture
def env(sim):
    e = Env(sim)
    yield e
    e.close()


def now_ns(lib) -> int:
    t = ctypes.c_uint64()
    assert lib.msptiGetTimestamp(ctypes.byref(t)) == 0
    return t.value


# -- msptiUnsubscribe delivers what the device had ---------------------------------------------------


def test_unsubscribe_right_after_the_marks_delivers_the_device_markers_on_the_simulator(env):
    # Huawei's samples/mspti_mstx_activity_domain: a range with a stream, one in a disabled domain,
    # one without a stream, then msptiUnsubscribe and msptiActivityFlushAll at once. Its st check
    # wants both device markers; the simulator used to hand over 0 (they were still in flight).
    L = env.lib
    L.msimSetClock(0)
    L.msimSetDeviceModel(3_000, LATE_NS, 20_000)
    c = env.collect()
    env.enable(MARKER)
    stream = L.msimStreamHandle(0)
    dom = L.mstxDomainCreateA(b"domainRange")
    L.mstxDomainRangeEnd(dom, L.mstxDomainRangeStartA(dom, b"s.c_str()", stream))
    L.msptiActivityDisableMarkerDomain(b"domainRange")
    L.mstxDomainRangeEnd(dom, L.mstxDomainRangeStartA(dom, b"closeDomainMark", stream))
    L.msptiActivityEnableMarkerDomain(b"domainRange")
    L.mstxDomainRangeEnd(dom, L.mstxDomainRangeStartA(dom, b"openDomainMark", None))
    assert L.msimDevicePending() == 2
    assert L.msptiUnsubscribe(env.sub.handle) == 0
    assert L.msptiActivityFlushAll(1) == 0
    marks = c.records(MARKER)
    host = [m for m in marks if m["sourceKind"] == HOST]
    dev = [m for m in marks if m["sourceKind"] == DEVICE]
    assert [(m["name"], m["domain"]) for m in host if m["name"]] == [
        ("s.c_str()", "domainRange"),
        ("openDomainMark", "domainRange"),
    ]
    assert len(dev) == 2 and all((m["name"], m["domain"]) == ("", "") for m in dev)
    assert sorted(m["flag"] for m in dev) == [16, 32]  # START/END with device
    assert L.msimDevicePending() == 0 and L.msimActivityStat(STAT["device_lost"]) == 0


def test_unsubscribe_waits_for_launched_work_and_hands_over_its_records_on_the_simulator(env):
    L = env.lib
    L.msimSetClock(0)
    L.msimSetDeviceModel(3_000, LATE_NS, 20_000)
    c = env.collect()
    env.enable(KERNEL, HCCL, COMMUNICATION)
    env.launch(5, stream=0, host_ns=1_000, device_ns=2_000_000)  # 10 ms of device work, queued
    L.msimSetThreadStream(0, 7)
    L.msimCallBytes(env.sim.api("HcclAllReduce"), 1_000, 1 << 20, 0, 8)
    L.msimSetThreadStream(0, 0)
    last = max(L.msimStreamFreeAt(0, 0), L.msimStreamFreeAt(0, 7))
    assert now_ns(L) < last and L.msimDevicePending() == 5 + 2
    assert L.msptiUnsubscribe(env.sub.handle) == 0
    assert now_ns(L) >= last  # the device finished what it was given before profiling stopped
    assert L.msptiActivityFlushAll(1) == 0
    ks = c.records(KERNEL)
    assert len(ks) == 5 and max(k["end"] for k in ks) == L.msimStreamFreeAt(0, 0)
    assert len(c.records(HCCL)) == len(c.records(COMMUNICATION)) == 1
    assert L.msimDevicePending() == 0


def test_unsubscribe_with_a_wrong_handle_still_stops_the_device_first_on_the_simulator(env):
    # callback_manager.cpp: msptiUnsubscribe runs ResetAllDevice before UnInit checks the handle.
    L = env.lib
    L.msimSetClock(0)
    L.msimSetDeviceModel(3_000, LATE_NS, 20_000)
    c = env.collect()
    env.enable(KERNEL)
    env.launch(3, host_ns=1_000, device_ns=1_000_000)
    assert L.msimDevicePending() == 3
    assert L.msptiUnsubscribe(env.sub.handle.value + 16) == 1  # not the subscriber ...
    assert L.msimDevicePending() == 0  # ... yet the device's records were written first
    assert L.msptiActivityFlushAll(1) == 0 and len(c.records(KERNEL)) == 3


def test_unsubscribe_counts_the_records_of_work_the_device_could_not_finish_on_the_simulator(env):
    L = env.lib
    L.msimSetClock(0)
    L.msimSetDeviceModel(3_000, LATE_NS, 20_000)
    c = env.collect()
    env.enable(KERNEL)
    env.launch(2, host_ns=1_000, device_ns=1_000)
    env.launch(1, host_ns=1_000, device_ns=60_000_000_000)  # a minute: past unsubscribe's bounded wait
    assert L.msptiUnsubscribe(env.sub.handle) == 0
    assert L.msptiActivityFlushAll(1) == 0
    assert len(c.records(KERNEL)) == 2
    assert L.msimActivityStat(STAT["device_lost"]) == 1 and L.msimDevicePending() == 0


def test_device_records_of_a_kind_disabled_while_they_wait_are_counted_on_the_simulator(env):
    # CANN 8.x's disable does not flush the device channels: what is in them is discarded, counted.
    L = env.lib
    L.msimSetActivityEra(1)
    L.msimSetClock(0)
    L.msimSetDeviceModel(1_000, 200_000_000, 1_000)
    c = env.collect()
    env.enable(KERNEL)
    env.launch(4, host_ns=1_000, device_ns=1_000)
    assert L.msptiActivityDisable(KERNEL) == 0
    assert L.msimDeviceDrain(10_000) == 0
    L.msptiActivityFlushAll(1)
    assert c.records(KERNEL) == []
    assert L.msimActivityStat(STAT["device_discarded"]) == 4


# -- synchronize waits for the stream; the training loop synchronizes every step ---------------------

RUNTIME, SYNCHRONIZE = 1, 9


def test_every_stream_synchronize_of_the_training_loop_returns_with_its_stream_idle_on_the_simulator(env):
    # The host ran ahead of the device without bound: after 20 steps each stream stayed busy
    # 340 ms more. A synchronize returns when its stream's work is done, and each step ends in one.
    L = env.lib
    seen = []
    sub = env.sub

    def at_exit(domain, cbid, site):
        if (domain, cbid, site) == (RUNTIME, SYNCHRONIZE, 1):  # on the training thread, its stream 0
            seen.append((L.msimVirtualNow(), L.msimStreamFreeAt(0, 0)))

    sub.close()
    env.sub = sub = type(sub)(L, on_callback=at_exit)
    sub.enable(RUNTIME, SYNCHRONIZE)
    env.sim.run_workload("training", steps=8, ranks=8, threads=1, seed=4)
    assert len(seen) == 8
    assert all(free <= now for now, free in seen), seen
    waits = [now - free for now, free in seen]  # each returns right when its stream went idle ...
    assert max(waits) < 50_000  # ... give or take the call's own few µs


def test_the_device_is_idle_when_a_training_job_returns_on_the_simulator(env):
    L = env.lib
    L.msimSetClock(0)
    env.enable(KERNEL, COMMUNICATION)
    c = env.collect(size=1 << 20, pool=64)
    env.sim.run_workload("training", steps=10, ranks=8, threads=1, seed=4, time_scale=0.2)
    now = now_ns(L)
    assert L.msimStreamFreeAt(0, 0) <= now and L.msimStreamFreeAt(0, 1000) <= now
    c.drain()
    assert len(c.records(KERNEL)) == 10 * (150 + 6 * 50 + 40)


def test_queue_delays_are_those_of_a_real_loop_and_differ_by_launch_function_on_the_simulator(sim):
    # Scenario 2's queue delay (launch ENTER to kernel start) was ~90-136 ms for every launch
    # function: the host ran ahead without bound. In a loop that synchronizes each step it is
    # small, and longest for launches that follow long kernels.
    from mspti_lens import Session

    sim.set_clock("virtual")
    with Session(library="sim", activity=["kernel"], clock="mspti", join_sample=1.0) as s:
        sim.run_workload("training", steps=20, ranks=8, threads=1, seed=2)
        snap = s.snapshot()
    q = {r["name"]: r["queue_med_ns"] for r in snap.launches().iter_rows(named=True)}
    assert set(q) == {
        "aclrtLaunchKernel",
        "aclrtLaunchKernelV2",
        "aclrtLaunchKernelWithConfig",
        "aclrtLaunchKernelWithHostArgs",
    }
    assert all(5_000 < v < 1_000_000 for v in q.values()), q  # µs to a few hundred µs, never ms
    assert max(q.values()) > 5 * min(q.values()), q  # each launch function has its own


# -- records as CANN writes them ---------------------------------------------------------------------


def test_communication_records_carry_hccls_op_name_data_type_and_algorithm_on_the_simulator(env):
    L = env.lib
    c = env.collect()
    env.enable(HCCL, COMMUNICATION, API)
    calls = [  # (api, count, HcclDataType, ranks)
        ("HcclAllReduce", 1 << 20, 11, 8),  # bf16, one server
        ("HcclAllGather", 1 << 18, 4, 16),  # fp32, two servers
        ("HcclAlltoAllV", 1 << 10, 3, 32),
        ("HcclReduceScatter", 1 << 25, 3, 24),  # 64 MiB
        ("HcclBroadcast", 100, 0, 24),
    ]
    for api, count, dt, ranks in calls:
        assert L.msimCallCollective(env.sim.api(api), 9_000, count, dt, ranks) == 0
    assert L.msimCallCollective(env.sim.api("HcclAllReduce"), 9_000, 1, 13, 8) == -1  # no such type
    assert L.msimCallCollective(env.sim.api("aclrtMalloc"), 9_000, 1, 3, 8) == -1  # no collective
    c.drain()
    cs, hs = c.records(COMMUNICATION), c.records(HCCL)
    assert [x["name"] for x in cs] == [
        "hcom_allReduce_", "hcom_allGather_", "hcom_alltoallv_", "hcom_reduceScatter_", "hcom_broadcast_"
    ]  # fmt: skip
    assert [h["name"] for h in hs] == [a for a, *_ in calls]  # HCCL records: the functions' names
    assert [(x["dataType"], x["count"]) for x in cs] == [(dt, n) for _, n, dt, _ in calls]
    assert [x["algType"] for x in cs] == ["MESH", "MESH-HD", "MESH-PAIRWISE", "MESH-PIPELINE", "MESH-NHR"]
    # hccl_calculator.cpp: count x type size, times rankSize for AllGather and ReduceScatter.
    sizes = (2, 4, 2, 2, 1)
    for h, (api, n, _, ranks), size in zip(hs, calls, sizes):
        per_rank = api in ("HcclAllGather", "HcclReduceScatter")
        want = n * size * (ranks if per_rank else 1) / (h["end"] - h["start"])
        assert h["bandWidth"] == pytest.approx(want), api
    # test_mspti_communication.py: each COMMUNICATION record has an API record of its name and id.
    api = {(r["correlationId"], r["name"]) for r in c.records(API)}
    assert all((x["correlationId"], x["name"]) in api for x in cs)


def test_hccl_bandwidth_is_computed_as_msptis_hccl_calculator_does_on_the_simulator(env):
    # hccl_calculator.cpp: count x type size x rankSize for AllGather, ReduceScatter, Scatter and
    # AlltoAll; count x type size for AllReduce, Broadcast, Reduce, Send and Recv; no formula for
    # the barrier; over end - start.
    L = env.lib
    c = env.collect()
    env.enable(HCCL)
    times_ranks = {"HcclAllGather", "HcclReduceScatter", "HcclScatter", "HcclAlltoAll"}
    alone = {"HcclAllReduce", "HcclBroadcast", "HcclReduce", "HcclSend", "HcclRecv"}
    count, fp16, ranks = 1 << 16, 3, 8
    for api in sorted(times_ranks | alone) + ["HcclBarrier"]:
        assert L.msimCallCollective(env.sim.api(api), 9_000, count, fp16, ranks) == 0, api
    c.drain()
    got = {h["name"]: h["bandWidth"] * (h["end"] - h["start"]) for h in c.records(HCCL)}
    want = {api: count * 2 * (ranks if api in times_ranks else 1) for api in times_ranks | alone}
    assert got == pytest.approx({**want, "HcclBarrier": 0})


def test_the_training_workload_writes_cann_kernel_types_and_19_digit_timestamps_on_the_simulator(env):
    c = env.collect(size=1 << 20, pool=64)
    env.enable(KERNEL, COMMUNICATION, MARKER)
    L = env.lib
    L.msimVirtualSet(0)  # back to the present (Env sets the clock far ahead)
    stream = L.msimStreamHandle(0)
    L.mstxMarkA(b"step", stream)
    env.sim.run_workload("training", steps=2, ranks=8, threads=1, seed=4)
    c.drain()
    ks = c.records(KERNEL)
    types = {k["name"]: k["type"] for k in ks}
    assert types["MatMulV2"] == "KERNEL_AICORE" and types["FlashAttentionScore"] == "KERNEL_MIX_AIC"
    assert types["Add"] == types["LayerNormV3"] == "KERNEL_AIVEC"
    comms = c.records(COMMUNICATION)
    assert {x["dataType"] for x in comms} == {11, 4}  # bf16 gradients; fp32 broadcast and barrier
    stamps = [v for r in ks + comms for v in (r["start"], r["end"])]
    stamps += [m["timestamp"] for m in c.records(MARKER)]
    assert all(len(str(t)) == 19 for t in stamps)  # the st regexes want \d{19}


def test_virtual_clocks_start_in_the_present_on_the_simulator(sim):
    # Real MSPTI timestamps are CLOCK_REALTIME ns: a new thread's virtual clock starts there.
    import threading
    import time

    got = []
    t = threading.Thread(
        target=lambda: got.append((time.time_ns(), sim.lib.msimVirtualNow(), time.time_ns()))
    )
    t.start()
    t.join()
    ((before, now, after),) = got
    assert before <= now <= after
