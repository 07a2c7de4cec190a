"""``python -m mspti_lens install-kernel``: a Jupyter kernel that starts with libmspti.so preloaded.

MSPTI intercepts ``aclrt*`` / ``Hccl*`` by symbol interposition, so the kernel process must start
with ``LD_PRELOAD`` naming ``libmspti.so``; a running kernel cannot be fixed after the fact. The
kernelspec written here runs this Python's ipykernel with that ``LD_PRELOAD``, ``MSPTI_LIBRARY``
pointing at the same file, and the CANN environment of the installing shell (``ASCEND_*``,
``LD_LIBRARY_PATH``, ``PYTHONPATH``, ... as ``set_env.sh`` left them). Where no libmspti.so is
found it installs the simulator's kernel instead (named and announced as SIMULATED), so that
mspti-lens can be tried without an NPU.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
import zlib
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


# The launcher tile's logo (JupyterLab shows a kernelspec's logo-svg.svg, or logo-64x64.png):
# a histogram's bars, as the package keeps latencies, on a dark tile. One geometry, drawn as SVG
# and rasterised to the PNG sizes, in unit coordinates (0..1, y down).
LOGO_NAME = "mspti-lens"
LOGO_TILE = (0x1F, 0x3A, 0x5F)  # dark blue
LOGO_BAR = (0xF5, 0x9E, 0x0B)  # amber
LOGO_BARS = ((0.16, 0.62), (0.31, 0.30), (0.46, 0.18), (0.61, 0.42), (0.76, 0.66))  # (left, top)
LOGO_BAR_WIDTH = 0.11
LOGO_BASE = 0.84  # where the bars stand
LOGO_PNG_SIZES = (32, 64)


def _hex(rgb: tuple[int, int, int]) -> str:
    return "#" + "".join(f"{c:02x}" for c in rgb)


def logo_svg() -> str:
    """The logo as SVG (100 x 100 user units), titled mspti-lens."""
    bars = "".join(
        f"<rect x='{x * 100:g}' y='{top * 100:g}' width='{LOGO_BAR_WIDTH * 100:g}' "
        f"height='{(LOGO_BASE - top) * 100:g}' fill='{_hex(LOGO_BAR)}'/>"
        for x, top in LOGO_BARS
    )
    return (
        "<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 100 100' width='100' height='100'>"
        f"<title>{LOGO_NAME}</title>"
        f"<rect width='100' height='100' fill='{_hex(LOGO_TILE)}'/>{bars}</svg>\n"
    )


def logo_png(size: int) -> bytes:
    """The logo as a ``size`` x ``size`` RGB PNG (tEXt Title: mspti-lens), written without any
    imaging library: the kernelspec is installed where matplotlib may be missing."""
    rows = []
    for j in range(size):
        y = (j + 0.5) / size
        row = bytearray(b"\x00")  # filter type None
        for i in range(size):
            x = (i + 0.5) / size
            on_bar = y <= LOGO_BASE and any(
                left <= x < left + LOGO_BAR_WIDTH and y >= top for left, top in LOGO_BARS
            )
            row += bytes(LOGO_BAR if on_bar else LOGO_TILE)
        rows.append(bytes(row))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
        + chunk(b"tEXt", b"Title\x00" + LOGO_NAME.encode())
        + chunk(b"IDAT", zlib.compress(b"".join(rows), 9))
        + chunk(b"IEND", b"")
    )


def write_logos(folder: str | os.PathLike) -> list[str]:
    """The logo files of a kernelspec folder, by the names Jupyter looks for; their names."""
    names = ["logo-svg.svg"]
    Path(folder, "logo-svg.svg").write_text(logo_svg())
    for size in LOGO_PNG_SIZES:
        names.append(f"logo-{size}x{size}.png")
        Path(folder, names[-1]).write_bytes(logo_png(size))
    return names


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
        write_logos(tmp)  # the launcher tile's logo
        return KernelSpecManager().install_kernel_spec(
            tmp, kernel_name=name, user=user and prefix is None, prefix=prefix
        )


def main(args) -> int:
    library = getattr(args, "library", None)
    path, how, tried = find_library(library)
    fallback = None
    if path is None:  # no CANN here: the simulator's kernel, said so, rather than no kernel at all
        sim, how, _ = find_library("sim")
        path = sim or str(simulator_path())
        fallback = (
            "SIMULATED: no libmspti.so found (tried " + ", ".join(tried) + "), so this kernel preloads "
            "the mspti-lens simulator: every call it shows is simulated, not an NPU's. For the real "
            "library, `source <CANN>/set_env.sh` and run install-kernel again, or pass --library "
            "/path/to/libmspti.so"
        )
        print(fallback)
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
    if fallback:  # the last word too: the line above it reads like a real install
        print(f"SIMULATED: '{spec['display_name']}' preloads the simulator, not CANN's libmspti.so")
    return 0
