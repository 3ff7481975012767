// fuzz_llmc.c: llmc_read, llm.c's model file (--load-llmc), into one tiny gpt2-preset model.
#include "fuzz.h"

static void load_llmc(FILE* f, long size, void* ctx) { llmc_read(ctx, f, size, "fuzz_llmc.bin"); }

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Model* m = fuzz_model(FUZZ_LLMC);
    if (!fuzz_load(data, size, load_llmc, m)) return 0;
    // accepted: all weights finite, and written back they are the file's bytes (but for the header's
    // unused words and wte's padding rows, which the writer zeroes)
    char what[256];
    FUZZ_CHECK(!model_nonfinite(m, what, sizeof(what)));
    char* out = NULL;
    size_t n = 0;
    FILE* f = open_memstream(&out, &n);
    FUZZ_CHECK(f && llmc_transfer(m, f, 1) && fclose(f) == 0);
    size_t wte = (size_t)m->cfg.V * m->cfg.C * 4, pad = (size_t)(llmc_padded_vocab(m->cfg.V) - m->cfg.V) * m->cfg.C * 4;
    FUZZ_CHECK(n + 1024 == size && memcmp(out, data + 1024, wte) == 0);
    FUZZ_CHECK(memcmp(out + wte + pad, data + 1024 + wte + pad, n - wte - pad) == 0);
    free(out);
    return 0;
}
