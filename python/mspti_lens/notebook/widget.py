"""The live control panel: ipywidgets bound to the callbacks of :mod:`mspti_lens.notebook.panel`.

>>> from mspti_lens.notebook.widget import ControlPanel      # doctest: +SKIP
>>> ControlPanel(session)                             # shows the panel in a notebook

A toggle per domain, a searchable multi-select of callbacks (by the function names users know),
start / stop / reset / export, and a summary table and latency plot that refresh every
``interval`` seconds on a background thread while collection runs, so the kernel stays free for
the user's own cells. Widgets hold no logic of their own: each one calls a :class:`Panel` method.
"""

from __future__ import annotations

import threading
import traceback
from typing import Any

from .._deps import require
from ..session import Session
from .panel import PLOT_KINDS, Panel, View

UNIT_CHOICES = ("auto", "ns", "us", "ms", "s")


def _close_tree(widget) -> None:
    for child in getattr(widget, "children", ()):
        _close_tree(child)
    widget.close()


class ControlPanel:
    """ipywidgets front end of a :class:`Panel`. Display it (it is the last expression of a cell,
    or ``display(panel)``); ``close()`` stops the refresh thread and closes the widgets."""

    def __init__(
        self,
        session: Session | Panel,
        *,
        interval: float = 1.0,
        unit: str | None = None,
        top: int = 15,
        plot: bool = True,
        auto_refresh: bool = True,
    ):
        w = require("ipywidgets")
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, not {interval!r}")
        self.panel = session if isinstance(session, Panel) else Panel(session, unit=unit, top=top)
        self.interval = float(interval)
        self.show_plot = plot
        self._lock = threading.RLock()
        # Set while this panel writes widget values itself (per thread: a user's click arriving on
        # the kernel's thread while the refresh thread redraws must not be mistaken for an echo).
        self._local = threading.local()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._plotted_calls: int | None = None
        self._plotted_kind: str | None = None
        self.refreshes = 0
        self.errors: list[str] = []

        p = self.panel
        self.status = w.HTML(layout=w.Layout(margin="0 0 4px 0"))
        self.toggles = {
            d: w.ToggleButton(
                value=p.domain_enabled(d),
                description=d,
                tooltip=f"trace every {d} API (msptiEnableDomain)",
                icon="check" if p.domain_enabled(d) else "",
                layout=w.Layout(width="110px"),
            )
            for d in p.domains
        }
        for d, t in self.toggles.items():
            t.observe(lambda ch, d=d: self._on_toggle(d, ch), names="value")
        self.search = w.Text(
            placeholder="search callbacks: launch, HcclAll, memcpy...",
            continuous_update=True,
            layout=w.Layout(width="340px"),
        )
        self.callbacks = w.SelectMultiple(rows=9, layout=w.Layout(width="340px"))
        self.search.observe(lambda ch: self._fill_picker(), names="value")
        self.callbacks.observe(self._on_pick, names="value")
        self.buttons = {
            name: w.Button(description=name, icon=icon, tooltip=tip, layout=w.Layout(width="90px"))
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
            options=UNIT_CHOICES, value=p.unit or "auto", description="unit", layout=w.Layout(width="150px")
        )
        self.unit.observe(lambda ch: self._act(lambda: p.set_unit(ch["new"])), names="value")
        self.kind = w.Dropdown(
            options=PLOT_KINDS, value=p.plot_kind, description="plot", layout=w.Layout(width="200px")
        )
        self.kind.observe(self._on_kind, names="value")
        self.table = w.HTML()
        self.plot = w.Image(format="png", layout=w.Layout(max_width="900px"))

        controls = w.VBox(
            [
                w.HBox([w.HTML("<b>domains</b>", layout=w.Layout(width="70px")), *self.toggles.values()]),
                w.HBox(
                    [
                        w.HTML("<b>callbacks</b>", layout=w.Layout(width="70px")),
                        w.VBox([self.search, self.callbacks]),
                    ]
                ),
            ]
        )
        actions = w.VBox(
            [
                w.HBox(list(self.buttons.values())),
                w.HBox([self.export_path, self.unit]),
                w.HBox([self.kind]),
                self.message,
            ]
        )
        self.widget = w.VBox(
            [
                w.HTML("<b>mspti-lens</b> · host latency of Runtime and HCCL API calls"),
                self.status,
                w.HBox([controls, actions]),
                self.table,
                self.plot,
            ]
        )
        self.widget.add_class("mspti-lens-panel")
        self.table.add_class("mspti-lens-table")
        self.status.add_class("mspti-lens-status")
        self._fill_picker()
        p.on_change.append(self._on_view)
        self.refresh(plot=True)
        if auto_refresh:
            self.start_auto_refresh()

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

    def _on_pick(self, change: dict) -> None:
        if self._syncing:
            return
        visible = [key for _, key in self.callbacks.options]
        self._act(lambda: self.panel.select(visible, list(change["new"])))

    def _on_kind(self, change: dict) -> None:
        self.panel.set_plot_kind(change["new"])
        self._render_plot(force=True)

    def _export(self) -> None:
        try:
            path = self.panel.export(self.export_path.value or None)
            self.message.value = f"saved <code>{path}</code>"
        except Exception as e:
            self.message.value = f'<span style="color:#b02a37">{type(e).__name__}: {e}</span>'

    def _fill_picker(self) -> None:
        opts = [(o.label, o.key) for o in self.panel.search(self.search.value)]
        on = set(self.panel.selected())
        with self._syncing_state():
            self.callbacks.options = opts
            self.callbacks.value = tuple(k for _, k in opts if k in on)

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
            self.status.value = view.status_html()
            self.table.value = view.table_html()
            on = set(view.enabled)
            for d, t in self.toggles.items():
                full = self.panel.domain_enabled(d)
                t.value = full
                t.icon = "check" if full else ""
            visible = [k for _, k in self.callbacks.options]
            self.callbacks.value = tuple(k for k in visible if k in on)
            self.buttons["start"].disabled = view.running
            self.buttons["stop"].disabled = not view.running
        self.refreshes += 1

    # -- refreshing ------------------------------------------------------------------------------
    def refresh(self, plot: bool = True) -> View:
        """Snapshot now and redraw the table (and the plot if the data changed)."""
        with self._lock:
            view = self.panel.refresh()
            if plot:
                self._render_plot()
            return view

    def _render_plot(self, force: bool = False) -> None:
        if not self.show_plot:
            return
        with self._lock:
            view = self.panel.last
            if view is None:
                return
            if not force and view.calls == self._plotted_calls and self.panel.plot_kind == self._plotted_kind:
                return
            from .. import plots

            fig = self.panel.figure(view)
            self.plot.value = plots.to_png(fig, dpi=80)
            self._plotted_calls, self._plotted_kind = view.calls, self.panel.plot_kind

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                if self.panel.session.closed:
                    break
                if self.panel.running:
                    self.refresh()
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

    def stop_auto_refresh(self) -> None:
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=5 * self.interval + 5)
        self._thread = None

    @property
    def auto_refreshing(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def close(self) -> None:
        """Stop refreshing and close the widgets (the session stays open)."""
        self.stop_auto_refresh()
        try:
            self.panel.on_change.remove(self._on_view)
        except ValueError:
            pass
        _close_tree(self.widget)

    # -- display ---------------------------------------------------------------------------------
    def _repr_mimebundle_(self, **kw: Any):
        return self.widget._repr_mimebundle_(**kw)

    def __repr__(self) -> str:
        v = self.panel.last
        return f"<mspti_lens ControlPanel {v.status_text() if v else ''}>"
