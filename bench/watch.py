#!/usr/bin/env python3
"""Watching a job (python/mspti_lens/watch/): what being watched costs, how soon a slowdown is
caught, what a capture costs. All on simulated 4-rank jobs (SIMULATED).

1. Cost of being watched: one steady job (virtual clock, a step delay so it runs in real time),
   recorded at record's default interval with no watcher and with a watcher polling beside it
   (rules that never fire, captures on: the run is marked watched, so every rank runs its flight
   recorder, ten 1 s windows), rounds alternated. Measured inside each rank, from thread CPU
   clocks: every thread of every rank is read from /proc/PID/task/TID/schedstat while the job
   runs (the main thread is the workload's), and each rank's flight recorder counts its own CPU
   (its thread clock around each look at the marker, fine window, merge and dump; the process
   file's ``flight.cpu_s``): the recorder's CPU per second watched against the workload thread's
   CPU per second is what being watched adds in a rank. Beside it, the ranks' other threads'
   CPU watched and not (a cross-check of the recorder's own count), the watcher's own CPU (its
   thread's clock), and the process comparison (all the job's processes' CPU, getrusage) with
   its round-to-round spread: on a shared machine that spread is far larger than the effect.
2. Time from a slowdown to the capture: a job whose rank 1 slows down 3x at a step (it prints
   when), recorded in windows of CATCH_INTERVAL_S, watched live by a p50 rule and a p99 rule (one
   job each, several jobs); the time from the slowdown's start to the capture's command and to
   the rank applying it, split into its parts: the rule's K windows closing, the window reaching
   the disk, the watcher reading it and deciding, the command written, the rank's control poll.
   Goal: at most two windows plus one poll.
3. A capture's cost: what it turns on is the activity collector (its CPU per record is measured
   in the "Activity collector" section) and 1 s windows, on the captured rank only and for
   ``for_s``; here, the captured rank's CPU per second (all its threads) during the capture
   against before it, its folder's bytes and device records, its fine windows before (the
   flight recorder's) and during.
4. The flight recorder's own work in a rank (runs/flight_recorder.py), in-process on a 40-key
   Session: the CPU of one fine window (``Session.cut_calls()``), of merging it into the pending
   ones and of adding those back into a window on disk, of a ``snapshot()`` copy (what a
   copy-based recorder would pay instead), what a cut adds to the workload's next calls, and a
   ring's memory. The cost rounds also give each rank process's CPU recorded without rules, the
   denominator of the 0.5 % goal.

    python bench/watch.py [--quick] [--out FILE]     # alone; bench/run.py includes it
    python bench/watch.py --cost-only --rounds 2     # the cost sections alone
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
SAMPLE_S = 0.25  # the ranks' threads are read this often
# rounds: of the cost comparison; catches: jobs per catch rule
# bare: a watched round whose ranks record no activity records, beside the others
FULL = {"rounds": 3, "steps": 2500, "slow_step": 800, "slow_steps": 1500, "catches": 3, "bare": True}
QUICK = {"rounds": 1, "steps": 300, "slow_step": 800, "slow_steps": 1400, "catches": 1, "bare": False}
CATCH_RULES = ("aclrtLaunchKernel p50 > 2x baseline", "aclrtLaunchKernel p99 > 2x baseline")
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


def _threads(pid: int) -> dict[int, int]:
    """CPU ns of every thread of ``pid`` so far (schedstat: ns; stat's ticks are 10 ms)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tids:
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                out[int(t)] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return out


def _process_cpu_ns(pid: int) -> int | None:
    """A process's user and system CPU so far, every thread's, ended ones too (stat: ticks)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


class RankThreads(threading.Thread):
    """Reads every thread of every rank of a run (the processes with a rank variable) every
    SAMPLE_S while the job runs: each rank's first and last reading, with their times."""

    def __init__(self, root: Path):
        super().__init__(daemon=True)
        self.root = root
        self.first: dict[int, tuple[float, dict[int, int]]] = {}
        self.last: dict[int, tuple[float, dict[int, int]]] = {}
        self.ranks: dict[int, int] = {}  # pid -> rank
        self.series: dict[int, list[tuple[float, int]]] = {}  # pid -> (wall clock, its CPU ns)
        self.done = threading.Event()

    def run(self) -> None:
        from mspti_lens.runs.control import read_processes

        while not self.done.wait(SAMPLE_S):
            if len(self.ranks) < 4:
                for p in read_processes(self.root):
                    if p.get("rank_source") != "pid" and p["live"]:
                        self.ranks.setdefault(int(p["pid"]), int(p["rank"]))
            for pid in self.ranks:
                t = _threads(pid)
                if t:
                    now = time.monotonic()
                    self.first.setdefault(pid, (now, t))
                    self.last[pid] = (now, t)
                    cpu = _process_cpu_ns(pid)  # with its ended threads', which a sum of threads loses
                    if cpu is not None:
                        self.series.setdefault(pid, []).append((time.time(), cpu))

    def rates(self, pid: int, since: float | None = None) -> dict[str, float] | None:
        """CPU seconds per second of wall time of the workload (main) thread and of every other
        thread, between the first and the last reading."""
        if pid not in self.last:
            return None
        (t0, a), (t1, b) = self.first[pid], self.last[pid]
        if t1 - t0 < 1.0:
            return None
        main = (b.get(pid, 0) - a.get(pid, 0)) / 1e9
        others = sum(v - a.get(t, 0) for t, v in b.items() if t != pid) / 1e9
        out = {"main": main / (t1 - t0), "others": others / (t1 - t0), "span_s": t1 - t0}
        series = self.series.get(pid, [])
        if len(series) >= 2 and series[-1][0] - series[0][0] >= 1.0:  # the process, all its threads
            out["process"] = (series[-1][1] - series[0][1]) / 1e9 / (series[-1][0] - series[0][0])
        return out

    def rate_between(self, pid: int, start: float, end: float) -> float | None:
        """The process's CPU seconds per second (all its threads) between two wall-clock times
        (the readings nearest inside them)."""
        inside = [x for x in self.series.get(pid, []) if start <= x[0] <= end]
        if len(inside) < 2 or inside[-1][0] - inside[0][0] < 1.0:
            return None
        return (inside[-1][1] - inside[0][1]) / 1e9 / (inside[-1][0] - inside[0][0])


def watched_cost(cfg: dict, log) -> dict:
    from mspti_lens.runs.control import read_processes
    from mspti_lens.watch import Watcher
    from mspti_lens.watch.capture import CapturePolicy

    out: dict[str, list[float]] = {"none_wall": [], "none_cpu": [], "watched_wall": [], "watched_cpu": []}
    threads: dict[str, list[dict[str, float]]] = {"none": [], "watched": []}  # per rank, per round
    # per watched rank and round: its recorder against its workload (bare: no activity records)
    flight: dict[str, list[dict[str, float]]] = {"watched": [], "bare": []}
    watcher_cpu: list[float] = []
    recorders: list[int] = []  # per watched round: ranks whose flight recorder was on at the end
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(cfg["rounds"]):
            for mode in ("none", "watched", "bare") if cfg["bare"] else ("none", "watched"):
                root = Path(tmp) / f"{mode}-{i}"
                log(f"watch cost: round {i + 1}, {mode}")
                cpu0, t0 = _children_cpu(), time.perf_counter()
                job = _job(root, COST_INTERVAL_S, "--steps", str(cfg["steps"]), "--step-delay", "0.01")
                if mode == "bare":  # watched, the ranks recording no activity records: what they add
                    job[job.index("--") : job.index("--")] = ["--activity", "none"]
                proc = subprocess.Popen(job, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                box: dict[str, float] = {}
                th = None
                _wait_dir(root)
                sampler = RankThreads(root)
                sampler.start()
                if mode != "none":
                    w = Watcher(root, STEADY_RULES, every=POLL_S, capture=CapturePolicy(), say=lambda s: None)

                    def timed(w=w, box=box):  # the watcher's CPU: its own thread's clock
                        c = time.thread_time()
                        w.run(timeout=600)
                        box["cpu"] = time.thread_time() - c

                    th = threading.Thread(target=timed)
                    th.start()
                proc.wait()
                wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
                sampler.done.set()
                sampler.join()
                rows = {int(p["pid"]): p for p in read_processes(root) if p.get("rank_source") != "pid"}
                for pid in sampler.ranks:
                    r = sampler.rates(pid)
                    if r is None:
                        continue
                    f = (rows.get(pid) or {}).get("flight") or {}
                    watched_s = float(f.get("taken") or 0) * float(f.get("interval_s") or 0)
                    if mode != "bare":
                        threads[mode].append(r)
                    if mode != "none" and watched_s > 0:
                        rate = float(f.get("cpu_s") or 0.0) / watched_s
                        flight[mode].append({"cpu_per_s": rate, "share_pct": 100.0 * rate / r["main"],
                                             "main": r["main"], "watched_s": watched_s})  # fmt: skip
                if th is not None:
                    th.join()
                if mode == "watched":
                    watcher_cpu.append(box["cpu"] / wall * 100.0)
                    recorders.append(sum(bool((p.get("flight") or {}).get("taken")) for p in rows.values()))
                if mode != "bare":
                    out[f"{mode}_wall"].append(wall)
                    out[f"{mode}_cpu"].append(cpu)
                load.append(os.getloadavg()[0])
    med = {k: statistics.median(v) for k, v in out.items()}
    diffs = [100.0 * (w - n) / n for w, n in zip(out["watched_cpu"], out["none_cpu"])]
    return {
        "median": med,
        "runs": out,
        "cpu_diff_pct": diffs,
        "threads": threads,
        "flight": flight,
        "watcher_cpu_pct": statistics.median(watcher_cpu),
        "recorders": recorders,
        "load": load,
    }


def catch(cfg: dict, log, rule: str, offset: int = 0, step_delay: float = 0.01) -> dict:
    """One watched slowdown job: when the slowdown started and each step to the capture's start
    (wall clock, from the slowed rank's windows and the capture's record), and the capture's cost."""
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
            "--slowdown", f"rank=1,step={cfg['slow_step'] + offset},factor=3",
        )  # fmt: skip
        proc = subprocess.Popen(job, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _wait_dir(root)
        sampler = RankThreads(root)
        sampler.start()
        w = Watcher(
            root,
            [rule],
            baseline=Baseline(skip=1, windows=3),
            every=POLL_S,
            capture=CapturePolicy(for_s=FOR_S),
            say=lambda s: None,
        )
        w.run(timeout=600)
        _, err = proc.communicate()
        sampler.done.set()
        sampler.join()
        slow_at = [float(m.group(4)) for line in err.splitlines() if (m := SLOWDOWN_LINE.search(line))]
        caps = read_captures(root)
        fired = [t for t in w.transitions if t.after == "firing"]
        if not slow_at or not caps or not fired:
            return {"caught": False, "rule": rule}
        cap, t, slow = caps[0], fired[0], slow_at[0]
        generation = cap["commands"][0]["generation"]
        metas = {}
        for path in root.glob("host=*/rank=1/window-*.parquet"):
            m = Snapshot.load(path).meta
            metas[int(m["window"])] = {**m, "mtime": path.stat().st_mtime, "path": path}
        trigger = metas.get(t.window, {})
        applied = min(
            (m["window_start"] for m in metas.values() if m.get("generation") == generation), default=None
        )
        steps = {
            "windows": t.at - slow,  # the rule's K windows closing after the slowdown
            "to_disk": trigger.get("mtime", t.at) - t.at,  # the writer's save
            "to_decision": cap["claimed_at"] - trigger.get("mtime", t.at),  # the watcher's read
            "to_command": cap["issued_at"] - cap["claimed_at"],  # claim, command written
            "to_applied": (applied - cap["issued_at"]) if applied is not None else None,  # the rank's poll
        }
        pid = next((p for p, r in sampler.ranks.items() if r == 1), None)
        cost = None
        if pid is not None and applied is not None:
            before = sampler.rate_between(pid, slow - FOR_S - 1.0, slow - 1.0)
            during = sampler.rate_between(pid, applied + 0.5, applied + FOR_S - 0.5)
            if before and during:
                cost = {"before": before, "during": during}
        device = Path(cap["path"]) / "device.parquet"
        records = 0
        if device.is_file():
            import polars as pl

            records = pl.read_parquet(device).height
        fine = [f for f in cap.get("during") or [] if "/window-" in f]
        fine_during = sum(Snapshot.load(Path(cap["path"]) / f).meta.get("interval_s") == 1.0 for f in fine)
        return {
            "caught": True,
            "rule": rule,
            "to_command_s": cap["issued_at"] - slow,
            "to_applied_s": (applied - slow) if applied is not None else None,
            "steps": steps,
            "slow_in_window": next(  # where in its window the slowdown began (0: its start, 1: its end)
                (
                    (slow - m["window_start"]) / (m["window_end"] - m["window_start"])
                    for m in metas.values()
                    if m["window_start"] <= slow < m["window_end"]
                ),
                None,
            ),  # fmt: skip
            "before_fine": len(cap.get("before_fine") or []),
            "during_fine": fine_during,
            "load": os.getloadavg()[0],
            "bytes": cap.get("bytes"),
            "records": records,
            "cpu": cost,
        }


def flight_recorder_work(samples: int) -> dict:
    """The flight recorder's own work in a rank, in-process: medians of thread CPU (us)."""
    from mspti_lens.session import Session
    from mspti_lens.sim import Simulator
    from mspti_lens.snapshot import Snapshot

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
        # One fine window: the calls since the last one cut out of the Session's window.
        cut_us, snapshot_us = cpu(s.cut_calls), cpu(s.snapshot)
        # What a fine window adds to the workload: its calls right after a cut (each key's
        # first call in a new epoch) against the same calls with no cut between.
        after: dict[str, list[int]] = {"cut": [], "none": []}
        for i in range(2 * samples):
            calls()
            if i % 2:
                s.cut_calls()
            c = time.thread_time_ns()
            calls()
            after["cut" if i % 2 else "none"].append(time.thread_time_ns() - c)
        cut_calls_us = (statistics.median(after["cut"]) - statistics.median(after["none"])) / 1e3
        calls()
        a = s.cut_calls()
        calls()
        b = s.cut_calls()
        merge_us = cpu(lambda: a.merge(b))  # a fine window into the pending ones
        calls()
        window = s.snapshot()
        add_back_us = cpu(lambda: window.with_calls_of(a))  # the pending ones into a window on disk
        held = []
        rss0 = _rss()
        for _ in range(samples):
            calls()
            held.append(s.cut_calls())
        per_window = (_rss() - rss0) / samples
        kept = Snapshot(a.snapshot(), window.meta)
        saved = io.BytesIO()
        save_us = cpu(lambda: kept.save(io.BytesIO()))
        kept.save(saved)
    return {
        "save_us": save_us,
        "saved_bytes": len(saved.getvalue()),
        "keys": keys,
        "cut_us": cut_us,
        "cut_calls_us": cut_calls_us,
        "snapshot_us": snapshot_us,
        "merge_us": merge_us,
        "add_back_us": add_back_us,
        "bytes_per_window": per_window,
    }


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# Each catch job slows down this many steps later than the last (about a third of a window at
# 0.01 s a step): the slowdown's place in its window varies, and with it how long K windows take.
SLOW_STEP_OFFSET = 70


def run(
    quick: bool, log, reuse: dict | None = None, cost_only: bool = False, rounds: int | None = None
) -> dict:
    cfg = dict(QUICK if quick else FULL)
    if rounds is not None:
        cfg["rounds"] = rounds
    if reuse is not None:  # the cost sections of an earlier run; only the catches again
        work, cost = reuse["work"], reuse["cost"]
    else:
        log("watch: the flight recorder's own work")
        work = flight_recorder_work(100 if quick else 400)
        cost = watched_cost(cfg, log)
    caught: list[dict] = []
    for rule in () if cost_only else CATCH_RULES[-1:] if quick else CATCH_RULES:
        for i in range(cfg["catches"]):
            log(f"watch: time from a slowdown to its capture, {rule!r}, job {i + 1}")
            caught.append(catch(cfg, log, rule, offset=i * SLOW_STEP_OFFSET))
    return {"quick": quick, "cost": cost, "caught": caught, "work": work}


def _spread(xs: list[float], fmt: str = "{:.2f}") -> str:
    """min / median / max of a list, or its one value."""
    if len(xs) == 1:
        return fmt.format(xs[0])
    return " / ".join(fmt.format(v) for v in (min(xs), statistics.median(xs), max(xs)))


def render(res: dict) -> list[str]:
    cost = res["cost"]
    m, diffs, load = cost["median"], cost["cpu_diff_pct"], cost["load"]
    L = ["## Watching a job: its cost, the time to catch a slowdown, a capture's cost (bench/watch.py)", ""]
    rounds = len(cost["runs"]["none_wall"])
    L.append(
        f"Simulated 4-rank jobs (SIMULATED), the watcher polling every {POLL_S:g} s; {rounds} round(s), "
        f"alternated; load average (1 min) {min(load):.1f} to {max(load):.1f} during the rounds on "
        f"{os.cpu_count()} CPU(s). Figures are min / median / max where there are several."
    )
    th = cost["threads"]
    main = {k: [r["main"] * 1e3 for r in v] for k, v in th.items()}
    others = {k: [r["others"] * 1e3 for r in v] for k, v in th.items()}
    L += [
        "",
        f"| job (windows every {COST_INTERVAL_S:g} s) | wall s | all its processes' CPU s | per rank: "
        "workload thread, ms CPU/s | per rank: its other threads, ms CPU/s | watcher CPU |",
        "|---|---:|---:|---:|---:|---:|",
        f"| recorded, not watched | {m['none_wall']:.2f} | {m['none_cpu']:.2f} | "
        f"{_spread(main['none'], '{:.1f}') if main['none'] else '—'} | "
        f"{_spread(others['none'], '{:.2f}') if others['none'] else '—'} | — |",
        f"| recorded and watched (3 rules, none fires; flight recorder on) | {m['watched_wall']:.2f} | "
        f"{m['watched_cpu']:.2f} | {_spread(main['watched'], '{:.1f}') if main['watched'] else '—'} | "
        f"{_spread(others['watched'], '{:.2f}') if others['watched'] else '—'} | "
        f"{cost['watcher_cpu_pct']:.2f} % of a core |",
        "",
    ]
    fl, bare = cost["flight"]["watched"], cost["flight"]["bare"]
    # The honest denominator: each rank process's CPU (all its threads) recorded without rules.
    proc_none = [r["process"] * 1e3 for r in th["none"] if r.get("process")]
    if fl:
        share = [f["share_pct"] for f in fl]
        per_s = [f["cpu_per_s"] * 1e6 for f in fl]
        busy = statistics.median(f["main"] for f in fl) * 100.0
        breakeven = max(per_s) / 1e6 / 0.005  # cores a rank must use for the recorder to be 0.5 %
        L.append(
            f"**What being watched adds inside a rank, measured there:** each rank's flight recorder "
            f"(its looks at the watched marker, a fine window a second, the merges into the windows on "
            f"disk), by its own thread CPU clock: {_spread(per_s, '{:.0f}')} us of CPU per second "
            f"watched ({statistics.median(per_s) / 1e4:.2f} % of a core), "
            f"{_spread(share, '{:.2f}')} % of its workload thread's CPU ({len(fl)} rank-rounds, "
            f"{statistics.median(f['watched_s'] for f in fl):.0f} s watched each)."
        )
        if proc_none:
            p = statistics.median(proc_none)
            of_proc = [x / 1e3 / p * 100.0 for x in per_s]
            verdict = "met" if max(of_proc) <= 0.5 else "not met"
            L.append(
                f"Against each rank process's CPU recorded without rules in the same rounds (all its "
                f"threads, /proc; {_spread(proc_none, '{:.1f}')} ms/s): {_spread(of_proc, '{:.2f}')} % "
                f"of the rank process: the goal (at most 0.5 %) is **{verdict}** in every rank-round."
            )
        if bare:
            b = [f["cpu_per_s"] * 1e6 for f in bare]
            L.append(
                f"The same ranks recording no activity records (`record --activity none`): "
                f"{_spread(b, '{:.0f}')} us per second: a fine window cuts the callback histograms "
                "alone, so the activity records add nothing to it."
            )
        L.append(
            f"This simulated rank's workload thread is busy {busy:.1f} % of a core (it sleeps 10 ms a "
            f"step), and against it alone the recorder is {_spread(share, '{:.2f}')} %; the goal (at "
            f"most 0.5 %) holds against any rank whose process uses at least {breakeven:.2f} of a core."
        )
    else:
        L.append("No rank's flight recorder ran long enough to be measured (quick mode's jobs are short).")
    if others["none"] and others["watched"]:
        d = statistics.median(others["watched"]) - statistics.median(others["none"])
        L.append(
            f"Cross-check, the ranks' threads other than the workload's (window writer, control "
            f"thread, pools), medians watched vs not: {d:+.2f} ms CPU/s, that is "
            f"{100 * d / statistics.median(main['none']):+.2f} % of the workload thread's; across "
            "processes this carries their noise, the recorder's own count above does not."
        )
    L += [
        "",
        f"The process comparison, the job's CPU watched vs not round by round: "
        f"{', '.join(f'{d:+.1f} %' for d in diffs)} (median {statistics.median(diffs):+.1f} %): on a "
        "shared machine the spread of these rounds is far wider than what being watched adds, so it "
        "shows no effect either way; the thread clocks above are the measurement. The watcher's own "
        f"CPU is the watcher's process's (beside the job, not in it). Ranks whose flight recorder "
        f"ran, per watched round: {', '.join(str(r) for r in cost['recorders'])} of 4.",
        "",
    ]
    w = res["work"]
    if "cut_us" not in w:  # a run from before fine windows were sparse cuts
        return L + ["(in-process figures of the recorder before sparse cuts: see an earlier run)", ""]
    per_s = (w["cut_us"] + w["merge_us"] + max(0.0, w["cut_calls_us"])) / 1e6 * 100.0
    L += [
        f"The flight recorder's work, in-process ({w['keys']} keys, warm caches; a rank's once-a-second "
        f"work runs cold and costs several times more, hence the thread clocks above): one fine window "
        f"(`Session.cut_calls()`) {w['cut_us']:.1f} us of CPU, merging it into the pending ones "
        f"{w['merge_us']:.1f} us, adding the pending ones back into a window on disk "
        f"(`with_calls_of`) {w['add_back_us']:.0f} us, the workload's calls after a cut "
        f"{w['cut_calls_us']:+.1f} us against the same calls without one, so about {per_s:.4f} % of a "
        f"core at one fine window a second; a `snapshot()` copy instead would cost "
        f"{w['snapshot_us']:.0f} us each. Memory: about {w['bytes_per_window'] / 1024:.1f} KiB per fine "
        f"window (resident set growth over many held); written, {w['saved_bytes'] / 1024:.0f} KiB "
        f"each for {w['save_us']:.0f} us of CPU (`Snapshot.save`, only at a dump).",
        "",
    ]
    if not res["caught"]:  # the cost sections alone (--cost-only)
        return L + ["(the cost sections alone: `--cost-only`)", ""]
    goal = 2 * CATCH_INTERVAL_S + POLL_S
    caught = [c for c in res["caught"] if c.get("caught")]
    missed = len(res["caught"]) - len(caught)
    L += [
        f"Time from rank 1's 3x slowdown to the capture (windows every {CATCH_INTERVAL_S:g} s, K = 2, "
        f"the watcher's poll {POLL_S:g} s; goal: at most two windows plus one poll, {goal:g} s), in "
        "seconds, and its parts (medians):",
        "",
        "| rule | jobs | to the command | to the rank applying it | K windows closing | to disk "
        "| read and decided | command written | rank's poll | slowdown's place in its window |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rule in dict.fromkeys(c["rule"] for c in res["caught"]):
        cs = [c for c in caught if c["rule"] == rule]
        if not cs:
            L.append(f"| `{rule}` | 0 caught | | | | | | | | |")
            continue
        st = {k: [c["steps"][k] for c in cs if c["steps"][k] is not None] for k in cs[0]["steps"]}
        applied = [c["to_applied_s"] for c in cs if c["to_applied_s"] is not None]
        place = [c["slow_in_window"] for c in cs if c["slow_in_window"] is not None]
        L.append(
            f"| `{rule}` | {len(cs)} | {_spread([c['to_command_s'] for c in cs])} | "
            f"{_spread(applied) if applied else '—'} | "
            + " | ".join(f"{statistics.median(st[k]):.3f}" if st[k] else "—" for k in st)
            + f" | {', '.join(f'{x:.2f}' for x in place)} |"
        )
    if missed:
        L.append(f"\n{missed} job(s) not caught (see the log).")
    if caught:
        cmd = sum(c["to_command_s"] <= goal for c in caught)
        app = sum(c["to_applied_s"] is not None and c["to_applied_s"] <= goal for c in caught)
        L += [
            "",
            "Each job (rule; where in its window the slowdown began; to the command; to the rank "
            "applying it): "
            + "; ".join(
                f"{c['rule'].split()[1]} {c['slow_in_window'] or 0:.2f} {c['to_command_s']:.2f} "
                f"{c['to_applied_s'] or float('nan'):.2f}"
                for c in caught
            )
            + f". Within the goal to the command: {cmd} of {len(caught)}; to the rank applying it: "
            f"{app} of {len(caught)}.",
        ]
    loads = [c["load"] for c in caught]
    if loads:
        L += ["", f"Load average during these jobs: {min(loads):.1f} to {max(loads):.1f}."]
    if caught:
        with_cpu = [c["cpu"] for c in caught if c.get("cpu")]
        if with_cpu:
            before = statistics.median(x["before"] for x in with_cpu)
            during = statistics.median(x["during"] for x in with_cpu)
            up = [100 * (x["during"] - x["before"]) / x["before"] for x in with_cpu]
            rate = (
                f"the captured rank's CPU (all its threads, /proc) {before * 1e3:.1f} ms/s in the {FOR_S:g} "
                f"s before the slowdown and {during * 1e3:.1f} ms/s during the capture, medians over "
                f"{len(with_cpu)} jobs: {_spread(up, '{:+.0f}')} %"
            )
        else:
            rate = "the captured rank's CPU could not be read"
        L += [
            "",
            f"A capture ({FOR_S:g} s of kernel, communication and marker records and 1 s windows on the "
            f"slow rank only): {rate}; its folder {_spread([c['bytes'] / 1e6 for c in caught], '{:.0f}')} "
            f"MB with {_spread([float(c['records']) for c in caught], '{:,.0f}')} device records, "
            f"{_spread([float(c['before_fine']) for c in caught], '{:.0f}')} fine windows of the seconds "
            f"before the trigger (the flight recorder's) and "
            f"{_spread([float(c['during_fine']) for c in caught], '{:.0f}')} during.",
        ]
    if res["quick"]:
        L += ["", "(quick mode: one round of short jobs, one catch)"]
    return L + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--json", default=None, help="also keep every figure measured here")
    ap.add_argument("--render", default=None, metavar="JSON", help="render a --json file again")
    ap.add_argument(
        "--catches-only", default=None, metavar="JSON", help="the catches again; the rest from a --json file"
    )
    ap.add_argument("--cost-only", action="store_true", help="the cost sections alone, no catches")
    ap.add_argument("--rounds", type=int, default=None, help="cost rounds (default: 3, quick 1)")
    a = ap.parse_args()
    if a.render:
        res = json.loads(Path(a.render).read_text())
    else:
        reuse = json.loads(Path(a.catches_only).read_text()) if a.catches_only else None
        say = lambda m: print(f"[bench] {m}", file=sys.stderr, flush=True)  # noqa: E731
        res = run(a.quick, log=say, reuse=reuse, cost_only=a.cost_only, rounds=a.rounds)
    if a.json:
        Path(a.json).write_text(json.dumps(res, default=str))
    text = "\n".join(render(res))
    if a.out:
        Path(a.out).write_text(text)
    else:
        print(text)
    print(json.dumps({k: v for k, v in res.items() if k != "cost"}, default=str), file=sys.stderr)


if __name__ == "__main__":
    main()
