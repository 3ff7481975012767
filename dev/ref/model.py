"""PyTorch reference for the model of doc/model.md (nanoGPT style, named after the math).

Everything here follows doc/model.md, which is the contract with train_gpt2.c / train_gpt2.cu.
Parameter tensors carry exactly the doc's names ("wte", "h.0.attn.wq", "lnf.w", ...), in the doc's
order (kind by kind, each kind holding all L layers). The module is dtype-agnostic: the fixtures run
it in float64, benchmarks may run it in float32.
"""
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    V: int = 256                # vocabulary size
    maxT: int = 256             # rows of wpe (largest sequence length)
    L: int = 2                  # blocks
    C: int = 64                 # width d
    H: int = 4                  # attention heads, hd = C / H
    KVH: int = 4                # key/value heads (GQA), divides H
    F: int = 256                # MLP hidden width
    norm: str = "layernorm"     # "layernorm" | "rmsnorm"
    mlp: str = "gelu"           # "gelu" (tanh) | "swiglu"
    pos: str = "learned"        # "learned" | "rope"
    bias: bool = True           # biases on every linear layer
    tied: bool = True           # lm_head is wte
    gate: bool = False          # gated attention [SmallInit eqs. 3-4]
    eps: float = 1e-5           # norm epsilon, inside the square root
    rope_theta: float = 10000.0
    attn_scale: Optional[float] = None  # None = 1/sqrt(hd)
    logit_scale: float = 1.0

    @property
    def hd(self):
        return self.C // self.H


def param_shapes(cfg):
    """(name, shape) of every tensor, in the order of the doc's table, kind by kind over layers."""
    c, hd, L = cfg, cfg.hd, cfg.L
    lnb = cfg.norm == "layernorm"   # LayerNorm has a bias, RMSNorm has not
    sw = cfg.mlp == "swiglu"
    top = [("wte", (c.V, c.C), True), ("wpe", (c.maxT, c.C), c.pos == "learned")]
    per_layer = [
        ("ln1.w", (c.C,), True), ("ln1.b", (c.C,), lnb),
        ("attn.wq", (c.H * hd, c.C), True), ("attn.bq", (c.H * hd,), c.bias),
        ("attn.wk", (c.KVH * hd, c.C), True), ("attn.bk", (c.KVH * hd,), c.bias),
        ("attn.wv", (c.KVH * hd, c.C), True), ("attn.bv", (c.KVH * hd,), c.bias),
        ("attn.wg", (c.H, c.C), c.gate), ("attn.bg", (c.H,), c.gate and c.bias),
        ("attn.wo", (c.C, c.H * hd), True), ("attn.bo", (c.C,), c.bias),
        ("ln2.w", (c.C,), True), ("ln2.b", (c.C,), lnb),
        ("mlp.wgate", (c.F, c.C), sw), ("mlp.bgate", (c.F,), sw and c.bias),
        ("mlp.wup", (c.F, c.C), True), ("mlp.bup", (c.F,), c.bias),
        ("mlp.wdown", (c.C, c.F), True), ("mlp.bdown", (c.C,), c.bias),
    ]
    bottom = [("lnf.w", (c.C,), True), ("lnf.b", (c.C,), lnb), ("lm_head", (c.V, c.C), not c.tied)]
    out = [(n, s) for n, s, on in top if on]
    for kind, s, on in per_layer:
        if on:
            out += [(f"h.{l}.{kind}", s) for l in range(L)]
    out += [(n, s) for n, s, on in bottom if on]
    return out


# --- the pieces, written from the formulas of doc/model.md ---------------------------------------

def layernorm(x, w, b, eps):
    # [SmallInit eq. 1]: (x - mu) / sqrt(sigma^2 + eps) * w + b, sigma^2 the biased variance over C
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def rmsnorm(x, w, eps):
    # [SmallInit eq. 2]: x / sqrt(mean(x^2) + eps) * w
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def gelu_tanh(x):
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def linear(x, w, b=None):
    # nn.Linear convention: y = x W^T + b, W of shape (out, in)
    y = x @ w.t()
    return y if b is None else y + b


def rope(x, theta):
    """x: (B, heads, T, hd). Pair j = (2j, 2j+1) rotates by angle t * theta^(-2j/hd), t from 0."""
    T, hd = x.shape[-2], x.shape[-1]
    j = torch.arange(hd // 2, dtype=x.dtype, device=x.device)
    t = torch.arange(T, dtype=x.dtype, device=x.device)
    ang = t[:, None] * theta ** (-2.0 * j / hd)          # (T, hd/2)
    cos, sin = torch.cos(ang), torch.sin(ang)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


class GPT(nn.Module):
    def __init__(self, cfg, dtype=torch.float32, device=None):
        super().__init__()
        self.cfg = cfg
        self._names = []
        for name, shape in param_shapes(cfg):
            # nn.Module forbids '.' in parameter names; register as h_0_attn_wq, look up by doc name
            self.register_parameter(name.replace(".", "_"),
                                    nn.Parameter(torch.zeros(shape, dtype=dtype, device=device)))
            self._names.append(name)

    def named_tensors(self):
        """OrderedDict doc-name -> Parameter, in the doc's order."""
        return OrderedDict((n, getattr(self, n.replace(".", "_"))) for n in self._names)

    def forward(self, idx, targets=None, tensors=None):
        """idx: (B, T) token ids. Returns (logits (B,T,V), loss or None).
        `tensors` (doc-name -> tensor) overrides the module's parameters (used by gradcheck)."""
        c = self.cfg
        p = self.named_tensors() if tensors is None else tensors
        g = lambda name: p.get(name)  # None when the tensor is absent (e.g. no biases)
        B, T = idx.shape
        hd, rep = c.hd, c.H // c.KVH
        scale = c.attn_scale if c.attn_scale is not None else 1.0 / math.sqrt(hd)

        def norm(x, prefix):
            if c.norm == "layernorm":
                return layernorm(x, p[prefix + ".w"], p[prefix + ".b"], c.eps)
            return rmsnorm(x, p[prefix + ".w"], c.eps)

        x = p["wte"][idx.long()]                                # (B,T,C)
        if c.pos == "learned":
            x = x + p["wpe"][:T]
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=idx.device))
        for l in range(c.L):
            a = f"h.{l}.attn."
            n = norm(x, f"h.{l}.ln1")
            q = linear(n, p[a + "wq"], g(a + "bq")).view(B, T, c.H, hd).transpose(1, 2)
            # (without RoPE, bk only adds q.bk to a whole softmax row, so its gradient is exactly 0)
            k = linear(n, p[a + "wk"], g(a + "bk")).view(B, T, c.KVH, hd).transpose(1, 2)
            v = linear(n, p[a + "wv"], g(a + "bv")).view(B, T, c.KVH, hd).transpose(1, 2)
            if c.pos == "rope":                                 # after the biases
                q, k = rope(q, c.rope_theta), rope(k, c.rope_theta)
            # GQA: query head h reads kv head h // (H/KVH)
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            att = scale * (q @ k.transpose(-2, -1))             # (B,H,T,T)
            att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
            y = att @ v                                         # (B,H,T,hd)
            if c.gate:
                # [SmallInit eqs. 3-4]: one sigmoid gate per head and position, from the normed input
                gt = torch.sigmoid(linear(n, p[a + "wg"], g(a + "bg")))   # (B,T,H)
                y = y * gt.transpose(1, 2).unsqueeze(-1)
            y = y.transpose(1, 2).reshape(B, T, c.H * hd)       # concat heads
            x = x + linear(y, p[a + "wo"], g(a + "bo"))

            m = f"h.{l}.mlp."
            n = norm(x, f"h.{l}.ln2")
            if c.mlp == "gelu":
                hmid = gelu_tanh(linear(n, p[m + "wup"], g(m + "bup")))
            else:  # swiglu
                hmid = F.silu(linear(n, p[m + "wgate"], g(m + "bgate"))) * linear(n, p[m + "wup"], g(m + "bup"))
            x = x + linear(hmid, p[m + "wdown"], g(m + "bdown"))

        W = p["wte"] if c.tied else p["lm_head"]
        logits = c.logit_scale * linear(norm(x, "lnf"), W)      # (B,T,V)
        loss = None
        if targets is not None:
            # mean over the B*T positions of -log softmax(logits)[target]
            logp = logits.log_softmax(dim=-1)
            loss = -logp.gather(-1, targets.long().unsqueeze(-1)).mean()
        return logits, loss


# --- optimizer pieces ----------------------------------------------------------------------------

def decay_names(cfg, decay_emb=False):
    """Decayed tensors: every matrix except wte and wpe (unless decay_emb); never norms or biases."""
    return {n for n, s in param_shapes(cfg)
            if len(s) == 2 and (decay_emb or n not in ("wte", "wpe"))}


def lr_at(step, lr, warmup, steps, floor):
    """doc/model.md schedule; step counted from 0 of `steps`: linear warmup, then cosine to lr*floor."""
    if step < warmup:
        return lr * (step + 1) / warmup
    lr_min = lr * floor
    return lr_min + 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / (steps - warmup))) * (lr - lr_min)


def clip_grads(params, clip):
    """Global-norm clipping (PyTorch clip_grad_norm_); returns the norm before clipping."""
    params = [p for p in params if p.grad is not None]
    if clip > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, clip))
    return float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params)))


@torch.no_grad()
def adamw_step(params, grads, state, step, lr, beta1, beta2, eps, weight_decay, decay_names, mults=None):
    """One AdamW step [AdamW], in place. [ComplexCtl eq. 1]: decoupled weight decay, C = eta_t.
    params/grads: name -> tensor; state: name -> {"m","v"} (created on first use);
    step: t counted from 1; lr: the scheduled eta_t; mults: optional name -> lr multiplier (muP)."""
    bc1, bc2 = 1.0 - beta1 ** step, 1.0 - beta2 ** step
    for name, theta in params.items():
        g = grads[name]
        lr_p = lr * (mults.get(name, 1.0) if mults else 1.0)
        st = state.setdefault(name, {"m": torch.zeros_like(theta), "v": torch.zeros_like(theta)})
        m, v = st["m"], st["v"]
        if name in decay_names:
            theta.mul_(1.0 - lr_p * weight_decay)              # theta *= (1 - lr*lambda)
        m.mul_(beta1).add_(g, alpha=1.0 - beta1)               # m = b1 m + (1-b1) g
        v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)        # v = b2 v + (1-b2) g^2
        denom = (v.sqrt() / math.sqrt(bc2)).add_(eps)          # sqrt(v)/sqrt(1-b2^t) + eps
        theta.addcdiv_(m, denom, value=-lr_p / bc1)            # theta -= lr/(1-b1^t) * m/denom
