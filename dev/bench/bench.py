"""`make bench`: training-step speed of train_gpt2 against PyTorch, on this machine, in one command.

    make bench                                     # everything (about 27 minutes on 2 cores, measured)
    make bench-quick                               # the two GPT-2 ratios alone (--quick, about 4 minutes)
    /usr/bin/python3 dev/bench/bench.py --configs cfgM-gpt2,classroom --reps 2 --scaling '' --tsweep '' --phases ''

For each configuration the trainer (./train_gpt2, built by `make bench`) and the same model and step
in PyTorch (dev/bench/torch_step.py, on dev/ref/model.py) run alternately, A B A B ..., `--reps`
times each, so that both see the same machine noise; each run times `--steps` steps after
`--warmup` untimed ones and the table reports the median step, the median of the runs, and beside
it the spread: the smallest and largest run median, and the range of the ratios of each PyTorch run
to the run of ours just before it. A step is what the trainer times: draw a batch, forward,
backward, gradient norm and clipping, AdamW.

The quick mode (--quick, make bench-quick) is the check to run after a change: cfgM-gpt2 and cfgS-gpt2
only, ours and PyTorch alternating 4 times, 3 timed steps after 2 warm-up ones, nothing else (no
scaling, probes, REFERENCE=1, sweep or phases). It ends with the two ratios ours/PyTorch, each the
ratio of the medians with the range of the per-pair ratios beside it, under 5 minutes on 2 cores.
Flags given beside --quick override its choices (--quick --reps 6).

Tokens are synthetic: uniformly random ids, written to an llm.c token shard in out/bench/. The speed
of a step does not depend on which tokens it sees (no data-dependent branch in either program).

FLOPs per step, the usual matmul count (multiply-add = 2 FLOPs; forward 2, backward 4 per weight
and token), plus the causal attention products:
    6 * B*T * P_mm  +  6 * B * L * T^2 * C
P_mm = the weights of every matrix multiply, the LM head included (tied or not; embeddings
otherwise excluded). The attention term counts the causal half of q k^T and A v (forward 2*T^2*C
per layer and sequence, backward twice that). Norms, activations, softmax and AdamW are not
counted: they are work, but not FLOPs the hardware peak is about.
MFU = achieved GFLOP/s / the FMA peak of dev/bench/fma_peak (measured here, same command).

The definitions' cost (--reference CONFIG, default classroom, the trainer's default model): the trainer
built with REFERENCE=1 (Part I's definitions alone, no fast twins; dev/bench/train_gpt2_ref) alternates
with ./train_gpt2, --reps runs each; the table gives both medians and their ratio (target: at most 8x).

The probes' cost (--probes CONFIG): runs with -p 0 alternate with runs probing every 8 steps; the
steps between probe steps must take as long as -p 0 steps (doc/probes.md: off, probes cost nothing).

The sequence-length sweep (--tsweep PRESETS, default "gpt2,llama"; '' = none): cfgS's widths (L 6,
C 384, H 6, V 50257) at T = 64, 128, 256, 512, 1024 with B = 2048 / T, so every step holds 2048
tokens and the matmul FLOPs stay the same: what grows with T is attention's 6*B*L*T^2*C term (B*T^2
= 2048*T), from 0.5% of the step's FLOPs at T = 64 to 7% at T = 1024 in the gpt2 preset. Each point
runs like a row of the main table (ours and PyTorch alternating, --reps runs of --steps timed steps
after --warmup); the steps are not shortened at large T since, with the tokens per step fixed, a
step costs about the same at every T (the sweep takes about as long as 5 more cfgS rows per preset).
One markdown table per preset, with the attention share of the FLOPs, 6*B*L*T^2*C / FLOPs per step.

The phase table (--phases CONFIGS, default "cfgM-gpt2,cfgS-gpt2"; '' = none): dev/bench/phases
(doc/bench_phases.md) builds the trainer's model for each configuration and times the phases of one
step alone (matmuls, attention, norms, activations and residuals, softmax and loss, embeddings, the
activation-gradient memsets, the optimizer, the gradient zeroing), each beside its roofline
max(FLOPs / FMA peak, minimum bytes / triad bandwidth), then the sum of the phases beside a full step
timed in the same rounds (median of 2 * --reps - 1 rounds, each every phase once, then a full step). It runs with the FMA peak measured above (or --peak) and
the trainer's environment (OMP_NUM_THREADS, OMP_WAIT_POLICY=PASSIVE).
"""
import argparse
import array
import glob
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
OUT = os.path.join(ROOT, "out", "bench")

# name: trainer flags (preset, L, C, H, V, B, T); the classroom config is train_gpt2's default
# model and batch (byte-level vocabulary)
CONFIGS = {
    "cfgM-gpt2": dict(preset="gpt2", L=12, C=768, H=12, V=50257, B=4, T=64),
    "cfgM-llama": dict(preset="llama", L=12, C=768, H=12, V=50257, B=4, T=64),
    "cfgS-gpt2": dict(preset="gpt2", L=6, C=384, H=6, V=50257, B=8, T=256),
    "cfgS-llama": dict(preset="llama", L=6, C=384, H=6, V=50257, B=8, T=256),
    "classroom": dict(preset="gpt2", L=4, C=128, H=4, V=256, B=12, T=64),
}
# steps are cheap in the classroom config: time more of them
STEP_FACTOR = {"classroom": 8}
# the sequence-length sweep (--tsweep): cfgS's widths, TSWEEP_TOKENS tokens per step at every T
TSWEEP_T = (64, 128, 256, 512, 1024)
TSWEEP_TOKENS = 2048
PRESETS = ("gpt2", "llama")


# --quick (make bench-quick): the two GPT-2 configurations alone, ours and PyTorch alternating, to
# check a ratio after a change; 4 alternations x 3 timed steps take about 4 minutes on 2 cores
QUICK = dict(configs="cfgM-gpt2,cfgS-gpt2", reps=4, steps=3, warmup=2, scaling="", probes="", reference="",
             tsweep="", phases="")


def tsweep_config(preset, T):
    return dict(preset=preset, L=6, C=384, H=6, V=50257, B=TSWEEP_TOKENS // T, T=T)


def attention_flops(c):
    return 6 * c["B"] * c["L"] * c["T"] ** 2 * c["C"]


def flops_per_step(c):
    llama = c["preset"] == "llama"
    C, L, F = c["C"], c["L"], 4 * c["C"]
    per_layer = 4 * C * C + (3 if llama else 2) * C * F     # q k v o; up (+ gate) and down
    p_mm = L * per_layer + c["V"] * C
    return 6 * c["B"] * c["T"] * p_mm + attention_flops(c)


def run_measured(cmd, env):
    """Runs cmd; returns (stdout, its peak RSS in MiB)."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = p.stdout.read()
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed (exit {p.returncode}): {err.strip()[-500:]}")
    return out, usage.ru_maxrss / 1024.0


def random_shard(V, n=1 << 18):
    """The path of out/bench/random_V{V}.bin: n uniformly random token ids below V, as an llm.c token
    shard (int32 header, uint16 ids), written on first use."""
    path = os.path.join(OUT, f"random_V{V}.bin")
    if not os.path.exists(path):
        rng = random.Random(V)
        with open(path, "wb") as f:
            f.write(array.array("i", [20240520, 1, n] + [0] * 253).tobytes())
            f.write(array.array("H", [rng.randrange(V) for _ in range(n)]).tobytes())
    return path


def ours_steps(c, steps, warmup, threads, shard, extra=(), trainer="./train_gpt2"):
    """Runs train_gpt2; returns ([(step, ms)] of the timed steps, peak RSS in MiB)."""
    cmd = [trainer, "-i", shard, "-j", shard, "-V", str(c["V"]), "-a", c["preset"],
           "-L", str(c["L"]), "-C", str(c["C"]), "-H", str(c["H"]), "-b", str(c["B"]), "-t", str(c["T"]),
           "-x", str(warmup + steps), "-v", "0", "-S", "0", "-n", "0", *extra]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    out, rss = run_measured(cmd, env)
    ms = [(int(n), float(x)) for n, x in re.findall(r"^step +(\d+)/\d+ \|.*\| ([0-9.]+) ms \|", out, re.M)]
    if len(ms) != warmup + steps:
        sys.exit(f"bench: expected {warmup + steps} step lines from train_gpt2, got {len(ms)}")
    return ms[warmup:], rss


def ours(c, steps, warmup, threads, shard):
    ms, rss = ours_steps(c, steps, warmup, threads, shard)
    return [m for _, m in ms], rss


def probe_cost(c, reps, every, warmup, threads, shard):
    """The probes' cost (doc/probes.md): runs with -p 0 alternate with runs that probe every `every`
    steps (all probes). Probe step s is timed in the progress line of step s + 1; the other steps of
    a probing run execute the probe hooks and the per-step spike probe, a superset of what -p 0 does.
    Returns the medians (off, on between probe steps, on at probe steps)."""
    steps = 16 * every
    off, between, at = [], [], []
    for _ in range(reps):
        ms, _ = ours_steps(c, steps, warmup, threads, shard)
        off.append(statistics.median(m for _, m in ms))
        ms, _ = ours_steps(c, steps, warmup, threads, shard, ["-p", str(every), "-o", os.path.join(OUT, "probes"), "--overwrite", "1"])
        between.append(statistics.median(m for n, m in ms if (n - 1) % every))
        at.append(statistics.median(m for n, m in ms if (n - 1) % every == 0))
        print(f"  probes rep {len(off)}/{reps}: off {off[-1]:.2f} ms, on between probe steps {between[-1]:.2f} ms, "
              f"at probe steps {at[-1]:.1f} ms (load {loadavg()})", flush=True)
    return statistics.median(off), statistics.median(between), statistics.median(at)


def reference_cost(c, reps, steps, warmup, threads, shard):
    """The trainer on Part I's definitions alone (make train_gpt2 REFERENCE=1, built by make bench
    as dev/bench/train_gpt2_ref) alternating with ./train_gpt2: the medians (fast, reference)."""
    fast, ref = [], []
    for _ in range(reps):
        ms, _ = ours_steps(c, steps, warmup, threads, shard)
        fast.append(statistics.median(m for _, m in ms))
        ms, _ = ours_steps(c, steps, warmup, threads, shard, trainer="dev/bench/train_gpt2_ref")
        ref.append(statistics.median(m for _, m in ms))
        print(f"  REFERENCE=1 rep {len(fast)}/{reps}: fast {fast[-1]:.1f} ms, definitions {ref[-1]:.1f} ms "
              f"(load {loadavg()})", flush=True)
    return statistics.median(fast), statistics.median(ref)


def torch_env(threads):
    """PyTorch as an expert runs it on this machine (dev/bench/torch_step.py's docstring)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), TCMALLOC_RELEASE_RATE="0",
               OMP_WAIT_POLICY="PASSIVE")
    env.pop("OPENBLAS_CORETYPE", None)      # preset to Haswell here: it forces 256-bit kernels
    tc = sorted(glob.glob("/usr/lib/*/libtcmalloc_minimal.so.4"))
    if not tc:
        sys.exit("bench: libtcmalloc_minimal.so.4 not found (dev/install_deps.sh installs it)")
    env["LD_PRELOAD"] = tc[0]
    return env


def pytorch(c, steps, warmup, threads):
    cmd = ["/usr/bin/python3", "dev/bench/torch_step.py", "--preset", c["preset"], "-L", str(c["L"]),
           "-C", str(c["C"]), "-H", str(c["H"]), "-V", str(c["V"]), "-B", str(c["B"]), "-T", str(c["T"]),
           "--threads", str(threads), "--steps", str(steps), "--warmup", str(warmup)]
    out, rss = run_measured(cmd, torch_env(threads))
    r = json.loads(out.strip().splitlines()[-1])
    if not any("openblas" in lib for lib in r["libs"]):
        sys.exit(f"bench: PyTorch did not load OpenBLAS ({r['libs']}); install libopenblas0-pthread")
    return r["ms"], rss, r


def measure(label, c, steps, a, one_thread=False):
    """One row: train_gpt2 and PyTorch alternating on config c, a.reps times each (and train_gpt2 on
    1 thread with one_thread), each run timing `steps` steps after a.warmup. Returns the medians of the
    per-run medians, the peak RSS of each program, the load at the end and PyTorch's report."""
    shard = random_shard(c["V"])
    A, Bt, A1, rss_a, rss_b, torch_info = [], [], [], 0.0, 0.0, None
    for rep in range(a.reps):
        ms, rss = ours(c, steps, a.warmup, a.threads, shard)
        A.append(statistics.median(ms))
        rss_a = max(rss_a, rss)
        if not a.no_torch:
            ms, rss, torch_info = pytorch(c, steps, a.warmup, a.threads)
            Bt.append(statistics.median(ms))
            rss_b = max(rss_b, rss)
        if one_thread:
            ms, _ = ours(c, steps, a.warmup, 1, shard)
            A1.append(statistics.median(ms))
        print(f"  {label} rep {rep + 1}/{a.reps}: ours {A[-1]:.1f} ms" +
              (f", PyTorch {Bt[-1]:.1f} ms" if Bt else "") + (f", ours 1 thread {A1[-1]:.1f} ms" if A1 else "") +
              f" (load {loadavg()})", flush=True)
    return dict(c=c, ours=statistics.median(A), torch=statistics.median(Bt) if Bt else None,
                one=statistics.median(A1) if A1 else None, runs_ours=A, runs_torch=Bt, runs_one=A1,
                rss_a=rss_a, rss_b=rss_b, load=loadavg(), torch_info=torch_info)


def spread(runs):
    """' (min-max)' of the per-run medians, '' for a single run."""
    return f" ({min(runs):.0f}-{max(runs):.0f})" if len(runs) > 1 else ""


def ratio(r):
    """PyTorch / ours from the medians, with the range of the per-repetition ratios (each PyTorch run
    over the run of ours just before it: the two saw the same moment of the machine)."""
    pairs = [t / o for o, t in zip(r["runs_ours"], r["runs_torch"])]
    return f"{r['torch'] / r['ours']:.2f}x" + (f" ({min(pairs):.2f}-{max(pairs):.2f})" if len(pairs) > 1 else "")


def phases(name, threads, peak, reps):
    """dev/bench/phases on config `name` (doc/bench_phases.md): its markdown table."""
    c = CONFIGS[name]
    cmd = ["dev/bench/phases", "-a", c["preset"], "-L", str(c["L"]), "-C", str(c["C"]), "-H", str(c["H"]),
           "-V", str(c["V"]), "-b", str(c["B"]), "-t", str(c["T"]), "--peak", f"{peak:.1f}",
           "--reps", str(reps), "--name", name]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    out, _ = run_measured(cmd, env)
    return out


def fma_peak(threads):
    out = subprocess.run(["dev/bench/fma_peak", "1", str(threads)], capture_output=True, text=True,
                         check=True).stdout
    return {int(t): float(g) for t, g in re.findall(r"threads (\d+) gflops ([0-9.]+)", out)}


def loadavg():
    return open("/proc/loadavg").read().split()[0]


def machine():
    info = open("/proc/cpuinfo").read()
    names = re.findall(r"^model name\s*:\s*(.+)$", info, re.M)
    cpu = names[0].strip() if names else "unknown CPU"
    return f"{cpu}, {os.cpu_count()} cores{', AVX-512' if 'avx512f' in info else ''}"


def main():
    ap = argparse.ArgumentParser(description="train_gpt2 vs PyTorch, training-step speed (see the docstring)")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of: " + ", ".join(CONFIGS))
    ap.add_argument("--reps", type=int, default=3, help="A B alternations per config (default 3)")
    ap.add_argument("--steps", type=int, default=4, help="timed steps per run (default 4)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps per run (default 2)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads of both (default: cores)")
    ap.add_argument("--scaling", default="cfgM-gpt2",
                    help="configs also run with 1 thread, alternated with the others (default cfgM-gpt2; '' = none)")
    ap.add_argument("--probes", default="classroom",
                    help="config whose probe cost is measured (-p 0 against -p 8, alternated; '' = none)")
    ap.add_argument("--reference", default="classroom",
                    help="config on which the REFERENCE=1 trainer is timed against ./train_gpt2 (default classroom, "
                         "the default model; '' = none)")
    ap.add_argument("--tsweep", default=",".join(PRESETS),
                    help="presets of the sequence-length sweep (cfgS widths, T 64..1024, 2048 tokens per step; "
                         "default gpt2,llama; '' = none)")
    ap.add_argument("--phases", default="cfgM-gpt2,cfgS-gpt2",
                    help="configs of the per-phase table (dev/bench/phases; default cfgM-gpt2,cfgS-gpt2; '' = none)")
    ap.add_argument("--no-torch", action="store_true", help="time train_gpt2 only")
    ap.add_argument("--peak", type=float, default=0.0,
                    help="GFLOP/s for MFU instead of the peak measured now (on a busy machine the measured one is low)")
    ap.add_argument("--out", default=os.path.join(OUT, "latest.md"))
    ap.add_argument("--quick", action="store_true",
                    help="the two ratios alone, in under 5 minutes: " + " ".join(f"--{k.replace('_', '-')} {v!r}"
                                                                           for k, v in QUICK.items()) +
                         " (flags given beside it win)")
    a = ap.parse_args()
    if a.quick:     # the quick defaults, then the command line again so that its flags win
        ap.set_defaults(**QUICK)
        a = ap.parse_args()
    names = [n for n in a.configs.split(",") if n]
    scaling = {n for n in a.scaling.split(",") if n}
    tsweep = [p for p in a.tsweep.split(",") if p]
    phase_names = [n for n in a.phases.split(",") if n]
    for n in names + sorted(scaling) + ([a.probes] if a.probes else []) + ([a.reference] if a.reference else []) \
            + phase_names:
        if n not in CONFIGS:
            sys.exit(f"bench: unknown config '{n}' (have: {', '.join(CONFIGS)})")
    for p in tsweep:
        if p not in PRESETS:
            sys.exit(f"bench: unknown preset '{p}' in --tsweep (have: {', '.join(PRESETS)})")
    os.chdir(ROOT)
    os.makedirs(OUT, exist_ok=True)

    load0 = loadavg()
    peak = fma_peak(a.threads)
    print(f"FMA peak: {peak[1]:.1f} GFLOP/s on 1 thread, {peak[a.threads]:.1f} on {a.threads} (load {load0})", flush=True)
    rows, torch_info = [], None
    for n in names:
        r = measure(n, CONFIGS[n], a.steps * STEP_FACTOR.get(n, 1), a, n in scaling and a.threads > 1)
        torch_info = r.pop("torch_info") or torch_info
        rows.append(dict(name=n, **r))
    sweep = {}
    for p in tsweep:
        sweep[p] = []
        for T in TSWEEP_T:
            r = measure(f"tsweep {p} T={T}", tsweep_config(p, T), a.steps, a)
            torch_info = r.pop("torch_info") or torch_info
            sweep[p].append(r)
    probes = None
    if a.probes:
        c = CONFIGS[a.probes]
        probes = probe_cost(c, a.reps, 8, a.warmup, a.threads, random_shard(c["V"]))
    reference = None
    if a.reference:
        c = CONFIGS[a.reference]
        reference = reference_cost(c, a.reps, a.steps, a.warmup, a.threads, random_shard(c["V"]))
    phase_tables = []
    for n in phase_names:
        print(f"  phases {n} (load {loadavg()})", flush=True)
        phase_tables.append(phases(n, a.threads, a.peak or peak[a.threads], 2 * a.reps - 1))

    # ---- the table ---------------------------------------------------------------------------
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    P = a.peak or peak[a.threads]
    lines = [f"# make bench: train_gpt2 vs PyTorch ({time.strftime('%Y-%m-%d %H:%M')}, commit {commit or '?'})", "",
             f"machine: {machine()}; {a.threads} threads for both; FMA peak {peak[a.threads]:.1f} GFLOP/s "
             f"({peak[1]:.1f} on 1 thread; dev/bench/fma_peak)" + (f"; MFU against --peak {P:.1f}" if a.peak else ""),
             f"load average (1 min): {load0} at the start, {loadavg()} at the end (2 cores: above ~0.5 "
             "other work shares them; ratios hold, absolute numbers drop)"]
    if torch_info:
        lines.append(f"PyTorch {torch_info['torch']}, {torch_info['threads']} threads, loaded: "
                     f"{', '.join(torch_info['libs'])}; OPENBLAS_CORETYPE unset, TCMALLOC_RELEASE_RATE=0, "
                     "OMP_WAIT_POLICY=PASSIVE")
    lines += [f"median of {a.reps} alternating runs x {a.steps} timed steps (after {a.warmup} warm-up); "
              "tokens: synthetic (random ids)",
              "spread: (min-max) of the runs' medians; for ours/PyTorch, (min-max) of the ratios of each PyTorch "
              "run to the run of ours just before it",
              "FLOPs/step = 6*B*T*P_mm + 6*B*L*T^2*C (P_mm: matmul weights incl. LM head); MFU = GFLOP/s / FMA peak"]
    if rows:     # (--configs '' runs only the sweep or the phases)
        lines += ["",
                  "| config | model | B x T | ours ms/step | ours tok/s | GFLOP/s | MFU | PyTorch ms/step | "
                  "PyTorch tok/s | ours/PyTorch | peak MiB ours / PyTorch | load |",
                  "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        c, tok = r["c"], r["c"]["B"] * r["c"]["T"]
        gf = flops_per_step(c) / (r["ours"] / 1e3) / 1e9
        t = r["torch"]
        lines.append(f"| {r['name']} | {c['preset']} L{c['L']} C{c['C']} H{c['H']} V{c['V']} | {c['B']}x{c['T']} | "
                     f"{r['ours']:.1f}{spread(r['runs_ours'])} | {tok / r['ours'] * 1e3:.0f} | {gf:.1f} | {100 * gf / P:.1f}% | "
                     + (f"{t:.1f}{spread(r['runs_torch'])} | {tok / t * 1e3:.0f} | {ratio(r)} | " if t else "- | - | - | ")
                     + f"{r['rss_a']:.0f} / {r['rss_b']:.0f} | {r['load']} |")
    for r in rows:
        if r["one"]:
            lines.append("")
            lines.append(f"thread scaling, {r['name']}: 1 thread {r['one']:.1f}{spread(r['runs_one'])} ms/step, "
                         f"{a.threads} threads {r['ours']:.1f}{spread(r['runs_ours'])} ms/step: {r['one'] / r['ours']:.2f}x "
                         f"(FMA peak scales {peak[a.threads] / peak[1]:.2f}x)")
    if reference:
        fast, ref = reference
        lines += ["", f"REFERENCE=1, {a.reference}: the trainer on Part I's definitions alone {ref:.1f} ms/step, "
                  f"./train_gpt2 {fast:.1f} ms/step: {ref / fast:.1f}x (target: at most 8x)"]
    if probes:
        off, between, at = probes
        lines += ["", f"probes, {a.probes} (doc/probes.md): -p 0 {off:.2f} ms/step; with every probe at -p 8, "
                  f"the steps between probe steps {between:.2f} ms ({between / off:.3f}x of -p 0), "
                  f"a probe step {at:.1f} ms ({at - off:.1f} ms of probes)"]
    for p, pts in sweep.items():
        c0 = pts[0]["c"]
        lines += ["", f"## Sequence-length sweep, {p} L{c0['L']} C{c0['C']} H{c0['H']} V{c0['V']}, "
                  f"{TSWEEP_TOKENS} tokens per step (B = {TSWEEP_TOKENS} / T)", "",
                  "the matmul FLOPs are the same at every T; attention's 6*B*L*T^2*C grows as T "
                  f"(median of {a.reps} alternating runs x {a.steps} timed steps, as above)", "",
                  "| T | B | ours ms/step | PyTorch ms/step | ours/PyTorch | GFLOP/s | MFU | attention share of FLOPs | "
                  "peak MiB ours / PyTorch |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in pts:
            c, t = r["c"], r["torch"]
            gf = flops_per_step(c) / (r["ours"] / 1e3) / 1e9
            lines.append(f"| {c['T']} | {c['B']} | {r['ours']:.1f}{spread(r['runs_ours'])} | "
                         + (f"{t:.1f}{spread(r['runs_torch'])} | {ratio(r)} | " if t else "- | - | ")
                         + f"{gf:.1f} | {100 * gf / P:.1f}% | {100 * attention_flops(c) / flops_per_step(c):.1f}% | "
                         f"{r['rss_a']:.0f} / " + (f"{r['rss_b']:.0f} |" if t else "- |"))
    for t in phase_tables:
        lines += ["", t.rstrip("\n")]
    if rows and not a.no_torch:
        lines += ["", "ours/PyTorch (median ratio, and the range of the per-pair ratios): " +
                  "; ".join(f"{r['name']} {ratio(r)}" for r in rows)]
    text = "\n".join(lines) + "\n"
    print()
    print(text, end="")
    with open(a.out, "w") as f:
        f.write(text)
    print(f"\nwritten to {os.path.relpath(a.out, ROOT)}")


if __name__ == "__main__":
    main()
