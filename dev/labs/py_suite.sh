#!/usr/bin/env bash
# Runs a Python check of the labs as a suite of test_gpt2 (make check): the labs' handouts
# (dev/labs/handout_check.py), the numbers their pages quote (dev/labs/quote_check.py), lab-check on
# broken runs (dev/labs/lab_check_broken.py), every axis of the labs' figures labelled
# (dev/labs/figure_check.py). They need python3 alone (the standard library), and numpy and matplotlib
# for their figures (without them those parts say "skipped" in one line).
#
#   dev/labs/py_suite.sh SCRIPT [ARGS...]       (from anywhere; the script's last line is "N passed, N failed")
#
# The python3: $PYTHON, else /usr/bin/python3, else python3 on the PATH, as dev/labs/lab_check_ci.sh. make
# test promises to need no Python, so without python3 the suite says "skipped" in one line and counts
# nothing; LAB_CHECK_REQUIRE_PYTHON=1 (for CI) counts it as one failed test instead.
set -uo pipefail
ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 2
PY="${PYTHON:-/usr/bin/python3}"
[[ -x "$PY" ]] || PY="$(command -v python3 || true)"
if [[ -z "$PY" ]]; then
  if [[ "${LAB_CHECK_REQUIRE_PYTHON:-}" == 1 ]]; then
    echo "$1: FAILED: python3 not found, and LAB_CHECK_REQUIRE_PYTHON=1"
    echo "0 passed, 1 failed"
    exit 1
  fi
  echo "skipped: python3 not found, $1 did not run"
  echo "0 passed, 0 failed"
  exit 0
fi
exec "$PY" "$@"
