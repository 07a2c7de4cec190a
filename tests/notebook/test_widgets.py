"""The control panel: its logic (notebook/panel.py) and the ipywidgets binding (notebook/widget.py),
against the simulator, which records what the library actually has enabled."""

from __future__ import annotations

import threading
import time

import pytest

from mspti_lens import Session, load
from mspti_lens.notebook.panel import Panel, options

pytest.importorskip("ipywidgets")

from mspti_lens.notebook.widget import ControlPanel  # noqa: E402

RUNTIME_ALL = sum(1 << c for c in range(1, 37))
HCCL_ALL = sum(1 << c for c in range(1, 13))
LAUNCH = 1 << 10


@pytest.fixture
def session(sim):
    s = Session(library="sim", enable=["runtime"])
    s.start()
    yield s
    s.close()
    assert not sim.subscribed


@pytest.fixture
def cp(session):
    panel = ControlPanel(session, interval=0.05, auto_refresh=False)
    yield panel
    panel.close()


def wait_for(cond, timeout=30.0):
    """Wait for an event (not a speed assertion): True as soon as cond() holds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


# -- panel logic, no widgets -----------------------------------------------------------------------
def test_domain_switches_reach_the_library(session, sim):
    p = Panel(session)
    assert p.domain_enabled("runtime") and not p.domain_enabled("hccl")
    assert sim.enabled_mask(1) == RUNTIME_ALL and sim.enabled_mask(2) == 0
    p.set_domain("hccl", True)
    assert sim.enabled_mask(2) == HCCL_ALL and p.domain_enabled("hccl")
    p.set_domain("runtime", False)
    assert sim.enabled_mask(1) == 0 and not p.domain_enabled("runtime")
    with pytest.raises(ValueError, match="valid domains are runtime, hccl"):
        p.set_domain("gpu", True)


def test_search_uses_the_names_users_know(session):
    p = Panel(session)
    assert len(options()) == 36 + 12
    launch = p.search("aclrtLaunchKernel")
    assert [o.key for o in launch] == ["MSPTI_CBID_RUNTIME_LAUNCH"]
    assert launch[0].label.startswith("aclrtLaunchKernel")
    assert [o.key for o in p.search("HcclAllReduce")] == ["MSPTI_CBID_HCCL_ALLREDUCE"]
    assert {o.key for o in p.search("rtKernelLaunch")} >= {"MSPTI_CBID_RUNTIME_LAUNCH"}  # CANN 8.x name
    assert all(o.callback.domain == 2 for o in p.search("hccl"))
    assert p.search("no-such-api") == []


def test_select_applies_only_to_visible_options(session, sim):
    p = Panel(session)
    visible = [o.key for o in p.search("launch")]
    p.select(visible, ["MSPTI_CBID_RUNTIME_LAUNCH"])
    # the other launch ids went off, LAUNCH and every runtime id hidden by the search stay on
    hidden_on = RUNTIME_ALL & ~sum(1 << o.callback.cbid for o in p.search("launch"))
    assert sim.enabled_mask(1) == hidden_on | LAUNCH
    p.select(visible, [])
    assert sim.enabled_mask(1) == hidden_on
    with pytest.raises(ValueError, match="not among the visible"):
        p.select(visible, ["MSPTI_CBID_HCCL_ALLREDUCE"])
    with pytest.raises(ValueError, match="unknown callback"):
        p.select(["nope"], [])


def test_reset_keeps_every_window_and_export_round_trips(session, sim, tmp_path):
    p = Panel(session, export_dir=tmp_path)
    sim.call("aclrtMalloc", 1000, 5)
    v = p.reset()
    assert v.calls == 0 and p.windows[-1].total_calls == 5
    sim.call("aclrtMalloc", 1000, 3)
    path = p.export()
    assert path.startswith(str(tmp_path)) and load(path).total_calls == 3
    assert load(p.export(tmp_path / "named.parquet")).total_calls == 3
    with pytest.raises(ValueError, match="does not exist"):
        p.export(tmp_path / "missing" / "x.parquet")


def test_view_counts_unmatched_and_in_flight(session, sim):
    p = Panel(session)
    sim.fire("aclrtMalloc", 1)  # an EXIT with no ENTER
    sim.fire("aclrtFree", 0)  # an ENTER still open
    v = p.refresh()
    assert v.unmatched == 1 and v.in_flight == 1
    assert "1 unmatched" in v.status_text() and "1 in flight" in v.status_text()
    assert "SIMULATED" in v.status_html()
    sim.fire("aclrtFree", 1)


def test_stop_start_and_bad_settings(session, sim):
    p = Panel(session)
    p.stop()
    assert sim.enabled_mask(1) == 0 and not p.last.running
    p.start()
    assert sim.enabled_mask(1) == RUNTIME_ALL and p.last.running
    with pytest.raises(ValueError, match="valid units"):
        p.set_unit("parsec")
    with pytest.raises(ValueError, match="valid kinds"):
        p.set_plot_kind("pie")
    with pytest.raises(TypeError):
        Panel("not a session")


# -- the widgets -----------------------------------------------------------------------------------
def checked(cp) -> set[str]:
    return {k for k, cb in cp.checkboxes.items() if cb.value}


def test_toggle_widget_enables_in_the_library(cp, sim):
    assert cp.toggles["runtime"].value and not cp.toggles["hccl"].value
    cp.toggles["hccl"].value = True
    assert sim.enabled_mask(2) == HCCL_ALL
    cp.toggles["runtime"].value = False
    assert sim.enabled_mask(1) == 0
    # the picker follows: no runtime callback checked any more, every HCCL one is
    assert all(k.startswith("MSPTI_CBID_HCCL") for k in checked(cp))
    assert len(checked(cp)) == 12


def test_a_click_in_the_picker_toggles_one_callback(cp, sim):
    assert len(cp.checkboxes) == 48 and len(checked(cp)) == 36
    cp.checkboxes["MSPTI_CBID_RUNTIME_LAUNCH"].value = False  # one click
    assert sim.enabled_mask(1) == RUNTIME_ALL & ~LAUNCH
    assert checked(cp) == {k for k in cp.checkboxes if k.startswith("MSPTI_CBID_RUNTIME")} - {
        "MSPTI_CBID_RUNTIME_LAUNCH"
    }
    cp.checkboxes["MSPTI_CBID_HCCL_ALLREDUCE"].value = True
    assert sim.enabled_mask(2) == 1 << 1 and sim.enabled_mask(1) == RUNTIME_ALL & ~LAUNCH
    cp.checkboxes["MSPTI_CBID_RUNTIME_LAUNCH"].value = True
    assert sim.enabled_mask(1) == RUNTIME_ALL


def test_a_partly_enabled_domain_shows_a_mixed_state(cp):
    rt, hc = cp.toggles["runtime"], cp.toggles["hccl"]
    assert rt.description == "runtime · 36 of 36" and rt.icon == "check-square" and rt.value
    assert hc.description == "hccl · 0 of 12" and hc.icon == "square-o" and not hc.value
    cp.checkboxes["MSPTI_CBID_RUNTIME_LAUNCH"].value = False
    assert rt.description == "runtime · 35 of 36" and rt.icon == "minus-square" and not rt.value
    assert "mspti-lens-some" in rt._dom_classes and "mspti-lens-all" not in rt._dom_classes
    # a click on a mixed domain turns all of it on
    rt.value = True
    assert rt.description == "runtime · 36 of 36" and "mspti-lens-all" in rt._dom_classes


def test_search_filters_the_picker_and_keeps_hidden_states(cp, sim):
    cp.search.value = "launch"
    assert len(cp.visible()) == 5 and "MSPTI_CBID_RUNTIME_LAUNCH" in cp.visible()
    cp.checkboxes["MSPTI_CBID_RUNTIME_LAUNCH"].value = False
    assert sim.enabled_mask(1) == RUNTIME_ALL & ~LAUNCH  # hidden callbacks untouched
    cp.search.value = ""
    assert len(cp.visible()) == 48 and checked(cp) == set(cp.panel.selected())
    # every label is whole: the function name, its aliases and the id
    labels = {k: cb.description for k, cb in cp.checkboxes.items()}
    assert labels["MSPTI_CBID_RUNTIME_STREAM_SYNCHRONIZED"].startswith("aclrtSynchronizeStream")
    assert labels["MSPTI_CBID_RUNTIME_STREAM_SYNCHRONIZED"].endswith("STREAM_SYNCHRONIZED")
    assert all(cb.style.description_width == "initial" for cb in cp.checkboxes.values())


def test_the_panel_plot_is_rendered_for_hidpi(cp, sim):
    from PIL import Image

    assert cp.plot.layout.display == "none"  # no calls yet: no empty axes
    sim.call("aclrtMalloc", 1000, 20)
    cp.refresh()
    assert cp.plot.layout.display == ""
    import io

    width = Image.open(io.BytesIO(cp.plot.value)).size[0]
    assert width >= 2 * int(cp.plot.width)  # 2 device pixels per CSS pixel at least


def test_buttons_and_errors_show_in_the_panel(cp, sim, tmp_path):
    cp.buttons["stop"].click()
    assert sim.enabled_mask(1) == 0 and cp.buttons["start"].disabled is False
    cp.buttons["start"].click()
    assert sim.enabled_mask(1) == RUNTIME_ALL and cp.buttons["start"].disabled
    sim.call("aclrtMalloc", 1000, 4)
    cp.buttons["reset"].click()
    assert cp.panel.windows[-1].total_calls == 4 and "<b>0</b> calls" in cp.status.value
    cp.export_path.value = str(tmp_path / "nope" / "x.parquet")
    cp.buttons["export"].click()
    assert "does not exist" in cp.message.value
    cp.export_path.value = str(tmp_path / "x.parquet")
    cp.buttons["export"].click()
    assert "saved" in cp.message.value and (tmp_path / "x.parquet").exists()


@pytest.mark.slow
def test_auto_refresh_runs_on_a_thread_while_collection_runs(session, sim):
    cp = ControlPanel(session, interval=0.05)
    try:
        assert cp.auto_refreshing
        before = cp.refreshes
        job = sim.start_workload("training", steps=30, ranks=8, threads=1)
        # the kernel (this thread) is free while the panel refreshes on its own thread
        assert threading.current_thread() is threading.main_thread()
        assert wait_for(lambda: cp.refreshes > before + 2)
        job.join()
        assert wait_for(lambda: "aclrtLaunchKernel" in cp.table.value)
        assert wait_for(lambda: f"<b>{session.snapshot().total_calls:,}</b> calls" in cp.status.value)
        assert wait_for(lambda: cp.plot.value[:4] == b"\x89PNG")  # the figure follows (throttled)
        # toggling HCCL on while it runs: HCCL rows appear after the next refreshes
        cp.toggles["hccl"].value = True
        sim.run_workload("training", steps=5, ranks=8)
        assert wait_for(lambda: "HcclAllReduce" in cp.table.value)
        cp.kind.value = "hccl"
        assert cp.plot.value[:4] == b"\x89PNG" and cp.errors == []
    finally:
        cp.close()
    assert not cp.auto_refreshing


def test_the_running_mark_is_live_from_the_first_beat(session, sim):
    """The status line's "running" mark vanishes by itself unless beats rewrite it; it must be
    the vanishing one from the start, not only from the thread's first beat (an interval later):
    a kernel restarted in between would leave a dead panel saying "running"."""
    session.start()
    cp = ControlPanel(session, interval=60)
    try:
        assert "mspti-lens-running" in cp.status.value and "mspti-lens-gone" in cp.status.value, (
            cp.status.value
        )
        assert "mspti-lens-disconnected" in cp.heartbeat.value
    finally:
        cp.close()


def test_refresh_stops_when_session_closes(sim):
    s = Session(library="sim")
    s.start()
    cp = ControlPanel(s, interval=0.02, plot=False)
    s.close()
    assert wait_for(lambda: not cp.auto_refreshing)
    cp.close()


def test_bad_interval(session):
    with pytest.raises(ValueError, match="interval"):
        ControlPanel(session, interval=0)


def test_a_click_during_a_background_redraw_is_not_lost(cp, sim):
    """While the refresh thread writes widget values, a user's change arriving on another thread
    still reaches the library."""
    entered, release = threading.Event(), threading.Event()

    def slow_view(view):
        entered.set()
        release.wait(10)

    with cp._syncing_state():  # the refresh thread is mid-redraw ...
        cp.panel.on_change.insert(0, slow_view)
        t = threading.Thread(target=lambda: setattr(cp.toggles["hccl"], "value", True))
        t.start()  # ... and the user clicks "hccl" (handled on another thread)
        assert entered.wait(10)  # the click went through to the panel
        assert sim.enabled_mask(2) == HCCL_ALL
    release.set()
    t.join(10)
    cp.panel.on_change.remove(slow_view)
    assert cp.toggles["hccl"].value and sim.enabled_mask(2) == HCCL_ALL


def test_closing_the_session_leaves_a_static_final_view(sim):
    s = Session(library="sim", enable=["runtime"])
    s.start()
    cp = ControlPanel(s, interval=0.02)
    sim.call("aclrtMalloc", 1000, 6)
    s.close()  # closed by the user, not through the panel: its refresh thread notices
    assert wait_for(lambda: cp.finished)
    assert not cp.auto_refreshing
    final = cp.widget.children[0].value
    assert "mspti-lens-final" in final and "aclrtMalloc" in final and "<img" in final
    assert "session closed" in final and "mspti-lens-panel" not in cp.widget._dom_classes


# -- in the panel: the slowest calls, the timeline plot, a recorded run ------------
def test_the_panel_lists_the_slowest_calls_kept_and_refreshes_them_on_the_simulator(virtual):
    sim = virtual
    with Session(library="sim", clock="mspti", enable=["runtime"]) as s:
        s.start()
        sim.call("aclrtMalloc", work_ns=1_000, count=5)
        sim.call("aclrtSynchronizeStream", work_ns=5_000_000, count=2)
        cp = ControlPanel(s, interval=0.05, auto_refresh=False, slowest=4)
        try:
            page = cp.slowest.value
            assert "slowest 4 calls kept" in page and "SIMULATED" in page
            # 2 synchronizes, then 2 of the 5 mallocs (at most 3 per API, 4 in all), slowest first
            assert page.count("aclrtSynchronizeStream") == 2 and page.count("aclrtMalloc") == 2
            assert page.index("aclrtSynchronizeStream") < page.index("aclrtMalloc")
            assert "5.00 ms" in page and "1.00 µs" in page
            sim.call("aclrtFree", work_ns=9_000_000, count=1)
            cp.refresh()
            assert cp.slowest.value.index("aclrtFree") < cp.slowest.value.index("aclrtSynchronizeStream")
            assert "aclrtFree" in cp.final_html("closed")  # the final view keeps the list
        finally:
            cp.close()
    with pytest.raises(ValueError, match="slowest must be an int >= 0"):
        Panel(s, slowest=-1)


def test_the_panel_plots_the_timeline_live_on_the_simulator(virtual):
    from mspti_lens import _native

    sim = virtual
    with Session(library="sim", clock="mspti", enable=["runtime"], interval=3600.0) as s:
        s.start()
        sim.call("aclrtMalloc", work_ns=1_000, count=10)
        _native.timeline_tick()
        cp = ControlPanel(s, interval=0.05, auto_refresh=False)
        try:
            assert "timeline" in cp.kind.options
            cp.kind.value = "timeline"
            first = cp.plot.value
            assert cp.panel.plot_kind == "timeline" and first and cp.plot.layout.display == ""
            ax = cp.panel.figure().axes[0]
            labels = {ln.get_label() for ln in ax.get_lines()}
            # every call took 1 µs: p99 lies on p50, and its legend entry says so
            assert labels == {"aclrtMalloc p50", "aclrtMalloc p99 (≈ aclrtMalloc p50)"}
            # seconds since the first interval, not clock digits under a date offset
            assert ax.get_xlabel().startswith("time since the first interval (s; it began at ")
            assert min(ln.get_xdata()[0] for ln in ax.get_lines()) == 0
            sim.call("aclrtFree", work_ns=2_000, count=10)
            _native.timeline_tick()
            cp.refresh()  # what the refresh thread does while the session runs
            assert cp.plot.value != first
            labels = {ln.get_label() for ln in cp.panel.figure().axes[0].get_lines()}
            assert {"aclrtFree p50", "aclrtFree p99 (≈ aclrtFree p50)"} <= labels
        finally:
            cp.close()


def test_without_an_interval_the_timeline_plot_says_so_in_its_axes(session, sim):
    from mspti_lens import plots

    p = Panel(session, plot_kind="timeline")
    sim.call("aclrtMalloc", 1000, 5)
    view = p.refresh()
    texts = [t.get_text() for ax in p.figure(view).axes for t in ax.texts]
    assert any("%%mspti --interval 0.5" in t and "Session(interval=0.5)" in t for t in texts), texts
    assert p.figure(view).get_size_inches()[1] < 1.5  # a line of text, not an empty 4-inch frame
    frame_fig = plots.plot(view.snapshot.histogram(), "timeline")  # a histogram frame has no timeline
    assert any("interval=" in t.get_text() for t in frame_fig.axes[0].texts)


def _run_window(out, host: str, rank: int, *, final: bool, world: int):
    """One window file of a rank, as a recording process writes it (see tests/runs/test_runs.py)."""
    import mspti_lens
    from mspti_lens.runs import writer

    native = mspti_lens._native.NativeSnapshot.from_values([5, 6], "HcclAllReduce")
    snap = mspti_lens.Snapshot(native, {})
    d = writer.rank_dir(out, host, rank)
    d.mkdir(parents=True, exist_ok=True)
    snap = snap.with_meta(host=host, rank=rank, pid=100 + rank, window=1, final=final, written=1000.0,
                          interval_s=1.0, world_size=world)  # fmt: skip
    snap.save(d / writer.window_name(1, 100 + rank))


def test_the_panel_shows_a_recorded_run_and_refreshes_it(session, tmp_path):
    _run_window(tmp_path, "a", 0, final=True, world=2)
    cp = ControlPanel(session, interval=0.05, auto_refresh=False, run=str(tmp_path))
    try:
        assert cp.run_view.layout.display == "" and cp.run_view in cp.widget.children
        assert "MISSING" in cp.run_view.value and "complete" in cp.run_view.value  # rank 1 of 2
        _run_window(tmp_path, "a", 1, final=True, world=2)
        cp.refresh()
        assert "MISSING" not in cp.run_view.value and "2 ranks reporting" in cp.run_view.value
    finally:
        cp.close()
    assert "2 ranks reporting" in cp.widget.children[0].value  # the final view keeps the run
    plain = ControlPanel(session, interval=0.05, auto_refresh=False)
    assert plain.run_view.layout.display == "none" and plain.panel.last.run_html is None
    plain.close()
    with pytest.raises(TypeError, match="folder of a recorded run"):
        Panel(session, run=42)


def test_a_live_panel_beats_and_a_silent_one_says_it_is_disconnected(session, sim):
    panel = ControlPanel(session, interval=0.05)
    try:
        beats = panel._beats
        assert wait_for(lambda: panel._beats >= beats + 3)  # the refresh thread beats
        page = panel.heartbeat.value
        # hidden while beats keep replacing it; shown by the CSS timer once they stop
        assert "disconnected" in page and "visibility:hidden" in page and "animation:mspti-lens-stale" in page
        assert "@keyframes mspti-lens-stale" in page and "10s forwards" in page
        # and the "running" mark fades by itself unless the beats keep rewriting it
        assert wait_for(
            lambda: "animation:mspti-lens-gone 0s linear 10s forwards'>● running" in panel.status.value
        )
    finally:
        panel.stop_auto_refresh()
    assert panel.heartbeat.value == ""  # stopped on purpose: never a false alarm
    panel.close()


def calls_in_header(panel) -> str:
    return panel.status.value.replace("<b>", "").replace("</b>", "")


def test_what_is_toggled_shows_at_the_next_refresh_and_header_and_table_are_one_snapshot(session, sim):
    panel = ControlPanel(session, interval=0.05, auto_refresh=False)
    sim.call("aclrtMalloc", 1000, 3)
    panel.refresh()  # the plot drawn
    plotted = panel.plot.value
    panel.toggles["hccl"].value = True  # the click: HCCL on in the library at once
    sim.call("HcclAllReduce", 1000, 2)
    panel.refresh(throttle=True)  # the next background refresh, well within the plot's throttle
    assert "HcclAllReduce" in panel.table.value and "5 calls" in calls_in_header(panel)
    assert panel.plot.value != plotted  # a new API is drawn at once, not seconds later
    sim.call("aclrtMalloc", 1000, 4)
    panel.refresh(throttle=True)  # too soon to redraw the plot: the header and table are live
    assert "9 calls" in calls_in_header(panel) and ">7<" in panel.table.value
    assert "plot of 5 calls" in panel.plot_note.value  # the plot says it is older
    panel.buttons["reset"].click()
    sim.call("aclrtMalloc", 1000, 2)
    panel.refresh(throttle=True)
    assert "2 calls" in calls_in_header(panel) and ">2<" in panel.table.value
    assert ">7<" not in panel.table.value and "HcclAllReduce" not in panel.table.value
    panel.close()


def test_table_and_plot_show_the_same_snapshot_and_labels_are_never_cut(session, sim):
    panel = ControlPanel(session, interval=0.05, auto_refresh=False)
    session.start()
    sim.call("aclrtMalloc", 1000, 3)
    panel.refresh()  # plot drawn: the table goes with it
    assert ">3<" in panel.table.value and not panel.plot_note.value
    sim.call("aclrtMalloc", 1000, 4)
    panel.refresh()
    assert ">7<" in panel.table.value and not panel.plot_note.value
    # no fixed widths that cut "communication" or "reset"; the callback list scrolls one way only
    assert panel.activity["communication"].layout.width == "auto"
    assert all(b.layout.width == "auto" for b in panel.buttons.values())
    assert panel.callbacks.layout.overflow == "hidden auto"
    assert panel.search.layout.flex == "0 0 auto" and panel.callbacks.layout.width == "max-content"
    panel.close()


def test_the_panel_shows_device_time_once_an_activity_kind_is_on(session, sim):
    p = Panel(session)
    sim.run_workload("training", steps=1, seed=2)
    assert "Device time" not in p.refresh().table_html()
    p.set_activity("kernel", True)
    sim.run_workload("training", steps=1, seed=2)
    page = p.refresh().table_html()
    assert page.index("Device time") > page.index("aclrtLaunchKernel")
    assert "launch split per launch function" in page and "MatMulV2" in page
    ui = ControlPanel(session, interval=0.05, auto_refresh=False)
    assert "launch_split" in ui.kind.options
    ui.close()
