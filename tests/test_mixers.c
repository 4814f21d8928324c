/* The mixers of model/mixer.h (G gated delta rule, D DeltaNet, M gated linear attention, L linear
 * attention) through the chunked CPU kernels: for each, the forward against the fp64
 * token-by-token reference (fp64 and fp32), the backward against central finite differences and
 * against the reference's BPTT, the affine maps of sequence parallelism against the forward and
 * backward, over chunk sizes 16/32/64 and lengths that are not multiples of the chunk; the
 * inputs a mixer ignores are fed as NaN (or NULL) and their gradients must come back exactly 0.
 * Every measured relative error is printed; the maxima per mixer close each test. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <omp.h>

#include "model/check.h"
#include "model/cpu/ops_cpu.h"
#include "model/mixer.h"
#include "tests/ref/arrays.h"
#include "tests/ref/delta_checks.h"
#include "tests/ref/delta_problem.h"
#include "tests/ref/delta_recurrent.h"

/* Problems of mixer `variant`, rounded to float (the fp32 path sees the same values); the
 * kernels get NaN for the inputs the mixer ignores (delta_problem.h). */
static delta_problem problem_make(int variant, int B, int T, int H, int K, int V, int chunk,
                                  int decay, unsigned long long seed) {
    return delta_problem_make(variant, B, T, H, K, V, chunk, decay, DELTA_DRAW_F32, seed);
}

/* Gradients of the inputs the mixer ignores must be exactly zero. */
static void assert_ignored_zero(const delta_problem *p, const double *dg, const double *dbeta,
                                const char *label) {
    const double *arrs[2] = {p->mx->has_decay ? NULL : dg, p->mx->has_beta ? NULL : dbeta};
    for (int a = 0; a < 2; a++) {
        if (!arrs[a]) continue;
        for (size_t i = 0; i < p->ng; i++) {
            double x = arrs[a][i];
            if (x != 0.0 || signbit(x))
                fail_msg("%s: %s[%zu] = %g, expected exactly 0 (mixer %s ignores it)", label,
                         a ? "dbeta" : "dg", i, x, p->mx->name);
        }
    }
}

/* Prints one case, asserts every error is below tol and folds them into *max_err. */
static void report_case(const char *label, const double *err, const char *const *names, int n,
                        double tol, double *max_err) {
    int bad = delta_report(label, err, names, n, tol, max_err);
    if (bad >= 0)
        fail_msg("%s: %s relative error %.3e (limit %.0e)", label, names[bad], err[bad], tol);
}

static void print_maxima(const char *what, const double mx[GDN_MIXER_DELTA_COUNT], double tol) {
    printf("%s, max relative error:", what);
    for (int v = 0; v < GDN_MIXER_DELTA_COUNT; v++) printf(" %c %.1e", gdn_mixer_get(v)->kind, mx[v]);
    printf(" (limit %.0e)\n", tol);
}

/* ---- the table ------------------------------------------------------------------------------ */

static void test_mixer_table(void **state) {
    (void)state;
    static const struct {
        char kind;
        const char *name;
        int decay, beta, delta;
    } want[GDN_MIXER_COUNT] = {
        {'G', "gdn", 1, 1, 1}, {'D', "deltanet", 0, 1, 1}, {'M', "gla", 1, 0, 0}, {'L', "linear", 0, 0, 0},
        {'A', "attention", 0, 0, 0}, {'S', "linearized", 0, 0, 0}};
    assert_int_equal(GDN_MIXER_G, 0); /* zero-initialised shapes are the gated delta rule */
    for (int v = 0; v < GDN_MIXER_COUNT; v++) {
        const gdn_mixer_info *mx = gdn_mixer_get(v);
        assert_non_null(mx);
        assert_int_equal(mx->kind, want[v].kind);
        assert_string_equal(mx->name, want[v].name);
        assert_int_equal(mx->has_decay, want[v].decay);
        assert_int_equal(mx->has_beta, want[v].beta);
        assert_int_equal(mx->has_delta, want[v].delta);
        assert_int_equal(mx->is_delta, v < GDN_MIXER_DELTA_COUNT); /* attention (A, S) is not a variant */
        assert_int_equal(gdn_mixer_from_kind(mx->kind), v);
        assert_int_equal(gdn_mixer_from_name(mx->name), v);
    }
    assert_null(gdn_mixer_get(-1));
    assert_null(gdn_mixer_get(GDN_MIXER_COUNT));
    assert_int_equal(gdn_mixer_from_kind('g'), -1);
    assert_int_equal(gdn_mixer_from_kind('\0'), -1);
    assert_int_equal(gdn_mixer_from_name("GDN"), -1);
    assert_int_equal(gdn_mixer_from_name(""), -1);
    assert_int_equal(gdn_mixer_from_name(NULL), -1);
}

/* ---- finite differences ------------------------------------------------------------------- */

/* Every gradient (q, k, v, g, beta, h0; with h0 and the ht term) against central differences.
 * The differences see the real g and beta even for mixers that ignore them: an ignored input's
 * differences are exactly 0, so its (zero) gradient scores 0 error. */
static double fd_case(delta_problem *p, int chunked, size_t n_probe, const char *label) {
    delta_result r = chunked ? delta_run_chunk_f64(p, 1, 1) : delta_run_ref(p, 1, 1);
    assert_ignored_zero(p, r.dg, r.dbeta, label);
    double err[6], mx = 0.0;
    delta_fd_errors(p, &r, chunked, 1, 1, n_probe, err);
    report_case(label, err, delta_fd_names, 6, 1e-6, &mx);
    delta_result_free(&r);
    return mx;
}

static void test_backward_vs_fd(void **state) {
    (void)state;
    static const struct {
        int chunk, T, decay;
    } cases[] = {{16, 37, DELTA_DECAY_MILD}, {32, 45, DELTA_DECAY_STRONG}, {64, 70, DELTA_DECAY_MILD}};
    double mx_ref[GDN_MIXER_DELTA_COUNT] = {0}, mx_chunk[GDN_MIXER_DELTA_COUNT] = {0};
    /* Thousands of tiny forward calls: on a loaded machine, starting OpenMP teams for each costs
     * far more than the work (the other tests keep the caller's thread count). */
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    for (int v = 0; v < GDN_MIXER_DELTA_COUNT; v++) {
        char label[96];
        delta_problem p = problem_make(v, 1, 19, 2, 8, 6, 16, DELTA_DECAY_MILD, 100 + v);
        snprintf(label, sizeof label, "%s recurrent T19 K8 V6", p.mx->name);
        mx_ref[v] = fd_case(&p, 0, 120, label);
        delta_problem_free(&p);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            p = problem_make(v, 1, cases[i].T, 2, 8, 6, cases[i].chunk, cases[i].decay, 200 + 10 * v + i);
            snprintf(label, sizeof label, "%s chunked f64 C%d T%d K8 V6 %s", p.mx->name,
                     cases[i].chunk, cases[i].T, cases[i].decay ? "strong" : "mild");
            double e = fd_case(&p, 1, 100, label);
            if (e > mx_chunk[v]) mx_chunk[v] = e;
            delta_problem_free(&p);
        }
    }
    omp_set_num_threads(threads);
    print_maxima("recurrent BPTT vs finite differences", mx_ref, 1e-6);
    print_maxima("chunked f64 backward vs finite differences", mx_chunk, 1e-6);
}

/* ---- chunked against the reference -------------------------------------------------------- */

static const int grid_T[] = {1, 15, 37, 64, 100, 130};
static const int grid_chunk[] = {16, 32, 64};
enum { N_T = sizeof grid_T / sizeof grid_T[0], N_C = sizeof grid_chunk / sizeof grid_chunk[0] };

static void test_chunked_f64_vs_recurrent(void **state) {
    (void)state;
    double mx[GDN_MIXER_DELTA_COUNT] = {0};
    for (int v = 0; v < GDN_MIXER_DELTA_COUNT; v++)
        for (int ci = 0; ci < N_C; ci++)
            for (int ti = 0; ti < N_T; ti++)
                for (int decay = 0; decay <= gdn_mixer_get(v)->has_decay; decay++) {
                    delta_problem p = problem_make(v, 2, grid_T[ti], 2, 16, 32, grid_chunk[ci], decay,
                                             300 + 100 * v + 10 * ti + ci);
                    for (int opt = 0; opt < 4; opt++) { /* with / without h0, dht */
                        const int use_h0 = opt & 1, use_dht = opt >> 1;
                        delta_result ref = delta_run_ref(&p, use_h0, use_dht);
                        delta_result r = delta_run_chunk_f64(&p, use_h0, use_dht);
                        char label[96];
                        snprintf(label, sizeof label, "%s f64 C%d T%d h0=%d dht=%d %s", p.mx->name,
                                 grid_chunk[ci], grid_T[ti], use_h0, use_dht,
                                 decay ? "strong" : "mild");
                        assert_ignored_zero(&p, r.dg, r.dbeta, label);
                        double err[DELTA_N_ERR];
                        delta_result_errors(&p, &r, &ref, err);
                        report_case(label, err, delta_err_names, DELTA_N_ERR, 1e-10, &mx[v]);
                        delta_result_free(&ref);
                        delta_result_free(&r);
                    }
                    delta_problem_free(&p);
                }
    print_maxima("chunked f64 vs recurrent f64", mx, 1e-10);
}

static void f32_case(int v, int B, int T, int H, int K, int V, int chunk, int decay, int opt,
                     unsigned long long seed, double *mx) {
    delta_problem p = problem_make(v, B, T, H, K, V, chunk, decay, seed);
    delta_result ref = delta_run_ref(&p, opt, opt), r = delta_run_chunk_f32(&p, opt, opt);
    char label[96];
    snprintf(label, sizeof label, "%s f32 C%d T%d K%d V%d h0=dht=%d %s", p.mx->name, chunk, T, K,
             V, opt, decay ? "strong" : "mild");
    assert_ignored_zero(&p, r.dg, r.dbeta, label);
    double err[DELTA_N_ERR];
    delta_result_errors(&p, &r, &ref, err);
    report_case(label, err, delta_err_names, DELTA_N_ERR, 1e-5, mx);
    delta_result_free(&r);
    delta_result_free(&ref);
    delta_problem_free(&p);
}

static void test_chunked_f32_vs_recurrent(void **state) {
    (void)state;
    double mx[GDN_MIXER_DELTA_COUNT] = {0};
    for (int v = 0; v < GDN_MIXER_DELTA_COUNT; v++) {
        for (int ci = 0; ci < N_C; ci++)
            for (int ti = 0; ti < N_T; ti++)
                for (int decay = 0; decay <= gdn_mixer_get(v)->has_decay; decay++)
                    f32_case(v, 2, grid_T[ti], 2, 16, 32, grid_chunk[ci], decay, (ti + ci) % 2,
                             400 + 100 * v + 10 * ti + ci, &mx[v]);
        f32_case(v, 2, 130, 2, 64, 64, 64, DELTA_DECAY_MILD, 1, 500 + v, &mx[v]); /* model-sized heads */
    }
    print_maxima("chunked f32 vs recurrent f64", mx, 1e-5);
}

/* ---- the affine maps of sequence parallelism ---------------------------------------------- */

/* Without the delta term the map of the state is a decay only: M = prod(gamma) I, and exactly
 * diagonal. */
static void assert_decay_only_map(const delta_problem *p, const double *M) {
    const int K = p->s.K, BH = p->s.B * p->s.H;
    for (int bh = 0; bh < BH; bh++)
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++) {
                double m = M[(size_t)bh * K * K + (size_t)i * K + j], d = M[(size_t)bh * K * K];
                if (i != j)
                    assert_true(m == 0.0);
                else
                    assert_true(m == d && d > 0 && d <= 1);
            }
}

/* fp64 maps of p against the forward and backward (delta_map_errors); without the delta term,
 * M must be a decay only. */
static void map_errors_f64(const delta_problem *p, double err[6]) {
    delta_maps m = delta_maps_f64(p);
    if (!p->mx->has_delta) assert_decay_only_map(p, m.M);
    delta_map_errors(p, &m, err);
    delta_maps_free(&m);
}

static void test_transition_maps(void **state) {
    (void)state;
    static const struct {
        int B, T, H, K, V, chunk, decay;
    } cases[] = {
        {2, 40, 2, 8, 16, 16, DELTA_DECAY_MILD}, {1, 64, 2, 16, 16, 32, DELTA_DECAY_MILD},
        {1, 37, 2, 16, 8, 16, DELTA_DECAY_STRONG}, {1, 130, 2, 8, 16, 64, DELTA_DECAY_MILD},
        {2, 3, 1, 8, 16, 16, DELTA_DECAY_MILD},
    };
    static const char *const names[7] = {"ref ht", "ref dh0", "ht", "dh0", "H", "E", "f32"};
    double mx64[GDN_MIXER_DELTA_COUNT] = {0}, mx32[GDN_MIXER_DELTA_COUNT] = {0};
    for (int v = 0; v < GDN_MIXER_DELTA_COUNT; v++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            delta_problem p = problem_make(v, cases[c].B, cases[c].T, cases[c].H, cases[c].K, cases[c].V,
                                     cases[c].chunk, cases[c].decay, 600 + 10 * v + c);
            double err[7];
            map_errors_f64(&p, err);
            err[6] = delta_map_error_f32(&p);
            char label[96];
            snprintf(label, sizeof label, "%s maps C%d T%d K%d V%d %s", p.mx->name, cases[c].chunk,
                     cases[c].T, cases[c].K, cases[c].V, cases[c].decay ? "strong" : "mild");
            double m64 = 0;
            report_case(label, err, names, 6, 1e-12, &m64);
            if (!(err[6] < 1e-5)) fail_msg("%s: fp32 maps relative error %.3e (limit 1e-5)", label, err[6]);
            if (m64 > mx64[v]) mx64[v] = m64;
            if (err[6] > mx32[v]) mx32[v] = err[6];
            delta_problem_free(&p);
        }
    print_maxima("affine maps (fp64) vs forward/backward", mx64, 1e-12);
    printf("  (f32 printed last per case)\n");
    print_maxima("affine maps (fp32) composed vs the fp64 recurrence", mx32, 1e-5);
}

/* ---- ignored inputs and the special cases of the gated rule ------------------------------ */

static void assert_same(const double *a, const double *b, size_t n, const char *what) {
    if (memcmp(a, b, sizeof(double) * n) != 0) fail_msg("%s: results differ", what);
}

/* a and b agree bit for bit on o, ht, dq, dk, dv, dh0 and, where set, on dg and dbeta. */
static void assert_same_result(const delta_problem *p, const delta_result *a,
                               const delta_result *b, int with_dg, int with_dbeta) {
    assert_same(a->o, b->o, p->nv, "o");
    assert_same(a->ht, b->ht, p->nst, "ht");
    assert_same(a->dq, b->dq, p->nqk, "dq");
    assert_same(a->dk, b->dk, p->nqk, "dk");
    assert_same(a->dv, b->dv, p->nv, "dv");
    assert_same(a->dh0, b->dh0, p->nst, "dh0");
    if (with_dg) assert_same(a->dg, b->dg, p->ng, "dg");
    if (with_dbeta) assert_same(a->dbeta, b->dbeta, p->ng, "dbeta");
}

/* NULL for the inputs a mixer ignores and for their gradients gives the same bits as the NaN
 * inputs; the affine maps likewise. */
static void test_ignored_inputs_null(void **state) {
    (void)state;
    for (int v = 0; v < GDN_MIXER_DELTA_COUNT; v++) {
        delta_problem p = problem_make(v, 2, 45, 2, 8, 12, 16, DELTA_DECAY_MILD, 700 + v);
        if (p.mx->has_decay && p.mx->has_beta) {
            delta_problem_free(&p);
            continue;
        }
        const double *g = p.mx->has_decay ? p.g : NULL, *beta = p.mx->has_beta ? p.beta : NULL;
        delta_result a = delta_run_chunk_f64(&p, 1, 1), b = delta_result_alloc(&p);
        gdn_delta_fwd_f64(&p.s, p.q, p.k, p.v, g, beta, p.scale, p.h0, b.o, b.ht);
        gdn_delta_bwd_f64(&p.s, p.q, p.k, p.v, g, beta, p.scale, p.h0, p.Wo, p.Wh, b.dq, b.dk, b.dv,
                          p.mx->has_decay ? b.dg : NULL, p.mx->has_beta ? b.dbeta : NULL, b.dh0);
        assert_same_result(&p, &a, &b, p.mx->has_decay, p.mx->has_beta);
        for (size_t i = 0; i < p.ng; i++) { /* NULL gradients are not written */
            if (!p.mx->has_decay) assert_true(isnan(b.dg[i]));
            if (!p.mx->has_beta) assert_true(isnan(b.dbeta[i]));
        }
        double *M1 = ref_nan_array(p.nm), *H1 = ref_nan_array(p.nst), *E1 = ref_nan_array(p.nst);
        double *M2 = ref_nan_array(p.nm), *H2 = ref_nan_array(p.nst), *E2 = ref_nan_array(p.nst);
        gdn_delta_transition_f64(&p.s, p.k, p.v, p.g_in, p.beta_in, M1, H1);
        gdn_delta_transition_f64(&p.s, p.k, p.v, g, beta, M2, H2);
        gdn_delta_transition_adjoint_f64(&p.s, p.q, p.k, p.g_in, p.beta_in, p.scale, p.Wo, E1);
        gdn_delta_transition_adjoint_f64(&p.s, p.q, p.k, g, beta, p.scale, p.Wo, E2);
        assert_same(M1, M2, p.nm, "M");
        assert_same(H1, H2, p.nst, "H");
        assert_same(E1, E2, p.nst, "E");
        double *all[] = {M1, H1, E1, M2, H2, E2};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
        delta_result_free(&a);
        delta_result_free(&b);
        delta_problem_free(&p);
    }
}

/* D is G at g = 0 and L is M at g = 0, bit for bit (exp(0) = 1 exactly), except for dg, which
 * the mixers without decay leave at 0. */
static void test_special_cases_of_decay(void **state) {
    (void)state;
    const int pairs[2][2] = {{GDN_MIXER_D, GDN_MIXER_G}, {GDN_MIXER_L, GDN_MIXER_M}};
    for (int i = 0; i < 2; i++)
        for (int chunk = 16; chunk <= 64; chunk *= 2) {
            delta_problem a = problem_make(pairs[i][0], 1, 77, 2, 8, 16, chunk, DELTA_DECAY_MILD, 800 + chunk);
            delta_problem b = problem_make(pairs[i][1], 1, 77, 2, 8, 16, chunk, DELTA_DECAY_MILD, 800 + chunk);
            for (size_t t = 0; t < b.ng; t++) b.g[t] = 0;
            delta_result ra = delta_run_chunk_f64(&a, 1, 1), rb = delta_run_chunk_f64(&b, 1, 1);
            assert_same_result(&a, &ra, &rb, 0, a.mx->has_beta);
            delta_result_free(&ra);
            delta_result_free(&rb);
            delta_problem_free(&a);
            delta_problem_free(&b);
        }
}

/* An empty sequence passes the state through for every mixer: ht = h0, dh0 = dht, and the maps
 * are the identity (M = I, H = 0, E = 0). */
static void test_empty_sequence(void **state) {
    (void)state;
    for (int v = 0; v < GDN_MIXER_DELTA_COUNT; v++) {
        delta_problem p = problem_make(v, 2, 0, 2, 4, 8, 32, DELTA_DECAY_MILD, 900 + v);
        delta_result r = delta_run_chunk_f64(&p, 1, 1);
        assert_same(r.ht, p.h0, p.nst, "ht");
        assert_same(r.dh0, p.Wh, p.nst, "dh0");
        double *M = ref_nan_array(p.nm), *H = ref_nan_array(p.nst), *E = ref_nan_array(p.nst);
        gdn_delta_transition_f64(&p.s, p.k, p.v, p.g_in, p.beta_in, M, H);
        gdn_delta_transition_adjoint_f64(&p.s, p.q, p.k, p.g_in, p.beta_in, p.scale, p.Wo, E);
        for (size_t i = 0; i < p.nm; i++)
            assert_true(M[i] == ((i % (size_t)(p.s.K * p.s.K)) % (size_t)(p.s.K + 1) == 0 ? 1.0 : 0.0));
        for (size_t i = 0; i < p.nst; i++) assert_true(H[i] == 0.0 && E[i] == 0.0);
        free(M);
        free(H);
        free(E);
        delta_result_free(&r);
        delta_problem_free(&p);
    }
}

/* ---- bad variants --------------------------------------------------------------------------- */

static jmp_buf die_jump;
static char die_message[512];

static void die_to_test(const char *message) {
    snprintf(die_message, sizeof die_message, "%s", message);
    longjmp(die_jump, 1);
}

/* Calls entry point `entry` with variant v; returns 1 when it died (message in die_message). */
static int dies(int entry, int v) {
    static double x[64], y[64];
    const gdn_delta_shape s = {.B = 1, .T = 2, .H = 1, .K = 2, .V = 2, .chunk = 16, .variant = v};
    die_message[0] = 0;
    if (setjmp(die_jump) != 0) return 1;
    switch (entry) {
    case 0: gdn_delta_fwd_f64(&s, x, x, x, x, x, 1, NULL, y, NULL); break;
    case 1: gdn_delta_bwd_f64(&s, x, x, x, x, x, 1, NULL, x, NULL, y, y, y, y, y, NULL); break;
    case 2: gdn_delta_transition_f64(&s, x, x, x, x, y, NULL); break;
    case 3: gdn_delta_transition_adjoint_f64(&s, x, x, x, x, 1, x, y); break;
    default: ref_delta_recurrent_fwd(&s, x, x, x, x, x, 1, NULL, y, NULL); break;
    }
    return 0;
}

/* An unknown variant is refused by every entry point with a message naming it. */
static void test_unknown_variant(void **state) {
    (void)state;
    const int bad[] = {-1, GDN_MIXER_DELTA_COUNT, 1000};
    gdn_set_die_handler(die_to_test);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        for (int entry = 0; entry < 5; entry++) {
            int died = dies(entry, bad[i]);
            char want[32];
            snprintf(want, sizeof want, "variant %d", bad[i]);
            if (!died || !strstr(die_message, want)) {
                gdn_set_die_handler(NULL);
                fail_msg("entry %d, variant %d: %s (message \"%s\")", entry, bad[i],
                         died ? "message lacks the variant" : "accepted", die_message);
            }
        }
    gdn_set_die_handler(NULL);
    printf("unknown variants refused: %s\n", die_message);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixer_table),
        cmocka_unit_test(test_backward_vs_fd),
        cmocka_unit_test(test_chunked_f64_vs_recurrent),
        cmocka_unit_test(test_chunked_f32_vs_recurrent),
        cmocka_unit_test(test_transition_maps),
        cmocka_unit_test(test_ignored_inputs_null),
        cmocka_unit_test(test_special_cases_of_decay),
        cmocka_unit_test(test_empty_sequence),
        cmocka_unit_test(test_unknown_variant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
