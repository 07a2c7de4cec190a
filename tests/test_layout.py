"""The C ABI as compiled matches the real headers (docs/reference.md, "Result codes" and "Callback
data"; tests/data/reference/cbids.csv)."""

from __future__ import annotations

import csv

import pytest

from mspti_lens import _native, catalog

from conftest import DATA


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
