#!/bin/sh
# dev/cuda_cpu/mutants.sh [NAME...]: proof that the CUDA tests on the CPU runtime can fail.
#
# Each mutant is a copy of train_gpt2.cu with one deliberate bug of a kind real kernels have (a missing
# barrier, a transposed index, a grid one block short, a reduction step left out, an access past the
# end), built like `make test_gpt2cu_cpu` and run under test_gpt2.cu. It is caught when that run fails
# (a failed check, a race or fault reported by the runtime, a timeout); one that survives shows a blind
# spot of the runtime (race check, guard pages, 0xFF fill) or of the tests. doc/cuda.md describes it.
# The mutants of the data parallelism (dp-*, bf16-shard; train_gpt2.cu section 9) live in the trainer's
# processes: for them the trainer is built from the mutant too (NAME/train_gpt2cu_cpu) and test_gpt2.cu runs
# its section of several ranks alone (TEST_SECTIONS=multirank), on that binary (TRAIN_GPT2CU). Those that
# only GPT-2's sizes reach (loss-rows, norm-chunks, wte-grid) run that section alone (TEST_SECTIONS=sizes).
#
# The unmutated source must first build and pass the same way, or the catches mean nothing (where it
# fails some checks, a mutant must fail more of them, or stop with a runtime error). Each sed pattern
# must change exactly its line: a pattern that train_gpt2.cu's edits have made stale is a failure.
# Work and logs: dev/cuda_cpu/gen/mutants/NAME/{build.log,log}, from a snapshot of train_gpt2.cu and
# test_gpt2.cu taken at the start; builds two at a time, tests one at a time, from the repository root
# (they read test/fixtures/). CUDA_CPU_CXX overrides the compiler and its flags.
# Output: one "  ok   ..." or "  FAIL ..." line per check, then "N passed, N failed"; exit 1 on a failure.
set -u
cd "$(dirname "$0")/../.." || exit 2
CXX=${CUDA_CPU_CXX:-g++ -O2 -march=native -std=c++17 -fopenmp -fno-math-errno -Wno-unused-function}
TIMEOUT=1500    # seconds for one run; the unmutated one runs every test: minutes on 2 busy cores
GEN=dev/cuda_cpu/gen/mutants
ALL="syncthreads attn-sync transposed causal-skip grid reduction bounds adamw-table bf16-stale tc-rescale tc-diagonal tc-skip tc-sync bf16-input classifier grad-set tf32-round norm-bias gelu-bias qkv-bias rope-bias accum-zero head-dloss accum-bf16 sample-scale plain-causal plain-gqa plain-norm-db plain-wpe plain-adamw plain-logit-scale plain-rope-sign dp-skip dp-sum dp-shard dp-rows loss-rows norm-chunks wte-grid bf16-shard bf16-trunc shard-decay"

# mutate NAME: print the sed script of mutant NAME, then (second line) how many lines of
# `diff original mutant` start with < or > when it applies as intended, then for the mutants that one
# section of the tests must catch, a third line naming it: multirank (the tests of several ranks) or sizes
# (the trainer at GPT-2's sizes, whose code paths no other test reaches).
mutate() {
    case $1 in
    syncthreads)  # block_sum: the barrier between writing buf[] and reading it
        echo '/^template <typename T> __device__ T block_sum(T v) {$/,/^}$/{/if (lane == 0) buf\[wid\] = v;/{n;/^ *__syncthreads();$/d;};}'
        echo 1 ;;
    attn-sync)    # attention_forward_kernel: the barrier after loading a key/value tile into shared memory
        echo '/^__global__ void attention_forward_kernel(/,/^}$/{/^        load_kv_rows(ks, vs, in, b, k0, ATT_BK, T, KVH, kh, hd);$/{n;/^        __syncthreads();$/d;};}'
        echo 1 ;;
    transposed)   # attention_backward_kv_kernel: the causal mask transposed, key s sees the queries t <= s
        echo '/^__global__ void attention_backward_kv_kernel(/,/^}$/s/if (t >= s \&\& t < T) {/if (t <= s \&\& t < T) {/'
        echo 2 ;;
    causal-skip)  # attention_forward_kernel: only whole key tiles before the last query, the diagonal tile skipped
        echo '/^__global__ void attention_forward_kernel(/,/^}$/s/for (int k0 = 0; k0 <= q_last; k0 += ATT_BK) {/for (int k0 = 0; k0 + ATT_BK <= q_last; k0 += ATT_BK) {/'
        echo 2 ;;
    grid)         # gpu_norm_forward: floor instead of ceil, the last rows get no block
        echo '/^static void gpu_norm_forward(/,/^}$/s/norm_forward_kernel<A><<<ceil_div(N, ROW_THREADS \/ 32), /norm_forward_kernel<A><<<N \/ (ROW_THREADS \/ 32), /'
        echo 2 ;;
    reduction)    # warp_sum: the last shuffle step (offset 1) is left out
        echo '/^template <typename T> __device__ T warp_sum(T v) {$/,/^}$/s/for (int o = 16; o > 0; o >>= 1) v += /for (int o = 16; o > 1; o >>= 1) v += /'
        echo 2 ;;
    bounds)       # gelu_forward_kernel: one element past the end of up and out (the last layer's)
        echo '/^__global__ void gelu_forward_kernel(/,/^}$/s/if (i >= N) return;/if (i > N) return;/'
        echo 2 ;;
    adamw-table)  # adamw_kernel's binary search: the first element of each tensor gets the previous tensor's row
        echo '/^__global__ void adamw_kernel(/,/^}$/s/if (tab\[mid\].offset <= i) lo = mid;/if (tab[mid].offset < i) lo = mid;/'
        echo 2 ;;
    bf16-stale)   # adamw_kernel: the bf16 copy of the weights is not refreshed after the update (--dtype bf16)
        echo '/^__global__ void adamw_kernel(/,/^}$/{/^    if (w16) w16\[i\] = __float2bfloat16(pi);$/d;}'
        echo 1 ;;
    tc-rescale)   # attention_forward_tc_kernel: the running outputs not rescaled when a tile raises a row's maximum
        echo '/^__global__ void attention_forward_tc_kernel(/,/^}$/{/^        for (int c = half; c < hd; c += 2) os\[warp\]\[r\]\[c\] \*= corr;$/d;}'
        echo 1 ;;
    tc-diagonal)  # attention_backward_query_tc_kernel: the diagonal key masked out of the recomputed probabilities
        echo '/^__global__ void attention_backward_query_tc_kernel(/,/^}$/s/p\[j\] = k0 + c <= t \&\& t < T/p[j] = k0 + c < t \&\& t < T/'
        echo 2 ;;
    tc-skip)      # attention_backward_kv_tc_kernel: a warp skips the query tile that starts before its first key
        echo '/^__global__ void attention_backward_kv_tc_kernel(/,/^}$/s/if (w0 >= T || t0 + TCA_TILE - 1 < w0) continue;/if (w0 >= T || t0 < w0) continue;/'
        echo 2 ;;
    tc-sync)      # attention_forward_tc_kernel: no barrier between loading a key/value tile and the warps reading it
        echo '/^__global__ void attention_forward_tc_kernel(/,/^}$/{/^        __syncthreads();$/d;}'
        echo 2 ;;
    bf16-input)   # gpu_backward: W_up's weight gradient reads Norm1's output in bf16 (--dtype bf16 only) instead of Norm2's
        echo '/^static void gpu_backward(/,/^}$/s/ ln2_16, gpu_param_of(gm, K_WUP, l), BT, C, F, sc);/ ln1_16, gpu_param_of(gm, K_WUP, l), BT, C, F, sc);/'
        echo 2 ;;
    classifier)   # softmax_crossentropy_kernel: the probabilities not normalized in the gradient (the loss still right)
        echo '/^__global__ void softmax_crossentropy_kernel(/,/^}$/s/float pinv = (float)(1.0 \/ sum);/float pinv = 1.0f;/'
        echo 2 ;;
    grad-set)     # gpu_backward: the k product overwrites dln instead of adding to it (q's contribution lost)
        echo '/^static void gpu_backward(/,/^}$/s/gpu_matmul_backward(a->dln, NULL, GRAD_ADD, gpu_grad_of(gm, K_WK, l),/gpu_matmul_backward(a->dln, NULL, GRAD_SET, gpu_grad_of(gm, K_WK, l),/'
        echo 2 ;;
    tf32-round)   # Tf32Tiles::to_operand: the TF32 operands not rounded (the tensor cores then cut their low bits)
        echo '/^struct Tf32Tiles {/,/^};$/s/for (int i = 0; i < f.num_elements; i++) f.x\[i\] = wmma::__float_to_tf32(f.x\[i\]);/(void)f;/'
        echo 2 ;;
    norm-bias)    # norm_backward_kernel: the projection's bias gradient sums the norm's output gradient dln, not the new dres
        echo '/^__global__ void norm_backward_kernel(/,/^}$/s/            sx += dx;/            sx += dv;/'
        echo 2 ;;
    gelu-bias)    # gelu_backward_kernel: b_up's gradient sums dh, the GELU's output gradient, not its input gradient
        echo '/^__global__ void gelu_backward_kernel(/,/^}$/s/        sb += d;/        sb += as_float(dout[i]);/'
        echo 2 ;;
    qkv-bias)     # load_head_rows: the attention's tile loads leave out the q, k, v projections' biases
        echo '/^__device__ void load_head_rows(/,/^}$/s/float bv = bias ? bias\[col0 + d\] : 0.0f;/float bv = 0.0f;/'
        echo 2 ;;
    rope-bias)    # rope_kernel: q and k turned without their biases (where RoPE runs, the tile loads leave them to it)
        echo '/^__global__ void rope_kernel(/,/^}$/s/    if (bias) {/    if (0) {/'
        echo 2 ;;
    accum-zero)   # gpu_engine_backward: every micro-batch of an update (-d) zeroes the gradients, only the last one's kept
        echo '/^static void gpu_engine_backward(/,/^}$/s/^    gpu_backward((GpuModel\*)gm, B, T, dloss);$/    gpu_zero_grad((GpuModel*)gm); gpu_backward((GpuModel*)gm, B, T, dloss);/'
        echo 2 ;;
    accum-bf16)   # gpu_matmul_backward: with --dtype bf16 only, dW overwritten instead of added to (a second micro-batch replaces the first's)
        echo '/^static void gpu_matmul_backward(/,/^}$/s/alpha, inp16, C, dout16, OC, 1.0f, dW,$/alpha, inp16, C, dout16, OC, 0.0f, dW,/'
        echo 2 ;;
    sample-scale) # gpu_forward: sampling's softmax (no targets) without muP's logit scale: garbage samples under -I mup only
        echo '/^static float gpu_forward(/,/^}$/s/softmax_forward_kernel<<<BT, ROW_THREADS>>>(a->logits, c->V, c->logit_scale);/softmax_forward_kernel<<<BT, ROW_THREADS>>>(a->logits, c->V, 1.0f);/'
        echo 2 ;;
    head-dloss)   # gpu_backward: the LM head's products without the micro-batch's share dloss (each micro-batch at full weight)
        echo '/^static void gpu_backward(/,/^}$/s/head, BT, C, c->V, sc, dloss);/head, BT, C, c->V, sc);/'
        echo 2 ;;
    plain-causal) # attention_backward_kv_plain (Part I): the diagonal query t = s left out of dk and dv
        echo '/^__global__ void attention_backward_kv_plain(/,/^}$/s/for (long t = s; t < T; t++) {/for (long t = s + 1; t < T; t++) {/'
        echo 2 ;;
    plain-gqa)    # attention_backward_kv_plain: dk and dv from the first head of each kv head's group only
        echo '/^__global__ void attention_backward_kv_plain(/,/^}$/s/h < (kh + 1) \* group; h++)/h < kh * group + 1; h++)/'
        echo 2 ;;
    plain-norm-db) # norm_backward_params_plain: the LayerNorm bias gradient never written
        echo '/^__global__ void norm_backward_params_plain(/,/^}$/{/^    if (db) db\[c\] += sb;$/d;}'
        echo 1 ;;
    plain-wpe)    # embedding_backward_plain: the position embedding gets no gradient
        echo '/^__global__ void embedding_backward_plain(/,/^}$/{/^        if (dwpe) dwpe\[/d;}'
        echo 1 ;;
    plain-adamw)  # adamw_plain: the second moment without its bias correction sqrt(1 - b2^t)
        echo '/^__global__ void adamw_plain(/,/^}$/s/(sqrtf(v\[i\]) \/ k.bc2_sqrt + eps)/(sqrtf(v[i]) + eps)/'
        echo 2 ;;
    plain-logit-scale) # softmax_forward_plain: the loss reads the target's logit without muP's scale (-I mup only)
        echo '/^__global__ void softmax_forward_plain(/,/^}$/s/(z\[targets\[bt\]\] \* scale - mx)/(z[targets[bt]] - mx)/'
        echo 2 ;;
    plain-rope-sign) # plain_backward: the gradients of q turned forward again instead of back
        echo '/^static void plain_backward(/,/^}$/s/launch_rope(a->dq, a->rope_cs, B, T, H, hd, -1.0f);/launch_rope(a->dq, a->rope_cs, B, T, H, hd, 1.0f);/'
        echo 2 ;;
    dp-skip)      # dp_engine_backward marks the gradients averaged: the all-reduce (reduce-scatter under --zero 1) never runs
        echo '/^static void dp_engine_backward(/,/^}$/s/    g_dp.reduced = 0;/    g_dp.reduced = 1;/'
        echo 2; echo multirank ;;
    dp-sum)       # dp_reduce_grads: the gradients' all-reduce sums the ranks' gradients instead of averaging them
        echo '/^static void dp_reduce_grads(/,/^}$/s/gm->host->num_params, ncclFloat, ncclAvg,$/gm->host->num_params, ncclFloat, ncclSum,/'
        echo 2; echo multirank ;;
    dp-shard)     # zero_shard: every rank's shard starts one element late (--zero 1)
        echo '/^static Shard zero_shard(/,/^}$/s/return {(size_t)g_zero.rank \* n, n,/return {(size_t)g_zero.rank * n + 1, n,/'
        echo 2; echo multirank ;;
    dp-rows)      # dp_engine_forward: every rank reads rank 0's input rows (with its own targets)
        echo '/^static float dp_engine_forward(/,/^}$/s/gpu_forward(gm, inp + at, tgt + at, rows, T);/gpu_forward(gm, inp, tgt + at, rows, T);/'
        echo 2; echo multirank ;;
    loss-rows)    # loss_mean_kernel: one row per thread of its 1,024, so the rows past 1,024 left out of the mean
        echo '/^__global__ void loss_mean_kernel(/,/^}$/s/for (int i = threadIdx.x; i < BT; i += blockDim.x) s += losses\[i\];/if (threadIdx.x < BT) s = losses[threadIdx.x];/'
        echo 2; echo sizes ;;
    norm-chunks)  # grad_norm_finish_kernel: one chunk per thread of its 1,024, the chunks past 1,024 (67.1M parameters) left out
        echo '/^__global__ void grad_norm_finish_kernel(/,/^}$/s/for (int i = threadIdx.x; i < nchunks; i += blockDim.x) s += partial\[i\];/if (threadIdx.x < nchunks) s = partial[threadIdx.x];/'
        echo 2; echo sizes ;;
    wte-grid)     # embedding_backward_wte_kernel ignores the grid's blockIdx.y, which only widths past 256 channels have
        echo '/^__global__ void embedding_backward_wte_kernel(/,/^}$/s/int u = blockIdx.x, c = blockIdx.y \* blockDim.x + threadIdx.x;/int u = blockIdx.x, c = threadIdx.x;/'
        echo 2; echo sizes ;;
    bf16-shard)   # dp_engine_update (--zero 1, --dtype bf16): after the all-gather the bf16 copy is made again for the rank's own shard only
        echo '/^static void dp_engine_update(/,/^}$/s/if (g_bf16.on) bf16_round(g_bf16.w16, gm->params, (long)gm->host->num_params);/if (g_bf16.on) bf16_round(g_bf16.w16 + sh.lo, gm->params + sh.lo, (long)shard_numel(sh, gm->host->num_params));/'
        echo 2; echo multirank ;;
    bf16-trunc)   # set_elem: an activation rounded to bf16 by truncation (its top 16 bits kept) instead of to nearest even
        echo 's/^__device__ inline void set_elem(__nv_bfloat16\& e, float v) { e = __float2bfloat16(v); }$/__device__ inline void set_elem(__nv_bfloat16\& e, float v) { unsigned u; memcpy(\&u, \&v, 4); u \&= 0xFFFF0000u; memcpy(\&v, \&u, 4); e = __float2bfloat16(v); }/'
        echo 2 ;;
    shard-decay)  # gpu_upload_state (--zero 1): the shard's AdamW table leaves out the tensor that began in the shard before
        echo '/^static void gpu_upload_state(/,/^}$/s/if (t->offset + t->numel <= sh.lo || t->offset >= sh.lo + mine) continue;/if (t->offset < sh.lo || t->offset >= sh.lo + mine) continue;/'
        echo 2; echo multirank ;;
    *) return 1 ;;
    esac
}

names=
for n in ${*:-$ALL}; do
    mutate "$n" >/dev/null || { echo "usage: $0 [NAME...]; the mutants are: $ALL" >&2; exit 2; }
    case " $names " in *" $n "*) ;; *) names="$names $n" ;; esac
done

n_passed=0
n_failed=0
ok() { echo "  ok   $*"; n_passed=$((n_passed + 1)); }
fail() { echo "  FAIL $*"; n_failed=$((n_failed + 1)); }
# one line of at most ~150 characters, runs of blanks squeezed
short() { head -n 1 | sed 's/^[[:space:]]*//; s/[[:space:]][[:space:]]*/ /g' | cut -c 1-150; }

# The snapshot, and each copy's source NAME/train_gpt2.cu.in (for a mutant, the snapshot through its
# sed script). A mutant whose pattern no longer applies gets no directory.
rm -rf "$GEN"
mkdir -p "$GEN/src" || exit 2
cp train_gpt2.cu test_gpt2.cu "$GEN/src/" || exit 2
stale=
for n in unmutated $names; do
    d=$GEN/$n
    mkdir -p "$d"
    if [ "$n" = unmutated ]; then
        cp "$GEN/src/train_gpt2.cu" "$d/train_gpt2.cu.in"
    else
        script=$(mutate "$n" | sed -n 1p)
        want=$(mutate "$n" | sed -n 2p)
        sed "$script" "$GEN/src/train_gpt2.cu" > "$d/train_gpt2.cu.in"
        got=$(diff "$GEN/src/train_gpt2.cu" "$d/train_gpt2.cu.in" | grep -c '^[<>]')
        if [ "$got" != "$want" ]; then stale="$stale $n"; rm -rf "$d"; continue; fi
    fi
done

# build NAME: as `make test_gpt2cu_cpu`, in NAME/ (rewrite.sh's output NAME/train_gpt2.cu is what
# NAME/test_gpt2.cu's #include "train_gpt2.cu" finds), and for a multirank mutant `make train_gpt2cu_cpu`
# too; leaves NAME/build.rc, its exit status.
build() {
    d=$GEN/$1
    { dev/cuda_cpu/rewrite.sh "$d/train_gpt2.cu.in" "$d/train_gpt2.cu" &&
        dev/cuda_cpu/rewrite.sh "$GEN/src/test_gpt2.cu" "$d/test_gpt2.cu" &&
        $CXX -DUSE_NCCL -I dev/cuda_cpu -I . -x c++ -o "$d/test_gpt2cu_cpu" "$d/test_gpt2.cu" -lm &&
        { [ "$(mutate "$1" 2>/dev/null | sed -n 3p)" != multirank ] ||
            $CXX -DUSE_NCCL -I dev/cuda_cpu -I . -x c++ -o "$d/train_gpt2cu_cpu" "$d/train_gpt2.cu" -lm; }; } \
        > "$d/build.log" 2>&1
    echo $? > "$d/build.rc"
}
# Builds in the background, two at a time.
(
    running=0
    for n in unmutated $names; do
        [ -d "$GEN/$n" ] || continue
        build "$n" &
        running=$((running + 1))
        if [ $running -ge 2 ]; then wait; running=0; fi
    done
    wait
) &
builder=$!
trap 'kill $builder 2>/dev/null; exit 130' INT TERM

# run NAME: wait for its build; 1 if it failed, else run its tests (stdout and stderr to NAME/log) and
# set rc to their exit status. Once the unmutated source has passed, a mutant's run stops at its first
# failed check (TEST_STOP_AT_FAIL, test/fixture.h): one is all the verdict needs.
stop_at_fail=
run() {
    while [ ! -f "$GEN/$1/build.rc" ]; do sleep 1; done
    [ "$(cat "$GEN/$1/build.rc")" = 0 ] || return 1
    section=$(mutate "$1" 2>/dev/null | sed -n 3p)
    if [ "$section" = multirank ]; then
        TEST_SECTIONS=multirank TRAIN_GPT2CU=$GEN/$1/train_gpt2cu_cpu TEST_STOP_AT_FAIL=$stop_at_fail \
            timeout $TIMEOUT "$GEN/$1/test_gpt2cu_cpu" > "$GEN/$1/log" 2>&1
    elif [ -n "$section" ]; then
        TEST_SECTIONS=$section TEST_STOP_AT_FAIL=$stop_at_fail \
            timeout $TIMEOUT "$GEN/$1/test_gpt2cu_cpu" > "$GEN/$1/log" 2>&1
    else
        TEST_STOP_AT_FAIL=$stop_at_fail timeout $TIMEOUT "$GEN/$1/test_gpt2cu_cpu" > "$GEN/$1/log" 2>&1
    fi
    rc=$?
}
# the "N passed, N failed" line of a log, or nothing
count_line() { grep -E '^[0-9]+ passed, [0-9]+ failed$' "$1" | tail -n 1; }

base_failed=0
if ! run unmutated; then
    fail "unmutated train_gpt2.cu does not build (see $GEN/unmutated/build.log): the mutants mean nothing"
else
    counts=$(count_line "$GEN/unmutated/log")
    if [ $rc -eq 0 ]; then
        ok "unmutated train_gpt2.cu passes (${counts%%,*})"
        stop_at_fail=1
    else
        why=$(grep -E '^cuda_cpu:' "$GEN/unmutated/log" | short)
        [ -n "$why" ] || why=$(grep -E '^ *FAIL' "$GEN/unmutated/log" | short)
        fail "unmutated train_gpt2.cu fails (exit $rc; ${counts:-no count line}; $why): the mutants are judged against it"
        base_failed=$(echo "$counts" | sed -n 's/.* \([0-9]*\) failed$/\1/p')
        base_failed=${base_failed:-0}
    fi
fi

# A mutant is caught when its run fails where the unmutated one passed: a runtime error or a failed
# check the unmutated run does not have (so more failed checks), a timeout, a crash.
base=$GEN/unmutated/log
[ -f "$base" ] || base=/dev/null
for n in $names; do
    case " $stale " in *" $n "*)
        fail "mutant $n: the pattern no longer matches train_gpt2.cu"; continue ;;
    esac
    log=$GEN/$n/log
    if ! run "$n"; then fail "mutant $n did not compile (see $GEN/$n/build.log)"; continue; fi
    if [ $rc -eq 0 ]; then fail "mutant $n survived: the tests passed"; continue; fi
    counts=$(count_line "$log")
    failed=$(echo "$counts" | sed -n 's/.* \([0-9]*\) failed$/\1/p')
    new=$(grep -E '^cuda_cpu:|^ *FAIL' "$log" | grep -vxF -f "$base")   # not in the unmutated log
    why=$(echo "$new" | grep '^cuda_cpu:' | short)
    if [ -z "$why" ] && [ -n "$failed" ] && [ "$failed" -le "$base_failed" ]; then
        fail "mutant $n survived: it fails no more checks than the unmutated source ($counts)"; continue
    fi
    case $rc in 124|137) [ -n "$why" ] || why="timed out after $TIMEOUT s" ;; esac
    [ -n "$why" ] || why=$(echo "$new" | grep FAIL | short)
    [ -n "$why" ] || why=${counts:-"exit status $rc, no count line"}
    ok "mutant $n caught: $why"
done

wait $builder 2>/dev/null
echo "$n_passed passed, $n_failed failed"
[ $n_failed -eq 0 ]
