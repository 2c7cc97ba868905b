#!/usr/bin/env bash
# Sets ojas-ref up on a fresh Debian/Ubuntu machine with Python >= 3.10.
#
#   scripts/setup.sh           the Python package, editable, in a fresh virtual environment .venv
#                              (no system site packages; torch pinned to 2.13.0, pip takes the CPU
#                              wheel where one lies in its find-links; every other dependency at the
#                              newest version pyproject.toml allows): enough for `ojas train`,
#                              `optimize_model` and every Triton kernel. No Coq, no root.
#   scripts/setup.sh --proofs  also Coq 8.16 + Flocq + Coquelicot + Interval and OCaml from Debian's
#                              packages (root or sudo), then builds rocq/ and the extracted oracle,
#                              and the Lean checker (scripts/lean.sh): what scripts/check.sh needs.
#
# PYTHON picks the interpreter that makes the environment (default python3), OJAS_VENV its folder.
set -euo pipefail
cd "$(dirname "$0")/.."

proofs=0
case "${1:-}" in
  "") ;;
  --proofs) proofs=1 ;;
  *) echo "setup.sh: unknown argument '$1' (expected nothing or --proofs)" >&2; exit 2 ;;
esac

start=$SECONDS
stage() { printf 'setup [%3d s] %s\n' "$((SECONDS - start))" "$*"; }
# pip's notes about this machine's unreachable extra indexes are noise, not failures.
quiet_pip() { "$VENV/bin/python" -m pip "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
apt_install() {
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

PY=${PYTHON:-python3}
VENV=${OJAS_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  stage "creating the virtual environment $VENV ($($PY --version))"
  if ! $PY -m venv "$VENV" 2>/dev/null; then
    stage "python3-venv is missing: installing it from Debian's packages"
    apt_install python3-venv
    $PY -m venv "$VENV"
  fi
fi

stage "installing torch==2.13.0 and ojas-ref[kernels,train,test] (newest allowed versions) into $VENV"
# One resolution, so that the pin holds while everything else is upgraded (a second install with
# --upgrade-strategy eager would replace the CPU wheel by the newest CUDA build).
quiet_pip install -q --disable-pip-version-check --upgrade --upgrade-strategy eager torch==2.13.0 -e '.[kernels,train,test]'
versions=$("$VENV/bin/python" - <<'PY'
import importlib.metadata as metadata
print(", ".join(f"{name} {metadata.version(name)}" for name in ("ojas-ref", "torch", "triton", "transformers")))
PY
)
stage "Python packages: $versions"

if [ "$proofs" -eq 1 ]; then
  APT_PACKAGES="coq libcoq-flocq libcoq-coquelicot libcoq-interval ocaml-nox ocaml-findlib libyojson-ocaml-dev libzarith-ocaml-dev gcc"
  installed=$(dpkg-query -W -f='${Status}\n' $APT_PACKAGES 2>/dev/null | grep -c "install ok installed" || true)
  if [ "$installed" -ne "$(echo $APT_PACKAGES | wc -w)" ]; then
    stage "installing Debian packages: $APT_PACKAGES"
    apt_install $APT_PACKAGES
  fi
  mkdir -p build
  stage "building the Coq proofs (rocq/) and the extracted oracle (extraction/): about 3 minutes on 2 cores from scratch; log in build/proofs.log"
  if ! make -j"$(nproc)" -s -C extraction >build/proofs.log 2>&1; then
    tail -n 40 build/proofs.log >&2
    echo "setup.sh: building rocq/ or the oracle failed (full log: build/proofs.log)" >&2
    exit 1
  fi
  if [ -x scripts/lean.sh ]; then
    stage "the Lean checker (scripts/lean.sh setup)"
    PYTHON="$VENV/bin/python" scripts/lean.sh setup
  fi
fi
stage "done; the ojas command is $VENV/bin/ojas"
