"""Huawei's MSPTI samples, unchanged, built with their own CMakeLists.txt against a simulated CANN
tree and checked by Huawei's own st checks (test/mspti_cpp/st/script/test_mspti_samples.py), as
upstream's CI runs them on a machine: each check runs ``bash sample_run.sh`` in
``$ASCEND_HOME_PATH/tools/mspti/samples/<sample>`` (cmake, make, then the program with
libmspti.so preloaded) and matches its output. The official Python package (mspti/: the mspti_C
extension and its monitors) is built from its CMake files on the tree, and the Python samples run
on it with a torch/torch_npu/torchrun stand-in (tests/data/torch_standin). The upstream files are
vendored unmodified in tests/data/ascend-mspti (commit in UPSTREAM.txt); which st cases cannot
run here and why: docs/simulated_cann.md.

The samples are built and run once per module, all at once (the C samples while the package
builds, the Python samples after it); each test then reads its case's result."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from mspti_lens.sim import cann

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler (c++)"),
]

HERE = Path(__file__).resolve().parents[1]  # tests/
UPSTREAM = HERE / "data" / "ascend-mspti"
ST_SCRIPTS = UPSTREAM / "test" / "mspti_cpp" / "st" / "script"
STANDIN = HERE / "data" / "torch_standin"
PACKAGE_DRIVER = HERE / "data" / "mspti_package" / "CMakeLists.txt"
# Builds of the official package by the hash of their sources (package_key): this module's fresh
# build is kept there, and bench/cann_monitors.py runs on it instead of building its own.
PACKAGE_CACHE = HERE.parent / "target" / "official-mspti-package"
# Each sample and the class of test_mspti_samples.py that checks it.
C_CASES = {
    "callback_domain": "CallbackDomainTest",
    "callback_mstx": "CallbackMstxTest",
    "mspti_activity": "MsptiActivityTest",
    "mspti_correlation": "MsptiCorrelationTest",
    "mspti_external_correlation": "MsptiExternalCorrelationTest",
    "mspti_hccl_activity": "MsptiHcclActivityTest",
    "mspti_mstx_activity_domain": "MsptiMstxActivityDomainTest",
}
PYTHON_CASES = {"python_monitor": "PythonMonitorTest", "python_mstx_monitor": "PythonMstxMonitorTest"}
# Generous: the HCCL sample alone sleeps 6 s per rank (48 s), and the machine may be loaded.
CASE_TIMEOUT_S = 900

# Runs one st case as upstream's __main__ does (the class, the case id, scene "sample").
RUNNER = textwrap.dedent(
    """
    import sys, unittest
    sys.path.insert(0, sys.argv[1])
    import test_mspti_samples
    case = getattr(test_mspti_samples, sys.argv[2])(sys.argv[3], "sample", "", "", timeout=120)
    result = unittest.TextTestRunner(verbosity=2).run(case)
    sys.exit(0 if result.wasSuccessful() else 1)
    """
)


def need_cmake() -> str:
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.fail("cmake is needed to build Huawei's samples: apt-get install cmake (make system-deps)")
    return cmake


@dataclass
class CaseResult:
    sample: str
    returncode: int | None
    report: str
    log: str


@dataclass
class Run:
    tree: cann.CannTree
    env: dict[str, str]
    package: Path
    package_log: str
    results: dict[str, CaseResult]


def build_package(tree: cann.CannTree, env: dict[str, str], where: Path) -> tuple[Path, str]:
    """The official package on the tree: its sources, upstream's build of mspti/csrc (through the
    driver that takes the place of upstream's top-level CMakeLists.txt), mspti_C installed into
    mspti/lib64 as upstream's install step does."""
    root = where / "mspti-package"
    shutil.copytree(UPSTREAM / "mspti", root / "mspti", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(UPSTREAM / "csrc", root / "csrc")
    # MSPTI's headers come from the tree (DIR/include/mspti: upstream's, unmodified), at the path
    # upstream's sources include them from: the package builds on DIR, not on a second copy.
    shutil.copytree(
        tree.root / "include" / "mspti",
        root / "csrc" / "include",
        ignore=shutil.ignore_patterns("LICENSE", "UPSTREAM.txt"),
    )
    shutil.copy(PACKAGE_DRIVER, root / "CMakeLists.txt")
    build = root / "build"
    steps = [
        [need_cmake(), "-S", str(root), "-B", str(build), f"-DCMAKE_INSTALL_PREFIX={build / 'install'}",
         f"-DPython_EXECUTABLE={sys.executable}"],
        [need_cmake(), "--build", str(build), "-j", "2"],
        [need_cmake(), "--install", str(build)],
    ]  # fmt: skip
    log = []
    for cmd in steps:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=CASE_TIMEOUT_S)
        log.append(f"$ {' '.join(cmd)}\n{out.stdout}{out.stderr}")
        if out.returncode != 0:
            break
    return root, "\n".join(log)


def package_key() -> Path:
    """Where a build of the official package from these sources is kept (the extension links
    libmspti.so by name, so one build runs on any tree)."""
    h = hashlib.sha256()
    for root in (UPSTREAM / "mspti", UPSTREAM / "csrc", PACKAGE_DRIVER.parent):
        for p in sorted(root.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(HERE.parent)).encode())
                h.update(p.read_bytes())
    return PACKAGE_CACHE / f"mspti-package-{h.hexdigest()[:16]}"


def built(package: Path) -> bool:
    return (package / "mspti" / "lib64" / "mspti_C.so").is_file()


def keep_package(root: Path) -> Path:
    """A copy of a built package (without its build directory) at package_key(), published by one
    rename: a reader never sees half a package, and of two builds at once the first stays."""
    key = package_key()
    if built(key):
        return key
    PACKAGE_CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=PACKAGE_CACHE) as tmp:
        staged = Path(tmp) / "package"
        shutil.copytree(root, staged, ignore=lambda d, names: ["build"] if Path(d) == root else [])
        try:
            os.rename(staged, key)
        except OSError:
            if not built(key):
                raise
    return key


def tree_env(tree: cann.CannTree) -> dict[str, str]:
    """This process's environment (without its CANN variables) as ``source set_env.sh`` leaves it."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_") and k != "LD_PRELOAD"}
    for k in ("LD_LIBRARY_PATH", "PYTHONPATH"):
        base.pop(k, None)
    env = tree.environ(base)
    # The Python samples run `torchrun` and `python3`: the stand-in's and this interpreter's.
    env["PATH"] = os.pathsep.join([str(STANDIN / "bin"), str(Path(sys.executable).parent), env["PATH"]])
    return env


def python_env(tree: cann.CannTree, package: Path) -> dict[str, str]:
    """``tree_env`` with the official package and the torch stand-in importable."""
    env = tree_env(tree)
    env["PYTHONPATH"] = os.pathsep.join([str(package), str(STANDIN), env["PYTHONPATH"]])
    return env


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    need_cmake()
    where = tmp_path_factory.mktemp("cann-samples")
    tree = cann.write_tree(where / "toolkit")
    samples = tree.root / "tools" / "mspti" / "samples"
    shutil.rmtree(samples)
    shutil.copytree(UPSTREAM / "samples", samples)
    results_dir = where / "st-results"
    env = tree_env(tree)
    env.update(RESULT_DIR=str(results_dir), MODEL_PATH=str(where / "no-models"))

    def start(sample: str, cls: str, case_env: dict[str, str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", RUNNER, str(ST_SCRIPTS), cls, sample],
            env=case_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    running = {s: start(s, c, env) for s, c in C_CASES.items()}
    package, package_log = build_package(tree, env, where)
    py_env = {**python_env(tree, package), "RESULT_DIR": env["RESULT_DIR"], "MODEL_PATH": env["MODEL_PATH"]}
    if built(package):
        keep_package(package)
        running |= {s: start(s, c, py_env) for s, c in PYTHON_CASES.items()}
    results = {}
    for sample, p in running.items():
        try:
            report, _ = p.communicate(timeout=CASE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.kill()
            report, _ = p.communicate()
        log_file = results_dir / sample / f"{sample}.log"
        log = log_file.read_text(errors="replace") if log_file.exists() else "(no output)"
        results[sample] = CaseResult(sample, p.returncode, report, log)
    return Run(tree, py_env, package, package_log, results)


def describe(r: CaseResult) -> str:
    checks = [line for line in r.report.splitlines() if "Error" in line or "ERROR" in line]
    return (
        f"st case {r.sample}: rc {r.returncode}\n"
        + "\n".join(checks[-8:])
        + "\n--- output ---\n"
        + r.log[-4000:]
    )


@pytest.mark.parametrize("sample", list(C_CASES))
def test_c_sample_builds_unchanged_and_passes_its_st_check(run: Run, sample: str) -> None:
    r = run.results[sample]
    assert "Built target" in r.log, describe(r)
    assert r.returncode == 0, describe(r)


def test_the_official_python_package_builds_on_the_tree(run: Run) -> None:
    assert (run.package / "mspti" / "lib64" / "mspti_C.so").is_file(), run.package_log[-4000:]


@pytest.mark.parametrize("sample", list(PYTHON_CASES))
def test_python_sample_runs_on_the_official_package_and_passes_its_st_check(run: Run, sample: str) -> None:
    assert sample in run.results, "the official package did not build:\n" + run.package_log[-4000:]
    r = run.results[sample]
    assert r.returncode == 0, describe(r)


MONITOR = textwrap.dedent(
    """
    import ctypes, sys
    from mspti import KernelMonitor
    got = []
    m = KernelMonitor()
    m.start(got.append)
    import torch
    torch.npu.set_device(0)
    x = torch.randn(4, 4).npu()
    y = x + x
    torch.npu.synchronize()
    m.stop()
    print("kernels", len(got), got[0].name if got else "")
    """
)


def run_monitor(run: Run, lib64_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", MONITOR], capture_output=True, text=True, env=lib64_env, timeout=300
    )


def test_the_official_monitor_runs_to_completion_with_the_trees_log_library(run: Run) -> None:
    out = run_monitor(run, {**run.env, "LD_PRELOAD": str(run.tree.mspti)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[:2] == ["kernels", "1"], out.stdout
    assert "Add_" in out.stdout
    assert "Rust cannot catch" not in out.stderr


def test_without_the_log_library_the_official_package_dies_in_the_simulator(run: Run, tmp_path: Path) -> None:
    """What the tree's libascendalog.so prevents: the package's buffer callback logs through it,
    and a missing one throws a C++ exception through the simulator, which ends the process."""
    bare = cann.write_tree(tmp_path / "bare")
    (bare.lib64 / "libascendalog.so").unlink()
    out = run_monitor(run, {**python_env(bare, run.package), "LD_PRELOAD": str(bare.mspti)})
    assert out.returncode != 0
    assert "libascendalog" in out.stdout + out.stderr
