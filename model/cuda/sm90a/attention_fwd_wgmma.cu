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
 * (D 128), 112 KB (D 64).
 *
 * fwd_ws_kernel is the same computation, warp-specialised: a producer warpgroup streams the tiles
 * by the bulk tensor copy (TMA) into mbarrier-guarded stages (the default on sm_90a; see there).
 * The host side of the tensor copies (tile_map, row_map: tensor maps through the driver's encoder,
 * looked up at run time) lives here too. */
#include "model/cuda/attention_common.cuh"
#include "model/cuda/sm90a/attention_sm90a.h"
#include "model/cuda/sm90a/wgmma_common.cuh"

namespace attn {
namespace sm90a {

constexpr int BM = 128, BN = 128, NTH = 256;

template <int D> constexpr size_t fwd_smem_bytes() {
    return (size_t)(BM + 6 * BN) * D * sizeof(bf16) + 1024; /* + room to align to 1024 bytes */
}
/* The warp-specialised kernel: 2 consumer warpgroups and a producer warpgroup; WS_ST key/value
 * stages, then the mbarriers (full Q, full K, full V, empty K, empty V). */
constexpr int WS_NTH = 384, WS_ST = 2;
template <int D> constexpr size_t ws_smem_bytes() {
    return (size_t)(BM + 2 * WS_ST * BN) * D * sizeof(bf16) + (1 + 4 * WS_ST) * sizeof(uint64_t) + 1024;
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

/* The output so far times alpha (per row: this lane's two rows), after a new running max. */
template <int D> __device__ __forceinline__ void rescale(float (&o)[D / 2], const float (&alpha)[2]) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
        o[4 * n] *= alpha[0];
        o[4 * n + 1] *= alpha[0];
        o[4 * n + 2] *= alpha[1];
        o[4 * n + 3] *= alpha[1];
    }
}

/* Pipelined per warpgroup: while the tensor cores compute O += P_j V_j, the warps run the
 * softmax of tile j+1, whose scores S_{j+1} = Q K_{j+1}^T were issued just before. Loads run
 * two key tiles / one value tile ahead: iteration j fills K_{j+2} and V_{j+1} (cp.async group
 * j) and waits for group j-1 (K_{j+1}, V_j). */
template <int D, bool GEN>
__global__ void __launch_bounds__(NTH, 1) fwd_kernel(const Params pin, const BlockOrder order) {
    const Params p = GEN ? pin : causal_params(pin); /* GEN: a prefix or key_lo (see causal_params) */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem_1024(smem_raw)); /* [D/64][BM][64] */
    bf16 *sK = sQ + BM * D;     /* 3 buffers of [D/64][BN][64]: K_i in buffer i % 3 */
    bf16 *sV = sK + 3 * BN * D; /* 3 buffers: V_i in buffer i % 3 */

    int b, h, q0, j0, nt; /* key tiles j0 .. j0+nt-1 cover keys key_lo(q0) .. qp + min(T, q0 + BM) - 1 */
    query_tile<BM, BN>(p, order, blockIdx.x, b, h, q0, j0, nt);
    const int hk = h / p.G, T = p.T, Tk = p.Tk;
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const long ldq = (long)p.H * D, ldk = (long)p.Hkv * D;
    const bf16 *gq = (const bf16 *)p.q + tok_off(b, 0, h, T, p.H, D);
    const bf16 *gk = (const bf16 *)p.k + tok_off(b, 0, hk, Tk, p.Hkv, D);
    const bf16 *gv = (const bf16 *)p.v + tok_off(b, 0, hk, Tk, p.Hkv, D);
    /* key tile j0+i sits in buffer i % 3 */

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
    const int g = lane >> 2;
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
    acc_to_frags<BN>(pf, s); /* P as the A operand of P V */

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
        rescale<D>(o, alpha);
        acc_to_frags<BN>(pf, s); /* P as the A operand of P V */
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

    fwd_write_out<D>(p, [&](int n, int e) { return o[4 * n + e]; }, m, l, b, h, row_base);
}

/* The warp-specialised forward: the same two consumer warpgroups and per-warpgroup pipeline as
 * fwd_kernel, plus a producer warpgroup (threads 256..383) whose first thread loads the Q tile
 * and streams the key/value tiles with the bulk tensor copy (TMA, 128-byte swizzle: the layout
 * above) into WS_ST stages. Each stage has a "full" mbarrier (the copy's bytes) and an "empty"
 * one (one arrival per consumer warp once its products have read the tile), so no block barrier
 * couples the two warpgroups. PP: they take turns on the tensor cores (named barriers 1 and 2):
 * warpgroup w issues its products for a tile only after the other issued its own, so one
 * warpgroup's softmax runs while the other's products occupy the tensor cores. */
template <int D, bool GEN, bool PP>
__global__ void __launch_bounds__(WS_NTH, 1)
    fwd_ws_kernel(const Params pin, const BlockOrder order, const __grid_constant__ CUtensorMap mq,
                  const __grid_constant__ CUtensorMap mk, const __grid_constant__ CUtensorMap mv) {
    const Params p = GEN ? pin : causal_params(pin);
    constexpr int ST = WS_ST;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem_1024(smem_raw)); /* [D/64][BM][64] */
    bf16 *sK = sQ + BM * D;      /* ST stages of [D/64][BN][64]: key tile i in stage i % ST */
    bf16 *sV = sK + ST * BN * D; /* the same for values */
    uint64_t *full_q = reinterpret_cast<uint64_t *>(sV + ST * BN * D);
    uint64_t *full_k = full_q + 1, *full_v = full_k + ST, *empty_k = full_v + ST, *empty_v = empty_k + ST;

    int b, h, q0, j0, nt;
    query_tile<BM, BN>(p, order, blockIdx.x, b, h, q0, j0, nt);
    const int hk = h / p.G;
    init_pipeline(full_q, 1 + 2 * ST, 2 * ST); /* from here the roles run apart */

    if (threadIdx.x >= 256) { /* the producer warpgroup: one thread issues every copy */
        setmaxnreg_dec<24>(); /* its registers go to the consumers (3 x 128 threads share 64K) */
        if (threadIdx.x == 256) {
            constexpr unsigned TILE = BN * D * sizeof(bf16);
            mbar_expect_tx(full_q, BM * D * sizeof(bf16));
            tma_load_tile<BM, D>(sQ, &mq, full_q, h, q0, b);
            for (int i = 0; i < nt; ++i) {
                const int s = i % ST, row = (j0 + i) * BN;
                const unsigned free_parity = ((i / ST) & 1) ^ 1; /* the consumers' release of tile i - ST */
                mbar_wait(empty_k + s, free_parity);
                mbar_expect_tx(full_k + s, TILE);
                tma_load_tile<BN, D>(sK + s * BN * D, &mk, full_k + s, hk, row, b);
                mbar_wait(empty_v + s, free_parity);
                mbar_expect_tx(full_v + s, TILE);
                tma_load_tile<BN, D>(sV + s * BN * D, &mv, full_v + s, hk, row, b);
            }
        }
        return;
    }

    setmaxnreg_inc<240>();
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];
    const int row_base = q0 + wg * 64 + warp * 16;
    const int g = lane >> 2;
    const int lo[2] = {key_lo_at(p, b, row_base + g), key_lo_at(p, b, row_base + g + 8)};
    const int lo_max = key_lo_at(p, b, row_base + 15);
    const bf16 *qw = sQ + wg * 64 * 64;
    Turns<PP> turns(wg, nt + 1); /* S of tile 0, then per tile S of the next and P V, then the last P V */
    float s[BN / 2];
    unsigned pf[BN / 16][4];
    mbar_wait(full_q, 0);
    mbar_wait(full_k, 0);
    turns.begin();
    wgmma_fence();
    issue_s<D>(s, qw, sK);
    wgmma_commit();
    turns.end();
    wgmma_wait<0>();
    fence_regs(s);
    mbar_release_warp(empty_k);
    softmax_tile(s, m, l, alpha, j0 * BN, row_base, p, lo, lo_max);
    acc_to_frags<BN>(pf, s); /* P as the A operand of P V */

    for (int j = 0; j + 1 < nt; ++j) {
        const int sn = (j + 1) % ST, sc = j % ST;
        mbar_wait(full_k + sn, ((j + 1) / ST) & 1);
        mbar_wait(full_v + sc, (j / ST) & 1);
        turns.begin();
        wgmma_fence();
        issue_s<D>(s, qw, sK + sn * BN * D);
        wgmma_commit();
        issue_pv<D>(o, pf, sV + sc * BN * D);
        wgmma_commit();
        turns.end();
        wgmma_wait<1>(); /* S_{j+1}; P_j V_j may still run */
        fence_regs(s);
        mbar_release_warp(empty_k + sn);
        softmax_tile(s, m, l, alpha, (j0 + j + 1) * BN, row_base, p, lo, lo_max);
        wgmma_wait<0>();
        fence_regs(o);
        fence_regs_u(pf);
        mbar_release_warp(empty_v + sc);
        rescale<D>(o, alpha);
        acc_to_frags<BN>(pf, s); /* P as the A operand of P V */
    }
    {
        const int sc = (nt - 1) % ST;
        mbar_wait(full_v + sc, ((nt - 1) / ST) & 1);
        turns.begin();
        wgmma_fence();
        issue_pv<D>(o, pf, sV + sc * BN * D);
        wgmma_commit();
        turns.end();
        wgmma_wait<0>();
        fence_regs(o);
    }
    fwd_write_out<D>(p, [&](int n, int e) { return o[4 * n + e]; }, m, l, b, h, row_base);
}
#else
template <int D, bool GEN> __global__ void fwd_kernel(const Params, const BlockOrder) {} /* not built for sm_90a: never launched */
template <int D, bool GEN, bool PP>
__global__ void fwd_ws_kernel(const Params, const BlockOrder, const __grid_constant__ CUtensorMap,
                              const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap) {}
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
    const int tiles = (p.T + BM - 1) / BM;
    const unsigned grid = tile_grid(fwd_kernel<D, GEN>, smem, tiles, p.B * p.H, "B*H*T", BM);
    const BlockOrder order = block_order(tiles, p.B * p.H, (size_t)p.Tk * D * 2 * sizeof(bf16));
    fwd_kernel<D, GEN><<<grid, NTH, smem, st>>>(p, order);
    GDN_CUDA_CHECK_LAUNCH();
}

/* The driver's tensor-map encoder, looked up once through the runtime (no link to libcuda). */
static PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
    if (!fn) {
        void *f = nullptr;
        cudaDriverEntryPointQueryResult q;
        GDN_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
        if (q != cudaDriverEntryPointSuccess || !f)
            GDN_CUDA_DIE("attention: the CUDA driver has no cuTensorMapEncodeTiled (a driver for CUDA 12 or later is needed)");
        fn = (PFN_cuTensorMapEncodeTiled_v12000)f;
    }
    return fn;
}

} // namespace sm90a

CUtensorMap tile_map(const void *base, int B, int rows, int heads, int D, int box_rows) {
    CUtensorMap m;
    const cuuint64_t dim[4] = {(cuuint64_t)D, (cuuint64_t)heads, (cuuint64_t)rows, (cuuint64_t)B};
    const cuuint64_t stride[3] = {(cuuint64_t)D * sizeof(bf16), (cuuint64_t)heads * D * sizeof(bf16),
                                  (cuuint64_t)rows * heads * D * sizeof(bf16)};
    const cuuint32_t box[4] = {64, 1, (cuuint32_t)box_rows, 1}, step[4] = {1, 1, 1, 1};
    const CUresult r = sm90a::tensor_map_encoder()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void *>(base), dim, stride,
                                            box, step, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        GDN_CUDA_DIE("attention: cuTensorMapEncodeTiled failed (error %d) for a [%d, %d, %d, %d] bf16 tensor", (int)r, B,
                     rows, heads, D);
    return m;
}

CUtensorMap row_map(const float *base, int n, int T, int box) {
    CUtensorMap m;
    const cuuint64_t dim[2] = {(cuuint64_t)T, (cuuint64_t)n}, stride[1] = {(cuuint64_t)T * sizeof(float)};
    const cuuint32_t boxd[2] = {(cuuint32_t)box, 1}, step[2] = {1, 1};
    const CUresult r = sm90a::tensor_map_encoder()(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float *>(base), dim,
                                                   stride, boxd, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                                   CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        GDN_CUDA_DIE("attention: cuTensorMapEncodeTiled failed (error %d) for a [%d, %d] fp32 tensor", (int)r, n, T);
    return m;
}

namespace sm90a {
template <int D, bool GEN, bool PP> static void fwd_ws_launch(const Params &p, cudaStream_t st) {
    constexpr size_t smem = ws_smem_bytes<D>();
    static_assert(smem <= 227 * 1024, "shared memory over the sm_90 limit");
    const int tiles = (p.T + BM - 1) / BM;
    const unsigned grid = tile_grid(fwd_ws_kernel<D, GEN, PP>, smem, tiles, p.B * p.H, "B*H*T", BM);
    const BlockOrder order = block_order(tiles, p.B * p.H, (size_t)p.Tk * D * 2 * sizeof(bf16));
    const CUtensorMap mq = tile_map(p.q, p.B, p.T, p.H, D, BM), mk = tile_map(p.k, p.B, p.Tk, p.Hkv, D, BN),
                      mv = tile_map(p.v, p.B, p.Tk, p.Hkv, D, BN);
    fwd_ws_kernel<D, GEN, PP><<<grid, WS_NTH, smem, st>>>(p, order, mq, mk, mv);
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

bool attn::sm90a_ws_usable(const attn::Params &p, attn::WsKernel k) {
    /* the bulk tensor copy reads from 16-byte aligned addresses with 16-byte aligned strides */
    uintptr_t a = (uintptr_t)p.q | (uintptr_t)p.k | (uintptr_t)p.v;
    if (k != WS_FWD) a |= (uintptr_t)p.d_o;
    if (k == WS_DKDV) a |= (uintptr_t)p.lse | (uintptr_t)p.delta;
    return a % 16 == 0 && (k != WS_DKDV || p.T % 4 == 0);
}

void attn::sm90a_fwd(const attn::Params &p, int D, int kernel, void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
    dispatch(D, p.key_lo || p.qp, [&](auto d, auto gen) { /* a prefix or documents: the general kernel */
        constexpr int Dv = decltype(d)::value;
        constexpr bool G = decltype(gen)::value;
        if (kernel == 0) attn::sm90a::fwd_launch<Dv, G>(p, st);
        else if (kernel == 1) attn::sm90a::fwd_ws_launch<Dv, G, true>(p, st);
        else attn::sm90a::fwd_ws_launch<Dv, G, false>(p, st);
    });
}
