/* The linearized mixer's core (mixer S; docs/distillation.md, "The linearized mixer"): the
 * balanced gated-delta-rule form of softmax attention over a batch of heads, forward and
 * hand-written backward. The delta rule itself is the project's chunked kernel (gdn_delta_fwd /
 * gdn_delta_bwd) with per-token gates fixed by the position; this file adds what surrounds it:
 * the running means (kept in double: trained keys have means far larger than their spread), the
 * centring, the balance factor and the mean value added to the output, and their gradients. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/check.h"
#include "model/cpu/doc.h"
#include "model/cpu/linearize.h"
#include "model/real.h"

/* The kernel's inputs over Tt = p0 + T positions: queries (zero before p0), centred keys and
 * values per query head [B,Tt,H,D], gates [B,Tt,H], the 1-based position of each row [B,Tt],
 * and the mean value at each query row vbar [B,T,Hkv,D]. */
typedef struct {
    int Tt;
    real *qq, *kk, *vv, *g, *beta, *vbar;
    int *pos;
} linz_in;

static void linz_check(const gdn_linz_shape *s, int p0, int kv_len, const char *who) {
    if (s->B < 1 || s->T < 0 || s->H < 1 || s->Hkv < 1 || s->D < 1 || s->H % s->Hkv)
        GDN_DIE("%s: bad shape B=%d T=%d H=%d Hkv=%d D=%d (need H a multiple of Hkv)", who, s->B, s->T, s->H,
                s->Hkv, s->D);
    if (p0 < 0 || kv_len < p0 + s->T)
        GDN_DIE("%s: %d earlier positions and %d queries do not fit %d key rows", who, p0, s->T, kv_len);
    if (p0 > 0 && s->doc) GDN_DIE("%s: documents cannot be combined with earlier positions (p0 = %d)", who, p0);
}

static void linz_prepare(const gdn_linz_shape *s, int p0, int kv_len, const real *q, const real *k, const real *v,
                         const real *log_lambda, real scale, linz_in *in) {
    const int B = s->B, T = s->T, H = s->H, Hkv = s->Hkv, D = s->D, Tt = p0 + T, group = H / Hkv;
    const size_t rows = (size_t)B * Tt * H * D;
    in->Tt = Tt;
    in->qq = GDN_MALLOC(sizeof(real) * (3 * rows + 2 * (size_t)B * Tt * H + (size_t)B * T * Hkv * D + 1));
    in->kk = in->qq + rows;
    in->vv = in->kk + rows;
    in->g = in->vv + rows;
    in->beta = in->g + (size_t)B * Tt * H;
    in->vbar = in->beta + (size_t)B * Tt * H;
    in->pos = GDN_MALLOC(sizeof(int) * ((size_t)B * Tt + 1));
    double *kbar = GDN_MALLOC(sizeof(double) * (2 * (size_t)Hkv * D + H)), *vbar = kbar + (size_t)Hkv * D,
           *lam = vbar + (size_t)Hkv * D;
    for (int h = 0; h < H; h++) lam[h] = exp((double)log_lambda[h]);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tt; t++) {
            const int p = s->doc ? gdn_doc_pos(s->doc, b, t, T, 0) + 1 : t + 1;
            const double ip = 1.0 / p, keep = 1.0 - ip;
            in->pos[(size_t)b * Tt + t] = p;
            if (p == 1) { /* a new document: the means start again */
                memset(kbar, 0, sizeof(double) * 2 * (size_t)Hkv * D);
            }
            const size_t row = (size_t)b * Tt + t;
            for (int h = 0; h < H; h++) {
                in->g[row * H + h] = p > 1 ? (real)log1p(-ip) : 0; /* p = 1: the state stays zero */
                in->beta[row * H + h] = p > 1 ? (real)(1.0 / (p - 1)) : 0;
            }
            for (int j = 0; j < Hkv; j++) {
                const real *kt = k + (((size_t)b * kv_len + t) * Hkv + j) * D;
                const real *vt = v + (((size_t)b * kv_len + t) * Hkv + j) * D;
                double *kb = kbar + (size_t)j * D, *vb = vbar + (size_t)j * D;
                for (int i = 0; i < D; i++) {
                    kb[i] += ((double)kt[i] - kb[i]) * ip;
                    const double c = (double)kt[i] - kb[i], dv = (double)vt[i] - vb[i];
                    vb[i] += dv * ip;
                    for (int h = j * group; h < (j + 1) * group; h++) {
                        const size_t e = (row * H + h) * D + i;
                        in->kk[e] = (real)(c / lam[h]);
                        in->vv[e] = (real)(keep * dv);
                    }
                    if (t >= p0) in->vbar[(((size_t)b * T + (t - p0)) * Hkv + j) * D + i] = (real)vb[i];
                }
            }
            for (int h = 0; h < H; h++) {
                real *qq = in->qq + (row * H + h) * D;
                if (t < p0) {
                    memset(qq, 0, sizeof(real) * (size_t)D);
                    continue;
                }
                const real *qt = q + (((size_t)b * T + (t - p0)) * H + h) * D;
                const real f = (real)(lam[h] * (double)scale);
                for (int i = 0; i < D; i++) qq[i] = qt[i] * f;
            }
        }
    free(kbar);
}

static void linz_free(linz_in *in) {
    free(in->qq);
    free(in->pos);
}

static gdn_delta_shape linz_delta_shape(const gdn_linz_shape *s, int Tt) {
    return (gdn_delta_shape){s->B, Tt, s->H, s->D, s->D, s->chunk, 0, GDN_MIXER_G, s->doc};
}

void R(gdn_linz_fwd)(const gdn_linz_shape *s, int p0, int kv_len, const real *q, const real *k, const real *v,
                     const real *log_lambda, real scale, real *o) {
    linz_check(s, p0, kv_len, "gdn_linz_fwd");
    if (s->T == 0) return;
    linz_in in;
    linz_prepare(s, p0, kv_len, q, k, v, log_lambda, scale, &in);
    const int B = s->B, T = s->T, H = s->H, D = s->D, Tt = in.Tt, group = H / s->Hkv;
    const gdn_delta_shape ds = linz_delta_shape(s, Tt);
    real *oo = p0 ? GDN_MALLOC(sizeof(real) * (size_t)B * Tt * H * D) : o;
    R(gdn_delta_fwd)(&ds, in.qq, in.kk, in.vv, in.g, in.beta, 1, NULL, oo, NULL);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                const real *src = oo + (((size_t)b * Tt + p0 + t) * H + h) * D;
                const real *vb = in.vbar + (((size_t)b * T + t) * s->Hkv + h / group) * D;
                real *dst = o + (((size_t)b * T + t) * H + h) * D;
                for (int i = 0; i < D; i++) dst[i] = src[i] + vb[i];
            }
    if (p0) free(oo);
    linz_free(&in);
}

void R(gdn_linz_bwd)(const gdn_linz_shape *s, const real *q, const real *k, const real *v, const real *log_lambda,
                     real scale, const real *d_o, real *dq, real *dk, real *dv, real *dlog_lambda) {
    linz_check(s, 0, s->T, "gdn_linz_bwd");
    const int B = s->B, T = s->T, H = s->H, Hkv = s->Hkv, D = s->D, group = H / Hkv;
    memset(dk, 0, sizeof(real) * (size_t)B * T * Hkv * D);
    memset(dv, 0, sizeof(real) * (size_t)B * T * Hkv * D);
    if (T == 0) return;
    linz_in in;
    linz_prepare(s, 0, T, q, k, v, log_lambda, scale, &in);
    const size_t rows = (size_t)B * T * H * D;
    real *dqq = GDN_MALLOC(sizeof(real) * 3 * rows), *dkk = dqq + rows, *dvv = dkk + rows;
    const gdn_delta_shape ds = linz_delta_shape(s, T);
    /* g and beta depend on the position only: no gradient flows into them */
    R(gdn_delta_bwd)(&ds, in.qq, in.kk, in.vv, in.g, in.beta, 1, NULL, d_o, NULL, dqq, dkk, dvv, NULL, NULL, NULL);
    /* qq = lambda scale q and kk = c / lambda: d log(lambda) = dqq . qq - dkk . kk */
    double *dl = GDN_CALLOC((size_t)H, sizeof(double));
    double *lam = GDN_MALLOC(sizeof(double) * (size_t)H);
    for (int h = 0; h < H; h++) lam[h] = exp((double)log_lambda[h]);
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int h = 0; h < H; h++) {
            const size_t e = (r * H + h) * D;
            double acc = 0;
            for (int i = 0; i < D; i++) {
                acc += (double)dqq[e + i] * in.qq[e + i] - (double)dkk[e + i] * in.kk[e + i];
                dq[e + i] = (real)((double)dqq[e + i] * lam[h] * (double)scale);
            }
            dl[h] += acc;
        }
    for (int h = 0; h < H; h++) dlog_lambda[h] += (real)dl[h];
    /* Per sequence and kv head, backwards through the positions, with the query heads of the
     * group summed: c_t = k_t - kbar_t gives dk_i = dc_i - sum_{t >= i} dc_t / p_t; the values
     * vv_t = (1 - 1/p_t)(v_t - vbar_{t-1}) and the output's vbar_t give
     * dvbar_t = sum_h do_t - (1 - 1/p_{t+1}) dW_{t+1} (W_t = sum_h dvv_t, the second term only
     * inside a document) and dv_i = (1 - 1/p_i) dW_i + sum_{t >= i} dvbar_t / p_t; sums over t
     * stop at the document's end. */
    double *acc_k = GDN_MALLOC(sizeof(double) * 3 * (size_t)D), *acc_v = acc_k + D, *wnext = acc_v + D;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Hkv; j++) {
            memset(acc_k, 0, sizeof(double) * 3 * (size_t)D);
            double keep_next = 0; /* 1 - 1/p_{t+1} when t + 1 is in the same document, else 0 */
            for (int t = T - 1; t >= 0; t--) {
                const size_t row = (size_t)b * T + t;
                const int p = in.pos[row];
                const double ip = 1.0 / p, keep = 1.0 - ip;
                real *dkt = dk + (row * Hkv + j) * D, *dvt = dv + (row * Hkv + j) * D;
                for (int i = 0; i < D; i++) {
                    double sc = 0, sw = 0, so = 0;
                    for (int h = j * group; h < (j + 1) * group; h++) {
                        const size_t e = (row * H + h) * D + i;
                        sc += (double)dkk[e] / lam[h];
                        sw += (double)dvv[e];
                        so += (double)d_o[e];
                    }
                    acc_k[i] += sc * ip;
                    dkt[i] = (real)(sc - acc_k[i]);
                    const double dvbar = so - keep_next * wnext[i];
                    acc_v[i] += dvbar * ip;
                    dvt[i] = (real)(keep * sw + acc_v[i]);
                    wnext[i] = sw;
                }
                keep_next = p > 1 ? keep : 0;
                if (p == 1) memset(acc_k, 0, sizeof(double) * 2 * (size_t)D); /* the document began here */
            }
        }
    free(acc_k);
    free(lam);
    free(dl);
    free(dqq);
    linz_free(&in);
}
