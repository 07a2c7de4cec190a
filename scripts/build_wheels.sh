#!/usr/bin/env bash
# Builds one abi3 wheel per architecture (x86-64 and aarch64 by default; WHEEL_TARGETS overrides) into
# OUT_DIR (default dist/), then checks them (scripts/check_wheels.py: every .so is an ELF file of the
# wheel's architecture, the simulator and the stubs are in it).
#
# Each wheel is built from an unpacked sdist of a clean clone of HEAD (commit first), not from the
# tree itself: the build script of rust/lens writes the simulator it builds for the target into the
# package directory, and an aarch64 build in the tree would replace the host simulator the editable
# install uses. Before the wheels, the sdist is checked as a user gets it: its contents
# (scripts/check_sdist_contents.sh), then `pip install` of it into a fresh venv running the demo
# (scripts/check_install.sh unpacked-sdist). pip builds it in place, with this target directory, so
# the host wheel after it reuses that build: each crate is compiled once per target. The other
# architectures' wheels build meanwhile (below).
#
# `make wheels` builds them all; `make wheels-host` (with the sdist check) and `make wheels-cross`
# build one half each, and `make test` runs them side by side: each invocation has its own work
# directory and replaces only its targets' wheels in OUT_DIR.
#
# Usage: scripts/build_wheels.sh [OUT_DIR]   (CHECK_SDIST=0 skips the pip install of the sdist)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$(realpath -m "${1:-dist}")
MATURIN=${MATURIN:-$ROOT/.venv/bin/maturin}
PY=${PYTHON:-$ROOT/.venv/bin/python}
HOST=$(rustc -vV | sed -n 's/^host: //p')
TARGETS=${WHEEL_TARGETS:-x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu}
# inside the repository, so cargo finds .cargo/config.toml (the aarch64 linker); one per target set
WORK=$ROOT/target/wheels/${TARGETS// /+}

rm -rf "$WORK"
mkdir -p "$WORK/sdist" "$OUT"
for t in $TARGETS; do rm -f "$OUT"/mspti_lens-*_"${t%%-*}".whl; done
git clone -q --no-hardlinks "$ROOT" "$WORK/clone"
(cd "$WORK/clone" && "$MATURIN" sdist -o "$WORK/sdist" >"$WORK/sdist.log" 2>&1) || { cat "$WORK/sdist.log"; exit 1; }
rm -rf "$WORK/clone"
"$ROOT/scripts/check_sdist_contents.sh" "$WORK"/sdist/mspti_lens-*.tar.gz
# One unpacked copy for the sdist's install check and the host wheel, one for the other targets'
# wheels, each only when needed. -m: the files get this moment's time, not the sdist's fixed one
# (maturin writes reproducible archives dated 2006), so cargo sees sources newer than any earlier
# build of this path.
unpack() { mkdir -p "$WORK/$1" && tar xzmf "$WORK"/sdist/mspti_lens-*.tar.gz -C "$WORK/$1" && ls -d "$WORK/$1"/mspti_lens-*/; }
SRC= SRC_CROSS=
if [ "${CHECK_SDIST:-1}" != 0 ] || [[ " $TARGETS " == *" $HOST "* ]]; then SRC=$(unpack src); fi
if [ -n "$(for t in $TARGETS; do [ "$t" = "$HOST" ] || echo "$t"; done)" ]; then SRC_CROSS=$(unpack src-cross); fi

# The other architectures' wheels build beside the host's install check and wheel: from their own
# copy of the sdist (the build script writes the target's simulator into the package directory)
# and into their own target directory (cargo locks one for a whole build), so the cores stay busy
# while pip downloads and installs and the demo runs.
cross=() cross_logs=()
trap 'kill "${cross[@]}" 2>/dev/null || true' EXIT
for t in $TARGETS; do
  [ "$t" = "$HOST" ] && continue
  log=$WORK/wheel-$t.log
  (cd "$SRC_CROSS" && CARGO_TARGET_DIR=$ROOT/target/cross-wheels \
    exec "$MATURIN" build --quiet --release --target "$t" -o "$OUT") >"$log" 2>&1 &
  cross+=("$!") cross_logs+=("$t:$log")
done
if [ "${CHECK_SDIST:-1}" != 0 ]; then
  "$ROOT/scripts/check_install.sh" unpacked-sdist "$SRC"
fi
if [[ " $TARGETS " == *" $HOST "* ]]; then
  echo "== wheel for $HOST"
  # The repository's target directory: the crates.io dependencies `make dev` compiled are reused,
  # and the sdist's own crates as pip just built them (artifacts are keyed by path). Built without
  # --target, as `make dev` is, so that its dependencies match.
  (cd "$SRC" && CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target} "$MATURIN" build --quiet --release -o "$OUT")
fi
for i in "${!cross[@]}"; do
  t=${cross_logs[$i]%%:*} log=${cross_logs[$i]#*:}
  echo "== wheel for $t"
  if ! wait "${cross[$i]}"; then
    cat "$log"
    echo "the $t wheel did not build (log: $log)"
    exit 1
  fi
done
wheels=()
for t in $TARGETS; do wheels+=("$OUT"/mspti_lens-*_"${t%%-*}".whl); done
"$PY" scripts/check_wheels.py "${wheels[@]}"

# Each wheel's simulator also runs: loaded by a C program built for its architecture (the aarch64
# one under qemu-user, through .cargo/aarch64-run), it delivers the callbacks of ten calls.
for w in "${wheels[@]}"; do
  case $w in
    *_x86_64.whl) cc=gcc run=() ;;
    *_aarch64.whl) cc=aarch64-linux-gnu-gcc run=("$ROOT/.cargo/aarch64-run") ;;
    *) continue ;;
  esac
  [ "$(uname -m)" = aarch64 ] && [ "$cc" = aarch64-linux-gnu-gcc ] && cc=gcc
  d=$WORK/smoke/$(basename "$w" .whl)
  rm -rf "$d" && mkdir -p "$d"
  "$PY" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("mspti_lens/sim/libmspti_sim.so", sys.argv[2])' "$w" "$d"
  "$cc" -O1 -o "$d/sim_smoke" scripts/sim_smoke.c -ldl
  echo "ok   $(basename "$w"): its simulator delivered $("${run[@]}" "$d/sim_smoke" "$d/mspti_lens/sim/libmspti_sim.so")"
done
