/* Elementwise activations and the per-head gates of the GDN mixer. */
#include "model/real.h"
#include "model/cpu/ops_cpu.h"
#include "model/cpu/sigmoid.h"
#include "model/check.h"

#include <stdlib.h>

#define ACT_PAR_MIN 65536L
/* Rows per partial of the decay-gate parameter gradients (summed in block order, so the
 * result does not depend on the thread count). */
#define ACT_ROW_BLOCK 256

/* softplus(x) = log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow for large x, and no
 * loss of the tiny result for very negative x. */
static inline real act_softplus(real x) {
    real ax = x >= 0 ? x : -x;
    return (x > 0 ? x : 0) + RLOG1P(REXP(-ax));
}

void R(gdn_silu_fwd)(real *y /* [n] */, const real *x /* [n] */, size_t n) {
#pragma omp parallel for schedule(static) if (n > ACT_PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] = R(gdn_silu)(x[i]);
}

void R(gdn_silu_bwd)(real *dx /* [n] */, const real *dy /* [n] */, const real *x /* [n] */,
                     size_t n) {
#pragma omp parallel for schedule(static) if (n > ACT_PAR_MIN)
    for (size_t i = 0; i < n; i++) dx[i] = dy[i] * R(gdn_dsilu)(x[i]);
}

void R(gdn_swiglu_fwd)(real *h /* [n] */, const real *a /* [n] */, const real *b /* [n] */,
                       size_t n) {
#pragma omp parallel for schedule(static) if (n > ACT_PAR_MIN)
    for (size_t i = 0; i < n; i++) h[i] = R(gdn_silu)(a[i]) * b[i];
}

void R(gdn_swiglu_bwd)(real *da /* [n] */, real *db /* [n] */, const real *dh /* [n] */,
                       const real *a /* [n] */, const real *b /* [n] */, size_t n) {
#pragma omp parallel for schedule(static) if (n > ACT_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        real s = R(gdn_sigmoid)(a[i]), g = dh[i];
        da[i] = g * b[i] * s * (1 + a[i] * (1 - s));
        db[i] = g * a[i] * s;
    }
}

void R(gdn_decay_gate_fwd)(real *g /* [N,H] */, const real *a /* [N,H] */,
                           const real *A_log /* [H] */, const real *dt_bias /* [H] */, int N,
                           int H) {
#pragma omp parallel for schedule(static) if ((long)N * H > ACT_PAR_MIN)
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            size_t i = (size_t)n * H + h;
            g[i] = -REXP(A_log[h]) * act_softplus(a[i] + dt_bias[h]);
        }
}

/* g = -e^A softplus(a + dt):  da = -dg e^A sigmoid(a + dt),  dA += dg g,  ddt += da. */
void R(gdn_decay_gate_bwd)(real *da /* [N,H] */, real *dA_log /* [H] */, real *ddt_bias /* [H] */,
                           const real *dg /* [N,H] */, const real *a /* [N,H] */,
                           const real *A_log /* [H] */, const real *dt_bias /* [H] */, int N,
                           int H) {
    int nblk = (N + ACT_ROW_BLOCK - 1) / ACT_ROW_BLOCK;
    double *part = GDN_CALLOC((size_t)nblk * 2 * H, sizeof(double)); /* [nblk, {dA, ddt}, H] */
#pragma omp parallel for schedule(static) if ((long)N * H > ACT_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        double *pA = part + (size_t)blk * 2 * H, *pdt = pA + H;
        int n1 = (blk + 1) * ACT_ROW_BLOCK < N ? (blk + 1) * ACT_ROW_BLOCK : N;
        for (int n = blk * ACT_ROW_BLOCK; n < n1; n++)
            for (int h = 0; h < H; h++) {
                size_t i = (size_t)n * H + h;
                real x = a[i] + dt_bias[h], eA = REXP(A_log[h]);
                real d = -dg[i] * eA * R(gdn_sigmoid)(x);
                pA[h] -= (double)dg[i] * eA * act_softplus(x);
                pdt[h] += d;
                da[i] = d;
            }
    }
    for (int h = 0; h < H; h++) {
        double sA = 0, sdt = 0;
        for (int blk = 0; blk < nblk; blk++) {
            sA += part[(size_t)blk * 2 * H + h];
            sdt += part[(size_t)blk * 2 * H + H + h];
        }
        dA_log[h] += (real)sA;
        ddt_bias[h] += (real)sdt;
    }
    free(part);
}

void R(gdn_beta_fwd)(real *beta /* [n] */, const real *b /* [n] */, real scale, size_t n) {
#pragma omp parallel for schedule(static) if (n > ACT_PAR_MIN)
    for (size_t i = 0; i < n; i++) beta[i] = scale * R(gdn_sigmoid)(b[i]);
}

/* beta = scale s:  dbeta/db = scale s (1 - s) = beta (1 - beta / scale). */
void R(gdn_beta_bwd)(real *db /* [n] */, const real *dbeta /* [n] */, const real *beta /* [n] */,
                     real scale, size_t n) {
    GDN_ASSERT(scale != 0);
#pragma omp parallel for schedule(static) if (n > ACT_PAR_MIN)
    for (size_t i = 0; i < n; i++) db[i] = dbeta[i] * beta[i] * (1 - beta[i] / scale);
}
