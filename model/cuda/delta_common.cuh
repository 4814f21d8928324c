/* Shared pieces of the gated-delta-rule kernels: the argument block, the workspace layout, and
 * warp-level building blocks on top of mma_common.cuh (tile copies, the tensor-core product of
 * shared-memory tiles, fragment bookkeeping).
 *
 * Tiles live in shared memory as the storage type E (__nv_bfloat16 or float), rows padded by
 * 16 bytes so that ldmatrix and the fp32 loads hit distinct banks. A warp computes a block of
 * 16x8 output tiles held in the mma.sync accumulator layout: element e of a tile sits at
 * row lane/4 + 8*(e/2), column 2*(lane%4) + e%2. The bf16 path runs mma.sync m16n8k16 (fp32
 * accumulate); the fp32 path computes the same fragments with fp32 FMA, so every kernel is
 * written once for both precisions. */
#ifndef GDN_DELTA_COMMON_CUH
#define GDN_DELTA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "model/cuda/cuda_check.h"
#include "model/cuda/delta_cuda.h"
#include "model/cuda/mma_common.cuh"

#define GDN_CHUNK 64
typedef __nv_bfloat16 bf16;

/* Everything a kernel needs, passed by value. Element pointers are E* (bf16 or float).
 * H counts value heads; q and k have Hq = H / group heads and value head h reads q/k head
 * h / group (group = 1: one q/k head per value head). */
typedef struct {
    int B, T, H, K, V, NT; /* NT = number of chunks per sequence */
    int Hq, group;         /* q/k heads, value heads per q/k head */
    int c0, c1;            /* chunk range of a forward launch (the forward runs in two halves) */
    int delta;             /* the mixer has the delta term (has_delta of model/mixer.h); without it
                              k_intra writes W = 0, U = V and no T, and k_grad skips the WY part
                              (docs/design.md section 2.6). A mixer without decay has g = NULL,
                              which every kernel reads as g = 0 (G = 0, gates of 1). */
    float scale;
    const void *q, *k;      /* [B,T,Hq,K] */
    const void *v;          /* [B,T,H,V] */
    const float *g, *beta;  /* [B,T,H]; g NULL without decay, beta NULL without the delta term */
    const float *h0;        /* [B,H,K,V] or NULL */
    void *o;                /* [B,T,H,V] */
    float *ht;              /* [B,H,K,V] or NULL */
    const void *d_o;        /* [B,T,H,V] */
    const float *dht;       /* [B,H,K,V] or NULL */
    void *dq, *dk;          /* [B,T,Hq,K] */
    void *dv;               /* [B,T,H,V] */
    float *dg, *dbeta;      /* [B,T,H] or NULL; zeros where the mixer does not read g / beta */
    float *dh0;             /* [B,H,K,V] or NULL */
    /* workspace; "rows" tensors are chunk-padded: [B*H, NT*64, D] */
    float *G;        /* [B*H, NT*64] in-chunk cumulative log decay */
    void *Tm;        /* [B*H, NT, 64, 64] (I+A)^-1 */
    void *W, *U;     /* [B*H, NT*64, K] / [.., V] */
    void *Vn;        /* [B*H, NT*64, V] v_new */
    void *h;         /* [B*H, NT, K, V] state entering each chunk */
    void *dVl;       /* [B*H, NT*64, V] intra-chunk part of dv_new */
    void *dVn;       /* [B*H, NT*64, V] dv_new */
    void *dh;        /* [B*H, NT, K, V] gradient of the state leaving each chunk */
    void *Dm;        /* [B*H, NT, 64, 64] D^T: Dm[j][i] = s (dO_i . Vn_j) exp(G_i - G_j), i >= j */
    float *dG1;      /* [B*H, NT*64] intra-chunk output term of dG */
    float *carry;    /* [B*H, K, V] fp32 state between the two halves of the forward state pass */
    float *dq_part, *dk_part; /* [B,T,H,K] fp32 dq, dk of each value head where group > 1
                                 (k_grad writes these, a group sum makes dq, dk); else NULL */
    /* Documents (docs/design.md section 3.8): doc [B,T] int, doc[b,t] == t where row b starts
     * a document at t (the CPU kernels' convention, model/cpu/doc.h); NULL: none. Per chunk
     * the kernels work with seg[i] = the last start at or before row i of the chunk (-1: none,
     * the row continues the entering state; padded rows repeat row L-1), and
     *   Gam_ij  = exp(G_i - G_j)  only where j <= i and j >= seg[i] (same document),
     *   gamma_i = exp(G_i)        only where seg[i] < 0 (i before the chunk's first start f),
     *   r_j     = exp(G_63 - G_j) only where j >= seg[63] (the chunk's last document),
     *   gamma_C = exp(G_63)       only where seg[63] < 0 (no start in the chunk),
     * with G restarted at every start (chunk_log_decay). fl [B, NT] (k_intra writes it) holds
     * (f, seg[63], 0, 0) per chunk for the state passes: f = 64 and seg[63] = -1 without a
     * start (16 bytes, so that the passes copy it into shared memory with the gates). */
    const int *doc;
    int4 *fl;
} gdn_delta_args;

/* Byte offsets of the workspace tensors (dq_part, dk_part only where qk heads are shared). */
typedef struct {
    size_t G, Tm, W, U, Vn, h, dVl, dVn, dh, Dm, dG1, carry, fl, dq_part, dk_part, total;
} gdn_delta_ws;

/* Value heads per q/k head of a shape (1 where qk_heads is 0 or H). */
static inline int gdn_delta_group(const gdn_delta_shape *s) {
    return s->qk_heads > 0 ? s->H / s->qk_heads : 1;
}

static inline size_t gdn_ws_round(size_t x) { return (x + 255) & ~(size_t)255; }

static inline gdn_delta_ws gdn_delta_ws_layout(const gdn_delta_shape *s, size_t es) {
    gdn_delta_ws w;
    const size_t NT = (size_t)(s->T + GDN_CHUNK - 1) / GDN_CHUNK;
    const size_t BH = (size_t)s->B * s->H, rows = BH * NT * GDN_CHUNK;
    const size_t K = (size_t)s->K, V = (size_t)s->V;
    size_t off = 0;
#define GDN_WS_TAKE(field, bytes) \
    w.field = off;                \
    off += gdn_ws_round(bytes)
    GDN_WS_TAKE(G, rows * 4);
    GDN_WS_TAKE(Tm, rows * GDN_CHUNK * es);
    GDN_WS_TAKE(W, rows * K * es);
    GDN_WS_TAKE(U, rows * V * es);
    GDN_WS_TAKE(Vn, rows * V * es);
    GDN_WS_TAKE(h, BH * NT * K * V * es);
    GDN_WS_TAKE(dVl, rows * V * es);
    GDN_WS_TAKE(dVn, rows * V * es);
    GDN_WS_TAKE(dh, BH * NT * K * V * es);
    GDN_WS_TAKE(Dm, rows * GDN_CHUNK * es);
    GDN_WS_TAKE(dG1, rows * 4);
    GDN_WS_TAKE(carry, BH * K * V * 4);
    GDN_WS_TAKE(fl, (size_t)s->B * NT * 16);
    w.dq_part = w.dk_part = 0;
    if (gdn_delta_group(s) > 1) {
        const size_t ntok = (size_t)s->B * s->T * s->H;
        GDN_WS_TAKE(dq_part, ntok * K * 4);
        GDN_WS_TAKE(dk_part, ntok * K * 4);
    }
#undef GDN_WS_TAKE
    w.total = off;
    return w;
}

/* ---- element conversions ------------------------------------------------------------------ */
__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(bf16 x) { return __bfloat162float(x); }
template <typename E> __device__ __forceinline__ E from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_f<bf16>(float x) { return __float2bfloat16_rn(x); }

/* Two adjacent elements (even column, so 4- or 8-byte aligned). */
__device__ __forceinline__ void store2(float *p, float a, float b) {
    *reinterpret_cast<float2 *>(p) = make_float2(a, b);
}
__device__ __forceinline__ void store2(bf16 *p, float a, float b) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(a, b);
}

/* Two adjacent elements as floats (even column). */
__device__ __forceinline__ float2 load2(const float *p) { return *reinterpret_cast<const float2 *>(p); }
__device__ __forceinline__ float2 load2(const bf16 *p) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(p));
}

/* Padded row length (elements) of a shared tile with n columns: +16 bytes. */
template <typename E> __host__ __device__ constexpr int pad_ld(int n) {
    return n + 16 / (int)sizeof(E);
}
/* Bytes of a rows x cols shared tile. */
template <typename E> __host__ __device__ constexpr size_t tile_bytes(int rows, int cols) {
    return (size_t)rows * pad_ld<E>(cols) * sizeof(E);
}

/* ---- asynchronous copies (cp_async16 and the rest: mma_common.cuh) ------------------------- */
/* Wait until at most n (0..7) groups of this thread are pending. */
__device__ __forceinline__ void cp_async_wait_dyn(int n) {
    switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    case 6: cp_async_wait<6>(); break;
    default: cp_async_wait<7>(); break;
    }
}

/* Ring slot `cur` (64-row tiles, row stride ld) of this phase's tile; `prev` takes it (it is
 * refilled in the next phase) and `cur` moves on, without a division. */
template <typename E>
__device__ __forceinline__ const E *ring_take(const E *ring, int ld, int &cur, int &prev, int slots) {
    const E *t = ring + cur * 64 * ld;
    prev = cur;
    if (++cur == slots) cur = 0;
    return t;
}

/* Copy a rows x cols tile from global memory (row stride ldg elements) into shared memory (row
 * stride lds); rows >= valid_rows are zero-filled. cols*sizeof(E)/16 must be a power of two
 * (every tile here is 32..256 columns), so the row/column split is a shift, not a division.
 * The whole block takes part; the caller commits and waits. */
template <typename E>
__device__ __forceinline__ void tile_load_async(E *s, int lds, const E *g, long ldg, int rows,
                                                int cols, int valid_rows) {
    constexpr int vec = 16 / (int)sizeof(E);
    const int cpr = cols / vec, sh = __ffs(cpr) - 1;
    const int total = rows << sh;
    for (int idx = threadIdx.x; idx < total; idx += blockDim.x) {
        const int r = idx >> sh, cc = (idx & (cpr - 1)) * vec;
        const bool ok = r < valid_rows;
        cp_async16(s + r * lds + cc, ok ? (const void *)(g + r * ldg + cc) : (const void *)g, ok);
    }
}

/* A ROWS x COLS tile copied in 16-byte pieces by NTH threads, shapes known at compile time: each
 * thread takes the piece at (r0, cc) and the ones RSTEP rows below it, N in all. */
template <typename E, int ROWS, int COLS, int NTH> struct tile_pieces {
    static constexpr int VEC = 16 / (int)sizeof(E), CPR = COLS / VEC, N = ROWS * CPR / NTH, RSTEP = NTH / CPR;
    static_assert(NTH % CPR == 0 && ROWS * CPR % NTH == 0, "tile and block shapes must divide");
    int r0, cc;
    __device__ __forceinline__ tile_pieces() : r0(threadIdx.x / CPR), cc((threadIdx.x % CPR) * VEC) {}
};

/* tile_load_async with the tile shape and the block size known at compile time (the hot loads
 * of the state passes): per thread one base address, then fixed strides. FULL: every row exists
 * (no row test, no zero fill; valid_rows is not read). */
template <typename E, int ROWS, int COLS, int NTH, bool FULL = false>
__device__ __forceinline__ void tile_load_async_t(E *s, int lds, const E *g, long ldg, int valid_rows) {
    using T = tile_pieces<E, ROWS, COLS, NTH>;
    const T t;
    const E *gp = g + t.r0 * ldg + t.cc;
    E *sp = s + t.r0 * lds + t.cc;
#pragma unroll
    for (int i = 0; i < T::N; ++i) {
        const bool ok = FULL || t.r0 + i * T::RSTEP < valid_rows;
        cp_async16(sp + i * T::RSTEP * lds, ok ? (const void *)(gp + i * T::RSTEP * ldg) : (const void *)g, ok);
    }
}

/* A tile of 64 rows of which the first L exist: the row test only where some are missing (the
 * last chunk of a sequence). */
template <typename E, int COLS, int NTH>
__device__ __forceinline__ void chunk_load_async(E *s, int lds, const E *g, long ldg, int L) {
    if (L == 64) tile_load_async_t<E, 64, COLS, NTH, true>(s, lds, g, ldg, 64);
    else tile_load_async_t<E, 64, COLS, NTH>(s, lds, g, ldg, L);
}

/* Copy a ROWS x COLS shared tile to global memory with 16-byte stores, the shapes and the block
 * size known at compile time (the state passes' h and dh: every row exists). */
template <typename E, int ROWS, int COLS, int NTH>
__device__ __forceinline__ void tile_store_t(E *g, long ldg, const E *s, int lds) {
    using T = tile_pieces<E, ROWS, COLS, NTH>;
    const T t;
    E *gp = g + t.r0 * ldg + t.cc;
    const E *sp = s + t.r0 * lds + t.cc;
    const long gstep = T::RSTEP * ldg;
#pragma unroll 1 /* unrolled, the compiler keeps every row's address live through the caller's loop */
    for (int i = 0; i < T::N; ++i, gp += gstep, sp += T::RSTEP * lds)
        *reinterpret_cast<uint4 *>(gp) = *reinterpret_cast<const uint4 *>(sp);
}

/* Copy a rows x cols shared tile to global memory with 16-byte stores; rows >= valid_rows are
 * skipped. Same column constraint as tile_load_async. */
template <typename E>
__device__ __forceinline__ void tile_store(E *g, long ldg, const E *s, int lds, int rows,
                                           int cols, int valid_rows) {
    constexpr int vec = 16 / (int)sizeof(E);
    const int cpr = cols / vec, sh = __ffs(cpr) - 1;
    const int total = rows << sh;
    for (int idx = threadIdx.x; idx < total; idx += blockDim.x) {
        const int r = idx >> sh, cc = (idx & (cpr - 1)) * vec;
        if (r < valid_rows)
            *reinterpret_cast<uint4 *>(g + r * ldg + cc) =
                *reinterpret_cast<const uint4 *>(s + r * lds + cc);
    }
}

/* ---- fragments ---------------------------------------------------------------------------- */
__device__ __forceinline__ int frag_r(int e) { return ((threadIdx.x & 31) >> 2) + ((e >> 1) << 3); }
__device__ __forceinline__ int frag_c(int e) { return ((threadIdx.x & 3) << 1) + (e & 1); }

template <int MT, int NT> __device__ __forceinline__ void acc_zero(float (&acc)[MT][NT][4]) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
}

/* Sum over the 8 lanes that share a column (over a row: quad_sum, mma_common.cuh). */
__device__ __forceinline__ float col_sum8(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 4);
    x += __shfl_xor_sync(0xffffffffu, x, 8);
    x += __shfl_xor_sync(0xffffffffu, x, 16);
    return x;
}

/* ---- the warp tile product -------------------------------------------------------------------
 * acc[MT][NT] (a 16*MT x 8*NT block) += A * B over kdim (a multiple of 16), operands in shared
 * memory. A(m,k) is A[m*lda + k] (OP_MK) or A[k*lda + m] (OP_KM); B(k,n) is B[k*ldb + n] (OP_KN)
 * or B[n*ldb + k] (OP_NK). Pointers address element (0,0) of the warp's block. */
enum { OP_MK = 0, OP_KM = 1 };
enum { OP_KN = 0, OP_NK = 1 };

template <int MT, int NT, int AL, int BL>
__device__ __forceinline__ void warp_mma(float (&acc)[MT][NT][4], const bf16 *A, int lda,
                                         const bf16 *B, int ldb, int kdim) {
    static_assert(NT % 2 == 0, "n tiles come in pairs (ldmatrix x4)");
    const int lane = threadIdx.x & 31;
    /* per-lane row/column offsets of the ldmatrix addresses */
    const int a_off = (AL == OP_MK) ? (lane & 15) * lda + (lane >> 4) * 8
                                    : ((lane & 7) + (lane >> 4) * 8) * lda + ((lane >> 3) & 1) * 8;
    const int b_off = (BL == OP_NK) ? ((lane & 7) + (lane >> 4) * 8) * ldb + ((lane >> 3) & 1) * 8
                                    : ((lane & 7) + ((lane >> 3) & 1) * 8) * ldb + (lane >> 4) * 8;
    for (int kk = 0; kk < kdim; kk += 16) {
        unsigned a[MT][4], b[NT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            if (AL == OP_MK) ldsm_x4(a[mt], A + a_off + mt * 16 * lda + kk);
            else ldsm_x4_t(a[mt], A + a_off + kk * lda + mt * 16);
        }
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
            unsigned r[4];
            if (BL == OP_NK) ldsm_x4(r, B + b_off + np * 16 * ldb + kk);
            else ldsm_x4_t(r, B + b_off + kk * ldb + np * 16);
            b[2 * np][0] = r[0];
            b[2 * np][1] = r[1];
            b[2 * np + 1][0] = r[2];
            b[2 * np + 1][1] = r[3];
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) mma_bf16(acc[mt][nt], a[mt], b[nt][0], b[nt][1]);
    }
}

/* fp32: the same fragments by FMA (full fp32 accuracy; tf32 would not meet 1e-4). */
template <int MT, int NT, int AL, int BL>
__device__ __forceinline__ void warp_mma(float (&acc)[MT][NT][4], const float *A, int lda,
                                         const float *B, int ldb, int kdim) {
    const int lane = threadIdx.x & 31, gr = lane >> 2, qc = (lane & 3) * 2;
#pragma unroll 2
    for (int k = 0; k < kdim; ++k) {
        float a[MT][2], b[NT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const int r = mt * 16 + gr;
            a[mt][0] = (AL == OP_MK) ? A[r * lda + k] : A[k * lda + r];
            a[mt][1] = (AL == OP_MK) ? A[(r + 8) * lda + k] : A[k * lda + r + 8];
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int c = nt * 8 + qc;
            b[nt][0] = (BL == OP_KN) ? B[k * ldb + c] : B[c * ldb + k];
            b[nt][1] = (BL == OP_KN) ? B[k * ldb + c + 1] : B[(c + 1) * ldb + k];
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                acc[mt][nt][0] = fmaf(a[mt][0], b[nt][0], acc[mt][nt][0]);
                acc[mt][nt][1] = fmaf(a[mt][0], b[nt][1], acc[mt][nt][1]);
                acc[mt][nt][2] = fmaf(a[mt][1], b[nt][0], acc[mt][nt][2]);
                acc[mt][nt][3] = fmaf(a[mt][1], b[nt][1], acc[mt][nt][3]);
            }
    }
}

/* tf32 tensor-core product of fp32 shared tiles, for the merges of the triangular inverse in
 * bf16 mode: acc[NT] (16 x 8*NT) += A (16 x kdim, A[m*lda+k]) * B (kdim x 8*NT, B[k*ldb+n]),
 * kdim a multiple of 8. m16n8k8 fragments: a0 (g,q) a1 (g+8,q) a2 (g,q+4) a3 (g+8,q+4),
 * b0 (q,g) b1 (q+4,g). */
__device__ __forceinline__ unsigned f2tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}
template <int NT>
__device__ __forceinline__ void warp_mma_tf32(float (&acc)[NT][4], const float *A, int lda,
                                              const float *B, int ldb, int kdim) {
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    for (int k0 = 0; k0 < kdim; k0 += 8) {
        const unsigned a0 = f2tf32(A[g * lda + k0 + q]), a1 = f2tf32(A[(g + 8) * lda + k0 + q]);
        const unsigned a2 = f2tf32(A[g * lda + k0 + q + 4]), a3 = f2tf32(A[(g + 8) * lda + k0 + q + 4]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const unsigned b0 = f2tf32(B[(k0 + q) * ldb + nt * 8 + g]);
            const unsigned b1 = f2tf32(B[(k0 + q + 4) * ldb + nt * 8 + g]);
            asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                "{%8,%9}, {%0,%1,%2,%3};\n"
                : "+f"(acc[nt][0]), "+f"(acc[nt][1]), "+f"(acc[nt][2]), "+f"(acc[nt][3])
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
    }
}

/* Write a warp's state fragments (rows row0 + 16*mt.., columns col0 + 8*nt..) into a shared
 * tile as E: the state passes keep the fp32 state in registers and this copy feeds the mma. */
template <typename E, int MT, int NT, int LD>
__device__ __forceinline__ void state_to_smem(E *sS, const float (&S)[MT][NT][4], int row0,
                                              int col0) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const int r = row0 + mt * 16 + frag_r(2 * p), col = col0 + nt * 8 + frag_c(0);
                store2(sS + r * LD + col, S[mt][nt][2 * p], S[mt][nt][2 * p + 1]);
            }
}

/* ---- indexing ------------------------------------------------------------------------------ */
/* Element offset of token row (b, t) of head h in a [B,T,H,D] tensor. */
__device__ __forceinline__ long tok_off(const gdn_delta_args &a, int b, int t, int h, int D) {
    return (((long)b * a.T + t) * a.H + h) * D;
}
/* Element offset of token row (b, t) of q/k head hq (h / group for value head h) in a [B,T,Hq,K]
 * tensor; its token rows are qk_ld(a) elements apart. */
__device__ __forceinline__ long qk_off(const gdn_delta_args &a, int b, int t, int hq) {
    return (((long)b * a.T + t) * a.Hq + hq) * a.K;
}
__device__ __forceinline__ long qk_ld(const gdn_delta_args &a) { return (long)a.Hq * a.K; }
/* Element offset of row r of chunk c of head bh in a chunk-padded [B*H, NT*64, D] tensor. */
__device__ __forceinline__ long row_off(const gdn_delta_args &a, int bh, int c, int r, int D) {
    return (((long)bh * a.NT + c) * GDN_CHUNK + r) * D;
}

/* ---- the state passes' per-chunk gate slot ------------------------------------------------- */
/* A slot of a state pass's small buffer: G of the chunk (64 floats), then with documents the
 * chunk's fl entry (f, seg[63], 0, 0), both copied with the chunk's tiles, so that no global
 * load sits on the sequential path. */
constexpr int STATE_GSLOT = 64 + 4;

/* cp.async of chunk c's G (threads 0..15) and, with documents, its fl entry (thread 16) into
 * the slot gsb; part of the caller's group. */
__device__ __forceinline__ void state_gate_load(const gdn_delta_args &a, float *gsb, int bh, int b, int c) {
    const int tid = threadIdx.x;
    if (tid < 16) cp_async16(gsb + 4 * tid, a.G + ((long)bh * a.NT + c) * GDN_CHUNK + 4 * tid, true);
    else if (tid == 16 && a.doc) cp_async16(gsb + 64, a.fl + (long)b * a.NT + c, true);
}

/* The landed slot's (f, seg[63]); without documents (64, -1): no start in the chunk. */
__device__ __forceinline__ int4 state_doc_view(const gdn_delta_args &a, const float *gsb) {
    return a.doc ? *reinterpret_cast<const int4 *>(gsb + 64) : make_int4(GDN_CHUNK, -1, 0, 0);
}

/* ---- the in-chunk cumulative log decay ------------------------------------------------------ */
/* Documents: whether row t of batch row b starts a document (a.doc NULL: never). */
__device__ __forceinline__ bool doc_start(const gdn_delta_args &a, int b, int t) {
    return a.doc && a.doc[(long)b * a.T + t] == t;
}

/* sSeg[0..63] = seg[i] of the chunk at t0 with L rows (see gdn_delta_args.doc): a max-scan of
 * (row i starts a document ? i : -1), rows past L flagged never (so they repeat seg[L-1]).
 * Without documents every entry is -1. The whole block calls it (one barrier inside, none
 * without documents); threads 0..63 write sSeg, and the caller syncs before reading it. */
__device__ __forceinline__ void chunk_seg(const gdn_delta_args &a, int b, int t0, int L, int *sSeg) {
    const int tid = threadIdx.x, lane = tid & 31;
    if (!a.doc) { /* uniform: no barrier needed, the caller's covers the writes */
        if (tid < 64) sSeg[tid] = -1;
        return;
    }
    int sv = -1;
    if (tid < 64) {
        sv = tid < L && doc_start(a, b, t0 + tid) ? tid : -1;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, sv, o);
            if (lane >= o) sv = max(sv, y);
        }
    }
    if (tid < 64) sSeg[tid] = sv;
    __syncthreads();
    if (tid >= 32 && tid < 64) sSeg[tid] = max(sv, sSeg[31]);
}

/* sG[0..63] = inclusive cumulative sum of g over the chunk's rows (rows past L have g = 0, so
 * G stays flat there; a mixer without decay has a.g NULL and G = 0 throughout, docs/design.md
 * section 2.6). With documents the sum restarts at every start: G_i = g_seg[i] + ... + g_i
 * (a segmented scan: an element's partial sum takes the one left of it only while no start lies
 * between; without documents the very same additions as the plain scan). The whole block calls
 * it (one barrier inside); threads 0..63 write sG, and the caller syncs before reading it.
 * k_intra and the backward's dVl kernel both call this one routine, so the G they compute
 * agree to the bit. */
__device__ __forceinline__ void chunk_log_decay(const gdn_delta_args &a, int b, int h, int t0, int L,
                                                float *sG) {
    const int tid = threadIdx.x, lane = tid & 31;
    bool cut = false; /* a start among the rows this partial sum covers */
    if (tid < 64) {
        float gv = tid < L && a.g ? a.g[((long)b * a.T + t0 + tid) * a.H + h] : 0.f;
        if (a.doc) {
            cut = tid < L && doc_start(a, b, t0 + tid);
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const float y = __shfl_up_sync(0xffffffffu, gv, o);
                const bool cy = __shfl_up_sync(0xffffffffu, (int)cut, o) != 0;
                if (lane >= o) {
                    if (!cut) gv += y;
                    cut = cut || cy;
                }
            }
        } else {
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const float y = __shfl_up_sync(0xffffffffu, gv, o);
                if (lane >= o) gv += y;
            }
        }
        sG[tid] = gv;
    }
    __syncthreads();
    if (tid >= 32 && tid < 64 && !cut) sG[tid] += sG[31];
}

/* Masked decays of row i (docs/design.md section 3.8; seg of chunk_seg): gamma_i, and
 * Gam_ij = exp(gi - gj) for j <= i. Without documents (seg -1) exactly the unmasked values. */
__device__ __forceinline__ float gam_row(float gi, int segi) { return segi < 0 ? expf(gi) : 0.f; }
__device__ __forceinline__ float gam_pair(float gi, float gj, int j, int segi) {
    return j >= segi ? expf(gi - gj) : 0.f;
}

/* ---- host side: kernel launch helpers shared by the .cu files ------------------------------- */
/* Launchers of the forward phases, reused by the backward (recompute). */
void gdn_delta_launch_intra(const gdn_delta_args *a, gdn_cuda_precision p, cudaStream_t st);
/* share: the state pass runs beside another kernel, so it sizes itself for half a
 * multiprocessor where that costs no tile width (gdn_state_pass_choice). dv_local mode: 1 = dVl, 2 = D^T and the intra gate term,
 * 4 (with 1) = G from g instead of the workspace. */
void gdn_delta_launch_state_fwd(const gdn_delta_args *a, gdn_cuda_precision p, cudaStream_t st, int share);
void gdn_delta_launch_output(const gdn_delta_args *a, gdn_cuda_precision p, cudaStream_t st);
void gdn_delta_launch_dv_local(const gdn_delta_args *a, gdn_cuda_precision p, cudaStream_t st, int mode);
void gdn_delta_launch_state_bwd(const gdn_delta_args *a, gdn_cuda_precision p, cudaStream_t st, int share);
/* k_grad, then where group > 1 the group sum of its per-value-head dq, dk into dq, dk. */
void gdn_delta_launch_grad(const gdn_delta_args *a, gdn_cuda_precision p, cudaStream_t st);

/* The state passes come in V-tile widths BV = 32, 64, 128 (BV/8 warps, 32 columns per warp);
 * the host picks the one that spreads the warps most evenly over the multiprocessors (ties go
 * to the wider tile: fewer re-reads of the per-chunk K/W/Q tiles) and the deepest ring that
 * still lets the chosen number of blocks share a multiprocessor. */
typedef struct {
    int bv;
    void (*kernel)(gdn_delta_args a, int slots);
    size_t (*smem)(int slots);
} gdn_state_variant;
typedef struct {
    int bv, slots;
    int shared; /* sized for half a multiprocessor */
} gdn_state_choice;
/* The variant of a state pass among v[3] = widths 32, 64, 128 (the third, 16 warps, only where
 * V >= 128; with K = 256 and fp32 tiles it would spill a little, but its shared memory rules it
 * out there anyway), with 2..max_slots ring slots. With `share` (another kernel runs beside it)
 * it is sized for half a multiprocessor, unless that would take a narrower tile than whole
 * multiprocessors allow: a narrower tile re-reads every chunk's K, Q, W tiles more often, and
 * that costs more than the company saves (measured at K = 256, where half a multiprocessor
 * fits only the 32-column tile: B16 T2048 H12 fwd+bwd 7.26 ms shared, 6.45 ms with the
 * 128-column tile on whole ones; at K = 128 the widths agree and sharing wins, B4 T4096 1.74
 * against 1.81 ms). */
gdn_state_choice gdn_state_pass_choice(const gdn_state_variant *v, const gdn_delta_args *a, int max_slots,
                                       int share);
/* Launches gdn_state_pass_choice's variant: grid (V/BV, B*H), BV*4 threads. */
void gdn_launch_state_pass(const gdn_state_variant *v, const gdn_delta_args *a, int max_slots,
                           int share, const char *name, cudaStream_t st);
/* Whether the forward state pass runs sized for half a multiprocessor beside other kernels
 * (gdn_state_pass_choice with share): where it does not, the forward's two pipelined halves
 * would only add launches. */
int gdn_delta_state_fwd_shares(const gdn_delta_args *a, gdn_cuda_precision p);

/* Calls LAUNCH<E, K>(...) for the element type of p and the key head width a->K. */
#define GDN_DELTA_DISPATCH_K(LAUNCH, a, p, ...)                                                   \
    do {                                                                                          \
        const int bf_ = (p) == GDN_CUDA_BF16;                                                     \
        switch ((a)->K) {                                                                         \
        case 64: bf_ ? LAUNCH<bf16, 64>(__VA_ARGS__) : LAUNCH<float, 64>(__VA_ARGS__); break;     \
        case 128: bf_ ? LAUNCH<bf16, 128>(__VA_ARGS__) : LAUNCH<float, 128>(__VA_ARGS__); break;  \
        case 256: bf_ ? LAUNCH<bf16, 256>(__VA_ARGS__) : LAUNCH<float, 256>(__VA_ARGS__); break;  \
        default: GDN_CUDA_DIE("gated delta rule: K=%d is not 64, 128 or 256", (a)->K);            \
        }                                                                                         \
    } while (0)

/* Fills the argument block's shape, mixer (delta) and workspace pointers. */
void gdn_delta_args_init(gdn_delta_args *a, const gdn_delta_shape *s, gdn_cuda_precision p,
                         float scale, void *workspace);

/* Raises a kernel's dynamic shared-memory limit and carveout, and checks it fits. */
void gdn_cuda_set_smem(const void *kernel, size_t bytes, const char *name);

/* Small helpers shared by the host files (delta_hostio.cu). */
size_t gdn_delta_elem_size(gdn_cuda_precision p);          /* 2 (bf16) or 4 (fp32) */
void *gdn_delta_alloc_poisoned(size_t n, size_t es);        /* cudaMalloc, filled with NaN bits */
void gdn_delta_free_all(void **ptrs, int n);                /* cudaFree of the non-NULL ones */
void gdn_delta_to_bf16(bf16 *dst, const float *src, size_t n); /* device conversion, default stream */

#endif
