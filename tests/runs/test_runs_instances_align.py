"""Job-wide instance numbers (runs/instances.py) over event frames built by hand: each rank numbers
its collectives from the start of each of its on periods, as a Session does, and the numbers are
aligned across ranks and periods by time, for device records and for ENTERs alone; the result
does not depend on the order of the rows (a compacted read concatenates files differently)."""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from mspti_lens.runs import stragglers
from mspti_lens.runs.instances import PARTNER_RANKS, align
from mspti_lens.runs.run import INSTANCE_EVENT_SCHEMA
from mspti_lens.runs.skew import skew

INSTANCES = 30
GAP = 1_000_000  # from one instance to the next (host work)
LATE = 2
LATE_NS = 40_000
TRANSFER = 15_000


def history(on: dict[int, list[range]], device: bool = True, late: int = LATE) -> pl.DataFrame:
    """The job runs INSTANCES all-reduces; rank r records those in each range of ``on[r]``, each
    range an on period numbered from 0. Rank ``late`` arrives LATE_NS after the others; each
    collective ends TRANSFER after the last arrival (HCCL's device-side wait)."""
    rows = []
    for rank, periods in on.items():
        for period in periods:
            for own, k in enumerate(period):
                base = k * GAP + 3 * k * k  # uneven spacing: no shift fits by accident
                start = base + (LATE_NS if rank == late else 10 * rank)
                rows.append(
                    {"host": f"h{rank // 2}", "rank": rank, "kind": "communication", "group": "world",
                     "name": "hcom_allReduce_", "sequence": own, "start_ns": start,
                     "end_ns": base + LATE_NS + TRANSFER if device else None}
                )  # fmt: skip
    return pl.DataFrame(rows, schema=INSTANCE_EVENT_SCHEMA)


def true_instances(on: dict[int, list[range]]) -> list[int]:
    """The instances every rank recorded."""
    sets = [set().union(*periods) for periods in on.values()]
    return sorted(set.intersection(*sets))


# Ranks turned on at different moments, off and on again; ranks 0 and 3 on throughout.
STAGGERED = {
    0: [range(0, INSTANCES)],
    1: [range(4, 12), range(15, 30)],
    2: [range(2, 9), range(11, 20), range(24, 28)],
    3: [range(0, INSTANCES)],
}


@pytest.mark.parametrize("device", [True, False], ids=["device", "enters"])
def test_ranks_on_in_different_periods_pair_the_same_instances(device):
    ev = history(STAGGERED, device=device)
    s = skew(ev, basis="device" if device else "callbacks")
    want = true_instances(STAGGERED)
    assert s["seq"].to_list() == want  # the first rank on throughout keeps its own numbers
    assert (s["spread_ns"] == LATE_NS).all() and (s["last_rank"] == LATE).all()
    if device:  # stragglers vote on device records only
        v = stragglers.instance_votes(ev)
        voted = v.filter(pl.col("note").is_null())
        assert voted["instance"].to_list() == want and (voted["late_rank"] == LATE).all()
        assert v.filter(pl.col("note").is_not_null())["note"].str.starts_with("missing on").all()


def test_a_second_on_period_of_every_rank_is_numbered_after_the_first():
    # Every rank off between instances 9 and 20: nothing relates the two halves in time, and
    # each rank's second period restarts at 0; the second half is numbered after the first.
    on = {r: [range(0, 10), range(20, 30)] for r in range(4)}
    s = skew(history(on))
    assert s["seq"].to_list() == list(range(20))
    assert (s["spread_ns"] == LATE_NS).all() and (s["last_rank"] == LATE).all()
    assert s["first_start_ns"].is_sorted()


def test_the_numbers_do_not_depend_on_the_order_of_the_rows():
    ev = history(STAGGERED)
    want = skew(ev)
    for seed in range(3):
        shuffled = ev.sample(fraction=1.0, shuffle=True, seed=seed)
        assert_frame_equal(skew(shuffled), want)
        assert_frame_equal(stragglers.instance_votes(shuffled), stragglers.instance_votes(ev))
    # An event read twice (one file listed under two names) is one event.
    assert_frame_equal(skew(pl.concat([ev, ev.head(40)])), want)


def test_a_rank_late_by_more_than_the_transfer_still_pairs_its_own_instance():
    # The late rank starts long after the others' start and close to their next one; only its
    # interval's overlap with the others' (the wait) says which instance it joined.
    on = {0: [range(0, 20)], 1: [range(3, 20)], 2: [range(0, 20)]}
    rows = history(on, late=1).with_columns(
        pl.when(pl.col("rank") == 1)
        .then(pl.col("start_ns") + GAP - 3 * LATE_NS)
        .otherwise(pl.col("start_ns")),
        pl.col("end_ns") + GAP - 3 * LATE_NS,
    )
    s = skew(rows)
    assert s["seq"].to_list() == list(range(3, 20)) and (s["last_rank"] == 1).all()


def test_segments_are_periods_and_more_ranks_than_partners_are_all_related():
    ranks = 2 * PARTNER_RANKS + 3
    # Two periods each; only ranks 3 and 7 (first periods to 15) meet the even ranks' second
    # periods (from 15), at one instance: that is enough to relate them.
    on = {r: [range(r % 5, 13 + r % 4), range(15 + r % 2, 30)] for r in range(ranks)}
    a = align(history(on))
    assert a.group_by("rank").agg(pl.col("segment").max())["segment"].to_list() == [1] * ranks
    # Every event's instance is its true one, up to one shift for all: the earliest segment's.
    truth = pl.DataFrame(
        [{"rank": r, "start": p.start, "segment": i} for r, ps in on.items() for i, p in enumerate(ps)]
    )
    got = a.join(truth, on=["rank", "segment"]).with_columns(
        (pl.col("instance") - pl.col("sequence").cast(pl.Int64) - pl.col("start")).alias("shift")
    )
    assert got["shift"].n_unique() == 1
    assert skew(history(on))["seq"].to_list() == true_instances(on)


def test_one_event_moved_far_pairs_with_nothing_and_moves_no_other():
    # Back-to-back all-reduces: an instance starts when the last one ends, so a shift by one
    # pairs intervals that touch. Rank 1 turned on at instance 5, and its record of instance 10
    # is 10 ms off (a clock step): after all the others, so it starts a segment of its own.
    n, length, step = 30, LATE_NS + TRANSFER, 10_000_000
    rows = []
    for k in range(n):
        for r in range(3):
            moved = step if (r, k) == (1, 10) else 0
            own = k - 5 if r == 1 else k
            if own >= 0:
                rows.append(
                    {"host": "h", "rank": r, "kind": "communication", "group": "world",
                     "name": "hcom_allReduce_", "sequence": own,
                     "start_ns": k * length + (LATE_NS if r == LATE else 0) + moved,
                     "end_ns": (k + 1) * length + moved}
                )  # fmt: skip
    v = stragglers.instance_votes(pl.DataFrame(rows, schema=INSTANCE_EVENT_SCHEMA))
    voted = v.filter(pl.col("note").is_null())
    assert voted["instance"].to_list() == [k for k in range(5, n) if k != 10]
    assert (voted["late_rank"] == LATE).all()
    assert v.filter(pl.col("instance") == 10)["note"].item() == "missing on rank 1 (h)"
    assert v.filter(pl.col("ranks") == 1).height == 1  # the moved record, alone
