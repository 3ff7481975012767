#!/usr/bin/env python3
"""Every axis of every figure the labs draw has a label (a suite of the full tier, issue 40 item 7).

    dev/labs/figure_check.py [LAB ...]      (default: the ten labs I and qkv; last line "N passed, N failed")

Draws each lab's figures again from its committed CSV into a scratch directory, with FIGSTYLE_STRICT=1:
dev/plot/figstyle.py's save() then names on stderr every axis that shows tick labels but has no label,
and the script ends with exit 4. Labs I: dev/labs/plot_labs.py NAME --dir TMP; labs II: the qkv lab, the
one drawn from its CSV (dev/labs/llm_labs.py qkv --replot; the others are drawn from their runs' logs, and
dev/labs/lab_check_broken.py --drivers draws them under the same rule). One test per lab. Needs a python3
with numpy and matplotlib; without one it says so in one line and counts nothing.
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "dev", "plot"))
sys.path.insert(0, HERE)
import figstyle  # noqa: E402
import lab_check  # noqa: E402

REPLOT_II = ["qkv"]


def draw(py, lab, d):
    """(exit status, stderr) of drawing one lab's figures from its committed CSV(s) copied into d."""
    for fname in lab_check.files_of(lab):
        shutil.copy(os.path.join(ROOT, "doc", "labs", fname), d)
    if lab in lab_check.LABS_I:
        argv = [py, os.path.join(HERE, "plot_labs.py"), lab, "--dir", d]
    else:
        argv = [py, os.path.join(HERE, "llm_labs.py"), lab, "--replot", "--out", d]
    r = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, FIGSTYLE_STRICT="1"), cwd=ROOT)
    return r.returncode, r.stderr


def main():
    labs = [lab_check.lab_name(x) for x in sys.argv[1:]] or lab_check.LABS_I + REPLOT_II
    py = figstyle.plotting_python()
    if py is None:
        print("skipped: no python3 here has numpy and matplotlib, so no figure was drawn (make lab-deps)")
        print("0 passed, 0 failed")
        return 0
    results = []
    with tempfile.TemporaryDirectory(prefix="figure_check.") as tmp:
        for lab in labs:
            d = os.path.join(tmp, lab)
            os.makedirs(d)
            st, err = draw(py, lab, d)
            bare = [l.split("figstyle: ", 1)[1] for l in err.splitlines() if "an axis without a label" in l]
            pngs = [f for f in os.listdir(d) if f.endswith(".png")]
            results.append(st == 0 and not bare and bool(pngs))
            print(f"  ok   {lab}: {len(pngs)} figures, every axis labelled" if results[-1] else
                  f"  FAIL {lab}: " + ("; ".join(bare) or f"exit {st}: {err.strip()[-300:]}"))
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
