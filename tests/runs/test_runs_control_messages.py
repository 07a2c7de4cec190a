"""What a run says when it has no collectives (profiling off, or HCCL not enabled, and how to turn
it on) and that record's end-of-run lines say SIMULATED, on runs written in this process."""

from __future__ import annotations

import json
import time

from mspti_lens import Session
from mspti_lens.runs import control, record
from mspti_lens.runs.run import open_run
from mspti_lens.runs.skew import NO_COLLECTIVES, lagging
from mspti_lens.runs.writer import WindowWriter


def test_a_paused_run_says_profiling_was_off_and_how_to_turn_it_on(tmp_path):
    run = tmp_path / "run"
    procs = control.control_dir(run) / control.PROCESSES_DIR
    procs.mkdir(parents=True)
    for r in range(2):  # two ranks, paused from the start: no window
        row = {"host": "h", "node": "away", "rank": r, "rank_source": "RANK", "pid": 10 + r, "state": "off"}
        (procs / f"h-pid{10 + r}.json").write_text(json.dumps({**row, "heartbeat": time.time()}))
    said = lagging(open_run(run))["sentence"]
    assert said != NO_COLLECTIVES and "record a job that runs them" not in said
    assert "profiling has been off in every rank" in said, said
    assert f"python -m mspti_lens control {run} start --enable runtime,hccl" in said


def test_a_run_that_traced_the_runtime_alone_says_hccl_was_not_enabled_and_its_lines_say_simulated(
    tmp_path, sim, capfd
):
    out = tmp_path / "run"
    session = Session(library="sim", enable=["runtime"])
    session.start()
    writer = WindowWriter(session, out, 3600.0, host="h", rank=(0, "RANK"))
    writer.period_meta = {"enable": ["runtime"], "activity": [], "generation": 1}
    sim.call("aclrtMalloc", 1000, 3)
    sim.call("HcclAllReduce", 1000, 2)  # the job runs collectives; they were not traced
    writer.finish()  # the final window, and the rank's own end line
    record._report(str(out), time.time())  # record's last line
    err = capfd.readouterr().err.strip().splitlines()
    rank_line = next(line for line in err if "host=h rank=0: 3 calls" in line)
    assert rank_line.endswith("· SIMULATED"), err
    assert "1 ranks on 1 host(s)" in err[-1] and record.SIMULATED in err[-1], err

    said = lagging(open_run(out))["sentence"]
    assert said.startswith("no HCCL collectives: HCCL was not enabled (on: runtime)"), said
    assert "--enable runtime,hccl" in said
