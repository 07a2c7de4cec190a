"""Check built wheels: each is an abi3 wheel for one architecture, carries the extension, its type
stubs, the bundled simulator and the project's licence (LICENSE in its .dist-info), every shared
object in it is an ELF file for that architecture, and the extension was built without the hooks
only tests and benchmarks call (cargo feature test-hooks).

Usage: python scripts/check_wheels.py WHEEL...   (exit 0 when every wheel passes; one line each)
"""

from __future__ import annotations

import struct
import sys
import zipfile
from pathlib import Path

# ELF e_machine values (System V gABI) of the architectures we build wheels for, by wheel platform tag.
MACHINES = {"x86_64": 62, "aarch64": 183}
BUNDLED_SIM = "mspti_lens/sim/libmspti_sim.so"
REQUIRED = (BUNDLED_SIM, "mspti_lens/_native.pyi", "mspti_lens/py.typed", "mspti_lens/__init__.py")
# The Python names of the test hooks: an extension that holds one was built with test-hooks.
TEST_HOOKS = (b"_bench_aggregate", b"_bench_complete", b"_pause_drain", b"_trip_without_waking")


def elf_machine(data: bytes) -> int | None:
    """e_machine of a 64-bit little-endian ELF file, or None for anything else."""
    if len(data) < 20 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    return struct.unpack_from("<H", data, 18)[0]


def wheel_arch(name: str) -> str:
    """The architecture of a wheel file name's platform tag (``..._x86_64.whl`` -> x86_64)."""
    platform = Path(name).stem.split("-")[-1]
    for arch in MACHINES:
        if platform.endswith(arch):
            return arch
    raise ValueError(f"{name}: platform tag {platform!r} is none of {', '.join(MACHINES)}")


def problems(wheel: Path) -> list[str]:
    """What is wrong with one wheel (empty when it is good)."""
    found: list[str] = []
    parts = wheel.name.split("-")
    if len(parts) < 5 or parts[-2] != "abi3":
        found.append(f"not an abi3 wheel: {wheel.name}")
    try:
        arch = wheel_arch(wheel.name)
    except ValueError as e:
        return [*found, str(e)]
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        found += [f"missing {n}" for n in REQUIRED if n not in names]
        if not any(n.split("/", 1)[0].endswith(".dist-info") and n.endswith("/LICENSE") for n in names):
            found.append("missing the licence: no LICENSE in the .dist-info")
        sos = [n for n in names if n.endswith(".so") or ".so." in n]
        if not any(n.startswith("mspti_lens/_native") for n in sos):
            found.append("missing the extension mspti_lens/_native*.so")
        for n in sos:
            data = z.read(n)
            machine = elf_machine(data)
            if machine != MACHINES[arch]:
                found.append(f"{n}: ELF machine {machine}, expected {MACHINES[arch]} ({arch})")
            if n.startswith("mspti_lens/_native"):
                hooks = [h.decode() for h in TEST_HOOKS if h in data]
                if hooks:
                    found.append(f"{n}: built with the test hooks ({', '.join(hooks)}): feature test-hooks")
    return found


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1])
        return 2
    bad = 0
    for w in map(Path, argv):
        p = problems(w)
        print(f"{'ok  ' if not p else 'FAIL'} {w.name}" + "".join(f"\n     {x}" for x in p))
        bad += bool(p)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
