/* Gated delta rule: the fp64 recurrent reference against finite differences, the chunked
 * kernels (f64 and f32) against finite differences and against the reference, over chunk
 * sizes, lengths not divisible by the chunk, optional initial state / final-state gradient,
 * and strong decay. Every measured relative error is printed; the maxima close the run. */
#include <math.h>
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
#include "tests/ref/delta_recurrent.h"
#include "tests/ref/fd.h"

/* After the project headers: OpenBLAS's cblas.h pulls in <complex.h>, whose macro I would
 * clash with parameters named I in model/cpu/ops_cpu_decl.h. */
#include <cblas.h>

enum { DECAY_MILD, DECAY_STRONG };

/* Inputs of one problem in fp64, plus the fixed loss weights Wo (on o) and Wh (on ht). */
typedef struct {
    gdn_delta_shape s;
    size_t nqk, nv, ng, nst; /* element counts: q/k, v/o, g/beta, states */
    double *q, *k, *v, *g, *beta, *h0, *Wo, *Wh;
    double scale;
} problem;

static problem problem_make(int B, int T, int H, int K, int V, int chunk, int decay,
                            unsigned long long seed) {
    problem p = {.s = {.B = B, .T = T, .H = H, .K = K, .V = V, .chunk = chunk}};
    p.nqk = (size_t)B * T * H * K;
    p.nv = (size_t)B * T * H * V;
    p.ng = (size_t)B * T * H;
    p.nst = (size_t)B * H * K * V;
    p.q = ref_uniform(p.nqk, -1, 1, seed + 1);
    p.k = ref_uniform(p.nqk, -1, 1, seed + 2);
    ref_l2_rows(p.q, p.ng, K);
    ref_l2_rows(p.k, p.ng, K);
    p.v = ref_uniform(p.nv, -1, 1, seed + 3);
    p.beta = ref_uniform(p.ng, 0.02, 0.98, seed + 4);
    p.g = ref_uniform(p.ng, -1, 0, seed + 5);
    if (decay == DECAY_STRONG) {
        /* About a third of the tokens decay by exp(-5)..exp(-20) in one step. */
        double *u = ref_uniform(p.ng, 0, 1, seed + 6);
        for (size_t i = 0; i < p.ng; i++)
            if (u[i] < 0.35) p.g[i] = -5.0 - 15.0 * (u[i] / 0.35);
        free(u);
    }
    p.h0 = ref_uniform(p.nst, -1, 1, seed + 7);
    p.Wo = ref_uniform(p.nv, -1, 1, seed + 8);
    p.Wh = ref_uniform(p.nst, -1, 1, seed + 9);
    p.scale = (double)(float)(1.0 / sqrt((double)K));
    return p;
}

static void problem_free(problem *p) {
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->g);
    free(p->beta);
    free(p->h0);
    free(p->Wo);
    free(p->Wh);
}

/* Outputs and gradients of one run, fp64 (the f32 path keeps its own arrays). */
typedef struct {
    double *o, *ht, *dq, *dk, *dv, *dg, *dbeta, *dh0;
} result;

/* Every output buffer starts as NaN, so an entry a kernel fails to write cannot pass. */
static result result_alloc(const problem *p) {
    result r = {ref_nan_array(p->nv),  ref_nan_array(p->nst), ref_nan_array(p->nqk),
                ref_nan_array(p->nqk), ref_nan_array(p->nv),  ref_nan_array(p->ng),
                ref_nan_array(p->ng),  ref_nan_array(p->nst)};
    return r;
}

static void result_free(result *r) {
    free(r->o);
    free(r->ht);
    free(r->dq);
    free(r->dk);
    free(r->dv);
    free(r->dg);
    free(r->dbeta);
    free(r->dh0);
}

/* Runs the reference forward and backward; use_h0 / use_dht select h0 and dht = Wh or NULL. */
static result run_ref(const problem *p, int use_h0, int use_dht) {
    result r = result_alloc(p);
    const double *h0 = use_h0 ? p->h0 : NULL, *dht = use_dht ? p->Wh : NULL;
    ref_delta_recurrent_fwd(&p->s, p->q, p->k, p->v, p->g, p->beta, p->scale, h0, r.o, r.ht);
    ref_delta_recurrent_bwd(&p->s, p->q, p->k, p->v, p->g, p->beta, p->scale, h0, p->Wo, dht, r.dq,
                            r.dk, r.dv, r.dg, r.dbeta, r.dh0);
    return r;
}

static result run_chunk_f64(const problem *p, int use_h0, int use_dht) {
    result r = result_alloc(p);
    const double *h0 = use_h0 ? p->h0 : NULL, *dht = use_dht ? p->Wh : NULL;
    gdn_delta_fwd_f64(&p->s, p->q, p->k, p->v, p->g, p->beta, p->scale, h0, r.o, r.ht);
    gdn_delta_bwd_f64(&p->s, p->q, p->k, p->v, p->g, p->beta, p->scale, h0, p->Wo, dht, r.dq, r.dk,
                      r.dv, r.dg, r.dbeta, r.dh0);
    return r;
}

/* Relative errors of one comparison, in the order o, ht, dq, dk, dv, dg, dbeta, dh0. */
enum { N_ERR = 8 };
static const char *const err_names[N_ERR] = {"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0"};

/* The f32 chunked path on the (already f32-exact) inputs of p, compared with ref. */
static void run_chunk_f32_errors(const problem *p, int use_h0, int use_dht, const result *ref,
                                 double err[N_ERR]) {
    float *q = ref_to_f32(p->q, p->nqk), *k = ref_to_f32(p->k, p->nqk);
    float *v = ref_to_f32(p->v, p->nv), *g = ref_to_f32(p->g, p->ng);
    float *beta = ref_to_f32(p->beta, p->ng), *h0 = ref_to_f32(p->h0, p->nst);
    float *Wo = ref_to_f32(p->Wo, p->nv), *Wh = ref_to_f32(p->Wh, p->nst);
    float *o = ref_nan_f32(p->nv), *ht = ref_nan_f32(p->nst);
    float *dq = ref_nan_f32(p->nqk), *dk = ref_nan_f32(p->nqk);
    float *dv = ref_nan_f32(p->nv), *dg = ref_nan_f32(p->ng), *dbeta = ref_nan_f32(p->ng);
    float *dh0 = ref_nan_f32(p->nst);
    gdn_delta_fwd_f32(&p->s, q, k, v, g, beta, (float)p->scale, use_h0 ? h0 : NULL, o, ht);
    gdn_delta_bwd_f32(&p->s, q, k, v, g, beta, (float)p->scale, use_h0 ? h0 : NULL, Wo,
                      use_dht ? Wh : NULL, dq, dk, dv, dg, dbeta, dh0);
    err[0] = fd_rel_err_f32(o, ref->o, p->nv);
    err[1] = fd_rel_err_f32(ht, ref->ht, p->nst);
    err[2] = fd_rel_err_f32(dq, ref->dq, p->nqk);
    err[3] = fd_rel_err_f32(dk, ref->dk, p->nqk);
    err[4] = fd_rel_err_f32(dv, ref->dv, p->nv);
    err[5] = fd_rel_err_f32(dg, ref->dg, p->ng);
    err[6] = fd_rel_err_f32(dbeta, ref->dbeta, p->ng);
    err[7] = fd_rel_err_f32(dh0, ref->dh0, p->nst);
    float *all[] = {q, k, v, g, beta, h0, Wo, Wh, o, ht, dq, dk, dv, dg, dbeta, dh0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

static void result_errors(const problem *p, const result *a, const result *ref, double err[N_ERR]) {
    err[0] = fd_rel_err(a->o, ref->o, p->nv);
    err[1] = fd_rel_err(a->ht, ref->ht, p->nst);
    err[2] = fd_rel_err(a->dq, ref->dq, p->nqk);
    err[3] = fd_rel_err(a->dk, ref->dk, p->nqk);
    err[4] = fd_rel_err(a->dv, ref->dv, p->nv);
    err[5] = fd_rel_err(a->dg, ref->dg, p->ng);
    err[6] = fd_rel_err(a->dbeta, ref->dbeta, p->ng);
    err[7] = fd_rel_err(a->dh0, ref->dh0, p->nst);
}

/* Prints one case and asserts every error is below tol; folds them into the running max. */
static void report_case(const char *label, const double err[N_ERR], double tol, double *max_err) {
    printf("  %-44s", label);
    for (int i = 0; i < N_ERR; i++) {
        printf(" %s %.1e", err_names[i], err[i]);
        if (err[i] > *max_err) *max_err = err[i];
    }
    printf("\n");
    for (int i = 0; i < N_ERR; i++) {
        if (!(err[i] < tol))
            fail_msg("%s: %s relative error %.3e (limit %.0e)", label, err_names[i], err[i], tol);
    }
}

/* ---- finite differences ------------------------------------------------------------------- */

/* Loss sum(o*Wo) + sum(ht*Wh) of the current inputs, by the reference or the chunked f64 path.
 * h0 NULL / with_ht 0 drop the initial state / the ht term. */
typedef struct {
    problem *p;
    int chunked, use_h0, with_ht;
    double *o, *ht;
} loss_ctx;

static double loss_eval(void *vctx) {
    loss_ctx *c = vctx;
    problem *p = c->p;
    const double *h0 = c->use_h0 ? p->h0 : NULL;
    if (c->chunked)
        gdn_delta_fwd_f64(&p->s, p->q, p->k, p->v, p->g, p->beta, p->scale, h0, c->o,
                          c->with_ht ? c->ht : NULL);
    else
        ref_delta_recurrent_fwd(&p->s, p->q, p->k, p->v, p->g, p->beta, p->scale, h0, c->o,
                                c->with_ht ? c->ht : NULL);
    double L = 0.0;
    for (size_t i = 0; i < p->nv; i++) L += c->o[i] * p->Wo[i];
    if (c->with_ht)
        for (size_t i = 0; i < p->nst; i++) L += c->ht[i] * p->Wh[i];
    return L;
}

/* Checks every gradient of one configuration against central differences; returns the max. */
static double fd_case(const char *what, problem *p, int chunked, int use_h0, int with_ht,
                      size_t n_probe) {
    result r = chunked ? run_chunk_f64(p, use_h0, with_ht) : run_ref(p, use_h0, with_ht);
    loss_ctx c = {p, chunked, use_h0, with_ht, ref_nan_array(p->nv), ref_nan_array(p->nst)};
    const double eps = 1e-6;
    double err[6];
    err[0] = fd_check(loss_eval, &c, p->q, r.dq, p->nqk, n_probe, eps);
    err[1] = fd_check(loss_eval, &c, p->k, r.dk, p->nqk, n_probe, eps);
    err[2] = fd_check(loss_eval, &c, p->v, r.dv, p->nv, n_probe, eps);
    err[3] = fd_check(loss_eval, &c, p->g, r.dg, p->ng, n_probe, eps);
    err[4] = fd_check(loss_eval, &c, p->beta, r.dbeta, p->ng, n_probe, eps);
    err[5] = use_h0 ? fd_check(loss_eval, &c, p->h0, r.dh0, p->nst, n_probe, eps) : 0.0;
    const char *names[6] = {"dq", "dk", "dv", "dg", "dbeta", "dh0"};
    double mx = 0.0;
    printf("  %-44s", what);
    for (int i = 0; i < 6; i++) {
        if (i == 5 && !use_h0) continue;
        printf(" %s %.1e", names[i], err[i]);
        if (err[i] > mx) mx = err[i];
    }
    printf("\n");
    for (int i = 0; i < 6; i++)
        if (!(err[i] < 1e-6))
            fail_msg("%s: %s finite-difference error %.3e", what, names[i], err[i]);
    free(c.o);
    free(c.ht);
    result_free(&r);
    return mx;
}

static void test_recurrent_vs_fd(void **state) {
    (void)state;
    double mx = 0.0;
    for (int decay = DECAY_MILD; decay <= DECAY_STRONG; decay++) {
        problem p = problem_make(2, 19, 2, 8, 6, 16, decay, 100 + decay);
        char label[96];
        snprintf(label, sizeof label, "recurrent B2 T19 H2 K8 V6 %s", decay ? "strong" : "mild");
        double e = fd_case(label, &p, 0, 1, 1, 400);
        if (e > mx) mx = e;
        problem_free(&p);
    }
    printf("recurrent BPTT vs finite differences: max relative error %.2e (limit 1e-6)\n", mx);
}

static void test_chunked_f64_vs_fd(void **state) {
    (void)state;
    /* Chunk sizes with partial last chunks; with h0 + ht term, and with neither. */
    const struct {
        int chunk, T, decay, use_h0, with_ht;
    } cases[] = {
        {16, 37, DECAY_MILD, 1, 1}, {16, 37, DECAY_MILD, 0, 0}, {16, 37, DECAY_STRONG, 1, 1},
        {32, 45, DECAY_MILD, 1, 1}, {64, 70, DECAY_MILD, 1, 0}, {64, 70, DECAY_STRONG, 0, 1},
    };
    double mx = 0.0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        problem p = problem_make(1, cases[i].T, 2, 8, 6, cases[i].chunk, cases[i].decay, 200 + i);
        char label[96];
        snprintf(label, sizeof label, "chunked f64 C%d T%d K8 V6 h0=%d ht=%d %s", cases[i].chunk,
                 cases[i].T, cases[i].use_h0, cases[i].with_ht, cases[i].decay ? "strong" : "mild");
        double e = fd_case(label, &p, 1, cases[i].use_h0, cases[i].with_ht, 300);
        if (e > mx) mx = e;
        problem_free(&p);
    }
    printf("chunked f64 backward vs finite differences: max relative error %.2e (limit 1e-6)\n",
           mx);
}

/* ---- chunked against the reference -------------------------------------------------------- */

static const int grid_T[] = {1, 15, 64, 100, 130};
static const int grid_chunk[] = {16, 32, 64};

static void test_chunked_f64_vs_recurrent(void **state) {
    (void)state;
    double mx = 0.0;
    for (size_t ci = 0; ci < 3; ci++)
        for (size_t ti = 0; ti < 5; ti++)
            for (int decay = 0; decay < 2; decay++) {
                problem p = problem_make(2, grid_T[ti], 2, 16, 32, grid_chunk[ci], decay,
                                         300 + 10 * ti + ci);
                for (int use_h0 = 0; use_h0 < 2; use_h0++)
                    for (int use_dht = 0; use_dht < 2; use_dht++) {
                        result ref = run_ref(&p, use_h0, use_dht);
                        result r = run_chunk_f64(&p, use_h0, use_dht);
                        double err[N_ERR];
                        result_errors(&p, &r, &ref, err);
                        char label[96];
                        snprintf(label, sizeof label, "f64 C%d T%d K16 V32 h0=%d dht=%d %s",
                                 grid_chunk[ci], grid_T[ti], use_h0, use_dht,
                                 decay ? "strong" : "mild");
                        report_case(label, err, 1e-10, &mx);
                        result_free(&ref);
                        result_free(&r);
                    }
                problem_free(&p);
            }
    printf("chunked f64 vs recurrent f64: max relative error %.2e (limit 1e-10)\n", mx);
}

static double f32_case(int B, int T, int H, int K, int V, int chunk, int decay, int use_h0,
                       int use_dht, unsigned long long seed) {
    problem p = problem_make(B, T, H, K, V, chunk, decay, seed);
    double *all[] = {p.q, p.k, p.v, p.g, p.beta, p.h0, p.Wo, p.Wh};
    size_t n[] = {p.nqk, p.nqk, p.nv, p.ng, p.ng, p.nst, p.nv, p.nst};
    for (int i = 0; i < 8; i++) ref_round_f32(all[i], n[i]);
    result ref = run_ref(&p, use_h0, use_dht);
    double err[N_ERR], mx = 0.0;
    run_chunk_f32_errors(&p, use_h0, use_dht, &ref, err);
    char label[96];
    snprintf(label, sizeof label, "f32 C%d T%d K%d V%d h0=%d dht=%d %s", chunk, T, K, V, use_h0,
             use_dht, decay ? "strong" : "mild");
    report_case(label, err, 1e-5, &mx);
    result_free(&ref);
    problem_free(&p);
    return mx;
}

static void test_chunked_f32_vs_recurrent(void **state) {
    (void)state;
    double mx = 0.0;
    for (size_t ci = 0; ci < 3; ci++)
        for (size_t ti = 0; ti < 5; ti++)
            for (int decay = 0; decay < 2; decay++)
                for (int use_h0 = 0; use_h0 < 2; use_h0++)
                    for (int use_dht = 0; use_dht < 2; use_dht++) {
                        double e = f32_case(2, grid_T[ti], 2, 16, 32, grid_chunk[ci], decay, use_h0,
                                            use_dht, 400 + 10 * ti + ci);
                        if (e > mx) mx = e;
                    }
    /* Model-sized heads. */
    for (int decay = 0; decay < 2; decay++) {
        double e = f32_case(2, 130, 2, 64, 64, 64, decay, 1, 1, 500 + decay);
        if (e > mx) mx = e;
    }
    printf("chunked f32 vs recurrent f64: max relative error %.2e (limit 1e-5)\n", mx);
}

/* ---- optional arguments -------------------------------------------------------------------- */

/* h0 NULL == zero h0, dht NULL == zero dht, ht / dh0 NULL are skipped without touching the rest,
 * T = 0 passes the state through, and the caller's BLAS thread count survives the calls. */
static void test_optional_arguments(void **state) {
    (void)state;
    problem p = problem_make(2, 40, 3, 8, 12, 16, DECAY_MILD, 600);
    double *zero = GDN_CALLOC(p.nst, sizeof(double));
    result a = result_alloc(&p), b = result_alloc(&p);
    gdn_delta_fwd_f64(&p.s, p.q, p.k, p.v, p.g, p.beta, p.scale, NULL, a.o, a.ht);
    gdn_delta_fwd_f64(&p.s, p.q, p.k, p.v, p.g, p.beta, p.scale, zero, b.o, NULL);
    assert_memory_equal(a.o, b.o, sizeof(double) * p.nv);
    for (size_t i = 0; i < p.nst; i++) assert_true(isnan(b.ht[i]));
    gdn_delta_bwd_f64(&p.s, p.q, p.k, p.v, p.g, p.beta, p.scale, NULL, p.Wo, NULL, a.dq, a.dk, a.dv,
                      a.dg, a.dbeta, a.dh0);
    gdn_delta_bwd_f64(&p.s, p.q, p.k, p.v, p.g, p.beta, p.scale, zero, p.Wo, zero, b.dq, b.dk, b.dv,
                      b.dg, b.dbeta, NULL);
    assert_memory_equal(a.dq, b.dq, sizeof(double) * p.nqk);
    assert_memory_equal(a.dk, b.dk, sizeof(double) * p.nqk);
    assert_memory_equal(a.dv, b.dv, sizeof(double) * p.nv);
    assert_memory_equal(a.dg, b.dg, sizeof(double) * p.ng);
    assert_memory_equal(a.dbeta, b.dbeta, sizeof(double) * p.ng);
    for (size_t i = 0; i < p.nst; i++) assert_true(isnan(b.dh0[i]));

    /* T = 0: ht = h0, dh0 = dht. */
    gdn_delta_shape s0 = p.s;
    s0.T = 0;
    gdn_delta_fwd_f64(&s0, p.q, p.k, p.v, p.g, p.beta, p.scale, p.h0, NULL, a.ht);
    assert_memory_equal(a.ht, p.h0, sizeof(double) * p.nst);
    gdn_delta_bwd_f64(&s0, p.q, p.k, p.v, p.g, p.beta, p.scale, p.h0, NULL, p.Wh, NULL, NULL, NULL,
                      NULL, NULL, a.dh0);
    assert_memory_equal(a.dh0, p.Wh, sizeof(double) * p.nst);

    /* The kernels run BLAS single-threaded inside their own threads and restore the setting. */
    int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(2);
    gdn_delta_fwd_f64(&p.s, p.q, p.k, p.v, p.g, p.beta, p.scale, NULL, a.o, NULL);
    assert_int_equal(openblas_get_num_threads(), 2);
    gdn_delta_bwd_f64(&p.s, p.q, p.k, p.v, p.g, p.beta, p.scale, NULL, p.Wo, NULL, a.dq, a.dk, a.dv,
                      a.dg, a.dbeta, NULL);
    assert_int_equal(openblas_get_num_threads(), 2);
    openblas_set_num_threads(blas_threads);
    free(zero);
    result_free(&a);
    result_free(&b);
    problem_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recurrent_vs_fd),
        cmocka_unit_test(test_chunked_f64_vs_fd),
        cmocka_unit_test(test_chunked_f64_vs_recurrent),
        cmocka_unit_test(test_chunked_f32_vs_recurrent),
        cmocka_unit_test(test_optional_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
