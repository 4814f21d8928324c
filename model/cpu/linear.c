/* Bias-free linear layer y = x W^T with W in the [out, in] layout, on top of CBLAS gemm.
 *
 * The products are split into row blocks over OpenMP threads, each calling a single-threaded
 * gemm: one thread pool for the whole CPU path. (Letting OpenBLAS's own pthreads run next to
 * the OpenMP pool oversubscribes the cores: both spin-wait, and a training step ran 2x slower.)
 * Each output row block is computed by one thread with the full inner sum, so the result does
 * not depend on the number of threads. */
#include "model/real.h"
#include "model/cpu/ops_cpu.h"

#include <omp.h>
#include <string.h>

/* C[M,N] = alpha op(A) op(B) + beta C, rows of C split over threads. */
static void gemm_row_blocks(int transA, int transB, int M, int N, int K, real alpha, const real *A,
                            int lda, const real *B, int ldb, real beta, real *C, int ldc) {
    const int min_rows = 32;
    int nt = omp_get_max_threads();
    if (nt > M / min_rows) nt = M / min_rows;
    if (nt <= 1) {
        R(gdn_gemm)(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int saved = openblas_get_num_threads();
    if (saved != 1) openblas_set_num_threads(1);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        int m0 = (int)((long)M * t / nt), m1 = (int)((long)M * (t + 1) / nt);
        const real *a = transA ? A + m0 : A + (size_t)m0 * lda;
        R(gdn_gemm)(transA, transB, m1 - m0, N, K, alpha, a, lda, B, ldb, beta, C + (size_t)m0 * ldc, ldc);
    }
    if (saved != 1) openblas_set_num_threads(saved);
}

void R(gdn_linear_fwd)(real *y /* [N,O] */, const real *x /* [N,I] */, const real *W /* [O,I] */,
                       int N, int I, int O) {
    if (N <= 0 || O <= 0) return;
    if (I <= 0) { /* empty sum; BLAS rejects lda = 0 */
        memset(y, 0, (size_t)N * O * sizeof(real));
        return;
    }
    gemm_row_blocks(0, 1, N, O, I, 1, x, I, W, I, 0, y, O);
}

void R(gdn_linear_bwd)(real *dx /* [N,I] or NULL */, real *dW /* [O,I] */,
                       const real *dy /* [N,O] */, const real *x /* [N,I] */,
                       const real *W /* [O,I] */, int N, int I, int O) {
    if (N <= 0 || I <= 0) return;
    if (O <= 0) {
        if (dx) memset(dx, 0, (size_t)N * I * sizeof(real));
        return;
    }
    if (dx) gemm_row_blocks(0, 0, N, I, O, 1, dy, O, W, I, 0, dx, I); /* dx = dy W */
    gemm_row_blocks(1, 0, O, I, N, 1, dy, O, x, I, 1, dW, I);         /* dW += dy^T x */
}
