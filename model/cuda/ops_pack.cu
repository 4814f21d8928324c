/* Packing of heads into the shapes the delta-rule kernels take (zero padding, splitting value
 * heads) and back; see gdn_cuda_heads_pack in ops_cuda.h. */
#include "model/cuda/ops_util.cuh"

/* One thread per packed element. */
template <typename T>
__global__ void k_heads_pack(T *dst, const T *src, int H, int D, int S, int Ds, int Dp, int split, size_t n) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(e % Dp);
        const size_t row = e / Dp; /* n * H*S + h*S + s */
        const int hs = (int)(row % ((size_t)H * S)), h = hs / S, s = hs % S;
        const size_t tok = row / ((size_t)H * S);
        const int col = split ? s * Ds + i : i;
        const bool inside = i < Ds && col < D;
        ops_st(dst, e, inside ? ops_ld(src, (tok * H + h) * D + col) : 0.0f);
    }
}

/* One thread per unpacked element. */
template <typename T>
__global__ void k_heads_unpack(T *dst, const T *src, int H, int D, int S, int Ds, int Dp, int split, size_t n) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        const int j = (int)(e % D);
        const size_t th = e / D; /* tok * H + h */
        const size_t base = th * S; /* packed row of sub-head 0 */
        if (split) {
            ops_st(dst, e, ops_ld(src, (base + j / Ds) * Dp + j % Ds));
        } else {
            float acc = 0.0f;
            for (int s = 0; s < S; s++) acc += ops_ld(src, (base + s) * Dp + j);
            ops_st(dst, e, acc);
        }
    }
}

/* 8-wide versions (every dimension a multiple of 8, aligned pointers); vp = Dp / 8 and vd = D / 8
 * vectors per row. Indices fit in 32 bits (checked by the launcher). */
template <typename T>
__global__ void k_heads_pack8(T *dst, const T *src, int H, int D, int S, int Ds, int vp, int split, unsigned n_vec) {
    const int HS = H * S;
    for (unsigned e = blockIdx.x * blockDim.x + threadIdx.x; e < n_vec; e += gridDim.x * blockDim.x) {
        const unsigned row = e / vp; /* tok * H*S + h*S + s */
        const int i = (int)(e - row * vp) * 8, hs = (int)(row % HS), h = hs / S, s = hs % S;
        const unsigned tok = row / HS;
        const int col = split ? s * Ds + i : i;
        float v[8];
        if (i < Ds && col < D) {
            ops_ldv<8>(src, ((size_t)tok * H + h) * D + col, v);
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = 0.0f;
        }
        ops_stv<8>(dst, (size_t)e * 8, v);
    }
}

template <typename T>
__global__ void k_heads_unpack8(T *dst, const T *src, int D, int S, int Ds, int Dp, int split, int vd, unsigned n_vec) {
    for (unsigned e = blockIdx.x * blockDim.x + threadIdx.x; e < n_vec; e += gridDim.x * blockDim.x) {
        const unsigned th = e / vd; /* tok * H + h */
        const int j = (int)(e - th * vd) * 8;
        const size_t base = (size_t)th * S;
        float v[8];
        if (split) {
            ops_ldv<8>(src, (base + j / Ds) * Dp + j % Ds, v);
        } else {
            ops_ldv<8>(src, base * Dp + j, v);
            for (int s = 1; s < S; s++) {
                float u[8];
                ops_ldv<8>(src, (base + s) * Dp + j, u);
#pragma unroll
                for (int k = 0; k < 8; k++) v[k] += u[k];
            }
        }
        ops_stv<8>(dst, (size_t)e * 8, v);
    }
}

static void pack_check(int D, int S, int Ds, int Dp, int split) {
    if (S < 1 || Ds < 1 || Dp < Ds || (split ? S * Ds < D : Ds != D))
        GDN_CUDA_DIE("head packing: inconsistent shape D=%d S=%d Ds=%d Dp=%d split=%d", D, S, Ds, Dp, split);
}

extern "C" void gdn_cuda_heads_pack(gdn_cuda_precision p, void *dst, const void *src, int N, int H, int D, int S,
                                    int Ds, int Dp, int split, void *stream) {
    pack_check(D, S, Ds, Dp, split);
    const size_t n = (size_t)N * H * S * Dp;
    if (!n) return;
    if (D % 8 == 0 && Ds % 8 == 0 && Dp % 8 == 0 && n / 8 < 0x7fffffffu && ops_vec8(n, dst, src)) {
        const unsigned nv = (unsigned)(n / 8);
        OPS_DISPATCH(p, T, k_heads_pack8<T><<<ops_grid(nv, 256), 256, 0, OPS_STREAM(stream)>>>(
                               (T *)dst, (const T *)src, H, D, S, Ds, Dp / 8, split, nv));
        GDN_CUDA_CHECK_LAUNCH();
        return;
    }
    OPS_DISPATCH(p, T, k_heads_pack<T><<<ops_grid(n, 256), 256, 0, OPS_STREAM(stream)>>>(
                           (T *)dst, (const T *)src, H, D, S, Ds, Dp, split, n));
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" void gdn_cuda_heads_unpack(gdn_cuda_precision p, void *dst, const void *src, int N, int H, int D, int S,
                                      int Ds, int Dp, int split, void *stream) {
    pack_check(D, S, Ds, Dp, split);
    const size_t n = (size_t)N * H * D;
    if (!n) return;
    if (D % 8 == 0 && Ds % 8 == 0 && Dp % 8 == 0 && n / 8 < 0x7fffffffu && ops_vec8(n, dst, src)) {
        const unsigned nv = (unsigned)(n / 8);
        OPS_DISPATCH(p, T, k_heads_unpack8<T><<<ops_grid(nv, 256), 256, 0, OPS_STREAM(stream)>>>(
                               (T *)dst, (const T *)src, D, S, Ds, Dp, split, D / 8, nv));
        GDN_CUDA_CHECK_LAUNCH();
        return;
    }
    OPS_DISPATCH(p, T, k_heads_unpack<T><<<ops_grid(n, 256), 256, 0, OPS_STREAM(stream)>>>(
                           (T *)dst, (const T *)src, H, D, S, Ds, Dp, split, n));
    GDN_CUDA_CHECK_LAUNCH();
}
