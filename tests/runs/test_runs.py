"""The runs tools piece by piece: the start hook, rank identity, the record command line, the
slow-rank rules, the run's views. Process-level jobs are in test_runs_job_on_the_simulator.py."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mspti_lens
from mspti_lens.runs import hook, record, stragglers, writer
from mspti_lens.runs.run import EmptyRunError, Run, RunWarning

pytestmark = pytest.mark.timeout(120)
WATCHDOG_S = 90
PROGRAM = "import sys; print('program ran'); sys.exit(3)"


def python_with_hook(env_extra: dict[str, str], code: str = PROGRAM, extra_path: list[str] = ()):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSPTI_LENS_")}
    env["PYTHONPATH"] = os.pathsep.join([hook.SITE_DIR, *extra_path])
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=WATCHDOG_S
    )


# -- the start hook ----------------------------------------------------------------------------
def test_the_hook_is_inert_without_its_variable():
    p = python_with_hook({}, "import sys; print('mspti_lens' in sys.modules)")
    assert (p.returncode, p.stdout, p.stderr) == (0, "False\n", "")


def test_the_site_hook_checks_the_hooks_own_variable():
    text = (Path(hook.SITE_DIR) / "sitecustomize.py").read_text()
    assert f'os.environ.get("{hook.RECORD_VARIABLE}")' in text


def test_an_unwritable_output_is_one_line_at_start_and_the_program_runs(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    p = python_with_hook({hook.RECORD_VARIABLE: str(not_a_dir / "out"), hook.LIBRARY_VARIABLE: "sim"})
    assert (p.returncode, p.stdout) == (3, "program ran\n")
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mspti-lens: not recording this process: cannot write to")


def test_a_failure_to_subscribe_is_one_warning_line_and_the_program_runs(tmp_path):
    p = python_with_hook({hook.RECORD_VARIABLE: str(tmp_path), hook.LIBRARY_VARIABLE: "/nowhere/libmspti.so"})
    assert (p.returncode, p.stdout) == (3, "program ran\n")
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and "not recording this process (LibraryError" in lines[0], p.stderr
    assert not list(tmp_path.iterdir())


def test_a_bad_interval_is_one_line_and_the_program_runs(tmp_path):
    p = python_with_hook({hook.RECORD_VARIABLE: str(tmp_path), hook.INTERVAL_VARIABLE: "soon"})
    assert (p.returncode, p.stdout) == (3, "program ran\n")
    assert len(p.stderr.splitlines()) == 1 and "MSPTI_LENS_INTERVAL='soon'" in p.stderr


def test_the_hook_chains_the_sitecustomize_it_shadows(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIRS = 'ran'\n")
    p = python_with_hook({}, "print(THEIRS)", extra_path=[str(theirs)])
    assert (p.returncode, p.stdout) == (0, "ran\n"), p.stderr


def test_a_recorded_process_without_a_rank_variable_is_ranked_by_its_pid_on_the_simulator(tmp_path):
    code = "import os, mspti_lens.sim as s; s.Simulator().call('aclrtMalloc', 10, 3); print(os.getpid())"
    p = python_with_hook({hook.RECORD_VARIABLE: str(tmp_path), hook.LIBRARY_VARIABLE: "sim"}, code)
    assert p.returncode == 0, p.stderr
    pid = int(p.stdout)
    r = mspti_lens.open_run(tmp_path).ranks()
    assert r.select("rank", "calls", "complete").rows() == [(pid, 3, True)]


@pytest.mark.parametrize("rank", [{}, {"RANK": "1"}])
def test_a_process_that_makes_no_call_leaves_no_files_on_the_simulator(tmp_path, rank):
    env = {hook.RECORD_VARIABLE: str(tmp_path), hook.LIBRARY_VARIABLE: "sim", **rank}
    p = python_with_hook(env, "print(1)")
    assert (p.returncode, p.stderr) == (0, "")
    assert not list(tmp_path.glob("host=*"))  # no rank folder, no window
    # Its control file (runs/control.py): a rank is shown as ended; a process without a rank
    # variable that recorded nothing (a launcher, a helper) leaves none.
    procs = [json.loads(f.read_text()) for f in tmp_path.glob("control/processes/*.json")]
    assert [(q["rank"], q["state"]) for q in procs] == ([(1, "ended")] if rank else [])


# -- rank identity ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "env, want",
    [
        ({"RANK": "3", "RANK_ID": "9"}, (3, "RANK")),
        ({"OMPI_COMM_WORLD_RANK": "12"}, (12, "OMPI_COMM_WORLD_RANK")),
        ({"PMI_RANK": "4"}, (4, "PMI_RANK")),
        ({"RANK_ID": "7"}, (7, "RANK_ID")),
        ({"RANK": "not a number", "RANK_ID": "2"}, (2, "RANK_ID")),
        ({}, (os.getpid(), "pid")),
    ],
)
def test_rank_identity_comes_from_launcher_variables_else_the_pid(env, want):
    assert writer.rank_identity(env) == want


def test_host_name_override_and_world_size():
    assert writer.host_name({"MSPTI_LENS_HOST": "node/7"}) == "node_7"
    assert writer.world_size({"WORLD_SIZE": "16"}) == 16
    assert writer.world_size({"RANK_SIZE": "8"}) == 8
    assert writer.world_size({}) is None


# -- record ------------------------------------------------------------------------------------
def _args(**kw) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    record.add_arguments(p)
    a = p.parse_args(["--", "true"])
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def test_record_preloads_a_real_library_and_not_the_simulator(tmp_path):
    real = tmp_path / "libmspti.so"
    real.write_bytes(b"")
    e = record.child_env(_args(out=str(tmp_path), library=str(real)), env={"LD_PRELOAD": "libother.so"})
    assert e["LD_PRELOAD"] == f"{real} libother.so"
    assert e[hook.LIBRARY_VARIABLE] == str(real)
    assert e["PYTHONPATH"].split(os.pathsep)[0] == hook.SITE_DIR
    e = record.child_env(_args(out=str(tmp_path), library="sim"), env={"PYTHONPATH": "/theirs"})
    assert "LD_PRELOAD" not in e
    assert e["PYTHONPATH"] == os.pathsep.join([hook.SITE_DIR, "/theirs"])
    assert e[hook.RECORD_VARIABLE] == str(tmp_path.resolve())


def test_record_reports_an_unwritable_output_before_running_anything(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    marker = tmp_path / "ran"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "mspti_lens",
            "record",
            "--out",
            str(blocker / "x"),
            "--",
            "touch",
            str(marker),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=WATCHDOG_S,
    )
    assert p.returncode == 2 and "cannot write to" in p.stderr and "choose another --out" in p.stderr
    assert not marker.exists()


def test_record_without_a_command_says_how(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "mspti_lens", "record", "--out", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=WATCHDOG_S,
    )
    assert p.returncode == 2 and "give the command after --" in p.stderr


# -- the slow-rank rules -----------------------------------------------------------------------
def test_dixon_names_an_abnormally_short_value_and_nothing_in_a_tight_group():
    values = [810.0, 812.0, 809.0, 300.0, 811.0, 813.0, 810.5, 812.5]
    i, test, q, crit = stragglers.vote(values)
    assert (i, test) == (3, "dixon") and q > crit
    i, test, q, crit = stragglers.vote([810.0, 812.0, 809.0, 808.0, 811.0])
    assert i is None and q <= crit
    assert stragglers.vote([1.0, 2.0])[0] is None  # two ranks: no test
    assert stragglers.vote([5.0] * 10)[0] is None  # all equal: no outlier


@pytest.mark.parametrize("n", [3, 7, 8, 10, 11, 13, 14, 50, 100])
def test_dixon_uses_the_ratio_for_its_sample_size(n):
    x = [float(i) ** 1.5 for i in range(n)]
    if n <= 7:
        want = (x[1] - x[0]) / (x[n - 1] - x[0])  # r10
    elif n <= 10:
        want = (x[1] - x[0]) / (x[n - 2] - x[0])  # r11
    elif n <= 13:
        want = (x[2] - x[0]) / (x[n - 2] - x[0])  # r21
    else:
        want = (x[2] - x[0]) / (x[n - 3] - x[0])  # r22
    assert stragglers.dixon_ratio(x) == pytest.approx(want)


def test_the_dixon_table_covers_3_to_100_ranks_and_matches_the_known_ends():
    t = stragglers.DIXON_CRITICAL
    assert sorted(t) == list(range(3, 101))
    assert t[3] == pytest.approx(0.994, abs=0.002)  # r10, n=3, 99.5 % (Dixon 1951; Rorabacher 1991)
    # Each ratio's critical value falls with n (within the Monte Carlo error of the table, ~0.001).
    for lo, hi in ((3, 7), (8, 10), (11, 13), (14, 100)):
        assert all(t[n] > t[n + 1] - 0.002 for n in range(lo, hi))
        assert t[lo] > t[hi] + 0.01


def test_above_100_ranks_the_rule_is_three_sigma():
    base = [1000.0 + (i % 7) for i in range(200)]
    i, test, z, crit = stragglers.vote(base[:57] + [900.0] + base[58:])
    assert (i, test, crit) == (57, "3sigma", 3.0) and z > 3
    assert stragglers.vote(base)[0] is None
    # One rank far above the mean (a rank that waited far longer): the minimum is voted, as
    # msprof-analyze does.
    high = base[:199] + [5000.0]
    assert stragglers.vote(high)[0] == min(range(200), key=lambda k: high[k])


def test_send_and_receive_and_uneven_counts_are_left_out():
    rows = []
    for r in range(4):
        rows.append(("h", r, "HcclSend", None, 5, 300.0 if r == 1 else 800.0))
        rows.append(("h", r, "HcclAllReduce", None, 5 if r else 6, 300.0 if r == 1 else 800.0))
        rows.append(("h", r, "HcclBroadcast", None, 5, 300.0 if r == 2 else 800.0 + r))
    df = pl.DataFrame(rows, schema=["host", "rank", "name", "instance", "num_calls", "mean_ns"], orient="row")
    s = stragglers.slow_ranks(df.with_columns(pl.col("instance").cast(pl.Int64)))
    assert s.select("name", "slow_rank").rows() == [("HcclBroadcast", 2)]


def test_hta_latest_start_counts_the_last_starters_per_rank():
    starts = pl.DataFrame(
        {
            "host": ["h"] * 9,
            "rank": [0, 1, 2] * 3,
            "instance": [0, 0, 0, 1, 1, 1, 2, 2, 2],
            "start_ns": [10, 50, 20, 11, 60, 12, 30, 20, 10],
        }
    )
    late = stragglers.latest_starters(starts)
    assert late.rows() == [("h", 1, 2), ("h", 0, 1)]
    assert stragglers.latest_starters(starts, top_k=2)["late_count"].sum() == 6
    with pytest.raises(ValueError, match="top_k"):
        stragglers.latest_starters(starts, top_k=0)


# -- opening runs ------------------------------------------------------------------------------
def test_windows_are_due_on_a_fixed_grid_not_an_interval_after_each_write_on_the_simulator(tmp_path):
    # n windows span n intervals, so "K windows" of a rule and windows per minute of a view mean
    # what they say. The writer used to wake every 0.25 s and count the next interval from when it
    # wrote: windows of 0.3 s were written 0.5 s apart.
    import statistics
    import threading
    import time

    from mspti_lens.session import Session

    interval, windows = 0.3, 9
    with Session(library="sim", enable=["runtime"]) as session:
        taken: list[float] = []
        enough = threading.Event()
        reset = session.reset

        def timed_reset():
            taken.append(time.monotonic())
            if len(taken) >= windows:
                enough.set()
            return reset()

        session.reset = timed_reset
        w = writer.WindowWriter(session, tmp_path, interval, host="h", rank=(0, "RANK")).start()
        try:
            assert enough.wait(WATCHDOG_S), f"{len(taken)} windows in {WATCHDOG_S} s"
        finally:
            w.finish()
    gaps = [b - a for a, b in zip(taken[: windows - 1], taken[1:windows], strict=True)]
    # The median: a window a loaded machine delays is followed by a shorter gap, the grid's.
    assert statistics.median(gaps) < interval + 0.1, gaps


def test_open_run_of_nothing_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="record one with"):
        mspti_lens.open_run(tmp_path / "nope")
    f = tmp_path / "f"
    f.write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        mspti_lens.open_run(f)


def test_an_empty_run_has_empty_frames(tmp_path):
    with pytest.warns(RunWarning, match="no windows in"):
        run = mspti_lens.open_run(tmp_path)
    assert run.summary().height == 0 and run.by_rank().height == 0 and run.ranks().height == 0
    with pytest.raises(EmptyRunError):
        run.timeline()


def _window(out: Path, host: str, rank: int, *, final: bool, values: list[int], world: int | None = None):
    """A window file as a recording process writes it (a Snapshot of exact values + the meta)."""
    snap = mspti_lens.Snapshot(mspti_lens._native.NativeSnapshot.from_values(values, "HcclAllReduce"), {})
    d = writer.rank_dir(out, host, rank)
    d.mkdir(parents=True, exist_ok=True)
    snap = snap.with_meta(host=host, rank=rank, pid=100 + rank, window=1, final=final, written=1000.0,
                          interval_s=1.0, world_size=world)  # fmt: skip
    snap.save(d / writer.window_name(1, 100 + rank))


def test_ranks_flags_stale_incomplete_and_missing_ranks(tmp_path):
    _window(tmp_path, "a", 0, final=True, values=[5, 6], world=4)
    _window(tmp_path, "a", 1, final=False, values=[7], world=4)
    _window(tmp_path, "b", 3, final=True, values=[8], world=4)
    run = Run(tmp_path, stale_after=10.0)
    # rank 1 still writes while the others have finished: a slow rank, running
    assert run.ranks(now=1005.0)["status"].to_list() == ["complete", "running", "missing", "complete"]
    r = run.ranks(now=1011.0)  # no window from it for longer than stale_after: the job ended without it
    assert r.select("rank", "host", "status").rows() == [
        (0, "a", "complete"),
        (1, "a", "incomplete"),
        (2, None, "missing"),
        (3, "b", "complete"),
    ]
    from mspti_lens.runs.view import run_html

    page = run_html(run)
    assert "INCOMPLETE" in page and "MISSING" in page and "4 min ago" not in page


def test_a_lone_unfinished_rank_is_running_then_stale(tmp_path):
    _window(tmp_path, "a", 0, final=False, values=[5])
    run = Run(tmp_path, stale_after=10.0)
    assert run.ranks(now=1005.0)["status"].to_list() == ["running"]
    assert run.ranks(now=1011.0)["status"].to_list() == ["stale"]


def test_a_file_url_opens_like_a_path(tmp_path):
    _window(tmp_path, "a", 0, final=True, values=[5, 6, 7])
    run = mspti_lens.open_run(f"file://{tmp_path}")
    assert run.summary()["num_calls"].to_list() == [3]
    assert run.summary()["max_ns"].to_list() == [7]


def test_follow_returns_when_every_rank_is_complete(tmp_path):
    _window(tmp_path, "a", 0, final=True, values=[5])
    seen = []
    mspti_lens.open_run(tmp_path).follow(every=0.01, show=seen.append, timeout=30)
    assert len(seen) == 1
    with pytest.raises(ValueError, match="every"):
        mspti_lens.open_run(tmp_path).follow(every=0)


def test_follow_stops_at_its_timeout(tmp_path):
    _window(tmp_path, "a", 0, final=False, values=[5])
    seen = []
    mspti_lens.open_run(tmp_path).follow(every=0.01, show=seen.append, timeout=0.05)
    assert len(seen) >= 1


def test_rank_heatmap_draws_a_rank_by_window_grid(tmp_path):
    from mspti_lens.plots import rank_heatmap

    for r in range(3):
        _window(tmp_path, "a", r, final=True, values=[100 * (r + 1)] * 2)
    fig = rank_heatmap(mspti_lens.open_run(tmp_path), "HcclAllReduce")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1", "rank 2"]
    assert ax.images[0].get_array().tolist() == [[0.1], [0.2], [0.3]]  # avg in µs
    with pytest.raises(ValueError, match="functions recorded: HcclAllReduce"):
        rank_heatmap(mspti_lens.open_run(tmp_path), "HcclBroadcast")
    with pytest.raises(ValueError, match="valid metrics"):
        rank_heatmap(mspti_lens.open_run(tmp_path), "HcclAllReduce", metric="p99")


@pytest.mark.parametrize(
    "args, says",
    [
        (["--ranks", "4", "--slow-rank", "9"], "slow rank 9 is not a rank of 0..3"),
        (["--ranks", "4", "--slow-link", "0-2"], "slow link 0-2 is not a link of the job"),
        (["--ranks", "3", "--slow-link", "0-1"], "exist when ranks is even"),
        (["--ranks", "0"], "ranks must be an int in 1..1024"),
        (["--ranks", "4", "--clock", "wall"], "invalid choice: 'wall'"),
        (["--ranks", "4", "--slow-link", "zero-one"], "a link is written A-B"),
    ],
)
def test_sim_job_refuses_bad_settings_naming_the_valid_ones(args, says):
    p = subprocess.run(
        [sys.executable, "-m", "mspti_lens.sim", "job", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=WATCHDOG_S,
    )
    assert p.returncode == 2 and says in p.stderr, p.stderr


def test_the_run_view_refreshes_while_shown_and_stops_when_closed(tmp_path):
    import time

    from mspti_lens.runs.run import open_view

    _window(tmp_path, "a", 0, final=False, values=[5], world=2)
    view = open_view(str(tmp_path), every=0.02)
    assert "MISSING" in view.value  # rank 1 of 2 has not reported yet
    _window(tmp_path, "a", 1, final=True, values=[6], world=2)
    deadline = time.monotonic() + 60
    while "MISSING" in view.value and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "MISSING" not in view.value and "INCOMPLETE" in view.value  # rank 0 never finished
    view.close()


def test_record_preloads_the_library_discovery_finds(tmp_path, monkeypatch):
    found = tmp_path / "lib64" / "libmspti.so"
    monkeypatch.setattr(record, "real_libmspti", lambda: str(found))
    assert record.child_env(_args(out=str(tmp_path)), env={})["LD_PRELOAD"] == str(found)
    monkeypatch.setattr(record, "real_libmspti", lambda: None)  # only the simulator: nothing to preload
    assert "LD_PRELOAD" not in record.child_env(_args(out=str(tmp_path)), env={})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["HcclAllReduce", "aclrtLaunchKernel", "aclrtMalloc"]),
            st.lists(st.integers(0, 2**44), min_size=1, max_size=40),  # zero bucket and overflow too
            min_size=1,
        ),
        min_size=1,
        max_size=6,
    )
)
def test_merging_a_run_equals_merging_its_snapshots_for_any_values(tmp_path_factory, ranks):
    from polars.testing import assert_frame_equal

    out = tmp_path_factory.mktemp("prop")
    snaps = []
    for r, keys in enumerate(ranks):
        snap = None
        for name, values in keys.items():
            one = mspti_lens._native.NativeSnapshot.from_values(values, name)
            snap = one if snap is None else snap.merge(one)
        s = mspti_lens.Snapshot(snap, {"host": "h", "rank": r, "pid": r, "window": 1, "final": True})
        d = writer.rank_dir(out, "h", r)
        d.mkdir(parents=True)
        s.save(d / writer.window_name(1, r))
        snaps.append(s)
    want = snaps[0]
    for s in snaps[1:]:
        want = want.merge(s)
    assert_frame_equal(mspti_lens.open_run(out).summary(), want.summary())


def test_the_mspti_run_magic_shows_a_run_and_names_the_valid_commands(tmp_path):
    pytest.importorskip("IPython")
    from IPython.core.error import UsageError
    from IPython.terminal.interactiveshell import TerminalInteractiveShell
    from IPython.testing.globalipapp import start_ipython
    from IPython.utils.capture import capture_output

    _window(tmp_path, "a", 0, final=True, values=[5, 6], world=2)
    shell = start_ipython() or TerminalInteractiveShell.instance()
    with capture_output():
        shell.run_line_magic("load_ext", "mspti_lens")
    try:
        panel = shell.run_line_magic("mspti", f"run {tmp_path}")
        shown = panel.last.ranks_html  # the run panel's rank status table
        assert "missing" in shown and "complete" in shown  # rank 1 of 2 never reported
        panel.close()
        with pytest.raises(UsageError, match="one PATH"):
            shell.run_line_magic("mspti", "run")
        with pytest.raises(UsageError, match="record one with"):
            shell.run_line_magic("mspti", f"run {tmp_path / 'nothing'}")
    finally:
        shell.run_line_magic("unload_ext", "mspti_lens")


def test_a_window_of_another_format_version_is_skipped_naming_the_loadable_one(tmp_path):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    _window(tmp_path, "a", 0, final=True, values=[5])
    d = writer.rank_dir(tmp_path, "a", 1)
    d.mkdir(parents=True)
    old = d / writer.window_name(1, 7)
    table = pa.table({"x": [1]}).replace_schema_metadata(
        {"mspti_lens": json.dumps({"format": "mspti-lens-snapshot", "version": 3})}
    )
    pq.write_table(table, old)
    with pytest.warns(RunWarning, match=r"version 3; this reads 2"):
        run = mspti_lens.open_run(tmp_path)
    assert run.summary()["num_calls"].to_list() == [1]


# -- record --prometheus PORT ------------------------------------------------------------
def test_a_recorded_process_serves_metrics_and_says_where_on_the_simulator(tmp_path):
    code = f"""
import glob, urllib.request, mspti_lens.sim as s
s.Simulator().call('aclrtMalloc', 10, 3)
[f] = glob.glob({str(tmp_path)!r} + '/host=*/rank=*/metrics-pid*.url')
url = open(f).read().strip()
print(url)
print(urllib.request.urlopen(url, timeout=30).read().decode())
"""
    p = python_with_hook(
        {hook.RECORD_VARIABLE: str(tmp_path), hook.LIBRARY_VARIABLE: "sim", hook.PROMETHEUS_VARIABLE: "0"},
        code,
    )
    assert p.returncode == 0, p.stderr
    url, body = p.stdout.split("\n", 1)
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
    assert "aclrtMalloc" in body
    assert mspti_lens.open_run(tmp_path).ranks()["calls"].to_list() == [3]  # still recorded


def test_a_port_that_cannot_be_served_is_one_line_and_the_recording_goes_on_on_the_simulator(tmp_path):
    code = "import mspti_lens.sim as s; s.Simulator().call('aclrtMalloc', 10, 2)"
    env = {hook.RECORD_VARIABLE: str(tmp_path), hook.LIBRARY_VARIABLE: "sim", hook.PROMETHEUS_VARIABLE: "x"}
    p = python_with_hook(env, code)
    assert p.returncode == 0 and "not serving /metrics" in p.stderr
    assert mspti_lens.open_run(tmp_path).ranks()["calls"].to_list() == [2]


def test_the_metrics_port_is_port_plus_the_local_rank_and_record_passes_it_on(tmp_path):
    assert hook.metrics_port(9464, {}) == 9464
    assert hook.metrics_port(9464, {"LOCAL_RANK": "3", "RANK": "11"}) == 9467
    assert hook.metrics_port(9464, {"OMPI_COMM_WORLD_LOCAL_RANK": "1"}) == 9465
    assert hook.metrics_port(0, {"LOCAL_RANK": "3"}) == 0  # a free port per process
    e = record.child_env(_args(out=str(tmp_path), prometheus=9464), env={})
    assert e[hook.PROMETHEUS_VARIABLE] == "9464"
    assert hook.PROMETHEUS_VARIABLE not in record.child_env(_args(out=str(tmp_path)), env={})
    with pytest.raises(ValueError, match="0..65535"):
        record.main(_args(out=str(tmp_path), prometheus=70000))


def test_a_window_with_device_records_and_no_finished_call_is_written_on_the_simulator(sim, tmp_path):
    # A rank blocked in its first collective has device records and no finished host call; the
    # window that holds them must be written (a CI run under load lost one rank's first allreduce).
    from mspti_lens import Session
    from mspti_lens.snapshot import Snapshot

    with Session(library="sim", enable=[], activity=["kernel"]) as s:
        sim.call("aclrtLaunchKernel", count=5)  # callbacks off: device records only
        assert sim.activity.drain()
        w = writer.WindowWriter(s, tmp_path, interval=3600)
        path = w.write_window(final=False)
        assert path is not None
        assert Snapshot.load(path).kernels()["num_calls"].sum() == 5
        assert w.write_window(final=True) is not None  # a rank with files writes its last window
    with Session(library="sim", enable=[], activity=["kernel"]) as s:
        assert writer.WindowWriter(s, tmp_path / "idle", interval=3600).write_window(final=True) is None


def test_record_falls_back_to_host_calls_on_a_library_without_the_activity_api(tmp_path, fake_lib_path):
    # COMMUNICATION records are on by default; the stand-in has no Activity API, so the first
    # Session fails and the fallback without activity must get the subscriber slot.
    prog = (
        "import ctypes, sys\n"
        "L = ctypes.CDLL(sys.argv[1])\n"
        "L.fake_api_name.restype = ctypes.c_char_p\n"
        "names = [L.fake_api_name(i).decode() for i in range(L.fake_api_count())]\n"
        "L.fake_loop.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64]\n"
        "L.fake_loop(names.index('aclrtMalloc'), None, 0, 11)\n"
    )
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "mspti_lens", "record", "--out", str(out), "--library", str(fake_lib_path),
           "--", sys.executable, "-c", prog, str(fake_lib_path)]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSPTI_LENS_")}
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=WATCHDOG_S)
    assert p.returncode == 0, p.stderr
    assert "recording without activity records (ValueError" in p.stderr
    assert "1 ranks on 1 host(s)" in p.stderr, p.stderr
    assert mspti_lens.open_run(out).ranks()["calls"].to_list() == [11]


# -- run folders whose names are numbers or disagree with their files -------------------------------
def test_hosts_named_by_digits_stay_strings_in_every_frame(tmp_path):
    _window(tmp_path, "7", 0, final=True, values=[5])
    _window(tmp_path, "007", 1, final=True, values=[6, 7])
    run = mspti_lens.open_run(tmp_path)
    r = run.ranks()
    assert r.schema["host"] == pl.String
    assert r.select("host", "rank", "calls").rows() == [("7", 0, 1), ("007", 1, 2)]
    by = run.by_rank()
    assert by.select("host", "rank", "num_calls").rows() == [("007", 1, 2), ("7", 0, 1)]
    assert run.timeline()["host"].to_list() == ["007", "7"]
    assert run.summary()["num_calls"].to_list() == [3]


def test_device_events_of_digit_hosts_keep_their_names(tmp_path):
    from test_runs_instances import collective_rows, frame

    _window(tmp_path, "07", 0, final=True, values=[5])
    _window(tmp_path, "8", 1, final=True, values=[6])
    rows = frame([r for r in collective_rows(instances=2, late=1) if r["rank"] < 2])
    for (rank,), mine in rows.partition_by("rank", as_dict=True).items():
        d = writer.rank_dir(tmp_path, "07" if rank == 0 else "8", rank)
        mine.drop("host", "rank").write_parquet(d / writer.events_name(1, 100 + rank))
    ev = mspti_lens.open_run(tmp_path).collective_events()
    assert ev.schema["host"] == pl.String
    assert sorted(set(ev.select("host", "rank").rows())) == [("07", 0), ("8", 1)]


def test_a_renamed_rank_folder_is_skipped_naming_the_file_and_what_it_holds(tmp_path):
    _window(tmp_path, "a", 0, final=True, values=[5])
    _window(tmp_path, "a", 1, final=True, values=[6])
    moved = tmp_path / "host=a" / "rank=77"
    (tmp_path / "host=a" / "rank=0").rename(moved)
    with pytest.warns(RunWarning) as caught:
        run = mspti_lens.open_run(tmp_path)
    (message,) = [str(w.message) for w in caught]
    assert str(moved / writer.window_name(1, 100)) in message
    assert "host=a/rank=77" in message and "host=a rank=0" in message
    assert run.ranks().select("rank", "calls").rows() == [(1, 1)]
    assert run.by_rank()["rank"].to_list() == [1]


def test_a_rank_no_run_can_hold_is_refused_when_written_and_skipped_when_read(tmp_path):
    with pytest.raises(ValueError, match=r"RANK=99999999999999999999999 is not a rank: ranks are 0\.\."):
        writer.rank_identity({"RANK": "99999999999999999999999"})
    p = python_with_hook(
        {
            hook.RECORD_VARIABLE: str(tmp_path),
            hook.LIBRARY_VARIABLE: "sim",
            "RANK": "99999999999999999999999",
        },
        "import mspti_lens.sim as s; s.Simulator().call('aclrtMalloc', 10, 3); print('ran')",
    )
    assert (p.returncode, p.stdout) == (0, "ran\n"), p.stderr
    assert "not recording this process (ValueError: RANK=99999999999999999999999 is not a rank" in p.stderr
    assert not list(tmp_path.iterdir())
    # A window of such a rank (written by hand) is skipped, named; the rest of the run opens.
    _window(tmp_path, "a", 0, final=True, values=[5])
    _window(tmp_path, "a", 10**23, final=True, values=[6])
    with pytest.warns(RunWarning, match=r"rank=100000000000000000000000/window-.*not a 64-bit integer"):
        run = mspti_lens.open_run(tmp_path)
    assert run.ranks().select("rank", "calls").rows() == [(0, 1)]


# -- clear errors instead of silence -----------------------------------------------------------------
def test_open_run_inside_or_above_a_run_says_where_its_root_is(tmp_path):
    out = tmp_path / "runs" / "job1"
    _window(out, "a", 0, final=True, values=[5])
    with pytest.raises(ValueError, match=rf"one rank's folder of a run.*open_run\('{out}'\)"):
        mspti_lens.open_run(out / "host=a" / "rank=0")
    with pytest.raises(ValueError, match=rf"one host's folder of a run.*open_run\('{out}'\)"):
        mspti_lens.open_run(out / "host=a")
    with pytest.raises(
        ValueError, match=rf"is not a run but holds 1 below it \({out}\).*open_run\('{out}'\)"
    ):
        mspti_lens.open_run(tmp_path / "runs")
    with pytest.raises(ValueError, match=rf"holds 1 below it \({out}\)"):
        mspti_lens.open_run(tmp_path)  # two levels above


def test_open_run_on_a_folder_without_windows_says_what_is_there(tmp_path):
    with pytest.warns(RunWarning, match=rf"no windows in {tmp_path} yet: it is empty\. A run root is"):
        mspti_lens.open_run(tmp_path)
    (tmp_path / "notes.txt").write_text("")
    with pytest.warns(RunWarning, match=r"it holds 1 entries, none of a run \(notes\.txt\)"):
        run = mspti_lens.open_run(tmp_path)
    assert run.ranks().height == 0  # still a Run: a run being recorded may have no window yet


def test_a_window_whose_column_types_differ_is_named_in_the_schema_error(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    _window(tmp_path, "a", 0, final=True, values=[5])
    _window(tmp_path, "a", 1, final=True, values=[6])
    _window(tmp_path, "a", 2, final=True, values=[7])
    odd = writer.rank_dir(tmp_path, "a", 1) / writer.window_name(1, 101)
    t = pq.read_table(odd)
    i = t.schema.get_field_index("count")
    pq.write_table(t.set_column(i, "count", t.column("count").cast(pa.int32())), odd)
    run = mspti_lens.open_run(tmp_path)
    for frame in (run.summary, run.by_rank, run.ranks, run.timeline):
        with pytest.raises(pl.exceptions.SchemaError, match=rf"{odd}: count is Int32 \(not UInt64\)"):
            frame()


def test_record_around_fork_started_workers_says_they_are_not_recorded_and_how_to_record_them(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(
        "import multiprocessing as mp, sys\n"
        "import mspti_lens.sim as s\n"
        "def work(i):\n"
        "    s.Simulator().call('aclrtMalloc', 1000, 5)\n"
        "    return i\n"
        "if __name__ == '__main__':\n"
        "    with mp.get_context(sys.argv[1]).Pool(2) as p:\n"
        "        print(sum(p.map(work, range(4))), flush=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSPTI_LENS_")}

    def run(method: str) -> str:
        out = tmp_path / method
        # Without activity records: the simulator's record threads are not forked into the
        # children (what a forked child inherits of them is the simulator's own matter).
        cmd = [sys.executable, "-m", "mspti_lens", "record", "--out", str(out), "--library", "sim",
               "--activity", "none", "--", sys.executable, str(prog), method]  # fmt: skip
        p = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=WATCHDOG_S)
        assert (p.returncode, p.stdout) == (0, "6\n"), p.stderr
        return p.stderr.splitlines()[-1]

    for method in ("fork", "forkserver"):  # a fork server's children are forks too
        said = run(method)
        assert said.startswith(
            f"mspti-lens: 0 ranks in {tmp_path / method}: 2 worker process(es) started with fork()"
        )
        assert "not recorded" in said and "'spawn' start method" in said
    said = run("spawn")
    ranks = mspti_lens.open_run(tmp_path / "spawn").ranks()
    # Each spawned worker that ran a task is a rank: one or both, as their start-up races.
    assert 1 <= ranks.height <= 2 and f"{ranks.height} ranks on 1 host(s)" in said, said
    assert "fork()" not in said
    assert int(ranks["calls"].sum()) == 20
