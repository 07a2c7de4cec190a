"""The simulator's MSTX (standing in for libms_tools_ext.so with MSPTI's handlers): MARKER records
on host and device as the reference describes, domains, and the seed's scenario 2 brackets."""

from __future__ import annotations

import os
import threading

import pytest
from _sim_activity import AHEAD_NS, KERNEL, MARKER, Env, Subscription

HOST, DEVICE = 0, 1
RUNTIME, LAUNCH = 1, 10


@pytest.fixture
def env(sim):
    e = Env(sim)
    yield e
    e.close()


def test_host_mark_and_range_without_a_stream_on_the_simulator(env):
    c = env.collect()
    env.enable(MARKER)
    L = env.lib
    L.msimVirtualSet(AHEAD_NS + 7_000)
    L.mstxMarkA(b"checkpoint", None)
    rid = L.mstxRangeStartA(b"step 1", None)
    L.mstxRangeEnd(rid)
    L.mstxRangeEnd(987654)  # unknown id: nothing
    c.drain()
    mark, start, end = c.records(MARKER)
    assert (mark["flag"], mark["sourceKind"], mark["name"], mark["domain"]) == (
        1,
        HOST,
        "checkpoint",
        "default",
    )
    assert (start["flag"], start["name"], start["domain"]) == (2, "step 1", "default")
    assert (end["flag"], end["name"], end["domain"]) == (4, "", "")  # END: empty name and domain
    assert start["id"] == end["id"] == rid and mark["id"] < rid
    assert mark["objectId"][0] == os.getpid() and mark["timestamp"] == AHEAD_NS + 7_000


def test_marks_with_a_stream_give_device_records_with_empty_names_on_the_simulator(env):
    c = env.collect()
    env.enable(MARKER)
    L = env.lib
    s = L.msimStreamHandle(5)
    L.mstxMarkA(b"m", s)
    rid = L.mstxRangeStartA(b"r", s)
    L.mstxRangeEnd(rid)
    c.drain()
    rs = c.records(MARKER)
    host = [r for r in rs if r["sourceKind"] == HOST]
    dev = [r for r in rs if r["sourceKind"] == DEVICE]
    assert [r["flag"] for r in host] == [8, 16, 32] and [r["name"] for r in host] == ["m", "r", ""]
    assert sorted(r["flag"] for r in dev) == [8, 16, 32]
    assert all(r["name"] == "" and r["domain"] == "" and r["objectId"] == (0, 5) for r in dev)
    assert sorted(r["id"] for r in dev) == sorted(r["id"] for r in host)


def test_nothing_without_marker_kind_or_with_bad_messages_on_the_simulator(env):
    c = env.collect()
    L = env.lib
    L.mstxMarkA(b"off", None)
    assert L.mstxRangeStartA(b"off", None) == 0  # MARKER not enabled: start returns 0
    env.enable(MARKER)
    L.mstxMarkA(None, None)
    L.mstxMarkA(b"x" * 255, None)  # 255 bytes or more: rejected
    L.mstxMarkA(b"y" * 254, None)
    c.drain()
    assert [len(r["name"]) for r in c.records(MARKER)] == [254]


def test_domains_on_the_simulator(env):
    c = env.collect()
    env.enable(MARKER)
    L = env.lib
    assert not L.mstxDomainCreateA(b"default") and not L.mstxDomainCreateA(None)
    comm = L.mstxDomainCreateA(b"communication")
    assert comm and L.mstxDomainCreateA(b"communication") == comm
    test = L.mstxDomainCreateA(b"test")
    assert L.mstxDomainCreateA(b"testing") == test  # MSPTI's prefix compare: "testing" is "test"
    assert L.msptiActivityDisableMarkerDomain(b"later") == 0  # before the domain exists
    later = L.mstxDomainCreateA(b"later")
    L.mstxDomainMarkA(comm, b'{"opName":"HcclAllReduce","groupName":"g0"}', None)
    L.mstxDomainMarkA(later, b"hidden", None)
    rid = L.mstxDomainRangeStartA(test, b"in test", None)
    L.mstxDomainRangeEnd(test, rid)
    L.mstxDomainMarkA(12345, b"garbage handle", None)  # unknown handles are ignored
    assert L.msptiActivityEnableMarkerDomain(b"later") == 0
    L.mstxDomainMarkA(later, b"shown", None)
    L.mstxDomainDestroy(later)
    L.mstxDomainMarkA(later, b"destroyed", None)
    assert L.msptiActivityDisableMarkerDomain(None) == 1
    c.drain()
    got = [(r["domain"], r["name"]) for r in c.records(MARKER)]
    assert got == [
        ("communication", '{"opName":"HcclAllReduce","groupName":"g0"}'),
        ("test", "in test"),
        ("", ""),
        ("later", "shown"),
    ]


def test_a_range_may_end_on_another_thread_on_the_simulator(env):
    c = env.collect()
    env.enable(MARKER)
    rid = env.lib.mstxRangeStartA(b"cross", None)
    t = threading.Thread(target=env.lib.mstxRangeEnd, args=(rid,))
    t.start()
    t.join()
    c.drain()
    start, end = c.records(MARKER)
    assert start["id"] == end["id"] == rid and start["objectId"][1] != end["objectId"][1]


def test_seed_scenario_2_marks_bracket_the_kernel_on_the_simulator(env):
    """The guide's scenario 2: LAUNCH only, a mark on the stream at each launch's ENTER and EXIT,
    MARKER and KERNEL collected. Per launch: two host marks named after the launch function, and
    device marks with the same ids bracketing the kernel on that stream."""
    L = env.lib
    stream = L.msimStreamHandle(0)
    env.sub.close()

    def on_launch(domain, cbid, site):
        if (domain, cbid) == (RUNTIME, LAUNCH):
            L.mstxMarkA(b"aclrtLaunchKernelV2", stream)

    env.sub = Subscription(L, on_launch)
    env.sub.enable(RUNTIME, LAUNCH)
    c = env.collect()
    env.enable(MARKER, KERNEL)
    env.launch(3, stream=0, device_ns=40_000)
    c.drain()
    marks = c.records(MARKER)
    host = [m for m in marks if m["sourceKind"] == HOST]
    dev = {m["id"]: m for m in marks if m["sourceKind"] == DEVICE}
    assert len(host) == 6 and len(dev) == 6
    assert {m["name"] for m in host} == {"aclrtLaunchKernelV2"} and {m["flag"] for m in host} == {8}
    ks = sorted(c.records(KERNEL), key=lambda k: k["start"])
    for i, k in enumerate(ks):
        enter, exit_ = host[2 * i], host[2 * i + 1]
        assert enter["timestamp"] <= dev[enter["id"]]["timestamp"] <= k["start"]
        assert k["end"] <= dev[exit_["id"]]["timestamp"]
