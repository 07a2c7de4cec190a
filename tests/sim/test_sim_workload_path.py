"""The simulator's workloads take a program's path: each call goes to the interposed wrapper, which
forwards to the runtime libraries (libascendcl.so, libhccl.so) of the simulated CANN tree, which
drive the process's one simulator. Each case runs in a fresh process, since a process finds its
runtime libraries once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mspti_lens.backend import simulator_path
from mspti_lens.sim import cann

# Runs a short training workload on the virtual clock with the simulator given (or the package's)
# and reports its calls or its error, and the shared objects the process has mapped.
PROBE = r"""
import json, sys
from mspti_lens import sim
s = sim.Simulator(sys.argv[1] if len(sys.argv) > 1 else None)
s.set_clock("virtual")
out = {}
try:
    out["calls"] = s.run_workload("training", steps=2, ranks=8, threads=1, seed=1).calls
except RuntimeError as e:
    out["error"] = str(e)
mapped = {}
for line in open("/proc/self/maps"):
    f = line.split(None, 5)
    if len(f) == 6 and f[5].strip().endswith(".so"):
        mapped[f[5].strip()] = f[4]
out["mapped"] = mapped
print("RESULT " + json.dumps(out))
"""

# Simulator files: a second one mapped would be a second device.
SIMULATORS = ("libmspti_sim.so", "libmspti.so", "libascend_hal.so")


def probe(*args: str, **env: str) -> tuple[dict, str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ASCEND_") and k not in ("LD_LIBRARY_PATH", "LD_PRELOAD", "MSPTI_LIBRARY")
    }
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        env={**base, **env},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :]), out.stderr


def simulators(mapped: dict) -> set[str]:
    return {p for p in mapped if Path(p).name in SIMULATORS}


def test_a_workload_calls_the_bundled_runtime_libraries_and_the_process_has_one_device() -> None:
    r, err = probe()
    assert r.get("calls", 0) > 1000, r
    lib64 = (simulator_path().parent / "cann_tree" / "lib64").resolve()
    assert {str(lib64 / "libascendcl.so"), str(lib64 / "libhccl.so")} <= set(r["mapped"])
    # libascendcl.so's libascend_hal.so is the simulator this process loaded, not another copy.
    assert simulators(r["mapped"]) == {str(simulator_path().resolve())}
    assert err == ""


def test_a_workload_fails_with_the_wrappers_error_where_no_runtime_library_is_found(tmp_path: Path) -> None:
    """The simulator alone, with no runtime beside it and no CANN tree: the workload's calls reach
    the wrappers, which cannot forward them, say so once per function and fail the job."""
    alone = tmp_path / "libmspti_sim.so"
    shutil.copy2(simulator_path(), alone)
    r, err = probe(str(alone))
    assert "failed" in r.get("error", ""), r
    assert err.count("aclrtSetDevice not found in libascendcl.so") == 1
    assert not any(Path(p).name == "libascendcl.so" for p in r["mapped"])


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> cann.CannTree:
    return cann.write_tree(tmp_path_factory.mktemp("cann") / "tree")


def test_with_a_cann_tree_installed_a_workload_uses_the_trees_runtime(tree: cann.CannTree) -> None:
    """ASCEND_HOME_PATH wins, as upstream's loader has it; with the tree's own libmspti.so loaded,
    the tree's libascend_hal.so is that object: one device."""
    r, err = probe(str(tree.mspti), ASCEND_HOME_PATH=str(tree.root))
    assert r.get("calls", 0) > 1000, r
    lib64 = tree.lib64.resolve()
    assert str(lib64 / "libascendcl.so") in r["mapped"] and str(lib64 / "libhccl.so") in r["mapped"]
    assert not any("cann_tree" in p for p in r["mapped"])
    assert simulators(r["mapped"]) == {str(tree.mspti.resolve())}
    assert err == ""
