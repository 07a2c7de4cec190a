"""What mspti-lens costs the process and what it lost, measured live (mspti_lens.self_cost):
present, sampled and non-zero on the simulator; drops counted and shown where users look; a
busy subscriber slot said; the exports' names say they describe mspti-lens itself."""

from __future__ import annotations

import json
import time

import pytest

from mspti_lens import Session, SubscriberBusyError, _native, self_cost
from mspti_lens.export.otlp import to_otlp
from mspti_lens.export.prometheus import to_prometheus
from mspti_lens.notebook.display import Status
from mspti_lens.notebook.panel import Panel
from mspti_lens.runs.control import cost_sentence, status_text

LAUNCH = "aclrtLaunchKernel"


def test_the_live_figure_is_sampled_one_callback_in_sample_every_and_not_zero(sim):
    every = _native.self_cost()["sample_every"]
    pairs = 100 * every
    with Session(library="sim") as s:
        before = _native.self_cost()
        sim.call(LAUNCH, count=pairs)  # all on this thread: its countdown alone decides
        after = _native.self_cost()
        cost = s.status()["self_cost"]
    timed = (after["samples"] + after["skipped"]) - (before["samples"] + before["skipped"])
    # 2 callbacks per pair, one in `every` timed; where this thread's countdown stood shifts it by 1
    assert abs(timed - 2 * pairs // every) <= 1
    assert after["sampled_ns"] > before["sampled_ns"]
    assert after["callback_cpu_ns"] == after["sampled_ns"] * every
    assert cost["measured"] is True and cost["sample_every"] == every
    assert cost["ns_per_pair"] > 0 and cost["callback_cpu_s"] > 0
    assert cost["callback_samples"] == after["samples"]


def test_every_window_keeps_the_self_cost_in_its_metadata(sim):
    with Session(library="sim") as s:
        sim.call(LAUNCH, count=2000)
        closed = s.reset()
        sim.call(LAUNCH, count=2000)
        current = s.snapshot()
    for snap in (closed, current):
        cost = snap.meta["self_cost"]
        assert cost["measured"] and cost["ns_per_pair"] > 0
    assert current.meta["self_cost"]["callback_cpu_s"] >= closed.meta["self_cost"]["callback_cpu_s"]


def test_the_drain_threads_cpu_is_counted(sim):
    before = _native.self_cost()["drain_cpu_ns"]
    with Session(library="sim", activity=["kernel"]) as s:
        sim.call(LAUNCH, count=20_000)
        s.flush_activity()
        # the drain adds its CPU as it wakes (every 20 ms) and when it ends
        time.sleep(0.1)
    assert _native.self_cost()["drain_cpu_ns"] > before


def test_drops_are_counted_over_closed_windows_and_shown_in_status_and_the_panel(sim):
    total0 = self_cost.measure()["records_dropped"]
    with Session(library="sim", activity=["kernel"], device_events=10) as s:
        sim.call(LAUNCH, count=500)
        s.flush_activity()
        first = s.reset()
        lost_first = first.activity.counters["device_events_dropped"]
        assert lost_first > 0, "500 kernels into an event log of 10: the rest are dropped"
        sim.call(LAUNCH, count=500)
        s.flush_activity()
        st = s.status()
        panel_view = Panel(s).refresh()
    cost = st["self_cost"]
    # the closed window's drops and the open window's both count
    assert cost["records_dropped"] - total0 > lost_first
    assert cost["drops"]["device_events_dropped"] >= cost["records_dropped"] - total0
    shown = repr(Status({**st, "state": "running", "windows_kept": 0}))
    assert "DROPPED" in shown and "device_events_dropped" in shown
    assert "DROPPED" in panel_view.status_text() and "DROPPED" in panel_view.status_html()
    assert self_cost.summary_text(cost).count("DROPPED") == 1


def test_a_subscriber_another_tool_holds_is_said_until_the_slot_is_ours(sim):
    sim.set_fault("msptiSubscribe", 2)  # MSPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
    with pytest.raises(SubscriberBusyError):
        Session(library="sim")
    busy = self_cost.measure()["subscriber_busy"]
    assert busy and "msptiSubscribe" in busy
    assert "SUBSCRIBER HELD BY ANOTHER TOOL" in self_cost.summary_text(self_cost.measure())
    sim.reset()
    with Session(library="sim"):
        assert self_cost.measure()["subscriber_busy"] is None


def test_the_exports_name_mspti_lens_itself(sim):
    with Session(library="sim") as s:
        sim.call(LAUNCH, count=5000)
        snap = s.snapshot()
    text = to_prometheus(snap)
    for name in (
        "mspti_lens_self_callback_cpu_seconds_total",
        "mspti_lens_self_records_dropped_total",
        "mspti_lens_self_drain_cpu_seconds_total",
        "mspti_lens_self_writer_cpu_seconds_total",
    ):
        assert f"# TYPE {name} counter" in text
    line = next(x for x in text.splitlines() if x.startswith("mspti_lens_self_callback_cpu_seconds_total{"))
    assert float(line.rsplit(" ", 1)[1]) == pytest.approx(snap.meta["self_cost"]["callback_cpu_s"])
    assert "# TYPE mspti_lens_self_callback_pair_nanoseconds gauge" in text
    pb = to_prometheus(snap, "protobuf")
    assert b"mspti_lens_self_records_dropped_total" in pb
    otlp = to_otlp(snap)
    metrics = {m["name"]: m for m in otlp["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]}
    cpu = metrics["mspti_lens.self.callback.cpu_time"]
    assert cpu["unit"] == "s" and cpu["sum"]["isMonotonic"] is True
    assert cpu["sum"]["dataPoints"][0]["asDouble"] == pytest.approx(snap.meta["self_cost"]["callback_cpu_s"])
    assert "mspti_lens.self.records_dropped" in metrics
    json.dumps(otlp)  # the OTLP/JSON encoding stays plain JSON


def _proc(cost: dict | None, calls_per_s: float = 10_000.0) -> dict:
    p = {"host": "h", "rank": 0, "pid": 1, "state": "on", "enable": ["runtime"], "generation": 1,
         "live": True, "calls_per_s": calls_per_s, "last_window": None}  # fmt: skip
    if cost is not None:
        p["self_cost"] = cost
    return p


def test_control_status_shows_the_measured_cost_and_the_estimate_only_where_nothing_was_measured(tmp_path):
    measured = {**self_cost.measure(), "measured": True, "ns_per_pair": 200.0, "records_dropped": 0}
    text = status_text(tmp_path, [_proc(measured)], 1)
    # 10,000 calls/s x 200 ns = 0.2 % of a core, from the process's own figure
    assert "0.200 %" in text and "est." not in text
    assert "200.0 ns per call measured" in cost_sentence([_proc(measured)])
    old = status_text(tmp_path, [_proc(None)], 1)
    assert "est." in old and "an estimate" in cost_sentence([_proc(None)])
    lost = {**measured, "records_dropped": 7, "drops": {"library_dropped": 7}}
    assert "DROPPED 7" in status_text(tmp_path, [_proc(lost)], 1)
    assert "DROPPED 7" in cost_sentence([_proc(lost)])
