/* Causal attention forward (see attention_cuda.h).
 *
 * bf16: one block of W warps (4 or 8, attention_cuda.h) per 16W-row query tile of one (b, h);
 * each warp owns 16 query rows
 * and keeps their Q fragments, the fp32 output accumulator and the running max / sum in
 * registers. Key/value tiles of 64 rows stream through shared memory (cp.async, double
 * buffered); per tile S = Q K^T (fp32), the causal / length mask on the tiles that need it,
 * the online-softmax update in base 2, then O += P V with P rounded to bf16. Query tiles are
 * launched longest first (the diagonal makes later tiles longer). Shared memory: a 16W-row Q tile
 * and 2 K + 2 V tiles of 64 rows, (D+8) bf16 each: 45 / 55 KB (D 64, W 4 / 8), 85 / 104 KB
 * (D 128).
 *
 * fp32: one warp per query row, keys one at a time with the same online softmax (simple and
 * exact; for tests, not speed). */
#include "model/cuda/attention_common.cuh"
#include "model/cuda/sm90a/attention_sm90a.h"

namespace attn {

/* W warps per block: 16 W query rows per block, key/value tiles of 64 rows */
constexpr int FWD_BN = 64;

template <int D, int W> constexpr size_t fwd_smem_bytes() {
    return (size_t)(16 * W + 4 * FWD_BN) * (D + 8) * sizeof(bf16);
}

template <int D, int W>
__global__ void __launch_bounds__(W * 32) fwd_bf16_kernel(const Params p) {
    constexpr int FWD_BM = 16 * W, FWD_NTH = 32 * W;
    constexpr int LDS = D + 8, KT = D / 16, NS = FWD_BN / 8, NO = D / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem_raw);
    bf16 *sK = sQ + FWD_BM * LDS;    /* 2 buffers */
    bf16 *sV = sK + 2 * FWD_BN * LDS; /* 2 buffers */

    const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int hk = h / p.G, T = p.T, Tk = p.Tk;
    const int warp = threadIdx.x >> 5;
    const int q0 = qt * FWD_BM;
    const long ldq = (long)p.H * D, ldk = (long)p.Hkv * D;
    const bf16 *gq = (const bf16 *)p.q + tok_off(b, 0, h, T, p.H, D);
    const bf16 *gk = (const bf16 *)p.k + tok_off(b, 0, hk, Tk, p.Hkv, D);
    const bf16 *gv = (const bf16 *)p.v + tok_off(b, 0, hk, Tk, p.Hkv, D);

    /* key tiles j0 .. n_kv-1 cover keys key_lo(q0) .. qp + min(T, q0 + BM) - 1 (key_lo rises
     * along the rows, so the tile's first row has the lowest) */
    const int q_end = min(T, q0 + FWD_BM);
    const int n_kv = (p.qp + q_end + FWD_BN - 1) / FWD_BN, j0 = key_lo_at(p, b, q0) / FWD_BN;

    load_tile<FWD_BM, D, FWD_NTH>(sQ, gq, ldq, q0, T);
    load_tile<FWD_BN, D, FWD_NTH>(sK + (j0 & 1) * FWD_BN * LDS, gk, ldk, j0 * FWD_BN, Tk);
    load_tile<FWD_BN, D, FWD_NTH>(sV + (j0 & 1) * FWD_BN * LDS, gv, ldk, j0 * FWD_BN, Tk);
    cp_async_commit();

    unsigned qf[KT][4];
    float oacc[NO][4];
    zero(oacc);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const int row_base = q0 + warp * 16; /* the warp's first query row */
    const int lo[2] = {key_lo_at(p, b, row_base + frag_row(0)), key_lo_at(p, b, row_base + frag_row(2))};
    const int lo_warp = key_lo_at(p, b, row_base + 15); /* the highest of the warp's rows */

    for (int j = j0; j < n_kv; ++j) {
        const int buf = j & 1;
        if (j + 1 < n_kv) {
            /* buffer buf^1 was last read in iteration j-1, which ended with a barrier */
            load_tile<FWD_BN, D, FWD_NTH>(sK + (buf ^ 1) * FWD_BN * LDS, gk, ldk, (j + 1) * FWD_BN, Tk);
            load_tile<FWD_BN, D, FWD_NTH>(sV + (buf ^ 1) * FWD_BN * LDS, gv, ldk, (j + 1) * FWD_BN, Tk);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (j == j0) load_a<KT>(qf, sQ + warp * 16 * LDS, LDS);

        float s[NS][4];
        zero(s);
        mma_abt<NS, KT>(s, qf, sK + buf * FWD_BN * LDS, LDS);

        const int k0 = j * FWD_BN;
        /* scores in base-2 units; mask keys after the row, past the end or before the document */
        const bool need_mask = k0 + FWD_BN - 1 > p.qp + row_base || k0 + FWD_BN > Tk || k0 < lo_warp;
#pragma unroll
        for (int n = 0; n < NS; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float x = s[n][e] * p.scale_log2;
                if (need_mask) {
                    const int col = k0 + frag_col(n, e), row = row_base + frag_row(e);
                    if (!key_visible(p, row, col, lo[e >> 1])) x = -INFINITY;
                }
                s[n][e] = x;
            }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = -INFINITY;
#pragma unroll
            for (int n = 0; n < NS; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
            mx = quad_max(mx);
            const float m_new = fmaxf(m[r], mx);
            /* a row with no key yet keeps m = -inf; subtract 0 then so no inf - inf appears */
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = exp2f(m[r] - m_use);
            float sum = 0.0f;
#pragma unroll
            for (int n = 0; n < NS; ++n) {
                s[n][2 * r] = exp2f(s[n][2 * r] - m_use);
                s[n][2 * r + 1] = exp2f(s[n][2 * r + 1] - m_use);
                sum += s[n][2 * r] + s[n][2 * r + 1];
            }
            l[r] = l[r] * alpha + sum; /* this lane's partial row sum */
            m[r] = m_new;
#pragma unroll
            for (int n = 0; n < NO; ++n) {
                oacc[n][2 * r] *= alpha;
                oacc[n][2 * r + 1] *= alpha;
            }
        }
        unsigned pf[NS / 2][4];
        acc_to_a<NS>(pf, s);
        mma_ab<NO, NS / 2>(oacc, pf, sV + buf * FWD_BN * LDS, LDS);
        __syncthreads(); /* everyone is done with buffer buf before it is refilled */
    }

    fwd_write_out<D>(p, [&](int n, int e) { return oacc[n][e]; }, m, l, b, h, row_base);
}

/* fp32: warp per query row (b, t, h); lane holds elements lane + 32 i of q and o. */
template <int D>
__global__ void __launch_bounds__(128) fwd_f32_kernel(const Params p) {
    constexpr int E = D / 32;
    const long row = (long)blockIdx.x * 4 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    const long nrows = (long)p.B * p.T * p.H;
    if (row >= nrows) return;
    const int h = (int)(row % p.H), t = (int)((row / p.H) % p.T), b = (int)(row / ((long)p.H * p.T));
    const int hk = h / p.G;
    const float *q = (const float *)p.q + tok_off(b, t, h, p.T, p.H, D);
    float qv[E], ov[E];
#pragma unroll
    for (int i = 0; i < E; ++i) {
        qv[i] = q[lane + 32 * i];
        ov[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int s = key_lo_at(p, b, t); s <= p.qp + t; ++s) {
        const float *k = (const float *)p.k + tok_off(b, s, hk, p.Tk, p.Hkv, D);
        const float *v = (const float *)p.v + tok_off(b, s, hk, p.Tk, p.Hkv, D);
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < E; ++i) d += qv[i] * k[lane + 32 * i];
        const float x = warp_sum(d) * p.scale;
        const float m_new = fmaxf(m, x);
        const float alpha = expf(m - m_new), e = expf(x - m_new);
        l = l * alpha + e;
#pragma unroll
        for (int i = 0; i < E; ++i) ov[i] = ov[i] * alpha + e * v[lane + 32 * i];
        m = m_new;
    }
    float *o = (float *)p.o_out + tok_off(b, t, h, p.T, p.H, D);
#pragma unroll
    for (int i = 0; i < E; ++i) o[lane + 32 * i] = ov[i] / l;
    if (lane == 0) p.lse[((long)b * p.H + h) * p.T + t] = m + logf(l);
}

template <int D, int W> static void fwd_bf16_launch(const Params &p, cudaStream_t st) {
    const size_t smem = fwd_smem_bytes<D, W>();
    static_assert(fwd_smem_bytes<D, W>() <= 227 * 1024, "shared memory over the sm_90 limit");
    GDN_CUDA_CHECK(cudaFuncSetAttribute(fwd_bf16_kernel<D, W>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
    const dim3 grid((p.T + 16 * W - 1) / (16 * W), p.H, p.B);
    fwd_bf16_kernel<D, W><<<grid, W * 32, smem, st>>>(p);
    GDN_CUDA_CHECK_LAUNCH();
}

template <int D> static void fwd_f32_launch(const Params &p, cudaStream_t st) {
    const long rows = (long)p.B * p.T * p.H;
    fwd_f32_kernel<D><<<(unsigned)((rows + 3) / 4), 128, 0, st>>>(p);
    GDN_CUDA_CHECK_LAUNCH();
}

} // namespace attn

extern "C" void gdn_cuda_attention_fwd(const gdn_cuda_attention_args *a) {
    gdn_cuda_attention_check(a, 0);
    const attn::Params p = attn::make_params(a);
    cudaStream_t st = (cudaStream_t)a->stream;
    if (a->fwd_algo < 0 || a->fwd_algo > 4)
        GDN_CUDA_DIE("attention: fwd_algo=%d: use 0 (fastest available), 1 (mma.sync), 2 (wgmma, cp.async), 3 (wgmma, "
                     "warp-specialised, warpgroups taking turns) or 4 (the same without turns)", a->fwd_algo);
    if (a->precision == GDN_CUDA_BF16 && a->fwd_algo != 1) {
        if (gdn_cuda_attention_sm90a_available()) {
            /* sm90a_fwd's kernel: 0 cp.async, 1 warp-specialised with turns (the fastest measured), 2
             * without; the default takes 1. Where the tensors do not suit the bulk tensor copy, 0
             * (the same bits) */
            const int ws = a->fwd_algo >= 3 ? a->fwd_algo - 2 : a->fwd_algo == 0 ? 1 : 0;
            attn::sm90a_fwd(p, a->D, attn::sm90a_ws_usable(p, attn::WS_FWD) ? ws : 0, a->stream);
            return;
        }
        if (a->fwd_algo >= 2)
            GDN_CUDA_DIE("attention: fwd_algo=%d (wgmma) needs a compute capability 9.0 GPU and a build for "
                         "architecture 90 (CMAKE_CUDA_ARCHITECTURES)", a->fwd_algo);
    }
    if (a->precision == GDN_CUDA_BF16) {
        const int w = attn::block_warps(a);
        if (a->D == 64) w == 8 ? attn::fwd_bf16_launch<64, 8>(p, st) : attn::fwd_bf16_launch<64, 4>(p, st);
        else w == 8 ? attn::fwd_bf16_launch<128, 8>(p, st) : attn::fwd_bf16_launch<128, 4>(p, st);
    } else {
        if (a->D == 64) attn::fwd_f32_launch<64>(p, st);
        else attn::fwd_f32_launch<128>(p, st);
    }
}
