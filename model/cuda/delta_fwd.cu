/* Forward kernels of the chunked gated delta rule (docs/design.md section 3.2, section 3.6), for
 * every mixer of model/mixer.h (section 2.6): without decay g is NULL and G = 0; without the
 * delta term k_intra writes U = V, W = 0 (template flag DELTA) and the other kernels run as they
 * are:
 *   k_intra     per (chunk, head): gate cumsum G, A, T = (I+A)^-1, W, U
 *   k_state_fwd per (V tile, head), sequential over chunks: h (state entering each chunk), v_new
 *   k_output    per (chunk, head): o = s [diag(gamma) Q S + (Q K^T o Gam, lower) v_new]
 * Each works on a chunk range [c0, c1) so that the host can pipeline two halves of the
 * sequence. The backward reuses the first two to recompute what it needs. */
#include "model/cuda/delta_common.cuh"

/* ================================ intra-chunk: G, A, T, W, U ================================ */

/* T = (I + A)^-1 for a strictly lower triangular 64x64 A (fp32, row stride 68), in place:
 * the 16x16 diagonal blocks by forward substitution, then block row I of the inverse from
 * T_IJ = -T_II sum_{J<=k<I} A_Ik T_kJ. X is 16x68 scratch. 128 threads. */
__device__ void tri_inverse64(float *sA, float *sX) {
    const int tid = threadIdx.x;
    const int LD = 68;
    const int base = (tid >> 4) << 4, cc = tid & 15;
    float x[16];
    if (tid < 64) {
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            float s0 = (i == cc) ? 1.f : 0.f, s1 = 0.f;
            const float *arow = sA + (base + i) * LD + base;
#pragma unroll
            for (int j = 0; j < i; j += 2) {
                s0 -= arow[j] * x[j];
                if (j + 1 < i) s1 -= arow[j + 1] * x[j + 1];
            }
            x[i] = s0 + s1;
        }
    }
    __syncthreads(); /* everyone has read its diagonal block of A */
    if (tid < 64) {
#pragma unroll
        for (int i = 0; i < 16; ++i) sA[(base + i) * LD + base + cc] = x[i];
    }
    /* the strictly upper part of the inverse is zero */
    for (int idx = tid; idx < 64 * 64; idx += blockDim.x) {
        const int r = idx >> 6, c = idx & 63;
        if ((c >> 4) > (r >> 4)) sA[r * LD + c] = 0.f;
    }
    __syncthreads();
    for (int I = 1; I < 4; ++I) {
        /* X_IJ = sum_{k=16J}^{16I-1} A[16I+r][k] T[k][16J+cc] */
        for (int idx = tid; idx < I * 256; idx += blockDim.x) {
            const int J = idx >> 8, r = (idx >> 4) & 15, cc = idx & 15;
            const float *arow = sA + (16 * I + r) * LD;
            float s0 = 0.f, s1 = 0.f;
            for (int k = 16 * J; k < 16 * I; k += 2) {
                s0 += arow[k] * sA[k * LD + 16 * J + cc];
                s1 += arow[k + 1] * sA[(k + 1) * LD + 16 * J + cc];
            }
            sX[r * LD + 16 * J + cc] = s0 + s1;
        }
        __syncthreads();
        /* T_IJ = -T_II X_IJ (T_II lower triangular) */
        for (int idx = tid; idx < I * 256; idx += blockDim.x) {
            const int J = idx >> 8, r = (idx >> 4) & 15, cc = idx & 15;
            const float *trow = sA + (16 * I + r) * LD + 16 * I;
            float s = 0.f;
            for (int m = 0; m <= r; ++m) s += trow[m] * sX[m * LD + 16 * J + cc];
            sA[(16 * I + r) * LD + 16 * J + cc] = -s;
        }
        __syncthreads();
    }
}

/* bf16 mode: the same inverse with the merges on tensor cores (tf32; T is rounded to bf16 for
 * the W/U products anyway). Diagonal 16x16 blocks by substitution (fp32, one warp each), then
 * the 32x32 blocks T10, T32 and finally the lower-left 32x32 block, each as
 * T_BA = -T_BB (A_BA T_AA). Scratch X: 32 x 68 floats. */
__device__ void tri_inverse64_tc(float *sA, float *sX) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int LD = 68, g = lane >> 2, q = lane & 3;
    const bool worker = warp < 4; /* warps 4.. only join the barriers */
    if (worker) {
        const int base = warp * 16, cc = lane & 15;
        float x[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            float s0 = (i == cc) ? 1.f : 0.f, s1 = 0.f;
            const float *arow = sA + (base + i) * LD + base;
#pragma unroll
            for (int j = 0; j < i; j += 2) {
                s0 -= arow[j] * x[j];
                if (j + 1 < i) s1 -= arow[j + 1] * x[j + 1];
            }
            x[i] = s0 + s1;
        }
        __syncwarp();
        if (lane < 16) {
#pragma unroll
            for (int i = 0; i < 16; ++i) sA[(base + i) * LD + base + cc] = x[i];
        }
    }
    for (int idx = tid; idx < 64 * 64; idx += blockDim.x) {
        const int r = idx >> 6, c = idx & 63;
        if ((c >> 4) > (r >> 4)) sA[r * LD + c] = 0.f;
    }
    __syncthreads();
    /* 32x32 blocks: warps 0,1 build T10 (8 columns each), warps 2,3 build T32 */
    {
        const int ab = ((warp >> 1) & 1) * 2, bb = ab + 1, n0 = (warp & 1) * 8;
        float R[1][4] = {{0.f, 0.f, 0.f, 0.f}};
        if (worker) {
            float P[1][4] = {{0.f, 0.f, 0.f, 0.f}};
            warp_mma_tf32<1>(P, sA + 16 * bb * LD + 16 * ab, LD, sA + 16 * ab * LD + 16 * ab + n0, LD, 16);
            float *scr = sX + warp * 16 * 24;
            scr[g * 24 + 2 * q] = P[0][0];
            scr[g * 24 + 2 * q + 1] = P[0][1];
            scr[(g + 8) * 24 + 2 * q] = P[0][2];
            scr[(g + 8) * 24 + 2 * q + 1] = P[0][3];
            __syncwarp();
            warp_mma_tf32<1>(R, sA + 16 * bb * LD + 16 * bb, LD, scr, 24, 16);
        }
        __syncthreads(); /* the partner warp is done reading A_ba */
        if (worker) {
            float *t = sA + (16 * bb + g) * LD + 16 * ab + n0 + 2 * q;
            t[0] = -R[0][0];
            t[1] = -R[0][1];
            t[8 * LD] = -R[0][2];
            t[8 * LD + 1] = -R[0][3];
        }
    }
    __syncthreads();
    /* lower-left 32x32: X = A_BA T_AA, T_BA = -T_BB X; warp = 16x16 quadrant */
    {
        const int mr = (warp & 1) * 16, nc = ((warp >> 1) & 1) * 16;
        if (worker) {
            float X[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
            warp_mma_tf32<2>(X, sA + (32 + mr) * LD, LD, sA + nc, LD, 32);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                float *x = sX + (mr + g) * 40 + nc + nt * 8 + 2 * q;
                x[0] = X[nt][0];
                x[1] = X[nt][1];
                x[8 * 40] = X[nt][2];
                x[8 * 40 + 1] = X[nt][3];
            }
        }
        __syncthreads();
        if (worker) {
            float R[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
            warp_mma_tf32<2>(R, sA + (32 + mr) * LD + 32, LD, sX + nc, 40, 32);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                float *t = sA + (32 + mr + g) * LD + nc + nt * 8 + 2 * q;
                t[0] = -R[nt][0];
                t[1] = -R[nt][1];
                t[8 * LD] = -R[nt][2];
                t[8 * LD + 1] = -R[nt][3];
            }
        }
    }
    __syncthreads();
}

/* Shared memory of k_intra: K and V tiles, A/T (fp32), then T diag(beta) and
 * T diag(beta gamma) as E (the inverse's scratch lives in the first of those), 4 vectors. */
template <typename E> static size_t intra_smem(int K, int V) {
    return tile_bytes<E>(64, K) + tile_bytes<E>(64, V) + 64 * 68 * 4 + 2 * tile_bytes<E>(64, 64) +
           5 * 64 * 4;
}

/* MINB: blocks per multiprocessor the register budget is cut for (3 where the tiles let three
 * fit; where they do not, 2, so that the kernel does not spill for nothing).
 * DELTA: the mixer has the delta term (G, D). Without it (M, L; docs/design.md section 2.6) the
 * chunk writes its values as they are: there is no A, T or beta, so the kernel writes only G,
 * U = V and W = 0, and the state pass's v_new = U - W S is then V exactly. */
template <typename E, int MINB, bool DELTA>
__global__ void __launch_bounds__(256, MINB) k_intra(const gdn_delta_args a) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int K = a.K, V = a.V;
    const int LDK = pad_ld<E>(K), LDV = pad_ld<E>(V), LDT = pad_ld<E>(64), LDA = 68;
    static_assert(2 * 64 * (64 + 16 / sizeof(E)) * sizeof(E) >= 32 * 68 * 4, "inverse scratch");
    E *sK = reinterpret_cast<E *>(smem);
    E *sV = sK + 64 * LDK;
    float *sA = reinterpret_cast<float *>(sV + 64 * LDV);
    E *sTb = reinterpret_cast<E *>(sA + 64 * LDA);
    E *sTbg = sTb + 64 * LDT;
    float *sX = reinterpret_cast<float *>(sTb); /* inverse scratch, dead before sTb is written */
    float *sG = reinterpret_cast<float *>(sTbg + 64 * LDT);
    float *sB = sG + 64, *sFb = sB + 64, *sFbg = sFb + 64;
    int *sSeg = reinterpret_cast<int *>(sFbg + 64);

    const int c = a.c0 + blockIdx.x, bh = blockIdx.y, b = bh / a.H, h = bh % a.H, hq = h / a.group;
    const int t0 = c * GDN_CHUNK, L = min(GDN_CHUNK, a.T - t0);
    const int tid = threadIdx.x, warp = tid >> 5, wm = warp & 3, n0 = (warp >> 2) * 32;

    if (DELTA) tile_load_async(sK, LDK, (const E *)a.k + qk_off(a, b, t0, hq), qk_ld(a), 64, K, L);
    tile_load_async(sV, LDV, (const E *)a.v + tok_off(a, b, t0, h, V), (long)a.H * V, 64, V, L);
    cp_async_commit();

    /* G: inclusive cumsum of g inside the chunk (rows past the end have g = 0, beta = 0) */
    if (DELTA && tid < 64) sB[tid] = tid < L ? a.beta[((long)b * a.T + t0 + tid) * a.H + h] : 0.f;
    chunk_log_decay(a, b, h, t0, L, sG);
    chunk_seg(a, b, t0, L, sSeg);
    __syncthreads();
    if (tid < 64) {
        a.G[((long)bh * a.NT + c) * GDN_CHUNK + tid] = sG[tid];
        if (DELTA) {
            sFb[tid] = sB[tid];
            /* beta gamma: gamma_i = 0 from the chunk's first start on (W rows there are 0, so
             * v_new = U there whatever the entering state) */
            sFbg[tid] = sB[tid] * gam_row(sG[tid], sSeg[tid]);
        }
    }
    /* the state passes' per-chunk view of the documents: (f, seg[63]), f = the first start
     * (64: none). Head 0's block writes it for its batch row: every reader is a later launch. */
    if (a.doc && h == 0 && tid == 0) {
        int f = 64;
        for (int i = 63; i >= 0; --i)
            if (sSeg[i] == i) f = i;
        a.fl[(long)b * a.NT + c] = make_int4(f, sSeg[63], 0, 0);
    }
    cp_async_wait<0>();
    __syncthreads();

    if constexpr (!DELTA) {
        /* U = V (the padded rows were zero-filled by the load), W = 0; T is not needed */
        tile_store((E *)a.U + row_off(a, bh, c, 0, V), V, sV, LDV, 64, V, 64);
        uint4 *Wz = reinterpret_cast<uint4 *>((E *)a.W + row_off(a, bh, c, 0, K));
        for (int idx = tid; idx < 64 * K * (int)sizeof(E) / 16; idx += blockDim.x)
            Wz[idx] = make_uint4(0u, 0u, 0u, 0u);
        return;
    }

    /* A = strictly_lower(diag(beta) K K^T o Gam); exp only of G_i - G_j with i > j inside one
     * document (j >= seg[i]): no entry across a start, so T = (I+A)^-1 is block diagonal (its
     * entries across documents come out exact zeros: every product feeding them has a zero
     * factor) */
    {
        float acc[1][4][4];
        acc_zero(acc);
        warp_mma<1, 4, OP_MK, OP_NK>(acc, sK + wm * 16 * LDK, LDK, sK + n0 * LDK, LDK, K);
        const int i0 = wm * 16 + frag_r(0);
        const float gi0 = sG[i0], gi1 = sG[i0 + 8], bi0 = sB[i0], bi1 = sB[i0 + 8];
        const bool docs = a.doc != NULL; /* without documents no seg in registers */
        const int sg0 = docs ? sSeg[i0] : -1, sg1 = docs ? sSeg[i0 + 8] : -1;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = i0 + (e >> 1) * 8, j = n0 + nt * 8 + frag_c(e);
                const float gi = e < 2 ? gi0 : gi1, bi = e < 2 ? bi0 : bi1;
                sA[i * LDA + j] = (i > j && (!docs || j >= (e < 2 ? sg0 : sg1))) ? bi * acc[0][nt][e] * expf(gi - sG[j]) : 0.f;
            }
    }
    __syncthreads();
    if (sizeof(E) == 2) tri_inverse64_tc(sA, sX);
    else tri_inverse64(sA, sX);

    /* T to the workspace (for the backward); T diag(beta) and T diag(beta gamma) as E */
    E *Tg = (E *)a.Tm + ((long)bh * a.NT + c) * 64 * 64;
    for (int idx = tid; idx < 64 * 32; idx += blockDim.x) {
        const int r = idx >> 5, col = (idx & 31) * 2;
        const float x0 = sA[r * LDA + col], x1 = sA[r * LDA + col + 1];
        store2(Tg + r * 64 + col, x0, x1);
        store2(sTb + r * LDT + col, x0 * sFb[col], x1 * sFb[col + 1]);
        store2(sTbg + r * LDT + col, x0 * sFbg[col], x1 * sFbg[col + 1]);
    }
    __syncthreads();

    /* W = (T diag(beta gamma)) K, U = (T diag(beta)) V */
    E *Wg = (E *)a.W + row_off(a, bh, c, 0, K);
    for (int nb = 0; nb < K; nb += 64) {
        float acc[1][4][4];
        acc_zero(acc);
        warp_mma<1, 4, OP_MK, OP_KN>(acc, sTbg + wm * 16 * LDT, LDT, sK + nb + n0, LDK, 64);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const int i = wm * 16 + frag_r(2 * p), j = nb + n0 + nt * 8 + frag_c(0);
                store2(Wg + (long)i * K + j, acc[0][nt][2 * p], acc[0][nt][2 * p + 1]);
            }
    }
    E *Ug = (E *)a.U + row_off(a, bh, c, 0, V);
    for (int nb = 0; nb < V; nb += 64) {
        float acc[1][4][4];
        acc_zero(acc);
        warp_mma<1, 4, OP_MK, OP_KN>(acc, sTb + wm * 16 * LDT, LDT, sV + nb + n0, LDV, 64);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const int i = wm * 16 + frag_r(2 * p), j = nb + n0 + nt * 8 + frag_c(0);
                store2(Ug + (long)i * V + j, acc[0][nt][2 * p], acc[0][nt][2 * p + 1]);
            }
    }
}

/* ===================== sequential state pass: h per chunk, v_new, ht ========================
 * Block = (V tile of BV columns, head) with BV/8 warps: warp (wm, wn) = (warp % 4, warp / 4)
 * owns state rows wm*K/4 .. and columns wn*32 .. (fp32 registers); a bf16/fp32 copy of the state
 * in shared memory feeds W S. Per chunk the W and K tiles stream through a ring of `slots`
 * shared buffers filled by cp.async ahead of use (tile 2c = W_c with U_c and G_c, tile 2c+1 =
 * K_c); U and G go to one of nsb = ceil(slots/2) small buffers. */
template <typename E, int K, int BV> static size_t state_fwd_smem(int slots) {
    const int nsb = (slots + 1) / 2;
    return (size_t)slots * tile_bytes<E>(64, K) + nsb * (tile_bytes<E>(64, BV) + STATE_GSLOT * 4) +
           tile_bytes<E>(K, BV) + tile_bytes<E>(64, BV);
}

/* Issue the cp.async group of tile `tile` into ring slot `slot` (a W tile also brings U and G
 * into small buffer `sb`); past the last chunk the group is empty, which keeps the count of
 * pending groups uniform. hq: the q/k head of value head bh % H. */
template <typename E, int K, int BV>
__device__ __forceinline__ void state_fwd_issue(const gdn_delta_args &a, int tile, E *dst, E *u,
                                                float *gsb, int bh, int b, int hq, int v0) {
    constexpr int LDT = pad_ld<E>(K), LDU = pad_ld<E>(BV);
    const int c = a.c0 + (tile >> 1);
    if (c < a.c1) {
        if ((tile & 1) == 0) {
            tile_load_async_t<E, 64, K, BV * 4, true>(dst, LDT, (const E *)a.W + row_off(a, bh, c, 0, K), K, 64);
            tile_load_async_t<E, 64, BV, BV * 4, true>(u, LDU, (const E *)a.U + row_off(a, bh, c, 0, a.V) + v0, a.V, 64);
            state_gate_load(a, gsb, bh, b, c);
        } else {
            const int L = min(GDN_CHUNK, a.T - c * GDN_CHUNK);
            chunk_load_async<E, K, BV * 4>(dst, LDT, (const E *)a.k + qk_off(a, b, c * GDN_CHUNK, hq), qk_ld(a), L);
        }
    }
    cp_async_commit();
}

/* 128 registers at most (the second bound asks for 512 resident threads: 65536 / 512); left
 * free, the K = 256 tiles take 168 and fewer blocks fit beside the other pass */
template <typename E, int K, int BV>
__global__ void __launch_bounds__(BV * 4, 512 / (BV * 4)) k_state_fwd(const gdn_delta_args a, int slots) {
    constexpr int MT = K / 64, NTV = 4;
    constexpr int LDT = pad_ld<E>(K), LDU = pad_ld<E>(BV);
    extern __shared__ __align__(16) unsigned char smem[];
    const int nsb = (slots + 1) / 2;
    E *ring = reinterpret_cast<E *>(smem);
    E *sU = ring + slots * 64 * LDT;
    E *sS = sU + nsb * 64 * LDU;
    E *sVn = sS + K * LDU;
    float *sG = reinterpret_cast<float *>(sVn + 64 * LDU);

    const int bh = blockIdx.y, b = bh / a.H, hq = (bh % a.H) / a.group, v0 = blockIdx.x * BV;
    const int warp = threadIdx.x >> 5, wm = warp & 3, c0 = (warp >> 2) * 32, srow = wm * (K / 4);
    const int NT = a.NT;
    E *Vng = (E *)a.Vn;
    E *hg = (E *)a.h;

    float S[MT][NTV][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NTV; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = srow + mt * 16 + frag_r(e), col = v0 + c0 + nt * 8 + frag_c(e);
                const float *init = a.c0 > 0 ? a.carry : a.h0; /* second half: carried state */
                S[mt][nt][e] = init ? init[((long)bh * K + r) * a.V + col] : 0.f;
            }
    state_to_smem<E, MT, NTV, LDU>(sS, S, srow, c0);
    /* ring bookkeeping without divisions: `cur` = slot of the tile consumed in this phase,
     * `prev` = slot of the previous one (refilled now), sb_in / sb_out = small buffers of the
     * next W tile to issue / of the current chunk */
    int sb_in = 0;
    for (int i = 0; i < slots; ++i) {
        state_fwd_issue<E, K, BV>(a, i, ring + i * 64 * LDT, sU + sb_in * 64 * LDU, sG + sb_in * STATE_GSLOT, bh, b, hq, v0);
        if ((i & 1) == 0 && ++sb_in == nsb) sb_in = 0;
    }
    int cur = 0, prev = slots - 1, sb_out = 0;
    E *vng = Vng + row_off(a, bh, 0, 0, a.V) + v0;
    E *hgc = hg + (long)bh * NT * K * a.V + v0;

    /* One tile per phase: before phase u, wait for tile u, then refill the slot that tile u-1
     * (consumed by every warp before this barrier) held with tile u-1+slots. */
    for (int c = a.c0; c < a.c1; ++c) {
        cp_async_wait_dyn(slots - 2); /* W_c, U_c, G_c have landed */
        __syncthreads();
        if (c > a.c0) {
            const int t = 2 * (c - a.c0) - 1 + slots;
            state_fwd_issue<E, K, BV>(a, t, ring + prev * 64 * LDT, sU + sb_in * 64 * LDU, sG + sb_in * STATE_GSLOT, bh, b, hq, v0);
            if ((t & 1) == 0 && ++sb_in == nsb) sb_in = 0;
        }
        tile_store_t<E, K, BV, BV * 4>(hgc + (long)c * K * a.V, a.V, sS, LDU);

        /* v_new = U - W S; the K^T product takes diag(exp(G_last - G)) v_new */
        const E *sW = ring_take(ring, LDT, cur, prev, slots);
        const E *u = sU + sb_out * 64 * LDU;
        const float *gG = sG + sb_out * STATE_GSLOT;
        if (++sb_out == nsb) sb_out = 0;
        const int lst = state_doc_view(a, gG).y; /* documents: the chunk's last start (-1: none) */
        float acc[1][NTV][4];
        acc_zero(acc);
        warp_mma<1, NTV, OP_MK, OP_KN>(acc, sW + wm * 16 * LDT, LDT, sS + c0, LDU, K);
        const float Glast = gG[63]; /* padded rows have g = 0: G_63 = G of the last real row */
        /* documents: a start in the chunk drops the entering state (gamma_C = 0), and only the
         * rows of the last document (i >= lst) write into the state leaving it */
        const float gammaC = lst < 0 ? expf(Glast) : 0.f;
        const int i0 = wm * 16 + frag_r(0);
        const float e0 = expf(Glast - gG[i0]), e1 = expf(Glast - gG[i0 + 8]); /* no branch */
        const float r0 = i0 >= lst ? e0 : 0.f, r1 = i0 + 8 >= lst ? e1 : 0.f;
        /* this thread's v_new elements: rows i0, i0 + 8, columns c0 + nt*8 + frag_c(0) (+1) */
        E *vnc = vng + ((long)c * GDN_CHUNK + i0) * a.V + c0 + frag_c(0);
        const int so = i0 * LDU + c0 + frag_c(0);
#pragma unroll
        for (int nt = 0; nt < NTV; ++nt)
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const float2 uu = load2(u + so + p * 8 * LDU + nt * 8);
                const float vn0 = uu.x - acc[0][nt][2 * p], vn1 = uu.y - acc[0][nt][2 * p + 1];
                store2(vnc + p * 8 * (long)a.V + nt * 8, vn0, vn1);
                const float r = p ? r1 : r0;
                store2(sVn + so + p * 8 * LDU + nt * 8, vn0 * r, vn1 * r);
            }
        cp_async_wait_dyn(slots - 2); /* K_c has landed */
        __syncthreads();
        {
            const int t = 2 * (c - a.c0) + slots;
            state_fwd_issue<E, K, BV>(a, t, ring + prev * 64 * LDT, sU + sb_in * 64 * LDU, sG + sb_in * STATE_GSLOT, bh, b, hq, v0);
            if ((t & 1) == 0 && ++sb_in == nsb) sb_in = 0;
        }

        /* S = gamma_C S + K^T diag(r) v_new */
        const E *sKc = ring_take(ring, LDT, cur, prev, slots);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NTV; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) S[mt][nt][e] *= gammaC;
        warp_mma<MT, NTV, OP_KM, OP_KN>(S, sKc + srow, LDT, sVn + c0, LDU, 64);
        state_to_smem<E, MT, NTV, LDU>(sS, S, srow, c0);
    }
    cp_async_wait<0>();
    float *fin = a.c1 < NT ? a.carry : a.ht; /* first half: hand the state to the second */
    if (fin) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NTV; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = srow + mt * 16 + frag_r(e), col = v0 + c0 + nt * 8 + frag_c(e);
                    fin[((long)bh * K + r) * a.V + col] = S[mt][nt][e];
                }
    }
}

/* ================================ output: o per chunk ======================================= */
template <typename E> static size_t output_smem(int K) {
    const size_t ks = tile_bytes<E>(64, K) > tile_bytes<E>(K, 64) ? tile_bytes<E>(64, K)
                                                                   : tile_bytes<E>(K, 64);
    return tile_bytes<E>(64, K) + ks + 2 * tile_bytes<E>(64, 64) + 2 * 64 * 4;
}

/* 8 warps: warp (wm, wn) computes rows wm*16.. and columns wn*32.. of each 64x64 product. */
template <typename E> __global__ void __launch_bounds__(256, 2) k_output(const gdn_delta_args a) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int K = a.K, V = a.V;
    const int LDK = pad_ld<E>(K), LDP = pad_ld<E>(64);
    const size_t ks = tile_bytes<E>(64, K) > tile_bytes<E>(K, 64) ? tile_bytes<E>(64, K)
                                                                   : tile_bytes<E>(K, 64);
    E *sQ = reinterpret_cast<E *>(smem);
    E *sKS = sQ + 64 * LDK; /* K tile, then S tiles */
    E *sP = reinterpret_cast<E *>(reinterpret_cast<unsigned char *>(sKS) + ks);
    E *sVn = sP + 64 * LDP;
    float *sG = reinterpret_cast<float *>(sVn + 64 * LDP);
    int *sSeg = reinterpret_cast<int *>(sG + 64);

    const int c = a.c0 + blockIdx.x, bh = blockIdx.y, b = bh / a.H, h = bh % a.H, hq = h / a.group;
    const int t0 = c * GDN_CHUNK, L = min(GDN_CHUNK, a.T - t0);
    const int warp = threadIdx.x >> 5, wm = warp & 3, n0 = (warp >> 2) * 32;
    const int i0 = wm * 16 + frag_r(0);
    chunk_seg(a, b, t0, L, sSeg);

    tile_load_async(sQ, LDK, (const E *)a.q + qk_off(a, b, t0, hq), qk_ld(a), 64, K, L);
    tile_load_async(sKS, LDK, (const E *)a.k + qk_off(a, b, t0, hq), qk_ld(a), 64, K, L);
    tile_load_async(sG, 64, a.G + ((long)bh * a.NT + c) * GDN_CHUNK, 64, 1, 64, 1);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    /* P = lower_incl(Q K^T o Gam), Gam masked to one document (j >= seg[i]) */
    const float gi0 = sG[i0], gi1 = sG[i0 + 8];
    const int sg0 = sSeg[i0], sg1 = sSeg[i0 + 8];
    {
        float acc[1][4][4];
        acc_zero(acc);
        warp_mma<1, 4, OP_MK, OP_NK>(acc, sQ + wm * 16 * LDK, LDK, sKS + n0 * LDK, LDK, K);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const int i = i0 + 8 * p, j = n0 + nt * 8 + frag_c(0);
                const float gi = p ? gi1 : gi0;
                const int sg = p ? sg1 : sg0;
                const float p0 = (j <= i && j >= sg) ? acc[0][nt][2 * p] * expf(gi - sG[j]) : 0.f;
                const float p1 = (j + 1 <= i && j + 1 >= sg) ? acc[0][nt][2 * p + 1] * expf(gi - sG[j + 1]) : 0.f;
                store2(sP + i * LDP + j, p0, p1);
            }
    }
    __syncthreads();

    const E *hg = (const E *)a.h + ((long)bh * a.NT + c) * K * V;
    const E *vng = (const E *)a.Vn + row_off(a, bh, c, 0, V);
    E *og = (E *)a.o + tok_off(a, b, t0, h, V);
    /* the entering state reaches only the rows before the chunk's first start */
    const float gam0 = gam_row(gi0, sg0), gam1 = gam_row(gi1, sg1);
    for (int v0 = 0; v0 < V; v0 += 64) {
        tile_load_async(sKS, LDP, hg + v0, V, K, 64, K);
        tile_load_async(sVn, LDP, vng + v0, V, 64, 64, 64);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        float acc[1][4][4];
        acc_zero(acc);
        warp_mma<1, 4, OP_MK, OP_KN>(acc, sQ + wm * 16 * LDK, LDK, sKS + n0, LDP, K);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            acc[0][nt][0] *= gam0;
            acc[0][nt][1] *= gam0;
            acc[0][nt][2] *= gam1;
            acc[0][nt][3] *= gam1;
        }
        warp_mma<1, 4, OP_MK, OP_KN>(acc, sP + wm * 16 * LDP, LDP, sVn + n0, LDP, 64);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const int i = i0 + 8 * p, j = v0 + n0 + nt * 8 + frag_c(0);
                if (i < L)
                    store2(og + (long)i * a.H * V + j, a.scale * acc[0][nt][2 * p],
                           a.scale * acc[0][nt][2 * p + 1]);
            }
        __syncthreads();
    }
}

/* ====================================== launchers =========================================== */
template <typename E, bool DELTA>
static void launch_intra_kernel(const gdn_delta_args *a, size_t sm, dim3 grid, cudaStream_t st) {
    if (3 * (sm + 1024) <= 228 * 1024) {
        gdn_cuda_set_smem((const void *)k_intra<E, 3, DELTA>, sm, "k_intra");
        k_intra<E, 3, DELTA><<<grid, 256, sm, st>>>(*a);
    } else {
        gdn_cuda_set_smem((const void *)k_intra<E, 2, DELTA>, sm, "k_intra");
        k_intra<E, 2, DELTA><<<grid, 256, sm, st>>>(*a);
    }
    GDN_CUDA_CHECK_LAUNCH();
}

template <typename E> static void launch_intra_t(const gdn_delta_args *a, cudaStream_t st) {
    const size_t sm = intra_smem<E>(a->K, a->V);
    const dim3 grid(a->c1 - a->c0, a->B * a->H);
    if (a->delta) launch_intra_kernel<E, true>(a, sm, grid, st);
    else launch_intra_kernel<E, false>(a, sm, grid, st);
}

#define STATE_FWD_SLOTS 6 /* deepest ring of the forward state pass */
template <typename E, int K> static const gdn_state_variant *state_fwd_variants() {
    static const gdn_state_variant v[3] = {
        {32, k_state_fwd<E, K, 32>, state_fwd_smem<E, K, 32>},
        {64, k_state_fwd<E, K, 64>, state_fwd_smem<E, K, 64>},
        {128, k_state_fwd<E, K, 128>, state_fwd_smem<E, K, 128>},
    };
    return v;
}

template <typename E, int K> static void launch_state_fwd_t(const gdn_delta_args *a, cudaStream_t st, int share) {
    gdn_launch_state_pass(state_fwd_variants<E, K>(), a, STATE_FWD_SLOTS, share, "k_state_fwd", st);
}

template <typename E, int K> static void state_fwd_shares_t(const gdn_delta_args *a, int *shares) {
    *shares = gdn_state_pass_choice(state_fwd_variants<E, K>(), a, STATE_FWD_SLOTS, 1).shared;
}

template <typename E> static void launch_output_t(const gdn_delta_args *a, cudaStream_t st) {
    const size_t sm = output_smem<E>(a->K);
    gdn_cuda_set_smem((const void *)k_output<E>, sm, "k_output");
    k_output<E><<<dim3(a->c1 - a->c0, a->B * a->H), 256, sm, st>>>(*a);
    GDN_CUDA_CHECK_LAUNCH();
}

void gdn_delta_launch_intra(const gdn_delta_args *a, gdn_cuda_precision p, cudaStream_t st) {
    if (p == GDN_CUDA_BF16) launch_intra_t<bf16>(a, st);
    else launch_intra_t<float>(a, st);
}

void gdn_delta_launch_state_fwd(const gdn_delta_args *a, gdn_cuda_precision p, cudaStream_t st, int share) {
    GDN_DELTA_DISPATCH_K(launch_state_fwd_t, a, p, a, st, share);
}

int gdn_delta_state_fwd_shares(const gdn_delta_args *a, gdn_cuda_precision p) {
    int shares = 0;
    GDN_DELTA_DISPATCH_K(state_fwd_shares_t, a, p, a, &shares);
    return shares;
}

void gdn_delta_launch_output(const gdn_delta_args *a, gdn_cuda_precision p, cudaStream_t st) {
    if (p == GDN_CUDA_BF16) launch_output_t<bf16>(a, st);
    else launch_output_t<float>(a, st);
}
