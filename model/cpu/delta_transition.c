/* A segment of the gated delta rule as an affine map of its entering state (DESIGN 4.5), for
 * sequence parallelism by all-gather: per (batch, head),
 *   forward:  ht  = M h0 + H,        M = prod over chunks (in order) of
 *                                        M_c = gamma_C I - K^T diag(gamma_C / gamma) W,
 *   backward: dh0 = M^T dht + E,     E = dh0 when dht = 0.
 * Chunk quantities (gates, T, W, U) are built as in delta_rule.c (DESIGN 4.2); every product
 * runs over the n rows of a chunk, so a partial last chunk needs no masking, and decays enter
 * only as exp(G_i - G_j) with i >= j. */
#include <stdlib.h>
#include <string.h>

#include "model/check.h"
#include "model/cpu/ops_cpu.h"
#include "model/real.h"

#if GDN_REAL_BITS == 64
#define TR_EXP_FLOOR (-700.0)
#else
#define TR_EXP_FLOOR (-80.0f)
#endif
static inline real tr_exp(real x) { return x < TR_EXP_FLOOR ? (real)0 : REXP(x); }

static void tr_check_shape(const gdn_delta_shape *s, const char *who) {
    if (s->B < 1 || s->H < 1 || s->K < 1 || s->V < 1 || s->T < 0)
        GDN_DIE("%s: bad shape B=%d T=%d H=%d K=%d V=%d (need B,H,K,V >= 1 and T >= 0)", who, s->B,
                s->T, s->H, s->K, s->V);
    if (s->chunk != 16 && s->chunk != 32 && s->chunk != 64)
        GDN_DIE("%s: chunk size %d is not supported; use 16, 32 or 64", who, s->chunk);
}

/* dst[r, :] = x[b, t0 + r, h, :] for r < n; x is [B,T,H,D], dst is [n,D]. */
static void tr_gather(real *dst, const real *x, const gdn_delta_shape *s, int b, int h, int t0,
                      int n, int D) {
    for (int r = 0; r < n; r++)
        memcpy(dst + (size_t)r * D, x + (((size_t)b * s->T + t0 + r) * s->H + h) * D,
               sizeof(real) * D);
}

/* Per-thread scratch for one chunk, plus the running K x K and K x V matrices. */
typedef struct {
    real *q, *k, *x;          /* [C,K] [C,K] [C,max(K,V)]: v (forward) or dO (adjoint) rows */
    real *g, *beta, *gam;     /* [C] */
    real *Gam, *KK, *Tm, *L;  /* [C,C] */
    real *W, *U, *P, *Kr;     /* [C,K] [C,V] [C,max(K,V)] [C,K] */
    real *A, *B2;             /* [K,max(K,V)] running M (or dS), [K,max(K,V)] H (or dS') */
} tr_ws;

static real *tr_take(real **cursor, size_t n) {
    real *p = *cursor;
    *cursor += n;
    return p;
}

static size_t tr_ws_size(int C, int K, int V) {
    size_t KV = (size_t)(K > V ? K : V);
    return (size_t)C * (4 * (size_t)K + 2 * KV + V) + 3 * (size_t)C + 4 * (size_t)C * C +
           2 * (size_t)K * KV;
}

static void tr_ws_carve(tr_ws *w, real *base, int C, int K, int V) {
    size_t KV = (size_t)(K > V ? K : V);
    w->q = tr_take(&base, (size_t)C * K);
    w->k = tr_take(&base, (size_t)C * K);
    w->x = tr_take(&base, (size_t)C * KV);
    w->g = tr_take(&base, C);
    w->beta = tr_take(&base, C);
    w->gam = tr_take(&base, C);
    w->Gam = tr_take(&base, (size_t)C * C);
    w->KK = tr_take(&base, (size_t)C * C);
    w->Tm = tr_take(&base, (size_t)C * C);
    w->L = tr_take(&base, (size_t)C * C);
    w->W = tr_take(&base, (size_t)C * K);
    w->U = tr_take(&base, (size_t)C * V);
    w->P = tr_take(&base, (size_t)C * KV);
    w->Kr = tr_take(&base, (size_t)C * K);
    w->A = tr_take(&base, (size_t)K * KV);
    w->B2 = tr_take(&base, (size_t)K * KV);
}

/* Gates of a chunk: gam = exp(G), Gam_ij = exp(G_i - G_j) for i >= j (0 above), G the inclusive
 * cumsum of g summed in double (under strong decay it reaches hundreds inside a chunk). */
static void tr_gates(int n, int C, const real *g, real *gam, real *Gam) {
    double G[64];
    double acc = 0;
    for (int i = 0; i < n; i++) {
        acc += g[i];
        G[i] = acc;
        gam[i] = tr_exp((real)acc);
    }
    for (int i = 0; i < n; i++) {
        real *row = Gam + (size_t)i * C;
        for (int j = 0; j <= i; j++) row[j] = tr_exp((real)(G[i] - G[j]));
        for (int j = i + 1; j < n; j++) row[j] = 0;
    }
}

/* W [n,K] = T diag(beta gam) K with T = (I + A)^-1, A = strict_lower(diag(beta) K K^T o Gam)
 * (forward substitution), and Kr [n,K] = diag(r) K with r_j = gam_last / gam_j (row n-1 of
 * Gam). With v != NULL also U [n,V] = T diag(beta) V. tmp: n*max(K,V). */
static void tr_wy(int n, int C, int K, int V, const real *k, const real *v, const real *beta,
                  const real *gam, const real *Gam, real *KK, real *Tm, real *W, real *U, real *Kr,
                  real *tmp) {
    R(gdn_gemm)(0, 1, n, n, K, 1, k, K, k, K, 0, KK, C);
    for (int i = 0; i < n; i++) {
        real *Ti = Tm + (size_t)i * C;
        for (int c = 0; c < n; c++) Ti[c] = 0;
        for (int j = 0; j < i; j++) {
            real a = beta[i] * KK[(size_t)i * C + j] * Gam[(size_t)i * C + j];
            const real *Tj = Tm + (size_t)j * C;
            for (int c = 0; c <= j; c++) Ti[c] -= a * Tj[c];
        }
        Ti[i] = 1;
    }
    const real *rr = Gam + (size_t)(n - 1) * C;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < K; i++) {
            tmp[(size_t)r * K + i] = beta[r] * gam[r] * k[(size_t)r * K + i];
            Kr[(size_t)r * K + i] = rr[r] * k[(size_t)r * K + i];
        }
    R(gdn_gemm)(0, 0, n, K, n, 1, Tm, C, tmp, K, 0, W, K);
    if (!v) return;
    for (int r = 0; r < n; r++)
        for (int j = 0; j < V; j++) tmp[(size_t)r * V + j] = beta[r] * v[(size_t)r * V + j];
    R(gdn_gemm)(0, 0, n, V, n, 1, Tm, C, tmp, V, 0, U, V);
}

/* Gathers a chunk's k, g, beta and computes its gates, W, Kr (and U when v_rows is set). */
static void tr_chunk(const gdn_delta_shape *s, int b, int h, int t0, int n, const real *k,
                     const real *g, const real *beta, const real *v_rows, tr_ws *w) {
    const int C = s->chunk, K = s->K, V = s->V;
    tr_gather(w->k, k, s, b, h, t0, n, K);
    tr_gather(w->g, g, s, b, h, t0, n, 1);
    tr_gather(w->beta, beta, s, b, h, t0, n, 1);
    tr_gates(n, C, w->g, w->gam, w->Gam);
    tr_wy(n, C, K, V, w->k, v_rows, w->beta, w->gam, w->Gam, w->KK, w->Tm, w->W, w->U, w->Kr, w->P);
}

/* Each OpenMP thread runs small per-chunk products: keep BLAS single-threaded inside them (as
 * delta_rule.c does) and restore the caller's setting afterwards. */
static int tr_blas_single_begin(void) {
    int n = openblas_get_num_threads();
    if (n != 1) openblas_set_num_threads(1);
    return n;
}

static void tr_blas_single_end(int n) {
    if (n != 1) openblas_set_num_threads(n);
}

static void tr_fwd_pair(const gdn_delta_shape *s, int b, int h, const real *k, const real *v,
                        const real *g, const real *beta, real *M, real *H, tr_ws *w) {
    const int C = s->chunk, K = s->K, V = s->V;
    real *Mr = w->A, *Hr = w->B2; /* running M [K,K] and H [K,V] */
    memset(Mr, 0, sizeof(real) * K * K);
    for (int i = 0; i < K; i++) Mr[(size_t)i * K + i] = 1;
    if (H) memset(Hr, 0, sizeof(real) * K * V);
    for (int t0 = 0; t0 < s->T; t0 += C) {
        int n = s->T - t0 < C ? s->T - t0 : C;
        if (H) tr_gather(w->x, v, s, b, h, t0, n, V);
        tr_chunk(s, b, h, t0, n, k, g, beta, H ? w->x : NULL, w);
        const real gl = w->gam[n - 1];
        /* M <- gam_last M - Kr^T (W M) */
        R(gdn_gemm)(0, 0, n, K, K, 1, w->W, K, Mr, K, 0, w->P, K);
        R(gdn_gemm)(1, 0, K, K, n, -1, w->Kr, K, w->P, K, gl, Mr, K);
        if (H) { /* H <- gam_last H + Kr^T (U - W H): the ordinary state step from h0 = 0 */
            memcpy(w->P, w->U, sizeof(real) * n * V);
            R(gdn_gemm)(0, 0, n, V, K, -1, w->W, K, Hr, V, 1, w->P, V);
            R(gdn_gemm)(1, 0, K, V, n, 1, w->Kr, K, w->P, V, gl, Hr, V);
        }
    }
    const size_t pair = (size_t)b * s->H + h;
    memcpy(M + pair * K * K, Mr, sizeof(real) * K * K);
    if (H) memcpy(H + pair * K * V, Hr, sizeof(real) * K * V);
}

void R(gdn_delta_transition)(const gdn_delta_shape *s, const real *k, const real *v,
                             const real *g, const real *beta, real *M, real *H) {
    tr_check_shape(s, "gdn_delta_transition");
    const int npairs = s->B * s->H, blas_threads = tr_blas_single_begin();
#pragma omp parallel
    {
        real *block = GDN_MALLOC(sizeof(real) * tr_ws_size(s->chunk, s->K, s->V));
        tr_ws w;
        tr_ws_carve(&w, block, s->chunk, s->K, s->V);
#pragma omp for schedule(dynamic, 1)
        for (int p = 0; p < npairs; p++) tr_fwd_pair(s, p / s->H, p % s->H, k, v, g, beta, M, H, &w);
        free(block);
    }
    tr_blas_single_end(blas_threads);
}

/* The reverse walk of DESIGN 4.3 restricted to the state gradient, from dS = 0 after the last
 * chunk: dVn = Lm^T dO + diag(r) K dS; dS_entering = gam_last dS + Q^T diag(scale gam) dO
 * - W^T dVn, with Lm = scale (Q K^T o Gam) on and below the diagonal. */
static void tr_adj_pair(const gdn_delta_shape *s, int b, int h, const real *q, const real *k,
                        const real *g, const real *beta, real scale, const real *d_o, real *E,
                        tr_ws *w) {
    const int C = s->chunk, K = s->K, V = s->V, NT = (s->T + C - 1) / C;
    real *dS = w->A, *dVn = w->U, *dOg = w->P;
    memset(dS, 0, sizeof(real) * K * V);
    for (int c = NT - 1; c >= 0; c--) {
        int t0 = c * C, n = s->T - t0 < C ? s->T - t0 : C;
        tr_chunk(s, b, h, t0, n, k, g, beta, NULL, w);
        tr_gather(w->q, q, s, b, h, t0, n, K);
        tr_gather(w->x, d_o, s, b, h, t0, n, V);
        const real gl = w->gam[n - 1];
        R(gdn_gemm)(0, 1, n, n, K, scale, w->q, K, w->k, K, 0, w->L, C);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) w->L[(size_t)i * C + j] *= w->Gam[(size_t)i * C + j];
        /* dVn = Lm^T dO + Kr dS (Kr = diag(r) K) */
        R(gdn_gemm)(1, 0, n, V, n, 1, w->L, C, w->x, V, 0, dVn, V);
        R(gdn_gemm)(0, 0, n, V, K, 1, w->Kr, K, dS, V, 1, dVn, V);
        for (int r = 0; r < n; r++)
            for (int j = 0; j < V; j++)
                dOg[(size_t)r * V + j] = scale * w->gam[r] * w->x[(size_t)r * V + j];
        /* dS <- gam_last dS + Q^T dOg - W^T dVn (in place: dVn already read dS) */
        R(gdn_gemm)(1, 0, K, V, n, 1, w->q, K, dOg, V, gl, dS, V);
        R(gdn_gemm)(1, 0, K, V, n, -1, w->W, K, dVn, V, 1, dS, V);
    }
    memcpy(E + ((size_t)b * s->H + h) * K * V, dS, sizeof(real) * K * V);
}

void R(gdn_delta_transition_adjoint)(const gdn_delta_shape *s, const real *q, const real *k,
                                     const real *g, const real *beta, real scale, const real *d_o,
                                     real *E) {
    tr_check_shape(s, "gdn_delta_transition_adjoint");
    const int npairs = s->B * s->H, blas_threads = tr_blas_single_begin();
#pragma omp parallel
    {
        real *block = GDN_MALLOC(sizeof(real) * tr_ws_size(s->chunk, s->K, s->V));
        tr_ws w;
        tr_ws_carve(&w, block, s->chunk, s->K, s->V);
#pragma omp for schedule(dynamic, 1)
        for (int p = 0; p < npairs; p++)
            tr_adj_pair(s, p / s->H, p % s->H, q, k, g, beta, scale, d_o, E, &w);
        free(block);
    }
    tr_blas_single_end(blas_threads);
}
