"""Rules on windows of exact durations (the simulator's virtual clock): the statistic is the
Snapshot's, the baseline is learnt from the subject's earlier windows, and an alert goes
inactive -> pending -> firing -> resolved like Prometheus's, after K windows in a row."""

from __future__ import annotations

import pytest

from mspti_lens import Session
from mspti_lens.watch.evaluate import JOB, Baseline, Evaluator, Window, merge_windows, statistic
from mspti_lens.watch.rules import parse_rule

MS = 1_000_000


@pytest.fixture
def windows(virtual):
    """make(calls): one window per list item, each a list of (api, ns, count) calls."""
    with Session(library="sim", clock="mspti") as s:
        s.start()
        s.reset()

        def make(*per_window):
            out = []
            for calls in per_window:
                for api, ns, count in calls:
                    virtual.call(api, ns, count)
                out.append(s.reset())
            return out

        yield make


def feed(ev, subject, snaps, start=1):
    out = []
    for i, snap in enumerate(snaps, start):
        out.append((i, ev.feed(Window(subject, i, snap, (("h", 0),)))))
    return out


def states(fed):
    return [(i, t.after) for i, ts in fed for t in ts]


def test_statistics_are_the_snapshots_own(windows):
    (snap,) = windows([("aclrtSynchronizeStream", 2 * MS, 9), ("aclrtSynchronizeStream", 30 * MS, 1)])
    row = snap.summary().filter(name="aclrtSynchronizeStream").row(0, named=True)
    assert (
        statistic(parse_rule("aclrtSynchronizeStream p50 > 1ms"), snap)
        == row["med_ns"]
        == pytest.approx(2 * MS, rel=3e-3)
    )
    assert statistic(parse_rule("aclrtSynchronizeStream max > 1ms"), snap) == row["max_ns"] == 30 * MS
    assert statistic(parse_rule("aclrtSynchronizeStream count > 1"), snap) == 10
    rate = statistic(parse_rule("aclrtSynchronizeStream rate > 1/s"), snap)
    assert rate == pytest.approx(10 / snap.duration_s)
    assert statistic(parse_rule("aclrtMalloc p99 > 1ms"), snap) is None  # not called in the window
    assert statistic(parse_rule("aclrtMalloc count > 1"), snap) == 0
    assert statistic(parse_rule("dropped > 0"), snap) == 0


def test_an_absolute_rule_fires_after_k_windows_and_resolves(windows):
    slow, fast = [("aclrtSynchronizeStream", 30 * MS, 5)], [("aclrtSynchronizeStream", 1 * MS, 5)]
    snaps = windows(fast, slow, fast, slow, slow, slow, [], fast, fast)
    ev = Evaluator([parse_rule("aclrtSynchronizeStream p50 > 20ms for 2 windows")])
    fed = feed(ev, "h/0", snaps)
    # One slow window is pending, not firing; the second in a row fires; an empty window (no call)
    # keeps the state; the first fast one resolves it, the next is inactive.
    assert states(fed) == [
        (2, "pending"),
        (3, "inactive"),
        (4, "pending"),
        (5, "firing"),
        (8, "resolved"),
        (9, "inactive"),
    ]
    firing = fed[4][1][0]
    assert firing.value == pytest.approx(30 * MS, rel=3e-3) and firing.ranks == (("h", 0),)
    assert "FIRING" in firing.line() and "rank 0 (h)" in firing.line()


def test_a_baseline_rule_learns_from_the_subjects_earlier_windows_then_compares(windows):
    normal = [("HcclAllReduce", 1 * MS, 20)]
    warmup = [("HcclAllReduce", 50 * MS, 20)]  # the first window: start-up, left out of the baseline
    snaps = windows(
        warmup,
        normal,
        normal,
        normal,
        [("HcclAllReduce", 2 * MS, 20)],
        [("HcclAllReduce", 4 * MS, 20)],
        [("HcclAllReduce", 4 * MS, 20)],
    )
    ev = Evaluator([parse_rule("HcclAllReduce p99 > 3x baseline")], Baseline(skip=1, windows=3))
    fed = feed(ev, "h/0", snaps)
    # Windows 1-4 learn (the 4th completes the baseline: windows 2-4 merged); 2 ms is not 3x 1 ms;
    # 4 ms is, twice.
    assert states(fed) == [(1, "learning"), (5, "inactive"), (6, "pending"), (7, "firing")]
    t = fed[6][1][0]
    assert t.baseline == statistic(parse_rule("HcclAllReduce p99 > 1ms"), merge_windows(snaps[1:4]))
    assert t.baseline == pytest.approx(1 * MS, rel=3e-3)


def test_rules_go_to_their_scope_and_the_job_window_is_the_exact_merge(windows):
    a, b = windows([("aclrtLaunchKernel", 10_000, 99)], [("aclrtLaunchKernel", 1 * MS, 2)])
    ev = Evaluator(
        [
            parse_rule("aclrtLaunchKernel p99 > 100us for 1 window"),
            parse_rule("aclrtLaunchKernel p99 > 100us across ranks for 1 window"),
        ]
    )
    per_rank = ev.feed(Window("h/0", 1, a, (("h", 0),)))
    assert per_rank == []  # rank 0's own p99 is 10 us; the job rule does not see a rank window
    job = merge_windows([a, b])
    (t,) = ev.feed(Window(JOB, 1, job, (("h", 0), ("h", 1))))
    # 101 calls: the 100th smallest (p99's nearest rank) is one of rank 1's 1 ms calls.
    assert t.rule.scope == "job" and t.after == "firing" and t.value == pytest.approx(1 * MS, rel=3e-3)
    assert t.ranks == (("h", 0), ("h", 1))
    assert ev.alerts().filter(subject=JOB)["state"].to_list() == ["firing"]
