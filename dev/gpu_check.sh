#!/bin/sh
# dev/gpu_check.sh [STAGE...]: what a session lent a GPU runs first (doc/cuda.md, "What a first GPU
# session should check first"), so that the few minutes of a borrowed device go to running, not typing.
# Each stage writes its whole output to DIR/STAGE.log and prints one line: the stage, its exit status,
# its seconds and the log's last line. DIR is $OUT where that is set (the device tool brings it back),
# else gpu_check/ (git-ignored). Stages, by default all in this order:
#   build      nvcc: test_gpt2cu and dev/bench/bench_gpu (train_gpt2cu too where data/ is there)
#   test       ./test_gpt2cu: the fixtures, the CPU and GPU trainers side by side, the attention
#              kernels (CUDA cores and tensor cores) at their stated bounds
#   memcheck   compute-sanitizer --tool memcheck ./test_gpt2cu (out-of-bounds, misaligned accesses)
#   racecheck  compute-sanitizer --tool racecheck ./test_gpt2cu (shared-memory hazards)
#   synccheck  compute-sanitizer --tool synccheck ./test_gpt2cu (barriers in divergent code)
#   bench      make bench-gpu: GPT-2 124M and the default model, fp32, TF32 and bf16
# A stage stops after STAGE_TIMEOUT seconds (default 540: the device tool allows 600 per command);
# its line then says "timed out" and the log holds what it printed until then.
set -u
cd "$(dirname "$0")/.." || exit 2
DIR=${OUT:-gpu_check}
mkdir -p "$DIR"
LIMIT=${STAGE_TIMEOUT:-540}
STAGES=${*:-build test memcheck racecheck synccheck bench}
status=0

stage_command() {
    case $1 in
    build)     echo "make test_gpt2cu dev/bench/bench_gpu && { [ ! -f data/moby_train.txt ] || make train_gpt2cu; }" ;;
    test)      echo "./test_gpt2cu" ;;
    memcheck)  echo "compute-sanitizer --tool memcheck --error-exitcode 3 ./test_gpt2cu" ;;
    racecheck) echo "compute-sanitizer --tool racecheck --error-exitcode 3 ./test_gpt2cu" ;;
    synccheck) echo "compute-sanitizer --tool synccheck --error-exitcode 3 ./test_gpt2cu" ;;
    bench)     echo "make bench-gpu" ;;
    *) return 1 ;;
    esac
}

for s in $STAGES; do
    cmd=$(stage_command "$s") || { echo "gpu_check: unknown stage $s (build test memcheck racecheck synccheck bench)" >&2; exit 2; }
    log=$DIR/$s.log
    {
        echo "# $cmd"
        if command -v nvidia-smi >/dev/null; then
            nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
        else
            echo "(no nvidia-smi)"
        fi
        date -u
    } > "$log"
    t0=$(date +%s)
    timeout "$LIMIT" sh -c "$cmd" >> "$log" 2>&1
    rc=$?
    t1=$(date +%s)
    verdict="exit $rc"
    [ $rc -eq 124 ] && verdict="timed out after ${LIMIT}s"
    [ $rc -eq 0 ] || status=1
    printf '%-10s %-24s %5ss  %s\n' "$s" "$verdict" $((t1 - t0)) "$(tail -n 1 "$log")"
done
exit $status
