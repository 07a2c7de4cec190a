"""Making and showing the figures of every plot module: a Figure pyplot does not keep, shown sharp
in IPython, PNG bytes and display bundles at the notebook's pixel ratio, and the axes and titles
the plots share. Imports no other plot module and nothing of the notebook, so both import it."""

from __future__ import annotations

import math
import threading

from .._deps import require

# Figures are rendered at this many pixels per CSS pixel, so they are sharp on HiDPI screens
# (browsers scale the image down to its CSS size; at ratio 1 nothing is lost but bytes).
PIXEL_RATIO = 2
CSS_DPI = 100  # CSS pixels per figure inch


def _new_figure(figsize: tuple[float, float], rows: int = 1, cols: int = 1, sharey: bool = False):
    """A Figure with a ``rows`` x ``cols`` grid of axes that pyplot does not keep (``sharey``:
    one y-axis for all, so panels side by side show the same rows).

    On the main thread the figure is made by pyplot (which loads the notebook's backend, so the
    figure renders as an image) and released from pyplot at once: a returned figure is then
    shown exactly once (by its rich repr), not a second time by the inline backend. On other
    threads (the control panel's refresh) pyplot is not touched at all."""
    require("matplotlib", "plot")
    if threading.current_thread() is threading.main_thread():
        plt = require("matplotlib.pyplot", "plot")
        fig = plt.figure(figsize=figsize)
        plt.close(fig)
    else:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=figsize)
        FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False, sharey=sharey)
    _show_sharp(fig)
    return fig, axes


def _show_sharp(fig) -> None:
    """In IPython, show this module's figures at the notebook's pixel ratio (a PNG at 2x with its
    CSS size, as ``%config InlineBackend.figure_formats = {"retina"}`` would), whoever calls the
    plot: a plain Figure's PNG is otherwise 1x. Other figures keep the printer they had."""
    import sys

    fig._mspti_lens = True
    if "IPython" not in sys.modules:
        return
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return
    from matplotlib.figure import Figure

    formatter = shell.display_formatter.formatters["image/png"]
    try:
        before = formatter.lookup_by_type(Figure)
    except KeyError:
        before = None
    if getattr(before, "_mspti_lens", False):
        return

    def png(f):
        if not getattr(f, "_mspti_lens", False):
            return before(f) if before is not None else None
        data, metadata = figure_bundle(f)
        return data["image/png"], metadata["image/png"]

    png._mspti_lens = True  # type: ignore[attr-defined]
    formatter.for_type(Figure, png)


def to_png(fig, dpi: int = 100) -> bytes:
    """Render a figure to PNG bytes (what the control panel shows)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def render_figure(fig) -> tuple[bytes, int, int]:
    """PNG bytes at :data:`PIXEL_RATIO` and the figure's size in CSS pixels."""
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


def _axis_unit(lo: float, hi: float) -> tuple[str, float]:
    """One unit for a whole time axis: the one that reads best at the axis' geometric centre."""
    centre = math.sqrt(max(lo, 1.0) * max(hi, 1.0))
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if centre >= scale:
            return unit, scale
    return "ns", 1.0


def _tick(x: float) -> str:
    """A tick value without scientific notation or trailing zeros: 0.5, 2, 50, 1,000."""
    if x >= 100 or x == int(x):
        return f"{x:,.0f}"
    return f"{x:.{min(9, 2 - math.floor(math.log10(x)))}f}".rstrip("0").rstrip(".")


# Ticks at 1, 2 and 5 times powers of ten on at most this many decades per inch of axes: the
# closest two (1 and 2, 0.3 decades apart) then leave room for a label such as "20,000".
DECADES_PER_INCH_1_2_5 = 0.5


def _ns_axis(ax, label: str = "time per call") -> None:
    """A log time axis in one unit (chosen from its limits) with the unit in the axis label and at
    least three labelled values. Call it after the data is drawn: the unit depends on the limits."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

    ax.set_xscale("log")
    lo, hi = ax.get_xlim()
    unit, scale = _axis_unit(lo, hi)
    decades = math.log10(max(hi, 1.0) / max(lo, 1.0))
    # Long ranges get ticks at powers of ten, shorter ones at 1-2-5 times them (when the axes is
    # wide enough for labels 0.3 decades apart), and ranges shorter than that (or with fewer than
    # three such values in them) evenly spaced round values.
    width_in = ax.get_position().width * ax.figure.get_figwidth()
    subs = (1.0,) if decades > 3 or decades > DECADES_PER_INCH_1_2_5 * width_in else (1.0, 2.0, 5.0)
    k0, k1 = math.floor(math.log10(max(lo, 1.0))), math.ceil(math.log10(max(hi, 1.0)))
    on_decades = [m * 10.0**k for k in range(k0, k1 + 1) for m in subs]
    if decades < 0.7 or sum(lo <= t <= hi for t in on_decades) < 3:
        # as many digits as their step needs (7.960, 7.962, ...: a few calls of nearly one duration)
        values = _linear_ticks(lo / scale, hi / scale)
        digits = _digits(values[1] - values[0])
        ax.xaxis.set_major_locator(FixedLocator([v * scale for v in values]))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / scale:,.{digits}f}"))
        ax.xaxis.set_minor_locator(NullLocator())
    else:
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _tick(v / scale) if v > 0 else ""))
        ax.xaxis.set_minor_locator(LogLocator(base=10, subs="auto"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(lo, hi)
    ax.set_xlabel(f"{label} ({unit})", fontsize=9)


def _linear_ticks(lo: float, hi: float) -> list[float]:
    """Three to six round values (steps of 1, 2, 2.5 or 5 times a power of ten) within [lo, hi]."""
    from matplotlib.ticker import MaxNLocator

    for n in (5, 8, 12):
        values = [float(v) for v in MaxNLocator(nbins=n, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)]
        inside = [v for v in values if lo <= v <= hi]
        if len(inside) >= 3:
            return inside
    return [lo, (lo + hi) / 2, hi]


def _digits(step: float) -> int:
    """The decimals that show a tick step exactly: 2 for 0.25, 0 for 5."""
    for d in range(10):
        if abs(round(step, d) - step) <= abs(step) * 1e-6:
            return d
    return 9


def _count_axis(ax, density: bool) -> None:
    """Counts are whole numbers: integer ticks only; shares are plain fractions."""
    from matplotlib.ticker import MaxNLocator

    ax.set_ylabel("share of calls" if density else "calls", fontsize=9)
    if not density:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def _legend_outside(ax, **kw) -> None:
    """A legend at the right of the axes (clear of the data), 8 pt."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False, **kw)


def _title(base: str, simulated: bool) -> str:
    return f"{base} [SIMULATED]" if simulated else base


def _renderer(fig):
    canvas = fig.canvas
    return canvas.get_renderer() if hasattr(canvas, "get_renderer") else fig._get_renderer()


# Text is wrapped to this share of the width it may take, a margin for the pixel a glyph run may
# gain at one resolution over another.
_WRAP_SHARE = 0.97


def _fill(text: str, fontsize: float, width_in: float) -> str:
    """``text`` broken at spaces into lines no wider than ``width_in`` inches, measured as Agg
    draws them at 1x and at PIXEL_RATIO (hinted glyphs are wider at 2x than at 1x scaled: a
    caption measured only at 1x was cut at the right of the notebook's PNG)."""
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.font_manager import FontProperties

    prop = FontProperties(size=fontsize)
    renderers = [RendererAgg(1, 1, CSS_DPI * r) for r in sorted({1, PIXEL_RATIO})]

    def fits(line: str) -> bool:
        return all(
            r.get_text_width_height_descent(line, prop, ismath=False)[0] <= _WRAP_SHARE * width_in * r.dpi
            for r in renderers
        )

    lines: list[str] = []
    for para in text.split("\n"):
        line = ""
        for word in para.split(" "):
            longer = f"{line} {word}" if line else word
            if line and not fits(longer):
                lines.append(line)
                line = word
            else:
                line = longer
        lines.append(line)
    return "\n".join(lines)


def _message_figure(text: str, width: float = 9.0, fontsize: float = 9.0):
    """A figure holding only ``text`` (why a plot has nothing to draw and how to get it), wrapped
    to the figure's width and as tall as its lines: no large empty frame around one sentence."""
    fig, axes = _new_figure((width, 1.0))
    ax = axes[0][0]
    ax.set_axis_off()
    ax.set_position((0, 0, 1, 1))
    body = _fill(text, fontsize, width - 0.2)
    fig.set_size_inches(width, 0.3 + (body.count("\n") + 1) * fontsize * 1.4 / 72)
    ax.text(0.5, 0.5, body, ha="center", va="center", transform=ax.transAxes, fontsize=fontsize)
    return fig


def _note_below(fig, note: str, fontsize: float = 7.5, **style) -> None:
    """``note`` under the axes, left-aligned and wrapped to the figure's width, with the axes laid
    out above it (``tight_layout``)."""
    w, h = fig.get_size_inches()
    body = _fill(note, fontsize, w - 0.2)
    text = fig.text(0.1 / w, 0.06 / h, body, fontsize=fontsize, ha="left", va="bottom", **style)
    box = text.get_window_extent(_renderer(fig))
    fig.tight_layout(rect=(0, (box.height + 0.12 * fig.dpi) / (h * fig.dpi), 1, 1))
