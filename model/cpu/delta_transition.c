/* A segment of the gated delta rule as an affine map of its entering state (docs/design.md section 3.4), for
 * sequence parallelism by all-gather: per (batch, head),
 *   forward:  ht  = M h0 + H,        M = prod over chunks (in order) of
 *                                        M_c = gamma_C I - K^T diag(gamma_C / gamma) W,
 *   backward: dh0 = M^T dht + E,     E = dh0 when dht = 0.
 * Chunk quantities (gates, T, W, U) are the ones delta_rule.c builds (delta_chunk.h). Mixers
 * without the delta term have W = 0, so M_c = gamma_C I and the W terms are skipped; mixers
 * without decay have gamma = 1 (s->variant, model/mixer.h). */
#include <stdlib.h>
#include <string.h>

#include "model/check.h"
#include "model/cpu/ops_cpu.h"
#include "model/real.h"
#include "model/cpu/delta_chunk.h"

/* Per-thread scratch for one chunk, plus the running K x K and K x V matrices. */
typedef struct {
    real *q, *k, *x;          /* [C,K] [C,K] [C,max(K,V)]: v (forward) or dO (adjoint) rows */
    real *g, *beta, *gam;     /* [C] */
    real *Gam, *KK, *Tm, *L;  /* [C,C] */
    real *W, *U, *P, *Kr;     /* [C,K] [C,V] [C,max(K,V)] [C,K] */
    real *A, *B2;             /* [K,max(K,V)] running M (or dS), [K,max(K,V)] H (or dS') */
} tr_ws;

static size_t tr_ws_size(int C, int K, int V) {
    size_t KV = (size_t)(K > V ? K : V);
    return (size_t)C * (4 * (size_t)K + 2 * KV + V) + 3 * (size_t)C + 4 * (size_t)C * C +
           2 * (size_t)K * KV;
}

static void tr_ws_carve(tr_ws *w, real *base, int C, int K, int V) {
    size_t KV = (size_t)(K > V ? K : V);
    w->q = delta_take(&base, (size_t)C * K);
    w->k = delta_take(&base, (size_t)C * K);
    w->x = delta_take(&base, (size_t)C * KV);
    w->g = delta_take(&base, C);
    w->beta = delta_take(&base, C);
    w->gam = delta_take(&base, C);
    w->Gam = delta_take(&base, (size_t)C * C);
    w->KK = delta_take(&base, (size_t)C * C);
    w->Tm = delta_take(&base, (size_t)C * C);
    w->L = delta_take(&base, (size_t)C * C);
    w->W = delta_take(&base, (size_t)C * K);
    w->U = delta_take(&base, (size_t)C * V);
    w->P = delta_take(&base, (size_t)C * KV);
    w->Kr = delta_take(&base, (size_t)C * K);
    w->A = delta_take(&base, (size_t)K * KV);
    w->B2 = delta_take(&base, (size_t)K * KV);
}

/* Gathers a chunk's k, g, beta and computes its gates, W (and U when v_rows is set) and
 * Kr [n,K] = diag(r) K with r_j = gam_last / gam_j (row n-1 of Gam). Without decay g is not
 * read; without the delta term neither is beta, and W, U are not computed. */
static void tr_chunk(const gdn_delta_shape *s, const gdn_mixer_info *mx, int b, int h, int t0,
                     int n, const real *k, const real *g, const real *beta, const real *v_rows,
                     tr_ws *w) {
    const int C = s->chunk, K = s->K, V = s->V;
    delta_gather(w->k, k, s, b, h, t0, n, K);
    if (mx->has_decay) delta_gather(w->g, g, s, b, h, t0, n, 1);
    delta_gates(n, C, mx->has_decay ? w->g : NULL, w->gam, w->Gam);
    if (mx->has_delta) {
        delta_gather(w->beta, beta, s, b, h, t0, n, 1);
        delta_wy(n, C, K, V, w->k, v_rows, w->beta, w->gam, w->Gam, w->KK, w->Tm, w->W, w->U,
                 w->P);
    }
    const real *rr = w->Gam + (size_t)(n - 1) * C;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < K; i++) w->Kr[(size_t)r * K + i] = rr[r] * w->k[(size_t)r * K + i];
}

/* The arguments of one public call; each pair function reads the ones it needs. */
typedef struct {
    const gdn_mixer_info *mx;
    const real *q, *k, *v, *g, *beta, *d_o;
    real scale;
    real *M, *H, *E;
} tr_args;

typedef void (*tr_pair_fn)(const gdn_delta_shape *s, int b, int h, const tr_args *a, tr_ws *w);

/* Runs fn on every (batch, head) pair: OpenMP over pairs, one scratch block per thread, BLAS
 * single-threaded inside (see delta_blas_single_begin). */
static void tr_for_pairs(const gdn_delta_shape *s, const char *who, tr_pair_fn fn, tr_args *a) {
    a->mx = delta_check_shape(s, who);
    const int npairs = s->B * s->H, blas_threads = delta_blas_single_begin();
#pragma omp parallel
    {
        real *block = GDN_MALLOC(sizeof(real) * tr_ws_size(s->chunk, s->K, s->V));
        tr_ws w;
        tr_ws_carve(&w, block, s->chunk, s->K, s->V);
#pragma omp for schedule(dynamic, 1)
        for (int p = 0; p < npairs; p++) fn(s, p / s->H, p % s->H, a, &w);
        free(block);
    }
    delta_blas_single_end(blas_threads);
}

static void tr_fwd_pair(const gdn_delta_shape *s, int b, int h, const tr_args *a, tr_ws *w) {
    const int K = s->K, V = s->V;
    real *Mr = w->A, *Hr = w->B2, *H = a->H; /* running M [K,K] and H [K,V] */
    memset(Mr, 0, sizeof(real) * K * K);
    for (int i = 0; i < K; i++) Mr[(size_t)i * K + i] = 1;
    if (H) memset(Hr, 0, sizeof(real) * K * V);
    for (int t0 = 0, n; t0 < s->T; t0 += n) {
        n = delta_chunk_len(s, b, t0);
        if (delta_doc_reset(s, b, t0)) { /* nothing before a document start reaches its end */
            memset(Mr, 0, sizeof(real) * K * K);
            if (H) memset(Hr, 0, sizeof(real) * K * V);
        }
        if (H) delta_gather(w->x, a->v, s, b, h, t0, n, V);
        tr_chunk(s, a->mx, b, h, t0, n, a->k, a->g, a->beta, H ? w->x : NULL, w);
        const real gl = w->gam[n - 1];
        if (!a->mx->has_delta) { /* W = 0: M <- gam_last M, H <- gam_last H + Kr^T V */
            for (int i = 0; i < K * K; i++) Mr[i] *= gl;
            if (H) R(gdn_gemm)(1, 0, K, V, n, 1, w->Kr, K, w->x, V, gl, Hr, V);
            continue;
        }
        /* M <- gam_last M - Kr^T (W M) */
        R(gdn_gemm)(0, 0, n, K, K, 1, w->W, K, Mr, K, 0, w->P, K);
        R(gdn_gemm)(1, 0, K, K, n, -1, w->Kr, K, w->P, K, gl, Mr, K);
        if (H) { /* H <- gam_last H + Kr^T (U - W H): the ordinary state step from h0 = 0 */
            delta_vnew(n, K, V, w->U, w->W, Hr, w->P);
            R(gdn_gemm)(1, 0, K, V, n, 1, w->Kr, K, w->P, V, gl, Hr, V);
        }
    }
    const size_t pair = (size_t)b * s->H + h;
    memcpy(a->M + pair * K * K, Mr, sizeof(real) * K * K);
    if (H) memcpy(H + pair * K * V, Hr, sizeof(real) * K * V);
}

void R(gdn_delta_transition)(const gdn_delta_shape *s, const real *k, const real *v,
                             const real *g, const real *beta, real *M, real *H) {
    tr_args a = {.k = k, .v = v, .g = g, .beta = beta, .M = M, .H = H};
    tr_for_pairs(s, "gdn_delta_transition", tr_fwd_pair, &a);
}

/* The reverse walk of docs/design.md section 3.3 restricted to the state gradient, from dS = 0 after the last
 * chunk: dVn = Lm^T dO + diag(r) K dS; dS_entering = gam_last dS + Q^T diag(scale gam) dO
 * - W^T dVn, with Lm = scale (Q K^T o Gam) on and below the diagonal. Without the delta term
 * W = 0, so dVn is not needed. */
static void tr_adj_pair(const gdn_delta_shape *s, int b, int h, const tr_args *a, tr_ws *w) {
    const int C = s->chunk, K = s->K, V = s->V;
    const real scale = a->scale;
    real *dS = w->A, *dVn = w->U, *dOg = w->P;
    memset(dS, 0, sizeof(real) * K * V);
    /* the chunks in reverse: the last one ends at T, each earlier one where the next begins */
    for (int end = s->T; end > 0;) {
        const int d = s->doc ? s->doc[(size_t)b * s->T + end - 1] : 0, from = d > 0 ? d : 0;
        const int t0 = from + (end - 1 - from) / C * C, n = end - t0;
        end = t0;
        const int delta = a->mx->has_delta;
        tr_chunk(s, a->mx, b, h, t0, n, a->k, a->g, a->beta, NULL, w);
        delta_gather(w->q, a->q, s, b, h, t0, n, K);
        delta_gather(w->x, a->d_o, s, b, h, t0, n, V);
        const real gl = w->gam[n - 1];
        if (delta) {
            delta_intra(n, C, K, scale, w->q, w->k, w->Gam, w->L);
            /* dVn = Lm^T dO + Kr dS (Kr = diag(r) K) */
            R(gdn_gemm)(1, 0, n, V, n, 1, w->L, C, w->x, V, 0, dVn, V);
            R(gdn_gemm)(0, 0, n, V, K, 1, w->Kr, K, dS, V, 1, dVn, V);
        }
        for (int r = 0; r < n; r++)
            for (int j = 0; j < V; j++)
                dOg[(size_t)r * V + j] = scale * w->gam[r] * w->x[(size_t)r * V + j];
        /* dS <- gam_last dS + Q^T dOg - W^T dVn (in place: dVn already read dS) */
        R(gdn_gemm)(1, 0, K, V, n, 1, w->q, K, dOg, V, gl, dS, V);
        if (delta) R(gdn_gemm)(1, 0, K, V, n, -1, w->W, K, dVn, V, 1, dS, V);
        if (delta_doc_reset(s, b, t0)) memset(dS, 0, sizeof(real) * K * V);
    }
    memcpy(a->E + ((size_t)b * s->H + h) * K * V, dS, sizeof(real) * K * V);
}

void R(gdn_delta_transition_adjoint)(const gdn_delta_shape *s, const real *q, const real *k,
                                     const real *g, const real *beta, real scale, const real *d_o,
                                     real *E) {
    tr_args a = {.q = q, .k = k, .g = g, .beta = beta, .d_o = d_o, .scale = scale, .E = E};
    tr_for_pairs(s, "gdn_delta_transition_adjoint", tr_adj_pair, &a);
}
