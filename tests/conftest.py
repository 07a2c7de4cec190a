"""Shared fixtures: the simulator in its default state, a Session on it, and the C stand-in library."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"  # all test data is in the repository (tests/data/README.md)
# tests/data holds data and the C programs tests build, not pytest tests.
collect_ignore = ["data"]


def pytest_collection_modifyitems(config, items):
    """Whole modules, those with slow tests first. pytest-xdist (``make test``: ``--dist loadfile``)
    hands each module to one worker, which runs its module fixtures (JupyterLab and Chromium, the
    CANN scenario programs, the slow-rank job) once, and hands them out in this order to whichever worker is
    free: the long modules start first, the short ones fill in at the end, and no worker sits idle
    while the other still has a long tail."""
    by_module: dict[str, list] = {}
    for item in items:
        by_module.setdefault(item.nodeid.split("::")[0], []).append(item)
    order = sorted(
        by_module.values(),
        key=lambda module: not any(i.get_closest_marker("slow") for i in module),
    )
    items[:] = [item for module in order for item in module]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report on its test (`item.rep_call`), for fixtures that keep evidence of a failure."""
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep


@pytest.fixture
def sim():
    """The bundled simulator, reset to its defaults before and after the test."""
    from mspti_lens.sim import Simulator

    s = Simulator()
    s.reset()
    yield s
    s.reset()


@pytest.fixture
def virtual(sim):
    """The simulator on its virtual clock (with ``clock="mspti"``, every duration is exactly the
    simulated work), back on the real clock after the test."""
    sim.set_clock("virtual")
    yield sim
    sim.set_clock("real")


@pytest.fixture
def session(sim):
    """A Session on the simulator (runtime and HCCL enabled, not started), closed afterwards."""
    from mspti_lens import Session

    s = Session(library="sim")
    yield s
    s.close()


def compile_c(source: Path, out: Path, *flags: str) -> Path:
    subprocess.run(
        ["gcc", "-O2", "-shared", "-fPIC", "-Wall", "-o", str(out), str(source), "-lpthread", *flags],
        check=True,
    )
    return out


@pytest.fixture(scope="session")
def fake_lib_path(tmp_path_factory) -> Path:
    """tests/c/fake_mspti.c compiled for loading into the test process. Not named libmspti.so, so
    that discovery in this process never mistakes it for a preloaded real library."""
    d = tmp_path_factory.mktemp("fake")
    return compile_c(ROOT / "tests" / "c" / "fake_mspti.c", d / "libfake_mspti.so")


@pytest.fixture(scope="session")
def fake_cann_root(tmp_path_factory) -> Path:
    """A CANN-like tree whose lib64/libmspti.so is the C stand-in (for discovery in subprocesses)."""
    root = tmp_path_factory.mktemp("cann")
    (root / "lib64").mkdir()
    compile_c(ROOT / "tests" / "c" / "fake_mspti.c", root / "lib64" / "libmspti.so")
    return root


class Fake:
    """ctypes view of the C stand-in's driver functions."""

    def __init__(self, path: Path):
        self.lib = ctypes.CDLL(str(path))
        L = self.lib
        u32, u64 = ctypes.c_uint32, ctypes.c_uint64
        L.fake_api_count.restype = u32
        L.fake_api_name.argtypes, L.fake_api_name.restype = [u32], ctypes.c_char_p
        L.fake_call.argtypes = [u32, ctypes.POINTER(u32), u32, u32]
        L.fake_loop.argtypes = [u32, ctypes.POINTER(u32), u32, u64]
        L.fake_fire.argtypes = [u32, u32]
        L.fake_enabled.argtypes, L.fake_enabled.restype = [u32], u64
        L.fake_delivered_exits.restype = u64
        self.names = [L.fake_api_name(i).decode() for i in range(L.fake_api_count())]

    def index(self, name: str) -> int:
        return self.names.index(name)

    def loop(self, api: str, inner: list[str], n: int) -> None:
        arr = (ctypes.c_uint32 * max(len(inner), 1))(*[self.index(x) for x in inner])
        self.lib.fake_loop(self.index(api), arr, len(inner), n)

    def fire(self, api: str, site: int) -> None:
        self.lib.fake_fire(self.index(api), site)


@pytest.fixture(scope="session")
def fake(fake_lib_path) -> Fake:
    return Fake(fake_lib_path)


def run_python(code: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter (for process-wide state: discovery, crashes, LD_PRELOAD)."""
    e = dict(os.environ)
    for k in ("MSPTI_LIBRARY", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "LD_PRELOAD"):
        e.pop(k, None)
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=timeout
    )


def stress(n: float) -> int:
    """A stress test's size `n` (threads, cycles, examples, seconds) times MSPTI_LENS_STRESS
    (`make test STRESS=0.2` for a quick look; 1, CI's size, when unset), at least 1."""
    raw = os.environ.get("MSPTI_LENS_STRESS", "1")
    try:
        factor = float(raw)
    except ValueError:
        factor = -1.0
    if not factor > 0:
        raise ValueError(f"MSPTI_LENS_STRESS={raw!r}: valid values are positive numbers (1 = CI's size)")
    return max(1, round(n * factor))


def write_figures(name: str, figures: dict) -> None:
    """Write a test module's figures (for RELIABILITY.md) where MSPTI_LENS_FIGURES points."""
    import json

    d = os.environ.get("MSPTI_LENS_FIGURES")
    if d:
        Path(d).mkdir(parents=True, exist_ok=True)
        Path(d, name).write_text(json.dumps(figures, indent=1, sort_keys=True))
