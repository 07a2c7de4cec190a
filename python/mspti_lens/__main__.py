"""mspti-lens's command line: demo and replay (the simulator), doctor, install-kernel, export,
record (record every Python process of a job), control (start, stop or retarget profiling in
a recorded job while it runs) and receive (Alertmanager's webhook for the watch rules Prometheus
keeps, each alert a capture)."""

from __future__ import annotations

import argparse
import sys


def _demo(args: argparse.Namespace) -> int:
    from .sim.driver import demo_main

    return demo_main(args)


def _replay(args: argparse.Namespace) -> int:
    from .sim.driver import replay_main

    return replay_main(args)


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import main

    return main(args)


def _install_kernel(args: argparse.Namespace) -> int:
    from .kernelspec import main

    return main(args)


def _receive(args: argparse.Namespace) -> int:
    from .watch.alert_receiver import main

    return main(args)


def _record(args: argparse.Namespace) -> int:
    from .runs.record import main

    return main(args)


def _control(args: argparse.Namespace) -> int:
    from .runs.control import main

    return main(args)


def _watch(args: argparse.Namespace) -> int:
    from .watch.watcher import main

    return main(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mspti_lens", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="run a simulated workload, print the summary, write plots")
    d.add_argument("--workload", choices=["training", "inference"], default="training")
    d.add_argument("--steps", type=int, default=60)
    d.add_argument("--ranks", type=int, default=8)
    d.add_argument("--threads", type=int, default=2)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--out", default="demo-out", help="folder for the PNG plots and the snapshot")
    d.set_defaults(func=_demo)
    r = sub.add_parser("replay", help="replay a Kineto trace on the simulator and summarise it")
    r.add_argument("trace")
    r.add_argument("--virtual", action="store_true", help="virtual clock: durations exactly the trace's")
    r.add_argument("--save", help="write the snapshot to this Parquet file")
    r.set_defaults(func=_replay)
    doc = sub.add_parser("doctor", help="check library, LD_PRELOAD, CANN's mspti package, subscriber slot")
    doc.add_argument("--library", default=None, help="path to libmspti.so (default: discovery order)")
    doc.set_defaults(func=_doctor)
    k = sub.add_parser(
        "install-kernel",
        help="install a Jupyter kernel that preloads libmspti.so (the simulator where none is found)",
    )
    k.add_argument(
        "--library",
        default=None,
        help="path to libmspti.so, or 'sim' (default: discovery order; the simulator if it finds none)",
    )
    k.add_argument("--name", default="mspti-lens")
    k.add_argument("--display-name", default=None)
    k.add_argument(
        "--user",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="install for this user (default) or, with --no-user, system-wide; ignored with --prefix",
    )
    k.add_argument("--prefix", default=None, help="install under this prefix (e.g. sys.prefix)")
    k.set_defaults(func=_install_kernel)
    from .export.cli import add_cli as add_export_cli  # the export subcommand

    add_export_cli(sub)
    from .watch.alert_receiver import add_arguments as receive_arguments

    rcv = sub.add_parser(
        "receive", help="take Alertmanager's webhook for a run's watch rules and start their captures"
    )
    receive_arguments(rcv)
    rcv.set_defaults(func=_receive)

    from .runs.record import add_arguments as record_arguments

    rec = sub.add_parser("record", help="record every Python process of a command (torchrun, mpirun, ...)")
    record_arguments(rec)
    rec.set_defaults(func=_record)
    from .runs.control import add_arguments as control_arguments

    ctl = sub.add_parser(
        "control", help="start, stop or retarget profiling in a recorded job while it runs; its status"
    )
    control_arguments(ctl)
    ctl.set_defaults(func=_control)
    from .watch.watcher import add_arguments as watch_arguments

    w = sub.add_parser(
        "watch", help="keep rules on a recorded job's windows (e.g. 'HcclAllReduce p99 > 3x baseline')"
    )
    watch_arguments(w)
    w.set_defaults(func=_watch)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
