/*
train_gpt2.cu: the trainer of train_gpt2.c on one NVIDIA GPU, in one file.

    make train_gpt2cu && ./train_gpt2cu -g 1.0 -e 1e-12     # gamma-init, rate 1, eps 1e-12 [SmallInit]

Everything that is not arithmetic on the model is SHARED with the CPU trainer, not copied: this
file #includes train_gpt2.c (with TRAIN_GPT2_NO_MAIN) and uses its flags (parse_args, same flags
plus --tf32), Config, tensor table, data loading, decoder, the PyTorch-compatible generator and
every initializer (the model is initialized ON THE HOST with model_build + model_init and then
copied to the GPU, so the same seed gives the same initial weights as ./train_gpt2), the learning
rate schedule lr_at, checkpoint_save/checkpoint_load (on host copies of the weights and moments,
so a checkpoint written by one trainer resumes in the other) and the JSON-lines log.

New here are only the device parts:
  1. CUDA utilities: error checks, the no-GPU message, block reductions
  2. layers: one kernel (or two) per layer, each forward followed by its backward, the same
     formulas as section 4 of train_gpt2.c; matmuls through cuBLAS
  3. the model on the device: parameter/gradient/moment blocks (one cudaMalloc each, the host
     block's layout), activations mirroring Acts, gpu_forward / gpu_backward
  4. AdamW, the global gradient norm and clipping on the device
  5. evaluation, sampling, host <-> device copies, main (the CPU main's loop, step for step)
Every kernel is deterministic (no atomics): the same run gives the same losses bit for bit.
The kernels are written to be obviously correct first; doc/cuda.md says what is slow and why.
Status: every kernel runs in `make test` on the CPU runtime for CUDA (dev/cuda_cpu), which executes
this file unchanged but for its kernel launches; no GPU has run it yet (doc/cuda.md).
*/
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cstddef>

// ============================================================================================
// 0. Compiling train_gpt2.c as C++
// ============================================================================================
// nvcc compiles this file as C++, where the void* returned by xmalloc/xcalloc does not convert
// to float* on its own. AnyPtr carries it and converts to whatever pointer it is assigned to;
// the two macros wrap every call (train_gpt2.c names the functions in parentheses, which the
// macros do not touch). The nullptr_t constructor lets `cond ? xmalloc(n) : NULL` compile.
struct AnyPtr {
    void* p;
    explicit AnyPtr(void* q) : p(q) {}
    AnyPtr(std::nullptr_t) : p(nullptr) {}
    template <typename T> operator T*() const { return static_cast<T*>(p); }
};
#define xmalloc(n) (AnyPtr((xmalloc)(n)))
#define xcalloc(n, s) (AnyPtr((xcalloc)(n, s)))

#undef _GNU_SOURCE              // g++ predefines it; train_gpt2.c defines it again
#define TRAIN_GPT2_NO_MAIN
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"   // C's `Config c = {0};`
#include "train_gpt2.c"
#pragma GCC diagnostic pop

// ============================================================================================
// 1. CUDA utilities
// ============================================================================================

#define cudaCheck(call) do { cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) fatal("CUDA error at %s:%d: %s", __FILE__, __LINE__, cudaGetErrorString(e_)); } while (0)
#define cublasCheck(call) do { cublasStatus_t s_ = (call); \
    if (s_ != CUBLAS_STATUS_SUCCESS) \
        fatal("cuBLAS error at %s:%d: %s", __FILE__, __LINE__, cublasGetStatusString(s_)); } while (0)

// After every kernel launch: LAUNCH_CHECK(kernel_name). A bad launch configuration is reported where
// it happened. A fault inside a kernel (an illegal address, say) surfaces only at the next call that
// waits for the GPU, far from its cause; the debug build (make train_gpt2cu DEBUG=1, which defines
// CUDA_DEBUG) waits after every launch, so the message names the kernel, file and line that failed.
#ifndef CUDA_DEBUG
#define CUDA_DEBUG 0
#endif
#define LAUNCH_CHECK(kernel) launch_check(#kernel, __FILE__, __LINE__)
static void launch_check(const char* kernel, const char* file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && CUDA_DEBUG) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) fatal("CUDA error in kernel %s (%s:%d): %s", kernel, file, line, cudaGetErrorString(e));
}

// NULL when a GPU is usable, otherwise why not (for the one-line message of both binaries).
static const char* gpu_unavailable(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return cudaGetErrorString(e);
    if (n == 0) return "cudaGetDeviceCount reports 0 devices";
    return NULL;
}

static int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }

static float* dmalloc(size_t nfloats) {
    void* p = NULL;
    cudaCheck(cudaMalloc(&p, (nfloats ? nfloats : 1) * sizeof(float)));
    return (float*)p;
}

static int* dmalloc_int(size_t n) {
    void* p = NULL;
    cudaCheck(cudaMalloc(&p, (n ? n : 1) * sizeof(int)));
    return (int*)p;
}

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
__device__ float block_max(float v) {
    __shared__ float buf[32];
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) buf[wid] = v;
    __syncthreads();
    v = lane < nw ? buf[lane] : -FLT_MAX;
    return warp_max(v);
}

#define EW_THREADS 256          // elementwise kernels
#define ROW_THREADS 128         // row kernels (attention, softmax): one block per row
#define ROWS_PER_CHUNK 256      // deterministic column sums: rows summed per partial

// ============================================================================================
// 2. Layers. Same shapes and formulas as section 4 of train_gpt2.c; backward kernels ACCUMULATE
//    (+=) into parameter gradients like the CPU ones. Pointers are device pointers.
// ============================================================================================

// ---- the matrix multiply, through cuBLAS ------------------------------------------------------
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

__global__ void add_bias_kernel(float* out, const float* bias, long N, int OC) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] += bias[i % OC];
}

static void gpu_matmul_forward(float* out, const float* inp, const float* W, const float* bias,
                               int BT, int C, int OC) {
    const float one = 1.0f, zero = 0.0f;
    cublasCheck(cublasSgemm(g_blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, BT, C, &one, W, C, inp, C, &zero, out, OC));
    if (bias) {
        add_bias_kernel<<<ceil_div((long)BT * OC, EW_THREADS), EW_THREADS>>>(out, bias, (long)BT * OC, OC);
        LAUNCH_CHECK(add_bias_kernel);
    }
}

// Deterministic column sums without atomics: partial[chunk, o] sums ROWS_PER_CHUNK rows in order,
// then one thread per column adds the chunks in order. Used for bias and norm-weight gradients.
__global__ void colsum_partial_kernel(float* partial, const float* x, int N, int OC) {
    int o = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (o >= OC) return;
    int r1 = min(N, (chunk + 1) * ROWS_PER_CHUNK);
    float s = 0.0f;
    for (int r = chunk * ROWS_PER_CHUNK; r < r1; r++) s += x[(long)r * OC + o];
    partial[(long)chunk * OC + o] = s;
}

__global__ void colsum_finish_kernel(float* dst, const float* partial, int nchunks, int OC) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) return;
    float s = 0.0f;
    for (int ch = 0; ch < nchunks; ch++) s += partial[(long)ch * OC + o];
    dst[o] += s;
}

// dst[o] += sum over the N rows of x[N,OC]; scratch holds ceil(N/ROWS_PER_CHUNK) x OC floats
static void gpu_colsum_add(float* dst, const float* x, int N, int OC, float* scratch) {
    int nchunks = ceil_div(N, ROWS_PER_CHUNK);
    colsum_partial_kernel<<<dim3(ceil_div(OC, EW_THREADS), nchunks), EW_THREADS>>>(scratch, x, N, OC);
    LAUNCH_CHECK(colsum_partial_kernel);
    colsum_finish_kernel<<<ceil_div(OC, EW_THREADS), EW_THREADS>>>(dst, scratch, nchunks, OC);
    LAUNCH_CHECK(colsum_finish_kernel);
}

static void gpu_matmul_backward(float* dinp, float* dW, float* dbias, const float* dout, const float* inp,
                                const float* W, int BT, int C, int OC, float* scratch) {
    const float one = 1.0f;
    if (dinp) cublasCheck(cublasSgemm(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, C, BT, OC, &one, W, C, dout, OC, &one, dinp, C));
    cublasCheck(cublasSgemm(g_blas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, BT, &one, inp, C, dout, OC, &one, dW, C));
    if (dbias) gpu_colsum_add(dbias, dout, BT, OC, scratch);
}

// ---- embeddings -----------------------------------------------------------------------------
// out[b,t,:] = wte[tok[b,t],:] (+ wpe[t,:] for learned positions)
__global__ void embedding_forward_kernel(float* out, const int* tok, const float* wte, const float* wpe,
                                         int BT, int T, int C) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)BT * C) return;
    int bt = (int)(i / C), c = (int)(i % C);
    out[i] = wte[(long)tok[bt] * C + c] + (wpe ? wpe[(long)(bt % T) * C + c] : 0.0f);
}

// dwte: rows of wte repeat (the same token twice), so the host sorts the positions by token
// (a stable counting sort, see gpu_backward): bucket u holds the positions pos[start[u]..start[u+1])
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

// ---- normalization: [SmallInit eq. 1] LayerNorm and [SmallInit eq. 2] RMSNorm ---------------------------
// LayerNorm(h) = w * (h - mu) / sqrt(sigma^2 + eps) + b      [SmallInit eq. 1]
// RMSNorm(h)   = w * h / sqrt(mean(h^2) + eps)               [SmallInit eq. 2]
// eps INSIDE the square root, as on the CPU (see norm_forward there for why it matters).
// One warp per row; mean[] (LayerNorm) and rstd[] are kept for the backward pass.
__global__ void norm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* w,
                                    const float* b, int rms, float eps, int N, int C) {
    int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;             // the whole warp leaves together
    const float* x = inp + (long)n * C;
    float m = 0.0f;
    if (!rms) {
        for (int c = lane; c < C; c += 32) m += x[c];
        m = warp_sum(m) / C;
    }
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
    v = warp_sum(v) / C;
    float s = 1.0f / sqrtf(v + eps);
    float* y = out + (long)n * C;
    for (int c = lane; c < C; c += 32) y[c] = (x[c] - m) * s * w[c] + (b ? b[c] : 0.0f);
    if (lane == 0) {
        if (mean) mean[n] = m;
        rstd[n] = s;
    }
}

// With xhat = (x - mu) * rstd and g = dout * w:
//   dx += rstd * (g - mean(g) - xhat * mean(g * xhat))     LayerNorm
//   dx += rstd * (g - xhat * mean(g * xhat))               RMSNorm
// One warp per row for dx; dw, db (sums over rows) in a second, column-parallel kernel pair.
__global__ void norm_backward_kernel(float* dinp, const float* dout, const float* inp, const float* w,
                                     const float* mean, const float* rstd, int rms, int N, int C) {
    int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;
    const float* x = inp + (long)n * C;
    const float* d = dout + (long)n * C;
    float m = rms ? 0.0f : mean[n], s = rstd[n];
    float g_mean = 0.0f, gx_mean = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float g = d[c] * w[c];
        g_mean += g;
        gx_mean += g * (x[c] - m) * s;
    }
    g_mean = rms ? 0.0f : warp_sum(g_mean) / C;
    gx_mean = warp_sum(gx_mean) / C;
    float* dx = dinp + (long)n * C;
    for (int c = lane; c < C; c += 32) dx[c] += s * (d[c] * w[c] - g_mean - (x[c] - m) * s * gx_mean);
}

// partial sums over ROWS_PER_CHUNK rows of dout * xhat (-> dw) and dout (-> db)
__global__ void norm_backward_params_partial_kernel(float* pdw, float* pdb, const float* dout, const float* inp,
                                                    const float* mean, const float* rstd, int rms, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (c >= C) return;
    int r1 = min(N, (chunk + 1) * ROWS_PER_CHUNK);
    float sw = 0.0f, sb = 0.0f;
    for (int r = chunk * ROWS_PER_CHUNK; r < r1; r++) {
        float m = rms ? 0.0f : mean[r], s = rstd[r];
        float dv = dout[(long)r * C + c];
        sw += dv * (inp[(long)r * C + c] - m) * s;
        sb += dv;
    }
    pdw[(long)chunk * C + c] = sw;
    if (pdb) pdb[(long)chunk * C + c] = sb;
}

static void gpu_norm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                             const float* b, int rms, float eps, int N, int C) {
    norm_forward_kernel<<<ceil_div(N, ROW_THREADS / 32), ROW_THREADS>>>(out, mean, rstd, inp, w, b, rms, eps, N, C);
    LAUNCH_CHECK(norm_forward_kernel);
}

// scratch: 2 x ceil(N/ROWS_PER_CHUNK) x C floats
static void gpu_norm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                              const float* w, const float* mean, const float* rstd, int rms, int N, int C,
                              float* scratch) {
    norm_backward_kernel<<<ceil_div(N, ROW_THREADS / 32), ROW_THREADS>>>(dinp, dout, inp, w, mean, rstd, rms, N, C);
    LAUNCH_CHECK(norm_backward_kernel);
    int nchunks = ceil_div(N, ROWS_PER_CHUNK);
    float *pdw = scratch, *pdb = db ? scratch + (long)nchunks * C : NULL;
    norm_backward_params_partial_kernel<<<dim3(ceil_div(C, EW_THREADS), nchunks), EW_THREADS>>>(
        pdw, pdb, dout, inp, mean, rstd, rms, N, C);
    LAUNCH_CHECK(norm_backward_params_partial_kernel);
    colsum_finish_kernel<<<ceil_div(C, EW_THREADS), EW_THREADS>>>(dw, pdw, nchunks, C);
    LAUNCH_CHECK(colsum_finish_kernel);
    if (db) {
        colsum_finish_kernel<<<ceil_div(C, EW_THREADS), EW_THREADS>>>(db, pdb, nchunks, C);
        LAUNCH_CHECK(colsum_finish_kernel);
    }
}

// ---- rotary position embedding (llama preset) --------------------------------------------------
// Pair (2j, 2j+1) of each head vector at position t turns by t * theta^(-2j/hd); the angle in
// double precision as on the CPU. sign = +1 forward, -1 backward (the inverse rotation, applied
// to the gradient in place). One thread per pair.
__global__ void rope_kernel(float* x, int BT, int T, int nh, int hd, float theta, float sign) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    int half = hd / 2;
    if (i >= (long)BT * nh * half) return;
    int j = (int)(i % half);
    long row = i / half;                       // (bt, h)
    int t = (int)((row / nh) % T);
    float* v = x + row * hd;
    double ang = t * pow((double)theta, -2.0 * j / hd);
    float cs = (float)cos(ang), sn = sign * (float)sin(ang);
    float a = v[2 * j], b = v[2 * j + 1];
    v[2 * j] = a * cs - b * sn;
    v[2 * j + 1] = a * sn + b * cs;
}

static void gpu_rope(float* x, int BT, int T, int nh, int hd, float theta, float sign) {
    rope_kernel<<<ceil_div((long)BT * nh * (hd / 2), EW_THREADS), EW_THREADS>>>(x, BT, T, nh, hd, theta, sign);
    LAUNCH_CHECK(rope_kernel);
}

// ---- causal self-attention with grouped KV heads -------------------------------------------
// q [BT, H*hd], k and v [BT, KVH*hd]; head h reads kv head h / (H/KVH). att [B,H,T,T] keeps the
// probabilities (the attention-sink probe of [SmallInit eq. 5] reads them).
//   A = softmax(scale * q k^T + causal mask),  y = A v
// One block per query row (b, h, t): thread s computes score s, the block finds max and sum,
// then thread i computes y[i] summing over s in order.
__global__ void attention_forward_kernel(float* y, float* att, const float* q, const float* k, const float* v,
                                         int T, int H, int KVH, int hd, float scale) {
    int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int kh = h / (H / KVH);
    const float* qt = q + ((long)(b * T + t) * H + h) * hd;
    float* a = att + (((long)b * H + h) * T + t) * T;
    float mx = -FLT_MAX;
    for (int s = threadIdx.x; s <= t; s += blockDim.x) {
        const float* ks = k + ((long)(b * T + s) * KVH + kh) * hd;
        float dot = 0.0f;
        for (int i = 0; i < hd; i++) dot += qt[i] * ks[i];
        a[s] = dot * scale;
        mx = fmaxf(mx, a[s]);
    }
    mx = block_max(mx);
    float sum = 0.0f;
    for (int s = threadIdx.x; s <= t; s += blockDim.x) {
        a[s] = expf(a[s] - mx);         // each thread rereads only the entries it wrote
        sum += a[s];
    }
    sum = block_sum(sum);
    for (int s = threadIdx.x; s < T; s += blockDim.x) a[s] = s <= t ? a[s] / sum : 0.0f;
    __syncthreads();                    // the row of a[] is complete and visible to the block
    float* yt = y + ((long)(b * T + t) * H + h) * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s <= t; s++) acc += a[s] * v[((long)(b * T + s) * KVH + kh) * hd + i];
        yt[i] = acc;
    }
}

// With P = scale * q k^T and A = softmax(P):
//   dA[t,s] = dy_t . v_s ;  dP[t,s] = A[t,s] (dA[t,s] - sum_s' A dA) * scale
//   dq_t = sum_s dP[t,s] k_s ;  dk_s = sum_{h in group, t >= s} dP[t,s] q_t ;  dv_s = sum A[t,s] dy_t
// Two kernels, no atomics: the query kernel (one block per row (b,h,t)) writes dP into datt and
// dq; the key kernel (one block per key row (b,kv head,s)) sums the columns of dP and A over the
// heads of its group and the queries t >= s, in the CPU's order (head, then t).
__global__ void attention_backward_query_kernel(float* dq, float* datt, const float* dy, const float* att,
                                                const float* k, const float* v, int T, int H, int KVH, int hd,
                                                float scale) {
    int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int kh = h / (H / KVH);
    const float* a = att + (((long)b * H + h) * T + t) * T;
    float* da = datt + (((long)b * H + h) * T + t) * T;
    const float* dyt = dy + ((long)(b * T + t) * H + h) * hd;
    float adot = 0.0f;
    for (int s = threadIdx.x; s <= t; s += blockDim.x) {
        const float* vs = v + ((long)(b * T + s) * KVH + kh) * hd;
        float d = 0.0f;
        for (int i = 0; i < hd; i++) d += dyt[i] * vs[i];
        da[s] = d;
        adot += a[s] * d;
    }
    adot = block_sum(adot);
    for (int s = threadIdx.x; s <= t; s += blockDim.x) da[s] = a[s] * (da[s] - adot) * scale;   // dP
    __syncthreads();
    float* dqt = dq + ((long)(b * T + t) * H + h) * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s <= t; s++) acc += da[s] * k[((long)(b * T + s) * KVH + kh) * hd + i];
        dqt[i] = acc;
    }
}

__global__ void attention_backward_kv_kernel(float* dk, float* dv, const float* dP, const float* att,
                                             const float* q, const float* dy, int T, int H, int KVH, int hd) {
    int s = blockIdx.x, kh = blockIdx.y, b = blockIdx.z;
    int group = H / KVH;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float gk = 0.0f, gv = 0.0f;
        for (int h = kh * group; h < (kh + 1) * group; h++)
            for (int t = s; t < T; t++) {
                long r = (((long)b * H + h) * T + t) * T + s;
                long qi = ((long)(b * T + t) * H + h) * hd + i;
                gk += dP[r] * q[qi];
                gv += att[r] * dy[qi];
            }
        dk[((long)(b * T + s) * KVH + kh) * hd + i] = gk;
        dv[((long)(b * T + s) * KVH + kh) * hd + i] = gv;
    }
}

// dq, dk, dv are overwritten (the CPU zeroes them and accumulates: the same values)
static void gpu_attention_forward(float* y, float* att, const float* q, const float* k, const float* v,
                                  int B, int T, int H, int KVH, int hd, float scale) {
    attention_forward_kernel<<<dim3(T, H, B), ROW_THREADS>>>(y, att, q, k, v, T, H, KVH, hd, scale);
    LAUNCH_CHECK(attention_forward_kernel);
}

static void gpu_attention_backward(float* dq, float* dk, float* dv, float* datt, const float* dy,
                                   const float* att, const float* q, const float* k, const float* v,
                                   int B, int T, int H, int KVH, int hd, float scale) {
    attention_backward_query_kernel<<<dim3(T, H, B), ROW_THREADS>>>(dq, datt, dy, att, k, v, T, H, KVH, hd, scale);
    LAUNCH_CHECK(attention_backward_query_kernel);
    attention_backward_kv_kernel<<<dim3(T, KVH, B), 64>>>(dk, dv, datt, att, q, dy, T, H, KVH, hd);
    LAUNCH_CHECK(attention_backward_kv_kernel);
}

// ---- the attention gate: [SmallInit eqs. 3-4] -------------------------------------------------
// GAttn(x) = Concat(g_1(x) * head_1, ..., g_H(x) * head_H) W_O,  g_h(x) = sigmoid(x W_h^g)  (3),(4)
// gate [BT,H] holds x W^g (+ b^g) on entry and is overwritten by g = sigmoid(gpre). One thread
// per (bt, h).
__global__ void gate_forward_kernel(float* out, float* gate, const float* y, int BT, int H, int hd) {
    long r = (long)blockIdx.x * blockDim.x + threadIdx.x;     // r = bt * H + h
    if (r >= (long)BT * H) return;
    float g = sigmoid_of(gate[r]);
    gate[r] = g;
    for (int i = 0; i < hd; i++) out[r * hd + i] = g * y[r * hd + i];
}

// dy = g * dout ;  dgpre = (sum_i dout_i y_i) * g (1 - g)
__global__ void gate_backward_kernel(float* dy, float* dgpre, const float* dout, const float* y, const float* gate,
                                     int BT, int H, int hd) {
    long r = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= (long)BT * H) return;
    float g = gate[r], s = 0.0f;
    for (int i = 0; i < hd; i++) {
        s += dout[r * hd + i] * y[r * hd + i];
        dy[r * hd + i] = g * dout[r * hd + i];
    }
    dgpre[r] = s * g * (1.0f - g);
}

// ---- MLP activations -----------------------------------------------------------------------------
// GELU (tanh form) and SwiGLU: the CPU file's per-element functions (HOSTDEV), one thread per element
__global__ void gelu_forward_kernel(float* out, const float* inp, long N) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = gelu_of(inp[i]);
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, long N) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) dinp[i] = gelu_grad_of(inp[i]) * dout[i];
}

__global__ void swiglu_forward_kernel(float* out, const float* a, const float* u, long N) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = swiglu_of(a[i], u[i]);
}

__global__ void swiglu_backward_kernel(float* da, float* du, const float* a, const float* u, const float* dout, long N) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) swiglu_grad_of(a[i], u[i], dout[i], &da[i], &du[i]);
}

// ---- residual, scaling ---------------------------------------------------------------------------
__global__ void residual_forward_kernel(float* out, const float* a, const float* b, long N) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = a[i] + b[i];
}

__global__ void scale_kernel(float* x, float s, long N) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) x[i] *= s;
}

// ---- softmax + cross-entropy, fused ------------------------------------------------------------
// One block per row: logits [BT,V] are replaced by probabilities and losses[bt] = -log p[target]
// = log(sum) - (z_t - max), exact even where p underflows. The sum is in double, as on the CPU.
// With targets NULL only the probabilities are computed (sampling).
__global__ void softmax_forward_kernel(float* logits, float* losses, const int* targets, int V) {
    int bt = blockIdx.x;
    float* z = logits + (long)bt * V;
    // thread 0 reads z[target] before the block_max barrier; z is overwritten only after it
    float zt = (targets && threadIdx.x == 0) ? z[targets[bt]] : 0.0f;
    float mx = -FLT_MAX;
    for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, z[i]);
    mx = block_max(mx);
    double sum = 0.0;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        z[i] = expf(z[i] - mx);
        sum += z[i];
    }
    sum = block_sum(sum);
    float inv = (float)(1.0 / sum);
    for (int i = threadIdx.x; i < V; i += blockDim.x) z[i] *= inv;
    if (targets && threadIdx.x == 0) losses[bt] = (float)(log(sum) - (zt - mx));
}

// mean loss over BT rows: dlogits = (p - onehot(target)) / BT, in place over p; inv = 1/BT
__global__ void crossentropy_softmax_backward_kernel(float* probs, const int* targets, int BT, int V, float inv) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)BT * V) return;
    int bt = (int)(i / V), c = (int)(i % V);
    float p = probs[i] * inv;
    if (c == targets[bt]) p -= inv;
    probs[i] = p;
}

// ============================================================================================
// 3. The model on the device
// ============================================================================================

// Device mirrors of Acts (train_gpt2.c section 3), the same shapes, plus what the kernels need.
typedef struct {
    float *res, *resmid, *ln1, *ln1_mean, *ln1_rstd, *q, *k, *v, *att, *yatt, *gate, *ygated;
    float *ln2, *ln2_mean, *ln2_rstd, *up, *gpre, *hact, *lnf, *lnf_mean, *lnf_rstd, *logits, *losses;
    float *dres, *dln, *dq, *dk, *dv, *datt, *dy, *dy2, *dgate, *dup, *dgpre, *dh, *tmp;
    float* scratch;                       // partial column sums (bias and norm-weight gradients)
    int *tokens, *targets;                // B x T
    int *utok, *ustart, *upos;            // tokens bucketed for the wte gradient
} GpuActs;

typedef struct {
    Model* host;                          // config, tensor table, host copies of params, m, v
    float *params, *grads, *m, *v;        // device blocks, the host block's layout
    float *p[NUM_KINDS], *g[NUM_KINDS];
    int B, T;                             // activation buffers are sized for B x T
    GpuActs a;
    int *tokens_h, *targets_h;            // host copies of the last forward's batch
    int *utok_h, *ustart_h, *upos_h;      // host side of the token buckets
    float* losses_h;
    float* probs_h;                       // one row of the softmax, for sampling
    double *norm_partial, *norm_partial_h;
    size_t norm_chunks;
    float loss;
} GpuModel;

// Block l's slice of a parameter kind and of its gradient on the device (param_of, grad_of of train_gpt2.c)
static float* gpu_param_of(const GpuModel* gm, int kind, int l) {
    return gm->p[kind] ? gm->p[kind] + (size_t)l * gm->host->kind_numel[kind] : NULL;
}
static float* gpu_grad_of(const GpuModel* gm, int kind, int l) {
    return gm->g[kind] ? gm->g[kind] + (size_t)l * gm->host->kind_numel[kind] : NULL;
}

#define NORM_CHUNK 65536                  // elements per partial of the gradient norm

static void gpu_upload_state(GpuModel* gm) {       // host params, m, v -> device
    size_t bytes = gm->host->num_params * sizeof(float);
    cudaCheck(cudaMemcpy(gm->params, gm->host->params, bytes, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(gm->m, gm->host->m, bytes, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(gm->v, gm->host->v, bytes, cudaMemcpyHostToDevice));
}

static void gpu_download_state(GpuModel* gm) {     // device params, m, v -> host (checkpoints)
    size_t bytes = gm->host->num_params * sizeof(float);
    cudaCheck(cudaMemcpy(gm->host->params, gm->params, bytes, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(gm->host->m, gm->m, bytes, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(gm->host->v, gm->v, bytes, cudaMemcpyDeviceToHost));
}

// Allocates the device model for batches up to B x T and uploads the host's params, m and v.
// The host model must be built (model_build) and initialized or loaded.
// The device's share of the memory estimate (section 12's memory_check does the host's): the four
// parameter-sized blocks and the activations, refused before the first cudaMalloc when the device
// has less free. The activations are the host's list (acts_bytes); the device adds a few per-row
// scratch buffers, a small fraction, hence the 5% margin.
static void gpu_memory_check(const Model* host, int B, int T) {
    size_t free_bytes = 0, total = 0, MiB = 1 << 20;
    cudaCheck(cudaMemGetInfo(&free_bytes, &total));
    double need = 1.05 * (4.0 * host->num_params * sizeof(float) + (double)acts_bytes(&host->cfg, B, T));
    printf("GPU memory: about %.1f MiB of %zu MiB free\n", need / MiB, free_bytes / MiB);
    if (need > (double)free_bytes)
        fatal("the run needs about %.0f MiB of GPU memory but %zu MiB are free: use a smaller model, -b or -t",
              need / MiB, free_bytes / MiB);
}

static void gpu_model_create(GpuModel* gm, Model* host, int B, int T) {
    gpu_memory_check(host, B, T);
    memset(gm, 0, sizeof(*gm));
    gm->host = host;
    gm->B = B;
    gm->T = T;
    size_t P = host->num_params;
    gm->params = dmalloc(P);
    gm->grads = dmalloc(P);
    gm->m = dmalloc(P);
    gm->v = dmalloc(P);
    for (int kd = 0; kd < NUM_KINDS; kd++) {
        gm->p[kd] = host->p[kd] ? gm->params + (host->p[kd] - host->params) : NULL;
        gm->g[kd] = host->g[kd] ? gm->grads + (host->g[kd] - host->grads) : NULL;
    }
    gpu_upload_state(gm);
    cudaCheck(cudaMemset(gm->grads, 0, P * sizeof(float)));

    const Config* c = &host->cfg;
    long BT = (long)B * T, L = c->L, C = c->C, hd = C / c->H;
    long qd = c->H * hd, kvd = c->KVH * hd, F = c->F, H = c->H, V = c->V;
    GpuActs* a = &gm->a;
    a->res = dmalloc((L + 1) * BT * C);
    a->resmid = dmalloc(L * BT * C);
    a->ln1 = dmalloc(L * BT * C);
    a->ln1_mean = dmalloc(L * BT);
    a->ln1_rstd = dmalloc(L * BT);
    a->q = dmalloc(L * BT * qd);
    a->k = dmalloc(L * BT * kvd);
    a->v = dmalloc(L * BT * kvd);
    a->att = dmalloc(L * B * H * T * T);
    a->yatt = dmalloc(L * BT * qd);
    a->gate = dmalloc(L * BT * H);
    a->ygated = c->gate ? dmalloc(L * BT * qd) : a->yatt;
    a->ln2 = dmalloc(L * BT * C);
    a->ln2_mean = dmalloc(L * BT);
    a->ln2_rstd = dmalloc(L * BT);
    a->up = dmalloc(L * BT * F);
    a->gpre = c->swiglu ? dmalloc(L * BT * F) : NULL;
    a->hact = dmalloc(L * BT * F);
    a->lnf = dmalloc(BT * C);
    a->lnf_mean = dmalloc(BT);
    a->lnf_rstd = dmalloc(BT);
    a->logits = dmalloc(BT * V);
    a->losses = dmalloc(BT);
    a->dres = dmalloc(BT * C);
    a->dln = dmalloc(BT * C);
    a->dq = dmalloc(BT * qd);
    a->dk = dmalloc(BT * kvd);
    a->dv = dmalloc(BT * kvd);
    a->datt = dmalloc(B * H * T * T);
    a->dy = dmalloc(BT * qd);
    a->dy2 = dmalloc(BT * qd);
    a->dgate = dmalloc(BT * H);
    a->dup = dmalloc(BT * F);
    a->dgpre = dmalloc(BT * F);
    a->dh = dmalloc(BT * F);
    a->tmp = dmalloc(BT * (C > qd ? C : qd));
    long widest = C > F ? C : F;
    if (qd > widest) widest = qd;
    a->scratch = dmalloc(2L * ceil_div(BT, ROWS_PER_CHUNK) * widest);
    a->tokens = dmalloc_int(BT);
    a->targets = dmalloc_int(BT);
    a->utok = dmalloc_int(BT);
    a->ustart = dmalloc_int(BT + 1);
    a->upos = dmalloc_int(BT);
    gm->tokens_h = xmalloc(BT * sizeof(int));
    gm->targets_h = xmalloc(BT * sizeof(int));
    gm->utok_h = xmalloc(BT * sizeof(int));
    gm->ustart_h = xmalloc((BT + 1) * sizeof(int));
    gm->upos_h = xmalloc(BT * sizeof(int));
    gm->losses_h = xmalloc(BT * sizeof(float));
    gm->probs_h = xmalloc((size_t)c->V * sizeof(float));
    gm->norm_chunks = (P + NORM_CHUNK - 1) / NORM_CHUNK;
    void* np = NULL;
    cudaCheck(cudaMalloc(&np, gm->norm_chunks * sizeof(double)));
    gm->norm_partial = (double*)np;
    gm->norm_partial_h = xmalloc(gm->norm_chunks * sizeof(double));
}

static void gpu_model_free(GpuModel* gm) {
    GpuActs* a = &gm->a;
    float* bufs[] = {a->res, a->resmid, a->ln1, a->ln1_mean, a->ln1_rstd, a->q, a->k, a->v, a->att, a->yatt,
                     a->gate, a->ln2, a->ln2_mean, a->ln2_rstd, a->up, a->gpre, a->hact, a->lnf, a->lnf_mean,
                     a->lnf_rstd, a->logits, a->losses, a->dres, a->dln, a->dq, a->dk, a->dv, a->datt, a->dy,
                     a->dy2, a->dgate, a->dup, a->dgpre, a->dh, a->tmp, a->scratch,
                     gm->params, gm->grads, gm->m, gm->v};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) cudaCheck(cudaFree(bufs[i]));
    if (a->ygated != a->yatt) cudaCheck(cudaFree(a->ygated));
    int* ibufs[] = {a->tokens, a->targets, a->utok, a->ustart, a->upos};
    for (size_t i = 0; i < sizeof(ibufs) / sizeof(ibufs[0]); i++) cudaCheck(cudaFree(ibufs[i]));
    cudaCheck(cudaFree(gm->norm_partial));
    free(gm->tokens_h); free(gm->targets_h); free(gm->utok_h); free(gm->ustart_h); free(gm->upos_h);
    free(gm->losses_h); free(gm->probs_h); free(gm->norm_partial_h);
    memset(gm, 0, sizeof(*gm));
}

#define EW_GRID(n) ceil_div((long)(n), EW_THREADS), EW_THREADS

// Forward pass over B x T tokens (host arrays; B, T no larger than the buffers): model_forward of
// train_gpt2.c, layer for layer. With targets, returns the mean cross-entropy (summed on the host
// in double, in the CPU's order) and keeps the probabilities for the backward pass; without, the
// logits buffer holds next-token probabilities and the return value is 0.
static float gpu_forward(GpuModel* gm, const int* tokens, const int* targets, int B, int T) {
    const Config* c = &gm->host->cfg;
    GpuActs* a = &gm->a;
    int BT = B * T, C = c->C, H = c->H, KVH = c->KVH, hd = C / H, F = c->F;
    int qd = H * hd, kvd = KVH * hd;
    if (B > gm->B || T > gm->T) fatal("internal: forward with B=%d T=%d exceeds buffers %dx%d", B, T, gm->B, gm->T);
    for (int i = 0; i < BT; i++) {
        if (tokens[i] < 0 || tokens[i] >= c->V) fatal("token id %d out of range [0, %d)", tokens[i], c->V);
        gm->tokens_h[i] = tokens[i];
    }
    cudaCheck(cudaMemcpy(a->tokens, tokens, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice));
    if (targets) {
        for (int i = 0; i < BT; i++) {
            if (targets[i] < 0 || targets[i] >= c->V) fatal("target id %d out of range [0, %d)", targets[i], c->V);
            gm->targets_h[i] = targets[i];
        }
        cudaCheck(cudaMemcpy(a->targets, targets, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice));
    }
    embedding_forward_kernel<<<EW_GRID((long)BT * C)>>>(a->res, a->tokens, gm->p[K_WTE], gm->p[K_WPE], BT, T, C);
    LAUNCH_CHECK(embedding_forward_kernel);
    long s_c = (long)gm->B * gm->T * C;   // the stride of one layer's slice of res
    for (int l = 0; l < c->L; l++) {
        LayerActs la;
        LAYER_ACTS(la, a, c, l, (long)gm->B * gm->T, gm->T);
        // attention sublayer: xmid = x + Attn(Norm1(x))
        gpu_norm_forward(la.ln1, la.ln1_mean, la.ln1_rstd, la.x, gpu_param_of(gm, K_LN1W, l),
                         gpu_param_of(gm, K_LN1B, l), c->rmsnorm, c->eps, BT, C);
        gpu_matmul_forward(la.q, la.ln1, gpu_param_of(gm, K_WQ, l), gpu_param_of(gm, K_BQ, l), BT, C, qd);
        gpu_matmul_forward(la.k, la.ln1, gpu_param_of(gm, K_WK, l), gpu_param_of(gm, K_BK, l), BT, C, kvd);
        gpu_matmul_forward(la.v, la.ln1, gpu_param_of(gm, K_WV, l), gpu_param_of(gm, K_BV, l), BT, C, kvd);
        if (c->rope) {
            gpu_rope(la.q, BT, T, H, hd, c->rope_theta, 1.0f);
            gpu_rope(la.k, BT, T, KVH, hd, c->rope_theta, 1.0f);
        }
        gpu_attention_forward(la.yatt, la.att, la.q, la.k, la.v, B, T, H, KVH, hd, c->attn_scale);
        if (c->gate) {
            gpu_matmul_forward(la.gate, la.ln1, gpu_param_of(gm, K_WG, l), gpu_param_of(gm, K_BG, l), BT, C, H);
            gate_forward_kernel<<<EW_GRID((long)BT * H)>>>(la.yg, la.gate, la.yatt, BT, H, hd);
            LAUNCH_CHECK(gate_forward_kernel);
        }
        gpu_matmul_forward(a->tmp, la.yg, gpu_param_of(gm, K_WO, l), gpu_param_of(gm, K_BO, l), BT, qd, C);
        residual_forward_kernel<<<EW_GRID((long)BT * C)>>>(la.xmid, la.x, a->tmp, (long)BT * C);
        LAUNCH_CHECK(residual_forward_kernel);
        // MLP sublayer: xout = xmid + MLP(Norm2(xmid))
        gpu_norm_forward(la.ln2, la.ln2_mean, la.ln2_rstd, la.xmid, gpu_param_of(gm, K_LN2W, l),
                         gpu_param_of(gm, K_LN2B, l), c->rmsnorm, c->eps, BT, C);
        gpu_matmul_forward(la.up, la.ln2, gpu_param_of(gm, K_WUP, l), gpu_param_of(gm, K_BUP, l), BT, C, F);
        if (c->swiglu) {
            gpu_matmul_forward(la.gpre, la.ln2, gpu_param_of(gm, K_WGATE, l), gpu_param_of(gm, K_BGATE, l), BT, C, F);
            swiglu_forward_kernel<<<EW_GRID((long)BT * F)>>>(la.hact, la.gpre, la.up, (long)BT * F);
            LAUNCH_CHECK(swiglu_forward_kernel);
        } else {
            gelu_forward_kernel<<<EW_GRID((long)BT * F)>>>(la.hact, la.up, (long)BT * F);
            LAUNCH_CHECK(gelu_forward_kernel);
        }
        gpu_matmul_forward(a->tmp, la.hact, gpu_param_of(gm, K_WDOWN, l), gpu_param_of(gm, K_BDOWN, l), BT, F, C);
        residual_forward_kernel<<<EW_GRID((long)BT * C)>>>(la.xout, la.xmid, a->tmp, (long)BT * C);
        LAUNCH_CHECK(residual_forward_kernel);
    }
    float* xL = a->res + (long)c->L * s_c;
    gpu_norm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, xL, gm->p[K_LNFW], gm->p[K_LNFB], c->rmsnorm, c->eps, BT, C);
    const float* head = c->tied ? gm->p[K_WTE] : gm->p[K_LMHEAD];
    gpu_matmul_forward(a->logits, a->lnf, head, NULL, BT, C, c->V);
    if (c->logit_scale != 1.0f) {
        scale_kernel<<<EW_GRID((long)BT * c->V)>>>(a->logits, c->logit_scale, (long)BT * c->V);
        LAUNCH_CHECK(scale_kernel);
    }
    softmax_forward_kernel<<<BT, ROW_THREADS>>>(a->logits, a->losses, targets ? a->targets : NULL, c->V);
    LAUNCH_CHECK(softmax_forward_kernel);
    if (!targets) return 0.0f;
    cudaCheck(cudaMemcpy(gm->losses_h, a->losses, (size_t)BT * sizeof(float), cudaMemcpyDeviceToHost));
    double sum = 0.0;
    for (int i = 0; i < BT; i++) sum += gm->losses_h[i];
    gm->loss = (float)(sum / BT);
    return gm->loss;
}

static void gpu_zero_grad(GpuModel* gm) {
    cudaCheck(cudaMemset(gm->grads, 0, gm->host->num_params * sizeof(float)));
}

// Stable counting sort of the positions by token, for embedding_backward_wte_kernel.
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

// Backward pass of the last forward (which must have had targets): model_backward of
// train_gpt2.c, layer for layer. Gradients accumulate into gm->grads (zero them first).
static void gpu_backward(GpuModel* gm, int B, int T) {
    const Config* c = &gm->host->cfg;
    GpuActs* a = &gm->a;
    int BT = B * T, C = c->C, H = c->H, KVH = c->KVH, hd = C / H, F = c->F;
    int qd = H * hd, kvd = KVH * hd;
    long s_c = (long)gm->B * gm->T * C;
    float* sc = a->scratch;
    // loss -> logits -> final norm
    crossentropy_softmax_backward_kernel<<<EW_GRID((long)BT * c->V)>>>(a->logits, a->targets, BT, c->V, 1.0f / BT);
    LAUNCH_CHECK(crossentropy_softmax_backward_kernel);
    if (c->logit_scale != 1.0f) {
        scale_kernel<<<EW_GRID((long)BT * c->V)>>>(a->logits, c->logit_scale, (long)BT * c->V);
        LAUNCH_CHECK(scale_kernel);
    }
    cudaCheck(cudaMemset(a->dln, 0, (size_t)BT * C * sizeof(float)));
    const float* head = c->tied ? gm->p[K_WTE] : gm->p[K_LMHEAD];
    float* dhead = c->tied ? gm->g[K_WTE] : gm->g[K_LMHEAD];
    gpu_matmul_backward(a->dln, dhead, NULL, a->logits, a->lnf, head, BT, C, c->V, sc);
    cudaCheck(cudaMemset(a->dres, 0, (size_t)BT * C * sizeof(float)));
    gpu_norm_backward(a->dres, gm->g[K_LNFW], gm->g[K_LNFB], a->dln, a->res + c->L * s_c, gm->p[K_LNFW],
                      a->lnf_mean, a->lnf_rstd, c->rmsnorm, BT, C, sc);
    // blocks in reverse; a->dres carries d loss / d residual stream
    for (int l = c->L - 1; l >= 0; l--) {
        LayerActs la;
        LAYER_ACTS(la, a, c, l, (long)gm->B * gm->T, gm->T);
        // MLP sublayer
        cudaCheck(cudaMemset(a->dh, 0, (size_t)BT * F * sizeof(float)));
        gpu_matmul_backward(a->dh, gpu_grad_of(gm, K_WDOWN, l), gpu_grad_of(gm, K_BDOWN, l),
                            a->dres, la.hact, gpu_param_of(gm, K_WDOWN, l), BT, F, C, sc);
        cudaCheck(cudaMemset(a->dln, 0, (size_t)BT * C * sizeof(float)));
        if (c->swiglu) {
            swiglu_backward_kernel<<<EW_GRID((long)BT * F)>>>(a->dgpre, a->dup, la.gpre, la.up, a->dh, (long)BT * F);
            LAUNCH_CHECK(swiglu_backward_kernel);
            gpu_matmul_backward(a->dln, gpu_grad_of(gm, K_WGATE, l), gpu_grad_of(gm, K_BGATE, l),
                                a->dgpre, la.ln2, gpu_param_of(gm, K_WGATE, l), BT, C, F, sc);
        } else {
            gelu_backward_kernel<<<EW_GRID((long)BT * F)>>>(a->dup, la.up, a->dh, (long)BT * F);
            LAUNCH_CHECK(gelu_backward_kernel);
        }
        gpu_matmul_backward(a->dln, gpu_grad_of(gm, K_WUP, l), gpu_grad_of(gm, K_BUP, l),
                            a->dup, la.ln2, gpu_param_of(gm, K_WUP, l), BT, C, F, sc);
        gpu_norm_backward(a->dres, gpu_grad_of(gm, K_LN2W, l), gpu_grad_of(gm, K_LN2B, l),
                          a->dln, la.xmid, gpu_param_of(gm, K_LN2W, l),
                          la.ln2_mean, la.ln2_rstd, c->rmsnorm, BT, C, sc);
        // attention sublayer
        cudaCheck(cudaMemset(a->dy, 0, (size_t)BT * qd * sizeof(float)));
        gpu_matmul_backward(a->dy, gpu_grad_of(gm, K_WO, l), gpu_grad_of(gm, K_BO, l),
                            a->dres, la.yg, gpu_param_of(gm, K_WO, l), BT, qd, C, sc);
        cudaCheck(cudaMemset(a->dln, 0, (size_t)BT * C * sizeof(float)));
        float* dyatt = a->dy;
        if (c->gate) {
            gate_backward_kernel<<<EW_GRID((long)BT * H)>>>(a->dy2, a->dgate, a->dy, la.yatt, la.gate, BT, H, hd);
            LAUNCH_CHECK(gate_backward_kernel);
            gpu_matmul_backward(a->dln, gpu_grad_of(gm, K_WG, l), gpu_grad_of(gm, K_BG, l),
                                a->dgate, la.ln1, gpu_param_of(gm, K_WG, l), BT, C, H, sc);
            dyatt = a->dy2;
        }
        gpu_attention_backward(a->dq, a->dk, a->dv, a->datt, dyatt, la.att, la.q, la.k, la.v, B, T, H, KVH, hd, c->attn_scale);
        if (c->rope) {
            gpu_rope(a->dq, BT, T, H, hd, c->rope_theta, -1.0f);
            gpu_rope(a->dk, BT, T, KVH, hd, c->rope_theta, -1.0f);
        }
        gpu_matmul_backward(a->dln, gpu_grad_of(gm, K_WQ, l), gpu_grad_of(gm, K_BQ, l),
                            a->dq, la.ln1, gpu_param_of(gm, K_WQ, l), BT, C, qd, sc);
        gpu_matmul_backward(a->dln, gpu_grad_of(gm, K_WK, l), gpu_grad_of(gm, K_BK, l),
                            a->dk, la.ln1, gpu_param_of(gm, K_WK, l), BT, C, kvd, sc);
        gpu_matmul_backward(a->dln, gpu_grad_of(gm, K_WV, l), gpu_grad_of(gm, K_BV, l),
                            a->dv, la.ln1, gpu_param_of(gm, K_WV, l), BT, C, kvd, sc);
        gpu_norm_backward(a->dres, gpu_grad_of(gm, K_LN1W, l), gpu_grad_of(gm, K_LN1B, l),
                          a->dln, la.x, gpu_param_of(gm, K_LN1W, l),
                          la.ln1_mean, la.ln1_rstd, c->rmsnorm, BT, C, sc);
    }
    // embeddings: wte through the token buckets, wpe column by column
    int nu = bucket_tokens(gm, BT);
    cudaCheck(cudaMemcpy(a->utok, gm->utok_h, (size_t)nu * sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(a->ustart, gm->ustart_h, (size_t)(nu + 1) * sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(a->upos, gm->upos_h, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice));
    embedding_backward_wte_kernel<<<dim3(nu, ceil_div(C, EW_THREADS)), EW_THREADS>>>(
        gm->g[K_WTE], a->dres, a->utok, a->ustart, a->upos, C);
    LAUNCH_CHECK(embedding_backward_wte_kernel);
    if (gm->g[K_WPE]) {
        embedding_backward_wpe_kernel<<<EW_GRID((long)T * C)>>>(gm->g[K_WPE], a->dres, B, T, C);
        LAUNCH_CHECK(embedding_backward_wpe_kernel);
    }
}

// ============================================================================================
// 4. AdamW, the gradient norm, clipping
// ============================================================================================

// sqrt(sum g^2): block i sums elements [i*NORM_CHUNK, (i+1)*NORM_CHUNK) in double in a fixed
// order; the host adds the partials in order. Reproducible, no atomics.
__global__ void grad_sq_partial_kernel(double* partial, const float* g, size_t n) {
    size_t i0 = (size_t)blockIdx.x * NORM_CHUNK, i1 = i0 + NORM_CHUNK < n ? i0 + NORM_CHUNK : n;
    double s = 0.0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) s += (double)g[i] * g[i];
    s = block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

static double gpu_grad_norm(GpuModel* gm) {
    grad_sq_partial_kernel<<<(unsigned)gm->norm_chunks, 256>>>(gm->norm_partial, gm->grads, gm->host->num_params);
    LAUNCH_CHECK(grad_sq_partial_kernel);
    cudaCheck(cudaMemcpy(gm->norm_partial_h, gm->norm_partial, gm->norm_chunks * sizeof(double), cudaMemcpyDeviceToHost));
    double total = 0.0;
    for (size_t i = 0; i < gm->norm_chunks; i++) total += gm->norm_partial_h[i];
    return sqrt(total);
}

// One AdamW step over one tensor, adamw_step's arithmetic element for element:
//   theta <- theta (1 - lr lambda)                        decoupled weight decay, [ComplexCtl eq. 1]
//   m <- b1 m + (1-b1) g ;  v <- b2 v + (1-b2) g^2
//   theta <- theta - lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// grad_scale is the clipping factor (1 when the norm is below the clip).
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, long n, float decay, float beta1,
                             float beta2, float step_size, float b2c, float eps, float grad_scale) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i] * grad_scale;
    float pi = p[i] * decay;
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    pi -= step_size * mi / (sqrtf(vi) / b2c + eps);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
}

// one launch per tensor, with adamw_step's own per-tensor constants (adamw_scalars)
static void gpu_adamw_step(GpuModel* gm, const OptConfig* o, float sched_lr, int t, float grad_scale) {
    const Model* hm = gm->host;
    for (int ti = 0; ti < hm->num_tensors; ti++) {
        const Tensor* tn = &hm->tensors[ti];
        AdamwScalars k = adamw_scalars(o, tn, sched_lr, t);
        adamw_kernel<<<EW_GRID(tn->numel)>>>(gm->params + tn->offset, gm->grads + tn->offset, gm->m + tn->offset,
                                             gm->v + tn->offset, (long)tn->numel, k.decay, o->beta1, o->beta2,
                                             k.step_size, k.b2c, o->adam_eps, grad_scale);
        LAUNCH_CHECK(adamw_kernel);
    }
}

// ============================================================================================
// 5. Evaluation, sampling, the training loop
// ============================================================================================

// TF32 tensor-core math in the matmuls when tf32 is 1 (--tf32, default 1), full float32 else.
static void gpu_set_tf32(int tf32) {
    cublasCheck(cublasSetMathMode(g_blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

// Device 0 and the cuBLAS handle; without a usable GPU, the one-line error and exit status 1.
static void gpu_init(int tf32) {
    const char* why = gpu_unavailable();
    if (why) fatal("no CUDA GPU found (%s)", why);
    cudaCheck(cudaSetDevice(0));
    cublasCheck(cublasCreate(&g_blas));
    gpu_set_tf32(tf32);
}

// The Engine of train_gpt2.c's training loop (section 8 there), on the device.
static float gpu_engine_forward(void* gm, const int* inp, const int* tgt, int B, int T) {
    return gpu_forward((GpuModel*)gm, inp, tgt, B, T);
}
static const float* gpu_engine_probs(void* ctx, int bt, int V) {
    GpuModel* gm = (GpuModel*)ctx;
    cudaCheck(cudaMemcpy(gm->probs_h, gm->a.logits + (size_t)bt * V, (size_t)V * sizeof(float), cudaMemcpyDeviceToHost));
    return gm->probs_h;
}
static void gpu_engine_backward(void* gm, int B, int T) {
    gpu_zero_grad((GpuModel*)gm);
    gpu_backward((GpuModel*)gm, B, T);
}
static double gpu_engine_grad_norm(void* gm) { return gpu_grad_norm((GpuModel*)gm); }
static void gpu_engine_update(void* gm, const OptConfig* o, float lr, int t, float grad_scale) {
    gpu_adamw_step((GpuModel*)gm, o, lr, t, grad_scale);
    cudaCheck(cudaDeviceSynchronize());      // the step is done when the loop takes its time
}
static void gpu_engine_to_host(void* gm) { gpu_download_state((GpuModel*)gm); }

static Engine gpu_engine(GpuModel* gm, const char* device) {
    return (Engine){device, gm, gpu_engine_forward, gpu_engine_probs, gpu_engine_backward, gpu_engine_grad_norm,
                    gpu_engine_update, gpu_engine_to_host};
}

// Flags of this binary only, taken out of argv before the shared parse_args sees it.
static int take_gpu_flags(int* argc, char** argv, int* tf32) {
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--tf32") == 0) {
            if (i + 1 >= *argc) fatal("flag --tf32 needs a value");
            *tf32 = (int)parse_int("--tf32", argv[++i], 0, 1);
            continue;
        }
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage();
            printf("GPU (train_gpt2cu only)\n"
                   "  --tf32 0|1  TF32 tensor cores in the matmuls (default 1); 0 = full float32\n");
            exit(0);
        }
        argv[out++] = argv[i];
    }
    *argc = out;
    return out;
}

// train_on_cpu of train_gpt2.c with the model on the GPU: the same run (data, initialization on the
// host with the same generator, schedule, printout, log, validation, samples, checkpoints, probes, NaN
// stop). ctx points to the --tf32 setting, for the device line.
static void train_on_gpu(const Options* o, void* ctx) {
    int tf32 = *(const int*)ctx;
    Run r;
    r.o = *o;
    run_setup(&r, 0);
    GpuModel gm;
    gpu_model_create(&gm, &r.model, r.o.B, r.o.T);     // uploads params, m, v
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    char device[300];
    snprintf(device, sizeof(device), "%s, %s", prop.name, tf32 ? "TF32 matmuls" : "float32 matmuls");
    Engine e = gpu_engine(&gm, device);
    run_train(&r, &e);
    gpu_model_free(&gm);
    run_free(&r);
}

#ifndef TRAIN_GPT2CU_NO_MAIN
int main(int argc, char** argv) {
    int tf32 = 1;
    take_gpu_flags(&argc, argv, &tf32);
    Options o;
    parse_args(&o, argc, argv);
    gpu_init(tf32);
    if (o.probe.coord_check) coord_check(&o, train_on_gpu, &tf32);  // every width, then the table
    else train_on_gpu(&o, &tf32);
    cublasCheck(cublasDestroy(g_blas));
    return 0;
}
#endif
