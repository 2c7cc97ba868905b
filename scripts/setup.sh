#!/usr/bin/env bash
# Installs what ojas-ref needs on a fresh Debian/Ubuntu machine with Python >= 3.10:
# Coq 8.16 + Flocq + Coquelicot + Interval and OCaml (Debian packages), the Python
# package with its test dependencies (torch pinned to 2.13.0: pip takes the CPU
# wheel when one lies in its find-links), then builds the proofs and the oracle.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES="coq libcoq-flocq libcoq-coquelicot libcoq-interval ocaml-nox ocaml-findlib libyojson-ocaml-dev libzarith-ocaml-dev"
installed=$(dpkg-query -W -f='${Status}\n' $APT_PACKAGES 2>/dev/null | grep -c "install ok installed" || true)
if [ "$installed" -ne "$(echo $APT_PACKAGES | wc -w)" ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing Debian packages: $APT_PACKAGES"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $APT_PACKAGES >/dev/null
fi

PY=${PYTHON:-python3}
echo "setup: installing Python packages (torch==2.13.0, ojas-ref[kernels,test])"
$PY -m pip install -q --disable-pip-version-check torch==2.13.0
$PY -m pip install -q --disable-pip-version-check -e '.[kernels,test]'

echo "setup: building the proofs (rocq/) and the extracted oracle (extraction/)"
make -s -C extraction >/dev/null
echo "setup: done"
