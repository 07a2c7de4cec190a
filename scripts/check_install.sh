#!/usr/bin/env bash
# Installs mspti-lens the way a user would, into a fresh venv outside the repository, and runs the
# simulator demo and a default Session() with nothing else set up (no CANN, no `make`):
#
#   sdist  (default) a clean clone of HEAD -> `maturin sdist` -> `pip install mspti_lens-*.tar.gz`
#   dir    `pip install <clean clone>`
#   git    `pip install git+file://<clean clone>`
#   wheel  `pip install WHEEL` (a wheel built by `make wheels`)
#   unpacked-sdist DIR
#          `pip install DIR`, an sdist unpacked at DIR (`make wheels` checks its sdist so, in place:
#          the wheels it builds from DIR then reuse this build instead of compiling it again)
#
# Usage: scripts/check_install.sh [sdist|dir|git|wheel WHEEL|unpacked-sdist DIR]. Exit 0 when the
# install works. The clone is of HEAD (commit first). The build uses the repository's target directory, so the crates.io
# dependencies `make dev` compiled are reused; the project's own crates are compiled from the copy pip
# builds (their artifacts are keyed by source path), so nothing of the working tree gets in.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODE=${1:-sdist}
MATURIN=${MATURIN:-$ROOT/.venv/bin/maturin}
UV=${UV:-$ROOT/.venv/bin/uv}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mspti-lens-install.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
# A user's machine without CANN: nothing may point at a library, so discovery falls back to the simulator.
unset MSPTI_LIBRARY LD_PRELOAD ASCEND_HOME_PATH ASCEND_TOOLKIT_HOME VIRTUAL_ENV PYTHONPATH

clone() { git clone -q --no-hardlinks "$ROOT" "$WORK/clone"; }
case $MODE in
  sdist)
    clone
    (cd "$WORK/clone" && "$MATURIN" sdist -o "$WORK/dist" >"$WORK/sdist.log" 2>&1) || { cat "$WORK/sdist.log"; exit 1; }
    SDIST=$(ls "$WORK"/dist/mspti_lens-*.tar.gz)
    "$ROOT/scripts/check_sdist_contents.sh" "$SDIST"
    TARGET=$SDIST ;;
  dir) clone; TARGET=$WORK/clone ;;
  git) clone; TARGET="git+file://$WORK/clone" ;;
  wheel) TARGET=$(realpath "${2:?usage: check_install.sh wheel WHEEL}") ;;
  unpacked-sdist) TARGET=$(realpath "${2:?usage: check_install.sh unpacked-sdist DIR}") ;;
  *) echo "unknown mode $MODE; valid modes are sdist, dir, git, wheel, unpacked-sdist"; exit 2 ;;
esac

python3 -m venv "$WORK/venv"
echo "== pip install $MODE"
# pip builds and installs mspti-lens as a user's pip does (PEP 517, maturin in an isolated build
# environment); the dependencies its installed metadata lists come through uv, which installs the
# same packages from its cache in seconds where pip took 20 s (resolving, unpacking, compiling).
"$WORK/venv/bin/pip" install -q --disable-pip-version-check --no-deps "$TARGET"
"$WORK/venv/bin/python" -c 'import importlib.metadata as m; print("\n".join(m.requires("mspti-lens") or []))' \
  >"$WORK/requires.txt"
"$UV" pip install -q --python "$WORK/venv/bin/python" -r "$WORK/requires.txt"
"$WORK/venv/bin/pip" check --disable-pip-version-check
cd "$WORK"  # not the repository: the installed package, not the source tree, is imported
echo "== python -m mspti_lens demo"
"$WORK/venv/bin/python" -m mspti_lens demo --out "$WORK/demo-out" | tail -n 5
ls "$WORK"/demo-out/*.png >/dev/null
"$WORK/venv/bin/python" - <<'PY'
import warnings
import mspti_lens
from mspti_lens import SimulatedBackendWarning
from mspti_lens.sim import Simulator

with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    s = mspti_lens.Session()  # the default discovery order, ending at the bundled simulator
assert any(issubclass(x.category, SimulatedBackendWarning) for x in w), [str(x.message) for x in w]
with s:
    assert s.backend.simulated, s.backend
    Simulator().call("aclrtLaunchKernel", count=5)
    n = s.snapshot().total_calls
assert n == 5, n
print(f"ok: default Session() recorded {n} calls on {s.backend.path}")
PY
echo "ok: the $MODE install ships the simulator"
