/* Shared pieces of the attention kernels (attention_fwd.cu, attention_bwd.cu): the argument
 * block passed by value, asynchronous tile copies, and warp-level tensor-core products on
 * shared-memory tiles and register fragments.
 *
 * Tiles live in shared memory as bf16 with rows padded by 8 elements (16 bytes), so the eight
 * row addresses of one ldmatrix fall in distinct banks. A warp owns 16 rows of every product;
 * its accumulators follow the mma.sync m16n8k16 layout: element e of 16x8 tile n sits at row
 * lane/4 + 8*(e/2), column 8n + 2*(lane%4) + e%2. */
#ifndef GDN_ATTENTION_COMMON_CUH
#define GDN_ATTENTION_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "model/cuda/attention_cuda.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/mma_common.cuh"

namespace attn {

typedef __nv_bfloat16 bf16;

#define ATTN_LOG2E 1.4426950408889634f
#define ATTN_LN2 0.6931471805599453f

/* Everything a kernel needs. Element pointers are bf16* or float* per precision. */
struct Params {
    int B, T, H, Hkv, G; /* G = H / Hkv query heads per key/value head */
    int Tk, qp;           /* keys per sequence; position of query 0 (Tk - T) */
    const int *key_lo;    /* [B,T] first key of each query, or NULL (0) */
    float scale;          /* softmax scale */
    float scale_log2;     /* scale * log2(e): scores in base-2 units */
    const void *q, *k, *v, *o, *d_o;
    void *o_out, *dq, *dk, *dv;
    float *lse;
    float *delta;         /* [B,H,T] rowsum(d_o * o) */
};

Params make_params(const gdn_cuda_attention_args *a);


/* Floats of the backward's workspace before the dQ accumulator: Delta (B*H*T), rounded up to
 * 16 bytes. */
inline size_t dq_acc_offset(const gdn_cuda_attention_args *a) {
    return ((size_t)a->B * a->H * a->T + 3) & ~(size_t)3;
}

/* Warps per block of the bf16 kernels (gdn_cuda_attention_args.warps, 0: the default). */
inline int block_warps(const gdn_cuda_attention_args *a) { return a->warps ? a->warps : 4; }

/* The first key query row t of sequence b sees (row clamped to T - 1: tiles run past the end). */
__device__ __forceinline__ int key_lo_at(const Params &p, int b, int row) {
    return p.key_lo ? __ldg(p.key_lo + (long)b * p.T + min(row, p.T - 1)) : 0;
}

/* p as plain causal self-attention (Tk = T, no prefix, no key_lo). The kernels take a template
 * flag GEN and read `GEN ? p : causal_params(p)`: with these fields compile-time constants the
 * plain instantiation keeps the masks and tile ranges of a kernel that never had them. */
__device__ __forceinline__ Params causal_params(Params p) {
    p.Tk = p.T;
    p.qp = 0;
    p.key_lo = nullptr;
    return p;
}

/* Whether query row `row` sees key `col` (both inside their sequences). */
__device__ __forceinline__ bool key_visible(const Params &p, int row, int col, int lo) {
    return row < p.T && col < p.Tk && col <= p.qp + row && col >= lo;
}

/* Row t of head h in a [B,T,heads,D] tensor: base + ((b*T + t)*heads + h)*D. */
__device__ __forceinline__ long tok_off(int b, int t, int h, int T, int heads, int D) {
    return (((long)b * T + t) * heads + h) * D;
}

/* ROWS x D bf16 tile from global rows row0.. (row stride ldg elements, `g` at row 0) into shared
 * memory (row stride D + 8). Rows >= T are zero-filled (zeros give finite scores, and the
 * kernels mask them). The whole block (NTH threads) takes part; the caller commits and waits. */
template <int ROWS, int D, int NTH>
__device__ __forceinline__ void load_tile(bf16 *s, const bf16 *g, long ldg, int row0, int T) {
    constexpr int CPR = D / 8, TOTAL = ROWS * CPR, LDS = D + 8;
    static_assert(TOTAL % NTH == 0, "tile and block shapes must divide");
#pragma unroll
    for (int i = 0; i < TOTAL / NTH; ++i) {
        const int idx = threadIdx.x + i * NTH;
        const int r = idx / CPR, c = (idx % CPR) * 8;
        const bool ok = row0 + r < T;
        cp_async16(s + r * LDS + c, ok ? (const void *)(g + (long)(row0 + r) * ldg + c) : (const void *)g, ok);
    }
}

/* ---- tensor-core fragments ------------------------------------------------------------------ */
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    unsigned r;
    memcpy(&r, &h, 4);
    return r;
}

template <int NT> __device__ __forceinline__ void zero(float (&acc)[NT][4]) {
#pragma unroll
    for (int n = 0; n < NT; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

/* A fragments [KT][4] of a warp's 16 x 16*KT row-major tile at A (row stride lda). */
template <int KT>
__device__ __forceinline__ void load_a(unsigned (&a)[KT][4], const bf16 *A, int lda) {
    const int lane = threadIdx.x & 31;
    const bf16 *p = A + (lane & 15) * lda + (lane >> 4) * 8;
#pragma unroll
    for (int kt = 0; kt < KT; ++kt) ldsm_x4(a[kt], p + kt * 16);
}

/* The accumulators of a 16 x 8*NT product as bf16 A fragments of the next product (k = the
 * 8*NT columns): k tile kt is column tiles 2kt and 2kt+1. */
template <int NT>
__device__ __forceinline__ void acc_to_a(unsigned (&a)[NT / 2][4], const float (&c)[NT][4]) {
#pragma unroll
    for (int kt = 0; kt < NT / 2; ++kt) {
        a[kt][0] = pack_bf16(c[2 * kt][0], c[2 * kt][1]);
        a[kt][1] = pack_bf16(c[2 * kt][2], c[2 * kt][3]);
        a[kt][2] = pack_bf16(c[2 * kt + 1][0], c[2 * kt + 1][1]);
        a[kt][3] = pack_bf16(c[2 * kt + 1][2], c[2 * kt + 1][3]);
    }
}

/* The products below take B' = B^T (BT: B is 8*NT rows x 16*KT columns, its rows are the output
 * columns, S = Q K^T) or B' = B (B is 16*KT rows x 8*NT columns, O += P V), B a row-major shared
 * tile with row stride ldb. b_lane: this lane's ldmatrix address in B. mma_ktile: k tile kt of
 * acc[16 x 8*NT] += A * B', a the A fragments (16 x 16) of that k tile, p from b_lane. */
template <bool BT> __device__ __forceinline__ const bf16 *b_lane(const bf16 *B, int ldb) {
    const int lane = threadIdx.x & 31;
    return BT ? B + ((lane & 7) + (lane >> 4) * 8) * ldb + ((lane >> 3) & 1) * 8
              : B + ((lane & 7) + ((lane >> 3) & 1) * 8) * ldb + (lane >> 4) * 8;
}
template <bool BT, int NT>
__device__ __forceinline__ void mma_ktile(float (&acc)[NT][4], const unsigned (&a)[4], const bf16 *p,
                                          int ldb, int kt) {
    static_assert(NT % 2 == 0, "n tiles come in pairs (ldmatrix x4)");
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
        unsigned r[4];
        if (BT) ldsm_x4(r, p + np * 16 * ldb + kt * 16);
        else ldsm_x4_t(r, p + kt * 16 * ldb + np * 16);
        mma_bf16(acc[2 * np], a, r[0], r[1]);
        mma_bf16(acc[2 * np + 1], a, r[2], r[3]);
    }
}

/* acc[16 x 8*NT] += A * B^T with A fragments a (16 x 16*KT) and B a row-major shared tile of
 * 8*NT rows x 16*KT columns (row stride ldb): B's rows are the output columns (S = Q K^T). */
template <int NT, int KT>
__device__ __forceinline__ void mma_abt(float (&acc)[NT][4], const unsigned (&a)[KT][4],
                                        const bf16 *B, int ldb) {
    const bf16 *p = b_lane<true>(B, ldb);
#pragma unroll
    for (int kt = 0; kt < KT; ++kt) mma_ktile<true>(acc, a[kt], p, ldb, kt);
}

/* The same with A a warp's 16 x 16*KT row-major shared tile (loaded one k tile at a time, so
 * its fragments do not occupy registers across the product). */
template <int NT, int KT>
__device__ __forceinline__ void mma_abt_s(float (&acc)[NT][4], const bf16 *A, int lda,
                                          const bf16 *B, int ldb) {
    const int lane = threadIdx.x & 31;
    const bf16 *pa = A + (lane & 15) * lda + (lane >> 4) * 8;
    const bf16 *p = b_lane<true>(B, ldb);
#pragma unroll
    for (int kt = 0; kt < KT; ++kt) {
        unsigned a[4];
        ldsm_x4(a, pa + kt * 16);
        mma_ktile<true>(acc, a, p, ldb, kt);
    }
}

/* acc[16 x 8*NT] += A * B with A fragments a (16 x 16*KT) and B a row-major shared tile of
 * 16*KT rows x 8*NT columns (row stride ldb) (O += P V). */
template <int NT, int KT>
__device__ __forceinline__ void mma_ab(float (&acc)[NT][4], const unsigned (&a)[KT][4],
                                       const bf16 *B, int ldb) {
    const bf16 *p = b_lane<false>(B, ldb);
#pragma unroll
    for (int kt = 0; kt < KT; ++kt) mma_ktile<false>(acc, a[kt], p, ldb, kt);
}

/* Row and column (within the warp's 16 x 8*NT block) of accumulator element e of tile n. */
__device__ __forceinline__ int frag_row(int e) { return ((threadIdx.x & 31) >> 2) + ((e >> 1) << 3); }
__device__ __forceinline__ int frag_col(int n, int e) { return n * 8 + ((threadIdx.x & 3) << 1) + (e & 1); }

/* Max over the 4 lanes of a quad (quad_sum: mma_common.cuh). */
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* Store the warp's 16 x 8*NT fp32 accumulators (times `mul`) as rows row0.. of a [.., ld]
 * tensor; rows >= T are skipped. */
template <int NT, typename E>
__device__ __forceinline__ void store_acc(E *g, long ld, int row0, int T, const float (&c)[NT][4],
                                          float mul) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = row0 + frag_row(2 * half);
        if (r >= T) continue;
        E *p = g + (long)r * ld;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            const int col = frag_col(n, 0);
            const float x0 = c[n][2 * half] * mul, x1 = c[n][2 * half + 1] * mul;
            if constexpr (sizeof(E) == 2) {
                *reinterpret_cast<__nv_bfloat162 *>(p + col) = __floats2bfloat162_rn(x0, x1);
            } else {
                *reinterpret_cast<float2 *>(p + col) = make_float2(x0, x1);
            }
        }
    }
}

/* The forward's epilogue for the warp's 16 query rows from row_base: O divided by the row sums
 * (l: this lane's partial sums, summed over its quad here), rounded to bf16, and the rows'
 * log-sum-exp (natural log), for rows inside the sequence. o(n, e): element e of the warp's
 * accumulator tile n of D/8 (the layout above). Every valid row saw its own key, so l >= 1. */
template <int D, typename Acc>
__device__ __forceinline__ void fwd_write_out(const Params &p, Acc o, const float (&m)[2], float (&l)[2], int b, int h,
                                              int row_base) {
    const int T = p.T;
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] = quad_sum(l[r]);
        inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    }
    bf16 *go = (bf16 *)p.o_out + tok_off(b, 0, h, T, p.H, D);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = row_base + frag_row(2 * r);
        if (row >= T) continue;
        bf16 *pr = go + (long)row * p.H * D;
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
            *reinterpret_cast<__nv_bfloat162 *>(pr + frag_col(n, 0)) =
                __floats2bfloat162_rn(o(n, 2 * r) * inv[r], o(n, 2 * r + 1) * inv[r]);
        if ((threadIdx.x & 3) == 0) p.lse[((long)b * p.H + h) * T + row] = (m[r] + log2f(l[r])) * ATTN_LN2;
    }
}

} // namespace attn

#endif
