"""mspti-lens on the machine path, against a simulated CANN tree: after ``source DIR/set_env.sh``
the doctor passes and finds DIR/lib64/libmspti.so as it would CANN's, ``install-kernel``'s kernel
starts with that LD_PRELOAD and ``%%mspti`` in it records the ACL calls a cell makes through
libascendcl, and ``record`` of a job whose ranks call libascendcl and libhccl merges exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import mspti_lens
from mspti_lens.sim import cann

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parents[1]  # tests/
STANDIN = HERE / "data" / "torch_standin"
MALLOCS = 5
ALLREDUCES = 3

# ACL and HCCL calls as a linked program makes them: the libraries in the global namespace, the
# functions looked up there, so a preloaded libmspti.so's wrappers come first.
CALLS = textwrap.dedent(
    f"""
    import ctypes, os
    lib64 = os.path.join(os.environ["ASCEND_HOME_PATH"], "lib64")
    for name in ("libascendcl.so", "libhccl.so"):
        ctypes.CDLL(os.path.join(lib64, name), mode=ctypes.RTLD_GLOBAL)
    cann = ctypes.CDLL(None)
    rank = int(os.environ.get("RANK", "0"))
    assert cann.aclrtSetDevice(rank) == 0
    stream = ctypes.c_void_p()
    assert cann.aclrtCreateStream(ctypes.byref(stream)) == 0
    ptrs = []
    for _ in range({MALLOCS}):
        p = ctypes.c_void_p()
        assert cann.aclrtMalloc(ctypes.byref(p), ctypes.c_size_t(4096), 0) == 0
        ptrs.append(p)
    for p in ptrs:
        assert cann.aclrtFree(p) == 0
    """
)
HCCL = textwrap.dedent(
    f"""
    comm = ctypes.c_void_p()
    root = ctypes.create_string_buffer(b"group_name_0", 4108)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    assert cann.HcclCommInitRootInfo(world, root, rank, ctypes.byref(comm)) == 0
    buf = ctypes.c_void_p()
    assert cann.aclrtMalloc(ctypes.byref(buf), ctypes.c_size_t(4096), 0) == 0
    for _ in range({ALLREDUCES}):
        assert cann.HcclAllReduce(buf, buf, ctypes.c_uint64(1024), 4, 0, comm, stream) == 0
    assert cann.aclrtSynchronizeStream(stream) == 0
    """
)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> cann.CannTree:
    return cann.write_tree(tmp_path_factory.mktemp("machine") / "toolkit")


# Variables of this process that a user's shell would not pass to the tree's programs.
OWN = ("LD_PRELOAD", "LD_LIBRARY_PATH", "JUPYTER_PATH")


def sourced(tree: cann.CannTree, **extra: str) -> dict[str, str]:
    """This process's environment, without its own CANN or MSPTI settings, after ``source set_env.sh``."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ASCEND_", "MSPTI_"))
        and k not in ("LD_PRELOAD", "LD_LIBRARY_PATH", "JUPYTER_PATH")
    }
    out = subprocess.run(
        ["bash", "-c", f"source {tree.set_env} && env -0"],
        capture_output=True,
        text=True,
        env=base,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    env = dict(item.split("=", 1) for item in out.stdout.split("\0") if "=" in item)
    env.update(extra)
    return env


def lens(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mspti_lens", *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_doctor_finds_the_trees_libmspti_and_passes_when_it_is_preloaded(tree: cann.CannTree) -> None:
    plain = lens("doctor", env=sourced(tree))
    # Found where CANN's would be; without the preload the doctor says what to do, as on a machine.
    assert f"libmspti.so at {tree.mspti} (CANN location)" in plain.stdout, plain.stdout
    assert plain.returncode == 1 and f"LD_PRELOAD={tree.mspti}" in plain.stdout
    preloaded = lens("doctor", env=sourced(tree, LD_PRELOAD=str(tree.mspti)))
    assert preloaded.returncode == 0, preloaded.stdout + preloaded.stderr
    assert f"libmspti.so at {tree.mspti}" in preloaded.stdout and "result: ready" in preloaded.stdout


def test_a_cell_of_the_installed_kernel_records_the_acl_calls_it_makes(
    tree: cann.CannTree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = tmp_path / "prefix"
    r = lens("install-kernel", "--prefix", str(prefix), "--name", "lens-cann", env=sourced(tree))
    assert r.returncode == 0, r.stdout + r.stderr
    spec = json.loads((prefix / "share/jupyter/kernels/lens-cann/kernel.json").read_text())
    assert spec["env"]["LD_PRELOAD"] == str(tree.mspti)
    assert spec["env"]["ASCEND_HOME_PATH"] == str(tree.root)

    from jupyter_client.manager import start_new_kernel

    monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    for k in [k for k in os.environ if k.startswith("ASCEND_") or k in ("LD_PRELOAD", "MSPTI_LIBRARY")]:
        monkeypatch.delenv(k)
    km, kc = start_new_kernel(kernel_name="lens-cann", startup_timeout=120)
    try:
        cells = [
            "%load_ext mspti_lens",
            "%%mspti -d runtime -o snap\n" + CALLS,
            "s = snap.summary(); print('CALLS', dict(zip(s['name'], s['num_calls'])))",
            "import os; print('PRELOAD', os.environ['LD_PRELOAD'] in open('/proc/self/maps').read())",
        ]
        out = []
        for code in cells:
            reply = kc.execute_interactive(
                code, timeout=120, output_hook=lambda m: out.append(m["content"].get("text", ""))
            )
            assert reply["content"]["status"] == "ok", (code, reply["content"], out)
        text = "".join(out)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert "PRELOAD True" in text
    calls = eval(text.split("CALLS ", 1)[1].splitlines()[0])  # a dict literal printed by the kernel
    assert calls == {
        "aclrtSetDevice": 1,
        "aclrtCreateStream": 1,
        "aclrtMalloc": MALLOCS,
        "aclrtFree": MALLOCS,
    }


def test_record_of_a_job_calling_libascendcl_and_libhccl_merges_exactly(
    tree: cann.CannTree, tmp_path: Path
) -> None:
    script = tmp_path / "rank.py"
    script.write_text(CALLS + HCCL)
    run_dir = tmp_path / "run"
    env = sourced(tree)
    env["PATH"] = os.pathsep.join([str(STANDIN / "bin"), str(Path(sys.executable).parent), env["PATH"]])
    ranks = 2
    r = lens(
        "record", "--out", str(run_dir), "--", "torchrun", f"--nproc_per_node={ranks}", str(script), env=env
    )
    assert r.returncode == 0, r.stdout + r.stderr
    run = mspti_lens.open_run(run_dir)
    s = run.summary()
    calls = dict(zip(s["name"], s["num_calls"]))
    assert calls["aclrtMalloc"] == ranks * (MALLOCS + 1)
    assert calls["aclrtFree"] == ranks * MALLOCS
    assert calls["HcclAllReduce"] == ranks * ALLREDUCES
    assert calls["aclrtSetDevice"] == calls["aclrtSynchronizeStream"] == ranks
    assert len(run.ranks()) == ranks
