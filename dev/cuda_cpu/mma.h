/*
dev/cuda_cpu/mma.h: the part of CUDA's warp matrix functions (<mma.h>, namespace nvcuda::wmma) that
train_gpt2.cu uses, for the CPU runtime (cuda_runtime.h beside it; doc/cuda.md). Tests only.

A warp multiplies tiles on the tensor cores: D = A B + C with C, D 16 x 16 in float32 and two shapes of
compute capability 8.0 and newer: m16n16k16 with A (16 x 16) and B (16 x 16) in bf16, and m16n16k8 with A
(16 x 8) and B (8 x 16) in TF32 (float32 storage; wmma::precision::tf32). A fragment holds one tile
spread over the 32 lanes of a warp (rows x cols / 32 elements per lane). CUDA leaves the mapping of tile
elements to lanes and registers unspecified; a kernel may touch frag.x[i] only elementwise (the same
operation on every element). So this runtime picks a mapping no GPU uses: element i of lane l is the
tile's element (n l + i) * 109 mod (rows x cols) in row-major order, n the elements per lane. A kernel
that assumes any layout (for example "lane l holds row l / 2") computes garbage here and fails its tests.

What is real here, as in CUDA's description of these functions:
  - load_matrix_sync, store_matrix_sync and mma_sync wait until every lane of the warp has arrived
    (a lane that exited or took another branch is the runtime's deadlock or exited-lane error);
  - each lane loads and stores only its own elements;
  - the pointer and the leading dimension must be the same on every lane (checked), the pointer
    32-byte aligned and the leading dimension a multiple of 16 bytes (checked: the GPU's rule);
  - mma_sync: products of bf16 (or TF32) values are exact in float32 and are added to C in float32, k in
    order. (A tensor core adds its products in an order and with internal precision of its own, not
    documented; the tests' bounds are stated for any order.) TF32 inputs are read as the tensor cores
    read them, the low 13 bits of each float cut off, so a kernel must round them first with
    __float_to_tf32 (to nearest, ties away from zero: cvt.rna.tf32.f32), as CUDA asks.
*/
#pragma once
#include "cuda_runtime.h"
#include "cuda_bf16.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision {
struct tf32 {};
}
enum layout_t { mem_row_major, mem_col_major };

// x rounded to TF32 (10 stored mantissa bits) to nearest, ties away from zero; NaN and inf kept
static inline float __float_to_tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7F800000u) != 0x7F800000u) u = (u + 0x1000u) & ~0x1FFFu;
    memcpy(&x, &u, 4);
    return x;
}

// A fragment's tile: ROWS x COLS for its use; E, what x[] holds (TF32 is stored as float)
template <typename Use, int M, int N, int K, typename T> struct tile_of {
    static constexpr int ROWS = std::is_same<Use, matrix_b>::value ? K : M;
    static constexpr int COLS = std::is_same<Use, matrix_a>::value ? K : N;
    typedef typename std::conditional<std::is_same<T, precision::tf32>::value, float, T>::type E;
};

// the tile element (row-major index) that element i of lane l holds, with n elements per lane
static inline int tile_index(int lane, int i, int n) { return (n * lane + i) * 109 % (32 * n); }

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && (K == 16 || K == 8), "this runtime has m16n16k16 and m16n16k8 only");
    static_assert(std::is_same<Use, accumulator>::value
                      ? std::is_same<T, float>::value
                      : (K == 16 ? std::is_same<T, __nv_bfloat16>::value : std::is_same<T, precision::tf32>::value),
                  "this runtime has bf16 (k16) or TF32 (k8) matrix_a and matrix_b and float32 accumulators only");
    typedef tile_of<Use, M, N, K, T> Tile;
    enum { num_elements = Tile::ROWS * Tile::COLS / 32 };
    typedef typename Tile::E element_type;
    element_type x[num_elements];
};

static inline int lane_id(void) {
    return (int)((threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y) % 32);
}
static inline int warp_id(void) {
    return (int)((threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y) / 32);
}

// Every lane arrives; all must name the same memory in the same way.
template <typename T> static inline void arrive(const char* fn, const T* p, unsigned ldm, int layout) {
    if ((uintptr_t)p % 32) cuda_cpu::die("kernel %s: %s: pointer %p is not 32-byte aligned", cuda_cpu::rt.kernel, fn,
                                         (const void*)p);
    if (ldm * sizeof(T) % 16) cuda_cpu::die("kernel %s: %s: ldm %u is not a multiple of 16 bytes", cuda_cpu::rt.kernel,
                                            fn, ldm);
    uint64_t mine = (uint64_t)(uintptr_t)p ^ ((uint64_t)ldm << 48) ^ ((uint64_t)layout << 47);
    if (__shfl_sync(0xFFFFFFFFu, mine, 0) != mine)
        cuda_cpu::die("kernel %s: %s: the lanes of warp %d name different memory", cuda_cpu::rt.kernel, fn, warp_id());
}

// element (r, c) of a tile stored with leading dimension ldm
static inline size_t at(int r, int c, unsigned ldm, bool row) { return row ? (size_t)r * ldm + c : (size_t)c * ldm + r; }

template <typename Use, int K, typename T, typename L, typename E>
static inline void load_matrix_sync(fragment<Use, 16, 16, K, T, L>& f, const E* p, unsigned ldm) {
    typedef fragment<Use, 16, 16, K, T, L> F;
    static_assert(!std::is_same<Use, accumulator>::value, "an accumulator load names its layout");
    static_assert(std::is_same<E, typename F::element_type>::value, "a fragment loads from memory of its type");
    bool row = std::is_same<L, row_major>::value;
    arrive("load_matrix_sync", p, ldm, row);
    for (int i = 0; i < F::num_elements; i++) {
        int e = tile_index(lane_id(), i, F::num_elements);
        f.x[i] = p[at(e / F::Tile::COLS, e % F::Tile::COLS, ldm, row)];
    }
}

template <int K>
static inline void load_matrix_sync(fragment<accumulator, 16, 16, K, float>& f, const float* p, unsigned ldm,
                                    layout_t layout) {
    arrive("load_matrix_sync", p, ldm, layout);
    for (int i = 0; i < 8; i++) {
        int e = tile_index(lane_id(), i, 8);
        f.x[i] = p[at(e / 16, e % 16, ldm, layout == mem_row_major)];
    }
}

template <int K>
static inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, K, float>& f, unsigned ldm,
                                     layout_t layout) {
    arrive("store_matrix_sync", (const float*)p, ldm, layout);
    for (int i = 0; i < 8; i++) {
        int e = tile_index(lane_id(), i, 8);
        p[at(e / 16, e % 16, ldm, layout == mem_row_major)] = f.x[i];
    }
}

template <typename Use, int K, typename T, typename L, typename V>
static inline void fill_fragment(fragment<Use, 16, 16, K, T, L>& f, V v) {
    for (int i = 0; i < fragment<Use, 16, 16, K, T, L>::num_elements; i++) f.x[i] = v;
}

// Each lane posts its elements of A and B to its warp's slots, all lanes meet, each computes its own
// elements of D, and all meet again before the slots can be written by the next mma_sync.
struct MmaSlots {
    float a[16 * 16], b[16 * 16];
};
static inline MmaSlots* mma_slots(void) {
    static MmaSlots slots[cuda_cpu::MAX_THREADS / 32];
    return &slots[warp_id()];
}

// An operand's value as the tensor cores read it: bf16 exactly, TF32 with the low 13 bits cut off
static inline float operand(__nv_bfloat16 v) { return __bfloat162float(v); }
static inline float operand(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7F800000u) != 0x7F800000u) u &= ~0x1FFFu;
    memcpy(&v, &u, 4);
    return v;
}

template <int K, typename T, typename LA, typename LB>
static inline void mma_sync(fragment<accumulator, 16, 16, K, float>& d, const fragment<matrix_a, 16, 16, K, T, LA>& a,
                            const fragment<matrix_b, 16, 16, K, T, LB>& b, const fragment<accumulator, 16, 16, K, float>& c) {
    const int NA = fragment<matrix_a, 16, 16, K, T, LA>::num_elements;     // 16 K / 32 per lane, A and B alike
    MmaSlots* s = mma_slots();
    int lane = lane_id();
    for (int i = 0; i < NA; i++) {
        int e = tile_index(lane, i, NA);
        s->a[e] = operand(a.x[i]);          // A[e / K][e % K]
        s->b[e] = operand(b.x[i]);          // B[e / 16][e % 16]
    }
    __syncwarp();
    float out[8];
    for (int i = 0; i < 8; i++) {
        int e = tile_index(lane, i, 8), r = e / 16, col = e % 16;
        float acc = c.x[i];
        for (int k = 0; k < K; k++) acc += s->a[r * K + k] * s->b[k * 16 + col];
        out[i] = acc;
    }
    __syncwarp();
    for (int i = 0; i < 8; i++) d.x[i] = out[i];
}

}  // namespace wmma
}  // namespace nvcuda
