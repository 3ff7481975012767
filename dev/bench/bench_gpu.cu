/*
dev/bench/bench_gpu.cu: the GPU trainer's speed (make bench-gpu; doc/performance.md, GPU section).

    make bench-gpu                       # both models below; BENCH_GPU_ARGS="--steps 30" and so on

Two models: GPT-2 124M (L 12, C 768, H 12, vocabulary 50304 = GPT-2's padded to a multiple of 128,
T 1024, B 8) and the trainer's default (./train_gpt2 with no flags: L 4, C 128, H 4, byte vocabulary,
T 64, B 12). For each, on a GPU:
  - the step (forward, backward, gradient norm, AdamW, as the training loop runs it) timed over
    --steps steps after --warmup: ms/step and tokens/s;
  - MFU: the model's FLOPs per step (every GEMM's, forward and backward, plus attention's 4 hd per
    causal (query, key) pair forward and 8 backward; recomputation not counted) over the step time,
    against the device's peak MEASURED in the same run: an 8192^3 cublasSgemm in the same math mode
    (TF32 or float32), or an 8192^3 cublasGemmEx on bf16 inputs for --dtype bf16;
  - the same FLOPs over the sum of the step's GEMM times alone (how far the step is from "only
    GEMMs"), and the share of the step spent outside GEMMs;
  - a per-kernel table of one profiled step: every launch and cuBLAS call timed with CUDA events
    (train_gpt2.cu calls g_after_op after each), summed by name.
GPT-2 124M runs a second time with 8 micro-batches of B 8 per update (as -d 65536 trains): B 64's tokens
per AdamW step, the configuration of llm.c's single-GPU figures, in B 8's memory.
Without a GPU (or on the CPU runtime for CUDA) it says so and prints the analytic plan instead:
per kernel and step, the FLOPs and the bytes it must move (each input read once, each output
written once: the minimum, not what a cache-missing kernel moves), and the time each would take on
an H100 SXM at the datasheet's 3.35 TB/s HBM3 and 494.7 TFLOP/s dense TF32 / 989.4 TFLOP/s dense
bf16 tensor-core / 66.9 TFLOP/s float32 CUDA-core peaks: max(FLOPs / peak, bytes / bandwidth). The
plan is arithmetic on the model's shapes, not a measurement. It has two columns: float32 activations
with TF32 matmuls and attention (the default), and --dtype bf16 (bf16 GEMMs and tensor-core attention,
bf16 activations; the residual stream, its gradient, the logits, the master weights and the AdamW
state float32; doc/cuda.md, "bf16"). The measured path times the trainer as it is, in three
modes (bf16, TF32, float32).
*/
#define TRAIN_GPT2CU_NO_MAIN
#include "train_gpt2.cu"
#include <string>
#include <vector>

// ---- the analytic plan -----------------------------------------------------------------------------
#define H100_BW 3.35e12          // bytes/s, HBM3, H100 SXM datasheet
#define H100_TF32 494.7e12       // dense TF32 tensor-core FLOP/s
#define H100_BF16 989.4e12       // dense bf16 tensor-core FLOP/s
#define H100_FP32 66.9e12        // float32 CUDA-core FLOP/s (non-tensor)

// The two ways a step can run: float32 activations with TF32 matmuls and attention (the default), and
// --dtype bf16 (bf16 GEMMs and tensor-core attention, bf16 activations; float32 accumulators).
enum { MODE_TF32, MODE_BF16, NMODES };
static const char* mode_title[NMODES] = {"float32 activations, TF32 matmuls and attention (the default)",
                                         "--dtype bf16: bf16 GEMMs and attention on the tensor cores, bf16 "
                                         "activations, the residual stream and float32 accumulators"};
enum { OP_GEMM, OP_TC_ATTENTION, OP_CUDA_CORES };

typedef struct {
    char name[48];
    int launches;                // per step
    double flops;                // per step: the products (GEMMs, attention) or the kernel's arithmetic
    double ew_flops;             // the tensor-core attention's elementwise work (softmax), on CUDA cores
    double act_bytes;            // elements of activations (2 bytes each with --dtype bf16, 4 else)
    double f32_bytes;            // bytes that are float32 in every mode (the residual stream and its gradient,
                                 // the norms' summed input gradient, logits, losses, weights, AdamW state)
    int kind;                    // OP_*
    unsigned modes;              // the modes that run it (bit MODE_*)
} PlanOp;

static const unsigned ALL_MODES = (1u << NMODES) - 1, BF16_ONLY = 1u << MODE_BF16;

static void plan_add(std::vector<PlanOp>* ops, const char* name, int launches, double flops, double act_elems,
                     double f32_elems, int kind, unsigned modes = ALL_MODES, double ew_flops = 0) {
    for (PlanOp& o : *ops)
        if (strcmp(o.name, name) == 0) {
            o.launches += launches;
            o.flops += flops;
            o.ew_flops += ew_flops;
            o.act_bytes += act_elems;
            o.f32_bytes += 4 * f32_elems;
            return;
        }
    PlanOp o;
    snprintf(o.name, sizeof(o.name), "%s", name);
    o.launches = launches;
    o.flops = flops;
    o.ew_flops = ew_flops;
    o.act_bytes = act_elems;         // elements for now; times the element size when timed
    o.f32_bytes = 4 * f32_elems;
    o.kind = kind;
    o.modes = modes;
    ops->push_back(o);
}

// A matmul out[BT,OC] = inp[BT,IC] W[OC,IC]^T, forward and both backward products (weights read in the
// matmul's input precision, their gradient written in float32). The ends that are float32 in every mode
// (F32_*): the output (the logits, the gate's pre-activation), the input gradient (dln, which sums
// several products into a norm's backward: written, or with dinp_add read and written). Others are
// activations: the output gradient too (dres, the output projections', is read from its bf16 copy;
// their biases' gradients are summed by the norms' backward).
enum { F32_OUT = 1, F32_DINP = 2 };
static void plan_matmul(std::vector<PlanOp>* ops, double BT, double IC, double OC, int has_bias, int dinp_add,
                        unsigned f32) {
    double out = BT * OC, dinp = (dinp_add ? 2 : 1) * BT * IC;
    plan_add(ops, "gemm forward", 1, 2 * BT * IC * OC, BT * IC + IC * OC + (f32 & F32_OUT ? 0 : out),
             f32 & F32_OUT ? out : 0, OP_GEMM);
    plan_add(ops, "gemm backward dinp", 1, 2 * BT * IC * OC, BT * OC + IC * OC + (f32 & F32_DINP ? 0 : dinp),
             f32 & F32_DINP ? dinp : 0, OP_GEMM);
    plan_add(ops, "gemm backward dW", 1, 2 * BT * IC * OC, BT * OC + BT * IC, 2 * IC * OC, OP_GEMM);
    if (has_bias) plan_add(ops, "bias gradient (column sums)", 2, BT * OC, BT * OC, OC, OP_CUDA_CORES);
}

// Attention, forward and backward: 2 hd FLOPs per causal (query, key) pair for each product (forward:
// q.k and the weighted sum; query kernel: q.k, dy.v, dP k; key kernel: q.k and dy.v again, then dv and
// dk), reading q, k, v (and dy, y) once and writing y, lse (dq, D; dk, dv). On the tensor cores (TF32
// in the TF32 mode, bf16 in the other) for head sizes 16 to 64 in steps of 16, with about 8 float32
// operations per pair per kernel left on CUDA cores (scale, mask, maximum, exp, sums, dP, rounding; exp
// counted as one); on CUDA cores in float32 for other head sizes.
static void plan_attention(std::vector<PlanOp>* ops, double BT, double qd, double kvd, double H, double hd,
                           double pairs) {
    int tc = tensor_core_head_size((int)hd);
    const char* names[2][3] = {{"attention_forward", "attention_backward_query", "attention_backward_kv"},
                               {"attention_forward_tc", "attention_backward_query_tc", "attention_backward_kv_tc"}};
    double products[3] = {4 * hd * pairs, 6 * hd * pairs, 8 * hd * pairs};
    double acts[3] = {BT * (2 * qd + 2 * kvd), BT * (4 * qd + 2 * kvd), BT * (2 * qd + 4 * kvd)};
    double rows[3] = {BT * H, 2 * BT * H, 2 * BT * H};         // lse; D and lse
    for (int i = 0; i < 3; i++) {
        if (tc) plan_add(ops, names[1][i], 1, products[i], acts[i], rows[i], OP_TC_ATTENTION, ALL_MODES, 8 * pairs);
        else plan_add(ops, names[0][i], 1, products[i], acts[i], rows[i], OP_CUDA_CORES);
    }
}

// n norms' backward, all float32: dx (reads dln, x, dres; writes dres and, with --dtype bf16, its bf16
// copy for the GEMMs) with, in the same pass, the chunks' sums for the weights' gradients and the next
// output projection's bias gradient (3 slabs of NORM_ROWS-row partials, written; read by one finishing
// kernel each for the norm's weight, its bias (LayerNorm) and the projection's bias (with biases))
static void plan_norm_backward(std::vector<PlanOp>* ops, int n, double BT, double C, int norm_bias, int bias) {
    double slab = BT / NORM_ROWS * C, sums = 1 + norm_bias + bias;
    plan_add(ops, "norm_backward (+ param grads)", n * (1 + (int)sums), n * 15 * BT * C, 0,
             n * (4 * BT * C + 3 * slab + sums * (slab + C)), OP_CUDA_CORES);
    plan_add(ops, "norm_backward: dres's bf16 copy", 0, 0, 0, n * 0.5 * BT * C, OP_CUDA_CORES, BF16_ONLY);
}

// Every kernel of one forward and backward of train_gpt2.cu (gpu_forward, gpu_backward) on model c with
// batch B x T: what it computes and the least it must move. plan_update adds the update's.
static std::vector<PlanOp> plan_micro_batch(const Config* c, int B, int T) {
    std::vector<PlanOp> ops;
    double BT = (double)B * T, C = c->C, H = c->H, KVH = c->KVH, hd = C / H, F = c->F, V = c->V;
    double qd = H * hd, kvd = KVH * hd, pairs = (double)B * H * T * (T + 1) / 2;     // causal (query, key) pairs
    int bias = c->bias;
    // forward: the residual stream is float32, the norms' outputs activations
    plan_add(&ops, "embedding_forward", 1, BT * C, 0, 2 * BT * C, OP_CUDA_CORES);
    plan_add(&ops, "norm_forward (layer 0)", 1, 8 * BT * C, BT * C, BT * C, OP_CUDA_CORES);
    for (int l = 0; l < c->L; l++) {
        // the backward's order: the gate's product (if any) sets dln, then q, k, v add to it
        plan_matmul(&ops, BT, C, qd, bias, c->attn_gate, F32_DINP);
        plan_matmul(&ops, BT, C, kvd, bias, 1, F32_DINP);
        plan_matmul(&ops, BT, C, kvd, bias, 1, F32_DINP);
        // their biases: added by the tile loads of the attention (or by RoPE), at no bytes of their own
        if (c->rope) plan_add(&ops, "rope (forward and backward)", 4, 2 * 6 * BT * (qd + kvd) / 2,
                              4 * BT * (qd + kvd), 0, OP_CUDA_CORES);
        plan_attention(&ops, BT, qd, kvd, H, hd, pairs);
        if (c->attn_gate) {
            plan_matmul(&ops, BT, C, H, bias, 0, F32_OUT | F32_DINP);
            plan_add(&ops, "gate forward and backward", 2, 6 * BT * qd, 6 * BT * qd, 3 * BT * H, OP_CUDA_CORES);
        }
        plan_matmul(&ops, BT, qd, C, 0, 0, 0);
        // x + (branch + bias) into the float32 stream, then its norm (an activation), twice per layer
        plan_add(&ops, "residual_norm_forward", 2, 2 * 9 * BT * C, 2 * 2 * BT * C, 2 * 2 * BT * C, OP_CUDA_CORES);
        // W_up (and W_gate) without their bias gradients: the activation's backward sums them (its chunks'
        // float32 partials, written and read once by the finishing kernel); the forward adds the biases
        // as it reads x W^T, which is stored without them
        plan_matmul(&ops, BT, C, F, 0, c->swiglu, F32_DINP);    // SwiGLU's gate product sets dln first
        double bias_partials = bias ? 2 * (BT / ROWS_PER_CHUNK) * F : 0;
        if (c->swiglu) {
            plan_matmul(&ops, BT, C, F, 0, 0, F32_DINP);
            plan_add(&ops, "swiglu forward (+ biases)", 1, 8 * BT * F, 3 * BT * F, 0, OP_CUDA_CORES);
            plan_add(&ops, "swiglu backward (+ bias gradients)", 1 + 2 * bias, 12 * BT * F, 5 * BT * F,
                     2 * bias_partials, OP_CUDA_CORES);
        } else {
            plan_add(&ops, "gelu forward (+ bias)", 1, 12 * BT * F, 2 * BT * F, 0, OP_CUDA_CORES);
            plan_add(&ops, "gelu backward (+ bias gradient)", 1 + bias, 17 * BT * F, 3 * BT * F, bias_partials,
                     OP_CUDA_CORES);
        }
        plan_matmul(&ops, BT, F, C, 0, 0, 0);
        plan_norm_backward(&ops, 2, BT, C, !c->rmsnorm, bias);
    }
    // head: float32 logits, softmax + loss, backward (the logits' gradient an activation)
    plan_matmul(&ops, BT, C, V, 0, 0, F32_OUT | F32_DINP);
    // one kernel reads the float32 logits and writes their gradient (an activation: over the logits in
    // float32, into its own buffer in bf16), the probabilities never stored. It reads each row twice (the
    // maximum and the sum in one pass, then the gradient); counted once here, as the least it must move
    plan_add(&ops, "softmax_crossentropy (+ loss)", 1, 8 * BT * V, BT * V, BT * V, OP_CUDA_CORES);
    plan_norm_backward(&ops, 1, BT, C, !c->rmsnorm, bias);
    plan_add(&ops, "embedding_backward", c->rope ? 1 : 2, 2 * BT * C, 0, 4 * BT * C, OP_CUDA_CORES);
    return ops;
}

// The update's kernels, once per step whatever its batch or micro-batches (-d): zero the gradients, their
// norm, AdamW (float32 master weights and moments; with --dtype bf16 it also writes the weights' bf16 copy)
static void plan_update(std::vector<PlanOp>* ops, double P) {
    plan_add(ops, "memset (parameter gradients)", 1, 0, 0, P, OP_CUDA_CORES);
    plan_add(ops, "grad_norm", 2, 2 * P, 0, P, OP_CUDA_CORES);
    plan_add(ops, "adamw", 1, 15 * P, 0, 7 * P, OP_CUDA_CORES);
    plan_add(ops, "adamw: the weights' bf16 copy", 0, 0, 0, 0.5 * P, OP_CUDA_CORES, BF16_ONLY);
}

// One training step of P parameters on batch B x T: the forward and backward, then the update
static std::vector<PlanOp> plan_step(const Config* c, double P, int B, int T) {
    std::vector<PlanOp> ops = plan_micro_batch(c, B, T);
    plan_update(&ops, P);
    return ops;
}

// The model FLOPs of a step, for MFU: the GEMMs' and attention's 12 hd per causal pair per layer
static double model_flops(const Config* c, const std::vector<PlanOp>& ops, int B, int T) {
    double f = 0.0, hd = (double)c->C / c->H, pairs = (double)B * c->H * T * (T + 1) / 2;
    for (const PlanOp& o : ops)
        if (o.kind == OP_GEMM) f += o.flops;
    return f + c->L * 12 * hd * pairs;
}

static double op_bytes(const PlanOp& o, int m) { return o.act_bytes * (m == MODE_BF16 ? 2 : 4) + o.f32_bytes; }
static double tc_peak(int m) { return m == MODE_TF32 ? H100_TF32 : H100_BF16; }   // the mode's tensor-core peak

// The least time o can take in mode m (0 if the mode does not run it)
static double op_time(const PlanOp& o, int m) {
    if (!(o.modes >> m & 1)) return 0.0;
    double t = op_bytes(o, m) / H100_BW;
    if (o.kind == OP_GEMM) return fmax(t, o.flops / tc_peak(m));
    if (o.kind == OP_TC_ATTENTION) return fmax(t, fmax(o.flops / tc_peak(m), o.ew_flops / H100_FP32));
    return fmax(t, o.flops / H100_FP32);
}

// The plan's totals per mode: the step, its GEMMs and its tensor-core attention, in seconds
typedef struct { double tot[NMODES], gemm[NMODES], tc_att[NMODES]; } PlanTimes;
static PlanTimes plan_times(const std::vector<PlanOp>& ops) {
    PlanTimes t;
    memset(&t, 0, sizeof(t));
    for (const PlanOp& o : ops)
        for (int m = 0; m < NMODES; m++) {
            t.tot[m] += op_time(o, m);
            if (o.kind == OP_GEMM) t.gemm[m] += op_time(o, m);
            if (o.kind == OP_TC_ATTENTION) t.tc_att[m] += op_time(o, m);
        }
    return t;
}

static void print_plan(const char* title, const Config* c, double P, int B, int T) {
    std::vector<PlanOp> ops = plan_step(c, P, B, T);
    PlanTimes pt = plan_times(ops);
    const double *tot = pt.tot, *gemm = pt.gemm, *tc_att = pt.tc_att;
    double mflops = model_flops(c, ops, B, T);
    printf("\n%s: L %d, C %d, H %d, V %d, B %d, T %d, %.1fM parameters, %.0f tokens per step\n", title, c->L, c->C,
           c->H, c->V, B, T, P / 1e6, (double)B * T);
    printf("%-32s %8s %9s %9s %9s | %9s %9s %7s\n", "kernel (per step)", "launches", "GFLOP", "MB TF32", "MB bf16",
           "ms TF32", "ms bf16", "% bf16");
    for (const PlanOp& o : ops) {
        printf("%-32s %8d %9.2f %9.1f %9.1f |", o.name, o.launches, (o.flops + o.ew_flops) / 1e9,
               (o.modes & 1u << MODE_TF32 ? op_bytes(o, MODE_TF32) : 0) / 1e6,
               (o.modes & BF16_ONLY ? op_bytes(o, MODE_BF16) : 0) / 1e6);
        for (int m = 0; m < NMODES; m++)
            if (o.modes >> m & 1) printf(" %9.3f", 1e3 * op_time(o, m));
            else printf(" %9s", "-");
        printf(" %6.1f%%\n", 100 * op_time(o, MODE_BF16) / tot[MODE_BF16]);
    }
    printf("(MB and ms: the two modes below, in order)\n");
    for (int m = 0; m < NMODES; m++) {
        double rest = tot[m] - gemm[m] - tc_att[m];
        printf("%s:\n  %.2f ms/step at the peaks, %.0f tokens/s; GEMMs %.2f ms (%.0f%%), attention on the tensor cores "
               "%.2f ms (%.0f%%), the rest %.2f ms (%.0f%%); not GEMMs: %.0f%%; MFU at this bound %.0f%%\n",
               mode_title[m], 1e3 * tot[m], (double)B * T / tot[m], 1e3 * gemm[m], 100 * gemm[m] / tot[m],
               1e3 * tc_att[m], 100 * tc_att[m] / tot[m], 1e3 * rest, 100 * rest / tot[m],
               100 * (tot[m] - gemm[m]) / tot[m], 100 * mflops / tot[m] / tc_peak(m));
    }
}

// The plan's step at larger batches: the GEMMs and the per-token kernels grow with B, AdamW, the gradient
// norm and the gradients' memset do not. The last row is B 8 with 8 micro-batches per update (-d 65536
// at T 1024): the tokens of B 64 per update, in the memory of B 8. Beside each, the device memory the
// trainer would ask for (gpu_memory_need, the layout gpu_model_create allocates, in the mode's element
// size).
static void print_batch_sweep(const char* title, const Model* m, int T) {
    printf("\n%s at larger batches (T %d), at the same peaks; GiB: the device memory the trainer asks for "
           "(an H100 SXM has 80 GB); B x N: N micro-batches of B per update (-d):\n", title, T);
    printf("%7s |", "B x N");
    for (int md = 0; md < NMODES; md++) printf(" %9s %9s %9s %6s |", md == MODE_TF32 ? "TF32 ms" : "bf16 ms",
                                               "tokens/s", "not GEMMs", "GiB");
    printf("\n");
    std::vector<PlanOp> update;
    plan_update(&update, (double)m->num_params);
    PlanTimes up = plan_times(update);
    const int rows[][2] = {{8, 1}, {16, 1}, {32, 1}, {64, 1}, {8, 8}};
    for (const auto& row : rows) {
        int B = row[0], micro = row[1];
        PlanTimes mb = plan_times(plan_micro_batch(&m->cfg, B, T));
        printf("%2d x %-2d |", B, micro);
        for (int md = 0; md < NMODES; md++) {
            double tot = micro * mb.tot[md] + up.tot[md], gemm = micro * mb.gemm[md];
            g_bf16.on = md == MODE_BF16;         // the element size of gpu_acts_layout; nothing is allocated
            printf(" %9.2f %9.0f %8.0f%% %6.1f |", 1e3 * tot, (double)micro * B * T / tot, 100 * (tot - gemm) / tot,
                   gpu_memory_need(m, B, T) / (1 << 30));
        }
        printf("\n");
    }
    g_bf16.on = 0;
}

// ---- several GPUs: the gradients' exchange (train_gpt2.cu section 6) ------------------------------------------
#define NVLINK_BW 450e9          // bytes/s each way per GPU: H100 SXM, NVLink 4 (18 links of 25 GB/s)
#define IB_BW 50e9               // bytes/s each way per GPU: InfiniBand NDR, 400 Gb/s, one NIC per GPU

// The plan's time of a step's backward: its kernels named so (half of those that run both ways), for what an
// exchange beside the backward could hide
static double plan_backward(const std::vector<PlanOp>& ops, int m) {
    double t = 0.0;
    for (const PlanOp& o : ops)
        if (strstr(o.name, "backward") || strstr(o.name, "gradient"))
            t += op_time(o, m) * (strstr(o.name, "forward and backward") ? 0.5 : 1.0);
    return t;
}

// N GPUs, each with B rows (-b B) and the same model: per update, the ranks' float32 gradients averaged by a
// ring all-reduce, in which every GPU sends and receives 2 (N-1)/N of them; or under --zero 1 a reduce-scatter
// of the gradients and an all-gather of the float32 parameters, (N-1)/N each: the same bytes, and AdamW and
// the gradient norm over 1/N of the parameters. Over NVLink within a machine, over InfiniBand between
// machines (one GPU per machine: the slowest link of a ring). As built, the exchange starts after the
// last micro-batch's backward and AdamW waits for it: the step is compute + exchange. "Overlapped" is the
// bound if buckets of gradients were all-reduced while the backward still runs (as PyTorch's DDP does;
// not built): compute + what of the exchange the last backward cannot hide. Memory: --zero 1 keeps 1/N of
// AdamW's two moments per GPU.
static void print_data_parallel(const char* title, const Model* m, int B, int T) {
    double P = (double)m->num_params, S = 4 * P;
    printf("\n%s on N GPUs, -b %d each (T %d), at the same peaks: the gradients' exchange per update, %.0f MB of "
           "float32 gradients;\nring collectives at NVLink 4's %.0f GB/s or InfiniBand NDR's %.0f GB/s each way per "
           "GPU. ms: per update; tokens/s: all N GPUs; eff.: against N single GPUs.\n", title, B, T, S / 1e6,
           NVLINK_BW / 1e9, IB_BW / 1e9);
    std::vector<PlanOp> micro = plan_micro_batch(&m->cfg, B, T), update, update_z;
    PlanTimes mb = plan_times(micro);
    plan_update(&update, P);
    PlanTimes up = plan_times(update);
    for (int md = 0; md < NMODES; md++) {
        double one = mb.tot[md] + up.tot[md], bwd = plan_backward(micro, md);
        printf("%s: one GPU %.2f ms/step, %.0f tokens/s (backward %.2f ms)\n", mode_title[md], 1e3 * one, B * T / one,
               1e3 * bwd);
        printf("%3s %-10s %8s | %9s %9s %5s | %10s %9s %8s | %11s | %-21s %5s\n", "N", "link", "exchange", "ms",
               "tokens/s", "eff.", "--zero 1 ms", "tokens/s", "GiB less", "overlapped", "8 micro-batches: ms", "eff.");
        for (int N = 2; N <= 8; N *= 2)
            for (int link = 0; link < 2; link++) {
                double comm = 2.0 * (N - 1) / N * S / (link ? IB_BW : NVLINK_BW);
                // --zero 1: the memset of all the gradients, their norm and AdamW over 1/N of them
                std::vector<PlanOp> uz;
                plan_update(&uz, P / N);
                double zero_update = plan_times(uz).tot[md] + P * 4 / H100_BW * (N - 1) / N;
                double step = one + comm, step_z = mb.tot[md] + zero_update + comm;
                double overlapped = one + fmax(0.0, comm - bwd), acc = 8 * mb.tot[md] + up.tot[md] + comm;
                double saved = 2.0 * 4 * P * (N - 1) / N / (1 << 30);
                printf("%3d %-10s %8.2f | %9.2f %9.0f %4.0f%% | %10.2f %9.0f %8.2f | %11.0f | %9.2f %11.0f %4.0f%%\n", N,
                       link ? "InfiniBand" : "NVLink", 1e3 * comm, 1e3 * step, N * B * T / step, 100 * one / step,
                       1e3 * step_z, N * B * T / step_z, saved, N * B * T / overlapped, 1e3 * acc, 8.0 * N * B * T / acc,
                       100 * (8 * mb.tot[md] + up.tot[md]) / acc);
            }
    }
}

// ---- the models ----------------------------------------------------------------------------------
typedef struct { const char* title; Options o; int V; } BenchModel;

static int bench_models(BenchModel* m) {
    options_default(&m[0].o);
    m[0].title = "GPT-2 124M";
    m[0].o.L = 12; m[0].o.C = 768; m[0].o.H = 12; m[0].o.T = 1024; m[0].o.B = 8;
    m[0].V = 50304;
    options_default(&m[1].o);
    m[1].title = "the default model (./train_gpt2 with no flags)";
    m[1].V = 256;
    return 2;
}

static void build_model(Model* m, const BenchModel* bm) {
    Config cfg = config_from_options(&bm->o, bm->V);
    InitSpec spec;
    init_spec_from_options(&spec, &bm->o);
    model_build(m, &cfg);
    model_init(m, &spec, 1337);
}

// ---- the measured path (a GPU) -------------------------------------------------------------------------
#ifndef CUDA_CPU_RUNTIME
typedef struct { const char* name; cudaEvent_t ev; } Mark;
static std::vector<Mark> g_marks;
static void mark_after(const char* name) {
    Mark k = {name, NULL};
    cudaCheck(cudaEventCreate(&k.ev));
    cudaCheck(cudaEventRecord(k.ev));
    g_marks.push_back(k);
}

static double elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

// the device's matmul peak in the current math mode: an n^3 cublasSgemm, best of 5; with bf16, the
// trainer's bf16 GEMM (cublasGemmEx, bf16 inputs, float32 accumulation and output) on zeros read as bf16
static double measured_peak(int n, int bf16) {
    float *A = dmalloc((size_t)n * n), *B = dmalloc((size_t)n * n), *Cm = dmalloc((size_t)n * n);
    cudaCheck(cudaMemset(A, 0, (size_t)n * n * 4));
    cudaCheck(cudaMemset(B, 0, (size_t)n * n * 4));
    const float one = 1.0f, zero = 0.0f;
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    double best = 1e30;
    for (int r = 0; r < 6; r++) {
        cudaCheck(cudaEventRecord(e0));
        if (bf16)
            cublasCheck(cublasGemmEx(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, CUDA_R_16BF, n, B, CUDA_R_16BF,
                                     n, &zero, Cm, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        else
            cublasCheck(cublasSgemm(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, n, B, n, &zero, Cm, n));
        cudaCheck(cudaEventRecord(e1));
        cudaCheck(cudaEventSynchronize(e1));
        if (r > 0) best = fmin(best, elapsed_ms(e0, e1));        // the first warms up
    }
    cudaCheck(cudaFree(A)); cudaCheck(cudaFree(B)); cudaCheck(cudaFree(Cm));
    return 2.0 * n * n * n / (best / 1e3);
}

// bm's training step in the current mode, `micro` micro-batches of B x T per update as train() runs
// -d (micro 1: one batch per update), on the fast kernels or, with plain, on Part I's: ms/step,
// tokens/s, MFU, and the per-kernel table of one profiled step
static void bench_gpu(const BenchModel* bm, const char* mode, int warmup, int steps, double peak, int micro,
                      int plain) {
    Model host;
    build_model(&host, bm);
    int B = bm->o.B, T = bm->o.T, BT = B * T;
    GpuModel gm;
    PlainGpu pg;
    Engine e;
    if (plain) {
        plain_model_create(&pg, &host, B, T);
        e = plain_engine(&pg);
    } else {
        gpu_model_create(&gm, &host, B, T);
        e = gpu_engine(&gm);
    }
    OptConfig opt = bm->o.opt;
    opt.steps = warmup + steps;
    Rng g;
    rng_seed(&g, 7);
    int* inp = xmalloc((size_t)BT * sizeof(int));
    int* tgt = xmalloc((size_t)BT * sizeof(int));
    for (int i = 0; i < BT; i++) {
        inp[i] = (int)(rng_u32(&g) % (unsigned)bm->V);
        tgt[i] = (int)(rng_u32(&g) % (unsigned)bm->V);
    }
    // one step as train() runs it, through the Engine: the loss and the norm come back to the host
    auto step = [&](int s) {
        for (int mb = 0; mb < micro; mb++) {
            e.forward(e.ctx, inp, tgt, B, T);
            if (mb == 0) e.zero_grad(e.ctx);
            e.backward(e.ctx, B, T, 1.0f / micro);
        }
        double norm = e.grad_norm(e.ctx);
        e.update(e.ctx, &opt, lr_at(&opt, s), s + 1, clip_scale(opt.clip, norm));
    };
    for (int s = 0; s < warmup; s++) step(s);
    cudaCheck(cudaDeviceSynchronize());
    double t0 = now_ms();
    for (int s = 0; s < steps; s++) step(warmup + s);
    cudaCheck(cudaDeviceSynchronize());
    double ms = (now_ms() - t0) / steps;
    // one profiled step: an event after every launch, summed by name
    g_marks.clear();
    mark_after("start");
    g_after_op = mark_after;
    step(warmup + steps);
    g_after_op = NULL;
    cudaCheck(cudaDeviceSynchronize());
    struct Row { std::string name; int launches; double ms; };
    std::vector<Row> byname;
    double total = 0.0, gemm_ms = 0.0;
    for (size_t i = 1; i < g_marks.size(); i++) {
        double d = elapsed_ms(g_marks[i - 1].ev, g_marks[i].ev);
        total += d;
        if (!strncmp(g_marks[i].name, "gemm", 4) || !strncmp(g_marks[i].name, "matmul_", 7)) gemm_ms += d;
        size_t j = 0;
        while (j < byname.size() && byname[j].name != g_marks[i].name) j++;
        if (j == byname.size()) byname.push_back({g_marks[i].name, 0, 0.0});
        byname[j].launches++;
        byname[j].ms += d;
    }
    for (Mark& k : g_marks) cudaCheck(cudaEventDestroy(k.ev));
    std::vector<PlanOp> ops = plan_step(&host.cfg, (double)host.num_params, B, T);
    double flops = micro * model_flops(&host.cfg, ops, B, T);
    printf("\n%s, %s matmuls: B %d, T %d", bm->title, mode, B, T);
    if (micro > 1) printf(", %d micro-batches per update (-d %d)", micro, micro * BT);
    printf("\n  %.2f ms/step, %.0f tokens/s; %.2f model TFLOP per step: %.1f TFLOP/s, MFU %.1f%% of the "
           "measured peak %.1f TFLOP/s\n", ms, micro * BT / (ms / 1e3), flops / 1e12, flops / (ms / 1e3) / 1e12,
           100 * flops / (ms / 1e3) / peak, peak / 1e12);
    printf("  profiled step %.2f ms: GEMMs %.2f ms (%.0f%%), everything else %.2f ms (%.0f%%); the step at the "
           "GEMMs' speed alone would be %.0f%% of this one\n", total, gemm_ms, 100 * gemm_ms / total, total - gemm_ms,
           100 * (total - gemm_ms) / total, 100 * gemm_ms / total);
    printf("  %-40s %8s %10s %7s\n", "kernel", "launches", "ms", "%");
    for (const Row& e : byname)
        printf("  %-40s %8d %10.3f %6.1f%%\n", e.name.c_str(), e.launches, e.ms, 100 * e.ms / total);
    free(inp);
    free(tgt);
    if (plain) plain_model_free(&pg);
    else gpu_model_free(&gm);
    model_free(&host);
}
#endif

int main(int argc, char** argv) {
    int warmup = 5, steps = 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--warmup") == 0) warmup = (int)parse_int("--warmup", argv[i + 1], 0, 1000);
        else if (strcmp(argv[i], "--steps") == 0) steps = (int)parse_int("--steps", argv[i + 1], 1, 10000);
        else fatal("usage: %s [--warmup N] [--steps N]", argv[0]);
    }
    BenchModel bm[2];
    int n = bench_models(bm);
#ifdef CUDA_CPU_RUNTIME
    const char* why = "the CPU runtime for CUDA (dev/cuda_cpu) times nothing";
    (void)warmup;
    (void)steps;
#else
    const char* why = gpu_unavailable();
#endif
    if (why) {
        printf("no GPU: %s. The analytic plan instead (not a measurement):\n", why);
        printf("H100 SXM datasheet: %.2f TB/s HBM3, %.1f TFLOP/s dense TF32, %.1f TFLOP/s dense bf16 (tensor cores), "
               "%.1f TFLOP/s float32 (CUDA cores).\nPer kernel: time = max(FLOPs / peak, bytes / bandwidth); bytes = each "
               "input read once and each output written once; GEMMs and attention (head sizes 16-64) at the tensor-core\n"
               "peak of their mode (attention's softmax at the float32 peak); all else at the float32 peak.\n",
               H100_BW / 1e12, H100_TF32 / 1e12, H100_BF16 / 1e12, H100_FP32 / 1e12);
        for (int i = 0; i < n; i++) {
            Model m;
            Config cfg = config_from_options(&bm[i].o, bm[i].V);
            model_build(&m, &cfg);
            print_plan(bm[i].title, &m.cfg, (double)m.num_params, bm[i].o.B, bm[i].o.T);
            if (i == 0) print_batch_sweep(bm[i].title, &m, bm[i].o.T);
            if (i == 0) print_data_parallel(bm[i].title, &m, bm[i].o.B, bm[i].o.T);
            model_free(&m);
        }
        return 0;
    }
#ifndef CUDA_CPU_RUNTIME
    gpu_init(1);
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s\n", prop.name);
    // --dtype bf16, then float32 activations with TF32 and with float32 matmuls
    const char* modes[] = {"float32", "TF32", "bf16"};
    for (int mode = 2; mode >= 0; mode--) {
        gpu_set_tf32(mode == 1);
        gpu_set_dtype(mode == 2);
        double peak = measured_peak(8192, mode == 2);
        printf("\nmeasured peak: a 8192^3 %s, %s: %.1f TFLOP/s\n", mode == 2 ? "cublasGemmEx" : "cublasSgemm",
               modes[mode], peak / 1e12);
        for (int i = 0; i < n; i++) bench_gpu(&bm[i], modes[mode], warmup, steps, peak, 1, 0);
        bench_gpu(&bm[0], modes[mode], warmup, steps, peak, 8, 0);    // GPT-2 124M: B 64's tokens per update
    }
    // Part I's plain kernels (--kernels plain), float32, beside the fast ones above: a step or two each,
    // for they are slow (a thread per output element of every matmul)
    printf("\nPart I's plain kernels (--kernels plain): float32, one thread per output element or row\n");
    for (int i = 0; i < n; i++) bench_gpu(&bm[i], "plain float32 kernels", 1, 2, measured_peak(8192, 0), 1, 1);
    gpu_set_dtype(0);
    cublasCheck(cublasDestroy(g_blas));
#endif
    return 0;
}
