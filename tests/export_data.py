"""Test data for the exporters: snapshots in the histogram-v2 layout built from known values.

`ValuesSnapshot` stands in for a Snapshot (the exporters read only `histogram()`, `summary()`,
`meta` and optional frames), so every exported number can be checked against the exact values.
Its bucket index is computed here from the contract's definition (base^i < v <= base^(i+1)),
independently of the exporters' own code.
"""

from __future__ import annotations

import math
import random

import polars as pl

SCALE = 7
RANGE_END_NS = 2**42  # the contract's smallest top of range; larger values are overflow here


def otel_index(v: int) -> int:
    """Largest i with 2^(i/128) < v, by bisection on exact integer comparisons."""
    lo, hi = -1, 64 << SCALE
    while lo + 1 < hi:  # invariant: 2^lo < v^128 (lo=-1 trivially for v >= 1), 2^hi >= v^128
        mid = (lo + hi) // 2
        if 2**mid < v ** (1 << SCALE):
            lo = mid
        else:
            hi = mid
    return lo


def nearest_rank(sorted_values: list[int], q: float) -> int:
    n = len(sorted_values)
    return sorted_values[min(max(math.ceil(q * n), 1), n) - 1]


class ValuesSnapshot:
    def __init__(self, values: dict[tuple[str, str, str], list[int]], meta: dict | None = None, slowest=None):
        self.values = {k: sorted(v) for k, v in values.items()}
        self.meta = {"simulated": True, "window_start": 1_700_000_000.0, "window_end": 1_700_000_010.0}
        self.meta.update(meta or {})
        self._slowest = slowest

    def histogram(self) -> pl.DataFrame:
        if getattr(self, "_histogram", None) is None:  # built once: serve() renders it per scrape
            self._histogram = self._make_histogram()
        return self._histogram

    def _make_histogram(self) -> pl.DataFrame:
        rows = []
        for (d, cb, name), vals in self.values.items():
            counts: dict[object, int] = {}
            for v in vals:
                k = "zero" if v == 0 else "over" if v > RANGE_END_NS else otel_index(v)
                counts[k] = counts.get(k, 0) + 1
            for k, c in counts.items():
                if k == "zero":
                    rows.append((d, cb, name, None, 0.0, 0.0, c))
                elif k == "over":
                    rows.append((d, cb, name, None, float(RANGE_END_NS), math.inf, c))
                else:
                    rows.append((d, cb, name, k, 2 ** (k / 128), 2 ** ((k + 1) / 128), c))
        return pl.DataFrame(
            rows,
            schema={
                "domain": pl.String,
                "callback": pl.String,
                "name": pl.String,
                "index": pl.Int32,
                "lower_ns": pl.Float64,
                "upper_ns": pl.Float64,
                "count": pl.UInt64,
            },
            orient="row",
        ).with_columns(pl.lit("simulated").alias("source"))

    def summary(self) -> pl.DataFrame:
        rows = [
            (d, cb, name, len(v), sum(v), min(v), max(v)) for (d, cb, name), v in self.values.items() if v
        ]
        return pl.DataFrame(
            rows,
            schema={
                "domain": pl.String,
                "callback": pl.String,
                "name": pl.String,
                "num_calls": pl.UInt64,
                "total_ns": pl.UInt64,
                "min_ns": pl.UInt64,
                "max_ns": pl.UInt64,
            },
            orient="row",
        ).sort("total_ns", descending=True)

    def slowest(self) -> pl.DataFrame | None:
        return self._slowest


def workload(seed: int = 7) -> ValuesSnapshot:
    """Three APIs with different shapes: log-normal launches (with zero-ns calls), a bimodal
    collective, and a synchronize with one call beyond the range."""
    rng = random.Random(seed)
    launch = [int(rng.lognormvariate(math.log(6_000), 0.4)) for _ in range(5_000)] + [0] * 7
    allreduce = [int(rng.gauss(300_000, 20_000)) for _ in range(800)] + [
        int(rng.gauss(2_500_000, 100_000)) for _ in range(200)
    ]
    sync = [rng.randint(1, 50_000_000) for _ in range(300)] + [RANGE_END_NS + 12_345]
    return ValuesSnapshot(
        {
            ("runtime", "LAUNCH", "aclrtLaunchKernel"): launch,
            ("hccl", "ALL_REDUCE", "HcclAllReduce"): allreduce,
            ("runtime", "SYNCHRONIZE_STREAM", "aclrtSynchronizeStream"): sync,
        },
        meta={"rank": 3, "host": "node-a"},
    )
