#!/usr/bin/env bash
# Every check: set-up, proof audit (build + Print Assumptions + manifest),
# oracle build, Lean (where lake exists), the test suite, and the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

scripts/setup.sh

echo "== proofs: build rocq/, forbid admits/axioms, Print Assumptions, manifest up to date"
ojas proofs --check-manifest

echo "== Lean"
if command -v lake >/dev/null 2>&1; then
  lake build
else
  echo "Lean: lake is not on PATH; the Lean sources in proofs/ were not checked"
fi

echo "== tests (Triton kernels in interpreter mode on the CPU)"
TRITON_INTERPRET=1 python3 -m pytest -q -p no:cacheprovider tests

echo "== main job: ojas audit --quick"
ojas audit --quick

echo "check.sh: all checks passed in $((SECONDS - start)) s"
