"""What the notebook shows: messages, the status, snapshots with the magic's settings, the diff
table, figures as display bundles, and progress bars. Formatting only: every number comes from a
Snapshot (or its frames)."""

from __future__ import annotations

import base64
import html
import sys
import time
from typing import Any

import polars as pl

from ..catalog import DOMAINS, enableable
from ..plots.figure import figure_bundle, render_figure
from ..self_cost import drops_text, summary_text
from ..snapshot import COUNTERS, Snapshot
from .snapshot_repr import SIMULATED_BANNER_HTML, SIMULATED_TEXT, device_html, device_text
from .tables import Table, count_of


class Message:
    """A short message with an HTML and a plain-text form (``level``: info, warning, error)."""

    _COLOURS = {
        "info": ("#0c5460", "#d1ecf1"),
        "warning": ("#664d03", "#fff3cd"),
        "error": ("#842029", "#f8d7da"),
    }

    def __init__(self, text: str, level: str = "info"):
        self.text, self.level = text, level

    def _repr_html_(self) -> str:
        fg, bg = self._COLOURS.get(self.level, self._COLOURS["info"])
        body = html.escape(self.text).replace("\n", "<br>")
        return f'<div style="color:{fg};background:{bg};padding:3px 8px;border-radius:3px">{body}</div>'

    def __repr__(self) -> str:
        return self.text


def enabled_per_domain(enabled: list[str]) -> str:
    """``runtime: 36 of 36 · hccl: 0 of 12`` for a list of enabled callback enum names."""
    on = set(enabled)
    parts = []
    for name, d in DOMAINS.items():
        ids = [c.enum for c in enableable() if c.domain == d]
        parts.append(f"{name}: {sum(k in on for k in ids)} of {len(ids)}")
    return " · ".join(parts)


def self_cost_lines(cost: Any) -> list[tuple[str, str]]:
    """Status lines of what mspti-lens costs this process and what it lost (self_cost.py);
    a drop or a busy subscriber slot gets a line of its own."""
    if not cost:
        return []
    lines = [
        ("self cost", summary_text({**cost, "drops": {}, "records_dropped": 0, "subscriber_busy": None}))
    ]
    if drops_text(cost):
        lines.append(("dropped", drops_text(cost)))
    if cost.get("subscriber_busy"):
        lines.append(("subscriber", f"held by another tool: {cost['subscriber_busy']}"))
    return lines


class Status(dict):
    """``%mspti status``: a dict (every field, easy to use in code) that renders as a few lines:
    the state, the enabled callbacks per domain, the window's calls and any non-zero counter."""

    def _lines(self) -> list[tuple[str, str]]:
        if "state" not in self:  # no session yet
            return [("backend", f"{self['backend']} ({self['library']})"), ("session", self["session"])]
        problems = [f"{k.replace('_', ' ')} {self[k]:,}" for k in (*COUNTERS, "in_flight") if self.get(k)]
        problems += [k for k in ("poisoned", "forked") if self.get(k) is True]
        kept = self.get("windows_kept", 0)
        earlier = (
            f" · {count_of(kept, 'earlier window')} kept (closed by reset or %%mspti; "
            "`%mspti summary --all` merges them)"
        )
        return [
            ("state", f"{self['state']} on {self['backend']} · clock {self.get('clock', '?')}"),
            ("enabled", enabled_per_domain(self.get("enabled", []))),
            (
                "calls",
                f"{self.get('calls', 0):,} in this window" + (earlier if kept else ""),
            ),
            ("counters", ", ".join(problems) if problems else "all 0 (every call paired)"),
            *self_cost_lines(self.get("self_cost")),
            ("library", str(self["library"])),
        ]

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><th style='text-align:left;padding-right:8px'>{html.escape(k)}</th>"
            f"<td style='text-align:left'>{html.escape(v)}</td></tr>"
            for k, v in self._lines()
        )
        return f"<table><caption style='text-align:left'><b>mspti-lens status</b></caption>{rows}</table>"

    def __repr__(self) -> str:
        lines = self._lines()
        width = max(len(k) for k, _ in lines)
        return "\n".join(["mspti-lens status", *(f"  {k:<{width}}  {v}" for k, v in lines)])


def frame_text(df: pl.DataFrame, caption: str = "") -> str:
    """A DataFrame as plain text, every row, each column in its unit (:class:`Table`)."""
    return Table(df, top=0).text(caption)


def frame_html(df: pl.DataFrame, caption: str = "") -> str:
    """A DataFrame as an HTML table for notebooks, every row, each column in its unit
    (:class:`Table`)."""
    return Table(df, top=0).html(caption)


def png_html(png: bytes, css_width: int, cls: str = "") -> str:
    data = base64.b64encode(png).decode()
    c = f' class="{cls}"' if cls else ""
    return f'<img{c} src="data:image/png;base64,{data}" width="{css_width}" style="max-width:100%">'


class ConfiguredSnapshot(Snapshot):
    """A :class:`Snapshot` shown with the magic's ``unit`` and ``top`` (0: every row), saying
    when its table is cut and which window it is (``where``); with ``figure`` set (a matplotlib
    figure), the figure is part of the same output, under the table."""

    def __init__(
        self,
        snap: Snapshot,
        unit: str | None,
        top: int | None,
        where: str = "",
        all_rows: str = "`%config MsptiMagics.top = 0`",
    ):
        # The activity data travels with the snapshot.
        super().__init__(snap._native, snap.window, activity=snap.activity)
        self._unit, self._top, self.where = unit, (top or None), where
        self._all_rows = all_rows  # how to see every row: the option that cut the table
        self._figure: tuple[bytes, int, int] | None = None

    def table(self, unit: str | None = None, top: int | None = None):
        return super().table(unit or self._unit, top or self._top)

    def attach_figure(self, fig) -> None:
        self._figure = render_figure(fig)

    def _caption(self) -> str:
        n, shown = len(self), len(self.table())
        what = (
            f"{shown} of {count_of(n, 'API')}; {self._all_rows} for all" if shown < n else count_of(n, "API")
        )
        return f"{what} · by total time" + (f" · {self.where}" if self.where else "")

    def __repr__(self) -> str:
        head = self._title()
        dev = device_text(self, self._unit, self._top)
        tail = "\n\n" + dev if dev else ""
        if not len(self):
            return head + "\n(no calls recorded)" + (f" · {self.where}" if self.where else "") + tail
        return head + "\n" + self.table().text(self._caption()) + tail

    def _repr_html_(self) -> str:
        banner = SIMULATED_BANNER_HTML if self.simulated else ""
        if len(self):
            body = self.table().html(self._caption())
        else:
            body = "<p>(no calls recorded)" + (f" · {html.escape(self.where)}" if self.where else "") + "</p>"
        img = png_html(self._figure[0], self._figure[1]) if self._figure else ""
        dev = device_html(self, self._unit, self._top)
        return f"{banner}<div><b>{html.escape(self._title())}</b></div>{body}{img}{dev}"

    def _repr_png_(self) -> bytes | None:
        return self._figure[0] if self._figure else None


class DiffTable(Table):
    """``%mspti diff A B``: the before/after frame of :meth:`Snapshot.diff` (``frame``), shown
    with units, signed changes ("—" where a side has no calls), numbers right, the function
    that gained or lost the most time first, and the SIMULATED banner when either side is
    simulated."""

    COLUMNS = (
        ("num_calls", "calls"),
        ("total_ns", "total"),
        ("avg_ns", "avg"),
        ("med_ns", "med"),
        ("p99_ns", "p99"),
    )

    def __init__(self, frame: pl.DataFrame, labels: tuple[str, str] = ("A", "B"), *, simulated: bool = False):
        super().__init__(frame, top=0)
        self.labels, self.simulated = labels, simulated

    def shown(self) -> pl.DataFrame:
        """One column per side and measure, and the changes, sorted by the time gained or lost
        (|total Δ|: a function on one side only changed by all of its time)."""
        f = self.frame.sort(
            pl.col("total_change_ns").abs(),
            "domain",
            "name",
            descending=[True, False, False],
            nulls_last=True,
        )
        cols: list[pl.Series] = [f["domain"], f["name"]]
        for c, title in self.COLUMNS:
            for side, label in (("before", "A"), ("after", "B")):  # the caption names them
                cols.append(f[f"{c}_{side}"].alias(f"{title} {label}"))
            if c == "total_ns":
                cols.append(f["total_change_ns"].alias(f"{title} Δ"))
            elif c != "num_calls":
                cols.append(f[f"{c.removesuffix('_ns')}_change_pct"].alias(f"{title} Δ"))
        return pl.DataFrame(cols)

    def cells(self):
        times = ("total", "avg", "med", "p99")
        heads, rows, right = Table(
            self.shown(),
            top=0,
            kinds={
                **{f"calls {s}": "count" for s in "AB"},
                **{f"{t} {s}": "time" for t in times for s in "AB"},
                "total Δ": "time_change",
                **{f"{t} Δ": "change" for t in times[1:]},
            },
        ).cells()
        return heads, rows, right

    def _caption(self) -> str:
        return (
            f"A (before): {self.labels[0]} · B (after): {self.labels[1]} · Δ: change from A to B "
            "(red: slower, green: faster) · by |total Δ|, the time gained or lost, largest first"
        )

    def text(self, caption: str | None = None) -> str:
        body = super().text(caption)
        return f"{SIMULATED_TEXT}\n{body}" if self.simulated else body

    def html(self, caption: str | None = None) -> str:
        body = super().html(caption)
        return SIMULATED_BANNER_HTML + body if self.simulated else body

    def cell_style(self, head: str, text: str) -> str:
        """A change's colour: slower (a positive time change) red, faster green."""
        if not head.endswith(" Δ"):
            return ""
        return ";color:#b02a37" if text.startswith("+") else ";color:#146c43" if text.startswith("−") else ""


def final_view_html(title: str, table_html: str, png: bytes | None, css_width: int) -> str:
    """The static view a closed control panel leaves in the notebook (also in a saved one)."""
    img = png_html(png, css_width) if png else ""
    return (
        f'<div class="mspti-lens-final"><div><b>mspti-lens</b> · {html.escape(title)}</div>'
        f"{table_html}{img}</div>"
    )


# -- progress ----------------------------------------------------------------------------------
def in_jupyter() -> bool:
    """True inside a Jupyter kernel (where widgets render), False in a terminal or a script."""
    if "IPython" not in sys.modules:  # a kernel has it imported; a script need not import it
        return False
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _clock(seconds: float) -> str:
    m, sec = divmod(int(round(seconds)), 60)
    return f"{m // 60}:{m % 60:02d}:{sec:02d}" if m >= 60 else f"{m}:{sec:02d}"


class WidgetBar:
    """A progress bar as an ipywidgets IntProgress with a label counting done of total, the
    rate and the time left (as tqdm.notebook shows them); when it ends it is replaced by one
    line of static text (so a saved notebook shows the outcome, not a dead widget)."""

    def __init__(self, what: str, total: int, unit: str, started: float | None = None, show: bool = True):
        import ipywidgets as w
        from IPython.core.interactiveshell import InteractiveShell
        from IPython.display import DisplayHandle

        self.what, self.total, self.unit = what, total, unit
        self._t0 = time.perf_counter() if started is None else started
        self.bar = w.IntProgress(value=0, min=0, max=max(total, 1), layout=w.Layout(width="300px"))
        self.label = w.HTML()
        self.box = w.HBox([w.HTML(f"<b>{html.escape(what)}</b>&nbsp;"), self.bar, self.label])
        self.box.add_class("mspti-lens-progress")
        # The handle exists before anything is shown, so that an interrupt arriving while the bar
        # is being displayed still finds the output to replace (no shell: nothing to replace).
        self._handle = DisplayHandle() if InteractiveShell.initialized() else None
        self._shown = False
        self.update(0)
        if show:
            self.show()

    def show(self) -> None:
        """Display the bar (once)."""
        if self._handle is not None and not self._shown:
            self._shown = True
            self._handle.display(self.box)

    def _text(self, done: int, running: bool = True) -> str:
        t = time.perf_counter() - self._t0
        text = f"{done:,}/{self.total:,} {self.unit} · {t:.1f} s"
        if done and t > 0:
            rate = done / t
            text += f" · {rate:,.1f} {self.unit}/s" if rate < 100 else f" · {rate:,.0f} {self.unit}/s"
            if running and done < self.total:
                text += f" · {_clock((self.total - done) / rate)} left"
        return text

    def update(self, done: int, total: int | None = None) -> None:
        self.bar.value = min(done, self.total)
        self.label.value = "&nbsp;" + html.escape(self._text(done))

    def close(self, done: int, interrupted: bool = False) -> None:
        text = f"{self.what}: {self._text(done, running=False)}" + (" · interrupted" if interrupted else "")
        colour = "#842029" if interrupted else "#0a3622"
        if self._handle is not None:
            self._handle.update(
                {"text/plain": text, "text/html": f'<div style="color:{colour}">{html.escape(text)}</div>'},
                raw=True,
            )
        self.box.close()
        for child in self.box.children:
            child.close()

    def replace(self, message: Message) -> None:
        """Show ``message`` where the bar (or its closing line) is: one output, not two."""
        if self._handle is not None:
            self._handle.update({"text/plain": message.text, "text/html": message._repr_html_()}, raw=True)


__all__ = [
    "ConfiguredSnapshot",
    "DiffTable",
    "Message",
    "Status",
    "Table",
    "WidgetBar",
    "enabled_per_domain",
    "figure_bundle",
    "final_view_html",
    "frame_html",
    "frame_text",
    "in_jupyter",
]
