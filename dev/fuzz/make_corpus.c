/*
make_corpus.c: writes the seed corpus of the fuzz targets (dev/fuzz/corpus/<target>/) and their
libFuzzer dictionaries (dev/fuzz/dict/<target>.dict): for each loader a valid file, written by the
trainer's own writers where it has one (checkpoint_save, llmc_save), and near-valid files that each
break one rule. Deterministic: a second run writes the same bytes.

    cc -O1 -o /tmp/make_corpus dev/fuzz/make_corpus.c -lm && /tmp/make_corpus dev/fuzz
*/
#include "fuzz.h"

static const char* root;

static void put(const char* target, const char* name, const void* bytes, size_t n) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/corpus/%s/%s", root, target, name);
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(bytes, 1, n, f) != n || fclose(f) != 0) fatal("cannot write %s", path);
}

static uint8_t* slurp(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (!f) fatal("cannot read %s", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    uint8_t* b = xmalloc(*n);
    if (fread(b, 1, *n, f) != *n) fatal("short read of %s", path);
    fclose(f);
    unlink(path);
    return b;
}

static void mkdirs(const char* target) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/corpus", root);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/corpus/%s", root, target);
    mkdir(path, 0755);
}

// Deterministic, finite weights and AdamW moments (v >= 0).
static void fill(Model* m, uint64_t seed) {
    Rng g;
    rng_seed(&g, seed);
    init_normal_d(&g, m->params, m->num_params, 0.0, 0.02);
    init_uniform(&g, m->adam_m, m->num_params, -1e-3f, 1e-3f);
    init_uniform(&g, m->adam_v, m->num_params, 0.0f, 1e-6f);
}

static void set_i32(uint8_t* b, size_t off, int32_t v) { memcpy(b + off, &v, 4); }

// ---- token shards and byte text ----------------------------------------------------------------
static void corpus_shard(void) {
    mkdirs("shard");
    int32_t h[256] = {SHARD_MAGIC, 1, 0};
    uint8_t b[1024 + 2 * 64];
    uint16_t tok[64];
    for (int i = 0; i < 64; i++) tok[i] = (uint16_t)(i * 787 % 50257);   // GPT-2 ids, some >= 256
    h[2] = 64;
    memcpy(b, h, 1024);
    memcpy(b + 1024, tok, sizeof(tok));
    put("shard", "gpt2_64_tokens.bin", b, sizeof(b));
    for (int i = 0; i < 64; i++) tok[i] = (uint16_t)("It is a way I have of driving off the spleen, and regulating the"[i]);
    memcpy(b + 1024, tok, sizeof(tok));
    put("shard", "bytes_as_shard.bin", b, sizeof(b));                    // accepted with vocabulary 256 too
    put("shard", "truncated.bin", b, sizeof(b) - 1);
    set_i32(b, 8, 0);
    put("shard", "zero_tokens.bin", b, 1024);
    set_i32(b, 8, -1);
    put("shard", "count_2_32_minus_1.bin", b, 1024);
    set_i32(b, 8, 64);
    set_i32(b, 4, 2);
    put("shard", "version_2.bin", b, sizeof(b));
    set_i32(b, 4, 1);
    tok[10] = 50257;                                                     // one past GPT-2's vocabulary
    memcpy(b + 1024, tok, sizeof(tok));
    put("shard", "token_50257.bin", b, sizeof(b));
    const char* text = "Call me Ishmael. Some years ago--never mind how long precisely--having little or no money\n";
    put("shard", "text.txt", text, strlen(text));
    put("shard", "empty.txt", "", 0);
    uint8_t bin[300];
    for (int i = 0; i < 300; i++) bin[i] = (uint8_t)(i * 7);
    put("shard", "binary_text.txt", bin, sizeof(bin));
}

// ---- decode tables ----------------------------------------------------------------------------
static void corpus_decode(void) {
    mkdirs("decode");
    static uint8_t b[1024 + 300 * 8];
    const char* merges[4] = {" the", "ing", " whale", "\n\n"};
    int32_t h[256] = {20240328, 2, 260, 259};
    memcpy(b, h, 1024);
    size_t n = 1024;
    for (int i = 0; i < 256; i++) { b[n++] = 1; b[n++] = (uint8_t)i; }
    for (int i = 0; i < 4; i++) { b[n++] = (uint8_t)strlen(merges[i]); memcpy(b + n, merges[i], strlen(merges[i])); n += strlen(merges[i]); }
    put("decode", "vocab_260.bin", b, n);
    put("decode", "truncated_piece.bin", b, n - 1);
    put("decode", "header_only.bin", b, 1024);
    size_t full = n;
    b[n++] = 0;                                                          // a trailing byte
    put("decode", "trailing_byte.bin", b, n);
    set_i32(b, 8, 1);
    b[1024] = 0;                                                         // one empty piece
    put("decode", "vocab_1_empty_piece.bin", b, 1025);
    memcpy(b, h, 1024);
    set_i32(b, 8, 65537);
    put("decode", "vocab_65537.bin", b, full);
    set_i32(b, 8, (int32_t)(full - 1024 + 1));                           // one more token than bytes
    put("decode", "vocab_past_end.bin", b, full);
    set_i32(b, 8, 260);
    set_i32(b, 4, 1);
    put("decode", "version_1.bin", b, full);
}

// ---- checkpoints -------------------------------------------------------------------------------
// The valid one, then copies with one header field changed and the CRC recomputed (so each is refused
// for that field, not for its CRC), and copies damaged after the CRC was computed. A few only: each
// is 7.5 KB, and fuzz_checkpoint recomputes the CRC of every input anyway, so the fuzzer reaches the
// other fields' checks from the valid file.
static void put_ckpt(const char* name, const uint8_t* valid, size_t n, size_t off, const void* field, size_t len, int fix_crc) {
    uint8_t* b = xmalloc(n);
    memcpy(b, valid, n);
    memcpy(b + off, field, len);
    if (fix_crc) {
        uint32_t crc = 0;
        memcpy(b + offsetof(CkptHeader, crc), &crc, 4);
        crc = crc32_update(0, b, n);
        memcpy(b + offsetof(CkptHeader, crc), &crc, 4);
    }
    put("checkpoint", name, b, n);
    free(b);
}

static void corpus_checkpoint(void) {
    mkdirs("checkpoint");
    Model* m = fuzz_model(FUZZ_CKPT);
    fill(m, 1);
    Rng data, sample;
    rng_seed(&data, 1337);
    rng_seed(&sample, 42);
    for (int i = 0; i < 100; i++) rng_u32(&data);                          // mid-block: mti 100
    rng_normal_f64(&sample, 0.0, 1.0);                                   // a cached second normal
    Ema spike[2] = {{5.5, 0.25, 12}, {1.5, 0.01, 12}};
    char path[4096];
    snprintf(path, sizeof(path), "%s/corpus/checkpoint/.valid.tmp", root);
    checkpoint_save(m, path, 12, &data, &sample, spike);
    size_t n;
    uint8_t* v = slurp(path, &n);
    put("checkpoint", "valid_step12.ckpt", v, n);
    int32_t i32;
    uint32_t u32 = 0;
    float eps = 1e-6f; put_ckpt("config_eps.ckpt", v, n, offsetof(CkptHeader, cfg.eps), &eps, 4, 1);
    i32 = -1; put_ckpt("mti_negative.ckpt", v, n, offsetof(CkptHeader, sample_rng.mti), &i32, 4, 1);
    i32 = RNG_MT_N; put_ckpt("mti_624.ckpt", v, n, offsetof(CkptHeader, data_rng.mti), &i32, 4, 1);   // accepted
    double nan = NAN; put_ckpt("next_normal_nan.ckpt", v, n, offsetof(CkptHeader, sample_rng.next_normal), &nan, 8, 1);
    u32 = 0; put_ckpt("crc_zero.ckpt", v, n, offsetof(CkptHeader, crc), &u32, 4, 0);
    put("checkpoint", "truncated.ckpt", v, n - 4);
    put("checkpoint", "header_only.ckpt", v, sizeof(CkptHeader));
    put("checkpoint", "magic_only.ckpt", v, 8);
    free(v);
}

// ---- llm.c model files -------------------------------------------------------------------------
static void corpus_llmc(void) {
    mkdirs("llmc");
    Model* m = fuzz_model(FUZZ_LLMC);
    fill(m, 2);
    char path[4096];
    snprintf(path, sizeof(path), "%s/corpus/llmc/.valid.tmp", root);
    int out = dup(1);                                                    // llmc_save says where it wrote
    freopen("/dev/null", "w", stdout);
    llmc_save(m, path);
    fflush(stdout);
    dup2(out, 1);
    close(out);
    size_t n;
    uint8_t* v = slurp(path, &n);
    put("llmc", "valid.bin", v, n);
    uint8_t* b = xmalloc(n);
    struct { const char* name; int word; int32_t value; } edits[] = {
        {"version_5_bf16.bin", 1, 5}, {"C_8.bin", 6, 8}, {"Vp_8.bin", 7, 8}, {"unused_word_set.bin", 8, 7}};
    for (size_t e = 0; e < sizeof(edits) / sizeof(edits[0]); e++) {
        memcpy(b, v, n);
        set_i32(b, 4 * (size_t)edits[e].word, edits[e].value);
        put("llmc", edits[e].name, b, n);
    }
    memcpy(b, v, n);
    float nan = NAN, one = 1.0f;
    memcpy(b + n - 4, &nan, 4);                                          // lnf.b's last weight
    put("llmc", "nan_weight.bin", b, n);
    memcpy(b, v, n);
    memcpy(b + 1024 + 4 * 8 * 4, &one, 4);                               // wte's first padding row: read, ignored
    put("llmc", "padding_nonzero.bin", b, n);
    put("llmc", "truncated.bin", v, n - 1);
    memcpy(b, v, n);
    put("llmc", "header_only.bin", b, 1024);
    free(b);
    free(v);
}

// ---- dictionaries: the magics and the header values, as the files store them (little-endian) ---
static FILE* dict_open(const char* target) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/dict", root);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/dict/%s.dict", root, target);
    FILE* f = fopen(path, "w");
    if (!f) fatal("cannot write %s", path);
    fprintf(f, "# libFuzzer dictionary for fuzz_%s, written by dev/fuzz/make_corpus.c\n", target);
    return f;
}

static void dict_word(FILE* f, const char* name, const void* bytes, size_t n) {
    fprintf(f, "%s=\"", name);
    for (size_t i = 0; i < n; i++) fprintf(f, "\\x%02X", ((const uint8_t*)bytes)[i]);
    fprintf(f, "\"\n");
}

static void dict_i32(FILE* f, const char* name, int32_t v) { dict_word(f, name, &v, 4); }

static void dicts(void) {
    FILE* f = dict_open("shard");
    dict_i32(f, "shard_magic", SHARD_MAGIC);
    dict_i32(f, "version_1", 1);
    dict_i32(f, "count_0", 0);
    dict_i32(f, "count_neg1", -1);
    uint16_t t[] = {255, 256, 50256, 50257, 65535};
    for (int i = 0; i < 5; i++) { char name[32]; snprintf(name, sizeof(name), "token_%u", t[i]); dict_word(f, name, &t[i], 2); }
    fclose(f);
    f = dict_open("decode");
    dict_i32(f, "decode_magic", 20240328);
    dict_i32(f, "version_2", 2);
    int32_t vs[] = {0, 1, 256, 50257, 65536, 65537};
    for (int i = 0; i < 6; i++) { char name[32]; snprintf(name, sizeof(name), "vocab_%d", vs[i]); dict_i32(f, name, vs[i]); }
    fclose(f);
    f = dict_open("checkpoint");
    const Model* m = fuzz_model(FUZZ_CKPT);
    fprintf(f, "magic=\"%s\"\n", CKPT_MAGIC);
    dict_i32(f, "version_1", 1);
    dict_i32(f, "version_2", CKPT_VERSION);
    dict_i32(f, "mti_624", RNG_MT_N);
    dict_i32(f, "mti_625", RNG_MT_N + 1);
    dict_i32(f, "step_2_30", 1 << 30);
    dict_i32(f, "step_2_30_plus_1", (1 << 30) + 1);
    dict_word(f, "config", &m->cfg, sizeof(Config));
    uint64_t np = m->num_params;
    dict_word(f, "num_params", &np, 8);
    double special[] = {NAN, INFINITY, -1.0};
    const char* sname[] = {"double_nan", "double_inf", "double_neg1"};
    for (int i = 0; i < 3; i++) dict_word(f, sname[i], &special[i], 8);
    fclose(f);
    f = dict_open("llmc");
    const Config* c = &fuzz_model(FUZZ_LLMC)->cfg;
    dict_i32(f, "llmc_magic", LLMC_MAGIC);
    dict_i32(f, "version_3", 3);
    dict_i32(f, "version_5", 5);
    int32_t hdr[6] = {c->maxT, c->V, c->L, c->H, c->C, llmc_padded_vocab(c->V)};
    dict_word(f, "header_maxT_V_L_H_C_Vp", hdr, sizeof(hdr));
    float fs[] = {NAN, INFINITY, 1.0f};
    const char* fname[] = {"float_nan", "float_inf", "float_1"};
    for (int i = 0; i < 3; i++) dict_word(f, fname[i], &fs[i], 4);
    fclose(f);
}

int main(int argc, char** argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s DIR (dev/fuzz: writes DIR/corpus/<target>/ and DIR/dict/)\n", argv[0]); return 2; }
    root = argv[1];
    corpus_shard();
    corpus_decode();
    corpus_checkpoint();
    corpus_llmc();
    dicts();
    printf("seed corpus and dictionaries written under %s\n", root);
    return 0;
}
