"""mspti-lens: live latency histograms of every Ascend Runtime and HCCL API call.

It subscribes to the MSPTI Callback API (``libmspti.so``), pairs each call's ENTER and EXIT on the
calling thread, keeps the durations as exponential histograms in native memory (scale 7: <= 0.27 %
relative error from 1 ns to 2^42 ns, 73 KiB per API and thread), and hands them to you as polars
DataFrames and matplotlib figures::

    import mspti_lens
    with mspti_lens.Session() as s:          # finds libmspti.so, or the simulator (announced)
        train_one_step()
        snap = s.snapshot()
    snap.summary()                            # one row per API: count, total, avg, p50...p99.9, max
    mspti_lens.plots.distribution(snap)       # latency distributions, log time axis

In Jupyter: ``%load_ext mspti_lens``, then ``%%mspti`` on a cell or ``%mspti panel``.
Without an Ascend NPU, ``Session(library="sim")`` and :mod:`mspti_lens.sim` run everything on the
bundled simulator; such results are labelled as simulated everywhere.
"""

from __future__ import annotations

from . import catalog
from ._native import __version__
from .backend import BackendInfo, backend_info, simulator_path
from .errors import (
    LibraryError,
    MsptiCallError,
    MsptiError,
    NotPreloadedWarning,
    PreloadRequiredError,
    SessionError,
    SimulatedBackendWarning,
    SubscriberBusyError,
)

# How a Snapshot and a Run read (title, table, reprs) and how a simulator job shows its progress in
# a notebook: registered with the model when this loads, so that the model imports no display code.
from .notebook import progress as _progress  # noqa: F401
from .notebook import run_view as _run_view  # noqa: F401
from .notebook import snapshot_repr as _snapshot_repr  # noqa: F401
from .runs.run import Run, open_run  # whole jobs: every rank's recorded windows
from .session import Session
from .snapshot import Snapshot
from .watch import watcher as _watcher  # noqa: F401 - Run.watch: registered with the Run when this loads

__all__ = [
    "BackendInfo",
    "LibraryError",
    "MsptiCallError",
    "MsptiError",
    "NotPreloadedWarning",
    "PreloadRequiredError",
    "Run",
    "Session",
    "SessionError",
    "SimulatedBackendWarning",
    "Snapshot",
    "SubscriberBusyError",
    "__version__",
    "backend_info",
    "catalog",
    "load",
    "serve",
    "open_run",
    "simulator_path",
]


def load(path) -> Snapshot:
    """Read a snapshot written by :meth:`Snapshot.save`."""
    return Snapshot.load(path)


def serve(port: int = 9464, source=None, **options):
    """Expose ``/metrics`` for Prometheus (see :func:`mspti_lens.export.serve`)."""
    from .export.serve import serve as serve_metrics

    return serve_metrics(port, source, **options)


def __getattr__(name: str):
    # Submodules with heavier imports load on first use.
    if name in ("sim", "plots", "notebook", "export", "watch"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'mspti_lens' has no attribute {name!r}")


def load_ipython_extension(ipython):  # pragma: no cover - thin delegation, tested via magics
    from .notebook.magics import load_ipython_extension as load_ext

    load_ext(ipython)


def unload_ipython_extension(ipython):  # pragma: no cover
    from .notebook.magics import unload_ipython_extension as unload_ext

    unload_ext(ipython)
