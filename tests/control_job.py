"""A simulated job whose ranks make their calls in phases the test sets off, for the control
tests: ``python tests/control_job.py --ranks N --sync DIR [--hosts a,a,b]``.

Each rank waits for ``DIR/go-K`` (K = 1, 2, ...), then makes ``2**K`` aclrtLaunchKernel and
``2**K`` HcclAllReduce calls on its own simulator and writes ``DIR/done-K-RANK``; ``DIR/end``
ends it. The counts of the phases are distinct powers of two, so a rank's total tells exactly
which phases were counted. Every rank has a watchdog: no phase set off within WATCHDOG_S ends it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

WATCHDOG_S = 300.0
LAUNCH_NS = 2_000
ALLREDUCE_NS = 30_000


def calls(phase: int) -> int:
    return 2**phase


def rank_main(rank: int, sync: Path) -> int:
    from mspti_lens.sim.driver import Simulator

    sim = Simulator()
    sim.set_clock("virtual")
    launch, allreduce = sim.api("aclrtLaunchKernel"), sim.api("HcclAllReduce")
    phase = 1
    deadline = time.monotonic() + WATCHDOG_S
    while time.monotonic() < deadline:
        if (sync / "end").exists():
            return 0
        if (sync / f"go-{phase}").exists():
            for _ in range(calls(phase)):
                sim.lib.msimCall(launch, LAUNCH_NS)
                sim.lib.msimCall(allreduce, ALLREDUCE_NS)
            (sync / f"done-{phase}-{rank}").touch()
            phase += 1
            deadline = time.monotonic() + WATCHDOG_S
            continue
        time.sleep(0.01)
    print(f"[control job] rank {rank}: no phase {phase} within {WATCHDOG_S} s", file=sys.stderr)
    return 1


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--sync", required=True)
    p.add_argument("--hosts", default=None, help="the simulated host of each rank, comma-separated")
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    sync = Path(a.sync)
    if a.rank is not None:
        return rank_main(a.rank, sync)
    hosts = a.hosts.split(",") if a.hosts else ["sim-host-0"] * a.ranks
    procs = []
    for r in range(a.ranks):
        env = {**os.environ, "RANK": str(r), "WORLD_SIZE": str(a.ranks), "LOCAL_RANK": str(r)}
        env["MSPTI_LENS_HOST"] = hosts[r]
        cmd = [sys.executable, __file__, "--ranks", str(a.ranks), "--sync", a.sync, "--rank", str(r)]
        procs.append(subprocess.Popen(cmd, env=env))
    (sync / "pids").write_text(" ".join(str(p.pid) for p in procs))
    return max(p.wait() for p in procs)


if __name__ == "__main__":
    sys.exit(main())
