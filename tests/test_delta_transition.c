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
#include "tests/ref/delta_recurrent.h"
#include "tests/ref/fd.h"

typedef struct {
    gdn_delta_shape s;
    size_t nqk, nv, ng, nst, nm; /* element counts: q/k, v/o, g/beta, K x V states, K x K maps */
    double *q, *k, *v, *g, *beta, *S_in, *d_o, *dht;
    double scale;
} problem;

/* Uniform values rounded to float, so the fp32 path sees exactly the same inputs. */
static double *filled(size_t n, double lo, double hi, unsigned long long seed) {
    double *x = ref_uniform(n, lo, hi, seed);
    ref_round_f32(x, n);
    return x;
}

/* Unit-norm rows, rounded to float again. */
static void l2_rows(double *x, size_t rows, int D) {
    ref_l2_rows(x, rows, D);
    ref_round_f32(x, rows * D);
}

enum { DECAY_MILD, DECAY_STRONG, DECAY_WEAK };

static problem problem_make(int B, int T, int H, int K, int V, int chunk, int decay,
                            unsigned long long seed) {
    problem p = {.s = {.B = B, .T = T, .H = H, .K = K, .V = V, .chunk = chunk}};
    p.nqk = (size_t)B * T * H * K;
    p.nv = (size_t)B * T * H * V;
    p.ng = (size_t)B * T * H;
    p.nst = (size_t)B * H * K * V;
    p.nm = (size_t)B * H * K * K;
    p.q = filled(p.nqk, -1, 1, seed + 1);
    p.k = filled(p.nqk, -1, 1, seed + 2);
    l2_rows(p.q, p.ng, K);
    l2_rows(p.k, p.ng, K);
    p.v = filled(p.nv, -1, 1, seed + 3);
    p.beta = filled(p.ng, 0.02, 0.98, seed + 4);
    /* weak decay keeps the entering state visible across long segments */
    p.g = filled(p.ng, decay == DECAY_STRONG ? -20 : decay == DECAY_WEAK ? -0.05 : -1, 0, seed + 5);
    p.S_in = filled(p.nst, -1, 1, seed + 6);
    p.d_o = filled(p.nv, -1, 1, seed + 7);
    p.dht = filled(p.nst, -1, 1, seed + 8);
    p.scale = (double)(float)(1.0 / sqrt((double)K));
    return p;
}

static void problem_free(problem *p) {
    double *all[] = {p->q, p->k, p->v, p->g, p->beta, p->S_in, p->d_o, p->dht};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* y = M x + c per (b, h) (transpose: M^T x + c); M [BH,K,K], x, c, y [BH,K,V]. */
static void apply_map(const problem *p, const double *M, const double *x, const double *c, int transpose,
                      double *y) {
    const int K = p->s.K, V = p->s.V, BH = p->s.B * p->s.H;
    for (int bh = 0; bh < BH; bh++) {
        const double *Mb = M + (size_t)bh * K * K, *xb = x + (size_t)bh * K * V;
        for (int i = 0; i < K; i++)
            for (int j = 0; j < V; j++) {
                double acc = c[(size_t)bh * K * V + (size_t)i * V + j];
                for (int l = 0; l < K; l++)
                    acc += (transpose ? Mb[(size_t)l * K + i] : Mb[(size_t)i * K + l]) *
                           xb[(size_t)l * V + j];
                y[(size_t)bh * K * V + (size_t)i * V + j] = acc;
            }
    }
}

/* Outputs and gradients of one delta-rule run, NaN until written. */
typedef struct {
    double *o, *ht, *dh0, *dq, *dk, *dv, *dg, *db;
} run_out;

static run_out run_out_alloc(const problem *p) {
    run_out r = {ref_nan_array(p->nv),  ref_nan_array(p->nst), ref_nan_array(p->nst),
                 ref_nan_array(p->nqk), ref_nan_array(p->nqk), ref_nan_array(p->nv),
                 ref_nan_array(p->ng),  ref_nan_array(p->ng)};
    return r;
}

static void run_out_free(run_out *r) {
    double *all[] = {r->o, r->ht, r->dh0, r->dq, r->dk, r->dv, r->dg, r->db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* The maps M [BH,K,K], H, E [BH,K,V] composed with the problem's state and state gradient,
 * fwd = M S_in + H and bwd = M^T dht + E, against the fp64 recurrence from h0 = S_in (run
 * into r): err[0] fwd vs the reference ht, err[1] bwd vs the reference dh0. */
static void compose_vs_ref(const problem *p, const double *M, const double *H, const double *E,
                           double *fwd, double *bwd, run_out *r, double err[2]) {
    apply_map(p, M, p->S_in, H, 0, fwd);
    apply_map(p, M, p->dht, E, 1, bwd);
    ref_delta_recurrent_fwd(&p->s, p->q, p->k, p->v, p->g, p->beta, p->scale, p->S_in, r->o,
                            r->ht);
    ref_delta_recurrent_bwd(&p->s, p->q, p->k, p->v, p->g, p->beta, p->scale, p->S_in, p->d_o,
                            p->dht, r->dq, r->dk, r->dv, r->dg, r->db, r->dh0);
    err[0] = fd_rel_err(fwd, r->ht, p->nst);
    err[1] = fd_rel_err(bwd, r->dh0, p->nst);
}

/* Errors of one problem in fp64: [0] M S_in + H vs the reference ht, [1] M^T dht + E vs the
 * reference dh0, [2] H vs the chunked ht from h0 = 0, [3] E vs the chunked dh0 at dht = 0,
 * [4] M S_in + H vs the chunked ht, [5] M^T dht + E vs the chunked dh0. */
static void errors_f64(const problem *p, double err[6]) {
    double *M = ref_nan_array(p->nm), *H = ref_nan_array(p->nst), *E = ref_nan_array(p->nst);
    gdn_delta_transition_f64(&p->s, p->k, p->v, p->g, p->beta, M, H);
    gdn_delta_transition_adjoint_f64(&p->s, p->q, p->k, p->g, p->beta, p->scale, p->d_o, E);
    double *fwd = ref_nan_array(p->nst), *bwd = ref_nan_array(p->nst);
    run_out r = run_out_alloc(p);
    compose_vs_ref(p, M, H, E, fwd, bwd, &r, err);

    gdn_delta_fwd_f64(&p->s, p->q, p->k, p->v, p->g, p->beta, p->scale, NULL, r.o, r.ht);
    err[2] = fd_rel_err(H, r.ht, p->nst);
    gdn_delta_bwd_f64(&p->s, p->q, p->k, p->v, p->g, p->beta, p->scale, p->S_in, p->d_o, NULL, r.dq,
                      r.dk, r.dv, r.dg, r.db, r.dh0);
    err[3] = fd_rel_err(E, r.dh0, p->nst);
    gdn_delta_fwd_f64(&p->s, p->q, p->k, p->v, p->g, p->beta, p->scale, p->S_in, r.o, r.ht);
    err[4] = fd_rel_err(fwd, r.ht, p->nst);
    gdn_delta_bwd_f64(&p->s, p->q, p->k, p->v, p->g, p->beta, p->scale, p->S_in, p->d_o, p->dht,
                      r.dq, r.dk, r.dv, r.dg, r.db, r.dh0);
    err[5] = fd_rel_err(bwd, r.dh0, p->nst);
    double *all[] = {M, H, E, fwd, bwd};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    run_out_free(&r);
}

/* The fp32 maps composed with S_in and dht (what sequence parallelism uses) against the fp64
 * recurrence: the larger of the forward and backward relative errors. M on its own is a product
 * of up to T contracting factors whose entries decay towards 0; its elementwise relative error
 * grows with T while its contribution to the state shrinks, so the composed states are the
 * meaningful measure. */
static double error_f32(const problem *p) {
    float *q = ref_to_f32(p->q, p->nqk), *k = ref_to_f32(p->k, p->nqk);
    float *v = ref_to_f32(p->v, p->nv), *g = ref_to_f32(p->g, p->ng);
    float *beta = ref_to_f32(p->beta, p->ng), *d_o = ref_to_f32(p->d_o, p->nv);
    float *M32 = ref_nan_f32(p->nm), *H32 = ref_nan_f32(p->nst), *E32 = ref_nan_f32(p->nst);
    gdn_delta_transition_f32(&p->s, k, v, g, beta, M32, H32);
    gdn_delta_transition_adjoint_f32(&p->s, q, k, g, beta, (float)p->scale, d_o, E32);
    /* compose in fp64 from the fp32 maps: the error measured is that of the maps */
    double *M = ref_nan_array(p->nm), *H = ref_nan_array(p->nst), *E = ref_nan_array(p->nst);
    for (size_t i = 0; i < p->nm; i++) M[i] = M32[i];
    for (size_t i = 0; i < p->nst; i++) {
        H[i] = H32[i];
        E[i] = E32[i];
    }
    double *fwd = ref_nan_array(p->nst), *bwd = ref_nan_array(p->nst), err[2];
    run_out r = run_out_alloc(p);
    compose_vs_ref(p, M, H, E, fwd, bwd, &r, err);
    float *f[] = {q, k, v, g, beta, d_o, M32, H32, E32};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
    double *d[] = {M, H, E, fwd, bwd};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) free(d[i]);
    run_out_free(&r);
    return err[0] > err[1] ? err[0] : err[1];
}

typedef struct {
    int B, T, H, K, V, chunk, decay;
} shape_case;

static const shape_case cases[] = {
    {2, 40, 2, 8, 16, 16, DECAY_MILD},   {1, 64, 3, 16, 16, 32, DECAY_WEAK},
    {2, 100, 2, 8, 8, 64, DECAY_MILD},   {1, 37, 2, 16, 8, 16, DECAY_STRONG},
    {2, 3, 1, 8, 16, 16, DECAY_MILD},    {1, 130, 2, 8, 16, 64, DECAY_STRONG},
    {1, 150, 2, 16, 32, 64, DECAY_WEAK}, {2, 77, 1, 32, 16, 16, DECAY_WEAK},
};

static void test_transition_composes_recurrence(void **state) {
    (void)state;
    double worst[6] = {0};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const shape_case *sc = &cases[c];
        problem p = problem_make(sc->B, sc->T, sc->H, sc->K, sc->V, sc->chunk, sc->decay, 100 + c);
        double err[6];
        errors_f64(&p, err);
        printf("  B=%d T=%3d H=%d K=%2d V=%2d C=%2d %s: ref fwd %.1e bwd %.1e | chunked H %.1e E %.1e "
               "fwd %.1e bwd %.1e\n",
               sc->B, sc->T, sc->H, sc->K, sc->V, sc->chunk,
               sc->decay == DECAY_STRONG ? "strong" : sc->decay == DECAY_WEAK ? "weak  " : "mild  ", err[0],
               err[1], err[2], err[3], err[4], err[5]);
        for (int i = 0; i < 6; i++) {
            assert_true(err[i] < 1e-12);
            if (err[i] > worst[i]) worst[i] = err[i];
        }
        problem_free(&p);
    }
    printf("affine map vs recurrence (fp64): max relative error fwd %.1e, bwd %.1e\n", worst[0], worst[1]);
}

static void test_transition_f32(void **state) {
    (void)state;
    double worst = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const shape_case *sc = &cases[c];
        problem p = problem_make(sc->B, sc->T, sc->H, sc->K, sc->V, sc->chunk, sc->decay, 200 + c);
        double e = error_f32(&p);
        assert_true(e < 1e-5);
        if (e > worst) worst = e;
        problem_free(&p);
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
    problem p = problem_make(1, T, 2, 8, 16, 16, DECAY_WEAK, 300);
    problem a = problem_make(1, T1, 2, 8, 16, 16, DECAY_WEAK, 300);
    problem b = problem_make(1, T2, 2, 8, 16, 16, DECAY_WEAK, 300);
    const size_t H = 2, K = 8, V = 16;
    for (int t = 0; t < T; t++) { /* split p's rows into a and b */
        problem *dst = t < T1 ? &a : &b;
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
    apply_map(&p, M, p.S_in, Hm, 0, y);
    double *w = ref_nan_array(p.nst);
    apply_map(&p, M1, p.S_in, H1, 0, z);
    apply_map(&p, M2, z, H2, 0, w);
    double err = fd_rel_err(w, y, p.nst);
    free(w);
    printf("two segments composed vs one: relative error %.1e\n", err);
    assert_true(err < 1e-12);
    double *all[] = {M, Hm, M1, H1, M2, H2, y, z};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    problem_free(&p);
    problem_free(&a);
    problem_free(&b);
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
