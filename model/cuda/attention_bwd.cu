/* Causal attention backward (see attention_cuda.h), FlashAttention-2's split:
 *
 *   1. delta_kernel: Delta[b,h,t] = sum_d d_o * o (fp32), one warp per row.
 *   2. dkdv (bf16): one block of W warps (4 or 8, attention_cuda.h) per 16W-row key tile of one
 *      (b, kv head); each warp owns 16 keys and keeps their fp32 dK, dV accumulators in
 *      registers. The block loops over the G query heads of the group and, for each, over the
 *      query tiles on or after the diagonal;
 *      Q and dO tiles stream through shared memory (cp.async, double buffered). Per tile, with
 *      scores transposed (keys as rows): P^T = exp(S^T - lse), dV += P^T dO,
 *      dP^T = V dO^T, dS^T = P^T (dP^T - Delta), dK += dS^T Q. No atomics: each block owns its
 *      rows of dk and dv.
 *   3. dq (bf16): one block of W warps per 16W-row query tile of one (b, h); key/value tiles
 *      of 64 rows stream through shared memory: S = Q K^T, P = exp(S - lse), dP = dO V^T,
 *      dS = P (dP - Delta), dQ += dS K.
 * P and dS are rounded to bf16 only as operands of the next product. Query tiles of 32 rows
 * (D 128) / 64 rows (D 64) in dkdv and key tiles of 64 in dq keep the register footprint
 * (accumulators 2 x 16 x D + scores and their gradients) under 255 registers without spills.
 * Shared memory (D 128, W 4 / 8): dkdv K, V + 2 x (Q, dO) tiles = 68 / 104 KB; dq Q, dO +
 * 2 x (K, V) = 102 / 139 KB (rows of D+8 bf16).
 *
 * fp32: the same three steps as simple kernels, one warp per row (dq: per query row over its
 * keys; dkdv: per key row over the group's query heads and the queries after it). */
#include "model/cuda/attention_common.cuh"
#include "model/cuda/sm90a/attention_sm90a.h"

namespace attn {

/* W warps per block (4 or 8): dkdv takes 16 W key rows per block, dq 16 W query rows */
template <int D> constexpr int kv_bq() { return D == 128 ? 32 : 64; } /* dkdv: query tile */
constexpr int DQ_BN = 64;                                             /* dq: key tile */

template <int D, int W> constexpr size_t dkdv_smem_bytes() {
    return (size_t)(2 * 16 * W + 4 * kv_bq<D>()) * (D + 8) * sizeof(bf16);
}
template <int D, int W> constexpr size_t dq_smem_bytes() {
    return (size_t)(2 * 16 * W + 4 * DQ_BN) * (D + 8) * sizeof(bf16);
}

/* ---- Delta = rowsum(d_o * o) -------------------------------------------------------------- */
template <typename E, int D>
__global__ void __launch_bounds__(128) delta_kernel(const Params p) {
    constexpr int EL = D / 32;
    const long row = (long)blockIdx.x * 4 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= (long)p.B * p.T * p.H) return;
    const int h = (int)(row % p.H), t = (int)((row / p.H) % p.T), b = (int)(row / ((long)p.H * p.T));
    const E *o = (const E *)p.o + row * D, *d_o = (const E *)p.d_o + row * D;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < EL; ++i) {
        float x, y;
        if constexpr (sizeof(E) == 2) {
            x = __bfloat162float(o[lane + 32 * i]);
            y = __bfloat162float(d_o[lane + 32 * i]);
        } else {
            x = o[lane + 32 * i];
            y = d_o[lane + 32 * i];
        }
        s += x * y;
    }
    s = warp_sum(s);
    if (lane == 0) p.delta[((long)b * p.H + h) * p.T + t] = s;
}

/* bf16: D/8 lanes per row, 16-byte loads (the one-warp-per-row kernel above is bound by its
 * instruction count at these sizes). */
template <int D>
__global__ void __launch_bounds__(128) delta_bf16_kernel(const Params p) {
    constexpr int L = D / 8; /* lanes per row: 16 (D 128) or 8 (D 64) */
    const long row = ((long)blockIdx.x * 128 + threadIdx.x) / L;
    const int c = threadIdx.x % L;
    const bool ok = row < (long)p.B * p.T * p.H;
    float s = 0.0f;
    if (ok) {
        const uint4 x = *reinterpret_cast<const uint4 *>((const bf16 *)p.o + row * D + 8 * c);
        const uint4 y = *reinterpret_cast<const uint4 *>((const bf16 *)p.d_o + row * D + 8 * c);
        __nv_bfloat162 xa[4], ya[4]; /* memcpy, not a pointer cast: no aliasing of the uint4 */
        memcpy(xa, &x, sizeof x);
        memcpy(ya, &y, sizeof y);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 a = __bfloat1622float2(xa[i]), b = __bfloat1622float2(ya[i]);
            s += a.x * b.x + a.y * b.y;
        }
    }
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (ok && c == 0) {
        const int h = (int)(row % p.H), t = (int)((row / p.H) % p.T), b = (int)(row / ((long)p.H * p.T));
        p.delta[((long)b * p.H + h) * p.T + t] = s;
    }
}

/* ---- dK, dV (bf16) ---------------------------------------------------------------------------- */
template <int D, int W>
__global__ void __launch_bounds__(W * 32) dkdv_bf16_kernel(const Params p) {
    constexpr int KV_BN = 16 * W, BWD_NTH = 32 * W;
    constexpr int BQ = kv_bq<D>(), LDS = D + 8, NS = BQ / 8, NO = D / 8, KT = D / 16;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sK = reinterpret_cast<bf16 *>(smem_raw);
    bf16 *sV = sK + KV_BN * LDS;
    bf16 *sQ = sV + KV_BN * LDS;   /* 2 buffers */
    bf16 *sdO = sQ + 2 * BQ * LDS; /* 2 buffers */

    /* longest first: the first key tiles see the most queries */
    const int kt = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
    const int T = p.T, Tk = p.Tk, warp = threadIdx.x >> 5;
    const int k0 = kt * KV_BN;
    const long ldq = (long)p.H * D, ldk = (long)p.Hkv * D;
    const bf16 *gk = (const bf16 *)p.k + tok_off(b, 0, hk, Tk, p.Hkv, D);
    const bf16 *gv = (const bf16 *)p.v + tok_off(b, 0, hk, Tk, p.Hkv, D);

    /* query tiles i0 .. i1 hold the queries that see a key of this tile: rows >= k0 - qp, up to
     * the last row whose document starts at or before the tile's last key (key_lo rises along
     * the rows: a binary search); iteration it = (head g, tile i0 + it % ni) */
    int r_end = T - 1;
    if (p.key_lo) {
        const int *lo_b = p.key_lo + (long)b * T, k_last = k0 + KV_BN - 1;
        int lo_r = -1, hi_r = T - 1; /* the last row with key_lo <= k_last lies in (lo_r, hi_r] or is -1 */
        if (__ldg(lo_b + hi_r) <= k_last) lo_r = hi_r;
        while (hi_r - lo_r > 1) {
            const int mid = (lo_r + hi_r) / 2;
            if (__ldg(lo_b + mid) <= k_last) lo_r = mid; else hi_r = mid;
        }
        r_end = lo_r;
    }
    const int i0 = max(0, k0 - p.qp) / BQ, i1 = r_end / BQ;
    const int ni = r_end >= max(0, k0 - p.qp) ? i1 - i0 + 1 : 0, n_it = p.G * ni;

    load_tile<KV_BN, D, BWD_NTH>(sK, gk, ldk, k0, Tk);
    load_tile<KV_BN, D, BWD_NTH>(sV, gv, ldk, k0, Tk);
    {
        const int h = hk * p.G;
        load_tile<BQ, D, BWD_NTH>(sQ, (const bf16 *)p.q + tok_off(b, 0, h, T, p.H, D), ldq, i0 * BQ, T);
        load_tile<BQ, D, BWD_NTH>(sdO, (const bf16 *)p.d_o + tok_off(b, 0, h, T, p.H, D), ldq, i0 * BQ, T);
    }
    cp_async_commit();

    float dk[NO][4], dv[NO][4];
    zero(dk);
    zero(dv);
    const int key_base = k0 + warp * 16;

    for (int it = 0; it < n_it; ++it) {
        const int buf = it & 1;
        if (it + 1 < n_it) {
            const int h = hk * p.G + (it + 1) / ni, qn = (i0 + (it + 1) % ni) * BQ;
            load_tile<BQ, D, BWD_NTH>(sQ + (buf ^ 1) * BQ * LDS,
                                      (const bf16 *)p.q + tok_off(b, 0, h, T, p.H, D), ldq, qn, T);
            load_tile<BQ, D, BWD_NTH>(sdO + (buf ^ 1) * BQ * LDS,
                                      (const bf16 *)p.d_o + tok_off(b, 0, h, T, p.H, D), ldq, qn, T);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();

        const int h = hk * p.G + it / ni, q0 = (i0 + it % ni) * BQ;
        const bf16 *tQ = sQ + buf * BQ * LDS, *tdO = sdO + buf * BQ * LDS;
        const float *lse = p.lse + ((long)b * p.H + h) * T, *delta = p.delta + ((long)b * p.H + h) * T;

        /* per column (query) of this lane: lse in base 2 and Delta; 0 past the end (masked) */
        float lse2[NS][2], dlt[NS][2];
#pragma unroll
        for (int n = 0; n < NS; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int q = q0 + frag_col(n, e);
                lse2[n][e] = q < T ? lse[q] * ATTN_LOG2E : 0.0f;
                dlt[n][e] = q < T ? delta[q] : 0.0f;
            }

        /* S^T = K Q^T: keys as rows */
        float s[NS][4];
        zero(s);
        mma_abt_s<NS, KT>(s, sK + warp * 16 * LDS, LDS, tQ, LDS);
        const bool need_mask = p.qp + q0 < key_base + 15 || q0 + BQ > T || key_lo_at(p, b, q0 + BQ - 1) > key_base;
#pragma unroll
        for (int n = 0; n < NS; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float x = exp2f(s[n][e] * p.scale_log2 - lse2[n][e & 1]);
                if (need_mask) {
                    const int q = q0 + frag_col(n, e), key = key_base + frag_row(e);
                    if (!key_visible(p, q, key, key_lo_at(p, b, q))) x = 0.0f;
                }
                s[n][e] = x;
            }
        unsigned af[NS / 2][4];
        acc_to_a<NS>(af, s);
        mma_ab<NO, NS / 2>(dv, af, tdO, LDS);

        /* dP^T = V dO^T, then dS^T = P^T (dP^T - Delta) */
        float dp[NS][4];
        zero(dp);
        mma_abt_s<NS, KT>(dp, sV + warp * 16 * LDS, LDS, tdO, LDS);
#pragma unroll
        for (int n = 0; n < NS; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) dp[n][e] = s[n][e] * (dp[n][e] - dlt[n][e & 1]);
        acc_to_a<NS>(af, dp);
        mma_ab<NO, NS / 2>(dk, af, tQ, LDS);
        __syncthreads(); /* everyone is done with buffer buf before it is refilled */
    }
    cp_async_wait<0>(); /* no query tile (keys no query sees): the first loads are still pending */

    store_acc<NO>((bf16 *)p.dk + tok_off(b, 0, hk, Tk, p.Hkv, D), ldk, key_base, Tk, dk, p.scale);
    store_acc<NO>((bf16 *)p.dv + tok_off(b, 0, hk, Tk, p.Hkv, D), ldk, key_base, Tk, dv, 1.0f);
}

/* ---- dQ (bf16) ------------------------------------------------------------------------------- */
template <int D, int W>
__global__ void __launch_bounds__(W * 32) dq_bf16_kernel(const Params p) {
    constexpr int DQ_BM = 16 * W, BWD_NTH = 32 * W;
    constexpr int LDS = D + 8, NS = DQ_BN / 8, NO = D / 8, KT = D / 16;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem_raw);
    bf16 *sdO = sQ + DQ_BM * LDS;
    bf16 *sK = sdO + DQ_BM * LDS;     /* 2 buffers */
    bf16 *sV = sK + 2 * DQ_BN * LDS;  /* 2 buffers */

    const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int hk = h / p.G, T = p.T, Tk = p.Tk, warp = threadIdx.x >> 5;
    const int q0 = qt * DQ_BM;
    const long ldq = (long)p.H * D, ldk = (long)p.Hkv * D;
    const bf16 *gk = (const bf16 *)p.k + tok_off(b, 0, hk, Tk, p.Hkv, D);
    const bf16 *gv = (const bf16 *)p.v + tok_off(b, 0, hk, Tk, p.Hkv, D);
    /* key tiles j0 .. n_kv-1, as in the forward */
    const int n_kv = (p.qp + min(T, q0 + DQ_BM) + DQ_BN - 1) / DQ_BN, j0 = key_lo_at(p, b, q0) / DQ_BN;

    load_tile<DQ_BM, D, BWD_NTH>(sQ, (const bf16 *)p.q + tok_off(b, 0, h, T, p.H, D), ldq, q0, T);
    load_tile<DQ_BM, D, BWD_NTH>(sdO, (const bf16 *)p.d_o + tok_off(b, 0, h, T, p.H, D), ldq, q0, T);
    load_tile<DQ_BN, D, BWD_NTH>(sK + (j0 & 1) * DQ_BN * LDS, gk, ldk, j0 * DQ_BN, Tk);
    load_tile<DQ_BN, D, BWD_NTH>(sV + (j0 & 1) * DQ_BN * LDS, gv, ldk, j0 * DQ_BN, Tk);
    cp_async_commit();

    const int row_base = q0 + warp * 16;
    float lse2[2], dlt[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = row_base + frag_row(2 * r);
        lse2[r] = row < T ? p.lse[((long)b * p.H + h) * T + row] * ATTN_LOG2E : 0.0f;
        dlt[r] = row < T ? p.delta[((long)b * p.H + h) * T + row] : 0.0f;
    }
    const int lo[2] = {key_lo_at(p, b, row_base + frag_row(0)), key_lo_at(p, b, row_base + frag_row(2))};
    const int lo_warp = key_lo_at(p, b, row_base + 15);
    float dq[NO][4];
    zero(dq);

    for (int j = j0; j < n_kv; ++j) {
        const int buf = j & 1;
        if (j + 1 < n_kv) {
            load_tile<DQ_BN, D, BWD_NTH>(sK + (buf ^ 1) * DQ_BN * LDS, gk, ldk, (j + 1) * DQ_BN, Tk);
            load_tile<DQ_BN, D, BWD_NTH>(sV + (buf ^ 1) * DQ_BN * LDS, gv, ldk, (j + 1) * DQ_BN, Tk);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const bf16 *tK = sK + buf * DQ_BN * LDS, *tV = sV + buf * DQ_BN * LDS;
        const int k0 = j * DQ_BN;

        float s[NS][4];
        zero(s);
        mma_abt_s<NS, KT>(s, sQ + warp * 16 * LDS, LDS, tK, LDS);
        const bool need_mask = k0 + DQ_BN - 1 > p.qp + row_base || k0 + DQ_BN > Tk || row_base + 16 > T || k0 < lo_warp;
#pragma unroll
        for (int n = 0; n < NS; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float x = exp2f(s[n][e] * p.scale_log2 - lse2[e >> 1]);
                if (need_mask) {
                    const int col = k0 + frag_col(n, e), row = row_base + frag_row(e);
                    if (!key_visible(p, row, col, lo[e >> 1])) x = 0.0f;
                }
                s[n][e] = x;
            }
        float dp[NS][4];
        zero(dp);
        mma_abt_s<NS, KT>(dp, sdO + warp * 16 * LDS, LDS, tV, LDS);
#pragma unroll
        for (int n = 0; n < NS; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) dp[n][e] = s[n][e] * (dp[n][e] - dlt[e >> 1]);
        unsigned af[NS / 2][4];
        acc_to_a<NS>(af, dp);
        mma_ab<NO, NS / 2>(dq, af, tK, LDS);
        __syncthreads();
    }
    store_acc<NO>((bf16 *)p.dq + tok_off(b, 0, h, T, p.H, D), ldq, row_base, T, dq, p.scale);
}

/* ---- fp32: warp per row ----------------------------------------------------------------------- */
template <int D>
__global__ void __launch_bounds__(128) dq_f32_kernel(const Params p) {
    constexpr int E = D / 32;
    const long row = (long)blockIdx.x * 4 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= (long)p.B * p.T * p.H) return;
    const int h = (int)(row % p.H), t = (int)((row / p.H) % p.T), b = (int)(row / ((long)p.H * p.T));
    const int hk = h / p.G;
    const float *q = (const float *)p.q + row * D, *d_o = (const float *)p.d_o + row * D;
    const float lse = p.lse[((long)b * p.H + h) * p.T + t], dlt = p.delta[((long)b * p.H + h) * p.T + t];
    float qv[E], gv[E], acc[E];
#pragma unroll
    for (int i = 0; i < E; ++i) {
        qv[i] = q[lane + 32 * i];
        gv[i] = d_o[lane + 32 * i];
        acc[i] = 0.0f;
    }
    for (int s = key_lo_at(p, b, t); s <= p.qp + t; ++s) {
        const float *k = (const float *)p.k + tok_off(b, s, hk, p.Tk, p.Hkv, D);
        const float *v = (const float *)p.v + tok_off(b, s, hk, p.Tk, p.Hkv, D);
        float a = 0.0f, c = 0.0f;
#pragma unroll
        for (int i = 0; i < E; ++i) {
            a += qv[i] * k[lane + 32 * i];
            c += gv[i] * v[lane + 32 * i];
        }
        const float pr = expf(warp_sum(a) * p.scale - lse);
        const float ds = pr * (warp_sum(c) - dlt);
#pragma unroll
        for (int i = 0; i < E; ++i) acc[i] += ds * k[lane + 32 * i];
    }
    float *dq = (float *)p.dq + row * D;
#pragma unroll
    for (int i = 0; i < E; ++i) dq[lane + 32 * i] = acc[i] * p.scale;
}

/* one warp per key row (b, s, hk): over the group's query heads, then the queries t >= s */
template <int D>
__global__ void __launch_bounds__(128) dkdv_f32_kernel(const Params p) {
    constexpr int E = D / 32;
    const long row = (long)blockIdx.x * 4 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= (long)p.B * p.Tk * p.Hkv) return;
    const int hk = (int)(row % p.Hkv), s = (int)((row / p.Hkv) % p.Tk), b = (int)(row / ((long)p.Hkv * p.Tk));
    const float *k = (const float *)p.k + row * D, *v = (const float *)p.v + row * D;
    float kv[E], vv[E], dk[E], dv[E];
#pragma unroll
    for (int i = 0; i < E; ++i) {
        kv[i] = k[lane + 32 * i];
        vv[i] = v[lane + 32 * i];
        dk[i] = dv[i] = 0.0f;
    }
    for (int g = 0; g < p.G; ++g) {
        const int h = hk * p.G + g;
        const float *lse = p.lse + ((long)b * p.H + h) * p.T, *delta = p.delta + ((long)b * p.H + h) * p.T;
        /* the queries at or after key s whose document has begun by s (key_lo rises along t) */
        for (int t = max(0, s - p.qp); t < p.T && key_lo_at(p, b, t) <= s; ++t) {
            const float *q = (const float *)p.q + tok_off(b, t, h, p.T, p.H, D);
            const float *d_o = (const float *)p.d_o + tok_off(b, t, h, p.T, p.H, D);
            float a = 0.0f, c = 0.0f;
#pragma unroll
            for (int i = 0; i < E; ++i) {
                a += q[lane + 32 * i] * kv[i];
                c += d_o[lane + 32 * i] * vv[i];
            }
            const float pr = expf(warp_sum(a) * p.scale - lse[t]);
            const float ds = pr * (warp_sum(c) - delta[t]);
#pragma unroll
            for (int i = 0; i < E; ++i) {
                dv[i] += pr * d_o[lane + 32 * i];
                dk[i] += ds * q[lane + 32 * i];
            }
        }
    }
    float *gdk = (float *)p.dk + row * D, *gdv = (float *)p.dv + row * D;
#pragma unroll
    for (int i = 0; i < E; ++i) {
        gdk[lane + 32 * i] = dk[i] * p.scale;
        gdv[lane + 32 * i] = dv[i];
    }
}

template <typename K> static void raise_smem(K kernel, size_t bytes) {
    GDN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <int D, int W>
static void bwd_launch(const Params &p, gdn_cuda_precision prec, float *dq_acc, bool sm90a, int kv_kernel, int dq_kernel,
                       cudaStream_t st) {
    const long rows = (long)p.B * p.T * p.H, kv_rows = (long)p.B * p.Tk * p.Hkv;
    if (prec == GDN_CUDA_BF16) {
        delta_bf16_kernel<D><<<(unsigned)((rows * (D / 8) + 127) / 128), 128, 0, st>>>(p);
        GDN_CUDA_CHECK_LAUNCH();
        if (sm90a) {
            sm90a_bwd(p, D, dq_acc, kv_kernel, dq_kernel, st);
            return;
        }
        static_assert(dkdv_smem_bytes<D, W>() <= 227 * 1024 && dq_smem_bytes<D, W>() <= 227 * 1024,
                      "shared memory over the sm_90 limit");
        raise_smem(dkdv_bf16_kernel<D, W>, dkdv_smem_bytes<D, W>());
        raise_smem(dq_bf16_kernel<D, W>, dq_smem_bytes<D, W>());
        const dim3 gkv((p.Tk + 16 * W - 1) / (16 * W), p.Hkv, p.B);
        dkdv_bf16_kernel<D, W><<<gkv, W * 32, dkdv_smem_bytes<D, W>(), st>>>(p);
        GDN_CUDA_CHECK_LAUNCH();
        const dim3 gq((p.T + 16 * W - 1) / (16 * W), p.H, p.B);
        dq_bf16_kernel<D, W><<<gq, W * 32, dq_smem_bytes<D, W>(), st>>>(p);
        GDN_CUDA_CHECK_LAUNCH();
    } else {
        delta_kernel<float, D><<<(unsigned)((rows + 3) / 4), 128, 0, st>>>(p);
        GDN_CUDA_CHECK_LAUNCH();
        dkdv_f32_kernel<D><<<(unsigned)((kv_rows + 3) / 4), 128, 0, st>>>(p);
        GDN_CUDA_CHECK_LAUNCH();
        dq_f32_kernel<D><<<(unsigned)((rows + 3) / 4), 128, 0, st>>>(p);
        GDN_CUDA_CHECK_LAUNCH();
    }
}

} // namespace attn

extern "C" void gdn_cuda_attention_bwd(const gdn_cuda_attention_args *a) {
    gdn_cuda_attention_check(a, 1);
    const attn::Params p = attn::make_params(a);
    cudaStream_t st = (cudaStream_t)a->stream;
    const int w = a->precision == GDN_CUDA_BF16 ? attn::block_warps(a) : 4; /* fp32 ignores it */
    if (a->bwd_algo < 0 || a->bwd_algo > 5)
        GDN_CUDA_DIE("attention: bwd_algo=%d: use 0 (fastest repeatable), 1 (mma.sync), 2 (wgmma, atomic dQ), 3 "
                     "(wgmma, warp-specialised, warpgroups taking turns), 4 (the same without turns) or 5 (wgmma, "
                     "cp.async)", a->bwd_algo);
    bool sm90a = false;
    if (a->precision == GDN_CUDA_BF16 && a->bwd_algo != 1) {
        sm90a = gdn_cuda_attention_sm90a_available();
        if (!sm90a && a->bwd_algo >= 2)
            GDN_CUDA_DIE("attention: bwd_algo=%d (wgmma) needs a compute capability 9.0 GPU and a build for "
                         "architecture 90 (CMAKE_CUDA_ARCHITECTURES)", a->bwd_algo);
    }
    /* sm90a_bwd's repeatable dK/dV and dQ kernels: 0 cp.async, 1 warp-specialised with turns, 2
     * without. The default: both warp-specialised without turns (docs/performance.md). Where the
     * tensors do not suit the bulk tensor copy, 0 (the same bits) */
    const int ws_kernel = a->bwd_algo == 3 ? 1 : a->bwd_algo == 4 || a->bwd_algo == 0 ? 2 : 0;
    const int kv_kernel = sm90a && attn::sm90a_ws_usable(p, attn::WS_DKDV) ? ws_kernel : 0;
    const int dq_kernel = sm90a && attn::sm90a_ws_usable(p, attn::WS_DQ) ? ws_kernel : 0;
    /* NULL: the repeatable two-kernel wgmma backward */
    float *dq_acc = a->bwd_algo == 2 ? (float *)a->workspace + attn::dq_acc_offset(a) : NULL;
    if (a->D == 64)
        w == 8 ? attn::bwd_launch<64, 8>(p, a->precision, dq_acc, sm90a, kv_kernel, dq_kernel, st)
               : attn::bwd_launch<64, 4>(p, a->precision, dq_acc, sm90a, kv_kernel, dq_kernel, st);
    else
        w == 8 ? attn::bwd_launch<128, 8>(p, a->precision, dq_acc, sm90a, kv_kernel, dq_kernel, st)
               : attn::bwd_launch<128, 4>(p, a->precision, dq_acc, sm90a, kv_kernel, dq_kernel, st);
}
