"""One module, runs/runfiles.py, makes every file operation inside a run directory (create, open,
replace, list, delete): the security model has one home. Every other module of the package that
deals with runs (those under runs/, and every module that imports from runs) calls it, never the
filesystem: this test reads their syntax trees and names each direct call it finds."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "python" / "mspti_lens"
HOME = PACKAGE / "runs" / "runfiles.py"

# Calls that touch the filesystem: a builtin, functions of os / shutil / polars / pyarrow, and
# methods of pathlib.Path (and of polars frames for writing), by their name.
BUILTINS = {"open"}
MODULE_CALLS = {
    "os": {
        "open", "replace", "rename", "renames", "unlink", "remove", "rmdir", "removedirs", "listdir",
        "scandir", "mkdir", "makedirs", "utime", "link", "symlink", "chmod", "chown", "truncate",
        "walk", "fwalk", "mkfifo",
    },
    "shutil": {"copy", "copy2", "copyfile", "copytree", "move", "rmtree"},
    "pl": {"read_parquet", "scan_parquet", "read_parquet_metadata", "read_parquet_schema", "read_ipc"},
    "polars": {"read_parquet", "scan_parquet", "read_parquet_metadata", "read_parquet_schema"},
    "pq": {"read_table", "ParquetFile", "write_table", "read_metadata", "read_schema"},
    "glob": {"glob", "iglob"},
}  # fmt: skip
METHODS = {
    "read_text", "read_bytes", "write_text", "write_bytes", "glob", "rglob", "iterdir", "mkdir",
    "unlink", "touch", "rmdir", "symlink_to", "hardlink_to", "write_parquet", "sink_parquet",
}  # fmt: skip
# Snapshot.load and Snapshot.save by path would bypass the checks: a run's snapshot is loaded by
# runfiles given the checked file (read_with(..., Snapshot.load)), and saved inside runfiles'
# writer callback (a lambda given the file).
SNAPSHOT_CALLS = {"load", "save"}
# The few direct calls that touch no run file, each with why (module, call as named above).
ALLOWED = {
    ("__init__.py", "Snapshot.load()"): "mspti_lens.load(path): a snapshot file the user names",
    ("notebook/magics.py", "Snapshot.load()"): "%mspti load: a snapshot file the user names",
    ("notebook/magics.py", ".save()"): "%mspti save: a file the user names",
    ("notebook/panel.py", ".save()"): "the panel's export: a file the user names",
    ("runs/run.py", "fs.glob()"): "listing a run at a URL: the object store's (fsspec), no local file",
}


def run_modules() -> list[Path]:
    """The package's modules that deal with runs: those under runs/ and those importing from it."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == HOME:
            continue
        text = path.read_text()
        under_runs = path.parent.name in ("runs", "_site") and "runs" in path.parts
        if under_runs or "from .runs" in text or "from ..runs" in text or "mspti_lens.runs" in text:
            out.append(path)
    return out


def direct_file_calls(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    lambdas = {id(n.body) for n in ast.walk(tree) if isinstance(n, ast.Lambda)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        module = path.relative_to(PACKAGE).as_posix()
        call = None
        if isinstance(f, ast.Name) and f.id in BUILTINS:
            call = f"{f.id}()"
        elif isinstance(f, ast.Attribute):
            base = f.value.id if isinstance(f.value, ast.Name) else None
            if base == "runfiles":
                continue  # the home itself
            if base in MODULE_CALLS:
                if f.attr in MODULE_CALLS[base]:
                    call = f"{base}.{f.attr}()"
            elif f.attr in METHODS:
                call = f"{base}.{f.attr}()" if base == "fs" else f".{f.attr}()"
            elif f.attr == "load" and base == "Snapshot":
                call = "Snapshot.load()"
            elif f.attr == "save" and id(node) not in lambdas:
                call = ".save()"
        if call and (module, call) not in ALLOWED:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {call}")
    return found


def test_only_runfiles_touches_run_files():
    modules = run_modules()
    assert any(p.name == "writer.py" for p in modules) and any(p.name == "run_view.py" for p in modules)
    found = [c for p in modules for c in direct_file_calls(p)]
    assert found == [], (
        "these modules touch run files directly; go through runs/runfiles.py (the run directory's "
        "security model: no symlink followed, owner and mode checked):\n" + "\n".join(found)
    )


def test_the_structure_test_sees_a_direct_call(tmp_path):
    # The checker itself: a module that opens a file, lists a folder or reads Parquet is named.
    bad = ROOT / "python" / "mspti_lens" / "runs" / "_structure_probe.py"
    code = (
        "import os\nimport polars as pl\nfrom pathlib import Path\n"
        "def f(p):\n    open(p)\n    os.listdir(p)\n    pl.read_parquet(p)\n    Path(p).glob('*')\n"
        "    Snapshot.load(p)\n    s.save(p)\n    w(lambda f: s.save(f))\n"
    )
    bad.write_text(code)
    try:
        got = [c.split(" ", 1)[1] for c in direct_file_calls(bad)]
    finally:
        bad.unlink()
    assert sorted(got) == sorted(
        ["open()", "os.listdir()", "pl.read_parquet()", ".glob()", "Snapshot.load()", ".save()"]
    )
