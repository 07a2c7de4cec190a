"""On-demand profiling of a running job: `record --paused`, then `control DIR start|stop|status`.

A three-rank simulated job (tests/control_job.py) makes its calls in phases the test sets off
only once every rank has acknowledged the command before it, so the counts per phase are exact:
phase K makes 2**K calls of each of two APIs, and a rank's total says which phases were counted.
Every wait is on a condition (an acknowledgement, a file), with generous bounds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

import mspti_lens
from mspti_lens.__main__ import main as cli
from mspti_lens.runs import control
from mspti_lens.snapshot import Snapshot

pytestmark = pytest.mark.timeout(900)
BOUND_S = 240.0  # per wait: a loaded machine (many processes starting at once) is slow, not wrong
JOB = Path(__file__).resolve().parents[1] / "control_job.py"


def wait_for(what: str, cond, bound: float = BOUND_S):
    end = time.monotonic() + bound
    while not cond():
        assert time.monotonic() < end, f"{what}: not within {bound} s"
        time.sleep(0.02)


def ctl(out: Path, *args: str, capsys=None) -> int:
    return cli(["control", str(out), *args])


def test_a_paused_job_is_steered_through_every_command_with_exact_counts(tmp_path, capsys):
    out, sync = tmp_path / "run", tmp_path / "sync"
    sync.mkdir()
    cmd = [
        sys.executable, "-m", "mspti_lens", "record", "--paused", "--out", str(out), "--interval", "0.2",
        "--library", "sim", "--activity", "none", "--", sys.executable, str(JOB), "--ranks", "3",
        "--sync", str(sync), "--hosts", "a,a,b",
    ]  # fmt: skip
    log = tmp_path / "record.log"
    with open(log, "w") as f:
        job = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=f)
    phase = 0

    def run_phase() -> None:
        nonlocal phase
        phase += 1
        (sync / f"go-{phase}").touch()
        wait_for(f"phase {phase}", lambda: all((sync / f"done-{phase}-{r}").exists() for r in range(3)))

    def command(*args: str) -> None:
        assert ctl(out, *args) == 0
        assert ctl(out, "status", "--wait", str(BOUND_S)) == 0, capsys.readouterr()

    try:
        ranked = lambda: [p for p in control.read_processes(out) if p.get("rank_source") != "pid"]  # noqa: E731
        wait_for("three paused ranks", lambda: len(ranked()) == 3)
        assert {p["state"] for p in ranked()} == {"off"}
        run_phase()  # 1: paused, nothing counted
        assert not list(out.glob("host=*/rank=*/window-*"))  # a paused rank writes no windows
        command("start", "--enable", "runtime")
        run_phase()  # 2: launches only
        command("start", "--enable", "runtime,hccl")  # retarget: runtime keeps counting
        run_phase()  # 3: both
        command("start", "--enable", "hccl", "--ranks", "host=b")
        run_phase()  # 4: ranks 0, 1 both; rank 2 HCCL only
        command("stop", "--ranks", "0-1")
        run_phase()  # 5: rank 2 HCCL only
        command("stop")
        run_phase()  # 6: nothing
        capsys.readouterr()
        command("start", "--for", "0.5")  # record's enable set, for half a second
        wait_for("the --for period to end", lambda: {p["state"] for p in ranked()} == {"off"})
        run_phase()  # 7: nothing
        command("start")
        run_phase()  # 8: both, everywhere
        capsys.readouterr()
        assert ctl(out, "status", "--json") == 0
        status = json.loads(capsys.readouterr().out)
        assert status["latest_generation"] == 8 and not status["pending"]
        on = [p for p in status["processes"] if p.get("rank_source") != "pid"]
        assert [p["state"] for p in on] == ["on"] * 3 and all(p["generation"] == 8 for p in on)
        run = mspti_lens.open_run(out)
        wait_for(
            "phase 8 in every rank's windows",
            lambda: (
                run.refresh().by_rank().filter(pl.col("name") == "aclrtLaunchKernel")["num_calls"].sum()
                == 2 * (4 + 8 + 16 + 256) + (4 + 8 + 256)
            ),
        )
        # A rank that dies while on keeps the windows it wrote.
        pids = {p["rank"]: p["pid"] for p in ranked()}
        os.kill(pids[2], signal.SIGKILL)
        (sync / "end").touch()
        job.wait(timeout=BOUND_S)
    finally:
        (sync / "end").touch()
        if job.poll() is None:
            job.kill()
            job.wait()
    run = mspti_lens.open_run(out)
    got = {(r, n): c for r, n, c in run.by_rank().select("rank", "name", "num_calls").iter_rows()}
    launches = {0: 4 + 8 + 16 + 256, 1: 4 + 8 + 16 + 256, 2: 4 + 8 + 256}
    allreduces = {0: 8 + 16 + 256, 1: 8 + 16 + 256, 2: 8 + 16 + 32 + 256}
    assert got == {
        **{(r, "aclrtLaunchKernel"): n for r, n in launches.items()},
        **{(r, "HcclAllReduce"): n for r, n in allreduces.items()},
    }, log.read_text()
    assert run.summary()["num_calls"].sum() == sum(launches.values()) + sum(allreduces.values())
    ranks = run.ranks()
    assert ranks.filter(pl.col("rank") < 2)["status"].to_list() == ["complete", "complete"]
    assert ranks.filter(pl.col("rank") == 2)["status"].item() in ("incomplete", "stale")
    assert {p["rank"]: p["state"] for p in control.read_processes(out) if p["rank_source"] != "pid"} == {
        0: "ended",
        1: "ended",
        2: "lost",
    }
    # The on periods: until the stop, the --for, the last one.
    periods = run.periods()
    assert periods.group_by("rank").len().sort("rank")["len"].to_list() == [3, 3, 3]
    # the timeline's windows say their period: calls in the first and the last (none in the --for)
    assert sorted(run.timeline()["period"].unique()) == [1, 3]
    # Each window says what was enabled: rank 2's windows of generation 4 traced HCCL alone.
    for path in run.files().filter((pl.col("rank") == 2) & (pl.col("generation") == 4))["path"]:
        meta = Snapshot.load(path).meta
        assert meta["on"] and meta["enable"] == ["hccl"]


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    nowhere = tmp_path / "none"
    assert ctl(nowhere, "status") == 2
    assert "no run at" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert ctl(empty, "start") == 2
    assert "no controllable run" in capsys.readouterr().err
    assert list(empty.iterdir()) == []
    # A run whose processes have all ended.
    run = tmp_path / "ended"
    procs = control.control_dir(run) / control.PROCESSES_DIR
    procs.mkdir(parents=True)
    row = {"host": "h", "node": "elsewhere", "rank": 0, "rank_source": "RANK", "pid": 1, "state": "ended"}
    (procs / "h-pid1.json").write_text(json.dumps({**row, "heartbeat": time.time()}))
    before = sorted(p.name for p in run.rglob("*"))
    assert ctl(run, "stop") == 2
    assert "all 1 of its processes have ended" in capsys.readouterr().err
    # A live one, and rank specs that name nothing or are not rank specs.
    (procs / "h-pid2.json").write_text(
        json.dumps({**row, "pid": 2, "state": "off", "heartbeat": time.time()})
    )
    before = sorted(p.name for p in run.rglob("*"))
    for spec, said in [
        ("5-7", "names 5, 6, 7: no live rank of the run (live: 0@h)"),
        ("host=nope", "names host=nope: no live rank"),
        ("1-x", "is not a rank, a range or a host"),
        ("3-1", "ends before it starts"),
    ]:
        assert ctl(run, "start", "--ranks", spec) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err
    assert ctl(run, "start", "--enable", "runtim,hccl") == 2
    err = capsys.readouterr().err
    assert "did you mean 'runtime'?" in err and err.count("\n") == 1
    assert ctl(run, "start", "--activity", "kernal") == 2
    assert "did you mean 'kernel'?" in capsys.readouterr().err
    assert sorted(p.name for p in run.rglob("*")) == before  # nothing written
    assert control.parse_ranks("0-3,7,host=x") == control.RankSpec(((0, 3), (7, 7)), ("x",))
    assert control.parse_ranks("all").all and control.parse_ranks(None).all


def test_two_controllers_at_once_never_share_a_generation_and_every_command_is_applied_in_order(tmp_path):
    import threading

    run = tmp_path / "run"
    (control.control_dir(run) / control.PROCESSES_DIR).mkdir(parents=True)
    torn: list[str] = []
    stop = threading.Event()
    issued = control.control_dir(run) / control.ISSUED_DIR

    def reader() -> None:  # an issued command is always whole, never a torn write
        while not stop.is_set():
            for p in issued.glob("*.json") if issued.is_dir() else []:
                try:
                    control.validate_command(json.loads(p.read_text()))
                except FileNotFoundError:
                    continue
                except ValueError:
                    torn.append(p.read_text())

    def writer(kind: str, got: list[int]) -> None:
        for _ in range(25):
            got.append(control.issue(run, {"command": kind, "ranks": None}))

    a: list[int] = []
    b: list[int] = []
    threads = [threading.Thread(target=reader)]
    threads += [
        threading.Thread(target=writer, args=("start", a)),
        threading.Thread(target=writer, args=("stop", b)),
    ]
    for t in threads:
        t.start()
    for t in threads[1:]:
        t.join()
    stop.set()
    threads[0].join()
    assert not torn
    assert sorted(a + b) == list(range(1, 51)) == control.issued_generations(run)  # each once
    assert control.latest_issued(run) == 50
    # A running process applies every command, in order; one that registers now applies only the
    # last (the state its peers are in).
    applied: list[tuple[int, str]] = []

    def note(c):
        applied.append((c["generation"], c["command"]))

    proc = control.ProcessControl(
        run, host="h", rank=0, rank_source="RANK", apply=note,
        state=lambda: {"state": "off"}, tick=lambda: None,
    )  # fmt: skip
    proc.poll()
    assert [g for g, _ in applied] == list(range(1, 51)) and proc.generation == 50
    assert {g for g, c in applied if c == "start"} == set(a)
    applied.clear()
    late = control.ProcessControl(
        run, host="h", rank=1, rank_source="RANK", apply=note,
        state=lambda: {"state": "off"}, tick=lambda: None,
    )  # fmt: skip
    late.poll(catch_up=True)
    assert applied == [(50, "start" if 50 in a else "stop")] and late.generation == 50


def test_a_process_obeys_only_its_own_users_command_files(tmp_path, capsys):
    run = tmp_path / "run"
    (control.control_dir(run) / control.PROCESSES_DIR).mkdir(parents=True)
    issued = control.control_dir(run) / control.ISSUED_DIR
    applied: list[int] = []
    proc = control.ProcessControl(
        run, host="h", rank=0, rank_source="RANK", apply=lambda c: applied.append(c["generation"]),
        state=lambda: {"state": "off"}, tick=lambda: None,
    )  # fmt: skip

    def refused() -> str:
        return json.loads(proc.path.read_text())["refused"]["why"]

    proc.start()
    try:
        control.issue(run, {"command": "start", "ranks": None})
        os.chmod(issued / "000001.json", 0o666)  # writable by others: anyone could steer the job
        proc.poll()
        assert (
            applied == [] and "000001.json is refused" in refused() and "writable by every user" in refused()
        )
        assert proc.generation == 1  # handled: refused, never obeyed later
        # status shows the refusal; --wait names the rank and why, exit 1
        assert ctl(run, "status", "--wait", "0.3") == 1
        said = capsys.readouterr()
        assert "refused: 000001.json is refused" in said.out
        assert f"rank 0 on h (pid {os.getpid()}) refused command 1: 000001.json is refused" in said.err
        control.issue(run, {"command": "start", "ranks": None})
        proc.poll()
        assert applied == [2] and json.loads(proc.path.read_text())["refused"] is None
        if os.getuid() == 0:  # only root can give a file away
            control.issue(run, {"command": "stop", "ranks": None})
            os.chown(issued / "000003.json", 12345, -1)
            proc.poll()
            assert applied == [2] and "belongs to uid 12345" in refused()
        # A symlink is never followed, and a command naming anything else is refused, field by field.
        target = tmp_path / "elsewhere.json"
        target.write_text(json.dumps({"generation": 4, "command": "stop"}))
        (issued / "000004.json").symlink_to(target)
        proc.poll()
        assert 4 not in applied and "000004.json is a symlink" in refused()
        (issued / "000005.json").write_text(json.dumps({"generation": 5, "command": "start", "out": "/etc"}))
        proc.poll()
        assert 5 not in applied and "unknown field(s) out" in refused()
    finally:
        proc.end()
    assert json.loads(proc.path.read_text())["state"] == "ended"


def test_the_command_lines_description_names_every_subcommand():
    import argparse

    from mspti_lens.__main__ import build_parser

    p = build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    description = " ".join((p.description or "").split())
    assert {"record", "control"} <= set(sub.choices)
    assert [c for c in sub.choices if c not in description] == [], description


def test_a_paused_process_loads_the_library_ahead_of_its_start_and_subscribes_nothing(tmp_path):
    # A start then only subscribes: loading was most of a first start's CPU, which with many
    # processes on few cores set the time to the last acknowledgement.
    from mspti_lens.runs import hook
    from mspti_lens.runs.writer import WindowWriter
    from mspti_lens.sim.driver import Simulator

    sim = Simulator()
    recorder = hook.Recorder({hook.LIBRARY_VARIABLE: "sim"})
    recorder.writer = WindowWriter(None, tmp_path / "run", 10.0, host="h", rank=0)
    recorder.prepare()
    loaded = recorder.library
    assert loaded is not None and loaded.origin == "simulator"
    assert not sim.subscribed  # loaded, not subscribed: no callback can fire
    recorder.prepare()
    assert recorder.library is loaded  # once


def test_a_heartbeat_is_the_process_files_modification_time(tmp_path):
    # Between rewrites a process only sets its file's mtime; a rank on another node is live while
    # that is recent and lost once it is older than LOST_AFTER_S.
    run = tmp_path / "run"
    (control.control_dir(run) / control.PROCESSES_DIR).mkdir(parents=True)
    proc = control.ProcessControl(
        run, host="h", rank=0, rank_source="RANK", apply=lambda c: None,
        state=lambda: {"state": "off"}, tick=lambda: None,
    )  # fmt: skip
    written = time.time() - 10 * control.LOST_AFTER_S
    row = {"host": "h", "node": "another-node", "rank": 0, "pid": 1, "state": "off", "heartbeat": written}
    proc.path.write_text(json.dumps(row))
    os.utime(proc.path, (written, written))
    assert [p["state"] for p in control.read_processes(run)] == ["lost"]
    proc.beat()
    (p,) = control.read_processes(run)
    assert p["state"] == "off" and p["live"] and time.time() - p["heartbeat"] < control.LOST_AFTER_S
    assert json.loads(proc.path.read_text())["heartbeat"] == written  # the row is not rewritten
