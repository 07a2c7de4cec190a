#!/usr/bin/env python3
"""What keeping the slowest calls adds to each recorded ENTER/EXIT pair, in isolation.

Target: <= 2 ns per pair, judged in the callback by bench/run.py (mspti-lens with and without
`slowest=False`). This isolates the record: rust/lens/examples/slowest_cost.rs times the very
record the callback makes (`AtomicHistogram::record`) with and without `SlowestCalls::keep` behind its
gate, on one stream of log-normal durations. Each round times batches of 64 Ki records on the
thread's CPU clock, the two sides alternating batch by batch, and keeps each side's best batch
(other jobs share the 2 cores and only ever make a batch slower). The report quotes the median of
the per-round differences and the difference of the best rounds.

    python bench/slowest.py [--quick]          # prints the Markdown section
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_NS = 2.0


def measure(quick: bool) -> dict:
    rounds, n = (3, 1 << 19) if quick else (15, 1 << 23)
    # Quick mode proves the measurement runs: the test-release build `cargo test` made (it builds
    # the examples) serves, with no link-time optimization; the report's numbers are release's.
    profile = "test-release" if quick else "release"
    cmd = [
        "cargo",
        "run",
        "--profile",
        profile,
        "-q",
        "-p",
        "mspti-lens",
        "--example",
        "slowest_cost",
        "--",
        str(rounds),
        str(n),
    ]
    try:
        out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    except FileNotFoundError:
        sys.exit("bench/slowest.py needs cargo (the Rust toolchain) to build its measuring program")
    except subprocess.CalledProcessError as e:
        sys.exit(f"the slowest-calls benchmark failed:\n{e.stderr}")
    r = json.loads(out.strip().splitlines()[-1])
    diffs = [w - p for p, w in zip(r["plain_ns"], r["with_ns"])]
    r["added_median_ns"] = statistics.median(diffs)
    r["added_best_ns"] = min(r["with_ns"]) - min(r["plain_ns"])
    return r


def render(r: dict) -> list[str]:
    """The report section's lines (bench/run.py appends them)."""
    quick = r["quick"]
    added = max(r["added_median_ns"], r["added_best_ns"])
    lines = [
        "## Slowest calls: cost added per pair" + (" (quick run)" if quick else ""),
        "",
        "The record each EXIT makes, with and without keeping the 8 slowest calls per thread, API and "
        f"window; {len(r['plain_ns'])} rounds of {r['n']:,} records each, best 64 Ki batch per side and "
        "round on the thread's CPU clock (rust/lens/examples/slowest_cost.rs).",
        "",
        "| | record only | record + slowest | added |",
        "|---|---|---|---|",
        f"| median of rounds | {statistics.median(r['plain_ns']):.2f} ns "
        f"| {statistics.median(r['with_ns']):.2f} ns "
        f"| {r['added_median_ns']:+.2f} ns (median of per-round differences) |",
        f"| best round | {min(r['plain_ns']):.2f} ns | {min(r['with_ns']):.2f} ns "
        f"| {r['added_best_ns']:+.2f} ns |",
        "",
        f"The target (<= {TARGET_NS:.0f} ns added per pair) is judged in the callback itself, mspti-lens "
        "with and without `slowest=False` side by side (the Targets table); this isolates the record, "
        f"where keeping the slowest calls adds {added:+.2f} ns (the larger of the two estimates).",
        "",
    ]
    return lines


def run(quick: bool, log=lambda m: None) -> dict:
    """Measure (bench/run.py calls this, then render)."""
    log("slowest calls: record with and without the gate")
    r = measure(quick)
    r["quick"] = quick
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small counts: proves the benchmark runs (CI)")
    print("\n".join(render(run(ap.parse_args().quick))))


if __name__ == "__main__":
    main()
