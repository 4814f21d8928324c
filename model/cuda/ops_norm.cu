/* Row norms: RMSNorm (fp32 residual in, act out), the per-head L2 norm of q and k, and the gated
 * output RMSNorm. One warp per row; row sums in fp32 with a butterfly warp sum.
 *
 * Weight gradients: a block owns NORM_ROWS consecutive rows; each of its warps adds its rows'
 * terms into its own shared-memory row, the warps' rows are added in warp order into the
 * block's partial, and the partials are added in block order (ops_reduce_partials). The result
 * is the same on every run. */
#include "model/cuda/ops_util.cuh"

#define NORM_ROWS 64              /* rows per block in the backward passes */
#define NORM_FWD_WARPS 8
#define NORM_SMEM_FLOATS 12288    /* per-warp dw rows must fit in 48 KB of shared memory */
#define NORM_L2_EPS 1e-6f

/* Warps per backward block for rows of length D (their dw rows share 48 KB). */
static int norm_bwd_warps(int D, const char *what) {
    if (D > NORM_SMEM_FLOATS)
        GDN_CUDA_DIE("%s: rows of %d elements are not supported (at most %d)", what, D, NORM_SMEM_FLOATS);
    int w = NORM_SMEM_FLOATS / D;
    return w > 8 ? 8 : w;
}

extern "C" size_t gdn_cuda_norm_workspace(int N, int D) {
    return (size_t)((N + NORM_ROWS - 1) / NORM_ROWS) * (size_t)D * sizeof(float);
}

/* Rows are walked VW elements per lane at a time: VW = 8 (16-byte accesses) when D is a multiple
 * of 256 and the pointers are aligned, else 1. */
#define ROW_LOOP(j) for (int j = lane * VW; j < D; j += 32 * VW)

/* Forward kernels (and the L2 backward): one warp per row. */
static __device__ __forceinline__ int norm_fwd_row() {
    return blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
}
static unsigned norm_fwd_grid(int N) { return (unsigned)((N + NORM_FWD_WARPS - 1) / NORM_FWD_WARPS); }

/* Sum of squares of the row at x + o (length D), on every lane of the warp. */
template <int VW, typename S>
static __device__ __forceinline__ float norm_row_sumsq(const S *x, size_t o, int D, int lane) {
    float ss = 0.0f;
    ROW_LOOP(j) {
        float a[VW];
        ops_ldv<VW>(x, o + j, a);
#pragma unroll
        for (int e = 0; e < VW; e++) ss += a[e] * a[e];
    }
    return ops_warp_sum(ss);
}

/* Weight-gradient kernels: the warp's dw row in dynamic shared memory [warps][D], zeroed. */
static __device__ __forceinline__ float *norm_warp_dw(int D) {
    extern __shared__ float norm_sdw[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float *sdw = norm_sdw + (size_t)warp * D;
    for (int j = lane; j < D; j += 32) sdw[j] = 0.0f;
    __syncwarp();
    return sdw;
}
/* The block's partial dw: the warps' rows added in warp order. */
static __device__ __forceinline__ void norm_block_partial(float *part, int D) {
    extern __shared__ float norm_sdw[];
    const int nw = blockDim.x >> 5;
    __syncthreads();
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        float s = 0.0f;
        for (int v = 0; v < nw; v++) s += norm_sdw[(size_t)v * D + j];
        part[(size_t)blockIdx.x * D + j] = s;
    }
}

/* Launches kernel<T, 8> or kernel<T, 1>. */
#define NORM_LAUNCH(kernel, T, vec, grid, threads, smem, ...)                                         \
    do {                                                                                              \
        if (vec) kernel<T, 8><<<(grid), (threads), (smem), OPS_STREAM(stream)>>>(__VA_ARGS__);         \
        else kernel<T, 1><<<(grid), (threads), (smem), OPS_STREAM(stream)>>>(__VA_ARGS__);             \
    } while (0)

static int norm_vec(int D, const void *a, const void *b, const void *c = NULL, const void *d = NULL,
                    const void *e = NULL) {
    return D % 256 == 0 && ops_vec8((size_t)D, a, b, c, d, e);
}

/* ---- RMSNorm --------------------------------------------------------------------------------- */
template <typename T, int VW>
__global__ void k_rmsnorm_fwd(T *y, float *rstd, const float *x, const float *w, int N, int D, float eps) {
    const int lane = threadIdx.x & 31, n = norm_fwd_row();
    if (n >= N) return;
    const size_t o = (size_t)n * D;
    const float ss = norm_row_sumsq<VW>(x, o, D, lane);
    const float r = 1.0f / sqrtf(ss / (float)D + eps);
    if (lane == 0) rstd[n] = r;
    ROW_LOOP(j) {
        float a[VW], ww[VW];
        ops_ldv<VW>(x, o + j, a);
        ops_ldv<VW>(w, j, ww);
#pragma unroll
        for (int e = 0; e < VW; e++) a[e] = a[e] * r * ww[e];
        ops_stv<VW>(y, o + j, a);
    }
}

/* dx_j = r w_j dy_j - x_j r^3 / D sum_i dy_i w_i x_i,  dw_j += sum_n dy_j x_j r. */
template <typename T, int VW>
__global__ void k_rmsnorm_bwd(float *dx, int accumulate, T *dx_act, float *part, const float *dy,
                              const float *x, const float *w, const float *rstd, int N, int D) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float *sdw = norm_warp_dw(D);
    const int n0 = blockIdx.x * NORM_ROWS, n1 = min(n0 + NORM_ROWS, N);
    for (int n = n0 + warp; n < n1; n += nw) {
        const size_t o = (size_t)n * D;
        const float r = rstd[n];
        float dot = 0.0f;
        ROW_LOOP(j) {
            float g[VW], a[VW], ww[VW];
            ops_ldv<VW>(dy, o + j, g);
            ops_ldv<VW>(x, o + j, a);
            ops_ldv<VW>(w, j, ww);
#pragma unroll
            for (int e = 0; e < VW; e++) dot += g[e] * ww[e] * a[e];
        }
        dot = ops_warp_sum(dot);
        const float c = r * r * r * dot / (float)D;
        ROW_LOOP(j) {
            float g[VW], a[VW], ww[VW], d[VW];
            ops_ldv<VW>(dy, o + j, g);
            ops_ldv<VW>(x, o + j, a);
            ops_ldv<VW>(w, j, ww);
            if (accumulate) ops_ldv<VW>(dx, o + j, d);
#pragma unroll
            for (int e = 0; e < VW; e++) {
                const float v = r * ww[e] * g[e] - a[e] * c;
                d[e] = accumulate ? d[e] + v : v;
                sdw[j + e] += g[e] * a[e] * r;
            }
            ops_stv<VW>(dx, o + j, d);
            if (dx_act) ops_stv<VW>(dx_act, o + j, d);
        }
    }
    norm_block_partial(part, D);
}

extern "C" void gdn_cuda_rmsnorm_fwd(gdn_cuda_precision p, void *y, float *rstd, const float *x,
                                     const float *w, int N, int D, float eps, void *stream) {
    if (N <= 0 || D <= 0) return;
    const unsigned grid = norm_fwd_grid(N);
    const int vec = norm_vec(D, y, x, w);
    OPS_DISPATCH(p, T, NORM_LAUNCH(k_rmsnorm_fwd, T, vec, grid, 32 * NORM_FWD_WARPS, 0, (T *)y, rstd, x, w, N, D, eps));
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" void gdn_cuda_rmsnorm_bwd(gdn_cuda_precision p, float *dx, int accumulate, void *dx_act,
                                     float *dw, const float *dy, const float *x, const float *w,
                                     const float *rstd, int N, int D, void *ws, void *stream) {
    if (N <= 0 || D <= 0) return;
    const int warps = norm_bwd_warps(D, "rmsnorm backward"), nblk = (N + NORM_ROWS - 1) / NORM_ROWS;
    const size_t smem = (size_t)warps * D * sizeof(float);
    float *part = (float *)ws;
    const int vec = norm_vec(D, dx, dx_act, dy, x, w);
    OPS_DISPATCH(p, T, NORM_LAUNCH(k_rmsnorm_bwd, T, vec, nblk, 32 * warps, smem,
                                   dx, accumulate, (T *)dx_act, part, dy, x, w, rstd, N, D));
    GDN_CUDA_CHECK_LAUNCH();
    ops_reduce_partials(dw, part, nblk, D, OPS_STREAM(stream));
}

/* ---- L2 norm ----------------------------------------------------------------------------------- */
template <typename T, int VW>
__global__ void k_l2norm_fwd(T *y, float *r, const T *x, int N, int D) {
    const int lane = threadIdx.x & 31, n = norm_fwd_row();
    if (n >= N) return;
    const size_t o = (size_t)n * D;
    const float ss = norm_row_sumsq<VW>(x, o, D, lane);
    const float rn = 1.0f / sqrtf(ss + NORM_L2_EPS);
    if (lane == 0) r[n] = rn;
    ROW_LOOP(j) {
        float a[VW];
        ops_ldv<VW>(x, o + j, a);
#pragma unroll
        for (int e = 0; e < VW; e++) a[e] *= rn;
        ops_stv<VW>(y, o + j, a);
    }
}

/* dx = r (dy - y (dy . y)). */
template <typename T, int VW>
__global__ void k_l2norm_bwd(T *dx, const T *dy, const T *y, const float *r, int N, int D) {
    const int lane = threadIdx.x & 31, n = norm_fwd_row();
    if (n >= N) return;
    const size_t o = (size_t)n * D;
    float dot = 0.0f;
    ROW_LOOP(j) {
        float g[VW], a[VW];
        ops_ldv<VW>(dy, o + j, g);
        ops_ldv<VW>(y, o + j, a);
#pragma unroll
        for (int e = 0; e < VW; e++) dot += g[e] * a[e];
    }
    dot = ops_warp_sum(dot);
    const float rn = r[n];
    ROW_LOOP(j) {
        float g[VW], a[VW];
        ops_ldv<VW>(dy, o + j, g);
        ops_ldv<VW>(y, o + j, a);
#pragma unroll
        for (int e = 0; e < VW; e++) g[e] = rn * (g[e] - a[e] * dot);
        ops_stv<VW>(dx, o + j, g);
    }
}

extern "C" void gdn_cuda_l2norm_fwd(gdn_cuda_precision p, void *y, float *r, const void *x, int N, int D,
                                    void *stream) {
    if (N <= 0 || D <= 0) return;
    const unsigned grid = norm_fwd_grid(N);
    const int vec = norm_vec(D, y, x);
    OPS_DISPATCH(p, T, NORM_LAUNCH(k_l2norm_fwd, T, vec, grid, 32 * NORM_FWD_WARPS, 0, (T *)y, r, (const T *)x, N, D));
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" void gdn_cuda_l2norm_bwd(gdn_cuda_precision p, void *dx, const void *dy, const void *y,
                                    const float *r, int N, int D, void *stream) {
    if (N <= 0 || D <= 0) return;
    const unsigned grid = norm_fwd_grid(N);
    const int vec = norm_vec(D, dx, dy, y);
    OPS_DISPATCH(p, T, NORM_LAUNCH(k_l2norm_bwd, T, vec, grid, 32 * NORM_FWD_WARPS, 0,
                                   (T *)dx, (const T *)dy, (const T *)y, r, N, D));
    GDN_CUDA_CHECK_LAUNCH();
}

/* ---- gated output RMSNorm ------------------------------------------------------------------------ */
template <typename T, int VW>
__global__ void k_gated_fwd(T *y, float *rstd, const T *x, const T *z, const float *w, int N, int D,
                            float eps) {
    const int lane = threadIdx.x & 31, n = norm_fwd_row();
    if (n >= N) return;
    const size_t o = (size_t)n * D;
    const float ss = norm_row_sumsq<VW>(x, o, D, lane);
    const float r = 1.0f / sqrtf(ss / (float)D + eps);
    if (lane == 0) rstd[n] = r;
    ROW_LOOP(j) {
        float a[VW], zz[VW], ww[VW];
        ops_ldv<VW>(x, o + j, a);
        ops_ldv<VW>(z, o + j, zz);
        ops_ldv<VW>(w, j, ww);
#pragma unroll
        for (int e = 0; e < VW; e++) a[e] = a[e] * r * ww[e] * ops_silu(zz[e]);
        ops_stv<VW>(y, o + j, a);
    }
}

/* y = u s, u = x r w, s = silu(z): dz = dy u silu'(z); du = dy s goes through the RMSNorm
 * backward: dx = r w du - x r^3 / D sum(du w x), dw += sum du x r. */
template <typename T, int VW>
__global__ void k_gated_bwd(T *dx, T *dz, float *part, const float *dy, const T *x, const T *z,
                            const float *w, const float *rstd, int N, int D) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float *sdw = norm_warp_dw(D);
    const int n0 = blockIdx.x * NORM_ROWS, n1 = min(n0 + NORM_ROWS, N);
    for (int n = n0 + warp; n < n1; n += nw) {
        const size_t o = (size_t)n * D;
        const float r = rstd[n];
        float dot = 0.0f;
        ROW_LOOP(j) {
            float g[VW], a[VW], zz[VW], ww[VW], d[VW];
            ops_ldv<VW>(dy, o + j, g);
            ops_ldv<VW>(x, o + j, a);
            ops_ldv<VW>(z, o + j, zz);
            ops_ldv<VW>(w, j, ww);
#pragma unroll
            for (int e = 0; e < VW; e++) {
                const float s = ops_sigmoid(zz[e]);
                dot += g[e] * zz[e] * s * ww[e] * a[e];
                d[e] = g[e] * a[e] * r * ww[e] * s * (1.0f + zz[e] * (1.0f - s));
            }
            ops_stv<VW>(dz, o + j, d);
        }
        dot = ops_warp_sum(dot);
        const float c = r * r * r * dot / (float)D;
        ROW_LOOP(j) {
            float g[VW], a[VW], zz[VW], ww[VW], d[VW];
            ops_ldv<VW>(dy, o + j, g);
            ops_ldv<VW>(x, o + j, a);
            ops_ldv<VW>(z, o + j, zz);
            ops_ldv<VW>(w, j, ww);
#pragma unroll
            for (int e = 0; e < VW; e++) {
                const float du = g[e] * zz[e] * ops_sigmoid(zz[e]);
                d[e] = r * ww[e] * du - a[e] * c;
                sdw[j + e] += du * a[e] * r;
            }
            ops_stv<VW>(dx, o + j, d);
        }
    }
    norm_block_partial(part, D);
}

extern "C" void gdn_cuda_gated_rmsnorm_fwd(gdn_cuda_precision p, void *y, float *rstd, const void *x,
                                           const void *z, const float *w, int N, int D, float eps,
                                           void *stream) {
    if (N <= 0 || D <= 0) return;
    const unsigned grid = norm_fwd_grid(N);
    const int vec = norm_vec(D, y, x, z, w);
    OPS_DISPATCH(p, T, NORM_LAUNCH(k_gated_fwd, T, vec, grid, 32 * NORM_FWD_WARPS, 0,
                                   (T *)y, rstd, (const T *)x, (const T *)z, w, N, D, eps));
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" void gdn_cuda_gated_rmsnorm_bwd(gdn_cuda_precision p, void *dx, void *dz, float *dw,
                                           const float *dy, const void *x, const void *z,
                                           const float *w, const float *rstd, int N, int D, void *ws,
                                           void *stream) {
    if (N <= 0 || D <= 0) return;
    const int warps = norm_bwd_warps(D, "gated rmsnorm backward"), nblk = (N + NORM_ROWS - 1) / NORM_ROWS;
    const size_t smem = (size_t)warps * D * sizeof(float);
    float *part = (float *)ws;
    const int vec = norm_vec(D, dx, dz, dy, x, z) && ops_vec8((size_t)D, w);
    OPS_DISPATCH(p, T, NORM_LAUNCH(k_gated_bwd, T, vec, nblk, 32 * warps, smem,
                                   (T *)dx, (T *)dz, part, dy, (const T *)x, (const T *)z, w, rstd, N, D));
    GDN_CUDA_CHECK_LAUNCH();
    ops_reduce_partials(dw, part, nblk, D, OPS_STREAM(stream));
}
