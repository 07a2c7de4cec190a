"""The wheel carries the simulator next to the extension, so `pip install mspti-lens` runs anywhere."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT


@pytest.mark.slow
def test_the_wheel_ships_the_simulator(tmp_path):
    maturin = shutil.which("maturin", path=str(Path(sys.executable).parent)) or shutil.which("maturin")
    if maturin is None:
        pytest.skip("maturin is not installed")
    assert (ROOT / "python" / "mspti_lens" / "sim" / "libmspti_sim.so").exists(), "run `make sim` first"
    r = subprocess.run(
        [maturin, "build", "--release", "--quiet", "-o", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "VIRTUAL_ENV": str(Path(sys.executable).parents[1])},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = tmp_path.glob("mspti_lens-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "mspti_lens/sim/libmspti_sim.so" in names
    assert any(n.startswith("mspti_lens/_native") and n.endswith(".so") for n in names)
    assert "mspti_lens/_native.pyi" in names and "mspti_lens/py.typed" in names
