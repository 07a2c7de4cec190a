"""The simulator behaves as CANN does where Huawei's own programs and st checks look
(docs/simulator_fidelity.md): msptiUnsubscribe delivers what the device had, synchronize waits for
the stream, nothing produced is lost without a counter, records carry CANN's names, kernel types,
data and algorithm types, on a CLOCK_REALTIME-sized clock."""

from __future__ import annotations

import ctypes

import pytest
from _sim_activity import COMMUNICATION, HCCL, KERNEL, MARKER, STAT
from test_sim_activity import Env

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
