"""Arrival skew per collective instance: exact on known arrivals (one rank a known time late),
ties and the clock error name nobody, and a recorded simulated job names its late rank, from its
device records and from the Callback API alone."""

from __future__ import annotations

import subprocess
import sys

import polars as pl
import pytest
from test_runs_job_on_the_simulator import STEPS, WATCHDOG_S, record

import mspti_lens
from mspti_lens.collectives import run_by_size
from mspti_lens.runs.skew import MAX_SLEW_PPM, NO_COLLECTIVES, bridge_error_ns, lagging, skew
from mspti_lens.sim import job

LATE_NS = 7_000


def events(late_rank: int, late_ns: int, n: int = 4, instances: int = 3, hosts: int = 1) -> pl.DataFrame:
    rows = []
    for seq in range(instances):
        for r in range(n):
            start = 1_000_000 * seq + 10 * r + (late_ns if r == late_rank else 0)
            rows.append(
                {"host": f"h{r * hosts // n}", "rank": r, "group": "world", "name": "hcom_allReduce_",
                 "sequence": seq, "start_ns": start, "end_ns": 1_000_000 * seq + 500_000}
            )  # fmt: skip
    return pl.DataFrame(rows, schema_overrides={"sequence": pl.UInt64})


def test_a_rank_a_known_time_late_gives_that_spread_rank_and_wait_exactly():
    s = skew(events(late_rank=2, late_ns=LATE_NS))
    assert s["seq"].to_list() == [0, 1, 2] and (s["op"] == "hcom_allReduce_").all()
    assert (s["last_rank"] == 2).all() and s["note"].is_null().all()
    # Ranks 0, 1, 3 start at 0, 10, 30 ns; rank 2 at 20 + LATE_NS.
    assert (s["spread_ns"] == 20 + LATE_NS).all()
    assert (s["wait_ns"] == sum(20 + LATE_NS - x for x in (0, 10, 30))).all()


def test_within_the_clock_error_or_a_tie_no_rank_is_named():
    s = skew(events(late_rank=1, late_ns=LATE_NS, hosts=2), clock_error=LATE_NS + 100)
    assert s["last_rank"].is_null().all() and s["note"].str.contains("clock error").all()
    tie = events(late_rank=0, late_ns=0).with_columns(pl.lit(5).cast(pl.Int64).alias("start_ns"))
    t = skew(tie)
    assert t["last_rank"].is_null().all() and (t["note"] == "ranks tie for last").all()
    # An instance missing on a rank has no row; point-to-point ops are left out.
    ev = events(late_rank=1, late_ns=LATE_NS)
    partial = ev.filter(~((pl.col("sequence") == 2) & (pl.col("rank") == 3)))
    assert skew(partial)["seq"].to_list() == [0, 1]
    assert skew(ev.with_columns(pl.lit("hcom_send_").alias("name"))).height == 0


class _Run:
    def __init__(self, ev: pl.DataFrame):
        self.ev = ev

    def collective_events(self) -> pl.DataFrame:
        return self.ev

    def skew(self) -> pl.DataFrame:
        return skew(self.ev)


def test_the_live_verdict_names_the_rank_that_starts_lagging_among_the_latest_instances():
    early = events(late_rank=1, late_ns=LATE_NS, instances=40)
    late = events(late_rank=3, late_ns=2 * LATE_NS, instances=4).with_columns(
        pl.col("sequence") + 40, pl.col("start_ns") + 40_000_000
    )
    v = lagging(_Run(pl.concat([early, late])), recent=4)
    assert v["rank"] == 3 and v["last_count"] == 4
    assert v["wait_ns"] == 4 * sum(30 + 2 * LATE_NS - x for x in (0, 10, 20))
    assert "rank 3 (h0) arrives last most often" in v["sentence"]
    assert lagging(_Run(early.clear()))["sentence"] == NO_COLLECTIVES


@pytest.mark.slow
def test_a_recorded_job_with_a_rank_a_known_time_late_gives_that_skew_exactly(tmp_path):
    out = tmp_path / "late-rank-1"
    record(out, "--ranks", "2", "--hosts", "2", "--slow-rank", "1", "--late-ns", str(LATE_NS), "--payload")
    run = mspti_lens.open_run(out)
    s = run.skew().filter(pl.col("op") == "hcom_allReduce_")
    assert s["seq"].to_list() == list(range(STEPS)) and (s["last_rank"] == 1).all()
    host = run.collective_events().filter(pl.col("rank") == 1)["host"][0]
    assert (s["last_host"] == host).all() and s["note"].is_null().all()  # simulated hosts: error 0
    assert (s["spread_ns"] == LATE_NS).all() and (s["wait_ns"] == LATE_NS).all()
    v = lagging(run)
    assert v["rank"] == 1 and v["wait_ns"] == LATE_NS * STEPS
    assert (s["basis"] == "device").all()
    # nccl-tests' table over the job: the rank count is the ranks seen in each communicator, the
    # bytes the job's payload (count x fp32; --payload), the device time the late rank's own transfer on it
    # and that plus the wait on the other: their median is the transfer plus half the lateness.
    t = run_by_size(run).filter(pl.col("op") == "all_reduce").row(0, named=True)
    assert (t["ranks"], t["num_calls"], t["data_type"]) == (2, 2 * STEPS, "fp32")
    assert t["bytes"] == job.ALLREDUCE_COUNT * 4
    d = run.device_events(("communication",)).filter(pl.col("name") == "hcom_allReduce_")
    own = d.filter(pl.col("rank") == 1)["duration_ns"]
    waits = d.filter(pl.col("rank") == 0)["duration_ns"]
    assert own.n_unique() == 1 and (waits == own[0] + LATE_NS).all()
    assert t["med_ns"] == own[0] + LATE_NS / 2
    # algbw is each collective's bytes / its time, and the table gives their median.
    alg = (t["bytes"] / own[0] + t["bytes"] / (own[0] + LATE_NS)) / 2
    assert t["algbw_gbps"] == pytest.approx(alg, rel=1e-12)
    assert t["busbw_gbps"] == t["algbw_gbps"] * 2 * (2 - 1) / 2  # nccl-tests: 2(n-1)/n, n = 2
    halo = run_by_size(run).filter(pl.col("op") == "batch_send_recv").row(0, named=True)
    assert (halo["bytes"], halo["data_type"]) == (job.HALO_COUNT * 2, "fp16")


def record_callbacks_only(out, *job_args: str) -> None:
    """`record` a simulated job with the Callback API alone (no activity records)."""
    cmd = [
        sys.executable, "-m", "mspti_lens", "record", "--out", str(out), "--interval", "5",
        "--library", "sim", "--clock", "mspti", "--activity", "none", "--",
        sys.executable, "-m", job.RANK_MODULE, "job", "--steps", str(STEPS), *job_args,
    ]  # fmt: skip
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=WATCHDOG_S)
    assert p.returncode == 0, p.stderr


@pytest.mark.slow
def test_with_callbacks_alone_a_rank_a_known_time_late_gives_that_skew_exactly(tmp_path):
    out = tmp_path / "late-rank-1-callbacks"
    record_callbacks_only(out, "--ranks", "2", "--hosts", "2", "--slow-rank", "1", "--late-ns", str(LATE_NS))
    run = mspti_lens.open_run(out)
    assert run.collective_events().height == 0  # no device records: the ENTERs are the basis
    s = run.skew().filter(pl.col("op") == "HcclAllReduce")
    assert s["seq"].to_list() == list(range(STEPS)) and (s["basis"] == "callbacks").all()
    assert s["group"].is_null().all() and (s["ranks"] == 2).all()
    # The late rank enters each all-reduce exactly LATE_NS after the other, on the virtual clock.
    assert (s["last_rank"] == 1).all() and s["note"].is_null().all()
    assert (s["spread_ns"] == LATE_NS).all() and (s["wait_ns"] == LATE_NS).all()
    host = run.collective_arrivals().filter(pl.col("rank") == 1)["host"][0]
    assert (s["last_host"] == host).all()
    v = lagging(run)
    assert v["rank"] == 1 and v["wait_ns"] == LATE_NS * STEPS
    assert run.files()["arrivals_dropped"].sum() == 0


def test_enter_times_bridged_from_another_clock_widen_the_bound_by_the_slew_over_a_window():
    files = pl.DataFrame({"simulated": [False, False], "clock": ["mspti", "tsc"], "interval_s": [5.0, 2.0]})
    assert bridge_error_ns(files) == 2 * 1e9 * MAX_SLEW_PPM / 1e6
    assert bridge_error_ns(files.filter(pl.col("clock") == "mspti")) == 0
    with pytest.raises(ValueError, match="device, callbacks"):
        skew(events(1, LATE_NS), basis="cb")


def test_the_distribution_per_op_counts_every_instance():
    from mspti_lens.runs.skew import by_op

    d = by_op(skew(events(late_rank=2, late_ns=LATE_NS, instances=5))).row(0, named=True)
    assert (d["instances"], d["spread_med_ns"], d["spread_max_ns"], d["last_rank_mode"]) == (
        5, 20 + LATE_NS, 20 + LATE_NS, 2
    )  # fmt: skip
    assert d["wait_total_ns"] == 5 * sum(20 + LATE_NS - x for x in (0, 10, 30))
    assert by_op(skew(events(0, 0).clear())).height == 0
