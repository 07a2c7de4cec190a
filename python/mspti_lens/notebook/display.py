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
from ..snapshot import COUNTERS, SIMULATED_BANNER_HTML, Snapshot, format_ns, frame_html

# Figures are rendered at this many pixels per CSS pixel, so they are sharp on HiDPI screens
# (browsers scale the image down to its CSS size; at ratio 1 nothing is lost but bytes).
PIXEL_RATIO = 2
CSS_DPI = 100  # CSS pixels per figure inch


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


class Status(dict):
    """``%mspti status``: a dict (every field, easy to use in code) that renders as a few lines:
    the state, the enabled callbacks per domain, the window's calls and any non-zero counter."""

    def _lines(self) -> list[tuple[str, str]]:
        if "state" not in self:  # no session yet
            return [("backend", f"{self['backend']} ({self['library']})"), ("session", self["session"])]
        problems = [f"{k.replace('_', ' ')} {self[k]:,}" for k in (*COUNTERS, "in_flight") if self.get(k)]
        problems += [k for k in ("poisoned", "forked") if self.get(k) is True]
        kept = self.get("windows_kept", 0)
        return [
            ("state", f"{self['state']} on {self['backend']} · clock {self.get('clock', '?')}"),
            ("enabled", enabled_per_domain(self.get("enabled", []))),
            (
                "calls",
                f"{self.get('calls', 0):,} in this window" + (f" · {kept} earlier kept" if kept else ""),
            ),
            ("counters", ", ".join(problems) if problems else "all 0 (every call paired)"),
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
    """A DataFrame as plain text: a header, aligned columns (text left, numbers right), no dtype
    row, no quotes, no shape line."""
    text_cols = {c for c, t in zip(df.columns, df.dtypes) if t == pl.String}

    def show(v: object) -> str:
        if v is None:
            return ""
        return f"{v:,}" if isinstance(v, int) else f"{v:,.1f}" if isinstance(v, float) else str(v)

    rows = [[show(v) for v in r] for r in df.iter_rows()]
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(df.columns)]

    def line(values: list[str]) -> str:
        return "  ".join(
            v.ljust(w) if c in text_cols else v.rjust(w) for c, v, w in zip(df.columns, values, widths)
        ).rstrip()

    out = [caption] if caption else []
    out += [line(list(df.columns)), line(["-" * w for w in widths]), *(line(r) for r in rows)]
    return "\n".join(out)


def png_html(png: bytes, css_width: int, cls: str = "") -> str:
    data = base64.b64encode(png).decode()
    c = f' class="{cls}"' if cls else ""
    return f'<img{c} src="data:image/png;base64,{data}" width="{css_width}" style="max-width:100%">'


def render_figure(fig) -> tuple[bytes, int, int]:
    """PNG bytes at :data:`PIXEL_RATIO` and the figure's size in CSS pixels."""
    from ..plots import to_png

    w, h = fig.get_size_inches()
    return to_png(fig, dpi=CSS_DPI * PIXEL_RATIO), round(w * CSS_DPI), round(h * CSS_DPI)


def figure_bundle(fig) -> tuple[dict, dict]:
    """A figure as a display bundle (PNG with a text fallback naming it) and its metadata (the
    CSS size, so the front end shows the HiDPI PNG sharp and at its intended size)."""
    title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) is not None else ""
    if not title and fig.axes:
        title = fig.axes[0].get_title()
    png, w, h = render_figure(fig)
    data = {"image/png": png, "text/plain": f"<mspti-lens figure: {title}>"}
    return data, {"image/png": {"width": w, "height": h}}


class ConfiguredSnapshot(Snapshot):
    """A :class:`Snapshot` shown with the magic's ``unit`` and ``top`` (0: every row), saying
    when its table is cut and which window it is (``where``); with ``figure`` set (a matplotlib
    figure), the figure is part of the same output, under the table."""

    def __init__(self, snap: Snapshot, unit: str | None, top: int | None, where: str = ""):
        super().__init__(snap._native, snap.meta)
        self._unit, self._top, self.where = unit, (top or None), where
        self._figure: tuple[bytes, int, int] | None = None
        self.device = snap.device  # activity data (issue 11) travels with the snapshot

    def table(self, unit: str | None = None, top: int | None = None):
        return super().table(unit or self._unit, top or self._top)

    def attach_figure(self, fig) -> None:
        self._figure = render_figure(fig)

    def _caption(self) -> str:
        n, shown = len(self), len(self.table())
        what = f"{shown} of {n} APIs; `%config MsptiMagics.top = 0` for all" if shown < n else f"{n} APIs"
        return f"{what} · by total time" + (f" · {self.where}" if self.where else "")

    def __repr__(self) -> str:
        head = self._title()
        if not len(self):
            return head + "\n(no calls recorded)" + (f" · {self.where}" if self.where else "")
        return head + "\n" + frame_text(self.table(), self._caption())

    def _repr_html_(self) -> str:
        banner = SIMULATED_BANNER_HTML if self.simulated else ""
        if len(self):
            body = frame_html(self.table(), self._caption())
        else:
            body = "<p>(no calls recorded)" + (f" · {html.escape(self.where)}" if self.where else "") + "</p>"
        img = png_html(self._figure[0], self._figure[1]) if self._figure else ""
        return f"{banner}<div><b>{html.escape(self._title())}</b></div>{body}{img}"

    def _repr_png_(self) -> bytes | None:
        return self._figure[0] if self._figure else None


def _pct(v: float | None) -> str:
    if v is None or v != v:  # null, or NaN from a zero before
        return ""
    return f"{v:+,.1f} %".replace("-", "−")


def _dur(v: float | None) -> str:
    return "" if v is None else format_ns(float(v))


class Table:
    """Any DataFrame shown as a plain table (no dtype row, no quotes, every row); ``frame`` is the
    DataFrame itself, and its other attributes are the frame's."""

    def __init__(self, frame: pl.DataFrame, caption: str = ""):
        self.frame, self.caption = frame, caption

    def __getattr__(self, name: str) -> Any:
        if name == "frame":  # not set yet (during unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.frame, name)

    def __len__(self) -> int:
        return len(self.frame)

    def shown(self) -> pl.DataFrame:
        return self.frame

    def _caption(self) -> str:
        return self.caption

    def __repr__(self) -> str:
        return frame_text(self.shown(), self._caption())

    def _repr_html_(self) -> str:
        return frame_html(self.shown(), self._caption())


class DiffTable(Table):
    """``%mspti diff A B``: the before/after frame of :meth:`Snapshot.diff` (``frame``), shown
    with units and signed percentages."""

    COLUMNS = (("num_calls", "calls"), ("avg_ns", "avg"), ("med_ns", "med"), ("p99_ns", "p99"))

    def __init__(self, frame: pl.DataFrame, labels: tuple[str, str] = ("A", "B")):
        super().__init__(frame)
        self.labels = labels

    def shown(self) -> pl.DataFrame:
        """The frame as text cells: one column per side and measure, and the changes."""
        a, b = "A", "B"  # the caption names them: short columns
        f = self.frame
        cols: dict[str, list] = {"domain": f["domain"].to_list(), "name": f["name"].to_list()}
        for c, title in self.COLUMNS:
            for side, label in (("before", a), ("after", b)):
                values = f[f"{c}_{side}"].to_list()
                cols[f"{title} {label}"] = (
                    ["" if v is None else f"{v:,}" for v in values]
                    if c == "num_calls"
                    else list(map(_dur, values))
                )
            if c != "num_calls":
                cols[f"{title} Δ"] = [_pct(v) for v in f[f"{c.removesuffix('_ns')}_change_pct"].to_list()]
        return pl.DataFrame(cols, schema={k: pl.String for k in cols})

    def _caption(self) -> str:
        return f"A (before): {self.labels[0]} · B (after): {self.labels[1]} · Δ: change from A to B"


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


class WidgetBar:
    """A progress bar as an ipywidgets IntProgress with a counting label; when it ends it is
    replaced by one line of static text (so a saved notebook shows the outcome, not a dead
    widget)."""

    def __init__(self, what: str, total: int, unit: str):
        import ipywidgets as w
        from IPython.display import display

        self.what, self.total, self.unit = what, total, unit
        self._t0 = time.perf_counter()
        self.bar = w.IntProgress(value=0, min=0, max=max(total, 1), layout=w.Layout(width="300px"))
        self.label = w.HTML()
        self.box = w.HBox([w.HTML(f"<b>{html.escape(what)}</b>&nbsp;"), self.bar, self.label])
        self.box.add_class("mspti-lens-progress")
        self._handle = display(self.box, display_id=True)
        self.update(0)

    def _text(self, done: int) -> str:
        return f"{done:,}/{self.total:,} {self.unit} · {time.perf_counter() - self._t0:.1f} s"

    def update(self, done: int, total: int | None = None) -> None:
        self.bar.value = min(done, self.total)
        self.label.value = "&nbsp;" + html.escape(self._text(done))

    def close(self, done: int, interrupted: bool = False) -> None:
        text = f"{self.what}: {self._text(done)}" + (" · interrupted" if interrupted else "")
        colour = "#842029" if interrupted else "#0a3622"
        if self._handle is not None:
            self._handle.update(
                {"text/plain": text, "text/html": f'<div style="color:{colour}">{html.escape(text)}</div>'},
                raw=True,
            )
        self.box.close()
        for child in self.box.children:
            child.close()


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
    "frame_text",
    "in_jupyter",
]
