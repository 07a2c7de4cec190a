"""The old name of :mod:`mspti_lens.notebook.run_view` (how a run looks in a notebook, which is
notebook code), kept so that old imports keep working."""

from ..notebook.run_view import (
    STATUS_STYLE,
    headline,
    refreshed_run_html,
    run_html,
    run_widget,
    show_live,
)

__all__ = ["STATUS_STYLE", "headline", "refreshed_run_html", "run_html", "run_widget", "show_live"]
