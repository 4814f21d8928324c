/* Per-chunk building blocks of the CPU gated delta rule (docs/design.md section 3.2), shared by delta_rule.c
 * (forward and backward) and delta_transition.c (the rule as an affine map of its state).
 * The other mixers of model/mixer.h are switches in the same code: without decay the gates are
 * 1 (delta_gates with g NULL); without the delta term the values written are V itself, i.e.
 * T = I, beta = 1, W = 0, U = Vn = V, so delta_wy / delta_vnew and every W term are skipped.
 * Private to model/cpu: include after model/real.h, model/check.h and model/cpu/ops_cpu.h.
 *
 * Rows of a chunk are r = 0..n-1 with n = chunk, or fewer for the last chunk of a sequence whose
 * length is not a multiple of the chunk or for the chunk before a document start (chunks restart
 * at each document): every product runs over n rows, so nothing needs masking. Decays enter only as exp(G_i - G_j) with i >= j (<= 1), never as exp(-G). */
#ifndef GDN_CPU_DELTA_CHUNK_H
#define GDN_CPU_DELTA_CHUNK_H

#include <string.h>

/* exp of a log-decay (<= 0), flushed to 0 below the normal range: products of subnormals are
 * slow on x86 and contribute below rounding. */
#if GDN_REAL_BITS == 64
#define DELTA_EXP_FLOOR (-700.0)
#else
#define DELTA_EXP_FLOOR (-80.0f)
#endif
static inline real delta_exp(real x) { return x < DELTA_EXP_FLOOR ? (real)0 : REXP(x); }

/* Bump allocator over one per-thread scratch block. */
static inline real *delta_take(real **cursor, size_t n) {
    real *p = *cursor;
    *cursor += n;
    return p;
}

/* Each OpenMP thread runs its own small per-chunk products, so BLAS must not start threads of its
 * own inside them: the pthread OpenBLAS threads any gemm above 64^3 flops, and nested in the
 * pair loop that oversubscribes the cores (measured 12x slower at K=V=128). The caller's BLAS
 * thread count is restored on return. */
static inline int delta_blas_single_begin(void) {
    int n = openblas_get_num_threads();
    if (n != 1) openblas_set_num_threads(1);
    return n;
}

static inline void delta_blas_single_end(int n) {
    if (n != 1) openblas_set_num_threads(n);
}

/* Validates the shape and returns its mixer's row (model/mixer.h): has_decay off means g is not
 * read (gates of 1), has_delta off means the chunk writes V itself (no T, W, U; beta not read). */
static inline const gdn_mixer_info *delta_check_shape(const gdn_delta_shape *s, const char *who) {
    const gdn_mixer_info *mx = gdn_mixer_get(s->variant);
    if (!mx || !mx->is_delta)
        GDN_DIE("%s: unknown mixer variant %d (use a delta-rule kind of model/mixer.h, 0..%d)",
                who, s->variant, GDN_MIXER_DELTA_COUNT - 1);
    if (mx->has_beta != mx->has_delta)
        GDN_DIE("%s: mixer '%s' has beta without the delta term (or the reverse), which the "
                "chunked kernels do not implement", who, mx->name);
    if (s->B < 1 || s->H < 1 || s->K < 1 || s->V < 1 || s->T < 0)
        GDN_DIE("%s: bad shape B=%d T=%d H=%d K=%d V=%d (need B,H,K,V >= 1 and T >= 0)", who, s->B,
                s->T, s->H, s->K, s->V);
    if (s->chunk != 16 && s->chunk != 32 && s->chunk != 64)
        GDN_DIE("%s: chunk size %d is not supported; use 16, 32 or 64", who, s->chunk);
    if (s->qk_heads != 0 && s->qk_heads != s->H)
        GDN_DIE("%s: qk_heads=%d is not supported on the CPU (q, k must have one head per value "
                "head: set qk_heads to 0 or H=%d)", who, s->qk_heads, s->H);
    return mx;
}

/* Rows n of the chunk starting at token t0: the chunk size, or what is left of the sequence. */
static inline int delta_chunk_rows(const gdn_delta_shape *s, int t0) {
    return s->T - t0 < s->chunk ? s->T - t0 : s->chunk;
}

/* Documents (s->doc, model/cpu/doc.h): the state is zero where row b starts a document at t. */
static inline int delta_doc_reset(const gdn_delta_shape *s, int b, int t) {
    return s->doc && s->doc[(size_t)b * s->T + t] == t;
}

/* Rows of the chunk of row b starting at t0: the chunk size, or what is left of the sequence, or
 * up to the next document start. A chunk therefore lies inside one document: it starts from a
 * zero state when t0 starts one, and no product inside it needs a mask. */
static inline int delta_chunk_len(const gdn_delta_shape *s, int b, int t0) {
    const int n = delta_chunk_rows(s, t0);
    if (s->doc)
        for (int r = 1; r < n; r++)
            if (delta_doc_reset(s, b, t0 + r)) return r;
    return n;
}

/* The most chunks any row is cut into (more than ceil(T / chunk) only with documents). */
static inline int delta_max_chunks(const gdn_delta_shape *s) {
    const int NT = (s->T + s->chunk - 1) / s->chunk;
    if (!s->doc) return NT;
    int most = 0;
    for (int b = 0; b < s->B; b++) {
        int c = 0;
        for (int t0 = 0; t0 < s->T; t0 += delta_chunk_len(s, b, t0)) c++;
        if (c > most) most = c;
    }
    return most;
}

/* dst[r, :] = x[b, t0 + r, h, :] for r < n; x is [B,T,H,D], dst is [n,D]. */
static inline void delta_gather(real *dst, const real *x, const gdn_delta_shape *s, int b, int h,
                                int t0, int n, int D) {
    for (int r = 0; r < n; r++)
        memcpy(dst + (size_t)r * D, x + (((size_t)b * s->T + t0 + r) * s->H + h) * D,
               sizeof(real) * D);
}

/* x[b, t0 + r, h, :] = src[r, :] for r < n. */
static inline void delta_scatter(real *x, const real *src, const gdn_delta_shape *s, int b, int h,
                                 int t0, int n, int D) {
    for (int r = 0; r < n; r++)
        memcpy(x + (((size_t)b * s->T + t0 + r) * s->H + h) * D, src + (size_t)r * D,
               sizeof(real) * D);
}

/* Gates of one chunk from its n log-decays g [n]: gam [n] = exp(G), Gam [n,C] = exp(G_i - G_j)
 * on and below the diagonal, 0 above, with G the inclusive cumsum of g. Row n-1 of Gam is
 * r_j = gamma_last / gamma_j. G is summed in double for both precisions: under strong decay it
 * reaches hundreds within a chunk, and a float G_i - G_j would then carry an absolute error of
 * ~|G| * 6e-8, i.e. a relative error of that size in every decay factor.
 * g NULL (a mixer without decay): every gate is exactly 1. */
static inline void delta_gates(int n, int C, const real *g, real *gam, real *Gam) {
    if (!g) {
        for (int i = 0; i < n; i++) {
            real *row = Gam + (size_t)i * C;
            gam[i] = 1;
            for (int j = 0; j < n; j++) row[j] = j <= i ? (real)1 : (real)0;
        }
        return;
    }
    double G[64]; /* n <= chunk <= 64 */
    double acc = 0;
    for (int i = 0; i < n; i++) {
        acc += g[i];
        G[i] = acc;
        gam[i] = delta_exp((real)acc);
    }
    for (int i = 0; i < n; i++) {
        real *row = Gam + (size_t)i * C;
        for (int j = 0; j <= i; j++) row[j] = delta_exp((real)(G[i] - G[j]));
        for (int j = i + 1; j < n; j++) row[j] = 0;
    }
}

/* Everything of a chunk that does not depend on the entering state (docs/design.md section 3.2):
 * KK [n,C] = K K^T; Tm [n,C] = (I + A)^-1 with A = strict_lower(diag(beta) KK o Gam), by forward
 * substitution; W [n,K] = Tm diag(beta gam) K; with v != NULL also U [n,V] = Tm diag(beta) V
 * (U is left untouched without v). tmp: n*max(K,V). */
static inline void delta_wy(int n, int C, int K, int V, const real *k, const real *v,
                            const real *beta, const real *gam, const real *Gam, real *KK, real *Tm,
                            real *W, real *U, real *tmp) {
    R(gdn_gemm)(0, 1, n, n, K, 1, k, K, k, K, 0, KK, C);
    /* Row i of (I + A) T = I: T_i = e_i - sum_{j<i} A_ij T_j; T_j is zero right of column j. */
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
    for (int r = 0; r < n; r++)
        for (int i = 0; i < K; i++)
            tmp[(size_t)r * K + i] = beta[r] * gam[r] * k[(size_t)r * K + i];
    R(gdn_gemm)(0, 0, n, K, n, 1, Tm, C, tmp, K, 0, W, K);
    if (!v) return;
    for (int r = 0; r < n; r++)
        for (int j = 0; j < V; j++) tmp[(size_t)r * V + j] = beta[r] * v[(size_t)r * V + j];
    R(gdn_gemm)(0, 0, n, V, n, 1, Tm, C, tmp, V, 0, U, V);
}

/* Vn [n,V] = U - W S: the corrected values written into the state (S [K,V] entering). */
static inline void delta_vnew(int n, int K, int V, const real *U, const real *W, const real *S,
                              real *Vn) {
    memcpy(Vn, U, sizeof(real) * n * V);
    R(gdn_gemm)(0, 0, n, V, K, -1, W, K, S, V, 1, Vn, V);
}

/* L [n,C] = scale (Q K^T o Gam): the intra-chunk attention, zero above the diagonal as Gam is. */
static inline void delta_intra(int n, int C, int K, real scale, const real *q, const real *k,
                               const real *Gam, real *L) {
    R(gdn_gemm)(0, 1, n, n, K, scale, q, K, k, K, 0, L, C);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) L[(size_t)i * C + j] *= Gam[(size_t)i * C + j];
}

#endif
