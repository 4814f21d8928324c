/* Every CUDA op of model/cuda/ops_cuda.h against the fp64 CPU op (gdn_*_f64) on random inputs,
 * in both precisions, at odd sizes. Relative error ||gpu - ref|| / ||ref|| must stay under 1e-5
 * in fp32 mode and 1e-2 in bf16 mode. In bf16 mode the inputs are rounded to bf16 first and the
 * reference sees the rounded values, so the error measured is the op's own. Device outputs are
 * NaN-poisoned before each call, so an element the kernel skips fails the comparison. Ops that
 * reduce (parameter gradients, loss, gradient norm) and the GEMMs (one cached algorithm per
 * shape) are also run twice and must agree bit for bit.
 *
 * Plain C (the GPU machine has no CMocka). Exit 0: pass, 1: fail, 77: no CUDA device (skip). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "model/cpu/doc.h"
#include "model/cpu/ops_cpu.h"
#include "model/cuda/ops_cuda.h"
#include "model/params.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/ref/fd.h"
#include "train/optim.h"

static gdn_cuda_precision P; /* precision under test */
static int BF;               /* P == GDN_CUDA_BF16 */
static double TOL;
static int FAILS;
static unsigned long long SEED = 1;

/* ---- host buffers ---------------------------------------------------------------------------- */
static double *rnd(size_t n, double lo, double hi) {
    double *x = xmalloc(n * sizeof *x);
    fd_fill_uniform(x, n, lo, hi, SEED++);
    return x;
}
static double *zeros(size_t n) {
    double *x = calloc(n ? n : 1, sizeof *x);
    if (!x) { fprintf(stderr, "out of memory\n"); exit(1); }
    return x;
}
static double *copy_d(const double *x, size_t n) {
    double *y = xmalloc(n * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

/* ---- device buffers (freed together after each op test) -------------------------------------- */
static void *owned[256];
static int n_owned;
static size_t SHIFT; /* bytes past the allocation's (256-byte aligned) start where buffers begin */
static void *dmalloc(size_t bytes) {
    void *d;
    CK(cudaMalloc(&d, bytes + SHIFT ? bytes + SHIFT : 1));
    if (n_owned == 256) { fprintf(stderr, "too many device buffers\n"); exit(1); }
    owned[n_owned++] = d;
    return (char *)d + SHIFT;
}
static void dfree_all(void) {
    for (int i = 0; i < n_owned; i++) CK(cudaFree(owned[i]));
    n_owned = 0;
}

/* fp32 device copy of x; x is rounded to float in place (the reference sees the device values). */
static float *up_f32(double *x, size_t n) {
    float *f = xmalloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++) x[i] = f[i] = (float)x[i];
    float *d = dmalloc(n * sizeof *f);
    CK(cudaMemcpy(d, f, n * sizeof *f, cudaMemcpyHostToDevice));
    free(f);
    return d;
}
/* act device copy of x; x is rounded to float (bf16 in BF16 mode) in place. */
static void *up_act(double *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = BF ? bf16_round((float)x[i]) : (float)x[i];
    float *tmp = up_f32(x, n);
    void *d = dmalloc(n * gdn_cuda_act_bytes(P));
    gdn_cuda_to_act(P, d, tmp, n, NULL);
    return d;
}
static float *nan_f32(size_t n) {
    float *d = dmalloc(n * sizeof(float));
    gdn_cuda_fill_f32(d, NAN, n, NULL);
    return d;
}
static void *nan_act(size_t n) {
    float *tmp = nan_f32(n);
    void *d = dmalloc(n * gdn_cuda_act_bytes(P));
    gdn_cuda_to_act(P, d, tmp, n, NULL);
    return d;
}
static float *down_f32(const float *d, size_t n) {
    float *h = xmalloc(n * sizeof *h);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost));
    return h;
}
static float *down_act(const void *d, size_t n) {
    float *tmp = dmalloc(n * sizeof(float));
    gdn_cuda_from_act(P, tmp, d, n, NULL);
    return down_f32(tmp, n);
}

/* ---- comparison -------------------------------------------------------------------------------- */
static void report(const char *op, const char *what, double err, int ok) {
    printf("%-4s %-34s %-8s %.1e %s\n", BF ? "bf16" : "fp32", op, what, err, ok ? "ok" : "FAIL");
    if (!ok) FAILS++;
}
/* got is freed. */
static void cmp(const char *op, const char *what, float *got, const double *ref, size_t n) {
    const double e = fd_rel_err_f32(got, ref, n);
    report(op, what, e, e < TOL); /* NaN fails */
    free(got);
}
/* Bitwise equality of two device buffers of `bytes` bytes (a second run of an op). */
static void same_bytes(const char *op, const char *what, const void *a, const void *b, size_t bytes) {
    char *ha = xmalloc(bytes), *hb = xmalloc(bytes);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(ha, a, bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost));
    const int ok = memcmp(ha, hb, bytes) == 0;
    printf("%-4s %-34s %-8s %s %s\n", BF ? "bf16" : "fp32", op, what, "bitwise", ok ? "ok" : "FAIL");
    if (!ok) FAILS++;
    free(ha);
    free(hb);
}
static void same_bits(const char *op, const char *what, const float *a, const float *b, size_t n) {
    same_bytes(op, what, a, b, n * sizeof(float));
}
/* got holds exactly the values of ref (an input the op must leave alone); got is freed. */
static void unchanged(const char *op, const char *what, float *got, const double *ref, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += (double)got[i] != ref[i];
    printf("%-4s %-34s %-8s %zu changed %s\n", BF ? "bf16" : "fp32", op, what, bad, bad ? "FAIL" : "ok");
    if (bad) FAILS++;
    free(got);
}
/* A column block written into a wider buffer: rows of `wide` (act, ld apart) hold exactly the C
 * values of the rows of `narrow` (act, the same op writing a tensor of its own), and every other
 * column of `wide` is still the NaN it was filled with. */
static void block_written(const char *op, const char *what, const void *wide, size_t ld, const void *narrow,
                          size_t rows, size_t C) {
    float *w = down_act(wide, rows * ld), *n = down_act(narrow, rows * C);
    size_t bad = 0, touched = 0;
    for (size_t r = 0; r < rows; r++) {
        bad += memcmp(w + r * ld, n + r * C, C * sizeof(float)) != 0;
        for (size_t c = C; c < ld; c++) touched += !isnan(w[r * ld + c]);
    }
    printf("%-4s %-34s %-8s %zu rows differ, %zu outside written %s\n", BF ? "bf16" : "fp32", op, what, bad,
           touched, bad || touched ? "FAIL" : "ok");
    if (bad || touched) FAILS++;
    free(w);
    free(n);
}
static float *dcopy_f32(const float *d, size_t n) {
    float *c = dmalloc(n * sizeof(float));
    CK(cudaMemcpy(c, d, n * sizeof(float), cudaMemcpyDeviceToDevice));
    return c;
}

/* ---- linear --------------------------------------------------------------------------------------- */
/* shift: bytes past 256-byte alignment where every device buffer starts (4: the fp32 weights
 * and gradients at odd offsets in the model's flat buffers), so the GEMM plans are built for
 * pointers cuBLASLt may not assume aligned. Each GEMM runs twice on the same shape (the cached
 * plan): the two results must be bitwise equal. */
static void test_linear(gdn_cuda_blas *bl, int N, int I, int O, size_t shift) {
    char op[64];
    snprintf(op, sizeof op, "linear N%d I%d O%d%s", N, I, O, shift ? " +4B" : "");
    SHIFT = shift;
    const size_t ny = (size_t)N * O, nx = (size_t)N * I, nw = (size_t)O * I;
    double *x = rnd(nx, -1, 1), *W = rnd(nw, -1, 1), *dy = rnd(ny, -1, 1);
    double *y0 = rnd(ny, -1, 1), *dW0 = rnd(nw, -1, 1);
    void *xd = up_act(x, nx), *Wd = up_act(W, nw), *dyd = up_act(dy, ny);
    float *y0d = up_f32(y0, ny), *dWd = up_f32(dW0, nw), *dWd2 = up_f32(dW0, nw);
    float *yb1 = dcopy_f32(y0d, ny); /* y0 again: the in-place residual below */
    double *y = zeros(ny), *dx = zeros(nx), *dW = copy_d(dW0, nw);
    gdn_linear_fwd_f64(y, x, W, N, I, O);
    gdn_linear_bwd_f64(dx, dW, dy, x, W, N, I, O);
    double *xw = copy_d(y, ny); /* x W^T */

    void *ya = nan_act(ny), *ya2 = nan_act(ny);
    gdn_cuda_linear_fwd(bl, P, P, ya, xd, Wd, N, I, O, 0.0f);
    gdn_cuda_linear_fwd(bl, P, P, ya2, xd, Wd, N, I, O, 0.0f);
    same_bytes(op, "y act x2", ya, ya2, ny * gdn_cuda_act_bytes(P));
    cmp(op, "y act", down_act(ya, ny), y, ny);
    gdn_cuda_linear_fwd(bl, P, GDN_CUDA_FP32, y0d, xd, Wd, N, I, O, 1.0f);
    for (size_t i = 0; i < ny; i++) y[i] += y0[i];
    cmp(op, "y+=f32", down_f32(y0d, ny), y, ny);
    float *dxf = nan_f32(nx), *dxf2 = nan_f32(nx);
    gdn_cuda_linear_bwd_dx(bl, P, GDN_CUDA_FP32, dxf, dyd, O, Wd, N, I, O, 0.0f);
    gdn_cuda_linear_bwd_dx(bl, P, GDN_CUDA_FP32, dxf2, dyd, O, Wd, N, I, O, 0.0f);
    same_bits(op, "dx f32 x2", dxf, dxf2, nx);
    cmp(op, "dx f32", down_f32(dxf, nx), dx, nx);
    void *dxa = nan_act(nx);
    gdn_cuda_linear_bwd_dx(bl, P, P, dxa, dyd, O, Wd, N, I, O, 0.0f);
    cmp(op, "dx act", down_act(dxa, nx), dx, nx);
    gdn_cuda_linear_bwd_dw(bl, P, dWd, dyd, O, xd, N, I, O);
    gdn_cuda_linear_bwd_dw(bl, P, dWd2, dyd, O, xd, N, I, O);
    same_bits(op, "dW+= x2", dWd, dWd2, nw);
    cmp(op, "dW+=", down_f32(dWd, nw), dW, nw);
    /* dy as columns [3, 3+O) of rows O+8 apart, the other columns NaN: read only where they should be */
    {
        const size_t ld = (size_t)O + 8;
        double *dyw = xmalloc((size_t)N * ld * sizeof *dyw);
        for (size_t i = 0; i < (size_t)N * ld; i++) dyw[i] = NAN;
        for (size_t n = 0; n < (size_t)N; n++)
            for (size_t o = 0; o < (size_t)O; o++) dyw[n * ld + 3 + o] = dy[n * O + o];
        void *dywd = up_act(dyw, (size_t)N * ld);
        const void *blk = (const char *)dywd + 3 * gdn_cuda_act_bytes(P);
        float *dxw = nan_f32(nx), *dWw = up_f32(dW0, nw);
        gdn_cuda_linear_bwd_dx(bl, P, GDN_CUDA_FP32, dxw, blk, (int)ld, Wd, N, I, O, 0.0f);
        cmp(op, "dx, dy of rows O+8", down_f32(dxw, nx), dx, nx);
        gdn_cuda_linear_bwd_dw(bl, P, dWw, blk, (int)ld, xd, N, I, O);
        cmp(op, "dW+=, dy of rows O+8", down_f32(dWw, nw), dW, nw);
        free(dyw);
    }

    /* y = r + x W^T with r in its own buffer (C != D), fp32 and act outputs: every element of the
     * NaN-poisoned y written, r untouched. */
    double *r = rnd(ny, -1, 1), *ra = rnd(ny, -1, 1), *ref = zeros(ny);
    float *rd = up_f32(r, ny), *yf = nan_f32(ny), *yf2 = nan_f32(ny);
    void *rad = up_act(ra, ny), *yad = nan_act(ny), *yad2 = nan_act(ny);
    gdn_cuda_linear_fwd_add(bl, P, GDN_CUDA_FP32, yf, xd, Wd, rd, N, I, O);
    gdn_cuda_linear_fwd_add(bl, P, GDN_CUDA_FP32, yf2, xd, Wd, rd, N, I, O);
    for (size_t i = 0; i < ny; i++) ref[i] = r[i] + xw[i];
    cmp(op, "r+xW f32", down_f32(yf, ny), ref, ny);
    same_bits(op, "r+xW f32 x2", yf, yf2, ny);
    unchanged(op, "r f32", down_f32(rd, ny), r, ny);
    gdn_cuda_linear_fwd_add(bl, P, P, yad, xd, Wd, rad, N, I, O);
    gdn_cuda_linear_fwd_add(bl, P, P, yad2, xd, Wd, rad, N, I, O);
    for (size_t i = 0; i < ny; i++) ref[i] = ra[i] + xw[i];
    cmp(op, "r+xW act", down_act(yad, ny), ref, ny);
    same_bytes(op, "r+xW act x2", yad, yad2, ny * gdn_cuda_act_bytes(P));
    unchanged(op, "r act", down_act(rad, ny), ra, ny);
    /* residual == y: the in-place add, the same plan as linear_fwd with beta 1 (y0d above) */
    gdn_cuda_linear_fwd_add(bl, P, GDN_CUDA_FP32, yb1, xd, Wd, yb1, N, I, O);
    cmp(op, "y=y+xW", down_f32(yb1, ny), y, ny);
    same_bits(op, "y=y+xW = beta 1", yb1, y0d, ny);
    free(x); free(W); free(dy); free(y0); free(dW0); free(y); free(dx); free(dW); free(xw);
    free(r); free(ra); free(ref);
    dfree_all();
    SHIFT = 0;
}

/* An empty inner dimension: y = r (a copy), or nothing when r is y. */
static void test_linear_add_empty(gdn_cuda_blas *bl, int N, int O) {
    char op[64];
    snprintf(op, sizeof op, "linear add N%d I0 O%d", N, O);
    const size_t ny = (size_t)N * O;
    double *r = rnd(ny, -1, 1);
    void *rd = up_act(r, ny), *yd = nan_act(ny);
    gdn_cuda_linear_fwd_add(bl, P, P, yd, NULL, NULL, rd, N, 0, O);
    unchanged(op, "y = r", down_act(yd, ny), r, ny);
    gdn_cuda_linear_fwd_add(bl, P, P, rd, NULL, NULL, rd, N, 0, O);
    unchanged(op, "r = r", down_act(rd, ny), r, ny);
    free(r);
    dfree_all();
}

/* ---- embedding -------------------------------------------------------------------------------------- */
static void test_embed(int N, int vocab, int D) {
    char op[64];
    snprintf(op, sizeof op, "embed N%d vocab%d D%d", N, vocab, D);
    int *tok = xmalloc((size_t)N * sizeof(int));
    double *u = rnd((size_t)N, 0, vocab);
    for (int i = 0; i < N; i++) tok[i] = (int)u[i] < vocab ? (int)u[i] : vocab - 1;
    double *table = rnd((size_t)vocab * D, -1, 1), *dout = rnd((size_t)N * D, -1, 1);
    double *dt0 = rnd((size_t)vocab * D, -1, 1);
    float *tabd = up_f32(table, (size_t)vocab * D), *doutd = up_f32(dout, (size_t)N * D);
    float *dtd = up_f32(dt0, (size_t)vocab * D);
    double *out = zeros((size_t)N * D), *dt = copy_d(dt0, (size_t)vocab * D);
    gdn_embed_fwd_f64(out, tok, table, N, D);
    gdn_embed_bwd_f64(dt, tok, dout, N, D);

    int *tokd = dmalloc((size_t)N * sizeof(int));
    CK(cudaMemcpy(tokd, tok, (size_t)N * sizeof(int), cudaMemcpyHostToDevice));
    float *outd = nan_f32((size_t)N * D);
    gdn_cuda_embed_fwd(outd, tokd, tabd, N, D, NULL);
    cmp(op, "out", down_f32(outd, (size_t)N * D), out, (size_t)N * D);

    int *perm = xmalloc((size_t)N * sizeof(int)), *ss = xmalloc(((size_t)N + 1) * sizeof(int));
    int *st = xmalloc((size_t)N * sizeof(int));
    const int nseg = gdn_cuda_embed_plan(tok, N, vocab, perm, ss, st);
    int *permd = dmalloc((size_t)N * sizeof(int)), *ssd = dmalloc(((size_t)N + 1) * sizeof(int));
    int *std_ = dmalloc((size_t)N * sizeof(int));
    CK(cudaMemcpy(permd, perm, (size_t)N * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ssd, ss, ((size_t)nseg + 1) * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(std_, st, (size_t)nseg * sizeof(int), cudaMemcpyHostToDevice));
    float *dt2 = dcopy_f32(dtd, (size_t)vocab * D);
    gdn_cuda_embed_bwd(dtd, permd, ssd, std_, nseg, doutd, D, NULL);
    gdn_cuda_embed_bwd(dt2, permd, ssd, std_, nseg, doutd, D, NULL);
    same_bits(op, "dtable", dtd, dt2, (size_t)vocab * D);
    cmp(op, "dtable+=", down_f32(dtd, (size_t)vocab * D), dt, (size_t)vocab * D);
    free(tok); free(u); free(table); free(dout); free(dt0); free(out); free(dt); free(perm); free(ss); free(st);
    dfree_all();
}

/* ---- norms -------------------------------------------------------------------------------------------- */
static void test_rmsnorm(int N, int D) {
    char op[64];
    snprintf(op, sizeof op, "rmsnorm N%d D%d", N, D);
    const size_t n = (size_t)N * D;
    double *x = rnd(n, -2, 2), *w = rnd((size_t)D, 0.5, 1.5), *dy = rnd(n, -1, 1), *dw0 = rnd((size_t)D, -1, 1);
    double *dx0 = rnd(n, -1, 1);
    float *xd = up_f32(x, n), *wd = up_f32(w, (size_t)D), *dyd = up_f32(dy, n), *dwd = up_f32(dw0, (size_t)D);
    float *dx0d = up_f32(dx0, n);
    double *y = zeros(n), *rstd = zeros((size_t)N), *dx = zeros(n), *dw = copy_d(dw0, (size_t)D);
    gdn_rmsnorm_fwd_f64(y, rstd, x, w, N, D, 1e-6);
    void *yd = nan_act(n);
    float *rd = nan_f32((size_t)N);
    gdn_cuda_rmsnorm_fwd(P, yd, rd, xd, wd, N, D, 1e-6f, NULL);
    cmp(op, "y", down_act(yd, n), y, n);
    cmp(op, "rstd", down_f32(rd, (size_t)N), rstd, (size_t)N);
    float *rstdd = up_f32(rstd, (size_t)N); /* the backward reads the saved (float) rstd */
    gdn_rmsnorm_bwd_f64(dx, dw, dy, x, w, rstd, N, D);
    void *ws = dmalloc(gdn_cuda_norm_workspace(N, D));
    float *dxd = nan_f32(n), *dw2 = dcopy_f32(dwd, (size_t)D);
    gdn_cuda_rmsnorm_bwd(P, dxd, 0, NULL, dwd, dyd, xd, wd, rstdd, N, D, ws, NULL);
    gdn_cuda_rmsnorm_bwd(P, dxd, 0, NULL, dw2, dyd, xd, wd, rstdd, N, D, ws, NULL);
    same_bits(op, "dw", dwd, dw2, (size_t)D);
    cmp(op, "dx", down_f32(dxd, n), dx, n);
    cmp(op, "dw+=", down_f32(dwd, (size_t)D), dw, (size_t)D);
    void *dxa = nan_act(n);
    gdn_cuda_rmsnorm_bwd(P, dx0d, 1, dxa, dw2, dyd, xd, wd, rstdd, N, D, ws, NULL);
    for (size_t i = 0; i < n; i++) dx[i] += dx0[i];
    cmp(op, "dx+=", down_f32(dx0d, n), dx, n);
    cmp(op, "dx act", down_act(dxa, n), dx, n);
    free(x); free(w); free(dy); free(dw0); free(dx0); free(y); free(rstd); free(dx); free(dw);
    dfree_all();
}

static void test_l2norm(int N, int D) {
    char op[64];
    snprintf(op, sizeof op, "l2norm N%d D%d", N, D);
    const size_t n = (size_t)N * D;
    double *x = rnd(n, -2, 2), *dy = rnd(n, -1, 1);
    void *xd = up_act(x, n), *dyd = up_act(dy, n);
    double *y = zeros(n), *r = zeros((size_t)N), *dx = zeros(n);
    gdn_l2norm_fwd_f64(y, r, x, N, D);
    void *yd = nan_act(n);
    float *rd = nan_f32((size_t)N);
    gdn_cuda_l2norm_fwd(P, yd, rd, xd, N, D, NULL);
    cmp(op, "y", down_act(yd, n), y, n);
    cmp(op, "r", down_f32(rd, (size_t)N), r, (size_t)N);
    void *yin = up_act(y, n); /* the backward reads the saved (rounded) y */
    float *rin = up_f32(r, (size_t)N);
    gdn_l2norm_bwd_f64(dx, dy, y, r, N, D);
    void *dxd = nan_act(n);
    gdn_cuda_l2norm_bwd(P, dxd, dyd, yin, rin, N, D, NULL);
    cmp(op, "dx", down_act(dxd, n), dx, n);
    free(x); free(dy); free(y); free(r); free(dx);
    dfree_all();
}

static void test_gated(int N, int D) {
    char op[64];
    snprintf(op, sizeof op, "gated_rmsnorm N%d D%d", N, D);
    const size_t n = (size_t)N * D;
    double *x = rnd(n, -2, 2), *z = rnd(n, -3, 3), *w = rnd((size_t)D, 0.5, 1.5), *dy = rnd(n, -1, 1);
    double *dw0 = rnd((size_t)D, -1, 1);
    void *xd = up_act(x, n), *zd = up_act(z, n), *dyd = up_act(dy, n);
    float *wd = up_f32(w, (size_t)D), *dwd = up_f32(dw0, (size_t)D);
    double *y = zeros(n), *rstd = zeros((size_t)N), *dx = zeros(n), *dz = zeros(n), *dw = copy_d(dw0, (size_t)D);
    gdn_gated_rmsnorm_fwd_f64(y, rstd, x, z, w, N, D, 1e-6);
    void *yd = nan_act(n);
    float *rd = nan_f32((size_t)N);
    gdn_cuda_gated_rmsnorm_fwd(P, yd, rd, xd, zd, wd, N, D, 1e-6f, NULL);
    cmp(op, "y", down_act(yd, n), y, n);
    cmp(op, "rstd", down_f32(rd, (size_t)N), rstd, (size_t)N);
    float *rstdd = up_f32(rstd, (size_t)N), *dw2 = dcopy_f32(dwd, (size_t)D);
    gdn_gated_rmsnorm_bwd_f64(dx, dz, dw, dy, x, z, w, rstd, N, D);
    void *ws = dmalloc(gdn_cuda_norm_workspace(N, D)), *dxd = nan_act(n), *dzd = nan_act(n), *y2 = nan_act(n);
    gdn_cuda_gated_rmsnorm_bwd(P, dxd, dzd, NULL, dwd, dyd, xd, zd, wd, rstdd, N, D, ws, NULL);
    gdn_cuda_gated_rmsnorm_bwd(P, dxd, dzd, NULL, dw2, dyd, xd, zd, wd, rstdd, N, D, ws, NULL);
    same_bits(op, "dw", dwd, dw2, (size_t)D);
    /* writing y as well, from the forward's own rstd: the forward's y bit for bit (the model keeps
     * no y of its own) */
    void *dx3 = nan_act(n), *dz3 = nan_act(n);
    float *dw3 = dcopy_f32(dwd, (size_t)D);
    gdn_cuda_gated_rmsnorm_bwd(P, dx3, dz3, y2, dw3, dyd, xd, zd, wd, rd, N, D, ws, NULL);
    same_bytes(op, "y again", yd, y2, n * gdn_cuda_act_bytes(P));
    cmp(op, "dx", down_act(dxd, n), dx, n);
    cmp(op, "dz", down_act(dzd, n), dz, n);
    cmp(op, "dw+=", down_f32(dwd, (size_t)D), dw, (size_t)D);
    free(x); free(z); free(w); free(dy); free(dw0); free(y); free(rstd); free(dx); free(dz); free(dw);
    dfree_all();
}

/* ---- convolution ------------------------------------------------------------------------------------------ */
/* y = act(conv(x)) against the fp64 conv then SiLU; the backward against SiLU's backward at
 * u = conv(x) then the conv's. The first backward also writes dhalo (checked with or without a
 * halo: NULL stands for zero rows that still get a gradient); the second passes dhalo NULL and
 * must give the same dw bit for bit.
 * docs: rows packed with documents (docs/design.md section 3.8), the same doc for both: starts
 * where (7t + b) % 5 == 0 (documents of 1 to 4 rows, shorter than the window, some at t = 0 and
 * 1, none in some rows) and, before row 0, a document that began at -1, -2 or before the halo
 * (rows of the halo before it are cut). */
static int *conv_doc(int B, int T) {
    unsigned char *st = xmalloc((size_t)B * T);
    int *doc = xmalloc((size_t)B * T * sizeof(int)), *prev = xmalloc((size_t)B * sizeof(int));
    for (int b = 0; b < B; b++) {
        prev[b] = b % 3 == 0 ? GDN_DOC_BEFORE : -(b % 3);
        for (int t = 0; t < T; t++) st[(size_t)b * T + t] = b % 4 != 3 && (7 * t + b) % 5 == 0;
    }
    gdn_doc_build(doc, st, prev, B, T);
    free(st);
    free(prev);
    return doc;
}

static void test_conv_doc(int B, int T, int C, int W, gdn_cuda_conv_act act, int with_halo, int docs) {
    char op[80];
    const int silu = act == GDN_CUDA_CONV_SILU;
    snprintf(op, sizeof op, "conv%s%s%s B%d T%d C%d W%d", silu ? " silu" : "", with_halo ? " halo" : "",
             docs ? " docs" : "", B, T, C, W);
    const size_t n = (size_t)B * T * C, nw = (size_t)C * W, nh = (size_t)B * (W - 1) * C;
    int *doc = docs ? conv_doc(B, T) : NULL;
    int *docd = NULL;
    if (doc) {
        docd = dmalloc((size_t)B * T * sizeof(int));
        CK(cudaMemcpy(docd, doc, (size_t)B * T * sizeof(int), cudaMemcpyHostToDevice));
    }
    double *x = rnd(n, -1, 1), *w = rnd(nw, -0.5, 0.5), *dy = rnd(n, -1, 1), *dw0 = rnd(nw, -1, 1);
    double *halo = with_halo ? rnd(nh, -1, 1) : NULL;
    void *xd = up_act(x, n), *dyd = up_act(dy, n), *halod = halo ? up_act(halo, nh) : NULL;
    float *wd = up_f32(w, nw), *dwd = up_f32(dw0, nw);
    double *u = zeros(n), *y = zeros(n), *du = copy_d(dy, n), *dx = zeros(n), *dw = copy_d(dw0, nw), *dh = zeros(nh);
    gdn_conv_fwd_f64(u, x, w, halo, doc, B, T, C, W);
    memcpy(y, u, n * sizeof *y);
    if (silu) {
        gdn_silu_fwd_f64(y, u, n);
        gdn_silu_bwd_f64(du, dy, u, n);
    }
    gdn_conv_bwd_f64(dx, dw, dh, du, x, w, halo, doc, B, T, C, W);
    void *yd = nan_act(n), *dxd = nan_act(n), *dhd = nan_act(nh), *ws = dmalloc(gdn_cuda_conv_workspace(B, T, C, W));
    gdn_cuda_conv_fwd(P, act, yd, xd, wd, halod, docd, B, T, C, W, NULL);
    cmp(op, "y", down_act(yd, n), y, n);
    float *dw2 = dcopy_f32(dwd, nw);
    gdn_cuda_conv_bwd(P, act, dxd, C, dwd, dhd, dyd, xd, wd, halod, docd, B, T, C, W, ws, NULL);
    gdn_cuda_conv_bwd(P, act, dxd, C, dw2, NULL, dyd, xd, wd, halod, docd, B, T, C, W, ws, NULL);
    same_bits(op, "dw", dwd, dw2, nw);
    cmp(op, "dx", down_act(dxd, n), dx, n);
    for (int pad = 1; pad <= 8; pad += 7) { /* dx as a column block: rows C+1 (generic path), C+8 apart */
        const size_t ld = (size_t)C + pad;
        void *dxw = nan_act((size_t)B * T * ld);
        float *dw3 = dcopy_f32(dw2, nw);
        gdn_cuda_conv_bwd(P, act, dxw, (int)ld, dw3, NULL, dyd, xd, wd, halod, docd, B, T, C, W, ws, NULL);
        block_written(op, pad == 1 ? "dx, rows C+1" : "dx, rows C+8", dxw, ld, dxd, (size_t)B * T, (size_t)C);
    }
    cmp(op, "dw+=", down_f32(dwd, nw), dw, nw);
    cmp(op, "dhalo", down_act(dhd, nh), dh, nh);
    free(x); free(w); free(dy); free(dw0); free(halo); free(u); free(y); free(du); free(dx); free(dw); free(dh);
    free(doc);
    dfree_all();
}
/* Both activations, with and without a halo (W >= 2). */
static void test_conv_all(int B, int T, int C, int W) {
    for (int a = 0; a < 2; a++)
        for (int h = 0; h < 2; h++) test_conv_doc(B, T, C, W, a ? GDN_CUDA_CONV_SILU : GDN_CUDA_CONV_LINEAR, h, 0);
}
/* The same with documents. */
static void test_conv_docs(int B, int T, int C, int W) {
    for (int a = 0; a < 2; a++)
        for (int h = 0; h < 2; h++) test_conv_doc(B, T, C, W, a ? GDN_CUDA_CONV_SILU : GDN_CUDA_CONV_LINEAR, h, 1);
}

/* ---- elementwise --------------------------------------------------------------------------------------- */
static void test_swiglu(int rows, int F) {
    char op[64];
    snprintf(op, sizeof op, "swiglu %dx%d", rows, F);
    const size_t n = (size_t)rows * F;
    double *a = rnd(n, -6, 6), *b = rnd(n, -2, 2), *dh = rnd(n, -1, 1);
    void *ad = up_act(a, n), *bd = up_act(b, n), *dhd = up_act(dh, n);
    double *h = zeros(n), *da = zeros(n), *db = zeros(n);
    gdn_swiglu_fwd_f64(h, a, b, n);
    gdn_swiglu_bwd_f64(da, db, dh, a, b, n);
    void *hd = nan_act(n), *dad = nan_act(n), *dbd = nan_act(n);
    gdn_cuda_swiglu_fwd(P, hd, ad, bd, n, NULL);
    gdn_cuda_swiglu_bwd(P, dad, dbd, F, dhd, ad, bd, rows, F, NULL);
    cmp(op, "swiglu h", down_act(hd, n), h, n);
    cmp(op, "swiglu da", down_act(dad, n), da, n);
    cmp(op, "swiglu db", down_act(dbd, n), db, n);
    void *daw = nan_act((size_t)rows * (F + 8)), *dbw = nan_act((size_t)rows * (F + 8)); /* rows F+8 apart */
    gdn_cuda_swiglu_bwd(P, daw, dbw, F + 8, dhd, ad, bd, rows, F, NULL);
    block_written(op, "da, rows F+8", daw, (size_t)F + 8, dad, (size_t)rows, (size_t)F);
    block_written(op, "db, rows F+8", dbw, (size_t)F + 8, dbd, (size_t)rows, (size_t)F);
    free(a); free(b); free(dh); free(h); free(da); free(db);
    dfree_all();
}

static void test_gates(int N, int H, double bscale) {
    char op[64];
    snprintf(op, sizeof op, "gates N%d H%d beta_scale %g", N, H, bscale);
    const size_t n = (size_t)N * H;
    double *a = rnd(n, -4, 4), *Al = rnd((size_t)H, 0, 2.7), *dt = rnd((size_t)H, -7, -2), *dg = rnd(n, -1, 1);
    double *dA0 = rnd((size_t)H, -1, 1), *ddt0 = rnd((size_t)H, -1, 1), *b = rnd(n, -5, 5), *dbeta = rnd(n, -1, 1);
    float *ad = up_f32(a, n), *Ald = up_f32(Al, (size_t)H), *dtd = up_f32(dt, (size_t)H), *dgd = up_f32(dg, n);
    float *dAd = up_f32(dA0, (size_t)H), *ddtd = up_f32(ddt0, (size_t)H), *bd = up_f32(b, n), *dbetad = up_f32(dbeta, n);
    double *g = zeros(n), *da = zeros(n), *dA = copy_d(dA0, (size_t)H), *ddt = copy_d(ddt0, (size_t)H);
    double *beta = zeros(n), *db = zeros(n);
    gdn_decay_gate_fwd_f64(g, a, Al, dt, N, H);
    gdn_decay_gate_bwd_f64(da, dA, ddt, dg, a, Al, dt, N, H);
    gdn_beta_fwd_f64(beta, b, bscale, n);
    float *gd = nan_f32(n), *betad = nan_f32(n);
    void *dad = nan_act(n), *dbd = nan_act(n), *ws = dmalloc(gdn_cuda_decay_gate_workspace(N, H));
    gdn_cuda_decay_gate_fwd(gd, ad, Ald, dtd, N, H, NULL);
    cmp(op, "g", down_f32(gd, n), g, n);
    float *dA2 = dcopy_f32(dAd, (size_t)H), *ddt2 = dcopy_f32(ddtd, (size_t)H);
    gdn_cuda_decay_gate_bwd(P, dad, H, dAd, ddtd, dgd, ad, Ald, dtd, N, H, ws, NULL);
    gdn_cuda_decay_gate_bwd(P, dad, H, dA2, ddt2, dgd, ad, Ald, dtd, N, H, ws, NULL);
    void *daw = nan_act(n + (size_t)N * 5), *dbw = nan_act(n + (size_t)N * 5); /* rows H+5 apart */
    float *dA3 = dcopy_f32(dA2, (size_t)H), *ddt3 = dcopy_f32(ddt2, (size_t)H);
    gdn_cuda_decay_gate_bwd(P, daw, H + 5, dA3, ddt3, dgd, ad, Ald, dtd, N, H, ws, NULL);
    block_written(op, "da, rows H+5", daw, (size_t)H + 5, dad, (size_t)N, (size_t)H);
    same_bits(op, "dA_log", dAd, dA2, (size_t)H);
    same_bits(op, "ddt", ddtd, ddt2, (size_t)H);
    cmp(op, "da", down_act(dad, n), da, n);
    cmp(op, "dA_log+=", down_f32(dAd, (size_t)H), dA, (size_t)H);
    cmp(op, "ddt+=", down_f32(ddtd, (size_t)H), ddt, (size_t)H);
    gdn_cuda_beta_fwd(betad, bd, (float)bscale, n, NULL);
    cmp(op, "beta", down_f32(betad, n), beta, n);
    float *betain = up_f32(beta, n);
    gdn_beta_bwd_f64(db, dbeta, beta, bscale, n); /* with the float-rounded beta the GPU reads */
    gdn_cuda_beta_bwd(P, dbd, H, dbetad, betain, (float)bscale, N, H, NULL);
    cmp(op, "db", down_act(dbd, n), db, n);
    gdn_cuda_beta_bwd(P, dbw, H + 5, dbetad, betain, (float)bscale, N, H, NULL);
    block_written(op, "db, rows H+5", dbw, (size_t)H + 5, dbd, (size_t)N, (size_t)H);
    free(a); free(Al); free(dt); free(dg); free(dA0); free(ddt0); free(b); free(dbeta);
    free(g); free(da); free(dA); free(ddt); free(beta); free(db);
    dfree_all();
}

/* ---- loss ------------------------------------------------------------------------------------------------- */
static void test_cross_entropy(int N, int V) {
    char op[64];
    snprintf(op, sizeof op, "cross_entropy N%d V%d", N, V);
    const size_t n = (size_t)N * V;
    double *l = rnd(n, -6, 6), *u = rnd((size_t)N, 0, V);
    int *tgt = xmalloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) tgt[i] = i % 5 == 3 ? -1 : ((int)u[i] < V ? (int)u[i] : V - 1);
    void *ld = up_act(l, n);
    const double gs = 1.0 / N;
    double *dl = zeros(n);
    int nv_ref = 0;
    const double loss_ref = gdn_cross_entropy_f64(dl, l, tgt, N, V, gs, &nv_ref);
    int *tgtd = dmalloc((size_t)N * sizeof(int));
    CK(cudaMemcpy(tgtd, tgt, (size_t)N * sizeof(int), cudaMemcpyHostToDevice));
    double *lossd = dmalloc(sizeof(double));
    int *nvd = dmalloc(sizeof(int));
    void *ws = dmalloc(gdn_cuda_cross_entropy_workspace(N)), *dld = nan_act(n);
    double loss[3];
    int nv[3];
    for (int run = 0; run < 3; run++) { /* 0: separate dlogits, 1: no dlogits, 2: in place */
        void *dst = run == 0 ? dld : run == 1 ? NULL : ld;
        gdn_cuda_cross_entropy(P, dst, ld, tgtd, N, V, (float)gs, lossd, nvd, ws, NULL);
        CK(cudaMemcpy(&loss[run], lossd, sizeof(double), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(&nv[run], nvd, sizeof(int), cudaMemcpyDeviceToHost));
    }
    const double e = fabs(loss[0] - loss_ref) / fabs(loss_ref);
    report(op, "loss", e, e < TOL);
    report(op, "n_valid", fabs((double)nv[0] - nv_ref), nv[0] == nv_ref && nv[1] == nv_ref && nv[2] == nv_ref);
    const int same = memcmp(&loss[0], &loss[1], sizeof(double)) == 0 && memcmp(&loss[0], &loss[2], sizeof(double)) == 0;
    printf("%-4s %-34s %-8s %s %s\n", BF ? "bf16" : "fp32", op, "loss", "bitwise", same ? "ok" : "FAIL");
    if (!same) FAILS++;
    cmp(op, "dlogits", down_act(dld, n), dl, n);
    cmp(op, "dlog=log", down_act(ld, n), dl, n);
    free(l); free(u); free(tgt); free(dl);
    dfree_all();
}

/* ---- optimizer ---------------------------------------------------------------------------------------------- */
static void test_grad_norm(size_t n) {
    char op[64];
    snprintf(op, sizeof op, "grad_norm n%zu", n);
    double *g = rnd(n, -1, 1);
    float *gd = up_f32(g, n);
    double ref = 0;
    for (size_t i = 0; i < n; i++) ref += g[i] * g[i];
    ref = sqrt(ref);
    double *outd = dmalloc(2 * sizeof(double)), out[2];
    void *ws = dmalloc(gdn_cuda_grad_norm_workspace(n));
    gdn_cuda_grad_norm(outd, gd, n, ws, NULL);
    gdn_cuda_grad_norm(outd + 1, gd, n, ws, NULL);
    CK(cudaMemcpy(out, outd, sizeof out, cudaMemcpyDeviceToHost));
    const double e = fabs(out[0] - ref) / ref;
    report(op, "norm", e, e < TOL);
    printf("%-4s %-34s %-8s %s %s\n", BF ? "bf16" : "fp32", op, "norm", "bitwise", out[0] == out[1] ? "ok" : "FAIL");
    if (out[0] != out[1]) FAILS++;
    gdn_cuda_grad_scale(gd, n, 0.37f, NULL);
    for (size_t i = 0; i < n; i++) g[i] = (float)g[i] * 0.37f;
    cmp(op, "scaled", down_f32(gd, n), g, n);
    free(g);
    dfree_all();
}

/* AdamW against train/optim.c's gdn_adamw_update on a small parameter table, two steps, the
 * second with clipping active. */
static void test_adamw(void) {
    const char *op = "adamw (vs train/optim.c)";
    gdn_config c = {.vocab_size = 37, .d_model = 24, .n_layers = 2, .n_heads = 2, .head_dim = 8, .expand_v = 2,
                    .d_ff = 40, .conv_width = 4, .chunk_size = 64, .tie_embeddings = 0, .allow_neg_eigval = 0,
                    .norm_eps = 1e-6};
    gdn_param_table t;
    gdn_param_table_build(&t, &c);
    const size_t n = t.total;
    uint64_t *end = xmalloc((size_t)t.n * sizeof *end), *act = xmalloc((size_t)t.n * sizeof *act);
    int *decay = xmalloc((size_t)t.n * sizeof *decay), nr = 0;
    size_t n_act = 0;
    for (int i = 0; i < t.n; i++) { /* one run per tensor; the bf16 copy has gaps of 5 */
        end[nr] = t.p[i].offset + t.p[i].numel;
        act[nr] = n_act;
        n_act += t.p[i].numel + 5;
        decay[nr++] = !t.p[i].no_decay;
    }
    uint64_t *endd = dmalloc((size_t)nr * sizeof *end), *actd = dmalloc((size_t)nr * sizeof *act);
    int *decd = dmalloc((size_t)nr * sizeof *decay);
    CK(cudaMemcpy(endd, end, (size_t)nr * sizeof *end, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(actd, act, (size_t)nr * sizeof *act, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(decd, decay, (size_t)nr * sizeof *decay, cudaMemcpyHostToDevice));
    double *pw = rnd(n, -1, 1), *pg = rnd(n, -1, 1), *pm = rnd(n, -0.1, 0.1), *pv = rnd(n, 0, 0.01);
    float *w = xmalloc(n * 4), *g = xmalloc(n * 4), *m = xmalloc(n * 4), *v = xmalloc(n * 4);
    float *wd = up_f32(pw, n), *gd = up_f32(pg, n), *md = up_f32(pm, n), *vd = up_f32(pv, n);
    for (size_t i = 0; i < n; i++) { w[i] = (float)pw[i]; g[i] = (float)pg[i]; m[i] = (float)pm[i]; v[i] = (float)pv[i]; }
    void *wact = dmalloc(n_act * 2), *ws = dmalloc(gdn_cuda_grad_norm_workspace(n));
    double *gnd = dmalloc(sizeof(double));
    gdn_adamw_hparams h = {3e-3, 0.9, 0.95, 1e-8, 0.1};
    gdn_adamw_hparams hc = {3e-3, 0.9, 0.95, 1e-8, 0.1};
    for (int step = 1; step <= 2; step++) {
        const double clip = step == 2 ? 0.5 * gdn_grad_norm(g, n) : 0.0; /* step 2 clips */
        const double gn = gdn_grad_norm(g, n);
        if (clip > 0 && gn > clip) gdn_grad_scale(g, n, (float)(clip / gn));
        gdn_adamw_update(&t, w, g, m, v, &hc, step);
        gdn_cuda_grad_norm(gnd, gd, n, ws, NULL);
        gdn_cuda_adamw(wd, gd, md, vd, wact, n, endd, decd, actd, nr, &h, step, gnd, clip, NULL);
    }
    double *rw = xmalloc(n * 8), *rm = xmalloc(n * 8), *rv = xmalloc(n * 8);
    for (size_t i = 0; i < n; i++) { rw[i] = w[i]; rm[i] = m[i]; rv[i] = v[i]; }
    float *tmp = dmalloc(n_act * 4);
    gdn_cuda_from_act(GDN_CUDA_BF16, tmp, wact, n_act, NULL);
    float *wa = down_f32(tmp, n_act), *wg = down_f32(wd, n);
    int bf_ok = 1;
    for (int r = 0; r < nr; r++)
        for (size_t i = r ? end[r - 1] : 0; i < end[r]; i++) bf_ok &= wa[act[r] + i - (r ? end[r - 1] : 0)] == bf16_round(wg[i]);
    cmp(op, "params", wg, rw, n);
    cmp(op, "m", down_f32(md, n), rm, n);
    cmp(op, "v", down_f32(vd, n), rv, n);
    report(op, "bf16 copy", 0.0, bf_ok);
    free(end); free(act); free(decay); free(pw); free(pg); free(pm); free(pv); free(w); free(g); free(m); free(v);
    free(rw); free(rm); free(rv); free(wa);
    gdn_param_table_free(&t);
    dfree_all();
}

/* ---- head packing ----------------------------------------------------------------------------------------- */
static void test_pack(int N, int H, int D, int S, int Ds, int Dp, int split) {
    char op[64];
    snprintf(op, sizeof op, "heads_pack N%d H%d D%d S%d Dp%d split%d", N, H, D, S, Dp, split);
    const size_t n = (size_t)N * H * D, np = (size_t)N * H * S * Dp;
    double *x = rnd(n, -1, 1), *ref = zeros(np), *back = zeros(n);
    void *xd = up_act(x, n), *pd = nan_act(np), *bd = nan_act(n);
    for (size_t t = 0; t < (size_t)N; t++)
        for (int h = 0; h < H; h++)
            for (int s = 0; s < S; s++)
                for (int i = 0; i < Dp; i++) {
                    const int col = split ? s * Ds + i : i;
                    ref[((t * H + h) * S + s) * Dp + i] = i < Ds && col < D ? x[(t * H + h) * D + col] : 0.0;
                }
    for (size_t i = 0; i < n; i++) back[i] = split ? x[i] : S * x[i];
    gdn_cuda_heads_pack(P, pd, xd, N, H, D, S, Ds, Dp, split, NULL);
    gdn_cuda_heads_unpack(P, bd, pd, N, H, D, S, Ds, Dp, split, NULL);
    cmp(op, "packed", down_act(pd, np), ref, np);
    cmp(op, "unpacked", down_act(bd, n), back, n);
    free(x); free(ref); free(back);
    dfree_all();
}

/* ---- attention layers: biases, q/k norm + RoPE -------------------------------------------------- */
static void test_bias(int N, int C) {
    char op[64];
    snprintf(op, sizeof op, "bias N%d C%d", N, C);
    const size_t n = (size_t)N * C;
    double *y = rnd(n, -2, 2), *b = rnd((size_t)C, -1, 1), *dy = rnd(n, -1, 1), *db0 = rnd((size_t)C, -1, 1);
    void *yd = up_act(y, n), *dyd = up_act(dy, n);
    float *bd = up_f32(b, (size_t)C), *dbd = up_f32(db0, (size_t)C), *db2 = dcopy_f32(dbd, (size_t)C);
    gdn_cuda_bias_add(P, yd, bd, N, C, NULL);
    for (size_t i = 0; i < n; i++) y[i] += b[i % (size_t)C];
    cmp(op, "y+=b", down_act(yd, n), y, n);
    double *db = copy_d(db0, (size_t)C);
    for (size_t i = 0; i < n; i++) db[i % (size_t)C] += dy[i];
    void *ws = dmalloc(gdn_cuda_bias_grad_workspace(N, C));
    gdn_cuda_bias_grad(P, dbd, dyd, N, C, ws, NULL);
    gdn_cuda_bias_grad(P, db2, dyd, N, C, ws, NULL);
    same_bits(op, "db", dbd, db2, (size_t)C);
    cmp(op, "db+=", down_f32(dbd, (size_t)C), db, (size_t)C);
    free(y); free(b); free(dy); free(db0); free(db);
    dfree_all();
}

/* gdn_cuda_qk_prep against the CPU ops it fuses (model/cpu/model_attn.c): u = x + bias, the
 * per-head RMSNorm (gdn_rmsnorm_*_f64 over rows of D), RoPE (gdn_rope_*_f64, positions from 0);
 * q rows [B,T,H,D] and k rows [B,T,Hkv,D] in one launch. The backward reads the reference's r (as
 * float, what the forward saves) and must give the same bits twice. */
static void qk_reference(double *y, double *r, double *u, const double *x, const double *b, const double *w, int B,
                         int T, int H, int D, int norm, double theta) {
    const size_t rows = (size_t)B * T * H, n = rows * D;
    for (size_t i = 0; i < n; i++) u[i] = x[i] + (b ? b[i % ((size_t)H * D)] : 0.0);
    double *t = zeros(n);
    if (norm) gdn_rmsnorm_fwd_f64(t, r, u, w, (int)rows, D, 1e-6);
    else memcpy(t, u, n * sizeof *t);
    gdn_rope_fwd_f64(y, t, B, T, H, D, 0, theta);
    free(t);
}
static void qk_reference_bwd(double *du, double *dw, const double *dy, const double *u, const double *w,
                             const double *r, int B, int T, int H, int D, int norm, double theta) {
    const size_t rows = (size_t)B * T * H, n = rows * D;
    double *dn = zeros(n);
    gdn_rope_bwd_f64(dn, dy, B, T, H, D, 0, theta);
    if (norm) gdn_rmsnorm_bwd_f64(du, dw, dn, u, w, r, (int)rows, D);
    else memcpy(du, dn, n * sizeof *du);
    free(dn);
}
static void test_qk_prep(int B, int T, int H, int Hkv, int D, int norm, int bias) {
    char op[64];
    snprintf(op, sizeof op, "qk_prep B%dT%d H%d/%d D%d%s%s", B, T, H, Hkv, D, norm ? " norm" : "", bias ? " bias" : "");
    const double theta = 10000.0 + 17.0 * D; /* any base; the CPU's angles are the reference */
    const size_t N = (size_t)B * T, nq = N * H * D, nk = N * Hkv * D, rq_n = N * H, rk_n = N * Hkv;
    double *xq = rnd(nq, -2, 2), *xk = rnd(nk, -2, 2), *bq = rnd((size_t)H * D, -0.5, 0.5);
    double *bk = rnd((size_t)Hkv * D, -0.5, 0.5), *wq = rnd((size_t)D, 0.5, 1.5), *wk = rnd((size_t)D, 0.5, 1.5);
    double *dyq = rnd(nq, -1, 1), *dyk = rnd(nk, -1, 1), *dwq0 = rnd((size_t)D, -1, 1), *dwk0 = rnd((size_t)D, -1, 1);
    void *xqd = up_act(xq, nq), *xkd = up_act(xk, nk), *dyqd = up_act(dyq, nq), *dykd = up_act(dyk, nk);
    float *bqd = up_f32(bq, (size_t)H * D), *bkd = up_f32(bk, (size_t)Hkv * D);
    float *wqd = up_f32(wq, (size_t)D), *wkd = up_f32(wk, (size_t)D);
    float *dwqd = up_f32(dwq0, (size_t)D), *dwkd = up_f32(dwk0, (size_t)D);
    float *dwq2 = dcopy_f32(dwqd, (size_t)D), *dwk2 = dcopy_f32(dwkd, (size_t)D);
    float *table = xmalloc((size_t)T * D * sizeof(float));
    gdn_cuda_rope_table(table, T, D, 0, theta);
    float *rope = dmalloc((size_t)T * D * sizeof(float));
    CK(cudaMemcpy(rope, table, (size_t)T * D * sizeof(float), cudaMemcpyHostToDevice));
    free(table);
    const gdn_cuda_qk_prep s = {.B = B, .T = T, .H = H, .Hkv = Hkv, .D = D, .norm = norm, .eps = 1e-6f,
                                .rope = rope, .bq = bias ? bqd : NULL, .bk = bias ? bkd : NULL,
                                .wq = norm ? wqd : NULL, .wk = norm ? wkd : NULL};
    /* forward */
    double *yq = zeros(nq), *yk = zeros(nk), *uq = zeros(nq), *uk = zeros(nk), *rq = zeros(rq_n), *rk = zeros(rk_n);
    qk_reference(yq, rq, uq, xq, bias ? bq : NULL, wq, B, T, H, D, norm, theta);
    qk_reference(yk, rk, uk, xk, bias ? bk : NULL, wk, B, T, Hkv, D, norm, theta);
    void *qd = nan_act(nq), *kd = nan_act(nk);
    float *rqd = nan_f32(rq_n), *rkd = nan_f32(rk_n);
    gdn_cuda_qk_prep_fwd(P, &s, qd, rqd, kd, rkd, xqd, xkd, NULL);
    cmp(op, "q", down_act(qd, nq), yq, nq);
    cmp(op, "k", down_act(kd, nk), yk, nk);
    if (norm) {
        cmp(op, "rq", down_f32(rqd, rq_n), rq, rq_n);
        cmp(op, "rk", down_f32(rkd, rk_n), rk, rk_n);
    }
    void *q2 = nan_act(nq), *k2 = nan_act(nk); /* the backward's recomputation: same bits, r not written */
    gdn_cuda_qk_prep_fwd(P, &s, q2, NULL, k2, NULL, xqd, xkd, NULL);
    same_bytes(op, "q again", qd, q2, nq * gdn_cuda_act_bytes(P));
    same_bytes(op, "k again", kd, k2, nk * gdn_cuda_act_bytes(P));
    /* backward */
    float *rqs = up_f32(rq, rq_n), *rks = up_f32(rk, rk_n); /* the saved (float) r; ref uses the same */
    double *duq = zeros(nq), *duk = zeros(nk), *dwq = copy_d(dwq0, (size_t)D), *dwk = copy_d(dwk0, (size_t)D);
    qk_reference_bwd(duq, dwq, dyq, uq, wq, rq, B, T, H, D, norm, theta);
    qk_reference_bwd(duk, dwk, dyk, uk, wk, rk, B, T, Hkv, D, norm, theta);
    void *ws = dmalloc(gdn_cuda_qk_prep_workspace(&s) + 1);
    void *dqd = nan_act(nq), *dkd = nan_act(nk);
    gdn_cuda_qk_prep_bwd(P, &s, dqd, dkd, dwqd, dwkd, dyqd, dykd, xqd, xkd, rqs, rks, ws, NULL);
    cmp(op, "dqp", down_act(dqd, nq), duq, nq);
    cmp(op, "dkp", down_act(dkd, nk), duk, nk);
    if (norm) {
        gdn_cuda_qk_prep_bwd(P, &s, dqd, dkd, dwq2, dwk2, dyqd, dykd, xqd, xkd, rqs, rks, ws, NULL);
        same_bits(op, "dwq", dwqd, dwq2, (size_t)D);
        same_bits(op, "dwk", dwkd, dwk2, (size_t)D);
        cmp(op, "dwq+=", down_f32(dwqd, (size_t)D), dwq, (size_t)D);
        cmp(op, "dwk+=", down_f32(dwkd, (size_t)D), dwk, (size_t)D);
    } else { /* no norm: the weights' gradients are not touched */
        unchanged(op, "dwq", down_f32(dwqd, (size_t)D), dwq0, (size_t)D);
        unchanged(op, "dwk", down_f32(dwkd, (size_t)D), dwk0, (size_t)D);
    }
    /* in place: dqp over dq */
    gdn_cuda_qk_prep_bwd(P, &s, dyqd, dykd, dwq2, dwk2, dyqd, dykd, xqd, xkd, rqs, rks, ws, NULL);
    cmp(op, "dqp in place", down_act(dyqd, nq), duq, nq);
    free(xq); free(xk); free(bq); free(bk); free(wq); free(wk); free(dyq); free(dyk); free(dwq0); free(dwk0);
    free(yq); free(yk); free(uq); free(uk); free(rq); free(rk); free(duq); free(duk); free(dwq); free(dwk);
    dfree_all();
}

/* The attention layers' ops (also run on the CPU emulator by tests/gpu/emu_ops.sh). */
static void attention_layer_ops(void) {
    test_bias(77, 96);
    test_bias(300, 130); /* two row chunks, a partial column tile */
    /* q/k prep: the attention head dims 64, 128 (one and two pairs per lane), partial lanes
     * (D 32, 200) and the widest (512); GQA 1, 2, 4; row counts no multiple of the backward's
     * 64 rows per block; with and without the norm and the biases */
    test_qk_prep(2, 37, 4, 2, 64, 1, 1);
    test_qk_prep(1, 45, 2, 2, 128, 1, 0);
    test_qk_prep(2, 21, 4, 1, 128, 0, 1);
    test_qk_prep(3, 13, 2, 1, 64, 0, 0);
    test_qk_prep(1, 19, 3, 3, 32, 1, 1);
    test_qk_prep(2, 11, 2, 1, 200, 1, 1);
    test_qk_prep(1, 9, 2, 2, 512, 1, 0);
    test_qk_prep(1, 300, 8, 2, 128, 1, 1); /* several blocks of q and of k rows */
}

int main(void) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    gdn_cuda_blas *bl = gdn_cuda_blas_create(NULL);
    for (int pi = 0; pi < 2; pi++) {
        P = pi ? GDN_CUDA_BF16 : GDN_CUDA_FP32;
        BF = pi;
        TOL = BF ? 1e-2 : 1e-5;
        test_linear(bl, 37, 53, 29, 0);
        test_linear(bl, 130, 64, 200, 0);
        test_linear(bl, 130, 64, 200, 4); /* pointers 4-byte aligned only */
        test_linear_add_empty(bl, 9, 33);
        test_embed(61, 17, 45);
        test_embed(300, 1000, 130);
        /* Norms: rows of 256, 512, 1024 are held in registers (the model's d_model 1024, key dim 256,
         * value dim 512); other multiples of 256 walk the row 8-wide per pass, the rest 1-wide. N is
         * no multiple of the rows per block (8 forward, 64 backward), so blocks end part-full. */
        test_rmsnorm(77, 133);
        test_rmsnorm(130, 2000);
        test_rmsnorm(70, 1024);
        test_rmsnorm(130, 256);
        test_rmsnorm(200, 512);
        test_rmsnorm(70, 1536);
        test_l2norm(91, 64);
        test_l2norm(13, 37);
        test_l2norm(45, 256);
        test_l2norm(300, 256);
        test_l2norm(37, 512);
        test_l2norm(21, 1024);
        test_l2norm(21, 1536);
        test_gated(70, 96);
        test_gated(200, 512);
        test_gated(130, 256);
        test_gated(70, 1024);
        test_gated(100, 1536);
        test_conv_all(3, 21, 45, 4); /* generic paths */
        test_conv_all(2, 300, 130, 3);
        test_conv_all(5, 7, 13, 3);
        test_conv_all(4, 1, 13, 3);  /* T < W-1: the halo rows feed every output */
        test_conv_all(2, 30, 13, 8); /* widest */
        test_conv_all(2, 150, 64, 4); /* vector paths (W 4; 8 channels per thread forward, 4 backward) */
        test_conv_all(3, 130, 1036, 4); /* C % 8 == 4: the backward 4-wide, the forward generic */
        test_conv_all(1, 77, 256, 4);
        test_conv_all(3, 130, 1032, 4); /* a partial last channel tile; row blocks start mid-sequence */
        test_conv_all(40, 7, 16, 4);    /* many sequences per row block; blocks start at t = 1, 2 (halo) */
        test_conv_all(5, 1, 8, 4);      /* T = 1, 2, 3: shorter than the window */
        test_conv_all(4, 2, 24, 4);
        test_conv_all(3, 3, 16, 4);
        test_conv_all(2, 150, 1536, 4); /* the model's q and k widths (row blocks cross t = 150) */
        test_conv_all(2, 150, 3072, 4); /* its v width */
        test_conv_all(2, 150, 1538, 4); /* C % 4 == 2: the generic forward and backward */
        test_conv_docs(6, 40, 13, 3);   /* documents: generic widths and channels */
        test_conv_docs(5, 150, 64, 4);  /* W 4, C % 8 == 0 (the vector paths without documents) */
        test_conv_docs(8, 7, 16, 4);    /* rows shorter than the window */
        test_conv_docs(3, 70, 1536, 4); /* the model's q and k width */
        test_conv_docs(2, 30, 13, 8);   /* widest */
        test_swiglu(7, 143);
        test_swiglu(8, 512); /* 8-wide path */
        test_gates(300, 3, 1.0);
        test_gates(77, 6, 2.0);
        test_cross_entropy(19, 1007);
        test_cross_entropy(64, 32000);
        test_grad_norm(100003);
        test_pack(37, 3, 32, 2, 32, 64, 0);
        test_pack(37, 3, 96, 2, 48, 64, 1);
        test_pack(11, 2, 512, 2, 256, 256, 1);
        test_pack(7, 3, 36, 2, 36, 64, 0); /* element-wise paths */
        test_pack(5, 2, 100, 2, 50, 64, 1);
        test_pack(9, 3, 1, 2, 1, 1, 0);
        attention_layer_ops();
        if (!BF) test_adamw();
    }
    gdn_cuda_blas_free(bl);
    printf("%s: %d failed comparisons\n", FAILS ? "FAIL" : "PASS", FAILS);
    return FAILS ? 1 : 0;
}
