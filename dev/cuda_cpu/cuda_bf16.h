/*
dev/cuda_cpu/cuda_bf16.h: the part of CUDA's bf16 header that train_gpt2.cu uses, for the CPU runtime
(cuda_runtime.h beside it; doc/cuda.md). Tests only.

bf16 ("brain float") is float32 with the low 16 bits of the mantissa cut off: 1 sign, 8 exponent and 7
stored mantissa bits (8 significant bits, unit roundoff 2^-8), the same range as float32. The conversion
from float gives the same bits as CUDA's (cvt.rn.bf16.f32 on the GPU), written here from its definition:
round to nearest, ties to even; a value past the largest bf16 (0x7F7F, about 3.39e38) rounds to inf; any
NaN becomes the canonical NaN 0x7FFF. The conversion back is exact (the 16 bits, then 16 zero bits).
There is no arithmetic on the type and no implicit conversion, so a kernel must say where it rounds.
*/
#pragma once
#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
    unsigned short __x;
};

static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 r;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) {               // NaN
        r.__x = 0x7FFFu;
        return r;
    }
    uint32_t rest = u << 16;                             // the 16 bits cut off
    r.__x = (unsigned short)(u >> 16);
    if (rest > 0x80000000u || (rest == 0x80000000u && (r.__x & 1u))) r.__x++;   // may carry into inf
    return r;
}
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
static inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.__x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
