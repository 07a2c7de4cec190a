"""Skew names a last rank only when its lead over the second-last arrival exceeds the clock error:
a wide spread says nothing about which of the last two came last."""

from __future__ import annotations

import polars as pl

from mspti_lens.runs.skew import CROSS_HOST_CLOCK_ERROR_NS, clock_error_ns, skew

MS = 1_000_000


def instance(starts: dict[tuple[str, int], int], seq: int = 0) -> list[dict]:
    return [
        {"host": h, "rank": r, "group": "world", "name": "hcom_allReduce_", "sequence": seq,
         "start_ns": t, "end_ns": 10 * MS}
        for (h, r), t in starts.items()
    ]  # fmt: skip


def frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema_overrides={"sequence": pl.UInt64})


def test_ranks_on_two_hosts_closer_than_the_clock_error_name_no_last_rank():
    # Rank 0 is 2 ms early; ranks 1 and 2, on two hosts, arrive 0.3 ms apart: the spread (2.3 ms)
    # exceeds the 1 ms bound, but which of ranks 1 and 2 came last cannot be told.
    ev = frame(instance({("a", 0): 0, ("a", 1): 2 * MS, ("b", 2): 2 * MS + 300_000}))
    bound = clock_error_ns(ev)
    assert bound == CROSS_HOST_CLOCK_ERROR_NS == MS
    s = skew(ev, bound)
    assert s["spread_ns"].item() == 2 * MS + 300_000 and s["lead_ns"].item() == 300_000
    assert s["last_rank"].item() is None and s["last_host"].item() is None
    assert "the last two arrivals are within the clock error (1000000 ns)" == s["note"].item()


def test_a_lead_beyond_the_clock_error_names_the_last_rank():
    ev = frame(
        instance({("a", 0): 0, ("a", 1): 300_000, ("b", 2): 300_000 + MS + 1}, seq=0)
        + instance({("a", 0): 20 * MS, ("b", 2): 20 * MS + 300_000, ("a", 1): 22 * MS}, seq=1)
    )
    s = skew(ev, MS).sort("seq")
    assert s["last_rank"].to_list() == [2, 1] and s["last_host"].to_list() == ["b", "a"]
    assert s["lead_ns"].to_list() == [MS + 1, 2 * MS - 300_000] and s["note"].is_null().all()


def test_one_rank_is_never_last_and_says_why():
    s = skew(frame(instance({("a", 0): 5})))
    assert s["last_rank"].item() is None and s["note"].item() == "one rank: none to compare with"
