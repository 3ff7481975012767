"""Writes test/fixtures/init_torch.bin: PyTorch CPU RNG / nn.init outputs for the C reimplementation.

    /usr/bin/python3 dev/ref/make_init_fixtures.py          # the repo fixture (small)
    /usr/bin/python3 dev/ref/make_init_fixtures.py --full OUT.bin   # the big sweep

Must run with PyTorch 1.13 on an x86-64 CPU with its default AVX2 kernels (ATEN_CPU_CAPABILITY unset,
"avx2" or "avx512" give the same values; "default" does not: no FMA, different bits).

File format (little-endian):
    char magic[8] = "INITFIX1"; int32 count;
    count x { int32 name_len; char name[name_len]; int32 dtype (0=float32, 1=int32, 2=float64);
              int32 ndim; int32 dims[ndim]; data, row-major }

A name encodes the call: "<op>/key=value/...", values are Python repr()s so C's strtod reads back the
exact same double. Every case starts with torch.manual_seed(seed), except sequences:
"seq/seed=S/k=K/op=<op>/..." entries are the K-th call on one generator, seeded only at k=0.
Ops (2-D ops are on a (rows, cols) float32 tensor):
    uniform        n a b               torch.empty(n).uniform_(a, b)
    uniform_f64    n                   torch.empty(n, dtype=float64).uniform_()   (random64 order)
    normal         n mean std          torch.empty(n).normal_(mean, std)
    trunc_normal   n mean std a b      nn.init.trunc_normal_
    kaiming_uniform rows cols a        nn.init.kaiming_uniform_(w, a=a)   (fan_in, leaky_relu)
    kaiming_normal  rows cols a        nn.init.kaiming_normal_(w, a=a)    (fan_in, leaky_relu)
    xavier_uniform  rows cols gain     nn.init.xavier_uniform_(w, gain)
    xavier_normal   rows cols gain     nn.init.xavier_normal_(w, gain)
    orthogonal      rows cols gain     nn.init.orthogonal_(w, gain)   (C side: tolerance, not bitwise)
    sparse          rows cols sparsity std   nn.init.sparse_(w, sparsity, std)
    randperm        n                  torch.randperm(n) as int32
    scheme          rows cols text     train_gpt2.c's init_matrix_text(text) on (rows, cols), written
                                       here as the nn.init call it stands for (scheme_call)
    model           preset recipe      a whole model initialized by the -I recipe: every tensor, in
                                       train_gpt2.c's table order (wte, wpe, h.0.*, h.1.*, lnf.*,
                                       lm_head), concatenated; one generator seeded once; each
                                       tensor drawn the way the recipe's own code draws it (recipe_call)
"""
import math
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config, param_shapes  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
OUT = os.path.join(ROOT, "test", "fixtures", "init_torch.bin")

SEEDS = [0, 1, 42, 1337, 2**32 + 5]
SIZES = [1, 2, 15, 16, 17, 31, 32, 33, 100, 1000, 4097]
TRUNC = [(0.0, 0.02, -2.0, 2.0), (0.0, 1.0, -2.0, 2.0), (0.0, 0.02, -0.04, 0.04)]
ORTHO_SHAPES = [(8, 8), (16, 4), (4, 16), (64, 64)]


def fmt(**kw):
    return "/".join(f"{k}={v!r}" for k, v in kw.items())


def run_op(op, p):
    """Runs one call on the default generator; p holds the parameters from the name."""
    init = torch.nn.init
    if op == "uniform":
        return torch.empty(p["n"]).uniform_(p["a"], p["b"])
    if op == "uniform_f64":
        return torch.empty(p["n"], dtype=torch.float64).uniform_()
    if op == "normal":
        return torch.empty(p["n"]).normal_(p["mean"], p["std"])
    if op == "trunc_normal":
        return init.trunc_normal_(torch.empty(p["n"]), p["mean"], p["std"], p["a"], p["b"])
    if op == "randperm":
        return torch.randperm(p["n"]).to(torch.int32)
    w = torch.empty(p["rows"], p["cols"])
    if op == "kaiming_uniform":
        return init.kaiming_uniform_(w, a=p["a"])
    if op == "kaiming_normal":
        return init.kaiming_normal_(w, a=p["a"])
    if op == "xavier_uniform":
        return init.xavier_uniform_(w, gain=p["gain"])
    if op == "xavier_normal":
        return init.xavier_normal_(w, gain=p["gain"])
    if op == "orthogonal":
        return init.orthogonal_(w, gain=p["gain"])
    if op == "sparse":
        return init.sparse_(w, p["sparsity"], p["std"])
    if op == "scheme":
        return scheme_call(w, p["text"])
    raise ValueError(op)


# Each -I scheme of train_gpt2.c as the PyTorch call it claims to equal (independent of the C code:
# written from nn.init's documentation). fan_in = cols, fan_out = rows as in nn.init.
def scheme_call(w, text):
    init = torch.nn.init
    name, *args = text.split(":")
    num = [float(a) for a in args if a not in ("fan_in", "fan_out") and not a[0].isalpha()]
    words = [a for a in args if a[0].isalpha() and a not in ("fan_in", "fan_out")]
    mode = "fan_out" if "fan_out" in args else "fan_in"
    fan_in = w.shape[1]
    if name == "zeros":
        return init.zeros_(w)
    if name == "ones":
        return init.ones_(w)
    if name == "constant":
        return init.constant_(w, num[0])
    if name in ("normal", "sigma"):
        default = 1.0 if name == "normal" else 0.02
        return init.normal_(w, *num) if len(num) == 2 else init.normal_(w, 0.0, num[0] if num else default)
    if name == "uniform":
        return init.uniform_(w, *num) if len(num) == 2 else init.uniform_(w, -num[0], num[0]) if num else init.uniform_(w)
    if name == "trunc_normal":
        return init.trunc_normal_(w, 0.0, num[0], num[1], num[2]) if len(num) == 3 else init.trunc_normal_(w, std=num[0] if num else 1.0)
    if name == "trunc_sigma":
        k = num[1] if len(num) == 2 else 2.0
        return init.trunc_normal_(w, 0.0, num[0], -k * num[0], k * num[0])
    if name == "eye":
        return init.eye_(w)
    if name == "sparse":
        return init.sparse_(w, num[0], num[1] if len(num) == 2 else 0.01)
    if name == "lecun_normal":
        return init.kaiming_normal_(w, nonlinearity="linear")
    if name == "lecun_uniform":
        return init.kaiming_uniform_(w, nonlinearity="linear")
    if name == "xavier_normal":
        return init.xavier_normal_(w, *num)
    if name == "xavier_uniform":
        return init.xavier_uniform_(w, *num)
    if name in ("kaiming_normal", "kaiming_uniform"):
        f = init.kaiming_normal_ if name == "kaiming_normal" else init.kaiming_uniform_
        return f(w, a=num[0] if num else 0.0, mode=mode, nonlinearity=words[0] if words else "relu")
    if name == "torch_linear":
        return init.kaiming_uniform_(w, a=math.sqrt(5))       # nn.Linear.reset_parameters
    if name == "orthogonal":
        return init.orthogonal_(w, *num)
    if name == "gamma":
        return init.normal_(w, 0.0, fan_in ** -num[0])
    if name == "small_init":
        return init.normal_(w, 0.0, math.sqrt(2.0 / (5.0 * fan_in)))
    if name == "trunc_lecun":
        std, k = 1.0 / math.sqrt(fan_in), num[0] if num else 3.0
        return init.trunc_normal_(w, 0.0, std, -k * std, k * std)
    raise ValueError(text)


SCHEMES = ["zeros", "ones", "constant:0.5", "normal", "normal:0.01", "normal:0.1:0.02", "uniform",
           "uniform:0.1", "uniform:-0.1:0.3", "trunc_normal:0.02", "trunc_normal:1", "trunc_normal:0.5:-0.3:0.6",
           "trunc_sigma:0.02", "trunc_sigma:0.02:3", "eye", "sparse:0.3", "sparse:0.5:0.02", "lecun_normal",
           "lecun_uniform", "xavier_normal", "xavier_normal:1.6667", "xavier_uniform", "xavier_uniform:1.6667",
           "kaiming_normal", "kaiming_normal:relu", "kaiming_normal:leaky_relu:0.2", "kaiming_normal:tanh",
           "kaiming_normal:selu", "kaiming_normal:sigmoid", "kaiming_normal:relu:fan_out", "kaiming_uniform",
           "kaiming_uniform:leaky_relu:0.2", "kaiming_uniform:linear:fan_out", "kaiming_uniform:leaky_relu",
           "torch_linear", "orthogonal", "orthogonal:1.414", "sigma", "sigma:0.05", "gamma:0.5", "gamma:1",
           "small_init", "trunc_lecun", "trunc_lecun:2"]
SCHEME_SHAPES = [(12, 20), (20, 12), (3, 5)]      # (3, 5): normal_'s n < 16 path


def single(op, seed, **p):
    torch.manual_seed(seed)
    return (f"{op}/seed={seed!r}/" + fmt(**p), run_op(op, p))


def sequence(seed, calls):
    """Several calls on one generator (tests e.g. the cached second normal of the n<16 path)."""
    torch.manual_seed(seed)
    out = []
    for k, (op, p) in enumerate(calls):
        out.append((f"seq/seed={seed!r}/k={k}/op={op}/" + fmt(**p), run_op(op, p)))
    return out


SEQS = [
    (1, [("uniform", dict(n=5, a=0.0, b=1.0)), ("normal", dict(n=3, mean=0.0, std=1.0)),
         ("normal", dict(n=3, mean=0.0, std=1.0)), ("normal", dict(n=20, mean=0.0, std=1.0)),
         ("normal", dict(n=1, mean=0.5, std=2.0)), ("normal", dict(n=2, mean=0.0, std=0.02)),
         ("uniform", dict(n=17, a=-1.0, b=1.0))]),
    (42, [("trunc_normal", dict(n=7, mean=0.0, std=0.02, a=-2.0, b=2.0)), ("normal", dict(n=15, mean=0.0, std=1.0)),
          ("sparse", dict(rows=10, cols=6, sparsity=0.3, std=0.01)), ("normal", dict(n=1, mean=0.0, std=1.0)),
          ("kaiming_uniform", dict(rows=8, cols=4, a=math.sqrt(5))), ("randperm", dict(n=7)),
          ("normal", dict(n=33, mean=0.0, std=0.02))]),
    (2**32 + 5, [("normal", dict(n=1, mean=0.0, std=1.0)), ("normal", dict(n=1, mean=0.0, std=1.0)),
                 ("normal", dict(n=1, mean=0.0, std=1.0)), ("uniform_f64", dict(n=3)),
                 ("normal", dict(n=16, mean=0.0, std=1.0)), ("normal", dict(n=1, mean=0.0, std=1.0))]),
]


# --- whole-model recipes ---------------------------------------------------------------------------
# Tiny models of both presets (gate on, to cover attn.wg); train_gpt2.c builds the same from the name.
TINY = dict(V=12, maxT=4, L=2, C=8, H=2, F=16)
PRESETS = {
    "gpt2": Config(**TINY, KVH=2, norm="layernorm", mlp="gelu", pos="learned", bias=True, tied=True, gate=True),
    "llama": Config(**TINY, KVH=1, norm="rmsnorm", mlp="swiglu", pos="rope", bias=False, tied=False, gate=True),
}
MODEL_CASES = [("gpt2", r) for r in ("gpt2", "hf_llama", "zero_resid", "depth_scaled", "small_init", "deepnet",
                                     "gamma:0.75", "xavier_uniform,out=zeros,emb=normal:0.01")] + \
              [("llama", r) for r in ("llama", "olmo_mitchell", "mup", "deepnet", "gpt2", "kaiming_uniform:tanh")]


def table_order(cfg):
    """(name, shape, layer) in train_gpt2.c's tensor table order: param_shapes is kind by kind over
    the layers; the table is layer by layer (a stable sort keeps the kinds' order inside a layer)."""
    def key(item):
        name = item[0]
        if name.startswith("h."):
            return (1, int(name.split(".")[1]))
        return (0 if name in ("wte", "wpe") else 2, 0)
    out = []
    for name, shape in sorted(param_shapes(cfg), key=key):
        out.append((name, shape, int(name.split(".")[1]) if name.startswith("h.") else -1))
    return out


def group_of(name):
    kind = name.split(".")[-1]
    if name in ("wte", "wpe", "lm_head"):
        return {"wte": "emb", "wpe": "pos", "lm_head": "head"}[name]
    if kind == "w":
        return "norm"
    if kind.startswith("b"):
        return "bias"
    return {"wq": "qkv", "wk": "qkv", "wv": "qkv", "wg": "gate", "wo": "out", "wgate": "up", "wup": "up",
            "wdown": "down"}[kind]


def recipe_call(recipe, cfg, name, w, layer):
    """Draws one tensor the way the recipe's source does (nanoGPT, HF, OLMo, DeepNet, mup, [InitGuide])."""
    init, g = torch.nn.init, group_of(name)
    if g == "norm":
        return init.ones_(w)
    if g == "bias":
        return init.zeros_(w)
    fan_in, L, kind = w.shape[1], cfg.L, name.split(".")[-1]
    resid = kind in ("wo", "wdown")
    if recipe == "gpt2":                        # nanoGPT _init_weights + c_proj special case
        return init.normal_(w, 0.0, 0.02 / math.sqrt(2 * L) if resid else 0.02)
    if recipe == "hf_llama":                    # LlamaPreTrainedModel._init_weights
        return init.normal_(w, 0.0, 0.02)
    if recipe == "zero_resid":
        return init.zeros_(w) if resid else init.normal_(w, 0.0, 0.02)
    if recipe == "depth_scaled":                # 0.02 / sqrt(2 (layer_id + 1)) on the output projections
        return init.normal_(w, 0.0, 0.02 / (2 * (layer + 1)) ** 0.5 if resid else 0.02)
    if recipe == "small_init":                  # GPT-NeoX small_init_init_method(dim)
        return init.normal_(w, 0.0, math.sqrt(2 / (5 * cfg.C)))
    if recipe == "deepnet":                     # torchscale DeepNet: xavier_normal_(p, gain=beta)
        beta = (8 * L) ** -0.25 if resid or kind in ("wv", "wup", "wgate") else 1.0
        return init.xavier_normal_(w, gain=beta)
    if recipe == "olmo_mitchell":               # OLMo init_weights, InitFnType.mitchell, cutoff 3
        std = 1.0 / math.sqrt(2 * fan_in * (layer + 1)) if resid else 1.0 / math.sqrt(fan_in)
        return init.trunc_normal_(w, mean=0.0, std=std, a=-3.0 * std, b=3.0 * std)
    if recipe == "mup":                         # mup package: MuReadout zero, hidden 1/fan_in, nn.Embedding
        if g == "head":
            return init.zeros_(w)
        return init.normal_(w, 0.0, 1.0) if g in ("emb", "pos") else init.kaiming_normal_(w, nonlinearity="linear")
    if recipe == "llama":                       # [InitGuide ch. 7]: embeddings 1/sqrt(d), He, residual / sqrt(2L)
        if g in ("emb", "pos"):
            return init.normal_(w, 0.0, 1.0 / math.sqrt(cfg.C))
        return init.normal_(w, 0.0, math.sqrt(2.0) / math.sqrt(fan_in) / math.sqrt(2 * L)) if resid else \
            init.kaiming_normal_(w, nonlinearity="relu")
    if recipe == "gamma:0.75":                  # [SmallInit §4.2], wte/wpe (n, d): d^-gamma
        return init.normal_(w, 0.0, fan_in ** -0.75)
    if recipe == "kaiming_uniform:tanh":
        return init.kaiming_uniform_(w, nonlinearity="tanh")
    if recipe == "xavier_uniform,out=zeros,emb=normal:0.01":
        return init.zeros_(w) if g == "out" else init.normal_(w, 0.0, 0.01) if g == "emb" else init.xavier_uniform_(w)
    raise ValueError(recipe)


def model_case(preset, recipe, seed):
    cfg = PRESETS[preset]
    torch.manual_seed(seed)
    parts = []
    for name, shape, layer in table_order(cfg):
        parts.append(recipe_call(recipe, cfg, name, torch.empty(shape), layer).flatten())
    return (f"model/seed={seed!r}/" + fmt(preset=preset, recipe=recipe), torch.cat(parts))


def cases(full):
    out = []
    for seed in SEEDS:
        # the repo fixture keeps every size for seed 42 only, and small sizes for the other seeds
        sizes = SIZES if (full or seed == 42) else [n for n in SIZES if n <= 100]
        for n in sizes:
            out.append(single("uniform", seed, n=n, a=-0.5, b=0.5))
            out.append(single("normal", seed, n=n, mean=0.0, std=1.0))
            if full:
                out.append(single("uniform", seed, n=n, a=0.0, b=1.0))
                out.append(single("normal", seed, n=n, mean=0.1, std=0.02))
        for (mean, std, a, b) in TRUNC:
            for n in (SIZES if full else [15, 17, 1000] if seed in (0, 42) else [17]):
                out.append(single("trunc_normal", seed, n=n, mean=mean, std=std, a=a, b=b))
        if full or seed in (0, 1337):
            out.append(single("kaiming_uniform", seed, rows=64, cols=32, a=math.sqrt(5)))
            out.append(single("kaiming_normal", seed, rows=48, cols=32, a=0.0))
            out.append(single("xavier_uniform", seed, rows=32, cols=48, gain=1.0))
            out.append(single("xavier_normal", seed, rows=32, cols=48, gain=1.0))
        if full or seed in (0, 1):
            for (r, c) in ORTHO_SHAPES:
                for gain in ([1.0, math.sqrt(2)] if full else [[1.0], [math.sqrt(2)]][seed]):
                    out.append(single("orthogonal", seed, rows=r, cols=c, gain=gain))
        out.append(single("sparse", seed, rows=10, cols=6, sparsity=0.3, std=0.01))
        for n in ([1, 2, 5, 10, 100, 1000] if full else [2, 10, 100]):
            out.append(single("randperm", seed, n=n))
        out.append(single("uniform_f64", seed, n=100 if full else 9))
    for seed, calls in SEQS:
        out.extend(sequence(seed, calls))
    for i, text in enumerate(SCHEMES):
        for j, (r, c) in enumerate(SCHEME_SHAPES):
            out.append(single("scheme", 100 + i + j, rows=r, cols=c, text=text))
    for i, (preset, recipe) in enumerate(MODEL_CASES):
        out.append(model_case(preset, recipe, 500 + i))
    return out


def write(path, entries):
    dtypes = {torch.float32: (0, "f"), torch.int32: (1, "i"), torch.float64: (2, "d")}
    with open(path, "wb") as f:
        f.write(b"INITFIX1")
        f.write(struct.pack("<i", len(entries)))
        for name, t in entries:
            code, ch = dtypes[t.dtype]
            nb = name.encode()
            f.write(struct.pack("<i", len(nb)) + nb)
            f.write(struct.pack("<ii", code, t.dim()))
            f.write(struct.pack(f"<{t.dim()}i", *t.shape))
            vals = t.contiguous().flatten().tolist()
            f.write(struct.pack(f"<{len(vals)}{ch}", *vals))


def main():
    assert torch.__version__.startswith("1.13"), "fixtures are defined by PyTorch 1.13 CPU semantics"
    full = "--full" in sys.argv
    path = sys.argv[sys.argv.index("--full") + 1] if full else OUT
    entries = cases(full)
    write(path, entries)
    print(f"wrote {path}: {len(entries)} cases, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
