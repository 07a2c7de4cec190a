"""bench/cann_monitors.py in its quick mode (what bench/run.py --quick runs in CI): CANN's official
KernelMonitor and mspti-lens's activity collector, each in its own process on the simulated
CANN tree, must report identical per-name count, total, min and max. Timings are not asserted
(the machine is shared); the agreement check is, and so is that the check can fail."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "cann_monitors.py"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        any(shutil.which(t) is None for t in ("cmake", "c++", "gcc")),
        reason="needs cmake, c++ and gcc (the official package's build and the workload)",
    ),
]


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("cann-monitors") / "result.json"
    # It runs on the official package tests/test_cann_samples.py built and kept (it starts first);
    # alone, the first run builds it.
    p = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(out.read_text())


def test_quick_mode_runs_both_sides_in_alternating_processes(quick: dict) -> None:
    runs = quick["runs"]
    assert len(runs["official"]) == len(runs["lens"]) == quick["rounds"] >= 2
    for side in ("official", "lens"):
        for r in runs[side]:
            assert r["rc"] == 0 and r["delivered"], (side, r)
            assert r["collector_cpu_ns"] > 0 and r["wall_ns"] >= r["loop_wall_ns"] > 0


def test_both_sides_have_the_library_write_kernel_records_only(quick: dict) -> None:
    # A kernel-only Session traces no launch callback, so it has no launch join and must not ask
    # the library for the RUNTIME_API records the join needs (they would double its records).
    for side in ("official", "lens"):
        for r in quick["runs"][side]:
            assert r["library"]["records"] == r["library"]["kernels"] == quick["launches"], side
    for r in quick["runs"]["lens"]:
        assert r["records_parsed"] == quick["launches"]
        assert r["join"].startswith("off (no launch callbacks traced"), r["join"]


def bench_module():
    sys.path.insert(0, str(ROOT / "bench"))
    import cann_monitors

    return cann_monitors


def test_mspti_lens_frames_reproduce_the_official_monitors_numbers_exactly(quick: dict) -> None:
    ag = quick["agreement"]
    assert ag["exact"], ag["mismatches"][:10]
    assert ag["names"] == bench_module().KERNEL_NAMES
    assert ag["records"] == quick["launches"]
    for side in ("official", "lens"):
        for r in quick["runs"][side]:
            assert r["per_name"] == ag["reference"], side
            assert sum(v[0] for v in r["per_name"].values()) == quick["launches"]
    # Durations differ by name and within a name: the comparison is not of constants.
    stats = list(ag["reference"].values())
    assert len({v[3] for v in stats}) == len(stats)
    assert all(v[2] < v[3] for v in stats)


def test_the_agreement_check_reports_a_difference() -> None:
    cann_monitors = bench_module()
    same = {"a": [2, 30, 10, 20], "b": [1, 5, 5, 5]}
    off = {"a": [2, 30, 10, 21], "b": [1, 5, 5, 5]}
    runs = {"official": [{"per_name": same}], "lens": [{"per_name": dict(same)}, {"per_name": off}]}
    ag = cann_monitors.agreement(runs)
    assert not ag["exact"]
    assert ag["mismatches"] == [("lens", 1, "a", [2, 30, 10, 20], [2, 30, 10, 21])]
    missing = {"official": [{"per_name": same}], "lens": [{"per_name": {"a": same["a"]}}]}
    assert cann_monitors.agreement(missing)["mismatches"] == [("lens", 0, "b", [1, 5, 5, 5], None)]
