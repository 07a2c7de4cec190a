"""The watcher on recorded simulated jobs (virtual clock): a rank that slows down at a chosen step
fires the rules within two windows and is the rank they name; a steady job of 10 simulated
minutes fires nothing; a rule on the job's merged histogram fires when the merged p99 crosses its
threshold and not before (windows written by hand, with exact durations)."""

from __future__ import annotations

import functools
import json
import math
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from mspti_lens import Session, open_run
from mspti_lens.sim import job
from mspti_lens.watch.evaluate import JOB, Baseline
from mspti_lens.watch.watcher import Watcher

pytestmark = pytest.mark.timeout(300)
WATCHDOG_S = 240
SLOW_RANK, SLOW_STEP, FACTOR = 1, 300, 3.0
RULES = [
    "aclrtLaunchKernel p50 > 2x baseline",
    "skew HcclAllReduce > 3x baseline",
    "HcclAllReduce p99 > 3x baseline across ranks",
    "dropped > 0",
]
# Windows of a quarter second: the baseline is the 2nd to the 4th.
BASELINE = Baseline(skip=1, windows=3)


def record(out: Path, *job_args: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable, "-m", "mspti_lens", "record", "--out", str(out), "--interval", "0.25",
        "--library", "sim", "--clock", "mspti", "--",
        sys.executable, "-m", job.RANK_MODULE, "job", "--ranks", "4", *job_args,
    ]  # fmt: skip
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=WATCHDOG_S)
    assert p.returncode == 0, p.stderr
    return p


@functools.cache
def _slowdown(tmp: str) -> tuple[Path, float]:
    out = Path(tmp) / "slowdown"
    slowdown = f"rank={SLOW_RANK},step={SLOW_STEP},factor={FACTOR:g}"
    p = record(out, "--steps", "450", "--step-delay", "0.01", "--slowdown", slowdown)
    (m,) = [m for line in p.stderr.splitlines() if (m := job.SLOWDOWN_LINE.search(line))]
    assert (int(m.group(1)), int(m.group(3))) == (SLOW_RANK, SLOW_STEP)
    return out, float(m.group(4))


@pytest.fixture(scope="module")
def slowdown(tmp_path_factory) -> tuple[Path, float]:
    return _slowdown(str(tmp_path_factory.mktemp("watch")))


def watched(root: Path, rules=RULES, capture=False) -> Watcher:
    w = Watcher(root, rules, baseline=BASELINE, every=0.05, capture=capture)
    w.run(timeout=60)
    assert w.done()
    return w


def first_window_after(w: Watcher, subject: str, t: float) -> int:
    """The index of the subject's first window that ends after ``t`` (its calls include it)."""
    return min(i for s, i, _, end in w.evaluated if s == subject and end >= t)


@pytest.mark.slow
def test_a_rank_that_slows_down_fires_within_two_windows_and_is_named(slowdown):
    root, slow_at = slowdown
    w = watched(root)
    host = open_run(root).files()["host"][0]
    firing = [t for t in w.transitions if t.after == "firing"]
    launch = [t for t in firing if t.rule.text().startswith("aclrtLaunchKernel")]
    skew = [t for t in firing if t.rule.kind == "skew"]
    # Only the slow rank's launches slowed: its alert alone fires, after the slowdown, naming it.
    assert [t.subject for t in launch] == [f"{host}/{SLOW_RANK}"]
    assert launch[0].ranks == ((host, SLOW_RANK),) and launch[0].at > slow_at
    assert launch[0].value >= 2 * launch[0].baseline
    # Within two windows: its window index is at most two past the rank's window holding the start.
    first_slow = first_window_after(w, f"{host}/{SLOW_RANK}", slow_at)
    assert launch[0].window <= first_slow + 2, (launch[0].window, first_slow)
    # The other ranks wait for it at every all-reduce: skew names it as the rank arriving last.
    assert skew and skew[0].ranks == ((host, SLOW_RANK),) and skew[0].at > slow_at
    assert skew[0].window <= first_window_after(w, JOB, slow_at) + 2, (skew[0].window, w.evaluated)
    # Nothing fired before the slowdown, and nothing was lost.
    assert all(t.at > slow_at for t in firing)
    assert not [t for t in w.transitions if t.rule.kind == "dropped" and t.after != "inactive"]


@pytest.mark.slow
def test_a_steady_job_of_ten_simulated_minutes_fires_nothing(tmp_path):
    # 601 steps of a second of simulated host work each: 10 minutes on the virtual clock from the
    # first step's records to the last's.
    root = tmp_path / "steady"
    record(root, "--steps", "601", "--step-ns", str(10**9), "--step-delay", "0.012")
    w = watched(root, capture=True)
    assert [t for t in w.transitions if t.after in ("pending", "firing")] == []
    assert open_run(root).captures().height == 0
    alerts = w.alerts()
    assert set(alerts["state"]) == {"inactive"}, alerts  # every baseline learnt, nothing held
    ev = open_run(root).device_events().filter(pl.col("rank") == 0)
    assert (ev["end_ns"].max() - ev["start_ns"].min()) >= 600 * 10**9  # SIMULATED time
    assert alerts.filter(subject=JOB).height == 2  # the job's rules were evaluated


# -- the merged histogram, windows written by hand ----------------------------------------------
MS = 1_000_000


def write_windows(root: Path, virtual, plan: list[list[int]]) -> None:
    """plan[k][r]: how many of rank r's 100 HcclAllReduce calls of window k+1 take 10 ms (the
    rest 1 ms). Windows are one second, aligned across ranks; the last is final."""
    t0 = 1_800_000_000.0
    with Session(library="sim", clock="mspti") as s:
        s.start()
        s.reset()
        for k, slow_per_rank in enumerate(plan, 1):
            for rank, slow in enumerate(slow_per_rank):
                virtual.call("HcclAllReduce", 1 * MS, 100 - slow)
                virtual.call("HcclAllReduce", 10 * MS, slow)
                snap = s.reset().with_meta(
                    host="h",
                    rank=rank,
                    interval_s=1.0,
                    window=k,
                    window_start=t0 + k - 1,
                    window_end=t0 + k - 0.01,
                    final=k == len(plan),
                )
                folder = root / "host=h" / f"rank={rank}"
                folder.mkdir(parents=True, exist_ok=True)
                snap.save(folder / f"window-{k:06d}-pid{100 + rank}.parquet", event_log=False)


def merged_p99(slow_per_rank: list[int]) -> int:
    """Nearest rank of 400 calls, counted here: the ceil(0.99 n)-th smallest."""
    n = 100 * len(slow_per_rank)
    fast = n - sum(slow_per_rank)
    return 1 * MS if math.ceil(0.99 * n) <= fast else 10 * MS


def test_a_merged_histogram_rule_fires_when_the_merged_p99_crosses_and_not_before(tmp_path, virtual):
    # Rank 2's own p99 is 10 ms from the start (3 of its 100 calls), but the job's 400 calls
    # cross only when 5 are slow: the job rule waits for the merged p99, twice in a row.
    plan = [[0, 0, 3, 0]] * 3 + [[0, 0, 5, 0], [0, 1, 4, 0], [0, 0, 0, 0]]
    write_windows(tmp_path, virtual, plan)
    expected = [merged_p99(p) > 5 * MS for p in plan]
    assert expected == [False, False, False, True, True, False]
    rules = ["HcclAllReduce p99 > 5ms across ranks", "HcclAllReduce p99 > 5ms"]
    w = Watcher(tmp_path, rules, every=0.05, capture=False)
    w.run(timeout=30)
    job_changes = [(t.window, t.after) for t in w.transitions if t.subject == JOB]
    assert job_changes == [(4, "pending"), (5, "firing"), (6, "resolved")]
    firing = next(t for t in w.transitions if t.subject == JOB and t.after == "firing")
    assert firing.value == pytest.approx(10 * MS, rel=3e-3)
    assert firing.ranks == tuple(("h", r) for r in range(4))  # a job-wide rule implicates every rank
    # The per-rank rule saw rank 2 fire at its second window already.
    assert ("h/2", 2, "firing") in [(t.subject, t.window, t.after) for t in w.transitions]


def test_the_watch_command_says_what_fires_and_refuses_a_bad_rule_before_it_starts(tmp_path, virtual):
    write_windows(tmp_path, virtual, [[0, 0, 0, 0]] * 2 + [[0, 0, 9, 0]] * 2)
    cli = [sys.executable, "-m", "mspti_lens", "watch", str(tmp_path), "--every", "0.05", "--timeout", "60"]
    p = subprocess.run(
        [*cli, "--when", "HcclAllReduce p99 > 5ms across ranks"], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[1] == "  HcclAllReduce p99 > 5ms across ranks for 2 windows"
    said = [" ".join(ln.split()[:2]) if ln.startswith("capture") else ln.split()[0] for ln in lines[2:-1]]
    assert said == ["PENDING", "FIRING", "capture started:", "capture done:"]
    # The capture covers every rank (a job-wide rule); this run has no control to turn on.
    (cap,) = open_run(tmp_path).captures().rows(named=True)
    assert cap["ranks"] == [0, 1, 2, 3] and cap["state"].startswith("done")
    assert "job window 4: 10.0 ms" in lines[3] and "rank 3 (h)" in lines[3]
    bad = subprocess.run(
        [*cli, "--when", "dropped > 0", "--when", "HcclAllReduse p99 > 5ms"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and bad.stdout == ""  # nothing started
    assert bad.stderr.count("\n") == 1 and "did you mean 'HcclAllReduce'?" in bad.stderr


def test_a_run_watches_itself_from_python(tmp_path, virtual):
    write_windows(tmp_path, virtual, [[0, 0, 0, 0]] * 2 + [[9, 0, 0, 0]] * 2)
    w = open_run(tmp_path).watch("HcclAllReduce p99 > 5ms", every=0.05).run(timeout=60)
    assert w.alerts().filter(state="firing")["subject"].to_list() == ["h/0"]
    assert w.history()["after"].to_list() == ["pending", "firing"]
    assert open_run(tmp_path).captures()["ranks"].to_list() == [[0]]  # a capture by default


def test_triggers_per_rule_are_exported_to_prometheus_and_otlp(tmp_path, virtual):
    from prometheus_client import parser

    write_windows(tmp_path, virtual, [[0, 0, 0, 0]] * 2 + [[9, 0, 9, 0]] * 2)
    prom = tmp_path / "watch.prom"
    cli = [sys.executable, "-m", "mspti_lens", "watch", str(tmp_path), "--every", "0.05", "--no-capture"]
    rules = ["--when", "HcclAllReduce p99 > 5ms", "--when", "dropped > 0", "--metrics-file", str(prom)]
    p = subprocess.run([*cli, *rules], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    (family,) = parser.text_string_to_metric_families(prom.read_text())
    counts = {s.labels["rule"]: s.value for s in family.samples}
    assert family.type == "counter" and family.name == "mspti_lens_watch_triggers"
    # Ranks 0 and 2 fired; a rule that never fired is listed at 0.
    assert counts == {"HcclAllReduce p99 > 5ms for 2 windows": 2, "dropped > 0 for 2 windows": 0}
    assert not list(tmp_path.glob("captures"))  # --no-capture
    # OTLP: the same counts as a monotonic cumulative Sum that OpenTelemetry's own protobufs read.
    pytest.importorskip("opentelemetry.proto")
    from google.protobuf import json_format
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    w = Watcher(tmp_path, ["HcclAllReduce p99 > 5ms"], every=0.05, capture=False).run(timeout=60)
    req = json_format.Parse(json.dumps(w.metrics("otlp")), ExportMetricsServiceRequest())
    (metric,) = req.resource_metrics[0].scope_metrics[0].metrics
    assert metric.name == "mspti_lens_watch_triggers_total" and metric.sum.is_monotonic
    (point,) = metric.sum.data_points
    assert (
        point.as_int == 2
        and point.attributes[0].value.string_value == "HcclAllReduce p99 > 5ms for 2 windows"
    )
    with pytest.raises(ValueError, match="valid formats are prometheus, otlp"):
        w.metrics("csv")


def test_a_restarted_watcher_keeps_the_baselines_it_learnt(tmp_path, virtual):
    # Steady, then rank 1 slow from the 6th window on. A watcher learns the baseline (windows 2-4)
    # and is stopped; a new one started after the slowdown would learn the slow windows as normal,
    # but reloads the baseline the first one kept in the run, and fires.
    write_windows(tmp_path, virtual, [[0, 0, 0, 0]] * 5 + [[0, 9, 0, 0]] * 3)
    rule = "HcclAllReduce p99 > 3x baseline"
    first = Watcher(tmp_path, [rule], baseline=BASELINE, every=0.05, capture=False)
    first.windows.poll = functools.partial(_first_windows, first.windows.poll, 5)  # the job so far
    first.poll()
    saved = json.loads((tmp_path / "captures" / "baselines.json").read_text())
    assert set(saved[f"{rule} for 2 windows"]) == {"h/0", "h/1", "h/2", "h/3"}
    assert saved[f"{rule} for 2 windows"]["h/1"] == pytest.approx(1 * MS, rel=3e-3)
    second = Watcher(tmp_path, [rule], baseline=BASELINE, every=0.05, capture=False).run(timeout=60)
    assert [(t.subject, t.after) for t in second.transitions if t.after == "firing"] == [("h/1", "firing")]
    fresh = Watcher(tmp_path, ["HcclAllReduce p99 > 4x baseline"], baseline=BASELINE, capture=False)
    assert fresh.evaluator.baselines() == {}  # another rule learns its own


def _first_windows(poll, n: int):
    """RunWindows.poll as if only each rank's first ``n`` windows were written yet."""
    rank_windows, job_windows = poll()
    return [w for w in rank_windows if w.index <= n], []


def test_a_ranks_next_window_is_looked_for_by_name_once_due(tmp_path, virtual):
    # Between polls the watcher stats only each rank's next window, known in advance (the next
    # number, the same pid, due one interval after the last one's end), so a window is read as
    # soon as it lands; one overdue by more than LAND_PATIENCE_S is left to the polls.
    from mspti_lens.watch.source import LAND_PATIENCE_S, RunWindows

    folder = tmp_path / "host=h" / "rank=0"
    folder.mkdir(parents=True)
    end = 1_800_000_000.0

    def window(k: int, final: bool = False) -> None:
        with Session(library="sim", clock="mspti") as s:
            s.start()
            virtual.call("HcclAllReduce", 1 * MS, 10)
            snap = s.reset().with_meta(
                host="h", rank=0, interval_s=2.0, window=k, final=final,
                window_start=end + 2 * (k - 2), window_end=end + 2 * (k - 1),
            )  # fmt: skip
            snap.save(folder / f"window-{k:06d}-pid77.parquet", event_log=False)

    window(1)
    source = RunWindows(tmp_path)
    assert len(source.poll(now=end)[0]) == 1
    due = end + 2.0
    assert source.due(now=end) == due
    assert not source.landed(now=due - 0.1)  # not due yet: nothing is looked for
    assert not source.landed(now=due + 0.01)  # due, not written yet
    window(2)
    assert not source.landed(now=due - 0.1) and source.landed(now=due + 0.01)
    assert not source.landed(now=due + LAND_PATIENCE_S + 0.01)  # overdue: left to the polls
    assert source.due(now=due + LAND_PATIENCE_S + 0.01) is None
    source.poll(now=due)
    assert source.due(now=due) == due + 2.0
    window(3, final=True)
    source.poll(now=due + 2.0)
    assert source.due(now=due) is None  # an ended rank has no next window
