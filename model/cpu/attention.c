/* Causal softmax attention with grouped kv heads on the CPU: forward and hand-written backward
 * (docs/design.md section 2.7).
 *
 * Query rows are taken in blocks of ATTN_BLOCK; a block's scores against the keys it may see
 * are one BLAS gemm straight from the strided [B,T,H,D] layout (no gather), softmaxed in place
 * and multiplied into V by a second gemm. Only that block of scores is ever held, so memory is
 * ATTN_BLOCK x T per thread. The forward keeps the log-sum-exp of each row; the backward
 * recomputes the probabilities from it.
 *
 * The forward runs OpenMP over (batch, query head); the backward over (batch, kv head), each
 * task walking the query heads of its group in order, so dk and dv are summed in a fixed order
 * without sharing: the results are bitwise the same for any thread count. BLAS is held to one
 * thread inside the tasks, as in the delta rule.
 *
 * Documents (s->doc, model/cpu/doc.h): a query row reads only the keys of its own document, so
 * the mask is block-diagonal causal; a block of query rows multiplies only the keys from the
 * earliest document start among its rows, so packed short documents cost less than one long
 * sequence. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/check.h"
#include "model/cpu/ops_cpu.h"
#include "model/real.h"
#include "model/cpu/delta_chunk.h"

#define ATTN_BLOCK 64

static void attn_check_shape(const gdn_attn_shape *s, const char *who) {
    if (s->B < 1 || s->T < 0 || s->H < 1 || s->Hkv < 1 || s->D < 1)
        GDN_DIE("%s: bad shape B=%d T=%d H=%d Hkv=%d D=%d (need B, H, Hkv, D >= 1 and T >= 0)", who,
                s->B, s->T, s->H, s->Hkv, s->D);
    if (s->H % s->Hkv)
        GDN_DIE("%s: %d query heads are not a multiple of %d kv heads", who, s->H, s->Hkv);
    /* task counts and BLAS leading dimensions are int */
    if ((long long)s->B * s->H > INT_MAX || (long long)s->H * s->D > INT_MAX || s->T > INT_MAX - ATTN_BLOCK)
        GDN_DIE("%s: shape B=%d T=%d H=%d D=%d is too large (B*H and H*D must fit an int)", who, s->B,
                s->T, s->H, s->D);
}

/* First key query row t may read (its document's start; 0 without documents). */
static inline int attn_key_lo(const gdn_attn_shape *s, int b, int off, int t) {
    if (!s->doc) return 0;
    const long lo = (long)off + s->doc[(size_t)b * s->T + t];
    return lo > 0 ? (int)lo : 0;
}

/* Probabilities of the query block at t0 (n = min(ATTN_BLOCK, T - t0) rows; query row t is at key
 * position off + t) against keys klo..off+t0+n-1, klo the first key any row of the block reads
 * (returned in *klo): P [n, off+t0+n-klo], zero past each row's own position and before its
 * document's start. With lse_in (the backward) they are exp(score - lse); else (the forward) the
 * row softmax, its log-sum-exp into lse_out where that is not NULL. Returns n. */
static int attn_block_probs(real *P, const gdn_attn_shape *s, int b, const real *qb, const real *kb,
                            int off, int t0, int T, int D, size_t qs, size_t ks, real scale,
                            const real *lse_in, real *lse_out, int *klo) {
    const int n = T - t0 < ATTN_BLOCK ? T - t0 : ATTN_BLOCK;
    int lo = attn_key_lo(s, b, off, t0);
    for (int r = 1; r < n; r++) {
        int l = attn_key_lo(s, b, off, t0 + r);
        if (l < lo) lo = l;
    }
    const int m = off + t0 + n - lo;
    R(gdn_gemm)(0, 1, n, m, D, scale, qb + (size_t)t0 * qs, (int)qs, kb + (size_t)lo * ks, (int)ks, 0, P, m);
    for (int r = 0; r < n; r++) {
        real *row = P + (size_t)r * m;
        /* this row's key position and its first key, relative to lo; lse is indexed by query row */
        const int t = off + t0 + r - lo, first = attn_key_lo(s, b, off, t0 + r) - lo;
        for (int j = 0; j < first; j++) row[j] = 0; /* an earlier document */
        for (int j = t + 1; j < m; j++) row[j] = 0;  /* the future */
        if (lse_in) {
            for (int j = first; j <= t; j++) row[j] = REXP(row[j] - lse_in[t0 + r]);
            continue;
        }
        real mx = row[first];
        for (int j = first + 1; j <= t; j++)
            if (row[j] > mx) mx = row[j];
        double sum = 0; /* each term is in (0, 1]: a double sum stays exact enough for any T */
        for (int j = first; j <= t; j++) {
            row[j] = REXP(row[j] - mx);
            sum += row[j];
        }
        real inv = (real)(1.0 / sum);
        for (int j = first; j <= t; j++) row[j] *= inv;
        if (lse_out) lse_out[t0 + r] = (real)((double)mx + log(sum));
    }
    *klo = lo;
    return n;
}

/* ---- forward -------------------------------------------------------------------------------- */

/* The keys and values have Tk >= s->T rows per sequence; the T query rows are the last T
 * positions (off = Tk - T), as for a segment of a longer sequence. */
static void attn_fwd_pair(const gdn_attn_shape *s, int Tk, int b, int h, const real *q, const real *k,
                          const real *v, real scale, real *o, real *lse, real *S) {
    const int T = s->T, D = s->D, hk = h / (s->H / s->Hkv), off = Tk - T;
    const size_t qs = (size_t)s->H * D, ks = (size_t)s->Hkv * D;
    const real *qb = q + (size_t)b * T * qs + (size_t)h * D;
    const real *kb = k + (size_t)b * Tk * ks + (size_t)hk * D;
    const real *vb = v + (size_t)b * Tk * ks + (size_t)hk * D;
    real *ob = o + (size_t)b * T * qs + (size_t)h * D;
    real *lb = lse ? lse + ((size_t)b * s->H + h) * T : NULL;
    for (int t0 = 0; t0 < T; t0 += ATTN_BLOCK) {
        int lo;
        const int n = attn_block_probs(S, s, b, qb, kb, off, t0, T, D, qs, ks, scale, NULL, lb, &lo);
        const int m = off + t0 + n - lo;
        R(gdn_gemm)(0, 0, n, D, m, 1, S, m, vb + (size_t)lo * ks, (int)ks, 0, ob + (size_t)t0 * qs, (int)qs);
    }
}

static void attn_check_keys(const gdn_attn_shape *s, int Tk, const char *who) {
    attn_check_shape(s, who);
    if (Tk < s->T || Tk > INT_MAX - ATTN_BLOCK)
        GDN_DIE("%s: %d key rows for %d query rows (need T <= Tk < INT_MAX - %d: the queries are the last "
                "T positions of the keys)", who, Tk, s->T, ATTN_BLOCK);
}

void R(gdn_attn_fwd_kv)(const gdn_attn_shape *s, int Tk, const real *q, const real *k, const real *v,
                        real scale, real *o, real *lse) {
    attn_check_keys(s, Tk, "gdn_attn_fwd");
    if (s->T == 0) return;
    const int npairs = s->B * s->H, blas_threads = delta_blas_single_begin();
#pragma omp parallel
    {
        real *S = GDN_MALLOC(sizeof(real) * ATTN_BLOCK * (size_t)Tk);
#pragma omp for schedule(dynamic, 1)
        for (int p = 0; p < npairs; p++) attn_fwd_pair(s, Tk, p / s->H, p % s->H, q, k, v, scale, o, lse, S);
        free(S);
    }
    delta_blas_single_end(blas_threads);
}

void R(gdn_attn_fwd)(const gdn_attn_shape *s, const real *q, const real *k, const real *v,
                     real scale, real *o, real *lse) {
    R(gdn_attn_fwd_kv)(s, s->T, q, k, v, scale, o, lse);
}

/* ---- backward ------------------------------------------------------------------------------- */

/* One query head h's contribution: dq of its rows (overwritten), dk and dv of its kv head
 * (accumulated; Tk rows, the queries the last T of them). With P recomputed from lse and
 * Di = dO_i . O_i:
 *   dV += P^T dO,  dP = dO V^T,  dS = P o (dP - Di),  dQ = scale dS K,  dK += scale dS^T Q. */
static void attn_bwd_head(const gdn_attn_shape *s, int Tk, int b, int h, int hk, const real *q,
                          const real *k, const real *v, const real *o, const real *lse, real scale,
                          const real *d_o, real *dq, real *dk, real *dv, real *P, real *dP) {
    const int T = s->T, D = s->D, off = Tk - T;
    const size_t qs = (size_t)s->H * D, ks = (size_t)s->Hkv * D;
    const size_t qoff = (size_t)b * T * qs + (size_t)h * D, koff = (size_t)b * Tk * ks + (size_t)hk * D;
    const real *qb = q + qoff, *ob = o + qoff, *dob = d_o + qoff, *kb = k + koff, *vb = v + koff;
    const real *lb = lse + ((size_t)b * s->H + h) * T;
    real *dqb = dq + qoff, *dkb = dk + koff, *dvb = dv + koff;
    for (int t0 = 0; t0 < T; t0 += ATTN_BLOCK) {
        int lo;
        const int n = attn_block_probs(P, s, b, qb, kb, off, t0, T, D, qs, ks, scale, lb, NULL, &lo);
        const int m = off + t0 + n - lo;
        const real *dob_blk = dob + (size_t)t0 * qs, *kl = kb + (size_t)lo * ks;
        R(gdn_gemm)(1, 0, m, D, n, 1, P, m, dob_blk, (int)qs, 1, dvb + (size_t)lo * ks, (int)ks);
        R(gdn_gemm)(0, 1, n, m, D, 1, dob_blk, (int)qs, vb + (size_t)lo * ks, (int)ks, 0, dP, m);
        for (int r = 0; r < n; r++) {
            const real *dor = dob_blk + (size_t)r * qs, *orow = ob + (size_t)(t0 + r) * qs;
            double di = 0;
            for (int d = 0; d < D; d++) di += (double)dor[d] * orow[d];
            real *prow = P + (size_t)r * m, *dprow = dP + (size_t)r * m;
            for (int j = 0; j < m; j++) dprow[j] = prow[j] * (dprow[j] - (real)di); /* 0 where P is */
        }
        R(gdn_gemm)(0, 0, n, D, m, scale, dP, m, kl, (int)ks, 0, dqb + (size_t)t0 * qs, (int)qs);
        R(gdn_gemm)(1, 0, m, D, n, scale, dP, m, qb + (size_t)t0 * qs, (int)qs, 1, dkb + (size_t)lo * ks, (int)ks);
    }
}

void R(gdn_attn_bwd_kv)(const gdn_attn_shape *s, int Tk, const real *q, const real *k, const real *v,
                        const real *o, const real *lse, real scale, const real *d_o, real *dq,
                        real *dk, real *dv) {
    attn_check_keys(s, Tk, "gdn_attn_bwd");
    const int group = s->H / s->Hkv, ntask = s->B * s->Hkv;
    const size_t ks = (size_t)s->Hkv * s->D;
    if (s->T == 0) { /* no query reads any key */
        memset(dk, 0, sizeof(real) * (size_t)s->B * Tk * ks);
        memset(dv, 0, sizeof(real) * (size_t)s->B * Tk * ks);
        return;
    }
    const int blas_threads = delta_blas_single_begin();
#pragma omp parallel
    {
        real *P = GDN_MALLOC(sizeof(real) * 2 * ATTN_BLOCK * (size_t)Tk);
#pragma omp for schedule(dynamic, 1)
        for (int p = 0; p < ntask; p++) {
            int b = p / s->Hkv, hk = p % s->Hkv;
            for (int t = 0; t < Tk; t++) { /* this task owns these rows of dk and dv */
                size_t off = ((size_t)b * Tk + t) * ks + (size_t)hk * s->D;
                memset(dk + off, 0, sizeof(real) * s->D);
                memset(dv + off, 0, sizeof(real) * s->D);
            }
            for (int h = hk * group; h < (hk + 1) * group; h++)
                attn_bwd_head(s, Tk, b, h, hk, q, k, v, o, lse, scale, d_o, dq, dk, dv, P,
                              P + ATTN_BLOCK * (size_t)Tk);
        }
        free(P);
    }
    delta_blas_single_end(blas_threads);
}

void R(gdn_attn_bwd)(const gdn_attn_shape *s, const real *q, const real *k, const real *v,
                     const real *o, const real *lse, real scale, const real *d_o, real *dq,
                     real *dk, real *dv) {
    R(gdn_attn_bwd_kv)(s, s->T, q, k, v, o, lse, scale, d_o, dq, dk, dv);
}

/* ---- decoding: new rows against a cache ------------------------------------------------------ */

void R(gdn_attn_fwd_cached)(const gdn_attn_shape *s, const real *q, const real *k, const real *v,
                            int len, int pos0, real scale, real *o, real *lse) {
    attn_check_shape(s, "gdn_attn_fwd_cached");
    if (s->doc) GDN_DIE("gdn_attn_fwd_cached: documents are not supported when decoding from a cache");
    if (pos0 < 0 || len < 0 || (long)pos0 + s->T > len)
        GDN_DIE("gdn_attn_fwd_cached: rows at positions %d..%ld do not fit a cache of %d positions",
                pos0, (long)pos0 + s->T - 1, len);
    if (s->T == 0) return;
    const int npairs = s->B * s->H, D = s->D, T = s->T;
    const size_t qs = (size_t)s->H * D, ks = (size_t)s->Hkv * D;
#pragma omp parallel
    {
        double *S = GDN_MALLOC(sizeof(double) * (size_t)(pos0 + T));
#pragma omp for schedule(dynamic, 1)
        for (int p = 0; p < npairs; p++) {
            const int b = p / s->H, h = p % s->H, hk = h / (s->H / s->Hkv);
            const real *kb = k + (size_t)b * len * ks + (size_t)hk * D;
            const real *vb = v + (size_t)b * len * ks + (size_t)hk * D;
            for (int t = 0; t < T; t++) {
                const real *qr = q + ((size_t)b * T + t) * qs + (size_t)h * D;
                real *orow = o + ((size_t)b * T + t) * qs + (size_t)h * D;
                const int m = pos0 + t + 1; /* keys 0 .. pos0 + t */
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < m; j++) {
                    double d = 0;
                    for (int i = 0; i < D; i++) d += (double)qr[i] * kb[(size_t)j * ks + i];
                    S[j] = (double)scale * d;
                    if (S[j] > mx) mx = S[j];
                }
                for (int j = 0; j < m; j++) sum += S[j] = exp(S[j] - mx);
                for (int i = 0; i < D; i++) orow[i] = 0;
                for (int j = 0; j < m; j++) {
                    const real pj = (real)(S[j] / sum);
                    for (int i = 0; i < D; i++) orow[i] += pj * vb[(size_t)j * ks + i];
                }
                if (lse) lse[((size_t)b * s->H + h) * T + t] = (real)(mx + log(sum));
            }
        }
        free(S);
    }
}
