"""The collectives notebook runs top to bottom on the simulator and shows nccl-tests' table, the
busbw plot and the exported gauges."""

from __future__ import annotations

import re

import pytest
from test_notebooks import assert_clean, cell, images, run, stdout

pytestmark = pytest.mark.slow


def test_collectives_bandwidth_notebook(tmp_path_factory):
    nb = run("collectives_bandwidth", tmp_path_factory)
    assert_clean(nb)
    t = "\n".join(o.get("data", {}).get("text/html", "") for o in cell(nb, "bw-table").outputs if "data" in o)
    assert "all_reduce" in t and "bfp16" in t
    # a formatted table (units, no polars dtype row or exponents), not a raw frame
    assert "mspti-lens-table" in t and "<th" in t and ">busbw<" in t and " GB/s<" in t, t
    assert "dataframe" not in t and not re.search(r"\d[eE][+-]?\d", t) and ">f64<" not in t
    assert images(cell(nb, "bw-plot"))
    out = stdout(cell(nb, "bw-prometheus"))
    assert 'op="broadcast"' in out and 'data_type="fp32"' in out
