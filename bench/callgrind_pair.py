#!/usr/bin/env python3
"""Instructions per ENTER/EXIT pair of the callbacks under callgrind: deterministic, so it decides
changes to the callback path on a loaded machine where timings do not.

Each configuration (bench/run.py's names: minimal, minimal_hccl, lens, lens_no_slowest, lens_hccl,
...) runs in its own process under valgrind's callgrind, collecting only inside the simulator's
dispatch of one callback (``mspti_sim::model::apis::fire``): subscribed as bench/run.py does it,
2,000 warm-up calls, then N calls of ``msimCallMany`` (aclrtLaunchKernel, or HcclAllReduce for the
``_hccl`` ones). The figure is the callback function's inclusive count (mspti-lens's
``on_callback_in``, the C callbacks' ``bench_*_cb``) over every pair made, warm-up included.

    python bench/callgrind_pair.py [--calls N] [CONFIG ...]    # needs valgrind
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WARM = 2000
DEFAULT = ("minimal", "minimal_hccl", "lens", "lens_no_slowest", "lens_hccl")


def child(config: str, n: int) -> None:
    """Run under callgrind: subscribe `config`, warm, then n calls."""
    import warnings

    warnings.simplefilter("ignore")  # the simulated-backend warning
    sys.path.insert(0, str(HERE))
    from run import Bench  # bench/run.py: the simulator and the C callbacks

    with tempfile.TemporaryDirectory(prefix="mspti-lens-cg-") as tmp:
        b = Bench(True, Path(tmp))
        api = b.api_of(config)
        with b.config(config):
            b.call_many(WARM, api)
            b.call_many(n, api)


def callback_symbol(config: str) -> re.Pattern[str]:
    if config.startswith("lens"):
        return re.compile(r":_native::callback::on_callback(_in)?( |$)")
    return re.compile(rf":bench_{re.escape(config.removesuffix('_hccl'))}_cb( |$)")


def measure(config: str, n: int, out: Path) -> float:
    profile = out / f"{config}.callgrind"
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            "--toggle-collect=mspti_sim::model::apis::fire",
            f"--callgrind-out-file={profile}",
            sys.executable,
            __file__,
            "--child",
            config,
            "--calls",
            str(n),
        ],
        check=True,
        capture_output=True,
    )
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", str(profile)], check=True, capture_output=True, text=True
    ).stdout
    sym = callback_symbol(config)
    lines = [line for line in text.splitlines() if sym.search(line) and "'2" not in line]
    counts = [int(line.split()[0].replace(",", "")) for line in lines]
    if not counts:
        raise RuntimeError(f"{config}: the callback does not appear in the profile")
    # The function's own line has the largest inclusive count (the others are its inlined files).
    return max(counts) / (n + WARM)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("configs", nargs="*", default=list(DEFAULT))
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.calls)
        return
    if not shutil.which("valgrind") or not shutil.which("callgrind_annotate"):
        sys.exit("bench/callgrind_pair.py needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="mspti-lens-cg-") as tmp:
        print("| configuration | instructions per pair |\n|---|---:|")
        for c in args.configs:
            print(f"| {c} | {measure(c, args.calls, Path(tmp)):.1f} |", flush=True)


if __name__ == "__main__":
    main()
