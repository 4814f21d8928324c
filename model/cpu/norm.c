/* Row normalisations: RMSNorm, per-head L2 norm (q, k) and the gated output RMSNorm.
 *
 * Row sums are accumulated in double. The weight gradient dw is a sum over rows: each fixed
 * block of NORM_ROW_BLOCK rows writes its own partial, and the partials are added in block
 * order, so dw is bitwise the same for any thread count. */
#include "model/real.h"
#include "model/cpu/ops_cpu.h"
#include "model/cpu/sigmoid.h"
#include "model/check.h"

#include <stdlib.h>

#define NORM_ROW_BLOCK 64
#define NORM_L2_EPS 1e-6
/* Below this many elements a thread team costs more than it saves. */
#define NORM_PAR_MIN 32768L

/* dw[j] += sum_b part[b, j] over nblk blocks, in block order. part: [nblk, D]. */
static void norm_reduce_partials(real *dw /* [D] */, const double *part, int nblk, int D) {
#pragma omp parallel for schedule(static) if ((long)nblk * D > NORM_PAR_MIN)
    for (int j = 0; j < D; j++) {
        double s = 0;
        for (int b = 0; b < nblk; b++) s += part[(size_t)b * D + j];
        dw[j] += (real)s;
    }
}

/* Sum of squares of one row x [D], accumulated in double. */
static double norm_sumsq(const real *x /* [D] */, int D) {
    double ss = 0;
    for (int j = 0; j < D; j++) ss += (double)x[j] * x[j];
    return ss;
}

/* The RMSNorm backward of one row, given du (the gradient reaching x r w; may alias dx) and
 * dot = sum_i du_i w_i x_i: dx = r w du - x r^3 dot / D, and the row's dw terms du x r are
 * added to the block partial pb. */
static void norm_rms_row_bwd(real *dx /* [D] */, double *pb /* [D] */, const real *du /* [D] */,
                             const real *x /* [D] */, const real *w /* [D] */, real r, double dot,
                             int D) {
    real c = (real)((double)r * r * r * dot / D);
    for (int j = 0; j < D; j++) {
        real d = du[j];
        dx[j] = r * w[j] * d - x[j] * c;
        pb[j] += (double)d * x[j] * r;
    }
}

void R(gdn_rmsnorm_fwd)(real *y /* [N,D] */, real *rstd /* [N] */, const real *x /* [N,D] */,
                        const real *w /* [D] */, int N, int D, real eps) {
#pragma omp parallel for schedule(static) if ((long)N * D > NORM_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const real *xr = x + (size_t)n * D;
        real *yr = y + (size_t)n * D;
        real r = (real)(1.0 / sqrt(norm_sumsq(xr, D) / D + eps));
        rstd[n] = r;
        for (int j = 0; j < D; j++) yr[j] = xr[j] * r * w[j];
    }
}

/* y = x r w with r = (mean(x^2) + eps)^-1/2:
 *   dx_j = r w_j dy_j - x_j r^3 / D * sum_i dy_i w_i x_i,   dw_j += sum_n dy_j x_j r. */
void R(gdn_rmsnorm_bwd)(real *dx /* [N,D] */, real *dw /* [D] */, const real *dy /* [N,D] */,
                        const real *x /* [N,D] */, const real *w /* [D] */,
                        const real *rstd /* [N] */, int N, int D) {
    int nblk = (N + NORM_ROW_BLOCK - 1) / NORM_ROW_BLOCK;
    double *part = GDN_CALLOC((size_t)nblk * D, sizeof(double));
#pragma omp parallel for schedule(static) if ((long)N * D > NORM_PAR_MIN)
    for (int b = 0; b < nblk; b++) {
        double *pb = part + (size_t)b * D;
        int n1 = (b + 1) * NORM_ROW_BLOCK < N ? (b + 1) * NORM_ROW_BLOCK : N;
        for (int n = b * NORM_ROW_BLOCK; n < n1; n++) {
            const real *xr = x + (size_t)n * D, *dyr = dy + (size_t)n * D;
            real *dxr = dx + (size_t)n * D;
            double dot = 0;
            for (int j = 0; j < D; j++) dot += (double)dyr[j] * w[j] * xr[j];
            norm_rms_row_bwd(dxr, pb, dyr, xr, w, rstd[n], dot, D);
        }
    }
    norm_reduce_partials(dw, part, nblk, D);
    free(part);
}

void R(gdn_l2norm_fwd)(real *y /* [N,D] */, real *r /* [N] */, const real *x /* [N,D] */, int N,
                       int D) {
#pragma omp parallel for schedule(static) if ((long)N * D > NORM_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const real *xr = x + (size_t)n * D;
        real *yr = y + (size_t)n * D;
        real rn = (real)(1.0 / sqrt(norm_sumsq(xr, D) + NORM_L2_EPS));
        r[n] = rn;
        for (int j = 0; j < D; j++) yr[j] = xr[j] * rn;
    }
}

/* y = x r with r = (|x|^2 + eps)^-1/2:  dx = r (dy - y (dy . y)). */
void R(gdn_l2norm_bwd)(real *dx /* [N,D] */, const real *dy /* [N,D] */,
                       const real *y /* [N,D] */, const real *r /* [N] */, int N, int D) {
#pragma omp parallel for schedule(static) if ((long)N * D > NORM_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const real *dyr = dy + (size_t)n * D, *yr = y + (size_t)n * D;
        real *dxr = dx + (size_t)n * D;
        double dot = 0;
        for (int j = 0; j < D; j++) dot += (double)dyr[j] * yr[j];
        real rn = r[n], d = (real)dot;
        for (int j = 0; j < D; j++) dxr[j] = rn * (dyr[j] - yr[j] * d);
    }
}

void R(gdn_gated_rmsnorm_fwd)(real *y /* [N,D] */, real *rstd /* [N] */,
                              const real *x /* [N,D] */, const real *z /* [N,D] */,
                              const real *w /* [D] */, int N, int D, real eps) {
#pragma omp parallel for schedule(static) if ((long)N * D > NORM_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const real *xr = x + (size_t)n * D, *zr = z + (size_t)n * D;
        real *yr = y + (size_t)n * D;
        real r = (real)(1.0 / sqrt(norm_sumsq(xr, D) / D + eps));
        rstd[n] = r;
        for (int j = 0; j < D; j++) yr[j] = xr[j] * r * w[j] * R(gdn_silu)(zr[j]);
    }
}

/* y = u s with u = x r w (RMSNorm) and s = silu(z): dz = dy u silu'(z), and the RMSNorm
 * backward above applied to du = dy s. */
void R(gdn_gated_rmsnorm_bwd)(real *dx /* [N,D] */, real *dz /* [N,D] */, real *dw /* [D] */,
                              const real *dy /* [N,D] */, const real *x /* [N,D] */,
                              const real *z /* [N,D] */, const real *w /* [D] */,
                              const real *rstd /* [N] */, int N, int D) {
    int nblk = (N + NORM_ROW_BLOCK - 1) / NORM_ROW_BLOCK;
    double *part = GDN_CALLOC((size_t)nblk * D, sizeof(double));
#pragma omp parallel for schedule(static) if ((long)N * D > NORM_PAR_MIN)
    for (int b = 0; b < nblk; b++) {
        double *pb = part + (size_t)b * D;
        int n1 = (b + 1) * NORM_ROW_BLOCK < N ? (b + 1) * NORM_ROW_BLOCK : N;
        for (int n = b * NORM_ROW_BLOCK; n < n1; n++) {
            size_t o = (size_t)n * D;
            const real *xr = x + o, *zr = z + o, *dyr = dy + o;
            real *dxr = dx + o, *dzr = dz + o;
            real r = rstd[n];
            double dot = 0;
            for (int j = 0; j < D; j++) {
                real s = R(gdn_sigmoid)(zr[j]);
                real du = dyr[j] * zr[j] * s;
                dxr[j] = du; /* parked until the row's dot product is known */
                dot += (double)du * w[j] * xr[j];
                dzr[j] = dyr[j] * xr[j] * r * w[j] * s * (1 + zr[j] * (1 - s));
            }
            norm_rms_row_bwd(dxr, pb, dxr, xr, w, r, dot, D);
        }
    }
    norm_reduce_partials(dw, part, nblk, D);
    free(part);
}
