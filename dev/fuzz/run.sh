#!/bin/sh
# dev/fuzz/run.sh BUILD SECONDS RUNS TARGET...: what `make fuzz` runs after building BUILD/fuzz_TARGET.
# Each target fuzzes a scratch copy of its seed corpus (BUILD/work/TARGET/corpus; the committed
# dev/fuzz/corpus is never written) with its dictionary, for SECONDS seconds (0: no limit) or RUNS
# executions (-1: no limit), whichever ends first. FUZZ_ARGS adds libFuzzer flags. Prints one line per
# target: executions, executions per second, crash or not. Exit status 1 if any target crashed.
set -u
build=$1 seconds=$2 runs=$3
shift 3
status=0
for t in "$@"; do
    work=$build/work/$t
    rm -rf "$work"
    mkdir -p "$work/corpus" "$build/artifacts/$t"
    cp -R "dev/fuzz/corpus/$t/." "$work/corpus/"
    # -max_len: 16 KB, about twice the largest seed, so longer files (trailing bytes) are tried too;
    # -timeout: one input taking 10 s is a hang; -print_final_stats: the counts below, also on a crash
    "$build/fuzz_$t" -max_total_time="$seconds" -runs="$runs" -max_len=16384 -timeout=10 -print_final_stats=1 \
        -dict="dev/fuzz/dict/$t.dict" -artifact_prefix="$build/artifacts/$t/" ${FUZZ_ARGS:-} \
        "$work/corpus" >"$work/log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$work/log" | tail -n 1)
    if [ "$rc" -eq 0 ]; then
        printf 'fuzz_%-10s %10s executions (%s/s, %s): no crash\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-cov: ?}"
    else
        printf 'fuzz_%-10s %10s executions: CRASH (exit %s)\n' "$t" "${execs:-?}" "$rc"
        grep -E '^==[0-9]+==ERROR|runtime error|fuzz check failed|^SUMMARY|Test unit written to' "$work/log" | sed 's/^/    /'
        echo "    full log: $work/log; reproduce: $build/fuzz_$t FILE (dev/fuzz/README.md)"
        status=1
    fi
done
exit $status
