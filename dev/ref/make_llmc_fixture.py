"""Writes test/fixtures/llmc_tiny.bin (an llm.c model file) and test/fixtures/llmc_tiny.txt.

    /usr/bin/python3 dev/ref/make_llmc_fixture.py

Deterministic: the same bytes on every run. The model is a tiny gpt2 preset of dev/ref/model.py
(V=256, maxT=8, L=2, C=16, H=4, F=64, LayerNorm, tanh GELU, learned positions, biases, tied head,
eps 1e-5) whose tensors are float32 draws of torch.manual_seed(20240326): normal with std 0.2 for
matrices, embeddings and biases (LayerNorm biases included), 1 + 0.1 * normal for norm gains.

llmc_tiny.bin, llm.c's fp32 model file (version 3), little-endian:
  - header: 256 int32: [0] 20240326 (magic), [1] 3 (fp32), [2] maxT, [3] V, [4] L, [5] H, [6] C,
    [7] Vp (V rounded up to a multiple of 128), the rest 0;
  - then float32 tensors, each per-layer one holding layers 0..L-1 one after the other:
      wte (Vp x C; rows V..Vp-1 zero), wpe (maxT x C), ln1w (L x C), ln1b (L x C),
      qkvw (L x 3C x C: per layer the rows of attn.wq, then attn.wk, then attn.wv, (out, in) layout),
      qkvb (L x 3C: bq, bk, bv), attprojw (L x C x C: attn.wo), attprojb (L x C: attn.bo),
      ln2w, ln2b (L x C), fcw (L x 4C x C: mlp.wup), fcb (L x 4C: mlp.bup),
      fcprojw (L x C x 4C: mlp.wdown), fcprojb (L x C: mlp.bdown), lnfw (C), lnfb (C).

llmc_tiny.txt, four lines of ASCII:
    B 2 T 8
    <B*T input token ids, space separated, row after row>
    <B*T target token ids, the next token of each input>
    loss <mean cross-entropy of the model on that batch, float64 PyTorch, %.10f>
The tokens are the bytes of TEXT: row b reads TEXT[b*T : b*T+T] and its targets are shifted by one,
exactly train_gpt2.c's validation batch 0 of a byte-text file holding TEXT (so
`ckpt_to_torch.py --llmc test/fixtures/llmc_tiny.bin FILE -b 2 -t 8 -m 1` prints the same loss).

Before writing, the file is read back by an independent reader (read_llmc) and the rebuilt model
must give a bit-identical loss.
"""
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config, GPT, param_shapes  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
OUT = os.path.join(ROOT, "test", "fixtures")

SEED = 20240326
LLMC_MAGIC, LLMC_FP32 = 20240326, 3
CFG = Config(V=256, maxT=8, L=2, C=16, H=4, KVH=4, F=64, norm="layernorm", mlp="gelu",
             pos="learned", bias=True, tied=True, gate=False, eps=1e-5)
B, T = 2, 8
TEXT = b"The quick brown fox"[:B * T + 1]     # 17 bytes: 2 rows of 8 inputs, targets shifted by one


def init_tensors(cfg, seed):
    """name -> float32 tensor; no value is 0 or 1."""
    torch.manual_seed(seed)
    out = {}
    for name, shape in param_shapes(cfg):
        if name.endswith(".w"):                                  # norm gains (ln1.w, ln2.w, lnf.w)
            t = 1.0 + 0.1 * torch.randn(shape, dtype=torch.float32)
        else:                                                        # matrices, embeddings, biases
            t = 0.2 * torch.randn(shape, dtype=torch.float32)
        assert bool((t != 0).all()) and bool((t != 1).all()), name
        out[name] = t
    return out


def padded_vocab(V):
    return (V + 127) // 128 * 128


# --- writer: our names -> llm.c's tensor order ------------------------------------------------------

def write_llmc(path, cfg, p):
    """p: name -> float32 tensor (model.py's names). Only the gpt2 preset with F = 4C fits llm.c."""
    assert (cfg.norm, cfg.mlp, cfg.pos, cfg.bias, cfg.tied, cfg.gate) == \
        ("layernorm", "gelu", "learned", True, True, False), "llm.c holds only the gpt2 preset"
    assert cfg.KVH == cfg.H and cfg.F == 4 * cfg.C
    L, V, Vp, C = cfg.L, cfg.V, padded_vocab(cfg.V), cfg.C
    layers = lambda kind: [p[f"h.{l}.{kind}"] for l in range(L)]
    wte = torch.cat([p["wte"], torch.zeros(Vp - V, C)])
    qkvw = [torch.cat([p[f"h.{l}.attn.wq"], p[f"h.{l}.attn.wk"], p[f"h.{l}.attn.wv"]]) for l in range(L)]
    qkvb = [torch.cat([p[f"h.{l}.attn.bq"], p[f"h.{l}.attn.bk"], p[f"h.{l}.attn.bv"]]) for l in range(L)]
    tensors = [wte, p["wpe"], *layers("ln1.w"), *layers("ln1.b"), *qkvw, *qkvb,
               *layers("attn.wo"), *layers("attn.bo"), *layers("ln2.w"), *layers("ln2.b"),
               *layers("mlp.wup"), *layers("mlp.bup"), *layers("mlp.wdown"), *layers("mlp.bdown"),
               p["lnf.w"], p["lnf.b"]]
    header = np.zeros(256, dtype="<i4")
    header[:8] = [LLMC_MAGIC, LLMC_FP32, cfg.maxT, V, L, cfg.H, C, Vp]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for t in tensors:
            f.write(t.detach().contiguous().numpy().astype("<f4").tobytes())


# --- independent reader: header -> sizes -> slices of one float32 array -----------------------------

def read_llmc(path):
    """Returns (Config, name -> float32 tensor) from an llm.c fp32 model file."""
    with open(path, "rb") as f:
        buf = f.read()
    h = struct.unpack_from("<256i", buf, 0)
    assert h[0] == LLMC_MAGIC and h[1] == LLMC_FP32, h[:2]
    maxT, V, L, H, C, Vp = h[2:8]
    sizes = [("wte", Vp * C), ("wpe", maxT * C), ("ln1w", L * C), ("ln1b", L * C),
             ("qkvw", L * 3 * C * C), ("qkvb", L * 3 * C), ("attprojw", L * C * C), ("attprojb", L * C),
             ("ln2w", L * C), ("ln2b", L * C), ("fcw", L * 4 * C * C), ("fcb", L * 4 * C),
             ("fcprojw", L * 4 * C * C), ("fcprojb", L * C), ("lnfw", C), ("lnfb", C)]
    flat = np.frombuffer(buf, dtype="<f4", offset=1024)
    assert flat.size == sum(n for _, n in sizes), "file size does not match its header"
    a, off = {}, 0
    for k, n in sizes:
        a[k] = torch.from_numpy(flat[off:off + n].copy())
        off += n
    cfg = Config(V=V, maxT=maxT, L=L, C=C, H=H, KVH=H, F=4 * C, norm="layernorm", mlp="gelu",
                 pos="learned", bias=True, tied=True, gate=False, eps=1e-5)
    p = {"wte": a["wte"].view(Vp, C)[:V], "wpe": a["wpe"].view(maxT, C),
         "lnf.w": a["lnfw"], "lnf.b": a["lnfb"]}
    qkvw, qkvb = a["qkvw"].view(L, 3, C, C), a["qkvb"].view(L, 3, C)
    for l in range(L):
        for j, x in enumerate("qkv"):
            p[f"h.{l}.attn.w{x}"], p[f"h.{l}.attn.b{x}"] = qkvw[l, j], qkvb[l, j]
        p[f"h.{l}.ln1.w"], p[f"h.{l}.ln1.b"] = a["ln1w"].view(L, C)[l], a["ln1b"].view(L, C)[l]
        p[f"h.{l}.ln2.w"], p[f"h.{l}.ln2.b"] = a["ln2w"].view(L, C)[l], a["ln2b"].view(L, C)[l]
        p[f"h.{l}.attn.wo"], p[f"h.{l}.attn.bo"] = a["attprojw"].view(L, C, C)[l], a["attprojb"].view(L, C)[l]
        p[f"h.{l}.mlp.wup"], p[f"h.{l}.mlp.bup"] = a["fcw"].view(L, 4 * C, C)[l], a["fcb"].view(L, 4 * C)[l]
        p[f"h.{l}.mlp.wdown"], p[f"h.{l}.mlp.bdown"] = a["fcprojw"].view(L, C, 4 * C)[l], a["fcprojb"].view(L, C)[l]
    assert bool((a["wte"].view(Vp, C)[V:] == 0).all()), "padded vocabulary rows must be zero"
    return cfg, p


# --- the loss ---------------------------------------------------------------------------------------

def batch():
    tok = torch.tensor(list(TEXT), dtype=torch.long)
    idx = torch.stack([tok[b * T:b * T + T] for b in range(B)])
    tgt = torch.stack([tok[b * T + 1:b * T + T + 1] for b in range(B)])
    return idx, tgt


@torch.no_grad()
def loss_of(cfg, p, idx, tgt):
    model = GPT(cfg, dtype=torch.float64)
    for n, t in model.named_tensors().items():
        t.copy_(p[n].double())
    return float(model(idx, tgt)[1])


if __name__ == "__main__":
    params = init_tensors(CFG, SEED)
    idx, tgt = batch()
    loss = loss_of(CFG, params, idx, tgt)

    os.makedirs(OUT, exist_ok=True)
    bin_path, txt_path = os.path.join(OUT, "llmc_tiny.bin"), os.path.join(OUT, "llmc_tiny.txt")
    tmp = bin_path + ".tmp"
    write_llmc(tmp, CFG, params)
    cfg2, p2 = read_llmc(tmp)                                   # self-check before it replaces the fixture
    assert cfg2 == CFG, (cfg2, CFG)
    assert set(p2) == set(params) and all(torch.equal(p2[n], params[n]) for n in params)
    loss2 = loss_of(cfg2, p2, idx, tgt)
    assert loss2 == loss, (loss2, loss)
    os.replace(tmp, bin_path)

    with open(txt_path, "w") as f:
        f.write(f"B {B} T {T}\n")
        f.write(" ".join(str(int(x)) for x in idx.flatten()) + "\n")
        f.write(" ".join(str(int(x)) for x in tgt.flatten()) + "\n")
        f.write(f"loss {loss:.10f}\n")
    print(f"wrote {bin_path} ({os.path.getsize(bin_path)} bytes) and {txt_path}: loss {loss:.10f}")
