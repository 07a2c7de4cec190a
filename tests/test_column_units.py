"""Units have one home: the unit each column is shown in by its name (columns.COLUMN_UNITS) and
the time units with their scale (units.UNITS, units.unit_for). Every table, the notebook's and
the panels', reads them from there; no module keeps a table of its own."""

from __future__ import annotations

import re

import polars as pl

from conftest import ROOT

PACKAGE = ROOT / "python" / "mspti_lens"
# a time unit's name next to its scale in ns: "ms": 1e6, ("µs", 1e3), "s": 1_000_000_000
UNIT_SCALE = re.compile(r"""["'](ns|us|µs|ms|s)["']\s*[:,]\s*(1e[369]\b|1(_?000)+\b)""")
# a pattern over column names by their unit suffix: r"\w*_ns", r"\w*_gbps"
COLUMN_PATTERN = re.compile(r"""r["'][^"'\n]*\\w[*+]?_?\(?[a-z|]*(ns|gbps|pct|bytes)\b""")
# Units of another kind, and one not yet moved.
OTHERS = {
    "watch/prometheus_rules.py": "PromQL's duration syntax (5m, 30s), not a unit people read in a table",
    "plots/figure.py": "not yet moved: the plots' time axis picks its unit itself (to use units.unit_for)",
}


def sources() -> dict[str, str]:
    return {p.relative_to(PACKAGE).as_posix(): p.read_text() for p in PACKAGE.rglob("*.py")}


def test_time_units_and_their_scale_are_defined_in_units_py_only():
    found = {path for path, text in sources().items() if UNIT_SCALE.search(text)}
    assert "units.py" in found  # the rule sees the one home
    assert found - {"units.py"} == set(OTHERS), "use mspti_lens.units (UNITS, unit_for, format_ns)"


def test_the_column_unit_table_is_defined_in_columns_py_only():
    from mspti_lens import columns
    from mspti_lens.notebook import tables

    assert tables.COLUMN_UNITS is columns.COLUMN_UNITS and tables.column_kind("med_ns", pl.UInt64) == "time"
    defines = {path for path, text in sources().items() if re.search(r"^COLUMN_UNITS\b.*=", text, re.M)}
    assert defines == {"columns.py"}
    patterns = {path for path, text in sources().items() if COLUMN_PATTERN.search(text)}
    assert patterns == {"columns.py"}, (
        "a column's unit by its name: columns.COLUMN_UNITS via tables.column_kind"
    )
