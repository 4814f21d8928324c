/* Causal attention forward on Hopper's warpgroup tensor-core instructions (wgmma, sm_90a): the
 * bf16 path of gdn_cuda_attention_fwd on H100/H200 (attention_fwd.cu picks it; the mma.sync
 * kernel there remains for other GPUs and as the reference).
 *
 * One block of two warpgroups (256 threads) per 128-row query tile of one (b, h); warpgroup w
 * owns query rows 64w .. 64w+63 and keeps their fp32 output accumulator (64 x D) and running
 * max / sum in registers. Key/value tiles of 128 rows stream through shared memory (cp.async,
 * three buffers each). Per tile: S = Q K^T by wgmma with both operands in shared memory (64 x 128
 * per warpgroup, D/16 steps), the causal / length mask on the tiles that need it, the online
 * softmax in base 2, then O += P V by wgmma with P (rounded to bf16) from registers and V from
 * shared memory read transposed. Same arithmetic as the mma.sync kernel: fp32 accumulation,
 * probabilities rounded to bf16 only as the operand of P V. Per warpgroup the products are
 * pipelined: S of the next tile is issued together with P V of this one, and the softmax of the
 * next tile runs while P V is on the tensor cores.
 *
 * Shared-memory tiles use the 128-byte swizzle the wgmma descriptors describe: a tile of R rows x
 * D columns is stored as D/64 column blocks of R rows x 64 elements (128 bytes per row); the
 * 16-byte chunk c of row r sits at chunk c ^ (r % 8) of that row, and blocks start on 1024-byte
 * boundaries (the pattern repeats every 8 rows). Shared memory: Q + 3 K + 3 V tiles = 224 KB
 * (D 128), 112 KB (D 64). */
#include "model/cuda/attention_common.cuh"
#include "model/cuda/sm90a/attention_sm90a.h"
#include "model/cuda/sm90a/wgmma_common.cuh"

namespace attn {
namespace sm90a {

constexpr int BM = 128, BN = 128, NTH = 256;

template <int D> constexpr size_t fwd_smem_bytes() {
    return (size_t)(BM + 6 * BN) * D * sizeof(bf16) + 1024; /* + room to align to 1024 bytes */
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* Issue S = Q K^T for this warpgroup's 64 rows (qw: its rows of the Q tile; tK: a key tile). */
template <int D>
__device__ __forceinline__ void issue_s(float (&s)[BN / 2], const bf16 *qw, const bf16 *tK) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
        wgmma_ss<0, 0>(s, desc_sw128(qw + (kk >> 2) * BM * 64 + (kk & 3) * 16, 16, 1024),
                      desc_sw128(tK + (kk >> 2) * BN * 64 + (kk & 3) * 16, 16, 1024), kk > 0);
}

/* Issue O += P V (tV: a value tile, read transposed; pf: P in A-fragment layout). */
template <int D>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], const unsigned (&pf)[BN / 16][4], const bf16 *tV) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
        const uint64_t dv = desc_sw128(tV + kk * 16 * 64, BN * 128, 1024);
        wgmma_rs(o, pf[kk], dv, 1);
    }
}

/* Online softmax of one score tile (keys k0..k0+BN-1) in place: masks, updates the running max
 * m and sum l (this lane's partial), turns s into probabilities relative to the new max, and
 * returns in alpha the factor that rescales the output accumulated so far. */
/* lo: the first key of this lane's two rows (row_base + g, + 8), lo_max that of the warp's last
 * row (key_lo rises along the rows). */
__device__ __forceinline__ void softmax_tile(float (&s)[BN / 2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                             int k0, int row_base, const Params &p, const int (&lo)[2], int lo_max) {
    const int g = (threadIdx.x & 31) >> 2, t4 = threadIdx.x & 3;
    const float scale_log2 = p.scale_log2;
    if (k0 + BN - 1 > p.qp + row_base || k0 + BN > p.Tk || k0 < lo_max) {
#pragma unroll
        for (int n = 0; n < BN / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int col = k0 + 8 * n + 2 * t4 + (e & 1), row = row_base + g + 8 * (e >> 1);
                if (!key_visible(p, row, col, lo[e >> 1])) s[4 * n + e] = -INFINITY;
            }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < BN / 8; ++n) mx = fmaxf(mx, fmaxf(s[4 * n + 2 * r], s[4 * n + 2 * r + 1]));
        mx = quad_max(mx) * scale_log2; /* the max of the raw scores, in base-2 units (scale > 0) */
        const float m_new = fmaxf(m[r], mx);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new; /* no key yet: no inf - inf */
        alpha[r] = ex2(m[r] - m_use);
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < BN / 8; ++n) {
            s[4 * n + 2 * r] = ex2(fmaf(s[4 * n + 2 * r], scale_log2, -m_use));
            s[4 * n + 2 * r + 1] = ex2(fmaf(s[4 * n + 2 * r + 1], scale_log2, -m_use));
            sum += s[4 * n + 2 * r] + s[4 * n + 2 * r + 1];
        }
        l[r] = l[r] * alpha[r] + sum;
        m[r] = m_new;
    }
}

/* P as the A operand (16 keys per step): the accumulator layout of keys 16kk.. is the
 * A-fragment layout of that step. */
__device__ __forceinline__ void pack_p(unsigned (&pf)[BN / 16][4], const float (&s)[BN / 2]) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) pf[kk][i] = pack_bf16(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
}

/* Pipelined per warpgroup: while the tensor cores compute O += P_j V_j, the warps run the
 * softmax of tile j+1, whose scores S_{j+1} = Q K_{j+1}^T were issued just before. Loads run
 * two key tiles / one value tile ahead: iteration j fills K_{j+2} and V_{j+1} (cp.async group
 * j) and waits for group j-1 (K_{j+1}, V_j). */
template <int D, bool GEN>
__global__ void __launch_bounds__(NTH, 1) fwd_kernel(const Params pin, const BlockOrder order) {
    const Params p = GEN ? pin : causal_params(pin); /* GEN: a prefix or key_lo (see causal_params) */
    constexpr int NO = D / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem_1024(smem_raw)); /* [D/64][BM][64] */
    bf16 *sK = sQ + BM * D;     /* 3 buffers of [D/64][BN][64]: K_i in buffer i % 3 */
    bf16 *sV = sK + 3 * BN * D; /* 3 buffers: V_i in buffer i % 3 */

    int rank, pair;
    order.map(blockIdx.x, rank, pair);
    const int qt = order.tiles - 1 - rank, h = pair % p.H, b = pair / p.H; /* later query tiles are longer */
    const int hk = h / p.G, T = p.T, Tk = p.Tk;
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int q0 = qt * BM;
    const long ldq = (long)p.H * D, ldk = (long)p.Hkv * D;
    const bf16 *gq = (const bf16 *)p.q + tok_off(b, 0, h, T, p.H, D);
    const bf16 *gk = (const bf16 *)p.k + tok_off(b, 0, hk, Tk, p.Hkv, D);
    const bf16 *gv = (const bf16 *)p.v + tok_off(b, 0, hk, Tk, p.Hkv, D);
    /* key tiles j0 .. j0+nt-1 cover keys key_lo(q0) .. qp + min(T, q0 + BM) - 1; tile j0+i sits in
     * buffer i % 3 */
    const int j0 = key_lo_at(p, b, q0) / BN, nt = (p.qp + min(T, q0 + BM) + BN - 1) / BN - j0;

    load_sw<BM, D, NTH>(sQ, gq, ldq, q0, T);
    load_sw<BN, D, NTH>(sK, gk, ldk, j0 * BN, Tk);
    cp_async_commit();
    if (nt > 1) load_sw<BN, D, NTH>(sK + BN * D, gk, ldk, (j0 + 1) * BN, Tk);
    load_sw<BN, D, NTH>(sV, gv, ldk, j0 * BN, Tk);
    cp_async_commit();

    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];
    const int row_base = q0 + wg * 64 + warp * 16; /* the warp's first query row */
    const int g = lane >> 2, t4 = lane & 3;
    const int lo[2] = {key_lo_at(p, b, row_base + g), key_lo_at(p, b, row_base + g + 8)};
    const int lo_max = key_lo_at(p, b, row_base + 15);
    const bf16 *qw = sQ + wg * 64 * 64; /* this warpgroup's 64 rows of every column block */

    /* tile 0's scores and probabilities */
    cp_async_wait<1>();
    fence_proxy_async();
    __syncthreads();
    float s[BN / 2];
    unsigned pf[BN / 16][4];
    wgmma_fence();
    issue_s<D>(s, qw, sK);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(s);
    softmax_tile(s, m, l, alpha, j0 * BN, row_base, p, lo, lo_max);
    pack_p(pf, s);

    for (int j = 0; j + 1 < nt; ++j) { /* j: this block's tile count, key tile j0 + j */
        /* three buffers: K_{j+2} and V_{j+1} overwrite K_{j-1} and V_{j-2}, whose readers
         * finished before the barrier of iteration j-1, so one barrier per iteration suffices */
        if (j + 2 < nt) load_sw<BN, D, NTH>(sK + ((j + 2) % 3) * BN * D, gk, ldk, (j0 + j + 2) * BN, Tk);
        load_sw<BN, D, NTH>(sV + ((j + 1) % 3) * BN * D, gv, ldk, (j0 + j + 1) * BN, Tk);
        cp_async_commit();
        cp_async_wait<1>();
        fence_proxy_async();
        __syncthreads();

        wgmma_fence();
        issue_s<D>(s, qw, sK + ((j + 1) % 3) * BN * D);
        wgmma_commit();
        issue_pv<D>(o, pf, sV + (j % 3) * BN * D);
        wgmma_commit();
        wgmma_wait<1>(); /* S_{j+1}; P_j V_j may still run */
        fence_regs(s);
        softmax_tile(s, m, l, alpha, (j0 + j + 1) * BN, row_base, p, lo, lo_max);
        wgmma_wait<0>();
        fence_regs(o);
        fence_regs_u(pf); /* P_j was read by the tensor cores until here */
#pragma unroll
        for (int n = 0; n < NO; ++n) {
            o[4 * n] *= alpha[0];
            o[4 * n + 1] *= alpha[0];
            o[4 * n + 2] *= alpha[1];
            o[4 * n + 3] *= alpha[1];
        }
        pack_p(pf, s);
    }
    /* the last tile: P V only */
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    wgmma_fence();
    issue_pv<D>(o, pf, sV + ((nt - 1) % 3) * BN * D);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(o);

    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] = quad_sum(l[r]);
        inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    }
    bf16 *go = (bf16 *)p.o_out + tok_off(b, 0, h, T, p.H, D);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = row_base + g + 8 * r;
        if (row >= T) continue;
        bf16 *pr = go + (long)row * ldq;
#pragma unroll
        for (int n = 0; n < NO; ++n)
            *reinterpret_cast<__nv_bfloat162 *>(pr + 8 * n + 2 * t4) =
                __floats2bfloat162_rn(o[4 * n + 2 * r] * inv[r], o[4 * n + 2 * r + 1] * inv[r]);
        if (t4 == 0) p.lse[((long)b * p.H + h) * T + row] = (m[r] + log2f(l[r])) * ATTN_LN2;
    }
}
#else
template <int D, bool GEN> __global__ void fwd_kernel(const Params, const BlockOrder) {} /* not built for sm_90a: never launched */
#endif

/* 1 when this binary holds the sm_90a kernels for the current device's architecture. */
__global__ void probe_kernel(int *out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    *out = 1;
#else
    *out = 0;
#endif
}

template <int D, bool GEN> static void fwd_launch(const Params &p, cudaStream_t st) {
    constexpr size_t smem = fwd_smem_bytes<D>();
    static_assert(smem <= 227 * 1024, "shared memory over the sm_90 limit");
    GDN_CUDA_CHECK(cudaFuncSetAttribute(fwd_kernel<D, GEN>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int tiles = (p.T + BM - 1) / BM;
    if ((double)tiles * p.B * p.H > 2147483647.0) GDN_CUDA_DIE("attention: B*H*T/%d blocks over the grid limit", BM);
    const BlockOrder order = block_order(tiles, p.B * p.H, (size_t)p.Tk * D * 2 * sizeof(bf16));
    fwd_kernel<D, GEN><<<(unsigned)(tiles * p.B * p.H), NTH, smem, st>>>(p, order);
    GDN_CUDA_CHECK_LAUNCH();
}

} // namespace sm90a
} // namespace attn

attn::BlockOrder attn::block_order(int tiles, int n_heads, size_t kv_bytes) {
    static int l2 = -1;
    if (l2 < 0) {
        int dev = 0;
        GDN_CUDA_CHECK(cudaGetDevice(&dev));
        GDN_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    }
    BlockOrder o;
    o.tiles = tiles;
    o.n_heads = n_heads;
    const size_t fit = (size_t)l2 / (kv_bytes ? kv_bytes : 1);
    o.heads = (int)(fit < 1 ? 1 : fit > (size_t)n_heads ? (size_t)n_heads : fit);
    return o;
}

extern "C" int gdn_cuda_attention_sm90a_available(void) {
    static int known = -1;
    if (known >= 0) return known;
    int dev = 0;
    cudaDeviceProp prop;
    GDN_CUDA_CHECK(cudaGetDevice(&dev));
    GDN_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    known = 0;
    if (prop.major != 9 || prop.minor != 0) return known;
    int *d = NULL, h = 0;
    GDN_CUDA_CHECK(cudaMalloc(&d, sizeof(int)));
    attn::sm90a::probe_kernel<<<1, 1>>>(d);
    if (cudaGetLastError() == cudaSuccess && cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess)
        known = h;
    (void)cudaGetLastError(); /* a missing kernel image is an answer here, not an error */
    GDN_CUDA_CHECK(cudaFree(d));
    return known;
}

void attn::sm90a_fwd(const attn::Params &p, int D, void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
    dispatch(D, p.key_lo || p.qp, [&](auto d, auto gen) { /* a prefix or documents: the general kernel */
        attn::sm90a::fwd_launch<decltype(d)::value, decltype(gen)::value>(p, st);
    });
}
