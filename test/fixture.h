/*
test/fixture.h: the test runner and the PyTorch fixture files, shared by test_gpt2.c (CPU) and
test_gpt2.cu (GPU). Include it after train_gpt2.c. Also compiled as C++ by nvcc: keep it in the
common subset of C and C++ (cast void* explicitly; xmalloc/xcalloc are fine, see train_gpt2.cu).
*/
// ---- the test runner ----------------------------------------------------------------------------
static int n_passed, n_failed;

// TEST_STOP_AT_FAIL=1 in the environment: stop at the first failed check (the count line, exit 1). The
// CUDA mutants use it: one failure is all their verdict needs (dev/cuda_cpu/mutants.sh).
static void check(int ok, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (ok) {
        n_passed++;
        printf("  ok    ");
    } else {
        n_failed++;
        printf("  FAIL  ");
    }
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    const char* stop = getenv("TEST_STOP_AT_FAIL");
    if (!ok && stop && strcmp(stop, "1") == 0) {
        printf("stopped at the first failure (TEST_STOP_AT_FAIL=1)\n%d passed, %d failed\n", n_passed, n_failed);
        exit(1);
    }
}

// The tier: TEST_TIER=quick (make test) runs what a student needs after an edit; unset or anything else,
// every test (make check, .ci/run). A slow test is guarded by `if (full_tier())`.
static int full_tier(void) { const char* t = getenv("TEST_TIER"); return !(t && strcmp(t, "quick") == 0); }

// The tests write the temporary directory `dir` as "@" in flags and expected messages.
static void expand_at(const char* text, const char* dir, char* out, size_t cap) {
    size_t k = 0;
    for (const char* p = text; *p && k + strlen(dir) + 1 < cap; p++) {
        if (*p == '@') k += (size_t)snprintf(out + k, cap - k, "%s", dir);
        else out[k++] = *p;
    }
    out[k] = 0;
}

// ---- fixture files (format: doc/model.md) ---------------------------------------------------------
typedef struct {
    char name[128];
    int dtype;            // 0 float32, 1 int32, 2 float64
    int ndim, dims[8];
    size_t count;
    void* data;
} FixtureEntry;

typedef struct {
    int n;
    FixtureEntry* e;
} Fixture;

static int fixture_load(Fixture* fx, const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return -1;
    char magic[8];
    int32_t count;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "INITFIX1", 8) || fread(&count, 4, 1, f) != 1) { fclose(f); return -1; }
    fx->n = count;
    fx->e = xcalloc(count, sizeof(FixtureEntry));
    for (int i = 0; i < count; i++) {
        FixtureEntry* e = &fx->e[i];
        int32_t len;
        if (fread(&len, 4, 1, f) != 1 || len <= 0 || len >= (int)sizeof(e->name)) { fclose(f); return -1; }
        if (fread(e->name, 1, len, f) != (size_t)len) { fclose(f); return -1; }
        if (fread(&e->dtype, 4, 1, f) != 1 || fread(&e->ndim, 4, 1, f) != 1 || e->ndim > 8) { fclose(f); return -1; }
        if (fread(e->dims, 4, e->ndim, f) != (size_t)e->ndim) { fclose(f); return -1; }
        e->count = 1;
        for (int d = 0; d < e->ndim; d++) e->count *= e->dims[d];
        size_t esize = e->dtype == 2 ? 8 : 4;
        e->data = xmalloc(e->count * esize);
        if (fread(e->data, esize, e->count, f) != e->count) { fclose(f); return -1; }
    }
    fclose(f);
    return 0;
}

static FixtureEntry* fixture_get(Fixture* fx, const char* name) {
    for (int i = 0; i < fx->n; i++)
        if (strcmp(fx->e[i].name, name) == 0) return &fx->e[i];
    return NULL;
}

static void fixture_free(Fixture* fx) {
    for (int i = 0; i < fx->n; i++) free(fx->e[i].data);
    free(fx->e);
}

static double entry_at(const FixtureEntry* e, size_t i) {
    if (e->dtype == 0) return ((const float*)e->data)[i];
    if (e->dtype == 1) return ((const int32_t*)e->data)[i];
    return ((const double*)e->data)[i];
}

// Largest violation of |got - want| <= atol + rtol |want|, as a multiple of the allowed error
// (<= 1 passes). *worst receives the absolute difference at that place.
static double compare(const float* got, const FixtureEntry* want, double atol, double rtol, double* worst) {
    double ratio = 0.0;
    *worst = 0.0;
    for (size_t i = 0; i < want->count; i++) {
        double w = entry_at(want, i), d = fabs(got[i] - w), r = d / (atol + rtol * fabs(w));
        if (!(r <= ratio)) { ratio = r; *worst = d; }    // NaN counts as the worst
    }
    return ratio;
}

// ---- model fixtures ------------------------------------------------------------------------------
// Tolerances: the reference is exact (float64); the C code runs in float32. Measured float32
// errors of the same computation are below 3e-6 (dev/ref/README.md), so 1e-5 absolute plus
// 1e-4 relative leaves room for summation order while still catching any wrong term.
#define FX_ATOL 1e-5
#define FX_RTOL 1e-4

// Builds m from a model fixture: its configuration and initial parameters (checking that every
// tensor of the model is in the fixture and vice versa), and reads its batch (inputs [:, :T],
// targets [:, 1:]) and its optimizer settings. Host activations are left to the caller.
static void fixture_model(Fixture* fx, const char* base, Model* m, int* B, int* T, int** inp, int** tgt, OptConfig* o) {
    const int32_t* ci = (const int32_t*)fixture_get(fx, "config")->data;
    const double* hp = (const double*)fixture_get(fx, "hparams")->data;
    Config c;
    memset(&c, 0, sizeof(c));
    c.V = ci[0]; c.maxT = ci[1]; c.L = ci[2]; c.C = ci[3]; c.H = ci[4]; c.KVH = ci[5]; c.F = ci[6];
    c.rmsnorm = ci[7]; c.swiglu = ci[8]; c.rope = ci[9]; c.bias = ci[10]; c.tied = ci[11]; c.attn_gate = ci[12];
    c.eps = (float)hp[0]; c.rope_theta = (float)hp[10]; c.logit_scale = 1.0f;
    c.attn_scale = 1.0f / sqrtf((float)(c.C / c.H));
    *B = ci[13];
    *T = ci[14];
    model_build(m, &c);
    // parameters by name: every tensor of the model must be in the fixture and vice versa
    int missing = 0, params_in_fixture = 0;
    for (int i = 0; i < fx->n; i++) params_in_fixture += strncmp(fx->e[i].name, "param/", 6) == 0;
    for (int i = 0; i < m->num_tensors; i++) {
        char key[160];
        snprintf(key, sizeof(key), "param/%s", m->tensors[i].name);
        FixtureEntry* e = fixture_get(fx, key);
        if (!e || e->count != m->tensors[i].numel) { missing++; continue; }
        memcpy(m->params + m->tensors[i].offset, e->data, e->count * sizeof(float));
    }
    check(missing == 0 && params_in_fixture == m->num_tensors, "%s: %d tensors match the reference's names and shapes",
          base, m->num_tensors);
    // muP fixtures (model_mup.bin) also carry the forward multipliers and the per-tensor learning-rate
    // multipliers that train_gpt2.c's mup_configure sets
    FixtureEntry* sc = fixture_get(fx, "scales");
    if (sc) {
        m->cfg.attn_scale = (float)entry_at(sc, 0);
        m->cfg.logit_scale = (float)entry_at(sc, 1);
        for (int i = 0; i < m->num_tensors; i++) {
            char key[160];
            snprintf(key, sizeof(key), "lr_mult/%s", m->tensors[i].name);
            FixtureEntry* e = fixture_get(fx, key);
            m->tensors[i].lr_mult = e ? (float)entry_at(e, 0) : NAN;
        }
    }
    int nb = *B, nt = *T;
    *inp = xmalloc((size_t)nb * nt * sizeof(int));
    *tgt = xmalloc((size_t)nb * nt * sizeof(int));
    const int32_t* tok = (const int32_t*)fixture_get(fx, "tokens")->data;
    for (int b = 0; b < nb; b++)
        for (int t = 0; t < nt; t++) {
            (*inp)[b * nt + t] = tok[b * (nt + 1) + t];
            (*tgt)[b * nt + t] = tok[b * (nt + 1) + t + 1];
        }
    memset(o, 0, sizeof(*o));
    o->lr = (float)hp[1]; o->beta1 = (float)hp[2]; o->beta2 = (float)hp[3]; o->adam_eps = (float)hp[4];
    o->weight_decay = (float)hp[5]; o->clip = (float)hp[6]; o->warmup = (int)hp[7]; o->steps = (int)hp[8];
    o->lr_floor = (float)hp[9];
}

// After `steps` AdamW steps at peak rate lr: how many tensors of m differ from the fixture's
// after/NAME beyond atol + rtol |want| (each is printed); *worst receives the largest difference.
static int fixture_check_after(Fixture* fx, const Model* m, int steps, float lr, double atol, double rtol, double* worst) {
    int after_bad = 0;
    double after_worst = 0.0;
    for (int i = 0; i < m->num_tensors; i++) {
        const Tensor* t = &m->tensors[i];
        char key[160];
        snprintf(key, sizeof(key), "after/%s", t->name);
        FixtureEntry* e = fixture_get(fx, key);
        snprintf(key, sizeof(key), "grad/%s", t->name);
        FixtureEntry* gr = fixture_get(fx, key);
        double gmax = 0.0;
        for (size_t j = 0; j < gr->count; j++) gmax = fmax(gmax, fabs(entry_at(gr, j)));
        if (gmax < 1e-12) {
            // An exactly-zero gradient (bk with learned positions shifts a whole softmax row) is
            // float32 rounding noise here, which Adam normalizes into real steps: only bound them.
            FixtureEntry* p0 = fixture_get(fx, (snprintf(key, sizeof(key), "param/%s", t->name), key));
            for (size_t j = 0; j < t->numel; j++)
                if (fabs(m->params[t->offset + j] - entry_at(p0, j)) > 3.0 * lr * steps) after_bad++;
            continue;
        }
        double w, ratio = compare(m->params + t->offset, e, atol, rtol, &w);
        if (ratio > 1.0) { after_bad++; printf("        after/%s off by %.2e\n", t->name, w); }
        after_worst = fmax(after_worst, w);
    }
    *worst = after_worst;
    return after_bad;
}

// The fixture's AdamW steps on its batch, with the schedule, clipping and decoupled weight decay, run
// as the training loop runs them (test_gpt2.c: on the CPU, e NULL; test_gpt2.cu: on the GPU, through
// the Engine e, as train_with_engine runs them): the learning rate, loss and gradient norm of every step, then every parameter after the
// last, against the reference. With micro > 1 each step is run as the loop runs -d
// (compute_gradients): the batch's rows in `micro` micro-batches of B / micro rows, each backward
// adding 1/micro of its mean loss's gradient. Their mean loss is the batch's, so PyTorch's
// single-batch steps are the reference for gradient accumulation too.
static void fixture_check_steps(Fixture* fx, const char* base, const char* who, Model* m, Engine* e,
                                const int* inp, const int* tgt, int B, int T, const OptConfig* o, int micro) {
    FixtureEntry *sl = fixture_get(fx, "step_loss"), *slr = fixture_get(fx, "step_lr"), *sg = fixture_get(fx, "step_gradnorm");
    int steps = (int)sl->count, sched_ok = 1, loss_ok = 1, norm_ok = 1;
    if (B % micro) { check(0, "%s: %d rows do not split into %d micro-batches", base, B, micro); return; }
    for (int s = 0; s < steps; s++) {
        float l = e ? engine_gradients(e, inp, tgt, B / micro, T, micro)
                    : compute_gradients(m, inp, tgt, B / micro, T, micro);
        double norm = e ? e->grad_norm(e->ctx) : grad_norm(m);
        float scale = (o->clip > 0 && norm > o->clip) ? (float)(o->clip / (norm + 1e-6)) : 1.0f;
        float lr = lr_at(o, s);
        loss_ok &= fabs(l - entry_at(sl, s)) <= FX_ATOL + FX_RTOL * fabs(entry_at(sl, s));
        sched_ok &= fabs(lr - entry_at(slr, s)) <= 1e-7 * entry_at(slr, s) + 1e-12;
        norm_ok &= fabs(norm - entry_at(sg, s)) <= FX_ATOL + FX_RTOL * entry_at(sg, s);
        if (e) e->update(e->ctx, o, lr, s + 1, scale);
        else adamw_step(m, o, lr, s + 1, scale);
    }
    if (e) e->to_host(e->ctx, 0);
    check(sched_ok, "%s: %slearning-rate schedule (warmup, cosine, floor) equals the reference", base, who);
    check(loss_ok, "%s: %slosses of %d AdamW steps track the reference", base, who, steps);
    check(norm_ok, "%s: %sgradient norms (clipping input) track the reference", base, who);
    double worst;
    int bad = fixture_check_after(fx, m, steps, o->lr, FX_ATOL, FX_RTOL, &worst);
    check(bad == 0, "%s: %severy parameter after %d AdamW steps within tolerance (worst diff %.2e)", base, who, steps, worst);
}

