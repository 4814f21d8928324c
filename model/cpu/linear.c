/* Bias-free linear layer y = x W^T with W in the [out, in] layout, on top of CBLAS gemm. */
#include "model/real.h"
#include "model/cpu/ops_cpu.h"

#include <string.h>

void R(gdn_linear_fwd)(real *y /* [N,O] */, const real *x /* [N,I] */, const real *W /* [O,I] */,
                       int N, int I, int O) {
    if (N <= 0 || O <= 0) return;
    if (I <= 0) { /* empty sum; BLAS rejects lda = 0 */
        memset(y, 0, (size_t)N * O * sizeof(real));
        return;
    }
    R(gdn_gemm)(0, 1, N, O, I, 1, x, I, W, I, 0, y, O);
}

void R(gdn_linear_bwd)(real *dx /* [N,I] or NULL */, real *dW /* [O,I] */,
                       const real *dy /* [N,O] */, const real *x /* [N,I] */,
                       const real *W /* [O,I] */, int N, int I, int O) {
    if (N <= 0 || I <= 0) return;
    if (O <= 0) {
        if (dx) memset(dx, 0, (size_t)N * I * sizeof(real));
        return;
    }
    if (dx) R(gdn_gemm)(0, 0, N, I, O, 1, dy, O, W, I, 0, dx, I); /* dx = dy W */
    R(gdn_gemm)(1, 0, O, I, N, 1, dy, O, x, I, 1, dW, I);         /* dW += dy^T x */
}
