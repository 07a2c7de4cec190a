"""notebooks/exports.ipynb runs top to bottom on the simulator and each export in it is opened or
parsed by the format's own package (helpers from test_notebooks)."""

from __future__ import annotations

import re

import pytest
from test_notebooks import assert_clean, cell, images, run, stdout, texts

pytest.importorskip("prometheus_client")
pytest.importorskip("opentelemetry.proto")
pytest.importorskip("hdrh")


def test_exports_notebook_on_the_simulator(tmp_path_factory):
    nb = run("exports", tmp_path_factory)
    assert_clean(nb)
    assert "simulated calls" in stdout(cell(nb, "record"))
    assert "duration_ns" in texts(cell(nb, "slowest"))
    prom = stdout(cell(nb, "prometheus"))
    m = re.search(r"aclrtLaunchKernel count: (\d+) == summary: (\d+)", prom)
    assert m and m.group(1) == m.group(2) and int(m.group(1)) > 0, prom
    assert "application/vnd.google.protobuf" in stdout(cell(nb, "serve"))
    otlp = stdout(cell(nb, "otlp"))
    assert "scale 7, counts add up: True" in otlp and "'rank': 0" in otlp
    hdr = stdout(cell(nb, "hdr"))
    assert "aclrtLaunchKernel: hdrh p99" in hdr and "HcclAllReduce: hdrh p99" in hdr
    assert "spans on" in stdout(cell(nb, "perfetto"))
    tl = stdout(cell(nb, "timeline"))
    m = re.search(r"([\d,]+) calls in all == ([\d,]+) in the window", tl)
    assert m and m.group(1) == m.group(2), tl
    assert images(cell(nb, "timeline"))
    assert "# TYPE mspti_lens_call_duration_nanoseconds histogram" in stdout(cell(nb, "cli"))
