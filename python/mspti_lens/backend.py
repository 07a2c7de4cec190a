"""Which MSPTI library is in use: a real ``libmspti.so`` or the bundled simulator.

The discovery order is the native loader's, defined once (``rust/lens/src/ffi/discovery.rs``;
``mspti_lens._native.search_order()`` lists it): an explicit path, ``MSPTI_LIBRARY``, a libmspti
already mapped in the process (preloaded), the CANN locations, then the bundled simulator, announced
with a :class:`SimulatedBackendWarning`.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

from . import _native
from .errors import LibraryError, SimulatedBackendWarning

SIM_NAMES = ("sim", "simulator")
FIDELITIES = ("documented", "cann26", "cann8")


def simulator_path() -> Path:
    """The simulator shipped inside the package."""
    return Path(__file__).resolve().parent / "sim" / "libmspti_sim.so"


def load_library(library: str | os.PathLike | None = None) -> _native.Library:
    """Load an MSPTI library. ``library`` is a path, ``"sim"`` for the bundled simulator, or None
    for the discovery order above."""
    sim = simulator_path()
    if library is not None and not isinstance(library, (str, os.PathLike)):
        raise ValueError(
            f"library must be a path to libmspti.so, 'sim', or None, not {type(library).__name__}"
        )
    if isinstance(library, str) and library.lower() in SIM_NAMES:
        if not sim.exists():
            raise LibraryError(
                f"the bundled simulator is missing ({sim}); rebuild the package with `make dev` "
                "(it builds rust/sim and copies libmspti_sim.so there)"
            )
        return _native.load_library(str(sim), str(sim))
    lib = _native.load_library(None if library is None else os.fspath(library), str(sim))
    if lib.origin == "simulator":
        warnings.warn(
            SimulatedBackendWarning(
                "No libmspti.so was found (MSPTI_LIBRARY, a preloaded library and the CANN locations were "
                f"tried), so mspti_lens uses its bundled SIMULATOR at {lib.path}: every result is "
                "simulated, not measured on an NPU. On an Ascend machine run `source <CANN>/set_env.sh` "
                "first, or pass library='sim' to choose the simulator on purpose."
            ),
            stacklevel=3,
        )
    return lib


@dataclass(frozen=True)
class BackendInfo:
    """What was loaded, from where, and whether callbacks can fire."""

    path: str
    origin: str
    simulated: bool
    fidelity: str | None
    version: str | None
    optional_symbols: tuple[str, ...]
    preloaded: bool
    mapped: str | None

    @property
    def label(self) -> str:
        if self.simulated:
            return f"SIMULATED ({self.fidelity})"
        v = f" {self.version}" if self.version else ""
        return f"libmspti{v}"

    @property
    def preload_hint(self) -> str | None:
        """For a real library not named by LD_PRELOAD: the sentence that explains the fix."""
        if self.simulated or self.preloaded:
            return None
        return (
            f"This process was not started with LD_PRELOAD={self.path}, so MSPTI cannot intercept the "
            "runtime and no callback will fire (MSPTI 26.x rejects enabling with code 6). Start Python as "
            f"`LD_PRELOAD={self.path} python ...`, or for Jupyter run `python -m mspti_lens install-kernel` "
            "and switch to the kernel it installs."
        )

    def as_dict(self) -> dict:
        d = asdict(self)
        d["label"] = self.label
        return d


def _version(v: int | None) -> str | None:
    if v is None:
        return None
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}"


def info_of(lib: _native.Library) -> BackendInfo:
    fid = lib.sim_fidelity
    return BackendInfo(
        path=lib.path,
        origin=lib.origin,
        simulated=lib.simulated,
        fidelity=FIDELITIES[fid] if fid is not None and fid < len(FIDELITIES) else None,
        version=_version(lib.version),
        optional_symbols=tuple(lib.optional_symbols),
        preloaded=lib.preloaded,
        mapped=_native.mapped_libmspti(),
    )


def backend_info(library: str | os.PathLike | None = None) -> BackendInfo:
    """Which library would be used (and is then loaded): path, origin, simulated or not, optional
    symbols, version, and whether ``LD_PRELOAD`` names it."""
    return info_of(load_library(library))
