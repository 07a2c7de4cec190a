"""The hand-written type stubs of the native module match it (mypy's stubtest)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # mypy's stubtest


def test_native_stubs_match_the_module():
    pytest.importorskip("mypy")
    r = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "mspti_lens._native"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
