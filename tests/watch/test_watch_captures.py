"""Captures: a rule that fires on a running simulated job turns on activity records on the rank
it names, for a bounded time, through the control path, then puts the rank back as it was; the
capture folder holds the windows before and during, the device records of the slow steps, a
trace and a comparison. One capture at a time per run (an O_EXCL claim), a cool-down per rule, a
budget, and a restarted watcher finishes what a dead one left."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from test_watch_on_the_simulator import write_windows

from mspti_lens import open_run
from mspti_lens.runs.control import read_processes
from mspti_lens.sim import job
from mspti_lens.watch.capture import CLAIM, CapturePolicy, Capturer, captures_dir, read_captures
from mspti_lens.watch.evaluate import Baseline, Transition
from mspti_lens.watch.rules import parse_rule
from mspti_lens.watch.watcher import Watcher

pytestmark = pytest.mark.timeout(300)
SLOW_RANK, SLOW_STEP, FACTOR = 1, 300, 3.0


@pytest.mark.slow
def test_a_firing_rule_captures_the_slow_rank_and_puts_it_back_as_it_was(tmp_path):
    root = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "mspti_lens", "record", "--out", str(root), "--interval", "0.25",
        "--library", "sim", "--clock", "mspti", "--",
        sys.executable, "-m", job.RANK_MODULE, "job", "--ranks", "4", "--steps", "1100",
        "--step-delay", "0.01", "--slowdown", f"rank={SLOW_RANK},step={SLOW_STEP},factor={FACTOR:g}",
    ]  # fmt: skip
    said: list[str] = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        w = Watcher(
            _wait_for(root),
            ["aclrtLaunchKernel p50 > 2x baseline"],
            baseline=Baseline(skip=1, windows=3),
            every=0.1,
            capture=CapturePolicy(for_s=2.0),
            say=said.append,
        )
        w.run(timeout=240)
    finally:
        out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    caps = open_run(root).captures()
    # One capture: the rule kept firing, and the cool-down (10 min) holds a second one off.
    assert caps.height == 1, said
    row = caps.row(0, named=True)
    assert row["rule"] == "aclrtLaunchKernel p50 > 2x baseline for 2 windows" and row["ranks"] == [SLOW_RANK]
    assert row["state"] == "done" and row["value"] >= 2 * row["baseline"]
    folder = Path(row["path"])
    cap = json.loads((folder / "capture.json").read_text())
    (prior,) = cap["prior"]
    assert prior["state"] == "on" and prior["activity"] == ["communication"]  # record's default
    start, restore = cap["commands"]
    assert start["command"] == "start" and {"kernel", "communication", "marker"} <= set(start["activity"])
    assert (restore["command"], restore["activity"], restore["ranks"]) == ("start", ["communication"], "1")
    assert restore["unacknowledged"] == []
    # The rank is back as it was (until it ended with the job): what its process file says.
    (p,) = [p for p in read_processes(root) if p["rank"] == SLOW_RANK]
    assert p["generation"] >= restore["generation"]
    # The device records of the slow steps: rank 1's kernels, 3x their usual time on the device.
    device = pl.read_parquet(folder / "device.parquet")
    kernels = device.filter(kind="kernel")
    assert kernels.height and set(kernels["rank"]) == {SLOW_RANK}
    slow_kernel_ns = job.LAUNCH_NS * FACTOR * job.KERNEL_SHARE
    assert (kernels["end_ns"] - kernels["start_ns"]).min() >= slow_kernel_ns
    # No other rank recorded kernels: the capture touched only the rank it named.
    others = (
        open_run(root).device_events().filter((pl.col("kind") == "kernel") & (pl.col("rank") != SLOW_RANK))
    )
    assert others.height == 0
    # Before (the flight recorder) and during, a trace across the ranks, the comparison.
    assert [f for f in cap["before"] if f.startswith("before/") and "window-" in f]
    assert [f for f in cap["during"] if f.startswith("during/") and "window-" in f]
    trace = json.loads((folder / "trace.json").read_text())
    assert any(e.get("ph") == "X" for e in trace["traceEvents"])
    cmp = pl.read_parquet(folder / "comparison.parquet").filter(name="aclrtLaunchKernel")
    assert cmp["med_change_pct"][0] == pytest.approx((FACTOR - 1) * 100, rel=0.1)
    assert not (captures_dir(root) / CLAIM).exists()
    status = subprocess.run(
        [sys.executable, "-m", "mspti_lens", "control", str(root), "status"], capture_output=True, text=True
    )
    assert f"last capture: {row['rule']} fired " in status.stdout and str(folder) in status.stdout
    assert any(s.startswith("capture started") for s in said) and any(
        s.startswith("capture done") for s in said
    )


def _wait_for(root: Path) -> Path:
    deadline = time.monotonic() + 60
    while not root.is_dir():
        assert time.monotonic() < deadline, f"the job wrote no run at {root}"
        time.sleep(0.05)
    return root


# -- the rules of taking captures, on windows written by hand (no job: no control) ---------------
def firing(rule: str, at: float, ranks=(("h", 0),)) -> Transition:
    return Transition(parse_rule(rule), "h/0", "pending", "firing", 3, at, 9e6, 1e6, ranks)


@pytest.fixture
def run(tmp_path, virtual):
    write_windows(tmp_path, virtual, [[0, 0, 0, 0]] * 4)
    return tmp_path


def test_one_capture_at_a_time_a_cool_down_per_rule_and_a_budget(run):
    said: list[str] = []
    policy = CapturePolicy(for_s=1.0, cooldown_s=600.0, per_hour=2)
    a, b = Capturer(run, policy, say=said.append), Capturer(run, policy, say=said.append)
    now = 1_800_000_010.0
    first = a.consider(firing("HcclAllReduce p99 > 5ms", now), now)
    assert first is not None and (captures_dir(run) / CLAIM).exists()
    # Another watcher of the same run: the run's one slot is taken.
    assert b.consider(firing("aclrtMalloc p99 > 5ms", now), now) is None
    assert "another capture of this run is running" in said[-1]
    assert a.tick(now + 0.5) is None  # not over yet
    assert a.tick(now + 1.0) == first and not (captures_dir(run) / CLAIM).exists()
    # The same rule again within its cool-down, from either watcher: no second capture.
    assert b.consider(firing("HcclAllReduce p99 > 5ms", now + 60), now + 60) is None
    assert said[-1].startswith("no capture for 'HcclAllReduce p99 > 5ms for 2 windows': cool-down")
    # Another rule may; then the hour's budget (2) is spent, said once, and watching goes on.
    assert b.consider(firing("aclrtMalloc p99 > 5ms", now + 61), now + 61) is not None
    b.tick(now + 62)
    assert b.consider(firing("aclrtFree p99 > 5ms", now + 63), now + 63) is None
    assert b.consider(firing("aclrtFree p99 > 5ms", now + 64), now + 64) is None
    assert sum("over budget: 2 captures in the last hour" in s for s in said) == 1
    caps = read_captures(run)
    assert [c["rule"] for c in caps] == [
        "HcclAllReduce p99 > 5ms for 2 windows",
        "aclrtMalloc p99 > 5ms for 2 windows",
    ]
    # The windows before the trigger were kept (this run has no control: nothing was turned on).
    assert caps[0]["before"] and "activity not turned on" in caps[0]["note"]


def test_a_restarted_watcher_finishes_the_capture_a_dead_one_left(run):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    now = 1_800_000_010.0
    left = Capturer(run, CapturePolicy(for_s=5.0), say=lambda s: None)
    folder = left.consider(firing("HcclAllReduce p99 > 5ms", now), now)
    claim = captures_dir(run) / CLAIM
    data = json.loads(claim.read_text())
    claim.write_text(json.dumps({**data, "pid": int(dead.stdout)}))  # its watcher died
    assert json.loads((folder / "capture.json").read_text())["state"] == "running"
    said: list[str] = []
    assert Capturer(run, say=said.append).recover() == folder
    cap = json.loads((folder / "capture.json").read_text())
    assert cap["state"].startswith("done") and "restarted watcher" in cap["note"]
    assert not claim.exists() and said[0].startswith("finishing a capture a stopped watcher left")
    # A live watcher's claim is left alone.
    Capturer(run, say=lambda s: None).consider(firing("aclrtMalloc p99 > 5ms", now), now)
    assert Capturer(run, say=lambda s: None).recover() is None and claim.exists()


def test_ranks_of_different_prior_states_are_put_back_by_commands_issued_together(tmp_path):
    # Two recorded processes (this one's control threads): rank 0 records the runtime domain,
    # rank 1 is paused. A capture of both turns both on; the restore issues a start for rank 0
    # and a stop for rank 1 one after the other, without waiting between them (every rank reads
    # every command in order), and each rank applies its own: back as it was.
    from mspti_lens.runs import control, runfiles
    from mspti_lens.watch.evaluate import JOB

    run = tmp_path / "run"
    runfiles.create_run(run)
    control.issue(run, {"command": "stop", "ranks": None})  # the launch: generation 1
    off = {"state": "off", "enable": [], "activity": []}
    states = {0: {"state": "on", "enable": ["runtime"], "activity": ["communication"]}, 1: dict(off)}
    applied: dict[int, list[dict]] = {0: [], 1: []}

    def apply_on(rank: int):
        def apply(cmd: dict) -> None:
            applied[rank].append(cmd)
            if cmd["command"] == "start":
                enable = cmd["enable"] or ["runtime"]
                states[rank] = {"state": "on", "enable": enable, "activity": cmd["activity"]}
            else:
                states[rank] = dict(off)

        return apply

    procs = [
        control.ProcessControl(
            run, host=f"h{r}", rank=r, rank_source="RANK", apply=apply_on(r),
            state=lambda r=r: dict(states[r]), tick=lambda: None, generation=1,
        ).start()
        for r in (0, 1)
    ]  # fmt: skip
    try:
        said: list[str] = []
        c = Capturer(run, CapturePolicy(for_s=1.0), say=said.append)
        t = Transition(parse_rule("hccl p99 > 1ms across ranks"), JOB, "pending", "firing", 3, time.time(),
                       2e6, 5e5, (("h0", 0), ("h1", 1)))  # fmt: skip
        folder = c.consider(t)
        assert folder is not None, said
        assert c.control.wait(120) == []  # both turned on
        assert [states[r]["state"] for r in (0, 1)] == ["on", "on"]
        assert c.tick(force=True) == folder
        cap = json.loads((folder / "capture.json").read_text())
        start, *restore = cap["commands"]
        assert sorted((x["command"], x["ranks"], x["unacknowledged"]) for x in restore) == [
            ("start", "0", []),
            ("stop", "1", []),
        ]
        assert sorted(x["generation"] for x in restore) == [start["generation"] + 1, start["generation"] + 2]
        assert states[0] == {"state": "on", "enable": ["runtime"], "activity": ["communication"]}
        assert states[1] == off
        assert [x["command"] for x in applied[0]] == ["start", "start"]
        assert [x["command"] for x in applied[1]] == ["start", "stop"]
    finally:
        for p in procs:
            p.end()
