"""The live control panel: ipywidgets bound to the callbacks of :mod:`mspti_lens.notebook.panel`.

>>> from mspti_lens.notebook.widget import ControlPanel      # doctest: +SKIP
>>> ControlPanel(session)                             # shows the panel in a notebook

A toggle per domain (showing "12 of 36" when a domain is partly enabled), a searchable list of
checkboxes, one per callback id (a click toggles that one), start / stop / reset / export, a
summary table, the slowest calls kept, a latency plot (any of ``PLOT_KINDS``, "timeline" for p50/p99
over time) and, with ``run=DIR``, a recorded run's ranks, all refreshed every ``interval`` seconds
on a background thread while collection runs, so the kernel stays free for the user's own
cells. Widgets hold no logic of their own: each one calls a :class:`Panel` method. When the
session closes (or ``close()``), the panel leaves a static final view in the notebook: the last
tables and plot.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any

from .._deps import require
from ..plots.figure import PIXEL_RATIO, render_figure
from ..session import Session
from .display import final_view_html
from .panel import PLOT_KINDS, Panel, View

UNIT_CHOICES = ("auto", "ns", "us", "ms", "s")
MAX_PLOT_WIDTH = 960  # CSS pixels; wider figures are scaled down (still sharp: rendered at 2x)
PLOT_EVERY_S = 3.0  # a HiDPI figure costs far more than the table: redraw it at most this often
DISCONNECTED_AFTER_S = 10.0  # no heartbeat for this long: the panel says it is disconnected
_ICONS = {"all": "check-square", "some": "minus-square", "none": "square-o"}


def domain_look(name: str, on: int, total: int) -> tuple[str, str, str]:
    """(description, icon, state) of a domain toggle: all, some (a mixed state) or none."""
    state = "all" if on == total else "none" if on == 0 else "some"
    return f"{name} · {on} of {total}", _ICONS[state], state


def _api_names(view: View) -> frozenset[str]:
    """The APIs of the view's table rows."""
    frame = getattr(view.table, "frame", None)
    return frozenset(frame["name"]) if frame is not None and "name" in frame.columns else frozenset()


class ControlPanel:
    """ipywidgets front end of a :class:`Panel`. Display it (it is the last expression of a cell,
    or ``display(panel)``); ``close()`` stops the refresh thread and leaves the final view."""

    def __init__(
        self,
        session: Session | Panel,
        *,
        interval: float = 1.0,
        unit: str | None = None,
        top: int = 15,
        plot: bool = True,
        auto_refresh: bool = True,
        slowest: int = 10,
        run: Any = None,
    ):
        self._w = require("ipywidgets")
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, not {interval!r}")
        self.panel = (
            session
            if isinstance(session, Panel)
            else Panel(session, unit=unit, top=top, slowest=slowest, run=run)
        )
        self.interval = float(interval)
        self.show_plot = plot
        self._init_state()
        self._build_domain_toggles()
        self._build_activity_toggles()
        self._build_picker()
        self._build_actions()
        self._build_views()
        self._lay_out()
        self.panel.on_change.append(self._on_view)
        self.refresh(plot=True)
        if auto_refresh:
            self.start_auto_refresh()

    # -- the steps of __init__, in order -------------------------------------------------------
    def _init_state(self) -> None:
        """The refresh thread's and the final view's state, before any widget exists."""
        self._lock = threading.RLock()
        # Set while this panel writes widget values itself (per thread: a user's click arriving on
        # the kernel's thread while the refresh thread redraws must not be mistaken for an echo).
        self._local = threading.local()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._plotted_calls: int | None = None
        self._plotted_kind: str | None = None
        self._plotted_names: frozenset[str] = frozenset()  # the APIs the plot's table rows named
        self._plotted_clock = ""  # when the plotted snapshot was taken (HH:MM:SS)
        self._plotted_at = float("-inf")
        self._handles: list[Any] = []  # display handles, updated with the final view
        self.finished = False  # True once the final view is in place
        self._finishing = False
        self.refreshes = 0
        self.errors: list[str] = []

    def _build_domain_toggles(self) -> None:
        """The status line and one toggle per domain."""
        w, p = self._w, self.panel
        self.status = w.HTML(layout=w.Layout(margin="0 0 4px 0"))
        self.toggles = {}
        for d in p.domains:
            t = w.ToggleButton(
                tooltip=f"trace every {d} API (msptiEnableDomain); a partly enabled domain shows how many",
                layout=w.Layout(
                    width="auto", min_width="160px", flex="0 0 auto"
                ),  # "runtime · 36 of 36" whole
            )
            t.add_class("mspti-lens-domain")
            t.observe(lambda ch, d=d: self._on_toggle(d, ch), names="value")
            self.toggles[d] = t

    def _build_activity_toggles(self) -> None:
        """Activity kinds (device time): the three a step's split needs."""
        w, p = self._w, self.panel
        self.activity = {
            k: w.ToggleButton(
                value=p.activity_enabled(k),
                description=k,
                layout=w.Layout(width="auto", min_width="110px", flex="0 0 auto"),
            )
            for k in ("kernel", "marker", "communication")
        }
        for k, t in self.activity.items():
            t.observe(lambda ch, k=k: self._on_activity(k, ch), names="value")

    def _build_picker(self) -> None:
        """The search box and the list of callback checkboxes it filters."""
        w, p = self._w, self.panel
        self.search = w.Text(
            placeholder="search callbacks: launch, HcclAll, memcpy...",
            continuous_update=True,
            layout=w.Layout(width="100%", min_width="520px", flex="0 0 auto"),  # the list's width, whole
        )
        self.checkboxes = {}
        for o in p.search(""):
            cb = w.Checkbox(
                description=o.label,
                indent=False,
                tooltip=o.key,
                layout=w.Layout(width="max-content", margin="0"),  # never cut the label
                style={"description_width": "initial"},
            )
            cb.observe(lambda ch, key=o.key: self._on_check(key, ch), names="value")
            self.checkboxes[o.key] = cb
        self.callbacks = w.VBox(
            list(self.checkboxes.values()),
            # one scrollbar: the list is as wide as its longest label and scrolls up and down only
            layout=w.Layout(
                height="210px",
                overflow="hidden auto",  # CSS: x hidden, y scrolls
                width="max-content",
                min_width="520px",
                flex="0 0 auto",
                border="1px solid #ddd",
            ),
        )
        self.callbacks.add_class("mspti-lens-picker")
        self.search.observe(lambda ch: self._filter_picker(), names="value")

    def _build_actions(self) -> None:
        """Start / stop / reset / export, the export path, the unit and the plot kind."""
        w, p = self._w, self.panel
        self.buttons = {
            name: w.Button(
                description=name,
                icon=icon,
                tooltip=tip,
                layout=w.Layout(width="auto", min_width="90px", flex="0 0 auto"),
            )
            for name, icon, tip in (
                ("start", "play", "start (or resume) recording"),
                ("stop", "stop", "stop recording; data is kept"),
                ("reset", "refresh", "start a new window; the closed one is kept in panel.windows"),
                ("export", "download", "save the current window as Parquet"),
            )
        }
        self.buttons["start"].on_click(lambda _: self._act(p.start))
        self.buttons["stop"].on_click(lambda _: self._act(p.stop))
        self.buttons["reset"].on_click(lambda _: self._act(p.reset))
        self.buttons["export"].on_click(lambda _: self._export())
        self.export_path = w.Text(
            placeholder="file.parquet (default: timestamped)", layout=w.Layout(width="260px")
        )
        self.message = w.HTML()
        self.unit = w.Dropdown(
            options=UNIT_CHOICES,
            value=p.unit or "auto",
            description="unit",
            style={"description_width": "initial"},
            layout=w.Layout(width="auto", min_width="130px", flex="0 0 auto"),
        )
        self.unit.observe(lambda ch: self._act(lambda: p.set_unit(ch["new"])), names="value")
        self.kind = w.Dropdown(
            options=PLOT_KINDS,
            value=p.plot_kind,
            description="plot",
            style={"description_width": "initial"},
            layout=w.Layout(width="auto", min_width="200px", flex="0 0 auto"),
        )
        self.kind.observe(self._on_kind, names="value")

    def _build_views(self) -> None:
        """What the panel shows: the tables, the plot, a recorded run's ranks, the heartbeat."""
        w = self._w
        self.table = w.HTML()
        self.slowest = w.HTML()  # the slowest calls kept (Snapshot.slowest), under the summary
        self.run_view = w.HTML()  # a recorded run's ranks (notebook/run_view.py), when the panel has one
        self.run_view.layout.display = "none" if self.panel.run is None else ""
        self.plot = w.Image(format="png", layout=w.Layout(max_width="100%"))
        # Under the plot while it is older than the table (redrawn at most every PLOT_EVERY_S):
        # which snapshot it is of, so that the two never seem to disagree.
        self.plot_note = w.HTML()
        self.plot_note.add_class("mspti-lens-plot-note")
        self.title = w.HTML(
            "<b>mspti-lens</b> · host latency of Runtime and HCCL API calls",
            layout=w.Layout(flex="0 0 auto"),
        )
        self.heartbeat = w.HTML(layout=w.Layout(flex="1 1 auto"))  # "disconnected" once the kernel is gone
        self.heartbeat.add_class("mspti-lens-heartbeat")
        self._beats = 0

    def _lay_out(self) -> None:
        """The widgets in rows and boxes: ``self.widget``, what is displayed."""
        w = self._w
        label = w.Layout(width="80px", flex="0 0 auto")  # one layout for the row labels
        controls = w.VBox(
            [
                w.HBox([w.HTML("<b>domains</b>", layout=label), *self.toggles.values()]),
                w.HBox([w.HTML("<b>device</b>", layout=label), *self.activity.values()]),
                w.HBox(
                    [
                        w.HTML("<b>callbacks</b>", layout=label),
                        w.VBox([self.search, self.callbacks]),
                    ]
                ),
            ],
            layout=w.Layout(flex="0 0 auto", margin="0 12px 0 0"),
        )
        actions = w.VBox(
            [
                w.HBox(list(self.buttons.values()), layout=w.Layout(flex_flow="row wrap")),
                w.HBox([self.export_path, self.unit]),
                w.HBox([self.kind]),
                self.message,
            ]
        )
        self.widget = w.VBox(
            [
                w.HBox([self.title, self.heartbeat]),
                self.status,
                # side by side when there is room, else the actions go under the controls
                w.HBox([controls, actions], layout=w.Layout(flex_flow="row wrap")),
                self.table,
                self.slowest,
                self.plot,
                self.plot_note,
                self.run_view,
            ]
        )
        self.widget.add_class("mspti-lens-panel")
        self.table.add_class("mspti-lens-table")
        self.status.add_class("mspti-lens-status")

    # -- callbacks of the widgets ----------------------------------------------------------------
    def _act(self, fn) -> None:
        try:
            fn()
            self.message.value = ""
        except Exception as e:  # shown in the panel; the kernel keeps working
            self.message.value = f'<span style="color:#b02a37">{type(e).__name__}: {e}</span>'
        self._render_plot(force=True)

    def _on_toggle(self, domain: str, change: dict) -> None:
        if self._syncing:
            return
        self._act(lambda: self.panel.set_domain(domain, bool(change["new"])))

    def _on_activity(self, kind: str, change: dict) -> None:
        if not self._syncing:
            self._act(lambda: self.panel.set_activity(kind, bool(change["new"])))

    def _on_check(self, key: str, change: dict) -> None:
        if self._syncing:
            return
        self._act(lambda: self.panel.toggle(key, bool(change["new"])))

    def _on_kind(self, change: dict) -> None:
        self.panel.set_plot_kind(change["new"])
        self._render_plot(force=True)

    def _export(self) -> None:
        try:
            path = self.panel.export(self.export_path.value or None)
            self.message.value = f"saved <code>{path}</code>"
        except Exception as e:
            self.message.value = f'<span style="color:#b02a37">{type(e).__name__}: {e}</span>'

    def _filter_picker(self) -> None:
        """Show only the callbacks matching the search (hidden ones keep their state)."""
        visible = {o.key for o in self.panel.search(self.search.value)}
        for key, cb in self.checkboxes.items():
            cb.layout.display = "" if key in visible else "none"

    def visible(self) -> list[str]:
        """Keys of the callbacks the search shows."""
        return [k for k, cb in self.checkboxes.items() if cb.layout.display != "none"]

    @property
    def _syncing(self) -> bool:
        return getattr(self._local, "syncing", False)

    def _syncing_state(self):
        panel = self

        class _Guard:
            def __enter__(self):
                panel._lock.acquire()
                self.was = panel._syncing
                panel._local.syncing = True

            def __exit__(self, *exc):
                panel._local.syncing = self.was
                panel._lock.release()

        return _Guard()

    def _on_view(self, view: View) -> None:
        """Every Panel action and refresh lands here: bring the widgets in line with the view."""
        with self._syncing_state():
            # The header and the table of one snapshot, at every refresh (cheap HTML); only the
            # plot is throttled, and says which snapshot it shows while it is older.
            self.status.value = self._status(view)
            self._show_tables(view)
            if view.run_html is not None:
                self.run_view.value = view.run_html
            on = set(view.enabled)
            for d, t in self.toggles.items():
                n, total = self.panel.domain_state(d)
                description, icon, state = domain_look(d, n, total)
                t.value, t.description, t.icon = state == "all", description, icon
                for s in ("all", "some", "none"):
                    (t.add_class if s == state else t.remove_class)(f"mspti-lens-{s}")
            for key, cb in self.checkboxes.items():
                if cb.value != (key in on):
                    cb.value = key in on
            for k, t in self.activity.items():
                t.value = self.panel.activity_enabled(k)
            self.buttons["start"].disabled = view.running
            self.buttons["stop"].disabled = not view.running
        self.refreshes += 1

    def _show_tables(self, view: View) -> None:
        self.table.value = view.table_html()
        self.slowest.value = view.slowest_html()
        stale = self.show_plot and self._plotted_calls is not None and view.calls != self._plotted_calls
        self.plot_note.value = (
            f"<span style='color:#6c757d'>plot of {self._plotted_calls:,} calls at {self._plotted_clock}; "
            f"redrawn at most every {max(self.interval, PLOT_EVERY_S):g} s, the table above is live</span>"
            if stale and self._plotted_calls
            else ""
        )

    def _status(self, view: View) -> str:
        """The status line; while auto-refreshing its "running" mark is live for as long as
        beats come (see :meth:`_beat`), and the line is rewritten at every beat."""
        live = max(DISCONNECTED_AFTER_S, 4 * self.interval) if self.auto_refreshing else None
        return view.status_html(live_for=live) + f"<!-- {self._beats} -->"

    def _beat(self) -> None:
        """Tell the front end the kernel is alive: the heartbeat's HTML is replaced, which restarts
        a CSS timer; when no beat comes for :data:`DISCONNECTED_AFTER_S` (the kernel restarted or
        died) the timer reveals "disconnected", so a dead panel never says "running"."""
        self._beats += 1
        after = max(DISCONNECTED_AFTER_S, 4 * self.interval)
        self.heartbeat.value = (
            f"<!-- beat {self._beats} -->"
            "<style>@keyframes mspti-lens-stale { to { visibility: visible; } }</style>"
            "<span class='mspti-lens-disconnected' style='visibility:hidden;margin-left:8px;"
            "color:#842029;background:#f8d7da;padding:1px 6px;font-weight:bold;"
            f"animation:mspti-lens-stale 0s linear {after:g}s forwards'>"
            f"disconnected: no word from the kernel for {after:g} s (restarted or stopped); this panel "
            "no longer records or acts. Run %mspti panel again.</span>"
        )
        view = self.panel.last
        if view is not None and self.auto_refreshing:
            self.status.value = self._status(view)

    # -- refreshing ------------------------------------------------------------------------------
    def refresh(self, plot: bool = True, throttle: bool = False) -> View:
        """Snapshot now and redraw the table (and the plot if the data changed; with ``throttle``,
        as the background refresh does, at most every :data:`PLOT_EVERY_S`)."""
        with self._lock:
            view = self.panel.refresh()
            if plot:
                self._render_plot(throttle=throttle)
            return view

    def _render_plot(self, force: bool = False, throttle: bool = False) -> None:
        if not self.show_plot:
            return
        with self._lock:
            view = self.panel.last
            if view is None:
                return
            same = view.calls == self._plotted_calls and self.panel.plot_kind == self._plotted_kind
            recent = time.monotonic() - self._plotted_at < max(self.interval, PLOT_EVERY_S)
            # An API new to the table (a domain just toggled on) is drawn at once, not in seconds.
            new_apis = _api_names(view) != self._plotted_names
            if not force and (same or (throttle and recent and not new_apis)):
                return
            if view.calls == 0:  # nothing to draw: no empty axes, the table says why
                self.plot.layout.display = "none"
            else:
                png, width, _ = render_figure(self.panel.figure(view))
                self.plot.value = png
                self.plot.width = str(min(width, MAX_PLOT_WIDTH))
                self.plot.layout.display = ""
                self._plotted_at = time.monotonic()
            self._plotted_calls, self._plotted_kind = view.calls, self.panel.plot_kind
            self._plotted_names = _api_names(view)
            self._plotted_clock = time.strftime("%H:%M:%S", time.localtime(view.taken_at))
            self._show_tables(view)  # the table and the plot show the same snapshot

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._beat()
                if self.panel.session.closed:
                    self.finish("session closed")
                    break
                if self.panel.running:
                    self.refresh(throttle=True)
            except Exception:  # never let the thread die silently: keep the reason
                self.errors.append(traceback.format_exc())
                self.message.value = '<span style="color:#b02a37">refresh failed; see panel.errors</span>'

    def start_auto_refresh(self) -> None:
        """Refresh every ``interval`` seconds on a daemon thread while the session is running."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="mspti-lens-panel", daemon=True)
        self._thread.start()
        # Auto-refreshing from here on, so this first beat also makes the status line's "running"
        # mark live: a kernel restarted before the thread's first beat leaves no "running" behind.
        self._beat()

    def stop_auto_refresh(self) -> None:
        self._stop.set()
        self.heartbeat.value = ""  # no beats on purpose: never a false "disconnected"
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=5 * self.interval + 5)
        self._thread = None

    @property
    def auto_refreshing(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- the end ---------------------------------------------------------------------------------
    def final_html(self, why: str) -> str:
        """The static final view: the last window's table and plot, and why the panel stopped."""
        view = self.panel.last or self.panel.refresh()
        png, width = None, 0
        if self.show_plot and view.calls:
            png, width, _ = render_figure(self.panel.figure(view))
        title = f"{why} · {view.status_text()}"
        tables = view.table_html() + view.slowest_html() + (view.run_html or "")
        return final_view_html(title, tables, png, min(width, MAX_PLOT_WIDTH))

    def finish(self, why: str = "closed") -> None:
        """Stop refreshing and replace the live panel by its static final view, in the running
        front end (the panel's own widgets) and in the notebook's saved output (display update)."""
        with self._lock:
            if self._finishing:
                return
            self._finishing = True
        self.stop_auto_refresh()
        try:
            self.panel.on_change.remove(self._on_view)
        except ValueError:
            pass
        try:
            self.panel.refresh()
        except Exception:  # a forked child or a broken session: show the last view we had
            pass
        page = self.final_html(why)
        final = self._w.HTML(page)
        self.widget.children = [final]
        self.widget.remove_class("mspti-lens-panel")
        for h in self._handles:
            h.update({"text/html": page, "text/plain": f"mspti-lens panel ({why})"}, raw=True)
        self.finished = True

    def close(self) -> None:
        """Stop refreshing and leave the final view (the session stays open)."""
        self.finish("panel closed")

    # -- display ---------------------------------------------------------------------------------
    def _repr_mimebundle_(self, **kw: Any):
        return self.widget._repr_mimebundle_(**kw)

    def _ipython_display_(self) -> None:
        """Displayed with a display id, so that closing the panel can replace its output (also in
        the saved notebook, where no live widget survives) by the final view."""
        from IPython.display import display

        bundle = dict(self.widget._repr_mimebundle_())
        bundle["text/plain"] = f"mspti-lens control panel (live in Jupyter): {self!r}"
        self._handles.append(display(bundle, raw=True, display_id=True))

    def __repr__(self) -> str:
        v = self.panel.last
        return f"<mspti_lens ControlPanel {v.status_text() if v else ''}>"


__all__ = ["PIXEL_RATIO", "ControlPanel", "domain_look"]
