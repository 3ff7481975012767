/*
dev/cuda_cpu/mma.h: the part of CUDA's warp matrix functions (<mma.h>, namespace nvcuda::wmma) that
train_gpt2.cu uses, for the CPU runtime (cuda_runtime.h beside it; doc/cuda.md). Tests only.

A warp multiplies 16 x 16 tiles: D = A B + C with A (16 x 16) and B (16 x 16) in bf16 and C, D in float32,
the shape m16n16k16 that GPUs of compute capability 8.0 and newer run on their tensor cores. A fragment
holds one tile spread over the 32 lanes of a warp, 8 elements per lane. CUDA leaves the mapping of tile
elements to lanes and registers unspecified; a kernel may touch frag.x[i] only elementwise (the same
operation on every element). So this runtime picks a mapping no GPU uses: element i of lane l is the
tile's element (8 l + i) * 109 mod 256 in row-major order. A kernel that assumes any layout (for example
"lane l holds row l / 2") computes garbage here and fails its tests.

What is real here, as in CUDA's description of these functions:
  - load_matrix_sync, store_matrix_sync and mma_sync wait until every lane of the warp has arrived
    (a lane that exited or took another branch is the runtime's deadlock or exited-lane error);
  - each lane loads and stores only its own elements;
  - the pointer and the leading dimension must be the same on every lane (checked), the pointer
    32-byte aligned and the leading dimension a multiple of 16 bytes (checked: the GPU's rule);
  - mma_sync: products of bf16 values are exact in float32 and are added to C in float32, k = 0..15 in
    order. (A tensor core adds its products in an order and with internal precision of its own, not
    documented; the tests' bounds are stated for any order.)
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
enum layout_t { mem_row_major, mem_col_major };

static constexpr int TILE = 16, PER_LANE = TILE * TILE / 32;

// the tile element (row-major index) that element i of lane l holds
static inline int tile_index(int lane, int i) { return (8 * lane + i) * 109 % (TILE * TILE); }

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    static_assert(M == TILE && N == TILE && K == TILE, "this runtime has the shape m16n16k16 only");
    static_assert(std::is_same<Use, accumulator>::value ? std::is_same<T, float>::value
                                                        : std::is_same<T, __nv_bfloat16>::value,
                  "this runtime has bf16 matrix_a and matrix_b and float32 accumulators only");
    enum { num_elements = PER_LANE };
    typedef T element_type;
    T x[PER_LANE];
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

template <typename Use, typename T, typename L>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ldm) {
    static_assert(!std::is_same<Use, accumulator>::value, "an accumulator load names its layout");
    bool row = std::is_same<L, row_major>::value;
    arrive("load_matrix_sync", p, ldm, row);
    for (int i = 0; i < PER_LANE; i++) {
        int e = tile_index(lane_id(), i);
        f.x[i] = p[at(e / TILE, e % TILE, ldm, row)];
    }
}

static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm,
                                    layout_t layout) {
    arrive("load_matrix_sync", p, ldm, layout);
    for (int i = 0; i < PER_LANE; i++) {
        int e = tile_index(lane_id(), i);
        f.x[i] = p[at(e / TILE, e % TILE, ldm, layout == mem_row_major)];
    }
}

static inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                                     layout_t layout) {
    arrive("store_matrix_sync", (const float*)p, ldm, layout);
    for (int i = 0; i < PER_LANE; i++) {
        int e = tile_index(lane_id(), i);
        p[at(e / TILE, e % TILE, ldm, layout == mem_row_major)] = f.x[i];
    }
}

template <typename Use, typename T, typename L> static inline void fill_fragment(fragment<Use, 16, 16, 16, T, L>& f, T v) {
    for (int i = 0; i < PER_LANE; i++) f.x[i] = v;
}

// Each lane posts its elements of A and B to its warp's slots, all lanes meet, each computes its own
// elements of D, and all meet again before the slots can be written by the next mma_sync.
struct MmaSlots {
    float a[TILE * TILE], b[TILE * TILE];
};
static inline MmaSlots* mma_slots(void) {
    static MmaSlots slots[cuda_cpu::MAX_THREADS / 32];
    return &slots[warp_id()];
}

template <typename LA, typename LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
                            const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA>& a,
                            const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB>& b,
                            const fragment<accumulator, 16, 16, 16, float>& c) {
    MmaSlots* s = mma_slots();
    int lane = lane_id();
    for (int i = 0; i < PER_LANE; i++) {
        int e = tile_index(lane, i);
        s->a[e] = __bfloat162float(a.x[i]);
        s->b[e] = __bfloat162float(b.x[i]);
    }
    __syncwarp();
    float out[PER_LANE];
    for (int i = 0; i < PER_LANE; i++) {
        int e = tile_index(lane, i), r = e / TILE, col = e % TILE;
        float acc = c.x[i];
        for (int k = 0; k < TILE; k++) acc += s->a[r * TILE + k] * s->b[k * TILE + col];
        out[i] = acc;
    }
    __syncwarp();
    for (int i = 0; i < PER_LANE; i++) d.x[i] = out[i];
}

}  // namespace wmma
}  // namespace nvcuda
