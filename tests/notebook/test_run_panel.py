"""`%mspti panel --run DIR` (and `%mspti run DIR`) on a simulated job being recorded: the panel
shows the run's headline, the stragglers verdict, the merged summary, the rank heat map and the
rank status, refreshes while ranks run and settles once every rank has finished; it opens no
session (the notebook is not recorded, the subscriber slot stays free). Evidence-driven: it waits
for the run's first windows and for the job's exit, with generous bounds."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import warnings

import pytest

pytest.importorskip("IPython")
pytest.importorskip("ipywidgets")

from IPython.terminal.interactiveshell import TerminalInteractiveShell
from IPython.testing.globalipapp import start_ipython
from IPython.utils.capture import capture_output

from mspti_lens import open_run
from mspti_lens.runs.run import RunWarning

BOUND_S = 240.0
pytestmark = pytest.mark.filterwarnings("ignore::mspti_lens.errors.SimulatedBackendWarning")


def wait_for(what: str, cond, bound: float = BOUND_S):
    end = time.monotonic() + bound
    while not cond():
        assert time.monotonic() < end, f"{what}: not within {bound} s"
        time.sleep(0.05)


def first_windows(out) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RunWarning)  # "no window yet" while the job starts
            return open_run(str(out)).files().height > 0
    except (OSError, ValueError):
        return False


def test_the_run_panel_shows_a_running_job_and_settles_when_it_ends(tmp_path, sim):
    out = tmp_path / "run"
    hold = tmp_path / "go"  # the job runs its last step once this exists: live until the test says
    cmd = [
        sys.executable, "-m", "mspti_lens", "record", "--out", str(out), "--interval", "0.3",
        "--library", "sim", "--clock", "mspti", "--",
        sys.executable, "-m", "mspti_lens.sim", "job", "--steps", "20", "--step-delay", "0.02",
        "--ranks", "4", "--hosts", "2", "--slow-rank", "2", "--hold", str(hold),
    ]  # fmt: skip
    log = tmp_path / "record.log"
    with open(log, "w") as f:  # a file, not a pipe: nothing left open if the test fails early
        job = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=f)
    shell = start_ipython() or TerminalInteractiveShell.instance()
    with capture_output():
        shell.run_line_magic("load_ext", "mspti_lens")
    from mspti_lens.notebook.magics import MsptiMagics
    from mspti_lens.notebook.runpanel import RunPanel

    magics = next(m for m in shell.configurables if isinstance(m, MsptiMagics))
    try:
        wait_for("record to start", out.is_dir)
        shell.run_line_magic("config", "MsptiMagics.refresh = 0.2")
        # Opened at once, before any window: the panel's own status line, no Python warning
        # (above the panel, it would stay there once the ranks report).
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            panel = shell.run_line_magic("mspti", f"panel --run {out}")
        assert not [w for w in caught if issubclass(w.category, RunWarning)], [str(w.message) for w in caught]
        assert isinstance(panel, RunPanel)
        # nothing of the notebook is recorded: no session, the subscriber slot is free
        assert magics.session is None and not sim.subscribed
        first = panel.last
        assert first is not None and first.running
        assert (
            "profiling on" in panel.status.value
            or "waiting for the run's first windows" in panel.status.value
        )
        wait_for("the run's first windows", lambda: first_windows(out))
        wait_for(
            "the panel to show them", lambda: "● profiling on in 4 of 4 live ranks" in panel.status.value
        )
        # the latency distributions of what is on: drawn in the refresh that first sees it
        wait_for("a refresh to see what is on", lambda: panel.last is not None and panel.last.on_names)
        with panel._lock:  # not in the middle of a refresh
            names = panel.last.on_names
            assert len(panel.dists.children) == min(len(names), 4)
            assert all(i.value[:4] == b"\x89PNG" for i in panel.dists.children)
            assert "latency of what is on now" in panel.dist_caption.value
            assert names[0] in panel.dist_caption.value and "by total time" in panel.dist_caption.value
        both = {"HcclAllReduce", "aclrtLaunchKernel"}  # record's runtime,hccl: each domain is on
        wait_for("both domains' calls", lambda: both <= set(panel.last.on_names))  # type: ignore[union-attr]
        hold.touch()
        job.wait(timeout=BOUND_S)
        assert job.returncode == 0, log.read_text()
        wait_for("the panel to see every rank finish", lambda: not panel.auto_refreshing)
        view = panel.last
        assert view is not None and not view.running and view.finished and panel.refreshes >= 2
        assert "every rank has finished" in panel.status.value
        page = panel.body.value
        assert "4 ranks reporting on 2 host(s)" in view.headline
        assert view.verdict.startswith("slow rank: 2 on sim-host-1"), view.verdict
        # the summary and the rank status read like the magic tables: one cell per value
        assert "HcclAllReduce" in page and re.search(r">[\d.]+ (µs|ms)<", page)
        cells = re.findall(r"<td[^>]*>([^<]*)</td>", page)
        assert "sim-host-1" in cells and "2" in cells and "complete" in cells
        assert any(re.fullmatch(r"\d+ s ago", c) for c in cells), cells
        assert "&quot;" not in page
        assert view.heatmap == "HcclAllReduce" and panel.plot.value[:4] == b"\x89PNG"
        # `%mspti run DIR` is the same panel; closing the magics leaves its static view
        again = shell.run_line_magic("mspti", f"run {out}")
        assert isinstance(again, RunPanel) and magics.session is None
        with capture_output():
            shell.run_line_magic("mspti", "close")
        assert panel.finished and "mspti-lens-final" in panel.widget.children[0].value
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        shell.run_line_magic("unload_ext", "mspti_lens")


def test_the_run_panel_lists_the_runs_captures_newest_first(tmp_path):
    import json

    from mspti_lens.notebook.runpanel import captures_html
    from mspti_lens.watch.capture import captures_frame

    class Run:  # what the panel reads of a run: its captures
        root = str(tmp_path)

        def captures(self):
            return captures_frame(self.root)

    assert captures_html(Run()) == ""  # none yet: nothing shown
    for i, rule in enumerate(["dropped > 0 for 2 windows", "skew HcclAllReduce > 5ms for 2 windows"]):
        folder = tmp_path / "captures" / f"2026010{i}T000000Z-x"
        folder.mkdir(parents=True)
        c = {
            "rule": rule,
            "fired_at": 1.8e9 + i,
            "value": 9e6,
            "baseline": 1e6,
            "ranks": [["h", 1]],
            "state": "done",
        }
        (folder / "capture.json").write_text(json.dumps(c))
    page = captures_html(Run())
    assert "captures (watch)" in page and page.index("skew HcclAllReduce") < page.index("dropped &gt; 0")
    assert str(tmp_path / "captures" / "20260101T000000Z-x") in page


def write_process_file(out, pid: int, state: str, period: int, enable: list[str], generation: int) -> None:
    """This process as a recording process's control writes itself (tests/notebook/test_run_controls.py)."""
    import json
    import socket

    from mspti_lens.runs import control

    row = {"host": "h", "node": socket.gethostname(), "rank": 0, "rank_source": "RANK", "pid": pid,
           "state": state, "enable": enable, "period": period, "generation": generation,
           "heartbeat": time.time()}  # fmt: skip
    procs = control.control_dir(out) / control.PROCESSES_DIR
    procs.mkdir(parents=True, exist_ok=True)
    (procs / f"h-pid{pid}.json").write_text(json.dumps(row))


@pytest.mark.parametrize("with_control", [True, False])
def test_the_distributions_are_of_what_is_on_now_from_the_windows_since_it_was_turned_on(
    tmp_path, monkeypatch, with_control
):
    """A rank traced runtime in its first on period, then only HCCL in its second: the panel's
    distributions are the HCCL calls of the second period, captioned since when; once stopped,
    the whole run's, captioned so. With control files (record's) and without (what the windows say)."""
    import polars as pl
    from window_session import FakeSession

    from mspti_lens import plots
    from mspti_lens.notebook.runpanel import RunPanel
    from mspti_lens.runs import writer

    out = tmp_path / "run"
    out.mkdir(mode=0o700)
    w = writer.WindowWriter(None, out, 3600.0, host="h", rank=(0, "RANK"))
    w.begin(FakeSession("aclrtLaunchKernel", start=1000.0), {"enable": ["runtime"], "generation": 1})
    for _ in range(3):
        w.write_window(final=False)
    w.end("stop")  # the period's last window: 4 of runtime calls, 12 calls, the most total time
    w.begin(FakeSession("HcclAllReduce", start=2000.0), {"enable": ["hccl"], "generation": 2})
    w.write_window(final=False)
    w.write_window(final=False)  # 2 windows of HCCL calls, 6 calls
    if with_control:
        write_process_file(out, w._pid, "on", w.period, ["hccl"], 2)
    drawn = []
    real = plots.distribution

    def spy(snap, names, title):
        drawn.append((snap.summary(), list(names), title))
        return real(snap, names=names, title=title)

    monkeypatch.setattr(plots, "distribution", spy)
    panel = RunPanel(open_run(out), auto_refresh=False)
    assert panel.last is not None and panel.last.on_names == ("HcclAllReduce",)
    since = time.strftime("%H:%M:%S", time.localtime(2001.0))
    assert [(s["name"].to_list(), s["num_calls"].to_list(), n) for s, n, _ in drawn] == [
        (["HcclAllReduce"], [6], ["HcclAllReduce"])
    ]  # the second period's calls alone
    assert drawn[0][2] == f"every rank merged, the windows since {since} (generation 2)"
    caption = panel.dist_caption.value
    assert "latency of what is on now</b>: HcclAllReduce (by total time)" in caption
    assert caption.endswith(f"every rank merged, the windows since {since} (generation 2)</div>")
    assert len(panel.dists.children) == 1
    # Stopped: nothing is on; the whole run's distributions of what was recorded, said so.
    w.end("stop")  # its last window: a third of HCCL calls
    if with_control:
        write_process_file(out, w._pid, "off", w.period, [], 3)
    drawn.clear()
    panel.refresh(force_plot=True)
    assert panel.last.on_names == ()
    whole = [(12, ["aclrtLaunchKernel"]), (9, ["HcclAllReduce"])]
    assert [(s.filter(pl.col("name") == n[0])["num_calls"].item(), n) for s, n, _ in drawn] == whole
    assert {t for _, _, t in drawn} == {"every rank merged, the whole run"}
    caption = panel.dist_caption.value
    assert "what was recorded (profiling is off now)" in caption and caption.endswith("the whole run</div>")
