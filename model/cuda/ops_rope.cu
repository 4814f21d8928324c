/* Query/key preparation of an attention layer (ops_cuda.h, gdn_cuda_qk_prep): bias, per-head
 * RMSNorm and rotary embedding of q and k in one launch per direction, and the RoPE table.
 *
 * One warp per (token, head) row; lane l holds the pairs (i, i + D/2) for i = l, l + 32, ..
 * (NP pairs, NP = 1, 2, 4 or 8 by D), so the rotation, the norm and their backward stay in
 * registers and each element is read and written once. Rows 0 .. N*H-1 are the queries,
 * N*H .. N*H + N*Hkv-1 the keys.
 *
 * Backward, per row (u = x + b, r = 1/sqrt(mean(u^2) + eps), n = u r w, y = R n with R the
 * rotation by the position's angles):
 *   dn = R^T dy                 the inverse rotation: dn_i = dy_i c + dy_{i+h} s,
 *                               dn_{i+h} = dy_{i+h} c - dy_i s   (h = D/2)
 *   g  = dn w                   the gradient reaching u r
 *   du = r g - u r^3 (g . u) / D   (d r / d u_j = -r^3 u_j / D)
 *   dw += dn u r
 * and du is the gradient of the projection (and, summed over rows, of its bias). Without the
 * norm, du = dn.
 *
 * Weight gradients: a block owns QK_ROWS consecutive rows of one tensor (q or k, never both);
 * each warp sums its rows in order in registers, the warps' sums are added in warp order into
 * the block's partial, and the partials in block order (ops_reduce_partials): the same bits on
 * every run. */
#include <math.h>

#include "model/cuda/ops_util.cuh"

#define QK_WARPS 8
#define QK_ROWS 64 /* rows per block in the backward (QK_ROWS / QK_WARPS per warp) */
#define QK_MAX_D 512

/* The per-row context: which tensor, which head and position, and the row's offset. */
struct qk_row {
    int isk, hd, t;
    size_t r; /* row within its tensor */
};
static __device__ __forceinline__ qk_row qk_locate(const gdn_cuda_qk_prep &s, size_t row, size_t NQ) {
    qk_row q;
    q.isk = row >= NQ;
    q.r = q.isk ? row - NQ : row;
    const int heads = q.isk ? s.Hkv : s.H;
    q.hd = (int)(q.r % (size_t)heads);
    const size_t bt = q.r / (size_t)heads; /* token b*T + t */
    q.t = s.pos ? s.pos[bt] : (int)(bt % (size_t)s.T);
    return q;
}

/* u = x + b for the lane's pairs (0 outside the row). */
template <typename T, int NP>
static __device__ __forceinline__ void qk_load_u(const T *x, const float *b, size_t o, int hd, int D, int lane,
                                                 float *u1, float *u2) {
    const int h = D / 2;
#pragma unroll
    for (int c = 0; c < NP; c++) {
        const int i = lane + 32 * c;
        u1[c] = u2[c] = 0.0f;
        if (i < h) {
            u1[c] = ops_ld(x, o + i);
            u2[c] = ops_ld(x, o + i + h);
            if (b) {
                u1[c] += b[(size_t)hd * D + i];
                u2[c] += b[(size_t)hd * D + i + h];
            }
        }
    }
}

template <typename T, int NP>
__global__ void __launch_bounds__(32 * QK_WARPS) k_qk_prep_fwd(gdn_cuda_qk_prep s, T *q, float *rq, T *k, float *rk,
                                                               const T *qp, const T *kp, size_t NQ, size_t NR) {
    const int lane = threadIdx.x & 31;
    const size_t row = (size_t)blockIdx.x * QK_WARPS + (threadIdx.x >> 5);
    if (row >= NR) return; /* the whole warp */
    const qk_row w = qk_locate(s, row, NQ);
    const int D = s.D, h = D / 2;
    const size_t o = w.r * (size_t)D;
    float u1[NP], u2[NP];
    qk_load_u<T, NP>(w.isk ? kp : qp, w.isk ? s.bk : s.bq, o, w.hd, D, lane, u1, u2);
    if (s.norm) {
        float ss = 0.0f;
#pragma unroll
        for (int c = 0; c < NP; c++) ss += u1[c] * u1[c] + u2[c] * u2[c];
        ss = ops_warp_sum(ss);
        const float r = 1.0f / sqrtf(ss / (float)D + s.eps);
        float *rout = w.isk ? rk : rq;
        if (rout && lane == 0) rout[w.r] = r;
        const float *wt = w.isk ? s.wk : s.wq;
#pragma unroll
        for (int c = 0; c < NP; c++) {
            const int i = lane + 32 * c;
            if (i < h) {
                u1[c] = u1[c] * r * wt[i];
                u2[c] = u2[c] * r * wt[i + h];
            }
        }
    }
    const float *cs = s.rope + (size_t)w.t * h, *sn = s.rope + ((size_t)s.T + w.t) * h;
    T *y = w.isk ? k : q;
#pragma unroll
    for (int c = 0; c < NP; c++) {
        const int i = lane + 32 * c;
        if (i < h) {
            const float cc = cs[i], ss = sn[i];
            ops_st(y, o + i, u1[c] * cc - u2[c] * ss);
            ops_st(y, o + i + h, u2[c] * cc + u1[c] * ss);
        }
    }
}

template <typename T, int NP>
__global__ void __launch_bounds__(32 * QK_WARPS)
    k_qk_prep_bwd(gdn_cuda_qk_prep s, T *dqp, T *dkp, float *part, const T *dq, const T *dk, const T *qp, const T *kp,
                  const float *rq, const float *rk, size_t NQ, size_t NK, int nbq) {
    extern __shared__ float qk_sdw[]; /* [QK_WARPS][D] (only with norm) */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, D = s.D, h = D / 2;
    /* this block's rows: [first, end) of the queries (blocks < nbq) or of the keys */
    const int isk = (int)blockIdx.x >= nbq;
    const size_t first = (size_t)(isk ? (int)blockIdx.x - nbq : (int)blockIdx.x) * QK_ROWS;
    const size_t n_rows = isk ? NK : NQ, end = first + QK_ROWS < n_rows ? first + QK_ROWS : n_rows;
    float dw1[NP], dw2[NP];
#pragma unroll
    for (int c = 0; c < NP; c++) dw1[c] = dw2[c] = 0.0f;
    const float *wt = isk ? s.wk : s.wq;
    for (size_t r = first + warp; r < end; r += QK_WARPS) {
        const qk_row w = qk_locate(s, isk ? NQ + r : r, NQ);
        const size_t o = r * (size_t)D;
        const T *dy = isk ? dk : dq;
        const float *cs = s.rope + (size_t)w.t * h, *sn = s.rope + ((size_t)s.T + w.t) * h;
        float dn1[NP], dn2[NP];
#pragma unroll
        for (int c = 0; c < NP; c++) {
            const int i = lane + 32 * c;
            dn1[c] = dn2[c] = 0.0f;
            if (i < h) {
                const float a = ops_ld(dy, o + i), b = ops_ld(dy, o + i + h), cc = cs[i], ss = sn[i];
                dn1[c] = a * cc + b * ss;
                dn2[c] = b * cc - a * ss;
            }
        }
        if (s.norm) {
            float u1[NP], u2[NP];
            qk_load_u<T, NP>(isk ? kp : qp, isk ? s.bk : s.bq, o, w.hd, D, lane, u1, u2);
            const float rr = (isk ? rk : rq)[r];
            float dot = 0.0f;
#pragma unroll
            for (int c = 0; c < NP; c++) {
                const int i = lane + 32 * c;
                if (i < h) dot += dn1[c] * wt[i] * u1[c] + dn2[c] * wt[i + h] * u2[c];
            }
            dot = ops_warp_sum(dot);
            const float cr = rr * rr * rr * dot / (float)D;
#pragma unroll
            for (int c = 0; c < NP; c++) {
                const int i = lane + 32 * c;
                if (i < h) {
                    dw1[c] += dn1[c] * u1[c] * rr;
                    dw2[c] += dn2[c] * u2[c] * rr;
                    dn1[c] = rr * wt[i] * dn1[c] - u1[c] * cr;
                    dn2[c] = rr * wt[i + h] * dn2[c] - u2[c] * cr;
                }
            }
        }
        T *dx = isk ? dkp : dqp;
#pragma unroll
        for (int c = 0; c < NP; c++) {
            const int i = lane + 32 * c;
            if (i < h) {
                ops_st(dx, o + i, dn1[c]);
                ops_st(dx, o + i + h, dn2[c]);
            }
        }
    }
    if (!s.norm) return; /* the whole block */
    float *sdw = qk_sdw + (size_t)warp * D;
#pragma unroll
    for (int c = 0; c < NP; c++) {
        const int i = lane + 32 * c;
        if (i < h) {
            sdw[i] = dw1[c];
            sdw[i + h] = dw2[c];
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        float acc = 0.0f;
        for (int v = 0; v < QK_WARPS; v++) acc += qk_sdw[(size_t)v * D + j];
        part[(size_t)blockIdx.x * D + j] = acc;
    }
}

/* Pairs per lane for head dim D. */
static int qk_np(int D) { return D <= 64 ? 1 : D <= 128 ? 2 : D <= 256 ? 4 : 8; }

static void qk_check(const gdn_cuda_qk_prep *s, const char *who) {
    if (!s || s->B < 0 || s->T < 0 || s->H < 0 || s->Hkv < 0 || s->D < 2 || s->D % 2 || s->D > QK_MAX_D || !s->rope ||
        (s->norm && (!s->wq || !s->wk)))
        GDN_CUDA_DIE("%s: bad shape B=%d T=%d H=%d Hkv=%d D=%d (need an even D from 2 to %d), or a missing RoPE table "
                     "or norm weight", who, s ? s->B : -1, s ? s->T : -1, s ? s->H : -1, s ? s->Hkv : -1,
                     s ? s->D : -1, QK_MAX_D);
}

#define QK_LAUNCH(kern, T, np, grid, smem, ...)                                               \
    do {                                                                                      \
        switch (np) {                                                                         \
        case 1: kern<T, 1><<<grid, 32 * QK_WARPS, smem, OPS_STREAM(stream)>>>(__VA_ARGS__); break; \
        case 2: kern<T, 2><<<grid, 32 * QK_WARPS, smem, OPS_STREAM(stream)>>>(__VA_ARGS__); break; \
        case 4: kern<T, 4><<<grid, 32 * QK_WARPS, smem, OPS_STREAM(stream)>>>(__VA_ARGS__); break; \
        default: kern<T, 8><<<grid, 32 * QK_WARPS, smem, OPS_STREAM(stream)>>>(__VA_ARGS__); break; \
        }                                                                                     \
    } while (0)

extern "C" void gdn_cuda_qk_prep_fwd(gdn_cuda_precision p, const gdn_cuda_qk_prep *s, void *q, float *rq, void *k,
                                     float *rk, const void *qp, const void *kp, void *stream) {
    qk_check(s, "gdn_cuda_qk_prep_fwd");
    const size_t N = (size_t)s->B * s->T, NQ = N * s->H, NR = NQ + N * s->Hkv;
    if (!NR) return;
    const unsigned grid = (unsigned)((NR + QK_WARPS - 1) / QK_WARPS);
    OPS_DISPATCH(p, T, QK_LAUNCH(k_qk_prep_fwd, T, qk_np(s->D), grid, 0, *s, (T *)q, rq, (T *)k, rk, (const T *)qp,
                                 (const T *)kp, NQ, NR));
    GDN_CUDA_CHECK_LAUNCH();
}

static size_t qk_blocks(size_t rows) { return (rows + QK_ROWS - 1) / QK_ROWS; }

extern "C" size_t gdn_cuda_qk_prep_workspace(const gdn_cuda_qk_prep *s) {
    const size_t N = (size_t)s->B * s->T;
    return (qk_blocks(N * s->H) + qk_blocks(N * s->Hkv)) * (size_t)s->D * sizeof(float);
}

extern "C" void gdn_cuda_qk_prep_bwd(gdn_cuda_precision p, const gdn_cuda_qk_prep *s, void *dqp, void *dkp, float *dwq,
                                     float *dwk, const void *dq, const void *dk, const void *qp, const void *kp,
                                     const float *rq, const float *rk, void *ws, void *stream) {
    qk_check(s, "gdn_cuda_qk_prep_bwd");
    const size_t N = (size_t)s->B * s->T, NQ = N * s->H, NK = N * s->Hkv;
    const size_t nbq = qk_blocks(NQ), nbk = qk_blocks(NK);
    if (!nbq && !nbk) return;
    if (nbq + nbk > 0x7fffffffu) GDN_CUDA_DIE("gdn_cuda_qk_prep_bwd: %zu rows are too many", NQ + NK);
    if (s->norm && (!dwq || !dwk || !rq || !rk || !ws))
        GDN_CUDA_DIE("gdn_cuda_qk_prep_bwd: with the norm, dwq, dwk, rq, rk and the workspace must be given");
    float *part = (float *)ws;
    const size_t smem = s->norm ? (size_t)QK_WARPS * s->D * sizeof(float) : 0;
    OPS_DISPATCH(p, T, QK_LAUNCH(k_qk_prep_bwd, T, qk_np(s->D), (unsigned)(nbq + nbk), smem, *s, (T *)dqp, (T *)dkp,
                                 part, (const T *)dq, (const T *)dk, (const T *)qp, (const T *)kp, rq, rk, NQ, NK,
                                 (int)nbq));
    GDN_CUDA_CHECK_LAUNCH();
    if (!s->norm) return;
    if (nbq) ops_reduce_partials(dwq, part, (int)nbq, s->D, OPS_STREAM(stream));
    if (nbk) ops_reduce_partials(dwk, part + nbq * (size_t)s->D, (int)nbk, s->D, OPS_STREAM(stream));
}

extern "C" void gdn_cuda_rope_table(float *cs, int T, int D, int pos0, double theta) {
    if (T < 0 || D < 2 || D % 2 || pos0 < 0 || !(theta > 0) || !isfinite(theta))
        GDN_CUDA_DIE("gdn_cuda_rope_table: bad arguments T=%d D=%d pos0=%d theta=%g (need an even D >= 2, pos0 >= 0 "
                     "and a finite theta > 0)", T, D, pos0, theta);
    const int half = D / 2;
    float *sn = cs + (size_t)T * half;
    for (int i = 0; i < half; i++) { /* as model/cpu/rope.c */
        const double w = pow(theta, -2.0 * i / D);
        for (int t = 0; t < T; t++) {
            const double a = (double)(pos0 + (long)t) * w;
            cs[(size_t)t * half + i] = (float)cos(a);
            sn[(size_t)t * half + i] = (float)sin(a);
        }
    }
}
