"""Compaction of a long-running rank's older windows (runs/compact.py): bounded files, the newest
windows kept fine, and open_run's totals unchanged, driven through the writer with many windows
at once (no clock, no waiting)."""

from __future__ import annotations

import shutil

import polars as pl
from polars.testing import assert_frame_equal
from window_session import FakeSession

import mspti_lens
from mspti_lens.runs import compact, writer

WINDOWS = 80


def test_a_day_at_the_default_interval_keeps_at_most_100_files():
    segs: list[tuple[int, int]] = []
    most = 0
    for i in range(1, 8640 + 1):  # a day of 10 s windows
        segs.append((i, i))
        for x, y in compact.due_merges(segs):
            segs = sorted([s for s in segs if s not in (x, y)] + [(x[0], y[1])])
        most = max(most, len(segs))
    # each segment is a window file and (with activity records) an event file
    assert 2 * most <= 100
    assert segs[0] == (1, 8192) and [s for s in segs if s[0] == s[1]][-compact.FINE_WINDOWS :] == [
        (i, i) for i in range(8640 - compact.FINE_WINDOWS + 1, 8641)
    ]  # the newest windows stay fine
    assert [b - a + 1 for a, b in segs] == sorted([b - a + 1 for a, b in segs], reverse=True)


def test_compacted_windows_read_with_the_same_totals(tmp_path):
    fresh, packed = tmp_path / "fresh", tmp_path / "packed"
    for out, on in ((fresh, False), (packed, True)):
        w = writer.WindowWriter(FakeSession(), out, 10.0, host="h", rank=(0, "RANK"))
        if on:
            w.compactor = compact.Compactor(w.dir, w._pid)
        for _ in range(WINDOWS):
            w.write_window(final=False)
    a, b = mspti_lens.open_run(fresh), mspti_lens.open_run(packed)
    files = b.files()
    assert a.files().height == WINDOWS
    assert files.height <= compact.FINE_WINDOWS + WINDOWS.bit_length() + 1
    assert (files["window"] - files["window_first"] + 1).sum() == WINDOWS  # every window once
    assert files.sort("window").tail(compact.FINE_WINDOWS)["window_first"].to_list() == list(
        range(WINDOWS - compact.FINE_WINDOWS + 1, WINDOWS + 1)
    )
    assert_frame_equal(a.summary(), b.summary())  # exact: counts, sums, extremes, quantiles
    assert a.summary()["num_calls"].item() == 3 * WINDOWS
    assert a.ranks()["calls"].item() == b.ranks()["calls"].item() == 3 * WINDOWS
    # A reader that lists a segment beside the windows it replaced (between the segment's rename
    # and their removal) counts each call once.
    seg = files.filter(pl.col("window") > pl.col("window_first")).row(0, named=True)
    inputs = a.files().filter(pl.col("window").is_between(seg["window_first"], seg["window"]))["path"]
    for p in inputs:
        shutil.copy(p, b.root + "/host=h/rank=0/")
    assert_frame_equal(mspti_lens.open_run(packed).summary(), a.summary())
    assert compact.covered_paths(["d/window-000003-pid1.parquet", "d/window-000001-000004-pid1.parquet"]) == {
        "d/window-000003-pid1.parquet"
    }


DAY_WINDOWS = 8640  # a day of 10 s windows
DAY_BOUND_BYTES = 10_000_000


def test_compaction_keeps_a_day_within_10_mb_at_the_default_activity(sim, tmp_path):
    # Real windows from a Session on the simulator: runtime calls and 40 all-reduces a window,
    # with COMMUNICATION records (record's default activity). A merged segment is no larger than
    # the windows it replaces (histograms of one key set add in place; its event log is capped),
    # so a day's bytes are its file count times the largest of each kind.

    from _sim_activity import bind

    sim.reset()
    L = bind(sim.lib)
    sim.set_clock("virtual")
    apis = [
        sim.api(n) for n in ("aclrtLaunchKernel", "aclrtMemcpyAsync", "aclrtSynchronizeStream", "aclrtMalloc")
    ]
    allreduce = sim.api("HcclAllReduce")
    out = tmp_path / "day"
    try:
        with mspti_lens.Session(library="sim", clock="mspti", activity=["communication"]) as s:
            L.msimSetThreadStream(0, 9)
            L.msimSetCommName(b"dp")
            w = writer.WindowWriter(s, out, 10.0, host="h", rank=(0, "RANK"))
            w.compactor = compact.Compactor(w.dir, w._pid)
            for i in range(WINDOWS):
                for k, api in enumerate(apis):
                    for j in range(25):
                        sim.lib.msimCall(api, 1_000 + 300 * k + 7 * j + i)
                for j in range(40):
                    assert L.msimCallCollective(allreduce, 30_000 + j, 1 << 16, 4, 8) == 0
                w.write_window(final=False)
    finally:
        L.msimSetCommName(None)
        L.msimSetThreadStream(0, 0)
    # Merged inputs stay a while for readers (compact.KEEP_MERGED_S): what stays is the rest.
    names = sorted(p.name for p in w.dir.glob("*.parquet"))
    files = {n: w.dir / n for n in names if n not in compact.covered_paths(names)}
    windows = {n: p.stat().st_size for n, p in files.items() if n.startswith("window-")}
    events = {n: p for n, p in files.items() if n.startswith("events-")}
    fine = [v for n, v in windows.items() if compact.parse(n)[1] == compact.parse(n)[2]]
    merged = [v for n, v in windows.items() if compact.parse(n)[1] < compact.parse(n)[2]]
    assert merged and max(merged) <= 1.1 * max(fine)  # a merged window does not grow with its span
    rows = {n: pl.read_parquet(p).height for n, p in events.items()}
    assert sum(rows.values()) == 40 * WINDOWS  # every record once, none in the windows' metadata
    assert mspti_lens.open_run(out).device_events().height == 40 * WINDOWS
    # A day: the newest FINE_WINDOWS fine, then one segment per power of two; every collective
    # record kept, at the bytes a record takes in the largest event file.
    segments = compact.FINE_WINDOWS + (DAY_WINDOWS - compact.FINE_WINDOWS).bit_length()
    sizes = {n: p.stat().st_size for n, p in events.items()}
    biggest = max(rows, key=rows.__getitem__)  # the most rows: the least per-file overhead a row
    per_record = sizes[biggest] / rows[biggest]
    day = segments * max(windows.values()) + 40 * DAY_WINDOWS * per_record
    print(f"{per_record:.1f} B a collective record, {day / 1e6:.1f} MB for a day")
    assert 2 * segments <= 100 and day <= DAY_BOUND_BYTES, f"{day / 1e6:.1f} MB for a day"


def test_a_merged_segment_counts_what_both_halves_lost():
    a = {"window": 1, "arrivals_dropped": 3, "events_dropped_in_compaction": 5}
    b = {"window": 2, "arrivals_dropped": 4}
    m = compact.merged_meta(a, b, 1, 2)
    assert (m["arrivals_dropped"], m["events_dropped_in_compaction"]) == (7, 5)
    assert "arrivals_dropped" not in compact.merged_meta({"window": 1}, {"window": 2}, 1, 2)


def test_calls_a_stop_could_not_window_are_counted_through_compaction_and_shown(tmp_path, monkeypatch):
    # The native health counter of late EXITs grows by one before each window: every window says
    # the one that came since the last, compaction adds them up, and the run's headline shows them.
    late = iter(range(10_000))
    monkeypatch.setattr(writer._native, "health", lambda: {"late_exits": next(late), "stop_unsettled": 0})
    fresh, packed = tmp_path / "fresh", tmp_path / "packed"
    for out, on in ((fresh, False), (packed, True)):
        w = writer.WindowWriter(FakeSession(), out, 10.0, host="h", rank=(0, "RANK"))
        if on:
            w.compactor = compact.Compactor(w.dir, w._pid)
        for _ in range(WINDOWS):
            w.write_window(final=False)
    from mspti_lens.notebook.run_view import headline

    for out in (fresh, packed):
        run = mspti_lens.open_run(out)
        assert run.files()["late_exits"].sum() == WINDOWS
        assert f"{WINDOWS:,} calls a stop could not put in a window" in headline(run)
    assert mspti_lens.open_run(packed).files().height < WINDOWS  # merged, and still counted


def test_what_is_on_now_is_the_windows_since_the_latest_command_and_no_segment_reaching_before_it(tmp_path):
    w = writer.WindowWriter(None, tmp_path, 10.0, host="h", rank=(0, "RANK"))
    w.compactor = compact.Compactor(w.dir, w._pid)
    w.begin(FakeSession(), {"enable": ["runtime"], "generation": 1})
    for _ in range(36):
        w.write_window(final=False)
    run = mspti_lens.open_run(tmp_path)  # on since its first window: all of it is what is on now
    assert_frame_equal(run.snapshot(current=True).summary(), run.snapshot().summary())
    assert run.snapshot(current=True).meta["since"] == run.files()["window_start"].min() == 1001.0
    w.retarget(lambda: None, {"enable": ["aclrtLaunchKernel"], "generation": 2})  # writes window 37
    for _ in range(40):  # windows 38..77, of generation 2; older ones are merged meanwhile
        w.write_window(final=False)
    run = mspti_lens.open_run(tmp_path)
    files = run.files().sort("window")
    since_cmd = files.filter(pl.col("window_first") >= 38)
    straddling = files.filter((pl.col("window_first") <= 37) & (pl.col("window") >= 38))
    assert straddling.height == 1 and straddling["generation"].item() == 2  # the newer half's: not enough
    windows = int((since_cmd["window"] - since_cmd["window_first"] + 1).sum())
    assert 32 <= windows < 40  # the windows the segment holds are left out with it
    now = run.current()
    assert now.select("rank", "pid", "period", "generation", "windows", "enable").rows() == [
        (0, w._pid, 1, 2, windows, "aclrtLaunchKernel")
    ]
    assert now["since"].item() == since_cmd["window_start"].min()
    snap = run.snapshot(current=True)
    assert snap.summary()["num_calls"].item() == 3 * windows  # exactly those windows' calls
    assert snap.meta["since"] == now["since"].item() and snap.meta["generations"] == [2]
    assert run.snapshot().summary()["num_calls"].item() == 3 * 77
    w.end("stop")  # nothing is on: nothing current
    run.refresh()
    assert run.current().height == 0 and run.snapshot(current=True).summary().height == 0
    assert run.snapshot(current=True).meta["since"] is None
