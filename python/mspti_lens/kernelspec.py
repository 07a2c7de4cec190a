"""``python -m mspti_lens install-kernel``: a Jupyter kernel that starts with libmspti.so preloaded.

MSPTI intercepts ``aclrt*`` / ``Hccl*`` by symbol interposition, so the kernel process must start
with ``LD_PRELOAD`` naming ``libmspti.so``; a running kernel cannot be fixed after the fact. The
kernelspec written here runs this Python's ipykernel with that ``LD_PRELOAD``, ``MSPTI_LIBRARY``
pointing at the same file, and the CANN environment of the installing shell (``ASCEND_*``,
``LD_LIBRARY_PATH``, ``PYTHONPATH``, ... as ``set_env.sh`` left them).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from .backend import simulator_path
from .doctor import find_library

CANN_PREFIXES = ("ASCEND_", "HCCL_", "ACL_", "MSPTI_")
CANN_NAMES = (
    "TOOLCHAIN_HOME",
    "ASCEND_HOME_PATH",
    "ASCEND_TOOLKIT_HOME",
    "ASCEND_OPP_PATH",
    "ASCEND_AICPU_PATH",
)
PATH_VARS = ("LD_LIBRARY_PATH", "PYTHONPATH", "PATH")


def cann_env(library: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment the kernel needs: LD_PRELOAD and MSPTI_LIBRARY of ``library``, the CANN
    variables of ``environ`` (default: this process), and ASCEND_HOME_PATH / LD_LIBRARY_PATH
    derived from the library's location when the shell had none."""
    env_in = dict(os.environ if environ is None else environ)
    env: dict[str, str] = {}
    for k, v in env_in.items():
        if k.startswith(CANN_PREFIXES) or k in CANN_NAMES:
            env[k] = v
    lib = os.path.abspath(library)
    libdir = os.path.dirname(lib)
    roots: list[str | None] = [env.get("ASCEND_HOME_PATH"), env.get("ASCEND_TOOLKIT_HOME")]
    if not any(roots) and os.path.basename(libdir) == "lib64":
        env["ASCEND_HOME_PATH"] = os.path.dirname(libdir)
        roots = [env["ASCEND_HOME_PATH"]]
    markers = [r for r in roots if r] + ["Ascend"]
    for k in PATH_VARS:
        pv = env_in.get(k)
        if pv and any(m in pv for m in markers):
            env[k] = pv
    ld = env.get("LD_LIBRARY_PATH", env_in.get("LD_LIBRARY_PATH", ""))
    if libdir not in ld.split(":"):
        env["LD_LIBRARY_PATH"] = ":".join(p for p in (libdir, ld) if p)
    env["LD_PRELOAD"] = lib
    env["MSPTI_LIBRARY"] = lib
    return env


def kernel_json(library: str, display_name: str, environ: dict[str, str] | None = None) -> dict:
    simulated = os.path.realpath(library) == os.path.realpath(simulator_path())
    return {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": display_name,
        "language": "python",
        "env": cann_env(library, environ),
        "metadata": {
            "mspti_lens": {"library": os.path.abspath(library), "simulated": simulated},
            "debugger": True,
        },
    }


def install(
    library: str,
    name: str = "mspti-lens",
    display_name: str | None = None,
    *,
    user: bool = True,
    prefix: str | None = None,
) -> str:
    """Write and install the kernelspec; returns the directory it was installed to."""
    from jupyter_client.kernelspec import KernelSpecManager, _is_valid_kernel_name

    if not _is_valid_kernel_name(name):
        raise ValueError(f"invalid kernel name {name!r}: use letters, digits, '.', '_' and '-'")
    simulated = os.path.realpath(library) == os.path.realpath(simulator_path())
    display_name = display_name or (
        "Python (mspti-lens, SIMULATOR preloaded)" if simulated else "Python (mspti-lens, libmspti preloaded)"
    )
    spec = kernel_json(library, display_name)
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
        return KernelSpecManager().install_kernel_spec(
            tmp, kernel_name=name, user=user and prefix is None, prefix=prefix
        )


def main(args) -> int:
    library = getattr(args, "library", None)
    path, how, tried = find_library(library)
    if path is None:
        raise ValueError(
            "no libmspti.so found (tried " + ", ".join(tried) + "). Run `source <CANN>/set_env.sh` first or "
            "pass --library /path/to/libmspti.so (--library sim preloads the bundled simulator, for testing)"
        )
    dest = install(
        path,
        args.name,
        getattr(args, "display_name", None),
        user=bool(getattr(args, "user", True)),
        prefix=getattr(args, "prefix", None),
    )
    spec = json.loads(Path(dest, "kernel.json").read_text())
    print(f"installed kernelspec {args.name!r} ({spec['display_name']}) in {dest}")
    print(f"  library: {path} ({how})")
    print(f"  LD_PRELOAD={spec['env']['LD_PRELOAD']}")
    extra = sorted(k for k in spec["env"] if k not in ("LD_PRELOAD",))
    print(f"  environment: {', '.join(extra)}")
    print(
        f"Pick '{spec['display_name']}' as the kernel in Jupyter; `%load_ext mspti_lens` then reports it "
        "preloaded."
    )
    return 0
