"""Running train_gpt2 for the labs of doc/labs/README_llm.md, and reading what it writes.

A run is a list of train_gpt2 flags. Its output directory, out/labs/runs/TAG-HASH, is named by a
hash of the binary and the flags, so two labs that ask for the same run share it, and a finished run
(its directory holds `done`) is never trained again: re-running a lab only re-plots. "{dir}" in a
flag is replaced by the run's directory. Checkpoints are deleted after the run (the labs need the
logs only). Needs /usr/bin/python3 with numpy and matplotlib (make deps).
"""
import concurrent.futures
import csv
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "dev", "plot"))
import figstyle  # noqa: E402  (dev/plot: the one figure style)
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

figstyle.apply()

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "dev", "plot"))
from plot_run import label_axes, probe, read_log  # noqa: E402,F401  (re-exported for the labs)

RUNS = os.path.join(ROOT, "out", "labs", "runs")  # llm_labs.py --runs sets another


class Runner:
    """Trains runs with `jobs` processes at once, each with `threads` OpenMP threads, under nice."""

    def __init__(self, binary, jobs=2, threads=1, nice=10):
        self.binary, self.jobs, self.threads, self.nice = binary, jobs, threads, nice

    def dir_of(self, tag, args):
        key = hashlib.sha1(" ".join([os.path.basename(self.binary)] + args).encode()).hexdigest()[:10]
        return os.path.join(RUNS, f"{tag}-{key}")

    def _train(self, tag, args):
        d = self.dir_of(tag, args)
        if os.path.exists(os.path.join(d, "done")):
            return d
        shutil.rmtree(d, ignore_errors=True)  # a run cut off earlier starts again
        os.makedirs(d)
        argv = ["nice", "-n", str(self.nice), self.binary] + [a.replace("{dir}", d) for a in args] + ["-o", d]
        with open(os.path.join(d, "args.txt"), "w") as f:
            f.write(" ".join(argv[3:]) + "\n")
        env = dict(os.environ, OMP_NUM_THREADS=str(self.threads))
        t0 = time.time()
        with open(os.path.join(d, "stdout.txt"), "w") as out:
            rc = subprocess.call(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        if rc != 0:
            with open(os.path.join(d, "stdout.txt")) as f:
                tail = f.read()[-2000:]
            raise RuntimeError(f"run {tag} failed (exit {rc}): {' '.join(argv)}\n{tail}")
        for name in os.listdir(d):
            if name.startswith("ckpt_") and name.endswith(".bin"):
                os.remove(os.path.join(d, name))
        open(os.path.join(d, "done"), "w").close()
        print(f"  trained {tag} in {time.time() - t0:.0f} s", flush=True)
        return d

    def run(self, specs):
        """specs: {name: (tag, args)}. Trains the missing ones; returns {name: run directory}."""
        todo = [s for s in specs.values() if not os.path.exists(os.path.join(self.dir_of(*s), "done"))]
        if todo:
            print(f"  {len(todo)} of {len(specs)} runs to train ({self.jobs} at a time)", flush=True)
        with concurrent.futures.ThreadPoolExecutor(self.jobs) as pool:
            futures = {name: pool.submit(self._train, *spec) for name, spec in specs.items()}
            return {name: f.result() for name, f in futures.items()}


@functools.lru_cache(maxsize=None)
def log(run_dir):
    """A finished run's log (plot_run.read_log), parsed once: a lab's figures read the same runs again."""
    return read_log(run_dir)


def final_val(run):
    """The last validation loss of a run's log."""
    return run["val"][-1]["val_loss"]


def last_probe_step(run, name):
    return max(r["step"] for r in run["probe"] if r["probe"] == name)


def fmt(x):
    """Numbers in flags: 1.0 -> '1', 0.5 -> '0.5', 1e-12 -> '1e-12'."""
    return f"{x:g}" if isinstance(x, float) else str(x)


def flags(**kv):
    """flags(L=4, x=500) -> ['-L', '4', '-x', '500']; a key with two or more letters is a --long flag
    (underscores become dashes)."""
    out = []
    for k, v in kv.items():
        if v is None:
            continue
        out += [("--" + k.replace("_", "-")) if len(k) > 1 else "-" + k, fmt(v)]
    return out


def write_csv(path, rows):
    """rows: a list of dicts with the same keys."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()), lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    print("  wrote", os.path.relpath(path, ROOT))


def read_csv(path):
    """A CSV write_csv wrote, as a list of dicts: a cell that reads as an int is one, else a float
    (nan, inf included), else the text; an empty cell stays "" (a column a row does not have). The
    labs' --replot draws from these rows what the run path draws from its own."""
    def cell(v):
        for kind in (int, float):
            try:
                return kind(v)
            except ValueError:
                pass
        return v
    with open(path, newline="") as f:
        return [{k: (v if v == "" else cell(v)) for k, v in r.items()} for r in csv.DictReader(f)]


def save(fig, path, dpi=90, colors=None):
    """colors: store the PNG with a palette of that many colours (PIL, a matplotlib dependency), for
    noisy images such as heatmaps that would otherwise take half a megabyte."""
    figstyle.save(fig, path, dpi=max(dpi, 80))
    if colors:
        from PIL import Image
        Image.open(path).convert("RGB").quantize(colors=colors).save(path, optimize=True)
    print("  wrote", os.path.relpath(path, ROOT))


def spread(values):
    """Mean, min and max of a list, for a point with an error bar over seeds."""
    return sum(values) / len(values), min(values), max(values)


def mean_sd(values):
    """Mean and sample standard deviation (0 for a single value)."""
    n = len(values)
    m = sum(values) / n
    return m, (sum((v - m) ** 2 for v in values) / (n - 1)) ** 0.5 if n > 1 else 0.0


def seed_summary(rows, keys, quantities):
    """The spread over seeds: one row per setting (the values of `keys`) and quantity, with the number
    of seeds, mean, sample sd, min and max of its finite values (rows that differ only in the seed
    are one setting). Written beside a lab's per-seed CSV as llm_NAME_seeds.csv."""
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = []
    for k, rs in groups.items():
        for q in quantities:
            v = [r[q] for r in rs if isinstance(r[q], (int, float)) and r[q] == r[q] and abs(r[q]) != float("inf")]
            if v:
                m, sd = mean_sd(v)
                out.append(dict(zip(keys, k), quantity=q, n=len(v), mean=m, sd=sd, min=min(v), max=max(v)))
    return out
