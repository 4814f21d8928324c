/* Unit tests of the CPU ops other than the delta rule.
 *
 * Every backward is checked in fp64 against central finite differences of the scalar loss
 * L = sum(output * fixed random weights), with respect to every input and parameter; every
 * forward against a direct evaluation of its definition; the fp32 build against the fp64 one;
 * the overwrite (inputs) / accumulate (parameters) rule; and bitwise determinism across thread
 * counts. Each check prints its measured error. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/cpu/ops_cpu.h"
#include "tests/ref/fd.h"

#define FD_EPS 1e-6
#define FD_TOL 1e-6   /* norm-wise relative error, fp64 backward vs finite differences */
#define F32_TOL 1e-5  /* fp32 build vs fp64 build */
#define REF_TOL 1e-13 /* fp64 forward vs its definition (only the summation order differs) */

/* ---- helpers --------------------------------------------------------------------------------- */

static double *vec(size_t n, double lo, double hi, unsigned long long seed) {
    double *v = malloc((n ? n : 1) * sizeof *v);
    assert_non_null(v);
    fd_fill_uniform(v, n, lo, hi, seed);
    return v;
}

/* NaN-filled buffer: an output that is not overwritten makes the check fail. */
static double *vec_nan(size_t n) {
    double *v = vec(n, 0, 0, 0);
    for (size_t i = 0; i < n; i++) v[i] = NAN;
    return v;
}

static double *dup(const double *x, size_t n) {
    double *v = vec(n, 0, 0, 0);
    memcpy(v, x, n * sizeof *v);
    return v;
}

static float *f32_of(const double *x, size_t n) {
    float *v = malloc((n ? n : 1) * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) v[i] = (float)x[i];
    return v;
}

static float *f32_alloc(size_t n) {
    float *v = calloc(n ? n : 1, sizeof *v);
    assert_non_null(v);
    return v;
}

static double wsum(const double *y, const double *w, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += y[i] * w[i];
    return s;
}

/* g -= base: turns an accumulated parameter gradient back into the gradient itself. */
static void unaccumulate(double *g, const double *base, size_t n) {
    for (size_t i = 0; i < n; i++) g[i] -= base[i];
}

static void expect_fd_eps(const char *op, const char *wrt, fd_loss_fn f, void *ctx, double *x,
                          const double *grad, size_t n, double eps) {
    double err = fd_check(f, ctx, x, grad, n, n, eps);
    printf("%-22s fd  d%-8s rel err %.2e\n", op, wrt, err);
    assert_true(err < FD_TOL);
}

static void expect_fd(const char *op, const char *wrt, fd_loss_fn f, void *ctx, double *x,
                      const double *grad, size_t n) {
    expect_fd_eps(op, wrt, f, ctx, x, grad, n, FD_EPS);
}

static void expect_ref(const char *op, const char *what, const double *a, const double *ref,
                       size_t n) {
    double err = fd_rel_err(a, ref, n);
    printf("%-22s ref %-9s rel err %.2e\n", op, what, err);
    assert_true(err < REF_TOL);
}

static void expect_f32(const char *op, const char *what, const float *a, const double *ref,
                       size_t n) {
    double err = fd_rel_err_f32(a, ref, n);
    printf("%-22s f32 %-9s rel err %.2e\n", op, what, err);
    assert_true(err < F32_TOL);
}

/* Exact equality, NaN-safe: for aliasing variants and NULL-argument variants of one call. */
static void expect_same(const char *op, const char *what, const void *a, const void *b,
                        size_t bytes) {
    int same = memcmp(a, b, bytes) == 0;
    printf("%-22s %-30s %s\n", op, what, same ? "identical" : "DIFFERENT");
    assert_true(same);
}

static double sigmoid_ref(double x) { return 1.0 / (1.0 + exp(-x)); }
static double softplus_ref(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }

/* ---- embedding ------------------------------------------------------------------------------- */

typedef struct {
    const int *tok;
    double *table, *y;
    const double *wy;
    int N, D;
} embed_ctx;

static double embed_loss(void *p) {
    embed_ctx *c = p;
    gdn_embed_fwd_f64(c->y, c->tok, c->table, c->N, c->D);
    return wsum(c->y, c->wy, (size_t)c->N * c->D);
}

static void test_embed(void **state) {
    (void)state;
    enum { N = 7, D = 5, VOCAB = 6 };
    const int tok[N] = {3, 1, 3, 0, 5, 3, 1}; /* repeats: the backward must add them up */
    double *table = vec(VOCAB * D, -1, 1, 11), *wy = vec(N * D, -1, 1, 12), *y = vec_nan(N * D);
    embed_ctx c = {tok, table, y, wy, N, D};

    embed_loss(&c);
    double *ref = vec(N * D, 0, 0, 0);
    for (int n = 0; n < N; n++)
        for (int d = 0; d < D; d++) ref[n * D + d] = table[tok[n] * D + d];
    expect_ref("embed", "out", y, ref, N * D);

    double *base = vec(VOCAB * D, -1, 1, 13), *dtable = dup(base, VOCAB * D);
    gdn_embed_bwd_f64(dtable, tok, wy, N, D);
    unaccumulate(dtable, base, VOCAB * D);
    expect_fd("embed", "table", embed_loss, &c, table, dtable, VOCAB * D);

    float *tf = f32_of(table, VOCAB * D), *yf = f32_alloc(N * D);
    gdn_embed_fwd_f32(yf, tok, tf, N, D);
    expect_f32("embed", "out", yf, y, N * D);

    free(table), free(wy), free(y), free(ref), free(base), free(dtable), free(tf), free(yf);
}

/* ---- linear ---------------------------------------------------------------------------------- */

typedef struct {
    double *x, *W, *y;
    const double *wy;
    int N, I, O;
} linear_ctx;

static double linear_loss(void *p) {
    linear_ctx *c = p;
    gdn_linear_fwd_f64(c->y, c->x, c->W, c->N, c->I, c->O);
    return wsum(c->y, c->wy, (size_t)c->N * c->O);
}

static void test_linear(void **state) {
    (void)state;
    enum { N = 5, I = 7, O = 4 };
    double *x = vec(N * I, -1, 1, 21), *W = vec(O * I, -1, 1, 22), *wy = vec(N * O, -1, 1, 23);
    double *y = vec_nan(N * O);
    linear_ctx c = {x, W, y, wy, N, I, O};

    linear_loss(&c);
    double *ref = vec(N * O, 0, 0, 0);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++)
            for (int i = 0; i < I; i++) ref[n * O + o] += x[n * I + i] * W[o * I + i];
    expect_ref("linear", "y", y, ref, N * O);

    double *dx = vec_nan(N * I), *base = vec(O * I, -1, 1, 24), *dW = dup(base, O * I);
    gdn_linear_bwd_f64(dx, dW, wy, x, W, N, I, O);
    double *dW_nodx = dup(base, O * I);
    gdn_linear_bwd_f64(NULL, dW_nodx, wy, x, W, N, I, O);
    expect_same("linear", "dW (dx NULL)", dW_nodx, dW, sizeof(double) * O * I);
    unaccumulate(dW, base, O * I);
    expect_fd("linear", "x", linear_loss, &c, x, dx, N * I);
    expect_fd("linear", "W", linear_loss, &c, W, dW, O * I);

    float *xf = f32_of(x, N * I), *Wf = f32_of(W, O * I), *yf = f32_alloc(N * O);
    gdn_linear_fwd_f32(yf, xf, Wf, N, I, O);
    expect_f32("linear", "y", yf, y, N * O);

    free(x), free(W), free(wy), free(y), free(ref), free(dx), free(base), free(dW), free(dW_nodx);
    free(xf), free(Wf), free(yf);
}

/* ---- RMSNorm --------------------------------------------------------------------------------- */

typedef struct {
    double *x, *w, *y, *rstd;
    const double *wy;
    int N, D;
    double eps;
} rmsnorm_ctx;

static double rmsnorm_loss(void *p) {
    rmsnorm_ctx *c = p;
    gdn_rmsnorm_fwd_f64(c->y, c->rstd, c->x, c->w, c->N, c->D, c->eps);
    return wsum(c->y, c->wy, (size_t)c->N * c->D);
}

static void test_rmsnorm(void **state) {
    (void)state;
    enum { N = 6, D = 10 };
    const double eps = 1e-5;
    double *x = vec(N * D, -1, 1, 31), *w = vec(D, 0.5, 1.5, 32), *wy = vec(N * D, -1, 1, 33);
    double *y = vec_nan(N * D), *rstd = vec_nan(N);
    for (int j = 0; j < D; j++) x[j] *= 1e-3; /* a small row, where eps matters */
    rmsnorm_ctx c = {x, w, y, rstd, wy, N, D, eps};

    rmsnorm_loss(&c);
    double *ref = vec(N * D, 0, 0, 0), *rref = vec(N, 0, 0, 0);
    for (int n = 0; n < N; n++) {
        double ms = 0;
        for (int j = 0; j < D; j++) ms += x[n * D + j] * x[n * D + j] / D;
        rref[n] = 1 / sqrt(ms + eps);
        for (int j = 0; j < D; j++) ref[n * D + j] = x[n * D + j] * rref[n] * w[j];
    }
    expect_ref("rmsnorm", "y", y, ref, N * D);
    expect_ref("rmsnorm", "rstd", rstd, rref, N);

    double *dx = vec_nan(N * D), *base = vec(D, -1, 1, 34), *dw = dup(base, D);
    gdn_rmsnorm_bwd_f64(dx, dw, wy, x, w, rstd, N, D);
    unaccumulate(dw, base, D);
    expect_fd("rmsnorm", "x", rmsnorm_loss, &c, x, dx, N * D);
    expect_fd("rmsnorm", "w", rmsnorm_loss, &c, w, dw, D);

    float *xf = f32_of(x, N * D), *wf = f32_of(w, D), *wyf = f32_of(wy, N * D);
    float *yf = f32_alloc(N * D), *rf = f32_alloc(N), *dxf = f32_alloc(N * D), *dwf = f32_alloc(D);
    gdn_rmsnorm_fwd_f32(yf, rf, xf, wf, N, D, (float)eps);
    expect_f32("rmsnorm", "y", yf, y, N * D);
    gdn_rmsnorm_bwd_f32(dxf, dwf, wyf, xf, wf, rf, N, D);
    expect_f32("rmsnorm", "dx", dxf, dx, N * D);
    expect_f32("rmsnorm", "dw", dwf, dw, D);

    free(x), free(w), free(wy), free(y), free(rstd), free(ref), free(rref), free(dx), free(base);
    free(dw), free(xf), free(wf), free(wyf), free(yf), free(rf), free(dxf), free(dwf);
}

/* ---- L2 norm --------------------------------------------------------------------------------- */

typedef struct {
    double *x, *y, *r;
    const double *wy;
    int N, D;
} l2norm_ctx;

static double l2norm_loss(void *p) {
    l2norm_ctx *c = p;
    gdn_l2norm_fwd_f64(c->y, c->r, c->x, c->N, c->D);
    return wsum(c->y, c->wy, (size_t)c->N * c->D);
}

static void test_l2norm(void **state) {
    (void)state;
    enum { N = 6, D = 8 };
    double *x = vec(N * D, -1, 1, 41), *wy = vec(N * D, -1, 1, 42);
    double *y = vec_nan(N * D), *r = vec_nan(N);
    for (int j = 0; j < D; j++) x[D + j] *= 1e-2; /* |x|^2 ~ 3e-4: the 1e-6 inside shows */
    l2norm_ctx c = {x, y, r, wy, N, D};

    l2norm_loss(&c);
    double *ref = vec(N * D, 0, 0, 0), *rref = vec(N, 0, 0, 0);
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int j = 0; j < D; j++) ss += x[n * D + j] * x[n * D + j];
        rref[n] = 1 / sqrt(ss + 1e-6);
        for (int j = 0; j < D; j++) ref[n * D + j] = x[n * D + j] * rref[n];
    }
    expect_ref("l2norm", "y", y, ref, N * D);
    expect_ref("l2norm", "r", r, rref, N);

    double *dx = vec_nan(N * D);
    gdn_l2norm_bwd_f64(dx, wy, y, r, N, D);
    expect_fd("l2norm", "x", l2norm_loss, &c, x, dx, N * D);

    float *xf = f32_of(x, N * D), *wyf = f32_of(wy, N * D);
    float *yf = f32_alloc(N * D), *rf = f32_alloc(N), *dxf = f32_alloc(N * D);
    gdn_l2norm_fwd_f32(yf, rf, xf, N, D);
    expect_f32("l2norm", "y", yf, y, N * D);
    gdn_l2norm_bwd_f32(dxf, wyf, yf, rf, N, D);
    expect_f32("l2norm", "dx", dxf, dx, N * D);

    free(x), free(wy), free(y), free(r), free(ref), free(rref), free(dx);
    free(xf), free(wyf), free(yf), free(rf), free(dxf);
}

/* ---- gated RMSNorm --------------------------------------------------------------------------- */

typedef struct {
    double *x, *z, *w, *y, *rstd;
    const double *wy;
    int N, D;
    double eps;
} gnorm_ctx;

static double gnorm_loss(void *p) {
    gnorm_ctx *c = p;
    gdn_gated_rmsnorm_fwd_f64(c->y, c->rstd, c->x, c->z, c->w, c->N, c->D, c->eps);
    return wsum(c->y, c->wy, (size_t)c->N * c->D);
}

static void test_gated_rmsnorm(void **state) {
    (void)state;
    enum { N = 6, D = 8 }; /* N = 3 tokens x 2 heads */
    const double eps = 1e-5;
    double *x = vec(N * D, -1, 1, 51), *z = vec(N * D, -4, 4, 52), *w = vec(D, 0.5, 1.5, 53);
    double *wy = vec(N * D, -1, 1, 54), *y = vec_nan(N * D), *rstd = vec_nan(N);
    gnorm_ctx c = {x, z, w, y, rstd, wy, N, D, eps};

    gnorm_loss(&c);
    double *ref = vec(N * D, 0, 0, 0);
    for (int n = 0; n < N; n++) {
        double ms = 0;
        for (int j = 0; j < D; j++) ms += x[n * D + j] * x[n * D + j] / D;
        for (int j = 0; j < D; j++) {
            double zz = z[n * D + j];
            ref[n * D + j] = x[n * D + j] / sqrt(ms + eps) * w[j] * zz * sigmoid_ref(zz);
        }
    }
    expect_ref("gated_rmsnorm", "y", y, ref, N * D);

    double *dx = vec_nan(N * D), *dz = vec_nan(N * D), *base = vec(D, -1, 1, 55);
    double *dw = dup(base, D);
    gdn_gated_rmsnorm_bwd_f64(dx, dz, dw, wy, x, z, w, rstd, N, D);
    unaccumulate(dw, base, D);
    expect_fd("gated_rmsnorm", "x", gnorm_loss, &c, x, dx, N * D);
    expect_fd("gated_rmsnorm", "z", gnorm_loss, &c, z, dz, N * D);
    expect_fd("gated_rmsnorm", "w", gnorm_loss, &c, w, dw, D);

    float *xf = f32_of(x, N * D), *zf = f32_of(z, N * D), *wf = f32_of(w, D);
    float *wyf = f32_of(wy, N * D), *yf = f32_alloc(N * D), *rf = f32_alloc(N);
    float *dxf = f32_alloc(N * D), *dzf = f32_alloc(N * D), *dwf = f32_alloc(D);
    gdn_gated_rmsnorm_fwd_f32(yf, rf, xf, zf, wf, N, D, (float)eps);
    expect_f32("gated_rmsnorm", "y", yf, y, N * D);
    gdn_gated_rmsnorm_bwd_f32(dxf, dzf, dwf, wyf, xf, zf, wf, rf, N, D);
    expect_f32("gated_rmsnorm", "dx", dxf, dx, N * D);
    expect_f32("gated_rmsnorm", "dz", dzf, dz, N * D);
    expect_f32("gated_rmsnorm", "dw", dwf, dw, D);

    free(x), free(z), free(w), free(wy), free(y), free(rstd), free(ref), free(dx), free(dz);
    free(base), free(dw), free(xf), free(zf), free(wf), free(wyf), free(yf), free(rf), free(dxf);
    free(dzf), free(dwf);
}

/* ---- causal depthwise convolution ------------------------------------------------------------ */

typedef struct {
    double *x, *w, *halo, *y; /* halo may be NULL */
    const double *wy;
    int B, T, C, W;
} conv_ctx;

static double conv_loss(void *p) {
    conv_ctx *c = p;
    gdn_conv_fwd_f64(c->y, c->x, c->w, c->halo, NULL, c->B, c->T, c->C, c->W);
    return wsum(c->y, c->wy, (size_t)c->B * c->T * c->C);
}

/* y[b,t,c] = sum_j w[c,j] u[b, t-(W-1)+j, c], u = [halo; x] along time (zeros without halo). */
static void conv_ref(double *y, const double *x, const double *w, const double *halo, int B, int T,
                     int C, int W) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                double s = 0;
                for (int j = 0; j < W; j++) {
                    int tt = t - (W - 1) + j;
                    double u = tt >= 0 ? x[(b * T + tt) * C + c]
                               : halo  ? halo[(b * (W - 1) + (W - 1) + tt) * C + c]
                                       : 0.0;
                    s += w[c * W + j] * u;
                }
                y[(b * T + t) * C + c] = s;
            }
}

static void conv_case(const char *name, int B, int T, int C, int W, int with_halo,
                      unsigned long long seed) {
    size_t nx = (size_t)B * T * C, nw = (size_t)C * W, nh = (size_t)B * (W - 1) * C;
    double *x = vec(nx, -1, 1, seed), *w = vec(nw, -1, 1, seed + 1);
    double *halo = with_halo ? vec(nh, -1, 1, seed + 2) : NULL;
    double *wy = vec(nx, -1, 1, seed + 3), *y = vec_nan(nx);
    conv_ctx c = {x, w, halo, y, wy, B, T, C, W};

    conv_loss(&c);
    double *ref = vec(nx, 0, 0, 0);
    conv_ref(ref, x, w, halo, B, T, C, W);
    expect_ref(name, "y", y, ref, nx);

    double *dx = vec_nan(nx), *dhalo = vec_nan(nh), *base = vec(nw, -1, 1, seed + 4);
    double *dw = dup(base, nw);
    gdn_conv_bwd_f64(dx, dw, dhalo, wy, x, w, halo, NULL, B, T, C, W);
    double *dx2 = vec_nan(nx), *dw2 = dup(base, nw);
    gdn_conv_bwd_f64(dx2, dw2, NULL, wy, x, w, halo, NULL, B, T, C, W);
    expect_same(name, "dhalo NULL", dx2, dx, nx * sizeof(double));
    expect_same(name, "dhalo NULL", dw2, dw, nw * sizeof(double));
    unaccumulate(dw, base, nw);
    expect_fd(name, "x", conv_loss, &c, x, dx, nx);
    expect_fd(name, "w", conv_loss, &c, w, dw, nw);
    if (with_halo) {
        expect_fd(name, "halo", conv_loss, &c, halo, dhalo, nh);
    } else { /* without a halo, dhalo is the gradient at an all-zero halo */
        double *zero = vec(nh, 0, 0, 0), *dhz = vec_nan(nh), *dwz = dup(base, nw);
        gdn_conv_bwd_f64(dx2, dwz, dhz, wy, x, w, zero, NULL, B, T, C, W);
        expect_same(name, "dhalo(zeros)", dhalo, dhz, nh * sizeof(double));
        free(zero), free(dhz), free(dwz);
    }

    float *xf = f32_of(x, nx), *wf = f32_of(w, nw), *hf = with_halo ? f32_of(halo, nh) : NULL;
    float *wyf = f32_of(wy, nx), *yf = f32_alloc(nx), *dxf = f32_alloc(nx);
    float *dwf = f32_alloc(nw), *dhf = f32_alloc(nh);
    gdn_conv_fwd_f32(yf, xf, wf, hf, NULL, B, T, C, W);
    expect_f32(name, "y", yf, y, nx);
    gdn_conv_bwd_f32(dxf, dwf, dhf, wyf, xf, wf, hf, NULL, B, T, C, W);
    expect_f32(name, "dx", dxf, dx, nx);
    expect_f32(name, "dw", dwf, dw, nw);
    expect_f32(name, "dhalo", dhf, dhalo, nh);

    free(x), free(w), free(halo), free(wy), free(y), free(ref), free(dx), free(dhalo), free(base);
    free(dw), free(dx2), free(dw2), free(xf), free(wf), free(hf), free(wyf), free(yf), free(dxf);
    free(dwf), free(dhf);
}

static void test_conv(void **state) {
    (void)state;
    conv_case("conv halo", 2, 7, 5, 4, 1, 61);
    conv_case("conv no halo", 2, 7, 5, 4, 0, 71);
    conv_case("conv T<W halo", 2, 2, 3, 4, 1, 81);
    conv_case("conv T<W no halo", 2, 2, 3, 4, 0, 91);
    conv_case("conv T=1 halo", 1, 1, 4, 4, 1, 101);
}

/* ---- SiLU, SwiGLU ---------------------------------------------------------------------------- */

typedef struct {
    double *a, *b, *y; /* b unused by silu */
    const double *wy;
    size_t n;
} ew_ctx;

static double silu_loss(void *p) {
    ew_ctx *c = p;
    gdn_silu_fwd_f64(c->y, c->a, c->n);
    return wsum(c->y, c->wy, c->n);
}

static double swiglu_loss(void *p) {
    ew_ctx *c = p;
    gdn_swiglu_fwd_f64(c->y, c->a, c->b, c->n);
    return wsum(c->y, c->wy, c->n);
}

static void test_silu_swiglu(void **state) {
    (void)state;
    enum { n = 40 };
    double *a = vec(n, -6, 6, 111), *b = vec(n, -2, 2, 112), *wy = vec(n, -1, 1, 113);
    a[0] = 40, a[1] = -40, a[2] = 800, a[3] = -800; /* saturated: no inf or NaN */
    double *y = vec_nan(n), *ref = vec(n, 0, 0, 0);
    ew_ctx c = {a, b, y, wy, n};

    silu_loss(&c);
    for (int i = 0; i < n; i++) ref[i] = a[i] * sigmoid_ref(a[i]);
    expect_ref("silu", "y", y, ref, n);
    double *inplace = dup(a, n);
    gdn_silu_fwd_f64(inplace, inplace, n);
    expect_same("silu", "y aliasing x", inplace, y, n * sizeof(double));
    double *da = vec_nan(n);
    gdn_silu_bwd_f64(da, wy, a, n);
    double *da_in = dup(wy, n);
    gdn_silu_bwd_f64(da_in, da_in, a, n);
    expect_same("silu", "dx aliasing dy", da_in, da, n * sizeof(double));
    expect_fd("silu", "x", silu_loss, &c, a, da, n);
    float *af = f32_of(a, n), *bf = f32_of(b, n), *wyf = f32_of(wy, n), *yf = f32_alloc(n);
    float *daf = f32_alloc(n), *dbf = f32_alloc(n);
    gdn_silu_fwd_f32(yf, af, n);
    expect_f32("silu", "y", yf, y, n);
    gdn_silu_bwd_f32(daf, wyf, af, n);
    expect_f32("silu", "dx", daf, da, n);

    swiglu_loss(&c);
    for (int i = 0; i < n; i++) ref[i] = a[i] * sigmoid_ref(a[i]) * b[i];
    expect_ref("swiglu", "h", y, ref, n);
    double *db = vec_nan(n);
    for (int i = 0; i < n; i++) da[i] = NAN;
    gdn_swiglu_bwd_f64(da, db, wy, a, b, n);
    expect_fd("swiglu", "a", swiglu_loss, &c, a, da, n);
    expect_fd("swiglu", "b", swiglu_loss, &c, b, db, n);
    gdn_swiglu_fwd_f32(yf, af, bf, n);
    expect_f32("swiglu", "h", yf, y, n);
    gdn_swiglu_bwd_f32(daf, dbf, wyf, af, bf, n);
    expect_f32("swiglu", "da", daf, da, n);
    expect_f32("swiglu", "db", dbf, db, n);

    free(a), free(b), free(wy), free(y), free(ref), free(inplace), free(da), free(da_in);
    free(db), free(af), free(bf), free(wyf), free(yf), free(daf), free(dbf);
}

/* ---- decay gate ------------------------------------------------------------------------------ */

typedef struct {
    double *a, *A_log, *dt_bias, *g;
    const double *wy;
    int N, H;
} gate_ctx;

static double gate_loss(void *p) {
    gate_ctx *c = p;
    gdn_decay_gate_fwd_f64(c->g, c->a, c->A_log, c->dt_bias, c->N, c->H);
    return wsum(c->g, c->wy, (size_t)c->N * c->H);
}

static void test_decay_gate(void **state) {
    (void)state;
    enum { N = 9, H = 3 };
    double *a = vec(N * H, -4, 4, 121), *A_log = vec(H, 0, log(16.0), 122);
    double *dt_bias = vec(H, -6.9, -2.3, 123), *wy = vec(N * H, -1, 1, 124), *g = vec_nan(N * H);
    /* saturated pre-activations: softplus(x) = x resp. ~e^x (inputs far beyond exp's range are
     * checked below; here they would only add roundoff to the finite differences of L) */
    a[0] = 60, a[4] = -60, a[8] = 30, a[12] = -30, a[16] = 15, a[20] = -15;
    gate_ctx c = {a, A_log, dt_bias, g, wy, N, H};

    gate_loss(&c);
    double *ref = vec(N * H, 0, 0, 0);
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++)
            ref[n * H + h] = -exp(A_log[h]) * softplus_ref(a[n * H + h] + dt_bias[h]);
    expect_ref("decay_gate", "g", g, ref, N * H);

    double *da = vec_nan(N * H), *bA = vec(H, -1, 1, 125), *bdt = vec(H, -1, 1, 126);
    double *dA = dup(bA, H), *ddt = dup(bdt, H);
    gdn_decay_gate_bwd_f64(da, dA, ddt, wy, a, A_log, dt_bias, N, H);
    unaccumulate(dA, bA, H);
    unaccumulate(ddt, bdt, H);
    expect_fd("decay_gate", "a", gate_loss, &c, a, da, N * H);
    expect_fd("decay_gate", "A_log", gate_loss, &c, A_log, dA, H);
    expect_fd("decay_gate", "dt_bias", gate_loss, &c, dt_bias, ddt, H);

    float *af = f32_of(a, N * H), *Af = f32_of(A_log, H), *dtf = f32_of(dt_bias, H);
    float *wyf = f32_of(wy, N * H), *gf = f32_alloc(N * H), *daf = f32_alloc(N * H);
    float *dAf = f32_alloc(H), *ddtf = f32_alloc(H);
    gdn_decay_gate_fwd_f32(gf, af, Af, dtf, N, H);
    expect_f32("decay_gate", "g", gf, g, N * H);
    gdn_decay_gate_bwd_f32(daf, dAf, ddtf, wyf, af, Af, dtf, N, H);
    expect_f32("decay_gate", "da", daf, da, N * H);
    expect_f32("decay_gate", "dA_log", dAf, dA, H);
    expect_f32("decay_gate", "ddt_bias", ddtf, ddt, H);
    /* the tiny softplus of a very negative input keeps its relative precision */
    double g_neg = -exp(A_log[1]) * softplus_ref(a[4] + dt_bias[1]);
    double rel = fabs(g[4] - g_neg) / fabs(g_neg);
    printf("%-22s ref %-9s rel err %.2e (g = %.3e)\n", "decay_gate", "g(-60)", rel, g_neg);
    assert_true(g_neg < 0 && rel < 1e-14);

    free(a), free(A_log), free(dt_bias), free(wy), free(g), free(ref), free(da), free(bA);
    free(bdt), free(dA), free(ddt), free(af), free(Af), free(dtf), free(wyf), free(gf), free(daf);
    free(dAf), free(ddtf);
}

/* Inputs where a naive log(1 + e^x) overflows (fp32 beyond ~88.7, fp64 beyond ~709.8). */
static void test_decay_gate_extreme(void **state) {
    (void)state;
    enum { N = 8, H = 1 };
    double a[N] = {89, -89, 200, -200, 710, -710, 1e4, -1e4}, A_log = 1.5, dt_bias = -3;
    double g[N], ref[N], da[N], dA = 0, ddt = 0, dg[N];
    float af[N], gf[N], Af = (float)A_log, dtf = (float)dt_bias;
    for (int i = 0; i < N; i++) {
        ref[i] = -exp(A_log) * softplus_ref(a[i] + dt_bias);
        af[i] = (float)a[i];
        dg[i] = 1;
    }
    gdn_decay_gate_fwd_f64(g, a, &A_log, &dt_bias, N, H);
    gdn_decay_gate_fwd_f32(gf, af, &Af, &dtf, N, H);
    expect_ref("decay_gate extreme", "g", g, ref, N);
    expect_f32("decay_gate extreme", "g", gf, ref, N);
    gdn_decay_gate_bwd_f64(da, &dA, &ddt, dg, a, &A_log, &dt_bias, N, H);
    for (int i = 0; i < N; i++) { /* da = -e^A sigmoid(x): -e^A for x >> 0, ~0 for x << 0 */
        double want = -exp(A_log) * sigmoid_ref(a[i] + dt_bias);
        assert_true(isfinite(gf[i]) && isfinite(da[i]) && fabs(da[i] - want) <= 1e-15 * exp(A_log));
    }
    assert_true(isfinite(dA) && isfinite(ddt));
}

/* ---- beta ------------------------------------------------------------------------------------ */

typedef struct {
    double *b, *beta;
    const double *wy;
    double scale;
    size_t n;
} beta_ctx;

static double beta_loss(void *p) {
    beta_ctx *c = p;
    gdn_beta_fwd_f64(c->beta, c->b, c->scale, c->n);
    return wsum(c->beta, c->wy, c->n);
}

static void beta_case(const char *name, double scale, unsigned long long seed) {
    enum { n = 30 };
    double *b = vec(n, -6, 6, seed), *wy = vec(n, -1, 1, seed + 1), *beta = vec_nan(n);
    b[0] = 35, b[1] = -35;
    beta_ctx c = {b, beta, wy, scale, n};

    beta_loss(&c);
    double *ref = vec(n, 0, 0, 0);
    for (int i = 0; i < n; i++) ref[i] = scale * sigmoid_ref(b[i]);
    expect_ref(name, "beta", beta, ref, n);

    double *db = vec_nan(n);
    gdn_beta_bwd_f64(db, wy, beta, scale, n);
    expect_fd(name, "b", beta_loss, &c, b, db, n);

    float *bf = f32_of(b, n), *wyf = f32_of(wy, n), *betaf = f32_alloc(n), *dbf = f32_alloc(n);
    gdn_beta_fwd_f32(betaf, bf, (float)scale, n);
    expect_f32(name, "beta", betaf, beta, n);
    gdn_beta_bwd_f32(dbf, wyf, betaf, (float)scale, n);
    expect_f32(name, "db", dbf, db, n);

    free(b), free(wy), free(beta), free(ref), free(db), free(bf), free(wyf), free(betaf), free(dbf);
}

static void test_beta(void **state) {
    (void)state;
    beta_case("beta scale 1", 1.0, 131);
    beta_case("beta scale 2", 2.0, 141);
}

/* ---- cross-entropy --------------------------------------------------------------------------- */

typedef struct {
    double *logits;
    const int *tgt;
    int N, V;
    double grad_scale;
} ce_ctx;

static double ce_loss(void *p) {
    ce_ctx *c = p;
    int nv;
    return c->grad_scale *
           gdn_cross_entropy_f64(NULL, c->logits, c->tgt, c->N, c->V, c->grad_scale, &nv);
}

static void test_cross_entropy(void **state) {
    (void)state;
    enum { N = 7, V = 9 };
    const int tgt[N] = {3, -1, 0, 8, -1, 5, 2};
    const double gs = 0.37;
    double *logits = vec(N * V, -3, 3, 151);
    for (int i = 0; i < V; i++) logits[5 * V + i] += 100;  /* e^x overflows fp32 unshifted */
    for (int i = 0; i < V; i++) logits[6 * V + i] -= 100;  /* and underflows it */
    ce_ctx c = {logits, tgt, N, V, gs};

    int nv = -7;
    double *dl = vec_nan(N * V);
    double loss = gdn_cross_entropy_f64(dl, logits, tgt, N, V, gs, &nv);
    long double ref = 0; /* direct, unshifted, in long double (e^103 is no problem there) */
    for (int n = 0; n < N; n++) {
        if (tgt[n] < 0) continue;
        long double s = 0;
        for (int i = 0; i < V; i++) s += expl((long double)logits[n * V + i]);
        ref += logl(s) - logits[n * V + tgt[n]];
    }
    double lerr = fabs(loss - (double)ref) / fabs((double)ref);
    printf("%-22s ref %-9s rel err %.2e (loss %.6f, %d valid rows)\n", "cross_entropy", "loss",
           lerr, loss, nv);
    assert_int_equal(nv, 5);
    assert_true(lerr < REF_TOL);
    for (int i = 0; i < V; i++) assert_true(dl[1 * V + i] == 0 && dl[4 * V + i] == 0);

    int nv2 = -7;
    double loss2 = gdn_cross_entropy_f64(NULL, logits, tgt, N, V, gs, &nv2);
    assert_int_equal(nv2, 5);
    assert_true(loss2 == loss);
    double *alias = dup(logits, N * V);
    double loss3 = gdn_cross_entropy_f64(alias, alias, tgt, N, V, gs, NULL);
    assert_true(loss3 == loss);
    expect_same("cross_entropy", "d aliasing l", alias, dl, N * V * sizeof(double));

    expect_fd("cross_entropy", "logits", ce_loss, &c, logits, dl, N * V);

    float *lf = f32_of(logits, N * V), *dlf = f32_alloc(N * V);
    double lossf = gdn_cross_entropy_f32(dlf, lf, tgt, N, V, (float)gs, &nv2);
    double ferr = fabs(lossf - loss) / fabs(loss);
    printf("%-22s f32 %-9s rel err %.2e\n", "cross_entropy", "loss", ferr);
    assert_true(ferr < F32_TOL);
    expect_f32("cross_entropy", "dlogits", dlf, dl, N * V);

    free(logits), free(dl), free(alias), free(lf), free(dlf);
}

/* ---- determinism across thread counts -------------------------------------------------------- */

/* Every backward that reduces over rows, run with 1 thread and then with 4, in both precisions;
 * the results must be bitwise identical. Sizes are above the ops' serial cut-offs, so the second
 * run is really parallel. (In fp32 a thread-dependent order of the double partials would mostly
 * round away; the fp64 run sees it.) */
enum { DN = 2048, DD = 64, DH = 4, DVOCAB = 50, DB = 2, DT = 512, DC = 64, DW = 4, DCEN = 64,
       DCEV = 1000, DGN = DN * DD / DH };

typedef struct {
    const char *name;
    size_t count;
} det_field;

/* Output buffers, in this order, of one det_run. */
static const det_field det_fields[] = {
    {"rmsnorm dx", (size_t)DN * DD},     {"rmsnorm dw", DD},
    {"gated dx", (size_t)DN * DD},       {"gated dz", (size_t)DN * DD},
    {"gated dw", DD},                    {"decay_gate da", (size_t)DGN * DH},
    {"decay_gate dA_log", DH},           {"decay_gate ddt_bias", DH},
    {"embed dtable", DVOCAB * 2 * DD},   {"conv dx", (size_t)DB * DT * DC},
    {"conv dw", DC * DW},                {"conv dhalo", DB * (DW - 1) * DC},
    {"cross_entropy dlogits", DCEN * DCEV},
};
enum { DET_NF = sizeof det_fields / sizeof det_fields[0] };

typedef struct {
    void *buf[DET_NF];
    double ce_loss;
} det_out;

/* det_run_f32 / det_run_f64: inputs x, z, dy [DN*DD], w [DD], cw [DC*DW] in that precision. */
#define DET_RUN(T, S)                                                                             \
    static void det_run_##S(det_out *o, const T *x, const T *z, const T *w, const T *cw,        \
                            const T *dy, const int *tok, const int *tgt) {                      \
        T *b[DET_NF];                                                                            \
        for (int f = 0; f < DET_NF; f++) {                                                       \
            b[f] = calloc(det_fields[f].count, sizeof(T));                                       \
            assert_non_null(b[f]);                                                               \
            o->buf[f] = b[f];                                                                    \
        }                                                                                        \
        T *rstd = calloc(DN, sizeof(T)), *y = calloc((size_t)DN * DD, sizeof(T));                \
        assert_true(rstd && y);                                                                  \
        gdn_rmsnorm_fwd_##S(y, rstd, x, w, DN, DD, (T)1e-5);                                     \
        gdn_rmsnorm_bwd_##S(b[0], b[1], dy, x, w, rstd, DN, DD);                                 \
        gdn_gated_rmsnorm_fwd_##S(y, rstd, x, z, w, DN, DD, (T)1e-5);                            \
        gdn_gated_rmsnorm_bwd_##S(b[2], b[3], b[4], dy, x, z, w, rstd, DN, DD);                  \
        gdn_decay_gate_bwd_##S(b[5], b[6], b[7], dy, x, w, w + DH, DGN, DH);                     \
        gdn_embed_bwd_##S(b[8], tok, dy, DN / 2, 2 * DD); /* two column blocks */                \
        gdn_conv_bwd_##S(b[9], b[10], b[11], dy, x, cw, z, NULL, DB, DT, DC, DW);                \
        int nv;                                                                                  \
        o->ce_loss = gdn_cross_entropy_##S(b[12], x, tgt, DCEN, DCEV, (T)0.5, &nv);              \
        free(rstd), free(y);                                                                     \
    }
DET_RUN(float, f32)
DET_RUN(double, f64)
#undef DET_RUN

static void det_compare(const char *prec, const det_out *a, const det_out *b, size_t elem) {
    char what[64];
    for (int f = 0; f < DET_NF; f++) {
        snprintf(what, sizeof what, "%s %s", prec, det_fields[f].name);
        expect_same("threads 1 vs 4", what, a->buf[f], b->buf[f], det_fields[f].count * elem);
    }
    snprintf(what, sizeof what, "%s cross_entropy loss", prec);
    expect_same("threads 1 vs 4", what, &a->ce_loss, &b->ce_loss, sizeof(double));
}

static void det_free(det_out *o) {
    for (int f = 0; f < DET_NF; f++) free(o->buf[f]);
}

static void test_thread_determinism(void **state) {
    (void)state;
    size_t n = (size_t)DN * DD;
    double *x = vec(n, -2, 2, 161), *z = vec(n, -3, 3, 162), *w = vec(DD, 0.5, 1.5, 163);
    double *dy = vec(n, -1, 1, 164), *cw = vec(DC * DW, -1, 1, 165);
    float *xf = f32_of(x, n), *zf = f32_of(z, n), *wf = f32_of(w, DD), *dyf = f32_of(dy, n);
    float *cwf = f32_of(cw, DC * DW);
    int *tok = malloc(DN * sizeof *tok), *tgt = malloc(DCEN * sizeof *tgt);
    assert_true(tok && tgt);
    for (int i = 0; i < DN; i++) tok[i] = (int)((i * 7919u) % DVOCAB);
    for (int i = 0; i < DCEN; i++) tgt[i] = i % 5 == 3 ? -1 : (int)((i * 104729u) % DCEV);

    int saved = omp_get_max_threads();
    det_out a, b;
    omp_set_num_threads(1);
    det_run_f32(&a, xf, zf, wf, cwf, dyf, tok, tgt);
    omp_set_num_threads(4);
    det_run_f32(&b, xf, zf, wf, cwf, dyf, tok, tgt);
    det_compare("f32", &a, &b, sizeof(float));
    det_free(&a), det_free(&b);
    omp_set_num_threads(1);
    det_run_f64(&a, x, z, w, cw, dy, tok, tgt);
    omp_set_num_threads(4);
    det_run_f64(&b, x, z, w, cw, dy, tok, tgt);
    det_compare("f64", &a, &b, sizeof(double));
    det_free(&a), det_free(&b);
    omp_set_num_threads(saved);

    free(x), free(z), free(w), free(dy), free(cw), free(xf), free(zf), free(wf), free(dyf);
    free(cwf), free(tok), free(tgt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embed),         cmocka_unit_test(test_linear),
        cmocka_unit_test(test_rmsnorm),       cmocka_unit_test(test_l2norm),
        cmocka_unit_test(test_gated_rmsnorm), cmocka_unit_test(test_conv),
        cmocka_unit_test(test_silu_swiglu),   cmocka_unit_test(test_decay_gate),
        cmocka_unit_test(test_decay_gate_extreme),
        cmocka_unit_test(test_beta),          cmocka_unit_test(test_cross_entropy),
        cmocka_unit_test(test_thread_determinism),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
