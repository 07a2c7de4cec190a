"""``python -m mspti_lens doctor``: is this process set up so MSPTI callbacks can fire?

Four checks, each with the fix when it fails:

1. a real ``libmspti.so`` is found in the native discovery order (``_native.search_order()``:
   explicit path, ``MSPTI_LIBRARY``, a preloaded one, the CANN locations), or only the simulator;
2. the process was started with ``LD_PRELOAD`` of it (MSPTI intercepts the runtime by symbol
   interposition; MSPTI 26.x refuses to enable callbacks otherwise);
3. CANN's ``mspti`` Python package: present or not, and which one ``import mspti`` would load
   (this project is ``mspti_lens`` precisely because that name is taken);
4. MSPTI's only subscriber slot: free, or taken (and by whom it may be).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from . import _native
from .backend import backend_info, simulator_path
from .errors import MsptiError, SessionError, SimulatedBackendWarning, SubscriberBusyError

OK, WARN, FAIL, INFO = "ok", "warn", "FAIL", "info"


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok, warn, FAIL, info
    detail: str
    fix: str | None = None

    def lines(self) -> list[str]:
        out = [f"[{self.status:>4}] {self.name}: {self.detail}"]
        if self.fix:
            out.append(f"       fix: {self.fix}")
        return out


# How doctor names each origin of _native.search_order().
HOW = {
    "explicit": "given on the command line",
    "MSPTI_LIBRARY": "MSPTI_LIBRARY",
    "preloaded": "already mapped in this process (preloaded)",
    "CANN": "CANN location",
    "simulator": "the bundled simulator (asked for)",
}


def find_library(library: str | None = None) -> tuple[str | None, str, list[str]]:
    """The library the native discovery order would use, without falling back to the simulator:
    ``(path or None, how it was found, what was tried)``. ``library='sim'`` names the simulator.
    A ``MSPTI_LIBRARY`` that names no file is returned as it is (a Session would fail on it)."""
    if library:
        if library.lower() in ("sim", "simulator"):
            sim = str(simulator_path())
            path, origin, tried = _native.find_library(sim, sim)
            return path, HOW[str(origin)], tried
        p = os.path.expanduser(library)
        if not os.path.isfile(p):
            raise ValueError(f"--library {library}: no such file")
        library = os.path.abspath(p)
    path, origin, tried = _native.find_library(library)
    return path, HOW.get(str(origin), "not found"), tried


def _preloaded(path: str) -> bool:
    names = os.environ.get("LD_PRELOAD", "").replace(":", " ").split()
    real = os.path.realpath(path)
    return any(
        os.path.realpath(n) == real
        or (os.path.basename(n) == "libmspti.so" and os.path.basename(path) == "libmspti.so")
        for n in names
    )


def _mspti_package() -> Check:
    candidates = []
    for entry in sys.path:
        base = Path(entry or ".")
        for p in (base / "mspti" / "__init__.py", base / "mspti.py"):
            if p.is_file():
                candidates.append(str(p.parent if p.name == "__init__.py" else p))
    try:
        spec = importlib.util.find_spec("mspti")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        home = os.environ.get("ASCEND_HOME_PATH")
        if home:  # set_env.sh already ran: saying to run it again would be a circle
            packages = Path(home) / "python" / "site-packages"
            text = (
                f"not installed: the CANN tree at {home} has no mspti package in {packages}; install it with "
                "that CANN version's toolkit (its python/site-packages/mspti); mspti-lens does not need it"
            )
        else:
            text = "not installed here (CANN installs it; `source set_env.sh` puts it on PYTHONPATH)"
        return Check("CANN's `mspti` Python package", INFO, text)
    where = spec.origin or ", ".join(spec.submodule_search_locations or [])
    others = [c for c in candidates if not where.startswith(c)]
    more = f"; also on sys.path: {', '.join(others)}" if others else ""
    return Check(
        "CANN's `mspti` Python package",
        OK,
        f"`import mspti` loads {where}{more}. No clash: this toolkit imports as `mspti_lens`",
        "do not start CANN's mspti monitors (KernelMonitor, HcclMonitor, ...) in a process that uses "
        "mspti-lens: both need MSPTI's only subscriber slot",
    )


def _holders() -> str:
    who = []
    if "mspti" in sys.modules:
        who.append("CANN's `mspti` Python monitors (imported in this process)")
    if "torch_npu" in sys.modules:
        who.append("torch_npu's profiler (torch_npu is imported)")
    pre = os.environ.get("LD_PRELOAD", "")
    if "monitor" in pre.lower() or "dynolog" in pre.lower():
        who.append(f"msMonitor (LD_PRELOAD={pre})")
    return ", ".join(who) or (
        "CANN's `mspti` monitors, torch_npu's MSPTI-based profiler or msMonitor are the usual holders"
    )


def checks(library: str | None = None) -> list[Check]:
    """Run every check; nothing is left subscribed afterwards."""
    out: list[Check] = []
    path, how, tried = find_library(library)
    sim = str(simulator_path())
    if path is None:
        out.append(
            Check(
                "libmspti.so",
                FAIL,
                f"no real libmspti.so found (tried {', '.join(tried)}); only the bundled simulator is "
                "available, "
                "so every result would be SIMULATED",
                "on an Ascend machine run `source <CANN>/set_env.sh` (sets ASCEND_HOME_PATH) or set "
                "MSPTI_LIBRARY=/path/to/libmspti.so",
            )
        )
        library_for_session = "sim"
    elif not os.path.isfile(path):
        out.append(
            Check(
                "libmspti.so",
                FAIL,
                f"{how} names {path}, which does not exist; a Session stops there (it does not fall back "
                "to another library)",
                "point MSPTI_LIBRARY at CANN's lib64/libmspti.so, or unset it to use the discovery order",
            )
        )
        library_for_session = path
    else:
        is_sim = os.path.realpath(path) == os.path.realpath(sim)
        label = "the bundled SIMULATOR" if is_sim else "libmspti.so"
        out.append(
            Check(
                "libmspti.so",
                WARN if is_sim else OK,
                f"{label} at {path} ({how})",
                "results are simulated; use a real libmspti.so on an Ascend machine" if is_sim else None,
            )
        )
        library_for_session = path
    if path is None or not os.path.isfile(path):
        out.append(Check("LD_PRELOAD", INFO, "not applicable without a real libmspti.so"))
    elif _preloaded(path):
        out.append(Check("LD_PRELOAD", OK, f"this process was started with LD_PRELOAD of {path}"))
    else:
        pre = os.environ.get("LD_PRELOAD")
        now = f"LD_PRELOAD is {pre!r}" if pre else "LD_PRELOAD is not set"
        out.append(
            Check(
                "LD_PRELOAD",
                WARN if path == sim else FAIL,
                f"{now}: MSPTI cannot intercept the runtime, so no callback fires (MSPTI 26.x refuses to "
                "enable them, code 6)",
                f"start Python as `LD_PRELOAD={path} python ...`; for Jupyter run "
                f"`python -m mspti_lens install-kernel --library {path}` and use the kernel it installs",
            )
        )
    out.append(_mspti_package())
    out.append(_subscriber(library_for_session))
    return out


def _subscriber(library: str) -> Check:
    from .session import Session

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SimulatedBackendWarning)
            s = Session(library, enable=())
    except SubscriberBusyError as e:
        return Check(
            "subscriber slot",
            FAIL,
            f"taken: msptiSubscribe failed ({e}); may be held by {_holders()}",
            "stop the other tool (or its monitor) in this process; MSPTI allows one subscriber",
        )
    except SessionError as e:
        return Check(
            "subscriber slot",
            WARN,
            f"this process already has a mspti-lens Session ({e})",
            "that session holds the slot; close it first to re-check",
        )
    except (MsptiError, OSError) as e:
        return Check("subscriber slot", FAIL, f"could not subscribe: {e}")
    try:
        s.close()
    except MsptiError as e:
        return Check("subscriber slot", WARN, f"subscribed, but unsubscribing failed: {e}")
    return Check("subscriber slot", OK, "free (subscribed and unsubscribed cleanly)")


def main(args) -> int:
    """Print the checks; exit status 1 when any check fails, else 0."""
    library = getattr(args, "library", None)
    results = checks(library)
    print("mspti-lens doctor")
    for c in results:
        print("\n".join(c.lines()))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SimulatedBackendWarning)
            b = backend_info(library)
        print(f"A Session here would use: {b.label} ({b.path})")
    except (MsptiError, ValueError) as e:
        print(f"A Session here could not load a library: {e}")
    failed = [c.name for c in results if c.status == FAIL]
    print("result: " + ("problems: " + ", ".join(failed) if failed else "ready"))
    return 1 if failed else 0
