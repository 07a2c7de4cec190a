"""The simulated CANN tree (``python -m mspti_lens.sim cann DIR``): its layout, its errors, and a
program built against it running with and without libmspti.so preloaded."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mspti_lens.sim import cann

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mspti_lens.sim", "cann", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> cann.CannTree:
    root = tmp_path_factory.mktemp("cann") / "toolkit"
    out = run_cli(str(root))
    assert out.returncode == 0, out.stderr
    assert "source" in out.stdout and str(root / "set_env.sh") in out.stdout
    return cann.CannTree(root)


def test_the_tree_has_the_libraries_and_headers_programs_use(tree: cann.CannTree) -> None:
    lib64 = tree.lib64
    for name in (*cann.LIBRARIES, "libmspti.so", "libascend_hal.so"):
        assert (lib64 / name).is_file(), name
    # The driver is the simulator under a second name: one inode, so one device per process.
    assert os.readlink(lib64 / "libascend_hal.so") == "libmspti.so"
    assert (lib64 / "libascend_hal.so").stat().st_ino == (lib64 / "libmspti.so").stat().st_ino
    inc = tree.root / "include"
    for h in (
        "acl/acl.h",
        "acl/acl_prof.h",
        "aclnnop/aclnn_add.h",
        "aclnn/acl_meta.h",
        "hccl/hccl.h",
        "hccl/hccl_types.h",
        "mstx/ms_tools_ext.h",
        "securec.h",
        "mspti/mspti.h",
        "mspti/mspti_activity.h",
    ):
        assert (inc / h).is_file(), h
    # The MSPTI headers are the project's own, under its licence, which they carry.
    headers = ["mspti.h", "mspti_activity.h", "mspti_callback.h", "mspti_cbid.h", "mspti_result.h"]
    assert sorted(p.name for p in (inc / "mspti").iterdir()) == headers
    for h in headers:
        assert "2026 mspti-lens contributors. MIT License." in (inc / "mspti" / h).read_text(), h


def test_set_env_exports_what_cann_set_env_does(tree: cann.CannTree) -> None:
    script = f"source {tree.set_env} && env"
    env0 = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env0)
    assert out.returncode == 0, out.stderr
    env = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    assert env["ASCEND_HOME_PATH"] == str(tree.root) == env["ASCEND_TOOLKIT_HOME"]
    assert env["LD_LIBRARY_PATH"] == str(tree.lib64)
    assert env["PYTHONPATH"] == str(tree.root / "python" / "site-packages")
    assert env["PATH"].split(":")[0] == str(tree.root / "bin")
    # The Python view of the same file agrees with it.
    assert tree.environ(env0)["PATH"] == env["PATH"]


def test_a_non_empty_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    out = run_cli(str(tmp_path))
    assert out.returncode == 2
    assert "exists and is not empty" in out.stderr and "new or empty directory" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_a_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("")
    out = run_cli(str(f))
    assert out.returncode == 2 and "is not a directory" in out.stderr


def test_an_unwritable_directory_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        # Root may write to a mode-0500 directory; nobody can create one in /proc.
        target = locked / "toolkit" if os.geteuid() != 0 else Path("/proc/mspti-lens-cann")
        out = run_cli(str(target))
        assert out.returncode == 2 and "is not writable" in out.stderr, out.stderr
        assert not target.exists()
    finally:
        locked.chmod(0o700)


PROGRAM = textwrap.dedent(
    r"""
    #include <stdio.h>
    #include <string.h>
    #include "acl/acl.h"
    #include "aclnnop/aclnn_add.h"
    #include "hccl/hccl.h"
    #include "mspti.h"

    static int enters, exits;
    static char names[4096];

    static void cb(void *u, msptiCallbackDomain d, msptiCallbackId id, const msptiCallbackData *info)
    {
        (void)u; (void)d; (void)id;
        if (info->callbackSite == MSPTI_API_ENTER) {
            enters++;
            strncat(names, info->functionName, sizeof names - strlen(names) - 2);
            strcat(names, " ");
        } else {
            exits++;
        }
    }

    int main(void)
    {
        msptiSubscriberHandle s;
        int sub = msptiSubscribe(&s, cb, NULL);
        int en = msptiEnableDomain(1, s, MSPTI_CB_DOMAIN_RUNTIME);
        int en2 = msptiEnableDomain(1, s, MSPTI_CB_DOMAIN_HCCL);
        aclrtStream stream;
        void *a, *b, *c;
        float x[4] = {1, 2, 3, 4}, y[4] = {10, 20, 30, 40}, z[4];
        int64_t shape[1] = {4}, stride[1] = {1};
        float one = 1.0f;
        if (aclrtSetDevice(0) || aclrtCreateStream(&stream) || aclInit(NULL)) return 10;
        if (aclrtMalloc(&a, 16, ACL_MEM_MALLOC_HUGE_FIRST) || aclrtMalloc(&b, 16, ACL_MEM_MALLOC_HUGE_FIRST)
            || aclrtMalloc(&c, 16, ACL_MEM_MALLOC_HUGE_FIRST)) return 11;
        aclrtMemcpy(a, 16, x, 16, ACL_MEMCPY_HOST_TO_DEVICE);
        aclrtMemcpy(b, 16, y, 16, ACL_MEMCPY_HOST_TO_DEVICE);
        aclTensor *ta = aclCreateTensor(shape, 1, ACL_FLOAT, stride, 0, ACL_FORMAT_ND, shape, 1, a);
        aclTensor *tb = aclCreateTensor(shape, 1, ACL_FLOAT, stride, 0, ACL_FORMAT_ND, shape, 1, b);
        aclTensor *tc = aclCreateTensor(shape, 1, ACL_FLOAT, stride, 0, ACL_FORMAT_ND, shape, 1, c);
        aclScalar *alpha = aclCreateScalar(&one, ACL_FLOAT);
        uint64_t ws = 0;
        aclOpExecutor *ex;
        if (aclnnAddGetWorkspaceSize(ta, tb, alpha, tc, &ws, &ex)) return 12;
        if (aclnnAdd(NULL, ws, ex, stream)) return 12;
        if (aclrtSynchronizeStream(stream)) return 13;
        aclrtMemcpy(z, 16, c, 16, ACL_MEMCPY_DEVICE_TO_HOST);
        HcclComm comms[2];
        int32_t devs[2] = {0, 1};
        if (HcclCommInitAll(2, devs, comms)) return 14;
        if (HcclAllReduce(c, c, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comms[0], stream)) return 15;
        aclrtMemcpy(z + 0, 16, c, 16, ACL_MEMCPY_DEVICE_TO_HOST);
        printf("result %g %g %g %g\n", z[0], z[1], z[2], z[3]);
        printf("subscribe %d enable %d %d enters %d exits %d\n", sub, en, en2, enters, exits);
        printf("names %s\n", names);
        msptiUnsubscribe(s);
        return 0;
    }
    """
)


@pytest.fixture(scope="module")
def program(tree: cann.CannTree, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("prog")
    src = d / "prog.c"
    src.write_text(PROGRAM)
    inc = tree.root / "include"
    libs = [str(tree.lib64 / n) for n in ("libascendcl.so", "libnnopbase.so", "libopapi.so", "libhccl.so")]
    out = subprocess.run(
        ["cc", "-std=gnu11", "-o", str(d / "prog"), str(src), f"-I{inc}", f"-I{inc}/mspti", *libs,
         str(tree.mspti), "-Wl,--no-as-needed"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return d / "prog"


def run_program(tree: cann.CannTree, program: Path, preload: bool) -> dict[str, str]:
    env = tree.environ()
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = str(tree.mspti)
    out = subprocess.run([str(program)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.stdout.splitlines()}


def test_a_program_preloading_libmspti_reaches_its_interception(tree: cann.CannTree, program: Path) -> None:
    got = run_program(tree, program, preload=True)
    # The operator computed its result on the simulated device's memory; the all-reduce over two
    # ranks contributing the same data doubled it.
    assert got["result"] == "22 44 66 88"
    assert got["subscribe"].startswith("0 enable 0 0")
    names = got["names"].split()
    # Every runtime and HCCL call of the program, including the launch aclnnAdd makes inside
    # libopapi.so through the public symbol, in call order (aclInit is no callback of MSPTI's).
    assert names == [
        "aclrtSetDevice", "aclrtCreateStream", "aclrtMalloc", "aclrtMalloc", "aclrtMalloc", "aclrtMemcpy",
        "aclrtMemcpy", "aclrtLaunchKernelWithHostArgs", "aclrtSynchronizeStream", "aclrtMemcpy",
        "HcclAllReduce", "aclrtMemcpy",
    ]  # fmt: skip
    assert got["subscribe"].endswith(f"enters {len(names)} exits {len(names)}")


def test_without_the_preload_the_program_runs_and_nothing_is_delivered(
    tree: cann.CannTree, program: Path
) -> None:
    got = run_program(tree, program, preload=False)
    assert got["result"] == "22 44 66 88"
    # The program's calls bind to libascendcl.so and libhccl.so, linked before libmspti.so:
    # MSPTI's wrappers never run, so no callback is delivered; and the tree's libmspti.so, as
    # MSPTI 26.x's (callback_manager.cpp), says so: the enable calls give 6 without the preload.
    assert got["subscribe"] == "0 enable 6 6 enters 0 exits 0"
    assert got.get("names", "") == ""


def test_the_log_library_writes_to_the_plog_directory_not_to_the_program(
    tree: cann.CannTree, tmp_path: Path
) -> None:
    code = textwrap.dedent(
        f"""
        import ctypes, os
        lib = ctypes.CDLL({str(tree.lib64 / "libascendalog.so")!r})
        assert os.path.isdir(os.environ["ASCEND_PROCESS_LOG_PATH"])   # created when loaded
        print(lib.CheckLogLevelForC(0, 1), lib.CheckLogLevelForC(0, 3))
        lib.DlogInnerForC(0, 3, b"disk %s full", b"sda")
        lib.DlogInnerForC(0, 1, b"below the threshold")
        """
    )
    logs = tmp_path / "plog-root"
    env = {**os.environ, "ASCEND_PROCESS_LOG_PATH": str(logs)}
    env.pop("ASCEND_GLOBAL_LOG_LEVEL", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1"] and out.stderr == ""
    files = list((logs / "debug" / "plog").glob("plog-*.log"))
    assert len(files) == 1
    text = files[0].read_text()
    assert "[ERROR]" in text and "disk sda full" in text and "below the threshold" not in text


def test_mstx_reaches_a_loaded_libmspti_only(tree: cann.CannTree) -> None:
    ext = ctypes.CDLL(str(tree.lib64 / "libms_tools_ext.so"))
    ext.mstxRangeStartA.restype = ctypes.c_uint64
    ext.mstxRangeStartA.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    # No libmspti.so of this tree is loaded in this process: MSTX calls are no-ops returning 0.
    assert ext.mstxRangeStartA(b"r", None) == 0


def test_an_interposed_function_without_its_library_fails_with_an_error_once(
    tree: cann.CannTree, tmp_path: Path
) -> None:
    """Preloaded where no libascendcl.so can be found, a wrapper returns ACL_ERROR_INTERNAL_ERROR
    and says once what is missing, where upstream's would throw."""
    code = "import ctypes; f = ctypes.CDLL(None).aclrtSetDevice; print(f(0), f(0))"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_") and k != "LD_LIBRARY_PATH"}
    env.update(LD_PRELOAD=str(tree.mspti), ASCEND_HOME_PATH=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["500000", "500000"]
    assert out.stderr.count("aclrtSetDevice not found in libascendcl.so") == 1
