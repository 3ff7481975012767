/*
train_gpt2.c: a GPT-2 / Llama-style language model trained on the CPU, in one file, written to
teach weight initialization. doc/model.md is the model's exact contract.

    make train_gpt2 && ./train_gpt2                 # GPT-2 init, byte-level Moby-Dick
    ./train_gpt2 -g 1.0 -e 1e-12                    # gamma-init, rate 1, norm eps 1e-12 [SmallInit]

Part I is the course text: from the data to the loss and back, then a whole run. Part II is the
machinery Part I calls; section 0 lists each call with a line on what it does.

  PART I   THE MODEL AS MATHEMATICS
   0. what Part I calls in Part II (skippable)        HOSTDEV, fatal, rng_u64, run_start
   1. layers, each forward beside its backward        matmul_forward, attention_forward, Impl
   2. the model: configuration, parameters, passes    Config, Model, model_forward, model_backward
   3. initialization: gains, schemes, recipes, muP    calculate_gain, scheme_dist, model_init
   4. AdamW, the schedule, clipping                   lr_at, grad_norm, adamw_step
   5. training: batches, the loop, a whole run        next_batch, evaluate, sample_text, train,
                                                      train_run
  PART II  MACHINERY
   6. random numbers: PyTorch's CPU generator         rng_seed, rng_uniform, dist_fill
   7. utilities, data files, a run's types            fatal, dataset_load, llmc_batch, Engine, Run
   8. fast twins: threads, exp, gemm, their check     vexpf, gemm, attention_forward_fast,
                                                      twins_install
   9. probes: what the papers measure inside a net    probes_new, probes_before_update
  10. the command line, text out, --init-report       parse_args, usage, log_event, init_report
  11. checkpoints and llm.c model files               checkpoint_save, checkpoint_load, llmc_save
  12. a run: its plan and start, the engine loop      run_plan, run_start, train_with_engine, main
Comments cite sources by key (doc/references.md; doc/errata.md where a source errs):
[SmallInit] arXiv 2606.17945, [InitFP] and [InitGuide] two blog posts on initialization,
[ComplexCtl] complexity control by gamma and weight decay, [VarDyn] arXiv 2510.09423.
*/
#ifndef _GNU_SOURCE      // g++ (train_gpt2.cu) predefines it
#define _GNU_SOURCE
#endif
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// ############################################################################################
// PART I. THE MODEL AS MATHEMATICS
// ############################################################################################

// ============================================================================================
// 0. What Part I calls in Part II (one line each on what it does; skippable)
// ============================================================================================
// HOSTDEV marks math that train_gpt2.cu's GPU kernels call too (nvcc compiles it for both).
#ifdef __CUDACC__
#define HOSTDEV __host__ __device__
#else
#define HOSTDEV
#endif
typedef struct Rng Rng;          // PyTorch's CPU random generator (section 6)
typedef struct Dist Dist;        // a distribution to draw a tensor from (section 3)
typedef struct Dataset Dataset;  // a token stream (section 5)
typedef struct Decoder Decoder;  // token ids to text (section 7)
typedef struct Trainer Trainer;  // a run's settings and state (section 5)
typedef struct Run Run;          // the run's log, probes, checkpoints (section 7)
typedef struct LlmcOrder LlmcOrder;   // llm.c's batch order (section 7)
static void fatal(const char* fmt, ...);          // one line on stderr, exit 1
static void* (xmalloc)(size_t bytes);             // malloc, or fatal
static float* zeroed_floats(size_t n);            // n zeros, for large arrays
HOSTDEV static inline float vexpf(float x);       // exp(x) within 2 ulp, vectorizable
static Rng* rng_new(uint64_t seed);               // a generator after torch.manual_seed(seed)
static uint64_t rng_u64(Rng* g);                  // 64 random bits
static float rng_uniform(Rng* g);                 // uniform on [0, 1), 24 bits
static void dist_fill(Rng* g, float* w, int rows, int cols, const Dist* d);   // nn.init's draw
static void dataset_load(Dataset* d, const char* path, int V);   // byte text or a token shard
static void print_token(const Decoder* dec, int tok);            // a byte, or a token's text
// --data-order llmc: the rows of batch k in llm.c's shuffled order
static void llmc_batch(const Trainer* tr, long k, int* inp, int* tgt);
// after set-up: the data checked against the flags, weights from a checkpoint (-y) or llm.c's
// file, the output directory and log opened, the probes made, the run's header printed
static void run_start(Run* r);
// before step `step`, and once after the last: the validation loss into the log, a checkpoint
// when due, and after the last step the files written at the end
static void run_before_step(Run* r, int step, double val_loss);
// after the gradient: stops on a NaN or inf loss or norm, runs the probes; 1: skip this update
static int run_inspect(Run* r, int step, float loss, double norm);
// after the update: the probes' update ratios and the log's train event
static void run_after_step(Run* r, int step, float loss, float lr, double norm, double ms);

// ============================================================================================
// 1. Layers. Each forward is followed by its backward. Shapes: B batch, T time, C width,
//    OC output channels, BT = B*T rows. Backward functions that write a weight's gradient
//    ACCUMULATE (+=) into it, so a tensor used twice (the tied embedding) collects both
//    contributions; the activation functions' backward (GELU, SwiGLU, the gate) assign (=).
//    Each function is the definition, plain loops, and what trains: `#pragma omp parallel for`
//    only spreads a loop's independent iterations over threads. Six of them also have a fast
//    twin (section 8); the passes call those six through `impl` (end of this section).
// ============================================================================================

// out[BT,OC] = inp[BT,C] W[OC,C]^T + bias[OC]:  out[bt][o] = bias[o] + sum_c inp[bt][c] W[o][c]
// Every output of row bt takes its sum a term at a time, together: the row starts at the bias and
// adds inp[bt][c] times row c of Wt = W^T, c in order. The innermost loop then walks two rows in
// order and vectorizes; as a dot product over c (the sum left to right), it could not.
static void matmul_forward(float* out, const float* inp, const float* W, const float* bias,
                           int BT, int C, int OC) {
    float* Wt = xmalloc((size_t)C * OC * sizeof(float));
    #pragma omp parallel for
    for (int c = 0; c < C; c++)
        for (int o = 0; o < OC; o++) Wt[(long)c * OC + o] = W[(long)o * C + c];
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        float* row = out + (long)bt * OC;
        for (int o = 0; o < OC; o++) row[o] = bias ? bias[o] : 0.0f;
        for (int c = 0; c < C; c++)
            for (int o = 0; o < OC; o++) row[o] += inp[(long)bt * C + c] * Wt[(long)c * OC + o];
    }
    free(Wt);
}

// The three gradients of out = inp W^T + bias, accumulated:
//   dinp[bt][c] += sum_o dout[bt][o] W[o][c]      dW[o][c] += sum_bt dout[bt][o] inp[bt][c]
//   dbias[o]    += sum_bt dout[bt][o]
// (dinp NULL: the input needs no gradient.) Each loop's innermost index walks memory in order:
// dinp's row adds the rows of W, dW's row o adds the rows of inp.
static void matmul_backward(float* dinp, float* dW, float* dbias, const float* dout,
                            const float* inp, const float* W, int BT, int C, int OC) {
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++)
        for (int o = 0; o < OC && dinp; o++) {
            float d = dout[(long)bt * OC + o];
            for (int c = 0; c < C; c++) dinp[(long)bt * C + c] += d * W[(long)o * C + c];
        }
    #pragma omp parallel for
    for (int o = 0; o < OC; o++) {
        for (int bt = 0; bt < BT; bt++) {
            float d = dout[(long)bt * OC + o];
            for (int c = 0; c < C; c++) dW[(long)o * C + c] += d * inp[(long)bt * C + c];
            if (dbias) dbias[o] += d;
        }
    }
}

// ---- embeddings -----------------------------------------------------------------------------
// out[b,t,:] = wte[tok[b,t],:] (+ wpe[t,:] for learned positions)
static void embedding_forward(float* out, const int* tok, const float* wte, const float* wpe,
                              int B, int T, int C) {
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++)
        for (int c = 0; c < C; c++)
            out[(long)bt * C + c] = wte[(long)tok[bt] * C + c]
                                  + (wpe ? wpe[(long)(bt % T) * C + c] : 0.0f);
}

// Each position adds its gradient to the row of its token (a token seen twice gets both) and,
// for learned positions, to the row of its position. One thread: two positions may add into the
// same row.
static void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tok,
                               int B, int T, int C) {
    for (int bt = 0; bt < B * T; bt++)
        for (int c = 0; c < C; c++) {
            dwte[(long)tok[bt] * C + c] += dout[(long)bt * C + c];
            if (dwpe) dwpe[(long)(bt % T) * C + c] += dout[(long)bt * C + c];
        }
}

// ---- normalization ---------------------------------------------------------------------------
// [SmallInit eq. 1] LayerNorm(h) = w * (h - mu) / sqrt(sigma^2 + eps) + b
// [SmallInit eq. 2] RMSNorm(h)   = w * h / sqrt(mean(h^2) + eps)
// eps sits INSIDE the square root. When sigma^2 (or mean h^2) falls below eps, the factor
// (sigma^2 + eps)^(-1/2) stops growing as the input shrinks: the normalization no longer
// normalizes, which is why small init needs a small eps [SmallInit §2.1, Fig. 1c].
// mean[] (LayerNorm only) and rstd[] = 1/sqrt(var + eps) are kept for the backward pass.
static void norm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                         const float* b, int rms, float eps, int N, int C) {
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* x = inp + (long)n * C;
        float mu = 0.0f, var = 0.0f;
        if (!rms) {
            for (int c = 0; c < C; c++) mu += x[c];
            mu /= C;
        }
        for (int c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
        var /= C;
        float s = 1.0f / sqrtf(var + eps);
        for (int c = 0; c < C; c++)
            out[(long)n * C + c] = (x[c] - mu) * s * w[c] + (b ? b[c] : 0.0f);
        if (mean) mean[n] = mu;
        rstd[n] = s;
    }
}

// With xhat = (x - mu) * rstd and g = dout * w:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))     LayerNorm
//   dx = rstd * (g - xhat * mean(g * xhat))               RMSNorm (no mean was removed)
//   dw = sum over rows of dout * xhat ;  db = sum over rows of dout
// xhat is formed first, then multiplied by the gradient, as PyTorch's autograd does: x - mu alone
// can be huge where rstd is 0 (a variance that overflowed: -I constant:1e30), and the gradient
// times x - mu would overflow to inf, then inf * 0 = NaN where PyTorch has a finite gradient.
static void norm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                          const float* w, const float* mean, const float* rstd, int rms, int N,
                          int C) {
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* x = inp + (long)n * C;
        const float* d = dout + (long)n * C;
        float mu = rms ? 0.0f : mean[n], s = rstd[n];
        float g_mean = 0.0f, gx_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - mu) * s;
            g_mean += d[c] * w[c];
            gx_mean += d[c] * w[c] * xhat;
        }
        g_mean = rms ? 0.0f : g_mean / C;
        gx_mean /= C;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - mu) * s;
            dinp[(long)n * C + c] += s * (d[c] * w[c] - g_mean - xhat * gx_mean);
        }
    }
    // dw and db sum over the rows, which every row adds into: one thread, rows in order
    for (int n = 0; n < N; n++) {
        float mu = rms ? 0.0f : mean[n], s = rstd[n];
        for (int c = 0; c < C; c++) {
            float d = dout[(long)n * C + c], xhat = (inp[(long)n * C + c] - mu) * s;
            dw[c] += d * xhat;
            if (db) db[c] += d;
        }
    }
}

// ---- rotary position embedding (llama preset) --------------------------------------------------
// Each head vector is split into pairs (2j, 2j+1); pair j at position t turns by the angle
// t * theta^(-2j/hd). A rotation is orthogonal, so the backward pass is the rotation by -angle.
// The cosines and sines depend only on (t, j): rope_table computes them once (cs [T, hd/2, 2]).
static void rope_table(float* cs, int T, int hd, float theta) {
    for (int t = 0; t < T; t++)
        for (int j = 0; j < hd / 2; j++) {
            double ang = t * pow((double)theta, -2.0 * j / hd);
            cs[((long)t * (hd / 2) + j) * 2] = (float)cos(ang);
            cs[((long)t * (hd / 2) + j) * 2 + 1] = (float)sin(ang);
        }
}

// x is [B*T, nh*hd]; sign = +1 forward, -1 backward (applied to the gradient in place).
static void rope_apply(float* x, const float* cs, int B, int T, int nh, int hd, float sign) {
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++)
        for (int h = 0; h < nh; h++)
            for (int j = 0; j < hd / 2; j++) {
                const float* ct = cs + ((long)(bt % T) * (hd / 2) + j) * 2;
                float c = ct[0], sn = sign * ct[1];
                float* v = x + ((long)bt * nh + h) * hd + 2 * j;
                float a = v[0], b = v[1];
                v[0] = a * c - b * sn;
                v[1] = a * sn + b * c;
            }
}

// ---- causal self-attention with grouped KV heads ----------------------------------------------
// q [BT, H*hd], k and v [BT, KVH*hd]; head h reads kv head h / (H/KVH) (GQA; KVH = H is plain
// multi-head attention). att [B,H,T,T] keeps the softmax probabilities for the backward pass
// (and for the attention-sink probe, [SmallInit eq. 5]). y [BT, H*hd].
//   A = softmax(scale * q k^T + causal mask),  y = A v
static void attention_forward(float* y, float* att, const float* q, const float* k, const float* v,
                              int B, int T, int H, int KVH, int hd, float scale) {
    int qd = H * hd, kvd = KVH * hd;
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int kh = h / (H / KVH);
            for (int t = 0; t < T; t++) {
                const float* qt = q + (long)(b * T + t) * qd + h * hd;
                float* a = att + (((long)b * H + h) * T + t) * T;
                float mx = -FLT_MAX, sum = 0.0f;
                for (int s = 0; s <= t; s++) {          // the scores of the keys up to t
                    const float* ks = k + (long)(b * T + s) * kvd + kh * hd;
                    float dot = 0.0f;
                    for (int i = 0; i < hd; i++) dot += qt[i] * ks[i];
                    a[s] = scale * dot;
                    if (a[s] > mx) mx = a[s];
                }
                for (int s = 0; s <= t; s++) {          // softmax, less the maximum for safety
                    a[s] = expf(a[s] - mx);
                    sum += a[s];
                }
                for (int s = 0; s < T; s++) a[s] = s <= t ? a[s] / sum : 0.0f;
                float* yt = y + (long)(b * T + t) * qd + h * hd;
                for (int i = 0; i < hd; i++) {          // y_t = sum_s A[t,s] v_s
                    float acc = 0.0f;
                    for (int s = 0; s <= t; s++)
                        acc += a[s] * v[(long)(b * T + s) * kvd + kh * hd + i];
                    yt[i] = acc;
                }
            }
        }
}

// With P = scale * q k^T and A = softmax(P), for each query row t (accumulating):
//   dA[t,s] = dy_t . v_s ;  dP[t,s] = A[t,s] (dA[t,s] - sum_s' A[t,s'] dA[t,s'])
//   dq_t += scale sum_s dP[t,s] k_s ;  dk_s += scale dP[t,s] q_t ;  dv_s += A[t,s] dy_t
// Heads that share a kv head (GQA) add into the same dk, dv. dp holds one row of dA, then dP.
static void attention_backward(float* dq, float* dk, float* dv, const float* dy,
                               const float* att, const float* q, const float* k, const float* v,
                               int B, int T, int H, int KVH, int hd, float scale) {
    int qd = H * hd, kvd = KVH * hd;
    float* dp = xmalloc((size_t)T * sizeof(float));     // d loss / d scores of one query row
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int kh = h / (H / KVH);
            for (int t = 0; t < T; t++) {
                const float* a = att + (((long)b * H + h) * T + t) * T;
                const float* dyt = dy + (long)(b * T + t) * qd + h * hd;
                float adot = 0.0f;
                for (int s = 0; s <= t; s++) {
                    const float* vs = v + (long)(b * T + s) * kvd + kh * hd;
                    float d = 0.0f;
                    for (int i = 0; i < hd; i++) d += dyt[i] * vs[i];
                    dp[s] = d;
                    adot += a[s] * d;
                }
                for (int s = 0; s <= t; s++) dp[s] = a[s] * (dp[s] - adot) * scale;
                const float* qt = q + (long)(b * T + t) * qd + h * hd;
                float* dqt = dq + (long)(b * T + t) * qd + h * hd;
                for (int s = 0; s <= t; s++) {
                    long ks = (long)(b * T + s) * kvd + kh * hd;
                    for (int i = 0; i < hd; i++) {
                        dqt[i] += dp[s] * k[ks + i];
                        dk[ks + i] += dp[s] * qt[i];
                        dv[ks + i] += a[s] * dyt[i];
                    }
                }
            }
        }
    free(dp);
}

// sigmoid(a) = 1 / (1 + exp(-a)): the attention gate below and SwiGLU
HOSTDEV static inline float sigmoid_of(float a) { return 1.0f / (1.0f + vexpf(-a)); }

// ---- the attention gate -------------------------------------------------------------------------
// [SmallInit eqs. 3-4] GAttn(x) = Concat(g_1(x) * head_1, ..., g_H(x) * head_H) W_O,
//                      g_h(x) = sigmoid(x W_h^g)
// gate [BT,H] holds the pre-activation x W^g (+ b^g) on entry and the gate g on return.
static void attn_gate_forward(float* out, float* gate, const float* y, int BT, int H, int hd) {
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++)
        for (int h = 0; h < H; h++) {
            float g = sigmoid_of(gate[(long)bt * H + h]);
            gate[(long)bt * H + h] = g;
            for (int i = 0; i < hd; i++)
                out[((long)bt * H + h) * hd + i] = g * y[((long)bt * H + h) * hd + i];
        }
}

// dy = g * dout ;  dgate (of the pre-activation) = (sum_i dout_i y_i) * g (1 - g)
static void attn_gate_backward(float* dy, float* dgate, const float* dout, const float* y,
                               const float* gate, int BT, int H, int hd) {
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++)
        for (int h = 0; h < H; h++) {
            float g = gate[(long)bt * H + h], s = 0.0f;
            for (int i = 0; i < hd; i++) {
                long j = ((long)bt * H + h) * hd + i;
                s += dout[j] * y[j];
                dy[j] = g * dout[j];
            }
            dgate[(long)bt * H + h] = s * g * (1.0f - g);
        }
}

// ---- MLP activations ----------------------------------------------------------------------------
// GELU, tanh form (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
#define GELU_K 0.7978845608028654f
// tanh(u) = 1 - 2 / (exp(2u) + 1), exact to ~2e-7 absolute, saturating correctly (exp -> inf or 0)
HOSTDEV static inline float tanh_via_exp(float u) { return 1.0f - 2.0f / (vexpf(2.0f * u) + 1.0f); }
HOSTDEV static inline float gelu_of(float x) {
    return 0.5f * x * (1.0f + tanh_via_exp(GELU_K * (x + 0.044715f * x * x * x)));
}
// d gelu / dx = (1 + th) / 2 + x (1 - th^2) GELU_K (1 + 3 * 0.044715 x^2) / 2, th the tanh above
HOSTDEV static inline float gelu_grad_of(float x) {
    float th = tanh_via_exp(GELU_K * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th)
         + 0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
}

static void gelu_forward(float* out, const float* inp, long N) {
    #pragma omp parallel for
    for (long i = 0; i < N; i++) out[i] = gelu_of(inp[i]);
}

static void gelu_backward(float* dinp, const float* inp, const float* dout, long N) {
    #pragma omp parallel for
    for (long i = 0; i < N; i++) dinp[i] = gelu_grad_of(inp[i]) * dout[i];
}

// SwiGLU (llama preset): out = silu(a) * u with silu(a) = a * sigmoid(a); the gate's
// pre-activation a = x W_gate^T, u = x W_up^T. d silu(a)/da = s (1 + a (1 - s)), s = sigmoid(a).
HOSTDEV static inline float swiglu_of(float a, float u) { return a / (1.0f + vexpf(-a)) * u; }

HOSTDEV static inline void swiglu_grad_of(float a, float u, float dout, float* da, float* du) {
    float s = sigmoid_of(a);
    *du = dout * a * s;
    *da = dout * u * s * (1.0f + a * (1.0f - s));
}

static void swiglu_forward(float* out, const float* a, const float* u, long N) {
    #pragma omp parallel for
    for (long i = 0; i < N; i++) out[i] = swiglu_of(a[i], u[i]);
}

static void swiglu_backward(float* da, float* du, const float* a, const float* u,
                            const float* dout, long N) {
    #pragma omp parallel for
    for (long i = 0; i < N; i++) swiglu_grad_of(a[i], u[i], dout[i], &da[i], &du[i]);
}

// ---- residual: out = a + b (its backward passes the gradient to both, unchanged) ----------------
static void residual_forward(float* out, const float* a, const float* b, long N) {
    #pragma omp parallel for
    for (long i = 0; i < N; i++) out[i] = a[i] + b[i];
}

// ---- softmax + cross-entropy --------------------------------------------------------------------
// logits [BT,V] are replaced by probabilities; losses[bt] = -log p[target]. With targets NULL only
// the probabilities are computed (sampling).
static void softmax_forward(float* logits, float* losses, const int* targets, int BT, int V) {
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        float* z = logits + (long)bt * V;
        float mx = -FLT_MAX;
        for (int i = 0; i < V; i++) mx = z[i] > mx ? z[i] : mx;
        double sum = 0.0;
        for (int i = 0; i < V; i++) sum += expf(z[i] - mx);
        // -log p = log(sum) - (z_t - max): exact even where p itself underflows
        if (targets) losses[bt] = (float)(log(sum) - (z[targets[bt]] - mx));
        for (int i = 0; i < V; i++) z[i] = (float)(expf(z[i] - mx) / sum);
    }
}

// The gradient of scale x the mean loss over BT rows by the logits, written over p:
// dlogits = scale (p - onehot(target)) / BT
static void crossentropy_backward(float* probs, const int* targets, int BT, int V, float scale) {
    float inv = 1.0f / BT;
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        float* p = probs + (long)bt * V;
        for (int i = 0; i < V; i++) p[i] *= inv;
        p[targets[bt]] -= inv;
        if (scale != 1.0f)
            for (int i = 0; i < V; i++) p[i] *= scale;
    }
}

// The LM head's backward, from the probabilities to its input and weight: crossentropy_backward,
// then the matmul's backward (dinp += dlogits W, dW += dlogits^T inp). scale is muP's logit scale
// times dloss.
static void lm_head_backward(float* dinp, float* dW, float* probs, const int* targets,
                             const float* inp, const float* W, float* scratch, int BT, int C,
                             int V, float scale) {
    (void)scratch;    // the twin's: it keeps probs W there
    crossentropy_backward(probs, targets, BT, V, scale);
    matmul_backward(dinp, dW, NULL, probs, inp, W, BT, C, V);
}

// ---- the six layers with a fast twin ------------------------------------------------------------
// The matrix products, attention, softmax and the LM head's backward take most of a step, and
// each has a twin in section 8 that computes the same sums by another algorithm: blocked and
// vectorized matrix products, a vectorized exp, the head's gradient without writing dlogits.
// The passes call these six through `impl`, which holds the definitions above. At start-up the
// trainer runs each twin and its definition on a small input and, where they agree, points
// `impl` at the twin (twins_install, section 8); where they do not (a definition was edited),
// it refuses to start and says to train on the definitions: `make train_gpt2 REFERENCE=1`.
typedef struct {
    void (*matmul_forward)(float* out, const float* inp, const float* W, const float* bias,
                           int BT, int C, int OC);
    void (*matmul_backward)(float* dinp, float* dW, float* dbias, const float* dout,
                            const float* inp, const float* W, int BT, int C, int OC);
    void (*attention_forward)(float* y, float* att, const float* q, const float* k,
                              const float* v, int B, int T, int H, int KVH, int hd, float scale);
    void (*attention_backward)(float* dq, float* dk, float* dv, const float* dy,
                               const float* att, const float* q, const float* k, const float* v,
                               int B, int T, int H, int KVH, int hd, float scale);
    void (*softmax_forward)(float* logits, float* losses, const int* targets, int BT, int V);
    void (*lm_head_backward)(float* dinp, float* dW, float* probs, const int* targets,
                             const float* inp, const float* W, float* scratch, int BT, int C,
                             int V, float scale);
} Impl;
static const Impl definitions = {matmul_forward, matmul_backward, attention_forward,
                                 attention_backward, softmax_forward, lm_head_backward};
// what the passes call; it starts as the definitions (listed again: C's static initializer cannot
// copy another variable, though gcc allows it)
static Impl impl = {matmul_forward, matmul_backward, attention_forward,
                    attention_backward, softmax_forward, lm_head_backward};

// ============================================================================================
// 2. The model: its configuration, its parameters, the forward and the backward pass
// ============================================================================================

typedef struct {
    int V;          // vocabulary
    int maxT;       // longest sequence (rows of wpe)
    int L, C, H;    // blocks, width, attention heads (head size hd = C / H)
    int KVH;        // key/value heads, divides H (grouped-query attention)
    int F;          // MLP hidden width
    int rmsnorm;    // 0: LayerNorm (w, b), 1: RMSNorm (w)
    int swiglu;     // 0: GELU MLP, 1: SwiGLU MLP
    int rope;       // 0: learned positions (wpe), 1: rotary embedding
    int bias;       // biases on every linear layer
    int tied;       // lm_head shares wte
    int attn_gate;  // gated attention, [SmallInit eqs. 3-4]
    float eps;      // norm eps, inside the square root [SmallInit eqs. 1-2]
    float rope_theta;
    float attn_scale;   // multiplies q.k: 1/sqrt(hd), or 1/hd under muP ([muP]; [Errata 001-14])
    float logit_scale;  // multiplies the logits: 1, or 1/width_mult under muP
} Config;

// ---- the parameters: kinds, groups, tensors ----------------------------------------------------
// Parameter kinds, in the order they are stored. Per-layer kinds hold L consecutive slices.
// K_ATTN_WG, K_ATTN_BG: the attention gate (attn.wg, attn.bg); K_WGATE, K_BGATE: SwiGLU's gate.
enum {
    K_WTE, K_WPE,
    K_LN1W, K_LN1B, K_WQ, K_BQ, K_WK, K_BK, K_WV, K_BV, K_ATTN_WG, K_ATTN_BG, K_WO, K_BO,
    K_LN2W, K_LN2B, K_WGATE, K_BGATE, K_WUP, K_BUP, K_WDOWN, K_BDOWN,
    K_LNFW, K_LNFB, K_LMHEAD, NUM_KINDS
};
#define FIRST_LAYER_KIND K_LN1W
#define LAST_LAYER_KIND K_BDOWN

// Parameter groups: the unit at which an initializer (-I group=scheme) or an optimizer rule
// applies. On the command line G_ATTN_GATE is "gate", G_UP holds mlp.wgate and mlp.wup.
typedef enum {
    G_TOK_EMB, G_POS_EMB, G_QKV, G_ATTN_GATE, G_OUT, G_UP, G_DOWN, G_LM_HEAD, G_NORM, G_BIAS,
    NUM_GROUPS
} Group;
static const char* group_names[NUM_GROUPS] = {
    "emb", "pos", "qkv", "gate", "out", "up", "down", "head", "norm", "bias"
};

static const struct { const char* name; Group group; } kind_info[NUM_KINDS] = {
    {"wte", G_TOK_EMB}, {"wpe", G_POS_EMB},
    {"ln1.w", G_NORM}, {"ln1.b", G_BIAS}, {"attn.wq", G_QKV}, {"attn.bq", G_BIAS},
    {"attn.wk", G_QKV}, {"attn.bk", G_BIAS}, {"attn.wv", G_QKV}, {"attn.bv", G_BIAS},
    {"attn.wg", G_ATTN_GATE}, {"attn.bg", G_BIAS}, {"attn.wo", G_OUT}, {"attn.bo", G_BIAS},
    {"ln2.w", G_NORM}, {"ln2.b", G_BIAS}, {"mlp.wgate", G_UP}, {"mlp.bgate", G_BIAS},
    {"mlp.wup", G_UP}, {"mlp.bup", G_BIAS}, {"mlp.wdown", G_DOWN}, {"mlp.bdown", G_BIAS},
    {"lnf.w", G_NORM}, {"lnf.b", G_BIAS}, {"lm_head", G_LM_HEAD},
};

// Shape (rows, cols) = (out, in) of one slice of a kind; returns 0 when the config has no such
// tensor. Vectors are (n, 1).
static int kind_shape(const Config* c, int kind, int* rows, int* cols) {
    int hd = c->C / c->H, qd = c->H * hd, kvd = c->KVH * hd, ln = !c->rmsnorm;
    int r = 0, k = 1, present = 1;
    switch (kind) {
    case K_WTE: r = c->V; k = c->C; break;
    case K_WPE: r = c->maxT; k = c->C; present = !c->rope; break;
    case K_LN1W: case K_LN2W: case K_LNFW: r = c->C; break;
    case K_LN1B: case K_LN2B: case K_LNFB: r = c->C; present = ln; break;
    case K_WQ: r = qd; k = c->C; break;
    case K_BQ: r = qd; present = c->bias; break;
    case K_WK: case K_WV: r = kvd; k = c->C; break;
    case K_BK: case K_BV: r = kvd; present = c->bias; break;
    case K_ATTN_WG: r = c->H; k = c->C; present = c->attn_gate; break;
    case K_ATTN_BG: r = c->H; present = c->attn_gate && c->bias; break;
    case K_WO: r = c->C; k = qd; break;
    case K_BO: r = c->C; present = c->bias; break;
    case K_WGATE: r = c->F; k = c->C; present = c->swiglu; break;
    case K_BGATE: r = c->F; present = c->swiglu && c->bias; break;
    case K_WUP: r = c->F; k = c->C; break;
    case K_BUP: r = c->F; present = c->bias; break;
    case K_WDOWN: r = c->C; k = c->F; break;
    case K_BDOWN: r = c->C; present = c->bias; break;
    case K_LMHEAD: r = c->V; k = c->C; present = !c->tied; break;
    }
    *rows = r;
    *cols = k;
    return present;
}

static int kind_is_layer(int kind) { return kind >= FIRST_LAYER_KIND && kind <= LAST_LAYER_KIND; }

// One named parameter tensor: a slice of the parameter block.
typedef struct {
    char name[32];      // as in doc/model.md: "wte", "h.3.attn.wq", ...
    int kind, layer;    // layer -1 for tensors outside the blocks
    Group group;
    int rows, cols;     // (out, in) = (fan_out, fan_in) for matrices; (n, 1) for vectors
    size_t offset, numel;
    float lr_mult;      // per-tensor learning-rate multiplier (muP sets it; 1 otherwise)
    int decay;          // decoupled weight decay applies (matrices; embeddings with --decay-emb)
} Tensor;

// ---- the activations -------------------------------------------------------------------------
// What one forward pass keeps for the backward pass. Per-layer buffers hold L slices.
typedef struct {
    float *res;                           // (L+1) x BT x C: stream entering each block; res[L] last
    float *resmid;                        // L x BT x C: stream after the attention sublayer
    float *ln1, *ln1_mean, *ln1_rstd;     // L x BT x C, L x BT, L x BT
    float *q, *k, *v;                     // L x BT x H*hd, L x BT x KVH*hd (after RoPE)
    float *att;                           // L x B x H x T x T softmax probabilities
    float *yatt;                          // L x BT x C attention output before the gate
    float *attn_gate;                     // L x BT x H attention gate values g
    float *ygated;                        // L x BT x C gated output (= yatt without the gate)
    float *ln2, *ln2_mean, *ln2_rstd;
    float *up, *mlp_gate, *hact;          // L x BT x F: x W_up^T, SwiGLU's x W_gate^T, activation
    float *lnf, *lnf_mean, *lnf_rstd;     // BT x C, BT, BT
    float *logits;                        // BT x V: logits, then probabilities (the reference
                                          // LM head's backward writes their gradient over them)
    float *losses;                        // BT
    // the gradients of activations (d loss / d x)
    float *dres;                          // (L+1) x BT x C: of the residual stream, as res
    // the others are reused by every layer of the backward pass
    float *dln;                           // of a norm's output (ln1, ln2 or lnf)
    float *dq, *dk, *dv;                  // of q, k, v
    float *dyg, *dyatt;                   // of the gated output and of the attention output
    float *dattn_gate;                    // of the attention gate's pre-activation
    float *dup, *dmlp_gate, *dhact;       // of up, of SwiGLU's gate pre-activation, of hact
    float *proj;                          // the output projections before the residual; scratch
    float *rope_cs;                       // T x hd/2 x (cos, sin) of RoPE (rope_table), or NULL
} Acts;

// One block's slices of the per-layer activation buffers.
typedef struct {
    float *x, *xmid, *xout;      // the stream entering the block, after attention, after the MLP
    float *ln1, *ln1_mean, *ln1_rstd, *ln2, *ln2_mean, *ln2_rstd;
    float *q, *k, *v, *att, *yatt, *attn_gate, *attn_out;   // attn_out: gated output, or yatt
    float *up, *mlp_gate, *hact;                        // mlp_gate: SwiGLU only
} LayerActs;

// Block l's slices: each buffer advances by one layer's size, computed for `rows` = the B x T
// the buffers were allocated for and attention rows of maxT keys.
static LayerActs layer_acts(const Acts* a, const Config* c, int l, long rows, int maxT) {
    long C = c->C, H = c->H, hd = c->C / c->H, F = c->F;
    LayerActs la;
    la.x = a->res + l * rows * C;
    la.xmid = a->resmid + l * rows * C;
    la.xout = a->res + (l + 1) * rows * C;
    la.ln1 = a->ln1 + l * rows * C;
    la.ln1_mean = a->ln1_mean + l * rows;
    la.ln1_rstd = a->ln1_rstd + l * rows;
    la.ln2 = a->ln2 + l * rows * C;
    la.ln2_mean = a->ln2_mean + l * rows;
    la.ln2_rstd = a->ln2_rstd + l * rows;
    la.q = a->q + l * rows * H * hd;
    la.k = a->k + l * rows * c->KVH * hd;
    la.v = a->v + l * rows * c->KVH * hd;
    la.att = a->att + l * rows * maxT * H;
    la.yatt = a->yatt + l * rows * H * hd;
    la.attn_gate = a->attn_gate + l * rows * H;
    la.attn_out = c->attn_gate ? a->ygated + l * rows * H * hd : la.yatt;
    la.up = a->up + l * rows * F;
    la.hact = a->hact + l * rows * F;
    la.mlp_gate = c->swiglu ? a->mlp_gate + l * rows * F : NULL;
    return la;
}

// ---- the model --------------------------------------------------------------------------------
typedef struct Model Model;
struct Model {
    Config cfg;
    int num_tensors;
    Tensor* tensors;      // layer-major order: wte, wpe, h.0.*, h.1.*, ..., lnf.*, lm_head
    size_t num_params;
    float *params, *grads;                // one contiguous block each
    float *adam_m, *adam_v;               // AdamW's moments, the same layout
    float *p[NUM_KINDS], *g[NUM_KINDS];   // start of each kind in params / grads (NULL if absent)
    size_t kind_numel[NUM_KINDS];         // numel of one slice of each kind
    int B, T;                             // activation buffers are sized for B x T
    Acts a;
    int* tokens;                          // B x T inputs of the last forward
    int* targets;                         // B x T targets, or NULL
    float loss;
};

// Block l's slice of a parameter kind and of its gradient; NULL where the configuration has no
// such tensor (biases in the llama preset, the attention gate without -G 1).
static float* param_of(const Model* m, int kind, int l) {
    return m->p[kind] ? m->p[kind] + (size_t)l * m->kind_numel[kind] : NULL;
}
static float* grad_of(const Model* m, int kind, int l) {
    return m->g[kind] ? m->g[kind] + (size_t)l * m->kind_numel[kind] : NULL;
}

// The activations and gradients of one forward and backward pass over at most B x T tokens.
// One buffer of the activations: allocated (count NULL), or with a counter only added up
// (acts_bytes, the memory estimate printed at start-up, walks the same list), or, where base is
// set, carved out of the block at base at the counter (train_gpt2.cu's plain kernels keep the same
// layout on the GPU).
static float* acts_buf(size_t* count, char* base, long floats) {
    if (!count) return zeroed_floats(floats);
    float* at = base ? (float*)(base + *count) : NULL;
    *count += floats * sizeof(float);
    return at;
}

static void acts_layout(Model* m, int B, int T, size_t* count, char* base) {
    const Config* c = &m->cfg;
    long BT = (long)B * T, L = c->L, C = c->C, hd = C / c->H;
    long qd = c->H * hd, kvd = c->KVH * hd, F = c->F, H = c->H, V = c->V;
    Acts* a = &m->a;
    m->B = B;
    m->T = T;
    a->res = acts_buf(count, base, (L + 1) * BT * C);
    a->resmid = acts_buf(count, base, L * BT * C);
    a->ln1 = acts_buf(count, base, L * BT * C);
    a->ln1_mean = acts_buf(count, base, L * BT);
    a->ln1_rstd = acts_buf(count, base, L * BT);
    a->q = acts_buf(count, base, L * BT * qd);
    a->k = acts_buf(count, base, L * BT * kvd);
    a->v = acts_buf(count, base, L * BT * kvd);
    a->att = acts_buf(count, base, L * B * H * T * T);
    a->yatt = acts_buf(count, base, L * BT * qd);
    a->attn_gate = acts_buf(count, base, L * BT * H);
    a->ygated = c->attn_gate ? acts_buf(count, base, L * BT * qd) : a->yatt;
    a->ln2 = acts_buf(count, base, L * BT * C);
    a->ln2_mean = acts_buf(count, base, L * BT);
    a->ln2_rstd = acts_buf(count, base, L * BT);
    a->up = acts_buf(count, base, L * BT * F);
    a->mlp_gate = c->swiglu ? acts_buf(count, base, L * BT * F) : NULL;
    a->hact = acts_buf(count, base, L * BT * F);
    a->lnf = acts_buf(count, base, BT * C);
    a->lnf_mean = acts_buf(count, base, BT);
    a->lnf_rstd = acts_buf(count, base, BT);
    a->logits = acts_buf(count, base, BT * V);
    a->losses = acts_buf(count, base, BT);
    a->dres = acts_buf(count, base, (L + 1) * BT * C);
    a->dln = acts_buf(count, base, BT * C);
    a->dq = acts_buf(count, base, BT * qd);
    a->dk = acts_buf(count, base, BT * kvd);
    a->dv = acts_buf(count, base, BT * kvd);
    a->rope_cs = NULL;
    if (c->rope) {
        a->rope_cs = acts_buf(count, base, T * hd);
        if (!count) rope_table(a->rope_cs, T, hd, c->rope_theta);
    }
    a->dyg = acts_buf(count, base, BT * qd);
    a->dyatt = acts_buf(count, base, BT * qd);
    a->dattn_gate = acts_buf(count, base, BT * H);
    a->dup = acts_buf(count, base, BT * F);
    a->dmlp_gate = acts_buf(count, base, BT * F);
    a->dhact = acts_buf(count, base, BT * F);
    a->proj = acts_buf(count, base, BT * (C > qd ? C : qd));
    m->tokens = (int*)acts_buf(count, base, BT);      // int and float are both 4 bytes
    m->targets = (int*)acts_buf(count, base, BT);
}

static void acts_alloc(Model* m, int B, int T) { acts_layout(m, B, T, NULL, NULL); }

static void add_tensor(Model* m, int kind, int layer, size_t kind_offset) {
    if (!m->kind_numel[kind]) return;
    Tensor* t = &m->tensors[m->num_tensors++];
    t->kind = kind;
    t->layer = layer;
    t->group = kind_info[kind].group;
    kind_shape(&m->cfg, kind, &t->rows, &t->cols);
    t->numel = m->kind_numel[kind];
    t->offset = kind_offset + (layer >= 0 ? (size_t)layer * t->numel : 0);
    if (layer >= 0) snprintf(t->name, sizeof(t->name), "h.%d.%s", layer, kind_info[kind].name);
    else snprintf(t->name, sizeof(t->name), "%s", kind_info[kind].name);
    t->lr_mult = 1.0f;
    t->decay = t->cols > 1 && t->group != G_TOK_EMB && t->group != G_POS_EMB;
}

// Storage, kind by kind: where each kind starts and how many numbers one tensor of it holds.
// Returns the total.
static size_t param_layout(const Config* c, size_t off[NUM_KINDS], size_t numel[NUM_KINDS]) {
    size_t total = 0;
    for (int kd = 0; kd < NUM_KINDS; kd++) {
        int r, k;
        off[kd] = total;
        numel[kd] = kind_shape(c, kd, &r, &k) ? (size_t)r * k : 0;
        total += numel[kd] * (kind_is_layer(kd) ? c->L : 1);
    }
    return total;
}

static void model_build(Model* m, const Config* cfg) {
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    const Config* c = &m->cfg;
    size_t off[NUM_KINDS];
    size_t total = param_layout(c, off, m->kind_numel);
    m->num_params = total;
    m->params = zeroed_floats(total);
    m->grads = zeroed_floats(total);
    m->adam_m = zeroed_floats(total);
    m->adam_v = zeroed_floats(total);
    for (int kd = 0; kd < NUM_KINDS; kd++) {
        m->p[kd] = m->kind_numel[kd] ? m->params + off[kd] : NULL;
        m->g[kd] = m->kind_numel[kd] ? m->grads + off[kd] : NULL;
    }
    // the named table: layer-major, the order a PyTorch module would list them
    m->tensors = xmalloc((size_t)NUM_KINDS * (c->L + 1) * sizeof(Tensor));
    memset(m->tensors, 0, (size_t)NUM_KINDS * (c->L + 1) * sizeof(Tensor));
    for (int kd = K_WTE; kd <= K_WPE; kd++) add_tensor(m, kd, -1, off[kd]);
    for (int l = 0; l < c->L; l++)
        for (int kd = FIRST_LAYER_KIND; kd <= LAST_LAYER_KIND; kd++) add_tensor(m, kd, l, off[kd]);
    for (int kd = K_LNFW; kd <= K_LMHEAD; kd++) add_tensor(m, kd, -1, off[kd]);
}

static void model_free(Model* m) {
    Acts* a = &m->a;
    float* bufs[] = {
            a->res,        a->resmid,   a->ln1,       a->ln1_mean,    a->ln1_rstd,  a->q,
            a->k,          a->v,        a->att,       a->yatt,        a->attn_gate, a->ln2,
            a->ln2_mean,   a->ln2_rstd, a->up,        a->mlp_gate,    a->hact,      a->lnf,
            a->lnf_mean,   a->lnf_rstd, a->logits,    a->losses,      a->dres,      a->dln,
            a->dq,         a->dk,       a->dv,        a->dyg,         a->dyatt,
            a->dattn_gate, a->dup,      a->dmlp_gate, a->dhact,       a->proj,       a->rope_cs};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) free(bufs[i]);
    if (a->ygated != a->yatt) free(a->ygated);
    free(m->params); free(m->grads); free(m->adam_m); free(m->adam_v);
    free(m->tensors); free(m->tokens); free(m->targets);
    memset(m, 0, sizeof(*m));
}

// ---- the forward pass --------------------------------------------------------------------------
// Over B x T tokens (B, T no larger than the buffers, which acts_alloc makes). With targets,
// returns the mean cross-entropy and keeps the probabilities for the backward pass; without,
// the logits buffer holds next-token probabilities (for sampling) and the return value is 0.
static float model_forward(Model* m, const int* tokens, const int* targets, int B, int T) {
    const Config* c = &m->cfg;
    Acts* a = &m->a;
    int BT = B * T, C = c->C, H = c->H, KVH = c->KVH, hd = C / H, F = c->F;
    int qd = H * hd, kvd = KVH * hd;
    if (B > m->B || T > m->T)
        fatal("internal: forward with B=%d T=%d exceeds buffers %dx%d", B, T, m->B, m->T);
    for (int i = 0; i < BT; i++) {
        if (tokens[i] < 0 || tokens[i] >= c->V)
            fatal("token id %d out of range [0, %d)", tokens[i], c->V);
        m->tokens[i] = tokens[i];
    }
    embedding_forward(a->res, tokens, m->p[K_WTE], m->p[K_WPE], B, T, C);
    for (int l = 0; l < c->L; l++) {
        LayerActs la = layer_acts(a, c, l, (long)m->B * m->T, m->T);
        // attention sublayer: xmid = x + Attn(Norm1(x))
        norm_forward(la.ln1, la.ln1_mean, la.ln1_rstd, la.x, param_of(m, K_LN1W, l),
                     param_of(m, K_LN1B, l), c->rmsnorm, c->eps, BT, C);
        impl.matmul_forward(la.q, la.ln1, param_of(m, K_WQ, l), param_of(m, K_BQ, l), BT, C, qd);
        impl.matmul_forward(la.k, la.ln1, param_of(m, K_WK, l), param_of(m, K_BK, l), BT, C, kvd);
        impl.matmul_forward(la.v, la.ln1, param_of(m, K_WV, l), param_of(m, K_BV, l), BT, C, kvd);
        if (c->rope) {
            rope_apply(la.q, a->rope_cs, B, T, H, hd, 1.0f);
            rope_apply(la.k, a->rope_cs, B, T, KVH, hd, 1.0f);
        }
        impl.attention_forward(la.yatt, la.att, la.q, la.k, la.v, B, T, H, KVH, hd, c->attn_scale);
        if (c->attn_gate) {
            impl.matmul_forward(la.attn_gate, la.ln1, param_of(m, K_ATTN_WG, l),
                                param_of(m, K_ATTN_BG, l), BT, C, H);
            attn_gate_forward(la.attn_out, la.attn_gate, la.yatt, BT, H, hd);
        }
        impl.matmul_forward(a->proj, la.attn_out, param_of(m, K_WO, l), param_of(m, K_BO, l), BT,
                            qd, C);
        residual_forward(la.xmid, la.x, a->proj, (long)BT * C);
        // MLP sublayer: xout = xmid + MLP(Norm2(xmid))
        norm_forward(la.ln2, la.ln2_mean, la.ln2_rstd, la.xmid, param_of(m, K_LN2W, l),
                     param_of(m, K_LN2B, l), c->rmsnorm, c->eps, BT, C);
        impl.matmul_forward(la.up, la.ln2, param_of(m, K_WUP, l), param_of(m, K_BUP, l), BT, C, F);
        if (c->swiglu) {
            impl.matmul_forward(la.mlp_gate, la.ln2, param_of(m, K_WGATE, l),
                                param_of(m, K_BGATE, l), BT, C, F);
            swiglu_forward(la.hact, la.mlp_gate, la.up, (long)BT * F);
        } else {
            gelu_forward(la.hact, la.up, (long)BT * F);
        }
        impl.matmul_forward(a->proj, la.hact, param_of(m, K_WDOWN, l), param_of(m, K_BDOWN, l),
                            BT, F, C);
        residual_forward(la.xout, la.xmid, a->proj, (long)BT * C);
    }
    float* xL = a->res + (long)c->L * m->B * m->T * C;
    norm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, xL, m->p[K_LNFW], m->p[K_LNFB], c->rmsnorm,
                 c->eps, BT, C);
    const float* head = c->tied ? m->p[K_WTE] : m->p[K_LMHEAD];
    impl.matmul_forward(a->logits, a->lnf, head, NULL, BT, C, c->V);
    if (c->logit_scale != 1.0f)
        for (long i = 0; i < (long)BT * c->V; i++) a->logits[i] *= c->logit_scale;
    impl.softmax_forward(a->logits, a->losses, targets, BT, c->V);
    if (!targets) return 0.0f;
    double sum = 0.0;
    for (int i = 0; i < BT; i++) {
        m->targets[i] = targets[i];
        sum += a->losses[i];
    }
    m->loss = (float)(sum / BT);
    return m->loss;
}

// ---- the backward pass -------------------------------------------------------------------------
// Gradients accumulate, so they start from zeros.
static void model_zero_grad(Model* m) {
    #pragma omp parallel for
    for (size_t i = 0; i < m->num_params; i++) m->grads[i] = 0.0f;
}

// The backward pass of the last forward (which must have had targets), adding into m->grads.
// dloss is the derivative of the loss being minimized by this batch's mean loss: 1, or 1/N when
// the update's loss is the mean over N micro-batches (gradient accumulation, -d): the N backward
// passes then sum to the gradient of the mean, as PyTorch's (loss / N).backward() on each would.
static void model_backward(Model* m, int B, int T, float dloss) {
    const Config* c = &m->cfg;
    Acts* a = &m->a;
    int BT = B * T, C = c->C, H = c->H, KVH = c->KVH, hd = C / H, F = c->F;
    int qd = H * hd, kvd = KVH * hd;
    long res_stride = (long)m->B * m->T * C;     // the stride of one layer's slice of res, dres
    size_t row_bytes = (size_t)BT * C * sizeof(float);
    // loss -> logits -> final norm
    memset(a->dln, 0, row_bytes);
    const float* head = c->tied ? m->p[K_WTE] : m->p[K_LMHEAD];
    float* dhead = c->tied ? m->g[K_WTE] : m->g[K_LMHEAD];
    impl.lm_head_backward(a->dln, dhead, a->logits, m->targets, a->lnf, head, a->proj, BT, C, c->V,
                          c->logit_scale * dloss);
    float* dres = a->dres + c->L * res_stride;     // d loss / d (the last block's output)
    memset(dres, 0, row_bytes);
    norm_backward(dres, m->g[K_LNFW], m->g[K_LNFB], a->dln, a->res + c->L * res_stride,
                  m->p[K_LNFW], a->lnf_mean, a->lnf_rstd, c->rmsnorm, BT, C);
    // blocks in reverse; dres, slice l of a->dres, becomes d loss / d (block l's input)
    for (int l = c->L - 1; l >= 0; l--) {
        LayerActs la = layer_acts(a, c, l, (long)m->B * m->T, m->T);
        // the residual connections pass the gradient of the output through unchanged: both
        // sublayers' inputs start from it, and their branches add to it
        dres = a->dres + l * res_stride;
        memcpy(dres, dres + res_stride, row_bytes);
        // MLP sublayer
        memset(a->dhact, 0, (size_t)BT * F * sizeof(float));
        impl.matmul_backward(a->dhact, grad_of(m, K_WDOWN, l), grad_of(m, K_BDOWN, l), dres,
                             la.hact, param_of(m, K_WDOWN, l), BT, F, C);
        memset(a->dln, 0, row_bytes);
        if (c->swiglu) {
            swiglu_backward(a->dmlp_gate, a->dup, la.mlp_gate, la.up, a->dhact, (long)BT * F);
            impl.matmul_backward(a->dln, grad_of(m, K_WGATE, l), grad_of(m, K_BGATE, l),
                                 a->dmlp_gate, la.ln2, param_of(m, K_WGATE, l), BT, C, F);
        } else {
            gelu_backward(a->dup, la.up, a->dhact, (long)BT * F);
        }
        impl.matmul_backward(a->dln, grad_of(m, K_WUP, l), grad_of(m, K_BUP, l), a->dup, la.ln2,
                             param_of(m, K_WUP, l), BT, C, F);
        norm_backward(dres, grad_of(m, K_LN2W, l), grad_of(m, K_LN2B, l), a->dln, la.xmid,
                      param_of(m, K_LN2W, l), la.ln2_mean, la.ln2_rstd, c->rmsnorm, BT, C);
        // attention sublayer
        memset(a->dyg, 0, (size_t)BT * qd * sizeof(float));
        impl.matmul_backward(a->dyg, grad_of(m, K_WO, l), grad_of(m, K_BO, l), dres, la.attn_out,
                             param_of(m, K_WO, l), BT, qd, C);
        memset(a->dln, 0, row_bytes);
        float* dyatt = a->dyg;
        if (c->attn_gate) {
            attn_gate_backward(a->dyatt, a->dattn_gate, a->dyg, la.yatt, la.attn_gate, BT, H, hd);
            impl.matmul_backward(a->dln, grad_of(m, K_ATTN_WG, l), grad_of(m, K_ATTN_BG, l),
                                 a->dattn_gate, la.ln1, param_of(m, K_ATTN_WG, l), BT, C, H);
            dyatt = a->dyatt;
        }
        memset(a->dq, 0, (size_t)BT * qd * sizeof(float));
        memset(a->dk, 0, (size_t)BT * kvd * sizeof(float));
        memset(a->dv, 0, (size_t)BT * kvd * sizeof(float));
        impl.attention_backward(a->dq, a->dk, a->dv, dyatt, la.att, la.q, la.k, la.v, B, T, H,
                                KVH, hd, c->attn_scale);
        if (c->rope) {
            rope_apply(a->dq, a->rope_cs, B, T, H, hd, -1.0f);
            rope_apply(a->dk, a->rope_cs, B, T, KVH, hd, -1.0f);
        }
        impl.matmul_backward(a->dln, grad_of(m, K_WQ, l), grad_of(m, K_BQ, l), a->dq, la.ln1,
                             param_of(m, K_WQ, l), BT, C, qd);
        impl.matmul_backward(a->dln, grad_of(m, K_WK, l), grad_of(m, K_BK, l), a->dk, la.ln1,
                             param_of(m, K_WK, l), BT, C, kvd);
        impl.matmul_backward(a->dln, grad_of(m, K_WV, l), grad_of(m, K_BV, l), a->dv, la.ln1,
                             param_of(m, K_WV, l), BT, C, kvd);
        norm_backward(dres, grad_of(m, K_LN1W, l), grad_of(m, K_LN1B, l), a->dln, la.x,
                      param_of(m, K_LN1W, l), la.ln1_mean, la.ln1_rstd, c->rmsnorm, BT, C);
    }
    embedding_backward(m->g[K_WTE], m->g[K_WPE], dres, m->tokens, B, T, C);
}

// ============================================================================================
// 3. Initialization: which formula each tensor gets
// ============================================================================================
//
// Three layers, each usable on its own (doc/initializers.md has one section per scheme):
//   1. a scheme ("xavier_normal", "kaiming_uniform:leaky_relu:0.2", ...) turns a tensor's shape
//      into a distribution (Dist): scheme_dist(). Each scheme is one case there, with its
//      derivation.
//   2. dist_fill() (section 6) draws the Dist call for call as nn.init does, so that after the
//      same seed a tensor here equals torch's bit for bit (orthogonal: to 5e-6, its QR differs).
//      Shapes follow PyTorch: (rows, cols) = (fan_out, fan_in).
//   3. a recipe (gpt2, llama, olmo_mitchell, mup, ...) picks a scheme per parameter group plus a
//      residual factor per tensor: InitSpec, parse_init(), model_init().

// ---- gains: torch.nn.init.calculate_gain, plus GELU and SiLU ------------------------------------

static double gelu_exact(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
static double silu(double x) { return x / (1.0 + exp(-x)); }
static double gelu_exact_sq(double x) { return gelu_exact(x) * gelu_exact(x); }
static double silu_sq(double x) { return silu(x) * silu(x); }

// E[f(z)] for z ~ N(0, 1), Simpson's rule on [-12, 12] with 4800 panels (the tails beyond carry
// less than 1e-30; the rule's error on these smooth integrands is below 1e-12).
static double gauss_expect(double (*f)(double)) {
    const int n = 4800;
    const double lo = -12.0, h = 24.0 / n;
    double s = 0.0;
    for (int i = 0; i <= n; i++) {
        double z = lo + i * h, w = (i == 0 || i == n) ? 1.0 : (i % 2 ? 4.0 : 2.0);
        s += w * f(z) * exp(-0.5 * z * z);
    }
    return s * h / 3.0 / sqrt(2.0 * M_PI);
}

// torch.nn.init.calculate_gain(nonlinearity, param): the factor g in std = g / sqrt(fan) that keeps
// the second moment of the pre-activations constant from layer to layer [InitFP §3],
// [InitGuide ch. 3]. A layer multiplies E[x^2] by fan_in Var(W) E[phi(z)^2]/Var(z)
// ([Errata 001-1]: the second moment, not the variance), so g^2 = 1 / c_phi with
// c_phi = E[phi(z)^2] at unit Var(z):
//   linear, conv*, sigmoid: 1 (PyTorch's convention; sigmoid is not derived, it is a convention)
//   relu: c = 1/2, g = sqrt(2) (He et al. 2015 [Kaiming])
//   leaky_relu(s): c = (1+s^2)/2, g = sqrt(2/(1+s^2))
//   tanh: 5/3 (PyTorch's historical constant; the exact 1/c at q = 1 is sqrt(2.53618) = 1.5925)
//   selu: 3/4 (PyTorch's value for self-normalizing nets)
//   gelu, silu: PyTorch refuses them. [InitFP §3.1] uses gain^2 = 2 "like ReLU", which is wrong:
//     E[GELU(z)^2] = 1/3 + 1/(2 pi sqrt 3) = 0.425221, E[SiLU(z)^2] = 0.355776, so gain^2 is
//     2.35172 and 2.81076 [Errata 001-7, 002-12]; computed here by quadrature.
//     These hold at unit pre-activation variance only: GELU/SiLU are not homogeneous.
// `param` is leaky_relu's negative slope (NAN: PyTorch's default 0.01); other names ignore it.
static double calculate_gain(const char* nonlinearity, double param) {
    static const char* unit[] = {"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                                 "conv_transpose2d", "conv_transpose3d", "sigmoid"};
    for (size_t i = 0; i < sizeof(unit) / sizeof(unit[0]); i++)
        if (strcmp(nonlinearity, unit[i]) == 0) return 1.0;
    if (strcmp(nonlinearity, "tanh") == 0) return 5.0 / 3;
    if (strcmp(nonlinearity, "relu") == 0) return sqrt(2.0);
    if (strcmp(nonlinearity, "leaky_relu") == 0) {
        double s = isnan(param) ? 0.01 : param;
        return sqrt(2.0 / (1 + s * s));
    }
    if (strcmp(nonlinearity, "selu") == 0) return 3.0 / 4;
    if (strcmp(nonlinearity, "gelu") == 0) return 1.0 / sqrt(gauss_expect(gelu_exact_sq));
    if (strcmp(nonlinearity, "silu") == 0) return 1.0 / sqrt(gauss_expect(silu_sq));
    fatal("unknown nonlinearity '%s' (linear sigmoid tanh relu leaky_relu selu gelu silu "
          "conv1d ...)", nonlinearity);
    return 0.0;
}

// ---- schemes: a shape in, a distribution out ----------------------------------------------------

// What one tensor is drawn from. Each kind is drawn the way one torch call draws it (dist_fill).
typedef enum { D_CONST, D_NORMAL, D_UNIFORM, D_TRUNC, D_ORTHO, D_SPARSE, D_EYE } DistKind;
struct Dist {
    DistKind kind;
    double mean, std;     // D_CONST: mean is the value; D_NORMAL, D_TRUNC, D_SPARSE: std
    double lo, hi;        // D_UNIFORM: [lo, hi); D_TRUNC: absolute bounds (torch's a, b)
    double gain;          // D_ORTHO; D_EYE: the diagonal value
    double sparsity;      // D_SPARSE
};

// A parsed scheme: "NAME[:ARG[:ARG...]]". Numbers go to arg[]; kaiming_* also take words.
typedef struct Scheme Scheme;
struct Scheme {
    char text[64];        // as given
    char name[24];
    int nargs;
    double arg[3];
    char nonlin[24];      // kaiming_*: the calculate_gain name ("relu" when not given)
    int fan_out;          // kaiming_*: ":fan_out" (mode='fan_out'): keep the backward's variance
};

static Dist dist_of(DistKind kind) {
    Dist d;
    memset(&d, 0, sizeof(d));
    d.kind = kind;
    return d;
}
static Dist dist_const(double v) { Dist d = dist_of(D_CONST); d.mean = v; return d; }
static Dist dist_normal(double mean, double std) {
    Dist d = dist_of(D_NORMAL);
    d.mean = mean, d.std = std;
    return d;
}
static Dist dist_uniform(double lo, double hi) {
    Dist d = dist_of(D_UNIFORM);
    d.lo = lo, d.hi = hi;
    return d;
}
static Dist dist_trunc(double std, double lo, double hi) {
    Dist d = dist_of(D_TRUNC);
    d.std = std, d.lo = lo, d.hi = hi;
    return d;
}
// U(-b, b) with the given std: Var U(-b, b) = b^2 / 3, so b = sqrt(3) std
static Dist uniform_of_std(double std) { return dist_uniform(-sqrt(3.0) * std, sqrt(3.0) * std); }

// The distribution a scheme gives a (rows, cols) tensor; fan_in = cols, fan_out = rows, as
// PyTorch's _calculate_fan_in_and_fan_out for a 2-D tensor. That includes embeddings: wte is
// (V, C), so its "fan_in" is C, which is exactly [SmallInit App. A]'s convention std = d^-gamma
// [Errata 000-4]. d_model is the model width
// (small_init); 0 outside a model, where cols stands in. Every arithmetic step below is the one
// PyTorch's Python performs, in the same order, in double.
static Dist scheme_dist(const Scheme* s, int rows, int cols, int d_model) {
    const char* n = s->name;
    const double* a = s->arg;
    double fan_in = cols, fan_out = rows;
    // Constants are right for norm weights (1) and biases (0). For a weight matrix they are
    // [InitGuide ch. 7]'s symmetry problem: units with equal weights in and out compute the same
    // thing, get the same gradient and never separate; all zeros is even a stationary point
    // (init_report flags it).
    if (!strcmp(n, "zeros")) return dist_const(0.0);
    if (!strcmp(n, "ones")) return dist_const(1.0);
    if (!strcmp(n, "constant")) return dist_const(a[0]);
    // The two raw distributions: Var N(m, s^2) = s^2, Var U(a, b) = (b - a)^2 / 12. PyTorch's order
    // of arguments (mean, std) and (a, b); one number is a std or a symmetric bound.
    if (!strcmp(n, "normal"))
        return s->nargs == 2 ? dist_normal(a[0], a[1]) : dist_normal(0.0, s->nargs ? a[0] : 1.0);
    if (!strcmp(n, "uniform"))
        return s->nargs == 2 ? dist_uniform(a[0], a[1])
             : s->nargs      ? dist_uniform(-a[0], a[0])
                             : dist_uniform(0.0, 1.0);
    if (!strcmp(n, "trunc_normal")) {
        // PyTorch's bounds are ABSOLUTE: trunc_normal_(w, std=0.02) cuts at +-2 = +-100 sigma, i.e.
        // not at all. [InitGuide ch. 9]'s "|x| < 2 sigma" misreads it [Errata 002-23].
        if (s->nargs == 2) fatal("trunc_normal takes STD or STD:A:B, not two numbers");
        double std = s->nargs ? a[0] : 1.0;
        return s->nargs == 3 ? dist_trunc(std, a[1], a[2]) : dist_trunc(std, -2.0, 2.0);
    }
    if (!strcmp(n, "trunc_sigma")) {
        // cut at +-K sigma: the std shrinks, by 0.8796 at K = 2 and 0.9866 at K = 3
        // [Errata 002-23]; the parameter is the std before the cut, as in PyTorch
        double k = s->nargs == 2 ? a[1] : 2.0;
        return dist_trunc(a[0], -k * a[0], k * a[0]);
    }
    // eye: W x copies the first min(rows, cols) coordinates of x; norm-preserving when square
    if (!strcmp(n, "eye")) { Dist d = dist_of(D_EYE); d.gain = 1.0; return d; }
    // sparse (Martens 2010): N(0, std^2) with ceil(S rows) zeros in each column, so each input
    // feeds only a fraction 1 - S of the units; Var = std^2 (1 - zeros/rows)
    if (!strcmp(n, "sparse")) {
        Dist d = dist_of(D_SPARSE);
        d.sparsity = a[0];
        d.std = s->nargs == 2 ? a[1] : 0.01;
        return d;
    }
    if (!strcmp(n, "lecun_normal") || !strcmp(n, "lecun_uniform")) {
        // LeCun (1998), [InitFP §1, Challenge 1]: Var(y) = fan_in Var(W) Var(x) for independent
        // zero-mean W, x, so Var(W) = 1/fan_in keeps Var(y) = Var(x). PyTorch spells it
        // kaiming_*(nonlinearity='linear'): std = 1/sqrt(fan_in); uniform bound sqrt(3) std.
        double std = calculate_gain("linear", NAN) / sqrt(fan_in);
        return !strcmp(n, "lecun_normal") ? dist_normal(0.0, std) : uniform_of_std(std);
    }
    if (!strcmp(n, "xavier_normal") || !strcmp(n, "xavier_uniform")) {
        // Glorot & Bengio (2010) [Xavier], [InitFP §2, Challenge 2], [InitGuide ch. 2]: the
        // forward pass wants Var(W) = 1/fan_in, the backward 1/fan_out; Xavier takes the
        // harmonic mean 2/(fan_in+fan_out) (not the arithmetic mean of the variances,
        // [Errata 002-8]). For a square layer it is 1/n, LeCun [Errata 001-4]. Uniform:
        // Var U(-b,b) = b^2/3, so b = sqrt(3) std = sqrt(6/(fan_in+fan_out)).
        double gain = s->nargs ? a[0] : 1.0;
        double std = gain * sqrt(2.0 / (fan_in + fan_out));
        return !strcmp(n, "xavier_normal") ? dist_normal(0.0, std) : uniform_of_std(std);
    }
    if (!strcmp(n, "kaiming_normal") || !strcmp(n, "kaiming_uniform") ||
        !strcmp(n, "torch_linear")) {
        // He et al. (2015) [Kaiming], [InitFP §3, Challenge 3], [InitGuide ch. 3]: ReLU keeps half
        // the SECOND MOMENT, E[relu(z)^2] = E[z^2]/2, so Var(W) = 2/fan_in (the variance is
        // 0.34 Var z, not half: [Errata 001-6]; the next layer needs E[x^2]). In general
        // gain^2/fan with calculate_gain's g; mode fan_out preserves the backward pass instead
        // (2/fan_out). torch_linear: nn.Linear's reset_parameters() calls
        // kaiming_uniform_(a=sqrt(5)): gain^2 = 2/(1+5), bound = sqrt(3) gain/sqrt(fan_in) =
        // 1/sqrt(fan_in), Var = 1/(3 fan_in): one sixth of He's, not He init [Errata 002-16].
        int torch_lin = !strcmp(n, "torch_linear");
        double param = torch_lin ? sqrt(5.0) : s->nargs ? a[0] : 0.0;   // kaiming_*_(a=0) default
        double gain = calculate_gain(torch_lin ? "leaky_relu" : s->nonlin, param);
        double std = gain / sqrt(s->fan_out ? fan_out : fan_in);
        return !strcmp(n, "kaiming_normal") ? dist_normal(0.0, std) : uniform_of_std(std);
    }
    if (!strcmp(n, "orthogonal")) {
        // Saxe et al. (2014) [Orthogonal], [InitGuide ch. 4]: Q from the QR of a Gaussian matrix,
        // columns times sign(diag R) so Q is uniform (Haar); Q^T Q = I preserves every norm
        // exactly, at any depth.
        Dist d = dist_of(D_ORTHO);
        d.gain = s->nargs ? a[0] : 1.0;
        return d;
    }
    if (!strcmp(n, "sigma")) return dist_normal(0.0, s->nargs ? a[0] : 0.02);  // [VarDyn E1]
    if (!strcmp(n, "gamma")) {
        // [SmallInit §4.2], [ComplexCtl §3]: W_ij ~ N(0, d_in^(-2 gamma)); gamma = 1/2 is LeCun
        // exactly (He has an extra sqrt 2, Xavier matches for square layers:
        // [Errata 000-4, 003-1]).
        // gamma = 1 at d = 2048: Var 2.38e-7 [Errata 000-1]; the large-gamma regime of
        // [SmallInit §4].
        return dist_normal(0.0, pow(fan_in, -a[0]));
    }
    if (!strcmp(n, "small_init")) {
        // Nguyen & Salazar (2019) "Transformers without tears": Var = 2/(5d) = 2/(d + 4d),
        // Xavier's harmonic rule applied to a d -> 4d MLP layer, used for every matrix (GPT-NeoX
        // small_init).
        return dist_normal(0.0, sqrt(2.0 / (5.0 * (d_model > 0 ? d_model : fan_in))));
    }
    if (!strcmp(n, "trunc_lecun")) {
        // OLMo's "mitchell" init: std 1/sqrt(fan_in), truncated at +-K std (K = 3) so that no
        // weight starts an outlier; the cut shrinks the std by 1.3% at K = 3
        double std = 1.0 / sqrt(fan_in), k = s->nargs ? a[0] : 3.0;
        return dist_trunc(std, -k * std, k * std);
    }
    fatal("internal: scheme '%s' has no distribution", n);
    return dist_const(0.0);
}

// Multiplies a distribution by f (the recipes' residual factors): the same draws, scaled.
static Dist dist_scaled(Dist d, double f) {
    d.mean *= f; d.std *= f; d.lo *= f; d.hi *= f; d.gain *= f;
    return d;
}

// ---- recipes: a scheme per parameter group, a factor per tensor, and muP ------------------------

// How the projections that write into the residual stream (attn.wo, mlp.wdown) are scaled.
typedef enum { RESID_NONE, RESID_SQRT2L, RESID_DEPTH, RESID_DEEPNET } ResidScale;
static const char* resid_names[] = {"none", "1/sqrt(2L)", "1/sqrt(2(l+1))", "deepnet (8L)^-1/4"};

// What -I, -g, --resid-scale and --mup-base select.
typedef struct {
    char first[32];             // the first word of -I (a recipe or a scheme), for the printout
    Scheme rule[NUM_GROUPS];    // an empty name: norm weights 1, biases 0
    int resid;                  // ResidScale
    int mup;                    // muP ([InitFP §5-6], corrected by [Errata 001-14])
    int mup_base;               // muP's base width: width_mult = C / mup_base
} InitSpec;

#define MUP_BASE_DEFAULT 128

// Each recipe is written in -I's own syntax: a scheme for every weight group, then overrides.
static const struct {
    const char* name;
    const char* spec;     // -I's own syntax
    int resid, mup;
    const char* help;
} recipes[] = {
    // [InitFP §4], [InitGuide ch. 5] (GPT-2, nanoGPT): N(0, 0.02^2) everywhere; the 2L projections
    // that add into the residual stream get 0.02/sqrt(2L) so its variance grows by 1 + sigma^2, not
    // 1 + 2L sigma^2 ([Errata 001-10]: 161x at L=80 unscaled, not 81x)
    {"gpt2", "sigma:0.02", RESID_SQRT2L, 0, "N(0,0.02^2), out/down x 1/sqrt(2L) [InitFP §4]"},
    // [InitGuide ch. 7]'s "Llama" column (the post's own proposal, not Meta's or HF's recipe:
    // [Errata 002-21]): embeddings 1/sqrt(d) (wte is (V, d): fan_in d), He normal for every
    // matrix, residual projections / sqrt(2L). It applies to attn.wo AND mlp.wdown here (the post's
    // code misses Llama's o_proj by matching 'out_proj').
    {"llama", "kaiming_normal:relu,emb=lecun_normal,pos=lecun_normal", RESID_SQRT2L, 0,
     "[InitGuide ch. 7]: embeddings N(0,1/d), He normal, out/down x 1/sqrt(2L)"},
    // Hugging Face LlamaPreTrainedModel._init_weights: N(0, 0.02^2) for every Linear and Embedding
    // (initializer_range), no residual scaling ([Errata 002-21], point 3)
    {"hf_llama", "sigma:0.02", RESID_NONE, 0,
     "N(0,0.02^2) everywhere, no residual scaling (HF Llama)"},
    // OLMo "mitchell": every matrix N(0, 1/fan_in) truncated at +-3 sigma; output projections of
    // block l (from 0) 1/sqrt(2 fan_in (l+1)) = the same times 1/sqrt(2(l+1))
    {"olmo_mitchell", "trunc_lecun:3", RESID_DEPTH, 0,
     "N(0,1/fan_in) cut at 3 sigma, out/down x 1/sqrt(2(l+1))"},
    // depth-scaled (TorchTitan's depth_init): N(0, 0.02^2), output projections of block l
    // 0.02/sqrt(2(l+1))
    {"depth_scaled", "sigma:0.02", RESID_DEPTH, 0, "N(0,0.02^2), out/down x 1/sqrt(2(l+1))"},
    {"small_init", "small_init", RESID_NONE, 0, "N(0, 2/(5d)) everywhere (Nguyen & Salazar 2019)"},
    // ReZero / SkipInit / Fixup style: each block starts as the identity, the residual stream is
    // the embedding until training opens the branches
    {"zero_resid", "sigma:0.02,out=zeros,down=zeros", RESID_NONE, 0,
     "N(0,0.02^2), out/down = 0 (blocks start as identity)"},
    // DeepNet (Wang et al. 2022), decoder-only: Xavier, then beta = (8N)^(-1/4) on the FFN, the
    // value and the output projections (N = L blocks). DeepNet's residual up-weighting
    // alpha = (2N)^(1/4) belongs to its Post-LN architecture and is not applied here (this model
    // is Pre-LN).
    {"deepnet", "xavier_normal", RESID_DEEPNET, 0, "Xavier normal, v/out/up/gate/down x (8L)^-1/4"},
    // muP for Adam (Tensor Programs V [muP] Table 3; [Errata 001-14]): hidden N(0, 1/fan_in) with
    // lr x 1/width_mult, embeddings with a width-independent N(0, 1) (nn.Embedding's default), the
    // readout zero with a forward multiplier 1/width_mult, attention 1/d_head. See mup_configure().
    {"mup", "lecun_normal,emb=normal:1,pos=normal:1,head=zeros", RESID_NONE, 1,
     "muP (untied head): hidden N(0,1/fan_in) lr/width_mult, emb N(0,1), head 0 x 1/width_mult, "
     "attn 1/d_head"},
};
#define NUM_RECIPES ((int)(sizeof(recipes) / sizeof(recipes[0])))

// The residual factor of one tensor: 1 for all but the projections each recipe scales.
static double resid_factor(const InitSpec* spec, const Tensor* t, int L) {
    int resid = t->kind == K_WO || t->kind == K_WDOWN;
    switch (spec->resid) {
    case RESID_SQRT2L: return resid ? 1.0 / sqrt(2.0 * L) : 1.0;
    case RESID_DEPTH: return resid ? 1.0 / sqrt(2.0 * (t->layer + 1)) : 1.0;
    case RESID_DEEPNET:
        return resid || t->kind == K_WV || t->kind == K_WUP || t->kind == K_WGATE
               ? pow(8.0 * L, -0.25) : 1.0;
    }
    return 1.0;
}

// The scheme of one tensor: its group's rule, or 1 for norm weights and 0 for biases.
static Scheme tensor_scheme(const InitSpec* spec, const Tensor* t) {
    Scheme s = spec->rule[t->group];
    if (!s.name[0]) snprintf(s.name, sizeof(s.name), "%s", t->group == G_NORM ? "ones" : "zeros");
    return s;
}

// The distribution one tensor of m is drawn from under spec.
static Dist tensor_dist(const InitSpec* spec, const Model* m, const Tensor* t) {
    Scheme s = tensor_scheme(spec, t);
    Dist d = scheme_dist(&s, t->rows, t->cols, m->cfg.C);
    return dist_scaled(d, resid_factor(spec, t, m->cfg.L));
}

// muP for Adam (Yang et al., Tensor Programs V [muP], Table 3), as [Errata 001-14] corrects
// [InitFP §5-6]. With width_mult = C / base:
//   hidden matrices (qkv, gate, out, up, down): init Var 1/fan_in (the recipe), lr x 1/width_mult
//     (= base_fan_in / fan_in: 256/8192 = 0.03125, [Errata 001-17]): Adam moves every entry by
//     ~lr whatever the width, and fan_in such moves add up coherently in W x, so the lr must fall
//     as 1/fan_in to keep the change of each output O(1) [Errata 001-15].
//   the readout (lm_head): zero at init, logits multiplied by 1/width_mult, lr x 1 (the mup
//     package's MuReadout form). [InitFP §5.5]'s MuPLinear has neither and is not muP
//     [Errata 001-14].
//   embeddings, norms, biases: lr x 1, embedding init independent of width.
//   attention: q.k / d_head instead of q.k / sqrt(d_head): q and k become correlated during
//     training, so q.k grows like d_head, not sqrt(d_head).
//   the attention gate W_g [SmallInit eqs. 3-4], H x C: a hidden matrix too. x W_g is a
//     pre-activation inside the block, like q, k and v: it must be Theta(1) at init and move
//     Theta(1) per step, which init Var 1/fan_in and lr / width_mult give whatever H is
//     (doc/initializers.md, "muP and the attention gate", has the reasoning and the check).
// This changes the forward pass (Config.attn_scale, Config.logit_scale; the backward pass uses the
// same two numbers), so it happens before a checkpoint is loaded, which checks them.
static void mup_configure(Model* m, int base) {
    Config* c = &m->cfg;
    if (c->tied)
        fatal("-I mup needs an untied head (--tie 0): the readout starts at 0 with its own "
              "multiplier, the embedding does not");
    if (base <= 0) fatal("--mup-base must be positive");
    double width_mult = (double)c->C / base;
    c->attn_scale = 1.0f / (float)(c->C / c->H);
    c->logit_scale = (float)(1.0 / width_mult);
    for (int i = 0; i < m->num_tensors; i++) {
        Tensor* t = &m->tensors[i];
        Group g = t->group;
        int hidden = g == G_QKV || g == G_ATTN_GATE || g == G_OUT || g == G_UP || g == G_DOWN;
        t->lr_mult = hidden ? (float)(1.0 / width_mult) : 1.0f;
    }
}

// Initializes every tensor of m in the table's order (wte, wpe, h.0.*, ..., lnf.*, lm_head), all
// from one generator seeded once, and applies muP's forward multipliers and learning rates.
static void model_init(Model* m, const InitSpec* spec, uint64_t seed) {
    if (spec->mup) mup_configure(m, spec->mup_base);     // first: it may refuse the model
    Rng* g = rng_new(seed);
    for (int i = 0; i < m->num_tensors; i++) {
        const Tensor* t = &m->tensors[i];
        Dist d = tensor_dist(spec, m, t);
        dist_fill(g, m->params + t->offset, t->rows, t->cols, &d);
    }
    free(g);
}

// ============================================================================================
// 4. AdamW with decoupled weight decay, the learning-rate schedule, gradient clipping
// ============================================================================================

typedef struct OptConfig OptConfig;
struct OptConfig {
    float lr;           // peak learning rate
    float lr_floor;     // the cosine decays to lr * lr_floor
    int warmup, steps;
    float beta1, beta2, adam_eps;
    float weight_decay; // lambda, [ComplexCtl eq. 1]
    float clip;         // global gradient-norm clip, 0 = off
};

// Linear warmup over `warmup` steps, then cosine decay to lr * lr_floor at the last step.
static float lr_at(const OptConfig* o, int step) {
    if (step < o->warmup) return o->lr * (step + 1) / o->warmup;
    double span = o->steps - o->warmup;
    double ratio = span > 0 ? (step - o->warmup) / span : 0.0;
    if (ratio > 1.0) ratio = 1.0;
    double floor_lr = o->lr * o->lr_floor;
    return (float)(floor_lr + 0.5 * (1.0 + cos(M_PI * ratio)) * (o->lr - floor_lr));
}

// The global gradient norm sqrt(sum g^2) over every gradient, summed in double: one sum per
// tensor, the tensors spread over the threads, then added in order, so that the norm is the same
// on any number of threads. `omp simd` lets a tensor's sum run in vector lanes (their partial sums
// added at the end, an order fixed when the program is compiled).
static double grad_norm(const Model* m) {
    double* part = xmalloc((size_t)m->num_tensors * sizeof(double));
    #pragma omp parallel for schedule(dynamic)
    for (int i = 0; i < m->num_tensors; i++) {
        const float* g = m->grads + m->tensors[i].offset;
        double s = 0.0;
        #pragma omp simd reduction(+ : s)
        for (size_t j = 0; j < m->tensors[i].numel; j++) s += (double)g[j] * g[j];
        part[i] = s;
    }
    double total = 0.0;
    for (int i = 0; i < m->num_tensors; i++) total += part[i];
    free(part);
    return sqrt(total);
}

// Gradient clipping (-z): the factor every gradient is multiplied by, so that their global norm
// is at most clip (0: off).
HOSTDEV static inline float clip_scale(float clip, double norm) {
    return clip > 0 && norm > clip ? (float)(clip / (norm + 1e-6)) : 1.0f;
}

// The constants of step t (counted from 1) for one tensor: its decay factor 1 - lr lambda (1 if
// it does not decay), lr / (1 - b1^t) and sqrt(1 - b2^t). lr is the scheduled rate times the
// tensor's multiplier (muP, [InitFP §5]), for both terms. Which tensors decay (Tensor.decay):
// every weight matrix; the embeddings wte, wpe only with --decay-emb 1; never norm gains or
// biases, which are scales and offsets rather than the weights whose size [ComplexCtl] controls.
typedef struct { float decay, step_size, bc2_sqrt; } AdamwScalars;
static AdamwScalars adamw_scalars(const OptConfig* o, const Tensor* tn, float sched_lr, int t) {
    float lr = sched_lr * tn->lr_mult;
    AdamwScalars k;
    k.decay = tn->decay ? 1.0f - lr * o->weight_decay : 1.0f;
    k.step_size = (float)(lr / (1.0 - pow(o->beta1, t)));
    k.bc2_sqrt = (float)sqrt(1.0 - pow(o->beta2, t));
    return k;
}

// One AdamW step of n consecutive parameters of one tensor, PyTorch's operation order, with g the
// gradient times clipping's factor grad_scale:
//   theta <- theta (1 - lr lambda)                        decoupled weight decay [ComplexCtl eq. 1]
//   m <- b1 m + (1-b1) g ;  v <- b2 v + (1-b2) g^2
//   theta <- theta - lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// [ComplexCtl eq. 1] writes the decay as theta - lambda C theta without defining C; C = lr (the
// scheduled learning rate) is the only reading under which its lambda = 1 makes sense
// [Errata 003-2].
static void adamw_update(float* p, const float* g, float* mom, float* var, size_t n,
                         AdamwScalars k, const OptConfig* o, float grad_scale) {
    // the constants in locals: read through o inside the loop, they could (for all the compiler
    // knows) change with every store to p, mom or var, and the loop would not vectorize
    const float beta1 = o->beta1, beta2 = o->beta2, eps = o->adam_eps;
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * grad_scale;
        p[i] *= k.decay;
        mom[i] = beta1 * mom[i] + (1.0f - beta1) * gi;
        var[i] = beta2 * var[i] + (1.0f - beta2) * gi * gi;
        p[i] -= k.step_size * mom[i] / (sqrtf(var[i]) / k.bc2_sqrt + eps);
    }
}

// AdamW over every tensor of the model.
static void adamw_step(Model* m, const OptConfig* o, float sched_lr, int t, float grad_scale) {
    for (int i = 0; i < m->num_tensors; i++) {
        const Tensor* tn = &m->tensors[i];
        size_t at = tn->offset;
        adamw_update(m->params + at, m->grads + at, m->adam_m + at, m->adam_v + at, tn->numel,
                     adamw_scalars(o, tn, sched_lr, t), o, grad_scale);
    }
}

// ============================================================================================
// 5. Training: batches, one update, the validation loss, samples, the loop, a whole run
// ============================================================================================

// A token stream in memory: bytes of text (vocabulary 256), or GPT-2 tokens from an llm.c token
// shard. dataset_load (section 7) reads either.
struct Dataset {
    uint16_t* tok;
    size_t n;
    int is_shard;
};

// A batch of B windows of T + 1 tokens at random offsets: inputs tok[off .. off+T-1], targets the
// next token of each, tok[off+1 .. off+T]. The offsets come from the data generator, whose state
// goes into checkpoints, so a resumed run sees the same batches.
static void dataset_random_batch(const Dataset* d, Rng* g, int* inp, int* tgt, int B, int T) {
    size_t range = d->n - T - 1;
    for (int b = 0; b < B; b++) {
        size_t off = rng_u64(g) % (range + 1);
        for (int t = 0; t < T; t++) {
            inp[b * T + t] = d->tok[off + t];
            tgt[b * T + t] = d->tok[off + t + 1];
        }
    }
}

// `rows` consecutive windows from token `off` on: row b the T tokens from off + b T as inputs and
// the next token of each as targets.
static void dataset_rows_at(const Dataset* d, size_t off, int rows, int T, int* inp, int* tgt) {
    for (int b = 0; b < rows; b++)
        for (int t = 0; t < T; t++) {
            inp[b * T + t] = d->tok[off + (size_t)b * T + t];
            tgt[b * T + t] = d->tok[off + (size_t)b * T + t + 1];
        }
}

// The data cut into consecutive batches from its start: batch i holds the B x T tokens from
// i B T on as inputs and the next token of each as targets, row b the window from (i B + b) T. The
// validation loss is the mean over the first batches; --data-order sequential trains on them in
// turn (llm.c's order with its shuffling off).
static void dataset_batch_at(const Dataset* d, long i, int* inp, int* tgt, int B, int T) {
    dataset_rows_at(d, (size_t)i * B * T, B, T, inp, tgt);
}

// How many such batches the data holds (the last target must exist).
static long dataset_num_batches(const Dataset* d, int B, int T) {
    return (long)((d->n - 1) / ((size_t)B * T));
}

// --data-order: random windows (dataset_random_batch), the file in consecutive batches from its
// start (dataset_batch_at), or llm.c's shuffled batches (llmc_batch). doc/log.md section 3.
enum { ORDER_RANDOM, ORDER_SEQUENTIAL, ORDER_LLMC };
static const char* const data_order_names[] = {"random", "sequential", "llmc"};

// A run: its settings, which Part II reads from the flags and checks (run_plan, section 12), and
// the state the loop works on, which train_run sets up.
struct Trainer {
    const char *train_path, *val_path;   // -i, -j
    Config cfg;             // the model (V: the data's vocabulary)
    InitSpec init;          // its initialization (-I, -g, --resid-scale, --mup-base)
    uint64_t seed;          // -r: the initialization draws from seed, the batches from seed + 1,
                            // the samples from seed + 2
    OptConfig opt;          // learning rate, schedule, AdamW's constants, clipping
    int B, T, micro;        // micro-batches of B x T per update (-b, -t, -d)
    int order;              // --data-order: ORDER_RANDOM, ORDER_SEQUENTIAL or ORDER_LLMC
    int steps;              // -x
    int val_every, val_batches;     // the validation loss every -v steps, over -m batches
    int sample_every, sample_len;   // a sample of -l tokens every -s steps and at the end
    // the state
    Dataset *train, *val;
    Model* model;
    int *inp, *tgt;         // one update's micro-batches, micro x B x T
    Rng *data_rng, *sample_rng;
    LlmcOrder* llmc;        // ORDER_LLMC's permutations
    const Decoder* dec;     // token ids to text
    int first_step;         // 0, or a checkpoint's step (-y)
    int resumed;            // from a checkpoint, whose first validation loss was logged then
};

// Batch k of a run (k = step x micro + micro-batch): random windows; with --data-order sequential
// the consecutive batches in turn, from the start again when they run out; with llmc, llm.c's
// shuffled batches.
static void next_batch(const Trainer* tr, long k, int* inp, int* tgt) {
    const Dataset* d = tr->train;
    if (tr->order == ORDER_RANDOM)
        dataset_random_batch(d, tr->data_rng, inp, tgt, tr->B, tr->T);
    else if (tr->order == ORDER_SEQUENTIAL)
        dataset_batch_at(d, k % dataset_num_batches(d, tr->B, tr->T), inp, tgt, tr->B, tr->T);
    else
        llmc_batch(tr, k, inp, tgt);
}

// One update's gradient: the forward and backward passes of `micro` micro-batches of B x T, the
// i-th at inp + i B T, each backward adding 1/micro of its batch's mean-loss gradient (gradient
// accumulation, -d; micro 1 is the plain step). Returns their mean loss, the update's.
static float compute_gradients(Model* m, const int* inp, const int* tgt, int B, int T, int micro) {
    long BT = (long)B * T;
    double loss_sum = 0.0;
    model_zero_grad(m);
    for (int mb = 0; mb < micro; mb++) {
        loss_sum += model_forward(m, inp + mb * BT, tgt + mb * BT, B, T);
        model_backward(m, B, T, 1.0f / micro);
    }
    return (float)(loss_sum / micro);
}

// The mean loss over the first `batches` validation batches (fixed: consecutive windows from the
// start of the validation data).
static double evaluate(Model* m, const Dataset* val, int batches, int B, int T, int* inp,
                       int* tgt) {
    int avail = dataset_num_batches(val, B, T);
    if (batches > avail) batches = avail;
    double sum = 0.0;
    for (int i = 0; i < batches; i++) {
        dataset_batch_at(val, i, inp, tgt, B, T);
        sum += model_forward(m, inp, tgt, B, T);
    }
    return batches ? sum / batches : NAN;
}

// The token whose probability interval holds u, a uniform draw from [0, 1): the intervals are laid
// end to end in token order (the inverse of the cumulative distribution).
static int sample_token(const float* probs, int V, float u) {
    float cdf = 0.0f;
    for (int i = 0; i < V; i++) {
        cdf += probs[i];
        if (u < cdf) return i;
    }
    return V - 1;       // u beyond the rounded sum
}

// Sampling: feed the last T tokens, draw the next from softmax(logits / 1) with the sample
// generator. The prompt is the first token of the validation data.
static void sample_text(Model* m, Rng* g, const Decoder* dec, int T, int first_tok, int length) {
    int* ctx = xmalloc((size_t)(length + 1) * sizeof(int));
    ctx[0] = first_tok;
    print_token(dec, first_tok);
    for (int n = 1; n <= length; n++) {
        int start = n > T ? n - T : 0, len = n - start;
        model_forward(m, ctx + start, NULL, 1, len);    // no targets: probabilities in logits
        ctx[n] = sample_token(m->a.logits + (size_t)(len - 1) * m->cfg.V, m->cfg.V,
                              rng_uniform(g));
        print_token(dec, ctx[n]);
    }
    printf("\n");
    fflush(stdout);
    free(ctx);
}

// When the loop validates and samples: every val_every (sample_every) steps and at the end; a
// resumed run does not validate again at its first step (the checkpoint's run logged it).
static int validation_due(const Trainer* tr, int step) {
    return tr->val_every && tr->val_batches > 0 &&
           (step % tr->val_every == 0 || step == tr->steps) &&
           !(tr->resumed && step == tr->first_step);
}
static int sample_due(const Trainer* tr, int step) {
    return (tr->sample_every && step % tr->sample_every == 0 && step > tr->first_step) ||
           (step == tr->steps && tr->sample_len > 0);
}

// A monotonic clock in milliseconds, for the time of a step.
static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// The progress line of one update.
static void print_step(const Trainer* tr, int step, float loss, float lr, double norm, double ms,
                       int skipped) {
    printf("step %5d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s%s\n", step + 1,
           tr->steps, loss, lr, norm, ms, tr->micro * (double)tr->B * tr->T / (ms / 1e3),
           skipped ? " | loss spike: update skipped" : "");
}

// The training loop: the validation loss and a sample when due, then draw a batch, forward,
// backward, clip, AdamW, print. Part II keeps the run's record in three calls: the validation loss
// and checkpoints before a step; the NaN stop and the probes after the gradient; the log after.
static void train(Trainer* tr, Run* run) {
    Model* m = tr->model;
    long BT = (long)tr->B * tr->T;
    for (int step = tr->first_step; step <= tr->steps; step++) {
        double val_loss = NAN;
        if (validation_due(tr, step)) {
            val_loss = evaluate(m, tr->val, tr->val_batches, tr->B, tr->T, tr->inp, tr->tgt);
            printf("step %d | val loss %.6f\n", step, val_loss);
        }
        if (sample_due(tr, step)) {
            printf("---- sample at step %d ----\n", step);
            int sample_T = tr->T < m->cfg.maxT ? tr->T : m->cfg.maxT;
            sample_text(m, tr->sample_rng, tr->dec, sample_T, tr->val->tok[0], tr->sample_len);
            printf("----\n");
        }
        run_before_step(run, step, val_loss);
        if (step == tr->steps) break;
        double t0 = now_ms();
        for (int mb = 0; mb < tr->micro; mb++)
            next_batch(tr, (long)step * tr->micro + mb, tr->inp + mb * BT, tr->tgt + mb * BT);
        float loss = compute_gradients(m, tr->inp, tr->tgt, tr->B, tr->T, tr->micro);
        double norm = grad_norm(m);
        int skip = run_inspect(run, step, loss, norm);
        float lr = lr_at(&tr->opt, step);
        if (!skip) adamw_step(m, &tr->opt, lr, step + 1, clip_scale(tr->opt.clip, norm));
        double ms = now_ms() - t0;
        print_step(tr, step, loss, lr, norm, ms, skip);
        run_after_step(run, step, loss, lr, norm, ms);
    }
}

// A whole run, in the order of llm.c's main: the data, the model built and initialized, its
// buffers, then the loop. tr holds the settings; run_start adds what the flags ask beyond them
// (a checkpoint to resume, the output directory and its log, the probes).
static void train_run(Trainer* tr, Run* run) {
    // the data: byte text (vocabulary 256) or llm.c token shards (GPT-2's 50257 tokens)
    Dataset train_data, val_data;
    dataset_load(&train_data, tr->train_path, tr->cfg.V);
    dataset_load(&val_data, tr->val_path, tr->cfg.V);
    // the model and its initialization (sections 2 and 3)
    Model model;
    model_build(&model, &tr->cfg);
    model_init(&model, &tr->init, tr->seed);
    // the activations of one micro-batch, and the tokens of one update
    acts_alloc(&model, tr->B, tr->T);
    tr->inp = xmalloc((size_t)tr->micro * tr->B * tr->T * sizeof(int));
    tr->tgt = xmalloc((size_t)tr->micro * tr->B * tr->T * sizeof(int));
    tr->train = &train_data, tr->val = &val_data, tr->model = &model;
    run_start(run);
    train(tr, run);
    model_free(&model);
    free(train_data.tok), free(val_data.tok), free(tr->inp), free(tr->tgt);
}


// ############################################################################################
// PART II. MACHINERY
// What Part I calls but need not show: PyTorch's random numbers bit for bit, the fast twins, the
// probes, the command line, checkpoints, a run's set-up and hooks, and the coordinate check.
// ############################################################################################

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
// FATAL_HOOK is what fatal() does once it has written its message into fatal_msg (section 7).
// test_gpt2.c replaces it with a jump back into the test, to check in-process that bad input is
// refused with the message that names the problem.
#ifndef FATAL_HOOK
#define FATAL_HOOK() (fprintf(stderr, "error: %s\n", fatal_msg), exit(1))
#endif
// TRAIN_GPT2_NO_MAIN: test_gpt2.c, train_gpt2.cu and the dev/ programs include this file and
// bring their own main. train_gpt2.cu compiles it as C++ (its AnyPtr comes first).

// ============================================================================================
// 6. Random numbers: PyTorch's CPU generator, so that an initializer here and nn.init there
//    produce the same tensor from the same seed
// ============================================================================================

// ----------------------------------------------------------------------------
// PyTorch-compatible CPU random number generation and nn.init primitives
//
// Goal: with the same seed, produce bit-identical float32 tensors to
// PyTorch 1.13 on CPU (Debian python3-torch), so that C training runs can start
// from exactly the same weights as the PyTorch reference.
//
// What is matched (checked by test_gpt2.c against tensors dev/ref/make_init_fixtures.py draws):
//   - torch.manual_seed + the mt19937 engine (at::mt19937)
//   - tensor.uniform_(a, b)               float32: 24 random bits per element
//   - tensor.normal_(mean, std)           float32, two code paths:
//       n >= 16: "normal_fill": all uniforms first, then Box-Muller in blocks of
//                16 using the AVX2 kernel's single precision log/sincos
//       n <  16: scalar double precision Box-Muller with a cached second value
//   torch 1.13 picks its AVX2 kernels by default on x86-64 even when the CPU
//   has AVX512; ATEN_CPU_CAPABILITY=avx512 gives the same bits, but
//   ATEN_CPU_CAPABILITY=default (no FMA, scalar normal_fill) gives different
//   bits for uniform_/normal_/trunc_normal_ and is NOT what this code matches.
//   sin/cos/log/logf/erff/expf come from the C library, as in torch: exactness
//   assumes the same (glibc) libm that torch itself calls.
//   - nn.init.trunc_normal_  (uniform_ -> erfinv_ -> mul_ -> add_ -> clamp_)
//   - nn.init.sparse_        (normal_ then randperm per column)
//   - nn.init.orthogonal_    (normal_ then QR; QR is NOT bit-exact vs LAPACK)
//
// Floating point contraction: the AVX2 build of PyTorch lets GCC fuse some
// multiply+add pairs into FMA instructions. We reproduce those with explicit
// fmaf()/fma() calls (each one checked: replacing it by mul+add breaks the
// match, or, for the n < 16 normal path, seen in torch's disassembly). Every other multiply in this
// file either feeds something that is not an add, or goes through mul_rounded() (a volatile store)
// where torch rounds the product before adding. So the compiler has nothing left to contract:
// results are identical with -O2, -O3 -march=native and any -ffp-contract setting. Never compile
// this with -ffast-math.
// ----------------------------------------------------------------------------

// The generator's whole state. Plain old data: checkpoints can fwrite() it. torch keeps the same
// things: the mt19937 state plus an optional cached second Box-Muller sample for the double
// precision normal path.
#define RNG_MT_N 624
struct Rng {
    uint32_t mt[RNG_MT_N];
    int mti;                // index of the next word to temper; 624 = twist first
    int has_next_normal;    // 1 if next_normal holds a cached sample
    double next_normal;     // cached r*sin(theta) from the scalar normal path
};

#define RNG_MT_M 397
#define RNG_PI 3.14159265358979323846


// torch.manual_seed(seed): standard mt19937 init with the low 32 bits of the
// seed (so seed 2**32+5 behaves like seed 5). It also clears the cached normal.
static void rng_seed(Rng* g, uint64_t seed) {
    memset(g, 0, sizeof(*g));
    g->mt[0] = (uint32_t)(seed & 0xffffffffu);
    for (int i = 1; i < RNG_MT_N; i++) {
        uint32_t prev = g->mt[i - 1];
        g->mt[i] = 1812433253u * (prev ^ (prev >> 30)) + (uint32_t)i;
    }
    g->mti = RNG_MT_N; // torch regenerates the whole block on the first draw
    g->has_next_normal = 0;
    g->next_normal = 0.0;
}

// regenerate all 624 words (the standard mt19937 "twist")
static void rng_twist(Rng* g) {
    for (int k = 0; k < RNG_MT_N; k++) {
        uint32_t y = (g->mt[k] & 0x80000000u) | (g->mt[(k + 1) % RNG_MT_N] & 0x7fffffffu);
        uint32_t v = g->mt[(k + RNG_MT_M) % RNG_MT_N] ^ (y >> 1);
        if (y & 1u) { v ^= 0x9908b0dfu; }
        g->mt[k] = v;
    }
    g->mti = 0;
}

// one mt19937 draw (torch: generator->random())
static uint32_t rng_u32(Rng* g) {
    if (g->mti >= RNG_MT_N) { rng_twist(g); }
    uint32_t y = g->mt[g->mti++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= (y >> 18);
    return y;
}

// torch: generator->random64(): the FIRST draw becomes the HIGH 32 bits
static uint64_t rng_u64(Rng* g) {
    uint64_t hi = rng_u32(g);
    uint64_t lo = rng_u32(g);
    return (hi << 32) | lo;
}

// float in [0,1): torch keeps the low 24 bits (float mantissa digits) of one
// 32-bit draw and scales by 2^-24. Exact, no rounding involved.
static float rng_uniform01_f32(Rng* g) {
    return (float)(rng_u32(g) & 0xffffffu) * (1.0f / 16777216.0f);
}

// double in [0,1): low 53 bits of a random64() draw times 2^-53.
static double rng_uniform01_f64(Rng* g) {
    return (double)(rng_u64(g) & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// The float-argument API vs Python doubles: in a few places torch uses the
// Python double itself (normal_ with n < 16, trunc_normal_'s bounds, sparse_'s
// ceil), and (double)0.02f != 0.02. So the float entry points first recover
// the double the caller most likely typed: the shortest decimal (at most 9
// significant digits) that rounds to f, e.g. 0.02f -> 0.02, 0.3f -> 0.3.
// m / 10^k with both exact is correctly rounded, i.e. equal to what Python's
// parser gives for the literal. Computed values (1/sqrt(768)) can't be
// recovered this way: use the *_d functions with the double for those.
static double float_to_decimal_double(float f) {
    if (f == 0.0f || !isfinite(f)) { return (double)f; }
    double x = fabs((double)f);
    int e = (int)floor(log10(x)); // decimal exponent of the leading digit
    for (int digits = 1; digits <= 9; digits++) {
        int k = digits - 1 - e;                 // scale x by 10^k to get `digits` digits
        if (k > 22 || k < -22) { break; }       // 10^|k| exact in double up to 10^22
        double p10 = 1.0;
        for (int i = 0; i < (k >= 0 ? k : -k); i++) { p10 *= 10.0; }
        double m = nearbyint(k >= 0 ? x * p10 : x / p10);
        double d = (k >= 0) ? m / p10 : m * p10;
        if ((float)d == (float)x) { return f < 0.0f ? -d : d; }
    }
    return (double)f;
}

// a*b rounded to float, hidden from the optimizer: with -march=native GCC
// would otherwise contract "a*b + c" into one FMA where torch rounds twice.
static float mul_rounded(float a, float b) {
    volatile float p = a * b;
    return p;
}

// tensor.uniform_(a, b) on float32. torch casts a, b to float, computes
// (b - a) in float, and the AVX2 build fuses x*(b-a)+a into one FMA.
static void init_uniform(Rng* g, float* w, size_t n, float a, float b) {
    float range = b - a;
    for (size_t i = 0; i < n; i++) {
        w[i] = fmaf(rng_uniform01_f32(g), range, a);
    }
}

// ----------------------------------------------------------------------------
// normal_, scalar path (n < 16): torch's at::normal_distribution<double>.
// Box-Muller in double; the second value r*sin(theta) is cached in the
// generator and consumed by the next scalar normal draw (even in a later
// normal_ call). The final val*std+mean is fused (FMA) in the AVX2 build.

static double rng_normal_f64(Rng* g, double mean, double std) {
    double ret;
    if (g->has_next_normal) {
        ret = g->next_normal;
        g->has_next_normal = 0;
    } else {
        double u1 = rng_uniform01_f64(g);
        double u2 = rng_uniform01_f64(g);
        double r = sqrt(-2.0 * log(1.0 - u2)); // 1-u2 in (0,1]: log is finite
        double theta = (2.0 * RNG_PI) * u1;
        g->next_normal = r * sin(theta);
        g->has_next_normal = 1;
        ret = r * cos(theta);
    }
    return fma(ret, std, mean);
}

// ----------------------------------------------------------------------------
// normal_, vector path (n >= 16): torch's AVX2 normal_fill uses the
// "avx_mathfun" single precision log and sincos (Cephes polynomials). We redo
// them lane by lane with exactly the same operation order. The fmaf() calls sit
// exactly where GCC 12 (which built the Debian torch) contracted mul+add.

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

// natural log, valid for the inputs used here: x in (0, 1]
static float avx2_logf(float x) {
    if (x < 1.17549435e-38f) { x = 1.17549435e-38f; } // cut off denormals (max with min normal)
    // split x = m * 2^e with m in [0.5, 1)
    int32_t ex = (int32_t)(f2u(x) >> 23) - 0x7f;
    float m = u2f((f2u(x) & ~0x7f800000u) | f2u(0.5f));
    float e = (float)ex + 1.0f;
    // if m < sqrt(1/2): e -= 1, m = 2m - 1 else m = m - 1 (done as two adds, like the SIMD code)
    float tmp = 0.0f;
    if (m < 0.707106781186547524f) { tmp = m; e = e - 1.0f; }
    m = (m + -1.0f) + tmp;
    float z = m * m;
    // Cephes polynomial in Horner form, each step one FMA
    float y = 7.0376836292E-2f;
    y = fmaf(y, m, -1.1514610310E-1f);
    y = fmaf(y, m, 1.1676998740E-1f);
    y = fmaf(y, m, -1.2420140846E-1f);
    y = fmaf(y, m, 1.4249322787E-1f);
    y = fmaf(y, m, -1.6668057665E-1f);
    y = fmaf(y, m, 2.0000714765E-1f);
    y = fmaf(y, m, -2.4999993993E-1f);
    y = fmaf(y, m, 3.3333331174E-1f);
    y = fmaf(y * m, z, e * -2.12194440e-4f); // y*x*z + e*q1
    y = fmaf(-z, 0.5f, y);                   // y - z/2
    float r = m + y;
    return fmaf(e, 0.693359375f, r);         // + e*q2
}

// sine and cosine of theta in [0, 2*pi)
static void avx2_sincosf(float x, float* s, float* c) {
    uint32_t sign_sin = f2u(x) & 0x80000000u;
    x = u2f(f2u(x) & 0x7fffffffu);
    // octant j = (int(x*4/pi) + 1) & ~1
    int32_t j = (int32_t)(x * 1.27323954473516f);
    j = (j + 1) & ~1;
    float y = (float)j;
    uint32_t swap_sign_sin = (uint32_t)(j & 4) << 29;
    int use_cos_poly = (j & 2) == 0; // "poly_mask" in the SIMD code
    // extended precision range reduction x - j*pi/4, three fused steps
    x = fmaf(y, -0.78515625f, x);
    x = fmaf(y, -2.4187564849853515625e-4f, x);
    x = fmaf(y, -3.77489497744594108e-8f, x);
    uint32_t sign_cos = (uint32_t)(~(j - 2) & 4) << 29;
    sign_sin ^= swap_sign_sin;
    float z = x * x;
    // cosine polynomial on [-pi/4, pi/4]
    float yc = 2.443315711809948E-005f;
    yc = fmaf(yc, z, -1.388731625493765E-003f);
    yc = fmaf(yc, z, 4.166664568298827E-002f);
    yc = fmaf(yc * z, z, -(z * 0.5f));
    yc = yc + 1.0f;
    // sine polynomial on [-pi/4, pi/4]
    float ys = -1.9515295891E-4f;
    ys = fmaf(ys, z, 8.3321608736E-3f);
    ys = fmaf(ys, z, -1.6666654611E-1f);
    ys = fmaf(ys * z, x, x);
    // select the polynomials; the SIMD code does this with masked adds/subs,
    // reproduce them (they matter only for signed zeros)
    float ysin2 = use_cos_poly ? ys : 0.0f;
    float ysin1 = use_cos_poly ? 0.0f : yc;
    float ys_rest = ys - ysin2;
    float yc_rest = yc - ysin1;
    *s = u2f(f2u(ysin1 + ysin2) ^ sign_sin);
    *c = u2f(f2u(yc_rest + ys_rest) ^ sign_cos);
}

// Box-Muller on 16 uniforms in place: data[j] and data[j+8] pair up.
static void normal_fill_16(float* data, float mean, float std) {
    const float two_pi = (float)(2.0 * RNG_PI);
    for (int j = 0; j < 8; j++) {
        float u1 = 1.0f - data[j]; // [0,1) -> (0,1] so log is finite
        float u2 = data[j + 8];
        float radius = sqrtf(-2.0f * avx2_logf(u1));
        float theta = two_pi * u2;
        float s, c;
        avx2_sincosf(theta, &s, &c);
        data[j] = fmaf(radius * c, std, mean);     // explicit _mm256_fmadd_ps in torch
        data[j + 8] = fmaf(radius * s, std, mean);
    }
}

static void normal_fill(Rng* g, float* w, size_t n, float mean, float std) {
    // PyTorch draws all uniforms first, then transforms in blocks of 16
    for (size_t i = 0; i < n; i++) { w[i] = rng_uniform01_f32(g); }
    for (size_t i = 0; i + 16 <= n; i += 16) { normal_fill_16(w + i, mean, std); }
    if (n % 16 != 0) {
        // the tail: torch draws 16 NEW uniforms into the last 16 slots (which
        // overwrites some already finished values) and transforms them again
        float* tail = w + n - 16;
        for (int i = 0; i < 16; i++) { tail[i] = rng_uniform01_f32(g); }
        normal_fill_16(tail, mean, std);
    }
}

// tensor.normal_(mean, std) with mean/std as the Python doubles. Only the
// n < 16 path sees double precision; n >= 16 casts them to float first.
static void init_normal_d(Rng* g, float* w, size_t n, double mean, double std) {
    if (n >= 16) {
        normal_fill(g, w, n, (float)mean, (float)std);
    } else {
        for (size_t i = 0; i < n; i++) { w[i] = (float)rng_normal_f64(g, mean, std); }
    }
}

// tensor.normal_(mean, std), float32 contiguous. For n < 16 torch uses the
// double std (0.02, not (double)0.02f): see float_to_decimal_double.
static void init_normal(Rng* g, float* w, size_t n, float mean, float std) {
    init_normal_d(g, w, n, float_to_decimal_double(mean), float_to_decimal_double(std));
}

// ----------------------------------------------------------------------------
// trunc_normal_

// torch's float erfinv: rational initial guess (Pavlis' port of MATLAB's
// erfinv) + two Newton steps, all in float. The polynomials are contracted to
// FMAs by GCC in torch's AVX2 build, so we use fmaf at the same places.
static float torch_erfinv_float(float y) {
    const float a0 = 0.886226899f, a1 = -1.645349621f, a2 = 0.914624893f, a3 = -0.140543331f;
    const float b0 = -2.118377725f, b1 = 1.442710462f, b2 = -0.329097515f, b3 = 0.012229801f;
    const float c0 = -1.970840454f, c1 = -1.624906493f, c2 = 3.429567803f, c3 = 1.641345311f;
    const float d0 = 3.543889200f, d1 = 1.637067800f;
    float y_abs = fabsf(y);
    if (y_abs > 1.0f) { return NAN; }
    if (y_abs == 1.0f) { return copysignf(INFINITY, y); }
    float x;
    if (y_abs <= 0.7f) {
        float z = y * y;
        float num = fmaf(fmaf(fmaf(a3, z, a2), z, a1), z, a0);
        float dem = fmaf(fmaf(fmaf(fmaf(b3, z, b2), z, b1), z, b0), z, 1.0f);
        x = y * num / dem;
    } else {
        float z = sqrtf(-logf((1.0f - y_abs) / 2.0f));
        float num = fmaf(fmaf(fmaf(c3, z, c2), z, c1), z, c0);
        float dem = fmaf(fmaf(d1, z, d0), z, 1.0f);
        x = copysignf(num, y) / dem;
    }
    // two Newton-Raphson steps on erf(x) = y; 2/sqrt(pi) formed in float
    const float two_over_sqrt_pi = 2.0f / (float)sqrt(RNG_PI);
    x = x - (erff(x) - y) / (two_over_sqrt_pi * expf(-x * x));
    x = x - (erff(x) - y) / (two_over_sqrt_pi * expf(-x * x));
    return x;
}

// nn.init.trunc_normal_(w, mean, std, a, b) with the Python doubles.
// torch 1.13: l,u = Phi((a-mean)/std), Phi((b-mean)/std) in double;
// uniform_(2l-1, 2u-1); erfinv_(); mul_(std*sqrt(2)); add_(mean); clamp_(a, b).
// Each tensor op casts its Python scalar to float and works in float.
static void init_trunc_normal_d(Rng* g, float* w, size_t n, double mean, double std, double a,
                                double b) {
    double l = (1.0 + erf(((a - mean) / std) / sqrt(2.0))) / 2.0;
    double u = (1.0 + erf(((b - mean) / std) / sqrt(2.0))) / 2.0;
    init_uniform(g, w, n, (float)(2.0 * l - 1.0), (float)(2.0 * u - 1.0));
    float scale = (float)(std * sqrt(2.0));
    float fmean = (float)mean, lo = (float)a, hi = (float)b;
    for (size_t i = 0; i < n; i++) {
        // mul_ and add_ are two separate kernels in torch: round the product
        // before adding (must not become an FMA, see mul_rounded)
        float x = mul_rounded(torch_erfinv_float(w[i]), scale);
        x = x + fmean;
        // clamp_ keeps NaN (cannot happen here since |uniform| < 1)
        if (x < lo) { x = lo; }
        if (x > hi) { x = hi; }
        w[i] = x;
    }
}

// float-argument version: bit-exact with torch for literal arguments like
// std=0.02 (see float_to_decimal_double); computed ones: use init_trunc_normal_d.
static void init_trunc_normal(Rng* g, float* w, size_t n, float mean, float std, float a, float b) {
    init_trunc_normal_d(g, w, n, float_to_decimal_double(mean), float_to_decimal_double(std),
                        float_to_decimal_double(a), float_to_decimal_double(b));
}

// ----------------------------------------------------------------------------
// orthogonal_

// nn.init.orthogonal_: normal_(0,1) on the (rows, cols) matrix, transpose if
// rows < cols, QR, multiply columns of Q by sign(diag(R)), transpose back,
// times gain. The QR here is a plain double precision Householder QR, torch
// uses LAPACK sgeqrf/sorgqr in float: results agree to ~1e-6, not bitwise.
static void init_orthogonal(Rng* g, float* w, int rows, int cols, float gain) {
    if (rows <= 0 || cols <= 0) { return; }
    init_normal_d(g, w, (size_t)rows * cols, 0.0, 1.0);
    // work on M (m x k, m >= k), row-major, in double
    int transpose = rows < cols;
    int m = transpose ? cols : rows;
    int k = transpose ? rows : cols;
    double* A = (double*)malloc(sizeof(double) * ((size_t)m * k * 2 + m + k));
    if (A == NULL) { abort(); }
    double* Q = A + (size_t)m * k;      // m x k
    double* v = Q + (size_t)m * k;      // Householder vector, length m
    double* dsign = v + m;              // sign(diag(R)), length k
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < k; j++) {
            A[(size_t)i * k + j] = transpose ? w[(size_t)j * cols + i] : w[(size_t)i * cols + j];
        }
    }
    // Householder: reflect column j below the diagonal onto e_j. We store each
    // reflector's v in the lower part of A (column j, rows j..m-1) as we go.
    double* V = (double*)malloc(sizeof(double) * (size_t)m * k);
    if (V == NULL) { abort(); }
    for (int j = 0; j < k; j++) {
        double norm = 0.0;
        for (int i = j; i < m; i++) { norm += A[(size_t)i * k + j] * A[(size_t)i * k + j]; }
        norm = sqrt(norm);
        double x0 = A[(size_t)j * k + j];
        double alpha = (x0 >= 0.0) ? -norm : norm; // R[j][j], sign chosen to avoid cancellation
        for (int i = 0; i < m; i++) { v[i] = 0.0; }
        for (int i = j; i < m; i++) { v[i] = A[(size_t)i * k + j]; }
        v[j] -= alpha;
        double vnorm2 = 0.0;
        for (int i = j; i < m; i++) { vnorm2 += v[i] * v[i]; }
        // apply H = I - 2 v v^T / (v^T v) to the remaining columns
        for (int c = j; c < k; c++) {
            double dot = 0.0;
            for (int i = j; i < m; i++) { dot += v[i] * A[(size_t)i * k + c]; }
            double f = (vnorm2 > 0.0) ? 2.0 * dot / vnorm2 : 0.0;
            for (int i = j; i < m; i++) { A[(size_t)i * k + c] -= f * v[i]; }
        }
        dsign[j] = (alpha > 0.0) ? 1.0 : (alpha < 0.0 ? -1.0 : 0.0); // torch: d.sign()
        for (int i = 0; i < m; i++) { V[(size_t)i * k + j] = v[i]; }
    }
    // Q = H_0 H_1 ... H_{k-1} [I_k; 0]: apply the reflectors in reverse order
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < k; j++) { Q[(size_t)i * k + j] = (i == j) ? 1.0 : 0.0; }
    }
    for (int j = k - 1; j >= 0; j--) {
        double vnorm2 = 0.0;
        for (int i = j; i < m; i++) { vnorm2 += V[(size_t)i * k + j] * V[(size_t)i * k + j]; }
        if (vnorm2 == 0.0) { continue; }
        for (int c = 0; c < k; c++) {
            double dot = 0.0;
            for (int i = j; i < m; i++) { dot += V[(size_t)i * k + j] * Q[(size_t)i * k + c]; }
            double f = 2.0 * dot / vnorm2;
            for (int i = j; i < m; i++) { Q[(size_t)i * k + c] -= f * V[(size_t)i * k + j]; }
        }
    }
    // q *= sign(diag(r)) (per column), back to float, transpose back, mul_(gain)
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < k; j++) {
            float q = (float)(Q[(size_t)i * k + j] * dsign[j]);
            float val = q * gain;
            if (transpose) {
                w[(size_t)j * cols + i] = val;
            } else {
                w[(size_t)i * cols + j] = val;
            }
        }
    }
    free(V);
    free(A);
}

// ----------------------------------------------------------------------------
// sparse_

// torch.randperm(n) on CPU (n < 2^24 here): identity, then for i = 0..n-2
// swap element i with element i + (random() % (n - i)).
static void rng_randperm(Rng* g, int* perm, int n) {
    for (int i = 0; i < n; i++) { perm[i] = i; }
    for (int i = 0; i < n - 1; i++) {
        int z = (int)(rng_u32(g) % (uint32_t)(n - i));
        int tmp = perm[i];
        perm[i] = perm[i + z];
        perm[i + z] = tmp;
    }
}

// nn.init.sparse_(w, sparsity, std) on a (rows, cols) matrix, with the Python
// doubles: normal_(0, std) on everything, then for each column a fresh
// randperm(rows) whose first ceil(sparsity*rows) entries are the rows set to 0.
static void init_sparse_d(Rng* g, float* w, int rows, int cols, double sparsity, double std) {
    int num_zeros = (int)ceil(sparsity * rows); // Python: math.ceil(sparsity * rows)
    init_normal_d(g, w, (size_t)rows * cols, 0.0, std);
    int* perm = (int*)malloc(sizeof(int) * (size_t)(rows > 0 ? rows : 1));
    if (perm == NULL) { abort(); }
    for (int c = 0; c < cols; c++) {
        rng_randperm(g, perm, rows);
        for (int i = 0; i < num_zeros && i < rows; i++) { w[(size_t)perm[i] * cols + c] = 0.0f; }
    }
    free(perm);
}

// float-argument version. ceil(sparsity*rows) needs the exact Python double:
// 0.3*10 is 3.0 in Python (3 zeros) but (double)0.3f*10 = 3.0000001 (4 zeros),
// hence float_to_decimal_double (0.3f -> 0.3).
static void init_sparse(Rng* g, float* w, int rows, int cols, float sparsity, float std) {
    init_sparse_d(g, w, rows, cols, float_to_decimal_double(sparsity),
                  float_to_decimal_double(std));
}


// A generator on the heap, seeded (Part I keeps the state's layout out of sight).
static Rng* rng_new(uint64_t seed) {
    Rng* g = xmalloc(sizeof(Rng));
    rng_seed(g, seed);
    return g;
}

// A uniform draw from [0, 1): the top 24 bits of a 32-bit draw, each value a multiple of 2^-24.
static float rng_uniform(Rng* g) { return (rng_u32(g) >> 8) * (1.0f / 16777216.0f); }

// ---- drawing a Dist (section 3) with these primitives -------------------------------------------
// Draws a (rows, cols) tensor from d exactly as the nn.init function does.
static void dist_fill(Rng* g, float* w, int rows, int cols, const Dist* d) {
    size_t n = (size_t)rows * cols;
    switch (d->kind) {
    case D_CONST: for (size_t i = 0; i < n; i++) w[i] = (float)d->mean; break;
    case D_NORMAL: init_normal_d(g, w, n, d->mean, d->std); break;
    case D_UNIFORM: init_uniform(g, w, n, (float)d->lo, (float)d->hi); break;
    case D_TRUNC: init_trunc_normal_d(g, w, n, 0.0, d->std, d->lo, d->hi); break;
    case D_ORTHO: init_orthogonal(g, w, rows, cols, (float)d->gain); break;
    case D_SPARSE: init_sparse_d(g, w, rows, cols, d->sparsity, d->std); break;
    case D_EYE:
        for (size_t i = 0; i < n; i++) w[i] = 0.0f;
        for (int i = 0; i < rows && i < cols; i++) w[(size_t)i * cols + i] = (float)d->gain;
        break;
    }
}

// The std a tensor drawn from d should show (for --init-report and the sampling tests).
static double dist_std(const Dist* d, int rows, int cols) {
    switch (d->kind) {
    case D_CONST: return 0.0;
    case D_NORMAL: return d->std;
    case D_UNIFORM: return (d->hi - d->lo) / sqrt(12.0);
    case D_TRUNC: {
        // N(0, s^2) cut to [a, b]: with al = a/s, be = b/s, Z = Phi(be) - Phi(al),
        // Var = s^2 (1 + (al phi(al) - be phi(be))/Z - ((phi(al) - phi(be))/Z)^2)
        double al = d->lo / d->std, be = d->hi / d->std;
        double pa = exp(-0.5 * al * al) / sqrt(2 * M_PI), pb = exp(-0.5 * be * be) / sqrt(2 * M_PI);
        double Z = 0.5 * (erf(be / sqrt(2.0)) - erf(al / sqrt(2.0)));
        double m = (pa - pb) / Z;
        return d->std * sqrt(1.0 + (al * pa - be * pb) / Z - m * m);
    }
    // unit columns (rows) of length max
    case D_ORTHO: return fabs(d->gain) / sqrt(rows > cols ? rows : cols);
    case D_SPARSE: return d->std * sqrt((rows - ceil(d->sparsity * rows)) / rows);
    case D_EYE: {
        double p = (double)(rows < cols ? rows : cols) / ((double)rows * cols);
        return fabs(d->gain) * sqrt(p * (1.0 - p));
    }
    }
    return 0.0;
}

// Fill a (rows, cols) matrix, PyTorch Linear convention: rows = fan_out, cols = fan_in.
// `scheme` is the -I syntax for one scheme, e.g. "xavier_normal", "xavier_uniform:1.6667",
// "kaiming_normal:relu", "kaiming_uniform:leaky_relu:0.2", "lecun_normal", "orthogonal:1.414",
// "normal:0.01", "uniform:-0.1:0.1", "trunc_normal:0.02", "zeros", "constant:0.5", "eye", ...
// Equal to torch.manual_seed + the nn.init call on torch.empty(rows, cols) (orthogonal: to 5e-6).
static void parse_scheme(Scheme* s, const char* text);     // section 10
static void init_matrix_text(Rng* g, float* w, int rows, int cols, const char* scheme) {
    Scheme s;
    parse_scheme(&s, scheme);
    Dist d = scheme_dist(&s, rows, cols, 0);
    dist_fill(g, w, rows, cols, &d);
}

// ============================================================================================
// 7. Utilities, data files, the model's buffers, a run's types
// ============================================================================================

// Every user-facing failure is one line on stderr and a non-zero exit (FATAL_HOOK, section 0).
static char fatal_msg[1024];
static void fatal(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fatal_msg, sizeof(fatal_msg), fmt, ap);
    va_end(ap);
    FATAL_HOOK();
}

// The names are in parentheses so that train_gpt2.cu, which compiles this file as C++ (where a
// void* does not become a float* by itself), can wrap every call in a macro of the same name.
static void* (xmalloc)(size_t bytes) {
    void* p = malloc(bytes ? bytes : 1);
    if (!p) fatal("out of memory allocating %zu bytes", bytes);
    return p;
}

static void* (xcalloc)(size_t count, size_t size) {
    void* p = calloc(count ? count : 1, size ? size : 1);
    if (!p) fatal("out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

// ---- data files ---------------------------------------------------------------------------------
// Dataset (section 5) in two formats:
//  - plain text: every byte is a token (vocabulary 256), no tokenizer needed;
//  - llm.c token shards: 256 int32 header (magic 20240520, version 1, token count), then uint16
//    tokens (GPT-2 BPE, written by dev/data/tokenize_gpt2.sh).
#define SHARD_MAGIC 20240520
#define SHARD_MAGIC_LLAMA3 20240801     // llm.c's Llama 3 shards: uint32 tokens, refused

// The loaders read from a FILE* whose size is known (a file, or memory in dev/fuzz), and check
// every size a header states against the bytes really there before allocating anything.
static void dataset_read(Dataset* d, FILE* f, long size, const char* path, int V) {
    int32_t header[256] = {0};
    size_t got = size >= (long)sizeof(header) ? fread(header, sizeof(int32_t), 256, f) : 0;
    d->is_shard = got == 256 && header[0] == SHARD_MAGIC;
    if (got == 256 && header[0] == SHARD_MAGIC_LLAMA3)
        fatal("%s is an llm.c Llama 3 token shard (magic %d, 32-bit tokens); this trainer reads "
              "GPT-2 shards (magic %d, 16-bit tokens) and byte text: tokenize with GPT-2 "
              "(make data-gpt2)", path, SHARD_MAGIC_LLAMA3, SHARD_MAGIC);
    size_t plen = strlen(path);
    if (!d->is_shard && plen > 4 && strcmp(path + plen - 4, ".bin") == 0)
        fatal("%s is not a token shard (bad magic; expected %d)", path, SHARD_MAGIC);
    if (d->is_shard) {
        if (header[1] != 1) fatal("%s: token shard version %d, expected 1", path, header[1]);
        d->n = (size_t)(uint32_t)header[2];
        long want = (long)(sizeof(header) + d->n * sizeof(uint16_t));
        if (want != size)
            fatal("%s: header says %zu tokens (%ld bytes) but the file holds %ld bytes: %s", path,
                  d->n, want, size, size < want ? "truncated" : "longer than its header says");
        d->tok = xmalloc(d->n * sizeof(uint16_t));
        if (fread(d->tok, sizeof(uint16_t), d->n, f) != d->n) fatal("%s: short read", path);
        for (size_t i = 0; i < d->n; i++)
            if (d->tok[i] >= V)
                fatal("%s: token %u at position %zu is >= vocabulary %d", path, d->tok[i], i, V);
    } else {
        if (V < 256) fatal("%s is byte text, which needs vocabulary 256 (got %d)", path, V);
        rewind(f);
        d->n = (size_t)size;
        d->tok = xmalloc(d->n * sizeof(uint16_t) + 1);
        // read as bytes, widened in place from the end
        unsigned char* bytes = (unsigned char*)d->tok;
        if (fread(bytes, 1, d->n, f) != d->n) fatal("%s: short read", path);
        for (size_t i = d->n; i-- > 0;) d->tok[i] = bytes[i];
    }
}

// Opens a regular file for reading and gives its size. The type is checked before the file is
// opened: a directory has no size to check, and opening a FIFO would wait for a writer. `what`
// names the file in messages; `hint` ends the message when it is missing.
static FILE* open_regular(const char* path, const char* what, const char* hint, long* size) {
    struct stat st;
    if (stat(path, &st) != 0) fatal("cannot open %s %s (%s)%s", what, path, strerror(errno), hint);
    if (!S_ISREG(st.st_mode)) fatal("%s %s is not a regular file", what, path);
    FILE* f = fopen(path, "rb");
    if (!f) fatal("cannot open %s %s (%s)", what, path, strerror(errno));
    *size = (long)st.st_size;
    return f;
}

static void dataset_load(Dataset* d, const char* path, int V) {
    long size;
    FILE* f =
            open_regular(path, "data file", "; the default corpus ships in data/ (`git checkout data/` restores it)", &size);
    dataset_read(d, f, size, path, V);
    fclose(f);
}



// ---- llm.c's batch order -----------------------------------------------------------------------
// --data-order llmc: the batches of llm.c's DataLoader with shuffling on, as llm.c's train_gpt2.c
// and train_gpt2.cu create it (llmc/dataloader.h, llmc/rand.h), for one token file read by `ranks`
// processes of B / ranks rows each. The file is cut into S = floor((n - 1) / (B T)) samples of B T
// tokens, every rank's rows of one batch. In each epoch, process r reads the samples in the order
// perm_r: its j-th batch is its own rows of sample perm_r[j], the B / ranks windows of T tokens
// from perm_r[j] B T + r (B / ranks) T. perm_r is 0 .. S-1 shuffled by Fisher-Yates from the last
// position down, position i swapped with position (draw % (i + 1)), the draws from a Mersenne
// Twister seeded 42 + r, which goes on to draw the next epoch's permutation when this one ends.
struct LlmcOrder {
    int ranks;
    long samples;           // S: the batches of one epoch
    long epoch;             // the epoch `perm` holds, -1 before the first
    Rng** gen;              // per rank: its generator, after the permutations up to `epoch`
    int* perm;              // per rank, S apart: its order of the samples in `epoch`
};

// The order for `ranks` processes reading batches of B x T tokens (B / ranks rows each) from d,
// which holds at least one such batch; no permutation drawn yet.
static void llmc_order_new(LlmcOrder* o, const Dataset* d, int B, int T, int ranks) {
    o->ranks = ranks;
    o->samples = dataset_num_batches(d, B, T);
    o->epoch = -1;
    o->gen = xmalloc(ranks * sizeof(Rng*));
    for (int r = 0; r < ranks; r++) o->gen[r] = rng_new(42 + (uint64_t)r);
    o->perm = xmalloc((size_t)ranks * o->samples * sizeof(int));
}

static void llmc_order_free(LlmcOrder* o) {
    for (int r = 0; o->gen && r < o->ranks; r++) free(o->gen[r]);
    free(o->gen);
    free(o->perm);
}

// Makes o->perm hold epoch e's permutations: drawn on from the current epoch, or from the seeds
// again when e is earlier (llm.c draws each epoch's from where the last one left its generator).
static void llmc_order_epoch(LlmcOrder* o, long e) {
    if (e < o->epoch) {
        for (int r = 0; r < o->ranks; r++) rng_seed(o->gen[r], 42 + (uint64_t)r);
        o->epoch = -1;
    }
    for (; o->epoch < e; o->epoch++)
        for (int r = 0; r < o->ranks; r++) {
            int* p = o->perm + r * o->samples;
            for (long i = 0; i < o->samples; i++) p[i] = (int)i;
            for (long i = o->samples - 1; i > 0; i--) {
                long j = rng_u32(o->gen[r]) % (uint32_t)(i + 1);
                int swap = p[i];
                p[i] = p[j], p[j] = swap;
            }
        }
}

// Batch k of a run in llm.c's shuffled order: for each rank r, the rows r reads at its k-th batch.
static void llmc_batch(const Trainer* tr, long k, int* inp, int* tgt) {
    LlmcOrder* o = tr->llmc;
    int rows = tr->B / o->ranks, T = tr->T;
    llmc_order_epoch(o, k / o->samples);
    for (int r = 0; r < o->ranks; r++) {
        size_t sample = (size_t)o->perm[r * o->samples + k % o->samples];
        size_t at = (size_t)r * rows * T;
        dataset_rows_at(tr->train, sample * tr->B * T + at, rows, T, inp + at, tgt + at);
    }
}

// Decoding tokens for printing: bytes print as themselves; GPT-2 tokens through the decode table
// written by dev/data/tokenize_gpt2.sh (int32 header: 20240328, version 2, vocab, eot; 256 int32
// in all; then per token a length byte and the token's bytes).
struct Decoder {
    int V;
    char** piece;
};
// the decode table of a token shard (section 10)
static void decoder_load(Decoder* dec, const char* path);

// ---- the model's buffers ------------------------------------------------------------------------
static size_t model_param_count(const Config* c) {
    size_t off[NUM_KINDS], numel[NUM_KINDS];
    return param_layout(c, off, numel);
}

static size_t acts_bytes(const Config* c, int B, int T) {
    Model shape;
    memset(&shape, 0, sizeof(shape));
    shape.cfg = *c;
    size_t bytes = 0;
    acts_layout(&shape, B, T, &bytes, NULL);
    return bytes;
}


static Tensor* model_find(Model* m, const char* name) {
    for (int i = 0; i < m->num_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
    return NULL;
}

// What a run is given (section 10 fills it in from the command line):
typedef struct {
    int every;                  // -p N: probe steps 0, N, 2N, ...; 0 = off
    const char* list;           // --probes NAME,...; NULL = all
    const char* cossim;         // --cossim-dump TENSOR
    const char* dump_tokens;    // --dump-token-losses FILE
    float spike_z;              // --spike-z
    int spike_skip;             // --spike-skip
    int coord_check, coord_steps;   // --coord-check, --coord-steps
    const char* coord_widths;       // --coord-widths
} ProbeOptions;

typedef struct {
    const char *train_path, *val_path, *out_dir, *resume, *preset, *init, *decode_path;
    const char *llmc_load, *llmc_save;   // --load-llmc, --save-llmc: llm.c model files (section 11)
    const char *norm, *mlp, *pos;
    int bias, tie, gate;           // -1: the preset decides
    int L, C, H, KVH, F, maxT, V;  // 0: derived
    int B, T, steps, seed;
    // micro-batches of B x T per update: -d TOKENS / (B x T) (gradient accumulation)
    int micro;
    long tokens_per_update;        // -d as given; 0: one batch per update
    // train_gpt2.cu's data parallelism: this process's rank of `ranks`, B the batch of all of them
    // (train_gpt2.cu section 6). Rank 0 alone prints, logs, probes and writes files.
    int rank, ranks;
    int data_order;                // --data-order: ORDER_RANDOM, ORDER_SEQUENTIAL, ORDER_LLMC
    int llmc_procs;                // --data-order llmc:P: llm.c's processes; 0: the ranks
    int val_every, val_batches, sample_every, sample_len, ckpt_every;
    int decay_emb;
    double gamma;                  // < 0: not given
    int resid_scale;               // -1: the -I recipe decides; 0 off; 1 out/down x 1/sqrt(2L)
    int mup_base;                  // 0: MUP_BASE_DEFAULT
    int init_report;               // print the initialization table and exit
    int overwrite;                 // --overwrite 1: a new run replaces the run in -o DIR
    float eps, rope_theta;
    OptConfig opt;
    ProbeOptions probe;            // -p, --probes, ... (section 9)
} Options;

// ---- the JSON-lines log ------------------------------------------------------------------------
typedef struct {
    FILE* f;
    char path[4096];
} Log;

// DIR/log.jsonl: created, or on a resume cut back to the checkpoint's line and appended to, so that
// a run interrupted and resumed logs every step once (section 10). Also removes stale temporary
// files.
static void log_open(Log* lg, const char* dir, const char* resume, int start_step);
// one JSON object per line; fields as printf fragments, e.g. log_event(&lg, "\"step\":%d", step). A
// write that fails (a full disk) stops the run.
static void log_event(Log* lg, const char* fmt, ...);

// ---- the engine: a device that holds the model in place of the host -----------------------------
// train_gpt2.cu keeps the parameters, gradients and AdamW state on the GPU and trains through these
// calls, in train_with_engine (section 12), a loop that mirrors Part I's train(). The host Model
// keeps the configuration, the tensor table and the host copies that checkpoints and probes read
// (to_host brings them up to date).
typedef struct {
    void* ctx;
    float (*forward)(void* ctx, const int* inp, const int* tgt, int B, int T);   // the mean loss
    const float* (*probs)(void* ctx, int bt, int V);   // a host copy of softmax row bt
    void (*zero_grad)(void* ctx);
    void (*backward)(void* ctx, int B, int T, float dloss);   // model_backward's, adding in
    double (*grad_norm)(void* ctx);
    void (*update)(void* ctx, const OptConfig* o, float lr, int t, float grad_scale);
    // the parameters into the host Model, with moments 1 the AdamW state too (a checkpoint: with
    // several ranks every rank calls it then, since gathering a sharded state is a collective)
    void (*to_host)(void* ctx, int moments);
} Engine;

// ---- the probes' state, and what Part II's sections use of each other --------------------------
// The spike probe's moving mean and variance of the loss (or the gradient norm): part of the
// training state, since --spike-skip decides from them, so checkpoints carry them (section 9
// updates them).
typedef struct {
    double mean, var;
    int64_t n;              // values seen
} Ema;
// what the probes keep between steps (section 9)
typedef struct Probes Probes;
// the probes of a run (-p, --probes), created on the model and the training tokens, writing through
// emit; refuses probe flags that do not fit the model. spike[2] is the run's spike state.
static Probes* probes_new(const ProbeOptions* po, Model* m, const uint16_t* train_tok, size_t n_tok,
                          const char* out_dir, Ema* spike, void (*emit)(void*, const char*),
                          void* ctx);
static void probes_delete(Probes* pr);
static int probes_due(const Probes* pr, int step);           // is step a probe step (-p N)?
// 1: skip this update (--spike-skip)
static int probe_spike(Probes* pr, int step, double loss, double norm);
// measure activations, gradients, weights
static void probes_before_update(Probes* pr, Model* m, int step);
static void probes_after_update(Probes* pr, const Model* m);        // the update-to-weight ratios
static void probe_log_line(void* lg, const char* fields);    // a probe's line into the run's log
// --dump-token-losses: loss and p(target) of every validation position, as CSV
static void dump_token_losses(Model* m, const Dataset* val, int batches, int B, int T, int* inp,
                              int* tgt, const char* path);
// the flags (./train_gpt2 -h lists them)
static void parse_args(Options* o, int argc, char** argv);
// the model's shape from the preset and flags
static Config config_from_options(const Options* o, int V);
// -I, -g, --resid-scale, --mup-base
static void init_spec_from_options(InitSpec* spec, const Options* o);
// --init-report
static void init_report(Model* m, const InitSpec* spec, const int* tokens, int B, int T);
// prints the memory the run will take and refuses one that does not fit in the memory available
static void memory_check(const Config* c, const Options* o, int host_acts);
// -o DIR made and claimed (one run per directory), every output path proven writable; the lock
static int outputs_claim(const Options* o);
// -o DIR made and claimed by this process alone (DIR/.lock), refused when it holds a run the flags
// do not continue (--overwrite); the lock's descriptor
static int output_dir_claim(const Options* o, const char* dir);
// a checkpoint: config, step, both generators, the spike state, parameters and AdamW moments, with
// a CRC-32 (doc/checkpoint.md); save refuses a model holding NaN or inf
static void checkpoint_save(const Model* m, const char* path, int step, const Rng* data_rng,
                            const Rng* sample_rng, const Ema spike[2]);
static int checkpoint_load(Model* m, const char* path, Rng* data_rng, Rng* sample_rng,
                           Ema spike[2]);
// the first NaN or inf among the weights and AdamW moments, as text ("h.0.attn.wq holds nan in its
// weights")
static int model_nonfinite(const Model* m, char* what, size_t cap);
// llm.c's model file (magic 20240326, float32): the GPT-2 preset's weights out and in
// refuses a model llm.c cannot hold
static void llmc_check(const Config* c, const InitSpec* spec, const char* flag);
static void llmc_save(const Model* m, const char* path);
static void llmc_load(Model* m, const char* path);
// --coord-check: the muP coordinate check, one run of train(o, ctx) per width, then the table
static void coord_check(const Options* o, void (*train)(const Options* o, void* ctx), void* ctx);
static void decoder_free(Decoder* dec);

// The run's first lines: model, data, initialization, and the "config" event of the log (section
// 10).
static void run_header(Run* r);

// ---- a run: the options, the data, the host model, the generators, the log and the loop's state -
struct Run {
    Options o;
    Trainer tr;                   // the settings run_plan reads from o; the data and the model
    Decoder dec;
    Rng data_rng, sample_rng;
    LlmcOrder llmc;               // --data-order llmc's permutations
    Ema spike[2];                 // the spike probe's statistics of the loss and the gradient norm
    const char* device;           // "cpu", or the GPU train_gpt2.cu trains on (the run's header)
    Engine* engine;               // NULL: the host Model trains; else the device (section 12)
    Probes* probes;
    Log lg;
    char last_ckpt[4096];         // named in the error when training stops
    double last_val;              // the last validation loss, printed at the end
    int probing;                  // this step is a probe step
    int host_acts;                // the host Model holds activations (run_plan)
    int lock;                     // the output dir's lock (output_dir_claim), or -1
};

// ============================================================================================
// 8. Fast twins: threads, exp, the matrix multiply, the twins, their check
// ============================================================================================

// ---- threads ------------------------------------------------------------------------------------
// OpenMP's thread count and this thread's number (1 and 0 when compiled without OpenMP).
static int thread_count(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static int thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static int in_parallel(void) {
#ifdef _OPENMP
    return omp_in_parallel();
#else
    return 0;
#endif
}

// Zeroed memory whose pages are mapped at allocation, by both threads, rather than by page faults
// in the first training step (calloc's pages are mapped on first use; the first step of GPT-2 124M
// took 3.4 times a later one, most of it in AdamW's first write of its moments). A buffer of 2 MB
// or more is asked to sit in 2 MB pages (Linux's transparent huge pages, which are given only to
// memory that asks for them where, as on Debian, THP is set to "madvise"). The matmuls read their
// operands down columns (W in the forward pass, dout^T in dW) and touch a new 4 KB page every row
// or two; with 2 MB pages these stay in the TLB. Zen 4 A/B: cfgS-gpt2 1984 -> 1905 ms per step,
// cfgM-gpt2 1095 -> 1053, cfgM-llama 1362 -> 1296 (doc/performance.md). Every buffer starts on a
// cache line (64 bytes), so that vectors of 16 floats do not straddle two.
static float* zeroed_floats(size_t n) {
    size_t need = n ? n * sizeof(float) : 1, huge = 2 << 20, align = need >= huge ? huge : 64;
    size_t bytes = (need + align - 1) / align * align;   // aligned_alloc wants a multiple of align
    float* a = (float*)aligned_alloc(align, bytes);
    if (!a) fatal("out of memory allocating %zu bytes", bytes);
#ifdef MADV_HUGEPAGE
    // a hint: if refused, 4 KB pages as before
    if (align == huge) madvise(a, bytes, MADV_HUGEPAGE);
#endif
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = 0.0f;
    return a;
}


// ---- exp, in a form the compiler vectorizes ----------------------------------------------------
// libm's expf is a function call per element: a loop that calls it stays scalar, and the softmaxes
// and activations are such loops. vexpf is the textbook method in plain arithmetic, which GCC turns
// into AVX-512 / AVX2 code: x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2; exp(r) by its
// Taylor series to degree 7 (truncation error r^8/8! < 6e-9); 2^n by writing n + 127 into the
// exponent bits of a float. Relative error about 1e-7 (1-2 ulp) against expf; exp(x) below
// exp(-87.33), the smallest normal float, is 0; from x = 88.38 (where n rounds to 128) it is +inf,
// a little before expf overflows at 88.72; NaN stays NaN.
HOSTDEV static inline float vexpf(float x) {
    float xc = x < -88.0f ? -88.0f : x > 88.8f ? 88.8f : x;    // keeps n in [-127, 128]
    // round to nearest: adding 1.5 * 2^23 pushes the fraction bits out of the float
    float n = (xc * 1.44269504f + 12582912.0f) - 12582912.0f;
    float r = (xc - n * 0.693145751953125f) - n * 1.428606765330187e-6f;   // ln2 in two parts
    float p = 1.0f + r * (1.0f + r * (1.0f / 2 + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
              r * (1.0f / 720 + r * (1.0f / 5040)))))));
    int32_t bits = ((int32_t)(n == n ? n : 0.0f) + 127) * (1 << 23);      // 2^n
    float two_n;
    memcpy(&two_n, &bits, sizeof(two_n));
    return x < -87.33f ? 0.0f : p * two_n;
}

// ---- the matrix multiply -------------------------------------------------------------------
// Every product of the model is one routine, gemm: Cm[M,N] (+)= A[M,K] Bm[K,N], with A and Bm read
// through a row and a column stride each, so that a transposed operand is just other strides:
//   forward   out[BT,OC]  = inp[BT,C]  W^T       A = inp, Bm = W read column-wise
//   backward  dinp[BT,C] += dout[BT,OC] W        A = dout, Bm = W
//             dW[OC,C]   += dout^T inp           A = dout read column-wise, Bm = inp
// The naive triple loop does 2 loads per multiply-add and reuses nothing between output elements,
// so it runs at the speed of memory. The loop nest below reuses every load many times:
//
// 1. Register tile (the micro-kernel). An MR x NR block of Cm is kept in vector registers while k
//    runs; each step loads MR values of A and NR of Bm and does MR*NR multiply-adds, so each loaded
//    A value is used NR times and each Bm value MR times. With AVX-512 (32 registers of 16 floats)
//    8 x 32 is 16 accumulator registers + 2 for the row of Bm + 1 for the broadcast A value, and
//    32 divides every width of the model (C, 4C, head size). One tile serves both AMD kinds: Zen 4
//    runs a 512-bit FMA on its two 256-bit units together (1 per cycle: 4 in flight at 4 cycles'
//    latency), Zen 5 runs 2 per cycle (8 in flight); 16 independent accumulators cover both, and
//    2 loads + 8 broadcasts per 16 FMAs fit either's load ports. On Zen 4 it runs at 97-98% of
//    the FMA peak on blocks held in L2, as do 12 x 32, 14 x 32, 6 x 64 and 8 x 48
//    (doc/performance.md, issue 41). With AVX2 (16 registers of 8 floats) the classic 6 x 16
//    (12 + 2 + 1). The loops are plain C with constant trip counts: GCC at -O3 -march=native
//    unrolls them and keeps acc[][] in registers (objdump -d: vbroadcastss + vfmadd231ps, no
//    spills).
// 2. Packing Bm. The kernel wants, for each k, NR consecutive values of Bm. pack_b copies a block
//    of Bm into exactly that order (panels of NR columns, zero-padded at the edge), whatever its
//    strides were: the transposed W of the forward pass costs one copy of a block, not a slow
//    inner loop. A needs no copy: its MR values per k are broadcast one at a time, from MR rows
//    (sak = 1) or from one contiguous run (sam = 1, dout read as dout^T).
// 3. Cache blocking. Cm is cut into blocks of MC rows x NC columns and K into slices of KC. For one
//    slice the packed Bm block (KC x NC, 512 KB with AVX-512) and the A block (MC x KC) are read
//    from the core's L2 cache (1 MB on both machines of doc/performance.md) by every micro-tile of
//    the block, so every element brought into L2 is used MC or NC times. One Bm panel (KC x NR, 64
//    KB) is more than L1 holds: the kernel streams it from L2, in order, at 2 vectors per MR x NR
//    multiply-adds, which L2 keeps up with. What KC buys is fewer passes over Cm: the kernel loads
//    and stores its accumulators once per slice. On Zen 4 KC = 512 measured 1.3-2.3% faster per
//    step than 256, and smaller values slower. Around MC = NC = 256, KC = 512 the products sit on
//    a plateau (MC 320-384, NC 128, KC 384 within noise; MC 128 and 512 3-5% slower) at about 87%
//    of the peak per core: packing takes about 4% of the time, and the kernel runs below its
//    in-L2 rate when A, the packed block or Cm come from L3 or DRAM (doc/performance.md).
// 4. Threads. Cm is split into units (column ranges of a wide product, row ranges of a tall one,
// see
//    gemm), each owned by one thread, which packs each block of Bm once for all its rows and
//    prefetches the next block while the kernel computes on the current one. The row units of a
//    tall product share one packing of all of Bm (pack_all) when it is small enough.
//
// Determinism: the kernel loads the current Cm values into its accumulators and adds the k terms
// in order 0..K-1, slice after slice, so every output is the same sequence of fused multiply-adds
// whatever MC, NC, KC or the number of threads: results do not depend on blocking or threads.
#if defined(__AVX512F__)
#define MR 8
#define NR 32
#else
#define MR 6
#define NR 16
#endif
#define KC 512
#define MC (32 * MR)
#define NC (8 * NR)

// The micro-kernel: c[MR x NR] (row stride ldc) = (load ? c : 0) + sum over k < kc of
// A[i][k] * bp[k][j], with A[i][k] at a[i * sam + k * sak] and bp a packed panel of Bm.
static inline void micro_kernel(int kc, const float* a, long sam, long sak, const float* bp,
                                float* c, long ldc, int load) {
    float acc[MR][NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = load ? c[i * ldc + j] : 0.0f;
    for (int k = 0; k < kc; k++, a += sak, bp += NR)
        for (int i = 0; i < MR; i++) {
            float ai = a[i * sam];
            for (int j = 0; j < NR; j++) acc[i][j] += ai * bp[j];
        }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) c[i * ldc + j] = acc[i][j];
}

// An mr x nr tile at the edge of Cm (mr <= MR, nr <= NR): the kernel runs on zero-padded copies of
// the mr rows of A and of the tile.
static void edge_tile(int kc, const float* a, long sam, long sak, const float* bp, float* c,
                      long ldc, int mr, int nr, int load) {
    float ta[KC * MR], tc[MR * NR];
    for (int k = 0; k < kc; k++)
        for (int i = 0; i < MR; i++) ta[k * MR + i] = i < mr ? a[i * sam + k * sak] : 0.0f;
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++)
            tc[i * NR + j] = load && i < mr && j < nr ? c[i * ldc + j] : 0.0f;
    micro_kernel(kc, ta, 1, MR, bp, tc, NR, 1);
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) c[i * ldc + j] = tc[i * NR + j];
}

// The transposed copy of the forward pass: bp[k * NR + j] = b[j * sbn + k] for k < kc, j < NR (b's
// rows past w read as zero). This plain loop is what it does; GCC cannot vectorize a transpose
// (each element is a scalar load and a scalar store, and the profile of doc/performance.md found it
// about a tenth of a GPT-2-sized step), so with AVX-512 and GCC the 16 x 16 blocks go through
// transpose_block below and this loop only does the edges.
static void pack_transposed_plain(float* bp, const float* b, long sbn, int k0, int kc, int j0,
                                  int j1, int w) {
    for (int j = j0; j < j1; j++)
        for (int k = k0; k < kc; k++) bp[k * NR + j] = j < w ? b[j * sbn + k] : 0.0f;
}

#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
typedef float v16f __attribute__((vector_size(64), aligned(4)));   // may sit anywhere in W
typedef int v16i __attribute__((vector_size(64)));

// Transposes the 16 x 16 block whose rows are r[0..15], in registers. Stage b swaps the two
// off-diagonal b x b blocks of every 2b x 2b block: the element at (row i, column c) whose bit b
// differs between i and c moves to (i ^ b, c ^ b). After the stages b = 8, 4, 2, 1 every bit of the
// row index has been swapped with the same bit of the column index: (i, c) -> (c, i). Each new row
// is one two-register shuffle (__builtin_shuffle, GCC's generic vector shuffle). The shuffle
// indices are vector arithmetic on a constant, so that GCC folds them into constants and picks a
// cheap instruction for each stage; built element by element in a loop they were not folded, and
// the copy took 0.72 ns per float instead of 0.10 (Zen 4, a 512 x 256 block from L2).
static inline void transpose_stage(v16f r[16], int b) {
    const v16i c = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};   // the column
    v16i set = (c & b) != 0;                  // -1 where bit b of the column is set, else 0
    v16i lo = c + (set & (16 - b));           // row i (bit b clear) takes row i+b's block
    v16i hi = c + (set & 16) + (~set & b);    // row i+b takes row i's block
    for (int i = 0; i < 16; i++)              // indices 0-15 pick from x, 16-31 from y
        if (!(i & b)) {
            v16f x = r[i], y = r[i + b];
            r[i] = __builtin_shuffle(x, y, lo);
            r[i + b] = __builtin_shuffle(x, y, hi);
        }
}

static inline void transpose_block(v16f r[16]) {
    transpose_stage(r, 8);
    transpose_stage(r, 4);
    transpose_stage(r, 2);
    transpose_stage(r, 1);
}

static void pack_transposed(float* bp, const float* b, long sbn, int kc, int w) {
    int k16 = kc / 16 * 16;
    for (int j0 = 0; j0 < NR; j0 += 16) {
        if (j0 + 16 > w) {   // a panel at the edge of Bm: plain
            pack_transposed_plain(bp, b, sbn, 0, kc, j0, j0 + 16, w);
            continue;
        }
        for (int k0 = 0; k0 < k16; k0 += 16) {
            v16f r[16];
            // 16 rows of W; W comes from DRAM, and 16 streams are more
            for (int i = 0; i < 16; i++) {
                const float* row = b + (long)(j0 + i) * sbn + k0;   // than the prefetcher follows:
                __builtin_prefetch(row + 64);                       // ask for 4 lines ahead
                r[i] = *(const v16f*)row;
            }
            transpose_block(r);
            // 16 rows of bp
            for (int i = 0; i < 16; i++) *(v16f*)(bp + (long)(k0 + i) * NR + j0) = r[i];
        }
        pack_transposed_plain(bp, b, sbn, k16, kc, j0, j0 + 16, w);
    }
}
#else
static void pack_transposed(float* bp, const float* b, long sbn, int kc, int w) {
    pack_transposed_plain(bp, b, sbn, 0, kc, 0, NR, w);
}
#endif

// Copies rows [0, kc) x columns [0, nc) of Bm into panels of NR columns: panel p holds, k by k, the
// NR values Bm[k][p*NR + j]; columns past nc are zero. Every product of the model reads Bm either
// along its rows (sbn = 1) or down its columns (sbk = 1: the transposed W of the forward pass, k in
// q k^T), and the copy follows the stride that is 1.
static void pack_b(float* bp, const float* Bm, long sbk, long sbn, int kc, int nc) {
    for (int p = 0; p < nc; p += NR, bp += NR * kc) {
        int w = nc - p < NR ? nc - p : NR;
        const float* b = Bm + (long)p * sbn;
        if (sbn == 1) {
            for (int k = 0; k < kc; k++)
                for (int j = 0; j < NR; j++) bp[k * NR + j] = j < w ? b[k * sbk + j] : 0.0f;
        } else {
            pack_transposed(bp, b, sbn, kc, w);   // sbk == 1
        }
    }
}

// Each thread's packed block: thread-local, so it exists once per thread and is never allocated.
// 64-byte aligned: one cache line, one AVX-512 register.
static __thread float pack_buf[KC * NC] __attribute__((aligned(64)));

// The cache lines of the Bm block that the next pack_b will read, handed out a few at a time while
// the kernel works on the current block. Weights come from DRAM: a pack that waits for them leaves
// the FMA units idle (doc/performance.md measured both copies waiting on DRAM), while a prefetch
// issued during the kernel's arithmetic brings the block into L2 in the shadow of the FMAs.
typedef struct {
    const char* base;
    long stride;            // bytes between the block's contiguous runs
    int runs, lines_per_run, run, line;   // the next line to ask for: `line` of run `run`
} Prefetch;

static void prefetch_plan(Prefetch* pf, const float* Bm, long sbk, long sbn, int kc, int nc) {
    // pack_b's contiguous direction
    int runs = sbn == 1 ? kc : nc, run_floats = sbn == 1 ? nc : kc;
    pf->base = (const char*)Bm;
    pf->stride = (sbn == 1 ? sbk : sbn) * (long)sizeof(float);
    pf->runs = runs;
    // +1: runs need not be aligned
    pf->lines_per_run = (run_floats * (int)sizeof(float) + 63) / 64 + 1;
    pf->run = pf->line = 0;
}

static void prefetch_some(Prefetch* pf, int n) {
    for (; n > 0 && pf->run < pf->runs; n--) {
        __builtin_prefetch(pf->base + pf->run * pf->stride + pf->line * 64, 0, 2);   // into L2
        if (++pf->line == pf->lines_per_run) pf->line = 0, pf->run++;
    }
}

// The MR x NR tile of Cm that the next kernel call loads and stores, asked for now so that it
// arrives while the current call computes. In a product whose Cm is larger than L2 (the LM head's
// logits, a 2048-row unit of a forward product) the kernel otherwise waits on L3 or DRAM for its
// accumulators at every slice: perf put about 5% of the kernel's samples on that load before this
// prefetch.
static void prefetch_tile(const float* c, long ldc) {
    // a row: a line every 16 floats, and the line of its last float
    for (int i = 0; i < MR; i++) {
        for (int j = 0; j < NR; j += 16) __builtin_prefetch(c + i * ldc + j, 1, 3);
        __builtin_prefetch(c + i * ldc + NR - 1, 1, 3);
    }
}

// All of Bm packed at once, for a tall product: its row units would otherwise each pack every block
// of Bm once per MC rows (the LM head's dW would pack its B*T x C input 197 times, and at B*T =
// 2048 the forward pass would transpose each W 8 times). Block (jb, k0), the one pack_b makes for
// columns jb.. and rows k0.., starts at packed_offset; the threads pack the blocks in parallel. The
// buffer grows to the largest such product during the first step and is reused after. PACK_ALL_MAX
// floats bound it (8 MB, so that it stays in L3 while the units read it); a larger Bm (the LM
// head's W in dinp) is packed by gemm_unit, block by block. On Zen 4 this took cfgS-gpt2's step
// from 2053 to 1977 ms (doc/performance.md).
#define PACK_ALL_MAX (2L << 20)
static long packed_size(int K, int N) { return (long)(N + NC - 1) / NC * K * NC; }
static long packed_offset(int K, int jb, int k0) {
    return (long)(jb / NC) * K * NC + (long)k0 * NC;
}

static const float* pack_all(const float* Bm, long sbk, long sbn, int K, int N) {
    static float* buf;
    static long size;
    if (packed_size(K, N) > size) {
        free(buf);
        size = packed_size(K, N);
        buf = zeroed_floats(size);   // on a cache line, in 2 MB pages like the operands
    }
    int slices = (K + KC - 1) / KC, blocks = (N + NC - 1) / NC * slices;
    #pragma omp parallel for schedule(static)
    for (int b = 0; b < blocks; b++) {
        int jb = b / slices * NC, k0 = b % slices * KC;
        pack_b(buf + packed_offset(K, jb, k0), Bm + k0 * sbk + jb * sbn, sbk, sbn,
               K - k0 < KC ? K - k0 : KC, N - jb < NC ? N - jb : NC);
    }
    return buf;
}

// One unit of work: rows [i0, i1) x columns [j0, j1) of Cm, in blocks of NC columns. Each KC-slice
// of a column block of Bm is packed once (here, or by pack_all when `packed` is given) and used by
// every row of the unit; meanwhile the next slice is prefetched: the next k slice, else the next
// column block, else the first block of `next_j0`, this thread's next unit (-1: none).
static void gemm_unit(int i0, int i1, int j0, int j1, int K, const float* A, long sam, long sak,
                      const float* Bm, long sbk, long sbn, const float* packed, float* Cm, long ldc,
                      int accumulate, int next_j0, int next_j1) {
    for (int jb = j0; jb < j1; jb += NC) {
        int nb = j1 - jb < NC ? j1 - jb : NC;
        int calls = (i1 - i0 + MR - 1) / MR * ((nb + NR - 1) / NR);   // kernel calls per slice
        for (int k0 = 0; k0 < K; k0 += KC) {
            int kc = K - k0 < KC ? K - k0 : KC, load = accumulate || k0 > 0;
            int k_next = k0 + KC < K ? k0 + KC : 0,
                j_next = k_next    ? jb
                    : jb + NC < j1 ? jb + NC
                                   : next_j0;
            int j_end = k_next || jb + NC < j1 ? j1 : next_j1;
            int kc_next = K - k_next < KC ? K - k_next : KC,
                nb_next = j_end - j_next < NC ? j_end - j_next : NC;
            const float* block = pack_buf;
            Prefetch pf = {0};
            if (packed) {   // packed once by pack_all: the next block is a contiguous run of it
                block = packed + packed_offset(K, jb, k0);
                if (j_next >= 0)
                    prefetch_plan(&pf, packed + packed_offset(K, j_next, k_next), NC, 1, kc_next,
                                  NC);
            } else {
                pack_b(pack_buf, Bm + k0 * sbk + jb * sbn, sbk, sbn, kc, nb);
                if (j_next >= 0)
                    prefetch_plan(&pf, Bm + k_next * sbk + j_next * sbn, sbk, sbn, kc_next,
                                  nb_next);
            }
            int per_call = (pf.runs * pf.lines_per_run + calls - 1) / calls;
            for (int ib = i0; ib < i1; ib += MC) {          // row blocks: the A block stays in L2
                int mb = i1 - ib < MC ? i1 - ib : MC;
                for (int j = 0; j < nb; j += NR)            // one Bm panel, streamed from L2 ...
                    for (int i = 0; i < mb; i += MR) {      // ... by every row tile of A
                        const float *a = A + (ib + i) * sam + k0 * sak, *bp = block + (long)j * kc;
                        float* c = Cm + (long)(ib + i) * ldc + jb + j;
                        prefetch_some(&pf, per_call);
                        // the next call's tile
                        if (i + MR < mb) prefetch_tile(c + MR * ldc, ldc);
                        else if (j + NR < nb) prefetch_tile(Cm + (long)ib * ldc + jb + j + NR, ldc);
                        if (mb - i >= MR && nb - j >= NR)
                            micro_kernel(kc, a, sam, sak, bp, c, ldc, load);
                        else
                            edge_tile(kc, a, sam, sak, bp, c, ldc, mb - i < MR ? mb - i : MR,
                                      nb - j < NR ? nb - j : NR, load);
                    }
            }
        }
    }
}

// One product as gemm splits it: the operands, and `units` units of `width` rows (tall) or columns.
typedef struct {
    int M, N, K, tall, threads, units, width;
    const float *A, *Bm, *packed;
    long sam, sak, sbk, sbn, ldc;
    float* Cm;
    int accumulate;
} GemmPlan;

// Unit u of the plan; the calling thread's next unit is u + threads.
static void gemm_plan_unit(const GemmPlan* g, int u) {
    int span = g->tall ? g->M : g->N;
    int lo = u * g->width, hi = lo + g->width < span ? lo + g->width : span, un = u + g->threads;
    if (lo >= span) return;
    int next_lo = un < g->units && un * g->width < span ? un * g->width : -1;
    int next_hi = next_lo + g->width < span ? next_lo + g->width : span;
    if (!g->tall)
        gemm_unit(0, g->M, lo, hi, g->K, g->A, g->sam, g->sak, g->Bm, g->sbk, g->sbn, NULL, g->Cm,
                  g->ldc, g->accumulate, next_lo, next_hi);
    else     // one MC-row block at a time, so that its part of Cm stays in L2 across the k slices
        for (int ib = lo; ib < hi; ib += MC)
            gemm_unit(ib, ib + MC < hi ? ib + MC : hi, 0, g->N, g->K, g->A, g->sam, g->sak, g->Bm,
                      g->sbk, g->sbn, g->packed, g->Cm, g->ldc, g->accumulate,
                      ib + MC < hi || un < g->units ? 0 : -1, g->N);
}

static void gemm(int M, int N, int K, const float* A, long sam, long sak, const float* Bm, long sbk,
                 long sbn, float* Cm, long ldc, int accumulate) {
    // The threads split Cm into units. Splitting the columns makes every unit read all of A;
    // splitting the rows makes every unit pack all of Bm. So a wide product (M <= N; the forward
    // pass, where Bm is the weight) is cut into column units of equal width (a multiple of NR, at
    // most NC, at least two per thread), and a tall one (dW, and dinp when B*T exceeds the width)
    // into two row units per thread. Unit u belongs to thread u % threads, which therefore knows
    // its next unit and prefetches it. Called inside a parallel region (attention, one head per
    // thread), gemm runs on the calling thread alone, without opening a parallel region of its own:
    // attention calls it about 2000 times per layer, and even a region of one thread costs a call
    // into the OpenMP runtime (5% of cfgS's attention, doc/performance.md). Results do not depend
    // on any of this (see Determinism above).
    int nested = in_parallel(), threads = nested ? 1 : thread_count(), tall = M > N;
    // enough units to balance the threads
    int want = threads == 1 ? 1 : 2 * threads;
    // units of at least MR rows or NR columns
    int cap = tall ? (M + MR - 1) / MR : (N + NR - 1) / NR;
    int units = tall ? want : (N + NC - 1) / NC;               // a column unit is at most NC wide
    if (units < want) units = want;
    if (units > cap) units = cap;
    int span = tall ? M : N, step = tall ? MR : NR;
    int unit_span = ((span + units - 1) / units + step - 1) / step * step;
    GemmPlan g = {M, N, K, tall, threads, units, unit_span, A, Bm, NULL,
                  sam, sak, sbk, sbn, ldc, Cm, accumulate};
    g.packed = tall && !nested && packed_size(K, N) <= PACK_ALL_MAX ? pack_all(Bm, sbk, sbn, K, N)
                                                                    : NULL;
    if (threads == 1) {
        for (int u = 0; u < units; u++) gemm_plan_unit(&g, u);
    } else {
        #pragma omp parallel for schedule(static, 1)
        for (int u = 0; u < units; u++) gemm_plan_unit(&g, u);
    }
}

// ---- the fast softmax: section 1's loops with a vectorized exp ---------------------------------
// vexpf for expf, and the row's maximum and sum in vector-lane partial sums (`omp simd
// reduction`): a different order than left to right, but a fixed one, so results do not depend on
// the number of threads.
static void softmax_forward_fast(float* logits, float* losses, const int* targets, int BT, int V) {
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < BT; bt++) {
        float* z = logits + (long)bt * V;
        float mx = -FLT_MAX;
        #pragma omp simd reduction(max : mx)
        for (int i = 0; i < V; i++) mx = z[i] > mx ? z[i] : mx;
        float zt = targets ? z[targets[bt]] - mx : 0.0f;
        for (int i = 0; i < V; i++) z[i] = vexpf(z[i] - mx);
        // (a separate loop: GCC leaves an exp loop with a double reduction scalar)
        double sum = 0.0;
        #pragma omp simd reduction(+ : sum)
        for (int i = 0; i < V; i++) sum += z[i];
        float inv = (float)(1.0 / sum);
        for (int i = 0; i < V; i++) z[i] *= inv;
        // -log p = log(sum) - (z_t - max): exact even where p itself underflows
        if (targets) losses[bt] = (float)(log(sum) - zt);
    }
}

// ---- the fast matmul: the loops of matmul_forward / matmul_backward (section 1) as gemm calls ---
// out[BT,OC] = inp[BT,C] W[OC,C]^T + bias[OC]: the bias is written first and the products added to
// it.
static void matmul_forward_fast(float* out, const float* inp, const float* W, const float* bias,
                                int BT, int C, int OC) {
    if (bias) {
        #pragma omp parallel for schedule(static)
        for (int bt = 0; bt < BT; bt++)
            memcpy(out + (long)bt * OC, bias, (size_t)OC * sizeof(float));
    }
    gemm(BT, OC, C, inp, C, 1, W, 1, C, out, OC, bias != NULL);
}

// dinp[BT,C] += dout[BT,OC] W[OC,C];  dW[OC,C] += dout^T inp;  dbias[OC] += sum over rows of dout
static void matmul_backward_fast(float* dinp, float* dW, float* dbias, const float* dout,
                                 const float* inp, const float* W, int BT, int C, int OC) {
    if (dinp) gemm(BT, C, OC, dout, OC, 1, W, C, 1, dinp, C, 1);
    gemm(OC, C, BT, dout, 1, OC, inp, C, 1, dW, C, 1);   // A = dout^T: strides (1, OC)
    if (dbias) {
        #pragma omp parallel for schedule(static)
        for (int o0 = 0; o0 < OC; o0 += 64) {
            int o1 = o0 + 64 < OC ? o0 + 64 : OC;
            for (int bt = 0; bt < BT; bt++)
                for (int o = o0; o < o1; o++) dbias[o] += dout[(long)bt * OC + o];
        }
    }
}

// lm_head_backward without dlogits. Writing dlogits = s (P - Y) over the probabilities P (Y the
// one-hot targets, s = logit_scale / BT) is a pass that reads and writes all B*T*V of them (824 MB
// on cfgS, about 1% of its step). The products can take P as it is, and the rest is B*T rows:
//   dinp += s (P W - W[targets])                   (P W into scratch first)
//   dW   += P^T (s inp) - (s inp)[bt] at row targets[bt]
// Same sums, in another order: the step's losses move in the last bits, not beyond the PyTorch
// fixtures' tolerance (test_fixtures checks both paths).
static void lm_head_backward_fast(float* dinp, float* dW, float* P, const int* targets,
                                  const float* inp, const float* W, float* scratch, int BT, int C,
                                  int V, float scale) {
    float s = scale / BT;
    gemm(BT, C, V, P, V, 1, W, C, 1, scratch, C, 0);   // P W
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < BT; bt++) {
        const float* wt = W + (long)targets[bt] * C;
        for (int c = 0; c < C; c++)
            dinp[(long)bt * C + c] += s * (scratch[(long)bt * C + c] - wt[c]);
    }
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)BT * C; i++) scratch[i] = s * inp[i];
    gemm(V, C, BT, P, 1, V, scratch, C, 1, dW, C, 1);   // A = P^T: strides (1, V)
    // row targets[bt] -= (s inp)[bt]: one thread, since targets repeat (not embedding_backward,
    // whose definition a student may edit: the check would then blame this twin)
    for (int bt = 0; bt < BT; bt++)
        for (int c = 0; c < C; c++) dW[(long)targets[bt] * C + c] -= scratch[(long)bt * C + c];
}

// The fast attention's block of query rows, and the scratch its backward needs: one ATT_QB x T
// block of dP per thread.
#define ATT_QB 64
static long attention_scratch_per_thread(int T) { return (long)(T < ATT_QB ? T : ATT_QB) * T; }
static long attention_scratch_floats(int T) {
    return thread_count() * attention_scratch_per_thread(T);
}

// Row t of A in place: softmax over keys 0..t of scale * (the scores there), zeros after t.
static void causal_softmax_row(float* a, int t, int T, float scale) {
    float mx = -FLT_MAX, sum = 0.0f;
    #pragma omp simd reduction(max : mx)
    for (int s = 0; s <= t; s++) mx = a[s] * scale > mx ? a[s] * scale : mx;
    #pragma omp simd reduction(+ : sum)
    for (int s = 0; s <= t; s++) {
        a[s] = vexpf(a[s] * scale - mx);
        sum += a[s];
    }
    float inv = 1.0f / sum;
    for (int s = 0; s <= t; s++) a[s] *= inv;
    for (int s = t + 1; s < T; s++) a[s] = 0.0f;
}

// ---- the fast attention: section 1's loops as matrix products --------------------------------
// Per head, attention is two matrix products, done by gemm on one thread (the heads are the
// parallel loop). Queries go in blocks of ATT_QB rows: the rows [t0, t0+n) see only the keys [0,
// t0+n), so the products skip the masked upper triangle of A except inside the diagonal blocks.
static void attention_forward_fast(float* y, float* att, const float* q, const float* k,
                                   const float* v, int B, int T, int H, int KVH, int hd,
                                   float scale) {
    int group = H / KVH, qd = H * hd, kvd = KVH * hd;
    #pragma omp parallel for collapse(2) schedule(dynamic)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int kh = h / group;
            const float* qb = q + (long)b * T * qd + h * hd;      // rows t, stride qd
            const float* kb = k + (long)b * T * kvd + kh * hd;    // rows s, stride kvd
            const float* vb = v + (long)b * T * kvd + kh * hd;
            float* ab = att + ((long)b * H + h) * T * T;
            float* yb = y + (long)b * T * qd + h * hd;
            for (int t0 = 0; t0 < T; t0 += ATT_QB) {
                int n = T - t0 < ATT_QB ? T - t0 : ATT_QB, keys = t0 + n;
                // q k^T
                gemm(n, keys, hd, qb + (long)t0 * qd, qd, 1, kb, 1, kvd, ab + (long)t0 * T, T, 0);
                for (int t = t0; t < t0 + n; t++) causal_softmax_row(ab + (long)t * T, t, T, scale);
                // A v
                gemm(n, hd, keys, ab + (long)t0 * T, T, 1, vb, kvd, 1, yb + (long)t0 * qd, qd, 0);
            }
        }
}

// With P = scale * q k^T and A = softmax(P), per head and block of query rows:
//   dA = dy v^T ;  dP[t,s] = A[t,s] (dA[t,s] - sum_s' A[t,s'] dA[t,s'])
//   dq += scale * dP k ;  dk += scale * dP^T q ;  dv += A^T dy
// dA and dP share one block of scratch per thread, never a [B,H,T,T] buffer; the scratch grows to
// the largest T and thread count asked for, and stays. Heads that share a kv head write the same
// dk/dv, so one thread owns each (b, kv head).
static void attention_backward_fast(float* dq, float* dk, float* dv, const float* dy,
                                    const float* att, const float* q, const float* k,
                                    const float* v, int B, int T, int H, int KVH, int hd,
                                    float scale) {
    static float* scratch;
    static long scratch_floats;
    if (attention_scratch_floats(T) > scratch_floats) {
        free(scratch);
        scratch_floats = attention_scratch_floats(T);
        scratch = xmalloc((size_t)scratch_floats * sizeof(float));
    }
    int group = H / KVH, qd = H * hd, kvd = KVH * hd;
    #pragma omp parallel for collapse(2) schedule(dynamic)
    for (int b = 0; b < B; b++)
        for (int kh = 0; kh < KVH; kh++) {
            float* dp = scratch + thread_id() * attention_scratch_per_thread(T);
            const float* kb = k + (long)b * T * kvd + kh * hd;
            const float* vb = v + (long)b * T * kvd + kh * hd;
            float* dkb = dk + (long)b * T * kvd + kh * hd;
            float* dvb = dv + (long)b * T * kvd + kh * hd;
            for (int h = kh * group; h < (kh + 1) * group; h++) {
                const float* ab = att + ((long)b * H + h) * T * T;
                const float* qb = q + (long)b * T * qd + h * hd;
                const float* dyb = dy + (long)b * T * qd + h * hd;
                float* dqb = dq + (long)b * T * qd + h * hd;
                for (int t0 = 0; t0 < T; t0 += ATT_QB) {
                    int n = T - t0 < ATT_QB ? T - t0 : ATT_QB, keys = t0 + n;
                    // dA = dy v^T
                    gemm(n, keys, hd, dyb + (long)t0 * qd, qd, 1, vb, 1, kvd, dp, keys, 0);
                    for (int r = 0; r < n; r++) {
                        int t = t0 + r;
                        const float* a = ab + (long)t * T;
                        float* d = dp + (long)r * keys;
                        float adot = 0.0f;
                        #pragma omp simd reduction(+ : adot)
                        for (int s = 0; s <= t; s++) adot += a[s] * d[s];
                        for (int s = 0; s <= t; s++) d[s] = a[s] * (d[s] - adot) * scale;
                        for (int s = t + 1; s < keys; s++) d[s] = 0.0f;
                    }
                    // dq += dP k
                    gemm(n, hd, keys, dp, keys, 1, kb, kvd, 1, dqb + (long)t0 * qd, qd, 1);
                    // dk += dP^T q
                    gemm(keys, hd, n, dp, 1, keys, qb + (long)t0 * qd, qd, 1, dkb, kvd, 1);
                    gemm(keys, hd, n, ab + (long)t0 * T, 1, T, dyb + (long)t0 * qd, qd, 1, dvb, kvd,
                         1); // dv += A^T dy
                }
            }
        }
}

// ---- the twins in place of the definitions ------------------------------------------------------
static const Impl twins = {matmul_forward_fast, matmul_backward_fast, attention_forward_fast,
                           attention_backward_fast, softmax_forward_fast, lm_head_backward_fast};

// `make train_gpt2 REFERENCE=1` (-DREFERENCE=1) builds a trainer that keeps the definitions.
#ifndef REFERENCE
#define REFERENCE 0
#endif

// n numbers in [-1, 1) from a fixed sequence: the check needs inputs, not randomness.
static float* check_input(size_t n, unsigned seed) {
    float* x = xmalloc(n * sizeof(float));
    unsigned u = seed;
    for (size_t i = 0; i < n; i++) {
        u = u * 1664525u + 1013904223u;
        x[i] = (float)(u >> 8) / (float)(1 << 23) - 1.0f;
    }
    return x;
}

// Each check runs one layer through `use` on a small input (2 sequences of 7 tokens, 4 heads
// sharing 2 kv heads, widths 36 to 40, a vocabulary of 37) and writes every output, the gradients
// from a nonzero start (they accumulate), into out. Returns how many floats it wrote.
static int check_matmul_forward(const Impl* use, float* out) {
    float *inp = check_input(14 * 36, 1), *W = check_input(40 * 36, 2), *b = check_input(40, 3);
    use->matmul_forward(out, inp, W, b, 14, 36, 40);
    free(inp), free(W), free(b);
    return 14 * 40;
}

static int check_matmul_backward(const Impl* use, float* out) {
    float *dout = check_input(14 * 40, 4), *inp = check_input(14 * 36, 1);
    float *W = check_input(40 * 36, 2), *start = check_input(14 * 36 + 40 * 36 + 40, 5);
    memcpy(out, start, (14 * 36 + 40 * 36 + 40) * sizeof(float));
    use->matmul_backward(out, out + 14 * 36, out + 14 * 36 + 40 * 36, dout, inp, W, 14, 36, 40);
    free(dout), free(inp), free(W), free(start);
    return 14 * 36 + 40 * 36 + 40;
}

// q [14, 4*8], k and v [14, 2*8]; scale 0.35
static int check_attention_forward(const Impl* use, float* out) {
    float *q = check_input(14 * 32, 6), *k = check_input(14 * 16, 7), *v = check_input(14 * 16, 8);
    use->attention_forward(out, out + 14 * 32, q, k, v, 2, 7, 4, 2, 8, 0.35f);
    free(q), free(k), free(v);
    return 14 * 32 + 2 * 4 * 7 * 7;
}

static int check_attention_backward(const Impl* use, float* out) {
    float *q = check_input(14 * 32, 6), *k = check_input(14 * 16, 7), *v = check_input(14 * 16, 8);
    float *dy = check_input(14 * 32, 9), *start = check_input(14 * 64, 10);
    float *y = xmalloc(14 * 32 * sizeof(float)), *att = xmalloc(2 * 4 * 7 * 7 * sizeof(float));
    definitions.attention_forward(y, att, q, k, v, 2, 7, 4, 2, 8, 0.35f);
    memcpy(out, start, 14 * 64 * sizeof(float));
    use->attention_backward(out, out + 14 * 32, out + 14 * 48, dy, att, q, k, v, 2, 7, 4, 2, 8,
                            0.35f);
    free(q), free(k), free(v), free(dy), free(start), free(y), free(att);
    return 14 * 64;
}

static const int check_targets[14] = {3, 36, 0, 17, 5, 5, 22, 9, 30, 1, 14, 28, 2, 11};

// logits times 8, so that the probabilities range widely
static int check_softmax_forward(const Impl* use, float* out) {
    float* z = check_input(14 * 37, 11);
    for (int i = 0; i < 14 * 37; i++) out[i] = 8.0f * z[i];
    use->softmax_forward(out, out + 14 * 37, check_targets, 14, 37);
    free(z);
    return 14 * 37 + 14;
}

static int check_lm_head_backward(const Impl* use, float* out) {
    float *probs = check_input(14 * 37, 11), *inp = check_input(14 * 36, 1);
    float *W = check_input(37 * 36, 2), *start = check_input(14 * 36 + 37 * 36, 12);
    float* scratch = xmalloc(14 * 36 * sizeof(float));
    definitions.softmax_forward(probs, NULL, NULL, 14, 37);
    memcpy(out, start, (14 * 36 + 37 * 36) * sizeof(float));
    use->lm_head_backward(out, out + 14 * 36, probs, check_targets, inp, W, scratch, 14, 36, 37,
                          0.7f);
    free(probs), free(inp), free(W), free(start), free(scratch);
    return 14 * 36 + 37 * 36;
}

// At start-up: point `impl` at the twins, if each gives its definition's numbers on the small input
// above to 1e-5 of the largest (they sum in other orders; a wrong formula is off by far more), and
// refuse to start if one does not: its definition was edited, or the twin is wrong.
static void twins_install(void) {
    if (REFERENCE) return;
    static const struct { const char* name; int (*run)(const Impl*, float*); } checks[] = {
        {"matmul_forward", check_matmul_forward}, {"matmul_backward", check_matmul_backward},
        {"attention_forward", check_attention_forward},
        {"attention_backward", check_attention_backward},
        {"softmax_forward", check_softmax_forward}, {"lm_head_backward", check_lm_head_backward},
    };
    float *def = xmalloc(4096 * sizeof(float)), *twin = xmalloc(4096 * sizeof(float));
    for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++) {
        int n = checks[i].run(&definitions, def);
        checks[i].run(&twins, twin);
        double diff = 0.0, top = 0.0;
        for (int j = 0; j < n; j++) {
            diff = fmax(diff, fabs((double)def[j] - twin[j]));
            top = fmax(top, fabs((double)def[j]));
        }
        if (!(diff <= 1e-5 * top))
            fatal("%s: the definition (section 1) and its fast twin (section 8) disagree (by %.1e "
                  "of %.1e); to train on the definitions: make train_gpt2 REFERENCE=1",
                  checks[i].name, diff, top);
    }
    free(def), free(twin);
    impl = twins;
}

// ============================================================================================
// 9. Probes: the quantities the papers measure inside a network
//     Each probe reads what the forward and backward pass of a training step left behind (Acts,
//     gradients, weights) and writes JSON lines to the log. None writes to the model, so a run is
//     the same with probes on or off; off (-p 0, the default) they cost a few integer tests a step.
//     doc/probes.md lists every probe, its log fields and its cost.
// ============================================================================================

enum {
    P_ACT, P_GRAD, P_WEIGHT, P_NORMSCALE, P_RESFLOW, P_SINK, P_RANK, P_CONDENSE, P_EMBCOS,
    P_GRADACT, P_ATTNLOGIT, P_SAT, P_SPIKE, P_COORD, P_HIST, NUM_PROBES
};
static const char* probe_names[NUM_PROBES] = {
        "act",    "grad",    "weight",    "normscale", "resflow", "sink",  "rank", "condense",
        "embcos", "gradact", "attnlogit", "sat",       "spike",   "coord", "hist"};
// "all": every probe but coord (--coord-check runs it) and hist
#define PROBES_ALL ((1u << P_COORD) - 1)

// rank: power iteration stops when sigma_max moves by less than this fraction
#define POWER_TOL 1e-6
#define POWER_MAX_ITERS 1000
#define JACOBI_MAX_SWEEPS 60
#define EMBCOS_K 50             // embcos: the K most frequent training tokens
#define SPIKE_WINDOW 50         // spike: the moving statistics span about this many steps
#define SPIKE_WARMUP 10         // spike: no z-score before this many steps
#define COSSIM_MAX_ROWS 8192    // --cossim-dump writes rows^2 floats


struct Probes {
    unsigned sel;               // bit p set: probe_names[p] runs
    int every, step;            // -p N; the probe step being written
    void (*emit)(void* ctx, const char* fields);    // writes one log line (main: log_event)
    void* ctx;
    // grad: the parameters before the update (allocated at the first probe step)
    float* before;
    // grad: each tensor's gradient RMS, taken before the update zeroes them
    double* grad_rms;
    int* top_tok;               // embcos: the most frequent training tokens
    int ntop;
    const Tensor* cossim;       // --cossim-dump
    const char* out_dir;
    // spike: the run's statistics of the loss and the gradient norm (Run.spike)
    Ema* spike;
    float spike_z;
    int spike_skip;
};

// ---- the log line ------------------------------------------------------------------------------
// A non-finite number (1/sigma of an all-zero row, a z-score before the warmup) is written as null,
// so every line stays valid JSON.
static int json_num(char* s, size_t cap, double x) {
    return isfinite(x) ? snprintf(s, cap, "%.8g", x) : snprintf(s, cap, "null");
}

// "event":"probe", the step, the probe's name, layer (-1: not one layer's), tensor, the headline
// value, then the probe's named fields (doc/probes.md).
// The fields every probe line starts with, into s; returns their length.
static int probe_line_start(const Probes* pr, char* s, size_t cap, int probe, int layer,
                            const char* tensor, double value) {
    int n = snprintf(s, cap,
                     "\"event\":\"probe\",\"step\":%d,\"probe\":\"%s\",\"layer\":%d,\"tensor\":\"%"
                     "s\",\"value\":",
                     pr->step, probe_names[probe], layer, tensor);
    return n + json_num(s + n, cap - n, value);
}

static void probe_emit(Probes* pr, int probe, int layer, const char* tensor, double value, int nf,
                       const char* const* keys, const double* vals) {
    char s[1024];
    int n = probe_line_start(pr, s, sizeof(s), probe, layer, tensor, value);
    for (int i = 0; i < nf; i++) {
        n += snprintf(s + n, sizeof(s) - n, ",\"%s\":", keys[i]);
        n += json_num(s + n, sizeof(s) - n, vals[i]);
    }
    pr->emit(pr->ctx, s);
}

static const char* layer_name(char* buf, size_t cap, int l, const char* what) {
    snprintf(buf, cap, "h.%d.%s", l, what);
    return buf;
}

// ---- the measurements ---------------------------------------------------------------------------
typedef struct {
    double mean, std, rms, abs_mean, min, max, zero_frac;
} Stats;

// Statistics of a - b over n elements (b NULL: of a), in double, the std in a second pass. A
// sublayer's output is not stored, only the stream before and after it, so it is measured as a
// difference: attention out = resmid - res, MLP out = res[l+1] - resmid.
static Stats stats_of(const float* a, const float* b, long n) {
    Stats s = {.min = INFINITY, .max = -INFINITY};
    double sum = 0.0, sq = 0.0, ab = 0.0, dev = 0.0;
    long zeros = 0;
    for (long i = 0; i < n; i++) {
        double x = b ? (double)a[i] - b[i] : a[i];
        sum += x;
        sq += x * x;
        ab += fabs(x);
        zeros += x == 0.0;
        if (x < s.min) s.min = x;
        if (x > s.max) s.max = x;
    }
    s.mean = sum / n;
    for (long i = 0; i < n; i++) {
        double x = b ? (double)a[i] - b[i] : a[i];
        dev += (x - s.mean) * (x - s.mean);
    }
    s.std = sqrt(dev / n);
    s.rms = sqrt(sq / n);
    s.abs_mean = ab / n;
    s.zero_frac = (double)zeros / n;
    return s;
}

// [SmallInit §2.1, Fig. 1c]: a norm multiplies each row h by (sigma^2(h) + eps)^(-1/2), sigma^2 the
// variance over the C channels (LayerNorm, eq. 1) or the mean square (RMSNorm, eq. 2). Once sigma^2
// falls below eps, eps sets the factor and the scale of h no longer reaches the output.
// out: [0] mean factor, [1] mean eps-free factor 1/sigma(h), [2] fraction of rows where eps >
// sigma^2, [3] mean sigma^2.
static void norm_scale(const float* x, long rows, int C, int rms, double eps, double out[4]) {
    double f = 0.0, free = 0.0, dom = 0.0, var = 0.0;
    for (long r = 0; r < rows; r++) {
        const float* h = x + r * C;
        double mu = 0.0, v = 0.0;
        if (!rms) {
            for (int c = 0; c < C; c++) mu += h[c];
            mu /= C;
        }
        for (int c = 0; c < C; c++) v += (h[c] - mu) * (h[c] - mu);
        v /= C;
        f += 1.0 / sqrt(v + eps);      // [SmallInit eqs. 1-2]: the factor the norm applies
        free += 1.0 / sqrt(v);
        dom += eps > v;
        var += v;
    }
    out[0] = f / rows;
    out[1] = free / rows;
    out[2] = dom / rows;
    out[3] = var / rows;
}

// [SmallInit §2.4, App. A]: the residual flow h - e against the embedding stream e, per token
// ||h - e||_2 / ||e||_2, averaged over the rows. With h = h_L it grows like d^(1-gamma) (App. A),
// with a constant that grows with the depth L: like sqrt(L) for the MLP branch alone, faster for
// the attention branch and the whole model [Errata 000-5f].
static double resflow_ratio(const float* e, const float* h, long rows, int C) {
    double sum = 0.0;
    for (long r = 0; r < rows; r++) {
        double dd = 0.0, ee = 0.0;
        for (int c = 0; c < C; c++) {
            double x = e[r * C + c], d = (double)h[r * C + c] - x;
            dd += d * d;
            ee += x * x;
        }
        sum += sqrt(dd) / sqrt(ee);
    }
    return sum / rows;
}

// [SmallInit eq. 5]: S(l,h) = (1/T) sum_i A_h(i, 1), the attention mass the T queries put on the
// first key, averaged over the B sequences. att is [B,H,T,T]: row i is query i, column 0 the first
// key.
static void sink_scores(const float* att, int B, int H, int T, double* S) {
    for (int h = 0; h < H; h++) {
        double s = 0.0;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < T; i++) s += att[(((long)b * H + h) * T + i) * T];
        S[h] = s / ((double)B * T);
    }
}

// ||W||_2 = sigma_max by power iteration on W^T W: v <- W^T (W v) / ||W^T (W v)||. sigma = ||W v||
// for unit v rises monotonically to sigma_max; the loop stops when one iteration moves it by less
// than POWER_TOL of itself. The error left is then about POWER_TOL / (1 - (sigma_2 / sigma_1)^2),
// so the stable rank is good to ~1e-4 for random matrices (test_gpt2.c compares with the Jacobi
// SVD). The start vector comes from a generator of its own, so training's generators are not
// touched.
static double sigma_max(const float* W, int rows, int cols, int* iters) {
    double* v = xmalloc((size_t)cols * sizeof(double));
    double* u = xmalloc((size_t)rows * sizeof(double));
    Rng g;
    rng_seed(&g, 1);
    double nv = 0.0, sigma = 0.0;
    for (int c = 0; c < cols; c++) { v[c] = rng_u32(&g) / 4294967296.0 - 0.5; nv += v[c] * v[c]; }
    for (int c = 0; c < cols; c++) v[c] /= sqrt(nv);
    int it = 1;
    for (; it <= POWER_MAX_ITERS; it++) {
        double s2 = 0.0, prev = sigma;
        for (int r = 0; r < rows; r++) {
            const float* w = W + (size_t)r * cols;
            double d = 0.0;
            for (int c = 0; c < cols; c++) d += w[c] * v[c];
            u[r] = d;
            s2 += d * d;
        }
        sigma = sqrt(s2);
        for (int c = 0; c < cols; c++) v[c] = 0.0;
        for (int r = 0; r < rows; r++) {
            const float* w = W + (size_t)r * cols;
            for (int c = 0; c < cols; c++) v[c] += w[c] * u[r];
        }
        nv = 0.0;
        for (int c = 0; c < cols; c++) nv += v[c] * v[c];
        if (nv == 0.0 || fabs(sigma - prev) <= POWER_TOL * sigma) break;   // W = 0, or converged
        for (int c = 0; c < cols; c++) v[c] /= sqrt(nv);
    }
    free(v);
    free(u);
    *iters = it > POWER_MAX_ITERS ? POWER_MAX_ITERS : it;
    return sigma;
}

// [SmallInit eq. 7]: the stable rank ||W||_F^2 / ||W||_2^2 = sum_i sigma_i^2 / sigma_max^2, n for
// an orthogonal n x n matrix, 1 for rank one. *smax and *iters receive sigma_max and the
// iterations.
static double stable_rank(const float* W, int rows, int cols, double* smax, int* iters) {
    double fro2 = 0.0;
    for (size_t j = 0; j < (size_t)rows * cols; j++) fro2 += (double)W[j] * W[j];
    *smax = sigma_max(W, rows, cols, iters);
    return fro2 / (*smax * *smax);
}

// Eigenvalues of the symmetric n x n matrix A (row-major, overwritten) by the cyclic Jacobi method
// (Golub & Van Loan, Matrix Computations §8.5): the rotation J(p,q) with tan = t zeroes A[p][q] in
// J^T A J; sweeps over all pairs repeat until the off-diagonal part is below 1e-12 of ||A||_F
// (convergence is quadratic: a handful of sweeps). Returns the number of sweeps.
static int jacobi_eigenvalues(double* A, int n, double* eig) {
    double total = 0.0;
    for (long i = 0; i < (long)n * n; i++) total += A[i] * A[i];
    int sweep = 0;
    for (; sweep < JACOBI_MAX_SWEEPS; sweep++) {
        double off = 0.0;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) off += 2.0 * A[p * n + q] * A[p * n + q];
        if (off <= 1e-24 * total) break;
        for (int p = 0; p < n - 1; p++)
            for (int q = p + 1; q < n; q++) {
                double apq = A[p * n + q];
                if (apq == 0.0) continue;
                double tau = (A[q * n + q] - A[p * n + p]) / (2.0 * apq);
                double t = (tau >= 0.0 ? 1.0 : -1.0) / (fabs(tau) + sqrt(1.0 + tau * tau));
                double c = 1.0 / sqrt(1.0 + t * t), s = t * c;
                for (int k = 0; k < n; k++) {         // A <- A J: columns p and q
                    double akp = A[k * n + p], akq = A[k * n + q];
                    A[k * n + p] = c * akp - s * akq;
                    A[k * n + q] = s * akp + c * akq;
                }
                for (int k = 0; k < n; k++) {         // A <- J^T A: rows p and q
                    double apk = A[p * n + k], aqk = A[q * n + k];
                    A[p * n + k] = c * apk - s * aqk;
                    A[q * n + k] = s * apk + c * aqk;
                }
                A[p * n + q] = A[q * n + p] = 0.0;    // zero by construction; drop the rounding
            }
    }
    for (int i = 0; i < n; i++) eig[i] = A[i * n + i];
    return sweep;
}

static int cmp_desc(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x < y) - (x > y);
}

// All min(rows, cols) singular values of W, largest first: square roots of the eigenvalues of the
// Gram matrix of the smaller side (W^T W or W W^T), formed in double. Squaring loses the singular
// values below ~1e-8 sigma_max, which the sum in D_s cannot notice.
static void singular_values(const float* W, int rows, int cols, double* sv) {
    int n = rows < cols ? rows : cols, by_rows = rows >= cols;
    double* G = xcalloc((size_t)n * n, sizeof(double));
    if (by_rows) {            // G = W^T W, summed row by row of W
        for (int r = 0; r < rows; r++) {
            const float* w = W + (size_t)r * cols;
            for (int i = 0; i < n; i++)
                for (int j = i; j < n; j++) G[i * n + j] += (double)w[i] * w[j];
        }
    } else {                  // G = W W^T: dot products of the rows
        for (int i = 0; i < n; i++)
            for (int j = i; j < n; j++) {
                double d = 0.0;
                for (int c = 0; c < cols; c++)
                    d += (double)W[(size_t)i * cols + c] * W[(size_t)j * cols + c];
                G[i * n + j] = d;
            }
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) G[i * n + j] = G[j * n + i];
    jacobi_eigenvalues(G, n, sv);
    for (int i = 0; i < n; i++) sv[i] = sqrt(fmax(sv[i], 0.0));
    qsort(sv, n, sizeof(double), cmp_desc);
    free(G);
}

// [ComplexCtl eq. 2], with the 1/n^2 normalization of [Errata 003-3]: D_c is the mean cosine
// over all n^2 ordered pairs of the n rows (neurons) of the (out, in) weight, diagonal included: 1
// when every row points the same way, 1/n for orthogonal rows. sum_ij cos(w_i, w_j) = ||sum_i
// w_i/||w_i|| ||^2, so it costs one pass. A zero row has cosine 0 with everything.
static double condensation_degree(const float* W, int rows, int cols) {
    double* s = xcalloc(cols, sizeof(double));
    for (int r = 0; r < rows; r++) {
        const float* w = W + (size_t)r * cols;
        double nn = 0.0;
        for (int c = 0; c < cols; c++) nn += (double)w[c] * w[c];
        if (nn == 0.0) continue;
        for (int c = 0; c < cols; c++) s[c] += w[c] / sqrt(nn);
    }
    double ss = 0.0;
    for (int c = 0; c < cols; c++) ss += s[c] * s[c];
    free(s);
    return ss / ((double)rows * rows);
}

// [ComplexCtl eq. 2]: the low-rank degree D_s = sigma_max / sum_i sigma_i, from 1/min(rows, cols)
// (all singular values equal) to 1 (rank one) [Errata 003-4].
static double lowrank_degree(const float* W, int rows, int cols) {
    int n = rows < cols ? rows : cols;
    double* sv = xmalloc((size_t)n * sizeof(double));
    singular_values(W, rows, cols, sv);
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += sv[i];
    double ds = sv[0] / sum;
    free(sv);
    return ds;
}

// [SmallInit eq. 6]: C_ij = <w_i, w_j> / (||w_i||_2 ||w_j||_2) for the rows idx[0..n-1] of W (all
// rows when idx is NULL), 0 where a row is zero. Cout is n x n, row-major.
static void row_cosines(const float* W, const int* idx, int n, int cols, float* Cout) {
    double* norm = xmalloc((size_t)n * sizeof(double));
    for (int i = 0; i < n; i++) {
        const float* w = W + (size_t)(idx ? idx[i] : i) * cols;
        double nn = 0.0;
        for (int c = 0; c < cols; c++) nn += (double)w[c] * w[c];
        norm[i] = sqrt(nn);
    }
    #pragma omp parallel for schedule(dynamic, 16)
    for (int i = 0; i < n; i++) {
        const float* wi = W + (size_t)(idx ? idx[i] : i) * cols;
        for (int j = i; j < n; j++) {
            const float* wj = W + (size_t)(idx ? idx[j] : j) * cols;
            double d = 0.0;
            for (int c = 0; c < cols; c++) d += (double)wi[c] * wj[c];
            float cs = norm[i] > 0.0 && norm[j] > 0.0 ? (float)(d / (norm[i] * norm[j])) : 0.0f;
            Cout[(size_t)i * n + j] = Cout[(size_t)j * n + i] = cs;
        }
    }
    free(norm);
}

// The K most frequent tokens of the training data, most frequent first (ties: the lower id).
// Returns how many there are (fewer than K when fewer distinct tokens occur).
static int top_tokens(const uint16_t* tok, size_t n, int V, int K, int* out) {
    size_t* count = xcalloc(V, sizeof(size_t));
    for (size_t i = 0; i < n; i++) count[tok[i]]++;
    int k = 0;
    for (; k < K; k++) {
        int best = -1;
        for (int v = 0; v < V; v++)
            if (count[v] && (best < 0 || count[v] > count[best])) best = v;
        if (best < 0) break;
        out[k] = best;
        count[best] = 0;
    }
    free(count);
    return k;
}

// z = (x - mean) / std of the values before x (NAN during the warmup), then x joins the statistics:
// exponential moving mean and variance with weight a = 2 / (window + 1).
static double ema_z_update(Ema* e, double x) {
    double z = e->n >= SPIKE_WARMUP && e->var > 0.0 ? (x - e->mean) / sqrt(e->var) : NAN;
    if (e->n == 0) {
        e->mean = x;
    } else {
        double a = 2.0 / (SPIKE_WINDOW + 1), d = x - e->mean;
        e->mean += a * d;
        e->var = (1.0 - a) * (e->var + a * d * d);
    }
    e->n++;
    return z;
}

// ---- the probes ---------------------------------------------------------------------------------
// They read the activations of the last forward pass, which in training is the full B x T batch of
// the probe step (the per-layer strides of Acts are m->B * m->T rows).

static void emit_stats(Probes* pr, int probe, int layer, const char* name, Stats s) {
    static const char* keys[] = {"mean", "std", "rms", "abs_mean", "min", "max", "zero_frac"};
    double v[] = {s.mean, s.std, s.rms, s.abs_mean, s.min, s.max, s.zero_frac};
    probe_emit(pr, probe, layer, name, s.std, 7, keys, v);
}
static void emit_act(Probes* pr, int layer, const char* name, Stats s) {
    emit_stats(pr, P_ACT, layer, name, s);
}

// act: statistics of every activation, stored or derived [InitGuide ch. 0], [VarDyn E1].
static void probe_act(Probes* pr, const Model* m) {
    const Config* c = &m->cfg;
    const Acts* a = &m->a;
    long BT = (long)m->B * m->T, sc = BT * c->C;
    char name[48];
    emit_act(pr, -1, "emb", stats_of(a->res, NULL, sc));
    for (int l = 0; l < c->L; l++) {
        const float *x = a->res + l * sc, *xmid = a->resmid + l * sc, *xout = a->res + (l + 1) * sc;
        emit_act(pr, l, layer_name(name, sizeof(name), l, "ln1"),
                 stats_of(a->ln1 + l * sc, NULL, sc));
        if (c->attn_gate)
            emit_act(pr, l, layer_name(name, sizeof(name), l, "gate"),
                     stats_of(a->attn_gate + l * BT * c->H, NULL, BT * c->H));
        emit_act(pr, l, layer_name(name, sizeof(name), l, "attn_out"), stats_of(xmid, x, sc));
        emit_act(pr, l, layer_name(name, sizeof(name), l, "ln2"),
                 stats_of(a->ln2 + l * sc, NULL, sc));
        emit_act(pr, l, layer_name(name, sizeof(name), l, "mlp_act"),
                 stats_of(a->hact + l * BT * c->F, NULL, BT * c->F));
        emit_act(pr, l, layer_name(name, sizeof(name), l, "mlp_out"), stats_of(xout, xmid, sc));
        emit_act(pr, l, layer_name(name, sizeof(name), l, "res"), stats_of(xout, NULL, sc));
    }
    emit_act(pr, -1, "lnf", stats_of(a->lnf, NULL, sc));
}

// gradact: the backward signal, d loss / d x at the input x of every block (h.l.in) and of the
// final norm (lnf.in). Xavier's backward condition [Xavier], [InitFP §2] keeps its variance the
// same from layer to layer, as the forward condition keeps the activations'; "value" is its std.
// The backward pass leaves d loss / d (each block's input) in its slice of Acts.dres.
static void probe_gradact(Probes* pr, const Model* m) {
    const Config* c = &m->cfg;
    long sc = (long)m->B * m->T * c->C;
    char name[48];
    for (int l = 0; l < c->L; l++)
        emit_stats(pr, P_GRADACT, l, layer_name(name, sizeof(name), l, "in"),
                   stats_of(m->a.dres + l * sc, NULL, sc));
    emit_stats(pr, P_GRADACT, -1, "lnf.in", stats_of(m->a.dres + c->L * sc, NULL, sc));
}

// sat: the fraction of saturated units. [InitGuide ch. 2]: under a too-large initialization tanh
// units crowd near +-1, where the function is flat, and pass almost no gradient back. Here a unit
// is saturated where its nonlinearity's slope is below SAT_FRACTION of the steepest slope it has:
// the MLP's hidden units, GELU'(u) of the pre-activation u (SwiGLU: SiLU'(a) of the gate
// pre-activation a), and with -G 1 the attention gates, sigmoid' = s (1 - s) of the gate value s.
// "value": the fraction; "slope_below": the threshold.
#define SAT_FRACTION 0.05
#define GELU_MAX_SLOPE 1.1289       // max of gelu_grad_of, at u = 1.42 (the test checks both peaks)
#define SILU_MAX_SLOPE 1.0998       // max of s (1 + a (1 - s)), at a = 2.40
static void probe_sat(Probes* pr, const Model* m) {
    static const char* keys[] = {"slope_below"};
    const Config* c = &m->cfg;
    long BT = (long)m->B * m->T, n = BT * c->F;
    char name[48];
    for (int l = 0; l < c->L; l++) {
        const float* pre = (c->swiglu ? m->a.mlp_gate : m->a.up) + l * n;
        double below = SAT_FRACTION * (c->swiglu ? SILU_MAX_SLOPE : GELU_MAX_SLOPE);
        long flat = 0;
        for (long i = 0; i < n; i++) {
            float u = pre[i], sg = sigmoid_of(u);
            float slope = c->swiglu ? sg * (1.0f + u * (1.0f - sg)) : gelu_grad_of(u);
            flat += fabsf(slope) < below;
        }
        probe_emit(pr, P_SAT, l, layer_name(name, sizeof(name), l, "mlp"), (double)flat / n, 1,
                   keys, &below);
        if (!c->attn_gate) continue;
        const float* g = m->a.attn_gate + l * BT * c->H;
        below = SAT_FRACTION * 0.25;
        flat = 0;
        for (long i = 0; i < BT * c->H; i++) flat += g[i] * (1.0f - g[i]) < below;
        probe_emit(pr, P_SAT, l, layer_name(name, sizeof(name), l, "gate"),
                   (double)flat / (BT * c->H), 1, keys, &below);
    }
}

// hist: histograms, the pictures of [InitGuide ch. 2] (activations at layers 1, 5 and 10) for each
// block: its MLP's hidden activations (h.L.mlp_act), its output on the residual stream (h.L.res)
// and the gradient of each of its weight matrices (TENSOR.grad). HIST_BINS equal bins over mean +-
// 4 std ("lo", "hi"); a value outside goes to the first or last bin; "counts" the bins, "nonfinite"
// NaN and inf.
#define HIST_BINS 40
// The histogram of x in `bins` equal bins over mean +- 4 std: counts[bins], the range's low end *lo
// and the bin *width, *nonfinite NaN and inf (in no bin); returns x's statistics. Also the
// histograms of the diag lab (dev/labs/mlp_lab.c).
static Stats hist_of(const float* x, long n, int bins, long* counts, double* lo, double* width,
                     long* nonfinite) {
    Stats st = stats_of(x, NULL, n);
    *lo = st.mean - 4.0 * st.std;
    *width = 8.0 * st.std / bins;
    *nonfinite = 0;
    for (int b = 0; b < bins; b++) counts[b] = 0;
    for (long i = 0; i < n; i++) {
        if (!isfinite(x[i])) { (*nonfinite)++; continue; }
        double b = *width > 0.0 ? floor((x[i] - *lo) / *width) : bins / 2;
        counts[b < 0 ? 0 : b >= bins ? bins - 1 : (int)b]++;
    }
    return st;
}

static void emit_hist(Probes* pr, int layer, const char* name, const float* x, long n) {
    long counts[HIST_BINS], nonfinite;
    double lo, width;
    Stats st = hist_of(x, n, HIST_BINS, counts, &lo, &width, &nonfinite);
    char s[2048];
    int k = probe_line_start(pr, s, sizeof(s), P_HIST, layer, name, st.std);
    k += snprintf(s + k, sizeof(s) - k, ",\"lo\":");
    k += json_num(s + k, sizeof(s) - k, lo);
    k += snprintf(s + k, sizeof(s) - k, ",\"hi\":");
    k += json_num(s + k, sizeof(s) - k, lo + HIST_BINS * width);
    k += snprintf(s + k, sizeof(s) - k, ",\"nonfinite\":%ld,\"counts\":[", nonfinite);
    for (int b = 0; b < HIST_BINS; b++)
        k += snprintf(s + k, sizeof(s) - k, "%s%ld", b ? "," : "", counts[b]);
    snprintf(s + k, sizeof(s) - k, "]");
    pr->emit(pr->ctx, s);
}

static void probe_hist(Probes* pr, const Model* m) {
    const Config* c = &m->cfg;
    long BT = (long)m->B * m->T, sc = BT * c->C;
    char name[64];
    for (int l = 0; l < c->L; l++) {
        emit_hist(pr, l, layer_name(name, sizeof(name), l, "mlp_act"), m->a.hact + l * BT * c->F,
                  BT * c->F);
        emit_hist(pr, l, layer_name(name, sizeof(name), l, "res"), m->a.res + (l + 1) * sc, sc);
    }
    for (int i = 0; i < m->num_tensors; i++) {
        const Tensor* t = &m->tensors[i];
        if (t->layer < 0 || t->cols < 2) continue;
        snprintf(name, sizeof(name), "%s.grad", t->name);
        emit_hist(pr, t->layer, name, m->grads + t->offset, (long)t->numel);
    }
}

// The attention logits scale * q_t . k_s of every head and every pair s <= t of a layer's forward
// pass (q and k after RoPE): their statistics. [InitFP §1.2]: with q, k entries of variance 1, q .
// k sums d_head products of variance 1, so its variance is d_head; scale = 1/sqrt(d_head) brings
// the logits back to variance 1, where the softmax neither saturates nor stays uniform.
static Stats attn_logit_stats(const float* q, const float* k, int B, int T, int H, int KVH, int hd,
                              float scale) {
    long n = (long)B * H * T * (T + 1) / 2;
    float* z = xmalloc(n * sizeof(float));
    long at = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const float* qt = q + ((long)(b * T + t) * H + h) * hd;
                for (int s = 0; s <= t; s++) {
                    const float* ks = k + ((long)(b * T + s) * KVH + h / (H / KVH)) * hd;
                    float dot = 0.0f;
                    for (int i = 0; i < hd; i++) dot += qt[i] * ks[i];
                    z[at++] = scale * dot;
                }
            }
    Stats st = stats_of(z, NULL, n);
    free(z);
    return st;
}

// attnlogit: attn_logit_stats of every layer ("value": their std; 1 is [InitFP §1.2]'s target).
static void probe_attnlogit(Probes* pr, const Model* m) {
    const Config* c = &m->cfg;
    long BT = (long)m->B * m->T, hd = c->C / c->H;
    char name[48];
    for (int l = 0; l < c->L; l++)
        emit_stats(pr, P_ATTNLOGIT, l, layer_name(name, sizeof(name), l, "attn.logits"),
                   attn_logit_stats(m->a.q + l * BT * c->H * hd, m->a.k + l * BT * c->KVH * hd,
                                    m->B, m->T, c->H, c->KVH, (int)hd, c->attn_scale));
}

// normscale: the norm factor of every norm on the input it normalized [SmallInit §2.1, Fig. 1c].
static void probe_normscale(Probes* pr, const Model* m) {
    static const char* keys[] = {"factor", "free", "eps_frac", "var"};
    const Config* c = &m->cfg;
    long BT = (long)m->B * m->T, sc = BT * c->C;
    char name[48];
    double o[4];
    for (int l = 0; l < c->L; l++) {
        norm_scale(m->a.res + l * sc, BT, c->C, c->rmsnorm, c->eps, o);
        probe_emit(pr, P_NORMSCALE, l, layer_name(name, sizeof(name), l, "ln1"), o[0], 4, keys, o);
        norm_scale(m->a.resmid + l * sc, BT, c->C, c->rmsnorm, c->eps, o);
        probe_emit(pr, P_NORMSCALE, l, layer_name(name, sizeof(name), l, "ln2"), o[0], 4, keys, o);
    }
    norm_scale(m->a.res + c->L * sc, BT, c->C, c->rmsnorm, c->eps, o);
    probe_emit(pr, P_NORMSCALE, -1, "lnf", o[0], 4, keys, o);
}

// resflow: ||h - e|| / ||e|| after every block l, and for h_L (layer -1), the quantity of
// [SmallInit §2.4].
static void probe_resflow(Probes* pr, const Model* m) {
    const Config* c = &m->cfg;
    long BT = (long)m->B * m->T, sc = BT * c->C;
    for (int l = 0; l < c->L; l++)
        probe_emit(pr, P_RESFLOW, l, "res",
                   resflow_ratio(m->a.res, m->a.res + (l + 1) * sc, BT, c->C), 0, NULL, NULL);
    probe_emit(pr, P_RESFLOW, -1, "res", resflow_ratio(m->a.res, m->a.res + c->L * sc, BT, c->C), 0,
               NULL, NULL);
}

// sink: the sink score of every head, and the layer's average over heads (head -1), which is what
// [SmallInit Fig. 1f-g] plots.
static void probe_sink(Probes* pr, const Model* m) {
    static const char* keys[] = {"head"};
    const Config* c = &m->cfg;
    double* S = xmalloc((size_t)c->H * sizeof(double));
    char name[48];
    for (int l = 0; l < c->L; l++) {
        sink_scores(m->a.att + (long)l * m->B * m->T * m->T * c->H, m->B, c->H, m->T, S);
        layer_name(name, sizeof(name), l, "attn");
        double mean = 0.0;
        for (int h = 0; h < c->H; h++) {
            double head = h;
            probe_emit(pr, P_SINK, l, name, S[h], 1, keys, &head);
            mean += S[h] / c->H;
        }
        double all = -1;
        probe_emit(pr, P_SINK, l, name, mean, 1, keys, &all);
    }
    free(S);
}

// coord: the mean |x| of the embedding output, of every attention and MLP sublayer output and of
// the logits, the coordinates of mup's coord check [InitFP §5.6]; with gated attention also the
// gate's pre-activation x W_g (recovered from g = sigmoid(x W_g) as log(g / (1 - g))).
// --coord-check runs it at several widths: under muP the curves do not move with the width; under
// the standard parameterization the logits and the sublayer outputs after the first updates grow
// with it.
static void probe_coord(Probes* pr, Model* m) {
    static const char* keys[] = {"width"};
    const Config* c = &m->cfg;
    Acts* a = &m->a;
    long BT = (long)m->B * m->T, sc = BT * c->C;
    double width = c->C;
    char name[48];
    probe_emit(pr, P_COORD, -1, "emb", stats_of(a->res, NULL, sc).abs_mean, 1, keys, &width);
    for (int l = 0; l < c->L; l++) {
        Stats at = stats_of(a->resmid + l * sc, a->res + l * sc, sc);
        Stats ml = stats_of(a->res + (l + 1) * sc, a->resmid + l * sc, sc);
        probe_emit(pr, P_COORD, l, layer_name(name, sizeof(name), l, "attn_out"), at.abs_mean, 1,
                   keys, &width);
        probe_emit(pr, P_COORD, l, layer_name(name, sizeof(name), l, "mlp_out"), ml.abs_mean, 1,
                   keys, &width);
        if (c->attn_gate) {
            const float* g = a->attn_gate + l * BT * c->H;
            double s = 0.0;
            for (long i = 0; i < BT * c->H; i++) s += fabs(log((double)g[i] / (1.0 - g[i])));
            probe_emit(pr, P_COORD, l, layer_name(name, sizeof(name), l, "gate_pre"),
                       s / (BT * c->H), 1, keys, &width);
        }
    }
    // by now the logits buffer holds their gradient, so the logits are recomputed from the final
    // norm
    float* logits = xmalloc((size_t)BT * c->V * sizeof(float));
    impl.matmul_forward(logits, a->lnf, c->tied ? m->p[K_WTE] : m->p[K_LMHEAD], NULL, (int)BT, c->C,
                        c->V);
    double v = stats_of(logits, NULL, BT * c->V).abs_mean * fabs(c->logit_scale);
    probe_emit(pr, P_COORD, -1, "logits", v, 1, keys, &width);
    free(logits);
}

// weight: mean, std and Frobenius norm of every tensor, so that Q, K and V of every layer can be
// followed [VarDyn E3], and the norm of all parameters together [ComplexCtl Fig. 4].
static void probe_weight(Probes* pr, const Model* m) {
    static const char* keys[] = {"mean", "std", "norm"};
    double total = 0.0;
    for (int i = 0; i < m->num_tensors; i++) {
        const Tensor* t = &m->tensors[i];
        Stats s = stats_of(m->params + t->offset, NULL, (long)t->numel);
        double v[] = {s.mean, s.std, s.rms * sqrt((double)t->numel)};
        total += v[2] * v[2];
        probe_emit(pr, P_WEIGHT, t->layer, t->name, s.std, 3, keys, v);
    }
    probe_emit(pr, P_WEIGHT, -1, "all", sqrt(total), 0, NULL, NULL);
}

// grad: norm and RMS of every gradient (before clipping), and the relative update ||Δθ|| / ||θ|| of
// the step ([InitFP §5.2]: under the standard parameterization it changes with the width, under muP
// it does not). Runs after the update, from the gradient RMS and the parameters that
// probes_before_update kept (AdamW zeroes the gradients as it reads them).
static void probe_grad(Probes* pr, const Model* m) {
    static const char* keys[] = {"norm", "rms", "update_ratio"};
    double g2 = 0.0, d2 = 0.0, p2 = 0.0;
    for (int i = 0; i < m->num_tensors; i++) {
        const Tensor* t = &m->tensors[i];
        double n = (double)t->numel, g_rms = pr->grad_rms[i];
        Stats d = stats_of(m->params + t->offset, pr->before + t->offset, (long)t->numel);
        Stats p = stats_of(pr->before + t->offset, NULL, (long)t->numel);
        double v[] = {g_rms * sqrt(n), g_rms, d.rms / p.rms};
        g2 += g_rms * g_rms * n;
        d2 += d.rms * d.rms * n;
        p2 += p.rms * p.rms * n;
        probe_emit(pr, P_GRAD, t->layer, t->name, v[0], 3, keys, v);
    }
    double v[] = {sqrt(g2), sqrt(g2 / m->num_params), sqrt(d2 / p2)};
    probe_emit(pr, P_GRAD, -1, "all", v[0], 3, keys, v);
}

// rank and condense: the stable rank ||W||_F^2 / ||W||_2^2 [SmallInit eq. 7] and D_c, D_s
// [ComplexCtl eq. 2] of every matrix. One matrix per thread: each is computed serially, so the
// numbers do not depend on the thread count.
static void probe_matrices(Probes* pr, const Model* m) {
    static const char* rank_keys[] = {"sigma_max", "fro", "iters"};
    static const char* cond_keys[] = {"dc", "ds"};
    int rank = pr->sel >> P_RANK & 1, cond = pr->sel >> P_CONDENSE & 1, nm = 0;
    int* mi = xmalloc((size_t)m->num_tensors * sizeof(int));
    for (int i = 0; i < m->num_tensors; i++)
        if (m->tensors[i].cols > 1) mi[nm++] = i;
    double* r = xcalloc((size_t)nm * 6, sizeof(double));
    #pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < nm; i++) {
        const Tensor* t = &m->tensors[mi[i]];
        const float* W = m->params + t->offset;
        double* o = r + 6 * i;
        if (rank) {
            int iters;
            o[0] = stable_rank(W, t->rows, t->cols, &o[1], &iters);    // [SmallInit eq. 7]
            o[2] = o[1] * sqrt(o[0]);                                   // ||W||_F
            o[3] = iters;
        }
        if (cond) {
            o[4] = condensation_degree(W, t->rows, t->cols);   // [ComplexCtl eq. 2]: D_c
            o[5] = lowrank_degree(W, t->rows, t->cols);        // [ComplexCtl eq. 2]: D_s
        }
    }
    for (int i = 0; i < nm; i++) {
        const Tensor* t = &m->tensors[mi[i]];
        double* o = r + 6 * i;
        if (rank) probe_emit(pr, P_RANK, t->layer, t->name, o[0], 3, rank_keys, o + 1);
        if (cond) probe_emit(pr, P_CONDENSE, t->layer, t->name, o[4], 2, cond_keys, o + 4);
    }
    free(r);
    free(mi);
}

// embcos: the mean cosine similarity between the embeddings of the most frequent training tokens,
// over the K(K-1)/2 pairs ([ComplexCtl Fig. 6], which shows the K x K matrix for K = 350): near 0
// when the embeddings are orthogonal, higher when small complexity makes them condense.
static void probe_embcos(Probes* pr, const Model* m) {
    static const char* keys[] = {"mean", "abs_mean", "k"};
    int K = pr->ntop;
    float* Cm = xmalloc((size_t)K * K * sizeof(float));
    row_cosines(m->p[K_WTE], pr->top_tok, K, m->cfg.C, Cm);
    double sum = 0.0, abs_sum = 0.0, pairs = K * (K - 1) / 2.0;
    for (int i = 0; i < K; i++)
        for (int j = i + 1; j < K; j++) {
            sum += Cm[i * K + j];
            abs_sum += fabs(Cm[i * K + j]);
        }
    double v[] = {sum / pairs, abs_sum / pairs, (double)K};
    probe_emit(pr, P_EMBCOS, -1, "wte", v[0], 3, keys, v);
    free(Cm);
}

// --cossim-dump: C(W) of one tensor ([SmallInit eq. 6], the heatmaps of [SmallInit Fig. 4d-e]) to
// OUT/cossim_NAME_stepSTEP.bin: int32 n, then n x n float32, row-major (dev/plot/heatmap.py).
static void cossim_dump(Probes* pr, const Model* m) {
    const Tensor* t = pr->cossim;
    int n = t->rows;
    float* Cm = xmalloc((size_t)n * n * sizeof(float));
    row_cosines(m->params + t->offset, NULL, n, t->cols, Cm);
    char path[4096];
    snprintf(path, sizeof(path), "%s/cossim_%s_step%06d.bin", pr->out_dir, t->name, pr->step);
    FILE* f = fopen(path, "wb");
    if (!f) fatal("cannot write %s (%s)", path, strerror(errno));
    int32_t n32 = n;
    int ok = fwrite(&n32, sizeof(n32), 1, f) == 1 &&
            fwrite(Cm, sizeof(float), (size_t)n * n, f) == (size_t)n * n;
    if (fclose(f) != 0 || !ok) fatal("writing %s failed (%s)", path, strerror(errno));
    free(Cm);
}

// spike: the loss and gradient norm of every step scored against their moving statistics
// ([ComplexCtl §6.1 and App. D] see loss spikes at small initialization). A z-score above --spike-z
// flags a spike; with --spike-skip 1 the caller then skips the update. Returns 1 when it should.
static int probe_spike(Probes* pr, int step, double loss, double norm) {
    static const char* keys[] = {"loss", "loss_z", "grad_norm", "grad_z", "spike", "skipped"};
    if (!(pr->sel >> P_SPIKE & 1)) return 0;
    double zl = ema_z_update(&pr->spike[0], loss), zg = ema_z_update(&pr->spike[1], norm);
    double z = fmax(zl, zg);                  // NAN only while both are in their warmup
    int spike = z > pr->spike_z, skip = spike && pr->spike_skip;
    double v[] = {loss, zl, norm, zg, (double)spike, (double)skip};
    pr->step = step;
    probe_emit(pr, P_SPIKE, -1, "", z, 6, keys, v);
    return skip;
}

// ---- the schedule -------------------------------------------------------------------------------

static unsigned parse_probe_list(const char* list) {
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", list);
    unsigned sel = 0;
    char* save = NULL;
    for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int p = 0;
        while (p < NUM_PROBES && strcmp(probe_names[p], tok) != 0) p++;
        if (strcmp(tok, "all") == 0) sel |= PROBES_ALL;
        else if (p < NUM_PROBES) sel |= 1u << p;
        else
            fatal("unknown probe '%s' in --probes (probes: all act grad weight normscale resflow "
                  "sink rank condense embcos gradact attnlogit sat spike coord hist)",
                  tok);
    }
    if (!sel) fatal("empty --probes");
    return sel;
}

// Checks the probe flags against the model and prepares what the probes need for the whole run
// (the most frequent tokens for embcos); emit writes one log line.
static void probes_init(Probes* pr, const ProbeOptions* po, Model* m, const uint16_t* train_tok,
                        size_t n_tok, const char* out_dir, Ema* spike,
                        void (*emit)(void*, const char*), void* ctx) {
    memset(pr, 0, sizeof(*pr));
    pr->spike = spike;
    pr->every = po->every;
    pr->emit = emit;
    pr->ctx = ctx;
    pr->out_dir = out_dir;
    pr->spike_z = po->spike_z;
    pr->spike_skip = po->spike_skip;
    if (!po->every) {
        if (po->list || po->cossim || po->spike_skip)
            fatal("--probes, --cossim-dump and --spike-skip need -p N");
        return;
    }
    if (!out_dir) fatal("-p needs -o DIR: the probes write to DIR/log.jsonl");
    pr->sel = po->list ? parse_probe_list(po->list) : PROBES_ALL;
    if (po->spike_skip && !(pr->sel >> P_SPIKE & 1))
        fatal("--spike-skip needs the spike probe (see --probes)");
    if (po->cossim) {
        pr->cossim = model_find(m, po->cossim);
        if (!pr->cossim)
            fatal("--cossim-dump: no tensor named '%s' (names as in doc/model.md, e.g. "
                  "h.0.attn.wq)",
                  po->cossim);
        if (pr->cossim->cols < 2)
            fatal("--cossim-dump: %s is a vector; it has no rows to compare", po->cossim);
        if (pr->cossim->rows > COSSIM_MAX_ROWS)
            fatal("--cossim-dump: %s has %d rows; the matrix would be %d x %d (at most %d rows)",
                  po->cossim, pr->cossim->rows, pr->cossim->rows, pr->cossim->rows,
                  COSSIM_MAX_ROWS);
    }
    if (pr->sel >> P_EMBCOS & 1) {
        pr->top_tok = xmalloc(EMBCOS_K * sizeof(int));
        pr->ntop = top_tokens(train_tok, n_tok, m->cfg.V, EMBCOS_K, pr->top_tok);
        if (pr->ntop < 2) fatal("embcos needs two distinct tokens in the training data");
    }
    char names[256] = "";
    for (int p = 0; p < NUM_PROBES; p++)
        if (pr->sel >> p & 1)
            snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
                     names[0] ? "," : "", probe_names[p]);
    printf("probes: %s every %d steps -> %s/log.jsonl\n", names, po->every, out_dir);
}

static int probes_due(const Probes* pr, int step) { return pr->every > 0 && step % pr->every == 0; }

// The probes of the state after `step` updates: the activations of this step's forward pass and the
// weights before its update. The parameters are copied for ||Δθ|| / ||θ|| (probes_after_update).
static void probes_before_update(Probes* pr, Model* m, int step) {
    pr->step = step;
    if (pr->sel >> P_ACT & 1) probe_act(pr, m);
    if (pr->sel >> P_NORMSCALE & 1) probe_normscale(pr, m);
    if (pr->sel >> P_RESFLOW & 1) probe_resflow(pr, m);
    if (pr->sel >> P_SINK & 1) probe_sink(pr, m);
    if (pr->sel >> P_COORD & 1) probe_coord(pr, m);
    if (pr->sel >> P_WEIGHT & 1) probe_weight(pr, m);
    if (pr->sel & (1u << P_RANK | 1u << P_CONDENSE)) probe_matrices(pr, m);
    if (pr->sel >> P_EMBCOS & 1) probe_embcos(pr, m);
    if (pr->sel >> P_GRADACT & 1) probe_gradact(pr, m);
    if (pr->sel >> P_ATTNLOGIT & 1) probe_attnlogit(pr, m);
    if (pr->sel >> P_SAT & 1) probe_sat(pr, m);
    if (pr->sel >> P_HIST & 1) probe_hist(pr, m);
    if (pr->cossim) cossim_dump(pr, m);
    if (pr->sel >> P_GRAD & 1) {
        if (!pr->before) pr->before = xmalloc(m->num_params * sizeof(float));
        if (!pr->grad_rms) pr->grad_rms = xmalloc((size_t)m->num_tensors * sizeof(double));
        memcpy(pr->before, m->params, m->num_params * sizeof(float));
        for (int i = 0; i < m->num_tensors; i++)
            pr->grad_rms[i] =
                    stats_of(m->grads + m->tensors[i].offset, NULL, (long)m->tensors[i].numel).rms;
    }
}

static void probes_after_update(Probes* pr, const Model* m) {
    if (pr->sel >> P_GRAD & 1) probe_grad(pr, m);
}

static void probes_free(Probes* pr) {
    free(pr->before);
    free(pr->grad_rms);
    free(pr->top_tok);
    memset(pr, 0, sizeof(*pr));
}
// For the training loop: probes_init on a new allocation, and its release.
static Probes* probes_new(const ProbeOptions* po, Model* m, const uint16_t* train_tok, size_t n_tok,
                          const char* out_dir, Ema* spike, void (*emit)(void*, const char*),
                          void* ctx) {
    Probes* pr = xmalloc(sizeof(*pr));
    probes_init(pr, po, m, train_tok, n_tok, out_dir, spike, emit, ctx);
    return pr;
}

static void probes_delete(Probes* pr) {
    probes_free(pr);
    free(pr);
}

// ---- the probes' hooks: the parts that need the data, the log and the options (section 9 measure

// The probes write their lines through this, into the run's log beside every other event.
static void probe_log_line(void* lg, const char* fields) { log_event((Log*)lg, "%s", fields); }

// --dump-token-losses: the validation batches evaluate() reads, one CSV row per position: the
// target's position in the validation data, its id, its loss -log p and p (the softmax
// probability). The mean of the loss column is evaluate()'s validation loss. Two runs' dumps
// compare token by token
// ([SmallInit §2.5 and §4.7]; dev/plot/compare_tokens.py).
static void dump_token_losses(Model* m, const Dataset* val, int batches, int B, int T, int* inp,
                              int* tgt, const char* path) {
    int avail = dataset_num_batches(val, B, T);
    if (batches > avail) batches = avail;
    FILE* f = fopen(path, "w");
    if (!f) fatal("cannot write token dump %s (%s)", path, strerror(errno));
    fprintf(f, "pos,target,loss,p\n");
    for (int i = 0; i < batches; i++) {
        dataset_batch_at(val, i, inp, tgt, B, T);
        model_forward(m, inp, tgt, B, T);
        for (int bt = 0; bt < B * T; bt++)
            fprintf(f, "%zu,%d,%.9g,%.9g\n", ((size_t)i * B + bt / T) * T + bt % T + 1, tgt[bt],
                    m->a.losses[bt], m->a.logits[(size_t)bt * m->cfg.V + tgt[bt]]);
    }
    if (fclose(f) != 0) fatal("writing token dump %s failed (%s)", path, strerror(errno));
    printf("token losses of %d validation batches written to %s\n", batches, path);
}

// ============================================================================================
// 10. The command line, text out (tokens, the run header, the log), --init-report
// ============================================================================================


// The catalogue: name, numeric arguments accepted, whether it needs fans (a matrix), the -h line.
static const struct {
    const char* name;
    int min_args, max_args, fans;
    const char* help;
} schemes[] = {
        {"zeros", 0, 0, 0, "all 0 (nn.init.zeros_)"},
        {"ones", 0, 0, 0, "all 1 (nn.init.ones_)"},
        {"constant", 1, 1, 0, "constant:C, all C (nn.init.constant_)"},
        {"normal", 0, 2, 0,
         "normal[:STD] or normal:MEAN:STD, N(MEAN, STD^2) (default N(0,1); normal_)"},
        {"uniform", 0, 2, 0, "uniform[:A] U(-A,A), uniform:A:B U(A,B) (default U(0,1); uniform_)"},
        {"trunc_normal", 0, 3, 0,
         "trunc_normal[:STD[:A:B]], N(0,STD^2) cut at the ABSOLUTE A,B (default +-2; "
         "trunc_normal_)"},
        {"trunc_sigma", 1, 2, 0, "trunc_sigma:STD[:K], N(0,STD^2) cut at +-K STD (default K=2)"},
        {"eye", 0, 0, 1, "identity matrix (nn.init.eye_)"},
        {"sparse", 1, 2, 1,
         "sparse:S[:STD], N(0,STD^2) with a fraction S of each column 0 (default STD 0.01; "
         "sparse_)"},
        {"lecun_normal", 0, 0, 1, "N(0, 1/fan_in) (LeCun 1998; = kaiming_normal:linear)"},
        {"lecun_uniform", 0, 0, 1, "U(-a,a), a = sqrt(3/fan_in)"},
        {"xavier_normal", 0, 1, 1,
         "xavier_normal[:GAIN], N(0, GAIN^2 2/(fan_in+fan_out)) (xavier_normal_)"},
        {"xavier_uniform", 0, 1, 1,
         "xavier_uniform[:GAIN], bound GAIN sqrt(6/(fan_in+fan_out)) (xavier_uniform_)"},
        {"kaiming_normal", 0, 1, 1,
         "kaiming_normal[:NONLIN[:PARAM]][:fan_out], N(0, gain^2/fan) (kaiming_normal_)"},
        {"kaiming_uniform", 0, 1, 1,
         "kaiming_uniform[:NONLIN[:PARAM]][:fan_out], bound gain sqrt(3/fan)"},
        {"torch_linear", 0, 0, 1,
         "nn.Linear's default: kaiming_uniform a=sqrt(5), bound 1/sqrt(fan_in)"},
        {"orthogonal", 0, 1, 1,
         "orthogonal[:GAIN], GAIN x a random orthogonal matrix (orthogonal_)"},
        {"sigma", 0, 1, 0, "sigma[:S], sigma-init N(0, S^2), S = 0.02 by default [VarDyn]"},
        {"gamma", 1, 1, 1, "gamma:G, N(0, fan_in^-2G) [SmallInit §4.2], [ComplexCtl §3]"},
        {"small_init", 0, 0, 1, "N(0, 2/(5d)), d the model width (Nguyen & Salazar 2019)"},
        {"trunc_lecun", 0, 1, 1,
         "trunc_lecun[:K], N(0, 1/fan_in) cut at +-K sigma (default 3; OLMo mitchell)"},
};
#define NUM_SCHEMES ((int)(sizeof(schemes) / sizeof(schemes[0])))

static int scheme_index(const char* name) {
    for (int i = 0; i < NUM_SCHEMES; i++)
        if (strcmp(schemes[i].name, name) == 0) return i;
    return -1;
}


static int scheme_needs_fans(const char* name) { return schemes[scheme_index(name)].fans; }

#define OUT_DIR_MAX 3800     // -o's length: file names inside it go into 4096-byte buffers

static void options_default(Options* o) {
    memset(o, 0, sizeof(*o));
    o->train_path = "data/moby_train.txt";
    o->val_path = "data/moby_val.txt";
    o->preset = "gpt2";
    o->init = "gpt2";
    o->bias = o->tie = o->gate = -1;
    o->L = 4; o->C = 128; o->H = 4;
    o->B = 12; o->T = 64; o->micro = 1; o->steps = 2000; o->seed = 1337;
    o->ranks = 1;
    o->val_every = 250;
    o->val_batches = 20;
    o->sample_every = 0;
    o->sample_len = 200;
    o->ckpt_every = 500;
    o->gamma = -1.0;
    o->resid_scale = -1;
    o->eps = 1e-5f;
    o->rope_theta = 10000.0f;
    o->opt = (OptConfig){.lr = 2e-3f, .lr_floor = 0.1f, .warmup = 100, .steps = 0, .beta1 = 0.9f,
                         .beta2 = 0.95f, .adam_eps = 1e-8f, .weight_decay = 0.1f, .clip = 1.0f};
    o->probe = (ProbeOptions){.spike_z = 6.0f, .coord_steps = 4, .coord_widths = "64,128,256,512"};
}

static void usage(void) {
    Options d;
    options_default(&d);
    printf("usage: ./train_gpt2 [flags]   (every flag takes a value)\n"
           "data and output\n"
           "  -i FILE   training data: byte text, or an llm.c uint16 token shard (default %s)\n"
           "  -j FILE   validation data (default %s)\n"
           "  -o DIR    output dir, made with its parents: DIR/log.jsonl, checkpoints "
           "DIR/ckpt_STEP.bin\n"
           "  -y FILE   resume from this checkpoint (the model flags must match it)\n"
           "  --overwrite 0|1  1: a run that does not resume DIR's own checkpoint replaces the "
           "run DIR\n"
           "            holds (its log, checkpoints, cossim dumps); 0 (default): it is refused\n"
           "  --decode FILE  decode table for token shards (default: beside -i, "
           "PREFIX_decode.bin)\n"
           "  --load-llmc FILE  start from the weights of an llm.c model file (gpt2 preset; AdamW "
           "from 0)\n"
           "  --save-llmc FILE  after the run, write the weights as an llm.c model file (-x 0: the "
           "init)\n"
           "model\n"
           "  -a NAME   preset: gpt2 (LayerNorm, GELU, learned positions, biases, tied head)\n"
           "            or llama (RMSNorm, SwiGLU, RoPE, no biases, untied head) (default %s)\n"
           "  -L N      blocks (default %d)    -C N  width d (default %d)    -H N  heads (default "
           "%d)\n"
           "  -K N      key/value heads, divides -H (default: = heads)\n"
           "  -F N      MLP hidden width (default 4 x width)\n"
           "  -T N      longest sequence the model takes (default: = -t)\n"
           "  -V N      vocabulary of token shards (default 50257; byte text is always 256)\n"
           "  -G 0|1    gated attention, [SmallInit eqs. 3-4] (default 0)\n"
           "  -e EPS    norm eps inside the square root, [SmallInit eqs. 1-2] (default %g)\n"
           "  --norm layernorm|rmsnorm  --mlp gelu|swiglu  --pos learned|rope  --bias 0|1  --tie "
           "0|1\n"
           "            override one switch of the preset\n"
           "  --rope-theta X  RoPE base (default %g)\n"
           "initialization (doc/initializers.md; the recipes and schemes are listed below)\n"
           "  -I SPEC   RECIPE_OR_SCHEME[,GROUP=SCHEME...] (default %s): the scheme applies to "
           "every\n"
           "            weight group, GROUP=SCHEME overrides one group; norms start at 1, biases "
           "at 0\n"
           "            unless overridden. Groups: emb pos qkv gate out up down head norm bias\n"
           "  -g G      gamma-init, = -I gamma:G [SmallInit §4.2]: N(0, fan_in^-2G), wte/wpe (n, "
           "d): d^-2G\n"
           "  --resid-scale 0|1  multiply attn.wo and mlp.wdown by 1/sqrt(2L), with any scheme\n"
           "            (default: as the recipe says; 0 also turns off a recipe's depth factors)\n"
           "  --mup-base N  muP's base width, width_mult = C/N (default %d; needs -I mup)\n"
           "  --init-report 1  print every tensor's scheme, expected and measured statistics and "
           "the\n"
           "            blocks' variance ratios on one batch, then exit without training\n"
           "  -r SEED   seed of initialization, data order and sampling (default %d)\n"
           "training\n"
           "  -b N      batch size (default %d)    -t N  sequence length (default %d)\n"
           "  -d N      tokens per update (default B x T): N / (B x T) micro-batches of B x T, "
           "whose\n"
           "            gradients are averaged before each AdamW step (gradient accumulation, as "
           "llm.c's -d)\n"
           "  --data-order random|sequential|llmc[:P]  random windows (default); sequential: "
           "the\n"
           "            training file in consecutive batches of B x T tokens from its start, "
           "again from\n"
           "            the start when they run out (llm.c with its shuffling off); llmc: those "
           "batches\n"
           "            shuffled as llm.c's DataLoader shuffles them (seed 42 + rank, anew each "
           "epoch), as\n"
           "            llm.c run on as many processes as this run's ranks, or on P\n"
           "  -x N      steps (default %d)\n"
           "  -l LR     peak learning rate (default %g)   -u N  warmup steps (default %d)\n"
           "  -q F      cosine floor as a fraction of the peak (default %g)\n"
           "  -c L      decoupled weight decay lambda, [ComplexCtl eq. 1] (default %g); applies "
           "to\n"
           "            weight matrices only: not to norms, biases, or wte/wpe unless --decay-emb "
           "1\n"
           "  --decay-emb 0|1  decay the embeddings too (default 0)\n"
           "  -z X      clip the global gradient norm at X, 0 = off (default %g)\n"
           "  --beta1 X --beta2 X --adam-eps X  AdamW constants (default %g %g %g)\n"
           "evaluation\n"
           "  -v N      validation loss every N steps (default %d)   -m N  batches of it (default "
           "%d)\n"
           "  -s N      sample every N steps, 0 = only at the end (default %d)\n"
           "  -S N      sample length in tokens (default %d)\n"
           "  -n N      checkpoint every N steps when -o is given (default %d; always at the end,\n"
           "            and with -x 0 at step 0)\n"
           "  -h        this help\n"
           "threads: OMP_NUM_THREADS (at most 4 per core, or 64). Same seed, flags and thread\n"
           "count give the same losses. Each flag is given once.\n",
           d.train_path, d.val_path, d.preset, d.L, d.C, d.H, (double)d.eps, (double)d.rope_theta,
           d.init, MUP_BASE_DEFAULT, d.seed, d.B, d.T, d.steps, (double)d.opt.lr, d.opt.warmup,
           (double)d.opt.lr_floor, (double)d.opt.weight_decay, (double)d.opt.clip,
           (double)d.opt.beta1, (double)d.opt.beta2, (double)d.opt.adam_eps, d.val_every,
           d.val_batches, d.sample_every, d.sample_len, d.ckpt_every);
    printf("-I recipes\n");
    for (int i = 0; i < NUM_RECIPES; i++) printf("  %-15s %s\n", recipes[i].name, recipes[i].help);
    printf("-I schemes (fan_in = columns, fan_out = rows of a (out, in) weight; PyTorch's nn.init, "
           "bit for bit)\n");
    for (int i = 0; i < NUM_SCHEMES; i++) printf("  %-15s %s\n", schemes[i].name, schemes[i].help);
    printf("  kaiming NONLIN: linear sigmoid tanh relu (default) leaky_relu selu gelu silu; PARAM: "
           "leaky_relu's slope\n");
    printf("probes (doc/probes.md; they do not change training, except --spike-skip 1)\n"
           "  -p N      run the probes at step 0 and every N steps, into DIR/log.jsonl (default 0 "
           "= off)\n"
           "  --probes LIST  comma-separated subset (default all): act grad weight normscale "
           "resflow\n"
           "            sink rank condense embcos gradact attnlogit sat spike (spike: every "
           "step);\n"
           "            not in all: hist (histograms per layer), coord (see --coord-check)\n"
           "  --cossim-dump NAME  at every probe step write the row cosine matrix C(W) of tensor "
           "NAME\n"
           "            (e.g. h.0.attn.wq) to DIR/cossim_NAME_stepSTEP.bin\n"
           "  --dump-token-losses FILE  after training, write target, loss and p(target) of every\n"
           "            position of the -m validation batches to FILE (CSV)\n"
           "  --spike-z Z      the spike probe flags a loss or grad-norm z-score above Z (default "
           "%g)\n"
           "  --spike-skip 0|1 skip the update of a flagged step (default 0)\n"
           "  --coord-check 0|1  muP coordinate check: train --coord-steps steps at each width of\n"
           "            --coord-widths (other flags as given), log mean |x| per sublayer, print a "
           "table\n"
           "  --coord-widths LIST (default %s)   --coord-steps N (default %d)\n",
           (double)d.probe.spike_z, d.probe.coord_widths, d.probe.coord_steps);
}

// ---- initializer text: schemes (section 3) and -I ----------------------------------------------
// The numbers a scheme takes, in the ranges where torch's call is defined: a std, bound or gain
// that torch would refuse (normal_ with std < 0, uniform_ with a > b), and sparse's fraction, which
// sizes a count of zeros per column, are refused here rather than drawn from.
static void scheme_check_ranges(const Scheme* s) {
    const char* n = s->name;
    const double* a = s->arg;
    int k = s->nargs;
    const char* bad = NULL;
    if (!strcmp(n, "normal") && k && a[k - 1] < 0) bad = "the std must be >= 0";
    if (!strcmp(n, "uniform") && k == 1 && a[0] < 0) bad = "the bound A of U(-A, A) must be >= 0";
    if (!strcmp(n, "uniform") && k == 2 && a[0] > a[1]) bad = "U(A, B) needs A <= B";
    if ((!strcmp(n, "trunc_normal") || !strcmp(n, "trunc_sigma") || !strcmp(n, "sigma")) && k &&
        a[0] < 0)
        bad = "the std must be >= 0";
    if (!strcmp(n, "trunc_normal") && k == 3 && !(a[1] < a[2])) bad = "the bounds need A < B";
    if ((!strcmp(n, "trunc_sigma") && k == 2 && !(a[1] > 0)) ||
        (!strcmp(n, "trunc_lecun") && k && !(a[0] > 0)))
        bad = "the cut K must be > 0";
    if (!strcmp(n, "sparse") && !(a[0] >= 0 && a[0] <= 1))
        bad = "the fraction of zeros must be in [0, 1]";
    if (!strcmp(n, "sparse") && k == 2 && a[1] < 0) bad = "the std must be >= 0";
    if (!strncmp(n, "xavier_", 7) && k && a[0] < 0) bad = "the gain must be >= 0";
    if (!strcmp(n, "gamma") && !(a[0] >= 0 && a[0] <= 10))
        bad = "the rate G must be in [0, 10], as for -g";
    if (bad) fatal("initializer '%s': %s", s->text, bad);
}

// "kaiming_uniform:leaky_relu:0.2:fan_out" -> name, nonlin, args. fatal() on anything else.
static void parse_scheme(Scheme* s, const char* text) {
    memset(s, 0, sizeof(*s));
    char buf[sizeof(s->text)];
    if (strlen(text) >= sizeof(buf)) fatal("initializer '%.40s...' is too long", text);
    size_t len = strlen(text);
    if (!len || text[0] == ':' || text[len - 1] == ':' || strstr(text, "::"))
        fatal("initializer '%s' has an empty argument (NAME[:ARG...], see -h)", text);
    snprintf(s->text, sizeof(s->text), "%s", text);
    snprintf(buf, sizeof(buf), "%s", text);
    char* save = NULL;
    char* tok = strtok_r(buf, ":", &save);
    if (!tok || strlen(tok) >= sizeof(s->name)) fatal("bad initializer '%s'", text);
    snprintf(s->name, sizeof(s->name), "%s", tok);
    int idx = scheme_index(s->name);
    if (idx < 0) fatal("unknown initializer '%s' (see -h)", s->name);
    int kaiming = strncmp(s->name, "kaiming_", 8) == 0;
    snprintf(s->nonlin, sizeof(s->nonlin), "relu");
    int words = 0;
    while ((tok = strtok_r(NULL, ":", &save))) {
        char* end;
        double v = strtod(tok, &end);
        if (end != tok && !*end && isfinite(v)) {
            if (s->nargs == 3) fatal("too many arguments in initializer '%s'", text);
            s->arg[s->nargs++] = v;
        } else if (kaiming && (strcmp(tok, "fan_in") == 0 || strcmp(tok, "fan_out") == 0)) {
            s->fan_out = strcmp(tok, "fan_out") == 0;
        } else if (kaiming && !words++ && strlen(tok) < sizeof(s->nonlin)) {
            snprintf(s->nonlin, sizeof(s->nonlin), "%s", tok);
            calculate_gain(s->nonlin, NAN);             // refuses an unknown name now
        } else {
            fatal("bad argument '%s' in initializer '%s' (see -h)", tok, text);
        }
    }
    if (s->nargs < schemes[idx].min_args || s->nargs > schemes[idx].max_args)
        fatal("initializer '%s' takes %d to %d numbers, got %d", s->name, schemes[idx].min_args,
              schemes[idx].max_args, s->nargs);
    scheme_check_ranges(s);
}

// -I SCHEME_OR_RECIPE[,GROUP=SCHEME...] into spec (on top of what it holds). A recipe's own text is
// read with recipes off: "small_init" is both a recipe and the scheme it applies.
static void parse_init_text(InitSpec* spec, const char* text, int recipes_on) {
    char buf[512];
    if (strlen(text) >= sizeof(buf)) fatal("-I is too long");
    snprintf(buf, sizeof(buf), "%s", text);
    size_t len = strlen(text);
    if (len && (text[0] == ',' || text[len - 1] == ',' || strstr(text, ",,")))
        fatal("-I '%s' has an empty entry between its commas", text);
    char* save = NULL;
    int first = 1, given[NUM_GROUPS] = {0};
    for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), first = 0) {
        char* eq = strchr(tok, '=');
        if (first && !eq) {
            for (int r = 0; r < NUM_RECIPES && recipes_on; r++)
                if (strcmp(tok, recipes[r].name) == 0) {
                    parse_init_text(spec, recipes[r].spec, 0);
                    spec->resid = recipes[r].resid;
                    spec->mup = recipes[r].mup;
                    snprintf(spec->first, sizeof(spec->first), "%s", tok);
                    tok = NULL;
                    break;
                }
            if (!tok) continue;
            Scheme s;
            parse_scheme(&s, tok);
            for (int g = 0; g < NUM_GROUPS; g++)
                if (g != G_NORM && g != G_BIAS) spec->rule[g] = s;
            snprintf(spec->first, sizeof(spec->first), "%.31s", tok);
            continue;
        }
        if (!eq) fatal("initializer override '%s' needs the form group=scheme", tok);
        *eq = 0;
        int g = 0;
        while (g < NUM_GROUPS && strcmp(group_names[g], tok) != 0) g++;
        if (g == NUM_GROUPS)
            fatal("unknown parameter group '%s' in -I (groups: emb pos qkv gate out up down head "
                  "norm bias)",
                  tok);
        if (given[g]++) fatal("-I '%s' gives the group '%s' twice", text, tok);
        parse_scheme(&spec->rule[g], eq + 1);
        if ((g == G_NORM || g == G_BIAS) && scheme_needs_fans(spec->rule[g].name))
            fatal("initializer '%s' needs a matrix (fans), not a vector", spec->rule[g].name);
    }
    if (first) fatal("empty -I");
}

// -I text and -g gamma (>= 0: gamma-init for every matrix and embedding, [SmallInit §4.2]; replaces
// -I).
static void parse_init(InitSpec* spec, const char* text, double gamma) {
    memset(spec, 0, sizeof(*spec));
    spec->mup_base = MUP_BASE_DEFAULT;
    if (gamma >= 0.0) {
        char g[64];
        snprintf(g, sizeof(g), "gamma:%.17g", gamma);
        parse_init_text(spec, g, 1);
    } else {
        parse_init_text(spec, text, 1);
    }
}

static long parse_int(const char* flag, const char* v, long lo, long hi) {
    char* end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno) fatal("%s expects an integer, got '%s'", flag, v);
    if (x < lo || x > hi) fatal("%s must be in [%ld, %ld], got %ld", flag, lo, hi, x);
    return x;
}

static double parse_float(const char* flag, const char* v, double lo, double hi) {
    char* end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || isnan(x)) fatal("%s expects a number, got '%s'", flag, v);
    if (x < lo || x > hi) fatal("%s must be in [%g, %g], got %g", flag, lo, hi, x);
    return x;
}

static const char* parse_choice(const char* flag, const char* v, const char* a, const char* b) {
    if (strcmp(v, a) != 0 && strcmp(v, b) != 0)
        fatal("%s must be %s or %s, got '%s'", flag, a, b, v);
    return v;
}

// OMP_NUM_THREADS, checked before libgomp reads it. libgomp parses it as it loads, before main,
// and prints its own line on a value it cannot read; OpenMP crashes on an absurd count and takes
// minutes to start a very large one. The check runs from the executable's .preinit_array, which
// the dynamic loader runs before any shared library's initializers (System V gABI, "Dynamic
// Section": DT_PREINIT_ARRAY), so the trainer's one line is all that is printed; env is the
// environment the loader passes. More than 4 threads a core only slows a run; up to 64 are allowed
// anywhere.
static void threads_check(int argc, char** argv, char** env) {
    (void)argc, (void)argv;
    const char* value = NULL;
    for (char** e = env; e && *e && !value; e++)
        if (strncmp(*e, "OMP_NUM_THREADS=", 16) == 0) value = *e + 16;
    if (!value) return;
    long cores = sysconf(_SC_NPROCESSORS_ONLN), most = 4 * cores > 64 ? 4 * cores : 64;
    char* end;
    for (const char* p = value;; p = end + 1) {     // OpenMP takes a list, "4,2", one per level
        errno = 0;
        long n = strtol(p, &end, 10);
        if (end == p || errno || n < 1 || (*end && *end != ','))
            fatal("OMP_NUM_THREADS=%s is not a thread count (a positive integer, or a list of "
                  "them)", value);
        if (n > most)
            fatal("OMP_NUM_THREADS=%s asks for %ld threads; at most %ld on this machine's %ld "
                  "cores (4 per core, or 64): unset it to use one per core", value, n, most, cores);
        if (!*end) break;
    }
}
__attribute__((section(".preinit_array"), used)) static void (*const threads_check_at_load)(
        int, char**, char**) = threads_check;

// The command line is read as flag, value pairs from argv[1]: the flag at argv[at] must not be one
// given before it. train_gpt2.cu calls it on the whole command line, its own flags included.
static void flag_once(char** argv, int at) {
    for (int j = 1; j < at; j += 2)
        if (strcmp(argv[j], argv[at]) == 0)
            fatal("flag %s is given twice (%s, then %s): give each flag once", argv[at],
                  argv[j + 1], argv[at + 1]);
}

// The variables by which launchers tell a process its rank, the world size and the local rank
// (mpirun: Open MPI's, then MPICH's and Intel MPI's; torchrun's; srun's), in the order
// train_gpt2.cu reads them.
static const char* const launcher_env[4][3] = {
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
        {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
        {"RANK", "WORLD_SIZE", "LOCAL_RANK"},
        {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}};

// The CPU trainer is one process: started by a launcher as one of several ranks, each copy would
// train the whole job alone, and all of them into the same files.
static void single_process_check(void) {
    for (int i = 0; i < 4; i++) {
        const char *rank = getenv(launcher_env[i][0]), *size = getenv(launcher_env[i][1]);
        if ((rank && strcmp(rank, "0") != 0) || (size && strcmp(size, "1") != 0))
            fatal("%s=%s %s=%s: a launcher started this as one of several ranks, but the CPU "
                  "trainer is one process; train on several GPUs with train_gpt2cu",
                  launcher_env[i][0], rank ? rank : "(unset)", launcher_env[i][1],
                  size ? size : "(unset)");
    }
}

static void parse_args(Options* o, int argc, char** argv) {
    options_default(o);
    const char* init_given = NULL;
    long tokens_per_update = 0;        // -d; 0: one batch
    for (int i = 1; i < argc; i++) {
        const char* f = argv[i];
        if (strcmp(f, "-h") == 0 || strcmp(f, "--help") == 0) { usage(); exit(0); }
        if (f[0] != '-' || !f[1]) fatal("unexpected argument '%s' (see -h)", f);
        if (i + 1 >= argc) fatal("flag %s needs a value", f);
        const char* v = argv[++i];
        if (v[0] == '-' && (isalpha((unsigned char)v[1]) || v[1] == '-'))
            fatal("flag %s needs a value, and the next word is the flag %s (see -h)", f, v);
        flag_once(argv, i - 1);
        const long BIG = 1L << 30;
        if (strcmp(f, "-i") == 0) o->train_path = v;
        else if (strcmp(f, "-j") == 0) o->val_path = v;
        else if (strcmp(f, "-o") == 0) o->out_dir = v;
        else if (strcmp(f, "-y") == 0) o->resume = v;
        else if (strcmp(f, "--decode") == 0) o->decode_path = v;
        else if (strcmp(f, "--load-llmc") == 0) o->llmc_load = v;
        else if (strcmp(f, "--save-llmc") == 0) o->llmc_save = v;
        else if (strcmp(f, "--overwrite") == 0) o->overwrite = parse_int(f, v, 0, 1);
        else if (strcmp(f, "-a") == 0) o->preset = parse_choice(f, v, "gpt2", "llama");
        else if (strcmp(f, "-L") == 0) o->L = parse_int(f, v, 1, 1024);
        else if (strcmp(f, "-C") == 0) o->C = parse_int(f, v, 1, 65536);
        else if (strcmp(f, "-H") == 0) o->H = parse_int(f, v, 1, 4096);
        else if (strcmp(f, "-K") == 0) o->KVH = parse_int(f, v, 1, 4096);
        else if (strcmp(f, "-F") == 0) o->F = parse_int(f, v, 1, 1 << 20);
        else if (strcmp(f, "-T") == 0) o->maxT = parse_int(f, v, 1, 1 << 16);
        else if (strcmp(f, "-V") == 0) o->V = parse_int(f, v, 1, 65536);
        else if (strcmp(f, "-G") == 0) o->gate = parse_int(f, v, 0, 1);
        else if (strcmp(f, "-e") == 0) o->eps = parse_float(f, v, 0.0, 1.0);
        else if (strcmp(f, "--norm") == 0) o->norm = parse_choice(f, v, "layernorm", "rmsnorm");
        else if (strcmp(f, "--mlp") == 0) o->mlp = parse_choice(f, v, "gelu", "swiglu");
        else if (strcmp(f, "--pos") == 0) o->pos = parse_choice(f, v, "learned", "rope");
        else if (strcmp(f, "--bias") == 0) o->bias = parse_int(f, v, 0, 1);
        else if (strcmp(f, "--tie") == 0) o->tie = parse_int(f, v, 0, 1);
        else if (strcmp(f, "--rope-theta") == 0) o->rope_theta = parse_float(f, v, 1.0, 1e12);
        else if (strcmp(f, "-I") == 0) o->init = init_given = v;
        else if (strcmp(f, "-g") == 0) o->gamma = parse_float(f, v, 0.0, 10.0);
        else if (strcmp(f, "--resid-scale") == 0) o->resid_scale = parse_int(f, v, 0, 1);
        else if (strcmp(f, "--mup-base") == 0) o->mup_base = parse_int(f, v, 1, 65536);
        else if (strcmp(f, "--init-report") == 0) o->init_report = parse_int(f, v, 0, 1);
        else if (strcmp(f, "-r") == 0) o->seed = parse_int(f, v, 0, INT_MAX);
        else if (strcmp(f, "-b") == 0) o->B = parse_int(f, v, 1, 1 << 20);
        else if (strcmp(f, "-t") == 0) o->T = parse_int(f, v, 1, 1 << 16);
        else if (strcmp(f, "-d") == 0) tokens_per_update = parse_int(f, v, 1, BIG);
        else if (strcmp(f, "--data-order") == 0) {
            o->llmc_procs = !strncmp(v, "llmc:", 5) ? (int)parse_int("--data-order llmc:P", v + 5, 1, 65536) : 0;
            for (o->data_order = ORDER_LLMC; o->data_order >= 0; o->data_order--)
                if (!strcmp(o->llmc_procs ? "llmc" : v, data_order_names[o->data_order])) break;
            if (o->data_order < 0)
                fatal("--data-order must be random, sequential, llmc or llmc:P, got '%s'", v);
        }
        else if (strcmp(f, "-x") == 0) o->steps = parse_int(f, v, 0, BIG);
        else if (strcmp(f, "-l") == 0) o->opt.lr = parse_float(f, v, 0.0, 10.0);
        else if (strcmp(f, "-u") == 0) o->opt.warmup = parse_int(f, v, 0, BIG);
        else if (strcmp(f, "-q") == 0) o->opt.lr_floor = parse_float(f, v, 0.0, 1.0);
        else if (strcmp(f, "-c") == 0) o->opt.weight_decay = parse_float(f, v, 0.0, 1e6);
        else if (strcmp(f, "--decay-emb") == 0) o->decay_emb = parse_int(f, v, 0, 1);
        else if (strcmp(f, "-z") == 0) o->opt.clip = parse_float(f, v, 0.0, 1e12);
        else if (strcmp(f, "--beta1") == 0) o->opt.beta1 = parse_float(f, v, 0.0, 0.999999);
        else if (strcmp(f, "--beta2") == 0) o->opt.beta2 = parse_float(f, v, 0.0, 0.999999);
        else if (strcmp(f, "--adam-eps") == 0) o->opt.adam_eps = parse_float(f, v, 0.0, 1.0);
        else if (strcmp(f, "-v") == 0) o->val_every = parse_int(f, v, 0, BIG);
        else if (strcmp(f, "-m") == 0) o->val_batches = parse_int(f, v, 0, BIG);
        else if (strcmp(f, "-s") == 0) o->sample_every = parse_int(f, v, 0, BIG);
        else if (strcmp(f, "-S") == 0) o->sample_len = parse_int(f, v, 0, 1 << 20);
        else if (strcmp(f, "-n") == 0) o->ckpt_every = parse_int(f, v, 0, BIG);
        else if (strcmp(f, "-p") == 0) o->probe.every = parse_int(f, v, 0, BIG);
        else if (strcmp(f, "--probes") == 0) o->probe.list = v;
        else if (strcmp(f, "--cossim-dump") == 0) o->probe.cossim = v;
        else if (strcmp(f, "--dump-token-losses") == 0) o->probe.dump_tokens = v;
        else if (strcmp(f, "--spike-z") == 0) o->probe.spike_z = parse_float(f, v, 0.0, 1e6);
        else if (strcmp(f, "--spike-skip") == 0) o->probe.spike_skip = parse_int(f, v, 0, 1);
        else if (strcmp(f, "--coord-check") == 0) o->probe.coord_check = parse_int(f, v, 0, 1);
        else if (strcmp(f, "--coord-widths") == 0) o->probe.coord_widths = v;
        else if (strcmp(f, "--coord-steps") == 0)
            o->probe.coord_steps = parse_int(f, v, 1, 1 << 20);
        else fatal("unknown flag %s (see -h)", f);
    }
    o->opt.steps = o->steps;
    long batch_tokens = (long)o->B * o->T;
    if (tokens_per_update % batch_tokens)
        fatal("-d %ld is not a multiple of -b %d x -t %d = %ld tokens", tokens_per_update, o->B,
              o->T, batch_tokens);
    if (tokens_per_update / batch_tokens > 1 << 16)
        fatal("-d %ld is %ld micro-batches of -b x -t; at most 65536", tokens_per_update,
              tokens_per_update / batch_tokens);
    o->micro = tokens_per_update ? (int)(tokens_per_update / batch_tokens) : 1;
    o->tokens_per_update = tokens_per_update;
    if (o->probe.dump_tokens && o->val_batches == 0)
        fatal("--dump-token-losses needs validation batches (-m N > 0)");
    if (init_given && o->gamma >= 0.0)
        fatal("-g and -I together: -g G means -I gamma:G; to combine, write -I "
              "gamma:G,GROUP=SCHEME (got -I %s)",
              init_given);
    if (o->llmc_load && o->resume) fatal("--load-llmc and -y both give the weights; use one");
    if (o->out_dir && strpbrk(o->out_dir, "\"\\\n"))
        fatal("-o: the path holds a quote, backslash or newline, which the JSON log's strings do "
              "not escape");
    if (o->out_dir && strlen(o->out_dir) > OUT_DIR_MAX)
        fatal("-o: the path is %zu characters, longer than %d (the files inside it need room)",
              strlen(o->out_dir), OUT_DIR_MAX);
}

// The model configuration the options describe, checked for consistency.
static Config config_from_options(const Options* o, int V) {
    int llama = strcmp(o->preset, "llama") == 0;
    Config c = {0};
    c.V = V;
    c.L = o->L; c.C = o->C; c.H = o->H;
    c.KVH = o->KVH ? o->KVH : o->H;
    c.F = o->F ? o->F : 4 * o->C;
    c.maxT = o->maxT ? o->maxT : o->T;
    c.rmsnorm = o->norm ? strcmp(o->norm, "rmsnorm") == 0 : llama;
    c.swiglu = o->mlp ? strcmp(o->mlp, "swiglu") == 0 : llama;
    c.rope = o->pos ? strcmp(o->pos, "rope") == 0 : llama;
    c.bias = o->bias >= 0 ? o->bias : !llama;
    c.tied = o->tie >= 0 ? o->tie : !llama;
    c.attn_gate = o->gate >= 0 ? o->gate : 0;
    c.eps = o->eps;
    c.rope_theta = o->rope_theta;
    if (c.C % c.H) fatal("heads (-H %d) must divide the width (-C %d)", c.H, c.C);
    if (c.H % c.KVH) fatal("key/value heads (-K %d) must divide the heads (-H %d)", c.KVH, c.H);
    if (c.rope && (c.C / c.H) % 2) fatal("RoPE needs an even head size, got %d", c.C / c.H);
    if (o->T > c.maxT)
        fatal("sequence length -t %d exceeds the model's maximum -T %d", o->T, c.maxT);
    c.attn_scale = 1.0f / sqrtf((float)(c.C / c.H));
    c.logit_scale = 1.0f;
    return c;
}

// -I, -g, --resid-scale and --mup-base into an InitSpec (section 3).
static void init_spec_from_options(InitSpec* spec, const Options* o) {
    parse_init(spec, o->init, o->gamma);
    if (o->resid_scale >= 0) spec->resid = o->resid_scale ? RESID_SQRT2L : RESID_NONE;
    if (o->mup_base && !spec->mup) fatal("--mup-base needs -I mup");
    if (o->mup_base) spec->mup_base = o->mup_base;
}

// ---- text out: tokens, the run's header, the JSON-lines log -------------------------------------
// The table's vocabulary is checked against the file's size (each token takes at least its length
// byte) before the table is allocated.
static void decoder_read(Decoder* dec, FILE* f, long size, const char* path) {
    int32_t h[256];
    if (fread(h, sizeof(int32_t), 256, f) != 256 || h[0] != 20240328 || h[1] != 2)
        fatal("%s is not a decode table (bad header)", path);
    if (h[2] < 1 || h[2] > 65536 || (long)h[2] > size - (long)sizeof(h))
        fatal("%s: decode table vocabulary %d does not fit [1, 65536] and the file's %ld bytes",
              path, h[2], size);
    dec->V = h[2];
    dec->piece = xcalloc(dec->V, sizeof(char*));
    for (int i = 0; i < dec->V; i++) {
        unsigned char len;
        if (fread(&len, 1, 1, f) != 1) fatal("%s: truncated at token %d", path, i);
        dec->piece[i] = xcalloc(len + 1, 1);
        if (fread(dec->piece[i], 1, len, f) != len) fatal("%s: truncated at token %d", path, i);
    }
}

static void decoder_load(Decoder* dec, const char* path) {
    long size;
    FILE* f = open_regular(path, "decode table", "", &size);
    decoder_read(dec, f, size, path);
    fclose(f);
}

static void print_token(const Decoder* dec, int tok) {
    if (dec->piece) {
        fputs(tok < dec->V ? dec->piece[tok] : "?", stdout);
    } else {
        putchar(tok);
    }
}

static void decoder_free(Decoder* dec) {
    for (int i = 0; dec->piece && i < dec->V; i++) free(dec->piece[i]);
    free(dec->piece);
    memset(dec, 0, sizeof(*dec));
}

// A file the run will write at its end (--dump-token-losses, --save-llmc), through `probe` (the
// file itself, or the temporary file it is written to first), is checked at its start: an existing
// one must be a regular file, and probe is opened for writing (and removed again if it was not
// there), which proves the directory writable even where access() would say yes (root, a read-only
// mount).
static void output_file_check(const char* path, const char* probe, const char* flag) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        fatal("%s %s is not a regular file", flag, path);
    int existed = stat(probe, &st) == 0;
    if (existed && !S_ISREG(st.st_mode))
        fatal("%s: %s is in the way (not a regular file)", flag, probe);
    FILE* f = fopen(probe, "ab");
    if (!f) fatal("%s %s: cannot write %s (%s)", flag, path, probe, strerror(errno));
    fclose(f);
    if (!existed) unlink(probe);
}

// -o DIR is made with its missing parents, as `mkdir -p` would: out/ex/run1 needs no out/ first.
static void output_dir_create(const char* dir) {
    char path[4096];
    snprintf(path, sizeof(path), "%s", dir);
    for (char* p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            fatal("cannot create output dir %s (%s)", path, strerror(errno));
        *p = '/';
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        fatal("cannot create output dir %s (%s)", dir, strerror(errno));
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        fatal("output dir %s is not a directory", dir);
}

// One run per output directory: DIR/.lock, held with flock() for as long as the process lives (the
// kernel releases it when the process ends, however it ends) and holding the run's pid. A second
// run into DIR is refused with the first one's pid, before it writes anything, and so is a run into
// a DIR that holds a run it does not continue (run_dir_check; the lock keeps the last run's pid).
// Creating the lock also proves DIR writable. Returns the lock's descriptor.
static void run_dir_check(const Options* o, const char* dir, int clear);
static int held_lock = -1;             // output_dir_hold's claim, until the run takes it over
static char held_dir[4096];

// DIR made, its lock taken and (when `o` is given) DIR checked for another run, then the pid and
// `note` (a job, or "") written into the lock.
static int output_dir_lock(const Options* o, const char* dir, const char* note) {
    output_dir_create(dir);
    char path[4200];
    snprintf(path, sizeof(path), "%s/.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) fatal("cannot write in output dir %s (%s)", dir, strerror(errno));
    // the other ranks of train_gpt2cu look whether the lock is held by taking it shared for a
    // moment (dp_lock_holder): a claim that meets such a look tries again, for up to 20 ms
    int locked;
    for (int tries = 0; !(locked = flock(fd, LOCK_EX | LOCK_NB) == 0) && errno == EWOULDBLOCK &&
                        tries < 20;
         tries++)
        usleep(1000);
    if (!locked) {
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        fatal("output dir %s is in use by another run (pid %s): one run per directory; wait for "
              "it to end or give another -o", dir, pid[0] ? pid : "unknown");
    }
    if (o) run_dir_check(o, dir, 0);
    char pid[300];
    int n = snprintf(pid, sizeof(pid), "%ld\n%s", (long)getpid(), note);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n)
        fatal("cannot write in output dir %s (%s)", dir, strerror(errno));
    return fd;
}

// The run's claim of DIR: the lock output_dir_hold took for it, else a new one.
static int output_dir_claim(const Options* o, const char* dir) {
    if (held_lock >= 0 && !strcmp(dir, held_dir)) {
        int fd = held_lock;
        held_lock = -1;
        run_dir_check(o, dir, 0);
        return fd;
    }
    return output_dir_lock(o, dir, "");
}

// ---- the files a run reads and writes, checked against each other -------------------------------
// A path made absolute and free of symbolic links, "." and "..": realpath() of its longest existing
// prefix, then the rest as written, with "." and ".." taken lexically (a directory that does not
// exist yet holds no links; -o makes it as mkdir -p would).
static void path_resolve(const char* path, char* out, size_t cap) {
    char full[2 * PATH_MAX], head[PATH_MAX], cwd[PATH_MAX];
    if (path[0] == '/' || !getcwd(cwd, sizeof(cwd))) snprintf(full, sizeof(full), "%s", path);
    else snprintf(full, sizeof(full), "%s/%s", cwd, path);
    char* tail = full + strlen(full);       // full[..tail) resolves; the rest is taken lexically
    for (;;) {
        char keep = *tail;
        *tail = 0;
        int ok = tail > full && realpath(full, head) != NULL;
        *tail = keep;
        if (ok) break;
        while (tail > full && *--tail != '/') {}
        if (tail == full) { snprintf(head, sizeof(head), "/"); break; }
    }
    snprintf(out, cap, "%s", strcmp(head, "/") ? head : "");
    char rest[2 * PATH_MAX], *save = NULL;
    snprintf(rest, sizeof(rest), "%s", tail);
    for (char* c = strtok_r(rest, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        size_t n = strlen(out);
        if (strcmp(c, "..") == 0) { *(strrchr(out, '/') ? strrchr(out, '/') : out) = 0; continue; }
        if (strcmp(c, ".") != 0) snprintf(out + n, cap - n, "/%s", c);
    }
    if (!out[0]) snprintf(out, cap, "/");
}

// A file the run reads or writes, as a flag names it.
typedef struct {
    const char* flag;           // "-i"; the message names it
    const char* path;           // NULL: not given
    int writes;
    char real[PATH_MAX];        // path_resolve's
    int exists;
    struct stat st;             // when it exists: its device and inode
} RunFile;

// The same file: the same resolved path, or, for two that exist, the same device and inode (hard
// links).
static int same_file(const RunFile* a, const RunFile* b) {
    return strcmp(a->real, b->real) == 0 || (a->exists && b->exists &&
                                             a->st.st_dev == b->st.st_dev &&
                                             a->st.st_ino == b->st.st_ino);
}

static void run_file_stat(RunFile* f) {
    path_resolve(f->path, f->real, sizeof(f->real));
    f->exists = stat(f->path, &f->st) == 0;
}

// Is the resolved path `real` an entry of the resolved directory `dir`?
static int path_in_dir(const char* real, const char* dir) {
    size_t n = (size_t)(strrchr(real, '/') - real);
    return n ? strlen(dir) == n && strncmp(real, dir, n) == 0 : strcmp(dir, "/") == 0;
}

// -y names a checkpoint in -o DIR: the run continues the one there.
static int run_continues_dir(const Options* o) {
    if (!o->resume || !o->out_dir) return 0;
    char y[PATH_MAX], dir[PATH_MAX];
    path_resolve(o->resume, y, sizeof(y));
    path_resolve(o->out_dir, dir, sizeof(dir));
    return path_in_dir(y, dir);
}

// Is a checkpoint written before step `step` of a run that starts at start_step: every -n steps,
// and after the last (-x 0: the initialization, unless a resume already holds it).
static int ckpt_due(const Options* o, int start_step, int step) {
    return o->out_dir && step >= start_step && step <= o->steps &&
            (step > start_step || (step == o->steps && !o->resume)) &&
            (step == o->steps || (o->ckpt_every && step % o->ckpt_every == 0));
}

// What the run writes, or removes, as -o DIR's entry `name`, or NULL: its log and lock, the
// checkpoints of the steps ckpt_due gives, every checkpoint's temporary file (log_open removes
// those a killed run left), the --cossim-dump files, and, when --overwrite 1 replaces a run there,
// all of that run's checkpoints (run_dir_check).
static const char* run_dir_writes(const Options* o, int start_step, const char* name) {
    size_t n = strlen(name);
    int ckpt = strncmp(name, "ckpt_", 5) == 0 && n > 9 && strcmp(name + n - 4, ".bin") == 0;
    if (strcmp(name, "log.jsonl") == 0) return "log";
    if (strcmp(name, ".lock") == 0) return "lock";
    if (strncmp(name, "ckpt_", 5) == 0 && n > 13 && strcmp(name + n - 8, ".bin.tmp") == 0)
        return "checkpoint's temporary file";
    if (ckpt && o->overwrite && !run_continues_dir(o)) return "checkpoint (replaced)";
    int step;
    char want[64];
    if (ckpt && sscanf(name, "ckpt_%d", &step) == 1 &&
        snprintf(want, sizeof(want), "ckpt_%06d.bin", step) > 0 && strcmp(want, name) == 0 &&
        ckpt_due(o, start_step, step))
        return "checkpoint";
    char prefix[128];
    snprintf(prefix, sizeof(prefix), "cossim_%s_step", o->probe.cossim ? o->probe.cossim : "");
    if (o->probe.every && o->probe.cossim && strncmp(name, prefix, strlen(prefix)) == 0)
        return "--cossim-dump file";
    return NULL;
}

// No file the run writes may be a file it reads, or one it writes otherwise: a clash is refused
// with one line naming both flags, before anything is written. Checked on every rank, from the
// flags and what exists: the explicit files pairwise, then each of them against -o DIR's files,
// by name (run_dir_writes) and, for those that exist, by inode. decode: the decode table read.
static void paths_check(const Options* o, int start_step, const char* decode) {
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof(tmp), "%s.tmp", o->llmc_save ? o->llmc_save : "");
    RunFile f[] = {
            {.flag = "--save-llmc", .path = o->llmc_save, .writes = 1},
            {.flag = "--save-llmc's temporary file", .path = o->llmc_save ? tmp : NULL,
             .writes = 1},
            {.flag = "--dump-token-losses", .path = o->probe.dump_tokens, .writes = 1},
            {.flag = "-i", .path = o->train_path},
            {.flag = "-j", .path = o->val_path},
            {.flag = "-y", .path = o->resume},
            {.flag = "--load-llmc", .path = o->llmc_load},
            {.flag = o->decode_path ? "--decode" : "the decode table beside -i", .path = decode}};
    int n = (int)(sizeof(f) / sizeof(f[0]));
    for (int i = 0; i < n; i++)
        if (f[i].path) run_file_stat(&f[i]);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n && f[i].path && f[i].writes; j++)
            if (f[j].path && same_file(&f[i], &f[j]))
                fatal("%s %s and %s %s are the same file: the run would write over it; give one "
                      "of them another path", f[i].flag, f[i].path, f[j].flag, f[j].path);
    if (!o->out_dir) return;
    char dir[PATH_MAX];
    path_resolve(o->out_dir, dir, sizeof(dir));
    for (int i = 0; i < n; i++) {
        const char* what = f[i].path ? run_dir_writes(o, start_step, strrchr(f[i].real, '/') + 1)
                                     : NULL;
        if (what && path_in_dir(f[i].real, dir))
            fatal("%s %s is -o %s's %s: the run would write over it; give another path",
                  f[i].flag, f[i].path, o->out_dir, what);
    }
    DIR* d = opendir(o->out_dir);
    for (struct dirent* de; d && (de = readdir(d)) != NULL;) {
        const char* what = run_dir_writes(o, start_step, de->d_name);
        char path[PATH_MAX];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", o->out_dir, de->d_name);
        if (!what || stat(path, &st) != 0) continue;
        for (int i = 0; i < n; i++)
            if (f[i].path && f[i].exists && f[i].st.st_dev == st.st_dev &&
                f[i].st.st_ino == st.st_ino)
                fatal("%s %s is -o %s's %s (%s, a link to the same file): the run would write "
                      "over it; give another path",
                      f[i].flag, f[i].path, o->out_dir, what, de->d_name);
    }
    if (d) closedir(d);
}

// A run that does not continue the run in -o DIR (no -y, or -y from elsewhere) is refused when DIR
// holds a run's log or checkpoints, naming them and how to go on: a new log would stand beside the
// first run's checkpoints, or cut into its log. --overwrite 1 asks to replace it: the log, the
// checkpoints and the --cossim-dump files are removed, when `clear` (after every other check).
static void run_dir_check(const Options* o, const char* dir, int clear) {
    DIR* d = opendir(dir);
    if (!d) fatal("cannot open output dir %s (%s)", dir, strerror(errno));
    int logs = 0, ckpts = 0, last = -1;
    for (struct dirent* de; (de = readdir(d)) != NULL;) {
        const char* n = de->d_name;
        size_t len = strlen(n);
        int step, ckpt = strncmp(n, "ckpt_", 5) == 0 && len > 9 && !strcmp(n + len - 4, ".bin");
        if (strcmp(n, "log.jsonl") != 0 && strncmp(n, "ckpt_", 5) != 0) continue;
        char path[4400];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dir, n);
        if (stat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode))
            fatal("%s is a directory, and the run writes its log and checkpoints there", path);
        if (!S_ISREG(st.st_mode)) continue;     // a link to a device: no run's file
        logs += n[0] == 'l';
        ckpts += ckpt;
        if (ckpt && sscanf(n, "ckpt_%d", &step) == 1 && step > last) last = step;
    }
    closedir(d);
    if ((!logs && !ckpts) || run_continues_dir(o)) return;
    if (!o->overwrite) {
        char held[64] = "log.jsonl and no checkpoint", go_on[4400] = "";
        if (ckpts) {
            snprintf(held, sizeof(held), "%s%d checkpoint%s", logs ? "log.jsonl and " : "",
                     ckpts, ckpts == 1 ? "" : "s");
            snprintf(go_on, sizeof(go_on), "resume it with -y %s/ckpt_%06d.bin and a larger -x, ",
                     dir, last);
        }
        fatal("output dir %s holds a run (%s): %sgive another -o, or --overwrite 1 to replace it",
              dir, held, go_on);
    }
    if (!clear) return;
    d = opendir(dir);
    int removed = 0;
    for (struct dirent* de; d && (de = readdir(d)) != NULL;) {
        const char* n = de->d_name;
        size_t len = strlen(n);
        if (strcmp(n, "log.jsonl") != 0 &&
            !(strncmp(n, "ckpt_", 5) == 0 && len > 9 && !strcmp(n + len - 4, ".bin")) &&
            !(strncmp(n, "cossim_", 7) == 0 && len > 11 && !strcmp(n + len - 4, ".bin")))
            continue;
        char path[4400];
        snprintf(path, sizeof(path), "%s/%s", dir, n);
        if (unlink(path) != 0) fatal("--overwrite 1: cannot remove %s (%s)", path, strerror(errno));
        removed++;
    }
    if (d) closedir(d);
    printf("--overwrite 1: removed the %d files of the run in %s (log, checkpoints, cossim "
           "dumps)\n", removed, dir);
}

// train_gpt2.cu's rank 0 claims DIR before the ranks meet, so that a run already there stops the
// job at once, and writes `note` (its job) after its pid; the run's own claim (outputs_claim) then
// takes this one over
static int output_dir_hold(const char* dir, const char* note) {
    held_lock = output_dir_lock(NULL, dir, note);
    snprintf(held_dir, sizeof(held_dir), "%s", dir);
    return held_lock;
}

// Every path a run writes, checked at its start, before anything is computed: -o DIR is made and
// claimed (output_dir_claim), the files written at the end must be writable (output_file_check),
// and DIR must not hold another run (run_dir_check, which clears it with --overwrite 1). Returns
// the output dir's lock, or -1 without -o.
static int outputs_claim(const Options* o) {
    int lock = o->out_dir ? output_dir_claim(o, o->out_dir) : -1;
    char tmp[4200];
    if (o->probe.dump_tokens)
        output_file_check(o->probe.dump_tokens, o->probe.dump_tokens, "--dump-token-losses");
    if (o->llmc_save) {
        snprintf(tmp, sizeof(tmp), "%s.tmp", o->llmc_save);     // llmc_save writes it first
        output_file_check(o->llmc_save, tmp, "--save-llmc");
    }
    if (o->out_dir) run_dir_check(o, o->out_dir, 1);
    return lock;
}

// DIR (made by output_dir_create): ckpt_*.bin.tmp files that a killed run left are removed (a
// checkpoint is only ever renamed from one when complete). On a resume into DIR, the log is cut
// back to the end of the line of the checkpoint it resumes from: the lines after it belong to steps
// that run again.
static void log_open(Log* lg, const char* dir, const char* resume, int start_step) {
    lg->f = NULL;
    if (!dir) return;
    DIR* d = opendir(dir);
    if (!d) fatal("cannot open output dir %s (%s)", dir, strerror(errno));
    for (struct dirent* de; (de = readdir(d)) != NULL;) {
        size_t n = strlen(de->d_name);
        if (strncmp(de->d_name, "ckpt_", 5) != 0 || n < 9 ||
            strcmp(de->d_name + n - 8, ".bin.tmp") != 0)
            continue;
        char stale[4400];
        snprintf(stale, sizeof(stale), "%s/%s", dir, de->d_name);
        if (unlink(stale) == 0) printf("removed %s, left by an interrupted run\n", stale);
    }
    closedir(d);
    snprintf(lg->path, sizeof(lg->path), "%s/log.jsonl", dir);
    long keep = -1, dropped = 0;
    if (resume) {       // the byte after the checkpoint's line, and how many lines follow it
        char want[64], line[8192];
        snprintf(want, sizeof(want), "{\"event\":\"checkpoint\",\"step\":%d,", start_step);
        FILE* f = fopen(lg->path, "r");
        while (f && fgets(line, sizeof(line), f)) {
            if (keep >= 0 && strchr(line, '\n')) dropped++;
            if (strncmp(line, want, strlen(want)) == 0) keep = ftell(f), dropped = 0;
        }
        if (f) fclose(f);
    }
    if (keep >= 0 && truncate(lg->path, keep) != 0)
        fatal("cannot cut back log %s (%s)", lg->path, strerror(errno));
    if (dropped)
        printf("log %s: %ld lines after step %d's checkpoint removed; those steps run again\n",
               lg->path, dropped, start_step);
    lg->f = fopen(lg->path, resume ? "a" : "w");
    if (!lg->f) fatal("cannot open log %s (%s)", lg->path, strerror(errno));
}

// One object per line; fields as printf fragments, e.g. log_event(&lg,
// "\"step\":%d,\"val_loss\":%.6f", ...). A non-finite number that reaches a line as nan or inf
// becomes null, so every line is valid JSON.
static void log_event(Log* lg, const char* fmt, ...) {
    if (!lg->f) return;
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char* text = (char*)xmalloc((size_t)n + 1);
    vsnprintf(text, (size_t)n + 1, fmt, again);
    va_end(again);
    int ok = fputc('{', lg->f) != EOF, in_string = 0;
    for (char* p = text; *p; p++) {
        in_string ^= *p == '"';                 // the log's strings hold no escaped quotes
        // a value starts after these
        char* v = p + (!in_string && (*p == ':' || *p == ',' || *p == '['));
        char* w = v + (*v == '-');
        int token = v != p && (!strncmp(w, "nan", 3) || !strncmp(w, "inf", 3)) &&
                strchr(",]}", w[3] ? w[3] : '}');
        ok = ok && fputc(*p, lg->f) != EOF;
        if (token) { ok = ok && fputs("null", lg->f) != EOF; p = w + 2; }
    }
    ok = ok && fputs("}\n", lg->f) != EOF && fflush(lg->f) == 0;
    free(text);
    if (!ok) fatal("writing log %s failed (%s)", lg->path, strerror(errno));
}

// The bytes of the run: parameters, gradients and the two AdamW moments (4 floats per parameter),
// activations when the host computes (or probes), the probes' copies, and the datasets (already
// loaded). Refused when more than the memory available: the kernel would otherwise kill the run.
static size_t memory_available(void) {
    FILE* f = fopen("/proc/meminfo", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
    if (f) fclose(f);
#if defined(_SC_PHYS_PAGES)
    if (!kb) kb = (size_t)sysconf(_SC_PHYS_PAGES) / 1024 * (size_t)sysconf(_SC_PAGESIZE);
#endif
    return kb * 1024;       // 0: unknown
}

static void memory_check(const Config* c, const Options* o, int host_acts) {
    size_t P = model_param_count(c), MiB = 1 << 20;
    // activations: the host's (when it runs the model or the probes) and the update's tokens,
    // inputs and targets of its -d micro-batches (a few KiB, unless -d is very large)
    double tokens = 2.0 * o->micro * o->B * o->T * sizeof(int);
    double params = 4.0 * P * sizeof(float),
           acts = (host_acts ? (double)acts_bytes(c, o->B, o->T) : 0.0) + tokens;
    double probes = o->probe.every ? (double)P * sizeof(float) : 0.0;     // the weights before
    double total = params + acts + probes;
    size_t avail = memory_available();
    printf("memory: %.1f MiB (parameters, gradients and AdamW moments %.1f MiB, activations %.1f "
           "MiB, probes %.1f MiB)",
           total / MiB, params / MiB, acts / MiB, probes / MiB);
    if (avail) printf(" of %zu MiB available", avail / MiB);
    printf("\n");
    if (avail && total > (double)avail)
        fatal("the run needs about %.0f MiB but %zu MiB are available: use a smaller model, -b or "
              "-t",
              total / MiB, avail / MiB);
}

static void run_header(Run* r) {
    const char* device = r->device;
    const Options* o = &r->o;
    const Config* c = &r->tr.model->cfg;
    int threads = thread_count();
    printf("model: %s preset, L=%d C=%d H=%d KVH=%d F=%d V=%d maxT=%d, %s, %s, %s%s%s, eps=%g\n",
           o->preset, c->L, c->C, c->H, c->KVH, c->F, c->V, c->maxT,
           c->rmsnorm ? "RMSNorm" : "LayerNorm", c->swiglu ? "SwiGLU" : "GELU",
           c->rope ? "RoPE" : "learned positions", c->tied ? ", tied head" : "",
           c->attn_gate ? ", gated attention" : "", (double)c->eps);
    char accum[64] = "", split[64] = "", llmc[16] = "";   // llmc: the log's ":P" of llmc:P
    if (o->data_order == ORDER_LLMC) snprintf(llmc, sizeof(llmc), ":%d", r->llmc.ranks);
    if (o->micro > 1)
        snprintf(accum, sizeof(accum), " x %d micro-batches (%ld tokens per update)", o->micro,
                 (long)o->micro * o->B * o->T);
    if (o->ranks > 1)
        snprintf(split, sizeof(split), " (%d per rank x %d ranks)", o->B / o->ranks, o->ranks);
    printf("parameters: %zu | data: %s %zu tokens, val %zu tokens | B=%d%s T=%d%s steps=%d | %s, "
           "%d threads\n",
           r->tr.model->num_params, r->tr.train->is_shard ? "token shard" : "bytes", r->tr.train->n, r->tr.val->n,
           o->B, split, o->T, accum, o->steps, device, threads);
    if (o->data_order == ORDER_SEQUENTIAL)
        printf("batches: sequential, llm.c's order with its shuffling off (--data-order)\n");
    if (o->data_order == ORDER_LLMC)
        printf("batches: llm.c's shuffled order for %d process%s (--data-order)\n",
               r->llmc.ranks, r->llmc.ranks > 1 ? "es" : "");
    printf("init: %s, residual scaling %s%s, seed %d\n", r->tr.init.first, resid_names[r->tr.init.resid],
           r->tr.init.mup ? ", muP" : "", o->seed);
    if (o->resume) printf("resumed from %s at step %d\n", o->resume, r->tr.first_step);
    log_event(&r->lg,
              "\"event\":\"config\",\"preset\":\"%s\",\"L\":%d,\"C\":%d,\"H\":%d,\"KVH\":%d,"
              "\"F\":%d,\"V\":%d,\"T\":%d,\"B\":%d,\"micro_batches\":%d,\"ranks\":%d,"
              "\"data_order\":\"%s%s\","
              "\"steps\":%d,\"lr\":%g,\"weight_decay\":%g,\"eps\":%g,\"gamma\":%g,\"init\":\"%s\","
              "\"gate\":%d,\"seed\":%d,\"params\":%zu,\"device\":\"%s\",\"threads\":%d,"
              "\"start_step\":%d,\"ln_V\":%.6f",
            o->preset, c->L, c->C, c->H, c->KVH, c->F, c->V, o->T, o->B, o->micro, o->ranks,
            data_order_names[o->data_order], llmc, o->steps,
            (double)o->opt.lr, (double)o->opt.weight_decay, (double)c->eps, o->gamma, o->init,
            c->attn_gate, o->seed, r->tr.model->num_params, device, threads, r->tr.first_step,
            log((double)c->V));
}

// ---- --init-report ----------------------------------------------------------------------------
// --init-report: [InitFP §6.1]'s table of every tensor (expected against measured statistics), then
// each block's effect on the residual stream's variance for one batch, Var(out)/Var(in), with a
// warning outside [0.5, 2]. It flags the symmetry trap of [InitGuide ch. 7]: when the MLP's hidden
// units all have the same incoming weights (rows of up/gate, and biases) and the same outgoing
// weights (columns of down), they compute the same thing, receive the same gradient, and no step
// can ever separate them: the layer acts as one unit (-I zeros shows it). Equal rows alone are
// harmless when the units' gradients differ, e.g. a zero readout or zero out/down projections
// (zero_resid, muP).
static int columns_equal(const float* w, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        for (int k = 1; k < cols; k++)
            if (w[(size_t)r * cols + k] != w[(size_t)r * cols]) return 0;
    return 1;
}

static void init_report(Model* m, const InitSpec* spec, const int* tokens, int B, int T) {
    const Config* c = &m->cfg;
    printf("init: %s, residual scaling %s%s; L=%d C=%d\n", spec->first, resid_names[spec->resid],
           spec->mup ? ", muP" : "", c->L, c->C);
    printf("%-18s %-10s %-30s %6s %10s | %10s %10s %10s %10s\n", "tensor", "shape", "scheme",
           "lr x", "expect std", "mean", "std", "min", "max");
    int symmetric = 0;
    for (int i = 0; i < m->num_tensors; i++) {
        const Tensor* t = &m->tensors[i];
        const float* w = m->params + t->offset;
        Scheme sc = tensor_scheme(spec, t);
        Dist d = tensor_dist(spec, m, t);
        double f = resid_factor(spec, t, c->L);
        char shape[24], desc[96];
        if (t->cols > 1) snprintf(shape, sizeof(shape), "%dx%d", t->rows, t->cols);
        else snprintf(shape, sizeof(shape), "%d", t->rows);
        if (f != 1.0) snprintf(desc, sizeof(desc), "%s x%.4g", sc.text, f);
        else snprintf(desc, sizeof(desc), "%s", sc.text);
        Stats st = stats_of(w, NULL, (long)t->numel);
        printf("%-18s %-10s %-30.30s %6.4g %10.4g | %10.3e %10.4g %10.4g %10.4g\n", t->name, shape,
               desc, (double)t->lr_mult, dist_std(&d, t->rows, t->cols), st.mean, st.std, st.min,
               st.max);
    }
    // the MLP's hidden units: rows of up (and gate, and their biases) = columns of down
    // (transposed)
    for (int l = 0; l < c->L; l++) {
        int equal = columns_equal(param_of(m, K_WDOWN, l), c->C, c->F);
        int in_kinds[4] = {K_WUP, K_BUP, K_WGATE, K_BGATE};
        for (int k = 0; k < 4 && equal; k++) {
            const float* w = param_of(m, in_kinds[k], l);
            int cols = in_kinds[k] == K_WUP || in_kinds[k] == K_WGATE ? c->C : 1;
            for (int r = 1; w && r < c->F && equal; r++)
                equal = !memcmp(w, w + (size_t)r * cols, cols * sizeof(float));
        }
        if (equal) {
            printf("warning: h.%d.mlp: all %d hidden units have identical weights in and out: they "
                   "get identical "
                   "gradients and stay identical [InitGuide ch. 7]\n",
                   l, c->F);
            symmetric++;
        }
    }
    if (spec->mup)
        printf("muP: attention scale %.6g (1/d_head), logit multiplier %.6g (1/width_mult, base "
               "width %d)\n",
               (double)c->attn_scale, (double)c->logit_scale, spec->mup_base);
    model_forward(m, tokens, NULL, B, T);
    long n = (long)B * T * c->C, stride = (long)m->B * m->T * c->C;
    printf("forward pass on one batch (B=%d T=%d): variance of the residual stream\n", B, T);
    printf("%-8s %12s %12s %10s\n", "block", "Var(in)", "Var(out)", "out/in");
    int warned = 0;
    for (int l = 0; l < c->L; l++) {
        Stats a = stats_of(m->a.res + l * stride, NULL, n),
              b = stats_of(m->a.res + (l + 1) * stride, NULL, n);
        double ratio = (b.std * b.std) / (a.std * a.std);
        int off = !(ratio >= 0.5 && ratio <= 2.0);
        warned += off;
        printf("h.%-6d %12.4e %12.4e %10.4g%s\n", l, a.std * a.std, b.std * b.std, ratio,
               a.std == 0.0  ? "   warning: the stream is exactly 0"
                       : off ? "   warning: outside [0.5, 2]"
                             : "");
    }
    if (warned) printf("warning: %d of %d blocks outside [0.5, 2]\n", warned, c->L);
    if (symmetric)
        printf("warning: %d of %d MLPs are symmetric: each trains as a single hidden unit\n",
               symmetric, c->L);
}

// ============================================================================================
// 11. Checkpoints and llm.c model files
// ============================================================================================

// ---- checkpoints (format: doc/checkpoint.md) ----------------------------------------------------
// header: "IGPTCKPT", int32 version, int32 step, Config, Rng data_rng, Rng sample_rng, uint64
// num_params,
//         the spike probe's two Ema, uint32 CRC-32, uint32 0; then params, AdamW m, AdamW v as
//         float32.
#define CKPT_MAGIC "IGPTCKPT"
#define CKPT_VERSION 2
typedef struct {
    char magic[8];
    int32_t version;
    int32_t step;           // number of optimizer steps completed
    Config cfg;
    Rng data_rng, sample_rng;
    uint64_t num_params;
    Ema spike[2];           // the spike probe's statistics of the loss and the gradient norm
    uint32_t crc;           // CRC-32 of the whole file, computed with this field 0
    uint32_t zero;
} CkptHeader;
// the layout doc/checkpoint.md gives
typedef char ckpt_header_is_5176_bytes[sizeof(CkptHeader) == 5176 ? 1 : -1];

// CRC-32 as zlib, gzip and PNG compute it (reflected polynomial 0xEDB88320), so Python's zlib.crc32
// checks a file independently; eight bytes per step through eight tables (about 2 GB/s).
static uint32_t crc_table[8][256];
static uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
    if (!crc_table[0][1]) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            crc_table[0][i] = c;
        }
        for (int i = 0; i < 256; i++)
            for (int t = 1; t < 8; t++)
                crc_table[t][i] =
                        (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
    }
    const unsigned char* p = (const unsigned char*)data;
    crc = ~crc;
    for (; n >= 8; p += 8, n -= 8) {
        uint32_t lo =
                (p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24) ^ crc;
        uint32_t hi = p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][lo >> 8 & 0xFF] ^
                crc_table[5][lo >> 16 & 0xFF] ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^
                crc_table[2][hi >> 8 & 0xFF] ^ crc_table[1][hi >> 16 & 0xFF] ^
                crc_table[0][hi >> 24];
    }
    while (n--) crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

// The first parameter or AdamW moment that is NaN or inf, named ("h.0.attn.wq holds nan in its
// weights"); 0 when all are finite. A checkpoint is only ever written from a finite state.
static int model_nonfinite(const Model* m, char* what, size_t cap) {
    const float* arrays[3] = {m->params, m->adam_m, m->adam_v};
    const char* names[3] = {"weights", "AdamW first moment", "AdamW second moment"};
    for (int a = 0; a < 3; a++)
        for (int i = 0; i < m->num_tensors; i++) {
            const Tensor* t = &m->tensors[i];
            for (size_t j = 0; j < t->numel; j++) {
                float x = arrays[a][t->offset + j];
                if (isfinite(x)) continue;
                snprintf(what, cap, "%s holds %s in its %s", t->name, isnan(x) ? "nan" : "inf",
                         names[a]);
                return 1;
            }
        }
    return 0;
}

// Files the run writes whole (checkpoints, llm.c model files) go to PATH.tmp, are flushed to disk
// and renamed: a crash at any moment leaves the previous file or the new one at PATH, never half of
// one. `what` names the file in messages; ok: every write into f succeeded.
static FILE* tmp_open(const char* path, char* tmp, size_t cap, const char* what) {
    snprintf(tmp, cap, "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    if (!f) fatal("cannot write %s %s (%s)", what, tmp, strerror(errno));
    return f;
}

static void tmp_commit(FILE* f, int ok, const char* tmp, const char* path, const char* what) {
    ok = (fflush(f) == 0) && ok;
    ok = (fsync(fileno(f)) == 0) && ok;
    ok = (fclose(f) == 0) && ok;
    if (!ok) { unlink(tmp); fatal("writing %s %s failed (%s)", what, tmp, strerror(errno)); }
    if (rename(tmp, path) != 0) fatal("cannot rename %s to %s (%s)", tmp, path, strerror(errno));
}

static void checkpoint_save(const Model* m, const char* path, int step, const Rng* data_rng,
                            const Rng* sample_rng, const Ema spike[2]) {
    CkptHeader h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, CKPT_MAGIC, 8);
    h.version = CKPT_VERSION;
    h.step = step;
    h.cfg = m->cfg;
    h.data_rng = *data_rng;
    h.sample_rng = *sample_rng;
    h.num_params = m->num_params;
    h.spike[0] = spike[0];
    h.spike[1] = spike[1];
    const float* body[3] = {m->params, m->adam_m, m->adam_v};
    uint32_t crc = crc32_update(0, &h, sizeof(h));
    for (int a = 0; a < 3; a++) crc = crc32_update(crc, body[a], m->num_params * sizeof(float));
    h.crc = crc;
    char tmp[4200];
    FILE* f = tmp_open(path, tmp, sizeof(tmp), "checkpoint");
    int ok = fwrite(&h, sizeof(h), 1, f) == 1;
    for (int a = 0; a < 3; a++)
        ok = ok && fwrite(body[a], sizeof(float), m->num_params, f) == m->num_params;
    tmp_commit(f, ok, tmp, path, "checkpoint");
}

// Names the first config field that differs, so the user knows which flag to fix.
static void config_check_match(const Config* a, const Config* b, const char* path) {
#define CHECK_FIELD(f, flag)                                                                  \
    if (a->f != b->f)                                                                         \
        fatal("checkpoint %s has %s=%g but the flags give %g (%s)", path, #f, (double)a->f,   \
              (double)b->f, flag)
    CHECK_FIELD(V, "vocabulary comes from the data"); CHECK_FIELD(maxT, "-T"); CHECK_FIELD(L, "-L");
    CHECK_FIELD(C, "-C"); CHECK_FIELD(H, "-H"); CHECK_FIELD(KVH, "-K"); CHECK_FIELD(F, "-F");
    CHECK_FIELD(rmsnorm, "-a/--norm");
    CHECK_FIELD(swiglu, "-a/--mlp");
    CHECK_FIELD(rope, "-a/--pos");
    CHECK_FIELD(bias, "-a/--bias"); CHECK_FIELD(tied, "-a/--tie"); CHECK_FIELD(attn_gate, "-G");
    CHECK_FIELD(eps, "-e"); CHECK_FIELD(rope_theta, "--rope-theta"); CHECK_FIELD(attn_scale, "muP");
    CHECK_FIELD(logit_scale, "muP");
#undef CHECK_FIELD
}

// Every header field in its range before anything is used: a generator index outside [0, 624] would
// read past the state, a negative step would restart the schedule.
static void ckpt_header_check(const CkptHeader* h, const Model* m, long size, const char* path) {
    if (h->version == 1)
        fatal("checkpoint %s has version 1 (no checksum), which this trainer no longer reads; "
              "version %d expected",
              path, CKPT_VERSION);
    if (h->version != CKPT_VERSION)
        fatal("checkpoint %s has version %d, expected %d", path, h->version, CKPT_VERSION);
    if (h->step < 0 || h->step > (1 << 30))
        fatal("checkpoint %s: step %d is outside [0, 2^30] (corrupt header)", path, h->step);
    config_check_match(&h->cfg, &m->cfg, path);
    if (h->num_params != m->num_params)
        fatal("checkpoint %s holds %llu parameters, the model %zu", path,
              (unsigned long long)h->num_params, m->num_params);
    const Rng* rngs[2] = {&h->data_rng, &h->sample_rng};
    for (int i = 0; i < 2; i++)
        if (rngs[i]->mti < 0 || rngs[i]->mti > RNG_MT_N || (rngs[i]->has_next_normal & ~1) ||
            !isfinite(rngs[i]->next_normal))
            fatal("checkpoint %s: the %s generator's state is invalid (mti %d, has_next_normal %d; "
                  "corrupt header)",
                  path, i ? "sampling" : "data", rngs[i]->mti, rngs[i]->has_next_normal);
    for (int i = 0; i < 2; i++)
        if (!isfinite(h->spike[i].mean) || !(h->spike[i].var >= 0.0 && isfinite(h->spike[i].var)) ||
            h->spike[i].n < 0)
            fatal("checkpoint %s: the spike probe's statistics are invalid (corrupt header)", path);
    long want = (long)sizeof(CkptHeader) + 3 * (long)(m->num_params * sizeof(float));
    if (size < want)
        fatal("checkpoint %s is truncated (%ld bytes, %ld expected)", path, size, want);
    if (size > want)
        fatal("checkpoint %s has trailing bytes (%ld bytes, %ld expected)", path, size, want);
}

// The header, checked, then the body into the model, checked against the CRC. Returns the step.
static int checkpoint_read(Model* m, FILE* f, long size, const char* path, Rng* data_rng,
                           Rng* sample_rng, Ema spike[2]) {
    CkptHeader h;
    if (size < 8 || fread(h.magic, 1, 8, f) != 8 || memcmp(h.magic, CKPT_MAGIC, 8) != 0)
        fatal("%s is not a checkpoint (bad magic)", path);
    if (fread((char*)&h + 8, sizeof(h) - 8, 1, f) != 1)
        fatal("checkpoint %s is truncated (no header)", path);
    ckpt_header_check(&h, m, size, path);
    uint32_t stored = h.crc;
    h.crc = 0;
    uint32_t crc = crc32_update(0, &h, sizeof(h));
    float* body[3] = {m->params, m->adam_m, m->adam_v};
    for (int a = 0; a < 3; a++) {
        if (fread(body[a], sizeof(float), m->num_params, f) != m->num_params)
            fatal("checkpoint %s is truncated", path);
        crc = crc32_update(crc, body[a], m->num_params * sizeof(float));
    }
    if (crc != stored)
        fatal("checkpoint %s is corrupt: its CRC-32 is %08x, the bytes give %08x", path, stored,
              crc);
    // a file with a valid CRC from another writer: still never a non-finite state
    char what[256];
    if (model_nonfinite(m, what, sizeof(what))) fatal("checkpoint %s: %s", path, what);
    *data_rng = h.data_rng;
    *sample_rng = h.sample_rng;
    spike[0] = h.spike[0];
    spike[1] = h.spike[1];
    return h.step;
}

static int checkpoint_load(Model* m, const char* path, Rng* data_rng, Rng* sample_rng,
                           Ema spike[2]) {
    long size;
    FILE* f = open_regular(path, "checkpoint", "", &size);
    int step = checkpoint_read(m, f, size, path, data_rng, sample_rng, spike);
    fclose(f);
    return step;
}

// ---- llm.c's model file: the GPT-2 preset's weights out and in ----------------------------------
// 256 int32 (magic 20240326, version 3 = float32, maxT, V, L, heads, C, Vp = V padded to a multiple
// of 128), then float32 tensors in llm.c's order, each over all layers: wte (Vp rows, the padding
// 0), wpe, ln1 w, b, qkv w (per layer the rows of wq, wk, wv), qkv b, attention out w, b, ln2 w, b,
// fc w, b, fc proj w, b, lnf w, b. The GPT-2 preset is llm.c's model (LayerNorm eps 1e-5, tanh
// GELU, tied head), so the loss of the same weights on the same tokens agrees.
#define LLMC_MAGIC 20240326
static const int llmc_order[16][3] = {
        {K_WTE, -1, -1},    {K_WPE, -1, -1},    {K_LN1W, -1, -1}, {K_LN1B, -1, -1},
        {K_WQ, K_WK, K_WV}, {K_BQ, K_BK, K_BV}, {K_WO, -1, -1},   {K_BO, -1, -1},
        {K_LN2W, -1, -1},   {K_LN2B, -1, -1},   {K_WUP, -1, -1},  {K_BUP, -1, -1},
        {K_WDOWN, -1, -1},  {K_BDOWN, -1, -1},  {K_LNFW, -1, -1}, {K_LNFB, -1, -1}};

static int llmc_padded_vocab(int V) { return (V + 127) / 128 * 128; }

static void llmc_check(const Config* c, const InitSpec* spec, const char* flag) {
    const char* bad = c->rmsnorm ? "RMSNorm"
            : c->swiglu          ? "SwiGLU"
            : c->rope            ? "RoPE"
            : !c->bias           ? "no biases"
            : !c->tied           ? "an untied head"
            : c->attn_gate       ? "gated attention"
            : c->KVH != c->H     ? "grouped key/value heads"
            : c->F != 4 * c->C   ? "an MLP width other than 4 x width"
            : c->eps != 1e-5f    ? "a norm eps other than 1e-5"
            : spec->mup          ? "muP's attention and logit scales"
                                 : NULL;
    if (bad)
        fatal("%s: llm.c's model file holds the gpt2 preset only; this model has %s", flag, bad);
}

// Writes the model to f (save) or reads it from f, tensor by tensor in llm.c's order.
static int llmc_transfer(Model* m, FILE* f, int save) {
    const Config* c = &m->cfg;
    int ok = 1;
    for (int e = 0; e < 16 && ok; e++) {
        int layered = kind_is_layer(llmc_order[e][0]);
        for (int l = 0; l < (layered ? c->L : 1) && ok; l++)
            for (int j = 0; j < 3 && llmc_order[e][j] >= 0 && ok; j++) {
                int kind = llmc_order[e][j];
                float* p = layered ? param_of(m, kind, l) : m->p[kind];
                size_t n = m->kind_numel[kind];
                ok = save ? fwrite(p, sizeof(float), n, f) == n
                          : fread(p, sizeof(float), n, f) == n;
            }
        for (long pad = 0; e == 0 && ok && pad < (long)(llmc_padded_vocab(c->V) - c->V) * c->C;
             pad++) {
            float zero = 0.0f;
            ok = save ? fwrite(&zero, sizeof(float), 1, f) == 1
                      : fread(&zero, sizeof(float), 1, f) == 1;
        }
    }
    return ok;
}

static void llmc_save(const Model* m, const char* path) {
    const Config* c = &m->cfg;
    int32_t h[256] = {LLMC_MAGIC, 3, c->maxT, c->V, c->L, c->H, c->C, llmc_padded_vocab(c->V)};
    char tmp[4200];
    FILE* f = tmp_open(path, tmp, sizeof(tmp), "llm.c model file");
    int ok = fwrite(h, sizeof(h), 1, f) == 1 && llmc_transfer((Model*)m, f, 1);
    tmp_commit(f, ok, tmp, path, "llm.c model file");
    printf("weights written to %s (llm.c model file, float32)\n", path);
}

static void llmc_read(Model* m, FILE* f, long size, const char* path) {
    const Config* c = &m->cfg;
    int32_t h[256];
    if (size < (long)sizeof(h) || fread(h, sizeof(h), 1, f) != 1 || h[0] != LLMC_MAGIC)
        fatal("%s is not an llm.c model file (bad magic; expected %d)", path, LLMC_MAGIC);
    if (h[1] == 5)
        fatal("llm.c model file %s holds bfloat16 (version 5); only float32 files (version 3) are "
              "read",
              path);
    if (h[1] != 3) fatal("llm.c model file %s has version %d, expected 3 (float32)", path, h[1]);
    const char* flags[5] = {"-T", "vocabulary comes from the data", "-L", "-H", "-C"};
    int want[5] = {c->maxT, c->V, c->L, c->H, c->C};
    const char* names[5] = {"maxT", "V", "L", "heads", "C"};
    for (int i = 0; i < 5; i++)
        if (h[2 + i] != want[i])
            fatal("llm.c model file %s has %s=%d but the flags give %d (%s)", path, names[i],
                  h[2 + i], want[i], flags[i]);
    if (h[7] != llmc_padded_vocab(c->V))
        fatal("llm.c model file %s has padded vocabulary %d, expected %d", path, h[7],
              llmc_padded_vocab(c->V));
    long expect = (long)sizeof(h) +
            (long)((m->num_params + (size_t)(h[7] - c->V) * c->C) * sizeof(float));
    if (size != expect)
        fatal("llm.c model file %s holds %ld bytes, %ld expected (truncated or not this model)",
              path, size, expect);
    if (!llmc_transfer(m, f, 0)) fatal("llm.c model file %s: short read", path);
    char what[256];
    if (model_nonfinite(m, what, sizeof(what))) fatal("llm.c model file %s: %s", path, what);
}

static void llmc_load(Model* m, const char* path) {
    long size;
    FILE* f = open_regular(path, "llm.c model file", "", &size);
    llmc_read(m, f, size, path);
    fclose(f);
    printf("weights from %s (llm.c model file); AdamW starts from zero\n", path);
}

// ============================================================================================
// 12. A run: its plan and start, the loop's record, the loop through an engine, main
// ============================================================================================

// The kind of a data file from its first four bytes: 1 an llm.c token shard, 0 byte text, -1 not
// a regular file that can be read (dataset_load then says why).
static int data_file_kind(const char* path) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return -1;
    FILE* f = fopen(path, "rb");
    if (!f) return -1;
    int32_t magic = 0;
    int shard = fread(&magic, sizeof(magic), 1, f) == 1 && magic == SHARD_MAGIC;
    fclose(f);
    return shard;
}

// The run the flags ask for: the Trainer's settings from r->o, checked as far as they can be
// before the data is read, and the memory the run will take. host_acts: the host Model holds
// activations (the CPU trainer; train_gpt2.cu's holds them only for the probes).
static Trainer* run_plan(Run* r, int host_acts) {
    Options* o = &r->o;
    Trainer* tr = &r->tr;
    memset(tr, 0, sizeof(*tr));
    memset(&r->dec, 0, sizeof(r->dec));
    memset(&r->llmc, 0, sizeof(r->llmc));
    memset(r->spike, 0, sizeof(r->spike));
    r->device = "cpu", r->engine = NULL, r->probes = NULL, r->lg.f = NULL, r->lock = -1;
    if (o->opt.warmup > o->steps && o->steps > 0) o->opt.warmup = o->steps;
    int train_kind = data_file_kind(o->train_path), val_kind = data_file_kind(o->val_path);
    if (train_kind >= 0 && val_kind >= 0 && train_kind != val_kind)
        fatal("-i and -j must both be text or both token shards");
    tr->cfg = config_from_options(o, train_kind == 1 ? (o->V ? o->V : 50257) : 256);
    init_spec_from_options(&tr->init, o);
    // the probes and the token dump run on rank 0 alone (train_gpt2.cu's ranks)
    r->host_acts = host_acts || (!o->rank && (o->probe.every || o->probe.dump_tokens)) ||
                   o->init_report;
    memory_check(&tr->cfg, o, r->host_acts);
    if (o->llmc_save) llmc_check(&tr->cfg, &tr->init, "--save-llmc");
    if (o->llmc_load) llmc_check(&tr->cfg, &tr->init, "--load-llmc");
    tr->train_path = o->train_path, tr->val_path = o->val_path;
    tr->seed = (uint64_t)o->seed;
    tr->opt = o->opt;
    tr->B = o->B, tr->T = o->T, tr->micro = o->micro;
    tr->order = o->data_order;
    tr->steps = o->steps;
    tr->val_every = o->val_every, tr->val_batches = o->val_batches;
    tr->sample_every = o->sample_every, tr->sample_len = o->sample_len;
    rng_seed(&r->data_rng, tr->seed + 1);
    rng_seed(&r->sample_rng, tr->seed + 2);
    tr->data_rng = &r->data_rng, tr->sample_rng = &r->sample_rng;
    tr->llmc = &r->llmc;
    tr->dec = &r->dec;
    return tr;
}

// The model built and initialized and the data loaded (train_run): the data checked against the
// flags, the decode table, --decay-emb, weights from --load-llmc or a checkpoint (-y),
// --init-report, the probes, the output directory claimed and its log opened, the header.
// Everything is checked before anything is written.
static void run_start(Run* r) {
    Options* o = &r->o;
    Trainer* tr = &r->tr;
    Model* m = tr->model;
    if (tr->train->n < (size_t)o->T + 2)
        fatal("training data %s has %zu tokens, fewer than -t %d + 2", o->train_path, tr->train->n,
              o->T);
    if (o->data_order != ORDER_RANDOM && dataset_num_batches(tr->train, o->B, o->T) == 0)
        fatal("--data-order %s: training data %s has %zu tokens, fewer than one batch "
              "(-b %d x -t %d + 1)", data_order_names[o->data_order], o->train_path, tr->train->n,
              o->B, o->T);
    int procs = o->llmc_procs ? o->llmc_procs : o->ranks;     // llm.c's processes (llmc order)
    if (o->data_order == ORDER_LLMC && o->B % procs)
        fatal("--data-order llmc:%d: a batch of %d rows does not split into %d processes' equal "
              "shares", procs, o->B, procs);
    int validating = (o->val_every && o->val_batches) || o->probe.dump_tokens;
    if (tr->val->n < (size_t)o->T + 2 ||
        (validating && dataset_num_batches(tr->val, o->B, o->T) == 0))
        fatal("validation data %s has %zu tokens, fewer than one batch (-b %d x -t %d + 1)",
              o->val_path, tr->val->n, o->B, o->T);
    // the decode table: --decode's, else the one beside -i where there is one (data/x_train.bin
    // -> data/x_decode.bin)
    const char* decode = o->decode_path;
    char beside[4096];
    if (decode && !tr->train->is_shard)
        fatal("--decode %s: -i %s is byte text, which needs no decode table (token shards do)",
              decode, o->train_path);
    snprintf(beside, sizeof(beside), "%s", o->train_path);
    char* us = strrchr(beside, '_');
    if (us && tr->train->is_shard && !decode) {
        *us = 0;
        strncat(beside, "_decode.bin", sizeof(beside) - strlen(beside) - 1);
        if (access(beside, R_OK) == 0) decode = beside;
    }
    if (decode) decoder_load(&r->dec, decode);
    for (int i = 0; i < m->num_tensors; i++)
        if (o->decay_emb && (m->tensors[i].group == G_TOK_EMB || m->tensors[i].group == G_POS_EMB))
            m->tensors[i].decay = 1;
    // the file's weights replace the initializer's
    if (o->llmc_load) llmc_load(m, o->llmc_load);
    if (o->data_order == ORDER_LLMC) llmc_order_new(&r->llmc, tr->train, o->B, o->T, procs);
    if (o->init_report) {       // a batch of the training data, the one step 1 would see
        next_batch(tr, 0, tr->inp, tr->tgt);
        init_report(m, &tr->init, tr->inp, o->B, o->T);
        exit(0);
    }
    tr->first_step = o->resume
            ? checkpoint_load(m, o->resume, &r->data_rng, &r->sample_rng, r->spike)
            : 0;
    if (o->resume && (tr->first_step > o->steps || (tr->first_step == o->steps && !o->llmc_save)))
        fatal("checkpoint %s is at step %d and -x is %d: nothing to train (give -x larger than %d, "
              "or -x %d with --save-llmc to convert it)",
              o->resume, tr->first_step, o->steps, tr->first_step, tr->first_step);
    tr->resumed = o->resume != NULL;
    r->probes = probes_new(&o->probe, m, tr->train->tok, tr->train->n, o->out_dir, r->spike,
                           probe_log_line, &r->lg);
    paths_check(o, tr->first_step, decode);
    // before the log: files written at the end may go in -o. Rank 0 alone writes.
    r->lock = o->rank ? -1 : outputs_claim(o);
    log_open(&r->lg, o->rank ? NULL : o->out_dir, o->resume, tr->first_step);
    snprintf(r->last_ckpt, sizeof(r->last_ckpt), "%s", o->resume ? o->resume : "none written");
    r->last_val = NAN;
    r->probing = 0;
    run_header(r);
}

// ---- the loop's record (train, section 5) -------------------------------------------------------
// The host Model's parameters, and with moments 1 its AdamW state, up to date (nothing to do
// without an engine).
static void run_to_host(Run* r, int moments) {
    if (r->engine) r->engine->to_host(r->engine->ctx, moments);
}

// After the loop: the last validation loss, then the files written at the end, from the host.
static void run_finish(Run* r) {
    Options* o = &r->o;
    Model* m = r->tr.model;
    if (isfinite(r->last_val)) printf("final val loss %.6f\n", r->last_val);
    if (o->rank) return;        // the files at the end are rank 0's
    if (o->probe.dump_tokens || o->llmc_save) run_to_host(r, 0);
    // the token losses are the host's forward, as the probes' are
    if (o->probe.dump_tokens)
        dump_token_losses(m, r->tr.val, o->val_batches, o->B, o->T, r->tr.inp, r->tr.tgt,
                          o->probe.dump_tokens);
    if (o->llmc_save) llmc_save(m, o->llmc_save);
}

// Before step `step` (and once after the last): the validation loss measured there into the log;
// a checkpoint every -n steps and at the end (-x 0 writes the initialization as a step-0
// checkpoint); after the last step, run_finish.
static void run_before_step(Run* r, int step, double val_loss) {
    Options* o = &r->o;
    Model* m = r->tr.model;
    if (validation_due(&r->tr, step)) {
        r->last_val = val_loss;
        log_event(&r->lg, "\"event\":\"val\",\"step\":%d,\"val_loss\":%.6f", step, val_loss);
    }
    if (ckpt_due(o, r->tr.first_step, step)) {
        run_to_host(r, 1);          // on every rank: a sharded state is gathered first
        char what[256];
        if (model_nonfinite(m, what, sizeof(what))) {
            log_event(&r->lg, "\"event\":\"blowup\",\"step\":%d", step);
            fatal("after step %d %s: training stopped, checkpoint not written; last good "
                  "checkpoint: %s",
                  step, what, r->last_ckpt);
        }
        snprintf(r->last_ckpt, sizeof(r->last_ckpt), "%s/ckpt_%06d.bin", o->out_dir, step);
        if (!o->rank)
            checkpoint_save(m, r->last_ckpt, step, &r->data_rng, &r->sample_rng, r->spike);
        log_event(&r->lg, "\"event\":\"checkpoint\",\"step\":%d,\"path\":\"%s\"", step,
                  r->last_ckpt);
    }
    if (step == r->tr.steps) run_finish(r);
}

// After the gradient of step `step`: a NaN or inf loss or norm stops the run (the log says where);
// the first step's loss is set against ln V; the spike check; the probes of a probe step. The
// probes read the host Model's activations and gradients: with an engine, the parameters come back
// and the host recomputes the step's forward and backward on the same micro-batches (probes cost a
// host step every -p N steps, and nothing when off).
static int run_inspect(Run* r, int step, float loss, double norm) {
    Model* m = r->tr.model;
    if (!isfinite(loss) || !isfinite(norm)) {
        log_event(&r->lg, "\"event\":\"blowup\",\"step\":%d", step + 1);
        // a finite loss is printed as the progress line prints it: with a norm that is not, the
        // loss itself is usually fine (e.g. ln V where the norms map overflowing rows to 0)
        char l[32];
        snprintf(l, sizeof(l), isfinite(loss) ? "%.6f" : isnan(loss) ? "nan" : "inf", loss);
        fatal("loss is %s (grad norm %s) at step %d: training stopped; last good checkpoint: %s",
              l,
              isnan(norm)           ? "nan"
                      : isinf(norm) ? "inf"
                                    : "finite",
              step + 1, r->last_ckpt);
    }
    // the first check of an initialization: a uniform guess over V tokens scores ln V
    if (step == 0)
        printf("initial loss %.4f against ln V = %.4f, a uniform prediction's\n", loss,
               log((double)m->cfg.V));
    // every rank decides a spike alike (the same loss and norm); the probes run on rank 0
    int skip = probe_spike(r->probes, step, loss, norm);
    r->probing = !r->o.rank && probes_due(r->probes, step);
    if (r->probing) {
        if (r->engine) {
            run_to_host(r, 0);
            compute_gradients(m, r->tr.inp, r->tr.tgt, r->o.B, r->o.T, r->o.micro);
        }
        probes_before_update(r->probes, m, step);
    }
    return skip;
}

// After the update: the probes' update-to-weight ratios, then the log's train event.
static void run_after_step(Run* r, int step, float loss, float lr, double norm, double ms) {
    if (r->probing) {
        run_to_host(r, 0);
        probes_after_update(r->probes, r->tr.model);
    }
    double tok_s = r->o.micro * (double)r->o.B * r->o.T / (ms / 1e3);
    log_event(&r->lg,
              "\"event\":\"train\",\"step\":%d,\"train_loss\":%.6f,\"lr\":%.6e,\"grad_norm\":%.6f,"
              "\"ms\":%.3f,\"tok_s\":%.1f",
              step + 1, loss, lr, norm, ms, tok_s);
}

// What run_plan and run_start hold: the log, the lock, the probes, the decode table, llm.c's order.
static void run_free(Run* r) {
    if (r->lg.f) fclose(r->lg.f);
    if (r->lock >= 0) close(r->lock);
    probes_delete(r->probes);
    decoder_free(&r->dec);
    llmc_order_free(&r->llmc);
}

// ---- the loop through an engine -----------------------------------------------------------------
// train_run's set-up for a model that trains elsewhere: the data, the host Model built and
// initialized (checkpoints, probes and the engine's first weights come from it), its activations
// only where the host computes (r->host_acts), then run_start.
static void run_setup_for_engine(Run* r, Dataset* train_data, Dataset* val_data, Model* model) {
    Trainer* tr = &r->tr;
    dataset_load(train_data, tr->train_path, tr->cfg.V);
    dataset_load(val_data, tr->val_path, tr->cfg.V);
    model_build(model, &tr->cfg);
    model_init(model, &tr->init, tr->seed);
    if (r->host_acts) acts_alloc(model, tr->B, tr->T);
    tr->inp = xmalloc((size_t)tr->micro * tr->B * tr->T * sizeof(int));
    tr->tgt = xmalloc((size_t)tr->micro * tr->B * tr->T * sizeof(int));
    tr->train = train_data, tr->val = val_data, tr->model = model;
    run_start(r);
}

// evaluate (section 5) on the engine.
static double engine_evaluate(Engine* e, const Trainer* tr) {
    int batches = tr->val_batches, avail = dataset_num_batches(tr->val, tr->B, tr->T);
    if (batches > avail) batches = avail;
    double sum = 0.0;
    for (int i = 0; i < batches; i++) {
        dataset_batch_at(tr->val, i, tr->inp, tr->tgt, tr->B, tr->T);
        sum += e->forward(e->ctx, tr->inp, tr->tgt, tr->B, tr->T);
    }
    return batches ? sum / batches : NAN;
}

// sample_text (section 5) on the engine: the same tokens from the same generator.
static void engine_sample_text(Engine* e, const Trainer* tr, int T) {
    int V = tr->cfg.V, length = tr->sample_len;
    int* ctx = xmalloc((size_t)(length + 1) * sizeof(int));
    ctx[0] = tr->val->tok[0];
    print_token(tr->dec, ctx[0]);
    for (int n = 1; n <= length; n++) {
        int start = n > T ? n - T : 0, len = n - start;
        e->forward(e->ctx, ctx + start, NULL, 1, len);
        ctx[n] = sample_token(e->probs(e->ctx, len - 1, V), V, rng_uniform(tr->sample_rng));
        print_token(tr->dec, ctx[n]);
    }
    printf("\n");
    fflush(stdout);
    free(ctx);
}

// compute_gradients (section 5) on the engine.
static float engine_gradients(Engine* e, const int* inp, const int* tgt, int B, int T, int micro) {
    long BT = (long)B * T;
    double loss_sum = 0.0;
    e->zero_grad(e->ctx);
    for (int mb = 0; mb < micro; mb++) {
        loss_sum += e->forward(e->ctx, inp + mb * BT, tgt + mb * BT, B, T);
        e->backward(e->ctx, B, T, 1.0f / micro);
    }
    return (float)(loss_sum / micro);
}

// Part I's train() with every forward, backward, norm and update handed to the engine, in the same
// order, around the same record of the run. test_gpt2.c trains a CPU model through this loop and
// checks its log and checkpoint against train()'s, to the last bit.
static void train_with_engine(Run* r, Engine* e) {
    Trainer* tr = &r->tr;
    long BT = (long)tr->B * tr->T;
    r->engine = e;
    for (int step = tr->first_step; step <= tr->steps; step++) {
        double val_loss = NAN;
        if (validation_due(tr, step)) {
            val_loss = engine_evaluate(e, tr);
            printf("step %d | val loss %.6f\n", step, val_loss);
        }
        if (sample_due(tr, step)) {
            printf("---- sample at step %d ----\n", step);
            engine_sample_text(e, tr, tr->T < tr->cfg.maxT ? tr->T : tr->cfg.maxT);
            printf("----\n");
        }
        run_before_step(r, step, val_loss);
        if (step == tr->steps) break;
        double t0 = now_ms();
        for (int mb = 0; mb < tr->micro; mb++)
            next_batch(tr, (long)step * tr->micro + mb, tr->inp + mb * BT, tr->tgt + mb * BT);
        float loss = engine_gradients(e, tr->inp, tr->tgt, tr->B, tr->T, tr->micro);
        double norm = e->grad_norm(e->ctx);
        int skip = run_inspect(r, step, loss, norm);
        float lr = lr_at(&tr->opt, step);
        if (!skip) e->update(e->ctx, &tr->opt, lr, step + 1, clip_scale(tr->opt.clip, norm));
        double ms = now_ms() - t0;
        print_step(tr, step, loss, lr, norm, ms, skip);
        run_after_step(r, step, loss, lr, norm, ms);
    }
    r->engine = NULL;
}

// What run_setup_for_engine allocated.
static void run_free_engine_setup(Run* r) {
    model_free(r->tr.model);
    free(r->tr.train->tok), free(r->tr.val->tok), free(r->tr.inp), free(r->tr.tgt);
}

// One training run on the CPU with the options o: what main does once, and --coord-check per width.
static void train_on_cpu(const Options* o, void* unused) {
    (void)unused;
    Run r;
    r.o = *o;
    Trainer* tr = run_plan(&r, 1);
    train_run(tr, &r);
    run_free(&r);
}

// ---- the coordinate check ---------------------------------------------------------------------
// --coord-check ([InitFP §5.6], the protocol of mup's coord check): for every width of
// --coord-widths, a run of --coord-steps steps with the other flags as given (so -I mup is checked
// as it trains) and the coord probe at every step. The widths train one after another in this
// process, each by train(options, ctx) (the CPU or the GPU trainer) into DIR/coord_wWIDTH/log.jsonl
// (its checkpoint is removed); then the coord lines are collected into DIR/log.jsonl and the table
// is printed.
static void coord_check(const Options* o, void (*train)(const Options* o, void* ctx), void* ctx) {
    if (!o->out_dir) fatal("--coord-check needs -o DIR");
    if (o->resume) fatal("--coord-check trains from initialization; it cannot resume (-y)");
    paths_check(o, 0, NULL);    // DIR's own log; each width's run checks its directory
    int lock = output_dir_claim(o, o->out_dir);
    run_dir_check(o, o->out_dir, 1);
    int widths[64], nw = 0, S = o->probe.coord_steps;
    char list[512], *save = NULL;
    snprintf(list, sizeof(list), "%s", o->probe.coord_widths);
    for (char* tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (nw == 64) fatal("--coord-widths: at most 64 widths");
        widths[nw++] = (int)parse_int("--coord-widths", tok, 1, 65536);
    }
    if (!nw) fatal("empty --coord-widths");
    static char dir[4096];
    for (int i = 0; i < nw; i++) {
        snprintf(dir, sizeof(dir), "%s/coord_w%d", o->out_dir, widths[i]);
        printf("---- coord check: width %d -> %s ----\n", widths[i], dir);
        fflush(stdout);
        Options w = *o;
        w.C = widths[i];
        w.steps = w.opt.steps = S;
        w.out_dir = dir;
        w.probe = (ProbeOptions){.every = 1, .list = "coord"};
        w.val_every = w.sample_every = w.sample_len = w.ckpt_every = 0;
        train(&w, ctx);
        char ckpt[4200];
        snprintf(ckpt, sizeof(ckpt), "%s/ckpt_%06d.bin", dir, S);
        unlink(ckpt);
    }
    // the table: width x step x {emb, attn, mlp, logits, gate pre-activation} (attn, mlp, gate:
    // mean over the layers)
    Log lg;
    log_open(&lg, o->out_dir, NULL, 0);
    double* tab = xcalloc((size_t)nw * S * 5, sizeof(double));
    int gate = 0;
    for (int i = 0; i < nw; i++) {
        char path[4200], line[2048];
        snprintf(path, sizeof(path), "%s/coord_w%d/log.jsonl", o->out_dir, widths[i]);
        FILE* f = fopen(path, "r");
        if (!f) fatal("--coord-check: cannot read %s (%s)", path, strerror(errno));
        while (fgets(line, sizeof(line), f)) {
            char *ps = strstr(line, "\"step\":"), *pt = strstr(line, "\"tensor\":\""),
                 *pv = strstr(line, "\"value\":");
            if (!strstr(line, "\"probe\":\"coord\"") || !ps || !pt || !pv) continue;
            int step = atoi(ps + 7);
            char name[64] = "";
            sscanf(pt + 10, "%63[^\"]", name);
            int col = strcmp(name, "emb") == 0 ? 0
                    : strstr(name, "attn_out") ? 1
                    : strstr(name, "mlp_out")  ? 2
                    : strstr(name, "gate_pre") ? 4
                                               : 3;
            gate |= col == 4;
            if (step >= 0 && step < S)
                tab[((size_t)i * S + step) * 5 + col] +=
                        atof(pv + 8) / (col == 3 || col == 0 ? 1 : o->L);
            line[strcspn(line, "\n")] = 0;
            // the line without its braces
            log_event(&lg, "%.*s", (int)strlen(line) - 2, line + 1);
        }
        fclose(f);
    }
    printf("coord check: mean |x| at each step (attn, mlp: mean over the %d layers); log in "
           "%s/log.jsonl\n",
           o->L, o->out_dir);
    printf("%5s %6s %11s %11s %11s %11s%s\n", "step", "width", "emb", "attn", "mlp", "logits",
           gate ? "    gate_pre" : "");
    for (int s = 0; s < S; s++)
        for (int i = 0; i < nw; i++) {
            const double* r = tab + ((size_t)i * S + s) * 5;
            printf("%5d %6d %11.4e %11.4e %11.4e %11.4e", s, widths[i], r[0], r[1], r[2], r[3]);
            if (gate) printf(" %11.4e", r[4]);
            printf("\n");
        }
    free(tab);
    if (lg.f) fclose(lg.f);
    close(lock);
}

#ifndef TRAIN_GPT2_NO_MAIN
int main(int argc, char** argv) {
    single_process_check();
    Options o;
    parse_args(&o, argc, argv);
    twins_install();
    if (o.probe.coord_check) coord_check(&o, train_on_cpu, NULL);    // every width, then the table
    else train_on_cpu(&o, NULL);
    return 0;
}
#endif
