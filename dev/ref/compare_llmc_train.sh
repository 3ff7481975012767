#!/bin/sh
# Trains llm.c's own CPU trainer (train_gpt2.c of karpathy/llm.c, as published: its DataLoader
# shuffles) and this project's train_gpt2 on the same model and token shard, and prints how far
# apart their 41 training losses are with --data-order llmc and with --data-order sequential.
#
#     make train_gpt2 && LLMC_DIR=/path/to/llm.c sh dev/ref/compare_llmc_train.sh
#
# About 5 minutes on one core. llm.c's trainer is built from LLMC_DIR, unmodified, in a temporary
# directory, and run there: it reads gpt2_124M.bin and dev/data/tinyshakespeare/*.bin from its
# working directory, so the script puts there a small model (-L 2 -C 64 -H 4, V 50257, written by
# train_gpt2 --save-llmc) and two token shards holding the bytes of data/moby_train.txt (the first
# 3,300: 12 batches of llm.c's 4 x 64, so its 41 steps run through 3.4 epochs) and moby_val.txt.
# llm.c trains with AdamW at lr 1e-4, betas 0.9 and 0.999, eps 1e-8, no weight decay, no
# schedule, no clipping; the project's flags below say the same. Measured (llm.c f1e2ace):
# llmc 5.0e-06 (the printed digits), sequential 4.9e-02.
set -eu
: "${LLMC_DIR:?set LLMC_DIR to a checkout of karpathy/llm.c}"
test -f "$LLMC_DIR/train_gpt2.c" || { echo "no train_gpt2.c in $LLMC_DIR" >&2; exit 1; }
repo=$(pwd)
test -x "$repo/train_gpt2" || { echo "run from the repository root after make train_gpt2" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/dev/data/tinyshakespeare"
/usr/bin/python3 - "$repo/data" "$tmp/dev/data/tinyshakespeare/tiny_shakespeare" <<'EOF'
import struct, sys
src, dst = sys.argv[1], sys.argv[2]
for name, text, n in (("train", "moby_train.txt", 3300), ("val", "moby_val.txt", 6000)):
    tokens = open(f"{src}/{text}", "rb").read()[:n]
    with open(f"{dst}_{name}.bin", "wb") as f:   # llm.c's shard: magic, version, token count
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *[0] * 253))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))
EOF
cd "$tmp"
data="-i dev/data/tinyshakespeare/tiny_shakespeare_train.bin
      -j dev/data/tinyshakespeare/tiny_shakespeare_val.bin -L 2 -C 64 -H 4 -t 64 -b 4 -v 0 -S 0"
"$repo/train_gpt2" $data -x 0 --save-llmc gpt2_124M.bin > save.out
cc -O3 -fopenmp -I "$LLMC_DIR" -o llmc_train "$LLMC_DIR/train_gpt2.c" -lm
OMP_NUM_THREADS=1 ./llmc_train > llmc.out
for order in llmc sequential; do
    OMP_NUM_THREADS=1 "$repo/train_gpt2" $data -x 41 --load-llmc gpt2_124M.bin -l 1e-4 -u 0 -q 1 \
        -c 0 -z 0 --beta2 0.999 --adam-eps 1e-8 --data-order $order > "ours_$order.out"
done
/usr/bin/python3 - <<'EOF'
import re
llmc = [float(x) for x in re.findall(r"step \d+: train loss ([\d.]+)", open("llmc.out").read())]
for order in ("llmc", "sequential"):
    ours = [float(x) for x in re.findall(r"\| loss ([\d.]+) \|", open(f"ours_{order}.out").read())]
    assert len(ours) == len(llmc) == 41, (len(ours), len(llmc))
    worst = max(abs(a - b) for a, b in zip(llmc, ours))
    print(f"--data-order {order}: the 41 training losses differ from llm.c's by at most {worst:.1e}")
EOF
