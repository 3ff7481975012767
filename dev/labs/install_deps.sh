#!/usr/bin/env bash
# What the labs' Python needs, and nothing else: numpy and matplotlib (make lab-deps).
#
#   dev/labs/install_deps.sh [PYTHON]        (PYTHON: the interpreter to check, default /usr/bin/python3)
#
# If PYTHON already imports both, it says so and installs nothing. Else, on Debian or Ubuntu, it installs
# python3-numpy and python3-matplotlib with apt-get (as root, or through sudo; like dev/install_deps.sh,
# which installs those and PyTorch for the other dev/ tools). Elsewhere (macOS, other distributions, no
# root) it prints the virtual-environment way and fails:
#   python3 -m venv .venv && .venv/bin/pip install numpy matplotlib
#   make PYTHON=.venv/bin/python3 lab-sweep
# The labs never import torch or scikit-learn (dev/labs/fetch_data.sh unpacks the UCI tables from the
# sklearn .deb without installing it).
set -euo pipefail

PYTHON="${1:-/usr/bin/python3}"
PKGS=(python3-numpy python3-matplotlib)

die() { echo "lab-deps: FAILED: $*" >&2; exit 1; }
venv_hint() {
  echo "lab-deps: without apt, use a virtual environment:" >&2
  echo "    python3 -m venv .venv && .venv/bin/pip install numpy matplotlib" >&2
  echo "    make PYTHON=.venv/bin/python3 lab-sweep" >&2
}
works() { "$PYTHON" -c 'import numpy, matplotlib' >/dev/null 2>&1; }

if works; then
  echo "lab-deps: $PYTHON already has numpy and matplotlib; nothing to install"
  exit 0
fi
if ! command -v dpkg >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  venv_hint
  die "no apt-get here (this installs Debian/Ubuntu packages)"
fi
case "$PYTHON" in
  /usr/bin/python3*) ;;
  *) venv_hint; die "$PYTHON is not Debian's python: apt's packages would not reach it; pip install numpy matplotlib there" ;;
esac

"$(dirname "$0")/../install_deps.sh" "${PKGS[@]}" || { venv_hint; die "apt-get could not install ${PKGS[*]}"; }
works || die "$PYTHON still cannot import numpy and matplotlib"
echo "lab-deps: $PYTHON has $("$PYTHON" -c 'import numpy, matplotlib; print("numpy %s, matplotlib %s" % (numpy.__version__, matplotlib.__version__))')"
