/* Precision selection for the CPU kernels and model.
 *
 * Every file under model/cpu/ is compiled twice: with GDN_REAL_BITS=32 (training) and
 * GDN_REAL_BITS=64 (finite-difference and reference tests). Inside those files `real` is the
 * scalar type and R(name) gives the precision-suffixed public name (name_f32 / name_f64).
 * Callers outside model/cpu/ use the explicit names declared in model/cpu/ops_cpu.h. */
#ifndef GDN_REAL_H
#define GDN_REAL_H

#include <cblas.h>
#include <math.h>

/* OpenBLAS's cblas.h includes <complex.h>, whose macro I (the imaginary unit) would turn every
 * dimension named I (e.g. gdn_linear_*'s input width) into a syntax error. */
#undef I

#ifndef GDN_REAL_BITS
#error "model/real.h is for files compiled with GDN_REAL_BITS=32 or 64"
#endif

#if GDN_REAL_BITS == 64
typedef double real;
#define R(name) name##_f64
#define RSQRT(x) (1.0 / sqrt(x))
#define REXP exp
#define RLOG log
#define RLOG1P log1p
#define RSQRT_ sqrt
#define CBLAS_GEMM cblas_dgemm
#define CBLAS_AXPY cblas_daxpy
#else
typedef float real;
#define R(name) name##_f32
#define RSQRT(x) (1.0f / sqrtf(x))
#define REXP expf
#define RLOG logf
#define RLOG1P log1pf
#define RSQRT_ sqrtf
#define CBLAS_GEMM cblas_sgemm
#define CBLAS_AXPY cblas_saxpy
#endif

/* Row-major C[M,N] = alpha * op(A) op(B) + beta * C, op = transpose when the flag is set. */
static inline void R(gdn_gemm)(int transA, int transB, int M, int N, int K, real alpha,
                               const real *A, int lda, const real *B, int ldb, real beta, real *C,
                               int ldc) {
    CBLAS_GEMM(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
               M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

#endif
