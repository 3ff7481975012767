/*
dev/cuda_cpu/selftest.cu: proves each semantic that the CPU CUDA runtime beside it (cuda_runtime.h, cublas_v2.h)
claims, against values computed independently on the host: indices of 3-D launches, __syncthreads as a real
barrier, __shared__ per block, warp shuffles and ballots by the CUDA programming guide's rules, atomics,
NaN-filled device memory, cudaMemcpy/cudaFree and launch configuration errors, the race check, the fatal errors
(each in a forked child: out-of-bounds accesses, host dereferences, host pointers as kernel arguments, a divergent
__syncthreads, an exited lane, a deadlock, a gemm operand past its buffer) and cublasSgemm (transposes, status
codes, beta == 0, TF32), the bf16 conversion (ties to even, overflow to inf, NaN, all 65536 values back and
forth), cublasGemmEx against cublasSgemm on bf16-representable inputs (and its status codes), and the warp matrix
functions of mma.h (every layout of A and B against the host in double; a misaligned pointer, lanes naming
different memory and half a warp at a store, each fatal), and NCCL across forked processes (nccl.h: the three
collectives, in place and not, over several pieces, summed in rank order; the non-blocking protocol; ranks that
call different collectives; a rank that dies; a host buffer). Its launches are CUDA syntax, so it exercises
rewrite.sh too. Build and run:
  mkdir -p dev/cuda_cpu/gen && dev/cuda_cpu/rewrite.sh dev/cuda_cpu/selftest.cu dev/cuda_cpu/gen/selftest.cu &&
  g++ -O2 -std=c++17 -Wall -Wextra -Wno-unused-function -I dev/cuda_cpu -x c++ -o dev/cuda_cpu/selftest \
      dev/cuda_cpu/gen/selftest.cu -lm && dev/cuda_cpu/selftest
Each check prints "  ok   ..." or "  FAIL ..."; the last line is "N passed, N failed"; exit 1 if any failed.
*/
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <nccl.h>
#include <cfloat>
#include <sys/wait.h>

static const unsigned FULL = 0xFFFFFFFFu;

// ---- the test runner -----------------------------------------------------------------------------
static int passed, failed;
__attribute__((format(printf, 2, 3))) static void check(int ok, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs(ok ? "  ok   " : "  FAIL ", stdout);
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
    (ok ? passed : failed)++;
}

template <typename T> static T* dev_alloc(size_t n) {
    void* p = NULL;
    if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess) cuda_cpu::die("selftest: cudaMalloc failed");
    return (T*)p;
}
template <typename T> static T* upload(const std::vector<T>& h) {
    T* d = dev_alloc<T>(h.size());
    return cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), d;
}
template <typename T> static std::vector<T> download(const T* d, size_t n) {
    std::vector<T> h(n);
    return cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), h;
}

// How many of i = 0..n-1 are wrong(i).
template <typename F> static int count_wrong(int n, F wrong) {
    int bad = 0;
    for (int i = 0; i < n; i++) bad += wrong(i) ? 1 : 0;
    return bad;
}

// Runs body in a forked child, its stderr into *err: the child's exit status (-1: killed by a signal).
static int in_child(void (*body)(void), std::string* err) {
    fflush(stdout);
    fflush(stderr);
    int fd[2];
    if (pipe(fd) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        body();
        _exit(0);
    }
    close(fd[1]);
    char buf[4096];
    err->clear();
    for (ssize_t n; (n = read(fd[0], buf, sizeof(buf))) > 0;) err->append(buf, (size_t)n);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
static int chomp(const std::string& s) { return (int)s.find_last_not_of('\n') + 1; }   // length without '\n's

// A fatal error: the child exits with status 1 after one line "cuda_cpu: ..." holding every word.
static void check_fatal(const char* what, void (*body)(void), std::vector<const char*> words) {
    std::string err;
    int status = in_child(body, &err);
    int ok = status == 1 && err.rfind("cuda_cpu: ", 0) == 0 && err.find('\n') == err.size() - 1;
    for (const char* w : words) ok &= err.find(w) != std::string::npos;
    check(ok, "%s: exit %d, \"%.*s\"", what, status, chomp(err), err.c_str());
}

// Runs fn with stderr captured (the race check reports there): what it printed.
template <typename F> static std::string capture_stderr(F fn) {
    fflush(stderr);
    FILE* tmp = tmpfile();
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    std::string s;
    for (int c; (c = fgetc(tmp)) != EOF;) s += (char)c;
    return fclose(tmp), s;
}

// ---- kernels ---------------------------------------------------------------------------------------
__global__ void coords(int* out) {             // each thread: its 4 index triples, at its linear id
    int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int* o = out + 4 * (b * blockDim.x * blockDim.y * blockDim.z + t);
    o[0] = threadIdx.x + 10 * threadIdx.y + 100 * threadIdx.z;
    o[1] = blockIdx.x + 10 * blockIdx.y + 100 * blockIdx.z;
    o[2] = blockDim.x + 10 * blockDim.y + 100 * blockDim.z;
    o[3] = gridDim.x + 10 * gridDim.y + 100 * gridDim.z;
}
__global__ void neighbours(int* out) {         // thread t reads what thread t+1 wrote before the barrier
    __shared__ int s[256];
    int t = threadIdx.x, n = blockDim.x;
    s[t] = 3 * t + 1;
    __syncthreads();
    out[t] = s[(t + 1) % n];
}
__global__ void block_sum(const int* in, int* out) {    // a tree reduction: one barrier per level
    __shared__ int s[256];
    int t = threadIdx.x;
    s[t] = in[blockIdx.x * blockDim.x + t];
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
__global__ void own_block(int* out) {
    __shared__ int b;
    if (threadIdx.x == 0) b = blockIdx.x;
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = b;
}

enum { XOR, DOWN, UP, IDX };
struct Shfl { int op, arg, width; };
static const Shfl shfls[] = {{XOR, 1, 32}, {XOR, 16, 32}, {XOR, 4, 8}, {XOR, 9, 8}, {DOWN, 3, 32}, {DOWN, 3, 8},
                             {UP, 5, 32},  {UP, 5, 8},    {IDX, 7, 32}, {IDX, 37, 32}, {IDX, 13, 8}, {IDX, 2, 8}};
static const int NSHFL = sizeof(shfls) / sizeof(shfls[0]);
static const char* shfl_names[] = {"__shfl_xor_sync", "__shfl_down_sync", "__shfl_up_sync", "__shfl_sync"};
template <typename T> __device__ T lane_value(int lane) { return (T)(1000 + 7 * lane) + (T)1 / (T)(lane + 3); }

template <typename T> __global__ void shuffles(T* out) {      // out[k][lane]: shfls[k] of lane_value
    int lane = threadIdx.x;
    T v = lane_value<T>(lane);
    for (int k = 0; k < NSHFL; k++) {
        const Shfl& s = shfls[k];
        out[k * 32 + lane] = s.op == XOR    ? __shfl_xor_sync(FULL, v, s.arg, s.width)
                             : s.op == DOWN ? __shfl_down_sync(FULL, v, (unsigned)s.arg, s.width)
                             : s.op == UP   ? __shfl_up_sync(FULL, v, (unsigned)s.arg, s.width)
                                            : __shfl_sync(FULL, v, s.arg, s.width);
    }
}
// The lane whose value a shuffle returns, by the CUDA programming guide: lanes form segments of width
// lanes; a source in a later segment (xor) or outside the own one (up, down) returns the lane's own value;
// __shfl_sync's source lane is taken modulo width, within the segment.
static int shfl_source(const Shfl& s, int lane) {
    int w = s.width, first = lane / w * w;
    switch (s.op) {
    case XOR: return (lane ^ s.arg) < first + w ? lane ^ s.arg : lane;
    case DOWN: return lane - first + s.arg < w ? lane + s.arg : lane;
    case UP: return lane - first >= s.arg ? lane - s.arg : lane;
    default: return first + s.arg % w;
    }
}

__global__ void ballots(unsigned* out) {       // a 2-D block: lane = (x + y * blockDim.x) % 32
    int t = threadIdx.x + blockDim.x * threadIdx.y;
    out[t] = __ballot_sync(FULL, t % 3 == 0);
}
__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(FULL, v, o);
    return v;
}
__global__ void warp_sums(const float* in, float* out) { out[threadIdx.x] = warp_sum(in[threadIdx.x]); }
__global__ void warp_halves(int* out) {        // lanes 16..31 shuffle among themselves, then the whole warp
    int lane = threadIdx.x, v = lane;
    if (lane >= 16) v += __shfl_xor_sync(0xFFFF0000u, v, 1);
    out[lane] = v + __shfl_xor_sync(FULL, v, 16);
}

__global__ void count(int* c) { atomicAdd(c, 1); }
__global__ void to_bf16(__nv_bfloat16* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16(in[i]);
}
template <typename T> __global__ void fill(T* x, int n, T v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}
__global__ void racy_shift(int* x) { x[threadIdx.x] = x[threadIdx.x + 1]; }   // no barrier: a race
__global__ void racy_shared(int* out) {        // thread 0 reads what thread 1 writes, no barrier between
    __shared__ int s;
    if (threadIdx.x == 1) s = 42;
    if (threadIdx.x == 0) out[0] = s;
}

__global__ void write_at(float* x, long i) { x[i] = 1.0f; }
__global__ void read_at(const float* x, long i, float* out) { out[0] = x[i]; }
__global__ void exit_early(int* x) {           // threads 0..15 exit while 16..31 wait at a barrier
    if (threadIdx.x >= 16) __syncthreads();
    x[threadIdx.x] = 1;
}
__global__ void shfl_exited(int* x) {          // lane 31 exits, lanes 0..30 shuffle with a full mask
    if (threadIdx.x < 31) x[threadIdx.x] = __shfl_xor_sync(FULL, (int)threadIdx.x, 1);
}
// Warp w of the block: D_w = A_w B_w + C_w over K = 32 (two mma_sync), A_w and B_w 16 x 32 / 32 x 16 in the
// layouts LA, LB (leading dimension 40: row-major A is a[w][16][40], col-major A is a[w][32][40] read
// transposed; likewise B), C loaded row-major, each fragment element doubled (elementwise: fine in any
// mapping), D stored column-major. The operands are staged in shared memory (32-byte aligned, as wmma
// requires; this runtime's cudaMalloc aligns only to 16 bytes).
static const int WMMA_LD = 40, WMMA_W = 16 * 40 * 2, WMMA_WARPS = 2;   // W: the elements of one warp's A (or B)
template <typename LA, typename LB>
__global__ void wmma_product(float* d, const __nv_bfloat16* a, const __nv_bfloat16* b, const float* c) {
    using namespace nvcuda;
    __shared__ __align__(32) __nv_bfloat16 as[WMMA_WARPS * WMMA_W], bs[WMMA_WARPS * WMMA_W];
    __shared__ __align__(32) float cs[WMMA_WARPS * 256];
    for (int i = threadIdx.x; i < WMMA_WARPS * WMMA_W; i += blockDim.x) as[i] = a[i], bs[i] = b[i];
    for (int i = threadIdx.x; i < WMMA_WARPS * 256; i += blockDim.x) cs[i] = c[i];
    __syncthreads();
    int w = threadIdx.x / 32;
    bool a_row = std::is_same<LA, wmma::row_major>::value, b_row = std::is_same<LB, wmma::row_major>::value;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, cs + w * 256, 16, wmma::mem_row_major);
    for (int i = 0; i < acc.num_elements; i++) acc.x[i] *= 2;
    for (int k0 = 0; k0 < 32; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, LA> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, LB> fb;
        wmma::load_matrix_sync(fa, as + w * WMMA_W + (a_row ? k0 : k0 * WMMA_LD), WMMA_LD);
        wmma::load_matrix_sync(fb, bs + w * WMMA_W + (b_row ? k0 * WMMA_LD : k0), WMMA_LD);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    __syncwarp();
    wmma::store_matrix_sync(cs + w * 256, acc, 16, wmma::mem_col_major);
    __syncwarp();
    for (int i = threadIdx.x % 32; i < 256; i += 32) d[w * 256 + i] = cs[w * 256 + i];
}
// TF32, m16n16k8: d = A B with A 16 x 8 row-major and B 8 x 16 column-major (leading dimension 8), each
// fragment element rounded with __float_to_tf32 after the load, as CUDA asks; staged in shared memory
__global__ void wmma_tf32_product(float* d, const float* a, const float* b) {
    using namespace nvcuda;
    __shared__ __align__(32) float as[128], bs[128], ds[256];
    for (int i = threadIdx.x; i < 128; i += 32) as[i] = a[i], bs[i] = b[i];
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    wmma::load_matrix_sync(fa, as, 8);
    wmma::load_matrix_sync(fb, bs, 8);
    for (int i = 0; i < fa.num_elements; i++) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
    for (int i = 0; i < fb.num_elements; i++) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
    wmma::fill_fragment(acc, 0.0f);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(ds, acc, 16, wmma::mem_row_major);
    __syncwarp();
    for (int i = threadIdx.x; i < 256; i += 32) d[i] = ds[i];
}

// the three misuses: a pointer 16 bytes past a 32-byte boundary, lane 5 naming another row, lanes 16..31
// skipping the store
__global__ void wmma_misuse(int kind) {
    __shared__ __align__(32) float s[512];
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc;
    nvcuda::wmma::fill_fragment(acc, 1.0f);
    if (kind == 2 && threadIdx.x >= 16) return;
    float* p = kind == 0 ? s + 4 : kind == 1 && threadIdx.x == 5 ? s + 16 : s;
    nvcuda::wmma::store_matrix_sync(p, acc, 16, nvcuda::wmma::mem_row_major);
}

// The host's D = A B + 2 C of wmma_product's warp w, element (r, col), in double.
// *magnitude: the sum of the terms' absolute values.
static double wmma_want(const std::vector<__nv_bfloat16>& a, const std::vector<__nv_bfloat16>& b,
                        const std::vector<float>& c, bool a_row, bool b_row, int w, int r, int col, double* magnitude) {
    const int LD = WMMA_LD, W = WMMA_W;
    double s = 2.0 * c[w * 256 + r * 16 + col], mag = fabs(s);
    for (int k = 0; k < 32; k++) {
        double t = (double)__bfloat162float(a[w * W + (a_row ? r * LD + k : k * LD + r)]) *
                   __bfloat162float(b[w * W + (b_row ? k * LD + col : col * LD + k)]);
        s += t;
        mag += fabs(t);
    }
    return *magnitude = mag, s;
}

template <typename LA, typename LB> static void check_wmma_product(void) {
    using namespace nvcuda;
    bool a_row = std::is_same<LA, wmma::row_major>::value, b_row = std::is_same<LB, wmma::row_major>::value;
    const int WARPS = WMMA_WARPS, W = WMMA_W;
    std::vector<__nv_bfloat16> a(WARPS * W), b(WARPS * W);
    std::vector<float> c(WARPS * 256);
    for (int i = 0; i < WARPS * W; i++) {
        a[i] = __float2bfloat16(sinf(0.37f * i) * 3);
        b[i] = __float2bfloat16(cosf(0.11f * i + 1) * 2);
    }
    for (int i = 0; i < WARPS * 256; i++) c[i] = (float)((i * 37) % 19 - 9) / 8;
    float* dd = dev_alloc<float>(WARPS * 256);
    __nv_bfloat16 *da = upload(a), *db = upload(b);
    float* dc = upload(c);
    wmma_product<LA, LB><<<1, WARPS * 32>>>(dd, da, db, dc);
    std::vector<float> got = download(dd, WARPS * 256);
    // float32 sums of 33 exact terms: off by at most 33 u |terms| (u = 2^-24); the worst as a fraction of that
    double worst = 0;
    for (int w = 0; w < WARPS; w++)
        for (int r = 0; r < 16; r++)
            for (int col = 0; col < 16; col++) {
                double mag, want = wmma_want(a, b, c, a_row, b_row, w, r, col, &mag);
                worst = fmax(worst, fabs(got[w * 256 + col * 16 + r] - want) / (33 * ldexp(1, -24) * mag));
            }
    check(worst <= 1, "wmma m16n16k16 bf16, A %s, B %s, K = 32 in two mma_sync, C loaded row-major and doubled "
          "elementwise, D stored column-major, 2 warps: D = A B + 2 C (worst error %.2f of the float32 bound)",
          a_row ? "row-major" : "col-major", b_row ? "row-major" : "col-major", worst);
    cudaFree(dd), cudaFree(da), cudaFree(db), cudaFree(dc);
}

__global__ void deadlock(int* x) {             // half the warp at a barrier, half at a full-warp shuffle
    if (threadIdx.x < 16) __syncthreads();
    else x[threadIdx.x] = __shfl_xor_sync(FULL, (int)threadIdx.x, 1);
}

// ---- NCCL across processes (nccl.h) ----------------------------------------------------------------
// body(rank, n, id) in n forked processes, the ranks of one communicator; their exit statuses into st
// (body's own codes name what went wrong; -1: killed by a signal)
static void nccl_ranks(int n, void (*body)(int, int, ncclUniqueId), int* st) {
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    fflush(stdout);
    fflush(stderr);
    pid_t pid[4];
    for (int r = 0; r < n; r++)
        if ((pid[r] = fork()) == 0) {
            body(r, n, id);
            _exit(0);
        }
    for (int r = 0; r < n; r++) {
        int status = 0;
        waitpid(pid[r], &status, 0);
        st[r] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
}

// The three collectives on 3 ranks, blocking: rank r's value at i, and what each collective must give
static float nccl_val(int r, size_t i) { return (float)((r + 1) * 0.25 + (double)(i % 1000) * 0.125); }
static void nccl_collectives(int r, int n, ncclUniqueId id) {
    ncclComm_t c = NULL;
    if (ncclCommInitRank(&c, n, id, r) != ncclSuccess) _exit(10);
    const size_t N = 300000;                  // 1.2 MB of floats per block: the calls move several pieces
    std::vector<float> x(N * n);
    for (size_t i = 0; i < x.size(); i++) x[i] = nccl_val(r, i);
    float *d = upload(x), *o = dev_alloc<float>(N * n);
    auto sum = [&](size_t i) { float s = 0; for (int k = 0; k < n; k++) s += nccl_val(k, i); return s; };
    if (ncclAllReduce(d, o, N * n, ncclFloat, ncclSum, c, 0) != ncclSuccess) _exit(11);
    std::vector<float> got = download(o, N * n);
    for (size_t i = 0; i < got.size(); i++) if (got[i] != sum(i)) _exit(12);
    if (ncclAllReduce(d, d, N * n, ncclFloat, ncclAvg, c, 0) != ncclSuccess) _exit(13);     // in place
    got = download(d, N * n);
    for (size_t i = 0; i < got.size(); i++) if (got[i] != sum(i) / n) _exit(14);
    cudaMemcpy(d, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice);
    if (ncclReduceScatter(d, d + r * N, N, ncclFloat, ncclSum, c, 0) != ncclSuccess) _exit(15);   // in place
    got = download(d + r * N, N);
    for (size_t i = 0; i < N; i++) if (got[i] != sum(r * N + i)) _exit(16);
    std::vector<double> y(N * n, -1.0);
    for (size_t i = 0; i < N; i++) y[r * N + i] = r + (double)i / N;
    double* dy = upload(y);
    if (ncclAllGather(dy + r * N, dy, N, ncclDouble, c, 0) != ncclSuccess) _exit(17);          // in place
    std::vector<double> all = download(dy, N * n);
    for (size_t i = 0; i < all.size(); i++) if (all[i] != (double)(i / N) + (double)(i % N) / N) _exit(18);
    // rank order: 1e8 + 1 - 1e8 is 0 in float from rank 0 on (1e8 + 1 rounds to 1e8), 1 in any order that
    // adds -1e8 first
    float v = r == 0 ? 1e8f : r == 1 ? 1.0f : -1e8f;
    float* dv = upload(std::vector<float>{v});
    if (ncclAllReduce(dv, dv, 1, ncclFloat, ncclSum, c, 0) != ncclSuccess || download(dv, 1)[0] != 0.0f) _exit(19);
    std::vector<int> m = {r * 7 % 5, -r};
    int* dm = upload(m);
    if (ncclAllReduce(dm, dm, 2, ncclInt32, ncclMax, c, 0) != ncclSuccess) _exit(20);
    std::vector<int> mx = download(dm, 2);
    if (mx[0] != 4 || mx[1] != 0) _exit(21);
    ncclCommDestroy(c);
}

int main(void) {
    cuda_cpu_set_racecheck(1);        // every kernel's first launch is race-checked, whatever the environment

    printf("threads, barriers, shared memory:\n");
    {
        const int GX = 2, GY = 3, GZ = 2, BX = 4, BY = 2, BZ = 3, N = GX * GY * GZ * BX * BY * BZ;
        int* d = dev_alloc<int>(4 * N);
        coords<<<dim3(GX, GY, GZ), dim3(BX, BY, BZ)>>>(d);
        std::vector<int> h = download(d, 4 * N);
        int bad = 0, g = 0;
        for (int bz = 0; bz < GZ; bz++) for (int by = 0; by < GY; by++) for (int bx = 0; bx < GX; bx++)
            for (int tz = 0; tz < BZ; tz++) for (int ty = 0; ty < BY; ty++) for (int tx = 0; tx < BX; tx++, g++)
                bad += h[4 * g] != tx + 10 * ty + 100 * tz || h[4 * g + 1] != bx + 10 * by + 100 * bz ||
                       h[4 * g + 2] != BX + 10 * BY + 100 * BZ || h[4 * g + 3] != GX + 10 * GY + 100 * GZ;
        check(bad == 0, "grid (2,3,2) of blocks (4,2,3): threadIdx, blockIdx, blockDim, gridDim right in all %d "
              "threads (%d wrong)", N, bad);
        neighbours<<<1, 256, 0>>>(d);
        h = download(d, 256);
        bad = count_wrong(256, [&](int t) { return h[t] != 3 * ((t + 1) % 256) + 1; });
        check(bad == 0, "256 threads write s[t], __syncthreads, read s[t+1]: each sees its neighbour's (%d wrong)",
              bad);
        std::vector<int> in(4 * 256);
        long sums[4] = {0, 0, 0, 0};
        for (int i = 0; i < 4 * 256; i++) sums[i / 256] += in[i] = (i * 7919) % 1000 - 300;
        int* din = upload(in);
        block_sum<<<4, 256>>>(din, d);
        h = download(d, 4);
        check(h[0] == sums[0] && h[1] == sums[1] && h[2] == sums[2] && h[3] == sums[3],
              "tree reduction in shared memory, 4 blocks: %d %d %d %d, host %ld %ld %ld %ld", h[0], h[1], h[2], h[3],
              sums[0], sums[1], sums[2], sums[3]);
        own_block<<<8, 64>>>(d);
        h = download(d, 8 * 64);
        bad = count_wrong(8 * 64, [&](int i) { return h[i] != i / 64; });
        check(bad == 0, "a __shared__ variable is per block: 8 blocks read back their own blockIdx (%d wrong)", bad);
        cudaFree(d), cudaFree(din);
    }

    printf("warps:\n");
    {
        int* di = dev_alloc<int>(NSHFL * 32);
        double* dd = dev_alloc<double>(NSHFL * 32);
        shuffles<int><<<1, 32>>>(di);
        shuffles<double><<<1, 32>>>(dd);
        std::vector<int> hi = download(di, NSHFL * 32);
        std::vector<double> hd = download(dd, NSHFL * 32);
        for (int k = 0; k < NSHFL; k++) {
            int bad = count_wrong(32, [&](int l) {
                int src = shfl_source(shfls[k], l);
                return hi[k * 32 + l] != lane_value<int>(src) || hd[k * 32 + l] != lane_value<double>(src);
            });
            check(bad == 0, "%s(v, %d, width %d), int and double: each lane gets the guide's source lane (%d wrong)",
                  shfl_names[shfls[k].op], shfls[k].arg, shfls[k].width, bad);
        }
        unsigned* db = dev_alloc<unsigned>(64);
        ballots<<<1, dim3(16, 4)>>>(db);
        std::vector<unsigned> hb = download(db, 64);
        unsigned want[2] = {0, 0};
        for (int t = 0; t < 64; t++) want[t / 32] |= (unsigned)(t % 3 == 0) << (t % 32);
        int bad = count_wrong(64, [&](int t) { return hb[t] != want[t / 32]; });
        check(bad == 0, "__ballot_sync(t %% 3 == 0), block (16,4): warps by t = x + 16 y, lanes get 0x%08x, 0x%08x "
              "(%d wrong)", want[0], want[1], bad);
        std::vector<float> in(64);
        float ws[2] = {0, 0};
        for (int t = 0; t < 64; t++) ws[t / 32] += in[t] = (float)((t * 37) % 23) * 0.5f - 3.0f;
        float* din = upload(in);
        float* dout = dev_alloc<float>(64);
        warp_sums<<<1, 64>>>(din, dout);
        std::vector<float> hs = download(dout, 64);
        bad = count_wrong(64, [&](int t) { return hs[t] != ws[t / 32]; });
        check(bad == 0, "warp_sum by __shfl_xor_sync, 64 threads: each warp's lanes hold its sum, %g and %g (%d wrong)",
              ws[0], ws[1], bad);
        std::string err;
        int status = in_child([] {
            int* d = dev_alloc<int>(32);
            warp_halves<<<1, 32>>>(d);
            std::vector<int> h = download(d, 32);
            auto v = [](int l) { return l >= 16 ? l + (l ^ 1) : l; };           // after the first shuffle
            if (count_wrong(32, [&](int l) { return h[l] != v(l) + v(l ^ 16); })) _exit(2);
        }, &err);
        check(status == 0, "lanes 16..31 shuffle with mask 0xffff0000 while lanes 0..15 wait at a full-warp shuffle: "
              "both complete with the right values (exit %d %.*s)", status, chomp(err), err.c_str());
        cudaFree(di), cudaFree(dd), cudaFree(db), cudaFree(din), cudaFree(dout);
    }

    printf("atomics and device memory:\n");
    {
        int* c = dev_alloc<int>(1);
        cudaMemset(c, 0, sizeof(int));
        count<<<40, 250>>>(c);
        check(download(c, 1)[0] == 10000, "atomicAdd(c, 1) from 40 x 250 threads: %d", download(c, 1)[0]);
        float* f = dev_alloc<float>(1000);
        double* d = dev_alloc<double>(1000);
        int* i = dev_alloc<int>(1000);
        std::vector<float> hf = download(f, 1000);
        std::vector<double> hd = download(d, 1000);
        std::vector<int> hi = download(i, 1000);
        int bad = count_wrong(1000, [&](int k) { return !std::isnan(hf[k]) || !std::isnan(hd[k]) || hi[k] != -1; });
        check(bad == 0, "fresh cudaMalloc buffers: 1000 floats and 1000 doubles NaN, 1000 ints -1 (%d wrong)", bad);
        cudaMemset(f, 0, 1000 * sizeof(float));
        fill<float><<<4, 256>>>(f, 500, 2.5f);
        hf = download(f, 1000);
        bad = count_wrong(1000, [&](int k) { return hf[k] != (k < 500 ? 2.5f : 0.0f); });
        check(bad == 0, "cudaMemset 0, then fill<float> of the first 500: 2.5 there, 0 after (%d wrong)", bad);
        float* f99 = dev_alloc<float>(99);
        read_at<<<1, 1>>>(f99 + 50, 49, f);
        read_at<<<1, 1>>>(f99 + 50, -51, f + 1);
        hf = download(f, 2);
        check(std::isnan(hf[0]) && std::isnan(hf[1]), "a kernel reading x[99] of 99 floats (the padding), x[-1]: NaN");

        std::vector<float> host(2000);
        cudaGetLastError();
        cudaError_t e1 = cudaMemcpy(host.data(), hf.data(), 4, cudaMemcpyHostToDevice);
        cudaError_t e2 = cudaMemcpy(host.data(), f, 1001 * sizeof(float), cudaMemcpyDeviceToHost);
        cudaError_t e3 = cudaMemcpy(f + 1, host.data(), 1000 * sizeof(float), cudaMemcpyHostToDevice);
        cudaError_t e4 = cudaFree(host.data()), e5 = cudaFree(f + 1);
        check(e1 == cudaErrorInvalidValue, "cudaMemcpy HostToDevice to a host pointer: %s", cudaGetErrorName(e1));
        check(e2 == cudaErrorInvalidValue && e3 == cudaErrorInvalidValue, "cudaMemcpy running 4 bytes past a "
              "buffer's end (from, to): %s, %s", cudaGetErrorName(e2), cudaGetErrorName(e3));
        check(e4 != cudaSuccess && e5 != cudaSuccess, "cudaFree of a host pointer, of a pointer inside a buffer: "
              "%s, %s", cudaGetErrorName(e4), cudaGetErrorName(e5));
        check(!strcmp(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument"),
              "cudaGetErrorString(cudaErrorInvalidValue) is \"%s\"", cudaGetErrorString(cudaErrorInvalidValue));
        cudaFree(c), cudaFree(f), cudaFree(d), cudaFree(i), cudaFree(f99);
    }

    printf("launch configuration errors:\n");
    {
        int* x = dev_alloc<int>(2048);
        cudaMemset(x, 0, 2048 * sizeof(int));
        cudaGetLastError();
        const char* names[3] = {"a block of 1025 threads", "a grid of 0 blocks", "a grid of (1, 65536) blocks"};
        for (int c = 0; c < 3; c++) {
            long before = cuda_cpu_launches("fill<int>");
            if (c == 0) fill<int><<<1, 1025>>>(x, 2048, 7);
            if (c == 1) fill<int><<<dim3(0), 32>>>(x, 2048, 7);
            if (c == 2) fill<int><<<dim3(1, 65536), 32>>>(x, 2048, 7);
            cudaError_t e = cudaGetLastError(), again = cudaGetLastError();
            std::vector<int> h = download(x, 2048);
            int ran = count_wrong(2048, [&](int i) { return h[i] != 0; });
            check(e == cudaErrorInvalidConfiguration && again == cudaSuccess && ran == 0 &&
                  cuda_cpu_launches("fill<int>") == before, "%s: not run (%d written), cudaGetLastError %s, then %s",
                  names[c], ran, cudaGetErrorName(e), cudaGetErrorName(again));
        }
        cudaFree(x);
    }

    printf("race check:\n");
    {
        std::vector<int> in(65);
        for (int i = 0; i < 65; i++) in[i] = i * i;
        int *x = upload(in), *copy = upload(in), *out = dev_alloc<int>(1);
        std::string err = capture_stderr([&] {
            racy_shift<<<1, 64>>>(x);
            racy_shared<<<1, 2>>>(out);
        });
        const std::vector<std::string>& races = cuda_cpu_races();
        check(races.size() == 2 && races[0].rfind("racy_shift:", 0) == 0 && races[1].rfind("racy_shared:", 0) == 0,
              "racy_shift (x[i] = x[i+1]) and racy_shared (a shared write unsynced with its read) are named in "
              "cuda_cpu_races(): %zu races", races.size());
        check(err.find("race in kernel racy_shift") != std::string::npos &&
              err.find("race in kernel racy_shared") != std::string::npos, "and both are reported on stderr");
        check(cuda_cpu_racechecked("racy_shift") == 1 && cuda_cpu_launches("racy_shift") == 1 &&
              cuda_cpu_racechecked("neighbours") == 1, "cuda_cpu_racechecked counts checked launches: racy_shift "
              "%ld, neighbours %ld", cuda_cpu_racechecked("racy_shift"), cuda_cpu_racechecked("neighbours"));
        cuda_cpu_set_racecheck(0);
        racy_shift<<<1, 64>>>(copy);
        cuda_cpu_set_racecheck(1);
        std::vector<int> checked = download(x, 65), plain = download(copy, 65);
        int bad = count_wrong(65, [&](int i) { return checked[i] != plain[i] || checked[i] != in[min(i + 1, 64)]; });
        check(bad == 0 && cuda_cpu_launches("racy_shift") == 2 && cuda_cpu_racechecked("racy_shift") == 1,
              "memory after a race-checked launch is the in-order result, as with racecheck 0 (a launch not "
              "counted as checked) and on the host (%d wrong)", bad);
        check(download(out, 1)[0] == 0, "racy_shared keeps the in-order result: thread 0 read s before thread 1 "
              "wrote it (%d)", download(out, 1)[0]);
        cudaFree(x), cudaFree(copy), cudaFree(out);
    }

    printf("fatal errors, each in a child process:\n");
    check_fatal("write 1 float past the end of 100", [] { write_at<<<1, 1>>>(dev_alloc<float>(100), 100); },
                {"kernel write_at", "block (0,0,0) thread (0,0,0)", "past the end"});
    check_fatal("write 1 float past the end of 99 (the 16-byte padding)",
                [] { write_at<<<1, 1>>>(dev_alloc<float>(99), 99); }, {"write_at", "outside device buffer"});
    check_fatal("write 5000 floats past the end of 100", [] { write_at<<<1, 1>>>(dev_alloc<float>(100), 5100); },
                {"kernel write_at", "past the end"});
    check_fatal("write x[-1]", [] { write_at<<<1, 1>>>(dev_alloc<float>(100), -1); },
                {"write_at", "outside device buffer"});
    check_fatal("read x[-1000]", [] { read_at<<<1, 1>>>(dev_alloc<float>(100), -1000, dev_alloc<float>(1)); },
                {"kernel read_at", "before the start"});
    check_fatal("host code reads a device buffer", [] {
        volatile float v = dev_alloc<float>(4)[1];
        (void)v;
    }, {"host code", "host dereferenced a device pointer"});
    check_fatal("a host pointer as a kernel argument", [] {
        static float host[4];
        write_at<<<1, 1>>>(host, 0);
    }, {"kernel write_at", "argument 1", "not a device pointer"});
    check_fatal("16 threads exit, 16 wait at __syncthreads", [] { exit_early<<<1, 32>>>(dev_alloc<int>(32)); },
                {"exit_early", "__syncthreads", "exited"});
    check_fatal("a shuffle whose mask names an exited lane", [] { shfl_exited<<<1, 32>>>(dev_alloc<int>(32)); },
                {"shfl_exited", "lane 31", "exited"});
    check_fatal("half a warp at __syncthreads, half at a shuffle", [] { deadlock<<<1, 32>>>(dev_alloc<int>(32)); },
                {"kernel deadlock", "deadlock"});
    check_fatal("wmma store_matrix_sync to a pointer not 32-byte aligned", [] { wmma_misuse<<<1, 32>>>(0); },
                {"wmma_misuse", "32-byte aligned"});
    check_fatal("wmma store_matrix_sync where lane 5 names other memory", [] { wmma_misuse<<<1, 32>>>(1); },
                {"wmma_misuse", "different memory"});
    check_fatal("wmma store_matrix_sync by half a warp", [] { wmma_misuse<<<1, 32>>>(2); }, {"wmma_misuse", "exited"});
    check_fatal("a cublasSgemm operand past its buffer", [] {
        cublasHandle_t h;
        cublasCreate(&h);
        float one = 1, zero = 0, *a = dev_alloc<float>(8), *c = dev_alloc<float>(9);
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 3, 3, &one, a, 3, c, 3, &zero, c, 3);
    }, {"cublasSgemm", "A", "past the end"});
    check_fatal("a cublasGemmEx bf16 operand past its buffer", [] {
        cublasHandle_t h;
        cublasCreate(&h);
        float one = 1, zero = 0, *c = dev_alloc<float>(9);
        __nv_bfloat16 *a = dev_alloc<__nv_bfloat16>(9), *b = dev_alloc<__nv_bfloat16>(8);
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 3, 3, &one, a, CUDA_R_16BF, 3, b, CUDA_R_16BF, 3, &zero, c,
                     CUDA_R_32F, 3, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }, {"cublasGemmEx", "B", "18 bytes", "past the end"});

    printf("cuBLAS:\n");
    {
        cublasHandle_t h;
        cublasCreate(&h);
        const int m = 5, n = 7, k = 3;
        const float alpha = 0.5f, beta = 2.0f;
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
                int lda = ar + 2, ldb = br + 1, ldc = m + 3;
                std::vector<float> A(lda * ac), B(ldb * bc), C(ldc * n);
                for (size_t i = 0; i < A.size(); i++) A[i] = (float)((i * 37) % 17) / 8 - 1;
                for (size_t i = 0; i < B.size(); i++) B[i] = (float)((i * 53) % 19) / 9 - 1;
                for (size_t i = 0; i < C.size(); i++) C[i] = (float)((i * 29) % 13) / 6 - 1;
                float *dA = upload(A), *dB = upload(B), *dC = upload(C);
                cublasStatus_t s = cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n,
                                               k, &alpha, dA, lda, dB, ldb, &beta, dC, ldc);
                for (int i = 0; i < m; i++)              // C = alpha op(A) op(B) + beta C, column-major
                    for (int j = 0; j < n; j++) {
                        double sum = 0;
                        for (int p = 0; p < k; p++)
                            sum += (double)(ta ? A[i * lda + p] : A[p * lda + i]) *
                                   (tb ? B[p * ldb + j] : B[j * ldb + p]);
                        C[j * ldc + i] = (float)(alpha * sum + beta * C[j * ldc + i]);
                    }
                std::vector<float> got = download(dC, C.size());
                double err = 0;
                for (size_t i = 0; i < C.size(); i++) err = std::max(err, (double)fabsf(got[i] - C[i]));
                check(s == CUBLAS_STATUS_SUCCESS && err < 1e-5, "cublasSgemm %c%c m=5 n=7 k=3, leading dimensions "
                      "over the minimum, alpha 0.5 beta 2: max error %.2g (rows past m untouched)", "NT"[ta], "NT"[tb],
                      err);
                cudaFree(dA), cudaFree(dB), cudaFree(dC);
            }
        float one = 1, zero = 0;
        float *a = dev_alloc<float>(12), *b = dev_alloc<float>(12), *c = dev_alloc<float>(16);
        cudaMemset(a, 0, 12 * sizeof(float));
        cudaMemset(b, 0, 12 * sizeof(float));
        cublasStatus_t s = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 3, &one, a, 4, b, 3, &zero, c, 4);
        std::vector<float> hc = download(c, 16);
        int nan = count_wrong(16, [&](int i) { return !std::isfinite(hc[i]); });
        check(s == CUBLAS_STATUS_SUCCESS && nan == 0, "beta 0, C all NaN: C is not read (%d of 16 not finite)", nan);
        cudaMemset(c, 0x3F, 16 * sizeof(float));
        std::vector<float> c0 = download(c, 16);
        cublasStatus_t s1 = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 3, &one, a, 3, b, 3, &zero, c, 4);
        cublasStatus_t s2 = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 3, &one, a, 4, b, 3, &zero, c, 4);
        cublasStatus_t s3 = cublasSgemm(NULL, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 3, &one, a, 4, b, 3, &zero, c, 4);
        check(s1 == CUBLAS_STATUS_INVALID_VALUE && download(c, 16) == c0,
              "lda 3 < m 4: status %d (INVALID_VALUE 7), C unchanged", (int)s1);
        check(s2 == CUBLAS_STATUS_INVALID_VALUE, "m -1: status %d (INVALID_VALUE 7)", (int)s2);
        check(s3 == CUBLAS_STATUS_NOT_INITIALIZED, "a null handle: status %d (NOT_INITIALIZED 1)", (int)s3);

        const float e10 = ldexpf(1, -10), e11 = ldexpf(1, -11), e12 = ldexpf(1, -12);
        check(cuda_cpu_tf32(1 + e10) == 1 + e10 && cuda_cpu_tf32(1 + e12) == 1 && cuda_cpu_tf32(1 + e11) == 1 &&
              cuda_cpu_tf32(1 + 3 * e11) == 1 + 2 * e10 && cuda_cpu_tf32(-(1 + 3 * e12)) == -(1 + e10),
              "TF32 rounding: 1+2^-10 stays, 1+2^-12 -> 1, ties to even: 1+2^-11 -> 1, 1+3*2^-11 -> 1+2^-9; "
              "-(1+3*2^-12) -> -(1+2^-10)");
        float *da = upload(std::vector<float>{1 + e12}), *db = upload(std::vector<float>{3}), *dc = dev_alloc<float>(1);
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, da, 1, db, 1, &zero, dc, 1);
        float plain = download(dc, 1)[0];
        cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH);
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, da, 1, db, 1, &zero, dc, 1);
        float tf32 = download(dc, 1)[0];
        check(plain == 3 * (1 + e12) && tf32 == 3, "1x1x1 gemm (1+2^-12) * 3: %.9g in float, %.9g under "
              "CUBLAS_TF32_TENSOR_OP_MATH", plain, tf32);
        cudaFree(a), cudaFree(b), cudaFree(c), cudaFree(da), cudaFree(db), cudaFree(dc);
        cublasDestroy(h);
    }

    printf("warp matrix functions (wmma):\n");
    check_wmma_product<nvcuda::wmma::row_major, nvcuda::wmma::row_major>();
    check_wmma_product<nvcuda::wmma::row_major, nvcuda::wmma::col_major>();
    check_wmma_product<nvcuda::wmma::col_major, nvcuda::wmma::row_major>();
    check_wmma_product<nvcuda::wmma::col_major, nvcuda::wmma::col_major>();
    {   // TF32: the rounding, then a product of rounded values against the host
        float tie = 1.0f + ldexpf(1, -11), up = 1.0f + ldexpf(1, -10);
        check(nvcuda::wmma::__float_to_tf32(tie) == up && nvcuda::wmma::__float_to_tf32(-tie) == -up &&
              nvcuda::wmma::__float_to_tf32(1.0f + ldexpf(1, -12)) == 1.0f,
              "__float_to_tf32: 1 + 2^-11 (a tie) -> 1 + 2^-10 and its negative likewise (away from zero), "
              "1 + 2^-12 -> 1");
        std::vector<float> a(128), b(128);
        for (int i = 0; i < 128; i++) a[i] = sinf(0.7f * i) * 3, b[i] = cosf(0.3f * i + 2);
        float *da = upload(a), *db = upload(b), *dd = dev_alloc<float>(256);
        wmma_tf32_product<<<1, 32>>>(dd, da, db);
        std::vector<float> got = download(dd, 256);
        double worst = 0;
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++) {
                double want = 0, mag = 0;
                for (int k = 0; k < 8; k++) {
                    double t = (double)nvcuda::wmma::__float_to_tf32(a[r * 8 + k]) *
                               nvcuda::wmma::__float_to_tf32(b[c * 8 + k]);
                    want += t;
                    mag += fabs(t);
                }
                worst = fmax(worst, fabs(got[r * 16 + c] - want) / (8 * ldexp(1, -24) * mag));
            }
        check(worst <= 1, "wmma m16n16k8 TF32, A row-major, B column-major: D = A B of the rounded inputs "
              "(worst error %.2f of the float32 bound)", worst);
        cudaFree(da), cudaFree(db), cudaFree(dd);
    }
    printf("bf16 and cublasGemmEx:\n");
    {
        auto bits = [](float f) { return (unsigned)__float2bfloat16(f).__x; };
        const float e7 = ldexpf(1, -7), e8 = ldexpf(1, -8), e20 = ldexpf(1, -20);
        check(bits(1) == 0x3F80 && bits(1 + e7) == 0x3F81 && bits(1 + e8) == 0x3F80 && bits(1 + 3 * e8) == 0x3F82 &&
              bits(1 + e8 + e20) == 0x3F81 && bits(-(1 + 3 * e8)) == 0xBF82 && bits(1 + e8 - e20) == 0x3F80,
              "bf16 rounding to nearest: 1+2^-7 stays, ties to even (1+2^-8 -> 1, 1+3*2^-8 -> 1+2^-6, also negative), "
              "just above a tie up, just below down");
        float top = ldexpf(2 - e7, 127), half = ldexpf(2 - e8, 127);    // the largest bf16; halfway to 2^128
        check(bits(top) == 0x7F7F && bits(half) == 0x7F80 && bits(nextafterf(half, 0)) == 0x7F7F &&
              bits(FLT_MAX) == 0x7F80 && bits(-FLT_MAX) == 0xFF80 && bits(INFINITY) == 0x7F80 &&
              bits(-INFINITY) == 0xFF80,
              "bf16 overflow: the largest bf16 stays, the halfway point to 2^128 and FLT_MAX round to inf (0x7F80), "
              "and -FLT_MAX to -inf");
        check(bits(NAN) == 0x7FFF && bits(-NAN) == 0x7FFF && std::isnan(__bfloat162float(__float2bfloat16(NAN))) &&
              bits(-0.0f) == 0x8000 && bits(ldexpf(1, -133)) == 0x0001 && bits(ldexpf(1, -134)) == 0x0000 &&
              bits(ldexpf(3, -134)) == 0x0002,
              "bf16 NaN stays NaN (the canonical 0x7FFF, as CUDA's header), -0 kept, subnormals rounded (2^-133 the "
              "smallest, 2^-134 a tie to 0, 3*2^-134 a tie to 2^-132)");
        int bad = 0;
        for (unsigned b = 0; b < 65536; b++) {
            __nv_bfloat16 h = {(unsigned short)b};
            float f = __bfloat162float(h);
            uint32_t u;
            memcpy(&u, &f, 4);
            if (u != b << 16 || (!std::isnan(f) && bits(f) != b)) bad++;
        }
        check(bad == 0, "all 65536 bf16 values: to float is exact (the 16 bits, then 16 zeros) and back gives the "
              "same bits, NaNs apart (%d wrong)", bad);

        // the conversion in a kernel, on bf16 device buffers
        std::vector<float> x(1000);
        for (size_t i = 0; i < x.size(); i++) x[i] = ldexpf((float)((i * 7919) % 1000) - 500, (int)(i % 41) - 20) / 3;
        x[0] = NAN, x[1] = FLT_MAX, x[2] = 1 + e8;
        float* dx = upload(x);
        __nv_bfloat16* dh = dev_alloc<__nv_bfloat16>(x.size());
        to_bf16<<<4, 256>>>(dh, dx, (int)x.size());
        std::vector<__nv_bfloat16> hh(x.size());
        cudaMemcpy(hh.data(), dh, x.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost);
        bad = count_wrong((int)x.size(), [&](int i) { return hh[i].__x != bits(x[i]); });
        check(bad == 0, "__float2bfloat16 in a kernel, 1000 values into a bf16 device buffer: the host's bits (%d wrong)",
              bad);
        cudaFree(dx), cudaFree(dh);

        // cublasGemmEx (bf16 inputs, float32 accumulation) against cublasSgemm on bf16-representable inputs:
        // multiples of 1/8 below 2 in magnitude, so every product and sum is exact and the two must agree
        // bit for bit on any GPU, whatever its summation order
        cublasHandle_t h;
        cublasCreate(&h);
        const int m = 6, n = 5, k = 7;
        const float alpha = 1.0f, beta = 0.5f;
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
                int lda = ar + 1, ldb = br + 2, ldc = m + 1;
                std::vector<float> A(lda * ac), B(ldb * bc), C(ldc * n);
                std::vector<__nv_bfloat16> A16(A.size()), B16(B.size());
                for (size_t i = 0; i < A.size(); i++) A[i] = (float)((int)((i * 37) % 29) - 14) / 8, A16[i] = __float2bfloat16(A[i]);
                for (size_t i = 0; i < B.size(); i++) B[i] = (float)((int)((i * 53) % 31) - 15) / 8, B16[i] = __float2bfloat16(B[i]);
                for (size_t i = 0; i < C.size(); i++) C[i] = (float)((int)((i * 29) % 13) - 6) / 4;
                float *dA = upload(A), *dB = upload(B), *dC = upload(C), *dC2 = upload(C);
                __nv_bfloat16 *dA16 = upload(A16), *dB16 = upload(B16), *dC16 = dev_alloc<__nv_bfloat16>(C.size());
                std::vector<__nv_bfloat16> C16(C.size());
                for (size_t i = 0; i < C.size(); i++) C16[i] = __float2bfloat16(C[i]);
                cudaMemcpy(dC16, C16.data(), C16.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice);
                cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
                cublasStatus_t s0 = cublasSgemm(h, oa, ob, m, n, k, &alpha, dA, lda, dB, ldb, &beta, dC, ldc);
                cublasStatus_t s1 = cublasGemmEx(h, oa, ob, m, n, k, &alpha, dA16, CUDA_R_16BF, lda, dB16, CUDA_R_16BF,
                                                 ldb, &beta, dC2, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
                cublasStatus_t s2 = cublasGemmEx(h, oa, ob, m, n, k, &alpha, dA16, CUDA_R_16BF, lda, dB16, CUDA_R_16BF,
                                                 ldb, &beta, dC16, CUDA_R_16BF, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
                std::vector<float> want = download(dC, C.size()), got = download(dC2, C.size());
                cudaMemcpy(C16.data(), dC16, C16.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost);
                int diff = count_wrong((int)C.size(), [&](int i) { return memcmp(&want[i], &got[i], 4) != 0; });
                int diff16 = count_wrong((int)C.size(), [&](int i) { return C16[i].__x != bits(want[i]); });
                check(s0 == CUBLAS_STATUS_SUCCESS && s1 == CUBLAS_STATUS_SUCCESS && s2 == CUBLAS_STATUS_SUCCESS &&
                      diff == 0 && diff16 == 0, "cublasGemmEx %c%c bf16 x bf16, m=6 n=5 k=7, beta 0.5: float32 C equals "
                      "cublasSgemm's bit for bit (%d differ), bf16 C is it rounded (%d differ)", "NT"[ta], "NT"[tb], diff,
                      diff16);
                cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dC2), cudaFree(dA16), cudaFree(dB16), cudaFree(dC16);
            }
        // the rounding of the inputs is the caller's: float32 operands rounded to bf16 lose their low bits
        {
            float one = 1, zero = 0, e12 = ldexpf(1, -12);
            __nv_bfloat16 a16 = __float2bfloat16(1 + e12), b16 = __float2bfloat16(3);
            __nv_bfloat16 *da = upload(std::vector<__nv_bfloat16>{a16}), *db = upload(std::vector<__nv_bfloat16>{b16});
            float* dc = dev_alloc<float>(1);
            cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, da, CUDA_R_16BF, 1, db,
                                            CUDA_R_16BF, 1, &zero, dc, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            check(s == CUBLAS_STATUS_SUCCESS && download(dc, 1)[0] == 3, "1x1x1 GemmEx bf16(1+2^-12) * bf16(3): %.9g "
                  "(C NaN before, beta 0: not read)", download(dc, 1)[0]);
            // status codes: the same argument checks as cublasSgemm, then the type combination
            float* c4 = dev_alloc<float>(16);
            cudaMemset(c4, 0x3F, 16 * sizeof(float));
            std::vector<float> c0 = download(c4, 16);
            __nv_bfloat16* a4 = dev_alloc<__nv_bfloat16>(16);
            cudaMemset(a4, 0, 16 * sizeof(__nv_bfloat16));
            auto ex = [&](cublasHandle_t hh, int lda, cudaDataType_t at, cudaDataType_t bt, cudaDataType_t ct,
                          cublasComputeType_t ctype) {
                return cublasGemmEx(hh, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a4, at, lda, a4, bt, 4, &zero, c4, ct, 4,
                                    ctype, CUBLAS_GEMM_DEFAULT);
            };
            cublasStatus_t t1 = ex(h, 3, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F);
            cublasStatus_t t2 = ex(NULL, 4, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F);
            cublasStatus_t t3 = ex(h, 4, CUDA_R_16BF, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F);
            cublasStatus_t t4 = ex(h, 4, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_16F);
            check(t1 == CUBLAS_STATUS_INVALID_VALUE && t2 == CUBLAS_STATUS_NOT_INITIALIZED &&
                  t3 == CUBLAS_STATUS_NOT_SUPPORTED && t4 == CUBLAS_STATUS_NOT_SUPPORTED && download(c4, 16) == c0,
                  "cublasGemmEx status: lda 3 < m 4 %d (INVALID_VALUE 7), null handle %d (NOT_INITIALIZED 1), bf16 A "
                  "with float B %d and COMPUTE_16F %d (NOT_SUPPORTED 15); C unchanged", (int)t1, (int)t2, (int)t3, (int)t4);
            cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(c4), cudaFree(a4);
        }
        cublasDestroy(h);
    }

    printf("NCCL across processes (nccl.h):\n");
    {
        int st[4];
        nccl_ranks(3, nccl_collectives, st);
        check(st[0] == 0 && st[1] == 0 && st[2] == 0, "3 ranks, blocking: all-reduce (sum, avg in place, int max), "
              "in-place reduce-scatter and all-gather of 1.2 MB blocks, every element right on every rank, the sum in "
              "rank order (1e8 + 1 - 1e8 = 0 in float) (exit %d %d %d)", st[0], st[1], st[2]);
        nccl_ranks(2, [](int r, int n, ncclUniqueId id) {
            ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
            cfg.blocking = 0;
            ncclComm_t c = NULL;
            ncclResult_t s = ncclCommInitRankConfig(&c, n, id, r, &cfg);
            if (s != ncclInProgress && s != ncclSuccess) _exit(10);
            while (s == ncclInProgress) ncclCommGetAsyncError(c, &s);
            if (s != ncclSuccess) _exit(11);
            if (r == 1) usleep(200000);                // rank 0's call waits for this one
            float* d = upload(std::vector<float>{(float)r + 1});
            s = ncclAllReduce(d, d, 1, ncclFloat, ncclSum, c, 0);
            if (r == 0 && s != ncclInProgress) _exit(12);
            while (s == ncclInProgress) ncclCommGetAsyncError(c, &s);
            if (s != ncclSuccess || download(d, 1)[0] != 3.0f || cudaStreamQuery(0) != cudaSuccess) _exit(13);
            ncclCommDestroy(c);
        }, st);
        check(st[0] == 0 && st[1] == 0, "non-blocking (config.blocking = 0): the init and an all-reduce that waits for "
              "a late rank return ncclInProgress, ncclCommGetAsyncError moves them to ncclSuccess (exit %d %d)",
              st[0], st[1]);
        nccl_ranks(2, [](int r, int n, ncclUniqueId id) {
            ncclComm_t c = NULL;
            if (ncclCommInitRank(&c, n, id, r) != ncclSuccess) _exit(10);
            float* d = dev_alloc<float>(20);
            ncclResult_t s = r == 0 ? ncclAllReduce(d, d, 10, ncclFloat, ncclSum, c, 0)
                                    : ncclAllGather(d, d, 10, ncclFloat, c, 0);
            const char* e = ncclGetLastError(c);
            if (s != ncclInvalidUsage || !strstr(e, "rank 1's call #1 is ncclAllGather(count 10") ||
                !strstr(e, "rank 0's #1 ncclAllReduce(count 10")) _exit(11);
            ncclCommAbort(c);
        }, st);
        check(st[0] == 0 && st[1] == 0, "rank 0 calls ncclAllReduce where rank 1 calls ncclAllGather: both fail with "
              "ncclInvalidUsage, ncclGetLastError naming both calls (exit %d %d)", st[0], st[1]);
        nccl_ranks(2, [](int r, int n, ncclUniqueId id) {
            ncclComm_t c = NULL;
            if (ncclCommInitRank(&c, n, id, r) != ncclSuccess) _exit(10);
            if (r == 1) _exit(0);                     // gone, without ncclCommDestroy (a zombie until reaped)
            float* d = dev_alloc<float>(1);
            ncclResult_t s = ncclAllReduce(d, d, 1, ncclFloat, ncclSum, c, 0);
            if (s != ncclRemoteError || !strstr(ncclGetLastError(c), "rank 1 (pid")) _exit(11);
            if (ncclAllReduce(d, d, 1, ncclFloat, ncclSum, c, 0) != ncclRemoteError) _exit(12);   // the error stays
            ncclCommAbort(c);
        }, st);
        check(st[0] == 0, "a rank that exits after the init: the other's all-reduce fails with ncclRemoteError, "
              "\"rank 1 (pid ...) exited\", and the communicator stays failed (exit %d)", st[0]);
        nccl_ranks(1, [](int r, int n, ncclUniqueId id) {
            ncclComm_t c = NULL;
            if (ncclCommInitRank(&c, n, id, r) != ncclSuccess) _exit(10);
            float host[4] = {1, 2, 3, 4};
            if (ncclAllReduce(host, host, 4, ncclFloat, ncclSum, c, 0) != ncclInvalidArgument) _exit(11);
            ncclCommDestroy(c);
        }, st);
        check(st[0] == 0, "a host buffer: ncclInvalidArgument (exit %d)", st[0]);
    }

    check(cuda_cpu_races().size() == 2, "no kernel but the two racy ones was reported by the race check (%zu races)",
          cuda_cpu_races().size());
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
