"""Whole jobs on the simulator: `record` a multi-process simulated job, open the run, name the
slow rank, merge exactly, survive a rank killed with -9, merge two hosts.

Every job here uses the simulator's virtual clock, so durations are exact: a collective lasts its
modelled transfer plus the wait for the last rank to arrive. Each process has a watchdog timeout.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from test_runs_instances import collective_rows, frame

import mspti_lens
from mspti_lens.runs import writer
from mspti_lens.runs.run import RunWarning
from mspti_lens.sim import job
from mspti_lens.snapshot import Snapshot

pytestmark = pytest.mark.timeout(240)
WATCHDOG_S = 180
STEPS = 12


def record(
    out: Path, *job_args: str, interval: float = 5.0, check: bool = True
) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable, "-m", "mspti_lens", "record", "--out", str(out), "--interval", str(interval),
        "--library", "sim", "--clock", "mspti", "--",
        sys.executable, "-m", job.RANK_MODULE, "job", "--steps", str(STEPS), *job_args,
    ]  # fmt: skip
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=WATCHDOG_S)
    if check:
        assert p.returncode == 0, p.stderr
    return p


@functools.cache
def _slow_job(tmp: str) -> Path:
    out = Path(tmp) / "slow-rank-3"
    # Short windows and a pause per step: every rank writes several windows.
    record(out, "--ranks", "8", "--hosts", "2", "--slow-rank", "3", "--step-delay", "0.05", interval=0.2)
    return out


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory) -> Path:
    return _slow_job(str(tmp_path_factory.mktemp("runs")))


@pytest.mark.slow
def test_the_injected_slow_rank_is_named_on_the_simulator(slow_run):
    run = mspti_lens.open_run(slow_run)
    s = run.stragglers()
    row = s.filter(pl.col("name") == "hcom_allReduce_").row(0, named=True)  # HCCL's op name
    assert (row["slow_rank"], row["slow_host"], row["test"]) == (3, "sim-host-0", "dixon")
    assert row["statistic"] > row["critical"]
    assert run.slow_ranks()["rank"].to_list()[0] == 3
    # Its own collectives are shorter (it arrives last, so it never waits: exactly the transfer),
    # everyone else's are longer (they wait for it).
    ar = run.by_rank().filter(pl.col("name") == "HcclAllReduce").sort("rank")
    slow = ar.filter(pl.col("rank") == 3)
    assert slow["total_ns"].item() == STEPS * job.ALLREDUCE_NS
    assert slow["max_ns"].item() == job.ALLREDUCE_NS
    others = ar.filter(pl.col("rank") != 3)
    assert (others["min_ns"] > job.ALLREDUCE_NS).all()
    # The wait is the slow rank's extra compute, at least 1.5x - 1.04x of the fastest launches.
    least_wait = LAUNCHES_NS_PER_STEP * (job.SLOW_RANK_FACTOR - (1 + job.JITTER))
    assert (others["min_ns"] >= job.ALLREDUCE_NS + least_wait).all()


LAUNCHES_NS_PER_STEP = job.LAUNCH_NS * job.LAUNCHES * job.LAUNCH_CHUNKS


# The simulator's collective model: latency, no bytes (rust/sim/src/model/device.rs COLLECTIVE_LATENCY_NS).
TRANSFER_NS = 15_000


def test_device_collectives_of_the_late_rank_are_the_short_ones_on_the_simulator(slow_run):
    # HCCL's device-side wait: each rank's COMMUNICATION record runs from its own task's start
    # until the last rank's task has started, then transfers. The late rank never waits.
    # (Per window: Snapshot.merge does not carry the device tables.)
    windows = [Snapshot.load(f) for f in sorted(slow_run.glob("host=*/rank=*/window-*.parquet"))]
    c = pl.concat(
        [w.collectives().with_columns(pl.lit(w.meta["rank"]).alias("rank")) for w in windows]
    ).filter(pl.col("from") == "communication")
    ar = (
        c.filter(pl.col("op") == "hcom_allReduce_")  # HCCL's op name, as CANN writes it
        .group_by("rank", "group")
        .agg(pl.col("num_calls").sum(), pl.col("min_ns").min(), pl.col("max_ns").max())
        .sort("rank")
    )
    assert ar["rank"].to_list() == list(range(8)) and (ar["group"] == job.WORLD_GROUP).all()
    assert (ar["num_calls"] == STEPS).all()
    slow, others = ar.filter(pl.col("rank") == 3), ar.filter(pl.col("rank") != 3)
    assert (slow["min_ns"].item(), slow["max_ns"].item()) == (TRANSFER_NS, TRANSFER_NS)
    least_wait = LAUNCHES_NS_PER_STEP * (job.SLOW_RANK_FACTOR - (1 + job.JITTER))
    assert (others["min_ns"] >= TRANSFER_NS + least_wait).all()
    # The halo swaps carry their pair's communicator name: rank r is in pairs (r-1, r) and (r, r+1).
    pairs = (
        c.filter(pl.col("op") == "hcom_batchSendRecv_").group_by("rank").agg(pl.col("group").unique().sort())
    )
    for rank, groups in pairs.iter_rows():
        want = sorted(job.group_name(job.JobPlan(ranks=8), 1 + i) for i in ((rank - 1) % 8, rank))
        assert groups == want


def _device_events_landed() -> bool:
    return hasattr(Snapshot, "device_events")


@pytest.mark.skipif(not _device_events_landed(), reason="needs Snapshot.device_events (the devlog branch)")
@pytest.mark.slow
def test_the_late_rank_is_named_for_every_instance_by_both_rules_on_the_simulator(tmp_path):
    out = tmp_path / "late-rank-1"
    record(out, "--ranks", "4", "--slow-rank", "1")
    run = mspti_lens.open_run(out)
    s = run.stragglers()
    ar = s.filter(pl.col("name") == "hcom_allReduce_")  # device events carry HCCL's op names
    assert ar["instance"].to_list() == list(range(STEPS))
    assert (ar["basis"] == "device events").all() and ar["note"].is_null().all()
    assert (ar["group"] == job.WORLD_GROUP).all() and (ar["ranks"] == 4).all()
    assert (ar["slow_rank"] == 1).all() and (ar["late_rank"] == 1).all()
    assert (ar["slow_ns"] == TRANSFER_NS).all() and (ar["test"] == "dixon").all()
    assert (ar["late_by_ns"] >= LAUNCHES_NS_PER_STEP * (job.SLOW_RANK_FACTOR - (1 + job.JITTER))).all()
    # Point-to-point swaps are left out, as msprof-analyze does.
    assert set(s["name"].to_list()) == {"hcom_allReduce_"}
    t = run.slow_ranks().row(0, named=True)
    assert (t["rank"], t["slow_affect_count"], t["late_count"], t["instances"]) == (1, STEPS, STEPS, STEPS)


@pytest.mark.slow
def test_without_activity_records_stragglers_vote_per_window_and_say_so_on_the_simulator(tmp_path):
    out = tmp_path / "no-activity"
    cmd = [
        sys.executable, "-m", "mspti_lens", "record", "--out", str(out), "--library", "sim",
        "--clock", "mspti", "--activity", "none", "--interval", "3600", "--",
        sys.executable, "-m", job.RANK_MODULE, "job", "--steps", "4", "--ranks", "4", "--slow-rank", "2",
        "--step-delay", "0.6",
    ]  # fmt: skip
    # Two windows per rank whatever the machine's load: each rank's first comes at most
    # FIRST_WINDOW_S (1 s) after it begins, and its 2.4 s of steps outlive it; the long interval
    # leaves only the final one after it. (Without the delay a rank that began first on a slow
    # machine, rank 0 at the barrier, wrote an early window the others did not, and the
    # per-window votes no longer lined up.)
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=WATCHDOG_S)
    assert p.returncode == 0, p.stderr
    run = mspti_lens.open_run(out)
    assert not list(out.glob("host=*/rank=*/events-*.parquet"))
    s = run.stragglers().filter(pl.col("name") == "HcclAllReduce")
    seen = (
        sorted(str(f.relative_to(out)) for f in out.glob("host=*/rank=*/*.parquet")),
        run.ranks(),
        p.stderr[-2000:],
    )
    assert s.height and s["basis"].str.contains("--activity communication").all(), seen
    assert (s["slow_rank"] == 2).all() and s["late_rank"].is_null().all()
    # Device event files written beside the windows (the writer's layout, rows built by hand in
    # the device-event-log schema) turn the votes per instance, read from the directory names.
    rows = frame(collective_rows(instances=3, late=1))
    for (rank,), mine in rows.partition_by("rank", as_dict=True).items():
        (d,) = out.glob(f"host=*/rank={rank}")
        mine.drop("host", "rank").write_parquet(d / writer.events_name(1, 1))
    (d,) = out.glob("host=*/rank=0")
    (d / writer.events_name(2, 1)).write_bytes(b"PAR1 half a file")
    with pytest.warns(RunWarning, match="events-000002-pid1.parquet"):
        v = run.refresh().stragglers()
    assert (v["basis"] == "device events").all() and v["instance"].to_list() == [0, 1, 2]
    assert (v["slow_rank"] == 1).all() and (v["late_rank"] == 1).all()
    assert run.slow_ranks().select("rank", "slow_affect_count", "late_count").rows() == [(1, 3, 3)]


@pytest.mark.slow
def test_a_balanced_job_names_no_slow_rank_on_the_simulator(tmp_path):
    out = tmp_path / "balanced"
    record(out, "--ranks", "4")
    s = mspti_lens.open_run(out).stragglers().filter(pl.col("name") == "hcom_allReduce_")
    assert s.height and s["slow_rank"].is_null().all()


def test_the_merged_run_equals_the_sum_of_the_per_rank_snapshots_exactly_on_the_simulator(slow_run):
    run = mspti_lens.open_run(slow_run)
    files = sorted(slow_run.glob("host=*/rank=*/window-*.parquet"))
    # Several windows per rank: each rank sleeps >= 12 x 0.05 s against a 0.2 s interval, so it
    # writes at least one interval window before its final one, however fast the machine is.
    per_rank = {f.parent for f in files}
    assert len(per_rank) == 8 and len(files) >= 2 * len(per_rank)
    snaps = [Snapshot.load(f) for f in files]
    total = functools.reduce(lambda a, b: a.merge(b), snaps)
    assert_frame_equal(run.summary(), total.summary())
    # Counters of the pairing add up over windows; in_flight and threads are the last window's.
    want = {c: sum(s.counters[c] for s in snaps) for c in total.counters}
    want.update({c: sum(s.counters[c] for s in snaps if s.meta["final"]) for c in ("in_flight", "threads")})
    assert run.snapshot().counters == want
    # Per rank as well: each rank's row is its own windows merged.
    by_rank = run.by_rank()
    for rank in range(8):
        mine = [s for s in snaps if s.meta["rank"] == rank]
        want = functools.reduce(lambda a, b: a.merge(b), mine).summary()
        got = by_rank.filter(pl.col("rank") == rank).drop("host", "rank")
        assert_frame_equal(got, want)
    # Every simulated call is in the run once: 8 ranks x steps x the job's calls per step.
    calls = dict(zip(run.summary()["name"], run.summary()["num_calls"]))
    assert calls["HcclAllReduce"] == 8 * STEPS
    assert calls["aclrtLaunchKernel"] == 8 * STEPS * job.LAUNCHES * job.LAUNCH_CHUNKS
    assert calls["HcclBatchSendRecv"] == 8 * STEPS


def test_two_hosts_merge_on_the_simulator(slow_run):
    run = mspti_lens.open_run(slow_run)
    r = run.ranks()
    assert r.select("host", "rank").rows() == [("sim-host-0", i) for i in range(4)] + [
        ("sim-host-1", i) for i in range(4, 8)
    ]
    assert (r["status"] == "complete").all()
    # the hosts' folders, and control/ (the launch command and each process's file)
    assert sorted(p.name for p in slow_run.iterdir()) == ["control", "host=sim-host-0", "host=sim-host-1"]
    per_host = run.by_rank().group_by("host").agg(pl.col("num_calls").sum()).sort("host")
    assert per_host["num_calls"].sum() == run.summary()["num_calls"].sum()
    assert per_host["num_calls"].to_list()[0] == per_host["num_calls"].to_list()[1]


@pytest.mark.slow
def test_a_slow_link_lengthens_the_swaps_of_its_two_ranks_only_on_the_simulator(tmp_path):
    out = tmp_path / "slow-link"
    record(out, "--ranks", "4", "--slow-link", "0-1")
    sr = mspti_lens.open_run(out).by_rank().filter(pl.col("name") == "HcclBatchSendRecv").sort("rank")
    slow_swap = job.SENDRECV_NS * job.SLOW_LINK_FACTOR
    # Even steps swap over links 0-1 and 2-3, odd steps over 1-2 and 3-0 (STEPS is even).
    half = STEPS // 2
    assert (
        sr["total_ns"].to_list() == [half * (slow_swap + job.SENDRECV_NS)] * 2 + [STEPS * job.SENDRECV_NS] * 2
    )


@pytest.mark.slow
def test_a_rank_killed_with_9_leaves_a_run_that_opens_with_it_incomplete_on_the_simulator(tmp_path):
    out = tmp_path / "killed"
    cmd = [
        sys.executable, "-m", "mspti_lens", "record", "--out", str(out), "--interval", "0.3",
        "--library", "sim", "--clock", "mspti", "--",
        sys.executable, "-m", job.RANK_MODULE, "job", "--ranks", "4", "--steps", "100000",
        "--step-delay", "0.01", "--timeout", "20",
    ]  # fmt: skip
    rec = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + WATCHDOG_S
        victim = None
        while victim is None and time.monotonic() < deadline:
            written = sorted(out.glob("host=*/rank=2/window-*.parquet"))
            if len(written) >= 2:
                victim = int(written[0].name.split("pid")[1].split(".")[0])
            time.sleep(0.05)
        assert victim is not None, "rank 2 never wrote two windows"
        os.kill(victim, signal.SIGKILL)
        _, err = rec.communicate(timeout=WATCHDOG_S)
    finally:
        if rec.poll() is None:
            rec.kill()
    assert rec.returncode == 1, err  # the job failed: its launcher saw a rank die
    with_warnings = mspti_lens.open_run(out, stale_after=1.0)
    # Read once its last window is older than stale_after: until then a rank is running.
    last = with_warnings.files()["written"].max()
    r = with_warnings.ranks(now=last + 1.5).sort("rank")
    assert r["rank"].to_list() == [0, 1, 2, 3]
    killed = r.filter(pl.col("rank") == 2).row(0, named=True)
    assert (killed["complete"], killed["status"]) == (False, "incomplete")
    assert killed["calls"] > 0  # its windows before the kill are kept
    assert r.filter(pl.col("rank") != 2)["complete"].all()  # the others ended cleanly, aborted
    assert "HCCL_E_INTERNAL" in err
    # The run still merges: the killed rank's windows are in it.
    assert with_warnings.summary()["num_calls"].sum() == r["calls"].sum()


def test_a_corrupt_window_is_skipped_with_a_warning_naming_it_on_the_simulator(slow_run, tmp_path):
    import shutil

    out = tmp_path / "corrupt"
    shutil.copytree(slow_run, out)
    bad = out / "host=sim-host-0" / "rank=9" / "window-000001-pid1.parquet"
    bad.parent.mkdir()
    bad.write_bytes(b"PAR1 this is not parquet")
    other = out / "host=sim-host-0" / "rank=10" / "window-000001-pid2.parquet"
    other.parent.mkdir()
    pl.DataFrame({"x": [1]}).write_parquet(other)
    half = out / "host=sim-host-0" / "rank=0" / ".window-000099-pid3.parquet.77.tmp"
    half.write_bytes(b"PAR1")
    # A whole footer over damaged data: found when the data is read, then skipped the same way.
    damaged = out / "host=sim-host-0" / "rank=11" / "window-000001-pid4.parquet"
    damaged.parent.mkdir()
    data = bytearray(next(slow_run.glob("host=*/rank=0/window-*.parquet")).read_bytes())
    data[8:200] = b"\x55" * 192
    damaged.write_bytes(bytes(data))
    with pytest.warns(RunWarning) as caught:
        run = mspti_lens.open_run(out)
        summary = run.summary()
    named = " ".join(str(w.message) for w in caught)
    assert str(bad) in named and str(other) in named and str(damaged) in named and str(half) not in named
    assert_frame_equal(summary, mspti_lens.open_run(slow_run).summary())


def test_sigterm_writes_the_last_window_on_the_simulator(tmp_path):
    out = tmp_path / "term"
    prog = (
        "import time, mspti_lens.sim as s\n"
        "sim = s.Simulator()\n"
        "sim.call('aclrtMalloc', 1000, 7)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    cmd = [sys.executable, "-m", "mspti_lens", "record", "--out", str(out), "--interval", "30",
           "--library", "sim", "--", sys.executable, "-c", prog]  # fmt: skip
    env = dict(os.environ, RANK="5")
    rec = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert rec.stdout.readline().strip() == "ready"
        child = None
        deadline = time.monotonic() + WATCHDOG_S
        while child is None and time.monotonic() < deadline:
            kids = subprocess.run(
                ["pgrep", "-P", str(rec.pid)], check=False, capture_output=True, text=True
            ).stdout.split()
            child = int(kids[0]) if kids else None
        os.kill(child, signal.SIGTERM)
        _, err = rec.communicate(timeout=WATCHDOG_S)
    finally:
        if rec.poll() is None:
            rec.kill()
    assert rec.returncode == 128 + signal.SIGTERM  # the command died of the signal, as without us
    run = mspti_lens.open_run(out)
    r = run.ranks().row(0, named=True)
    assert (r["rank"], r["complete"], r["calls"]) == (5, True, 7)
    assert "rank=5: 7 calls" in err


def test_sigint_ends_in_the_last_window_on_the_simulator(tmp_path):
    out = tmp_path / "int"
    prog = (
        "import time, mspti_lens.sim as s\n"
        "s.Simulator().call('aclrtFree', 1000, 4)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    cmd = [sys.executable, "-m", "mspti_lens", "record", "--out", str(out), "--interval", "30",
           "--library", "sim", "--", sys.executable, "-c", prog]  # fmt: skip
    rec = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, RANK="2")
    )
    try:
        assert rec.stdout.readline().strip() == "ready"
        kids = subprocess.run(["pgrep", "-P", str(rec.pid)], check=False, capture_output=True, text=True)
        os.kill(int(kids.stdout.split()[0]), signal.SIGINT)
        _, err = rec.communicate(timeout=WATCHDOG_S)
    finally:
        if rec.poll() is None:
            rec.kill()
    assert "KeyboardInterrupt" in err  # the program saw its Ctrl-C as without us
    r = mspti_lens.open_run(out).ranks().row(0, named=True)
    assert (r["rank"], r["complete"], r["calls"]) == (2, True, 4)


def test_stragglers_fold_the_instances_that_reached_one_verdict_on_the_simulator(slow_run):
    run = mspti_lens.open_run(slow_run)
    votes, folded = run.stragglers(), run.stragglers(fold=True)
    assert folded.height < votes.height  # the slow rank is named instance after instance
    assert folded["num_instances"].sum() == votes.height
    assert folded.columns[:2] == ["name", "instances"]
    with pytest.raises(ValueError, match="fold is True"):
        run.stragglers(fold="yes")  # type: ignore[arg-type]
