"""Collective instances line up across ranks whatever the on/off history of each: a simulated
job whose ranks are turned on at different moments, off and on again (``control``), gives skew
and stragglers over exactly the instances every rank recorded, with the late rank's exact
lateness, and compacted and fine reads of its files give the same frames.

The job (tests/collective_phase_job.py) all-reduces in phases the test sets off only once every
rank has acknowledged the command before it, so which instances each rank recorded is known.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from test_runs_control import BOUND_S, ctl, wait_for

import mspti_lens
from mspti_lens.runs import compact, control
from mspti_lens.runs.skew import skew

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import collective_phase_job as phased  # noqa: E402

pytestmark = pytest.mark.timeout(900)
JOB = Path(phased.__file__)
RANKS = 3
# The command before each phase, and the ranks on during it.
SCRIPT = (
    (("start", "--ranks", "0"), {0}),
    (("start", "--ranks", "1"), {0, 1}),
    (("start", "--ranks", "2"), {0, 1, 2}),
    (("stop",), set()),
    (("start",), {0, 1, 2}),
    (("stop", "--ranks", "0"), {1, 2}),
    (("start", "--ranks", "0"), {0, 1, 2}),
)
# Every rank recorded the instances of the phases where all were on.
COMPLETE = sum(n for n, (_, on) in zip(phased.STEPS, SCRIPT) if len(on) == RANKS)
HCCL_OP = "hcom_allReduce_"  # the COMMUNICATION records' name of HcclAllReduce


@pytest.fixture(scope="module")
def on_and_off_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("periods")
    out, sync = tmp / "run", tmp / "sync"
    sync.mkdir()
    cmd = [
        sys.executable, "-m", "mspti_lens", "record", "--paused", "--out", str(out), "--interval", "0.2",
        "--library", "sim", "--clock", "mspti", "--", sys.executable, str(JOB), "--ranks", str(RANKS),
        "--sync", str(sync),
    ]  # fmt: skip
    log = tmp / "record.log"
    with open(log, "w") as f:
        job = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=f)
    try:
        ranked = lambda: [p for p in control.read_processes(out) if p.get("rank_source") != "pid"]  # noqa: E731
        wait_for("paused ranks", lambda: len(ranked()) == RANKS)
        for phase, (command, _) in enumerate(SCRIPT, 1):
            assert ctl(out, *command) == 0
            assert ctl(out, "status", "--wait", str(BOUND_S)) == 0, log.read_text()
            (sync / f"go-{phase}").touch()
            done = [sync / f"done-{phase}-{r}" for r in range(RANKS)]
            wait_for(f"phase {phase}", lambda done=done: all(d.exists() for d in done))
        (sync / "end").touch()
        assert job.wait(timeout=BOUND_S) == 0, log.read_text()
    finally:
        (sync / "end").touch()
        if job.poll() is None:
            job.kill()
            job.wait()
    return out


def test_skew_counts_exactly_the_instances_every_rank_recorded_across_on_periods(on_and_off_run):
    run = mspti_lens.open_run(on_and_off_run)
    # The job's history as the run tells it: ranks 0..2 each on in more than one period.
    periods = run.periods().filter(pl.col("rank") < RANKS).group_by("rank").len().sort("rank")
    assert periods["len"].to_list() == [3, 2, 2]
    s = run.skew().filter(pl.col("op") == HCCL_OP)
    assert s.height == COMPLETE and (s["basis"] == "device").all() and (s["ranks"] == RANKS).all()
    assert (s["spread_ns"] == phased.LATE_NS).all() and (s["wait_ns"] == 2 * phased.LATE_NS).all()
    assert (s["last_rank"] == phased.LATE_RANK).all() and s["note"].is_null().all()
    # One number per instance, in time order.
    assert s["seq"].n_unique() == COMPLETE and s.sort("seq")["first_start_ns"].is_sorted()


def test_the_enter_times_line_up_the_same_instances(on_and_off_run):
    run = mspti_lens.open_run(on_and_off_run)
    s = skew(run.collective_arrivals(), basis="callbacks")
    assert s.height == COMPLETE and (s["op"] == "HcclAllReduce").all()
    assert (s["spread_ns"] == phased.LATE_NS).all() and (s["last_rank"] == phased.LATE_RANK).all()
    assert s["note"].is_null().all() and s["seq"].n_unique() == COMPLETE


def test_stragglers_vote_on_every_instance_every_rank_recorded(on_and_off_run):
    run = mspti_lens.open_run(on_and_off_run)
    v = run.stragglers().filter(pl.col("name") == HCCL_OP)
    voted = v.filter(pl.col("note").is_null())
    assert voted.height == COMPLETE
    assert (voted["late_rank"] == phased.LATE_RANK).all() and (voted["slow_rank"] == phased.LATE_RANK).all()
    assert (voted["late_by_ns"] == phased.LATE_NS).all()
    # The others are instances some rank was off for, said so; none is misaligned.
    assert v.filter(pl.col("note").is_not_null())["note"].str.starts_with("missing on").all()
    t = run.slow_ranks().row(0, named=True)
    assert (t["rank"], t["late_count"], t["instances"]) == (phased.LATE_RANK, COMPLETE, COMPLETE)


def test_compacted_and_fine_reads_give_the_same_skew_and_votes(on_and_off_run, tmp_path):
    merged = tmp_path / "merged"
    shutil.copytree(on_and_off_run, merged)
    for folder in merged.glob("host=*/rank=*"):
        for pid in {compact.parse(p.name)[3] for p in folder.glob("window-*.parquet")}:
            c = compact.Compactor(folder, pid, fine=0)
            while c.compact():
                pass
    assert list(merged.glob("host=*/rank=*/events-*-*-pid*.parquet")), "nothing was merged"
    fine, coarse = mspti_lens.open_run(on_and_off_run), mspti_lens.open_run(merged)
    assert coarse.collective_events().height == fine.collective_events().height
    assert_frame_equal(coarse.skew(), fine.skew())
    assert coarse.skew().filter(pl.col("op") == HCCL_OP).height == COMPLETE
    assert_frame_equal(coarse.stragglers(), fine.stragglers())
