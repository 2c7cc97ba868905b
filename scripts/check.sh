#!/usr/bin/env bash
# Every check: set-up with the proofs (scripts/setup.sh --proofs: a fresh .venv with the newest allowed
# dependencies, Coq, rocq/ and the oracle built), the Lean proofs, the test suite (Triton kernels in
# interpreter mode on the CPU), and `ojas audit`, which rebuilds rocq/, forbids admits and axioms, runs
# Print Assumptions, checks rocq/MANIFEST.json is current and runs every implementation against the oracle.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
VENV=${OJAS_VENV:-.venv}

scripts/setup.sh --proofs
export PATH="$PWD/$VENV/bin:$PATH"

# The rest of rocq/ (the set-up built what the oracle imports) compiles while Lean, ruff and the tests
# run: its longest chain of files is serial, so the two overlap on two cores. The audit below finds it built.
mkdir -p build
make -j"$(nproc)" -C rocq >build/rocq.log 2>&1 &
rocq_build=$!
trap 'kill "$rocq_build" 2>/dev/null || true' EXIT

echo "== Lean (proofs/)"
if [ -x scripts/lean.sh ]; then
  PYTHON=python scripts/lean.sh check
elif command -v lake >/dev/null 2>&1; then
  lake build
else
  echo "check.sh: no Lean checker (scripts/lean.sh) and no lake: proofs/ was not checked" >&2
  exit 1
fi

echo "== lint and format (ruff check, ruff format --check; pyproject.toml's [tool.ruff], .pre-commit-config.yaml)"
ruff check .
ruff format --check .

echo "== tests (Triton kernels in interpreter mode on the CPU; pytest-xdist, one worker per core unless OJAS_TEST_WORKERS says)"
TRITON_INTERPRET=1 python -m pytest -q -p no:cacheprovider -n "${OJAS_TEST_WORKERS:-auto}" --dist worksteal --durations=25 tests

echo "== rocq/ (compiled beside the tests; log in build/rocq.log)"
if ! wait "$rocq_build"; then
  tail -30 build/rocq.log >&2
  echo "check.sh: make -C rocq failed (full log: build/rocq.log)" >&2
  exit 1
fi

echo "== ojas audit (proofs rebuilt and audited, manifest up to date, implementations vs oracle)"
TRITON_INTERPRET=1 ojas audit

echo "check.sh: all checks passed in $((SECONDS - start)) s"
