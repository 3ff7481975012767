#!/usr/bin/env python3
"""Every axis of every figure the labs draw has a label (a suite of the full tier, issue 40 item 7).

    dev/labs/figure_check.py [LAB ...]      (default: the twenty labs, I and II; last line "N passed, N failed")

Draws each lab's figures again from its committed CSVs into a scratch directory, with FIGSTYLE_STRICT=1:
dev/plot/figstyle.py's save() then names on stderr every axis that shows tick labels but has no label,
and the script ends with exit 4. Labs I: dev/labs/plot_labs.py NAME --dir TMP; labs II: dev/labs/llm_labs.py
NAME --replot --out TMP, from doc/labs/llm_NAME.csv and llm_NAME_*.csv. What --replot cannot draw is not
checked here: condense's row-cosine heatmaps (their matrices are in the runs' dumps only; drawn under the
same rule by dev/labs/lab_check_broken.py --drivers all), and a figure whose curves CSV doc/labs does not
hold yet (llm_NAME_curves.csv, llm_tokens_bytes.csv: the labs write them since issue 40, and the next
make lab-publish LAB=NAME commits them): --replot then exits 5, and the lab is reported "skip" with the
file it lacks, counted neither passed nor failed. One test per lab. Needs a python3 with numpy and
matplotlib; without one it says so in one line and counts nothing.
"""
import glob
import os
import re
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

REPLOT_II = list(lab_check.LABS_II)      # every lab II has a --replot path (llm_labs.py's REPLOT)
MISSING_CSV = 5                          # llm_labs.py --replot: a CSV a figure needs is not there


def draw(py, lab, d):
    """(exit status, stderr) of drawing one lab's figures from its committed CSV(s) copied into d."""
    extra = [] if lab in lab_check.LABS_I else glob.glob(os.path.join(ROOT, "doc", "labs", f"llm_{lab}_*.csv"))
    for fname in list(lab_check.files_of(lab)) + [os.path.basename(f) for f in extra]:
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
            if st == MISSING_CSV and not bare and lab not in lab_check.LABS_I:
                lacks = re.findall(r"has no (\S+)", err)
                print(f"  skip {lab}: doc/labs has no {', '.join(lacks) or 'CSV it needs'} yet (make lab-publish "
                      f"LAB={lab.replace('_', '-')} writes it)")
                continue
            results.append(st == 0 and not bare and bool(pngs))
            print(f"  ok   {lab}: {len(pngs)} figures, every axis labelled" if results[-1] else
                  f"  FAIL {lab}: " + ("; ".join(bare) or f"exit {st}: {err.strip()[-300:]}"))
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
