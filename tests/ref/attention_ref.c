/* Naive fp64 attention and rotary references (see attention_ref.h). */
#include "tests/ref/attention_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/check.h"

/* The full causal probability matrix P [T,T] of (b, h) (zero above the diagonal); lse [T]. */
static void ref_probs(const gdn_attn_shape *s, int b, int h, const double *q, const double *k,
                      double scale, double *P, double *lse) {
    const int T = s->T, D = s->D, hk = h / (s->H / s->Hkv);
    for (int i = 0; i < T; i++) {
        const double *qi = q + (((size_t)b * T + i) * s->H + h) * D;
        double mx = -INFINITY;
        for (int j = 0; j < T; j++) {
            const double *kj = k + (((size_t)b * T + j) * s->Hkv + hk) * D;
            double dot = 0;
            for (int d = 0; d < D; d++) dot += qi[d] * kj[d];
            P[(size_t)i * T + j] = j <= i ? scale * dot : -INFINITY;
            if (j <= i && P[(size_t)i * T + j] > mx) mx = P[(size_t)i * T + j];
        }
        double sum = 0;
        for (int j = 0; j < T; j++) sum += exp(P[(size_t)i * T + j] - mx); /* exp(-inf) = 0 */
        for (int j = 0; j < T; j++) P[(size_t)i * T + j] = exp(P[(size_t)i * T + j] - mx) / sum;
        if (lse) lse[i] = mx + log(sum);
    }
}

void attn_ref_fwd(const gdn_attn_shape *s, const double *q, const double *k, const double *v,
                  double scale, double *o, double *lse) {
    const int T = s->T, D = s->D;
    double *P = GDN_MALLOC(sizeof(double) * (size_t)T * T);
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->H; h++) {
            int hk = h / (s->H / s->Hkv);
            ref_probs(s, b, h, q, k, scale, P, lse ? lse + ((size_t)b * s->H + h) * T : NULL);
            for (int i = 0; i < T; i++)
                for (int d = 0; d < D; d++) {
                    double acc = 0;
                    for (int j = 0; j < T; j++)
                        acc += P[(size_t)i * T + j] * v[(((size_t)b * T + j) * s->Hkv + hk) * D + d];
                    o[(((size_t)b * T + i) * s->H + h) * D + d] = acc;
                }
        }
    free(P);
}

void attn_ref_bwd(const gdn_attn_shape *s, const double *q, const double *k, const double *v,
                  double scale, const double *d_o, double *dq, double *dk, double *dv) {
    const int T = s->T, D = s->D;
    const size_t nkv = (size_t)s->B * T * s->Hkv * D;
    memset(dk, 0, sizeof(double) * nkv);
    memset(dv, 0, sizeof(double) * nkv);
    double *P = GDN_MALLOC(sizeof(double) * (size_t)T * T);
    double *dP = GDN_MALLOC(sizeof(double) * (size_t)T * T);
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->H; h++) {
            int hk = h / (s->H / s->Hkv);
#define QA(a, t) ((a) + (((size_t)b * T + (t)) * s->H + h) * D)
#define KA(a, t) ((a) + (((size_t)b * T + (t)) * s->Hkv + hk) * D)
            ref_probs(s, b, h, q, k, scale, P, NULL);
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++) {
                    double dot = 0;
                    for (int d = 0; d < D; d++) dot += QA(d_o, i)[d] * KA(v, j)[d];
                    dP[(size_t)i * T + j] = dot;
                    for (int d = 0; d < D; d++) KA(dv, j)[d] += P[(size_t)i * T + j] * QA(d_o, i)[d];
                }
            /* softmax Jacobian per row: dS_ij = P_ij (dP_ij - sum_l P_il dP_il) */
            for (int i = 0; i < T; i++) {
                double c = 0;
                for (int l = 0; l < T; l++) c += P[(size_t)i * T + l] * dP[(size_t)i * T + l];
                for (int j = 0; j < T; j++) dP[(size_t)i * T + j] = P[(size_t)i * T + j] * (dP[(size_t)i * T + j] - c);
            }
            for (int i = 0; i < T; i++)
                for (int d = 0; d < D; d++) {
                    double acc = 0;
                    for (int j = 0; j < T; j++) acc += dP[(size_t)i * T + j] * KA(k, j)[d];
                    QA(dq, i)[d] = scale * acc;
                }
            for (int j = 0; j < T; j++)
                for (int d = 0; d < D; d++) {
                    double acc = 0;
                    for (int i = 0; i < T; i++) acc += dP[(size_t)i * T + j] * QA(q, i)[d];
                    KA(dk, j)[d] += scale * acc;
                }
#undef QA
#undef KA
        }
    free(P);
    free(dP);
}

void rope_ref(double *y, const double *x, int B, int T, int H, int D, int pos0, double theta) {
    const int half = D / 2;
    double *cs = GDN_MALLOC(sizeof(double) * D), *sn = GDN_MALLOC(sizeof(double) * D);
    double *rot = GDN_MALLOC(sizeof(double) * D);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            for (int i = 0; i < D; i++) { /* emb = cat(freqs, freqs) */
                double inv_freq = 1.0 / pow(theta, (double)(2 * (i % half)) / D);
                cs[i] = cos((pos0 + t) * inv_freq);
                sn[i] = sin((pos0 + t) * inv_freq);
            }
            for (int h = 0; h < H; h++) {
                const double *xr = x + (((size_t)b * T + t) * H + h) * D;
                double *yr = y + (((size_t)b * T + t) * H + h) * D;
                for (int i = 0; i < half; i++) {
                    rot[i] = -xr[i + half];
                    rot[i + half] = xr[i];
                }
                for (int i = 0; i < D; i++) yr[i] = xr[i] * cs[i] + rot[i] * sn[i];
            }
        }
    free(cs);
    free(sn);
    free(rot);
}
