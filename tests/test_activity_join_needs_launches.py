"""The launch join, and the RUNTIME_API records it asks MSPTI for, are on only while the session
traces a launch callback (their spans are what kernels join to): a kernel-only session must not
double the records the library writes per launch. Asserted on the simulator's own record counters
and the session's join mode, never on timing."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::mspti_lens.errors.SimulatedBackendWarning")

N = 200


@pytest.fixture
def virtual(sim):
    sim.set_clock("virtual")
    sim.activity.device_model(launch_latency_ns=2000, record_delay_ns=0, default_kernel_ns=1000)
    return sim


def launch(sim, n: int = N) -> int:
    """`n` launches; the records the library wrote for them (its device channel drained)."""
    assert sim.activity.drain()
    before = sim.activity.stat("records")
    for _ in range(n):
        sim.activity.launch("aclrtLaunchKernel", host_ns=5000, stream=1, device_ns=3000, kernel="MatMul")
    assert sim.activity.drain()
    return sim.activity.stat("records") - before


def test_a_kernel_only_session_asks_for_kernel_records_only_on_the_simulator(virtual):
    from mspti_lens import Session

    sim = virtual
    with Session(library="sim", enable=[], clock="mspti", activity=["kernel"]) as s:
        assert s.join.startswith("off (no launch callbacks traced"), s.join
        assert s.activity == ["kernel"]
        written = launch(sim)
        snap = s.snapshot()
    # One KERNEL record per launch and nothing else: no RUNTIME_API record behind the user's back.
    assert written == N == sim.activity.stat("kernels")
    c = snap.activity.counters
    assert c["records"] == N and snap.kernels()["num_calls"].sum() == N
    # Nothing waits for a launch that cannot be seen, so no loss is reported.
    assert (c["kernels_pending"], c["unjoined_kernels"], c["launches_pending"]) == (0, 0, 0)
    assert snap.activity.losses() == {}
    assert snap.launches().is_empty()
    assert snap.activity.info["join"] == s.join


def test_tracing_launches_turns_the_join_and_its_records_on_and_off_while_running_on_the_simulator(virtual):
    from mspti_lens import Session

    sim = virtual
    with Session(library="sim", enable=[], clock="mspti", activity=["kernel"], join_sample=1.0) as s:
        launch(sim)
        s.enable("LAUNCH")
        assert s.join == "runtime_api"
        with_join = launch(sim)
        joined = s.snapshot()
        s.disable("LAUNCH")
        assert s.join.startswith("off (no launch callbacks traced"), s.join
        without = launch(sim)
        snap = s.snapshot()
    # While launches are traced each launch has its RUNTIME_API record, and every kernel joins.
    assert with_join == 2 * N
    la = joined.launches().row(0, named=True)
    assert (la["join"], la["api_num"], la["kernel_num"]) == ("runtime_api", N, N)
    assert (la["api_med_ns"], la["queue_med_ns"], la["kernel_med_ns"]) == (5000, 7000, 3000)
    # After disabling LAUNCH the library writes kernel records only again; the joined rows stay.
    assert without == N
    assert snap.kernels()["num_calls"].sum() == 3 * N
    assert snap.launches()["kernel_num"].sum() == N
    assert snap.activity.counters["unjoined_kernels"] == 0 and snap.activity.losses() == {}


def test_runtime_api_asked_for_explicitly_is_collected_without_launch_callbacks_on_the_simulator(virtual):
    from mspti_lens import Session

    sim = virtual
    with Session(library="sim", enable=[], clock="mspti", activity=["kernel", "runtime_api"]) as s:
        assert s.join.startswith("off (no launch callbacks traced"), s.join
        written = launch(sim)
        snap = s.snapshot()
    assert written == 2 * N  # the user's RUNTIME_API kind stays on
    assert snap.activity.counters["records"] == 2 * N and snap.kernels()["num_calls"].sum() == N
    assert snap.activity.losses() == {}


def test_the_default_session_and_mark_launches_keep_the_join_on_the_simulator(virtual):
    from mspti_lens import Session

    sim = virtual
    with Session(library="sim", clock="mspti", activity=["kernel"]) as s:  # runtime and hccl traced
        assert s.join == "runtime_api, sampled (join_sample=0.1)"
    with Session(library="sim", clock="mspti", activity=["kernel"], join_sample=1.0) as s:
        assert s.join == "runtime_api"
        launch(sim, 20)
        snap = s.snapshot()
    assert snap.launches().row(0, named=True)["kernel_num"] == 20
    with Session(library="sim", clock="mspti", mark_launches=sim.activity.stream_handle(1)) as s:
        assert s.join.startswith("runtime_api, sampled"), s.join


def test_unknown_activity_kinds_name_the_valid_ones():
    from mspti_lens import Session, activity

    want = r"unknown activity kind 'kernels'; did you mean 'kernel'\? \(valid kinds: kernel, "
    with pytest.raises(ValueError, match=want) as e:
        Session(library="sim", enable=[], activity=["kernels"])
    assert all(k in str(e.value) for k in activity.KINDS)
