"""Time units: the names a table, a plot or the magics accept, and durations written for people.
Imports nothing of the package, so every frame, table and figure can share it."""

from __future__ import annotations

import math

UNITS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}


def unit_for(v: float) -> str:
    """The unit a duration of ``v`` ns reads best in: the largest whose value is at least 1."""
    return next((u for u in ("s", "ms", "µs") if abs(v) >= UNITS[u]), "ns")


def format_ns(v: float, unit: str | None = None) -> str:
    """A duration for people: 812 ns, 5.41 µs, 2.03 ms, 1.20 s, or in a fixed unit (``us`` is
    written µs): three significant digits, thousands separators, never scientific notation."""
    if unit is None:
        unit = unit_for(v)
    x = v / UNITS[unit]
    sign = "µs" if unit == "us" else unit
    if unit == "ns" or abs(x) >= 100 or x == 0:
        return f"{x:,.0f} {sign}"
    decimals = min(9, 2 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f} {sign}"


def check_unit(unit: str) -> str:
    if unit not in UNITS:
        raise ValueError(f"unknown time unit {unit!r}; valid units are {', '.join(UNITS)}")
    return unit
