"""The one figure style of every plotting script (dev/plot/*.py, dev/labs/plot_labs.py, dev/labs/llm_labs.py).

    import figstyle                       # dev/plot is on sys.path (scripts in dev/labs add it)
    figstyle.need_plotting()              # before numpy and matplotlib are imported: see below
    import matplotlib.pyplot as plt
    figstyle.apply()                      # fonts, legends, line widths, dpi

What it fixes, once for all figures (issue 34 item 4): text readable at 100 % (font 11 pt, legends
10 pt, ticks 10 pt at 100 dpi); every line style and shaded band gets a legend entry (`band`,
`style_key`); layer axes carry integer ticks (`integer_ticks`); a colour bar always has a label and,
where panels show the same quantity, one scale for all of them (`shared_norm`, `colorbar`); special
marks and the conventions of the data get a caption under the figure (`caption`, and the wordings in
CONVENTIONS, which the handouts repeat).

need_plotting(): the labs' Python needs numpy and matplotlib, and the first `python3` on the PATH may
not have them (a pyenv or Homebrew python, while make uses /usr/bin/python3 or a venv). Called by a
script run as a program, it re-executes the script with the first of $PYTHON, the repository's
.venv/bin/python3 and /usr/bin/python3 that imports both, so that `python3 dev/plot/X.py` works with
whatever python3 comes first; where none does, it says so in one line and exits 3.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The conventions the labs' CSVs and figures use, in the words the captions and handouts use.
CONVENTIONS = {
    "never": "-1 (or an empty cell) = never: the event did not happen within the run",
    "log10_zero": "log10 ratio -inf = an update of exactly 0 (the weights did not change)",
    "nan": "NaN = the run diverged (a non-finite loss); it is drawn as a lone mark, not a line",
    "band": "shaded band = min to max over the seeds unless the legend says ± sd",
}


def _has_plotting(python):
    try:
        return subprocess.run([python, "-c", "import numpy, matplotlib"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def plotting_python():
    """The interpreter that has numpy and matplotlib: this one, else the first of $PYTHON,
    .venv/bin/python3 and /usr/bin/python3 that imports both; None if there is none (or where
    FIGSTYLE_NO_PLOTTING=1, which tries the checks' skip path on a machine that has them)."""
    if os.environ.get("FIGSTYLE_NO_PLOTTING") == "1":
        return None
    try:
        import matplotlib  # noqa: F401
        import numpy  # noqa: F401
        return sys.executable
    except ImportError:
        pass
    here = os.path.realpath(sys.executable)
    for p in (os.environ.get("PYTHON"), os.path.join(ROOT, ".venv", "bin", "python3"), "/usr/bin/python3"):
        if p and os.path.exists(p) and os.path.realpath(p) != here and _has_plotting(p):
            return p
    return None


def need_plotting():
    """Make sure numpy and matplotlib import, re-executing the running script under another python3 if
    this one lacks them (once: FIGSTYLE_REEXEC guards against a loop). Exit 3 with one line if none has them."""
    try:
        import matplotlib  # noqa: F401
        import numpy  # noqa: F401
        return
    except ImportError:
        pass
    script = os.path.relpath(os.path.abspath(sys.argv[0]), ROOT) if sys.argv and sys.argv[0] else "this script"
    if not os.environ.get("FIGSTYLE_REEXEC"):
        py = plotting_python()
        if py:
            os.environ["FIGSTYLE_REEXEC"] = "1"
            os.execv(py, [py, os.path.abspath(sys.argv[0])] + sys.argv[1:])
    sys.stderr.write(f"{script}: needs numpy and matplotlib, which {sys.executable} lacks, and neither $PYTHON, "
                     ".venv/bin/python3 nor /usr/bin/python3 has them: make lab-deps, or a venv (doc/labs/README.md)\n")
    sys.exit(3)


def apply():
    """The style: call once after importing matplotlib (the Agg backend: figures are files)."""
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams.update({
        "figure.dpi": 100, "savefig.dpi": 100, "savefig.bbox": "tight",
        "font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11,
        "xtick.labelsize": 10, "ytick.labelsize": 10,
        "legend.fontsize": 10, "legend.title_fontsize": 10, "legend.framealpha": 0.85,
        "lines.linewidth": 1.6, "lines.markersize": 5,
        "axes.grid": False, "image.cmap": "viridis",
    })


def integer_ticks(ax, axis="x"):
    """Integer ticks only (layers, depths, blocks): no 1.5th layer."""
    from matplotlib.ticker import MaxNLocator
    (ax.xaxis if axis == "x" else ax.yaxis).set_major_locator(MaxNLocator(integer=True))


def shared_norm(arrays, center=None, log=False):
    """One colour scale for several panels of the same quantity: min and max over all finite values
    (symmetric about center where given; LogNorm over the positive values with log=True)."""
    import matplotlib.colors as mcolors
    import numpy as np
    vals = np.concatenate([np.asarray(a, dtype=float).ravel() for a in arrays])
    vals = vals[np.isfinite(vals)]
    if log:
        vals = vals[vals > 0]
    lo, hi = (float(vals.min()), float(vals.max())) if vals.size else (0.0, 1.0)
    if center is not None:
        r = max(abs(hi - center), abs(center - lo)) or 1.0
        return mcolors.TwoSlopeNorm(vcenter=center, vmin=center - r, vmax=center + r)
    if log:
        return mcolors.LogNorm(vmin=lo, vmax=hi if hi > lo else lo * 10)
    return mcolors.Normalize(vmin=lo, vmax=hi if hi > lo else lo + 1)


def colorbar(fig, mappable, ax, label):
    """A labelled colour bar; ax may be a list of axes that share it (one scale for all)."""
    cb = fig.colorbar(mappable, ax=ax, shrink=0.9)
    cb.set_label(label)
    return cb


def band(ax, x, lo, hi, label, color=None, alpha=0.2, **kw):
    """A shaded band with its own legend entry (e.g. "min–max over 5 seeds")."""
    return ax.fill_between(x, lo, hi, color=color, alpha=alpha, linewidth=0, label=label, **kw)


def style_key(ax, entries, loc="best", title=None):
    """A legend of line styles alone (solid = ..., dashed = ...), for figures whose colours have their
    own legend: entries is [(label, dict of Line2D properties)]. Added beside the existing legend."""
    from matplotlib.lines import Line2D
    old = ax.get_legend()
    handles = [Line2D([], [], color=kw.pop("color", "0.3"), **kw) for _, kw in [(e[0], dict(e[1])) for e in entries]]
    leg = ax.legend(handles, [e[0] for e in entries], loc=loc, title=title)
    if old is not None:
        ax.add_artist(old)
    return leg


def caption(fig, text, y=None, fontsize=10):
    """A note under the figure, wrapped to its width: what a special mark means, which convention the
    data use."""
    import textwrap
    width = max(40, int(fig.get_figwidth() * 72 / (fontsize * 0.56)))
    fig.text(0.5, -0.01 if y is None else y, textwrap.fill(text, width), ha="center", va="top", fontsize=fontsize)


# Text no smaller than this many pixels in the saved PNG, whatever the figure's dpi (9 pt at 100 dpi).
MIN_TEXT_PX = 12.5
MIN_TITLE_PX = 14.0
LAYER_AXIS = re.compile(r"\b(layers?|depth|blocks?|sublayers?)\b", re.I)


def mark_band(artist, meaning):
    """Give a shaded band (fill_between, axvspan) the meaning its legend entry states, for finalize()."""
    artist.set_gid("band:" + meaning)
    return artist


def no_data(ax):
    """A panel of a degenerate run (every value NaN, or none positive on a log axis) is still drawn: a log
    axis with nothing positive to show becomes linear (matplotlib would refuse to draw it), and the panel
    says that it has no data, instead of the figure failing (issue 40)."""
    import math
    lim = ax.dataLim
    empty = not all(math.isfinite(v) for v in (lim.x0, lim.x1, lim.y0, lim.y1))
    for which, hi in (("x", lim.x1), ("y", lim.y1)):
        axis = ax.xaxis if which == "x" else ax.yaxis
        if axis.get_scale() == "log" and (empty or not hi > 0):
            (ax.set_xscale if which == "x" else ax.set_yscale)("linear")
            if which == "x":
                ax.set_xlim(0, 1)
            else:
                ax.set_ylim(0, 1)
    if empty and ax.axison and (ax.lines or ax.collections or ax.patches) and not ax.images:
        ax.text(0.5, 0.5, "no finite data", ha="center", va="center", transform=ax.transAxes, color="0.4")


def finalize(fig, dpi=100):
    """What every figure gets before it is saved (the savefig helpers of every script call this):
    text at least MIN_TEXT_PX high at the saved dpi (explicit small fontsize= arguments included); integer
    ticks on every axis labelled layer/depth/block; a legend entry for every kind of shaded band
    (mark_band); and a warning on stderr for a colour bar without a label."""
    import matplotlib.text as mtext
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator
    for ax in fig.axes:
        no_data(ax)
        for axis, label in ((ax.xaxis, ax.get_xlabel()), (ax.yaxis, ax.get_ylabel())):
            if LAYER_AXIS.search(label or "") and axis.get_scale() == "linear":
                axis.set_major_locator(MaxNLocator(integer=True))
        bands = []
        for c in list(ax.collections) + list(ax.patches):
            gid = c.get_gid() or ""
            if gid.startswith("band:") and gid[5:] not in bands:
                bands.append(gid[5:])
        old = ax.get_legend()
        if bands and old is not None:        # an axes without a legend (its figure's caption says it) gets none
            h, l = ax.get_legend_handles_labels()
            kw = dict(loc=old._loc, ncol=getattr(old, "_ncols", getattr(old, "_ncol", 1)))
            anchor = getattr(old, "_bbox_to_anchor", None)
            if anchor is not None and hasattr(anchor, "_bbox"):       # kept where the script put it
                kw.update(bbox_to_anchor=tuple(anchor._bbox.bounds), bbox_transform=anchor._transform)
            h += [Patch(facecolor="0.55", alpha=0.35, label=b) for b in bands]
            ax.legend(h, l + bands, **kw)
        if hasattr(ax, "_colorbar") and not (ax.get_ylabel() or ax.get_xlabel()):
            sys.stderr.write("figstyle: a colour bar without a label\n")
    body, title = MIN_TEXT_PX * 72.0 / dpi, MIN_TITLE_PX * 72.0 / dpi
    titles = {id(ax.title) for ax in fig.axes} | ({id(fig._suptitle)} if getattr(fig, "_suptitle", None) else set())
    for t in fig.findobj(mtext.Text):
        if t.get_text():
            t.set_fontsize(max(t.get_fontsize(), title if id(t) in titles else body))
    # a legend that no longer fits inside its axes at the readable size: said on stderr, for the script to fix
    try:
        fig.canvas.draw()
        for ax in fig.axes:
            leg = ax.get_legend()
            if leg is not None and leg.get_bbox_to_anchor() is not None:
                lb, ab = leg.get_window_extent(), ax.get_window_extent()
                if lb.y0 < ab.y0 - 2 or lb.y1 > ab.y1 + 2:
                    sys.stderr.write(f"figstyle: the legend of '{ax.get_title()[:50]}' is taller than its axes\n")
    except Exception:  # noqa: BLE001  (a layout check: never fail a figure for it)
        pass


def unlabelled_axes(fig):
    """['x of PANEL', ...]: every axis of a drawn figure that shows tick labels but has no label (a
    number on a page with no name and no unit). Colour bars are checked in finalize()."""
    out = []
    for k, ax in enumerate(fig.axes):
        if not ax.axison or hasattr(ax, "_colorbar"):
            continue
        for name, axis, label in (("x", ax.xaxis, ax.get_xlabel()), ("y", ax.yaxis, ax.get_ylabel())):
            shown = any(t.get_visible() and t.get_text().strip() for t in axis.get_ticklabels())
            if axis.get_visible() and shown and not label.strip():
                out.append(f"{name} of '{ax.get_title().splitlines()[0][:50] if ax.get_title() else f'panel {k + 1}'}'")
    return out


def save(fig, path, dpi=100):
    """finalize(), tight layout, save, close. An axis with tick labels but no label is reported on
    stderr; with FIGSTYLE_STRICT=1 (dev/labs/figure_check.py) the script then ends with exit 4, once
    all its figures are drawn."""
    import matplotlib.pyplot as plt
    finalize(fig, dpi)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    bare = unlabelled_axes(fig)
    plt.close(fig)
    if bare:
        sys.stderr.write(f"figstyle: {os.path.basename(path)}: an axis without a label: {', '.join(bare)}\n")
        if os.environ.get("FIGSTYLE_STRICT") == "1" and not _STRICT_EXIT:
            import atexit
            _STRICT_EXIT.append(atexit.register(_exit_unlabelled))


_STRICT_EXIT = []


def _exit_unlabelled():
    """FIGSTYLE_STRICT=1: the script ends with exit 4 once every figure is drawn, if any axis had no label."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(4)
