/*
test_gpt2.c: proves train_gpt2.c right against things no one here wrote.

  1. PyTorch fixtures (test/fixtures/model_*.bin, written by dev/ref/make_fixtures.py): logits,
     loss, every parameter gradient, and every parameter after AdamW steps with weight decay,
     clipping and the schedule, for both presets, gated attention, GQA and MQA, and muP (attention
     q.k/d_head, logit multiplier, per-tensor learning rates).
     The generator and every initializer against PyTorch (test/fixtures/init_torch.bin, written by
     dev/ref/make_init_fixtures.py): nn.init calls and whole-model recipes, bit for bit.
  2. Centred finite differences of every layer's backward pass.
  3. The trainer binary end to end: exact resume from a checkpoint, determinism, one-line errors
     for bad input, and a stop with the step number on a NaN loss.
  4. The probes (doc/probes.md) on inputs whose answer is known, and through the binary: probes on
     and off give byte-identical runs, the token dump's mean is the validation loss.

    make test        (the quick tier: TEST_TIER=quick ./test_gpt2, a subset of 3 and 4, the CUDA kernels)
    make check       (the full tier: all of this file, and every other suite, section 6)
    make test-sanitize   (these tests under ASan, LeakSanitizer and UBSan; make check runs it too)

The last line is "N passed, N failed"; the exit status is non-zero on any failure.
*/
#include <ctype.h>
#include <fcntl.h>
#include <malloc.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/wait.h>

// fatal() in train_gpt2.c jumps back here instead of exiting, so refusals can be tested in-process
// (its message is in fatal_msg).
static jmp_buf fatal_jump;
static int fatal_armed;
#define FATAL_HOOK() do { if (fatal_armed) longjmp(fatal_jump, 1); fprintf(stderr, "error: %s\n", fatal_msg); exit(1); } while (0)
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
        impl.matmul_forward(logits, m.a.lnf, c.tied ? m.p[K_WTE] : m.p[K_LMHEAD], NULL, B * T, c.C, c.V);
        for (long i = 0; i < (long)B * T * c.V; i++) logits[i] *= c.logit_scale;     // muP's 1/width_mult
        double worst, ratio = compare(logits, fixture_get(&fx, "logits"), FX_ATOL, FX_RTOL, &worst);
        check(ratio <= 1.0, "%s: all %d x %d logits within tolerance (worst diff %.2e)", base, B * T, c.V, worst);
        free(logits);
    }
    // backward: every gradient
    model_forward(&m, inp, tgt, B, T);
    model_zero_grad(&m);
    model_backward(&m, B, T, 1.0f);
    for (int i = 0; i < m.num_tensors; i++) {
        char key[160];
        snprintf(key, sizeof(key), "grad/%s", m.tensors[i].name);
        FixtureEntry* e = fixture_get(&fx, key);
        double worst, ratio = e ? compare(m.grads + m.tensors[i].offset, e, FX_ATOL, FX_RTOL, &worst) : INFINITY;
        check(ratio <= 1.0, "%s: grad %-18s within tolerance (worst diff %.2e)", base, m.tensors[i].name, e ? worst : NAN);
    }
    fixture_check_steps(&fx, base, "", &m, NULL, inp, tgt, B, T, &o, 1);
    // the same steps from the same start, each as 2 micro-batches of B/2 rows (gradient accumulation, -d)
    free(inp);
    free(tgt);
    model_free(&m);
    fixture_model(&fx, base, &m, &B, &T, &inp, &tgt, &o);
    acts_alloc(&m, B, T);
    fixture_check_steps(&fx, base, "2 micro-batches: ", &m, NULL, inp, tgt, B, T, &o, 2);
    free(inp);
    free(tgt);
    model_free(&m);
    fixture_free(&fx);
}

// Twice: through the fast twins that training uses, and through the plain loops of Part I that
// define every layer (impl = definitions), so both are checked against PyTorch.
static void test_fixtures(void) {
    const char* names[] = {"gpt2", "gpt2_gate", "llama", "llama_gate", "llama_mha", "mixed", "mup"};
    for (int ref = 0; ref <= 1; ref++) {
        impl = ref ? definitions : twins;
        printf("PyTorch fixtures, %s\n", ref ? "every layer by its definition (Part I's loops)" : "fast paths");
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
            char path[256];
            snprintf(path, sizeof(path), "test/fixtures/model_%s.bin", names[i]);
            test_model_fixture(path);
        }
    }
    impl = twins;
}


// ---- 1b. the generator and every initializer against PyTorch (test/fixtures/init_torch.bin) --------
// The names encode the call (dev/ref/make_init_fixtures.py): "<op>/seed=S/key=value/...", or
// "seq/seed=S/k=K/op=<op>/..." for the K-th call on one generator. The value of `key` in a name:
static const char* name_field(const char* name, const char* key, char* out, size_t cap) {
    char pat[40];
    snprintf(pat, sizeof(pat), "/%s=", key);
    const char* p = strstr(name, pat);
    if (!p) return NULL;
    p += strlen(pat);
    size_t n = strcspn(p, "/");
    if (*p == '\'') { p++; n -= 2; }                    // a Python string repr: 'xavier_normal'
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
    return out;
}
static double name_num(const char* name, const char* key) {
    char buf[64];
    return name_field(name, key, buf, sizeof(buf)) ? strtod(buf, NULL) : NAN;
}
// 0 where the name has no such key (a model or a scheme has no n): NAN cast to int is undefined.
static int name_int(const char* name, const char* key) {
    double v = name_num(name, key);
    return isnan(v) ? 0 : (int)v;
}

// Runs one fixture call on g into out (float32, or int32 for randperm, float64 for uniform_f64).
static void run_init_op(Rng* g, const char* op, const char* name, void* out) {
    float* w = (float*)out;
    int n = name_int(name, "n"), rows = name_int(name, "rows"), cols = name_int(name, "cols");
    char text[64];
    if (!strcmp(op, "uniform")) init_uniform(g, w, n, (float)name_num(name, "a"), (float)name_num(name, "b"));
    else if (!strcmp(op, "uniform_f64")) for (int i = 0; i < n; i++) ((double*)out)[i] = rng_uniform01_f64(g);
    else if (!strcmp(op, "normal")) init_normal_d(g, w, n, name_num(name, "mean"), name_num(name, "std"));
    else if (!strcmp(op, "trunc_normal"))
        init_trunc_normal_d(g, w, n, name_num(name, "mean"), name_num(name, "std"), name_num(name, "a"), name_num(name, "b"));
    else if (!strcmp(op, "randperm")) rng_randperm(g, (int*)out, n);
    else if (!strcmp(op, "sparse")) init_sparse_d(g, w, rows, cols, name_num(name, "sparsity"), name_num(name, "std"));
    else if (!strcmp(op, "scheme")) init_matrix_text(g, w, rows, cols, name_field(name, "text", text, sizeof(text)));
    else if (!strcmp(op, "model")) {
        // the tiny models of make_init_fixtures.py (TINY, PRESETS), initialized by -I RECIPE with the
        // fixture's seed (model_init seeds its own generator), tensors concatenated in table order
        char preset[16], recipe[96];
        Options o;
        options_default(&o);
        o.preset = name_field(name, "preset", preset, sizeof(preset));
        o.L = 2; o.C = 8; o.H = 2; o.F = 16; o.T = o.maxT = 4; o.gate = 1;
        o.KVH = !strcmp(preset, "llama") ? 1 : 2;
        Config c = config_from_options(&o, 12);
        Model m;
        model_build(&m, &c);
        InitSpec spec;
        parse_init(&spec, name_field(name, "recipe", recipe, sizeof(recipe)), -1.0);
        model_init(&m, &spec, (uint64_t)name_num(name, "seed"));
        size_t k = 0;
        for (int i = 0; i < m.num_tensors; i++) {
            memcpy(w + k, m.params + m.tensors[i].offset, m.tensors[i].numel * sizeof(float));
            k += m.tensors[i].numel;
        }
        model_free(&m);
    }
    else {
        // the nn.init calls of the original fixture, spelled as schemes
        char spec[96];
        if (!strcmp(op, "kaiming_uniform") || !strcmp(op, "kaiming_normal"))
            snprintf(spec, sizeof(spec), "%s:leaky_relu:%.17g", op, name_num(name, "a"));
        else if (!strcmp(op, "orthogonal") || !strncmp(op, "xavier_", 7))
            snprintf(spec, sizeof(spec), "%s:%.17g", op, name_num(name, "gain"));
        else { check(0, "init fixture: unknown op in %s", name); return; }
        init_matrix_text(g, w, rows, cols, spec);
    }
}

// Orthogonal goes through QR, in double here and in LAPACK float there: it agrees to this, not bitwise
// (measured worst 1.7e-6, entries up to ~0.7).
#define ORTHO_ATOL 5e-6

static void test_init_fixture(void) {
    printf("initializers vs PyTorch (test/fixtures/init_torch.bin)\n");
    Fixture fx;
    if (fixture_load(&fx, "test/fixtures/init_torch.bin") != 0) { check(0, "cannot read test/fixtures/init_torch.bin"); return; }
    Rng g;
    int exact = 0, bad = 0, ortho = 0, schemes_seen = 0, models_seen = 0;
    double ortho_worst = 0.0;
    for (int i = 0; i < fx.n; i++) {
        FixtureEntry* e = &fx.e[i];
        char op[32];
        int seq = strncmp(e->name, "seq/", 4) == 0;
        if (seq) name_field(e->name, "op", op, sizeof(op));
        else snprintf(op, sizeof(op), "%.*s", (int)strcspn(e->name, "/"), e->name);
        if (!seq || name_num(e->name, "k") == 0) {
            char seed[32];
            name_field(e->name, "seed", seed, sizeof(seed));
            rng_seed(&g, strtoull(seed, NULL, 10));
        }
        size_t esize = e->dtype == 2 ? 8 : 4;
        void* got = xcalloc(e->count, esize);
        run_init_op(&g, op, e->name, got);
        char text[64];
        int is_ortho = !strcmp(op, "orthogonal") || (!strcmp(op, "scheme") && !strncmp(name_field(e->name, "text", text, sizeof(text)), "orthogonal", 10));
        schemes_seen += !strcmp(op, "scheme");
        models_seen += !strcmp(op, "model");
        if (is_ortho) {
            double worst;
            compare((const float*)got, e, ORTHO_ATOL, 0.0, &worst);
            ortho_worst = fmax(ortho_worst, worst);
            ortho++;
            if (worst > ORTHO_ATOL) { bad++; printf("        %s: off by %.2e\n", e->name, worst); }
        } else if (memcmp(got, e->data, e->count * esize) != 0) {
            bad++;
            printf("        %s: not bit-identical\n", e->name);
        } else {
            exact++;
        }
        free(got);
    }
    check(bad == 0 && exact + ortho == fx.n, "%d generator/initializer calls bit-identical to PyTorch, %d orthogonal within %.0e "
          "(worst %.1e); %d of them schemes through init_matrix_text, %d whole models initialized by a -I recipe",
          exact, ortho, ORTHO_ATOL, ortho_worst, schemes_seen, models_seen);
    fixture_free(&fx);
}

// calculate_gain: PyTorch's table, and the measured GELU/SiLU gains [Errata 001-7, fact 13]
static void test_gains(void) {
    printf("calculate_gain\n");
    struct { const char* name; double param, want, tol; } cases[] = {
        {"linear", NAN, 1.0, 0}, {"conv2d", NAN, 1.0, 0}, {"sigmoid", NAN, 1.0, 0}, {"tanh", NAN, 5.0 / 3, 0},
        {"relu", NAN, sqrt(2.0), 0}, {"leaky_relu", NAN, sqrt(2.0 / (1 + 0.01 * 0.01)), 0},
        {"leaky_relu", 0.2, sqrt(2.0 / 1.04), 0}, {"selu", NAN, 0.75, 0},
        {"gelu", NAN, sqrt(2.35172), 1e-5}, {"silu", NAN, sqrt(2.81076), 1e-5},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        double got = calculate_gain(cases[i].name, cases[i].param);
        check(fabs(got - cases[i].want) <= cases[i].tol * cases[i].want, "calculate_gain(%s, %g) = %.7f (gain^2 %.5f)",
              cases[i].name, cases[i].param, got, got * got);
    }
    // leaky_relu(0.01): 2/(1+1e-4) = 1.9998 [Errata 001-7]; GELU closed form 1/3 + 1/(2 pi sqrt 3)
    double g = calculate_gain("gelu", NAN);
    check(fabs(1.0 / (g * g) - (1.0 / 3 + 1.0 / (2 * M_PI * sqrt(3.0)))) < 1e-12 &&
          fabs(pow(calculate_gain("leaky_relu", NAN), 2) - 1.9998) < 1e-4,
          "E[GELU(z)^2] by quadrature = 1/3 + 1/(2 pi sqrt 3) to 1e-12; leaky_relu gain^2 = 1.9998");
    fflush(stdout);
    fatal_armed = 1;
    int refused = 0;
    if (setjmp(fatal_jump) == 0) calculate_gain("swish2", NAN);
    else refused = strstr(fatal_msg, "'swish2'") != NULL;
    fatal_armed = 0;
    check(refused, "calculate_gain refuses an unknown nonlinearity: %s", fatal_msg);
}

// ---- 1c. every scheme's formula, its samples, and the initialization facts of [Errata] ---------
#define SR 256      // sampling tests draw (SR, SC) = (fan_out, fan_in) matrices: 98304 values
#define SC 384

// Each scheme of the catalogue with the std a (256, 384) matrix must have, computed here from the
// formula independently of train_gpt2.c, and the mean. The sample std must fall within 1.5 x 6
// standard errors of a normal's sample std (the std of a sample std is ~ sigma sqrt((kurtosis - 1) / 4n);
// 6/sqrt(2n) = 1.4%, so 2.1%): the factor 1.5 leaves room for sparse, whose kurtosis 3/(1 - S) makes
// its sample std vary up to 1.6 times more. Bounded schemes must stay inside their bounds.
static void test_scheme_sampling(void) {
    printf("schemes: formula and sampling band, every scheme\n");
    const double fi = SC, fo = SR, relu2 = 2.0;
    const double k2 = 0.8796256610342398, k3 = 0.9865783925581086;   // trunc at 2 and 3 sigma (fact 14)
    struct { const char* text; double std, mean, bound; } cases[] = {
        {"zeros", 0, 0, 0}, {"ones", 0, 1, 0}, {"constant:0.5", 0, 0.5, 0},
        {"normal:0.05", 0.05, 0, 0}, {"normal:0.1:0.02", 0.02, 0.1, 0},
        {"uniform:0.3", 0.3 / sqrt(3.0), 0, 0.3}, {"uniform:-0.1:0.3", 0.4 / sqrt(12.0), 0.1, 0},
        {"trunc_normal:0.02", 0.02, 0, 2.0}, {"trunc_sigma:1", k2, 0, 2.0}, {"trunc_sigma:0.02:3", 0.02 * k3, 0, 0.06},
        {"eye", sqrt((1.0 / fi) * (1 - 1.0 / fi)), 1.0 / fi, 1.0}, {"sparse:0.25:0.1", 0.1 * sqrt(0.75), 0, 0},
        {"lecun_normal", 1 / sqrt(fi), 0, 0}, {"lecun_uniform", 1 / sqrt(fi), 0, sqrt(3 / fi)},
        {"xavier_normal", sqrt(2 / (fi + fo)), 0, 0}, {"xavier_uniform:2", 2 * sqrt(2 / (fi + fo)), 0, 2 * sqrt(6 / (fi + fo))},
        {"kaiming_normal", sqrt(relu2 / fi), 0, 0}, {"kaiming_normal:relu:fan_out", sqrt(relu2 / fo), 0, 0},
        {"kaiming_normal:gelu", sqrt(2.35172 / fi), 0, 0}, {"kaiming_normal:silu", sqrt(2.81076 / fi), 0, 0},
        {"kaiming_uniform:leaky_relu:0.2", sqrt(2 / 1.04 / fi), 0, sqrt(3 * 2 / 1.04 / fi)},
        {"kaiming_uniform:tanh", 5.0 / 3 / sqrt(fi), 0, 5.0 / 3 * sqrt(3 / fi)},
        {"torch_linear", 1 / sqrt(3 * fi), 0, 1 / sqrt(fi)},
        {"orthogonal", 1 / sqrt(fi), 0, 0}, {"orthogonal:2", 2 / sqrt(fi), 0, 0},
        {"sigma", 0.02, 0, 0}, {"sigma:0.05", 0.05, 0, 0}, {"gamma:0.5", 1 / sqrt(fi), 0, 0}, {"gamma:1", 1 / fi, 0, 0},
        {"small_init", sqrt(2 / (5 * fi)), 0, 0}, {"trunc_lecun", k3 / sqrt(fi), 0, 3 / sqrt(fi)},
    };
    int n_cases = (int)(sizeof(cases) / sizeof(cases[0])), covered = 0;
    for (int i = 0; i < NUM_SCHEMES; i++) {
        int found = 0;
        for (int c = 0; c < n_cases; c++) found |= !strncmp(cases[c].text, schemes[i].name, strlen(schemes[i].name)) &&
                                                   (cases[c].text[strlen(schemes[i].name)] == 0 || cases[c].text[strlen(schemes[i].name)] == ':');
        covered += found;
        if (!found) printf("        scheme %s has no sampling case\n", schemes[i].name);
    }
    check(covered == NUM_SCHEMES, "all %d schemes of the catalogue have a sampling case", NUM_SCHEMES);
    float* w = xmalloc((size_t)SR * SC * sizeof(float));
    Rng g;
    for (int c = 0; c < n_cases; c++) {
        rng_seed(&g, 4242 + c);
        Scheme s;
        parse_scheme(&s, cases[c].text);
        Dist d = scheme_dist(&s, SR, SC, 0);
        init_matrix_text(&g, w, SR, SC, cases[c].text);
        Stats st = stats_of(w, NULL, (long)SR * SC);
        double formula = dist_std(&d, SR, SC), want = cases[c].std, n = (double)SR * SC;
        int formula_ok = fabs(formula - want) <= 1e-6 * want + 1e-12;
        int std_ok = want == 0 ? st.std == 0 : fabs(st.std - want) <= 6.0 / sqrt(2 * n) * want * 1.5;
        int mean_ok = fabs(st.mean - cases[c].mean) <= 6.0 * want / sqrt(n) + 1e-12 * (want == 0);
        int bound_ok = cases[c].bound == 0 || (st.max <= cases[c].bound * (1 + 1e-6) && st.min >= -cases[c].bound * (1 + 1e-6));
        check(formula_ok && std_ok && mean_ok && bound_ok, "%-31s std %.6f (formula %.6f, sample %.6f) mean %+.2e%s",
              cases[c].text, want, formula, st.std, st.mean, cases[c].bound ? " within bounds" : "");
    }
    // orthogonal: W^T W = I (rows >= cols) or W W^T = I, to 1e-5, with the gain divided out
    int shapes[3][2] = {{64, 64}, {100, 40}, {40, 100}};
    for (int k = 0; k < 3; k++) {
        int r = shapes[k][0], cc = shapes[k][1], m = r < cc ? r : cc;
        rng_seed(&g, 77 + k);
        init_matrix_text(&g, w, r, cc, "orthogonal:1.5");
        double worst = 0.0;
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++) {
                double dot = 0.0;
                for (int t = 0; t < (r < cc ? cc : r); t++)
                    dot += r < cc ? (double)w[i * cc + t] * w[j * cc + t] : (double)w[t * cc + i] * w[t * cc + j];
                worst = fmax(worst, fabs(dot / 2.25 - (i == j)));
            }
        check(worst <= 1e-5, "orthogonal:1.5 on %dx%d: %s = gain^2 I to %.1e", r, cc, r < cc ? "W W^T" : "W^T W", worst);
    }
    // bad schemes are refused with one line
    // each malformed scheme and the part of it its one-line error must name
    const char* bad[][2] = {{"xavier_normal:1:2", "'xavier_normal' takes 0 to 1 numbers, got 2"},
                            {"kaiming_normal:swish", "'swish'"}, {"normal:abc", "'abc'"},
                            {"constant", "'constant' takes 1 to 1 numbers, got 0"}, {"nosuch", "'nosuch'"},
                            {"uniform:1:2:3", "'uniform' takes 0 to 2 numbers, got 3"}};
    int n_bad = (int)(sizeof(bad) / sizeof(bad[0])), refused = 0;
    fatal_armed = 1;
    for (int i = 0; i < n_bad; i++) {
        if (setjmp(fatal_jump) == 0) init_matrix_text(&g, w, 4, 4, bad[i][0]);
        else refused += strstr(fatal_msg, bad[i][1]) != NULL;
    }
    fatal_armed = 0;
    check(refused == n_bad, "malformed schemes refused, each error naming the problem (%d of %d)", refused, n_bad);
    free(w);
}

// A Model with only its configuration set and a tensor of the given kind and shape, for tensor_dist.
static Tensor fake_tensor(int kind, int layer, int rows, int cols) {
    Tensor t;
    memset(&t, 0, sizeof(t));
    t.kind = kind;
    t.layer = layer;
    t.group = kind_info[kind].group;
    t.rows = rows;
    t.cols = cols;
    return t;
}
static double recipe_std(const char* recipe, int kind, int layer, int rows, int cols, int L, int C) {
    InitSpec spec;
    parse_init(&spec, recipe, -1.0);
    Model m;
    memset(&m, 0, sizeof(m));
    m.cfg.L = L;
    m.cfg.C = C;
    Tensor t = fake_tensor(kind, layer, rows, cols);
    Dist d = tensor_dist(&spec, &m, &t);
    return dist_std(&d, rows, cols);
}

static double q_gelu;           // c_phi(q) = E[phi(sqrt(q) z)^2] / q for fact 13
static double gelu_tanh_d(double x) { double u = sqrt(2 / M_PI) * (x + 0.044715 * x * x * x); return 0.5 * x * (1 + tanh(u)); }
static double relu_d(double x) { return x > 0 ? x : 0; }
static double relu_sq(double x) { return x > 0 ? x * x : 0; }
static double gelu_tanh_sq(double x) { return gelu_tanh_d(x) * gelu_tanh_d(x); }
static double tanh_sq(double x) { return tanh(x) * tanh(x); }
static double dgelu_sq(double x) { double d = 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI); return d * d; }
static double dgelu_tanh_sq(double x) { double h = 1e-5, d = (gelu_tanh_d(x + h) - gelu_tanh_d(x - h)) / (2 * h); return d * d; }
static double dsilu_sq(double x) { double s = 1 / (1 + exp(-x)), d = s * (1 + x * (1 - s)); return d * d; }
static double dtanh_sq(double x) { double d = 1 - tanh(x) * tanh(x); return d * d; }
static double gelu_scaled_sq(double x) { return gelu_exact_sq(sqrt(q_gelu) * x) / q_gelu; }

static int near(double got, double want, double rtol) { return fabs(got - want) <= rtol * fabs(want); }

static void test_init_facts(void) {
    printf("[Errata]: facts the code should assert (initialization)\n");
    // 1-3: GPT-2 residual std 0.02/sqrt(2L) through the gpt2 recipe (values as printed, to their digits)
    int Ls[6] = {12, 24, 36, 48, 80, 96};
    double want[6] = {0.0040825, 0.0028868, 0.0023570, 0.0020412, 0.0015811, 0.0014434};
    int ok = 1;
    for (int i = 0; i < 6; i++) ok &= fabs(recipe_std("gpt2", K_WO, 0, 768, 768, Ls[i], 768) - want[i]) < 1e-7;
    double f80 = recipe_std("gpt2", K_WDOWN, 3, 8192, 28672, 80, 8192) / 0.02;
    check(ok && near(f80, 0.0790569, 1e-6) && near(0.02 / (0.02 * f80), 12.6491, 1e-5) &&
          near(recipe_std("gpt2", K_WO, 0, 64, 64, 12, 64) / recipe_std("gpt2", K_WO, 0, 64, 64, 48, 64), 2.0, 1e-12),
          "facts 1-3: gpt2 out/down std 0.02/sqrt(2L) = 0.0040825 (L=12) ... 0.0014434 (L=96); 1/sqrt(160) = 0.0790569; XL/Small ratio 2 (not 5)");
    // 4: Llama-2-7B through [InitGuide ch. 7]'s llama recipe (L = 32)
    check(near(recipe_std("llama", K_WTE, -1, 32000, 4096, 32, 4096), 0.015625, 1e-6) &&
          near(recipe_std("llama", K_WQ, 0, 4096, 4096, 32, 4096), 0.0220971, 1e-6) &&
          near(recipe_std("llama", K_WO, 0, 4096, 4096, 32, 4096), 0.0027621, 5e-5) &&
          near(recipe_std("llama", K_WDOWN, 0, 4096, 11008, 32, 4096), 0.0016849, 5e-5),
          "fact 4: llama recipe at Llama-2-7B: embedding 0.015625, He 0.0220971, o_proj 0.0027621, down_proj 0.0016849");
    // 5-8: Xavier, He, nn.Linear's default
    Scheme s;
    Dist d;
    parse_scheme(&s, "xavier_uniform"); d = scheme_dist(&s, 256, 512, 0);
    int x_ok = near(d.hi, 0.0883883, 1e-6);
    parse_scheme(&s, "xavier_normal"); d = scheme_dist(&s, 256, 512, 0);
    x_ok &= near(d.std, 0.0510310, 1e-6);
    d = scheme_dist(&s, 300, 300, 0);
    x_ok &= near(d.std * d.std, 1.0 / 300, 1e-14);
    check(x_ok, "fact 5: Xavier (512 -> 256) uniform bound 0.0883883, normal std 0.0510310; Xavier(n, n) variance = 1/n");
    parse_scheme(&s, "kaiming_uniform:relu"); d = scheme_dist(&s, 256, 512, 0);
    check(near(d.hi, 0.1082532, 1e-6) && near(d.hi * d.hi / 3, 2.0 / 512, 1e-14), "fact 6: He uniform bound sqrt(6/512) = 0.1082532, bound^2/3 = 2/fan_in");
    parse_scheme(&s, "torch_linear"); d = scheme_dist(&s, 256, 512, 0);
    check(near(d.hi, 0.0441942, 1e-6) && near(dist_std(&d, 256, 512) * dist_std(&d, 256, 512), 1.0 / (3 * 512), 1e-12),
          "fact 7: nn.Linear default bound 1/sqrt(512) = 0.0441942, variance 1/(3 fan_in): 1/6 of He's");
    parse_scheme(&s, "xavier_normal");
    check(near(scheme_dist(&s, 8192, 8192, 0).std, 0.0110485, 1e-5) && near(scheme_dist(&s, 28672, 8192, 0).std, 0.0073657, 1e-5),
          "fact 8: Xavier W_Q (8192^2) std 0.0110485, W_gate (8192 -> 28672) 0.0073657");
    // 11: ReLU moments; 15-17: deep ReLU nets, closed forms from them
    double e1 = gauss_expect(relu_d), e2 = gauss_expect(relu_sq);
    check(near(e1, 0.3989423, 1e-6) && near(e2, 0.5, 1e-9) && near(e2 - e1 * e1, 0.3408451, 1e-6) &&
          near(sqrt(e2 - e1 * e1), 0.5838192, 1e-6) && near(sqrt(2 * e2 - 2 * e1 * e1), 0.8256450, 1e-6) &&
          near(sqrt(2.0) * e1, 0.5641896, 1e-6),
          "fact 11: ReLU E = 0.3989423, E2 = 0.5, Var = 0.3408451; He-net post-ReLU std 0.8256450, mean 0.5641896");
    // Xavier on a square (d, d) layer is Var 1/d, and ReLU keeps E2 = 1/2 of it: a factor d * Var * E2 per layer
    parse_scheme(&s, "xavier_normal"); double xstd = scheme_dist(&s, 512, 512, 0).std;
    double xavier_relu = 512 * xstd * xstd * e2;
    check(near(pow(xavier_relu, 32), 2.3283e-10, 1e-4) && near(2 * pow(xavier_relu, 32) * (e2 - e1 * e1), 1.5872e-10, 1e-4) &&
          near(2 * e2 - 2 * e1 * e1, 0.6816901, 1e-6),
          "facts 15-16: Xavier+ReLU 32 layers E[h^2] = 2^-32, Var = 1.5872e-10; Kaiming Var = 1 - 1/pi = 0.6816901");
    // 12-13: GELU (exact, tanh), SiLU, tanh moments and the variance-preserving gains
    check(near(gauss_expect(gelu_exact_sq), 0.4252215, 1e-6) && near(gauss_expect(dgelu_sq), 0.455851, 1e-5) &&
          near(gauss_expect(gelu_tanh_sq), 0.425194, 1e-5) && near(gauss_expect(dgelu_tanh_sq), 0.455818, 1e-5) &&
          near(gauss_expect(silu_sq), 0.355776, 1e-5) && near(gauss_expect(dsilu_sq), 0.379482, 1e-5) &&
          near(gauss_expect(tanh_sq), 0.394294, 1e-5) && near(gauss_expect(dtanh_sq), 0.464403, 1e-5),
          "fact 12: E[phi^2], E[phi'^2]: GELU 0.4252215/0.455851, GELU-tanh 0.425194/0.455818, SiLU 0.355776/0.379482, tanh 0.394294/0.464403");
    double cq[3];
    double qs[3] = {1e-4, 1.0, 1e4};
    for (int i = 0; i < 3; i++) { q_gelu = qs[i]; cq[i] = gauss_expect(gelu_scaled_sq); }
    check(near(pow(calculate_gain("gelu", NAN), 2), 2.35172, 1e-5) && near(pow(calculate_gain("silu", NAN), 2), 2.81076, 1e-5) &&
          near(1 / gauss_expect(tanh_sq), 2.53618, 1e-5) && fabs(cq[0] - 0.25) < 1e-3 && near(cq[1], 0.4252215, 1e-6) && fabs(cq[2] - 0.5) < 1e-3,
          "fact 13: gain^2 GELU 2.35172, SiLU 2.81076, tanh 2.53618; c_GELU(q) = %.4f (q=1e-4) -> 0.25, %.4f (q=1e4) -> 0.5", cq[0], cq[2]);
    parse_scheme(&s, "trunc_sigma:1:2"); d = scheme_dist(&s, 4, 4, 0);
    check(near(dist_std(&d, 4, 4), 0.8796257, 1e-6), "fact 14: truncation at +-2 sigma keeps a std factor 0.8796257");
    // 24-25, 27: gamma-init
    parse_scheme(&s, "gamma:0.5"); double g05 = scheme_dist(&s, 2048, 2048, 0).std;
    parse_scheme(&s, "gamma:1"); double g1 = scheme_dist(&s, 2048, 2048, 0).std;
    parse_scheme(&s, "gamma:0.58");
    check(near(g05 * g05, 4.8828e-4, 1e-4) && near(g1 * g1, 2.3842e-7, 1e-4) &&
          near(scheme_dist(&s, 768, 768, 0).std, 0.0212075, 1e-5) && near(scheme_dist(&s, 7168, 7168, 0).std, 0.0058059, 1e-5) &&
          near(recipe_std("gamma:0.58", K_WTE, -1, 50257, 768, 12, 768), 0.0212075, 1e-5),
          "facts 24, 27: gamma-init Var at d=2048: 4.8828e-4 (gamma 1/2), 2.3842e-7 (gamma 1); gamma 0.58: 0.0212075 (768), 0.0058059 (7168); wte (V, d) gets d^-gamma");
    parse_scheme(&s, "gamma:0.754984"); double v5 = pow(scheme_dist(&s, 2048, 2048, 0).std, 2);
    parse_scheme(&s, "gamma:1.811961"); double v12 = pow(scheme_dist(&s, 2048, 2048, 0).std, 2);
    check(near(v5, 1e-5, 1e-5) && near(v12, 1e-12, 1e-5),
          "fact 25: gamma-init's Var at d = 2048 equals eps = 1e-5 at gamma* = 0.754984 (%.6e), eps = 1e-12 at 1.811961 (%.6e)",
          v5, v12);
}

// A model of the given preset and width, initialized by -I recipe (and --resid-scale when >= 0).
static void recipe_model(Model* m, const char* preset, int L, int C, const char* recipe, int resid, int mup_base, uint64_t seed) {
    Options o;
    options_default(&o);
    o.preset = preset;
    o.L = L; o.C = C; o.H = 4; o.T = o.maxT = 8;
    o.init = recipe;
    o.resid_scale = resid;
    o.mup_base = mup_base;
    Config c = config_from_options(&o, 32);
    model_build(m, &c);
    InitSpec spec;
    init_spec_from_options(&spec, &o);
    model_init(m, &spec, seed);
}

// Largest |a/b - f| over the entries of one tensor kind of two models (b's nonzero entries).
static double ratio_dev(const Model* a, const Model* b, int kind, double f) {
    double worst = 0.0;
    for (int i = 0; i < a->num_tensors; i++) {
        const Tensor* t = &a->tensors[i];
        if (t->kind != kind) continue;
        int layer_f = f < 0;        // f < 0: the depth factor 1/sqrt(2(l+1))
        double fk = layer_f ? 1.0 / sqrt(2.0 * (t->layer + 1)) : f;
        for (size_t j = 0; j < t->numel; j++) {
            double x = a->params[t->offset + j], y = b->params[t->offset + j];
            if (y != 0.0) worst = fmax(worst, fabs(x / y - fk) / fk);
        }
    }
    return worst;
}

static void test_resid_and_mup(void) {
    printf("residual factors and muP\n");
    // the same seed draws the same normals; the residual factor only rescales attn.wo and mlp.wdown
    // (normal_ rounds std * z once, so the ratio is f to float precision, not exactly)
    Model base, scaled, m2;
    recipe_model(&base, "gpt2", 3, 32, "xavier_normal", -1, 0, 5);
    recipe_model(&scaled, "gpt2", 3, 32, "xavier_normal", 1, 0, 5);
    double f = 1.0 / sqrt(6.0);
    int others_equal = 1;
    for (int i = 0; i < base.num_tensors; i++) {
        const Tensor* t = &base.tensors[i];
        if (t->kind != K_WO && t->kind != K_WDOWN)
            others_equal &= !memcmp(base.params + t->offset, scaled.params + t->offset, t->numel * sizeof(float));
    }
    check(others_equal && ratio_dev(&scaled, &base, K_WO, f) < 1e-6 && ratio_dev(&scaled, &base, K_WDOWN, f) < 1e-6,
          "--resid-scale 1 on xavier_normal (L=3): attn.wo and mlp.wdown x 1/sqrt(6) = %.6f, all else bit-identical", f);
    recipe_model(&m2, "gpt2", 3, 32, "gpt2", 0, 0, 5);
    model_free(&scaled);
    recipe_model(&scaled, "gpt2", 3, 32, "gpt2", -1, 0, 5);
    check(ratio_dev(&scaled, &m2, K_WO, f) < 1e-6 && ratio_dev(&scaled, &m2, K_WDOWN, f) < 1e-6 && ratio_dev(&scaled, &m2, K_WQ, 1.0) == 0,
          "-I gpt2 carries 1/sqrt(2L) on out/down; --resid-scale 0 removes it");
    model_free(&base); model_free(&scaled); model_free(&m2);
    recipe_model(&base, "llama", 3, 32, "hf_llama", -1, 0, 6);
    recipe_model(&scaled, "llama", 3, 32, "depth_scaled", -1, 0, 6);
    check(ratio_dev(&scaled, &base, K_WO, -1) < 1e-6 && ratio_dev(&scaled, &base, K_WDOWN, -1) < 1e-6 && ratio_dev(&scaled, &base, K_WUP, 1.0) == 0,
          "depth_scaled: out/down of block l x 1/sqrt(2(l+1)) (1, 0.5, 0.408 for l = 0, 1, 2)");
    model_free(&base); model_free(&scaled);
    recipe_model(&base, "llama", 3, 32, "xavier_normal", -1, 0, 7);
    recipe_model(&scaled, "llama", 3, 32, "deepnet", -1, 0, 7);
    double beta = pow(24.0, -0.25);
    check(ratio_dev(&scaled, &base, K_WV, beta) < 1e-6 && ratio_dev(&scaled, &base, K_WGATE, beta) < 1e-6 &&
          ratio_dev(&scaled, &base, K_WDOWN, beta) < 1e-6 && ratio_dev(&scaled, &base, K_WQ, 1.0) == 0,
          "deepnet (L=3): v, out, up, gate, down x (8L)^-1/4 = %.6f; q, k unchanged", beta);
    model_free(&base); model_free(&scaled);
    // muP at two widths around base 64: width_mult 1/2 and 2
    int widths[2] = {32, 128};
    for (int k = 0; k < 2; k++) {
        Model m;
        recipe_model(&m, "llama", 2, widths[k], "mup", -1, 64, 8);
        double wm = widths[k] / 64.0, hd = widths[k] / 4.0;
        int lr_ok = 1, head_zero = 1;
        for (int i = 0; i < m.num_tensors; i++) {
            const Tensor* t = &m.tensors[i];
            int hidden = t->group == G_QKV || t->group == G_ATTN_GATE || t->group == G_OUT || t->group == G_UP || t->group == G_DOWN;
            lr_ok &= t->lr_mult == (float)(hidden ? 1.0 / wm : 1.0);
            if (t->kind == K_LMHEAD)
                for (size_t j = 0; j < t->numel; j++) head_zero &= m.params[t->offset + j] == 0.0f;
        }
        Stats emb = stats_of(m.p[K_WTE], NULL, (long)m.kind_numel[K_WTE]);
        Stats wq = stats_of(m.p[K_WQ], NULL, (long)m.kind_numel[K_WQ]);
        check(lr_ok && head_zero && m.cfg.attn_scale == (float)(1.0 / hd) && m.cfg.logit_scale == (float)(1.0 / wm) &&
              fabs(emb.std - 1.0) < 0.1 && fabs(wq.std * sqrt(widths[k]) - 1.0) < 0.1,
              "muP at C=%d, base 64: hidden lr x %g, others x 1; head 0, logits x %g; attention 1/d_head = 1/%g; "
              "emb std %.3f (width-independent), wq std %.4f = 1/sqrt(fan_in)", widths[k], 1.0 / wm, 1.0 / wm, hd, emb.std, wq.std);
        model_free(&m);
    }
    // fact 23 [Errata 001-17]: base 256 -> width 8192: 0.03125, lr 0.01 becomes 3.125e-4
    {
        Model m;
        recipe_model(&m, "llama", 1, 256, "mup", -1, 8, 9);
        Tensor* t = model_find(&m, "h.0.attn.wq");
        check(t->lr_mult == 0.03125f && near(0.01 * t->lr_mult, 3.125e-4, 1e-7), "fact 23: muP hidden lr multiplier at width_mult 32 "
              "(256/8192) = %g, effective lr %g", (double)t->lr_mult, 0.01 * t->lr_mult);
        model_free(&m);
    }
    fflush(stdout);
    fatal_armed = 1;
    int refused = 0;
    static Model m;     // static: a local that changed after setjmp is indeterminate after the longjmp
    if (setjmp(fatal_jump) == 0) recipe_model(&m, "gpt2", 1, 32, "mup", -1, 0, 1);
    else refused = strstr(fatal_msg, "--tie 0") != NULL;
    fatal_armed = 0;
    model_free(&m);     // model_build ran either way: it is model_init that refuses
    check(refused, "-I mup with a tied head is refused: %s", fatal_msg);
}

// [InitFP §3.3] at a smaller size (d = 512, 8 layers, batch 64): a ReLU network initialized with
// kaiming_normal keeps E[h^2] ~ 1; with xavier_normal it halves per layer (0.5^8 = 1/256).
static void test_deep_relu(void) {
    printf("deep ReLU network, [InitFP §3.3] (d = 512, 8 layers)\n");
    const int d = 512, L = 8, B = 64;
    const char* inits[2] = {"kaiming_normal:relu", "xavier_normal"};
    double want[2] = {1.0, pow(0.5, L)};
    float *x = xmalloc((size_t)B * d * sizeof(float)), *y = xmalloc((size_t)B * d * sizeof(float));
    float* W = xmalloc((size_t)d * d * sizeof(float));
    for (int k = 0; k < 2; k++) {
        Rng g;
        rng_seed(&g, 31 + k);
        init_normal(&g, x, (size_t)B * d, 0.0f, 1.0f);
        for (int l = 0; l < L; l++) {
            init_matrix_text(&g, W, d, d, inits[k]);
            impl.matmul_forward(y, x, W, NULL, B, d, d);
            for (long i = 0; i < (long)B * d; i++) x[i] = y[i] > 0 ? y[i] : 0.0f;
        }
        double e2 = 0.0;
        for (long i = 0; i < (long)B * d; i++) e2 += (double)x[i] * x[i];
        e2 /= (double)B * d;
        // finite-width spread of log E[h^2] is ~ sqrt(2 L / d) = 0.18 [Errata 001-19]: band x/1.8
        check(e2 / want[k] > 1 / 1.8 && e2 / want[k] < 1.8, "%-20s E[h^2] after %d ReLU layers %.4g (theory %.4g)", inits[k], L, e2, want[k]);
    }
    free(x); free(y); free(W);
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
    int exact;                    // the fast path only threads the definition's loops: equal bits
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
static void fd_matmul_fwd(OpCase* o) { impl.matmul_forward(o->out, o->in[0], o->in[1], o->in[2], o->d[0], o->d[1], o->d[2]); }
static void fd_matmul_bwd(OpCase* o, const float* dout) {
    impl.matmul_backward(o->din[0], o->din[1], o->din[2], dout, o->in[0], o->in[1], o->d[0], o->d[1], o->d[2]);
}
// attention: in = q, k, v; d = B, T, H, KVH, hd; aux[0] = att
static void fd_attn_fwd(OpCase* o) {
    impl.attention_forward(o->out, o->aux[0], o->in[0], o->in[1], o->in[2], o->d[0], o->d[1], o->d[2], o->d[3], o->d[4], o->f);
}
static void fd_attn_bwd(OpCase* o, const float* dout) {
    impl.attention_backward(o->din[0], o->din[1], o->din[2], dout, o->aux[0], o->in[0], o->in[1], o->in[2],
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
    attn_gate_forward(o->out, o->aux[0], o->in[0], o->d[0], o->d[1], o->d[2]);
}
static void fd_gate_bwd(OpCase* o, const float* dout) {
    float* dy = xmalloc(o->in_n[0] * sizeof(float));
    float* dg = xmalloc(o->in_n[1] * sizeof(float));
    attn_gate_backward(dy, dg, dout, o->in[0], o->aux[0], o->d[0], o->d[1], o->d[2]);
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
    impl.softmax_forward(o->aux[0], o->aux[1], (const int*)o->aux[2], o->d[0], o->d[1]);
    double s = 0.0;
    for (int i = 0; i < o->d[0]; i++) s += o->aux[1][i];
    o->out[0] = (float)(s / o->d[0]);
}
static void fd_ce_bwd(OpCase* o, const float* dout) {
    crossentropy_backward(o->aux[0], (const int*)o->aux[2], o->d[0], o->d[1], 1.0f);
    for (size_t i = 0; i < o->in_n[0]; i++) o->din[0][i] += dout[0] * o->aux[0][i];
}
// embedding: in[0] = wte [V,C], in[1] = wpe [T,C]; d = B, T, C; aux[0] = tokens (as int)
static void fd_emb_fwd(OpCase* o) { embedding_forward(o->out, (const int*)o->aux[0], o->in[0], o->in[1], o->d[0], o->d[1], o->d[2]); }
static void fd_emb_bwd(OpCase* o, const float* dout) {
    embedding_backward(o->din[0], o->din[1], dout, (const int*)o->aux[0], o->d[0], o->d[1], o->d[2]);
}
// residual: in[0] = a, in[1] = b; out = a + b passes its gradient to both unchanged
static void fd_resid_fwd(OpCase* o) { residual_forward(o->out, o->in[0], o->in[1], (long)o->out_n); }
static void fd_resid_bwd(OpCase* o, const float* dout) {
    for (size_t i = 0; i < o->out_n; i++) { o->din[0][i] += dout[i]; o->din[1][i] += dout[i]; }
}

// Builds a case with inputs of the given sizes and stds, runs the check, frees everything.
static void fd_case(Rng* g, void (*run)(OpCase*, Rng*), const char* name, void (*fwd)(OpCase*),
                    void (*bwd)(OpCase*, const float*), int n_in, const size_t* in_n, const float* in_std,
                    size_t out_n, const size_t* aux_n, const int* d, float f, int exact) {
    OpCase o = {.name = name, .n_in = n_in, .out_n = out_n, .f = f, .exact = exact, .forward = fwd, .backward = bwd};
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
    run(&o, g);
    for (int k = 0; k < n_in; k++) { free(o.in[k]); free(o.din[k]); }
    for (int k = 0; k < 4; k++) free(o.aux[k]);
    free(o.out);
}

// gemm reads W of the forward pass down its columns (sbk = 1) and packs it transposed; with AVX-512
// in 16 x 16 register blocks, elsewhere element by element. The same product with W transposed in
// memory first (sbn = 1, the plain row copy) must give the same bits: the packing moves values, the
// sums are the same fused multiply-adds in the same order. Shapes with edges in every direction:
// N = 75 leaves a panel of 11 columns, K = 1100 a slice of 76 (4 x 16 + 12) after two of KC = 512.
// Tall products (M > N) over several MC-row blocks take Bm packed once by pack_all (600 x 75, and
// 700 x 300 with two column blocks), except when it is larger than PACK_ALL_MAX (40 x 33 x 8200).
static void test_gemm(void) {
    printf("matrix multiply\n");
    const int shapes[][3] = {{37, 75, 1100}, {64, 64, 64}, {5, 32, 16}, {256, 130, 513},
                             {600, 75, 1100}, {700, 300, 600}, {40, 33, 8200}};
    Rng g;
    rng_seed(&g, 11);
    for (int si = 0; si < 7; si++) {
        int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
        float *A = rand_buf(&g, (size_t)M * K, 1.0f), *W = rand_buf(&g, (size_t)N * K, 1.0f);
        float *Wt = xmalloc((size_t)K * N * sizeof(float)), *c1 = xmalloc((size_t)M * N * sizeof(float));
        float* c2 = xmalloc((size_t)M * N * sizeof(float));
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) Wt[(long)k * N + n] = W[(long)n * K + k];
        matmul_forward_fast(c1, A, W, NULL, M, K, N);              // Bm = W^T, packed transposed
        gemm(M, N, K, A, K, 1, Wt, N, 1, c2, N, 0);                // Bm = Wt, packed row by row
        // Against a float64 product. Summed in order k = 0..K-1 in float, the sum's rounding error is
        // sum_k d_k S_k with |d_k| <= u = 2^-24 and S_k the partial sums: about u sqrt(sum_k S_k^2 / 3)
        // for independent roundings. The bound is 6 u sqrt(sum_k S_k^2), over 10 of those standard
        // deviations whatever the compiler does with the FMAs; one term missing or wrong is off by
        // about |a w| ~ 1, hundreds of times the bound even at K = 8200.
        double worst = 0.0;
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                double ref = 0.0, s2 = 0.0;
                for (int k = 0; k < K; k++) {
                    ref += (double)A[(long)m * K + k] * W[(long)n * K + k];
                    s2 += ref * ref;
                }
                worst = fmax(worst, fabs(c1[(long)m * N + n] - ref) / (6.0 * 0x1p-24 * sqrt(s2)));
            }
        check(memcmp(c1, c2, (size_t)M * N * sizeof(float)) == 0 && worst < 1.0,
              "%d x %d x %d: W read transposed = W transposed in memory, bit for bit; error vs float64 %.2f of its bound",
              M, N, K, worst);
        free(A); free(W); free(Wt); free(c1); free(c2);
    }
}

// max |fast - ref| / max |ref| over n values
static double rel_max_diff(const float* fast, const float* ref, long n) {
    double d = 0.0, m = 0.0;
    for (long i = 0; i < n; i++) {
        d = fmax(d, fabs((double)fast[i] - ref[i]));
        m = fmax(m, fabs((double)ref[i]));
    }
    return m > 0 ? d / m : (d > 0 ? INFINITY : 0.0);
}

// Runs fn once through the fast path and once through the reference loops, from the same inputs
// (`n_out` floats at `out`, restored between the two runs); returns their rel_max_diff.
static double fast_vs_reference(void (*fn)(void*), void* args, float* out, long n_out) {
    float* start = xmalloc(n_out * sizeof(float));
    float* fast = xmalloc(n_out * sizeof(float));
    memcpy(start, out, n_out * sizeof(float));
    impl = twins;
    fn(args);
    memcpy(fast, out, n_out * sizeof(float));
    memcpy(out, start, n_out * sizeof(float));
    impl = definitions;
    fn(args);
    impl = twins;
    double r = rel_max_diff(fast, out, n_out);
    free(start);
    free(fast);
    return r;
}

// The shapes: BT x C -> OC not multiples of the gemm tiles; attention with T > ATT_QB (two query
// blocks), GQA (H = 4 heads on KVH = 2), outputs that accumulate onto nonzero starting values.
typedef struct { float *out, *dinp, *dW, *db, *inp, *W, *b, *dout; int BT, C, OC; } MatmulArgs;
static void run_mm_forward(void* p) { MatmulArgs* a = p; impl.matmul_forward(a->out, a->inp, a->W, a->b, a->BT, a->C, a->OC); }
static void run_mm_backward(void* p) {
    MatmulArgs* a = p;
    impl.matmul_backward(a->dinp, a->dW, a->db, a->dout, a->inp, a->W, a->BT, a->C, a->OC);
}
typedef struct { float *dinp, *dW, *probs, *inp, *W, *scratch; const int* targets; int BT, C, V; float logit_scale; } HeadArgs;
static void run_head_backward(void* p) {
    HeadArgs* a = p;
    impl.lm_head_backward(a->dinp, a->dW, a->probs, a->targets, a->inp, a->W, a->scratch, a->BT, a->C, a->V, a->logit_scale);
}
typedef struct { float *y, *att, *q, *k, *v, *dq, *dk, *dv, *dy; int B, T, H, KVH, hd; } AttnArgs;
static void run_attn_forward(void* p) {
    AttnArgs* a = p;
    impl.attention_forward(a->y, a->att, a->q, a->k, a->v, a->B, a->T, a->H, a->KVH, a->hd, 1.0f / sqrtf(a->hd));
}
static void run_attn_backward(void* p) {
    AttnArgs* a = p;
    impl.attention_backward(a->dq, a->dk, a->dv, a->dy, a->att, a->q, a->k, a->v, a->B, a->T, a->H, a->KVH,
                            a->hd, 1.0f / sqrtf(a->hd));
}

static void test_reference_paths(void) {
    printf("fast paths against the reference loops of Part I\n");
    Rng g;
    rng_seed(&g, 21);
    MatmulArgs m = {.BT = 37, .C = 75, .OC = 130};
    m.inp = rand_buf(&g, (size_t)m.BT * m.C, 1.0f);
    m.W = rand_buf(&g, (size_t)m.OC * m.C, 0.1f);
    m.b = rand_buf(&g, (size_t)m.OC, 0.1f);
    m.dout = rand_buf(&g, (size_t)m.BT * m.OC, 1.0f);
    m.out = rand_buf(&g, (size_t)m.BT * m.OC, 1.0f);
    float* grads = rand_buf(&g, (size_t)m.BT * m.C + (size_t)m.OC * m.C + m.OC, 1.0f);   // dinp, dW, db in a row
    m.dinp = grads;
    m.dW = grads + (long)m.BT * m.C;
    m.db = m.dW + (long)m.OC * m.C;
    double r = fast_vs_reference(run_mm_forward, &m, m.out, (long)m.BT * m.OC);
    check(r < 1e-6, "matmul_forward %d x %d -> %d: fast = loops to %.1e (relative to the largest output)", m.BT, m.C,
          m.OC, r);
    r = fast_vs_reference(run_mm_backward, &m, grads, (long)m.BT * m.C + (long)m.OC * m.C + m.OC);
    check(r < 1e-6, "matmul_backward: dinp, dW, dbias accumulated, fast = loops to %.1e", r);
    // the LM head's backward: B*T = 37 (1/37 is not exact in binary), targets repeated, muP's logit scale
    HeadArgs h = {.BT = 37, .C = 75, .V = 130, .logit_scale = 0.5f};
    int targets[37];
    for (int i = 0; i < h.BT; i++) targets[i] = (i * 7) % 20;
    h.targets = targets;
    h.probs = rand_buf(&g, (size_t)h.BT * h.V, 1.0f);
    h.inp = rand_buf(&g, (size_t)h.BT * h.C, 1.0f);
    h.W = rand_buf(&g, (size_t)h.V * h.C, 0.1f);
    h.scratch = rand_buf(&g, (size_t)h.BT * h.C, 1.0f);
    float* head_grads = rand_buf(&g, (size_t)h.BT * h.C + (size_t)h.V * h.C, 1.0f);   // dinp, dW in a row
    h.dinp = head_grads;
    h.dW = head_grads + (long)h.BT * h.C;
    r = fast_vs_reference(run_head_backward, &h, head_grads, (long)h.BT * h.C + (long)h.V * h.C);
    check(r < 1e-6, "lm_head_backward: dinp, dW accumulated from the probabilities, fast (no dlogits) = loops to %.1e", r);
    free(h.probs); free(h.inp); free(h.W); free(h.scratch); free(head_grads);
    AttnArgs a = {.B = 2, .T = 70, .H = 4, .KVH = 2, .hd = 8};
    long nq = (long)a.B * a.T * a.H * a.hd, nkv = (long)a.B * a.T * a.KVH * a.hd, natt = (long)a.B * a.H * a.T * a.T;
    a.q = rand_buf(&g, nq, 1.0f);
    a.k = rand_buf(&g, nkv, 1.0f);
    a.v = rand_buf(&g, nkv, 1.0f);
    a.dy = rand_buf(&g, nq, 1.0f);
    float* outs = rand_buf(&g, nq + natt, 1.0f);                    // y, att in a row
    a.y = outs;
    a.att = outs + nq;
    r = fast_vs_reference(run_attn_forward, &a, outs, nq + natt);
    check(r < 1e-6, "attention_forward B=%d T=%d H=%d KVH=%d: y and probabilities, fast = loops to %.1e", a.B, a.T,
          a.H, a.KVH, r);
    float* dgrads = rand_buf(&g, nq + 2 * nkv, 1.0f);                 // dq, dk, dv in a row
    a.dq = dgrads;
    a.dk = dgrads + nq;
    a.dv = a.dk + nkv;
    r = fast_vs_reference(run_attn_backward, &a, dgrads, nq + 2 * nkv);
    check(r < 1e-6, "attention_backward: dq, dk, dv accumulated, fast = loops to %.1e", r);
    free(m.inp); free(m.W); free(m.b); free(m.dout); free(m.out); free(grads);
    free(a.q); free(a.k); free(a.v); free(a.dy); free(outs); free(dgrads);
}

// grad_norm: the same number on 1 and 2 threads (its sums per tensor are added in a fixed order),
// and the plain sum of every g^2 in double to 1e-12.
static void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

static void test_grad_norm(void) {
    printf("the gradient norm\n");
    Config c = {.V = 37, .maxT = 8, .L = 2, .C = 24, .H = 4, .KVH = 2, .F = 40, .bias = 1, .eps = 1e-5f,
                .logit_scale = 1.0f};
    Model m;
    model_build(&m, &c);
    Rng g;
    rng_seed(&g, 9);
    float* x = rand_buf(&g, m.num_params, 0.1f);
    memcpy(m.grads, x, m.num_params * sizeof(float));
    free(x);
    double plain = 0.0, norm[2];
    for (size_t i = 0; i < m.num_params; i++) plain += (double)m.grads[i] * m.grads[i];
    plain = sqrt(plain);
    for (int th = 1; th <= 2; th++) {
        set_threads(th);
        norm[th - 1] = grad_norm(&m);
    }
    set_threads(2);
    check(norm[0] == norm[1] && fabs(norm[1] - plain) <= 1e-12 * plain,
          "grad_norm on 1 and 2 threads %.17g, %.17g; the plain sum %.17g", norm[0], norm[1], plain);
    model_free(&m);
}

// Every layer of section 1 on small shapes (GQA, repeated tokens), each case run by `run`.
static void layer_cases(Rng* g, void (*run)(OpCase*, Rng*)) {
    const int N = 6, C = 10, OC = 7, B = 2, T = 5, H = 4, KVH = 2, hd = 4, V = 11;
    for (int rms = 0; rms <= 1; rms++) {
        size_t in_n[3] = {N * C, C, C}, aux_n[4] = {N, N, 0, 0};
        float std[3] = {1.0f, 1.0f, 1.0f};
        int d[6] = {N, C, rms};
        fd_case(g, run, rms ? "rmsnorm" : "layernorm", fd_norm_fwd, fd_norm_bwd, rms ? 2 : 3,
                in_n, std, N * C, aux_n, d, 1e-5f, 0);
    }
    {
        size_t in_n[3] = {N * C, OC * C, OC}, aux_n[4] = {0, 0, 0, 0};
        float std[3] = {1.0f, 0.5f, 0.5f};
        int d[6] = {N, C, OC};
        fd_case(g, run, "matmul", fd_matmul_fwd, fd_matmul_bwd, 3,
                in_n, std, N * OC, aux_n, d, 0.0f, 0);
    }
    {
        size_t in_n[3] = {B * T * H * hd, B * T * KVH * hd, B * T * KVH * hd}, aux_n[4] = {B * H * T * T, 0, 0, 0};
        float std[3] = {1.0f, 1.0f, 1.0f};
        int d[6] = {B, T, H, KVH, hd};
        fd_case(g, run, "attention (GQA 4/2)", fd_attn_fwd, fd_attn_bwd, 3,
                in_n, std, B * T * H * hd, aux_n, d, 0.5f, 0);
    }
    {
        size_t in_n[3] = {B * T * H * hd}, aux_n[4] = {B * T * H * hd, T * hd, 0, 0};
        float std[3] = {1.0f};
        int d[6] = {B, T, H, hd};
        fd_case(g, run, "rope", fd_rope_fwd, fd_rope_bwd, 1,
                in_n, std, B * T * H * hd, aux_n, d, 10000.0f, 1);
    }
    {
        size_t in_n[3] = {B * T * H * hd, B * T * H}, aux_n[4] = {B * T * H, 0, 0, 0};
        float std[3] = {1.0f, 1.0f};
        int d[6] = {B * T, H, hd};
        fd_case(g, run, "attention gate", fd_gate_fwd, fd_gate_bwd, 2,
                in_n, std, B * T * H * hd, aux_n, d, 0.0f, 0);
    }
    {
        size_t in_n[3] = {N * C}, aux_n[4] = {0};
        float std[3] = {2.0f};
        int d[6] = {0};
        fd_case(g, run, "gelu", fd_gelu_fwd, fd_gelu_bwd, 1, in_n, std, N * C, aux_n, d, 0.0f, 1);
    }
    {
        size_t in_n[3] = {N * C, N * C}, aux_n[4] = {0};
        float std[3] = {2.0f, 1.0f};
        int d[6] = {0};
        fd_case(g, run, "swiglu", fd_swiglu_fwd, fd_swiglu_bwd, 2,
                in_n, std, N * C, aux_n, d, 0.0f, 1);
    }
    {
        size_t in_n[3] = {N * V}, aux_n[4] = {N * V, N, N, 0};
        float std[3] = {2.0f};
        int d[6] = {N, V};
        fd_case(g, run, "softmax cross-entropy", fd_ce_fwd, fd_ce_bwd, 1,
                in_n, std, 1, aux_n, d, 0.0f, 0);
    }
    {
        size_t in_n[3] = {V * C, T * C}, aux_n[4] = {B * T, 0, 0, 0};
        float std[3] = {1.0f, 1.0f};
        int d[6] = {B, T, C};
        fd_case(g, run, "embedding", fd_emb_fwd, fd_emb_bwd, 2,
                in_n, std, B * T * C, aux_n, d, 0.0f, 1);
    }    {
        size_t in_n[3] = {N * C, N * C}, aux_n[4] = {0};
        float std[3] = {1.0f, 1.0f};
        int d[6] = {0};
        fd_case(g, run, "residual", fd_resid_fwd, fd_resid_bwd, 2,
                in_n, std, N * C, aux_n, d, 0.0f, 1);
    }
}

static void test_finite_differences(void) {
    printf("finite differences\n");
    Rng g;
    rng_seed(&g, 7);
    layer_cases(&g, run_fd);
}

// Each layer's fast twin (section 8) against its definition (section 1's loops, impl = definitions),
// from the same inputs: the forward's output, then the gradients its backward adds onto the same
// nonzero start, to 1e-6 of the largest value: the twins sum in other orders (and softmax's takes
// vexpf for expf). The layers without a twin are skipped.
static float* copy_floats(const float* x, size_t n) {
    float* c = xmalloc(n * sizeof(float));
    memcpy(c, x, n * sizeof(float));
    return c;
}

static void run_fast_vs_definition(OpCase* oc, Rng* g) {
    if (oc->forward != fd_matmul_fwd && oc->forward != fd_attn_fwd && oc->forward != fd_ce_fwd)
        return;     // a layer without a twin: the definition is what trains
    float* r = rand_buf(g, oc->out_n, 1.0f);
    float *start[3], *out[2], *din[2][3];
    for (int k = 0; k < oc->n_in; k++) start[k] = rand_buf(g, oc->in_n[k], 0.5f);
    for (int ref = 0; ref <= 1; ref++) {
        impl = ref ? definitions : twins;
        oc->forward(oc);
        out[ref] = copy_floats(oc->out, oc->out_n);
        for (int k = 0; k < oc->n_in; k++) memcpy(oc->din[k], start[k], oc->in_n[k] * sizeof(float));
        oc->backward(oc, r);
        for (int k = 0; k < oc->n_in; k++) din[ref][k] = copy_floats(oc->din[k], oc->in_n[k]);
    }
    impl = twins;
    double worst = rel_max_diff(out[0], out[1], (long)oc->out_n);
    for (int k = 0; k < oc->n_in; k++) worst = fmax(worst, rel_max_diff(din[0][k], din[1][k], (long)oc->in_n[k]));
    check(oc->exact ? worst == 0.0 : worst < 1e-6, "fast path = definition: %-22s forward and backward, %s (%.1e)",
          oc->name, oc->exact ? "bit for bit" : "to 1e-6", worst);
    for (int ref = 0; ref <= 1; ref++) {
        free(out[ref]);
        for (int k = 0; k < oc->n_in; k++) free(din[ref][k]);
    }
    for (int k = 0; k < oc->n_in; k++) free(start[k]);
    free(r);
}

static void test_fast_vs_definition(void) {
    printf("fast paths against the definitions of section 1\n");
    Rng g;
    rng_seed(&g, 8);
    layer_cases(&g, run_fast_vs_definition);
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

// The trainer binary these tests run: ./train_gpt2, or $TEST_TRAINER (make test-sanitize sets it to the
// build with AddressSanitizer and UBSan).
static const char* trainer_binary(void) {
    const char* t = getenv("TEST_TRAINER");
    return t && *t ? t : "./train_gpt2";
}

// Runs the trainer with the given flags; stdout and stderr go to tmpdir/stdout.txt and stderr.txt.
// Returns the exit status.
// The tests write a base of flags and then the ones a case changes; the trainer refuses a flag
// given twice, so each flag is passed once, with its last value (a lone last word stays last).
static void flags_last_wins(const char* in, char* out, size_t cap) {
    char buf[4096], *word[512];
    int n = 0;
    snprintf(buf, sizeof(buf), "%s", in);
    for (char* t = strtok(buf, " "); t && n < 512; t = strtok(NULL, " ")) word[n++] = t;
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < n; i += 2) {
        int later = 0;
        for (int j = i + 2; j + 1 < n && i + 1 < n; j += 2) later |= strcmp(word[j], word[i]) == 0;
        if (later) continue;
        k += snprintf(out + k, cap - k, "%s%s", k ? " " : "", word[i]);
        if (i + 1 < n) k += snprintf(out + k, cap - k, " %s", word[i + 1]);
    }
}

// The trainer with `threads` as OMP_NUM_THREADS and the flags as given.
static int run_trainer_cmd(const char* flags, const char* threads) {
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=%s %s %s > %s/stdout.txt 2> %s/stderr.txt", threads,
             trainer_binary(), flags, tmpdir, tmpdir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int run_trainer_threads(const char* flags, int threads) {
    char all[4096], merged[4096];
    snprintf(all, sizeof(all), "-i %s/train.txt -j %s/val.txt %s", tmpdir, tmpdir, flags);
    flags_last_wins(all, merged, sizeof(merged));
    char n[16];
    snprintf(n, sizeof(n), "%d", threads);
    return run_trainer_cmd(merged, n);
}
static int run_trainer(const char* flags) { return run_trainer_threads(flags, 2); }

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

// The "train_loss", "grad_norm" and "val_loss" values of a log, one per line with its step, as text (so
// equality is exact).
static char* losses_of_log(const char* path) {
    char* text = read_text(path, NULL);
    if (!text) return NULL;
    size_t cap = 2 * strlen(text) + 1, n = 0;
    char* out = xcalloc(cap, 1);
    const char* keys[] = {"\"train_loss\":", "\"grad_norm\":", "\"val_loss\":"};
    for (char* line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char* step = strstr(line, "\"step\":");
        for (int k = 0; k < 3; k++) {
            char* p = strstr(line, keys[k]);
            if (p && step && strstr(line, "\"event\":\"probe\"") == NULL)
                n += snprintf(out + n, cap - n, "%.*s %.*s\n", (int)strcspn(step, ","), step, (int)strcspn(p, ",}"), p);
        }
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

// files_equal on the file NAME of two run directories
static int run_files_equal(const char* run_a, const char* run_b, const char* name) {
    char a[1024], b[1024];
    snprintf(a, sizeof(a), "%s/%s", run_a, name);
    snprintf(b, sizeof(b), "%s/%s", run_b, name);
    return files_equal(a, b);
}

#define SMALL "-L 2 -C 32 -H 4 -K 2 -t 16 -b 4 -v 4 -m 2 -S 16 -u 3"

// A run resumed into tmpdir/RESUMEDi from tmpdir/FULLi's checkpoint (i = pi): its log's losses must be
// the tail of the uninterrupted run's, digit for digit, and both runs' final checkpoint `last` byte for byte.
static void check_resumed(const char* full, const char* resumed, int pi, const char* last, const char* what) {
    char a[512], b[512];
    snprintf(a, sizeof(a), "%s/%s%d/log.jsonl", tmpdir, full, pi);
    snprintf(b, sizeof(b), "%s/%s%d/log.jsonl", tmpdir, resumed, pi);
    char *la = losses_of_log(a), *lb = losses_of_log(b);
    int ok = la && lb && strlen(lb) > 0 && strlen(la) >= strlen(lb) && strcmp(la + strlen(la) - strlen(lb), lb) == 0;
    check(ok, "%s: the losses after resuming equal the uninterrupted run's, to the last digit", what);
    free(la);
    free(lb);
    snprintf(a, sizeof(a), "%s/%s%d", tmpdir, full, pi);
    snprintf(b, sizeof(b), "%s/%s%d", tmpdir, resumed, pi);
    check(run_files_equal(a, b, last), "%s: final checkpoints (weights, AdamW state, generators) are byte-identical", what);
}

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
        snprintf(a, sizeof(a), "%s, steps 7-12", presets[pi]);
        check_resumed("full", "resumed", pi, "ckpt_000012.bin", a);
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

// The largest relative difference between two losses_of_log texts, value for value; INFINITY when their
// steps or keys differ, or either is empty. *n receives the number of values compared.
static double losses_rel_diff(const char* a, const char* b, int* n) {
    double worst = 0.0;
    *n = 0;
    while (a && b && *a && *b) {
        const char *ka = strchr(a, ' '), *kb = strchr(b, ' '), *ca = ka ? strchr(ka, ':') : NULL, *cb = kb ? strchr(kb, ':') : NULL;
        if (!ca || !cb || ca - a != cb - b || strncmp(a, b, ca - a) != 0) return INFINITY;   // "step":N "key":
        double x = atof(ca + 1), y = atof(cb + 1);
        worst = fmax(worst, fabs(x - y) / fmax(fabs(y), 1e-30));
        (*n)++;
        a = strchr(ca, '\n'), b = strchr(cb, '\n');
        a = a ? a + 1 : NULL, b = b ? b + 1 : NULL;
    }
    if (!a || !b || *a || *b || *n == 0) return INFINITY;
    return worst;
}

// -d, gradient accumulation, through the trainer. The data generator draws one offset per row, so
// -b 4 and -b 2 -d 64 (2 micro-batches of 2 x 16) train on the same 4 sequences at every step, and
// validation batches are consecutive rows, so -m 2 of 4 rows and -m 4 of 2 read the same ones: their
// losses and validation losses agree to rounding (the gradient is summed in two halves). A run with
// -d resumes from its checkpoint exactly, like one without.
static void test_accumulation(void) {
    printf("trainer: gradient accumulation (-d)\n");
    char flags[1024], a[512], b[512];
    const char* presets[] = {"-a gpt2", "-a llama -G 1"};
    for (int pi = 0; pi < 2; pi++) {
        snprintf(flags, sizeof(flags), SMALL " %s -x 6 -n 3 -o %s/acc_big%d", presets[pi], tmpdir, pi);
        int st = run_trainer(flags);
        snprintf(flags, sizeof(flags), SMALL " %s -b 2 -d 64 -m 4 -x 6 -n 3 -o %s/acc_micro%d", presets[pi], tmpdir, pi);
        st |= run_trainer(flags);
        snprintf(a, sizeof(a), "%s/stdout.txt", tmpdir);
        char* out = read_text(a, NULL);
        check(st == 0 && out && strstr(out, "B=2 T=16 x 2 micro-batches (64 tokens per update)"),
              "%s: -b 4 and -b 2 -d 64 train (exit %d), the header names the micro-batches", presets[pi], st);
        free(out);
        snprintf(a, sizeof(a), "%s/acc_big%d/log.jsonl", tmpdir, pi);
        snprintf(b, sizeof(b), "%s/acc_micro%d/log.jsonl", tmpdir, pi);
        char *la = losses_of_log(a), *lb = losses_of_log(b), *lg = read_text(b, NULL);
        int n;
        double rel = losses_rel_diff(lb, la, &n);
        check(rel < 1e-5 && n >= 14, "%s: 2 micro-batches of 2 rows = one batch of 4: %d train and val losses and "
              "gradient norms within %.1e relative (bound 1e-5)", presets[pi], n, rel);
        check(lg && strstr(lg, "\"B\":2,\"micro_batches\":2,"), "%s: the log's config line has \"micro_batches\":2", presets[pi]);
        free(la);
        free(lb);
        free(lg);
        snprintf(flags, sizeof(flags), SMALL " %s -b 2 -d 64 -m 4 -x 6 -n 3 -o %s/acc_res%d -y %s/acc_micro%d/ckpt_000003.bin",
                 presets[pi], tmpdir, pi, tmpdir, pi);
        st = run_trainer(flags);
        check(st == 0, "%s: -b 2 -d 64 resumed from the step-3 checkpoint (exit %d)", presets[pi], st);
        snprintf(a, sizeof(a), "%s -b 2 -d 64, steps 4-6", presets[pi]);
        check_resumed("acc_micro", "acc_res", pi, "ckpt_000006.bin", a);
    }
}

// --data-order sequential is llm.c's order with its shuffling off: a loader that starts at token 0, reads B T + 1 tokens
// (inputs and, one token on, targets), moves on by B T, and starts again at 0 when the next read
// would pass the end. Simulated here from that description, over three passes through a file that
// does not divide into batches, against next_batch. Then the trainer: 2 micro-batches of 2 rows
// are one batch of 4 in this order too, a resumed run continues it, and it is not the random order.
static void test_data_order(void) {
    printf("trainer: --data-order sequential (llm.c's batches, unshuffled)\n");
    Dataset d = {.n = 1000};
    d.tok = xmalloc(d.n * sizeof(uint16_t));
    for (size_t i = 0; i < d.n; i++) d.tok[i] = (uint16_t)(i * 7 % 50000);
    Trainer tr = {.train = &d, .B = 3, .T = 7, .order = ORDER_SEQUENTIAL};
    int BT = tr.B * tr.T, inp[21], tgt[21], same = 1, wraps = 0;
    size_t pos = 0;
    for (long k = 0; k < 150; k++) {
        next_batch(&tr, k, inp, tgt);
        for (int i = 0; i < BT; i++) same &= inp[i] == d.tok[pos + i] && tgt[i] == d.tok[pos + i + 1];
        pos += BT;
        if (pos + BT + 1 > d.n) pos = 0, wraps++;
    }
    check(same && wraps == 3, "150 batches of 3 x 7 from 1000 tokens: llm.c's positions, %d times back to 0", wraps);
    free(d.tok);
    char flags[1024], a[512], b[512];
    snprintf(flags, sizeof(flags), SMALL " --data-order sequential -x 6 -n 3 -o %s/seq_big0", tmpdir);
    int st = run_trainer(flags);
    snprintf(flags, sizeof(flags), SMALL " --data-order sequential -b 2 -d 64 -m 4 -x 6 -n 3 -o %s/seq_micro0", tmpdir);
    st |= run_trainer(flags);
    snprintf(a, sizeof(a), "%s/seq_big0/log.jsonl", tmpdir);
    snprintf(b, sizeof(b), "%s/seq_micro0/log.jsonl", tmpdir);
    char *la = losses_of_log(a), *lb = losses_of_log(b), *lg = read_text(a, NULL);
    int n;
    double rel = losses_rel_diff(lb, la, &n);
    check(st == 0 && rel < 1e-5 && n >= 14, "sequential: 2 micro-batches of 2 rows = one batch of 4: %d losses "
          "and norms within %.1e relative (exit %d)", n, rel, st);
    check(lg && strstr(lg, "\"data_order\":\"sequential\""), "the log's config line says \"data_order\":\"sequential\"");
    snprintf(flags, sizeof(flags), SMALL " -x 6 -n 3 -o %s/seq_random0", tmpdir);
    run_trainer(flags);
    snprintf(b, sizeof(b), "%s/seq_random0/log.jsonl", tmpdir);
    char* lr = losses_of_log(b);
    check(la && lr && strcmp(la, lr) != 0, "sequential and random orders train on different batches");
    free(la); free(lb); free(lg); free(lr);
    snprintf(flags, sizeof(flags), SMALL " --data-order sequential -x 6 -n 3 -o %s/seq_res0 -y %s/seq_big0/ckpt_000003.bin",
             tmpdir, tmpdir);
    st = run_trainer(flags);
    check(st == 0, "sequential: resumed from the step-3 checkpoint (exit %d)", st);
    check_resumed("seq_big", "seq_res", 0, "ckpt_000006.bin", "sequential, steps 4-6");
}

// --data-order llmc against test/fixtures/llmc_order.txt, the offsets llm.c's own DataLoader served
// (dev/ref/make_llmc_order_fixture.sh): every case over two epochs and more, for 1, 2 and 3
// processes, each of whose rows next_batch must fill from that process's offset. Each case twice:
// from the last batch back to the first (a fresh order that starts several epochs in, as a resumed
// run does, then earlier epochs), then from the first on. Then the trainer: a run resumed in its
// second epoch continues the order, with 2 micro-batches per update, and it is not the sequential one.
static void test_llmc_order(void) {
    printf("trainer: --data-order llmc (llm.c's shuffled batches, test/fixtures/llmc_order.txt)\n");
    FILE* f = fopen("test/fixtures/llmc_order.txt", "r");
    if (!f) { check(0, "test/fixtures/llmc_order.txt is missing"); return; }
    fscanf(f, "%*[^\n]");      // the comment line
    int ntok, rows, T, ranks, batches, cases = 0;
    while (fscanf(f, " case %d %d %d %d %d", &ntok, &rows, &T, &ranks, &batches) == 5) {
        int* want = xmalloc((size_t)ranks * batches * sizeof(int));
        for (int i = 0; i < ranks * batches; i++)
            if (fscanf(f, "%d", &want[i]) != 1) want[i] = -1;
        Dataset d = {.n = (size_t)ntok};
        d.tok = xmalloc(d.n * sizeof(uint16_t));
        for (size_t i = 0; i < d.n; i++) d.tok[i] = (uint16_t)i;
        LlmcOrder lo;
        llmc_order_new(&lo, &d, ranks * rows, T, ranks);
        Trainer tr = {.train = &d, .order = ORDER_LLMC, .llmc = &lo, .B = ranks * rows, .T = T};
        int BT = tr.B * T, *inp = xmalloc(BT * sizeof(int)), *tgt = xmalloc(BT * sizeof(int));
        long bad = -1;
        for (long n = 0; n < 2L * batches && bad < 0; n++) {
            long k = n < batches ? batches - 1 - n : n - batches;
            next_batch(&tr, k, inp, tgt);
            for (int i = 0; i < BT && bad < 0; i++) {
                int off = want[(i / (rows * T)) * batches + k] + i % (rows * T);
                if (inp[i] != off || tgt[i] != off + 1) bad = k;
            }
        }
        check(bad < 0, "%d tokens, %d process%s of %d x %d, %d batches (%.1f epochs): llm.c's "
              "offsets%s", ntok, ranks, ranks > 1 ? "es" : "", rows, T, batches,
              (double)batches / lo.samples, bad < 0 ? "" : " (a wrong batch below)");
        if (bad >= 0) printf("    batch %ld differs\n", bad);
        llmc_order_free(&lo);
        free(d.tok), free(want), free(inp), free(tgt);
        cases++;
    }
    fclose(f);
    check(cases == 4, "the fixture holds 4 cases (read %d)", cases);
    // 149 tokens: 4 batches of 2 x 16 an epoch, so 6 steps of 2 micro-batches are 3 epochs
    char flags[2048], a[512], b[512];
    snprintf(a, sizeof(a), "%s/llmc_train.txt", tmpdir);
    write_corpus(a, 149, 13);
    const char* tiny = SMALL " -b 2 -d 64 -x 6 -n 3";
    snprintf(flags, sizeof(flags), "%s --data-order llmc -i %s -o %s/llmc_full0", tiny, a, tmpdir);
    int st = run_trainer(flags);
    snprintf(flags, sizeof(flags), "%s --data-order llmc -i %s -o %s/llmc_res0 -y %s/llmc_full0/"
             "ckpt_000003.bin", tiny, a, tmpdir, tmpdir);
    st |= run_trainer(flags);
    check(st == 0, "llmc: 6 steps of 2 micro-batches over 3 epochs, resumed at step 3 (exit %d)", st);
    check_resumed("llmc_full", "llmc_res", 0, "ckpt_000006.bin", "llmc, steps 4-6 (epochs 2-3)");
    snprintf(flags, sizeof(flags), "%s --data-order sequential -i %s -o %s/llmc_seq0", tiny, a,
             tmpdir);
    run_trainer(flags);
    snprintf(a, sizeof(a), "%s/llmc_full0/log.jsonl", tmpdir);
    snprintf(b, sizeof(b), "%s/llmc_seq0/log.jsonl", tmpdir);
    char *la = losses_of_log(a), *lb = losses_of_log(b), *lg = read_text(a, NULL);
    check(la && lb && strcmp(la, lb) != 0, "llmc and sequential orders train on different batches");
    check(lg && strstr(lg, "\"data_order\":\"llmc:1\""), "the log's config line says \"data_order\":\"llmc:1\" "
          "(llm.c's order for 1 process)");
    free(la), free(lb), free(lg);
}

// ---- 3b. reliability: checked inputs, checkpoints that prove themselves, models that travel ---------------
static char* log_without_timing(const char* path);    // a log without the config line, timings and paths

// A copy of checkpoint src at dst with `n` bytes at `offset` replaced (offset < 0: `n` bytes appended).
static void corrupt_copy(const char* src, const char* dst, long offset, const void* bytes, size_t n) {
    size_t len;
    char* buf = read_text(src, &len);
    if (!buf) { check(0, "test: cannot read %s", src); return; }
    char* out = xmalloc(len + n);
    memcpy(out, buf, len);
    if (offset < 0) memcpy(out + len, bytes, n);
    else memcpy(out + offset, bytes, n);
    write_file(dst, out, offset < 0 ? len + n : len);
    free(out);
    free(buf);
}

// A token shard whose header says `count` tokens, holding the n tokens toks.
static void write_shard(const char* path, int32_t count, const uint16_t* toks, size_t n) {
    int32_t header[256] = {SHARD_MAGIC, 1, count};
    char* buf = xmalloc(sizeof(header) + n * sizeof(uint16_t));
    memcpy(buf, header, sizeof(header));
    memcpy(buf + sizeof(header), toks, n * sizeof(uint16_t));
    write_file(path, buf, sizeof(header) + n * sizeof(uint16_t));
    free(buf);
}

// Bad files: corrupt checkpoints, a directory and a FIFO as data, decode tables and llm.c files that
// lie about their size. Written into tmpdir for test_bad_input's table.
static void write_bad_files(void) {
    char src[512], dst[512];
    snprintf(src, sizeof(src), "%s/full0/ckpt_000006.bin", tmpdir);
    int32_t big = 99999, negative = -5, one = 1;
    unsigned char flip = 0x5A;
    snprintf(dst, sizeof(dst), "%s/ck_mti.bin", tmpdir);
    corrupt_copy(src, dst, offsetof(CkptHeader, data_rng) + offsetof(Rng, mti), &big, 4);
    snprintf(dst, sizeof(dst), "%s/ck_step.bin", tmpdir);
    corrupt_copy(src, dst, offsetof(CkptHeader, step), &negative, 4);
    snprintf(dst, sizeof(dst), "%s/ck_v1.bin", tmpdir);
    corrupt_copy(src, dst, offsetof(CkptHeader, version), &one, 4);
    snprintf(dst, sizeof(dst), "%s/ck_flip.bin", tmpdir);
    corrupt_copy(src, dst, sizeof(CkptHeader) + 1000, &flip, 1);
    snprintf(dst, sizeof(dst), "%s/ck_tail.bin", tmpdir);
    corrupt_copy(src, dst, -1, &flip, 1);
    snprintf(dst, sizeof(dst), "%s/adir", tmpdir);
    mkdir(dst, 0755);
    snprintf(dst, sizeof(dst), "%s/fifo", tmpdir);
    mkfifo(dst, 0644);
    int32_t h[256] = {20240328, 2, -5, 0};
    snprintf(dst, sizeof(dst), "%s/dec_neg.bin", tmpdir);
    write_file(dst, h, sizeof(h));
    h[2] = 1000000;
    snprintf(dst, sizeof(dst), "%s/dec_big.bin", tmpdir);
    write_file(dst, h, sizeof(h));
    // a token shard beside them, for the decode-table cases
    uint16_t toks[200];
    for (int i = 0; i < 200; i++) toks[i] = (uint16_t)(i % 50);
    snprintf(dst, sizeof(dst), "%s/tok_train.bin", tmpdir);
    write_shard(dst, 200, toks, 200);
    int32_t lh[256] = {20240326, 5, 16, 256, 2, 4, 32, 256};
    snprintf(dst, sizeof(dst), "%s/llmc_bf16.bin", tmpdir);
    write_file(dst, lh, sizeof(lh));
    lh[1] = 3;
    snprintf(dst, sizeof(dst), "%s/llmc_short.bin", tmpdir);
    write_file(dst, lh, sizeof(lh));
    snprintf(dst, sizeof(dst), "%s/val_short.txt", tmpdir);
    write_file(dst, "a short validation text, fewer tokens than one batch of 4 x 16", 62);
    // a shard longer than its header says, and llm.c's Llama 3 format (32-bit tokens)
    snprintf(dst, sizeof(dst), "%s/long.bin", tmpdir);
    write_shard(dst, 100, toks, 200);
    int32_t l3[256 + 100] = {20240801, 7, 100};
    snprintf(dst, sizeof(dst), "%s/llama3.bin", tmpdir);
    write_file(dst, l3, sizeof(l3));
    // where the run's files go, something that is not a file: a checkpoint's name and the
    // temporary file --save-llmc writes first
    snprintf(dst, sizeof(dst), "%s/ckdir", tmpdir);
    mkdir(dst, 0755);
    snprintf(dst, sizeof(dst), "%s/ckdir/ckpt_000001.bin", tmpdir);
    mkdir(dst, 0755);
    snprintf(dst, sizeof(dst), "%s/llmcdir", tmpdir);
    mkdir(dst, 0755);
    snprintf(dst, sizeof(dst), "%s/llmcdir/m.bin.tmp", tmpdir);
    mkdir(dst, 0755);
}

// The CRC-32 is zlib's: the standard check value, and the same sum in pieces as at once.
static void test_crc32(void) {
    printf("checkpoints: CRC-32\n");
    const char* s = "123456789";
    uint32_t whole = crc32_update(0, s, 9), parts = crc32_update(crc32_update(0, s, 4), s + 4, 5);
    check(whole == 0xCBF43926u && parts == whole, "CRC-32 of \"123456789\" is %08x (zlib: cbf43926), in two pieces %08x", whole, parts);
    char big[4099];
    for (int i = 0; i < 4099; i++) big[i] = (char)(i * 7 + 3);
    uint32_t bytewise = 0;
    for (int i = 0; i < 4099; i++) bytewise = crc32_update(bytewise, big + i, 1);
    check(crc32_update(0, big, 4099) == bytewise, "eight bytes at a time equals one byte at a time (4099 bytes)");
}

// A refused run leaves the previous run's files as they were: flags checked late used to truncate
// the log before refusing.
// One run per output directory: a second trainer started on a directory in use is refused with one
// line naming the first one's pid, and the first's files are left alone; the lock goes with the
// process, even one killed with SIGKILL.
static void test_output_lock(void) {
    printf("trainer: one run per output directory\n");
    char cmd[4096], path[512], pid[64] = "", first[2048], merged[2048];
    snprintf(first, sizeof(first), "-i %s/train.txt -j %s/val.txt " SMALL " -x 100000 -v 0 -S 0 -n 0 -o %s/busy",
             tmpdir, tmpdir, tmpdir);
    flags_last_wins(first, merged, sizeof(merged));
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 %s %s > /dev/null 2>&1 & echo $! > %s/busy_pid", trainer_binary(),
             merged, tmpdir);
    if (system(cmd) != 0) { check(0, "cannot start a trainer in the background"); return; }
    snprintf(path, sizeof(path), "%s/busy/.lock", tmpdir);
    for (int i = 0; i < 200 && !pid[0]; i++) {        // until the first run holds the lock
        usleep(50000);
        char* t = read_text(path, NULL);
        if (t) snprintf(pid, sizeof(pid), "%.*s", (int)strcspn(t, "\n"), t);
        free(t);
    }
    char flags[1024], expect[256];
    snprintf(flags, sizeof(flags), SMALL " -x 2 -o %s/busy", tmpdir);
    int st = run_trainer(flags);
    snprintf(path, sizeof(path), "%s/stderr.txt", tmpdir);
    char* err = read_text(path, NULL);
    snprintf(expect, sizeof(expect), "is in use by another run (pid %s)", pid);
    snprintf(path, sizeof(path), "%s/busy/log.jsonl", tmpdir);
    char* log = read_text(path, NULL);
    check(pid[0] && st == 1 && err && strstr(err, expect) && strchr(err, '\n') == err + strlen(err) - 1 &&
          log && strstr(log, "\"event\":\"config\""), "a second run into a busy -o: %.*s; the first's log kept",
          err ? (int)strcspn(err, "\n") : 0, err ? err : "");
    free(err);
    free(log);
    snprintf(path, sizeof(path), "%s/busy_pid", tmpdir);
    char* bg = read_text(path, NULL);
    if (bg) kill((pid_t)atol(bg), SIGKILL);
    free(bg);
    // the killed run's log is there: --overwrite 1 replaces it
    snprintf(flags, sizeof(flags), SMALL " -x 2 -o %s/busy --overwrite 1", tmpdir);
    for (int i = 0; i < 50 && (st = run_trainer(flags)) == 1; i++) usleep(100000);
    check(st == 0, "once the first run is killed (SIGKILL), the directory is free again (exit %d)", st);
}

static void test_refusal_keeps_files(void) {
    printf("trainer: a refused run writes nothing\n");
    char flags[2048], log[512], before_ck[512];
    snprintf(flags, sizeof(flags), SMALL " -x 4 -n 2 -o %s/keep", tmpdir);
    int st = run_trainer(flags);
    snprintf(log, sizeof(log), "%s/keep/log.jsonl", tmpdir);
    snprintf(before_ck, sizeof(before_ck), "%s/keep/ckpt_000004.bin", tmpdir);
    char* before = read_text(log, NULL);
    char ck_copy[512];
    snprintf(ck_copy, sizeof(ck_copy), "%s/keep_ckpt_copy.bin", tmpdir);
    size_t ck_len = 0;
    char* ck = read_text(before_ck, &ck_len);
    if (ck) write_file(ck_copy, ck, ck_len);
    check(st == 0 && before && ck, "a 4-step run into keep/ (exit %d)", st);
    const char* late[] = {"-p 2 --probes nosuch", "-p 2 --cossim-dump h.9.attn.wq", "-p 2 --probes act --spike-skip 1",
                          "--dump-token-losses /nonexistent/dir/t.csv", "-y @/keep/ckpt_000004.bin -x 4",
                          "-K 4 -x 4 --save-llmc /nonexistent/dir/m.bin", "-a llama --save-llmc @/m.bin"};
    for (size_t i = 0; i < sizeof(late) / sizeof(late[0]); i++) {
        char expanded[1024];
        expand_at(late[i], tmpdir, expanded, sizeof(expanded));
        snprintf(flags, sizeof(flags), SMALL " -x 4 -n 2 -o %s/keep %s", tmpdir, expanded);
        st = run_trainer(flags);
        char* after = read_text(log, NULL);
        check(st == 1 && after && before && strcmp(before, after) == 0 && files_equal(before_ck, ck_copy),
              "refused (%s): exit %d, keep/'s log and checkpoint untouched", late[i], st);
        free(after);
    }
    free(before);
    free(ck);
}

// The log: nan and inf become null (valid JSON); a write that fails stops the run with a message.
static void test_log_lines(void) {
    printf("trainer: the JSON-lines log\n");
    char path[512];
    snprintf(path, sizeof(path), "%s/nan.jsonl", tmpdir);
    Log lg = {0};
    snprintf(lg.path, sizeof(lg.path), "%s", path);
    lg.f = fopen(path, "w");
    log_event(&lg, "\"a\":%.6f,\"b\":%g,\"c\":[%g,%g],\"name\":\"x,nan,inf\",\"d\":%d", NAN, -INFINITY, INFINITY, 1.5, 7);
    fclose(lg.f);
    char* text = read_text(path, NULL);
    const char* want = "{\"a\":null,\"b\":null,\"c\":[null,1.5],\"name\":\"x,nan,inf\",\"d\":7}\n";
    check(text && strcmp(text, want) == 0, "nan, -inf and inf are written as null, strings kept: %s", text ? text : "(none)");
    free(text);
    // the first training loss against ln V, on stdout; the config line carries ln V; hist lines, 40 bins each
    char run_flags[1024];
    snprintf(run_flags, sizeof(run_flags), SMALL " -x 2 -v 0 -S 0 -o %s/hist -p 2 --probes hist", tmpdir);
    int hs = run_trainer(run_flags);
    snprintf(path, sizeof(path), "%s/stdout.txt", tmpdir);
    char* out = read_text(path, NULL);
    snprintf(path, sizeof(path), "%s/hist/log.jsonl", tmpdir);
    char* hlog = read_text(path, NULL);
    int hists = 0, full = 0;
    for (char* q = hlog; q && (q = strstr(q, "\"probe\":\"hist\"")); q++) {
        hists++;
        char* cnt = strstr(q, "\"counts\":[");
        int commas = 0;
        for (char* e = cnt; e && *e != ']'; e++) commas += *e == ',';
        full += commas == HIST_BINS - 1;
    }
    // 2 layers x (mlp_act, res, and the 6 matrices wq wk wv wo wup wdown)
    check(hs == 0 && out && strstr(out, "against ln V = 5.5452") && hlog && strstr(hlog, "\"ln_V\":5.545177") &&
          hists == 16 && full == 16, "initial loss against ln V printed, ln_V logged; --probes hist: %d lines of %d bins "
          "at step 0 (want 16)", hists, HIST_BINS);
    free(out);
    free(hlog);
    // /dev/full answers every write with ENOSPC, as a full disk does
    char flags[1024], link[512];
    snprintf(link, sizeof(link), "%s/full_disk", tmpdir);
    mkdir(link, 0755);
    snprintf(link, sizeof(link), "%s/full_disk/log.jsonl", tmpdir);
    if (symlink("/dev/full", link) != 0 && errno != EEXIST) { check(0, "test: cannot link %s", link); return; }
    snprintf(flags, sizeof(flags), SMALL " -x 2 -o %s/full_disk", tmpdir);
    int st = run_trainer(flags);
    snprintf(path, sizeof(path), "%s/stderr.txt", tmpdir);
    char* err = read_text(path, NULL);
    check(st == 1 && err && strstr(err, "writing log") && strstr(err, "No space left on device"),
          "a log on a full disk stops the run: exit %d, %.*s", st, err ? (int)strcspn(err, "\n") : 0, err ? err : "");
    free(err);
}

// Resume: the log of an interrupted and resumed run holds each step once and equals the uninterrupted
// one; --spike-skip's statistics travel in the checkpoint; a stale .tmp is removed; -x 0 writes step 0.
static void test_resume_log_and_spike(void) {
    printf("trainer: resume into the same log, with the spike probe\n");
    char flags[1024], a[512], b[512];
    const char* spike = " -l 1 -p 3 --probes spike --spike-skip 1 --spike-z 0.5";   // unstable: from step 11 on, skips
    snprintf(flags, sizeof(flags), SMALL " -x 24 -n 12 -o %s/sp_full%s", tmpdir, spike);
    int st = run_trainer(flags);
    // an "interrupted" run: the same run, as if killed before its last checkpoint -- its log has lines
    // past the step-12 checkpoint, and a temporary file of a checkpoint never finished
    snprintf(flags, sizeof(flags), SMALL " -x 24 -n 12 -o %s/sp_cut%s", tmpdir, spike);
    st |= run_trainer(flags);
    snprintf(a, sizeof(a), "%s/sp_cut/ckpt_000024.bin", tmpdir);
    unlink(a);
    snprintf(a, sizeof(a), "%s/sp_cut/ckpt_000099.bin.tmp", tmpdir);
    write_file(a, "partial", 7);
    snprintf(flags, sizeof(flags), SMALL " -x 24 -n 12 -o %s/sp_cut -y %s/sp_cut/ckpt_000012.bin%s", tmpdir, tmpdir, spike);
    st |= run_trainer(flags);
    snprintf(b, sizeof(b), "%s/stdout.txt", tmpdir);
    char* out = read_text(b, NULL);
    check(st == 0 && access(a, F_OK) != 0 && out && strstr(out, "left by an interrupted run"),
          "resumed into the interrupted run's directory; its stale ckpt_000099.bin.tmp was removed");
    check(out && strstr(out, "lines after step 12's checkpoint removed"), "the log was cut back to the step-12 checkpoint");
    free(out);
    snprintf(a, sizeof(a), "%s/sp_full/log.jsonl", tmpdir);
    snprintf(b, sizeof(b), "%s/sp_cut/log.jsonl", tmpdir);
    char *la = log_without_timing(a), *lb = log_without_timing(b);
    // the resumed log = the uninterrupted one plus the resumed run's config line
    char* cfg = lb ? strstr(lb, "{\"event\":\"config\"") : NULL;
    if (cfg) memmove(cfg, strchr(cfg, '\n') + 1, strlen(strchr(cfg, '\n') + 1) + 1);
    int skipped = la && strstr(la, "\"skipped\":1") != NULL;
    check(la && lb && skipped && strcmp(la, lb) == 0,
          "interrupted + resumed log = uninterrupted log: every step once, losses, spike z-scores and skips equal (skips: %s)",
          skipped ? "yes" : "none");
    free(la);
    free(lb);
    snprintf(a, sizeof(a), "%s/sp_full", tmpdir);
    snprintf(b, sizeof(b), "%s/sp_cut", tmpdir);
    check(run_files_equal(a, b, "ckpt_000024.bin"), "final checkpoints byte-identical, spike statistics included");
    snprintf(flags, sizeof(flags), SMALL " -x 0 -o %s/step0/nested/dir", tmpdir);
    st = run_trainer(flags);
    snprintf(a, sizeof(a), "%s/step0/nested/dir/ckpt_000000.bin", tmpdir);
    check(st == 0 && access(a, R_OK) == 0,
          "-x 0 writes the initialization as ckpt_000000.bin, into an -o whose parents it made");
}

// The weights travel: llm.c's model file against an independent writer (dev/ref/make_llmc_fixture.py),
// in both directions, and through the binary.
static void test_llmc(void) {
    printf("interchange: llm.c's model file\n");
    Config c = {.V = 256, .maxT = 8, .L = 2, .C = 16, .H = 4, .KVH = 4, .F = 64, .bias = 1, .tied = 1, .eps = 1e-5f,
                .rope_theta = 10000.0f, .logit_scale = 1.0f};
    c.attn_scale = 1.0f / sqrtf(4.0f);
    Model m;
    model_build(&m, &c);
    acts_alloc(&m, 2, 8);
    llmc_load(&m, "test/fixtures/llmc_tiny.bin");
    char* text = read_text("test/fixtures/llmc_tiny.txt", NULL);
    int tok[16], tgt[16], ok = text != NULL;
    double want = NAN;
    char* p = text ? strchr(text, '\n') + 1 : NULL;
    for (int i = 0; ok && i < 16; i++) tok[i] = (int)strtol(p, &p, 10);
    for (int i = 0; ok && i < 16; i++) tgt[i] = (int)strtol(p, &p, 10);
    if (ok && (p = strstr(p, "loss "))) want = atof(p + 5);
    free(text);
    float loss = model_forward(&m, tok, tgt, 2, 8);
    check(fabs(loss - want) <= 1e-5 * fabs(want), "llm.c file written by PyTorch: loss %.7f, PyTorch's %.7f", loss, want);
    char path[512];
    snprintf(path, sizeof(path), "%s/llmc_back.bin", tmpdir);
    llmc_save(&m, path);
    check(files_equal(path, "test/fixtures/llmc_tiny.bin"), "written back, the file is byte-identical to PyTorch's");
    model_free(&m);
    // through the binary: the init out, in again, out again; training from it equals training from the init
    char flags[1024], a[512], b[512];
    snprintf(flags, sizeof(flags), SMALL " -K 4 -x 0 --save-llmc %s/init.llmc", tmpdir);
    int st = run_trainer(flags);
    snprintf(flags, sizeof(flags), SMALL " -K 4 -x 0 -r 5 --load-llmc %s/init.llmc --save-llmc %s/again.llmc", tmpdir, tmpdir);
    st |= run_trainer(flags);
    snprintf(a, sizeof(a), "%s/init.llmc", tmpdir);
    snprintf(b, sizeof(b), "%s/again.llmc", tmpdir);
    check(st == 0 && files_equal(a, b), "--save-llmc, --load-llmc, --save-llmc: the same bytes");
    snprintf(flags, sizeof(flags), SMALL " -K 4 -x 6 -o %s/from_init", tmpdir);
    st = run_trainer(flags);
    snprintf(flags, sizeof(flags), SMALL " -K 4 -x 6 -o %s/from_llmc --load-llmc %s/init.llmc", tmpdir, tmpdir);
    st |= run_trainer(flags);
    snprintf(a, sizeof(a), "%s/from_init/log.jsonl", tmpdir);
    snprintf(b, sizeof(b), "%s/from_llmc/log.jsonl", tmpdir);
    char *la = losses_of_log(a), *lb = losses_of_log(b);
    check(st == 0 && la && lb && *la && strcmp(la, lb) == 0, "6 steps from the loaded file = 6 steps from the initializer, to the last digit");
    free(la);
    free(lb);
    // a trained checkpoint converted (-y at its own step with --save-llmc), then evaluated from the file
    snprintf(flags, sizeof(flags), SMALL " -K 4 -x 6 -y %s/from_init/ckpt_000006.bin --save-llmc %s/trained.llmc", tmpdir, tmpdir);
    st = run_trainer(flags);
    snprintf(flags, sizeof(flags), SMALL " -K 4 -x 0 -S 0 --load-llmc %s/trained.llmc", tmpdir);
    st |= run_trainer(flags);
    snprintf(b, sizeof(b), "%s/stdout.txt", tmpdir);
    char* out = read_text(b, NULL);
    char* logged = read_text(a, NULL);
    char *v0 = out ? strstr(out, "step 0 | val loss ") : NULL, *v6 = logged ? strstr(logged, "\"step\":6,\"val_loss\":") : NULL;
    check(st == 0 && v0 && v6 && atof(v0 + 18) == atof(v6 + 20), "a trained checkpoint converted to llm.c's file and loaded: "
          "val loss %.6f, the run's at step 6 %.6f", v0 ? atof(v0 + 18) : NAN, v6 ? atof(v6 + 20) : NAN);
    free(out);
    // to PyTorch (dev/ref/ckpt_to_torch.py), where PyTorch is installed: the same validation loss
    if (system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") != 0) {
        printf("  (dev/ref/ckpt_to_torch.py not run: no PyTorch here)\n");
    } else {
        char cmd[1200], line[512] = "";
        snprintf(cmd, sizeof(cmd), "/usr/bin/python3 dev/ref/ckpt_to_torch.py %s/from_init/ckpt_000006.bin %s/val.txt "
                 "-b 4 -t 16 -m 2 2>&1", tmpdir, tmpdir);
        FILE* p = popen(cmd, "r");
        while (p && fgets(line, sizeof(line), p) && !strstr(line, "val loss")) {}
        if (p) pclose(p);
        char* colon = strrchr(line, ':');
        double torch_loss = colon ? atof(colon + 1) : NAN;
        check(v6 && fabs(torch_loss - atof(v6 + 20)) <= 2e-6 * fabs(torch_loss), "the step-6 checkpoint in PyTorch: "
              "val loss %.6f, the run's %.6f", torch_loss, v6 ? atof(v6 + 20) : NAN);
    }
    free(logged);
}

// Bytes malloc has handed out and not taken back. Under AddressSanitizer (make test-sanitize) malloc is
// ASan's own allocator, which glibc's mallinfo2 does not see; ASan keeps the count itself.
#ifndef __has_feature
#define __has_feature(x) 0      // gcc 12 has no __has_feature (clang's docs suggest this fallback)
#endif
#if defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer)      // gcc's spelling, clang's
size_t __sanitizer_get_current_allocated_bytes(void);      // <sanitizer/allocator_interface.h>
static double heap_in_use(void) { return (double)__sanitizer_get_current_allocated_bytes(); }
#else
static double heap_in_use(void) {
    struct mallinfo2 mi = mallinfo2();
    return (double)(mi.uordblks + mi.hblkhd);
}
#endif

// The memory estimate is the activations' real size: acts_bytes against what acts_alloc takes from malloc.
static void test_memory_estimate(void) {
    printf("trainer: memory estimate\n");
    const char* presets[] = {"gpt2", "llama"};
    for (int pi = 0; pi < 2; pi++) {
        Options o;
        options_default(&o);
        o.preset = presets[pi];
        o.L = 3; o.C = 64; o.H = 4; o.KVH = 2; o.T = 64; o.gate = pi;
        Config c = config_from_options(&o, 512);
        Model m;
        model_build(&m, &c);
        double before = heap_in_use();
        acts_alloc(&m, 8, 64);
        // malloc hands out at least what was asked, plus at most a page per buffer (about 45 of them)
        double got = heap_in_use() - before;
        double est = (double)acts_bytes(&c, 8, 64);
        check(got >= est && got - est <= 45 * 4096, "%s: activations estimated %.0f bytes, malloc handed out %.0f (%.1f%% more)",
              presets[pi], est, got, 100 * (got - est) / est);
        model_free(&m);
    }
}

// Two runs' checkpoints NAME hold the same state apart from the spike probe's statistics (kept only when
// it runs) and the CRC that covers them: header up to the statistics, then the whole body.
static int ckpt_state_equal(const char* run_a, const char* run_b, const char* name) {
    char a[1024], b[1024];
    snprintf(a, sizeof(a), "%s/%s", run_a, name);
    snprintf(b, sizeof(b), "%s/%s", run_b, name);
    size_t na = 0, nb = 0;
    char *x = read_text(a, &na), *y = read_text(b, &nb);
    size_t head = offsetof(CkptHeader, spike), body = sizeof(CkptHeader);
    int eq = x && y && na == nb && na > body && !memcmp(x, y, head) && !memcmp(x + body, y + body, na - body);
    free(x);
    free(y);
    return eq;
}

// Each bad input: exit status non-zero, and stderr is exactly one line naming the problem.
// Runs the trainer with `flags` ("@" stands for the temporary directory, there and in `expect`) after
// `base` and checks that it refuses: a non-zero exit and exactly one line on stderr that contains `expect`.
static void expect_refusal(const char* base, const char* flags, const char* expect) {
    char expanded[1024], all[2048], path[512], want[1024];
    expand_at(flags, tmpdir, expanded, sizeof(expanded));
    expand_at(expect, tmpdir, want, sizeof(want));
    snprintf(all, sizeof(all), "%s %s", base, expanded);   // flags after base win
    int st = run_trainer(all);
    snprintf(path, sizeof(path), "%s/stderr.txt", tmpdir);
    char* err = read_text(path, NULL);
    int lines = 0;
    for (char* p = err; p && *p; p++) lines += *p == '\n';
    int named = err && strstr(err, want) != NULL;
    check(st != 0 && lines == 1 && named, "%-44s -> exit %d, %d line: %.*s", flags, st, lines,
          err ? (int)strcspn(err, "\n") : 0, err ? err : "");
    free(err);
}

static void test_bad_input(void) {
    printf("trainer: bad input gets one line and a non-zero exit\n");
    char path[512];
    // a token shard whose header promises more tokens than it holds, and one with an id >= vocabulary
    uint16_t toks[100];
    for (int i = 0; i < 100; i++) toks[i] = (uint16_t)(i % 50);
    snprintf(path, sizeof(path), "%s/short.bin", tmpdir);
    write_shard(path, 1000, toks, 100);
    toks[42] = 60000;
    snprintf(path, sizeof(path), "%s/badtok.bin", tmpdir);
    write_shard(path, 100, toks, 100);
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
        {"-b 4 -t 16 -d 100", "-d 100 is not a multiple of -b 4 x -t 16 = 64 tokens"},
        {"-b 1 -t 1 -d 70000", "-d 70000 is 70000 micro-batches of -b x -t; at most 65536"},
        {"-d 0", "-d must be in"},
        {"-C 30 -H 4", "must divide the width"},
        {"-H 4 -K 3", "must divide the heads"},
        {"-t 32 -T 16", "exceeds the model's maximum"},
        {"-c -0.1", "-c must be in"},
        {"-e -1e-5", "-e must be in"},
        {"-l nan", "-l expects a number"},
        {"-a gpt3", "-a must be gpt2 or llama"},
        {"-I nosuch", "unknown initializer 'nosuch'"},
        {"-I normal,foo=zeros", "unknown parameter group 'foo'"},
        {"-I xavier_normal,norm=lecun_normal", "'lecun_normal' needs a matrix"},
        {"-I kaiming_normal:swish", "unknown nonlinearity 'swish'"},
        {"-I xavier_uniform:1:2", "takes 0 to 1 numbers, got 2"},
        {"-I mup", "-I mup needs an untied head (--tie 0)"},
        {"--mup-base 64", "--mup-base needs -I mup"},
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
        // checkpoints that lie, and resuming past the end
        {"-y @/ck_mti.bin", "the data generator's state is invalid (mti 99999"},
        {"-y @/ck_step.bin", "step -5 is outside [0, 2^30]"},
        {"-y @/ck_v1.bin", "has version 1 (no checksum)"},
        {"-y @/ck_flip.bin", "is corrupt: its CRC-32 is"},
        {"-y @/ck_tail.bin", "has trailing bytes"},
        {"-y @/full0/ckpt_000006.bin -x 6", "is at step 6 and -x is 6: nothing to train"},
        // files that are not files, tables that lie about their size, too little validation data
        {"-i @/adir", "adir is not a regular file"},
        {"-i @/fifo", "is not a regular file"},
        {"-i @/tok_train.bin -j @/tok_train.bin --decode @/dec_neg.bin", "decode table vocabulary -5 does not fit"},
        {"-i @/tok_train.bin -j @/tok_train.bin --decode @/dec_big.bin", "decode table vocabulary 1000000 does not fit"},
        {"-i @/tok_train.bin -j @/tok_train.bin --decode @/nosuch.bin", "cannot open decode table @/nosuch.bin (No such"},
        {"--decode @/dec_big.bin", "-i @/train.txt is byte text, which needs no decode table"},
        {"-j @/val_short.txt", "fewer than one batch (-b 4 x -t 16 + 1)"},
        {"-C 65536 -L 1024 -H 4", "MiB are available: use a smaller model"},
        // initializer arguments outside their ranges; -g beside -I
        {"-I normal:-1", "initializer 'normal:-1': the std must be >= 0"},
        {"-I uniform:5:1", "U(A, B) needs A <= B"},
        {"-I trunc_normal:1:2:-2", "the bounds need A < B"},
        {"-I sparse:2", "the fraction of zeros must be in [0, 1]"},
        {"-I sparse:-0.5", "the fraction of zeros must be in [0, 1]"},
        {"-I sparse:1e10", "the fraction of zeros must be in [0, 1]"},
        {"-I normal,up=sparse:0.5:-1", "the std must be >= 0"},
        {"-g 1 -I xavier_normal", "-g and -I together: -g G means -I gamma:G"},
        {"-I gamma:11", "the rate G must be in [0, 10]"},
        // probe flags, and files written at the end, checked at the start
        {"-o @/pp -p 2 --probes nosuch", "unknown probe 'nosuch'"},
        {"-o @/pp -p 2 --cossim-dump h.7.attn.wq", "--cossim-dump: no tensor named 'h.7.attn.wq'"},
        {"--spike-skip 1", "need -p N"},
        {"--dump-token-losses /nonexistent/dir/t.csv", "cannot write /nonexistent/dir/t.csv (No such file"},
        {"--dump-token-losses @/adir", "adir is not a regular file"},
        {"-o @/ckdir", "ckpt_000001.bin is a directory, and the run writes its log and checkpoints there"},
        {"-K 4 --save-llmc @/llmcdir/m.bin", "m.bin.tmp is in the way (not a regular file)"},
        // a shard longer than its header says, llm.c's Llama 3 shards
        {"-i @/long.bin -j @/long.bin", "longer than its header says"},
        {"-i @/llama3.bin -j @/llama3.bin", "is an llm.c Llama 3 token shard (magic 20240801, 32-bit tokens)"},
        // a flag whose value is missing, -I with empty parts or a group given twice
        {"-o -x 5", "flag -o needs a value, and the next word is the flag -x"},
        {"-I normal:", "initializer 'normal:' has an empty argument"},
        {"-I normal::1", "initializer 'normal::1' has an empty argument"},
        {"-I normal,,out=zeros", "has an empty entry between its commas"},
        {"-I normal,out=normal:0.02,out=zeros", "gives the group 'out' twice"},
        {"-o @/short.bin/sub", "cannot create output dir"},
        // llm.c model files
        {"-K 4 --load-llmc @/llmc_bf16.bin", "holds bfloat16 (version 5)"},
        {"-K 4 --load-llmc @/llmc_short.bin", "holds 1024 bytes"},
        {"-K 4 --load-llmc @/ck_tail.bin", "is not an llm.c model file (bad magic"},
        {"--load-llmc @/llmc_short.bin", "this model has grouped key/value heads"},
        {"-a llama --save-llmc @/m.bin", "this model has RMSNorm"},
        {"-K 4 --load-llmc @/llmc_short.bin -y @/full0/ckpt_000006.bin", "--load-llmc and -y both give the weights"},
        // weights that overflow after a step: the checkpoint that would hold them is not written
        // AdamW's eps 0: 0/0 in the update of the position rows -t 16 never reaches (-T 32), whose
        // gradient is 0; the loss stays finite, but the checkpoint after the update is refused
        {"--adam-eps 0 -T 32 -n 1 -o @/overflow", "after step 1 wpe holds nan in its weights: training stopped, checkpoint not written"},
        // an output that is an input, a new run into a finished run's directory (test_path_clashes and
        // test_finished_run_dir try every pair, and what --overwrite 1 does)
        {"-K 4 --save-llmc @/train.txt", "--save-llmc @/train.txt and -i @/train.txt are the same file"},
        {"-o @/full0", "output dir @/full0 holds a run (log.jsonl and 2 checkpoints): resume it with -y"},
    };
    // make test runs one case of each kind: a flag, a value, a range, flags that disagree, an initializer,
    // a missing file, a bad token shard, a bad checkpoint, a resume that disagrees, a NaN loss, an output
    // in the way, an llm.c model file, an output that is an input, a finished run's directory; make check
    // runs them all
    static const char* quick_kinds[] = {"-Q 1", "-x abc", "-L -1", "-C 30 -H 4", "-I nosuch", "-i /nonexistent/train.txt",
        "-i @/badtok.bin -j @/badtok.bin", "-y @/ck_flip.bin", "-L 3 -y @/full0/ckpt_000006.bin", "-I zeros -e 0 -x 5",
        "-o @/ckdir", "-K 4 --load-llmc @/llmc_short.bin", "-K 4 --save-llmc @/train.txt", "-o @/full0"};
    // "-x" alone must come last to lack its value; checkpoint and NaN cases need steps to reach
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int quick = 0;
        for (size_t q = 0; q < sizeof(quick_kinds) / sizeof(quick_kinds[0]); q++) quick |= !strcmp(cases[i].flags, quick_kinds[q]);
        if (!quick && !full_tier()) continue;
        expect_refusal(strstr(cases[i].flags, "-y") || strstr(cases[i].flags, "-I zeros") || strstr(cases[i].flags, "--adam-eps 0")
                       ? SMALL " -x 12" : SMALL " -x 1", cases[i].flags, cases[i].expect);
    }
    // inputs the flags alone do not show: a flag given twice (the runner above passes each once),
    // OMP_NUM_THREADS that OpenMP would crash on or take minutes to start, or that libgomp cannot read
    // (it says so itself as it loads, before main, unless the trainer's check came first: nothing of
    // libgomp's may show), a launcher's variables that make this one of several ranks (after the
    // thread count: "2 RANK=1" sets both)
    struct { const char* threads; const char* flags; const char* expect; } raw[] = {
        {"2", "-x 1 -b 4 -b 2", "flag -b is given twice (4, then 2): give each flag once"},
        {"100000", "-x 1", "OMP_NUM_THREADS=100000 asks for 100000 threads; at most"},
        {"abc", "-x 1", "OMP_NUM_THREADS=abc is not a thread count"},
        {"0", "-x 1", "OMP_NUM_THREADS=0 is not a thread count"},
        {"-1", "-x 1", "OMP_NUM_THREADS=-1 is not a thread count"},
        {"2,0", "-x 1", "OMP_NUM_THREADS=2,0 is not a thread count"},
        {"2,", "-x 1", "OMP_NUM_THREADS=2, is not a thread count"},
        {"2 RANK=1 WORLD_SIZE=2", "-x 1", "RANK=1 WORLD_SIZE=2: a launcher started this as one of several ranks"},
        {"2 OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=4", "-x 1", "the CPU trainer is one process; train on several"},
        {"2 SLURM_PROCID=3", "-x 1", "SLURM_PROCID=3 SLURM_NTASKS=(unset): a launcher started this"},
    };
    for (size_t i = 0; i < sizeof(raw) / sizeof(raw[0]); i++) {
        char all[1024];
        snprintf(all, sizeof(all), "-i %s/train.txt -j %s/val.txt %s", tmpdir, tmpdir, raw[i].flags);
        int st = run_trainer_cmd(all, raw[i].threads);
        snprintf(path, sizeof(path), "%s/stderr.txt", tmpdir);
        char* err = read_text(path, NULL);
        const char* ours = err && strncmp(err, "error: ", 7) == 0 ? err : NULL;
        check(st == 1 && ours && strchr(ours, '\n') == ours + strlen(ours) - 1 && strstr(ours, raw[i].expect),
              "OMP_NUM_THREADS=%s %s -> %.*s", raw[i].threads, raw[i].flags,
              ours ? (int)strcspn(ours, "\n") : 0, ours ? ours : "");
        free(err);
    }
    // an output path too long for the names of the files inside it
    char longdir[4100] = "-o ";
    for (int i = 3; i < 4003; i++) longdir[i] = i % 100 == 0 ? '/' : 'd';
    longdir[4003] = 0;
    int st = run_trainer(longdir);
    snprintf(path, sizeof(path), "%s/stderr.txt", tmpdir);
    char* err = read_text(path, NULL);
    check(st == 1 && err && strstr(err, "-o: the path is 4000 characters"), "a 4000-character -o: %.*s",
          err ? (int)strcspn(err, "\n") : 0, err ? err : "");
    free(err);
}

// The names, kinds and bytes of everything under dir, as one checksum line: a refused run must leave
// it as it was.
static void tree_sum(const char* dir, char* out, size_t cap) {
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "cd %s && find . | LC_ALL=C sort | while read -r f; do ls -ld \"$f\" | "
             "cut -c1; echo \"$f\"; [ -f \"$f\" ] && cksum < \"$f\"; done | cksum", dir);
    FILE* p = popen(cmd, "r");
    out[0] = 0;
    if (p && !fgets(out, (int)cap, p)) out[0] = 0;
    if (p) pclose(p);
}

// No output may overwrite an input or another output: for each file the run writes (--save-llmc and
// the temporary file it writes first, --dump-token-losses, -o DIR's log, checkpoints and --cossim-dump
// files) against each file it reads (-i, -j, -y, --load-llmc, --decode or the table beside -i) and
// each other one it writes, a run naming the same file twice (by its path, another spelling of it,
// a symbolic or a hard link) is refused in one line naming both flags, and nothing under clash/
// changes. Then the paths that only look alike: resuming a run's own checkpoint in its directory.
static void test_path_clashes(void) {
    printf("trainer: no file the run writes is one it reads or writes otherwise\n");
    char cmd[2048], path[512];
    snprintf(cmd, sizeof(cmd), "cd %s && mkdir -p clash && cp train.txt clash/data.txt && cp train.txt "
             "clash/data.tmp && cp tok_train.bin clash/x_train.bin && ln -s data.txt clash/link.txt && "
             "mkdir clash/run3 clash/run4", tmpdir);
    int ok = system(cmd) == 0;
    int32_t h[256] = {20240328, 2, 64};         // a decode table of 64 one-byte tokens
    char table[sizeof(h) + 128];
    memcpy(table, h, sizeof(h));
    for (int i = 0; i < 64; i++) table[sizeof(h) + 2 * i] = 1, table[sizeof(h) + 2 * i + 1] = (char)('0' + i);
    snprintf(path, sizeof(path), "%s/clash/dec.bin", tmpdir);
    write_file(path, table, sizeof(table));
    snprintf(path, sizeof(path), "%s/clash/x_decode.bin", tmpdir);
    write_file(path, table, sizeof(table));
    char flags[1024];
    snprintf(flags, sizeof(flags), SMALL " -K 4 -x 4 -n 2 -o %s/clash/run --save-llmc %s/clash/model.bin", tmpdir,
             tmpdir);
    ok = ok && run_trainer(flags) == 0;
    snprintf(cmd, sizeof(cmd), "cd %s/clash && cp run/ckpt_000002.bin run3/ckpt_000004.bin && cp run/ckpt_000002.bin "
             "run4/cossim_h.0.attn.wq_step000002.bin && ln run/log.jsonl hard.log", tmpdir);
    ok = ok && system(cmd) == 0;
    check(ok, "clash/: a run with its checkpoints and llm.c model file, data, a decode table and links to them");
    if (!ok) return;
    // "-K 4": llm.c's model file holds no grouped key/value heads; TOK: token shards
#define TOK "-i @/clash/x_train.bin -j @/clash/x_train.bin -V 64"
    struct { const char* flags; const char* expect; } cases[] = {
        {"-i @/clash/data.txt --save-llmc @/clash/data.txt", "--save-llmc @/clash/data.txt and -i @/clash/data.txt"},
        {"-j @/clash/data.txt --save-llmc @/clash/data.txt", "--save-llmc @/clash/data.txt and -j @/clash/data.txt"},
        {"-y @/clash/run/ckpt_000002.bin --save-llmc @/clash/run/ckpt_000002.bin",
         "--save-llmc @/clash/run/ckpt_000002.bin and -y @/clash/run/ckpt_000002.bin"},
        {"--load-llmc @/clash/model.bin --save-llmc @/clash/model.bin",
         "--save-llmc @/clash/model.bin and --load-llmc @/clash/model.bin"},
        {TOK " --decode @/clash/dec.bin --save-llmc @/clash/dec.bin", "--save-llmc @/clash/dec.bin and --decode"},
        {TOK " --save-llmc @/clash/x_decode.bin", "and the decode table beside -i @/clash/x_decode.bin"},
        {"-o @/clash/new --save-llmc @/clash/new/log.jsonl", "--save-llmc @/clash/new/log.jsonl is -o @/clash/new's log"},
        {"-o @/clash/new --save-llmc @/clash/new/ckpt_000004.bin",
         "--save-llmc @/clash/new/ckpt_000004.bin is -o @/clash/new's checkpoint"},
        {"--dump-token-losses @/clash/out.csv --save-llmc @/clash/out.csv",
         "--save-llmc @/clash/out.csv and --dump-token-losses @/clash/out.csv"},
        {"-i @/clash/data.tmp --save-llmc @/clash/data", "--save-llmc's temporary file @/clash/data.tmp and -i"},
        {"-i @/clash/data.txt --dump-token-losses @/clash/data.txt",
         "--dump-token-losses @/clash/data.txt and -i @/clash/data.txt"},
        {"-j @/clash/data.txt --dump-token-losses @/clash/data.txt", "--dump-token-losses @/clash/data.txt and -j"},
        {"-y @/clash/run/ckpt_000002.bin --dump-token-losses @/clash/run/ckpt_000002.bin",
         "--dump-token-losses @/clash/run/ckpt_000002.bin and -y"},
        {"--load-llmc @/clash/model.bin --dump-token-losses @/clash/model.bin",
         "--dump-token-losses @/clash/model.bin and --load-llmc"},
        {TOK " --decode @/clash/dec.bin --dump-token-losses @/clash/dec.bin",
         "--dump-token-losses @/clash/dec.bin and --decode"},
        {"-o @/clash/new --dump-token-losses @/clash/new/log.jsonl", "--dump-token-losses @/clash/new/log.jsonl is -o"},
        {"-o @/clash/new --dump-token-losses @/clash/new/ckpt_000004.bin", "is -o @/clash/new's checkpoint"},
        {"-i @/clash/run/log.jsonl -o @/clash/run --overwrite 1", "-i @/clash/run/log.jsonl is -o @/clash/run's log"},
        {"-j @/clash/run/log.jsonl -o @/clash/run --overwrite 1", "-j @/clash/run/log.jsonl is -o @/clash/run's log"},
        {"-y @/clash/run3/ckpt_000004.bin -o @/clash/run3", "-y @/clash/run3/ckpt_000004.bin is -o @/clash/run3's checkpoint"},
        {"-y @/clash/run4/cossim_h.0.attn.wq_step000002.bin -o @/clash/run4 -p 2 --cossim-dump h.0.attn.wq",
         "is -o @/clash/run4's --cossim-dump file"},
        // other spellings of a file: a symbolic link, "..", a hard link
        {"-i @/clash/data.txt --save-llmc @/clash/link.txt", "--save-llmc @/clash/link.txt and -i @/clash/data.txt"},
        {"-i @/clash/data.txt --dump-token-losses @/clash/run/../data.txt", "--dump-token-losses @/clash/run/../data.txt and -i"},
        {"-i @/clash/hard.log -o @/clash/run --overwrite 1", "-i @/clash/hard.log is -o @/clash/run's log (log.jsonl, a link"},
        // a run that replaces the run in its directory removes all of its checkpoints
        {"-o @/clash/run3 --overwrite 1 -y @/clash/run/ckpt_000002.bin --save-llmc @/clash/run3/ckpt_000004.bin",
         "is -o @/clash/run3's checkpoint (replaced)"},
    };
#undef TOK
    char before[128], after[128], dir[512];
    snprintf(dir, sizeof(dir), "%s/clash", tmpdir);
    tree_sum(dir, before, sizeof(before));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        expect_refusal(SMALL " -K 4 -x 4", cases[i].flags, cases[i].expect);
        tree_sum(dir, after, sizeof(after));
        check(before[0] && strcmp(before, after) == 0, "  ... and nothing under clash/ changed");
    }
    // a run resumed in its own directory: the checkpoint it reads is not one it writes
    snprintf(flags, sizeof(flags), SMALL " -K 4 -x 6 -n 2 -y %s/clash/run/ckpt_000002.bin -o %s/clash/run", tmpdir,
             tmpdir);
    int st = run_trainer(flags);
    check(st == 0, "resumed from run/ckpt_000002.bin into run/, writing 4 and 6: not a clash (exit %d)", st);
}

// A run that does not continue the run in its -o DIR is refused, naming what is there and how to go on,
// and leaves it whole; --overwrite 1 replaces it, leaving none of the first run's checkpoints beside
// the new log; resuming a checkpoint of the directory needs no flag.
static void test_finished_run_dir(void) {
    printf("trainer: a finished run's directory is not written over unasked\n");
    char flags[1024], before[128], after[128], dir[300];     // tmpdir is 256 characters at most
    snprintf(dir, sizeof(dir), "%s/done", tmpdir);
    snprintf(flags, sizeof(flags), SMALL " -x 4 -n 2 -o %s", dir);
    int st = run_trainer(flags);
    check(st == 0, "a run into done/ with checkpoints at steps 2 and 4 (exit %d)", st);
    tree_sum(dir, before, sizeof(before));
    const char* again[] = {"-x 4 -n 2 -o @/done", "-x 8 -o @/done -y @/full0/ckpt_000006.bin"};
    for (int i = 0; i < 2; i++) {
        expect_refusal(SMALL, again[i], "output dir @/done holds a run (log.jsonl and 2 checkpoints): resume it with "
                       "-y @/done/ckpt_000004.bin and a larger -x, give another -o, or --overwrite 1 to replace it");
        tree_sum(dir, after, sizeof(after));
        check(before[0] && strcmp(before, after) == 0, "  ... and nothing under done/ changed");
    }
    snprintf(flags, sizeof(flags), SMALL " -x 3 -n 0 -o %s --overwrite 1", dir);
    st = run_trainer(flags);
    char path[600];
    struct stat sb;
    int gone = 0;
    for (int s = 2; s <= 4; s += 2) {
        snprintf(path, sizeof(path), "%s/ckpt_%06d.bin", dir, s);
        gone += stat(path, &sb) != 0;
    }
    snprintf(path, sizeof(path), "%s/ckpt_000003.bin", dir);
    int has3 = stat(path, &sb) == 0;
    snprintf(path, sizeof(path), "%s/log.jsonl", dir);
    char* log = read_text(path, NULL);
    const char* first = log ? strstr(log, "\"event\":\"config\"") : NULL;
    check(st == 0 && gone == 2 && has3 && first && !strstr(first + 1, "\"event\":\"config\""),
          "--overwrite 1: exit %d, the first run's 2 checkpoints removed (%d), the new one written, one run in the "
          "log", st, gone);
    free(log);
    snprintf(flags, sizeof(flags), SMALL " -x 5 -n 0 -o %s -y %s/ckpt_000003.bin", dir, dir);
    st = run_trainer(flags);
    check(st == 0, "resuming the directory's own checkpoint needs no --overwrite (exit %d)", st);
}

// Every scheme and every recipe trains, with both presets: exit 0, finite losses, and the loss falls
// over 6 steps, except where symmetry forbids learning much (zeros, ones, constant). Then
// [InitGuide ch. 7]'s symmetry problem, and --init-report.
static const char* first_train_loss(const char* out, int last) {
    const char* p = strstr(out, "| loss "), *q = p;
    while (last && q) { p = q; q = strstr(q + 1, "| loss "); }
    return p;
}

static void test_schemes_train(void) {
    printf("trainer: every scheme and recipe trains (both presets)\n");
    const char* inits[] = {"zeros", "ones", "constant:0.01", "normal:0.02", "uniform:0.05", "trunc_normal:0.02",
                           "trunc_sigma:0.02:3", "eye", "sparse:0.5:0.05", "lecun_normal", "lecun_uniform", "xavier_normal",
                           "xavier_uniform", "kaiming_normal:gelu", "kaiming_uniform:leaky_relu:0.2", "torch_linear",
                           "orthogonal", "sigma", "gamma:1", "small_init", "trunc_lecun", "gpt2", "llama", "hf_llama",
                           "olmo_mitchell", "depth_scaled", "zero_resid", "deepnet", "mup"};   // small_init: both
    const char* presets[] = {"-a gpt2", "-a llama"};
    int n = (int)(sizeof(inits) / sizeof(inits[0])), ran = 0, bad = 0;
    char flags[1024], path[512];
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < n; i++) {
            int mup = !strcmp(inits[i], "mup"), symmetric = !strcmp(inits[i], "zeros") || !strcmp(inits[i], "ones") ||
                                                             !strncmp(inits[i], "constant", 8);
            snprintf(flags, sizeof(flags), SMALL " %s -I %s%s -x 6 -v 0 -S 0", presets[p], inits[i], mup ? " --tie 0" : "");
            int st = run_trainer_threads(flags, 1);
            snprintf(path, sizeof(path), "%s/stdout.txt", tmpdir);
            char* out = read_text(path, NULL);
            const char *a = out ? first_train_loss(out, 0) : NULL, *b = out ? first_train_loss(out, 1) : NULL;
            double l0 = a ? atof(a + 7) : NAN, l1 = b ? atof(b + 7) : NAN;
            int ok = st == 0 && isfinite(l0) && isfinite(l1) && (symmetric || l1 < l0);
            if (!ok) printf("        %s -I %s: exit %d, loss %g -> %g\n", presets[p], inits[i], st, l0, l1);
            bad += !ok;
            ran++;
            free(out);
        }
    check(bad == 0, "%d runs of 6 steps (%d -I values x 2 presets): exit 0, finite losses, the loss falls (zeros, ones, constant: "
          "it need not)", ran, n);
    // [InitGuide ch. 7], symmetry. (a) -I zeros is a stationary point: the logits wte . lnf are 0 and every
    // gradient is a product with a zero weight or a zero activation (GELU(0) = 0, Norm(0) = bias = 0), so
    // no parameter ever moves and the loss stays ln 256 = 5.545177; the run still "trains" without error.
    // (b) only the MLP symmetric (every row of mlp.wup equal, every column of mlp.wdown equal): the
    // hidden units get equal gradients, move, and stay equal: the MLP trains as one unit.
    const char* sym[2] = {"zeros", "sigma:0.02,up=constant:0.02,down=constant:0.01"};
    for (int k = 0; k < 2; k++) {
        snprintf(flags, sizeof(flags), SMALL " -I %s -x 12 -v 0 -S 0 -o %s/sym%d", sym[k], tmpdir, k);
        int st = run_trainer_threads(flags, 1);
        Options o;
        options_default(&o);
        o.L = 2; o.C = 32; o.H = 4; o.KVH = 2; o.T = 16;
        Config c = config_from_options(&o, 256);
        Model m;
        model_build(&m, &c);
        Rng r1, r2;
        snprintf(path, sizeof(path), "%s/sym%d/ckpt_000012.bin", tmpdir, k);
        int loaded = st == 0 && access(path, R_OK) == 0, symmetric = loaded, zero = loaded, unmoved = loaded;
        if (loaded) {
            Ema spike[2];
            checkpoint_load(&m, path, &r1, &r2, spike);
            for (int l = 0; l < c.L; l++) {
                const float *up = param_of(&m, K_WUP, l), *down = param_of(&m, K_WDOWN, l);
                for (int u = 1; u < c.F; u++) symmetric &= !memcmp(up, up + (size_t)u * c.C, c.C * sizeof(float));
                for (int r = 0; r < c.C; r++)
                    for (int u = 1; u < c.F; u++) symmetric &= down[(size_t)r * c.F + u] == down[(size_t)r * c.F];
                for (size_t j = 0; j < m.kind_numel[K_WUP]; j++) zero &= up[j] == 0.0f && down[j] == 0.0f;
            }
            for (int i = 0; i < m.num_tensors; i++)
                for (size_t j = 0; j < m.tensors[i].numel; j++)
                    unmoved &= m.params[m.tensors[i].offset + j] == (m.tensors[i].group == G_NORM ? 1.0f : 0.0f);
        }
        snprintf(path, sizeof(path), "%s/stdout.txt", tmpdir);
        char* out = read_text(path, NULL);
        const char* last = out ? first_train_loss(out, 1) : NULL;
        if (k == 0)
            check(loaded && unmoved && last && !strncmp(last, "| loss 5.545177", 15), "-I zeros: after 12 steps every parameter "
                  "is exactly where it started (weights 0, norms 1) and the loss is still ln 256 = 5.545177: no gradient anywhere");
        else
            check(loaded && symmetric && !zero, "-I %s: after 12 steps the %d hidden units of each MLP have moved and are still "
                  "identical (rows of mlp.wup, columns of mlp.wdown): symmetry is never broken", sym[k], c.F);
        model_free(&m);
        free(out);
    }
    // --init-report prints the table, the block ratios and the symmetry warning, and trains nothing
    snprintf(flags, sizeof(flags), SMALL " -I zeros --init-report 1 -o %s/report", tmpdir);
    int st = run_trainer_threads(flags, 1);
    snprintf(path, sizeof(path), "%s/stdout.txt", tmpdir);
    char* out = read_text(path, NULL);
    snprintf(path, sizeof(path), "%s/report/log.jsonl", tmpdir);
    check(st == 0 && out && strstr(out, "h.1.mlp.wdown      32x128     zeros") && strstr(out, "out/in") &&
          strstr(out, "all 128 hidden units have identical weights") && !strstr(out, "step    ") && access(path, F_OK) != 0,
          "--init-report 1: one row per tensor, per-block variance ratios, the symmetry warning; no training");
    free(out);
    snprintf(flags, sizeof(flags), SMALL " -I gpt2 --init-report 1 -L 6");
    st = run_trainer_threads(flags, 1);
    snprintf(path, sizeof(path), "%s/stdout.txt", tmpdir);
    out = read_text(path, NULL);
    int rows = 0;
    for (char* q = out; q && (q = strstr(q, "\nh.")); q++) rows++;
    check(st == 0 && out && strstr(out, "sigma:0.02 x0.2887") && rows == 6 * 16 + 6,
          "--init-report 1 -I gpt2 -L 6: %d rows (96 tensors of the blocks, 6 block ratios), out/down marked x 1/sqrt(12)", rows);
    free(out);
}

// ---- 4. probes (train_gpt2.c section 9) on inputs whose answer is known -------------------------------
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
    // D_c, rows of the (out, in) weight: identical rows 1 (also for 8 x 3, where [ComplexCtl eq. 2]'s 1/(d_in d_out)
    // would give 8/3), orthogonal rows 1/n
    float same[8 * 3];
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 3; j++) same[i * 3 + j] = (float)((i + 1) * (j - 0.7));
    double dc = condensation_degree(same, 8, 3);
    check(fabs(dc - 1.0) < 1e-6, "D_c of 8 identical rows (positive multiples) = 1: %.9f", dc);
    dc = condensation_degree(I, N, N);
    check(fabs(dc - 1.0 / N) < 1e-12, "D_c of %d orthogonal rows = 1/%d: %.9f", N, N, dc);
    // C(W) of [SmallInit eq. 6] agrees with D_c: D_c is the mean of all its entries
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
    impl.attention_forward(y, att, q, k, v, B, T, H, H, 4, 0.5f);
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
                    .swiglu = llama, .rope = llama, .bias = !llama, .tied = !llama, .attn_gate = llama, .eps = 1e-5f,
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
    Ema spike[2] = {{0}};
    Probes pr = {.sel = 1u << P_SPIKE, .emit = capture_line, .spike = spike, .spike_z = 6.0f, .spike_skip = 1};
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
        snprintf(a, sizeof(a), "%s/noprobe%d", tmpdir, pi);
        snprintf(b, sizeof(b), "%s/probe%d", tmpdir, pi);
        check(ckpt_state_equal(a, b, "ckpt_000012.bin"), "%s: and final checkpoints equal but for the spike statistics "
              "(weights, AdamW state, generators byte-identical)", presets[pi]);
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
    // is a spike, its update is skipped, and the progress line and the log say so. Unclipped (-z 0), three
    // steps' gradient norms stand out (z 0.2 to 1.1) in every build tried; clipped, one step had z 0.01 to
    // 0.06, and a sanitizer build at -O1, whose sums round differently, had none.
    snprintf(flags, sizeof(flags), SMALL " -x 30 -l 0.3 -z 0 -o %s/noskip -p 5 --probes spike --spike-z 0", tmpdir);
    int st = run_trainer(flags);
    snprintf(flags, sizeof(flags), SMALL " -x 30 -l 0.3 -z 0 -o %s/skip -p 5 --probes spike --spike-z 0 --spike-skip 1", tmpdir);
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
    // the muP coordinate check at two widths, in one process: plain, then with the gate under muP
    // (llama, -G 1 -I mup), whose lines and table add the gate's pre-activation
    for (int gated = 0; gated <= 1; gated++) {
        snprintf(flags, sizeof(flags), SMALL " %s -o %s/coord%d --coord-check 1 --coord-widths 16,32 --coord-steps 2",
                 gated ? "-a llama -G 1 -I mup --tie 0" : "", tmpdir, gated);
        st = run_trainer(flags);
        snprintf(a, sizeof(a), "%s/coord%d/log.jsonl", tmpdir, gated);
        log = read_text(a, NULL);
        int found = 0, want = gated ? 20 : 16;
        const char* names[] = {"emb", "h.0.attn_out", "h.1.mlp_out", "logits", "h.1.gate_pre"};
        for (int w = 16; w <= 32; w *= 2)
            for (int s = 0; s < 2; s++)
                for (int i = 0; i < 4 + gated; i++) {
                    char key[128];
                    snprintf(key, sizeof(key), "\"step\":%d,\"probe\":\"coord\",\"layer\":%d,\"tensor\":\"%s\"", s,
                             i == 0 || i == 3 ? -1 : i == 1 ? 0 : 1, names[i]);
                    for (char* p = log ? strstr(log, key) : NULL; p; p = strstr(p + 1, key)) {
                        char wkey[32];
                        snprintf(wkey, sizeof(wkey), "\"width\":%d}", w);
                        if (strncmp(strchr(p, '}') - strlen(wkey) + 1, wkey, strlen(wkey)) == 0) { found++; break; }
                    }
                }
        snprintf(a, sizeof(a), "%s/stdout.txt", tmpdir);
        out = read_text(a, NULL);
        check(st == 0 && found == want && out && strstr(out, "coord check: mean |x|") &&
              (strstr(out, "gate_pre") != NULL) == gated,
              "--coord-check at widths 16 and 32%s: emb, attention, MLP%s and logit coordinates of both steps (%d of %d), "
              "table printed", gated ? ", gated under muP" : "", gated ? ", gate" : "", found, want);
        free(out);
        free(log);
    }
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
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) expect_refusal(SMALL " -x 1", cases[i].flags, cases[i].expect);
}

// attnlogit: a case by hand, then [InitFP §1.2]: with q, k entries of variance 1, q . k / sqrt(d_head)
// has variance 1 and q . k has variance d_head; and [Errata 001-2]: with variance v per entry, the
// scaled logits have variance v^2 whatever d_head is.
static void test_probe_attnlogit(void) {
    const float q[] = {1, 2, 3, 4}, k[] = {1, 0, 0, 1};          // B 1, T 2, one head, hd 2
    Stats s = attn_logit_stats(q, k, 1, 2, 1, 1, 2, 1.0f);      // pairs (0,0), (1,0), (1,1): 1, 3, 4
    check(fabs(s.mean - 8.0 / 3.0) < 1e-6 && s.min == 1.0 && s.max == 4.0,
          "attnlogit by hand: logits 1, 3, 4 (mean %.6f, min %g, max %g)", s.mean, s.min, s.max);
    const int B = 1, T = 48, H = 2, KVH = 1, hd = 64;
    Rng g;
    rng_seed(&g, 31);
    float *qq = rand_buf(&g, (size_t)B * T * H * hd, 1.0f), *kk = rand_buf(&g, (size_t)B * T * KVH * hd, 1.0f);
    double scaled = attn_logit_stats(qq, kk, B, T, H, KVH, hd, 1.0f / sqrtf(hd)).std;
    double raw = attn_logit_stats(qq, kk, B, T, H, KVH, hd, 1.0f).std;
    check(fabs(scaled - 1.0) < 0.1 && fabs(raw / sqrt(hd) - 1.0) < 0.1,
          "[InitFP §1.2]: N(0,1) q, k, d_head %d: logits std %.3f with 1/sqrt(d_head), %.2f (sqrt(d_head) = %.0f) without",
          hd, scaled, raw, sqrt(hd));
    for (size_t i = 0; i < (size_t)B * T * H * hd; i++) qq[i] *= 2.0f;
    for (size_t i = 0; i < (size_t)B * T * KVH * hd; i++) kk[i] *= 2.0f;
    double var4 = attn_logit_stats(qq, kk, B, T, H, KVH, hd, 1.0f / sqrtf(hd)).std;
    check(fabs(var4 / 4.0 - 1.0) < 0.1, "[Errata 001-2]: entries of variance 4: scaled logits std %.3f (want 4: variance 4^2, whatever d_head)",
          var4);
    free(qq);
    free(kk);
}

// gradact keeps d loss / d res of every block's input. At block 0's input the residual stream is the
// token embedding (llama: untied head, no positions), so the gradient of wte is that kept slice summed
// over the positions of each token, in order: the same floats, bit for bit.
static void test_probe_gradact(void) {
    Options op;
    options_default(&op);
    op.preset = "llama";
    op.L = 2; op.C = 32; op.H = 4; op.KVH = 2; op.T = 16; op.B = 2;
    Config cfg = config_from_options(&op, 64);
    const int B = 2, T = 16, BT = B * T, C = cfg.C;
    Model m;
    model_build(&m, &cfg);
    acts_alloc(&m, B, T);
    InitSpec spec;
    parse_init(&spec, "llama", -1.0);
    model_init(&m, &spec, 5);
    Rng g;
    rng_seed(&g, 9);
    int inp[BT], tgt[BT];
    for (int i = 0; i < BT; i++) { inp[i] = (int)(rng_u32(&g) % 64); tgt[i] = (int)(rng_u32(&g) % 64); }
    model_forward(&m, inp, tgt, B, T);
    model_zero_grad(&m);
    model_backward(&m, B, T, 1.0f);
    float* want = xcalloc((size_t)64 * C, sizeof(float));
    for (int bt = 0; bt < BT; bt++)
        for (int c = 0; c < C; c++) want[(long)inp[bt] * C + c] += m.a.dres[(long)bt * C + c];
    Stats top = stats_of(m.a.dres + (long)cfg.L * BT * C, NULL, (long)BT * C);
    check(!cfg.tied && !m.p[K_WPE] && memcmp(want, m.g[K_WTE], (size_t)64 * C * sizeof(float)) == 0 && top.std > 0,
          "gradact: d loss / d res at block 0 (its slice of Acts.dres) summed by token = the wte gradient, bit for bit (lnf.in std %.2e)",
          top.std);
    free(want);
    model_free(&m);
}

// sat on activations set by hand, the two slope maxima it scales its threshold by, and hist's bins.
static void test_probe_sat_hist(void) {
    printf("probes: saturated units, histograms\n");
    double gelu_max = 0.0, silu_max = 0.0;
    for (double u = -10.0; u <= 10.0; u += 1e-4) {
        float s = sigmoid_of((float)u);
        gelu_max = fmax(gelu_max, gelu_grad_of((float)u));
        silu_max = fmax(silu_max, s * (1.0 + u * (1.0 - s)));
    }
    check(fabs(gelu_max - GELU_MAX_SLOPE) < 1e-4 && fabs(silu_max - SILU_MAX_SLOPE) < 1e-4,
          "the steepest slopes: GELU %.5f (constant %.4f), SiLU %.5f (constant %.4f)", gelu_max, GELU_MAX_SLOPE, silu_max,
          SILU_MAX_SLOPE);
    const char* presets[] = {"gpt2", "llama"};
    for (int pi = 0; pi < 2; pi++) {
        Options op;
        options_default(&op);
        op.preset = presets[pi];
        op.L = 1; op.C = 16; op.H = 2; op.T = 4; op.gate = 1;
        Config cfg = config_from_options(&op, 32);
        Model m;
        model_build(&m, &cfg);
        acts_alloc(&m, 2, 4);
        long n = 8L * cfg.F, ng = 8L * cfg.H;
        float* pre = cfg.swiglu ? m.a.mlp_gate : m.a.up;
        // half the units at 0 (slope 0.5), half far left (slope ~0); a quarter of the gates at 0.9999
        for (long i = 0; i < n; i++) pre[i] = i % 2 ? -20.0f : 0.0f;
        for (long i = 0; i < ng; i++) m.a.attn_gate[i] = i % 4 ? 0.5f : 0.9999f;
        Probes pr = {.sel = 1u << P_SAT, .emit = capture_line};
        captured_len = 0;
        captured[0] = 0;
        probe_sat(&pr, &m);
        double mlp = captured_value("\"h.0.mlp\""), gate = captured_value("\"h.0.gate\"");
        check(mlp == 0.5 && gate == 0.25, "%s: sat of the MLP units %.3f (want 0.5), of the gates %.3f (want 0.25)",
              presets[pi], mlp, gate);
        model_free(&m);
    }
    // 999 zeros and one 1000: mean 1, std 31.6; bins of 6.32 from -125.4: zeros in bin 19, 1000 past the
    // end (counted in the last bin); a NaN is counted apart
    float x[1001];
    for (int i = 0; i < 999; i++) x[i] = 0.0f;
    x[999] = 1000.0f;
    Probes pr = {.sel = 1u << P_HIST, .emit = capture_line};
    captured_len = 0;
    emit_hist(&pr, 0, "x", x, 1000);
    const char* counts = strstr(captured, "\"counts\":[");
    long c[HIST_BINS] = {0}, total = 0;
    char* p = counts ? (char*)counts + 10 : NULL;
    for (int b = 0; p && b < HIST_BINS; b++) { c[b] = strtol(p, &p, 10); total += c[b]; p++; }
    check(c[19] == 999 && c[HIST_BINS - 1] == 1 && total == 1000 && strstr(captured, "\"nonfinite\":0"),
          "hist: 999 zeros in bin 19 and 1000 clamped to the last bin of %d, %ld counted", HIST_BINS, total);
    x[1000] = NAN;
    captured_len = 0;
    emit_hist(&pr, 0, "x", x, 1001);
    check(strstr(captured, "\"nonfinite\":1") != NULL, "hist: a NaN is counted as nonfinite, in no bin");
}

static void test_probes(void) {
    test_probe_sat_hist();
    test_probe_matrices();
    test_probe_activations();
    test_probe_attnlogit();
    test_probe_gradact();
    test_token_dump();
}

// ---- the map of train_gpt2.c: its table of contents, README's reading path, section references ----
// The header's contents and README's "Reading the source" name sections and the functions in them;
// both must stay true as the file changes. A section is a banner "// N. Title" between two rules of
// '='; a name is defined in a section when a line there that starts in column 0 (not a comment)
// holds it as a word followed by '(', '[', ' =', ';' or ' {' (or is `#define NAME`, `} NAME;`,
// `struct NAME {`).
typedef struct {
    char** line;
    int n;
    int start[64], count;        // the line where section k begins (its banner), k = 0 .. count-1
    int part1, part2;            // the lines of the PART I and PART II banners
} SourceMap;

static int is_rule(const char* l) { return !strncmp(l, "// ======", 9); }

static void source_map_read(SourceMap* sm, char* text) {
    memset(sm, 0, sizeof(*sm));
    int cap = 0;
    for (char* p = text; p && *p;) {
        char* nl = strchr(p, '\n');
        if (nl) *nl = 0;
        if (sm->n == cap) sm->line = realloc(sm->line, (cap = cap ? 2 * cap : 1024) * sizeof(char*));
        sm->line[sm->n++] = p;
        p = nl ? nl + 1 : NULL;
    }
    for (int i = 1; i + 1 < sm->n; i++) {
        int k;
        if (is_rule(sm->line[i - 1]) && sscanf(sm->line[i], "// %d.", &k) == 1 && k == sm->count && sm->count < 64)
            sm->start[sm->count++] = i;
        if (!strncmp(sm->line[i], "// PART II", 10)) sm->part2 = i;
        else if (!strncmp(sm->line[i], "// PART I", 9)) sm->part1 = i;
    }
}

static int section_end(const SourceMap* sm, int k) { return k + 1 < sm->count ? sm->start[k + 1] : sm->n; }

static int word_at(const char* l, const char* p, size_t len) {
    int before = p == l || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
    char after = p[len];
    return before && !(isalnum((unsigned char)after) || after == '_');
}

// Is `name` (or, ending in '*', a name with that prefix) defined in section k?
static int defined_in(const SourceMap* sm, int k, const char* name) {
    char word[64];
    size_t len = strlen(name);
    int prefix = len && name[len - 1] == '*';
    if (prefix) len--;
    snprintf(word, sizeof(word), "%.*s", (int)len, name);
    for (int i = sm->start[k]; i < section_end(sm, k); i++) {
        const char* l = sm->line[i];
        if (!l[0] || isspace((unsigned char)l[0]) || !strncmp(l, "//", 2)) continue;
        for (const char* p = strstr(l, word); p; p = strstr(p + 1, word)) {
            const char* e = p + len;
            if (prefix) while (isalnum((unsigned char)*e) || *e == '_') e++;
            else if (!word_at(l, p, len)) continue;
            if (prefix && (p > l && (isalnum((unsigned char)p[-1]) || p[-1] == '_'))) continue;
            if (*e == '(' || *e == '[' || *e == ';' || !strncmp(e, " =", 2) || !strncmp(e, " {", 2) ||
                !strncmp(l, "#define ", 8))
                return 1;
        }
    }
    return 0;
}

// The names in `text` written as C identifiers (letters, digits, '_', a trailing '*' allowed),
// separated by ", " or spaces; *n gets how many, at most cap.
static int names_in(const char* text, char names[][64], int cap, int backticks) {
    int n = 0;
    for (const char* p = text; *p && n < cap;) {
        if (backticks) {
            p = strchr(p, '`');
            if (!p) break;
            const char* q = strchr(p + 1, '`');
            if (!q) break;
            size_t len = (size_t)(q - p - 1);
            int ok = len > 0 && len < 64 && (isalpha((unsigned char)p[1]) || p[1] == '_');
            for (const char* c = p + 1; c < q && ok; c++)
                ok = isalnum((unsigned char)*c) || *c == '_' || (*c == '*' && c == q - 1);
            if (ok) { memcpy(names[n], p + 1, len); names[n++][len] = 0; }
            p = q + 1;
        } else {
            while (*p && !(isalpha((unsigned char)*p) || *p == '_')) p++;
            const char* q = p;
            while (isalnum((unsigned char)*q) || *q == '_' || *q == '*') q++;
            if (q > p && q - p < 64) { memcpy(names[n], p, (size_t)(q - p)); names[n++][q - p] = 0; }
            p = q;
        }
    }
    return n;
}

// A line of C with its // comment and the insides of its strings removed (into out, cap bytes).
static void code_of(const char* l, char* out, size_t cap) {
    size_t n = 0;
    int in_str = 0;
    for (const char* p = l; *p && n + 1 < cap; p++) {
        if (!in_str && p[0] == '/' && p[1] == '/') break;
        if (*p == '"' && (p == l || p[-1] != '\\')) in_str = !in_str;
        else if (in_str) continue;
        out[n++] = *p;
    }
    out[n] = 0;
}

// The name a function definition at line i defines ("static ... name(...) {", the brace on this line
// or a later one before any ';'), or 0. `(xmalloc)` counts as xmalloc.
static int definition_at(const SourceMap* sm, int i, char name[64]) {
    const char* l = sm->line[i];
    if (strncmp(l, "static ", 7) && strncmp(l, "HOSTDEV static ", 15) && strncmp(l, "int main(", 9)) return 0;
    const char* paren = strchr(l, '(');
    if (!paren) return 0;
    const char *q = paren, *close = strchr(paren, ')');
    if (paren > l && paren[-1] == ' ' && close && close[1] == '(') {    // static void* (xmalloc)(...)
        q = paren + 1;
        paren = close;
    } else {
        while (q > l && (isalnum((unsigned char)q[-1]) || q[-1] == '_')) q--;
        if (q == paren) return 0;
    }
    snprintf(name, 64, "%.*s", (int)(paren - q), q);
    for (int j = i; j < sm->n && j < i + 12; j++) {
        char code[1024];
        code_of(sm->line[j], code, sizeof(code));
        if (strchr(code, '{')) return 1;
        if (strchr(code, ';')) return 0;
    }
    return 0;
}

// Issue 39's first screen: the first layer's forward at or before line 120, at most 15 prototypes in
// section 0, at most 15 distinct Part II functions called from Part I, and no device dispatch, fast
// twin, probe copy or zero-grad flag in Part I's code.
static void test_first_screen(const SourceMap* sm) {
    int first_layer = -1;
    for (int i = sm->start[1]; i < section_end(sm, 1) && first_layer < 0; i++) {
        char name[64];
        if (definition_at(sm, i, name) && strstr(name, "_forward")) first_layer = i + 1;
    }
    check(first_layer > 0 && first_layer <= 120, "the first layer's forward is at line %d (at most 120)", first_layer);
    int protos = 0;
    for (int i = sm->start[0]; i < section_end(sm, 0); i++) {
        char name[64];
        const char* l = sm->line[i];
        if ((!strncmp(l, "static ", 7) || !strncmp(l, "HOSTDEV static ", 15)) && strchr(l, '(') && !definition_at(sm, i, name))
            protos++;
    }
    check(protos > 0 && protos <= 15, "section 0 holds %d prototypes (at most 15)", protos);
    // Part II's functions, then the distinct ones Part I's code calls
    static char defs[2048][64];
    int nd = 0;
    for (int i = sm->part2; i < sm->n && nd < 2048; i++)
        if (definition_at(sm, i, defs[nd])) nd++;
    char called[64][64], list[1024] = "";
    int nc = 0, machinery = 0;
    const char* banned[] = {"engine", "use_reference", "dres_kept", "grads_zero", "_fast"};
    char found[256] = "";
    for (int i = sm->part1; i < sm->part2; i++) {
        char code[1024];
        code_of(sm->line[i], code, sizeof(code));
        for (size_t b = 0; b < sizeof(banned) / sizeof(banned[0]); b++)
            if (strstr(code, banned[b]) && strlen(found) < 200) {
                machinery++;
                snprintf(found + strlen(found), sizeof(found) - strlen(found), " %s (line %d)", banned[b], i + 1);
            }
        for (const char* p = code; (p = strchr(p, '(')); p++) {
            const char* q = p;
            while (q > code && (isalnum((unsigned char)q[-1]) || q[-1] == '_')) q--;
            if (q == p) continue;
            char name[64];
            snprintf(name, sizeof(name), "%.*s", (int)(p - q), q);
            int in_part2 = 0, in_part1 = 0, seen = 0;
            for (int k = 0; k < nd && !in_part2; k++) in_part2 = !strcmp(defs[k], name);
            for (int j = sm->part1; j < sm->part2 && !in_part1; j++) {
                char d[64];
                in_part1 = definition_at(sm, j, d) && !strcmp(d, name);
            }
            for (int k = 0; k < nc && !seen; k++) seen = !strcmp(called[k], name);
            if (in_part2 && !in_part1 && !seen && nc < 64) {
                snprintf(called[nc++], 64, "%s", name);
                snprintf(list + strlen(list), sizeof(list) - strlen(list), " %s", name);
            }
        }
    }
    check(nd > 100 && nc <= 15, "Part I calls %d distinct Part II functions (at most 15):%s", nc, list);
    check(machinery == 0, "Part I's code holds no engine, use_reference, dres_kept, grads_zero or _fast:%s",
          found[0] ? found : " none");
}

static void test_source_map(void) {
    printf("the map of train_gpt2.c: contents, README's reading path, section references\n");
    char* text = read_text("train_gpt2.c", NULL);
    char* readme = read_text("README.md", NULL);
    if (!text || !readme) { check(0, "train_gpt2.c and README.md readable from the repository root"); return; }
    SourceMap sm;
    source_map_read(&sm, text);
    check(sm.count == 13 && sm.part2 > sm.start[5] && sm.part2 < sm.start[6],
          "13 sections, 0 to 12, in order, with PART II between 5 and 6 (found %d)", sm.count);
    test_first_screen(&sm);
    // the header's contents: "  N. title   names" rows, continuation rows holding names only
    int row_k = -1, rows = 0, in_order = 1, titles = 1, undefined = 0;
    char missing[512] = "";
    for (int i = 0; i < sm.n && strncmp(sm.line[i], "*/", 2); i++) {
        const char* l = sm.line[i];
        int k, off;
        const char* names = NULL;
        if (sscanf(l, " %d. %n", &k, &off) == 1 && strlen(l) > 54 && l[0] == ' ') {
            in_order &= k == rows++;
            row_k = k;
            // the title's first word against the banner's
            char a[32] = "", b[32] = "";
            sscanf(l + off, "%31[A-Za-z]", a);
            if (k < sm.count) sscanf(sm.line[sm.start[k]] + 3, "%*d. %31[A-Za-z]", b);
            titles &= k < sm.count && strcasecmp(a, b) == 0;
            names = l + 54;
        } else if (row_k >= 0 && strlen(l) > 54 && !strncmp(l, "                                                      ", 54)) {
            names = l + 54;
        }
        if (!names || row_k < 0 || row_k >= sm.count) continue;
        char list[16][64];
        int n = names_in(names, list, 16, 0);
        for (int j = 0; j < n; j++)
            if (!defined_in(&sm, row_k, list[j])) {
                undefined++;
                snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), " %.60s (%d)", list[j], row_k);
            }
    }
    check(rows == 13 && in_order && titles, "the header's contents list sections 0 to 12 in order, each titled as "
          "its banner (%d rows)", rows);
    check(undefined == 0, "every name in the header's contents is defined in its section:%s", missing[0] ? missing : " all");
    // README: the reading path's items, "Section N" and the names in backticks
    const char* path = strstr(readme, "## Reading the source");
    const char* path_end = path ? strstr(path + 1, "\n## ") : NULL;
    int items = 0, last = -1, readme_order = 1;
    undefined = 0;
    missing[0] = 0;
    for (const char* p = path; p && p < path_end; p = strchr(p + 1, '\n')) {
        int num, k;
        if (p[0] != '\n' || !isdigit((unsigned char)p[1]) || sscanf(p + 1, "%d. Section %d", &num, &k) != 2) continue;
        items++;
        readme_order &= k > last;
        last = k;
        const char* end = p + 1;
        while ((end = strchr(end, '\n')) && end < path_end && end[1] == ' ') end++;
        char item[2048];
        size_t len = (size_t)((end ? end : path_end) - p);
        snprintf(item, sizeof(item), "%.*s", (int)(len < sizeof(item) ? len : sizeof(item) - 1), p);
        char list[32][64];
        int n = names_in(item, list, 32, 1);
        for (int j = 0; j < n; j++)
            if (k >= sm.count || !defined_in(&sm, k, list[j])) {
                undefined++;
                snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), " %.60s (%d)", list[j], k);
            }
    }
    check(items >= 5 && readme_order, "README's reading path: %d items, sections in increasing order", items);
    check(undefined == 0, "every name in README's reading path is defined in the section it gives:%s",
          missing[0] ? missing : " all");
    // README's line count of Part I, against the file
    int part1 = sm.part2 - sm.part1, stated = -1;      // from the PART I banner to PART II's
    const char* lines = path ? strstr(path, " lines)") : NULL;
    if (lines) {
        const char* q = lines;
        while (q > path && (isdigit((unsigned char)q[-1]) || q[-1] == ',')) q--;
        stated = 0;
        for (; q < lines; q++)
            if (isdigit((unsigned char)*q)) stated = stated * 10 + (*q - '0');
    }
    check(stated == part1, "README gives Part I as %d lines; it is %d (from its banner to Part II's)", stated, part1);
    // every "section N" in a comment names a section that exists
    int refs = 0, bad = 0;
    for (int i = 0; i < sm.n; i++) {
        const char* c = strstr(sm.line[i], "//");
        for (const char* p = c; p && (p = strstr(p, "section ")); p += 8) {
            int k;
            if (sscanf(p + 8, "%d", &k) != 1) continue;
            refs++;
            if (k < 0 || k >= sm.count) {
                bad++;
                snprintf(missing, sizeof(missing), "line %d: %.200s", i + 1, sm.line[i]);
            }
        }
    }
    check(refs > 20 && bad == 0, "all %d \"section N\" references in comments name a section (%s)", refs, bad ? missing : "none stale");
    free(sm.line);
    free(text);
    free(readme);
}

// ---- the loop through an engine that keeps its own copy of the parameters ------------------------------
// train_gpt2.cu trains in train_with_engine, its Engine holding the parameters on the GPU and handing them
// back through to_host; the probes then recompute their step on the host (run_inspect). The same
// arrangement on the CPU (the engine trains its own Model, the run's Model sees the weights only through
// to_host) must write the log and the checkpoint of Part I's train(), to the last bit: losses, probe
// values, samples' generator state. The mirror's engine trains its own Model `dev` with Part I's functions.
typedef struct { Model dev; Model* host; } Mirror;

static void mirror_to_host(void* c, int moments) {
    (void)moments;                          // a mirror holds the whole state: it copies it all
    Mirror* mr = (Mirror*)c;
    size_t bytes = mr->dev.num_params * sizeof(float);
    memcpy(mr->host->params, mr->dev.params, bytes);
    memcpy(mr->host->adam_m, mr->dev.adam_m, bytes);
    memcpy(mr->host->adam_v, mr->dev.adam_v, bytes);
}
static Model* mirror_dev(void* c) { return &((Mirror*)c)->dev; }
static float mirror_forward(void* c, const int* inp, const int* tgt, int B, int T) {
    return model_forward(mirror_dev(c), inp, tgt, B, T);
}
static const float* mirror_probs(void* c, int bt, int V) { return mirror_dev(c)->a.logits + (size_t)bt * V; }
static void mirror_zero_grad(void* c) { model_zero_grad(mirror_dev(c)); }
static void mirror_backward(void* c, int B, int T, float dloss) { model_backward(mirror_dev(c), B, T, dloss); }
static double mirror_grad_norm(void* c) { return grad_norm(mirror_dev(c)); }
static void mirror_update(void* c, const OptConfig* o, float lr, int t, float grad_scale) {
    adamw_step(mirror_dev(c), o, lr, t, grad_scale);
}

// One in-process run of train() with the flags; mirror = 1 trains through a Mirror engine.
static void train_in_process(const char* flags, int mirror) {
    char buf[2100], *argv[64];
    int argc = 0;
    snprintf(buf, sizeof(buf), "train_gpt2 %.2048s", flags);
    for (char* tok = strtok(buf, " "); tok && argc < 63; tok = strtok(NULL, " ")) argv[argc++] = tok;
    argv[argc] = NULL;
    Run r;
    parse_args(&r.o, argc, argv);
    Trainer* tr = run_plan(&r, 1);
    fflush(stdout);
    int saved = dup(1), devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    if (mirror) {
        Dataset train_data, val_data;
        Model host;
        r.device = "mirror";
        run_setup_for_engine(&r, &train_data, &val_data, &host);
        Mirror mr = {.host = &host};
        model_build(&mr.dev, &host.cfg);
        memcpy(mr.dev.params, host.params, host.num_params * sizeof(float));
        memcpy(mr.dev.tensors, host.tensors, host.num_tensors * sizeof(Tensor));   // lr_mult, decay
        acts_alloc(&mr.dev, r.o.B, r.o.T);
        Engine e = {&mr, mirror_forward, mirror_probs, mirror_zero_grad, mirror_backward, mirror_grad_norm,
                    mirror_update, mirror_to_host};
        train_with_engine(&r, &e);
        model_free(&mr.dev);
        run_free_engine_setup(&r);
    } else {
        train_run(tr, &r);
    }
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    close(devnull);
    run_free(&r);
}

// A log without its first line (the config event, which names the engine), the timings ("ms", "tok_s":
// the last fields of a train event) and the checkpoint paths (which name the run's directory).
static char* log_without_timing(const char* path) {
    char* text = read_text(path, NULL);
    if (!text) return NULL;
    char* out = xcalloc(strlen(text) + 1, 1);
    char* line = strchr(text, '\n');
    for (line = line ? strtok(line + 1, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        char *ms = strstr(line, ",\"ms\":"), *path = strstr(line, ",\"path\":");
        if (ms) *ms = 0;
        if (path) *path = 0;
        strcat(strcat(out, line), "\n");
    }
    free(text);
    return out;
}

static void test_device_engine(void) {
    printf("trainer: the shared loop through an engine with its own parameters (the GPU's arrangement)\n");
    char flags[2048], a[512], b[512];
    // the third: 2 micro-batches per update (-d), which the host's probe steps replay both of
    const char* presets[] = {"-a gpt2", "-a llama -G 1", "-a gpt2 -d 128"};
    for (int pi = 0; pi < 3; pi++) {
        for (int mirror = 0; mirror < 2; mirror++) {
            snprintf(flags, sizeof(flags), "-i %s/train.txt -j %s/val.txt " SMALL " %s -x 6 -p 3 -o %s/engine%d_%d "
                     "--dump-token-losses %s/engine%d_%d/tok.csv", tmpdir, tmpdir, presets[pi], tmpdir, pi, mirror, tmpdir, pi, mirror);
            train_in_process(flags, mirror);
        }
        snprintf(a, sizeof(a), "%s/engine%d_0/log.jsonl", tmpdir, pi);
        snprintf(b, sizeof(b), "%s/engine%d_1/log.jsonl", tmpdir, pi);
        char *la = log_without_timing(a), *lb = log_without_timing(b);
        int probes = 0;
        for (char* p = la; p && (p = strstr(p, "\"event\":\"probe\"")); p++) probes++;
        check(la && lb && probes > 50 && strcmp(la, lb) == 0,
              "%s: losses and all %d probe lines equal the CPU run's, to the last digit", presets[pi], probes);
        free(la);
        free(lb);
        snprintf(a, sizeof(a), "%s/engine%d_0", tmpdir, pi);
        snprintf(b, sizeof(b), "%s/engine%d_1", tmpdir, pi);
        check(run_files_equal(a, b, "ckpt_000006.bin"), "%s: byte-identical final checkpoints", presets[pi]);
        check(run_files_equal(a, b, "tok.csv"), "%s: identical token-loss dumps", presets[pi]);
    }
}

// --decay-emb and the tensors decoupled weight decay acts on ([ComplexCtl eq. 1], C = the learning rate,
// [Errata 003-2]). With every gradient zero, Adam's moments stay 0 and its update is 0 / (0 + eps) = 0, so
// one adamw_step changes a parameter only through the decay: theta <- theta (1 - lr lambda), the same
// float product bit for bit. The model comes from the trainer's own path (parse_args, run_plan, run_start), so
// the flag is tested where it acts. Every parameter is first set to a random nonzero value: biases
// start at 0, where a decay would not show.
static void test_decay_emb(void) {
    printf("optimizer: weight decay [ComplexCtl eq. 1] on matrices, on wte/wpe only with --decay-emb 1, never on norms or biases\n");
    char train[300], val[300];                  // test_trainer's corpus
    snprintf(train, sizeof(train), "%s/train.txt", tmpdir);
    snprintf(val, sizeof(val), "%s/val.txt", tmpdir);
    const float lr = 1e-2f, lambda = 3.0f;      // 1 - lr lambda = 0.97
    // gpt2: wpe, LayerNorm gains and biases, linear biases, tied head; llama: RMSNorm gains, untied head
    const char* presets[] = {"-a gpt2", "-a llama"};
    for (int pi = 0; pi < 2; pi++) {
        for (int de = 0; de <= 1; de++) {
            char buf[1024], *argv[64];
            int argc = 0;
            snprintf(buf, sizeof(buf), "train_gpt2 %s -i %s -j %s -L 2 -C 16 -H 2 -t 8 -b 2 -c %g --decay-emb %d",
                     presets[pi], train, val, (double)lambda, de);
            for (char* tok = strtok(buf, " "); tok && argc < 63; tok = strtok(NULL, " ")) argv[argc++] = tok;
            argv[argc] = NULL;
            Run r;
            parse_args(&r.o, argc, argv);
            run_plan(&r, 0);
            Dataset train_data, val_data;
            Model model, *m = &model;
            run_setup_for_engine(&r, &train_data, &val_data, m);
            Rng g;
            rng_seed(&g, 17);
            init_normal(&g, m->params, m->num_params, 0.0f, 0.5f);
            memset(m->grads, 0, m->num_params * sizeof(float));
            float* before = xmalloc(m->num_params * sizeof(float));
            memcpy(before, m->params, m->num_params * sizeof(float));
            adamw_step(m, &r.o.opt, lr, 1, 1.0f);
            const float f = 1.0f - lr * r.o.opt.weight_decay;   // as adamw_step forms it
            // per tensor: every entry equals before * f (decayed) or before (not); which one it must be
            int n_emb = 0, n_mat = 0, n_norm = 0, n_bias = 0, bad = 0;
            double sq[3][2] = {{0}};          // sums of squares before, after: embeddings, matrices, gains and biases
            const char* first_bad = "";
            for (int i = 0; i < m->num_tensors; i++) {
                const Tensor* t = &m->tensors[i];
                int emb = t->group == G_TOK_EMB || t->group == G_POS_EMB;
                int never = t->group == G_NORM || t->group == G_BIAS;
                int want = emb ? de : !never;                  // matrices: always
                n_emb += emb;
                n_norm += t->group == G_NORM;
                n_bias += t->group == G_BIAS;
                n_mat += !emb && !never;
                int ok = t->decay == want;
                for (size_t j = 0; j < t->numel; j++) {
                    float b = before[t->offset + j], a = m->params[t->offset + j];
                    ok &= a == (want ? b * f : b) && b != 0.0f;
                    sq[emb ? 0 : never ? 2 : 1][0] += (double)b * b;
                    sq[emb ? 0 : never ? 2 : 1][1] += (double)a * a;
                }
                if (!ok && !bad++) first_bad = t->name;
            }
            check(bad == 0 && n_emb == (pi == 0 ? 2 : 1) && n_mat > 0 && n_norm > 0 && (pi == 1 || n_bias > 0),
                  "%s --decay-emb %d: ||%s|| x %.6f (want %.2f), %d matrices x %.6f (want %.2f), %d norm gains and "
                  "%d biases x %.6f (want 1)%s%s", presets[pi], de, pi == 0 ? "wte, wpe" : "wte",
                  sqrt(sq[0][1] / sq[0][0]), de ? (double)f : 1.0, n_mat, sqrt(sq[1][1] / sq[1][0]), (double)f,
                  n_norm, n_bias, sqrt(sq[2][1] / sq[2][0]), bad ? "; not exact in " : ", every entry exactly",
                  first_bad);
            free(before);
            run_free_engine_setup(&r);
            run_free(&r);
        }
    }
    // the flag takes 0 or 1 and defaults to 0 (the trainer decays no embedding unless asked)
    Options o;
    options_default(&o);
    int dflt = o.decay_emb, refused = 0;
    char f0[] = "train_gpt2", f1[] = "--decay-emb", f2[] = "2";
    char* bad_argv[] = {f0, f1, f2, NULL};
    fflush(stdout);
    fatal_armed = 1;
    if (setjmp(fatal_jump) == 0) parse_args(&o, 3, bad_argv);
    else refused = strstr(fatal_msg, "--decay-emb must be in [0, 1]") != NULL;
    fatal_armed = 0;
    check(dflt == 0 && refused, "--decay-emb defaults to 0; --decay-emb 2 is refused: %s", fatal_msg);
}

// The blow-up stop names the loss as it is: a finite loss beside a norm that is not is printed as
// the progress line prints it (once "loss is inf" was said of -I constant:1e30's loss of ln 256,
// whose gradient norm alone was NaN)
static void test_blowup_message(void) {
    static Run r;       // static: zeroed, and unchanged by the longjmp
    snprintf(r.last_ckpt, sizeof(r.last_ckpt), "none written");
    const float loss[3] = {5.545177f, NAN, INFINITY};
    const double norm[3] = {NAN, NAN, 1.0};
    const char* want[3] = {"loss is 5.545177 (grad norm nan) at step 1",
                           "loss is nan (grad norm nan) at step 1",
                           "loss is inf (grad norm finite) at step 1"};
    static int said, i;     // static: changed between setjmp and longjmp
    said = 0;
    fatal_armed = 1;
    for (i = 0; i < 3; i++) {
        if (setjmp(fatal_jump) == 0) run_inspect(&r, 0, loss[i], norm[i]);
        else said += strstr(fatal_msg, want[i]) != NULL;
    }
    fatal_armed = 0;
    check(said == 3, "the blow-up stop prints a finite loss as a number, nan and inf as such (%d of 3): %s",
          said, fatal_msg);
}

// -I constant:1e30 (weights 1e30, norms 1, biases 0) is a dead run, not a blow-up: every row of the
// stream is one constant, whose variance, of the rounding residue x - mu (about 1e23), overflows to inf,
// so rstd is 0 and the norms output 0 (their bias); the loss is ln 256. PyTorch (float32, dev/ref/model.py,
// the same model) computes every gradient finite: gpt2's are 0 but lnf.b's, the LM head's rounding residue
// summed over the rows (norm 1.276e25 on the batch below); llama's are all 0. The norms' backward forms
// xhat = (x - mu) rstd, 0 here, before it multiplies by the gradient, as PyTorch does: once it multiplied
// the gradient by x - mu first, which overflowed to inf, and inf x 0 made every gradient below lnf NaN.
// On the definitions and on the fast twins (whose residue in lnf.b differs), both presets.
static void test_constant_1e30(void) {
    printf("-I constant:1e30: the rows' variance overflows to inf, yet every gradient is finite, as in PyTorch\n");
    Impl saved = impl;
    int inp[32], tgt[32];
    for (int i = 0; i < 32; i++) inp[i] = (i * 37) % 256, tgt[i] = (i * 37 + 11) % 256;
    for (int llama = 0; llama <= 1; llama++) {
        Config c = {.V = 256, .maxT = 16, .L = 2, .C = 64, .H = 2, .KVH = 2, .F = 256, .rmsnorm = llama,
                    .swiglu = llama, .rope = llama, .bias = !llama, .tied = !llama, .eps = 1e-5f,
                    .rope_theta = 10000.0f, .attn_scale = 1.0f / sqrtf(32.0f), .logit_scale = 1.0f};
        Model m;
        model_build(&m, &c);
        InitSpec spec;
        parse_init(&spec, "constant:1e30", -1.0);
        model_init(&m, &spec, 1337);
        acts_alloc(&m, 2, 16);
        for (int tw = 0; tw < 2; tw++) {
            impl = tw ? twins : definitions;
            model_zero_grad(&m);
            float loss = model_forward(&m, inp, tgt, 2, 16);
            model_backward(&m, 2, 16, 1.0f);
            double norm = grad_norm(&m);
            size_t stray = 0;           // gradients neither 0 nor in lnf.b
            for (size_t i = 0; i < m.num_params; i++)
                stray += m.grads[i] != 0.0f &&
                         !(m.g[K_LNFB] && m.grads + i >= m.g[K_LNFB] && m.grads + i < m.g[K_LNFB] + c.C);
            // PyTorch's norm: gpt2 1.276e25 (a factor of 4 either way allows for other residues), llama 0
            int near = llama ? norm == 0.0 : norm > 1.276e25 / 4 && norm < 1.276e25 * 4;
            check(fabsf(loss - logf(256.0f)) < 1e-6f && near && stray == 0,
                  "%s, %s: loss %.6f (ln 256), gradient norm %.10g (PyTorch's: %s); %zu gradients nonzero "
                  "outside lnf.b", llama ? "llama" : "gpt2", tw ? "fast twins" : "definitions", loss, norm,
                  llama ? "0" : "1.276e25", stray);
        }
        model_free(&m);
    }
    impl = saved;
}

// ---- Part I is what trains: an edit to a definition changes the run, or stops it ------------------
// Each case copies train_gpt2.c into tmpdir with one edit inside one function of Part I (a constant, a
// sign, an index), builds it and trains a small model 3 steps. An edit to one of the six definitions
// with a fast twin must make the trainer refuse to start with the line that names the function and
// says how to train on the definitions (twins_install); an edit to any other layer, or to the gradient
// norm or AdamW, must change the losses or norms of the run (or stop it, on a NaN, but not with that
// refusal). The unedited copy, built the same way, must run and is the run the others are compared
// with.
typedef struct { const char* fn; const char* from; const char* to; const char* flags; int twin; } PartOneEdit;

// train_gpt2.c with the first `from` after "static ... fn(" replaced by `to`, built into tmpdir/edit;
// 1 if it built
static int build_edited(const PartOneEdit* e) {
    size_t len = 0;
    char* s = read_text("train_gpt2.c", &len);
    char head[128], path[512], cmd[1200];
    snprintf(head, sizeof(head), " %s(", e->fn);
    char* at = s ? strstr(s, head) : NULL;
    while (at && strncmp(at - 11 > s ? at - 11 : s, "static void", 11) != 0 &&
           strncmp(at - 13 > s ? at - 13 : s, "static double", 13) != 0)
        at = strstr(at + 1, head);
    char* hit = at && e->from ? strstr(at, e->from) : NULL;
    if (!s || (e->from && !hit)) { free(s); return 0; }
    snprintf(path, sizeof(path), "%s/edit.c", tmpdir);
    FILE* f = fopen(path, "wb");
    size_t cut = hit ? (size_t)(hit - s) : len;
    fwrite(s, 1, cut, f);
    if (hit) {
        fputs(e->to, f);
        fputs(hit + strlen(e->from), f);
    }
    fclose(f);
    free(s);
    snprintf(cmd, sizeof(cmd), "cc -O1 -fopenmp -fno-math-errno -o %s/edit %s -lm 2> %s/edit_build.txt", tmpdir, path,
             tmpdir);
    return system(cmd) == 0;
}

// the edited trainer's run in tmpdir/edit_N; its losses (losses_of_log), or NULL if it failed, with its
// stderr in *err
static char* run_edited(const char* flags, int n, char** err) {
    char cmd[2048], path[512];
    snprintf(cmd, sizeof(cmd), "cd %s && OMP_NUM_THREADS=2 ./edit -i train.txt -j val.txt -L 2 -C 32 -H 2 -b 4 -t 16 "
             "-x 3 -v 2 -s 0 %s -o edit_%d > edit_out.txt 2> edit_err.txt", tmpdir, flags, n);
    int st = system(cmd);
    snprintf(path, sizeof(path), "%s/edit_err.txt", tmpdir);
    *err = read_text(path, NULL);
    if (st != 0) return NULL;
    snprintf(path, sizeof(path), "%s/edit_%d/log.jsonl", tmpdir, n);
    return losses_of_log(path);
}

static void test_part_one_edits(void) {
    static const PartOneEdit edits[] = {
        {"matmul_forward", "row[o] = bias ? bias[o]", "row[o] = bias ? -bias[o]", "", 1},
        {"matmul_backward", "float d = dout[(long)bt * OC + o];", "float d = 0.5f * dout[(long)bt * OC + o];", "", 1},
        {"attention_forward", "a[s] = scale * dot;", "a[s] = 0.5f * scale * dot;", "", 1},
        {"attention_backward", "(dp[s] - adot)", "(dp[s] + adot)", "", 1},
        {"softmax_forward", "/ sum);", "/ (2.0 * sum));", "", 1},
        {"lm_head_backward", "targets, BT, V, scale);", "targets, BT, V, -scale);", "", 1},
        {"embedding_forward", "+ (wpe ?", "- (wpe ?", "", 0},
        {"embedding_backward", "dwte[(long)tok[bt] * C + c] +=", "dwte[(long)tok[bt] * C + c] -=", "", 0},
        {"norm_forward", "var /= C;", "var /= C - 1;", "", 0},
        {"norm_backward", "dw[c] += d", "dw[c] -= d", "", 0},
        {"rope_apply", "a * sn + b * c", "a * sn - b * c", "-a llama", 0},
        {"attn_gate_forward", "sigmoid_of(gate[", "sigmoid_of(-gate[", "-G 1", 0},
        {"attn_gate_backward", "(1.0f - g)", "(1.0f + g)", "-G 1", 0},
        {"gelu_forward", "gelu_of(inp[i])", "gelu_of(1.5f * inp[i])", "", 0},
        {"gelu_backward", "* dout[i]", "* 0.5f * dout[i]", "", 0},
        {"swiglu_forward", "swiglu_of(a[i], u[i])", "swiglu_of(u[i], a[i])", "-a llama", 0},
        {"swiglu_backward", "&da[i], &du[i]", "&du[i], &da[i]", "-a llama", 0},
        {"residual_forward", "a[i] + b[i]", "a[i] + 0.5f * b[i]", "", 0},
        {"grad_norm", "s += (double)g[j] * g[j];", "s += 2.0 * g[j] * g[j];", "", 0},
        {"adamw_update", "(1.0f - beta1) * gi", "(1.0f - beta1) * -gi", "", 0},
        {"model_zero_grad", "m->grads[i] = 0.0f;", "m->grads[i] *= 0.5f;", "", 0},
        {"model_backward", "memcpy(dres, dres + res_stride, row_bytes);", "memset(dres, 0, row_bytes);", "", 0},
    };
    printf("Part I is what trains: edited definitions, built and run\n");
    const char* presets[3] = {"", "-a llama", "-G 1"};
    char* base[3];
    PartOneEdit none = {"main", NULL, NULL, "", 0};
    int built = build_edited(&none);
    for (int p = 0; p < 3; p++) {
        char* err;
        base[p] = built ? run_edited(presets[p], p, &err) : NULL;
        check(base[p] != NULL, "unedited, built with -O1, trains: %s %.200s", presets[p], err ? err : "");
        free(err);
    }
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        const PartOneEdit* e = &edits[i];
        if (!build_edited(e)) { check(0, "%s: %s -> %s did not build", e->fn, e->from, e->to); continue; }
        char* err;
        char* losses = run_edited(e->flags, (int)i + 3, &err);
        int p = strstr(e->flags, "llama") ? 1 : strstr(e->flags, "-G") ? 2 : 0;
        if (e->twin) {
            char want[128];
            snprintf(want, sizeof(want), "error: %s: the definition (section 1) and its fast twin", e->fn);
            check(!losses && err && strncmp(err, want, strlen(want)) == 0 && strstr(err, "make train_gpt2 REFERENCE=1") &&
                      strchr(err, '\n') == err + strlen(err) - 1,
                  "%s: %s -> %s: the trainer refuses: %.*s", e->fn, e->from, e->to, err ? (int)strcspn(err, "\n") : 0,
                  err ? err : "");
        } else {
            int stopped = !losses && err && *err && !strstr(err, "fast twin");
            const char* why = stopped ? err : e->flags;
            check(base[p] && (stopped || (losses && strcmp(losses, base[p]) != 0)), "%s: %s -> %s: the run %s %.*s",
                  e->fn, e->from, e->to, stopped ? "stops:" : "changes", (int)strcspn(why, "\n"), why);
        }
        free(losses);
        free(err);
    }
    for (int p = 0; p < 3; p++) free(base[p]);
}

static void test_trainer(void) {
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_gpt2.XXXXXX");
    if (!mkdtemp(tmpdir)) { check(0, "cannot create a temporary directory"); return; }
    char path[512];
    snprintf(path, sizeof(path), "%s/train.txt", tmpdir);
    write_corpus(path, 40000, 11);
    snprintf(path, sizeof(path), "%s/val.txt", tmpdir);
    write_corpus(path, 4000, 12);
    if (access(trainer_binary(), X_OK) != 0) { check(0, "%s is missing: run `make test`", trainer_binary()); return; }
    test_resume_and_determinism();
    test_llmc_order();
    write_bad_files();
    test_bad_input();
    if (full_tier()) {  // make check: the rest of the trainer end to end
        test_accumulation();
        test_data_order();
        test_refusal_keeps_files();
        test_path_clashes();
        test_finished_run_dir();
        test_output_lock();
        test_log_lines();
        test_resume_log_and_spike();
        test_llmc();
        test_schemes_train();
        test_probes_trainer();
        test_device_engine();
        test_decay_emb();
        test_part_one_edits();
    }
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("  (could not remove %s)\n", tmpdir);
}


// ---- 6. suites run as programs, counted in this runner's total ------------------------------------------------
// The MLP labs' self-test (dev/labs/mlp_lab.c: its own backward passes and statistics) and the GPU
// trainer on the CPU runtime for CUDA (dev/cuda_cpu, doc/cuda.md): the runtime's self-test, the GPU
// tests (every kernel of train_gpt2.cu against the PyTorch fixtures and this CPU trainer) and the
// mutants (deliberate bugs in train_gpt2.cu that those tests must catch). And this file's own tests,
// built with the sanitizers (dev/sanitize.sh, make test-sanitize; it runs them with TEST_SUITES=0).
// Each program ends with a line "[word: ]N passed, N failed"; its other lines are shown indented, all
// together when it ends. The full tier runs TEST_JOBS of them at once (default 2): most are one
// process on one core (the CPU runtime for CUDA runs its threads as fibers of one thread).
typedef struct {
    const char* title;
    const char* program;
    const char* args;
    const char* env;  // NAME=VALUE set for the program, or ""
} Suite;

typedef struct {
    pid_t pid;
    char output[300];  // the program's stdout and stderr, read when it ends
} SuiteRun;

static void suite_start(const Suite* s, SuiteRun* r) {
    r->pid = -1;
    if (access(s->program, X_OK) != 0) return;  // suite_finish says so
    snprintf(r->output, sizeof(r->output), "%s/test_gpt2_suite.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    int fd = mkstemp(r->output);
    if (fd < 0) return;
    fflush(stdout);
    r->pid = fork();
    if (r->pid == 0) {
        if (*s->env) putenv((char*)s->env);
        dup2(fd, 1);
        dup2(fd, 2);
        char cmd[1024];
        snprintf(cmd, sizeof(cmd), "%s %s", s->program, s->args);
        execl("/bin/sh", "sh", "-c", cmd, (char*)NULL);
        _exit(127);
    }
    close(fd);
}

static void suite_finish(const Suite* s, const SuiteRun* r, int st) {
    printf("%s: %s%s%s\n", s->title, s->program, *s->args ? " " : "", s->args);
    if (access(s->program, X_OK) != 0) { check(0, "%s is missing: run `make check`", s->program); return; }
    if (r->pid < 0) { check(0, "cannot run %s", s->program); return; }
    FILE* f = fopen(r->output, "r");
    int passed = -1, failed = -1;
    char line[1024];
    while (f && fgets(line, sizeof(line), f)) {
        const char* counts = strchr(line, ':') ? strchr(line, ':') + 1 : line;
        int a, b;
        char tail;
        if (sscanf(counts, "%d passed, %d failed%c", &a, &b, &tail) == 3 && tail == '\n') {
            passed = a;
            failed = b;
            continue;
        }
        printf("  %s", line);
    }
    if (f) fclose(f);
    unlink(r->output);
    if (passed < 0 || !WIFEXITED(st)) { check(0, "%s did not finish", s->program); return; }
    n_passed += passed;
    n_failed += failed;
    check(WEXITSTATUS(st) == (failed ? 1 : 0), "%s: %d passed, %d failed, exit %d", s->program, passed, failed,
          WEXITSTATUS(st));
    fflush(stdout);
}

// Runs the suites, `jobs` at a time, in the order given (the longest first), each reported as it ends.
static void run_suites(const Suite* suites, int n, int jobs) {
    SuiteRun* runs = (SuiteRun*)xcalloc(n, sizeof(SuiteRun));
    int next = 0, running = 0;
    while (next < n || running > 0) {
        while (next < n && running < jobs) {
            suite_start(&suites[next], &runs[next]);
            if (runs[next].pid > 0) running++;
            else suite_finish(&suites[next], &runs[next], 0);
            next++;
        }
        if (running == 0) continue;
        int st;
        pid_t pid = wait(&st);
        if (pid < 0) break;
        for (int i = 0; i < next; i++)
            if (runs[i].pid == pid) {
                suite_finish(&suites[i], &runs[i], st);
                running--;
            }
    }
    free(runs);
}

// The suites of each tier. The full tier runs README's single-suite commands as README writes them, in a
// fresh copy of the repository (dev/fresh_copy.sh): each must build what its programs need by itself.
static const Suite quick_suites[] = {
    {"the GPU trainer's kernels on the CPU runtime, at the fixtures' shapes", "./test_gpt2cu_cpu", "", ""},
};
static const Suite full_suites[] = {
    {"deliberate bugs in train_gpt2.cu", "dev/fresh_copy.sh", "'make test-cuda-mutants'", ""},
    {"this file's tests", "./test_gpt2", "", "TEST_SUITES=0"},
    {"the GPU trainer on the CPU runtime", "dev/fresh_copy.sh", "'make test_gpt2cu_cpu && ./test_gpt2cu_cpu'", ""},
    {"this file's tests under ASan, LeakSanitizer and UBSan", "dev/fresh_copy.sh", "'make test-sanitize'", ""},
    {"the labs' numbers against doc/labs (make lab-check)", "dev/labs/lab_check_ci.sh", "", ""},
    {"make lab-check on a broken run of every lab", "dev/labs/py_suite.sh", "dev/labs/lab_check_broken.py", ""},
    {"every axis of the labs' figures labelled", "dev/labs/py_suite.sh", "dev/labs/figure_check.py", ""},
    {"the labs' handouts, run and checked against the code", "dev/labs/py_suite.sh",
     "dev/labs/handout_check.py", ""},
    {"the numbers the labs' pages quote, against their CSVs", "dev/labs/py_suite.sh",
     "dev/labs/quote_check.py", ""},
    {"MLP labs", "dev/fresh_copy.sh", "'make lab-selftest'", ""},
    {"the CPU runtime for CUDA", "dev/cuda_cpu/selftest", "", ""},
    {"make check with clang hidden (a laptop with gcc alone)", "dev/test_no_clang.sh", "", ""},
};
#define N_FULL_SUITES ((int)(sizeof(full_suites) / sizeof(full_suites[0])))

// README's "Tests" names both tiers as the Makefile and .ci/run define them, and every command the full
// tier runs in a fresh copy, so that what README tells a student to run is what the tests run.
static void test_readme_tiers(void) {
    printf("README's tests: both tiers, and the commands the full tier runs as written\n");
    char* readme = read_text("README.md", NULL);
    char* makefile = read_text("Makefile", NULL);
    char* ci = read_text(".ci/run", NULL);
    const char* tests = readme ? strstr(readme, "\n## Tests") : NULL;
    const char* end = tests ? strstr(tests + 1, "\n## ") : NULL;
    size_t len = tests ? (size_t)((end ? end : tests + strlen(tests)) - tests) : 0;
    char* section = (char*)xcalloc(len + 1, 1);
    if (tests) memcpy(section, tests, len);
    check(strstr(section, "`make test`") && strstr(section, "`make check`"),
          "README's Tests section names `make test` and `make check`");
    check(makefile && strstr(makefile, "\ntest:") && strstr(makefile, "\ncheck:") &&
          strstr(makefile, "TEST_TIER=quick ./test_gpt2"), "the Makefile defines both tiers, test as TEST_TIER=quick");
    check(ci && strstr(ci, "\nmake check\n"), ".ci/run runs make check");
    for (int i = 0; i < N_FULL_SUITES; i++) {
        if (strcmp(full_suites[i].program, "dev/fresh_copy.sh") != 0) continue;
        char command[256];
        snprintf(command, sizeof(command), "`%.*s`", (int)strlen(full_suites[i].args) - 2, full_suites[i].args + 1);
        check(strstr(section, command) != NULL, "README's Tests section gives %s, which make check runs as written",
              command);
    }
    free(section);
    free(readme);
    free(makefile);
    free(ci);
}


int main(void) {
    impl = twins;       // as the trainer runs, once twins_install has checked them
    const char* only_own = getenv("TEST_SUITES");  // 0: this file's tests only (make test-sanitize)
    if (full_tier() && !(only_own && strcmp(only_own, "0") == 0)) {
        // make check: this file's tests are one suite among the others, two at a time
        const char* jobs = getenv("TEST_JOBS");
        run_suites(full_suites, N_FULL_SUITES, jobs && atoi(jobs) > 0 ? atoi(jobs) : 2);
        printf("%d passed, %d failed\n", n_passed, n_failed);
        return n_failed ? 1 : 0;
    }
    // make test (and this file's suite of make check): the fixtures, the initializers, finite
    // differences, the fast paths against their definitions, the probes, resume and bad input through
    // the binary (the full tier runs more of it)
    test_fixtures();
    test_init_fixture();
    test_gains();
    test_crc32();
    test_memory_estimate();
    test_scheme_sampling();
    test_init_facts();
    test_resid_and_mup();
    test_deep_relu();
    test_gemm();
    test_reference_paths();
    test_grad_norm();
    test_finite_differences();
    test_fast_vs_definition();
    test_probes();
    test_blowup_message();
    test_constant_1e30();
    test_trainer();
    test_source_map();
    test_readme_tiers();
    if (!full_tier()) {
        if (!(only_own && strcmp(only_own, "0") == 0)) run_suites(quick_suites, 1, 1);
        printf("the quick tier (make test) left to make check: the mutants of train_gpt2.cu, the sanitizers, the\n"
               "trainer end to end beyond resume and bad input (accumulation, data order, logs, llm.c files,\n"
               "every scheme trained, probes through the binary, the fault table), the GPU trainer's binaries,\n"
               "kernel pairs and several ranks, the labs' checks and handouts, the CPU runtime's self-test\n");
    }
    printf("%d passed, %d failed\n", n_passed, n_failed);
    return n_failed ? 1 : 0;
}
