"""What a JupyterLab audit of the notebook views found in their tables, checked on what the
notebook displays (the objects' text and HTML): MSTX ranges under a cell's host table, nccl-tests'
table with its missing rank count said, the diff ordered by time, and wall times and durations
a person can read."""

from __future__ import annotations

import re

import polars as pl
import pytest

pytestmark = pytest.mark.filterwarnings("ignore::mspti_lens.errors.SimulatedBackendWarning")

EXPONENT = re.compile(r"\d[eE][+-]?\d")


def test_a_cell_with_marker_activity_shows_its_ranges_table():
    from mspti_lens import Session, mstx
    from mspti_lens.notebook.display import ConfiguredSnapshot
    from mspti_lens.sim import Simulator

    sim = Simulator()
    sim.reset()
    with Session(library="sim", enable="runtime", activity=["marker"]) as s:
        for _ in range(3):
            with mstx.range("train_step"):
                sim.call("aclrtMalloc", 10_000, 1)
        mstx.mark("checkpoint")
        snap = s.snapshot()
    assert len(snap.ranges()), "the window holds ranges"
    shown = ConfiguredSnapshot(snap, None, None)  # what `%%mspti -a marker` returns
    text, page = repr(shown), shown._repr_html_()
    assert "MSTX ranges" in text and "MSTX ranges" in page
    ranges = text.split("MSTX ranges", 1)[1]
    assert re.search(r"train_step\s+\S+\s+3\s+[\d.,]+ (µs|ms)", ranges), ranges
    assert "checkpoint" in ranges  # marks are counted, after the ranges
    assert ranges.index("train_step") < ranges.index("checkpoint")
    assert page.index("MSTX ranges") > page.index("mspti-lens-device")


@pytest.fixture
def shell():
    """A real IPython shell with the extension loaded (test_magics' fixture, HTML enabled)."""
    import IPython.core.page
    from IPython.terminal.interactiveshell import TerminalInteractiveShell
    from IPython.testing.globalipapp import start_ipython
    from IPython.utils.capture import capture_output

    ip = start_ipython() or TerminalInteractiveShell.instance()
    html = ip.display_formatter.formatters["text/html"]
    was, html.enabled = html.enabled, True
    page = IPython.core.page.page
    IPython.core.page.page = lambda *a, **k: pytest.fail("mspti-lens must not use the pager")
    with capture_output():
        ip.run_line_magic("load_ext", "mspti_lens")
    ip.run_line_magic("config", "MsptiMagics.library = 'sim'")
    try:
        yield ip
    finally:
        ip.run_line_magic("unload_ext", "mspti_lens")
        IPython.core.page.page, html.enabled = page, was


def test_the_diff_leads_with_what_changed_the_most_time_and_says_simulated(shell):
    """A few calls of a cheap API that tripled lead no more: the all-reduce whose time grew by
    milliseconds does, with its total before, after and the change; the table says SIMULATED."""
    from IPython.utils.capture import capture_output

    from mspti_lens import Session
    from mspti_lens.sim import Simulator

    sim = Simulator()
    sim.reset()
    before = sim.clock
    sim.set_clock("virtual")  # durations exactly as asked, whatever the load
    try:
        with Session(library="sim", enable=["runtime", "hccl"], clock="mspti") as s:
            sim.call("aclrtGetMemInfo", 1_000, 4)
            sim.call("HcclAllReduce", 100_000, 20)
            shell.user_ns["a"] = s.reset()
            sim.call("aclrtGetMemInfo", 3_200, 5)  # median +220 %, 12 µs more in all
            sim.call("HcclAllReduce", 250_000, 20)  # median +150 %, 3 ms more in all
            shell.user_ns["b"] = s.reset()
    finally:
        sim.set_clock(before)
    with capture_output():
        t = shell.run_line_magic("mspti", "diff a b")
    text, page = repr(t), t._repr_html_()
    rows = [line.split() for line in text.splitlines() if line.startswith(("runtime", "hccl"))]
    assert [r[1] for r in rows] == ["HcclAllReduce", "aclrtGetMemInfo"], text
    heads = t.cells()[0]
    assert heads[2:7] == ["calls A", "calls B", "total A", "total B", "total Δ"], heads
    assert re.search(r"HcclAllReduce\s+20\s+20\s+2\.00 ms\s+5\.00 ms\s+\+3\.00 ms\s", text), text
    assert text.startswith("SIMULATED DATA") and "SIMULATED DATA" in page.split("<table")[0]
    assert re.search(r"color:#b02a37'>\+3\.00 ms<", page)  # more time: red, like a slower median


def _html(shell, value) -> str:
    """What the notebook shows for ``value`` (its text/html form)."""
    data, _ = shell.display_formatter.format(value)
    return data.get("text/html", "")


def _cells(page: str) -> list[str]:
    return re.findall(r"<t[dh] style='[^']*'>([^<]*)</t[dh]>", page)


def test_wall_times_read_as_local_times_and_durations_with_units(shell):
    """skew's first_start_ns is an instant (not 1,796,407,232 s), periods' start and end are
    Unix seconds (not 1.7964e9), and a summary typed in a cell is a table with units."""
    import time

    from mspti_lens import Session
    from mspti_lens.notebook.tables import Table
    from mspti_lens.runs.skew import SKEW_COLUMNS
    from mspti_lens.sim import Simulator

    now = 1_796_407_232.25  # a Unix time, in s
    local = time.strftime("%H:%M:%S", time.localtime(now))
    skew = pl.DataFrame(
        [{"group": "hccl_world_group", "op": "HcclAllReduce", "seq": 3, "ranks": 4, "spread_ns": 1_500_000,
          "last_host": "h", "last_rank": 2, "lead_ns": 900_000, "wait_ns": 2_700_000,
          "first_start_ns": int(now * 1e9), "basis": "device", "note": None}],
        schema=SKEW_COLUMNS,
    )  # fmt: skip
    text = repr(Table(skew))
    assert f"{local}.250000" in text and "1,796,407,232" not in text, text
    assert re.search(r"1\.50 ms\s+h\s+2\s+900 µs\s+2\.70 ms", text), text
    periods = pl.DataFrame(
        {"host": ["h"], "rank": [0], "pid": [41], "period": [0], "start": [now], "end": [now + 3],
         "enable": ["runtime"]}
    )  # fmt: skip
    page = _html(shell, periods)  # the frame as typed in a cell
    assert local in _cells(page) and "1.7964e9" not in page and "e9" not in page, page
    sim = Simulator()
    sim.reset()
    with Session(library="sim", enable="runtime") as s:
        sim.call("aclrtMalloc", 20_000, 3)
        snap = s.snapshot()
    page = _html(shell, snap.summary())
    assert "mspti-lens-table" in page and not EXPONENT.search(page)
    assert any(re.fullmatch(r"[\d.]+ µs", c) for c in _cells(page)), page
    import datetime as dt

    when = dt.datetime.fromtimestamp(now, dt.timezone.utc)  # a timeline's or slowest()'s start
    zoned = pl.DataFrame({"start": [when]}, schema={"start": pl.Datetime("ns", "UTC")})
    assert _cells(_html(shell, zoned)) == ["start", f"{local}.250000"]
    long = pl.concat([snap.summary()] * 60)  # a long frame says how to see every row
    assert "50 of 60 rows; Table(frame, top=0)" in _html(shell, long)
    raw = pl.DataFrame({"a": [1.5e9]})  # a user's own frame, no unit by name: polars' own form
    assert _html(shell, raw) == raw._repr_html_()
    # unloading the extension gives polars frames their own form back
    from IPython.utils.capture import capture_output

    with capture_output():
        shell.run_line_magic("unload_ext", "mspti_lens")
        try:
            assert _html(shell, periods) == periods._repr_html_()
        finally:
            shell.run_line_magic("load_ext", "mspti_lens")


def _collective_session(sim, ops, group=b"hccl_world_group"):
    """A snapshot of COMMUNICATION records of ``ops`` (name, count, data type) on the virtual clock."""
    from _sim_activity import bind

    from mspti_lens import Session

    L = bind(sim.lib)
    sim.reset()
    before = sim.clock
    sim.set_clock("virtual")
    L.msimSetDeviceModel(2000, 0, 1000)
    try:
        with Session(library="sim", enable=["LAUNCH"], clock="mspti", activity=["communication"]) as s:
            L.msimSetThreadStream(0, 9)
            L.msimSetCommName(group)
            for op, count, dt in ops:
                assert L.msimCallCollective(sim.api(op), 30_000, count, dt, 8) == 0
            return s.snapshot()
    finally:
        L.msimSetCommName(None)
        L.msimSetThreadStream(0, 0)
        sim.set_clock(before)


WORLD_VARIABLES = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE",
                   "RANK_SIZE")  # fmt: skip


def test_collectives_without_a_rank_count_say_how_to_give_it_in_formatted_tables(shell, monkeypatch):
    from mspti_lens.notebook.display import ConfiguredSnapshot
    from mspti_lens.sim import Simulator

    for var in WORLD_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    sim = Simulator()
    snap = _collective_session(sim, [("HcclAllReduce", 1 << 18, 4), ("HcclBroadcast", 1 << 20, 3)] * 3)
    t = snap.collectives(by="size")
    assert t.filter(pl.col("op") == "all_reduce")["busbw_gbps"].is_null().all()  # unknown: null
    page = _html(shell, t)  # the frame as typed in a cell
    cells = _cells(page)
    assert "mspti-lens-table" in page and not EXPONENT.search(page), page
    assert "busbw" in cells and any(re.fullmatch(r"[\d.]+ GB/s", c) for c in cells)
    assert any(re.fullmatch(r"[\d.]+ (µs|ms)", c) for c in cells)  # med, not 1.850008e6
    note = re.findall(r"class='mspti-lens-table-note'[^>]*>([^<]*)<", page)
    assert len(note) == 1 and "all_reduce [hccl_world_group]" in note[0] and "ranks=N" in note[0], note
    assert "broadcast" not in note[0]  # its bus factor needs no rank count
    # the cell's own output says it under its collectives table too
    cell = repr(ConfiguredSnapshot(snap, None, None))
    assert "busbw" in cell and "ranks=N" in cell.split("collectives (device time")[1], cell
    # given, the note goes; from the launcher's variables, the world group's count is found
    assert "mspti-lens-table-note" not in _html(shell, snap.collectives(by="size", ranks=8))
    monkeypatch.setenv("RANK_SIZE", "8")
    known = snap.collectives(by="size")
    assert (known["ranks"] == 8).all() and known["busbw_gbps"].is_not_null().all()
    ar = known.filter(pl.col("op") == "all_reduce").row(0, named=True)
    assert ar["busbw_gbps"] == pytest.approx(ar["algbw_gbps"] * 2 * 7 / 8)
    assert snap.collectives().filter(pl.col("op") == "hcom_allReduce_")["busbw_gbps"].is_not_null().all()
