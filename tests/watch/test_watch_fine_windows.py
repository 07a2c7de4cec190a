"""Fine windows during a capture: the capture's start asks the ranks for a window interval of
their own (a second by default) while it holds, and the restore gives each rank back the interval
it had, exactly (its own, or one another command had set). A bad interval is refused in one line,
before anything is written.

The rank here is this process: a real recorder (runs/hook.py) with its window writer and its
control thread, recording the simulator, steered through the run directory as a job's rank is.
Every wait is on a condition (an acknowledgement, a window on disk), with generous bounds."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from mspti_lens.__main__ import main as cli
from mspti_lens.runs import control, flight_recorder, hook
from mspti_lens.runs.control import RunControl, read_processes
from mspti_lens.runs.writer import WindowWriter
from mspti_lens.snapshot import Snapshot
from mspti_lens.watch.capture import CapturePolicy, Capturer
from mspti_lens.watch.evaluate import Transition
from mspti_lens.watch.rules import parse_rule

pytestmark = pytest.mark.timeout(600)
BOUND_S = 240.0  # per wait: a loaded machine is slow, not wrong
OWN_S, SET_S, FINE_S = 30.0, 20.0, 0.3  # record's interval, an operator's, the capture's


def wait_for(what: str, cond, bound: float = BOUND_S):
    end = time.monotonic() + bound
    while not (got := cond()):
        assert time.monotonic() < end, f"{what}: not within {bound} s"
        time.sleep(0.02)
    return got


@pytest.fixture
def rank(tmp_path, sim):
    """A recorded rank 0 (this process) of the run at tmp_path/run, making calls all along."""
    run = tmp_path / "run"
    recorder = hook.Recorder({hook.LIBRARY_VARIABLE: "sim", hook.ACTIVITY_VARIABLE: "none"})
    writer = WindowWriter(None, run, OWN_S, host="h", rank=(0, "RANK"))
    recorder.writer = writer
    recorder.turn_on(recorder.enable, [], None, 0)
    writer.start()
    recorder.control_start(str(run), 0)
    calling = threading.Event()
    made: list[int] = []  # calls made, by the calling thread

    def calls() -> None:
        while not calling.wait(0.005):
            sim.call("aclrtMalloc", 1000, 2)
            made.append(2)

    t = threading.Thread(target=calls, daemon=True)
    t.start()

    def stop() -> None:
        calling.set()
        t.join()
        writer.finish()

    try:
        yield SimpleNamespace(run=run, writer=writer, recorder=recorder, made=made, stop=stop)
    finally:
        stop()


def process(run: Path) -> dict:
    (p,) = read_processes(run)
    return p


def windows(run: Path) -> list[dict]:
    """Every window of rank 0 on disk, oldest first, as its metadata says."""
    out = [Snapshot.load(p).meta for p in (run / "host=h" / "rank=0").glob("window-*.parquet")]
    return sorted(out, key=lambda m: m["window"])


def test_a_capture_takes_fine_windows_and_gives_the_rank_back_its_exact_interval(rank):
    run, writer = rank.run, rank.writer
    ctl = RunControl(run)
    assert process(run)["interval_s"] == process(run)["own_interval_s"] == OWN_S
    # An operator had set an interval of their own: the capture must give that one back.
    ctl.start(interval_s=SET_S)
    assert ctl.wait(BOUND_S) == []
    assert (process(run)["interval_s"], writer.interval) == (SET_S, SET_S)

    said: list[str] = []
    capturer = Capturer(run, CapturePolicy(for_s=1.0, interval_s=FINE_S), say=said.append)
    t = Transition(parse_rule("aclrtMalloc p99 > 1ms"), "h/0", "pending", "firing", 3, time.time(), 2e6, 5e5,
                   (("h", 0),))  # fmt: skip
    folder = capturer.consider(t)
    assert folder is not None, said
    assert capturer.control.wait(BOUND_S) == []
    assert process(run)["interval_s"] == FINE_S and process(run)["own_interval_s"] == OWN_S
    # Windows at the fine interval land while the capture holds (at the run's, none would).
    fine = wait_for(
        "two fine windows", lambda: len([m for m in windows(run) if m["interval_s"] == FINE_S]) >= 2
    )
    assert fine
    assert capturer.tick(force=True) == folder
    cap = json.loads((folder / "capture.json").read_text())
    start, restore = cap["commands"]
    assert start["interval_s"] == FINE_S
    (prior,) = cap["prior"]
    assert (prior["interval_s"], prior["own_interval_s"]) == (SET_S, OWN_S)
    assert (restore["command"], restore["interval_s"], restore["unacknowledged"]) == ("start", SET_S, [])
    assert (process(run)["interval_s"], writer.interval) == (SET_S, SET_S)  # the operator's, exactly
    kept = [Snapshot.load(folder / f).meta for f in cap["during"] if "/window-" in f]
    assert len([m for m in kept if m["interval_s"] == FINE_S]) >= 2  # the capture's own fine windows

    # A start without an interval gives the rank its own back; so does a capture's restore.
    ctl.start()
    assert ctl.wait(BOUND_S) == []
    assert (process(run)["interval_s"], writer.interval) == (OWN_S, OWN_S)
    again = Capturer(run, CapturePolicy(for_s=1.0, interval_s=FINE_S, cooldown_s=0), say=said.append)
    second = again.consider(Transition(t.rule, "h/0", "pending", "firing", 3, time.time(), 2e6, 5e5, t.ranks))
    assert second is not None and second != folder, said
    assert again.control.wait(BOUND_S) == [] and writer.interval == FINE_S
    assert again.tick(force=True) == second
    _, restore = json.loads((second / "capture.json").read_text())["commands"]
    assert restore["interval_s"] is None  # the rank's own needs no asking
    assert (process(run)["interval_s"], writer.interval) == (OWN_S, OWN_S)


def test_a_start_for_that_runs_out_gives_the_rank_its_own_interval(rank):
    # The capture's dead man's switch: a watcher gone, the start --for ends by itself.
    run, writer = rank.run, rank.writer
    ctl = RunControl(run)
    ctl.start(for_s=0.5, interval_s=FINE_S)
    assert ctl.wait(BOUND_S) == []
    wait_for("the start --for to run out", lambda: process(run)["state"] == "off")
    assert (process(run)["interval_s"], writer.interval) == (OWN_S, OWN_S)


def test_a_bad_interval_is_refused_in_one_line_and_writes_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    procs = control.control_dir(run) / control.PROCESSES_DIR
    procs.mkdir(parents=True)
    row = {"host": "h", "node": "elsewhere", "rank": 0, "rank_source": "RANK", "pid": 2, "state": "on"}
    (procs / "h-pid2.json").write_text(json.dumps({**row, "heartbeat": time.time()}))
    before = sorted(p.name for p in run.rglob("*"))
    low, high = control.INTERVAL_BOUNDS_S
    for given in ("0", "-1", "nan", "inf", str(high * 2), str(low / 2)):
        assert cli(["control", str(run), "start", "--interval", given]) == 2
        err = capsys.readouterr().err
        assert (
            err.count("\n") == 1
            and f"--interval must be a finite number of seconds from {low:g} to {high:g}" in err
        )
    with pytest.raises(SystemExit) as e:
        cli(["control", str(run), "start", "--interval", "fast"])
    assert e.value.code == 2
    assert sorted(p.name for p in run.rglob("*")) == before  # nothing written
    # A command file that carries a bad interval is refused by the rank, as any bad command.
    good = {"generation": 1, "command": "start", "ranks": None}
    assert control.validate_command({**good, "interval_s": 1.0})["interval_s"] == 1.0
    for bad, why in [
        ({**good, "interval_s": "1"}, "interval must be a finite number"),
        ({**good, "interval_s": math.nan}, "interval must be a finite number"),
        ({**good, "interval_s": True}, "interval must be a finite number"),
        ({**good, "command": "stop", "interval_s": 1.0}, "interval_s comes with a start"),
        ({**good, "recorder": 1}, "recorder is true or false, and comes with a start"),
        ({**good, "command": "stop", "recorder": True}, "recorder is true or false, and comes with a start"),
    ]:
        with pytest.raises(ValueError, match=why):
            control.validate_command(bad)
    # And a capture that would ask for one, before it starts.
    for bad in (0, -1.0, math.inf, high * 2, "1"):
        with pytest.raises(ValueError, match="capture interval must be"):
            CapturePolicy(interval_s=bad)
    assert CapturePolicy(interval_s=None).interval_s is None  # the ranks' own interval
    with pytest.raises(ValueError, match="capture recorder_windows is at most 99"):
        CapturePolicy(recorder_windows=100)
    # A watched marker a rank cannot use is no marker: the rank is not watched.
    assert flight_recorder.read_marker(flight_recorder.watched_marker(10, 1.0)) == (10, 1.0)
    for marker in ({"recorder": {"windows": 0, "interval_s": 1.0}}, {"recorder": {"windows": 10}}, [], None):
        assert flight_recorder.read_marker(marker) is None


def test_a_watched_rank_keeps_its_last_seconds_and_a_capture_starts_with_them(rank):
    # The run's own interval is 30 s: without the flight recorder the capture would have no window
    # of the seconds before the trigger at all. Watched, the rank keeps its last 4 windows of 0.3 s
    # in memory; the capture's start makes it write them, and the capture keeps them in before/.
    run, flight = rank.run, rank.recorder.flight
    capturer = Capturer(run, CapturePolicy(for_s=1.0, interval_s=FINE_S, recorder_windows=4), say=print)
    capturer.tick()  # a watcher's poll: the run is marked watched
    marker = json.loads((run / "control" / "watched.json").read_text())
    assert marker["recorder"] == {"windows": 4, "interval_s": FINE_S}
    wait_for("the rank's ring to fill", lambda: flight.windows == 4 and len(flight.ring) == 4)
    assert all(m["interval_s"] == OWN_S for m in windows(run))  # on disk: the run's interval only
    fired = time.time()
    t = Transition(parse_rule("aclrtMalloc p99 > 1ms"), "h/0", "pending", "firing", 3, fired, 2e6, 5e5,
                   (("h", 0),))  # fmt: skip
    folder = capturer.consider(t, fired)
    assert folder is not None and capturer.control.wait(BOUND_S) == []
    assert capturer.tick(force=True) == folder
    cap = json.loads((folder / "capture.json").read_text())
    issued = (
        control.control_dir(run) / control.ISSUED_DIR / control.issued_name(cap["commands"][0]["generation"])
    )
    assert json.loads(issued.read_text())["recorder"] is True
    fine = [Snapshot.load(folder / f).meta for f in cap["before_fine"]]
    assert len(fine) == 4 and all(m["flight"] and m["interval_s"] == FINE_S for m in fine)
    assert all(f.startswith("before/host=h/rank=0/flight-") for f in cap["before_fine"])
    # Consecutive windows that tile time, up to the capture's start: the seconds before it.
    for a, b in zip(fine, fine[1:]):
        assert a["window_end"] == b["window_start"]
    assert fine[0]["window_start"] < fired <= fine[-1]["window_end"]
    assert not list((run / "host=h" / "rank=0").glob("flight-*"))  # moved into the capture
    # Every call is still in exactly one window on disk: the fine windows were merged into them.
    rank.stop()
    on_disk = [Snapshot.load(p) for p in (run / "host=h" / "rank=0").glob("window-*.parquet")]
    assert sum(s.total_calls for s in on_disk) == sum(rank.made)
    assert 0 < sum(Snapshot.load(folder / f).total_calls for f in cap["before_fine"]) < sum(rank.made)
    assert flight.cpu_s() > 0 and process(run)["flight"]["cpu_s"] > 0  # what being watched cost
    # Not watched any more (the marker's heartbeat stops): the ring is let go.
    old = time.time() - 3600
    os.utime(run / "control" / "watched.json", (old, old))  # as if its watcher were gone an hour
    flight.look(time.monotonic() + 3600)
    assert flight.windows == 0 and not flight.ring


def test_a_rank_serving_metrics_keeps_a_flight_recorder_and_its_scrapes_see_the_whole_window(tmp_path, sim):
    # record --prometheus: the rank's /metrics serves its writer's window so far. Watched, its
    # flight recorder cuts fine windows out of the Session every second; a scrape must still see
    # every call of the writer's window (the fine windows pending and the Session's since), and
    # the writer's next window on disk holds them all, exactly once.
    from mspti_lens.export.prometheus import METRIC
    from mspti_lens.export.serve import serve
    from mspti_lens.session import Session

    run = tmp_path / "run"
    (run / "control").mkdir(parents=True)
    Capturer(run, CapturePolicy(recorder_windows=4)).watching()  # a watcher's (or receiver's) mark
    with Session(library="sim", enable=["runtime"]) as session:
        writer = WindowWriter(session, run, OWN_S, host="h", rank=(0, "RANK"))
        with serve(0, session, min_interval=0) as server:  # no render reused
            flight = flight_recorder.FlightRecorder(run, writer, server=server)
            flight.look(time.monotonic() + 3600)
            assert flight.windows == 4  # a serving rank is watched like any other

            def calls(n: int) -> None:
                sim.call("aclrtMalloc", 1000, n)

            def served() -> int:
                lines = [x for x in server.render("text").decode().splitlines()
                         if x.startswith(f"{METRIC}_count") and 'api="aclrtMalloc"' in x]  # fmt: skip
                return sum(int(float(x.rsplit(" ", 1)[1])) for x in lines)

            calls(5)
            flight.take()
            calls(3)
            flight.take()
            calls(2)
            assert [f.snapshot().total_calls for f in flight.ring] == [5, 3]
            assert served() == 10  # not the 2 since the last fine window
            assert writer.session.reset().total_calls == 10  # the writer's window: every call once
            assert served() == 0  # a new window
