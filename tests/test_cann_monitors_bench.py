"""bench/cann_monitors.py in its quick mode (what bench/run.py --quick runs in CI): no profiler,
CANN's official monitors and mspti-lens's activity collector (and msMonitor where it is
installed), each in its own process on the simulated CANN tree, on the kernel-only loop and the
mixed training step, must report identical per-name count, total, min and max and lose no record.
Timings are not asserted (the machine is shared); the agreement check is, and so is that the check
can fail."""

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
    # It runs on the official package tests/sim/test_cann_samples.py built and kept (it starts first);
    # alone, the first run builds it.
    p = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(out.read_text())


def test_quick_mode_runs_every_side_in_alternating_processes(quick: dict) -> None:
    cases = quick["cases"]
    assert set(cases) == {"kernels/virtual", "mixed/virtual", "mixed/real"}
    assert {"none", "official", "lens"} <= set(quick["sides"])
    for case in cases.values():
        runs = case["runs"]
        assert all(len(runs[s]) == quick["rounds"] >= 2 for s in quick["sides"])
        for side in ("official", "lens"):
            for r in runs[side]:
                assert r["rc"] == 0 and r["delivered"], (side, r)
                assert r["got"] == r["expected"], (side, "lost records")
                assert r["collector_cpu_ns"] > 0 and r["wall_ns"] >= r["loop_wall_ns"] > 0


def test_the_kernel_loop_has_the_library_write_kernel_records_only(quick: dict) -> None:
    # A kernel-only Session traces no launch callback, so it has no launch join and must not ask
    # the library for the RUNTIME_API records the join needs (they would double its records).
    case = quick["cases"]["kernels/virtual"]
    for side in ("official", "lens"):
        for r in case["runs"][side]:
            assert r["library"]["records"] == r["library"]["kernels"] == case["n"], side
    for r in case["runs"]["lens"]:
        assert r["records_parsed"] == case["n"]
        assert r["join"].startswith("off (no launch callbacks traced"), r["join"]


def test_the_mixed_step_runs_as_a_default_session_joining_kernels_to_launches(quick: dict) -> None:
    case = quick["cases"]["mixed/virtual"]
    want = bench_module().expected("mixed", case["n"])
    assert all(want.values())
    for r in case["runs"]["lens"]:
        assert r["join"] == "runtime_api", r["join"]
        # Its own RUNTIME_API records beside the workload's kernels, collectives and markers.
        assert r["records_parsed"] > sum(want.values())


def bench_module():
    sys.path.insert(0, str(ROOT / "bench"))
    import cann_monitors

    return cann_monitors


def test_mspti_lens_frames_reproduce_the_official_monitors_numbers_exactly(quick: dict) -> None:
    for name, case in quick["cases"].items():
        ag = case["agreement"]
        assert ag["exact"], (name, ag["mismatches"][:10])
        assert ag["compared"]["official"] == ag["compared"]["lens"] == quick["rounds"], name
        ref = ag["reference"]
        assert ag["records"] == sum(bench_module().expected(case["workload"], case["n"]).values())
        assert len(ref["kernels"]) == bench_module().KERNEL_NAMES
        if case["clock"] == "virtual":
            for side in ("official", "lens"):
                for r in case["runs"][side]:
                    assert r["per_name"] == ref, (name, side)
        # Durations differ by name and within a name: the comparison is not of constants.
        stats = list(ref["kernels"].values())
        assert len({v[3] for v in stats}) == len(stats)
        assert all(v[2] < v[3] for v in stats)
    mixed = quick["cases"]["mixed/virtual"]["agreement"]["reference"]
    assert set(mixed["ranges"]) == set(bench_module().RANGES)
    assert set(mixed["marks"]) == set(bench_module().MARKS) and mixed["collectives"]


def test_the_agreement_check_reports_a_difference() -> None:
    cann_monitors = bench_module()
    want = {"kernels": 3, "collectives": 0, "markers": 0}

    def res(k: dict) -> dict:
        per = {"kernels": k, "collectives": {}, "ranges": {}, "marks": {}}
        return {"per_name": per, "expected": want, "got": cann_monitors.delivered_of(per)}

    same = {"a": [2, 30, 10, 20], "b": [1, 5, 5, 5]}
    off = {"a": [2, 30, 10, 21], "b": [1, 5, 5, 5]}
    runs = {"official": [res(same)], "lens": [res(dict(same)), res(off)]}
    ag = cann_monitors.agreement(runs)
    assert not ag["exact"]
    assert ag["mismatches"] == [("lens", 1, "kernels", "a", [2, 30, 10, 20], [2, 30, 10, 21])]
    # A process that lost records is reported as lost, not compared name by name.
    missing = {"official": [res(same)], "lens": [res({"a": same["a"]})]}
    ag = cann_monitors.agreement(missing)
    assert ag["exact"] and ag["compared"] == {"official": 1, "lens": 0}
    assert cann_monitors.lost(missing["lens"][0]) == 1
