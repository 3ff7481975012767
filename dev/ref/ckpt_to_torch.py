#!/usr/bin/python3
"""Loads a train_gpt2.c checkpoint (or an llm.c model file) into dev/ref/model.py and evaluates it.

    /usr/bin/python3 dev/ref/ckpt_to_torch.py CKPT DATA [-b B] [-t T] [-m BATCHES] [--llmc] [--float32]

Prints the mean loss over the first M validation batches of DATA, picked exactly as train_gpt2.c
picks them (batch i, row b reads tokens [(i*B+b)*T, (i*B+b)*T+T]: inputs the first T, targets the
last T; M is capped at (n_tokens-1) // (B*T)), in float64 unless --float32:

    val loss over M batches (B=.. T=..): X.XXXXXX

to compare with the `step S | val loss X` line of a train_gpt2 run with the same -b -t -m (defaults
B=12 T=64 M=20 are the trainer's). DATA is byte text (every byte a token, vocabulary 256) or an
llm.c token shard (256 int32 header: magic 20240520, version 1, token count; then uint16 tokens).

CKPT is a checkpoint of train_gpt2.c, format version 2 (doc/checkpoint.md; version 1 files are
not supported): little-endian, x86-64 layout, a 5176-byte header:
    0 magic "IGPTCKPT" | 8 int32 version = 2 | 12 int32 step
    16 Config: 13 int32 (V, maxT, L, C, H, KVH, F, rmsnorm, swiglu, rope, bias, tied, gate),
       4 float32 (eps, rope_theta, attn_scale, logit_scale) | 84 padding
    88 data-order generator, 2600 sampling generator (2512 bytes each)
    5112 uint64 P | 5120 loss spike statistics, 5144 gradient-norm spike statistics (24 bytes each)
    5168 uint32 crc32 of the whole file with these 4 bytes zero | 5172 padding
    5176 parameters (P float32, in the order of doc/model.md), then AdamW m, then AdamW v.
With --llmc, CKPT is an llm.c model file, fp32 (version 3): 256 int32 header (magic 20240326,
version, maxT, V, L, H, C, Vp), then wte (Vp x C), wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb,
ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb (dev/ref/make_llmc_fixture.py writes one).

Other scripts can import load_checkpoint(path) -> (cfg, params, step), load_llmc(path) -> (cfg,
params), load_tokens(path) and val_loss(model, tokens, B, T, M); params map doc names to float32 tensors.
"""
import argparse
import os
import struct
import sys
import zlib

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config, GPT, param_shapes  # noqa: E402

CKPT_MAGIC, CKPT_VERSION = b"IGPTCKPT", 2
CKPT_HEADER = 5176        # bytes before the parameters
CKPT_CRC_AT = 5168        # offset of the uint32 checksum
LLMC_MAGIC = 20240326
SHARD_MAGIC = 20240520


def fail(msg):
    sys.exit(f"ckpt_to_torch: {msg}")


def file_crc32(path, zero_at, chunk=1 << 24):
    """zlib.crc32 of the whole file with the 4 bytes at zero_at read as zero, chunk by chunk."""
    crc, pos = 0, 0
    with open(path, "rb") as f:
        while True:
            buf = f.read(chunk)
            if not buf:
                return crc
            lo, hi = max(zero_at - pos, 0), min(zero_at + 4 - pos, len(buf))
            if lo < hi:                                    # the checksum field lies in this chunk
                buf = buf[:lo] + bytes(hi - lo) + buf[hi:]
            crc = zlib.crc32(buf, crc)
            pos += len(buf)


def num_params(cfg):
    return sum(int(np.prod(s)) for _, s in param_shapes(cfg))


def split_params(cfg, flat):
    """flat float32 array in doc/model.md order -> name -> tensor."""
    out, off = {}, 0
    for name, shape in param_shapes(cfg):
        n = int(np.prod(shape))
        out[name] = torch.from_numpy(flat[off:off + n].reshape(shape))
        off += n
    assert off == flat.size
    return out


def load_checkpoint(path):
    """A train_gpt2.c checkpoint (version 2) -> (Config, name -> float32 tensor, step)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        h = f.read(CKPT_HEADER)
    if len(h) < 12 or h[:8] != CKPT_MAGIC:
        fail(f"{path} is not a train_gpt2.c checkpoint (bad magic)")
    version, step = struct.unpack_from("<ii", h, 8)
    if version == 1:
        fail(f"{path} is a version 1 checkpoint: not supported (no checksum); only version 2 is read")
    if version != CKPT_VERSION:
        fail(f"{path} has checkpoint version {version}, expected {CKPT_VERSION}")
    if len(h) < CKPT_HEADER:
        fail(f"{path} is truncated (header)")
    ints = struct.unpack_from("<13i", h, 16)
    eps, rope_theta, attn_scale, logit_scale = struct.unpack_from("<4f", h, 68)
    V, maxT, L, C, H, KVH, Fh, rms, swiglu, rope, bias, tied, gate = ints
    cfg = Config(V=V, maxT=maxT, L=L, C=C, H=H, KVH=KVH, F=Fh,
                 norm="rmsnorm" if rms else "layernorm", mlp="swiglu" if swiglu else "gelu",
                 pos="rope" if rope else "learned", bias=bool(bias), tied=bool(tied), gate=bool(gate),
                 eps=eps, rope_theta=rope_theta, attn_scale=attn_scale, logit_scale=logit_scale)
    (P,) = struct.unpack_from("<Q", h, 5112)
    (crc,) = struct.unpack_from("<I", h, CKPT_CRC_AT)
    if size != CKPT_HEADER + 12 * P:
        fail(f"{path} has {size} bytes, expected {CKPT_HEADER + 12 * P} (header + 3 x {P} float32)")
    got = file_crc32(path, CKPT_CRC_AT)
    if got != crc:
        fail(f"{path}: checksum mismatch (stored {crc:08x}, computed {got:08x}): the file is corrupt")
    if P != num_params(cfg):
        fail(f"{path} holds {P} parameters, its Config {num_params(cfg)}")
    flat = np.fromfile(path, dtype="<f4", count=P, offset=CKPT_HEADER)    # parameters only, not m, v
    return cfg, split_params(cfg, flat), step


def load_llmc(path):
    """An llm.c fp32 model file (version 3) -> (Config, name -> float32 tensor); padded rows dropped."""
    size = os.path.getsize(path)
    h = np.fromfile(path, dtype="<i4", count=256)
    if h.size < 256 or h[0] != LLMC_MAGIC:
        fail(f"{path} is not an llm.c model file (bad magic)")
    if h[1] == 5:
        fail(f"{path} is an llm.c bf16 model file (version 5): not supported; write it as fp32 (version 3)")
    if h[1] != 3:
        fail(f"{path} has llm.c model version {h[1]}, expected 3 (fp32)")
    maxT, V, L, H, C, Vp = (int(x) for x in h[2:8])
    cfg = Config(V=V, maxT=maxT, L=L, C=C, H=H, KVH=H, F=4 * C, norm="layernorm", mlp="gelu",
                 pos="learned", bias=True, tied=True, gate=False, eps=1e-5)
    n = (Vp - V) * C + num_params(cfg)
    if size != 1024 + 4 * n:
        fail(f"{path} has {size} bytes, expected {1024 + 4 * n} for its header")
    flat = np.fromfile(path, dtype="<f4", count=n, offset=1024)
    # llm.c's tensors in its order, each per-layer one holding all L layers
    sizes = dict(wte=Vp * C, wpe=maxT * C, ln1w=L * C, ln1b=L * C, qkvw=L * 3 * C * C, qkvb=L * 3 * C,
                 attprojw=L * C * C, attprojb=L * C, ln2w=L * C, ln2b=L * C, fcw=L * 4 * C * C,
                 fcb=L * 4 * C, fcprojw=L * 4 * C * C, fcprojb=L * C, lnfw=C, lnfb=C)
    t, off = {}, 0
    for k, s in sizes.items():
        t[k] = torch.from_numpy(flat[off:off + s])
        off += s
    p = {"wte": t["wte"].view(Vp, C)[:V], "wpe": t["wpe"].view(maxT, C), "lnf.w": t["lnfw"], "lnf.b": t["lnfb"]}
    per_layer = {  # our kind: (llm.c tensor, shape of one layer's slice)
        "ln1.w": ("ln1w", (C,)), "ln1.b": ("ln1b", (C,)), "attn.wo": ("attprojw", (C, C)),
        "attn.bo": ("attprojb", (C,)), "ln2.w": ("ln2w", (C,)), "ln2.b": ("ln2b", (C,)),
        "mlp.wup": ("fcw", (4 * C, C)), "mlp.bup": ("fcb", (4 * C,)),
        "mlp.wdown": ("fcprojw", (C, 4 * C)), "mlp.bdown": ("fcprojb", (C,))}
    for l in range(L):
        for kind, (k, shape) in per_layer.items():
            p[f"h.{l}.{kind}"] = t[k].view(L, *shape)[l]
        qkvw, qkvb = t["qkvw"].view(L, 3, C, C)[l], t["qkvb"].view(L, 3, C)[l]   # rows: q, k, v
        for j, x in enumerate("qkv"):
            p[f"h.{l}.attn.w{x}"], p[f"h.{l}.attn.b{x}"] = qkvw[j], qkvb[j]
    return cfg, p


def load_tokens(path):
    """Byte text or an llm.c uint16 token shard -> int64 numpy array (as train_gpt2.c reads them)."""
    size = os.path.getsize(path)
    h = np.fromfile(path, dtype="<i4", count=256) if size >= 1024 else np.zeros(0, dtype="<i4")
    if h.size == 256 and h[0] == SHARD_MAGIC:
        if h[1] != 1:
            fail(f"{path}: token shard version {h[1]}, expected 1")
        n = int(np.uint32(h[2]))
        if size != 1024 + 2 * n:
            fail(f"{path}: header says {n} tokens but the file holds {size} bytes")
        return np.fromfile(path, dtype="<u2", count=n, offset=1024).astype(np.int64)
    if path.endswith(".bin"):
        fail(f"{path} is not a token shard (bad magic; expected {SHARD_MAGIC})")
    return np.fromfile(path, dtype=np.uint8).astype(np.int64)


@torch.no_grad()
def val_loss(model, tokens, B, T, M):
    """Mean over batches 0..M-1 of the batch's mean loss; returns (loss, M after capping)."""
    M = min(M, (len(tokens) - 1) // (B * T))
    if M < 1:
        fail(f"the data holds {len(tokens)} tokens, fewer than one batch of B*T+1 = {B * T + 1}")
    total = 0.0
    for i in range(M):
        rows = [tokens[(i * B + b) * T:(i * B + b) * T + T + 1] for b in range(B)]
        x = torch.from_numpy(np.stack(rows))
        total += float(model(x[:, :T], x[:, 1:])[1])
    return total / M, M


def build_model(cfg, params, dtype=torch.float64):
    model = GPT(cfg, dtype=dtype)
    with torch.no_grad():
        for name, t in model.named_tensors().items():
            t.copy_(params[name])
    return model.eval()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ckpt", help="train_gpt2.c checkpoint (version 2), or llm.c model file with --llmc")
    ap.add_argument("data", help="validation data: byte text or llm.c uint16 token shard")
    ap.add_argument("-b", type=int, default=12, help="batch size B (default 12)")
    ap.add_argument("-t", type=int, default=64, help="sequence length T (default 64)")
    ap.add_argument("-m", type=int, default=20, help="validation batches M (default 20)")
    ap.add_argument("--llmc", action="store_true", help="CKPT is an llm.c fp32 model file (version 3)")
    ap.add_argument("--float32", action="store_true", help="evaluate in float32 instead of float64")
    args = ap.parse_args()

    if args.llmc:
        cfg, params = load_llmc(args.ckpt)
        what = f"llm.c model {args.ckpt}"
    else:
        cfg, params, step = load_checkpoint(args.ckpt)
        what = f"checkpoint {args.ckpt} (step {step})"
    print(f"{what}: {cfg}")
    if args.b < 1 or args.t < 1 or args.m < 1:
        fail("-b, -t and -m must be at least 1")
    if args.t > cfg.maxT:
        fail(f"-t {args.t} exceeds the model's maxT {cfg.maxT}")
    tokens = load_tokens(args.data)
    if len(tokens) and tokens.max() >= cfg.V:
        fail(f"{args.data} holds token {tokens.max()}, outside the model's vocabulary {cfg.V}")
    model = build_model(cfg, params, torch.float32 if args.float32 else torch.float64)
    loss, M = val_loss(model, tokens, args.b, args.t, args.m)
    print(f"val loss over {M} batches (B={args.b} T={args.t}): {loss:.6f}")
