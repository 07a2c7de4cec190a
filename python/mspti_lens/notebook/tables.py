"""The one table formatter of mspti-lens: any polars frame as plain text or an HTML table, each
column shown in the unit its name says (:data:`COLUMN_UNITS`), with thousands separators, no
dtype row, no quotes, no scientific notation, numbers aligned right, and a caption saying when
rows are cut. Formatting only: every value is the frame's, nothing is computed here.

The magic's tables, ``Snapshot.table()``, the diff table, the panel's tables and the device and
run frames a notebook shows (``Table(snap.kernels())``) all go through :class:`Table`; the API
itself keeps returning polars frames."""

from __future__ import annotations

import html
import math
import re
import time
from typing import Any

import polars as pl

from ..columns import COLUMN_UNITS, UNIT_KINDS
from ..units import check_unit, format_ns

# The suffix a column's header loses because every cell carries its unit.
_HEADER_SUFFIX = {"time": "_ns", "clock_ns": "_ns", "gbps": "_gbps"}
MAX_ROWS = 50  # rows a Table shows unless told (``top=0``: every row)
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
MISSING = "—"
SCROLL_BOX_STYLE = "overflow-x:auto;max-width:100%"
NOTE_STYLE = "font-size:12px;color:#664d03"  # a line under a table saying what it lacks


def count_of(n: int, word: str, plural: str | None = None) -> str:
    """``1 API``, ``22 APIs``, ``1,024 calls``: a count with its noun in the right number."""
    return f"{n:,} {word if n == 1 else plural or word + 's'}"


def column_kind(name: str, dtype: Any) -> str:
    """The kind of a column (see :data:`~mspti_lens.columns.COLUMN_UNITS`) from its name and
    dtype; a datetime column is a wall-clock instant whatever its name."""
    if dtype == pl.String or dtype == pl.Categorical:
        return "text"
    if dtype == pl.Boolean:
        return "bool"
    if isinstance(dtype, pl.Datetime) or dtype == pl.Datetime:
        return "datetime"
    numeric = dtype.is_numeric()
    if numeric:
        for pattern, kind in COLUMN_UNITS:
            if re.fullmatch(pattern, name):
                return kind
        return "count" if dtype.is_integer() else "number"
    return "other"


def _sig3(x: float) -> str:
    """Three significant digits, thousands separators, never an exponent."""
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    decimals = min(9, 2 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


def format_bytes(v: float) -> str:
    """Bytes in binary units: 12 B, 8.00 MiB."""
    x, i = float(v), 0
    while abs(x) >= 1024 and i < len(_BYTE_UNITS) - 1:
        x, i = x / 1024, i + 1
    return f"{x:,.0f} B" if i == 0 else f"{_sig3(x)} {_BYTE_UNITS[i]}"


def format_pct(v: float) -> str:
    """A signed-free percentage with one decimal: 53.1 %; a change is written with its sign by
    :func:`format_change`."""
    return f"{v:,.1f} %"


def format_change(v: float) -> str:
    """A change in percent: +12.5 %, −3.0 %, 0.0 % (never −0.0 %)."""
    r = round(v, 1)
    if r == 0:
        return "0.0 %"
    return f"{r:+,.1f} %".replace("-", "−")


def format_time_change(v: float, unit: str | None = None) -> str:
    """A change of time with its sign and unit: +1.11 ms, −4.00 µs, 0 ns."""
    if v == 0:
        return format_ns(0, unit)
    return ("+" if v > 0 else "−") + format_ns(abs(v), unit)


def format_clock(v: float, per_second: float) -> str:
    """A wall-clock instant (Unix time, ``per_second`` units a second) as local time of day,
    to the microsecond for ns clocks."""
    s = float(v) / per_second
    day = time.strftime("%H:%M:%S", time.localtime(s))
    if per_second == 1:
        return day
    return f"{day}.{int(round((s % 1) * 1e6)) % 1_000_000:06d}"


def format_cell(v: Any, kind: str, unit: str | None = None) -> str:
    """One value as its column kind shows it (``unit`` fixes the time unit)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return MISSING
    if kind == "time":
        return format_ns(float(v), unit)
    if kind == "age":
        a = float(v)
        return (
            f"{a:.0f} s ago" if a < 90 else f"{a / 60:.0f} min ago" if a < 5400 else f"{a / 3600:.1f} h ago"
        )
    if kind == "seconds":
        return format_ns(float(v) * 1e9, unit)
    if kind == "clock_ns":
        return format_clock(v, 1e9)
    if kind == "clock_s":
        return format_clock(v, 1)
    if kind == "datetime":  # a zoned instant in local time; a naive one as it is
        return (v if v.tzinfo is None else v.astimezone()).strftime("%H:%M:%S.%f")
    if kind == "bytes":
        return format_bytes(v)
    if kind == "gbps":
        return f"{_sig3(float(v))} GB/s"
    if kind == "pct":
        return format_pct(float(v))
    if kind == "change":
        return format_change(float(v))
    if kind == "time_change":
        return format_time_change(float(v), unit)
    if kind == "id":
        return str(v)
    if kind == "count":
        return f"{v:,}" if isinstance(v, int) else _sig3(float(v))
    if kind == "number":
        return _sig3(float(v))
    if kind == "bool":
        return "yes" if v else "no"
    return str(v)


class Table:
    """A polars frame shown as a table: ``frame`` is the frame itself (its other attributes are
    the frame's, so ``Table(df).select(...)`` is a frame again). ``top`` rows are shown (default
    :data:`MAX_ROWS`, 0 or None after an explicit 0: all) with a caption when rows are cut;
    ``unit`` fixes the unit of time columns; ``kinds`` overrides :data:`COLUMN_UNITS` per
    column; ``right`` names text columns aligned right (numbers written as text)."""

    def __init__(
        self,
        frame: pl.DataFrame,
        caption: str = "",
        *,
        top: int | None = None,
        unit: str | None = None,
        kinds: dict[str, str] | None = None,
        right: tuple[str, ...] = (),
    ):
        if not isinstance(frame, pl.DataFrame):
            raise TypeError(f"Table shows a polars DataFrame, not {type(frame).__name__}")
        if unit is not None:
            check_unit(unit)
        if top is not None and (not isinstance(top, int) or isinstance(top, bool) or top < 0):
            raise ValueError(f"top must be 0 (every row) or a positive int, not {top!r}")
        self.frame, self.caption = frame, caption
        self.top = MAX_ROWS if top is None else top
        self.unit, self.kinds, self.right = unit, dict(kinds or {}), tuple(right)

    def __getattr__(self, name: str) -> Any:
        if name == "frame":  # not set yet (during unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.frame, name)

    def __len__(self) -> int:
        return len(self.frame)

    # -- what is shown -------------------------------------------------------------------------
    def shown(self) -> pl.DataFrame:
        """The rows shown (the first ``top``)."""
        return self.frame.head(self.top) if self.top else self.frame

    def notes(self) -> list[str]:
        """Lines under the table saying what its values lack and how to get it (a collectives
        frame's unknown rank count: collectives.missing_ranks_note)."""
        from ..collectives import missing_ranks_note

        note = missing_ranks_note(self.frame)
        return [note] if note else []

    def _caption(self) -> str:
        n, shown = len(self.frame), len(self.shown())
        cut = f"{shown:,} of {n:,} rows (top=0 for all)" if shown < n else ""
        return " · ".join(x for x in (self.caption, cut) if x)

    def cells(self) -> tuple[list[str], list[list[str]], list[bool]]:
        """(headers, rows of cell texts, right-aligned per column)."""
        df = self.shown()
        kinds = [self.kinds.get(c) or column_kind(c, t) for c, t in zip(df.columns, df.dtypes)]
        heads = [
            c.removesuffix(_HEADER_SUFFIX[k]) if k in _HEADER_SUFFIX and c != _HEADER_SUFFIX[k] else c
            for c, k in zip(df.columns, kinds)
        ]
        rows = [[format_cell(v, k, self.unit) for v, k in zip(r, kinds)] for r in df.iter_rows()]
        right = [k not in ("text", "other") or c in self.right for c, k in zip(df.columns, kinds)]
        return heads, rows, right

    # -- renderings ----------------------------------------------------------------------------
    def text(self, caption: str | None = None) -> str:
        heads, rows, right = self.cells()
        widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(heads)]

        def line(values: list[str]) -> str:
            return "  ".join(
                v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)
            ).rstrip()

        cap = self._caption() if caption is None else caption
        out = [cap] if cap else []
        out += [line(heads), line(["-" * w for w in widths]), *(line(r) for r in rows)]
        return "\n".join([*out, *self.notes()])

    def html(self, caption: str | None = None) -> str:
        heads, rows, right = self.cells()

        def cell(tag: str, text: str, r: bool, extra: str = "") -> str:
            style = f"text-align:{'right' if r else 'left'};padding:1px 6px;white-space:nowrap{extra}"
            return f"<{tag} style='{style}'>{html.escape(text)}</{tag}>"

        head = "".join(cell("th", h, r) for h, r in zip(heads, right))
        body = "".join(
            "<tr>"
            + "".join(cell("td", v, r, self.cell_style(h, v)) for h, v, r in zip(heads, row, right))
            + "</tr>"
            for row in rows
        )
        cap = self._caption() if caption is None else caption
        cap_html = f"<caption style='text-align:left'>{html.escape(cap)}</caption>" if cap else ""
        return (
            # a table wider than the output scrolls in its own box (a scrollbar, the cue that
            # there is more) instead of being cut at the output's edge
            f"<div class='mspti-lens-table-box' style='{SCROLL_BOX_STYLE}'>"
            # line-height of its own: inside a widget (the panel) rows would take the widgets'
            # inline height (28 px), twice a static table's
            "<table class='mspti-lens-table' style='border-collapse:collapse;font-size:12px;line-height:1.4'>"
            f"{cap_html}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
            + "".join(
                f"<div class='mspti-lens-table-note' style='{NOTE_STYLE}'>{html.escape(n)}</div>"
                for n in self.notes()
            )
        )

    def cell_style(self, head: str, text: str) -> str:
        """Extra CSS of one cell (``;color:...``), by its column's header and text; none here."""
        return ""

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        return self.html()


def has_units(df: pl.DataFrame) -> bool:
    """True when a column of ``df`` is shown with a unit by its name or dtype (a duration, an
    instant, bytes, a bandwidth, a share): raw, it would read as bare integers or exponents."""
    return any(column_kind(c, t) in (*UNIT_KINDS, "datetime") for c, t in df.schema.items())


def notebook_frame_html(df: pl.DataFrame) -> str:
    """A polars frame in a notebook once the extension is loaded: as a :class:`Table` when it has
    columns with units (mspti-lens' frames: summaries, device, run and collectives frames),
    else polars' own HTML."""
    if not has_units(df):
        return df._repr_html_()
    n = len(df)
    cut = f"{MAX_ROWS} of {n:,} rows; Table(frame, top=0) (mspti_lens.notebook.tables) for all"
    return Table(df).html(cut if n > MAX_ROWS else "")


def show_frames_as_tables(shell: Any, on: bool = True) -> None:
    """Register (``on``) or remove :func:`notebook_frame_html` as the notebook's HTML form of polars
    frames (``%load_ext mspti_lens`` / ``%unload_ext``), so ``snap.summary()`` or ``run.skew()``
    typed in a cell reads like the magic's tables."""
    formatter = shell.display_formatter.formatters["text/html"]
    if on:
        formatter.for_type(pl.DataFrame, notebook_frame_html)
    elif formatter.type_printers.get(pl.DataFrame) is notebook_frame_html:
        formatter.pop(pl.DataFrame)


__all__ = [
    "COLUMN_UNITS",
    "MAX_ROWS",
    "Table",
    "column_kind",
    "count_of",
    "format_bytes",
    "format_cell",
    "format_change",
    "format_time_change",
    "has_units",
    "notebook_frame_html",
    "show_frames_as_tables",
]
