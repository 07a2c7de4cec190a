"""Findings of a notebook audit of the device and run views, checked on the objects themselves:
a mistyped activity kind, the kernel's launcher logo, the stragglers table's order and folding,
and the timeline's coinciding lines. The on-screen findings are in test_browser.py."""

from __future__ import annotations

from pathlib import Path

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


def _timeline_frame():
    """Six 0.5 s intervals of three APIs, two of them with the same latency in every interval."""
    import datetime as dt

    import polars as pl

    t0 = dt.datetime(2026, 12, 3, 9, 21, 5, tzinfo=dt.timezone.utc)
    rows = []
    for k in range(6):
        a, b = t0 + dt.timedelta(seconds=0.5 * k), t0 + dt.timedelta(seconds=0.5 * (k + 1))
        for name, p50, p99 in (("aclrtLaunchKernel", 5000, 7800), ("aclrtMemcpy", 5000, 7800),
                               ("HcclAllReduce", 400_000, 838_000)):  # fmt: skip
            rows.append((a, b, name, 100 - 10 * (name == "HcclAllReduce"), p50 + 10 * k, p99))
    return pl.DataFrame(rows, schema=["start", "end", "name", "num_calls", "p50_ns", "p99_ns"], orient="row")


def test_timeline_lines_that_coincide_stay_visible_and_the_legend_says_they_coincide():
    pytest.importorskip("matplotlib")
    from mspti_lens import plots

    fig = plots.timeline(_timeline_frame())
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert set(lines) == {
        "aclrtLaunchKernel p50", "aclrtLaunchKernel p99",
        "aclrtMemcpy p50 (≈ aclrtLaunchKernel p50)", "aclrtMemcpy p99 (≈ aclrtLaunchKernel p99)",
        "HcclAllReduce p50", "HcclAllReduce p99",
    }, set(lines)  # fmt: skip
    # the line drawn on top is thinner than the one it lies on: both colours show
    below, above = lines["aclrtLaunchKernel p50"], lines["aclrtMemcpy p50 (≈ aclrtLaunchKernel p50)"]
    assert below.get_linewidth() > above.get_linewidth() and below.get_color() != above.get_color()
    assert lines["HcclAllReduce p50"].get_linewidth() == above.get_linewidth()  # alone: the plain width
    # seconds from the first interval, not clock times under a date offset
    ax = fig.axes[0]
    fig.canvas.draw()
    assert ax.get_xlabel().startswith("time since the first interval (s")
    assert ax.xaxis.get_offset_text().get_text() == ""
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert {"0.0", "0.5", "3.0"} <= set(ticks) and not any(":" in t for t in ticks), ticks


def test_the_kernelspec_ships_a_launcher_logo_labelled_mspti_lens(tmp_path):
    import struct
    import xml.etree.ElementTree as ET

    pytest.importorskip("jupyter_client")
    from jupyter_client.kernelspec import KernelSpecManager

    from mspti_lens import kernelspec
    from mspti_lens.backend import simulator_path

    kernelspec.install(simulator_path(), "lens-logo", prefix=str(tmp_path))
    ksm = KernelSpecManager(kernel_dirs=[str(tmp_path / "share" / "jupyter" / "kernels")])
    folder = ksm.get_all_specs()["lens-logo"]["resource_dir"]
    # the names jupyter_server serves as the spec's resources (logo-*), the launcher's icon
    for size in (32, 64):
        png = Path(folder, f"logo-{size}x{size}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (size, size)
        assert b"tEXtTitle\x00mspti-lens" in png
    svg = ET.parse(f"{folder}/logo-svg.svg").getroot()
    assert svg.find("{http://www.w3.org/2000/svg}title").text == "mspti-lens"


def test_the_run_view_lives_with_the_notebook_code_and_its_old_name_still_imports():
    import mspti_lens.notebook.run_view as run_view
    import mspti_lens.runs.view as old

    for name in ("STATUS_STYLE", "headline", "refreshed_run_html", "run_html", "run_widget", "show_live"):
        assert getattr(old, name) is getattr(run_view, name), name
    assert run_view.__file__.endswith("notebook/run_view.py")


def test_the_control_panels_init_reads_as_its_named_steps():
    import ast
    import inspect
    import textwrap

    from mspti_lens.notebook.widget import ControlPanel

    tree = ast.parse(textwrap.dedent(inspect.getsource(ControlPanel.__init__)))
    init = tree.body[0]
    assert init.end_lineno - init.lineno < 40, init.end_lineno - init.lineno
    called = [
        n.func.attr for n in ast.walk(init) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
    ]
    steps = ["_init_state", "_build_domain_toggles", "_build_activity_toggles", "_build_picker",
             "_build_actions", "_build_views", "_lay_out"]  # fmt: skip
    assert [c for c in called if c in steps] == steps, called
