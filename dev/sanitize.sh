#!/usr/bin/env bash
# make test-sanitize, and one of the suites of make test: test_gpt2 built with AddressSanitizer (and its
# leak checker) and UBSan runs its own tests against the trainer built the same way (TEST_TRAINER), but
# not the suites it runs as programs (TEST_SUITES=0: the CUDA runtime's fibers switch stacks behind
# ASan's back, the mutants rebuild, and this script is one of them).
#     dev/sanitize.sh [BUILD_DIR]      (default build/sanitize; make test-sanitize builds it)
# Every sanitized process, the trainers the tests start included, writes its report to a file in
# BUILD_DIR/reports/, not to stderr: the tests read the trainer's stderr (bad input gets exactly one
# line), where a report could go unnoticed. Any report fails the run: they are printed, then a last
# line that says so. Otherwise the last line is test_gpt2's "N passed, N failed".
# Without the compiler (SAN_CC, default clang: a laptop with gcc alone) the suite is skipped, in one line
# and "0 passed, 0 failed", so that make check passes there; SANITIZE_REQUIRE=1 counts it as a failure.
set -u
cd "$(dirname "$0")/.."
san_cc=${SAN_CC:-clang}
if ! command -v "${san_cc%% *}" >/dev/null 2>&1; then
    if [ "${SANITIZE_REQUIRE:-}" = 1 ]; then
        echo "sanitizers: FAILED: $san_cc not found, and SANITIZE_REQUIRE=1"
        echo "0 passed, 1 failed"
        exit 1
    fi
    echo "skipped: $san_cc not found, so the sanitizer suite did not run (install clang, then make test-sanitize)"
    echo "0 passed, 0 failed"
    exit 0
fi
dir=${1:-build/sanitize}
case $dir in /*) ;; *) dir=$PWD/$dir ;; esac
for f in "$dir/test_gpt2" "$dir/train_gpt2"; do
    [ -x "$f" ] || { echo "$f is missing: run make test-sanitize"; exit 1; }
done
reports=$dir/reports
rm -rf "$reports" && mkdir -p "$reports" || exit 1
# exitcode 86: a finding is not mistaken for the trainer's exit 1 on bad input
export ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1:exitcode=86:log_path=$reports/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=86:log_path=$reports/ubsan"
# the passing checks are the ones make check shows unsanitized: only headers, FAILs and the count
TEST_TRAINER=$dir/train_gpt2 TEST_SUITES=0 "$dir/test_gpt2" | grep -v '^  ok '
st=${PIPESTATUS[0]}
n=$(find "$reports" -type f | wc -l)
if [ "$n" -gt 0 ]; then
    for f in "$reports"/*; do echo "---- $f"; cat "$f"; done
    echo "sanitizers: $n report(s), above and in $reports: FAILED"
    exit 1
fi
exit $st
