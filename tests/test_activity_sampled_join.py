"""The sampled launch join (``Session(join_sample=...)``, the default 0.1): RUNTIME_API records and
launch spans only in the drain's sample windows, every kernel counted in exactly one fate, the
measured fraction and the rank error reported; ``join_sample=1.0`` (or the runtime_api kind asked
for) joins every launch. Asserted on the simulator's counts, never on timing: the launch loop runs
until the join has settled windows, however fast the machine is."""

from __future__ import annotations

import math
import time

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::mspti_lens.errors.SimulatedBackendWarning")


@pytest.fixture
def virtual(sim):
    sim.set_clock("virtual")
    sim.activity.device_model(launch_latency_ns=2000, record_delay_ns=0, default_kernel_ns=1000)
    yield sim
    sim.set_clock("real")


def launch(sim, n: int) -> None:
    for _ in range(n):
        sim.activity.launch("aclrtLaunchKernel", host_ns=5000, stream=1, device_ns=3000, kernel="MatMul")


def launch_until_windows(sim, s, windows: int = 2, cap: int = 20) -> int:
    """Launch for rounds of 1.2 s of the drain's periods until the session's join has settled
    `windows` sample windows (a snapshot, which settles an open one, looks after each round);
    the launches made. Time bounds the rounds, never an assertion."""
    made = 0
    for _ in range(cap):
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.2:
            launch(sim, 1000)
            made += 1000
        if s.snapshot().activity.counters["join_windows"] >= windows:
            return made
    raise AssertionError(f"no {windows} sample windows after {made} launches")


def fates(snap) -> tuple[int, int, int, int, int]:
    """(kernel records, joined, unsampled, unjoined, pending + clock skew)."""
    c = snap.activity.counters
    joined = int(snap.launches()["kernel_num"].sum())
    rest = c["kernels_pending"] + c["clock_skew"]
    return int(snap.kernels()["num_calls"].sum()), joined, c["kernels_unsampled"], c["unjoined_kernels"], rest


def test_the_default_session_samples_the_join_and_reports_its_measured_fraction_on_the_simulator(virtual):
    from mspti_lens import Session

    sim = virtual
    with Session(library="sim", enable=["LAUNCH"], clock="mspti", activity=["kernel"]) as s:
        assert s.join == "runtime_api, sampled (join_sample=0.1)"
        made = launch_until_windows(sim, s)
        snap = s.snapshot()
    c = snap.activity.counters
    kernels, joined, unsampled, unjoined, rest = fates(snap)
    # Every kernel record ends in exactly one fate.
    assert kernels == made == joined + unsampled + unjoined + rest, (
        kernels,
        joined,
        unsampled,
        unjoined,
        rest,
    )
    assert joined > 0 and unsampled > 0 and unjoined == 0
    assert c["join_windows"] >= 2 and 0 < c["join_sampled_ns"] < c["join_active_ns"]
    # The library wrote a RUNTIME_API record for the sampled launches only.
    assert c["records"] < 2 * made
    la = snap.launches().row(0, named=True)
    fraction = c["join_sampled_ns"] / c["join_active_ns"]
    assert la["join"] == "runtime_api" and 0 < la["sampled_fraction"] < 1
    assert la["sampled_fraction"] == pytest.approx(fraction)
    # The mode as asked for (windows of a session merge into one string); the fraction measured
    # is the launches table's, from the counters.
    assert snap.activity.info["join"] == "runtime_api, sampled (join_sample=0.1)"
    # The Dvoretzky-Kiefer-Wolfowitz bound of the row's joined launches.
    assert la["rank_error_95"] == pytest.approx(math.sqrt(math.log(2 / 0.05) / (2 * la["kernel_num"])))
    # What was joined is exact per launch: the split is the model's.
    assert (la["api_med_ns"], la["queue_med_ns"], la["kernel_med_ns"]) == (5000, 7000, 3000)
    # A span is logged when its EXIT sees the window open; a window that closes before the
    # library writes that launch's record leaves it unjoined: at most one launch per window on
    # this one launching thread.
    assert la["kernel_num"] == joined <= la["api_num"] <= joined + c["join_windows"]
    # Where the launch split is shown, one label says it was sampled and its bound.
    from mspti_lens.notebook.snapshot_repr import device_tables

    label = f"join sampled {fraction:.1%} of the time, quantiles within ±{la['rank_error_95']:.1%} of ranks"
    assert label in device_tables(snap)[0].text()


def test_join_sample_one_joins_every_launch_as_before_on_the_simulator(virtual):
    from mspti_lens import Session

    sim = virtual
    with Session(library="sim", enable=["LAUNCH"], clock="mspti", activity=["kernel"], join_sample=1.0) as s:
        assert s.join == "runtime_api"
        launch(sim, 3000)
        snap = s.snapshot()
    c = snap.activity.counters
    assert fates(snap) == (3000, 3000, 0, 0, 0)
    assert c["records"] == 6000 and c["join_windows"] == 0
    assert c["join_sampled_ns"] == c["join_active_ns"] > 0
    la = snap.launches().row(0, named=True)
    assert (la["sampled_fraction"], la["rank_error_95"]) == (1.0, 0.0)
    assert snap.activity.info["join"] == "runtime_api"
    from mspti_lens.notebook.snapshot_repr import device_tables

    assert "sampled" not in device_tables(snap)[0].text()


def test_the_runtime_api_kind_asked_for_keeps_the_join_exact_and_says_so_on_the_simulator(virtual):
    from mspti_lens import Session

    sim = virtual
    with Session(library="sim", enable=["LAUNCH"], clock="mspti", activity=["kernel", "runtime_api"]) as s:
        assert s.join == "runtime_api, exact (the runtime_api kind was asked for)"
        launch(sim, 1000)
        snap = s.snapshot()
    assert fates(snap) == (1000, 1000, 0, 0, 0)
    la = snap.launches().row(0, named=True)
    assert (la["sampled_fraction"], la["rank_error_95"]) == (1.0, 0.0)
    # The apis table has the user's records.
    assert snap.activity.counters["records"] == 2000


@pytest.mark.parametrize("bad", [0, 0.0, -0.5, 1.5, float("nan"), "0.1", True, None])
def test_a_bad_join_sample_is_one_clear_line(bad):
    from mspti_lens import Session

    with pytest.raises(ValueError, match=r"^join_sample is the fraction of time .* in \(0, 1\]") as e:
        Session(library="sim", enable=[], activity=["kernel"], join_sample=bad)
    assert "\n" not in str(e.value)


def test_the_native_collector_refuses_a_bad_join_sample_in_one_line(sim):
    from mspti_lens import Session, _native

    s = Session(library="sim", enable=[])
    try:
        with pytest.raises(ValueError, match=r"join_sample .* \(0, 1\].* not 2"):
            _native.NativeActivity(s._native, join_sample=2.0)
    finally:
        s.close()
