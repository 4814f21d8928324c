/* The delta rule as an affine map of its entering state (gdn_delta_transition and its adjoint):
 * composing the map with a random state must reproduce the recurrence itself, forward
 * (M S_in + H = ht with h0 = S_in) and backward (M^T dht + E = dh0), both against the fp64
 * token-by-token reference and against the chunked kernels, over chunk sizes, lengths that are
 * not multiples of the chunk, K != V, strong decay and the empty segment. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/cpu/ops_cpu.h"
#include "tests/ref/arrays.h"
#include "tests/ref/delta_checks.h"
#include "tests/ref/delta_problem.h"
#include "tests/ref/fd.h"

/* Problems of the gated delta rule with every input rounded to float as it is drawn (the fp32
 * path sees exactly the same values). h0 is the entering state S_in, Wo the output gradient d_o
 * and Wh the final-state gradient dht. */
static delta_problem problem_make(int B, int T, int H, int K, int V, int chunk, int decay,
                                  unsigned long long seed) {
    return delta_problem_make(GDN_MIXER_G, B, T, H, K, V, chunk, decay, DELTA_DRAW_F32_EACH, seed);
}

typedef struct {
    int B, T, H, K, V, chunk, decay;
} shape_case;

static const shape_case cases[] = {
    {2, 40, 2, 8, 16, 16, DELTA_DECAY_MILD},   {1, 64, 3, 16, 16, 32, DELTA_DECAY_WEAK},
    {2, 100, 2, 8, 8, 64, DELTA_DECAY_MILD},   {1, 37, 2, 16, 8, 16, DELTA_DECAY_WIDE},
    {2, 3, 1, 8, 16, 16, DELTA_DECAY_MILD},    {1, 130, 2, 8, 16, 64, DELTA_DECAY_WIDE},
    {1, 150, 2, 16, 32, 64, DELTA_DECAY_WEAK}, {2, 77, 1, 32, 16, 16, DELTA_DECAY_WEAK},
};

static void test_transition_composes_recurrence(void **state) {
    (void)state;
    double worst[6] = {0};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const shape_case *sc = &cases[c];
        delta_problem p = problem_make(sc->B, sc->T, sc->H, sc->K, sc->V, sc->chunk, sc->decay, 100 + c);
        /* the maps' composition against the reference and the chunked kernels (the order of
         * delta_map_errors) */
        double err[6];
        delta_maps m = delta_maps_f64(&p);
        delta_map_errors(&p, &m, err);
        delta_maps_free(&m);
        printf("  B=%d T=%3d H=%d K=%2d V=%2d C=%2d %s: ref fwd %.1e bwd %.1e | chunked H %.1e E %.1e "
               "fwd %.1e bwd %.1e\n",
               sc->B, sc->T, sc->H, sc->K, sc->V, sc->chunk,
               sc->decay == DELTA_DECAY_WIDE ? "strong" : sc->decay == DELTA_DECAY_WEAK ? "weak  " : "mild  ",
               err[0], err[1], err[4], err[5], err[2], err[3]);
        for (int i = 0; i < 6; i++) {
            assert_true(err[i] < 1e-12);
            if (err[i] > worst[i]) worst[i] = err[i];
        }
        delta_problem_free(&p);
    }
    printf("affine map vs recurrence (fp64): max relative error fwd %.1e, bwd %.1e\n", worst[0], worst[1]);
}

/* The fp32 maps composed with S_in and dht, as sequence parallelism uses them, against the fp64
 * recurrence (delta_map_error_f32 says why the composed states are measured). */
static void test_transition_f32(void **state) {
    (void)state;
    double worst = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const shape_case *sc = &cases[c];
        delta_problem p = problem_make(sc->B, sc->T, sc->H, sc->K, sc->V, sc->chunk, sc->decay, 200 + c);
        double e = delta_map_error_f32(&p);
        assert_true(e < 1e-5);
        if (e > worst) worst = e;
        delta_problem_free(&p);
    }
    printf("affine maps fp32, composed with a state, vs the fp64 recurrence: max relative error %.1e\n", worst);
}

/* An empty segment is the identity map: M = I, H = 0, E = 0. */
static void test_transition_empty(void **state) {
    (void)state;
    gdn_delta_shape s = {.B = 1, .T = 0, .H = 2, .K = 4, .V = 8, .chunk = 16};
    double M[2 * 16], H[2 * 32], E[2 * 32], dummy[1] = {0};
    for (int i = 0; i < 32; i++) M[i] = NAN;
    for (int i = 0; i < 64; i++) H[i] = E[i] = NAN;
    gdn_delta_transition_f64(&s, dummy, dummy, dummy, dummy, M, H);
    gdn_delta_transition_adjoint_f64(&s, dummy, dummy, dummy, dummy, 0.5, dummy, E);
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) assert_true(M[h * 16 + i * 4 + j] == (i == j ? 1.0 : 0.0));
    for (int i = 0; i < 64; i++) assert_true(H[i] == 0.0 && E[i] == 0.0);
}

/* Two segments compose: the map of [0, T) is (M2 M1, M2 H1 + H2). */
static void test_transition_segments_compose(void **state) {
    (void)state;
    const int T = 70, T1 = 29, T2 = T - T1;
    delta_problem p = problem_make(1, T, 2, 8, 16, 16, DELTA_DECAY_WEAK, 300);
    delta_problem a = problem_make(1, T1, 2, 8, 16, 16, DELTA_DECAY_WEAK, 300);
    delta_problem b = problem_make(1, T2, 2, 8, 16, 16, DELTA_DECAY_WEAK, 300);
    const size_t H = 2, K = 8, V = 16;
    for (int t = 0; t < T; t++) { /* split p's rows into a and b */
        delta_problem *dst = t < T1 ? &a : &b;
        int tt = t < T1 ? t : t - T1;
        memcpy(dst->k + (size_t)tt * H * K, p.k + (size_t)t * H * K, H * K * sizeof(double));
        memcpy(dst->v + (size_t)tt * H * V, p.v + (size_t)t * H * V, H * V * sizeof(double));
        memcpy(dst->g + (size_t)tt * H, p.g + (size_t)t * H, H * sizeof(double));
        memcpy(dst->beta + (size_t)tt * H, p.beta + (size_t)t * H, H * sizeof(double));
    }
    double *M = ref_nan_array(p.nm), *Hm = ref_nan_array(p.nst);
    double *M1 = ref_nan_array(p.nm), *H1 = ref_nan_array(p.nst);
    double *M2 = ref_nan_array(p.nm), *H2 = ref_nan_array(p.nst);
    double *y = ref_nan_array(p.nst), *z = ref_nan_array(p.nst);
    gdn_delta_transition_f64(&p.s, p.k, p.v, p.g, p.beta, M, Hm);
    gdn_delta_transition_f64(&a.s, a.k, a.v, a.g, a.beta, M1, H1);
    gdn_delta_transition_f64(&b.s, b.k, b.v, b.g, b.beta, M2, H2);
    /* whole map applied to S_in vs the two maps applied in turn */
    delta_apply_map(&p, M, p.h0, Hm, 0, y);
    double *w = ref_nan_array(p.nst);
    delta_apply_map(&p, M1, p.h0, H1, 0, z);
    delta_apply_map(&p, M2, z, H2, 0, w);
    double err = fd_rel_err(w, y, p.nst);
    free(w);
    printf("two segments composed vs one: relative error %.1e\n", err);
    assert_true(err < 1e-12);
    double *all[] = {M, Hm, M1, H1, M2, H2, y, z};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    delta_problem_free(&p);
    delta_problem_free(&a);
    delta_problem_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transition_composes_recurrence),
        cmocka_unit_test(test_transition_f32),
        cmocka_unit_test(test_transition_empty),
        cmocka_unit_test(test_transition_segments_compose),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
