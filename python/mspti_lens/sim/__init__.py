"""The bundled simulator (a stand-in libmspti with a simulated ACL runtime and HCCL), public as
:mod:`mspti_lens.sim`: :mod:`.driver` configures and drives it, :mod:`.replay` reads Kineto traces
to replay on it, and ``libmspti_sim.so`` beside them is the library itself.

>>> from mspti_lens import Session, sim          # doctest: +SKIP
>>> s = sim.Simulator()
>>> with Session(library="sim") as session:
...     s.run_workload("training", steps=20)
...     print(session.snapshot())
"""

from .driver import (
    CLOCK_MODES,
    ENTER,
    EXIT,
    FAULT_SLOTS,
    WORKLOADS,
    Job,
    JobResult,
    SimApi,
    Simulator,
    print_progress,
)
from .replay import Trace

__all__ = [
    "CLOCK_MODES",
    "ENTER",
    "EXIT",
    "FAULT_SLOTS",
    "WORKLOADS",
    "Job",
    "JobResult",
    "SimApi",
    "Simulator",
    "Trace",
    "print_progress",
]
