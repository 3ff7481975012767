#!/usr/bin/env python3
"""Figures from the JSON-lines log of one or several runs of train_gpt2 (doc/probes.md).

    dev/plot/plot_run.py out/run_a [out/run_b ...] [-o DIR] [--labels a,b]

Each argument is a run's output directory (its log.jsonl is read) or a log file. Several runs are
overlaid, one colour per run. Written to DIR (default: the first run's directory, plots/):

    loss.png          training loss (thin) and validation loss (dots) against the step
    act_std.png       std of the attention output, the MLP output and the residual stream of every
                      layer over the probe steps (probe act)
    stable_rank.png   stable rank of every matrix kind, one line per layer (probe rank; [SmallInit Fig. 4f-g])
    sink.png          attention-sink score per layer at the last probe step and over the steps (probe sink;
                      [SmallInit Fig. 1f-g])
    normscale.png     norm factor (sigma^2+eps)^-1/2 against the eps-free 1/sigma, and the fraction of
                      eps-dominated rows (probe normscale; [SmallInit Fig. 1c])
    param_norm.png    norm of all parameters over the steps (probe weight; [ComplexCtl Fig. 4])
and, when the log has them: resflow.png [SmallInit Fig. 3a], condense.png (D_c and D_s of W_Q and W_K per
layer, [ComplexCtl Fig. 7]), update_ratio.png (probe grad; [InitFP §5.2]), spike.png (probe spike),
embcos.png [ComplexCtl Fig. 6], gradact.png (std of d loss / d x at every block's input: the
backward signal that Xavier's backward condition keeps constant, [Xavier]), attnlogit.png (std of the
scaled attention logits per layer; 1 is [InitFP §1.2]'s target).
A figure whose probe is not in any log is skipped. Needs python3-numpy and python3-matplotlib.
"""
import argparse
import functools
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import figstyle  # noqa: E402  (dev/plot: the one figure style)

if __name__ == "__main__":
    figstyle.need_plotting()      # re-executes under a python3 that has numpy and matplotlib
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

figstyle.apply()

STYLES = ["-", "--", ":", "-."]


def read_log(path):
    """The events of one log: train/val lists and a list of probe records."""
    if os.path.isdir(path):
        path = os.path.join(path, "log.jsonl")
    run = {"train": [], "val": [], "probe": [], "config": None}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            e = json.loads(line)
            kind = e.get("event")
            if kind == "config":
                run["config"] = e
            elif kind in ("train", "val", "probe"):
                run[kind].append(e)
    return run


def probe(run, name, **match):
    """Records of one probe whose fields equal `match`, sorted by step."""
    out = [r for r in run["probe"] if r["probe"] == name and all(r.get(k) == v for k, v in match.items())]
    return sorted(out, key=lambda r: r["step"])


def series(records, field="value"):
    steps = np.array([r["step"] for r in records])
    vals = np.array([np.nan if r.get(field) is None else r[field] for r in records], dtype=float)
    return steps, vals


def has(runs, name):
    return any(probe(r, name) for r in runs)


def layers_of(run):
    return run["config"]["L"] if run["config"] else 1 + max((r["layer"] for r in run["probe"]), default=0)


def label_axes(ax, ylabel, title, xlabel="step", logy=False, legend=8, title_size=None):
    """The labels every panel gets; legend is the legend's font size (None: no legend)."""
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=title_size)
    if legend:
        ax.legend(fontsize=legend)


def save(fig, outdir, name):
    path = os.path.join(outdir, name)
    figstyle.save(fig, path, dpi=110)
    print("wrote", path)


def plot_loss(runs, labels, outdir):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (run, label) in enumerate(zip(runs, labels)):
        color = f"C{i}"
        if run["train"]:
            s = np.array([e["step"] for e in run["train"]])
            v = np.array([e["train_loss"] for e in run["train"]])
            ax.plot(s, v, color=color, lw=0.6, alpha=0.6, label=f"{label} train")
        if run["val"]:
            s = np.array([e["step"] for e in run["val"]])
            v = np.array([e["val_loss"] for e in run["val"]])
            ax.plot(s, v, "o-", color=color, ms=3, label=f"{label} val")
    label_axes(ax, "loss (nats/token)", "loss")
    save(fig, outdir, "loss.png")


def per_layer_lines(ax, run, name, tensor_fmt, field, style, label, cmap="viridis"):
    """One line per layer of the records probe=name, tensor=tensor_fmt % l."""
    L = layers_of(run)
    colors = plt.get_cmap(cmap)(np.linspace(0, 0.9, max(L, 1)))
    for l in range(L):
        s, v = series(probe(run, name, tensor=tensor_fmt % l), field)
        if len(s):
            ax.plot(s, v, style, color=colors[l], lw=1.2, label=f"{label} layer {l}" if label is not None else None)


def plot_act_std(runs, labels, outdir):
    parts = [("attn_out", "attention output"), ("mlp_out", "MLP output"), ("res", "residual stream after the block")]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    for ax, (part, title) in zip(axes, parts):
        for i, (run, label) in enumerate(zip(runs, labels)):
            per_layer_lines(ax, run, "act", "h.%d." + part, "std", STYLES[i % 4], label if ax is axes[0] else None)
        label_axes(ax, "std", title, logy=True, legend=7 if ax is axes[0] else None)
    fig.suptitle("activation std per layer (probe act; line style = run, colour = layer)")
    save(fig, outdir, "act_std.png")


def matrix_kinds(runs):
    kinds = []
    for run in runs:
        for r in probe(run, "rank"):
            m = re.match(r"h\.\d+\.(.*)", r["tensor"])
            k = m.group(1) if m else r["tensor"]
            if k not in kinds:
                kinds.append(k)
    return kinds


def plot_stable_rank(runs, labels, outdir):
    kinds = matrix_kinds(runs)
    cols = 4
    rows = (len(kinds) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    for ax, kind in zip(axes.flat, kinds):
        for i, (run, label) in enumerate(zip(runs, labels)):
            if kind in ("wte", "wpe", "lm_head"):
                s, v = series(probe(run, "rank", tensor=kind))
                ax.plot(s, v, STYLES[i % 4], color=f"C{i}", label=label)
            else:
                per_layer_lines(ax, run, "rank", "h.%d." + kind, "value", STYLES[i % 4], None)
        ax.set_yscale("log")
        ax.set_title(kind, fontsize=10)
        ax.set_xlabel("step")
    for ax in list(axes.flat)[len(kinds):]:
        ax.axis("off")
    axes.flat[0].set_ylabel("stable rank")
    fig.suptitle("stable rank ||W||_F^2 / ||W||_2^2 [SmallInit eq. 7]; colour = layer, line style = run "
                 + ", ".join(f"{STYLES[i % 4]} {l}" for i, l in enumerate(labels)), fontsize=10)
    save(fig, outdir, "stable_rank.png")


def plot_sink(runs, labels, outdir):
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, (run, label) in enumerate(zip(runs, labels)):
        recs = probe(run, "sink", head=-1)
        if not recs:
            continue
        last = max(r["step"] for r in recs)
        at_last = sorted((r for r in recs if r["step"] == last), key=lambda r: r["layer"])
        a.plot([r["layer"] for r in at_last], [r["value"] for r in at_last], "o-", color=f"C{i}",
               label=f"{label} (step {last})")
        steps = sorted({r["step"] for r in recs})
        mean = [np.mean([r["value"] for r in recs if r["step"] == s]) for s in steps]
        b.plot(steps, mean, "-", color=f"C{i}", label=label)
    label_axes(a, "sink score (mean over heads)", "attention on the first token per layer [SmallInit eq. 5]", xlabel="layer")
    label_axes(b, "mean over layers", "sink score over training", legend=None)
    save(fig, outdir, "sink.png")


def plot_normscale(runs, labels, outdir):
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, (run, label) in enumerate(zip(runs, labels)):
        for tensor, marker in (("h.0.ln1", None), ("lnf", "o")):
            recs = probe(run, "normscale", tensor=tensor)
            if not recs:
                continue
            s, f = series(recs, "factor")
            _, free = series(recs, "free")
            a.plot(s, f, ls="-", marker=marker, ms=3, color=f"C{i}", label=f"{label} {tensor}: (sigma^2+eps)^-1/2")
            a.plot(s, free, ls="--", marker=marker, ms=3, color=f"C{i}", alpha=0.6, label=f"{label} {tensor}: 1/sigma")
        L = layers_of(run)
        steps = sorted({r["step"] for r in probe(run, "normscale")})
        frac = [np.mean([r["eps_frac"] for r in probe(run, "normscale") if r["step"] == s]) for s in steps]
        b.plot(steps, frac, "-", color=f"C{i}", label=f"{label} ({2 * L + 1} norms)")
    label_axes(a, "mean factor over tokens", "norm factor with and without eps [SmallInit Fig. 1c]", logy=True, legend=7)
    label_axes(b, "fraction of rows with eps > sigma^2", "eps-dominated rows, mean over the norms")
    b.set_ylim(-0.05, 1.05)
    save(fig, outdir, "normscale.png")


def plot_global(runs, labels, outdir, name, tensor, field, ylabel, title, fname, logy=False, layer=-1):
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, (run, label) in enumerate(zip(runs, labels)):
        s, v = series(probe(run, name, tensor=tensor, layer=layer), field)
        ax.plot(s, v, "o-", ms=3, color=f"C{i}", label=label)
    label_axes(ax, ylabel, title, logy=logy)
    save(fig, outdir, fname)


def plot_resflow(runs, labels, outdir):
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, (run, label) in enumerate(zip(runs, labels)):
        for l in range(layers_of(run)):
            s, v = series(probe(run, "resflow", layer=l))
            ax.plot(s, v, STYLES[i % 4], color=f"C{i}", alpha=0.25 + 0.5 * l / max(layers_of(run), 1), lw=0.8)
        s, v = series(probe(run, "resflow", layer=-1))
        ax.plot(s, v, "o-", ms=3, color=f"C{i}", lw=2, label=f"{label}: h_L (thin: after each block)")
    label_axes(ax, "mean over tokens of ||h - e|| / ||e||", "residual flow [SmallInit §2.4, App. A]", logy=True)
    save(fig, outdir, "resflow.png")


def plot_condense(runs, labels, outdir):
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for col, kind in enumerate(("attn.wq", "attn.wk")):
        for row, field in enumerate(("dc", "ds")):
            ax = axes[row][col]
            for i, (run, label) in enumerate(zip(runs, labels)):
                recs = [r for r in probe(run, "condense") if r["tensor"].endswith(kind)]
                if not recs:
                    continue
                last = max(r["step"] for r in recs)
                first = min(r["step"] for r in recs)
                for step, style in ((first, ":"), (last, "o-")):
                    at = sorted((r for r in recs if r["step"] == step), key=lambda r: r["layer"])
                    ax.plot([r["layer"] for r in at], [r[field] for r in at], style, ms=3, color=f"C{i}",
                            label=f"{label} step {step}")
            name = "D_c" if field == "dc" else "D_s"
            label_axes(ax, name, f"{name} of W_{kind[-1].upper()} [ComplexCtl eq. 2, Fig. 7]", xlabel="layer", legend=7)
    save(fig, outdir, "condense.png")


def plot_update_ratio(runs, labels, outdir):
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, (run, label) in enumerate(zip(runs, labels)):
        s, v = series(probe(run, "grad", tensor="all"), "update_ratio")
        ax.plot(s, v, "o-", ms=3, color=f"C{i}", lw=2, label=f"{label}: all parameters")
        for j, kind in enumerate(("attn.wq", "mlp.wdown")):
            s, v = series(probe(run, "grad", tensor="h.0." + kind), "update_ratio")
            ax.plot(s, v, STYLES[(j + 1) % 4], color=f"C{i}", lw=1, label=f"{label}: h.0.{kind}")
    label_axes(ax, "||Δθ|| / ||θ||", "relative update per step [InitFP §5.2]", logy=True, legend=7)
    save(fig, outdir, "update_ratio.png")


def plot_spike(runs, labels, outdir):
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, (run, label) in enumerate(zip(runs, labels)):
        recs = probe(run, "spike")
        s, zl = series(recs, "loss_z")
        _, zg = series(recs, "grad_z")
        ax.plot(s, zl, "-", color=f"C{i}", lw=0.8, label=f"{label}: loss z")
        ax.plot(s, zg, ":", color=f"C{i}", lw=0.8, label=f"{label}: grad-norm z")
        flagged = [r["step"] for r in recs if r.get("spike")]
        ax.plot(flagged, [0] * len(flagged), "x", color=f"C{i}", label=f"{label}: flagged ({len(flagged)})")
    label_axes(ax, "z-score against the moving statistics", "loss-spike detector", legend=7)
    save(fig, outdir, "spike.png")


def plot_per_layer(runs, labels, outdir, name, tensor_fmt, field, ylabel, title, fname, logy=False, target=None):
    """One line per layer and run of one probe's field over steps (target: a dotted reference line)."""
    fig, ax = plt.subplots(figsize=(7, 4.3))
    for i, (run, label) in enumerate(zip(runs, labels)):
        per_layer_lines(ax, run, name, tensor_fmt, field, STYLES[i % 4], label)
    if target is not None:
        ax.axhline(target, color="gray", lw=0.8, ls=":")
    label_axes(ax, ylabel, title, logy=logy, legend=7)
    save(fig, outdir, fname)


def plot_hist(runs, labels, outdir):
    """The first run's histograms: per layer, MLP activations and the gradient of W_up, first and last probe step."""
    run = runs[0]
    recs = probe(run, "hist")
    steps = sorted({r["step"] for r in recs})
    L = layers_of(run)
    colors = plt.get_cmap("viridis")(np.linspace(0, 0.9, max(L, 1)))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, suffix, title in ((axes[0], "mlp_act", "MLP activations"), (axes[1], "mlp.wup.grad", "gradient of W_up")):
        for step, style in ((steps[0], ":"), (steps[-1], "-")):
            for l in range(L):
                at = [r for r in recs if r["step"] == step and r["tensor"] == f"h.{l}.{suffix}"]
                if not at or at[0]["lo"] is None:
                    continue
                r = at[0]
                edges = np.linspace(r["lo"], r["hi"], len(r["counts"]) + 1)
                ax.plot(0.5 * (edges[1:] + edges[:-1]), np.array(r["counts"]) / max(sum(r["counts"]), 1), style,
                        color=colors[l], lw=1.2, label=f"layer {l}, step {step}")
        label_axes(ax, "fraction of values", f"{labels[0]}: {title} (probe hist; [InitGuide ch. 2])", xlabel="value",
                   legend=6)
    save(fig, outdir, "hist.png")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run output directories or log.jsonl files")
    ap.add_argument("-o", "--out", help="output directory (default: FIRST_RUN/plots)")
    ap.add_argument("--labels", help="comma-separated labels, one per run (default: the directory names)")
    args = ap.parse_args()
    runs = [read_log(p) for p in args.runs]
    labels = args.labels.split(",") if args.labels else [os.path.basename(os.path.normpath(
        os.path.dirname(p) if p.endswith(".jsonl") else p)) for p in args.runs]
    if len(labels) != len(runs):
        sys.exit("error: --labels needs one label per run")
    first = args.runs[0]
    outdir = args.out or os.path.join(os.path.dirname(first) if first.endswith(".jsonl") else first, "plots")
    os.makedirs(outdir, exist_ok=True)
    plot_loss(runs, labels, outdir)
    param_norm = functools.partial(plot_global, name="weight", tensor="all", field="value", ylabel="||θ||_2 of all parameters",
                                   title="parameter norm [ComplexCtl Fig. 4]", fname="param_norm.png")
    embcos = functools.partial(plot_global, name="embcos", tensor="wte", field="value", ylabel="mean cosine over pairs",
                               title="embeddings of the 50 most frequent tokens [ComplexCtl Fig. 6]", fname="embcos.png")
    gradact = functools.partial(plot_per_layer, name="gradact", tensor_fmt="h.%d.in", field="std",
                                ylabel="std of d loss / d x", logy=True, fname="gradact.png",
                                title="backward signal at each block's input (probe gradact; [Xavier])")
    attnlogit = functools.partial(plot_per_layer, name="attnlogit", tensor_fmt="h.%d.attn.logits", field="std",
                                  ylabel="std of scale * q.k", logy=True, target=1.0, fname="attnlogit.png",
                                  title="attention logits per layer (probe attnlogit; [InitFP §1.2]: 1)")
    sat = functools.partial(plot_per_layer, name="sat", tensor_fmt="h.%d.mlp", field="value", fname="sat.png",
                            ylabel="fraction of MLP units with slope < 5% of the steepest",
                            title="saturated units per layer (probe sat; [InitGuide ch. 2])")
    figures = [("act", plot_act_std), ("rank", plot_stable_rank), ("sink", plot_sink), ("normscale", plot_normscale),
               ("weight", param_norm), ("resflow", plot_resflow), ("condense", plot_condense),
               ("grad", plot_update_ratio), ("spike", plot_spike), ("embcos", embcos), ("gradact", gradact),
               ("attnlogit", attnlogit), ("sat", sat), ("hist", plot_hist)]
    for probe_name, plot in figures:    # a figure whose probe is in no log is skipped
        if has(runs, probe_name):
            plot(runs, labels, outdir)

if __name__ == "__main__":
    main()
