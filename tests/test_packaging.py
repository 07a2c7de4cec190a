"""Packaging: the sdist carries what a build needs to ship the simulator, the wheel checker refuses a
shared object of the wrong architecture, and the tests need nothing outside the repository.

The installs themselves (sdist into a fresh venv, `pip install .`, git+file://, the wheels of both
architectures) are CI steps, not tests here: `make wheels` (the sdist's pip install, then the wheels),
`make check-installs`, `make check-sdist`.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from conftest import ROOT

spec = importlib.util.spec_from_file_location("check_wheels", ROOT / "scripts" / "check_wheels.py")
assert spec and spec.loader
check_wheels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_wheels)

PACKAGE = ROOT / "python" / "mspti_lens"
MSPTI_HEADERS = ("mspti.h", "mspti_result.h", "mspti_callback.h", "mspti_cbid.h", "mspti_activity.h")


def elf(machine: int) -> bytes:
    """The start of a 64-bit little-endian ELF shared object for ``machine`` (all the checker reads)."""
    header = bytearray(64)
    header[:7] = b"\x7fELF\x02\x01\x01"
    struct.pack_into("<HH", header, 16, 3, machine)  # e_type ET_DYN, e_machine
    return bytes(header)


def fake_wheel(
    path: Path, sim_machine: int, native_machine: int, native_tail: bytes = b"", licence: bool = True
) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(check_wheels.BUNDLED_SIM, elf(sim_machine))
        z.writestr("mspti_lens/_native.abi3.so", elf(native_machine) + native_tail)
        for name in check_wheels.REQUIRED:
            if name != check_wheels.BUNDLED_SIM:
                z.writestr(name, "")
        if licence:
            z.writestr("mspti_lens-0.1.0.dist-info/licenses/LICENSE", "MIT License")
    return path


def test_wheel_check_passes_a_wheel_whose_objects_match_its_tag(tmp_path):
    w = fake_wheel(tmp_path / "mspti_lens-0.1.0-cp310-abi3-linux_aarch64.whl", 183, 183)
    assert check_wheels.problems(w) == []


def test_wheel_check_refuses_a_wheel_without_the_licence(tmp_path):
    w = fake_wheel(tmp_path / "mspti_lens-0.1.0-cp310-abi3-linux_x86_64.whl", 62, 62, licence=False)
    assert check_wheels.problems(w) == ["missing the licence: no LICENSE in the .dist-info"]


def test_wheel_check_refuses_an_extension_built_with_the_test_hooks(tmp_path):
    w = fake_wheel(tmp_path / "mspti_lens-0.1.0-cp310-abi3-linux_x86_64.whl", 62, 62, b"\0_bench_complete\0")
    assert check_wheels.problems(w) == [
        "mspti_lens/_native.abi3.so: built with the test hooks (_bench_complete): feature test-hooks"
    ]


def test_the_development_build_has_the_test_hooks_and_keeps_them_out_of_all():
    from mspti_lens import _native

    assert all(hasattr(_native, h.decode()) for h in check_wheels.TEST_HOOKS if h != b"_pause_drain")
    assert hasattr(_native.NativeActivity, "_pause_drain")
    assert [n for n in _native.__all__ if n.startswith("_") and not n.startswith("__")] == []


def test_wheel_check_refuses_a_simulator_of_another_architecture(tmp_path):
    w = fake_wheel(tmp_path / "mspti_lens-0.1.0-cp310-abi3-linux_aarch64.whl", 62, 183)
    assert check_wheels.problems(w) == [f"{check_wheels.BUNDLED_SIM}: ELF machine 62, expected 183 (aarch64)"]


def test_wheel_check_refuses_a_wheel_without_the_simulator_or_abi3(tmp_path):
    w = tmp_path / "mspti_lens-0.1.0-cp311-cp311-manylinux_2_17_x86_64.whl"
    with zipfile.ZipFile(w, "w") as z:
        z.writestr("mspti_lens/_native.cpython-311-x86_64-linux-gnu.so", elf(62))
    found = check_wheels.problems(w)
    assert f"not an abi3 wheel: {w.name}" in found
    assert f"missing {check_wheels.BUNDLED_SIM}" in found


def test_the_bundled_simulator_is_built_for_this_machine():
    """`make dev` (maturin develop) ran the extension's build script, which built the simulator."""
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine())
    sim = PACKAGE / "sim" / "libmspti_sim.so"
    assert sim.is_file(), "the extension's build script (rust/lens/build.rs) puts the simulator here"
    assert check_wheels.elf_machine(sim.read_bytes()[:64]) == check_wheels.MACHINES[arch]


def test_the_sdist_holds_the_simulator_sources_and_no_binaries(tmp_path):
    maturin = shutil.which("maturin", path=str(Path(sys.executable).parent)) or shutil.which("maturin")
    assert maturin, "maturin is installed by `make dev`"
    r = subprocess.run(
        [maturin, "sdist", "-o", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (sdist,) = tmp_path.glob("mspti_lens-*.tar.gz")
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    needed_files = (
        "rust/lens/build.rs",
        "rust/sim/Cargo.toml",
        "rust/sim/src/lib.rs",
        "Cargo.lock",
        "LICENSE",
    )
    for needed in needed_files + tuple(f"rust/sim/cann/include/mspti/{h}" for h in MSPTI_HEADERS):
        assert needed in names, needed
    assert not [n for n in names if n.endswith((".so", ".whl"))]


def test_tests_read_no_data_from_outside_the_repository():
    """A bare clone passes: no test, fuzz target or benchmark reaches for the reference directory
    beside the repository, or for /work."""
    sibling = "shared"  # the directory beside the clone (named here once, so this guard does not match)
    outside = re.compile(rf"""(\.parent\s*/\s*["']{sibling}["']|\.\./{sibling}|/work/)""")
    hits = [
        f"{p.relative_to(ROOT)}:{i}"
        for d in ("tests", "fuzz", "bench")
        for p in sorted((ROOT / d).rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if outside.search(line) and p.name != "test_packaging.py"
    ]
    assert hits == []


def step_timer(tmp_path, *steps: str, **env: str) -> tuple[subprocess.CompletedProcess, dict]:
    """scripts/timed_steps.sh with a `make` whose step passes when its name starts with "good" (a
    step named "good-cpu" first spends 1.5 s of CPU time); the result and the table's rows (step ->
    wall seconds, CPU seconds, result)."""
    make = tmp_path / "make"
    if not make.exists():
        burn = f"{sys.executable} -c 'import time\nwhile time.process_time() < 1.5: pass'"
        # `make --no-print-directory STEP`
        make.write_text(
            f'#!/bin/sh\ncase $2 in good-cpu) {burn} ;; good-nice*) echo "$2 niceness $(nice)" ;; esac\n'
            "case $2 in good*) exit 0 ;; *) exit 1 ;; esac\n"
        )
        make.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "MAKE": str(make), **env}
    r = subprocess.run(
        [str(ROOT / "scripts" / "timed_steps.sh"), *steps], capture_output=True, text=True, env=env
    )
    lines = r.stdout.splitlines()
    head = max(i for i, line in enumerate(lines) if line.split()[:1] == ["step"])
    return r, {line.split()[0]: line.split()[1:] for line in lines[head + 1 :] if line.strip()}


def test_the_step_timer_prints_every_step_that_ran_also_when_one_fails(tmp_path):
    r, rows = step_timer(tmp_path, "good", "bad", "never")
    assert r.returncode == 1, r.stdout + r.stderr
    assert rows["good"][2:] == ["ok"] and rows["bad"][2:] == ["FAILED", "(1)"] and "never" not in rows
    assert all(v.isdigit() for row in rows.values() for v in row[:2]), r.stdout
    assert "total" in rows
    r, rows = step_timer(tmp_path, "good", "bad", "never", KEEP_GOING="1")
    assert r.returncode == 1 and "never" in rows  # on to the end, the first failure's status


def test_the_step_timer_counts_the_cpu_time_of_what_each_step_ran(tmp_path):
    r, rows = step_timer(tmp_path, "good-cpu", "good")
    assert r.returncode == 0, r.stdout + r.stderr
    assert int(rows["good-cpu"][1]) >= 1 and rows["good"][1] == "0", r.stdout


def test_the_step_timer_runs_a_plus_b_side_by_side_each_with_its_own_row(tmp_path):
    r, rows = step_timer(tmp_path, "good+good-cpu", "good2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert rows["good"][2:] == rows["good-cpu"][2:] == ["ok", "(side", "by", "side:", "good+good-cpu)"]
    # each side's CPU is its own: the side that burnt 1.5 s has it, the other none
    assert int(rows["good-cpu"][1]) >= 1 and rows["good"][1] == "0", r.stdout
    assert "== output of good-cpu (beside good)" in r.stdout and rows["good2"][2:] == ["ok"]
    r, rows = step_timer(tmp_path, "good+bad", "never")
    assert r.returncode == 1 and rows["bad"][2] == "FAILED" and "never" not in rows, r.stdout


def test_the_step_timer_runs_a_side_of_several_steps_in_order_up_to_a_failure(tmp_path):
    r, rows = step_timer(tmp_path, "good+good-cpu,good-after", "good2")
    assert r.returncode == 0, r.stdout + r.stderr
    side = ["ok", "(side", "by", "side:", "good+good-cpu,good-after)"]
    assert rows["good"][2:] == rows["good-cpu"][2:] == rows["good-after"][2:] == side, r.stdout
    # one after the other in their side: each step's CPU is its own
    assert int(rows["good-cpu"][1]) >= 1 and rows["good-after"][1] == "0", r.stdout
    # the side runs niced, so that it takes only what the main step leaves idle
    r, rows = step_timer(tmp_path, "good-nice-main+good-nice-side", "good-nice-alone")
    assert r.returncode == 0, r.stdout + r.stderr
    nice = dict(re.findall(r"^good-nice-(\w+) niceness (\d+)$", r.stdout, re.M))
    assert nice["main"] == nice["alone"] == str(os.nice(0)) and nice["side"] == "19", r.stdout
    r, rows = step_timer(tmp_path, "good+bad,never", "never2")
    assert r.returncode == 1 and rows["bad"][2] == "FAILED" and "never" not in rows, r.stdout
    assert "never2" not in rows and "good" in rows
