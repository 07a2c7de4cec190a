"""What the notebook shows: messages, the status table, snapshots with the magic's settings, and
figures as display bundles (PNG with a text fallback)."""

from __future__ import annotations

import html

from ..snapshot import Snapshot


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


class Status(dict):
    """``%mspti status``: a dict (so it is easy to use) that renders as a small table."""

    def _repr_html_(self) -> str:
        rows = []
        for k, v in self.items():
            if k == "enabled":
                v = (
                    f"{len(v)} callbacks: " + ", ".join(x.removeprefix("MSPTI_CBID_") for x in v)
                    if v
                    else "(none)"
                )
            rows.append(
                f"<tr><th style='text-align:left'>{html.escape(str(k))}</th>"
                f"<td style='text-align:left'>{html.escape(str(v))}</td></tr>"
            )
        return "<table><caption><b>mspti-lens status</b></caption>" + "".join(rows) + "</table>"

    def __repr__(self) -> str:
        width = max((len(k) for k in self), default=0)
        lines = ["mspti-lens status"]
        for k, v in self.items():
            if k == "enabled":
                v = f"{len(v)} callbacks" + (
                    ": " + ", ".join(x.removeprefix("MSPTI_CBID_") for x in v) if v else ""
                )
            lines.append(f"  {k:<{width}}  {v}")
        return "\n".join(lines)


class ConfiguredSnapshot(Snapshot):
    """A :class:`Snapshot` whose table and reprs use the magic's ``unit`` and ``top``."""

    def __init__(self, snap: Snapshot, unit: str | None, top: int | None):
        super().__init__(snap._native, snap.meta)
        self._unit, self._top = unit, top

    def table(self, unit: str | None = None, top: int | None = None):
        return super().table(unit or self._unit, top or self._top)


def figure_bundle(fig, dpi: int = 100) -> dict:
    """A figure as a display bundle: PNG plus a text fallback naming it (renders everywhere)."""
    from ..plots import to_png

    title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) is not None else ""
    if not title and fig.axes:
        title = fig.axes[0].get_title()
    return {"image/png": to_png(fig, dpi=dpi), "text/plain": f"<mspti-lens figure: {title}>"}
