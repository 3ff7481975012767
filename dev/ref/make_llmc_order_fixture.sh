#!/bin/sh
# Writes test/fixtures/llmc_order.txt: the batch offsets llm.c's own DataLoader (llmc/dataloader.h,
# shuffling on, as llm.c's train_gpt2.c and train_gpt2.cu create it) serves, for test_gpt2.c's
# check of --data-order llmc.
#
#     LLMC_DIR=/path/to/llm.c sh dev/ref/make_llmc_order_fixture.sh
#
# LLMC_DIR is a checkout of https://github.com/karpathy/llm.c (the fixture was made from commit
# f1e2ace, 2024). Nothing of llm.c is committed here: the small C driver below includes its
# dataloader.h, is built in a temporary directory and deleted. Deterministic: the same bytes on
# every run.
#
# Each case is one token shard of NTOK tokens whose token i is i (so the first input token of a
# batch is its offset) and llm.c processes 0 .. RANKS-1, each reading B x T tokens per batch. The
# driver creates every rank's loader as llm.c does, dataloader_init(loader, shard, B, T, rank, RANKS,
# 1), calls dataloader_next_batch BATCHES times, and prints the offset of each batch. Format:
#     case NTOK B T RANKS BATCHES
# then RANKS lines, rank 0 first: BATCHES offsets (in tokens) of that rank's batches in order.
# The cases cover more than two epochs each (an epoch is floor((NTOK - 1) / (RANKS B T)) batches),
# 1, 2 and 3 processes, and one permutation longer than the generator's 624-word block.
set -eu
: "${LLMC_DIR:?set LLMC_DIR to a checkout of karpathy/llm.c}"
test -f "$LLMC_DIR/llmc/dataloader.h" || { echo "no llmc/dataloader.h in $LLMC_DIR" >&2; exit 1; }
out=$(pwd)/test/fixtures/llmc_order.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/driver.c" <<'EOF'
#include "llmc/dataloader.h"

// A token shard as llm.c's data scripts write it: 256 int32 header (magic, version, token count),
// then the tokens as uint16; token i is i.
static void write_shard(const char* path, int ntok) {
    int header[HEADER_SIZE] = {20240520, 1, ntok};
    FILE* f = fopenCheck(path, "wb");
    fwrite(header, sizeof(int), HEADER_SIZE, f);
    for (int i = 0; i < ntok; i++) {
        uint16_t t = (uint16_t)i;
        fwrite(&t, sizeof(t), 1, f);
    }
    fcloseCheck(f);
}

int main(int argc, char** argv) {
    int ntok = atoi(argv[2]), B = atoi(argv[3]), T = atoi(argv[4]), ranks = atoi(argv[5]);
    int batches = atoi(argv[6]);
    write_shard(argv[1], ntok);
    printf("case %d %d %d %d %d\n", ntok, B, T, ranks, batches);
    for (int r = 0; r < ranks; r++) {
        DataLoader loader;
        dataloader_init(&loader, argv[1], B, T, r, ranks, 1);
        for (int k = 0; k < batches; k++) {
            dataloader_next_batch(&loader);
            printf(k ? " %d" : "%d", loader.inputs[0]);
        }
        printf("\n");
        dataloader_free(&loader);
    }
    return 0;
}
EOF
cc -O2 -I"$LLMC_DIR" -o "$tmp/driver" "$tmp/driver.c" -lm
{
    echo "# llm.c's shuffled batch order: made by dev/ref/make_llmc_order_fixture.sh (see there)"
    # NTOK B T RANKS BATCHES
    "$tmp/driver" "$tmp/shard.bin" 1000 3 7 1 150
    "$tmp/driver" "$tmp/shard.bin" 2000 2 8 2 200
    "$tmp/driver" "$tmp/shard.bin" 3001 1 5 3 450
    "$tmp/driver" "$tmp/shard.bin" 8001 1 4 1 4500
} > "$out"
echo "wrote $out"
