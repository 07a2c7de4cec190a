"""A simulated job whose ranks all-reduce together in phases the test sets off, for the tests of
instances across on periods: ``python tests/collective_phase_job.py --ranks N --sync DIR``.

Each rank waits for ``DIR/go-K`` (K = 1, 2, ...), then makes ``STEPS[K - 1]`` steps of host work
(COMPUTE_NS; rank LATE_RANK LATE_NS more) and one HcclAllReduce over every rank, and writes
``DIR/done-K-RANK``; ``DIR/end`` ends it. The all-reduces meet in the simulator's shared-memory
barrier (mspti_lens.sim.job) on the virtual clock, started an hour ahead of real time so that no
pause between phases moves a rank's clock: every instance has rank LATE_RANK exactly LATE_NS
late, whichever ranks are profiled. Every rank has a watchdog: no phase within WATCHDOG_S ends it.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import time
from pathlib import Path

WATCHDOG_S = 300.0
STEPS = (3, 4, 5, 2, 6, 3, 7)  # per phase: distinct, so a miscount shows
COMPUTE_NS = 50_000
LATE_RANK = 1
LATE_NS = 7_000
ALLREDUCE_NS = 30_000
CLOCK_LEAD_NS = 3600 * 10**9


def rank_main(rank: int, ranks: int, sync: Path, region: str, start_ns: int) -> int:
    from mspti_lens.sim import job
    from mspti_lens.sim.driver import Simulator

    plan = job.JobPlan(ranks=ranks, timeout=WATCHDOG_S)
    sim = Simulator()
    lib = job._bind(sim.lib)
    sim.set_clock("virtual")
    sim.lib.msimVirtualSet(start_ns)
    mapping = job._Region(lib, region, plan)  # noqa: F841 - must stay mapped
    lib.msimHostWork.argtypes = [ctypes.c_uint64]
    allreduce = sim.api("HcclAllReduce")
    work = COMPUTE_NS + (LATE_NS if rank == LATE_RANK else 0)
    phase = 1
    deadline = time.monotonic() + WATCHDOG_S
    while time.monotonic() < deadline:
        if (sync / "end").exists():
            return 0
        if (sync / f"go-{phase}").exists():
            for _ in range(STEPS[phase - 1]):
                lib.msimHostWork(work)
                lib.msimMultirankGroup(0, ranks)
                lib.msimSetCommName(job.WORLD_GROUP.encode())
                rc = sim.lib.msimCall(allreduce, ALLREDUCE_NS)
                if rc != 0:
                    print(f"[phase job] rank {rank}: HcclAllReduce failed ({rc})", file=sys.stderr)
                    return 1
            (sync / f"done-{phase}-{rank}").touch()
            phase += 1
            deadline = time.monotonic() + WATCHDOG_S
            continue
        time.sleep(0.01)
    print(f"[phase job] rank {rank}: no phase {phase} within {WATCHDOG_S} s", file=sys.stderr)
    return 1


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--sync", required=True)
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--region", default=None, help=argparse.SUPPRESS)
    p.add_argument("--start-ns", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args()
    sync = Path(a.sync)
    if a.rank is not None:
        return rank_main(a.rank, a.ranks, sync, a.region, a.start_ns)
    from mspti_lens.sim import job
    from mspti_lens.sim.driver import Simulator

    plan = job.JobPlan(ranks=a.ranks, timeout=WATCHDOG_S)
    region = job._region_file(plan)
    try:
        mapping = job._Region(job._bind(Simulator().lib), region, plan)  # noqa: F841
        start_ns = time.time_ns() + CLOCK_LEAD_NS
        procs = []
        for r in range(a.ranks):
            env = {**os.environ, "RANK": str(r), "WORLD_SIZE": str(a.ranks), "LOCAL_RANK": str(r)}
            cmd = [sys.executable, __file__, "--ranks", str(a.ranks), "--sync", a.sync, "--rank", str(r)]
            cmd += ["--region", region, "--start-ns", str(start_ns)]
            procs.append(subprocess.Popen(cmd, env=env))
        (sync / "pids").write_text(" ".join(str(p.pid) for p in procs))
        return max(p.wait() for p in procs)
    finally:
        Path(region).unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
