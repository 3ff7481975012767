#!/usr/bin/env python3
"""Heatmaps of the row cosine-similarity matrices written by --cossim-dump [SmallInit eq. 6, Fig. 4d-e].

    dev/plot/heatmap.py OUT/cossim_h.0.attn.wq_step*.bin [-o heatmap.png]

Each file is int32 n, then n x n float32 C(W), row-major. Several files (e.g. the probe steps of one
run) become panels side by side, titled by tensor and step. Colours run from -1 (blue) to +1 (red):
condensed rows show as blocks of one colour. Needs python3-numpy and python3-matplotlib.
"""
import argparse
import os
import sys
import re

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import figstyle  # noqa: E402  (dev/plot: the one figure style)

if __name__ == "__main__":
    figstyle.need_plotting()      # re-executes under a python3 that has numpy and matplotlib
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

figstyle.apply()


def read_cossim(path):
    n = int(np.fromfile(path, dtype="<i4", count=1)[0])
    c = np.fromfile(path, dtype="<f4", offset=4)
    if c.size != n * n:
        raise SystemExit(f"error: {path} holds {c.size} values, expected {n} x {n}")
    return c.reshape(n, n)


def title_of(path):
    m = re.match(r"cossim_(.*)_step0*(\d+)\.bin$", os.path.basename(path))
    return f"{m.group(1)}, step {m.group(2)}" if m else os.path.basename(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="cossim_NAME_stepSTEP.bin files")
    ap.add_argument("-o", "--out", help="output PNG (default: heatmap_NAME.png beside the first file)")
    ap.add_argument("--cols", type=int, default=5, help="panels per row (default 5)")
    args = ap.parse_args()
    files = sorted(args.files)
    cols = min(args.cols, len(files))
    rows = (len(files) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols + 0.8, 3.2 * rows), squeeze=False)
    im = None
    for ax, path in zip(axes.flat, files):
        im = ax.imshow(read_cossim(path), cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
        ax.set_title(title_of(path), fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in list(axes.flat)[len(files):]:
        ax.axis("off")
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8, label="cosine similarity of rows")
    out = args.out
    if not out:
        m = re.match(r"cossim_(.*)_step", os.path.basename(files[0]))
        out = os.path.join(os.path.dirname(files[0]), f"heatmap_{m.group(1) if m else 'cossim'}.png")
    figstyle.finalize(fig, 110)
    fig.savefig(out, dpi=110)
    print("wrote", out)


if __name__ == "__main__":
    main()
