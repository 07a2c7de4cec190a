"""A job's launcher is no rank: `control status`, its errors, --wait and the Python API count and
list the ranks only, and show the launcher apart.

The run is written as its processes would write it (their process files), so no job runs: four
ranks on, and the launcher `record` started (no rank variable, so its "rank" is its pid, and no
traced call, so no window).
"""

from __future__ import annotations

import json
import time

from mspti_lens.__main__ import main as cli
from mspti_lens.runs import control

LAUNCHER_PID = 4_000_123


def four_ranks_and_a_launcher(tmp_path):
    run = tmp_path / "run"
    procs = control.control_dir(run) / control.PROCESSES_DIR
    procs.mkdir(parents=True)
    (control.control_dir(run) / control.ISSUED_DIR).mkdir()
    # "elsewhere": liveness by heartbeat, not by this host's pids
    row = {"host": "a", "node": "elsewhere", "state": "on", "enable": ["runtime"], "generation": 1}
    now = time.time()
    for r in range(4):
        rank = {"rank": r, "rank_source": "RANK", "pid": 100 + r, "windows": 3, "calls_per_s": 50.0}
        (procs / f"a-pid{100 + r}.json").write_text(json.dumps({**row, **rank, "heartbeat": now}))
    launcher = {**row, "rank": LAUNCHER_PID, "rank_source": "pid", "pid": LAUNCHER_PID, "windows": 0}
    launcher["generation"] = 0  # it has not handled the latest command: no wait is on it
    (procs / f"a-pid{LAUNCHER_PID}.json").write_text(json.dumps({**launcher, "heartbeat": now}))
    control.issue(run, {"command": "start", "ranks": None})
    return run


def test_the_launcher_is_listed_apart_and_counted_nowhere(tmp_path, capsys):
    run = four_ranks_and_a_launcher(tmp_path)
    assert cli(["control", str(run), "status"]) == 0
    out = capsys.readouterr().out
    assert "profiling is on in 4 process(es)" in out, out
    assert "4 rank process(es)" in out
    table = out.split("\nnot ranks:")[0]
    assert str(LAUNCHER_PID) not in table, out  # no row of the table, no rank column holds it
    assert f"not ranks: 1 launcher process (no rank variable, no traced call): pid {LAUNCHER_PID}" in out

    assert cli(["control", str(run), "start", "--ranks", "7"]) == 2
    err = capsys.readouterr().err
    assert "(live: 0@a, 1@a, 2@a, 3@a; not a rank: 1 launcher" in err, err
    assert str(LAUNCHER_PID) not in err and err.count("\n") == 1

    # --wait: every rank applied the latest command; the launcher is not waited for
    assert cli(["control", str(run), "status", "--wait", "0"]) == 0, capsys.readouterr().err
    capsys.readouterr()

    ctl = control.RunControl(run)
    assert sorted(p["rank"] for p in ctl.processes()) == [0, 1, 2, 3]
    assert [p["pid"] for p in ctl.processes(launchers=True) if p["launcher"]] == [LAUNCHER_PID]
    assert ctl.status()["rank"].to_list() == [0, 1, 2, 3]
    assert not ctl.pending()
    # the run's own views hold it by the same rule
    from mspti_lens.runs.run import open_run

    r = open_run(run)
    assert r.ranks()["rank"].to_list() == [0, 1, 2, 3]
    assert r.processes().filter("launcher")["pid"].to_list() == [LAUNCHER_PID]
