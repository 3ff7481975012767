// fuzz_decode.c: decoder_read, the decode table that prints GPT-2 tokens as text.
#include "fuzz.h"

static void load_decoder(FILE* f, long size, void* ctx) { decoder_read(ctx, f, size, "fuzz_decode.bin"); }

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Decoder dec = {0};
    if (fuzz_load(data, size, load_decoder, &dec)) {   // accepted: V pieces, each as long as its length byte says
        FUZZ_CHECK(dec.V >= 1 && dec.V <= 65536);
        size_t pos = 1024;
        for (int i = 0; i < dec.V; i++) {
            FUZZ_CHECK(dec.piece[i] && pos < size);
            size_t len = data[pos];
            FUZZ_CHECK(pos + 1 + len <= size && memcmp(dec.piece[i], data + pos + 1, len) == 0 && dec.piece[i][len] == 0);
            pos += 1 + len;
        }
    }
    decoder_free(&dec);
    return 0;
}
