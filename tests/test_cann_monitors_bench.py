"""bench/cann_monitors.py in its quick mode (what bench/run.py --quick runs in CI): no profiler and
mspti-lens's activity collector (and CANN's official monitors and msMonitor where they are
installed: the bench only looks for them), each in its own process on the simulated CANN tree, on
the kernel-only loop and the mixed training step, must report identical per-name count, total, min
and max and lose no record. Timings are not asserted (the machine is shared); the agreement check
is, and so is that the check can fail; the cost goals are judged per case on made-up runs; a peer
that is not installed is reported so, with how to point the bench at it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "cann_monitors.py"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc (the workload)"),
]


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("cann-monitors") / "result.json"
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
    assert {"none", "library", "lens"} <= set(quick["sides"])
    for case in cases.values():
        runs = case["runs"]
        assert all(len(runs[s]) == quick["rounds"] >= 2 for s in quick["sides"])
        for side in [*measured(quick), "library"]:
            for r in runs[side]:
                assert r["rc"] == 0 and r["delivered"], (side, r)
                assert r["got"] == r["expected"], (side, "lost records")
                assert r["collector_cpu_ns"] > 0 and r["wall_ns"] >= r["loop_wall_ns"] > 0


def test_the_kernel_loop_has_the_library_write_kernel_records_only(quick: dict) -> None:
    # A kernel-only Session traces no launch callback, so it has no launch join and must not ask
    # the library for the RUNTIME_API records the join needs (they would double its records).
    case = quick["cases"]["kernels/virtual"]
    for side in set(measured(quick)) - {"msmonitor"} | {"library"}:
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
        # The default session's join is sampled: the snapshot says so with the measured fraction.
        assert r["join"].startswith("runtime_api, sampled"), r["join"]
        assert 0 <= r["sampled_fraction"] <= 1
        # Its own RUNTIME_API records (those of its sample windows) beside the workload's kernels,
        # collectives and markers.
        assert r["records_parsed"] >= sum(want.values())


def measured(quick: dict) -> list[str]:
    """The sides that collected records per name: mspti-lens, and each peer that is installed
    (not the baselines: no profiler, and the library alone with its minimal consumer)."""
    return [s for s in quick["sides"] if s not in bench_module().BASELINES]


def bench_module():
    sys.path.insert(0, str(ROOT / "bench"))
    import cann_monitors

    return cann_monitors


def test_every_side_that_ran_reports_the_same_per_name_numbers_exactly(quick: dict) -> None:
    for name, case in quick["cases"].items():
        ag = case["agreement"]
        assert ag["exact"], (name, ag["mismatches"][:10])
        assert all(ag["compared"][s] == quick["rounds"] for s in measured(quick)), name
        ref = ag["reference"]
        assert ag["records"] == sum(bench_module().expected(case["workload"], case["n"]).values())
        assert len(ref["kernels"]) == bench_module().KERNEL_NAMES
        if case["clock"] == "virtual":
            for side in measured(quick):
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
    # Without a peer, mspti-lens's processes are held to the first of them.
    alone = cann_monitors.agreement({"none": [], "lens": [res(same), res(off)]})
    assert alone["mismatches"] == [("lens", 1, "kernels", "a", [2, 30, 10, 20], [2, 30, 10, 21])]


def test_a_peer_that_is_not_installed_is_reported_with_how_to_point_the_bench_at_it(quick: dict) -> None:
    cann_monitors = bench_module()
    section = "\n".join(cann_monitors.render(quick))
    for side, peer in quick["peers"].items():
        package, _, option, var = cann_monitors.PEERS[side]
        if peer["at"]:
            assert side in quick["sides"] and f"installed at `{peer['at']}`" in section
        else:
            assert side not in quick["sides"]
            assert f"cannot `import {package}`" in section
            assert f"`{option} DIR` or `{var}=DIR`" in section


def test_a_peer_is_looked_for_where_the_bench_is_pointed_and_only_there(tmp_path: Path) -> None:
    cann_monitors = bench_module()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cann_monitors.peer_install("official", env, str(empty)) is None
    # A directory holding a package of the peer's name without the peer's API is not the peer.
    other = tmp_path / "other" / "mspti"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    assert cann_monitors.peer_install("official", env, str(other.parent)) is None
    # One that has it is found there: the side's process gets the directory first on sys.path.
    (other / "__init__.py").write_text("KernelMonitor = object\n")
    assert cann_monitors.peer_install("official", env, str(other.parent)) == str(other)
    # The option wins over the environment variable, which wins over the CANN tree's site-packages.
    home = {"ASCEND_HOME_PATH": "/opt/cann", "MSPTI_LENS_MSMONITOR_PATH": "/m"}
    assert cann_monitors.peer_paths({}, home) == {
        "official": "/opt/cann/python/site-packages",
        "msmonitor": "/m",
    }
    env_var = {"MSPTI_LENS_OFFICIAL_PATH": "/e"}
    assert cann_monitors.peer_paths({"official": "/o"}, env_var)["official"] == "/o"
    assert cann_monitors.peer_paths({}, env_var) == {"official": "/e", "msmonitor": None}


def test_the_cost_goals_are_judged_per_case_on_collector_and_charged_cpu_less_the_library_part() -> None:
    # Made-up runs of 1,000 records a process, so each ratio is known: the verdicts must follow
    # the goals of each case, on the measure each goal names, charged CPU with the library's own
    # record writing (the library side's workload-thread extra, which every side pays) taken off,
    # and judge nothing elsewhere.
    cann_monitors = bench_module()
    n = 1000

    def run(workload: str, collector: int, extra: int, **more) -> dict:
        want = {"kernels": n, "collectives": 0, "markers": 0}
        per = {"kernels": {"k": [n, n, 1, 1]}, "collectives": {}, "ranges": {}, "marks": {}}
        return {
            "workload": workload,
            "expected": want,
            "got": dict(want),
            "per_name": per,
            "collector_cpu_ns": collector,
            "workload_cpu_ns": 1_000_000 + extra,
            "producer_cpu_ns": 0,
            "wall_ns": 10**9,
            "results_cpu_ns": 0,
            **more,
        }

    # (collector, workload-thread extra) in ns per process of each side, per case.
    mixed = {
        # The library writes the records for 50 ns each; lens 210 ns less that, msMonitor 450 and
        # the official monitors 3,200. Against msMonitor: collector 4x (goal 3x: met), charged
        # less the shared part 2.1x (goal 2x: met; with it, 500 / 260 = 1.9x); against the
        # official monitors 15.2x (goal 15x: met; with it, 12.5x).
        "library": (5_000, 50_000),
        "official": (3_200_000, 50_000),
        "msmonitor": (400_000, 100_000),
        "lens": (100_000, 160_000),
    }
    cost = {
        "mixed/virtual": mixed,
        # kernels: lens 45 ns less the library's 40, msMonitor 320: 7.1x (goal 8x: missed).
        "kernels/virtual": {
            "library": (5_000, 40_000),
            "official": (3_000_000, 40_000),
            "msmonitor": (300_000, 60_000),
            "lens": (45_000, 40_000),
        },
        # the real clock: no cost goal.
        "mixed/real": mixed,
    }

    def section_of(cost: dict) -> list[str]:
        sides = [s for s in cann_monitors.SIDES if s == "none" or s in cost["mixed/virtual"]]
        r: dict = {"quick": False, "rounds": 1, "sides": sides, "cases": {}}
        r["peers"] = {side: {"path": None, "at": f"/peers/{side}"} for side in cann_monitors.PEERS}
        for case, by_side in cost.items():
            wl, clock = case.split("/")
            runs = {"none": [run(wl, 0, 0)]}
            runs.update({s: [run(wl, c, e)] for s, (c, e) in by_side.items()})
            runs["lens"][0].update(records_parsed=n, join="off", counters={})
            r["cases"][case] = {
                "workload": wl,
                "clock": clock,
                "n": n,
                "runs": runs,
                "agreement": cann_monitors.agreement(runs),
            }
        return cann_monitors.render(r)

    def against(section: list[str], case: str, side: str) -> str:
        at = section.index(next(x for x in section if x.startswith("### ") and f"({case})" in x))
        name = cann_monitors.LABEL[side].split(",")[0].split(" (")[0]
        return next(x for x in section[at:] if x.startswith(f"- mspti-lens against {name}:"))

    section = section_of(cost)
    mixed_msmonitor = against(section, "mixed/virtual", "msmonitor")
    assert "2.1x less CPU per record" in mixed_msmonitor
    assert "charged with the library's part 1.9x less" in mixed_msmonitor
    assert "collector CPU alone 4.0x less" in mixed_msmonitor
    assert "Goal >= 3x collector: met." in mixed_msmonitor
    assert "Goal >= 2x charged less the shared part: met." in mixed_msmonitor
    mixed_official = against(section, "mixed/virtual", "official")
    assert "charged with the library's part 12.5x less" in mixed_official
    assert mixed_official.endswith("Goal >= 15x charged less the shared part: met.")
    kernels_msmonitor = against(section, "kernels/virtual", "msmonitor")
    assert kernels_msmonitor.endswith("Goal >= 8x charged less the shared part: **missed** (7.1x of 8x).")
    assert "collector" not in kernels_msmonitor.split("Goal")[1]
    for case, side in (
        ("kernels/virtual", "official"),
        ("mixed/real", "official"),
        ("mixed/real", "msmonitor"),
    ):
        assert "Goal" not in against(section, case, side)
    # The shared part is its own column (the same for every side of a round), the old charged
    # figure beside it: lens's row of the mixed step reads charged 0.260, shared 0.050, less 0.210.
    lens_row = next(x for x in section if x.startswith(f"| {cann_monitors.LABEL['lens']} |") and "0.260" in x)
    assert "| 0.260 | 0.260 .. 0.260 | 0.050 | 0.210 |" in lens_row
    assert any("The simulated library writing the records" in x for x in section)

    # Without a library side (results of an older run) the goals fall back to charged CPU with the
    # library's part in it, and the section says so.
    older = {case: {s: v for s, v in by_side.items() if s != "library"} for case, by_side in cost.items()}
    section = section_of(older)
    assert against(section, "mixed/virtual", "msmonitor").endswith(
        "Goal >= 2x charged: **missed** (1.9x of 2x)."
    )
    assert any("This run had no library side" in x for x in section)
