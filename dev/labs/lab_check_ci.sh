#!/usr/bin/env bash
# make lab-check for two labs that need no data (explode and gains, about 65 s together on 2 cores at a
# load of 2; gains runs its stacks at 5 seeds), as a suite of test_gpt2 (make check): each lab is run
# into a temporary directory (removed at the end; nothing in the repository is written) and
# dev/labs/lab_check.py compares it with the committed doc/labs/ CSV. Only the rows and quantities that DIFFER
# are printed; each row and each quantity counts as one test and the last line is "N passed, N failed"
# (exit 1 if any failed).
#
#   dev/labs/lab_check_ci.sh [LAB ...]        (default: explode gains; run from anywhere)
#
# Needs dev/labs/mlp_lab (make check builds it) and python3 (the standard library only: no numpy, no
# matplotlib; $PYTHON, else /usr/bin/python3, else python3 on the PATH). make check promises to need no
# Python, so without python3 the check says "skipped" and counts nothing ("0 passed, 0 failed"), the way
# make check skips the nvcc build without nvcc; LAB_CHECK_REQUIRE_PYTHON=1 (for CI) counts it as one failed
# test instead.
set -uo pipefail

ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 2
LABS=("$@")
(( ${#LABS[@]} )) || LABS=(explode gains)
PY="${PYTHON:-/usr/bin/python3}"
[[ -x "$PY" ]] || PY="$(command -v python3 || true)"

if [[ -z "$PY" ]]; then
  if [[ "${LAB_CHECK_REQUIRE_PYTHON:-}" == 1 ]]; then
    echo "lab-check: FAILED: python3 not found, and LAB_CHECK_REQUIRE_PYTHON=1"
    echo "0 passed, 1 failed"
    exit 1
  fi
  echo "skipped: python3 not found, the labs' numbers were not compared with doc/labs/"
  echo "0 passed, 0 failed"
  exit 0
fi
if [[ ! -x dev/labs/mlp_lab ]]; then
  echo "lab-check: dev/labs/mlp_lab is missing: run make dev/labs/mlp_lab (make check builds it)"
  echo "0 passed, 1 failed"
  exit 1
fi

TMP="$(mktemp -d "${TMPDIR:-/tmp}/lab_check.XXXXXX")" || exit 2
trap 'rm -rf -- "$TMP"' EXIT
passed=0 failed=0
for lab in "${LABS[@]}"; do
  t0=$SECONDS
  if ! nice -n 10 dev/labs/mlp_lab "$lab" -o "$TMP/$lab.csv" >"$TMP/$lab.log" 2>&1; then
    echo "lab-check $lab: dev/labs/mlp_lab $lab failed:"
    tail -n 5 "$TMP/$lab.log" | sed 's/^/  /'
    failed=$((failed + 1))
    continue
  fi
  "$PY" dev/labs/lab_check.py "$lab" --new "$TMP" >"$TMP/$lab.check" 2>&1
  st=$?
  grep -v '^lab-check ' "$TMP/$lab.check" | head -n 20      # the rows that differ (the first 20)
  summary="$(grep "^lab-check $lab: .* rows, " "$TMP/$lab.check" | tail -n 1)"
  p="$(sed -n 's/.* rows, \([0-9]*\) PASS.*/\1/p' <<<"$summary")"
  f="$(sed -n 's/.* PASS, \([0-9]*\) DIFFERS.*/\1/p' <<<"$summary")"
  qp="$(sed -n 's/.* quantities, \([0-9]*\) agree.*/\1/p' <<<"$summary")"
  qf="$(sed -n 's/.* agree, \([0-9]*\) DIFFER .*/\1/p' <<<"$summary")"
  [[ -n "$qp" && -n "$qf" ]] && { p=$((p + qp)); f=$((f + qf)); }
  # a lab whose rows cannot resolve its effect fails on that verdict alone (lab_check.py's RESOLUTION)
  if grep -q "^lab-check $lab: FAILS: .*cannot resolve its effect" "$TMP/$lab.check"; then
    grep "^lab-check $lab: FAILS: " "$TMP/$lab.check"
    f=$((f + 1))
  fi
  if [[ -z "$p" || -z "$f" ]] || { (( st != 0 )) && (( f == 0 )); }; then
    echo "lab-check $lab: dev/labs/lab_check.py did not finish (exit $st):"
    tail -n 5 "$TMP/$lab.check" | sed 's/^/  /'
    failed=$((failed + 1))
    continue
  fi
  echo "${summary%% (new:*} ($((SECONDS - t0)) s)"
  passed=$((passed + p))
  failed=$((failed + f))
done
echo "$passed passed, $failed failed"
(( failed == 0 ))
