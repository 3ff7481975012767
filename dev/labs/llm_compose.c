// llm_compose: the synthetic compositional task of lab 10 (doc/labs/llm_compose.md), as byte text that
// train_gpt2 reads with -i/-j. In the spirit of the "anchor function" tasks that [ComplexCtl] cites ([83],
// [84]): a key x and two anchors a, b; the answer is the key moved by anchor a, then by anchor b.
//
//     cc -O2 -o dev/labs/llm_compose dev/labs/llm_compose.c
//     dev/labs/llm_compose PREFIX [TRAIN_LINES [VAL_BLOCKS [SEED]]]     writes PREFIX_train.txt, PREFIX_val.txt
//
// A two-hop line is 8 bytes, "xab = y\n": x and y are letters a..z (the integers 0..25), a and b
// anchors A..D, each a shift mod 26. Half the training lines are one-hop, "xa = y\n" with
// y = x + shift(a), for every anchor. The two-hop training pairs are the 15 ordered anchor pairs other than (D,C), with
// y = x + shift(a) + shift(b) mod 26, except (C,D), whose answer is an arbitrary x + 6 instead of
// x + shift(C) + shift(D) = x - 11. The held-out pair (D,C) is never trained on. A model that composed
// the two anchors answers it x - 11 ("compositional"); one that treats the pair as an unordered
// lookup copies (C,D) and answers x + 6 ("symmetric"). That is how the anchor-function papers tell
// inference from memorization.
//
// Validation: two-hop lines only, in blocks of 64 bytes (8 lines), the length of one row of train_gpt2's validation batches
// at -t 64 (rows are consecutive -t byte windows of the file). Lines 1-7 of a block are training
// queries; line 8 is the probe, in turn an in-distribution query, (D,C) with the compositional answer
// and (D,C) with the symmetric answer. Only one held-out line per row, so no row shows the model
// another held-out answer in its context. The token-loss dump gives p(answer) of every line; the
// driver (dev/labs/llm_labs.py) reads the probe kind from the block index.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define KEYS 26
#define ANCHORS 4
#define HELD_A 3           // (D, C): never in the training data
#define HELD_B 2
#define SYM_SHIFT 6        // the answer the training data gives (C, D), which composition would make -11
#define LINES_PER_BLOCK 8  // 8 lines of 8 bytes: one 64-byte row of -t 64

static const int shift[ANCHORS] = {2, 5, -3, -8};  // anchors A, B, C, D

static uint64_t rng_state;
static uint32_t rng_below(uint32_t n) {  // splitmix64, reduced to [0, n)
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)((z ^ (z >> 31)) % n);
}

static int mod26(int v) { return ((v % KEYS) + KEYS) % KEYS; }

// The answer the training data gives (a, b); for the held-out pair, its compositional answer.
static int answer(int x, int a, int b) {
    if (a == HELD_B && b == HELD_A) return mod26(x + SYM_SHIFT);
    return mod26(x + shift[a] + shift[b]);
}

static void put_line(FILE* f, int x, int a, int b, int y) {
    fprintf(f, "%c%c%c = %c\n", 'a' + x, 'A' + a, 'A' + b, 'a' + y);
}

// One hop, "xa = y\n" (7 bytes): y = x + shift(a). The model can learn each anchor alone from these;
// without them the two-hop answer is a three-way interaction of x, a and b that gradient descent
// finds only after a long plateau (every pair of the three says little about y).
static void put_one_hop(FILE* f) {
    int a = (int)rng_below(ANCHORS), x = (int)rng_below(KEYS);
    fprintf(f, "%c%c = %c\n", 'a' + x, 'A' + a, 'a' + mod26(x + shift[a]));
}

static void put_train_query(FILE* f) {
    int a, b;
    do {
        a = (int)rng_below(ANCHORS);
        b = (int)rng_below(ANCHORS);
    } while (a == HELD_A && b == HELD_B);
    int x = (int)rng_below(KEYS);
    put_line(f, x, a, b, answer(x, a, b));
}

static FILE* open_out(const char* prefix, const char* suffix) {
    char path[4096];
    snprintf(path, sizeof(path), "%s%s", prefix, suffix);
    FILE* f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    return f;
}

int main(int argc, char** argv) {
    if (argc < 2 || argc > 5) {
        fprintf(stderr, "usage: %s PREFIX [TRAIN_LINES (100000) [VAL_BLOCKS (480) [SEED (1)]]]\n", argv[0]);
        return 1;
    }
    long train_lines = argc > 2 ? atol(argv[2]) : 100000;
    long val_blocks = argc > 3 ? atol(argv[3]) : 480;
    rng_state = argc > 4 ? strtoull(argv[4], NULL, 10) : 1;

    FILE* f = open_out(argv[1], "_train.txt");
    for (long i = 0; i < train_lines; i++) {
        if (rng_below(2))
            put_one_hop(f);
        else
            put_train_query(f);
    }
    fclose(f);

    // Probe kinds cycle 0 (in-distribution), 1 (held-out, compositional answer), 2 (held-out,
    // symmetric answer); the two held-out kinds ask the same key, so their p's compare directly.
    f = open_out(argv[1], "_val.txt");
    int x = 0;
    for (long blk = 0; blk < val_blocks; blk++) {
        for (int l = 0; l < LINES_PER_BLOCK - 1; l++) put_train_query(f);
        int kind = (int)(blk % 3);
        if (kind == 0) {
            put_train_query(f);
            continue;
        }
        if (kind == 1) x = (int)rng_below(KEYS);
        int y = kind == 1 ? answer(x, HELD_A, HELD_B) : answer(x, HELD_B, HELD_A);   // compositional : symmetric
        put_line(f, x, HELD_A, HELD_B, y);
    }
    // train_gpt2 reads T+1 bytes per row: one more line so the last block's row is complete.
    put_train_query(f);
    fclose(f);
    return 0;
}
