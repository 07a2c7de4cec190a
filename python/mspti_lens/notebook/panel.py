"""The control panel's logic, as plain Python over :class:`Session` and :class:`Snapshot`.

:mod:`mspti_lens.notebook.widget` binds these callbacks to ipywidgets; nothing here imports a widget
library, so every behaviour of the panel is testable without a front end (and usable from a
script). Each action goes straight to the session, so a domain toggled here is enabled in MSPTI
at once, while the user's code keeps running on other threads.

>>> from mspti_lens import Session                       # doctest: +SKIP
>>> from mspti_lens.notebook.panel import Panel
>>> p = Panel(Session(library="sim"))
>>> p.set_domain("hccl", False)          # MSPTI stops delivering HCCL callbacks now
>>> p.search("launch")                   # the callback picker's options matching "launch"
>>> view = p.refresh()                   # table, counters, backend label; view.figure() to plot
>>> Panel(session, run="out/")           # also shows a recorded run's ranks (mspti_lens.notebook.run_view)
"""

from __future__ import annotations

import html
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from ..catalog import DOMAINS, Callback, enableable
from ..plots.host import KINDS
from ..self_cost import drops_text, per_pair_text
from ..session import Session
from ..snapshot import Snapshot
from ..units import check_unit
from .run_view import refreshed_run_html
from .snapshot_repr import device_html
from .tables import Table, count_of

PLOT_KINDS = KINDS  # defined once, with the dispatch, in mspti_lens.plots


@dataclass(frozen=True)
class Option:
    """One entry of the callback picker: a callback id, shown by the names users know."""

    key: str  # the enum name, e.g. MSPTI_CBID_RUNTIME_LAUNCH (what enable/disable take)
    label: str  # e.g. "aclrtLaunchKernel (+3) · runtime LAUNCH"
    callback: Callback

    def matches(self, query: str) -> bool:
        q = query.strip().lower()
        if not q:
            return True
        c = self.callback
        words = (c.enum, c.short, c.domain_name, *c.names_26x, *c.names_8x)
        return any(q in w.lower() for w in words)


def _label(c: Callback) -> str:
    names = c.names_26x or c.names_8x
    first = names[0] if names else c.short
    more = f" (+{len(names) - 1})" if len(names) > 1 else ""
    return f"{first}{more} · {c.domain_name} {c.short}"


def options() -> tuple[Option, ...]:
    """Every callback id that can be enabled, labelled by its first function name."""
    return tuple(Option(c.enum, _label(c), c) for c in enableable())


@dataclass
class View:
    """What one refresh shows: the snapshot of the current window and the panel's state."""

    snapshot: Snapshot
    table: Any  # Snapshot.table(): a notebook.tables.Table (len() 0 when nothing was recorded)
    backend: str
    simulated: bool
    running: bool
    enabled: list[str]
    unmatched: int
    in_flight: int
    calls: int
    taken_at: float = field(default_factory=time.time)
    error: str | None = None
    slowest: pl.DataFrame = field(default_factory=pl.DataFrame)  # Snapshot.slowest(), cut to N
    run_html: str | None = None  # the run's view (notebook/run_view.py) when the panel follows a run
    self_cost: dict | None = None  # what mspti-lens costs this process and lost (self_cost.py)

    def status_text(self) -> str:
        state = "running" if self.running else "stopped"
        return (
            f"{self.backend} · {state} · {self.calls:,} calls · "
            f"{self.unmatched:,} unmatched · {self.in_flight:,} in flight"
            + "".join(f" · {v}" for _, v in self._cost_lines())
        )

    def _cost_lines(self) -> list[tuple[str, str]]:
        """(kind, text): the self cost, and any drop or busy subscriber slot on its own."""
        cost = self.self_cost
        if not cost:
            return []
        out = [("cost", f"self cost {per_pair_text(cost)}, {cost['core_pct']:.2f} % of a core")]
        if drops_text(cost):
            out.append(("lost", drops_text(cost)))
        if cost.get("subscriber_busy"):
            out.append(
                ("lost", f"MSPTI's subscriber slot is held by another tool: {cost['subscriber_busy']}")
            )
        return out

    def status_html(self, live_for: float | None = None) -> str:
        """The status line; ``live_for`` (seconds) makes the "running" mark vanish by itself
        unless the line is rewritten within that time (a live panel rewrites it)."""
        colour = "#664d03" if self.simulated else "#0a3622"
        if not self.running:
            state = "■ stopped"
        elif live_for:
            state = (
                "<style>@keyframes mspti-lens-gone { to { font-size: 0; } }</style>"
                "<span class='mspti-lens-running' style='color:#198754;"
                f"animation:mspti-lens-gone 0s linear {live_for:g}s forwards'>● running</span>"
            )
        else:
            state = '<span style="color:#198754">● running</span>'
        err = f' · <span style="color:#b02a37">{html.escape(self.error)}</span>' if self.error else ""
        cost = "".join(
            f' · <span class="mspti-lens-self-{k}"'
            + (' style="color:#b02a37;font-weight:bold"' if k == "lost" else ' style="color:#6c757d"')
            + f">{html.escape(v)}</span>"
            for k, v in self._cost_lines()
        )
        return (
            f'<span style="color:{colour};font-weight:bold">{html.escape(self.backend)}</span> · {state}'
            f" · <b>{self.calls:,}</b> calls · <b>{self.unmatched:,}</b> unmatched"
            f" · <b>{self.in_flight:,}</b> in flight{err}{cost}"
        )

    def table_html(self) -> str:
        """The summary as a plain HTML table (numbers right-aligned, no dtype row, no quoting)."""
        if not len(self.table):
            return "<p><i>(no calls recorded in this window)</i></p>" + device_html(self.snapshot)
        n = len(self.snapshot)
        shown = len(self.table)
        caption = (
            f"{shown} of {count_of(n, 'API')} by total time"
            if shown < n
            else f"{count_of(n, 'API')} by total time"
        )
        host = self.table.html(caption + (" · SIMULATED" if self.simulated else ""))
        return host + device_html(self.snapshot, self.table.unit, len(self.table) or None)

    def slowest_html(self) -> str:
        """The slowest calls kept, slowest first: which call, on which thread, when."""
        if not len(self.slowest):
            return ""
        shown = self.slowest.select(
            "name",
            "callback",
            "thread_id",
            pl.col("start").dt.strftime("%H:%M:%S%.6f").alias("start (UTC)"),
            "duration_ns",
        )
        caption = f"slowest {len(shown)} calls kept" + (" · SIMULATED" if self.simulated else "")
        return Table(shown, top=0).html(caption)


class Panel:
    """State and actions of the control panel, bound to one :class:`Session`.

    ``unit`` and ``top`` shape the summary table; ``slowest`` is how many of the slowest calls
    kept (at most ``SLOWEST_PER_API`` per API) the second table lists (0: none); ``plot_kind`` is
    one of :data:`PLOT_KINDS`. ``run`` (a folder of ``python -m mspti_lens record --out DIR``, or
    a :class:`mspti_lens.runs.run.Run`) adds that run's ranks, re-read at every refresh.
    ``on_change`` callbacks are called with the new :class:`View` after every action and refresh
    (the widgets use this to redraw)."""

    SLOWEST_PER_API = 3  # so that one slow API does not fill the whole list

    def __init__(
        self,
        session: Session,
        *,
        unit: str | None = None,
        top: int = 15,
        plot_kind: str = "distribution",
        export_dir: str | os.PathLike = ".",
        slowest: int = 10,
        run: Any = None,
    ):
        if not isinstance(session, Session):
            raise TypeError(f"Panel needs a mspti_lens.Session, not {type(session).__name__}")
        self.session = session
        self.unit = None if unit in (None, "auto") else check_unit(unit)
        if not isinstance(top, int) or top < 1:
            raise ValueError(f"top must be a positive int, not {top!r}")
        self.top = top
        if not isinstance(slowest, int) or isinstance(slowest, bool) or slowest < 0:
            raise ValueError(f"slowest must be an int >= 0 (calls to list; 0 for none), not {slowest!r}")
        self.slowest = slowest
        self.run = self._open_run(run)
        self.plot_kind = self._check_kind(plot_kind)
        self.export_dir = os.fspath(export_dir)
        self.windows: list[Snapshot] = []  # windows closed by reset(), newest last
        self.last: View | None = None
        self.on_change: list[Callable[[View], None]] = []
        self._options = options()

    @staticmethod
    def _open_run(run: Any):
        if run is None or hasattr(run, "ranks"):
            return run
        if not isinstance(run, (str, os.PathLike)):
            raise TypeError(f"run must be a folder of a recorded run or a Run, not {type(run).__name__}")
        from ..runs.run import open_run

        return open_run(os.path.expanduser(os.fspath(run)))

    @staticmethod
    def _check_kind(kind: str) -> str:
        if kind not in PLOT_KINDS:
            raise ValueError(f"unknown plot kind {kind!r}; valid kinds are {', '.join(PLOT_KINDS)}")
        return kind

    # -- what is traced --------------------------------------------------------------------------
    @property
    def domains(self) -> list[str]:
        return list(DOMAINS)

    def domain_enabled(self, domain: str) -> bool:
        """True when every callback of the domain is enabled."""
        on, total = self.domain_state(domain)
        return on == total

    def domain_state(self, domain: str) -> tuple[int, int]:
        """(enabled, total) callbacks of a domain: all, none, or a mixed state in between."""
        d = self._domain(domain)
        want = {o.key for o in self._options if o.callback.domain == d}
        return len(want & set(self.session.enabled)), len(want)

    def set_domain(self, domain: str, on: bool) -> View:
        """Enable or disable a whole domain at once (``msptiEnableDomain``)."""
        self._domain(domain)
        if on:
            self.session.enable(domain)
        else:
            self.session.disable(domain)
        return self.refresh()

    # Activity kinds (device time): toggled like domains, collected natively.
    @property
    def activity_kinds(self) -> list[str]:
        from ..activity import KINDS

        return list(KINDS)

    def activity_enabled(self, kind: str) -> bool:
        return kind in self.session.activity

    def set_activity(self, kind: str, on: bool) -> View:
        """Collect (or stop collecting) one activity kind, at once while running."""
        (self.session.enable_activity if on else self.session.disable_activity)(kind)
        return self.refresh()

    @staticmethod
    def _domain(domain: str) -> int:
        key = str(domain).strip().lower()
        if key not in DOMAINS:
            raise ValueError(f"unknown domain {domain!r}; valid domains are {', '.join(DOMAINS)}")
        return DOMAINS[key]

    def search(self, query: str = "") -> list[Option]:
        """The picker's options whose enum, short or function names contain ``query``."""
        return [o for o in self._options if o.matches(query)]

    def option(self, key: str) -> Option:
        for o in self._options:
            if key in (o.key, o.label):
                return o
        raise ValueError(f"unknown callback {key!r}; use one of the keys of Panel.search()")

    def selected(self) -> list[str]:
        """Keys (enum names) of the enabled callbacks."""
        return list(self.session.enabled)

    def select(self, visible: Sequence[str], chosen: Sequence[str]) -> View:
        """Apply the picker: of the ``visible`` options, enable the ``chosen`` ones and disable the
        rest; options hidden by the search are left as they are."""
        vis = [self.option(k).key for k in visible]
        ch = {self.option(k).key for k in chosen}
        unknown = ch - set(vis)
        if unknown:
            raise ValueError(f"chosen callbacks {sorted(unknown)} are not among the visible options")
        on_now = set(self.session.enabled)
        turn_on = [k for k in vis if k in ch and k not in on_now]
        turn_off = [k for k in vis if k not in ch and k in on_now]
        if turn_on:
            self.session.enable(*turn_on)
        if turn_off:
            self.session.disable(*turn_off)
        return self.refresh()

    def toggle(self, key: str, on: bool) -> View:
        """Enable or disable one callback id of the picker (nothing else changes)."""
        k = self.option(key).key
        if on:
            self.session.enable(k)
        else:
            self.session.disable(k)
        return self.refresh()

    def enable(self, *what) -> View:
        """Enable anything :meth:`Session.enable` takes (e.g. ``"aclrtLaunchKernel"``)."""
        self.session.enable(*what)
        return self.refresh()

    def disable(self, *what) -> View:
        self.session.disable(*what)
        return self.refresh()

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return not self.session.closed and self.session.running

    def start(self) -> View:
        self.session.start()
        return self.refresh()

    def stop(self) -> View:
        self.session.stop()
        return self.refresh()

    def reset(self) -> View:
        """Start a new window; the closed one is kept in :attr:`windows` (nothing is lost)."""
        self.windows.append(self.session.reset())
        return self.refresh()

    def export(self, path: str | os.PathLike | None = None) -> str:
        """Save the current window as Parquet (``mspti_lens.load`` reads it); returns the path."""
        if path is None or str(path).strip() == "":
            stamp = time.strftime("%Y%m%d-%H%M%S")
            path = os.path.join(self.export_dir, f"mspti-lens-{stamp}.parquet")
        path = os.fspath(path)
        parent = os.path.dirname(path)
        if parent and not os.path.isdir(parent):
            raise ValueError(f"cannot export to {path}: the folder {parent} does not exist")
        self.session.snapshot().save(path)
        return path

    # -- display ---------------------------------------------------------------------------------
    def set_unit(self, unit: str | None) -> View:
        self.unit = None if unit in (None, "auto") else check_unit(unit)
        return self.refresh()

    def set_plot_kind(self, kind: str) -> None:
        self.plot_kind = self._check_kind(kind)

    def refresh(self) -> View:
        """Take a snapshot of the current window and build the view (no plot: see :meth:`figure`)."""
        snap = self.session.snapshot()
        counters = snap.counters
        view = View(
            snapshot=snap,
            table=snap.table(self.unit, self.top) if len(snap) else Table(pl.DataFrame()),
            backend=self.session.backend.label,
            simulated=self.session.backend.simulated,
            running=self.running,
            enabled=self.selected(),
            unmatched=int(counters.get("unmatched", 0)),
            in_flight=int(counters.get("in_flight", 0)),
            calls=snap.total_calls,
            slowest=snap.slowest(per_api=self.SLOWEST_PER_API).head(self.slowest)
            if self.slowest and len(snap)
            else pl.DataFrame(),
            run_html=None if self.run is None else refreshed_run_html(self.run),
            self_cost=snap.meta.get("self_cost"),
        )
        self.last = view
        for cb in list(self.on_change):
            cb(view)
        return view

    def figure(self, view: View | None = None):
        """The plot of a view (the last one by default), of kind :attr:`plot_kind`."""
        from .. import plots

        snap = (view or self.last or self.refresh()).snapshot
        return plots.plot(snap, self.plot_kind, top=4)

    def __repr__(self) -> str:
        v = self.last or self.refresh()
        return f"<mspti_lens.notebook.panel.Panel {v.status_text()}>"
