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
#   nccl       the trainer through NCCL (doc/cuda.md, "Several GPUs"): 20 steps of a small model on a corpus made
#              here, plain and as one rank through NCCL (--rank 0 --world-size 1), whose checkpoint must equal
#              the plain run's byte for byte; with two GPUs or more, also 2 ranks of -b 4 (with and without
#              --zero 1) against one process of -b 8 (the last losses side by side)
# A stage stops after STAGE_TIMEOUT seconds (default 540: the device tool allows 600 per command);
# its line then says "timed out" and the log holds what it printed until then.
set -u
cd "$(dirname "$0")/.." || exit 2
DIR=${OUT:-gpu_check}
mkdir -p "$DIR"
LIMIT=${STAGE_TIMEOUT:-540}
STAGES=${*:-build test memcheck racecheck synccheck bench nccl}
status=0

# The nccl stage's runs (gpu_check.sh --nccl-runs DIR, in the stage's shell)
nccl_runs() {
    d=$1/nccl
    rm -rf "$d" && mkdir -p "$d" || return 1
    # 200 kB of words (the lent machine has no network, and may have no data/)
    awk 'BEGIN { srand(7); split("the whale sea ship call me ishmael and of white", w, " ");
                 for (i = 0; i < 40000; i++) printf "%s ", w[1 + int(rand() * 10)] }' > "$d/train.txt"
    head -c 20000 "$d/train.txt" > "$d/val.txt"
    flags="--tf32 0 -i $d/train.txt -j $d/val.txt -x 20 -v 10 -n 10 -S 0 -t 64"
    ./train_gpt2cu $flags -b 8 -o "$d/plain" > "$d/plain.txt" || return 1
    ./train_gpt2cu $flags -b 8 --rank 0 --world-size 1 -o "$d/one" > "$d/one.txt" || return 1
    grep -h "^ranks:" "$d/one.txt"
    rc=0
    if cmp -s "$d/plain/ckpt_000020.bin" "$d/one/ckpt_000020.bin"; then echo "one rank: the plain run's checkpoint, byte for byte"
    else echo "one rank: its checkpoint differs from the plain run's"; rc=1; fi
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    if [ "${gpus:-0}" -ge 2 ]; then
        for r in 0 1; do RANK=$r WORLD_SIZE=2 ./train_gpt2cu $flags -b 4 -o "$d/two" > "$d/two.$r.txt" 2>&1 & done
        wait
        for r in 0 1; do RANK=$r WORLD_SIZE=2 ./train_gpt2cu $flags -b 4 --zero 1 -o "$d/two_zero" > "$d/two_zero.$r.txt" 2>&1 & done
        wait
        for run in plain.txt two.0.txt two_zero.0.txt; do echo "$run: $(grep '^step *20/20' "$d/$run")"; done
    else
        echo "one GPU: the runs of 2 ranks need two"
    fi
    return $rc
}
if [ "${1:-}" = --nccl-runs ]; then nccl_runs "$2"; exit $?; fi

stage_command() {
    case $1 in
    build)     echo "make test_gpt2cu dev/bench/bench_gpu && { [ ! -f data/moby_train.txt ] || make train_gpt2cu; }" ;;
    test)      echo "./test_gpt2cu" ;;
    memcheck)  echo "compute-sanitizer --tool memcheck --error-exitcode 3 ./test_gpt2cu" ;;
    racecheck) echo "compute-sanitizer --tool racecheck --error-exitcode 3 ./test_gpt2cu" ;;
    synccheck) echo "compute-sanitizer --tool synccheck --error-exitcode 3 ./test_gpt2cu" ;;
    bench)     echo "make bench-gpu" ;;
    nccl)      echo "make -o data train_gpt2cu && dev/gpu_check.sh --nccl-runs $DIR" ;;
    *) return 1 ;;
    esac
}

for s in $STAGES; do
    cmd=$(stage_command "$s") || { echo "gpu_check: unknown stage $s (build test memcheck racecheck synccheck bench nccl)" >&2; exit 2; }
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
