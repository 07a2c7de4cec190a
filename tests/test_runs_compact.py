"""Compaction of a long-running rank's older windows (runs/compact.py): bounded files, the newest
windows kept fine, and open_run's totals unchanged, driven through the writer with many windows
at once (no clock, no waiting)."""

from __future__ import annotations

import shutil

import polars as pl
from polars.testing import assert_frame_equal

import mspti_lens
from mspti_lens import _native
from mspti_lens.runs import compact, writer
from mspti_lens.snapshot import Snapshot

WINDOWS = 80


class FakeSession:
    """A Session's window hand-over for the writer: window i holds calls of exact durations."""

    def __init__(self) -> None:
        self.i = 0
        self.activity: list[str] = []

    def reset(self) -> Snapshot:
        self.i += 1
        values = [1_000 * self.i, 7 + self.i % 5, 3_000_000 + self.i]
        snap = Snapshot(_native.NativeSnapshot.from_values(values, "aclrtLaunchKernel"), {})
        snap.meta.update(window_start=1000.0 + self.i, window_end=1001.0 + self.i, simulated=True)
        return snap

    def flush_activity(self, settle: bool) -> None:
        pass

    def close(self) -> None:
        pass


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
