#!/usr/bin/env bash
# What an sdist must hold (the simulator's sources and the build script, so pip can build it, and the
# project's licence) and
# must not (built libraries or wheels). Usage: scripts/check_sdist_contents.sh SDIST.tar.gz
set -euo pipefail
SDIST=${1:?usage: check_sdist_contents.sh SDIST}
LIST=$(tar tzf "$SDIST")
for f in rust/sim/Cargo.toml rust/sim/src/lib.rs rust/lens/build.rs rust/abi/src/lib.rs Cargo.lock LICENSE \
    rust/sim/cann/include/mspti/mspti.h; do
  grep -q "^mspti_lens-[^/]*/$f\$" <<<"$LIST" || { echo "FAIL: the sdist lacks $f"; exit 1; }
done
if grep -E '\.(so|whl)$' <<<"$LIST"; then echo "FAIL: the sdist carries built files"; exit 1; fi
echo "ok   $(basename "$SDIST"): the sources a build needs, no built files"
