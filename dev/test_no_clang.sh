#!/usr/bin/env bash
# README's claim "the tests need only a C compiler", checked (a suite of make check, issue 34 item 9): both
# tiers' commands and make test-sanitize are dry-run (make -n, nothing is built) with clang and nvcc hidden
# from PATH, as on a laptop with gcc alone, and must neither fail nor call clang; the sanitizer suite
# (dev/sanitize.sh, which make test-sanitize runs) must then say
# in one line that it skipped, and exit 0 (1 with SANITIZE_REQUIRE=1). Hiding: a scratch directory of
# symlinks to every program on PATH except clang* and nvcc becomes the PATH. About a second.
#
#   dev/test_no_clang.sh          (from anywhere; the last line is "N passed, N failed")
set -u
cd "$(dirname "$0")/.." || exit 2
TMP="$(mktemp -d "${TMPDIR:-/tmp}/no_clang.XXXXXX")" || exit 2
trap 'rm -rf -- "$TMP"' EXIT
mkdir "$TMP/bin"
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do
    [ -d "$d" ] || continue
    for f in "$d"/*; do
        n=${f##*/}
        case $n in clang*|nvcc) continue ;; esac
        [ -x "$f" ] && [ ! -e "$TMP/bin/$n" ] && ln -s "$f" "$TMP/bin/$n"
    done
done
passed=0 failed=0
ok() { echo "  ok   $1"; passed=$((passed + 1)); }
bad() { echo "  FAIL $1"; failed=$((failed + 1)); }
hidden() { env -u SAN_CC -u NVCC PATH="$TMP/bin" "$@"; }

if hidden sh -c 'command -v clang || command -v nvcc' >/dev/null 2>&1; then
    bad "clang or nvcc is still on the scratch PATH"
fi
# which sanitizer targets make test-sanitize asks for: none without clang; both where clang exists (as in CI)
san=$(hidden make --no-print-directory --eval='print-san-targets: ; @echo "[$(SAN_TARGETS)]"' print-san-targets)
[ "$san" = "[]" ] && ok "without clang, make test-sanitize builds no sanitizer target" \
    || bad "without clang, make test-sanitize still builds the sanitizer targets: $san"
if command -v "${SAN_CC:-clang}" >/dev/null 2>&1; then
    san=$(env -u SAN_CC make --no-print-directory --eval='print-san-targets: ; @echo "[$(SAN_TARGETS)]"' print-san-targets)
    case $san in *build/sanitize/test_gpt2*build/sanitize/train_gpt2*) ok "with clang, make test-sanitize builds the sanitizer targets" ;;
        *) bad "with clang on PATH, make test-sanitize no longer builds the sanitizer targets: $san" ;; esac
fi
# the test commands' builds, dry-run: no failure, no clang
for tier in test check test-sanitize; do
    out=$(hidden make -n $tier 2>&1); st=$?
    [ $st -eq 0 ] && ok "make -n $tier without clang exits 0" || { bad "make -n $tier without clang exits $st:"; tail -n 5 <<<"$out" | sed 's/^/       /'; }
    grep -v "skipped:" <<<"$out" | grep -Eq '(^|[ /])clang ' && bad "make -n $tier without clang still calls clang: $(grep -Em1 '(^|[ /])clang ' <<<"$out")" \
        || ok "make -n $tier without clang calls no clang"
done
# the suite itself
out=$(hidden dev/sanitize.sh "$TMP/no-build" 2>&1); st=$?
if [ $st -eq 0 ] && [ "$(tail -n 1 <<<"$out")" = "0 passed, 0 failed" ] && [ "$(grep -c '^skipped: clang not found' <<<"$out")" = 1 ]; then
    ok "dev/sanitize.sh without clang: one 'skipped' line, 0 passed, 0 failed, exit 0"
else
    bad "dev/sanitize.sh without clang (exit $st): $(tr '\n' '|' <<<"$out")"
fi
hidden env SANITIZE_REQUIRE=1 dev/sanitize.sh "$TMP/no-build" >/dev/null 2>&1; st=$?
[ $st -eq 1 ] && ok "dev/sanitize.sh without clang and SANITIZE_REQUIRE=1 fails" \
    || bad "dev/sanitize.sh without clang and SANITIZE_REQUIRE=1 exits $st, not 1"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
