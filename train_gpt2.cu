/*
train_gpt2.cu: the trainer of train_gpt2.c on NVIDIA GPUs, in one file and two parts.

    make train_gpt2cu && ./train_gpt2cu -g 1.0 -e 1e-12   # [SmallInit]: gamma 1, eps 1e-12
    ./train_gpt2cu --kernels plain                         # the same run on Part I's kernels

PART I   THE MODEL ON THE GPU, PLAINLY. One float32 kernel (or two) per layer of train_gpt2.c's
         section 1, forward beside backward, one thread per output element or row, each the loop
         it replaces with its outer loops turned into threads; then the model's forward and
         backward pass, the gradient norm and AdamW on them. --kernels plain trains on these.
PART II  THE FAST KERNELS, the default (--kernels fast): cuBLAS GEMMs in TF32 or bf16, attention
         fused and tiled on the tensor cores, norms fused with the residuals, AdamW in one launch.
         Each names the Part I kernel it replaces; test_gpt2.cu proves each pair equal.

What is not arithmetic on the model is train_gpt2.c's, not a copy: this file #includes it and uses
its flags, Config, tensor table, data, initializers (the model is initialized on the host and copied
up, so a seed gives the weights of ./train_gpt2), schedule, checkpoints (one format for both
trainers), log and probes, and its loop through an engine (train_with_engine: Part I's train()
with each forward, backward and update handed to the GPU through an Engine). Several GPUs (section
9) train data-parallel over NCCL, with AdamW's state sharded by --zero 1. Every kernel is
deterministic (no atomics): a run gives the same losses bit for bit. doc/cuda.md lists the
kernels, and where they have run.
*/
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <mma.h>
// train_gpt2.c is compiled here as C++, where a void* does not turn into a float* by itself:
// AnyPtr carries what xmalloc and xcalloc return and converts it to the pointer it is assigned to.
// The two macros wrap every call; the functions are named in parentheses, which the macros do not
// touch. C++ also warns about C's `Config c = {0};`, which is fine.
struct AnyPtr {
    void* p;
    explicit AnyPtr(void* q) : p(q) {}
    AnyPtr(decltype(nullptr)) : p(nullptr) {}     // `cond ? xmalloc(n) : NULL`
    template <typename T> operator T*() const { return static_cast<T*>(p); }
};
#define xmalloc(n) (AnyPtr((xmalloc)(n)))
#define xcalloc(n, s) (AnyPtr((xcalloc)(n, s)))
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
// A rank that fails before the ranks have met tells the others (section 9, dp_fatal)
static void dp_fatal(void);
#define FATAL_HOOK() dp_fatal()
#define TRAIN_GPT2_NO_MAIN
#include "train_gpt2.c"

// ---- checking every CUDA call -----------------------------------------------------------------
static void cuda_check(cudaError_t e, const char* file, int line) {
    if (e != cudaSuccess) fatal("CUDA error at %s:%d: %s", file, line, cudaGetErrorString(e));
}
static void cublas_check(cublasStatus_t s, const char* file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS)
        fatal("cuBLAS error at %s:%d: %s", file, line, cublasGetStatusString(s));
}
#define cudaCheck(call) cuda_check((call), __FILE__, __LINE__)
#define cublasCheck(call) cublas_check((call), __FILE__, __LINE__)
// After every kernel launch, LAUNCH_CHECK(kernel): a bad launch is reported where it happened. A
// fault inside a kernel surfaces only at the next call that waits for the GPU; the debug build
// (make train_gpt2cu DEBUG=1, which sets CUDA_DEBUG) waits after every launch, so the message names
// the kernel, file and line that failed. g_after_op: dev/bench/bench_gpu.cu's per-kernel timer,
// called after every launch, cuBLAS call, memset and copy of a step (NULL in the trainer).
#ifndef CUDA_DEBUG
#define CUDA_DEBUG 0
#endif
#define LAUNCH_CHECK(kernel) launch_check(#kernel, __FILE__, __LINE__)
static void (*g_after_op)(const char* name) = NULL;
static void launch_check(const char* kernel, const char* file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && CUDA_DEBUG) e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        fatal("CUDA error in kernel %s (%s:%d): %s", kernel, file, line, cudaGetErrorString(e));
    if (g_after_op) g_after_op(kernel);
}
static int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }


// ############################################################################################
// PART I. THE MODEL ON THE GPU, PLAINLY
// ############################################################################################
// A kernel runs once per thread; thread i of the grid takes one output element (or one row, where
// the row needs its own sum first) of the loop in train_gpt2.c it replaces. Every launch below is
// PLAIN_THREADS threads per block and enough blocks for one thread per item. float32 throughout,
// no shared memory, no atomics; each sum runs in one thread, in the CPU loop's order.
#define PLAIN_THREADS 256
static int plain_blocks(long items) { return ceil_div(items, PLAIN_THREADS); }
__device__ long thread_index(void) { return (long)blockIdx.x * blockDim.x + threadIdx.x; }

// ============================================================================================
// 1. Layers: train_gpt2.c's section 1, kernel for loop. Backward kernels ACCUMULATE (+=) into
//    parameter gradients, as the CPU's do. Pointers are device pointers.
// ============================================================================================

// ---- matmul: out[BT,OC] = inp[BT,C] W[OC,C]^T + bias[OC] ----------------------------------------
// A kernel rather than one cuBLAS call, so that the sum is on the page; Part II calls cuBLAS.
// One thread per out[bt][o].
__global__ void matmul_forward_plain(float* out, const float* inp, const float* W,
                                     const float* bias, int BT, int C, int OC) {
    long i = thread_index();
    if (i >= (long)BT * OC) return;
    long bt = i / OC, o = i % OC;
    float s = bias ? bias[o] : 0.0f;
    for (int c = 0; c < C; c++) s += inp[bt * C + c] * W[o * C + c];
    out[i] = s;
}
static void launch_matmul_forward(float* out, const float* inp, const float* W, const float* bias,
                                  int BT, int C, int OC) {
    long n = (long)BT * OC;
    matmul_forward_plain<<<plain_blocks(n), PLAIN_THREADS>>>(out, inp, W, bias, BT, C, OC);
    LAUNCH_CHECK(matmul_forward_plain);
}

// dinp[bt][c] += sum_o dout[bt][o] W[o][c]: one thread per (bt, c)
__global__ void matmul_backward_input_plain(float* dinp, const float* dout, const float* W, int BT,
                                            int C, int OC) {
    long i = thread_index();
    if (i >= (long)BT * C) return;
    long bt = i / C, c = i % C;
    float s = 0.0f;
    for (int o = 0; o < OC; o++) s += dout[bt * OC + o] * W[(long)o * C + c];
    dinp[i] += s;
}
// dW[o][c] += sum_bt dout[bt][o] inp[bt][c], one thread per (o, c); the thread of column 0 also
// adds dbias[o] += sum_bt dout[bt][o]
__global__ void matmul_backward_weight_plain(float* dW, float* dbias, const float* dout,
                                             const float* inp, int BT, int C, int OC) {
    long i = thread_index();
    if (i >= (long)OC * C) return;
    long o = i / C, c = i % C;
    float s = 0.0f;
    for (long bt = 0; bt < BT; bt++) s += dout[bt * OC + o] * inp[bt * C + c];
    dW[i] += s;
    if (!dbias || c != 0) return;
    float sb = 0.0f;
    for (long bt = 0; bt < BT; bt++) sb += dout[bt * OC + o];
    dbias[o] += sb;
}
static void launch_matmul_backward(float* dinp, float* dW, float* dbias, const float* dout,
                                   const float* inp, const float* W, int BT, int C, int OC) {
    long inputs = (long)BT * C, weights = (long)OC * C;      // a thread each
    matmul_backward_input_plain<<<plain_blocks(inputs), PLAIN_THREADS>>>(dinp, dout, W, BT, C, OC);
    LAUNCH_CHECK(matmul_backward_input_plain);
    matmul_backward_weight_plain<<<plain_blocks(weights), PLAIN_THREADS>>>(dW, dbias, dout, inp, BT,
            C, OC);
    LAUNCH_CHECK(matmul_backward_weight_plain);
}

// ---- embeddings: out[b,t,:] = wte[tok[b,t],:] (+ wpe[t,:] for learned positions) ---------------
// One thread per out[bt][c].
__global__ void embedding_forward_plain(float* out, const int* tok, const float* wte,
                                        const float* wpe, int B, int T, int C) {
    long i = thread_index();
    if (i >= (long)B * T * C) return;
    long bt = i / C, c = i % C;
    out[i] = wte[(long)tok[bt] * C + c] + (wpe ? wpe[(bt % T) * C + c] : 0.0f);
}
// Each position adds its gradient to its token's row (and its position's). A token can appear
// twice, so threads split the channels, not the positions: thread c walks every position in order
// (the CPU's order) and adds into column c only, which no other thread writes.
__global__ void embedding_backward_plain(float* dwte, float* dwpe, const float* dout,
                                         const int* tok, int B, int T, int C) {
    long c = thread_index();
    if (c >= C) return;
    for (long bt = 0; bt < (long)B * T; bt++) {
        dwte[(long)tok[bt] * C + c] += dout[bt * C + c];
        if (dwpe) dwpe[(bt % T) * C + c] += dout[bt * C + c];
    }
}
static void launch_embedding_forward(float* out, const int* tok, const float* wte, const float* wpe,
                                     int B, int T, int C) {
    long n = (long)B * T * C;
    embedding_forward_plain<<<plain_blocks(n), PLAIN_THREADS>>>(out, tok, wte, wpe, B, T, C);
    LAUNCH_CHECK(embedding_forward_plain);
}
static void launch_embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tok,
                                      int B, int T, int C) {
    embedding_backward_plain<<<plain_blocks(C), PLAIN_THREADS>>>(dwte, dwpe, dout, tok, B, T, C);
    LAUNCH_CHECK(embedding_backward_plain);
}

// ---- normalization: [SmallInit eq. 1] LayerNorm, [SmallInit eq. 2] RMSNorm ---------------------
// LayerNorm(h) = w (h - mu) / sqrt(sigma^2 + eps) + b ;  RMSNorm(h) = w h / sqrt(mean(h^2) + eps),
// eps inside the square root (train_gpt2.c's norm_forward says why that matters for small init).
// One thread per row: its mean, its variance, then its C outputs. mean (LayerNorm) and rstd are
// kept.
__global__ void norm_forward_plain(float* out, float* mean, float* rstd, const float* inp,
                                   const float* w, const float* b, int rms, float eps, int N,
                                   int C) {
    long n = thread_index();
    if (n >= N) return;
    const float* x = inp + n * C;
    float mu = 0.0f, var = 0.0f;
    if (!rms) {
        for (int c = 0; c < C; c++) mu += x[c];
        mu /= C;
    }
    for (int c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
    var /= C;
    float s = 1.0f / sqrtf(var + eps);
    for (int c = 0; c < C; c++) out[n * C + c] = (x[c] - mu) * s * w[c] + (b ? b[c] : 0.0f);
    if (mean) mean[n] = mu;
    rstd[n] = s;
}
// With xhat = (x - mu) rstd and g = dout w (norm_backward):
//   dx += rstd (g - mean(g) - xhat mean(g xhat))   (RMSNorm: without mean(g))
// one thread per row, for its two means first. xhat is formed before it meets the gradient, as on
// the CPU (norm_backward says why: rstd 0 beside a huge x - mu)
__global__ void norm_backward_input_plain(float* dinp, const float* dout, const float* inp,
                                          const float* w, const float* mean, const float* rstd,
                                          int rms, int N, int C) {
    long n = thread_index();
    if (n >= N) return;
    const float* x = inp + n * C;
    const float* d = dout + n * C;
    float mu = rms ? 0.0f : mean[n], s = rstd[n], g_mean = 0.0f, gx_mean = 0.0f;
    for (int c = 0; c < C; c++) {
        float xhat = (x[c] - mu) * s;
        g_mean += d[c] * w[c];
        gx_mean += d[c] * w[c] * xhat;
    }
    g_mean = rms ? 0.0f : g_mean / C;
    gx_mean /= C;
    for (int c = 0; c < C; c++)
        dinp[n * C + c] += s * (d[c] * w[c] - g_mean - (x[c] - mu) * s * gx_mean);
}
// dw[c] += sum over rows of dout xhat, db[c] += sum of dout: one thread per column, rows in order
__global__ void norm_backward_params_plain(float* dw, float* db, const float* dout,
                                           const float* inp, const float* mean, const float* rstd,
                                           int rms, int N, int C) {
    long c = thread_index();
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (long n = 0; n < N; n++) {
        float xhat = (inp[n * C + c] - (rms ? 0.0f : mean[n])) * rstd[n];
        sw += dout[n * C + c] * xhat;
        sb += dout[n * C + c];
    }
    dw[c] += sw;
    if (db) db[c] += sb;
}
static void launch_norm_forward(float* out, float* mean, float* rstd, const float* inp,
                                const float* w, const float* b, int rms, float eps, int N, int C) {
    norm_forward_plain<<<plain_blocks(N), PLAIN_THREADS>>>(out, mean, rstd, inp, w, b, rms, eps, N,
            C);
    LAUNCH_CHECK(norm_forward_plain);
}
static void launch_norm_backward(float* dinp, float* dw, float* db, const float* dout,
                                 const float* inp, const float* w, const float* mean,
                                 const float* rstd, int rms, int N, int C) {
    norm_backward_input_plain<<<plain_blocks(N), PLAIN_THREADS>>>(dinp, dout, inp, w, mean, rstd,
            rms, N, C);
    LAUNCH_CHECK(norm_backward_input_plain);
    norm_backward_params_plain<<<plain_blocks(C), PLAIN_THREADS>>>(dw, db, dout, inp, mean, rstd,
            rms, N, C);
    LAUNCH_CHECK(norm_backward_params_plain);
}

// ---- rotary position embedding (llama preset) --------------------------------------------------
// Pair (2j, 2j+1) of head vector h at position t turns by the angle t theta^(-2j/hd), whose cosine
// and sine are the CPU's table cs [T, hd/2, 2] (rope_table). sign +1 forward; -1 backward, where
// the gradient turns back by the same angle. x [B*T, nh*hd] in place; one thread per pair.
__global__ void rope_plain(float* x, const float* cs, int BT, int T, int nh, int hd, float sign) {
    long i = thread_index(), pairs = hd / 2;
    if (i >= (long)BT * nh * pairs) return;
    long bt = i / (nh * pairs), j = i % pairs;
    const float* ct = cs + ((bt % T) * pairs + j) * 2;
    float c = ct[0], sn = sign * ct[1];
    float* v = x + 2 * i; // pair i is x[2i], x[2i+1]: rows of nh*hd, heads of hd
    float a = v[0], b = v[1];
    v[0] = a * c - b * sn;
    v[1] = a * sn + b * c;
}
static void launch_rope(float* x, const float* cs, int B, int T, int nh, int hd, float sign) {
    long n = (long)B * T * nh * (hd / 2);
    rope_plain<<<plain_blocks(n), PLAIN_THREADS>>>(x, cs, B * T, T, nh, hd, sign);
    LAUNCH_CHECK(rope_plain);
}

// ---- causal self-attention with grouped KV heads ----------------------------------------------
// q [BT, H*hd], k and v [BT, KVH*hd]; head h reads kv head h / (H/KVH). att [B,H,T,T] keeps the
// probabilities for the backward pass.  A = softmax(scale q k^T + causal mask),  y = A v
// One thread per query row (b, h, t): its scores, their softmax, then the weighted sum of values.
__global__ void attention_forward_plain(float* y, float* att, const float* q, const float* k,
                                        const float* v, int B, int T, int H, int KVH, int hd,
                                        float scale) {
    long row = thread_index();                      // row = (b H + h) T + t
    if (row >= (long)B * H * T) return;
    long t = row % T, h = row / T % H, b = row / ((long)T * H), kh = h / (H / KVH);
    long qd = (long)H * hd, kvd = (long)KVH * hd;
    const float* qt = q + (b * T + t) * qd + h * hd;
    float* a = att + row * T;
    float mx = -FLT_MAX, sum = 0.0f;
    for (long s = 0; s <= t; s++) {                 // the scores of the keys up to t
        const float* ks = k + (b * T + s) * kvd + kh * hd;
        float dot = 0.0f;
        for (int i = 0; i < hd; i++) dot += qt[i] * ks[i];
        a[s] = scale * dot;
        mx = fmaxf(mx, a[s]);
    }
    for (long s = 0; s <= t; s++) {                 // softmax, less the maximum for safety
        a[s] = expf(a[s] - mx);
        sum += a[s];
    }
    for (long s = 0; s < T; s++) a[s] = s <= t ? a[s] / sum : 0.0f;
    for (int i = 0; i < hd; i++) {                  // y_t = sum_s A[t,s] v_s
        float acc = 0.0f;
        for (long s = 0; s <= t; s++) acc += a[s] * v[(b * T + s) * kvd + kh * hd + i];
        y[(b * T + t) * qd + h * hd + i] = acc;
    }
}
// The backward (attention_backward), in three kernels, each writing what it computes:
//   dA[t,s] = dy_t . v_s ;  dP[t,s] = A[t,s] (dA[t,s] - sum_s' A[t,s'] dA[t,s']) scale
//   dq_t = sum_s dP[t,s] k_s ;  dk_s = sum_{h of the group} sum_{t>=s} dP[t,s] q_t
//   dv_s = sum_{h of the group} sum_{t>=s} A[t,s] dy_t
// (a) one thread per query row (b, h, t): its row of dP, into dP [B,H,T,T]
__global__ void attention_backward_scores_plain(float* dP, const float* dy, const float* att,
                                                const float* v, int B, int T, int H, int KVH,
                                                int hd, float scale) {
    long row = thread_index();
    if (row >= (long)B * H * T) return;
    long t = row % T, h = row / T % H, b = row / ((long)T * H), kh = h / (H / KVH);
    long qd = (long)H * hd, kvd = (long)KVH * hd;
    const float* a = att + row * T;
    const float* dyt = dy + (b * T + t) * qd + h * hd;
    float* dp = dP + row * T;
    float adot = 0.0f;
    for (long s = 0; s <= t; s++) {
        const float* vs = v + (b * T + s) * kvd + kh * hd;
        float d = 0.0f;
        for (int i = 0; i < hd; i++) d += dyt[i] * vs[i];
        dp[s] = d;
        adot += a[s] * d;
    }
    for (long s = 0; s <= t; s++) dp[s] = a[s] * (dp[s] - adot) * scale;
}
// (b) one thread per element dq[b,t,h,i]
__global__ void attention_backward_query_plain(float* dq, const float* dP, const float* k, int B,
                                               int T, int H, int KVH, int hd) {
    long e = thread_index(), qd = (long)H * hd, kvd = (long)KVH * hd;
    if (e >= (long)B * T * qd) return;
    long bt = e / qd, h = e % qd / hd, i = e % hd, b = bt / T, t = bt % T, kh = h / (H / KVH);
    const float* dp = dP + ((b * H + h) * T + t) * T;
    float s = 0.0f;
    for (long u = 0; u <= t; u++) s += dp[u] * k[(b * T + u) * kvd + kh * hd + i];
    dq[e] = s;
}
// (c) one thread per element of dk[b,s,kh,i] and dv[b,s,kh,i]: over the heads of kv head kh, then
// the queries t >= s, the CPU's order
__global__ void attention_backward_kv_plain(float* dk, float* dv, const float* dP, const float* att,
                                            const float* q, const float* dy, int B, int T, int H,
                                            int KVH, int hd) {
    long e = thread_index(), qd = (long)H * hd, kvd = (long)KVH * hd;
    if (e >= (long)B * T * kvd) return;
    long bs = e / kvd, kh = e % kvd / hd, i = e % hd, b = bs / T, s = bs % T, group = H / KVH;
    float sk = 0.0f, sv = 0.0f;
    for (long h = kh * group; h < (kh + 1) * group; h++)
        for (long t = s; t < T; t++) {
            long at = ((b * H + h) * T + t) * T + s, row = (b * T + t) * qd + h * hd + i;
            sk += dP[at] * q[row];
            sv += att[at] * dy[row];
        }
    dk[e] = sk;
    dv[e] = sv;
}
static void launch_attention_forward(float* y, float* att, const float* q, const float* k,
                                     const float* v, int B, int T, int H, int KVH, int hd,
                                     float scale) {
    long n = (long)B * H * T;
    attention_forward_plain<<<plain_blocks(n), PLAIN_THREADS>>>(y, att, q, k, v, B, T, H, KVH, hd,
            scale);
    LAUNCH_CHECK(attention_forward_plain);
}
// dq, dk, dv are written (not added to); dP: B H T T floats of scratch
static void launch_attention_backward(float* dq, float* dk, float* dv, float* dP, const float* dy,
                                      const float* att, const float* q, const float* k,
                                      const float* v, int B, int T, int H, int KVH, int hd,
                                      float scale) {
    long rows = (long)B * H * T, dqs = (long)B * T * H * hd, dks = (long)B * T * KVH * hd;
    attention_backward_scores_plain<<<plain_blocks(rows), PLAIN_THREADS>>>(dP, dy, att, v, B, T, H,
            KVH, hd, scale);
    LAUNCH_CHECK(attention_backward_scores_plain);
    attention_backward_query_plain<<<plain_blocks(dqs), PLAIN_THREADS>>>(dq, dP, k, B, T, H, KVH,
            hd);
    LAUNCH_CHECK(attention_backward_query_plain);
    attention_backward_kv_plain<<<plain_blocks(dks), PLAIN_THREADS>>>(dk, dv, dP, att, q, dy, B, T,
            H, KVH, hd);
    LAUNCH_CHECK(attention_backward_kv_plain);
}

// ---- the attention gate: [SmallInit eqs. 3-4] --------------------------------------------------
// GAttn(x) = Concat(g_1(x) head_1, ..., g_H(x) head_H) W_O,  g_h(x) = sigmoid(x W_h^g)
// gate [BT,H] holds the pre-activation on entry and g on return. One thread per (bt, h).
__global__ void attn_gate_forward_plain(float* out, float* gate, const float* y, int BT, int H,
                                        int hd) {
    long r = thread_index();                        // r = bt H + h
    if (r >= (long)BT * H) return;
    float g = sigmoid_of(gate[r]);
    gate[r] = g;
    for (int i = 0; i < hd; i++) out[r * hd + i] = g * y[r * hd + i];
}
// dy = g dout ;  dgate (of the pre-activation) = (sum_i dout_i y_i) g (1 - g)
__global__ void attn_gate_backward_plain(float* dy, float* dgate, const float* dout, const float* y,
                                         const float* gate, int BT, int H, int hd) {
    long r = thread_index();
    if (r >= (long)BT * H) return;
    float g = gate[r], s = 0.0f;
    for (int i = 0; i < hd; i++) {
        s += dout[r * hd + i] * y[r * hd + i];
        dy[r * hd + i] = g * dout[r * hd + i];
    }
    dgate[r] = s * g * (1.0f - g);
}
static void launch_attn_gate_forward(float* out, float* gate, const float* y, int BT, int H,
                                     int hd) {
    long n = (long)BT * H;
    attn_gate_forward_plain<<<plain_blocks(n), PLAIN_THREADS>>>(out, gate, y, BT, H, hd);
    LAUNCH_CHECK(attn_gate_forward_plain);
}
static void launch_attn_gate_backward(float* dy, float* dgate, const float* dout, const float* y,
                                      const float* gate, int BT, int H, int hd) {
    long n = (long)BT * H;
    attn_gate_backward_plain<<<plain_blocks(n), PLAIN_THREADS>>>(dy, dgate, dout, y, gate, BT, H,
            hd);
    LAUNCH_CHECK(attn_gate_backward_plain);
}

// ---- MLP activations: GELU (tanh form) and SwiGLU, train_gpt2.c's per-element functions --------
// One thread per element, forward and backward.
__global__ void gelu_forward_plain(float* out, const float* inp, long N) {
    long i = thread_index();
    if (i < N) out[i] = gelu_of(inp[i]);
}
__global__ void gelu_backward_plain(float* dinp, const float* inp, const float* dout, long N) {
    long i = thread_index();
    if (i < N) dinp[i] = gelu_grad_of(inp[i]) * dout[i];
}
__global__ void swiglu_forward_plain(float* out, const float* a, const float* u, long N) {
    long i = thread_index();
    if (i < N) out[i] = swiglu_of(a[i], u[i]);
}
__global__ void swiglu_backward_plain(float* da, float* du, const float* a, const float* u,
                                      const float* dout, long N) {
    long i = thread_index();
    if (i < N) swiglu_grad_of(a[i], u[i], dout[i], &da[i], &du[i]);
}
static void launch_gelu_forward(float* out, const float* inp, long N) {
    gelu_forward_plain<<<plain_blocks(N), PLAIN_THREADS>>>(out, inp, N);
    LAUNCH_CHECK(gelu_forward_plain);
}
static void launch_gelu_backward(float* dinp, const float* inp, const float* dout, long N) {
    gelu_backward_plain<<<plain_blocks(N), PLAIN_THREADS>>>(dinp, inp, dout, N);
    LAUNCH_CHECK(gelu_backward_plain);
}
static void launch_swiglu_forward(float* out, const float* a, const float* u, long N) {
    swiglu_forward_plain<<<plain_blocks(N), PLAIN_THREADS>>>(out, a, u, N);
    LAUNCH_CHECK(swiglu_forward_plain);
}
static void launch_swiglu_backward(float* da, float* du, const float* a, const float* u,
                                   const float* dout, long N) {
    swiglu_backward_plain<<<plain_blocks(N), PLAIN_THREADS>>>(da, du, a, u, dout, N);
    LAUNCH_CHECK(swiglu_backward_plain);
}

// ---- residual: out = a + b, one thread per element ----------------------------------------------
__global__ void residual_forward_plain(float* out, const float* a, const float* b, long N) {
    long i = thread_index();
    if (i < N) out[i] = a[i] + b[i];
}
static void launch_residual_forward(float* out, const float* a, const float* b, long N) {
    residual_forward_plain<<<plain_blocks(N), PLAIN_THREADS>>>(out, a, b, N);
    LAUNCH_CHECK(residual_forward_plain);
}

// ---- softmax + cross-entropy ------------------------------------------------------------------
// logits [BT,V] (each times scale: muP's logit multiplier, 1 otherwise) are replaced by their
// probabilities; losses[bt] = -log p[target] = log(sum) - (z_t - max), exact where p underflows.
// Without targets (sampling) only the probabilities. One thread per row, three passes over it.
__global__ void softmax_forward_plain(float* logits, float* losses, const int* targets, int BT,
                                      int V, float scale) {
    long bt = thread_index();
    if (bt >= BT) return;
    float* z = logits + bt * V;
    float mx = -FLT_MAX;
    for (int i = 0; i < V; i++) mx = fmaxf(mx, z[i] * scale);
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += expf(z[i] * scale - mx);
    if (targets) losses[bt] = (float)(log(sum) - (z[targets[bt]] * scale - mx));
    for (int i = 0; i < V; i++) z[i] = (float)(expf(z[i] * scale - mx) / sum);
}
// d (scale x the mean loss over BT rows) / d logits = scale (p - onehot(target)) / BT, written over
// p, one thread per element (crossentropy_backward)
__global__ void crossentropy_backward_plain(float* probs, const int* targets, int BT, int V,
                                            float scale) {
    long i = thread_index();
    if (i >= (long)BT * V) return;
    float inv = 1.0f / BT, d = probs[i] * inv;
    if (i % V == targets[i / V]) d -= inv;
    probs[i] = scale != 1.0f ? d * scale : d;
}
static void launch_softmax_forward(float* logits, float* losses, const int* targets, int BT, int V,
                                   float scale) {
    softmax_forward_plain<<<plain_blocks(BT), PLAIN_THREADS>>>(logits, losses, targets, BT, V,
            scale);
    LAUNCH_CHECK(softmax_forward_plain);
}
// The LM head's backward (lm_head_backward): the logits' gradient over the probabilities, then the
// matmul's backward into the final norm's output and the head's weight
static void launch_lm_head_backward(float* dinp, float* dW, float* probs, const int* targets,
                                    const float* inp, const float* W, int BT, int C, int V,
                                    float scale) {
    long n = (long)BT * V;
    crossentropy_backward_plain<<<plain_blocks(n), PLAIN_THREADS>>>(probs, targets, BT, V, scale);
    LAUNCH_CHECK(crossentropy_backward_plain);
    launch_matmul_backward(dinp, dW, NULL, probs, inp, W, BT, C, V);
}

// ============================================================================================
// 2. The model on the device: train_gpt2.c's model_forward and model_backward, launch for call
// ============================================================================================
// train_gpt2.c's own Model, copied, with its parameters, gradients, AdamW moments and activations
// (Acts, the CPU's layout: acts_layout) moved into device memory: param_of, grad_of and layer_acts
// then give device pointers, and the passes below read line for line as the CPU's.
typedef struct {
    Model d;            // the host model's config and tensor table; every buffer a device buffer
    Model* host;        // the model on the host, initialized there; checkpoints are written from it
    float* dP;          // attention's dP for one layer of the backward pass, B x H x T x T
    double* sumsq;      // the gradient norm's partial sums (device), and their host copy below
    double* sumsq_h;
    float* losses_h;    // the forward's B x T losses, copied down to be averaged
    float* probs_h;     // one row of probabilities, copied down for sampling
    char* acts;         // the activations' block (acts_layout carves Acts out of it)
} PlainGpu;

#define NORM_CHUNK 65536                  // gradients per partial sum of the gradient norm

// the parameters (and with moments 1 AdamW's m and v): host <-> device
static void plain_copy_state(PlainGpu* pg, cudaMemcpyKind dir, int moments) {
    Model *d = &pg->d, *h = pg->host;
    size_t bytes = h->num_params * sizeof(float);
    int up = dir == cudaMemcpyHostToDevice;
    cudaCheck(cudaMemcpy(up ? d->params : h->params, up ? h->params : d->params, bytes, dir));
    if (!moments) return;
    cudaCheck(cudaMemcpy(up ? d->adam_m : h->adam_m, up ? h->adam_m : d->adam_m, bytes, dir));
    cudaCheck(cudaMemcpy(up ? d->adam_v : h->adam_v, up ? h->adam_v : d->adam_v, bytes, dir));
}

// The device model for batches up to B x T, from the host model (built, and initialized or loaded)
static void plain_model_create(PlainGpu* pg, Model* host, int B, int T) {
    const Config* c = &host->cfg;
    Model* d = &pg->d;
    *d = *host;
    pg->host = host;
    size_t n = host->num_params;
    float* block;
    cudaCheck(cudaMalloc((void**)&block, 4 * n * sizeof(float)));
    d->params = block;
    d->grads = block + n;
    d->adam_m = block + 2 * n;
    d->adam_v = block + 3 * n;
    cudaCheck(cudaMemset(d->grads, 0, n * sizeof(float)));
    for (int kd = 0; kd < NUM_KINDS; kd++) {
        d->p[kd] = host->p[kd] ? d->params + (host->p[kd] - host->params) : NULL;
        d->g[kd] = host->g[kd] ? d->grads + (host->g[kd] - host->grads) : NULL;
    }
    size_t bytes = acts_bytes(c, B, T), used = 0;
    cudaCheck(cudaMalloc((void**)&pg->acts, bytes));
    acts_layout(d, B, T, &used, pg->acts);
    if (c->rope) {                             // the CPU's cosines and sines
        int hd = c->C / c->H;
        float* cs = zeroed_floats((size_t)T * hd);
        rope_table(cs, T, hd, c->rope_theta);
        cudaCheck(cudaMemcpy(d->a.rope_cs, cs, (size_t)T * hd * sizeof(float),
                             cudaMemcpyHostToDevice));
        free(cs);
    }
    int chunks = ceil_div((long)n, NORM_CHUNK);
    cudaCheck(cudaMalloc((void**)&pg->dP, (size_t)B * c->H * T * T * sizeof(float)));
    cudaCheck(cudaMalloc((void**)&pg->sumsq, chunks * sizeof(double)));
    pg->sumsq_h = (double*)xmalloc(chunks * sizeof(double));
    pg->losses_h = (float*)xmalloc((size_t)B * T * sizeof(float));
    pg->probs_h = (float*)xmalloc((size_t)c->V * sizeof(float));
    plain_copy_state(pg, cudaMemcpyHostToDevice, 1);
}

static void plain_model_free(PlainGpu* pg) {
    cudaCheck(cudaFree(pg->d.params));
    cudaCheck(cudaFree(pg->acts));
    cudaCheck(cudaFree(pg->dP));
    cudaCheck(cudaFree(pg->sumsq));
    free(pg->sumsq_h);
    free(pg->losses_h);
    free(pg->probs_h);
}

// model_forward: with targets, the mean cross-entropy (averaged on the host in double, as the CPU
// does); without, the logits buffer holds next-token probabilities and the return value is 0.
// It keeps model_forward's shape line for line on purpose, each layer call a launch, so that the
// two read side by side; what differs is where the data lives (copies in, the losses out).
static float plain_forward(PlainGpu* pg, const int* tokens, const int* targets, int B, int T) {
    Model* m = &pg->d;
    const Config* c = &m->cfg;
    Acts* a = &m->a;
    int BT = B * T, C = c->C, H = c->H, KVH = c->KVH, hd = C / H, F = c->F;
    int qd = H * hd, kvd = KVH * hd;
    if (B > m->B || T > m->T)
        fatal("internal: forward with B=%d T=%d exceeds buffers %dx%d", B, T, m->B, m->T);
    for (int i = 0; i < BT; i++)
        if (tokens[i] < 0 || tokens[i] >= c->V)
            fatal("token id %d out of range [0, %d)", tokens[i], c->V);
    cudaCheck(cudaMemcpy(m->tokens, tokens, BT * sizeof(int), cudaMemcpyHostToDevice));
    if (targets)
        cudaCheck(cudaMemcpy(m->targets, targets, BT * sizeof(int), cudaMemcpyHostToDevice));
    launch_embedding_forward(a->res, m->tokens, m->p[K_WTE], m->p[K_WPE], B, T, C);
    for (int l = 0; l < c->L; l++) {
        LayerActs la = layer_acts(a, c, l, (long)m->B * m->T, m->T);
        // attention sublayer: xmid = x + Attn(Norm1(x))
        launch_norm_forward(la.ln1, la.ln1_mean, la.ln1_rstd, la.x, param_of(m, K_LN1W, l),
                            param_of(m, K_LN1B, l), c->rmsnorm, c->eps, BT, C);
        launch_matmul_forward(la.q, la.ln1, param_of(m, K_WQ, l), param_of(m, K_BQ, l), BT, C, qd);
        launch_matmul_forward(la.k, la.ln1, param_of(m, K_WK, l), param_of(m, K_BK, l), BT, C, kvd);
        launch_matmul_forward(la.v, la.ln1, param_of(m, K_WV, l), param_of(m, K_BV, l), BT, C, kvd);
        if (c->rope) {
            launch_rope(la.q, a->rope_cs, B, T, H, hd, 1.0f);
            launch_rope(la.k, a->rope_cs, B, T, KVH, hd, 1.0f);
        }
        launch_attention_forward(la.yatt, la.att, la.q, la.k, la.v, B, T, H, KVH, hd,
                                 c->attn_scale);
        if (c->attn_gate) {
            launch_matmul_forward(la.attn_gate, la.ln1, param_of(m, K_ATTN_WG, l),
                                  param_of(m, K_ATTN_BG, l), BT, C, H);
            launch_attn_gate_forward(la.attn_out, la.attn_gate, la.yatt, BT, H, hd);
        }
        launch_matmul_forward(a->proj, la.attn_out, param_of(m, K_WO, l), param_of(m, K_BO, l), BT,
                              qd, C);
        launch_residual_forward(la.xmid, la.x, a->proj, (long)BT * C);
        // MLP sublayer: xout = xmid + MLP(Norm2(xmid))
        launch_norm_forward(la.ln2, la.ln2_mean, la.ln2_rstd, la.xmid, param_of(m, K_LN2W, l),
                            param_of(m, K_LN2B, l), c->rmsnorm, c->eps, BT, C);
        launch_matmul_forward(la.up, la.ln2, param_of(m, K_WUP, l), param_of(m, K_BUP, l), BT, C,
                              F);
        if (c->swiglu) {
            launch_matmul_forward(la.mlp_gate, la.ln2, param_of(m, K_WGATE, l),
                                  param_of(m, K_BGATE, l), BT, C, F);
            launch_swiglu_forward(la.hact, la.mlp_gate, la.up, (long)BT * F);
        } else {
            launch_gelu_forward(la.hact, la.up, (long)BT * F);
        }
        launch_matmul_forward(a->proj, la.hact, param_of(m, K_WDOWN, l), param_of(m, K_BDOWN, l),
                              BT, F, C);
        launch_residual_forward(la.xout, la.xmid, a->proj, (long)BT * C);
    }
    float* xL = a->res + (long)c->L * m->B * m->T * C;
    launch_norm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, xL, m->p[K_LNFW], m->p[K_LNFB],
                        c->rmsnorm, c->eps, BT, C);
    launch_matmul_forward(a->logits, a->lnf, c->tied ? m->p[K_WTE] : m->p[K_LMHEAD], NULL, BT, C,
                          c->V);
    launch_softmax_forward(a->logits, a->losses, targets ? m->targets : NULL, BT, c->V,
                           c->logit_scale);
    if (!targets) return 0.0f;
    cudaCheck(cudaMemcpy(pg->losses_h, a->losses, BT * sizeof(float), cudaMemcpyDeviceToHost));
    double sum = 0.0;
    for (int i = 0; i < BT; i++) sum += pg->losses_h[i];
    m->loss = (float)(sum / BT);
    return m->loss;
}

// model_backward: the backward pass of the last forward (with targets), adding into the gradients;
// dloss is 1, or 1/N for one of the N micro-batches of an update
static void plain_backward(PlainGpu* pg, int B, int T, float dloss) {
    Model* m = &pg->d;
    const Config* c = &m->cfg;
    Acts* a = &m->a;
    int BT = B * T, C = c->C, H = c->H, KVH = c->KVH, hd = C / H, F = c->F, qd = H * hd;
    long res_stride = (long)m->B * m->T * C;     // the stride of one layer's slice of res, dres
    size_t row_bytes = (size_t)BT * C * sizeof(float);
    // loss -> logits -> final norm
    cudaCheck(cudaMemset(a->dln, 0, row_bytes));
    const float* head = c->tied ? m->p[K_WTE] : m->p[K_LMHEAD];
    float* dhead = c->tied ? m->g[K_WTE] : m->g[K_LMHEAD];
    launch_lm_head_backward(a->dln, dhead, a->logits, m->targets, a->lnf, head, BT, C, c->V,
                            c->logit_scale * dloss);
    float* dres = a->dres + c->L * res_stride;     // d loss / d (the last block's output)
    cudaCheck(cudaMemset(dres, 0, row_bytes));
    launch_norm_backward(dres, m->g[K_LNFW], m->g[K_LNFB], a->dln, a->res + c->L * res_stride,
                         m->p[K_LNFW], a->lnf_mean, a->lnf_rstd, c->rmsnorm, BT, C);
    // blocks in reverse; dres, slice l of a->dres, becomes d loss / d (block l's input)
    for (int l = c->L - 1; l >= 0; l--) {
        LayerActs la = layer_acts(a, c, l, (long)m->B * m->T, m->T);
        dres = a->dres + l * res_stride;     // the residual connections pass the gradient through
        cudaCheck(cudaMemcpy(dres, dres + res_stride, row_bytes, cudaMemcpyDeviceToDevice));
        // MLP sublayer
        cudaCheck(cudaMemset(a->dhact, 0, (size_t)BT * F * sizeof(float)));
        launch_matmul_backward(a->dhact, grad_of(m, K_WDOWN, l), grad_of(m, K_BDOWN, l), dres,
                               la.hact, param_of(m, K_WDOWN, l), BT, F, C);
        cudaCheck(cudaMemset(a->dln, 0, row_bytes));
        if (c->swiglu) {
            launch_swiglu_backward(a->dmlp_gate, a->dup, la.mlp_gate, la.up, a->dhact,
                                   (long)BT * F);
            launch_matmul_backward(a->dln, grad_of(m, K_WGATE, l), grad_of(m, K_BGATE, l),
                                   a->dmlp_gate, la.ln2, param_of(m, K_WGATE, l), BT, C, F);
        } else {
            launch_gelu_backward(a->dup, la.up, a->dhact, (long)BT * F);
        }
        launch_matmul_backward(a->dln, grad_of(m, K_WUP, l), grad_of(m, K_BUP, l), a->dup, la.ln2,
                               param_of(m, K_WUP, l), BT, C, F);
        launch_norm_backward(dres, grad_of(m, K_LN2W, l), grad_of(m, K_LN2B, l), a->dln, la.xmid,
                             param_of(m, K_LN2W, l), la.ln2_mean, la.ln2_rstd, c->rmsnorm, BT, C);
        // attention sublayer
        cudaCheck(cudaMemset(a->dyg, 0, (size_t)BT * qd * sizeof(float)));
        launch_matmul_backward(a->dyg, grad_of(m, K_WO, l), grad_of(m, K_BO, l), dres,
                               la.attn_out, param_of(m, K_WO, l), BT, qd, C);
        cudaCheck(cudaMemset(a->dln, 0, row_bytes));
        float* dyatt = a->dyg;
        if (c->attn_gate) {
            launch_attn_gate_backward(a->dyatt, a->dattn_gate, a->dyg, la.yatt, la.attn_gate, BT, H,
                                      hd);
            launch_matmul_backward(a->dln, grad_of(m, K_ATTN_WG, l), grad_of(m, K_ATTN_BG, l),
                                   a->dattn_gate, la.ln1, param_of(m, K_ATTN_WG, l), BT, C, H);
            dyatt = a->dyatt;
        }
        launch_attention_backward(a->dq, a->dk, a->dv, pg->dP, dyatt, la.att, la.q, la.k, la.v, B,
                                  T, H, KVH, hd, c->attn_scale);
        if (c->rope) {
            launch_rope(a->dq, a->rope_cs, B, T, H, hd, -1.0f);
            launch_rope(a->dk, a->rope_cs, B, T, KVH, hd, -1.0f);
        }
        launch_matmul_backward(a->dln, grad_of(m, K_WQ, l), grad_of(m, K_BQ, l), a->dq, la.ln1,
                               param_of(m, K_WQ, l), BT, C, qd);
        launch_matmul_backward(a->dln, grad_of(m, K_WK, l), grad_of(m, K_BK, l), a->dk, la.ln1,
                               param_of(m, K_WK, l), BT, C, KVH * hd);
        launch_matmul_backward(a->dln, grad_of(m, K_WV, l), grad_of(m, K_BV, l), a->dv, la.ln1,
                               param_of(m, K_WV, l), BT, C, KVH * hd);
        launch_norm_backward(dres, grad_of(m, K_LN1W, l), grad_of(m, K_LN1B, l), a->dln, la.x,
                             param_of(m, K_LN1W, l), la.ln1_mean, la.ln1_rstd, c->rmsnorm, BT, C);
    }
    launch_embedding_backward(m->g[K_WTE], m->g[K_WPE], dres, m->tokens, B, T, C);
}

// ============================================================================================
// 3. The optimizer: the gradient norm and AdamW (train_gpt2.c section 4)
// ============================================================================================

// partial[k] = sum of g^2 over chunk k of NORM_CHUNK gradients, in double, in order: one thread per
// chunk
__global__ void grad_sumsq_plain(double* partial, const float* g, long n) {
    long k = thread_index();
    if (k * NORM_CHUNK >= n) return;
    double s = 0.0;
    for (long i = k * NORM_CHUNK; i < n && i < (k + 1) * NORM_CHUNK; i++) s += (double)g[i] * g[i];
    partial[k] = s;
}
// sqrt(sum g^2), the chunks' sums added on the host in order
static double plain_grad_norm(PlainGpu* pg) {
    long n = (long)pg->d.num_params;
    int chunks = ceil_div(n, NORM_CHUNK);
    grad_sumsq_plain<<<plain_blocks(chunks), PLAIN_THREADS>>>(pg->sumsq, pg->d.grads, n);
    LAUNCH_CHECK(grad_sumsq_plain);
    cudaCheck(cudaMemcpy(pg->sumsq_h, pg->sumsq, chunks * sizeof(double), cudaMemcpyDeviceToHost));
    double s = 0.0;
    for (int k = 0; k < chunks; k++) s += pg->sumsq_h[k];
    return sqrt(s);
}

// One AdamW step of one tensor (adamw_update), one thread per parameter, with g the gradient times
// clipping's factor grad_scale and k the tensor's constants of step t (adamw_scalars):
//   theta <- theta (1 - lr lambda)                  decoupled weight decay [ComplexCtl eq. 1]
//   m <- b1 m + (1-b1) g ;  v <- b2 v + (1-b2) g^2
//   theta <- theta - lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
__global__ void adamw_plain(float* p, const float* g, float* m, float* v, long n, AdamwScalars k,
                            float beta1, float beta2, float eps, float grad_scale) {
    long i = thread_index();
    if (i >= n) return;
    float gi = g[i] * grad_scale;
    p[i] *= k.decay;
    m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
    v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    p[i] -= k.step_size * m[i] / (sqrtf(v[i]) / k.bc2_sqrt + eps);
}
// adamw_step: tensor by tensor, each with its learning-rate multiplier and decay flag
static void plain_adamw_step(PlainGpu* pg, const OptConfig* o, float sched_lr, int t,
                             float grad_scale) {
    Model* m = &pg->d;
    for (int i = 0; i < m->num_tensors; i++) {
        const Tensor* tn = &m->tensors[i];
        size_t at = tn->offset;
        long n = (long)tn->numel;
        adamw_plain<<<plain_blocks(n), PLAIN_THREADS>>>(m->params + at, m->grads + at,
                m->adam_m + at, m->adam_v + at, (long)tn->numel, adamw_scalars(o, tn, sched_lr, t),
                o->beta1, o->beta2, o->adam_eps, grad_scale);
        LAUNCH_CHECK(adamw_plain);
    }
}

// ---- the Engine: how train_gpt2.c's loop through an engine (train_with_engine) reaches these ----
// each stands for the Part I function of train_gpt2.c that its name ends with
static float plain_engine_forward(void* pg, const int* inp, const int* tgt, int B, int T) {
    return plain_forward((PlainGpu*)pg, inp, tgt, B, T);
}
static const float* plain_engine_probs(void* ctx, int bt, int V) {     // one row for sampling
    PlainGpu* pg = (PlainGpu*)ctx;
    cudaCheck(cudaMemcpy(pg->probs_h, pg->d.a.logits + (size_t)bt * V, V * sizeof(float),
                         cudaMemcpyDeviceToHost));
    return pg->probs_h;
}
static void plain_engine_zero_grad(void* ctx) {        // model_zero_grad
    Model* d = &((PlainGpu*)ctx)->d;
    cudaCheck(cudaMemset(d->grads, 0, d->num_params * sizeof(float)));
}
static void plain_engine_backward(void* pg, int B, int T, float dloss) {
    plain_backward((PlainGpu*)pg, B, T, dloss);
}
static double plain_engine_grad_norm(void* pg) { return plain_grad_norm((PlainGpu*)pg); }
static void plain_engine_update(void* pg, const OptConfig* o, float lr, int t, float grad_scale) {
    plain_adamw_step((PlainGpu*)pg, o, lr, t, grad_scale);
    cudaCheck(cudaDeviceSynchronize());      // the step is done when the loop takes its time
}
static void plain_engine_to_host(void* pg, int moments) {
    plain_copy_state((PlainGpu*)pg, cudaMemcpyDeviceToHost, moments);
}
static Engine plain_engine(PlainGpu* pg) {
    Engine e;
    e.ctx = pg;
    e.forward = plain_engine_forward;
    e.probs = plain_engine_probs;
    e.zero_grad = plain_engine_zero_grad;
    e.backward = plain_engine_backward;
    e.grad_norm = plain_engine_grad_norm;
    e.update = plain_engine_update;
    e.to_host = plain_engine_to_host;
    return e;
}


// ############################################################################################
// PART II. THE FAST KERNELS
// ############################################################################################
// The same layers, fused, tiled and in lower precision where asked; the default (--kernels fast).
// Each kernel's comment names the Part I kernel it replaces and what it fuses or reorders;
// test_gpt2.cu checks each against it, in every precision mode the fast one supports.

// ============================================================================================
// 4. CUDA utilities
// ============================================================================================

// NULL when a GPU is usable, otherwise why not (for the one-line message of both binaries).
static const char* gpu_unavailable(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return cudaGetErrorString(e);
    if (n == 0) return "cudaGetDeviceCount reports 0 devices";
    return NULL;
}

// One device buffer of n elements of `elem` bytes (at least one element): allocated, or, where
// count is given, only added up (gpu_memory_need walks gpu_acts_layout that way, before anything is
// allocated, as acts_bytes does on the CPU)
static void* gpu_buf(size_t* count, size_t n, size_t elem) {
    if (count) {
        *count += (n ? n : 1) * elem;
        return NULL;
    }
    void* p = NULL;
    cudaCheck(cudaMalloc(&p, (n ? n : 1) * elem));
    return p;
}
static float* dmalloc(size_t nfloats) { return (float*)gpu_buf(NULL, nfloats, sizeof(float)); }
static int* dmalloc_int(size_t n) { return (int*)gpu_buf(NULL, n, sizeof(int)); }

// Reductions inside a block. Every thread of the block must call them (they synchronize), and
// every thread gets the result. blockDim.x is a multiple of 32. The summation order is fixed by
// the thread layout, so results are reproducible.
template <typename T> __device__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
template <typename T> __device__ T block_sum(T v) {
    __shared__ T buf[32];
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();                  // buf may still be read by a previous call
    if (lane == 0) buf[wid] = v;
    __syncthreads();
    v = lane < nw ? buf[lane] : (T)0;
    return warp_sum(v);
}

#define EW_THREADS 256          // elementwise kernels
#define EW_GRID(n) ceil_div((long)(n), EW_THREADS), EW_THREADS
// a block per row (softmax), or a warp per row and 4 rows per block (norms, gate)
#define ROW_THREADS 128
#define ROWS_PER_CHUNK 256      // deterministic column sums: rows summed per partial

// ============================================================================================
// 5. Layers. Same shapes and formulas as section 1 of train_gpt2.c; backward kernels ACCUMULATE
//    (+=) into parameter gradients like the CPU ones. Pointers are device pointers.
// ============================================================================================

// ---- the matrix multiply, through cuBLAS ------------------------------------------------------
// Replaces matmul_forward_plain and matmul_backward_*_plain: the same sums in cuBLAS's tiled GEMMs
// (TF32 or bf16 where asked). The bias is left to the next kernel that reads the output, and most
// bias gradients to the kernels that write the gradient they sum.
// The CPU stores matrices row-major; cuBLAS reads column-major. A row-major X[r,c] is, byte for
// byte, the column-major matrix X^T [c,r] with leading dimension c. So each row-major product is
// written as the product of the transposes, with the operand order swapped:
//   forward   out[BT,OC] = inp[BT,C] W[OC,C]^T    <=>  out^T[OC,BT] = W[OC,C] inp^T[C,BT]
//             W's memory is W^T[C,OC] column-major (ld C) -> op T; inp's is inp^T[C,BT] -> op N
//             cublasSgemm(T, N, m=OC, n=BT, k=C, W, ld C, inp, ld C, beta 0, out, ld OC)
//   backward  dinp[BT,C] += dout[BT,OC] W[OC,C]   <=>  dinp^T[C,BT] += W^T[C,OC] dout^T[OC,BT]
//             cublasSgemm(N, N, m=C, n=BT, k=OC, W, ld C, dout, ld OC, beta 1, dinp, ld C)
//             dW[OC,C] += dout^T[OC,BT] inp[BT,C] <=>  dW^T[C,OC] += inp^T[C,BT] dout[BT,OC]
//             cublasSgemm(N, T, m=C, n=OC, k=BT, inp, ld C, dout, ld OC, beta 1, dW, ld C)
// TF32 (--tf32 1) rounds the multiplicands to 10 mantissa bits; with --tf32 0 cuBLAS computes in
// full float32 (CUBLAS_DEFAULT_MATH), which is what test_gpt2cu compares against the fixtures.
static cublasHandle_t g_blas;

// --dtype bf16 (doc/cuda.md, "bf16"): the activations are bf16. Every GEMM multiplies bf16 inputs
// (cublasGemmEx, float32 accumulation, CUBLAS_COMPUTE_32F) and writes a bf16 activation, and every
// kernel reads and writes activations in bf16 while computing in float32 (the type A of the kernels
// below: __nv_bfloat16 here, float without --dtype bf16). What stays float32, as accumulators where
// bf16's 8 significant bits would lose small addends: the residual stream and its gradient (whose
// bf16 copy dres16 the GEMMs read), the sum of the norms' input gradients from several GEMMs (dln),
// the logits, the softmax and the loss, the gate's pre-activation (H values per row), norm
// statistics, and the master weights, their gradients and the AdamW moments. The weights' bf16 copy
// w16 has the master block's layout (a weight at params + i has its copy at w16 + i), written on
// upload and by adamw_kernel after each update. The activation buffers hold 2-byte elements, behind
// float* pointers that the kernels' launches cast to A* (bf16_of below, with_act): half the memory
// of a float32 run and half the bytes each kernel moves, which is what bf16 is for here.
static struct {
    int on;                               // --dtype bf16
    const float* params;                  // the float32 master block on the device ...
    __nv_bfloat16* w16;                   // ... and its bf16 copy (n elements)
    size_t n;
} g_bf16;

// An activation slice as the GEMM helpers take it, a float32 and a bf16 pointer of which only the
// run's type is set: f32_of(x) is x without --dtype bf16 and NULL with it, bf16_of(x) the reverse.
static float* f32_of(float* x) { return g_bf16.on ? NULL : x; }
static __nv_bfloat16* bf16_of(float* x) { return g_bf16.on ? (__nv_bfloat16*)x : NULL; }

// fn(A()) with A the run's activation type, for the launches of kernels templated on it
template <typename F> static void with_act(F fn) {
    if (g_bf16.on) fn(__nv_bfloat16());
    else fn(0.0f);
}

// A value of the activation type A as float, and a float stored as A
// (rounded to nearest even for bf16)
__device__ inline float as_float(float x) { return x; }
__device__ inline float as_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline void set_elem(float& e, float v) { e = v; }
__device__ inline void set_elem(__nv_bfloat16& e, float v) { e = __float2bfloat16(v); }

// out[i] = in[i] rounded to bf16 (to nearest even; NaN stays NaN)
__global__ void to_bf16_kernel(__nv_bfloat16* out, const float* in, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16(in[i]);
}

// --tf32 1 (the default) with float32 activations: cuBLAS's GEMMs in TF32 (gpu_set_tf32) and
// attention's products on the tensor cores in TF32 (section "attention")
static int g_tf32;

static void bf16_round(__nv_bfloat16* dst, const float* src, long n) {
    to_bf16_kernel<<<ceil_div(n, EW_THREADS), EW_THREADS>>>(dst, src, n);
    LAUNCH_CHECK(to_bf16_kernel);
}

static const __nv_bfloat16* bf16_weight(const float* W) {
    size_t i = (size_t)(W - g_bf16.params);
    if (W < g_bf16.params || i >= g_bf16.n)
        fatal("internal: a bf16 GEMM weight outside the parameter block");
    return g_bf16.w16 + i;
}

// C (m x n, float32 or bf16: ctype) = alpha A B + beta C with bf16 A, B
// (column-major, as cublasSgemm)
static void gemm_bf16(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                      const __nv_bfloat16* A, int lda, const __nv_bfloat16* B, int ldb, float beta,
                      void* C, cudaDataType_t ctype, int ldc) {
    cublasCheck(cublasGemmEx(g_blas, ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, B, CUDA_R_16BF,
                             ldb, &beta, C, ctype, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// An output pair (x, x16) of the GEMM helpers: x16 where set (--dtype bf16's activations), else x
static void* gemm_out(float* x, __nv_bfloat16* x16) { return x16 ? (void*)x16 : (void*)x; }
static cudaDataType_t gemm_out_type(const __nv_bfloat16* x16) {
    return x16 ? CUDA_R_16BF : CUDA_R_32F;
}

// out[BT,OC] = inp W^T. Each operand is a pair (float32, bf16) of which one is set, the run's type
// (f32_of, bf16_of): with --dtype bf16 inp16 is read and out16 written, or out where the output
// stays float32 (the logits, the gate's pre-activation). The bias is added by the kernel that reads
// out first (the attention's tile loads or RoPE, the gate, the MLP's activation, the residual): no
// GEMM's output takes a pass of its own for it.
static void gpu_matmul_forward(float* out, __nv_bfloat16* out16, const float* inp,
                               const __nv_bfloat16* inp16, const float* W, int BT, int C, int OC) {
    const float one = 1.0f, zero = 0.0f;
    if (g_bf16.on) {
        if (!inp16) fatal("internal: a bf16 GEMM without its input in bf16");
        gemm_bf16(CUBLAS_OP_T, CUBLAS_OP_N, OC, BT, C, 1.0f, bf16_weight(W), C, inp16, C, 0.0f,
                  gemm_out(out, out16), gemm_out_type(out16), OC);
    } else
        cublasCheck(cublasSgemm(g_blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, BT, C, &one, W, C, inp, C,
                                &zero, out, OC));
    if (g_after_op) g_after_op("gemm forward");
}

// Deterministic column sums without atomics: partial[chunk, o] sums ROWS_PER_CHUNK rows in order,
// then one thread per column adds the chunks in order. Used for bias and norm-weight gradients.
template <typename X>
__global__ void colsum_partial_kernel(float* partial, const X* x, int N, int OC) {
    int o = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (o >= OC) return;
    int r1 = min(N, (chunk + 1) * ROWS_PER_CHUNK);
    float s = 0.0f;
    for (int r = chunk * ROWS_PER_CHUNK; r < r1; r++) s += as_float(x[(long)r * OC + o]);
    partial[(long)chunk * OC + o] = s;
}

// dst[o] += the sum over the chunks of partial[chunk, o]. A block takes 32 columns, one per lane;
// its FINISH_WARPS warps each sum every FINISH_WARPS-th chunk (so that the norms' many chunks of
// 16 rows are read by many threads at once), and warp 0 adds the warps' sums in warp order: a
// fixed order, as everywhere here.
#define FINISH_WARPS 8
__global__ void colsum_finish_kernel(float* dst, const float* partial, int nchunks, int OC) {
    __shared__ float warp_sums[FINISH_WARPS][32];
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, o = blockIdx.x * 32 + lane;
    float s = 0.0f;
    if (o < OC)
        for (int ch = w; ch < nchunks; ch += FINISH_WARPS) s += partial[(long)ch * OC + o];
    warp_sums[w][lane] = s;
    __syncthreads();
    if (w > 0 || o >= OC) return;
    float t = 0.0f;
    for (int k = 0; k < FINISH_WARPS; k++) t += warp_sums[k][lane];
    dst[o] += t;
}

static void gpu_colsum_finish(float* dst, const float* partial, int nchunks, int OC) {
    colsum_finish_kernel<<<ceil_div(OC, 32), 32 * FINISH_WARPS>>>(dst, partial, nchunks, OC);
    LAUNCH_CHECK(colsum_finish_kernel);
}

// dst[o] += sum over the N rows of x[N,OC] (float32 or bf16); scratch holds
// ceil(N/ROWS_PER_CHUNK) x OC floats
template <typename X>
static void gpu_colsum_add(float* dst, const X* x, int N, int OC, float* scratch) {
    int nchunks = ceil_div(N, ROWS_PER_CHUNK);
    colsum_partial_kernel<X><<<dim3(ceil_div(OC, EW_THREADS), nchunks), EW_THREADS>>>(scratch, x, N,
            OC);
    LAUNCH_CHECK(colsum_partial_kernel);
    gpu_colsum_finish(dst, scratch, nchunks, OC);
}

// dinp is overwritten (GRAD_SET: its first contribution, so no memset is needed before it) or
// added to (GRAD_ADD); dW and dbias are always added to. Pairs as in gpu_matmul_forward; with
// --dtype bf16: dinp16 is written where the input gradient is an activation (else dinp,
// float32), and inp16 and dout16 (an activation gradient, dres's copy, the logits' gradient)
// are read. The bias gradient (q, k, v and the gate's; the others are summed by the kernels
// that write their gradients) sums dout or dout16. alpha multiplies dout in both products: the
// LM head's backward passes its dloss there (gpu_backward); a bias gradient would not get it,
// so a call with both is refused.
enum GradMode { GRAD_SET, GRAD_ADD };
static void gpu_matmul_backward(float* dinp, __nv_bfloat16* dinp16, GradMode mode, float* dW,
                                float* dbias, const float* dout, const __nv_bfloat16* dout16,
                                const float* inp, const __nv_bfloat16* inp16, const float* W,
                                int BT, int C, int OC, float* scratch, float alpha = 1.0f) {
    const float one = 1.0f, dinp_beta = mode == GRAD_ADD ? 1.0f : 0.0f;
    int has_dinp = dinp || dinp16;
    if (dbias && alpha != 1.0f) fatal("internal: a scaled matmul backward with a bias gradient");
    if (g_bf16.on) {
        if (!inp16 || !dout16) fatal("internal: a bf16 GEMM without its inputs in bf16");
        if (has_dinp)
            gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_N, C, BT, OC, alpha, bf16_weight(W), C, dout16, OC,
                      dinp_beta, gemm_out(dinp, dinp16), gemm_out_type(dinp16), C);
        if (has_dinp && g_after_op) g_after_op("gemm backward dinp");
        gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, BT, alpha, inp16, C, dout16, OC, 1.0f, dW,
                  CUDA_R_32F, C);
    } else {
        if (has_dinp)
            cublasCheck(cublasSgemm(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, C, BT, OC, &alpha, W, C, dout,
                                    OC, &dinp_beta, dinp, C));
        if (has_dinp && g_after_op) g_after_op("gemm backward dinp");
        cublasCheck(cublasSgemm(g_blas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, BT, &alpha, inp, C, dout,
                                OC, &one, dW, C));
    }
    if (g_after_op) g_after_op("gemm backward dW");
    if (dbias && dout) gpu_colsum_add(dbias, dout, BT, OC, scratch);
    else if (dbias) gpu_colsum_add(dbias, dout16, BT, OC, scratch);
}

// ---- embeddings -----------------------------------------------------------------------------
// Replaces embedding_forward_plain (the same kernel) and embedding_backward_plain, whose thread
// per channel walks every position: here a block per distinct token adds its positions, sorted on
// the host.
// out[b,t,:] = wte[tok[b,t],:] (+ wpe[t,:] for learned positions)
__global__ void embedding_forward_kernel(float* out, const int* tok, const float* wte,
                                         const float* wpe, int BT, int T, int C) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)BT * C) return;
    int bt = (int)(i / C), c = (int)(i % C);
    out[i] = wte[(long)tok[bt] * C + c] + (wpe ? wpe[(long)(bt % T) * C + c] : 0.0f);
}

// dwte: rows of wte repeat (the same token twice), so the host sorts the positions by token (a
// stable counting sort, see gpu_backward): bucket u holds the positions pos[start[u]..start[u+1])
// of token utok[u] in increasing order. One block per distinct token, one thread per channel, adds
// them in that order: no atomics, and the same order as the CPU's embedding_backward.
__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout, const int* utok,
                                              const int* start, const int* pos, int C) {
    int u = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float* w = dwte + (long)utok[u] * C + c;
    float s = *w;
    for (int i = start[u]; i < start[u + 1]; i++) s += dout[(long)pos[i] * C + c];
    *w = s;
}

// dwpe[t,c] += sum over b of dout[b,t,c], b in order
__global__ void embedding_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)T * C) return;
    int t = (int)(i / C), c = (int)(i % C);
    float s = dwpe[i];
    for (int b = 0; b < B; b++) s += dout[((long)b * T + t) * C + c];
    dwpe[i] = s;
}

// ---- normalization: [SmallInit eq. 1] LayerNorm and [SmallInit eq. 2] RMSNorm -------------------
// Replaces norm_forward_plain (a warp per row instead of a thread), residual_forward_plain with the
// norm after it (one pass), and norm_backward_input_plain with norm_backward_params_plain (one read
// of dout and inp for dx, dw, db and the bias gradient of the matmul before).
// LayerNorm(h) = w * (h - mu) / sqrt(sigma^2 + eps) + b      [SmallInit eq. 1]
// RMSNorm(h)   = w * h / sqrt(mean(h^2) + eps)               [SmallInit eq. 2]
// eps INSIDE the square root, as on the CPU (see norm_forward there for why it matters).
// One warp per row; mean[] (LayerNorm) and rstd[] are kept for the backward pass. The input is the
// float32 residual stream, the output an activation (A).
template <typename A>
__device__ void norm_row(A* y, float* mean, float* rstd, const float* x, const float* w,
                         const float* b, int rms, float eps, int C, int lane) {
    float m = 0.0f;
    if (!rms) {
        for (int c = lane; c < C; c += 32) m += x[c];
        m = warp_sum(m) / C;
    }
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
    v = warp_sum(v) / C;
    float s = 1.0f / sqrtf(v + eps);
    for (int c = lane; c < C; c += 32) set_elem(y[c], (x[c] - m) * s * w[c] + (b ? b[c] : 0.0f));
    if (lane == 0) {
        if (mean) *mean = m;
        *rstd = s;
    }
}

template <typename A>
__global__ void norm_forward_kernel(A* out, float* mean, float* rstd, const float* inp,
                                    const float* w, const float* b, int rms, float eps, int N,
                                    int C) {
    int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;             // the whole warp leaves together
    norm_row(out + (long)n * C, mean ? mean + n : NULL, rstd + n, inp + (long)n * C, w, b, rms, eps,
             C, lane);
}

// The residual and the norm that reads it, in one pass: xout = x + (branch + bias), then out =
// Norm(xout). branch is the sublayer's matmul without its bias (added here, in the order a separate
// bias kernel would: the same bits as a separate bias, residual and norm). Each lane rereads only
// the entries of xout it wrote (norm_row's lanes stride like the loop here), from its cache.
template <typename A>
__global__ void residual_norm_forward_kernel(float* xout, A* out, float* mean, float* rstd,
                                             const float* x, const A* branch, const float* bias,
                                             const float* w, const float* b, int rms, float eps,
                                             int N, int C) {
    int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;
    long o = (long)n * C;
    for (int c = lane; c < C; c += 32) {
        float br = as_float(branch[o + c]);
        xout[o + c] = x[o + c] + (bias ? br + bias[c] : br);
    }
    norm_row(out + o, mean ? mean + n : NULL, rstd + n, xout + o, w, b, rms, eps, C, lane);
}

// With xhat = (x - mu) * rstd and g = dout * w:
//   dx += rstd * (g - mean(g) - xhat * mean(g * xhat))     LayerNorm
//   dx += rstd * (g - xhat * mean(g * xhat))               RMSNorm
// and the weights' gradients, sums over the rows: dw = sum dout * xhat, db = sum dout. xhat is
// formed before it meets the gradient, as on the CPU (norm_backward there says why).
// One block per chunk of NORM_ROWS rows, in two passes over the chunk: the rows' two means (warp
// sums, each warp a quarter of the rows, kept in shared memory), then each thread walks down its
// columns c = threadIdx.x, + blockDim.x, ... writing dx and summing dw, db and the new dinp over
// the chunk's rows. The chunk's sums go to partial[k, chunk, c] (k = dw, db, dinp) and
// colsum_finish_kernel adds the chunks: dout and inp are read once for all three. The sum of dinp
// is the bias gradient of the projection whose output gradient dinp is (dres: the residual branch's
// last matmul), so that column sum needs no pass of its own. dx is added to dinp (add 1) or written
// over it (add 0: its first contribution). dinp16, where not NULL, receives the new dinp rounded to
// bf16: the output gradient of the GEMM before the norm (--dtype bf16)
#define NORM_ROWS 16
__global__ void norm_backward_kernel(float* dinp, __nv_bfloat16* dinp16, float* partial, int add,
                                     const float* dout, const float* inp, const float* w,
                                     const float* mean, const float* rstd, int rms, int N, int C) {
    __shared__ float st[4][NORM_ROWS];         // per row: mean, rstd, mean(g), mean(g xhat)
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
    int chunk = blockIdx.x, r0 = chunk * NORM_ROWS, nr = min(NORM_ROWS, N - r0);
    for (int r = warp; r < nr; r += nwarps) {
        const float* x = inp + (long)(r0 + r) * C;
        const float* d = dout + (long)(r0 + r) * C;
        float m = rms ? 0.0f : mean[r0 + r], s = rstd[r0 + r];
        float g_mean = 0.0f, gx_mean = 0.0f;
        for (int c = lane; c < C; c += 32) {
            float g = d[c] * w[c], xhat = (x[c] - m) * s;
            g_mean += g;
            gx_mean += g * xhat;
        }
        g_mean = rms ? 0.0f : warp_sum(g_mean) / C;
        gx_mean = warp_sum(gx_mean) / C;
        if (lane == 0) {
            st[0][r] = m;
            st[1][r] = s;
            st[2][r] = g_mean;
            st[3][r] = gx_mean;
        }
    }
    __syncthreads();                           // every row's statistics, for every thread
    long slab = (long)gridDim.x * C;           // one [chunks, C] slab per sum
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float sw = 0.0f, sb = 0.0f, sx = 0.0f;
        for (int r = 0; r < nr; r++) {
            long i = (long)(r0 + r) * C + c;
            float s = st[1][r], dv = dout[i], xhat = (inp[i] - st[0][r]) * s;
            float dx = (add ? dinp[i] : 0.0f) + s * (dv * w[c] - st[2][r] - xhat * st[3][r]);
            dinp[i] = dx;
            if (dinp16) dinp16[i] = __float2bfloat16(dx);
            sw += dv * xhat;
            sb += dv;
            sx += dx;
        }
        partial[(long)chunk * C + c] = sw;
        partial[slab + (long)chunk * C + c] = sb;
        partial[2 * slab + (long)chunk * C + c] = sx;
    }
}

// out and branch: activation slices (bf16 values with --dtype bf16)
static void gpu_norm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                             const float* b, int rms, float eps, int N, int C) {
    with_act([&](auto a) {
        typedef decltype(a) A;
        norm_forward_kernel<A><<<ceil_div(N, ROW_THREADS / 32), ROW_THREADS>>>((A*)out, mean, rstd,
                inp, w, b, rms, eps, N, C);
        LAUNCH_CHECK(norm_forward_kernel);
    });
}

static void gpu_residual_norm_forward(float* xout, float* out, float* mean, float* rstd,
                                      const float* x, const float* branch, const float* bias,
                                      const float* w, const float* b, int rms, float eps, int N,
                                      int C) {
    with_act([&](auto a) {
        typedef decltype(a) A;
        residual_norm_forward_kernel<A><<<ceil_div(N, ROW_THREADS / 32), ROW_THREADS>>>(
            xout, (A*)out, mean, rstd, x, (const A*)branch, bias, w, b, rms, eps, N, C);
        LAUNCH_CHECK(residual_norm_forward_kernel);
    });
}

// The norm's backward (above): dinp, and dw, db (db where the norm has a bias) and dbias, where
// set, added to: dbias is the bias gradient of the matmul that reads dinp next
// (norm_backward_kernel). scratch: 3 x ceil(N/NORM_ROWS) x C floats
static void gpu_norm_backward(float* dinp, GradMode mode, __nv_bfloat16* dinp16, float* dw,
                              float* db, float* dbias, const float* dout, const float* inp,
                              const float* w, const float* mean, const float* rstd, int rms, int N,
                              int C, float* scratch) {
    int nchunks = ceil_div(N, NORM_ROWS);
    norm_backward_kernel<<<nchunks, ROW_THREADS>>>(dinp, dinp16, scratch, mode == GRAD_ADD, dout,
            inp, w, mean, rstd, rms, N, C);
    LAUNCH_CHECK(norm_backward_kernel);
    float* sums[3] = {dw, db, dbias};
    for (int k = 0; k < 3; k++)
        if (sums[k]) gpu_colsum_finish(sums[k], scratch + (long)k * nchunks * C, nchunks, C);
}

// ---- rotary position embedding (llama preset) --------------------------------------------------
// Replaces rope_plain, and adds the projection's bias as it reads q or k.
// Pair (2j, 2j+1) of each head vector at position t turns by t * theta^(-2j/hd). The cosines and
// sines come from the CPU's own table (rope_table: cs [T, hd/2, 2], angles in double), computed
// once and uploaded with the model, so the rotation is the CPU's (the same angles and products;
// where the compilers fuse a multiply and an add differently, the last bit may differ) and no
// thread calls pow/cos/sin. sign = +1 forward, -1 backward (the inverse rotation, applied to the
// gradient in place). x is an activation (A); the forward adds the projection's bias (nh * hd
// entries, or NULL) before it turns the pair, as the GEMM's first reader (Qkv). One thread per
// pair: consecutive threads, consecutive pairs.
template <typename A>
__global__ void rope_kernel(A* x, const float* bias, const float* cs, int BT, int T, int nh, int hd,
                            float sign) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    int half = hd / 2;
    if (i >= (long)BT * nh * half) return;
    int j = (int)(i % half);
    long row = i / half;                       // (bt, h)
    int t = (int)((row / nh) % T);
    A* v = x + row * hd;
    float c = cs[((long)t * half + j) * 2], sn = sign * cs[((long)t * half + j) * 2 + 1];
    float a = as_float(v[2 * j]), b = as_float(v[2 * j + 1]);
    if (bias) {
        const float* bh = bias + (row % nh) * hd;
        a += bh[2 * j];
        b += bh[2 * j + 1];
    }
    set_elem(v[2 * j], a * c - b * sn);
    set_elem(v[2 * j + 1], a * sn + b * c);
}

// x: an activation slice (q or k with their bias; dq or dk, bias NULL)
static void gpu_rope(float* x, const float* bias, const float* cs, int BT, int T, int nh, int hd,
                     float sign) {
    with_act([&](auto a) {
        typedef decltype(a) A;
        rope_kernel<A><<<ceil_div((long)BT * nh * (hd / 2), EW_THREADS), EW_THREADS>>>((A*)x, bias,
                cs, BT, T, nh, hd, sign);
        LAUNCH_CHECK(rope_kernel);
    });
}

// ---- causal self-attention with grouped KV heads: fused and tiled (flash attention) -------------
// Replaces attention_forward_plain and attention_backward_{scores,query,kv}_plain: the B H T T
// probabilities and dP are never stored, tiles of keys sit in shared memory, sums run in warp
// order. q [BT, H*hd], k and v [BT, KVH*hd]; head h reads kv head h / (H/KVH). y [BT, H*hd].
//   A = softmax(scale * q k^T + causal mask),  y = A v
// The T x T matrix A is never stored: the forward streams the keys and values through shared memory
// in tiles of ATT_BK and keeps, per query row, the running maximum m, the running sum l of
// exp(score - m) and the unnormalized output o (online softmax: when a tile raises the maximum, l
// and o are first multiplied by exp(m_old - m_new)). It stores one number per row, lse = m + log l,
// from which the backward recomputes A[t,s] = exp(score - lse) tile by tile (the algorithm of
// FlashAttention-2, written for CUDA cores). Tiles after a block's last query are skipped
// (causal): about half of the T^2 scores are never computed. The probes read A from the host model,
// which recomputes probe steps (doc/cuda.md), so no step needs A on the device.
// Layout in a block: 4 warps, each owning query (or key) rows; a warp's lane j takes key (or query)
// j of the tile for the dot products, then lane i takes the output columns i, i+32, ... for the
// weighted sums. A row's scores are summed over the tile in key order by one lane each, and the
// outputs over keys in order: fixed orders, no atomics.
#define ATT_HD_MAX 128      // the largest head size (registers per row, shared memory per tile)
#define ATT_WARPS 4
#define ATT_BK 32           // keys (or queries) per tile: one per lane
#define ATT_BQ 16           // query rows per forward block (4 per warp)
#define ATT_BQ_BWD 8        // query rows per dq block, key rows per dk/dv block (2 per warp)

// The attention's inputs: q [B*T, H*hd], k and v [B*T, KVH*hd] as their projections wrote
// them (activations, A), and the projections' biases (NULL: none, or already added by
// RoPE), which every tile load adds: the first kernel to read a GEMM's output adds its
// bias, so no pass of its own does.
template <typename A> struct Qkv {
    const A *q, *k, *v;
    const float *bq, *bk, *bv;
    template <typename B> Qkv<B> as() const {
        return {(const B*)q, (const B*)k, (const B*)v, bq, bk, bv};
    }
};

// Rows r0 .. r0 + n - 1 of one head of x [B*T, width] (its columns col0 .. col0 + hd - 1) plus
// the bias (of width entries; NULL: none) into the shared tile[n][W], zeros for rows past T:
// every tile load of the attention kernels, strided over the block's threads so that consecutive
// threads read consecutive elements. x holds activations (A), the tile elements E (float, or the
// tensor cores' bf16 operands).
template <typename E, int W, typename A>
__device__ void load_head_rows(E (*tile)[W], const A* x, const float* bias, int b, int r0, int n,
                               int T, int width, int col0, int hd) {
    for (int e = threadIdx.x; e < n * hd; e += blockDim.x) {
        int j = e / hd, d = e % hd, t = r0 + j;
        float bv = bias ? bias[col0 + d] : 0.0f;
        float xv = t < T ? as_float(x[(long)(b * T + t) * width + col0 + d]) + bv : 0.0f;
        set_elem(tile[j][d], xv);
    }
}

// Rows r0 .. r0 + n - 1 of kv head kh of k and v (as load_head_rows): every key/value tile
template <typename E, int WK, int WV, typename A>
__device__ void load_kv_rows(E (*ks)[WK], E (*vs)[WV], Qkv<A> in, int b, int r0, int n, int T,
                             int KVH, int kh, int hd) {
    load_head_rows(ks, in.k, in.bk, b, r0, n, T, KVH * hd, kh * hd, hd);
    load_head_rows(vs, in.v, in.bv, b, r0, n, T, KVH * hd, kh * hd, hd);
}

// The key kernels' tile of queries: rows t0 .. t0 + n - 1 of head h of q and dy (as
// load_head_rows), and their lse and D (0 past T)
template <typename E, int W, typename A>
__device__ void load_query_tile(E (*qs)[W], E (*dys)[W], float* ls, float* Ds, Qkv<A> in,
                                const A* dy, const float* lse, const float* D, int b, int h, int t0,
                                int n, int T, int H, int hd) {
    load_head_rows(qs, in.q, in.bq, b, t0, n, T, H * hd, h * hd, hd);
    load_head_rows(dys, dy, NULL, b, t0, n, T, H * hd, h * hd, hd);
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        int t = t0 + j;
        ls[j] = t < T ? lse[((long)b * H + h) * T + t] : 0.0f;
        Ds[j] = t < T ? D[((long)b * H + h) * T + t] : 0.0f;
    }
}

// grid (ceil(T / ATT_BQ), H, B), ATT_WARPS * 32 threads; lse [B, H, T]. q, k, v, y: activations (A)
template <typename A>
__global__ void attention_forward_kernel(A* y, float* lse, Qkv<A> in, int T, int H, int KVH, int hd,
                                         float scale) {
    const int RPW = ATT_BQ / ATT_WARPS, NI = ATT_HD_MAX / 32;     // rows per warp, columns per lane
    __shared__ float qs[ATT_BQ][ATT_HD_MAX];
    // +1: lane j reads row j, a column at a time: no bank conflicts
    __shared__ float ks[ATT_BK][ATT_HD_MAX + 1];
    __shared__ float vs[ATT_BK][ATT_HD_MAX];
    // a row's probabilities in the tile, for the weighted sum
    __shared__ float ps[ATT_WARPS][ATT_BK];
    int q0 = blockIdx.x * ATT_BQ, h = blockIdx.y, b = blockIdx.z, kh = h / (H / KVH);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, qd = H * hd;
    load_head_rows(qs, in.q, in.bq, b, q0, ATT_BQ, T, qd, h * hd, hd);
    float m[RPW], l[RPW], o[RPW][NI];
    for (int rr = 0; rr < RPW; rr++) {
        m[rr] = -INFINITY;
        l[rr] = 0.0f;
        for (int i = 0; i < NI; i++) o[rr][i] = 0.0f;
    }
    int q_last = min(q0 + ATT_BQ, T) - 1;            // no query of the block sees a key after it
    for (int k0 = 0; k0 <= q_last; k0 += ATT_BK) {
        // the previous tile is no longer read (and qs is written)
        __syncthreads();
        load_kv_rows(ks, vs, in, b, k0, ATT_BK, T, KVH, kh, hd);
        __syncthreads();
        for (int rr = 0; rr < RPW; rr++) {
            int r = warp * RPW + rr, t = q0 + r, s = k0 + lane;
            if (t >= T) break;                        // the whole warp: t is the warp's
            float sc = -INFINITY;
            if (s <= t) {
                float dot = 0.0f;
                for (int d = 0; d < hd; d++) dot += qs[r][d] * ks[lane][d];
                sc = dot * scale;
            }
            float mn = fmaxf(m[rr], warp_max(sc));   // finite: key 0 is in the first tile
            float p = s <= t ? expf(sc - mn) : 0.0f;
            float corr = expf(m[rr] - mn);            // 0 on the first tile (m = -inf)
            l[rr] = l[rr] * corr + warp_sum(p);
            m[rr] = mn;
            ps[warp][lane] = p;
            __syncwarp();
            int jn = min(ATT_BK, t - k0 + 1);         // the keys of the tile that row t sees
            for (int i = 0; i < NI && lane + 32 * i < hd; i++) {
                float acc = o[rr][i] * corr;
                for (int j = 0; j < jn; j++) acc += ps[warp][j] * vs[j][lane + 32 * i];
                o[rr][i] = acc;
            }
            // ps is read by every lane before the next row
            __syncwarp();
        }
    }
    for (int rr = 0; rr < RPW; rr++) {
        int t = q0 + warp * RPW + rr;
        if (t >= T) break;
        A* yt = y + (long)(b * T + t) * qd + h * hd;
        for (int i = 0; i < NI && lane + 32 * i < hd; i++)
            set_elem(yt[lane + 32 * i], o[rr][i] / l[rr]);
        if (lane == 0) lse[((long)b * H + h) * T + t] = m[rr] + logf(l[rr]);
    }
}

// The backward, with A recomputed as exp(scale q_t.k_s - lse_t) and D_t = dy_t . y_t = sum_s A dA:
//   dA[t,s] = dy_t . v_s ;  dP[t,s] = A[t,s] (dA[t,s] - D_t) * scale
//   dq_t = sum_s dP[t,s] k_s ;  dk_s = sum_{h in group, t >= s} dP[t,s] q_t
//   dv_s = sum_t A[t,s] dy_t
// Two kernels, no atomics: the query kernel (blocks of query rows, keys streamed) writes dq and D;
// the key kernel (blocks of key rows of one kv head, the queries t >= s of each head of its group
// streamed) writes dk and dv, summing over heads, then queries, in order: the CPU's order. Both
// recompute the scores; the key kernel reads D from the query kernel.

// grid (ceil(T / ATT_BQ_BWD), H, B); D [B, H, T]
template <typename A>
__global__ void attention_backward_query_kernel(A* dq, float* D, const A* dy, const A* y,
                                                const float* lse, Qkv<A> in, int T, int H, int KVH,
                                                int hd, float scale) {
    const int RPW = ATT_BQ_BWD / ATT_WARPS, NI = ATT_HD_MAX / 32;
    __shared__ float qs[ATT_BQ_BWD][ATT_HD_MAX];
    __shared__ float dys[ATT_BQ_BWD][ATT_HD_MAX];
    __shared__ float ks[ATT_BK][ATT_HD_MAX + 1];
    __shared__ float vs[ATT_BK][ATT_HD_MAX + 1];
    __shared__ float ps[ATT_WARPS][ATT_BK];
    int q0 = blockIdx.x * ATT_BQ_BWD, h = blockIdx.y, b = blockIdx.z, kh = h / (H / KVH);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, qd = H * hd;
    load_head_rows(qs, in.q, in.bq, b, q0, ATT_BQ_BWD, T, qd, h * hd, hd);
    load_head_rows(dys, dy, NULL, b, q0, ATT_BQ_BWD, T, qd, h * hd, hd);
    float Dt[RPW], lt[RPW], acc[RPW][NI];
    for (int rr = 0; rr < RPW; rr++) {                // D_t = dy_t . y_t, and the row's lse
        int t = q0 + warp * RPW + rr;
        float s = 0.0f;
        if (t < T)
            for (int d = lane; d < hd; d += 32) {
                long i = (long)(b * T + t) * qd + h * hd + d;
                s += as_float(dy[i]) * as_float(y[i]);
            }
        Dt[rr] = warp_sum(s);
        lt[rr] = t < T ? lse[((long)b * H + h) * T + t] : 0.0f;
        if (t < T && lane == 0) D[((long)b * H + h) * T + t] = Dt[rr];
        for (int i = 0; i < NI; i++) acc[rr][i] = 0.0f;
    }
    int q_last = min(q0 + ATT_BQ_BWD, T) - 1;
    for (int k0 = 0; k0 <= q_last; k0 += ATT_BK) {
        __syncthreads();
        load_kv_rows(ks, vs, in, b, k0, ATT_BK, T, KVH, kh, hd);
        __syncthreads();
        for (int rr = 0; rr < RPW; rr++) {
            int r = warp * RPW + rr, t = q0 + r, s = k0 + lane;
            if (t >= T) break;
            float dP = 0.0f;
            if (s <= t) {
                float dot = 0.0f, dA = 0.0f;
                for (int d = 0; d < hd; d++) dot += qs[r][d] * ks[lane][d];
                for (int d = 0; d < hd; d++) dA += dys[r][d] * vs[lane][d];
                dP = expf(dot * scale - lt[rr]) * (dA - Dt[rr]) * scale;
            }
            ps[warp][lane] = dP;
            __syncwarp();
            int jn = min(ATT_BK, t - k0 + 1);
            for (int i = 0; i < NI && lane + 32 * i < hd; i++)
                for (int j = 0; j < jn; j++) acc[rr][i] += ps[warp][j] * ks[j][lane + 32 * i];
            __syncwarp();
        }
    }
    for (int rr = 0; rr < RPW; rr++) {
        int t = q0 + warp * RPW + rr;
        if (t >= T) break;
        for (int i = 0; i < NI && lane + 32 * i < hd; i++)
            set_elem(dq[(long)(b * T + t) * qd + h * hd + lane + 32 * i], acc[rr][i]);
    }
}

// grid (ceil(T / ATT_BQ_BWD), KVH, B): ATT_BQ_BWD key rows of kv head kh per block
template <typename A>
__global__ void attention_backward_kv_kernel(A* dk, A* dv, const A* dy, const float* lse,
                                             const float* D, Qkv<A> in, int T, int H, int KVH,
                                             int hd, float scale) {
    const int RPW = ATT_BQ_BWD / ATT_WARPS, NI = ATT_HD_MAX / 32;
    // a tile of queries and their dy: lane j reads row j
    __shared__ float qs[ATT_BK][ATT_HD_MAX + 1];
    __shared__ float dys[ATT_BK][ATT_HD_MAX + 1];
    // the block's keys and values (read by all lanes at once)
    __shared__ float ksb[ATT_BQ_BWD][ATT_HD_MAX];
    __shared__ float vsb[ATT_BQ_BWD][ATT_HD_MAX];
    __shared__ float ls[ATT_BK], Ds[ATT_BK];
    __shared__ float ps[ATT_WARPS][ATT_BK], dps[ATT_WARPS][ATT_BK];
    int s0 = blockIdx.x * ATT_BQ_BWD, kh = blockIdx.y, b = blockIdx.z, group = H / KVH;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, kvd = KVH * hd;
    load_kv_rows(ksb, vsb, in, b, s0, ATT_BQ_BWD, T, KVH, kh, hd);
    float gk[RPW][NI], gv[RPW][NI];
    for (int rr = 0; rr < RPW; rr++)
        for (int i = 0; i < NI; i++) gk[rr][i] = gv[rr][i] = 0.0f;
    for (int h = kh * group; h < (kh + 1) * group; h++) {
        // causal: no query before the block's first key
        for (int t0 = s0 / ATT_BK * ATT_BK; t0 < T; t0 += ATT_BK) {
            __syncthreads();
            load_query_tile(qs, dys, ls, Ds, in, dy, lse, D, b, h, t0, ATT_BK, T, H, hd);
            __syncthreads();
            for (int rr = 0; rr < RPW; rr++) {
                int r = warp * RPW + rr, s = s0 + r, t = t0 + lane;
                if (s >= T) break;
                float p = 0.0f, dP = 0.0f;
                if (t >= s && t < T) {
                    float dot = 0.0f, dA = 0.0f;
                    for (int d = 0; d < hd; d++) dot += qs[lane][d] * ksb[r][d];
                    for (int d = 0; d < hd; d++) dA += dys[lane][d] * vsb[r][d];
                    p = expf(dot * scale - ls[lane]);
                    dP = p * (dA - Ds[lane]) * scale;
                }
                ps[warp][lane] = p;
                dps[warp][lane] = dP;
                __syncwarp();
                // the queries of the tile that see key s
                int j0 = max(0, s - t0), jn = min(ATT_BK, T - t0);
                for (int i = 0; i < NI && lane + 32 * i < hd; i++)
                    for (int j = j0; j < jn; j++) {
                        gv[rr][i] += ps[warp][j] * dys[j][lane + 32 * i];
                        gk[rr][i] += dps[warp][j] * qs[j][lane + 32 * i];
                    }
                __syncwarp();
            }
        }
    }
    for (int rr = 0; rr < RPW; rr++) {
        int s = s0 + warp * RPW + rr;
        if (s >= T) break;
        for (int i = 0; i < NI && lane + 32 * i < hd; i++) {
            set_elem(dk[(long)(b * T + s) * kvd + kh * hd + lane + 32 * i], gk[rr][i]);
            set_elem(dv[(long)(b * T + s) * kvd + kh * hd + lane + 32 * i], gv[rr][i]);
        }
    }
}

// ---- the same attention on the tensor cores (--tf32 1, --dtype bf16) ----------------------------
// With TF32 or bf16 matmuls the attention's products run on the tensor cores too: the scores q k^T,
// the output A v and the backward's dA = dy v^T, dq = dP k, dk = dP^T q, dv = A^T dy, as tiles of
// 16 x 16 x 8 TF32 or 16 x 16 x 16 bf16 with float32 accumulation (nvcuda::wmma; Tf32Tiles,
// Bf16Tiles below). The algorithm is the one above (online softmax, one lse per row, the two
// backward kernels, no atomics); what changes is who does the arithmetic:
//   - a warp owns 16 rows (queries; keys in the key kernel), a block 4 warps (bf16) or 2 (TF32);
//     keys (queries) stream through shared memory 32 at a time;
//   - q, k, v, dy enter shared memory as they are (bf16 activations; float32 ones are rounded to
//     TF32 as they are loaded into fragments); scores and dA leave the tensor cores in float32; the
//     softmax (maximum, exp, sums, lse, D) is float32 on the CUDA cores; the probabilities and dP
//     are rounded for the next product, as FlashAttention does;
//   - which lane holds which element of a fragment is unspecified, so every step that needs a row
//     (masking, exp, rescaling the output by exp(m_old - m_new)) works on a tile in shared memory,
//     where lanes 2r and 2r + 1 own row r, 16 columns each;
//   - running outputs (forward) live in shared memory, because they are rescaled by rows; gradients
//     (backward) are never rescaled and stay in fragments.
// Head sizes that are multiples of 16 up to 64 (a block's shared memory stays under 48 KB); other
// sizes use the kernels above. The rounding bounds are stated and tested in test_gpt2.cu (2b).
#define TCA_ROWS 16                          // rows per warp: the wmma tile
#define TCA_TILE 32                          // streamed rows per tile
#define TCA_HD_MAX 64
namespace wmma = nvcuda::wmma;

// The two kinds of tensor-core tiles, a template parameter (TT) of the kernels: E, an operand
// tile's element in shared memory; K, the depth of one mma; LDH, the row stride of a head
// tile (wmma: a multiple of 16 bytes, and 16 rows of it a multiple of 32); WARPS, a block's
// warps, so that its shared memory stays under 48 KB (float tiles take twice the bytes of
// bf16 ones), and BLOCK its rows.
struct Bf16Tiles {                           // --dtype bf16: m16n16k16 on bf16 operands
    typedef __nv_bfloat16 E;
    static constexpr int K = 16, LDH = TCA_HD_MAX + 8, WARPS = 4, BLOCK = TCA_ROWS * WARPS;
    typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> A;
    template <typename L> using B = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, L>;
    typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> Acc;
    // bf16 already in shared memory
    template <typename F> static __device__ void to_operand(F&) {}
};
// float32 activations with --tf32 1: m16n16k8 on TF32 operands
struct Tf32Tiles {
    typedef float E;
    static constexpr int K = 8, LDH = TCA_HD_MAX + 4, WARPS = 2, BLOCK = TCA_ROWS * WARPS;
    typedef wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> A;
    template <typename L>
    using B = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, L>;
    typedef wmma::fragment<wmma::accumulator, 16, 16, 8, float> Acc;
    template <typename F> static __device__ void to_operand(F& f) {  // rounded here, as CUDA asks
        for (int i = 0; i < f.num_elements; i++) f.x[i] = wmma::__float_to_tf32(f.x[i]);
    }
};

// the head sizes the tensor-core kernels take (with_head_size instantiates each)
static int tensor_core_head_size(int hd) { return hd % 16 == 0 && hd <= TCA_HD_MAX; }
static int attention_on_tensor_cores(int hd) {
    return (g_bf16.on || g_tf32) && tensor_core_head_size(hd);
}

// fn(Tiles(), std::integral_constant<int, hd>()): the tiles of the matmul mode (bf16, or TF32) and
// a head size the tensor-core kernels take (16, 32, 48 or 64)
template <typename Tiles, typename F> static void with_head_size(Tiles tiles, int hd, F fn) {
    switch (hd) {
    case 16: fn(tiles, std::integral_constant<int, 16>()); break;
    case 32: fn(tiles, std::integral_constant<int, 32>()); break;
    case 48: fn(tiles, std::integral_constant<int, 48>()); break;
    case 64: fn(tiles, std::integral_constant<int, 64>()); break;
    default: fatal("internal: head size %d on the tensor cores", hd);
    }
}
template <typename F> static void with_tiles(int hd, F fn) {
    if (g_bf16.on) with_head_size(Bf16Tiles(), hd, fn);
    else with_head_size(Tf32Tiles(), hd, fn);
}

// The head size is a template parameter of these kernels, so that every loop over fragments has a
// length known to the compiler and the fragments stay in registers.
//
// acc[n] += A B[:, 16n .. 16n + 15] for n < NF: A is 16 x K, row-major with row stride lda; B is K
// x 16 NF, in layout LB: row_major has B[k][c] at b[k ldb + c], col_major at b[c ldb + k] (the rows
// of b are B's columns: how k^T is read from a tile of keys); TT::K of K per mma.
template <typename TT, typename LB, int K, int NF>
__device__ void tc_product(typename TT::Acc (&acc)[NF], const typename TT::E* a, int lda,
                           const typename TT::E* b, int ldb) {
    const bool brow = std::is_same<LB, wmma::row_major>::value;
    for (int kk = 0; kk < K; kk += TT::K) {
        typename TT::A fa;
        wmma::load_matrix_sync(fa, a + kk, lda);
        TT::to_operand(fa);
        for (int n = 0; n < NF; n++) {
            typename TT::template B<LB> fb;
            wmma::load_matrix_sync(
                    fb, brow ? b + (long)kk * ldb + 16 * n : b + (long)16 * n * ldb + kk, ldb);
            TT::to_operand(fb);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}
template <typename Acc, int NF> __device__ void tc_zero(Acc (&acc)[NF]) {
    for (int n = 0; n < NF; n++) wmma::fill_fragment(acc[n], 0.0f);
}
// out (16 x 16 NF, float32, row stride ldo) = acc, or acc = out (load)
template <typename Acc, int NF>
__device__ void tc_store(float* out, int ldo, const Acc (&acc)[NF]) {
    for (int n = 0; n < NF; n++)
        wmma::store_matrix_sync(out + 16 * n, acc[n], ldo, wmma::mem_row_major);
}
template <typename Acc, int NF> __device__ void tc_load(Acc (&acc)[NF], const float* in, int ldi) {
    for (int n = 0; n < NF; n++)
        wmma::load_matrix_sync(acc[n], in + 16 * n, ldi, wmma::mem_row_major);
}

// Gradients kept in fragments (16 rows of a warp, hd columns) out to rows r0 .. of x [B*T,
// width] at column col0, rows past T left out: through the warp's float scratch tile (16 x
// 32), two fragments at a time.
template <typename Acc, int NF, typename A>
__device__ void tc_write_rows(A* x, const Acc (&acc)[NF], float (*scr)[TCA_TILE], int b, int r0,
                              int T, int width, int col0) {
    int lane = threadIdx.x % 32, r = lane / 2, t = r0 + r;
    for (int n0 = 0; n0 < NF; n0 += 2) {
        int nf = min(2, NF - n0);
        __syncwarp();
        for (int n = 0; n < nf; n++)
            wmma::store_matrix_sync(&scr[0][16 * n], acc[n0 + n], TCA_TILE, wmma::mem_row_major);
        __syncwarp();
        for (int c = lane % 2; c < 16 * nf; c += 2)
            if (t < T) set_elem(x[(long)(b * T + t) * width + col0 + 16 * n0 + c], scr[r][c]);
    }
}

// grid (ceil(T / BLOCK), H, B), TT::WARPS * 32 threads; lse [B, H, T]
// The activations are the tiles' elements (TT::E): bf16 with --dtype bf16, float32 with TF32.
template <typename TT, int hd>
__global__ void attention_forward_tc_kernel(typename TT::E* y, float* lse, Qkv<typename TT::E> in,
                                            int T, int H, int KVH, float scale) {
    constexpr int BLOCK = TT::BLOCK;
    __shared__ __align__(32) typename TT::E qs[BLOCK][TT::LDH], ks[TCA_TILE][TT::LDH],
            vs[TCA_TILE][TT::LDH];
    __shared__ __align__(32) float ss[TT::WARPS][TCA_ROWS][TCA_TILE];        // a warp's scores
    // ... as probabilities
    __shared__ __align__(32) typename TT::E ps[TT::WARPS][TCA_ROWS][TCA_TILE];
    // ... and its running outputs
    __shared__ __align__(32) float os[TT::WARPS][TCA_ROWS][TCA_HD_MAX];
    int q0 = blockIdx.x * BLOCK, h = blockIdx.y, b = blockIdx.z, kh = h / (H / KVH);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, qd = H * hd;
    // lane pair: row r, query t
    int r = lane / 2, half = lane % 2, w0 = q0 + TCA_ROWS * warp, t = w0 + r;
    load_head_rows(qs, in.q, in.bq, b, q0, BLOCK, T, qd, h * hd, hd);
    for (int c = half; c < hd; c += 2) os[warp][r][c] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    int q_last = min(q0 + BLOCK, T) - 1;
    for (int k0 = 0; k0 <= q_last; k0 += TCA_TILE) {
        __syncthreads();
        load_kv_rows(ks, vs, in, b, k0, TCA_TILE, T, KVH, kh, hd);
        __syncthreads();
        // no query of this warp (before T) sees the tile
        if (w0 >= T || k0 > w0 + TCA_ROWS - 1) continue;
        typename TT::Acc sacc[TCA_TILE / 16];
        tc_zero(sacc);
        tc_product<TT, wmma::col_major, hd>(sacc, &qs[TCA_ROWS * warp][0], TT::LDH, &ks[0][0],
                                            TT::LDH);
        tc_store(&ss[warp][0][0], TCA_TILE, sacc);
        __syncwarp();
        // the online softmax of row r over the tile (rows past T see zero keys:
        // finite, never written)
        float sc[16], mx = -INFINITY;
        for (int j = 0; j < 16; j++) {
            int c = 16 * half + j;
            sc[j] = k0 + c <= t ? ss[warp][r][c] * scale : -INFINITY;
            mx = fmaxf(mx, sc[j]);
        }
        // finite: key k0 <= t
        float mn = fmaxf(m, fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1)));
        float corr = expf(m - mn), sum = 0.0f;
        for (int j = 0; j < 16; j++) {
            float p = expf(sc[j] - mn);                                       // 0 where masked
            sum += p;
            set_elem(ps[warp][r][16 * half + j], p);
        }
        l = l * corr + sum + __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
        m = mn;
        for (int c = half; c < hd; c += 2) os[warp][r][c] *= corr;
        __syncwarp();
        typename TT::Acc oacc[hd / 16];
        tc_load(oacc, &os[warp][0][0], TCA_HD_MAX);
        tc_product<TT, wmma::row_major, TCA_TILE>(oacc, &ps[warp][0][0], TCA_TILE, &vs[0][0],
                                                  TT::LDH);
        tc_store(&os[warp][0][0], TCA_HD_MAX, oacc);
        __syncwarp();
    }
    if (t >= T) return;
    typename TT::E* yt = y + (long)(b * T + t) * qd + h * hd;
    for (int c = half; c < hd; c += 2) set_elem(yt[c], os[warp][r][c] / l);
    if (half == 0) lse[((long)b * H + h) * T + t] = m + logf(l);
}

// The backward, as above: dq and D from the query kernel, then dk and dv from the key kernel.
// grid (ceil(T / BLOCK), H, B); D [B, H, T]
template <typename TT, int hd>
__global__ void attention_backward_query_tc_kernel(typename TT::E* dq, float* D,
                                                   const typename TT::E* dy,
                                                   const typename TT::E* y, const float* lse,
                                                   Qkv<typename TT::E> in, int T, int H, int KVH,
                                                   float scale) {
    typedef typename TT::E A;
    constexpr int BLOCK = TT::BLOCK;
    __shared__ __align__(32) typename TT::E qs[BLOCK][TT::LDH], dys[BLOCK][TT::LDH];
    __shared__ __align__(32) typename TT::E ks[TCA_TILE][TT::LDH], vs[TCA_TILE][TT::LDH];
    __shared__ __align__(32) float ss[TT::WARPS][TCA_ROWS][TCA_TILE];        // scores, then dA
    __shared__ __align__(32) typename TT::E dps[TT::WARPS][TCA_ROWS][TCA_TILE];
    int q0 = blockIdx.x * BLOCK, h = blockIdx.y, b = blockIdx.z, kh = h / (H / KVH);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, qd = H * hd;
    int r = lane / 2, half = lane % 2, w0 = q0 + TCA_ROWS * warp, t = w0 + r;
    load_head_rows(qs, in.q, in.bq, b, q0, BLOCK, T, qd, h * hd, hd);
    load_head_rows(dys, dy, NULL, b, q0, BLOCK, T, qd, h * hd, hd);
    // D_t = dy_t . y_t in float32, and the row's lse
    float Dt = 0.0f, lt = 0.0f;
    if (t < T) {
        const A *dyt = dy + (long)(b * T + t) * qd + h * hd,
                *yt = y + (long)(b * T + t) * qd + h * hd;
        for (int c = half; c < hd; c += 2) Dt += as_float(dyt[c]) * as_float(yt[c]);
        lt = lse[((long)b * H + h) * T + t];
    }
    Dt += __shfl_xor_sync(0xFFFFFFFFu, Dt, 1);
    if (t < T && half == 0) D[((long)b * H + h) * T + t] = Dt;
    typename TT::Acc dqacc[hd / 16];
    tc_zero(dqacc);
    int q_last = min(q0 + BLOCK, T) - 1;
    for (int k0 = 0; k0 <= q_last; k0 += TCA_TILE) {
        __syncthreads();
        load_kv_rows(ks, vs, in, b, k0, TCA_TILE, T, KVH, kh, hd);
        __syncthreads();
        if (w0 >= T || k0 > w0 + TCA_ROWS - 1) continue;
        typename TT::Acc sacc[TCA_TILE / 16];
        tc_zero(sacc);
        tc_product<TT, wmma::col_major, hd>(sacc, &qs[TCA_ROWS * warp][0], TT::LDH, &ks[0][0],
                                            TT::LDH);
        tc_store(&ss[warp][0][0], TCA_TILE, sacc);
        __syncwarp();
        // A[t, s] = exp(scale q_t . k_s - lse_t), 0 where masked
        float p[16];
        for (int j = 0; j < 16; j++) {
            int c = 16 * half + j;
            p[j] = k0 + c <= t && t < T ? expf(ss[warp][r][c] * scale - lt) : 0.0f;
        }
        __syncwarp();
        tc_zero(sacc);
        tc_product<TT, wmma::col_major, hd>(sacc, &dys[TCA_ROWS * warp][0], TT::LDH, &vs[0][0],
                                            TT::LDH);
        tc_store(&ss[warp][0][0], TCA_TILE, sacc);
        __syncwarp();
        for (int j = 0; j < 16; j++) {                   // dP = A (dA - D) scale
            int c = 16 * half + j;
            set_elem(dps[warp][r][c], p[j] * (ss[warp][r][c] - Dt) * scale);
        }
        __syncwarp();
        tc_product<TT, wmma::row_major, TCA_TILE>(dqacc, &dps[warp][0][0], TCA_TILE, &ks[0][0],
                                                  TT::LDH);
    }
    tc_write_rows(dq, dqacc, ss[warp], b, w0, T, qd, h * hd);
}

// grid (ceil(T / BLOCK), KVH, B): BLOCK key rows of kv head kh per block, each warp 16 of them
template <typename TT, int hd>
__global__ void attention_backward_kv_tc_kernel(typename TT::E* dk, typename TT::E* dv,
                                                const typename TT::E* dy, const float* lse,
                                                const float* D, Qkv<typename TT::E> in, int T,
                                                int H, int KVH, float scale) {
    constexpr int BLOCK = TT::BLOCK;
    __shared__ __align__(32) typename TT::E ks[BLOCK][TT::LDH], vs[BLOCK][TT::LDH];
    __shared__ __align__(32) typename TT::E qs[TCA_TILE][TT::LDH], dys[TCA_TILE][TT::LDH];
    __shared__ float ls[TCA_TILE], Ds[TCA_TILE];
    __shared__ __align__(32) float ss[TT::WARPS][TCA_ROWS][TCA_TILE];        // scores^T, then dA^T
    __shared__ __align__(32) typename TT::E pts[TT::WARPS][TCA_ROWS][TCA_TILE],
            dpts[TT::WARPS][TCA_ROWS][TCA_TILE];
    int s0 = blockIdx.x * BLOCK, kh = blockIdx.y, b = blockIdx.z, group = H / KVH;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, kvd = KVH * hd;
    // lane pair: key row r, key s
    int r = lane / 2, half = lane % 2, w0 = s0 + TCA_ROWS * warp, s = w0 + r;
    load_kv_rows(ks, vs, in, b, s0, BLOCK, T, KVH, kh, hd);
    typename TT::Acc dkacc[hd / 16], dvacc[hd / 16];
    tc_zero(dkacc);
    tc_zero(dvacc);
    for (int h = kh * group; h < (kh + 1) * group; h++) {
        // causal: no query before the block's first key
        for (int t0 = s0 / TCA_TILE * TCA_TILE; t0 < T; t0 += TCA_TILE) {
            __syncthreads();
            load_query_tile(qs, dys, ls, Ds, in, dy, lse, D, b, h, t0, TCA_TILE, T, H, hd);
            __syncthreads();
            // no key of this warp (before T) is seen by the tile
            if (w0 >= T || t0 + TCA_TILE - 1 < w0) continue;
            typename TT::Acc sacc[TCA_TILE / 16];
            tc_zero(sacc);
            tc_product<TT, wmma::col_major, hd>(sacc, &ks[TCA_ROWS * warp][0], TT::LDH, &qs[0][0],
                                                TT::LDH);
            tc_store(&ss[warp][0][0], TCA_TILE, sacc);
            __syncwarp();
            float p[16];                                   // A[t, s], row r of A^T, 0 where masked
            for (int j = 0; j < 16; j++) {
                int c = 16 * half + j, t = t0 + c;
                p[j] = t >= s && t < T ? expf(ss[warp][r][c] * scale - ls[c]) : 0.0f;
                set_elem(pts[warp][r][c], p[j]);
            }
            __syncwarp();
            tc_zero(sacc);
            tc_product<TT, wmma::col_major, hd>(sacc, &vs[TCA_ROWS * warp][0], TT::LDH, &dys[0][0],
                                                TT::LDH);
            tc_store(&ss[warp][0][0], TCA_TILE, sacc);
            __syncwarp();
            for (int j = 0; j < 16; j++) {
                int c = 16 * half + j;
                set_elem(dpts[warp][r][c], p[j] * (ss[warp][r][c] - Ds[c]) * scale);
            }
            __syncwarp();
            tc_product<TT, wmma::row_major, TCA_TILE>(dvacc, &pts[warp][0][0], TCA_TILE, &dys[0][0],
                                                      TT::LDH);
            tc_product<TT, wmma::row_major, TCA_TILE>(dkacc, &dpts[warp][0][0], TCA_TILE, &qs[0][0],
                                                      TT::LDH);
        }
    }
    tc_write_rows(dk, dkacc, ss[warp], b, w0, T, kvd, kh * hd);
    tc_write_rows(dv, dvacc, ss[warp], b, w0, T, kvd, kh * hd);
}

// in's q, k, v and y, dy, dq, dk, dv: activation slices (bf16 values with --dtype bf16, whose
// tensor-core tiles are bf16 too: Bf16Tiles::E; float32 with Tf32Tiles). dq, dk, dv are
// overwritten (the CPU zeroes them and accumulates: the same values); they are the gradients
// of q, k, v with their biases.
static void gpu_attention_forward(float* y, float* lse, Qkv<float> in, int B, int T, int H, int KVH,
                                  int hd, float scale) {
    if (attention_on_tensor_cores(hd)) {
        with_tiles(hd, [&](auto tiles, auto size) {
            typedef decltype(tiles) TT;
            typedef typename TT::E A;
            constexpr int HD = decltype(size)::value;
            dim3 grid(ceil_div(T, TT::BLOCK), H, B);
            attention_forward_tc_kernel<TT, HD><<<grid, TT::WARPS * 32>>>((A*)y, lse, in.as<A>(), T,
                    H, KVH, scale);
            LAUNCH_CHECK(attention_forward_tc_kernel);
        });
        return;
    }
    with_act([&](auto a) {
        typedef decltype(a) A;
        attention_forward_kernel<A><<<dim3(ceil_div(T, ATT_BQ), H, B), ATT_WARPS * 32>>>((A*)y, lse,
                in.as<A>(), T, H, KVH, hd, scale);
        LAUNCH_CHECK(attention_forward_kernel);
    });
}

// D: B x H x T floats of scratch
static void gpu_attention_backward(float* dq, float* dk, float* dv, float* D, const float* dy,
                                   const float* y, const float* lse, Qkv<float> in, int B, int T,
                                   int H, int KVH, int hd, float scale) {
    if (attention_on_tensor_cores(hd)) {
        with_tiles(hd, [&](auto tiles, auto size) {
            typedef decltype(tiles) TT;
            typedef typename TT::E A;
            constexpr int HD = decltype(size)::value;
            dim3 query_grid(ceil_div(T, TT::BLOCK), H, B), key_grid(ceil_div(T, TT::BLOCK), KVH, B);
            attention_backward_query_tc_kernel<TT, HD><<<query_grid, TT::WARPS * 32>>>(
                (A*)dq, D, (const A*)dy, (const A*)y, lse, in.as<A>(), T, H, KVH, scale);
            LAUNCH_CHECK(attention_backward_query_tc_kernel);
            attention_backward_kv_tc_kernel<TT, HD><<<key_grid, TT::WARPS * 32>>>(
                (A*)dk, (A*)dv, (const A*)dy, lse, D, in.as<A>(), T, H, KVH, scale);
            LAUNCH_CHECK(attention_backward_kv_tc_kernel);
        });
        return;
    }
    with_act([&](auto a) {
        typedef decltype(a) A;
        attention_backward_query_kernel<A><<<dim3(ceil_div(T, ATT_BQ_BWD), H, B), ATT_WARPS * 32>>>(
            (A*)dq, D, (const A*)dy, (const A*)y, lse, in.as<A>(), T, H, KVH, hd, scale);
        LAUNCH_CHECK(attention_backward_query_kernel);
        attention_backward_kv_kernel<A><<<dim3(ceil_div(T, ATT_BQ_BWD), KVH, B), ATT_WARPS * 32>>>(
            (A*)dk, (A*)dv, (const A*)dy, lse, D, in.as<A>(), T, H, KVH, hd, scale);
        LAUNCH_CHECK(attention_backward_kv_kernel);
    });
}

// ---- the attention gate: [SmallInit eqs. 3-4] -------------------------------------------------
// Replaces attn_gate_forward_plain and attn_gate_backward_plain: a warp per (bt, h) instead of a
// thread, the gate's bias added here.
// GAttn(x) = Concat(g_1(x) * head_1, ..., g_H(x) * head_H) W_O,  g_h(x) = sigmoid(x W_h^g)  (3),(4)
// gate [BT,H] holds x W^g on entry (the GEMM's output) and is overwritten by g = sigmoid(x W^g +
// b^g), the bias (H entries, or NULL) added here. One warp per row r = (bt, h): its lanes read and
// write the row's hd contiguous values (coalesced). out, y: activations.
template <typename A>
__global__ void gate_forward_kernel(A* out, float* gate, const float* bias, const A* y, int BT,
                                    int H, int hd) {
    long r = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= (long)BT * H) return;              // the whole warp leaves together
    float g = sigmoid_of(gate[r] + (bias ? bias[r % H] : 0.0f));
    for (int i = lane; i < hd; i += 32) set_elem(out[r * hd + i], g * as_float(y[r * hd + i]));
    // every lane has read gate[r] before lane 0 replaces it
    __syncwarp();
    if (lane == 0) gate[r] = g;
}

// dy = g * dout ;  dgpre = (sum_i dout_i y_i) * g (1 - g), the sum over the warp's lanes in float32
template <typename A>
__global__ void gate_backward_kernel(A* dy, A* dgpre, const A* dout, const A* y, const float* gate,
                                     int BT, int H, int hd) {
    long r = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= (long)BT * H) return;
    float g = gate[r], s = 0.0f;
    for (int i = lane; i < hd; i += 32) {
        float d = as_float(dout[r * hd + i]);
        s += d * as_float(y[r * hd + i]);
        set_elem(dy[r * hd + i], g * d);
    }
    s = warp_sum(s);
    if (lane == 0) set_elem(dgpre[r], s * g * (1.0f - g));
}

// out, y, dy, dout, dgpre: activation slices
static void gpu_gate_forward(float* out, float* gate, const float* bias, const float* y, int BT,
                             int H, int hd) {
    with_act([&](auto a) {
        typedef decltype(a) A;
        gate_forward_kernel<A><<<ceil_div((long)BT * H, ROW_THREADS / 32), ROW_THREADS>>>((A*)out,
                gate, bias, (const A*)y, BT, H, hd);
        LAUNCH_CHECK(gate_forward_kernel);
    });
}
static void gpu_gate_backward(float* dy, float* dgpre, const float* dout, const float* y,
                              const float* gate, int BT, int H, int hd) {
    with_act([&](auto a) {
        typedef decltype(a) A;
        gate_backward_kernel<A><<<ceil_div((long)BT * H, ROW_THREADS / 32), ROW_THREADS>>>(
            (A*)dy, (A*)dgpre, (const A*)dout, (const A*)y, gate, BT, H, hd);
        LAUNCH_CHECK(gate_backward_kernel);
    });
}

// ---- MLP activations ----------------------------------------------------------------------------
// Replaces gelu_*_plain and swiglu_*_plain: the biases added as the values are read, their
// gradients summed by the backward kernels. GELU (tanh form) and SwiGLU: the CPU file's per-element
// functions (HOSTDEV). up [rows, F] (and a, SwiGLU's gate input) hold x W^T as the GEMM wrote it,
// without the bias: each kernel adds the bias as it reads the value, forward and backward, so the
// sum is never stored (a pass saved in the forward; in float32 the same bits as storing it). Every
// [rows, F] array is an activation (A).
template <typename A>
__global__ void gelu_forward_kernel(A* out, const A* up, const float* bias, long N, int F) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    set_elem(out[i], gelu_of(as_float(up[i]) + (bias ? bias[i % F] : 0.0f)));
}

template <typename A>
__global__ void swiglu_forward_kernel(A* out, const A* a, const A* u, const float* ba,
                                      const float* bu, long N, int F) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    int f = (int)(i % F);
    set_elem(out[i],
             swiglu_of(as_float(a[i]) + (ba ? ba[f] : 0.0f), as_float(u[i]) + (bu ? bu[f] : 0.0f)));
}

// The backward kernels also compute their biases' gradients: one thread per column f, over a
// chunk of ROWS_PER_CHUNK rows, colsum_partial_kernel's layout (consecutive threads,
// consecutive columns). Each writes the input gradient and its chunk's column sum,
// partial[chunk, f], which colsum_finish_kernel adds to the bias gradient: the column sums' own
// pass over the gradient is saved.
template <typename A>
__global__ void gelu_backward_kernel(A* dup, float* pdb, const A* up, const float* bias,
                                     const A* dout, int rows, int F) {
    int f = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (f >= F) return;
    int r1 = min(rows, (chunk + 1) * ROWS_PER_CHUNK);
    float b = bias ? bias[f] : 0.0f, sb = 0.0f;
    for (int r = chunk * ROWS_PER_CHUNK; r < r1; r++) {
        long i = (long)r * F + f;
        float d = gelu_grad_of(as_float(up[i]) + b) * as_float(dout[i]);
        set_elem(dup[i], d);
        sb += d;
    }
    if (pdb) pdb[(long)chunk * F + f] = sb;
}

template <typename A>
__global__ void swiglu_backward_kernel(A* da, A* du, float* pdba, float* pdbu, const A* a,
                                       const A* u, const float* ba, const float* bu, const A* dout,
                                       int rows, int F) {
    int f = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (f >= F) return;
    int r1 = min(rows, (chunk + 1) * ROWS_PER_CHUNK);
    float bia = ba ? ba[f] : 0.0f, biu = bu ? bu[f] : 0.0f, sa = 0.0f, su = 0.0f;
    for (int r = chunk * ROWS_PER_CHUNK; r < r1; r++) {
        long i = (long)r * F + f;
        float dai, dui;
        swiglu_grad_of(as_float(a[i]) + bia, as_float(u[i]) + biu, as_float(dout[i]), &dai, &dui);
        set_elem(da[i], dai);
        set_elem(du[i], dui);
        sa += dai;
        su += dui;
    }
    if (pdba) pdba[(long)chunk * F + f] = sa;
    if (pdbu) pdbu[(long)chunk * F + f] = su;
}

// hact = GELU(up + b_up), or SwiGLU(gpre + b_gate, up + b_up) where gpre is
// set; [N/F, F] activation slices
static void gpu_mlp_activation_forward(float* hact, const float* gpre, const float* up,
                                       const float* bgate, const float* bup, long N, int F) {
    with_act([&](auto a) {
        typedef decltype(a) A;
        if (gpre) {
            swiglu_forward_kernel<A><<<EW_GRID(N)>>>((A*)hact, (const A*)gpre, (const A*)up, bgate,
                    bup, N, F);
            LAUNCH_CHECK(swiglu_forward_kernel);
        } else {
            gelu_forward_kernel<A><<<EW_GRID(N)>>>((A*)hact, (const A*)up, bup, N, F);
            LAUNCH_CHECK(gelu_forward_kernel);
        }
    });
}

// dup (and dgpre where gpre is set) from dh, the activation's output gradient, [rows, F]; the
// biases' gradients (where the biases exist) are added to dbup and dbgate. scratch: 2 x
// ceil(rows/ROWS_PER_CHUNK) x F
static void gpu_mlp_activation_backward(float* dgpre, float* dup, float* dbgate, float* dbup,
                                        const float* gpre, const float* up, const float* bgate,
                                        const float* bup, const float* dh, int rows, int F,
                                        float* scratch) {
    int nchunks = ceil_div(rows, ROWS_PER_CHUNK);
    float *pdbu = bup ? scratch : NULL, *pdbg = bgate ? scratch + (long)nchunks * F : NULL;
    dim3 grid(ceil_div(F, EW_THREADS), nchunks);
    with_act([&](auto a) {
        typedef decltype(a) A;
        if (gpre) {
            swiglu_backward_kernel<A><<<grid, EW_THREADS>>>((A*)dgpre, (A*)dup, pdbg, pdbu,
                    (const A*)gpre, (const A*)up, bgate, bup, (const A*)dh, rows, F);
            LAUNCH_CHECK(swiglu_backward_kernel);
        } else {
            gelu_backward_kernel<A><<<grid, EW_THREADS>>>((A*)dup, pdbu, (const A*)up, bup,
                    (const A*)dh, rows, F);
            LAUNCH_CHECK(gelu_backward_kernel);
        }
    });
    if (pdbu) gpu_colsum_finish(dbup, pdbu, nchunks, F);
    if (pdbg) gpu_colsum_finish(dbgate, pdbg, nchunks, F);
}

// ---- softmax + cross-entropy, fused ------------------------------------------------------------
// Replaces softmax_forward_plain and crossentropy_backward_plain: a block per row instead of a
// thread, the maximum and the sum in one read, the gradient written without storing the
// probabilities, the mean loss taken on the device. a's running (max, sum of exp(x - max)) and b's
// combined: the larger maximum, the sums rescaled to it
__device__ void combine_max_sum(float& m, double& s, float m2, double s2) {
    float M = fmaxf(m, m2);
    s = s * exp((double)m - M) + s2 * exp((double)m2 - M);
    m = M;
}

// The row z's largest scaled logit and the sum of exp(z * scale - max), the sum in double as
// on the CPU, in one read of the row (online softmax: a thread's running sum is rescaled when
// its maximum rises), then combined over the warp and the block in a fixed order. Every
// thread of the block gets both.
__device__ void row_max_sum(const float* z, int V, float scale, float* mx, double* sum) {
    __shared__ float wm[32];
    __shared__ double ws[32];
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32, nw = blockDim.x / 32;
    float m = -FLT_MAX;
    double s = 0.0;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float x = z[i] * scale;
        if (x > m) {
            s = s * exp((double)m - x) + 1.0;
            m = x;
        } else {
            s += expf(x - m);
        }
    }
    for (int o = 16; o > 0; o >>= 1)
        combine_max_sum(m, s, __shfl_xor_sync(0xffffffffu, m, o),
                        __shfl_xor_sync(0xffffffffu, s, o));
    __syncthreads();                  // wm, ws may still be read by a previous call
    if (lane == 0) {
        wm[wid] = m;
        ws[wid] = s;
    }
    __syncthreads();
    m = lane < nw ? wm[lane] : -FLT_MAX;
    s = lane < nw ? ws[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1)
        combine_max_sum(m, s, __shfl_xor_sync(0xffffffffu, m, o),
                        __shfl_xor_sync(0xffffffffu, s, o));
    *mx = m;
    *sum = s;
}

// Sampling (no targets): one block per row, logits [BT,V] replaced by the probabilities
// p = exp(z * scale - max) / sum. scale is muP's logit multiplier (1 otherwise), applied as each
// logit is read: the CPU's z * scale, without a pass of its own.
__global__ void softmax_forward_kernel(float* logits, int V, float scale) {
    float* z = logits + (long)blockIdx.x * V;
    float mx;
    double sum;
    row_max_sum(z, V, scale, &mx, &sum);
    float inv = (float)(1.0 / sum);
    for (int i = threadIdx.x; i < V; i += blockDim.x) z[i] = expf(z[i] * scale - mx) * inv;
}

// the mean of the BT per-row losses, in double, in one block (fixed order: reproducible)
__global__ void loss_mean_kernel(float* loss, const float* losses, int BT) {
    double s = 0.0;
    for (int i = threadIdx.x; i < BT; i += blockDim.x) s += losses[i];
    s = block_sum(s);
    if (threadIdx.x == 0) *loss = (float)(s / BT);
}

// mean loss over BT rows: dlogits = (p - onehot(target)) / BT with inv = 1/BT, then times muP's
// logit multiplier scale (the chain rule through z * scale; 1 otherwise)
__device__ float dlogit(float p, int is_target, float inv, float scale) {
    float d = p * inv;
    if (is_target) d -= inv;
    return scale != 1.0f ? d * scale : d;
}

// With targets: the softmax, the loss and the logits' gradient in one kernel (llm.c's fused
// classifier), one block per row and two reads of it: row_max_sum, then each probability p = exp(z
// * scale - max) / sum becomes its dlogit, never stored itself. losses[bt] = -log p[target] =
// log(sum) - (z_t - max), exact even where p underflows. G is the gradient's type: float, written
// over the logits (dlogits == logits), or bf16 (--dtype bf16) into its own [BT, V] buffer, the
// head's GEMMs' input, the logits left in place.
template <typename G>
__global__ void softmax_crossentropy_kernel(const float* logits, float* losses, G* dlogits,
                                            const int* targets, int V, float scale, float inv) {
    int bt = blockIdx.x, target = targets[bt];
    const float* z = logits + (long)bt * V;
    // read before row_max_sum's barriers: the row is overwritten only after
    float zt = z[target] * scale;
    float mx;
    double sum;
    row_max_sum(z, V, scale, &mx, &sum);
    float pinv = (float)(1.0 / sum);
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        set_elem(dlogits[(long)bt * V + i],
                 dlogit(expf(z[i] * scale - mx) * pinv, i == target, inv, scale));
    if (threadIdx.x == 0) losses[bt] = (float)(log(sum) - (zt - mx));
}

// ============================================================================================
// 6. The model on the device
// ============================================================================================

// One row of the tensor table for the single AdamW launch (section 7): where the tensor starts in
// the parameter block, its learning-rate multiplier and whether it decays.
typedef struct { size_t offset; float lr_mult; int decay; } AdamwTensor;

// ZeRO stage 1 (--zero 1, section 9): this process is rank `rank` of `ranks` and keeps the
// AdamW moments of one shard of the parameter block only. ranks 0 (one GPU, or several with a
// plain all-reduce): all of them.
static struct { int rank, ranks; } g_zero;

// The part of the parameter block whose moments this process keeps and whose update it computes:
// elements [lo, lo + n), shard `index` of `count`; and `padded`, the length of the parameter and
// gradient blocks: P rounded up to `count` equal shards of whole 128-byte lines, the pieces
// NCCL's reduce-scatter and all-gather move. The last shard may reach past P, into padding that
// nothing reads (shard_numel).
typedef struct { size_t lo, n, padded; int index, count; } Shard;
static Shard zero_shard(size_t P) {
    if (!g_zero.ranks) return {0, P, P, 0, 1};
    size_t n = ((P + g_zero.ranks - 1) / g_zero.ranks + 31) / 32 * 32;
    return {(size_t)g_zero.rank * n, n, n * g_zero.ranks, g_zero.rank, g_zero.ranks};
}
static size_t shard_numel(Shard s, size_t P) {
    return s.lo >= P ? 0 : P - s.lo < s.n ? P - s.lo : s.n;
}

// Device mirrors of Acts (train_gpt2.c section 2), the same shapes, plus what the kernels need.
typedef struct {
    // att is not Acts' [L, B, H, T, T] probabilities but the fused attention's row
    // log-sum-exp [L, B, H, T]: gpu_layer calls layer_acts with maxT = 1, which makes la.att
    // the layer's slice of it
    float *res, *resmid, *ln1, *ln1_mean, *ln1_rstd, *q, *k, *v, *att, *yatt, *attn_gate, *ygated;
    float *ln2, *ln2_mean, *ln2_rstd, *up, *mlp_gate, *hact, *lnf, *lnf_mean, *lnf_rstd, *logits,
            *losses;
    float *dres, *dln, *dq, *dk, *dv, *dyg, *dyatt, *dattn_gate, *dup, *dmlp_gate, *dhact, *proj;
    float* attD;                          // attention's row sums D = dy . y [B, H, T]
    float* scratch;                       // partial column sums (bias and norm-weight gradients)
    float* loss;                          // the mean of losses[], reduced on the device
    float* rope_cs;                       // RoPE's cos/sin table [T, hd/2, 2] (rope_table), or NULL
    // Activations (section 5, "--dtype bf16"), bf16 values with --dtype bf16: ln1, q, k, v, yatt,
    // ygated, ln2, up, mlp_gate, hact, lnf, proj (the output projections), and the gradients dq,
    // dk, dv, dyg, dyatt, dattn_gate, dup, dmlp_gate, dhact. The rest is float32 in every mode.
    // With --dtype bf16 only: the logits' gradient and dres in bf16, written beside their float32
    // sources for the GEMMs that read them (NULL without).
    __nv_bfloat16 *dlogits16, *dres16;
    // One int buffer, uploaded in one copy per step (gpu_forward): the batch and, with targets, the
    // tokens bucketed for the wte gradient (bucket_tokens)
    int* ibuf;                            // 5 B T + 1 ints: the five arrays below, in this order
    int *tokens, *targets;                // B x T
    int *utok, *ustart, *upos;            // B T, B T + 1, B T
} GpuActs;

typedef struct {
    Model* host;                          // config, tensor table, host copies of params, m, v
    float *params, *grads, *m, *v;        // device blocks, the host block's layout
    float *p[NUM_KINDS], *g[NUM_KINDS];
    int B, T;                             // activation buffers are sized for B x T
    GpuActs a;
    int* ibuf_h;                          // host side of a.ibuf, the same layout
    int *tokens_h, *targets_h, *utok_h, *ustart_h, *upos_h;
    int nu;                               // distinct tokens of the last forward with targets
    float* probs_h;                       // one row of the softmax, for sampling
    double *norm_partial, *norm;          // the gradient norm's partials and the norm itself
    // partials per shard (shard.count of them, in shard order)
    size_t norm_chunks;
    int norm_fresh;                       // gm->norm is that of the current gradients
    AdamwTensor* adamw_tab;               // the tensor table for adamw_kernel, the shard's rows
    int adamw_rows;
    // m, v: the moments of this part of the block (all of it on one GPU)
    Shard shard;
    float loss;
} GpuModel;

// --zero 1 (section 9): every rank's partial sums of the gradient norm, and the moments gathered
// for a checkpoint. Nothing to do with one shard.
static void zero_gather_norm_partials(GpuModel* gm);
static void zero_gather_moments(GpuModel* gm);

// Block l's slice of a parameter kind and of its gradient on the device
// (param_of, grad_of of train_gpt2.c)
static float* gpu_param_of(const GpuModel* gm, int kind, int l) {
    return gm->p[kind] ? gm->p[kind] + (size_t)l * gm->host->kind_numel[kind] : NULL;
}
static float* gpu_grad_of(const GpuModel* gm, int kind, int l) {
    return gm->g[kind] ? gm->g[kind] + (size_t)l * gm->host->kind_numel[kind] : NULL;
}

// GpuActs' per-layer buffers as an Acts, so that layer_acts (train_gpt2.c section 2) slices them
static Acts acts_view(const GpuActs* a) {
    Acts v = {};
    v.res = a->res, v.resmid = a->resmid, v.ln1 = a->ln1, v.ln1_mean = a->ln1_mean,
    v.ln1_rstd = a->ln1_rstd;
    v.q = a->q, v.k = a->k, v.v = a->v, v.att = a->att, v.yatt = a->yatt,
    v.attn_gate = a->attn_gate;
    v.ygated = a->ygated, v.ln2 = a->ln2, v.ln2_mean = a->ln2_mean, v.ln2_rstd = a->ln2_rstd;
    v.up = a->up, v.mlp_gate = a->mlp_gate, v.hact = a->hact;
    return v;
}

// Layer l's slices of the activation buffers: layer_acts, which counts in floats,
// with each activation's slice moved to the same element offset in bf16 with --dtype
// bf16 (gpu_act: 2-byte elements)
static LayerActs gpu_layer(const GpuModel* gm, int l) {
    const GpuActs* a = &gm->a;
    Acts view = acts_view(a);
    LayerActs la = layer_acts(&view, &gm->host->cfg, l, (long)gm->B * gm->T, 1);
    // attn_out last: without the gate it is la.yatt's float offset in yatt
    if (g_bf16.on) {
        float** acts[] = {&la.ln1, &la.q,  &la.k,        &la.v,    &la.yatt,
                          &la.ln2, &la.up, &la.mlp_gate, &la.hact, &la.attn_out};
        float* bases[] = {a->ln1, a->q,  a->k,        a->v,    a->yatt,
                          a->ln2, a->up, a->mlp_gate, a->hact, a->ygated};
        for (int i = 0; i < 10; i++)
            if (*acts[i]) *acts[i] = (float*)((__nv_bfloat16*)bases[i] + (*acts[i] - bases[i]));
    }
    return la;
}

// Layer l's attention inputs as gpu_attention_forward and _backward read them (Qkv): with
// RoPE, q and k hold their biases already (rope_kernel added them); the tile loads add v's,
// and q's and k's without RoPE
static Qkv<float> gpu_qkv(const GpuModel* gm, const LayerActs* la, int l) {
    int rope = gm->host->cfg.rope;
    return {la->q, la->k, la->v, rope ? NULL : gpu_param_of(gm, K_BQ, l),
            rope ? NULL : gpu_param_of(gm, K_BK, l), gpu_param_of(gm, K_BV, l)};
}


static int adamw_tensor_cmp(const void* a, const void* b) {
    size_t x = ((const AdamwTensor*)a)->offset, y = ((const AdamwTensor*)b)->offset;
    return x < y ? -1 : x > y;
}

static void gpu_upload_state(GpuModel* gm) {       // host params, m, v, tensor table -> device
    const Model* hm = gm->host;
    size_t bytes = hm->num_params * sizeof(float);
    Shard sh = gm->shard;
    // the moments of the shard (all of them on one GPU)
    size_t mine = shard_numel(sh, hm->num_params);
    cudaCheck(cudaMemcpy(gm->params, hm->params, bytes, cudaMemcpyHostToDevice));
    if (sh.padded > hm->num_params)       // the padding after the last shard's parameters
        cudaCheck(cudaMemset(gm->params + hm->num_params, 0,
                             (sh.padded - hm->num_params) * sizeof(float)));
    cudaCheck(cudaMemset(gm->m, 0, sh.n * sizeof(float)));
    cudaCheck(cudaMemset(gm->v, 0, sh.n * sizeof(float)));
    cudaCheck(cudaMemcpy(gm->m, hm->adam_m + sh.lo, mine * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(gm->v, hm->adam_v + sh.lo, mine * sizeof(float), cudaMemcpyHostToDevice));
    // the weights' bf16 copy
    if (g_bf16.on) bf16_round(g_bf16.w16, gm->params, (long)hm->num_params);
    // the table in offset order (the host's is layer-major, the block kind-major), for the binary
    // search; the rows of the tensors in the shard, their offsets from its start (the first one's
    // 0: it may begin before the shard)
    AdamwTensor* tab = xmalloc((size_t)hm->num_tensors * sizeof(AdamwTensor));
    int rows = 0;
    for (int i = 0; i < hm->num_tensors; i++) {
        const Tensor* t = &hm->tensors[i];
        if (t->offset + t->numel <= sh.lo || t->offset >= sh.lo + mine) continue;
        tab[rows].offset = t->offset > sh.lo ? t->offset - sh.lo : 0;
        tab[rows].lr_mult = t->lr_mult;
        tab[rows++].decay = t->decay;
    }
    qsort(tab, (size_t)rows, sizeof(AdamwTensor), adamw_tensor_cmp);
    cudaCheck(cudaMemcpy(gm->adamw_tab, tab, (size_t)rows * sizeof(AdamwTensor),
                         cudaMemcpyHostToDevice));
    gm->adamw_rows = rows;
    free(tab);
}

// device params -> host (probes), and with moments m, v too (checkpoints;
// gathered first under --zero 1)
static void gpu_download_state(GpuModel* gm, int moments) {
    size_t bytes = gm->host->num_params * sizeof(float);
    cudaCheck(cudaMemcpy(gm->host->params, gm->params, bytes, cudaMemcpyDeviceToHost));
    if (!moments) return;
    if (gm->shard.count > 1) { zero_gather_moments(gm); return; }
    cudaCheck(cudaMemcpy(gm->host->adam_m, gm->m, bytes, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(gm->host->adam_v, gm->v, bytes, cudaMemcpyDeviceToHost));
}

static float* gpu_f32(size_t* count, size_t n) { return (float*)gpu_buf(count, n, sizeof(float)); }
// n activations: float32, or bf16 with --dtype bf16 (float* all the same:
// the kernels read them as A)
static float* gpu_act(size_t* count, size_t n) {
    return (float*)gpu_buf(count, n, g_bf16.on ? sizeof(__nv_bfloat16) : sizeof(float));
}

// The activation buffers of GpuActs for batches up to B x T (the int buffer and the RoPE
// table aside): the host's Acts less its attention probabilities and their scratch,
// which the fused attention does not keep (it keeps a log-sum-exp and D per query row
// instead), plus the kernels' scratch.
static void gpu_acts_layout(GpuActs* a, const Config* c, int B, int T, size_t* count) {
    long BT = (long)B * T, L = c->L, C = c->C, hd = C / c->H;
    long qd = c->H * hd, kvd = c->KVH * hd, F = c->F, H = c->H, V = c->V;
    long widest = C > F ? C : F;
    if (qd > widest) widest = qd;
    a->res = gpu_f32(count, (L + 1) * BT * C);
    a->resmid = gpu_f32(count, L * BT * C);
    a->ln1 = gpu_act(count, L * BT * C);
    a->ln1_mean = gpu_f32(count, L * BT);
    a->ln1_rstd = gpu_f32(count, L * BT);
    a->q = gpu_act(count, L * BT * qd);
    a->k = gpu_act(count, L * BT * kvd);
    a->v = gpu_act(count, L * BT * kvd);
    a->att = gpu_f32(count, L * BT * H);
    a->yatt = gpu_act(count, L * BT * qd);
    a->attn_gate = gpu_f32(count, L * BT * H);
    a->ygated = c->attn_gate ? gpu_act(count, L * BT * qd) : a->yatt;
    a->ln2 = gpu_act(count, L * BT * C);
    a->ln2_mean = gpu_f32(count, L * BT);
    a->ln2_rstd = gpu_f32(count, L * BT);
    a->up = gpu_act(count, L * BT * F);
    a->mlp_gate = c->swiglu ? gpu_act(count, L * BT * F) : NULL;
    a->hact = gpu_act(count, L * BT * F);
    a->lnf = gpu_act(count, BT * C);
    a->lnf_mean = gpu_f32(count, BT);
    a->lnf_rstd = gpu_f32(count, BT);
    a->logits = gpu_f32(count, BT * V);
    a->losses = gpu_f32(count, BT);
    a->loss = gpu_f32(count, 1);
    a->dres = gpu_f32(count, BT * C);
    a->dln = gpu_f32(count, BT * C);
    a->dq = gpu_act(count, BT * qd);
    a->dk = gpu_act(count, BT * kvd);
    a->dv = gpu_act(count, BT * kvd);
    a->attD = gpu_f32(count, BT * H);
    a->dyg = gpu_act(count, BT * qd);
    a->dyatt = gpu_act(count, BT * qd);
    a->dattn_gate = gpu_act(count, BT * H);
    a->dup = gpu_act(count, BT * F);
    a->dmlp_gate = gpu_act(count, BT * F);
    a->dhact = gpu_act(count, BT * F);
    a->proj = gpu_act(count, BT * (C > qd ? C : qd));
    long col_sums = 2L * ceil_div(BT, ROWS_PER_CHUNK) * widest,
         norm_sums = 3L * ceil_div(BT, NORM_ROWS) * C;
    a->scratch = gpu_f32(count, col_sums > norm_sums ? col_sums : norm_sums);
    a->dlogits16 = g_bf16.on ? (__nv_bfloat16*)gpu_buf(count, BT * V, sizeof(__nv_bfloat16)) : NULL;
    a->dres16 = g_bf16.on ? (__nv_bfloat16*)gpu_buf(count, BT * C, sizeof(__nv_bfloat16)) : NULL;
}

// Allocates the device model for batches up to B x T and uploads the host's params, m and
// v. The host model must be built (model_build) and initialized or loaded. The device's
// share of the memory estimate (train_gpt2.c section 10's memory_check does the host's):
// the four parameter-sized blocks, the activations (gpu_acts_layout) and, with --dtype
// bf16, the weights' bf16 copy, refused before the first cudaMalloc when the device has
// less free; 5% on top for cuBLAS's workspace and the small buffers left out (the RoPE
// table, the batch, the norm's partials).
static double gpu_memory_need(const Model* host, int B, int T) {
    size_t acts = 0;
    GpuActs shape;
    gpu_acts_layout(&shape, &host->cfg, B, T, &acts);
    // parameters and gradients, and this rank's moments
    Shard sh = zero_shard(host->num_params);
    double need = (2.0 * sh.padded + 2.0 * sh.n) * sizeof(float) + acts;
    if (g_bf16.on) need += (double)host->num_params * sizeof(__nv_bfloat16);
    return need;
}

static void gpu_memory_check(const Model* host, int B, int T) {
    size_t free_bytes = 0, total = 0, MiB = 1 << 20;
    cudaCheck(cudaMemGetInfo(&free_bytes, &total));
    double need = 1.05 * gpu_memory_need(host, B, T);
    printf("GPU memory: about %.1f MiB of %zu MiB free\n", need / MiB, free_bytes / MiB);
    if (need > (double)free_bytes)
        fatal("the run needs about %.0f MiB of GPU memory but %zu MiB are free: use a smaller "
              "model, -b or -t",
              need / MiB, free_bytes / MiB);
}

static void gpu_model_create(GpuModel* gm, Model* host, int B, int T) {
    if (host->cfg.C / host->cfg.H > ATT_HD_MAX)
        fatal("head size %d: the GPU's fused attention supports up to %d (more heads, or a smaller "
              "-C)",
              host->cfg.C / host->cfg.H, ATT_HD_MAX);
    gpu_memory_check(host, B, T);
    memset(gm, 0, sizeof(*gm));
    gm->host = host;
    gm->B = B;
    gm->T = T;
    size_t P = host->num_params;
    gm->shard = zero_shard(P);
    gm->params = dmalloc(gm->shard.padded);
    gm->grads = dmalloc(gm->shard.padded);
    gm->m = dmalloc(gm->shard.n);
    gm->v = dmalloc(gm->shard.n);
    gm->adamw_tab = (AdamwTensor*)gpu_buf(NULL, (size_t)host->num_tensors, sizeof(AdamwTensor));
    for (int kd = 0; kd < NUM_KINDS; kd++) {
        gm->p[kd] = host->p[kd] ? gm->params + (host->p[kd] - host->params) : NULL;
        gm->g[kd] = host->g[kd] ? gm->grads + (host->g[kd] - host->grads) : NULL;
    }
    if (g_bf16.on) {
        g_bf16.params = gm->params;
        g_bf16.n = P;
        g_bf16.w16 = (__nv_bfloat16*)gpu_buf(NULL, P, sizeof(__nv_bfloat16));
    }
    gpu_upload_state(gm);
    cudaCheck(cudaMemset(gm->grads, 0, gm->shard.padded * sizeof(float)));

    const Config* c = &host->cfg;
    long BT = (long)B * T, hd = c->C / c->H;
    GpuActs* a = &gm->a;
    gpu_acts_layout(a, c, B, T, NULL);
    a->rope_cs = NULL;
    if (c->rope) {                        // the CPU's table, computed once (rope_kernel)
        float* cs = xmalloc((size_t)T * (hd / 2) * 2 * sizeof(float));
        rope_table(cs, T, (int)hd, c->rope_theta);
        a->rope_cs = dmalloc((size_t)T * (hd / 2) * 2);
        cudaCheck(cudaMemcpy(a->rope_cs, cs, (size_t)T * (hd / 2) * 2 * sizeof(float),
                             cudaMemcpyHostToDevice));
        free(cs);
    }
    a->ibuf = dmalloc_int(5 * BT + 1);
    gm->ibuf_h = xcalloc((size_t)(5 * BT + 1), sizeof(int));
    int* di[5] = {a->ibuf, a->ibuf + BT, a->ibuf + 2 * BT, a->ibuf + 3 * BT, a->ibuf + 4 * BT + 1};
    int* hi[5] = {gm->ibuf_h, gm->ibuf_h + BT, gm->ibuf_h + 2 * BT, gm->ibuf_h + 3 * BT,
                  gm->ibuf_h + 4 * BT + 1};
    a->tokens = di[0]; a->targets = di[1]; a->utok = di[2]; a->ustart = di[3]; a->upos = di[4];
    gm->tokens_h = hi[0];
    gm->targets_h = hi[1];
    gm->utok_h = hi[2];
    gm->ustart_h = hi[3];
    gm->upos_h = hi[4];
    gm->probs_h = xmalloc((size_t)c->V * sizeof(float));
    gm->norm_chunks = (gm->shard.n + NORM_CHUNK - 1) / NORM_CHUNK;
    size_t partials = gm->norm_chunks * gm->shard.count;
    gm->norm_partial = (double*)gpu_buf(NULL, partials + 1, sizeof(double));
    gm->norm = gm->norm_partial + partials;
}

static void gpu_model_free(GpuModel* gm) {
    GpuActs* a = &gm->a;
    float* bufs[] = {a->res,      a->resmid,     a->ln1,    a->ln1_mean,  a->ln1_rstd,  a->q,
                     a->k,        a->v,          a->att,    a->yatt,      a->attn_gate, a->ln2,
                     a->ln2_mean, a->ln2_rstd,   a->up,     a->mlp_gate,  a->hact,      a->lnf,
                     a->lnf_mean, a->lnf_rstd,   a->logits, a->losses,    a->loss,      a->dres,
                     a->dln,      a->dq,         a->dk,     a->dv,        a->attD,      a->dyg,
                     a->dyatt,    a->dattn_gate, a->dup,    a->dmlp_gate, a->dhact,     a->proj,
                     a->scratch,  gm->params,    gm->grads, gm->m,        gm->v};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) cudaCheck(cudaFree(bufs[i]));
    if (a->ygated != a->yatt) cudaCheck(cudaFree(a->ygated));
    cudaCheck(cudaFree(a->dlogits16));       // NULL without --dtype bf16
    cudaCheck(cudaFree(a->dres16));
    cudaCheck(cudaFree(a->ibuf));
    cudaCheck(cudaFree(a->rope_cs));
    cudaCheck(cudaFree(gm->norm_partial));
    cudaCheck(cudaFree(gm->adamw_tab));
    if (g_bf16.on) {
        cudaCheck(cudaFree(g_bf16.w16));
        g_bf16.params = NULL;
        g_bf16.w16 = NULL;
        g_bf16.n = 0;
    }
    free(gm->ibuf_h);
    free(gm->probs_h);
    memset(gm, 0, sizeof(*gm));
}

// Stable counting sort of the positions by token, for embedding_backward_wte_kernel, on the host:
// the tokens are there already, and the buckets travel up with them in the step's one copy.
// Returns the number of distinct tokens.
static int bucket_tokens(GpuModel* gm, int BT) {
    int V = gm->host->cfg.V, nu = 0;
    int* count = xcalloc((size_t)V, sizeof(int));
    for (int i = 0; i < BT; i++) count[gm->tokens_h[i]]++;
    int* next = xmalloc((size_t)V * sizeof(int));
    int at = 0;
    for (int tok = 0; tok < V; tok++) {
        if (!count[tok]) continue;
        gm->utok_h[nu] = tok;
        gm->ustart_h[nu] = at;
        next[tok] = at;
        at += count[tok];
        nu++;
    }
    gm->ustart_h[nu] = at;
    for (int i = 0; i < BT; i++) gm->upos_h[next[gm->tokens_h[i]]++] = i;
    free(count);
    free(next);
    return nu;
}

// Forward pass over B x T tokens (host arrays; B, T no larger than the buffers): model_forward of
// train_gpt2.c, layer for layer. With targets, returns the mean cross-entropy (reduced on the
// device in double; the one float copied back) and leaves the logits' gradient for the backward
// pass (over the logits, or in bf16 in dlogits16 with --dtype bf16); without, the logits buffer
// holds next-token probabilities and the return value is 0. The batch (and with targets the token
// buckets of the wte gradient) goes up in one copy.
static float gpu_forward(GpuModel* gm, const int* tokens, const int* targets, int B, int T) {
    const Config* c = &gm->host->cfg;
    GpuActs* a = &gm->a;
    int BT = B * T, C = c->C, H = c->H, KVH = c->KVH, hd = C / H, F = c->F;
    int qd = H * hd, kvd = KVH * hd;
    if (B > gm->B || T > gm->T)
        fatal("internal: forward with B=%d T=%d exceeds buffers %dx%d", B, T, gm->B, gm->T);
    // the buffers are laid out for gm->B x gm->T; a smaller batch uses the start of each array
    int maxBT = gm->B * gm->T;
    for (int i = 0; i < BT; i++) {
        if (tokens[i] < 0 || tokens[i] >= c->V)
            fatal("token id %d out of range [0, %d)", tokens[i], c->V);
        gm->tokens_h[i] = tokens[i];
    }
    size_t n_up = (size_t)BT;
    if (targets) {
        for (int i = 0; i < BT; i++) {
            if (targets[i] < 0 || targets[i] >= c->V)
                fatal("target id %d out of range [0, %d)", targets[i], c->V);
            gm->targets_h[i] = targets[i];
        }
        gm->nu = bucket_tokens(gm, BT);
        n_up = (size_t)5 * maxBT + 1;
    }
    cudaCheck(cudaMemcpy(a->ibuf, gm->ibuf_h, n_up * sizeof(int), cudaMemcpyHostToDevice));
    if (g_after_op) g_after_op("copy batch to device");
    embedding_forward_kernel<<<EW_GRID((long)BT * C)>>>(a->res, a->tokens, gm->p[K_WTE],
            gm->p[K_WPE], BT, T, C);
    LAUNCH_CHECK(embedding_forward_kernel);
    // Each residual is fused with the norm that reads it (the next sublayer's, or the final one):
    // only layer 0's first norm runs alone. The biases of W_O and W_down are added there too, and
    // those of W_up (and W_gate) by the activation kernel.
    gpu_norm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, a->res, gpu_param_of(gm, K_LN1W, 0),
                     gpu_param_of(gm, K_LN1B, 0), c->rmsnorm, c->eps, BT, C);
    for (int l = 0; l < c->L; l++) {
        LayerActs la = gpu_layer(gm, l);
        // attention sublayer: xmid = x + Attn(Norm1(x)); Norm1(x) is la.ln1 already. Every
        // activation is passed as the pair (f32_of, bf16_of): the GEMMs take the run's type
        float *ln1 = f32_of(la.ln1), *ln2 = f32_of(la.ln2);
        __nv_bfloat16 *ln1_16 = bf16_of(la.ln1), *ln2_16 = bf16_of(la.ln2);
        gpu_matmul_forward(f32_of(la.q), bf16_of(la.q), ln1, ln1_16, gpu_param_of(gm, K_WQ, l), BT,
                           C, qd);
        gpu_matmul_forward(f32_of(la.k), bf16_of(la.k), ln1, ln1_16, gpu_param_of(gm, K_WK, l), BT,
                           C, kvd);
        gpu_matmul_forward(f32_of(la.v), bf16_of(la.v), ln1, ln1_16, gpu_param_of(gm, K_WV, l), BT,
                           C, kvd);
        if (c->rope) {
            gpu_rope(la.q, gpu_param_of(gm, K_BQ, l), a->rope_cs, BT, T, H, hd, 1.0f);
            gpu_rope(la.k, gpu_param_of(gm, K_BK, l), a->rope_cs, BT, T, KVH, hd, 1.0f);
        }
        gpu_attention_forward(la.yatt, la.att, gpu_qkv(gm, &la, l), B, T, H, KVH, hd,
                              c->attn_scale);
        if (c->attn_gate) {                   // the gate's pre-activation is float32 in every mode
            gpu_matmul_forward(la.attn_gate, NULL, ln1, ln1_16, gpu_param_of(gm, K_ATTN_WG, l), BT,
                               C, H);
            gpu_gate_forward(la.attn_out, la.attn_gate, gpu_param_of(gm, K_ATTN_BG, l), la.yatt, BT,
                             H, hd);
        }
        gpu_matmul_forward(f32_of(a->proj), bf16_of(a->proj), f32_of(la.attn_out),
                           bf16_of(la.attn_out), gpu_param_of(gm, K_WO, l), BT, qd, C);
        gpu_residual_norm_forward(la.xmid, la.ln2, la.ln2_mean, la.ln2_rstd, la.x, a->proj,
                                  gpu_param_of(gm, K_BO, l), gpu_param_of(gm, K_LN2W, l),
                                  gpu_param_of(gm, K_LN2B, l), c->rmsnorm, c->eps, BT, C);
        // MLP sublayer: xout = xmid + MLP(Norm2(xmid)); then Norm1 of the next layer
        // (or the final norm)
        gpu_matmul_forward(f32_of(la.up), bf16_of(la.up), ln2, ln2_16, gpu_param_of(gm, K_WUP, l),
                           BT, C, F);
        if (c->swiglu)
            gpu_matmul_forward(f32_of(la.mlp_gate), bf16_of(la.mlp_gate), ln2, ln2_16,
                               gpu_param_of(gm, K_WGATE, l), BT, C, F);
        gpu_mlp_activation_forward(la.hact, la.mlp_gate, la.up, gpu_param_of(gm, K_BGATE, l),
                                   gpu_param_of(gm, K_BUP, l), (long)BT * F, F);
        gpu_matmul_forward(f32_of(a->proj), bf16_of(a->proj), f32_of(la.hact), bf16_of(la.hact),
                           gpu_param_of(gm, K_WDOWN, l), BT, F, C);
        if (l + 1 < c->L) {
            LayerActs nx = gpu_layer(gm, l + 1);
            gpu_residual_norm_forward(la.xout, nx.ln1, nx.ln1_mean, nx.ln1_rstd, la.xmid, a->proj,
                                      gpu_param_of(gm, K_BDOWN, l), gpu_param_of(gm, K_LN1W, l + 1),
                                      gpu_param_of(gm, K_LN1B, l + 1), c->rmsnorm, c->eps, BT, C);
        } else {
            gpu_residual_norm_forward(la.xout, a->lnf, a->lnf_mean, a->lnf_rstd, la.xmid, a->proj,
                                      gpu_param_of(gm, K_BDOWN, l), gm->p[K_LNFW], gm->p[K_LNFB],
                                      c->rmsnorm, c->eps, BT, C);
        }
    }
    const float* head = c->tied ? gm->p[K_WTE] : gm->p[K_LMHEAD];
    // float32 logits
    gpu_matmul_forward(a->logits, NULL, f32_of(a->lnf), bf16_of(a->lnf), head, BT, C, c->V);
    if (!targets) {                      // sampling: the probabilities, over the logits
        softmax_forward_kernel<<<BT, ROW_THREADS>>>(a->logits, c->V, c->logit_scale);
        LAUNCH_CHECK(softmax_forward_kernel);
        return 0.0f;
    }
    // the loss, and the logits' gradient that gpu_backward starts from: over the logits (float32),
    // or into dlogits16 (--dtype bf16)
    if (g_bf16.on)
        softmax_crossentropy_kernel<__nv_bfloat16><<<BT, ROW_THREADS>>>(a->logits, a->losses,
                a->dlogits16, a->targets, c->V, c->logit_scale, 1.0f / BT);
    else
        softmax_crossentropy_kernel<float><<<BT, ROW_THREADS>>>(a->logits, a->losses, a->logits,
                a->targets, c->V, c->logit_scale, 1.0f / BT);
    LAUNCH_CHECK(softmax_crossentropy_kernel);
    loss_mean_kernel<<<1, 1024>>>(a->loss, a->losses, BT);
    LAUNCH_CHECK(loss_mean_kernel);
    cudaCheck(cudaMemcpy(&gm->loss, a->loss, sizeof(float), cudaMemcpyDeviceToHost));
    if (g_after_op) g_after_op("copy loss to host");
    return gm->loss;
}

// cudaMemset to 0, named for the per-kernel timer
static void gpu_zero(void* p, size_t bytes) {
    cudaCheck(cudaMemset(p, 0, bytes));
    if (g_after_op) g_after_op("memset");
}

static void gpu_zero_grad(GpuModel* gm) {
    gpu_zero(gm->grads, gm->host->num_params * sizeof(float));
    gm->norm_fresh = 0;
}

// Backward pass of the last forward (which must have had targets): model_backward of
// train_gpt2.c, layer for layer, with its dloss (1, or 1/N for one of N micro-batches of an
// update). Gradients accumulate into gm->grads (zero them first).
static void gpu_backward(GpuModel* gm, int B, int T, float dloss) {
    const Config* c = &gm->host->cfg;
    GpuActs* a = &gm->a;
    int BT = B * T, C = c->C, H = c->H, KVH = c->KVH, hd = C / H, F = c->F;
    int qd = H * hd, kvd = KVH * hd;
    int maxBT = gm->B * gm->T;
    long res_stride = (long)maxBT * C;
    float* sc = a->scratch;
    gm->norm_fresh = 0;
    // loss -> logits -> final norm: the forward wrote the logits' gradient
    // (softmax_crossentropy_kernel) for dloss 1; the head's two products take the factor dloss
    // (their GEMMs' alpha) Each activation gradient's first contribution overwrites its buffer
    // (GRAD_SET), the others add to it: no memsets. a->dres carries d loss / d residual stream from
    // the final norm down. Each norm's backward also adds the bias gradient of the output
    // projection that reads dres next (W_down's, W_O's).
    const float* head = c->tied ? gm->p[K_WTE] : gm->p[K_LMHEAD];
    float* dhead = c->tied ? gm->g[K_WTE] : gm->g[K_LMHEAD];
    gpu_matmul_backward(a->dln, NULL, GRAD_SET, dhead, NULL, f32_of(a->logits), a->dlogits16,
                        f32_of(a->lnf), bf16_of(a->lnf), head, BT, C, c->V, sc, dloss);
    gpu_norm_backward(a->dres, GRAD_SET, a->dres16, gm->g[K_LNFW], gm->g[K_LNFB],
                      gpu_grad_of(gm, K_BDOWN, c->L - 1), a->dln, a->res + c->L * res_stride,
                      gm->p[K_LNFW], a->lnf_mean, a->lnf_rstd, c->rmsnorm, BT, C, sc);
    // blocks in reverse
    for (int l = c->L - 1; l >= 0; l--) {
        LayerActs la = gpu_layer(gm, l);
        // Activations and their gradients as (f32_of, bf16_of) pairs, as in gpu_forward. dln
        // (float32) sums the GEMMs' input gradients into a norm; dres, the residual's, is
        // float32 with a bf16 copy.
        float *ln1 = f32_of(la.ln1), *ln2 = f32_of(la.ln2);
        __nv_bfloat16 *ln1_16 = bf16_of(la.ln1), *ln2_16 = bf16_of(la.ln2);
        // MLP sublayer
        gpu_matmul_backward(f32_of(a->dhact), bf16_of(a->dhact), GRAD_SET,
                            gpu_grad_of(gm, K_WDOWN, l), NULL, a->dres, a->dres16, f32_of(la.hact),
                            bf16_of(la.hact), gpu_param_of(gm, K_WDOWN, l), BT, F, C, sc);
        // the activation's backward also adds b_up's and b_gate's gradients (so the
        // GEMMs get no dbias)
        gpu_mlp_activation_backward(a->dmlp_gate, a->dup, gpu_grad_of(gm, K_BGATE, l),
                                    gpu_grad_of(gm, K_BUP, l), la.mlp_gate, la.up,
                                    gpu_param_of(gm, K_BGATE, l), gpu_param_of(gm, K_BUP, l),
                                    a->dhact, BT, F, sc);
        if (c->swiglu)
            gpu_matmul_backward(a->dln, NULL, GRAD_SET, gpu_grad_of(gm, K_WGATE, l), NULL,
                                f32_of(a->dmlp_gate), bf16_of(a->dmlp_gate), ln2, ln2_16,
                                gpu_param_of(gm, K_WGATE, l), BT, C, F, sc);
        gpu_matmul_backward(a->dln, NULL, c->swiglu ? GRAD_ADD : GRAD_SET,
                            gpu_grad_of(gm, K_WUP, l), NULL, f32_of(a->dup), bf16_of(a->dup), ln2,
                            ln2_16, gpu_param_of(gm, K_WUP, l), BT, C, F, sc);
        gpu_norm_backward(a->dres, GRAD_ADD, a->dres16, gpu_grad_of(gm, K_LN2W, l),
                          gpu_grad_of(gm, K_LN2B, l), gpu_grad_of(gm, K_BO, l), a->dln, la.xmid,
                          gpu_param_of(gm, K_LN2W, l), la.ln2_mean, la.ln2_rstd, c->rmsnorm, BT, C,
                          sc);
        // attention sublayer
        gpu_matmul_backward(f32_of(a->dyg), bf16_of(a->dyg), GRAD_SET, gpu_grad_of(gm, K_WO, l),
                            NULL, a->dres, a->dres16, f32_of(la.attn_out), bf16_of(la.attn_out),
                            gpu_param_of(gm, K_WO, l), BT, qd, C, sc);
        float* dyatt = a->dyg;
        if (c->attn_gate) {
            gpu_gate_backward(a->dyatt, a->dattn_gate, a->dyg, la.yatt, la.attn_gate, BT, H, hd);
            gpu_matmul_backward(a->dln, NULL, GRAD_SET, gpu_grad_of(gm, K_ATTN_WG, l),
                                gpu_grad_of(gm, K_ATTN_BG, l), f32_of(a->dattn_gate),
                                bf16_of(a->dattn_gate), ln1, ln1_16,
                                gpu_param_of(gm, K_ATTN_WG, l), BT, C, H, sc);
            dyatt = a->dyatt;
        }
        // Without RoPE, b_k's gradient is zero in exact arithmetic (a constant added to every key
        // moves each query's scores by one constant, which the softmax ignores; RoPE turns the bias
        // with the key, by an angle that depends on the position, so there it is a parameter). With
        // --dtype bf16 it is not: D = dy . y reads the attention's output as stored, in bf16, so
        // sum_s dP[t, s] is a rounding remainder instead of 0. b_k then takes AdamW steps that
        // change nothing the model computes (doc/cuda.md, "bf16").
        gpu_attention_backward(a->dq, a->dk, a->dv, a->attD, dyatt, la.yatt, la.att,
                               gpu_qkv(gm, &la, l), B, T, H, KVH, hd, c->attn_scale);
        if (c->rope) {
            gpu_rope(a->dq, NULL, a->rope_cs, BT, T, H, hd, -1.0f);
            gpu_rope(a->dk, NULL, a->rope_cs, BT, T, KVH, hd, -1.0f);
        }
        gpu_matmul_backward(a->dln, NULL, c->attn_gate ? GRAD_ADD : GRAD_SET,
                            gpu_grad_of(gm, K_WQ, l), gpu_grad_of(gm, K_BQ, l), f32_of(a->dq),
                            bf16_of(a->dq), ln1, ln1_16, gpu_param_of(gm, K_WQ, l), BT, C, qd, sc);
        gpu_matmul_backward(a->dln, NULL, GRAD_ADD, gpu_grad_of(gm, K_WK, l),
                            gpu_grad_of(gm, K_BK, l), f32_of(a->dk), bf16_of(a->dk), ln1, ln1_16,
                            gpu_param_of(gm, K_WK, l), BT, C, kvd, sc);
        gpu_matmul_backward(a->dln, NULL, GRAD_ADD, gpu_grad_of(gm, K_WV, l),
                            gpu_grad_of(gm, K_BV, l), f32_of(a->dv), bf16_of(a->dv), ln1, ln1_16,
                            gpu_param_of(gm, K_WV, l), BT, C, kvd, sc);
        gpu_norm_backward(
                a->dres, GRAD_ADD, a->dres16, gpu_grad_of(gm, K_LN1W, l),
                gpu_grad_of(gm, K_LN1B, l), l > 0 ? gpu_grad_of(gm, K_BDOWN, l - 1) : NULL, a->dln,
                la.x, gpu_param_of(gm, K_LN1W, l), la.ln1_mean, la.ln1_rstd, c->rmsnorm, BT, C, sc);
    }
    // embeddings: wte through the token buckets (uploaded by gpu_forward), wpe column by column
    embedding_backward_wte_kernel<<<dim3(gm->nu, ceil_div(C, EW_THREADS)), EW_THREADS>>>(
        gm->g[K_WTE], a->dres, a->utok, a->ustart, a->upos, C);
    LAUNCH_CHECK(embedding_backward_wte_kernel);
    if (gm->g[K_WPE]) {
        embedding_backward_wpe_kernel<<<EW_GRID((long)T * C)>>>(gm->g[K_WPE], a->dres, B, T, C);
        LAUNCH_CHECK(embedding_backward_wpe_kernel);
    }
}

// ============================================================================================
// 7. AdamW, the gradient norm, clipping: all on the device, one launch for the update
// ============================================================================================
// A step sends nothing up to the host but the two numbers the loop prints: the mean loss (one
// float, gpu_forward) and the gradient norm (one double, gpu_grad_norm). The clipping factor is
// computed from the norm on the device, by every thread of the AdamW launch.

// sqrt(sum g^2): block i sums elements [i*NORM_CHUNK, (i+1)*NORM_CHUNK) in double in a
// fixed order, then one block adds the partials in a fixed order. Reproducible, no
// atomics. Replaces grad_sumsq_plain (a thread per chunk) and the host's sum of the
// chunks: nothing leaves the device.
__global__ void grad_sq_partial_kernel(double* partial, const float* g, size_t n) {
    size_t i0 = (size_t)blockIdx.x * NORM_CHUNK, i1 = i0 + NORM_CHUNK < n ? i0 + NORM_CHUNK : n;
    double s = 0.0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) s += (double)g[i] * g[i];
    s = block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// one block: norm = sqrt(sum of the partials)
__global__ void grad_norm_finish_kernel(double* norm, const double* partial, int nchunks) {
    double s = 0.0;
    for (int i = threadIdx.x; i < nchunks; i += blockDim.x) s += partial[i];
    s = block_sum(s);
    if (threadIdx.x == 0) *norm = sqrt(s);
}

// the norm of the current gradients into gm->norm (device), without copying it anywhere. Under
// --zero 1 each rank sums the squares of its shard, whose gradients are averaged over the ranks,
// and the ranks' partials are gathered, in shard order, before the one block adds them.
static void gpu_grad_norm_device(GpuModel* gm) {
    Shard sh = gm->shard;
    grad_sq_partial_kernel<<<(unsigned)gm->norm_chunks, 256>>>(
            gm->norm_partial + sh.index * gm->norm_chunks, gm->grads + sh.lo,
            shard_numel(sh, gm->host->num_params));
    LAUNCH_CHECK(grad_sq_partial_kernel);
    zero_gather_norm_partials(gm);
    grad_norm_finish_kernel<<<1, 1024>>>(gm->norm, gm->norm_partial,
            (int)(gm->norm_chunks * sh.count));
    LAUNCH_CHECK(grad_norm_finish_kernel);
    gm->norm_fresh = 1;
}

// the loop prints the norm (and stops on a non-finite one): the one double of a step's second copy
static double gpu_grad_norm(GpuModel* gm) {
    gpu_grad_norm_device(gm);
    double n;
    cudaCheck(cudaMemcpy(&n, gm->norm, sizeof(double), cudaMemcpyDeviceToHost));
    if (g_after_op) g_after_op("copy norm to host");
    return n;
}

// Replaces plain_adamw_step's launch of adamw_plain per tensor with one launch over all of them.
// One AdamW step over ALL parameters in one launch, adamw_step's arithmetic element for element:
//   theta <- theta (1 - lr lambda)                        decoupled weight decay, [ComplexCtl eq.
//   1] m <- b1 m + (1-b1) g ;  v <- b2 v + (1-b2) g^2 theta <- theta - lr/(1-b1^t) * m /
//   (sqrt(v)/sqrt(1-b2^t) + eps)
// The per-tensor learning-rate multiplier and decay flag come from tab (the host's tensor table,
// in offset order, uploaded with the parameters: AdamwTensor); each thread finds its tensor by
// binary search (about 8 steps for GPT-2 124M's 148 tensors: nothing next to the 28 bytes it
// moves). The constants are adamw_scalars' own expressions (bc1 = 1 - b1^t in double, b2c = sqrt(1
// - b2^t)), so the update is the CPU's bit for bit up to FMA contraction. The clipping factor is
// clip_scale's (section 4 of train_gpt2.c) on the device's norm. In bf16 mode (w16 not NULL) it
// also writes the new weight's bf16 copy, which the next GEMMs read.

__global__ void adamw_kernel(float* p, __nv_bfloat16* w16, const float* g, float* m, float* v,
                             size_t n, const AdamwTensor* tab, int ntab, const double* norm,
                             float clip, float sched_lr, float weight_decay, float beta1,
                             float beta2, double bc1, float b2c, float eps) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int lo = 0, hi = ntab - 1;                  // the last tensor whose offset is <= i
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (tab[mid].offset <= i) lo = mid; else hi = mid - 1;
    }
    float lr = sched_lr * tab[lo].lr_mult;
    float decay = tab[lo].decay ? 1.0f - lr * weight_decay : 1.0f;
    float step_size = (float)(lr / bc1);
    double nrm = *norm;
    float grad_scale = clip_scale(clip, nrm);
    float gi = g[i] * grad_scale;
    float pi = p[i] * decay;
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    pi -= step_size * mi / (sqrtf(vi) / b2c + eps);
    p[i] = pi;
    if (w16) w16[i] = __float2bfloat16(pi);
    m[i] = mi;
    v[i] = vi;
}

// Step t (from 1) at the scheduled rate sched_lr, clipped at o->clip by the norm of the current
// gradients (computed here if gpu_grad_norm has not seen them). Under --zero 1 the step of this
// rank's shard only, with the moments it keeps (section 9 gathers the parameters after it).
static void gpu_adamw_step(GpuModel* gm, const OptConfig* o, float sched_lr, int t) {
    if (!gm->norm_fresh) gpu_grad_norm_device(gm);
    Shard sh = gm->shard;
    size_t n = shard_numel(sh, gm->host->num_params);
    double bc1 = 1.0 - pow(o->beta1, t);
    float b2c = (float)sqrt(1.0 - pow(o->beta2, t));
    __nv_bfloat16* w16 = g_bf16.on ? g_bf16.w16 + sh.lo : NULL;
    adamw_kernel<<<EW_GRID(n)>>>(gm->params + sh.lo, w16, gm->grads + sh.lo, gm->m, gm->v, n,
            gm->adamw_tab, gm->adamw_rows, gm->norm, o->clip, sched_lr, o->weight_decay, o->beta1,
            o->beta2, bc1, b2c, o->adam_eps);
    LAUNCH_CHECK(adamw_kernel);
}

// ============================================================================================
// 8. Evaluation, sampling, the training loop
// ============================================================================================

// The GPU this process uses: 0, or with several ranks its local rank's
// (section 9), set before gpu_init
static int g_device;

// TF32 tensor-core math in the matmuls when tf32 is 1 (--tf32, default 1), full float32 else.
static void gpu_set_tf32(int tf32) {
    cublasCheck(cublasSetMathMode(g_blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    g_tf32 = tf32;
}

// bf16 GEMM inputs when bf16 is 1 (--dtype bf16), float32 else; set before gpu_model_create. bf16
// needs compute capability 8.0 (Ampere) or newer: an older device is refused with one line.
static void gpu_set_dtype(int bf16) {
    if (bf16) {
        cudaDeviceProp prop;
        cudaCheck(cudaGetDeviceProperties(&prop, g_device));
        if (prop.major < 8)
            fatal("--dtype bf16 needs a GPU of compute capability 8.0 or newer; %s is %d.%d (use "
                  "--dtype fp32)",
                  prop.name, prop.major, prop.minor);
    }
    g_bf16.on = bf16;
}

// The device (g_device) and the cuBLAS handle; without a usable GPU, the
// one-line error and exit status 1.
static void gpu_init(int tf32) {
    const char* why = gpu_unavailable();
    if (why) fatal("no CUDA GPU found (%s)", why);
    cudaCheck(cudaSetDevice(g_device));
    cublasCheck(cublasCreate(&g_blas));
    gpu_set_tf32(tf32);
}

// The Engine of train_gpt2.c (section 7 there), through which its train_with_engine trains: in
// place of Part I's model_forward, model_zero_grad, model_backward, grad_norm and adamw_step.
static float gpu_engine_forward(void* gm, const int* inp, const int* tgt, int B, int T) {
    return gpu_forward((GpuModel*)gm, inp, tgt, B, T);
}
static const float* gpu_engine_probs(void* ctx, int bt, int V) {
    GpuModel* gm = (GpuModel*)ctx;
    cudaCheck(cudaMemcpy(gm->probs_h, gm->a.logits + (size_t)bt * V, (size_t)V * sizeof(float),
                         cudaMemcpyDeviceToHost));
    return gm->probs_h;
}
static void gpu_engine_zero_grad(void* gm) { gpu_zero_grad((GpuModel*)gm); }
static void gpu_engine_backward(void* gm, int B, int T, float dloss) {
    gpu_backward((GpuModel*)gm, B, T, dloss);
}
static double gpu_engine_grad_norm(void* gm) { return gpu_grad_norm((GpuModel*)gm); }
// grad_scale is the loop's clipping factor from the norm it printed; adamw_kernel computes the same
// factor from the same norm on the device, so it is not sent down again.
static void gpu_engine_update(void* gm, const OptConfig* o, float lr, int t, float grad_scale) {
    (void)grad_scale;
    gpu_adamw_step((GpuModel*)gm, o, lr, t);
    cudaCheck(cudaDeviceSynchronize());      // the step is done when the loop takes its time
}
static void gpu_engine_to_host(void* gm, int moments) {
    gpu_download_state((GpuModel*)gm, moments);
}

static Engine gpu_engine(GpuModel* gm) {
    return (Engine){gm, gpu_engine_forward, gpu_engine_probs, gpu_engine_zero_grad,
                    gpu_engine_backward, gpu_engine_grad_norm, gpu_engine_update,
                    gpu_engine_to_host};
}

// ============================================================================================
// 9. Several GPUs: data parallel over NCCL, the optimizer sharded on request (ZeRO stage 1)
// ============================================================================================
// N processes, one GPU each, on one machine or many (doc/cuda.md, "Several GPUs"). Every rank draws
// the same batch of N x B rows with the same data generator (the batch one process draws with -b
// N*B) and runs the forward and backward of its own rows, [rank B, (rank + 1) B). Before the
// gradient norm the ranks' gradients are averaged (equally many rows each, so the mean of their
// means is the batch's): by ncclAllReduce, after which every rank takes the same AdamW step from
// the same gradients; or, with
// --zero 1, by ncclReduceScatter, after which each rank holds the average of its shard of the block
// only, takes that shard's step with the only moments it keeps, and ncclAllGather gives every rank
// the whole block again (ZeRO stage 1). The mean loss is averaged the same way: the loop,
// validation, the log and checkpoints see the batch's numbers on every rank, and every rank decides
// alike (a spike skip, a NaN stop). Rank 0 alone prints, logs, runs the probes and writes files
// (train_gpt2.c section 12). The ranks meet in -o DIR, and compare their flags and input files
// before anything is written. Every NCCL call is waited for here, not inside NCCL (a non-blocking
// communicator), so that a rank that dies, hangs or never comes ends the others with one line
// within --nccl-timeout seconds.

// Who this process is among the ranks, and how they run (take_dp_flags, dp_discover)
typedef struct {
    int rank, ranks, local;       // local: the rank among this machine's, which picks its GPU
    char source[80];              // where the rank and the world size came from
    int world_flag;               // --world-size given: NCCL even for one rank (make gpu-check)
    int zero;                     // --zero 1
    // several ranks, --world-size or --zero 1: the run goes through NCCL
    int nccl;
    double timeout;               // --nccl-timeout, seconds
    char* flags;                  // every other flag as "flag value" lines, sorted (dp_check)
    const char* dir;              // -o DIR as given: the ranks meet there
    char job[160];                // the job this rank belongs to (dp_job)
    double started;               // when this rank started, wall-clock seconds
} DpSetup;

// Flags by name alone: "-b 8" sorts and compares as "-b"
static int dp_name_cmp(const char* a, const char* b) {
    size_t na = strcspn(a, " \n"), nb = strcspn(b, " \n");
    int c = memcmp(a, b, na < nb ? na : nb);
    return c ? c : (na > nb) - (na < nb);
}
static int dp_line_cmp(const void* a, const void* b) {
    return dp_name_cmp(*(char* const*)a, *(char* const*)b);
}

// --rank, --world-size, --zero and --nccl-timeout, taken out of argv before the other flags are
// read. The command line is kept, sorted, for the ranks to compare (dp_check), less --rank and
// --world-size: the world size is checked when the ranks meet (dp_join).
static void take_dp_flags(int* argc, char** argv, DpSetup* s) {
    // every flag once, this binary's own too (parse_args sees the others only); -h ends the line
    for (int i = 1; i + 1 < *argc && strcmp(argv[i], "-h") && strcmp(argv[i], "--help"); i += 2)
        flag_once(argv, i);
    memset(s, 0, sizeof(*s));
    s->rank = -1;
    s->timeout = 600;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    s->started = now.tv_sec + now.tv_nsec * 1e-9;
    char** lines = xmalloc((size_t)*argc * sizeof(char*));
    int out = 1, n = 0;
    size_t len = 1;
    // flag, value: parse_args reads them so (-h aside)
    for (int i = 1; i < *argc; i++) {
        const char* f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) { argv[out++] = argv[i]; continue; }
        const char* v = i + 1 < *argc ? argv[i + 1] : "";
        int rank_or_world = !strcmp(f, "--rank") || !strcmp(f, "--world-size");
        if ((rank_or_world || !strcmp(f, "--zero") || !strcmp(f, "--nccl-timeout")) &&
            i + 1 >= *argc)
            fatal("flag %s needs a value", f);
        if (!strcmp(f, "--rank")) s->rank = (int)parse_int(f, v, 0, 65535);
        else if (!strcmp(f, "--world-size"))
            s->ranks = (int)parse_int(f, v, 1, 65536), s->world_flag = 1;
        else if (!strcmp(f, "--zero")) s->zero = (int)parse_int(f, v, 0, 1);
        else if (!strcmp(f, "--nccl-timeout")) s->timeout = parse_float(f, v, 1.0, 1e6);
        else {
            if (!strcmp(f, "-o") && i + 1 < *argc) s->dir = v;
            argv[out++] = argv[i];
            if (i + 1 < *argc) argv[out++] = argv[i + 1];
        }
        if (!rank_or_world) {
            lines[n] = xmalloc(strlen(f) + strlen(v) + 2);
            sprintf(lines[n], "%s %s", f, v);
            len += strlen(lines[n++]) + 1;
        }
        i++;
    }
    *argc = out;
    argv[out] = NULL;
    qsort(lines, (size_t)n, sizeof(char*), dp_line_cmp);
    s->flags = xmalloc(len);
    s->flags[0] = 0;
    for (int i = 0; i < n; i++) {
        strcat(strcat(s->flags, lines[i]), "\n");
        free(lines[i]);
    }
    free(lines);
}

static void dp_usage(void) {
    printf("Several GPUs (train_gpt2cu only; doc/cuda.md, \"Several GPUs\"): one process per GPU, "
           "-b each one's rows\n"
           "  --rank R --world-size N  this process's rank of N (default: from mpirun's, srun's or "
           "torchrun's\n"
           "              variables: OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE, RANK/WORLD_SIZE, "
           "SLURM_PROCID/NTASKS;\n"
           "              else one GPU). The ranks meet in -o DIR, which every rank must see\n"
           "  --zero 0|1  1: shard AdamW's moments over the ranks (ZeRO stage 1; default 0, "
           "all-reduce)\n"
           "  --nccl-timeout S  the ranks stop, with one line, after S seconds without progress (a "
           "rank that\n"
           "              died, hangs or never came; default 600)\n");
}

// The job a rank belongs to, known to all its ranks without their talking: the launcher's id of
// the job where one is set (Slurm's job and step; PMIx's namespace: Open MPI 5, srun --mpi=pmix;
// Open MPI 4's job id; torchrun's run id, master port and restart count), else "none". Rank 0
// writes it beside NCCL's id and in DIR/.lock, and a rank joins only its own job's id, so the ranks
// of two jobs started at once into one directory never pair. Jobs without a launcher's id (a shell
// loop, --rank by hand) are all "none": there, only the lock and the notes below keep them apart.
static void dp_job(DpSetup* s) {
    const char* e;
    if ((e = getenv("SLURM_JOB_ID")))
        snprintf(s->job, sizeof(s->job), "slurm job %s step %s", e,
                 getenv("SLURM_STEP_ID") ? getenv("SLURM_STEP_ID") : "none");
    else if ((e = getenv("PMIX_NAMESPACE")))
        snprintf(s->job, sizeof(s->job), "pmix namespace %s", e);
    else if ((e = getenv("OMPI_MCA_ess_base_jobid")))
        snprintf(s->job, sizeof(s->job), "open mpi job %s", e);
    else if ((e = getenv("TORCHELASTIC_RUN_ID")))
        snprintf(s->job, sizeof(s->job), "torchrun run %s port %s restart %s", e,
                 getenv("MASTER_PORT") ? getenv("MASTER_PORT") : "none",
                 getenv("TORCHELASTIC_RESTART_COUNT") ? getenv("TORCHELASTIC_RESTART_COUNT")
                                                      : "0");
    else snprintf(s->job, sizeof(s->job), "none");
    for (char* c = s->job; *c; c++)          // the files below split their lines at ':' and '\n'
        if (*c == ':' || *c == '\n') *c = '_';
}

// Until the ranks have met, a rank that stops (a bad flag, an unusable -o, DIR in use by another
// run) would leave the others waiting for it the whole --nccl-timeout. So fatal() (FATAL_HOOK)
// appends a line to DIR/nccl_failed: when the rank started, its rank, pid, job and message. Every
// rank waiting to meet reads that file every 200 ms (dp_watch) and stops at once, naming the rank
// and its reason. A line counts for the other ranks of the same job that started before the rank
// that wrote it or at most DP_NOTE_WINDOW s after it: a failed attempt's line does not stop the
// next attempt of the same command. The file stays in DIR, a record of the failed start.
#define DP_NOTE_WINDOW 10.0
static const DpSetup* g_dp_setup;  // main's (NULL in the tests)
static int g_dp_quiet;             // no line in DIR/nccl_failed: the ranks met, or one wrote first

static void dp_fatal(void) {
    static int busy;
    if (busy) exit(1);             // writing the line failed; the run's own line is out
    busy = 1;
    fprintf(stderr, "error: %s\n", fatal_msg);
    const DpSetup* s = g_dp_setup;
    if (s && s->ranks > 1 && s->dir && !g_dp_quiet) {
        output_dir_create(s->dir);
        char path[4200], line[1400];
        snprintf(path, sizeof(path), "%s/nccl_failed", s->dir);
        int n = snprintf(line, sizeof(line), "started %.3f rank %d pid %ld job %s: %s\n",
                         s->started, s->rank, (long)getpid(), s->job, fatal_msg);
        // one write, so that lines of ranks failing together do not mix; a line that cannot be
        // written leaves the others to --nccl-timeout, as before, and this rank's line stands alone
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) {
            ssize_t written = write(fd, line, (size_t)n);
            (void)written;
            close(fd);
        }
    }
    exit(1);
}

// The first line of DIR/nccl_failed that another rank of this job wrote (above), as a sentence
static int dp_failed_peer(const DpSetup* s, char* out, size_t cap) {
    char path[4200], line[1400], job[160], msg[1100];
    snprintf(path, sizeof(path), "%s/nccl_failed", s->dir);
    FILE* f = fopen(path, "r");
    int found = 0;
    while (f && !found && fgets(line, sizeof(line), f)) {
        double t;
        int r;
        long pid;
        found = sscanf(line, "started %lf rank %d pid %ld job %159[^:]: %1099[^\n]", &t, &r, &pid,
                       job, msg) == 5 &&
                r != s->rank && !strcmp(job, s->job) && t >= s->started - DP_NOTE_WINDOW;
        if (found)
            snprintf(out, cap, "rank %d (pid %ld, job %s) failed before the ranks met: %s", r,
                     pid, job, msg);
    }
    if (f) fclose(f);
    return found;
}

// 1 when DIR/.lock is held by a run other than this job's rank 0 (which writes its pid, then "job"
// and its job: output_dir_hold), with the holder's pid (and job) into out. The lock is taken shared
// for a moment to see whether it is held; output_dir_claim tries again when it meets such a look.
static int dp_lock_foreign(const DpSetup* s, char* out, size_t cap) {
    char path[4200], text[300], mine[200];
    snprintf(path, sizeof(path), "%s/.lock", s->dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    int held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    ssize_t n = held ? pread(fd, text, sizeof(text) - 1, 0) : 0;
    close(fd);
    text[n > 0 ? n : 0] = 0;
    snprintf(mine, sizeof(mine), "\njob %s\n", s->job);
    if (!text[0] || strstr(text, mine)) return 0;     // empty: a claim being written
    char* job = strstr(text, "\njob ");          // the holder's job, when it is a rank 0
    int pid_len = (int)strcspn(text, "\n");
    if (job)
        snprintf(out, cap, "pid %.*s, %.*s", pid_len, text, (int)strcspn(job + 1, "\n"), job + 1);
    else snprintf(out, cap, "pid %.*s", pid_len, text);
    return 1;
}

// Rank 0 makes -o DIR with its parents and writes there: a rank > 0 that sees it cannot be made
// (a file on the way) or written stops now
static void dp_dir_check(const DpSetup* s) {
    char p[4096];
    snprintf(p, sizeof(p), "%s", s->dir);
    struct stat st;
    while (stat(p, &st) != 0) {              // the part of the path that exists
        char* slash = strrchr(p, '/');
        if ((errno != ENOENT && errno != ENOTDIR) || !slash || slash == p) break;
        *slash = 0;
    }
    const char* why = NULL;
    if (stat(p, &st) == 0)
        why = !S_ISDIR(st.st_mode)           ? "is not a directory"
              : access(p, W_OK | X_OK) != 0 ? "is not writable"
                                            : NULL;
    else if (errno != ENOENT) why = strerror(errno);
    if (why)
        fatal("rank %d of %d: output dir %s cannot be made (%s %s): rank 0 meets the others there",
              s->rank, s->ranks, s->dir, p, why);
}

// Called every 200 ms while the ranks wait to meet: a rank of this job that failed, or (ranks > 0)
// DIR held by another run, ends this rank with one line
static void dp_watch(const DpSetup* s) {
    char why[1400];
    if (dp_failed_peer(s, why, sizeof(why))) {
        g_dp_quiet = 1;
        fatal("rank %d of %d: %s", s->rank, s->ranks, why);
    }
    if (s->rank && dp_lock_foreign(s, why, sizeof(why)))
        fatal("rank %d of %d: output dir %s is in use by another run (%s): one run per directory; "
              "wait for it to end or give another -o",
              s->rank, s->ranks, s->dir, why);
}

// A whole number from the launcher's variable `name`
static int dp_env_int(const char* name, const char* text) {
    char* end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < 0 || v > 65536)
        fatal("%s=%s is not a rank or a rank count", name, text);
    return (int)v;
}

// The rank, the world size and the local rank: from --rank and --world-size, else from the first
// launcher whose variables are set (launcher_env in train_gpt2.c; torchrun before srun, which may
// start it), else one GPU. The GPU: the
// local rank modulo the GPUs this process sees (with one GPU visible per process, as Slurm's
// --gpus-per-task gives, always its 0).
static void dp_discover(DpSetup* s) {
    if (s->rank >= 0 || s->ranks) {
        if (s->rank < 0 || !s->ranks) fatal("--rank and --world-size go together: give both");
        snprintf(s->source, sizeof(s->source), "--rank, --world-size");
        s->local = s->rank;
    } else {
        s->rank = 0;
        s->ranks = 1;
        for (const auto& e : launcher_env) {
            const char *r = getenv(e[0]), *n = getenv(e[1]), *l = getenv(e[2]);
            if (!r && !n) continue;
            if (!r || !n)
                fatal("%s is set but %s is not: a launcher sets both (or give --rank and "
                      "--world-size)",
                      r ? e[0] : e[1], r ? e[1] : e[0]);
            s->rank = dp_env_int(e[0], r);
            s->ranks = dp_env_int(e[1], n);
            s->local = l ? dp_env_int(e[2], l) : s->rank;
            snprintf(s->source, sizeof(s->source), "%s, %s", e[0], e[1]);
            break;
        }
    }
    if (s->ranks < 1 || s->rank >= s->ranks)
        fatal("rank %d of %d ranks (%s): a rank is 0 to the world size - 1", s->rank, s->ranks,
              s->source);
    int gpus = 0;
    dp_job(s);
    s->nccl = s->ranks > 1 || s->world_flag || s->zero;
#ifndef USE_NCCL
    if (s->nccl)
        fatal("this train_gpt2cu was built without NCCL (nccl.h not found, or NO_NCCL=1): it "
              "trains on one GPU; %d "
              "rank%s (%s) need a build with NCCL (make train_gpt2cu where NCCL is installed, or "
              "NCCL_HOME=DIR)",
              s->ranks, s->ranks > 1 ? "s" : "",
              s->world_flag || s->ranks > 1 ? s->source : "--zero 1");
#endif
    if (s->nccl) {
        if (cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0) g_device = s->local % gpus;
        if (s->rank > 0 && !freopen("/dev/null", "w", stdout))   // rank 0 alone prints
            fatal("rank %d: cannot send its output to /dev/null (%s)", s->rank, strerror(errno));
    }
}

#ifdef USE_NCCL
#include <nccl.h>

static struct {
    ncclComm_t comm;              // NULL: one GPU, no NCCL
    int rank, ranks;
    double timeout_ms;
    int reduced;                  // the gradients of this update are averaged over the ranks
} g_dp;

#define ncclCheck(call)                                                                            \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess)                                                                     \
            fatal("NCCL error at %s:%d: %s", __FILE__, __LINE__, ncclGetErrorString(r_));          \
    } while (0)

// Polls what the last NCCL call started on the non-blocking communicator: 1 done, 0 not yet, -1
// failed
// (*st is the error). A call is done when the communicator's state has left ncclInProgress and, for
// a collective (on_stream), the stream has run it.
static int dp_poll(ncclResult_t* st, int on_stream) {
    if (*st == ncclSuccess || *st == ncclInProgress) {
        ncclResult_t async = ncclSuccess, q = ncclCommGetAsyncError(g_dp.comm, &async);
        *st = q != ncclSuccess ? q : async;
    }
    if (*st == ncclInProgress) return 0;
    if (*st != ncclSuccess) return -1;
    if (!on_stream) return 1;
    cudaError_t e = cudaStreamQuery(0);
    if (e == cudaErrorNotReady) return 0;
    cudaCheck(e);
    return 1;
}

// Between polls: 20 us for the first 5 ms (about what a collective takes), then 1 ms
static void dp_pause(double waited_ms) {
    struct timespec ts = {0, waited_ms < 5 ? 20000 : 1000000};
    nanosleep(&ts, NULL);
}

// Aborts the communicator (which never waits for the other ranks) and ends the run with one line
static void dp_fail(const char* what, const char* why) {
    char detail[600];
    snprintf(detail, sizeof(detail), "%s", g_dp.comm ? ncclGetLastError(g_dp.comm) : "");
    for (char* p = detail; *p; p++)
        if (*p == '\n') *p = ' ';
    if (g_dp.comm) ncclCommAbort(g_dp.comm);
    g_dp.comm = NULL;
    fatal("rank %d of %d: %s %s%s%s%s", g_dp.rank, g_dp.ranks, what, why, detail[0] ? " (" : "",
          detail, detail[0] ? ")" : "");
}

// Waits for a collective started by `called`, which names `what` in the error
static void dp_call(ncclResult_t called, const char* what) {
    double t0 = now_ms();
    int state;
    while ((state = dp_poll(&called, 1)) == 0) {
        double waited = now_ms() - t0;
        if (waited > g_dp.timeout_ms) {
            char why[200];
            snprintf(why, sizeof(why),
                     "did not complete within %.0f s (--nccl-timeout): another rank died, hangs "
                     "or is far behind",
                     g_dp.timeout_ms / 1e3);
            dp_fail(what, why);
        }
        dp_pause(waited);
    }
    if (state < 0) {
        char why[200];
        snprintf(why, sizeof(why), "failed: %s", ncclGetErrorString(called));
        dp_fail(what, why);
    }
}

// DIR/nccl_id: a line with the world size and the job (dp_job), then NCCL's unique id in hex.
// Written to a temporary name and renamed, so that a reader sees the whole file or none.
static void dp_write_id(const char* path, const ncclUniqueId* id, const char* job) {
    char tmp[4300];
    snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
    FILE* f = fopen(tmp, "w");
    if (!f) fatal("rank 0: cannot write %s (%s)", tmp, strerror(errno));
    fprintf(f, "nccl id for %d ranks, job %s\n", g_dp.ranks, job);
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
        fprintf(f, "%02x", (unsigned char)id->internal[i]);
    int ok = fprintf(f, "\n") > 0;
    if (fclose(f) != 0 || !ok || rename(tmp, path) != 0)
        fatal("rank 0: cannot write %s (%s)", path, strerror(errno));
}

// 1 and the id and its world size when `path` holds one of this rank's job, else 0; another
// job's id leaves its job in g_dp_other (for the message of a rank that waited in vain)
static char g_dp_other[160];
static int dp_read_id(const char* path, ncclUniqueId* id, int* ranks, const char* job) {
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    char theirs[160];
    int ok = fscanf(f, "nccl id for %d ranks, job %159[^\n] ", ranks, theirs) == 2;
    if (ok && strcmp(theirs, job)) {
        snprintf(g_dp_other, sizeof(g_dp_other), "%s", theirs);
        ok = 0;
    }
    for (int i = 0; ok && i < NCCL_UNIQUE_ID_BYTES; i++) {
        unsigned x;
        ok = fscanf(f, "%2x", &x) == 1;
        id->internal[i] = (char)x;
    }
    fclose(f);
    return ok;
}

// The ranks meet in DIR: rank 0 writes a new unique id to DIR/nccl_id, every rank joins with the id
// found there, and rank 0 removes the file once all have joined. A rank that fails to join (or
// waits) with an id that the file no longer holds tries the newer one: a file that an earlier run
// left behind is replaced by this run's rank 0, and a rank that read it first joins again.
static void dp_join(const DpSetup* s) {
    char path[4200], note[200];
    snprintf(path, sizeof(path), "%s/nccl_id", s->dir);
    double t0 = now_ms(), next_look = 0;
    ncclUniqueId id, newer;
    int n = g_dp.ranks;
    if (g_dp.rank == 0) {       // DIR claimed first: a run already there stops the job at once
        snprintf(note, sizeof(note), "job %s\n", s->job);
        output_dir_hold(s->dir, note);
        ncclCheck(ncclGetUniqueId(&id));
        dp_write_id(path, &id, s->job);
    } else {
        dp_dir_check(s);
        while (!dp_read_id(path, &id, &n, s->job)) {
            double now = now_ms();
            if (now - t0 > g_dp.timeout_ms)
                fatal("rank %d of %d: no NCCL id from rank 0 of this job (%s) in %s after %.0f s "
                      "(--nccl-timeout)%s%s: is rank 0 running, with this -o on a file system "
                      "this machine shares?",
                      g_dp.rank, g_dp.ranks, s->job, path, g_dp.timeout_ms / 1e3,
                      g_dp_other[0] ? "; the id there was another job's, " : "", g_dp_other);
            if (now >= next_look) {
                next_look = now + 200;
                dp_watch(s);
            }
            dp_pause(1e3);
        }
    }
    for (;;) {
        if (g_dp.rank && n != g_dp.ranks)
            fatal("rank %d of %d: rank 0's id in %s is for %d ranks: every rank needs the same "
                  "world size",
                  g_dp.rank, g_dp.ranks, path, n);
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        // every call returns at once; dp_poll waits, up to the timeout
        cfg.blocking = 0;
        ncclResult_t st = ncclCommInitRankConfig(&g_dp.comm, g_dp.ranks, id, g_dp.rank, &cfg);
        int state, moved = 0;
        while ((state = dp_poll(&st, 0)) == 0 || (state < 0 && g_dp.rank && !moved)) {
            double now = now_ms();
            if (now >= next_look) {     // a rank that failed; a newer id from this job's rank 0?
                next_look = now + 200;
                dp_watch(s);
                moved = g_dp.rank && dp_read_id(path, &newer, &n, s->job) &&
                        memcmp(&newer, &id, sizeof(id)) != 0;
                if (moved) break;
            }
            if (now - t0 > g_dp.timeout_ms) {
                if (!g_dp.rank) unlink(path);
                char why[300];
                snprintf(why, sizeof(why), "%s within %.0f s (--nccl-timeout)%s",
                         state < 0 ? "failed, and no newer "
                                     "id came"
                                   : "did not complete",
                         g_dp.timeout_ms / 1e3,
                         state < 0   ? ""
                         : g_dp.rank ? ": is every rank running, with the same world size?"
                                     : ": were all the ranks started, with this -o on a file "
                                       "system they share?");
                dp_fail("joining the ranks", why);
            }
            dp_pause(now - t0);
        }
        if (state == 1) break;
        if (!moved) {                                 // rank 0's own init failed
            unlink(path);
            char why[200];
            snprintf(why, sizeof(why), "failed: %s", ncclGetErrorString(st));
            dp_fail("joining the ranks", why);
        }
        ncclCommAbort(g_dp.comm);
        id = newer;
    }
    g_dp_quiet = 1;             // met: from here on a rank that fails ends the others over NCCL
    if (g_dp.rank == 0) unlink(path);
}

// What every rank must share, compared once the ranks have met and before anything is
// written: the flags (DpSetup.flags: all but --rank and --world-size, in sorted order) and
// the bytes of every file read.
#define DP_FLAGS_TEXT 3072
typedef struct {
    // the flags' lines, cut short if longer (flags_crc covers them all)
    char flags[DP_FLAGS_TEXT];
    uint32_t flags_crc, file_crc[4];
    // -1: not given, or not readable (the run's own check says so)
    int64_t file_size[4];
} DpPrint;

static void dp_file_print(const char* path, uint32_t* crc, int64_t* size) {
    *crc = 0;
    *size = -1;
    FILE* f = path ? fopen(path, "rb") : NULL;
    if (!f) return;
    static char buf[1 << 20];
    *size = 0;
    for (size_t got; (got = fread(buf, 1, sizeof(buf), f)) > 0; *size += (int64_t)got)
        *crc = crc32_update(*crc, buf, got);
    fclose(f);
}

// The first difference between rank 0's flag lines a and rank r's b, as a sentence into out
static void dp_flag_difference(char* out, size_t cap, const char* a, const char* b, int r) {
    while (*a || *b) {
        int la = (int)strcspn(a, "\n"), lb = (int)strcspn(b, "\n");
        int c = !*a ? 1 : !*b ? -1 : dp_name_cmp(a, b);
        if (c == 0 && la == lb && !memcmp(a, b, (size_t)la)) {
            a += la + (a[la] == '\n');
            b += lb + (b[lb] == '\n');
            continue;
        }
        if (c == 0)
            snprintf(out, cap, "rank %d was started with %.*s, rank 0 with %.*s", r, lb, b, la, a);
        else if (c < 0)
            snprintf(out, cap, "rank 0 was started with %.*s, rank %d without it", la, a, r);
        else snprintf(out, cap, "rank %d was started with %.*s, rank 0 without it", r, lb, b);
        return;
    }
    snprintf(out, cap, "rank %d's flags differ from rank 0's after their first %d characters", r,
             DP_FLAGS_TEXT - 1);
}

// Every rank compares every rank's print with rank 0's and stops at the same first difference, with
// the same line: the flags first, then the files.
static void dp_check(const DpSetup* s, const Options* o) {
    const char* what[4] = {"training data (-i", "validation data (-j", "checkpoint (-y",
                           "llm.c model file (--load-llmc"};
    const char* path[4] = {o->train_path, o->val_path, o->resume, o->llmc_load};
    DpPrint mine;
    memset(&mine, 0, sizeof(mine));
    snprintf(mine.flags, sizeof(mine.flags), "%s", s->flags);
    mine.flags_crc = crc32_update(0, s->flags, strlen(s->flags));
    for (int k = 0; k < 4; k++) dp_file_print(path[k], &mine.file_crc[k], &mine.file_size[k]);
    size_t bytes = sizeof(DpPrint), N = (size_t)g_dp.ranks;
    char* d = (char*)gpu_buf(NULL, bytes * N, 1);
    cudaCheck(cudaMemcpy(d + g_dp.rank * bytes, &mine, bytes, cudaMemcpyHostToDevice));
    dp_call(ncclAllGather(d + g_dp.rank * bytes, d, bytes, ncclUint8, g_dp.comm, 0),
            "comparing the ranks' flags and files");
    DpPrint* all = xmalloc(bytes * N);
    cudaCheck(cudaMemcpy(all, d, bytes * N, cudaMemcpyDeviceToHost));
    cudaCheck(cudaFree(d));
    for (int r = 1; r < g_dp.ranks; r++) {
        const DpPrint *a = &all[0], *b = &all[r];
        char diff[2 * DP_FLAGS_TEXT];
        if (a->flags_crc != b->flags_crc) {
            dp_flag_difference(diff, sizeof(diff), a->flags, b->flags, r);
            fatal("%s: every rank needs the same flags", diff);
        }
        for (int k = 0; k < 4; k++)
            if (a->file_crc[k] != b->file_crc[k] || a->file_size[k] != b->file_size[k])
                fatal("rank %d's %s %s) differs from rank 0's: %lld bytes, CRC-32 %08x, against "
                      "%lld bytes, %08x; "
                      "every rank must read the same files",
                      r, what[k], path[k], (long long)b->file_size[k], b->file_crc[k],
                      (long long)a->file_size[k], a->file_crc[k]);
    }
    free(all);
}

// The ranks meet and agree (dp_join, dp_check), and the run's options become the whole batch's: -b
// rows on each of N ranks make a batch of N B rows, and -d counts the tokens of all of them
// (micro-batches x B x T x N). Before anything is written.
static void dp_start(const DpSetup* s, Options* o) {
    if (!s->nccl) return;
    if (!o->out_dir)
        fatal("%d rank%s over NCCL need%s -o DIR: rank 0 writes NCCL's id there for the others (a "
              "directory every "
              "rank sees)",
              s->ranks, s->ranks > 1 ? "s" : "", s->ranks > 1 ? "" : "s");
    if (o->probe.coord_check)
        fatal("--coord-check trains its widths one after another on one GPU: give one rank");
    long rows = (long)o->B * s->ranks, tokens = rows * o->T;
    if (rows > 1 << 20)
        fatal("-b %d on %d ranks is %ld rows per batch: at most %d", o->B, s->ranks, rows, 1 << 20);
    if (o->tokens_per_update % tokens)
        fatal("-d %ld is not a multiple of %d ranks x -b %d x -t %d = %ld tokens",
              o->tokens_per_update, s->ranks, o->B, o->T, tokens);
    o->micro = o->tokens_per_update ? (int)(o->tokens_per_update / tokens) : 1;
    o->B = (int)rows;
    o->rank = s->rank;
    o->ranks = s->ranks;
    g_dp.rank = s->rank;
    g_dp.ranks = s->ranks;
    g_dp.timeout_ms = s->timeout * 1e3;
    dp_join(s);
    dp_check(s, o);
    if (s->zero && s->ranks > 1) g_zero = {s->rank, s->ranks};
}

static void dp_end(void) {
    if (!g_dp.comm) return;
    dp_call(ncclCommFinalize(g_dp.comm), "leaving the ranks");
    ncclCommDestroy(g_dp.comm);
    g_dp.comm = NULL;
}

// --zero 1's hooks in sections 6 and 7: the ranks' partial sums of the gradient norm in shard
// order, and every rank's moments for a checkpoint, gathered into the gradients' block (free
// between updates: checkpoints are written before a step's backward) and copied to the host Model.
static void zero_gather_norm_partials(GpuModel* gm) {
    Shard sh = gm->shard;
    if (sh.count == 1) return;
    dp_call(ncclAllGather(gm->norm_partial + sh.index * gm->norm_chunks, gm->norm_partial,
                          gm->norm_chunks, ncclDouble, g_dp.comm, 0),
            "the gradient norm's all-gather");
}
static void zero_gather_moments(GpuModel* gm) {
    float* moments[2] = {gm->m, gm->v};
    float* host[2] = {gm->host->adam_m, gm->host->adam_v};
    for (int k = 0; k < 2; k++) {
        dp_call(ncclAllGather(moments[k], gm->grads, gm->shard.n, ncclFloat, g_dp.comm, 0),
                "the AdamW moments' all-gather");
        cudaCheck(cudaMemcpy(host[k], gm->grads, gm->host->num_params * sizeof(float),
                             cudaMemcpyDeviceToHost));
    }
    gm->norm_fresh = 0;
}

// The Engine over the ranks: section 8's, with the batch split and the gradients averaged.
static float dp_engine_forward(void* ctx, const int* inp, const int* tgt, int B, int T) {
    GpuModel* gm = (GpuModel*)ctx;
    // sampling: each rank the same rows, alone
    if (!tgt) return gpu_forward(gm, inp, NULL, B, T);
    int rows = B / g_dp.ranks;
    if (rows * g_dp.ranks != B)
        fatal("internal: a batch of %d rows does not split over %d ranks", B, g_dp.ranks);
    size_t at = (size_t)g_dp.rank * rows * T;               // this rank's rows
    gpu_forward(gm, inp + at, tgt + at, rows, T);
    dp_call(ncclAllReduce(gm->a.loss, gm->a.loss, 1, ncclFloat, ncclAvg, g_dp.comm, 0),
            "the loss's all-reduce");
    cudaCheck(cudaMemcpy(&gm->loss, gm->a.loss, sizeof(float), cudaMemcpyDeviceToHost));
    return gm->loss;
}
static void dp_engine_backward(void* ctx, int B, int T, float dloss) {
    gpu_backward((GpuModel*)ctx, B / g_dp.ranks, T, dloss);
    g_dp.reduced = 0;
}

// The gradients of the ranks' rows averaged, once per update, before the norm and the step: the
// whole block on every rank, or under --zero 1 each rank's shard on that rank.
static void dp_reduce_grads(GpuModel* gm) {
    if (g_dp.reduced) return;
    Shard sh = gm->shard;
    if (sh.count > 1)
        dp_call(ncclReduceScatter(gm->grads, gm->grads + sh.lo, sh.n, ncclFloat, ncclAvg, g_dp.comm,
                                  0),
                "the gradients' reduce-scatter");
    else
        dp_call(ncclAllReduce(gm->grads, gm->grads, gm->host->num_params, ncclFloat, ncclAvg,
                              g_dp.comm, 0),
                "the gradients' all-reduce");
    g_dp.reduced = 1;
    gm->norm_fresh = 0;
}
static double dp_engine_grad_norm(void* ctx) {
    dp_reduce_grads((GpuModel*)ctx);
    return gpu_grad_norm((GpuModel*)ctx);
}
// AdamW: the whole block on every rank alike, or under --zero 1 each rank's shard, then all of them
// to every rank (and the weights' bf16 copy made again where the other shards changed).
static void dp_engine_update(void* ctx, const OptConfig* o, float lr, int t, float grad_scale) {
    GpuModel* gm = (GpuModel*)ctx;
    dp_reduce_grads(gm);
    gpu_engine_update(ctx, o, lr, t, grad_scale);
    Shard sh = gm->shard;
    if (sh.count == 1) return;
    dp_call(ncclAllGather(gm->params + sh.lo, gm->params, sh.n, ncclFloat, g_dp.comm, 0),
            "the parameters' all-gather");
    if (g_bf16.on) bf16_round(g_bf16.w16, gm->params, (long)gm->host->num_params);
}

// The run's engine: over the ranks where they have met, else section 8's for one GPU
static Engine run_engine(GpuModel* gm) {
    if (!g_dp.comm) return gpu_engine(gm);
    return (Engine){gm, dp_engine_forward, gpu_engine_probs, gpu_engine_zero_grad,
                    dp_engine_backward, dp_engine_grad_norm, dp_engine_update, gpu_engine_to_host};
}

// The ranks in the run's header (after run_header), and in its device name
static void dp_describe(char* device, size_t cap) {
    if (!g_dp.comm) return;
    size_t n = strlen(device);
    snprintf(device + n, cap - n, ", %d rank%s over NCCL%s", g_dp.ranks, g_dp.ranks > 1 ? "s" : "",
             g_zero.ranks ? ", ZeRO-1" : "");
}
static void dp_header(const GpuModel* gm) {
    if (!g_dp.comm) return;
    int v;
    ncclCheck(ncclGetVersion(&v));
    size_t P = gm->host->num_params;
    printf("ranks: %d, NCCL %d.%d.%d, -b %d rows each; ", g_dp.ranks, v / 10000, v / 100 % 100,
           v % 100, gm->B);
    if (!g_zero.ranks) {
        printf("the gradients averaged by all-reduce (%.1f MiB per update)\n", P * 4.0 / (1 << 20));
        return;
    }
    Shard sh = gm->shard;
    double saved = (4.0 * P - 2.0 * sh.padded - 2.0 * sh.n) * sizeof(float);
    printf("--zero 1: the gradients reduce-scattered, AdamW on 1/%d of the parameters per rank "
           "(%zu), the "
           "parameters all-gathered; the moments of the other %zu not kept: %.1f MiB less GPU "
           "memory per rank\n",
           g_dp.ranks, sh.n, P - sh.n, saved / (1 << 20));
}
#else
// Built without NCCL (no nccl.h at build time): one GPU, no communicator
// (dp_discover refused more).
static void dp_start(const DpSetup* s, Options* o) { (void)s, (void)o; }
static void dp_end(void) {}
static void zero_gather_norm_partials(GpuModel* gm) { (void)gm; }
static void zero_gather_moments(GpuModel* gm) { (void)gm; }
static Engine run_engine(GpuModel* gm) { return gpu_engine(gm); }
static void dp_describe(char* device, size_t cap) { (void)device, (void)cap; }
static void dp_header(const GpuModel* gm) { (void)gm; }
#endif

// ============================================================================================
// 10. This binary's flags, a run on one GPU or several, main
// ============================================================================================

// Flags of this binary only, taken out of argv before the shared parse_args sees it.
typedef struct {
    int tf32;       // --tf32: TF32 tensor cores in the fast kernels' matmuls and attention
    int bf16;       // --dtype bf16
    int plain;      // --kernels plain: Part I's kernels
} GpuFlags;

static const char* flag_value(int argc, char** argv, int i) {
    if (i + 1 >= argc) fatal("flag %s needs a value", argv[i]);
    return argv[i + 1];
}

static void take_gpu_flags(int* argc, char** argv, GpuFlags* f) {
    int out = 1, seen_dtype = 0;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--tf32") == 0) {
            f->tf32 = (int)parse_int("--tf32", flag_value(*argc, argv, i++), 0, 1);
            continue;
        }
        if (strcmp(argv[i], "--dtype") == 0) {
            const char* v = flag_value(*argc, argv, i++);
            if (strcmp(v, "fp32") && strcmp(v, "bf16")) fatal("--dtype %s: fp32 or bf16", v);
            f->bf16 = strcmp(v, "bf16") == 0;
            seen_dtype = 1;
            continue;
        }
        if (strcmp(argv[i], "--kernels") == 0) {
            const char* v = flag_value(*argc, argv, i++);
            if (strcmp(v, "plain") && strcmp(v, "fast")) fatal("--kernels %s: plain or fast", v);
            f->plain = strcmp(v, "plain") == 0;
            continue;
        }
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage();
            printf("GPU (train_gpt2cu only)\n"
                   "  --kernels plain|fast  which kernels train (default fast). plain: "
                   "train_gpt2.cu's Part I,\n"
                   "              one float32 thread per output element or row, to read, step "
                   "through and\n"
                   "              profile beside the fast ones (one GPU, float32 only)\n"
                   "  --tf32 0|1  TF32 tensor cores in the matmuls and attention's products (head "
                   "sizes 16-64;\n"
                   "              default 1); 0 = full float32\n"
                   "  --dtype fp32|bf16  activations (default fp32). bf16: activations and their "
                   "gradients stored\n"
                   "              in bf16, matmuls on bf16 inputs and a bf16 copy of the weights "
                   "with float32\n"
                   "              accumulation, attention's products on the tensor cores in bf16 "
                   "(head sizes\n"
                   "              16-64), every kernel computing in float32; the residual stream, "
                   "its gradient,\n"
                   "              the logits, softmax and loss, master weights and AdamW moments "
                   "stay float32\n"
                   "              (--tf32 then does not matter). Needs compute capability 8.0 or "
                   "newer\n");
            dp_usage();
            exit(0);
        }
        argv[out++] = argv[i];
    }
    *argc = out;
    if (f->plain && seen_dtype && f->bf16)
        fatal("--dtype bf16 needs the fast kernels: --kernels plain is float32 only");
}

// train_on_cpu of train_gpt2.c with the model on the GPU: the same run (data, initialization on the
// host with the same generator, schedule, printout, log, validation, samples, checkpoints, probes,
// NaN stop) through train_with_engine, the forward, backward and update on Part I's kernels
// (--kernels plain) or Part II's. ctx points to the GpuFlags.
static void train_on_gpu(const Options* o, void* ctx) {
    const GpuFlags* f = (const GpuFlags*)ctx;
    Run r;
    r.o = *o;
    run_plan(&r, 0);
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, g_device));
    char device[300];
    snprintf(device, sizeof(device), "%s, %s", prop.name,
             f->plain ? "plain float32 kernels (Part I)" : g_bf16.on ? "bf16 matmuls"
             : f->tf32 ? "TF32 matmuls" : "float32 matmuls");
    if (!f->plain) dp_describe(device, sizeof(device));
    r.device = device;
    Dataset train_data, val_data;
    Model model;
    run_setup_for_engine(&r, &train_data, &val_data, &model);
    GpuModel gm;
    PlainGpu pg;
    Engine e;
    if (f->plain) {            // one GPU (main refuses several ranks with it)
        plain_model_create(&pg, &model, r.o.B, r.o.T);     // uploads params, m, v
        e = plain_engine(&pg);
    } else {
        gpu_model_create(&gm, &model, r.o.B / r.o.ranks, r.o.T);   // one rank's rows
        e = run_engine(&gm);
        dp_header(&gm);
    }
    train_with_engine(&r, &e);
    if (f->plain) plain_model_free(&pg);
    else gpu_model_free(&gm);
    run_free_engine_setup(&r);
    run_free(&r);
}

#ifndef TRAIN_GPT2CU_NO_MAIN
int main(int argc, char** argv) {
    GpuFlags f = {1, 0, 0};
    DpSetup dp;
    // first: it keeps the whole command line for the ranks to compare
    take_dp_flags(&argc, argv, &dp);
    take_gpu_flags(&argc, argv, &f);
    // rank, world size, job and GPU; rank > 0 prints nothing. Before the other flags, so that a
    // rank refusing one tells the others (dp_fatal)
    g_dp_setup = &dp;
    dp_discover(&dp);
    Options o;
    parse_args(&o, argc, argv);
    if (f.plain && dp.nccl)
        fatal("--kernels plain trains on one GPU without NCCL: ranks and --zero need the fast "
              "kernels");
    gpu_init(f.tf32);
    gpu_set_dtype(f.bf16);
    // several ranks meet and compare flags and files (section 9)
    dp_start(&dp, &o);
    free(dp.flags);
    if (o.probe.coord_check) coord_check(&o, train_on_gpu, &f);  // every width, then the table
    else train_on_gpu(&o, &f);
    dp_end();
    cublasCheck(cublasDestroy(g_blas));
    return 0;
}
#endif
