"""How a simulator job shows its progress in a notebook: the ipywidgets bar of :mod:`.display`,
registered with the driver when the package loads, so that the driver imports no notebook code.
Both look :mod:`.display` up when a job asks, not before: loading the package loads neither
IPython nor ipywidgets."""

from __future__ import annotations

from typing import Any

from ..sim.driver import NotebookProgress, register_notebook_progress


def in_notebook() -> bool:
    """True inside a Jupyter kernel (:func:`.display.in_jupyter`); False where the notebook's code
    cannot load."""
    try:
        from .display import in_jupyter
    except ImportError:
        return False
    return in_jupyter()


def widget_bar(what: str, total: int, unit: str, started: float | None) -> Any:
    """A :class:`.display.WidgetBar`, not shown yet (ImportError without ipywidgets)."""
    from .display import WidgetBar

    return WidgetBar(what, total, unit, started=started, show=False)


register_notebook_progress(NotebookProgress(active=in_notebook, bar=widget_bar))
