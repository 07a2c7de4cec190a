"""A property-based stateful test of the Session API (hypothesis RuleBasedStateMachine).

Random sequences of start / stop / enable / disable / reset / snapshot / save / load / close /
new session, with simulated calls (and lone EXITs) driven through the simulator in between, are
checked against a small model of what must hold:

- a call is recorded iff the session is running and its callback id is enabled;
- an EXIT with no ENTER is counted as unmatched iff it is delivered while running;
- ``snapshot()`` shows exactly the calls since the last reset; ``reset()`` returns exactly them
  and starts an empty window; a saved file loads back equal;
- what the session says is enabled, and what the library has enabled (its bitmaps), agree with
  the model: the wanted set while running, nothing while stopped;
- a closed session refuses to start, reset, enable or disable (SessionError) but still shows its
  last window, and a new session starts empty.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import mspti_lens
from mspti_lens import SessionError, catalog
from mspti_lens.sim import EXIT, Simulator

from conftest import stress

TARGETS = [
    "runtime",
    "hccl",
    "LAUNCH",
    "MALLOC",
    "aclrtMemcpy",
    "MSPTI_CBID_HCCL_ALLREDUCE",
    ("hccl", 2),
    ("runtime", 9),
]
APIS = [
    "aclrtLaunchKernel",
    "aclrtLaunchKernelV2",
    "aclrtMalloc",
    "aclrtMemcpy",
    "aclrtSynchronizeStream",
    "HcclAllReduce",
    "HcclBroadcast",
    "HcclBarrier",
]
FIGURES = {"examples": 0, "steps": 0, "calls": 0}


def _bits(pairs, domain):
    return sum(1 << c for d, c in pairs if d == domain)


class SessionMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.sim = Simulator()
        self.sim.reset()
        self.api = {a.name_26x: a for a in self.sim.apis if a.name_26x in APIS}
        self.tmp = Path(tempfile.mkdtemp(prefix="mspti-stateful-"))
        self.saved: list[tuple[Path, Counter, int]] = []
        self.session = None
        FIGURES["examples"] += 1

    # -- model ---------------------------------------------------------------------------------
    def _new(self, clock: str):
        self.session = mspti_lens.Session(library="sim", enable=(), clock=clock)
        self.running = False
        self.closed = False
        self.wanted: set[tuple[int, int]] = set()
        self.window: Counter = Counter()
        self.unmatched = 0

    def _expand(self, target) -> set[tuple[int, int]]:
        d, c = catalog.resolve(target)
        if c is None:
            return {(x.domain, x.cbid) for x in catalog.enableable() if x.domain == d}
        return {(d, c)}

    @initialize(clock=st.sampled_from(["auto", "monotonic", "tsc", "mspti"]))
    def start_session(self, clock):
        self._new(clock)

    def teardown(self):
        if self.session is not None:
            self.session.close()
        self.sim.reset()

    # -- rules ---------------------------------------------------------------------------------
    @precondition(lambda self: not self.closed)
    @rule()
    def start(self):
        self.session.start()
        self.running = True

    @precondition(lambda self: not self.closed)
    @rule()
    def stop(self):
        self.session.stop()
        self.running = False

    @precondition(lambda self: not self.closed)
    @rule(what=st.lists(st.sampled_from(TARGETS), min_size=1, max_size=3))
    def enable(self, what):
        self.session.enable(*what)
        for t in what:
            self.wanted |= self._expand(t)

    @precondition(lambda self: not self.closed)
    @rule(what=st.lists(st.sampled_from(TARGETS), min_size=1, max_size=3))
    def disable(self, what):
        self.session.disable(*what)
        for t in what:
            self.wanted -= self._expand(t)

    @rule(name=st.sampled_from(APIS), n=st.integers(1, 25))
    def call(self, name, n):
        a = self.api[name]
        self.sim.call(a.index, count=n)
        FIGURES["calls"] += n
        if not self.closed and self.running and (a.domain, a.cbid) in self.wanted:
            self.window[name] += n

    @rule(name=st.sampled_from(APIS))
    def lone_exit(self, name):
        a = self.api[name]
        self.sim.fire(a.index, EXIT)
        if not self.closed and self.running and (a.domain, a.cbid) in self.wanted:
            self.unmatched += 1

    def _check(self, snap, window: Counter, unmatched: int):
        got = {r["name"]: r["num_calls"] for r in snap.summary().iter_rows(named=True)}
        assert got == dict(window), (got, dict(window))
        assert snap.total_calls == sum(window.values())
        assert snap.counters["unmatched"] == unmatched
        assert snap.simulated

    @precondition(lambda self: not self.closed)
    @rule()
    def snapshot(self):
        self._check(self.session.snapshot(), self.window, self.unmatched)

    @precondition(lambda self: not self.closed)
    @rule()
    def reset(self):
        closed = self.session.reset()
        self._check(closed, self.window, self.unmatched)
        self.window, self.unmatched = Counter(), 0
        self._check(self.session.snapshot(), self.window, 0)

    @precondition(lambda self: not self.closed)
    @rule()
    def save(self):
        p = self.tmp / f"s{len(self.saved)}.parquet"
        self.session.snapshot().save(p)
        self.saved.append((p, Counter(self.window), self.unmatched))

    @precondition(lambda self: bool(self.saved))
    @rule(data=st.data())
    def load(self, data):
        p, window, unmatched = data.draw(st.sampled_from(self.saved))
        self._check(mspti_lens.load(p), window, unmatched)

    @precondition(lambda self: not self.closed)
    @rule()
    def close(self):
        self.session.close()
        self.closed, self.running = True, False

    @precondition(lambda self: self.closed)
    @rule(op=st.sampled_from(["start", "reset", "enable", "disable"]))
    def closed_refuses(self, op):
        args = ("LAUNCH",) if op in ("enable", "disable") else ()
        with pytest.raises(SessionError):
            getattr(self.session, op)(*args)

    @precondition(lambda self: self.closed)
    @rule()
    def closed_keeps_its_last_window(self):
        self._check(self.session.snapshot(), self.window, self.unmatched)

    @precondition(lambda self: self.closed)
    @rule(clock=st.sampled_from(["auto", "monotonic", "tsc", "mspti"]))
    def new_session(self, clock):
        self._new(clock)
        self._check(self.session.snapshot(), Counter(), 0)

    @precondition(lambda self: not self.closed)
    @rule()
    def second_session_refused(self):
        with pytest.raises(SessionError):
            mspti_lens.Session(library="sim")

    # -- invariants ----------------------------------------------------------------------------
    @invariant()
    def state_agrees(self):
        FIGURES["steps"] += 1
        if self.session is None:
            return
        assert self.session.closed == self.closed
        if self.closed:
            assert not self.sim.subscribed
            return
        assert self.session.running == self.running
        assert {catalog.resolve(e) for e in self.session.enabled} == self.wanted
        for d in (1, 2):
            want = _bits(self.wanted, d) if self.running else 0
            assert self.sim.enabled_mask(d) == want, (d, bin(self.sim.enabled_mask(d)), bin(want))


SessionMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("MSPTI_LENS_STATEFUL_EXAMPLES", stress(100))),
    stateful_step_count=40,
    deadline=None,
    database=None,  # no .hypothesis/ example database left in the working tree
    suppress_health_check=[HealthCheck.too_slow],
)
TestSessionMachine = SessionMachine.TestCase


def teardown_module(module):
    d = os.environ.get("MSPTI_LENS_FIGURES")
    if d:
        Path(d).mkdir(parents=True, exist_ok=True)
        Path(d, "stateful.json").write_text(json.dumps(FIGURES, indent=1, sort_keys=True))
