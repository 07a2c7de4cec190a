#!/usr/bin/env python3
"""Watching a job (python/mspti_lens/watch/): what being watched costs, how soon a slowdown is
caught, what a capture costs. All on simulated 4-rank jobs (SIMULATED).

1. Cost of being watched: one steady job (virtual clock, a step delay so it runs in real time),
   recorded at record's default interval with no watcher and with a watcher polling beside it
   (rules that never fire, captures on: the run is marked watched, so every rank runs its flight
   recorder, ten 1 s windows), rounds alternated; the job's wall time and the CPU of all its
   processes (getrusage of the children), each round's difference (the noise), the watcher's own
   CPU, and the load average (the machine may be shared).
2. Time from a slowdown to the capture: a job whose rank 1 slows down 3x at a step (it prints
   when), recorded in windows of CATCH_INTERVAL_S, watched live with ``aclrtLaunchKernel p50 >
   2x baseline``; the time from the slowdown's start to the capture's start (the control command
   issued), in seconds and in windows of the record interval. Goal: at most two windows plus one
   poll.
3. A capture's cost: what it turns on is the activity collector (its CPU per record is measured
   in the "Activity collector" section) and 1 s windows, on the captured rank only and for
   ``for_s``; here, its folder's bytes and device records, its fine windows before (the flight
   recorder's) and during, and the captured rank's calls per second of wall time in the windows
   during the capture against the windows after the slowdown before it.
4. The flight recorder's own work in a rank (runs/flight_recorder.py), in-process on a 40-key
   Session: the CPU of one fine window (``reset()``), of merging one into a window on disk, of a
   ``snapshot()`` copy (what a copy-based recorder would pay instead), and a ring's memory.

    python bench/watch.py [--quick] [--out FILE]     # alone; bench/run.py includes it
"""

from __future__ import annotations

import argparse
import io
import json
import os
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

COST_INTERVAL_S = 10.0  # record's default (runs/hook.py DEFAULT_INTERVAL)
CATCH_INTERVAL_S = 2.0  # coarser than a capture's 1 s windows, so the flight recorder has work
POLL_S = 0.25
FULL = {"rounds": 4, "steps": 1500, "slow_step": 800, "slow_steps": 1600, "catches": 2}
QUICK = {"rounds": 1, "steps": 300, "slow_step": 800, "slow_steps": 1400, "catches": 1}
FOR_S = 4.0  # a capture's length: a few of its 1 s windows
STEADY_RULES = [
    "aclrtLaunchKernel p50 > 5x baseline",
    "HcclAllReduce p99 > 5x baseline across ranks",
    "dropped > 0",
]


def _job(out: Path, interval: float, *job_args: str) -> list[str]:
    return [
        sys.executable, "-m", "mspti_lens", "record", "--out", str(out), "--interval", str(interval),
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
    from mspti_lens.runs.control import read_processes
    from mspti_lens.watch import Watcher
    from mspti_lens.watch.capture import CapturePolicy

    out: dict[str, list[float]] = {"none_wall": [], "none_cpu": [], "watched_wall": [], "watched_cpu": []}
    watcher_cpu: list[float] = []
    recorders: list[int] = []  # per watched round: ranks whose flight recorder was on at the end
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(cfg["rounds"]):
            for mode in ("none", "watched"):
                root = Path(tmp) / f"{mode}-{i}"
                log(f"watch cost: round {i + 1}, {mode}")
                cpu0, t0 = _children_cpu(), time.perf_counter()
                proc = subprocess.Popen(
                    _job(root, COST_INTERVAL_S, "--steps", str(cfg["steps"]), "--step-delay", "0.01"),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                box: dict[str, float] = {}
                th = None
                if mode == "watched":
                    _wait_dir(root)
                    w = Watcher(root, STEADY_RULES, every=POLL_S, capture=CapturePolicy(), say=lambda s: None)

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
                    recorders.append(
                        sum(bool((p.get("flight") or {}).get("windows")) for p in read_processes(root))
                    )
                out[f"{mode}_wall"].append(wall)
                out[f"{mode}_cpu"].append(cpu)
                load.append(os.getloadavg()[0])
    med = {k: statistics.median(v) for k, v in out.items()}
    diffs = [100.0 * (w - n) / n for w, n in zip(out["watched_cpu"], out["none_cpu"])]
    return {
        "median": med,
        "runs": out,
        "cpu_diff_pct": diffs,
        "watcher_cpu_pct": statistics.median(watcher_cpu),
        "recorders": recorders,
        "load": load,
    }


def catch(cfg: dict, log, step_delay: float) -> dict:
    """One watched slowdown job: the slowdown's start, the capture's start, the capture's files."""
    from mspti_lens import open_run
    from mspti_lens.sim.job import SLOWDOWN_LINE
    from mspti_lens.snapshot import Snapshot
    from mspti_lens.watch import Baseline, Watcher
    from mspti_lens.watch.capture import CapturePolicy, read_captures

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "run"
        job = _job(
            root,
            CATCH_INTERVAL_S,
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
            capture=CapturePolicy(for_s=FOR_S),
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
                rates[where] = statistics.median(Snapshot.load(p).total_calls / span for p, span in items)
        fine = [f for f in cap.get("during") or [] if "/window-" in f]
        fine_during = sum(Snapshot.load(Path(cap["path"]) / f).meta.get("interval_s") == 1.0 for f in fine)
        return {
            "caught": True,
            "delay_s": cap["started"] - slow_at[0],
            "windows": (cap["started"] - slow_at[0]) / CATCH_INTERVAL_S,
            "before_fine": len(cap.get("before_fine") or []),
            "during_fine": fine_during,
            "load": os.getloadavg()[0],
            "bytes": cap.get("bytes"),
            "records": records,
            "rates": rates,
        }


def flight_recorder_work(samples: int) -> dict:
    """The flight recorder's own work in a rank, in-process: medians of thread CPU (us)."""
    from mspti_lens.session import Session
    from mspti_lens.sim import Simulator

    sim = Simulator()
    apis = [a.index for a in sim.apis][:40]
    with Session(library="sim", enable=["runtime", "hccl"]) as s:

        def calls() -> None:
            for a in apis:
                sim.call(a, 1000, 5)

        def cpu(f) -> float:
            xs = []
            for _ in range(samples):
                calls()
                c = time.thread_time_ns()
                f()
                xs.append(time.thread_time_ns() - c)
            return statistics.median(xs) / 1e3

        calls()
        keys = len(s.snapshot())
        reset_us, snapshot_us = cpu(s.reset), cpu(s.snapshot)
        a, b = s.reset(), s.reset()
        merge_us = cpu(lambda: a.merge(b))
        held = []
        rss0 = _rss()
        for _ in range(samples):
            calls()
            held.append(s.reset())
        per_window = (_rss() - rss0) / samples
        saved = io.BytesIO()
        save_us = cpu(lambda: a.save(io.BytesIO()))
        a.save(saved)
    return {
        "save_us": save_us,
        "saved_bytes": len(saved.getvalue()),
        "keys": keys,
        "reset_us": reset_us,
        "snapshot_us": snapshot_us,
        "merge_us": merge_us,
        "bytes_per_window": per_window,
    }


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run(quick: bool, log) -> dict:
    cfg = QUICK if quick else FULL
    log("watch: the flight recorder's own work")
    work = flight_recorder_work(100 if quick else 400)
    cost = watched_cost(cfg, log)
    log("watch: time from a slowdown to its capture")
    caught = [catch(cfg, log, 0.01) for _ in range(cfg["catches"])]
    return {"quick": quick, "cost": cost, "caught": caught, "work": work}


def render(res: dict) -> list[str]:
    cost = res["cost"]
    m, diffs, load = cost["median"], cost["cpu_diff_pct"], cost["load"]
    L = ["## Watching a job: its cost, the time to catch a slowdown, a capture's cost (bench/watch.py)", ""]
    L.append(
        f"Simulated 4-rank jobs (SIMULATED), the watcher polling every {POLL_S:g} s; medians over "
        f"{len(cost['runs']['none_wall'])} round(s), alternated; load average (1 min) "
        f"{min(load):.1f} to {max(load):.1f} during the rounds on {os.cpu_count()} CPU(s)."
    )
    L += [
        "",
        f"| job (windows every {COST_INTERVAL_S:g} s) | wall s | job CPU s | watcher CPU |",
        "|---|---:|---:|---:|",
        f"| recorded, not watched | {m['none_wall']:.2f} | {m['none_cpu']:.2f} | — |",
        f"| recorded and watched (3 rules, none fires; flight recorder on) | {m['watched_wall']:.2f} | "
        f"{m['watched_cpu']:.2f} | {cost['watcher_cpu_pct']:.1f} % of a core |",
        "",
        f"The job's CPU watched vs not, round by round: {', '.join(f'{d:+.1f} %' for d in diffs)} "
        f"(median {statistics.median(diffs):+.1f} %; the spread of these is the noise; goal: within noise, "
        f"at most 0.5 %). Ranks whose flight recorder was on at the end of each watched round: "
        f"{', '.join(str(r) for r in cost['recorders'])} of 4.",
        "",
    ]
    w = res["work"]
    per_s = (w["reset_us"] + w["merge_us"]) / 1e6 * 100.0  # one fine window a second
    L += [
        f"The flight recorder's own work in a rank ({w['keys']} keys): one fine window (`reset()`) "
        f"{w['reset_us']:.0f} us of CPU, merging it into the pending window {w['merge_us']:.0f} us, so "
        f"about {per_s:.3f} % of a core at one fine window a second; a `snapshot()` copy instead would "
        f"cost {w['snapshot_us']:.0f} us each. Memory: about {w['bytes_per_window'] / 1024:.0f} KiB per "
        f"fine window (resident set growth over many held), {11 * w['bytes_per_window'] / 2**20:.1f} MiB "
        f"for a ring of ten and the pending merge; kept serialized, {w['saved_bytes'] / 1024:.0f} KiB "
        f"each for {w['save_us']:.0f} us of CPU each (`Snapshot.save`).",
        "",
    ]
    caught = [c for c in res["caught"] if c.get("caught")]
    goal = 2 * CATCH_INTERVAL_S + POLL_S
    if caught:
        delays = [c["delay_s"] for c in caught]
        windows = [c["windows"] for c in caught]
        L.append(
            f"Time from rank 1's 3x slowdown to the capture's start (windows every {CATCH_INTERVAL_S:g} s, "
            f"`aclrtLaunchKernel p50 > 2x baseline`, K = 2): median {statistics.median(delays):.2f} s = "
            f"{statistics.median(windows):.1f} windows, worst {max(delays):.2f} s = {max(windows):.1f} "
            f"windows over {len(caught)} run(s), load average {max(c['load'] for c in caught):.1f} "
            f"(goal: at most two windows plus one poll, {goal:g} s)."
        )
    else:
        L.append("The slowdown was not caught in this run (see the log).")
    for c in caught[:1]:
        before, during = c["rates"].get("before"), c["rates"].get("during")
        ratio = f" ({100 * (during - before) / before:+.1f} %)" if before and during else ""
        L += [
            "",
            f"A capture ({FOR_S:g} s of kernel, communication and marker records and 1 s windows on the "
            f"slow rank): its folder {c['bytes'] or 0:,} bytes with {c['records']:,} device records, "
            f"{c['before_fine']} fine windows of the seconds before the trigger (the flight recorder's) and "
            f"{c['during_fine']} during; the rank's calls per second of wall time {before or 0:,.0f} in "
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
