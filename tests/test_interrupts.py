"""Interrupting (KeyboardInterrupt, as Jupyter's stop button sends) a simulator
workload, or a `%%mspti` cell running one, stops the workload's threads before the interrupt
returns, and no call of the interrupted job lands in a later window.

No wall-clock bound is asserted (the machine may be loaded): the tests check that the simulator's
threads are gone once the KeyboardInterrupt has surfaced and that the next window holds exactly its
own calls. A watchdog cancels every simulator job if an interrupt is not honoured, so a failure is
a failure, never a hung test run."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest

from mspti_lens import Session

WATCHDOG_S = 90.0


def sim_threads() -> set[str]:
    """The simulator's own threads in this process (sim-train-0, sim-comm-0, sim-replay-3...)."""
    out = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue  # the thread ended while we looked
        if name.startswith("sim-"):
            out.add(f"{name}/{tid}")
    return out


class Interrupter:
    """Sends SIGINT to the main thread once ``ready()`` holds; if the interrupted code has not
    returned ``WATCHDOG_S`` later, cancels every simulator job so the test ends (and fails)."""

    def __init__(self, sim, ready):
        self.sim, self.ready = sim, ready
        self.sent = threading.Event()
        self.returned = threading.Event()
        self.watchdog_fired = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        end = time.monotonic() + WATCHDOG_S
        while not self.ready():
            if time.monotonic() > end:
                break
            time.sleep(0.01)
        self.sent.set()
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        if not self.returned.wait(WATCHDOG_S):
            self.watchdog_fired = True
            for handle in range(1, 100_000):  # handles are small consecutive integers
                self.sim.lib.msimJobCancel(handle)

    def done(self) -> None:
        self.returned.set()
        self._thread.join(WATCHDOG_S + 5)
        assert not self.watchdog_fired, "the interrupt did not stop the workload: the watchdog had to"


@pytest.mark.parametrize("progress", [False, True], ids=["quiet", "progress-bar"])
def test_interrupting_a_workload_stops_its_threads_on_the_simulator(sim, progress):
    before = sim_threads()
    with Session(library="sim", enable=["runtime", "hccl"]) as session:
        stopper = Interrupter(sim, lambda: session.snapshot().total_calls > 0)
        try:
            with pytest.raises(KeyboardInterrupt):
                sim.run_workload("training", steps=10**6, ranks=8, threads=2, progress=progress)
        finally:
            stopper.done()
        assert stopper.sent.is_set()
        # the workload's threads were joined before the KeyboardInterrupt surfaced
        assert sim_threads() == before
        interrupted = session.reset()
        assert interrupted.total_calls > 0  # what ran before the interrupt is kept
        sim.call("aclrtMalloc", 1000, 5)
        window = session.snapshot()
        assert dict(zip(*window.summary().select("name", "num_calls"))) == {"aclrtMalloc": 5}


def test_interrupting_a_replay_stops_its_threads_on_the_simulator(sim):
    before = sim_threads()
    api = sim.api("aclrtMalloc")
    # one thread of 100,000 calls of 100 µs each (10 s in real time): interrupted mid-way
    events = [(api, site, 200_000 * i + site * 100_000) for i in range(100_000) for site in (0, 1)]
    with Session(library="sim", enable=["runtime"]) as session:
        stopper = Interrupter(sim, lambda: session.snapshot().total_calls > 0)
        try:
            with pytest.raises(KeyboardInterrupt):
                sim.start_replay([events]).join()
        finally:
            stopper.done()
        assert sim_threads() == before
        session.reset()
        sim.call("aclrtFree", 1000, 3)
        assert dict(zip(*session.snapshot().summary().select("name", "num_calls"))) == {"aclrtFree": 3}


def test_interrupting_a_profiled_cell_stops_the_job_and_the_next_cell_counts_its_own_calls(sim):
    pytest.importorskip("IPython")
    from IPython.terminal.interactiveshell import TerminalInteractiveShell
    from IPython.testing.globalipapp import start_ipython
    from IPython.utils.capture import capture_output

    from mspti_lens.notebook.magics import CellInterrupted, MsptiMagics

    shell = start_ipython() or TerminalInteractiveShell.instance()
    shell.user_ns["s"] = sim
    with capture_output():
        shell.run_line_magic("load_ext", "mspti_lens")
    shell.run_line_magic("config", "MsptiMagics.library = 'sim'")
    magics = next(m for m in shell.configurables if isinstance(m, MsptiMagics))
    before = sim_threads()
    try:
        # a recording runs (as with a panel open); then a long cell, interrupted
        with capture_output():
            shell.run_line_magic("mspti", "start")
            shell.run_cell_magic("mspti", "--display none", "s.call('aclrtMalloc', 1000, 1)")
        stopper = Interrupter(sim, lambda: magics.session.snapshot().total_calls > 0)
        try:
            with capture_output() as cap, pytest.raises(CellInterrupted) as raised:
                shell.run_cell_magic(
                    "mspti", "--display summary", "s.run_workload('training', steps=10**6, ranks=8)"
                )
        finally:
            stopper.done()
        # one line: how far the job got and what the window holds; no traceback of the workload
        text = raised.value.text
        assert re.fullmatch(
            r"training workload interrupted after [\d,]+ of 1,000,000 steps; the window holds the "
            r"[\d,]+ calls made until then \(\d+ APIs\): `mspti_interrupted`",
            text,
        ), text
        # the variable it names is that cell's window, whatever the live session records since
        sim.call("aclrtFree", 1000, 7)
        calls = int(re.search(r"the ([\d,]+) calls", text).group(1).replace(",", ""))
        assert shell.user_ns["mspti_interrupted"].total_calls == calls
        assert magics.session.running and magics.session.snapshot().total_calls != calls
        shell.user_ns["cut"] = shell.user_ns["mspti_interrupted"]
        assert "Traceback" not in cap.stdout + cap.stderr and "driver.py" not in cap.stdout + cap.stderr
        assert isinstance(raised.value, KeyboardInterrupt)  # a Run All stops at it
        assert sim_threads() == before
        assert shell.user_ns["cut"].total_calls > 0  # the calls made until the interrupt are kept
        # the next two cells count their own calls only
        for api, n in (("aclrtMalloc", 5), ("aclrtFree", 3)):
            with capture_output():
                snap = shell.run_cell_magic("mspti", "--display summary", f"s.call('{api}', 1000, {n})")
            assert dict(zip(*snap.summary().select("name", "num_calls"))) == {api: n}
    finally:
        shell.run_line_magic("unload_ext", "mspti_lens")


def test_an_interrupt_while_the_progress_bar_is_being_shown_still_closes_that_bar(sim, monkeypatch):
    # The KeyboardInterrupt can land while the bar is being displayed (the moment a user sees it
    # appear): the job must still name that bar, so %%mspti puts its line in the bar's place
    # instead of a second output, and the bar is closed as interrupted.
    from mspti_lens.sim import driver

    class Bar:
        def __init__(self):
            self.closed_interrupted: bool | None = None

        def show(self):
            raise KeyboardInterrupt  # as if SIGINT arrived inside display()

        def update(self, done, total=None):
            pass

        def close(self, done, interrupted=False):
            self.closed_interrupted = interrupted

    made: list[Bar] = []
    monkeypatch.setattr(driver, "progress_bar", lambda *a, **k: made.append(Bar()) or made[-1])
    before = sim_threads()
    with pytest.raises(KeyboardInterrupt) as caught:
        sim.run_workload("training", steps=10**6, ranks=2, threads=1, progress=True)
    assert len(made) == 1 and caught.value.mspti_lens_bar is made[0]
    assert made[0].closed_interrupted is True
    assert sim_threads() == before  # the job was stopped and joined all the same
