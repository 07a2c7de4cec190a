"""The Rust crates by the Python package's rule (test_structure.py): no two files (modules) use each
other, through any chain; the simulator's floors call only downwards (its C face over its model
over its ground floor) and its C exports are all in the C face. A module uses
another where a `crate::`, `super::` or `self::` path (in a `use` or in code) or a bare path from a
crate root or `mod.rs` names it; a `mod x;` declaration only says where a file is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_structure import import_circles

from conftest import ROOT

CRATES = {"sim": ROOT / "rust" / "sim" / "src", "lens": ROOT / "rust" / "lens" / "src"}
# The simulator's C face: every function a C caller enters, and nothing else (but the conversions
# of its arguments, in args.rs).
C_FACE = CRATES["sim"] / "c_face"
C_FACE_ARGS = C_FACE / "args.rs"
# The simulator's floors, top to bottom: a module uses only its own floor and those below.
FLOORS = ["c_face", "model", "ground"]

COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
# String and character literals (raw strings included), so that no text in them reads as a path.
LITERAL = re.compile(r'b?r(#*)".*?"\1|b?"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'', re.S)
PATH = re.compile(r"(?<![\w:])((?:crate|super|self|[a-z_][a-z0-9_]*)(?:::(?:[A-Za-z_]\w*|\{|\*))+)")
USE_GROUP = re.compile(r"\buse\s+([^;]*);", re.S)
INLINE_MOD = re.compile(r"\bmod\s+([a-z_][a-z0-9_]*)\s*\{")


def module_of(src: Path, path: Path) -> tuple[str, ...]:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib"):
        parts.pop()
    return tuple(parts)


def code_of(path: Path) -> str:
    """The file without comments and literals (newlines kept, so line numbers stay right)."""
    keep_lines = lambda m: "\n" * m.group(0).count("\n")  # noqa: E731
    return LITERAL.sub(keep_lines, COMMENT.sub(keep_lines, path.read_text()))


def expand_use(tree: str) -> list[str]:
    """`a::{b, c::{d}}` -> ["a::b", "a::c::d"]."""
    tree = re.sub(r"\s+", "", tree)
    depth, start, parts = 0, 0, []
    out = []
    brace = tree.find("{")
    if brace < 0:
        return [tree]
    prefix, body = tree[:brace], tree[brace + 1 : tree.rindex("}")]
    for i, ch in enumerate(body + ","):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    for p in parts:
        if p:
            out.extend(prefix + q for q in expand_use(p))
    return out


def inline_modules(code: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of every `mod name { ... }` block, by brace matching."""
    found = []
    for m in INLINE_MOD.finditer(code):
        depth, i = 1, m.end()
        while depth and i < len(code):
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        found.append((m.start(), i, m.group(1)))
    return found


def crate_graph(src: Path) -> dict[str, dict[str, str]]:
    """module -> {module it uses: where (file:line)}, modules named by their path in the crate."""
    files = {module_of(src, p): p for p in sorted(src.rglob("*.rs"))}
    graph: dict[str, dict[str, str]] = {"::".join(m) or "crate": {} for m in files}

    def resolve(base: tuple[str, ...], path: list[str]) -> tuple[str, ...] | None:
        # The longest prefix of base + path that is a file's module.
        full = list(base) + path
        for n in range(len(full), 0, -1):
            if tuple(full[:n]) in files:
                return tuple(full[:n])
        return None

    for mod, path in files.items():
        code = code_of(path)
        inline = inline_modules(code)
        paths = [(m.start(), m.group(1)) for m in PATH.finditer(code)]
        for u in USE_GROUP.finditer(code):
            paths += [(u.start(), p) for p in expand_use(u.group(1)) if "{" in u.group(1)]
        for at, text in paths:
            if text.endswith("{"):
                continue  # a use group: its paths are expanded above
            segs = [s for s in text.split("::") if s and s != "{"]
            # Where `self` and `super` start from: the file's module, or an inline module in it.
            here = list(mod) + [name for s, e, name in inline if s < at < e]
            if segs[0] == "crate":
                target = resolve((), segs[1:])
            elif segs[0] in ("self", "super"):
                base = list(here)
                while segs and segs[0] in ("self", "super"):
                    if segs.pop(0) == "super":
                        base = base[:-1]
                target = resolve(tuple(base), segs) if segs else None
                if target is None and len(base) <= len(mod):
                    target = tuple(base)  # `super::*`, `super::Item`: the parent module itself
            elif path.name in ("lib.rs", "mod.rs"):
                # A bare path from a crate root or mod.rs: its own submodules.
                target = resolve(mod, segs) if (*mod, segs[0]) in files else None
            else:
                target = None
            if target is not None and target != mod:
                line = code.count("\n", 0, at) + 1
                graph["::".join(mod) or "crate"].setdefault(
                    "::".join(target) or "crate", f"{where(path)}:{line}"
                )
    return graph


def where(path: Path) -> str:
    return str(path.relative_to(ROOT) if ROOT in path.parents else path.name)


def said(graph: dict[str, dict[str, str]], circles: list[list[str]]) -> str:
    return "\n".join(
        " -> ".join(f"{a} ({graph[a][b]})" for a, b in zip(c, c[1:])) + f" -> {c[-1]}" for c in circles
    )


@pytest.mark.parametrize("crate", sorted(CRATES))
def test_no_two_modules_of_a_rust_crate_use_each_other(crate):
    graph = crate_graph(CRATES[crate])
    circles = import_circles(graph)
    assert circles == [], (
        f"modules of rust/{crate} that use each other (the lower one must not know its user):\n"
        + (said(graph, circles))
    )


def test_the_circle_finder_reads_rust_paths(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "lib.rs").write_text("mod a;\nmod b;\nuse a::x;\n")
    (tmp_path / "a" / "mod.rs").write_text("pub mod c;\n// crate::b is a comment\nfn f() { self::c::g(); }\n")
    (tmp_path / "a" / "c.rs").write_text('use crate::{b::{self, y}};\nconst S: &str = "super::z";\n')
    (tmp_path / "b.rs").write_text("mod tests {\n use super::*;\n}\nfn h() { super::a::c::g(); }\n")
    graph = crate_graph(tmp_path)
    assert {m: set(t) for m, t in graph.items()} == {
        "crate": {"a"},
        "a": {"a::c"},
        "a::c": {"b"},
        "b": {"a::c"},
    }
    assert import_circles(graph) == [["a::c", "b", "a::c"]]


def test_the_simulators_floors_call_only_downwards():
    graph = crate_graph(CRATES["sim"])
    floor = lambda m: FLOORS.index(m.split("::")[0]) if m.split("::")[0] in FLOORS else None  # noqa: E731
    assert all(floor(m) is not None for m in graph if m != "crate"), "a module outside the floors"
    upward = [
        f"{m} -> {t} ({where})"
        for m, uses in sorted(graph.items())
        for t, where in sorted(uses.items())
        if m != "crate" and t != "crate" and floor(t) < floor(m)
    ]
    assert upward == [], "a lower floor uses a higher one (the model never calls the C face):\n" + "\n".join(
        upward
    )


NO_MANGLE = re.compile(r"#\[(?:unsafe\()?(?:no_mangle|export_name)")
FN = re.compile(r"\bfn\s+([A-Za-z_]\w*)")


def test_the_simulators_exports_are_all_in_its_c_face_and_it_holds_nothing_else():
    outside = [
        f"{where(p)}:{code_of(p).count(chr(10), 0, m.start()) + 1}"
        for p in sorted(CRATES["sim"].rglob("*.rs"))
        if C_FACE not in p.parents
        for m in NO_MANGLE.finditer(code_of(p))
    ]
    assert outside == [], "an exported function outside rust/sim/src/c_face:\n" + "\n".join(outside)
    # Inside it every function is exported (a test module aside): its work is the model's.
    unexported = []
    for p in sorted(set(C_FACE.rglob("*.rs")) - {C_FACE_ARGS}):
        code = code_of(p)
        tests = [(s, e) for s, e, name in inline_modules(code) if name == "tests"]
        for m in FN.finditer(code):
            before = code[max(0, m.start() - 400) : m.start()]
            last_item = max(before.rfind(";"), before.rfind("}"))
            if any(s < m.start() < e for s, e in tests) or NO_MANGLE.search(before[last_item + 1 :]):
                continue
            unexported.append(f"{where(p)}:{code.count(chr(10), 0, m.start()) + 1} fn {m.group(1)}")
    assert unexported == [], "the C face holds only exports; move this into the model:\n" + "\n".join(
        unexported
    )
    assert len(list(C_FACE.rglob("*.rs"))) > 1


def test_every_static_mutex_of_the_simulator_is_held_across_a_fork():
    # A static Mutex the fork handlers do not know stays held in a child forked while another thread
    # held it; a ForkLock (ground/locks.rs) joins the set they hold. The registry is their own.
    found = [
        f"{where(p)}:{code_of(p).count(chr(10), 0, m.start()) + 1}"
        for p in sorted(CRATES["sim"].rglob("*.rs"))
        for m in re.finditer(r"\bstatic\s+(\w+)\s*:\s*(?:\w+<\s*)*Mutex<", code_of(p))
        if m.group(1) != "REGISTRY"
    ]
    assert found == [], "make these ForkLocks of a ground::locks::Rank:\n" + "\n".join(found)
