"""``python -m mspti_lens.sim cann DIR``: write a simulated CANN toolkit tree into DIR.

The tree is laid out as CANN's toolkit is (``set_env.sh``, ``lib64/``, ``include/``,
``python/site-packages/``), so programs written for CANN build against it unchanged and run on
the simulated device: ``lib64/libmspti.so`` is the simulator, which, preloaded, intercepts the
ACL runtime and HCCL as the real libmspti does; ``libascendcl.so``, ``libhccl.so``,
``libopapi.so`` ... are the project's small C runtime libraries (rust/sim/cann/), and
``libascend_hal.so`` (the "driver") is a link to ``libmspti.so``, so a process has one simulated
device whether libmspti is preloaded or not. Everything it runs is SIMULATED; see
docs/simulated_cann.md.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
# Built by rust/lens/build.rs with the extension: the runtime libraries and the headers.
BUNDLED_TREE = PACKAGE_DIR / "cann_tree"
BUNDLED_SIMULATOR = PACKAGE_DIR / "libmspti_sim.so"
# The driver library: the simulator under a second name (see the module docstring).
HAL = "libascend_hal.so"
MSPTI = "libmspti.so"
# What a program may link or load, as Huawei's MSPTI samples and package do.
LIBRARIES = (
    "libascendcl.so",
    "libnnopbase.so",
    "libopapi.so",
    "libhccl.so",
    "libhcomm.so",
    "libc_sec.so",
    "libmsprofiler.so",
    "libascendalog.so",
    "libms_tools_ext.so",
)
MARKER = "SIMULATED_CANN.txt"


class TreeError(ValueError):
    """DIR cannot hold a new tree (it is not empty, not writable, or not a directory)."""


@dataclass(frozen=True)
class CannTree:
    """A written tree: its root and what ``source set_env.sh`` sets."""

    root: Path

    @property
    def lib64(self) -> Path:
        return self.root / "lib64"

    @property
    def mspti(self) -> Path:
        return self.lib64 / MSPTI

    @property
    def set_env(self) -> Path:
        return self.root / "set_env.sh"

    def environ(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) as ``source set_env.sh`` leaves it."""
        env = dict(os.environ if base is None else base)
        for name, value in _variables(self.root).items():
            old = env.get(name)
            env[name] = value if name not in _PATH_LISTS or not old else f"{value}:{old}"
        return env


# Variables of CANN's set_env.sh that this tree has a use for; the path lists are prepended.
_PATH_LISTS = ("LD_LIBRARY_PATH", "PYTHONPATH", "PATH")


def _variables(root: Path) -> dict[str, str]:
    return {
        "ASCEND_TOOLKIT_HOME": str(root),
        "ASCEND_HOME_PATH": str(root),
        "ASCEND_OPP_PATH": str(root / "opp"),
        "ASCEND_AICPU_PATH": str(root),
        "LD_LIBRARY_PATH": str(root / "lib64"),
        "PYTHONPATH": str(root / "python" / "site-packages"),
        "PATH": str(root / "bin"),
    }


def _set_env_script(root: Path) -> str:
    v = {k: shlex.quote(x) for k, x in _variables(root).items()}
    return f"""# Simulated CANN toolkit environment, written by `python -m mspti_lens.sim cann` (SIMULATED:
# no NPU; see {MARKER}). Source it as CANN's: `source set_env.sh`.
export ASCEND_TOOLKIT_HOME={v["ASCEND_TOOLKIT_HOME"]}
export ASCEND_HOME_PATH={v["ASCEND_HOME_PATH"]}
export ASCEND_OPP_PATH={v["ASCEND_OPP_PATH"]}
export ASCEND_AICPU_PATH={v["ASCEND_AICPU_PATH"]}
export LD_LIBRARY_PATH={v["LD_LIBRARY_PATH"]}${{LD_LIBRARY_PATH:+:${{LD_LIBRARY_PATH}}}}
export PYTHONPATH={v["PYTHONPATH"]}${{PYTHONPATH:+:${{PYTHONPATH}}}}
export PATH={v["PATH"]}${{PATH:+:${{PATH}}}}
"""


def _check_target(root: Path) -> None:
    if root.exists() and not root.is_dir():
        raise TreeError(f"{root} exists and is not a directory: give a new or empty directory")
    if root.is_dir() and any(root.iterdir()):
        raise TreeError(f"{root} exists and is not empty: give a new or empty directory")
    parent = root if root.is_dir() else next((p for p in root.parents if p.exists()), None)
    if parent is None or not os.access(parent, os.W_OK | os.X_OK):
        raise TreeError(f"{root} is not writable (no write permission on {parent})")


def _bundled() -> tuple[Path, Path]:
    needed = (BUNDLED_SIMULATOR, BUNDLED_TREE / "lib64", BUNDLED_TREE / "include")
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        raise FileNotFoundError(
            "the package has no simulated CANN tree to copy (missing: " + ", ".join(missing) + "); "
            "rebuild the extension (`make dev` or `pip install .`), which builds it"
        )
    return BUNDLED_SIMULATOR, BUNDLED_TREE


def write_tree(directory: str | os.PathLike[str]) -> CannTree:
    """Write a simulated CANN tree into ``directory`` (new or empty) and return it."""
    root = Path(directory).expanduser().absolute()
    _check_target(root)
    simulator, bundled = _bundled()
    lib64 = root / "lib64"
    try:
        lib64.mkdir(parents=True)
    except OSError as e:
        raise TreeError(f"{root} is not writable ({e.strerror})") from e
    shutil.copy2(simulator, lib64 / MSPTI)
    os.symlink(MSPTI, lib64 / HAL)
    for name in LIBRARIES:
        shutil.copy2(bundled / "lib64" / name, lib64 / name)
    shutil.copytree(bundled / "include", root / "include")
    for d in ("python/site-packages", "bin", "opp", "tools/mspti/samples"):
        (root / d).mkdir(parents=True)
    (root / "set_env.sh").write_text(_set_env_script(root))
    (root / MARKER).write_text(
        "A SIMULATED CANN toolkit tree written by mspti-lens (python -m mspti_lens.sim cann DIR).\n"
        "There is no NPU: lib64/libmspti.so is mspti-lens's simulator and the runtime libraries\n"
        "drive its simulated device. See docs/simulated_cann.md in the mspti-lens repository.\n"
    )
    return CannTree(root)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mspti_lens.sim cann",
        description="Write a simulated CANN toolkit tree (SIMULATED: no NPU) into DIR.",
    )
    p.add_argument("dir", metavar="DIR", help="a new or empty directory")
    args = p.parse_args(argv)
    try:
        tree = write_tree(args.dir)
    except (TreeError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"simulated CANN tree written to {tree.root}; use it with: source {tree.set_env}")
    return 0
