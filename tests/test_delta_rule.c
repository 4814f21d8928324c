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
#include "tests/ref/delta_checks.h"
#include "tests/ref/delta_problem.h"

/* After the project headers: OpenBLAS's cblas.h pulls in <complex.h>, whose macro I would
 * clash with parameters named I in model/cpu/ops_cpu_decl.h. */
#include <cblas.h>

/* The gated delta rule's problems, drawn in fp64 (f32_case rounds them itself). */
static delta_problem problem_make(int B, int T, int H, int K, int V, int chunk, int decay,
                                  unsigned long long seed) {
    return delta_problem_make(GDN_MIXER_G, B, T, H, K, V, chunk, decay, DELTA_DRAW_F64, seed);
}

/* Prints one case and fails the test when an error is not below tol; folds them into *max_err. */
static void report_case(const char *label, const double *err, const char *const *names, int n,
                        double tol, double *max_err) {
    int bad = delta_report(label, err, names, n, tol, max_err);
    if (bad >= 0)
        fail_msg("%s: %s relative error %.3e (limit %.0e)", label, names[bad], err[bad], tol);
}

/* ---- finite differences ------------------------------------------------------------------- */

/* Checks every gradient of one configuration against central differences; returns the max. */
static double fd_case(const char *what, delta_problem *p, int chunked, int use_h0, int with_ht,
                      size_t n_probe) {
    delta_result r = chunked ? delta_run_chunk_f64(p, use_h0, with_ht)
                             : delta_run_ref(p, use_h0, with_ht);
    double err[6], mx = 0.0;
    delta_fd_errors(p, &r, chunked, use_h0, with_ht, n_probe, err);
    report_case(what, err, delta_fd_names, use_h0 ? 6 : 5, 1e-6, &mx);
    delta_result_free(&r);
    return mx;
}

static void test_recurrent_vs_fd(void **state) {
    (void)state;
    double mx = 0.0;
    for (int decay = DELTA_DECAY_MILD; decay <= DELTA_DECAY_STRONG; decay++) {
        delta_problem p = problem_make(2, 19, 2, 8, 6, 16, decay, 100 + decay);
        char label[96];
        snprintf(label, sizeof label, "recurrent B2 T19 H2 K8 V6 %s", decay ? "strong" : "mild");
        double e = fd_case(label, &p, 0, 1, 1, 400);
        if (e > mx) mx = e;
        delta_problem_free(&p);
    }
    printf("recurrent BPTT vs finite differences: max relative error %.2e (limit 1e-6)\n", mx);
}

static void test_chunked_f64_vs_fd(void **state) {
    (void)state;
    /* Chunk sizes with partial last chunks; with h0 + ht term, and with neither. */
    const struct {
        int chunk, T, decay, use_h0, with_ht;
    } cases[] = {
        {16, 37, DELTA_DECAY_MILD, 1, 1}, {16, 37, DELTA_DECAY_MILD, 0, 0}, {16, 37, DELTA_DECAY_STRONG, 1, 1},
        {32, 45, DELTA_DECAY_MILD, 1, 1}, {64, 70, DELTA_DECAY_MILD, 1, 0}, {64, 70, DELTA_DECAY_STRONG, 0, 1},
    };
    double mx = 0.0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        delta_problem p = problem_make(1, cases[i].T, 2, 8, 6, cases[i].chunk, cases[i].decay, 200 + i);
        char label[96];
        snprintf(label, sizeof label, "chunked f64 C%d T%d K8 V6 h0=%d ht=%d %s", cases[i].chunk,
                 cases[i].T, cases[i].use_h0, cases[i].with_ht, cases[i].decay ? "strong" : "mild");
        double e = fd_case(label, &p, 1, cases[i].use_h0, cases[i].with_ht, 300);
        if (e > mx) mx = e;
        delta_problem_free(&p);
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
                delta_problem p = problem_make(2, grid_T[ti], 2, 16, 32, grid_chunk[ci], decay,
                                         300 + 10 * ti + ci);
                for (int use_h0 = 0; use_h0 < 2; use_h0++)
                    for (int use_dht = 0; use_dht < 2; use_dht++) {
                        delta_result ref = delta_run_ref(&p, use_h0, use_dht);
                        delta_result r = delta_run_chunk_f64(&p, use_h0, use_dht);
                        double err[DELTA_N_ERR];
                        delta_result_errors(&p, &r, &ref, err);
                        char label[96];
                        snprintf(label, sizeof label, "f64 C%d T%d K16 V32 h0=%d dht=%d %s",
                                 grid_chunk[ci], grid_T[ti], use_h0, use_dht,
                                 decay ? "strong" : "mild");
                        report_case(label, err, delta_err_names, DELTA_N_ERR, 1e-10, &mx);
                        delta_result_free(&ref);
                        delta_result_free(&r);
                    }
                delta_problem_free(&p);
            }
    printf("chunked f64 vs recurrent f64: max relative error %.2e (limit 1e-10)\n", mx);
}

static double f32_case(int B, int T, int H, int K, int V, int chunk, int decay, int use_h0,
                       int use_dht, unsigned long long seed) {
    delta_problem p = problem_make(B, T, H, K, V, chunk, decay, seed);
    delta_problem_round_f32(&p);
    delta_result ref = delta_run_ref(&p, use_h0, use_dht);
    delta_result r = delta_run_chunk_f32(&p, use_h0, use_dht);
    double err[DELTA_N_ERR], mx = 0.0;
    delta_result_errors(&p, &r, &ref, err);
    char label[96];
    snprintf(label, sizeof label, "f32 C%d T%d K%d V%d h0=%d dht=%d %s", chunk, T, K, V, use_h0,
             use_dht, decay ? "strong" : "mild");
    report_case(label, err, delta_err_names, DELTA_N_ERR, 1e-5, &mx);
    delta_result_free(&r);
    delta_result_free(&ref);
    delta_problem_free(&p);
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
    delta_problem p = problem_make(2, 40, 3, 8, 12, 16, DELTA_DECAY_MILD, 600);
    double *zero = GDN_CALLOC(p.nst, sizeof(double));
    delta_result a = delta_result_alloc(&p), b = delta_result_alloc(&p);
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
    delta_result_free(&a);
    delta_result_free(&b);
    delta_problem_free(&p);
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
