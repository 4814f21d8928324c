/* Backward kernels of the gated delta rule (docs/design.md section 3.3, section 3.6), with the forward intermediates
 * (G, T, W, U, h, v_new) in the workspace (recomputed, or saved by the forward). Every mixer of
 * model/mixer.h (section 2.6): without decay G = 0 and dg = 0; without the delta term W = 0 in the
 * workspace (so the reverse state pass's W^T dv_new term vanishes) and k_grad skips the WY part
 * (template flag DELTA):
 *   k_dv_local   per (chunk, head): mode 1: dVl = s lower(Q K^T o Gam)^T dO;
 *                mode 2: D^T and the intra-chunk gate term
 *   k_state_bwd  per (V tile, head), chunks in reverse: dh (gradient of the state leaving each
 *                chunk), dv_new = dVl + diag(r) K dS, dh0
 *   k_grad       per (chunk, head): dq, dk, dv, dbeta and dg, the WY backward included
 *   k_group_sum  where value heads share q/k heads: dq, dk = fixed-order sums of k_grad's
 *                per-value-head parts. */
#include "model/cuda/delta_common.cuh"

/* ============ intra-chunk backward pieces: dVl, D^T and the intra gate term ===================
 * Per (chunk, head), with Pt = lower_incl(Q K^T o Gam)^T (Pt[j][i], i >= j):
 *   mode & 1:  dVl = s Pt dO               (intra-chunk part of dv_new, for k_state_bwd)
 *   mode & 2:  Dt  = s (Vn dO^T) o Gam^T   (D of docs/design.md section 3.3 transposed, for k_grad) and
 *              E^T = Dt o (K Q^T):  dG_i += sum_j E_ij,  dG_j -= sum_i E_ij   (dG1)
 *   mode & 4:  G from g here, not from the workspace (the recomputing backward runs the dVl
 *              launch beside the intra kernel that writes G)
 * The two halves run as separate launches so that the second (which needs v_new) can overlap
 * the reverse state pass. The dO / Vn column tiles are double-buffered. The gate term's row and
 * column sums go through per-warp partials (one writer each) added in a fixed order: no float
 * atomics, so the result is the same bits on every run. */
template <typename E> static size_t dv_local_smem(int K) {
    return 2 * tile_bytes<E>(64, K) + 5 * tile_bytes<E>(64, 64) + (1 + 4 + 2 + 1) * 64 * 4;
}

template <typename E> __global__ void __launch_bounds__(256, 2) k_dv_local(const gdn_delta_args a, int mode) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int K = a.K, V = a.V, nV = V / 64;
    const int LDK = pad_ld<E>(K), LDP = pad_ld<E>(64);
    E *sQ = reinterpret_cast<E *>(smem);
    E *sK = sQ + 64 * LDK;
    E *sPt = sK + 64 * LDK;
    E *sStage = sPt + 64 * LDP; /* 2 x (dO, Vn) */
    float *sG = reinterpret_cast<float *>(sStage + 4 * 64 * LDP);
    float *sCol = sG + 64;      /* [4][64] column sums, one row per row block wm */
    float *sRow = sCol + 4 * 64; /* [2][64] row sums, one row per column half */
    int *sSeg = reinterpret_cast<int *>(sRow + 2 * 64);

    const int c = blockIdx.x, bh = blockIdx.y, b = bh / a.H, h = bh % a.H, hq = h / a.group;
    const int t0 = c * GDN_CHUNK, L = min(GDN_CHUNK, a.T - t0);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 3, n0 = (warp >> 2) * 32;
    const int j0 = wm * 16 + frag_r(0); /* rows j0, j0+8 (columns n0..n0+31) of this thread */
    const E *dog = (const E *)a.d_o + tok_off(a, b, t0, h, V);
    const E *vng = (const E *)a.Vn + row_off(a, bh, c, 0, V);

    tile_load_async(sQ, LDK, (const E *)a.q + qk_off(a, b, t0, hq), qk_ld(a), 64, K, L);
    tile_load_async(sK, LDK, (const E *)a.k + qk_off(a, b, t0, hq), qk_ld(a), 64, K, L);
    if (!(mode & 4)) tile_load_async(sG, 64, a.G + ((long)bh * a.NT + c) * GDN_CHUNK, 64, 1, 64, 1);
    tile_load_async(sStage, LDP, dog, (long)a.H * V, 64, 64, L);
    if (mode & 2) tile_load_async(sStage + 64 * LDP, LDP, vng, V, 64, 64, 64);
    cp_async_commit();
    if (mode & 4) chunk_log_decay(a, b, h, t0, L, sG);
    chunk_seg(a, b, t0, L, sSeg);
    cp_async_wait<0>();
    __syncthreads();

    /* K Q^T (kept raw for the gate term) and Pt; Pt[j][i] (i >= j) is masked to one document:
     * j >= seg[i] */
    float QKt[1][4][4];
    acc_zero(QKt);
    warp_mma<1, 4, OP_MK, OP_NK>(QKt, sK + wm * 16 * LDK, LDK, sQ + n0 * LDK, LDK, K);
    const float gj0 = sG[j0], gj1 = sG[j0 + 8];
    const bool docs = a.doc != NULL; /* without documents the masks skip seg (no shared load) */
    if (mode & 1) {
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const int j = j0 + 8 * p, i = n0 + nt * 8 + frag_c(0);
                const float gj = p ? gj1 : gj0;
                const float p0 = (i >= j && (!docs || j >= sSeg[i])) ? QKt[0][nt][2 * p] * expf(sG[i] - gj) : 0.f;
                const float p1 =
                    (i + 1 >= j && (!docs || j >= sSeg[i + 1])) ? QKt[0][nt][2 * p + 1] * expf(sG[i + 1] - gj) : 0.f;
                store2(sPt + j * LDP + i, p0, p1);
            }
    }

    float Dt[1][4][4];
    acc_zero(Dt);
    E *dvl = (E *)a.dVl + row_off(a, bh, c, 0, V);
    for (int vs = 0; vs < nV; ++vs) {
        if (vs + 1 < nV) {
            E *nb = sStage + ((vs + 1) & 1) * 2 * 64 * LDP;
            tile_load_async(nb, LDP, dog + (vs + 1) * 64, (long)a.H * V, 64, 64, L);
            if (mode & 2) tile_load_async(nb + 64 * LDP, LDP, vng + (vs + 1) * 64, V, 64, 64, 64);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const E *sdO = sStage + (vs & 1) * 2 * 64 * LDP;
        const E *sVn = sdO + 64 * LDP;
        if (mode & 1) {
            float acc[1][4][4];
            acc_zero(acc);
            warp_mma<1, 4, OP_MK, OP_KN>(acc, sPt + wm * 16 * LDP, LDP, sdO + n0, LDP, 64);
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int p = 0; p < 2; ++p) {
                    const int j = j0 + 8 * p, col = vs * 64 + n0 + nt * 8 + frag_c(0);
                    store2(dvl + (long)j * V + col, a.scale * acc[0][nt][2 * p],
                           a.scale * acc[0][nt][2 * p + 1]);
                }
        }
        if (mode & 2) warp_mma<1, 4, OP_MK, OP_NK>(Dt, sVn + wm * 16 * LDP, LDP, sdO + n0 * LDP, LDP, 64);
        __syncthreads();
    }
    if (!(mode & 2)) return;

    /* Dt with the decay, to the workspace; the intra gate term */
    E *Dg = (E *)a.Dm + ((long)bh * a.NT + c) * 64 * 64;
    float rs0 = 0.f, rs1 = 0.f;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
        float d[4], cs0 = 0.f, cs1 = 0.f;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int j = j0 + (e >> 1) * 8, i = n0 + nt * 8 + frag_c(e);
            d[e] = (i >= j && (!docs || j >= sSeg[i])) ? a.scale * Dt[0][nt][e] * expf(sG[i] - (e < 2 ? gj0 : gj1)) : 0.f;
            const float ev = d[e] * QKt[0][nt][e];
            if (e < 2) rs0 += ev;
            else rs1 += ev;
            if (e & 1) cs1 += ev;
            else cs0 += ev;
        }
        store2(Dg + j0 * 64 + n0 + nt * 8 + frag_c(0), d[0], d[1]);
        store2(Dg + (j0 + 8) * 64 + n0 + nt * 8 + frag_c(0), d[2], d[3]);
        cs0 = col_sum8(cs0);
        cs1 = col_sum8(cs1);
        if (lane < 4) {
            sCol[wm * 64 + n0 + nt * 8 + frag_c(0)] = cs0;
            sCol[wm * 64 + n0 + nt * 8 + frag_c(1)] = cs1;
        }
    }
    rs0 = quad_sum(rs0);
    rs1 = quad_sum(rs1);
    if ((lane & 3) == 0) {
        sRow[n0 * 2 + j0] = rs0; /* n0 * 2: row 0 or 1 of the [2][64] partials */
        sRow[n0 * 2 + j0 + 8] = rs1;
    }
    __syncthreads();
    if (tid < 64) {
        const float col = (sCol[tid] + sCol[64 + tid]) + (sCol[128 + tid] + sCol[192 + tid]);
        a.dG1[((long)bh * a.NT + c) * GDN_CHUNK + tid] = col - (sRow[tid] + sRow[64 + tid]);
    }
}

/* ========================= reverse state pass: dh, dv_new, dh0 =============================
 * Mirror of k_state_fwd (same warp layout: BV/8 warps, 32 state columns each). Step s handles
 * chunk NT-1-s; its tiles are 3s = K (with dO, dVl and G of the chunk in one of
 * nsb = ceil(slots/3) small buffers), 3s+1 = Q, 3s+2 = W. Per step:
 *   dv_new = dVl + diag(r) K dS
 *   dS     = gamma_C dS + Q^T (s diag(gamma) dO) - W^T dv_new   (dS: state gradient, fp32) */
template <typename E, int K, int BV> static size_t state_bwd_smem(int slots) {
    const int nsb = (slots + 2) / 3;
    return (size_t)slots * tile_bytes<E>(64, K) + nsb * (2 * tile_bytes<E>(64, BV) + STATE_GSLOT * 4) +
           tile_bytes<E>(K, BV) + tile_bytes<E>(128, BV);
}

/* Issue the cp.async group of tile `tile` into `dst` (a K tile also brings dO, dVl and G into
 * the small buffer `small` / `gsb`); past the first chunk the group is empty. h: the value head
 * (bh % H), hq: its q/k head. */
template <typename E, int K, int BV>
__device__ __forceinline__ void state_bwd_issue(const gdn_delta_args &a, int tile, E *dst, E *small,
                                                float *gsb, int bh, int b, int h, int hq, int v0) {
    constexpr int LDT = pad_ld<E>(K), LDU = pad_ld<E>(BV);
    const int s = tile / 3, which = tile - 3 * s;
    if (s < a.NT) {
        const int c = a.NT - 1 - s, L = min(GDN_CHUNK, a.T - c * GDN_CHUNK);
        if (which == 0) {
            chunk_load_async<E, K, BV * 4>(dst, LDT, (const E *)a.k + qk_off(a, b, c * GDN_CHUNK, hq), qk_ld(a), L);
            chunk_load_async<E, BV, BV * 4>(small, LDU, (const E *)a.d_o + tok_off(a, b, c * GDN_CHUNK, h, a.V) + v0,
                                            (long)a.H * a.V, L);
            tile_load_async_t<E, 64, BV, BV * 4, true>(small + 64 * LDU, LDU,
                                                       (const E *)a.dVl + row_off(a, bh, c, 0, a.V) + v0, a.V, 64);
            state_gate_load(a, gsb, bh, b, c);
        } else if (which == 1) {
            chunk_load_async<E, K, BV * 4>(dst, LDT, (const E *)a.q + qk_off(a, b, c * GDN_CHUNK, hq), qk_ld(a), L);
        } else {
            tile_load_async_t<E, 64, K, BV * 4, true>(dst, LDT, (const E *)a.W + row_off(a, bh, c, 0, K), K, 64);
        }
    }
    cp_async_commit();
}

/* state_bwd_issue of tile ti into ring slot `slot`, then ti and the small-buffer index move on. */
template <typename E, int K, int BV>
__device__ __forceinline__ void state_bwd_refill(const gdn_delta_args &a, int &ti, int &sb_in, int nsb,
                                                 E *slot, E *sSmall, float *sG, int bh, int b, int h,
                                                 int hq, int v0) {
    constexpr int LDU = pad_ld<E>(BV);
    state_bwd_issue<E, K, BV>(a, ti, slot, sSmall + sb_in * 2 * 64 * LDU, sG + sb_in * STATE_GSLOT, bh, b, h, hq, v0);
    if (ti % 3 == 0 && ++sb_in == nsb) sb_in = 0;
    ++ti;
}

/* 128 registers at most (the second bound asks for 512 resident threads: 65536 / 512); left
 * free, the K = 256 tiles take 168 and fewer blocks fit beside the other pass */
template <typename E, int K, int BV>
__global__ void __launch_bounds__(BV * 4, 512 / (BV * 4)) k_state_bwd(const gdn_delta_args a, int slots) {
    constexpr int MT = K / 64, NTV = 4;
    constexpr int LDT = pad_ld<E>(K), LDU = pad_ld<E>(BV);
    extern __shared__ __align__(16) unsigned char smem[];
    const int nsb = (slots + 2) / 3;
    E *ring = reinterpret_cast<E *>(smem);
    E *sSmall = ring + slots * 64 * LDT; /* nsb x (dO [64][LDU], dVl [64][LDU]) */
    E *sdS = sSmall + nsb * 2 * 64 * LDU;
    E *sY = sdS + K * LDU; /* [s gamma dO ; -dv_new], 128 x BV */
    float *sG = reinterpret_cast<float *>(sY + 128 * LDU);

    const int bh = blockIdx.y, b = bh / a.H, h = bh % a.H, hq = h / a.group, v0 = blockIdx.x * BV;
    const int warp = threadIdx.x >> 5, wm = warp & 3, c0 = (warp >> 2) * 32, srow = wm * (K / 4);
    const int NT = a.NT;
    E *dVng = (E *)a.dVn;
    E *dhg = (E *)a.dh;

    float dS[MT][NTV][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NTV; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = srow + mt * 16 + frag_r(e), col = v0 + c0 + nt * 8 + frag_c(e);
                dS[mt][nt][e] = a.dht ? a.dht[((long)bh * K + r) * a.V + col] : 0.f;
            }
    state_to_smem<E, MT, NTV, LDU>(sdS, dS, srow, c0);
    /* ring bookkeeping as in k_state_fwd: `cur` = slot of this phase's tile, `prev` = slot of the
     * previous one (refilled now), sb_in / sb_out = small buffers of the next K tile to issue /
     * of the current step; `ti` = index of the next tile to issue */
    int sb_in = 0, ti = 0;
    for (; ti < slots; ++ti) {
        state_bwd_issue<E, K, BV>(a, ti, ring + ti * 64 * LDT, sSmall + sb_in * 2 * 64 * LDU, sG + sb_in * STATE_GSLOT, bh, b, h, hq, v0);
        if (ti % 3 == 0 && ++sb_in == nsb) sb_in = 0;
    }
    int cur = 0, prev = slots - 1, sb_out = 0;
    E *dhgc = dhg + (long)bh * NT * K * a.V + v0;

    /* One tile per phase: before phase u, wait for tile u, then refill the slot that tile u-1
     * (consumed by every warp before this barrier) held with tile u-1+slots. */
    for (int s = 0; s < NT; ++s) {
        const int c = NT - 1 - s;
        /* phase K: dv_new = dVl + diag(r) K dS */
        cp_async_wait_dyn(slots - 2);
        __syncthreads();
        if (s >= 1) {
            state_bwd_refill<E, K, BV>(a, ti, sb_in, nsb, ring + prev * 64 * LDT, sSmall, sG, bh, b, h, hq, v0);
        }
        tile_store_t<E, K, BV, BV * 4>(dhgc + (long)c * K * a.V, a.V, sdS, LDU);

        const E *sKc = ring_take(ring, LDT, cur, prev, slots);
        const E *dO = sSmall + sb_out * 2 * 64 * LDU;
        const E *dVl = dO + 64 * LDU;
        const float *gG = sG + sb_out * STATE_GSLOT;
        if (++sb_out == nsb) sb_out = 0;
        const int4 flc = state_doc_view(a, gG); /* documents: (f, seg[63]) of the chunk */
        float acc[1][NTV][4];
        acc_zero(acc);
        warp_mma<1, NTV, OP_MK, OP_KN>(acc, sKc + wm * 16 * LDT, LDT, sdS + c0, LDU, K);
        const float Glast = gG[63];
        /* documents: gamma_C = 0 where the chunk has a start (nothing flows back past it),
         * r_i = 0 before the last document (i < seg[63] = flc.y), gamma_i = 0 from the first
         * start on (i >= f = flc.x) */
        const float gammaC = flc.y < 0 ? expf(Glast) : 0.f;
        const int i0 = wm * 16 + frag_r(0);
        /* unconditional exps, then the masks (no branch) */
        const float e0 = expf(Glast - gG[i0]), e1 = expf(Glast - gG[i0 + 8]);
        const float f0 = a.scale * expf(gG[i0]), f1 = a.scale * expf(gG[i0 + 8]);
        const float r0 = i0 >= flc.y ? e0 : 0.f, r1 = i0 + 8 >= flc.y ? e1 : 0.f;
        const float q0 = i0 < flc.x ? f0 : 0.f, q1 = i0 + 8 < flc.x ? f1 : 0.f;
        /* this thread's elements: rows i0, i0 + 8, columns c0 + nt*8 + frag_c(0) (+1) */
        E *dvnc = dVng + row_off(a, bh, c, i0, a.V) + v0 + c0 + frag_c(0);
        const int so = i0 * LDU + c0 + frag_c(0);
#pragma unroll
        for (int nt = 0; nt < NTV; ++nt)
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const int o = so + p * 8 * LDU + nt * 8;
                const float r = p ? r1 : r0;
                const float2 dl = load2(dVl + o), dd = load2(dO + o);
                const float d0 = dl.x + r * acc[0][nt][2 * p];
                const float d1 = dl.y + r * acc[0][nt][2 * p + 1];
                store2(dvnc + p * 8 * (long)a.V + nt * 8, d0, d1);
                store2(sY + 64 * LDU + o, -d0, -d1);
                const float gi = p ? q1 : q0;
                store2(sY + o, gi * dd.x, gi * dd.y);
            }
        /* phase Q: dS = gamma_C dS + Q^T (s diag(gamma) dO) */
        cp_async_wait_dyn(slots - 2);
        __syncthreads();
        state_bwd_refill<E, K, BV>(a, ti, sb_in, nsb, ring + prev * 64 * LDT, sSmall, sG, bh, b, h, hq, v0);
        const E *sQc = ring_take(ring, LDT, cur, prev, slots);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NTV; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) dS[mt][nt][e] *= gammaC;
        warp_mma<MT, NTV, OP_KM, OP_KN>(dS, sQc + srow, LDT, sY + c0, LDU, 64);
        /* phase W: dS -= W^T dv_new */
        cp_async_wait_dyn(slots - 2);
        __syncthreads();
        state_bwd_refill<E, K, BV>(a, ti, sb_in, nsb, ring + prev * 64 * LDT, sSmall, sG, bh, b, h, hq, v0);
        const E *sWc = ring_take(ring, LDT, cur, prev, slots);
        warp_mma<MT, NTV, OP_KM, OP_KN>(dS, sWc + srow, LDT, sY + 64 * LDU + c0, LDU, 64);
        state_to_smem<E, MT, NTV, LDU>(sdS, dS, srow, c0);
    }
    cp_async_wait<0>();
    if (a.dh0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NTV; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = srow + mt * 16 + frag_r(e), col = v0 + c0 + nt * 8 + frag_c(e);
                    a.dh0[((long)bh * K + r) * a.V + col] = dS[mt][nt][e];
                }
    }
}

/* =============== per-chunk gradients: dq, dk, dv, dbeta, dg (one kernel) =====================
 * With S = h[c] (entering), dS = dh[c] (leaving), D from k_dv_local (stored transposed), and the
 * WY backward folded in: since W = T Kbg, U = T Vb and v_new = T (Vb - Kbg S), the gradient of
 * T is dVn v_new^T T^-T, so with dVb = T^T dVn
 *   dA   = strict_lower(-dVb v_new^T),   dKbg = -dVb S^T,   dv = diag(beta) dVb
 * (no dW, dT or (I+A)^-T products needed). Then
 *   dq   = s diag(gamma) dO S^T + D K
 *   dk   = diag(r) Vn dS^T + D^T Q + diag(beta gamma) dKbg + M K + M^T K,  M = dA o beta_i o Gam
 *   dbeta = gamma o rowsum(dKbg o K) + rowsum(dVb o V) + rowsum(dA o K K^T o Gam)
 *   dG   = dG1 (intra term) + rowsum(Q o s diag(gamma) dO S^T) - d o r + beta gamma o rowsum(dKbg o K)
 *          + rowsum(F) - colsum(F) + [last row] gamma_C <S,dS> + sum_j d_j r_j
 *   with d_j = k_j . (Vn dS^T)_j, F = M o K K^T; dg = reverse in-chunk cumsum of dG.
 * Stages of 64-column tiles: a V pass (dVn, Vn, V, and T in the stage's fourth slot: T is needed
 * only there, and a persistent T tile would keep two blocks off a multiprocessor at V = 256)
 * building dVb, dv and dA; then per K tile one stage per V tile (dO, Vn, S, dS) and one with
 * (Q, K) for the epilogue. 8 warps: warp (wm, wn)
 * holds rows wm*16.. and columns wn*32.. of each 64x64 product. Row and column sums across warps
 * go through per-warp partials in shared memory (one writer each) added in a fixed order: no
 * float atomics, so the gradients are the same bits on every run. */
/* Partial sum of a 64x64 tile product x o y over this thread's 16-byte pieces (256 threads). */
template <typename E> __device__ __forceinline__ float tile_dot(const E *x, const E *y, int ld) {
    constexpr int vec = 16 / (int)sizeof(E), cpr = 64 / vec;
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < 64 * cpr / 256; ++i) {
        const int idx = threadIdx.x + i * 256, r = idx / cpr, col = (idx % cpr) * vec;
        const uint4 xa = *reinterpret_cast<const uint4 *>(x + r * ld + col);
        const uint4 ya = *reinterpret_cast<const uint4 *>(y + r * ld + col);
        const E *xe = reinterpret_cast<const E *>(&xa), *ye = reinterpret_cast<const E *>(&ya);
#pragma unroll
        for (int k = 0; k < vec; ++k) acc = fmaf(to_f(xe[k]), to_f(ye[k]), acc);
    }
    return acc;
}

typedef struct {
    int pass, k0, vs; /* pass 0: V pass, tile vs; pass 1: K tile k0, V tile vs (vs == nV: Q/K) */
} grad_stage;

__device__ __forceinline__ grad_stage grad_next(grad_stage st, int nV) {
    if (st.pass == 0) {
        if (++st.vs == nV) st = grad_stage{1, 0, 0};
    } else if (++st.vs > nV) {
        st.vs = 0;
        st.k0 += 64;
    }
    return st;
}

template <typename E> static size_t grad_smem(int V, int nbuf) {
    return (size_t)nbuf * 4 * tile_bytes<E>(64, 64) + 2 * tile_bytes<E>(64, 64) +
           tile_bytes<E>(64, V) + 64 * 68 * 4 + (2 + 4 + 3 * 2 + 1 + 1) * 64 * 4 + 8 * 4;
}

/* h: the value head (bh % H), hq: its q/k head. Without the delta term the V pass needs only
 * dVn (dv = dVn). */
template <typename E, bool DELTA>
__device__ __forceinline__ void grad_issue(const gdn_delta_args &a, grad_stage st, E *buf, int bh,
                                           int b, int h, int hq, int c, int L) {
    const int K = a.K, V = a.V, LDP = pad_ld<E>(64), nV = V / 64, t0 = c * GDN_CHUNK;
    if (st.pass == 0) {
        const int v0 = st.vs * 64;
        tile_load_async_t<E, 64, 64, 256>(buf, LDP, (const E *)a.dVn + row_off(a, bh, c, 0, V) + v0, V, 64);
        if (!DELTA) {
            cp_async_commit();
            return;
        }
        tile_load_async_t<E, 64, 64, 256>(buf + 64 * LDP, LDP, (const E *)a.Vn + row_off(a, bh, c, 0, V) + v0, V, 64);
        tile_load_async_t<E, 64, 64, 256>(buf + 2 * 64 * LDP, LDP, (const E *)a.v + tok_off(a, b, t0, h, V) + v0,
                                          (long)a.H * V, L);
        tile_load_async_t<E, 64, 64, 256>(buf + 3 * 64 * LDP, LDP, (const E *)a.Tm + ((long)bh * a.NT + c) * 64 * 64,
                                          64, 64);
    } else if (st.vs < nV) {
        const int v0 = st.vs * 64;
        const long so = ((long)bh * a.NT + c) * K * V + (long)st.k0 * V + v0;
        tile_load_async_t<E, 64, 64, 256>(buf, LDP, (const E *)a.d_o + tok_off(a, b, t0, h, V) + v0,
                                          (long)a.H * V, L);
        tile_load_async_t<E, 64, 64, 256>(buf + 64 * LDP, LDP, (const E *)a.Vn + row_off(a, bh, c, 0, V) + v0, V, 64);
        tile_load_async_t<E, 64, 64, 256>(buf + 2 * 64 * LDP, LDP, (const E *)a.h + so, V, 64);
        tile_load_async_t<E, 64, 64, 256>(buf + 3 * 64 * LDP, LDP, (const E *)a.dh + so, V, 64);
    } else {
        tile_load_async_t<E, 64, 64, 256>(buf, LDP, (const E *)a.q + qk_off(a, b, t0, hq) + st.k0,
                                          qk_ld(a), L);
        tile_load_async_t<E, 64, 64, 256>(buf + 64 * LDP, LDP, (const E *)a.k + qk_off(a, b, t0, hq) + st.k0,
                                          qk_ld(a), L);
    }
    cp_async_commit();
}

/* D: the element type of dq, dk (E, or float for the per-value-head parts that the launcher
 * passes in a.dq, a.dk where q/k heads are shared).
 * DELTA: the mixer has the delta term. Without it (M, L; docs/design.md section 2.6) Vn = V, so
 * dv = dVn, and W = 0 does not depend on k or beta: the WY part (dVb, dKbg, dA, M, F) drops out
 * and dbeta = 0. A mixer without decay (a.g NULL) gets dg = 0. */
template <typename E, typename D, bool DELTA>
__global__ void __launch_bounds__(256, 2) k_grad(const gdn_delta_args a, int nbuf) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int K = a.K, V = a.V, nV = V / 64, nK = K / 64, LDP = pad_ld<E>(64), LDB = pad_ld<E>(V), LDF = 68;
    E *sStage = reinterpret_cast<E *>(smem); /* nbuf x 4 tiles */
    E *sD = sStage + nbuf * 4 * 64 * LDP;
    E *sM = sD + 64 * LDP;
    E *sDvb = sM + 64 * LDP; /* [64][LDB] */
    float *sDa = reinterpret_cast<float *>(sDvb + 64 * LDB); /* dA o Gam, fp32 */
    float *sG = sDa + 64 * LDF;
    float *sB = sG + 64;
    float *sCol = sB + 64;        /* [4][64] -colsum(F), one row per row block wm */
    float *sRowB = sCol + 4 * 64; /* [2][64] dbeta, one row per column half */
    float *sRowG = sRowB + 2 * 64; /* [2][64] dG row terms */
    float *sRowD = sRowG + 2 * 64; /* [2][64] d_j r_j */
    float *sdG = sRowD + 2 * 64;
    float *sSds = sdG + 64; /* [8] <S,dS> per warp */
    int *sSeg = reinterpret_cast<int *>(sSds + 8); /* seg of the chunk's rows (documents) */

    const int c = blockIdx.x, bh = blockIdx.y, b = bh / a.H, h = bh % a.H, hq = h / a.group;
    const int t0 = c * GDN_CHUNK, L = min(GDN_CHUNK, a.T - t0);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wm = warp & 3, n0 = (warp >> 2) * 32;
    const int i0 = wm * 16 + frag_r(0), i1 = i0 + 8; /* rows of this thread (columns n0..n0+31) */
    /* row strides of dq, dk ([B,T,H,K]: one q/k head per value head, or the per-value-head
     * parts) and of dv */
    const long ldk = (long)a.H * K, ldv = (long)a.H * V;
    const int ns = nV + nK * (nV + 1);

    if (tid < 64) sB[tid] = DELTA && tid < L ? a.beta[((long)b * a.T + t0 + tid) * a.H + h] : 0.f;
    sCol[tid] = 0.f; /* 4 x 64 = 256 partial column sums, one per thread */
    chunk_seg(a, b, t0, L, sSeg); /* read after the first stage's barrier */
    tile_load_async_t<E, 64, 64, 256>(sD, LDP, (const E *)a.Dm + ((long)bh * a.NT + c) * 64 * 64, 64, 64);
    tile_load_async(sG, 64, a.G + ((long)bh * a.NT + c) * GDN_CHUNK, 64, 1, 64, 1);
    cp_async_commit();
    grad_stage cur = {0, 0, 0}, nxt = {0, 0, 0};
    grad_issue<E, DELTA>(a, nxt, sStage, bh, b, h, hq, c, L);
    nxt = grad_next(nxt, nV);

    float A1[1][4][4], A2[1][4][4], A3[1][4][4];
    acc_zero(A2); /* V pass: dA accumulator */
    float be0 = 0.f, be1 = 0.f, gam0 = 0.f, gam1 = 0.f, r0 = 0.f, r1 = 0.f;
    int sg0 = -1, sg1 = -1; /* seg of rows i0, i1 */
    float db0 = 0.f, db1 = 0.f, dg0 = 0.f, dg1 = 0.f, dd0 = 0.f, dd1 = 0.f, sds = 0.f;
    const float *dG1 = a.dG1 + ((long)bh * a.NT + c) * GDN_CHUNK;
    for (int s = 0; s < ns; ++s) {
        E *buf = sStage + (nbuf == 2 ? (s & 1) : 0) * 4 * 64 * LDP;
        if (nbuf == 2 && s + 1 < ns) {
            grad_issue<E, DELTA>(a, nxt, sStage + ((s + 1) & 1) * 4 * 64 * LDP, bh, b, h, hq, c, L);
            nxt = grad_next(nxt, nV);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (s == 0) {
            be0 = sB[i0];
            be1 = sB[i1];
            /* documents: gamma_i only before the first start, r_i only in the last document */
            sg0 = sSeg[i0];
            sg1 = sSeg[i1];
            gam0 = gam_row(sG[i0], sg0);
            gam1 = gam_row(sG[i1], sg1);
            r0 = i0 >= sSeg[63] ? expf(sG[63] - sG[i0]) : 0.f;
            r1 = i1 >= sSeg[63] ? expf(sG[63] - sG[i1]) : 0.f;
        }
        if (!DELTA && cur.pass == 0) {
            /* no delta term: Vn = V, so dv = dVn (stored as the delta branch stores dv) */
            E *dvg = (E *)a.dv + tok_off(a, b, t0, h, V) + cur.vs * 64;
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int p = 0; p < 2; ++p) {
                    const int i = i0 + 8 * p, j = n0 + nt * 8 + frag_c(0);
                    if (i < L) store2(dvg + (long)i * ldv + j, to_f(buf[i * LDP + j]), to_f(buf[i * LDP + j + 1]));
                }
        } else if (cur.pass == 0) {
            /* dVb = T^T dVn; dv = beta dVb; dbeta += rowsum(dVb o V); dA -= dVb Vn^T */
            const E *sdVn = buf, *sVn = buf + 64 * LDP, *sV = buf + 2 * 64 * LDP, *sT = buf + 3 * 64 * LDP;
            const int v0 = cur.vs * 64;
            acc_zero(A1);
            warp_mma<1, 4, OP_KM, OP_KN>(A1, sT + wm * 16, LDP, sdVn + n0, LDP, 64);
            E *dvg = (E *)a.dv + tok_off(a, b, t0, h, V) + v0;
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int p = 0; p < 2; ++p) {
                    const int i = i0 + 8 * p, j = n0 + nt * 8 + frag_c(0);
                    const float x0 = A1[0][nt][2 * p], x1 = A1[0][nt][2 * p + 1];
                    const float t = x0 * to_f(sV[i * LDP + j]) + x1 * to_f(sV[i * LDP + j + 1]);
                    const float be = p ? be1 : be0;
                    if (p) db1 += t;
                    else db0 += t;
                    if (i < L) store2(dvg + (long)i * ldv + j, be * x0, be * x1);
                    store2(sDvb + i * LDB + v0 + j, x0, x1);
                }
            __syncthreads();
            warp_mma<1, 4, OP_MK, OP_NK>(A2, sDvb + wm * 16 * LDB + v0, LDB, sVn + n0 * LDP, LDP, 64);
            if (cur.vs == nV - 1) {
                /* da = -dA o Gam (strictly lower) in fp32; M = da o beta_i */
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) {
                    float m[4];
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int i = i0 + (e >> 1) * 8, j = n0 + nt * 8 + frag_c(e);
                        const float da = (i > j && j >= (e < 2 ? sg0 : sg1)) ? -A2[0][nt][e] * expf(sG[i] - sG[j]) : 0.f;
                        sDa[i * LDF + j] = da;
                        m[e] = da * (e < 2 ? be0 : be1);
                    }
                    store2(sM + i0 * LDP + n0 + nt * 8 + frag_c(0), m[0], m[1]);
                    store2(sM + i1 * LDP + n0 + nt * 8 + frag_c(0), m[2], m[3]);
                }
            }
        } else if (cur.vs < nV) {
            /* A1 += dO S^T, A2 += Vn dS^T, A3 += dVb S^T */
            if (cur.vs == 0) {
                acc_zero(A1);
                acc_zero(A2);
                acc_zero(A3);
            }
            const E *sdO = buf, *sVn = buf + 64 * LDP, *sS = buf + 2 * 64 * LDP, *sdS = buf + 3 * 64 * LDP;
            warp_mma<1, 4, OP_MK, OP_NK>(A1, sdO + wm * 16 * LDP, LDP, sS + n0 * LDP, LDP, 64);
            warp_mma<1, 4, OP_MK, OP_NK>(A2, sVn + wm * 16 * LDP, LDP, sdS + n0 * LDP, LDP, 64);
            if (DELTA) warp_mma<1, 4, OP_MK, OP_NK>(A3, sDvb + wm * 16 * LDB + cur.vs * 64, LDB, sS + n0 * LDP, LDP, 64);
            sds += tile_dot<E>(sS, sdS, LDP);
        } else {
            /* epilogue of K tile k0: dq, dk */
            const E *sQ = buf, *sK = buf + 64 * LDP;
            const int k0 = cur.k0;
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int i = i0 + (e >> 1) * 8, j = n0 + nt * 8 + frag_c(e);
                    const bool lo = e < 2;
                    const float kv = to_f(sK[i * LDP + j]);
                    A1[0][nt][e] *= a.scale * (lo ? gam0 : gam1);       /* dq inter part */
                    const float gq = A1[0][nt][e] * to_f(sQ[i * LDP + j]);
                    const float gk = A2[0][nt][e] * kv;                  /* d_j part */
                    const float kb = DELTA ? -A3[0][nt][e] : 0.f;        /* dKbg */
                    const float tb = kb * kv;
                    if (lo) {
                        dg0 += gq + be0 * gam0 * tb;
                        dd0 += gk;
                        db0 += gam0 * tb;
                    } else {
                        dg1 += gq + be1 * gam1 * tb;
                        dd1 += gk;
                        db1 += gam1 * tb;
                    }
                    A2[0][nt][e] = A2[0][nt][e] * (lo ? r0 : r1) + kb * (lo ? be0 * gam0 : be1 * gam1);
                }
            warp_mma<1, 4, OP_KM, OP_KN>(A1, sD + wm * 16, LDP, sK + n0, LDP, 64);       /* + D K */
            warp_mma<1, 4, OP_MK, OP_KN>(A2, sD + wm * 16 * LDP, LDP, sQ + n0, LDP, 64); /* + D^T Q */
            if (DELTA) {
                warp_mma<1, 4, OP_MK, OP_KN>(A2, sM + wm * 16 * LDP, LDP, sK + n0, LDP, 64); /* + M K */
                warp_mma<1, 4, OP_KM, OP_KN>(A2, sM + wm * 16, LDP, sK + n0, LDP, 64);       /* + M^T K */
            }
            D *dqg = (D *)a.dq + tok_off(a, b, t0, h, K) + k0;
            D *dkg = (D *)a.dk + tok_off(a, b, t0, h, K) + k0;
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int p = 0; p < 2; ++p) {
                    const int i = i0 + 8 * p, j = n0 + nt * 8 + frag_c(0);
                    if (i < L) {
                        store2(dqg + (long)i * ldk + j, A1[0][nt][2 * p], A1[0][nt][2 * p + 1]);
                        store2(dkg + (long)i * ldk + j, A2[0][nt][2 * p], A2[0][nt][2 * p + 1]);
                    }
                }
            if (DELTA) { /* without the delta term there is no A: no F' terms, sCol stays 0 */
                /* F' = dA o K K^T o Gam, one K tile at a time (K K^T summed over the tiles would
                 * hold 16 more registers through the whole pass and spill): dbeta += rowsum(F'),
                 * dG += rowsum(F) - colsum(F); the column sums go to this warp's row of sCol (one
                 * writer per element, tiles added in order) */
                float KK[1][4][4];
                acc_zero(KK);
                warp_mma<1, 4, OP_MK, OP_NK>(KK, sK + wm * 16 * LDP, LDP, sK + n0 * LDP, LDP, 64);
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) {
                    float cs0 = 0.f, cs1 = 0.f;
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int i = i0 + (e >> 1) * 8, j = n0 + nt * 8 + frag_c(e);
                        const float fp = sDa[i * LDF + j] * KK[0][nt][e];
                        const float f = fp * (e < 2 ? be0 : be1);
                        if (e < 2) {
                            db0 += fp;
                            dg0 += f;
                        } else {
                            db1 += fp;
                            dg1 += f;
                        }
                        if (e & 1) cs1 += f;
                        else cs0 += f;
                    }
                    cs0 = col_sum8(cs0);
                    cs1 = col_sum8(cs1);
                    if (lane < 4) {
                        sCol[wm * 64 + n0 + nt * 8 + frag_c(0)] -= cs0;
                        sCol[wm * 64 + n0 + nt * 8 + frag_c(1)] -= cs1;
                    }
                }
            }
        }
        __syncthreads();
        cur = grad_next(cur, nV);
        if (nbuf == 1 && s + 1 < ns) {
            grad_issue<E, DELTA>(a, nxt, sStage, bh, b, h, hq, c, L);
            nxt = grad_next(nxt, nV);
        }
    }

    /* row sums of the two column halves, the chunk-level state term, dbeta, dg */
    db0 = quad_sum(db0);
    db1 = quad_sum(db1);
    dg0 = quad_sum(dg0);
    dg1 = quad_sum(dg1);
    dd0 = quad_sum(dd0) * r0;
    dd1 = quad_sum(dd1) * r1;
    sds += __shfl_xor_sync(0xffffffffu, sds, 16);
    sds += __shfl_xor_sync(0xffffffffu, sds, 8);
    sds += __shfl_xor_sync(0xffffffffu, sds, 4);
    sds += __shfl_xor_sync(0xffffffffu, sds, 2);
    sds += __shfl_xor_sync(0xffffffffu, sds, 1);
    if (lane == 0) sSds[warp] = sds;
    if ((lane & 3) == 0) {
        const int half = n0 * 2; /* row 0 or 1 of the [2][64] partials */
        sRowB[half + i0] = db0;
        sRowB[half + i1] = db1;
        sRowG[half + i0] = dg0;
        sRowG[half + i1] = dg1;
        sRowD[half + i0] = dd0;
        sRowD[half + i1] = dd1;
    }
    __syncthreads();
    if (tid < 64) {
        /* sum_j d_j r_j over the 64 rows: lane l takes rows l and l+32, then a butterfly (every
         * lane of warps 0 and 1 ends with the same bits) */
        const int l = tid & 31;
        float dd_all = (sRowD[l] + sRowD[64 + l]) + (sRowD[32 + l] + sRowD[96 + l]);
#pragma unroll
        for (int m = 16; m >= 1; m >>= 1) dd_all += __shfl_xor_sync(0xffffffffu, dd_all, m);
        float sds_all = 0.f;
#pragma unroll
        for (int w = 0; w < 8; ++w) sds_all += sSds[w];
        /* gamma_C is a constant 0 where the chunk has a start */
        const float chunk_term = (sSeg[63] < 0 ? expf(sG[63]) : 0.f) * sds_all + dd_all;
        const float col = (sCol[tid] + sCol[64 + tid]) + (sCol[128 + tid] + sCol[192 + tid]);
        if (a.dbeta && tid < L) /* beta is not an input without the delta term: dbeta = 0 */
            a.dbeta[((long)b * a.T + t0 + tid) * a.H + h] = DELTA ? sRowB[tid] + sRowB[64 + tid] : 0.f;
        sdG[tid] = dG1[tid] + (sRowG[tid] + sRowG[64 + tid]) - (sRowD[tid] + sRowD[64 + tid]) + col +
                   (tid == L - 1 ? chunk_term : 0.f);
    }
    __syncthreads();
    if (a.dg && tid < L) {
        float sum = 0.f; /* g is not an input without decay (a.g NULL): dg = 0 */
        /* dg_t = sum of dG_j over the rows j >= t of t's document in the chunk: G restarts at
         * the next start (seg[j] != seg[t] from there on; without documents never) */
        if (a.g && a.doc)
            for (int j = tid; j < L && sSeg[j] == sSeg[tid]; ++j) sum += sdG[j];
        else if (a.g) /* one document: no test of seg in the loop, which would serialise it */
            for (int j = tid; j < L; ++j) sum += sdG[j];
        a.dg[((long)b * a.T + t0 + tid) * a.H + h] = sum;
    }
}

/* ====================================== launchers =========================================== */

template <typename E> static void launch_dv_local_t(const gdn_delta_args *a, cudaStream_t st, int mode) {
    const size_t sm = dv_local_smem<E>(a->K);
    gdn_cuda_set_smem((const void *)k_dv_local<E>, sm, "k_dv_local");
    k_dv_local<E><<<dim3(a->NT, a->B * a->H), 256, sm, st>>>(*a, mode);
    GDN_CUDA_CHECK_LAUNCH();
}

template <typename E, int K> static void launch_state_bwd_t(const gdn_delta_args *a, cudaStream_t st, int share) {
    const gdn_state_variant v[3] = {
        {32, k_state_bwd<E, K, 32>, state_bwd_smem<E, K, 32>},
        {64, k_state_bwd<E, K, 64>, state_bwd_smem<E, K, 64>},
        {128, k_state_bwd<E, K, 128>, state_bwd_smem<E, K, 128>},
    };
    gdn_launch_state_pass(v, a, 8, share, "k_state_bwd", st);
}

/* ============================ group sum of dq, dk ===========================================
 * Where `group` value heads share one q/k head: dq, dk [B,T,Hq,K] = the sum of k_grad's fp32
 * parts [B,T,H,K] over value heads hq*group .. hq*group+group-1 (adjacent rows of the parts:
 * output row (b,t,hq) reads part rows (b,t,hq)*group + j). Added in head order j in fp32 and
 * rounded once to E: no atomics, the same bits on every run. Four columns per thread,
 * blockIdx.y = 0: dq, 1: dk. */
template <typename E> __global__ void __launch_bounds__(256) k_group_sum(const gdn_delta_args a) {
    const float *part = blockIdx.y ? a.dk_part : a.dq_part;
    E *out = (E *)(blockIdx.y ? a.dk : a.dq);
    const int K = a.K, grp = a.group, sh = __ffs(K >> 2) - 1; /* K/4 = 2^sh pieces per row */
    const size_t n4 = ((size_t)a.B * a.T * a.Hq * K) >> 2;
    const size_t step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += step) {
        const size_t row = i >> sh;
        const float *p = part + row * grp * K + ((i & ((1u << sh) - 1)) << 2);
        float4 acc = *reinterpret_cast<const float4 *>(p);
        for (int j = 1; j < grp; ++j) {
            const float4 x = *reinterpret_cast<const float4 *>(p + (size_t)j * K);
            acc.x += x.x;
            acc.y += x.y;
            acc.z += x.z;
            acc.w += x.w;
        }
        store2(out + 4 * i, acc.x, acc.y);
        store2(out + 4 * i + 2, acc.z, acc.w);
    }
}

template <typename E> static void launch_group_sum_t(const gdn_delta_args *a, cudaStream_t st) {
    const size_t n4 = ((size_t)a->B * a->T * a->Hq * a->K) >> 2;
    const size_t blocks = (n4 + 255) / 256;
    k_group_sum<E><<<dim3((unsigned)(blocks < 8192 ? blocks : 8192), 2), 256, 0, st>>>(*a);
    GDN_CUDA_CHECK_LAUNCH();
}

template <typename E, typename D, bool DELTA>
static void launch_grad_kernel(const gdn_delta_args *a, size_t sm, int nbuf, cudaStream_t st) {
    gdn_cuda_set_smem((const void *)k_grad<E, D, DELTA>, sm, "k_grad");
    k_grad<E, D, DELTA><<<dim3(a->NT, a->B * a->H), 256, sm, st>>>(*a, nbuf);
    GDN_CUDA_CHECK_LAUNCH();
}

template <typename E> static void launch_grad_t(const gdn_delta_args *a, cudaStream_t st) {
    /* double-buffered stages only where two blocks still fit on a multiprocessor (measured at
     * B4 T4096 H16 D128: one double-buffered block per multiprocessor 0.69 ms, two
     * single-buffered ones 0.57 ms) */
    const int nbuf = grad_smem<E>(a->V, 2) <= 113 * 1024 ? 2 : 1;
    const size_t sm = grad_smem<E>(a->V, nbuf);
    if (a->group == 1) {
        if (a->delta) launch_grad_kernel<E, E, true>(a, sm, nbuf, st);
        else launch_grad_kernel<E, E, false>(a, sm, nbuf, st);
        return;
    }
    /* shared q/k heads: each value head's dq, dk in fp32 to the workspace, then the group sum */
    gdn_delta_args parts = *a;
    parts.dq = a->dq_part;
    parts.dk = a->dk_part;
    if (a->delta) launch_grad_kernel<E, float, true>(&parts, sm, nbuf, st);
    else launch_grad_kernel<E, float, false>(&parts, sm, nbuf, st);
    launch_group_sum_t<E>(a, st);
}

void gdn_delta_launch_dv_local(const gdn_delta_args *a, gdn_cuda_precision p, cudaStream_t st, int mode) {
    if (p == GDN_CUDA_BF16) launch_dv_local_t<bf16>(a, st, mode);
    else launch_dv_local_t<float>(a, st, mode);
}

void gdn_delta_launch_state_bwd(const gdn_delta_args *a, gdn_cuda_precision p, cudaStream_t st, int share) {
    GDN_DELTA_DISPATCH_K(launch_state_bwd_t, a, p, a, st, share);
}

void gdn_delta_launch_grad(const gdn_delta_args *a, gdn_cuda_precision p, cudaStream_t st) {
    if (p == GDN_CUDA_BF16) launch_grad_t<bf16>(a, st);
    else launch_grad_t<float>(a, st);
}
