#!/usr/bin/env python3
"""Every command of the labs' handouts and indexes, checked against the code (a suite of make check).

    dev/labs/handout_check.py [--parse-only] [--keep] [FILE.md ...]

Reads doc/labs/README.md, doc/labs/README_llm.md, every doc/labs/handouts/*.md and doc/labs/answers/*.md
(or the files named), takes every command block (a fenced code block, ```; an indented one fails: copied
from the raw file it keeps its indent, and a heredoc's indented EOF no longer ends it) and every inline
command (a `code span` that starts with ./train_gpt2, dev/, make or python3), and checks it against the code (issue 34 item 1: a handout must not drift from the code):

  - ./train_gpt2 and ./train_gpt2cu: every flag is one that `./train_gpt2 -h` lists;
  - dev/labs/mlp_lab: the lab is one of its labs and every flag one that `dev/labs/mlp_lab -h` lists;
  - make: every target is one the Makefile has, every VAR=value a variable it uses;
  - a script run as a program (dev/...): it exists, git has it executable, and its first line is a
    shebang; a script run by `python3 FILE` exists, and if it imports numpy or matplotlib it calls
    figstyle.need_plotting(), so that it works with the first python3 on the PATH;
  - `python3 - <<'EOF'` blocks compile;
  - no two ./train_gpt2 commands start a new run (no -y, no --overwrite) in the same -o DIR, in any of
    the files: the trainer refuses the second;
  - every repository path a command names exists, or is made: by make (the Makefile names it), by an
    earlier command of the same file (-o, --dump-token-losses, mlp_lab -o, llm_compose's prefix), or it
    is a lab's output out/labs/NAME/FILE for a file the lab commits to doc/labs/.

Blocks marked cheap are then run, in the order of their file, in a scratch copy of the working tree's
tracked files (a temporary directory, removed at the end; --keep keeps it), with the binaries make check
has built copied in and a small synthetic data/moby_train.txt and moby_val.txt, under bash -e -o pipefail,
so that a grep that finds nothing fails. The mark is an HTML comment (invisible on the rendered page) on
the line before the block's opening fence, or before the blank line above it:

    <!-- check: run -->                          run the block as written
    <!-- check: run; sub -x 500 => -x 20 -->     ... with these text replacements first (a long run
                                                 made short; several `sub` may follow, separated by ;)
    <!-- check: run; before CMD -->              ... after CMD (e.g. making a task file the lab makes)
    <!-- check: run; needs plotting -->          ... skipped with one line where no python3 has numpy
                                                 and matplotlib
    <!-- check: skip REASON -->                  not a command block (output, a table): not parsed

Every block not marked run is parsed. One test per block (parsed, or run) and per inline command; the
last line is "N passed, N failed". Needs python3 alone; the runs need ./train_gpt2 and dev/labs/mlp_lab
(make check builds both first). doc/labs/README.md documents the convention.
"""
import argparse
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "dev", "plot"))
import figstyle  # noqa: E402  (stdlib only until its plotting functions are called)

MARK = re.compile(r"^<!--\s*check:\s*(run|skip)\b(.*?)-->\s*$")
INLINE = re.compile(r"`((?:\./train_gpt2|dev/|make |python3 |/usr/bin/python3 )[^`]*)`")
RUN_TIMEOUT = 120


class Block:
    def __init__(self, path, line, text, mark=None, opts=""):
        self.path, self.line, self.text, self.mark, self.opts = path, line, text, mark, opts

    def where(self):
        return f"{os.path.relpath(self.path, ROOT)}:{self.line}"


FENCE = re.compile(r"^( *)(`{3,}|~{3,})")


def mark_of(lines, i):
    """(mark, options) of the block whose first line is lines[i]: the check comment on the line before it,
    or before the blank line above it."""
    for k in (i - 1, i - 2):
        m = MARK.match(lines[k]) if k >= 0 else None
        if m:
            return m.group(1), m.group(2).strip().lstrip(";").strip()
        if k >= 0 and lines[k].strip():
            break
    return None, ""


def blocks_of(path):
    """Fenced code blocks (with their mark), indented code blocks and inline commands of one markdown
    file. An indented block gets the mark "indented": a student who copies it from the raw file copies
    its indent too, and an indented heredoc's EOF no longer ends it (issue 40), so the labs' pages use
    fenced blocks and main() fails an indented one; other pages are only read."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        s = lines[i]
        f = FENCE.match(s)
        if f:
            pad, fence = len(f.group(1)), f.group(2)
            j = i + 1
            while j < len(lines) and not (lines[j].strip().startswith(fence[0] * len(fence))
                                          and not lines[j].strip().strip(fence[0])):
                j += 1
            body = [x[pad:] if x.startswith(" " * pad) else x.lstrip(" ") for x in lines[i + 1:j]]
            out.append(Block(path, i + 2, "\n".join(body).rstrip() + "\n", *mark_of(lines, i)))
            i = j + 1
            continue
        prev = lines[i - 1] if i else ""
        indent = len(s) - len(s.lstrip(" "))
        starts = s.strip() and indent >= 4 and (prev.strip() == "" or prev.startswith("#") or MARK.match(prev))
        # under a list item a block is indented by the item's indent + 4: accept 4 or more after a blank line
        if starts:
            j, body = i, []
            while j < len(lines) and (lines[j].startswith(" " * indent) or
                                      (lines[j].strip() == "" and j + 1 < len(lines) and lines[j + 1].startswith(" " * indent))):
                body.append(lines[j][indent:])
                j += 1
            mark, opts = mark_of(lines, i)
            out.append(Block(path, i + 1, "\n".join(body).rstrip() + "\n", "indented" if mark != "skip" else mark, opts))
            i = j
            continue
        for m in INLINE.finditer(s):
            out.append(Block(path, i + 1, m.group(1) + "\n", "inline"))
        i += 1
    return out


# ---- what the code offers --------------------------------------------------------------------------
def flags_of(exe, *args):
    """The flags a program's -h lists (tokens that start with - or --)."""
    try:
        r = subprocess.run([exe, *args, "-h"], capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", r.stdout + r.stderr))


def make_db():
    """(targets, variables) of the Makefile: make's database, nothing built."""
    r = subprocess.run(["make", "-pRrq", "-f", "Makefile", ".DEFAULT_GOAL_CHECK_"], cwd=ROOT, capture_output=True,
                       text=True, env=dict(os.environ, LAB="explode"))
    targets, variables = set(), set()
    for line in r.stdout.split("\n"):
        m = re.match(r"^([A-Za-z0-9_./%-][^:=#\s]*):(?!=)", line)
        if m and not line.startswith("\t"):
            targets.add(m.group(1))
        m = re.match(r"^(?:override |export )?([A-Z][A-Z0-9_]*) [:?+]?= ", line)
        if m:
            variables.add(m.group(1))
    return targets, variables


class Code:
    def __init__(self):
        self.train = os.path.join(ROOT, "train_gpt2")
        self.mlp = os.path.join(ROOT, "dev", "labs", "mlp_lab")
        self.train_flags = flags_of(self.train) if os.access(self.train, os.X_OK) else None
        self.run_dirs = {}      # -o DIR of a new run (no -y, no --overwrite): the command that trains there
        self.mlp_flags = flags_of(self.mlp) if os.access(self.mlp, os.X_OK) else None
        r = subprocess.run([self.mlp, "-h"], capture_output=True, text=True) if self.mlp_flags else None
        m = re.search(r"^labs:(.*(?:\n {6}.*)*)", (r.stdout + r.stderr) if r else "", re.M)
        self.mlp_labs = set(re.findall(r"\b([a-z_]+)\b", m.group(1).split("(")[0])) if m else set()
        self.make_targets, self.make_vars = make_db()
        self.makefile = open(os.path.join(ROOT, "Makefile")).read()
        ls = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True).stdout
        self.modes = {l.split("\t", 1)[1]: l.split()[0] for l in ls.split("\n") if "\t" in l}
        self.doc_labs = set(os.listdir(os.path.join(ROOT, "doc", "labs")))


# ---- parsing a block ---------------------------------------------------------------------------------
def split_block(text, env):
    """[(command words, heredoc body or None)] of a block: joins continued lines, cuts heredocs, splits
    at | && || ; and expands the VAR="..." assignments of the file's blocks so far (env; the handout's
    blocks run in one shell), ${VAR/old/new} included."""
    lines, cmds = text.split("\n"), []
    i = 0
    while i < len(lines):
        line = lines[i]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i].strip()
        # a continued awk program (the quote spans lines)
        while line.count("'") % 2 and i + 1 < len(lines):
            i += 1
            line += "\n" + lines[i]
        i += 1
        heredoc = None
        m = re.search(r"<<-?\s*'?(\w+)'?", line)
        if m:
            end, body = m.group(1), []
            while i < len(lines) and lines[i].strip() != end:
                body.append(lines[i])
                i += 1
            i += 1
            heredoc = "\n".join(body) + "\n"
            line = line[:m.start()]
        line = re.sub(r"\$\{([A-Z_][A-Z0-9_]*)/([^/}]*)/([^}]*)\}",
                      lambda m: env.get(m.group(1), "").replace(m.group(2), m.group(3)), line)
        try:
            words = shlex.split(line, comments=True, posix=True)
        except ValueError as e:
            raise ValueError(f"cannot parse {line.strip()!r}: {e}")
        # split into simple commands
        cur = []
        for w in words + [";"]:
            if w in ("|", "&&", "||", ";", "&"):
                if cur:
                    cmds.append((cur, heredoc))
                    heredoc = None
                cur = []
                continue
            cur.append(w)
    out = []
    for words, heredoc in cmds:
        if len(words) == 1 and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            k, v = words[0].split("=", 1)
            env[k] = v
            continue
        if len(words) == 1 and re.fullmatch(r"\$\{?([A-Z_][A-Z0-9_]*)\}?", words[0]) is None and \
                words[0] not in ("make",) and not words[0].startswith(("./", "dev/")):
            pass
        exp = []
        for w in words:
            m = re.fullmatch(r"\$\{?([A-Z_][A-Z0-9_]*)\}?", w)
            exp += shlex.split(env[m.group(1)]) if m and m.group(1) in env else [w]
        exp = [w for w in exp if not re.fullmatch(r"[A-Z][A-Z_]*[A-Z]|\.\.\.", w)]      # placeholders: FLAG, NAME, ...
        out.append((exp, heredoc))
    return out


REPO_DIRS = ("dev/", "doc/", "out/", "data/", "data_labs/", "test/", "build/", "./", ".venv/")


def lab_outputs(code, lab, fname):
    """out/labs/LAB/FILE is a lab's output if the lab commits FILE to doc/labs/ (or a labs-II lab's
    llm_ file), or FILE is one the handouts' exercises wrote there."""
    return fname in code.doc_labs


class Checker:
    def __init__(self, code, programs_only=False):
        self.code = code
        self.errors = []
        self.programs_only = programs_only

    def err(self, msg):
        self.errors.append(msg)

    def path_ok(self, p, made):
        p = p.rstrip(",")
        if p.startswith("./"):
            p = p[2:]
        if not p or "$" in p or "*" in p or "[" in p:
            return True
        if os.path.exists(os.path.join(ROOT, p)):
            return True
        if any(p == m or p.startswith(m.rstrip("/") + "/") or p.startswith(m) for m in made):
            return True
        if re.search(r"(^|[\s/$(])" + re.escape(p) + r"\b", self.code.makefile):
            return True          # made by make (data/moby_train.txt, data_labs/mnist.csv, ...)
        m = re.match(r"out/labs/(?:check/)?([\w-]+)/([^/]+)$", p)
        if m and lab_outputs(self.code, m.group(1), m.group(2)):
            return True
        if re.match(r"out/labs/[\w-]+/?$", p):
            return True          # a lab's output folder
        return False

    def new_run_dir(self, prog, args):
        """Two new runs into one -o DIR, across every handout and key (a student works through them all):
        the trainer refuses the second, so each needs its own directory."""
        if "-o" not in args[:-1] or "-y" in args or "--overwrite" in args:
            return
        d = os.path.normpath(args[args.index("-o") + 1])
        cmd = " ".join([prog] + args)
        first = self.code.run_dirs.setdefault(d, cmd)
        if first != cmd:
            self.err(f"{prog} -o {d}: a run trains there already (`{first[:80]}`), and the trainer refuses "
                     "a new run into a finished run's directory: give this one its own -o")

    def command(self, words, heredoc, made):
        """Check one simple command; record the paths it makes into made."""
        c = self.code
        while words and (words[0] in ("time", "nice", "env") or re.match(r"^-n$|^\d+$|^[A-Z_]+=", words[0])):
            words = words[1:]
        if not words:
            return
        prog, args = words[0], words[1:]
        if prog == "export":
            return
        if self.programs_only:
            p = prog[2:] if prog.startswith("./dev/") else prog
            if args and p.startswith("dev/") and p in c.modes:
                if not os.access(os.path.join(ROOT, p), os.X_OK):
                    self.err(f"{prog} is run as a program but is not executable (git mode {c.modes[p]})")
                elif not open(os.path.join(ROOT, p), "rb").readline().startswith(b"#!"):
                    self.err(f"{prog} is run as a program but has no #! line")
            return
        if not args and prog.startswith(("dev/", "./dev/")):       # a mention of a file, not a run
            if not self.path_ok(prog, made):
                self.err(f"{prog}: no such file, and nothing before makes it")
            return
        for k, a in enumerate(args[:-1]):
            if a == "-o" and not prog.endswith(("train_gpt2", "train_gpt2cu", "mlp_lab")):
                made.add(args[k + 1])
        if prog in ("./train_gpt2", "./train_gpt2cu", "train_gpt2"):
            if c.train_flags is None:
                self.err("./train_gpt2 is not built (make train_gpt2): its flags were not checked")
                return
            outs = {"-o", "--dump-token-losses", "--save-llmc", "--cossim-dump"}
            ins = {"-i", "-j", "-y", "--load-llmc", "--decode"}
            self.new_run_dir(prog, args)
            k = 0
            while k < len(args):
                a = args[k]
                if a == "-h":
                    k += 1
                    continue
                if a.startswith("-") and not re.match(r"^-\d", a):
                    if a not in c.train_flags:
                        self.err(f"./train_gpt2 has no flag {a} (./train_gpt2 -h)")
                    v = args[k + 1] if k + 1 < len(args) else None
                    if v is None:
                        self.err(f"./train_gpt2 {a} has no value")
                    elif a in outs:
                        made.add(v)
                    elif a in ins and not self.path_ok(v, made):
                        self.err(f"./train_gpt2 {a} {v}: no such file, and nothing before makes it")
                    k += 2
                else:
                    self.err(f"./train_gpt2: {a} is not a flag (every flag takes a value)")
                    k += 1
            return
        if prog.endswith("dev/labs/mlp_lab"):
            if c.mlp_flags is None:
                self.err("dev/labs/mlp_lab is not built (make dev/labs/mlp_lab): its flags were not checked")
                return
            if not args or args[0] not in c.mlp_labs:
                self.err(f"dev/labs/mlp_lab {args[0] if args else ''}: not one of its labs ({' '.join(sorted(c.mlp_labs))})")
            k = 1
            while k < len(args):
                a = args[k]
                if a.startswith("-") and not re.match(r"^-\d", a):
                    if a not in c.mlp_flags:
                        self.err(f"dev/labs/mlp_lab has no flag {a}")
                    if a == "-o" and k + 1 < len(args):
                        made.add(args[k + 1])
                    k += 2
                else:
                    k += 1
            return
        if prog == "make":
            for a in args:
                if a.startswith("-"):
                    continue
                if "=" in a:
                    var = a.split("=", 1)[0]
                    if var not in c.make_vars and not re.search(r"\$[({]" + var + r"\b", c.makefile):
                        self.err(f"make {a}: the Makefile has no variable {var}")
                elif re.search(r"[A-Z]{3}", a):
                    continue          # a placeholder: lab-NAME
                elif a not in c.make_targets:
                    self.err(f"make {a}: the Makefile has no target {a}")
                else:
                    made.add(a)
                    m = re.match(r"lab-([\w-]+)$", a)
                    if m:
                        made.add(f"out/labs/{m.group(1)}/")
            return
        if prog in ("python3", "/usr/bin/python3", "python") or prog.endswith("/python3"):
            if args[:1] == ["-"]:
                if heredoc is None:
                    self.err("python3 - without a here-document")
                else:
                    try:
                        compile(heredoc, "<heredoc>", "exec")
                    except SyntaxError as e:
                        self.err(f"its python3 here-document does not compile: {e}")
                args = args[1:]
            elif args[:1] == ["-m"]:
                return
            elif args:
                script = args[0]
                if not os.path.exists(os.path.join(ROOT, script)):
                    self.err(f"{prog} {script}: no such script")
                    return
                self.script_needs(script, prog)
                args = args[1:]
            self.paths(args, made)
            return
        if prog.startswith(("dev/", "./dev/")) or (prog.startswith("./") and prog not in ("./train_gpt2",)):
            p = prog[2:] if prog.startswith("./") else prog
            if p == "dev/labs/llm_compose" and args:
                made.add(args[0])
            if not os.path.exists(os.path.join(ROOT, p)):
                if not self.path_ok(p, made):
                    self.err(f"{prog}: no such program, and nothing before makes it")
                return
            mode = c.modes.get(p)
            if mode is not None and not os.access(os.path.join(ROOT, p), os.X_OK):
                self.err(f"{prog} is run as a program but is not executable (git mode {mode})")
            if mode is not None:
                first = open(os.path.join(ROOT, p), "rb").readline()
                if not first.startswith(b"#!"):
                    self.err(f"{prog} is run as a program but has no #! line")
            if p.endswith(".py"):
                self.script_needs(p, prog)
            if p.endswith("lab_check.py") or p.endswith("plot_labs.py"):
                return
            self.paths(args, made)
            return
        if prog in ("mkdir",):
            made.update(a for a in args if not a.startswith("-"))
            return
        if prog in ("tar",):
            if len(args) > 1 and "f" in args[0]:
                made.add(args[1])
                self.paths(args[2:], made)
            return
        if prog in ("grep", "awk", "sort", "head", "tail", "cat", "ls", "wc", "cut"):
            self.paths(args, made)
            return
        if prog.startswith(".venv/"):
            return

    def script_needs(self, script, how):
        if how not in ("python3", "python"):
            return            # an interpreter named by path (/usr/bin/python3, .venv/bin/python3): says which one
        src = open(os.path.join(ROOT, script), encoding="utf-8").read()
        if re.search(r"^\s*(import|from)\s+(numpy|matplotlib)", src, re.M) and "need_plotting(" not in src:
            self.err(f"{how} {script}: it imports numpy or matplotlib without figstyle.need_plotting(), so it fails "
                     "where the first python3 on the PATH lacks them")

    def paths(self, args, made):
        for a in args:
            if a.startswith("-") or "/" not in a or not a.startswith(REPO_DIRS) or a.startswith("./train"):
                continue
            if a.startswith(".venv/"):
                continue
            if not self.path_ok(a, made):
                self.err(f"{a}: no such file, and nothing before in this file makes it")


# ---- running the cheap blocks --------------------------------------------------------------------------
def scratch_copy(tmp):
    """The working tree's tracked files (as they are now, uncommitted edits included), the binaries make
    test built, and a small synthetic corpus as data/moby_*.txt."""
    repo = os.path.join(tmp, "repo")
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True).stdout.split(b"\0")
    for f in files:
        f = f.decode()
        if not f or f.startswith("test/fixtures/") or not os.path.exists(os.path.join(ROOT, f)):
            continue
        dst = os.path.join(repo, f)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, f), dst)
    for b in ("train_gpt2", "dev/labs/mlp_lab", "dev/labs/llm_compose"):
        if os.path.exists(os.path.join(ROOT, b)):
            shutil.copy2(os.path.join(ROOT, b), os.path.join(repo, b))
    text = "".join(open(os.path.join(repo, p), encoding="utf-8").read() for p in sorted(
        glob.glob(os.path.join(repo, "doc", "*.md"))))
    os.makedirs(os.path.join(repo, "data"), exist_ok=True)
    with open(os.path.join(repo, "data", "moby_train.txt"), "w") as f:
        f.write(text[: 200000])
    with open(os.path.join(repo, "data", "moby_val.txt"), "w") as f:
        f.write(text[200000: 240000] or text[:40000])
    # timestamps: the copied binaries are newer than their sources, so make does not rebuild them
    for b in ("train_gpt2", "dev/labs/mlp_lab", "dev/labs/llm_compose"):
        if os.path.exists(os.path.join(repo, b)):
            os.utime(os.path.join(repo, b))
    return repo


def run_block(b, repo):
    opts = [o.strip() for o in b.opts.split(";") if o.strip()]
    text, before = b.text, []
    for o in opts:
        if o.startswith("sub "):
            old, new = (s.strip() for s in o[4:].split("=>", 1))
            if old not in text:
                return f"its mark replaces {old!r}, which the block no longer has"
            text = text.replace(old, new)
        elif o.startswith("before "):
            before.append(o[7:])
        elif o == "needs plotting":
            if figstyle.plotting_python() is None:
                return "SKIP: no python3 here has numpy and matplotlib"
        else:
            return f"unknown option in its mark: {o!r}"
    script = "set -e -o pipefail\nexport OMP_NUM_THREADS=1\n" + "".join(c + "\n" for c in before) + text
    try:
        r = subprocess.run(["bash", "-c", script], cwd=repo, capture_output=True, text=True, errors="replace",
                           timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"did not finish within {RUN_TIMEOUT} s"
    if r.returncode != 0:
        tail = (r.stdout + r.stderr).strip().split("\n")[-4:]
        return f"exit {r.returncode}: " + " | ".join(tail)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--parse-only", action="store_true", help="parse and check, run nothing")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copy")
    a = ap.parse_args()
    files = a.files or ([os.path.join(ROOT, "doc", "labs", f) for f in ("README.md", "README_llm.md")]
                        + sorted(glob.glob(os.path.join(ROOT, "doc", "labs", "handouts", "*.md")))
                        + sorted(glob.glob(os.path.join(ROOT, "doc", "labs", "answers", "*.md"))))
    code = Code()
    passed = failed = 0
    # every other page of the repository: only that a script it runs as a program is one (mode, #!)
    others = [] if a.files else [os.path.join(ROOT, f) for f in subprocess.run(
        ["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True).stdout.split()
        if not f.startswith("doc/labs/")]
    for path in others:
        bad = []
        for b in blocks_of(path):
            if b.mark == "skip":
                continue
            ch = Checker(code, programs_only=True)
            try:
                for words, heredoc in split_block(b.text, {}):
                    ch.command(words, heredoc, set())
            except ValueError:
                pass
            bad += [f"{b.where()}: {e}" for e in ch.errors]
        if bad:
            failed += 1
            print(f"  FAIL {os.path.relpath(path, ROOT)}: " + "; ".join(dict.fromkeys(bad)))
        else:
            passed += 1
    runs = []
    envs, mades = {}, {}
    files = sorted(files, key=lambda f: "answers" in os.path.abspath(f).split(os.sep))     # handouts first
    for path in files:
        made, env = set(), {}
        # an answer key's commands use the variables of its handout (M="...", Q="...")
        twin = os.path.join(ROOT, "doc", "labs", "handouts", os.path.basename(path))
        if os.path.basename(os.path.dirname(os.path.abspath(path))) == "answers" and os.path.exists(twin):
            env = dict(envs.get(os.path.abspath(twin), {}))
            made = set(mades.get(os.path.abspath(twin), set())) | {"out/ex/"}    # the student's exercise runs
        envs[os.path.abspath(path)], mades[os.path.abspath(path)] = env, made
        for b in blocks_of(os.path.abspath(path)):
            if b.mark == "skip":
                continue
            if b.mark == "indented":
                failed += 1
                print(f"  FAIL {b.where()} `{b.text.strip().split(chr(10))[0][:70]}`: an indented code block; copied "
                      "from the raw file it keeps its indent (a heredoc's EOF no longer ends it): fence it with ```")
                continue
            ch = Checker(code)
            try:
                for words, heredoc in split_block(b.text, env):
                    ch.command(words, heredoc, made)
            except ValueError as e:
                ch.err(str(e))
            first = b.text.strip().split("\n")[0][:70]
            if ch.errors:
                failed += 1
                print(f"  FAIL {b.where()} `{first}`:")
                for e in dict.fromkeys(ch.errors):
                    print(f"         {e}")
            else:
                passed += 1
            if b.mark == "run":
                runs.append(b)
    if runs and not a.parse_only:
        tmp = tempfile.mkdtemp(prefix="handout_check.")
        try:
            repo = scratch_copy(tmp)
            for b in runs:
                t0 = time.time()
                msg = run_block(b, repo)
                first = b.text.strip().split("\n")[0][:60]
                if msg and msg.startswith("SKIP"):
                    print(f"  skipped: {b.where()} `{first}`: {msg[6:]}")
                elif msg:
                    failed += 1
                    print(f"  FAIL {b.where()} ran `{first}`: {msg}")
                else:
                    passed += 1
                    print(f"  ok   {b.where()} ran `{first}` ({time.time() - t0:.1f} s)")
        finally:
            if a.keep:
                print(f"  (scratch copy kept: {tmp})")
            else:
                shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
