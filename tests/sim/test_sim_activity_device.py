"""The simulator's device side: kernels on per-stream timelines, correlation ids that link API
records to kernels (graph replay 1:N), collectives, copies and memory records. Virtual clock."""

from __future__ import annotations

import threading
from itertools import pairwise

import pytest
from _sim_activity import (
    ACL_API,
    AHEAD_NS,
    API,
    COMMUNICATION,
    ERAS,
    HCCL,
    KERNEL,
    MEMCPY,
    MEMORY,
    MEMSET,
    NODE_API,
    RUNTIME_API,
    STAT,
    Env,
    Subscription,
)

RUNTIME, LAUNCH = 1, 10


@pytest.fixture
def env(sim):
    e = Env(sim)
    yield e
    e.close()


def no_overlap_per_stream(kernels):
    by_stream = {}
    for k in kernels:
        by_stream.setdefault(k["ds"], []).append((k["start"], k["end"]))
    for spans in by_stream.values():
        spans.sort()
        for (_s0, e0), (s1, _) in pairwise(spans):
            assert e0 <= s1, "kernels on one stream overlap"
    return by_stream


def test_kernel_records_equal_kernels_launched_on_the_simulator(env):
    c = env.collect()
    env.enable(KERNEL)
    env.launch(7, stream=0)
    env.launch(5, stream=1, kernel=b"Add")
    env.launch(2, stream=1, kernels=3, kernel=b"Fused")  # one call, three kernels
    c.drain()
    ks = c.records(KERNEL)
    assert len(ks) == 7 + 5 + 6 == env.lib.msimActivityStat(STAT["kernels"])
    names = [k["name"] for k in ks]
    assert (names.count("MatMul"), names.count("Add"), names.count("Fused")) == (7, 5, 6)
    assert env.lib.msimDevicePending() == 0


def test_a_launch_returns_before_its_kernel_runs_and_kernels_queue_on_a_stream_on_the_simulator(env):
    """Each kernel starts no earlier than its launch's ENTER (and its submission + latency), kernels
    on one stream never overlap, and a stream's kernels run back to back once the host outpaces it."""
    env.lib.msimSetDeviceModel(3_000, 0, 20_000)
    enters = []
    env.sub.close()
    env.sub = Subscription(
        env.lib, lambda d, cbid, site: site == 0 and enters.append(env.lib.msimVirtualNow())
    )
    env.sub.enable(RUNTIME, LAUNCH)
    c = env.collect()
    env.enable(KERNEL, RUNTIME_API)
    env.lib.msimVirtualSet(AHEAD_NS + 1_000_000)
    env.launch(10, stream=4, host_ns=5_000, device_ns=50_000)  # device-bound: a queue builds up
    c.drain()
    ks = sorted(c.records(KERNEL), key=lambda k: k["start"])
    apis = {a["correlationId"]: a for a in c.records(RUNTIME_API)}
    assert len(ks) == len(enters) == 10
    for k, enter in zip(ks, enters):
        api = apis[k["correlationId"]]  # the launch that made it
        assert api["start"] == enter and k["start"] >= api["end"] + 3_000 >= enter
        assert k["end"] - k["start"] == 50_000
    no_overlap_per_stream(ks)
    # First kernel: launch latency after its launch's host work; then back to back.
    assert ks[0]["start"] == AHEAD_NS + 1_000_000 + 5_000 + 3_000
    assert all(b["start"] == a["end"] for a, b in pairwise(ks))
    assert env.lib.msimStreamFreeAt(0, 4) == ks[-1]["end"]
    # The host was done long before the device: API window ends precede the kernels' ends.
    assert apis[ks[-1]["correlationId"]]["end"] < ks[-1]["start"]


def test_synchronize_stream_waits_for_the_device_on_the_simulator(env):
    env.enable(KERNEL)  # the device timeline runs while any activity kind is enabled
    env.lib.msimSetDeviceModel(1_000, 0, 0)
    env.lib.msimVirtualSet(AHEAD_NS)
    env.lib.msimSetThreadStream(0, 2)
    env.launch(4, stream=2, host_ns=1_000, device_ns=100_000)
    env.lib.msimSynchronizeStream(2_000)
    assert (
        env.lib.msimVirtualNow() == env.lib.msimStreamFreeAt(0, 2) == AHEAD_NS + 1_000 + 1_000 + 4 * 100_000
    )  # first launch + latency, then back to back
    env.lib.msimSetThreadStream(0, 0)


def test_correlation_ids_link_api_records_to_kernels_on_the_simulator(env):
    """26.x join: RUNTIME_API / ACL_API records carry the thread's id after the kernel's bump,
    equal to the KERNEL record's; the wrapper's own bump (before ENTER) is one less."""
    c = env.collect()
    env.enable(KERNEL, RUNTIME_API, ACL_API)
    env.launch(3, api="aclrtLaunchKernel")
    c.drain()
    ks, rts, acls = c.records(KERNEL), c.records(RUNTIME_API), c.records(ACL_API)
    assert [k["correlationId"] for k in ks] == [r["correlationId"] for r in rts] == [2, 4, 6]
    assert [a["correlationId"] for a in acls] == [2, 4, 6]
    assert {r["name"] for r in rts} == {"KernelLaunch"} and {a["name"] for a in acls} == {"aclrtLaunchKernel"}
    # Without KERNEL no task-track bump: API records carry the wrapper's id (stale for a join).
    env.lib.msptiActivityDisable(KERNEL)
    env.launch(1)
    c.drain()
    assert c.records(RUNTIME_API)[-1]["correlationId"] == 7


def test_graph_replay_gives_one_api_many_kernels_on_the_simulator(env):
    c = env.collect()
    env.enable(KERNEL, RUNTIME_API, NODE_API, API)
    env.launch(1, kernels=5, graph=1, kernel=b"GraphTask", node=b"aclmdlExecute")
    env.launch(1, kernels=5, graph=1, kernel=b"GraphTask", node=b"aclmdlExecute")
    c.drain()
    ks, rts = c.records(KERNEL), c.records(RUNTIME_API)
    assert len(rts) == 2 and len(ks) == 10
    for rt in rts:
        mine = [k for k in ks if k["correlationId"] == rt["correlationId"]]
        assert len(mine) == 5
    nodes = c.records(NODE_API)
    assert [n["name"] for n in nodes] == ["aclmdlExecute"] * 2 and len(c.records(API)) == 2
    assert [n["correlationId"] for n in nodes] == [r["correlationId"] for r in rts]
    no_overlap_per_stream(ks)


def test_four_threads_on_shared_and_separate_streams_on_the_simulator(env):
    """Per-thread correlation: every kernel's id belongs to an API record of its own thread, and
    the join through (thread id, correlation id) is exact while streams are shared."""
    env.lib.msimSetDeviceModel(2_000, 0, 0)
    c = env.collect(pool=256)
    env.enable(KERNEL, RUNTIME_API)
    streams = [0, 0, 1, 2]  # threads 0 and 1 share stream 0

    def worker(i):
        env.lib.msimVirtualSet(10_000_000 * (i + 1))
        env.launch(50, stream=streams[i], kernel=f"K{i}".encode(), host_ns=4_000 + i, device_ns=9_000)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    c.drain()
    ks, rts = c.records(KERNEL), c.records(RUNTIME_API)
    assert len(ks) == len(rts) == 200
    by_corr = {r["correlationId"]: r for r in rts}
    assert len(by_corr) == 200  # ids are unique across threads
    tids = {}
    for k in ks:
        api = by_corr[k["correlationId"]]
        tids.setdefault(k["name"], set()).add(api["pt"][1])
        assert api["end"] - api["start"] == 4_000 + int(k["name"][1])
        assert k["start"] >= api["end"]
    assert all(len(t) == 1 for t in tids.values()) and len(set().union(*tids.values())) == 4
    by_stream = no_overlap_per_stream(ks)
    assert sorted(len(v) for v in by_stream.values()) == [50, 50, 100]


def test_collectives_give_hccl_and_communication_records_with_bytes_on_the_simulator(env):
    c = env.collect()
    env.enable(HCCL, COMMUNICATION)
    env.lib.msimSetCommName(b"tp_group_0")
    env.lib.msimSetThreadStream(0, 9)
    env.lib.msimCallBytes(env.sim.api("HcclAllReduce"), 30_000, 64 << 20, 0, 8)
    env.lib.msimCallBytes(env.sim.api("HcclAllGather"), 20_000, 4 << 20, 0, 8)
    env.lib.msimSetThreadStream(0, 0)
    env.lib.msimSetCommName(None)
    c.drain()
    hs, cs = c.records(HCCL), c.records(COMMUNICATION)
    assert [h["name"] for h in hs] == ["HcclAllReduce", "HcclAllGather"]
    assert [x["name"] for x in cs] == ["hcom_allReduce_", "hcom_allGather_"]  # HCCL's op names
    # bytes/ns = GB/s; an all-gather's counts every rank's part (hccl_calculator.cpp)
    for h, x, nbytes, ranks in zip(hs, cs, (64 << 20, 4 << 20), (1, 8)):
        assert h["commName"] == x["commName"] == "tp_group_0" and h["ds"] == x["ds"] == (0, 9)
        assert h["bandWidth"] == pytest.approx(nbytes * ranks / (h["end"] - h["start"]))
        assert x["count"] * 2 == nbytes and x["dataType"] == 3  # FP16
        assert (h["start"], h["end"]) == (x["start"], x["end"])
    assert hs[1]["start"] >= hs[0]["end"]  # one HCCL stream: the ops queue
    assert cs[0]["correlationId"] > 0 and cs[1]["correlationId"] == cs[0]["correlationId"] + 1


def test_memory_records_carry_bytes_and_the_host_window_on_the_simulator(env):
    c = env.collect()
    env.enable(MEMCPY, MEMSET, MEMORY)
    env.lib.msimVirtualSet(AHEAD_NS + 2_000_000)
    env.lib.msimCallBytes(env.sim.api("aclrtMemcpy"), 50_000, 4, 0, 1)
    env.lib.msimCallBytes(env.sim.api("aclrtMemcpyAsync"), 7_000, 8 << 20, 4, 1)  # DTOD
    env.lib.msimCallBytes(env.sim.api("aclrtMemsetAsync"), 3_000, 1 << 20, 0, 1)
    env.lib.msimCallBytes(env.sim.api("aclrtMalloc"), 42_000, 64 << 20, 0, 1)
    env.lib.msimCallBytes(env.sim.api("aclrtFree"), 9_000, 64 << 20, 0, 1)
    env.lib.msptiActivityFlushAll(0)
    m1, m2 = c.records(MEMCPY)
    assert (m1["copyKind"], m1["bytes"], m1["isAsync"]) == (3, 4, 0)  # sync memcpy: DTOH
    assert (m1["start"], m1["end"]) == (AHEAD_NS + 2_000_000, AHEAD_NS + 2_050_000)  # host time of the call
    assert (m2["copyKind"], m2["bytes"], m2["isAsync"]) == (4, 8 << 20, 1)
    (ms,) = c.records(MEMSET)
    assert ms["bytes"] == 1 << 20 and ms["isAsync"] == 1
    alloc, free = c.records(MEMORY)
    assert (alloc["memoryOperationType"], free["memoryOperationType"]) == (0, 1)
    assert alloc["memoryKind"] == 1 and alloc["bytes"] == 64 << 20 and alloc["end"] - alloc["start"] == 42_000
    assert m1["correlationId"] < m2["correlationId"] < ms["correlationId"] < alloc["correlationId"]


def test_kernels_of_a_workload_are_counted_and_never_overlap_on_the_simulator(env):
    c = env.collect(size=1 << 20, pool=64)
    env.enable(KERNEL, COMMUNICATION, MEMCPY)
    env.sim.run_workload("training", steps=2, threads=2, ranks=4, time_scale=0.01, seed=3)
    c.drain()
    ks = c.records(KERNEL)
    assert len(ks) == env.lib.msimActivityStat(STAT["kernels"]) == 2 * 2 * (150 + 6 * 50 + 40)
    assert {k["ds"] for k in ks} == {(0, 0), (0, 1)}  # one stream per compute thread
    assert {"MatMulV2", "FlashAttentionScore"} <= {k["name"] for k in ks}
    no_overlap_per_stream(ks)
    comms = c.records(COMMUNICATION)
    assert {x["ds"][1] for x in comms} == {1000, 1001} and {x["name"] for x in comms} >= {"hcom_allReduce_"}
    assert max(x["count"] * 4 for x in comms if x["dataType"] == 4) == 64 << 20  # the fp32 broadcast
    assert {m["bytes"] for m in c.records(MEMCPY)} == {8 << 20, 4}


@pytest.mark.parametrize("era", ["cann26", "cann8"])
def test_disable_flushes_the_device_channel_only_from_26x_on_the_simulator(env, era):
    env.lib.msimSetActivityEra(ERAS[era])
    env.lib.msimSetClock(0)
    env.lib.msimSetDeviceModel(1_000, 3_000_000_000, 1_000)  # records reach the reader 3 s late
    c = env.collect()
    env.enable(KERNEL)
    env.launch(3, host_ns=1_000, device_ns=1_000)
    assert env.lib.msimDevicePending() == 3
    assert env.lib.msptiActivityDisable(KERNEL) == 0
    c.drain()
    # 26.x writes what the channel holds before the kind goes off; 8.x loses it.
    assert len(c.records(KERNEL)) == (3 if era == "cann26" else 0)
