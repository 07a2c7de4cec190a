"""A window the run panel could not read, merged away by compaction since, is not an unreadable
file of the run: the panel stops saying it was skipped and counts its windows in the segment
that replaced it (the windows `record` says it wrote). Windows from runs.writer, no job."""

from __future__ import annotations

import shutil
import warnings

import polars as pl
import pytest
from window_session import FakeSession

import mspti_lens
from mspti_lens.runs import compact, writer
from mspti_lens.runs.run import RunWarning

pytest.importorskip("ipywidgets")

WINDOWS = compact.FINE_WINDOWS + 2  # enough for compaction to merge the first two


def write(out, compacting: bool) -> None:
    w = writer.WindowWriter(FakeSession(), out, 10.0, host="h", rank=(0, "RANK"))
    if compacting:
        w.compactor = compact.Compactor(w.dir, w._pid)
    for _ in range(WINDOWS):
        w.write_window(final=False)


def test_a_skipped_window_merged_away_since_is_no_longer_skipped_and_its_windows_count(tmp_path):
    from mspti_lens.notebook.runpanel import RunPanel

    fresh, packed = tmp_path / "fresh", tmp_path / "packed"
    write(fresh, False)
    write(packed, True)
    seg = (
        mspti_lens.open_run(packed)
        .files()
        .filter(pl.col("window") > pl.col("window_first"))
        .row(0, named=True)
    )
    first, last = seg["window_first"], seg["window"]
    folder = fresh / "host=h" / "rank=0"
    inputs = sorted(p for p in folder.glob("window-*.parquet") if first <= int(p.name[7:13]) <= last)
    assert len(inputs) == last - first + 1 >= 2
    inputs[0].write_bytes(b"not a parquet file: read at a bad moment")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunWarning)
        run = mspti_lens.open_run(fresh)
    assert list(run.skipped) == [str(inputs[0])]
    assert run.ranks()["windows"].item() == WINDOWS - 1
    panel = RunPanel(run, auto_refresh=False)
    assert "1 unreadable file(s) skipped" in panel.status.value
    # compaction: the segment is written, then the windows it covers are removed
    shutil.copy(seg["path"], folder)
    for p in inputs:
        p.unlink()
    panel.refresh()
    assert run.skipped == {}
    assert "skipped" not in panel.status.value, panel.status.value
    assert run.ranks()["windows"].item() == WINDOWS  # every window written, once
    assert f">{WINDOWS}<" in panel.body.value  # the ranks table says so too
