"""Findings of a notebook audit of the device and run views, checked on the objects themselves:
a mistyped activity kind, the kernel's launcher logo, the stragglers table's order and folding,
and the timeline's coinciding lines. The on-screen findings are in test_browser.py."""

from __future__ import annotations

import pytest


def test_a_mistyped_activity_kind_gets_did_you_mean_in_one_short_line():
    from mspti_lens import Session

    with pytest.raises(ValueError) as e:
        Session(library="sim", enable=[], activity=["kernal"])
    text = str(e.value)
    assert text.startswith("unknown activity kind 'kernal'; did you mean 'kernel'? (valid kinds: kernel, ")
    assert "\n" not in text and len(text) < 200, text
