"""``python -m mspti_lens record [--paused] [--out DIR] [--interval S] -- CMD...``: record every
Python process a command starts (torchrun, mpirun, ``python train.py``) without changing it; with
``--paused`` each process starts with profiling off until ``python -m mspti_lens control DIR start``."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import hook

# What record's last line, and each rank's, says of a run whose library was the simulator.
SIMULATED = "SIMULATED: the calls are the mspti-lens simulator's, not an NPU's"


def real_libmspti() -> str | None:
    """The libmspti.so the discovery order finds at a CANN location, or None: never the bundled
    simulator (nothing to intercept without CANN). A simulated CANN tree's libmspti.so
    (docs/simulated_cann.md) counts as CANN's: its programs' calls reach it only when preloaded."""
    from .. import _native, simulator_path

    try:
        lib = _native.load_library(None, None)
    except Exception:  # noqa: BLE001 - no real library (any reason) means no LD_PRELOAD
        return None
    if lib.simulated and os.path.samefile(lib.path, simulator_path()):
        return None
    return lib.path


def child_env(args: argparse.Namespace, env: dict[str, str] | None = None) -> dict[str, str]:
    """The command's environment: the hook's variables, the hook first on PYTHONPATH, and
    LD_PRELOAD of the real libmspti when one is found (MSPTI needs it at process start)."""
    e = dict(os.environ if env is None else env)
    e[hook.RECORD_VARIABLE] = str(Path(args.out).resolve())
    e[hook.INTERVAL_VARIABLE] = str(args.interval)
    e[hook.PAUSED_VARIABLE] = "1" if getattr(args, "paused", False) else "0"
    if getattr(args, "generation", None) is not None:
        e[hook.GENERATION_VARIABLE] = str(args.generation)
    for var, value in (
        (hook.LIBRARY_VARIABLE, args.library),
        (hook.CLOCK_VARIABLE, args.clock),
        (hook.ENABLE_VARIABLE, args.enable),
        (hook.ACTIVITY_VARIABLE, getattr(args, "activity", None)),
        (hook.PROMETHEUS_VARIABLE, None if args.prometheus is None else str(args.prometheus)),
    ):
        if value:
            e[var] = value
    e["PYTHONPATH"] = os.pathsep.join([hook.SITE_DIR, *[p for p in [e.get("PYTHONPATH")] if p]])
    real = args.library if args.library not in (None, "sim", "simulator") else real_libmspti()
    if real and Path(real).name.startswith("libmspti") and real not in e.get("LD_PRELOAD", ""):
        e["LD_PRELOAD"] = " ".join([real, *[p for p in [e.get("LD_PRELOAD")] if p]])
    return e


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="mspti-run", help="the run's directory (default: ./mspti-run)")
    p.add_argument(
        "--paused",
        action="store_true",
        help="start every process with profiling off (no MSPTI subscriber: no cost) until "
        "`python -m mspti_lens control DIR start`",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=hook.DEFAULT_INTERVAL,
        help=f"seconds between windows each process writes (default {hook.DEFAULT_INTERVAL:g})",
    )
    p.add_argument(
        "--share-group",
        default=None,
        metavar="GROUP",
        help="share the run with GROUP: its members may read it and steer it with `control` (the "
        "run's folders are made mode 2770, owned by GROUP). Without it the run is yours alone "
        "(mode 0700), and an existing --out writable by anyone else is refused",
    )
    p.add_argument("--library", default=None, help="libmspti.so path, or 'sim' (default: discovery order)")
    p.add_argument("--clock", default=None, choices=["auto", "tsc", "monotonic", "mspti"])
    p.add_argument(
        "--enable", default=None, help=f"what to trace, comma-separated (default {hook.DEFAULT_ENABLE})"
    )
    p.add_argument(
        "--activity",
        default=None,
        metavar="KINDS",
        help=f"activity record kinds each process enables, comma-separated, or 'none' (default "
        f"{hook.DEFAULT_ACTIVITY}: one record per collective, so Run.stragglers() votes per "
        "collective instance on device times)",
    )
    p.add_argument(
        "--prometheus",
        type=int,
        default=None,
        metavar="PORT",
        help="each recorded process also serves /metrics on 127.0.0.1, port PORT + its local rank "
        "(LOCAL_RANK and the like, 0 without one); PORT 0: a free port per process. Each process "
        "writes its address to host=H/rank=R/metrics-pidP.url in --out",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")


def main(args: argparse.Namespace) -> int:
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise ValueError("nothing to record: give the command after --, e.g. record -- torchrun train.py")
    if not args.interval > 0:
        raise ValueError(f"--interval must be a number of seconds > 0, not {args.interval}")
    if args.prometheus is not None and not 0 <= args.prometheus <= 65535:
        raise ValueError(
            f"--prometheus must be a port in 0..65535 (0: a free one per process), not {args.prometheus}"
        )
    if getattr(args, "activity", None):
        from ..activity import check_kinds

        check_kinds(hook.activity_kinds({hook.ACTIVITY_VARIABLE: args.activity}))  # names the valid kinds
    if args.enable:
        from .control import check_enable

        check_enable([t for t in args.enable.split(",") if t])  # did-you-mean before anything runs
    if args.paused and args.prometheus is not None:
        raise ValueError("--prometheus serves the Session a process starts with: not with --paused")
    from . import runfiles
    from .control import issue

    group = None if args.share_group is None else runfiles.group_id(args.share_group)
    try:
        runfiles.create_run(args.out, group)
    except runfiles.UntrustedError as e:
        raise ValueError(str(e)) from None
    except OSError as e:
        raise ValueError(f"{e}: choose another --out") from None
    # The job's launch is a command like any other: its generation is what every process starts
    # at, so a command left in DIR by an earlier job is never obeyed by this one.
    args.generation = issue(args.out, {"command": "stop" if args.paused else "start", "ranks": None})
    env = child_env(args)
    started = time.time()
    how = "paused: start it with `python -m mspti_lens control DIR start`" if args.paused else "on"
    print(
        f"mspti-lens: recording {' '.join(cmd)} -> {env[hook.RECORD_VARIABLE]} "
        f"(every {args.interval:g} s; {how})",
        file=sys.stderr,
        flush=True,
    )
    try:
        rc = _run_forwarding(cmd, env)
    except FileNotFoundError:
        raise ValueError(f"command not found: {cmd[0]}") from None
    except KeyboardInterrupt:
        rc = 130
    _report(env[hook.RECORD_VARIABLE], started)
    return 128 - rc if rc < 0 else rc  # a command killed by signal N: the shell's 128 + N


# Signals a launcher passes on to the command it runs (as torchrun and nsys do): a `kill` of
# record, or a scheduler's SIGTERM to it alone, must end the job too, not leave it running
# unrecorded and unowned. SIGINT is not among them: Ctrl-C reaches the whole foreground group.
FORWARDED = (signal.SIGTERM, signal.SIGHUP)


def _run_forwarding(cmd: list[str], env: dict[str, str]) -> int:
    """Run the command to its end, passing FORWARDED signals on to it (its handlers write the last
    window; record then reports the run as usual)."""
    p = subprocess.Popen(cmd, env=env)

    def forward(sig: int, _frame: object) -> None:
        p.send_signal(sig)

    before = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        return p.wait()
    except KeyboardInterrupt:
        # Ctrl-C reached the command too: its own handlers end it (and write its last window);
        # one that outlives a bound is killed, as subprocess.call did at once.
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        raise
    finally:
        for sig, h in before.items():
            signal.signal(sig, h)


def forked_children(out: str | os.PathLike) -> int:
    """How many children the run's recorded processes forked (none of them is recorded)."""
    from .runfiles import RunFolder
    from .writer import FORKS_GLOB

    root = RunFolder(out, follow_root=True)
    total = 0
    for name in root.names(FORKS_GLOB, hidden=True):
        try:
            total += int(root.read(name, 64).decode().strip() or 0)
        except (OSError, ValueError):
            continue
    return total


def fork_advice(forks: int) -> str:
    """What record says about forked children: that they are not recorded, and how to record them."""
    return (
        f"{forks} worker process(es) started with fork() were not recorded (a forked child holds a "
        "copy of its parent's subscription, not its own); to record them, start them fresh with "
        "the 'spawn' start method: multiprocessing.set_start_method('spawn') or "
        "multiprocessing.get_context('spawn').Pool(...), torch.multiprocessing likewise"
    )


def _report(out: str, started: float) -> None:
    import warnings

    from .run import open_run

    forks = forked_children(out)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an empty run is said here, in one line
            run = open_run(out)
        ranks = run.ranks()
    except Exception as e:  # noqa: BLE001 - the job's own result stands; say why the run is unreadable
        print(f"mspti-lens: the run in {out} could not be read: {e}", file=sys.stderr)
        return
    if not ranks.height:
        why = fork_advice(forks) if forks else "no recorded process made a traced call"
        print(f"mspti-lens: 0 ranks in {out}: {why}", file=sys.stderr, flush=True)
        return
    incomplete = ranks.filter(~ranks["complete"])
    files = run.files()
    simulated = bool(files.height and files["simulated"].any())
    print(
        f"mspti-lens: {ranks.height} ranks on {ranks['host'].n_unique()} host(s) in {out}"
        + (f" · {SIMULATED}" if simulated else "")
        + (f"; incomplete: {', '.join(map(str, incomplete['rank']))}" if incomplete.height else "")
        + f"; open it with mspti_lens.open_run({out!r})"
        + (f"; {fork_advice(forks)}" if forks else ""),
        file=sys.stderr,
        flush=True,
    )
