#!/usr/bin/env bash
# Install the Debian packages the dev/ tools need (PyTorch reference, plots,
# BLAS, tcmalloc). Idempotent and quiet: does nothing if all are installed.
# Run as root (or it uses sudo if available). Debian/Ubuntu only.
#
#   dev/install_deps.sh [PACKAGE ...]     (default: the list below; make lab-deps passes numpy's and
#                                          matplotlib's alone)
#
# The dev/ Python tools use Debian's system interpreter, /usr/bin/python3,
# since that is where python3-torch etc. are installed (no pip/PyPI needed).
set -euo pipefail

PKGS=(python3-torch python3-numpy python3-matplotlib libopenblas0-pthread libtcmalloc-minimal4)
if (( $# )); then PKGS=("$@"); fi
PYTHON=/usr/bin/python3

die() { echo "install_deps: FAILED: $*" >&2; exit 1; }

command -v dpkg >/dev/null 2>&1 || die "dpkg not found (this script is for Debian/Ubuntu)"

missing=()
for p in "${PKGS[@]}"; do
  # "install ok installed" only; dpkg -s alone also succeeds for removed-but-configured packages
  if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done

if (( ${#missing[@]} == 0 )); then
  echo "install_deps: all ${#PKGS[@]} packages already installed"
else
  SUDO=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "need root to install: ${missing[*]}"
    SUDO=(sudo)
  fi
  echo "install_deps: installing ${missing[*]}"
  LOG="$(mktemp "${TMPDIR:-/tmp}/install_deps.XXXXXX")"
  trap 'rm -f -- "$LOG"' EXIT
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$LOG" 2>&1 \
    || die "apt-get update ($(tail -n 1 "$LOG"))"
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >"$LOG" 2>&1 \
    || die "apt-get install ${missing[*]} ($(grep -m 1 '^E:' "$LOG" || tail -n 1 "$LOG"))"
  echo "install_deps: installed ${missing[*]}"
fi

(( $# )) && exit 0       # a list of its own: the caller checks what it needs
[[ -x "$PYTHON" ]] || die "$PYTHON not found"
"$PYTHON" -c 'import torch, numpy, matplotlib' 2>/dev/null \
  || die "$PYTHON cannot import torch, numpy and matplotlib"
echo "install_deps: use $PYTHON ($("$PYTHON" -c 'import sys, torch, numpy; print("python %d.%d, torch %s, numpy %s" % (sys.version_info[0], sys.version_info[1], torch.__version__, numpy.__version__))'))"
