#!/usr/bin/env python3
"""Classroom labs II (doc/labs/README_llm.md): small initialization, complexity control and muP in the
transformer of train_gpt2.c. Each lab trains the runs it needs (cached, see llm_runs.py), then writes
llm_NAME.csv and llm_NAME*.png into out/labs/NAME/ (git-ignored; NAME with dashes, as in make lab-NAME);
the committed doc/labs/llm_NAME.csv and .png are written only by make lab-publish (--out doc/labs), and
the write-up doc/labs/llm_NAME.md is by hand.

    dev/labs/llm_labs.py NAME [NAME ...] [--scale cpu|gpu] [--jobs 2] [--threads 1] [--bin PATH] [--out DIR]
                         [--runs DIR]
    dev/labs/llm_labs.py all
    dev/labs/llm_labs.py NAME [NAME ...] --replot --out DIR [--scale cpu|gpu]     (or all --replot)

Names: norm_eps sinks resflow how_small tokens condense complexity qkv mup compose.
--scale cpu (default) is sized for 2 CPU cores, a few minutes per lab; --scale gpu is the larger
setting and writes to out/labs/gpu/ unless --out says otherwise. --bin defaults to ./train_gpt2cu at
GPU scale when it is built and nvidia-smi finds a GPU, but only for runs whose flags it accepts (its
-h lists them); every other run uses ./train_gpt2. --runs: the run cache (default out/labs/runs; make
lab-check gives each check a fresh one, so that its runs are trained again).

--replot draws a lab's figures again from the CSVs in DIR alone, training nothing (dev/labs/figure_check.py
does so for the committed doc/labs/): the run path and --replot call the same plot_NAME function, which
reads only what the CSVs hold. Beside the CSVs lab-check compares, the curves a figure draws are written
to llm_NAME_curves.csv (norm-eps, how-small, complexity, compose: validation loss, or complexity's norms,
per step) and the bytes of tokens' first seed to llm_tokens_bytes.csv. Not redrawn: condense's row-cosine
heatmaps (llm_condense_wq.png, _wdown.png), whose matrices are in the runs' dumps only. A lab whose
figure needs a CSV that DIR lacks draws nothing and says which; the exit status is then 5.
"""
import argparse
import glob
import math
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "dev", "plot"))
import figstyle  # noqa: E402  (dev/plot: the one figure style)

if __name__ == "__main__":
    figstyle.need_plotting()      # re-executes under a python3 that has numpy and matplotlib
import numpy as np  # noqa: E402

import llm_runs
from llm_runs import (ROOT, Runner, flags, final_val, fmt, label_axes, last_probe_step, log, mean_sd, plt, probe,
                      read_csv, save, seed_summary, spread, write_csv)
from compare_tokens import delta_sym, difficulty_bins, read_dump  # dev/plot, on sys.path through llm_runs
from heatmap import read_cossim

# The two sizes. cpu: L=4, C=128 byte-level llama-style model, 500 steps, about 40 s per run on one
# quiet core (labs 7, 8 and 10 use C=64 to fit the time); gpu: a GPT-2-small-sized model, 5000 steps.
SCALES = {
    "cpu": dict(L=4, C=128, H=4, b=8, t=64, x=500, u=50, p=50, v=100, m=20, seeds=[1, 2], verdict_seeds=[1, 2, 3, 4, 5],
                init_widths=[128, 512], res_widths=[64, 128, 256, 512, 1024], res_depths=[1, 2, 4, 8, 16], res_depth_d=128,
                qkv=dict(C=64, H=4, x=500, p=10),
                mup=dict(L=2, x=300, widths=[64, 128, 256], lrs=[3e-4, 1e-3, 3e-3, 1e-2, 3e-2]),
                coord_widths="64,128,256,512",
                complexity=dict(C=64, gammas=[0.1, 0.5, 1.0], lambdas=[0.0, 0.1, 1.0]),
                compose=dict(C=64, x=1000, long_x=3000)),
    "gpu": dict(L=12, C=768, H=12, b=16, t=256, x=5000, u=250, p=250, v=250, m=20, seeds=[1, 2, 3],
                verdict_seeds=[1, 2, 3, 4, 5], init_widths=[512, 2048], res_widths=[128, 256, 512, 1024, 2048, 4096],
                res_depths=[1, 2, 4, 8, 16, 32], res_depth_d=768, qkv=dict(C=768, H=12, x=5000, p=100),
                mup=dict(L=4, x=2000, widths=[256, 512, 1024, 2048], lrs=[1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2]),
                coord_widths="256,512,1024,2048,4096",
                complexity=dict(C=768, gammas=[0.1, 0.3, 0.5, 0.8, 1.0], lambdas=[0.0, 0.1, 1.0]),
                compose=dict(C=768, x=5000, long_x=20000)),
}
EPS_SMALL = 1e-12  # [SmallInit]: eps small enough that it never sets the norm's scale


class Lab:
    def __init__(self, args):
        self.sc = SCALES[args.scale]
        self.args = args
        self.out = None
        cpu = os.path.join(ROOT, "train_gpt2")
        self.cpu = Runner(cpu, args.jobs, args.threads)
        self.fast = Runner(args.bin or default_binary(args.scale, cpu), args.jobs, args.threads)

    def run(self, specs):
        """Runs on the fast binary where it accepts all of a run's flags, the rest on train_gpt2."""
        ok = accepted_flags(self.fast.binary)
        fast = {k: s for k, s in specs.items() if all(a in ok for a in s[1] if a.startswith("-"))}
        out = self.fast.run(fast) if fast else {}
        rest = {k: s for k, s in specs.items() if k not in fast}
        out.update(self.cpu.run(rest) if rest else {})
        return out

    def begin(self, name):
        """Where lab `name` writes: --out, else out/labs/NAME (cpu scale) or out/labs/gpu (gpu scale)."""
        a = self.args
        self.out = a.out or os.path.join(ROOT, "out", "labs", name.replace("_", "-") if a.scale == "cpu" else "gpu")
        os.makedirs(self.out, exist_ok=True)

    def path(self, name):
        return os.path.join(self.out, name)

    # The model of most labs: llama preset (RMSNorm, SwiGLU, RoPE), byte-level Moby-Dick.
    def model(self, **over):
        sc = self.sc
        kv = dict(a="llama", L=sc["L"], C=sc["C"], H=sc["H"], b=sc["b"], t=sc["t"], x=sc["x"], u=sc["u"],
                  v=sc["v"], m=sc["m"], S=1)
        kv.update(over)
        return flags(**kv)

    def lm(self, gamma, seed, gate=1, eps=EPS_SMALL, dump="h.0.attn.wq", init=None, **over):
        """The shared training run of labs 1, 2, 4, 5, 6: gamma-init (or -I init), every probe every p
        steps, the row cosines of one matrix, the token losses at the end."""
        tag = f"lm_{'g' + fmt(gamma) if init is None else init}_G{gate}_e{fmt(eps)}_s{seed}"
        kv = dict(I=init) if init else dict(g=gamma)
        args = self.model(**over) + flags(e=eps, G=gate, r=seed, p=self.sc["p"], cossim_dump=dump,
                                          dump_token_losses="{dir}/tokens.csv", **kv)
        return tag, args


def default_binary(scale, cpu):
    gpu = os.path.join(ROOT, "train_gpt2cu")
    if scale == "gpu" and os.path.exists(gpu) and shutil.which("nvidia-smi"):
        if subprocess.call(["nvidia-smi", "-L"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0:
            return gpu
    return cpu


_flags_cache = {}


def accepted_flags(binary):
    """The flags a trainer binary lists in its -h."""
    if binary not in _flags_cache:
        text = subprocess.run([binary, "-h"], capture_output=True, text=True).stdout
        _flags_cache[binary] = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", text))
    return _flags_cache[binary]


def cap_top(ax, top):
    """Cut off the early, high part of loss curves at `top`, unless every point lies above it (a run
    that never learned): then the axis keeps its range rather than turning upside down."""
    if ax.get_ylim()[0] < top:
        ax.set_ylim(top=top)


def val_curve(run):
    return [e["step"] for e in run["val"]], [e["val_loss"] for e in run["val"]]


# ---- --replot: a lab's figures from its CSVs alone ----------------------------------------------------
# Each lab draws with one function, plot_NAME(rows ...), that reads only what its CSVs hold: the run path
# calls it with the rows it writes, --replot with the rows read back (llm_runs.read_csv). What a figure
# needs beyond the summary CSV (a loss curve, the bytes of one seed) the lab writes beside it in
# llm_NAME_curves.csv (or, for the tokens lab, llm_tokens_bytes.csv).

GAMMA = "gamma (matrices N(0, d_in^(-2 gamma)))"   # the gamma axis: gamma-init as the handouts write it


def curve_rows(curves, keys, *cols):
    """Long-form rows of per-step curves: curves is {key tuple: (steps, column, ...)}, keys the names of
    the key's parts, cols the names of the columns (default val_loss). None (a non-finite loss in the
    log), or a column shorter than its steps, is written as nan."""
    cols = cols or ("val_loss",)
    rows = []
    for k, (steps, *vals) in curves.items():
        for i, st in enumerate(steps):
            rows.append(dict(zip(keys, k), step=st, **{c: (v[i] if i < len(v) and v[i] is not None else float("nan"))
                                                       for c, v in zip(cols, vals)}))
    return rows


def curves_of(rows, keys, *cols):
    """The inverse of curve_rows: {key tuple: (steps, column, ...)}, each in step order."""
    cols = cols or ("val_loss",)
    out = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return {k: tuple([x[c] for x in sorted(v, key=lambda x: x["step"])] for c in ("step",) + cols)
            for k, v in out.items()}


class MissingCSV(Exception):
    pass


def read_back(out, name):
    """Rows of out/name for --replot; MissingCSV (exit 5) if out has no such file."""
    path = os.path.join(out, name)
    if not os.path.exists(path):
        raise MissingCSV(name)
    return read_csv(path)


# ---- lab 1: norm eps saturation [SmallInit §2.1, Fig. 1c-e] ----------------------------------------

def init_only(d, L=1, **over):
    """One step of a width-d model with the probes at step 0: the state at initialization."""
    kv = dict(a="llama", L=L, C=d, H=4, b=4, t=64, x=1, v=1000, m=0, S=1, p=1)
    kv.update(over)
    return flags(**kv)


def lab_norm_eps(lab):
    sc = lab.sc
    gammas = [0.25 + 0.125 * i for i in range(13)]
    specs = {(d, eps, g): (f"init_d{d}_g{fmt(g)}_e{fmt(eps)}", init_only(d, g=g, e=eps, probes="normscale"))
             for d in sc["init_widths"] for eps in (1e-5, EPS_SMALL) for g in gammas}
    seeds = sc["verdict_seeds"]
    train = {(g, eps, s): lab.lm(g, s, eps=eps) for g in (1.0, 1.5) for eps in (1e-5, EPS_SMALL) for s in seeds}
    dirs = lab.run(specs)
    tdirs = lab.run(train)
    rows = []
    for (d, eps, g), dd in dirs.items():
        r = probe(log(dd), "normscale", tensor="h.0.ln1")[0]
        var = d ** (-2 * g)
        rows.append(dict(part="init", d=d, eps=eps, gamma=g, seed=1337, factor=r["factor"], free=r["free"],
                         var=r["var"], eps_frac=r["eps_frac"], analytic_factor=(var + eps) ** -0.5,
                         analytic_free=d ** g, val_loss=""))
    for (g, eps, s), dd in tdirs.items():
        rows.append(dict(part="train", d=sc["C"], eps=eps, gamma=g, seed=s, factor="", free="", var="",
                         eps_frac="", analytic_factor="", analytic_free="", val_loss=final_val(log(dd))))
    write_csv(lab.path("llm_norm_eps.csv"), rows)
    curves = {k: val_curve(log(dd)) for k, dd in sorted(tdirs.items())}
    crows = curve_rows(curves, ("gamma", "eps", "seed"))
    write_csv(lab.path("llm_norm_eps_curves.csv"), crows)
    plot_norm_eps(rows, crows, lab.path("llm_norm_eps.png"))
    train_rows = [r for r in rows if r["part"] == "train"]
    write_csv(lab.path("llm_norm_eps_seeds.csv"), seed_summary(train_rows, ["gamma", "eps"], ["val_loss"]))
    summary(rows, "part", "train", ("gamma", "eps"))
    for g in (1.0, 1.5):
        d = [curves[(g, 1e-5, s)][1][-1] - curves[(g, EPS_SMALL, s)][1][-1] for s in seeds]
        m, sd = mean_sd(d)
        print(f"  gamma={g}: val loss eps=1e-5 minus eps=1e-12, paired by seed: {m:+.4f}±{sd:.4f} "
              f"(per seed {' '.join(f'{x:+.4f}' for x in d)}; 1e-12 better in {sum(x > 0 for x in d)} of {len(d)})")
        for eps in (1e-5, EPS_SMALL):
            st = curves[(g, eps, seeds[0])][0]
            for k in sorted({len(st) // 2, len(st) - 1}):
                v = [curves[(g, eps, s)][1][k] for s in seeds]
                print(f"  gamma={g} eps={eps:g}: val loss at step {st[k]} over seeds: max - min {max(v) - min(v):.4f}")


def plot_norm_eps(rows, crows, path):
    """Left: the norm's factor at init against gamma, measured (the CSV's init rows) and analytic; right:
    the validation loss of the training runs (llm_norm_eps_curves.csv), one line per seed."""
    init = [r for r in rows if r["part"] == "init"]
    widths = sorted({r["d"] for r in init})
    d_train = [r["d"] for r in rows if r["part"] == "train"][0]
    curves = curves_of(crows, ("gamma", "eps", "seed"))
    seeds = sorted({k[2] for k in curves})
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    gg = np.linspace(0.2, 2.0, 200)
    colors = dict(zip(widths + [2048], ["C0", "C1", "C2"]))
    for d in sorted(set(widths + [2048])):
        for eps, ls in ((1e-5, "-"), (EPS_SMALL, "--")):     # as in the right panel: dashed eps=1e-12
            ax[0].plot(gg, np.sqrt(d ** (-2 * gg) / (d ** (-2 * gg) + eps)), ls, color=colors[d],
                       label=f"d={d}" if eps == 1e-5 else None)
        ax[0].axvline(math.log(1e5) / (2 * math.log(d)), color=colors[d], lw=0.6, alpha=0.5)
    for r in init:
        ax[0].plot(r["gamma"], r["factor"] / r["free"], "o" if r["eps"] == 1e-5 else "x", color=colors[r["d"]], ms=5)
    ax[0].set_xlabel(GAMMA)
    ax[0].set_ylabel("factor / eps-free factor = sqrt(var / (var + eps))\n(unitless)")
    ax[0].set_title("norm of layer 0 at init: lines analytic, o eps=1e-5, x eps=1e-12\n"
                    "vertical: var = 1e-5 at gamma* = ln(1e5) / (2 ln d)", fontsize=9)
    ax[0].plot([], [], "-", color="0.3", label="eps=1e-5")
    ax[0].plot([], [], "--", color="0.3", label="eps=1e-12")
    ax[0].legend(fontsize=7, loc="lower left")
    for (g, eps, s), (st, vl) in sorted(curves.items()):
        ax[1].plot(st, vl, "-" if eps == 1e-5 else "--", color="C3" if g == 1.0 else "C4", alpha=0.6, lw=0.8,
                   label=f"gamma={g:g} eps={eps:g}" if s == seeds[0] else None)
    cap_top(ax[1], 3.0)
    label_axes(ax[1], "validation loss (nats/byte)", f"training at d={d_train}, gated attention, one line per seed "
               f"({len(seeds)} seeds)", legend=7, title_size=9)
    save(fig, path)


def replot_norm_eps(out, sc):
    plot_norm_eps(read_back(out, "llm_norm_eps.csv"), read_back(out, "llm_norm_eps_curves.csv"),
                  os.path.join(out, "llm_norm_eps.png"))


def summary(rows, key, value, group):
    """Prints mean, min and max of val_loss per group of rows."""
    groups = {}
    for r in rows:
        if r.get(key) == value:
            groups.setdefault(tuple(r[g] for g in group), []).append(r["val_loss"])
    for k, v in sorted(groups.items()):
        m, lo, hi = spread(v)
        print(f"  {dict(zip(group, k))}: val loss {m:.4f} (min {lo:.4f}, max {hi:.4f}, {len(v)} seeds)")


# ---- lab 2: attention sinks and gating [SmallInit §2.1, Fig. 1f-h] ---------------------------------

def lab_sinks(lab):
    sc = lab.sc
    specs = {(g, gate, s): lab.lm(g, s, gate=gate) for g in (0.5, 1.0) for gate in (0, 1) for s in sc["seeds"]}
    dirs = lab.run(specs)
    rows = []
    for (g, gate, s), dd in dirs.items():
        run = log(dd)
        last = last_probe_step(run, "sink")
        for l in range(sc["L"]):
            recs = probe(run, "sink", layer=l, head=-1)
            init = [r["value"] for r in recs if r["step"] == 0][0]
            fin = [r["value"] for r in recs if r["step"] == last][0]
            rows.append(dict(gamma=g, gate=gate, seed=s, layer=l, sink_init=init, sink_final=fin,
                             final_step=last, val_loss=final_val(run)))
    write_csv(lab.path("llm_sinks.csv"), rows)

    plot_sinks(rows, sc["t"], lab.path("llm_sinks.png"))
    for g, gate in SINK_SETTINGS:
        per = [np.mean([r["sink_final"] for r in rows if (r["gamma"], r["gate"], r["seed"]) == (g, gate, s)])
               for s in sc["seeds"]]
        loss = [r["val_loss"] for r in rows if (r["gamma"], r["gate"], r["layer"]) == (g, gate, 0)]
        print(f"  gamma={g} gate={gate}: mean sink {np.mean(per):.3f} (seeds {', '.join(f'{p:.3f}' for p in per)}), "
              f"val loss {np.mean(loss):.4f} ({', '.join(f'{v:.4f}' for v in loss)})")


SINK_SETTINGS = [(0.5, 0), (1.0, 0), (0.5, 1), (1.0, 1)]   # (gamma, gated attention), one colour each


def plot_sinks(rows, t, path):
    """Left: the sink score of every layer after training, bars per setting (the CSV's rows); right: the
    final validation loss, one point per seed. t: the sequence length, for uniform attention's score."""
    L = 1 + max(r["layer"] for r in rows)
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    w = 0.2
    for i, (g, gate) in enumerate(SINK_SETTINGS):
        for l in range(L):
            vals = [r["sink_final"] for r in rows if (r["gamma"], r["gate"], r["layer"]) == (g, gate, l)]
            m, lo, hi = spread(vals)
            ax[0].bar(l + (i - 1.5) * w, m, w, yerr=[[m - lo], [hi - m]], color=f"C{i}",
                      label=f"gamma={g:g}, gate={gate}" if l == 0 else None, capsize=2)
        losses = [r["val_loss"] for r in rows if (r["gamma"], r["gate"], r["layer"]) == (g, gate, 0)]
        ax[1].plot([i] * len(losses), losses, "o", color=f"C{i}")
    ax[0].axhline(sum(1.0 / i for i in range(1, t + 1)) / t, color="k", lw=0.8, ls=":",
                  label="uniform causal attention")
    ax[0].set_xlabel("layer")
    ax[0].set_ylabel("sink score S (fraction of attention,\nmean over heads)")
    ax[0].set_title("attention on the first token after training\n(bars: mean; whiskers: min to max over seeds)",
                    fontsize=9)
    ax[0].set_ylim(top=ax[0].get_ylim()[1] * 1.35)    # room for the legend above the bars
    ax[0].legend(fontsize=8, ncol=2, loc="upper center")
    ax[1].set_xticks(range(len(SINK_SETTINGS)), [f"g={g:g}\ngate={gate}" for g, gate in SINK_SETTINGS])
    ax[1].set_xlabel("setting (gamma, gated attention)")
    ax[1].set_ylabel("final validation loss (nats/byte)")
    ax[1].set_title("final loss, one point per seed", fontsize=9)
    save(fig, path)


def replot_sinks(out, sc):
    plot_sinks(read_back(out, "llm_sinks.csv"), sc["t"], os.path.join(out, "llm_sinks.png"))


# ---- lab 3: residual flow at init [SmallInit §2.4, App. A]; [Errata 000-5] -----------------

def lab_resflow(lab):
    sc = lab.sc
    gammas = [0.5, 0.75, 1.0, 1.25]
    specs = {}
    for mlp in ("gelu", "swiglu"):
        for ffn_only in (0, 1):
            for g in gammas:
                for d in sc["res_widths"]:
                    # FFN only: the attention output projection starts at zero, so the blocks add only
                    # the MLP term, the one [SmallInit App. A] derives.
                    init = dict(I=f"gamma:{fmt(g)},out=zeros") if ffn_only else dict(g=g)
                    specs[(mlp, ffn_only, g, d)] = (
                        f"res_{mlp}_f{ffn_only}_g{fmt(g)}_d{d}",
                        init_only(d, L=4, mlp=mlp, e=EPS_SMALL, G=0, probes="resflow", **init))
    # The depth dependence of the constant at gamma = 1 ([Errata 000-5f]): the full model, the MLP branch
    # alone (attention out = 0) and the attention branch alone (MLP down = 0), over five seeds.
    branches = {"full": "gamma:1", "mlp_only": "gamma:1,out=zeros", "attn_only": "gamma:1,down=zeros"}
    depth = {(br, L, s): (f"resdepth_{br}_L{L}_s{s}", init_only(sc["res_depth_d"], L=L, mlp="gelu", e=EPS_SMALL, G=0,
                                                                   probes="resflow", I=init, r=s))
             for br, init in branches.items() for L in sc["res_depths"] for s in sc["verdict_seeds"]}
    dirs, ddirs = lab.run(specs), lab.run(depth)
    rows, slopes = [], []
    for (mlp, ffn_only, g, d), dd in sorted(dirs.items()):
        r = probe(log(dd), "resflow", layer=-1)[0]
        rows.append(dict(mlp=mlp, ffn_only=ffn_only, gamma=g, d=d, ratio=r["value"]))
    for mlp in ("gelu", "swiglu"):
        for ffn_only in (0, 1):
            for g in gammas:
                pts = [(r["d"], r["ratio"]) for r in rows if (r["mlp"], r["ffn_only"], r["gamma"]) == (mlp, ffn_only, g)]
                dd, rr = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
                slope = float(np.polyfit(dd, rr, 1)[0])
                pred = 1.5 - 2 * g if (mlp == "swiglu" and ffn_only) else 1 - g
                slopes.append(dict(mlp=mlp, ffn_only=ffn_only, gamma=g, slope=slope, predicted=pred))
                print(f"  {mlp:6s} {'FFN only' if ffn_only else 'full    '} gamma={g:<5g} slope {slope:+.3f} "
                      f"(predicted {pred:+.3f})")
    write_csv(lab.path("llm_resflow.csv"), rows)
    write_csv(lab.path("llm_resflow_slopes.csv"), slopes)
    drows = [dict(branch=br, L=L, seed=s, ratio=probe(log(dd), "resflow", layer=-1)[0]["value"])
             for (br, L, s), dd in sorted(ddirs.items())]
    write_csv(lab.path("llm_resflow_depth.csv"), drows)
    depths, _, ratio = depth_ratios(drows)
    for br, v in ratio.items():
        grow = v[-1] / v[0]
        print(f"  depth, gamma=1 d={sc['res_depth_d']} {br}: " + ", ".join(f"L={L} {x.mean():.3f}±{x.std(ddof=1):.3f}"
                                                                        for L, x in zip(depths, v))
              + f"; L={depths[-1]} / L={depths[0]} {grow.mean():.2f}±{grow.std(ddof=1):.2f} "
              f"(sqrt gives {math.sqrt(depths[-1] / depths[0]):.2f})")
    plot_resflow(rows, slopes, drows, sc["res_depth_d"], lab.path("llm_resflow.png"))


RES_BRANCHES = ("full", "mlp_only", "attn_only")   # the depth runs' branches, in the order of their colours


def depth_ratios(drows):
    """The depth runs (llm_resflow_depth.csv's rows): depths, seeds and {branch: ratio[depth, seed]}."""
    depths = sorted({r["L"] for r in drows})
    seeds = sorted({r["seed"] for r in drows})
    dr = {(r["branch"], r["L"], r["seed"]): r["ratio"] for r in drows}
    return depths, seeds, {br: np.array([[dr[(br, L, s)] for s in seeds] for L in depths])
                           for br in RES_BRANCHES if any(r["branch"] == br for r in drows)}


def plot_resflow(rows, slopes, drows, depth_d, path):
    """The ratio against width (llm_resflow.csv), its fitted exponents (llm_resflow_slopes.csv) and the
    ratio against depth (llm_resflow_depth.csv, at width depth_d)."""
    gammas = sorted({r["gamma"] for r in rows})
    depths, seeds, ratio = depth_ratios(drows)
    from matplotlib.lines import Line2D
    fig, ax = plt.subplots(1, 4, figsize=(20, 4.6))
    for k, mlp in enumerate(("gelu", "swiglu")):
        for i, g in enumerate(gammas):
            for ffn_only, ls in ((0, "-o"), (1, "--x")):
                pts = [(r["d"], r["ratio"]) for r in rows if (r["mlp"], r["ffn_only"], r["gamma"]) == (mlp, ffn_only, g)]
                ax[k].loglog(*zip(*pts), ls, color=f"C{i}", ms=4)
        ax[k].set_xlabel("width d")
        ax[k].set_ylabel("||h_L - e|| / ||e|| at init (unitless)")
        ax[k].set_title(f"{'GELU' if mlp == 'gelu' else 'SwiGLU'} MLP, L=4, eps=1e-12", fontsize=9)
    # one legend for the two width panels, under them: colour = gamma, line style = which branches
    keys = [Line2D([], [], color=f"C{i}", label=f"gamma={g:g}") for i, g in enumerate(gammas)]
    keys += [Line2D([], [], color="0.3", ls="-", marker="o", ms=4, label="full blocks"),
             Line2D([], [], color="0.3", ls="--", marker="x", ms=4, label="attention out = 0 (FFN only)")]
    fig.legend(handles=keys, loc="upper center", bbox_to_anchor=(0.27, 0.0), ncol=3, fontsize=10)
    gg = np.array([0.4, 1.35])
    ax[2].plot(gg, 1 - gg, "k-", lw=0.8, label="1 - gamma [SmallInit App. A]")
    ax[2].plot(gg, 1.5 - 2 * gg, "k:", lw=0.8, label="3/2 - 2 gamma [Errata 000-5c]")
    # colours C0-C3 mean gamma in the first two panels: the MLP here and the branch in the last panel get
    # colours of their own
    for mlp, color in (("gelu", "C4"), ("swiglu", "C5")):   # colour: the MLP; marker: full or FFN only
        for ffn_only in (0, 1):
            pts = [(s["gamma"], s["slope"]) for s in slopes if (s["mlp"], s["ffn_only"]) == (mlp, ffn_only)]
            ax[2].plot(*zip(*pts), "x" if ffn_only else "o", color=color, ms=8 if ffn_only else 6,
                       mfc="none" if not ffn_only else None, label=f"{mlp}, {'FFN only' if ffn_only else 'full'}")
    ax[2].set_xlabel(GAMMA)
    ax[2].set_ylabel("fitted exponent of d (unitless)")
    ax[2].set_title("slope of log ratio vs log d", fontsize=9)
    ax[2].legend(fontsize=7)
    for (br, v), color in zip(ratio.items(), ("C9", "C8", "C7")):
        ax[3].errorbar(depths, v.mean(1), yerr=v.std(1, ddof=1), fmt="-o", ms=4, capsize=3, color=color, label=br)
        ax[3].loglog(depths, v.mean(1)[0] * np.sqrt(np.array(depths) / depths[0]), ":", color=color, lw=0.8)
    ax[3].plot([], [], ":", color="0.3", lw=0.8, label="sqrt(L) from L=1")
    ax[3].set_xlabel("blocks L")
    ax[3].set_ylabel("||h_L - e|| / ||e|| at init (unitless)")
    ax[3].set_title(f"gamma=1, d={depth_d}, GELU: mean ± sd\nover {len(seeds)} seeds [Errata 000-5f]", fontsize=9)
    ax[3].legend(fontsize=7)
    save(fig, path)


def replot_resflow(out, sc):
    plot_resflow(read_back(out, "llm_resflow.csv"), read_back(out, "llm_resflow_slopes.csv"),
                 read_back(out, "llm_resflow_depth.csv"), sc["res_depth_d"], os.path.join(out, "llm_resflow.png"))


# ---- lab 4: how small [SmallInit §2.4, Fig. 3b] -------------------------------------------------------

HOW_SMALL = [0.25, 0.5, 0.75, 1.0, 1.25, 1.5]


def lab_how_small(lab):
    sc = lab.sc
    specs = {(g, s): lab.lm(g, s) for g in HOW_SMALL for s in sc["seeds"]}
    specs.update({("gpt2", s): lab.lm(None, s, init="gpt2") for s in sc["seeds"]})
    dirs = lab.run(specs)
    rows = [dict(init="gpt2" if g == "gpt2" else f"gamma:{fmt(g)}", gamma=-1 if g == "gpt2" else g, seed=s,
                 val_loss=final_val(log(dd))) for (g, s), dd in dirs.items()]
    write_csv(lab.path("llm_how_small.csv"), rows)
    curves = {("gpt2" if g == "gpt2" else f"gamma:{fmt(g)}", -1 if g == "gpt2" else g, s): val_curve(log(dd))
              for (g, s), dd in dirs.items()}
    crows = curve_rows(curves, ("init", "gamma", "seed"))
    write_csv(lab.path("llm_how_small_curves.csv"), crows)
    for g in HOW_SMALL:
        v = [r["val_loss"] for r in rows if r["gamma"] == g]
        print(f"  gamma={g:<5g} val loss {np.mean(v):.4f} (seeds {', '.join(f'{x:.4f}' for x in v)})")
    ref = [r["val_loss"] for r in rows if r["gamma"] == -1]
    print(f"  gpt2 init  val loss {np.mean(ref):.4f} (seeds {', '.join(f'{x:.4f}' for x in ref)})")
    plot_how_small(rows, crows, sc, lab.path("llm_how_small.png"))


def plot_how_small(rows, crows, sc, path):
    """Left: the final validation loss against gamma, per seed and mean (llm_how_small.csv), the gpt2
    init's seed range a band; right: the validation loss curves of the first seed (llm_how_small_curves.csv)."""
    gammas = sorted({r["gamma"] for r in rows if r["gamma"] != -1})
    s0 = min(r["seed"] for r in rows)
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    means = []
    # one colour per init in both panels: gamma in shades of one map, the gpt2 init C1
    shade = dict(zip(gammas, plt.get_cmap("viridis")(np.linspace(0.0, 0.85, len(gammas)))))
    for g in gammas:
        v = [r["val_loss"] for r in rows if r["gamma"] == g]
        ax[0].plot([g] * len(v), v, "o", color=shade[g], alpha=0.8)
        means.append(np.mean(v))
    ax[0].plot(gammas, means, "-", color="0.5", label="gamma-init (mean over seeds; dots: seeds)")
    ref = [r["val_loss"] for r in rows if r["gamma"] == -1]
    ax[0].axhspan(min(ref), max(ref), color="C1", alpha=0.3, label="gpt2 init N(0, 0.02²) (seed range)")
    ax[0].set_xlabel(GAMMA)
    ax[0].set_ylabel(f"validation loss at step {sc['x']} (nats/byte)")
    ax[0].set_title(f"eps=1e-12, gated attention, d={sc['C']}, L={sc['L']}", fontsize=9)
    ax[0].legend(fontsize=8)
    curves = curves_of(crows, ("gamma", "seed"))
    for g in [-1] + gammas:             # the gpt2 init first
        if (g, s0) in curves:
            st, vl = curves[(g, s0)]
            ax[1].plot(st, vl, color="C1" if g == -1 else shade[g], label="gpt2 init" if g == -1 else f"gamma={g:g}")
    cap_top(ax[1], 3.2)
    label_axes(ax[1], "validation loss (nats/byte)", f"seed {s0}", title_size=9)
    save(fig, path)


def replot_how_small(out, sc):
    plot_how_small(read_back(out, "llm_how_small.csv"), read_back(out, "llm_how_small_curves.csv"), sc,
                   os.path.join(out, "llm_how_small.png"))


# ---- lab 5: token-level gains [SmallInit §2.5, Fig. 4a-c] -------------------------------------------

def lab_tokens(lab):
    seeds = lab.sc["verdict_seeds"]
    specs = {(g, s): lab.lm(g, s) for g in (1.0, 0.5) for s in seeds}
    dirs = lab.run(specs)
    rows, deltas = [], {}
    for s in seeds:
        a, b = read_dump(os.path.join(dirs[(1.0, s)], "tokens.csv")), read_dump(os.path.join(dirs[(0.5, s)], "tokens.csv"))
        ds = delta_sym(a["p"], b["p"])
        d = (a["loss"] + b["loss"]) / 2
        deltas[s] = (ds, a, b)
        diff, means, medians = difficulty_bins(d, ds)
        rows.append(dict(seed=s, bin="all", difficulty=float(d.mean()), mean=float(ds.mean()), median=float(np.median(ds)),
                         frac_positive=float((ds > 0).mean()), loss_gamma1=float(a["loss"].mean()),
                         loss_gamma05=float(b["loss"].mean())))
        for i, (df, mu, md) in enumerate(zip(diff, means, medians)):
            rows.append(dict(seed=s, bin=i + 1, difficulty=df, mean=mu, median=md, frac_positive="",
                             loss_gamma1="", loss_gamma05=""))
        print(f"  seed {s}: mean dsym {ds.mean():+.4f}, median {np.median(ds):+.4f}; bins mean "
              + " ".join(f"{m:+.3f}" for m in means))
    write_csv(lab.path("llm_tokens.csv"), rows)
    write_csv(lab.path("llm_tokens_seeds.csv"), seed_summary(rows, ["bin"], ["mean", "median", "frac_positive",
                                                                            "loss_gamma1", "loss_gamma05"]))
    per_bin = np.array([[r["mean"] for r in rows if r["seed"] == s and r["bin"] != "all"] for s in seeds])
    neg = [int((b < 0).sum()) for b in per_bin.T]
    print(f"  bins where gamma=1 is behind (mean < 0), per bin over {len(seeds)} seeds: {neg}")

    s0 = seeds[0]
    brows = [dict(seed=s0, pos=int(p), delta_sym=float(x)) for p, x in zip(deltas[s0][1]["pos"], deltas[s0][0])]
    write_csv(lab.path("llm_tokens_bytes.csv"), brows)
    plot_tokens(rows, brows, lab.path("llm_tokens.png"), lab.path("llm_tokens_passage.png"))


def plot_tokens(rows, brows, path, passage_path):
    """llm_tokens.png: the histogram of delta_sym p over the bytes of one seed (llm_tokens_bytes.csv) and
    the mean and median per difficulty bin of every seed (llm_tokens.csv); llm_tokens_passage.png: the
    bytes of that seed on the validation text."""
    seeds = sorted({r["seed"] for r in rows})
    bins = sorted({r["bin"] for r in rows if r["bin"] != "all"})
    s0 = brows[0]["seed"]
    ds = np.array([r["delta_sym"] for r in brows])
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    ax[0].hist(ds, bins=80, color="0.6")
    ax[0].axvline(ds.mean(), color="C0", label=f"mean {ds.mean():+.3f}")
    ax[0].axvline(np.median(ds), color="C2", ls="--", label=f"median {np.median(ds):+.3f}")
    ax[0].set_yscale("log")
    ax[0].set_xlabel("delta_sym p = 2 (p_A - p_B) / (p_A + p_B) (unitless),  A: gamma=1, B: gamma=0.5")
    ax[0].set_ylabel("bytes (count, log scale)")
    ax[0].set_title(f"seed {s0}, {len(ds)} validation bytes", fontsize=9)
    ax[0].legend(fontsize=8)
    for key, style, color in (("mean", "-o", "C0"), ("median", "--s", "C2")):
        by = {(r["seed"], r["bin"]): r[key] for r in rows}
        v = np.array([[by[(s, b)] for b in bins] for s in seeds])
        for row in v:
            ax[1].plot(bins, row, "-", color=color, lw=0.5, alpha=0.4)
        ax[1].errorbar(bins, v.mean(0), yerr=v.std(0, ddof=1), fmt=style, color=color, capsize=3,
                       label=f"{key} over {len(seeds)} seeds (bars: sd; thin: each seed)")
    ax[1].axhline(0, color="k", lw=0.6)
    ax[1].set_xlabel("difficulty bin (mean loss of the two models), easiest first")
    ax[1].set_ylabel("delta_sym p (unitless, -2 to 2)")
    ax[1].set_title("> 0: gamma=1 better", fontsize=9)
    ax[1].legend(fontsize=7)
    save(fig, path)
    passage_png(ds, [r["pos"] for r in brows], passage_path)


def replot_tokens(out, sc):
    plot_tokens(read_back(out, "llm_tokens.csv"), read_back(out, "llm_tokens_bytes.csv"),
                os.path.join(out, "llm_tokens.png"), os.path.join(out, "llm_tokens_passage.png"))


def passage_png(ds, pos, path, start=2000, length=720, cols=72):
    """The validation text from byte `start`, every byte on a background green where gamma=1 gives it a
    higher probability, red where gamma=0.5 does [SmallInit Fig. 4c]."""
    with open(os.path.join(ROOT, "data", "moby_val.txt"), "rb") as f:
        text = f.read()
    where = {int(p): float(x) for p, x in zip(pos, ds)}
    rows = (length + cols - 1) // cols
    fig, ax = plt.subplots(figsize=(cols * 0.14, rows * 0.3))
    cmap = plt.get_cmap("RdYlGn")
    for i in range(length):
        p = start + i
        ch = chr(text[p]) if 32 <= text[p] < 127 else " "
        x, y = i % cols, rows - 1 - i // cols
        v = where.get(p)
        if v is not None:
            ax.add_patch(plt.Rectangle((x, y), 1, 1, color=cmap(0.5 + v / 4)))
        ax.text(x + 0.5, y + 0.5, ch, ha="center", va="center", family="monospace", fontsize=8)
    ax.set_xlim(0, cols)
    ax.set_ylim(0, rows)
    ax.axis("off")
    ax.set_title("green: gamma=1 predicts the byte better, red: gamma=0.5 (colour = delta_sym p, -2..2)", fontsize=9)
    save(fig, path)


# ---- lab 6: condensation [SmallInit §2.6, Fig. 4d-g, App. C] ----------------------------------------

def lab_condense(lab):
    sc = lab.sc
    seeds = sc["verdict_seeds"]
    s0 = seeds[0]
    mats = ("h.0.attn.wq", "h.0.mlp.wdown")
    # Every seed's run dumps the row cosines of W_Q (they are lab 5's runs); W_down is dumped at the first seed.
    specs = {(g, mats[0], s): lab.lm(g, s, dump=mats[0]) for g in (0.5, 1.0) for s in seeds}
    specs.update({(g, mats[1], s0): lab.lm(g, s0, dump=mats[1]) for g in (0.5, 1.0)})
    dirs = lab.run(specs)
    rows = []
    for (g, m, s), dd in sorted(dirs.items()):
        run = log(dd)
        for f in sorted(glob.glob(os.path.join(dd, f"cossim_{m}_step*.bin"))):
            step = int(re.search(r"step0*(\d+)", f).group(1) or 0)
            c = read_cossim(f)
            rows.append(dict(gamma=g, seed=s, tensor=m, step=step, kind="mean_cos", value=float(c.mean())))
            rows.append(dict(gamma=g, seed=s, tensor=m, step=step, kind="mean_abs_cos", value=float(np.abs(c).mean())))
        if m == mats[0]:
            for r in run["probe"]:
                if r["probe"] == "rank" and r["value"] is not None:
                    rows.append(dict(gamma=g, seed=s, tensor=r["tensor"], step=r["step"], kind="stable_rank",
                                     value=r["value"]))
    write_csv(lab.path("llm_condense.csv"), rows)
    write_csv(lab.path("llm_condense_seeds.csv"), seed_summary(rows, ["gamma", "tensor", "step", "kind"], ["value"]))

    found = sorted({r["step"] for r in rows if r["kind"] == "mean_cos"})
    steps = sorted({st for st in (0, sc["p"], 2 * sc["p"], 4 * sc["p"]) if st in found} | {found[-1]})
    for m in mats:
        fig = plt.figure(figsize=(2.6 * len(steps) + 0.8, 5.6))
        gs = fig.add_gridspec(2, len(steps) + 1, width_ratios=[1] * len(steps) + [0.07])
        ax = np.array([[fig.add_subplot(gs[i, j]) for j in range(len(steps))] for i in range(2)])
        for i, g in enumerate((0.5, 1.0)):
            for j, st in enumerate(steps):
                f = os.path.join(dirs[(g, m, s0)], f"cossim_{m}_step{st:06d}.bin")
                c = read_cossim(f)
                im = ax[i, j].imshow(c, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
                ax[i, j].set_title(f"gamma={g:g}, step {st}\nmean |cos| {np.abs(c).mean():.2f}", fontsize=8)
                ax[i, j].set_xticks([])
                ax[i, j].set_yticks([])
        fig.colorbar(im, cax=fig.add_subplot(gs[:, len(steps)])).set_label("cosine of two rows (one scale, -1 to 1)")
        fig.suptitle(f"row cosine similarity C(W) of {m}, seed {s0} (blue -1, red +1)", fontsize=10)
        save(fig, lab.path(f"llm_condense_{m.split('.')[-1]}.png"), dpi=60, colors=64)

    plot_condense_rank(rows, lab.path("llm_condense_rank.png"))
    for g in (0.5, 1.0):
        for name in ("h.0.attn.wq", "h.0.mlp.wdown", f"h.{sc['L'] - 1}.mlp.wdown", "h.0.attn.wo", "wte"):
            cur = rank_curves(rows, g, name)
            st = cur[s0][0]
            v = np.array([c[1] for c in cur.values()])
            lo = v.min(1)
            climbed = int(np.sum(v[:, -1] > 1.1 * lo))
            at = lambda j: f"{v[:, j].mean():.1f}±{v[:, j].std(ddof=1):.1f}"
            shown = sorted({j % len(st) for j in (0, 1, 2, -1)})     # a short run has fewer probe steps
            print(f"  gamma={g}: stable rank of {name} over {len(v)} seeds: "
                  + ", ".join(f"step {st[j]} {at(j)}" for j in shown) + f"; min {lo.mean():.2f}±{lo.std(ddof=1):.2f}; "
                  f"last above 1.1 x min in {climbed} of {len(v)} seeds")


def rank_curves(rows, g, name):
    """{seed: (steps, stable ranks)} of one matrix, from llm_condense.csv's rows."""
    out = {}
    for r in rows:
        if (r["gamma"], r["tensor"], r["kind"]) == (g, name, "stable_rank"):
            out.setdefault(r["seed"], []).append((r["step"], r["value"]))
    return {k: tuple(map(np.array, zip(*sorted(v)))) for k, v in out.items()}


def plot_condense_rank(rows, path):
    """The stable rank of every matrix kind over the steps, layers 0 and L-1 (llm_condense.csv's
    stable_rank rows): mean over the seeds, band min to max. (The row-cosine heatmaps need the runs'
    C(W) dumps, which no CSV holds: they are drawn by the run path alone.)"""
    ranked = [r for r in rows if r["kind"] == "stable_rank"]
    seeds = sorted({r["seed"] for r in ranked})
    s0 = seeds[0]
    L = 1 + max(int(r["tensor"].split(".")[1]) for r in ranked if r["tensor"].startswith("h."))
    kinds = ["attn.wq", "attn.wk", "attn.wv", "attn.wo", "mlp.wgate", "mlp.wup", "mlp.wdown", "wte"]
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    fig, ax = plt.subplots(2, 4, figsize=(15, 6.4))
    for k, kind in zip(ax.flat, kinds):
        names = ["wte"] if kind == "wte" else [f"h.0.{kind}", f"h.{L - 1}.{kind}"]
        for g, color in ((0.5, "C0"), (1.0, "C3")):
            for name, ls in zip(names, ("-", "--")):
                cur = rank_curves(ranked, g, name)
                if cur:
                    st = cur[s0][0]
                    v = np.array([c[1] for c in cur.values()])
                    k.plot(st, v.mean(0), ls, color=color)
                    k.fill_between(st, v.min(0), v.max(0), color=color, alpha=0.15, lw=0)
        k.set_title(kind if kind == "wte" else f"{kind} (h.0, h.{L - 1})", fontsize=9)
        k.set_xlabel("step")
        k.set_ylabel("stable rank (unitless)")
    # one legend for the eight panels, under them: colour = gamma, line style = layer
    keys = [Line2D([], [], color="C0", label="gamma=0.5"), Line2D([], [], color="C3", label="gamma=1"),
            Line2D([], [], color="0.3", ls="-", label="layer 0 (and wte)"),
            Line2D([], [], color="0.3", ls="--", label=f"layer {L - 1}"),
            Patch(facecolor="0.55", alpha=0.35, label="band: min to max over the seeds")]
    fig.legend(handles=keys, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=5, fontsize=10)
    fig.suptitle(f"stable rank ||W||_F^2 / ||W||_2^2 of each matrix: mean over {len(seeds)} seeds, band min to max",
                 fontsize=10)
    save(fig, path)


def replot_condense(out, sc):
    plot_condense_rank(read_back(out, "llm_condense.csv"), os.path.join(out, "llm_condense_rank.png"))
    print("  llm_condense_wq.png, llm_condense_wdown.png: not redrawn (the row cosines are in the runs' dumps, "
          "not in a CSV)")


# ---- lab 7: complexity control [ComplexCtl §5, Fig. 4, 6, 7] -------------------------------------------

def is_weight(name):
    """The weights whose norm this lab reports, the tensors its runs decay ([ComplexCtl eq. 1]; the
    trainer's -c with --decay-emb 1): the attention and MLP matrices, an untied head and the embeddings
    wte (and wpe). Norm gains and biases are never decayed (doc/labs/llm_complexity.md says why)."""
    return is_embedding(name) or name == "lm_head" or re.search(r"\.(attn|mlp)\.w", name) is not None


def is_embedding(name):
    return name in ("wte", "wpe")


def lab_complexity(lab):
    sc, cc = lab.sc, lab.sc["complexity"]
    # The grid decays the embeddings (--decay-emb 1); at the largest lambda a control without it (the
    # trainer's default, --decay-emb 0) shows what decaying the embeddings changes.
    lam_ctl = max(cc["lambdas"])
    spec = lambda g, lam, de, s: (f"cc_g{fmt(g)}_c{fmt(lam)}{'' if de else '_noemb'}_s{s}", lab.model(C=cc["C"])
                                  + flags(g=g, c=lam, decay_emb=de, e=EPS_SMALL, G=0, r=s, p=sc["p"],
                                          probes="weight,condense,embcos"))
    seeds = sc["verdict_seeds"]
    specs = {(g, lam, 1, s): spec(g, lam, 1, s) for g in cc["gammas"] for lam in cc["lambdas"] for s in seeds}
    specs.update({(g, lam_ctl, 0, s): spec(g, lam_ctl, 0, s) for g in cc["gammas"] for s in seeds})
    dirs = lab.run(specs)
    rows, curves = [], {}
    for (g, lam, de, s), dd in sorted(dirs.items(), key=lambda kv: (-kv[0][2], kv[0][0], kv[0][1], kv[0][3])):
        run = log(dd)
        weight = probe(run, "weight")
        steps = sorted({r["step"] for r in weight})
        norm = lambda keep: [math.sqrt(sum(r["norm"] ** 2 for r in weight if r["step"] == st and keep(r["tensor"])))
                             for st in steps]
        wn, emb = norm(is_weight), norm(is_embedding)         # matrices and embeddings; wte (and wpe)
        undec = norm(lambda n: n != "all" and not is_weight(n))  # norm gains (and biases): never decayed
        curves[(g, lam, de, s)] = (steps, wn, emb, [r["abs_mean"] for r in probe(run, "embcos")])
        last = steps[-1]
        row = dict(gamma=g, weight_decay=lam, decay_emb=de, seed=s, val_loss=final_val(run), param_norm_init=wn[0],
                   param_norm_final=wn[-1], param_norm_max=max(wn), emb_norm_init=emb[0], emb_norm_final=emb[-1],
                   emb_norm_max=max(emb), undecayed_norm_final=undec[-1],
                   embcos_abs_final=curves[(g, lam, de, s)][3][-1])
        for l in range(sc["L"]):
            for t in ("wq", "wk"):
                r = [x for x in probe(run, "condense", tensor=f"h.{l}.attn.{t}") if x["step"] == last][0]
                row[f"dc_{t}_l{l}"], row[f"ds_{t}_l{l}"] = r["dc"], r["ds"]
        row["dc_wq_mean"] = float(np.mean([row[f"dc_wq_l{l}"] for l in range(sc["L"])]))
        row["ds_wq_mean"] = float(np.mean([row[f"ds_wq_l{l}"] for l in range(sc["L"])]))
        rows.append(row)
    write_csv(lab.path("llm_complexity.csv"), rows)
    keys = ["gamma", "weight_decay", "decay_emb"]
    summ = seed_summary(rows, keys, [q for q in rows[0] if q not in keys + ["seed"]])
    write_csv(lab.path("llm_complexity_seeds.csv"), summ)
    stat = {(r["gamma"], r["weight_decay"], r["decay_emb"], r["quantity"]): r for r in summ}
    for g, lam, de in dict.fromkeys((k[0], k[1], k[2]) for k in specs):
        f = lambda q, d=3: f"{stat[(g, lam, de, q)]['mean']:.{d}f}±{stat[(g, lam, de, q)]['sd']:.{d}f}"
        print(f"  gamma={g:<4g} lambda={lam:<4g} decay_emb={de} over {len(seeds)} seeds: val {f('val_loss', 4)}  "
              f"weights {f('param_norm_init', 1)} -> max {f('param_norm_max', 1)} -> {f('param_norm_final', 1)}  "
              f"wte {f('emb_norm_init', 2)} -> max {f('emb_norm_max', 2)} -> {f('emb_norm_final', 2)}  "
              f"gains {f('undecayed_norm_final', 1)}  D_c(wq) {f('dc_wq_mean')}  D_s(wq) {f('ds_wq_mean')}  "
              f"|embcos| {f('embcos_abs_final')}")
    # Paired by seed (same data order and init): what lambda = 1 and decaying wte change in the loss.
    by = {(r["gamma"], r["weight_decay"], r["decay_emb"], r["seed"]): r["val_loss"] for r in rows}
    for g in cc["gammas"]:
        for name, a, b in (("lambda=1 - lambda=0", (g, lam_ctl, 1), (g, 0.0, 1)),
                           ("wte decayed - not", (g, lam_ctl, 1), (g, lam_ctl, 0))):
            d = [by[a + (s,)] - by[b + (s,)] for s in seeds]
            m, sd = mean_sd(d)
            print(f"  gamma={g:g} val loss {name}: {m:+.4f}±{sd:.4f} (per seed {' '.join(f'{x:+.4f}' for x in d)}; "
                  f"lower in {sum(x < 0 for x in d)} of {len(d)})")

    crows = curve_rows(curves, ("gamma", "weight_decay", "decay_emb", "seed"), "param_norm", "emb_norm", "embcos_abs")
    write_csv(lab.path("llm_complexity_curves.csv"), crows)
    plot_complexity_norm(crows, lab.path("llm_complexity_norm.png"))
    plot_complexity_grid(rows, lab.path("llm_complexity_grid.png"))


def plot_complexity_norm(crows, path):
    """The norm of all decayed weights and of wte over the steps, one panel per lambda, and the mean |cos|
    of the embeddings (llm_complexity_curves.csv): means over the seeds."""
    curves = curves_of(crows, ("gamma", "weight_decay", "decay_emb", "seed"), "param_norm", "emb_norm", "embcos_abs")
    G = sorted({k[0] for k in curves})
    Lm = sorted({k[1] for k in curves if k[2] == 1})
    seeds = sorted({k[3] for k in curves})

    def mean_curve(g, lam, de, k):
        """Steps and the mean over seeds of curve k (1: all weights, 2: wte, 3: embedding |cos|)."""
        c = [curves[(g, lam, de, s)] for s in seeds]
        return c[0][0], np.mean([x[k] for x in c], axis=0)

    from matplotlib.lines import Line2D
    fig, ax = plt.subplots(1, len(Lm) + 1, figsize=(4.4 * (len(Lm) + 1), 4.2))
    for k, lam in enumerate(Lm):
        for i, g in enumerate(G):
            ax[k].semilogy(*mean_curve(g, lam, 1, 1), color=f"C{i}")
            ax[k].semilogy(*mean_curve(g, lam, 1, 2), "--", color=f"C{i}")
            if (g, lam, 0, seeds[0]) in curves:
                ax[k].semilogy(*mean_curve(g, lam, 0, 2), ":", color=f"C{i}")
        ax[k].set_title(f"lambda={lam:g}: decay on matrices and embeddings\n(mean of {len(seeds)} seeds)", fontsize=9)
        ax[k].set_xlabel("step")
        ax[k].set_ylabel("Frobenius norm (unitless, log scale)")
        if k:
            ax[k].sharey(ax[0])      # one norm scale for the lambda panels
    # one legend for the norm panels, under them: colour = gamma (in every panel), line style = which tensors
    keys = [Line2D([], [], color=f"C{i}", label=f"gamma={g:g}") for i, g in enumerate(G)]
    keys += [Line2D([], [], color="0.3", ls=ls, label=name) for ls, name in
             (("-", "all = matrices and embeddings"), ("--", "wte"), (":", "wte, not decayed (--decay-emb 0)"))]
    fig.legend(handles=keys, loc="upper center", bbox_to_anchor=(0.38, 0.0), ncol=3, fontsize=10)
    styles = ["-", "--", ":", "-."]
    for i, g in enumerate(G):
        for k, lam in enumerate(Lm):
            ax[-1].plot(*mean_curve(g, lam, 1, 3), styles[k % 4], color=f"C{i}")
    ax[-1].set_title("mean |cos| of the embeddings of\nthe 50 most frequent bytes", fontsize=9)
    ax[-1].set_xlabel("step")
    ax[-1].set_ylabel("mean |cosine| (unitless)")
    ax[-1].legend(handles=[Line2D([], [], color="0.3", ls=styles[k % 4], label=f"lambda={lam:g}")
                           for k, lam in enumerate(Lm)], fontsize=8, title="colour: gamma")
    save(fig, path)


def plot_complexity_grid(rows, path):
    """Final loss, D_c and D_s of W_Q and W_K on the gamma x lambda grid, wte decayed (llm_complexity.csv):
    mean ± sd over the seeds."""
    G = sorted({r["gamma"] for r in rows})
    Lm = sorted({r["weight_decay"] for r in rows if r["decay_emb"] == 1})
    seeds = sorted({r["seed"] for r in rows})
    L = len([c for c in rows[0] if re.fullmatch(r"dc_wq_l\d+", c)])
    fig, ax = plt.subplots(1, 5, figsize=(20, 4.2))

    def grid(value):
        """Mean and sd over seeds of value(row) per (gamma, lambda) cell, wte decayed."""
        v = np.array([[[value(r) for r in rows if (r["gamma"], r["weight_decay"], r["decay_emb"]) == (g, lam, 1)]
                       for lam in Lm] for g in G])
        return v.mean(-1), v.std(-1, ddof=1)

    layer_mean = lambda col: lambda r: np.mean([r[f"{col}_l{l}"] for l in range(L)])
    # (value, title, colour bar label)
    panels = [(lambda r: r["val_loss"], "final validation loss", "final validation loss (nats/byte)")]
    panels += [(layer_mean(f"{q}_{t}"), f"D_{q[1]} of W_{t[-1].upper()} (mean over layers)",
                f"D_{q[1]} of W_{t[-1].upper()} (unitless)") for q in ("dc", "ds") for t in ("wq", "wk")]
    grids = [grid(value) for value, _, _ in panels]
    # one colour scale for the panels of one quantity (D_c of W_Q and W_K; D_s of W_Q and W_K)
    norms = [figstyle.shared_norm([grids[0][0]])] + [figstyle.shared_norm([grids[i][0], grids[i + 1][0]])
                                                      for i in (1, 1, 3, 3)]
    for k, (value, title, bar) in enumerate(panels):
        a, sd = grids[k]
        im = ax[k].imshow(a, cmap="viridis", aspect="auto", norm=norms[k])
        for i in range(len(G)):
            for j in range(len(Lm)):
                bright = norms[k](a[i, j]) > 0.5   # viridis is light at the top of its range
                ax[k].text(j, i, f"{a[i, j]:.3g}\n±{sd[i, j]:.2g}", ha="center", va="center",
                           color="k" if bright else "w", fontsize=7)
        ax[k].set_xticks(range(len(Lm)), [f"{x:g}" for x in Lm])
        ax[k].set_yticks(range(len(G)), [f"{x:g}" for x in G])
        ax[k].set_xlabel("weight decay lambda")
        ax[k].set_ylabel("gamma")
        ax[k].set_title(f"{title}\nmean ± sd over {len(seeds)} seeds", fontsize=9)
        figstyle.colorbar(fig, im, ax[k], bar)
    figstyle.caption(fig, "gamma: gamma-init, every matrix N(0, d_in^(-2 gamma)); lambda: the weight decay, on the "
                     "matrices and embeddings. D_c of W_Q and of W_K share one colour scale, and so do D_s of W_Q and "
                     "of W_K.")
    save(fig, path)


def replot_complexity(out, sc):
    plot_complexity_grid(read_back(out, "llm_complexity.csv"), os.path.join(out, "llm_complexity_grid.png"))
    try:
        crows = read_back(out, "llm_complexity_curves.csv")
    except MissingCSV:
        print("  llm_complexity_norm.png: not redrawn: no llm_complexity_curves.csv (make lab-publish LAB=complexity "
              "writes it)")
        return
    plot_complexity_norm(crows, os.path.join(out, "llm_complexity_norm.png"))


# ---- lab 8: Q/K/V variance dynamics [VarDyn E3] ----------------------------------------------------

def lab_qkv(lab):
    sc, q = lab.sc, lab.sc["qkv"]
    L = 12
    specs = {s: (f"qkv_s{s}", lab.model(a="gpt2", L=L, C=q["C"], H=q["H"], x=q["x"], m=10)
                 + flags(r=s, p=q["p"], probes="weight"))
             for s in sc["verdict_seeds"]}
    dirs = lab.run(specs)
    rows, first = [], {}
    for s, dd in sorted(dirs.items()):
        run = log(dd)
        for t in ("wq", "wk", "wv"):
            for l in range(L):
                recs = probe(run, "weight", tensor=f"h.{l}.attn.{t}")
                std0 = recs[0]["std"]
                for r in recs:
                    rows.append(dict(seed=s, tensor=t, layer=l, step=r["step"], std=r["std"], ratio=r["std"] / std0))
                moved = [r["step"] for r in recs if abs(r["std"] / std0 - 1) >= 0.1]
                first[(s, t, l)] = moved[0] if moved else None
    write_csv(lab.path("llm_qkv.csv"), rows)
    seeds = sc["verdict_seeds"]
    s0 = seeds[0]
    last = max(r["step"] for r in rows)
    per = [dict(seed=s, tensor=t, layer=l, first_moved=first[(s, t, l)],
                final_ratio=[r["ratio"] for r in rows if (r["seed"], r["tensor"], r["layer"], r["step"]) == (s, t, l, last)][0])
           for s in seeds for t in ("wq", "wk", "wv") for l in range(L)]
    write_csv(lab.path("llm_qkv_seeds.csv"), seed_summary(per, ["tensor", "layer"], ["first_moved", "final_ratio"]))
    plot_qkv(rows, seeds, L, q["p"], q["x"], lab.path("llm_qkv.png"))
    for t in ("wq", "wk", "wv"):
        rhos = []
        for s in seeds:
            fin = [p["final_ratio"] for p in per if (p["seed"], p["tensor"]) == (s, t)]
            moved = [first[(s, t, l)] for l in range(L)]
            # A layer that never moved 10% ranks after every layer that did.
            rho = spearman(range(L), [m if m is not None else q["x"] for m in moved])
            rhos.append(rho)
            steps = [m for m in moved if m is not None]
            earliest = [l for l in range(L) if steps and moved[l] == min(steps)] or "none moved"
            print(f"  {t} seed {s}: first step moved 10% per layer {moved} (earliest: layers {earliest}; Spearman with "
                  f"the layer {rho:+.2f}); final std/std0 {' '.join(f'{v:.2f}' for v in fin)} (largest: layer "
                  f"{int(np.argmax(fin))})")
        m, sd = mean_sd(rhos)
        print(f"  {t}: Spearman(layer, step moved) over {len(seeds)} seeds {m:+.2f}±{sd:.2f} "
              f"(positive in {sum(r > 0 for r in rhos)})")


def plot_qkv(rows, seeds, L, every, steps_total, path):
    """The qkv lab's figure from its CSV's rows (seed, tensor, layer, step, std, ratio): three heatmaps of
    std/std0 for the first seed on one colour scale, and the step each layer moved (mean ± sd over seeds)."""
    s0 = seeds[0]
    first = {}
    for s in seeds:
        for t in ("wq", "wk", "wv"):
            for l in range(L):
                moved = [r["step"] for r in rows if (r["seed"], r["tensor"], r["layer"]) == (s, t, l)
                         and abs(r["ratio"] - 1) >= 0.1]
                first[(s, t, l)] = min(moved) if moved else None
    fig, axs = plt.subplots(1, 5, figsize=(19, 4.6), gridspec_kw=dict(width_ratios=[1, 1, 1, 0.05, 1.35]))
    ax, cax = [axs[0], axs[1], axs[2], axs[4]], axs[3]
    maps = {}
    for t in ("wq", "wk", "wv"):
        steps = sorted({r["step"] for r in rows if r["seed"] == s0 and r["tensor"] == t})
        maps[t] = (steps, np.array([[r["ratio"] for r in rows if (r["seed"], r["tensor"], r["layer"]) == (s0, t, l)]
                                    for l in range(L)]))
    norm = figstyle.shared_norm([m for _, m in maps.values()])
    for k, t in enumerate(("wq", "wk", "wv")):
        steps, a = maps[t]
        im = ax[k].imshow(a, aspect="auto", cmap="magma", origin="lower", norm=norm,
                          extent=(steps[0], steps[-1] + every, -0.5, L - 0.5))
        ax[k].set_xlabel("step")
        ax[k].set_ylabel("layer")
        ax[k].set_title(f"W_{t[-1].upper()}: std / std at init, seed {s0}")
    fig.colorbar(im, cax=cax).set_label("std / std at init (one scale for the three maps)")
    for k, t in enumerate(("wq", "wk", "wv")):
        v = np.array([[first[(s, t, l)] if first[(s, t, l)] is not None else np.nan for l in range(L)] for s in seeds])
        n_moved = np.sum(~np.isnan(v), 0)
        m = np.array([np.nanmean(col) if n else np.nan for col, n in zip(v.T, n_moved)])
        sd = np.array([np.nanstd(col, ddof=1) if n > 1 else 0.0 for col, n in zip(v.T, n_moved)])
        ax[3].errorbar(np.arange(L) + (k - 1) * 0.15, m, yerr=sd, fmt=["-o", "--s", ":^"][k], color=f"C{k}", capsize=3,
                       label=f"W_{t[-1].upper()}")
        for l in range(L):
            if n_moved[l] < len(seeds):   # the mean is over the seeds in which the layer moved at all
                ax[3].annotate(f"W_{t[-1].upper()} layer {l}: moved in {n_moved[l]} of {len(seeds)} seeds", (l, steps_total),
                               xytext=(4, -4), textcoords="offset points", color=f"C{k}", ha="left", va="top")
    ax[3].set_ylim(0, steps_total * 1.08)
    ax[3].set_xlabel("layer")
    ax[3].set_ylabel("first probe step with |std / std_0 - 1| >= 10%")
    ax[3].set_title(f"when each layer's std moved (mean ± sd over {len(seeds)} seeds)")
    ax[3].legend(loc="upper right")
    figstyle.caption(fig, "Right: a layer that never moved by 10 % in a seed is left out of that layer's mean and sd "
                     "(in llm_qkv_seeds.csv, n counts the seeds in which it moved); the note says in how many seeds it moved.")
    save(fig, path)


def replot_qkv(out, sc):
    """llm_labs.py qkv --replot --out DIR: the figure again from DIR/llm_qkv.csv, no training."""
    rows = read_back(out, "llm_qkv.csv")
    seeds = sorted({r["seed"] for r in rows})
    L = 1 + max(r["layer"] for r in rows)
    steps = sorted({r["step"] for r in rows})
    plot_qkv(rows, seeds, L, steps[1] - steps[0], sc["qkv"]["x"], os.path.join(out, "llm_qkv.png"))


def spearman(x, y):
    """Rank correlation, ties given their average rank."""
    def ranks(v):
        v = np.asarray(v, dtype=float)
        return np.array([np.mean(np.flatnonzero(np.sort(v) == a)) for a in v])
    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


# ---- lab 9: muP [InitFP §5.4-5.6] -------------------------------------------------------------------

def lab_mup(lab):
    sc, mp = lab.sc, lab.sc["mup"]
    params = MUP_PARAMS
    seeds = sc["verdict_seeds"]
    coord = {(p, s): (f"coord_{p}_s{s}", flags(a="llama", L=mp["L"], H=4, b=sc["b"], t=sc["t"], S=1, u=0, q=1, m=0,
                                                I=init, r=s, coord_check=1, coord_widths=sc["coord_widths"]))
             for p, init in params.items() for s in seeds}
    sweep = {(p, w, lr, s): (f"mup_{p}_w{w}_lr{fmt(lr)}_s{s}",
                             lab.model(L=mp["L"], C=w, H=4, x=mp["x"], v=100, m=10) + flags(l=lr, r=s, I=init))
             for p, init in params.items() for w in mp["widths"] for lr in mp["lrs"] for s in seeds}
    cdirs, sdirs = lab.run(coord), lab.run(sweep)
    crow = []
    for (p, s), dd in cdirs.items():
        for r in log(dd)["probe"]:
            if r["probe"] == "coord":
                crow.append(dict(param=p, seed=s, width=r["width"], step=r["step"], tensor=r["tensor"], abs_mean=r["value"]))
    write_csv(lab.path("llm_mup_coord.csv"), crow)
    rows = []
    for (p, w, lr, s), dd in sorted(sdirs.items()):
        v = final_val(log(dd))  # None: the log writes a diverged (non-finite) loss as null
        rows.append(dict(param=p, width=w, lr=lr, seed=s, val_loss=float("nan") if v is None else v))
    write_csv(lab.path("llm_mup.csv"), rows)
    write_csv(lab.path("llm_mup_seeds.csv"), seed_summary(rows, ["param", "width", "lr"], ["val_loss"]))

    plot_mup_coord(crow, lab.path("llm_mup_coord.png"))
    for p in MUP_PARAMS:
        steps = sorted({r["step"] for r in crow if r["param"] == p})
        widths = sorted({r["width"] for r in crow if r["param"] == p})
        for name, sel in COORD_GROUPS[1:3]:
            for st in steps[1:]:
                v = np.array([[coord_of(crow, p, s, w, st, sel) for w in widths] for s in seeds])
                grow, span = v[:, -1] / v[:, 0], v.max(1) / v.min(1)
                print(f"  coord {p} {name.split(' (')[0]} step {st}: width {widths[-1]} / width {widths[0]} "
                      f"{grow.mean():.2f}±{grow.std(ddof=1):.2f}; max/min over widths {span.mean():.3f}±{span.std(ddof=1):.3f} "
                      f"(largest {span.max():.3f}; per seed {' '.join(f'{x:.3f}' for x in span)})")
    plot_mup(rows, mp, lab.path("llm_mup.png"))


# SP: the init muP reduces to at its base width (Var 1/fan_in, embeddings N(0, 1)), but one global
# lr, a random readout and 1/sqrt(d_head) attention (the standard parameterization of Tensor Programs V [muP]).
MUP_PARAMS = {"SP": "gamma:0.5,emb=normal:1", "muP": "mup"}
COORD_GROUPS = [("emb", lambda t: t == "emb"), ("attention out (mean over layers)", lambda t: t.endswith("attn_out")),
                ("MLP out (mean over layers)", lambda t: t.endswith("mlp_out")), ("logits", lambda t: t == "logits")]


def coord_of(crow, p, s, w, st, sel):
    """mean |x| of the coordinate check's tensors that sel picks, one parameterization, seed, width and step."""
    return np.mean([r["abs_mean"] for r in crow if (r["param"], r["seed"], r["width"], r["step"]) == (p, s, w, st)
                    and sel(r["tensor"])])


def plot_mup_coord(crow, path):
    """mean |x| against width, one line per step, a row per parameterization (llm_mup_coord.csv)."""
    params = [p for p in MUP_PARAMS if any(r["param"] == p for r in crow)]
    seeds = sorted({r["seed"] for r in crow})
    fig, ax = plt.subplots(len(params), 4, figsize=(16, 3.6 * len(params)), squeeze=False)
    for i, p in enumerate(params):
        steps = sorted({r["step"] for r in crow if r["param"] == p})
        widths = sorted({r["width"] for r in crow if r["param"] == p})
        for k, (name, sel) in enumerate(COORD_GROUPS):
            for j, st in enumerate(steps):
                v = np.array([[coord_of(crow, p, s, w, st, sel) for w in widths] for s in seeds])
                ax[i, k].errorbar(widths, v.mean(0), yerr=v.std(0, ddof=1), fmt="-o", ms=3, capsize=2,
                                  color=plt.get_cmap("viridis")(j / max(1, len(steps) - 1)), label=f"step {st}")
            ax[i, k].set_xscale("log")
            ax[i, k].set_yscale("log")
            ax[i, k].set_xticks(widths, [str(w) for w in widths])     # the widths measured, not 2x10^2 ...
            ax[i, k].set_xticks([], minor=True)
            ax[i, k].set_title(f"{p}: {name}", fontsize=9)
            ax[i, k].set_xlabel("width d (log scale)")
            ax[i, k].set_ylabel("mean |x| (activation units, log scale)")
        ax[i, 0].set_ylabel(f"mean |x| (activation units, log scale;\nmean ± sd over {len(seeds)} seeds)")
        ax[i, 0].legend(fontsize=7)
    save(fig, path)


def plot_mup(rows, mp, path):
    """The validation loss against the learning rate, one line per width, a panel per parameterization
    (llm_mup.csv): mean ± sd over the seeds, a star at each width's best mean. Prints that best."""
    params = [p for p in MUP_PARAMS if any(r["param"] == p for r in rows)]
    seeds = sorted({r["seed"] for r in rows})
    widths = sorted({r["width"] for r in rows})
    lrs = sorted({r["lr"] for r in rows})
    loss = {(r["param"], r["width"], r["lr"], r["seed"]): r["val_loss"] for r in rows}
    fig, ax = plt.subplots(1, len(params), figsize=(5.5 * len(params), 4), squeeze=False)
    for i, p in enumerate(params):
        for j, w in enumerate(widths):
            v = np.array([[loss[(p, w, lr, s)] for lr in lrs] for s in seeds])
            m, sd = v.mean(0), v.std(0, ddof=1)
            ax[0, i].errorbar(lrs, m, yerr=sd, fmt="-o", color=f"C{j}", capsize=3, label=f"width {w}")
            best = [lrs[int(np.nanargmin(x))] if np.isfinite(x).any() else float("nan") for x in v]
            k = int(np.nanargmin(m)) if np.isfinite(m).any() else 0   # every run diverged: no best
            ax[0, i].plot(lrs[k], m[k], "*", color=f"C{j}", ms=14)
            print(f"  {p} width {w}: best lr of the mean {lrs[k]:g} (val {m[k]:.4f}±{sd[k]:.4f}); best lr per seed "
                  f"{' '.join(f'{x:g}' for x in best)}; " + ", ".join(f"{lr:g}: {a:.3f}±{b:.3f}" for lr, a, b in
                                                                  zip(lrs, m, sd)))
        ax[0, i].set_xscale("log")
        ax[0, i].set_xlabel("peak learning rate")
        ax[0, i].set_ylabel(f"validation loss at step {mp['x']} (nats/byte;\nmean ± sd, {len(seeds)} seeds)")
        ax[0, i].set_title(f"{p} (-I {MUP_PARAMS[p]}), L={mp['L']}; star: best mean", fontsize=9)
        cap_top(ax[0, i], min(4.0, ax[0, i].get_ylim()[1]))
        ax[0, i].legend(fontsize=8)
    save(fig, path)


def replot_mup(out, sc):
    plot_mup_coord(read_back(out, "llm_mup_coord.csv"), os.path.join(out, "llm_mup_coord.png"))
    plot_mup(read_back(out, "llm_mup.csv"), sc["mup"], os.path.join(out, "llm_mup.png"))


# ---- lab 10: a compositional task ([ComplexCtl refs. 83, 84]; dev/labs/llm_compose.c) -------------------------

def compose_data():
    exe = os.path.join(ROOT, "dev", "labs", "llm_compose")
    subprocess.check_call(["make", "-s", "dev/labs/llm_compose"], cwd=ROOT)
    prefix = os.path.join(ROOT, "out", "labs", "data", "compose")
    if not os.path.exists(prefix + "_val.txt"):
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        subprocess.check_call([exe, prefix])
    return os.path.relpath(prefix, ROOT)


def compose_scores(val_text, dump):
    """p(answer) of every line, split by kind: in-distribution, held-out with the compositional answer,
    held-out with the symmetric answer (llm_compose.c: 64-byte blocks of 8 lines, the probe line last)."""
    p = {int(k): float(v) for k, v in zip(dump["pos"], dump["p"])}
    out = {"id": [], "held_comp": [], "held_sym": []}
    for blk in range(len(val_text) // 64):
        for line in range(8):
            pos = blk * 64 + line * 8 + 6
            if pos not in p:
                continue
            kind = "id" if line < 7 or blk % 3 == 0 else ("held_comp" if blk % 3 == 1 else "held_sym")
            out[kind].append(p[pos])
    return {k: np.array(v) for k, v in out.items()}


def lab_compose(lab):
    cp = lab.sc["compose"]
    prefix = compose_data()
    with open(os.path.join(ROOT, prefix + "_val.txt"), "rb") as f:
        val_text = f.read()
    blocks = len(val_text) // 64
    # Every seed trains cp["x"] steps and, apart, cp["long_x"] steps (does a slow start end?).
    seeds = lab.sc["verdict_seeds"]
    runs = [(g, s, x) for g in (0.5, 1.0) for s in seeds for x in (cp["x"], cp["long_x"])]
    specs = {(g, s, x): (f"compose_g{fmt(g)}_s{s}" + ("" if x == cp["x"] else f"_x{x}"),
                         lab.model(C=cp["C"], b=8, t=64, x=x, v=200, m=blocks // 8)
                         + flags(G=1, e=EPS_SMALL, g=g, r=s, i=prefix + "_train.txt", j=prefix + "_val.txt",
                                 dump_token_losses="{dir}/tokens.csv"))
             for g, s, x in runs}
    dirs = lab.run(specs)
    rows = []
    for (g, s, x), dd in sorted(dirs.items()):
        scores = compose_scores(val_text, read_dump(os.path.join(dd, "tokens.csv")))
        row = dict(gamma=g, seed=s, steps=x, val_loss=final_val(log(dd)))
        for k, v in scores.items():
            row[f"{k}_p"], row[f"{k}_acc"], row[f"{k}_n"] = float(v.mean()), float((v > 0.5).mean()), len(v)
        rows.append(row)
        print(f"  gamma={g} seed {s} steps {x}: in-dist p {row['id_p']:.3f} (acc>0.5 {row['id_acc']:.3f}); held-out "
              f"compositional p {row['held_comp_p']:.3f} (acc {row['held_comp_acc']:.3f}); symmetric p "
              f"{row['held_sym_p']:.3f} (acc {row['held_sym_acc']:.3f})")
    write_csv(lab.path("llm_compose.csv"), rows)
    quantities = ["val_loss"] + [f"{k}_{m}" for k in ("id", "held_comp", "held_sym") for m in ("p", "acc")]
    write_csv(lab.path("llm_compose_seeds.csv"), seed_summary(rows, ["gamma", "steps"], quantities))
    for g in (0.5, 1.0):
        for x in (cp["x"], cp["long_x"]):
            rs = [r for r in rows if (r["gamma"], r["steps"]) == (g, x)]
            learned = [r for r in rs if max(r["id_p"], r["held_comp_p"], r["held_sym_p"]) >= 2 / 26]
            comp = sum(r["held_comp_p"] > r["held_sym_p"] for r in learned)
            print(f"  gamma={g} {x} steps: at chance (every p < 2/26) in {len(rs) - len(learned)} of {len(rs)} seeds; "
                  f"of the others, held-out compositional > symmetric in {comp} of {len(learned)}")
    crows = curve_rows({k: val_curve(log(dd)) for k, dd in sorted(dirs.items())}, ("gamma", "seed", "steps"))
    write_csv(lab.path("llm_compose_curves.csv"), crows)
    plot_compose(rows, crows, lab.path("llm_compose.png"))


def plot_compose(rows, crows, path):
    """Left: p(answer) per kind of line, gamma and length of training, a point per seed and the mean ± sd
    (llm_compose.csv); right: the validation loss curves of every run (llm_compose_curves.csv)."""
    seeds = sorted({r["seed"] for r in rows})
    lengths = sorted({r["steps"] for r in rows})      # the lab's two lengths of training, short first
    curves = curves_of(crows, ("gamma", "seed", "steps"))
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    kinds = [("id_p", "in-distribution"), ("held_comp_p", "held-out (D,C):\ncompositional answer"),
             ("held_sym_p", "held-out (D,C):\nsymmetric answer")]
    for i, g in enumerate((0.5, 1.0)):
        for k, (key, _) in enumerate(kinds):
            for j, (x, mark) in enumerate(zip(lengths, ("o", "*"))):
                v = [r[key] for r in rows if r["gamma"] == g and r["steps"] == x]
                xk = k + (2 * i + j - 1.5) * 0.18
                ax[0].bar(xk, np.mean(v), 0.16, yerr=np.std(v, ddof=1), capsize=3, color=f"C{i}",
                          alpha=0.3 if j == 0 else 0.55)
                ax[0].plot([xk] * len(v), v, mark, ms=5 if j == 0 else 9, color=f"C{i}", mec="k", mew=0.4,
                           label=f"gamma={g:g}, {x} steps" if k == 0 else None)
        for (g2, s, x), (st, vl) in sorted(curves.items()):
            if g2 == g:
                ax[1].plot(st, vl, "-" if x == lengths[0] else "--", color=f"C{i}", lw=0.8,
                           label=f"gamma={g:g}, {x} steps" if s == seeds[0] else None)
    ax[0].axhline(1 / 26, color="k", lw=0.8, ls=":", label="chance, 1/26")
    ax[0].set_xticks(range(3), [k[1] for k in kinds], fontsize=8)
    ax[0].set_xlabel("which answer the model is asked for")
    ax[0].set_ylabel("mean p(answer) (probability)")
    ax[0].set_title(f"one point per seed ({len(seeds)} seeds); bars: mean ± sd", fontsize=9)
    ax[0].legend(fontsize=7)
    cap_top(ax[1], 1.6)
    ax[1].set_xlabel("step")
    ax[1].set_ylabel("validation loss (nats/byte, all bytes)")
    ax[1].legend(fontsize=8)
    save(fig, path)


def replot_compose(out, sc):
    plot_compose(read_back(out, "llm_compose.csv"), read_back(out, "llm_compose_curves.csv"),
                 os.path.join(out, "llm_compose.png"))


LABS = dict(norm_eps=lab_norm_eps, sinks=lab_sinks, resflow=lab_resflow, how_small=lab_how_small, tokens=lab_tokens,
            condense=lab_condense, complexity=lab_complexity, qkv=lab_qkv, mup=lab_mup, compose=lab_compose)
# --replot: each lab's figures from the CSVs in --out alone (what each draws: its replot_NAME)
REPLOT = dict(norm_eps=replot_norm_eps, sinks=replot_sinks, resflow=replot_resflow, how_small=replot_how_small,
              tokens=replot_tokens, condense=replot_condense, complexity=replot_complexity, qkv=replot_qkv,
              mup=replot_mup, compose=replot_compose)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("labs", nargs="+", help="lab names, or all")
    ap.add_argument("--scale", choices=SCALES, default="cpu")
    ap.add_argument("--jobs", type=int, help="runs at once (default: 2 at cpu scale, 1 at gpu scale)")
    ap.add_argument("--threads", type=int, help="OMP_NUM_THREADS of each run (default: 1, or all cores at gpu scale)")
    ap.add_argument("--bin", help="trainer binary (default: see above)")
    ap.add_argument("--out", help="output directory (default out/labs/NAME, or out/labs/gpu at --scale gpu)")
    ap.add_argument("--runs", help="the run cache (default out/labs/runs)")
    ap.add_argument("--replot", action="store_true",
                    help="draw the figures again from the CSVs in --out, training nothing (exit 5: a CSV missing)")
    args = ap.parse_args()
    if args.replot:
        names = list(REPLOT) if args.labs == ["all"] else [n.replace("-", "_") for n in args.labs]
        for n in names:
            if n not in REPLOT or not args.out:
                sys.exit(f"--replot needs --out DIR and one of: {' '.join(REPLOT)}")
        missing = []
        for n in names:
            print(f"lab {n}: figures from the CSVs in {args.out}", flush=True)
            try:
                REPLOT[n](args.out, SCALES[args.scale])
            except MissingCSV as e:   # a CSV the lab writes since issue 40 and that --out lacks: nothing drawn
                print(f"  {n}: not drawn: {args.out} has no {e} (the lab writes it; for doc/labs: make lab-publish "
                      f"LAB={n.replace('_', '-')})", file=sys.stderr)
                missing.append(n)
        if missing:
            sys.exit(5)
        return
    if args.runs:
        llm_runs.RUNS = os.path.abspath(args.runs)
    gpu = args.scale == "gpu"
    args.jobs = args.jobs or (1 if gpu else 2)
    args.threads = args.threads or (os.cpu_count() if gpu else 1)
    names = list(LABS) if args.labs == ["all"] else args.labs
    for n in names:
        if n not in LABS:
            sys.exit(f"unknown lab {n}; labs: {' '.join(LABS)}")
    lab = Lab(args)
    for n in names:
        print(f"lab {n} ({args.scale} scale)", flush=True)
        lab.begin(n)
        LABS[n](lab)


if __name__ == "__main__":
    main()
