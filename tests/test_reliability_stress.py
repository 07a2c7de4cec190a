"""Reliability under concurrency and load: no count lost or doubled, no crash, bounded memory.

Every scenario runs in a fresh interpreter (this file is its own worker: ``python
tests/test_reliability_stress.py SCENARIO JSON``), so a crash or a deadlock fails the test instead
of killing pytest, and process-wide state (the one MSPTI subscriber, the shards) starts clean.

The accounting is checked against the simulator's own delivery counters (``Simulator.counting``):
every EXIT the simulator delivered to the callback must be in a histogram, counted as unmatched /
dropped / abandoned, in a window that was closed by ``Session.reset()`` (the returned Snapshots are
summed), or in the final window. Figures of a run are written to ``$MSPTI_LENS_FIGURES/*.json``
when that variable names a directory (RELIABILITY.md quotes them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import stress

HERE = Path(__file__).resolve()
ENTER, EXIT = 0, 1


# -------------------------------------------------------------------------------------------------
# Harness: run a scenario of this file in a child interpreter and return its JSON result.


def run_scenario(name: str, timeout: float = 240, **kw) -> dict:
    env = dict(os.environ)
    for k in ("MSPTI_LIBRARY", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "LD_PRELOAD"):
        env.pop(k, None)
    try:
        p = subprocess.run(
            [sys.executable, str(HERE), name, json.dumps(kw)],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"scenario {name} did not finish in {timeout} s (deadlock?)\n{e.stderr}")
    if p.returncode != 0:
        pytest.fail(
            f"scenario {name} exited with {p.returncode} (negative = killed by signal)\n"
            f"stdout:\n{p.stdout[-4000:]}\nstderr:\n{p.stderr[-4000:]}"
        )
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"scenario {name} printed no result\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    out = json.loads(lines[-1][len("RESULT ") :])
    record_figures(name, out)
    return out


def record_figures(name: str, figures: dict) -> None:
    d = os.environ.get("MSPTI_LENS_FIGURES")
    if d:
        Path(d).mkdir(parents=True, exist_ok=True)
        Path(d, f"stress_{name}.json").write_text(json.dumps(figures, indent=1, sort_keys=True))


# -------------------------------------------------------------------------------------------------
# Tests.


@pytest.mark.slow
def test_stress_accounting_closes_exactly_on_the_simulator():
    """12 threads of random nested calls while a controller enables/disables domains and callbacks,
    snapshots, resets and saves (phase A), then 8 fresh threads with snapshots/resets/saves only
    (phase B). Phase A: delivered EXITs == recorded + unmatched + dropped + abandoned over every
    window. Phase B: delivered EXITs == recorded, per callback id, with nothing unmatched."""
    r = run_scenario(
        "stress", threads_a=12, seconds_a=stress(30) / 10, threads_b=8, seconds_b=stress(20) / 10, seed=1234
    )
    a, b = r["phase_a"], r["phase_b"]
    assert a["delivered_exits"] > 10_000, a
    assert a["toggles"] >= 60 and a["resets"] >= 10 and a["saves"] >= 5, a
    assert a["accounted"] == a["delivered_exits"], a
    assert a["late_threads"] == 0 and not r["poisoned"], r
    assert b["delivered_exits"] > 10_000, b
    assert b["recorded"] == b["delivered_exits"], b
    assert b["unmatched"] == 0 and b["dropped"] == 0, b
    assert b["per_cbid_mismatch"] == {}, b
    assert r["snapshot_inconsistencies"] == [], r
    assert r["roundtrip_mismatches"] == [], r


def test_unsubscribe_resubscribe_while_threads_are_inside_callbacks_on_the_simulator():
    """Sessions are created, started, snapshotted and closed in a loop while 8 threads keep making
    calls (so callbacks are running at every unsubscribe). No crash, no poisoning, and afterwards a
    fresh session counts exactly."""
    r = run_scenario("churn", threads=8, cycles=stress(150), seed=7)
    assert r["cycles"] == stress(150)
    assert r["calls_during_churn"] > 1000, r
    assert not r["poisoned"], r
    assert r["final_recorded"] == r["final_delivered"] > 0, r
    assert r["final_unmatched"] == 0, r


def test_threads_that_exit_mid_call_keep_their_counts_on_the_simulator():
    """Threads that end with an ENTER open: their completed calls stay in the counts, and each
    open call is later either in flight or abandoned (when a new thread takes the shard over)."""
    r = run_scenario("midcall", threads=32, calls=100, second_wave=32)
    assert r["recorded_after_first_wave"] == 32 * 100 == r["delivered_after_first_wave"], r
    assert r["recorded_final"] == r["delivered_final"] == 32 * 100 + 32 * 10, r
    assert r["abandoned"] + r["in_flight"] == 32, r
    assert r["unmatched"] == 0, r


def test_thousands_of_short_lived_threads_memory_stays_bounded_on_the_simulator():
    """4000 threads (8 alive at a time) each make 5 calls: every call is counted, shards are
    recycled (their number stays near the number alive at once), and RSS does not grow with the
    number of threads."""
    r = run_scenario("shortlived", threads=4000, concurrent=8, calls=5)
    assert r["recorded"] == r["delivered"] == 4000 * 5, r
    assert r["shards"] <= 40, r
    # After a warm-up of 1000 threads, 3000 more may not grow RSS by more than 8 MiB (a shard per
    # thread would be ~3000 x (73 KiB x 2 keys) = 430 MiB).
    assert r["rss_growth_kib"] < 8 * 1024, r


_FORK: dict = {}


def fork_result() -> dict:
    if not _FORK:
        _FORK.update(run_scenario("fork", threads=4, seconds=1.5))
    return _FORK


def test_fork_of_a_subscribed_process_on_the_simulator():
    """fork() while 4 threads make calls (a DataLoader worker): the child sees the fork flag, cannot
    create, drive or read a Session (SessionError: the inherited data are the parent's), and makes
    calls without crashing or deadlocking; the parent's data is untouched and exact."""
    r = fork_result()
    c = r["child"]
    assert c["forked_flag"] is True, c
    assert c["new_session"].startswith("SessionError"), c
    assert "fork" in c["new_session"], c
    assert c["enable_inherited"].startswith("SessionError"), c
    assert c["snapshot_inherited"].startswith("SessionError") and "fork" in c["snapshot_inherited"], c
    assert c["native_snapshot_inherited"].startswith("SessionError"), c
    assert c["calls_made"] == 1000, c  # callbacks fired into the core in the child without harm
    assert c["close_inherited"] == "ok", c
    p = r["parent"]
    assert p["child_status"] == 0, p
    assert p["forked_flag"] is False, p
    assert p["recorded"] == p["delivered"] > 0, p
    assert p["recorded"] >= p["recorded_before_fork"], p
    assert p["unmatched"] == 0, p
    assert p["calls_after_child"] == 500, p


def test_snapshot_summary_in_a_forked_child_does_not_hang_on_the_simulator():
    """Regression: Session.snapshot() in a forked child used to hand out a Snapshot whose summary()
    hung in polars' thread pool (it does not survive fork()); now it raises SessionError."""
    r = run_scenario("fork_summary", timeout=120)
    assert r["child_status"] == 0, r  # 1 = the child's watchdog fired: it hung for 5 s


def test_forked_child_error_does_not_advise_what_fails_on_the_simulator():
    """Regression: the error used to say 'Create a Session in the child', which raises this same
    error (FORKED is set in every child once any Session existed)."""
    c = fork_result()["child"]
    assert c["new_session"].startswith("SessionError")
    assert "Create a Session in the child" not in c["new_session"], c["new_session"]
    assert "spawn" in c["new_session"], c["new_session"]  # says what works


# -------------------------------------------------------------------------------------------------
# Workers (run in the child interpreter).


def _exits_accounted(snap) -> int:
    c = snap.counters
    return snap.total_calls + c["unmatched"] + c["dropped"] + c["abandoned"] + c["toggled"]


def _named_apis(sim):
    return [a for a in sim.apis if a.name_26x]


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _check_snapshot(snap, problems: list) -> None:
    """A snapshot is internally consistent: bucket counts add up to num_calls per function."""
    import polars as pl

    s = snap.summary()
    if not len(s):
        return
    h = snap.histogram().group_by(["domain", "name"]).agg(pl.col("count").sum())
    j = s.select("domain", "name", "num_calls").join(h, on=["domain", "name"], how="left")
    bad = j.filter(pl.col("count").is_null() | (pl.col("count") != pl.col("num_calls")))
    if len(bad):
        problems.append(bad.to_dicts()[:3])


def scenario_stress(threads_a, seconds_a, threads_b, seconds_b, seed):
    import random
    import tempfile
    import threading

    import mspti_lens
    from mspti_lens import _native, catalog
    from mspti_lens.sim import Simulator

    sim = Simulator()
    sim.reset()
    apis = [a.index for a in _named_apis(sim)]
    targets = ["runtime", "hccl"] + [c.short for c in catalog.enableable()]
    tmp = tempfile.mkdtemp()
    problems: list = []
    roundtrip: list = []
    L = sim.lib

    def worker(i: int, stop: threading.Event, calls: list):
        rng = random.Random(seed * 1000 + i)
        n = 0
        while not stop.is_set():
            outer = [rng.choice(apis) for _ in range(rng.randint(0, 4))]
            for a in outer:
                L.msimFire(a, ENTER)
            for _ in range(rng.randint(1, 3)):
                cnt = rng.randint(20, 1500)
                L.msimCallMany(rng.choice(apis), rng.choice((0, 0, 0, 300)), cnt)
                n += cnt
            for a in reversed(outer):
                L.msimFire(a, EXIT)
            n += len(outer)
            # 12 busy threads on 2 cores would starve the controller: leave it some CPU.
            time.sleep(rng.choice((0.0, 0.0005, 0.002)))
        calls[i] = n

    def run_phase(nthreads, seconds, toggle: bool, session, minimum: dict):
        sim.counting(True)  # zeroes the delivery counters
        windows = [session.reset()]  # the phase starts with a fresh window
        stop = threading.Event()
        calls = [0] * nthreads
        ts = [threading.Thread(target=worker, args=(i, stop, calls)) for i in range(nthreads)]
        for t in ts:
            t.start()
        rng = random.Random(seed)
        stats = {"toggles": 0, "resets": 0, "snapshots": 0, "saves": 0}
        closed = []
        t_end = time.monotonic() + seconds
        # At least `seconds`, and on a slow machine until the controller has done enough.
        while time.monotonic() < t_end or any(stats[k] < v for k, v in minimum.items()):
            if time.monotonic() > t_end + 120:
                raise RuntimeError(f"the controller was starved: {stats}")
            act = rng.random()
            if toggle and act < 0.45:
                what = rng.choice(targets)
                (session.enable if rng.random() < 0.55 else session.disable)(what)
                stats["toggles"] += 1
            elif act < 0.65:
                snap = session.snapshot()
                _check_snapshot(snap, problems)
                stats["snapshots"] += 1
            elif act < 0.85:
                closed.append(session.reset())
                stats["resets"] += 1
            else:
                snap = session.snapshot()
                p = os.path.join(tmp, f"s{stats['saves']}.parquet")
                snap.save(p)
                back = mspti_lens.Snapshot.load(p)
                if not back.summary().drop("time_pct").equals(snap.summary().drop("time_pct")):
                    roundtrip.append(p)
                if back.counters != {k: v for k, v in snap.counters.items()}:
                    roundtrip.append(p + " counters")
                stats["saves"] += 1
            time.sleep(rng.choice((0.0005, 0.002, 0.005)))
        stop.set()
        for t in ts:
            t.join()
        final = session.reset()
        delivered = sim.delivered_total(EXIT)
        per_cbid = {}
        recorded_by_cbid: dict = {}
        ids = {(c.domain_name, c.short): (c.domain, c.cbid) for c in catalog.callbacks()}
        for snap in closed + [final]:
            for row in snap.summary().iter_rows(named=True):
                key = ids[(row["domain"], row["callback"])]
                recorded_by_cbid[key] = recorded_by_cbid.get(key, 0) + row["num_calls"]
        for d in (1, 2):
            for cb in range(1, 64):
                want = sim.delivered(d, cb, EXIT)
                got = recorded_by_cbid.get((d, cb), 0)
                if want != got:
                    per_cbid[f"{d}/{cb}"] = [want, got]
        windows = closed + [final]
        return {
            **stats,
            "threads": nthreads,
            "seconds": seconds,
            "calls_made": sum(calls),
            "delivered_exits": delivered,
            "delivered_enters": sim.delivered_total(ENTER),
            "windows": len(windows),
            "recorded": sum(w.total_calls for w in windows),
            "unmatched": sum(w.counters["unmatched"] for w in windows),
            "dropped": sum(w.counters["dropped"] for w in windows),
            "abandoned": sum(w.counters["abandoned"] for w in windows),
            "stack_full": sum(w.counters["stack_full"] for w in windows),
            "toggled": sum(w.counters["toggled"] for w in windows),
            "accounted": sum(_exits_accounted(w) for w in windows),
            "per_cbid_mismatch": per_cbid,
        }

    s = mspti_lens.Session(library="sim", enable=("runtime", "hccl"))
    s.start()
    late0 = _native.health()["late_threads"]
    a = run_phase(threads_a, seconds_a, True, s, {"toggles": 60, "resets": 10, "saves": 5, "snapshots": 10})
    a["late_threads"] = _native.health()["late_threads"] - late0
    # Phase B: everything enabled again, new threads (they take over phase A's shards, whose ENTER
    # stacks may hold calls whose EXIT was disabled: those are abandoned, not paired).
    s.enable("runtime", "hccl")
    b = run_phase(threads_b, seconds_b, False, s, {"resets": 5, "saves": 3, "snapshots": 10})
    health = _native.health()
    s.close()
    return {
        "phase_a": a,
        "phase_b": b,
        "poisoned": health["poisoned"],
        "snapshot_inconsistencies": problems,
        "roundtrip_mismatches": roundtrip,
    }


def scenario_churn(threads, cycles, seed):
    import random
    import threading

    import mspti_lens
    from mspti_lens import _native
    from mspti_lens.sim import Simulator

    sim = Simulator()
    sim.reset()
    apis = [a.index for a in _named_apis(sim)]
    stop = threading.Event()
    made = [0] * threads

    def worker(i):
        rng = random.Random(seed + i)
        while not stop.is_set():
            a = rng.choice(apis)
            sim.lib.msimFire(a, ENTER)
            sim.lib.msimCallMany(rng.choice(apis), rng.choice((0, 500, 2000)), 20)
            sim.lib.msimFire(a, EXIT)
            made[i] += 21

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    rng = random.Random(seed)
    for k in range(cycles):
        s = mspti_lens.Session(
            library="sim", enable=rng.choice((("runtime", "hccl"), ("LAUNCH",), ("hccl",)))
        )
        s.start()
        time.sleep(rng.choice((0.0, 0.001, 0.003)))
        if k % 3 == 0:
            s.enable("runtime")
        if k % 4 == 0:
            s.snapshot().summary()
        if k % 5 == 0:
            s.stop()
            s.start()
        if k % 2:
            s.close()
        else:
            with s:
                pass
    stop.set()
    for t in ts:
        t.join()
    during = sum(made)
    # A fresh session after all that counts exactly.
    sim.counting(True)
    with mspti_lens.Session(library="sim") as s:

        def clean(i):
            for a in apis[i::4]:
                sim.lib.msimCallMany(a, 0, 50)

        cs = [threading.Thread(target=clean, args=(i,)) for i in range(4)]
        for t in cs:
            t.start()
        for t in cs:
            t.join()
        snap = s.snapshot()
    return {
        "cycles": cycles,
        "threads": threads,
        "calls_during_churn": during,
        "poisoned": _native.health()["poisoned"],
        "final_recorded": snap.total_calls,
        "final_delivered": sim.delivered_total(EXIT),
        "final_unmatched": snap.counters["unmatched"],
    }


def _counting_session():
    """The simulator, reset and counting deliveries, and a started Session on it (child side)."""
    import mspti_lens
    from mspti_lens.sim import Simulator

    sim = Simulator()
    sim.reset()
    sim.counting(True)
    return sim, mspti_lens.Session(library="sim").start()


def scenario_midcall(threads, calls, second_wave):
    import threading

    sim, s = _counting_session()
    L, M = sim.api("aclrtLaunchKernel"), sim.api("aclrtMalloc")

    def leaver():
        sim.lib.msimCallMany(L, 0, calls)
        sim.lib.msimFire(M, ENTER)  # and the thread ends inside aclrtMalloc

    ts = [threading.Thread(target=leaver) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    first = s.snapshot()
    out = {
        "recorded_after_first_wave": first.total_calls,
        "delivered_after_first_wave": sim.delivered_total(EXIT),
    }

    def stayer():
        sim.lib.msimCallMany(L, 0, 10)

    ts = [threading.Thread(target=stayer) for _ in range(second_wave)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    snap = s.snapshot()
    s.close()
    out.update(
        recorded_final=snap.total_calls,
        delivered_final=sim.delivered_total(EXIT),
        abandoned=snap.counters["abandoned"],
        in_flight=snap.counters["in_flight"],
        unmatched=snap.counters["unmatched"],
        shards=snap.counters["threads"],
        threads=threads + second_wave,
    )
    return out


def scenario_shortlived(threads, concurrent, calls):
    import threading

    sim, s = _counting_session()
    L, H = sim.api("aclrtLaunchKernel"), sim.api("HcclAllReduce")

    def short(i, barrier):
        barrier.wait()  # all `concurrent` threads of a group are alive at once
        sim.lib.msimCallMany(L if i % 2 else H, 0, calls)

    def wave(start, n):
        for base in range(start, start + n, concurrent):
            b = threading.Barrier(concurrent)
            ts = [threading.Thread(target=short, args=(base + j, b)) for j in range(concurrent)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()

    warm = threads // 4
    wave(0, warm)
    s.snapshot()
    rss0 = _rss_kib()
    wave(warm, threads - warm)
    snap = s.snapshot()
    rss1 = _rss_kib()
    s.close()
    return {
        "threads": threads,
        "concurrent": concurrent,
        "recorded": snap.total_calls,
        "delivered": sim.delivered_total(EXIT),
        "shards": snap.counters["threads"],
        "rss_kib_after_warmup": rss0,
        "rss_growth_kib": rss1 - rss0,
    }


def scenario_fork(threads, seconds):
    import threading

    import mspti_lens
    from mspti_lens import _native

    sim, s = _counting_session()
    L, H = sim.api("aclrtLaunchKernel"), sim.api("HcclAllReduce")
    stop = threading.Event()

    def hammer(i):
        while not stop.is_set():
            sim.lib.msimCallMany(L if i % 2 else H, 0, 200)

    ts = [threading.Thread(target=hammer, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    time.sleep(seconds / 2)
    before = s.snapshot().total_calls
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only this thread exists here
        child: dict = {}
        try:
            import faulthandler

            faulthandler.dump_traceback_later(30, exit=True)
            os.close(rfd)
            child["forked_flag"] = _native.health()["forked"]
            try:
                mspti_lens.Session(library="sim")
                child["new_session"] = "created"
            except Exception as e:
                child["new_session"] = f"{type(e).__name__}: {e}"
            try:
                s.enable("LAUNCH")
                child["enable_inherited"] = "ok"
            except Exception as e:
                child["enable_inherited"] = f"{type(e).__name__}: {e}"
            # The inherited session's data belong to the parent: reading them is refused too.
            for name, read in (
                ("snapshot_inherited", s.snapshot),
                ("native_snapshot_inherited", s._native.snapshot),
            ):
                try:
                    read()
                    child[name] = "ok"
                except Exception as e:
                    child[name] = f"{type(e).__name__}: {e}"
            sim.lib.msimCallMany(L, 0, 1000)  # callbacks still fire into the core here
            child["calls_made"] = 1000
            try:
                s.close()
                child["close_inherited"] = "ok"
            except Exception as e:
                child["close_inherited"] = f"{type(e).__name__}: {e}"
        except BaseException as e:  # report, never fall back into the parent's code
            child["error"] = repr(e)
        os.write(wfd, json.dumps(child).encode())
        os._exit(0)
    os.close(wfd)
    status = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(st)
            break
        time.sleep(0.01)
    if status is None:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        status = "deadlock: child killed after 60 s"
    with os.fdopen(rfd, "rb") as f:
        raw = f.read()
    child = json.loads(raw) if raw else {}
    time.sleep(seconds / 2)
    stop.set()
    for t in ts:
        t.join()
    sim.lib.msimCallMany(L, 0, 500)
    snap = s.snapshot()
    parent = {
        "child_status": status,
        "forked_flag": _native.health()["forked"],
        "recorded_before_fork": before,
        "recorded": snap.total_calls,
        "delivered": sim.delivered_total(EXIT),
        "unmatched": snap.counters["unmatched"],
    }
    s.reset()
    sim.lib.msimCallMany(L, 0, 500)
    parent["calls_after_child"] = s.snapshot().total_calls
    s.close()
    return {"child": child, "parent": parent, "threads": threads}


def scenario_fork_summary():
    import faulthandler

    import mspti_lens
    from mspti_lens.sim import Simulator

    sim = Simulator()
    sim.reset()
    s = mspti_lens.Session(library="sim")
    s.start()
    sim.call("aclrtLaunchKernel", count=100)
    s.snapshot().summary()  # polars has started its thread pool in the parent
    pid = os.fork()
    if pid == 0:
        faulthandler.dump_traceback_later(5, exit=True)  # a hang exits with status 1
        try:
            s.snapshot().summary()
        except mspti_lens.SessionError:
            pass  # a clear refusal is fine too
        os._exit(0)
    _, st = os.waitpid(pid, 0)
    s.close()
    return {"child_status": os.waitstatus_to_exitcode(st)}


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("error")
    warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*fork.*")
    fn = globals()[f"scenario_{sys.argv[1]}"]
    result = fn(**json.loads(sys.argv[2]))
    print("RESULT " + json.dumps(result), flush=True)
