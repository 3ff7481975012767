/*
dev/cuda_cpu/cuda_runtime.h: a CUDA runtime that runs kernels on the CPU, for the tests only.

train_gpt2.cu and test_gpt2.cu compile against this header with the host C++ compiler (g++), after
dev/cuda_cpu/rewrite.sh has turned each `kernel<<<grid, block>>>(args)` into
`cuda_cpu::launcher(...)(args)`. Nothing else in the kernels changes: they run as written. The
binaries a user builds (`make train_gpt2cu`) never see this file; doc/cuda.md describes it.

What a kernel may rely on is real here:
  - threads: every thread of a block is a fiber (its own stack and registers) with its own
    threadIdx; blockIdx, blockDim and gridDim are those of its block. The threads of a block run
    one after another, each until it finishes or reaches a barrier.
  - barriers: __syncthreads() suspends the thread until every thread of the block has reached a
    barrier. A thread that exits while others wait at one is an error (undefined in CUDA).
  - warps: lanes are threads 32k..32k+31 of the block (linear index x + y*bdx + z*bdx*bdy).
    __shfl_*_sync, __ballot_sync, __any/__all_sync and __syncwarp wait until every lane named in
    the mask has arrived, then exchange values by the rules of the CUDA programming guide (width,
    out-of-segment lanes keep their own value). A lane of the mask that exited is an error.
  - __shared__ variables are static storage; blocks run one at a time, so each block has them
    to itself. (They are not refilled between blocks: a read before the first write sees what the
    previous block left, where the hardware would show garbage. The race check below still sees
    a missing barrier.)
  - atomics are atomic: threads switch only at barriers, so a read-modify-write is never cut.
  - device memory: cudaMalloc maps each buffer between two PROT_NONE guard regions of 1 MiB (its
    end is at most 15 bytes before the one after it: the start is 16-byte aligned). The buffer and
    the bytes around it start as 0xFF (NaN as float and double, -1 as int); a read past the end
    faults or gives NaN, a write past either end faults or breaks the 0xFF bytes, checked after
    each launch. Outside the runtime's own calls every buffer is PROT_NONE, so host code that
    dereferences a device pointer faults as it would on a real GPU. Each fault is reported with
    the kernel, block and thread that made it.
  - kernel arguments that are pointers must point into a device buffer (or be NULL).
  - launch errors (a block of more than 1024 threads, an empty grid, grid.y or z over 65535) are
    returned by cudaGetLastError, not run.
  - race check: a launch can run three times from the same device memory: blocks and threads in
    order, reversed, and in a seeded shuffle. Any byte of device memory that differs means the
    result depends on the order of threads: the kernel is reported by name (cuda_cpu_races()),
    and the in-order result is kept. CUDA_CPU_RACECHECK=N checks the first N launches of each
    configuration (kernel, grid, block) (default 1; 0 turns it off; cuda_cpu_set_racecheck() sets
    it in a program).
Math functions are the host's libm (expf may differ from the GPU's by an ulp or two).
*/
#pragma once
#define CUDA_CPU_RUNTIME 1       // the tests ask for it: on this runtime they check more (coverage, races)
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

// ---- the CUDA language, as the host compiler sees it -----------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
static constexpr int warpSize = 32;

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef struct CUstream_st* cudaStream_t;

template <typename A, typename B> static inline std::common_type_t<A, B> min(A a, B b) { return a < b ? a : b; }
template <typename A, typename B> static inline std::common_type_t<A, B> max(A a, B b) { return a < b ? b : a; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

// ---- the runtime API: errors ---------------------------------------------------------------------
// The codes, names and messages of the real runtime (checked against libcudart 13.0).
enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidDevice = 101,
    cudaErrorNotReady = 600,
};
struct cuda_cpu_error_text { cudaError_t code; const char *name, *message; };
static const cuda_cpu_error_text cuda_cpu_errors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
};
static inline const cuda_cpu_error_text* cuda_cpu_error(cudaError_t e) {
    for (const cuda_cpu_error_text& t : cuda_cpu_errors)
        if (t.code == e) return &t;
    return NULL;
}
static inline const char* cudaGetErrorString(cudaError_t e) {
    return cuda_cpu_error(e) ? cuda_cpu_error(e)->message : "unrecognized error code";
}
static inline const char* cudaGetErrorName(cudaError_t e) {
    return cuda_cpu_error(e) ? cuda_cpu_error(e)->name : "cudaErrorUnknown";
}

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock;
    int warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], major, minor, multiProcessorCount;
};

namespace cuda_cpu {

// ---- fatal errors: one line, exit 1 ------------------------------------------------------------------
[[noreturn]] static void die(const char* fmt, ...) {
    fflush(stdout);
    va_list ap;
    va_start(ap, fmt);
    fputs("cuda_cpu: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

// ---- fibers: a stack and a saved stack pointer; switch() saves one and resumes the other -------
// On x86-64 the switch is 14 instructions (the callee-saved registers of the System V ABI, the
// SSE and x87 control words); elsewhere ucontext's swapcontext, about 50x slower (a system call).
#if defined(__x86_64__)
extern "C" void cuda_cpu_switch(void** save_sp, void* next_sp);
__asm__(".text\n.globl cuda_cpu_switch\n.type cuda_cpu_switch,@function\ncuda_cpu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n"
        ".size cuda_cpu_switch, .-cuda_cpu_switch\n");
struct Context { void* sp; };
// A new fiber's stack as cuda_cpu_switch will pop it: control words, six registers, then entry
// as the return address and a zero above it (entry's own return address, never used).
static inline void context_make(Context* c, char* stack, size_t size, void (*entry)(void)) {
    uintptr_t top = ((uintptr_t)(stack + size)) & ~(uintptr_t)15;
    uint64_t* s = (uint64_t*)top;
    *--s = 0;
    *--s = (uint64_t)(uintptr_t)entry;
    for (int i = 0; i < 6; i++) *--s = 0;
    *--s = 0x037F00001F80ull;                 // mxcsr 0x1F80 (defaults), x87 control word 0x037F
    c->sp = s;
}
static inline void context_switch(Context* from, Context* to) { cuda_cpu_switch(&from->sp, to->sp); }
#else
#include <ucontext.h>
struct Context { ucontext_t uc; };
static inline void context_make(Context* c, char* stack, size_t size, void (*entry)(void)) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = NULL;
    makecontext(&c->uc, entry, 0);
}
static inline void context_switch(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }
#endif

// ---- device memory -----------------------------------------------------------------------------------
struct Buffer {
    char* map;           // the whole mapping: guard region, 0xFF head, the buffer, 0xFF tail, guard region
    size_t map_size;
    char* inner;         // the readable pages between the guard regions
    size_t inner_size;
    char* start;         // what cudaMalloc returned
    size_t size;         // what was asked for
    char* end_pad;       // start + size: 0xFF bytes up to the guard page
    long id;             // allocation number, for messages
};

enum State { READY, AT_SYNCTHREADS, AT_WARP, DONE };
enum WarpOp { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR, BALLOT, SYNCWARP };

struct Thread {
    Context ctx;
    dim3 idx;
    State state;
    // a warp operation in progress: what this lane offers and what it gets back
    WarpOp op;
    unsigned mask;
    int arg, width;
    uint64_t value, result;
};

static const int MAX_THREADS = 1024;
static const size_t GUARD = 1 << 20;      // PROT_NONE address space on each side of a device buffer
static const size_t STACK_SIZE = 64 * 1024;

struct Runtime {
    std::vector<Buffer> buffers;          // sorted by start
    long next_id = 0;
    size_t page = 4096;
    int device_open = 0;                  // 1 while a launch, memcpy or cuBLAS call reads device memory
    cudaError_t last_error = cudaSuccess;
    // the launch in progress
    const char* kernel = NULL;
    dim3 grid, block, block_idx;
    Thread* threads = NULL;               // MAX_THREADS fibers
    char* stacks = NULL;
    int nthreads = 0;
    Thread* current = NULL;
    Context scheduler;
    void (*body)(void*) = NULL;           // calls the kernel with its arguments
    void* body_ctx = NULL;
    // race check
    long racecheck_per_kernel = -1;       // -1: not read from the environment yet
    std::map<std::string, long> launches, checked;   // by kernel name
    std::map<std::string, long> config_launches;      // by kernel, grid and block
    std::vector<std::string> races;
};
static Runtime rt;

static inline Buffer* find_buffer(const void* p) {       // the buffer holding p (its end included)
    const char* c = (const char*)p;
    auto it = std::upper_bound(rt.buffers.begin(), rt.buffers.end(), c,
                               [](const char* a, const Buffer& b) { return a < b.start; });
    if (it == rt.buffers.begin()) return NULL;
    --it;
    return c <= it->start + it->size ? &*it : NULL;
}

// the mapped buffer whose guard pages or padding hold p (for fault messages)
static inline Buffer* near_buffer(const void* p) {
    const char* c = (const char*)p;
    for (Buffer& b : rt.buffers)
        if (c >= b.map && c < b.map + b.map_size) return &b;
    return NULL;
}

static inline void protect_all(int open) {                 // device memory readable by the host or not
    for (Buffer& b : rt.buffers)
        if (mprotect(b.inner, b.inner_size, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0)
            die("mprotect failed: %s", strerror(errno));
    rt.device_open = open;
}

// RAII: device memory open for the duration of a runtime call
struct DeviceAccess {
    DeviceAccess() { protect_all(1); }
    ~DeviceAccess() { protect_all(0); }
};

static inline int pad_intact(const Buffer& b) {
    for (const char* p = b.inner; p < b.start; p++)
        if ((unsigned char)*p != 0xFF) return 0;
    for (const char* p = b.end_pad; p < b.inner + b.inner_size; p++)
        if ((unsigned char)*p != 0xFF) return 0;
    return 1;
}

static inline void check_pads(const char* what) {
    for (Buffer& b : rt.buffers)
        if (!pad_intact(b))
            die("%s wrote outside device buffer #%ld (%zu bytes): the bytes around it were changed", what, b.id,
                b.size);
}

// ---- faults: a guard page or a protected buffer was touched -----------------------------------------------
static void on_fault(int sig, siginfo_t* si, void*) {
    char msg[512];
    const void* a = si->si_addr;
    Buffer* b = near_buffer(a);
    int n;
    if (rt.kernel && rt.current)
        n = snprintf(msg, sizeof(msg),
                     "cuda_cpu: kernel %s, block (%u,%u,%u) thread (%u,%u,%u): invalid access at %p", rt.kernel,
                     rt.block_idx.x, rt.block_idx.y, rt.block_idx.z, rt.current->idx.x, rt.current->idx.y,
                     rt.current->idx.z, a);
    else if (rt.kernel)
        n = snprintf(msg, sizeof(msg), "cuda_cpu: %s: invalid access at %p", rt.kernel, a);
    else
        n = snprintf(msg, sizeof(msg), "cuda_cpu: host code: invalid access at %p", a);
    if (b && !rt.device_open && (const char*)a >= b->start && (const char*)a < b->start + b->size)
        n += snprintf(msg + n, sizeof(msg) - n, ", inside device buffer #%ld: the host dereferenced a device pointer",
                      b->id);
    else if (b && (const char*)a >= b->start)
        n += snprintf(msg + n, sizeof(msg) - n, ", %ld bytes past the end of device buffer #%ld (%zu bytes)",
                      (long)((const char*)a - b->start - b->size), b->id, b->size);
    else if (b)
        n += snprintf(msg + n, sizeof(msg) - n, ", %ld bytes before the start of device buffer #%ld (%zu bytes)",
                      (long)(b->start - (const char*)a), b->id, b->size);
    else
        n += snprintf(msg + n, sizeof(msg) - n, " (%s)", sig == SIGSEGV ? "segmentation fault" : "bus error");
    n += snprintf(msg + n, sizeof(msg) - n, "\n");
    if (write(2, msg, n) < 0) {}
    _exit(1);
}

static inline void install_fault_handler(void) {
    static int done = 0;
    if (done) return;
    done = 1;
    static char altstack[64 * 1024];
    stack_t ss;
    ss.ss_sp = altstack;
    ss.ss_size = sizeof(altstack);
    ss.ss_flags = 0;
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
}

// ---- the scheduler: runs one block -----------------------------------------------------------------------
static void thread_entry(void) {
    rt.body(rt.body_ctx);
    rt.current->state = DONE;
    context_switch(&rt.current->ctx, &rt.scheduler);
    die("internal: a finished thread was resumed");
}

// Called by a thread that must wait (a barrier, a warp operation): back to the scheduler.
static inline void yield_to_scheduler(State s) {
    Thread* t = rt.current;
    t->state = s;
    context_switch(&t->ctx, &rt.scheduler);
    rt.current = t;
}

static inline int lane_of(int linear) { return linear % 32; }

// The warp operation that lane `first` waits at, once every lane its mask names waits at the same
// operation with the same mask: exchange the values and release the lanes. Returns 1 if it did.
// Lanes of the mask that wait elsewhere (another operation, a barrier) are not ready yet; one that
// has exited never will be, which is an error.
static int complete_warp_op(Thread* lanes, int nl, int first, int warp) {
    unsigned mask = lanes[first].mask;
    WarpOp op = lanes[first].op;
    if (!(mask >> first & 1))
        die("kernel %s: lane %d calls a warp operation with a mask (0x%08x) that does not name itself", rt.kernel,
            first, mask);
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1)) continue;
        if (l >= nl)
            die("kernel %s: a warp operation's mask 0x%08x names lane %d, which the block (%d threads) does not have",
                rt.kernel, mask, l, rt.nthreads);
        if (lanes[l].state == DONE)
            die("kernel %s, block (%u,%u,%u): lane %d of warp %d exited before a warp operation with mask 0x%08x",
                rt.kernel, rt.block_idx.x, rt.block_idx.y, rt.block_idx.z, l, warp, mask);
        if (lanes[l].state != AT_WARP || lanes[l].mask != mask || lanes[l].op != op) return 0;
    }
    uint64_t ballot = 0;
    for (int l = 0; l < 32; l++)
        if (mask >> l & 1) ballot |= (uint64_t)(lanes[l].value != 0) << l;
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1)) continue;
        Thread* t = &lanes[l];
        int w = t->width, seg = l & ~(w - 1), src = l;
        switch (op) {
        case SHFL_IDX: src = seg + (t->arg & (w - 1)); break;
        case SHFL_UP: src = (l - seg) >= t->arg ? l - t->arg : l; break;
        case SHFL_DOWN: src = (l - seg) + t->arg < w ? l + t->arg : l; break;
        case SHFL_XOR: src = l ^ t->arg; if (src >= seg + w) src = l; break;
        case BALLOT: case SYNCWARP: break;
        }
        if (op == BALLOT) t->result = ballot;
        else if (op != SYNCWARP) {
            if (!(mask >> src & 1))
                die("kernel %s: lane %d reads lane %d, which is not in the shuffle's mask 0x%08x", rt.kernel, l, src,
                    mask);
            t->result = lanes[src].value;
        }
        t->state = READY;
    }
    return 1;
}

// Completes every warp operation whose lanes have all arrived. Returns 1 if any completed.
static int complete_warps(void) {
    int progress = 0;
    for (int w0 = 0; w0 < rt.nthreads; w0 += 32) {
        Thread* lanes = rt.threads + w0;
        int nl = std::min(32, rt.nthreads - w0);
        for (int first = 0; first < nl; first++)
            if (lanes[first].state == AT_WARP) progress |= complete_warp_op(lanes, nl, first, w0 / 32);
    }
    return progress;
}

// Releases the block's barrier once every thread waits at it. Returns 1 if it did.
static int complete_syncthreads(void) {
    int waiting = 0, done = 0;
    for (int i = 0; i < rt.nthreads; i++) {
        if (rt.threads[i].state == AT_SYNCTHREADS) waiting++;
        else if (rt.threads[i].state == DONE) done++;
        else return 0;
    }
    if (!waiting) return 0;
    if (done)
        die("kernel %s, block (%u,%u,%u): %d threads wait at __syncthreads() while %d have exited", rt.kernel,
            rt.block_idx.x, rt.block_idx.y, rt.block_idx.z, waiting, done);
    for (int i = 0; i < rt.nthreads; i++) rt.threads[i].state = READY;
    return 1;
}

// order: the sequence in which ready threads are resumed, a permutation of 0..nthreads-1
static void run_block(const int* order) {
    for (int i = 0; i < rt.nthreads; i++) {
        Thread* t = &rt.threads[i];
        t->idx = dim3(i % rt.block.x, i / rt.block.x % rt.block.y, i / (rt.block.x * rt.block.y));
        t->state = READY;
        context_make(&t->ctx, rt.stacks + (size_t)i * (STACK_SIZE + rt.page) + rt.page, STACK_SIZE, thread_entry);
    }
    for (;;) {
        int ran = 0;
        for (int k = 0; k < rt.nthreads; k++) {
            Thread* t = &rt.threads[order[k]];
            if (t->state != READY) continue;
            rt.current = t;
            context_switch(&rt.scheduler, &t->ctx);
            ran = 1;
        }
        rt.current = NULL;
        int released = complete_warps();
        released |= complete_syncthreads();
        if (released || ran) continue;
        int finished = 1;
        for (int i = 0; i < rt.nthreads; i++) finished &= rt.threads[i].state == DONE;
        if (finished) return;
        int at_sync = 0, at_warp = 0;
        for (int i = 0; i < rt.nthreads; i++) {
            at_sync += rt.threads[i].state == AT_SYNCTHREADS;
            at_warp += rt.threads[i].state == AT_WARP;
        }
        die("kernel %s, block (%u,%u,%u): deadlock, %d threads wait at __syncthreads() and %d at a warp operation",
            rt.kernel, rt.block_idx.x, rt.block_idx.y, rt.block_idx.z, at_sync, at_warp);
    }
}

// Knuth's multiplicative hash as a tiny generator: a seeded shuffle needs nothing better.
static inline void permutation(int* p, int n, int order, uint64_t seed) {
    for (int i = 0; i < n; i++) p[i] = order == 1 ? n - 1 - i : i;
    if (order != 2) return;
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int i = n - 1; i > 0; i--) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((s >> 33) % (uint64_t)(i + 1));
        std::swap(p[i], p[j]);
    }
}

static void run_grid(int order, uint64_t seed) {
    long nblocks = (long)rt.grid.x * rt.grid.y * rt.grid.z;
    std::vector<int> block_order(nblocks), thread_order(rt.nthreads);
    permutation(block_order.data(), (int)nblocks, order, seed);
    permutation(thread_order.data(), rt.nthreads, order, seed + 1);
    for (long k = 0; k < nblocks; k++) {
        long b = block_order[k];
        rt.block_idx = dim3(b % rt.grid.x, b / rt.grid.x % rt.grid.y, b / ((long)rt.grid.x * rt.grid.y));
        run_block(thread_order.data());
    }
}

static inline void snapshot(std::vector<std::vector<char>>* s) {
    s->resize(rt.buffers.size());
    for (size_t i = 0; i < rt.buffers.size(); i++) (*s)[i].assign(rt.buffers[i].start, rt.buffers[i].start + rt.buffers[i].size);
}
static inline void restore(const std::vector<std::vector<char>>& s) {
    for (size_t i = 0; i < rt.buffers.size(); i++) memcpy(rt.buffers[i].start, s[i].data(), s[i].size());
}
// the first byte where device memory differs from s, as "buffer #id byte offset" (empty if none)
static inline std::string first_difference(const std::vector<std::vector<char>>& s) {
    for (size_t i = 0; i < rt.buffers.size(); i++) {
        const Buffer& b = rt.buffers[i];
        for (size_t j = 0; j < b.size; j++)
            if (b.start[j] != s[i][j]) {
                char where[160];
                snprintf(where, sizeof(where), "device buffer #%ld (%zu bytes), byte %zu", b.id, b.size, j);
                return where;
            }
    }
    return "";
}

static inline long racecheck_limit(void) {
    if (rt.racecheck_per_kernel < 0) {
        const char* e = getenv("CUDA_CPU_RACECHECK");
        rt.racecheck_per_kernel = e ? atol(e) : 1;
    }
    return rt.racecheck_per_kernel;
}

// One launch: the grid in order, and under the race check again in reverse and shuffled. The check
// runs for the first N launches of each configuration (kernel, grid, block), so a kernel launched
// with more warps or blocks than in its first launch is checked again at that size.
static void launch_grid(const char* name) {
    char config[256];
    snprintf(config, sizeof(config), "%s<<<(%u,%u,%u),(%u,%u,%u)>>>", name, rt.grid.x, rt.grid.y, rt.grid.z,
             rt.block.x, rt.block.y, rt.block.z);
    rt.launches[name]++;
    long n = rt.config_launches[config]++;
    if (n >= racecheck_limit()) { run_grid(0, 0); return; }
    rt.checked[name]++;
    std::vector<std::vector<char>> before, in_order;
    snapshot(&before);
    run_grid(0, 0);
    snapshot(&in_order);
    const char* names[] = {"in order", "reversed", "shuffled"};
    for (int order = 1; order <= 2; order++) {
        restore(before);
        run_grid(order, (uint64_t)n + 1);
        std::string d = first_difference(in_order);
        if (!d.empty()) {
            char msg[512];
            snprintf(msg, sizeof(msg), "%s: the result depends on the order of threads and blocks (%s vs %s: %s)",
                     name, names[0], names[order], d.c_str());
            fprintf(stderr, "cuda_cpu: race in kernel %s\n", msg);
            rt.races.push_back(msg);
            break;
        }
    }
    restore(in_order);
}

// ---- kernel arguments ----------------------------------------------------------------------------------------
template <typename T> static inline void check_arg(const char* kernel, int i, const T& v) {
    if constexpr (std::is_pointer<T>::value) {
        if (v && !find_buffer((const void*)v))
            die("kernel %s: argument %d (%p) is not a device pointer: pass memory from cudaMalloc", kernel, i + 1,
                (const void*)v);
    }
}

template <typename... P> struct Launch {
    const char* name;
    void (*fn)(P...);
    dim3 grid, block;
    std::tuple<P...> args;

    static void body(void* self) {
        Launch* l = (Launch*)self;
        std::apply(l->fn, l->args);
    }
    template <typename... A> void operator()(A&&... a) {
        args = std::tuple<P...>(std::forward<A>(a)...);
        long nthreads = (long)block.x * block.y * block.z;
        if (nthreads < 1 || nthreads > MAX_THREADS || block.z > 64 || grid.x < 1 || grid.y < 1 || grid.z < 1 ||
            grid.y > 65535 || grid.z > 65535 || grid.x > 2147483647u) {
            rt.last_error = cudaErrorInvalidConfiguration;
            return;
        }
        int i = 0;
        std::apply([&](const auto&... v) { (check_arg(name, i++, v), ...); }, args);
        DeviceAccess open;
        rt.kernel = name;
        rt.grid = grid;
        rt.block = block;
        rt.nthreads = (int)nthreads;
        rt.body = body;
        rt.body_ctx = this;
        launch_grid(name);
        check_pads(name);
        rt.kernel = NULL;
    }
};

static inline void init_fibers(void) {
    if (rt.threads) return;
    rt.page = (size_t)sysconf(_SC_PAGESIZE);
    rt.threads = new Thread[MAX_THREADS];
    size_t per = STACK_SIZE + rt.page;          // a guard page below each stack
    void* m = mmap(NULL, per * MAX_THREADS, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) die("cannot map the thread stacks: %s", strerror(errno));
    rt.stacks = (char*)m;
    for (int i = 0; i < MAX_THREADS; i++) mprotect(rt.stacks + (size_t)i * per, rt.page, PROT_NONE);
    install_fault_handler();
}

// kernel<<<grid, block[, shared bytes[, stream]]>>>(args) becomes launcher("kernel", kernel, grid, block)(args)
template <typename... P>
static inline Launch<P...> launcher(const char* name, void (*fn)(P...), dim3 grid, dim3 block, size_t shared = 0,
                                    cudaStream_t stream = 0) {
    (void)stream;
    if (shared) die("kernel %s: dynamic shared memory is not supported by this runtime", name);
    init_fibers();
    return Launch<P...>{name, fn, grid, block, {}};
}

// ---- the device side of warps and barriers --------------------------------------------------------------
static inline uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width) {
    if (!rt.current) die("a warp operation outside a kernel");
    if (width < 1 || width > 32 || (width & (width - 1))) die("kernel %s: shuffle width %d is not a power of 2 up to 32", rt.kernel, width);
    Thread* t = rt.current;
    t->op = op;
    t->mask = mask;
    t->value = value;
    t->arg = arg;
    t->width = width;
    yield_to_scheduler(AT_WARP);
    return t->result;
}

template <typename T> static inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof(T));
    return b;
}
template <typename T> static inline T from_bits(uint64_t b) {
    T v;
    memcpy(&v, &b, sizeof(T));
    return v;
}

}  // namespace cuda_cpu

#define threadIdx (static_cast<const dim3&>(cuda_cpu::rt.current->idx))
#define blockIdx (static_cast<const dim3&>(cuda_cpu::rt.block_idx))
#define blockDim (static_cast<const dim3&>(cuda_cpu::rt.block))
#define gridDim (static_cast<const dim3&>(cuda_cpu::rt.grid))

static inline void __syncthreads(void) {
    if (!cuda_cpu::rt.current) cuda_cpu::die("__syncthreads() outside a kernel");
    cuda_cpu::yield_to_scheduler(cuda_cpu::AT_SYNCTHREADS);
}
static inline void __syncwarp(unsigned mask = 0xffffffffu) { cuda_cpu::warp_op(cuda_cpu::SYNCWARP, mask, 0, 0, 32); }
static inline void __threadfence(void) {}
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return cuda_cpu::from_bits<T>(cuda_cpu::warp_op(cuda_cpu::SHFL_IDX, mask, cuda_cpu::to_bits(v), src, width));
}
template <typename T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return cuda_cpu::from_bits<T>(cuda_cpu::warp_op(cuda_cpu::SHFL_UP, mask, cuda_cpu::to_bits(v), (int)delta, width));
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return cuda_cpu::from_bits<T>(cuda_cpu::warp_op(cuda_cpu::SHFL_DOWN, mask, cuda_cpu::to_bits(v), (int)delta, width));
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    return cuda_cpu::from_bits<T>(cuda_cpu::warp_op(cuda_cpu::SHFL_XOR, mask, cuda_cpu::to_bits(v), lane_mask, width));
}
static inline unsigned __ballot_sync(unsigned mask, int pred) {
    return (unsigned)cuda_cpu::warp_op(cuda_cpu::BALLOT, mask, pred != 0, 0, 32);
}
static inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
static inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }

// Atomics: a thread is never interrupted between barriers, so plain read-modify-write is atomic.
template <typename T> static inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <typename T> static inline T atomicMax(T* p, T v) { T old = *p; *p = old < v ? v : old; return old; }
template <typename T> static inline T atomicMin(T* p, T v) { T old = *p; *p = v < old ? v : old; return old; }
template <typename T> static inline T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <typename T> static inline T atomicCAS(T* p, T cmp, T v) { T old = *p; if (old == cmp) *p = v; return old; }

// ---- the runtime API ----------------------------------------------------------------------------------------------
static inline cudaError_t cudaGetLastError(void) {
    cudaError_t e = cuda_cpu::rt.last_error;
    cuda_cpu::rt.last_error = cudaSuccess;
    return e;
}
static inline cudaError_t cudaPeekAtLastError(void) { return cuda_cpu::rt.last_error; }
static inline cudaError_t cuda_cpu_fail(cudaError_t e) { return cuda_cpu::rt.last_error = e; }

static inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
static inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cuda_cpu_fail(cudaErrorInvalidDevice); }
static inline cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
// Every launch, copy and collective (nccl.h) has run to completion when its call returns: a stream is
// always idle.
static inline cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
static inline cudaError_t cudaDeviceReset(void) { return cudaSuccess; }
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
    if (d != 0) return cuda_cpu_fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "CUDA-on-CPU test runtime (dev/cuda_cpu)");
    p->totalGlobalMem = (size_t)16 << 30;
    p->sharedMemPerBlock = 48 * 1024;
    p->warpSize = 32;
    p->maxThreadsPerBlock = cuda_cpu::MAX_THREADS;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 1;
    return cudaSuccess;
}

// The device's 16 GiB (totalGlobalMem above), less what the live buffers take.
static inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    if (!free_bytes || !total_bytes) return cuda_cpu_fail(cudaErrorInvalidValue);
    *total_bytes = (size_t)16 << 30;
    size_t used = 0;
    for (const cuda_cpu::Buffer& b : cuda_cpu::rt.buffers) used += b.size;
    *free_bytes = used < *total_bytes ? *total_bytes - used : 0;
    return cudaSuccess;
}

static inline cudaError_t cudaMalloc(void** out, size_t size) {
    using namespace cuda_cpu;
    init_fibers();
    if (!out) return cuda_cpu_fail(cudaErrorInvalidValue);
    size_t body = (size + 15) & ~(size_t)15;
    size_t inner = (body + rt.page - 1) / rt.page * rt.page;
    size_t map_size = inner + 2 * GUARD;
    void* m = mmap(NULL, map_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) { *out = NULL; return cuda_cpu_fail(cudaErrorMemoryAllocation); }
    Buffer b;
    b.map = (char*)m;
    b.map_size = map_size;
    b.inner = b.map + GUARD;
    b.inner_size = inner;
    b.start = b.inner + inner - body;
    b.size = size;
    b.end_pad = b.start + size;
    b.id = rt.next_id++;
    mprotect(b.inner, inner, PROT_READ | PROT_WRITE);
    memset(b.inner, 0xFF, inner);
    if (!rt.device_open) mprotect(b.inner, inner, PROT_NONE);
    auto at = std::upper_bound(rt.buffers.begin(), rt.buffers.end(), b.start,
                               [](const char* a, const Buffer& x) { return a < x.start; });
    rt.buffers.insert(at, b);
    *out = b.start;
    return cudaSuccess;
}

static inline cudaError_t cudaFree(void* p) {
    using namespace cuda_cpu;
    if (!p) return cudaSuccess;
    for (size_t i = 0; i < rt.buffers.size(); i++) {
        if (rt.buffers[i].start != p) continue;
        {
            DeviceAccess open;
            if (!pad_intact(rt.buffers[i]))
                die("device buffer #%ld (%zu bytes) was written outside its bounds", rt.buffers[i].id, rt.buffers[i].size);
        }
        munmap(rt.buffers[i].map, rt.buffers[i].map_size);
        rt.buffers.erase(rt.buffers.begin() + (long)i);
        return cudaSuccess;
    }
    return cuda_cpu_fail(cudaErrorInvalidDevicePointer);
}

// Is [p, p+n) inside one device buffer? 1 yes, 0 not device memory at all, -1 partly (an overrun).
static inline int cuda_cpu_device_range(const void* p, size_t n) {
    cuda_cpu::Buffer* b = cuda_cpu::find_buffer(p);
    if (!b) return 0;
    return (const char*)p + n <= b->start + b->size ? 1 : -1;
}

static inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    int d = cuda_cpu_device_range(dst, n), s = cuda_cpu_device_range(src, n);
    if (d < 0 || s < 0) return cuda_cpu_fail(cudaErrorInvalidValue);        // runs past a buffer's end
    if (kind == cudaMemcpyDefault) kind = (cudaMemcpyKind)(2 * s + d);
    int want_d = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    int want_s = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind > cudaMemcpyDefault) return cuda_cpu_fail(cudaErrorInvalidMemcpyDirection);
    if (d != want_d || s != want_s) return cuda_cpu_fail(cudaErrorInvalidValue);
    if (n) {
        cuda_cpu::DeviceAccess open;
        memmove(dst, src, n);
    }
    return cudaSuccess;
}

static inline cudaError_t cudaMemset(void* dst, int value, size_t n) {
    if (cuda_cpu_device_range(dst, n) != 1) return cuda_cpu_fail(cudaErrorInvalidValue);
    cuda_cpu::DeviceAccess open;
    memset(dst, value, n);
    return cudaSuccess;
}

// ---- for the tests: what ran, what was checked, what raced -----------------------------------------------------
static inline void cuda_cpu_set_racecheck(long launches_per_kernel) { cuda_cpu::rt.racecheck_per_kernel = launches_per_kernel; }
static inline long cuda_cpu_launches(const char* kernel) {
    auto it = cuda_cpu::rt.launches.find(kernel);
    return it == cuda_cpu::rt.launches.end() ? 0 : it->second;
}
static inline long cuda_cpu_racechecked(const char* kernel) {
    auto it = cuda_cpu::rt.checked.find(kernel);
    return it == cuda_cpu::rt.checked.end() ? 0 : it->second;
}
static inline const std::vector<std::string>& cuda_cpu_races(void) { return cuda_cpu::rt.races; }
