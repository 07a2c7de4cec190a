"""Stragglers per collective instance: msprof-analyze's rule (the abnormally SHORT collective
arrived last) and HTA's (the latest device start), over device event frames built by hand in the
device-event-log schema; instances missing on a rank, a rank's own numbers aligned by time,
intervals that do not overlap, the per-rank tally, and the per-window fallback that says how to
get per-instance votes."""

from __future__ import annotations

import os

import polars as pl
import pytest

from mspti_lens.runs import stragglers
from mspti_lens.runs.run import INSTANCE_EVENT_SCHEMA
from mspti_lens.runs.stragglers import BASIS_EVENTS, BASIS_WINDOWS, INSTANCE_COLUMNS

RANKS = 4
LATE = 2
TRANSFER = 15_000
WAIT = 500_000
PERIOD = 10_000_000  # instances far apart: every instance's intervals overlap only its own


def collective_rows(
    instances: int = 5, late: int = LATE, group: str = "hccl_world_group", name: str = "HcclAllReduce"
) -> list[dict]:
    """Rank `late` arrives WAIT after the others at every instance; a collective ends TRANSFER
    after the last start on every rank (HCCL's device-side wait)."""
    rows = []
    for s in range(instances):
        base = s * PERIOD
        last = base + WAIT
        for r in range(RANKS):
            start = last if r == late else base + 1_000 * r + 37 * s  # small spread among the early
            rows.append(
                {
                    "host": "h0" if r < 2 else "h1",
                    "rank": r,
                    "kind": "communication",
                    "group": group,
                    "name": name,
                    "sequence": s,
                    "start_ns": start,
                    "end_ns": last + TRANSFER,
                }
            )
    return rows


def frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=INSTANCE_EVENT_SCHEMA)


def test_both_rules_name_the_late_rank_for_every_instance():
    v = stragglers.instance_votes(frame(collective_rows()))
    assert v.schema == pl.Schema(INSTANCE_COLUMNS)
    assert v["instance"].to_list() == [0, 1, 2, 3, 4]
    assert (v["slow_rank"] == LATE).all() and (v["slow_host"] == "h1").all()
    assert (v["late_rank"] == LATE).all() and (v["late_host"] == "h1").all()
    assert (v["slow_ns"] == TRANSFER).all()
    assert (v["test"] == "dixon").all() and (v["statistic"] > v["critical"]).all()
    # The late start leads the next-latest (rank 3, 3_000 + 37 s after the instance's base) by:
    assert v["late_by_ns"].to_list() == [WAIT - 3_000 - 37 * s for s in range(5)]
    assert (v["ranks"] == RANKS).all() and (v["group_ranks"] == RANKS).all()
    assert (v["basis"] == BASIS_EVENTS).all() and v["note"].is_null().all()
    t = stragglers.tally(v)
    assert t.rows() == [("h1", LATE, 5, 5, 5)]


def test_an_instance_missing_on_a_rank_gets_no_vote_and_names_the_rank():
    rows = [r for r in collective_rows() if not (r["rank"] == 1 and r["sequence"] == 3)]
    v = stragglers.instance_votes(frame(rows))
    gone = v.filter(pl.col("instance") == 3).row(0, named=True)
    assert (gone["ranks"], gone["group_ranks"]) == (3, 4)
    assert gone["slow_rank"] is None and gone["late_rank"] is None
    assert gone["note"] == "missing on rank 1 (h0)"
    rest = v.filter(pl.col("instance") != 3)
    assert (rest["slow_rank"] == LATE).all() and (rest["late_rank"] == LATE).all()
    assert stragglers.tally(v).rows() == [("h1", LATE, 4, 4, 4)]


def test_a_rank_that_numbers_its_collectives_from_another_start_is_aligned_by_time():
    # Rank 3 turned on one collective late (its own k is everyone else's k + 1): its intervals
    # overlap the others' instance k + 1, so that is the instance its k joins.
    rows = [dict(r, sequence=r["sequence"] - 1) for r in collective_rows(instances=4) if r["rank"] == 3]
    rows = [r for r in collective_rows(instances=4) if r["rank"] != 3] + [
        r for r in rows if r["sequence"] >= 0
    ]
    v = stragglers.instance_votes(frame(rows))
    assert v["instance"].to_list() == [0, 1, 2, 3]
    assert v.filter(pl.col("instance") == 0)["note"].item() == "missing on rank 3 (h1)"
    voted = v.filter(pl.col("instance") > 0)
    assert voted["note"].is_null().all() and (voted["late_rank"] == LATE).all()
    assert stragglers.tally(v).rows() == [("h1", LATE, 3, 3, 3)]


def test_an_instance_whose_intervals_do_not_overlap_gets_no_vote():
    # Rank 3's instance 2 lies half a PERIOD away from the others' (a clock step, say): no real
    # instance allows that (no rank ends it before every rank has started it).
    rows = collective_rows(instances=4)
    for r in rows:
        if r["rank"] == 3 and r["sequence"] == 2:
            r["start_ns"] += PERIOD // 2
            r["end_ns"] += PERIOD // 2
    v = stragglers.instance_votes(frame(rows))
    assert v["instance"].to_list() == [0, 1, 2, 3]
    assert v.filter(pl.col("instance") == 2)["note"].item().startswith("sequences do not line up")
    rest = v.filter(pl.col("instance") != 2)
    assert rest["note"].is_null().all() and (rest["late_rank"] == LATE).all()
    assert stragglers.tally(v).rows() == [("h1", LATE, 3, 3, 3)]


def test_groups_are_matched_apart_and_point_to_point_is_left_out():
    world = collective_rows(instances=3, late=1)
    other = collective_rows(instances=3, late=3, group="tp_group", name="HcclAllGather")
    p2p = [dict(r, name="HcclBatchSendRecv", group="hccl_pair_0_1") for r in collective_rows(2)]
    v = stragglers.instance_votes(frame(world + other + p2p))
    assert v.select("group", "name").unique().sort("group").rows() == [
        ("hccl_world_group", "HcclAllReduce"),
        ("tp_group", "HcclAllGather"),
    ]
    assert v.filter(pl.col("group") == "tp_group")["slow_rank"].to_list() == [3, 3, 3]
    assert v.filter(pl.col("group") == "hccl_world_group")["late_rank"].to_list() == [1, 1, 1]
    t = stragglers.tally(v)
    assert t.select("rank", "slow_affect_count", "late_count", "instances").rows() == [
        (1, 3, 3, 6),
        (3, 3, 3, 6),
    ]


def test_a_balanced_instance_has_no_slow_rank_and_a_tie_for_last_no_late_rank():
    rows = [
        {"host": "h", "rank": r, "kind": "communication", "group": "g", "name": "HcclAllReduce",
         "sequence": 0, "start_ns": 1_000 if r < 2 else 900, "end_ns": 2_000 + r}
        for r in range(RANKS)
    ]  # fmt: skip
    v = stragglers.instance_votes(frame(rows)).row(0, named=True)
    assert v["test"] == "dixon" and v["slow_rank"] is None
    assert v["late_rank"] is None and v["late_by_ns"] is None
    assert stragglers.tally(stragglers.instance_votes(frame(rows))).height == 0


def test_the_window_fallback_says_how_to_get_per_instance_votes():
    per_rank = pl.DataFrame(
        {
            "host": ["h"] * 8,
            "rank": [0, 1, 2, 3] * 2,
            "name": ["HcclAllReduce"] * 8,
            "instance": [1] * 4 + [2] * 4,
            "num_calls": [5] * 8,
            "mean_ns": [800.0, 810.0, 300.0, 805.0] * 2,
        }
    )
    v = stragglers.window_votes(per_rank)
    assert v.schema == pl.Schema(INSTANCE_COLUMNS)
    assert v["slow_rank"].to_list() == [2, 2] and v["late_rank"].is_null().all()
    assert (v["basis"] == BASIS_WINDOWS).all() and "--activity communication" in BASIS_WINDOWS
    assert stragglers.tally(v).rows() == [("h", 2, 2, 0, 2)]


@pytest.mark.parametrize("n", [3, 8, 30, 150])
def test_the_late_rank_is_named_at_every_rank_count(n):
    # Dixon's variants (r10, r11, r21, r22) up to 100 ranks, 3 sigma above.
    rows = []
    for r in range(n):
        start = 500_000 if r == n - 1 else 10 * r
        rows.append(
            {"host": "h", "rank": r, "kind": "communication", "group": "g", "name": "HcclAllReduce",
             "sequence": 0, "start_ns": start, "end_ns": 515_000 + 3 * r}
        )  # fmt: skip
    v = stragglers.instance_votes(frame(rows)).row(0, named=True)
    assert (v["slow_rank"], v["late_rank"]) == (n - 1, n - 1)
    assert v["test"] == ("dixon" if n <= 100 else "3sigma")


class _StandInSnapshot:
    """What WindowWriter uses of a Snapshot, with a device event log of the contract's columns."""

    def __init__(self, events: pl.DataFrame):
        self.meta: dict = {}
        self._events = events

    def __len__(self) -> int:
        return 1

    def with_meta(self, **facts) -> _StandInSnapshot:
        out = _StandInSnapshot(self._events)
        out.meta = {**self.meta, **facts}
        return out

    def summary(self) -> pl.DataFrame:
        return pl.DataFrame({"name": ["HcclAllReduce"], "num_calls": [5], "total_ns": [100]})

    def device_events(self) -> pl.DataFrame:
        return self._events

    def save(self, path, *, event_log: bool = True) -> None:
        assert not event_log  # the writer keeps the log in the events file only
        pl.DataFrame({"x": [1]}).write_parquet(path)


class _StandInSession:
    def __init__(self, events: pl.DataFrame):
        self.events = events

    def reset(self) -> _StandInSnapshot:
        return _StandInSnapshot(self.events)

    def close(self) -> None:
        pass


def test_the_writer_puts_each_windows_device_events_beside_it_atomically_on_a_stand_in(tmp_path):
    from mspti_lens import _native
    from mspti_lens.runs import writer

    # The writer takes the process's HCCL arrivals with each window; an earlier test's Session in
    # this worker may have left some in its threads' rings (its run is the last that recorded).
    _native.take_collective_arrivals()
    ev = frame(collective_rows(instances=2)).filter(pl.col("rank") == 1).drop("host", "rank")
    w = writer.WindowWriter(_StandInSession(ev), tmp_path, 60.0, host="hx", rank=(1, "RANK"))
    path = w.write_window(final=False)
    d = tmp_path / "host=hx" / "rank=1"
    assert path == d / writer.window_name(1, os.getpid())
    assert sorted(p.name for p in d.iterdir()) == sorted(
        [path.name, writer.events_name(1, os.getpid())]
    )  # no temporary file left
    back = pl.scan_parquet(str(tmp_path / "host=*/rank=*" / writer.EVENTS_GLOB), hive_partitioning=True)
    got = back.collect()
    assert got["host"].to_list() == ["hx", "hx"] and got["rank"].to_list() == [1, 1]
    assert got.drop("host", "rank").equals(ev)
    # A window without device events writes no events file.
    w.session = _StandInSession(ev.clear())
    w.write_window(final=True)
    assert len(list(d.glob(writer.EVENTS_GLOB))) == 1 and len(list(d.glob(writer.WINDOW_GLOB))) == 2
