"""Device activity end to end on the bundled simulator: the collector, the join and
mark_launches against the simulator's device timeline (virtual clock for exact numbers)."""

from __future__ import annotations

import threading

import pytest
from _sim_activity import ERAS, bind

pytestmark = pytest.mark.filterwarnings("ignore::mspti_lens.errors.SimulatedBackendWarning")


@pytest.fixture
def L(sim):
    lib = bind(sim.lib)
    sim.set_clock("virtual")
    lib.msimSetDeviceModel(2000, 0, 1000)  # launch-to-start 2 us, records at once
    yield lib
    lib.msimSetActivityEra(ERAS["follow"])


def launch_all(L, api, threads, n, stream_of, host_ns, kernel_ns, kernels=1, graph=0):
    def work(i: int) -> None:
        for _ in range(n):
            L.msimLaunch(api, host_ns, stream_of(i), kernel_ns, kernels, b"MatMul", None, graph)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def test_the_join_is_exact_with_four_threads_on_separate_streams_on_the_simulator(sim, L):
    from mspti_lens import Session

    api = sim.api("aclrtLaunchKernel")
    with Session(library="sim", enable=["LAUNCH"], clock="mspti", activity=["kernel"], join_sample=1.0) as s:
        assert s.join == "runtime_api"
        # Kernels shorter than the host time between launches: nothing queues behind another, so
        # every queue delay (ENTER to kernel start) is the 5 us call plus the 2 us launch latency.
        launch_all(L, api, 4, 100, lambda i: 1 + i, host_ns=5000, kernel_ns=3000)
        snap = s.snapshot()
    la = snap.launches().row(0, named=True)
    assert (la["api_num"], la["kernel_num"]) == (400, 400)
    assert (la["api_med_ns"], la["api_max_ns"]) == (5000, 5000)
    assert (la["queue_med_ns"], la["queue_max_ns"], la["kernel_max_ns"]) == (7000, 7000, 3000)
    c = snap.activity.counters
    assert (c["unjoined_kernels"], c["kernels_pending"], c["ambiguous"], c["clock_skew"]) == (0, 0, 0, 0)


def test_the_join_counts_every_kernel_on_a_shared_stream_and_in_graph_replay_on_the_simulator(sim, L):
    from mspti_lens import Session

    api = sim.api("aclrtLaunchKernelV2")
    with Session(library="sim", enable=["LAUNCH"], clock="mspti", activity=["kernel"], join_sample=1.0) as s:
        launch_all(L, api, 4, 50, lambda i: 1, host_ns=5000, kernel_ns=3000)
        launch_all(L, api, 2, 10, lambda i: 2 + i, host_ns=5000, kernel_ns=1000, kernels=6, graph=1)
        snap = s.snapshot()
    la = snap.launches().row(0, named=True)
    assert la["api_num"] == 4 * 50 + 2 * 10
    assert la["kernel_num"] == 4 * 50 + 2 * 10 * 6  # graph replay: six kernels per launch
    assert snap.kernels()["num_calls"].sum() == la["kernel_num"]
    assert snap.activity.counters["unjoined_kernels"] == 0


def test_cann8_joins_through_external_correlation_on_the_simulator(sim, L):
    from mspti_lens import Session

    L.msimSetActivityEra(ERAS["cann8"])
    api = sim.api("aclrtLaunchKernel")
    with Session(library="sim", enable=["LAUNCH"], clock="mspti", activity=["kernel"], join_sample=1.0) as s:
        assert s.join == "external_correlation"
        launch_all(L, api, 1, 50, lambda i: 1, host_ns=5000, kernel_ns=3000)
        snap = s.snapshot()
    la = snap.launches().row(0, named=True)
    assert (la["join"], la["kernel_num"], la["kernel_med_ns"]) == ("external_correlation", 50, 3000)
    assert snap.activity.counters["overlapped"] == 0


def test_mark_launches_brackets_each_launch_on_the_simulator(sim, L):
    from mspti_lens import Session

    api = sim.api("aclrtLaunchKernel")
    stream = L.msimStreamHandle(1)
    with Session(library="sim", clock="mspti", mark_launches=stream, join_sample=1.0) as s:
        launch_all(L, api, 1, 20, lambda i: 1, host_ns=5000, kernel_ns=3000)
        snap = s.snapshot()
    m = snap.launches().filter(snap.launches()["join"] == "mstx_marks").row(0, named=True)
    assert m["api_num"] == 20 and m["kernel_num"] == 20
    # The device window between the two marks holds the kernel.
    assert m["kernel_med_ns"] >= 3000
    assert snap.activity.counters["unpaired_markers"] == 0


def test_kinds_that_need_ld_preload_say_so_on_the_simulator(sim, L):
    from mspti_lens import Session
    from mspti_lens.errors import PreloadRequiredError

    L.msimSetActivityEra(ERAS["cann26"])
    sim.preload_check(True)
    try:
        s = Session(library="sim", activity=["hccl"])
        with pytest.raises(PreloadRequiredError, match="LD_PRELOAD"):
            s.start()
        s.close()
    finally:
        sim.preload_check(False)


def test_a_training_job_with_kernel_and_marker_on_joins_every_kernel_on_the_simulator(sim, L):
    from mspti_lens import Session

    sim.set_clock("real")
    with Session(library="sim", activity=["kernel", "marker", "communication"], join_sample=1.0) as s:
        sim.run_workload("training", steps=3, seed=7, time_scale=0.05)
        snap = s.snapshot()
    assert snap.kernels()["num_calls"].sum() > 0
    assert snap.launches()["kernel_num"].sum() == snap.kernels()["num_calls"].sum()
    assert len(snap.collectives()) > 0 and snap.simulated
    assert snap.activity.counters["unjoined_kernels"] == 0


def test_device_plots_show_the_split_the_kernels_and_the_collectives_on_the_simulator(sim, L):
    import matplotlib

    matplotlib.use("Agg")
    from mspti_lens import Session, plots

    sim.set_clock("real")
    with Session(library="sim", activity=["kernel", "communication"], join_sample=1.0) as s:
        sim.run_workload("training", steps=2, seed=3, time_scale=0.05)
        snap = s.snapshot()
    split = plots.launch_split(snap)
    ax = split.axes[0]
    assert ax.get_title().endswith("[SIMULATED]")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "API (host)",
        "queue (ENTER to kernel start)",
        "kernel (device)",
    ]
    assert len(ax.get_yticklabels()) == len(snap.launches())
    kd = plots.kernel_distributions(snap, top=3)
    assert len(kd.axes[0].get_lines()) == 3
    col = plots.collectives(snap)
    assert len(col.axes[0].get_yticklabels()) == len(snap.collectives())
    with pytest.raises(ValueError, match="valid stats"):
        plots.launch_split(snap, stat="p50")


def test_device_plots_of_a_snapshot_without_activity_say_how_to_get_it_on_the_simulator(session):
    import matplotlib

    matplotlib.use("Agg")
    from mspti_lens import plots

    snap = session.snapshot()
    texts = [t.get_text() for t in plots.launch_split(snap).axes[0].texts]
    assert any("activity=[" in t for t in texts)
    assert len(snap.kernels()) == 0 and "num_calls" in snap.kernels().columns


def test_a_thread_with_thousands_of_launches_per_buffer_joins_them_all_on_the_simulator(sim, L):
    # Spans wait for their API records for as long as a buffer takes to be handed over (one 8 MiB
    # buffer holds tens of thousands of records), not for a fixed number of launches.
    from mspti_lens import Session

    api = sim.api("aclrtLaunchKernel")
    with Session(library="sim", enable=["LAUNCH"], clock="mspti", activity=["kernel"], join_sample=1.0) as s:
        launch_all(L, api, 1, 20_000, lambda i: 1, host_ns=5000, kernel_ns=3000)
        snap = s.snapshot()
    la = snap.launches().row(0, named=True)
    c = snap.activity.counters
    # Exact accounting whatever the machine's load: a span overwritten in its ring before the
    # drain read it is counted lost, and its kernel waits (pending), never joined to a guess.
    assert len(snap.launches()) == 1, snap.launches()
    assert la["api_num"] + c["spans_lost"] == 20_000, c
    assert la["kernel_num"] + c["kernels_pending"] == 20_000
    assert c["unjoined_kernels"] == 0 and c["ambiguous"] == 0


@pytest.mark.parametrize("launch_callbacks", [True, False], ids=["launches", "library_count"])
def test_kernels_whose_records_trail_by_300_ms_are_in_the_window_after_the_with_block_on_the_simulator(
    sim, launch_callbacks
):
    from mspti_lens import Session

    # The real clock, each record reaching the channel 300 ms after its kernel ends: long after
    # two quiet polls. With LAUNCH on, the settle waits for 500 launches whose kernel has not
    # come; without it only the simulator's count of records it still holds (msimDevicePending)
    # says what is missing. The bound is raised so that a loaded machine cannot end the wait.
    lib = bind(sim.lib)
    sim.set_clock("real")
    lib.msimSetDeviceModel(2000, 300_000_000, 1000)
    api = sim.api("aclrtLaunchKernel")
    enable = ["LAUNCH"] if launch_callbacks else ["MEMCPY"]
    with Session(library="sim", enable=enable, activity=["kernel"], join_sample=1.0) as s:
        s._activity.settle_timeout = 120.0
        launch_all(lib, api, 1, 500, lambda i: 1, host_ns=1000, kernel_ns=1000)
    snap = s.snapshot()
    assert snap.kernels()["num_calls"].sum() == 500
    c = snap.activity.counters
    assert (c["launches_pending"], c["settle_timeouts"]) == (0, 0)
    if launch_callbacks:
        assert snap.launches()["kernel_num"].sum() == 500 and c["unjoined_kernels"] == 0
