"""Every command reaches every rank it names, in order; --wait fails naming a rank that refused;
--for ends at a fixed time a late process respects; bad commands are one line and write nothing.

The jobs are simulated processes started as `record` starts them (the hook's variables, the
launch issued as generation 1), each making its calls in phases the test sets off, so the counts
are exact: phase K makes 2**K aclrtLaunchKernel calls. Every wait is on a condition, with
generous bounds.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

import mspti_lens
from mspti_lens.__main__ import main as cli
from mspti_lens.runs import control, hook

pytestmark = pytest.mark.timeout(900)
BOUND_S = 240.0
RANK_SCRIPT = """
import os, sys, time, pathlib
from mspti_lens.sim.driver import Simulator
sim = Simulator()
sim.set_clock("virtual")
if os.environ.get("TEST_SUBSCRIBER_BUSY") == "1":
    sim.set_fault("msptiSubscribe", 2)  # another tool holds MSPTI's only subscriber
launch = sim.api("aclrtLaunchKernel")
sync, rank = pathlib.Path(sys.argv[1]), os.environ["RANK"]
phase, deadline = 1, time.monotonic() + 300
while time.monotonic() < deadline and not (sync / "end").exists():
    if (sync / f"go-{phase}").exists():
        for _ in range(2 ** phase):
            sim.lib.msimCall(launch, 2000)
        (sync / f"done-{phase}-{rank}").touch()
        phase += 1
    time.sleep(0.01)
"""


def wait_for(what: str, cond, bound: float = BOUND_S):
    end = time.monotonic() + bound
    while not cond():
        assert time.monotonic() < end, f"{what}: not within {bound} s"
        time.sleep(0.02)


class Job:
    """A paused run and its processes, started one by one (a late one is just started later)."""

    def __init__(self, tmp: Path):
        self.out, self.sync = tmp / "run", tmp / "sync"
        self.sync.mkdir()
        self.out.mkdir(mode=0o700)  # as record makes it
        self.launch = control.issue(self.out, {"command": "stop", "ranks": None})  # as record does
        self.procs: list[subprocess.Popen] = []
        self.phase = 0
        self.log = tmp / "ranks.log"

    def start_rank(self, rank: int, **extra: str) -> None:
        env = {
            **os.environ,
            hook.RECORD_VARIABLE: str(self.out),
            hook.INTERVAL_VARIABLE: "0.2",
            hook.PAUSED_VARIABLE: "1",
            hook.GENERATION_VARIABLE: str(self.launch),
            hook.LIBRARY_VARIABLE: "sim",
            hook.ACTIVITY_VARIABLE: "none",
            "RANK": str(rank),
            **extra,
        }
        env["PYTHONPATH"] = os.pathsep.join([hook.SITE_DIR, os.environ.get("PYTHONPATH", "")])
        with open(self.log, "a") as f:
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", RANK_SCRIPT, str(self.sync)], env=env, stdout=f, stderr=f
                )
            )
        wait_for(f"rank {rank} registered", lambda: rank in self.ranks())

    def ranks(self) -> dict[int, dict]:
        return {int(p["rank"]): p for p in control.read_processes(self.out) if p["live"]}

    def run_phase(self, ranks: list[int]) -> None:
        self.phase += 1
        (self.sync / f"go-{self.phase}").touch()
        done = lambda: all((self.sync / f"done-{self.phase}-{r}").exists() for r in ranks)  # noqa: E731
        wait_for(f"phase {self.phase}", done)

    def end(self) -> None:
        (self.sync / "end").touch()
        for p in self.procs:
            try:
                p.wait(timeout=BOUND_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def calls(self) -> dict[int, int]:
        run = mspti_lens.open_run(self.out)
        if not run.files().height:
            return {}
        df = run.by_rank().filter(pl.col("name") == "aclrtLaunchKernel")
        return dict(zip(df["rank"].to_list(), df["num_calls"].to_list()))


def test_back_to_back_commands_for_different_ranks_each_reach_their_rank(tmp_path):
    job = Job(tmp_path)
    try:
        job.start_rank(0)
        job.start_rank(1)
        ctl = control.RunControl(job.out)
        first = ctl.start(ranks="0")
        second = ctl.start(ranks="1")  # at once: rank 0 may not have read the first yet
        assert ctl.wait(BOUND_S) == []
        assert {r: p["state"] for r, p in job.ranks().items()} == {0: "on", 1: "on"}
        assert {r: p["generation"] for r, p in job.ranks().items()} == {0: second, 1: second} != first
        job.run_phase([0, 1])  # 2 calls each, both on
        ctl.stop(ranks=[0, 1])
        assert ctl.wait(BOUND_S) == []
        job.run_phase([0, 1])  # 4 calls each, both off
    finally:
        job.end()
    assert job.calls() == {0: 2, 1: 2}, job.log.read_text()


def test_wait_fails_naming_the_rank_that_refused_and_why(tmp_path, capsys):
    job = Job(tmp_path)
    try:
        job.start_rank(0)
        job.start_rank(1, TEST_SUBSCRIBER_BUSY="1")
        gen = control.RunControl(job.out).start()
        left = control.RunControl(job.out).wait(BOUND_S)
        assert [(int(p["rank"]), p["why"].split(":")[0]) for p in left] == [(1, f"refused command {gen}")]
        assert "could not start (SubscriberBusyError)" in left[0]["why"] and "('" not in left[0]["why"]
        capsys.readouterr()
        assert cli(["control", str(job.out), "status", "--wait", str(BOUND_S)]) == 1
        said = capsys.readouterr()
        err = [line for line in said.err.splitlines() if "rank 1" in line]
        assert len(err) == 1 and f"refused command {gen}: could not start (SubscriberBusyError)" in err[0]
        assert "rank 0" not in said.err and "('" not in said.out + said.err
        assert job.ranks()[0]["state"] == "on" and job.ranks()[1]["state"] == "off"
    finally:
        job.end()


def test_an_expired_start_for_is_not_obeyed_by_a_process_that_registers_later(tmp_path):
    job = Job(tmp_path)
    try:
        job.start_rank(0)
        ctl = control.RunControl(job.out)
        gen = ctl.start(for_s=0.5)
        assert ctl.wait(BOUND_S) == []
        wait_for("the --for period to end", lambda: job.ranks()[0]["state"] == "off")
        job.start_rank(1)  # a DataLoader worker, an elastic restart: after the period ended
        wait_for("rank 1 handled the commands", lambda: job.ranks()[1]["generation"] == gen)
        assert job.ranks()[1]["state"] == "off"
        job.run_phase([0, 1])  # 2 calls each, both off
    finally:
        job.end()
    assert job.calls().get(1, 0) == 0, job.log.read_text()
    issued = json.loads((control.control_dir(job.out) / control.ISSUED_DIR / f"{gen:06d}.json").read_text())
    assert issued["until"] == pytest.approx(issued["issued"] + 0.5)  # an absolute end


def test_bad_commands_are_one_line_and_write_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    control.issue(run, {"command": "stop", "ranks": None})
    procs = [
        control.ProcessControl(
            run, host=h, rank=r, rank_source="RANK", apply=lambda c: None, state=lambda: {"state": "off"},
            tick=lambda: None, generation=1,
        ).start()
        for r, h in ((0, "a"), (1, "b"))
    ]  # fmt: skip
    try:
        before = sorted(p.name for p in run.rglob("*"))
        for args, said in [
            (["--for", "inf"], "--for must be a finite number of seconds > 0, not inf"),
            (["--for", "nan"], "--for must be a finite number of seconds > 0, not nan"),
            (["--for", "-1"], "--for must be a finite number of seconds > 0, not -1.0"),
            (["--enable", ""], "--enable names nothing"),
            (["--enable", ","], "--enable names nothing"),
            (["--ranks", "0,7"], "--ranks 0,7 names 7: no live rank of the run (live: 0@a, 1@b)"),
        ]:
            assert cli(["control", str(run), "start", *args]) == 2, args
            err = capsys.readouterr().err
            assert said in err and err.count("\n") == 1 and "Traceback" not in err, (args, err)
        ctl = control.RunControl(run)
        for kw, said in [
            ({"for_s": math.inf}, "finite number of seconds"),
            ({"enable": []}, "--enable names nothing"),
            ({"ranks": [0, 7]}, "names 7: no live rank"),
            ({"ranks": -1}, "is not a rank selection"),
            ({"ranks": True}, "is not a rank selection"),
            ({"ranks": 3.5}, "is not a rank selection"),
        ]:
            with pytest.raises(control.ControlError, match=said) as e:
                ctl.start(**kw)
            assert "\n" not in str(e.value)
        assert sorted(p.name for p in run.rglob("*")) == before  # nothing written
        # An int, a list of ints or the text form: each is a rank selection.
        assert ctl.start(ranks=0) == 2 and ctl.start(ranks=[0, 1]) == 3 and ctl.stop(ranks="1") == 4
        specs = [
            json.loads((control.control_dir(run) / control.ISSUED_DIR / f"{g:06d}.json").read_text())["ranks"]
            for g in (2, 3, 4)
        ]
        assert specs == [
            {"ranks": [[0, 0]], "hosts": []},
            {"ranks": [[0, 0], [1, 1]], "hosts": []},
            {"ranks": [[1, 1]], "hosts": []},
        ]
    finally:
        for p in procs:
            p.end()
