"""notebooks/exports.ipynb runs top to bottom on the simulator and each export in it is opened or
parsed by the format's own package (check_exports, on the notebook tests/notebook/test_browser.py
runs in JupyterLab; helpers from test_notebooks); without those packages (the extra `export`) Run
All still runs to the end, each read-back cell saying what to install."""

from __future__ import annotations

import re

import pytest
from test_notebooks import NOTEBOOKS, assert_clean, cell, images, run, stdout, texts

pytestmark = pytest.mark.slow  # each runs a notebook in its own kernel

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")


def check_exports(nb) -> None:
    """What each export cell of notebooks/exports.ipynb, run with the readers installed, printed and
    drew. The run is tests/notebook/test_browser.py's (Run All in JupyterLab, the notebook saved and
    read back): one kernel running the notebook for both the screen and these checks."""
    assert_clean(nb)
    assert "export" in nb.cells[0].source and 'pip install "mspti-lens[export]"' in nb.cells[0].source
    assert "simulated calls" in stdout(cell(nb, "record"))
    assert "duration" in texts(cell(nb, "slowest"))
    prom = stdout(cell(nb, "prometheus"))
    m = re.search(r"aclrtLaunchKernel count: (\d+) == summary: (\d+)", prom)
    assert m and m.group(1) == m.group(2) and int(m.group(1)) > 0, prom
    assert "application/vnd.google.protobuf" in stdout(cell(nb, "serve"))
    otlp = stdout(cell(nb, "otlp"))
    assert "scale 7, counts add up: True" in otlp and "'rank': 0" in otlp
    hdr = stdout(cell(nb, "hdr"))
    assert "aclrtLaunchKernel: hdrh p99" in hdr and "HcclAllReduce: hdrh p99" in hdr
    # the two p99s are calls int(0.99 n + 0.5) and ceil(0.99 n); at the same call they agree
    # within one mspti-lens bucket (0.54 % wide) plus hdrh's own sub-bucket
    for api, hdrh_rank, n, our_rank, gap in re.findall(
        r"(\w+): hdrh p99 [\d,]+ ns \(call ([\d,]+) of ([\d,]+)\), "
        r"mspti-lens p99 [\d,]+ ns \(call ([\d,]+)\); "
        r"hdrh at call [\d,]+: [\d,]+ ns, ([\d.]+)% from mspti-lens",
        hdr,
    ):
        n_, h_, o_ = (int(x.replace(",", "")) for x in (n, hdrh_rank, our_rank))
        assert h_ == int(0.99 * n_ + 0.5) and o_ == -(-99 * n_ // 100), hdr
        assert float(gap) <= 0.6, (api, hdr)
    assert hdr.count("% from mspti-lens") == 2, hdr
    assert "spans on" in stdout(cell(nb, "perfetto"))
    tl = stdout(cell(nb, "timeline"))
    m = re.search(r"([\d,]+) calls in all == ([\d,]+) in the window", tl)
    assert m and m.group(1) == m.group(2), tl
    assert images(cell(nb, "timeline"))
    assert "# TYPE mspti_lens_call_duration_nanoseconds histogram" in stdout(cell(nb, "cli"))


def test_exports_notebook_with_the_readers_where_no_browser_runs_it(tmp_path_factory):
    """check_exports on an nbclient run, where tests/notebook/test_browser.py cannot run the
    notebook (no Chromium, Playwright or JupyterLab): the checks are not lost without a browser."""
    import importlib.util
    import os

    from test_browser import CHROMIUM

    if os.access(CHROMIUM, os.X_OK) and all(
        importlib.util.find_spec(m) for m in ("jupyterlab", "playwright")
    ):
        pytest.skip("checked on the run of test_browser.py::test_the_exports_notebook_runs_to_the_end")
    pytest.importorskip("prometheus_client")
    pytest.importorskip("opentelemetry.proto")
    pytest.importorskip("hdrh")
    check_exports(run("exports", tmp_path_factory))


def test_exports_notebook_runs_to_the_end_without_the_readers(tmp_path, monkeypatch):
    # The kernel inherits PYTHONPATH: a folder whose prometheus_client, google and hdrh fail to
    # import stands in for an install without the extra.
    blocked = tmp_path / "blocked"
    for pkg in ("prometheus_client", "google", "hdrh"):
        (blocked / pkg).mkdir(parents=True)
        (blocked / pkg / "__init__.py").write_text(f"raise ImportError('{pkg} is blocked by the test')\n")
    monkeypatch.setenv("PYTHONPATH", str(blocked))
    nb = nbformat.read(NOTEBOOKS / "exports.ipynb", as_version=4)
    work = tmp_path / "work"
    work.mkdir()
    nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(work)}}
    ).execute()
    assert_clean(nb)
    for tag, package in (
        ("prometheus", "prometheus-client"),
        ("otlp", "opentelemetry-proto"),
        ("hdr", "hdrhistogram"),
    ):
        out = stdout(cell(nb, tag))
        assert f'reading it back needs {package}: pip install "mspti-lens[export]"; skipped' in out, out
    assert "# TYPE mspti_lens_call_duration_nanoseconds histogram" in stdout(
        cell(nb, "cli")
    )  # the last cell ran
