/*
dev/cuda_cpu/cublas_v2.h: the part of cuBLAS that train_gpt2.cu calls, as plain loops on the CPU, for
the tests only (see cuda_runtime.h beside it and doc/cuda.md).

cublasSgemm checks its arguments as the real library does and returns the same status codes: a
negative size, a bad operation or a leading dimension smaller than the matrix it describes is
CUBLAS_STATUS_INVALID_VALUE, a handle that was not created is CUBLAS_STATUS_NOT_INITIALIZED. A
matrix that runs past the end of its device buffer stops the program with a message (on a GPU it
would be an illegal memory access). The product is summed over k in order in float32; with
CUBLAS_TF32_TENSOR_OP_MATH each input is first rounded to TF32 (10 mantissa bits, to nearest even),
so tolerances meant for TF32 on a GPU are exercised here too. With beta == 0, C is not read (it may
hold NaN), as the cuBLAS documentation specifies. cublasGemmEx does the same for float32 and for bf16
inputs (cuda_bf16.h) with float32 accumulation and a float32 or bf16 output (below).
*/
#pragma once
#include "cuda_runtime.h"
#include "cuda_bf16.h"

// library_types.h's data types (the values of CUDA 13.0) and cuBLAS's compute types and algorithms
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum cublasComputeType_t { CUBLAS_COMPUTE_16F = 64, CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 };

enum cublasStatus_t {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cublasMath_t {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_TENSOR_OP_MATH = 1,
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3,
};
struct cublasContext { cublasMath_t math; };
typedef cublasContext* cublasHandle_t;

// the real library's strings (checked against libcublas 13.0, which answers without a GPU)
static inline const char* cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an unsupported value or parameter was passed to the function";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "the function requires an architectural feature absent from the device";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the function failed to launch on the GPU";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the requested functionality is not supported";
    }
    return "unknown error";
}

static inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
    *h = new cublasContext{CUBLAS_DEFAULT_MATH};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_DEFAULT_MATH && mode != CUBLAS_TENSOR_OP_MATH && mode != CUBLAS_PEDANTIC_MATH &&
        mode != CUBLAS_TF32_TENSOR_OP_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t* mode) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    *mode = h->math;
    return CUBLAS_STATUS_SUCCESS;
}

// x rounded to TF32: 1 sign, 8 exponent and 10 mantissa bits, to nearest even (NaN and inf kept)
static inline float cuda_cpu_tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7F800000u) != 0x7F800000u) {
        u += 0xFFFu + ((u >> 13) & 1u);
        u &= ~0x1FFFu;
    }
    memcpy(&x, &u, 4);
    return x;
}

// A column-major rows x cols matrix with leading dimension ld, of elements of `size` bytes, must lie
// inside one device buffer.
static inline void cuda_cpu_gemm_operand(const char* fn, const char* name, const void* p, int rows, int cols, int ld,
                                         size_t size) {
    if (rows == 0 || cols == 0) return;
    size_t bytes = ((size_t)(cols - 1) * ld + rows) * size;
    int r = cuda_cpu_device_range(p, bytes);
    if (r == 0) cuda_cpu::die("%s: %s (%p) is not a device pointer", fn, name, p);
    if (r < 0)
        cuda_cpu::die("%s: %s, %d x %d with leading dimension %d (%zu bytes), runs past the end of its "
                      "device buffer", fn, name, rows, cols, ld, bytes);
}

// An element of a gemm operand as float: bf16 exactly, float as is or rounded to TF32
static inline float cuda_cpu_gemm_in(const float* p, size_t i, int tf32) { return tf32 ? cuda_cpu_tf32(p[i]) : p[i]; }
static inline float cuda_cpu_gemm_in(const __nv_bfloat16* p, size_t i, int) { return __bfloat162float(p[i]); }
static inline void cuda_cpu_gemm_out(float* p, float v) { *p = v; }
static inline void cuda_cpu_gemm_out(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
static inline float cuda_cpu_gemm_c(const float* p) { return *p; }
static inline float cuda_cpu_gemm_c(const __nv_bfloat16* p) { return __bfloat162float(*p); }

// The arguments of a gemm, checked as cuBLAS checks them; CUBLAS_STATUS_SUCCESS when the product may run
static inline cublasStatus_t cuda_cpu_gemm_args(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                int n, int k, const void* alpha, int lda, int ldb, const void* beta,
                                                int ldc) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    int a_rows = ta == CUBLAS_OP_N ? m : k, b_rows = tb == CUBLAS_OP_N ? k : n;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T && ta != CUBLAS_OP_C) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T && tb != CUBLAS_OP_C) || m < 0 || n < 0 || k < 0 ||
        lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m) || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

// C = alpha op(A) op(B) + beta C, all column-major: op(A) is m x k, op(B) k x n, C m x n. Each product of
// two inputs (as float: exact for bf16 inputs, whose 8-bit significands multiply exactly) is summed over k
// in order in float32; the result is written in C's type (rounded to nearest even for bf16).
template <typename TA, typename TC>
static inline void cuda_cpu_gemm(const char* fn, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                 int n, int k, float al, const TA* A, int lda, const TA* B, int ldb, float be, TC* C,
                                 int ldc) {
    if (m == 0 || n == 0) return;
    int a_rows = ta == CUBLAS_OP_N ? m : k, b_rows = tb == CUBLAS_OP_N ? k : n;
    cuda_cpu_gemm_operand(fn, "A", A, a_rows, ta == CUBLAS_OP_N ? k : m, lda, sizeof(TA));
    cuda_cpu_gemm_operand(fn, "B", B, b_rows, tb == CUBLAS_OP_N ? n : k, ldb, sizeof(TA));
    cuda_cpu_gemm_operand(fn, "C", C, m, n, ldc, sizeof(TC));
    int tf32 = h->math == CUBLAS_TF32_TENSOR_OP_MATH;
    cuda_cpu::DeviceAccess open;
    const char* saved = cuda_cpu::rt.kernel;
    cuda_cpu::rt.kernel = fn;                                  // names it in a fault message
    std::vector<float> bcol((size_t)k);
    for (int j = 0; j < n; j++) {
        for (int p = 0; p < k; p++)
            bcol[p] = cuda_cpu_gemm_in(B, tb == CUBLAS_OP_N ? (size_t)j * ldb + p : (size_t)p * ldb + j, tf32);
        for (int i = 0; i < m; i++) {
            float s = 0.0f;
            for (int p = 0; p < k; p++)
                s += cuda_cpu_gemm_in(A, ta == CUBLAS_OP_N ? (size_t)p * lda + i : (size_t)i * lda + p, tf32) * bcol[p];
            TC* c = &C[(size_t)j * ldc + i];
            cuda_cpu_gemm_out(c, be == 0.0f ? al * s : al * s + be * cuda_cpu_gemm_c(c));
        }
    }
    cuda_cpu::rt.kernel = saved;
}

static inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                                         const float* beta, float* C, int ldc) {
    cublasStatus_t st = cuda_cpu_gemm_args(h, ta, tb, m, n, k, alpha, lda, ldb, beta, ldc);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    cuda_cpu_gemm("cublasSgemm", h, ta, tb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
    return CUBLAS_STATUS_SUCCESS;
}

// cublasGemmEx, for the type combinations of CUBLAS_COMPUTE_32F that the trainer can use: A and B both
// CUDA_R_32F (then C too; TF32 rounding under CUBLAS_TF32_TENSOR_OP_MATH, as cublasSgemm) or both
// CUDA_R_16BF with C CUDA_R_16BF or CUDA_R_32F; alpha and beta are float (the scale type of COMPUTE_32F).
// Other combinations cuBLAS may support (half, int8, other compute types) are refused here with
// CUBLAS_STATUS_NOT_SUPPORTED, as cuBLAS refuses the ones it does not support; so is an algorithm other
// than CUBLAS_GEMM_DEFAULT or CUBLAS_GEMM_DEFAULT_TENSOR_OP.
static inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* A, cudaDataType_t Atype, int lda,
                                          const void* B, cudaDataType_t Btype, int ldb, const void* beta, void* C,
                                          cudaDataType_t Ctype, int ldc, cublasComputeType_t compute,
                                          cublasGemmAlgo_t algo) {
    cublasStatus_t st = cuda_cpu_gemm_args(h, ta, tb, m, n, k, alpha, lda, ldb, beta, ldc);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    int f32 = Atype == CUDA_R_32F && Btype == CUDA_R_32F && Ctype == CUDA_R_32F;
    int bf16 = Atype == CUDA_R_16BF && Btype == CUDA_R_16BF && (Ctype == CUDA_R_16BF || Ctype == CUDA_R_32F);
    if (compute != CUBLAS_COMPUTE_32F || !(f32 || bf16) ||
        (algo != CUBLAS_GEMM_DEFAULT && algo != CUBLAS_GEMM_DEFAULT_TENSOR_OP))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    float al = *(const float*)alpha, be = *(const float*)beta;
    if (f32)
        cuda_cpu_gemm("cublasGemmEx", h, ta, tb, m, n, k, al, (const float*)A, lda, (const float*)B, ldb, be,
                      (float*)C, ldc);
    else if (Ctype == CUDA_R_32F)
        cuda_cpu_gemm("cublasGemmEx", h, ta, tb, m, n, k, al, (const __nv_bfloat16*)A, lda, (const __nv_bfloat16*)B,
                      ldb, be, (float*)C, ldc);
    else
        cuda_cpu_gemm("cublasGemmEx", h, ta, tb, m, n, k, al, (const __nv_bfloat16*)A, lda, (const __nv_bfloat16*)B,
                      ldb, be, (__nv_bfloat16*)C, ldc);
    return CUBLAS_STATUS_SUCCESS;
}
