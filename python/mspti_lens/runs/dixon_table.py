"""Regenerate the Dixon's Q critical values of :mod:`mspti_lens.runs.stragglers` (run:
``python -m mspti_lens.runs.dixon_table``): the 99.5 % quantile of each ratio under a normal sample,
by Monte Carlo with a fixed seed. Ratios by sample size (Dixon 1950/1951), for the smallest value:
n 3-7 r10 = (x2-x1)/(xn-x1); 8-10 r11 = (x2-x1)/(x[n-1]-x1); 11-13 r21 = (x3-x1)/(x[n-1]-x1);
14-100 r22 = (x3-x1)/(x[n-2]-x1)."""

from __future__ import annotations

import numpy as np

SAMPLES = 400_000
CONFIDENCE = 0.995


def ratio(x: np.ndarray) -> np.ndarray:
    """Dixon's ratio of the smallest value for sorted rows ``x`` (n = row length)."""
    n = x.shape[1]
    if n <= 7:
        return (x[:, 1] - x[:, 0]) / (x[:, -1] - x[:, 0])
    if n <= 10:
        return (x[:, 1] - x[:, 0]) / (x[:, -2] - x[:, 0])
    if n <= 13:
        return (x[:, 2] - x[:, 0]) / (x[:, -2] - x[:, 0])
    return (x[:, 2] - x[:, 0]) / (x[:, -3] - x[:, 0])


def table(samples: int = SAMPLES, seed: int = 0) -> dict[int, float]:
    rng = np.random.default_rng(seed)
    out = {}
    for n in range(3, 101):
        parts = []
        chunk = max(1000, 4_000_000 // n)
        for start in range(0, samples, chunk):
            x = np.sort(rng.standard_normal((min(chunk, samples - start), n)), axis=1)
            parts.append(ratio(x))
        out[n] = float(np.quantile(np.concatenate(parts), CONFIDENCE))
    return out


if __name__ == "__main__":
    t = table()
    print("DIXON_CRITICAL = {")
    for n, v in t.items():
        print(f"    {n}: {v:.4f},")
    print("}")
