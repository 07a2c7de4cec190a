#!/usr/bin/env python3
"""On-demand profiling (runs/control.py): what a paused process costs, how fast commands land.

1. Cost, one workload, processes alternated in one run: a process times batches of simulated
   ``aclrtLaunchKernel`` calls (a Python loop over the simulator's ``msimCall``: a few hundred
   ns per call, cheap calls, so any cost shows). "no hook" runs without mspti-lens; "paused"
   runs under the recording hook with profiling off, then in the same process it issues
   ``control start`` to itself (its own control thread applies it: "on"), then ``control stop``
   ("after stop"). Each figure is the median ns per call over the batches of every round.
   Processes differ from one another by more than 0.5 % (their medians spread over several per
   cent on a shared machine), so the comparison alone cannot show the goal; hence also:
2. What the paused hook itself runs, measured directly: the CPU time of its threads (the
   control thread's stat every 0.25 s, the window writer's clock tick, the heartbeat) in a paused
   process running the workload, read from each thread's own CPU clock
   (``pthread_getcpuclockid``), against the workload thread's CPU in the same span. With no
   subscriber the hook runs nothing on the program's threads, so this share is its cost.
3. Time from a command to the last process's acknowledgement, for N tiny paused processes
   (each only sleeps under the hook): ``start`` (each subscribes a Session on the simulator)
   and ``stop``.
4. The poll load on a shared filesystem's metadata server, from the design's numbers.

    python bench/control.py [--quick] [--out FILE]     # alone; bench/run.py includes it
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))

BATCH = 20_000
# linger_s: each span of the per-thread linger check (paused, then after the stop's settle).
FULL = {"rounds": 5, "batches": 15, "ranks": (8, 32, 128), "threads_s": 20.0, "linger_s": 3.0}
QUICK = {"rounds": 1, "batches": 3, "ranks": (4,), "threads_s": 2.0, "linger_s": 1.0}
# The after-stop span starts this long after the stop's acknowledgement: the final window's write
# ends before the acknowledgement, but the thread pools it woke (polars, Arrow, jemalloc) wind down
# for a moment after; a span that starts at once measured that tail as lingering.
SETTLE_S = 2.0
# Lingering: after the stop, the threads other than the workload's use more than this much over
# their paused level (median over the processes), or a thread new since the pause uses > this.
LINGER_SLACK_US = 100.0
LINGER_RATIO = 1.5
GOAL_PAUSED_PCT = 0.5
GOAL_ACK_S = 1.0
BOUND_S = 600.0


def hook_env(out: Path, rank: int | None = None, paused: bool = True) -> dict[str, str]:
    from mspti_lens.runs import control, hook, runfiles

    runfiles.create_run(out)  # as `record` makes it: control refuses a run folder it did not
    e = dict(os.environ)
    gen = control.issue(out, {"command": "stop" if paused else "start", "ranks": None}) if rank is None else 0
    e.update(
        {
            hook.RECORD_VARIABLE: str(out),
            hook.PAUSED_VARIABLE: "1" if paused else "0",
            hook.LIBRARY_VARIABLE: "sim",
            hook.ACTIVITY_VARIABLE: "none",
            hook.ENABLE_VARIABLE: "runtime",
            hook.INTERVAL_VARIABLE: "10",
            "PYTHONPATH": os.pathsep.join([hook.SITE_DIR, str(HERE.parent / "python")]),
        }
    )
    if gen:
        e[hook.GENERATION_VARIABLE] = str(gen)
    return e


def threads_cpu() -> dict[int, tuple[str, int]]:
    """Every thread of this process: (its name, CPU ns so far), from /proc's schedstat (ns; the
    stat file's ticks are 10 ms). Python threads by their Python name, others by their comm."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[int, tuple[str, int]] = {}
    with contextlib.suppress(OSError):
        for t in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/self/task/{t}/comm") as f:
                    comm = f.read().strip()
                with open(f"/proc/self/task/{t}/schedstat") as f:
                    out[int(t)] = (names.get(int(t), comm), int(f.read().split()[0]))
    return out


def linger_span(run_workload, seconds: float) -> dict[str, float]:
    """µs of CPU per second of each thread but the calling (workload) one, by name (threads of one
    name summed), over ``seconds`` of workload."""
    import threading

    me = threading.get_native_id()
    a, t = threads_cpu(), time.monotonic()
    run_workload(seconds)
    b, wall = threads_cpu(), time.monotonic() - t
    used: dict[str, float] = {}
    for tid, (name, ns) in b.items():
        if tid != me:
            used[name] = used.get(name, 0.0) + (ns - a.get(tid, (name, 0))[1]) / wall / 1e3
    return used


def child(mode: str, batches: int, linger_s: float = 0.0) -> dict:
    """One process of the cost benchmark: ns per call per phase; with ``linger_s``, each thread's
    CPU over a paused span and over one after the stop (``SETTLE_S`` after its acknowledgement)."""
    from mspti_lens.sim.driver import Simulator

    sim = Simulator()
    api = sim.api("aclrtLaunchKernel")
    call = sim.lib.msimCall

    def phase() -> list[float]:
        out = []
        for _ in range(batches):
            t = time.process_time_ns()  # every thread's CPU (the hook's too), not time descheduled
            for _ in range(BATCH):
                call(api, 1000)
            out.append((time.process_time_ns() - t) / BATCH)
        return out

    def hooks_cpu() -> int:
        import threading

        return sum(_thread_cpu(t) for t in threading.enumerate() if t.name.startswith("mspti-lens"))

    def facts(ns: int, wall: float, others: int = 0) -> dict:
        # What a lingering profiler would leave: a subscriber, threads, CPU on the hook's threads.
        names: dict[str, int] = {}
        with contextlib.suppress(OSError):
            for t in os.listdir("/proc/self/task"):
                with contextlib.suppress(OSError), open(f"/proc/self/task/{t}/comm") as f:
                    name = f.read().strip()
                    names[name] = names.get(name, 0) + 1
        return {
            "subscribed": bool(sim.subscribed),
            "threads": names,
            "hook_us_per_s": ns / wall / 1e3,
            "others_us_per_s": others / wall / 1e3,  # every other thread but the workload's
        }

    def spans() -> tuple[int, float, int, int]:
        return hooks_cpu(), time.monotonic(), time.process_time_ns(), time.thread_time_ns()

    def facts_since(t: tuple[int, float, int, int]) -> dict:
        c, w, p, m = t
        hook = hooks_cpu() - c
        others = (time.process_time_ns() - p) - (time.thread_time_ns() - m) - hook
        return facts(hook, time.monotonic() - w, max(0, others))

    def run_for(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(BATCH // 10):
                call(api, 1000)

    res: dict = {}
    if mode == "hook" and linger_s:
        res["paused_threads"] = linger_span(run_for, linger_s)
    t0 = spans()
    res["before"] = phase()
    res["before_facts"] = facts_since(t0)
    if mode == "hook":
        from mspti_lens.runs.control import RunControl

        ctl = RunControl(os.environ["MSPTI_LENS_RECORD"])
        ctl.start()
        assert not ctl.wait(60), "the process did not apply its own start"
        res["on"] = phase()
        res["on_facts"] = facts(0, 1.0)
        ctl.stop()
        assert not ctl.wait(60), "the process did not apply its own stop"
        t0 = spans()
        res["after"] = phase()
        res["after_facts"] = facts_since(t0)
        if linger_s:
            run_for(max(0.0, SETTLE_S - (time.monotonic() - t0[1])))
            res["after_threads"] = linger_span(run_for, linger_s)
    return res


def _thread_cpu(t) -> int:
    """A thread's CPU ns, from its own CPU clock."""
    assert t.ident is not None
    return time.clock_gettime_ns(time.pthread_getcpuclockid(t.ident))


def hook_threads(seconds: float) -> dict:
    """One paused process of section 2: the workload on the main thread for ``seconds``; the CPU
    ns of the hook's threads and of the workload thread in that span."""
    import threading

    from mspti_lens.sim.driver import Simulator

    sim = Simulator()
    api = sim.api("aclrtLaunchKernel")
    call = sim.lib.msimCall
    hooks = [t for t in threading.enumerate() if t.name.startswith("mspti-lens")]
    assert hooks, "no mspti-lens thread: the process is not under the paused hook"

    cpu = _thread_cpu
    before = {t.name: cpu(t) for t in hooks}
    work, wall = time.thread_time_ns(), time.monotonic()
    while time.monotonic() - wall < seconds:
        for _ in range(BATCH):
            call(api, 1000)
    work, wall = time.thread_time_ns() - work, time.monotonic() - wall
    return {
        "threads": {t.name: cpu(t) - before[t.name] for t in hooks},
        "workload_ns": work,
        "wall_s": wall,
    }


def threads_cost(quick: bool, log) -> dict:
    cfg = QUICK if quick else FULL
    log(f"control: the paused hook's threads over {cfg['threads_s']:g} s of workload")
    with tempfile.TemporaryDirectory(prefix="mspti-bench-threads-") as tmp:
        cmd = [sys.executable, __file__, "--threads", str(cfg["threads_s"])]
        env = hook_env(Path(tmp) / "run")
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=BOUND_S, check=False)
    if p.returncode:
        raise RuntimeError(f"bench child threads failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _run_child(mode: str, batches: int, env: dict[str, str], linger_s: float = 0.0) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, str(batches), str(linger_s)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=BOUND_S, check=False)
    if p.returncode:
        raise RuntimeError(f"bench child {mode} failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def cost(quick: bool, log) -> dict:
    cfg = QUICK if quick else FULL
    got: dict[str, list[float]] = {"none": [], "paused": [], "on": [], "after": []}
    per_process: dict[str, list[float]] = {"none": [], "paused": []}  # each process's median
    facts: list[dict] = []  # per hooked process: subscriber, threads, hook CPU per phase
    with tempfile.TemporaryDirectory(prefix="mspti-bench-control-") as tmp:
        for r in range(cfg["rounds"]):
            log(f"control cost round {r + 1}/{cfg['rounds']}")
            out = Path(tmp) / f"run{r}"
            plain = {k: v for k, v in os.environ.items() if not k.startswith("MSPTI_LENS_")}
            plain["PYTHONPATH"] = str(HERE.parent / "python")
            for mode in ("none", "hook") if r % 2 == 0 else ("hook", "none"):  # alternated
                if mode == "none":
                    got["none"] += (before := _run_child("none", cfg["batches"], plain)["before"])
                    per_process["none"].append(statistics.median(before))
                else:
                    res = _run_child("hook", cfg["batches"], hook_env(out), cfg["linger_s"])
                    got["paused"] += res["before"]
                    per_process["paused"].append(statistics.median(res["before"]))
                    got["on"] += res["on"]
                    got["after"] += res["after"]
                    keep = ("before_facts", "on_facts", "after_facts", "paused_threads", "after_threads")
                    facts.append({k: res[k] for k in keep})
    med = {k: statistics.median(v) for k, v in got.items()}
    spread = {k: (min(v), max(v)) for k, v in got.items()}
    pn = per_process["none"]
    # Noise: how far apart two no-hook processes' medians are, relative to their median.
    noise = 100.0 * (max(pn) - min(pn)) / statistics.median(pn) if len(pn) > 1 else 0.0
    return {
        "median": med,
        "spread": spread,
        "noise_pct": noise,
        "processes": len(pn),
        "facts": facts,
        "batches": {k: len(v) for k, v in got.items()},
        "linger_s": cfg["linger_s"],
    }


def ack_latency(n: int, log) -> dict:
    """N paused processes; the time from each command to the last one's acknowledgement."""
    from mspti_lens.runs.control import RunControl, read_processes

    with tempfile.TemporaryDirectory(prefix="mspti-bench-acks-") as tmp:
        out = Path(tmp) / "run"
        env = hook_env(out)
        procs = []
        try:
            for r in range(n):
                e = {**env, "RANK": str(r), "WORLD_SIZE": str(n)}
                procs.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], env=e))
            end = time.monotonic() + BOUND_S
            log(f"control acks: waiting for {n} paused processes")
            while len([p for p in read_processes(out) if p["state"] == "off"]) < n:
                assert time.monotonic() < end, "the processes did not register"
                time.sleep(0.05)
            ctl = RunControl(out)
            res: dict[str, list[float]] = {"load": [os.getloadavg()[0]]}
            for what in ("start", "stop", "start", "stop"):
                t = time.monotonic()
                gen = ctl.start(["runtime"], []) if what == "start" else ctl.stop()
                left = ctl.wait(BOUND_S, gen)
                assert not left, f"{len(left)} processes did not acknowledge"
                res.setdefault(what, []).append(time.monotonic() - t)
            return {
                "ranks": n,
                "start_s": max(res["start"]),
                "stop_s": max(res["stop"]),
                "load": res["load"][0],
            }
        finally:
            for p in procs:
                p.kill()
            for p in procs:
                p.wait()


def metadata_load(ranks: int = 4096) -> dict:
    from mspti_lens.runs import control

    polls = ranks / control.POLL_S
    beats = ranks / control.HEARTBEAT_S
    return {"ranks": ranks, "stat_per_s": polls, "renames_per_s": beats}


def run(quick: bool, log) -> dict:
    cfg = QUICK if quick else FULL
    c = cost(quick, log)
    threads = threads_cost(quick, log)
    acks = [ack_latency(n, log) for n in cfg["ranks"]]
    return {"quick": quick, "cost": c, "threads": threads, "acks": acks, "mds": metadata_load()}


def _pct(a: float, b: float) -> float:
    return 100.0 * (a - b) / b


def render(res: dict) -> list[str]:
    from mspti_lens.runs import control

    m = res["cost"]["median"]
    sp = res["cost"]["spread"]
    paused = _pct(m["paused"], m["none"])
    noise = res["cost"]["noise_pct"]
    L = ["## On-demand control: cost while off, time to acknowledge (bench/control.py)", ""]
    L.append(
        f"One workload, simulated `aclrtLaunchKernel` calls from a Python loop ({BATCH:,} per batch), "
        f"processes alternated in one run ({res['cost']['batches']['none']} batches each); CPU ns per call "
        "(the process's CPU time, all its threads, the hook's included: on a shared machine wall time "
        "measures the neighbours), median. 'paused', 'on' and 'after stop' are one process: under "
        "the hook with profiling off, "
        "then `control start` (runtime), then `control stop`."
    )
    L += [
        "",
        "| configuration | ns/call (median) | spread | vs no hook | vs paused |",
        "|---|---:|---:|---:|---:|",
    ]
    for k, label in (("none", "no hook"), ("paused", "paused (before the first start)"), ("on", "on"),
                     ("after", "after stop")):  # fmt: skip
        L.append(
            f"| {label} | {m[k]:.1f} | {sp[k][0]:.1f} .. {sp[k][1]:.1f} | {_pct(m[k], m['none']):+.2f} % | "
            f"{_pct(m[k], m['paused']):+.2f} % |"
        )
    facts = res["cost"]["facts"]

    def fact(phase: str, key: str) -> list:
        return [f[phase][key] for f in facts]

    before_us = statistics.median(fact("before_facts", "hook_us_per_s"))
    after_us = statistics.median(fact("after_facts", "hook_us_per_s"))
    subscribed_after = any(fact("after_facts", "subscribed"))

    def per_thread(span: str) -> dict[str, float]:
        """Each thread name's µs/s, median over the processes (0 in a process without it)."""
        names = {n for f in facts for n in f[span]}
        return {n: statistics.median(f[span].get(n, 0.0) for f in facts) for n in names}

    paused_t, after_t = per_thread("paused_threads"), per_thread("after_threads")
    paused_all = statistics.median(sum(f["paused_threads"].values()) for f in facts)
    after_all = statistics.median(sum(f["after_threads"].values()) for f in facts)
    new_busy = {n: v for n, v in after_t.items() if n not in paused_t and v > LINGER_SLACK_US}
    # A profiler that lingers keeps its subscriber, or keeps threads busy once the stop settled.
    lingers = (
        subscribed_after
        or not all(fact("on_facts", "subscribed"))
        or after_all > LINGER_RATIO * paused_all + LINGER_SLACK_US
        or bool(new_busy)
    )
    added: dict[str, int] = {}
    for f in facts:
        for name, n in f["after_facts"]["threads"].items():
            extra = n - f["before_facts"]["threads"].get(name, 0)
            if extra > 0:
                added[name] = max(added.get(name, 0), extra)

    def shown(t: dict[str, float]) -> str:
        busy = sorted(((v, n) for n, v in t.items() if v >= 1.0), reverse=True)
        return ", ".join(f"{n} {v:.0f}" for v, n in busy) or "none above 1"

    span = res["cost"].get("linger_s", 0.0)
    linger = (
        "MSPTI subscriber after the stop: "
        + ("YES" if subscribed_after else "none (as before the first start)")
        + "; threads the process has after the stop and had not before: "
        + (", ".join(f"{n} x{k}" for n, k in sorted(added.items())) or "none")
        + " (the idle thread pools of polars, Arrow's Parquet writer and jemalloc, started by writing "
        "the period's windows). CPU of every thread but the workload's, per thread (µs/s, median "
        f"over the processes; /proc schedstat), over {span:g} s while paused before the first start: "
        f"{shown(paused_t)} (all: {paused_all:.0f}); over {span:g} s from {SETTLE_S:g} s after the "
        f"stop's acknowledgement: {shown(after_t)} (all: {after_all:.0f}). Lingering would be more "
        f"than {LINGER_RATIO:g} x the paused level + {LINGER_SLACK_US:.0f} µs/s, or a new thread "
        f"above {LINGER_SLACK_US:.0f} µs/s: "
        + ("LINGERS" if lingers else "met, nothing lingers")
        + f". (Over the CPU-per-call phase right after the acknowledgement, under a second and so "
        f"swinging with the control thread's {control.POLL_S:g} s poll and the writer's last tick "
        f"after the final window, the hook's threads used {after_us:.0f} µs/s against "
        f"{before_us:.0f} µs/s before the first start)"
    )
    th = res["threads"]
    hook_ns = sum(th["threads"].values())
    share = 100.0 * hook_ns / th["workload_ns"]
    within = abs(paused) <= noise
    ok = share <= GOAL_PAUSED_PCT and within
    per_thread = ", ".join(f"{k} {v / th['wall_s'] / 1e3:.1f} µs/s" for k, v in sorted(th["threads"].items()))
    L += [
        "",
        f"Paused against no hook, by process: {paused:+.2f} % (the medians of the "
        f"{res['cost']['processes']} no-hook processes lie {noise:.2f} % apart, so a difference "
        "below that is not a measurement of the hook). Measured directly instead: in a paused "
        f"process running this workload for {th['wall_s']:.1f} s, the hook's threads used "
        f"{hook_ns / 1e6:.2f} ms of CPU ({per_thread}) against the workload thread's "
        f"{th['workload_ns'] / 1e9:.2f} s: **{share:.4f} %** of the workload's CPU. With no "
        "subscriber nothing of mspti-lens runs on the program's own threads, so this is the "
        f"paused cost. Goal (at most {GOAL_PAUSED_PCT} %, and the process comparison within its "
        "noise): "
        + ("met" if ok else "MISSED")
        + "."
        + f" After stop against before the first start: {_pct(m['after'], m['paused']):+.2f} % by "
        "CPU per call (one process, phases in sequence, so machine load that changes between them "
        f"shows too); what would linger, checked in each of the {len(facts)} processes: {linger}. "
        "On against paused is the "
        f"callback's cost per call, here {m['on'] - m['paused']:.0f} ns on the simulator's dispatch "
        f"(status and the run panel estimate cost as calls/s x {control.COST_PER_CALL_NS:.0f} ns, "
        "section 1's added ns per pair).",
        "",
        "Time from a command to the last process's acknowledgement (N paused processes, each only "
        "sleeping under the hook; `start` subscribes a Session in each, `stop` closes it; worst of two):",
        "",
        "| processes | start | stop | machine load (1 min) | goal |",
        "|---:|---:|---:|---:|---|",
    ]
    for a in res["acks"]:
        goal = ""
        if a["ranks"] == 128:
            goal = ("met" if max(a["start_s"], a["stop_s"]) <= GOAL_ACK_S else "MISSED") + " (<= 1 s)"
        load = f"{a['load']:.0f}" if "load" in a else "?"
        L.append(f"| {a['ranks']} | {a['start_s']:.2f} s | {a['stop_s']:.2f} s | {load} | {goal} |")
    d = res["mds"]
    L += [
        "",
        f"Metadata-server load for {d['ranks']:,} ranks, from the design: each process stat()s "
        f"the `control/issued/` folder every {control.POLL_S:g} s, {d['stat_per_s']:,.0f} stat/s at "
        "most (a client that caches attributes, NFS's actimeo or Lustre's lock-protected attributes, "
        "answers an unchanged folder locally: the server then sees a lookup per cache timeout and "
        "one revalidation per command); the folder is listed only when its modification time "
        f"changes, and every {control.HEARTBEAT_S:g} s whatever it says "
        f"({d['renames_per_s']:,.0f} listings/s), and each new command file is read once by each "
        "process. Heartbeats: one utime (the process file's mtime) per process every "
        f"{control.HEARTBEAT_S:g} s, {d['renames_per_s']:,.0f}/s, plus one rename per window written "
        "while on and per change of state. Caveat: NFS's "
        "attribute cache (3 s by default) delays a command by up to that long; mount the run "
        "directory with a short actimeo for the 1 s goal.",
    ]
    if res["quick"]:
        L += ["", "(quick mode: one round, 4 processes; the full run measures 8, 32 and 128)"]
    return L + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", nargs=3, metavar=("MODE", "BATCHES", "LINGER_S"), help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=float, metavar="SECONDS", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.threads:
        print(json.dumps(hook_threads(a.threads)))
        return
    if a.child:
        print(json.dumps(child(a.child[0], int(a.child[1]), float(a.child[2]))))
        return
    res = run(a.quick, log=lambda m: print(f"[bench] {m}", file=sys.stderr, flush=True))
    text = "\n".join(render(res))
    if a.out:
        Path(a.out).write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
