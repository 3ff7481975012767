// fuzz_shard.c: dataset_read, the loader of training data (token shards and byte text).
// Every input is read twice: as "fuzz.bin" (must be a shard, GPT-2's vocabulary) and as "fuzz.txt"
// (a shard if the magic says so, else byte text; vocabulary 256, so shard tokens >= 256 are refused).
#include "fuzz.h"

typedef struct { Dataset d; const char* path; int V; } ShardCtx;

static void load_shard(FILE* f, long size, void* ctx) {
    ShardCtx* s = ctx;
    dataset_read(&s->d, f, size, s->path, s->V);
}

static void one(const uint8_t* data, size_t size, const char* path, int V) {
    ShardCtx s = {.path = path, .V = V};
    if (fuzz_load(data, size, load_shard, &s)) {   // accepted: the tokens are the file's, all < V
        if (s.d.is_shard) {
            FUZZ_CHECK(size == 1024 + 2 * s.d.n);
            FUZZ_CHECK(memcmp(s.d.tok, data + 1024, 2 * s.d.n) == 0);
        } else {
            FUZZ_CHECK(s.d.n == size);
            for (size_t i = 0; i < size; i++) FUZZ_CHECK(s.d.tok[i] == data[i]);
        }
        for (size_t i = 0; i < s.d.n; i++) FUZZ_CHECK(s.d.tok[i] < V);
    }
    free(s.d.tok);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    one(data, size, "fuzz.bin", 50257);
    one(data, size, "fuzz.txt", 256);
    return 0;
}
