#!/usr/bin/env bash
# Builds one abi3 wheel per architecture (x86-64 and aarch64 by default; WHEEL_TARGETS overrides) into
# OUT_DIR (default dist/), then checks them (scripts/check_wheels.py: every .so is an ELF file of the
# wheel's architecture, the simulator and the stubs are in it).
#
# Each wheel is built from an unpacked sdist of the working tree, not from the tree itself: the build
# script of rust/lens writes the simulator it builds for the target into the package directory, and
# an aarch64 build in the tree would replace the host simulator the editable install uses. Building
# from the sdist also proves the sdist holds everything a wheel needs.
#
# Usage: scripts/build_wheels.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$(realpath -m "${1:-dist}")
MATURIN=${MATURIN:-$ROOT/.venv/bin/maturin}
PY=${PYTHON:-$ROOT/.venv/bin/python}
HOST=$(rustc -vV | sed -n 's/^host: //p')
TARGETS=${WHEEL_TARGETS:-x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu}
WORK=$ROOT/target/wheels  # inside the repository, so cargo finds .cargo/config.toml (the aarch64 linker)

rm -rf "$WORK/sdist" "$WORK/src"
mkdir -p "$WORK/sdist" "$WORK/src" "$OUT"
rm -f "$OUT"/mspti_lens-*.whl
"$MATURIN" sdist -o "$WORK/sdist" >"$WORK/sdist.log" 2>&1 || { cat "$WORK/sdist.log"; exit 1; }
tar xzf "$WORK"/sdist/mspti_lens-*.tar.gz -C "$WORK/src"
cd "$WORK"/src/mspti_lens-*/
for t in $TARGETS; do
  echo "== wheel for $t"
  # The repository's target directory: the crates.io dependencies `make dev` (host) and earlier wheel
  # builds compiled are reused; the sdist's own crates compile apart (artifacts are keyed by path).
  # The host wheel is built without --target, as `make dev` is, so that its dependencies match.
  if [ "$t" = "$HOST" ]; then target=(); else target=(--target "$t"); fi
  CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target} "$MATURIN" build --quiet --release "${target[@]}" -o "$OUT"
done
cd "$ROOT"
"$PY" scripts/check_wheels.py "$OUT"/mspti_lens-*.whl
