// fuzz_checkpoint.c: checkpoint_read, the resume path (-y), into one tiny model built once.
// A mutated checkpoint almost never has the right CRC-32, so each input that holds a whole header is
// also read a second time with its CRC recomputed: the fuzzer then reaches every check after the CRC
// and the accepting path, with header fields of its choosing.
#include "fuzz.h"

typedef struct { Rng data_rng, sample_rng; Ema spike[2]; int step; } CkptOut;

static void load_checkpoint(FILE* f, long size, void* ctx) {
    CkptOut* o = ctx;
    o->step = checkpoint_read(fuzz_model(FUZZ_CKPT), f, size, "fuzz_checkpoint.bin", &o->data_rng, &o->sample_rng, o->spike);
}

static void one(const uint8_t* data, size_t size) {
    CkptOut o;
    if (!fuzz_load(data, size, load_checkpoint, &o)) return;
    // accepted: a state the trainer can go on from. Both generators draw (a bad mti would read
    // outside the state), the step and the spike statistics are in range.
    FUZZ_CHECK(o.step >= 0 && o.step <= (1 << 30));
    Rng* g[2] = {&o.data_rng, &o.sample_rng};
    for (int i = 0; i < 2; i++) {
        FUZZ_CHECK(isfinite(rng_normal_f64(g[i], 0.0, 1.0)));   // the cached normal, if any
        for (int k = 0; k < RNG_MT_N + 2; k++) rng_u32(g[i]);
        FUZZ_CHECK(isfinite(rng_normal_f64(g[i], 0.0, 1.0)));
        FUZZ_CHECK(isfinite(o.spike[i].mean) && o.spike[i].var >= 0 && isfinite(o.spike[i].var) && o.spike[i].n >= 0);
    }
    const Model* m = fuzz_model(FUZZ_CKPT);
    size_t bytes = m->num_params * sizeof(float);
    FUZZ_CHECK(size == sizeof(CkptHeader) + 3 * bytes);
    const float* body[3] = {m->params, m->adam_m, m->adam_v};
    for (int a = 0; a < 3; a++) FUZZ_CHECK(memcmp(body[a], data + sizeof(CkptHeader) + a * bytes, bytes) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    one(data, size);
    if (size >= sizeof(CkptHeader)) {
        uint8_t* fixed = malloc(size);
        memcpy(fixed, data, size);
        // the CRC the loader computes: of the header (CRC field 0) and the body the model expects
        size_t n = sizeof(CkptHeader) + 3 * fuzz_model(FUZZ_CKPT)->num_params * sizeof(float);
        uint32_t zero = 0, crc;
        memcpy(fixed + offsetof(CkptHeader, crc), &zero, 4);
        crc = crc32_update(0, fixed, size < n ? size : n);
        memcpy(fixed + offsetof(CkptHeader, crc), &crc, 4);
        one(fixed, size);
        free(fixed);
    }
    return 0;
}
