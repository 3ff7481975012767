"""The PyTorch side of `make bench`: the training step of train_gpt2.c, timed in PyTorch.

    /usr/bin/python3 dev/bench/torch_step.py --preset gpt2 -L 12 -C 768 -H 12 -V 50257 -B 4 -T 64 \
        --threads 2 --steps 7 --warmup 2

Prints one JSON line: {"ms": [ms of each timed step], "threads": ..., "blas": ...}.

The model is dev/ref/model.py (the reference the C tests compare against), in float32, run the way
someone who knows PyTorch's CPU backend would run it (dev/bench/bench.py sets the environment:
OpenBLAS pthreads, OPENBLAS_CORETYPE unset, tcmalloc preloaded):
  - torch.set_num_threads equal to the C trainer's thread count (Debian's build defaults to 1);
  - the reference's hand-written LayerNorm and tanh-GELU (several elementwise passes each, written
    for readability) are swapped for PyTorch's fused F.layer_norm and F.gelu(approximate="tanh"),
    which compute the same functions; RMSNorm, RoPE and attention stay as written (PyTorch 1.13 has
    no fused RMSNorm or scaled_dot_product_attention);
  - torch.optim.AdamW with its multi-tensor (foreach) implementation, two parameter groups (decay
    on matrices, not on norms, biases and embeddings: train_gpt2.c's default), clip_grad_norm_,
    zero_grad(set_to_none=True).
One step is what train_gpt2.c times: a random batch, forward, backward, clipping, AdamW.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import model as ref  # noqa: E402


def fused_layernorm(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def fused_gelu(x):
    return F.gelu(x, approximate="tanh")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=["gpt2", "llama"], default="gpt2")
    ap.add_argument("-L", type=int, default=4)
    ap.add_argument("-C", type=int, default=128)
    ap.add_argument("-H", type=int, default=4)
    ap.add_argument("-V", type=int, default=256)
    ap.add_argument("-B", type=int, default=12)
    ap.add_argument("-T", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=5, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    ref.layernorm, ref.gelu_tanh = fused_layernorm, fused_gelu
    llama = a.preset == "llama"
    cfg = ref.Config(V=a.V, maxT=a.T, L=a.L, C=a.C, H=a.H, KVH=a.H, F=4 * a.C,
                     norm="rmsnorm" if llama else "layernorm", mlp="swiglu" if llama else "gelu",
                     pos="rope" if llama else "learned", bias=not llama, tied=not llama)
    model = ref.GPT(cfg, dtype=torch.float32)
    decay = ref.decay_names(cfg)
    named = model.named_tensors()
    with torch.no_grad():
        for name, p in named.items():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
            elif name.endswith(".w"):
                p.fill_(1.0)
    groups = [{"params": [p for n, p in named.items() if n in decay], "weight_decay": 0.1},
              {"params": [p for n, p in named.items() if n not in decay], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, foreach=True)
    params = list(named.values())

    times = []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        idx = torch.randint(0, a.V, (a.B, a.T + 1), dtype=torch.int64)
        _, loss = model(idx[:, :-1], idx[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        ms = (time.perf_counter() - t0) * 1e3
        if step >= a.warmup:
            times.append(ms)
    # which BLAS and malloc the process really loaded (Debian picks libblas.so.3 by alternatives)
    maps = open("/proc/self/maps").read().split()
    libs = sorted({os.path.basename(w) for w in maps if "blas" in w or "malloc" in w})
    print(json.dumps({"ms": times, "threads": torch.get_num_threads(), "libs": libs,
                      "loss": float(loss), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
