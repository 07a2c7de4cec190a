#!/usr/bin/env python3
"""Merging a whole job: 4,096 ranks x 60 keys, mspti-lens's windows against the trace approach.

The same calls two ways. Each rank makes ``CALLS_PER_KEY`` calls of each of 60 functions
(log-normal durations, seeded). mspti-lens: each rank's window file (a Snapshot, as ``record``
writes it) under ``host=H/rank=R/``; ``open_run(DIR).summary()`` merges them. Trace approach (as
HTA and msprof-analyze do): each rank's every call as a row (rank, name, start, duration) in a
Parquet file; all ranks' rows are read and concatenated into one frame, then grouped per function
(count, total, mean, exact p50/p90/p99, max). Each side runs in a fresh subprocess, which reports
its wall time and its peak RSS (``ru_maxrss``) and the RSS after its imports, so the growth is
the merge's own. Goal here: <= 10 s and <= 1 GiB for 4,096 ranks. All data is synthetic.

    python bench/runs.py [--quick] [--out FILE]     # alone; bench/run.py includes it
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KEYS = 60
CALLS_PER_KEY = 64
FULL_RANKS = (1024, 4096)
QUICK_RANKS = (64,)
GOAL_S = 10.0
GOAL_BYTES = 1 << 30


def generate(root: Path, ranks: int, seed: int = 0) -> None:
    """Both layouts of the same calls: root/run (windows) and root/trace (one file per rank)."""
    import numpy as np
    import polars as pl

    from mspti_lens import Snapshot, _native

    rng = np.random.default_rng(seed)
    (root / "trace").mkdir(parents=True, exist_ok=True)
    names = [f"HcclOp{k:02d}" if k < 6 else f"aclrtOp{k:02d}" for k in range(KEYS)]
    medians = np.exp(rng.uniform(np.log(2e3), np.log(2e6), KEYS))
    for r in range(ranks):
        durs = [rng.lognormal(np.log(m), 0.4, CALLS_PER_KEY).astype(np.uint64) + 1 for m in medians]
        snap = None
        for name, d in zip(names, durs):
            one = _native.NativeSnapshot.from_values(d.tolist(), name)
            snap = one if snap is None else snap.merge(one)
        d = root / "run" / f"host=h{r // 8}" / f"rank={r}"
        d.mkdir(parents=True, exist_ok=True)
        meta = {"host": f"h{r // 8}", "rank": r, "pid": r, "window": 1, "final": True, "written": 0.0}
        Snapshot(snap, meta).save(d / f"window-000001-pid{r}.parquet")
        dur = np.concatenate(durs)
        pl.DataFrame(
            {
                "rank": np.full(dur.size, r, dtype=np.int32),
                "name": np.repeat(names, CALLS_PER_KEY),
                "start_ns": np.cumsum(dur).astype(np.int64),
                "dur_ns": dur.astype(np.int64),
            }
        ).write_parquet(root / "trace" / f"rank={r}.parquet")


def subset(root: Path, ranks: int, into: Path) -> Path:
    """The first ``ranks`` ranks of a generated run, by symlinks (no copy)."""
    for kind in ("run", "trace"):
        (into / kind).mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        host = into / "run" / f"host=h{r // 8}"
        host.mkdir(exist_ok=True)
        (host / f"rank={r}").symlink_to(root / "run" / f"host=h{r // 8}" / f"rank={r}")
        (into / "trace" / f"rank={r}.parquet").symlink_to(root / "trace" / f"rank={r}.parquet")
    return into


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(kind: str, root: str) -> dict:
    import warnings

    import polars as pl

    import mspti_lens

    warnings.simplefilter("ignore")
    base = _rss()
    t0 = time.perf_counter()
    if kind == "lens":
        s = mspti_lens.open_run(Path(root) / "run").summary()
        calls, keys = int(s["num_calls"].sum()), s.height
    else:
        files = sorted((Path(root) / "trace").glob("*.parquet"))
        df = pl.concat([pl.read_parquet(f) for f in files])  # every rank's events in one frame
        s = df.group_by("name").agg(
            pl.len().alias("num_calls"),
            pl.col("dur_ns").sum().alias("total_ns"),
            pl.col("dur_ns").mean().alias("avg_ns"),
            *[pl.col("dur_ns").quantile(q, "nearest").alias(f"p{int(q * 100)}") for q in (0.5, 0.9, 0.99)],
            pl.col("dur_ns").max().alias("max_ns"),
        )
        calls, keys = int(s["num_calls"].sum()), s.height
    return {"s": time.perf_counter() - t0, "peak": _rss(), "base": base, "calls": calls, "keys": keys}


def measure(kind: str, root: Path) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(root)],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.parquet"))


def run(quick: bool, log=lambda m: None) -> dict:
    ranks = QUICK_RANKS if quick else FULL_RANKS
    rows = []
    with tempfile.TemporaryDirectory(prefix="mspti-lens-bench-runs-") as tmp:
        full = Path(tmp) / "all"
        log(f"runs: generating {max(ranks)} ranks x {KEYS} keys x {CALLS_PER_KEY} calls")
        generate(full, max(ranks))
        for n in ranks:
            root = full if n == max(ranks) else subset(full, n, Path(tmp) / f"r{n}")
            log(f"runs: merging {n} ranks")
            lens, trace = measure("lens", root), measure("trace", root)
            assert lens["calls"] == trace["calls"] == n * KEYS * CALLS_PER_KEY and lens["keys"] == KEYS
            rows.append(
                {
                    "ranks": n,
                    "calls": lens["calls"],
                    "lens": lens,
                    "trace": trace,
                    "lens_bytes": du(full / "run") * n // max(ranks),
                    "trace_bytes": du(full / "trace") * n // max(ranks),
                }
            )
    return {"quick": quick, "rows": rows}


def _mib(b: float) -> str:
    return f"{b / 2**20:,.0f} MiB"


def render(res: dict) -> list[str]:
    L = ["## Whole jobs: merging every rank (bench/runs.py)", ""]
    L.append(
        f"{KEYS} functions x {CALLS_PER_KEY} calls per rank, synthetic log-normal durations. "
        "mspti-lens: `open_run(DIR).summary()` over one window file per rank (a lazy polars scan and "
        "group-by of the saved histograms, then the Snapshot's own summary). Trace: every call a row, "
        "all ranks concatenated in one frame (as HTA does), then grouped per function with exact "
        "quantiles. Each in a fresh process; memory is peak RSS, and its growth over the process after "
        "its imports."
    )
    L += [
        "",
        "| ranks | calls | approach | files on disk | time | peak RSS | growth | goal |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        for kind, label, size in (
            ("lens", "mspti-lens windows", "lens_bytes"),
            ("trace", "trace concat", "trace_bytes"),
        ):
            m = r[kind]
            goal = ""
            if kind == "lens" and r["ranks"] == 4096:
                ok = m["s"] <= GOAL_S and m["peak"] <= GOAL_BYTES
                goal = ("met" if ok else "MISSED") + f" (<= {GOAL_S:.0f} s, <= 1 GiB)"
            L.append(
                f"| {r['ranks']:,} | {r['calls']:,} | {label} | {_mib(r[size])} | {m['s']:.2f} s | "
                f"{_mib(m['peak'])} | {_mib(m['peak'] - m['base'])} | {goal} |"
            )
    if res["quick"]:
        L += ["", "(quick mode: 64 ranks only; the 4,096-rank goal is checked by the full run)"]
    return L + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None, help="write the Markdown section here (default: print it)")
    ap.add_argument("--child", nargs=2, metavar=("KIND", "ROOT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(*a.child)))
        return
    res = run(a.quick, log=lambda m: print(f"[bench] {m}", file=sys.stderr, flush=True))
    text = "\n".join(render(res))
    if a.out:
        Path(a.out).write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    os.environ.setdefault("POLARS_MAX_THREADS", "2")
    main()
