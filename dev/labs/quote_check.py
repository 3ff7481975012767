#!/usr/bin/env python3
"""The numbers the labs' pages quote from their CSVs, recomputed from the CSVs (a suite of make check).

    dev/labs/quote_check.py [--no-pages] [FILE.md ...]   (default: doc/labs/*.md and doc/labs/answers/*.md)

The write-ups of labs I and their index are written by dev/labs/plot_labs.py from the CSVs; they are
checked by writing them again from the committed CSVs (check_pages; --no-pages skips that). The rest, the
write-ups of labs II (by hand) and every answer key, quote numbers, and those are checked as follows.

A write-up or an answer key that quotes a number from a committed CSV says where it comes from, in an
HTML comment right after the number (invisible on the rendered page):

    W_V's layer 2 grows most (×1.68–1.96<!-- = qkv_layers range final where tensor=='wv' and layer==2 -->)

    <!-- = SOURCE AGG EXPR[, EXPR...] [where CONDITION] -->

SOURCE is a CSV of doc/labs (llm_qkv_seeds.csv) or a table derived from one (below). AGG says what the
numbers before the comment are: `value` (one row: its EXPRs), `list` (every row that matches, in the
CSV's order, each row's EXPRs), `mean`, `sd`, `min`, `max`, `count`, `range` (min and max: "1.05–1.96",
"−0.41 to +0.88"), `meansd` (mean and sample sd over the rows: "0.096 ± 0.052"). With `by KEY`
(`mean val_loss by gamma`) one number per group of rows with the same KEY, in the CSV's order: the
group's `mean`, `sd`, `span` (max − min), `min` or `max`. And `<!-- = calc PYTHON -->` computes anything
else from mean(SOURCE, EXPR, CONDITION), sd, vmin, vmax, values, count and groups(SOURCE, EXPR, BY,
CONDITION) (a difference of two means, a ratio, a list). EXPR and CONDITION are
Python expressions over the row's columns (numbers where the cell is one; an empty cell is None). The
checker takes as many numbers as the aggregate gives from the text before the comment (back to the
previous comment or the start of the paragraph), in order, and each must equal the computed value as
printed: within half a unit of its last digit (0.05 for "1.7", 5 for "60"; a trailing % is ignored).
Signs: "−" (U+2212) and a "-" not after a digit are minus; "–" between two numbers is a range.

Derived tables (computed here from the raw CSVs, the way the labs compute them):
  qkv_layers: seed, tensor, layer, moved (first probe step with |std/std0 - 1| >= 10 %; None: never),
              final (std/std0 at the last probe step), rank (of final among the 12 layers, 1 = largest)
  qkv_seeds:  seed, tensor, spearman (layer against step moved, a layer that never moved ranked last,
              ties by average rank, as dev/labs/llm_labs.py), largest (the layer with the largest final),
              moved0 (layer 0's step), earliest (the earliest step of any layer), spearman_1 (the same over
              layers 1 to 11), final0, final_min, final_max (layer 0's final, the least and the largest)
  qkv_runs:   seed, lo, hi (the least and the largest final std/std0 of any Q/K/V matrix of the run)
  mup_coord, mup_growth: the coordinate check per width, and its growth with width (mup_tables)

One test per annotated file (the count of its annotations in the line), and one per index (README.md,
README_llm.md), which must quote no number at all: results stay out of the index; each mismatch is printed with
its file and line, the quoted and the computed numbers. The last line is "N passed, N failed".
Python's standard library only.
"""
import csv
import glob
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LABS = os.path.join(ROOT, "doc", "labs")
NOTE = re.compile(r"<!--\s*=\s*(.*?)\s*-->", re.S)
NUM = re.compile(r"(?<![\w.])([−+-]?)(\d+(?:\.\d+)?(?:e[−+-]?\d+)?)")


def cell(v):
    if v == "":
        return None
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


def read_csv(name):
    with open(os.path.join(LABS, name), newline="") as f:
        return [{k: cell(v) for k, v in r.items()} for r in csv.DictReader(f)]


def ranks(v):
    s = sorted(v)
    return [sum(i for i, x in enumerate(s) if x == a) / s.count(a) for a in v]


def spearman(x, y):
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    return num / math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))


def qkv_tables():
    series = {}
    for r in read_csv("llm_qkv.csv"):
        series.setdefault((r["seed"], r["tensor"], r["layer"]), []).append((r["step"], r["ratio"]))
    last = max(st for v in series.values() for st, _ in v)
    layers, seeds = [], []
    for (s, t) in sorted({(s, t) for s, t, _ in series}, key=lambda k: (k[0], ["wq", "wk", "wv"].index(k[1]))):
        L = 1 + max(l for s2, t2, l in series if (s2, t2) == (s, t))
        moved, final = [], []
        for l in range(L):
            ser = sorted(series[(s, t, l)])
            m = [st for st, r in ser if abs(r - 1) >= 0.1]
            moved.append(m[0] if m else None)
            final.append(ser[-1][1])
        for l in range(L):
            layers.append(dict(seed=s, tensor=t, layer=l, moved=moved[l], final=final[l],
                               rank=1 + sum(f > final[l] for f in final)))
        key = [m if m is not None else last + 10 for m in moved]
        seeds.append(dict(seed=s, tensor=t, spearman=spearman(list(range(L)), key),
                          spearman_1=spearman(list(range(1, L)), key[1:]), largest=final.index(max(final)),
                          moved0=moved[0], earliest=min(m for m in moved if m is not None), final0=final[0],
                          final_max=max(final), final_min=min(final)))
    runs = [dict(seed=s, lo=min(l["final"] for l in layers if l["seed"] == s),
                 hi=max(l["final"] for l in layers if l["seed"] == s)) for s in sorted({l["seed"] for l in layers})]
    return {"qkv_layers": layers, "qkv_seeds": seeds, "qkv_runs": runs}


def mup_tables():
    """mup_coord: param, seed, width, step and the coordinate check's mean |x| of attn and mlp (means over
    the layers), logits and emb; mup_growth: param, seed, step, attn_growth and mlp_growth (width 512 over
    width 64), attn_ratio and mlp_ratio (largest over smallest over the widths)."""
    acc = {}
    for r in read_csv("llm_mup_coord.csv"):
        k = (r["param"], r["seed"], r["width"], r["step"])
        t = r["tensor"]
        kind = "attn" if t.endswith("attn_out") else "mlp" if t.endswith("mlp_out") else t
        acc.setdefault(k, {}).setdefault(kind, []).append(r["abs_mean"])
    coord = [dict(param=p, seed=s, width=w, step=st, **{kind: sum(v) / len(v) for kind, v in d.items()})
             for (p, s, w, st), d in acc.items()]
    growth = []
    for p, s, st in dict.fromkeys((c["param"], c["seed"], c["step"]) for c in coord):
        by_w = {c["width"]: c for c in coord if (c["param"], c["seed"], c["step"]) == (p, s, st)}
        lo, hi = min(by_w), max(by_w)
        growth.append(dict(param=p, seed=s, step=st,
                           **{f"{k}_growth": by_w[hi][k] / by_w[lo][k] for k in ("attn", "mlp")},
                           **{f"{k}_ratio": max(c[k] for c in by_w.values()) / min(c[k] for c in by_w.values())
                              for k in ("attn", "mlp")}))
    return {"mup_coord": coord, "mup_growth": growth}


DERIVED = {"qkv_layers": qkv_tables, "qkv_seeds": qkv_tables, "qkv_runs": qkv_tables, "mup_coord": mup_tables,
           "mup_growth": mup_tables}
_cache = {}


def table(src):
    if src not in _cache:
        _cache.update(DERIVED[src]() if src in DERIVED else {src: read_csv(src)})
    return _cache[src]


def split_exprs(s):
    """EXPR, EXPR [where COND] -> ([expr], cond)."""
    cond = None
    m = re.search(r"\swhere\s", s)
    if m:
        s, cond = s[:m.start()], s[m.end():]
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out, cond


SAFE = {"abs": abs, "min": min, "max": max, "round": round, "len": len, "math": math, "None": None}


def _rows(src, cond):
    return [r for r in table(src) if cond is None or eval(cond, dict(SAFE), dict(r))]


def _col(src, expr, cond):
    out = [eval(expr, dict(SAFE), dict(r)) for r in _rows(src, cond)]
    out = [v for v in out if v is not None]
    if not out:
        raise ValueError(f"no value of {expr} in {src} where {cond}")
    return out


def _sd(v):
    m = sum(v) / len(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0


CALC = {"mean": lambda src, e, c=None: sum(_col(src, e, c)) / len(_col(src, e, c)),
        "sd": lambda src, e, c=None: _sd(_col(src, e, c)),
        "vmin": lambda src, e, c=None: min(_col(src, e, c)),
        "vmax": lambda src, e, c=None: max(_col(src, e, c)),
        "values": lambda src, e, c=None: _col(src, e, c),
        "count": lambda src, e, c=None: len(_col(src, e, c))}


def groups(src, expr, by, cond=None):
    """{group key: [values]} in the CSV's order."""
    out = {}
    for r in _rows(src, cond):
        v = eval(expr, dict(SAFE), dict(r))
        if v is not None:
            out.setdefault(eval(by, dict(SAFE), dict(r)), []).append(v)
    return out


def compute(spec):
    if spec.startswith("calc "):
        v = eval(spec[5:], dict(SAFE, **CALC, groups=groups, sd_of=_sd, mean_of=lambda v: sum(v) / len(v),
                                sum=sum, zip=zip, list=list,
                                gmeans=lambda *a: [sum(v) / len(v) for v in groups(*a).values()]), {})
        return list(v) if isinstance(v, (list, tuple)) else [v]
    by = None
    m = re.search(r"\sby\s+(.+?)(?=\swhere\s|$)", spec)
    if m:
        by, spec = m.group(1).strip(), spec[:m.start()] + spec[m.end():]
    parts = spec.split(None, 2)
    if len(parts) < 3:
        raise ValueError(f"expected SOURCE AGG EXPR: {spec!r}")
    src, agg, rest = parts
    exprs, cond = split_exprs(rest)
    rows = [r for r in table(src) if cond is None or eval(cond, dict(SAFE), dict(r))]
    if not rows:
        raise ValueError(f"no row of {src} matches {cond!r}")
    if by is not None:        # one number per group (in the CSV's order): its mean, sd, or max - min
        gs = groups(src, exprs[0], by, cond)
        f = {"mean": lambda v: sum(v) / len(v), "sd": _sd, "span": lambda v: max(v) - min(v),
             "min": min, "max": max}.get(agg)
        if f is None:
            raise ValueError(f"`by` works with mean, sd, span, min, max, not {agg}")
        return [f(v) for v in gs.values()]
    vals = [[eval(e, dict(SAFE), dict(r)) for e in exprs] for r in rows]
    if agg == "value":
        if len(rows) != 1:
            raise ValueError(f"`value` needs one row, {len(rows)} match {cond!r}")
        return vals[0]
    if agg == "list":
        return [v for row in vals for v in row]
    col = [row[0] for row in vals if row[0] is not None]
    if agg == "count":
        return [len(col)]
    if not col:
        raise ValueError("no value")
    mean = sum(col) / len(col)
    sd = math.sqrt(sum((v - mean) ** 2 for v in col) / (len(col) - 1)) if len(col) > 1 else 0.0
    return {"mean": [mean], "sd": [sd], "min": [min(col)], "max": [max(col)], "range": [min(col), max(col)],
            "meansd": [mean, sd]}[agg]


def numbers(text):
    """(value, decimals, half a unit of the last digit) of every number in text, in order."""
    out = []
    for m in NUM.finditer(text):
        sign, digits = m.group(1), m.group(2)
        start = m.start()
        neg = sign in ("−",) or (sign == "-" and (start == 0 or not text[start - 1].isdigit()))
        mant, _, exp = digits.replace("−", "-").partition("e")
        v = float(mant + ("e" + exp if exp else ""))
        dec = len(mant.split(".")[1]) if "." in mant else 0
        half = 0.5 * 10 ** (-dec + (int(exp) if exp else 0))
        out.append((-v if neg else v, dec, half))
    return out


def check_file(path):
    text = open(path, encoding="utf-8").read()
    n, bad = 0, []
    prev_end = 0
    for m in NOTE.finditer(text):
        n += 1
        line = text.count("\n", 0, m.start()) + 1
        seg_start = max(prev_end, text.rfind("\n\n", 0, m.start()) + 1)
        seg = NOTE.sub(" ", text[seg_start:m.start()])
        prev_end = m.end()
        try:
            want = compute(m.group(1))
        except Exception as e:      # noqa: BLE001  (a broken annotation is a failure, with its reason)
            bad.append(f"{line}: <!-- = {m.group(1)} -->: {e}")
            continue
        got = numbers(seg)[-len(want):] if want else []
        if len(got) < len(want):
            bad.append(f"{line}: <!-- = {m.group(1)} -->: {len(want)} numbers computed, {len(got)} quoted before it")
            continue
        for (q, dec, half), w in zip(got, want):
            if w is None:
                bad.append(f"{line}: quoted {q:g}, but the CSV has no value (never / empty)")
                break
            if abs(q - w) > half + 1e-9 * max(1.0, abs(w)):
                shown = ", ".join("None" if x is None else f"{x:.{dec + 2}f}" if half >= 1e-4 else f"{x:.4g}"
                                  for x in want)
                quoted = ", ".join(f"{x:.{d}f}" if h >= 1e-4 else f"{x:g}" for x, d, h in got)
                bad.append(f"{line}: quoted {quoted}, the CSV gives {shown} (<!-- = {m.group(1)} -->)")
                break
    return n, bad


LABS_I = ["explode", "xavier", "orthogonal", "residual", "symmetry", "race", "sweep", "xavier_kaiming", "gains", "diag"]


def check_pages():
    """The write-ups of labs I (doc/labs/NAME.md) and their index (README.md) are written by
    dev/labs/plot_labs.py from the CSVs: every number in them is produced from the CSV. Written again from
    the committed CSVs into a scratch directory (--page-only: no figures), each must equal the committed
    page byte for byte, so a page edited by hand, or a CSV changed without its page, fails. Needs a python3
    with numpy and matplotlib (plot_labs.py computes with them): without one, one line says skipped.
    Returns (passed, failed)."""
    import shutil
    import subprocess
    import tempfile
    sys.path.insert(0, os.path.join(ROOT, "dev", "plot"))
    import figstyle
    py = figstyle.plotting_python()
    if py is None:
        print("  skipped: no python3 here has numpy and matplotlib, so the labs I pages were not rewritten from "
              "their CSVs (make lab-deps)")
        return 0, 0
    passed = failed = 0
    tmp = tempfile.mkdtemp(prefix="quote_check.")
    try:
        for name in LABS_I + ["index"]:
            page = "README.md" if name == "index" else f"{name}.md"
            if name != "index":
                shutil.copy(os.path.join(LABS, f"{name}.csv"), tmp)
            r = subprocess.run([py, os.path.join(ROOT, "dev", "labs", "plot_labs.py"), name, "--dir", tmp, "--page-only"],
                               capture_output=True, text=True)
            new = os.path.join(tmp, page)
            if r.returncode != 0 or not os.path.exists(new):
                failed += 1
                print(f"  FAIL doc/labs/{page}: plot_labs.py {name} failed: {(r.stderr or r.stdout).strip()[-300:]}")
                continue
            a, b = open(new, encoding="utf-8").read(), open(os.path.join(LABS, page), encoding="utf-8").read()
            if a == b:
                passed += 1
                print(f"  ok   doc/labs/{page}: as plot_labs.py writes it from the CSV")
            else:
                failed += 1
                al, bl = a.split("\n"), b.split("\n")
                k = next((i for i, (x, y) in enumerate(zip(al, bl)) if x != y), min(len(al), len(bl)))
                print(f"  FAIL doc/labs/{page}: differs from what plot_labs.py writes from the CSV, from line {k + 1}: "
                      f"committed {bl[k][:90] if k < len(bl) else '(end)'!r}, written {al[k][:90] if k < len(al) else '(end)'!r}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return passed, failed


INDEXES = ("README.md", "README_llm.md")


def check_indexes():
    """A student finds a lab in an index before the handout asks for predictions, so an index states no
    result (issue 40): a number quoted from a CSV belongs in the write-up, after the exercises. Returns
    (passed, failed)."""
    passed = failed = 0
    for name in INDEXES:
        n = len(NOTE.findall(open(os.path.join(LABS, name), encoding="utf-8").read()))
        if n:
            failed += 1
            print(f"  FAIL doc/labs/{name}: the index states {n} results quoted from the CSVs; "
                  "they belong in the write-ups, read after the exercises")
        else:
            passed += 1
            print(f"  ok   doc/labs/{name}: an index, no results quoted")
    return passed, failed


def main():
    pages = "--no-pages" not in sys.argv
    sys.argv = [a for a in sys.argv if a != "--no-pages"]
    files = sys.argv[1:] or (sorted(glob.glob(os.path.join(LABS, "*.md")))
                             + sorted(glob.glob(os.path.join(LABS, "answers", "*.md"))))
    passed = failed = 0
    total = 0
    for f in files:
        n, bad = check_file(f)
        if not n:
            continue
        total += n
        rel = os.path.relpath(f, ROOT)
        if bad:
            failed += 1
            print(f"  FAIL {rel}: {len(bad)} of its {n} quoted numbers differ from the CSV:")
            for b in bad:
                print(f"         {rel}:{b}")
        else:
            passed += 1
            print(f"  ok   {rel}: {n} quoted numbers agree with the CSV")
    print(f"quote check: {total} annotations in {passed + failed} files")
    if not sys.argv[1:]:
        p, f = check_indexes()
        passed, failed = passed + p, failed + f
    if pages and not sys.argv[1:]:
        p, f = check_pages()
        passed, failed = passed + p, failed + f
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
