"""`Snapshot.slowest()`: the K slowest calls per (thread, API) and window, on the simulator.

The virtual clock (`clock="mspti"` + `sim.set_clock("virtual")`) makes every duration exactly the
simulated work, so the kept calls are known exactly."""

from __future__ import annotations

import threading
import time

import pytest

from mspti_lens import Session

K = 8


def test_the_k_slowest_calls_of_each_api_are_kept_exactly_on_the_simulator(virtual):
    sim = virtual
    with Session(library="sim", clock="mspti") as s:
        for w in range(1, 201):
            sim.call("aclrtLaunchKernel", work_ns=w * 10)
        for w in (5, 7, 3):
            sim.call("aclrtSynchronizeStream", work_ns=w)
        snap = s.snapshot()
    df = snap.slowest()
    launch = df.filter(df["name"] == "aclrtLaunchKernel")
    assert launch["duration_ns"].to_list() == [w * 10 for w in range(200, 200 - K, -1)]
    sync = df.filter(df["name"] == "aclrtSynchronizeStream")
    assert sorted(sync["duration_ns"].to_list()) == [3, 5, 7]  # fewer than K: all of them
    assert set(df["thread_id"]) == {threading.get_native_id()}
    assert set(df["source"]) == {"simulated"}
    assert df.columns == [
        "domain",
        "callback",
        "name",
        "thread_id",
        "start",
        "start_unix_ns",
        "duration_ns",
        "source",
    ]
    assert snap.slowest(per_api=2)["duration_ns"].to_list() == [2000, 1990, 7, 5]


def test_slowest_off_keeps_no_calls_and_the_same_histograms_on_the_simulator(virtual):
    sim = virtual
    sums = []
    for on in (True, False):
        with Session(library="sim", clock="mspti", slowest=on) as s:
            for w in range(1, 101):
                sim.call("aclrtLaunchKernel", work_ns=w * 10)
            snap = s.snapshot()
        sums.append(snap.summary().select("num_calls", "total_ns", "max_ns").row(0))
        assert snap.slowest().height == (K if on else 0)
    assert sums[0] == sums[1] == (100, 50_500, 1000)


@pytest.mark.parametrize("on", [True, False])
def test_exemplars_is_slowests_old_name_and_still_chooses_on_the_simulator(virtual, on):
    sim = virtual
    with Session(library="sim", clock="mspti", exemplars=on) as s:
        sim.call("aclrtLaunchKernel", work_ns=10)
        assert s.snapshot().slowest().height == int(on)


def test_a_bad_slowest_choice_is_a_clear_error():
    for kwargs, message in (
        ({"slowest": 8}, "slowest is True .* or False, not 8"),
        ({"exemplars": "yes"}, "exemplars is True .* or False, not 'yes'"),
        ({"slowest": False, "exemplars": True}, "disagree"),
    ):
        with pytest.raises(ValueError, match=message):
            Session(library="sim", **kwargs)


def test_each_thread_keeps_its_own_slowest_on_the_simulator(virtual):
    sim = virtual
    tids: dict[int, int] = {}
    # Both threads stay alive until both are done: a thread that ends hands its shard (and its
    # kept calls) to the next new thread.
    both = threading.Barrier(2)

    def work(base: int) -> None:
        tids[base] = threading.get_native_id()
        both.wait(timeout=60)
        for w in range(1, 21):
            sim.call("aclrtLaunchKernel", work_ns=base + w)
        both.wait(timeout=60)

    with Session(library="sim", clock="mspti") as s:
        threads = [threading.Thread(target=work, args=(b,)) for b in (1000, 5000)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        df = s.snapshot().slowest()
    for base, tid in tids.items():
        mine = df.filter(df["thread_id"] == tid)["duration_ns"].to_list()
        assert mine == [base + w for w in range(20, 20 - K, -1)]
    assert len(df) == 2 * K


def test_a_reset_returns_the_closed_windows_slowest_and_the_next_starts_empty_on_the_simulator(virtual):
    sim = virtual
    with Session(library="sim", clock="mspti") as s:
        for w in (100, 900, 500):
            sim.call("aclrtLaunchKernel", work_ns=w)
        closed = s.reset()
        sim.call("aclrtLaunchKernel", work_ns=10)
        now = s.snapshot()
    assert closed.slowest()["duration_ns"].to_list() == [900, 500, 100]
    assert now.slowest()["duration_ns"].to_list() == [10]


def test_start_times_are_on_the_wall_clock_on_the_simulator(sim):
    with Session(library="sim") as s:  # the real clock: starts must fall inside the calls' span
        before = time.time_ns()
        for _ in range(20):
            sim.call("aclrtLaunchKernel", work_ns=20_000)
        after = time.time_ns()
        df = s.snapshot().slowest()
    assert len(df) == K
    slack = 5_000_000  # the clocks are sampled apart (TSC vs CLOCK_REALTIME): a few µs, allow 5 ms
    for start, dur in zip(df["start_unix_ns"], df["duration_ns"]):
        assert before - slack <= start and start + dur <= after + slack
        assert dur >= 20_000


def test_merged_snapshots_keep_both_sides_slowest_on_the_simulator(virtual):
    sim = virtual
    with Session(library="sim", clock="mspti") as s:
        sim.call("aclrtLaunchKernel", work_ns=42)
        a = s.reset()
        sim.call("aclrtLaunchKernel", work_ns=43)
        b = s.snapshot()
    assert sorted(a.merge(b).slowest()["duration_ns"].to_list()) == [42, 43]


def test_a_bad_per_api_is_a_clear_error(session):
    with pytest.raises(ValueError, match="positive int"):
        session.snapshot().slowest(per_api=0)


def test_snapshots_in_between_keep_the_windows_slowest_on_the_simulator(virtual):
    """Snapshots (and scrapes) taken while calls go on do not split the window's list."""
    sim = virtual
    with Session(library="sim", clock="mspti") as s:
        for w in range(1, 41):
            sim.call("aclrtLaunchKernel", work_ns=w * 100)
            if w % 5 == 0:
                s.snapshot()
        df = s.snapshot().slowest()
    assert df["duration_ns"].to_list() == [w * 100 for w in range(40, 40 - K, -1)]


def test_the_distribution_plot_marks_the_slowest_calls_on_the_simulator(virtual):
    import matplotlib

    matplotlib.use("Agg")
    from mspti_lens import plots

    sim = virtual
    with Session(library="sim", clock="mspti") as s:
        for w in range(1, 101):
            sim.call("aclrtLaunchKernel", work_ns=w * 1_000)
        snap = s.snapshot()
    fig = plots.distribution(snap, ["aclrtLaunchKernel"])
    (ticks,) = [ln for ln in fig.axes[0].lines if ln.get_label().startswith("slowest")]
    assert ticks.get_label() == f"slowest {K}"
    assert sorted(ticks.get_xdata()) == [w * 1_000 for w in range(101 - K, 101)]
