/* Causal attention backward on Hopper's wgmma (sm_90a): the bf16 path of gdn_cuda_attention_bwd
 * on H100/H200 (attention_bwd.cu picks it and computes Delta = rowsum(d_o * o) first).
 *
 * One block of two warpgroups (256 threads) per 128-key tile of one (b, kv head); warpgroup w
 * owns keys 64w .. 64w+63 and keeps their fp32 dK and dV accumulators (64 x D each) in
 * registers. The block loops over the query heads of the group and, for each, over the 64-row
 * query tiles on or after the diagonal; Q, dO, lse and Delta tiles stream through shared memory
 * (cp.async, three buffers, so that one barrier per tile guards them). Per query tile, keys as rows (wgmma, fp32 accumulation):
 *   S^T = K Q^T and dP^T = V dO^T       (both operands in shared memory)
 *   P^T = exp(scale S^T - lse)           (masked), dV += P^T dO   (P^T from registers, bf16)
 *   dS^T = P^T (dP^T - Delta),           dK += dS^T Q             (dS^T from registers, bf16)
 *   dQ += dS K                           (dS^T through shared memory, read transposed)
 * dQ of one query tile gets contributions from every key tile, so it is added into an fp32
 * accumulator in global memory (vector atomics); a last kernel scales and rounds it to bf16. The
 * warpgroups split dQ's columns (D 128: 64 each) or its keys (D 64: their own 64 keys each).
 * Unlike the split kernels (attention_bwd.cu), the order of the dQ additions varies from run
 * to run: dq is repeatable to rounding, not bitwise; dk and dv are bitwise repeatable.
 * Shared memory (D 128): K, V 64 KB, 3 x (Q, dO) 96 KB, 2 x dS^T 32 KB, lse / Delta 1.5 KB.
 *
 * The repeatable two-kernel path also comes warp-specialised (dkdv_ws_kernel, dq_ws_kernel: a
 * producer warpgroup streams the tiles by the bulk tensor copy into mbarrier-guarded stages),
 * sharing the per-tile steps with the kernels here, so every variant gives the same bits. */
#include "model/cuda/attention_common.cuh"
#include "model/cuda/sm90a/attention_sm90a.h"
#include "model/cuda/sm90a/wgmma_common.cuh"

namespace attn {
namespace sm90a {

constexpr int KB = 128, QB = 64, BWD_NTH = 256; /* keys per block, queries per tile, threads */

template <int D> constexpr size_t bwd_smem_bytes() {
    return (size_t)(2 * KB * D + 6 * QB * D + 2 * KB * QB) * sizeof(bf16) + 6 * QB * sizeof(float) + 1024;
}
/* The warp-specialised dK/dV kernel: 2 consumer warpgroups and a producer warpgroup; K and V,
 * KV_ST stages of (Q, dO, lse, Delta: the 256-byte rows keep the bulk copies' 128-byte
 * alignment), then the mbarriers (full K/V, full and empty per stage). */
constexpr int KV_WS_NTH = 384, KV_ST = 3;
template <int D> constexpr size_t kv_ws_smem_bytes() {
    return (size_t)(2 * KB * D + 2 * KV_ST * QB * D) * sizeof(bf16) + 2 * KV_ST * QB * sizeof(float) +
           (1 + 2 * KV_ST) * sizeof(uint64_t) + 1024;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* The query tiles i0 .. i0+ni-1 that hold the queries seeing a key of the tile at k0: rows >=
 * k0 - qp, up to the last row whose document starts at or before the tile's last key (key_lo
 * rises along the rows: a binary search). */
__device__ __forceinline__ void query_tiles(const Params &p, int b, int k0, int &i0, int &ni) {
    const int T = p.T;
    int r_end = T - 1;
    if (p.key_lo) {
        const int *lo_b = p.key_lo + (long)b * T, k_last = k0 + KB - 1;
        int lo_r = -1, hi_r = T - 1; /* the last row with key_lo <= k_last lies in (lo_r, hi_r], or is -1 */
        if (__ldg(lo_b + hi_r) <= k_last) lo_r = hi_r;
        while (hi_r - lo_r > 1) {
            const int mid = (lo_r + hi_r) / 2;
            if (__ldg(lo_b + mid) <= k_last) lo_r = mid; else hi_r = mid;
        }
        r_end = lo_r;
    }
    const int r_first = max(0, k0 - p.qp);
    i0 = r_first / QB;
    ni = r_end >= r_first ? r_end / QB - i0 + 1 : 0;
}

/* ---- one query tile of the dK/dV kernels (bwd_kernel, dkdv_ws_kernel): the same instructions
 * in the same order in both, so the same bits; keys as rows, queries as columns ---- */

/* Issue S^T = K Q^T, then dP^T = V dO^T (two commit groups; kw, vw: the warpgroup's 64 keys). */
template <int D>
__device__ __forceinline__ void kv_issue_scores(float (&st)[QB / 2], float (&dpt)[QB / 2], const bf16 *kw, const bf16 *vw,
                                                const bf16 *tQ, const bf16 *tdO) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
        wgmma_ss<0, 0>(st, desc_sw128(kw + (kk >> 2) * KB * 64 + (kk & 3) * 16, 16, 1024),
                       desc_sw128(tQ + (kk >> 2) * QB * 64 + (kk & 3) * 16, 16, 1024), kk > 0);
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
        wgmma_ss<0, 0>(dpt, desc_sw128(vw + (kk >> 2) * KB * 64 + (kk & 3) * 16, 16, 1024),
                       desc_sw128(tdO + (kk >> 2) * QB * 64 + (kk & 3) * 16, 16, 1024), kk > 0);
    wgmma_commit();
}

/* P^T = exp(scale S^T - lse) in place, masked (queries before the key, past the end or in a later
 * document), and as bf16 A fragments; key_base: the warp's first key, tL: the tile's lse. */
__device__ __forceinline__ void kv_probs(float (&st)[QB / 2], unsigned (&pf)[QB / 16][4], const Params &p, int b, int q0,
                                         int key_base, const float *tL) {
    constexpr int NQ = QB / 8;
    const int g = (threadIdx.x & 31) >> 2, t4 = threadIdx.x & 3, T = p.T;
    const bool need_mask = p.qp + q0 < key_base + 15 || q0 + QB > T || key_lo_at(p, b, q0 + QB - 1) > key_base;
#pragma unroll
    for (int n = 0; n < NQ; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int c = 8 * n + 2 * t4 + (e & 1);
            float x = ex2(fmaf(st[4 * n + e], p.scale_log2, -tL[c] * ATTN_LOG2E));
            if (need_mask) {
                const int q = q0 + c, key = key_base + g + 8 * (e >> 1);
                if (!key_visible(p, q, key, key_lo_at(p, b, q))) x = 0.0f;
            }
            st[4 * n + e] = x;
        }
    acc_to_frags<QB>(pf, st);
}

/* Issue acc += A B (one commit group): A (64 x QB) bf16 fragments, B (QB x D) a shared tile read
 * transposed; dV += P^T dO and dK += dS^T Q. */
template <int D>
__device__ __forceinline__ void kv_issue_acc(float (&acc)[D / 2], const unsigned (&a)[QB / 16][4], const bf16 *tB) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < QB / 16; ++kk) wgmma_rs(acc, a[kk], desc_sw128(tB + kk * 16 * 64, QB * 128, 1024), 1);
    wgmma_commit();
}

/* dS^T = P^T (dP^T - Delta) in dpt, and as bf16 A fragments (tDl: the tile's Delta). */
__device__ __forceinline__ void kv_dscores(float (&dpt)[QB / 2], const float (&st)[QB / 2], unsigned (&df)[QB / 16][4],
                                           const float *tDl) {
    constexpr int NQ = QB / 8;
    const int t4 = threadIdx.x & 3;
#pragma unroll
    for (int n = 0; n < NQ; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) dpt[4 * n + e] = st[4 * n + e] * (dpt[4 * n + e] - tDl[8 * n + 2 * t4 + (e & 1)]);
    acc_to_frags<QB>(df, dpt);
}

/* dK (scaled) and dV rounded to bf16, keys inside the sequence. */
template <int D>
__device__ __forceinline__ void write_dkdv(const Params &p, const float (&dk)[D / 2], const float (&dv)[D / 2], int b,
                                           int hk, int key_base, int g, int t4) {
    const int Tk = p.Tk;
    const long ldk = (long)p.Hkv * D;
    bf16 *gdk = (bf16 *)p.dk + tok_off(b, 0, hk, Tk, p.Hkv, D), *gdv = (bf16 *)p.dv + tok_off(b, 0, hk, Tk, p.Hkv, D);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int key = key_base + g + 8 * r;
        if (key >= Tk) continue;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            const long o = (long)key * ldk + 8 * n + 2 * t4;
            *reinterpret_cast<__nv_bfloat162 *>(gdk + o) =
                __floats2bfloat162_rn(dk[4 * n + 2 * r] * p.scale, dk[4 * n + 2 * r + 1] * p.scale);
            *reinterpret_cast<__nv_bfloat162 *>(gdv + o) = __floats2bfloat162_rn(dv[4 * n + 2 * r], dv[4 * n + 2 * r + 1]);
        }
    }
}

template <int D, bool DQ, bool GEN>
__global__ void __launch_bounds__(BWD_NTH, 1) bwd_kernel(const Params pin, float *dq_acc, const BlockOrder order) {
    const Params p = GEN ? pin : causal_params(pin); /* GEN: a prefix or key_lo (see causal_params) */
    constexpr int NDQ = D == 128 ? 64 : 64;      /* dQ columns per warpgroup (see above) */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sK = reinterpret_cast<bf16 *>(smem_1024(smem_raw)); /* [D/64][KB][64] */
    bf16 *sV = sK + KB * D;
    bf16 *sQ = sV + KB * D;       /* 3 buffers of [D/64][QB][64]: tile it in buffer it % 3 */
    bf16 *sdO = sQ + 3 * QB * D;  /* 3 buffers */
    bf16 *sdS = sdO + 3 * QB * D; /* 2 buffers of [KB][QB]: dS^T, one column block */
    float *sL = reinterpret_cast<float *>(sdS + 2 * KB * QB); /* 3 x QB: lse */
    float *sDl = sL + 3 * QB;                                  /* 3 x QB: Delta */

    int kt, pair;
    order.map(blockIdx.x, kt, pair); /* earlier key tiles see more queries */
    const int hk = pair % p.Hkv, b = pair / p.Hkv;
    const int T = p.T, Tk = p.Tk, wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int g = lane >> 2, t4 = lane & 3;
    const int k0 = kt * KB;
    const long ldq = (long)p.H * D, ldk = (long)p.Hkv * D;
    const bf16 *gk = (const bf16 *)p.k + tok_off(b, 0, hk, Tk, p.Hkv, D);
    const bf16 *gv = (const bf16 *)p.v + tok_off(b, 0, hk, Tk, p.Hkv, D);
    int i0, ni;
    query_tiles(p, b, k0, i0, ni);
    const int n_it = p.G * ni; /* iteration it: head it / ni, query tile i0 + it % ni */

    auto load_q = [&](int it, int buf) {
        const int h = hk * p.G + it / ni, q0 = (i0 + it % ni) * QB;
        load_sw<QB, D, BWD_NTH>(sQ + buf * QB * D, (const bf16 *)p.q + tok_off(b, 0, h, T, p.H, D), ldq, q0, T);
        load_sw<QB, D, BWD_NTH>(sdO + buf * QB * D, (const bf16 *)p.d_o + tok_off(b, 0, h, T, p.H, D), ldq, q0, T);
        if (threadIdx.x < 2 * QB) { /* 4-byte copies, zero past the end */
            const int i = threadIdx.x & (QB - 1), q = q0 + i;
            const long row = ((long)b * p.H + h) * T + min(q, T - 1);
            if (threadIdx.x < QB) cp_async4(sL + buf * QB + i, p.lse + row, q < T);
            else cp_async4(sDl + buf * QB + i, p.delta + row, q < T);
        }
    };

    load_sw<KB, D, BWD_NTH>(sK, gk, ldk, k0, Tk);
    load_sw<KB, D, BWD_NTH>(sV, gv, ldk, k0, Tk);
    if (n_it) load_q(0, 0);
    cp_async_commit();

    float dk[D / 2], dv[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.0f;
    const int key_w = k0 + wg * 64;           /* this warpgroup's first key */
    const int key_base = key_w + warp * 16;   /* the warp's first key */
    const bf16 *kw = sK + wg * 64 * 64, *vw = sV + wg * 64 * 64; /* the warpgroup's rows */

    for (int it = 0; it < n_it; ++it) {
        const int buf = it % 3;
        if (it + 1 < n_it) {
            /* buffer (it+1) % 3 was last read in iteration it-2, finished before the first
             * barrier of iteration it-1: one barrier per iteration guards the buffers */
            load_q(it + 1, (it + 1) % 3);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_proxy_async();
        __syncthreads();
        const int h = hk * p.G + it / ni, q0 = (i0 + it % ni) * QB;
        const bf16 *tQ = sQ + buf * QB * D, *tdO = sdO + buf * QB * D;
        const float *tL = sL + buf * QB, *tDl = sDl + buf * QB;

        float st[QB / 2], dpt[QB / 2];
        kv_issue_scores<D>(st, dpt, kw, vw, tQ, tdO);
        wgmma_wait<1>();
        fence_regs(st);

        unsigned pf[QB / 16][4];
        kv_probs(st, pf, p, b, q0, key_base, tL);
        kv_issue_acc<D>(dv, pf, tdO);
        wgmma_wait<1>(); /* dP^T; dV may still run */
        fence_regs(dpt);

        unsigned df[QB / 16][4];
        kv_dscores(dpt, st, df, tDl);
        /* dS^T into shared memory for dQ: fragment i of step kk is row g + 8 (i & 1), columns
         * 16 kk + 8 (i >> 1) + 2 t4 .. +1 of the warp's 16 rows */
        bf16 *tdS = sdS + (it & 1) * KB * QB; /* last read in iteration it-2 */
        if constexpr (DQ) {
            const int r0 = wg * 64 + warp * 16 + g;
#pragma unroll
            for (int kk = 0; kk < QB / 16; ++kk)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    *reinterpret_cast<unsigned *>(tdS + sw_index<KB>(r0 + 8 * (i & 1), 16 * kk + 8 * (i >> 1) + 2 * t4)) =
                        df[kk][i];
        }
        kv_issue_acc<D>(dk, df, tQ);
        if constexpr (!DQ) {
            wgmma_wait<0>();
            fence_regs(dk);
            fence_regs(dv);
            fence_regs_u(pf);
            fence_regs_u(df);
            continue;
        }
        fence_proxy_async();
        __syncthreads(); /* dS^T of both warpgroups is in shared memory */

        /* dQ (64 queries x 64 columns) = dS K: D 128: all keys, columns 64 wg..; D 64: the
         * warpgroup's own keys, all columns */
        float dq[NDQ / 2];
        wgmma_fence();
        if constexpr (D == 128) {
#pragma unroll
            for (int kk = 0; kk < KB / 16; ++kk)
                wgmma_ss<1, 1>(dq, desc_sw128(tdS + kk * 16 * 64, QB * 128, 1024),
                               desc_sw128(sK + wg * KB * 64 + kk * 16 * 64, KB * 128, 1024), kk > 0);
        } else {
#pragma unroll
            for (int kk = 0; kk < 4; ++kk)
                wgmma_ss<1, 1>(dq, desc_sw128(tdS + (wg * 64 + kk * 16) * 64, QB * 128, 1024),
                               desc_sw128(sK + (wg * 64 + kk * 16) * 64, KB * 128, 1024), kk > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(dq);
        fence_regs(dk);
        fence_regs(dv);
        fence_regs_u(pf);
        fence_regs_u(df);

        /* 16-byte atomics: lanes t4 = 2i, 2i+1 swap halves so that the even lane holds columns
         * 4i..4i+3 of row g and the odd lane those of row g + 8 */
        const int col0 = D == 128 ? 64 * wg : 0;
        const bool odd = t4 & 1;
        const int q = q0 + warp * 16 + g + (odd ? 8 : 0);
        float *row = dq_acc + tok_off(b, 0, h, T, p.H, D) + col0 + (long)q * ldq + 4 * (t4 >> 1);
#pragma unroll
        for (int n = 0; n < NDQ / 8; ++n) {
            /* even lane sends its row g+8 pair, odd lane its row g pair */
            const float s0 = odd ? dq[4 * n] : dq[4 * n + 2], s1 = odd ? dq[4 * n + 1] : dq[4 * n + 3];
            const float r0 = __shfl_xor_sync(0xffffffffu, s0, 1), r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
            const float4 v = odd ? make_float4(r0, r1, dq[4 * n + 2], dq[4 * n + 3])
                                 : make_float4(dq[4 * n], dq[4 * n + 1], r0, r1);
            if (q < T) atomicAdd(reinterpret_cast<float4 *>(row + 8 * n), v);
        }
    }

    cp_async_wait<0>(); /* no query tile (keys no query sees): the first loads are still pending */
    write_dkdv<D>(p, dk, dv, b, hk, key_base, g, t4);
}

/* dK and dV, warp-specialised: the arithmetic of bwd_kernel without dQ (the same bits), with a
 * producer warpgroup whose first thread loads the key/value tile and streams each iteration's Q
 * and dO tiles and lse and Delta rows by the bulk tensor copy into KV_ST stages, each with a
 * "full" and an "empty" mbarrier. PP: the consumer warpgroups take turns on the tensor cores
 * (named barriers 1 and 2), three times per tile (S^T and dP^T, dV, dK). */
template <int D, bool GEN, bool PP>
__global__ void __launch_bounds__(KV_WS_NTH, 1)
    dkdv_ws_kernel(const Params pin, const BlockOrder order, const __grid_constant__ CUtensorMap mq,
                   const __grid_constant__ CUtensorMap mdo, const __grid_constant__ CUtensorMap mk,
                   const __grid_constant__ CUtensorMap mv, const __grid_constant__ CUtensorMap ml,
                   const __grid_constant__ CUtensorMap mdl) {
    const Params p = GEN ? pin : causal_params(pin);
    constexpr int ST = KV_ST;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sK = reinterpret_cast<bf16 *>(smem_1024(smem_raw)); /* [D/64][KB][64] */
    bf16 *sV = sK + KB * D;
    bf16 *sQ = sV + KB * D;        /* ST stages of [D/64][QB][64]: iteration it in stage it % ST */
    bf16 *sdO = sQ + ST * QB * D;
    float *sL = reinterpret_cast<float *>(sdO + ST * QB * D); /* ST x QB: lse */
    float *sDl = sL + ST * QB;                                 /* ST x QB: Delta */
    uint64_t *full_kv = reinterpret_cast<uint64_t *>(sDl + ST * QB);
    uint64_t *full = full_kv + 1, *empty = full + ST;

    int kt, pair;
    order.map(blockIdx.x, kt, pair);
    const int hk = pair % p.Hkv, b = pair / p.Hkv;
    const int k0 = kt * KB;
    int i0, ni;
    query_tiles(p, b, k0, i0, ni);
    const int n_it = p.G * ni; /* iteration it: head it / ni, query tile i0 + it % ni */
    init_pipeline(full_kv, 1 + ST, ST); /* from here the roles run apart */

    if (threadIdx.x >= 256) { /* the producer warpgroup */
        setmaxnreg_dec<24>();
        if (threadIdx.x == 256) {
            mbar_expect_tx(full_kv, 2 * KB * D * sizeof(bf16));
            tma_load_tile<KB, D>(sK, &mk, full_kv, hk, k0, b);
            tma_load_tile<KB, D>(sV, &mv, full_kv, hk, k0, b);
            for (int it = 0; it < n_it; ++it) {
                const int s = it % ST, h = hk * p.G + it / ni, q0 = (i0 + it % ni) * QB;
                mbar_wait(empty + s, ((it / ST) & 1) ^ 1);
                mbar_expect_tx(full + s, 2 * QB * D * sizeof(bf16) + 2 * QB * sizeof(float));
                tma_load_tile<QB, D>(sQ + s * QB * D, &mq, full + s, h, q0, b);
                tma_load_tile<QB, D>(sdO + s * QB * D, &mdo, full + s, h, q0, b);
                /* rows past the end read as zeros, as bwd_kernel's copies */
                tma_load_2d(sL + s * QB, &ml, full + s, q0, b * p.H + h);
                tma_load_2d(sDl + s * QB, &mdl, full + s, q0, b * p.H + h);
            }
        }
        return;
    }

    setmaxnreg_inc<240>();
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int g = lane >> 2, t4 = lane & 3;
    float dk[D / 2], dv[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.0f;
    const int key_w = k0 + wg * 64;
    const int key_base = key_w + warp * 16;
    const bf16 *kw = sK + wg * 64 * 64, *vw = sV + wg * 64 * 64;
    Turns<PP> turns(wg, 3 * n_it); /* per tile: S^T and dP^T, dV, dK */
    mbar_wait(full_kv, 0); /* also when no query sees these keys: the copy must land before exit */

    for (int it = 0; it < n_it; ++it) {
        const int buf = it % ST;
        mbar_wait(full + buf, (it / ST) & 1);
        const int q0 = (i0 + it % ni) * QB;
        const bf16 *tQ = sQ + buf * QB * D, *tdO = sdO + buf * QB * D;
        const float *tL = sL + buf * QB, *tDl = sDl + buf * QB;

        float st[QB / 2], dpt[QB / 2];
        turns.begin();
        kv_issue_scores<D>(st, dpt, kw, vw, tQ, tdO);
        turns.end();
        wgmma_wait<1>();
        fence_regs(st);

        unsigned pf[QB / 16][4];
        kv_probs(st, pf, p, b, q0, key_base, tL);
        turns.begin();
        kv_issue_acc<D>(dv, pf, tdO);
        turns.end();
        wgmma_wait<1>(); /* dP^T; dV may still run */
        fence_regs(dpt);

        unsigned df[QB / 16][4];
        kv_dscores(dpt, st, df, tDl);
        turns.begin();
        kv_issue_acc<D>(dk, df, tQ);
        turns.end();
        wgmma_wait<0>();
        fence_regs(dk);
        fence_regs(dv);
        fence_regs_u(pf);
        fence_regs_u(df);
        mbar_release_warp(empty + buf);
    }
    write_dkdv<D>(p, dk, dv, b, hk, key_base, g, t4);
}
#else
template <int D, bool DQ, bool GEN> __global__ void bwd_kernel(const Params, float *, const BlockOrder) {} /* not built for sm_90a: never launched */
template <int D, bool GEN, bool PP>
__global__ void dkdv_ws_kernel(const Params, const BlockOrder, const __grid_constant__ CUtensorMap,
                               const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                               const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                               const __grid_constant__ CUtensorMap) {}
#endif

/* dq = bf16(scale * dq_acc), 8 elements per thread (n is a multiple of 8: D is). */
__global__ void dq_round_kernel(const float *dq_acc, bf16 *dq, long n, float scale) {
    const long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= n) return;
    const float4 a = *reinterpret_cast<const float4 *>(dq_acc + i), c = *reinterpret_cast<const float4 *>(dq_acc + i + 4);
    __nv_bfloat162 r[4] = {__floats2bfloat162_rn(a.x * scale, a.y * scale), __floats2bfloat162_rn(a.z * scale, a.w * scale),
                           __floats2bfloat162_rn(c.x * scale, c.y * scale), __floats2bfloat162_rn(c.z * scale, c.w * scale)};
    *reinterpret_cast<uint4 *>(dq + i) = *reinterpret_cast<const uint4 *>(r);
}

template <int D, bool DQ, bool GEN> static void bwd_launch(const Params &p, float *dq_acc, cudaStream_t st) {
    constexpr size_t smem = bwd_smem_bytes<D>();
    static_assert(smem <= 227 * 1024, "shared memory over the sm_90 limit");
    const int tiles = (p.Tk + KB - 1) / KB;
    const unsigned grid = tile_grid(bwd_kernel<D, DQ, GEN>, smem, tiles, p.B * p.Hkv, "B*Hkv*Tk", KB);
    /* per kv head: its keys and values, and the queries and output gradients of its group */
    const BlockOrder order = block_order(tiles, p.B * p.Hkv, ((size_t)p.Tk * 2 + (size_t)p.T * 2 * p.G) * D * sizeof(bf16));
    bwd_kernel<D, DQ, GEN><<<grid, BWD_NTH, smem, st>>>(p, dq_acc, order);
    GDN_CUDA_CHECK_LAUNCH();
}

/* ---- dQ alone (deterministic) ---------------------------------------------------------------
 * One block of two warpgroups per 128-row query tile of one (b, h); warpgroup w owns rows
 * 64w.. and keeps their fp32 dQ (64 x D) in registers. Key / value tiles of 64 rows stream
 * through shared memory (three buffers). Per tile: S = Q K^T and dP = dO V^T (both operands in
 * shared memory), P = exp(scale S - lse) (masked), dS = P (dP - Delta), dQ += dS K (dS from
 * registers, K read transposed). Every sum in a fixed order: the result is the same bits on
 * every run. Shared memory (D 128): Q, dO 64 KB, 3 x (K, V) 96 KB. */
constexpr int DQ_BM = 128, DQ_BN = 64;

template <int D> constexpr size_t dq_smem_bytes() {
    return (size_t)(2 * DQ_BM * D + 6 * DQ_BN * D) * sizeof(bf16) + 1024;
}
/* The warp-specialised dQ kernel: 2 consumer warpgroups and a producer warpgroup; DQ_ST stages
 * of (K, V), then the mbarriers (full Q/dO, full per stage, empty per stage). */
constexpr int DQ_WS_NTH = 384, DQ_ST = 4;
template <int D> constexpr size_t dq_ws_smem_bytes() {
    return (size_t)(2 * DQ_BM * D + 2 * DQ_ST * DQ_BN * D) * sizeof(bf16) + (1 + 2 * DQ_ST) * sizeof(uint64_t) + 1024;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* ---- one key tile of the dQ kernels (dq_kernel, dq_ws_kernel): the same instructions in the
 * same order in both, so the same bits ---- */

/* Issue S = Q K^T, then dP = dO V^T (two commit groups; qw, ow: the warpgroup's 64 rows). */
template <int D>
__device__ __forceinline__ void dq_issue_scores(float (&s)[DQ_BN / 2], float (&dp)[DQ_BN / 2], const bf16 *qw,
                                                const bf16 *ow, const bf16 *tK, const bf16 *tV) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
        wgmma_ss<0, 0>(s, desc_sw128(qw + (kk >> 2) * DQ_BM * 64 + (kk & 3) * 16, 16, 1024),
                       desc_sw128(tK + (kk >> 2) * DQ_BN * 64 + (kk & 3) * 16, 16, 1024), kk > 0);
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
        wgmma_ss<0, 0>(dp, desc_sw128(ow + (kk >> 2) * DQ_BM * 64 + (kk & 3) * 16, 16, 1024),
                       desc_sw128(tV + (kk >> 2) * DQ_BN * 64 + (kk & 3) * 16, 16, 1024), kk > 0);
    wgmma_commit();
}

/* dS = P (dP - Delta) in dp with P = exp(scale S - lse), masked, and as bf16 A fragments; k0: the
 * tile's first key, row_base: the warp's first query row, lse2 / dlt: this lane's rows' lse (base
 * 2) and Delta, lo / lo_max: their first keys and that of the warp's last row. */
__device__ __forceinline__ void dq_dscores(const float (&s)[DQ_BN / 2], float (&dp)[DQ_BN / 2], unsigned (&df)[DQ_BN / 16][4],
                                           const Params &p, int k0, int row_base, const float (&lse2)[2],
                                           const float (&dlt)[2], const int (&lo)[2], int lo_max) {
    constexpr int NS = DQ_BN / 8;
    const int g = (threadIdx.x & 31) >> 2, t4 = threadIdx.x & 3, T = p.T, Tk = p.Tk;
    const bool need_mask = k0 + DQ_BN - 1 > p.qp + row_base || k0 + DQ_BN > Tk || row_base + 16 > T || k0 < lo_max;
#pragma unroll
    for (int n = 0; n < NS; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float x = ex2(fmaf(s[4 * n + e], p.scale_log2, -lse2[e >> 1]));
            if (need_mask) {
                const int col = k0 + 8 * n + 2 * t4 + (e & 1), row = row_base + g + 8 * (e >> 1);
                if (!key_visible(p, row, col, lo[e >> 1])) x = 0.0f;
            }
            dp[4 * n + e] = x * (dp[4 * n + e] - dlt[e >> 1]);
        }
    acc_to_frags<DQ_BN>(df, dp);
}

/* Issue dQ += dS K (one commit group; K read transposed). */
template <int D>
__device__ __forceinline__ void dq_issue_acc(float (&dq)[D / 2], const unsigned (&df)[DQ_BN / 16][4], const bf16 *tK) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < DQ_BN / 16; ++kk)
        wgmma_rs(dq, df[kk], desc_sw128(tK + kk * 16 * 64, DQ_BN * 128, 1024), 1);
    wgmma_commit();
}

/* dQ's epilogue: scaled, rounded to bf16, rows inside the sequence. */
template <int D>
__device__ __forceinline__ void write_dq(const Params &p, const float (&dq)[D / 2], int b, int h, int row_base, int g,
                                         int t4, long ldq) {
    const int T = p.T;
    bf16 *gdq = (bf16 *)p.dq + tok_off(b, 0, h, T, p.H, D);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = row_base + g + 8 * r;
        if (row >= T) continue;
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
            *reinterpret_cast<__nv_bfloat162 *>(gdq + (long)row * ldq + 8 * n + 2 * t4) =
                __floats2bfloat162_rn(dq[4 * n + 2 * r] * p.scale, dq[4 * n + 2 * r + 1] * p.scale);
    }
}

template <int D, bool GEN>
__global__ void __launch_bounds__(BWD_NTH, 1) dq_kernel(const Params pin, const BlockOrder order) {
    const Params p = GEN ? pin : causal_params(pin); /* GEN: a prefix or key_lo (see causal_params) */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem_1024(smem_raw)); /* [D/64][DQ_BM][64] */
    bf16 *sdO = sQ + DQ_BM * D;
    bf16 *sK = sdO + DQ_BM * D;      /* 3 buffers of [D/64][DQ_BN][64]: tile j in buffer j % 3 */
    bf16 *sV = sK + 3 * DQ_BN * D;   /* 3 buffers */

    int b, h, q0, j0, nt; /* key tiles j0 .. j0+nt-1, as in the forward; tile j0+j in buffer j % 3 */
    query_tile<DQ_BM, DQ_BN>(p, order, blockIdx.x, b, h, q0, j0, nt);
    const int hk = h / p.G, T = p.T, Tk = p.Tk;
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int g = lane >> 2, t4 = lane & 3;
    const long ldq = (long)p.H * D, ldk = (long)p.Hkv * D;
    const bf16 *gk = (const bf16 *)p.k + tok_off(b, 0, hk, Tk, p.Hkv, D);
    const bf16 *gv = (const bf16 *)p.v + tok_off(b, 0, hk, Tk, p.Hkv, D);

    load_sw<DQ_BM, D, BWD_NTH>(sQ, (const bf16 *)p.q + tok_off(b, 0, h, T, p.H, D), ldq, q0, T);
    load_sw<DQ_BM, D, BWD_NTH>(sdO, (const bf16 *)p.d_o + tok_off(b, 0, h, T, p.H, D), ldq, q0, T);
    load_sw<DQ_BN, D, BWD_NTH>(sK, gk, ldk, j0 * DQ_BN, Tk);
    load_sw<DQ_BN, D, BWD_NTH>(sV, gv, ldk, j0 * DQ_BN, Tk);
    cp_async_commit();

    const int row_base = q0 + wg * 64 + warp * 16; /* the warp's first query row */
    float lse2[2], dlt[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = row_base + g + 8 * r;
        lse2[r] = row < T ? p.lse[((long)b * p.H + h) * T + row] * ATTN_LOG2E : 0.0f;
        dlt[r] = row < T ? p.delta[((long)b * p.H + h) * T + row] : 0.0f;
    }
    const int lo[2] = {key_lo_at(p, b, row_base + g), key_lo_at(p, b, row_base + g + 8)};
    const int lo_max = key_lo_at(p, b, row_base + 15);
    float dq[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dq[i] = 0.0f;
    const bf16 *qw = sQ + wg * 64 * 64, *ow = sdO + wg * 64 * 64; /* the warpgroup's rows */

    for (int j = 0; j < nt; ++j) {
        /* tile j+1 overwrites tile j-2, whose readers finished before the barrier of iteration j-1 */
        if (j + 1 < nt) {
            load_sw<DQ_BN, D, BWD_NTH>(sK + ((j + 1) % 3) * DQ_BN * D, gk, ldk, (j0 + j + 1) * DQ_BN, Tk);
            load_sw<DQ_BN, D, BWD_NTH>(sV + ((j + 1) % 3) * DQ_BN * D, gv, ldk, (j0 + j + 1) * DQ_BN, Tk);
        }
        cp_async_commit();
        cp_async_wait<1>();
        fence_proxy_async();
        __syncthreads();
        const bf16 *tK = sK + (j % 3) * DQ_BN * D, *tV = sV + (j % 3) * DQ_BN * D;

        float s[DQ_BN / 2], dp[DQ_BN / 2];
        dq_issue_scores<D>(s, dp, qw, ow, tK, tV);
        wgmma_wait<0>();
        fence_regs(s);
        fence_regs(dp);

        unsigned df[DQ_BN / 16][4];
        dq_dscores(s, dp, df, p, (j0 + j) * DQ_BN, row_base, lse2, dlt, lo, lo_max);
        dq_issue_acc<D>(dq, df, tK);
        wgmma_wait<0>();
        fence_regs(dq);
        fence_regs_u(df);
    }

    write_dq<D>(p, dq, b, h, row_base, g, t4, ldq);
}

/* dQ alone, warp-specialised: the arithmetic of dq_kernel (the same sums in the same order, so
 * the same bits), with a producer warpgroup whose first thread loads Q and dO once and streams
 * the key/value tiles by the bulk tensor copy into DQ_ST stages (a "full" and an "empty" mbarrier
 * each), and no block barrier between the consumer warpgroups. PP: they take turns on the tensor
 * cores (named barriers 1 and 2), twice per tile (S and dP, then dQ). */
template <int D, bool GEN, bool PP>
__global__ void __launch_bounds__(DQ_WS_NTH, 1)
    dq_ws_kernel(const Params pin, const BlockOrder order, const __grid_constant__ CUtensorMap mq,
                 const __grid_constant__ CUtensorMap mdo, const __grid_constant__ CUtensorMap mk,
                 const __grid_constant__ CUtensorMap mv) {
    const Params p = GEN ? pin : causal_params(pin);
    constexpr int ST = DQ_ST;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem_1024(smem_raw)); /* [D/64][DQ_BM][64] */
    bf16 *sdO = sQ + DQ_BM * D;
    bf16 *sK = sdO + DQ_BM * D;       /* ST stages of [D/64][DQ_BN][64]: tile j in stage j % ST */
    bf16 *sV = sK + ST * DQ_BN * D;
    uint64_t *full_q = reinterpret_cast<uint64_t *>(sV + ST * DQ_BN * D);
    uint64_t *full = full_q + 1, *empty = full + ST; /* per stage: its K and V tiles */

    int b, h, q0, j0, nt;
    query_tile<DQ_BM, DQ_BN>(p, order, blockIdx.x, b, h, q0, j0, nt);
    const int hk = h / p.G, T = p.T;
    init_pipeline(full_q, 1 + ST, ST); /* from here the roles run apart */

    if (threadIdx.x >= 256) { /* the producer warpgroup */
        setmaxnreg_dec<24>();
        if (threadIdx.x == 256) {
            mbar_expect_tx(full_q, 2 * DQ_BM * D * sizeof(bf16));
            tma_load_tile<DQ_BM, D>(sQ, &mq, full_q, h, q0, b);
            tma_load_tile<DQ_BM, D>(sdO, &mdo, full_q, h, q0, b);
            for (int j = 0; j < nt; ++j) {
                const int s = j % ST, row = (j0 + j) * DQ_BN;
                mbar_wait(empty + s, ((j / ST) & 1) ^ 1);
                mbar_expect_tx(full + s, 2 * DQ_BN * D * sizeof(bf16));
                tma_load_tile<DQ_BN, D>(sK + s * DQ_BN * D, &mk, full + s, hk, row, b);
                tma_load_tile<DQ_BN, D>(sV + s * DQ_BN * D, &mv, full + s, hk, row, b);
            }
        }
        return;
    }

    setmaxnreg_inc<240>();
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int g = lane >> 2, t4 = lane & 3;
    const long ldq = (long)p.H * D;
    const int row_base = q0 + wg * 64 + warp * 16;
    float lse2[2], dlt[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = row_base + g + 8 * r;
        lse2[r] = row < T ? p.lse[((long)b * p.H + h) * T + row] * ATTN_LOG2E : 0.0f;
        dlt[r] = row < T ? p.delta[((long)b * p.H + h) * T + row] : 0.0f;
    }
    const int lo[2] = {key_lo_at(p, b, row_base + g), key_lo_at(p, b, row_base + g + 8)};
    const int lo_max = key_lo_at(p, b, row_base + 15);
    float dq[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dq[i] = 0.0f;
    const bf16 *qw = sQ + wg * 64 * 64, *ow = sdO + wg * 64 * 64;
    Turns<PP> turns(wg, 2 * nt); /* per tile: S and dP, dQ */
    mbar_wait(full_q, 0);

    for (int j = 0; j < nt; ++j) {
        const int st = j % ST;
        mbar_wait(full + st, (j / ST) & 1);
        const bf16 *tK = sK + st * DQ_BN * D, *tV = sV + st * DQ_BN * D;

        float s[DQ_BN / 2], dp[DQ_BN / 2];
        turns.begin();
        dq_issue_scores<D>(s, dp, qw, ow, tK, tV);
        turns.end();
        wgmma_wait<0>();
        fence_regs(s);
        fence_regs(dp);

        unsigned df[DQ_BN / 16][4];
        dq_dscores(s, dp, df, p, (j0 + j) * DQ_BN, row_base, lse2, dlt, lo, lo_max);
        turns.begin();
        dq_issue_acc<D>(dq, df, tK);
        turns.end();
        wgmma_wait<0>();
        fence_regs(dq);
        fence_regs_u(df);
        mbar_release_warp(empty + st);
    }
    write_dq<D>(p, dq, b, h, row_base, g, t4, ldq);
}
#else
template <int D, bool GEN> __global__ void dq_kernel(const Params, const BlockOrder) {} /* not built for sm_90a: never launched */
template <int D, bool GEN, bool PP>
__global__ void dq_ws_kernel(const Params, const BlockOrder, const __grid_constant__ CUtensorMap,
                             const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                             const __grid_constant__ CUtensorMap) {}
#endif

template <int D, bool GEN> static void dq_launch(const Params &p, cudaStream_t st) {
    constexpr size_t smem = dq_smem_bytes<D>();
    static_assert(smem <= 227 * 1024, "shared memory over the sm_90 limit");
    const int tiles = (p.T + DQ_BM - 1) / DQ_BM;
    const unsigned grid = tile_grid(dq_kernel<D, GEN>, smem, tiles, p.B * p.H, "B*H*T", DQ_BM);
    const BlockOrder order = block_order(tiles, p.B * p.H, (size_t)p.Tk * D * 2 * sizeof(bf16));
    dq_kernel<D, GEN><<<grid, BWD_NTH, smem, st>>>(p, order);
    GDN_CUDA_CHECK_LAUNCH();
}

template <int D, bool GEN, bool PP> static void dkdv_ws_launch(const Params &p, cudaStream_t st) {
    constexpr size_t smem = kv_ws_smem_bytes<D>();
    static_assert(smem <= 227 * 1024, "shared memory over the sm_90 limit");
    const int tiles = (p.Tk + KB - 1) / KB;
    const unsigned grid = tile_grid(dkdv_ws_kernel<D, GEN, PP>, smem, tiles, p.B * p.Hkv, "B*Hkv*Tk", KB);
    const BlockOrder order = block_order(tiles, p.B * p.Hkv, ((size_t)p.Tk * 2 + (size_t)p.T * 2 * p.G) * D * sizeof(bf16));
    const CUtensorMap mq = tile_map(p.q, p.B, p.T, p.H, D, QB), mdo = tile_map(p.d_o, p.B, p.T, p.H, D, QB),
                      mk = tile_map(p.k, p.B, p.Tk, p.Hkv, D, KB), mv = tile_map(p.v, p.B, p.Tk, p.Hkv, D, KB),
                      ml = row_map(p.lse, p.B * p.H, p.T, QB), mdl = row_map(p.delta, p.B * p.H, p.T, QB);
    dkdv_ws_kernel<D, GEN, PP><<<grid, KV_WS_NTH, smem, st>>>(p, order, mq, mdo, mk, mv, ml, mdl);
    GDN_CUDA_CHECK_LAUNCH();
}

template <int D, bool GEN, bool PP> static void dq_ws_launch(const Params &p, cudaStream_t st) {
    constexpr size_t smem = dq_ws_smem_bytes<D>();
    static_assert(smem <= 227 * 1024, "shared memory over the sm_90 limit");
    const int tiles = (p.T + DQ_BM - 1) / DQ_BM;
    const unsigned grid = tile_grid(dq_ws_kernel<D, GEN, PP>, smem, tiles, p.B * p.H, "B*H*T", DQ_BM);
    const BlockOrder order = block_order(tiles, p.B * p.H, (size_t)p.Tk * D * 2 * sizeof(bf16));
    const CUtensorMap mq = tile_map(p.q, p.B, p.T, p.H, D, DQ_BM), mdo = tile_map(p.d_o, p.B, p.T, p.H, D, DQ_BM),
                      mk = tile_map(p.k, p.B, p.Tk, p.Hkv, D, DQ_BN), mv = tile_map(p.v, p.B, p.Tk, p.Hkv, D, DQ_BN);
    dq_ws_kernel<D, GEN, PP><<<grid, DQ_WS_NTH, smem, st>>>(p, order, mq, mdo, mk, mv);
    GDN_CUDA_CHECK_LAUNCH();
}

} // namespace sm90a
} // namespace attn

void attn::sm90a_bwd(const attn::Params &p, int D, float *dq_acc, int kv_kernel, int dq_kernel, void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
    const bool gen = p.key_lo || p.qp; /* a prefix or documents: the general instantiation */
    if (!dq_acc) { /* deterministic: dK, dV per key tile, then dQ per query tile */
        auto run = [&](auto d, auto g) {
            constexpr int Dv = decltype(d)::value;
            constexpr bool G = decltype(g)::value;
            if (kv_kernel == 0) attn::sm90a::bwd_launch<Dv, false, G>(p, NULL, st);
            else if (kv_kernel == 1) attn::sm90a::dkdv_ws_launch<Dv, G, true>(p, st);
            else attn::sm90a::dkdv_ws_launch<Dv, G, false>(p, st);
            if (dq_kernel == 0) attn::sm90a::dq_launch<Dv, G>(p, st);
            else if (dq_kernel == 1) attn::sm90a::dq_ws_launch<Dv, G, true>(p, st);
            else attn::sm90a::dq_ws_launch<Dv, G, false>(p, st);
        };
        dispatch(D, gen, run);
        return;
    }
    const long n = (long)p.B * p.T * p.H * D;
    GDN_CUDA_CHECK(cudaMemsetAsync(dq_acc, 0, (size_t)n * sizeof(float), st));
    dispatch(D, gen, [&](auto d, auto g) {
        attn::sm90a::bwd_launch<decltype(d)::value, true, decltype(g)::value>(p, dq_acc, st);
    });
    const long threads = n / 8;
    attn::sm90a::dq_round_kernel<<<(unsigned)((threads + 255) / 256), 256, 0, st>>>(dq_acc, (attn::bf16 *)p.dq, n, p.scale);
    GDN_CUDA_CHECK_LAUNCH();
}
