"""The C ABI as compiled matches the real headers (docs/reference.md, "Result codes" and "Callback
data"; tests/data/reference/cbids.csv)."""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mspti_lens import _native, catalog

from conftest import DATA, ROOT


def test_callback_data_offsets_match_the_real_header():
    assert _native.callback_data_layout() == {
        "callbackSite": 0,
        "functionName": 8,
        "functionParams": 16,
        "functionReturnValue": 24,
        "symbolName": 32,
        "correlationId": 40,
        "reserved1": 48,
        "reserved2": 56,
        "correlationData": 64,
        "size": 72,
    }


def test_every_callback_id_of_cbids_csv_with_its_names():
    path = DATA / "reference" / "cbids.csv"
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 50
    ours = {(c.domain, c.cbid): c for c in catalog.callbacks()}
    assert len(ours) == 50
    assert sum(1 for c in ours.values() if c.domain == 1) == 37
    assert sum(1 for c in ours.values() if c.domain == 2) == 13
    for r in rows:
        c = ours[(int(r["domain_value"]), int(r["cbid"]))]
        assert c.enum == r["enum_name"]
        split = lambda s: tuple(x for x in s.split("|") if x)  # noqa: E731
        assert c.names_26x == split(r["function_names_mspti_26x"]), r["enum_name"]
        assert c.names_8x == split(r["function_names_cann_8x"]), r["enum_name"]


def test_result_codes_and_strings():
    res = {code: (name, text) for code, name, text in _native.results()}
    assert sorted(res) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 999]
    assert res[2][0] == "MSPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
    assert res[6] == ("MSPTI_ERROR_WITHOUT_LD_PRELOAD", "The operation requires LD_PRELOAD injection.")
    assert res[999][1] == "An unknown internal error has occurred."


@pytest.mark.parametrize("name,expected", [("runtime", 1), ("hccl", 2), ("MSPTI_CB_DOMAIN_HCCL", 2)])
def test_domain_values(name, expected):
    assert catalog.resolve(name) == (expected, None)


# ------------------------------------------------------------------------------------------------
# The simulated tree's own MSPTI headers (DIR/include/mspti, from rust/sim/cann/include/mspti),
# compiled: every struct as the reference lays it out, every declared name usable from C.

REFERENCE = ROOT / "docs" / "reference.md"
HEADERS = ("mspti.h", "mspti_result.h", "mspti_callback.h", "mspti_cbid.h", "mspti_activity.h")


def reference_records() -> dict[str, tuple[int, dict[str, int]]]:
    """docs/reference.md's record table: per struct, its size and each field's offset."""
    rows = {}
    for line in REFERENCE.read_text().splitlines():
        m = re.match(r"\| (msptiActivity\w*) \([^)]*\) \| (\d+) \| (.*) \|$", line)
        if m:
            fields = {f: int(o) for f, o in re.findall(r"(\w+)(?: [\w*]+)?@(\d+)", m[3])}
            rows[m[1]] = (int(m[2]), fields)
    return rows


def callback_reference() -> dict[str, int]:
    """docs/reference.md's msptiCallbackData table: each field's offset."""
    text = REFERENCE.read_text().split("## Callback data", 1)[1].split("\n## ", 1)[0]
    return {f: int(o) for o, f in re.findall(r"^\| (\d+) \| (\w+) \|", text, re.M)}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    from mspti_lens.sim import cann

    return cann.write_tree(tmp_path_factory.mktemp("layout") / "toolkit")


def compile_and_run(tree, src: str, where: Path) -> str:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    c = where / "prog.c"
    c.write_text(src)
    exe = where / "prog"
    cmd = ["gcc", "-std=c11", "-I", str(tree.root / "include"), "-o", str(exe), str(c)]
    cmd += [f"-L{tree.lib64}", "-lmspti", f"-Wl,-rpath,{tree.lib64}"]
    build = subprocess.run(cmd, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_trees_headers_lay_out_every_struct_as_the_reference_and_the_rust_abi(tree, tmp_path):
    records = reference_records()
    assert len(records) == 9  # kinds 1-9; ACL_API, NODE_API and RUNTIME_API are msptiActivityApi
    cb = callback_reference()
    assert len(cb) == 9
    prints = ['printf("msptiCallbackData size %zu\\n", sizeof(msptiCallbackData));']
    prints += [f'printf("msptiCallbackData {f} %zu\\n", offsetof(msptiCallbackData, {f}));' for f in cb]
    for st, (_, fields) in records.items():
        prints.append(f'printf("{st} size %zu\\n", sizeof({st}));')
        prints += [f'printf("{st} {f} %zu\\n", offsetof({st}, {f}));' for f in fields]
    for st in ("msptiActivity", "msptiObjectId"):
        prints.append(f'printf("{st} size %zu\\n", sizeof({st}));')
    src = "#include <stddef.h>\n#include <stdio.h>\n#include <mspti/mspti.h>\nint main(void) {\n"
    src += "\n".join(prints) + "\nreturn 0;\n}\n"
    got: dict[str, dict[str, int]] = {}
    for line in compile_and_run(tree, src, tmp_path).splitlines():
        st, field, value = line.split()
        got.setdefault(st, {})[field] = int(value)
    for st, (size, fields) in records.items():
        assert got[st] == {"size": size, **fields}, st
    assert got["msptiActivity"]["size"] == got["msptiObjectId"]["size"] == 8
    # The Rust abi crate's msptiCallbackData, which the simulator fills and mspti-lens reads.
    assert got["msptiCallbackData"] == {**cb, "size": 72} == _native.callback_data_layout()


def declared_names() -> dict[str, list[str]]:
    """Every type, enum constant, macro and function the tree's MSPTI headers declare."""
    text = ""
    for h in HEADERS:
        body = (INCLUDE / h).read_text()
        text += re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    names = {
        "functions": re.findall(r"^(?:msptiResult|bool) (mspti\w+)\(", text, re.M),
        "types": re.findall(r"^} (\w+);", text, re.M)
        + re.findall(r"^typedef [^;({\n]*?\*?(\w+);", text, re.M),
        "callback types": re.findall(r"^typedef void ?\(\*(\w+)\)", text, re.M),
        "constants": re.findall(r"^\s+(MSPTI_\w+)(?: =|,|$)", text, re.M),
        "macros": re.findall(r"^#define (MSPTI_INVALID_\w+)", text, re.M),
    }
    return names


INCLUDE = ROOT / "rust" / "sim" / "cann" / "include" / "mspti"


def test_a_c_program_using_every_declared_name_builds_and_links_against_the_tree(tree, tmp_path):
    names = declared_names()
    # What MSPTI 26.1 declares: 15 functions, 13 enums, 12 structs and a union, 2 more typedefs,
    # 3 function-pointer types, the enum constants.
    assert len(names["functions"]) == 15, names["functions"]
    assert {"msptiSubscribe", "msptiActivityIsEnabled", "msptiActivityPopExternalCorrelationId"} <= set(
        names["functions"]
    )
    assert len(set(names["types"])) == 27, sorted(names["types"])
    assert len(names["callback types"]) == 3
    assert len(set(names["constants"])) == 130
    lines = [f"    (void){c};" for c in names["constants"]]
    lines += [f"    (void)sizeof({t});" for t in set(names["types"]) | set(names["callback types"])]
    lines += [f"    (void){m};" for m in names["macros"]]
    lines += [f"    fns[{i}] = (void (*)(void)){f};" for i, f in enumerate(names["functions"])]
    src = (
        "#include <stdio.h>\n#include <mspti/mspti.h>\nint main(void) {\n"
        f"    static void (*volatile fns[{len(names['functions'])}])(void);\n"
        + "\n".join(lines)
        + '\n    printf("%d\\n", (int)MSPTI_CBID_RUNTIME_SIZE);\n    return fns[0] == NULL;\n}\n'
    )
    # Linked against the tree's libmspti.so (the simulator): every declared function is there.
    assert compile_and_run(tree, src, tmp_path).strip() == "37"
