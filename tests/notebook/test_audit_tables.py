"""What a JupyterLab audit of the notebook views found in their tables, checked on what the
notebook displays (the objects' text and HTML): MSTX ranges under a cell's host table, nccl-tests'
table with its missing rank count said, the diff ordered by time, and wall times and durations
a person can read."""

from __future__ import annotations

import re

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
