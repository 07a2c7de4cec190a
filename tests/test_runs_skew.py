"""Arrival skew per collective instance: exact on known arrivals (one rank a known time late),
ties and the clock error name nobody, and a recorded simulated job names its late rank."""

from __future__ import annotations

import polars as pl
import pytest
from test_runs_job_on_the_simulator import STEPS, record

import mspti_lens
from mspti_lens.collectives import run_by_size
from mspti_lens.runs.skew import NO_COLLECTIVES, lagging, skew

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
    record(out, "--ranks", "2", "--hosts", "2", "--slow-rank", "1", "--late-ns", str(LATE_NS))
    run = mspti_lens.open_run(out)
    s = run.skew().filter(pl.col("op") == "hcom_allReduce_")
    assert s["seq"].to_list() == list(range(STEPS)) and (s["last_rank"] == 1).all()
    host = run.collective_events().filter(pl.col("rank") == 1)["host"][0]
    assert (s["last_host"] == host).all() and s["note"].is_null().all()  # simulated hosts: error 0
    assert (s["spread_ns"] == LATE_NS).all() and (s["wait_ns"] == LATE_NS).all()
    v = lagging(run)
    assert v["rank"] == 1 and v["wait_ns"] == LATE_NS * STEPS
    # nccl-tests' table over the job: the rank count is the ranks seen in each communicator.
    t = run_by_size(run).filter(pl.col("op") == "all_reduce")
    assert (t["ranks"] == 2).all() and t["num_calls"].sum() == 2 * STEPS
    # The job's collectives are modelled without a payload (count 0): no bytes, so no bandwidth.
    assert t["bytes"].is_null().all() and t["algbw_gbps"].is_null().all() and t["busbw_gbps"].is_null().all()


def test_the_distribution_per_op_counts_every_instance():
    from mspti_lens.runs.skew import by_op

    d = by_op(skew(events(late_rank=2, late_ns=LATE_NS, instances=5))).row(0, named=True)
    assert (d["instances"], d["spread_med_ns"], d["spread_max_ns"], d["last_rank_mode"]) == (
        5, 20 + LATE_NS, 20 + LATE_NS, 2
    )  # fmt: skip
    assert d["wait_total_ns"] == 5 * sum(20 + LATE_NS - x for x in (0, 10, 30))
    assert by_op(skew(events(0, 0).clear())).height == 0
