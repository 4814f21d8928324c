/* Delta-rule test problems and runs (see delta_problem.h). */
#include "tests/ref/delta_problem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/ref/arrays.h"
#include "tests/ref/delta_recurrent.h"
#include "tests/ref/fd.h"

/* A test that asks for a problem this file cannot draw is wrong in itself: stop it loudly. */
static void refuse(const char *what, int value) {
    fprintf(stderr, "delta_problem_make: %s %d is not supported (see tests/ref/delta_problem.h)\n",
            what, value);
    abort();
}

static double *draw_decay(size_t n, int decay, unsigned long long seed) {
    static const double lo[] = {[DELTA_DECAY_MILD] = -1, [DELTA_DECAY_STRONG] = -1,
                                [DELTA_DECAY_WIDE] = -20, [DELTA_DECAY_WEAK] = -0.05};
    if (decay < 0 || decay > DELTA_DECAY_WEAK) refuse("decay", decay);
    double *g = ref_uniform(n, lo[decay], 0, seed);
    if (decay == DELTA_DECAY_STRONG) {
        double *u = ref_uniform(n, 0, 1, seed + 1);
        for (size_t i = 0; i < n; i++)
            if (u[i] < 0.35) g[i] = -5.0 - 15.0 * (u[i] / 0.35);
        free(u);
    }
    return g;
}

delta_problem delta_problem_make(int variant, int B, int T, int H, int K, int V, int chunk,
                                 int decay, int draw, unsigned long long seed) {
    if (draw < DELTA_DRAW_F64 || draw > DELTA_DRAW_F32_EACH) refuse("draw", draw);
    if (draw == DELTA_DRAW_F32_EACH && decay == DELTA_DECAY_STRONG) refuse("decay", decay);
    if (!gdn_mixer_get(variant) || !gdn_mixer_get(variant)->is_delta) refuse("variant", variant);
    delta_problem p = {
        .s = {.B = B, .T = T, .H = H, .K = K, .V = V, .chunk = chunk, .variant = variant}};
    p.mx = gdn_mixer_get(variant);
    p.nqk = (size_t)B * T * H * K;
    p.nv = (size_t)B * T * H * V;
    p.ng = (size_t)B * T * H;
    p.nst = (size_t)B * H * K * V;
    p.nm = (size_t)B * H * K * K;
    const int each = draw == DELTA_DRAW_F32_EACH;
    p.q = ref_uniform(p.nqk, -1, 1, seed + 1);
    p.k = ref_uniform(p.nqk, -1, 1, seed + 2);
    if (each) {
        ref_round_f32(p.q, p.nqk);
        ref_round_f32(p.k, p.nqk);
    }
    ref_l2_rows(p.q, p.ng, K);
    ref_l2_rows(p.k, p.ng, K);
    p.v = ref_uniform(p.nv, -1, 1, seed + 3);
    p.beta = ref_uniform(p.ng, 0.02, 0.98, seed + 4);
    p.g = draw_decay(p.ng, decay, seed + 5);
    const unsigned long long state_seed = seed + (each ? 6 : 7);
    p.h0 = ref_uniform(p.nst, -1, 1, state_seed);
    p.Wo = ref_uniform(p.nv, -1, 1, state_seed + 1);
    p.Wh = ref_uniform(p.nst, -1, 1, state_seed + 2);
    if (draw != DELTA_DRAW_F64) delta_problem_round_f32(&p);
    p.g_in = p.mx->has_decay ? p.g : ref_nan_array(p.ng);
    p.beta_in = p.mx->has_beta ? p.beta : ref_nan_array(p.ng);
    p.scale = (double)(float)(1.0 / sqrt((double)K));
    return p;
}

void delta_problem_free(delta_problem *p) {
    if (p->g_in != p->g) free(p->g_in);
    if (p->beta_in != p->beta) free(p->beta_in);
    double *all[] = {p->q, p->k, p->v, p->g, p->beta, p->h0, p->Wo, p->Wh};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

void delta_problem_round_f32(delta_problem *p) {
    double *all[] = {p->q, p->k, p->v, p->g, p->beta, p->h0, p->Wo, p->Wh};
    size_t n[] = {p->nqk, p->nqk, p->nv, p->ng, p->ng, p->nst, p->nv, p->nst};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ref_round_f32(all[i], n[i]);
}

delta_result delta_result_alloc(const delta_problem *p) {
    delta_result r = {ref_nan_array(p->nv),  ref_nan_array(p->nst), ref_nan_array(p->nqk),
                      ref_nan_array(p->nqk), ref_nan_array(p->nv),  ref_nan_array(p->ng),
                      ref_nan_array(p->ng),  ref_nan_array(p->nst)};
    return r;
}

void delta_result_free(delta_result *r) {
    double *all[] = {r->o, r->ht, r->dq, r->dk, r->dv, r->dg, r->dbeta, r->dh0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

delta_result delta_run_ref(const delta_problem *p, int use_h0, int use_dht) {
    delta_result r = delta_result_alloc(p);
    const double *h0 = use_h0 ? p->h0 : NULL, *dht = use_dht ? p->Wh : NULL;
    const double *g = p->mx->has_decay ? p->g : NULL, *beta = p->mx->has_beta ? p->beta : NULL;
    ref_delta_recurrent_fwd(&p->s, p->q, p->k, p->v, g, beta, p->scale, h0, r.o, r.ht);
    ref_delta_recurrent_bwd(&p->s, p->q, p->k, p->v, g, beta, p->scale, h0, p->Wo, dht, r.dq, r.dk,
                            r.dv, r.dg, r.dbeta, r.dh0);
    return r;
}

delta_result delta_run_chunk_f64(const delta_problem *p, int use_h0, int use_dht) {
    delta_result r = delta_result_alloc(p);
    const double *h0 = use_h0 ? p->h0 : NULL, *dht = use_dht ? p->Wh : NULL;
    gdn_delta_fwd_f64(&p->s, p->q, p->k, p->v, p->g_in, p->beta_in, p->scale, h0, r.o, r.ht);
    gdn_delta_bwd_f64(&p->s, p->q, p->k, p->v, p->g_in, p->beta_in, p->scale, h0, p->Wo, dht, r.dq,
                      r.dk, r.dv, r.dg, r.dbeta, r.dh0);
    return r;
}

delta_result delta_run_chunk_f32(const delta_problem *p, int use_h0, int use_dht) {
    float *q = ref_to_f32(p->q, p->nqk), *k = ref_to_f32(p->k, p->nqk);
    float *v = ref_to_f32(p->v, p->nv), *g = ref_to_f32(p->g_in, p->ng);
    float *beta = ref_to_f32(p->beta_in, p->ng), *h0 = ref_to_f32(p->h0, p->nst);
    float *Wo = ref_to_f32(p->Wo, p->nv), *Wh = ref_to_f32(p->Wh, p->nst);
    float *o = ref_nan_f32(p->nv), *ht = ref_nan_f32(p->nst);
    float *dq = ref_nan_f32(p->nqk), *dk = ref_nan_f32(p->nqk);
    float *dv = ref_nan_f32(p->nv), *dg = ref_nan_f32(p->ng), *dbeta = ref_nan_f32(p->ng);
    float *dh0 = ref_nan_f32(p->nst);
    gdn_delta_fwd_f32(&p->s, q, k, v, g, beta, (float)p->scale, use_h0 ? h0 : NULL, o, ht);
    gdn_delta_bwd_f32(&p->s, q, k, v, g, beta, (float)p->scale, use_h0 ? h0 : NULL, Wo,
                      use_dht ? Wh : NULL, dq, dk, dv, dg, dbeta, dh0);
    /* Widening is exact, so errors (and exact zeros) measured on r are those of the floats. */
    delta_result r = delta_result_alloc(p);
    double *to[] = {r.o, r.ht, r.dq, r.dk, r.dv, r.dg, r.dbeta, r.dh0};
    const float *from[] = {o, ht, dq, dk, dv, dg, dbeta, dh0};
    size_t n[] = {p->nv, p->nst, p->nqk, p->nqk, p->nv, p->ng, p->ng, p->nst};
    for (size_t a = 0; a < sizeof to / sizeof to[0]; a++)
        for (size_t i = 0; i < n[a]; i++) to[a][i] = from[a][i];
    float *all[] = {q, k, v, g, beta, h0, Wo, Wh, o, ht, dq, dk, dv, dg, dbeta, dh0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    return r;
}

const char *const delta_err_names[DELTA_N_ERR] = {"o",  "ht", "dq",    "dk",
                                                  "dv", "dg", "dbeta", "dh0"};

void delta_result_errors(const delta_problem *p, const delta_result *a, const delta_result *ref,
                         double err[DELTA_N_ERR]) {
    err[0] = fd_rel_err(a->o, ref->o, p->nv);
    err[1] = fd_rel_err(a->ht, ref->ht, p->nst);
    err[2] = fd_rel_err(a->dq, ref->dq, p->nqk);
    err[3] = fd_rel_err(a->dk, ref->dk, p->nqk);
    err[4] = fd_rel_err(a->dv, ref->dv, p->nv);
    err[5] = fd_rel_err(a->dg, ref->dg, p->ng);
    err[6] = fd_rel_err(a->dbeta, ref->dbeta, p->ng);
    err[7] = fd_rel_err(a->dh0, ref->dh0, p->nst);
}

int delta_report(const char *label, const double *err, const char *const *names, int n, double tol,
                 double *max_err) {
    printf("  %-44s", label);
    for (int i = 0; i < n; i++) {
        printf(" %s %.1e", names[i], err[i]);
        if (err[i] > *max_err) *max_err = err[i];
    }
    printf("\n");
    for (int i = 0; i < n; i++)
        if (!(err[i] < tol)) return i;
    return -1;
}
