"""The hand-written type stubs of the native module match it (mypy's stubtest)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # mypy's stubtest


# The stub names no third-party type, but mypy follows the package's imports into polars,
# matplotlib and IPython: analysing them took three quarters of stubtest's 8 s.
THIRD_PARTY_SKIPPED = """[mypy]
[mypy-polars.*,numpy.*,matplotlib.*,IPython.*,pyarrow.*,ipywidgets.*,traitlets.*]
follow_imports = skip
ignore_missing_imports = true
"""


def test_native_stubs_match_the_module(tmp_path):
    pytest.importorskip("mypy")
    config = tmp_path / "stubtest.ini"
    config.write_text(THIRD_PARTY_SKIPPED)
    r = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "--mypy-config-file", str(config), "mspti_lens._native"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
