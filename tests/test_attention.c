/* Causal softmax attention, rotary embedding and the per-head q/k RMSNorm: the fp64 kernels
 * against finite differences and against naive references that hold the whole T x T matrix,
 * the fp32 kernels against fp64, grouped kv heads (H/Hkv = 1, 2, 4), T of 1, odd, and across
 * the 64-row blocks, very large scores, and the same bits for any thread count. Every measured
 * relative error is printed; the maxima close each test. */
#include <math.h>
#include <omp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/check.h"
#include "model/cpu/ops_cpu.h"
#include "tests/ref/arrays.h"
#include "tests/ref/attention_ref.h"
#include "tests/ref/fd.h"

/* After the project headers: OpenBLAS's cblas.h pulls in <complex.h> (see test_delta_rule.c). */
#include <cblas.h>

/* Central differences with eps 1e-5 on losses of size ~1: truncation ~eps^2 and rounding
 * ~1e-16/eps keep the numeric gradient within ~1e-9 relative, so 1e-6 leaves room and still
 * catches any wrong term (a missing or misplaced term is an O(1) error). */
#define FD_EPS 1e-5
#define FD_TOL 1e-6
/* fp64 kernel vs the naive fp64 reference: only the order of the sums differs. */
#define REF_TOL 1e-13
/* fp32 kernel vs fp64 on the same (rounded) inputs: float carries 6e-8 relative per operation;
 * sums of up to T = 200 terms gave at most 3e-7 (printed). With scores of ~1e3 a float score
 * is off by ~6e-5 in absolute terms, which moves the probabilities by as much: LARGE_TOL. */
#define F32_TOL 2e-6
#define LARGE_TOL 1e-5

typedef struct {
    gdn_attn_shape s;
    double scale;
    size_t nq, nkv, nl;  /* elements of q (= o, do), of k (= v), of lse */
    double *q, *k, *v, *w; /* w: the output weights, d_o of L = sum(o * w) */
} attn_problem;

static attn_problem problem_make(int B, int T, int H, int Hkv, int D, double amp,
                                 unsigned long long seed) {
    attn_problem p = {{B, T, H, Hkv, D, NULL}, 1.0 / sqrt((double)D), 0, 0, 0, NULL, NULL, NULL, NULL};
    p.nq = (size_t)B * T * H * D;
    p.nkv = (size_t)B * T * Hkv * D;
    p.nl = (size_t)B * H * T;
    p.q = ref_uniform(p.nq, -amp, amp, seed);
    p.k = ref_uniform(p.nkv, -amp, amp, seed + 1);
    p.v = ref_uniform(p.nkv, -1, 1, seed + 2);
    p.w = ref_uniform(p.nq, -1, 1, seed + 3);
    return p;
}

static void problem_free(attn_problem *p) {
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->w);
}

static const char *const grad_names[] = {"o", "lse", "dq", "dk", "dv"};

/* Prints one case; fails the test when an error reaches tol; folds them into *mx. */
static void report(const char *label, const double *err, const char *const *names, int n,
                   double tol, double *mx) {
    printf("  %-44s", label);
    for (int i = 0; i < n; i++) {
        printf(" %s %.1e", names[i], err[i]);
        if (err[i] > *mx) *mx = err[i];
    }
    printf("\n");
    for (int i = 0; i < n; i++)
        if (!(err[i] < tol)) fail_msg("%s: %s relative error %.3e (limit %.0e)", label, names[i], err[i], tol);
}

/* ---- finite differences ------------------------------------------------------------------- */

typedef struct {
    attn_problem *p;
    double *o;
} attn_fd_ctx;

static double attn_loss(void *c_) {
    attn_fd_ctx *c = c_;
    gdn_attn_fwd_f64(&c->p->s, c->p->q, c->p->k, c->p->v, c->p->scale, c->o, NULL);
    double L = 0;
    for (size_t i = 0; i < c->p->nq; i++) L += c->o[i] * c->p->w[i];
    return L;
}

static void test_attn_vs_fd(void **state) {
    (void)state;
    const struct {
        int B, T, H, Hkv, D;
    } cases[] = {{2, 7, 4, 2, 8}, {1, 1, 4, 2, 8},   {1, 9, 4, 1, 16}, {2, 5, 4, 4, 16},
                 {1, 13, 4, 2, 16}, {1, 70, 2, 1, 8}, {1, 3, 4, 1, 8}};
    double mx = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        attn_problem p = problem_make(cases[c].B, cases[c].T, cases[c].H, cases[c].Hkv, cases[c].D,
                                      1.5, 10 + 10 * c);
        double *o = ref_nan_array(p.nq), *lse = ref_nan_array(p.nl), *dq = ref_nan_array(p.nq);
        double *dk = ref_nan_array(p.nkv), *dv = ref_nan_array(p.nkv);
        gdn_attn_fwd_f64(&p.s, p.q, p.k, p.v, p.scale, o, lse);
        gdn_attn_bwd_f64(&p.s, p.q, p.k, p.v, o, lse, p.scale, p.w, dq, dk, dv);
        attn_fd_ctx ctx = {&p, ref_nan_array(p.nq)};
        double err[3] = {fd_check(attn_loss, &ctx, p.q, dq, p.nq, 400, FD_EPS),
                         fd_check(attn_loss, &ctx, p.k, dk, p.nkv, 400, FD_EPS),
                         fd_check(attn_loss, &ctx, p.v, dv, p.nkv, 400, FD_EPS)};
        char label[96];
        snprintf(label, sizeof label, "f64 vs FD B%d T%d H%d Hkv%d D%d", p.s.B, p.s.T, p.s.H, p.s.Hkv, p.s.D);
        report(label, err, grad_names + 2, 3, FD_TOL, &mx);
        free(ctx.o); free(o); free(lse); free(dq); free(dk); free(dv);
        problem_free(&p);
    }
    printf("attention f64 backward vs finite differences: max relative error %.2e (limit %.0e)\n", mx, FD_TOL);
}

/* ---- against the naive reference ------------------------------------------------------------ */

/* ||a - b|| / ||b||; where b is exactly zero (dq, dk at T = 1: a single key gets all the
 * weight whatever its score), ||a|| / ||scale_ref||, the size of the rounding left over. */
static double err_vs(const double *a, const float *a32, const double *b, size_t n,
                     const double *scale_ref, size_t n_ref) {
    double b2 = 0;
    for (size_t i = 0; i < n; i++) b2 += b[i] * b[i];
    if (b2 > 0) return a32 ? fd_rel_err_f32(a32, b, n) : fd_rel_err(a, b, n);
    double a2 = 0, r2 = 0;
    for (size_t i = 0; i < n; i++) a2 += a32 ? (double)a32[i] * a32[i] : a[i] * a[i];
    for (size_t i = 0; i < n_ref; i++) r2 += scale_ref[i] * scale_ref[i];
    return sqrt(a2) / fmax(sqrt(r2), 1e-30);
}

/* Errors of the f64 (f32 = 0) or f32 kernel against the naive reference, in grad_names order.
 * For f32 the inputs are rounded to float first, so both see the same numbers. */
static void kernel_vs_ref(attn_problem *p, int f32, double *err) {
    double *o = ref_nan_array(p->nq), *lse = ref_nan_array(p->nl), *dq = ref_nan_array(p->nq);
    double *dk = ref_nan_array(p->nkv), *dv = ref_nan_array(p->nkv);
    if (f32) {
        ref_round_f32(p->q, p->nq); ref_round_f32(p->k, p->nkv);
        ref_round_f32(p->v, p->nkv); ref_round_f32(p->w, p->nq);
    }
    attn_ref_fwd(&p->s, p->q, p->k, p->v, p->scale, o, lse);
    attn_ref_bwd(&p->s, p->q, p->k, p->v, p->scale, p->w, dq, dk, dv);
    if (f32) {
        float *q = ref_to_f32(p->q, p->nq), *k = ref_to_f32(p->k, p->nkv), *v = ref_to_f32(p->v, p->nkv);
        float *w = ref_to_f32(p->w, p->nq), *o32 = ref_nan_f32(p->nq), *l32 = ref_nan_f32(p->nl);
        float *dq32 = ref_nan_f32(p->nq), *dk32 = ref_nan_f32(p->nkv), *dv32 = ref_nan_f32(p->nkv);
        float sc = (float)p->scale;
        gdn_attn_fwd_f32(&p->s, q, k, v, sc, o32, l32);
        gdn_attn_bwd_f32(&p->s, q, k, v, o32, l32, sc, w, dq32, dk32, dv32);
        err[0] = fd_rel_err_f32(o32, o, p->nq);
        err[1] = fd_rel_err_f32(l32, lse, p->nl);
        err[2] = err_vs(NULL, dq32, dq, p->nq, p->w, p->nq);
        err[3] = err_vs(NULL, dk32, dk, p->nkv, p->w, p->nq);
        err[4] = fd_rel_err_f32(dv32, dv, p->nkv);
        free(q); free(k); free(v); free(w); free(o32); free(l32); free(dq32); free(dk32); free(dv32);
    } else {
        double *o2 = ref_nan_array(p->nq), *l2 = ref_nan_array(p->nl), *dq2 = ref_nan_array(p->nq);
        double *dk2 = ref_nan_array(p->nkv), *dv2 = ref_nan_array(p->nkv);
        gdn_attn_fwd_f64(&p->s, p->q, p->k, p->v, p->scale, o2, l2);
        gdn_attn_bwd_f64(&p->s, p->q, p->k, p->v, o2, l2, p->scale, p->w, dq2, dk2, dv2);
        err[0] = fd_rel_err(o2, o, p->nq);
        err[1] = fd_rel_err(l2, lse, p->nl);
        err[2] = err_vs(dq2, NULL, dq, p->nq, p->w, p->nq);
        err[3] = err_vs(dk2, NULL, dk, p->nkv, p->w, p->nq);
        err[4] = fd_rel_err(dv2, dv, p->nkv);
        free(o2); free(l2); free(dq2); free(dk2); free(dv2);
    }
    free(o); free(lse); free(dq); free(dk); free(dv);
}

static const int grid_T[] = {1, 2, 17, 64, 65, 130};
static const int grid_heads[][2] = {{4, 4}, {4, 2}, {4, 1}};

static void test_attn_f64_vs_naive(void **state) {
    (void)state;
    double mx = 0;
    for (size_t ti = 0; ti < sizeof grid_T / sizeof grid_T[0]; ti++)
        for (size_t hi = 0; hi < 3; hi++)
            for (int D = 8; D <= 16; D += 8) {
                attn_problem p = problem_make(2, grid_T[ti], grid_heads[hi][0], grid_heads[hi][1], D,
                                              1.5, 100 + 10 * ti + hi + (unsigned)D);
                double err[5];
                kernel_vs_ref(&p, 0, err);
                char label[96];
                snprintf(label, sizeof label, "f64 vs naive T%d H%d Hkv%d D%d", p.s.T, p.s.H, p.s.Hkv, D);
                report(label, err, grad_names, 5, REF_TOL, &mx);
                problem_free(&p);
            }
    printf("attention f64 vs naive f64: max relative error %.2e (limit %.0e)\n", mx, REF_TOL);
}

static void test_attn_f32_vs_f64(void **state) {
    (void)state;
    const struct {
        int B, T, H, Hkv, D;
    } cases[] = {{2, 1, 4, 2, 16}, {2, 65, 4, 1, 16}, {2, 130, 4, 2, 16}, {1, 200, 4, 4, 64},
                 {1, 131, 4, 1, 64}, {3, 33, 2, 1, 8}};
    double mx = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        attn_problem p = problem_make(cases[c].B, cases[c].T, cases[c].H, cases[c].Hkv, cases[c].D,
                                      1.5, 300 + 10 * c);
        double err[5];
        kernel_vs_ref(&p, 1, err);
        char label[96];
        snprintf(label, sizeof label, "f32 vs naive f64 B%d T%d H%d Hkv%d D%d", p.s.B, p.s.T, p.s.H, p.s.Hkv,
                 p.s.D);
        report(label, err, grad_names, 5, F32_TOL, &mx);
        problem_free(&p);
    }
    printf("attention f32 vs naive f64: max relative error %.2e (limit %.0e)\n", mx, F32_TOL);
}

/* Scores up to ~1e3: exp without the row maximum subtracted would overflow in either
 * precision. The probabilities are nearly one-hot, which the reference handles the same way. */
static void test_attn_large_scores(void **state) {
    (void)state;
    double mx = 0;
    for (int f32 = 0; f32 < 2; f32++) {
        attn_problem p = problem_make(1, 70, 4, 2, 16, 12.0, 400 + f32);
        double err[5];
        kernel_vs_ref(&p, f32, err);
        report(f32 ? "f32 vs naive, scores ~1e3" : "f64 vs naive, scores ~1e3", err, grad_names, 5,
               f32 ? LARGE_TOL : REF_TOL, &mx);
        problem_free(&p);
    }
}

/* ---- determinism and optional arguments ---------------------------------------------------- */

static void run_f32(const attn_problem *p, const float *q, const float *k, const float *v,
                    const float *w, float *o, float *lse, float *dq, float *dk, float *dv) {
    gdn_attn_fwd_f32(&p->s, q, k, v, (float)p->scale, o, lse);
    gdn_attn_bwd_f32(&p->s, q, k, v, o, lse, (float)p->scale, w, dq, dk, dv);
}

/* 1, 2 and 3 threads give the same bits (dk, dv sum over a group's query heads). */
static void test_attn_thread_count(void **state) {
    (void)state;
    attn_problem p = problem_make(3, 97, 4, 2, 16, 1.5, 500);
    float *q = ref_to_f32(p.q, p.nq), *k = ref_to_f32(p.k, p.nkv), *v = ref_to_f32(p.v, p.nkv);
    float *w = ref_to_f32(p.w, p.nq);
    size_t n[5] = {p.nq, p.nl, p.nq, p.nkv, p.nkv};
    float *r1[5], *r[5];
    int keep = omp_get_max_threads();
    omp_set_num_threads(1);
    for (int i = 0; i < 5; i++) r1[i] = ref_nan_f32(n[i]);
    run_f32(&p, q, k, v, w, r1[0], r1[1], r1[2], r1[3], r1[4]);
    for (int nt = 2; nt <= 3; nt++) {
        for (int i = 0; i < 5; i++) r[i] = ref_nan_f32(n[i]);
        omp_set_num_threads(nt);
        run_f32(&p, q, k, v, w, r[0], r[1], r[2], r[3], r[4]);
        for (int i = 0; i < 5; i++) {
            assert_memory_equal(r1[i], r[i], n[i] * sizeof(float));
            free(r[i]);
        }
    }
    omp_set_num_threads(keep);
    for (int i = 0; i < 5; i++) free(r1[i]);
    free(q); free(k); free(v); free(w);
    problem_free(&p);
}

/* lse NULL gives the same o; T = 0 writes nothing; the caller's BLAS thread count survives. */
static void test_attn_optional(void **state) {
    (void)state;
    attn_problem p = problem_make(2, 20, 4, 1, 8, 1.5, 600);
    double *a = ref_nan_array(p.nq), *b = ref_nan_array(p.nq), *lse = ref_nan_array(p.nl);
    gdn_attn_fwd_f64(&p.s, p.q, p.k, p.v, p.scale, a, lse);
    gdn_attn_fwd_f64(&p.s, p.q, p.k, p.v, p.scale, b, NULL);
    assert_memory_equal(a, b, sizeof(double) * p.nq);
    gdn_attn_shape s0 = p.s;
    s0.T = 0;
    double *untouched = ref_nan_array(1);
    gdn_attn_fwd_f64(&s0, p.q, p.k, p.v, p.scale, untouched, untouched);
    gdn_attn_bwd_f64(&s0, p.q, p.k, p.v, a, lse, p.scale, p.w, untouched, untouched, untouched);
    assert_true(isnan(untouched[0]));
    int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(2);
    gdn_attn_fwd_f64(&p.s, p.q, p.k, p.v, p.scale, a, lse);
    assert_int_equal(openblas_get_num_threads(), 2);
    gdn_attn_bwd_f64(&p.s, p.q, p.k, p.v, a, lse, p.scale, p.w, b, b, b); /* only the count matters */
    assert_int_equal(openblas_get_num_threads(), 2);
    openblas_set_num_threads(blas_threads);
    free(a); free(b); free(lse); free(untouched);
    problem_free(&p);
}

/* ---- queries at the end of longer keys (a segment of a sequence) ----------------------------- */

/* T query rows at positions Tk-T .. Tk-1 of Tk keys and values. */
typedef struct {
    attn_problem p; /* s.T is the query count; k, v hold Tk rows */
    int Tk;
    size_t nk;
    double *o;
} attn_kv_ctx;

static attn_kv_ctx kv_problem_make(int B, int T, int Tk, int H, int Hkv, int D, unsigned long long seed) {
    attn_kv_ctx c = {problem_make(B, T, H, Hkv, D, 1.5, seed), Tk, (size_t)B * Tk * Hkv * D, NULL};
    free(c.p.k);
    free(c.p.v);
    c.p.k = ref_uniform(c.nk, -1.5, 1.5, seed + 11);
    c.p.v = ref_uniform(c.nk, -1, 1, seed + 12);
    c.o = ref_nan_array(c.p.nq);
    return c;
}

static void kv_problem_free(attn_kv_ctx *c) {
    free(c->o);
    problem_free(&c->p);
}

static double attn_kv_loss(void *c_) {
    attn_kv_ctx *c = c_;
    gdn_attn_fwd_kv_f64(&c->p.s, c->Tk, c->p.q, c->p.k, c->p.v, c->p.scale, c->o, NULL);
    double L = 0;
    for (size_t i = 0; i < c->p.nq; i++) L += c->o[i] * c->p.w[i];
    return L;
}

static const struct {
    int B, T, Tk, H, Hkv, D;
} kv_cases[] = {{2, 5, 12, 4, 2, 8}, {1, 1, 9, 4, 1, 8}, {1, 3, 70, 2, 1, 8}, {1, 66, 70, 2, 2, 8},
                {2, 7, 7, 4, 4, 8}, {1, 65, 130, 4, 2, 16}};

static void test_attn_kv_vs_fd(void **state) {
    (void)state;
    double mx = 0;
    for (size_t c = 0; c < sizeof kv_cases / sizeof kv_cases[0]; c++) {
        attn_kv_ctx x = kv_problem_make(kv_cases[c].B, kv_cases[c].T, kv_cases[c].Tk, kv_cases[c].H,
                                        kv_cases[c].Hkv, kv_cases[c].D, 700 + 20 * c);
        attn_problem *p = &x.p;
        double *o = ref_nan_array(p->nq), *lse = ref_nan_array(p->nl), *dq = ref_nan_array(p->nq);
        double *dk = ref_nan_array(x.nk), *dv = ref_nan_array(x.nk);
        gdn_attn_fwd_kv_f64(&p->s, x.Tk, p->q, p->k, p->v, p->scale, o, lse);
        gdn_attn_bwd_kv_f64(&p->s, x.Tk, p->q, p->k, p->v, o, lse, p->scale, p->w, dq, dk, dv);
        double err[3] = {fd_check(attn_kv_loss, &x, p->q, dq, p->nq, 300, FD_EPS),
                         fd_check(attn_kv_loss, &x, p->k, dk, x.nk, 300, FD_EPS),
                         fd_check(attn_kv_loss, &x, p->v, dv, x.nk, 300, FD_EPS)};
        char label[96];
        snprintf(label, sizeof label, "f64 vs FD B%d T%d of Tk%d H%d Hkv%d D%d", p->s.B, p->s.T, x.Tk,
                 p->s.H, p->s.Hkv, p->s.D);
        report(label, err, grad_names + 2, 3, FD_TOL, &mx);
        free(o); free(lse); free(dq); free(dk); free(dv);
        kv_problem_free(&x);
    }
    printf("attention with earlier keys, f64 backward vs finite differences: max relative error %.2e "
           "(limit %.0e)\n", mx, FD_TOL);
}

/* The naive reference over all Tk rows with d_o zero on the first Tk-T: its last T rows of o, lse
 * and dq, and its dk, dv, are what the op computes for the last T queries alone. */
static void test_attn_kv_vs_naive(void **state) {
    (void)state;
    double mx = 0;
    for (size_t c = 0; c < sizeof kv_cases / sizeof kv_cases[0]; c++) {
        const int B = kv_cases[c].B, T = kv_cases[c].T, Tk = kv_cases[c].Tk, H = kv_cases[c].H;
        const int Hkv = kv_cases[c].Hkv, D = kv_cases[c].D, off = Tk - T;
        attn_problem full = problem_make(B, Tk, H, Hkv, D, 1.5, 900 + 20 * c);
        const size_t qrow = (size_t)H * D;
        for (int b = 0; b < B; b++) /* no gradient from the rows before the queries */
            memset(full.w + (size_t)b * Tk * qrow, 0, sizeof(double) * (size_t)off * qrow);
        double *o = ref_nan_array(full.nq), *lse = ref_nan_array(full.nl), *dq = ref_nan_array(full.nq);
        double *dk = ref_nan_array(full.nkv), *dv = ref_nan_array(full.nkv);
        attn_ref_fwd(&full.s, full.q, full.k, full.v, full.scale, o, lse);
        attn_ref_bwd(&full.s, full.q, full.k, full.v, full.scale, full.w, dq, dk, dv);
        /* the last T rows of each sequence: q, w in; o, lse, dq to compare */
        gdn_attn_shape s = {B, T, H, Hkv, D, NULL};
        const size_t nq = (size_t)B * T * qrow, nl = (size_t)B * H * T;
        double *q = malloc(sizeof(double) * nq), *w = malloc(sizeof(double) * nq);
        double *o_ref = malloc(sizeof(double) * nq), *dq_ref = malloc(sizeof(double) * nq);
        double *l_ref = malloc(sizeof(double) * nl);
        for (int b = 0; b < B; b++) {
            const size_t src = ((size_t)b * Tk + off) * qrow, dst = (size_t)b * T * qrow;
            memcpy(q + dst, full.q + src, sizeof(double) * T * qrow);
            memcpy(w + dst, full.w + src, sizeof(double) * T * qrow);
            memcpy(o_ref + dst, o + src, sizeof(double) * T * qrow);
            memcpy(dq_ref + dst, dq + src, sizeof(double) * T * qrow);
            for (int h = 0; h < H; h++)
                memcpy(l_ref + ((size_t)b * H + h) * T, lse + ((size_t)b * H + h) * Tk + off, sizeof(double) * T);
        }
        double *o2 = ref_nan_array(nq), *l2 = ref_nan_array(nl), *dq2 = ref_nan_array(nq);
        double *dk2 = ref_nan_array(full.nkv), *dv2 = ref_nan_array(full.nkv);
        gdn_attn_fwd_kv_f64(&s, Tk, q, full.k, full.v, full.scale, o2, l2);
        gdn_attn_bwd_kv_f64(&s, Tk, q, full.k, full.v, o2, l2, full.scale, w, dq2, dk2, dv2);
        double err[5] = {fd_rel_err(o2, o_ref, nq), fd_rel_err(l2, l_ref, nl),
                         err_vs(dq2, NULL, dq_ref, nq, w, nq), err_vs(dk2, NULL, dk, full.nkv, w, nq),
                         fd_rel_err(dv2, dv, full.nkv)};
        char label[96];
        snprintf(label, sizeof label, "f64 vs naive T%d of Tk%d H%d Hkv%d D%d", T, Tk, H, Hkv, D);
        report(label, err, grad_names, 5, REF_TOL, &mx);
        /* f32: the same within float rounding */
        float *q32 = ref_to_f32(q, nq), *k32 = ref_to_f32(full.k, full.nkv), *v32 = ref_to_f32(full.v, full.nkv);
        float *w32 = ref_to_f32(w, nq), *o32 = ref_nan_f32(nq), *l32 = ref_nan_f32(nl), *dq32 = ref_nan_f32(nq);
        float *dk32 = ref_nan_f32(full.nkv), *dv32 = ref_nan_f32(full.nkv);
        gdn_attn_fwd_kv_f32(&s, Tk, q32, k32, v32, (float)full.scale, o32, l32);
        gdn_attn_bwd_kv_f32(&s, Tk, q32, k32, v32, o32, l32, (float)full.scale, w32, dq32, dk32, dv32);
        double e32[5] = {fd_rel_err_f32(o32, o2, nq), fd_rel_err_f32(l32, l2, nl), fd_rel_err_f32(dq32, dq2, nq),
                         fd_rel_err_f32(dk32, dk2, full.nkv), fd_rel_err_f32(dv32, dv2, full.nkv)};
        double mx32 = 0;
        snprintf(label, sizeof label, "f32 vs f64 T%d of Tk%d H%d Hkv%d D%d", T, Tk, H, Hkv, D);
        report(label, e32, grad_names, 5, F32_TOL, &mx32);
        free(q32); free(k32); free(v32); free(w32); free(o32); free(l32); free(dq32); free(dk32); free(dv32);
        free(q); free(w); free(o_ref); free(dq_ref); free(l_ref);
        free(o); free(lse); free(dq); free(dk); free(dv);
        free(o2); free(l2); free(dq2); free(dk2); free(dv2);
        problem_free(&full);
    }
    printf("attention with earlier keys, f64 vs naive f64: max relative error %.2e (limit %.0e)\n", mx, REF_TOL);
}

/* Tk = T is gdn_attn_fwd / gdn_attn_bwd bit for bit; fewer keys than queries is refused. */
static jmp_buf kv_die_jump;
static char kv_die_message[512];
static void kv_die_to_test(const char *message) {
    snprintf(kv_die_message, sizeof kv_die_message, "%s", message);
    longjmp(kv_die_jump, 1);
}

static void test_attn_kv_equal_and_refused(void **state) {
    (void)state;
    attn_problem p = problem_make(2, 70, 4, 2, 8, 1.5, 1100);
    double *o = ref_nan_array(p.nq), *l = ref_nan_array(p.nl), *o2 = ref_nan_array(p.nq), *l2 = ref_nan_array(p.nl);
    double *g[3] = {ref_nan_array(p.nq), ref_nan_array(p.nkv), ref_nan_array(p.nkv)};
    double *g2[3] = {ref_nan_array(p.nq), ref_nan_array(p.nkv), ref_nan_array(p.nkv)};
    gdn_attn_fwd_f64(&p.s, p.q, p.k, p.v, p.scale, o, l);
    gdn_attn_bwd_f64(&p.s, p.q, p.k, p.v, o, l, p.scale, p.w, g[0], g[1], g[2]);
    gdn_attn_fwd_kv_f64(&p.s, p.s.T, p.q, p.k, p.v, p.scale, o2, l2);
    gdn_attn_bwd_kv_f64(&p.s, p.s.T, p.q, p.k, p.v, o2, l2, p.scale, p.w, g2[0], g2[1], g2[2]);
    assert_memory_equal(o, o2, sizeof(double) * p.nq);
    assert_memory_equal(l, l2, sizeof(double) * p.nl);
    assert_memory_equal(g[0], g2[0], sizeof(double) * p.nq);
    assert_memory_equal(g[1], g2[1], sizeof(double) * p.nkv);
    assert_memory_equal(g[2], g2[2], sizeof(double) * p.nkv);
    kv_die_message[0] = 0;
    gdn_set_die_handler(kv_die_to_test);
    const int died = setjmp(kv_die_jump) != 0;
    if (!died) gdn_attn_fwd_kv_f64(&p.s, p.s.T - 1, p.q, p.k, p.v, p.scale, o2, l2);
    gdn_set_die_handler(NULL);
    assert_true(died);
    assert_non_null(strstr(kv_die_message, "key rows for 70 query rows"));
    free(o); free(l); free(o2); free(l2);
    for (int i = 0; i < 3; i++) { free(g[i]); free(g2[i]); }
    problem_free(&p);
}

/* ---- rotary embedding ------------------------------------------------------------------------ */

typedef struct {
    double *x, *y, *w;
    int B, T, H, D, pos0;
    double theta;
} rope_ctx;

static double rope_loss(void *c_) {
    rope_ctx *c = c_;
    gdn_rope_fwd_f64(c->y, c->x, c->B, c->T, c->H, c->D, c->pos0, c->theta);
    double L = 0;
    for (size_t i = 0; i < (size_t)c->B * c->T * c->H * c->D; i++) L += c->y[i] * c->w[i];
    return L;
}

static double dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void test_rope(void **state) {
    (void)state;
    const struct {
        int B, T, H, D, pos0;
        double theta;
    } cases[] = {{2, 9, 3, 8, 0, 10000}, {1, 1, 2, 16, 0, 10000}, {1, 33, 2, 16, 1000, 1e6},
                 {2, 5, 4, 64, 70000, 500000}, {1, 4, 1, 2, 3, 10000}};
    double mx_ref = 0, mx_fd = 0, mx_f32 = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int B = cases[c].B, T = cases[c].T, H = cases[c].H, D = cases[c].D, p0 = cases[c].pos0;
        const double th = cases[c].theta;
        const size_t n = (size_t)B * T * H * D;
        double *x = ref_uniform(n, -1, 1, 700 + c), *w = ref_uniform(n, -1, 1, 750 + c);
        double *y = ref_nan_array(n), *yr = ref_nan_array(n), *dx = ref_nan_array(n);
        char label[96];
        snprintf(label, sizeof label, "rope B%d T%d H%d D%d pos0 %d theta %g", B, T, H, D, p0, th);
        /* forward against the rotate_half formula */
        gdn_rope_fwd_f64(y, x, B, T, H, D, p0, th);
        rope_ref(yr, x, B, T, H, D, p0, th);
        double e_ref = fd_rel_err(y, yr, n);
        /* backward: finite differences, and the adjoint identity <R x, w> = <x, R^T w> */
        gdn_rope_bwd_f64(dx, w, B, T, H, D, p0, th);
        rope_ctx ctx = {x, y, w, B, T, H, D, p0, th};
        double e_fd = fd_check(rope_loss, &ctx, x, dx, n, 300, FD_EPS);
        gdn_rope_fwd_f64(y, x, B, T, H, D, p0, th);
        double e_adj = fabs(dot(y, w, n) - dot(x, dx, n)) / fmax(fabs(dot(y, w, n)), 1e-30);
        /* in place: y aliasing x gives the same values; forward then backward is the identity */
        double *xx = ref_uniform(n, -1, 1, 700 + c);
        gdn_rope_fwd_f64(xx, xx, B, T, H, D, p0, th);
        assert_memory_equal(xx, y, sizeof(double) * n);
        gdn_rope_bwd_f64(xx, xx, B, T, H, D, p0, th);
        double e_inv = fd_rel_err(xx, x, n);
        /* f32 against f64 */
        float *x32 = ref_to_f32(x, n), *y32 = ref_nan_f32(n);
        ref_round_f32(x, n);
        gdn_rope_fwd_f64(y, x, B, T, H, D, p0, th);
        gdn_rope_fwd_f32(y32, x32, B, T, H, D, p0, th);
        double e_f32 = fd_rel_err_f32(y32, y, n);
        double err[5] = {e_ref, e_fd, e_adj, e_inv, e_f32};
        /* ref: angles reach 7e4 rad here, and one ulp of w_i (computed as 1/theta^x there)
         * moves them by ~1e-11; f32: cos and sin rounded to float */
        const char *names[5] = {"ref", "fd", "adjoint", "inverse", "f32"};
        const double tols[5] = {1e-10, FD_TOL, REF_TOL, REF_TOL, 1e-6};
        double dummy = 0;
        for (int i = 0; i < 5; i++) report(label, err + i, names + i, 1, tols[i], &dummy);
        if (e_ref > mx_ref) mx_ref = e_ref;
        if (e_fd > mx_fd) mx_fd = e_fd;
        if (e_f32 > mx_f32) mx_f32 = e_f32;
        free(x); free(w); free(y); free(yr); free(dx); free(xx); free(x32); free(y32);
    }
    printf("rope: max relative error vs rotate_half %.2e, backward vs FD %.2e, f32 vs f64 %.2e\n",
           mx_ref, mx_fd, mx_f32);
}

/* Rotated q and k score by relative position only: shifting pos0 leaves q_t . k_t' unchanged. */
static void test_rope_relative(void **state) {
    (void)state;
    const int T = 12, D = 16;
    double *q = ref_uniform((size_t)T * D, -1, 1, 800), *k = ref_uniform((size_t)T * D, -1, 1, 801);
    double *qa = ref_nan_array((size_t)T * D), *ka = ref_nan_array((size_t)T * D);
    double *qb = ref_nan_array((size_t)T * D), *kb = ref_nan_array((size_t)T * D);
    gdn_rope_fwd_f64(qa, q, 1, T, 1, D, 0, 10000);
    gdn_rope_fwd_f64(ka, k, 1, T, 1, D, 0, 10000);
    gdn_rope_fwd_f64(qb, q, 1, T, 1, D, 4321, 10000);
    gdn_rope_fwd_f64(kb, k, 1, T, 1, D, 4321, 10000);
    double mx = 0;
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++) {
            double a = dot(qa + i * D, ka + j * D, D), b = dot(qb + i * D, kb + j * D, D);
            mx = fmax(mx, fabs(a - b));
        }
    printf("rope: largest change of a score under a position shift of 4321: %.2e\n", mx);
    assert_true(mx < 1e-12);
    free(q); free(k); free(qa); free(ka); free(qb); free(kb);
}

/* ---- the chain: per-head q/k RMSNorm (the model's rmsnorm op), RoPE, attention --------------- */

typedef struct {
    attn_problem *p;
    double *xq, *xk, *wq, *wk; /* pre-norm q, k; the norm weights [D] */
    double *qn, *kn, *rq, *rk, *o, *lse;
    double theta, eps;
} chain_ctx;

static void chain_fwd(chain_ctx *c) {
    const gdn_attn_shape *s = &c->p->s;
    gdn_rmsnorm_fwd_f64(c->qn, c->rq, c->xq, c->wq, s->B * s->T * s->H, s->D, c->eps);
    gdn_rmsnorm_fwd_f64(c->kn, c->rk, c->xk, c->wk, s->B * s->T * s->Hkv, s->D, c->eps);
    gdn_rope_fwd_f64(c->p->q, c->qn, s->B, s->T, s->H, s->D, 0, c->theta);
    gdn_rope_fwd_f64(c->p->k, c->kn, s->B, s->T, s->Hkv, s->D, 0, c->theta);
    gdn_attn_fwd_f64(s, c->p->q, c->p->k, c->p->v, c->p->scale, c->o, c->lse);
}

static double chain_loss(void *c_) {
    chain_ctx *c = c_;
    chain_fwd(c);
    return dot(c->o, c->p->w, c->p->nq);
}

static void test_qk_norm_rope_attention_fd(void **state) {
    (void)state;
    attn_problem p = problem_make(2, 11, 4, 2, 8, 1.0, 900);
    const gdn_attn_shape *s = &p.s;
    const int D = s->D, Nq = s->B * s->T * s->H, Nk = s->B * s->T * s->Hkv;
    chain_ctx c = {&p, ref_uniform(p.nq, -1, 1, 901), ref_uniform(p.nkv, -1, 1, 902),
                   ref_uniform(D, 0.5, 1.5, 903), ref_uniform(D, 0.5, 1.5, 904),
                   ref_nan_array(p.nq), ref_nan_array(p.nkv), ref_nan_array(Nq), ref_nan_array(Nk),
                   ref_nan_array(p.nq), ref_nan_array(p.nl), 10000, 1e-6};
    chain_fwd(&c);
    double *dq = ref_nan_array(p.nq), *dk = ref_nan_array(p.nkv), *dv = ref_nan_array(p.nkv);
    double *dxq = ref_nan_array(p.nq), *dxk = ref_nan_array(p.nkv);
    double *dwq = GDN_CALLOC(D, sizeof(double)), *dwk = GDN_CALLOC(D, sizeof(double));
    gdn_attn_bwd_f64(s, p.q, p.k, p.v, c.o, c.lse, p.scale, p.w, dq, dk, dv);
    gdn_rope_bwd_f64(dq, dq, s->B, s->T, s->H, D, 0, c.theta);
    gdn_rope_bwd_f64(dk, dk, s->B, s->T, s->Hkv, D, 0, c.theta);
    gdn_rmsnorm_bwd_f64(dxq, dwq, dq, c.xq, c.wq, c.rq, Nq, D);
    gdn_rmsnorm_bwd_f64(dxk, dwk, dk, c.xk, c.wk, c.rk, Nk, D);
    double err[5] = {fd_check(chain_loss, &c, c.xq, dxq, p.nq, 300, FD_EPS),
                     fd_check(chain_loss, &c, c.xk, dxk, p.nkv, 300, FD_EPS),
                     fd_check(chain_loss, &c, p.v, dv, p.nkv, 300, FD_EPS),
                     fd_check(chain_loss, &c, c.wq, dwq, D, D, FD_EPS),
                     fd_check(chain_loss, &c, c.wk, dwk, D, D, FD_EPS)};
    const char *names[5] = {"dxq", "dxk", "dv", "dq_norm", "dk_norm"};
    double mx = 0;
    report("q/k norm + rope + attention vs FD", err, names, 5, FD_TOL, &mx);
    double *bufs[] = {c.xq, c.xk, c.wq, c.wk, c.qn, c.kn, c.rq, c.rk, c.o, c.lse, dq, dk, dv, dxq, dxk, dwq, dwk};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    problem_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attn_vs_fd),
        cmocka_unit_test(test_attn_f64_vs_naive),
        cmocka_unit_test(test_attn_f32_vs_f64),
        cmocka_unit_test(test_attn_large_scores),
        cmocka_unit_test(test_attn_thread_count),
        cmocka_unit_test(test_attn_optional),
        cmocka_unit_test(test_attn_kv_vs_fd),
        cmocka_unit_test(test_attn_kv_vs_naive),
        cmocka_unit_test(test_attn_kv_equal_and_refused),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_rope_relative),
        cmocka_unit_test(test_qk_norm_rope_attention_fd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
