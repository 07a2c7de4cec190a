"""Readers and compaction never disagree (runs/compact.py, runs/run.py): a Run open while a
rank's windows are merged sees every call and every collective record once, ``refresh()`` brings
the event files up to date, records compaction leaves out are counted where the user looks, and
window counts do not change when windows are merged. Known call counts, on the simulator."""

from __future__ import annotations

import threading
import warnings

import polars as pl
import pytest
from _sim_activity import bind
from polars.testing import assert_frame_equal
from window_session import CALLS, FakeSession

import mspti_lens
from mspti_lens.runs import compact, writer
from mspti_lens.runs import run as run_module
from mspti_lens.runs.run import RunWarning

from conftest import stress

pytestmark = pytest.mark.filterwarnings("ignore::mspti_lens.errors.SimulatedBackendWarning")

FINE = 4  # fine windows kept: compaction starts early and merges often


def compactor_of(w: writer.WindowWriter, keep_merged_s: float | None) -> compact.Compactor:
    """A compactor of the writer's windows; merged files kept ``keep_merged_s`` (None: the default)."""
    c = compact.Compactor(w.dir, w._pid, fine=FINE)
    if keep_merged_s is not None:
        c.keep_merged_s = keep_merged_s
    return c


def fake_writer(out, keep_merged_s: float | None = None) -> writer.WindowWriter:
    w = writer.WindowWriter(FakeSession(), out, 10.0, host="h", rank=(0, "RANK"))
    w.compactor = compactor_of(w, keep_merged_s)
    return w


def windows_read(run) -> list[int]:
    """The window numbers the Run's files hold, each as often as a file holds it."""
    f = run.files()
    return sorted(w for a, b in zip(f["window_first"], f["window"]) for w in range(a, b + 1))


def test_a_window_merged_between_listing_and_reading_is_read_from_its_segment(tmp_path, monkeypatch):
    # The race made certain: compaction runs (and removes what it merged) right after the reader
    # lists the run, before it reads the footers. The segment replacing the files it listed was
    # never listed; the reader must list again, not take them for merged and leave them out.
    out = tmp_path / "run"
    w = fake_writer(out, keep_merged_s=0)
    compactor, w.compactor = w.compactor, None
    for _ in range(40):
        w.write_window(final=False)
    listed = run_module.list_windows

    def listing_then_compaction(root, glob=writer.WINDOW_GLOB):
        found = listed(root, glob)
        if glob == writer.WINDOW_GLOB and not compactor.merges:
            compactor.compact()
        return found

    monkeypatch.setattr(run_module, "list_windows", listing_then_compaction)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunWarning)
        run = mspti_lens.open_run(out)
        assert compactor.merges  # the race happened
        assert windows_read(run) == list(range(1, 41))
        assert run.summary()["num_calls"].sum() == 40 * CALLS


def test_a_run_open_while_its_files_are_merged_and_removed_reads_every_call_once(tmp_path):
    # The files an open Run listed are merged and removed (no grace) before it scans them.
    out = tmp_path / "run"
    w = fake_writer(out, keep_merged_s=0)
    for _ in range(12):
        w.write_window(final=False)
    run = mspti_lens.open_run(out)
    for _ in range(28):
        w.write_window(final=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunWarning)
        calls = run.summary()["num_calls"].sum()
    seen = windows_read(run)
    assert seen == list(range(1, len(seen) + 1)) and calls == len(seen) * CALLS


def test_merged_files_stay_for_readers_until_the_grace_ends_or_the_process_does(tmp_path):
    out = tmp_path / "run"
    w = fake_writer(out)  # the default grace: nothing written here is old enough to go
    for _ in range(20):
        w.write_window(final=False)
    names = sorted(p.name for p in w.dir.iterdir())
    covered = compact.covered_paths(names)
    assert covered  # the merged windows are still there, for readers that listed them
    assert compact.Compactor(w.dir, w._pid).segments() == sorted(
        (compact.parse(n)[1], compact.parse(n)[2])
        for n in names
        if n.startswith("window-") and n not in covered
    )  # and are not merged again
    assert windows_read(mspti_lens.open_run(out)) == list(range(1, 21))
    w.write_window(final=True)  # the last window: nothing will compact again
    left = sorted(p.name for p in w.dir.iterdir())
    assert not compact.covered_paths(left)
    assert windows_read(mspti_lens.open_run(out)) == list(range(1, 22))


def test_window_counts_do_not_change_when_windows_are_merged(tmp_path):
    runs, said = {}, {}
    for name, on in (("fine", False), ("merged", True)):
        w = fake_writer(tmp_path / name)
        if not on:
            w.compactor = None
        for _ in range(40):
            w.write_window(final=False)
        runs[name] = mspti_lens.open_run(tmp_path / name)
        said[name] = w.summary_line()  # the line `record` prints for the process at its end
    fine, merged = runs["fine"], runs["merged"]
    assert merged.files().height < fine.files().height == 40  # compaction did merge files
    assert fine.ranks()["windows"].to_list() == merged.ranks()["windows"].to_list() == [40]
    assert fine.ranks()["calls"].to_list() == merged.ranks()["calls"].to_list() == [40 * CALLS]
    assert "1 ranks, 40 windows" in repr(fine) and "1 ranks, 40 windows" in repr(merged)
    # record's end-of-run line counts in the same unit, windows written (32 fine + a segment of
    # 8 are 33 files: the panel once said 33 where record said 40)
    assert all("calls in 1 APIs, 40 windows -> " in line for line in said.values()), said


@pytest.fixture
def L(sim):
    sim.reset()
    lib = bind(sim.lib)
    sim.set_clock("virtual")
    yield lib
    lib.msimSetCommName(None)
    lib.msimSetThreadStream(0, 0)


def window_of_work(sim, L, kernels: int, collectives: int) -> None:
    launch, allreduce = sim.api("aclrtLaunchKernel"), sim.api("HcclAllReduce")
    for _ in range(kernels):
        L.msimLaunch(launch, 5000, 1, 3000, 1, b"MatMul", None, 0)
    L.msimSetThreadStream(0, 9)
    L.msimSetCommName(b"dp")
    for j in range(collectives):
        assert L.msimCallCollective(allreduce, 30_000 + j, 1 << 16, 4, 8) == 0
    L.msimSetThreadStream(0, 0)
    L.msimSetCommName(None)


def sim_writer(s, out, keep_merged_s: float | None = None) -> writer.WindowWriter:
    w = writer.WindowWriter(s, out, 10.0, host="h", rank=(0, "RANK"))
    w.compactor = compactor_of(w, keep_merged_s)
    return w


def check_once(ev: pl.DataFrame) -> None:
    """Every collective record of the log once: per communicator and op, sequences 0, 1, 2, ...
    (a merged segment missed leaves a gap; one read twice, a repeat)."""
    for (_, _), g in ev.filter(pl.col("kind") == "communication").group_by("group", "name"):
        seq = g["sequence"].sort().to_list()
        assert seq == list(range(len(seq))), f"collective sequences {seq[:5]}... have gaps or repeats"


def test_an_open_run_sees_events_written_and_merged_after_it_opened(sim, L, tmp_path):
    out = tmp_path / "run"
    with mspti_lens.Session(library="sim", clock="mspti", activity=["communication"]) as s:
        w = sim_writer(s, out, keep_merged_s=0)  # merged files go at once: the harder case
        for _ in range(6):
            window_of_work(sim, L, 0, 4)
            w.write_window(final=False)
        run = mspti_lens.open_run(out)
        before = run.device_events()
        assert before.height == 6 * 4
        for _ in range(18):
            window_of_work(sim, L, 0, 4)
            w.write_window(final=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RunWarning)
            unrefreshed = run.device_events()  # its event files were merged: listed again
            assert unrefreshed.height >= before.height
            check_once(unrefreshed)
            refreshed = run.refresh().device_events()
    assert refreshed.height == 24 * 4
    check_once(refreshed)
    fresh = mspti_lens.open_run(out)
    assert_frame_equal(run.stragglers(), fresh.stragglers())
    assert_frame_equal(run.skew(), fresh.skew())
    assert run.files()["events_dropped"].sum() == 0


def test_compaction_keeps_every_collective_and_counts_the_kernels_it_leaves_out(
    sim, L, tmp_path, monkeypatch
):
    monkeypatch.setattr(compact, "MAX_EVENT_ROWS", 10)  # a merged log keeps at most 10 kernels
    out = tmp_path / "run"
    with mspti_lens.Session(
        library="sim", enable=["LAUNCH", "HCCL"], clock="mspti", activity=["kernel", "communication"]
    ) as s:
        w = sim_writer(s, out)
        for _ in range(12):
            window_of_work(sim, L, 5, 3)
            w.write_window(final=False)
    run = mspti_lens.open_run(out)
    ev = run.device_events()
    kernels = ev.filter(pl.col("kind") == "kernel").height
    collectives = ev.filter(pl.col("kind") == "communication")
    assert collectives.height == 12 * 3  # all kept, in order
    check_once(ev)
    files = run.files()
    dropped = int(files["events_dropped"].sum())
    assert dropped > 0 and kernels + dropped == 12 * 5  # every kernel kept or counted
    say = f"{dropped:,} device records were left out when older windows were merged"
    assert run.skew().height and all(say in (n or "") for n in run.skew()["note"])
    assert all(say in (n or "") for n in run.stragglers()["note"])
    from mspti_lens.notebook.run_view import headline

    assert f"{dropped:,} device records left out" in headline(run)


@pytest.mark.parametrize("keep_merged_s", [None, 0.0], ids=["merged-files-kept", "relisting-alone"])
def test_readers_racing_a_fast_writer_and_compaction_see_every_call_once(sim, L, tmp_path, keep_merged_s):
    # A writer thread writes windows as fast as it can (compaction after each); readers open the
    # run again and again meanwhile. Each open must read windows 1..N, each once, and their
    # calls and collective records exactly (no missed segment, no FileNotFoundError): with merged
    # files kept a while (the default), and with them removed at once (a reader slower than that).
    out = tmp_path / "run"
    opens = stress(40)
    stop = threading.Event()
    written: list[int] = []
    failure: list[BaseException] = []
    launch = sim.api("aclrtLaunchKernel")

    with mspti_lens.Session(
        library="sim", enable=["LAUNCH", "HCCL"], clock="mspti", activity=["communication"]
    ) as s:
        w = sim_writer(s, out, keep_merged_s)

        def write() -> None:
            try:
                while not stop.is_set():
                    for _ in range(CALLS):
                        sim.lib.msimCall(launch, 1_000)
                    window_of_work(sim, L, 0, 2)
                    w.write_window(final=False)
                    written.append(w.seq)
            except BaseException as e:  # noqa: BLE001 - said by the test
                failure.append(e)

        t = threading.Thread(target=write, name="fast-writer")
        t.start()
        try:
            while len(written) < 2 * FINE and not failure:
                stop.wait(0.01)
            for _ in range(opens):
                with warnings.catch_warnings():
                    warnings.simplefilter("error", RunWarning)
                    run = mspti_lens.open_run(out)
                    launches = run.summary().filter(pl.col("name") == "aclrtLaunchKernel")["num_calls"].sum()
                    seen = windows_read(run)
                    assert seen == list(range(1, len(seen) + 1)), f"windows read: {seen}"
                    assert launches == CALLS * len(seen)
                    check_once(run.device_events())
                assert not failure
        finally:
            stop.set()
            t.join()
    assert not failure, failure
    assert w.compactor.merges > 0
