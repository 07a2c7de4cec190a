"""The one table formatter (mspti_lens.notebook.tables): device and run frames, Snapshot.table()
and the diff table render like the magic tables: units per column kind, thousands separators, no
dtype row, no quotes, no exponents, numbers right, a caption when rows are cut."""

from __future__ import annotations

import re

import polars as pl
import pytest

from mspti_lens.notebook.display import DiffTable
from mspti_lens.notebook.tables import Table, column_kind, format_change

pytestmark = pytest.mark.filterwarnings("ignore::mspti_lens.errors.SimulatedBackendWarning")

EXPONENT = re.compile(r"\d[eE][+-]?\d")


@pytest.fixture(scope="module")
def device_snap():
    from mspti_lens import Session
    from mspti_lens.sim import Simulator

    s = Simulator()
    s.reset()
    with Session(library="sim", activity=["kernel", "marker", "communication", "memcpy"]) as session:
        s.run_workload("training", steps=2, ranks=8, seed=5)
        return session.snapshot()


def html_cells(page: str) -> list[tuple[str, str]]:
    """(alignment, text) of every cell of a rendered table."""
    return re.findall(r"<t[dh] style='text-align:(left|right)[^']*'>([^<]*)</t[dh]>", page)


@pytest.mark.parametrize("frame", ["kernels", "launches", "collectives", "memcpy", "device_events"])
def test_device_frames_read_like_the_magic_tables(device_snap, frame):
    df = getattr(device_snap, frame)()
    assert len(df), frame
    t = Table(df)
    text, page = repr(t), t._repr_html_()
    for out in (text, page):
        assert not EXPONENT.search(out), (frame, EXPONENT.search(out))
        assert '"' not in out and "&quot;" not in out
        assert not re.search(r"\b(u64|u32|i64|f64|str)\b", out)  # no dtype row
    cells = html_cells(page)
    # every duration carries its unit and sits right-aligned
    durations = [(a, v) for a, v in cells if re.fullmatch(r"[\d,.]+ (ns|µs|ms|s)", v)]
    assert durations and all(a == "right" for a, _ in durations)
    assert " us" not in text


def test_raw_nanoseconds_and_timestamps_are_never_shown(device_snap):
    ev = device_snap.device_events()
    text = repr(Table(ev, top=3))
    raw = str(ev["start_ns"][0])
    assert raw not in text and re.search(r"\d\d:\d\d:\d\d\.\d{6}", text)  # a wall-clock time of day
    assert f"3 of {len(ev):,} rows" in text  # the caption says the table is cut
    last = Table(pl.DataFrame({"rank": [0], "last_update": [1.7962e9], "calls": [4060]}))
    assert "1.7962e9" not in repr(last) and "4,060" in repr(last) and re.search(r"\d\d:\d\d:\d\d", repr(last))


def test_ids_have_no_thousands_separators_and_bytes_and_bandwidth_have_units(device_snap):
    assert column_kind("thread_id", pl.UInt64) == "id" and column_kind("num_calls", pl.UInt64) == "count"
    t = repr(Table(pl.DataFrame({"thread_id": [140234567], "bytes": [50331648], "bw_med_gbps": [14.169]})))
    assert "140234567" in t and "48.0 MiB" in t and "14.2 GB/s" in t


def test_snapshot_table_keeps_numbers_and_renders_units(device_snap):
    t = device_snap.table(top=3)
    assert t.frame["avg_ns"].dtype == pl.Float64  # the frame keeps its numbers
    assert len(t) == 3 and f"3 of {len(device_snap)} APIs" in repr(t)
    page = t._repr_html_()
    assert "&quot;" not in page and not EXPONENT.search(page) and " ms<" in page or " µs<" in page


def test_changes_are_signed_and_never_minus_zero():
    assert format_change(-0.04) == "0.0 %" and format_change(12.46) == "+12.5 %"
    assert format_change(-3.0) == "−3.0 %"


def test_the_diff_table_sorts_by_change_aligns_numbers_right_and_marks_missing(device_snap):
    from mspti_lens import Session
    from mspti_lens.sim import Simulator

    s = Simulator()
    # the simulator's virtual clock, read by the session: durations are exactly the ones asked for,
    # whatever the load (on the real clock a 10.0 against 10.1 us call can come out faster)
    before = s.clock
    s.set_clock("virtual")
    try:
        with Session(library="sim", enable="runtime", clock="mspti") as session:
            s.call("aclrtMalloc", 10_000, 4)
            s.call("aclrtFree", 10_000, 4)
            a = session.reset()
            s.call("aclrtMalloc", 30_000, 4)  # three times slower
            s.call("aclrtFree", 10_100, 4)  # one per cent slower
            s.call("aclrtMemset", 5_000, 2)  # only after
            b = session.reset()
    finally:
        s.set_clock(before)
    t = DiffTable(a.diff(b), labels=("a", "b"))
    text = repr(t)
    rows = [line for line in text.splitlines() if line.startswith("runtime")]
    # by the time each gained: Malloc +80 µs, Memset (only after) +10 µs, Free +0.4 µs
    assert [r.split()[1] for r in rows] == ["aclrtMalloc", "aclrtMemset", "aclrtFree"], text
    assert "—" in rows[1] and "−0.0" not in text and "+" in rows[0]
    cells = html_cells(t._repr_html_())
    numbers = [(a_, v) for a_, v in cells if re.fullmatch(r"[+−]?[\d,.]+( %| ns| µs| ms)?", v)]
    assert numbers and all(a_ == "right" for a_, _ in numbers)
    # the caption says the sort; a slower median is red, a faster one green
    assert "by |total Δ|, the time gained or lost, largest first" in text.splitlines()[0]
    page = t._repr_html_()
    assert re.search(r"color:#b02a37'>\+[\d.]+ %<", page) and "color:#146c43" not in page
    # the plot keeps the file name as typed and draws only APIs both sides have
    from mspti_lens import plots

    fig = plots.before_after(a, b, labels=("run_a.parquet", "b"))
    assert fig._suptitle.get_text().startswith("A: run_a.parquet / B: b")
    assert sorted(ax.get_title() for ax in fig.axes) == ["aclrtFree", "aclrtMalloc"]
    assert all(len(ax.patches) == 2 for ax in fig.axes)  # two curves in every panel


def test_one_name_for_the_time_share_and_one_row_height_in_and_out_of_widgets(device_snap):
    # the snapshot's table says time_pct, as kernels() and the run summaries do
    heads = device_snap.table().cells()[0]
    assert "time_pct" in heads and "time_%" not in heads
    assert "time_pct" in Table(device_snap.kernels()).cells()[0]
    # the table sets its own line height: inside the panel's widget it would take the widgets' 28 px
    assert re.search(
        r"<table class='mspti-lens-table' style='[^']*line-height:1.4", device_snap.table().html()
    )


def test_the_stragglers_frame_puts_its_verdicts_before_the_evidence():
    from mspti_lens.runs.stragglers import INSTANCE_COLUMNS

    first = list(INSTANCE_COLUMNS)[:8]  # what a notebook shows without scrolling
    assert {"slow_rank", "late_rank", "late_by_ns", "note"} <= set(first), first
