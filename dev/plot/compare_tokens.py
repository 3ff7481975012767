#!/usr/bin/env python3
"""Token-level comparison of two runs' --dump-token-losses files [SmallInit §2.5 and §4.7, Fig. 4a-c].

    dev/plot/compare_tokens.py A.csv B.csv [--labels small,standard] [--decode data/x_decode.bin]
                               [--start 0 --length 400] [-o DIR]

A is the run under study ([SmallInit]: small init), B the reference. Both dumps must cover the same
validation positions (same data, -b, -t and -m). Per position t:

    Δsym p_t = 2 (p_A(y_t) - p_B(y_t)) / (p_A(y_t) + p_B(y_t))     in [-2, 2], > 0 where A is better
    d_t      = (loss_A(y_t) + loss_B(y_t)) / 2                      the token's difficulty

Written to DIR (default: the directory of A):
    delta_sym_hist.png     histogram of Δsym p with its mean and median (Fig. 4a)
    delta_sym_bins.png     mean and median Δsym p in 10 equal-sized difficulty bins, easiest first (Fig. 4b)
    delta_sym_passage.html the passage [start, start+length) with every token coloured by Δsym p (Fig. 4c)
and prints the numbers of both plots. Tokens are bytes unless --decode names a GPT-2 decode table
(dev/data/tokenize_gpt2.sh writes one beside the token shards). Needs python3-numpy and python3-matplotlib.
"""
import argparse
import html
import os
import struct
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
from plot_run import label_axes, save  # noqa: E402  (this directory is on sys.path)


def read_dump(path):
    d = np.genfromtxt(path, delimiter=",", names=True, dtype=None)
    return {k: np.asarray(d[k]) for k in ("pos", "target", "loss", "p")}


def read_decoder(path):
    """Token id -> bytes, from the decode table (int32 header[256]: 20240328, 2, vocab, eot; then per token
    a length byte and the bytes)."""
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        if header[0] != 20240328 or header[1] != 2:
            sys.exit(f"error: {path} is not a decode table")
        pieces = []
        for _ in range(header[2]):
            n = f.read(1)[0]
            pieces.append(f.read(n))
    return pieces


def delta_sym(pa, pb):
    s = pa + pb
    # both probabilities 0 (underflow): no difference
    return np.where(s > 0, 2.0 * (pa - pb) / np.where(s > 0, s, 1.0), 0.0)


def difficulty_bins(d, delta, nbins=10):
    """Mean and median of delta in nbins equal-sized bins of d, easiest first."""
    order = np.argsort(d, kind="stable")
    bins = np.array_split(order, nbins)
    return ([float(d[b].mean()) for b in bins], [float(delta[b].mean()) for b in bins],
            [float(np.median(delta[b])) for b in bins])


def colour(x):
    """Red (A worse) through white to green (A better) for x in [-2, 2]."""
    a = min(abs(x) / 1.0, 1.0)
    if x >= 0:
        return f"rgb({int(255 * (1 - a))},{int(255 - 80 * a)},{int(255 * (1 - a))})"
    return f"rgb({int(255 - 40 * a)},{int(255 * (1 - a))},{int(255 * (1 - a))})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="token dump of the run under study (e.g. small init)")
    ap.add_argument("b", help="token dump of the reference run (e.g. standard init)")
    ap.add_argument("--labels", default="A,B", help="names of the two runs (default A,B)")
    ap.add_argument("--decode", help="GPT-2 decode table for token shards (default: tokens are bytes)")
    ap.add_argument("--start", type=int, default=0, help="first position of the rendered passage (index into the dump)")
    ap.add_argument("--length", type=int, default=400, help="tokens in the rendered passage")
    ap.add_argument("-o", "--out", help="output directory (default: the directory of A)")
    args = ap.parse_args()
    la, lb = args.labels.split(",")
    A, B = read_dump(args.a), read_dump(args.b)
    if len(A["pos"]) != len(B["pos"]) or (A["pos"] != B["pos"]).any() or (A["target"] != B["target"]).any():
        sys.exit("error: the dumps cover different positions or targets (same data, -b, -t, -m needed)")
    outdir = args.out or os.path.dirname(os.path.abspath(args.a))
    os.makedirs(outdir, exist_ok=True)
    delta = delta_sym(A["p"], B["p"])
    d = 0.5 * (A["loss"] + B["loss"])
    mean, med = float(delta.mean()), float(np.median(delta))
    print(f"{len(delta)} tokens: mean loss {la} {A['loss'].mean():.6f}, {lb} {B['loss'].mean():.6f}")
    print(f"Δsym p ({la} vs {lb}): mean {mean:+.4f}, median {med:+.4f}, "
          f"{(delta > 0).mean() * 100:.1f}% of tokens better under {la}")

    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.hist(delta, bins=80, range=(-2, 2), color="C0")
    ax.axvline(mean, color="k", ls="--", lw=1, label=f"mean {mean:+.4f}")
    ax.axvline(med, color="C3", ls="--", lw=1, label=f"median {med:+.4f}")
    label_axes(ax, "tokens", f"token-level gap, {la} vs {lb} [SmallInit Fig. 4a]",
               xlabel=f"Δsym p = 2 (p_{la} - p_{lb}) / (p_{la} + p_{lb})", logy=True)
    save(fig, outdir, "delta_sym_hist.png")

    centres, means, medians = difficulty_bins(d, delta)
    print("difficulty bin (mean d_t): mean Δsym p, median Δsym p")
    for i, (c, m, md) in enumerate(zip(centres, means, medians)):
        print(f"  {i + 1:2d} ({c:7.3f}): {m:+.4f} {md:+.4f}")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    x = np.arange(1, 11)
    ax.bar(x - 0.2, means, 0.4, label="mean")
    ax.bar(x + 0.2, medians, 0.4, label="median")
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xticks(x)
    ax.set_xticklabels([f"{i}\n{c:.2f}" for i, c in zip(x, centres)], fontsize=7)
    label_axes(ax, "Δsym p", f"gap by token difficulty, {la} vs {lb} [SmallInit Fig. 4b]",
               xlabel="difficulty bin (mean loss of the two runs), easiest first")
    save(fig, outdir, "delta_sym_bins.png")

    pieces = read_decoder(args.decode) if args.decode else None
    lo, hi = max(args.start, 0), min(args.start + args.length, len(delta))
    spans = []
    for i in range(lo, hi):
        tok = int(A["target"][i])
        text = pieces[tok].decode("utf-8", "replace") if pieces else bytes([tok]).decode("latin-1")
        tip = f"{la} p={A['p'][i]:.3g} {lb} p={B['p'][i]:.3g} Δsym={delta[i]:+.3f}"
        body = html.escape(text).replace("\n", "↵<br>")
        spans.append(f'<span style="background:{colour(delta[i])}" title="{tip}">{body}</span>')
    page = (f"<!doctype html><meta charset='utf-8'><title>Δsym p, {la} vs {lb}</title>"
            f"<p>Validation positions {int(A['pos'][lo])}-{int(A['pos'][hi - 1])}: green where {la} gives the "
            f"target a higher probability than {lb}, red where lower (Δsym p, [SmallInit Fig. 4c]); hover for the "
            f"numbers.</p><pre style='white-space:pre-wrap;font-size:15px;line-height:1.6'>{''.join(spans)}</pre>")
    with open(os.path.join(outdir, "delta_sym_passage.html"), "w") as f:
        f.write(page)
    print("wrote", ", ".join(os.path.join(outdir, n) for n in
                             ("delta_sym_hist.png", "delta_sym_bins.png", "delta_sym_passage.html")))


if __name__ == "__main__":
    main()
