"""Findings of a notebook audit of the device and run views, checked on the objects themselves:
a mistyped activity kind, the kernel's launcher logo, the stragglers table's order and folding,
and the timeline's coinciding lines. The on-screen findings are in test_browser.py."""

from __future__ import annotations

import pytest


def test_a_mistyped_activity_kind_gets_did_you_mean_in_one_short_line():
    from mspti_lens import Session

    with pytest.raises(ValueError) as e:
        Session(library="sim", enable=[], activity=["kernal"])
    text = str(e.value)
    assert text.startswith("unknown activity kind 'kernal'; did you mean 'kernel'? (valid kinds: kernel, ")
    assert "\n" not in text and len(text) < 200, text


def _votes(slow_ranks: list[int]):
    """instance_votes' rows of one collective whose instance k named rank slow_ranks[k]."""
    import polars as pl

    from mspti_lens.runs.stragglers import BASIS_EVENTS, INSTANCE_COLUMNS

    rows = [
        {"name": "hcom_allReduce_", "instance": k, "slow_host": "h", "slow_rank": r, "late_host": "h",
         "late_rank": r, "late_by_ns": 500_000 + k, "basis": BASIS_EVENTS, "slow_ns": 15_000.0,
         "median_ns": 530_000.0 + k, "test": "dixon", "statistic": 0.97 - k / 1000, "critical": 0.72,
         "group": "world", "ranks": 8, "group_ranks": 8}
        for k, r in enumerate(slow_ranks)
    ]  # fmt: skip
    return pl.DataFrame(rows, schema=INSTANCE_COLUMNS)


def test_the_stragglers_frame_shows_its_verdicts_first():
    from mspti_lens.runs.stragglers import INSTANCE_COLUMNS

    first = list(INSTANCE_COLUMNS)[:9]
    assert {"slow_rank", "late_rank", "late_by_ns", "basis", "note"} <= set(first), first


def test_identical_verdicts_of_consecutive_instances_fold_into_one_row():
    from mspti_lens.runs.stragglers import fold_instances, tally

    votes = _votes([5] * 20)
    folded = fold_instances(votes)
    assert folded.height == 1
    row = folded.row(0, named=True)
    assert (row["instances"], row["num_instances"], row["slow_rank"], row["late_rank"]) == ("0–19", 20, 5, 5)
    assert row["late_by_ns"] == 500_009.5 and row["statistic"] == 0.97 - 19 / 1000  # medians; the weakest
    # a different verdict in the middle splits the run of instances; nothing is lost
    split = fold_instances(_votes([5] * 7 + [3] + [5] * 12))
    assert split["instances"].to_list() == ["0–6", "7", "8–19"]
    assert split["num_instances"].sum() == 20 and split["slow_rank"].to_list() == [5, 3, 5]
    assert tally(votes)["slow_affect_count"].to_list() == [20]  # the votes themselves stay per instance


def test_a_wide_table_scrolls_in_its_own_box_instead_of_being_cut():
    from mspti_lens.notebook.tables import Table

    html = Table(_votes([5, 5])).html()
    assert html.startswith("<div class='mspti-lens-table-box' style='overflow-x:auto")
    assert html.endswith("</table></div>")
