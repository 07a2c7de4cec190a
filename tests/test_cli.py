"""`python -m mspti_lens doctor` and `install-kernel`, run as the user runs them (subprocesses with
a controlled environment), plus the doctor's subscriber check in-process with a simulated fault."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

import pytest

from mspti_lens import simulator_path
from mspti_lens.sim import Simulator

SIM = str(simulator_path())


def cli(*args: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ASCEND_", "MSPTI_")) and k not in ("LD_PRELOAD", "JUPYTER_PATH")
    }
    base.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "mspti_lens", *args],
        env=base,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def fake_cann(tmp_path):
    """A CANN-like tree whose lib64/libmspti.so is (a copy of) the simulator."""
    root = tmp_path / "Ascend" / "cann"
    (root / "lib64").mkdir(parents=True)
    lib = root / "lib64" / "libmspti.so"
    shutil.copy(SIM, lib)
    return root, lib


# -- doctor -----------------------------------------------------------------------------------------
def test_doctor_without_a_library_says_so_and_how_to_fix_it():
    r = cli("doctor")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "[FAIL] libmspti.so: no real libmspti.so found" in r.stdout
    assert "set_env.sh" in r.stdout and "MSPTI_LIBRARY" in r.stdout  # the fix
    assert "[  ok] subscriber slot: free" in r.stdout
    assert "CANN's `mspti` Python package: not installed" in r.stdout
    assert "A Session here would use: SIMULATED" in r.stdout


def test_doctor_finds_cann_and_checks_ld_preload(fake_cann):
    root, lib = fake_cann
    r = cli("doctor", env={"ASCEND_HOME_PATH": str(root)})
    assert f"[  ok] libmspti.so: libmspti.so at {lib} (CANN location)" in r.stdout, r.stdout
    assert "[FAIL] LD_PRELOAD: LD_PRELOAD is not set" in r.stdout
    assert f"LD_PRELOAD={lib} python" in r.stdout and "install-kernel" in r.stdout
    assert r.returncode == 1

    r = cli("doctor", env={"ASCEND_HOME_PATH": str(root), "LD_PRELOAD": str(lib)})
    assert (
        "preloaded" in r.stdout
        and f"[  ok] LD_PRELOAD: this process was started with LD_PRELOAD of {lib}" in r.stdout
    )
    assert r.returncode == 0, r.stdout
    assert "result: ready" in r.stdout


def test_doctor_reports_which_mspti_package_would_import(tmp_path):
    pkg = tmp_path / "site" / "mspti"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("# CANN's monitors\n")
    r = cli("doctor", "--library", "sim", env={"PYTHONPATH": str(tmp_path / "site")})
    assert f"`import mspti` loads {pkg / '__init__.py'}" in r.stdout, r.stdout
    assert "mspti_lens" in r.stdout and "subscriber slot" in r.stdout


def test_doctor_reports_a_taken_subscriber_slot():
    from mspti_lens import doctor

    sim = Simulator()
    sim.reset()
    sim.set_fault("msptiSubscribe", 2)  # what the library returns when another subscriber exists
    try:
        results = {c.name: c for c in doctor.checks("sim")}
    finally:
        sim.reset()
    slot = results["subscriber slot"]
    assert slot.status == "FAIL" and "taken" in slot.detail
    assert "torch_npu" in slot.detail or "msMonitor" in slot.detail  # who may hold it
    assert slot.fix and "one subscriber" in slot.fix
    assert not sim.subscribed


def test_doctor_bad_library_path():
    r = cli("doctor", "--library", "/no/such/libmspti.so")
    assert r.returncode == 2 and "no such file" in r.stderr


# -- install-kernel -----------------------------------------------------------------------------------
def test_install_kernel_writes_a_preloading_kernelspec(fake_cann, tmp_path):
    root, lib = fake_cann
    prefix = tmp_path / "prefix"
    env = {
        "ASCEND_HOME_PATH": str(root),
        "ASCEND_OPP_PATH": str(root / "opp"),
        "LD_LIBRARY_PATH": f"{root}/lib64:/usr/lib",
        "PYTHONPATH": f"{root}/python/site-packages",
    }
    r = cli("install-kernel", "--prefix", str(prefix), "--name", "lens-test", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    spec_file = prefix / "share" / "jupyter" / "kernels" / "lens-test" / "kernel.json"
    spec = json.loads(spec_file.read_text())
    assert spec["argv"][:3] == [sys.executable, "-m", "ipykernel_launcher"]
    e = spec["env"]
    assert e["LD_PRELOAD"] == str(lib) and e["MSPTI_LIBRARY"] == str(lib)
    assert e["ASCEND_HOME_PATH"] == str(root) and e["ASCEND_OPP_PATH"] == str(root / "opp")
    assert e["LD_LIBRARY_PATH"].startswith(f"{root}/lib64")
    assert e["PYTHONPATH"] == f"{root}/python/site-packages"
    assert spec["metadata"]["mspti_lens"]["simulated"] is False
    assert "libmspti preloaded" in spec["display_name"]
    assert f"LD_PRELOAD={lib}" in r.stdout

    # Jupyter sees it.
    from jupyter_client.kernelspec import KernelSpecManager

    ksm = KernelSpecManager(kernel_dirs=[str(prefix / "share" / "jupyter" / "kernels")])
    assert ksm.get_kernel_spec("lens-test").env["LD_PRELOAD"] == str(lib)


def test_kernel_started_from_the_spec_is_preloaded(tmp_path):
    """Start the kernelspec's command line with its env, as Jupyter would: the kernel process has
    the library mapped and the extension reports it as preloaded."""
    prefix = tmp_path / "p"
    r = cli("install-kernel", "--library", "sim", "--prefix", str(prefix), "--display-name", "Lens sim")
    assert r.returncode == 0, r.stderr
    spec = json.loads((prefix / "share/jupyter/kernels/mspti-lens/kernel.json").read_text())
    assert spec["display_name"] == "Lens sim" and spec["metadata"]["mspti_lens"]["simulated"] is True
    env = {**os.environ, **spec["env"]}
    code = (
        "import os; maps = open('/proc/self/maps').read(); "
        "print('mapped', os.environ['LD_PRELOAD'] in maps); "
        "from mspti_lens import doctor; print(doctor._preloaded(os.environ['MSPTI_LIBRARY']))"
    )
    out = subprocess.run([spec["argv"][0], "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["mapped", "True", "True"], out.stdout + out.stderr


def test_install_kernel_without_a_library_installs_the_simulators_kernel_and_says_so(tmp_path):
    r = cli("install-kernel", "--prefix", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    first, *_, last = r.stdout.strip().splitlines()
    assert first.startswith("SIMULATED: no libmspti.so found (tried ") and "set_env.sh" in first
    assert "--library /path/to/libmspti.so" in first
    assert last.startswith("SIMULATED: ") and "preloads the simulator" in last
    spec = json.loads((tmp_path / "share/jupyter/kernels/mspti-lens/kernel.json").read_text())
    assert spec["metadata"]["mspti_lens"]["simulated"] is True and "SIMULATOR" in spec["display_name"]
    assert os.path.samefile(spec["env"]["LD_PRELOAD"], SIM)
    # a library that was named and is not there is still an error, not a simulator
    r = cli("install-kernel", "--library", "/no/such/libmspti.so", "--prefix", str(tmp_path / "p"))
    assert r.returncode == 2 and "no such file" in r.stderr and not (tmp_path / "p").exists()


def test_install_kernel_rejects_a_bad_name(tmp_path):
    r = cli("install-kernel", "--library", "sim", "--prefix", str(tmp_path), "--name", "bad name!")
    assert r.returncode == 2 and "invalid kernel name" in r.stderr


def test_main_functions_take_the_cli_namespace(tmp_path, capsys):
    from mspti_lens import kernelspec

    ns = argparse.Namespace(library="sim", name="ns-test", display_name=None, user=True, prefix=str(tmp_path))
    assert kernelspec.main(ns) == 0
    assert "SIMULATOR preloaded" in capsys.readouterr().out
