/*
test_gpt2.cu: proves train_gpt2.cu right against the same references as test_gpt2.c.

  0. Part I's plain kernels (--kernels plain), through the Engine the trainer uses, against the
     PyTorch fixtures at the float32 tolerance: loss, logits, every gradient, the AdamW steps whole
     and as 2 micro-batches.
  1. PyTorch fixtures (test/fixtures/model_*.bin, read by test/fixture.h, shared with test_gpt2.c):
     with TF32 off, the GPU's logits, loss, every parameter gradient and every parameter after the
     AdamW steps, at the CPU's float32 tolerance (1e-5 absolute + 1e-4 relative); gradients twice,
     bit for bit (the kernels are deterministic). With TF32 on, and with --dtype bf16, loss, logits
     and gradients at stated looser tolerances (TF32_*, BF16_* below, derived there).
  2. The CPU trainer (train_gpt2.c, in this process) and the GPU trainer, both initialized with
     the same seed (and the same nonzero biases), run 20 AdamW steps on the same batches; the first
     step's gradients must agree to 1e-5 relative L2 per tensor (float32; TF32 at its fixture bound),
     and the losses to 1e-4 relative at every step. The GPU state then goes through checkpoint_save,
     is loaded by the CPU model, and both continue one step on the same batch. Again with the GPU in
     --dtype bf16, at the bf16 bound (BF16_TRAIN_RTOL), and in TF32 (matmuls and attention;
     TF32_TRAIN_RTOL).
  2e. (full tier) The same comparison, 2 steps, at GPT-2's sizes: C 512, head size 64, 1,088 rows
     and 68.8M parameters, past the three thresholds where code paths change (TEST_SECTIONS=sizes).
  2b. The fused attention kernels alone against the CPU's reference loops, at head sizes 80 and 128
     and row lengths that leave every kind of tile partial; the tensor-core kernels (TF32 and
     --dtype bf16) likewise at head sizes 32, 48 and 64, each at a stated bound in its unit roundoff.
  2c. (CPU runtime) the device memory estimate covers what gpu_model_create allocates, within 5%.
  2d. Each fast kernel of Part II against the plain kernel of Part I it replaces, on the same device
     inputs of small shapes that leave blocks and tiles partial: every output and gradient (matmul,
     embedding, the norms and residual + norm, RoPE, attention, the gate, GELU, SwiGLU, softmax +
     cross-entropy and the LM head, the gradient norm, AdamW), in every precision mode the fast
     kernel has (float32, TF32, bf16), each at a stated bound (float32 rounding, or units of u), and
     the sign of bf16's rounding (to nearest, not toward zero).
  3. If ./train_gpt2 and ./train_gpt2cu exist: both binaries train 4 steps on the same synthetic
     corpus with the same flags; the logged losses must agree to 1e-4 relative, the probes and the
     samples too. The GPU binary with --kernels plain, fast --tf32 0 and the default, 20 steps of
     both presets: the same losses to the float32 bound (plain vs --tf32 0) and TF32's.
  4. The source as a tutorial: train_gpt2.cu's first kernel within 150 lines, Part I without wide
     lines or Part II's devices, the file under 5% of lines wider than 100 columns; and (CPU
     runtime) every kernel of train_gpt2.cu ran, under the race check, and none races.

    make test_gpt2cu && ./test_gpt2cu          (on a machine with an NVIDIA GPU)

The last line is "N passed, N failed"; the exit status is non-zero on any failure. Without a GPU
it prints one line, "skipped: no CUDA GPU found (...)", and exits with status 77 (the automake
convention for a skipped test): non-zero, because nothing was shown, but not a failure code.
*/
#include <vector>
#define TRAIN_GPT2CU_NO_MAIN
#include "train_gpt2.cu"
#include "test/fixture.h"
#include <signal.h>
#include <sys/wait.h>

// TF32 rounds matmul inputs to 10 mantissa bits (relative 2^-11 ~ 5e-4 per product), so with
// --tf32 1 elementwise float32 tolerances do not apply. Loss within 1e-3 relative; logits and every
// gradient within 1e-2 of the reference in the L2 norm, plus FX_ATOL per element (RMS) so that a
// reference that is zero passes on absolute terms: the key bias's gradient is exactly zero in exact
// arithmetic (softmax is shift-invariant), PyTorch's is rounding noise near 1e-17, and a relative
// error against that would fail on any GPU. Calibrated on the CPU runtime (TF32 rounding applied to
// the matmul inputs): the worst relative error there is 4e-3.
#define TF32_LOSS_RTOL 1e-3
#define TF32_REL_L2 1e-2
// --dtype bf16 rounds both inputs of every matmul to 8 significant bits: unit roundoff u = 2^-8 = 3.9e-3,
// 8 times TF32's 2^-11 (float32 accumulation in both). The error of a product of two rounded inputs is
// (d_a + d_b) a b with |d| <= u; over a dot product of length K with random signs the errors add like
// the terms (both grow as sqrt(K)), so one GEMM's output is off by about 0.6-0.8 u relative in the L2
// norm, whatever K (the sqrt(K) 2^-9 of the issue is against one term, not against the sum). Logits pass
// through about 9 such GEMMs in a row (2 layers of the fixtures, then the head): ~sqrt(9) 0.7 u = 2 u;
// gradients through about 20, forward and backward, and through the norms' and softmax's Jacobians,
// which amplify: TF32 measured them at worst 7.7 u_tf32 (3.8e-3). So the bounds are TF32's in units of
// u: relative L2 16 u_bf16 = 6.25e-2 (TF32_REL_L2 is 20 u_tf32), and the loss within u = 3.9e-3
// (d loss = mean over rows of (p - y) . d logits, a sum of random-sign terms: expected ~0.15 u here).
// --dtype bf16 also stores the activations and their gradients in bf16 (train_gpt2.cu section 2): each
// kernel's output is rounded once more (u/2), about as many roundings again as the GEMMs' inputs.
// Measured on the CPU runtime, which rounds exactly as the GPU does: logits 3.7 u (llama_gate), worst
// gradient 4.7e-2 (12.1 u; h.1.attn.wk of llama_gate), loss 7.9e-4 (0.20 u); with float32 activations
// (bf16 only at the GEMMs' inputs) they were 2.7 u, 8.6 u and 0.24 u. Not absurdly below: test_fixtures
// checks that bf16's worst error is 4 to 16 times TF32's (the ratio of their u is 8; measured 12.5), so a
// bf16 mode that silently did not round fails.
#define BF16_U 0.00390625
#define TF32_U 0.00048828125              // 2^-11
#define BF16_LOSS_RTOL BF16_U
#define BF16_REL_L2 (16 * BF16_U)
// The key bias's gradient, zero in exact arithmetic without RoPE (no fixture has RoPE and biases),
// against the k weight's gradient, in the mode's u:
// measured at most 0.58 u (bf16) and 0.00 u (TF32), on the CPU runtime
#define KEY_BIAS_U 4.0
// CPU vs GPU training: losses agree to this, relative, at every step (float32 matmuls)
// The fused kernels sum in other orders than the CPU (attention's online softmax rescales running
// sums tile by tile and recomputes probabilities as exp(score - lse); the gate's sums are warp
// trees). That is rounding only, so the float32 tolerances (FX_ATOL, FX_RTOL against the fixtures,
// these against the CPU) are unchanged: measured on the CPU runtime, the worst fixture difference is
// 2.4e-6 (llama_gate's logits) and the worst training-loss difference 7.1e-8 relative. TRAIN_RTOL is
// the fixtures' relative bound, FX_RTOL: a GPU's float32 GEMMs sum in other orders than the runtime's.
// The first step's gradients, per tensor, within GRAD_RTOL relative L2 (+ GRAD_ATOL per element, RMS,
// for b_k's, zero in exact arithmetic in the gpt2 model): measured 2e-7.
#define TRAIN_RTOL FX_RTOL
#define GRAD_RTOL 1e-5
#define GRAD_ATOL 1e-7
// two halves of a backward accumulated against the whole: float32 rounding of the sums only
#define ACCUM_RTOL 1e-6
// CPU (float32) vs GPU with --dtype bf16, the same 20 steps: losses are means over B T = 192 rows, so
// the rounding averages down further than in the fixtures' 14 rows (loss ~0.15 u there): u / 4 = 9.8e-4.
// Measured 4.1e-5 (gpt2) and 6.2e-5 (llama); a bf16 weight copy that AdamW does not refresh gives 0.59 (gpt2).
#define BF16_TRAIN_RTOL (BF16_U / 4)
// ... and with TF32 (the default --tf32 1: GEMMs and attention), likewise u / 4 in its u = 2^-11: 1.2e-4.
// Measured 1.1e-5 (gpt2) and 8.0e-6 (llama).
#define TF32_TRAIN_RTOL (TF32_U / 4)
// CPU vs GPU probes after the same training steps: every number of every probe line
#define PROBE_RTOL 1e-3
#define PROBE_ATOL 1e-6

static void gpu_download_grads(GpuModel* gm) {
    cudaCheck(cudaMemcpy(gm->host->grads, gm->grads, gm->host->num_params * sizeof(float), cudaMemcpyDeviceToHost));
}

// |got - want|_2 over n floats, and |want|_2 in *ref
static double l2_diff(const float* got, const float* want, size_t n, double* ref) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    *ref = sqrt(den);
    return sqrt(num);
}

// The TF32 and bf16 bound: |got - want|_2 <= rel |want|_2 + FX_ATOL sqrt(n). *err and *ref are
// |got - want|_2 and |want|_2, for the message.
static int l2_close(const float* got, const FixtureEntry* want, double rel, double* err, double* ref) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < want->count; i++) {
        double w = entry_at(want, i), d = got[i] - w;
        num += d * d;
        den += w * w;
    }
    *err = sqrt(num);
    *ref = sqrt(den);
    return *err <= rel * *ref + FX_ATOL * sqrt((double)want->count);   // false for NaN
}

// ---- 1. PyTorch fixtures ---------------------------------------------------------------------------
// The matmul modes of the tests: float32 (the CPU's tolerance, elementwise), TF32, bf16 (L2 bounds); the
// suffix each puts on a check's name
enum { MM_FP32, MM_TF32, MM_BF16 };
static const char* mm_suffix[] = {"", " tf32", " bf16"};
static double mm_u(int mode) { return mode == MM_BF16 ? BF16_U : TF32_U; }   // the unit roundoff of TF32 or bf16
static double g_worst_rel[3];             // the worst relative L2 error of any logits or gradient, per mode

static void test_gpu_fixture(const char* path, int mode) {
    Fixture fx;
    if (fixture_load(&fx, path) != 0) { check(0, "%s: cannot read the fixture", path); return; }
    int tf32 = mode == MM_TF32, loose = mode != MM_FP32;
    double rel = mode == MM_BF16 ? BF16_REL_L2 : TF32_REL_L2;
    double loss_rtol = mode == MM_BF16 ? BF16_LOSS_RTOL : TF32_LOSS_RTOL;
    char base[300];
    snprintf(base, sizeof(base), "%s%s", strrchr(path, '/') ? strrchr(path, '/') + 1 : path, mm_suffix[mode]);
    Model m;
    int B, T, *inp, *tgt;
    OptConfig o;
    fixture_model(&fx, base, &m, &B, &T, &inp, &tgt, &o);
    const Config c = m.cfg;
    int BT = B * T;
    gpu_set_tf32(tf32);
    gpu_set_dtype(mode == MM_BF16);
    GpuModel gm;
    gpu_model_create(&gm, &m, B, T);
    // forward: the loss, then the raw logits recomputed from the final norm's output (the
    // forward leaves probabilities in the logits buffer), as test_gpt2.c does
    float loss = gpu_forward(&gm, inp, tgt, B, T);
    double want_loss = entry_at(fixture_get(&fx, "loss"), 0);
    double loss_tol = loose ? loss_rtol * fabs(want_loss) : FX_ATOL + FX_RTOL * fabs(want_loss);
    check(fabs(loss - want_loss) <= loss_tol, "%s: GPU loss %.7f vs PyTorch %.7f", base, loss, want_loss);
    {
        float* dlogits = dmalloc((size_t)BT * c.V);
        float* logits = xmalloc((size_t)BT * c.V * sizeof(float));
        gpu_matmul_forward(dlogits, NULL, f32_of(gm.a.lnf), bf16_of(gm.a.lnf), c.tied ? gm.p[K_WTE] : gm.p[K_LMHEAD], BT, c.C, c.V);
        cudaCheck(cudaMemcpy(logits, dlogits, (size_t)BT * c.V * sizeof(float), cudaMemcpyDeviceToHost));
        for (long i = 0; i < (long)BT * c.V; i++) logits[i] *= c.logit_scale;     // muP's 1/width_mult
        FixtureEntry* want = fixture_get(&fx, "logits");
        if (loose) {
            double err, ref;
            int ok = l2_close(logits, want, rel, &err, &ref);
            g_worst_rel[mode] = fmax(g_worst_rel[mode], err / ref);
            check(ok, "%s: GPU logits within %s tolerance (L2 error %.2e, "
                  "reference's L2 norm %.2e)", base, tf32 ? "TF32" : "bf16", err, ref);
        } else {
            double worst, ratio = compare(logits, want, FX_ATOL, FX_RTOL, &worst);
            check(ratio <= 1.0, "%s: all %d x %d GPU logits within tolerance (worst diff %.2e)", base, BT, c.V, worst);
        }
        cudaCheck(cudaFree(dlogits));
        free(logits);
    }
    // backward: every gradient
    gpu_zero_grad(&gm);
    gpu_backward(&gm, B, T, 1.0f);
    gpu_download_grads(&gm);
    for (int i = 0; i < m.num_tensors; i++) {
        char key[160];
        snprintf(key, sizeof(key), "grad/%s", m.tensors[i].name);
        FixtureEntry* e = fixture_get(&fx, key);
        const float* got = m.grads + m.tensors[i].offset;
        if (loose) {
            double err = NAN, ref = NAN;
            int ok = e && l2_close(got, e, rel, &err, &ref);
            if (e && ref <= 1e-3 * sqrt((double)e->count) * FX_ATOL) {
                // the key bias's gradient: zero in exact arithmetic (its reference is ~1e-17), so what the GPU
                // gives is rounding and has no relative error. With bf16 activations it is the rounding of the
                // attention's output y read back by the backward (D = dy . y; train_gpt2.cu's gpu_backward),
                // which reaches dk like the other terms of the k weight's gradient: bounded by KEY_BIAS_U of
                // that gradient's reference
                char wkey[160];
                snprintf(wkey, sizeof(wkey), "grad/%s", m.tensors[i].name);
                char* bk = strstr(wkey, "attn.bk");
                FixtureEntry* w = bk ? (bk[5] = 'w', fixture_get(&fx, wkey)) : NULL;
                double wref = 0.0;
                for (size_t j = 0; w && j < w->count; j++) wref += entry_at(w, j) * entry_at(w, j);
                wref = sqrt(wref);
                ok = w && err <= KEY_BIAS_U * mm_u(mode) * wref;
                check(ok, "%s: GPU grad %-18s within %.0f u of the k weight's gradient (L2 %.2e = %.2f u of %.2e; its "
                      "reference is %.0e)", base, m.tensors[i].name, KEY_BIAS_U, err,
                      err / wref / mm_u(mode), wref, ref);
                continue;
            }
            if (ok) g_worst_rel[mode] = fmax(g_worst_rel[mode], err / ref);
            check(ok, "%s: GPU grad %-18s within %s tolerance (L2 error %.2e, "
                  "reference's %.2e)", base, m.tensors[i].name, tf32 ? "TF32" : "bf16", err, ref);
        } else {
            double worst, ratio = e ? compare(got, e, FX_ATOL, FX_RTOL, &worst) : INFINITY;
            check(ratio <= 1.0, "%s: GPU grad %-18s within tolerance (worst diff %.2e)", base, m.tensors[i].name,
                  e ? worst : NAN);
        }
    }
    {
        // The backward is linear in its seed, and halving is exact in float32, TF32 and bf16: dloss 0.5 (a
        // micro-batch's share with 2 per update, -d) gives exactly half of every gradient, in every mode
        float* full = xmalloc(m.num_params * sizeof(float));
        memcpy(full, m.grads, m.num_params * sizeof(float));
        gpu_forward(&gm, inp, tgt, B, T);
        gpu_zero_grad(&gm);
        gpu_backward(&gm, B, T, 0.5f);
        gpu_download_grads(&gm);
        size_t differ = 0;
        for (size_t i = 0; i < m.num_params; i++) differ += m.grads[i] != 0.5f * full[i];
        check(differ == 0, "%s: GPU backward with dloss 0.5 gives half of every gradient, bit for bit (%zu of %zu "
              "differ)", base, differ, m.num_params);
        // Accumulation (-d's second micro-batch): another dloss-0.5 backward added onto the first gives
        // every gradient of dloss 1, to the rounding of the sums that add their pieces onto what is
        // there (each tensor within ACCUM_RTOL relative L2; a backward that overwrote would be off by 1/2)
        gpu_forward(&gm, inp, tgt, B, T);
        gpu_backward(&gm, B, T, 0.5f);
        gpu_download_grads(&gm);
        double worst = 0.0;
        const char* worst_name = "";
        for (int i = 0; i < m.num_tensors; i++) {
            const Tensor* t = &m.tensors[i];
            double ref = 0.0, err = l2_diff(m.grads + t->offset, full + t->offset, t->numel, &ref);
            double r = err / (ACCUM_RTOL * ref + GRAD_ATOL * sqrt((double)t->numel));
            if (!(r <= worst)) worst = r, worst_name = t->name;
        }
        check(worst <= 1.0, "%s: a second backward with dloss 0.5 adds onto the first: every gradient within %.0e "
              "relative L2 of dloss 1's (worst %.2f of the bound, %s)", base, ACCUM_RTOL, worst, worst_name);
        memcpy(m.grads, full, m.num_params * sizeof(float));
        free(full);
    }
    if (!loose) {
        // determinism: the same forward and backward again give the same bits
        float* first = xmalloc(m.num_params * sizeof(float));
        memcpy(first, m.grads, m.num_params * sizeof(float));
        float loss2 = gpu_forward(&gm, inp, tgt, B, T);
        gpu_zero_grad(&gm);
        gpu_backward(&gm, B, T, 1.0f);
        gpu_download_grads(&gm);
        check(loss2 == loss && memcmp(first, m.grads, m.num_params * sizeof(float)) == 0,
              "%s: a second GPU forward/backward gives the same loss and gradients bit for bit", base);
        free(first);
        Engine e = gpu_engine(&gm);
        fixture_check_steps(&fx, base, "GPU: ", &m, &e, inp, tgt, B, T, &o, 1);
        // the same steps from the same start, each as 2 micro-batches of B/2 rows (gradient accumulation, -d)
        gpu_model_free(&gm);
        free(inp);
        free(tgt);
        model_free(&m);
        fixture_model(&fx, base, &m, &B, &T, &inp, &tgt, &o);
        gpu_model_create(&gm, &m, B, T);
        e = gpu_engine(&gm);
        fixture_check_steps(&fx, base, "GPU, 2 micro-batches: ", &m, &e, inp, tgt, B, T, &o, 2);
    }
    gpu_model_free(&gm);
    gpu_set_dtype(0);
    free(inp);
    free(tgt);
    model_free(&m);
    fixture_free(&fx);
}

// Part I's plain kernels (--kernels plain) against the fixture, through the Engine that the trainer uses:
// loss, logits, every gradient and the AdamW steps (whole and as 2 micro-batches) at the float32 bounds
static void test_plain_fixture(const char* path) {
    Fixture fx;
    if (fixture_load(&fx, path) != 0) { check(0, "%s: cannot read the fixture", path); return; }
    char base[300];
    snprintf(base, sizeof(base), "%s plain", strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
    for (int micro = 1; micro <= 2; micro++) {
        Model m;
        int B, T, *inp, *tgt;
        OptConfig o;
        fixture_model(&fx, base, &m, &B, &T, &inp, &tgt, &o);
        const Config c = m.cfg;
        int BT = B * T;
        PlainGpu pg;
        plain_model_create(&pg, &m, B, T);
        Engine e = plain_engine(&pg);
        if (micro == 1) {
            float loss = e.forward(e.ctx, inp, tgt, B, T);
            double want_loss = entry_at(fixture_get(&fx, "loss"), 0);
            check(fabs(loss - want_loss) <= FX_ATOL + FX_RTOL * fabs(want_loss), "%s: loss %.7f vs PyTorch %.7f",
                  base, loss, want_loss);
            // the raw logits, recomputed from the final norm's output (the forward left probabilities)
            float* dlogits;
            cudaCheck(cudaMalloc((void**)&dlogits, (size_t)BT * c.V * sizeof(float)));
            launch_matmul_forward(dlogits, pg.d.a.lnf, c.tied ? pg.d.p[K_WTE] : pg.d.p[K_LMHEAD], NULL, BT, c.C, c.V);
            float* logits = xmalloc((size_t)BT * c.V * sizeof(float));
            cudaCheck(cudaMemcpy(logits, dlogits, (size_t)BT * c.V * sizeof(float), cudaMemcpyDeviceToHost));
            for (long i = 0; i < (long)BT * c.V; i++) logits[i] *= c.logit_scale;
            double worst, ratio = compare(logits, fixture_get(&fx, "logits"), FX_ATOL, FX_RTOL, &worst);
            check(ratio <= 1.0, "%s: all %d x %d logits within tolerance (worst diff %.2e)", base, BT, c.V, worst);
            cudaCheck(cudaFree(dlogits));
            free(logits);
            e.zero_grad(e.ctx);
            e.backward(e.ctx, B, T, 1.0f);
            cudaCheck(cudaMemcpy(m.grads, pg.d.grads, m.num_params * sizeof(float), cudaMemcpyDeviceToHost));
            int bad = 0;
            double worst_all = 0.0;
            for (int i = 0; i < m.num_tensors; i++) {
                char key[160];
                snprintf(key, sizeof(key), "grad/%s", m.tensors[i].name);
                FixtureEntry* want = fixture_get(&fx, key);
                double w = 0.0;
                ratio = want ? compare(m.grads + m.tensors[i].offset, want, FX_ATOL, FX_RTOL, &w) : INFINITY;
                if (!(ratio <= 1.0)) printf("    %s: grad %s off by %.2e\n", base, m.tensors[i].name, w);
                bad += !(ratio <= 1.0);
                worst_all = fmax(worst_all, w);
            }
            check(bad == 0, "%s: all %d gradients within tolerance (worst diff %.2e)", base, m.num_tensors, worst_all);
        }
        fixture_check_steps(&fx, base, micro == 1 ? "" : "2 micro-batches: ", &m, &e, inp, tgt, B, T, &o, micro);
        plain_model_free(&pg);
        free(inp);
        free(tgt);
        model_free(&m);
    }
    fixture_free(&fx);
}

static const char* fixture_names[] = {"gpt2", "gpt2_gate", "llama", "llama_gate", "llama_mha", "mixed", "mup"};

static void test_plain_fixtures(void) {
    printf("PyTorch fixtures on Part I's plain kernels (--kernels plain), float32 tolerance\n");
    for (const char* name : fixture_names) {
        char path[256];
        snprintf(path, sizeof(path), "test/fixtures/model_%s.bin", name);
        test_plain_fixture(path);
    }
}

static void test_fixtures(void) {
    const char** names = fixture_names;
    const char* titles[] = {"float32 matmuls", "TF32 matmuls (looser tolerance)", "--dtype bf16 (bf16 bound)"};
    for (int mode = MM_FP32; mode <= MM_BF16; mode++) {
        printf("PyTorch fixtures on the GPU, %s\n", titles[mode]);
        for (size_t i = 0; i < sizeof(fixture_names) / sizeof(fixture_names[0]); i++) {
            char path[256];
            snprintf(path, sizeof(path), "test/fixtures/model_%s.bin", names[i]);
            test_gpu_fixture(path, mode);
        }
    }
    gpu_set_tf32(0);
    double ratio = g_worst_rel[MM_BF16] / g_worst_rel[MM_TF32];
    check(ratio >= 4 && ratio <= 16, "worst relative L2 error of logits and gradients: TF32 %.2e, bf16 %.2e (%.1f u): "
          "bf16's is %.1f times TF32's, between 4 and 16 (the ratio of their unit roundoffs is 8)", g_worst_rel[MM_TF32],
          g_worst_rel[MM_BF16], g_worst_rel[MM_BF16] / BF16_U, ratio);
}

// ---- 2. the CPU and the GPU trainer side by side -----------------------------------------------------
// A synthetic corpus with structure to learn: a byte sequence from a small random "grammar".
static void synthetic_dataset(Dataset* d, size_t n, uint64_t seed) {
    Rng g;
    rng_seed(&g, seed);
    d->n = n;
    d->is_shard = 0;
    d->tok = xmalloc(n * sizeof(uint16_t));
    const char* words[] = {"the ", "whale ", "sea ", "ship ", "call ", "me ", "ishmael ", "and ", "of ", "white "};
    size_t i = 0;
    while (i < n) {
        const char* w = words[rng_u32(&g) % 10];
        for (const char* p = w; *p && i < n; p++) d->tok[i++] = (uint16_t)(unsigned char)*p;
    }
}

// The small model of the trainer tests: L 2, C 64, H 4, a byte vocabulary, T positions, biases in both presets
static Config small_config(const char* preset, int gate, int KVH, int T) {
    Options op;
    options_default(&op);
    op.preset = preset;
    op.L = 2; op.C = 64; op.H = 4; op.KVH = KVH; op.T = T; op.gate = gate;
    op.bias = 1;        // llama too: then RoPE adds q's and k's biases and SwiGLU its two (train_gpt2.cu)
    return config_from_options(&op, 256);
}

// m built from c and initialized by GPT-2's scheme, seed 1337, then its biases (which that scheme zeroes)
// set to small nonzero values: every kernel that adds a bias, or sums its gradient, changes the losses
static void small_model(Model* m, const Config* c) {
    InitSpec spec;
    parse_init(&spec, "gpt2", -1.0);
    model_build(m, c);
    model_init(m, &spec, 1337);
    const int biases[] = {K_BQ, K_BK, K_BV, K_ATTN_BG, K_BO, K_BGATE, K_BUP, K_BDOWN};
    for (int kind : biases)
        for (size_t i = 0; m->p[kind] && i < (size_t)c->L * m->kind_numel[kind]; i++)
            m->p[kind][i] = 0.1f * sinf(0.7f * (float)i + (float)kind);
}

// Every gradient of the GPU's first backward against the CPU's: |got - want|_2 <= rtol |want|_2 +
// GRAD_ATOL sqrt(n) per tensor (the absolute part for b_k's, zero in exact arithmetic in gpt2), rtol
// GRAD_RTOL in float32 and the fixtures' TF32_REL_L2 in TF32 (not in bf16, where b_k's is a rounding
// remainder far above GRAD_ATOL: the fixtures bound it). Where the losses of whole runs barely move (a
// bias left out moves them by ~1e-5), the gradients of the tensor it touches move by far more.
static void check_first_gradients(const Model* cpu, GpuModel* gm, const char* name, double rtol) {
    gpu_download_grads(gm);                    // into the GPU's host model, beside the CPU model's
    const float* g = gm->host->grads;
    double worst = 0.0;
    const char* worst_name = "";
    int ok = 1;
    for (int i = 0; i < cpu->num_tensors; i++) {
        const Tensor* t = &cpu->tensors[i];
        double ref = 0.0, err = l2_diff(g + t->offset, cpu->grads + t->offset, t->numel, &ref);
        double bound = rtol * ref + GRAD_ATOL * sqrt((double)t->numel);
        ok &= err <= bound;                                                    // false for NaN
        if (err / bound > worst) {
            worst = err / bound;
            worst_name = t->name;
        }
    }
    check(ok, "%s: every gradient of the first step within %.0e relative L2 of the CPU's (worst: %.2f of its "
          "bound, %s)", name, rtol, worst, worst_name);
}

// Sampling's forward (no targets: softmax_forward_kernel) on the same batch: the GPU's probabilities,
// all B T rows, within rtol relative L2 of the CPU's (the mode's bound: sampling runs in every mode)
static void check_probabilities(Model* cpu, GpuModel* gm, const int* inp, int B, int T, const char* name,
                                double rtol) {
    size_t n = (size_t)B * T * cpu->cfg.V;
    model_forward(cpu, inp, NULL, B, T);
    gpu_forward(gm, inp, NULL, B, T);
    float* p = xmalloc(n * sizeof(float));
    cudaCheck(cudaMemcpy(p, gm->a.logits, n * sizeof(float), cudaMemcpyDeviceToHost));
    double ref = 0.0, err = l2_diff(p, cpu->a.logits, n, &ref);
    check(err <= rtol * ref, "%s: sampling's probabilities (no targets) within %.0e relative L2 of the CPU's "
          "(%.2e)", name, rtol, err / ref);
    free(p);
}

// Sampling under a recipe that changes the forward: muP multiplies the logits by 1/width_mult and
// q.k by 1/hd (mup_configure), and sampling's softmax (no targets) must apply both, in both presets
// and every mode. muP's readout starts at zero, which would make every row uniform whatever the
// scales; it gets small random values here, the same in both models.
static void test_sampling_recipes(void) {
    const int B = 2, T = 16;
    const char* presets[] = {"gpt2", "llama"};
    for (int pi = 0; pi < 2; pi++)
        for (int mode = MM_FP32; mode <= MM_BF16; mode++) {
            Options op;
            options_default(&op);
            op.preset = presets[pi];
            op.L = 2; op.C = 64; op.H = 4; op.T = T; op.tie = 0; op.init = "mup";
            Config cfg = config_from_options(&op, 256);
            InitSpec spec;
            init_spec_from_options(&spec, &op);
            Model cpu, host;
            Model* both[2] = {&cpu, &host};
            for (int k = 0; k < 2; k++) {
                model_build(both[k], &cfg);
                model_init(both[k], &spec, 11);
                Rng g;
                rng_seed(&g, 12);
                init_normal(&g, both[k]->p[K_LMHEAD], both[k]->kind_numel[K_LMHEAD], 0.0f, 0.5f);
            }
            gpu_set_dtype(mode == MM_BF16);
            gpu_set_tf32(mode == MM_TF32);
            acts_alloc(&cpu, B, T);
            GpuModel gm;
            gpu_model_create(&gm, &host, B, T);
            int inp[B * T];
            for (int i = 0; i < B * T; i++) inp[i] = (i * 37 + 5) % 256;
            char name[96];
            snprintf(name, sizeof(name), "%s -I mup (logits x %.2f)%s", presets[pi], (double)cpu.cfg.logit_scale,
                     mm_suffix[mode]);
            check_probabilities(&cpu, &gm, inp, B, T, name,
                                mode == MM_BF16 ? BF16_REL_L2 : mode == MM_TF32 ? TF32_REL_L2 : GRAD_RTOL);
            gpu_model_free(&gm);
            gpu_set_dtype(0);
            gpu_set_tf32(0);
            model_free(&cpu);
            model_free(&host);
        }
}

// The optimizer of the trainer comparisons: warmup, cosine, clipping at 1, weight decay
static OptConfig trainer_opt(int steps) {
    OptConfig o;
    memset(&o, 0, sizeof(o));
    o.lr = 2e-3f; o.lr_floor = 0.1f; o.warmup = 5; o.steps = steps; o.beta1 = 0.9f; o.beta2 = 0.95f;
    o.adam_eps = 1e-8f; o.weight_decay = 0.1f; o.clip = 1.0f;
    return o;
}

// The CPU and the GPU model of a trainer comparison, from the same weights (small_model), and the
// synthetic corpus and batch buffers both train on (seed: the corpus's; seed + 1: the batches')
typedef struct { Model cpu, host; GpuModel gm; Dataset ds; Rng data; int *inp, *tgt; } Trainers;
static void trainers_start(Trainers* t, const Config* c, int B, int T, uint64_t seed) {
    small_model(&t->cpu, c);
    small_model(&t->host, c);
    acts_alloc(&t->cpu, B, T);
    gpu_model_create(&t->gm, &t->host, B, T);
    synthetic_dataset(&t->ds, 20000, seed);
    rng_seed(&t->data, seed + 1);
    t->inp = xmalloc((size_t)B * T * sizeof(int));
    t->tgt = xmalloc((size_t)B * T * sizeof(int));
}
static void trainers_end(Trainers* t) {
    free(t->inp);
    free(t->tgt);
    free(t->ds.tok);
    gpu_model_free(&t->gm);
    model_free(&t->cpu);
    model_free(&t->host);
}

// One batch through the CPU model and the GPU model: the losses, the gradients and their norms
static void both_gradients(Model* cpu, GpuModel* gm, const int* inp, const int* tgt, int B, int T, float* lc,
                           float* lg, double* nc, double* ng) {
    *lc = model_forward(cpu, inp, tgt, B, T);
    model_zero_grad(cpu);
    model_backward(cpu, B, T, 1.0f);
    *nc = grad_norm(cpu);
    *lg = gpu_forward(gm, inp, tgt, B, T);
    gpu_zero_grad(gm);
    gpu_backward(gm, B, T, 1.0f);
    *ng = gpu_grad_norm(gm);
}

// AdamW step s (from 0) on both, the CPU's clipped by its norm nc, the GPU's on the device by its own
static void both_update(Model* cpu, GpuModel* gm, const OptConfig* o, int s, double nc) {
    float lr = lr_at(o, s);
    adamw_step(cpu, o, lr, s + 1, clip_scale(o->clip, nc));
    gpu_adamw_step(gm, o, lr, s + 1);
}

// T = 48: the attention kernels' blocks of 128 threads then have scores and outputs in more than
// one warp, so their cross-warp reductions and barriers are exercised (and race-checked).
static void test_cpu_vs_gpu(const char* preset, int gate, int KVH, int mode) {
    const int B = 4, T = 48, STEPS = 20;
    Config cfg = small_config(preset, gate, KVH, T);
    char name[96];
    snprintf(name, sizeof(name), "%s%s KVH=%d%s", preset, gate ? " gated" : "", cfg.KVH, mm_suffix[mode]);
    double rtol = mode == MM_BF16 ? BF16_TRAIN_RTOL : mode == MM_TF32 ? TF32_TRAIN_RTOL : TRAIN_RTOL;
    gpu_set_dtype(mode == MM_BF16);
    gpu_set_tf32(mode == MM_TF32);
    Trainers tr;
    trainers_start(&tr, &cfg, B, T, 5);
    Model &cpu = tr.cpu, &host = tr.host;
    GpuModel& gm = tr.gm;
    Dataset& ds = tr.ds;
    Rng& data = tr.data;
    int *inp = tr.inp, *tgt = tr.tgt;
    OptConfig o = trainer_opt(STEPS);
    double worst = 0.0, worst_norm = 0.0;
    float first_c = 0.0f, last_c = 0.0f;
    for (int s = 0; s < STEPS; s++) {
        dataset_random_batch(&ds, &data, inp, tgt, B, T);
        float lc, lg;
        double nc, ng;
        both_gradients(&cpu, &gm, inp, tgt, B, T, &lc, &lg, &nc, &ng);
        if (s == 0 && mode != MM_BF16)
            check_first_gradients(&cpu, &gm, name, mode == MM_TF32 ? TF32_REL_L2 : GRAD_RTOL);
        both_update(&cpu, &gm, &o, s, nc);
        worst = fmax(worst, fabs(lg - lc) / fabs(lc));
        worst_norm = fmax(worst_norm, fabs(ng - nc) / fmax(nc, 1e-30));
        if (isnan(lg) || isnan(lc)) worst = INFINITY;
        if (s == 0) first_c = lc;
        last_c = lc;
    }
    check(worst < rtol, "%s: %d training steps, GPU losses track the CPU's (worst relative diff %.2e; "
          "CPU loss %.4f -> %.4f; grad norms within %.2e)", name, STEPS, worst, first_c, last_c, worst_norm);
    check_probabilities(&cpu, &gm, inp, B, T, name,
                        mode == MM_BF16 ? BF16_REL_L2 : mode == MM_TF32 ? TF32_REL_L2 : GRAD_RTOL);
    // the GPU state through the shared checkpoint code into the CPU model; both take one more step
    char path[] = "/tmp/test_gpt2cu_ckpt.XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    gpu_download_state(&gm, 1);
    Ema spike[2] = {{0.5, 0.25, 3}, {1.5, 0.75, 3}}, spike_back[2];
    checkpoint_save(&host, path, STEPS, &data, &data, spike);
    Rng r1, r2;
    int step = checkpoint_load(&cpu, path, &r1, &r2, spike_back);
    unlink(path);
    dataset_random_batch(&ds, &data, inp, tgt, B, T);
    float lc = model_forward(&cpu, inp, tgt, B, T);
    float lg = gpu_forward(&gm, inp, tgt, B, T);
    check(step == STEPS && memcmp(cpu.params, host.params, host.num_params * sizeof(float)) == 0 &&
          fabs(lg - lc) < rtol * fabs(lc),
          "%s: a GPU checkpoint loads into the CPU model; next losses %.6f (CPU) %.6f (GPU)", name, lc, lg);
    trainers_end(&tr);
    gpu_set_dtype(0);
    gpu_set_tf32(0);
}

// ---- 2e. (full tier) the trainer at GPT-2's sizes ---------------------------------------------------------
// The other tests stay under C 80, 302 rows and 160K parameters, and three code paths change only past
// those, where GPT-2 124M trains: the wte gradient's grid takes a second column of blocks past C =
// EW_THREADS (256) channels; the loss's one-block mean (loss_mean_kernel, 1,024 threads) loops past 1,024
// rows; the gradient norm's one-block finish (grad_norm_finish_kernel, 1,024 threads) loops past 1,024
// chunks of NORM_CHUNK, i.e. past 67.1M parameters. One model reaches all three at the least cost: L 1,
// C 512, H 8 (GPT-2's head size, 64), F 512 (the MLP at 4 C would double the step's cost and change no
// code path), B 17 x T 64 = 1,088 rows, and 131,072 positions: wpe alone is then 67.1M parameters, which
// cost a step nothing but AdamW and the norm (the code under test; its rows past T get zero gradients),
// where a wide vocabulary would cost a [rows, V] head GEMM and softmax as well. The block puts wpe before
// the layers, so the chunks past 1,024 hold every layer's gradients. The CPU and the GPU (float32, --tf32 0)
// from the same weights take 2 steps on the same batches: every gradient of the first within GRAD_RTOL, the
// losses and norms of both within TRAIN_RTOL (measured 4e-8 and 0). The CPU runtime's race check is off
// here: it would copy the 1.1 GB of device memory three times at each kernel's first launch (the kernels
// are race-checked at the other tests' shapes). 147 s on 2 cores shared with 15 other jobs.
static void test_gpt2_sizes(void) {
    const int B = 17, T = 64, STEPS = 2;
    Options op;
    options_default(&op);
    op.L = 1; op.C = 512; op.H = 8; op.F = 512; op.T = T; op.maxT = 1 << 17; op.bias = 1;
    Config cfg = config_from_options(&op, 256);
    double t0 = now_ms();
#ifdef CUDA_CPU_RUNTIME
    long racecheck = cuda_cpu::racecheck_limit();
    cuda_cpu_set_racecheck(0);
#endif
    Trainers tr;
    trainers_start(&tr, &cfg, B, T, 7);
    size_t chunks = (tr.cpu.num_params + NORM_CHUNK - 1) / NORM_CHUNK;
    OptConfig o = trainer_opt(STEPS);
    double worst = 0.0, worst_norm = 0.0;
    char name[128];
    snprintf(name, sizeof(name), "L 1, C 512, H 8 (head size 64), %d rows, %.1fM parameters (%zu norm chunks)",
             B * T, tr.cpu.num_params / 1e6, chunks);
    for (int s = 0; s < STEPS; s++) {
        dataset_random_batch(&tr.ds, &tr.data, tr.inp, tr.tgt, B, T);
        float lc, lg;
        double nc, ng;
        both_gradients(&tr.cpu, &tr.gm, tr.inp, tr.tgt, B, T, &lc, &lg, &nc, &ng);
        if (s == 0) check_first_gradients(&tr.cpu, &tr.gm, name, GRAD_RTOL);
        both_update(&tr.cpu, &tr.gm, &o, s, nc);
        worst = fmax(worst, fabs(lg - lc) / fabs(lc));
        worst_norm = fmax(worst_norm, fabs(ng - nc) / nc);
        if (!(lg == lg) || !(ng == ng)) worst = INFINITY;
    }
    check(B * T > 1024 && cfg.C > EW_THREADS && chunks > 1024 && worst < TRAIN_RTOL && worst_norm < TRAIN_RTOL,
          "%s: %d steps, the GPU's losses and gradient norms those of the CPU (worst relative %.2e and %.2e, bound "
          "%.0e; %.0f s)", name, STEPS, worst, worst_norm, TRAIN_RTOL, (now_ms() - t0) / 1e3);
#ifdef CUDA_CPU_RUNTIME
    cuda_cpu_set_racecheck(racecheck);
#endif
    trainers_end(&tr);
}

// n activations between the host (float) and a device buffer that holds them in the run's type (bf16 values
// with --dtype bf16, rounded to nearest even on the way up; train_gpt2.cu section 2)
static void upload_act(float* d, const float* h, long n) {
    if (!g_bf16.on) {
        cudaCheck(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
        return;
    }
    __nv_bfloat16* h16 = xmalloc(n * sizeof(__nv_bfloat16));
    for (long i = 0; i < n; i++) h16[i] = __float2bfloat16(h[i]);
    cudaCheck(cudaMemcpy(d, h16, n * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
    free(h16);
}
static void download_act(float* h, const float* d, long n) {
    if (!g_bf16.on) {
        cudaCheck(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
        return;
    }
    __nv_bfloat16* h16 = xmalloc(n * sizeof(__nv_bfloat16));
    cudaCheck(cudaMemcpy(h16, d, n * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
    for (long i = 0; i < n; i++) h[i] = __bfloat162float(h16[i]);
    free(h16);
}

// ---- 2b. the fused attention against the CPU's reference loops ---------------------------------------
// The trainer tests use head sizes below 32 (one output column per lane) and T <= 48. Here the shapes
// reach what GPT-2 uses and beyond: head sizes 80 (lanes take columns lane, lane+32 and, for half of
// them, lane+64) and 128 (ATT_HD_MAX), T not a multiple of any tile (partial key, query and key-row
// tiles), grouped KV heads. y, dq, dk, dv against train_gpt2.c's definition (section 1's loops),
// float32 tolerance 1e-5 + 1e-4 |want|: the kernels sum the same terms in another order.
//
// The tensor-core kernels (head sizes 16..64) at 64 (GPT-2's), 48 and 32, with T spanning two or more
// blocks of query rows and partial tiles of 32, in both of their modes: --dtype bf16 (u = 2^-8) and TF32
// with float32 activations (--tf32 1, u = 2^-11). Their bound: q, k, v, dy and then the probabilities and
// dP are rounded (to bf16, or TF32) before each product, with float32 sums; with --dtype bf16 the inputs
// arrive in bf16 (rounded as they are uploaded here) and the outputs leave in bf16. Each output
// is a sum of products of two or three such rounded factors (y = A v with A from the rounded scores;
// dv = A^T dy; dq = dP k, dk = dP^T q with dP = A (dy.v - D) from rounded dy and v), so its error is a
// few u of the sum of |terms|, and over random signs about u relative in the L2 norm: bounded here by
// 2 u over the whole tensor and 8 u in its worst row (one position, every head), so that a bug confined
// to a few rows (a mask off by one at a tile's edge) is not averaged away. Measured: 0.49-0.98 u, and
// at most 2.7 u in a row, in both modes. 2 u is tight on purpose: TF32 operands that are not rounded
// (__float_to_tf32 skipped: the tensor cores then cut the low bits) give dq and dk 2.9-3.1 u. The error
// must also be at least u / 16: a kernel that did not round at all (the float32 path taken by mistake)
// is off by about 1e-7 and fails. The CUDA-core kernels with --dtype bf16 (hd 80) round only their inputs
// and outputs: within the same bounds.
static void test_attention_shape(int B, int T, int H, int KVH, int hd, int mode) {
    int qd = H * hd, kvd = KVH * hd;
    long nq = (long)B * T * qd, nkv = (long)B * T * kvd;
    float scale = 1.0f / sqrtf((float)hd);
    Rng g;
    rng_seed(&g, 42 + hd);
    float *q = xmalloc(nq * sizeof(float)), *dy = xmalloc(nq * sizeof(float));
    float *k = xmalloc(nkv * sizeof(float)), *v = xmalloc(nkv * sizeof(float));
    for (long i = 0; i < nq; i++) { q[i] = 2 * rng_uniform01_f32(&g) - 1; dy[i] = 2 * rng_uniform01_f32(&g) - 1; }
    for (long i = 0; i < nkv; i++) { k[i] = 2 * rng_uniform01_f32(&g) - 1; v[i] = 2 * rng_uniform01_f32(&g) - 1; }
    // the CPU's definition
    float *y = xcalloc(nq, sizeof(float)), *att = xcalloc((size_t)B * H * T * T, sizeof(float));
    float *dq = xcalloc(nq, sizeof(float)), *dk = xcalloc(nkv, sizeof(float)), *dv = xcalloc(nkv, sizeof(float));
    attention_forward(y, att, q, k, v, B, T, H, KVH, hd, scale);
    attention_backward(dq, dk, dv, dy, att, q, k, v, B, T, H, KVH, hd, scale);
    // the GPU's
    float *d_q = dmalloc(nq), *d_k = dmalloc(nkv), *d_v = dmalloc(nkv), *d_dy = dmalloc(nq), *d_y = dmalloc(nq);
    float *d_lse = dmalloc((size_t)B * H * T), *d_D = dmalloc((size_t)B * H * T);
    float *d_dq = dmalloc(nq), *d_dk = dmalloc(nkv), *d_dv = dmalloc(nkv);
    gpu_set_dtype(mode == MM_BF16);
    gpu_set_tf32(mode == MM_TF32);
    upload_act(d_q, q, nq);
    upload_act(d_dy, dy, nq);
    upload_act(d_k, k, nkv);
    upload_act(d_v, v, nkv);
    const char* path = attention_on_tensor_cores(hd) ? "tensor-core" : "fused";
    Qkv<float> in = {d_q, d_k, d_v, NULL, NULL, NULL};
    gpu_attention_forward(d_y, d_lse, in, B, T, H, KVH, hd, scale);
    gpu_attention_backward(d_dq, d_dk, d_dv, d_D, d_dy, d_y, d_lse, in, B, T, H, KVH, hd, scale);
    double u = mm_u(mode);
    const char* mode_name = mode == MM_BF16 ? "--dtype bf16" : "TF32";
    const char* names[4] = {"y", "dq", "dk", "dv"};
    const float* want[4] = {y, dq, dk, dv};
    float* got_d[4] = {d_y, d_dq, d_dk, d_dv};
    long n[4] = {nq, nq, nkv, nkv};
    for (int j = 0; j < 4; j++) {
        float* got = xmalloc(n[j] * sizeof(float));
        download_act(got, got_d[j], n[j]);
        // a row's error is relative to its norm, or to the RMS row norm where that is larger: dq's first rows are
        // nearly zero (row t = 0 exactly: dP[0,0] = A (dA - D) with A = 1 and D = dA), and there the kernel's
        // dA (from rounded dy and v) minus D (float32, dy . y) is all rounding
        long rows = (long)B * T, width = n[j] / rows;
        double worst = 0.0, err = 0.0, ref = 0.0, worst_row = 0.0;
        for (long i = 0; i < n[j]; i++) ref += (double)want[j][i] * want[j][i];
        int ok = 1;
        for (long row = 0; row < rows; row++) {
            double row_err = 0.0, row_ref = 0.0;
            for (long i = row * width; i < (row + 1) * width; i++) {
                double d = fabs((double)got[i] - want[j][i]);
                worst = fmax(worst, d);
                row_err += d * d;
                row_ref += (double)want[j][i] * want[j][i];
                if (!(d <= 1e-5 + 1e-4 * fabs(want[j][i]))) ok = 0;
            }
            err += row_err;
            worst_row = fmax(worst_row, sqrt(row_err / fmax(row_ref, ref / rows)));
        }
        double rel = sqrt(err / ref);
        if (mode != MM_FP32)
            check(rel <= 2 * u && rel >= u / 16 && worst_row <= 8 * u,
                  "%s attention B %d T %d H %d KVH %d hd %d, %s: %s within u/16 .. 2 u of the CPU's loops, "
                  "8 u in any row (relative L2 error %.2f u, worst row %.2f u)", path, B, T, H, KVH, hd, mode_name,
                  names[j], rel / u, worst_row / u);
        else
            check(ok, "%s attention B %d T %d H %d KVH %d hd %d: %s matches the CPU's loops (worst diff %.2e)", path, B,
                  T, H, KVH, hd, names[j], worst);
        free(got);
    }
    gpu_set_dtype(0);
    gpu_set_tf32(0);
    float* dbufs[] = {d_q, d_k, d_v, d_dy, d_y, d_lse, d_D, d_dq, d_dk, d_dv};
    for (float* p : dbufs) cudaCheck(cudaFree(p));
    free(q); free(dy); free(k); free(v); free(y); free(att); free(dq); free(dk); free(dv);
}

static void test_attention(void) {
    test_attention_shape(2, 70, 4, 2, 80, MM_FP32);
    test_attention_shape(1, 33, 2, 1, 128, MM_FP32);
    test_attention_shape(2, 70, 4, 2, 80, MM_BF16);
    for (int mode : {MM_BF16, MM_TF32}) {
        test_attention_shape(2, 150, 4, 2, 64, mode);
        test_attention_shape(1, 97, 3, 3, 48, mode);
        test_attention_shape(2, 40, 2, 1, 32, mode);
    }
}

// ---- 2c. the device memory estimate ---------------------------------------------------------------
// gpu_memory_check refuses a run from gpu_memory_need, the walk of the allocation list with a counter: it
// must cover what gpu_model_create allocates, within the 5% it adds, in float32 and in bf16, whose
// activations take 2 bytes. Only on the CPU runtime, which counts every byte a cudaMalloc takes (a GPU
// rounds allocations up to pages, and cuBLAS takes its workspace).
#ifdef CUDA_CPU_RUNTIME
static size_t device_used(void) {
    size_t free_bytes = 0, total = 0;
    cudaCheck(cudaMemGetInfo(&free_bytes, &total));
    return total - free_bytes;
}

static void test_memory_estimate(void) {
    const char* presets[] = {"gpt2", "llama"};
    for (const char* preset : presets) {
        const int B = 4, T = 48;
        Config cfg = small_config(preset, 1, 2, T);
        Model host;
        small_model(&host, &cfg);
        double acts[2];
        for (int bf16 = 0; bf16 <= 1; bf16++) {
            gpu_set_dtype(bf16);
            double need = gpu_memory_need(&host, B, T);
            size_t before = device_used();
            GpuModel gm;
            gpu_model_create(&gm, &host, B, T);
            double got = (double)(device_used() - before);
            gpu_model_free(&gm);
            acts[bf16] = need - 4.0 * host.num_params * sizeof(float);
            check(got >= need && got <= 1.05 * need, "%s, %s: gpu_model_create allocates %.0f bytes, the estimate is "
                  "%.0f (within 5%%: %+.2f%%)", preset, bf16 ? "bf16" : "float32", got, need, 100 * (got / need - 1));
        }
        gpu_set_dtype(0);
        // the residual stream, the logits and the gradients' accumulators stay float32, and bf16 adds dres's and
        // the logits' gradient's copies: less, not half
        check(acts[1] < acts[0], "%s: the activations take less device memory in bf16 than in float32 (%.0f%%)", preset,
              100 * acts[1] / acts[0]);
        model_free(&host);
    }
}
#endif

// ---- 2d. each fast kernel against the plain kernel it replaces ------------------------------------------
// Part II of train_gpt2.cu replaces each Part I kernel with a fast one (fused, tiled, in TF32 or bf16 where
// asked): the two engines train the same model only if every pair computes the same thing. Each pair runs here
// on the same device inputs, deterministic random values of small shapes that leave blocks and tiles partial:
// B T = 302 rows (2 mod 4, the rows of a row kernel's block; two chunks of the column sums' ROWS_PER_CHUNK = 256
// and 19 of the norm backward's 16, the last ones partial), C = 80, F = 4 C, H = 4 heads of 20 (the gate: 5 of
// 16, so that its B T H rows are 2 mod 4 too), V = 97 (below a softmax block of 128 threads), and the attention
// at T = 37 and 70 against its tiles of 8, 16, 32 and 64 rows, GQA and MHA. Every output and every gradient a
// fast wrapper writes is compared with the plain kernel's, in every precision mode the wrapper has: float32,
// TF32 (which changes only the GEMMs and the attention: the other fast kernels are float32 with --tf32 1 and
// are not run twice) and --dtype bf16 (activations stored in bf16: the plain kernels, float32 only, read the same
// bf16 values as float32, so that what is measured is the fast kernel's own rounding). Gradients that kernels
// add to start from the same random values on both sides, so that one that overwrites fails; one that should
// overwrite (GRAD_SET) starts from garbage.
//
// What the fast kernels fuse is compared as the plain model computes it. A fast GEMM does not add the bias: the
// kernel that reads its output does (RoPE, the attention's tile loads, the gate, the MLP's activation, the
// residual before a norm). So the GEMM's output is compared with the bias added on the host, and each reader's
// plain twin gets its input with the bias added on the host (in float32, as the fast kernel adds it). Bias
// gradients that a fast kernel sums where the plain model's matmul backward does (the MLP activation's, the
// norm backward's for the projection before the norm) are compared with launch_matmul_backward's.
//
// Each check bounds the relative L2 error |got - want|_2 / |want|_2 over the tensor and over its worst row (a
// row's norm floored at the RMS row norm, since a row that is zero in exact arithmetic holds rounding of the
// other rows' size), by the class of what differs between the two kernels:
//   F32    float32 on both sides, the same inputs, sums in other orders (warp trees, tiles, cuBLAS's blocking,
//          the online softmax, double sums): 64 u32 over the tensor and 256 u32 in a row, u32 = 2^-24. A
//          sequential float32 sum of K random-sign products is off by about u32 sqrt(K/2) relative (5.4 u32
//          measured at K = 320, the longest sum here; cuBLAS's blocked sums less): two orders, and the norms'
//          and the softmax's Jacobians, stay within a few times that. The CPU runtime's cuBLAS sums in the plain
//          kernels' order (their GEMMs measure 0 there); the other fast kernels sum in their own orders on any
//          device. Measured on the CPU runtime: at most 6.2 u32 (3.7e-7, LayerNorm's db) over a tensor and
//          16.8 u32 (1.0e-6, attention's dq at T 70) in a row.
//   ROUND  one rounding of a float32 result to bf16 (a bf16 output computed from the same inputs): at most u =
//          2^-8 of each element, so u over the tensor and in any row, plus F32's share. Measured: 0.48 u over a
//          tensor, 0.78 u in a row (dlogits).
//   MM     a TF32 or bf16 GEMM or attention against the float32 one, 2b's bound (derived there): inputs rounded
//          to u (TF32: both operands; bf16: the weights, and the attention's probabilities and dP) and, in bf16,
//          the output once more; the products' errors add with random signs: 2 u over the tensor, 8 u in a row,
//          and at least u/16, so that a mode that did not round (float32 by mistake: 1e-7) fails too. cuBLAS's
//          TF32 reads only the first 10 mantissa bits of each operand (truncation, which the CPU runtime's
//          round-to-nearest does not model): errors in [0, 2 u) that do not cancel, simulated at 1.40 u for
//          K = 80..320 against 0.53 u rounded, still within 2 u. Measured: GEMMs 0.38-0.61 u, rows at most
//          0.95 u; attention 0.29-1.25 u (dq, TF32), rows at most 2.81 u.
//   ACC    a bf16 GEMM whose two operands are the same bf16 values on both sides (dW = dout^T inp, both
//          activations): the products are exact in float32 and only the accumulation differs, which on the
//          tensor cores aligns each k-step's products and truncates (not IEEE): ~K/16 steps of 2^-23, 2.3e-6 at
//          K = 302. Bounded at u/64 = 6.1e-5 (4 times that in a row), far below the ~0.4 u of one extra
//          rounding (a dW rounded to bf16, or read from a rounded operand). Measured: 0 (the CPU runtime's
//          bf16 GEMM sums in the plain kernel's order).
// Deliberate bugs tried, each failing here (and reverted): in Part I, the bias dropped from matmul_forward_plain,
// the causal mask at s <= t + 1, eps dropped from norm_forward_plain (the norm rows span variances from 3e-7,
// under eps = 1e-5, to 0.3), RoPE's backward turning forward, the gate's g (1 - g) factor, AdamW's sqrt(1 - b2^t),
// the wte gradient written instead of added, mean(g) dropped from the LayerNorm backward, the target one off in
// crossentropy_backward_plain, SwiGLU's da and du swapped, a bias gradient missing its first row; in Part II,
// dev/cuda_cpu/mutants.sh's kernel mutants (transposed, causal-skip, grid, reduction, adamw-table, tc-rescale,
// tc-diagonal, tc-skip, tc-sync, syncthreads, classifier, tf32-round, norm-bias, gelu-bias, qkv-bias, rope-bias,
// accum-bf16, bf16-stale). Its mutants of the model's wiring (gpu_forward, gpu_backward, the Engine) are not
// kernels: sections 1 and 2 catch them.
#define FP32_U 5.9604644775390625e-08     // 2^-24
typedef struct {
    double rel, row, lo;                  // the bounds: relative L2 over the tensor, in the worst row; a floor
    double unit;                          // the unit the check line prints them in (1, or the mode's u)
    int cls;                              // F32, ROUND, MM, ACC: 0 .. 3
} PairBound;
static PairBound bound_f32(void) { return {64 * FP32_U, 256 * FP32_U, 0.0, 1.0, 0}; }
static PairBound bound_round(int mode) {  // an activation output: F32 in float32, one rounding with bf16
    if (mode != MM_BF16) return bound_f32();
    return {BF16_U + 64 * FP32_U, BF16_U + 256 * FP32_U, 0.0, BF16_U, 1};
}
static PairBound bound_mm(int mode) {
    if (mode == MM_FP32) return bound_f32();
    return {2 * mm_u(mode), 8 * mm_u(mode), mm_u(mode) / 16, mm_u(mode), 2};
}
static PairBound bound_acc(int mode) {    // dW: F32 in float32, MM in TF32 (both inputs rounded), ACC in bf16
    if (mode != MM_BF16) return bound_mm(mode);
    return {BF16_U / 64, 4 * BF16_U / 64, 0.0, BF16_U, 3};
}
static const char* pair_mode_name[] = {"float32", "TF32", "bf16"};
static double g_pair_worst[4][2];         // per class: the worst relative L2 over a tensor and in a row (in its unit)
// ROUND's errors have a sign too. Rounding to nearest (even) errs up as often as down, so over a tensor the
// mean of the elements' signed relative errors (got - want) / want is noise, about 0.4 u / sqrt(n); rounding
// by truncation (toward zero, say a conversion that keeps the top 16 bits) errs toward zero every time, -0.7 u
// on average, while its L2 error, about twice round-to-nearest's, passes ROUND's bounds or fails them by 1.6
// times at most (and a trainer bound by 1.1). Each element counts alike: weighted by |want|, dlogits' 302
// target entries, all near -1/(B T) and so rounded alike, would hold half the weight (0.11 u measured). An
// element whose reference is a cancellation's remainder has no meaningful relative error: each is clipped to
// 2 u, the most that truncation gives. Bounded at u/16 in every ROUND check of bf16; the worst, and where:
#define ROUND_BIAS_U (1.0 / 16)
static double g_round_bias;
static char g_round_bias_at[96];

// The buffers of one pair test: allocated through these, freed by pair_free
static std::vector<void*> g_pair_dev, g_pair_host;
static float* pair_host(long n) {
    float* p = (float*)xmalloc((size_t)n * sizeof(float));
    g_pair_host.push_back(p);
    return p;
}
static float* pair_dev(long n) {          // n floats: room for n activations in either type
    float* p = dmalloc((size_t)n);
    g_pair_dev.push_back(p);
    return p;
}
static void pair_free(void) {
    for (void* p : g_pair_dev) cudaCheck(cudaFree(p));
    for (void* p : g_pair_host) free(p);
    g_pair_dev.clear();
    g_pair_host.clear();
    g_bf16.params = NULL;                 // pair_weights' block, if any
    g_bf16.w16 = NULL;
    g_bf16.n = 0;
}
static void pair_mode(int mode) {
    gpu_set_tf32(mode == MM_TF32);
    gpu_set_dtype(mode == MM_BF16);
}
// n uniform values in [lo, hi)
static float* pair_rand(Rng* g, long n, float lo, float hi) {
    float* h = pair_host(n);
    for (long i = 0; i < n; i++) h[i] = lo + (hi - lo) * rng_uniform01_f32(g);
    return h;
}
// activations as the fast kernels hold them: rounded to bf16 (in place) with --dtype bf16, so that both kernels
// read the same values
static float* pair_act_values(float* h, long n) {
    if (g_bf16.on)
        for (long i = 0; i < n; i++) h[i] = __bfloat162float(__float2bfloat16(h[i]));
    return h;
}
static float* up_f32(const float* h, long n) {            // a float32 device copy
    float* d = pair_dev(n);
    cudaCheck(cudaMemcpy(d, h, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}
static float* up_act(const float* h, long n) {            // an activation buffer of the mode's type
    float* d = pair_dev(n);
    upload_act(d, h, n);
    return d;
}
static float* down_f32(const float* d, long n) {
    float* h = pair_host(n);
    cudaCheck(cudaMemcpy(h, d, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}
static float* down_act(const float* d, long n) {
    float* h = pair_host(n);
    download_act(h, d, n);
    return h;
}
// x + bias[i % width]: a GEMM's output with its bias, in float32 as the fast kernels add it
static float* plus_bias(const float* x, const float* bias, long n, long width) {
    float* h = pair_host(n);
    for (long i = 0; i < n; i++) h[i] = x[i] + bias[i % width];
    return h;
}
// A GEMM's weights: with --dtype bf16 the fast GEMMs read the bf16 copy of the parameter block (bf16_weight),
// which gpu_model_create makes; a block of their own, with its copy, stands in for it (one per test)
static float* pair_weights(const float* h, long n) {
    float* d = up_f32(h, n);
    if (g_bf16.on) {
        g_bf16.params = d;
        g_bf16.n = (size_t)n;
        g_bf16.w16 = (__nv_bfloat16*)pair_dev(n);
        bf16_round(g_bf16.w16, d, n);
    }
    return d;
}
// the plain model's bias gradient of a projection with output gradient dout [rows, OC]: matmul_backward_weight_plain
// (the thread of column 0 of each output), through launch_matmul_backward with an input of one column of zeros
static void plain_bias_grad(float* dbias, const float* dout, int rows, int OC) {
    float *zin = pair_dev(rows), *zw = pair_dev(OC), *dzin = pair_dev(rows), *dzw = pair_dev(OC);
    cudaCheck(cudaMemset(zin, 0, (size_t)rows * sizeof(float)));
    cudaCheck(cudaMemset(zw, 0, (size_t)OC * sizeof(float)));
    cudaCheck(cudaMemset(dzin, 0, (size_t)rows * sizeof(float)));
    cudaCheck(cudaMemset(dzw, 0, (size_t)OC * sizeof(float)));
    launch_matmul_backward(dzin, dzw, dbias, dout, zin, zw, rows, 1, OC);
}

// One comparison, one check line: the fast kernel's `what` (got) against the plain kernel's (want), n values in
// rows of `width`, within bound b
static void pair_check(const char* layer, int mode, const char* what, const float* got, const float* want, long n,
                       long width, PairBound b) {
    long rows = n / width;
    double err = 0.0, ref = 0.0, worst_row = 0.0;
    for (long i = 0; i < n; i++) ref += (double)want[i] * want[i];
    for (long r = 0; r < rows; r++) {
        double re = 0.0, rr = 0.0;
        for (long i = r * width; i < (r + 1) * width; i++) {
            double d = (double)got[i] - want[i];
            re += d * d;
            rr += (double)want[i] * want[i];
        }
        err += re;
        double row = sqrt(re / fmax(rr, ref / rows));
        if (!(row <= worst_row)) worst_row = row;          // NaN sticks
    }
    double rel = ref > 0 ? sqrt(err / ref) : sqrt(err);
    double* w = g_pair_worst[b.cls];
    if (!(rel / b.unit <= w[0])) w[0] = rel / b.unit;
    if (!(worst_row / b.unit <= w[1])) w[1] = worst_row / b.unit;
    int ok = rel <= b.rel && worst_row <= b.row && rel >= b.lo;
    char what_mode[96];
    snprintf(what_mode, sizeof(what_mode), "%s, %s", layer, pair_mode_name[mode]);
    if (b.cls == 1) {
        double signed_err = 0.0;
        long nonzero = 0;
        for (long i = 0; i < n; i++)
            if (want[i] != 0) {
                double r = ((double)got[i] - want[i]) / want[i];
                signed_err += fmax(-2 * b.unit, fmin(2 * b.unit, r));
                nonzero++;
            }
        double bias = nonzero ? fabs(signed_err / nonzero) / b.unit : 0.0;
        if (!(bias <= g_round_bias)) {
            g_round_bias = bias;
            snprintf(g_round_bias_at, sizeof(g_round_bias_at), "%s %s", layer, what);
        }
    }
    if (b.unit == 1.0)
        check(ok, "%-42s %-10s rel. L2 %.1e (bound %.1e), worst row %.1e (%.1e)", what_mode, what, rel, b.rel,
              worst_row, b.row);
    else
        check(ok, "%-42s %-10s rel. L2 %.3f u (bound %s%.3g u), worst row %.3f u (%.3g u)", what_mode, what,
              rel / b.unit, b.lo > 0 ? "1/16 .. " : "", b.rel / b.unit, worst_row / b.unit, b.row / b.unit);
}
// the same with got on the device (an activation when act, else float32) and want on the device (float32)
static void pair_check_dev(const char* layer, int mode, const char* what, const float* got_d, int act,
                           const float* want_d, long n, long width, PairBound b) {
    const float* got = act ? down_act(got_d, n) : down_f32(got_d, n);
    pair_check(layer, mode, what, got, down_f32(want_d, n), n, width, b);
}

#define PAIR_B 2
#define PAIR_T 151                        // B T = 302 rows: 2 mod 4, the rows of a row kernel's block
#define PAIR_C 80
#define PAIR_H 4
#define PAIR_V 97

// ---- matmul: gpu_matmul_forward / gpu_matmul_backward (cuBLAS) vs launch_matmul_forward / _backward
static void pair_matmul(int mode) {
    const int BT = PAIR_B * PAIR_T, C = PAIR_C, OC = 4 * PAIR_C;
    pair_mode(mode);
    Rng g;
    rng_seed(&g, 101);
    float* inp = pair_act_values(pair_rand(&g, (long)BT * C, -1, 1), (long)BT * C);
    float* W = pair_rand(&g, (long)OC * C, -1, 1);
    float* bias = pair_rand(&g, OC, -1, 1);
    float* dout = pair_act_values(pair_rand(&g, (long)BT * OC, -1, 1), (long)BT * OC);
    float *dinp0 = pair_rand(&g, (long)BT * C, -1, 1), *dW0 = pair_rand(&g, (long)OC * C, -1, 1);
    float* db0 = pair_rand(&g, OC, -1, 1);
    float *d_W = pair_weights(W, (long)OC * C), *d_bias = up_f32(bias, OC), *scratch = pair_dev(1 << 16);
    float *inp_f = up_f32(inp, (long)BT * C), *inp_a = up_act(inp, (long)BT * C);
    float *dout_f = up_f32(dout, (long)BT * OC), *dout_a = up_act(dout, (long)BT * OC);
    // forward: the plain kernel adds the bias, the GEMM leaves it to its reader (added here on the host)
    float *out_p = pair_dev((long)BT * OC), *out_a = pair_dev((long)BT * OC);
    launch_matmul_forward(out_p, inp_f, d_W, d_bias, BT, C, OC);
    gpu_matmul_forward(f32_of(out_a), bf16_of(out_a), f32_of(inp_a), bf16_of(inp_a), d_W, BT, C, OC);
    pair_check("matmul forward", mode, "out+bias", plus_bias(down_act(out_a, (long)BT * OC), bias, (long)BT * OC, OC),
               down_f32(out_p, (long)BT * OC), (long)BT * OC, OC, bound_mm(mode));
    // backward into a float32 input gradient that it adds to (dln's GRAD_ADD), with dW and the bias gradient
    float *dinp_p = up_f32(dinp0, (long)BT * C), *dW_p = up_f32(dW0, (long)OC * C), *db_p = up_f32(db0, OC);
    float *dinp_f = up_f32(dinp0, (long)BT * C), *dW_f = up_f32(dW0, (long)OC * C), *db_f = up_f32(db0, OC);
    launch_matmul_backward(dinp_p, dW_p, db_p, dout_f, inp_f, d_W, BT, C, OC);
    gpu_matmul_backward(dinp_f, NULL, GRAD_ADD, dW_f, db_f, f32_of(dout_a), bf16_of(dout_a), f32_of(inp_a),
                        bf16_of(inp_a), d_W, BT, C, OC, scratch);
    pair_check_dev("matmul backward", mode, "dinp (add)", dinp_f, 0, dinp_p, (long)BT * C, C, bound_mm(mode));
    pair_check_dev("matmul backward", mode, "dW", dW_f, 0, dW_p, (long)OC * C, C, bound_acc(mode));
    // the bias gradient sums dout as both sides hold it: float32 sums in every mode
    pair_check_dev("matmul backward", mode, "dbias", db_f, 0, db_p, OC, OC, bound_f32());
    // and into an activation gradient that it writes over (GRAD_SET: dhact's, dyg's), whatever was there
    float *dinp2_p = pair_dev((long)BT * C), *dinp2_a = pair_dev((long)BT * C), *dW2 = pair_dev((long)OC * C);
    cudaCheck(cudaMemset(dinp2_p, 0, (size_t)BT * C * sizeof(float)));
    cudaCheck(cudaMemset(dinp2_a, 0x7F, (size_t)BT * C * sizeof(float)));      // 3.4e38, or bf16 pairs of 3.4e38
    cudaCheck(cudaMemset(dW2, 0, (size_t)OC * C * sizeof(float)));
    launch_matmul_backward(dinp2_p, dW2, NULL, dout_f, inp_f, d_W, BT, C, OC);
    gpu_matmul_backward(f32_of(dinp2_a), bf16_of(dinp2_a), GRAD_SET, dW2, NULL, f32_of(dout_a), bf16_of(dout_a),
                        f32_of(inp_a), bf16_of(inp_a), d_W, BT, C, OC, scratch);
    pair_check("matmul backward", mode, "dinp (set)", down_act(dinp2_a, (long)BT * C), down_f32(dinp2_p, (long)BT * C),
               (long)BT * C, C, bound_mm(mode));
    pair_free();
}

// ---- embeddings: embedding_forward_kernel, embedding_backward_wte_kernel (token buckets, bucket_tokens) and
// embedding_backward_wpe_kernel, launched as gpu_forward and gpu_backward launch them, vs launch_embedding_*.
// float32 in every mode (the residual stream and its gradient stay float32 with --dtype bf16).
static void pair_embedding(int wpe) {
    const int B = PAIR_B, T = PAIR_T, BT = B * T, C = PAIR_C, V = PAIR_V;
    const char* layer = wpe ? "embedding (wte + wpe)" : "embedding (wte)";
    pair_mode(MM_FP32);
    Rng g;
    rng_seed(&g, 102 + wpe);
    // tokens of a few dozen values, most repeated: every bucket of the wte gradient sums several positions
    Model hm;
    memset(&hm, 0, sizeof(hm));
    hm.cfg.V = V;
    GpuModel gm;
    memset(&gm, 0, sizeof(gm));
    gm.host = &hm;
    int* ib = (int*)xcalloc((size_t)(5 * BT + 1), sizeof(int));
    gm.tokens_h = ib; gm.utok_h = ib + 2 * BT; gm.ustart_h = ib + 3 * BT; gm.upos_h = ib + 4 * BT + 1;
    for (int i = 0; i < BT; i++) gm.tokens_h[i] = (int)(rng_u32(&g) % 40) * 2 + (i % 3 == 0);   // ids up to 79 of 97
    int nu = bucket_tokens(&gm, BT);
    int* d_ib = dmalloc_int(5 * BT + 1);
    cudaCheck(cudaMemcpy(d_ib, ib, (5 * BT + 1) * sizeof(int), cudaMemcpyHostToDevice));
    int *tok = d_ib, *utok = d_ib + 2 * BT, *ustart = d_ib + 3 * BT, *upos = d_ib + 4 * BT + 1;
    float *wte = up_f32(pair_rand(&g, (long)V * C, -1, 1), (long)V * C), *wpe_d = NULL;
    if (wpe) wpe_d = up_f32(pair_rand(&g, (long)T * C, -1, 1), (long)T * C);
    float *out_p = pair_dev((long)BT * C), *out_f = pair_dev((long)BT * C);
    launch_embedding_forward(out_p, tok, wte, wpe_d, B, T, C);
    embedding_forward_kernel<<<EW_GRID((long)BT * C)>>>(out_f, tok, wte, wpe_d, BT, T, C);
    LAUNCH_CHECK(embedding_forward_kernel);
    pair_check_dev(layer, MM_FP32, "out", out_f, 0, out_p, (long)BT * C, C, bound_f32());
    float *dout = up_f32(pair_rand(&g, (long)BT * C, -1, 1), (long)BT * C);
    float *dwte0 = pair_rand(&g, (long)V * C, -1, 1), *dwpe0 = pair_rand(&g, (long)T * C, -1, 1);
    float *dwte_p = up_f32(dwte0, (long)V * C), *dwte_f = up_f32(dwte0, (long)V * C);
    float *dwpe_p = wpe ? up_f32(dwpe0, (long)T * C) : NULL, *dwpe_f = wpe ? up_f32(dwpe0, (long)T * C) : NULL;
    launch_embedding_backward(dwte_p, dwpe_p, dout, tok, B, T, C);
    embedding_backward_wte_kernel<<<dim3(nu, ceil_div(C, EW_THREADS)), EW_THREADS>>>(dwte_f, dout, utok, ustart, upos,
                                                                                   C);
    LAUNCH_CHECK(embedding_backward_wte_kernel);
    if (wpe) {
        embedding_backward_wpe_kernel<<<EW_GRID((long)T * C)>>>(dwpe_f, dout, B, T, C);
        LAUNCH_CHECK(embedding_backward_wpe_kernel);
    }
    pair_check_dev(layer, MM_FP32, "dwte", dwte_f, 0, dwte_p, (long)V * C, C, bound_f32());
    if (wpe) pair_check_dev(layer, MM_FP32, "dwpe", dwpe_f, 0, dwpe_p, (long)T * C, C, bound_f32());
    cudaCheck(cudaFree(d_ib));
    free(ib);
    pair_free();
}

// Rows of the norms' input: row n is offset + spread U(-1, 1), its scale 10^(-3 + 3 n / (N - 1)) from 1e-3 to 1,
// so variances from 3e-7 (below eps = 1e-5: there eps decides rstd) to 0.33
static float* norm_rows(Rng* g, int N, int C) {
    float* x = pair_host((long)N * C);
    for (int n = 0; n < N; n++) {
        float s = powf(10.0f, -3.0f + 3.0f * n / (N - 1)), off = 0.3f * s * (2 * rng_uniform01_f32(g) - 1);
        for (int c = 0; c < C; c++) x[(long)n * C + c] = off + s * (2 * rng_uniform01_f32(g) - 1);
    }
    return x;
}

// ---- norm forward: gpu_norm_forward vs launch_norm_forward; gpu_residual_norm_forward (residual + the branch's
// bias + norm) vs launch_residual_forward + launch_norm_forward. The input and the residual are float32 in every
// mode, the norm's output an activation.
static void pair_norm_forward(int rms, float eps, int mode) {
    const int N = PAIR_B * PAIR_T, C = PAIR_C;
    char layer[64];
    snprintf(layer, sizeof(layer), "%s forward eps %.0e", rms ? "RMSNorm" : "LayerNorm", (double)eps);
    pair_mode(mode);
    Rng g;
    rng_seed(&g, 103 + rms);
    float* x = up_f32(norm_rows(&g, N, C), (long)N * C);
    float *w = up_f32(pair_rand(&g, C, 0.5f, 1.5f), C), *b = rms ? NULL : up_f32(pair_rand(&g, C, -1, 1), C);
    float *out_p = pair_dev((long)N * C), *mean_p = pair_dev(N), *rstd_p = pair_dev(N);
    float *out_a = pair_dev((long)N * C), *mean_f = pair_dev(N), *rstd_f = pair_dev(N);
    launch_norm_forward(out_p, mean_p, rstd_p, x, w, b, rms, eps, N, C);
    gpu_norm_forward(out_a, mean_f, rstd_f, x, w, b, rms, eps, N, C);
    pair_check_dev(layer, mode, "out", out_a, 1, out_p, (long)N * C, C, bound_round(mode));
    if (!rms) pair_check_dev(layer, mode, "mean", mean_f, 0, mean_p, N, 1, bound_f32());
    pair_check_dev(layer, mode, "rstd", rstd_f, 0, rstd_p, N, 1, bound_f32());
    pair_free();
}

static void pair_residual_norm(int rms, int mode) {
    const int N = PAIR_B * PAIR_T, C = PAIR_C;
    const float eps = 1e-5f;
    const char* layer = rms ? "residual + RMSNorm forward" : "residual + LayerNorm forward";
    pair_mode(mode);
    Rng g;
    rng_seed(&g, 105 + rms);
    float* x = up_f32(pair_rand(&g, (long)N * C, -1, 1), (long)N * C);
    float* branch = pair_act_values(pair_rand(&g, (long)N * C, -1, 1), (long)N * C);   // a GEMM's output
    float* bias = pair_rand(&g, C, -1, 1);
    float *w = up_f32(pair_rand(&g, C, 0.5f, 1.5f), C), *b = rms ? NULL : up_f32(pair_rand(&g, C, -1, 1), C);
    float *xout_p = pair_dev((long)N * C), *out_p = pair_dev((long)N * C), *mean_p = pair_dev(N), *rstd_p = pair_dev(N);
    float *xout_f = pair_dev((long)N * C), *out_a = pair_dev((long)N * C), *mean_f = pair_dev(N), *rstd_f = pair_dev(N);
    launch_residual_forward(xout_p, x, up_f32(plus_bias(branch, bias, (long)N * C, C), (long)N * C), (long)N * C);
    launch_norm_forward(out_p, mean_p, rstd_p, xout_p, w, b, rms, eps, N, C);
    gpu_residual_norm_forward(xout_f, out_a, mean_f, rstd_f, x, up_act(branch, (long)N * C), up_f32(bias, C), w, b, rms,
                              eps, N, C);
    pair_check_dev(layer, mode, "xout", xout_f, 0, xout_p, (long)N * C, C, bound_f32());
    pair_check_dev(layer, mode, "out", out_a, 1, out_p, (long)N * C, C, bound_round(mode));
    if (!rms) pair_check_dev(layer, mode, "mean", mean_f, 0, mean_p, N, 1, bound_f32());
    pair_check_dev(layer, mode, "rstd", rstd_f, 0, rstd_p, N, 1, bound_f32());
    pair_free();
}

// ---- norm backward: gpu_norm_backward (dinp, with --dtype bf16 its bf16 copy, dw, db, and the bias gradient
// of the projection before the norm: the column sum of the new dinp) vs launch_norm_backward and the plain
// matmul backward's bias gradient of that dinp. All float32 but dinp16. LayerNorm adds to dinp (GRAD_ADD),
// RMSNorm writes it (GRAD_SET: the plain side starts from zeros).
static void pair_norm_backward(int rms, int mode) {
    const int N = PAIR_B * PAIR_T, C = PAIR_C;
    const char* layer = rms ? "RMSNorm backward (set)" : "LayerNorm backward (add)";
    pair_mode(mode);
    Rng g;
    rng_seed(&g, 107 + rms);
    float* x = up_f32(pair_rand(&g, (long)N * C, -1, 1), (long)N * C);
    float* dout = up_f32(pair_rand(&g, (long)N * C, -1, 1), (long)N * C);
    float *w = up_f32(pair_rand(&g, C, 0.5f, 1.5f), C), *b = rms ? NULL : up_f32(pair_rand(&g, C, -1, 1), C);
    float *out = pair_dev((long)N * C), *mean = pair_dev(N), *rstd = pair_dev(N), *scratch = pair_dev(1 << 16);
    launch_norm_forward(out, mean, rstd, x, w, b, rms, 1e-5f, N, C);        // the statistics both read
    float *dinp0 = pair_rand(&g, (long)N * C, -1, 1), *dw0 = pair_rand(&g, C, -1, 1), *db0 = pair_rand(&g, C, -1, 1);
    float *dbias0 = pair_rand(&g, C, -1, 1);
    float* dinp_p = up_f32(dinp0, (long)N * C);
    if (rms) cudaCheck(cudaMemset(dinp_p, 0, (size_t)N * C * sizeof(float)));
    float *dw_p = up_f32(dw0, C), *db_p = rms ? NULL : up_f32(db0, C), *dbias_p = up_f32(dbias0, C);
    float *dinp_f = up_f32(dinp0, (long)N * C), *dw_f = up_f32(dw0, C), *db_f = rms ? NULL : up_f32(db0, C);
    float *dbias_f = up_f32(dbias0, C), *dinp16 = g_bf16.on ? pair_dev((long)N * C) : NULL;
    launch_norm_backward(dinp_p, dw_p, db_p, dout, x, w, mean, rstd, rms, N, C);
    plain_bias_grad(dbias_p, dinp_p, N, C);
    gpu_norm_backward(dinp_f, rms ? GRAD_SET : GRAD_ADD, (__nv_bfloat16*)dinp16, dw_f, db_f, dbias_f, dout, x, w, mean,
                      rstd, rms, N, C, scratch);
    pair_check_dev(layer, mode, "dinp", dinp_f, 0, dinp_p, (long)N * C, C, bound_f32());
    if (dinp16) pair_check_dev(layer, mode, "dinp16", dinp16, 1, dinp_p, (long)N * C, C, bound_round(mode));
    pair_check_dev(layer, mode, "dw", dw_f, 0, dw_p, C, C, bound_f32());
    if (!rms) pair_check_dev(layer, mode, "db", db_f, 0, db_p, C, C, bound_f32());
    pair_check_dev(layer, mode, "dbias", dbias_f, 0, dbias_p, C, C, bound_f32());
    pair_free();
}

// ---- RoPE: gpu_rope (forward adding q's or k's bias; backward without) vs launch_rope, on activations
static void pair_rope(int mode) {
    const int B = PAIR_B, T = PAIR_T, BT = B * T, hd = PAIR_C / PAIR_H;
    pair_mode(mode);
    Rng g;
    rng_seed(&g, 109);
    float* cs_h = pair_host((long)T * hd);
    rope_table(cs_h, T, hd, 10000.0f);
    float* cs = up_f32(cs_h, (long)T * hd);
    const int heads[3] = {4, 2, 4};       // q (H heads), k (KVH = 2), then dq backward
    const char* what[3] = {"q + bq", "k + bk", "dq"};
    for (int k = 0; k < 3; k++) {
        int nh = heads[k], bwd = k == 2;
        long n = (long)BT * nh * hd;
        float* x = pair_act_values(pair_rand(&g, n, -1, 1), n);
        float* bias = pair_rand(&g, (long)nh * hd, -1, 1);
        float *x_p = up_f32(bwd ? x : plus_bias(x, bias, n, (long)nh * hd), n), *x_a = up_act(x, n);
        launch_rope(x_p, cs, B, T, nh, hd, bwd ? -1.0f : 1.0f);
        gpu_rope(x_a, bwd ? NULL : up_f32(bias, (long)nh * hd), cs, BT, T, nh, hd, bwd ? -1.0f : 1.0f);
        pair_check_dev(bwd ? "RoPE backward" : "RoPE forward", mode, what[k], x_a, 1, x_p, n, (long)nh * hd,
                       bound_round(mode));
    }
    pair_free();
}

// ---- attention: gpu_attention_forward / _backward (CUDA cores in float32 and for head sizes the tensor cores do
// not take; the tensor cores with TF32 or bf16 at head sizes 16 and 32) vs launch_attention_forward / _backward,
// with the q, k, v biases that the fast kernels' tile loads add (the plain kernels get q + bq, k + bk, v + bv)
static void pair_attention(int T, int KVH, int hd, int mode) {
    const int B = PAIR_B, H = PAIR_H, BT = B * T, qd = H * hd, kvd = KVH * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    pair_mode(mode);
    char layer[96];
    snprintf(layer, sizeof(layer), "attention %s T %d KVH %d hd %d", attention_on_tensor_cores(hd) ? "tc" : "cuda",
             T, KVH, hd);
    Rng g;
    rng_seed(&g, 110 + hd + KVH);
    long nq = (long)BT * qd, nkv = (long)BT * kvd;
    float *q = pair_act_values(pair_rand(&g, nq, -1, 1), nq), *k = pair_act_values(pair_rand(&g, nkv, -1, 1), nkv);
    float *v = pair_act_values(pair_rand(&g, nkv, -1, 1), nkv), *dy = pair_act_values(pair_rand(&g, nq, -1, 1), nq);
    float *bq = pair_rand(&g, qd, -0.5f, 0.5f), *bk = pair_rand(&g, kvd, -0.5f, 0.5f);
    float* bv = pair_rand(&g, kvd, -0.5f, 0.5f);
    // plain
    float *q_p = up_f32(plus_bias(q, bq, nq, qd), nq), *k_p = up_f32(plus_bias(k, bk, nkv, kvd), nkv);
    float *v_p = up_f32(plus_bias(v, bv, nkv, kvd), nkv), *dy_p = up_f32(dy, nq);
    float *y_p = pair_dev(nq), *att = pair_dev((long)B * H * T * T), *dP = pair_dev((long)B * H * T * T);
    float *dq_p = pair_dev(nq), *dk_p = pair_dev(nkv), *dv_p = pair_dev(nkv);
    launch_attention_forward(y_p, att, q_p, k_p, v_p, B, T, H, KVH, hd, scale);
    launch_attention_backward(dq_p, dk_p, dv_p, dP, dy_p, att, q_p, k_p, v_p, B, T, H, KVH, hd, scale);
    // fast
    Qkv<float> in = {up_act(q, nq), up_act(k, nkv), up_act(v, nkv), up_f32(bq, qd), up_f32(bk, kvd), up_f32(bv, kvd)};
    float *y_a = pair_dev(nq), *lse = pair_dev((long)B * H * T), *D = pair_dev((long)B * H * T);
    float *dq_a = pair_dev(nq), *dk_a = pair_dev(nkv), *dv_a = pair_dev(nkv);
    gpu_attention_forward(y_a, lse, in, B, T, H, KVH, hd, scale);
    gpu_attention_backward(dq_a, dk_a, dv_a, D, up_act(dy, nq), y_a, lse, in, B, T, H, KVH, hd, scale);
    pair_check_dev(layer, mode, "y", y_a, 1, y_p, nq, qd, bound_mm(mode));
    pair_check_dev(layer, mode, "dq", dq_a, 1, dq_p, nq, qd, bound_mm(mode));
    pair_check_dev(layer, mode, "dk", dk_a, 1, dk_p, nkv, kvd, bound_mm(mode));
    pair_check_dev(layer, mode, "dv", dv_a, 1, dv_p, nkv, kvd, bound_mm(mode));
    pair_free();
}

// ---- the attention gate: gpu_gate_forward (adding b_g) / gpu_gate_backward vs launch_attn_gate_forward /
// _backward. The gate (pre-activation in, sigmoid out) is float32 in every mode; y, out, dy and dgpre activations.
static void pair_gate(int mode) {
    const int BT = PAIR_B * PAIR_T, H = 5, hd = PAIR_C / 5;    // B T H rows of a warp each: 2 mod 4 too
    long n = (long)BT * H * hd, ng = (long)BT * H;
    pair_mode(mode);
    Rng g;
    rng_seed(&g, 120);
    float *y = pair_act_values(pair_rand(&g, n, -1, 1), n), *pre = pair_rand(&g, ng, -3, 3);
    float* bias = pair_rand(&g, H, -1, 1);
    float* dout = pair_act_values(pair_rand(&g, n, -1, 1), n);
    float *y_p = up_f32(y, n), *gate_p = up_f32(plus_bias(pre, bias, ng, H), ng), *out_p = pair_dev(n);
    float *y_a = up_act(y, n), *gate_f = up_f32(pre, ng), *out_a = pair_dev(n);
    launch_attn_gate_forward(out_p, gate_p, y_p, BT, H, hd);
    gpu_gate_forward(out_a, gate_f, up_f32(bias, H), y_a, BT, H, hd);
    pair_check_dev("gate forward", mode, "out", out_a, 1, out_p, n, (long)H * hd, bound_round(mode));
    pair_check_dev("gate forward", mode, "gate", gate_f, 0, gate_p, ng, H, bound_f32());
    float *dy_p = pair_dev(n), *dg_p = pair_dev(ng), *dy_a = pair_dev(n), *dg_a = pair_dev(ng);
    launch_attn_gate_backward(dy_p, dg_p, up_f32(dout, n), y_p, gate_p, BT, H, hd);
    gpu_gate_backward(dy_a, dg_a, up_act(dout, n), y_a, gate_f, BT, H, hd);
    pair_check_dev("gate backward", mode, "dy", dy_a, 1, dy_p, n, (long)H * hd, bound_round(mode));
    pair_check_dev("gate backward", mode, "dgpre", dg_a, 1, dg_p, ng, H, bound_round(mode));
    pair_free();
}

// ---- MLP activations: gpu_mlp_activation_forward / _backward (GELU, or SwiGLU with gpre; adding b_up and
// b_gate, and summing their gradients) vs launch_gelu_* / launch_swiglu_* on the inputs with their biases, and
// the plain matmul backward's bias gradients of dup and dgpre
static void pair_mlp(int swiglu, int mode) {
    const int rows = PAIR_B * PAIR_T, F = 4 * PAIR_C;
    long n = (long)rows * F;
    const char* fwd = swiglu ? "SwiGLU forward" : "GELU forward";
    const char* bwd = swiglu ? "SwiGLU backward" : "GELU backward";
    pair_mode(mode);
    Rng g;
    rng_seed(&g, 121 + swiglu);
    float *up = pair_act_values(pair_rand(&g, n, -4, 4), n), *gp = pair_act_values(pair_rand(&g, n, -4, 4), n);
    float *bup = pair_rand(&g, F, -1, 1), *bg = pair_rand(&g, F, -1, 1);
    float* dh = pair_act_values(pair_rand(&g, n, -1, 1), n);
    float *up_p = up_f32(plus_bias(up, bup, n, F), n), *gp_p = up_f32(plus_bias(gp, bg, n, F), n);
    float *up_a = up_act(up, n), *gp_a = swiglu ? up_act(gp, n) : NULL, *bup_d = up_f32(bup, F), *bg_d = up_f32(bg, F);
    float *h_p = pair_dev(n), *h_a = pair_dev(n), *scratch = pair_dev(1 << 16);
    if (swiglu) launch_swiglu_forward(h_p, gp_p, up_p, n);
    else launch_gelu_forward(h_p, up_p, n);
    gpu_mlp_activation_forward(h_a, gp_a, up_a, swiglu ? bg_d : NULL, bup_d, n, F);
    pair_check_dev(fwd, mode, "hact", h_a, 1, h_p, n, F, bound_round(mode));
    float *dbup0 = pair_rand(&g, F, -1, 1), *dbg0 = pair_rand(&g, F, -1, 1);
    float *dup_p = pair_dev(n), *dgp_p = pair_dev(n), *dbup_p = up_f32(dbup0, F), *dbg_p = up_f32(dbg0, F);
    float *dup_a = pair_dev(n), *dgp_a = pair_dev(n), *dbup_f = up_f32(dbup0, F), *dbg_f = up_f32(dbg0, F);
    float* dh_p = up_f32(dh, n);
    if (swiglu) launch_swiglu_backward(dgp_p, dup_p, gp_p, up_p, dh_p, n);
    else launch_gelu_backward(dup_p, up_p, dh_p, n);
    plain_bias_grad(dbup_p, dup_p, rows, F);
    if (swiglu) plain_bias_grad(dbg_p, dgp_p, rows, F);
    gpu_mlp_activation_backward(swiglu ? dgp_a : NULL, dup_a, swiglu ? dbg_f : NULL, dbup_f, gp_a, up_a,
                                swiglu ? bg_d : NULL, bup_d, up_act(dh, n), rows, F, scratch);
    if (swiglu) pair_check_dev(bwd, mode, "dgpre", dgp_a, 1, dgp_p, n, F, bound_round(mode));
    pair_check_dev(bwd, mode, "dup", dup_a, 1, dup_p, n, F, bound_round(mode));
    // the bias gradients sum the float32 input gradients, before any rounding: F32 in every mode
    if (swiglu) pair_check_dev(bwd, mode, "dbgate", dbg_f, 0, dbg_p, F, F, bound_f32());
    pair_check_dev(bwd, mode, "dbup", dbup_f, 0, dbup_p, F, F, bound_f32());
    pair_free();
}

// ---- softmax + cross-entropy and the LM head's backward: softmax_crossentropy_kernel (losses and dlogits in one
// pass; dlogits over the logits, or in bf16 with --dtype bf16), loss_mean_kernel and the head's
// gpu_matmul_backward with dloss as its alpha, as gpu_forward and gpu_backward run them, vs launch_softmax_forward
// (probabilities and losses; the mean on the host in double, as plain_forward takes it) and
// launch_lm_head_backward (crossentropy_backward_plain with scale x dloss, then the matmul backward). muP's
// logit scale 0.75 and dloss 0.5 (a micro-batch's share): the plain dlogits carry dloss, the fast ones not
// (their GEMMs do): compared as dloss x the fast ones, exact in every type. Then sampling's softmax
// (softmax_forward_kernel, no targets) vs launch_softmax_forward without targets: float32 in every mode.
static void pair_lm_head(int mode) {
    const int BT = PAIR_B * PAIR_T, C = PAIR_C, V = PAIR_V;
    const float scale = 0.75f, dloss = 0.5f;
    long nl = (long)BT * V;
    pair_mode(mode);
    Rng g;
    rng_seed(&g, 130);
    float* logits = pair_rand(&g, nl, -6, 6);
    int* tgt = (int*)xmalloc(BT * sizeof(int));
    for (int i = 0; i < BT; i++) tgt[i] = (int)(rng_u32(&g) % V);
    int* d_tgt = dmalloc_int(BT);
    cudaCheck(cudaMemcpy(d_tgt, tgt, BT * sizeof(int), cudaMemcpyHostToDevice));
    float* lnf = pair_act_values(pair_rand(&g, (long)BT * C, -1, 1), (long)BT * C);
    float* W = pair_rand(&g, (long)V * C, -1, 1);
    float* dW0 = pair_rand(&g, (long)V * C, -1e-3f, 1e-3f);      // the size of one step's dW here
    float *d_W = pair_weights(W, (long)V * C), *scratch = pair_dev(1 << 16);
    // plain
    float *probs = up_f32(logits, nl), *losses_p = pair_dev(BT), *dln_p = pair_dev((long)BT * C);
    float* dW_p = up_f32(dW0, (long)V * C);
    cudaCheck(cudaMemset(dln_p, 0, (size_t)BT * C * sizeof(float)));
    launch_softmax_forward(probs, losses_p, d_tgt, BT, V, scale);
    launch_lm_head_backward(dln_p, dW_p, probs, d_tgt, up_f32(lnf, (long)BT * C), d_W, BT, C, V, scale * dloss);
    // fast
    float *logits_f = up_f32(logits, nl), *losses_f = pair_dev(BT), *loss_f = pair_dev(1);
    float *dl16 = g_bf16.on ? pair_dev(nl) : NULL, *dln_f = pair_dev((long)BT * C), *dW_f = up_f32(dW0, (long)V * C);
    float* lnf_a = up_act(lnf, (long)BT * C);
    if (g_bf16.on)
        softmax_crossentropy_kernel<__nv_bfloat16><<<BT, ROW_THREADS>>>(logits_f, losses_f, (__nv_bfloat16*)dl16, d_tgt,
                                                                        V, scale, 1.0f / BT);
    else
        softmax_crossentropy_kernel<float><<<BT, ROW_THREADS>>>(logits_f, losses_f, logits_f, d_tgt, V, scale,
                                                                1.0f / BT);
    LAUNCH_CHECK(softmax_crossentropy_kernel);
    loss_mean_kernel<<<1, 1024>>>(loss_f, losses_f, BT);
    LAUNCH_CHECK(loss_mean_kernel);
    gpu_matmul_backward(dln_f, NULL, GRAD_SET, dW_f, NULL, f32_of(logits_f), (__nv_bfloat16*)dl16, f32_of(lnf_a),
                        bf16_of(lnf_a), d_W, BT, C, V, scratch, dloss);
    const char* layer = "softmax + cross-entropy";
    pair_check_dev(layer, mode, "losses", losses_f, 0, losses_p, BT, 1, bound_f32());
    {
        float* lp = down_f32(losses_p, BT);
        double mean = 0.0;
        for (int i = 0; i < BT; i++) mean += lp[i];
        mean /= BT;
        float got;
        cudaCheck(cudaMemcpy(&got, loss_f, sizeof(float), cudaMemcpyDeviceToHost));
        double rel = fabs(got - mean) / mean;
        char lm[64];
        snprintf(lm, sizeof(lm), "loss mean, %s", pair_mode_name[mode]);
        check(rel <= 64 * FP32_U, "%-42s %-10s %.7f vs the plain losses' mean %.7f (relative %.1e, bound %.1e)", lm,
              "loss", got, mean, rel, 64 * FP32_U);
    }
    float* dlog = g_bf16.on ? down_act(dl16, nl) : down_f32(logits_f, nl);
    for (long i = 0; i < nl; i++) dlog[i] *= dloss;
    pair_check(layer, mode, "dlogits", dlog, down_f32(probs, nl), nl, V, bound_round(mode));
    pair_check_dev("LM head backward", mode, "dinp", dln_f, 0, dln_p, (long)BT * C, C, bound_mm(mode));
    pair_check_dev("LM head backward", mode, "dW", dW_f, 0, dW_p, (long)V * C, C, bound_mm(mode));
    if (mode == MM_FP32) {                // sampling: float32 in every mode, once
        float *pp = up_f32(logits, nl), *pf = up_f32(logits, nl);
        launch_softmax_forward(pp, NULL, NULL, BT, V, scale);
        softmax_forward_kernel<<<BT, ROW_THREADS>>>(pf, V, scale);
        LAUNCH_CHECK(softmax_forward_kernel);
        pair_check_dev("softmax (sampling)", mode, "probs", pf, 0, pp, nl, V, bound_f32());
    }
    cudaCheck(cudaFree(d_tgt));
    free(tgt);
    pair_free();
}

// ---- AdamW and the gradient norm: gpu_grad_norm and adamw_kernel (one launch over every tensor, its clipping
// factor from the device's norm) vs plain_grad_norm and plain_adamw_step (one launch per tensor, the factor
// clip_scale of the plain norm), on a PlainGpu and a GpuModel built from the same host model: small_model
// (llama, 2 layers), with every tensor's learning-rate multiplier set to one of 0.5, 0.75, 1, 1.25 (muP's
// per-tensor rates, so that a tensor read from its neighbour's row of adamw_kernel's table fails), nonzero
// moments (step 3), and random gradients whose norm (69) is clipped at 1. The update (new - old parameters) of
// every tensor, and its moments, within F32 relative L2 of the plain step's (the worst tensor is shown); the norm
// within 1e-12 relative (double sums of the same float32 squares in other orders). AdamW is float32 in every
// mode; with --dtype bf16 adamw_kernel also writes the weights' bf16 copy, which must be the new weights rounded.
static void pair_adamw(int mode) {
    pair_mode(mode);
    Config cfg = small_config("llama", 1, 2, 8);
    Model host;
    small_model(&host, &cfg);
    Rng g;
    rng_seed(&g, 140);
    size_t P = host.num_params;
    for (int i = 0; i < host.num_tensors; i++) host.tensors[i].lr_mult = 0.5f + 0.25f * (i % 4);
    for (size_t i = 0; i < P; i++) {
        host.adam_m[i] = 0.01f * (2 * rng_uniform01_f32(&g) - 1);
        host.adam_v[i] = 1e-4f * rng_uniform01_f32(&g);
    }
    float* grads = pair_host((long)P);
    for (size_t i = 0; i < P; i++) grads[i] = 0.3f * (2 * rng_uniform01_f32(&g) - 1);
    float* p0 = pair_host((long)P);
    memcpy(p0, host.params, P * sizeof(float));
    PlainGpu pg;
    plain_model_create(&pg, &host, 1, 8);
    GpuModel gm;
    gpu_model_create(&gm, &host, 1, 8);
    cudaCheck(cudaMemcpy(pg.d.grads, grads, P * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(gm.grads, grads, P * sizeof(float), cudaMemcpyHostToDevice));
    OptConfig o;
    memset(&o, 0, sizeof(o));
    o.beta1 = 0.9f; o.beta2 = 0.95f; o.adam_eps = 1e-8f; o.weight_decay = 0.1f; o.clip = 1.0f;
    const float lr = 1e-2f;
    const int t = 3;
    double norm_p = plain_grad_norm(&pg), norm_f = gpu_grad_norm(&gm);
    plain_adamw_step(&pg, &o, lr, t, clip_scale(o.clip, norm_p));
    gpu_adamw_step(&gm, &o, lr, t);
    double rel = fabs(norm_f - norm_p) / norm_p;
    char name[64];
    snprintf(name, sizeof(name), "gradient norm, %s", pair_mode_name[mode]);
    if (mode == MM_FP32)                  // float32 in every mode: once
        check(rel <= 1e-12, "%-42s %-10s %.12g vs plain %.12g (relative %.1e, bound 1e-12)", name, "norm", norm_f,
              norm_p, rel);
    snprintf(name, sizeof(name), "AdamW, %s", pair_mode_name[mode]);
    const float* got[3] = {down_f32(gm.params, (long)P), down_f32(gm.m, (long)P), down_f32(gm.v, (long)P)};
    const float* want[3] = {down_f32(pg.d.params, (long)P), down_f32(pg.d.adam_m, (long)P),
                            down_f32(pg.d.adam_v, (long)P)};
    const char* names[3] = {"update", "m", "v"};
    for (int k = 0; k < 3; k++) {
        double worst = -1.0, worst_rel = 0.0;
        const char* worst_name = "";
        for (int i = 0; i < host.num_tensors; i++) {
            const Tensor* tn = &host.tensors[i];
            double err = 0.0, ref = 0.0, pref = 0.0;
            for (size_t j = tn->offset; j < tn->offset + tn->numel; j++) {
                double a = got[k][j], b = want[k][j];
                if (k == 0) a -= p0[j], b -= p0[j];
                err += (a - b) * (a - b);
                ref += b * b;
                pref += (double)want[k][j] * want[k][j];
            }
            // each side rounds the new parameter once: a rounding that differs (an FMA contracted on one side
            // only, on a GPU) is an ulp of the parameter, not of its update, so the update's bound has 2 u32 of
            // the parameters' norm on top (an ulp of a norm gain of 1 is 7e-6 of its update of ~0.017 here)
            double bound = 64 * FP32_U * sqrt(ref) + (k == 0 ? 2 * FP32_U * sqrt(pref) : 0.0);
            double r = sqrt(err) / bound;
            if (!(r <= worst)) worst = r, worst_rel = sqrt(err / ref), worst_name = tn->name;
        }
        if (!(worst_rel <= g_pair_worst[0][0])) g_pair_worst[0][0] = worst_rel;
        check(worst <= 1.0, "%-42s %-10s every tensor's within %.1e rel. L2%s (worst %.2f of its bound: %.1e, %s)",
              name, names[k], 64 * FP32_U, k == 0 ? " + 2 u32 of the parameters" : "", worst, worst_rel,
              worst_name);
    }
    if (g_bf16.on) {                      // the weights' bf16 copy, which the next GEMMs read: the new weights
        __nv_bfloat16* w16 = (__nv_bfloat16*)xmalloc(P * sizeof(__nv_bfloat16));
        cudaCheck(cudaMemcpy(w16, g_bf16.w16, P * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
        size_t differ = 0;
        for (size_t i = 0; i < P; i++)
            differ += __bfloat162float(w16[i]) != __bfloat162float(__float2bfloat16(got[0][i]));
        check(differ == 0, "%-42s %-10s the new weights rounded to bf16, bit for bit (%zu of %zu differ)", name, "w16",
              differ, P);
        free(w16);
    }
    plain_model_free(&pg);
    gpu_model_free(&gm);
    model_free(&host);
    pair_free();
}

static void test_kernel_pairs(void) {
    memset(g_pair_worst, 0, sizeof(g_pair_worst));
    for (int mode = MM_FP32; mode <= MM_BF16; mode++) pair_matmul(mode);
    pair_embedding(1);
    pair_embedding(0);
    for (int mode : {MM_FP32, MM_BF16})
        for (int rms = 0; rms <= 1; rms++) {
            pair_norm_forward(rms, 1e-5f, mode);
            pair_norm_forward(rms, 1e-12f, mode);
            pair_residual_norm(rms, mode);
            pair_norm_backward(rms, mode);
        }
    for (int mode : {MM_FP32, MM_BF16}) pair_rope(mode);
    // head size 20: the CUDA-core kernels in every mode (TF32 leaves them float32: not run twice); 16 (MHA) and
    // 32 (GQA, two blocks of 64 query rows): the tensor cores with TF32 and bf16
    for (int mode : {MM_FP32, MM_BF16}) pair_attention(37, 2, 20, mode);
    for (int mode = MM_FP32; mode <= MM_BF16; mode++) {
        pair_attention(37, 4, 16, mode);
        pair_attention(70, 2, 32, mode);
    }
    for (int mode : {MM_FP32, MM_BF16}) {
        pair_gate(mode);
        pair_mlp(0, mode);
        pair_mlp(1, mode);
    }
    for (int mode = MM_FP32; mode <= MM_BF16; mode++) pair_lm_head(mode);
    pair_adamw(MM_FP32);
    pair_adamw(MM_BF16);
    pair_mode(MM_FP32);
    double(*w)[2] = g_pair_worst;
    printf("  worst relative L2 (in a row): F32 %.1f u32 (%.1f u32), ROUND %.2f u (%.2f u), MM %.2f u (%.2f u), "
           "ACC %.4f u (%.4f u)\n", w[0][0] / FP32_U, w[0][1] / FP32_U, w[1][0], w[1][1], w[2][0], w[2][1], w[3][0],
           w[3][1]);
    check(g_round_bias <= ROUND_BIAS_U, "bf16 outputs rounded to nearest: every ROUND check's signed mean error "
          "within %.3f u (worst %.4f u, %s)", ROUND_BIAS_U, g_round_bias, g_round_bias_at);
}

// ---- 3. the two binaries ----------------------------------------------------------------------------------
// The GPU trainer under test: the real one, or on the CPU runtime its twin built from the same source.
#ifdef CUDA_CPU_RUNTIME
#define GPU_TRAINER "./train_gpt2cu_cpu"
#else
#define GPU_TRAINER "./train_gpt2cu"
#endif

// A JSON log line split into its shape (numbers replaced by '#', strings kept) and its numbers.
typedef struct { char shape[4096]; double num[256]; int n; } LogLine;

static void split_line(const char* line, LogLine* out) {
    size_t k = 0;
    out->n = 0;
    for (const char* p = line; *p && *p != '\n' && k + 2 < sizeof(out->shape);) {
        if (*p == '"') {                                   // a string, copied to its closing quote
            do out->shape[k++] = *p++; while (*p && *p != '"' && k + 2 < sizeof(out->shape));
            if (*p) out->shape[k++] = *p++;
        } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
            char* end;
            double v = strtod(p, &end);
            if (out->n < 256) out->num[out->n++] = v;
            out->shape[k++] = '#';
            p = end;
        } else {
            out->shape[k++] = *p++;
        }
    }
    out->shape[k] = 0;
}

// The log lines of one event kind ("train" or "probe"), in order; returns the count (at most max).
static int read_events(const char* path, const char* event, LogLine* out, int max) {
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    char line[8192], tag[64];
    snprintf(tag, sizeof(tag), "\"event\":\"%s\"", event);
    int k = 0;
    while (k < max && fgets(line, sizeof(line), f))
        if (strstr(line, tag)) split_line(line, &out[k++]);
    fclose(f);
    return k;
}

// The two trainers' lines of one event kind: the same shapes, and every number within
// rtol * max(|a|, |b|) + atol, except in lines that contain `noise` (their shape is still compared).
// Returns the number of lines compared, or -1 if a shape or the count differs; *worst is the largest
// |a - b| / (rtol max(|a|,|b|) + atol) (1 at the bound), where it was.
static int compare_events(const char* cpu_log, const char* gpu_log, const char* event, const char* noise,
                          double rtol, double atol, double* worst, char* where, size_t where_size) {
    enum { MAXL = 2000 };
    LogLine* a = (LogLine*)malloc(MAXL * sizeof(LogLine));
    LogLine* b = (LogLine*)malloc(MAXL * sizeof(LogLine));
    int na = read_events(cpu_log, event, a, MAXL), nb = read_events(gpu_log, event, b, MAXL), result = na;
    *worst = 0.0;
    where[0] = 0;
    if (na != nb || na == 0) result = -1;
    for (int i = 0; result >= 0 && i < na; i++) {
        if (strcmp(a[i].shape, b[i].shape) != 0 || a[i].n != b[i].n) {
            snprintf(where, where_size, "line %d: %.120s", i + 1, a[i].shape);
            result = -1;
            break;
        }
        if (strstr(a[i].shape, noise)) continue;
        for (int j = 0; j < a[i].n; j++) {
            double x = a[i].num[j], y = b[i].num[j];
            double r = fabs(x - y) / (rtol * fmax(fabs(x), fabs(y)) + atol);
            if (r > *worst) {
                *worst = r;
                snprintf(where, where_size, "%.100s: %.9g vs %.9g", a[i].shape, x, y);
            }
        }
    }
    free(a);
    free(b);
    return result;
}

// The last "train_loss" of each "train" line of a log, in order, into out (at most n); returns the count.
static int read_losses(const char* path, double* out, int n) {
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    char line[4096];
    int k = 0;
    while (k < n && fgets(line, sizeof(line), f)) {
        const char* p = strstr(line, "\"train_loss\":");
        if (p) out[k++] = atof(p + 13);
    }
    fclose(f);
    return k;
}

static void write_bytes(const char* path, const unsigned char* bytes, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(bytes, 1, n, f) != n) fatal("cannot write %s", path);
    fclose(f);
}

// DIR/train.txt and DIR/val.txt: the synthetic corpus's bytes, the first tenth of them for validation
static void write_corpus(const char* dir) {
    Dataset ds;
    synthetic_dataset(&ds, 30000, 9);
    unsigned char* bytes = (unsigned char*)xmalloc(ds.n);
    for (size_t i = 0; i < ds.n; i++) bytes[i] = (unsigned char)ds.tok[i];
    char path[512];
    snprintf(path, sizeof(path), "%s/train.txt", dir);
    write_bytes(path, bytes, ds.n);
    snprintf(path, sizeof(path), "%s/val.txt", dir);
    write_bytes(path, bytes, ds.n / 10);
    free(bytes);
    free(ds.tok);
}

// A whole text file, or NULL
static char* read_file_text(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* buf = (char*)xmalloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = 0;
    fclose(f);
    return buf;
}

// One run of test_blowups: trainer g (0: ./train_gpt2, else the GPU trainer in blowup_modes[g]) with `flags`
// on the small model, 4 steps, checkpoints every `every` (0: at the end), into dir/NAME with its stderr in
// dir/NAME.txt; the exit status, and the stderr in *err
static const char* blowup_modes[] = {"./train_gpt2", "--kernels fast", "--kernels plain", "--kernels fast --tf32 0",
                                     "--dtype bf16"};
static int blowup_run(const char* dir, const char* name, int g, const char* flags, int every, char** err) {
    char cmd[1024], path[256];
    snprintf(cmd, sizeof(cmd), "%s %s %s -L 2 -C 64 -H 4 -t 32 -x 4 -v 0 -S 0 -n %d -i %s/train.txt -j %s/val.txt "
             "-o %s/%s > /dev/null 2> %s/%s.txt", g ? GPU_TRAINER : "./train_gpt2", g ? blowup_modes[g] : "", flags,
             every, dir, dir, dir, name, dir, name);
    int st = system(cmd);
    snprintf(path, sizeof(path), "%s/%s.txt", dir, name);
    *err = read_file_text(path);
    return st;
}

// A blow-up: both trainers stop at the same step with the same line (doc/log.md, "blowup") and exit 1,
// writing no checkpoint, in every GPU mode. Blow-ups whose loss is not finite in PyTorch either: gpt2 with
// every weight and bias 1e30 (a NaN loss), llama with a head of N(0, 1e37^2) (logits past float's range: an
// inf loss). The quick tier runs gpt2 on the CPU and the default GPU mode.
static void test_blowups(const char* dir) {
    char path[256], name[32];
    const char* blowups[] = {"-a gpt2 -b 4 -I constant:1e30,bias=constant:1e30",
                             "-a llama -G 1 -K 2 -b 2 -d 128 -I llama,head=normal:1e37"};
    for (int pi = 0; pi < (full_tier() ? 2 : 1); pi++) {
        char first[512] = "", said[512] = "";
        int ok = 1;
        for (int g = 0; g < (full_tier() ? 5 : 2); g++) {
            char* err;
            snprintf(name, sizeof(name), "blow%d%d", pi, g);
            int st = blowup_run(dir, name, g, blowups[pi], 1, &err);
            snprintf(path, sizeof(path), "%s/%s/ckpt_000001.bin", dir, name);
            int line_ok = err && strstr(err, "training stopped") && strchr(err, '\n') == err + strlen(err) - 1;
            if (!g && line_ok) snprintf(first, sizeof(first), "%s", err);
            if (!(WIFEXITED(st) && WEXITSTATUS(st) == 1 && line_ok && !strcmp(err, first) &&
                  access(path, F_OK) != 0) && ok) {
                snprintf(said, sizeof(said), "; but %s: exit %d, %s%.*s", blowup_modes[g],
                         WIFEXITED(st) ? WEXITSTATUS(st) : -1, access(path, F_OK) ? "" : "a checkpoint written, ",
                         err ? (int)strcspn(err, "\n") : 0, err ? err : "");
                ok = 0;
            }
            free(err);
        }
        check(ok, "%s: every trainer stops alike, exit 1, no checkpoint: %.*s%s", blowups[pi],
              (int)strcspn(first, "\n"), first, said);
    }
    // Not a blow-up: -I constant:1e30 (weights 1e30, norms 1, biases 0) makes every row of the stream
    // one constant, which the norms map to 0: the loss is ln 256 and, in PyTorch (float32), every gradient
    // is finite (gpt2: a rounding residue in lnf.b's, norm about 1e25; llama: 0). The norms' variance
    // overflows to inf, so rstd is 0; their backward forms xhat = (x - mu) rstd before multiplying by the
    // gradient, as PyTorch does, and so trains on too: every trainer exits 0 with a finite norm at every
    // step and writes its checkpoint (once the CPU's backward overflowed to inf x 0 = NaN and stopped).
    const char* dead[] = {"-a gpt2 -b 4 -I constant:1e30", "-a llama -G 1 -K 2 -b 2 -I constant:1e30"};
    for (int pi = 0; pi < (full_tier() ? 2 : 1); pi++) {
        char said[512] = "";
        int ok = 1;
        for (int g = 0; g < (full_tier() ? 5 : 2); g++) {
            char* err;
            snprintf(name, sizeof(name), "dead%d%d", pi, g);
            int st = blowup_run(dir, name, g, dead[pi], 0, &err);
            snprintf(path, sizeof(path), "%s/%s/log.jsonl", dir, name);
            char* log = read_file_text(path);
            int steps = 0, finite = 1;
            for (const char* q = log; q && (q = strstr(q, "\"grad_norm\":")); q += 12, steps++)
                finite &= isfinite(atof(q + 12));        // the train line's %.6f: nan, inf as such
            free(log);
            snprintf(path, sizeof(path), "%s/%s/ckpt_000004.bin", dir, name);
            if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0 && steps == 4 && finite && access(path, F_OK) == 0) && ok) {
                snprintf(said, sizeof(said), "; but %s: exit %d, %d steps logged%s, %.*s", blowup_modes[g],
                         WIFEXITED(st) ? WEXITSTATUS(st) : -1, steps, finite ? "" : ", a norm not finite",
                         err ? (int)strcspn(err, "\n") : 0, err ? err : "");
                ok = 0;
            }
            free(err);
        }
        check(ok, "%s: every trainer trains on as PyTorch does (exit 0, 4 finite gradient norms, a checkpoint)%s",
              dead[pi], said);
    }
}

// Both binaries train on the same synthetic corpus with the same flags, every probe on (-p 2): the
// losses of every step, and every number of every probe line, must agree. The GPU run computes its
// probes on the host from the weights it downloads, so this shows that the weights track the CPU's
// and that the probe path of the GPU engine writes the same lines. One tensor is left out: the key
// bias attn.bk. Its gradient is zero in exact arithmetic (softmax is shift-invariant) and rounding
// noise near 1e-11 in both trainers; AdamW divides by sqrt(v), so that noise moves bk by lr-sized
// steps in directions that differ between the two. The loss does not depend on bk at all. The llama
// run takes its 4 rows per update as 2 micro-batches of 2 (-d): the GPU engine accumulates, and its
// probe steps replay both micro-batches on the host. Each run ends with a sample of 24 tokens, which
// must be the same text in both; the third run is muP's, whose logit and attention scales change the
// forward that sampling runs.
static void test_binaries(void) {
    if (access("./train_gpt2", X_OK) != 0 || access(GPU_TRAINER, X_OK) != 0) {
#ifdef CUDA_CPU_RUNTIME
        check(0, "./train_gpt2 and " GPU_TRAINER " are built by `make test_gpt2cu_cpu`: one is missing");
#else
        printf("  (./train_gpt2 or " GPU_TRAINER " missing: the binary comparison did not run)\n");
#endif
        return;
    }
    char dir[] = "/tmp/test_gpt2cu.XXXXXX";
    if (!mkdtemp(dir)) { check(0, "cannot create a temporary directory"); return; }
    char path[256], cmd[1024];
    write_corpus(dir);
    // muP changes the forward (the logits' and attention's scales): its samples are compared too
    const char* presets[] = {"-a gpt2 -b 4", "-a llama -G 1 -K 2 -b 2 -d 128", "-a gpt2 -b 4 -I mup --tie 0"};
    for (int pi = 0; pi < 3; pi++) {
        char flags[256], logs[2][300], outs[2][300];
        snprintf(flags, sizeof(flags), "%s -L 2 -C 64 -H 4 -t 32 -x 4 -v 0 -S 24 -n 0 -p 2", presets[pi]);
        int st[2];
        for (int g = 0; g < 2; g++) {
            snprintf(cmd, sizeof(cmd), "%s%s -i %s/train.txt -j %s/val.txt -o %s/run%d%d %s > %s/run%d%d.txt 2>&1",
                     g ? GPU_TRAINER : "./train_gpt2", g ? " --tf32 0" : "", dir, dir, dir, pi, g, flags, dir, pi, g);
            st[g] = system(cmd);
            snprintf(logs[g], sizeof(logs[g]), "%s/run%d%d/log.jsonl", dir, pi, g);
            snprintf(outs[g], sizeof(outs[g]), "%s/run%d%d.txt", dir, pi, g);
        }
        // the samples at the end: the same tokens from both trainers (float32 on the GPU, the same seed)
        char* text[2];
        const char* sample[2];
        for (int g = 0; g < 2; g++) {
            text[g] = read_file_text(outs[g]);
            sample[g] = text[g] ? strstr(text[g], "---- sample at step 4 ----") : NULL;
        }
        size_t len = sample[0] ? strcspn(sample[0] + 27, "\n") : 0;
        check(sample[0] && sample[1] && len == 25 && !strncmp(sample[0], sample[1], 27 + len),
              "%s: the two trainers sample the same 24 tokens after the prompt (%s)", presets[pi],
              sample[0] && sample[1] && !strncmp(sample[0], sample[1], 27 + len) ? "equal" : "they differ");
        free(text[0]);
        free(text[1]);
        double lc[4], lg[4], worst_loss, worst_probe;
        char where_probe[300];
        int nc = read_losses(logs[0], lc, 4), ng = read_losses(logs[1], lg, 4);
        worst_loss = (nc == 4 && ng == 4) ? 0.0 : INFINITY;
        for (int i = 0; i < 4 && i < nc && i < ng; i++) worst_loss = fmax(worst_loss, fabs(lg[i] - lc[i]) / fabs(lc[i]));
        check(st[0] == 0 && st[1] == 0 && worst_loss < TRAIN_RTOL,
              "%s: " GPU_TRAINER " and ./train_gpt2 log the same losses for the same flags (exit %d/%d, worst "
              "relative diff %.2e)", presets[pi], st[0], st[1], worst_loss);
        int n = compare_events(logs[0], logs[1], "probe", "attn.bk\"", PROBE_RTOL, PROBE_ATOL, &worst_probe, where_probe,
                               sizeof(where_probe));
        check(n > 100 && worst_probe <= 1.0,
              "%s: all %d probe lines have the same fields, and agree in every number but attn.bk's (worst %.2f of the bound, at %s)", presets[pi], n,
              worst_probe, where_probe);
    }
    // --kernels plain (Part I) against the fast kernels, 20 steps of both presets: with --tf32 0 within the
    // float32 bound (TRAIN_RTOL), and against the default (TF32) within TF32's (TF32_TRAIN_RTOL)
    const char* kernel_presets[] = {"-a gpt2", "-a llama -G 1 -K 2 --bias 1"};
    const char* variants[] = {"--kernels plain", "--kernels fast --tf32 0", ""};
    for (int pi = 0; pi < 2; pi++) {
        double losses[3][20];
        int ok = 1;
        for (int v = 0; v < 3; v++) {
            snprintf(cmd, sizeof(cmd), "%s %s %s -L 2 -C 64 -H 4 -b 4 -t 32 -x 20 -v 0 -S 0 -n 0 -i %s/train.txt "
                     "-j %s/val.txt -o %s/kernels%d%d > %s/kernels%d%d.txt 2>&1", GPU_TRAINER, variants[v],
                     kernel_presets[pi], dir, dir, dir, pi, v, dir, pi, v);
            snprintf(path, sizeof(path), "%s/kernels%d%d/log.jsonl", dir, pi, v);
            ok &= system(cmd) == 0 && read_losses(path, losses[v], 20) == 20;
        }
        double worst[3] = {0.0, 0.0, 0.0};
        for (int v = 1; v < 3; v++)
            for (int i = 0; ok && i < 20; i++)
                worst[v] = fmax(worst[v], fabs(losses[v][i] - losses[0][i]) / fabs(losses[0][i]));
        check(ok && worst[1] < TRAIN_RTOL, "%s: --kernels plain and fast (--tf32 0) log the same 20 losses "
              "(worst relative diff %.2e, bound %.0e)", kernel_presets[pi], worst[1], TRAIN_RTOL);
        check(ok && worst[2] < TF32_TRAIN_RTOL, "%s: --kernels plain and the default (fast, TF32) log the same 20 "
              "losses (worst relative diff %.2e, bound %.1e)", kernel_presets[pi], worst[2], TF32_TRAIN_RTOL);
    }
    test_blowups(dir);
    // refused in one line: the plain kernels with bf16 (float32 only); this binary's own flags given
    // twice, like every other flag; an output that is an input (the host code train_gpt2.c checks)
    struct { const char* flags; const char* expect; } refusals[] = {
        {"--kernels plain --dtype bf16", "float32 only"},
        {"--tf32 1 --tf32 0", "flag --tf32 is given twice (1, then 0)"},
        {"--kernels fast --kernels plain", "flag --kernels is given twice (fast, then plain)"},
        {"--dtype fp32 --dtype bf16", "flag --dtype is given twice (fp32, then bf16)"},
        {"--nccl-timeout 5 --nccl-timeout 6", "flag --nccl-timeout is given twice (5, then 6)"},
        {"--zero 0 --zero 1", "flag --zero is given twice (0, then 1)"},
        {"--save-llmc @/train.txt", "--save-llmc @/train.txt and -i @/train.txt are the same file"},
    };
    for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++) {
        char flags[512], expect[512];
        expand_at(refusals[i].flags, dir, flags, sizeof(flags));
        expand_at(refusals[i].expect, dir, expect, sizeof(expect));
        snprintf(cmd, sizeof(cmd), "%s %s -i %s/train.txt -j %s/val.txt -L 1 -C 32 -H 2 -t 16 -b 2 -x 1 -S 0 "
                 "> /dev/null 2> %s/refused.txt", GPU_TRAINER, flags, dir, dir, dir);
        int refused = system(cmd);
        snprintf(path, sizeof(path), "%s/refused.txt", dir);
        char* err = read_file_text(path);
        check(WIFEXITED(refused) && WEXITSTATUS(refused) == 1 && err && strstr(err, expect) &&
              strchr(err, '\n') == err + strlen(err) - 1, "%s is refused with one line: %.*s", refusals[i].flags,
              err ? (int)strcspn(err, "\n") : 9, err ? err : "(nothing)");
        free(err);
    }
    // activations of hundreds of GiB (without any T x T matrix on the device): refused before any cudaMalloc,
    // with one line
    snprintf(cmd, sizeof(cmd), "%s -i %s/train.txt -j %s/val.txt -L 2 -C 64 -H 1 -b 65536 -t 1024 -v 0 -S 0 -x 1 "
             "> %s/big.txt 2> %s/big_err.txt", GPU_TRAINER, dir, dir, dir, dir);
    int big = system(cmd);
    snprintf(path, sizeof(path), "%s/big_err.txt", dir);
    FILE* f = fopen(path, "r");
    char err[512] = "";
    if (f && !fgets(err, sizeof(err), f)) err[0] = 0;
    if (f) fclose(f);
    check(WIFEXITED(big) && WEXITSTATUS(big) == 1 && strstr(err, "MiB of GPU memory but"),
          "a run larger than the device's memory is refused: %.*s", (int)strcspn(err, "\n"), err);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) printf("  (could not remove %s)\n", dir);
}

// ---- the source as a tutorial ------------------------------------------------------------------------------
// Part I of train_gpt2.cu is read by students before Part II: its first kernel comes early, its lines fit
// 100 columns, and it uses none of Part II's devices (templates, lambdas, shared memory, atomics, bf16,
// tensor cores). The whole file stays under 5% of lines wider than 100 columns. Widths in characters.
static void test_source_layout(void) {
    FILE* f = fopen("train_gpt2.cu", "r");
    if (!f) { check(0, "cannot read train_gpt2.cu (run from the repository root)"); return; }
    char line[4096];
    const char* banned[] = {"template", "[&]", "__shared__", "atomic", "bfloat16", "wmma", "__shfl"};
    int n = 0, wide = 0, part = 0, first_kernel = 0, part1_wide = 0, part1_banned = 0;
    char what[200] = "";
    while (fgets(line, sizeof(line), f)) {
        n++;
        if (strstr(line, "// PART I. ")) part = 1;
        if (strstr(line, "// PART II. ")) part = 2;
        int width = 0;
        for (const char* c = line; *c && *c != '\n'; c++) width += ((unsigned char)*c & 0xC0) != 0x80;
        wide += width > 100;
        if (!first_kernel && strncmp(line, "__global__", 10) == 0) first_kernel = n;
        if (part != 1) continue;
        part1_wide += width > 100;
        char* comment = strstr(line, "//");          // code only: the comments may name what Part I avoids
        if (comment) *comment = 0;
        for (const char* b : banned)
            if (strstr(line, b) && !part1_banned++) snprintf(what, sizeof(what), "%s at line %d", b, n);
    }
    fclose(f);
    check(first_kernel > 0 && first_kernel <= 150, "train_gpt2.cu's first kernel is at line %d (at most 150)",
          first_kernel);
    check(part == 2 && part1_wide == 0 && part1_banned == 0, "Part I of train_gpt2.cu: %d lines wider than 100 "
          "columns, %d with a template, lambda, shared memory, atomic, bf16 or tensor core%s%s", part1_wide,
          part1_banned, what[0] ? ": " : "", what);
    check(wide * 20 < n, "train_gpt2.cu: %d of %d lines (%.1f%%) wider than 100 columns (under 5%%)", wide, n,
          100.0 * wide / n);
}

// ---- 5. several ranks over NCCL, on the CPU runtime --------------------------------------------------------
// Processes of the GPU trainer (its NCCL is the runtime's, dev/cuda_cpu/nccl.h: real processes, shared
// memory) started as a launcher starts them: with torchrun's variables, Open MPI's (mpirun), MPICH's, Slurm's
// (srun), or --rank and --world-size (a shell loop), meeting in -o DIR. Each run of N ranks is set against
// one process with the same global batch (-b N x B), the same flags otherwise: its log (every training loss,
// gradient norm and validation loss), its last checkpoint (every parameter and both AdamW moments, per
// tensor), its sample. What differs is rounding only: the ranks' gradients are averaged from per-rank means
// instead of one mean, in another order (MR_RTOL below). One rank through NCCL (--world-size 1) must give the
// plain run's files bit for bit. Then a resume on another number of ranks and on the CPU trainer, a rank
// killed, one stopped, one that never comes, ranks started with different flags, data or world sizes, and
// bad ranks: each refused or stopped with one line, never a hang. TRAIN_GPT2CU names another trainer binary
// (dev/cuda_cpu/mutants.sh: a mutant's); TEST_SECTIONS=multirank runs this section alone.
#ifdef CUDA_CPU_RUNTIME
// Every logged loss and norm, and every parameter and moment of the last checkpoint per tensor (relative
// L2), of N ranks against one process. Measured at most 3.5e-7 (losses and norms: the log's 6 decimals
// included) and 1.9e-6 (tensors) over the runs below: N means averaged where one process takes one mean
// differ in their last bits, which AdamW's division by sqrt(v) amplifies where gradients are near zero.
// The bounds leave about 30 and 50 times that. attn.bk is left out, as in the binaries' comparison above:
// its gradient is rounding noise.
#define MR_RTOL 1e-4
#define MR_LOG_RTOL 1e-5
#define CUDA_CPU_NONCCL "dev/cuda_cpu/gen/train_gpt2cu_nonccl"

static char g_mr_trainer[4096];
static char g_mr_dir[64];

static pid_t mr_start(const char* cwd, const char* vars, const char* args, const char* out) {
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "cd %s && exec env OMP_NUM_THREADS=1 CUDA_CPU_RACECHECK=0 %s %s %s > %s.out 2> %s.err",
             cwd, vars, g_mr_trainer, args, out, out);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char*)NULL);
        _exit(127);
    }
    return pid;
}

// The exit status of pid within seconds, or -1: it was still running and has been killed
static int mr_wait(pid_t pid, double seconds) {
    double t0 = now_ms();
    int st;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (now_ms() - t0 > seconds * 1e3) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(20000);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// The launcher's variables for rank r of n, by form: what each launcher sets in its processes' environment
static void mr_vars(char* out, size_t cap, const char* form, int r, int n) {
    if (!strcmp(form, "torchrun")) snprintf(out, cap, "RANK=%d WORLD_SIZE=%d LOCAL_RANK=%d", r, n, r);
    else if (!strcmp(form, "mpirun")) snprintf(out, cap, "OMPI_COMM_WORLD_RANK=%d OMPI_COMM_WORLD_SIZE=%d "
                                               "OMPI_COMM_WORLD_LOCAL_RANK=%d", r, n, r);
    else if (!strcmp(form, "mpich")) snprintf(out, cap, "PMI_RANK=%d PMI_SIZE=%d", r, n);
    else snprintf(out, cap, "SLURM_PROCID=%d SLURM_NTASKS=%d SLURM_LOCALID=%d", r, n, r);     // srun
}

// N ranks of `form` with args into D/name (one process without a form); 1 if every rank ended with status 0
// (each within 120 s), and rank > 0 printed nothing
static int mr_run(const char* name, int n, const char* form, const char* args) {
    pid_t pid[8];
    char vars[256], full[4096], out[512];
    for (int r = 0; r < n; r++) {
        int flags = form && !strcmp(form, "flags");
        vars[0] = 0;
        if (form && !flags) mr_vars(vars, sizeof(vars), form, r, n);
        snprintf(full, sizeof(full), "%s -o %s/%s", args, g_mr_dir, name);
        if (flags) snprintf(full + strlen(full), sizeof(full) - strlen(full), " --rank %d --world-size %d", r, n);
        snprintf(out, sizeof(out), "%s/%s.r%d", g_mr_dir, name, r);
        pid[r] = mr_start(g_mr_dir, vars, full, out);
    }
    int ok = 1;
    for (int r = 0; r < n; r++) ok &= mr_wait(pid[r], 120) == 0;
    for (int r = 1; r < n; r++) {
        snprintf(out, sizeof(out), "%s/%s.r%d.out", g_mr_dir, name, r);
        struct stat st;
        ok &= stat(out, &st) == 0 && st.st_size == 0;
    }
    return ok;
}

// The numbers after "field": in the log's lines of one event, in order; returns the count
static int mr_field(const char* log, const char* event, const char* field, double* out, int max) {
    FILE* f = fopen(log, "r");
    if (!f) return 0;
    char line[8192], tag[64], key[64];
    snprintf(tag, sizeof(tag), "\"event\":\"%s\"", event);
    snprintf(key, sizeof(key), "\"%s\":", field);
    int k = 0;
    while (k < max && fgets(line, sizeof(line), f)) {
        const char* p = strstr(line, key);
        if (strstr(line, tag) && p) out[k++] = atof(p + strlen(key));
    }
    fclose(f);
    return k;
}

// The worst relative difference of the train losses, gradient norms and validation losses of log a against
// log b (INFINITY where a has none, or not as many; a resumed run's against b's last ones)
static double mr_log_diff(const char* a, const char* b, int resumed) {
    const char* what[3][2] = {{"train", "train_loss"}, {"train", "grad_norm"}, {"val", "val_loss"}};
    double worst = 0.0, x[64], y[64];
    for (int w = 0; w < 3; w++) {
        int na = mr_field(a, what[w][0], what[w][1], x, 64), nb = mr_field(b, what[w][0], what[w][1], y, 64);
        if (na == 0 || na > nb || (na < nb && !resumed)) return INFINITY;
        for (int i = 0; i < na; i++) worst = fmax(worst, fabs(x[i] - y[nb - na + i]) / fmax(fabs(y[nb - na + i]), 1e-30));
    }
    return worst;
}

// A checkpoint into a Model built from its own header; 0 if it cannot be read
static int mr_load(const char* path, Model* m) {
    FILE* f = fopen(path, "rb");
    CkptHeader h;
    int ok = f && fread(&h, sizeof(h), 1, f) == 1;
    if (f) fclose(f);
    if (!ok) return 0;
    model_build(m, &h.cfg);
    Rng g1, g2;
    Ema spike[2];
    checkpoint_load(m, path, &g1, &g2, spike);
    return 1;
}

// The worst relative L2 difference of any tensor (attn.bk aside) in the parameters or either moment of two
// checkpoints, and where; INFINITY if one is missing
static double mr_ckpt_diff(const char* a, const char* b, char* where, size_t cap) {
    Model x, y;
    snprintf(where, cap, "%s missing", a);
    if (!mr_load(a, &x)) return INFINITY;
    snprintf(where, cap, "%s missing", b);
    if (!mr_load(b, &y)) { model_free(&x); return INFINITY; }
    double worst = 0.0;
    const char* block[3] = {"weights", "first moment", "second moment"};
    float* xs[3] = {x.params, x.adam_m, x.adam_v};
    float* ys[3] = {y.params, y.adam_m, y.adam_v};
    snprintf(where, cap, "-");
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < x.num_tensors; i++) {
            const Tensor* t = &x.tensors[i];
            if (strstr(t->name, "attn.bk")) continue;
            double ref, d = l2_diff(xs[k] + t->offset, ys[k] + t->offset, t->numel, &ref);
            double rel = d / fmax(ref, 1e-30);
            if (rel > worst) {
                worst = rel;
                snprintf(where, cap, "%s's %s", t->name, block[k]);
            }
        }
    model_free(&x);
    model_free(&y);
    return worst;
}

static char* mr_read(const char* name, const char* suffix) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s%s", g_mr_dir, name, suffix);
    char* t = read_file_text(path);
    return t ? t : strdup("");
}

// N ranks of `form` against the one-process run `base`, both with `args` (-b: the ranks' rows each)
static void mr_compare(const char* title, const char* name, int n, const char* form, const char* args, const char* base,
                       const char* zero, int sample) {
    char full[2048], a[512], b[512], where[256];
    snprintf(full, sizeof(full), "%s %s", args, zero);
    double t0 = now_ms();
    int ok = mr_run(name, n, form, full);
    double secs = (now_ms() - t0) / 1e3;
    snprintf(a, sizeof(a), "%s/%s/log.jsonl", g_mr_dir, name);
    snprintf(b, sizeof(b), "%s/%s/log.jsonl", g_mr_dir, base);
    double logd = mr_log_diff(a, b, strstr(args, " -y ") != NULL);
    char* lg = read_file_text(a);
    char ranks[32];
    snprintf(ranks, sizeof(ranks), "\"ranks\":%d,", n);
    int logged = lg && strstr(lg, ranks) != NULL;
    free(lg);
    snprintf(a, sizeof(a), "%s/%s/ckpt_000004.bin", g_mr_dir, name);
    snprintf(b, sizeof(b), "%s/%s/ckpt_000004.bin", g_mr_dir, base);
    double ckd = mr_ckpt_diff(a, b, where, sizeof(where));
    char* err = mr_read(name, ".r0.err");
    check(ok && logged && logd <= MR_LOG_RTOL && ckd <= MR_RTOL,
          "%s: %d ranks (%s%s%s) against one process: losses and norms within %.1e (bound %.0e), every tensor of "
          "the last checkpoint within %.1e (bound %.0e, at %s); the log says %d ranks; ranks > 0 print nothing "
          "(%.1f s)%s%.*s", title, n, form, *zero ? ", " : "", zero, logd, MR_LOG_RTOL, ckd, MR_RTOL, where,
          n, secs, *err ? "; rank 0: " : "", (int)strcspn(err, "\n"), err);
    free(err);
    if (!sample) return;
    char *x = mr_read(name, ".r0.out"), *y = mr_read(base, ".r0.out");
    const char *sx = strstr(x, "---- sample at step 4 ----"), *sy = strstr(y, "---- sample at step 4 ----");
    check(sx && sy && !strncmp(sx, sy, 27 + strcspn(sy + 27, "\n")), "%s: %d ranks sample the one process's text",
          title, n);
    free(x);
    free(y);
}

// A run that must stop: every rank's exit status 1 within `seconds`, each rank's stderr one line holding
// `want` (on the ranks in `which`, a bit mask; the others may say something else)
static void mr_refused(const char* title, const char* name, int n, const char* const* vars, const char* args,
                       const char* const* extra, const char* want, unsigned which, double seconds) {
    pid_t pid[8];
    char out[512], full[4096];
    for (int r = 0; r < n; r++) {
        snprintf(out, sizeof(out), "%s/%s.r%d", g_mr_dir, name, r);
        snprintf(full, sizeof(full), "%s %s", args, extra ? extra[r] : "");    // flags rank r alone is given
        pid[r] = mr_start(g_mr_dir, vars[r], full, out);
    }
    double t0 = now_ms();
    int ok = 1;
    char said[300] = "";
    for (int r = 0; r < n; r++) {
        int st = mr_wait(pid[r], seconds + 30);
        char suffix[32];
        snprintf(suffix, sizeof(suffix), ".r%d.err", r);
        char* err = mr_read(name, suffix);
        int one_line = err[0] && strchr(err, '\n') == err + strlen(err) - 1;
        int says = !(which >> r & 1) || strstr(err, want);
        if (r == 0 || !(one_line && says && st == 1)) snprintf(said, sizeof(said), "rank %d, exit %d: %.*s", r, st,
                                                               (int)strcspn(err, "\n"), err);
        ok &= st == 1 && one_line && says;
        free(err);
    }
    double secs = (now_ms() - t0) / 1e3;
    check(ok && secs <= seconds, "%s: every rank exits 1 within %.0f s (%.1f s), with one line; %s", title, seconds,
          secs, said);
}

// Two ranks train until the log has 2 steps, then rank 1 gets sig (SIGKILL: it dies; SIGSTOP: it hangs):
// rank 0 must exit 1 within the time its --nccl-timeout allows, with one line that contains want
static void mr_fault(const char* name, int timeout, int sig, const char* want, const char* what) {
    char args[512], a[600], b[600], path[600];
    snprintf(args, sizeof(args), "--tf32 0 -i train.txt -j val.txt -L 2 -C 64 -H 4 -t 32 -x 100000 -v 0 -S 0 -n 0 "
             "-b 2 --nccl-timeout %d -o %s", timeout, name);
    snprintf(a, sizeof(a), "%s/%s.r0", g_mr_dir, name);
    snprintf(b, sizeof(b), "%s/%s.r1", g_mr_dir, name);
    pid_t p0 = mr_start(g_mr_dir, "RANK=0 WORLD_SIZE=2", args, a);
    pid_t p1 = mr_start(g_mr_dir, "RANK=1 WORLD_SIZE=2", args, b);
    double x[4];
    snprintf(path, sizeof(path), "%s/%s/log.jsonl", g_mr_dir, name);
    for (double t = now_ms(); mr_field(path, "train", "train_loss", x, 4) < 2 && now_ms() - t < 60e3;) usleep(50000);
    kill(p1, sig);
    if (sig == SIGKILL) waitpid(p1, NULL, 0);       // gone, as a launcher would see it
    double tk = now_ms();
    int st = mr_wait(p0, 30);
    if (sig != SIGKILL) {
        kill(p1, SIGKILL);
        waitpid(p1, NULL, 0);
    }
    char* err = mr_read(name, ".r0.err");
    check(st == 1 && strstr(err, want) && strchr(err, '\n') == err + strlen(err) - 1,
          "%s: rank 0 exits 1 after %.2f s (--nccl-timeout %d) with one line: %.*s", what, (now_ms() - tk) / 1e3,
          timeout, (int)strcspn(err, "\n"), err);
    free(err);
}

// ---- (full tier) bf16 on several ranks, and shard layouts that cut the block where it matters -------------
// The layouts of test_multirank's model put every --zero 1 shard boundary at 2 ranks inside a tensor whose
// neighbours decay alike, and fill the last shard exactly (llama's at 3 ranks too); a shard's AdamW table
// that gave its first elements the next tensor's decay showed only in gpt2 at 3 ranks, at 4.9 times its
// bound. The models below were found by a search over the widths (and checked here, by shard_layout_cuts
// with the trainer's zero_shard, every run) so that at 2 and at 3 ranks, for both presets, a boundary cuts
// a decayed matrix just before a tensor that does not decay and the last shard is partial. Weight decay 10
// without warmup (-c 10 -u 1) makes a misplaced decay move the weights it touches by about 5% over the 4
// steps, against the float32 bound of 1e-4 (the default flags: about 1e-4). Then --dtype bf16 (below).
typedef struct { const char *title, *preset; int L, C, H, KVH, gate, F, maxT; } ShardModel;
static const ShardModel shard_models[] = {
    {"gpt2", "gpt2", 2, 32, 2, 0, 0, 0, 33},
    {"llama, gated, MQA", "llama", 2, 32, 4, 1, 1, 24, 0},
};
// bf16 on several ranks. 2 ranks of 3 rows against one process of 6: the rows' forward and backward are the
// same bits (the same kernels; the mean's 1/(3 T) is 1/(6 T) times 2, so the logits' gradient rounds to the
// same bf16 values), and what differs is the gradients' sums (each rank's GEMM, then the average, where one
// process sums all rows in one GEMM), in float32, and then wherever AdamW's updated weights round to another
// bf16 value. Measured at most 3.5e-6 (log) and 6.1e-4 (a checkpoint tensor: a gate weight's second moment);
// the bounds leave 30 and 16 times that. At 3 ranks the mean's 1/(2 T) against 1/(6 T) rounds the logits'
// gradient to other bf16 values, and the runs part at bf16's own noise (gradient norms 2.4e-3 apart after 4
// steps): --zero 1 there is held to the all-reduce of the same ranks instead, which computes the same sums
// (on the CPU runtime the same bits), at the same bounds.
#define BF16_MR_LOG_RTOL 1e-4
#define BF16_MR_RTOL 1e-2

// Where n ranks' shards cut m's parameter block (zero_shard, the trainer's own): 1 if the last shard is
// partial and a boundary falls inside a tensor that is followed by one that decays otherwise; *where names it
static int shard_layout_cuts(const Model* m, int n, char* where, size_t cap) {
    int saved_rank = g_zero.rank, saved_ranks = g_zero.ranks, cuts = 0;
    g_zero.rank = 0;
    g_zero.ranks = n;
    Shard sh = zero_shard(m->num_params);
    g_zero.rank = saved_rank;
    g_zero.ranks = saved_ranks;
    snprintf(where, cap, "no boundary cuts a tensor before one of the other decay");
    for (int r = 1; r < n; r++) {
        size_t b = (size_t)r * sh.n;
        for (int i = 0; i + 1 < m->num_tensors; i++) {
            const Tensor *t = &m->tensors[i], *next = &m->tensors[i + 1];
            if (t->offset < b && b < t->offset + t->numel && t->decay != next->decay) {
                snprintf(where, cap, "boundary %zu cuts %s (%s) before %s (%s)", b, t->name,
                         t->decay ? "decays" : "no decay", next->name, next->decay ? "decays" : "no decay");
                cuts = 1;
            }
        }
    }
    return cuts && sh.padded > m->num_params;
}

// N ranks ("flags" launch) against the run `base` (one process, or in bf16 the all-reduce), within the bounds
static void mr_within(const char* title, const char* name, int n, const char* args, const char* base,
                      double log_bound, double ckpt_bound) {
    char a[512], b[512], where[256];
    int ok = mr_run(name, n, "flags", args);
    snprintf(a, sizeof(a), "%s/%s/log.jsonl", g_mr_dir, name);
    snprintf(b, sizeof(b), "%s/%s/log.jsonl", g_mr_dir, base);
    double logd = mr_log_diff(a, b, 0);
    snprintf(a, sizeof(a), "%s/%s/ckpt_000004.bin", g_mr_dir, name);
    snprintf(b, sizeof(b), "%s/%s/ckpt_000004.bin", g_mr_dir, base);
    double ckd = mr_ckpt_diff(a, b, where, sizeof(where));
    char* err = mr_read(name, ".r0.err");
    check(ok && logd <= log_bound && ckd <= ckpt_bound, "%s, %d ranks: losses and norms "
          "within %.1e (bound %.0e), every tensor of the last checkpoint within %.1e (bound %.0e, at %s)%s%.*s",
          title, n, logd, log_bound, ckd, ckpt_bound, where, *err ? "; rank 0: " : "", (int)strcspn(err, "\n"), err);
    free(err);
}

static void test_multirank_layouts(void) {
    for (const ShardModel& sm : shard_models) {
        Options op;
        options_default(&op);
        op.preset = sm.preset;
        op.L = sm.L; op.C = sm.C; op.H = sm.H; op.KVH = sm.KVH; op.gate = sm.gate; op.F = sm.F; op.T = 32;
        op.maxT = sm.maxT;
        Config cfg = config_from_options(&op, 256);
        Model m;
        model_build(&m, &cfg);
        char args[1024], f[1200], where[256], one[64], run[64], ref[64], title[256];
        snprintf(args, sizeof(args), "-i train.txt -j val.txt -x 4 -v 2 -m 2 -n 2 -S 0 -u 1 -c 10 -a %s -L %d -C %d "
                 "-H %d -K %d -G %d -F %d -t 32 -T %d", sm.preset, sm.L, sm.C, sm.H, cfg.KVH, sm.gate, cfg.F,
                 cfg.maxT);
        // float32: the layouts, N ranks with --zero 1 against one process
        snprintf(f, sizeof(f), "%s --tf32 0 -b 6", args);
        snprintf(one, sizeof(one), "%s_one", sm.preset);
        check(mr_run(one, 1, NULL, f), "%s: one process of 6 rows trains", sm.title);
        for (int n = 2; n <= 3; n++) {
            int ok = shard_layout_cuts(&m, n, where, sizeof(where));
            check(ok, "%s, %d ranks: the last of the %d shards of %zu parameters is partial; %s", sm.title, n, n,
                  m.num_params, where);
            snprintf(f, sizeof(f), "%s --tf32 0 -b %d --zero 1", args, 6 / n);
            snprintf(run, sizeof(run), "%s_z%d", sm.preset, n);
            snprintf(title, sizeof(title), "%s, --zero 1 against one process", sm.title);
            mr_within(title, run, n, f, one, MR_LOG_RTOL, MR_RTOL);
        }
        // bf16: 2 ranks against one process; --zero 1 against the all-reduce at 2 and 3 ranks
        snprintf(f, sizeof(f), "%s --dtype bf16 -b 6", args);
        snprintf(one, sizeof(one), "%s_one16", sm.preset);
        check(mr_run(one, 1, NULL, f), "%s, --dtype bf16: one process of 6 rows trains", sm.title);
        for (int n = 2; n <= 3; n++) {
            snprintf(f, sizeof(f), "%s --dtype bf16 -b %d", args, 6 / n);
            snprintf(ref, sizeof(ref), "%s_ar16_%d", sm.preset, n);
            snprintf(title, sizeof(title), "%s, --dtype bf16, against one process", sm.title);
            if (n == 2) mr_within(title, ref, n, f, one, BF16_MR_LOG_RTOL, BF16_MR_RTOL);
            else check(mr_run(ref, n, "flags", f), "%s, --dtype bf16: %d ranks train", sm.title, n);
            snprintf(f + strlen(f), sizeof(f) - strlen(f), " --zero 1");
            snprintf(run, sizeof(run), "%s_z16_%d", sm.preset, n);
            snprintf(title, sizeof(title), "%s, --dtype bf16, --zero 1 against the all-reduce", sm.title);
            mr_within(title, run, n, f, ref, BF16_MR_LOG_RTOL, BF16_MR_RTOL);
        }
        model_free(&m);
    }
}

static void test_multirank(void) {
    if (access(GPU_TRAINER, X_OK) != 0 && !getenv("TRAIN_GPT2CU")) {
        check(0, GPU_TRAINER " is built by `make test_gpt2cu_cpu`: it is missing");
        return;
    }
    if (!realpath(getenv("TRAIN_GPT2CU") ? getenv("TRAIN_GPT2CU") : GPU_TRAINER, g_mr_trainer)) {
        check(0, "cannot find the trainer %s", getenv("TRAIN_GPT2CU"));
        return;
    }
    snprintf(g_mr_dir, sizeof(g_mr_dir), "/tmp/test_gpt2cu_mr.XXXXXX");
    if (!mkdtemp(g_mr_dir)) { check(0, "cannot create a temporary directory"); return; }
    char path[512], cmd[8192];
    write_corpus(g_mr_dir);
    double t0 = now_ms();
    char gpt2[1024], llama[1024], accum[1024], f[1500];
    const char* common = "--tf32 0 -i train.txt -j val.txt -L 2 -C 64 -H 4 -t 32 -x 4 -v 2 -m 2 -n 2";
    snprintf(gpt2, sizeof(gpt2), "%s -S 16", common);
    snprintf(llama, sizeof(llama), "%s -S 0 -a llama -G 1 -K 2", common);
    snprintf(accum, sizeof(accum), "%s -S 0 -d 384", common);    // 2 micro-batches of 6 rows

    // one process each, the global batch of 6 rows
    snprintf(f, sizeof(f), "%s -b 6", gpt2);
    int base_ok = mr_run("gpt2", 1, NULL, f);
    snprintf(f, sizeof(f), "%s -b 6", llama);
    base_ok &= mr_run("llama", 1, NULL, f);
    snprintf(f, sizeof(f), "%s -b 6", accum);
    base_ok &= mr_run("accum", 1, NULL, f);
    check(base_ok, "the one-process runs (gpt2, llama, gpt2 with 2 micro-batches) train");

    // one rank through NCCL gives the plain run's files bit for bit
    snprintf(f, sizeof(f), "%s -b 6", gpt2);
    int ok = mr_run("one", 1, "flags", f);
    snprintf(path, sizeof(path), "%s/gpt2/ckpt_000004.bin", g_mr_dir);
    snprintf(cmd, sizeof(cmd), "cmp -s %s %s/one/ckpt_000004.bin && cmp -s %s/gpt2/ckpt_000002.bin "
             "%s/one/ckpt_000002.bin", path, g_mr_dir, g_mr_dir, g_mr_dir);
    char a[512], b[512];
    snprintf(a, sizeof(a), "%s/one/log.jsonl", g_mr_dir);
    snprintf(b, sizeof(b), "%s/gpt2/log.jsonl", g_mr_dir);
    check(ok && system(cmd) == 0 && mr_log_diff(a, b, 0) == 0.0,
          "one rank through NCCL (--rank 0 --world-size 1): the same checkpoints, byte for byte, and log numbers");

    // N ranks of 6/N rows against the one-process run of 6 rows (ref), each launch form at least once
    const char* accum_title = "gpt2, -d 384 (2 micro-batches)";
    const struct { const char *title, *name; int ranks; const char *launch, *flags, *ref, *extra; int sample; } runs[] = {
        {"gpt2", "g2", 2, "torchrun", gpt2, "gpt2", "", 1},
        {"gpt2", "g3z", 3, "mpirun", gpt2, "gpt2", "--zero 1", 1},
        {"gpt2", "g2z", 2, "flags", gpt2, "gpt2", "--zero 1", 0},
        {accum_title, "a3", 3, "flags", accum, "accum", "", 0},
        {accum_title, "a2z", 2, "srun", accum, "accum", "--zero 1", 0},
        {"llama, gated, GQA", "l2z", 2, "mpich", llama, "llama", "--zero 1", 0},
        {"llama, gated, GQA", "l3", 3, "torchrun", llama, "llama", "", 0},
    };
    for (const auto& r : runs) {
        snprintf(f, sizeof(f), "%s -b %d", r.flags, 6 / r.ranks);
        mr_compare(r.title, r.name, r.ranks, r.launch, f, r.ref, r.extra, r.sample);
    }
    // --data-order llmc: 2 ranks read llm.c's shuffled order for 2 processes, rank r process r's rows,
    // as one process of llmc:2 reads them
    snprintf(f, sizeof(f), "%s -b 6 --data-order llmc:2", gpt2);
    check(mr_run("llmc", 1, NULL, f), "one process of 6 rows in llm.c's order for 2 processes trains");
    snprintf(f, sizeof(f), "%s -b 3 --data-order llmc", gpt2);
    mr_compare("llm.c's order (--data-order llmc)", "llmc2", 2, "torchrun", f, "llmc", "", 0);
    if (full_tier()) test_multirank_layouts();

    // the probes: rank 0 recomputes a probe step on the host over all the ranks' rows, so its lines are one
    // process's, and training is the run's without probes
    snprintf(f, sizeof(f), "%s -b 6 -p 2", gpt2);
    ok = mr_run("probes1", 1, NULL, f);
    snprintf(f, sizeof(f), "%s -b 3 -p 2", gpt2);
    ok &= mr_run("probes2", 2, "mpirun", f);
    {
        char where_probe[300];
        double worst_probe;
        snprintf(a, sizeof(a), "%s/probes1/log.jsonl", g_mr_dir);
        snprintf(b, sizeof(b), "%s/probes2/log.jsonl", g_mr_dir);
        int lines = compare_events(a, b, "probe", "attn.bk\"", PROBE_RTOL, PROBE_ATOL, &worst_probe, where_probe,
                                   sizeof(where_probe));
        snprintf(a, sizeof(a), "%s/gpt2/log.jsonl", g_mr_dir);
        double unchanged = mr_log_diff(b, a, 0);
        check(ok && lines > 100 && worst_probe <= 1.0 && unchanged <= MR_LOG_RTOL,
              "the probes on 2 ranks (-p 2): all %d probe lines as one process writes them (worst %.2f of the bound, "
              "at %s), and the losses and norms of the run without probes (within %.1e)", lines, worst_probe,
              where_probe, unchanged);
    }

    // resumed on another number of ranks: 2 ranks' (all-reduce) checkpoint on 3 with --zero 1, the 3 ranks'
    // sharded one on one process and on the CPU trainer
    snprintf(f, sizeof(f), "%s -b 2 -y %s/g2/ckpt_000002.bin", gpt2, g_mr_dir);
    mr_compare("resumed from 2 ranks' step 2", "g2to3", 3, "torchrun", f, "gpt2", "--zero 1", 1);
    snprintf(f, sizeof(f), "%s -b 6 -y %s/g3z/ckpt_000002.bin", gpt2, g_mr_dir);
    ok = mr_run("g3to1", 1, NULL, f);
    snprintf(a, sizeof(a), "%s/g3to1/ckpt_000004.bin", g_mr_dir);
    char where[256], repo[4096];
    double ckd = mr_ckpt_diff(a, path, where, sizeof(where));
    check(ok && ckd <= MR_RTOL, "3 ranks' --zero 1 checkpoint resumed on one process: the last checkpoint within "
          "%.1e of the uninterrupted run's (bound %.0e, at %s)", ckd, MR_RTOL, where);
    if (access("./train_gpt2", X_OK) == 0 && getcwd(repo, sizeof(repo))) {
        snprintf(cmd, sizeof(cmd), "cd %s && %s/train_gpt2 %s -b 6 -y g3z/ckpt_000002.bin -o cpu > cpu.out 2>&1",
                 g_mr_dir, repo, gpt2 + strlen("--tf32 0 "));
        ok = system(cmd) == 0;
        snprintf(a, sizeof(a), "%s/cpu/log.jsonl", g_mr_dir);
        snprintf(b, sizeof(b), "%s/gpt2/log.jsonl", g_mr_dir);
        double x[4], y[4];
        int nx = mr_field(a, "train", "train_loss", x, 4), ny = mr_field(b, "train", "train_loss", y, 4);
        double worst = nx == 2 && ny == 4 ? fmax(fabs(x[0] - y[2]) / y[2], fabs(x[1] - y[3]) / y[3]) : INFINITY;
        check(ok && worst < TRAIN_RTOL, "3 ranks' --zero 1 checkpoint resumed on the CPU trainer: steps 3 and 4 "
              "within %.1e of the GPU run's losses (bound %.0e)", worst, (double)TRAIN_RTOL);
    }

    // faults: a rank killed mid-run, a rank stopped, a rank that never comes
    mr_fault("killed", 60, SIGKILL, "rank 0 of 2", "a rank killed mid-run");
    mr_fault("stopped", 3, SIGSTOP, "did not complete within 3 s", "a rank stopped (SIGSTOP) mid-run");
    const char* two[] = {"RANK=0 WORLD_SIZE=2", "RANK=1 WORLD_SIZE=2", "RANK=2 WORLD_SIZE=3"};
    snprintf(f, sizeof(f), "%s -b 2 --nccl-timeout 3 -o alone0", gpt2);
    mr_refused("rank 0 alone of 2", "alone0", 1, two, f, NULL, "did not complete within 3 s", 1, 10);
    snprintf(f, sizeof(f), "%s -b 2 --nccl-timeout 3 -o alone1", gpt2);
    mr_refused("rank 1 alone of 2", "alone1", 1, two + 1, f, NULL, "no NCCL id from rank 0", 1, 10);
    const char* sizes[] = {"RANK=0 WORLD_SIZE=2", "RANK=1 WORLD_SIZE=3"};
    snprintf(f, sizeof(f), "%s -b 2 --nccl-timeout 3 -o sizes", gpt2);
    mr_refused("ranks told different world sizes", "sizes", 2, sizes, f, NULL, "is for 2 ranks", 2, 10);

    // before the ranks meet, with --nccl-timeout 8 and 4 s allowed: a rank into a directory that another run
    // holds (here the test, as pid 4242) stops at once, as a whole job does; a rank that fails at start (a
    // flag only it was given, an -o that cannot be made) ends the others at once, naming it
    snprintf(path, sizeof(path), "%s/held", g_mr_dir);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/held/.lock", g_mr_dir);
    int held = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    check(held >= 0 && write(held, "4242\n", 5) == 5 && flock(held, LOCK_EX) == 0, "the test holds %s", path);
    snprintf(f, sizeof(f), "%s -b 2 --nccl-timeout 8 -o held", gpt2);
    mr_refused("rank 1 into a directory another run holds", "held", 1, two + 1, f, NULL,
               "is in use by another run (pid 4242)", 1, 4);
    mr_refused("a job of 2 ranks into a directory another run holds", "held", 2, two, f, NULL,
               "is in use by another run (pid 4242)", 3, 4);
    if (held >= 0) close(held);
    const char* bad_flag0[] = {"-l abc", ""};
    const char* bad_flag1[] = {"", "--bogus 1"};
    snprintf(f, sizeof(f), "%s -b 2 --nccl-timeout 8 -o early", gpt2);
    mr_refused("rank 0 given a bad flag", "early0", 2, two, f, bad_flag0,
               "failed before the ranks met: -l expects a number, got 'abc'", 2, 4);
    mr_refused("rank 1 given a bad flag", "early1", 2, two, f, bad_flag1,
               "failed before the ranks met: unknown flag --bogus", 1, 4);
    snprintf(f, sizeof(f), "%s -b 2 --nccl-timeout 8 -o train.txt/out", gpt2);
    mr_refused("an -o that cannot be made", "nodir", 2, two, f, NULL, "(train.txt is not a directory)", 2, 4);

    // two jobs (job ids 101 and 102, from Slurm's variables, then torchrun's) into one directory at once: job
    // 102's rank 1 starts while job 101's rank 0 waits there with its id, then the other two. Each rank pairs
    // with its own job only: 101 trains, and 102's ranks stop at once, each with one line
    const char* launchers[] = {"SLURM_JOB_ID=%s SLURM_STEP_ID=0 SLURM_PROCID=%s SLURM_NTASKS=2",
                               "TORCHELASTIC_RUN_ID=%s MASTER_PORT=29500 RANK=%s WORLD_SIZE=2 LOCAL_RANK=%s"};
    for (int li = 0; li < 2; li++) {
        const char* job[4][2] = {{"101", "0"}, {"102", "1"}, {"101", "1"}, {"102", "0"}};
        pid_t p[4];
        int st[4];
        char vars[256], name[32];
        snprintf(f, sizeof(f), "%s -b 2 --nccl-timeout 8 -o jobs%d", gpt2, li);
        for (int j = 0; j < 4; j++) {
            snprintf(vars, sizeof(vars), launchers[li], job[j][0], job[j][1], job[j][1]);
            snprintf(a, sizeof(a), "%s/jobs%d_%s.r%s", g_mr_dir, li, job[j][0], job[j][1]);
            p[j] = mr_start(g_mr_dir, vars, f, a);
            snprintf(path, sizeof(path), "%s/jobs%d/nccl_id", g_mr_dir, li);
            for (double t = now_ms(); j == 0 && access(path, F_OK) != 0 && now_ms() - t < 30e3;) usleep(20000);
            if (j == 1) usleep(500000);          // long enough to pair with 101's rank 0, if it could
        }
        for (int j = 0; j < 4; j++) st[j] = mr_wait(p[j], 60);
        snprintf(name, sizeof(name), "jobs%d_102", li);
        char *e0 = mr_read(name, ".r0.err"), *e1 = mr_read(name, ".r1.err");
        const char* want = "is in use by another run";
        check(st[0] == 0 && st[2] == 0 && st[1] == 1 && st[3] == 1 && strstr(e0, want) && strstr(e1, want) &&
              strchr(e1, '\n') == e1 + strlen(e1) - 1,
              "two jobs into one directory at once (%s): job 101's ranks train (exit %d, %d), job 102's stop (exit "
              "%d, %d): %.*s", li ? "torchrun" : "srun", st[0], st[2], st[3], st[1], (int)strcspn(e1, "\n"), e1);
        free(e0);
        free(e1);
    }

    // ranks that differ: a flag; the bytes of the data under the same name (rank 1 in its own directory);
    // the checkpoint likewise
    {
        pid_t p[2];
        snprintf(a, sizeof(a), "%s/flags.r0", g_mr_dir);
        snprintf(b, sizeof(b), "%s/flags.r1", g_mr_dir);
        snprintf(f, sizeof(f), "%s -b 2 -o %s/flags", gpt2, g_mr_dir);
        p[0] = mr_start(g_mr_dir, "RANK=0 WORLD_SIZE=2", f, a);
        snprintf(f, sizeof(f), "%s -l 0.001 -b 2 -o %s/flags", gpt2, g_mr_dir);
        p[1] = mr_start(g_mr_dir, "RANK=1 WORLD_SIZE=2", f, b);
        int st0 = mr_wait(p[0], 60), st1 = mr_wait(p[1], 60);
        char *e0 = mr_read("flags", ".r0.err"), *e1 = mr_read("flags", ".r1.err");
        snprintf(path, sizeof(path), "%s/flags/log.jsonl", g_mr_dir);
        const char* want = "rank 1 was started with -l 0.001, rank 0 without it: every rank needs the same flags";
        check(st0 == 1 && st1 == 1 && strstr(e0, want) && strstr(e1, want) && access(path, F_OK) != 0,
              "ranks with different flags: both exit 1 before writing anything, naming the flag: %.*s",
              (int)strcspn(e0, "\n"), e0);
        free(e0);
        free(e1);
    }
    snprintf(cmd, sizeof(cmd), "cd %s && mkdir -p other0 other1 && cp val.txt other0/ && sed 's/whale/whalf/' train.txt "
             "> other0/train.txt && cp train.txt val.txt other1/ && cp gpt2/ckpt_000002.bin other1/ckpt.bin && "
             "cp g2/ckpt_000002.bin ckpt.bin", g_mr_dir);
    if (system(cmd) != 0) check(0, "cannot prepare the other rank's files");
    const char* files[][2] = {{"data", "training data (-i train.txt) differs from rank 0's"},
                              {"checkpoint", "checkpoint (-y ckpt.bin) differs from rank 0's"}};
    for (int k = 0; k < 2; k++) {
        pid_t p[2];
        snprintf(f, sizeof(f), "%s -b 2 -o %s/files%d%s", gpt2, g_mr_dir, k, k ? " -y ckpt.bin" : "");
        snprintf(a, sizeof(a), "%s/files%d.r0", g_mr_dir, k);
        snprintf(b, sizeof(b), "%s/files%d.r1", g_mr_dir, k);
        p[0] = mr_start(g_mr_dir, "RANK=0 WORLD_SIZE=2", f, a);
        snprintf(path, sizeof(path), "%s/other%d", g_mr_dir, k);
        p[1] = mr_start(path, "RANK=1 WORLD_SIZE=2", f, b);
        int st0 = mr_wait(p[0], 60), st1 = mr_wait(p[1], 60);
        snprintf(path, sizeof(path), "files%d", k);
        char *e0 = mr_read(path, ".r0.err"), *e1 = mr_read(path, ".r1.err");
        check(st0 == 1 && st1 == 1 && strstr(e0, files[k][1]) && strstr(e1, files[k][1]),
              "ranks with different %s under the same name: both exit 1: %.*s", files[k][0], (int)strcspn(e0, "\n"), e0);
        free(e0);
        free(e1);
    }

    // bad ranks and world sizes, refused before any rank waits for another
    struct { const char *vars, *flags, *want; } bad[] = {
        {"", "--rank 2 --world-size 2 -o bad", "rank 2 of 2 ranks (--rank, --world-size): a rank is 0 to the world "
         "size - 1"},
        {"", "--rank 1 -o bad", "--rank and --world-size go together"},
        {"RANK=0", "-o bad", "RANK is set but WORLD_SIZE is not"},
        {"SLURM_PROCID=x SLURM_NTASKS=2", "-o bad", "SLURM_PROCID=x is not a rank"},
        {"RANK=0 WORLD_SIZE=2", "", "2 ranks over NCCL need -o DIR"},
        {"RANK=0 WORLD_SIZE=2", "-d 192 -o bad", "-d 192 is not a multiple of 2 ranks x -b 2 x -t 32 = 128 tokens"},
        {"RANK=0 WORLD_SIZE=2", "--coord-check 1 -o bad", "--coord-check trains its widths"},
    };
    for (const auto& c : bad) {
        const char* vars[1] = {c.vars};
        snprintf(f, sizeof(f), "%s -b 2 %s", gpt2, c.flags);
        mr_refused(c.want, "bad", 1, vars, f, NULL, c.want, 1, 10);
    }
    // the trainer built without NCCL (as where nccl.h is missing; make test_gpt2cu_cpu builds it): several ranks refused
    if (realpath(CUDA_CPU_NONCCL, g_mr_trainer)) {
        snprintf(f, sizeof(f), "%s -b 2 -o nonccl", gpt2);
        mr_refused("built without NCCL", "nonccl", 1, two, f, NULL, "this train_gpt2cu was built without NCCL", 1, 10);
    } else {
        check(0, CUDA_CPU_NONCCL " is missing: `make test_gpt2cu_cpu` builds it");
    }
    printf("  (the runs of several ranks took %.0f s)\n", (now_ms() - t0) / 1e3);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g_mr_dir);
    if (system(cmd) != 0) printf("  (could not remove %s)\n", g_mr_dir);
}
#endif

// ---- 4. on the CPU runtime: every kernel ran and none depends on the order of its threads ----------------
// The kernels are the __global__ functions of train_gpt2.cu, read from the source, so a new kernel
// that no test launches fails here. Each must also have run at least once under the race check
// (dev/cuda_cpu/cuda_runtime.h: in order, reversed, shuffled; CUDA_CPU_RACECHECK sets how often).
#ifdef CUDA_CPU_RUNTIME
static void test_kernel_coverage(void) {
    FILE* f = fopen("train_gpt2.cu", "r");
    if (!f) { check(0, "cannot read train_gpt2.cu (run from the repository root)"); return; }
    char line[1024];
    int kernels = 0;
    while (fgets(line, sizeof(line), f)) {
        const char* p = strstr(line, "__global__ void ");
        if (!p || strncmp(line, "//", 2) == 0) continue;
        char name[128];
        if (sscanf(p + 16, "%127[A-Za-z0-9_]", name) != 1) continue;
        kernels++;
        long runs = cuda_cpu_launches(name), checked = cuda_cpu_racechecked(name);
        check(runs > 0 && checked > 0, "kernel %-36s ran %5ld times, %ld under the race check", name, runs, checked);
    }
    fclose(f);
    check(kernels >= 20, "train_gpt2.cu has %d kernels (read from its source)", kernels);
    for (const std::string& r : cuda_cpu_races()) printf("    race: %s\n", r.c_str());
    check(cuda_cpu_races().empty(), "no kernel's result depends on the order of its threads and blocks (%zu do)",
          cuda_cpu_races().size());
}
#endif

int main(void) {
    const char* why = gpu_unavailable();
    if (why) {
        printf("skipped: no CUDA GPU found (%s); the GPU tests did not run\n", why);
        return 77;
    }
    gpu_init(0);
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s\n", prop.name);
#ifdef CUDA_CPU_RUNTIME
    // TEST_SECTIONS=multirank: section 5 alone (dev/cuda_cpu/mutants.sh, for the mutants of train_gpt2.cu's
    // section 6, whose trainer binary TRAIN_GPT2CU names)
    if (getenv("TEST_SECTIONS") && !strcmp(getenv("TEST_SECTIONS"), "multirank")) {
        test_multirank();
        printf("%d passed, %d failed\n", n_passed, n_failed);
        return n_failed ? 1 : 0;
    }
#endif
    // TEST_SECTIONS=sizes: the trainer at GPT-2's sizes alone (dev/cuda_cpu/mutants.sh, for the mutants that
    // only those sizes catch)
    if (getenv("TEST_SECTIONS") && !strcmp(getenv("TEST_SECTIONS"), "sizes")) {
        test_gpt2_sizes();
        printf("%d passed, %d failed\n", n_passed, n_failed);
        return n_failed ? 1 : 0;
    }
    test_plain_fixtures();
    test_fixtures();
    if (!full_tier()) {  // make test: the kernels at the fixtures' shapes; make check runs the rest
        printf("the quick tier (make test) left to make check: the trainers side by side, sampling, the fused\n"
               "attention at other shapes, kernel pairs, the binaries, the source layout, several ranks, coverage\n");
        printf("%d passed, %d failed\n", n_passed, n_failed);
        return n_failed ? 1 : 0;
    }
    printf("CPU and GPU trainers side by side (float32 matmuls)\n");
    test_cpu_vs_gpu("gpt2", 0, 0, MM_FP32);
    test_cpu_vs_gpu("llama", 1, 2, MM_FP32);
    printf("CPU (float32) and GPU (--dtype bf16) trainers side by side\n");
    test_cpu_vs_gpu("gpt2", 0, 0, MM_BF16);
    test_cpu_vs_gpu("llama", 1, 2, MM_BF16);
    printf("CPU (float32) and GPU (TF32: matmuls and attention on the tensor cores) trainers side by side\n");
    test_cpu_vs_gpu("gpt2", 0, 0, MM_TF32);
    test_cpu_vs_gpu("llama", 1, 2, MM_TF32);
    if (full_tier()) {
        printf("the trainer at GPT-2's sizes: C 512, head size 64, more than 1,024 rows and 67.1M parameters\n");
        test_gpt2_sizes();
    }
    printf("sampling under muP, whose scales change the forward, in every mode\n");
    test_sampling_recipes();
    printf("the fused attention at wider heads and longer rows\n");
    test_attention();
#ifdef CUDA_CPU_RUNTIME
    printf("the device memory estimate\n");
    test_memory_estimate();
#endif
    printf("each fast kernel against the plain kernel it replaces, in every precision mode it has\n");
    test_kernel_pairs();
    printf("the binaries\n");
    test_binaries();
    printf("the source as a tutorial\n");
    test_source_layout();
#ifdef CUDA_CPU_RUNTIME
    printf("several ranks over NCCL, on the CPU runtime\n");
    test_multirank();
    printf("every kernel, on the CPU runtime\n");
    test_kernel_coverage();
#endif
    printf("%d passed, %d failed\n", n_passed, n_failed);
    return n_failed ? 1 : 0;
}
