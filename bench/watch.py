#!/usr/bin/env python3
"""Watching a job (python/mspti_lens/watch/): what being watched costs, how soon a slowdown is
caught, what a capture costs. All on simulated 4-rank jobs (SIMULATED).

1. Cost of being watched: one steady job (virtual clock, a step delay so it runs in real time),
   recorded with no watcher and with a watcher polling beside it (rules that never fire), rounds
   alternated; the job's wall time and the CPU of all its processes (getrusage of the children),
   and the watcher's own CPU. The watcher reads the files the ranks write and nothing else, so
   the job's own work is unchanged; on a machine with spare cores its CPU is the whole cost.
2. Time from a slowdown to the capture: a job whose rank 1 slows down 3x at a step (it prints
   when), watched live with ``aclrtLaunchKernel p50 > 2x baseline``; the time from the slowdown's
   start to the capture's start (the control command issued), in seconds and in windows of the
   record interval. Goal: at most two windows plus one poll.
3. A capture's cost: what it turns on is the activity collector (its CPU per record is measured
   in the "Activity collector" section), on the captured rank only and for ``for_s``; here, its
   folder's bytes and device records, and the captured rank's calls per second of wall time in
   the windows during the capture against the windows after the slowdown before it.

    python bench/watch.py [--quick] [--out FILE]     # alone; bench/run.py includes it
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))

INTERVAL_S = 0.5
POLL_S = 0.25
FULL = {"rounds": 3, "steps": 800, "slow_step": 400, "slow_steps": 1000}
QUICK = {"rounds": 1, "steps": 150, "slow_step": 200, "slow_steps": 450}
STEADY_RULES = [
    "aclrtLaunchKernel p50 > 5x baseline",
    "HcclAllReduce p99 > 5x baseline across ranks",
    "dropped > 0",
]


def _job(out: Path, *job_args: str) -> list[str]:
    return [
        sys.executable, "-m", "mspti_lens", "record", "--out", str(out), "--interval", str(INTERVAL_S),
        "--library", "sim", "--clock", "mspti", "--",
        sys.executable, "-m", "mspti_lens.sim", "job", "--ranks", "4", *job_args,
    ]  # fmt: skip


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _wait_dir(p: Path) -> None:
    while not p.is_dir():
        time.sleep(0.02)


def watched_cost(cfg: dict, log) -> dict:
    from mspti_lens.watch import Watcher

    out: dict[str, list[float]] = {"none_wall": [], "none_cpu": [], "watched_wall": [], "watched_cpu": []}
    watcher_cpu: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(cfg["rounds"]):
            for mode in ("none", "watched"):
                root = Path(tmp) / f"{mode}-{i}"
                log(f"watch cost: round {i + 1}, {mode}")
                cpu0, t0 = _children_cpu(), time.perf_counter()
                proc = subprocess.Popen(
                    _job(root, "--steps", str(cfg["steps"]), "--step-delay", "0.01"),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                box: dict[str, float] = {}
                th = None
                if mode == "watched":
                    _wait_dir(root)
                    w = Watcher(root, STEADY_RULES, every=POLL_S, capture=False)

                    def timed(w=w, box=box):  # the watcher's CPU: its own thread's clock
                        c = time.thread_time()
                        w.run(timeout=600)
                        box["cpu"] = time.thread_time() - c

                    th = threading.Thread(target=timed)
                    th.start()
                proc.wait()
                wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
                if th is not None:
                    th.join()
                    watcher_cpu.append(box["cpu"] / wall * 100.0)
                out[f"{mode}_wall"].append(wall)
                out[f"{mode}_cpu"].append(cpu)
    med = {k: statistics.median(v) for k, v in out.items()}
    return {"median": med, "runs": out, "watcher_cpu_pct": statistics.median(watcher_cpu)}


def catch(cfg: dict, log, step_delay: float) -> dict:
    """One watched slowdown job: the slowdown's start, the capture's start, the capture's files."""
    from mspti_lens import open_run
    from mspti_lens.sim.job import SLOWDOWN_LINE
    from mspti_lens.watch import Baseline, Watcher
    from mspti_lens.watch.capture import CapturePolicy, read_captures

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "run"
        job = _job(
            root,
            "--steps", str(cfg["slow_steps"]), "--step-delay", str(step_delay),
            "--slowdown", f"rank=1,step={cfg['slow_step']},factor=3",
        )  # fmt: skip
        proc = subprocess.Popen(job, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _wait_dir(root)
        w = Watcher(
            root,
            ["aclrtLaunchKernel p50 > 2x baseline"],
            baseline=Baseline(skip=1, windows=3),
            every=POLL_S,
            capture=CapturePolicy(for_s=2.0),
            say=lambda s: None,
        )
        w.run(timeout=600)
        _, err = proc.communicate()
        slow_at = [float(m.group(4)) for line in err.splitlines() if (m := SLOWDOWN_LINE.search(line))]
        caps = read_captures(root)
        if not slow_at or not caps:
            return {"caught": False}
        cap = caps[0]
        files = open_run(root).files().filter(rank=1).sort("window")
        per_s = {"before": [], "during": []}
        for row in files.iter_rows(named=True):
            span = row["window_end"] - row["window_start"]
            if span <= 0 or row["final"]:
                continue
            where = (
                "during"
                if cap["started"] <= row["window_start"] and row["window_end"] <= cap["until"]
                else None
            )
            if row["window_end"] <= cap["started"] and row["window_start"] >= slow_at[0]:
                where = "before"
            if where:
                per_s[where].append((row["path"], span))
        device = Path(cap["path"]) / "device.parquet"
        records = 0
        if device.is_file():
            import polars as pl

            records = pl.read_parquet(device).height
        rates = {}
        for where, items in per_s.items():
            if items:
                from mspti_lens.snapshot import Snapshot

                rates[where] = statistics.median(Snapshot.load(p).total_calls / span for p, span in items)
        return {
            "caught": True,
            "delay_s": cap["started"] - slow_at[0],
            "windows": (cap["started"] - slow_at[0]) / INTERVAL_S,
            "bytes": cap.get("bytes"),
            "records": records,
            "rates": rates,
        }


def run(quick: bool, log) -> dict:
    cfg = QUICK if quick else FULL
    cost = watched_cost(cfg, log)
    log("watch: time from a slowdown to its capture")
    caught = [catch(cfg, log, 0.01) for _ in range(cfg["rounds"])]
    return {"quick": quick, "cost": cost, "caught": caught}


def render(res: dict) -> list[str]:
    m = res["cost"]["median"]
    L = ["## Watching a job: its cost, the time to catch a slowdown, a capture's cost (bench/watch.py)", ""]
    L.append(
        f"Simulated 4-rank jobs (SIMULATED), windows every {INTERVAL_S:g} s, the watcher polling every "
        f"{POLL_S:g} s; medians over {len(res['cost']['runs']['none_wall'])} round(s), alternated."
    )
    L += [
        "",
        "| job | wall s | CPU s of the job's processes | watcher CPU |",
        "|---|---:|---:|---:|",
        f"| recorded, not watched | {m['none_wall']:.2f} | {m['none_cpu']:.2f} | — |",
        f"| recorded and watched (3 rules, none fires) | {m['watched_wall']:.2f} | {m['watched_cpu']:.2f} | "
        f"{res['cost']['watcher_cpu_pct']:.1f} % of a core |",
        "",
        f"The job's CPU watched vs not: {100 * (m['watched_cpu'] - m['none_cpu']) / m['none_cpu']:+.1f} % "
        "(goal: within noise, at most 0.5 %); the watcher only reads the ranks' files, so what it costs "
        "is its own CPU, on whichever core it runs.",
        "",
    ]
    caught = [c for c in res["caught"] if c.get("caught")]
    if caught:
        delays = [c["delay_s"] for c in caught]
        windows = [c["windows"] for c in caught]
        L.append(
            f"Time from rank 1's 3x slowdown to the capture's start (`aclrtLaunchKernel p50 > 2x baseline`, "
            f"K = 2): median {statistics.median(delays):.2f} s = {statistics.median(windows):.1f} windows, "
            f"worst {max(delays):.2f} s = {max(windows):.1f} windows over {len(caught)} run(s) "
            f"(goal: at most two windows plus one poll, {2 * INTERVAL_S + POLL_S:g} s)."
        )
    else:
        L.append("The slowdown was not caught in this run (see the log).")
    for c in caught[:1]:
        before, during = c["rates"].get("before"), c["rates"].get("during")
        ratio = f" ({100 * (during - before) / before:+.1f} %)" if before and during else ""
        L += [
            "",
            f"A capture (2 s of kernel, communication and marker records on the slow rank): its folder "
            f"{c['bytes'] or 0:,} bytes with {c['records']:,} device records (windows before and during, "
            f"records, trace, comparison); the rank's calls per second of wall time {before or 0:,.0f} in "
            f"its windows before, {during or 0:,.0f} during{ratio} (this job's pace is its step delay, "
            "so this shows no slowing of the job; the per-record CPU is the activity collector's, below).",
        ]
    if res["quick"]:
        L += ["", "(quick mode: one round of short jobs)"]
    return L + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    res = run(a.quick, log=lambda m: print(f"[bench] {m}", file=sys.stderr, flush=True))
    text = "\n".join(render(res))
    if a.out:
        Path(a.out).write_text(text)
    else:
        print(text)
    print(json.dumps({k: v for k, v in res.items() if k != "cost"}, default=str), file=sys.stderr)


if __name__ == "__main__":
    main()
