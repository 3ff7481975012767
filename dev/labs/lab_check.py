#!/usr/bin/python3
"""Compares a lab's fresh numbers with the committed ones (make lab-check LAB=NAME; doc/labs/README.md).

    dev/labs/lab_check.py NAME --new DIR [--ref doc/labs] [--all]
    dev/labs/lab_check.py measure NAME [--seeds 42,43,44,45,46] [--write]

NAME is a lab of labs I (explode ... gains, diag) or labs II (norm-eps ... compose; norm_eps works too).
The first form reads the lab's CSV(s) from --ref (the committed doc/labs/) and from --new (a scratch
run: `make lab-check` runs the lab into out/labs/check/NAME/ first), matches rows by their key
columns and checks every row: PASS, DIFFERS or UNCHECKED, with the new value, the committed value and the
tolerance. A row missing on either side DIFFERS. It prints only the rows that DIFFER (--all: every row),
then one verdict line per quantity (below), and last the summary, two lines: the verdict
`lab-check NAME: PASS` or `lab-check NAME: FAILS: REASONS`, then the counts
`lab-check NAME: N rows, N PASS, N DIFFERS[, N UNCHECKED]; N quantities, N agree, N DIFFER (...)`.
Exit status: 1 if any row or quantity DIFFERS or the lab cannot resolve its effect (RESOLUTION), 2 if
the check could not run (a CSV or the lab's tolerances missing), else 0. Needs python3 alone (no numpy,
matplotlib).

RESOLUTION (labs II): a row check means something only if its tolerance is narrower than the effect the
lab measures. For the quantity each lab's verdict reads (EFFECT), the effect is the sample sd of the
committed settings' seed means, and the row tolerance its median width at those means; where the
tolerance is as wide as the effect or wider (how-small: rows ±0.2 around settings 0.15 apart; qkv:
±0.88 on ratios 0.24 apart), a row of one setting could take another setting's value and PASS, so
the verdict FAILS, naming both numbers, even when every row passes (issue 40).

QUANTITIES: a row's tolerance must let one run's value differ from another's by a change of seed, so a
broken run (no weight moves, another initializer) could pass most rows (issue 34: 99.7 % of the qkv lab's
rows). The verdict of a lab rests on each quantity as a whole, and there the seed spread is tight: for
every quantity (a column of a labs-II CSV; a section/metric of a labs-I CSV) the check standardizes each
difference by its seed spread and fails the quantity when the root mean square over its rows exceeds
Z_RMS = 3. A rerun that differs from the committed one like a fresh draw of seeds gives about 1 (1.4 at
most); a run where nothing trains or every stack has another init gives 5 to thousands (tested by
dev/labs/lab_check_broken.py on every lab). Labs II: the rows of a setting that differ only in the seed
are one group; z = (mean of the new seeds - mean of the committed seeds) / (sd * sqrt(1/n_new + 1/n_ref)),
sd the committed seeds' sample sd of the group, at least half the quantity's pooled sd (a group whose five
seeds happen to agree, or one measured at one seed) and the rounding floor. Labs I (one base seed per CSV): z = (new - committed) /
(the row's measured need / 3 sqrt(2)), the sd its tolerance was made from. Rows whose tolerance is "any",
non-finite values and quantities without a measured spread do not enter.

TOLERANCES are measured seed spread, never a guess. A row may differ from its committed value by
3 standard deviations of the difference of two runs, 3 * sqrt(2) * sd, where sd is the sample standard
deviation of the row's value over seeds (the committed value is one run, the new one another). The
spread differs enormously between rows: in the std sweep the seeds agree to 1e-4 at small sigma, while
at sigma = 0.012 one seed stays at chance and the others train (val_loss 2.30 / 0.93 / 0.84). So
tolerances are kept per group of rows of a quantity (a column of the CSV; in the long-form CSVs of labs
I, one `section/metric`): in labs I the rows of one series (a curve, a profile over layers, a histogram,
one run of the race), or, where the series are the lab's own seeds, the rows of one sigma (the sweep:
its s0..s2 and their curves) or of one scheme (the curves of Xavier vs Kaiming). A group's tolerance is abs + rel * |committed value|, at least each row's need around
its own committed value: abs is 0 or one of the rows' needs, rel the least that covers the other rows,
and of these pairs the one closest to the rows' needs (geometric mean over the group) is kept; an
absolute bound (rel = 0) suits a curve near a constant, a relative one a profile that grows by decades.
A group whose value does not depend on the seed (sd = 0) gets only the rounding floor, which is added to
every tolerance: 1e-5 * |committed value|. The floor: commit 321380e changed the float rounding of the
kernels (vexpf, blocked gemm); the largest relative change it made to a labs-I number that does not
depend on the seed was 7e-9 (gains quad), so 1e-5 leaves three orders of magnitude for other compilers
and CPUs. Non-finite values (inf, NaN) must match exactly, except in a row where the seeds themselves
disagree on finiteness (tolerance "any", listed row by row, or for the whole group where more than 4
rows do: the curve of a run that diverges in some seeds).

Where the seeds come from:
  labs I: the ten labs are deterministic: rerun with the same seed on the same build, each reproduces
    its committed CSV bit for bit (checked for all ten; the training labs use one thread, and explode,
    xavier, orthogonal, residual and gains give the same bits with 1, 2 and 3 OpenMP threads).
    A tolerance could be zero on the machine that wrote the CSV, but not on a student's: another
    compiler or SIMD width rounds differently, and in a chaotic row (the race's deep tanh nets, the
    sweep's bistable sigmas) a rounding difference grows as large as a change of seed (321380e moved a
    race val_loss by 0.34). So the tolerance is the seed spread: `measure NAME --write` runs the lab with
    base seeds -x 42..46 (42 is the committed run; the base seed moves every seed of the lab: weights,
    data split, batch order), groups the rows with the same key across the five runs, and stores the
    tolerances in dev/labs/lab_check_tolerances.csv (lab, section, metric, series, x; `*` for all).
  labs II: where the CSV has a seed column with two or more seeds (how-small, sinks, the training rows
    of norm-eps; five seeds in tokens, condense, complexity, qkv, mup, compose), the rows that differ
    only in the seed are the groups, in the committed CSV itself, and each quantity gets the largest
    3 sqrt(2) sd over its groups (with two or three seeds the groups are too few to tell apart).
    Closed forms (analytic_factor, analytic_free, predicted) get the floor only. Quantities measured
    at one seed only (resflow, the initialization rows of norm-eps, condense's W_down heatmap rows)
    have no measured spread: their rows are printed UNCHECKED and do not fail the check (`measure`
    does not run labs II: their runs take minutes each).
"""
import argparse
import csv
import math
import os
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABLE = os.path.join(ROOT, "dev", "labs", "lab_check_tolerances.csv")
FLOOR_REL = 1e-5      # rounding (see above)
Z_RMS = 3.0           # a quantity DIFFERS when the RMS of its standardized differences exceeds this (above)
K_SD = 3.0 * math.sqrt(2.0)   # 3 sd of the difference of two runs (see above)

LABS_I = ["explode", "xavier", "orthogonal", "residual", "symmetry", "race", "sweep", "xavier_kaiming", "gains", "diag"]
LONG_KEY = ("section", "series", "x", "metric")

# labs II: file -> (key columns, seed column or None, closed-form columns). Every other column is a value.
LABS_II = {
    "norm_eps": {"llm_norm_eps.csv": (("part", "d", "eps", "gamma", "seed"), "seed", ("analytic_factor", "analytic_free"))},
    "sinks": {"llm_sinks.csv": (("gamma", "gate", "seed", "layer"), "seed", ())},
    "resflow": {"llm_resflow.csv": (("mlp", "ffn_only", "gamma", "d"), None, ()),
                "llm_resflow_slopes.csv": (("mlp", "ffn_only", "gamma"), None, ("predicted",)),
                "llm_resflow_depth.csv": (("branch", "L", "seed"), "seed", ())},
    "how_small": {"llm_how_small.csv": (("init", "gamma", "seed"), "seed", ())},
    "tokens": {"llm_tokens.csv": (("seed", "bin"), "seed", ())},
    "condense": {"llm_condense.csv": (("gamma", "seed", "tensor", "step", "kind"), "seed", ())},
    "complexity": {"llm_complexity.csv": (("gamma", "weight_decay", "decay_emb", "seed"), "seed", ())},
    "qkv": {"llm_qkv.csv": (("seed", "tensor", "layer", "step"), "seed", ())},
    "mup": {"llm_mup.csv": (("param", "width", "lr", "seed"), "seed", ()),
            "llm_mup_coord.csv": (("param", "seed", "width", "step", "tensor"), "seed", ())},
    "compose": {"llm_compose.csv": (("gamma", "seed", "steps"), "seed", ())},
}

# labs II: the quantity each lab's verdict reads (its write-up's result), whose settings the rows must tell
# apart: (file, column). See RESOLUTION.
EFFECT = {"norm_eps": ("llm_norm_eps.csv", "val_loss"), "sinks": ("llm_sinks.csv", "sink_final"),
          "resflow": ("llm_resflow_depth.csv", "ratio"), "how_small": ("llm_how_small.csv", "val_loss"),
          "tokens": ("llm_tokens.csv", "mean"), "condense": ("llm_condense.csv", "value"),
          "complexity": ("llm_complexity.csv", "param_norm_final"), "qkv": ("llm_qkv.csv", "ratio"),
          "mup": ("llm_mup.csv", "val_loss"), "compose": ("llm_compose.csv", "held_comp_acc")}


def lab_name(name):
    """make's names use dashes (norm-eps), the drivers' underscores; labs I keep theirs (xavier_kaiming)."""
    n = name.replace("-", "_")
    if n in LABS_I or n in LABS_II:
        return n
    print(f"lab_check: unknown lab {name} (labs: {' '.join(LABS_I)} {' '.join(LABS_II)})", file=sys.stderr)
    sys.exit(2)


def num(v):
    """A CSV cell as a float, or None for an empty cell (a column a row does not have)."""
    return None if v == "" else float(v)


def norm_key(v):
    """Key cells that are numbers compare as numbers (1e-05 and 1e-5 are one key)."""
    try:
        return f"{float(v):.9g}"
    except ValueError:
        return v


def read_rows(path, key_cols, long_form):
    """{key tuple: {quantity: value}} of one CSV; a repeated key is an error. Long form: the key is
    (section, series, x, metric) and the one quantity section/metric."""
    rows = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            key = tuple(norm_key(r[k]) for k in key_cols)
            if long_form:
                vals = {f"{r['section']}/{r['metric']}": num(r["value"])}
            else:
                vals = {c: num(v) for c, v in r.items() if c not in key_cols}
            if key in rows:
                raise ValueError(f"{path}: key {key} appears twice")
            rows[key] = vals
    return rows


# ---- tolerances ------------------------------------------------------------------------------------
class Tol:
    """abs + rel * |committed| (+ the floor); any: every value passes."""

    def __init__(self, abs_tol=0.0, rel_tol=0.0, method="exact"):
        self.abs, self.rel, self.method = abs_tol, rel_tol, method

    def width(self, ref):
        return self.abs + self.rel * abs(ref) + FLOOR_REL * abs(ref)

    def ok(self, new, ref):
        if self.method == "any":
            return True
        if not (math.isfinite(new) and math.isfinite(ref)):
            return repr(new) == repr(ref)
        return abs(new - ref) <= self.width(ref)

    def text(self, ref):
        return "any" if self.method == "any" else f"±{self.width(ref):.3g} ({self.method})"


def spread(vals):
    """(mean, sd, status) of one row's values over seeds; status 'ok', 'nonfinite' (all alike
    non-finite: must match exactly) or 'mixed' (the seeds disagree on finiteness or on inf vs NaN)."""
    vals = [v for v in vals if v is not None]
    if len(vals) < 2:
        return None
    fin = [math.isfinite(v) for v in vals]
    if not all(fin):
        return (0.0, 0.0, "mixed" if any(fin) or len({repr(v) for v in vals}) > 1 else "nonfinite")
    m = sum(vals) / len(vals)
    return (m, math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1)), "ok")


def group_of(lab, section, series, x):
    """The group of rows of labs I that share a tolerance, as the (series, x) of its table line: one
    series (x = '*'), except where series are (partly) the lab's own seeds: the sweep's s0..s2 (grouped
    by sigma), its curves 'seed|sigma' and Xavier vs Kaiming's curves 'scheme|seed' (grouped over seeds)."""
    if (lab, section) == ("sweep", "sweep"):
        return ("*", x)
    if (lab, section) == ("sweep", "curve"):
        return ("*|" + series.split("|", 1)[1], "*")
    if (lab, section) == ("xavier_kaiming", "curve"):
        return (series.rsplit("|", 1)[0] + "|*", "*")
    return (series, "*")


MOST_ANY = 4          # a group with more rows than this whose seeds disagree on finiteness is all "any"


def fit_group(rows):
    """rows: [(committed value, (mean, sd, status))] of one group. Returns the group's Tol, which gives
    every row at least K_SD * sd around its committed value, and the number of rows whose seeds disagree
    on finiteness."""
    ok = [(c, sd) for c, (m, sd, status) in rows if status == "ok"]
    n_mixed = sum(1 for _, st in rows if st[2] == "mixed")
    if not ok:
        return Tol(0.0, 0.0, "exact-nonfinite"), n_mixed
    if max(sd for _, sd in ok) == 0.0:
        return Tol(0.0, 0.0, "exact"), n_mixed
    need = [(abs(c), K_SD * sd) for c, sd in ok if sd > 0]
    # abs + rel * |committed| >= need in every row; of the candidates (abs = 0 or one row's need, rel
    # the least that covers the rest), the one closest to the needs (geometric mean over the rows)
    best = None
    for a in [0.0] + sorted({n for _, n in need}):
        if any(c == 0 and n > a for c, n in need):
            continue
        r = max((n - a) / c for c, n in need if c > 0 and n > a) if any(c > 0 and n > a for c, n in need) else 0.0
        loose = sum(math.log((a + r * c) / n) for c, n in need)
        if best is None or loose < best[0] - 1e-12:
            best = (loose, a, r)
    _, a, r = best
    return Tol(a, r, "3sd" if r == 0 else "3sd-rel" if a == 0 else "3sd-abs+rel"), n_mixed


def fit_lab(ref, runs, lab):
    """ref: read_rows() of the committed CSV; runs: of the lab's CSV under each seed. Returns the table
    rows (dicts of FIELDS). In a group whose series are seeds, every value at one x is a draw of the same
    thing: the sd is taken over all of them (the series and the runs) rather than row by row."""
    fmt = lambda x: "inf" if math.isinf(x) else f"{x:.3g}"
    groups = {}
    for key, vals in ref.items():
        section, series, x, metric = key
        for q, c in vals.items():
            if c is not None:
                g = (section, metric) + group_of(lab, section, series, x)
                groups.setdefault(g, []).append(((series, x), c, [r.get(key, {}).get(q) for r in runs]))
    out = []
    for (section, metric, gseries, gx), rows in groups.items():
        if "*" in gseries:
            pooled = {}
            for (_, x), _, v in rows:
                pooled.setdefault(x, []).extend(v)
            fit = [((series, x), c, spread(pooled[x])) for (series, x), c, _ in rows]
        else:
            fit = [(k, c, spread(v)) for k, c, v in rows]
        fit = [(k, c, st) for k, c, st in fit if st is not None]
        if not fit:
            continue
        t, n_mixed = fit_group([(c, st) for _, c, st in fit])
        if n_mixed > MOST_ANY:
            t = Tol(math.inf, 0.0, "any")
        out.append(dict(lab=lab, section=section, metric=metric, series=gseries, x=gx, abs_tol=fmt(t.abs),
                        rel_tol=fmt(t.rel), method=t.method))
        if 0 < n_mixed <= MOST_ANY:
            out += [dict(lab=lab, section=section, metric=metric, series=se, x=xx, abs_tol="inf", rel_tol="0",
                         method="any") for (se, xx), _, st in fit if st[2] == "mixed"]
    return out


def read_table(lab):
    """{quantity: {(series, x): Tol}} of a labs-I lab from the tolerance table; series or x may be '*'."""
    out = {}
    if not os.path.exists(TABLE):
        return out
    with open(TABLE, newline="") as f:
        for r in csv.DictReader(line for line in f if not line.startswith("#")):
            if r["lab"] == lab:
                x = r["x"] if r["x"] == "*" else norm_key(r["x"])
                out.setdefault(f"{r['section']}/{r['metric']}", {})[(r["series"], x)] = \
                    Tol(float(r["abs_tol"]), float(r["rel_tol"]), r["method"])
    return out


def table_tol(tols, lab, section, series, x):
    """One row's tolerance: its own line, else its group's; None if neither."""
    if tols is None:
        return None
    return tols.get((series, x)) or tols.get(group_of(lab, section, series, x))


def in_csv_tolerances(rows, key_cols, seed_col, closed):
    """labs II: {quantity: Tol} from the groups of rows that differ only in the seed, one tolerance for
    all of a quantity's rows (two or three seeds are too few to tell the groups apart)."""
    out = {q: Tol(0.0, 0.0, "closed form") for q in closed}
    if seed_col is None:
        return out
    si = key_cols.index(seed_col)
    groups = {}
    for key, vals in rows.items():
        for q, v in vals.items():
            groups.setdefault(q, {}).setdefault(key[:si] + key[si + 1:], []).append(v)
    for q, by in groups.items():
        if q in out:
            continue
        fit = [(c, st) for vals in by.values() for st in [spread(vals)] if st is not None
               for c in vals if c is not None]
        if fit:
            t, n_mixed = fit_group(fit)
            out[q] = Tol(math.inf, 0.0, "any") if n_mixed else Tol(t.abs, t.rel, t.method + ", the CSV's seeds")
    return out


# ---- the quantities' verdicts --------------------------------------------------------------------------
def seed_groups(rows, key_cols, seed_col):
    """{quantity: {key without the seed: [values]}} of a labs-II CSV."""
    si = key_cols.index(seed_col)
    out = {}
    for key, vals in rows.items():
        for q, v in vals.items():
            if v is not None and math.isfinite(v):
                out.setdefault(q, {}).setdefault(key[:si] + key[si + 1:], []).append(v)
    return out


def quantity_z_labs2(ref, new, key_cols, seed_col, closed):
    """{quantity: [(z, where)]} from the seed means (see QUANTITIES)."""
    rg, ng = seed_groups(ref, key_cols, seed_col), seed_groups(new, key_cols, seed_col)
    cols = [c for c in key_cols if c != seed_col]
    out = {}
    for q, groups in rg.items():
        sds = {g: (spread(v) or (sum(v) / len(v), 0.0, "ok"))[1] for g, v in groups.items()}
        pooled = math.sqrt(sum(x * x for x in sds.values()) / len(sds)) if sds else 0.0
        zs = []
        for g, rv in groups.items():
            nv = ng.get(q, {}).get(g)
            if not nv:
                continue
            mr, mn = sum(rv) / len(rv), sum(nv) / len(nv)
            if q in closed:
                sd = 0.0
            else:
                sd = max(sds[g], 0.5 * pooled)
            sd = max(sd * math.sqrt(1 / len(rv) + 1 / len(nv)), FLOOR_REL * abs(mr) / K_SD, 1e-300)
            where = ", ".join(f"{c}={v}" for c, v in zip(cols, g))
            zs.append(((mn - mr) / sd, f"[{where}] new mean {mn:.4g}, committed {mr:.4g} ± {sds[g]:.2g} (sd, {len(rv)} seeds)"))
        out[q] = zs
    return out


def verdicts(zmap, fname):
    """[(status, line)] per quantity from its standardized differences."""
    out = []
    for q, zs in sorted(zmap.items()):
        if not zs:
            continue
        rms = math.sqrt(sum(z * z for z, _ in zs) / len(zs))
        worst = max(zs, key=lambda t: abs(t[0]))
        status = "DIFFERS" if rms > Z_RMS else "agrees"
        out.append((status, f"{status:9s} quantity {fname} {q}: RMS z {rms:.3g} over {len(zs)} rows "
                            f"(limit {Z_RMS:g}; largest z {worst[0]:+.3g} at {worst[1]})"))
    return out


def resolution(ref, key_cols, seed_col, tol, q):
    """(row tolerance, effect, settings) of quantity q of a labs-II CSV: the effect is the sample sd of the
    committed settings' seed means (how far apart the settings the lab compares lie), the row tolerance
    the median over the settings of the tolerance's width at their means. None without two settings."""
    means = sorted(sum(v) / len(v) for v in seed_groups(ref, key_cols, seed_col).get(q, {}).values())
    if len(means) < 2 or tol is None:
        return None
    m = sum(means) / len(means)
    effect = math.sqrt(sum((x - m) ** 2 for x in means) / (len(means) - 1))
    return tol.width(means[len(means) // 2]), effect, len(means)


# ---- the check -------------------------------------------------------------------------------------
def files_of(lab):
    """{csv file name: (key columns, seed column, closed-form columns, long form?)}"""
    if lab in LABS_I:
        return {f"{lab}.csv": (LONG_KEY, None, (), True)}
    return {f: spec + (False,) for f, spec in LABS_II[lab].items()}


def shown(path):
    """A directory as the summary names it: relative to the repository where it is inside it."""
    p = os.path.abspath(path)
    return os.path.relpath(p, ROOT) if (p + os.sep).startswith(ROOT + os.sep) else p


def g(x):
    return "empty" if x is None else f"{x:.9g}"


def check(lab, new_dir, ref_dir, show_all=False):
    table = read_table(lab) if lab in LABS_I else {}
    if lab in LABS_I and not table:
        print(f"lab_check: {os.path.relpath(TABLE, ROOT)} has no tolerances for {lab}", file=sys.stderr)
        return 2
    counts = {"PASS": 0, "DIFFERS": 0, "UNCHECKED": 0}
    diff_by_q, unchecked_q = {}, set()
    qlines, unresolved = [], []
    for fname, (key_cols, seed_col, closed, long_form) in files_of(lab).items():
        paths = [os.path.join(d, fname) for d in (ref_dir, new_dir)]
        for p in paths:
            if not os.path.exists(p):
                print(f"lab_check: {p} not found", file=sys.stderr)
                return 2
        ref, new = (read_rows(p, key_cols, long_form) for p in paths)
        csv_tols = {} if long_form else in_csv_tolerances(ref, key_cols, seed_col, closed)
        zmap = {}
        if not long_form and seed_col is not None:
            zmap = quantity_z_labs2(ref, new, key_cols, seed_col, closed)
        if EFFECT.get(lab, (None,))[0] == fname:
            q = EFFECT[lab][1]
            res = resolution(ref, key_cols, seed_col, csv_tols.get(q), q)
            if res and res[0] >= res[1]:
                unresolved.append(f"{fname} {q}: a row may differ by ±{res[0]:.2g}, but the {res[2]} settings' "
                                  f"means lie only {res[1]:.2g} apart (sd), so a row of one setting could take "
                                  "another's value and PASS")
        for key in list(ref) + [k for k in new if k not in ref]:
            rv, nv = ref.get(key), new.get(key)
            where = ", ".join(f"{c}={v}" for c, v in zip(key_cols, key) if not (long_form and c in ("section", "metric")))
            for q in (rv or nv):
                a, b = (nv or {}).get(q), (rv or {}).get(q)
                if long_form:
                    t = table_tol(table.get(q), lab, key[0], key[1], key[2])
                else:
                    t = csv_tols.get(q)
                if rv is None or nv is None:
                    status, text = "DIFFERS", "only in the new run" if rv is None else "missing in the new run"
                elif a is None and b is None:
                    continue
                elif a is None or b is None:
                    status, text = "DIFFERS", f"{g(a)} committed {g(b)} (one of them empty)"
                elif t is None:
                    status, text = "UNCHECKED", f"{g(a)} committed {g(b)} (no measured spread)"
                else:
                    status = "PASS" if t.ok(a, b) else "DIFFERS"
                    text = f"{g(a)} committed {g(b)} tol {t.text(b)}"
                    if long_form and t.method != "any" and math.isfinite(a) and math.isfinite(b):
                        sd = max(t.abs + t.rel * abs(b), FLOOR_REL * abs(b)) / K_SD
                        zmap.setdefault(q, []).append(((a - b) / sd if sd > 0 else (0.0 if a == b else math.inf),
                                                       f"[{where}] new {g(a)}, committed {g(b)}"))
                counts[status] += 1
                if status == "DIFFERS":
                    diff_by_q[(fname, q)] = diff_by_q.get((fname, q), 0) + 1
                elif status == "UNCHECKED":
                    unchecked_q.add((fname, q))
                if show_all or status == "DIFFERS":
                    print(f"{status:9s} {q} [{where}]: {text}")
        qlines += verdicts(zmap, fname)
    for (fname, q), n in sorted(diff_by_q.items()):
        print(f"lab-check {lab}: {n} rows of {fname} {q} DIFFER")
    for status, line in qlines:
        if show_all or status == "DIFFERS":
            print(line)
    nq_diff = sum(1 for st, _ in qlines if st == "DIFFERS")
    if unchecked_q:
        print(f"lab-check {lab}: no measured spread, not checked: " + ", ".join(f"{f} {q}" for f, q in sorted(unchecked_q)))
    total = sum(counts.values())
    fails = ([f"{counts['DIFFERS']} rows DIFFER"] if counts["DIFFERS"] else []) + \
        ([f"{nq_diff} quantities DIFFER"] if nq_diff else []) + \
        [f"at this row tolerance the lab cannot resolve its effect: {u}" for u in unresolved]
    print(f"lab-check {lab}: " + (f"FAILS: {'; '.join(fails)}" if fails else "PASS"))
    print(f"lab-check {lab}: {total} rows, {counts['PASS']} PASS, {counts['DIFFERS']} DIFFERS"
          + (f", {counts['UNCHECKED']} UNCHECKED" if counts["UNCHECKED"] else "")
          + f"; {len(qlines)} quantities, {len(qlines) - nq_diff} agree, {nq_diff} DIFFER"
          + f" (new: {shown(new_dir)}, committed: {shown(ref_dir)})")
    return 1 if fails else 0


# ---- measuring the tolerances of a labs-I lab ----------------------------------------------------------
TABLE_HEADER = """\
# Tolerances of make lab-check for labs I (dev/labs/lab_check.py; its docstring says how they are used).
# Measured by `dev/labs/lab_check.py measure NAME --write`: the lab run with base seeds -x 42..46 (42 is
# the committed doc/labs/NAME.csv); a row's need is 3 sd of the difference of two runs, 3 * sqrt(2) * sd,
# sd its sample standard deviation over the five runs. One line per group of rows of a quantity
# (section/metric): series,* = the rows of one series (* in it: over the lab's own seeds); *,x = the rows
# of one x (the sweep, whose series are seeds); series,x = one row, "any" where the seeds disagree on
# whether the value is finite. A row's
# tolerance is abs_tol + rel_tol * |committed|, at least every row's need (the docstring says which pair),
# plus 1e-5 * |committed| for rounding. method: 3sd (rel 0), 3sd-rel (abs 0), 3sd-abs+rel, exact (the seeds
# agree: the floor only), exact-nonfinite, any.
"""
FIELDS = ["lab", "section", "metric", "series", "x", "abs_tol", "rel_tol", "method"]


def measure(lab, seeds, write):
    if lab not in LABS_I:
        sys.exit(f"lab_check: measure runs labs I only ({lab} trains transformers for minutes a run)")
    exe = os.path.join(ROOT, "dev", "labs", "mlp_lab")
    subprocess.check_call(["make", "-s", "dev/labs/mlp_lab"], cwd=ROOT)
    d = os.path.join(ROOT, "out", "labs", "check", "measure", lab)
    os.makedirs(d, exist_ok=True)
    runs = []
    for s in seeds:
        p = os.path.join(d, f"{lab}_x{s}.csv")
        if not os.path.exists(p):      # kept: a second measure only refits
            subprocess.check_call(["nice", "-n", "10", exe, lab, "-o", p + ".tmp", "-x", str(s)], cwd=ROOT,
                                  stdout=subprocess.DEVNULL)
            os.replace(p + ".tmp", p)
        runs.append(read_rows(p, LONG_KEY, True))
    ref = read_rows(os.path.join(ROOT, "doc", "labs", f"{lab}.csv"), LONG_KEY, True)
    rows = fit_lab(ref, runs, lab)
    for r in rows:
        print("  " + ",".join(r[k] for k in FIELDS[1:]))
    print(f"lab_check: {lab}: {len(rows)} tolerances for {sum(len(v) for v in runs[0].values())} rows")
    if not write:
        return
    keep = []
    if os.path.exists(TABLE):
        with open(TABLE, newline="") as f:
            keep = [r for r in csv.DictReader(line for line in f if not line.startswith("#")) if r["lab"] != lab]
    order = {n: i for i, n in enumerate(LABS_I)}
    allrows = sorted(keep + rows, key=lambda r: order.get(r["lab"], 99))     # stable: each lab's own order
    with open(TABLE, "w", newline="") as f:
        f.write(TABLE_HEADER)
        w = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerows(allrows)
    print(f"lab_check: wrote {len(rows)} tolerances of {lab} into {os.path.relpath(TABLE, ROOT)}")


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)     # quiet under | head
    if len(sys.argv) > 1 and sys.argv[1] == "measure":
        ap = argparse.ArgumentParser(prog="lab_check.py measure")
        ap.add_argument("lab")
        ap.add_argument("--seeds", default="42,43,44,45,46", help="base seeds (-x) of the runs; 42 is the committed one")
        ap.add_argument("--write", action="store_true", help="replace the lab's rows of the tolerance table")
        a = ap.parse_args(sys.argv[2:])
        measure(lab_name(a.lab), [int(s) for s in a.seeds.split(",")], a.write)
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lab")
    ap.add_argument("--new", required=True, help="directory of the fresh run's CSV(s)")
    ap.add_argument("--ref", default=os.path.join(ROOT, "doc", "labs"), help="the committed CSVs (doc/labs)")
    ap.add_argument("--all", action="store_true", help="print every row and every quantity, not only those that DIFFER")
    ap.add_argument("--quiet", action="store_true", help="the default (kept for old scripts): only what DIFFERS")
    a = ap.parse_args()
    return check(lab_name(a.lab), a.new, a.ref, a.all)


if __name__ == "__main__":
    sys.exit(main())
