"""The %mspti / %%mspti magics, through a real IPython shell, against the simulator."""

from __future__ import annotations

import re
import time

import pytest

pytest.importorskip("IPython")

import polars as pl
from IPython.terminal.interactiveshell import TerminalInteractiveShell
from IPython.testing.globalipapp import start_ipython
from IPython.utils.capture import capture_output

from mspti_lens import Snapshot
from mspti_lens.sim import Simulator

LAUNCH = 1 << 10
ALL_RUNTIME = sum(1 << c for c in range(1, 37))
HCCL_ALL = sum(1 << c for c in range(1, 13))


@pytest.fixture(scope="module")
def sim():
    s = Simulator()
    s.reset()
    yield s
    s.reset()


@pytest.fixture
def ip(sim, monkeypatch):
    """A real IPython shell with the extension loaded; the extension (and its session) is
    unloaded afterwards. The pager must never be used."""
    import IPython.core.page

    def no_pager(*a, **k):
        raise AssertionError("mspti-lens must not use the pager")

    monkeypatch.setattr(IPython.core.page, "page", no_pager)
    shell = start_ipython() or TerminalInteractiveShell.instance()
    # A notebook front end asks for HTML too; the terminal shell does not by default.
    html = shell.display_formatter.formatters["text/html"]
    monkeypatch.setattr(html, "enabled", True)
    sim.reset()
    shell.user_ns["s"] = sim
    with capture_output() as cap:
        shell.run_line_magic("load_ext", "mspti_lens")
    shell.load_message = cap
    shell.run_line_magic("config", "MsptiMagics.library = 'sim'")
    yield shell
    shell.run_line_magic("unload_ext", "mspti_lens")
    for k in ("unit", "top", "display", "library", "refresh"):
        shell.config.MsptiMagics.pop(k, None) if "MsptiMagics" in shell.config else None
    assert not sim.subscribed, "unload_ext must unsubscribe"


def magics(shell):
    from mspti_lens.notebook.magics import MsptiMagics

    return next(m for m in shell.configurables if isinstance(m, MsptiMagics))


def run_ok(shell, code: str):
    r = shell.run_cell(code, store_history=False)
    assert r.success, r.error_in_exec or r.error_before_exec
    return r.result


def said(shell, line: str) -> str:
    """What ``%mspti LINE`` showed (start and stop show their line rather than return it)."""
    with capture_output() as cap:
        assert shell.run_line_magic("mspti", line) is None
    return "\n".join(o.data["text/plain"] for o in cap.outputs) + cap.stdout


def run_usage_error(shell, code: str) -> str:
    """Run a cell that must fail with a clear UsageError; return the message."""
    with capture_output() as cap:
        r = shell.run_cell(code, store_history=False)
    assert not r.success
    from IPython.core.error import UsageError

    assert isinstance(r.error_in_exec, UsageError), r.error_in_exec
    # The kernel keeps working.
    assert shell.run_cell("40 + 2", store_history=False).result == 42
    return str(r.error_in_exec) + "\n" + cap.stdout + cap.stderr


def test_load_states_the_backend_and_registers_config(ip):
    out = ip.load_message.outputs
    assert out, "load_ext should display a message"
    text = out[0].data["text/plain"]
    assert "SIMULATED" in text and "libmspti_sim.so" in text
    assert "text/html" in out[0].data
    assert "mspti" in ip.magics_manager.magics["line"] and "mspti" in ip.magics_manager.magics["cell"]
    # %config sees the settings (a traitlets Configurable).
    with capture_output() as cap:
        ip.run_line_magic("config", "MsptiMagics")
    for name in ("unit", "top", "refresh", "display", "library"):
        assert f"MsptiMagics.{name}" in cap.stdout
    # Loading twice does not register a second instance.
    ip.run_line_magic("load_ext", "mspti_lens")
    from mspti_lens.notebook.magics import MsptiMagics

    assert sum(isinstance(m, MsptiMagics) for m in ip.configurables) == 1


def test_help_lists_every_subcommand_in_one_line_and_the_settings(ip):
    from mspti_lens.notebook.magics import SETTINGS, SUBCOMMANDS

    doc = ip.find_line_magic("mspti").__doc__
    for opt in ("--domain", "--callback", "--display", "--kind", "--density", "--unit", "--top", "--out"):
        assert opt in doc
    assert set(SUBCOMMANDS) >= {
        "start",
        "stop",
        "reset",
        "status",
        "summary",
        "plot",
        "panel",
        "save",
        "diff",
    }
    for name, sub in SUBCOMMANDS.items():
        lines = [ln for ln in doc.splitlines() if ln.startswith(f"%mspti {name} ") or ln == f"%mspti {name}"]
        assert len(lines) == 1 and sub.help in lines[0], (name, lines)
    assert re.search(r"^%%mspti \[options\] +profile one cell", doc, re.MULTILINE)
    for name in SETTINGS:
        assert f"MsptiMagics.{name}" in doc


def test_cell_magic_profiles_only_named_callbacks_and_returns_the_snapshot(ip, sim):
    code = "mask_in_cell = s.enabled_mask(1), s.enabled_mask(2)\ns.run_workload('training', steps=4, ranks=8)"
    with capture_output() as cap:
        snap = ip.run_cell_magic("mspti", "-c aclrtLaunchKernel -o cell_snap", code)
    assert isinstance(snap, Snapshot)
    assert ip.user_ns["cell_snap"] is snap
    # Only the LAUNCH id was enabled in the library while the cell ran.
    assert ip.user_ns["mask_in_cell"] == (LAUNCH, 0)
    names = set(snap.summary()["name"])
    assert "aclrtLaunchKernel" in names
    assert all("LaunchKernel" in n for n in names), names
    # One output: the snapshot, its table with the figure under it (nothing displayed besides).
    assert not cap.outputs
    assert snap._repr_png_()[:4] == b"\x89PNG"
    page = snap._repr_html_()
    assert "SIMULATED" in page and page.index("<table") < page.index("<img")
    # Afterwards the session is stopped again and traces its defaults (runtime + hccl).
    session = magics(ip).session
    assert not session.running
    assert sim.enabled_mask(1) == 0  # stopped: nothing enabled in the library
    assert len(session.enabled) == 36 + 12


def test_cell_magic_display_choices(ip):
    with capture_output() as cap:
        r = ip.run_cell_magic("mspti", "-d runtime --display summary", "s.call('aclrtMalloc', 1000, 5)")
    assert isinstance(r, Snapshot) and r.summary()["num_calls"].sum() == 5
    assert not cap.outputs and r._repr_png_() is None and "<img" not in r._repr_html_()
    with capture_output() as cap:
        r = ip.run_cell_magic("mspti", "-d runtime --display plot -o p", "s.call('aclrtFree', 1000, 3)")
    assert r is None and ip.user_ns["p"].summary()["num_calls"].sum() == 3
    assert any("image/png" in o.data for o in cap.outputs)
    with capture_output() as cap:
        r = ip.run_cell_magic("mspti", "--display none -o q", "s.call('aclrtFree', 1000, 2)")
    assert r is None and not cap.outputs
    assert ip.user_ns["q"].summary()["num_calls"].sum() == 2


def test_cell_magic_via_run_cell_sets_underscore(ip):
    run_ok(ip, "%%mspti -d hccl --display summary\ns.call('HcclAllReduce', 2000, 7)")
    # the magic's return value became the cell's output
    assert isinstance(ip.user_ns["_"], Snapshot)
    assert ip.user_ns["_"].summary()["name"].to_list() == ["HcclAllReduce"]


def test_cell_error_still_returns_what_was_recorded(ip):
    with capture_output():
        snap = ip.run_cell_magic(
            "mspti",
            "-d runtime --display summary",
            "s.call('aclrtMalloc', 100, 4)\nraise RuntimeError('boom')",
        )
    assert snap.summary()["num_calls"].sum() == 4


def test_line_lifecycle(ip, sim, tmp_path):
    m = magics(ip)
    msg = said(ip, "start -d hccl")
    assert "SIMULATED" in msg and "runtime: 0 of 36 · hccl: 12 of 12" in msg
    assert sim.enabled_mask(2) != 0 and sim.enabled_mask(1) == 0
    sim.call("HcclAllReduce", 1000, 3)
    sim.call("aclrtMalloc", 1000, 3)  # not traced
    st = ip.run_line_magic("mspti", "status")
    assert st["state"] == "running" and st["calls"] == 3 and st["unmatched"] == 0
    assert "<table>" in st._repr_html_() and "mspti-lens status" in repr(st)

    ip.run_line_magic("mspti", "stop")
    assert sim.enabled_mask(2) == 0 and not m.session.running
    sim.call("HcclAllReduce", 1000, 5)  # stopped: not recorded
    ip.run_line_magic("mspti", "start")  # resume with the same selection
    assert sim.enabled_mask(2) != 0
    sim.call("HcclBroadcast", 1000, 2)

    first = ip.run_line_magic("mspti", "reset")
    assert isinstance(first, Snapshot)
    assert dict(zip(*first.summary().select("name", "num_calls"))) == {"HcclAllReduce": 3, "HcclBroadcast": 2}
    sim.call("HcclAllReduce", 1000, 4)
    now = ip.run_line_magic("mspti", "summary")
    assert now.summary()["num_calls"].sum() == 4
    merged = ip.run_line_magic("mspti", "summary --all")
    assert merged.summary()["num_calls"].sum() == 9  # nothing lost across reset

    with capture_output() as cap:
        assert ip.run_line_magic("mspti", "plot -k cdf") is None
    assert cap.outputs[0].data["image/png"][:4] == b"\x89PNG"
    assert "CDF" in cap.outputs[0].data["text/plain"]
    with capture_output() as cap:
        ip.run_line_magic("mspti", "plot -k hccl --density")
    assert "HCCL" in cap.outputs[0].data["text/plain"]

    path = tmp_path / "w.parquet"
    msg = ip.run_line_magic("mspti", f"save {path}")
    assert "saved 4 calls" in repr(msg)
    assert Snapshot.load(path).summary()["num_calls"].sum() == 4

    ip.user_ns["before"] = first
    d = ip.run_line_magic("mspti", f"diff before {path}")
    assert isinstance(d.frame, pl.DataFrame)
    row = d.frame.filter(pl.col("name") == "HcclAllReduce")
    assert row["num_calls_before"][0] == 3 and row["num_calls_after"][0] == 4
    with capture_output() as cap:
        ip.run_line_magic("mspti", f"diff before {path} --display both")
    assert any("A: before / B: w.parquet" in o.data.get("text/plain", "") for o in cap.outputs)

    msg = ip.run_line_magic("mspti", "close")
    assert "closed" in repr(msg) and not sim.subscribed
    assert "no session" in repr(ip.run_line_magic("mspti", "close"))


def test_unit_and_top_settings(ip):
    ip.run_line_magic("config", "MsptiMagics.top = 2")
    ip.run_line_magic("config", "MsptiMagics.unit = 'us'")
    ip.run_line_magic("mspti", "start -d runtime")
    for api in ("aclrtMalloc", "aclrtFree", "aclrtMemset"):
        ip.user_ns["s"].call(api, 5000, 2)
    snap = ip.run_line_magic("mspti", "summary")
    assert len(snap.table()) == 2
    # a fixed unit keeps the µs sign; a cut table says so and how to see every row
    assert "µs" in repr(snap) and " us" not in repr(snap)
    cut = "2 of 3 APIs; `%config MsptiMagics.top = 0` for all"
    assert cut in repr(snap) and cut in snap._repr_html_()
    assert "<table" in snap._repr_html_()
    snap = ip.run_line_magic("mspti", "summary -t 3 -u ns")
    assert len(snap.table()) == 3 and " ns" in repr(snap) and "of 3 APIs" not in repr(snap)
    ip.run_line_magic("config", "MsptiMagics.top = 0")
    snap = ip.run_line_magic("mspti", "summary")
    assert len(snap.table()) == 3 and "3 APIs" in repr(snap)
    # plain text has no dtype row and no quotes
    text = repr(snap)
    assert "str" not in text.split() and '"' not in text and "u64" not in text


def test_panel_command_returns_a_live_panel(ip, sim):
    from mspti_lens.notebook.widget import ControlPanel

    ip.run_line_magic("config", "MsptiMagics.refresh = 0.05")
    panel = ip.run_line_magic("mspti", "panel")
    assert isinstance(panel, ControlPanel)
    assert panel.interval == 0.05 and panel.auto_refreshing
    assert "application/vnd.jupyter.widget-view+json" in panel._repr_mimebundle_()
    # the panel opened recording, so the toggle's effect is visible in the library
    assert magics(ip).session.running and panel.panel.running
    assert sim.enabled_mask(2) == HCCL_ALL
    panel.toggles["hccl"].value = False
    assert sim.enabled_mask(2) == 0 and sim.enabled_mask(1) == ALL_RUNTIME
    ip.run_line_magic("unload_ext", "mspti_lens")
    assert not panel.auto_refreshing  # unload stops the refresh thread
    ip.run_line_magic("load_ext", "mspti_lens")
    ip.run_line_magic("config", "MsptiMagics.library = 'sim'")


def test_panel_run_shows_the_recorded_run_without_recording_the_notebook(ip, sim, tmp_path):
    from IPython.core.error import UsageError

    import mspti_lens
    from mspti_lens.runs import writer

    snap = mspti_lens.Snapshot(mspti_lens._native.NativeSnapshot.from_values([5], "HcclAllReduce"), {})
    d = writer.rank_dir(tmp_path, "a", 0)
    d.mkdir(parents=True)
    snap = snap.with_meta(host="a", rank=0, pid=100, window=1, final=True, written=1000.0,
                          interval_s=1.0, world_size=2)  # fmt: skip
    snap.save(d / writer.window_name(1, 100))
    with pytest.raises(UsageError, match="record one with"):
        ip.run_line_magic("mspti", f"panel --run {tmp_path / 'nothing'}")
    assert magics(ip).session is None  # a bad folder is said before recording starts
    panel = ip.run_line_magic("mspti", f"panel --run {tmp_path}")
    assert magics(ip).session is None and not sim.subscribed  # the run's files only
    page = panel.body.value
    assert ">missing<" in page and ">complete<" in page  # rank 1 of 2 never reported
    assert "HcclAllReduce" in page and panel.last.heatmap == "HcclAllReduce"
    assert "--run DIR" in ip.find_line_magic("mspti").__doc__
    panel.close()


@pytest.mark.parametrize(
    "line, expected",
    [
        ("%mspti bogus", "valid commands are start, stop"),
        ("%mspti sumary", "did you mean summary?"),
        ("%mspti", "needs a command"),
        ("%mspti start --bogus", "unknown option --bogus"),
        ("%mspti start -d gpu", "unknown domain 'gpu'; valid domains: runtime, hccl"),
        ("%mspti start -c aclrtNoSuchThing", "aclrtLaunchKernel"),
        (
            "%mspti start -c aclrtLaunchKernl",
            "unknown callback 'aclrtLaunchKernl'; did you mean aclrtLaunchKernel?",
        ),
        ("%%mspti -c HcclAlReduce\n1", "did you mean HcclAllReduce?"),
        ("%mspti plot -k pie", "unknown choice 'pie'; valid choices: distribution"),
        ("%mspti summary -u parsec", "unknown choice 'parsec'"),
        ("%mspti save", "takes one PATH"),
        ("%mspti diff onlyone", "two snapshots"),
        ("%mspti stop", "no mspti-lens session is open"),
        ("%mspti start --top -1", "0 (every row)"),
        ("%mspti save /no/such/dir/x.parquet", "does not exist"),
        ("%mspti start --library /no/such/libmspti.so", "libmspti"),
        ("%%mspti summary\n1", "takes options only"),
    ],
)
def test_bad_input_gives_a_clear_message(ip, line, expected):
    if "top -1" in line:
        line = "%mspti summary --top -1"
        ip.run_line_magic("mspti", "start")
    if "save /no" in line:
        ip.run_line_magic("mspti", "start")
    msg = run_usage_error(ip, line)
    assert expected in msg, msg
    if "--library" not in line:  # (that one explains the discovery order it tried)
        assert len(msg.splitlines()[0]) < 200, msg  # short: one line, no list of 48 names
    # After the error the magic still works.
    assert ip.run_line_magic("mspti", "status")["backend"].startswith("SIMULATED")


def test_diff_rejects_non_snapshots(ip):
    ip.user_ns["x"] = 3
    assert "not a mspti_lens Snapshot" in run_usage_error(ip, "%mspti diff x x")
    assert "neither a Snapshot variable nor a snapshot file" in run_usage_error(ip, "%mspti diff nope nope")


def test_bad_config_value_is_refused(ip, caplog):
    ip.run_cell("%config MsptiMagics.unit = 'parsec'", store_history=False)
    # traitlets refuses it, naming the valid choices (logged: the kernel shows it on stderr)
    assert "expected any of ['auto', 'ns', 'us', 'ms', 's']" in caplog.text
    assert magics(ip).unit == "auto"
    assert ip.run_cell("1 + 1", store_history=False).result == 2


def test_unload_closes_and_unregisters(ip, sim):
    ip.run_line_magic("mspti", "start")
    assert sim.subscribed
    ip.run_line_magic("unload_ext", "mspti_lens")
    assert not sim.subscribed
    assert "mspti" not in ip.magics_manager.magics["line"]
    ip.run_line_magic("load_ext", "mspti_lens")  # the fixture unloads again
    ip.run_line_magic("config", "MsptiMagics.library = 'sim'")


def test_a_users_own_session_is_explained(ip):
    from mspti_lens import Session

    with Session(library="sim"):
        msg = run_usage_error(ip, "%mspti start")
    first = msg.splitlines()[0]
    assert "already active" in first and "close it" in first
    # one sentence per fact: the "only one session" fact is not said twice
    assert first.lower().count("session") <= 2 and "Only one" not in first, msg


def test_load_on_a_real_library_without_preload_gives_the_fix(fake_lib_path, monkeypatch):
    """A real (non-simulator) library that LD_PRELOAD does not name: the load message warns and
    gives the one command that fixes it."""
    from types import SimpleNamespace

    from mspti_lens.notebook.magics import load_message

    monkeypatch.delenv("LD_PRELOAD", raising=False)
    msg = load_message(SimpleNamespace(library=str(fake_lib_path)))
    assert msg.level == "warning"
    text = repr(msg)
    assert str(fake_lib_path) in text and "SIMULATED" not in text
    assert f"LD_PRELOAD={fake_lib_path}" in text and "python -m mspti_lens install-kernel" in text
    assert "background:#fff3cd" in msg._repr_html_()


def test_cell_magic_keeps_the_running_window(ip, sim):
    """%%mspti on a running session: the cell gets its own window and the calls made before it
    stay available (`%mspti summary --all`); the session keeps running afterwards."""
    ip.run_line_magic("mspti", "start -d runtime")
    sim.call("aclrtMalloc", 1000, 6)
    with capture_output():
        cell = ip.run_cell_magic("mspti", "--display summary", "s.call('aclrtFree', 1000, 2)")
    assert dict(zip(*cell.summary().select("name", "num_calls"))) == {"aclrtFree": 2}
    assert magics(ip).session.running
    sim.call("aclrtMemset", 1000, 1)
    everything = ip.run_line_magic("mspti", "summary --all")
    assert dict(zip(*everything.summary().select("name", "num_calls"))) == {
        "aclrtMalloc": 6,
        "aclrtFree": 2,
        "aclrtMemset": 1,
    }


# -- every step does what the last output promised ----------------------------------------
def test_line_commands_after_a_cell_act_on_the_cell_snapshot(ip, tmp_path):
    with capture_output():
        cell = ip.run_cell_magic("mspti", "-d runtime --display summary", "s.call('aclrtMalloc', 1000, 7)")
    assert cell.total_calls == 7
    summary = ip.run_line_magic("mspti", "summary")
    assert summary.total_calls == 7 and "the last %%mspti cell" in repr(summary)
    msg = ip.run_line_magic("mspti", f"save {tmp_path / 'cell.parquet'}")
    assert "saved 7 calls" in repr(msg) and "the last %%mspti cell" in repr(msg)
    assert Snapshot.load(tmp_path / "cell.parquet").total_calls == 7
    with capture_output() as cap:
        assert ip.run_line_magic("mspti", "plot") is None
    assert (
        "7 calls" in cap.outputs[0].data["text/plain"] or cap.outputs[0].data["image/png"][:4] == b"\x89PNG"
    )
    # once recording starts again, line commands act on the new window, and say so
    ip.run_line_magic("mspti", "start -d runtime")
    ip.user_ns["s"].call("aclrtFree", 1000, 2)
    now = ip.run_line_magic("mspti", "summary")
    assert now.total_calls == 2 and "the current window (recording)" in repr(now)


def test_diff_renders_a_table_and_names_an_empty_side(ip, tmp_path):
    with capture_output():
        ip.run_cell_magic("mspti", "-d runtime --display none -o a", "s.call('aclrtMalloc', 1000, 4)")
        ip.run_cell_magic("mspti", "-d runtime --display none -o b", "s.call('aclrtMalloc', 3000, 4)")
        ip.run_cell_magic("mspti", "-d hccl --display none -o empty", "s.call('aclrtMalloc', 1000, 1)")
    d = ip.run_line_magic("mspti", "diff a b")
    text, page = repr(d), d._repr_html_()
    assert "<table" in page and "<thead>" in page
    assert re.search(r"\+\d[\d,]*\.\d %", text), text  # signed percentages
    assert not re.search(r"\de[+-]\d", text + page)  # no scientific notation
    assert "µs" in text and "str" not in text.split() and '"' not in text
    with capture_output() as cap:
        d = ip.run_line_magic("mspti", "diff empty b")
    warnings = [o.data["text/plain"] for o in cap.outputs]
    assert warnings == ["empty has no calls, so its side of the diff is empty"]
    assert d.frame["num_calls_before"].null_count() == len(d.frame)


def test_save_writes_the_format_its_extension_names(ip, tmp_path):
    import polars as pl

    with capture_output():
        ip.run_cell_magic("mspti", "-d runtime --display none", "s.call('aclrtMalloc', 1000, 3)")
    msg = ip.run_line_magic("mspti", f"save {tmp_path / 'w.csv'}")
    assert "saved 3 calls" in repr(msg)
    csv = pl.read_csv(tmp_path / "w.csv")
    assert csv["name"].to_list() == ["aclrtMalloc"] and csv["num_calls"].to_list() == [3]
    (tmp_path / "adir").mkdir()
    assert "is a folder" in run_usage_error(ip, f"%mspti save {tmp_path / 'adir'}")
    msg = run_usage_error(ip, f"%mspti save {tmp_path / 'w.xlsx'}")
    assert msg.splitlines()[0].startswith("%mspti save writes .parquet (the snapshot")
    assert "or .csv (the summary table, in ns), not '.xlsx'" in msg.splitlines()[0]
    assert not (tmp_path / "w.xlsx").exists()


def test_cell_without_d_traces_runtime_and_hccl_whatever_the_panel_picked(ip, sim):
    ip.run_line_magic("mspti", "start -c LAUNCH")
    assert sim.enabled_mask(1) == LAUNCH
    code = "masks = s.enabled_mask(1), s.enabled_mask(2)\ns.call('aclrtMalloc', 1000, 2)"
    with capture_output():
        snap = ip.run_cell_magic("mspti", "--display summary", code)
    assert ip.user_ns["masks"] == (ALL_RUNTIME, HCCL_ALL)
    assert snap.total_calls == 2
    # afterwards the session traces what was picked before the cell
    assert magics(ip).session.enabled == ["MSPTI_CBID_RUNTIME_LAUNCH"]


def test_a_cell_has_one_output(ip):
    with capture_output() as cap:
        r = ip.run_cell("%%mspti -d runtime\ns.call('aclrtMalloc', 1000, 2)\n'the cell value 4242'")
    assert r.success
    # the cell's own last value is not shown: the snapshot (table + figure) is the one output
    assert "4242" not in cap.stdout
    shown = ip.user_ns["_"]
    assert isinstance(shown, Snapshot) and shown._repr_png_()[:4] == b"\x89PNG"
    assert not cap.outputs  # nothing displayed besides the result


def test_status_is_short(ip):
    ip.run_line_magic("mspti", "start -d runtime")
    ip.user_ns["s"].fire("aclrtMalloc", 1)  # one EXIT without its ENTER
    st = ip.run_line_magic("mspti", "status")
    text = repr(st)
    assert "runtime: 36 of 36 · hccl: 0 of 12" in text
    assert "unmatched 1" in text and len(text.splitlines()) <= 7, text
    assert len(st["enabled"]) == 36 and st["unmatched"] == 1  # the dict keeps every field
    assert "MSPTI_CBID" not in text and "MSPTI_CBID" not in st._repr_html_()


def test_progress_in_jupyter_is_a_widget_counting_steps(ip, sim, monkeypatch):
    pytest.importorskip("ipywidgets")
    import mspti_lens.notebook.display as nd

    monkeypatch.setattr(nd, "in_jupyter", lambda: True)
    with capture_output() as cap:
        sim.run_workload("training", steps=12, ranks=8, threads=2, progress=True)
    assert cap.stderr == ""  # never an error-pink stderr box
    first, last = cap.outputs[0].data, cap.outputs[-1].data
    assert "application/vnd.jupyter.widget-view+json" in first
    # when it ends the bar becomes one line of static text counting steps (12, not 24 ticks)
    assert re.match(r"training workload: 12/12 steps · [\d.]+ s · [\d,.]+ steps/s$", last["text/plain"]), last


def test_progress_in_a_terminal_is_a_bar_counting_steps(sim, capsys):
    sim.run_workload("training", steps=12, ranks=8, threads=2, progress=True)
    err = capsys.readouterr().err
    assert err.endswith("\n") and "12/12 steps 100%" in err.splitlines()[-1]
    assert "24" not in err.replace("\r", "\n").splitlines()[-1].split("steps")[0]


def test_panel_after_a_cell_opens_recording_and_close_leaves_a_static_view(ip, sim):
    with capture_output():
        ip.run_cell_magic("mspti", "--display none", "s.call('aclrtMalloc', 1000, 3)")
    assert not magics(ip).session.running  # the cell stopped what it started
    ip.run_line_magic("config", "MsptiMagics.refresh = 0.05")
    with capture_output() as cap:
        ip.run_cell("%mspti panel", store_history=False)
    live = [o for o in cap.outputs if "application/vnd.jupyter.widget-view+json" in o.data]
    assert len(live) == 1  # shown once, through its display id
    panel = magics(ip).panels[-1]
    assert panel.panel.running and "running" in panel.status.value
    sim.call("aclrtFree", 1000, 4)
    panel.refresh()
    assert "aclrtFree" in panel.table.value
    with capture_output() as cap:
        msg = ip.run_line_magic("mspti", "close")
    assert "closed" in repr(msg) and not panel.auto_refreshing
    final = [o.data["text/html"] for o in cap.outputs if "mspti-lens-final" in o.data.get("text/html", "")]
    assert len(final) == 1, [o.data for o in cap.outputs]
    assert "aclrtFree" in final[0] and "<img" in final[0] and "session closed" in final[0]
    # the live widget shows the same final view (not a blank output)
    assert "mspti-lens-final" in panel.widget.children[0].value


def test_progress_is_on_by_default_in_jupyter_for_work_longer_than_the_threshold(ip, sim, monkeypatch):
    pytest.importorskip("ipywidgets")
    import mspti_lens.notebook.display as nd
    import mspti_lens.sim.driver as drv

    monkeypatch.setattr(nd, "in_jupyter", lambda: True)
    monkeypatch.setattr(drv, "AUTO_PROGRESS_S", 0.0)  # every job counts as long: a bar at once
    with capture_output() as cap:
        sim.run_workload("training", steps=30, ranks=8, threads=1)
    assert "application/vnd.jupyter.widget-view+json" in cap.outputs[0].data
    assert re.match(
        r"training workload: 30/30 steps · [\d.]+ s · [\d,.]+ steps/s$", cap.outputs[-1].data["text/plain"]
    )
    monkeypatch.setattr(drv, "AUTO_PROGRESS_S", 10.0**9)  # no job is that long: no bar
    with capture_output() as cap:
        sim.run_workload("training", steps=3, ranks=8, threads=1)
    assert not cap.outputs
    with capture_output() as cap:  # nor in a %%mspti cell when told progress=False
        ip.run_cell_magic(
            "mspti", "--display none", "s.run_workload('training', steps=3, ranks=8, progress=False)"
        )
    assert not cap.outputs


def test_the_progress_label_has_rate_and_time_left_while_it_runs():
    pytest.importorskip("ipywidgets")
    from mspti_lens.notebook.display import WidgetBar

    bar = WidgetBar("training workload", 500, "steps", started=0.0)  # started long ago: a known rate
    bar.update(100)
    label = bar.label.value
    assert re.search(r"100/500 steps · [\d.]+ s · [\d.,]+ steps/s · \d+:\d\d(:\d\d)? left", label), label
    bar.close(100)


def test_small_texts_count_right_and_name_the_option_that_cut_the_table(ip, sim):
    ip.run_line_magic("mspti", "start -d runtime")
    sim.call("aclrtMalloc", 5000, 2)
    one = ip.run_line_magic("mspti", "summary")
    assert "in 1 API ·" in repr(one) and "1 APIs" not in repr(one) and "1 APIs" not in one._repr_html_()
    for api in ("aclrtFree", "aclrtMemset", "aclrtMemcpy", "aclrtSynchronizeStream", "aclrtSetDevice"):
        sim.call(api, 5000, 1)
    cut = ip.run_line_magic("mspti", "summary -t 5")
    assert "5 of 6 APIs; `-t 0` for all" in repr(cut) and "%config" not in repr(cut)
    ip.run_line_magic("mspti", "reset")
    ip.run_line_magic("mspti", "reset")
    st = repr(ip.run_line_magic("mspti", "status"))
    assert "2 earlier windows kept (closed by reset or %%mspti; `%mspti summary --all` merges them)" in st, st


def test_help_texts_speak_of_the_product_not_of_tracker_numbers(ip):
    from mspti_lens.notebook.magics import MsptiMagics

    text = MsptiMagics.mspti.__doc__
    assert not re.search(r"\bissue\b", text, re.I), text


def test_a_session_with_an_interval_gives_the_magics_a_timeline(ip, sim):
    from IPython.core.error import UsageError

    with capture_output() as cap:
        ip.run_line_magic("mspti", "start --interval 0.05 -d runtime")
    assert magics(ip).session.interval == 0.05
    job = sim.start_workload("training", steps=10**6, ranks=8)
    try:
        # evidence, not a sleep: poll until the timeline holds two intervals (bounded)
        end = time.monotonic() + 120
        while magics(ip).session.snapshot().timeline()["start"].n_unique() < 2:
            assert time.monotonic() < end, "no second timeline interval in 120 s"
            time.sleep(0.01)
    finally:
        job.cancel()
        job.join(progress=False)
    with capture_output() as cap:
        ip.run_line_magic("mspti", "plot -k timeline")
    assert any("image/png" in o.data for o in cap.outputs)
    with pytest.raises(UsageError, match="a timeline every 0.05 s; run `%mspti close` first"):
        ip.run_line_magic("mspti", "start --interval 1")


def test_a_cell_that_asks_for_activity_shows_device_time_under_the_host_table(ip):
    with capture_output():
        snap = ip.run_cell_magic(
            "mspti", "-a kernel -a marker --display summary", "s.run_workload('training', steps=1, seed=1)"
        )
    text, page = repr(snap), snap._repr_html_()
    host, device = text.split("launch split per launch function · by total device time")
    assert "aclrtLaunchKernel" in host and "HcclAllReduce" in host
    for column in ("host_enqueue_med", "queue_delay_med", "device_med", "device_total"):
        assert column in device.splitlines()[1], device
    assert "kernels (device time) · by total time" in device and "MatMulV2" in device
    assert re.search(r"MatMulV2\s+KERNEL_AICORE\s+\d+\s+[\d.]+ %\s+[\d.]+ (µs|ms)", device), device
    assert "_.kernels()" in device and "-k launch_split" in device
    assert page.index("mspti-lens-device") > page.index("aclrtLaunchKernel")
    # the device figures are kinds of %mspti plot
    for kind in ("launch_split", "kernels", "collectives"):
        with capture_output() as cap:
            ip.run_line_magic("mspti", f"plot -k {kind}")
        assert cap.outputs and "image/png" in cap.outputs[0].data, kind
    # a cell without -a shows no device section
    with capture_output():
        plain = ip.run_cell_magic("mspti", "--display summary", "s.run_workload('training', steps=1, seed=1)")
    assert "Device time" not in plain._repr_html_() and "launch split" not in repr(plain)


def test_a_cell_joins_every_launch_when_asked_and_says_sampled_otherwise(ip):
    from IPython.core.error import UsageError

    body = "s.run_workload('training', steps=1, seed=1)"
    with capture_output():
        exact = ip.run_cell_magic("mspti", "-a kernel --join-sample 1 --display summary", body)
    assert magics(ip).session.join_sample == 1.0
    assert "sampled" not in magics(ip).session.join, magics(ip).session.join
    split = exact.launches()
    assert split.height and split["sampled_fraction"].to_list() == [1.0] * split.height, split
    open_one = r"over 1 of its time; run `%mspti close` first .* --join-sample 0.5"
    with pytest.raises(UsageError, match=open_one):
        ip.run_cell_magic("mspti", "-a kernel --join-sample 0.5", body)
    with capture_output():
        ip.run_line_magic("mspti", "close")
        ip.run_line_magic("mspti", "start --join-sample 0.5 -a kernel")
    assert magics(ip).session.join_sample == 0.5 and "sampled" in magics(ip).session.join
    said = run_usage_error(ip, "%mspti close\n%mspti start --join-sample 2")
    assert said.startswith("join_sample is the fraction"), said
    said = run_usage_error(ip, "%mspti start --join-sample half")
    assert said.startswith("argument --join-sample: invalid float"), said


def test_a_second_session_while_the_magics_one_is_open_names_mspti_close(ip):
    from mspti_lens import Session, SessionError

    with capture_output():
        ip.run_line_magic("mspti", "start")
    with pytest.raises(SessionError) as e:
        Session(library="sim")
    text = str(e.value)
    assert "the %mspti magics' session is already active" in text and "`%mspti close`" in text, text
    assert "session.close()" not in text and "\n" not in text and len(text) < 160, text
    with capture_output():
        ip.run_line_magic("mspti", "close")
    Session(library="sim").close()  # the slot is free again


@pytest.mark.parametrize(
    "line, want",
    [
        ("%mspti start -d runtim", "unknown domain 'runtim'; did you mean runtime?"),
        ("%%mspti -a kernal\npass", "unknown activity kind 'kernal'; did you mean kernel?"),
        ("%mspti start --domian runtime", "unknown option --domian; did you mean --domain?"),
        ("%mspti plot -k cfd", "-k/--kind: unknown choice 'cfd'; did you mean cdf?"),
    ],
)
def test_every_name_the_user_types_gets_did_you_mean_in_one_short_line(ip, line, want):
    text = run_usage_error(ip, line).splitlines()[0]
    assert text.startswith(want) and len(text) < 200, text


def test_a_session_with_a_mistyped_target_suggests_the_near_name():
    from mspti_lens import catalog

    with pytest.raises(ValueError) as e:
        catalog.resolve("runtme")
    assert str(e.value).startswith("unknown callback or domain 'runtme'; did you mean 'runtime'? (valid: ")
    assert len(str(e.value)) < 160
    with pytest.raises(ValueError, match="did you mean 'aclrtLaunchKernel'"):
        catalog.resolve("aclrtLaunchKernal")


def test_start_on_a_running_session_says_so_and_changes_the_set_only_when_asked(ip, sim):
    from mspti_lens.notebook.panel import Panel

    with capture_output():
        ip.run_line_magic("mspti", "start")
    Panel(magics(ip).session).set_domain("hccl", False)  # switched off in the panel
    again = said(ip, "start")
    assert "already recording (nothing changed" in again and "hccl: 0 of 12" in again, again
    assert sim.enabled_mask(2) == 0 and sim.enabled_mask(1) == ALL_RUNTIME
    asked = said(ip, "start -d hccl")
    assert "traced as asked" in asked and sim.enabled_mask(2) == HCCL_ALL and sim.enabled_mask(1) == 0


def test_the_load_banner_names_a_simulated_cann_trees_library_as_such_and_says_preloaded(
    tmp_path, monkeypatch
):
    from types import SimpleNamespace

    from mspti_lens import backend
    from mspti_lens.notebook.magics import load_message

    tree_lib = tmp_path / "lib64" / "libmspti.so"
    # the backend as a CANN tree's simulated library reports it (loading a copy would map a
    # second libmspti into the test process)
    info = SimpleNamespace(simulated=True, fidelity="cann26", path=tree_lib, preloaded=True)
    monkeypatch.setattr(backend, "backend_info", lambda lib=None: info)
    text = load_message(SimpleNamespace(library=str(tree_lib))).text
    assert f"a simulated libmspti (a simulated CANN tree's) at {tree_lib} (preloaded" in text, text
    assert "bundled" not in text, text
    monkeypatch.undo()
    bundled = load_message(SimpleNamespace(library="sim")).text
    assert "the bundled simulator at " in bundled and "preloaded" not in bundled, bundled


def test_start_and_stop_say_their_line_when_more_code_follows_in_the_cell(ip, sim):
    # the quickstart's pattern: start, then the job, in one cell
    with capture_output() as cap:
        run_ok(ip, "%mspti start -d runtime\nafter_start = 1")
    shown = "\n".join(o.data["text/plain"] for o in cap.outputs)
    assert "mspti-lens recording on" in shown and "runtime: 36 of 36" in shown and "SIMULATED" in shown
    assert any("text/html" in o.data for o in cap.outputs)  # a notebook shows it styled
    with capture_output() as cap:
        run_ok(ip, "%mspti stop\nafter_stop = 1")
    assert "mspti-lens stopped" in "\n".join(o.data["text/plain"] for o in cap.outputs)
