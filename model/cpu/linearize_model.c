/* The linearisations of model/cpu/linearize.c measured inside the CPU model: each attention
 * layer's per-head q (times the softmax scale), k and v after the q/k norm and RoPE, as the
 * attention reads them, against its exact output; and a forward pass whose chosen layers use an
 * approximation in place of their attention output, through the model's attention-output hook
 * (model/cpu/model_acts.h). */
#include <stdlib.h>
#include <string.h>

#include "model/check.h"
#include "model/cpu/linearize.h"
#include "model/cpu/model_acts.h"

/* One (sequence b, query head h) of attention layer l, gathered into contiguous rows. */
typedef struct {
    int T, D, H, Hkv;
    real *q, *k, *v, *o, *approx; /* [T,D] each */
} lin_head;

static void lin_head_init(lin_head *w, const acts_t *a, const gdn_param_table *t, int l, const char *who) {
    const gdn_config *c = &a->cfg;
    if (l < 0 || l >= c->n_layers || t->layer[l].mixer != GDN_MIXER_A)
        GDN_DIE("%s: layer %d is not an attention layer of the model (mixers %s)", who, l, gdn_config_mixers(c));
    if (a->pos0 || a->seq_parallel)
        GDN_DIE("%s: the forward pass must start at position 0 without sequence parallelism", who);
    w->T = a->T;
    w->D = gdn_config_attn_dim(c);
    w->H = c->n_heads;
    w->Hkv = gdn_config_kv_heads(c);
    w->q = GDN_MALLOC(sizeof(real) * 5 * (size_t)w->T * w->D);
    w->k = w->q + (size_t)w->T * w->D;
    w->v = w->k + (size_t)w->T * w->D;
    w->o = w->v + (size_t)w->T * w->D;
    w->approx = w->o + (size_t)w->T * w->D;
}

/* Rows of head h (of H heads) of sequence b of x [B,T,H,D] into dst [T,D], times s. */
static void gather(real *dst, const real *x, int b, int T, int H, int h, int D, real s) {
    for (int t = 0; t < T; t++) {
        const real *src = x + (((size_t)b * T + t) * H + h) * D;
        for (int i = 0; i < D; i++) dst[(size_t)t * D + i] = s * src[i];
    }
}

static void lin_head_load(lin_head *w, const layer_acts *L, int b, int h) {
    const int T = w->T, D = w->D, hk = h / (w->H / w->Hkv);
    gather(w->q, L->q, b, T, w->H, h, D, (real)(1.0 / sqrt((double)D))); /* the attention's scale */
    gather(w->k, L->k, b, T, w->Hkv, hk, D, 1);
    gather(w->v, L->vp, b, T, w->Hkv, hk, D, 1);
    gather(w->o, L->o, b, T, w->H, h, D, 1);
}

/* Method m's approximation of the loaded head into w->approx; -1 when it is not finite. */
static int lin_head_approx(lin_head *w, int m, double lambda, int chunk) {
    if (m == GDN_LIN_VALA) {
        R(gdn_lin_vala)(w->T, w->D, w->D, w->q, w->k, w->v, w->approx);
        return 0;
    }
    return R(gdn_lin_gdn)(w->T, w->D, w->D, w->q, w->k, w->v, m == GDN_LIN_BALANCED ? (real)lambda : 1,
                          chunk, w->approx);
}

void R(gdn_lin_layer_norms)(const acts_t *a, const gdn_param_table *t, int l, double *sq, double *sk) {
    lin_head w;
    lin_head_init(&w, a, t, l, "gdn_lin_layer_norms");
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < w.H; h++) {
            lin_head_load(&w, &a->L[l], b, h);
            R(gdn_lin_norms)(w.T, w.D, w.q, w.k, &sq[h], &sk[h]);
        }
    free(w.q);
}

void R(gdn_lin_layer_errors)(const acts_t *a, const gdn_param_table *t, int l, const double *lambda,
                             double *err2, double *ref2, int *diverged) {
    lin_head w;
    lin_head_init(&w, a, t, l, "gdn_lin_layer_errors");
    const size_t n = (size_t)w.T * w.D;
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < w.H; h++) {
            lin_head_load(&w, &a->L[l], b, h);
            double r = 0;
            for (size_t i = 0; i < n; i++) r += (double)w.o[i] * w.o[i];
            ref2[h] += r;
            for (int m = 0; m < GDN_LIN_COUNT; m++) {
                if (lin_head_approx(&w, m, lambda[h], a->cfg.chunk_size)) {
                    err2[m * w.H + h] = INFINITY;
                    diverged[m]++;
                    continue;
                }
                double e = 0;
                for (size_t i = 0; i < n; i++) {
                    const double d = (double)w.approx[i] - w.o[i];
                    e += d * d;
                }
                err2[m * w.H + h] += e;
            }
        }
    free(w.q);
}

typedef struct {
    const gdn_param_table *t;
    const unsigned char *replace;
    int m;
    const double *lambda;
} lin_replace;

/* The attention-output hook: layer l's o [B,T,H,D] becomes the approximation. A diverged
 * approximation is written as it is (not finite), so the loss says so. */
static void lin_replace_hook(void *user, acts_t *a, int l) {
    const lin_replace *r = user;
    if (!r->replace[l]) return;
    lin_head w;
    lin_head_init(&w, a, r->t, l, "gdn_lin_forward_replaced");
    layer_acts *L = &a->L[l];
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < w.H; h++) {
            lin_head_load(&w, L, b, h);
            lin_head_approx(&w, r->m, r->lambda[(size_t)l * w.H + h], a->cfg.chunk_size);
            for (int tt = 0; tt < w.T; tt++)
                memcpy(L->o + (((size_t)b * w.T + tt) * w.H + h) * w.D, w.approx + (size_t)tt * w.D,
                       sizeof(real) * (size_t)w.D);
        }
    free(w.q);
}

double R(gdn_lin_forward_replaced)(acts_t *a, const gdn_param_table *t, const real *params, const int *tokens,
                                   const int *targets, int *n_valid, const unsigned char *replace, int m,
                                   const double *lambda) {
    if (m < 0 || m >= GDN_LIN_COUNT) GDN_DIE("gdn_lin_forward_replaced: unknown method %d", m);
    lin_replace r = {t, replace, m, lambda};
    a->attn_out_hook = lin_replace_hook;
    a->attn_out_user = &r;
    const double loss = R(gdn_cpu_forward)(a, t, params, tokens, targets, 0, n_valid, NULL, NULL);
    a->attn_out_hook = NULL;
    a->attn_out_user = NULL;
    return loss;
}
