"""Latency over time: `Session(interval=...)`, `Session.timeline()`, `Snapshot.timeline()`.

Intervals are ended by hand (`_native.timeline_tick()`) with an interval the ticker never reaches
during the test, so the rows are exact; one test lets the ticker run and checks only what holds
whatever the timing (every call in exactly one interval)."""

from __future__ import annotations

import time

import pytest

from mspti_lens import Session, _native

HOUR = 3600.0


def test_each_interval_holds_exactly_its_calls_and_quantiles_on_the_simulator(virtual):
    sim = virtual
    with Session(library="sim", clock="mspti", interval=HOUR) as s:
        sim.call("aclrtLaunchKernel", work_ns=1_000, count=99)
        sim.call("aclrtLaunchKernel", work_ns=100_000, count=1)
        _native.timeline_tick()
        sim.call("aclrtLaunchKernel", work_ns=50_000, count=10)
        _native.timeline_tick()
        tl = s.timeline()
    rows = tl.filter(tl["name"] == "aclrtLaunchKernel")
    assert rows["num_calls"].to_list() == [100, 10]
    p50, p99 = rows["p50_ns"].to_list(), rows["p99_ns"].to_list()
    within = lambda v, exact: abs(v - exact) <= exact * 0.0078  # noqa: E731 - one bucket
    assert within(p50[0], 1_000) and within(p99[0], 1_000)  # the 99th of 100 is still 1 µs
    assert within(p50[1], 50_000) and within(p99[1], 50_000)
    starts, ends = rows["start"].to_list(), rows["end"].to_list()
    assert starts[0] <= ends[0] == starts[1] <= ends[1]
    assert set(tl["source"]) == {"simulated"}


def test_a_reset_loses_no_call_of_the_interval_in_progress_on_the_simulator(virtual):
    sim = virtual
    with Session(library="sim", clock="mspti", interval=HOUR) as s:
        sim.call("aclrtLaunchKernel", work_ns=1_000, count=3)
        s.reset()
        sim.call("aclrtLaunchKernel", work_ns=1_000, count=4)
        _native.timeline_tick()
        snap = s.snapshot()
    assert snap.timeline()["num_calls"].to_list() == [7]
    assert snap.summary()["num_calls"].to_list() == [4]  # the window itself starts after the reset


def test_older_intervals_merge_and_the_ring_stays_bounded_on_the_simulator(virtual):
    sim = virtual
    with Session(library="sim", clock="mspti", interval=HOUR) as s:
        _native.timeline_start(HOUR, levels=2, per_level=3, ticking=False)
        for i in range(1, 31):
            sim.call("aclrtLaunchKernel", work_ns=100, count=i)
            _native.timeline_tick()
        tl = s.timeline()
    assert len(tl) <= 2 * 3
    counts = tl["num_calls"].to_list()
    assert counts[-1] == 30  # the newest interval at full resolution
    # What is kept is every call of the newest intervals, exactly, from some tick m on; the
    # oldest kept interval is two ticks merged into one.
    m = next(m for m in range(1, 31) if sum(range(m, 31)) == sum(counts))
    assert counts[0] == m + (m + 1)
    # Back to back: each interval starts where the one before it ended, so the merged one covers
    # exactly its two ticks (comparing wall-clock lengths would depend on the machine's load).
    starts, ends = tl["start"].to_list(), tl["end"].to_list()
    assert all(b < e for b, e in zip(starts, ends))
    assert starts[1:] == ends[:-1]


def test_the_live_ticker_puts_every_call_in_exactly_one_interval_on_the_simulator(sim):
    with Session(library="sim", interval=0.02) as s:
        total = 0
        for _ in range(10):
            sim.call("aclrtLaunchKernel", work_ns=1_000, count=50)
            total += 50
            time.sleep(0.01)
        for _ in range(200):  # wait (bounded) until the ticker has ended a few intervals
            if len(s.timeline()) >= 2:
                break
            time.sleep(0.02)
    final = s.snapshot()  # after close: includes the last, partial interval
    assert final.timeline()["num_calls"].sum() == total == final.total_calls
    assert len(final.timeline()) >= 2


def test_without_an_interval_there_is_no_timeline(session):
    assert session.timeline().is_empty()
    assert session.snapshot().timeline().columns[:3] == ["start", "end", "domain"]


@pytest.mark.parametrize("bad", [0, -1, "1s", True, float("nan")])
def test_a_bad_interval_is_a_clear_error(sim, bad):
    with pytest.raises(ValueError, match="interval must be a finite number of seconds"):
        Session(library="sim", interval=bad)


def test_the_timeline_plot_draws_p50_and_p99_per_api_on_the_simulator(virtual):
    import matplotlib

    matplotlib.use("Agg")
    from mspti_lens import plots

    sim = virtual
    with Session(library="sim", clock="mspti", interval=HOUR) as s:
        for w in (1_000, 2_000, 3_000):
            sim.call("aclrtLaunchKernel", work_ns=w, count=10)
            sim.call("aclrtSynchronizeStream", work_ns=10 * w, count=2)
            _native.timeline_tick()
        fig = plots.timeline(s, top=2)
        snap = s.snapshot()
    ax = fig.axes[0]
    # A line lying on another (every call of an API alike: its p99 is its p50) says so in its label.
    labels = sorted(str(line.get_label()).split(" (≈ ")[0] for line in ax.get_lines())
    assert "aclrtLaunchKernel p99 (≈ aclrtLaunchKernel p50)" in [line.get_label() for line in ax.get_lines()]
    assert labels == [
        "aclrtLaunchKernel p50",
        "aclrtLaunchKernel p99",
        "aclrtSynchronizeStream p50",
        "aclrtSynchronizeStream p99",
    ]
    p50 = next(line for line in ax.get_lines() if line.get_label() == "aclrtLaunchKernel p50")
    ys = list(p50.get_ydata())
    assert [round(y, -2) for y in ys] == [1_000, 2_000, 3_000, 3_000]  # one step per interval
    assert "[SIMULATED]" in ax.get_title()
    assert plots.timeline(snap.timeline(), names=["aclrtLaunchKernel"]).axes[0].get_lines()
    with pytest.raises(ValueError, match="no timeline rows"):
        plots.timeline(snap, names=["aclrtNope"])
    with pytest.raises(ValueError, match="Session, a Snapshot or a timeline frame"):
        plots.timeline(42)
