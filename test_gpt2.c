/*
test_gpt2.c: proves train_gpt2.c right against things no one here wrote.

  1. PyTorch fixtures (test/fixtures/model_*.bin, written by dev/ref/make_fixtures.py): logits,
     loss, every parameter gradient, and every parameter after AdamW steps with weight decay,
     clipping and the schedule, for both presets, gated attention, GQA and MQA.
  2. Centred finite differences of every layer's backward pass.
  3. The trainer binary end to end: exact resume from a checkpoint, determinism, one-line errors
     for bad input, and a stop with the step number on a NaN loss.
  4. The probes (doc/probes.md) on inputs whose answer is known, and through the binary: probes on
     and off give byte-identical runs, the token dump's mean is the validation loss.

    make test        (builds train_gpt2 and test_gpt2, runs ./test_gpt2)

The last line is "N passed, N failed"; the exit status is non-zero on any failure.
*/
#include <setjmp.h>
#include <sys/wait.h>

// fatal() in train_gpt2.c jumps back here instead of exiting, so refusals can be tested in-process.
static jmp_buf fatal_jump;
static int fatal_armed;
#define FATAL_HOOK() do { if (fatal_armed) longjmp(fatal_jump, 1); exit(1); } while (0)
#define TRAIN_GPT2_NO_MAIN
#include "train_gpt2.c"

#include "test/fixture.h"

// ---- 1. PyTorch fixtures ---------------------------------------------------------------------------
static void test_model_fixture(const char* path) {
    Fixture fx;
    if (fixture_load(&fx, path) != 0) { check(0, "%s: cannot read the fixture", path); return; }
    const char* base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    Model m;
    int B, T, *inp, *tgt;
    OptConfig o;
    fixture_model(&fx, base, &m, &B, &T, &inp, &tgt, &o);
    const Config c = m.cfg;
    acts_alloc(&m, B, T);
    // forward: logits (re-run without targets so the buffer holds logits, not probabilities)
    float loss = model_forward(&m, inp, tgt, B, T);
    double want_loss = entry_at(fixture_get(&fx, "loss"), 0);
    check(fabs(loss - want_loss) <= FX_ATOL + FX_RTOL * fabs(want_loss), "%s: loss %.7f vs PyTorch %.7f", base, loss, want_loss);
    // logits: the forward leaves probabilities in the logits buffer, so recompute the raw logits
    // from the final norm's output, the way the forward's last matmul does
    {
        float* logits = xmalloc((size_t)B * T * c.V * sizeof(float));
        matmul_forward(logits, m.a.lnf, c.tied ? m.p[K_WTE] : m.p[K_LMHEAD], NULL, B * T, c.C, c.V);
        double worst, ratio = compare(logits, fixture_get(&fx, "logits"), FX_ATOL, FX_RTOL, &worst);
        check(ratio <= 1.0, "%s: all %d x %d logits within tolerance (worst diff %.2e)", base, B * T, c.V, worst);
        free(logits);
    }
    // backward: every gradient
    model_forward(&m, inp, tgt, B, T);
    model_zero_grad(&m);
    model_backward(&m, B, T);
    for (int i = 0; i < m.num_tensors; i++) {
        char key[160];
        snprintf(key, sizeof(key), "grad/%s", m.tensors[i].name);
        FixtureEntry* e = fixture_get(&fx, key);
        double worst, ratio = e ? compare(m.grads + m.tensors[i].offset, e, FX_ATOL, FX_RTOL, &worst) : INFINITY;
        check(ratio <= 1.0, "%s: grad %-18s within tolerance (worst diff %.2e)", base, m.tensors[i].name, e ? worst : NAN);
    }
    // AdamW steps on the same batch with the schedule, clipping and decoupled weight decay
    FixtureEntry *sl = fixture_get(&fx, "step_loss"), *slr = fixture_get(&fx, "step_lr"), *sg = fixture_get(&fx, "step_gradnorm");
    int steps = (int)sl->count, sched_ok = 1, loss_ok = 1, norm_ok = 1;
    for (int s = 0; s < steps; s++) {
        float l = model_forward(&m, inp, tgt, B, T);
        model_zero_grad(&m);
        model_backward(&m, B, T);
        double norm = grad_norm(&m);
        float scale = (o.clip > 0 && norm > o.clip) ? (float)(o.clip / (norm + 1e-6)) : 1.0f;
        float lr = lr_at(&o, s);
        loss_ok &= fabs(l - entry_at(sl, s)) <= FX_ATOL + FX_RTOL * fabs(entry_at(sl, s));
        sched_ok &= fabs(lr - entry_at(slr, s)) <= 1e-7 * entry_at(slr, s) + 1e-12;
        norm_ok &= fabs(norm - entry_at(sg, s)) <= FX_ATOL + FX_RTOL * entry_at(sg, s);
        adamw_step(&m, &o, lr, s + 1, scale);
    }
    check(sched_ok, "%s: learning-rate schedule (warmup, cosine, floor) equals the reference", base);
    check(loss_ok, "%s: losses of %d AdamW steps track the reference", base, steps);
    check(norm_ok, "%s: gradient norms (clipping input) track the reference", base);
    double after_worst;
    int after_bad = fixture_check_after(&fx, &m, steps, o.lr, FX_ATOL, FX_RTOL, &after_worst);
    check(after_bad == 0, "%s: every parameter after %d AdamW steps within tolerance (worst diff %.2e)", base, steps, after_worst);
    free(inp);
    free(tgt);
    model_free(&m);
    fixture_free(&fx);
}

static void test_fixtures(void) {
    printf("PyTorch fixtures\n");
    const char* names[] = {"gpt2", "gpt2_gate", "llama", "llama_gate", "llama_mha", "mixed"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char path[256];
        snprintf(path, sizeof(path), "test/fixtures/model_%s.bin", names[i]);
        test_model_fixture(path);
    }
}

// ---- 2. finite differences of every layer's backward pass ------------------------------------------
// Each case wraps one forward/backward pair. The scalar probed is f = sum_i r_i out_i for a fixed
// random r, so df/dout = r is what the backward pass receives. Centred differences
// (f(x+h) - f(x-h)) / 2h are summed in double from the float32 forward; with h = 1e-2 their error
// is ~1e-4 relative, so agreement within 2e-3 relative (1e-4 absolute) means the formula is right.
#define FD_H 1e-2
#define FD_RTOL 2e-3
#define FD_ATOL 1e-4
#define FD_PROBES 24

typedef struct OpCase OpCase;
struct OpCase {
    const char* name;
    int n_in;
    float* in[3];                 // inputs whose gradient is checked
    float* din[3];
    size_t in_n[3];
    float* aux[4];                // parameters of the op that are not probed, and saved state
    float* out;
    size_t out_n;
    int d[6];                     // dimensions, op-specific
    float f;                      // a scalar parameter (eps, scale, theta)
    void (*forward)(OpCase*);
    void (*backward)(OpCase*, const float* dout);
};

static float* rand_buf(Rng* g, size_t n, float std) {
    float* p = xmalloc(n * sizeof(float));
    init_normal(g, p, n, 0.0f, std);
    return p;
}

static double probe_value(OpCase* oc, const float* r) {
    oc->forward(oc);
    double s = 0.0;
    for (size_t i = 0; i < oc->out_n; i++) s += (double)r[i] * oc->out[i];
    return s;
}

static void run_fd(OpCase* oc, Rng* g) {
    float* r = rand_buf(g, oc->out_n, 1.0f);
    oc->forward(oc);
    for (int k = 0; k < oc->n_in; k++) memset(oc->din[k], 0, oc->in_n[k] * sizeof(float));
    oc->backward(oc, r);
    for (int k = 0; k < oc->n_in; k++) {
        double worst = 0.0;
        int bad = 0;
        for (int p = 0; p < FD_PROBES; p++) {
            size_t i = rng_u32(g) % oc->in_n[k];
            float x0 = oc->in[k][i];
            oc->in[k][i] = x0 + (float)FD_H;
            double fp = probe_value(oc, r);
            oc->in[k][i] = x0 - (float)FD_H;
            double fm = probe_value(oc, r);
            oc->in[k][i] = x0;
            double fd = (fp - fm) / (2.0 * FD_H), an = oc->din[k][i], err = fabs(fd - an);
            if (err > FD_ATOL + FD_RTOL * fabs(fd)) bad++;
            worst = fmax(worst, err);
        }
        check(bad == 0, "finite differences: %-22s d/d input %d at %d points (worst diff %.1e)", oc->name, k, FD_PROBES, worst);
    }
    free(r);
}

// norm: in[0] = x [N,C], in[1] = w, in[2] = b; d[0] = N, d[1] = C, d[2] = rms; aux[0..1] = mean, rstd
static void fd_norm_fwd(OpCase* o) {
    norm_forward(o->out, o->aux[0], o->aux[1], o->in[0], o->in[1], o->d[2] ? NULL : o->in[2], o->d[2], o->f, o->d[0], o->d[1]);
}
static void fd_norm_bwd(OpCase* o, const float* dout) {
    norm_backward(o->din[0], o->din[1], o->d[2] ? NULL : o->din[2], dout, o->in[0], o->in[1], o->aux[0], o->aux[1], o->d[2], o->d[0], o->d[1]);
}
// matmul: in[0] = x [N,C], in[1] = W [OC,C], in[2] = bias; d = N, C, OC
static void fd_matmul_fwd(OpCase* o) { matmul_forward(o->out, o->in[0], o->in[1], o->in[2], o->d[0], o->d[1], o->d[2]); }
static void fd_matmul_bwd(OpCase* o, const float* dout) {
    matmul_backward(o->din[0], o->din[1], o->din[2], dout, o->in[0], o->in[1], o->d[0], o->d[1], o->d[2]);
}
// attention: in = q, k, v; d = B, T, H, KVH, hd; aux[0] = att, aux[1] = backward scratch
static void fd_attn_fwd(OpCase* o) {
    attention_forward(o->out, o->aux[0], o->in[0], o->in[1], o->in[2], o->d[0], o->d[1], o->d[2], o->d[3], o->d[4], o->f);
}
static void fd_attn_bwd(OpCase* o, const float* dout) {
    attention_backward(o->din[0], o->din[1], o->din[2], o->aux[1], dout, o->aux[0], o->in[0], o->in[1], o->in[2],
                       o->d[0], o->d[1], o->d[2], o->d[3], o->d[4], o->f);
}
// RoPE: in[0] = x; d = B, T, nh, hd; aux[1] = the cos/sin table for theta = f. Forward rotates a
// copy; backward rotates dout back.
static void fd_rope_fwd(OpCase* o) {
    memcpy(o->out, o->in[0], o->out_n * sizeof(float));
    rope_table(o->aux[1], o->d[1], o->d[3], o->f);
    rope_apply(o->out, o->aux[1], o->d[0], o->d[1], o->d[2], o->d[3], 1.0f);
}
static void fd_rope_bwd(OpCase* o, const float* dout) {
    memcpy(o->aux[0], dout, o->out_n * sizeof(float));
    rope_apply(o->aux[0], o->aux[1], o->d[0], o->d[1], o->d[2], o->d[3], -1.0f);
    for (size_t i = 0; i < o->out_n; i++) o->din[0][i] += o->aux[0][i];
}
// gate: in[0] = y [BT, H*hd], in[1] = gate pre-activation [BT,H]; d = BT, H, hd; aux[0] = gate
static void fd_gate_fwd(OpCase* o) {
    memcpy(o->aux[0], o->in[1], o->in_n[1] * sizeof(float));
    gate_forward(o->out, o->aux[0], o->in[0], o->d[0], o->d[1], o->d[2]);
}
static void fd_gate_bwd(OpCase* o, const float* dout) {
    float* dy = xmalloc(o->in_n[0] * sizeof(float));
    float* dg = xmalloc(o->in_n[1] * sizeof(float));
    gate_backward(dy, dg, dout, o->in[0], o->aux[0], o->d[0], o->d[1], o->d[2]);
    for (size_t i = 0; i < o->in_n[0]; i++) o->din[0][i] += dy[i];
    for (size_t i = 0; i < o->in_n[1]; i++) o->din[1][i] += dg[i];
    free(dy);
    free(dg);
}
// GELU: in[0] = x
static void fd_gelu_fwd(OpCase* o) { gelu_forward(o->out, o->in[0], (long)o->out_n); }
static void fd_gelu_bwd(OpCase* o, const float* dout) {
    float* dx = xmalloc(o->out_n * sizeof(float));
    gelu_backward(dx, o->in[0], dout, (long)o->out_n);
    for (size_t i = 0; i < o->out_n; i++) o->din[0][i] += dx[i];
    free(dx);
}
// SwiGLU: in[0] = a (gate input), in[1] = u (up)
static void fd_swiglu_fwd(OpCase* o) { swiglu_forward(o->out, o->in[0], o->in[1], (long)o->out_n); }
static void fd_swiglu_bwd(OpCase* o, const float* dout) {
    float* da = xmalloc(o->out_n * sizeof(float));
    float* du = xmalloc(o->out_n * sizeof(float));
    swiglu_backward(da, du, o->in[0], o->in[1], dout, (long)o->out_n);
    for (size_t i = 0; i < o->out_n; i++) { o->din[0][i] += da[i]; o->din[1][i] += du[i]; }
    free(da);
    free(du);
}
// softmax + mean cross-entropy: in[0] = logits [BT,V]; out = the mean loss (a single value);
// aux[0] = probabilities, aux[1] = losses, aux[2] = targets (as int)
static void fd_ce_fwd(OpCase* o) {
    memcpy(o->aux[0], o->in[0], o->in_n[0] * sizeof(float));
    softmax_forward(o->aux[0], o->aux[1], (const int*)o->aux[2], o->d[0], o->d[1]);
    double s = 0.0;
    for (int i = 0; i < o->d[0]; i++) s += o->aux[1][i];
    o->out[0] = (float)(s / o->d[0]);
}
static void fd_ce_bwd(OpCase* o, const float* dout) {
    crossentropy_softmax_backward(o->aux[0], (const int*)o->aux[2], o->d[0], o->d[1]);
    for (size_t i = 0; i < o->in_n[0]; i++) o->din[0][i] += dout[0] * o->aux[0][i];
}
// embedding: in[0] = wte [V,C], in[1] = wpe [T,C]; d = B, T, C; aux[0] = tokens (as int)
static void fd_emb_fwd(OpCase* o) { embedding_forward(o->out, (const int*)o->aux[0], o->in[0], o->in[1], o->d[0], o->d[1], o->d[2]); }
static void fd_emb_bwd(OpCase* o, const float* dout) {
    embedding_backward(o->din[0], o->din[1], dout, (const int*)o->aux[0], o->d[0], o->d[1], o->d[2]);
}

// Builds a case with inputs of the given sizes and stds, runs the check, frees everything.
static void fd_case(Rng* g, const char* name, void (*fwd)(OpCase*), void (*bwd)(OpCase*, const float*),
                    int n_in, const size_t* in_n, const float* in_std, size_t out_n, const size_t* aux_n,
                    const int* d, float f) {
    OpCase o = {.name = name, .n_in = n_in, .out_n = out_n, .f = f, .forward = fwd, .backward = bwd};
    for (int k = 0; k < n_in; k++) {
        o.in[k] = rand_buf(g, in_n[k], in_std[k]);
        o.din[k] = xmalloc(in_n[k] * sizeof(float));
        o.in_n[k] = in_n[k];
    }
    for (int k = 0; k < 4; k++) o.aux[k] = aux_n[k] ? xcalloc(aux_n[k], sizeof(float)) : NULL;
    for (int k = 0; k < 6; k++) o.d[k] = d[k];
    o.out = xmalloc(out_n * sizeof(float));
    if (fwd == fd_ce_fwd || fwd == fd_emb_fwd) {     // integer side inputs: targets / tokens
        int* ids = (int*)(fwd == fd_ce_fwd ? o.aux[2] : o.aux[0]);
        size_t n = fwd == fd_ce_fwd ? (size_t)d[0] : (size_t)d[0] * d[1];
        int range = fwd == fd_ce_fwd ? d[1] : (int)(in_n[0] / d[2]);
        for (size_t i = 0; i < n; i++) ids[i] = (int)(rng_u32(g) % (range / 2));   // repeats on purpose
    }
    run_fd(&o, g);
    for (int k = 0; k < n_in; k++) { free(o.in[k]); free(o.din[k]); }
    for (int k = 0; k < 4; k++) free(o.aux[k]);
    free(o.out);
}

static void test_finite_differences(void) {
    printf("finite differences\n");
    Rng g;
    rng_seed(&g, 7);
    const int N = 6, C = 10, OC = 7, B = 2, T = 5, H = 4, KVH = 2, hd = 4, V = 11;
    for (int rms = 0; rms <= 1; rms++) {
        size_t in_n[3] = {N * C, C, C}, aux_n[4] = {N, N, 0, 0};
        float std[3] = {1.0f, 1.0f, 1.0f};
        int d[6] = {N, C, rms};
        fd_case(&g, rms ? "rmsnorm" : "layernorm", fd_norm_fwd, fd_norm_bwd, rms ? 2 : 3, in_n, std, N * C, aux_n, d, 1e-5f);
    }
    {
        size_t in_n[3] = {N * C, OC * C, OC}, aux_n[4] = {0, 0, 0, 0};
        float std[3] = {1.0f, 0.5f, 0.5f};
        int d[6] = {N, C, OC};
        fd_case(&g, "matmul", fd_matmul_fwd, fd_matmul_bwd, 3, in_n, std, N * OC, aux_n, d, 0.0f);
    }
    {
        size_t in_n[3] = {B * T * H * hd, B * T * KVH * hd, B * T * KVH * hd}, aux_n[4] = {B * H * T * T, attention_scratch_floats(T), 0, 0};
        float std[3] = {1.0f, 1.0f, 1.0f};
        int d[6] = {B, T, H, KVH, hd};
        fd_case(&g, "attention (GQA 4/2)", fd_attn_fwd, fd_attn_bwd, 3, in_n, std, B * T * H * hd, aux_n, d, 0.5f);
    }
    {
        size_t in_n[3] = {B * T * H * hd}, aux_n[4] = {B * T * H * hd, T * hd, 0, 0};
        float std[3] = {1.0f};
        int d[6] = {B, T, H, hd};
        fd_case(&g, "rope", fd_rope_fwd, fd_rope_bwd, 1, in_n, std, B * T * H * hd, aux_n, d, 10000.0f);
    }
    {
        size_t in_n[3] = {B * T * H * hd, B * T * H}, aux_n[4] = {B * T * H, 0, 0, 0};
        float std[3] = {1.0f, 1.0f};
        int d[6] = {B * T, H, hd};
        fd_case(&g, "attention gate", fd_gate_fwd, fd_gate_bwd, 2, in_n, std, B * T * H * hd, aux_n, d, 0.0f);
    }
    {
        size_t in_n[3] = {N * C}, aux_n[4] = {0};
        float std[3] = {2.0f};
        int d[6] = {0};
        fd_case(&g, "gelu", fd_gelu_fwd, fd_gelu_bwd, 1, in_n, std, N * C, aux_n, d, 0.0f);
    }
    {
        size_t in_n[3] = {N * C, N * C}, aux_n[4] = {0};
        float std[3] = {2.0f, 1.0f};
        int d[6] = {0};
        fd_case(&g, "swiglu", fd_swiglu_fwd, fd_swiglu_bwd, 2, in_n, std, N * C, aux_n, d, 0.0f);
    }
    {
        size_t in_n[3] = {N * V}, aux_n[4] = {N * V, N, N, 0};
        float std[3] = {2.0f};
        int d[6] = {N, V};
        fd_case(&g, "softmax cross-entropy", fd_ce_fwd, fd_ce_bwd, 1, in_n, std, 1, aux_n, d, 0.0f);
    }
    {
        size_t in_n[3] = {V * C, T * C}, aux_n[4] = {B * T, 0, 0, 0};
        float std[3] = {1.0f, 1.0f};
        int d[6] = {B, T, C};
        fd_case(&g, "embedding", fd_emb_fwd, fd_emb_bwd, 2, in_n, std, B * T * C, aux_n, d, 0.0f);
    }
}

// ---- 3. the trainer binary end to end ----------------------------------------------------------------
// These run ./train_gpt2 on a small synthetic corpus written here, so no downloaded data is needed.
static char tmpdir[256];

static void write_file(const char* path, const void* data, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f) fatal("test: cannot write %s", path);
    fwrite(data, 1, n, f);
    fclose(f);
}

// Pseudo-English: words from a small list in a fixed pseudo-random order, so there is something to learn.
static void write_corpus(const char* path, size_t bytes, uint64_t seed) {
    static const char* words[] = {"the", "whale", "sea", "ship", "captain", "white", "and", "of", "a", "to",
                                  "harpoon", "deck", "wind", "sailed", "into", "deep", "night", "we", "saw", "him"};
    Rng g;
    rng_seed(&g, seed);
    char* buf = xmalloc(bytes + 16);
    size_t n = 0;
    while (n < bytes) {
        const char* w = words[rng_u32(&g) % 20];
        size_t len = strlen(w);
        memcpy(buf + n, w, len);
        n += len;
        buf[n++] = rng_u32(&g) % 9 == 0 ? '\n' : ' ';
    }
    write_file(path, buf, bytes);
    free(buf);
}

// Runs the trainer with the given flags; stderr goes to tmpdir/stderr.txt. Returns the exit status.
static int run_trainer(const char* flags) {
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=2 ./train_gpt2 -i %s/train.txt -j %s/val.txt %s > %s/stdout.txt 2> %s/stderr.txt",
             tmpdir, tmpdir, flags, tmpdir, tmpdir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static char* read_text(const char* path, size_t* len) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* buf = xmalloc(n + 1);
    size_t got = fread(buf, 1, n, f);
    buf[got] = 0;
    fclose(f);
    if (len) *len = got;
    return buf;
}

// The "train_loss" and "val_loss" values of a log, one per line, as text (so equality is exact).
static char* losses_of_log(const char* path) {
    char* text = read_text(path, NULL);
    if (!text) return NULL;
    size_t cap = strlen(text) + 1, n = 0;
    char* out = xcalloc(cap, 1);
    for (char* line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char* p = strstr(line, "\"train_loss\":");
        if (!p) p = strstr(line, "\"val_loss\":");
        if (!p) continue;
        char* step = strstr(line, "\"step\":");
        n += snprintf(out + n, cap - n, "%.*s %.*s\n", (int)strcspn(step, ","), step, (int)strcspn(p, ",}"), p);
    }
    free(text);
    return out;
}

static int files_equal(const char* a, const char* b) {
    size_t na = 0, nb = 0;
    char *x = read_text(a, &na), *y = read_text(b, &nb);
    int eq = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return eq;
}

#define SMALL "-L 2 -C 32 -H 4 -K 2 -t 16 -b 4 -v 4 -m 2 -S 16 -u 3"

static void test_resume_and_determinism(void) {
    printf("trainer: resume, determinism\n");
    char flags[1024], a[512], b[512];
    const char* presets[] = {"-a gpt2", "-a llama -G 1"};
    for (int pi = 0; pi < 2; pi++) {
        snprintf(flags, sizeof(flags), SMALL " %s -x 12 -n 6 -o %s/full%d", presets[pi], tmpdir, pi);
        int st = run_trainer(flags);
        check(st == 0, "%s: 12 steps with checkpoints at 6 and 12 (exit %d)", presets[pi], st);
        snprintf(flags, sizeof(flags), SMALL " %s -x 12 -n 6 -o %s/resumed%d -y %s/full%d/ckpt_000006.bin",
                 presets[pi], tmpdir, pi, tmpdir, pi);
        st = run_trainer(flags);
        check(st == 0, "%s: resumed from the step-6 checkpoint (exit %d)", presets[pi], st);
        snprintf(a, sizeof(a), "%s/full%d/log.jsonl", tmpdir, pi);
        snprintf(b, sizeof(b), "%s/resumed%d/log.jsonl", tmpdir, pi);
        char *la = losses_of_log(a), *lb = losses_of_log(b);
        // the resumed log holds steps 7..12; they must be the tail of the uninterrupted log
        int ok = la && lb && strlen(lb) > 0 && strlen(la) >= strlen(lb) && strcmp(la + strlen(la) - strlen(lb), lb) == 0;
        check(ok, "%s: losses of steps 7-12 after resuming equal the uninterrupted run's, to the last digit", presets[pi]);
        free(la);
        free(lb);
        snprintf(a, sizeof(a), "%s/full%d/ckpt_000012.bin", tmpdir, pi);
        snprintf(b, sizeof(b), "%s/resumed%d/ckpt_000012.bin", tmpdir, pi);
        check(files_equal(a, b), "%s: final checkpoints (weights, AdamW state, generators) are byte-identical", presets[pi]);
    }
    snprintf(flags, sizeof(flags), SMALL " -x 12 -n 6 -o %s/again0", tmpdir);
    run_trainer(flags);
    snprintf(a, sizeof(a), "%s/full0/log.jsonl", tmpdir);
    snprintf(b, sizeof(b), "%s/again0/log.jsonl", tmpdir);
    char *la = losses_of_log(a), *lb = losses_of_log(b);
    check(la && lb && strcmp(la, lb) == 0 && strlen(la) > 0, "same seed and flags twice: identical loss sequence");
    free(la);
    free(lb);
    snprintf(a, sizeof(a), "%s/full0/ckpt_000012.bin", tmpdir);
    struct stat stt;
    snprintf(b, sizeof(b), "%s/full0/ckpt_000012.bin.tmp", tmpdir);
    check(stat(a, &stt) == 0 && stat(b, &stt) != 0, "checkpoint written through a temporary file that is renamed away");
}

// Each bad input: exit status non-zero, and stderr is exactly one line naming the problem.
static void test_bad_input(void) {
    printf("trainer: bad input gets one line and a non-zero exit\n");
    char path[512], flags[2048];
    // a token shard whose header promises more tokens than it holds, and one with an id >= vocabulary
    int32_t header[256] = {SHARD_MAGIC, 1, 1000};
    uint16_t toks[100];
    for (int i = 0; i < 100; i++) toks[i] = (uint16_t)(i % 50);
    char* buf = xmalloc(sizeof(header) + sizeof(toks));
    memcpy(buf, header, sizeof(header));
    memcpy(buf + sizeof(header), toks, sizeof(toks));
    snprintf(path, sizeof(path), "%s/short.bin", tmpdir);
    write_file(path, buf, sizeof(header) + sizeof(toks));
    ((int32_t*)buf)[2] = 100;
    ((uint16_t*)(buf + sizeof(header)))[42] = 60000;
    snprintf(path, sizeof(path), "%s/badtok.bin", tmpdir);
    write_file(path, buf, sizeof(header) + sizeof(toks));
    free(buf);
    snprintf(path, sizeof(path), "%s/junk.bin", tmpdir);
    write_file(path, "this is not a checkpoint, not at all, definitely not one", 56);
    // a truncated copy of a real checkpoint
    char src[512];
    snprintf(src, sizeof(src), "%s/full0/ckpt_000006.bin", tmpdir);
    size_t n;
    char* ck = read_text(src, &n);
    snprintf(path, sizeof(path), "%s/cut.bin", tmpdir);
    if (ck) write_file(path, ck, n / 2);
    free(ck);
    struct { const char* flags; const char* expect; } cases[] = {
        {"-Q 1", "unknown flag -Q"},
        {"-x", "needs a value"},
        {"-x abc", "-x expects an integer"},
        {"-L -1", "-L must be in"},
        {"-b 0", "-b must be in"},
        {"-C 30 -H 4", "must divide the width"},
        {"-H 4 -K 3", "must divide the heads"},
        {"-t 32 -T 16", "exceeds the model's maximum"},
        {"-c -0.1", "-c must be in"},
        {"-e -1e-5", "-e must be in"},
        {"-l nan", "-l expects a number"},
        {"-a gpt3", "-a must be gpt2 or llama"},
        {"-I nosuch", "unknown initializer 'nosuch'"},
        {"-I normal,foo=zeros", "unknown parameter group 'foo'"},
        {"-i /nonexistent/train.txt", "cannot open data file /nonexistent/train.txt"},
        {"-i @/short.bin -j @/short.bin", "truncated"},
        {"-i @/badtok.bin -j @/badtok.bin", "token 60000 at position 42 is >= vocabulary 50257"},
        {"-i @/junk.bin -j @/junk.bin", "is not a token shard (bad magic"},
        {"-y @/junk.bin", "is not a checkpoint"},
        {"-y @/cut.bin", "is truncated"},
        {"-y /nonexistent/ckpt.bin", "cannot open checkpoint"},
        {"-L 3 -y @/full0/ckpt_000006.bin", "has L=2 but the flags give 3"},
        {"-e 1e-6 -y @/full0/ckpt_000006.bin", "has eps="},
        {"-I zeros -e 0 -x 5", "loss is nan (grad norm nan) at step 1"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        // "@" stands for the temporary directory
        char expanded[1024];
        size_t k = 0;
        for (const char* p = cases[i].flags; *p && k < sizeof(expanded) - 300; p++) {
            if (*p == '@') k += snprintf(expanded + k, sizeof(expanded) - k, "%s", tmpdir);
            else expanded[k++] = *p;
        }
        expanded[k] = 0;
        const char* base = strstr(expanded, "-y") || strstr(expanded, "-I zeros") ? SMALL " -x 12" : SMALL " -x 1";
        // flags after SMALL win, except that "-x" alone must be last to lack its value
        snprintf(flags, sizeof(flags), "%s %s", base, expanded);
        int st = run_trainer(flags);
        snprintf(path, sizeof(path), "%s/stderr.txt", tmpdir);
        char* err = read_text(path, NULL);
        int lines = 0;
        for (char* p = err; p && *p; p++) lines += *p == '\n';
        int named = err && strstr(err, cases[i].expect) != NULL;
        check(st != 0 && lines == 1 && named, "%-36s -> exit %d, %d line: %.*s", cases[i].flags, st, lines,
              err ? (int)strcspn(err, "\n") : 0, err ? err : "");
        free(err);
    }
}

// ---- 4. probes (train_gpt2.c section 5b) on inputs whose answer is known -------------------------------
// The probes' lines are captured here instead of going to a log.
static char captured[1 << 16];
static size_t captured_len;
static void capture_line(void* ctx, const char* fields) {
    (void)ctx;
    captured_len += snprintf(captured + captured_len, sizeof(captured) - captured_len, "%s\n", fields);
}

// The "value" of the first captured line that contains `key`, NAN if none.
static double captured_value(const char* key) {
    const char* line = strstr(captured, key);
    const char* v = line ? strstr(line, "\"value\":") : NULL;
    return v ? atof(v + 8) : NAN;
}

// W = R_left diag(s) R_right with Givens rotations on both sides: the singular values are |s|.
static void matrix_with_singular_values(float* W, int rows, int cols, const double* s) {
    double* A = xcalloc((size_t)rows * cols, sizeof(double));
    for (int i = 0; i < rows && i < cols; i++) A[i * cols + i] = s[i];
    for (int p = 0; p + 1 < rows; p++) {            // rotate rows p, p+1 by angle 0.3 + 0.2 p
        double c = cos(0.3 + 0.2 * p), sn = sin(0.3 + 0.2 * p);
        for (int j = 0; j < cols; j++) {
            double a = A[p * cols + j], b = A[(p + 1) * cols + j];
            A[p * cols + j] = c * a - sn * b;
            A[(p + 1) * cols + j] = sn * a + c * b;
        }
    }
    for (int q = 0; q + 1 < cols; q++) {            // rotate columns q, q+1 by angle 0.7 + 0.1 q
        double c = cos(0.7 + 0.1 * q), sn = sin(0.7 + 0.1 * q);
        for (int i = 0; i < rows; i++) {
            double a = A[i * cols + q], b = A[i * cols + q + 1];
            A[i * cols + q] = c * a - sn * b;
            A[i * cols + q + 1] = sn * a + c * b;
        }
    }
    for (int i = 0; i < rows * cols; i++) W[i] = (float)A[i];
    free(A);
}

static void test_probe_matrices(void) {
    printf("probes: stable rank, singular values, D_s, D_c\n");
    enum { N = 16 };
    float I[N * N] = {0};
    for (int i = 0; i < N; i++) I[i * N + i] = 1.0f;
    double smax;
    int iters;
    double sr = stable_rank(I, N, N, &smax, &iters);
    check(fabs(sr - N) < 1e-9, "stable rank of I_%d = %.9f (sigma_max %.9f, %d iterations)", N, sr, smax, iters);
    // rank one: W = a b^T, sigma_max = ||a|| ||b||
    Rng g;
    rng_seed(&g, 3);
    float a[12], b[20], R1[12 * 20];
    init_normal(&g, a, 12, 0.0f, 1.0f);
    init_normal(&g, b, 20, 0.0f, 1.0f);
    for (int i = 0; i < 12; i++)
        for (int j = 0; j < 20; j++) R1[i * 20 + j] = a[i] * b[j];
    sr = stable_rank(R1, 12, 20, &smax, &iters);
    check(fabs(sr - 1.0) < 1e-6, "stable rank of a rank-1 12 x 20 matrix = %.9f", sr);
    check(fabs(lowrank_degree(R1, 12, 20) - 1.0) < 1e-6, "D_s of a rank-1 matrix = %.9f", lowrank_degree(R1, 12, 20));
    check(fabs(lowrank_degree(I, N, N) - 1.0 / N) < 1e-12, "D_s of I_%d = 1/%d (%.9f)", N, N, lowrank_degree(I, N, N));
    // D_s of a diagonal matrix: max |d| / sum |d|; a 4 x 6 matrix takes the W W^T path
    float D[4 * 6] = {0};
    float dg[4] = {3.0f, -1.0f, 0.5f, 2.0f};
    for (int i = 0; i < 4; i++) D[i * 6 + i] = dg[i];
    double ds = lowrank_degree(D, 4, 6);
    check(fabs(ds - 3.0 / 6.5) < 1e-12, "D_s of diag(3, -1, 0.5, 2) (4 x 6) = 3/6.5: %.12f", ds);
    // the Jacobi singular values of known matrices, both Gram paths
    float W22[4] = {3.0f, 0.0f, 4.0f, 5.0f};
    double sv[5];
    singular_values(W22, 2, 2, sv);
    check(fabs(sv[0] - 3.0 * sqrt(5.0)) < 1e-12 && fabs(sv[1] - sqrt(5.0)) < 1e-12,
          "singular values of [[3,0],[4,5]] = 3 sqrt5, sqrt5: %.12f %.12f", sv[0], sv[1]);
    double want[3] = {4.0, 2.0, 0.5};
    float W53[5 * 3], W35[3 * 5];
    matrix_with_singular_values(W53, 5, 3, (double[]){2.0, -0.5, 4.0});
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++) W35[j * 5 + i] = W53[i * 3 + j];
    double worst = 0.0;
    singular_values(W53, 5, 3, sv);
    for (int i = 0; i < 3; i++) worst = fmax(worst, fabs(sv[i] - want[i]) / want[i]);
    singular_values(W35, 3, 5, sv);
    for (int i = 0; i < 3; i++) worst = fmax(worst, fabs(sv[i] - want[i]) / want[i]);
    check(worst < 1e-6, "singular values of a rotated diag(2, -0.5, 4), 5 x 3 and its transpose: 4, 2, 0.5 (rel err %.1e)", worst);
    // power iteration against the Jacobi SVD on a random matrix (the stated tolerance)
    float* Wr = xmalloc(40 * 30 * sizeof(float));
    init_normal(&g, Wr, 40 * 30, 0.0f, 1.0f);
    double all[30], s2 = 0.0;
    singular_values(Wr, 40, 30, all);
    for (int i = 0; i < 30; i++) s2 += all[i] * all[i];
    sr = stable_rank(Wr, 40, 30, &smax, &iters);
    double err = fabs(sr - s2 / (all[0] * all[0])) / sr;
    check(err < 1e-4, "random 40 x 30: stable rank by power iteration %.6f vs Jacobi %.6f (rel %.1e, %d iterations)",
          sr, s2 / (all[0] * all[0]), err, iters);
    free(Wr);
    // D_c, rows of the (out, in) weight: identical rows 1 (also for 8 x 3, where seed 003's 1/(d_in d_out)
    // would give 8/3), orthogonal rows 1/n
    float same[8 * 3];
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 3; j++) same[i * 3 + j] = (float)((i + 1) * (j - 0.7));
    double dc = condensation_degree(same, 8, 3);
    check(fabs(dc - 1.0) < 1e-6, "D_c of 8 identical rows (positive multiples) = 1: %.9f", dc);
    dc = condensation_degree(I, N, N);
    check(fabs(dc - 1.0 / N) < 1e-12, "D_c of %d orthogonal rows = 1/%d: %.9f", N, N, dc);
    // C(W) of seed 000 eq. (6) agrees with D_c: D_c is the mean of all its entries
    float Cm[8 * 8];
    row_cosines(same, NULL, 8, 3, Cm);
    double mean = 0.0;
    for (int i = 0; i < 64; i++) mean += Cm[i] / 64.0;
    check(fabs(mean - 1.0) < 1e-6 && fabs(Cm[7] - 1.0f) < 1e-6, "row cosine matrix of identical rows is all ones");
}

static void test_probe_activations(void) {
    printf("probes: sink score, norm factor, residual flow, spike detector\n");
    // sink score of a constructed pattern: head 0 attends to the first key only (S = 1), head 1 each
    // query to itself (S = 1/T), head 2 uniformly over the causal window (S = (1/T) sum_i 1/(i+1))
    enum { B = 2, H = 3, T = 4 };
    float att[B * H * T * T] = {0};
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++) {
            att[((b * H + 0) * T + i) * T + 0] = 1.0f;
            att[((b * H + 1) * T + i) * T + i] = 1.0f;
            for (int s = 0; s <= i; s++) att[((b * H + 2) * T + i) * T + s] = 1.0f / (i + 1);
        }
    double S[H], uniform = (1.0 + 1.0 / 2 + 1.0 / 3 + 1.0 / 4) / T;
    sink_scores(att, B, H, T, S);
    check(fabs(S[0] - 1.0) < 1e-12 && fabs(S[1] - 1.0 / T) < 1e-12 && fabs(S[2] - uniform) < 1e-7,
          "sink scores of first-key, diagonal and uniform heads: %.6f %.6f %.6f (want 1, 0.25, %.6f)", S[0], S[1], S[2], uniform);
    // the same through attention_forward: q = 0 gives uniform causal attention in every head
    float q[B * T * H * 4] = {0}, k[B * T * H * 4], v[B * T * H * 4], y[B * T * H * 4];
    Rng g;
    rng_seed(&g, 4);
    init_normal(&g, k, B * T * H * 4, 0.0f, 1.0f);
    init_normal(&g, v, B * T * H * 4, 0.0f, 1.0f);
    attention_forward(y, att, q, k, v, B, T, H, H, 4, 0.5f);
    sink_scores(att, B, H, T, S);
    check(fabs(S[0] - uniform) < 1e-6 && fabs(S[H - 1] - uniform) < 1e-6, "sink score of attention_forward with q = 0: %.6f (want %.6f)", S[0], uniform);
    // the norm factor: sigma^2 << eps is eps's (every row eps-dominated), sigma^2 >> eps is 1/sigma's
    for (int rms = 0; rms <= 1; rms++) {
        float x[6 * 8];
        double o[4];
        for (int i = 0; i < 6 * 8; i++) x[i] = (i % 2 ? 1e-5f : -1e-5f);
        norm_scale(x, 6, 8, rms, 1e-5, o);
        double want = 1.0 / sqrt(1e-5 + (double)1e-5f * 1e-5f);
        check(fabs(o[0] - want) < 1e-6 * want && fabs(o[1] - 1e5) < 1e-2 && o[2] == 1.0,
              "%s, sigma^2 = 1e-10 << eps = 1e-5: factor %.4f = (sigma^2+eps)^-1/2, eps-free %.1f, eps-dominated rows %.0f%%",
              rms ? "rmsnorm" : "layernorm", o[0], o[1], 100 * o[2]);
        for (int i = 0; i < 6 * 8; i++) x[i] = (i % 2 ? 3.0f : -3.0f);
        norm_scale(x, 6, 8, rms, 1e-5, o);
        check(fabs(o[0] - 1.0 / 3) < 1e-6 && fabs(o[1] - 1.0 / 3) < 1e-12 && o[2] == 0.0,
              "%s, sigma^2 = 9 >> eps: factor %.7f = eps-free 1/sigma %.7f, no eps-dominated row",
              rms ? "rmsnorm" : "layernorm", o[0], o[1]);
        // and it is the factor the forward pass applied: the mean of norm_forward's rstd
        float in[5 * 16], out[5 * 16], w[16], mean[5], rstd[5];
        for (int i = 0; i < 16; i++) w[i] = 1.0f;
        init_normal(&g, in, 5 * 16, 0.1f, 0.01f);
        norm_forward(out, mean, rstd, in, w, NULL, rms, 1e-4f, 5, 16);
        norm_scale(in, 5, 16, rms, 1e-4, o);
        double m_rstd = 0.0;
        for (int i = 0; i < 5; i++) m_rstd += rstd[i] / 5.0;
        check(fabs(o[0] - m_rstd) < 1e-5 * m_rstd, "%s: probe factor %.6f = mean rstd of norm_forward %.6f",
              rms ? "rmsnorm" : "layernorm", o[0], m_rstd);
    }
    // the residual-flow ratio is 0 when the out and down projections are zero: every block adds 0
    for (int llama = 0; llama <= 1; llama++) {
        Config c = {.V = 37, .maxT = 8, .L = 2, .C = 16, .H = 4, .KVH = llama ? 2 : 4, .F = 32, .rmsnorm = llama,
                    .swiglu = llama, .rope = llama, .bias = !llama, .tied = !llama, .gate = llama, .eps = 1e-5f,
                    .rope_theta = 10000.0f, .logit_scale = 1.0f};
        c.attn_scale = 1.0f / sqrtf((float)(c.C / c.H));
        Model m;
        model_build(&m, &c);
        acts_alloc(&m, 2, 8);
        init_normal(&g, m.params, m.num_params, 0.0f, 0.2f);
        int tok[16], tgt[16];
        for (int i = 0; i < 16; i++) { tok[i] = (int)(rng_u32(&g) % c.V); tgt[i] = (int)(rng_u32(&g) % c.V); }
        Probes pr = {.sel = 1u << P_RESFLOW, .emit = capture_line};
        model_forward(&m, tok, tgt, 2, 8);
        captured_len = 0;
        probe_resflow(&pr, &m);
        double before = captured_value("\"layer\":-1");
        for (int i = 0; i < m.num_tensors; i++) {
            const Tensor* t = &m.tensors[i];
            if (t->kind == K_WO || t->kind == K_BO || t->kind == K_WDOWN || t->kind == K_BDOWN)
                memset(m.params + t->offset, 0, t->numel * sizeof(float));
        }
        model_forward(&m, tok, tgt, 2, 8);
        captured_len = 0;
        probe_resflow(&pr, &m);
        double after = captured_value("\"layer\":-1"), layer0 = captured_value("\"layer\":0");
        check(before > 0.1 && after == 0.0 && layer0 == 0.0,
              "%s: residual flow ||h_L - e||/||e|| %.4f, 0 with the out/down projections zeroed (%g)",
              llama ? "llama" : "gpt2", before, after);
        model_free(&m);
    }
    // the spike detector: noise around 1, then a jump to 2
    Probes pr = {.sel = 1u << P_SPIKE, .emit = capture_line, .spike_z = 6.0f, .spike_skip = 1};
    int skips = 0, first_skip = -1;
    for (int s = 0; s < 60; s++) {
        captured_len = 0;
        double noise = (rng_u32(&g) / 4294967296.0 - 0.5) * 0.02;
        int skip = probe_spike(&pr, s, s == 55 ? 2.0 : 1.0 + noise, 1.0 + noise);
        skips += skip;
        if (skip && first_skip < 0) first_skip = s;
    }
    check(skips == 1 && first_skip == 55, "spike detector: one spike in 60 steps, at the jump (step %d, %d flagged)", first_skip, skips);
}

// --dump-token-losses against evaluate(): the same batches, so the mean of the dump is the validation loss
static void test_token_dump(void) {
    printf("probes: token-loss dump\n");
    Config c = {.V = 256, .maxT = 8, .L = 1, .C = 16, .H = 2, .KVH = 2, .F = 32, .bias = 1, .tied = 1,
                .eps = 1e-5f, .logit_scale = 1.0f};
    c.attn_scale = 1.0f / sqrtf((float)(c.C / c.H));
    Model m;
    model_build(&m, &c);
    acts_alloc(&m, 3, 8);
    Rng g;
    rng_seed(&g, 6);
    init_normal(&g, m.params, m.num_params, 0.0f, 0.3f);
    Dataset val = {.n = 200};
    val.tok = xmalloc(val.n * sizeof(uint16_t));
    for (size_t i = 0; i < val.n; i++) val.tok[i] = (uint16_t)(97 + rng_u32(&g) % 26);
    int inp[24], tgt[24];
    double want = evaluate(&m, &val, 5, 3, 8, inp, tgt);   // 5 requested, (200-1)/24 = 8 available
    char path[256];
    snprintf(path, sizeof(path), "/tmp/test_gpt2_tokens.%d.csv", (int)getpid());
    dump_token_losses(&m, &val, 5, 3, 8, inp, tgt, path);
    FILE* f = fopen(path, "r");
    char line[256];
    int rows = 0, pos_ok = 1;
    double sum = 0.0;
    if (f && fgets(line, sizeof(line), f)) {
        size_t pos;
        int target;
        double loss, p;
        while (fscanf(f, "%zu,%d,%lf,%lf", &pos, &target, &loss, &p) == 4) {
            pos_ok &= pos == (size_t)rows + 1 && target == val.tok[pos] && fabs(p - exp(-loss)) < 1e-6;
            sum += loss;
            rows++;
        }
    }
    if (f) fclose(f);
    unlink(path);
    check(rows == 5 * 24 && pos_ok, "dump holds the %d positions of 5 batches, in order, with p = exp(-loss)", rows);
    check(rows && fabs(sum / rows - want) < 1e-6, "mean of the dumped losses %.7f = evaluate()'s validation loss %.7f",
          rows ? sum / rows : NAN, want);
    free(val.tok);
    model_free(&m);
}

// Through the binary: probes on and off give the same run; every probe writes; the dumps are sound.
static void test_probes_trainer(void) {
    printf("trainer: probes change nothing, write every probe, dump\n");
    const char* presets[] = {"-a gpt2", "-a llama -G 1"};
    char flags[2048], a[512], b[512];
    for (int pi = 0; pi < 2; pi++) {
        snprintf(flags, sizeof(flags), SMALL " %s -x 12 -o %s/noprobe%d", presets[pi], tmpdir, pi);
        int st0 = run_trainer(flags);
        snprintf(flags, sizeof(flags), SMALL " %s -x 12 -o %s/probe%d -p 3 --cossim-dump h.1.mlp.wup "
                 "--dump-token-losses %s/tokens%d.csv", presets[pi], tmpdir, pi, tmpdir, pi);
        int st1 = run_trainer(flags);
        check(st0 == 0 && st1 == 0, "%s: 12 steps without probes and with -p 3 (exit %d, %d)", presets[pi], st0, st1);
        snprintf(a, sizeof(a), "%s/noprobe%d/log.jsonl", tmpdir, pi);
        snprintf(b, sizeof(b), "%s/probe%d/log.jsonl", tmpdir, pi);
        char *la = losses_of_log(a), *lb = losses_of_log(b);
        check(la && lb && strlen(la) > 0 && strcmp(la, lb) == 0, "%s: probes on and off give the same losses, to the last digit", presets[pi]);
        free(la);
        free(lb);
        snprintf(a, sizeof(a), "%s/noprobe%d/ckpt_000012.bin", tmpdir, pi);
        snprintf(b, sizeof(b), "%s/probe%d/ckpt_000012.bin", tmpdir, pi);
        check(files_equal(a, b), "%s: and byte-identical final checkpoints", presets[pi]);
        // every probe of the default set, at every probe step (spike at every step), all valid numbers
        snprintf(b, sizeof(b), "%s/probe%d/log.jsonl", tmpdir, pi);
        char* log = read_text(b, NULL);
        int missing = 0;
        for (int p = 0; p < P_COORD; p++)
            for (int s = 0; s < 12; s += p == P_SPIKE ? 1 : 3) {
                char key[96];
                snprintf(key, sizeof(key), "\"step\":%d,\"probe\":\"%s\"", s, probe_names[p]);
                if (!log || !strstr(log, key)) { missing++; printf("        missing: %s\n", key); }
            }
        check(log && !missing && !strstr(log, "nan") && !strstr(log, "inf"),
              "%s: every probe logged at steps 0, 3, 6, 9 (spike at every step), no nan/inf", presets[pi]);
        free(log);
        // the cosine matrix of h.1.mlp.wup (F = 4C = 128 rows): int32 n, n x n floats, unit diagonal
        int dumps_ok = 1;
        for (int s = 0; s < 12; s += 3) {
            snprintf(a, sizeof(a), "%s/probe%d/cossim_h.1.mlp.wup_step%06d.bin", tmpdir, pi, s);
            size_t n;
            char* d = read_text(a, &n);
            int32_t rows = d ? *(int32_t*)d : 0;
            dumps_ok &= d && rows == 128 && n == 4 + (size_t)rows * rows * 4 && fabsf(((float*)(d + 4))[rows + 1] - 1.0f) < 1e-6f;
            free(d);
        }
        check(dumps_ok, "%s: --cossim-dump wrote C(W) at steps 0, 3, 6, 9 (128 x 128, unit diagonal)", presets[pi]);
        // the token dump's mean is the final validation loss printed by the trainer
        snprintf(a, sizeof(a), "%s/tokens%d.csv", tmpdir, pi);
        FILE* f = fopen(a, "r");
        char line[256];
        double sum = 0.0, loss, p;
        int rows = 0, target;
        size_t pos;
        if (f && fgets(line, sizeof(line), f))
            while (fscanf(f, "%zu,%d,%lf,%lf", &pos, &target, &loss, &p) == 4) { sum += loss; rows++; }
        if (f) fclose(f);
        snprintf(a, sizeof(a), "%s/stdout.txt", tmpdir);
        char* out = read_text(a, NULL);
        char* fv = out ? strstr(out, "final val loss ") : NULL;
        double final = fv ? atof(fv + 15) : NAN;
        check(rows == 2 * 4 * 16 && fabs(sum / rows - final) < 1e-6,
              "%s: mean of %d dumped token losses %.7f = final val loss %.6f", presets[pi], rows, rows ? sum / rows : NAN, final);
        free(out);
    }
    // --spike-skip: with a threshold of 0 a step whose loss or gradient norm is above its running mean
    // is a spike (at this learning rate most are), its update is skipped, and the progress line and
    // the log say so
    snprintf(flags, sizeof(flags), SMALL " -x 30 -l 0.3 -o %s/noskip -p 5 --probes spike --spike-z 0", tmpdir);
    int st = run_trainer(flags);
    snprintf(flags, sizeof(flags), SMALL " -x 30 -l 0.3 -o %s/skip -p 5 --probes spike --spike-z 0 --spike-skip 1", tmpdir);
    st |= run_trainer(flags);
    snprintf(a, sizeof(a), "%s/stdout.txt", tmpdir);
    char* out = read_text(a, NULL);
    snprintf(a, sizeof(a), "%s/skip/log.jsonl", tmpdir);
    char* log = read_text(a, NULL);
    snprintf(a, sizeof(a), "%s/skip/ckpt_000030.bin", tmpdir);
    snprintf(b, sizeof(b), "%s/noskip/ckpt_000030.bin", tmpdir);
    check(st == 0 && out && strstr(out, "loss spike: update skipped") && log && strstr(log, "\"skipped\":1") && !files_equal(a, b),
          "--spike-skip 1: flagged steps skip their update (the run differs), in the progress line and the log");
    free(out);
    free(log);
    // the muP coordinate check at two widths
    snprintf(flags, sizeof(flags), SMALL " -o %s/coord --coord-check 1 --coord-widths 16,32 --coord-steps 2", tmpdir);
    st = run_trainer(flags);
    snprintf(a, sizeof(a), "%s/coord/log.jsonl", tmpdir);
    log = read_text(a, NULL);
    int found = 0;
    const char* names[] = {"emb", "h.0.attn_out", "h.1.mlp_out", "logits"};
    for (int w = 16; w <= 32; w *= 2)
        for (int s = 0; s < 2; s++)
            for (int i = 0; i < 4; i++) {
                char key[128];
                snprintf(key, sizeof(key), "\"step\":%d,\"probe\":\"coord\",\"layer\":%d,\"tensor\":\"%s\"", s, i == 0 || i == 3 ? -1 : i - 1, names[i]);
                for (char* p = log ? strstr(log, key) : NULL; p; p = strstr(p + 1, key)) {
                    char wkey[32];
                    snprintf(wkey, sizeof(wkey), "\"width\":%d}", w);
                    if (strncmp(strchr(p, '}') - strlen(wkey) + 1, wkey, strlen(wkey)) == 0) { found++; break; }
                }
            }
    snprintf(a, sizeof(a), "%s/stdout.txt", tmpdir);
    out = read_text(a, NULL);
    check(st == 0 && found == 16 && out && strstr(out, "coord check: mean |x|"),
          "--coord-check at widths 16 and 32: emb, attention, MLP and logit coordinates of both steps (%d of 16), table printed", found);
    free(out);
    free(log);
    // refusals
    struct { const char* flags; const char* expect; } cases[] = {
        {"-p 2 -o @/bad --probes act,nosuch", "unknown probe 'nosuch'"},
        {"-p 2 -o @/bad --cossim-dump h.9.attn.wq", "no tensor named 'h.9.attn.wq'"},
        {"-p 2 -o @/bad --cossim-dump lnf.w", "is a vector"},
        {"-p 2", "-p needs -o DIR"},
        {"--probes act", "need -p N"},
        {"-p 2 -o @/bad --probes act --spike-skip 1", "--spike-skip needs the spike probe"},
        {"--coord-check 1", "--coord-check needs -o DIR"},
        {"-m 0 --dump-token-losses @/t.csv", "needs validation batches"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char expanded[1024];
        size_t k = 0;
        for (const char* p = cases[i].flags; *p && k < sizeof(expanded) - 300; p++) {
            if (*p == '@') k += snprintf(expanded + k, sizeof(expanded) - k, "%s", tmpdir);
            else expanded[k++] = *p;
        }
        expanded[k] = 0;
        snprintf(flags, sizeof(flags), SMALL " -x 1 %s", expanded);
        st = run_trainer(flags);
        snprintf(a, sizeof(a), "%s/stderr.txt", tmpdir);
        char* err = read_text(a, NULL);
        int lines = 0;
        for (char* p = err; p && *p; p++) lines += *p == '\n';
        check(st != 0 && lines == 1 && err && strstr(err, cases[i].expect), "%-44s -> exit %d: %.*s", cases[i].flags, st,
              err ? (int)strcspn(err, "\n") : 0, err ? err : "");
        free(err);
    }
}

static void test_probes(void) {
    test_probe_matrices();
    test_probe_activations();
    test_token_dump();
}

static void test_trainer(void) {
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_gpt2.XXXXXX");
    if (!mkdtemp(tmpdir)) { check(0, "cannot create a temporary directory"); return; }
    char path[512];
    snprintf(path, sizeof(path), "%s/train.txt", tmpdir);
    write_corpus(path, 40000, 11);
    snprintf(path, sizeof(path), "%s/val.txt", tmpdir);
    write_corpus(path, 4000, 12);
    if (access("./train_gpt2", X_OK) != 0) { check(0, "./train_gpt2 is missing: run `make test`"); return; }
    test_resume_and_determinism();
    test_bad_input();
    test_probes_trainer();
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("  (could not remove %s)\n", tmpdir);
}

int main(void) {
    test_fixtures();
    test_finite_differences();
    test_probes();
    test_trainer();
    printf("%d passed, %d failed\n", n_passed, n_failed);
    return n_failed ? 1 : 0;
}
