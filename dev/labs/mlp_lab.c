/*
mlp_lab.c: the small MLP trainer behind the classroom labs of doc/labs/ (issue 7, labs I).

[InitFP], [InitGuide] and [VarDyn] teach initialization through experiments on deep MLPs. Each lab
below re-runs one of them with this project's code: the generator, the nn.init primitives and the
initializer (init_matrix_text, train_gpt2.c section 6), the matmul, GELU, norm, softmax and
cross-entropy kernels and the statistics of the probes all come from train_gpt2.c, included here the
way test_gpt2.c does.
What is new here is only what an MLP needs on top: the other activations, the layer stack with
optional residual blocks and normalization, its backward pass, SGD/Adam, the data tables, the labs.

    make dev/labs/mlp_lab
    dev/labs/mlp_lab selftest                 backward passes against finite differences, worked examples (make check)
    dev/labs/mlp_lab worked                   the sources' worked examples, recomputed next to their numbers
    dev/labs/mlp_lab LAB [flags]              one lab; writes its CSV, out/labs/LAB/LAB.csv (make lab-LAB also plots it)

Every lab writes one CSV in long form, `section,series,x,metric,value`, which dev/labs/plot_labs.py
turns into figures and the write-up LAB.md next to it (the committed ones in doc/labs/ come from make lab-publish).
*/
#define TRAIN_GPT2_NO_MAIN
#include "train_gpt2.c"

// ============================================================================================
// 1. Activations: relu, leaky_relu, tanh, sigmoid, gelu (train_gpt2.c's tanh form), silu, identity
// ============================================================================================

typedef enum { A_IDENTITY, A_RELU, A_LEAKY, A_TANH, A_SIGMOID, A_GELU, A_SILU, NUM_ACTS } Act;
static const char* act_names[NUM_ACTS] = {"identity", "relu", "leaky_relu", "tanh", "sigmoid", "gelu", "silu"};
#define LEAKY_SLOPE 0.01f       // torch's default negative_slope

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// out = phi(in), elementwise; GELU is train_gpt2.c's own kernel (the tanh form GPT-2 uses)
static void act_forward(Act a, float* out, const float* in, long n) {
    if (a == A_GELU) { gelu_forward(out, in, n); return; }
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        float x = in[i];
        switch (a) {
            case A_RELU:    out[i] = x < 0.0f ? 0.0f : x; break;      // NaN stays NaN, as in torch
            case A_LEAKY:   out[i] = x < 0.0f ? LEAKY_SLOPE * x : x; break;
            case A_TANH:    out[i] = tanh_via_exp(x); break;
            case A_SIGMOID: out[i] = sigmoidf(x); break;
            case A_SILU:    out[i] = x * sigmoidf(x); break;
            default:        out[i] = x; break;
        }
    }
}

// din = phi'(in) * dout (overwrites din)
static void act_backward(Act a, float* din, const float* in, const float* dout, long n) {
    if (a == A_GELU) { gelu_backward(din, in, dout, n); return; }
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        float x = in[i], d;
        switch (a) {
            case A_RELU:    d = x > 0.0f ? 1.0f : 0.0f; break;
            case A_LEAKY:   d = x > 0.0f ? 1.0f : LEAKY_SLOPE; break;
            case A_TANH:    { float t = tanh_via_exp(x); d = 1.0f - t * t; } break;
            case A_SIGMOID: { float s = sigmoidf(x); d = s * (1.0f - s); } break;
            case A_SILU:    { float s = sigmoidf(x); d = s * (1.0f + x * (1.0f - s)); } break;
            default:        d = 1.0f; break;
        }
        din[i] = d * dout[i];
    }
}

// ============================================================================================
// 2. The MLP: dims[0] -> dims[1] -> ... -> dims[L], with optional residual blocks and norms
// ============================================================================================
//   plain layer l:     out_l = phi(W_l u_l + b_l)               (the last layer has no phi when head = 1)
//   residual block l:  out_l = h + V_l phi(W_l u_l + b_l) + c_l  (hidden layers 1..L-2, square)
// with u_l = norm(input of layer l) when norm is on (layers 1..L-1: every input that is not the data),
// else the input itself. In a residual net layer 0 is linear, an embedding of the data into the stream.

#define MAX_LAYERS 130
#define NORM_EPS 1e-5f
enum { NORM_NONE, NORM_LAYER, NORM_RMS };

typedef struct {
    int L;                        // weight layers
    int dims[MAX_LAYERS + 1];
    Act act;
    int residual;
    int norm;
    int head;                     // 1: the last layer gives logits (no phi)
} MLPConfig;

typedef struct {
    MLPConfig cfg;
    int B;                        // batch capacity
    size_t num_params;
    float *params, *grads, *m, *v;               // m, v: SGD momentum / Adam moments
    float *W[MAX_LAYERS], *b[MAX_LAYERS], *V[MAX_LAYERS], *c[MAX_LAYERS], *gn[MAX_LAYERS], *bn[MAX_LAYERS];
    // activations of the last forward pass
    float *u[MAX_LAYERS], *mean[MAX_LAYERS], *rstd[MAX_LAYERS], *z[MAX_LAYERS], *hm[MAX_LAYERS], *out[MAX_LAYERS];
    const float* x;               // the input of the last forward
    const int* y;
    float *d0, *d1, *dz, *dm, *du, *losses;
    float* dout_kept[MAX_LAYERS]; // where set (lab diag), mlp_backward copies dL/d out_l here (B x dims[l+1])
} MLP;

// the gradient of a parameter lives at the same offset in the gradient block
#define GRAD(n, p) ((p) ? (n)->grads + ((p) - (n)->params) : NULL)

static int is_block(const MLPConfig* c, int l) { return c->residual && l >= 1 && l <= c->L - 2; }
static int has_norm(const MLPConfig* c, int l) { return c->norm != NORM_NONE && l >= 1; }
static int has_act(const MLPConfig* c, int l) {
    return !(c->residual && l == 0) && !(c->head && l == c->L - 1);
}

static void mlp_build(MLP* n, const MLPConfig* cfg, int B) {
    memset(n, 0, sizeof(*n));
    n->cfg = *cfg;
    n->B = B;
    const MLPConfig* c = &n->cfg;
    if (c->L < 1 || c->L > MAX_LAYERS) fatal("an MLP needs 1 to %d layers, got %d", MAX_LAYERS, c->L);
    if (c->residual && (c->L < 3 || !c->head)) fatal("a residual MLP needs at least 3 layers and a head");
    int maxd = 0;
    for (int l = 0; l <= c->L; l++) {
        if (c->dims[l] < 1) fatal("layer width %d must be positive", c->dims[l]);
        if (c->dims[l] > maxd) maxd = c->dims[l];
    }
    // pass 1 counts the parameters, pass 2 points into the block
    for (int pass = 0; pass < 2; pass++) {
        size_t off = 0;
        #define TAKE(ptr, count) do { if (pass) (ptr) = n->params + off; off += (size_t)(count); } while (0)
        for (int l = 0; l < c->L; l++) {
            int C = c->dims[l], OC = c->dims[l + 1];
            if (is_block(c, l) && C != OC) fatal("residual block %d must be square, got %d -> %d", l, C, OC);
            TAKE(n->W[l], (size_t)OC * C);
            TAKE(n->b[l], OC);
            if (is_block(c, l)) { TAKE(n->V[l], (size_t)OC * OC); TAKE(n->c[l], OC); }
            if (has_norm(c, l)) {
                TAKE(n->gn[l], C);
                if (c->norm == NORM_LAYER) TAKE(n->bn[l], C);
            }
        }
        #undef TAKE
        if (!pass) {
            n->num_params = off;
            n->params = xcalloc(off, sizeof(float));
            n->grads = xcalloc(off, sizeof(float));
            n->m = xcalloc(off, sizeof(float));
            n->v = xcalloc(off, sizeof(float));
        }
    }
    for (int l = 0; l < c->L; l++) {
        int C = c->dims[l], OC = c->dims[l + 1];
        if (has_norm(c, l)) {
            n->u[l] = xmalloc((size_t)B * C * sizeof(float));
            n->mean[l] = xmalloc(B * sizeof(float));
            n->rstd[l] = xmalloc(B * sizeof(float));
        }
        n->z[l] = xmalloc((size_t)B * OC * sizeof(float));
        if (is_block(c, l)) n->hm[l] = xmalloc((size_t)B * OC * sizeof(float));
        n->out[l] = has_act(c, l) || is_block(c, l) ? xmalloc((size_t)B * OC * sizeof(float)) : n->z[l];
    }
    size_t big = (size_t)B * maxd;
    n->d0 = xmalloc(big * sizeof(float));
    n->d1 = xmalloc(big * sizeof(float));
    n->dz = xmalloc(big * sizeof(float));
    n->dm = xmalloc(big * sizeof(float));
    n->du = xmalloc(big * sizeof(float));
    n->losses = xmalloc(B * sizeof(float));
}

static void mlp_free(MLP* n) {
    const MLPConfig* c = &n->cfg;
    for (int l = 0; l < c->L; l++) {
        free(n->u[l]); free(n->mean[l]); free(n->rstd[l]); free(n->hm[l]);
        if (n->out[l] != n->z[l]) free(n->out[l]);
        free(n->z[l]);
    }
    free(n->params); free(n->grads); free(n->m); free(n->v);
    free(n->d0); free(n->d1); free(n->dz); free(n->dm); free(n->du); free(n->losses);
}

// Every weight matrix from init_matrix_text(scheme) (rows = fan_out, cols = fan_in), biases 0, norm
// weights 1. The V of the residual blocks write into the stream; resid_scale multiplies them by
// 1/sqrt(number of blocks), GPT-2's rule ([InitFP §4], [InitGuide ch. 5]) with one term per block.
static void mlp_init(MLP* n, const char* scheme, int resid_scale, uint64_t seed) {
    const MLPConfig* c = &n->cfg;
    Rng g;
    rng_seed(&g, seed);
    memset(n->params, 0, n->num_params * sizeof(float));
    memset(n->m, 0, n->num_params * sizeof(float));
    memset(n->v, 0, n->num_params * sizeof(float));
    int blocks = c->residual ? c->L - 2 : 0;
    for (int l = 0; l < c->L; l++) {
        int C = c->dims[l], OC = c->dims[l + 1];
        init_matrix_text(&g, n->W[l], OC, C, scheme);
        if (is_block(c, l)) {
            init_matrix_text(&g, n->V[l], OC, OC, scheme);
            if (resid_scale)
                for (size_t i = 0; i < (size_t)OC * OC; i++) n->V[l][i] *= (float)(1.0 / sqrt(blocks));
        }
        if (has_norm(c, l)) for (int i = 0; i < C; i++) n->gn[l][i] = 1.0f;
    }
}

// Forward pass over B rows of x. With targets y, returns the mean cross-entropy and leaves the
// probabilities in the last layer's output (for the backward pass); without, the logits stay there.
static float mlp_forward(MLP* n, const float* x, const int* y, int B) {
    const MLPConfig* c = &n->cfg;
    if (B > n->B) fatal("batch %d exceeds the MLP's capacity %d", B, n->B);
    n->x = x;
    n->y = y;
    const float* in = x;
    for (int l = 0; l < c->L; l++) {
        int C = c->dims[l], OC = c->dims[l + 1];
        long N = (long)B * OC;
        const float* u = in;
        if (has_norm(c, l)) {
            norm_forward(n->u[l], n->mean[l], n->rstd[l], in, n->gn[l], n->bn[l], c->norm == NORM_RMS, NORM_EPS, B, C);
            u = n->u[l];
        }
        matmul_forward(n->z[l], u, n->W[l], n->b[l], B, C, OC);
        if (is_block(c, l)) {
            act_forward(c->act, n->hm[l], n->z[l], N);
            matmul_forward(n->out[l], n->hm[l], n->V[l], n->c[l], B, OC, OC);
            residual_forward(n->out[l], n->out[l], in, N);
        } else if (has_act(c, l)) {
            act_forward(c->act, n->out[l], n->z[l], N);
        }
        in = n->out[l];
    }
    if (!y) return 0.0f;
    int K = c->dims[c->L];
    softmax_forward(n->out[c->L - 1], n->losses, y, B, K);
    double sum = 0.0;
    for (int i = 0; i < B; i++) sum += n->losses[i];
    return (float)(sum / B);
}

// Backward pass of the last forward (which had targets): gradients accumulate into n->grads.
static void mlp_backward(MLP* n, int B) {
    const MLPConfig* c = &n->cfg;
    float* dcur = n->out[c->L - 1];                  // the probabilities become dlogits in place
    crossentropy_backward(dcur, n->y, B, c->dims[c->L], 1.0f);
    float* spare[2] = {n->d0, n->d1};
    for (int l = c->L - 1; l >= 0; l--) {
        int C = c->dims[l], OC = c->dims[l + 1];
        long N = (long)B * OC;
        const float* in = l ? n->out[l - 1] : n->x;
        const float* u = has_norm(c, l) ? n->u[l] : in;
        float* dprev = l ? spare[l & 1] : NULL;      // gradient of the layer's input
        if (n->dout_kept[l]) memcpy(n->dout_kept[l], dcur, (size_t)N * sizeof(float));   // dcur's buffer is reused below
        if (dprev) memset(dprev, 0, (size_t)B * C * sizeof(float));
        const float* dz = dcur;
        if (is_block(c, l)) {
            // out = in + V hm + c: the stream passes dcur straight through, the branch goes back via V
            memcpy(dprev, dcur, (size_t)N * sizeof(float));
            memset(n->dm, 0, (size_t)N * sizeof(float));
            matmul_backward(n->dm, GRAD(n, n->V[l]), GRAD(n, n->c[l]), dcur, n->hm[l], n->V[l], B, OC, OC);
            act_backward(c->act, n->dz, n->z[l], n->dm, N);
            dz = n->dz;
        } else if (has_act(c, l)) {
            act_backward(c->act, n->dz, n->z[l], dcur, N);
            dz = n->dz;
        }
        if (has_norm(c, l)) {
            memset(n->du, 0, (size_t)B * C * sizeof(float));
            matmul_backward(n->du, GRAD(n, n->W[l]), GRAD(n, n->b[l]), dz, u, n->W[l], B, C, OC);
            norm_backward(dprev, GRAD(n, n->gn[l]), GRAD(n, n->bn[l]), n->du, in, n->gn[l], n->mean[l], n->rstd[l],
                          c->norm == NORM_RMS, B, C);
        } else {
            matmul_backward(dprev, GRAD(n, n->W[l]), GRAD(n, n->b[l]), dz, u, n->W[l], B, C, OC);
        }
        dcur = dprev;
    }
}

// ---- optimizers ------------------------------------------------------------------------------------
typedef struct {
    int adam;                     // 0: SGD with momentum, 1: Adam (no weight decay)
    float lr, momentum, b1, b2, eps;
    int t;
} Opt;

static void opt_step(MLP* n, Opt* o) {
    o->t++;
    float bc1 = 1.0f - powf(o->b1, (float)o->t), bc2 = 1.0f - powf(o->b2, (float)o->t);
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n->num_params; i++) {
        float g = n->grads[i];
        if (o->adam) {
            n->m[i] = o->b1 * n->m[i] + (1.0f - o->b1) * g;
            n->v[i] = o->b2 * n->v[i] + (1.0f - o->b2) * g * g;
            n->params[i] -= o->lr * (n->m[i] / bc1) / (sqrtf(n->v[i] / bc2) + o->eps);
        } else {
            n->m[i] = o->momentum * n->m[i] + g;
            n->params[i] -= o->lr * n->m[i];
        }
    }
}

static Opt opt_make(const char* name, float lr) {
    Opt o = {.lr = lr, .momentum = 0.9f, .b1 = 0.9f, .b2 = 0.999f, .eps = 1e-8f};
    o.adam = strcmp(parse_choice("-O", name, "sgd", "adam"), "adam") == 0;
    return o;
}

// ============================================================================================
// 3. Data: numeric CSV tables fetched by dev/labs/fetch_data.sh, the label in the last column
// ============================================================================================

typedef struct {
    int n, d, k;                  // rows, features, classes
    float* x;                     // n x d
    int* y;
} Data;

static void data_load(Data* D, const char* path) {
    FILE* f = fopen(path, "r");
    if (!f) fatal("cannot open %s (run dev/labs/fetch_data.sh first)", path);
    memset(D, 0, sizeof(*D));
    size_t cap = 0, ncap = 0;
    char* line = NULL;
    size_t lcap = 0;
    while (getline(&line, &lcap, f) > 0) {
        if (line[0] == '\n') continue;
        int cols = 1;
        for (char* p = line; *p; p++) cols += *p == ',';
        if (D->n == 0) {
            if (cols < 2) fatal("%s: a row needs features and a label", path);
            D->d = cols - 1;
        } else if (cols - 1 != D->d) {
            fatal("%s: row %d has %d columns, the first row %d", path, D->n + 1, cols, D->d + 1);
        }
        if ((size_t)D->n == ncap) {
            ncap = ncap ? 2 * ncap : 1024;
            D->y = realloc(D->y, ncap * sizeof(int));
            cap = ncap * D->d;
            D->x = realloc(D->x, cap * sizeof(float));
            if (!D->x || !D->y) fatal("out of memory reading %s", path);
        }
        char* p = line;
        for (int j = 0; j <= D->d; j++) {
            char* end;
            double v = strtod(p, &end);
            if (end == p) fatal("%s: row %d, column %d is not a number", path, D->n + 1, j + 1);
            if (j < D->d) D->x[(size_t)D->n * D->d + j] = (float)v;
            else {
                if (v < 0 || v != floor(v)) fatal("%s: row %d has label %g, not a class index", path, D->n + 1, v);
                D->y[D->n] = (int)v;
                if ((int)v + 1 > D->k) D->k = (int)v + 1;
            }
            p = end + (*end == ',');
        }
        D->n++;
    }
    free(line);
    fclose(f);
    if (D->n == 0) fatal("%s has no rows", path);
}

// Rows idx[0..n-1] of S into a new table.
static Data data_rows(const Data* S, const int* idx, int n) {
    Data D = {.n = n, .d = S->d, .k = S->k};
    D.x = xmalloc((size_t)n * S->d * sizeof(float));
    D.y = xmalloc(n * sizeof(int));
    for (int i = 0; i < n; i++) {
        memcpy(D.x + (size_t)i * S->d, S->x + (size_t)idx[i] * S->d, S->d * sizeof(float));
        D.y[i] = S->y[idx[i]];
    }
    return D;
}

static void data_free(Data* D) { free(D->x); free(D->y); }

// A random split (torch.randperm from the seed) into train and the last n_val rows, then both
// standardized with the training statistics: per column for tables, one mean and std over all
// pixels for images (per-pixel scaling would blow up the border pixels that are almost always 0).
static void data_split(const Data* S, int n_val, uint64_t seed, int per_column, Data* tr, Data* va) {
    if (n_val <= 0 || n_val >= S->n) fatal("cannot hold out %d of %d rows", n_val, S->n);
    int* perm = xmalloc(S->n * sizeof(int));
    Rng g;
    rng_seed(&g, seed);
    rng_randperm(&g, perm, S->n);
    *tr = data_rows(S, perm, S->n - n_val);
    *va = data_rows(S, perm + S->n - n_val, n_val);
    free(perm);
    int groups = per_column ? S->d : 1;
    for (int j = 0; j < groups; j++) {
        double sum = 0.0, sq = 0.0;
        long cnt = 0;
        for (int i = 0; i < tr->n; i++)
            for (int jj = j; jj < (per_column ? j + 1 : S->d); jj++) {
                double v = tr->x[(size_t)i * S->d + jj];
                sum += v; sq += v * v; cnt++;
            }
        double mu = sum / cnt, sd = sqrt(fmax(sq / cnt - mu * mu, 0.0));
        if (sd < 1e-12) sd = 1.0;      // a constant column carries no information: centre it only
        Data* sets[2] = {tr, va};
        for (int s = 0; s < 2; s++)
            for (int i = 0; i < sets[s]->n; i++)
                for (int jj = j; jj < (per_column ? j + 1 : S->d); jj++) {
                    float* v = &sets[s]->x[(size_t)i * S->d + jj];
                    *v = (float)((*v - mu) / sd);
                }
    }
}

// ============================================================================================
// 4. Training and evaluation
// ============================================================================================

typedef struct {
    int steps, batch, eval_every;  // eval_every: full-training-set loss every this many steps (0: never)
    float target;                  // hit_step: first evaluation at or below this training loss
    float clip;                    // scale the gradient down to this global norm when above it (0: never)
    Opt opt;
} TrainSpec;

// Called in every training step after the backward pass (after = 0: the batch's activations and
// gradients are in the MLP) and after the update (after = 1); B is the batch. Lab diag records here.
typedef void (*StepHook)(MLP* n, int step, int B, int after, void* ctx);

typedef struct {
    double train_loss, val_loss, val_acc;
    int hit_step;                  // -1: never reached the target
    int diverged_step;             // -1: the loss stayed finite
} TrainResult;

// Mean loss and accuracy over a table, in batches of the MLP's capacity.
static double mlp_evaluate(MLP* n, const Data* D, double* acc) {
    double loss = 0.0;
    long correct = 0;
    int K = n->cfg.dims[n->cfg.L];
    for (int i0 = 0; i0 < D->n; i0 += n->B) {
        int B = D->n - i0 < n->B ? D->n - i0 : n->B;
        loss += mlp_forward(n, D->x + (size_t)i0 * D->d, D->y + i0, B) * (double)B;
        const float* p = n->out[n->cfg.L - 1];
        for (int i = 0; i < B; i++) {
            int best = 0;
            for (int k = 1; k < K; k++) if (p[(long)i * K + k] > p[(long)i * K + best]) best = k;
            correct += best == D->y[i0 + i];
        }
    }
    if (acc) *acc = (double)correct / D->n;
    return loss / D->n;
}

// Minibatch training, epochs of a random permutation from data_seed. curve (may be NULL) receives
// the full-training-set loss at steps 0, eval_every, 2 eval_every, ... (steps/eval_every + 1 values;
// NAN after a divergence).
// ts->opt carries the optimizer's step count from one call to the next. hook (may be NULL): see StepHook.
static TrainResult mlp_train_hooked(MLP* n, const Data* tr, const Data* va, TrainSpec* ts, uint64_t data_seed, float* curve,
                                    StepHook hook, void* ctx) {
    TrainResult r = {.hit_step = -1, .diverged_step = -1};
    Rng g;
    rng_seed(&g, data_seed);
    int* perm = xmalloc(tr->n * sizeof(int));
    float* xb = xmalloc((size_t)ts->batch * tr->d * sizeof(float));
    int* yb = xmalloc(ts->batch * sizeof(int));
    int pos = tr->n;
    for (int step = 0; step <= ts->steps; step++) {
        if (ts->eval_every && step % ts->eval_every == 0) {
            double l = mlp_evaluate(n, tr, NULL);
            if (curve) curve[step / ts->eval_every] = (float)l;
            if (r.hit_step < 0 && ts->target > 0 && l <= ts->target) r.hit_step = step;
        }
        if (step == ts->steps) break;
        for (int i = 0; i < ts->batch; i++) {
            if (pos == tr->n) { rng_randperm(&g, perm, tr->n); pos = 0; }
            memcpy(xb + (size_t)i * tr->d, tr->x + (size_t)perm[pos] * tr->d, tr->d * sizeof(float));
            yb[i] = tr->y[perm[pos++]];
        }
        float loss = mlp_forward(n, xb, yb, ts->batch);
        if (!isfinite(loss)) {
            r.diverged_step = step;
            if (curve && ts->eval_every)
                for (int s = step / ts->eval_every + 1; s <= ts->steps / ts->eval_every; s++) curve[s] = NAN;
            break;
        }
        memset(n->grads, 0, n->num_params * sizeof(float));
        mlp_backward(n, ts->batch);
        if (ts->clip > 0.0f) {
            double sq = 0.0;
            for (size_t i = 0; i < n->num_params; i++) sq += (double)n->grads[i] * n->grads[i];
            if (sqrt(sq) > ts->clip) {
                float scale = (float)(ts->clip / sqrt(sq));
                for (size_t i = 0; i < n->num_params; i++) n->grads[i] *= scale;
            }
        }
        if (hook) hook(n, step, ts->batch, 0, ctx);
        opt_step(n, &ts->opt);
        if (hook) hook(n, step, ts->batch, 1, ctx);
    }
    r.train_loss = mlp_evaluate(n, tr, NULL);
    r.val_loss = mlp_evaluate(n, va, &r.val_acc);
    free(perm); free(xb); free(yb);
    return r;
}

static TrainResult mlp_train(MLP* n, const Data* tr, const Data* va, TrainSpec* ts, uint64_t data_seed, float* curve) {
    return mlp_train_hooked(n, tr, va, ts, data_seed, curve, NULL, NULL);
}

// ============================================================================================
// 5. Deep stacks at initialization: z_l = W_l h_{l-1}, h_l = phi(z_l), a fresh W_l per layer
// ============================================================================================
// The propagation labs need widths (4096) and depths (64) whose weights would not fit in memory all
// at once, and no training, so each layer's matrix is drawn, applied and dropped (and drawn again by
// the backward pass).

typedef struct {
    int width, depth, batch;
    Act act;
    const char* scheme;           // init_matrix_text scheme of every layer
    const char* first;            // layer 1's scheme (NULL: scheme)
    double gain;                  // layers 2..depth are multiplied by this after drawing
    uint64_t seed;                // weights; the input is N(0, 1) from seed + 1, the output gradient from seed + 2
} StackSpec;

typedef void (*LayerHook)(int l, const float* z, const float* h, const float* h0, int B, int d, void* ctx);
typedef void (*GradHook)(int l, const float* dh, int B, int d, void* ctx);

// W_l, the next matrix of the generator: layer 1's scheme, the gain from layer 2 on
static void stack_weight(Rng* gw, float* W, const StackSpec* s, int l) {
    init_matrix_text(gw, W, s->width, s->width, l == 1 && s->first ? s->first : s->scheme);
    if (l > 1 && s->gain != 1.0)
        for (size_t i = 0; i < (size_t)s->width * s->width; i++) W[i] *= (float)s->gain;
}

// Runs the stack on input (batch x width; NULL: N(0, 1) from seed + 1); hook(l, ...) sees layer l's
// pre-activation z and output h (l = 0: h = input). With ghook, then the backward pass of the loss
// L = sum(g * h_depth), g ~ N(0, 1) from seed + 2: a unit-variance gradient arriving at the top, the
// signal whose variance Xavier's backward condition n_out Var(W) = 1 keeps constant ([InitFP §2.1],
// [InitGuide ch. 2]; through phi, n_out Var(W) d_phi = 1: [VarDyn], [Errata 004-4]). ghook(l, dL/dh_l)
// for l = depth .. 0, with dL/dh_{l-1} = W_l^T (phi'(z_l) * dL/dh_l). Every z_l and h_l is then kept;
// the matrices are not: W_l is drawn again from a copy of the generator as it was before layer l.
static void stack_run_grad(const StackSpec* s, const float* input, LayerHook hook, GradHook ghook, void* ctx) {
    size_t N = (size_t)s->batch * s->width, M = (size_t)s->width * s->width;
    int keep = ghook ? s->depth + 1 : 1;          // layers whose z and h stay in memory
    float* W = xmalloc(M * sizeof(float));
    float* h0 = xmalloc(N * sizeof(float));
    float *hs = xmalloc(keep * N * sizeof(float)), *zs = xmalloc(keep * N * sizeof(float));
    Rng gw, gx, *before = ghook ? xmalloc((s->depth + 1) * sizeof(Rng)) : NULL;
    rng_seed(&gw, s->seed);
    rng_seed(&gx, s->seed + 1);
    if (input) memcpy(h0, input, N * sizeof(float));
    else init_normal(&gx, h0, N, 0.0f, 1.0f);
    memcpy(hs, h0, N * sizeof(float));
    hook(0, NULL, hs, h0, s->batch, s->width, ctx);
    for (int l = 1; l <= s->depth; l++) {
        float *h = hs + (ghook ? l : 0) * N, *z = zs + (ghook ? l : 0) * N;
        if (before) before[l] = gw;
        stack_weight(&gw, W, s, l);
        matmul_forward(z, hs + (ghook ? l - 1 : 0) * N, W, NULL, s->batch, s->width, s->width);
        act_forward(s->act, h, z, (long)N);
        hook(l, z, h, h0, s->batch, s->width, ctx);
    }
    if (ghook) {
        float *dh = xmalloc(N * sizeof(float)), *dz = xmalloc(N * sizeof(float)), *dW = xcalloc(M, sizeof(float));
        Rng gg;
        rng_seed(&gg, s->seed + 2);
        init_normal(&gg, dh, N, 0.0f, 1.0f);
        for (int l = s->depth; l >= 1; l--) {
            ghook(l, dh, s->batch, s->width, ctx);
            act_backward(s->act, dz, zs + l * N, dh, (long)N);
            stack_weight(&before[l], W, s, l);
            memset(dh, 0, N * sizeof(float));
            matmul_backward(dh, dW, NULL, dz, hs + (l - 1) * N, W, s->batch, s->width, s->width);   // dW: unused
        }
        ghook(0, dh, s->batch, s->width, ctx);
        free(dh); free(dz); free(dW);
    }
    free(W); free(h0); free(hs); free(zs); free(before);
}

static void stack_run(const StackSpec* s, LayerHook hook, void* ctx) { stack_run_grad(s, NULL, hook, NULL, ctx); }

// ============================================================================================
// 6. Statistics: the paired t-test of lab 8
// ============================================================================================

// Continued fraction of the regularized incomplete beta I_x(a, b), evaluated bottom-up-free with the
// modified Lentz method (Press et al., Numerical Recipes §6.4 give the fraction's coefficients:
// d_{2m+1} = -(a+m)(a+b+m)x / ((a+2m)(a+2m+1)), d_{2m} = m(b-m)x / ((a+2m-1)(a+2m))).
static double betacf(double a, double b, double x) {
    const double tiny = 1e-300;
    double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
    if (fabs(d) < tiny) d = tiny;
    d = 1.0 / d;
    double f = d;
    for (int m = 1; m <= 10000; m++) {
        for (int odd = 0; odd < 2; odd++) {
            double num = odd ? -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
                             : m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
            d = 1.0 + num * d;
            if (fabs(d) < tiny) d = tiny;
            c = 1.0 + num / c;
            if (fabs(c) < tiny) c = tiny;
            d = 1.0 / d;
            f *= c * d;
            if (odd && fabs(c * d - 1.0) < 1e-15) return f;
        }
    }
    return f;
}

// I_x(a, b) = x^a (1-x)^b / (a B(a,b)) * cf, using the symmetry I_x(a,b) = 1 - I_{1-x}(b,a) where the
// fraction converges slowly (x > (a+1)/(a+b+2)).
static double incomplete_beta(double a, double b, double x) {
    if (x <= 0.0) return 0.0;
    if (x >= 1.0) return 1.0;
    double lnfront = lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x);
    if (x < (a + 1.0) / (a + b + 2.0)) return exp(lnfront) * betacf(a, b, x) / a;
    return 1.0 - exp(lnfront) * betacf(b, a, 1.0 - x) / b;
}

// Two-sided p-value of Student's t with df degrees of freedom: P(|T| > |t|) = I_{df/(df+t^2)}(df/2, 1/2).
static double student_t_p(double t, double df) { return incomplete_beta(0.5 * df, 0.5, df / (df + t * t)); }

// Paired t-test on n pairs: t = mean(d) / (sd(d) / sqrt(n)), d = a - b, df = n - 1.
static void paired_t(const double* a, const double* b, int n, double* mean_diff, double* t, double* p) {
    double m = 0.0, s = 0.0;
    for (int i = 0; i < n; i++) m += a[i] - b[i];
    m /= n;
    for (int i = 0; i < n; i++) s += (a[i] - b[i] - m) * (a[i] - b[i] - m);
    double se = sqrt(s / (n - 1) / n);
    *mean_diff = m;
    *t = se > 0.0 ? m / se : (m == 0.0 ? 0.0 : copysign(INFINITY, m));
    *p = se > 0.0 ? student_t_p(*t, n - 1) : (m == 0.0 ? 1.0 : 0.0);
}

// ============================================================================================
// 7. The labs
// ============================================================================================

typedef struct {
    const char* out;              // the CSV
    const char* data_dir;
    int width, depth, batch, seeds, steps, big_width;
    float lr;
    const char* opt;
    uint64_t seed;
} LabOptions;

// The optimizer of a training lab: -O and -r when given, else SGD at the lab's own learning rate.
static Opt lab_opt(const LabOptions* o, float lr_default) {
    return opt_make(o->opt ? o->opt : "sgd", o->lr > 0 ? o->lr : lr_default);
}

// The training labs multiply 64 x 64 matrices: one OpenMP fork/join per kernel costs more than the
// work, and on a loaded machine a thread waiting at a barrier costs far more (30x measured here).
static void one_thread(void) {
#ifdef _OPENMP
    omp_set_num_threads(1);
#endif
}

static FILE* csv_open(const char* path) {
    FILE* f = fopen(path, "w");
    if (!f) fatal("cannot write %s", path);
    fprintf(f, "section,series,x,metric,value\n");
    return f;
}

static void csv_row(FILE* f, const char* section, const char* series, double x, const char* metric, double v) {
    fprintf(f, "%s,%s,%.9g,%s,%.9g\n", section, series, x, metric, v);
}

// Mean, sample sd (0 for one value), min and max of the n values v[0], v[stride], v[2 stride], ...
typedef struct { double mean, sd, lo, hi; } Spread;
static Spread spread_of(const double* v, size_t stride, int n) {
    Spread r = {0.0, 0.0, v[0], v[0]};
    double ss = 0.0;
    for (int i = 0; i < n; i++) {
        r.mean += v[i * stride] / n;
        if (v[i * stride] < r.lo) r.lo = v[i * stride];
        if (v[i * stride] > r.hi) r.hi = v[i * stride];
    }
    for (int i = 0; i < n; i++) ss += (v[i * stride] - r.mean) * (v[i * stride] - r.mean);
    r.sd = n > 1 ? sqrt(ss / (n - 1)) : 0.0;
    return r;
}

// The spread over seeds that a lab's verdicts rest on (issue 19): the rows METRIC (the mean of v[0..n-1]),
// METRIC_sd (the sample sd), METRIC_min and METRIC_max. The series of one seed end in |sK; these rows
// carry the series without it. A non-finite value makes all four non-finite.
static void csv_spread(FILE* f, const char* section, const char* series, double x, const char* metric,
                       const double* v, int n) {
    Spread sp = spread_of(v, 1, n);
    double m = sp.mean, sd = sp.sd, lo = sp.lo, hi = sp.hi;
    if (!isfinite(m)) lo = hi = sd = m;
    char name[96];
    csv_row(f, section, series, x, metric, m);
    snprintf(name, sizeof(name), "%s_sd", metric);
    csv_row(f, section, series, x, name, sd);
    snprintf(name, sizeof(name), "%s_min", metric);
    csv_row(f, section, series, x, name, lo);
    snprintf(name, sizeof(name), "%s_max", metric);
    csv_row(f, section, series, x, name, hi);
}

// The end of a training run (and its loss curve, one point every `every` steps; curve NULL: none) as CSV rows.
static void csv_result(FILE* f, const char* section, const char* series, double x, const TrainResult* r,
                       const char* curve_series, const float* curve, int steps, int every) {
    csv_row(f, section, series, x, "train_loss", r->train_loss);
    csv_row(f, section, series, x, "val_loss", r->val_loss);
    csv_row(f, section, series, x, "val_acc", r->val_acc);
    csv_row(f, section, series, x, "diverged_step", r->diverged_step);
    if (curve)
        for (int k = 0; k <= steps / every; k++) csv_row(f, "curve", curve_series, k * every, "train_loss", curve[k]);
}

static double mean_square(const float* a, long n) {
    double s = 0.0;
    for (long i = 0; i < n; i++) s += (double)a[i] * a[i];
    return s / n;
}

// The start of a lab that trains on a table of data_labs/: one thread, the table NAME loaded into
// *all before the CSV is opened (so a missing table clobbers no earlier result), the CSV opened.
static FILE* lab_data_begin(const LabOptions* o, const char* name, Data* all) {
    one_thread();
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s.csv", o->data_dir, name);
    data_load(all, path);
    return csv_open(o->out);
}

static void lab_data_end(FILE* f, Data* all, Data* tr, Data* va) {
    data_free(all); data_free(tr); data_free(va);
    fclose(f);
}

// ---- lab 1: explode / vanish ([InitGuide ch. 0-1]) ----------------------------------------------------
typedef struct { FILE* f; const char* section; const char* series; int first_inf, first_nan; double var; } StackLog;   // var: the last layer's

// per layer: mean and std of h (the seed's printout), E[z^2], max |h|, and where inf / NaN first appear
static void hook_stats(int l, const float* z, const float* h, const float* h0, int B, int d, void* ctx) {
    (void)h0;
    StackLog* s = ctx;
    long N = (long)B * d;
    Stats st = stats_of(h, NULL, N);
    long inf = 0, nan = 0;
    double mx = 0.0;
    for (long i = 0; i < N; i++) {
        if (isnan(h[i])) nan++;
        else if (isinf(h[i])) inf++;
        else if (fabs(h[i]) > mx) mx = fabs(h[i]);
    }
    if (inf && s->first_inf < 0) s->first_inf = l;
    if (nan && s->first_nan < 0) s->first_nan = l;
    csv_row(s->f, s->section, s->series, l, "mean", st.mean);
    csv_row(s->f, s->section, s->series, l, "std", st.std);
    csv_row(s->f, s->section, s->series, l, "var", st.std * st.std);
    s->var = st.std * st.std;
    csv_row(s->f, s->section, s->series, l, "max_abs_finite", mx);
    csv_row(s->f, s->section, s->series, l, "inf_frac", (double)inf / N);
    csv_row(s->f, s->section, s->series, l, "nan_frac", (double)nan / N);
    if (z) csv_row(s->f, s->section, s->series, l, "q", mean_square(z, N));
}

// per layer: Var(dL/dh_l), the backward signal (ctx: a StackLog, or a struct that starts with one)
static void hook_grad_stats(int l, const float* dh, int B, int d, void* ctx) {
    StackLog* s = ctx;
    double sd = stats_of(dh, NULL, (long)B * d).std;
    csv_row(s->f, s->section, s->series, l, "grad_var", sd * sd);
}

// The stack with every layer's statistics, and with grad its backward signal; returns the log (the
// first inf and NaN layers, the last layer's variance).
static StackLog stack_logged(FILE* f, const char* section, const StackSpec* sp, int grad) {
    StackLog s = {f, section, sp->scheme, -1, -1, NAN};
    stack_run_grad(sp, NULL, hook_stats, grad ? hook_grad_stats : NULL, &s);
    csv_row(f, section, sp->scheme, sp->depth, "first_inf_layer", s.first_inf);
    csv_row(f, section, sp->scheme, sp->depth, "first_nan_layer", s.first_nan);
    printf("  %-12s %-20s first inf at layer %d, first NaN at layer %d\n", section, sp->scheme, s.first_inf, s.first_nan);
    return s;
}

static void run_stack_logged(FILE* f, const char* section, const StackSpec* sp) { stack_logged(f, section, sp, 1); }

static void lab_explode(const LabOptions* o) {
    FILE* f = csv_open(o->out);
    int d = o->width ? o->width : 512, depth = o->depth ? o->depth : 20, B = o->batch ? o->batch : 64;
    const char* schemes[] = {"normal:1", "normal:0.01", "kaiming_normal:relu"};
    // [InitGuide ch. 0]'s code: 20 ReLU layers, batch 64, width 512
    for (int i = 0; i < 3; i++) {
        StackSpec sp = {d, depth, B, A_RELU, schemes[i], NULL, 1.0, o->seed};
        run_stack_logged(f, "relu", &sp);
    }
    // where fp32 gives out: the N(0,1) stacks continued to 64 layers, ReLU and linear ([InitGuide ch. 1]'s
    // numpy code is the linear one; its 512^n table is the variance of that stack)
    StackSpec relu = {d, 64, B, A_RELU, "normal:1", NULL, 1.0, o->seed};
    run_stack_logged(f, "overflow_relu", &relu);
    StackSpec lin = {d, 64, B, A_IDENTITY, "normal:1", NULL, 1.0, o->seed};
    run_stack_logged(f, "overflow_linear", &lin);
    fclose(f);
}

// ---- lab 2: Xavier vs naive under tanh, Xavier vs He under ReLU ([InitGuide ch. 2-3], [InitFP §3.3]) ---
#undef HIST_BINS     // train_gpt2.c's probe histogram has 40 bins; this lab's has 60
#define HIST_BINS 60
typedef struct { StackLog log; float lo, hi; } HistLog;

static void hook_hist(int l, const float* z, const float* h, const float* h0, int B, int d, void* ctx) {
    HistLog* hl = ctx;
    hook_stats(l, z, h, h0, B, d, &hl->log);
    if (l != 1 && l != 5 && l != 10) return;
    long N = (long)B * d, count[HIST_BINS] = {0}, zeros = 0;
    for (long i = 0; i < N; i++) {
        if (h[i] == 0.0f) { zeros++; continue; }     // ReLU's exact zeros are counted apart
        int k = (int)floorf((h[i] - hl->lo) / (hl->hi - hl->lo) * HIST_BINS);
        if (k >= 0 && k < HIST_BINS) count[k]++;
    }
    char series[96];
    snprintf(series, sizeof(series), "%s|L%d", hl->log.series, l);
    double w = (hl->hi - hl->lo) / HIST_BINS;
    for (int k = 0; k < HIST_BINS; k++)
        csv_row(hl->log.f, "hist", series, hl->lo + (k + 0.5) * w, hl->log.section, count[k] / (N * w));
    csv_row(hl->log.f, "hist_zero_frac", series, l, hl->log.section, (double)zeros / N);
}

static void lab_xavier(const LabOptions* o) {
    FILE* f = csv_open(o->out);
    int d = o->width ? o->width : 512, B = o->batch ? o->batch : 256;
    struct { const char* section; Act act; const char* a; const char* b; float lo, hi; } cases[] = {
        {"tanh", A_TANH, "normal:1", "xavier_normal", -1.0f, 1.0f},
        {"relu", A_RELU, "xavier_normal", "kaiming_normal:relu", 0.0f, 3.0f},
    };
    for (int c = 0; c < 2; c++) {
        const char* sch[2] = {cases[c].a, cases[c].b};
        for (int i = 0; i < 2; i++) {
            StackSpec sp = {d, 10, B, cases[c].act, sch[i], NULL, 1.0, o->seed};
            HistLog hl = {{f, cases[c].section, sch[i], -1, -1, NAN}, cases[c].lo, cases[c].hi};
            stack_run_grad(&sp, NULL, hook_hist, hook_grad_stats, &hl);
        }
    }
    // [InitFP §3.3]: 32 ReLU layers of d = 4096, x ~ N(0,1), batch 64; h.var() after layer 32.
    // For a square layer fan-in and fan-out Kaiming are the same matrix. Over -n seeds (default 5), the
    // table's h.var() and the first layer with inf as their mean, sd, min and max (section deep4096);
    // the backward pass at the first seed only (it draws every matrix twice: twice the time).
    int big = o->big_width ? o->big_width : 4096, seeds = o->seeds ? o->seeds : 5;
    const char* big_schemes[] = {"normal:1", "xavier_normal", "kaiming_normal:relu"};
    double var32[3][64], inf32[3][64];
    for (int s = 0; s < seeds; s++)
        for (int i = 0; i < 3; i++) {
            StackSpec sp = {big, 32, 64, A_RELU, big_schemes[i], NULL, 1.0, o->seed + 100 * s};
            char section[32];
            snprintf(section, sizeof(section), "deep%d_s%d", big, s);
            StackLog lg = stack_logged(f, section, &sp, s == 0);
            var32[i][s] = lg.var;
            inf32[i][s] = lg.first_inf;
        }
    char deep[32];
    snprintf(deep, sizeof(deep), "deep%d", big);
    for (int i = 0; i < 3; i++) {
        csv_spread(f, deep, big_schemes[i], 32, "var", var32[i], seeds);
        csv_spread(f, deep, big_schemes[i], 32, "first_inf_layer", inf32[i], seeds);
    }
    fclose(f);
}

// ---- lab 3: orthogonal matrices preserve norms exactly ([InitGuide ch. 4]) ----------------------------
// per layer: the ratio ||h_l|| / ||h_0|| of every input row, its mean, min and max over the batch
typedef struct { FILE* f; const char* section; const char* series; double* keep; } NormLog;   // keep[l]: the mean (may be NULL)

static void hook_norms(int l, const float* z, const float* h, const float* h0, int B, int d, void* ctx) {
    (void)z;
    NormLog* s = ctx;
    double mean = 0.0, mn = INFINITY, mx = 0.0;
    for (int b = 0; b < B; b++) {
        double n0 = 0.0, n1 = 0.0;
        for (int j = 0; j < d; j++) {
            n0 += (double)h0[(long)b * d + j] * h0[(long)b * d + j];
            n1 += (double)h[(long)b * d + j] * h[(long)b * d + j];
        }
        double r = sqrt(n1 / n0);
        mean += r / B;
        if (r < mn) mn = r;
        if (r > mx) mx = r;
    }
    csv_row(s->f, s->section, s->series, l, "ratio_mean", mean);
    csv_row(s->f, s->section, s->series, l, "ratio_min", mn);
    csv_row(s->f, s->section, s->series, l, "ratio_max", mx);
    if (s->keep) s->keep[l] = mean;
}

// Every run at the first seed; the runs whose result depends on the seed (the Gaussian linear stack and
// the ReLU stacks) at -n seeds (default 5: o->seed + 1000 s), with the mean, sd, min and max over the
// seeds of the mean ratio per layer (the series without |sK). An orthogonal linear stack keeps every
// norm whatever its matrices (Q^T Q = I), and each seed costs 64 QR decompositions per orthogonal run.
static void lab_orthogonal(const LabOptions* o) {
    FILE* f = csv_open(o->out);
    int d = o->width ? o->width : 256, B = o->batch ? o->batch : 64, seeds = o->seeds ? o->seeds : 5;
    char relu_orth[32];
    snprintf(relu_orth, sizeof(relu_orth), "orthogonal:%.9g", calculate_gain("relu", NAN));
    struct { const char* section; Act act; int depth; const char* scheme; int seeded; } runs[] = {
        {"linear20", A_IDENTITY, 20, "orthogonal", 0},
        {"linear20", A_IDENTITY, 20, "lecun_normal", 0},
        {"linear64", A_IDENTITY, 64, "orthogonal", 0},
        {"linear64", A_IDENTITY, 64, "lecun_normal", 1},
        {"gain_linear", A_IDENTITY, 20, "orthogonal:1.1", 0},
        {"gain_linear", A_IDENTITY, 20, "orthogonal:0.9", 0},
        {"relu64", A_RELU, 64, relu_orth, 1},
        {"relu64", A_RELU, 64, "kaiming_normal:relu", 1},
        {"relu64", A_RELU, 64, "orthogonal", 1},
    };
    enum { RUNS = sizeof(runs) / sizeof(runs[0]) };
    double* keep = xmalloc((size_t)RUNS * seeds * 65 * sizeof(double));    // [run][seed][layer 0..64]
    for (int s = 0; s < seeds; s++)
        for (int i = 0; i < RUNS; i++) {
            if (s > 0 && !runs[i].seeded) continue;
            StackSpec sp = {d, runs[i].depth, B, runs[i].act, runs[i].scheme, NULL, 1.0, o->seed + 1000 * (uint64_t)s};
            char series[64];
            snprintf(series, sizeof(series), "%s|s%d", runs[i].scheme, s);
            NormLog nl = {f, runs[i].section, series, keep + ((size_t)i * seeds + s) * 65};
            stack_run(&sp, hook_norms, &nl);
            printf("  %-12s %s done\n", runs[i].section, series);
        }
    double v[64];
    for (int i = 0; i < RUNS; i++)
        for (int l = 0; runs[i].seeded && l <= runs[i].depth; l++) {
            for (int s = 0; s < seeds; s++) v[s] = keep[((size_t)i * seeds + s) * 65 + l];
            csv_spread(f, runs[i].section, runs[i].scheme, l, "ratio_mean", v, seeds);
        }
    free(keep);
    fclose(f);
}

// ---- lab 4: the residual stream ([InitFP §4], [InitGuide ch. 5]) --------------------------------------
// h_{k+1} = h_k + f_k(h_k) over n sublayers, f(h) = V phi(W rmsnorm(h)) (the pre-norm MLP sublayer of
// a transformer) or, for the GPT-2 XL check of [InitGuide ch. 5], the linear sublayer f(h) = V rmsnorm(h).
// Records Var(h_k) / Var(h_0) for every k.
typedef struct {
    int width, n, batch;
    int mlp;                      // 1: V phi(W norm h) with W He, phi ReLU; 0: V norm h
    const char* v_scheme;
    double v_scale;               // V is multiplied by this (GPT-2: 1/sqrt(n))
    uint64_t seed;
} StreamSpec;

// Returns the sublayer variance (below); keep (may be NULL) gets Var(h_k) / Var(h_0) for the k written.
static double stream_run(const StreamSpec* s, FILE* f, const char* section, const char* series, int every_layer,
                         double* keep) {
    size_t N = (size_t)s->batch * s->width, M = (size_t)s->width * s->width;
    float* W = xmalloc(M * sizeof(float));
    float *h = xmalloc(N * sizeof(float)), *u = xmalloc(N * sizeof(float)), *a = xmalloc(N * sizeof(float));
    float *o = xmalloc(N * sizeof(float)), *ones = xmalloc(s->width * sizeof(float)), *rstd = xmalloc(s->batch * sizeof(float));
    for (int i = 0; i < s->width; i++) ones[i] = 1.0f;
    Rng gw, gx;
    rng_seed(&gw, s->seed);
    rng_seed(&gx, s->seed + 1);
    init_normal(&gx, h, N, 0.0f, 1.0f);
    double var0 = stats_of(h, NULL, (long)N).std, sub = 0.0;
    var0 *= var0;
    if (every_layer) csv_row(f, section, series, 0, "var_ratio", 1.0);
    if (keep) keep[0] = 1.0;
    for (int k = 1; k <= s->n; k++) {
        norm_forward(u, NULL, rstd, h, ones, NULL, 1, NORM_EPS, s->batch, s->width);
        const float* in = u;
        if (s->mlp) {
            init_matrix_text(&gw, W, s->width, s->width, "kaiming_normal:relu");
            matmul_forward(a, u, W, NULL, s->batch, s->width, s->width);
            act_forward(A_RELU, a, a, (long)N);
            in = a;
        }
        init_matrix_text(&gw, W, s->width, s->width, s->v_scheme);
        for (size_t i = 0; i < M; i++) W[i] *= (float)s->v_scale;
        matmul_forward(o, in, W, NULL, s->batch, s->width, s->width);
        Stats so = stats_of(o, NULL, (long)N);
        sub += so.std * so.std / s->n;
        residual_forward(h, h, o, (long)N);
        if (every_layer || k == s->n) {
            Stats sh = stats_of(h, NULL, (long)N);
            csv_row(f, section, series, every_layer ? k : s->n, "var_ratio", sh.std * sh.std / var0);
            if (keep) keep[k] = sh.std * sh.std / var0;
        }
    }
    // the sublayer variance sigma^2 (in units of Var h_0) that the law 1 + n sigma^2 needs
    csv_row(f, section, series, s->n, "sublayer_var", sub / var0);
    free(W); free(h); free(u); free(a); free(o); free(ones); free(rstd);
    return sub / var0;
}

static void lab_residual(const LabOptions* o) {
    FILE* f = csv_open(o->out);
    int d = o->width ? o->width : 512, B = o->batch ? o->batch : 64, nmax = o->depth ? o->depth : 160;
    int seeds = o->seeds ? o->seeds : 5;
    // The streams the verdicts test, the unscaled one against 1 + k sigma^2 and the scaled ones for
    // depth independence, at -n seeds (default 5; o->seed + 1000 s, series mlp|sK), with the mean, sd,
    // min and max over the seeds (series mlp); the unscaled finals and GPT-2 XL at the first seed.
    // unscaled: sigma^2 ~ 1 (He into ReLU, V at 1/fan_in), so Var grows as 1 + k; 160 = 2L for L = 80
    double* keep = xmalloc((size_t)seeds * (nmax + 1) * sizeof(double)), sub[64], v[64];
    char series[32];
    for (int s = 0; s < seeds; s++) {
        StreamSpec un = {d, nmax, B, 1, "lecun_normal", 1.0, o->seed + 1000 * (uint64_t)s};
        snprintf(series, sizeof(series), "mlp|s%d", s);
        sub[s] = stream_run(&un, f, "unscaled", series, 1, keep + (size_t)s * (nmax + 1));
    }
    for (int k = 0; k <= nmax; k++) {
        for (int s = 0; s < seeds; s++) v[s] = keep[(size_t)s * (nmax + 1) + k];
        csv_spread(f, "unscaled", "mlp", k, "var_ratio", v, seeds);
    }
    csv_spread(f, "unscaled", "mlp", nmax, "sublayer_var", sub, seeds);
    // GPT-2 scaling by 1/sqrt(n) for several n: Var(h_n) should stay at 1 + sigma^2 whatever n is
    int ns[] = {2, 4, 8, 16, 24, 48, 96, 160};
    for (int i = 0; i < 8; i++) {
        if (ns[i] > nmax) break;
        for (int s = 0; s < seeds; s++) {
            StreamSpec sc = {d, ns[i], B, 1, "lecun_normal", 1.0 / sqrt(ns[i]), o->seed + 1000 * (uint64_t)s};
            snprintf(series, sizeof(series), "mlp|s%d", s);
            sub[s] = stream_run(&sc, f, "scaled", series, 0, keep);     // keep: scratch here
            v[s] = keep[ns[i]];
        }
        csv_spread(f, "scaled", "mlp", ns[i], "var_ratio", v, seeds);
        csv_spread(f, "scaled", "mlp", ns[i], "sublayer_var", sub, seeds);
        StreamSpec us = {d, ns[i], B, 1, "lecun_normal", 1.0, o->seed};
        stream_run(&us, f, "unscaled_final", "mlp|s0", 0, NULL);
        printf("  n = %d done\n", ns[i]);
    }
    free(keep);
    // GPT-2 XL ([InitGuide ch. 5]): d = 1600, 2L = 96 linear sublayers with N(0, 0.02^2), unscaled and
    // with 0.02 / sqrt(96)
    int xl = o->big_width ? o->big_width : 1600;
    StreamSpec g1 = {xl, 96, B, 0, "normal:0.02", 1.0, o->seed};
    stream_run(&g1, f, "gpt2xl", "unscaled|s0", 1, NULL);
    StreamSpec g2 = g1;
    g2.v_scale = 1.0 / sqrt(96.0);
    stream_run(&g2, f, "gpt2xl", "scaled|s0", 1, NULL);
    fclose(f);
}

// ---- lab 5: symmetry ([InitGuide ch. 7]) --------------------------------------------------------------
// The largest distance between two hidden neurons of layer 0 (rows of W_0, with their biases): 0 means
// every neuron of the layer computes the same function.
static double row_spread(const MLP* n, int l) {
    int C = n->cfg.dims[l], OC = n->cfg.dims[l + 1];
    double worst = 0.0;
    for (int i = 1; i < OC; i++) {
        double s = (n->b[l][i] - n->b[l][0]) * (n->b[l][i] - n->b[l][0]);
        for (int j = 0; j < C; j++) {
            double diff = n->W[l][(long)i * C + j] - n->W[l][j];
            s += diff * diff;
        }
        if (sqrt(s) > worst) worst = sqrt(s);
    }
    return worst;
}

static void lab_symmetry(const LabOptions* o) {
    Data all, tr, va;
    FILE* f = lab_data_begin(o, "digits", &all);
    // the seed's hand example: 2 inputs, 2 hidden ReLU neurons, 2 outputs, all weights 0.5, bias 0,
    // input [1, 1]; trained towards class 0 with SGD
    MLPConfig tiny = {.L = 2, .dims = {2, 2, 2}, .act = A_RELU, .head = 1};
    MLP n;
    mlp_build(&n, &tiny, 1);
    mlp_init(&n, "constant:0.5", 0, o->seed);
    float x[2] = {1.0f, 1.0f};
    int y[1] = {0};
    Opt opt = opt_make("sgd", 0.1f);
    opt.momentum = 0.0f;
    for (int step = 0; step <= 20; step++) {
        float loss = mlp_forward(&n, x, y, 1);
        csv_row(f, "tiny", "hidden", step, "h0", n.out[0][0]);
        csv_row(f, "tiny", "hidden", step, "h1", n.out[0][1]);
        csv_row(f, "tiny", "hidden", step, "w00", n.W[0][0]);
        csv_row(f, "tiny", "hidden", step, "w10", n.W[0][2]);
        csv_row(f, "tiny", "hidden", step, "loss", loss);
        csv_row(f, "tiny", "hidden", step, "spread", row_spread(&n, 0));
        if (step == 20) break;
        memset(n.grads, 0, n.num_params * sizeof(float));
        mlp_backward(&n, 1);
        opt_step(&n, &opt);
    }
    mlp_free(&n);
    // the same on a real task: digits, 64 -> 32 -> 32 -> 10, constant init against zeros and He
    data_split(&all, 360, o->seed, 1, &tr, &va);
    int w = o->width ? o->width : 32, steps = o->steps ? o->steps : 600;
    MLPConfig cfg = {.L = 3, .dims = {tr.d, w, w, all.k}, .act = A_RELU, .head = 1};
    const char* schemes[] = {"constant:0.05", "zeros", "kaiming_normal:relu"};
    for (int i = 0; i < 3; i++) {
        mlp_build(&n, &cfg, 64);
        mlp_init(&n, schemes[i], 0, o->seed);
        TrainSpec ts = {steps, 32, 0, 0.0f, 0.0f, lab_opt(o, 0.02f)};
        for (int chunk = 0; chunk <= steps; chunk += steps / 10) {
            csv_row(f, "digits", schemes[i], chunk, "spread_layer0", row_spread(&n, 0));
            csv_row(f, "digits", schemes[i], chunk, "spread_layer1", row_spread(&n, 1));
            double acc, loss = mlp_evaluate(&n, &va, &acc);
            csv_row(f, "digits", schemes[i], chunk, "val_loss", loss);
            csv_row(f, "digits", schemes[i], chunk, "val_acc", acc);
            if (chunk == steps) break;
            ts.steps = steps / 10;
            mlp_train(&n, &tr, &va, &ts, o->seed + 7 + chunk, NULL);
        }
        double acc;
        mlp_evaluate(&n, &va, &acc);
        printf("  %-20s val acc %.3f, layer-0 neuron spread %.3g\n", schemes[i], acc, row_spread(&n, 0));
        mlp_free(&n);
    }
    lab_data_end(f, &all, &tr, &va);
}

// ---- lab 6: the race ([InitGuide ch. 8]) --------------------------------------------------------------
// The runs that the page's verdicts rest on are repeated over -n seeds: every run at depth 4, He at
// every depth, Xavier at depth 32 and with tanh at depth 64, orthogonal at depth 64 (scheme index si:
// 0 zero, 1 N(0, 0.01), 2 Xavier, 3 He, 4 orthogonal). The others (zero and N(0, 0.01) deeper than 4,
// Xavier with ReLU at depth 64, orthogonal at depth 32) run at the first seed only: all seeds would
// double the lab's time.
static int race_seeded(Act act, int depth, int si) {
    if (depth == 4 || si == 3) return 1;
    if (si == 2) return depth == 32 || act == A_TANH;
    return si == 4 && depth == 64;
}

static void lab_race(const LabOptions* o) {
    Data all, tr, va;
    FILE* f = lab_data_begin(o, "digits", &all);
    data_split(&all, 360, o->seed, 1, &tr, &va);
    int w = o->width ? o->width : 64, steps = o->steps ? o->steps : 1500, every = 25, seeds = o->seeds ? o->seeds : 5;
    int depths[] = {4, 32, 64};
    Act acts[] = {A_RELU, A_TANH};
    float* curve = xmalloc((steps / every + 1) * sizeof(float));
    // seed s (series LABEL|ACT|DEPTH|sK): the weights from o->seed + 1000 s, the batch order from
    // o->seed + 1 + 1000 s, the same split; the loss curves of the first seed only
    const char* labels[] = {"zero", "normal0.01", "xavier", "he", "orthogonal"};
    double acc[2][3][5][64], loss[2][3][5][64];
    for (int s = 0; s < seeds; s++)
      for (int ai = 0; ai < 2; ai++) {
        // orthogonal with the activation's gain ([InitGuide ch. 4]: sqrt 2 for ReLU), He with ReLU's
        char orth[48];
        snprintf(orth, sizeof(orth), "orthogonal:%.9g", calculate_gain(act_names[acts[ai]], NAN));
        const char* schemes[] = {"zeros", "normal:0.01", "xavier_normal", "kaiming_normal:relu", orth};
        for (int di = 0; di < 3; di++) {
            MLPConfig cfg = {.L = depths[di], .act = acts[ai], .head = 1};
            cfg.dims[0] = tr.d;
            for (int l = 1; l < cfg.L; l++) cfg.dims[l] = w;
            cfg.dims[cfg.L] = all.k;
            for (int si = 0; si < 5; si++) {
                if (s > 0 && !race_seeded(acts[ai], depths[di], si)) continue;
                MLP n;
                mlp_build(&n, &cfg, 64);
                mlp_init(&n, schemes[si], 0, o->seed + 1000 * (uint64_t)s);
                // deep plain nets under SGD + momentum blow up on their first large gradients
                // (He at depth 32 went to NaN unclipped); clipping at norm 1 is the usual guard
                TrainSpec ts = {steps, 64, s ? 0 : every, 0.0f, 1.0f, lab_opt(o, 0.01f)};
                TrainResult r = mlp_train(&n, &tr, &va, &ts, o->seed + 1 + 1000 * (uint64_t)s, s ? NULL : curve);
                char series[64];
                snprintf(series, sizeof(series), "%s|%s|%d|s%d", labels[si], act_names[acts[ai]], depths[di], s);
                csv_result(f, "final", series, depths[di], &r, series, s ? NULL : curve, steps, every);
                printf("  %-30s train %.3f  val acc %.3f%s\n", series, r.train_loss, r.val_acc,
                       r.diverged_step >= 0 ? "  (diverged)" : "");
                acc[ai][di][si][s] = r.val_acc;
                loss[ai][di][si][s] = r.train_loss;
                mlp_free(&n);
            }
        }
      }
    for (int ai = 0; ai < 2; ai++)
        for (int di = 0; di < 3; di++)
            for (int si = 0; si < 5; si++) {
                if (!race_seeded(acts[ai], depths[di], si)) continue;
                char series[64];
                snprintf(series, sizeof(series), "%s|%s|%d", labels[si], act_names[acts[ai]], depths[di]);
                csv_spread(f, "final", series, depths[di], "val_acc", acc[ai][di][si], seeds);
                csv_spread(f, "final", series, depths[di], "train_loss", loss[ai][di][si], seeds);
            }
    free(curve);
    lab_data_end(f, &all, &tr, &va);
}

// ---- lab 7: the std sweep ([VarDyn E1]) ---------------------------------------------------------------
// Per sigma: the network at init (std of every layer's output, norm of every layer's weight gradient
// on one batch), then training; final losses and accuracy.
static void lab_sweep(const LabOptions* o) {
    Data all, tr, va;
    FILE* f = lab_data_begin(o, "mnist", &all);
    data_split(&all, 2000, o->seed, 0, &tr, &va);
    MLPConfig cfg = {.L = 4, .dims = {tr.d, 64, 32, 32, all.k}, .act = A_RELU, .head = 1};
    int steps = o->steps ? o->steps : 1250, seeds = o->seeds ? o->seeds : 3, every = 25, B = 64;
    float* curve = xmalloc((steps / every + 1) * sizeof(float));
    for (int s = 0; s < seeds; s++)
        for (int i = 0; i < 25; i++) {
            double sigma = pow(10.0, -4.0 + 5.0 * i / 24.0);
            char scheme[48], series[48];
            snprintf(scheme, sizeof(scheme), "normal:%.9g", sigma);
            snprintf(series, sizeof(series), "s%d", s);
            MLP n;
            mlp_build(&n, &cfg, B);
            mlp_init(&n, scheme, 0, o->seed + 1000 * s);
            // at init: one batch forward and backward
            float loss0 = mlp_forward(&n, tr.x, tr.y, B);
            for (int l = 0; l < cfg.L - 1; l++) {   // the hidden layers (the last one is the softmax)
                char metric[32];
                snprintf(metric, sizeof(metric), "init_std_L%d", l + 1);
                csv_row(f, "sweep", series, sigma, metric, stats_of(n.out[l], NULL, (long)B * cfg.dims[l + 1]).std);
            }
            memset(n.grads, 0, n.num_params * sizeof(float));
            if (isfinite(loss0)) mlp_backward(&n, B);
            for (int l = 0; l < cfg.L; l++) {
                char metric[32];
                snprintf(metric, sizeof(metric), "init_gradnorm_L%d", l + 1);
                long cnt = (long)cfg.dims[l] * cfg.dims[l + 1];
                csv_row(f, "sweep", series, sigma, metric, sqrt(mean_square(GRAD(&n, n.W[l]), cnt) * cnt));
            }
            csv_row(f, "sweep", series, sigma, "init_loss", loss0);
            TrainSpec ts = {steps, B, every, 0.0f, 0.0f, lab_opt(o, 0.01f)};
            TrainResult r = mlp_train(&n, &tr, &va, &ts, o->seed + 1 + 1000 * s, curve);
            char cs[64];
            snprintf(cs, sizeof(cs), "s%d|%.3g", s, sigma);
            csv_result(f, "sweep", series, sigma, &r, cs, curve, steps, every);
            printf("  sigma %-9.3g init loss %-10.4g final train %-8.4f val acc %.4f%s\n", sigma, loss0, r.train_loss,
                   r.val_acc, r.diverged_step >= 0 ? " (diverged)" : "");
            mlp_free(&n);
        }
    free(curve);
    lab_data_end(f, &all, &tr, &va);
}

// ---- lab 8: Xavier vs Kaiming, paired over seeds ([VarDyn E2]) ----------------------------------------
// [VarDyn E2]'s design, 10 paired seeds and a paired t-test, is one block; the lab runs XK_BLOCKS blocks,
// block b the whole experiment from the base seed o->seed + 1000 b (data split, weights, batch order),
// so that a verdict can say in how many blocks a difference is significant, and a paired t-test over
// all the blocks' pairs.
#define XK_BLOCKS 4
static void lab_xavier_kaiming(const LabOptions* o) {
    Data all, tr, va;
    FILE* f = lab_data_begin(o, "wine", &all);
    // UCI Wine Quality (11 features) is not shipped; the UCI wine table (13 features, 3 cultivars) is
    // the closest, made binary: cultivar 0 against the other two. Two-class softmax is the logistic loss.
    for (int i = 0; i < all.n; i++) all.y[i] = all.y[i] == 0;
    all.k = 2;
    int seeds = o->seeds ? o->seeds : 10, steps = o->steps ? o->steps : 300;
    float target = 0.05f;
    // [VarDyn E2] compares Xavier normal with Kaiming *uniform*; its contribution 3 says Kaiming
    // normal ([Errata 004-7]): both pairs are run
    const char* schemes[] = {"xavier_normal", "kaiming_uniform:relu", "kaiming_normal:relu"};
    const char* what[] = {"iters_to_target", "early_train_loss", "final_train_loss", "val_acc"};
    // per run: iterations to a training loss of 0.05, the loss after `early` steps and at the end,
    // the held-out accuracy; run s of block b at [b * seeds + s]
    int early = 50, N = XK_BLOCKS * seeds;
    static double hit[3][XK_BLOCKS * 64], ear[3][XK_BLOCKS * 64], fin[3][XK_BLOCKS * 64], acc[3][XK_BLOCKS * 64];
    double (*vals[4])[XK_BLOCKS * 64] = {hit, ear, fin, acc};
    double diffs[2][4][XK_BLOCKS];        // each block's mean difference
    float* curve = xmalloc((steps + 1) * sizeof(float));
    for (int b = 0; b < XK_BLOCKS; b++) {
        uint64_t base = o->seed + 1000 * (uint64_t)b;
        data_split(&all, 36, base, 1, &tr, &va);
        MLPConfig cfg = {.L = 4, .dims = {tr.d, 16, 32, 32, 2}, .act = A_RELU, .head = 1};
        for (int s = 0; s < seeds; s++)
            for (int i = 0; i < 3; i++) {
                MLP n;
                mlp_build(&n, &cfg, 64);
                mlp_init(&n, schemes[i], 0, base + 17 * s);
                TrainSpec ts = {steps, 16, 1, target, 0.0f, lab_opt(o, 0.01f)};
                TrainResult r = mlp_train(&n, &tr, &va, &ts, base + 1 + 17 * s, curve);
                // a run that never reaches the target counts as steps + 1 iterations (censored)
                int k = b * seeds + s;
                hit[i][k] = r.hit_step >= 0 ? r.hit_step : steps + 1;
                ear[i][k] = curve[early < steps ? early : steps];
                fin[i][k] = r.train_loss;
                acc[i][k] = r.val_acc;
                char series[64];
                snprintf(series, sizeof(series), "%s|b%d", schemes[i], b);
                for (int w = 0; w < 4; w++) csv_row(f, "runs", series, s, what[w], vals[w][i][k]);
                // the loss curves of the first block only
                snprintf(series, sizeof(series), "%s|%d", schemes[i], s);
                if (b == 0)
                    for (int t = 0; t <= steps; t += 5) csv_row(f, "curve", series, t, "train_loss", curve[t]);
                mlp_free(&n);
            }
        data_free(&tr); data_free(&va);
        for (int k = 1; k < 3; k++)
            for (int w = 0; w < 4; w++) {
                double md, t, p;
                paired_t(vals[w][0] + b * seeds, vals[w][k] + b * seeds, seeds, &md, &t, &p);
                diffs[k - 1][w][b] = md;
                char series[64];
                snprintf(series, sizeof(series), "xavier_normal-%s|b%d", schemes[k], b);
                csv_row(f, "ttest_mean_diff", series, seeds - 1, what[w], md);
                csv_row(f, "ttest_t", series, seeds - 1, what[w], t);
                csv_row(f, "ttest_p", series, seeds - 1, what[w], p);
                printf("  %-45s %-18s mean diff %-10.4g t = %-8.3f p = %.4g\n", series, what[w], md, t, p);
            }
    }
    // over the blocks: the spread of the blocks' mean differences, and one paired t-test on all N pairs
    for (int k = 1; k < 3; k++)
        for (int w = 0; w < 4; w++) {
            double md, t, p;
            char series[64];
            snprintf(series, sizeof(series), "xavier_normal-%s", schemes[k]);
            csv_spread(f, "blocks", series, XK_BLOCKS, what[w], diffs[k - 1][w], XK_BLOCKS);
            paired_t(vals[w][0], vals[w][k], N, &md, &t, &p);
            csv_row(f, "ttest_mean_diff", series, N - 1, what[w], md);
            csv_row(f, "ttest_t", series, N - 1, what[w], t);
            csv_row(f, "ttest_p", series, N - 1, what[w], p);
            printf("  %-45s %-18s mean diff %-10.4g t = %-8.3f p = %.4g (all %d pairs)\n", series, what[w], md, t, p, N);
        }
    free(curve);
    data_free(&all);
    fclose(f);
}

// ---- lab 9: activation gains ([Errata 001-7], [Errata 004-3]) -----------------------------------------
// c(q) = E[phi(sqrt(q) z)^2] / q and d(q) = E[phi'(sqrt(q) z)^2], z ~ N(0,1), by quadrature (the
// midpoint rule on z in [-12, 12], 24000 cells, through this code's own phi; 0 is a cell edge, so the
// ReLU step does not bias it) and by Monte Carlo (2^20 draws).
#define QUAD_N 24000
static void moments(Act a, double q, const double* zs, long n, const double* wts, double* c, double* d) {
    float *x = xmalloc(n * sizeof(float)), *y = xmalloc(n * sizeof(float)), *one = xmalloc(n * sizeof(float));
    for (long i = 0; i < n; i++) { x[i] = (float)(sqrt(q) * zs[i]); one[i] = 1.0f; }
    act_forward(a, y, x, n);
    double sc = 0.0, sd = 0.0;
    for (long i = 0; i < n; i++) sc += wts[i] * (double)y[i] * y[i];
    act_backward(a, y, x, one, n);
    for (long i = 0; i < n; i++) sd += wts[i] * (double)y[i] * y[i];
    *c = sc / q;
    *d = sd;
    free(x); free(y); free(one);
}

// c(q) of one activation on a grid of log10 q from QTAB_LO in steps of 0.1 (the quadrature above), and
// the map of one layer in the infinite-width limit, F(q) = g^2 q c(q): the q of layer l+1 that a layer
// at gain g gives a row whose pre-activations z (over the units) have second moment q.
#define QTAB_N 181
#define QTAB_LO (-12.0)
static double c_of(const double* ctab, double q) {
    double t = (log10(q) - QTAB_LO) * 10.0;
    if (!(t > 0.0)) return ctab[0];                  // also q = 0
    if (t >= QTAB_N - 1) return ctab[QTAB_N - 1];
    int k = (int)t;
    return ctab[k] + (t - k) * (ctab[k + 1] - ctab[k]);
}

// Per layer l of a stack: q_l = E[z_l^2] over the batch and the units (row "q"), and, from layer 2 on,
// q_l against two predictions from layer l-1: the mean field F(q_{l-1}), which treats the batch as one
// q, and the mean over the rows b of F(q_b), with q_b the second moment of row b alone. The two differ
// when the rows' q_b spread and F is curved (Jensen): for GELU and SiLU c rises with q and q c(q) is
// convex around q = 1, so the rows above the mean gain more than those below lose. The ratios
// q_l / F(q_{l-1}) and q_l / mean_b F(q_b), averaged over layers 2..depth, are the stack's drift rows
// (the arithmetic mean: given layer l-1, mean_b F(q_b) is the expected q_l in the infinite-width limit,
// and the ratio of a noisy q to its expectation has mean 1; the mean of its log is below 0).
typedef struct {
    FILE* f;
    const char* series;
    const double* ctab;           // c(q) of the activation (QTAB_N points)
    double g2;                    // the gain squared of layers 2..depth
    double *qrow, *keep;          // the rows' q_b of the last layer (batch); keep[l] = q_l
    double sum_mf, sum_rows;
} QLog;

static void hook_q(int l, const float* z, const float* h, const float* h0, int B, int d, void* ctx) {
    (void)h; (void)h0;
    QLog* s = ctx;
    if (!z) return;
    double q = mean_square(z, (long)B * d);
    csv_row(s->f, "stack", s->series, l, "q", q);
    s->keep[l] = q;
    if (l >= 2) {
        double qbar = s->keep[l - 1], rows = 0.0;
        for (int b = 0; b < B; b++) rows += s->g2 * s->qrow[b] * c_of(s->ctab, s->qrow[b]) / B;
        s->sum_mf += q / (s->g2 * qbar * c_of(s->ctab, qbar));
        s->sum_rows += q / rows;
    }
    for (int b = 0; b < B; b++) s->qrow[b] = mean_square(z + (long)b * d, d);
}

static void lab_gains(const LabOptions* o) {
    FILE* f = csv_open(o->out);
    Act acts[] = {A_RELU, A_GELU, A_SILU, A_TANH};
    double qs[] = {1e-4, 0.1, 0.5, 1, 2, 4, 10, 100};
    double* zq = xmalloc(QUAD_N * sizeof(double));
    double* wq = xmalloc(QUAD_N * sizeof(double));
    double hstep = 24.0 / QUAD_N;
    for (int i = 0; i < QUAD_N; i++) {
        zq[i] = -12.0 + (i + 0.5) * hstep;
        wq[i] = hstep * exp(-0.5 * zq[i] * zq[i]) / sqrt(2.0 * RNG_PI);
    }
    long nmc = 1L << 20;
    float* zmc = xmalloc(nmc * sizeof(float));
    double* zmcd = xmalloc(nmc * sizeof(double));
    double* wmc = xmalloc(nmc * sizeof(double));
    Rng g;
    rng_seed(&g, o->seed);
    init_normal(&g, zmc, nmc, 0.0f, 1.0f);
    for (long i = 0; i < nmc; i++) { zmcd[i] = zmc[i]; wmc[i] = 1.0 / nmc; }
    int width = o->width ? o->width : 512, depth = o->depth ? o->depth : 32, B = o->batch ? o->batch : 128;
    int seeds = o->seeds ? o->seeds : 5;
    if (depth < 2) fatal("gains: the stacks need at least 2 layers");
    double ctab[QTAB_N], *qrow = xmalloc(B * sizeof(double)), *qkeep = xmalloc((size_t)seeds * (depth + 1) * sizeof(double));
    for (int ai = 0; ai < 4; ai++) {
        double c1 = 0.0, d1 = 0.0;   // the quadrature's c(1), d(1)
        for (int qi = 0; qi < 8; qi++) {
            double cq, dq, cm, dm;
            moments(acts[ai], qs[qi], zq, QUAD_N, wq, &cq, &dq);
            if (qs[qi] == 1.0) { c1 = cq; d1 = dq; }
            moments(acts[ai], qs[qi], zmcd, nmc, wmc, &cm, &dm);
            csv_row(f, "quad", act_names[acts[ai]], qs[qi], "c", cq);
            csv_row(f, "quad", act_names[acts[ai]], qs[qi], "d", dq);
            csv_row(f, "mc", act_names[acts[ai]], qs[qi], "c", cm);
            csv_row(f, "mc", act_names[acts[ai]], qs[qi], "d", dm);
        }
        for (int k = 0; k < QTAB_N; k++) {
            double dq;
            moments(acts[ai], pow(10.0, QTAB_LO + 0.1 * k), zq, QUAD_N, wq, &ctab[k], &dq);
        }
        // 32-layer stacks, z_1 ~ N(0,1) (layer 1 at 1/fan_in), then layers 2..32 with gain g:
        // calculate_gain's value, sqrt 2 ([InitFP]'s "gain = 2.0" on the variance), and 1/sqrt(c(1)).
        // Each at -n seeds (default 5; the weights and the input from o->seed + 5 + 1000 s, series
        // ACT|GAIN|sK): q_l, the drift rows of hook_q, and over the seeds the mean, sd, min and max of q_l
        // and of the drifts (series ACT|GAIN) and how many seeds end above their q_1 (q_up).
        double gains[3] = {calculate_gain(act_names[acts[ai]], NAN), sqrt(2.0), 1.0 / sqrt(c1)};
        const char* gname[3] = {"calculate_gain", "sqrt2", "quadrature"};
        for (int gi = 0; gi < 3; gi++) {
            char series[64], seeded[80];
            snprintf(series, sizeof(series), "%s|%s", act_names[acts[ai]], gname[gi]);
            csv_row(f, "gain", series, 0, "gain", gains[gi]);
            double mf[64], rows[64];
            int up = 0;
            for (int s = 0; s < seeds; s++) {
                StackSpec sp = {width, depth, B, acts[ai], "lecun_normal", "lecun_normal", gains[gi],
                                o->seed + 5 + 1000 * (uint64_t)s};
                snprintf(seeded, sizeof(seeded), "%s|s%d", series, s);
                QLog ql = {f, seeded, ctab, gains[gi] * gains[gi], qrow, qkeep + (size_t)s * (depth + 1), 0.0, 0.0};
                stack_run(&sp, hook_q, &ql);
                mf[s] = ql.sum_mf / (depth - 1);
                rows[s] = ql.sum_rows / (depth - 1);
                csv_row(f, "stack", seeded, depth, "drift_meanfield", mf[s]);
                csv_row(f, "stack", seeded, depth, "drift_rows", rows[s]);
                up += ql.keep[depth] > ql.keep[1];
            }
            double v[64];
            for (int l = 1; l <= depth; l++) {
                for (int s = 0; s < seeds; s++) v[s] = qkeep[(size_t)s * (depth + 1) + l];
                csv_spread(f, "stack", series, l, "q", v, seeds);
            }
            csv_spread(f, "stack", series, depth, "drift_meanfield", mf, seeds);
            csv_spread(f, "stack", series, depth, "drift_rows", rows, seeds);
            csv_row(f, "stack", series, depth, "q_up", up);
        }
        printf("  %-6s c(1) = %.6f  d(1) = %.6f  calculate_gain = %.6f  1/sqrt(c(1)) = %.6f\n", act_names[acts[ai]], c1, d1,
               gains[0], gains[2]);
    }
    free(zq); free(wq); free(zmc); free(zmcd); free(wmc); free(qrow); free(qkeep);
    fclose(f);
}

// ---- lab 10: the diagnostics of a makemore-style course ([Makemore], [InitGuide ch. 2-3]) -------------
// A deep MLP on MNIST, 784 -> 100 x 5 -> 10 (-w the width, -l the hidden layers), tanh or GELU, trained
// with SGD (-O, -r: as the other labs) under three inits: N(0,1) (naive), N(0, 0.01^2) (too small), and Kaiming with the
// activation's gain, std = calculate_gain / sqrt(fan_in) ([InitGuide ch. 3]; 5/3 for tanh, [Makemore]'s
// choice, and 1.53 for GELU). What such a course looks at, per run:
//   (a) the loss at step 0 against ln 10, the loss of a uniform prediction, and the std of the logits;
//   (b) per hidden layer, histograms of the activations h_l and of their gradients dL/dh_l at the first
//       and the last step: DIAG_BINS bins over mean +- 4 std, as the trainer's hist probe (hist_of);
//   (c) the fraction of saturated units per hidden layer over time: slope phi'(z) below SAT_FRACTION of
//       the steepest slope of phi, the trainer's sat probe (doc/probes.md), and for tanh also [Makemore]'s
//       |h| > 0.97, i.e. slope 1 - h^2 < 0.059 (the two differ only for 0.97 < |h| < 0.9747);
//   (d) the update-to-data ratio of every weight matrix over time, log10(std(W_after - W_before) /
//       std(W_before)), [Makemore]'s ratio (the trainer's grad probe logs ||dW|| / ||W||, the same for a
//       zero-mean tensor), whose rule of thumb is about -3.
// (a), (c), (d) and the per-layer std are the mean and sd over -n seeds (default 5); the histograms are
// the first seed's.
#define DIAG_BINS 40          // as the trainer's hist probe (HIST_BINS is lab 2's 60 from there on)
#define DIAG_RECORDS 21       // points of each curve over time
#define TANH_SAT_ABS 0.97f    // [Makemore]: a tanh unit with |h| > 0.97 is saturated

typedef struct {              // one seed's numbers (doubles only: csv_mean_sd steps through an array of them)
    double loss0, logit_std, train_loss, val_acc;
    double sat_slope[DIAG_RECORDS][MAX_LAYERS], sat_abs[DIAG_RECORDS][MAX_LAYERS], ud[DIAG_RECORDS][MAX_LAYERS];
    double act_std[2][MAX_LAYERS], grad_std[2][MAX_LAYERS];      // at the first and the last step
} DiagSeed;

typedef struct {
    DiagSeed* d;
    int steps, every;
    float *ones, *slope, *wprev;  // B x width ones and slopes; a copy of every weight matrix
    FILE* f;                      // where the histograms go (the first seed only; else NULL)
    const char* series;
} DiagLog;

// The curves over time are recorded at steps 0, every, 2 every, ... before the last step (at most
// DIAG_RECORDS - 1 of them) and at the last step: how many records, a step's record (-1: none), a record's step.
static int diag_records(int steps, int every) {
    int k = (steps - 2) / every + 1;
    return (k < DIAG_RECORDS - 1 ? k : DIAG_RECORDS - 1) + 1;
}
static int diag_record(int step, int steps, int every) {
    int R = diag_records(steps, every);
    if (step == steps - 1) return R - 1;
    return step % every == 0 && step / every < R - 1 ? step / every : -1;
}
static int diag_step(int k, int steps, int every) { return k == diag_records(steps, every) - 1 ? steps - 1 : k * every; }

// The fraction of n units that are saturated: *slope_frac by the sat probe's test |phi'(z)| < SAT_FRACTION
// x the steepest slope of phi (tanh: 1, at 0; GELU: GELU_MAX_SLOPE), *abs_frac by [Makemore]'s |h| > 0.97
// (tanh; NAN for GELU). ones: n ones; tmp: n floats.
static void sat_fractions(Act a, const float* z, const float* h, long n, const float* ones, float* tmp,
                          double* slope_frac, double* abs_frac) {
    if (a != A_TANH && a != A_GELU) fatal("sat_fractions: tanh or gelu, not %s", act_names[a]);
    act_backward(a, tmp, z, ones, n);          // phi'(z)
    double below = SAT_FRACTION * (a == A_GELU ? GELU_MAX_SLOPE : 1.0);
    long flat = 0, out = 0;
    for (long i = 0; i < n; i++) {
        flat += fabsf(tmp[i]) < below;
        out += fabsf(h[i]) > TANH_SAT_ABS;
    }
    *slope_frac = (double)flat / n;
    *abs_frac = a == A_TANH ? (double)out / n : NAN;
}

// [Makemore]'s update-to-data ratio of one tensor: std(after - before) / std(before)
static double update_ratio(const float* after, const float* before, long n) {
    return stats_of(after, before, n).std / stats_of(before, NULL, n).std;
}

// WHAT's histogram of layer l: the fraction of the n values in each bin, the range, the NaN and inf
static void diag_hist(FILE* f, const char* series, int l, const char* what, const float* x, long n) {
    long counts[DIAG_BINS], nonfinite;
    double lo, width;
    hist_of(x, n, DIAG_BINS, counts, &lo, &width, &nonfinite);
    char s[96], m[48];
    snprintf(s, sizeof(s), "%s|L%d", series, l);
    for (int b = 0; b < DIAG_BINS; b++) csv_row(f, "hist", s, b, what, (double)counts[b] / n);
    snprintf(m, sizeof(m), "%s_lo", what);
    csv_row(f, "hist_range", s, 0, m, lo);
    snprintf(m, sizeof(m), "%s_width", what);
    csv_row(f, "hist_range", s, 0, m, width);
    snprintf(m, sizeof(m), "%s_nonfinite", what);
    csv_row(f, "hist_range", s, 0, m, nonfinite);
}

static void diag_hook(MLP* n, int step, int B, int after, void* ctx) {
    DiagLog* g = ctx;
    const MLPConfig* c = &n->cfg;
    int k = diag_record(step, g->steps, g->every);
    if (k < 0) return;
    size_t off = 0;
    for (int l = 0; l < c->L; l++) {           // before the update: keep W; after: the ratio
        long cnt = (long)c->dims[l] * c->dims[l + 1];
        if (after) g->d->ud[k][l] = log10(update_ratio(n->W[l], g->wprev + off, cnt));
        else memcpy(g->wprev + off, n->W[l], cnt * sizeof(float));
        off += cnt;
    }
    if (after) return;
    int end = step == g->steps - 1;
    for (int l = 0; l < c->L - 1; l++) {       // the hidden layers
        long N = (long)B * c->dims[l + 1];
        sat_fractions(c->act, n->z[l], n->out[l], N, g->ones, g->slope, &g->d->sat_slope[k][l], &g->d->sat_abs[k][l]);
        if (step != 0 && !end) continue;
        g->d->act_std[end][l] = stats_of(n->out[l], NULL, N).std;
        g->d->grad_std[end][l] = stats_of(n->dout_kept[l], NULL, N).std;
        if (!g->f) continue;
        diag_hist(g->f, g->series, l + 1, end ? "act_end" : "act0", n->out[l], N);
        diag_hist(g->f, g->series, l + 1, end ? "grad_end" : "grad0", n->dout_kept[l], N);
    }
}

// The rows METRIC (the mean over n seeds of v[0], v[stride], ...) and METRIC_sd (their sample sd)
static void csv_mean_sd(FILE* f, const char* section, const char* series, double x, const char* metric,
                        const double* v, size_t stride, int n) {
    Spread sp = spread_of(v, stride, n);
    char sd[64];
    snprintf(sd, sizeof(sd), "%s_sd", metric);
    csv_row(f, section, series, x, metric, sp.mean);
    csv_row(f, section, series, x, sd, sp.sd);
}

static void lab_diag(const LabOptions* o) {
    Data all, tr, va;
    FILE* f = lab_data_begin(o, "mnist", &all);
    data_split(&all, 2000, o->seed, 0, &tr, &va);
    int w = o->width ? o->width : 100, hidden = o->depth ? o->depth : 5, B = o->batch ? o->batch : 64;
    int steps = o->steps ? o->steps : 300, seeds = o->seeds ? o->seeds : 5, E = 1000;   // E: rows of the check at init
    int every = steps / (DIAG_RECORDS - 1) > 0 ? steps / (DIAG_RECORDS - 1) : 1, R = diag_records(steps, every);
    MLPConfig cfg = {.L = hidden + 1, .head = 1};
    if (cfg.L > MAX_LAYERS) fatal("diag: at most %d hidden layers", MAX_LAYERS - 1);
    cfg.dims[0] = tr.d;
    for (int l = 1; l <= hidden; l++) cfg.dims[l] = w;
    cfg.dims[cfg.L] = all.k;
    size_t nw = 0;
    for (int l = 0; l < cfg.L; l++) nw += (size_t)cfg.dims[l] * cfg.dims[l + 1];
    float *ones = xmalloc((size_t)B * w * sizeof(float)), *slope = xmalloc((size_t)B * w * sizeof(float));
    float *wprev = xmalloc(nw * sizeof(float)), *dh = xmalloc((size_t)hidden * B * w * sizeof(float));
    for (long i = 0; i < (long)B * w; i++) ones[i] = 1.0f;
    DiagSeed* ds = xmalloc(seeds * sizeof(DiagSeed));
    const size_t st = sizeof(DiagSeed) / sizeof(double);
    Opt opt = lab_opt(o, 0.01f);
    const char* cname[] = {"width", "hidden", "batch", "steps", "seeds", "lr", "adam"};
    double cval[] = {w, hidden, B, steps, seeds, opt.lr, opt.adam};
    for (int i = 0; i < 7; i++) csv_row(f, "config", "diag", 0, cname[i], cval[i]);    // for the page
    Act acts[2] = {A_TANH, A_GELU};
    const char* labels[3] = {"naive", "small", "kaiming"};
    for (int ai = 0; ai < 2; ai++) {
        char kaiming[48];
        snprintf(kaiming, sizeof(kaiming), "kaiming_normal:%s", act_names[acts[ai]]);
        const char* schemes[3] = {"normal:1", "normal:0.01", kaiming};
        cfg.act = acts[ai];
        for (int si = 0; si < 3; si++) {
            char series[64];
            snprintf(series, sizeof(series), "%s|%s", act_names[acts[ai]], labels[si]);
            int diverged = 0;
            for (int s = 0; s < seeds; s++) {
                DiagSeed* d = &ds[s];
                for (size_t i = 0; i < st; i++) ((double*)d)[i] = NAN;   // a diverged run leaves its records NaN
                MLP n;
                mlp_build(&n, &cfg, B > E ? B : E);
                for (int l = 0; l < hidden; l++) n.dout_kept[l] = dh + (size_t)l * B * w;
                mlp_init(&n, schemes[si], 0, o->seed + 1000 * s);
                // (a) at init, on E training rows: the logits (a forward without targets keeps them), the loss
                mlp_forward(&n, tr.x, NULL, E);
                d->logit_std = stats_of(n.out[cfg.L - 1], NULL, (long)E * all.k).std;
                d->loss0 = mlp_forward(&n, tr.x, tr.y, E);
                DiagLog g = {d, steps, every, ones, slope, wprev, s == 0 ? f : NULL, series};
                TrainSpec ts = {steps, B, 0, 0.0f, 0.0f, opt};      // a fresh optimizer state (t = 0)
                TrainResult r = mlp_train_hooked(&n, &tr, &va, &ts, o->seed + 1 + 1000 * s, NULL, diag_hook, &g);
                d->train_loss = r.train_loss;
                d->val_acc = r.val_acc;
                diverged += r.diverged_step >= 0;
                mlp_free(&n);
            }
            csv_mean_sd(f, "init", series, 0, "loss0", &ds->loss0, st, seeds);
            csv_mean_sd(f, "init", series, 0, "logit_std", &ds->logit_std, st, seeds);
            csv_mean_sd(f, "final", series, steps, "train_loss", &ds->train_loss, st, seeds);
            csv_mean_sd(f, "final", series, steps, "val_acc", &ds->val_acc, st, seeds);
            csv_row(f, "final", series, steps, "diverged", diverged);
            for (int l = 0; l < hidden; l++) {
                csv_mean_sd(f, "layer", series, l + 1, "act_std0", &ds->act_std[0][l], st, seeds);
                csv_mean_sd(f, "layer", series, l + 1, "act_std_end", &ds->act_std[1][l], st, seeds);
                csv_mean_sd(f, "layer", series, l + 1, "grad_std0", &ds->grad_std[0][l], st, seeds);
                csv_mean_sd(f, "layer", series, l + 1, "grad_std_end", &ds->grad_std[1][l], st, seeds);
            }
            for (int l = 0; l < cfg.L; l++) {
                char sl[80], sw[80];
                snprintf(sl, sizeof(sl), "%s|L%d", series, l + 1);
                snprintf(sw, sizeof(sw), "%s|W%d", series, l + 1);
                for (int k = 0; k < R; k++) {
                    int x = diag_step(k, steps, every);
                    if (l < hidden) {
                        csv_mean_sd(f, "sat", sl, x, "slope", &ds->sat_slope[k][l], st, seeds);
                        if (acts[ai] == A_TANH) csv_mean_sd(f, "sat", sl, x, "abs97", &ds->sat_abs[k][l], st, seeds);
                    }
                    csv_mean_sd(f, "ud", sw, x, "log10_ratio", &ds->ud[k][l], st, seeds);
                }
            }
            double l0 = 0.0, acc = 0.0, sat = 0.0, ud = 0.0;
            for (int s = 0; s < seeds; s++) {
                l0 += ds[s].loss0 / seeds;
                acc += ds[s].val_acc / seeds;
                sat += ds[s].sat_slope[0][hidden / 2] / seeds;
                ud += ds[s].ud[R - 1][hidden / 2] / seeds;
            }
            printf("  %-13s loss at step 0 %-9.4g (ln 10 = 2.303)  layer %d: saturated %.3f at step 0, "
                   "log10 update ratio %.2f at the end  val acc %.3f  diverged %d of %d\n", series, l0, hidden / 2 + 1,
                   sat, ud, acc, diverged, seeds);
        }
    }
    free(ones); free(slope); free(wprev); free(dh); free(ds);
    lab_data_end(f, &all, &tr, &va);
}

// ============================================================================================
// 8. The sources' worked examples, recomputed with this code (dev/labs/mlp_lab worked)
// ============================================================================================

// A number as the text prints it: v with as many decimals as the text's string has.
static int prints_as(double v, const char* text) {
    const char* dot = strchr(text, '.');
    char buf[64];
    snprintf(buf, sizeof(buf), "%.*f", dot ? (int)strlen(dot + 1) : 0, v);
    return strcmp(buf, text) == 0;
}

// ---- [InitGuide ch. 0] the hand-traced network: 3 layers of 2 neurons, no bias, ReLU after each -------
// z_l = W_l h_{l-1}, h_l = relu(z_l). The text's copy does not show the input; x = [1, 0.5] is the only
// input with W_1 x = [0.2, 1.05] ([Errata 002-2]). Its printed numbers, [layer][z, relu(z)][neuron]; z_3
// is not shown either, and equals relu(z_3) as both entries are positive ([Errata 002-2]).
static const float trace_x[2] = {1.0f, 0.5f};
static const float trace_W[3][4] = {{0.8f, -1.2f, 0.5f, 1.1f}, {1.5f, -0.3f, 0.9f, 1.8f}, {1.3f, 0.7f, -0.4f, 1.6f}};
static const char* trace_text[3][2][2] = {
    {{"0.2", "1.05"}, {"0.2", "1.05"}},
    {{"-0.015", "2.07"}, {"0", "2.07"}},
    {{"1.449", "3.312"}, {"1.449", "3.312"}},
};

// The text's network as an MLP of this file (ReLU after the last layer too: no head), run on x:
// n->z[l] and n->out[l] hold z_{l+1} and h_{l+1}.
static void handtrace_forward(MLP* n) {
    MLPConfig c = {.L = 3, .dims = {2, 2, 2, 2}, .act = A_RELU};
    mlp_build(n, &c, 1);
    mlp_init(n, "zeros", 0, 0);
    for (int l = 0; l < 3; l++) memcpy(n->W[l], trace_W[l], sizeof(trace_W[l]));
    mlp_forward(n, trace_x, NULL, 1);
}

// ---- [InitGuide ch. 4] orthogonal init of a 2 x 2 matrix: QR of a random A, signs fixed ---------------
// The text's A has columns a1 = [0.3, 1.2], a2 = [-0.8, 0.5]; Gram-Schmidt gives Q with columns
// q1 = [0.243, 0.970], q2 = [-0.970, 0.243] (its check table calls them rows 1 and 2: for a square Q
// both Q^T Q = I and Q Q^T = I hold, [Errata 002-17]). Its "0.243(-0.970) + 0.970(0.243) = -0.236 +
// 0.236" multiplies the rounded entries; unrounded, each product is 0.2353. Q [1, 0] = q1, of norm 1.
static const float ortho_A[4] = {0.3f, -0.8f, 1.2f, 0.5f};          // row-major
static const char* ortho_Q_text[4] = {"0.243", "-0.970", "0.970", "0.243"};

// mt19937's output tempering, undone: the state word that rng_u32 turns into y.
static uint32_t untemper(uint32_t y) {
    y ^= y >> 18;                                    // these two undo themselves: the bits they read
    y ^= (y << 15) & 0xefc60000u;                    // are ones they leave alone
    uint32_t x = y;
    for (int i = 0; i < 5; i++) x = y ^ ((x << 7) & 0x9d2c5680u);   // 7 more bits right per round
    y = x;
    for (int i = 0; i < 3; i++) x = y ^ (x >> 11);
    return x;
}

// Sets g so that its next n (even) scalar normal_ draws, the n < 16 path of init_normal_d, are z[]:
// rng_normal_f64 returns r cos t, then r sin t, from u1 = t / 2pi and u2 = 1 - exp(-r^2 / 2), each
// uniform the low 53 bits of a random64() made of two 32-bit draws. Lets a text's "random" matrix go
// through init_orthogonal: the QR, the sign fix and the gain are then this project's own.
static void rng_prime_normals(Rng* g, const float* z, int n) {
    if (n % 2 || 2 * n > RNG_MT_N) fatal("rng_prime_normals: %d draws", n);
    g->mti = 0;
    g->has_next_normal = 0;
    for (int i = 0; i < n; i += 2) {
        double r = hypot(z[i], z[i + 1]), t = atan2(z[i + 1], z[i]);
        double u[2] = {(t < 0.0 ? t + 2.0 * RNG_PI : t) / (2.0 * RNG_PI), -expm1(-0.5 * r * r)};
        for (int k = 0; k < 2; k++) {
            uint64_t m = (uint64_t)llround(u[k] * 9007199254740992.0) & ((1ull << 53) - 1);
            g->mt[2 * i + 2 * k] = untemper((uint32_t)(m >> 32));
            g->mt[2 * i + 2 * k + 1] = untemper((uint32_t)m);
        }
    }
}

// init_orthogonal on the text's A, with a gain: A itself in *a (the draws), Q in q
static void worked_orthogonal(float* a, float* q, float gain) {
    Rng g;
    rng_seed(&g, 0);
    rng_prime_normals(&g, ortho_A, 4);
    Rng g2 = g;
    init_normal_d(&g2, a, 4, 0.0, 1.0);
    init_orthogonal(&g, q, 2, 2, gain);
}

// ---- [InitFP §1.3] depth sensitivity: Var(x_80) / Var(x_0) = alpha^80 ---------------------------------
// A layer multiplies the variance by alpha = n Var(W); the text: alpha = 1.01 gives "2.2x", 1.1 a value
// missing from the copy, 2 "far beyond any floating point format". Wrong for 2 ([Errata 001-3]): 2^80 =
// 1.2089e24, which fp32 holds (max 3.4028e38); only fp16 (max 65504) and fp8 overflow, and alpha^80
// passes fp32's max only for alpha > 3.03. The product in fp32, as a network would carry it:
static float variance_after_layers(float alpha, int layers) {
    float v = 1.0f;
    for (int l = 0; l < layers; l++) v *= alpha;
    return v;
}

static void worked_examples(void) {
    MLP n;
    handtrace_forward(&n);
    printf("[InitGuide ch. 0] hand trace, x = [1, 0.5] (not shown in the text; [Errata 002-2])\n"
           "layer  z = W h (this code)  text            relu(z) (this code)  text\n");
    for (int l = 0; l < 3; l++) {
        const float *z = n.z[l], *h = n.out[l];
        const char* (*t)[2] = trace_text[l];
        char cz[48], ch[48], tz[48], th[48];
        snprintf(cz, sizeof(cz), "%.6g, %.6g", z[0], z[1]);
        snprintf(ch, sizeof(ch), "%.6g, %.6g", h[0], h[1]);
        snprintf(tz, sizeof(tz), "%s, %s", t[0][0], t[0][1]);
        snprintf(th, sizeof(th), "%s, %s", t[1][0], t[1][1]);
        printf("%-6d %-20s %-15s %-20s %s\n", l + 1, cz, tz, ch, th);
    }
    const float* h3 = n.out[2];
    printf("(the text prints relu(z_3) only; z_3 is the same, [Errata 002-2])\n"
           "||h3|| / ||x|| = %.4g (\"tripled\"). The first neuron of layer 2 is off for this input, not dead; and\n"
           "with fan_in 2, He's Var(W) = 2/2 = 1: N(0,1) preserves the variance here ([Errata 002-2])\n",
           hypot(h3[0], h3[1]) / hypot(trace_x[0], trace_x[1]));
    mlp_free(&n);

    float a[4], q[4], qx[2], qg[4], qgx[2], e0[2] = {1.0f, 0.0f};
    worked_orthogonal(a, q, 1.0f);
    worked_orthogonal(a, qg, (float)calculate_gain("relu", NAN));
    matmul_forward(qx, e0, q, NULL, 1, 2, 2);
    matmul_forward(qgx, e0, qg, NULL, 1, 2, 2);
    printf("\n[InitGuide ch. 4] orthogonal 2 x 2: A = [[%g, %g], [%g, %g]] through init_orthogonal\n"
           "Q = [[%.6f, %.6f], [%.6f, %.6f]]   text: [[%s, %s], [%s, %s]]\n"
           "Q [1, 0] = [%.3f, %.3f], norm %.6f; with gain sqrt 2 the norm is %.6f\n",
           a[0], a[1], a[2], a[3], q[0], q[1], q[2], q[3], ortho_Q_text[0], ortho_Q_text[1], ortho_Q_text[2],
           ortho_Q_text[3], qx[0], qx[1], hypot(qx[0], qx[1]), hypot(qgx[0], qgx[1]));

    printf("\n[InitFP §1.3] alpha^80 in fp32: 1.01 -> %.4f, 1.1 -> %.1f, 2 -> %.4e, finite (fp32 max %.4e;\n"
           "only fp16, max 65504, overflows: [Errata 001-3])\n",
           variance_after_layers(1.01f, 80), variance_after_layers(1.1f, 80), variance_after_layers(2.0f, 80), FLT_MAX);
}

// ============================================================================================
// 9. Self-test: backward passes against finite differences, the t distribution, the worked examples
// ============================================================================================

static int st_pass, st_fail;
static void st_check(int ok, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    ok ? st_pass++ : st_fail++;
}

// Which side of 0 every pre-activation of the last forward is on, hashed: a finite difference across a
// ReLU kink measures the jump, not the derivative, so such parameters are skipped (and counted).
static uint64_t kink_signature(const MLP* n, int B) {
    uint64_t h = 1469598103934665603ull;
    if (n->cfg.act != A_RELU && n->cfg.act != A_LEAKY) return h;
    for (int l = 0; l < n->cfg.L; l++)
        if (has_act(&n->cfg, l) || is_block(&n->cfg, l))
            for (long i = 0; i < (long)B * n->cfg.dims[l + 1]; i++) h = (h ^ (uint64_t)(n->z[l][i] > 0.0f)) * 1099511628211ull;
    return h;
}

// Every parameter's gradient of one small MLP against (L(p + e) - L(p - e)) / 2e, from float forwards:
// pass when |fd - grad| <= 1e-4 + 2e-2 |fd|. Biases and norm parameters are randomized first so that
// their gradients are not those of the special initial values.
static void fd_check(const MLPConfig* cfg, const char* what) {
    int B = 5;
    MLP n;
    mlp_build(&n, cfg, B);
    mlp_init(&n, "xavier_normal", cfg->residual, 11);
    Rng g;
    rng_seed(&g, 12);
    float* noise = xmalloc(n.num_params * sizeof(float));
    init_normal(&g, noise, n.num_params, 0.0f, 0.3f);
    for (int l = 0; l < cfg->L; l++) {
        for (int i = 0; i < cfg->dims[l + 1]; i++) n.b[l][i] += noise[i];
        if (n.c[l]) for (int i = 0; i < cfg->dims[l + 1]; i++) n.c[l][i] += noise[i + 1];
        if (n.gn[l]) for (int i = 0; i < cfg->dims[l]; i++) n.gn[l][i] += noise[i + 2];
        if (n.bn[l]) for (int i = 0; i < cfg->dims[l]; i++) n.bn[l][i] += noise[i + 3];
    }
    float* x = xmalloc((size_t)B * cfg->dims[0] * sizeof(float));
    init_normal(&g, x, (size_t)B * cfg->dims[0], 0.0f, 1.0f);
    int y[5] = {0, 2, 1, 2, 0};
    mlp_forward(&n, x, y, B);
    memset(n.grads, 0, n.num_params * sizeof(float));
    mlp_backward(&n, B);
    double worst = 0.0;
    size_t bad = 0, skipped = 0;
    const float eps = 2e-3f;
    for (size_t i = 0; i < n.num_params; i++) {
        float keep = n.params[i];
        n.params[i] = keep + eps;
        double lp = mlp_forward(&n, x, y, B);
        uint64_t sp = kink_signature(&n, B);
        n.params[i] = keep - eps;
        double lm = mlp_forward(&n, x, y, B);
        uint64_t sm = kink_signature(&n, B);
        n.params[i] = keep;
        if (sp != sm) { skipped++; continue; }
        double fd = (lp - lm) / (2.0 * eps), err = fabs(fd - n.grads[i]);
        if (err / (1e-4 + 2e-2 * fabs(fd)) > worst) worst = err / (1e-4 + 2e-2 * fabs(fd));
        bad += err > 1e-4 + 2e-2 * fabs(fd);
    }
    st_check(bad == 0 && skipped * 10 < n.num_params, "%-40s %zu parameters (%zu across a kink), worst error %.2f of tolerance",
             what, n.num_params, skipped, worst);
    free(noise); free(x);
    mlp_free(&n);
}

// ---- the worked examples against the texts' numbers ---------------------------------------------------
// [InitGuide ch. 0]: every z_l and relu(z_l) of the hand trace prints as the text's number
static void selftest_handtrace(void) {
    MLP n;
    handtrace_forward(&n);
    for (int l = 0; l < 3; l++) {
        const float *z = n.z[l], *h = n.out[l];
        const char* (*t)[2] = trace_text[l];
        int ok = 1;
        for (int j = 0; j < 2; j++) ok &= prints_as(z[j], t[0][j]) && prints_as(h[j], t[1][j]);
        st_check(ok, "[InitGuide ch. 0] hand trace, layer %d: z = [%g, %g], relu = [%g, %g] (text [%s, %s], [%s, %s])",
                 l + 1, z[0], z[1], h[0], h[1], t[0][0], t[0][1], t[1][0], t[1][1]);
    }
    mlp_free(&n);
}

// [InitGuide ch. 4]: init_orthogonal turns the text's A into its Q. Householder's R has a negative
// diagonal here (R_11 = -||a1||), so without the sign fix the first column would come out negated.
static void selftest_orthogonal_2x2(void) {
    float a[4], q[4], qg[4], qx[2], qgx[2], e0[2] = {1.0f, 0.0f};
    worked_orthogonal(a, q, 1.0f);
    worked_orthogonal(a, qg, (float)calculate_gain("relu", NAN));
    st_check(memcmp(a, ortho_A, sizeof(a)) == 0,
             "[InitGuide ch. 4] the primed generator draws the text's A = [[%g, %g], [%g, %g]]", a[0], a[1], a[2], a[3]);
    int ok = 1;
    for (int i = 0; i < 4; i++) ok &= prints_as(q[i], ortho_Q_text[i]);
    // [Errata fact 32], to 6 decimals: q1 = [0.242536, 0.970143], q2 = [-0.970143, 0.242536]
    const double q6[4] = {0.242536, -0.970143, 0.970143, 0.242536};
    double worst = 0.0, orth = 0.0;
    for (int i = 0; i < 4; i++) worst = fmax(worst, fabs(q[i] - q6[i]));
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) orth = fmax(orth, fabs((double)q[i] * q[j] + (double)q[2 + i] * q[2 + j] - (i == j)));
    st_check(ok && worst < 1e-6,
             "[InitGuide ch. 4] Q = [[%.6f, %.6f], [%.6f, %.6f]] (text to 3 decimals, [Errata fact 32] to 6)", q[0], q[1],
             q[2], q[3]);
    st_check(orth < 1e-6, "[InitGuide ch. 4] Q^T Q = I: largest deviation %.2g", orth);
    matmul_forward(qx, e0, q, NULL, 1, 2, 2);
    matmul_forward(qgx, e0, qg, NULL, 1, 2, 2);
    st_check(prints_as(qx[0], "0.243") && prints_as(qx[1], "0.970") && fabs(hypot(qx[0], qx[1]) - 1.0) < 1e-6 &&
                 fabs(hypot(qgx[0], qgx[1]) - 1.41421356) < 1e-6,
             "[InitGuide ch. 4] Q [1, 0] = [%.3f, %.3f], norm %.7f (text 1); gain sqrt 2: norm %.7f (text sqrt 2)",
             qx[0], qx[1], hypot(qx[0], qx[1]), hypot(qgx[0], qgx[1]));
}

// [InitFP §1.3] with [Errata 001-3]'s values ([Errata fact 9]): 1.01^80 = 2.2167 (the text's "2.2x"),
// 1.1^80 = 2048.4, 2^80 = 1.2089e24 < fp32 max; alpha^80 overflows fp32 between 3.03 and 3.04
static void selftest_depth_sensitivity(void) {
    float v1 = variance_after_layers(1.01f, 80), v2 = variance_after_layers(1.1f, 80), v3 = variance_after_layers(2.0f, 80);
    st_check(prints_as(v1, "2.2") && fabs(v1 - 2.2167) < 5e-5, "[InitFP §1.3] 1.01^80 = %.5f ([Errata 001-3]: 2.2167)", v1);
    st_check(fabs(v2 - 2048.4) < 0.05, "[InitFP §1.3] 1.1^80 = %.2f ([Errata 001-3]: 2048.4)", v2);
    st_check(isfinite(v3) && fabs(v3 / 1.2089e24 - 1.0) < 5e-5 && v3 > 65504.0f,
             "[InitFP §1.3] 2^80 = %.5g in fp32: finite, above fp16's 65504 ([Errata 001-3]: 1.2089e24)", v3);
    float a = variance_after_layers(3.03f, 80), b = variance_after_layers(3.04f, 80);
    st_check(isfinite(a) && isinf(b), "[InitFP §1.3] fp32 overflows only for alpha > 3.03: 3.03^80 = %.4g, 3.04^80 = %g", a,
             b);
}

// ---- the backward signal of the deep stacks -----------------------------------------------------------
typedef struct { int depth; float *h0, *top, *g, *dh0; double ms[8]; } GradProbe;   // depth <= 7

static void probe_layers(int l, const float* z, const float* h, const float* h0, int B, int d, void* ctx) {
    (void)z; (void)h0;
    GradProbe* p = ctx;
    if (l == 0) memcpy(p->h0, h, (size_t)B * d * sizeof(float));
    if (l == p->depth) memcpy(p->top, h, (size_t)B * d * sizeof(float));
}

static void probe_grads(int l, const float* dh, int B, int d, void* ctx) {
    GradProbe* p = ctx;
    if (l == p->depth) memcpy(p->g, dh, (size_t)B * d * sizeof(float));
    if (l == 0) memcpy(p->dh0, dh, (size_t)B * d * sizeof(float));
    p->ms[l] = mean_square(dh, (long)B * d);
}

static void selftest_stack_grad(void) {
    enum { D = 4, B = 2, N = B * D };
    float h0[N], top[N], g[N], dh0[N], x[N], seen[N];
    // dL/dh_0 of a tanh stack with its own first layer and a gain, against centred differences of
    // L(x) = sum(g * h_3(x)): pass when |fd - grad| <= 1e-4 + 1e-2 |fd|
    StackSpec sp = {D, 3, B, A_TANH, "xavier_normal", "normal:0.7", 1.3, 5};
    GradProbe p = {3, h0, top, g, dh0, {0}};
    stack_run_grad(&sp, NULL, probe_layers, probe_grads, &p);
    const float eps = 1e-2f;
    double worst = 0.0;
    p.h0 = seen;                      // the perturbed runs must not overwrite h0
    for (int i = 0; i < N; i++) {
        double L[2];
        for (int s = 0; s < 2; s++) {
            memcpy(x, h0, sizeof(x));
            x[i] += s ? -eps : eps;
            stack_run_grad(&sp, x, probe_layers, NULL, &p);
            L[s] = 0.0;
            for (int j = 0; j < N; j++) L[s] += (double)g[j] * top[j];
        }
        double fd = (L[0] - L[1]) / (2.0 * eps);
        worst = fmax(worst, fabs(fd - dh0[i]) / (1e-4 + 1e-2 * fabs(fd)));
    }
    st_check(worst <= 1.0, "%-40s worst error %.2f of tolerance", "backward signal of a tanh stack (fd)", worst);
    // A linear stack of orthogonal matrices: W^T preserves norms exactly, so ||dL/dh_l|| = ||g|| times the
    // gain of every layer above l that has one (layers 2..depth, [InitGuide ch. 4])
    enum { D2 = 8, B2 = 3, N2 = B2 * D2 };
    float h02[N2], top2[N2], g2[N2], dh02[N2];
    StackSpec so = {D2, 5, B2, A_IDENTITY, "orthogonal", NULL, 1.1, 9};
    GradProbe q = {5, h02, top2, g2, dh02, {0}};
    stack_run_grad(&so, NULL, probe_layers, probe_grads, &q);
    double worst_rel = 0.0;
    for (int l = 0; l <= 5; l++) {
        double want = q.ms[5] * pow(1.21, 5 - (l > 1 ? l : 1));
        worst_rel = fmax(worst_rel, fabs(q.ms[l] / want - 1.0));
    }
    st_check(worst_rel < 1e-5, "backward signal of an orthogonal linear stack: E[(dL/dh_l)^2] = 1.21^(layers above) E[g^2], "
             "worst relative error %.2g", worst_rel);
}

// ---- the diagnostics of lab diag ----------------------------------------------------------------------
static void selftest_diag(void) {
    // saturation of a hand-made layer. tanh: |h| > 0.97 from |z| = 2.092, slope 1 - h^2 < 0.05 from
    // |z| = 2.178, so z = 2.12 (h = 0.9710, slope 0.057) counts for the first test only. GELU' is flat
    // (|GELU'| < 0.05 x 1.1289) for u < -2.29 and around its zero at u = -0.75 (-0.90 < u < -0.63); at
    // -1.42 it is -0.129, GELU's steepest descent.
    enum { U = 8 };
    const float zt[U] = {0.0f, 0.5f, 2.0f, 2.12f, 2.2f, -3.0f, 10.0f, -10.0f};
    const float zg[U] = {-10.0f, -3.0f, -0.75f, -1.42f, 0.0f, 1.42f, 5.0f, -2.0f};
    float h[U], ones[U], tmp[U];
    double slope, ab;
    for (int i = 0; i < U; i++) ones[i] = 1.0f;
    act_forward(A_TANH, h, zt, U);
    sat_fractions(A_TANH, zt, h, U, ones, tmp, &slope, &ab);
    st_check(ab == 5.0 / U && slope == 4.0 / U, "saturated tanh units: %g by |h| > 0.97 (want 5/8), %g by slope < 5%% (want 4/8)",
             ab, slope);
    act_forward(A_GELU, h, zg, U);
    sat_fractions(A_GELU, zg, h, U, ones, tmp, &slope, &ab);
    st_check(slope == 3.0 / U && isnan(ab), "saturated GELU units: %g by |GELU'| < 5%% of its steepest (want 3/8)", slope);
    // the update ratio of a known SGD step: W = [1, -1, 2, -2] (std sqrt 2.5), g = [1, 1, -1, -1] (std 1),
    // lr 0.01 without momentum: std(dW) / std(W) = 0.01 / sqrt(2.5)
    MLPConfig c1 = {.L = 1, .dims = {2, 2}, .act = A_IDENTITY, .head = 1};
    MLP n;
    mlp_build(&n, &c1, 1);
    const float w0[4] = {1.0f, -1.0f, 2.0f, -2.0f}, g0[4] = {1.0f, 1.0f, -1.0f, -1.0f};
    memcpy(n.W[0], w0, sizeof(w0));
    memset(n.grads, 0, n.num_params * sizeof(float));
    memcpy(n.grads + (n.W[0] - n.params), g0, sizeof(g0));
    Opt o = opt_make("sgd", 0.01f);
    o.momentum = 0.0f;
    opt_step(&n, &o);
    double r = update_ratio(n.W[0], w0, 4);
    st_check(fabs(r - 0.01 / sqrt(2.5)) < 1e-7, "update ratio of a known SGD step: %.7f (want 0.01/sqrt(2.5) = %.7f)", r,
             0.01 / sqrt(2.5));
    mlp_free(&n);
    // the kept dL/dh_1 of a tanh MLP gives back the weight gradient of the layer above it:
    // dL/dW_1 = (tanh'(z_1) * dL/dh_1)^T h_0, summed over the batch
    enum { B = 5 };
    MLPConfig c = {.L = 3, .dims = {4, 6, 5, 3}, .act = A_TANH, .head = 1};
    mlp_build(&n, &c, B);
    mlp_init(&n, "xavier_normal", 0, 3);
    float x[B * 4], dh[B * 5], dz[B * 5];
    int y[B] = {0, 2, 1, 1, 0};
    Rng g;
    rng_seed(&g, 4);
    init_normal(&g, x, B * 4, 0.0f, 1.0f);
    n.dout_kept[1] = dh;
    mlp_forward(&n, x, y, B);
    memset(n.grads, 0, n.num_params * sizeof(float));
    mlp_backward(&n, B);
    act_backward(A_TANH, dz, n.z[1], dh, B * 5);
    double worst = 0.0;
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 6; j++) {
            double s = 0.0;
            for (int b = 0; b < B; b++) s += (double)dz[b * 5 + i] * n.out[0][b * 6 + j];
            worst = fmax(worst, fabs(s - GRAD(&n, n.W[1])[i * 6 + j]) / (1e-7 + fabs(s)));
        }
    st_check(worst < 1e-4, "the kept dL/dh_1 gives back dL/dW_1: worst relative error %.2g", worst);
    mlp_free(&n);
}

static int selftest(void) {
    for (int a = 0; a < NUM_ACTS; a++) {
        MLPConfig c = {.L = 4, .dims = {4, 6, 5, 5, 3}, .act = (Act)a, .head = 1};
        char what[64];
        snprintf(what, sizeof(what), "backward, plain %s", act_names[a]);
        fd_check(&c, what);
    }
    MLPConfig ln = {.L = 4, .dims = {4, 6, 5, 5, 3}, .act = A_TANH, .norm = NORM_LAYER, .head = 1};
    fd_check(&ln, "backward, plain tanh + LayerNorm");
    MLPConfig rs = {.L = 4, .dims = {4, 6, 6, 6, 3}, .act = A_GELU, .residual = 1, .norm = NORM_RMS, .head = 1};
    fd_check(&rs, "backward, residual gelu + RMSNorm");
    MLPConfig rl = {.L = 5, .dims = {4, 6, 6, 6, 6, 3}, .act = A_SILU, .residual = 1, .norm = NORM_LAYER, .head = 1};
    fd_check(&rl, "backward, residual silu + LayerNorm");
    MLPConfig r0 = {.L = 4, .dims = {4, 6, 6, 6, 3}, .act = A_RELU, .residual = 1, .head = 1};
    fd_check(&r0, "backward, residual relu, no norm");
    selftest_stack_grad();
    // Student t: P(|T| > 1) = 1/2 at df = 1 (Cauchy); the 5% two-sided point of df = 9 is 2.262157;
    // the 1% point of df = 30 is 2.749996; large df tends to the normal (P(|Z| > 1.959964) = 0.05)
    struct { double t, df, p; } tv[] = {{1.0, 1, 0.5}, {2.262157163, 9, 0.05}, {2.749995654, 30, 0.01}, {1.959963985, 1e7, 0.05}, {0.0, 5, 1.0}};
    for (int i = 0; i < 5; i++) {
        double p = student_t_p(tv[i].t, tv[i].df);
        st_check(fabs(p - tv[i].p) < 1e-6, "Student t: P(|T| > %g), df %g = %.8f (want %g)", tv[i].t, tv[i].df, p, tv[i].p);
    }
    // paired t of a known sample: d = a - b = {1, 2, 3, 4}: mean 2.5, sd 1.2910, t = 3.8730, df 3
    double a[4] = {2, 4, 6, 8}, b[4] = {1, 2, 3, 4}, md, t, p;
    paired_t(a, b, 4, &md, &t, &p);
    st_check(fabs(t - 3.872983346) < 1e-6 && fabs(md - 2.5) < 1e-12, "paired t of d = 1..4: t = %.6f (want 3.872983)", t);
    // Adam's first step moves every parameter by lr against the sign of its gradient
    MLPConfig c1 = {.L = 1, .dims = {2, 2}, .act = A_IDENTITY, .head = 1};
    MLP n;
    mlp_build(&n, &c1, 1);
    mlp_init(&n, "constant:0.5", 0, 1);
    float x[2] = {1.0f, -2.0f};
    int y[1] = {1};
    mlp_forward(&n, x, y, 1);
    memset(n.grads, 0, n.num_params * sizeof(float));
    mlp_backward(&n, 1);
    float before = n.params[0], g0 = n.grads[0];
    Opt o = opt_make("adam", 0.01f);
    opt_step(&n, &o);
    st_check(fabsf(n.params[0] - (before - 0.01f * (g0 > 0 ? 1.0f : -1.0f))) < 1e-6f, "Adam's first step is lr * sign(g)");
    mlp_free(&n);
    selftest_handtrace();
    selftest_orthogonal_2x2();
    selftest_depth_sensitivity();
    selftest_diag();
    printf("selftest: %d passed, %d failed\n", st_pass, st_fail);
    return st_fail ? 1 : 0;
}

// ============================================================================================
// 10. The command line
// ============================================================================================

static void lab_usage(void) {
    printf("usage: dev/labs/mlp_lab LAB [flags]     (doc/labs/README.md describes the labs)\n"
           "labs: selftest explode xavier orthogonal residual symmetry race sweep xavier_kaiming gains diag\n"
           "      worked (the sources' worked examples recomputed, no CSV)\n"
           "  -o FILE   the CSV (default out/labs/LAB/LAB.csv; make lab-publish writes doc/labs/LAB.csv)\n"
           "  -d DIR    the tables of dev/labs/fetch_data.sh (default data_labs)\n"
           "  -w N      width          -l N  depth (layers, sublayers)     -b N  batch\n"
           "  -n N      seeds          -s N  training steps                -W N  the big width (xavier: 4096, residual: 1600)\n"
           "  -r LR     learning rate  -O sgd|adam                         -x N  base seed (default 42)\n");
}

int main(int argc, char** argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);    // progress lines show up under make and in logs
    if (argc < 2 || strcmp(argv[1], "-h") == 0) { lab_usage(); return argc < 2; }
    const char* lab = argv[1];
    if (strcmp(lab, "selftest") == 0) return selftest();
    if (strcmp(lab, "worked") == 0) { worked_examples(); return 0; }
    LabOptions o = {.data_dir = "data_labs", .seed = 42};
    // The default CSV goes to the git-ignored out/labs/LAB/ (made here); the committed doc/labs/LAB.csv
    // is written only when asked for (-o, as make lab-publish does).
    char out[4096];
    snprintf(out, sizeof(out), "out/labs/%s/%s.csv", lab, lab);
    o.out = out;
    int out_given = 0;
    for (int i = 2; i < argc; i += 2) {
        const char* fl = argv[i];
        if (i + 1 >= argc) fatal("flag %s needs a value", fl);
        const char* v = argv[i + 1];
        if (!strcmp(fl, "-o")) { o.out = v; out_given = 1; }
        else if (!strcmp(fl, "-d")) o.data_dir = v;
        else if (!strcmp(fl, "-w")) o.width = (int)parse_int(fl, v, 2, 16384);
        else if (!strcmp(fl, "-l")) o.depth = (int)parse_int(fl, v, 1, 1000);
        else if (!strcmp(fl, "-b")) o.batch = (int)parse_int(fl, v, 1, 65536);
        else if (!strcmp(fl, "-n")) o.seeds = (int)parse_int(fl, v, 2, 64);
        else if (!strcmp(fl, "-s")) o.steps = (int)parse_int(fl, v, 10, 10000000);
        else if (!strcmp(fl, "-W")) o.big_width = (int)parse_int(fl, v, 2, 16384);
        else if (!strcmp(fl, "-r")) o.lr = (float)parse_float(fl, v, 1e-8, 10.0);
        else if (!strcmp(fl, "-O")) o.opt = parse_choice(fl, v, "sgd", "adam");
        else if (!strcmp(fl, "-x")) o.seed = (uint64_t)parse_int(fl, v, 0, 1L << 40);
        else fatal("unknown flag %s (mlp_lab -h)", fl);
    }
    struct { const char* name; void (*run)(const LabOptions*); } labs[] = {
        {"explode", lab_explode}, {"xavier", lab_xavier}, {"orthogonal", lab_orthogonal},
        {"residual", lab_residual}, {"symmetry", lab_symmetry}, {"race", lab_race}, {"sweep", lab_sweep},
        {"xavier_kaiming", lab_xavier_kaiming}, {"gains", lab_gains}, {"diag", lab_diag},
    };
    for (size_t i = 0; i < sizeof(labs) / sizeof(labs[0]); i++)
        if (strcmp(lab, labs[i].name) == 0) {
            if (!out_given) {     // out/labs/LAB/, each level
                char dir[4096];
                snprintf(dir, sizeof(dir), "out/labs/%s", lab);
                const char* levels[] = {"out", "out/labs", dir};
                for (int k = 0; k < 3; k++)
                    if (mkdir(levels[k], 0755) != 0 && errno != EEXIST)
                        fatal("cannot create %s (%s)", levels[k], strerror(errno));
            }
            double t0 = now_ms();
            printf("lab %s -> %s\n", lab, o.out);
            labs[i].run(&o);
            printf("lab %s: %.1f s\n", lab, (now_ms() - t0) / 1000.0);
            return 0;
        }
    fatal("unknown lab '%s' (mlp_lab -h)", lab);
    return 1;
}
