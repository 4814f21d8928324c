/* Chunked gated delta rule on the CPU: forward (docs/design.md section 3.2) and backward (section 3.3), for
 * every mixer of model/mixer.h (s->variant): a mixer without decay skips the gates' inputs, one
 * without the delta term writes V itself and skips the WY products (see delta_chunk.h).
 *
 * Work is split over (batch, head) pairs with OpenMP; inside a pair the chunks are walked in
 * order, each chunk's rows gathered into contiguous scratch and the per-chunk products done by
 * BLAS gemm (the shared chunk steps are in delta_chunk.h). A partial last chunk needs no masking,
 * and decays enter only as exp(G_i - G_j) with i >= j, so g down to -20 per token (and beyond)
 * cannot overflow. */
#include <stdlib.h>
#include <string.h>

#include "model/check.h"
#include "model/cpu/ops_cpu.h"
#include "model/real.h"
#include "model/cpu/delta_chunk.h"

/* S <- gam_last S + K^T diag(r) Vn, r_j = Gam[n-1, j]. tmp: n*K. */
static void delta_state_step(int n, int C, int K, int V, const real *k, const real *gam,
                             const real *Gam, const real *Vn, real *S, real *tmp) {
    const real *rr = Gam + (size_t)(n - 1) * C;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < K; i++) tmp[(size_t)j * K + i] = rr[j] * k[(size_t)j * K + i];
    R(gdn_gemm)(1, 0, K, V, n, 1, tmp, K, Vn, V, gam[n - 1], S, V);
}

/* ---- forward -------------------------------------------------------------------------------- */

/* Per-thread scratch of the forward pass, carved from one block. */
typedef struct {
    real *q, *k, *v, *o;     /* [C,K] [C,K] [C,V] [C,V] gathered rows */
    real *g, *beta, *gam;    /* [C] */
    real *Gam, *KK, *Tm, *L; /* [C,C] */
    real *W, *U, *Vn, *tmp;  /* [C,K] [C,V] [C,V] [C,max(K,V)] */
    real *S;                 /* [K,V] running state */
} delta_fwd_ws;

static size_t delta_fwd_ws_size(int C, int K, int V) {
    size_t KV = (size_t)(K > V ? K : V);
    return (size_t)C * (3 * K + 4 * V + KV) + 3 * (size_t)C + 4 * (size_t)C * C + (size_t)K * V;
}

static void delta_fwd_ws_carve(delta_fwd_ws *w, real *base, int C, int K, int V) {
    size_t KV = (size_t)(K > V ? K : V);
    w->q = delta_take(&base, (size_t)C * K);
    w->k = delta_take(&base, (size_t)C * K);
    w->v = delta_take(&base, (size_t)C * V);
    w->o = delta_take(&base, (size_t)C * V);
    w->g = delta_take(&base, C);
    w->beta = delta_take(&base, C);
    w->gam = delta_take(&base, C);
    w->Gam = delta_take(&base, (size_t)C * C);
    w->KK = delta_take(&base, (size_t)C * C);
    w->Tm = delta_take(&base, (size_t)C * C);
    w->L = delta_take(&base, (size_t)C * C);
    w->W = delta_take(&base, (size_t)C * K);
    w->U = delta_take(&base, (size_t)C * V);
    w->Vn = delta_take(&base, (size_t)C * V);
    w->tmp = delta_take(&base, (size_t)C * KV);
    w->S = delta_take(&base, (size_t)K * V);
}

/* O [n,V] = scale [diag(gam) Q S + (Q K^T o Gam) Vn] (Gam is zero above the diagonal). */
static void delta_output(int n, int C, int K, int V, real scale, const real *q, const real *k,
                         const real *gam, const real *Gam, const real *S, const real *Vn, real *L,
                         real *o) {
    R(gdn_gemm)(0, 0, n, V, K, scale, q, K, S, V, 0, o, V);
    for (int r = 0; r < n; r++)
        for (int j = 0; j < V; j++) o[(size_t)r * V + j] *= gam[r];
    delta_intra(n, C, K, scale, q, k, Gam, L);
    R(gdn_gemm)(0, 0, n, V, n, 1, L, C, Vn, V, 1, o, V);
}

static void delta_fwd_pair(const gdn_delta_shape *s, const gdn_mixer_info *mx, int b, int h,
                           const real *q, const real *k, const real *v, const real *g,
                           const real *beta, real scale, const real *h0, real *o, real *ht,
                           delta_fwd_ws *w) {
    const int C = s->chunk, K = s->K, V = s->V;
    const size_t st = ((size_t)b * s->H + h) * K * V;
    if (h0)
        memcpy(w->S, h0 + st, sizeof(real) * K * V);
    else
        memset(w->S, 0, sizeof(real) * K * V);
    for (int t0 = 0, n; t0 < s->T; t0 += n) {
        n = delta_chunk_len(s, b, t0);
        if (delta_doc_reset(s, b, t0)) memset(w->S, 0, sizeof(real) * K * V);
        delta_gather(w->q, q, s, b, h, t0, n, K);
        delta_gather(w->k, k, s, b, h, t0, n, K);
        if (mx->has_decay) delta_gather(w->g, g, s, b, h, t0, n, 1);
        delta_gates(n, C, mx->has_decay ? w->g : NULL, w->gam, w->Gam);
        if (mx->has_delta) {
            delta_gather(w->v, v, s, b, h, t0, n, V);
            delta_gather(w->beta, beta, s, b, h, t0, n, 1);
            delta_wy(n, C, K, V, w->k, w->v, w->beta, w->gam, w->Gam, w->KK, w->Tm, w->W, w->U,
                     w->tmp);
            delta_vnew(n, K, V, w->U, w->W, w->S, w->Vn);
        } else {
            delta_gather(w->Vn, v, s, b, h, t0, n, V); /* written as they come */
        }
        delta_output(n, C, K, V, scale, w->q, w->k, w->gam, w->Gam, w->S, w->Vn, w->L, w->o);
        delta_scatter(o, w->o, s, b, h, t0, n, V);
        delta_state_step(n, C, K, V, w->k, w->gam, w->Gam, w->Vn, w->S, w->tmp);
    }
    if (ht) memcpy(ht + st, w->S, sizeof(real) * K * V);
}

void R(gdn_delta_fwd)(const gdn_delta_shape *s, const real *q, const real *k, const real *v,
                      const real *g, const real *beta, real scale, const real *h0, real *o,
                      real *ht) {
    const gdn_mixer_info *mx = delta_check_shape(s, "gdn_delta_fwd");
    const int npairs = s->B * s->H, blas_threads = delta_blas_single_begin();
#pragma omp parallel
    {
        real *block = GDN_MALLOC(sizeof(real) * delta_fwd_ws_size(s->chunk, s->K, s->V));
        delta_fwd_ws w;
        delta_fwd_ws_carve(&w, block, s->chunk, s->K, s->V);
#pragma omp for schedule(dynamic, 1)
        for (int p = 0; p < npairs; p++)
            delta_fwd_pair(s, mx, p / s->H, p % s->H, q, k, v, g, beta, scale, h0, o, ht, &w);
        free(block);
    }
    delta_blas_single_end(blas_threads);
}

/* ---- backward ------------------------------------------------------------------------------- */

/* Per-thread scratch of the backward pass. The first group holds, for every chunk of the pair,
 * what the recomputed forward produced; the rest is one chunk's working set. */
typedef struct {
    /* Per chunk c: S entering [K,V], Tm [C,C], W [C,K], U [C,V], Vn [C,V]. */
    real *Sc, *Tc, *Wc, *Uc, *Vc;
    real *q, *k, *v, *dO;             /* [C,K] [C,K] [C,V] [C,V] gathered rows */
    real *g, *beta, *gam;             /* [C] */
    real *dGd, *y;                    /* [C] direct gate terms; running column sums */
    real *dbeta, *dg;                 /* [C] */
    real *Gam, *KK, *QK, *Lm, *dA;    /* [C,C] */
    real *dq, *dk, *dW, *dKbg;        /* [C,K] */
    real *dv, *dVn, *dVb, *dOg, *KdS; /* [C,V] */
    real *tmp;                        /* [C,max(K,V)] */
    real *dS, *dSp;                   /* [K,V] gradient of the state leaving / entering the chunk */
    int *t0;                          /* [chunks + 1] first row of each chunk of the pair's row */
} delta_bwd_ws;

static size_t delta_bwd_ws_size(int NT, int C, int K, int V) {
    size_t KV = (size_t)(K > V ? K : V);
    size_t per_chunk = (size_t)K * V + (size_t)C * C + (size_t)C * K + 2 * (size_t)C * V;
    return (size_t)NT * per_chunk + (size_t)C * (6 * K + 7 * V + KV) + 7 * (size_t)C +
           5 * (size_t)C * C + 2 * (size_t)K * V;
}

static void delta_bwd_ws_carve(delta_bwd_ws *w, real *base, int NT, int C, int K, int V) {
    size_t KV = (size_t)(K > V ? K : V);
    w->Sc = delta_take(&base, (size_t)NT * K * V);
    w->Tc = delta_take(&base, (size_t)NT * C * C);
    w->Wc = delta_take(&base, (size_t)NT * C * K);
    w->Uc = delta_take(&base, (size_t)NT * C * V);
    w->Vc = delta_take(&base, (size_t)NT * C * V);
    w->q = delta_take(&base, (size_t)C * K);
    w->k = delta_take(&base, (size_t)C * K);
    w->v = delta_take(&base, (size_t)C * V);
    w->dO = delta_take(&base, (size_t)C * V);
    w->g = delta_take(&base, C);
    w->beta = delta_take(&base, C);
    w->gam = delta_take(&base, C);
    w->dGd = delta_take(&base, C);
    w->y = delta_take(&base, C);
    w->dbeta = delta_take(&base, C);
    w->dg = delta_take(&base, C);
    w->Gam = delta_take(&base, (size_t)C * C);
    w->KK = delta_take(&base, (size_t)C * C);
    w->QK = delta_take(&base, (size_t)C * C);
    w->Lm = delta_take(&base, (size_t)C * C);
    w->dA = delta_take(&base, (size_t)C * C);
    w->dq = delta_take(&base, (size_t)C * K);
    w->dk = delta_take(&base, (size_t)C * K);
    w->dW = delta_take(&base, (size_t)C * K);
    w->dKbg = delta_take(&base, (size_t)C * K);
    w->dv = delta_take(&base, (size_t)C * V);
    w->dVn = delta_take(&base, (size_t)C * V);
    w->dVb = delta_take(&base, (size_t)C * V);
    w->dOg = delta_take(&base, (size_t)C * V);
    w->KdS = delta_take(&base, (size_t)C * V);
    w->tmp = delta_take(&base, (size_t)C * KV);
    w->dS = delta_take(&base, (size_t)K * V);
    w->dSp = delta_take(&base, (size_t)K * V);
}

static real delta_dot(const real *a, const real *b, int n) {
    real acc = 0;
    for (int i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

/* Step 4 of delta_bwd_chunk, the WY part (mixers with the delta term): dW = -dVn S^T, dU = dVn;
 * dKbg = T^T dW, dVb = T^T dU; adds to dk and the gate terms (dGd, the pair terms in QK),
 * writes dv and dbeta. */
static void delta_bwd_wy(int n, int C, int K, int V, const real *S, const real *Tm, const real *W,
                         const real *U, delta_bwd_ws *w) {
    const real *k = w->k, *v = w->v, *beta = w->beta, *gam = w->gam, *Gam = w->Gam;
    real *dGd = w->dGd;
    R(gdn_gemm)(0, 1, n, K, V, -1, w->dVn, V, S, V, 0, w->dW, K);
    R(gdn_gemm)(1, 0, n, K, n, 1, Tm, C, w->dW, K, 0, w->dKbg, K);
    R(gdn_gemm)(1, 0, n, V, n, 1, Tm, C, w->dVn, V, 0, w->dVb, V);
    for (int r = 0; r < n; r++) {
        const real *kr = k + (size_t)r * K;
        real kd = delta_dot(w->dKbg + (size_t)r * K, kr, K);
        w->dbeta[r] = gam[r] * kd + delta_dot(w->dVb + (size_t)r * V, v + (size_t)r * V, V);
        dGd[r] += beta[r] * gam[r] * kd;
        real bg = beta[r] * gam[r];
        for (int i = 0; i < K; i++) w->dk[(size_t)r * K + i] += bg * w->dKbg[(size_t)r * K + i];
        for (int c = 0; c < V; c++) w->dv[(size_t)r * V + c] = beta[r] * w->dVb[(size_t)r * V + c];
    }
    /* dA = strict_lower(-T^T dT T^T) with dT = dW Kbg^T + dU Vb^T. Since W = T Kbg and U = T Vb,
     * T^T dT T^T = dKbg W^T + dVb U^T: two products instead of four. */
    R(gdn_gemm)(0, 1, n, n, K, -1, w->dKbg, K, W, K, 0, w->dA, C);
    R(gdn_gemm)(0, 1, n, n, V, -1, w->dVb, V, U, V, 1, w->dA, C);
    /* A_ij = beta_i KK_ij Gam_ij (i > j). In place: dA -> M = dA o (beta 1^T) o Gam, made
     * symmetric (M + M^T) for dK; the gate terms F = M o KK go into QK, which becomes the
     * matrix X of pair terms (X_ij adds to dG_i, subtracts from dG_j, i > j). */
    for (int i = 0; i < n; i++) {
        real *dAi = w->dA + (size_t)i * C, *Xi = w->QK + (size_t)i * C;
        const real *KKi = w->KK + (size_t)i * C, *Gi = Gam + (size_t)i * C;
        const real *Ei = w->Lm + (size_t)i * C;
        real db = 0;
        for (int j = 0; j < i; j++) {
            real t = dAi[j] * Gi[j];
            db += t * KKi[j];
            dAi[j] = beta[i] * t;
            /* E_ij = D_ij QK_ij (output, intra) and F_ij = M_ij KK_ij (A). */
            Xi[j] = Ei[j] * Xi[j] + dAi[j] * KKi[j];
        }
        w->dbeta[i] += db;
        for (int j = i; j < n; j++) dAi[j] = 0;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) w->dA[(size_t)j * C + i] = w->dA[(size_t)i * C + j];
    R(gdn_gemm)(0, 0, n, K, n, 1, w->dA, C, k, K, 1, w->dk, K);
}

/* One chunk of the reverse walk (docs/design.md section 3.3). On entry w->dS is dL/dS leaving the chunk and
 * w->q, k, v, dO, g, beta hold its gathered rows; S, Tm, W, U, Vn are the chunk's recomputed
 * forward quantities. Writes w->dq, dk, dv, dg, dbeta and w->dSp = dL/dS entering.
 * Without decay (g not read) the gates are 1 and dg = 0; without the delta term Tm, W, U are
 * not read, Vn = V, dv = dVn and dbeta = 0: the WY part (step 4's products) drops out. */
static void delta_bwd_chunk(int n, int C, int K, int V, real scale, int decay, int delta,
                            const real *S, const real *Tm, const real *W, const real *U,
                            const real *Vn, delta_bwd_ws *w) {
    const real *q = w->q, *k = w->k, *dO = w->dO;
    real *Gam = w->Gam, *gam = w->gam, *dS = w->dS, *dSp = w->dSp, *dGd = w->dGd;
    delta_gates(n, C, decay ? w->g : NULL, gam, Gam);
    const real *rr = Gam + (size_t)(n - 1) * C; /* r_j = gam_last / gam_j */
    const real gl = gam[n - 1];

    R(gdn_gemm)(0, 1, n, n, K, 1, q, K, k, K, 0, w->QK, C);
    if (delta) R(gdn_gemm)(0, 1, n, n, K, 1, k, K, k, K, 0, w->KK, C);
    /* Lm = scale (Q K^T o Gam), lower triangle including the diagonal. */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            w->Lm[(size_t)i * C + j] = scale * w->QK[(size_t)i * C + j] * Gam[(size_t)i * C + j];

    /* 1. dVn = Lm^T dO + diag(r) K dS. */
    R(gdn_gemm)(0, 0, n, V, K, 1, k, K, dS, V, 0, w->KdS, V);
    R(gdn_gemm)(1, 0, n, V, n, 1, w->Lm, C, dO, V, 0, w->dVn, V);
    for (int j = 0; j < n; j++)
        for (int c = 0; c < V; c++) w->dVn[(size_t)j * V + c] += rr[j] * w->KdS[(size_t)j * V + c];

    /* 2. dS entering = gam_last dS + Q^T diag(scale gam) dO - W^T dVn. */
    for (int r = 0; r < n; r++)
        for (int c = 0; c < V; c++)
            w->dOg[(size_t)r * V + c] = scale * gam[r] * dO[(size_t)r * V + c];
    for (int i = 0; i < K * V; i++) dSp[i] = gl * dS[i];
    R(gdn_gemm)(1, 0, K, V, n, 1, q, K, w->dOg, V, 1, dSp, V);
    if (delta) R(gdn_gemm)(1, 0, K, V, n, -1, W, K, w->dVn, V, 1, dSp, V);

    /* 3. D = scale (dO Vn^T) o Gam (lower incl. diagonal), kept in Lm;
     *    dQ = diag(scale gam) dO S^T + D K;  dK = diag(r) Vn dS^T + D^T Q. */
    R(gdn_gemm)(0, 1, n, n, V, scale, dO, V, Vn, V, 0, w->Lm, C);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) w->Lm[(size_t)i * C + j] *= Gam[(size_t)i * C + j];
    R(gdn_gemm)(0, 1, n, K, V, 1, w->dOg, V, S, V, 0, w->dq, K);
    for (int i = 0; i < n; i++)
        dGd[i] = decay ? delta_dot(w->dq + (size_t)i * K, q + (size_t)i * K, K) : 0;
    R(gdn_gemm)(0, 0, n, K, n, 1, w->Lm, C, k, K, 1, w->dq, K);
    R(gdn_gemm)(0, 1, n, K, V, 1, Vn, V, dS, V, 0, w->dk, K);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < K; i++) w->dk[(size_t)j * K + i] *= rr[j];
    R(gdn_gemm)(1, 0, n, K, n, 1, w->Lm, C, q, K, 1, w->dk, K);

    if (!delta) {
        /* 4'. Vn = V: dv = dVn, no beta; the gate's pair terms are the intra ones, E = D o QK. */
        memcpy(w->dv, w->dVn, sizeof(real) * n * V);
        for (int r = 0; r < n; r++) w->dbeta[r] = 0;
        if (decay)
            for (int i = 0; i < n; i++)
                for (int j = 0; j < i; j++) w->QK[(size_t)i * C + j] *= w->Lm[(size_t)i * C + j];
    } else {
        delta_bwd_wy(n, C, K, V, S, Tm, W, U, w);
    }

    if (!decay) {
        for (int t = 0; t < n; t++) w->dg[t] = 0;
        return;
    }
    /* 5. Gate. State: S' = gam_last S + sum_j r_j k_j Vn_j^T gives gam_last <S, dS> on the last
     * row and the pair terms d_j r_j in row n-1 of X, d_j = (K dS)_j . Vn_j. */
    dGd[n - 1] += gl * delta_dot(S, dS, K * V);
    for (int j = 0; j < n - 1; j++)
        w->QK[(size_t)(n - 1) * C + j] +=
            rr[j] * delta_dot(w->KdS + (size_t)j * V, Vn + (size_t)j * V, V);
    /* dg_t = sum_{s >= t} dG_s. A pair term X_ij (i > j) survives this reverse cumsum only for
     * j < t <= i, so dg_t = sum_{i >= t} dGd_i + sum_{i >= t, j < t} X_ij, summed directly
     * (no cancellation between the +X and -X halves). y_j = sum_{i >= t} X_ij. */
    real acc = 0;
    for (int j = 0; j < n; j++) w->y[j] = 0;
    for (int t = n - 1; t >= 0; t--) {
        const real *Xt = w->QK + (size_t)t * C;
        acc += dGd[t];
        real pair = 0;
        for (int j = 0; j < t; j++) {
            w->y[j] += Xt[j];
            pair += w->y[j];
        }
        w->dg[t] = acc + pair;
    }
}

static void delta_bwd_pair(const gdn_delta_shape *s, const gdn_mixer_info *mx, int b, int h,
                           const real *q, const real *k, const real *v, const real *g,
                           const real *beta, real scale, const real *h0, const real *d_o,
                           const real *dht, real *dq, real *dk, real *dv, real *dg, real *dbeta,
                           real *dh0, delta_bwd_ws *w) {
    const int C = s->chunk, K = s->K, V = s->V;
    const int decay = mx->has_decay, delta = mx->has_delta;
    int NT = 0; /* chunks of this row; their first rows in w->t0 */
    const size_t KV = (size_t)K * V, st = ((size_t)b * s->H + h) * KV;

    /* Recompute the forward state pass, keeping each chunk's entering state, T, W, U and Vn
     * (only the state without the delta term: there Vn = V is gathered again below). */
    if (h0)
        memcpy(w->dSp, h0 + st, sizeof(real) * KV);
    else
        memset(w->dSp, 0, sizeof(real) * KV);
    real *S = w->dSp; /* running state; dSp is free until the reverse walk */
    for (int t0 = 0; t0 < s->T; t0 += delta_chunk_len(s, b, t0)) w->t0[NT++] = t0;
    w->t0[NT] = s->T;
    for (int c = 0; c < NT; c++) {
        int t0 = w->t0[c], n = w->t0[c + 1] - t0;
        if (delta_doc_reset(s, b, t0)) memset(S, 0, sizeof(real) * KV);
        real *Tm = w->Tc + (size_t)c * C * C, *W = w->Wc + (size_t)c * C * K;
        real *U = w->Uc + (size_t)c * C * V, *Vn = w->Vc + (size_t)c * C * V;
        memcpy(w->Sc + (size_t)c * KV, S, sizeof(real) * KV);
        delta_gather(w->k, k, s, b, h, t0, n, K);
        delta_gather(w->v, v, s, b, h, t0, n, V);
        if (decay) delta_gather(w->g, g, s, b, h, t0, n, 1);
        delta_gates(n, C, decay ? w->g : NULL, w->gam, w->Gam);
        if (delta) {
            delta_gather(w->beta, beta, s, b, h, t0, n, 1);
            delta_wy(n, C, K, V, w->k, w->v, w->beta, w->gam, w->Gam, w->KK, Tm, W, U, w->tmp);
            delta_vnew(n, K, V, U, W, S, Vn);
        }
        delta_state_step(n, C, K, V, w->k, w->gam, w->Gam, delta ? Vn : w->v, S, w->tmp);
    }

    /* Reverse walk, carrying dS = dL/dS leaving the current chunk. */
    if (dht)
        memcpy(w->dS, dht + st, sizeof(real) * KV);
    else
        memset(w->dS, 0, sizeof(real) * KV);
    for (int c = NT - 1; c >= 0; c--) {
        int t0 = w->t0[c], n = w->t0[c + 1] - t0;
        delta_gather(w->q, q, s, b, h, t0, n, K);
        delta_gather(w->k, k, s, b, h, t0, n, K);
        delta_gather(w->v, v, s, b, h, t0, n, V);
        delta_gather(w->dO, d_o, s, b, h, t0, n, V);
        if (decay) delta_gather(w->g, g, s, b, h, t0, n, 1);
        if (delta) delta_gather(w->beta, beta, s, b, h, t0, n, 1);
        delta_bwd_chunk(n, C, K, V, scale, decay, delta, w->Sc + (size_t)c * KV,
                        w->Tc + (size_t)c * C * C, w->Wc + (size_t)c * C * K,
                        w->Uc + (size_t)c * C * V, delta ? w->Vc + (size_t)c * C * V : w->v, w);
        delta_scatter(dq, w->dq, s, b, h, t0, n, K);
        delta_scatter(dk, w->dk, s, b, h, t0, n, K);
        delta_scatter(dv, w->dv, s, b, h, t0, n, V);
        if (dg) delta_scatter(dg, w->dg, s, b, h, t0, n, 1);
        if (dbeta) delta_scatter(dbeta, w->dbeta, s, b, h, t0, n, 1);
        real *swap = w->dS;
        w->dS = w->dSp;
        w->dSp = swap;
        /* a document starts here: nothing before it reached the state */
        if (delta_doc_reset(s, b, t0)) memset(w->dS, 0, sizeof(real) * KV);
    }
    if (dh0) memcpy(dh0 + st, w->dS, sizeof(real) * KV);
}

void R(gdn_delta_bwd)(const gdn_delta_shape *s, const real *q, const real *k, const real *v,
                      const real *g, const real *beta, real scale, const real *h0, const real *d_o,
                      const real *dht, real *dq, real *dk, real *dv, real *dg, real *dbeta,
                      real *dh0) {
    const gdn_mixer_info *mx = delta_check_shape(s, "gdn_delta_bwd");
    const int npairs = s->B * s->H, NT = delta_max_chunks(s);
    const int blas_threads = delta_blas_single_begin();
#pragma omp parallel
    {
        real *block = GDN_MALLOC(sizeof(real) * delta_bwd_ws_size(NT, s->chunk, s->K, s->V));
        int *t0 = GDN_MALLOC(sizeof(int) * ((size_t)NT + 1));
        delta_bwd_ws w;
#pragma omp for schedule(dynamic, 1)
        for (int p = 0; p < npairs; p++) {
            /* Carve per pair: the reverse walk swaps the dS / dSp pointers. */
            delta_bwd_ws_carve(&w, block, NT, s->chunk, s->K, s->V);
            w.t0 = t0;
            delta_bwd_pair(s, mx, p / s->H, p % s->H, q, k, v, g, beta, scale, h0, d_o, dht, dq,
                           dk, dv, dg, dbeta, dh0, &w);
        }
        free(t0);
        free(block);
    }
    delta_blas_single_end(blas_threads);
}
