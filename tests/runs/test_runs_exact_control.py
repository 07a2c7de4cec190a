"""Exact across every control action: a stop, a `--for` expiry and the process's exit lose no call.

A thread makes simulated calls without pause while the writer turns recording on and off under
it; the simulator counts the callbacks it delivered (EXIT sites). Every one of them must be
accounted for, exactly: a call in a window, or one of two kinds the run counts and shows, at most
one per toggle on this one calling thread:
- `unmatched`: an EXIT just after a start whose ENTER came before it (in that window's counters);
- late: an EXIT that MSPTI decided to deliver before a stop's disable returned and that reached
  the callback after the stop took effect (nothing makes the disable wait for a delivery under
  way): the last window counted its call in flight, health's `late_exits` and the next window's
  metadata count it.
A window taken before the Session stops would leave the calls made between the take and the close
in no window, and so would a take that did not wait for a callback that read the recording run
just before the stop and wrote just after (rust/lens/src/core/quiescence.rs): both break the sum.
"""

from __future__ import annotations

import threading
import time

import pytest

import mspti_lens
from mspti_lens import Session, _native
from mspti_lens.runs.hook import Recorder
from mspti_lens.runs.writer import WindowWriter
from mspti_lens.sim.driver import EXIT
from mspti_lens.snapshot import Snapshot

BOUND_S = 120.0


class Caller:
    """A thread calling aclrtLaunchKernel on the simulator until told to stop."""

    def __init__(self, sim):
        self.sim = sim
        self.api = sim.api("aclrtLaunchKernel")
        self.calls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sim.lib.msimCall(self.api, 0)
            self.calls += 1

    def __enter__(self) -> Caller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(BOUND_S)

    def wait_for(self, more: int) -> None:
        """Until the thread has made ``more`` calls from now: the writer acts on a busy process."""
        target, end = self.calls + more, time.monotonic() + BOUND_S
        while self.calls < target:
            assert time.monotonic() < end, "the calling thread made no progress"
            time.sleep(0.001)


def late_exits() -> int:
    return int(_native.health()["late_exits"])


def check_accounted(out, delivered: int, late: int, toggles: int) -> list[dict]:
    """Every delivered EXIT is a call in a window, an unmatched EXIT after a start or a late one
    after a stop, each kind at most once per toggle; returns the windows' metadata."""
    files = mspti_lens.open_run(out).files()
    snaps = [Snapshot.load(p) for p in files["path"]]
    recorded = int(mspti_lens.open_run(out).summary()["num_calls"].sum())
    unmatched = sum(s.counters["unmatched"] for s in snaps)
    assert recorded + unmatched + late == delivered, (recorded, unmatched, late, delivered)
    assert unmatched <= toggles and late <= toggles, (unmatched, late, toggles)
    metas = [s.meta for s in snaps]
    assert sum(m["late_exits"] for m in metas) <= late  # those after the last window are in none
    assert [m["stop_unsettled"] for m in metas] == [0] * len(metas)  # every stop waited for its callbacks
    # What the windows counted is what the run shows (files(), the panel's headline).
    assert files["late_exits"].sum() == sum(m["late_exits"] for m in metas)
    return metas


def session() -> Session:
    return Session(library="sim", enable=["runtime"]).start()


@pytest.mark.parametrize("stops", [1, 4])
def test_every_call_made_while_on_is_in_a_window_across_stops_and_exit_on_the_simulator(sim, tmp_path, stops):
    sim.counting(True)
    late = late_exits()
    writer = WindowWriter(None, tmp_path, 3600.0, host="h", rank=(0, "RANK"))
    with Caller(sim) as caller:
        for k in range(stops):
            writer.begin(session(), {"generation": k + 1})
            caller.wait_for(2000)
            writer.write_window(final=False)  # a periodic window in the middle of the period
            caller.wait_for(2000)
            writer.end("stop")  # the stop arrives while the thread is calling
            caller.wait_for(500)  # off: these calls are no one's
        writer.begin(session(), {"generation": stops + 1})
        caller.wait_for(2000)
        assert writer.finish("exit")  # the process's exit, still calling
    delivered = sim.delivered_total(EXIT)
    assert delivered > 2000 * (2 * stops + 1)
    check_accounted(tmp_path, delivered, late_exits() - late, stops + 1)


def test_a_for_expiry_loses_no_call_on_the_simulator(sim, tmp_path):
    sim.counting(True)
    writer = WindowWriter(None, tmp_path, 3600.0, host="h", rank=(0, "RANK"))
    env = {"MSPTI_LENS_LIBRARY": "sim", "MSPTI_LENS_ENABLE": "runtime", "MSPTI_LENS_ACTIVITY": "none"}
    late = late_exits()
    recorder = Recorder(env)
    recorder.writer = writer
    with Caller(sim) as caller:
        recorder.apply({"command": "start", "generation": 1, "for_s": 0.05})
        caller.wait_for(2000)
        end = time.monotonic() + BOUND_S
        while writer.session is not None:  # the control thread's tick, here by hand
            assert time.monotonic() < end
            recorder.tick()
            time.sleep(0.01)
        caller.wait_for(500)
    delivered = sim.delivered_total(EXIT)
    assert delivered >= 2000
    metas = check_accounted(tmp_path, delivered, late_exits() - late, 1)
    assert [m["end_reason"] for m in metas if m["period_end"]] == ["for ended"]
