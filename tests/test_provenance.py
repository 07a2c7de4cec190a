"""The repository holds only what this project wrote: no tracked file carries another party's
copyright or licence notice (facts from elsewhere, such as an ABI's names and values or a trace's
figures, are fine; their code, text and data are not), and no test, benchmark, fuzzer or build
script fetches or builds another project's code. Peers are measured where they are installed
(bench/cann_monitors.py), real traces read from outside (tests/kineto_traces.py)."""

from __future__ import annotations

import re
import subprocess

from conftest import ROOT

# Notices of a licence or a copyright holder. Spelled in pieces so this file does not match itself.
NOTICES = re.compile(
    "|".join(
        (
            r"Copy" r"right\s*(\(c\)|©|\d{4})",
            r"SPDX-" r"License-Identifier",
            r"Mulan\s+" r"PSL",
            r"Licensed\s+under\s+the\s+" r"Apache",
            r"GNU\s+(Lesser\s+)?General\s+" r"Public\s+License",
            r"All\s+rights\s+" r"reserved",
        )
    ),
    re.IGNORECASE,
)
OURS = re.compile(r"mspti[-_]lens", re.IGNORECASE)
# The project's own licence, the one file whose whole text is a licence.
OWN_LICENCE = "LICENSE"

# Ways of bringing another project's code into a build or a test run.
FETCHES = re.compile(
    "|".join(
        (
            r"\bgit\s+" r"clone\b[^\n]*(https?://|git@|ssh://)",  # a clone of this repository is fine
            r"\bgit\s+" r"submodule\b",
            r"\bFetch" r"Content_",
            r"\bExternal" r"Project_Add\b",
            r"\b(curl|wget)\s+\S*(github|gitee|gitcode)\.",
            r"pip\s+install\s+[^\n]*\b(mspti(?![-_]lens)|msmonitor|torch[-_]npu)\b",
            r"pip\s+install\s+[^\n]*git\+(?!file:)",
            r"/wo" r"rk/upstream",  # split: the no-data-from-outside guard matches the whole path
            r"ascend-" r"mspti\b",
            r"UPSTREAM" r"\.txt",
        )
    )
)
# Where code that builds or runs things lives.
BUILDERS = ("tests", "bench", "fuzz", "scripts", ".ci")
BUILD_FILES = ("Makefile", "pyproject.toml", "Cargo.toml")


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [p for p in out.stdout.split("\0") if p]


def text_of(path: str) -> str | None:
    try:
        return (ROOT / path).read_text(encoding="utf-8")
    except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
        return None  # a binary file (or one deleted in the work tree) has no notice to read


def foreign_notices(name: str, text: str) -> list[str]:
    """The lines of `text` that carry a notice not naming this project."""
    return [
        f"{name}:{i}: {line.strip()[:100]}"
        for i, line in enumerate(text.splitlines(), 1)
        if NOTICES.search(line) and not OURS.search(line)
    ]


def fetches(name: str, text: str) -> list[str]:
    return [
        f"{name}:{i}: {line.strip()[:100]}"
        for i, line in enumerate(text.splitlines(), 1)
        if FETCHES.search(line)
    ]


def test_no_tracked_file_carries_another_partys_copyright_or_licence() -> None:
    found = []
    for path in tracked():
        if path == OWN_LICENCE:
            continue
        text = text_of(path)
        if text is not None:
            found += foreign_notices(path, text)
    assert found == [], "\n".join(found)


def test_the_projects_own_licence_is_mit_and_names_the_project() -> None:
    text = (ROOT / OWN_LICENCE).read_text()
    assert text.startswith("MIT License\n")
    assert re.search(r"^Copyright \(c\) \d{4} mspti-lens contributors$", text, re.M)


def test_nothing_fetches_or_builds_another_projects_code() -> None:
    found = []
    for path in tracked():
        if path.split("/", 1)[0] in BUILDERS or path in BUILD_FILES or path.endswith("CMakeLists.txt"):
            if path == "tests/test_provenance.py":
                continue
            text = text_of(path)
            if text is not None:
                found += fetches(path, text)
    assert found == [], "\n".join(found)


def test_every_cmake_project_is_the_projects_own_and_stays_inside_it() -> None:
    """The only CMake projects are the test programs this project wrote, and they include and
    add nothing from outside their own directory (the toolkit comes in as a user's would:
    $ASCEND_HOME_PATH's include/ and lib64/)."""
    projects = [p for p in tracked() if p.endswith("CMakeLists.txt")]
    assert projects == ["tests/data/scenarios/CMakeLists.txt"]
    for p in projects:
        text = (ROOT / p).read_text()
        assert not re.search(r"add_subdirectory\s*\(\s*\.\.|include\s*\(\s*\.\.", text), p
        sources = set(re.findall(r"\b(\w+\.c)\b", text))
        assert sources and all((ROOT / p).parent.joinpath(s).is_file() for s in sources), sources


def test_the_checks_find_what_they_look_for() -> None:
    """Each check, on lines it must flag and lines it must let pass."""
    holder = "Copy" + "right (c) 2025 Some Vendor Co., Ltd."
    assert foreign_notices("a.h", f"/*\n * {holder}\n */") == [f"a.h:2: * {holder}"]
    assert foreign_notices("b.h", " * " + "SPDX-" + "License-Identifier: " + "Apache-2.0") != []
    assert foreign_notices("c.md", "under the " + "Mulan " + "PSL v2") != []
    assert foreign_notices("d.h", " * Copy" + "right (c) 2026 mspti-lens contributors. MIT License.") == []
    assert foreign_notices("e.md", "the MIT licence, as pyproject.toml says") == []
    assert fetches("t.sh", "git " + "clone https://example.org/x.git") != []
    assert fetches("t.sh", 'git clone -q "$ROOT" "$WORK/clone"') == []  # this repository itself
    assert fetches("t.sh", 'pip install "mspti-lens[export]"') == []
    assert fetches("t.sh", "python -m pip install " + "msmonitor") != []
    assert fetches("t.py", 'UP = HERE / "data" / "ascend-' + 'mspti"') != []
    assert fetches("t.sh", "uv pip install polars pytest") == []
