"""The MSPTI Callback API guide's scenarios as programs of this project's own
(tests/data/scenarios: a whole domain traced with ENTER/EXIT printed; LAUNCH only, with MSTX marks
from the callback, userdata, and MARKER and KERNEL activity; ENTER/EXIT sharing data; HCCL
callbacks naming each op; and the Activity API's buffers), built with CMake against a simulated
CANN tree exactly as a user builds a program for CANN (``python -m mspti_lens.sim cann DIR``,
``source DIR/set_env.sh``, cmake), run with libmspti.so preloaded, and held to mspti-lens on the
same work in its own process (the programs' work is a library, loaded there too): the same calls,
kernels, collectives and copies, counts exact and names exact."""

from __future__ import annotations

import collections
import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        any(shutil.which(t) is None for t in ("cmake", "cc", "bash")),
        reason="needs cmake, a C compiler and bash",
    ),
]

SCENARIOS = Path(__file__).resolve().parents[1] / "data" / "scenarios"
PROGRAMS = ("domain_trace", "launch_mstx", "enter_exit_shared", "hccl_ops", "activity_buffers")
STEPS = 3
# The work's steps: two launches (aclnnAdd, aclnnMatmul), three copies, all-reduce and broadcast
# each step, a barrier every other step (tests/data/scenarios/work.c).
LAUNCHES, COPIES, BARRIERS = 2 * STEPS, 3 * STEPS, (STEPS + 1) // 2

# The same work under a mspti-lens Session: what it saw, as JSON.
LENS = textwrap.dedent(
    """
    import ctypes, json, sys, warnings
    warnings.simplefilter("ignore")  # the simulated-backend warning
    import mspti_lens
    work = ctypes.CDLL(sys.argv[1])
    work.scenario_open.restype = ctypes.c_void_p
    work.scenario_steps.argtypes = [ctypes.c_void_p, ctypes.c_int]
    work.scenario_close.argtypes = [ctypes.c_void_p]
    kinds = ["kernel", "communication", "marker", "memcpy"]
    with mspti_lens.Session(enable=["runtime", "hccl"], activity=kinds) as s:
        w = work.scenario_open()
        assert w and work.scenario_steps(w, int(sys.argv[2])) == 0 and work.scenario_close(w) == 0
        snap = s.snapshot()
    rows = lambda df, *cols: [[r[c] for c in cols] for r in df.iter_rows(named=True)]
    print(json.dumps({
        "calls": rows(snap.summary(), "domain", "callback", "name", "num_calls"),
        "kernels": rows(snap.kernels(), "name", "num_calls"),
        "collectives": rows(snap.collectives(), "op", "from", "num_calls"),
        "memcpy": rows(snap.memcpy(), "direction", "num_calls"),
    }))
    """
)


@dataclass
class Lens:
    calls: dict[str, int]  # function name: calls
    domain: dict[str, str]
    callback: dict[str, str]
    kernels: dict[str, int]
    collectives: dict[str, int]  # the COMMUNICATION records' op names
    memcpy: dict[str, int]


@dataclass
class Scenarios:
    outputs: dict[str, list[str]]
    lens: Lens


def user_shell(tree: Path, command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`command` in a login-less shell that sourced the tree's set_env.sh, as a user's would."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_") and k != "LD_PRELOAD"}
    script = f"source {shlex.quote(str(tree / 'set_env.sh'))} && {command}"
    return subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, cwd=cwd, timeout=600
    )


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory: pytest.TempPathFactory) -> Scenarios:
    where = tmp_path_factory.mktemp("scenarios")
    tree = where / "toolkit"
    out = subprocess.run(
        [sys.executable, "-m", "mspti_lens.sim", "cann", str(tree)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    build = where / "build"
    out = user_shell(
        tree, f"cmake -S {shlex.quote(str(SCENARIOS))} -B build && cmake --build build -j 2", where
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    preload = "LD_PRELOAD=$ASCEND_HOME_PATH/lib64/libmspti.so"
    outputs = {}
    for p in PROGRAMS:
        run = user_shell(tree, f"{preload} ./build/{p} {STEPS}", where)
        assert run.returncode == 0, (p, run.returncode, run.stdout[-2000:], run.stderr[-2000:])
        outputs[p] = run.stdout.splitlines()
    lens_run = user_shell(
        tree,
        f"{preload} {shlex.quote(sys.executable)} -c {shlex.quote(LENS)} {build}/libscenario_work.so {STEPS}",
        where,
    )
    assert lens_run.returncode == 0, lens_run.stderr[-3000:]
    got = json.loads(lens_run.stdout.splitlines()[-1])
    lens = Lens(
        calls={name: n for _, _, name, n in got["calls"]},
        domain={name: d for d, _, name, _ in got["calls"]},
        callback={name: cb for _, cb, name, _ in got["calls"]},
        kernels=dict(got["kernels"]),
        collectives={op: n for op, src, n in got["collectives"] if src == "communication"},
        memcpy=dict(got["memcpy"]),
    )
    return Scenarios(outputs, lens)


def tally(lines: list[str], label: str) -> dict[str, int]:
    """The "<label> <name> <count>" lines of a program's output."""
    return {p[1]: int(p[2]) for p in (line.split() for line in lines) if len(p) == 3 and p[0] == label}


def test_the_whole_runtime_domain_traced_sees_every_call_mspti_lens_sees(scenarios: Scenarios) -> None:
    lines = scenarios.outputs["domain_trace"]
    enters = collections.Counter(line.split()[1] for line in lines if line.startswith("[ENTER] "))
    exits = collections.Counter(line.split()[1] for line in lines if line.startswith("[EXIT] "))
    assert len(lines) == sum(enters.values()) + sum(exits.values())
    runtime = {n: c for n, c in scenarios.lens.calls.items() if scenarios.lens.domain[n] == "runtime"}
    assert enters == exits == runtime
    # Not a trivial match: the work's calls, by name.
    assert runtime["aclrtLaunchKernelWithHostArgs"] == LAUNCHES and runtime["aclrtMemcpy"] == COPIES
    assert runtime["aclrtSetDevice"] == runtime["aclrtResetDevice"] == 1
    # ENTER and EXIT alternate: no call of the work nests another.
    sites = [line.split()[0] for line in lines]
    assert sites == ["[ENTER]", "[EXIT]"] * (len(lines) // 2)


def test_launch_only_marks_each_launch_on_the_userdatas_stream_beside_its_kernels(
    scenarios: Scenarios,
) -> None:
    lines = scenarios.outputs["launch_mstx"]
    lens = scenarios.lens
    launch_fns = {n: c for n, c in lens.calls.items() if lens.callback[n] == "LAUNCH"}
    assert sum(launch_fns.values()) == LAUNCHES
    # Only LAUNCH was traced: exactly the launch functions mspti-lens counted, each call once.
    assert tally(lines, "launch") == launch_fns
    # A mark at ENTER and one at EXIT, named after the function: MARKER records on the host, and,
    # marked on a stream, one from the device each.
    assert tally(lines, "mark") == {n: 2 * c for n, c in launch_fns.items()}
    (device,) = [int(line.split()[1]) for line in lines if line.startswith("device-marks ")]
    assert device == 2 * LAUNCHES
    assert "foreign-userdata 0" in lines
    assert tally(lines, "kernel") == lens.kernels
    assert sum(lens.kernels.values()) == LAUNCHES and len(lens.kernels) == 2


def test_enter_and_exit_share_data_on_a_per_thread_stack_for_every_call(scenarios: Scenarios) -> None:
    lines = scenarios.outputs["enter_exit_shared"]
    exits = [line.split() for line in lines if line.startswith("[EXIT] ")]
    # Every EXIT found its own ENTER's time: none unpaired, none paired with another call.
    assert all(len(e) == 3 and e[2].startswith("duration_ns=") for e in exits), [
        e for e in exits if len(e) != 3
    ]
    assert all(int(e[2].removeprefix("duration_ns=")) > 0 for e in exits)
    runtime = {n: c for n, c in scenarios.lens.calls.items() if scenarios.lens.domain[n] == "runtime"}
    assert collections.Counter(e[1] for e in exits) == runtime


def test_hccl_callbacks_name_each_collective_as_mspti_lens_counts_it(scenarios: Scenarios) -> None:
    lines = scenarios.outputs["hccl_ops"]
    seen = collections.Counter(tuple(line.split()[1:]) for line in lines)
    hccl = {n: c for n, c in scenarios.lens.calls.items() if scenarios.lens.domain[n] == "hccl"}
    assert hccl == {"HcclAllReduce": STEPS, "HcclBroadcast": STEPS, "HcclBarrier": BARRIERS}
    for site in ("ENTER", "EXIT"):
        assert {op: seen[(site, op)] for site2, op in seen if site2 == site} == {
            n.removeprefix("Hccl"): c for n, c in hccl.items()
        }
    assert sum(seen.values()) == len(lines)


def test_the_activity_apis_buffers_hold_the_records_mspti_lens_collects(scenarios: Scenarios) -> None:
    lines = scenarios.outputs["activity_buffers"]
    lens = scenarios.lens
    assert tally(lines, "kernel") == lens.kernels
    assert tally(lines, "communication") == lens.collectives
    assert sum(lens.collectives.values()) == 2 * STEPS + BARRIERS
    assert tally(lines, "memcpy") == lens.memcpy == {"HTOD": 2 * STEPS, "DTOH": STEPS}
    # Each record took exactly its struct's size in the buffer the simulator wrote (kinds 2, 7, 9).
    sizes = {
        int(k): (int(a), int(b))
        for _, k, a, b in (line.split() for line in lines if line.startswith("record-size "))
    }
    assert sizes == {2: (56, 56), 7: (56, 56), 9: (72, 72)}
    total = sum(lens.kernels.values()) + sum(lens.collectives.values()) + sum(lens.memcpy.values())
    assert f"records {total} odd-sizes 0" in lines
