"""A multi-process simulated job: ``python -m mspti_lens.sim job --ranks N [--hosts H]
[--slow-rank K] [--slow-link A-B] [--payload]``.

Every rank is a real process driving its own copy of the simulator, as every NPU process of a
torch_npu job drives its own CANN. Their collectives meet in one shared-memory region (the
simulator's ``multirank`` barrier, keyed by collective instance): a collective completes when
every rank of its group has entered it, as HCCL's do, so one slow rank makes the others wait.
With the virtual clock a waiting rank's clock jumps to the last arrival's time, so every
duration is exact and deterministic; with the real clock ranks really wait. On the virtual clock
every rank starts at one instant the launcher chose ahead of real time (``START_LEAD_S`` more
than the ranks' start-up and steps take), so their clocks never fall behind real time, which
would move each rank's clock on its own.

Per step a rank launches kernels (its compute: each kernel runs on the device for
``KERNEL_SHARE`` of its launch's host time, so the device keeps up with the host), all-reduces
its gradients over all ranks, swaps halos with one ring neighbour, the other one in the next
step (HcclBatchSendRecv in rank pairs, when the rank count is even) and synchronises its stream.
``--slow-rank K`` makes rank K's compute slower; ``--slow-link A-B`` makes the transfers between
neighbours A and B slower. ``--slowdown rank=R,step=S,factor=X`` makes rank R slow down from
step S on (a job that runs steadily, then degrades): its launches take X times as long on the
host and its kernels X times as long on the device, so it reaches every collective late and
the others wait for it; the rank says on stderr when it starts (``slowdown_line``).
``--step-ns N`` adds N ns of host work to every step (on the virtual clock it costs no real
time: a long simulated job in a few seconds).

The device-side COMMUNICATION records model HCCL's device wait: a rank's collective task runs from
its own start until the last rank's task has started, then transfers, so the late rank's
collective is the short one and starts last. Records name their communicator
(``hccl_world_group``, ``hccl_pair_A_B``). ``--payload`` gives the collectives a count and data
type (the all-reduce's ALLREDUCE_COUNT fp32 gradients, the swap's HALO_COUNT fp16 halo), so nccl-
tests' bytes, algbw and busbw follow from them exactly; the simulator's device model then adds the
bytes' transfer time (without it a collective is its latency alone).
Everything here is SIMULATED.
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HCCL_ERRORS = {4: "HCCL_E_INTERNAL (the job was aborted: a peer died)", 9: "HCCL_E_TIMEOUT"}
CLOCKS = ("virtual", "real")
RANK_MODULE = "mspti_lens.sim"

# Modelled durations (ns): a step's compute is LAUNCH_CHUNKS x LAUNCHES launches.
LAUNCH_NS = 5_000
LAUNCHES = 50
LAUNCH_CHUNKS = 4
KERNEL_SHARE = 0.8
WORLD_GROUP = "hccl_world_group"
JITTER = 0.04
SLOW_RANK_FACTOR = 1.5
ALLREDUCE_NS = 300_000
SENDRECV_NS = 40_000
SLOW_LINK_FACTOR = 5
SYNC_NS = 20_000
# Payloads: (element count, COMMUNICATION dataType: 3 fp16, 4 fp32; msptiCommunicationDataType).
FP16, FP32 = 3, 4
ALLREDUCE_COUNT, ALLREDUCE_TYPE = 1 << 20, FP32  # 4 MiB of gradients
HALO_COUNT, HALO_TYPE = 1 << 14, FP16  # a 32 KiB halo
# Seconds ahead of the launcher's CLOCK_REALTIME at which every rank's virtual clock starts, on
# top of the steps' own delays.
START_LEAD_S = 60


@dataclass(frozen=True)
class Slowdown:
    """Rank ``rank`` runs ``factor`` times slower from step ``step`` on (``--slowdown``)."""

    rank: int
    step: int
    factor: float

    def __post_init__(self) -> None:
        if not isinstance(self.step, int) or self.step < 0:
            raise ValueError(f"a slowdown's step is an int >= 0, not {self.step!r}")
        if not (isinstance(self.factor, (int, float)) and 0 < self.factor <= 1000):
            raise ValueError(f"a slowdown's factor is a number in (0, 1000], not {self.factor!r}")

    def text(self) -> str:
        return f"rank={self.rank},step={self.step},factor={self.factor:g}"


def slowdown_line(s: Slowdown, at: float) -> str:
    """What the slowed rank prints on stderr when its slowdown starts (``at``: wall clock, s)."""
    return f"[simulated job] rank {s.rank} slows down x{s.factor:g} from step {s.step} at {at:.6f}"


SLOWDOWN_LINE = re.compile(r"\[simulated job\] rank (\d+) slows down x(\S+) from step (\d+) at ([\d.]+)")


@dataclass(frozen=True)
class JobPlan:
    ranks: int
    hosts: int = 1
    steps: int = 20
    slow_rank: int | None = None
    slow_link: tuple[int, int] | None = None
    clock: str = "virtual"
    step_delay: float = 0.0
    timeout: float = 60.0
    seed: int = 0
    hold: str | None = None  # a file: each rank waits for it before its last step
    late_ns: int = 0  # with slow_rank: it arrives exactly this late at each all-reduce (no jitter)
    payload: bool = False  # collectives carry counts and data types (bytes, so bandwidth)
    slowdown: Slowdown | None = None  # one rank slows down from a step on
    step_ns: int = 0  # host work added to every step (ns)

    def __post_init__(self) -> None:
        if not isinstance(self.ranks, int) or not 1 <= self.ranks <= 1024:
            raise ValueError(f"ranks must be an int in 1..1024, not {self.ranks!r}")
        if not isinstance(self.hosts, int) or not 1 <= self.hosts <= self.ranks:
            raise ValueError(f"hosts must be an int in 1..ranks ({self.ranks}), not {self.hosts!r}")
        if not isinstance(self.steps, int) or self.steps < 0:
            raise ValueError(f"steps must be an int >= 0, not {self.steps!r}")
        if self.slow_rank is not None and not 0 <= self.slow_rank < self.ranks:
            raise ValueError(f"slow rank {self.slow_rank} is not a rank of 0..{self.ranks - 1}")
        if self.slow_link is not None:
            a, b = self.slow_link
            if not self.pairs or {a, b} not in [set(p) for p in self.pair_list()]:
                raise ValueError(
                    f"slow link {a}-{b} is not a link of the job: links join ring neighbours "
                    f"(r and r+1, and {self.ranks - 1} and 0) and exist when ranks is even and >= 2"
                )
        if self.clock not in CLOCKS:
            raise ValueError(f"unknown clock {self.clock!r}; valid clocks are {', '.join(CLOCKS)}")
        if self.late_ns and (self.slow_rank is None or not 0 < self.late_ns < 10**12):
            raise ValueError("late_ns needs a slow rank and is ns > 0 (under 1000 s)")
        if self.slowdown is not None and not 0 <= self.slowdown.rank < self.ranks:
            raise ValueError(f"slowdown rank {self.slowdown.rank} is not a rank of 0..{self.ranks - 1}")
        if not isinstance(self.step_ns, int) or not 0 <= self.step_ns < 10**13:
            raise ValueError(f"step_ns is ns of host work per step, an int in 0..1e13, not {self.step_ns!r}")
        if not self.timeout > 0 or not self.step_delay >= 0:
            raise ValueError("timeout must be > 0 and step_delay >= 0 (seconds)")

    @property
    def pairs(self) -> bool:
        return self.ranks >= 2 and self.ranks % 2 == 0

    def pair_list(self) -> list[tuple[int, int]]:
        """Link i joins ranks i and i+1 (mod ranks); its group is 1 + i."""
        return [(i, (i + 1) % self.ranks) for i in range(self.ranks)] if self.pairs else []

    @property
    def groups(self) -> int:
        return 1 + (self.ranks if self.pairs else 0)

    def host_of(self, rank: int) -> int:
        return rank * self.hosts // self.ranks


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    u32, u64 = ctypes.c_uint32, ctypes.c_uint64
    lib.msimMultirankBytes.argtypes, lib.msimMultirankBytes.restype = [u32], u64
    lib.msimMultirankAttach.argtypes = [ctypes.c_void_p, u64, u32, u32, u64]
    lib.msimMultirankAttach.restype = u32
    lib.msimMultirankGroup.argtypes, lib.msimMultirankGroup.restype = [u32, u32], u32
    lib.msimMultirankAbort.restype = u32
    lib.msimSetCommName.argtypes, lib.msimSetCommName.restype = [ctypes.c_char_p], None
    lib.msimLaunch.argtypes = [u32, u64, u32, u64, u32, ctypes.c_char_p, ctypes.c_char_p, u32]
    lib.msimLaunch.restype = ctypes.c_int
    lib.msimCallCollective.argtypes = [u32, u64, u64, u32, u32]
    lib.msimCallCollective.restype = ctypes.c_int
    return lib


def group_name(plan: JobPlan, group: int) -> str:
    """The communicator name records carry: the world group, or the pair group of link i."""
    if group == 0:
        return WORLD_GROUP
    a, b = plan.pair_list()[group - 1]
    return f"hccl_pair_{min(a, b)}_{max(a, b)}"


class _Region:
    """This process's mapping of the job's shared region (kept for the life of the process)."""

    def __init__(self, lib: ctypes.CDLL, path: str, plan: JobPlan):
        size = int(lib.msimMultirankBytes(plan.groups))
        fd = os.open(path, os.O_RDWR)
        try:
            self.mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.words = (ctypes.c_uint64 * (size // 8)).from_buffer(self.mm)
        rc = lib.msimMultirankAttach(
            ctypes.addressof(self.words), size, plan.ranks, plan.groups, int(plan.timeout * 1000)
        )
        if rc != 0:
            raise RuntimeError(f"the job region {path} is not usable by this simulator")


def run_rank(plan: JobPlan, rank: int, region_path: str, start_ns: int = 0) -> int:
    """One rank's loop, its virtual clock starting at ``start_ns`` (0: in the present). Returns
    the process exit code."""
    from .driver import Simulator

    sim = Simulator()
    lib = _bind(sim.lib)
    if plan.clock == "virtual":
        sim.set_clock("virtual")
        sim.lib.msimVirtualSet(start_ns)
    region = _Region(lib, region_path, plan)  # noqa: F841 - the mapping must stay alive
    rng = random.Random(plan.seed * 1_000_003 + rank)
    launch, allreduce = sim.api("aclrtLaunchKernel"), sim.api("HcclAllReduce")
    sendrecv, sync = sim.api("HcclBatchSendRecv"), sim.api("aclrtSynchronizeStream")
    links = plan.pair_list()
    slow = SLOW_RANK_FACTOR if rank == plan.slow_rank and not plan.late_ns else 1.0
    late, jitter = (plan.late_ns if rank == plan.slow_rank else 0), (0.0 if plan.late_ns else JITTER)
    lib.msimHostWork.argtypes = [ctypes.c_uint64]
    slowdown = plan.slowdown if plan.slowdown is not None and plan.slowdown.rank == rank else None

    def collective(api: int, name: str, group: int, size: int, ns: int, count: int, dtype: int) -> None:
        lib.msimMultirankGroup(group, size)
        lib.msimSetCommName(group_name(plan, group).encode())
        if plan.payload:
            rc = lib.msimCallCollective(api, ns, count, dtype, size)
        else:
            rc = sim.lib.msimCall(api, ns)
        if rc != 0:
            why = HCCL_ERRORS.get(rc, f"error {rc}")
            raise SystemExit(f"[simulated job] rank {rank}: {name} failed with {why}")

    def swap(phase: int) -> None:
        # Phase 0 pairs (0,1), (2,3), ...; phase 1 pairs (1,2), ..., (N-1,0).
        if links:
            i = rank if rank % 2 == phase else (rank - 1) % plan.ranks
            slow_link = plan.slow_link is not None and set(links[i]) == set(plan.slow_link)
            ns = SENDRECV_NS * (SLOW_LINK_FACTOR if slow_link else 1)
            collective(sendrecv, "HcclBatchSendRecv", 1 + i, 2, ns, HALO_COUNT, HALO_TYPE)

    try:
        for step in range(plan.steps):
            if plan.hold is not None and step == plan.steps - 1:
                # A job kept alive until told: its ranks live, write windows and end cleanly after.
                while not os.path.exists(plan.hold):
                    time.sleep(0.02)
            if late:  # before its compute: its kernels, and so its collective, start that late
                lib.msimHostWork(late)
            if plan.step_ns:
                lib.msimHostWork(plan.step_ns)
            if slowdown is not None and step == slowdown.step:
                print(slowdown_line(slowdown, time.time()), file=sys.stderr, flush=True)
                slow *= slowdown.factor
            for _ in range(LAUNCH_CHUNKS):
                ns = int(LAUNCH_NS * slow * (1 + jitter * rng.random()))
                for _ in range(LAUNCHES):
                    lib.msimLaunch(launch, ns, 0, int(ns * KERNEL_SHARE), 1, None, None, 0)
            collective(
                allreduce, "HcclAllReduce", 0, plan.ranks, ALLREDUCE_NS, ALLREDUCE_COUNT, ALLREDUCE_TYPE
            )
            # One swap per step, after the all-reduce, alternating neighbours: the next all-reduce
            # absorbs a slow link's delay, so only the two ranks of a slow link see long swaps.
            swap(step % 2)
            sim.lib.msimCall(sync, SYNC_NS)
            if plan.step_delay:
                time.sleep(plan.step_delay)
    except SystemExit as e:
        print(e.code, file=sys.stderr, flush=True)
        return 1
    return 0


def _region_file(plan: JobPlan) -> str:
    from .driver import Simulator

    size = int(_bind(Simulator().lib).msimMultirankBytes(plan.groups))
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    fd, path = tempfile.mkstemp(prefix="mspti-lens-job-", dir=shm)
    os.ftruncate(fd, size)
    os.close(fd)
    return path


def _rank_env(plan: JobPlan, rank: int) -> dict[str, str]:
    per_host = [r for r in range(plan.ranks) if plan.host_of(r) == plan.host_of(rank)]
    env = dict(os.environ)
    env.update(
        {
            "RANK": str(rank),
            "WORLD_SIZE": str(plan.ranks),
            "LOCAL_RANK": str(per_host.index(rank)),
            "LOCAL_WORLD_SIZE": str(len(per_host)),
            "RANK_ID": str(rank),
            "RANK_SIZE": str(plan.ranks),
        }
    )
    if plan.hosts > 1:
        # Simulated hosts: mspti-lens's recorder takes its host name from this variable.
        env["MSPTI_LENS_HOST"] = f"sim-host-{plan.host_of(rank)}"
    return env


def run_job(plan: JobPlan, quiet: bool = False) -> int:
    """Start every rank, wait for all; a rank that dies aborts the others' collectives."""
    path = _region_file(plan)
    procs: list[subprocess.Popen] = []
    try:
        from .driver import Simulator

        lib = _bind(Simulator().lib)
        region = _Region(lib, path, plan)  # noqa: F841 - the launcher aborts the job through it
        args = [
            "--ranks",
            str(plan.ranks),
            "--hosts",
            str(plan.hosts),
            "--steps",
            str(plan.steps),
            "--clock",
            plan.clock,
            "--step-delay",
            str(plan.step_delay),
            "--timeout",
            str(plan.timeout),
            "--seed",
            str(plan.seed),
        ]
        if plan.slow_rank is not None:
            args += ["--slow-rank", str(plan.slow_rank)]
        if plan.slow_link is not None:
            args += ["--slow-link", f"{plan.slow_link[0]}-{plan.slow_link[1]}"]
        if plan.hold is not None:
            args += ["--hold", plan.hold]
        if plan.late_ns:
            args += ["--late-ns", str(plan.late_ns)]
        if plan.payload:
            args += ["--payload"]
        if plan.slowdown is not None:
            args += ["--slowdown", plan.slowdown.text()]
        if plan.step_ns:
            args += ["--step-ns", str(plan.step_ns)]
        start_s = START_LEAD_S + plan.steps * plan.step_delay
        if plan.clock == "virtual":  # the virtual clock must stay ahead of real time
            start_s += plan.steps * plan.step_ns / 1e9
        args += ["--start-ns", str(time.time_ns() + int(start_s * 1e9))]
        for r in range(plan.ranks):
            cmd = [sys.executable, "-m", RANK_MODULE, "rank", "--rank", str(r), "--region", path, *args]
            procs.append(subprocess.Popen(cmd, env=_rank_env(plan, r)))
        if not quiet:
            print(
                f"[simulated job] {plan.ranks} ranks on {plan.hosts} host(s), {plan.steps} steps, "
                f"{plan.clock} clock; pids {', '.join(str(p.pid) for p in procs)}",
                file=sys.stderr,
                flush=True,
            )
        failed: list[int] = []
        pending = set(range(plan.ranks))
        while pending:
            for r in sorted(pending):
                rc = procs[r].poll()
                if rc is None:
                    continue
                pending.discard(r)
                if rc != 0:
                    failed.append(r)
                    lib.msimMultirankAbort()
            time.sleep(0.02)
        if failed and not quiet:
            print(f"[simulated job] ranks {failed} failed", file=sys.stderr, flush=True)
        return 1 if failed else 0
    except KeyboardInterrupt:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in procs:
            p.wait()
        return 130
    finally:
        Path(path).unlink(missing_ok=True)


def _link(text: str) -> tuple[int, int]:
    try:
        a, b = (int(x) for x in text.split("-"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a link is written A-B with two rank numbers, not {text!r}"
        ) from None
    return a, b


def _slowdown(text: str) -> Slowdown:
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        fields[key.strip()] = value.strip()
    if set(fields) != {"rank", "step", "factor"}:
        raise argparse.ArgumentTypeError(
            f"a slowdown is written rank=R,step=S,factor=X (e.g. rank=1,step=200,factor=3), not {text!r}"
        )
    try:
        return Slowdown(int(fields["rank"]), int(fields["step"]), float(fields["factor"]))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"slowdown {text!r}: {e}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ranks", type=int, required=True, help="ranks (processes) in the job")
    p.add_argument("--hosts", type=int, default=1, help="simulated hosts the ranks are spread over")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--slow-rank", type=int, default=None, help="this rank's compute is 1.5x slower")
    p.add_argument(
        "--slow-link",
        type=_link,
        default=None,
        help="A-B: transfers between ring neighbours A and B 5x slower",
    )
    p.add_argument(
        "--slowdown",
        type=_slowdown,
        default=None,
        metavar="rank=R,step=S,factor=X",
        help="rank R runs X times slower from step S on (launches and kernels)",
    )
    p.add_argument("--step-ns", type=int, default=0, help="host work added to every step (ns)")
    p.add_argument(
        "--clock", choices=CLOCKS, default="virtual", help="virtual: exact, deterministic durations"
    )
    p.add_argument("--step-delay", type=float, default=0.0, help="real seconds each rank sleeps per step")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a collective waits for its peers")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--late-ns", type=int, default=0, help="the slow rank arrives exactly this late at each all-reduce"
    )
    p.add_argument(
        "--payload",
        action="store_true",
        help="collectives carry counts and data types (nccl-tests' bytes, algbw, busbw)",
    )
    p.add_argument(
        "--hold",
        default=None,
        metavar="FILE",
        help="before its last step each rank waits until FILE exists (a job that runs until told)",
    )


def plan_of(args: argparse.Namespace) -> JobPlan:
    return JobPlan(
        ranks=args.ranks,
        hosts=args.hosts,
        steps=args.steps,
        slow_rank=args.slow_rank,
        slow_link=args.slow_link,
        clock=args.clock,
        step_delay=args.step_delay,
        timeout=args.timeout,
        seed=args.seed,
        hold=args.hold,
        late_ns=args.late_ns,
        payload=args.payload,
        slowdown=args.slowdown,
        step_ns=args.step_ns,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mspti_lens.sim", description="The bundled simulator's tools.")
    # `rank` (one rank of a job, started by `job`) is left out of the listing: no help, and the
    # metavar names the commands a user runs.
    sub = p.add_subparsers(dest="command", required=True, metavar="{job,cann}")
    j = sub.add_parser("job", help="run a simulated multi-process job (SIMULATED)")
    add_arguments(j)
    # `cann` is listed here and parses its own arguments (below).
    sub.add_parser("cann", help="write a simulated CANN toolkit tree into DIR (cann --help)")
    r = sub.add_parser("rank")
    add_arguments(r)
    r.add_argument("--rank", type=int, required=True)
    r.add_argument("--region", required=True)
    r.add_argument("--start-ns", type=int, default=0)
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["cann"]:
        from .cann import main as cann_main

        return cann_main(argv[1:])
    args = p.parse_args(argv)
    try:
        plan = plan_of(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.command == "rank":
        return run_rank(plan, args.rank, args.region, args.start_ns)
    return run_job(plan)


if __name__ == "__main__":
    sys.exit(main())
