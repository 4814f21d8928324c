/* Linear layers on cuBLAS: row-major y = x W^T and its two backward products, with bf16 or fp32
 * operands and fp32 accumulation (CUBLAS_COMPUTE_32F: no TF32 for fp32 operands, tensor cores
 * for bf16 ones). */
#include <stdlib.h>

#include <cublas_v2.h>

#include "model/cuda/ops_util.cuh"

#define GDN_CUBLAS_CHECK(call)                                                                 \
    do {                                                                                       \
        cublasStatus_t gdn_st_ = (call);                                                       \
        if (gdn_st_ != CUBLAS_STATUS_SUCCESS) {                                                \
            fprintf(stderr, "gdn: cuBLAS error at %s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
                    cublasGetStatusString(gdn_st_));                                           \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* cuBLAS's recommended workspace on Hopper; with it the library needs no allocation per call. */
#define GEMM_WORKSPACE_BYTES ((size_t)32 << 20)

struct gdn_cuda_blas {
    cublasHandle_t h;
    cudaStream_t stream;
    void *workspace;
};

static cudaDataType_t gemm_type(gdn_cuda_precision p) { return p == GDN_CUDA_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

extern "C" gdn_cuda_blas *gdn_cuda_blas_create(void *stream) {
    gdn_cuda_blas *b = (gdn_cuda_blas *)calloc(1, sizeof *b);
    if (!b) GDN_CUDA_DIE("out of host memory creating the cuBLAS context");
    b->stream = OPS_STREAM(stream);
    GDN_CUBLAS_CHECK(cublasCreate(&b->h));
    GDN_CUBLAS_CHECK(cublasSetStream(b->h, b->stream));
    GDN_CUBLAS_CHECK(cublasSetMathMode(b->h, CUBLAS_DEFAULT_MATH));
    GDN_CUDA_CHECK(cudaMalloc(&b->workspace, GEMM_WORKSPACE_BYTES));
    GDN_CUBLAS_CHECK(cublasSetWorkspace(b->h, b->workspace, GEMM_WORKSPACE_BYTES));
    return b;
}

extern "C" void gdn_cuda_blas_free(gdn_cuda_blas *b) {
    if (!b) return;
    GDN_CUBLAS_CHECK(cublasDestroy(b->h));
    GDN_CUDA_CHECK(cudaFree(b->workspace));
    free(b);
}

/* Row-major C[M,N] = alpha op(A) op(B) + beta C. cuBLAS is column-major, and a row-major matrix
 * is its transpose in column-major, so this computes C^T = op(B)^T op(A)^T. */
static void gemm_rm(gdn_cuda_blas *b, int transA, int transB, int M, int N, int K,
                    const void *A, int lda, const void *B, int ldb, cudaDataType_t in_t, float beta,
                    void *C, int ldc, cudaDataType_t out_t) {
    const float alpha = 1.0f;
    GDN_CUBLAS_CHECK(cublasGemmEx(b->h, transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  N, M, K, &alpha, B, in_t, ldb, A, in_t, lda, &beta, C, out_t, ldc,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* An empty inner dimension: C = beta C, which is 0 or C itself. */
static void gemm_empty(gdn_cuda_blas *b, void *C, size_t n, gdn_cuda_precision out_p, float beta) {
    if (beta == 0.0f) GDN_CUDA_CHECK(cudaMemsetAsync(C, 0, n * gdn_cuda_act_bytes(out_p), b->stream));
}

extern "C" void gdn_cuda_linear_fwd(gdn_cuda_blas *b, gdn_cuda_precision in, gdn_cuda_precision out_p,
                                    void *y, const void *x, const void *W, int N, int I, int O,
                                    float beta) {
    if (N <= 0 || O <= 0) return;
    if (I <= 0) return gemm_empty(b, y, (size_t)N * O, out_p, beta);
    gemm_rm(b, 0, 1, N, O, I, x, I, W, I, gemm_type(in), beta, y, O, gemm_type(out_p));
}

extern "C" void gdn_cuda_linear_bwd_dx(gdn_cuda_blas *b, gdn_cuda_precision in, gdn_cuda_precision out_p,
                                       void *dx, const void *dy, const void *W, int N, int I, int O,
                                       float beta) {
    if (N <= 0 || I <= 0) return;
    if (O <= 0) return gemm_empty(b, dx, (size_t)N * I, out_p, beta);
    gemm_rm(b, 0, 0, N, I, O, dy, O, W, I, gemm_type(in), beta, dx, I, gemm_type(out_p));
}

extern "C" void gdn_cuda_linear_bwd_dw(gdn_cuda_blas *b, gdn_cuda_precision in, float *dW,
                                       const void *dy, const void *x, int N, int I, int O) {
    if (N <= 0 || I <= 0 || O <= 0) return;
    gemm_rm(b, 1, 0, O, I, N, dy, O, x, I, gemm_type(in), 1.0f, dW, I, CUDA_R_32F);
}
