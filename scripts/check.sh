#!/usr/bin/env bash
# Every check: set-up (which builds the proofs and the oracle), Lean (where lake
# exists), the test suite, and the main job `ojas audit`, which rebuilds rocq/,
# forbids admits/axioms, runs Print Assumptions, checks rocq/MANIFEST.json is
# current and runs every implementation against the oracle.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

scripts/setup.sh

echo "== Lean"
if command -v lake >/dev/null 2>&1; then
  lake build
else
  echo "Lean: lake is not on PATH; the Lean sources in proofs/ were not checked"
fi

echo "== tests (Triton kernels in interpreter mode on the CPU)"
TRITON_INTERPRET=1 python3 -m pytest -q -p no:cacheprovider tests

echo "== main job: ojas audit (proofs rebuilt and audited, manifest up to date, implementations vs oracle)"
TRITON_INTERPRET=1 ojas audit

echo "check.sh: all checks passed in $((SECONDS - start)) s"
