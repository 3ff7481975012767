#!/usr/bin/env python3
"""make lab-check must tell a broken lab from a working one: every lab, checked on a broken run (a suite
of make check, issue 34 item 3).

    dev/labs/lab_check_broken.py [LAB ...] [--drivers default|all|none]
                                   (default: all twenty; the last line is "N passed, N failed")

Running twenty labs broken is far too slow for make check (labs II take minutes to an hour each), so each
broken run is the lab's committed CSV changed the way the bug would change it, in a scratch directory:

  another initializer (a lab whose setting never reaches the trainer, so every run gets the first one):
    labs II: every row takes the values of the row with the same key but the lab's first setting (norm-eps,
      sinks, how-small, condense: gamma or init; resflow: the branch of its depth runs; complexity: the
      weight decay; mup: the parameterization; compose: gamma); tokens compares two inits, so with one
      init both models are the same: every Δsym p 0, none positive, both losses γ = 0.5's;
    labs I: within each section and metric, every setting (a series, its seeds "|sK" kept) takes the values
      of the next setting, the one after it in the CSV; where a section's series are seeds (the sweep),
      every σ takes the values of the next σ.
  learning rate 0 (qkv): no weight moves, so every std stays at its step-0 value bit for bit (AdamW with
      lr 0 moves nothing, weight decay included): ratio 1, std = std at step 0.

Each broken run must make dev/labs/lab_check.py exit 1 with at least one quantity that DIFFERS (not only
rows: a row's tolerance is a seed's worth, see lab_check.py's QUANTITIES). Two controls per lab: the
committed CSV against itself has no row or quantity that DIFFERS, and its verdict (the summary's first
line) is PASS, or FAILS only because the rows cannot resolve the lab's effect (lab_check.py's
RESOLUTION: required of how-small and qkv, refused of resflow); and for labs II, a run in which the last seed's rows are replaced by
the first seed's (a change of seed, not a bug) has no quantity that DIFFERS.

The drivers on degenerate runs (issue 40: make lab-check LAB=qkv on a run in which nothing moved ended in
a traceback in llm_labs.py, with no verdict): a lab's driver must finish on a degenerate run, writing its
CSV and figures (every axis labelled: FIGSTYLE_STRICT, see figstyle.py), and lab_check.py must then FAIL
with its summary. Labs I: plot_labs.py on the committed CSV made degenerate two ways, every measured value
NaN, and every series flat at its first value. Labs II: llm_labs.py with dev/labs/still_trainer.sh as its
trainer (learning rate 0, so no weight moves; 12 steps, so a series probed every 50 steps has one point
and a step the lab reads later is missing; resflow measures the init, which this leaves alone, so its
check must PASS instead). --drivers default runs every lab I and qkv (about 3 min on 2
busy cores); all adds the other nine labs II (they train 450 tiny runs: about 40 minutes at a load of 16
on 2 cores); none skips the drivers. The drivers need numpy and matplotlib: without them one line says
they were skipped. The rest is Python's standard library only, about 10 s for all twenty.
"""
import argparse
import contextlib
import csv
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "dev", "plot"))
import figstyle  # noqa: E402  (stdlib only until its plotting functions are called)
import lab_check  # noqa: E402

REF = os.path.join(lab_check.ROOT, "doc", "labs")
SETTING = {"norm_eps": ("gamma",), "sinks": ("gamma",), "resflow": ("branch",), "how_small": ("init", "gamma"),
           "condense": ("gamma",), "complexity": ("weight_decay",), "mup": ("param",), "compose": ("gamma",)}


def read(path):
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        return r.fieldnames, list(r)


def write(path, fields, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def first_setting(fields, rows, key_cols, cols, closed):
    """Every row gets the measured values (not the closed forms, which the lab computes from the setting
    it asked for) of its twin with the first setting (cols), the other keys the same."""
    cols = [c for c in cols if c in key_cols]
    if not cols:
        return rows, 0
    first = tuple(rows[0][c] for c in cols)
    others = [c for c in key_cols if c not in cols]
    twin = {tuple(r[c] for c in others): r for r in rows if tuple(r[c] for c in cols) == first}
    out, n = [], 0
    for r in rows:
        t = twin.get(tuple(r[c] for c in others))
        if t is not None and tuple(r[c] for c in cols) != first:
            r = dict(r, **{c: t[c] for c in fields if c not in key_cols and c not in closed})
            n += 1
        out.append(r)
    return out, n


def setting_of(series):
    return re.sub(r"\|s\d+$", "", series)


def shift_labs_i(rows):
    """Within each section/metric every setting takes the next setting's values (seed suffix kept)."""
    by = {}
    for r in rows:
        by.setdefault((r["section"], r["metric"]), []).append(r)
    changed = 0
    index = {(r["section"], r["series"], r["x"], r["metric"]): r for r in rows}
    new_vals = {}
    for (sec, met), rs in by.items():
        settings = list(dict.fromkeys(setting_of(r["series"]) for r in rs))
        if len(settings) > 1:
            nxt = dict(zip(settings, settings[1:] + settings[:1]))
            for r in rs:
                suffix = r["series"][len(setting_of(r["series"])):]
                t = index.get((sec, nxt[setting_of(r["series"])] + suffix, r["x"], met))
                if t is not None and t["value"] != r["value"]:
                    new_vals[id(r)] = t["value"]
        else:           # one setting (or the series are seeds): shift along x (the sweep's sigma)
            xs = list(dict.fromkeys(r["x"] for r in rs))
            nxt = dict(zip(xs, xs[1:] + xs[:1]))
            for r in rs:
                t = index.get((sec, r["series"], nxt[r["x"]], met))
                if t is not None and t["value"] != r["value"]:
                    new_vals[id(r)] = t["value"]
    out = []
    for r in rows:
        if id(r) in new_vals:
            r = dict(r, value=new_vals[id(r)])
            changed += 1
        out.append(r)
    return out, changed


def broken(lab, d):
    """Write the lab's broken CSV(s) into d; returns a one-line description."""
    files = lab_check.files_of(lab)
    changed = 0
    for fname, (key_cols, seed_col, closed, long_form) in files.items():
        fields, rows = read(os.path.join(REF, fname))
        if long_form:
            rows, n = shift_labs_i(rows)
            how = "every setting with the next one's values"
        elif lab == "qkv":
            s0 = {(r["seed"], r["tensor"], r["layer"]): r["std"] for r in rows if r["step"] == "0"}
            rows = [dict(r, std=s0[(r["seed"], r["tensor"], r["layer"])], ratio="1") for r in rows]
            n = len(rows)
            how = "learning rate 0: every std at its step-0 value"
        elif lab == "tokens":
            rows = [dict(r, mean="0", median="0", frac_positive="0" if r["frac_positive"] else "",
                         loss_gamma1=r["loss_gamma05"]) for r in rows]
            n = len(rows)
            how = "one init for both models: every Δsym p 0"
        else:
            rows, n = first_setting(fields, rows, key_cols, SETTING[lab], closed)
            how = f"every run with the first {'/'.join(SETTING[lab])}"
        changed += n
        write(os.path.join(d, fname), fields, rows)
    return f"{how} ({changed} rows changed)"


def reseeded(lab, d):
    """Labs II: the last seed's rows replaced by the first seed's (a change of seed, no bug)."""
    for fname, (key_cols, seed_col, closed, long_form) in lab_check.files_of(lab).items():
        fields, rows = read(os.path.join(REF, fname))
        if seed_col is not None:
            seeds = sorted({r[seed_col] for r in rows}, key=float)
            if len(seeds) > 2:
                a, b = seeds[0], seeds[-1]
                others = [c for c in key_cols if c != seed_col]
                src = {tuple(r[c] for c in others): r for r in rows if r[seed_col] == a}
                rows = [dict(r, **{c: src[tuple(r[c] for c in others)][c] for c in fields if c not in key_cols})
                        if r[seed_col] == b and tuple(r[c] for c in others) in src else r for r in rows]
        write(os.path.join(d, fname), fields, rows)


def run_check(lab, d):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        st = lab_check.check(lab, d, REF)
    text = out.getvalue()
    m = re.search(r"(\d+) rows, (\d+) PASS, (\d+) DIFFERS.*?; (\d+) quantities, (\d+) agree, (\d+) DIFFER", text)
    return st, m, text


def verdict(lab, text):
    """The summary's first line, the verdict: the line just before the counts (None if not there)."""
    lines = text.rstrip("\n").split("\n")
    return lines[-2] if len(lines) > 1 and lines[-2].startswith(f"lab-check {lab}: ") else None


# Labs whose committed rows are too wide for their effect (issue 40: how-small rows ±0.2 around settings
# 0.15 apart, qkv ±0.88 on ratios 0.24 apart): their check of the committed CSV against itself must FAIL
# on that verdict alone, and say so first; resflow's rows resolve its effect (control: PASS).
UNRESOLVED = ("how_small", "qkv")
RESOLVED = ("resflow",)


def self_check(lab, st, m, text):
    """The committed CSV against itself: (ok, message). No row or quantity DIFFERS; the verdict is PASS
    with exit 0, or FAILS, exit 1, only because the rows cannot resolve the lab's effect."""
    v = verdict(lab, text)
    if not m or int(m.group(3)) or int(m.group(6)) or v is None:
        return False, f"exit {st}: {text.strip()[-300:]}"
    unresolved = "cannot resolve its effect" in v
    if unresolved != (st == 1) or (v.endswith(": PASS") == unresolved):
        return False, f"exit {st} with the verdict {v!r}"
    if lab in UNRESOLVED and not unresolved:
        return False, f"its rows cannot resolve its effect, but the verdict is {v!r}"
    if lab in RESOLVED and unresolved:
        return False, f"its rows resolve its effect, but the verdict is {v!r}"
    return True, v


# ---- the drivers on degenerate runs (issue 40) ---------------------------------------------------------
DRIVERS_II = ("qkv",)       # by default: the lab whose driver crashed (--drivers all: every lab, minutes)
# resflow measures the model at initialization (one-step runs, probes at step 0), which learning rate 0
# leaves as it is: its "degenerate" run is a true rerun, and its check must PASS (measured: it does).
INIT_ONLY = ("resflow",)


def degenerate_labs_i(rows, how):
    """A labs-I CSV as a degenerate run would write it: 'nan', every measured value NaN (a run that
    diverged at once; whole numbers, which are counts, layers, steps and the configuration, stay);
    'still', every value of a series that of its first x (nothing moves, a flat series)."""
    if how == "nan":
        return [r if re.fullmatch(r"-?\d+", r["value"]) else dict(r, value="nan") for r in rows]
    first = {}
    for r in rows:
        first.setdefault((r["section"], r["series"], r["metric"]), r["value"])
    return [dict(r, value=first[(r["section"], r["series"], r["metric"])]) for r in rows]


def driver_run(argv):
    """(exit status, output) of a lab's driver; figstyle's label rule is enforced (FIGSTYLE_STRICT)."""
    r = subprocess.run(argv, capture_output=True, text=True, cwd=lab_check.ROOT,
                       env=dict(os.environ, FIGSTYLE_STRICT="1"))
    return r.returncode, r.stdout + r.stderr


def drivers(lab, d, py):
    """The lab's driver on degenerate runs must finish (exit 0, its CSV and figures written, no traceback),
    and lab_check.py on what it wrote must then fail with its summary. Labs I: plot_labs.py on the
    committed CSV made degenerate (degenerate_labs_i); labs II: llm_labs.py trains its runs with
    dev/labs/still_trainer.sh (learning rate 0, 12 steps). Returns [(ok, message)]."""
    out = []
    if lab in lab_check.LABS_I:
        fname = f"{lab}.csv"
        fields, rows = read(os.path.join(REF, fname))
        cases = []
        for how in ("nan", "still"):
            dd = os.path.join(d, f"drivers_{how}")
            os.makedirs(dd)
            write(os.path.join(dd, fname), fields, degenerate_labs_i(rows, how))
            cases.append((how, dd, [py, os.path.join(HERE, "plot_labs.py"), lab, "--dir", dd]))
    else:
        dd = os.path.join(d, "drivers_still")
        cases = [("learning rate 0, 12 steps", dd,
                  [py, os.path.join(HERE, "llm_labs.py"), lab, "--bin", os.path.join(HERE, "still_trainer.sh"),
                   "--out", dd, "--runs", os.path.join(d, "..", "runs")])]
    for how, dd, argv in cases:
        st, text = driver_run(argv)
        pngs = [f for f in os.listdir(dd) if f.endswith(".png")] if os.path.isdir(dd) else []
        if st != 0 or "Traceback" in text or not pngs:
            tail = [l for l in text.strip().split("\n") if l.strip()][-3:]
            out.append((False, f"its driver on a degenerate run ({how}) did not finish: exit {st}, "
                               f"{len(pngs)} figures: {' | '.join(tail)[-400:]}"))
            continue
        cst, m, ctext = run_check(lab, dd)
        v = verdict(lab, ctext)
        if lab in INIT_ONLY and cst == 0 and v and v.endswith(": PASS"):
            out.append((True, f"its driver finished ({how}), {len(pngs)} figures; its runs measure the init, "
                              "which learning rate 0 leaves alone, so lab-check PASSes"))
        elif cst == 1 and m and v and ": FAILS: " in v:
            out.append((True, f"its driver finished on a degenerate run ({how}), {len(pngs)} figures; "
                              f"lab-check fails: {v.split(': FAILS: ', 1)[1][:110]}"))
        else:
            out.append((False, f"its driver finished on a degenerate run ({how}), but lab-check exit {cst}: "
                               f"{(v or ctext.strip()[-200:])}"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("labs", nargs="*")
    ap.add_argument("--drivers", choices=("default", "all", "none"), default="default",
                    help="labs whose drivers run on degenerate runs: default every lab I and qkv; all: every lab")
    a = ap.parse_args()
    labs = [lab_check.lab_name(x) for x in a.labs] or lab_check.LABS_I + list(lab_check.LABS_II)
    py = figstyle.plotting_python()
    if py is None and a.drivers != "none":
        print("  skipped: no python3 here has numpy and matplotlib, so the labs' drivers were not run on "
              "degenerate runs (make lab-deps)")
    passed = failed = 0
    tmp = tempfile.mkdtemp(prefix="lab_check_broken.")
    try:
        for lab in labs:
            d = os.path.join(tmp, lab)
            os.makedirs(d)
            for fname in lab_check.files_of(lab):
                shutil.copy(os.path.join(REF, fname), d)
            st, m, text = run_check(lab, d)
            ok, why = self_check(lab, st, m, text)
            if not ok:
                failed += 1
                print(f"  FAIL {lab}: its committed CSV against itself: {why}")
                continue
            passed += 1
            if lab in UNRESOLVED or lab in RESOLVED:
                print(f"  ok   {lab}: its committed CSV against itself: {why[:160]}")
            if lab in lab_check.LABS_II:
                reseeded(lab, d)
                st, m, text = run_check(lab, d)
                if not m or int(m.group(6)):
                    failed += 1
                    bad = [l for l in text.split("\n") if l.startswith("DIFFERS   quantity")]
                    print(f"  FAIL {lab}: a change of seed (last seed = first) makes a quantity DIFFER: {bad[:2]}")
                else:
                    passed += 1
                    print(f"  ok   {lab}: a change of seed: {m.group(4)} quantities agree ({m.group(3)} of {m.group(1)} rows outside their band)")
            how = broken(lab, d)
            st, m, text = run_check(lab, d)
            if st == 1 and m and int(m.group(6)) > 0:
                passed += 1
                worst = [l for l in text.split("\n") if l.startswith("DIFFERS   quantity")]
                print(f"  ok   {lab}: broken ({how}): lab-check fails, {m.group(6)} of {m.group(4)} quantities DIFFER, "
                      f"{m.group(3)} of {m.group(1)} rows (e.g. {worst[0].split('quantity ', 1)[1].split(' (limit')[0]})")
            else:
                failed += 1
                rows = f"{m.group(3)} of {m.group(1)} rows DIFFER, {m.group(6)} quantities" if m else text[-300:]
                print(f"  FAIL {lab}: broken ({how}): lab-check exit {st}: {rows}")
            if py and (a.drivers == "all" or (a.drivers == "default" and (lab in lab_check.LABS_I or lab in DRIVERS_II))):
                for ok, msg in drivers(lab, d, py):
                    passed, failed = passed + ok, failed + (not ok)
                    print(f"  {'ok  ' if ok else 'FAIL'} {lab}: {msg}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
