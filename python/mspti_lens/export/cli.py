"""The ``export`` subcommand: ``python -m mspti_lens export FILE.parquet --format ...``."""

from __future__ import annotations

import argparse
import sys

from .hdr import to_hdr_log
from .otlp import send_otlp, to_otlp
from .perfetto import to_perfetto
from .prometheus import to_prometheus

#: CLI format -> what it writes
CLI_FORMATS = {
    "prometheus": "Prometheus text exposition (classic buckets)",
    "prometheus-protobuf": "Prometheus protobuf exposition (native histograms + classic buckets)",
    "otlp": "OTLP/JSON ExportMetricsServiceRequest (exponential histograms)",
    "hdr": "HdrHistogram V2 interval log",
    "perfetto": "Chrome trace JSON (slowest calls, MSTX ranges, kernels)",
}


def add_cli(sub: argparse._SubParsersAction) -> None:
    """The ``export`` subcommand (called by mspti_lens.__main__)."""
    e = sub.add_parser(
        "export", help="write a saved snapshot in a fleet format (Prometheus, OTLP, HDR, Perfetto)"
    )
    e.add_argument("file", help="a snapshot written by Snapshot.save() (.parquet)")
    e.add_argument(
        "--format",
        required=True,
        choices=list(CLI_FORMATS),
        help="; ".join(f"{k}: {v}" for k, v in CLI_FORMATS.items()),
    )
    e.add_argument("--out", default="-", help="output file ('-', the default, is standard output)")
    e.add_argument(
        "--otlp-url", default=None, help="with --format otlp: also POST to this OTLP/HTTP collector"
    )
    e.add_argument("--rank", default=None, help="rank label (default: the snapshot's, else $RANK, else 0)")
    e.add_argument("--host", default=None, help="host label (default: the snapshot's, else this host's name)")
    e.set_defaults(func=cli)


def cli(args: argparse.Namespace) -> int:
    import json

    from ..snapshot import Snapshot

    snap = Snapshot.load(args.file)
    fmt, ids = args.format, {"rank": args.rank, "host": args.host}
    if args.otlp_url and fmt != "otlp":
        raise ValueError("--otlp-url goes with --format otlp")
    if fmt == "prometheus":
        out: str | bytes = to_prometheus(snap, "text", **ids)
    elif fmt == "prometheus-protobuf":
        out = to_prometheus(snap, "protobuf", **ids)
    elif fmt == "otlp":
        out = json.dumps(to_otlp(snap, **ids), indent=1) + "\n"
        if args.otlp_url:
            status = send_otlp(snap, args.otlp_url, **ids)
            print(f"sent to {args.otlp_url}: HTTP {status}", file=sys.stderr)
    elif fmt == "hdr":
        out = to_hdr_log(snap)
    else:
        out = json.dumps(to_perfetto(snap, **ids)) + "\n"
    if args.out == "-":
        if isinstance(out, bytes):
            sys.stdout.buffer.write(out)
        else:
            sys.stdout.write(out)
    else:
        mode = "wb" if isinstance(out, bytes) else "w"
        with open(args.out, mode) as f:
            f.write(out)
        print(f"wrote {args.out} ({CLI_FORMATS[fmt]})", file=sys.stderr)
    return 0
