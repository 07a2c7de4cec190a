"""Histogram v2 through the public API: the exponential buckets (OpenTelemetry convention, scale 7),
the range, zero bucket and overflow, exact sums, integer nearest-rank quantiles against exact ones,
merge, the histogram() frame and the snapshot file's format version."""

from __future__ import annotations

import json
import math
import random
from fractions import Fraction

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mspti_lens import Snapshot, _native
from mspti_lens import snapshot as snapmod
from mspti_lens.columns import FILE_COLUMNS

REL = snapmod.MAX_RELATIVE_ERROR
QS = [0.0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.55, 0.75, 0.9, 0.99, 0.999, 1.0]


def exact_rank(q: float, n: int) -> int:
    """The nearest rank with q read as the decimal it was written as: ceil(q*n), at least 1."""
    return max(1, math.ceil(Fraction(repr(q)) * n))


def exact(values: np.ndarray, q: float) -> int:
    return int(np.sort(values)[exact_rank(q, len(values)) - 1])


def native_of(values) -> _native.NativeSnapshot:
    return _native.NativeSnapshot.from_values([int(v) for v in values])


def check(values: np.ndarray) -> None:
    s = native_of(values).stats(QS)
    assert s["count"] == [len(values)]
    assert s["total"] == [int(values.sum())]
    assert s["min"] == [int(values.min())] and s["max"] == [int(values.max())]
    assert s["std"][0] == pytest.approx(np.std(values.astype(np.float64), ddof=1), rel=1e-9, abs=1e-9)
    for i, q in enumerate(QS):
        e, got = exact(values, q), s[f"q{i}"][0]
        assert abs(got - e) <= e * REL + 0.5, (q, e, got)


def in_bucket(v: int, i: int) -> bool:
    """base^i < v <= base^(i+1) with base = 2^(2^-7), in exact integers: 2^i < v^128 <= 2^(i+1)."""
    p = v**128
    lower = p > 2**i if i >= 0 else True
    return lower and p <= 2 ** (i + 1)


def test_the_constants_are_scale_7_with_at_most_half_a_percent_error():
    assert snapmod.SCALE == 7
    base = 2 ** (2**-snapmod.SCALE)
    assert snapmod.MAX_RELATIVE_ERROR == pytest.approx((base - 1) / (base + 1), rel=1e-12)
    assert snapmod.MAX_RELATIVE_ERROR <= 0.005
    assert (snapmod.MIN_INDEX, snapmod.MAX_INDEX) == (-1, 42 * 128 - 1)
    assert snapmod.RANGE_MAX_NS == 2**42 >= 3600 * 10**9  # at least an hour (HCCL times out at 30 min)


def test_bucket_indices_follow_the_opentelemetry_convention_exactly():
    rng = random.Random(5)
    values = [1, 2, 3, 127, 128, 129, 185, 186, 1000, 2**20, 2**20 + 1, 2**42 - 1, 2**42]
    values += [rng.randrange(1, 2**42) for _ in range(300)]
    for i in range(-1, 42 * 128, 37):  # integers either side of many boundaries
        b = int(2 ** (i / 128))
        values += [v for v in (b - 1, b, b + 1, b + 2) if 1 <= v <= 2**42]
    for v in values:
        i = _native.bucket_index(v)
        assert in_bucket(v, i), (v, i)
        lo, hi = _native.bucket_bounds(i)
        assert lo == pytest.approx(2 ** (i / 128), rel=1e-15) and hi == pytest.approx(
            2 ** ((i + 1) / 128), rel=1e-15
        )
    for e in range(43):
        assert _native.bucket_index(2**e) == 128 * e - 1  # powers of two are upper bounds
    assert _native.bucket_index(0) is None  # the zero bucket
    assert _native.bucket_index(2**42 + 1) is None  # overflow
    with pytest.raises(ValueError, match="outside -1..=5375"):
        _native.bucket_bounds(5376)


def test_nearest_ranks_are_integers_not_float_products():
    assert _native.nearest_rank(0.55, 100) == 55  # the f64 product 55.000000000000007 gives 56
    s = native_of(range(1, 101)).stats([0.55, 0.07, 0.0, 1.0])
    assert [s[f"q{i}"][0] for i in range(4)] == [55, 7, 1, 100]
    for n in (1, 2, 7, 100, 1001):
        for q in QS:
            assert _native.nearest_rank(q, n) == exact_rank(q, n), (q, n)


def test_quantiles_of_lognormal_latencies_are_within_the_relative_error():
    rng = np.random.default_rng(1)
    check(np.round(rng.lognormal(np.log(5_000), 0.5, 200_000)).astype(np.int64))


def test_quantiles_of_heavy_tailed_latencies_are_within_the_relative_error():
    rng = np.random.default_rng(2)
    # Pareto tail (alpha 1.1) from 1 µs, spanning many decades; plus a rare second mode.
    body = 1_000 * (1 + rng.pareto(1.1, 100_000))
    tail = rng.lognormal(np.log(3e9), 1.0, 500)
    check(np.round(np.clip(np.concatenate([body, tail]), 1, 1e12)).astype(np.int64))


def test_quantiles_of_durations_up_to_128_ns_are_exact():
    rng = np.random.default_rng(3)
    values = rng.integers(0, 129, 10_000)
    s = native_of(values).stats(QS)
    for i, q in enumerate(QS):
        assert s[f"q{i}"][0] == exact(values, q)


def test_a_hung_collective_of_an_hour_lands_in_a_bucket():
    hour = 3600 * 10**9
    s = native_of([hour, 2 * hour // 3, 1000]).stats([0.5, 0.9])
    assert s["overflow"] == [0]
    assert abs(s["q0"][0] - 2 * hour // 3) <= 2 * hour // 3 * REL


def test_quantiles_beyond_the_range_are_null_and_flagged_never_invented():
    beyond = 2**42 + 10**9
    vals = [400 * 10**9, beyond, beyond + 1, beyond + 2, beyond + 3]
    snap = Snapshot(native_of(vals), {"label": "test"})
    row = snap.summary().row(0, named=True)
    assert (row["num_calls"], row["total_ns"], row["min_ns"], row["max_ns"]) == (
        5,
        sum(vals),
        vals[0],
        vals[-1],
    )
    assert row["beyond_range"] == 4
    assert row["med_ns"] is None  # rank 3 falls among the overflow values
    assert snap.quantile(0.2)["value"][0] == pytest.approx(400 * 10**9, rel=REL)
    assert snap.quantile(1.0)["value"][0] == vals[-1]  # the largest rank is the exact max
    assert snap.quantile(0.7)["value"][0] is None
    assert row["stddev_ns"] == pytest.approx(np.std(np.array(vals, dtype=np.float64), ddof=1), rel=1e-9)


def test_stddev_of_a_million_calls_of_one_second_plus_minus_one_ns_matches_numpy():
    values = np.where(np.arange(1_000_000) % 2 == 0, 999_999_999, 1_000_000_001).astype(np.int64)
    std = native_of(values).stats([])["std"][0]
    truth = np.std(values - 10**9, ddof=1)  # centred in numpy, so exact in f64
    assert std == pytest.approx(truth, rel=1e-6)
    assert std == pytest.approx(1.0, rel=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**42), min_size=1, max_size=400), st.floats(0, 1))
def test_any_quantile_is_within_the_relative_error(values, q):
    e = exact(np.array(values, dtype=np.int64), q)
    got = native_of(values).stats([q])["q0"][0]
    assert abs(got - e) <= e * REL + 0.5


def test_merge_of_shards_equals_one_histogram_of_all_values():
    rng = np.random.default_rng(4)
    values = np.round(rng.lognormal(np.log(20_000), 1.2, 50_000)).astype(np.int64)
    parts = np.array_split(values, 7)
    merged = native_of(parts[0])
    for p in parts[1:]:
        merged = merged.merge(native_of(p))
    whole = native_of(values)
    assert merged.buckets() == whole.buckets()
    assert merged.key_state() == whole.key_state()
    a, b = merged.stats(QS), whole.stats(QS)
    for k in ("count", "total", "min", "max", "std", *[f"q{i}" for i in range(len(QS))]):
        assert a[k] == b[k], k


def test_histogram_frame_has_the_contracts_columns_zero_and_overflow_rows():
    snap = Snapshot(native_of([0, 0, 1, 100, 1000, 2**42 + 1]), {"label": "test"})
    h = snap.histogram()
    assert h.schema == pl.Schema(
        {
            "domain": pl.String,
            "callback": pl.String,
            "name": pl.String,
            "index": pl.Int32,
            "lower_ns": pl.Float64,
            "upper_ns": pl.Float64,
            "count": pl.UInt64,
            "source": pl.String,
        }
    )
    rows = h.select("index", "lower_ns", "upper_ns", "count").rows()
    assert rows[0] == (None, 0.0, 0.0, 2)  # the zero bucket
    assert rows[-1] == (None, float(2**42), math.inf, 1)  # overflow
    for i, lo, hi, c in rows[1:-1]:
        assert i == _native.bucket_index(int(hi)) and (lo, hi) == _native.bucket_bounds(i) and c == 1
    assert [r[0] for r in rows[1:-1]] == [-1, _native.bucket_index(100), _native.bucket_index(1000)]
    assert h["count"].sum() == 6


def test_snapshot_frames_of_known_values():
    snap = Snapshot(_native.NativeSnapshot.from_values([100, 200, 300, 400], name="f"), {"label": "test"})
    row = snap.summary().row(0, named=True)
    assert (row["num_calls"], row["total_ns"], row["min_ns"], row["max_ns"]) == (4, 1000, 100, 400)
    assert row["med_ns"] == 200 and row["avg_ns"] == 250.0 and row["time_pct"] == 100.0
    assert row["beyond_range"] == 0
    assert row["stddev_ns"] == pytest.approx(np.std([100, 200, 300, 400], ddof=1), rel=1e-12)


def test_a_snapshot_file_carries_its_format_version_and_round_trips_exactly(tmp_path):
    values = [0, 5, 129, 10**6, 10**9 + 7, 2**42, 2**42 + 5, 2**50]
    snap = Snapshot(native_of(values), {"label": "test"})
    p = tmp_path / "s.parquet"
    snap.save(p)
    head = json.loads(pq.read_schema(p).metadata[b"mspti_lens"])
    assert (head["format"], head["version"], head["scale"]) == ("mspti-lens-snapshot", 2, 7)
    assert tuple(pq.read_schema(p).names) == FILE_COLUMNS  # what load needs is what save writes
    back = Snapshot.load(p)
    assert back._native.key_state() == snap._native.key_state()
    assert back._native.buckets() == snap._native.buckets()
    assert back.summary().drop("source").equals(snap.summary().drop("source"))
    assert back._native.key_state()["sum_sq"] == [sum(v * v for v in values)]


def test_a_snapshot_file_of_another_format_version_is_refused_naming_the_loadable_ones(tmp_path):
    snap = Snapshot(native_of([1, 2, 3]), {"label": "test"})
    p = tmp_path / "s.parquet"
    snap.save(p)
    table = pq.read_table(p)
    for head in ({"format": "mspti-lens-snapshot/1"}, {"format": "mspti-lens-snapshot", "version": 9}):
        old = tmp_path / "old.parquet"
        pq.write_table(table.replace_schema_metadata({"mspti_lens": json.dumps(head)}), old)
        version = head.get("version", 1)
        with pytest.raises(ValueError, match=rf"format version {version}; this mspti-lens loads version 2"):
            Snapshot.load(old)


def test_a_file_naming_a_bucket_that_holds_no_integer_is_refused(tmp_path):
    snap = Snapshot(native_of([1000]), {"label": "test"})
    p = tmp_path / "s.parquet"
    snap.save(p)
    table = pq.read_table(p)
    bad = table.set_column(
        table.column_names.index("index"), "index", pl.Series([[0]], dtype=pl.List(pl.Int32)).to_arrow()
    )
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="bucket index 0 holds no integer-ns value"):
        Snapshot.load(tmp_path / "bad.parquet")


def test_a_histogram_is_two_banks_of_slots_in_whole_128_byte_blocks():
    # Two windows' banks (see hist.rs) of 4,609 u64 slots, plus their sums and bitmaps.
    assert _native.HISTOGRAM_BYTES % 128 == 0
    assert 2 * 4609 * 8 < _native.HISTOGRAM_BYTES <= 80 * 1024
