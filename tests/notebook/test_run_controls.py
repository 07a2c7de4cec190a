"""The run panel's steering (notebook/runpanel.py's RunControls) against a run directory with
process files and no job: it refuses exactly what `python -m mspti_lens control` refuses, its
refusal stays until the next press, and its picker mirrors what the ranks applied, whoever
issued it. No job runs: the process files are written here, as a recording process writes them."""

from __future__ import annotations

import html
import json
import os
import socket
import time
from pathlib import Path

import pytest

pytest.importorskip("ipywidgets")

from mspti_lens.__main__ import main as cli
from mspti_lens.catalog import enableable
from mspti_lens.notebook.runpanel import RunControls
from mspti_lens.runs import control


class FakeRun:
    """What the controls read of a run: its root and its control."""

    def __init__(self, root: Path):
        self.root = str(root)

    @property
    def control(self) -> control.RunControl:
        return control.RunControl(self.root)


def write_process(run: Path, rank: int, state: str, enable: list[str], generation: int = 0) -> None:
    """A live process of the run as its recorder writes it (this process's pid: it is alive)."""
    row = {
        "host": "h",
        "node": socket.gethostname(),
        "rank": rank,
        "rank_source": "RANK",
        "pid": os.getpid() if rank == 0 else os.getppid(),
        "state": state,
        "enable": enable,
        "generation": generation,
        "heartbeat": time.time(),
    }
    procs = control.control_dir(run) / control.PROCESSES_DIR
    procs.mkdir(parents=True, exist_ok=True)
    (procs / f"h-pid{row['pid']}.json").write_text(json.dumps(row))


@pytest.fixture
def run(tmp_path):
    root = tmp_path / "run"
    root.mkdir(mode=0o700)
    write_process(root, 0, "off", [])
    return root


def panel_says(controls: RunControls) -> str:
    return html.unescape(controls.message.value)


@pytest.mark.parametrize(
    "ranks, duration, picked",
    [
        ("abc", "", "runtime"),  # not a rank selection
        ("7", "", "runtime"),  # no such live rank
        ("3-1", "", "runtime"),  # a range that ends before it starts
        ("", "", None),  # nothing to trace
        ("", "-5", "runtime"),  # a negative duration (a bounded box made it 0, silently)
        ("", "0", "runtime"),
        ("", "nan", "runtime"),
        ("", "abc", "runtime"),
        ("", "2.5", "runtime"),  # accepted by both
        ("0", "", "hccl"),  # accepted by both
    ],
)
def test_the_panel_refuses_what_the_command_line_refuses_and_says_it_until_the_next_press(
    run, capsys, ranks, duration, picked
):
    argv = ["control", str(run), "start", "--enable", picked or ""]
    argv += ["--ranks", ranks] if ranks else []
    argv += [f"--for={duration}"] if duration else []
    try:
        cli_code = cli(argv)
    except SystemExit as e:  # argparse's own refusal (a --for that is no number)
        cli_code = int(e.code or 0)
    cli_err = capsys.readouterr().err
    before = control.latest_issued(run)

    c = RunControls(FakeRun(run), panel=None)
    for d, t in c.domains.items():
        t.value = d == picked
    c.ranks.value, c.duration.value = ranks, duration
    c.start.click()
    refused = c.error is not None
    assert refused == (cli_code != 0), (cli_err, panel_says(c))
    if refused:
        assert c.error in panel_says(c) and control.latest_issued(run) == before  # nothing written
        c.sync()  # a refresh does not replace the refusal with an older command's state
        c.sync()
        assert c.error in panel_says(c)
    else:
        assert control.latest_issued(run) == before + 1 == c.generation
        assert "process(es) not there yet" in panel_says(c)  # the rank has not applied it


def test_a_refusal_stays_until_the_next_press(run):
    c = RunControls(FakeRun(run), panel=None)
    c.start.click()  # record's default set: runtime, hccl
    assert c.generation == 1 and c.error is None
    write_process(run, 0, "on", ["runtime", "hccl"], generation=1)
    c.sync()
    assert "generation 1: applied by every live process" in panel_says(c)
    c.ranks.value = "7"
    c.start.click()
    said = panel_says(c)
    assert "7" in said and "no live rank" in said
    for _ in range(3):  # every refresh syncs: the error is still what is said
        c.sync()
        assert panel_says(c) == said
    c.ranks.value = ""
    c.stop.click()
    assert c.error is None and c.generation == 2
    assert "generation 2: 1 process(es) not there yet" in panel_says(c)


def test_the_picker_mirrors_what_the_ranks_applied_whoever_issued_it(run):
    c = RunControls(FakeRun(run), panel=None)
    runtime = {o.key for o in c.options if o.callback.domain_name == "runtime"}
    hccl = {o.key for o in c.options if o.callback.domain_name == "hccl"}
    # runtime and HCCL on: both toggles on and every callback of both ticked
    write_process(run, 0, "on", ["runtime", "hccl"], generation=1)
    c.sync()
    assert c.domains["runtime"].value and c.domains["hccl"].value
    assert all(c.checkboxes[k].value for k in runtime | hccl)
    assert c.enable() == ["runtime", "hccl"]
    assert "on in 1 of 1 live rank" in c.applied.value
    # `control DIR start --enable hccl` from a terminal: the picker follows
    write_process(run, 0, "on", ["hccl"], generation=2)
    c.sync()
    assert not c.domains["runtime"].value and c.domains["hccl"].value
    assert not any(c.checkboxes[k].value for k in runtime) and all(c.checkboxes[k].value for k in hccl)
    # one callback, by its function name
    launch = next(x for x in enableable() if "aclrtLaunchKernel" in x.names_26x)
    write_process(run, 0, "on", ["aclrtLaunchKernel"], generation=3)
    c.sync()
    ticked = [k for k, cb in c.checkboxes.items() if cb.value]
    assert ticked == [launch.enum] and not any(t.value for t in c.domains.values())
    assert c.enable() == [launch.enum]
    # between changes the picker is the user's: a refresh keeps an edit not yet started
    c.domains["hccl"].value = True
    c.sync()
    assert c.domains["hccl"].value and all(c.checkboxes[k].value for k in hccl)
    c.checkboxes[sorted(hccl)[0]].value = False  # one box of a domain off: the domain is not all on
    assert not c.domains["hccl"].value
    # stopped: off everywhere, said so; the picker keeps what a start would turn on
    write_process(run, 0, "off", [], generation=4)
    c.sync()
    assert "off in every live rank" in c.applied.value


def test_the_state_line_never_says_running_while_every_live_rank_is_paused():
    from mspti_lens.notebook.runpanel import RunView

    def view(**kw):
        base = dict(headline="", verdict="", summary_html="", ranks_html="", simulated=True, calls=0)
        return RunView(**{**base, "heatmap": None, "finished": False, **kw})

    paused = view(running=True, paused=4).state()
    assert "running" not in paused and "paused: profiling is off in every live rank (4)" in paused
    assert view(running=True, profiling_on=2, paused=2).state() == "● profiling on in 2 of 4 live ranks"
    assert view(running=True, waiting=True).state() == "● waiting for the run's first windows"
    assert view(running=False, finished=True).state() == "■ every rank has finished"


def test_what_is_on_is_the_recorded_functions_whose_callbacks_live_ranks_trace():
    import polars as pl

    from mspti_lens.notebook.runpanel import names_traced, traced_callbacks

    summary = pl.DataFrame(
        {
            "domain": ["runtime", "hccl", "hccl", "runtime"],
            "name": ["aclrtLaunchKernel", "HcclAllReduce", "HcclBroadcast", "aclrtMemcpy"],
            "total_ns": [5, 40, 7, 9],
        }
    )
    procs = [
        {"live": True, "state": "on", "enable": ["hccl"]},
        {"live": True, "state": "on", "enable": ["aclrtLaunchKernel"]},
        {"live": True, "state": "off", "enable": []},
        {"live": False, "state": "on", "enable": ["runtime"]},  # ended: traces nothing now
    ]
    traced = traced_callbacks(procs)
    assert names_traced(summary, traced) == ("HcclAllReduce", "HcclBroadcast", "aclrtLaunchKernel")
    assert names_traced(summary, set()) == ()
