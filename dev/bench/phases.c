/*
phases.c: where the time of one training step of train_gpt2 goes, phase by phase, each phase next
to its roofline (doc/bench_phases.md). `make bench` runs it (bench.py --phases) and appends the
table to out/bench/latest.md.

    make dev/bench/phases
    OMP_WAIT_POLICY=PASSIVE dev/bench/phases -a gpt2 -L 12 -C 768 -H 12 -V 50257 -b 4 -t 64 --peak 446.8

The model is the trainer's own: the flags are train_gpt2's (-a, -L, -C, -H, -K, -F, -V, -b, -t, -G,
--norm, --mlp, ...; parse_args reads them), the model is built, initialized and given its
activation buffers by the trainer's functions (config_from_options, model_build, model_init,
acts_alloc), and one real step (forward, backward) fills the activations with the values a step
sees. Each phase then calls the trainer's layer functions on that step's shapes and buffers, as
many times per step as model_forward and model_backward call them:

  matmuls forward   matmul_forward of every linear layer of the blocks
  LM head      the LM head's matmul_forward and its backward (lm_head_backward: the cross-entropy's
               gradient and the two products)
  matmuls backward  matmul_backward of every linear layer of the blocks (dinp, dW, dbias)
  attention    attention_forward and attention_backward (and rope_apply, forward and backward, with RoPE)
  norms        norm_forward and norm_backward (2 per block and the final one)
  act+resid    gelu or swiglu forward and backward, residual_forward (2 per block), the gate with -G 1
  softmax+loss softmax_forward (and the muP logit scale, if any); the loss's backward is in the
               LM head's row (lm_head_backward reads the probabilities as they are)
  embeddings   embedding_forward and embedding_backward
  memsets      the zeroing of the activation gradients (dln, dres, dhact, dyg, dq, dk, dv) in model_backward,
               and its copy of each block's output gradient into the block's input slice of dres
  optimizer    after the backward: grad_norm (a pass over every gradient), then adamw_step
  zero grads   model_zero_grad (what compute_gradients does before model_backward: every gradient set to 0)

The program runs rounds: each round runs every phase once and then a full step (forward, backward
with the gradient zeroing, gradient norm, AdamW, as train() runs them: what the trainer's progress
line times, less drawing the batch), so that the machine's noise falls on the phases and the step
alike. One untimed warm-up round (which also counts each phase's calls, FLOPs and bytes), then
--reps rounds (default 5); the table gives the MEDIAN over the rounds, in ms per step, of each phase
and of the full step.

Own flags (the others go to the trainer's parse_args):
  --peak GFLOPS   the FMA peak on these threads (bench.py passes dev/bench/fma_peak's); without it the
                  roofline is the memory time alone
  --bw GBPS       the memory bandwidth, instead of measuring it
  --bw-mb MB      the size of each of the triad's three arrays (default 512)
  --reps N        timed rounds (default 5)
  --name NAME     the configuration's name in the table's heading

The memory bandwidth: a[i] = b[i] + s * c[i] over three arrays of --bw-mb MB each, on all threads
(OpenMP, static schedule, pages first touched by the thread that uses them), best of 3; GB/s counts
the bytes read plus the bytes written (3 x the array size; the hardware's write-allocate read of a is
not counted, as in STREAM).

Bytes moved per phase: the minimum a kernel needs, each input read once and each output written
once, 4 bytes per float, from the shapes of each call; an output that a function accumulates into
(+=) is read and written. The count of each kernel is the comment at its wrapper below. FLOPs are
bench.py's: a multiply-add is 2, forward 2 * rows * in * out per matmul, backward twice that;
attention the causal half of q k^T and A v, forward 2 * B * T^2 * (H * hd), backward twice that; 0
for every other phase. Roofline time = max(FLOPs / peak, bytes / bandwidth). A phase with FLOPs also
gets its share of the FMA peak, FLOPs / time / peak, and so do the three matmul rows together (the
GEMMs of a step), the sum of the phases and the full step.
*/
#define TRAIN_GPT2_NO_MAIN
#include "../../train_gpt2.c"

// ---- what a phase did: calls, FLOPs, bytes (counted on its untimed run), time -----------------------
typedef struct {
    const char* name;
    int calls;
    double flops, bytes, ms;
} Phase;

static Phase* counting;     // the phase being counted, or NULL (timed runs)

static void count(double flops, double floats) {
    if (!counting) return;
    counting->calls++;
    counting->flops += flops;
    counting->bytes += 4.0 * floats;
}

// ---- the trainer's functions, each with its count -----------------------------------------------------
// matmul forward: reads inp [BT,C], W [OC,C], bias [OC]; writes out [BT,OC]
static void mm_fwd(float* out, const float* inp, const float* W, const float* bias, int BT, int C, int OC) {
    impl.matmul_forward(out, inp, W, bias, BT, C, OC);
    count(2.0 * BT * C * OC, (double)BT * C + (double)OC * C + (bias ? OC : 0) + (double)BT * OC);
}

// matmul backward: reads dout [BT,OC], inp [BT,C], W [OC,C]; accumulates (reads and writes) dinp [BT,C],
// dW [OC,C], dbias [OC]
static void mm_bwd(float* dinp, float* dW, float* dbias, const float* dout, const float* inp, const float* W,
                   int BT, int C, int OC) {
    impl.matmul_backward(dinp, dW, dbias, dout, inp, W, BT, C, OC);
    count((dinp ? 4.0 : 2.0) * BT * C * OC, (double)BT * OC + (double)BT * C + (double)OC * C +
          (dinp ? 2.0 * BT * C : 0) + 2.0 * OC * C + (dbias ? 2.0 * OC : 0));
}

// attention forward: reads q [BT,H*hd], k, v [BT,KVH*hd]; writes y [BT,H*hd] and the causal half of
// att [B,H,T,T] (T(T+1)/2 per head; the zeros above the diagonal are not counted)
static void att_fwd(float* y, float* att, const float* q, const float* k, const float* v,
                    int B, int T, int H, int KVH, int hd, float scale) {
    impl.attention_forward(y, att, q, k, v, B, T, H, KVH, hd, scale);
    double BT = (double)B * T, tri = (double)B * H * T * (T + 1) / 2.0;
    count(2.0 * B * (double)T * T * H * hd, 2.0 * BT * H * hd + 2.0 * BT * KVH * hd + tri);
}

// attention backward: reads dy [BT,H*hd], the causal half of att, q, k, v; accumulates dq, dk, dv
// (the per-thread scratch stays in cache and is not counted)
static void att_bwd(float* dq, float* dk, float* dv, const float* dy, const float* att,
                    const float* q, const float* k, const float* v, int B, int T, int H, int KVH, int hd, float scale) {
    impl.attention_backward(dq, dk, dv, dy, att, q, k, v, B, T, H, KVH, hd, scale);
    double BT = (double)B * T, tri = (double)B * H * T * (T + 1) / 2.0;
    count(4.0 * B * (double)T * T * H * hd,
          2.0 * BT * H * hd + tri + 2.0 * BT * KVH * hd + 2.0 * (BT * H * hd + 2.0 * BT * KVH * hd));
}

// RoPE: x [BT,nh*hd] read and written in place; reads the table [T, hd/2, 2]
static void rope(float* x, const float* cs, int B, int T, int nh, int hd, float sign) {
    rope_apply(x, cs, B, T, nh, hd, sign);
    count(0, 2.0 * B * T * nh * hd + (double)T * hd);
}

// norm forward: reads inp [N,C], w, b [C]; writes out [N,C], mean (LayerNorm) and rstd [N]
static void nrm_fwd(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                    int rms, float eps, int N, int C) {
    norm_forward(out, mean, rstd, inp, w, b, rms, eps, N, C);
    count(0, 2.0 * N * C + C + (b ? C : 0) + (mean ? N : 0) + N);
}

// norm backward: reads dout, inp [N,C], w [C], mean (LayerNorm), rstd [N]; accumulates dinp [N,C],
// dw, db [C]
static void nrm_bwd(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                    const float* mean, const float* rstd, int rms, int N, int C) {
    norm_backward(dinp, dw, db, dout, inp, w, mean, rstd, rms, N, C);
    count(0, 2.0 * N * C + C + (rms ? 0 : N) + N + 2.0 * N * C + 2.0 * C + (db ? 2.0 * C : 0));
}

// residual: reads a, b [N]; writes out [N]
static void resid(float* out, const float* a, const float* b, long N) {
    residual_forward(out, a, b, N);
    count(0, 3.0 * N);
}

// GELU: forward reads inp, writes out [N]; backward reads inp, dout, writes dinp
static void gelu_f(float* out, const float* inp, long N) { gelu_forward(out, inp, N); count(0, 2.0 * N); }
static void gelu_b(float* dinp, const float* inp, const float* dout, long N) {
    gelu_backward(dinp, inp, dout, N);
    count(0, 3.0 * N);
}

// SwiGLU: forward reads a, u, writes out [N]; backward reads a, u, dout, writes da, du
static void swiglu_f(float* out, const float* a, const float* u, long N) { swiglu_forward(out, a, u, N); count(0, 3.0 * N); }
static void swiglu_b(float* da, float* du, const float* a, const float* u, const float* dout, long N) {
    swiglu_backward(da, du, a, u, dout, N);
    count(0, 5.0 * N);
}

// gate forward: reads y [BT,H*hd], the gate's input [BT,H]; writes out [BT,H*hd], the gate [BT,H] (in place)
static void gate_f(float* out, float* gate, const float* y, int BT, int H, int hd) {
    attn_gate_forward(out, gate, y, BT, H, hd);
    count(0, 2.0 * BT * H * hd + 2.0 * BT * H);
}

// gate backward: reads dout, y [BT,H*hd], gate [BT,H]; writes dy [BT,H*hd], dgpre [BT,H]
static void gate_b(float* dy, float* dgpre, const float* dout, const float* y, const float* gate, int BT, int H, int hd) {
    attn_gate_backward(dy, dgpre, dout, y, gate, BT, H, hd);
    count(0, 3.0 * BT * H * hd + 2.0 * BT * H);
}

// softmax: reads logits [BT,V] and targets [BT]; writes probabilities [BT,V] (in place) and losses [BT]
static void softmax_f(float* logits, float* losses, const int* targets, int BT, int V) {
    impl.softmax_forward(logits, losses, targets, BT, V);
    count(0, 2.0 * BT * V + 2.0 * BT);
}

// the LM head's backward (lm_head_backward): the cross-entropy's gradient and the matmul backward in
// one, which reads the probabilities [BT,V] as they are (never writes dlogits) and targets [BT];
// counted as mm_bwd with dout = the probabilities
static void head_b(float* dinp, float* dW, float* probs, const int* targets, const float* inp, const float* W,
                   float* scratch, int BT, int C, int V, float logit_scale) {
    impl.lm_head_backward(dinp, dW, probs, targets, inp, W, scratch, BT, C, V, logit_scale);
    count(4.0 * BT * C * V, (double)BT * V + BT + (double)BT * C + (double)V * C + 2.0 * BT * C + 2.0 * V * C);
}

// the muP logit multiplier (model_forward scales the logits when it is not 1): reads and writes [BT,V]
static void logit_scale(float* x, long n, float s) {
    for (long i = 0; i < n; i++) x[i] *= s;
    count(0, 2.0 * n);
}

// embedding forward: reads tokens [BT], BT rows of wte [C] (a gather), wpe [T,C] (learned positions);
// writes out [BT,C]
static void emb_f(float* out, const int* tok, const float* wte, const float* wpe, int B, int T, int C) {
    embedding_forward(out, tok, wte, wpe, B, T, C);
    count(0, (double)B * T + 2.0 * B * T * C + (wpe ? (double)T * C : 0));
}

// embedding backward: reads dout [BT,C], tokens [BT]; accumulates BT rows of dwte (a scatter), dwpe [T,C]
static void emb_b(float* dwte, float* dwpe, const float* dout, const int* tok, int B, int T, int C) {
    embedding_backward(dwte, dwpe, dout, tok, B, T, C);
    count(0, (double)B * T * C + (double)B * T + 2.0 * B * T * C + (dwpe ? 2.0 * T * C : 0));
}

// memset: writes n floats
static void zero(float* x, long n) {
    memset(x, 0, (size_t)n * sizeof(float));
    count(0, (double)n);
}

// ---- the phases of one step: the calls of model_forward and model_backward, grouped -----------------
static Model* bench;          // the model full_step trains
static OptConfig opt;
static int opt_t;

#define STEP_SHAPES                                                                   \
    const Config* c = &m->cfg;                                                        \
    Acts* a = &m->a;                                                                  \
    int BT = B * T, C = c->C, H = c->H, KVH = c->KVH, hd = C / H, F = c->F, V = c->V; \
    int qd = H * hd, kvd = KVH * hd;                                                  \
    long rows = (long)m->B * m->T;                                                    \
    (void)BT; (void)C; (void)H; (void)KVH; (void)hd; (void)F; (void)V; (void)qd; (void)kvd; (void)a; (void)rows

// The matmuls in three phases, so that each kind of product has its own share of the FMA peak: the
// forward products of the blocks, their backward products (dinp and dW), and the LM head's two.
static void phase_mm_forward(Model* m, int B, int T) {
    STEP_SHAPES;
    for (int l = 0; l < c->L; l++) {
        LayerActs la = layer_acts(a, c, l, rows, m->T);
        mm_fwd(la.q, la.ln1, param_of(m, K_WQ, l), param_of(m, K_BQ, l), BT, C, qd);
        mm_fwd(la.k, la.ln1, param_of(m, K_WK, l), param_of(m, K_BK, l), BT, C, kvd);
        mm_fwd(la.v, la.ln1, param_of(m, K_WV, l), param_of(m, K_BV, l), BT, C, kvd);
        if (c->attn_gate) mm_fwd(la.attn_gate, la.ln1, param_of(m, K_ATTN_WG, l), param_of(m, K_ATTN_BG, l), BT, C, H);
        mm_fwd(a->proj, la.attn_out, param_of(m, K_WO, l), param_of(m, K_BO, l), BT, qd, C);
        mm_fwd(la.up, la.ln2, param_of(m, K_WUP, l), param_of(m, K_BUP, l), BT, C, F);
        if (c->swiglu) mm_fwd(la.mlp_gate, la.ln2, param_of(m, K_WGATE, l), param_of(m, K_BGATE, l), BT, C, F);
        mm_fwd(a->proj, la.hact, param_of(m, K_WDOWN, l), param_of(m, K_BDOWN, l), BT, F, C);
    }
}

static void phase_lm_head(Model* m, int B, int T) {
    STEP_SHAPES;
    const float* head = c->tied ? m->p[K_WTE] : m->p[K_LMHEAD];
    float* dhead = c->tied ? m->g[K_WTE] : m->g[K_LMHEAD];
    mm_fwd(a->logits, a->lnf, head, NULL, BT, C, V);
    head_b(a->dln, dhead, a->logits, m->targets, a->lnf, head, a->proj, BT, C, V, c->logit_scale);
}

static void phase_mm_backward(Model* m, int B, int T) {
    STEP_SHAPES;
    for (int l = c->L - 1; l >= 0; l--) {
        LayerActs la = layer_acts(a, c, l, rows, m->T);
        mm_bwd(a->dhact, grad_of(m, K_WDOWN, l), grad_of(m, K_BDOWN, l), a->dres, la.hact, param_of(m, K_WDOWN, l), BT, F, C);
        if (c->swiglu)
            mm_bwd(a->dln, grad_of(m, K_WGATE, l), grad_of(m, K_BGATE, l), a->dmlp_gate, la.ln2, param_of(m, K_WGATE, l), BT, C, F);
        mm_bwd(a->dln, grad_of(m, K_WUP, l), grad_of(m, K_BUP, l), a->dup, la.ln2, param_of(m, K_WUP, l), BT, C, F);
        mm_bwd(a->dyg, grad_of(m, K_WO, l), grad_of(m, K_BO, l), a->dres, la.attn_out, param_of(m, K_WO, l), BT, qd, C);
        if (c->attn_gate) mm_bwd(a->dln, grad_of(m, K_ATTN_WG, l), grad_of(m, K_ATTN_BG, l), a->dattn_gate, la.ln1, param_of(m, K_ATTN_WG, l), BT, C, H);
        mm_bwd(a->dln, grad_of(m, K_WQ, l), grad_of(m, K_BQ, l), a->dq, la.ln1, param_of(m, K_WQ, l), BT, C, qd);
        mm_bwd(a->dln, grad_of(m, K_WK, l), grad_of(m, K_BK, l), a->dk, la.ln1, param_of(m, K_WK, l), BT, C, kvd);
        mm_bwd(a->dln, grad_of(m, K_WV, l), grad_of(m, K_BV, l), a->dv, la.ln1, param_of(m, K_WV, l), BT, C, kvd);
    }
}

static void phase_attention(Model* m, int B, int T) {
    STEP_SHAPES;
    for (int l = 0; l < c->L; l++) {
        LayerActs la = layer_acts(a, c, l, rows, m->T);
        if (c->rope) {
            rope(la.q, a->rope_cs, B, T, H, hd, 1.0f);
            rope(la.k, a->rope_cs, B, T, KVH, hd, 1.0f);
        }
        att_fwd(la.yatt, la.att, la.q, la.k, la.v, B, T, H, KVH, hd, c->attn_scale);
    }
    for (int l = c->L - 1; l >= 0; l--) {
        LayerActs la = layer_acts(a, c, l, rows, m->T);
        att_bwd(a->dq, a->dk, a->dv, c->attn_gate ? a->dyatt : a->dyg, la.att, la.q, la.k, la.v, B, T, H, KVH, hd,
                c->attn_scale);
        if (c->rope) {
            rope(a->dq, a->rope_cs, B, T, H, hd, -1.0f);
            rope(a->dk, a->rope_cs, B, T, KVH, hd, -1.0f);
        }
    }
}

static void phase_norms(Model* m, int B, int T) {
    STEP_SHAPES;
    for (int l = 0; l < c->L; l++) {
        LayerActs la = layer_acts(a, c, l, rows, m->T);
        nrm_fwd(la.ln1, la.ln1_mean, la.ln1_rstd, la.x, param_of(m, K_LN1W, l), param_of(m, K_LN1B, l), c->rmsnorm, c->eps, BT, C);
        nrm_fwd(la.ln2, la.ln2_mean, la.ln2_rstd, la.xmid, param_of(m, K_LN2W, l), param_of(m, K_LN2B, l), c->rmsnorm, c->eps, BT, C);
    }
    float* xL = a->res + (long)c->L * rows * C;
    nrm_fwd(a->lnf, a->lnf_mean, a->lnf_rstd, xL, m->p[K_LNFW], m->p[K_LNFB], c->rmsnorm, c->eps, BT, C);
    nrm_bwd(a->dres, m->g[K_LNFW], m->g[K_LNFB], a->dln, xL, m->p[K_LNFW], a->lnf_mean, a->lnf_rstd, c->rmsnorm, BT, C);
    for (int l = c->L - 1; l >= 0; l--) {
        LayerActs la = layer_acts(a, c, l, rows, m->T);
        nrm_bwd(a->dres, grad_of(m, K_LN2W, l), grad_of(m, K_LN2B, l), a->dln, la.xmid, param_of(m, K_LN2W, l),
                la.ln2_mean, la.ln2_rstd, c->rmsnorm, BT, C);
        nrm_bwd(a->dres, grad_of(m, K_LN1W, l), grad_of(m, K_LN1B, l), a->dln, la.x, param_of(m, K_LN1W, l),
                la.ln1_mean, la.ln1_rstd, c->rmsnorm, BT, C);
    }
}

static void phase_act_resid(Model* m, int B, int T) {
    STEP_SHAPES;
    for (int l = 0; l < c->L; l++) {
        LayerActs la = layer_acts(a, c, l, rows, m->T);
        if (c->attn_gate) gate_f(la.attn_out, la.attn_gate, la.yatt, BT, H, hd);
        resid(la.xmid, la.x, a->proj, (long)BT * C);
        if (c->swiglu) swiglu_f(la.hact, la.mlp_gate, la.up, (long)BT * F);
        else gelu_f(la.hact, la.up, (long)BT * F);
        resid(la.xout, la.xmid, a->proj, (long)BT * C);
    }
    for (int l = c->L - 1; l >= 0; l--) {
        LayerActs la = layer_acts(a, c, l, rows, m->T);
        if (c->swiglu) swiglu_b(a->dmlp_gate, a->dup, la.mlp_gate, la.up, a->dhact, (long)BT * F);
        else gelu_b(a->dup, la.up, a->dhact, (long)BT * F);
        if (c->attn_gate) gate_b(a->dyatt, a->dattn_gate, a->dyg, la.yatt, la.attn_gate, BT, H, hd);
    }
}

// The logits buffer holds probabilities after a step: the softmax of them is as costly as that of the
// logits. The loss's backward is part of the LM head's (head_b, in the LM head phase).
static void phase_softmax_loss(Model* m, int B, int T) {
    STEP_SHAPES;
    if (c->logit_scale != 1.0f) logit_scale(a->logits, (long)BT * V, c->logit_scale);
    softmax_f(a->logits, a->losses, m->targets, BT, V);
}

static void phase_embeddings(Model* m, int B, int T) {
    STEP_SHAPES;
    emb_f(a->res, m->tokens, m->p[K_WTE], m->p[K_WPE], B, T, C);
    emb_b(m->g[K_WTE], m->g[K_WPE], a->dres, m->tokens, B, T, C);
}

static void phase_memsets(Model* m, int B, int T) {
    STEP_SHAPES;
    zero(a->dln, (long)BT * C);
    zero(a->dres, (long)BT * C);
    for (int l = c->L - 1; l >= 0; l--) {
        memcpy(a->dres, a->dres + (long)BT * C, (size_t)BT * C * sizeof(float));   // the residual path
        count(0, 2.0 * BT * C);
        zero(a->dhact, (long)BT * F);
        zero(a->dln, (long)BT * C);
        zero(a->dyg, (long)BT * qd);
        zero(a->dln, (long)BT * C);
        zero(a->dq, (long)BT * qd);
        zero(a->dk, (long)BT * kvd);
        zero(a->dv, (long)BT * kvd);
    }
}

// AdamW reads parameters, gradients and both moments and writes parameters and moments: 7 P floats;
// the gradient norm reads the gradients once more: P floats.
static void phase_optimizer(Model* m, int B, int T) {
    (void)B; (void)T;
    double norm = grad_norm(m);
    opt_t++;
    adamw_step(m, &opt, lr_at(&opt, opt_t - 1), opt_t, clip_scale(opt.clip, norm));
    if (counting) {
        counting->calls += 2;
        counting->bytes += 4.0 * 8.0 * (double)m->num_params;
    }
}

// writes P floats
static void phase_zero_grad(Model* m, int B, int T) {
    (void)B; (void)T;
    model_zero_grad(m);
    count(0, (double)m->num_params);
}

// ---- timing -----------------------------------------------------------------------------------------
static int cmp_double(const void* x, const void* y) {
    double a = *(const double*)x, b = *(const double*)y;
    return (a > b) - (a < b);
}

static double median(double* v, int n) {
    qsort(v, n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One full training step as train() runs it (compute_gradients: model_zero_grad, model_forward,
// model_backward; the gradient norm; AdamW with the trainer's clipping), in ms.
static double full_step(const int* inp, const int* tgt, int B, int T) {
    double t0 = now_ms();
    compute_gradients(bench, inp, tgt, B, T, 1);
    double norm = grad_norm(bench);
    opt_t++;
    adamw_step(bench, &opt, lr_at(&opt, opt_t - 1), opt_t, clip_scale(opt.clip, norm));
    return now_ms() - t0;
}

// GB/s of a[i] = b[i] + s c[i] over three arrays of mb MB each, all threads, best of 3
static double triad_bandwidth(long mb) {
    long n = mb * (1L << 20) / (long)sizeof(float);
    // zeroed_floats: the same 2 MB pages and parallel first touch as the model's buffers
    float *a = zeroed_floats((size_t)n), *b = zeroed_floats((size_t)n), *cc = zeroed_floats((size_t)n);
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) { b[i] = 1.0f; cc[i] = 2.0f; }
    double best = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        float s = 0.5f + rep;
        double t0 = now_ms();
        #pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++) a[i] = b[i] + s * cc[i];
        double gbs = 3.0 * n * sizeof(float) / ((now_ms() - t0) * 1e6);
        if (gbs > best) best = gbs;
    }
    volatile float sink = a[n / 2];
    (void)sink;
    free(a); free(b); free(cc);
    return best;
}

// ---- main ---------------------------------------------------------------------------------------------
int main(int argc, char** argv) {
    double peak = 0.0, bw = 0.0;
    long bw_mb = 512;
    int reps = 5;
    const char* name = NULL;
    char** rest = xmalloc((size_t)(argc + 1) * sizeof(char*));
    int nrest = 0;
    rest[nrest++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char* f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help"))
            printf("usage: dev/bench/phases [--peak GFLOPS] [--bw GBPS] [--bw-mb MB] [--reps N] [--name NAME] "
                   "[train_gpt2's model flags]\n(dev/bench/phases.c's opening comment; doc/bench_phases.md). "
                   "train_gpt2's flags:\n");
        int own = !strcmp(f, "--peak") || !strcmp(f, "--bw") || !strcmp(f, "--bw-mb") || !strcmp(f, "--reps") ||
                  !strcmp(f, "--name");
        if (!own) { rest[nrest++] = argv[i]; continue; }
        if (i + 1 >= argc) fatal("flag %s needs a value", f);
        const char* v = argv[++i];
        if (!strcmp(f, "--peak")) peak = parse_float(f, v, 0.0, 1e9);
        else if (!strcmp(f, "--bw")) bw = parse_float(f, v, 0.0, 1e9);
        else if (!strcmp(f, "--bw-mb")) bw_mb = parse_int(f, v, 1, 1 << 20);
        else if (!strcmp(f, "--reps")) reps = (int)parse_int(f, v, 1, 1000);
        else name = v;
    }
    rest[nrest] = NULL;
    Options o;
    parse_args(&o, nrest, rest);
    twins_install();
    free(rest);
    // the trainer's V: the shard's (-V) or 256 for byte text, its default data
    Config cfg = config_from_options(&o, o.V ? o.V : 256);
    int B = o.B, T = o.T;

    if (bw <= 0.0) {
        bw = triad_bandwidth(bw_mb);
        fprintf(stderr, "phases: memory bandwidth %.1f GB/s (triad, 3 x %ld MB, best of 3)\n", bw, bw_mb);
    }

    InitSpec spec;
    init_spec_from_options(&spec, &o);
    Model m;
    model_build(&m, &cfg);
    model_init(&m, &spec, (uint64_t)o.seed);
    acts_alloc(&m, B, T);
    bench = &m;
    opt = o.opt;
    opt.steps = 1000;

    // one batch of uniformly random token ids (as bench.py's synthetic shard); one real step fills
    // the activations and the gradients with the values a training step sees
    int *inp = xmalloc((size_t)B * T * sizeof(int)), *tgt = xmalloc((size_t)B * T * sizeof(int));
    Rng g;
    rng_seed(&g, (uint64_t)o.seed + 1);
    for (int i = 0; i < B * T; i++) {
        inp[i] = (int)(rng_u32(&g) % (uint32_t)cfg.V);
        tgt[i] = (int)(rng_u32(&g) % (uint32_t)cfg.V);
    }
    float loss = compute_gradients(&m, inp, tgt, B, T, 1);
    fprintf(stderr, "phases: first loss %.4f (ln V = %.4f)\n", loss, log((double)cfg.V));

    Phase ph[] = {{"matmuls forward", 0, 0, 0, 0}, {"LM head", 0, 0, 0, 0}, {"matmuls backward", 0, 0, 0, 0},
                  {"attention", 0, 0, 0, 0}, {"norms", 0, 0, 0, 0},
                  {"act+resid", 0, 0, 0, 0}, {"softmax+loss", 0, 0, 0, 0}, {"embeddings", 0, 0, 0, 0},
                  {"memsets", 0, 0, 0, 0}, {"optimizer", 0, 0, 0, 0}, {"zero grads", 0, 0, 0, 0}};
    void (*fns[])(Model*, int, int) = {phase_mm_forward, phase_lm_head, phase_mm_backward, phase_attention, phase_norms, phase_act_resid,
                                       phase_softmax_loss, phase_embeddings, phase_memsets, phase_optimizer,
                                       phase_zero_grad};
    const char* what[] = {
        "matmul_forward of every linear layer of the blocks",
        "the LM head: matmul_forward and lm_head_backward",
        "matmul_backward of every linear layer of the blocks: dinp, dW, dbias",
        cfg.rope ? "attention_forward + attention_backward, rope_apply" : "attention_forward + attention_backward",
        "norm_forward + norm_backward",
        cfg.swiglu ? "swiglu fwd/bwd, residual_forward" : "gelu fwd/bwd, residual_forward",
        "softmax_forward; its backward is lm_head_backward's, in the LM head row",
        "embedding_forward + embedding_backward",
        "memset of the activation gradients in model_backward",
        "grad_norm + adamw_step",
        "model_zero_grad",
    };
    int nph = (int)(sizeof(ph) / sizeof(ph[0]));
    enum { MATMUL_PHASES = 3 };   // the first three: forward, the LM head, backward
    // Rounds: each runs every phase once, then a full step, so that the machine's noise falls on the
    // phases and the step alike (as bench.py alternates the trainer and PyTorch). Round -1 is the
    // warm-up, untimed; it counts each phase's calls, FLOPs and bytes.
    double* ms = xmalloc((size_t)(nph + 1) * reps * sizeof(double));
    for (int r = -1; r < reps; r++) {
        for (int i = 0; i < nph; i++) {
            counting = r < 0 ? &ph[i] : NULL;
            double t0 = now_ms();
            fns[i](&m, B, T);
            if (r >= 0) ms[(size_t)i * reps + r] = now_ms() - t0;
        }
        counting = NULL;
        double t = full_step(inp, tgt, B, T);
        if (r >= 0) ms[(size_t)nph * reps + r] = t;
        if (r >= 0) fprintf(stderr, "phases: round %d/%d, full step %.2f ms\n", r + 1, reps, t);
    }
    for (int i = 0; i < nph; i++) ph[i].ms = median(ms + (size_t)i * reps, reps);
    double step = median(ms + (size_t)nph * reps, reps);

    // ---- the table ----
    double sum_ms = 0, sum_flops = 0, sum_bytes = 0, sum_roof = 0;
    for (int i = 0; i < nph; i++) sum_ms += ph[i].ms;
    printf("## Phases of one step: %s%s%s L%d C%d H%d V%d, B x T = %dx%d\n\n", name ? name : "", name ? ", " : "",
           o.preset, cfg.L, cfg.C, cfg.H, cfg.V, B, T);
    char peak_text[64];
    if (peak > 0) snprintf(peak_text, sizeof(peak_text), "%.1f GFLOP/s", peak);
    else snprintf(peak_text, sizeof(peak_text), "not given (roofline = memory time alone)");
    printf("%d threads; FMA peak %s; memory bandwidth %.1f GB/s (triad, read + written); "
           "median of %d rounds (every phase once, then a full step) after 1 warm-up round "
           "(dev/bench/phases, doc/bench_phases.md)\n\n",
           thread_count(), peak_text, bw, reps);
    printf("| phase | calls/step | ms/step | share | GFLOP | MB moved (min) | roofline ms | measured/roofline | bound by "
           "| %% of FMA peak |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|\n");
    // the FMA peak's share that a phase with FLOPs reaches: its FLOPs / its time / the peak
    char pct[32];
#define PEAK_SHARE(flops, ms_) \
    (peak > 0 && (flops) > 0 ? snprintf(pct, sizeof(pct), "%.1f%%", 100.0 * (flops) / ((ms_) * 1e6) / peak) \
                             : snprintf(pct, sizeof(pct), "-"), pct)
    double mm_ms = 0, mm_flops = 0;
    for (int i = 0; i < nph; i++) {
        const Phase* p = &ph[i];
        double t_c = peak > 0 ? p->flops / (peak * 1e9) * 1e3 : 0.0, t_m = p->bytes / (bw * 1e9) * 1e3;
        double roof = t_c > t_m ? t_c : t_m;
        sum_flops += p->flops;
        sum_bytes += p->bytes;
        sum_roof += roof;
        if (i < MATMUL_PHASES) mm_ms += p->ms, mm_flops += p->flops;
        printf("| %s (%s) | %d | %.2f | %.1f%% | %.2f | %.1f | %.3f | %.1fx | %s | %s |\n", p->name, what[i], p->calls,
               p->ms, 100.0 * p->ms / sum_ms, p->flops / 1e9, p->bytes / 1e6, roof, p->ms / roof,
               t_c > t_m ? "FLOPs" : "memory", PEAK_SHARE(p->flops, p->ms));
    }
    printf("| **the matmuls** (the three rows above together) | | **%.2f** | %.1f%% | %.2f | | | | | **%s** |\n", mm_ms,
           100.0 * mm_ms / sum_ms, mm_flops / 1e9, PEAK_SHARE(mm_flops, mm_ms));
    printf("| **sum of the phases** | | **%.2f** | 100%% | %.2f | %.1f | %.3f | %.1fx | | %s |\n", sum_ms, sum_flops / 1e9,
           sum_bytes / 1e6, sum_roof, sum_ms / sum_roof, PEAK_SHARE(sum_flops, sum_ms));
    printf("| **full step** (forward, backward, grad norm, AdamW) | | **%.2f** | %.1f%% of the sum | | | | %.1fx | | %s |\n",
           step, 100.0 * step / sum_ms, step / sum_roof, PEAK_SHARE(sum_flops, step));
#undef PEAK_SHARE
    printf("\nThe full step takes %.2f ms %s than the sum of its phases timed alone (%+.1f%%): %s.\n", fabs(step - sum_ms),
           step >= sum_ms ? "more" : "less", 100.0 * (step - sum_ms) / sum_ms,
           step >= sum_ms ? "what isolation misses: inside the step the kernels evict each other's data (weights, "
                            "activations, gradients), and a little work belongs to no phase here (the token copy, "
                            "the loss sum)"
                          : "inside the step a kernel often finds in cache what the kernel before it has just "
                            "written, while a phase timed alone reads every layer's buffers back from memory "
                            "(a gap of a few percent is within the noise)");
    free(ms);
    free(inp);
    free(tgt);
    model_free(&m);
    return 0;
}
