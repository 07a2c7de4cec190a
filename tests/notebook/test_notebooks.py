"""Execute every notebook top to bottom with nbclient (against the simulator) and check what the
cells produced: the facts each scenario demonstrates, the tables, the figures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mspti_lens import Snapshot

pytestmark = pytest.mark.slow  # each runs a notebook in its own kernel

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
EXPECTED = {
    "quickstart",
    "scenario1_domain_tracing",
    "scenario2_launch_only",
    "scenario3_enter_exit_pairing",
    "scenario4_hccl_latency",
    "exports",  # run by tests/notebook/test_export_notebook.py
    "section5_where_step_time_goes",
    "multirank_job",
    "catch_a_slowdown",
}
_cache: dict[str, object] = {}
_dirs: dict[str, Path] = {}  # where each notebook ran (the files it wrote)


def run(name: str, tmp_path_factory):
    if name not in _cache:
        nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        cwd = _dirs[name] = tmp_path_factory.mktemp(name)
        nbclient.NotebookClient(
            nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
        ).execute()
        _cache[name] = nb
    return _cache[name]


def cell(nb, tag: str):
    for c in nb.cells:
        if tag in c.metadata.get("tags", []):
            return c
    raise AssertionError(f"no cell tagged {tag!r}")


def stdout(c) -> str:
    return "".join(o.get("text", "") for o in c.outputs if o.output_type == "stream" and o.name == "stdout")


def texts(c) -> str:
    return "\n".join(o.get("data", {}).get("text/plain", "") for o in c.outputs if "data" in o)


def images(c) -> list[bytes]:
    import base64

    return [
        base64.b64decode(o["data"]["image/png"])
        for o in c.outputs
        if "data" in o and "image/png" in o["data"]
    ]


def assert_clean(nb):
    for c in nb.cells:
        if c.cell_type != "code":
            continue
        for o in c.outputs:
            assert o.output_type != "error", f"{c.source[:60]!r} raised {o.get('ename')}: {o.get('evalue')}"
            if o.output_type == "stream" and o.name == "stderr":
                assert "Traceback" not in o.text and "Error" not in o.text, o.text


def test_one_notebook_per_scenario_and_they_are_stored_without_outputs():
    found = {p.stem for p in NOTEBOOKS.glob("*.ipynb")}
    assert EXPECTED <= found
    for p in NOTEBOOKS.glob("*.ipynb"):
        nb = nbformat.read(p, as_version=4)
        nbformat.validate(nb)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), p.name
        assert "simulat" in nb.cells[0].source.lower(), f"{p.name} must say it runs on the simulator"


def test_quickstart(tmp_path_factory):
    nb = run("quickstart", tmp_path_factory)
    assert_clean(nb)
    assert "SIMULATED" in texts(cell(nb, "load"))
    prof = cell(nb, "profile-cell")
    # one output for the snapshot (its table with the figure under it) after the progress line
    assert [o.output_type for o in prof.outputs] == ["display_data", "execute_result"], prof.outputs
    progress = prof.outputs[0]["data"]["text/plain"]
    assert re.fullmatch(r"training workload: 20/20 steps · [\d.]+ s · [\d,.]+ steps/s", progress), progress
    assert images(prof) and images(prof)[0][:4] == b"\x89PNG"
    page = prof.outputs[1]["data"]["text/html"]
    assert "SIMULATED DATA" in page and "<img" in page and "; `%config MsptiMagics.top = 0` for all" in page
    assert "aclrtLaunchKernel" in prof.outputs[1]["data"]["text/plain"]
    calls = int(re.search(r"([\d,]+) calls in", texts(prof)).group(1).replace(",", ""))
    under = texts(cell(nb, "underscore"))  # `_` was the snapshot, and line commands act on it
    assert "aclrtLaunchKernel" in under and "the last %%mspti cell" in under and "5 of " in under
    assert f"saved {calls:,} calls" in texts(cell(nb, "save"))
    # the start line shows though the job's start follows it in the cell
    assert "mspti-lens recording on" in texts(cell(nb, "start")) and "SIMULATED" in texts(cell(nb, "start"))
    panel = cell(nb, "panel")
    # Run All leaves the panel live (the text asks the reader to click it): one widget output
    live = [o for o in panel.outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(live) == 1, panel.outputs
    assert "%mspti close" in nb.cells[-1].source and nb.cells[-1].cell_type == "markdown"
    m = re.search(r"running · ([\d,]+) calls · (\d+) unmatched", stdout(cell(nb, "status")))
    assert m and int(m.group(1).replace(",", "")) > 0, stdout(cell(nb, "status"))
    st = texts(cell(nb, "magic-status"))
    assert "running" in st and "runtime: 36 of 36 · hccl: 0 of 12" in st  # what `-d runtime` asked
    assert len(st.splitlines()) <= 7, st


def test_scenario1_domain_tracing(tmp_path_factory):
    nb = run("scenario1_domain_tracing", tmp_path_factory)
    assert_clean(nb)
    out = stdout(cell(nb, "masks"))
    assert "runtime enable bitmap in the library: 0x1ffffffffe" in out  # ids 1..36
    assert "hccl enable bitmap in the library:    0x0" in out
    assert "SIMULATED" in texts(cell(nb, "snapshot"))
    dom = stdout(cell(nb, "domains"))
    assert "domains recorded: ['runtime']" in dom and "unmatched: 0" in dom
    m = re.search(r"(\d+) of (\d+) hooked runtime functions recorded", stdout(cell(nb, "all-apis")))
    assert m and m.group(1) == m.group(2) and int(m.group(1)) >= 30
    assert "missing: []" in stdout(cell(nb, "all-apis"))
    table = cell(nb, "table-us").outputs[0]["data"]
    assert (
        "µs" in table["text/plain"] and "<thead>" in table["text/html"] and "&quot;" not in table["text/html"]
    )
    for tag in ("plot-distribution", "plot-cdf"):
        assert images(cell(nb, tag)), tag
    assert "still subscribed: False" in stdout(cell(nb, "closed"))


def test_scenario2_launch_only(tmp_path_factory):
    # The guide's full scenario 2: LAUNCH only, the stream as subscription data, marks
    # at ENTER and EXIT made by the native callback, MARKER and KERNEL collected.
    nb = run("scenario2_launch_only", tmp_path_factory)
    assert_clean(nb)
    out = stdout(cell(nb, "setup"))
    assert "['MSPTI_CBID_RUNTIME_LAUNCH']" in out and "['marker', 'kernel']" in out
    assert "runtime bitmap 0x400" in out and "hccl bitmap 0x0" in out
    marks = re.findall(r"(aclrtLaunchKernel\w*): (\d+) marks with a device side", stdout(cell(nb, "run")))
    assert marks and all(int(n) > 0 and int(n) % 2 == 0 for _, n in marks)  # an ENTER and an EXIT mark each
    la = texts(cell(nb, "launches"))
    assert "mstx_marks" in la and "runtime_ap" in la
    for tag in ("plot-split",):
        assert images(cell(nb, tag)), tag
    assert "aclrtLaunchKernel" in texts(cell(nb, "summary")) and "MatMulV2" in texts(cell(nb, "kernels"))


def test_scenario3_pairing_and_correlation_data(tmp_path_factory):
    nb = run("scenario3_enter_exit_pairing", tmp_path_factory)
    assert_clean(nb)
    doc = texts(cell(nb, "documented"))
    cann = texts(cell(nb, "cann26"))
    assert "aclrtMalloc" in doc and "ENTER" in doc and "EXIT" in doc
    assert "0xdeadbeef" in cann and "0xdeadbeef" not in doc
    fields = stdout(cell(nb, "fields"))
    assert "share correlationData: True" in fields and "correlationData = 0xdeadbeef" in fields
    same = stdout(cell(nb, "same-durations"))
    assert "identical summaries under both fidelities: True" in same and "unmatched: 0" in same
    table = cell(nb, "summary-table").outputs[0]["data"]
    assert "aclrtLaunchKernel" in table["text/plain"] and "&quot;" not in table["text/html"]
    pairing = stdout(cell(nb, "pairing"))
    assert "{'aclrtMalloc': 1, 'aclrtFree': 1}" in pairing
    assert "unmatched: 1 | in flight: 1" in pairing


def test_scenario4_hccl_latency(tmp_path_factory):
    nb = run("scenario4_hccl_latency", tmp_path_factory)
    assert_clean(nb)
    out = stdout(cell(nb, "hccl-ops"))
    assert "domains: ['hccl']" in out
    assert "HcclAllReduce" in out.splitlines()[1] and "HcclAllReduce" in out.splitlines()[2]
    assert (
        "p999" in texts(cell(nb, "percentiles"))
        and "&quot;" not in cell(nb, "percentiles").outputs[0]["data"]["text/html"]
    )
    for tag in ("plot-hccl", "plot-allreduce", "plot-before-after"):
        assert images(cell(nb, tag)), tag
    assert "HcclAllReduce" in texts(cell(nb, "diff"))
    assert "GB/s" in texts(cell(nb, "device-collectives"))  # device time beside host
    assert images(cell(nb, "plot-collectives"))


def test_section5_where_step_time_goes(tmp_path_factory):
    nb = run("section5_where_step_time_goes", tmp_path_factory)
    assert_clean(nb)
    assert "join: runtime_api" in stdout(cell(nb, "run"))
    assert "api_num" in texts(cell(nb, "launches")) and "FlashAttentionScore" in texts(cell(nb, "kernels"))
    for tag in ("plot-split", "plot-kernels"):
        assert images(cell(nb, tag)), tag
    assert "unjoined 0, ambiguous 0" in stdout(cell(nb, "counters"))
    assert "same launches after load: True" in stdout(cell(nb, "save"))
    # the queue note is there exactly when the window's queue delays add up to more than it
    # lasted: in full precision, from the step the notebook saved (it prints them rounded)
    note = stdout(cell(nb, "queue-note"))
    assert re.search(r"queue delays add up to [\d,.]+ s in a [\d,.]+ s window", note), note
    step = Snapshot.load(_dirs["section5_where_step_time_goes"] / "step.parquet")
    total = step.launches()["queue_total_ns"].fill_null(0).sum()
    assert ("ran ahead of the device" in note) == (total > step.duration_s * 1e9), note


def test_catch_a_slowdown_captures_the_slowed_rank(tmp_path_factory):
    nb = run("catch_a_slowdown", tmp_path_factory)
    assert_clean(nb)
    watch = stdout(cell(nb, "watch"))
    assert (
        "FIRING   aclrtLaunchKernel p50 > 2x baseline for 2 windows" in watch and "job exit code 0" in watch
    )
    # The first rule to fire (the slowed rank's launches, or skew naming it as the last to arrive)
    # captures rank 1; the other waits for its own cool-down-free moment.
    assert re.search(r"capture started: .* on rank 1 \(", watch), watch
    assert "captured ranks: [1]; kernels of rank 1" in stdout(cell(nb, "device"))
    assert "comparison.parquet" in stdout(cell(nb, "comparison"))


def test_multirank_job_names_the_slow_rank(tmp_path_factory):
    nb = run("multirank_job", tmp_path_factory)
    assert_clean(nb)
    assert "exit code 0" in stdout(cell(nb, "record"))
    assert "slow rank: 5 on sim-host-1" in stdout(cell(nb, "answer"))
    assert images(cell(nb, "heatmap"))
