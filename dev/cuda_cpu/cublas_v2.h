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
hold NaN), as the cuBLAS documentation specifies.
*/
#pragma once
#include "cuda_runtime.h"

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

// A column-major rows x cols matrix with leading dimension ld must lie inside one device buffer.
static inline void cuda_cpu_gemm_operand(const char* name, const float* p, int rows, int cols, int ld) {
    if (rows == 0 || cols == 0) return;
    size_t bytes = ((size_t)(cols - 1) * ld + rows) * sizeof(float);
    int r = cuda_cpu_device_range(p, bytes);
    if (r == 0) cuda_cpu::die("cublasSgemm: %s (%p) is not a device pointer", name, (const void*)p);
    if (r < 0)
        cuda_cpu::die("cublasSgemm: %s, %d x %d with leading dimension %d (%zu bytes), runs past the end of its "
                      "device buffer", name, rows, cols, ld, bytes);
}

// C = alpha op(A) op(B) + beta C, all column-major: op(A) is m x k, op(B) k x n, C m x n.
static inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                                         const float* beta, float* C, int ldc) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    int a_rows = ta == CUBLAS_OP_N ? m : k, b_rows = tb == CUBLAS_OP_N ? k : n;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T && ta != CUBLAS_OP_C) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T && tb != CUBLAS_OP_C) || m < 0 || n < 0 || k < 0 ||
        lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m) || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    cuda_cpu_gemm_operand("A", A, a_rows, ta == CUBLAS_OP_N ? k : m, lda);
    cuda_cpu_gemm_operand("B", B, b_rows, tb == CUBLAS_OP_N ? n : k, ldb);
    cuda_cpu_gemm_operand("C", C, m, n, ldc);
    int tf32 = h->math == CUBLAS_TF32_TENSOR_OP_MATH;
    float al = *alpha, be = *beta;
    cuda_cpu::DeviceAccess open;
    const char* saved = cuda_cpu::rt.kernel;
    cuda_cpu::rt.kernel = "cublasSgemm";                      // names it in a fault message
    std::vector<float> bcol((size_t)k);
    for (int j = 0; j < n; j++) {
        for (int p = 0; p < k; p++) {
            float b = tb == CUBLAS_OP_N ? B[(size_t)j * ldb + p] : B[(size_t)p * ldb + j];
            bcol[p] = tf32 ? cuda_cpu_tf32(b) : b;
        }
        for (int i = 0; i < m; i++) {
            float s = 0.0f;
            for (int p = 0; p < k; p++) {
                float a = ta == CUBLAS_OP_N ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p];
                s += (tf32 ? cuda_cpu_tf32(a) : a) * bcol[p];
            }
            float* c = &C[(size_t)j * ldc + i];
            *c = be == 0.0f ? al * s : al * s + be * *c;
        }
    }
    cuda_cpu::rt.kernel = saved;
    return CUBLAS_STATUS_SUCCESS;
}
