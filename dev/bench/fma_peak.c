// fma_peak.c: the machine's fp32 fused-multiply-add peak, the denominator of MFU in `make bench`.
//
// Each thread runs NCHAIN = 12 independent chains a = a * x + y on 16-float vectors (one
// AVX-512 register each). An FMA has a latency of about 4 cycles and a core issues up to 2 per
// cycle, so at least 8 chains must be in flight to keep both units busy; 12 leave margin and
// still fit in the 32 vector registers. The multiplier is slightly below 1 and the addend small,
// so the values converge to y / (1 - x) and never overflow or go denormal.
//
//   gcc -O2 -march=native -fopenmp -o dev/bench/fma_peak dev/bench/fma_peak.c
//   ./dev/bench/fma_peak [threads ...]      # prints "threads N gflops X" per thread count
//
// Written with GCC's vector extension (plain C operators on a 64-byte vector type), so it is one
// AVX-512 FMA per line at -O2 -march=native (check with objdump -d: vfmadd...ps %zmm).
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef float v16 __attribute__((vector_size(64)));
#define NCHAIN 12
#define ITERS 20000000L     // per thread: 12 * 16 * 2 * 2e7 = 7.7 GFLOP, ~35 ms at 220 GFLOP/s

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// One thread's work; returns a sum of the chains so the compiler cannot drop them. The twelve
// chains are twelve named variables (not an array) so that each lives in its own register.
static float chains(long iters, float seed) {
    v16 x, y, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11;
    for (int i = 0; i < 16; i++) {
        x[i] = 0.999999f;
        y[i] = 1e-6f * seed;
        a0[i] = seed + i;
    }
    a1 = a0 + 1; a2 = a0 + 2; a3 = a0 + 3; a4 = a0 + 4; a5 = a0 + 5;
    a6 = a0 + 6; a7 = a0 + 7; a8 = a0 + 8; a9 = a0 + 9; a10 = a0 + 10; a11 = a0 + 11;
    for (long it = 0; it < iters; it++) {
        a0 = a0 * x + y; a1 = a1 * x + y; a2 = a2 * x + y; a3 = a3 * x + y;
        a4 = a4 * x + y; a5 = a5 * x + y; a6 = a6 * x + y; a7 = a7 * x + y;
        a8 = a8 * x + y; a9 = a9 * x + y; a10 = a10 * x + y; a11 = a11 * x + y;
    }
    v16 s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
    float sum = 0.0f;
    for (int i = 0; i < 16; i++) sum += s[i];
    return sum;
}

// GFLOP/s with n threads: the best of 5 runs (the peak is what the hardware can do; noise only
// ever makes a run slower).
static double measure(int n) {
    double best = 0.0;
    for (int rep = 0; rep < 5; rep++) {
        float sink = 0.0f;
        double t0 = now_s();
        #pragma omp parallel num_threads(n) reduction(+ : sink)
        sink += chains(ITERS, 1.0f + omp_get_thread_num());
        double dt = now_s() - t0;
        if (sink == 12345.0f) printf(" ");      // uses the result
        double gflops = (double)n * ITERS * NCHAIN * 16 * 2 / dt / 1e9;
        if (gflops > best) best = gflops;
    }
    return best;
}

int main(int argc, char** argv) {
    if (argc < 2) {
        printf("threads %d gflops %.1f\n", omp_get_max_threads(), measure(omp_get_max_threads()));
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        int n = atoi(argv[i]);
        if (n < 1) { fprintf(stderr, "error: thread count must be a positive integer, got '%s'\n", argv[i]); return 1; }
        printf("threads %d gflops %.1f\n", n, measure(n));
    }
    return 0;
}
