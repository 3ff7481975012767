/*
fuzz.h: what the four libFuzzer harnesses of dev/fuzz share (dev/fuzz/README.md).

train_gpt2.c is included whole, with fatal() jumping back here instead of exiting (as test_gpt2.c
does), so a refused input ends one run of the loader, not the process. The fuzzer's bytes reach
the loader through fmemopen: no file is read or written.
*/
#include <setjmp.h>
#include <stdint.h>

static jmp_buf fatal_jump;
static int fatal_armed;
#define FATAL_HOOK() do { if (fatal_armed) longjmp(fatal_jump, 1); fprintf(stderr, "error: %s\n", fatal_msg); exit(1); } while (0)
#define TRAIN_GPT2_NO_MAIN
#include "../../train_gpt2.c"

// An invariant of an accepted input that does not hold: a crash the fuzzer reports, with the message.
#define FUZZ_CHECK(cond) do { if (!(cond)) { fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); abort(); } } while (0)

// Runs load(f, size, ctx) on `size` bytes at `data` through a memory stream. Returns 1 if the loader
// accepted them, 0 if it refused them through fatal(). The caller frees what the loader allocated.
static int fuzz_load(const uint8_t* data, size_t size, void (*load)(FILE* f, long size, void* ctx), void* ctx) {
    static uint8_t empty[1];
    FILE* f = fmemopen(size ? (void*)data : empty, size, "rb");   // read only: the bytes stay as given
    if (!f) { perror("fmemopen"); abort(); }
    int accepted;
    fatal_armed = 1;
    if (setjmp(fatal_jump)) {
        accepted = 0;
    } else {
        load(f, (long)size, ctx);
        accepted = 1;
    }
    fatal_armed = 0;
    fclose(f);
    static int verbose = -1;   // FUZZ_VERBOSE=1: say what the loader made of each input
    if (verbose < 0) verbose = getenv("FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "%zu bytes %s%s\n", size, accepted ? "accepted" : "refused: ", accepted ? "" : fatal_msg);
    return accepted;
}

// The tiny models that the checkpoint and llm.c targets read into, built once per process, and that
// make_corpus.c writes the seeds from. ckpt: grouped-query attention, a checkpoint of about 8 KB.
// llmc: the gpt2 preset llm.c's file holds (KVH = H, F = 4C, biases, tied head, eps 1e-5); its
// vocabulary 8 is padded to 128 rows in the file, about 4 KB.
enum { FUZZ_CKPT, FUZZ_LLMC };
static Model* fuzz_model(int which) {
    static Model m[2];
    if (!m[which].params) {
        Config c = {.V = 8, .maxT = 4, .L = 1, .C = 4, .H = 2, .KVH = which == FUZZ_LLMC ? 2 : 1,
                    .F = which == FUZZ_LLMC ? 16 : 8, .bias = 1, .tied = 1, .eps = 1e-5f,
                    .rope_theta = 10000.0f, .logit_scale = 1.0f, .attn_scale = 1.0f / sqrtf(2.0f)};
        model_build(&m[which], &c);
    }
    return &m[which];
}
