"""Writes test/fixtures/model_<name>.bin (format: doc/model.md, "Fixture files") after self-checks.

    /usr/bin/python3 dev/ref/make_fixtures.py

Each fixture: random float32 initial tensors, then everything in float64 from those values:
forward (logits, loss), backward (grads), `steps` AdamW steps on the same batch (clipping active).
"""
import math
import os
import struct
import sys
from dataclasses import replace

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config, GPT, adamw_step, clip_grads, decay_names, lr_at, param_shapes  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
OUT = os.path.join(ROOT, "test", "fixtures")

HP = dict(eps=1e-5, lr=1e-2, beta1=0.9, beta2=0.95, adam_eps=1e-8, weight_decay=0.1,
          warmup=2, steps=4, lr_floor=0.1, rope_theta=10000.0)   # clip is set per fixture

BASE = Config(V=50, maxT=12, L=2, C=16, H=4, KVH=4, F=40, eps=HP["eps"], rope_theta=HP["rope_theta"])
GPT2 = replace(BASE, norm="layernorm", mlp="gelu", pos="learned", bias=True, tied=True, gate=False)
LLAMA = replace(BASE, norm="rmsnorm", mlp="swiglu", pos="rope", bias=False, tied=False, gate=False, KVH=2)
FIXTURES = [  # name, seed, config, B, T
    ("gpt2", 1000, GPT2, 2, 7),
    ("gpt2_gate", 1001, replace(GPT2, gate=True), 2, 7),
    ("llama", 1002, LLAMA, 2, 7),
    ("llama_gate", 1003, replace(LLAMA, gate=True, KVH=1), 2, 7),
    ("llama_mha", 1004, replace(LLAMA, KVH=4), 2, 12),
    ("mixed", 1005, replace(BASE, norm="rmsnorm", mlp="gelu", pos="learned", bias=True, tied=False,
                            gate=True, KVH=2), 2, 7),
]
# muP (train_gpt2.c mup_configure) at width_mult 2 (C = 16, base 8): attention q.k/hd, logits x 1/2,
# hidden matrices (q k v gate o, MLP) lr x 1/2; embeddings, norms, biases and the readout lr x 1.
MUP_WIDTH_MULT = 2.0
MUP = replace(LLAMA, attn_scale=1.0 / LLAMA.hd, logit_scale=1.0 / MUP_WIDTH_MULT, gate=True)
MUP_HIDDEN = ("attn.wq", "attn.wk", "attn.wv", "attn.wg", "attn.wo", "mlp.wgate", "mlp.wup", "mlp.wdown")
MUP_MULTS = {n: 1.0 / MUP_WIDTH_MULT for n, s in param_shapes(MUP) if n.split(".", 2)[-1] in MUP_HIDDEN}


# --- fixture file writer / reader ------------------------------------------------------------------

DTYPES = {np.dtype("<f4"): 0, np.dtype("<i4"): 1, np.dtype("<f8"): 2}
NP_OF = {0: "<f4", 1: "<i4", 2: "<f8"}


def write_fixture(path, entries):
    """entries: list of (name, numpy array with dtype <f4, <i4 or <f8)."""
    with open(path, "wb") as f:
        f.write(b"INITFIX1" + struct.pack("<i", len(entries)))
        for name, a in entries:
            a = np.ascontiguousarray(a)
            nb = name.encode()
            f.write(struct.pack("<i", len(nb)) + nb)
            f.write(struct.pack("<ii", DTYPES[a.dtype], a.ndim) + struct.pack(f"<{a.ndim}i", *a.shape))
            f.write(a.tobytes())


def read_fixture(path):
    with open(path, "rb") as f:
        buf = f.read()
    assert buf[:8] == b"INITFIX1"
    (count,), off, out = struct.unpack_from("<i", buf, 8), 12, {}
    for _ in range(count):
        (n,) = struct.unpack_from("<i", buf, off); off += 4
        name = buf[off:off + n].decode(); off += n
        dt, nd = struct.unpack_from("<ii", buf, off); off += 8
        dims = struct.unpack_from(f"<{nd}i", buf, off); off += 4 * nd
        a = np.frombuffer(buf, NP_OF[dt], int(np.prod(dims)), off).reshape(dims); off += a.nbytes
        out[name] = a
    assert off == len(buf)
    return out


# --- the procedure -----------------------------------------------------------------------------------

def init_tensors(cfg, seed):
    """Random initial tensors, big enough that every tensor matters, rounded to float32."""
    torch.manual_seed(seed)
    out = {}
    for name, shape in param_shapes(cfg):
        kind = name.split(".")[-1]
        if name in ("wte", "wpe"):
            t = 0.5 * torch.randn(shape, dtype=torch.float64)
        elif len(shape) == 2:                              # matrices: std 1.2/sqrt(fan_in) (0.3 at C=16)
            t = (1.2 / math.sqrt(shape[1])) * torch.randn(shape, dtype=torch.float64)
        elif kind == "w":                                  # norm weights
            t = 1.0 + 0.1 * torch.randn(shape, dtype=torch.float64)
        else:                                              # biases
            t = 0.1 * torch.randn(shape, dtype=torch.float64)
        out[name] = t.float()
    return out


def cfg_ints(cfg, B, T):
    return np.array([cfg.V, cfg.maxT, cfg.L, cfg.C, cfg.H, cfg.KVH, cfg.F,
                     {"layernorm": 0, "rmsnorm": 1}[cfg.norm], {"gelu": 0, "swiglu": 1}[cfg.mlp],
                     {"learned": 0, "rope": 1}[cfg.pos], int(cfg.bias), int(cfg.tied), int(cfg.gate),
                     B, T], dtype="<i4")


def make_one(name, seed, cfg, B, T, mults=None):
    """mults (muP): name -> lr multiplier; the file then also holds "scales" = [attn_scale,
    logit_scale] and "lr_mult/NAME" for every tensor."""
    init = init_tensors(cfg, seed)
    tokens = torch.randint(0, cfg.V, (B, T + 1), dtype=torch.int32)
    idx, tgt = tokens[:, :T], tokens[:, 1:]

    model = GPT(cfg, dtype=torch.float64)
    P = model.named_tensors()
    with torch.no_grad():
        for n, p in P.items():
            p.copy_(init[n].double())                      # float64 from the float32 values

    logits, loss = model(idx, tgt)
    loss.backward()
    grads0 = {n: p.grad.detach().clone() for n, p in P.items()}
    clip = 0.5 * float(torch.sqrt(sum((g ** 2).sum() for g in grads0.values())))  # clipping fires

    decay = decay_names(cfg)
    state, step_loss, step_lr, step_norm = {}, [], [], []
    for s in range(HP["steps"]):
        model.zero_grad(set_to_none=True)
        _, l = model(idx, tgt)
        l.backward()
        norm = clip_grads(P.values(), clip)
        lr = lr_at(s, HP["lr"], HP["warmup"], HP["steps"], HP["lr_floor"])
        adamw_step(P, {n: p.grad for n, p in P.items()}, state, s + 1, lr,
                   HP["beta1"], HP["beta2"], HP["adam_eps"], HP["weight_decay"], decay, mults)
        step_loss.append(float(l)); step_lr.append(lr); step_norm.append(norm)
    assert step_norm[0] > clip, "clipping must be active on step 0"
    assert step_loss[0] == float(loss)

    hp = np.array([HP["eps"], HP["lr"], HP["beta1"], HP["beta2"], HP["adam_eps"], HP["weight_decay"],
                   clip, HP["warmup"], HP["steps"], HP["lr_floor"], HP["rope_theta"]], dtype="<f8")
    f8 = lambda t: t.detach().double().numpy().astype("<f8")
    entries = [("config", cfg_ints(cfg, B, T)), ("hparams", hp), ("tokens", tokens.numpy().astype("<i4"))]
    if mults is not None:
        entries += [("scales", np.array([cfg.attn_scale, cfg.logit_scale], dtype="<f8"))]
        entries += [(f"lr_mult/{n}", np.array([mults.get(n, 1.0)], dtype="<f8")) for n in P]
    entries += [(f"param/{n}", init[n].numpy().astype("<f4")) for n in P]
    entries += [("logits", f8(logits)), ("loss", np.array([float(loss)], dtype="<f8"))]
    entries += [(f"grad/{n}", f8(grads0[n])) for n in P]
    entries += [("step_loss", np.array(step_loss, "<f8")), ("step_lr", np.array(step_lr, "<f8")),
                ("step_gradnorm", np.array(step_norm, "<f8"))]
    entries += [(f"after/{n}", f8(p)) for n, p in P.items()]

    path = os.path.join(OUT, f"model_{name}.bin")
    write_fixture(path, entries)
    back = read_fixture(path)                              # round trip
    assert list(back) == [e[0] for e in entries]
    assert all(np.array_equal(back[k], a) for k, a in entries)
    n_clipped = sum(nrm > clip for nrm in step_norm)
    print(f"{path}: {os.path.getsize(path)} bytes, {len(P)} tensors, loss {float(loss):.6f}, "
          f"gradnorm {['%.4f' % x for x in step_norm]} clip {clip:.4f} (clipped {n_clipped}/{len(step_norm)}), "
          f"step_loss {['%.6f' % x for x in step_loss]}")


# --- self-checks -------------------------------------------------------------------------------------

def check_pieces():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 16, dtype=torch.float64)
    w, b = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
    from model import gelu_tanh, layernorm, rmsnorm, rope
    F = torch.nn.functional
    assert torch.allclose(layernorm(x, w, b, 1e-5), F.layer_norm(x, (16,), w, b, 1e-5), atol=1e-13)
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
    assert torch.allclose(rmsnorm(x, w, 1e-5), ref, atol=1e-13)
    assert torch.allclose(gelu_tanh(x), F.gelu(x, approximate="tanh"), atol=1e-13)
    # RoPE against the complex-number form (Meta's LLaMA: consecutive pairs as complex numbers)
    q = torch.randn(2, 3, 9, 8, dtype=torch.float64)
    ang = torch.arange(9, dtype=torch.float64)[:, None] * 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    zc = torch.view_as_complex(q.reshape(2, 3, 9, 4, 2).contiguous()) * torch.polar(torch.ones_like(ang), ang)
    assert torch.allclose(rope(q, 10000.0), torch.view_as_real(zc).flatten(-2), atol=1e-13)
    # loss = F.cross_entropy and float32 runs (dtype-agnostic)
    cfg = replace(FIXTURES[5][2])
    for dt in (torch.float64, torch.float32):
        m = GPT(cfg, dtype=dt)
        with torch.no_grad():
            for n, p in m.named_tensors().items():
                p.copy_(init_tensors(cfg, 7)[n])
        idx = torch.randint(0, cfg.V, (2, 6))
        tg = torch.randint(0, cfg.V, (2, 6))
        logits, loss = m(idx, tg)
        ce = F.cross_entropy(logits.view(-1, cfg.V), tg.view(-1))
        assert logits.dtype == dt and abs(float(loss) - float(ce)) < (1e-12 if dt == torch.float64 else 1e-5)
    # causality: changing a later token leaves earlier logits unchanged
    m = GPT(LLAMA, dtype=torch.float64)
    with torch.no_grad():
        for n, p in m.named_tensors().items():
            p.copy_(init_tensors(LLAMA, 8)[n])
    idx = torch.randint(0, LLAMA.V, (1, 7)); idx2 = idx.clone(); idx2[0, 5] = (idx[0, 5] + 1) % LLAMA.V
    a, _ = m(idx); b2, _ = m(idx2)
    assert torch.equal(a[:, :5], b2[:, :5]) and not torch.allclose(a[:, 5], b2[:, 5])
    print("check: norms, gelu, rope (complex form), cross-entropy, float32, causality OK")


def check_gradcheck():
    for name, cfg in (("mixed", FIXTURES[5][2]), ("llama_gate", FIXTURES[3][2]), ("gpt2_gate", FIXTURES[1][2])):
        cfg = replace(cfg, V=11, maxT=5, F=6)
        m = GPT(cfg, dtype=torch.float64)
        names = list(m.named_tensors())
        init = init_tensors(cfg, 3)
        inputs = tuple(init[n].double().requires_grad_(True) for n in names)
        idx = torch.randint(0, cfg.V, (2, 4)); tg = torch.randint(0, cfg.V, (2, 4))
        f = lambda *ts: m(idx, tg, tensors=dict(zip(names, ts)))[1]
        assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)
        print(f"check: gradcheck {name}-like tiny model ({len(names)} tensors) OK")


def check_adamw():
    cfg = FIXTURES[5][2]
    torch.manual_seed(5)
    init = init_tensors(cfg, 11)
    decay = decay_names(cfg)
    mine = {n: t.double().clone() for n, t in init.items()}
    theirs = {n: torch.nn.Parameter(t.double().clone()) for n, t in init.items()}
    kw = dict(betas=(0.9, 0.95), eps=1e-8)
    groups = [{"params": [theirs[n] for n in theirs if n in decay], "weight_decay": 0.1},
              {"params": [theirs[n] for n in theirs if n not in decay], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-2, **kw)
    state, worst = {}, 0.0
    for s in range(4):
        lr = lr_at(s, 1e-2, 2, 4, 0.1)
        grads = {n: torch.randn_like(t) for n, t in mine.items()}
        adamw_step(mine, grads, state, s + 1, lr, 0.9, 0.95, 1e-8, 0.1, decay)
        for gr in opt.param_groups:
            gr["lr"] = lr
        for n, p in theirs.items():
            p.grad = grads[n].clone()
        opt.step()
        worst = max(worst, max(float((mine[n] - theirs[n]).abs().max()) for n in mine))
    assert worst <= 1e-15, worst
    assert {"h.0.attn.wg", "lm_head", "h.1.mlp.wdown"} <= decay and not {"wte", "wpe", "lnf.w", "h.0.attn.bg"} & decay
    print(f"check: hand AdamW == torch.optim.AdamW (2 groups, 4 steps, float64), max diff {worst:.1e} OK")


def check_lr():
    eta, fl = 1e-2, 0.1
    for s, want in [(0, eta / 2), (1, eta), (2, eta)]:               # the fixtures' warmup=2, steps=3
        assert abs(lr_at(s, eta, 2, 3, fl) - want) < 1e-17
    for s, want in [(0, eta / 10), (9, eta), (10, eta), (55, eta * fl + 0.5 * (eta - eta * fl)),
                    (100, eta * fl), (32, eta * fl + 0.5 * (1 + math.cos(math.pi * 22 / 90)) * eta * (1 - fl))]:
        assert abs(lr_at(s, eta, 10, 100, fl) - want) < 1e-17, (s, lr_at(s, eta, 10, 100, fl), want)
    print("check: lr schedule OK")


if __name__ == "__main__":
    torch.set_printoptions(precision=10)
    check_pieces()
    check_lr()
    check_adamw()
    check_gradcheck()
    os.makedirs(OUT, exist_ok=True)
    for name, seed, cfg, B, T in FIXTURES:
        make_one(name, seed, cfg, B, T)
    make_one("mup", 1006, MUP, 2, 7, MUP_MULTS)
