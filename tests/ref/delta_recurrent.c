/* Token-by-token gated delta rule in fp64 and its backpropagation through time (docs/design.md section 3.1),
 * for every mixer of model/mixer.h (s->variant): without decay the factor exp(g) is 1, without
 * the delta term the write is k v^T (beta 1, nothing subtracted). Deliberately plain: one
 * (batch, head) pair at a time, one token at a time, every state kept. */
#include "tests/ref/delta_recurrent.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/check.h"

/* Row offset of token t, head h in a [B,T,H,D] tensor (in units of D). */
static size_t ref_row(const gdn_delta_shape *s, int b, int t, int h) {
    return ((size_t)b * s->T + t) * s->H + h;
}

/* The mixer of s, dying on an unknown variant. */
static const gdn_mixer_info *ref_mixer(const gdn_delta_shape *s) {
    const gdn_mixer_info *mx = gdn_mixer_get(s->variant);
    if (!mx || !mx->is_delta) GDN_DIE("ref_delta_recurrent: unknown mixer variant %d", s->variant);
    return mx;
}

/* Decay factor and write strength of token r: exp(g) or 1, beta or 1. */
static double ref_decay(const gdn_mixer_info *mx, const double *g, size_t r) {
    return mx->has_decay ? exp(g[r]) : 1.0;
}
static double ref_beta(const gdn_mixer_info *mx, const double *beta, size_t r) {
    return mx->has_beta ? beta[r] : 1.0;
}

/* One step: S <- a S (decay first), then S <- S + beta k (v - S^T k)^T (delta update), or
 * S <- S + beta k v^T without the delta term. S [K,V]; k [K]; v [V]. */
static void ref_step(double *S, const double *k, const double *v, double a, double beta,
                     int delta, int K, int V) {
    for (int i = 0; i < K * V; i++) S[i] *= a;
    for (int j = 0; j < V; j++) {
        double m = 0.0; /* (S^T k)_j */
        if (delta)
            for (int i = 0; i < K; i++) m += S[i * V + j] * k[i];
        double u = beta * (v[j] - m);
        for (int i = 0; i < K; i++) S[i * V + j] += k[i] * u;
    }
}

void ref_delta_recurrent_fwd(const gdn_delta_shape *s, const double *q, const double *k,
                             const double *v, const double *g, const double *beta, double scale,
                             const double *h0, double *o, double *ht) {
    const int K = s->K, V = s->V;
    const gdn_mixer_info *mx = ref_mixer(s);
    double *S = GDN_MALLOC(sizeof(double) * K * V);
    for (int b = 0; b < s->B; b++) {
        for (int h = 0; h < s->H; h++) {
            size_t st = ((size_t)b * s->H + h) * K * V;
            if (h0)
                memcpy(S, h0 + st, sizeof(double) * K * V);
            else
                memset(S, 0, sizeof(double) * K * V);
            for (int t = 0; t < s->T; t++) {
                size_t r = ref_row(s, b, t, h);
                ref_step(S, k + r * K, v + r * V, ref_decay(mx, g, r), ref_beta(mx, beta, r),
                         mx->has_delta, K, V);
                /* o_t = scale * S_t^T q_t, from the post-update state. */
                for (int j = 0; j < V; j++) {
                    double acc = 0.0;
                    for (int i = 0; i < K; i++) acc += S[i * V + j] * q[r * K + i];
                    o[r * V + j] = scale * acc;
                }
            }
            if (ht) memcpy(ht + st, S, sizeof(double) * K * V);
        }
    }
    free(S);
}

void ref_delta_recurrent_bwd(const gdn_delta_shape *s, const double *q, const double *k,
                             const double *v, const double *g, const double *beta, double scale,
                             const double *h0, const double *d_o, const double *dht, double *dq,
                             double *dk, double *dv, double *dg, double *dbeta, double *dh0) {
    const int K = s->K, V = s->V, T = s->T;
    const size_t KV = (size_t)K * V;
    const gdn_mixer_info *mx = ref_mixer(s);
    const double dl = mx->has_delta ? 1.0 : 0.0; /* weight of the subtracted prediction */
    double *Ss = GDN_MALLOC(sizeof(double) * KV * (T + 1)); /* Ss[t+1] = S_t, Ss[0] = h0 */
    double *dS = GDN_MALLOC(sizeof(double) * KV);
    double *P = GDN_MALLOC(sizeof(double) * KV);
    double *w = GDN_MALLOC(sizeof(double) * V);
    double *u = GDN_MALLOC(sizeof(double) * V);
    for (int b = 0; b < s->B; b++) {
        for (int h = 0; h < s->H; h++) {
            size_t st = ((size_t)b * s->H + h) * KV;
            if (h0)
                memcpy(Ss, h0 + st, sizeof(double) * KV);
            else
                memset(Ss, 0, sizeof(double) * KV);
            for (int t = 0; t < T; t++) {
                size_t r = ref_row(s, b, t, h);
                memcpy(Ss + (t + 1) * KV, Ss + t * KV, sizeof(double) * KV);
                ref_step(Ss + (t + 1) * KV, k + r * K, v + r * V, ref_decay(mx, g, r),
                         ref_beta(mx, beta, r), mx->has_delta, K, V);
            }
            if (dht)
                memcpy(dS, dht + st, sizeof(double) * KV);
            else
                memset(dS, 0, sizeof(double) * KV);
            for (int t = T - 1; t >= 0; t--) {
                size_t r = ref_row(s, b, t, h);
                const double *St = Ss + (t + 1) * KV, *Sp = Ss + t * KV;
                const double *kt = k + r * K, *vt = v + r * V, *qt = q + r * K, *dot = d_o + r * V;
                double a = ref_decay(mx, g, r), bt = ref_beta(mx, beta, r);
                /* Output: o = scale S_t^T q. */
                for (int i = 0; i < K; i++) {
                    double acc = 0.0;
                    for (int j = 0; j < V; j++) {
                        dS[i * V + j] += scale * qt[i] * dot[j];
                        acc += St[i * V + j] * dot[j];
                    }
                    dq[r * K + i] = scale * acc;
                }
                /* Update S_t = P + beta k u^T with P = a S_{t-1}, u = v - dl P^T k. */
                for (size_t i = 0; i < KV; i++) P[i] = a * Sp[i];
                for (int j = 0; j < V; j++) {
                    double m = 0.0, wj = 0.0;
                    for (int i = 0; i < K; i++) {
                        m += P[i * V + j] * kt[i];
                        wj += dS[i * V + j] * kt[i];
                    }
                    u[j] = vt[j] - dl * m;
                    w[j] = wj; /* w = dS^T k */
                }
                double db = 0.0;
                for (int j = 0; j < V; j++) {
                    db += w[j] * u[j];
                    dv[r * V + j] = bt * w[j];
                }
                if (dbeta) dbeta[r] = mx->has_beta ? db : 0.0;
                for (int i = 0; i < K; i++) {
                    double acc = 0.0;
                    for (int j = 0; j < V; j++)
                        acc += dS[i * V + j] * u[j] - dl * P[i * V + j] * w[j];
                    dk[r * K + i] = bt * acc;
                }
                /* dP = dS - dl beta k w^T; dg = <dP, P>; dS_{t-1} = a dP. */
                double dgt = 0.0;
                for (int i = 0; i < K; i++) {
                    for (int j = 0; j < V; j++) {
                        double dp = dS[i * V + j] - dl * bt * kt[i] * w[j];
                        dgt += dp * P[i * V + j];
                        dS[i * V + j] = a * dp;
                    }
                }
                if (dg) dg[r] = mx->has_decay ? dgt : 0.0;
            }
            if (dh0) memcpy(dh0 + st, dS, sizeof(double) * KV);
        }
    }
    free(Ss);
    free(dS);
    free(P);
    free(w);
    free(u);
}
