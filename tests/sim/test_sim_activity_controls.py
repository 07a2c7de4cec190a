"""Python control of the simulator's activity side (``Simulator.activity``): settings with clear
errors, launches and calls that move bytes, the graph-replay workload and shared streams. All on
the simulator, with its virtual clock."""

from __future__ import annotations

from itertools import pairwise

import pytest
from _sim_activity import KERNEL, NODE_API, RUNTIME_API, Env


@pytest.fixture
def env(sim):
    e = Env(sim)
    yield e
    e.close()


def test_settings_name_the_valid_choices_on_the_simulator(sim):
    a = sim.activity
    with pytest.raises(ValueError, match="follow, cann8, cann26, newest"):
        a.era = "cann9"
    a.era = "newest"
    assert a.era == "newest" and a.has_symbol("msptiActivityGetNumDroppedRecords")
    a.era = "cann8"
    assert a.era == "cann8" and not a.has_symbol("msptiActivityIsEnabled")
    with pytest.raises(ValueError, match="records, dropped"):
        a.stat("nonsense")
    with pytest.raises(ValueError, match=">= 0"):
        a.null_buffer_every(-1)
    with pytest.raises(ValueError, match="launch_latency_ns"):
        a.device_model(launch_latency_ns=-5)
    with pytest.raises(ValueError, match="not a kernel-launch API"):
        a.launch("aclrtMalloc")
    with pytest.raises(ValueError, match="htod"):
        a.call_bytes("aclrtMemcpy", 4, copy_kind="sideways")
    sim.reset()
    assert a.era == "cann26" and a.stats()["records"] == 0


def test_python_launches_give_kernel_records_on_the_simulator(env):
    a = env.sim.activity
    c = env.collect()
    env.enable(KERNEL)
    a.device_model(launch_latency_ns=1_000, record_delay_ns=0, default_kernel_ns=7_000)
    a.launch(stream=6, kernels=4, kernel="Softmax", device_ns=30_000)
    env.sim.call("aclrtLaunchKernel", 2_000)  # a plain launch: one default kernel
    assert a.drain()  # the device channel is empty; the records wait in the partial buffer
    assert c.records(KERNEL) == []
    env.lib.msptiActivityFlushAll(0)
    ks = sorted(c.records(KERNEL), key=lambda k: k["ds"][1])  # the channel delivers by end time
    assert [k["name"] for k in ks] == ["SimKernel"] + ["Softmax"] * 4
    assert ks[0]["end"] - ks[0]["start"] == 7_000 and a.stream_free_at(6) == max(k["end"] for k in ks)
    assert a.stat("kernels") == 5 and a.pending == 0


def test_graph_workload_replays_many_kernels_per_launch_on_the_simulator(env):
    a = env.sim.activity
    c = env.collect(size=1 << 20)
    env.enable(KERNEL, RUNTIME_API, NODE_API)
    env.sim.run_workload("graph", steps=3, threads=2, time_scale=0.01, seed=1)
    assert a.drain()
    env.lib.msptiActivityFlushAll(0)
    ks = c.records(KERNEL)
    launches = [r for r in c.records(RUNTIME_API) if r["name"] == "LaunchKernelV2"]
    assert len(launches) == 6 and len(ks) == 6 * 48
    for r in launches:
        assert sum(k["correlationId"] == r["correlationId"] for k in ks) == 48
    assert {n["name"] for n in c.records(NODE_API)} == {"aclmdlRIExecuteAsync"}
    assert {k["ds"][1] for k in ks} == {0, 1}


def test_shared_stream_workload_puts_every_thread_on_stream_0_on_the_simulator(env):
    a = env.sim.activity
    c = env.collect(size=1 << 20)
    env.enable(KERNEL)
    a.shared_stream(True)
    env.sim.run_workload("graph", steps=2, threads=4, time_scale=0.01, seed=2)
    assert a.drain()
    env.lib.msptiActivityFlushAll(0)
    ks = sorted(c.records(KERNEL), key=lambda k: k["start"])
    assert {k["ds"] for k in ks} == {(0, 0)} and len(ks) == 4 * 2 * 48
    assert all(x["end"] <= y["start"] for x, y in pairwise(ks))
