"""Each fact defined once and the rooms that hold it. The counters come from one native table,
the library search order is the native loader's (doctor prints it, it keeps no copy), the panel
and the magics draw through one plot dispatch whose markers are the Snapshot's quantiles, removed
modules stay removed, the figures the documents quote are the native constants, and the repository
cites only what it contains."""

from __future__ import annotations

import ast
import math
import re
import runpy
import subprocess
from pathlib import Path

import matplotlib
import polars as pl
import pytest

import mspti_lens
from mspti_lens import Session, _native, catalog, doctor, plots
from mspti_lens.__main__ import build_parser
from mspti_lens.notebook import panel
from mspti_lens.sim import ENTER, EXIT

from conftest import ROOT

matplotlib.use("Agg")


# -- counters -----------------------------------------------------------------------------------------
def test_snapshot_counters_are_the_native_table_and_the_stack_counter_has_its_own_name(session):
    names = [n for n, _ in _native.COUNTERS]
    assert names == ["unmatched", "stack_full", "dropped", "abandoned", "orphaned", "bad_site", "toggled"]
    assert list(session.snapshot().counters) == [*names, "in_flight", "threads"]
    assert "overflow" not in names  # the per-key histogram overflow keeps that word


def test_a_full_stack_counts_as_stack_full_on_the_simulator(sim, session):
    session.start()
    for _ in range(65):  # 64 calls open at once is the stack's depth
        sim.fire("aclrtMalloc", ENTER)
    for _ in range(65):
        sim.fire("aclrtMalloc", EXIT)
    c = session.snapshot().counters
    assert c["stack_full"] == 1 and c["orphaned"] == 1


def test_snapshot_files_written_before_the_rename_still_load_their_stack_counter():
    n = _native.NativeSnapshot.from_state(
        [1],
        [1],
        ["f"],
        [5],
        [25],
        [5],
        [5],
        [0],
        [0],
        [_native.bucket_index(5)],
        [1],
        {"overflow": 7, "unmatched": 2},
    )
    assert n.counters()["stack_full"] == 7 and n.counters()["unmatched"] == 2


# -- one library search order ----------------------------------------------------------------------
def test_the_search_order_is_defined_natively_once():
    assert [o for o, _ in _native.search_order()] == [
        "explicit",
        "MSPTI_LIBRARY",
        "preloaded",
        "CANN",
        "simulator",
    ]
    assert not hasattr(_native, "cann_candidates")  # doctor used it to keep its own copy


def test_doctor_follows_the_native_order_and_a_missing_mspti_library_is_not_skipped(monkeypatch, tmp_path):
    root = tmp_path / "cann"
    (root / "lib64").mkdir(parents=True)
    real = root / "lib64" / "libmspti.so"
    real.write_bytes(b"")
    monkeypatch.setenv("ASCEND_HOME_PATH", str(root))
    monkeypatch.delenv("MSPTI_LIBRARY", raising=False)
    path, how, _ = doctor.find_library()
    assert (path, how) == (str(real), "CANN location")
    assert _native.find_library()[:2] == (str(real), "CANN")
    # A Session stops at a MSPTI_LIBRARY that names no file; doctor says so instead of moving on.
    missing = tmp_path / "nowhere" / "libmspti.so"
    monkeypatch.setenv("MSPTI_LIBRARY", str(missing))
    assert doctor.find_library()[:2] == (str(missing), "MSPTI_LIBRARY")
    first = doctor.checks()[0]
    assert first.status == doctor.FAIL and "does not exist" in first.detail


# -- the vocabularies are the native session's -----------------------------------------------------
def test_the_domains_their_id_ranges_and_the_clocks_are_the_native_sessions():
    from mspti_lens import session

    assert _native.NativeSession.DOMAINS == [("runtime", 1, 36), ("hccl", 2, 12)]
    assert catalog.DOMAINS == {"runtime": 1, "hccl": 2} and catalog.DOMAIN_NAMES == {1: "runtime", 2: "hccl"}
    # The ranges are MSPTI's enums: every id of the callback table but INVALID, and no more.
    for value, top in catalog.MAX_CBID.items():
        assert sorted(c.cbid for c in catalog.enableable() if c.domain == value) == list(range(1, top + 1))
    assert session.CLOCKS == tuple(_native.NativeSession.CLOCKS) == ("auto", "tsc", "monotonic", "mspti")
    for name in ("catalog.py", "session.py"):  # no copy of them beside the native one
        text = (PACKAGE / name).read_text()
        assert '"runtime": 1' not in text and "36 if" not in text and '("auto", "tsc"' not in text, name


def test_a_pair_beyond_the_native_range_names_it():
    with pytest.raises(ValueError, match="out of range for domain 'hccl'; valid ids are 1-12"):
        catalog.resolve(("hccl", 13))
    assert catalog.resolve(("runtime", 36)) == (1, 36)
    with pytest.raises(ValueError, match=r"valid domains are 'runtime' \(1\) and 'hccl' \(2\)"):
        catalog.resolve((3, 1))


# -- one plot dispatch, quantiles from the Snapshot -------------------------------------------------
@pytest.fixture
def snap(sim):
    sim.set_clock("virtual")
    with Session(library="sim", clock="mspti") as s:
        sim.run_workload("training", steps=2, ranks=8, threads=1, seed=3)
        return s.snapshot()


def test_panel_and_magics_offer_the_kinds_of_the_one_dispatch_on_the_simulator(sim):
    assert panel.PLOT_KINDS is plots.KINDS
    sim.set_clock("virtual")
    with Session(library="sim", clock="mspti") as s:
        s.start()
        sim.run_workload("training", steps=1, ranks=8, threads=1, seed=3)
        p = panel.Panel(s)
        view = p.refresh()
        with pytest.raises(ValueError, match="valid kinds are distribution, cdf, hccl, launch, timeline"):
            plots.plot(view.snapshot, "pie")
        for kind in plots.KINDS:
            p.set_plot_kind(kind)
            assert p.figure(view).axes


def test_markers_of_a_filtered_frame_are_the_snapshots_quantiles_on_the_simulator(snap):
    name = "aclrtLaunchKernel"
    frame = snap.histogram().filter(pl.col("name") == name)
    fig = plots.distribution(frame, [name])
    lines = {ln.get_label().split()[0]: ln.get_xdata()[0] for ln in fig.axes[0].lines}
    q = mspti_lens.Snapshot.from_histogram(frame)
    for label, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        exact = snap.quantile(p, name)["value"][0]
        assert lines[label] == exact == q.quantile(p, name)["value"][0]


# -- the rooms ----------------------------------------------------------------------------------------
def test_trace_replay_imports_nothing_of_the_simulator_driver():
    replay = Path(mspti_lens.__file__).parent / "sim" / "replay.py"
    mod = runpy.run_path(str(replay))  # no package: a relative import would fail here
    assert "Simulator" not in mod and "Trace" in mod


PACKAGE = ROOT / "python" / "mspti_lens"


def import_graph() -> dict[str, dict[str, str]]:
    """module -> {module it imports: where (file:line)}, over every import statement of the package,
    at the top of a file or inside a function: a lazy import still ties the two files together."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    graph: dict[str, dict[str, str]] = {m: {} for m in modules}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                # `from . import x` imports the submodule x when there is one (the extension
                # `_native` is no module of this package: it imports nothing back).
                subs = [f"{target}.{a.name}" for a in node.names]
                found = [s for s in subs if s in modules]
                if len(found) + sum(a.name == "_native" for a in node.names) < len(node.names):
                    found.append(target)
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            for t in found:
                if t in modules and t != name:
                    graph[name].setdefault(t, f"{path.relative_to(ROOT)}:{node.lineno}")
    return graph


def import_circles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as one shortest
    circle through its first module, so a failure names the imports to cut."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    circles = []
    for comp in components:
        start, inside = comp[0], set(comp)
        came: dict[str, str] = {}  # module -> the module it was first reached from
        frontier = [start]
        while start not in came:  # breadth first: the shortest way back to start
            reached = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w in inside and w not in came:
                        came[w] = v
                        reached.append(w)
            frontier = reached
        back = [start, came[start]]
        while back[-1] != start:
            back.append(came[back[-1]])
        circles.append(back[::-1])
    return circles


def test_the_package_has_no_import_circles():
    graph = import_graph()
    circles = import_circles(graph)
    said = [" -> ".join(f"{a} ({graph[a][b]})" for a, b in zip(c, c[1:])) + f" -> {c[-1]}" for c in circles]
    assert circles == [], "modules that import each other (the lower one must not know its user):\n" + (
        "\n".join(said)
    )


#: Modules outside notebook/ that may import it: the package itself, which is Jupyter's entry point
#: (``load_ipython_extension``) and registers the notebook's rendering of a Snapshot with the model.
# The package loads the notebook's renderings; runs/view.py is the old name of notebook/run_view.py,
# kept for old imports (nothing in the package imports it: OLD_MODULE_NAMES below).
NOTEBOOK_ENTRY_POINTS = {"mspti_lens", "mspti_lens.runs.view"}
#: Still to be turned around (none now). Listed so that the rule holds everywhere else; each must
#: still be true.
NOTEBOOK_IMPORTS_TO_TURN: set[str] = set()


def notebook_importers(graph: dict[str, dict[str, str]]) -> dict[str, list[str]]:
    """module outside notebook/ -> where it imports a notebook module."""
    inside = ("mspti_lens.notebook", "mspti_lens.notebook.")
    out: dict[str, list[str]] = {}
    for m, deps in graph.items():
        if m == inside[0] or m.startswith(inside[1]):
            continue
        for t, where in deps.items():
            if t == inside[0] or t.startswith(inside[1]):
                out.setdefault(m, []).append(f"{where} ({t})")
    return out


def test_nothing_outside_the_notebook_imports_it_but_the_entry_point():
    graph = import_graph()
    found = notebook_importers(graph)
    wrong = {m: w for m, w in found.items() if m not in NOTEBOOK_ENTRY_POINTS | NOTEBOOK_IMPORTS_TO_TURN}
    assert wrong == {}, "the model and the other rooms must not know the notebook:\n" + "\n".join(
        w for ws in wrong.values() for w in ws
    )
    assert NOTEBOOK_IMPORTS_TO_TURN <= set(found), "turned around: take it off NOTEBOOK_IMPORTS_TO_TURN"
    assert "mspti_lens.snapshot" not in found and "mspti_lens.session" not in found


#: Old module names, each kept as the very module of its new name (a module that replaces itself
#: in sys.modules): nothing in the package imports them.
OLD_MODULE_NAMES = {
    "mspti_lens.device": "mspti_lens.activity",
    "mspti_lens.runs.view": "mspti_lens.notebook.run_view",
}


@pytest.mark.parametrize("old", sorted(OLD_MODULE_NAMES))
def test_an_old_module_name_is_its_new_module_and_nothing_in_the_package_imports_it(old):
    import importlib

    assert importlib.import_module(old) is importlib.import_module(OLD_MODULE_NAMES[old])
    graph = import_graph()
    assert not [m for m, deps in graph.items() if old in deps], f"import {OLD_MODULE_NAMES[old]}"


def test_the_notebook_import_rule_sees_a_lazy_import():
    graph = {
        "mspti_lens.snapshot": {"mspti_lens.notebook.tables": "snapshot.py:9"},
        "mspti_lens.notebook": {},
    }
    assert notebook_importers(graph) == {
        "mspti_lens.snapshot": ["snapshot.py:9 (mspti_lens.notebook.tables)"]
    }


def test_a_snapshot_reads_through_the_rendering_the_notebook_registered():
    from mspti_lens import snapshot
    from mspti_lens.notebook import snapshot_repr

    assert snapshot._rendered().text is snapshot_repr.as_text
    assert snapshot._rendered().html is snapshot_repr.as_html


def test_a_simulator_job_shows_its_progress_through_what_the_notebook_registered(monkeypatch):
    from mspti_lens.notebook import display, progress
    from mspti_lens.sim import driver

    assert driver._notebook_progress == driver.NotebookProgress(progress.in_notebook, progress.widget_bar)
    assert isinstance(driver.progress_bar("job", 3, "steps"), driver.TerminalBar)  # not in a kernel
    monkeypatch.setattr(display, "in_jupyter", lambda: True)
    assert isinstance(driver.progress_bar("job", 3, "steps"), display.WidgetBar)
    monkeypatch.setattr(driver, "_notebook_progress", None)  # nothing registered: a terminal
    assert isinstance(driver.progress_bar("job", 3, "steps"), driver.TerminalBar)


def test_the_circle_finder_finds_a_lazy_circle():
    graph = {"a": {"b": "a.py:1"}, "b": {"c": "b.py:9"}, "c": {"a": "c.py:3"}, "d": {"a": "d.py:1"}}
    assert import_circles(graph) == [["a", "b", "c", "a"]]
    assert import_circles({"a": {"b": ""}, "b": {}}) == []


def test_no_two_test_files_differ_only_by_word_order():
    by_words: dict[tuple[str, ...], list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        by_words.setdefault(tuple(sorted(path.stem.split("_"))), []).append(path.name)
    assert [names for names in by_words.values() if len(names) > 1] == []


def test_the_tests_folders_mirror_the_package():
    # tests/notebook holds the tests of mspti_lens.notebook, and so on; tests of the top-level
    # modules and of the whole (reliability, structure, packaging) stay at the top.
    package = ROOT / "python" / "mspti_lens"
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    assert folders == {"export", "notebook", "plots", "runs", "sim", "watch"}
    assert all((package / f / "__init__.py").is_file() for f in folders)


def test_public_paths_still_work():
    from mspti_lens.sim import Simulator, Trace

    assert mspti_lens.sim.Simulator is Simulator and mspti_lens.sim.Trace is Trace
    assert mspti_lens.plots.distribution is plots.distribution
    assert callable(mspti_lens.load_ipython_extension)
    assert Path(mspti_lens.simulator_path()).parent.name == "sim"


def test_the_removed_dead_code_stays_gone():
    from mspti_lens import snapshot

    assert not hasattr(catalog, "function_names") and not hasattr(catalog, "describe")
    assert not hasattr(panel, "domain_of") and not hasattr(snapshot, "COUNTER_NAMES")


def test_install_kernel_user_flag_can_be_turned_off():
    parse = build_parser().parse_args
    assert parse(["install-kernel"]).user is True
    assert parse(["install-kernel", "--no-user"]).user is False


# -- the documents' figures are the constants they quote ------------------------------------------
DOCUMENTS = [ROOT / "README.md", ROOT / "python" / "mspti_lens" / "__init__.py"]


def figures(text: str, pattern: str) -> list[str]:
    return re.findall(pattern, " ".join(text.split()))  # one line, whatever the wrapping


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: p.name)
def test_the_histogram_figures_a_document_quotes_are_the_native_constants(doc):
    text = doc.read_text()
    assert "log-linear" not in text  # the histogram is exponential
    scales = figures(text, r"scale[ -](\d+)")
    errors = figures(text, r"(?:<=|≤|within) (\d+(?:\.\d+)?) %")
    ranges = figures(text, r"to 2\^(\d+) ns")
    sizes = figures(text, r"(\d+) KiB per API and thread")
    assert scales and errors and ranges and sizes, (scales, errors, ranges, sizes)
    assert {int(x) for x in scales} == {_native.SCALE}
    assert {float(x) for x in errors} == {round(_native.MAX_RELATIVE_ERROR * 100, 2)}
    assert {2 ** int(x) for x in ranges} == {_native.RANGE_MAX_NS}
    assert {int(x) for x in sizes} == {_native.HISTOGRAM_BYTES // 1024}


def test_the_readme_quotes_the_native_counts_of_slowest_calls():
    text = (ROOT / "README.md").read_text()
    kept = figures(text, r"the (\d+) slowest calls per thread and API")
    assert kept and {int(k) for k in kept} == {_native.SLOWEST_PER_KEY}


def test_the_native_range_and_error_are_those_of_scale_7():
    base = 2 ** (2**-_native.SCALE)
    assert math.isclose(_native.MAX_RELATIVE_ERROR, (base - 1) / (base + 1), rel_tol=1e-12)
    assert _native.bucket_bounds(_native.MAX_INDEX)[1] == pytest.approx(_native.RANGE_MAX_NS)


# -- the repository stands on its own --------------------------------------------------------------
# Built from parts, so that this file does not match its own patterns.
OUTSIDE = [
    "../" + "shared",
    "shared/" + "reference",
    "DESIGN" + ".md",
    "mspti_abi" + ".md",
    "latency_priors" + ".md",
    "activity_mstx_multirank" + ".md",
]
TRACKER = re.compile(r"\b" + "issue" + r"s? ?#?\d", re.IGNORECASE)


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(
        b"\0"
    )
    files = []
    for n in filter(None, names):
        path = ROOT / n.decode()
        data = path.read_bytes() if path.is_file() else b"\0"
        if b"\0" not in data[:8192]:  # text, not a binary or compressed file
            files.append(path)
    return files


def is_ci_traces_line(path: Path, line: str) -> bool:
    """CI's entry point may point the replay tests at the real traces beside the clone: the one
    place the repository names that directory, as data to read, not a document it cites."""
    return path == ROOT / ".ci" / "run" and ("../" + "shared/traces") in line


def test_no_tracked_file_cites_a_document_outside_the_repository():
    found = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()[:100]}"
        for p in tracked_text_files()
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if any(o in line for o in OUTSIDE) and not is_ci_traces_line(p, line)
    ]
    assert found == [], "cite docs/reference.md instead:\n" + "\n".join(found)


def test_no_tracked_file_speaks_of_tracker_issues_instead_of_the_code():
    found = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()[:100]}"
        for p in tracked_text_files()
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if TRACKER.search(line)
    ]
    assert found == [], "say what the thing is, or why:\n" + "\n".join(found)


def test_a_mutex_whose_holder_panicked_is_taken_through_the_one_helper_of_its_crate():
    # core/locks.rs and rust/sim/src/ground/locks.rs say once why poisoning is ignored; a copy of the
    # pattern elsewhere says nothing.
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in tracked_text_files()
        if p.suffix == ".rs" and p.name != "locks.rs"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if ".into_inner())" in line and "unwrap_or_else" in line
    ]
    assert found == [], "use locks::lock (or wait/wait_timeout) instead:\n" + "\n".join(found)
