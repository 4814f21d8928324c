/* Map and finite-difference checks of the delta-rule tests (see delta_checks.h). */
#include "tests/ref/delta_checks.h"

#include <stdlib.h>

#include "tests/ref/arrays.h"
#include "tests/ref/delta_recurrent.h"
#include "tests/ref/fd.h"

void delta_apply_map(const delta_problem *p, const double *M, const double *x, const double *c,
                     int transpose, double *y) {
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

delta_maps delta_maps_f64(const delta_problem *p) {
    delta_maps m = {ref_nan_array(p->nm), ref_nan_array(p->nst), ref_nan_array(p->nst)};
    gdn_delta_transition_f64(&p->s, p->k, p->v, p->g_in, p->beta_in, m.M, m.H);
    gdn_delta_transition_adjoint_f64(&p->s, p->q, p->k, p->g_in, p->beta_in, p->scale, p->Wo, m.E);
    return m;
}

/* The f32 maps on p's inputs rounded to float, widened to double (exactly). */
static delta_maps delta_maps_f32(const delta_problem *p) {
    float *q = ref_to_f32(p->q, p->nqk), *k = ref_to_f32(p->k, p->nqk);
    float *v = ref_to_f32(p->v, p->nv), *g = ref_to_f32(p->g_in, p->ng);
    float *beta = ref_to_f32(p->beta_in, p->ng), *d_o = ref_to_f32(p->Wo, p->nv);
    float *M32 = ref_nan_f32(p->nm), *H32 = ref_nan_f32(p->nst), *E32 = ref_nan_f32(p->nst);
    gdn_delta_transition_f32(&p->s, k, v, g, beta, M32, H32);
    gdn_delta_transition_adjoint_f32(&p->s, q, k, g, beta, (float)p->scale, d_o, E32);
    delta_maps m = {ref_nan_array(p->nm), ref_nan_array(p->nst), ref_nan_array(p->nst)};
    for (size_t i = 0; i < p->nm; i++) m.M[i] = M32[i];
    for (size_t i = 0; i < p->nst; i++) {
        m.H[i] = H32[i];
        m.E[i] = E32[i];
    }
    float *all[] = {q, k, v, g, beta, d_o, M32, H32, E32};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    return m;
}

void delta_maps_free(delta_maps *m) {
    free(m->M);
    free(m->H);
    free(m->E);
}

/* fwd = M h0 + H, bwd = M^T Wh + E; err[0..1] against the reference. */
static void compose_vs_ref(const delta_problem *p, const delta_maps *m, double *fwd, double *bwd,
                           double err[2]) {
    delta_apply_map(p, m->M, p->h0, m->H, 0, fwd);
    delta_apply_map(p, m->M, p->Wh, m->E, 1, bwd);
    delta_result ref = delta_run_ref(p, 1, 1);
    err[0] = fd_rel_err(fwd, ref.ht, p->nst);
    err[1] = fd_rel_err(bwd, ref.dh0, p->nst);
    delta_result_free(&ref);
}

void delta_map_errors(const delta_problem *p, const delta_maps *m, double err[6]) {
    double *fwd = ref_nan_array(p->nst), *bwd = ref_nan_array(p->nst);
    compose_vs_ref(p, m, fwd, bwd, err);
    delta_result r = delta_run_chunk_f64(p, 1, 1);
    err[2] = fd_rel_err(fwd, r.ht, p->nst);
    err[3] = fd_rel_err(bwd, r.dh0, p->nst);
    delta_result_free(&r);
    r = delta_run_chunk_f64(p, 0, 0);
    err[4] = fd_rel_err(m->H, r.ht, p->nst);
    delta_result_free(&r);
    r = delta_run_chunk_f64(p, 1, 0);
    err[5] = fd_rel_err(m->E, r.dh0, p->nst);
    delta_result_free(&r);
    free(fwd);
    free(bwd);
}

double delta_map_error_f32(const delta_problem *p) {
    delta_maps m = delta_maps_f32(p);
    double *fwd = ref_nan_array(p->nst), *bwd = ref_nan_array(p->nst), err[2];
    compose_vs_ref(p, &m, fwd, bwd, err);
    free(fwd);
    free(bwd);
    delta_maps_free(&m);
    return err[0] > err[1] ? err[0] : err[1];
}

typedef struct {
    delta_problem *p;
    int chunked, use_h0, with_ht;
    double *o, *ht;
} loss_ctx;

static double loss_eval(void *vctx) {
    loss_ctx *c = vctx;
    delta_problem *p = c->p;
    const double *h0 = c->use_h0 ? p->h0 : NULL;
    double *ht = c->with_ht ? c->ht : NULL;
    if (c->chunked)
        gdn_delta_fwd_f64(&p->s, p->q, p->k, p->v, p->g, p->beta, p->scale, h0, c->o, ht);
    else
        ref_delta_recurrent_fwd(&p->s, p->q, p->k, p->v, p->g, p->beta, p->scale, h0, c->o, ht);
    double L = 0.0;
    for (size_t i = 0; i < p->nv; i++) L += c->o[i] * p->Wo[i];
    if (c->with_ht)
        for (size_t i = 0; i < p->nst; i++) L += c->ht[i] * p->Wh[i];
    return L;
}

const char *const delta_fd_names[6] = {"dq", "dk", "dv", "dg", "dbeta", "dh0"};

void delta_fd_errors(delta_problem *p, const delta_result *r, int chunked, int use_h0, int with_ht,
                     size_t n_probe, double err[6]) {
    loss_ctx c = {p, chunked, use_h0, with_ht, ref_nan_array(p->nv), ref_nan_array(p->nst)};
    const double eps = 1e-6;
    err[0] = fd_check(loss_eval, &c, p->q, r->dq, p->nqk, n_probe, eps);
    err[1] = fd_check(loss_eval, &c, p->k, r->dk, p->nqk, n_probe, eps);
    err[2] = fd_check(loss_eval, &c, p->v, r->dv, p->nv, n_probe, eps);
    err[3] = fd_check(loss_eval, &c, p->g, r->dg, p->ng, n_probe, eps);
    err[4] = fd_check(loss_eval, &c, p->beta, r->dbeta, p->ng, n_probe, eps);
    err[5] = use_h0 ? fd_check(loss_eval, &c, p->h0, r->dh0, p->nst, n_probe, eps) : 0.0;
    free(c.o);
    free(c.ht);
}
