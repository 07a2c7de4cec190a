#!/usr/bin/env python3
"""Run every atheris target for a bounded time or number of inputs and report what it found.

    .venv/bin/python fuzz/run.py [--seconds 60] [--runs TARGET=N ...] [--out DIR] [--known-only]

Each target starts from seed inputs (written into DIR/corpus/<target> on the first run, and the
corpus grows across runs) and stops after ``--seconds``, or after the inputs ``--runs`` gives it (with
a fixed ``--seed``: the same inputs on every machine, however fast or loaded), or at its first
finding, whose input is
written to DIR/artifacts. Findings already recorded as regression tests (KNOWN, below; the tests
are in tests/test_reliability_input.py) are tolerated so that a run looks for new ones only.
Exit status 0 when no target found anything new. The last line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGETS = {"snapshot": "fuzz_snapshot_load.py", "trace": "fuzz_trace.py"}
# ExceptionName:message part, one per open finding recorded as a strict-xfail regression test in
# tests/test_reliability_input.py (remove the entry when the bug is fixed). The three findings of
# the first runs (infinite ts/dur, unhashable pid/tid, non-dict args in the trace reader) are fixed
# and are plain regression tests now.
KNOWN: list[str] = []


def run(target: str, seconds: int, out: Path, known: bool, seed: int = 0, runs: int = 0) -> dict:
    corpus = out / "corpus" / target
    arts = out / "artifacts"
    arts.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(HERE))
    from _common import write_seeds

    write_seeds(target, corpus)
    env = dict(os.environ, FUZZ_KNOWN="|".join(KNOWN) if known else "", PYTHONWARNINGS="ignore")
    cmd = [
        sys.executable,
        str(HERE / TARGETS[target]),
        str(corpus),
        f"-max_total_time={seconds}" if not runs else f"-runs={runs}",
        "-timeout=30",
        "-rss_limit_mb=3072",
        f"-artifact_prefix={arts}/{target}-",
        "-print_final_stats=1",
    ] + ([f"-seed={seed}"] if seed else [])
    p = subprocess.run(
        cmd, capture_output=True, text=True, env=env, cwd=HERE, timeout=None if runs else seconds + 300
    )
    log = p.stdout + p.stderr
    m = re.search(r"Done (\d+) runs in (\d+) second", log)
    done = (
        int(m.group(1))
        if m
        else int((re.findall(r"stat::number_of_executed_units:\s*(\d+)", log) or [0])[-1])
    )
    found = re.findall(r"Test unit written to (\S+)", log)
    res = {
        "target": target,
        "seconds": seconds,
        "runs": done,
        "exit": p.returncode,
        "findings": found,
        "corpus_files": len(list(corpus.iterdir())),
    }
    if p.returncode != 0:
        tail = log[-3000:]
        res["log_tail"] = tail
        print(f"--- {target}: exit {p.returncode}\n{tail}", file=sys.stderr)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=60, help="time per target")
    ap.add_argument(
        "--runs",
        action="append",
        default=[],
        metavar="TARGET=N",
        help="N inputs for TARGET instead of --seconds (repeatable)",
    )
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "mspti-lens-fuzz")
    ap.add_argument("--all-findings", action="store_true", help="do not tolerate the KNOWN findings")
    ap.add_argument("--target", choices=sorted(TARGETS), action="append")
    ap.add_argument("--seed", type=int, default=0, help="libFuzzer seed (0: random); CI uses a fixed one")
    a = ap.parse_args()
    runs: dict[str, int] = {}
    for spec in a.runs:
        name, _, n = spec.partition("=")
        if name not in TARGETS or not n.isdigit():
            ap.error(f"--runs {spec}: want TARGET=N with TARGET one of {', '.join(sorted(TARGETS))}")
        runs[name] = int(n)
    targets = a.target or sorted(TARGETS)
    results = [run(t, a.seconds, a.out, not a.all_findings, a.seed, runs.get(t, 0)) for t in targets]
    for r in results:
        bound = f"of {runs[r['target']]} asked" if r["target"] in runs else f"in {r['seconds']} s"
        print(f"{r['target']}: {r['runs']} inputs ({bound}), exit {r['exit']}, findings {r['findings']}")
    print(json.dumps({"targets": results}))
    return 0 if all(r["exit"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
