/* Row norms: RMSNorm (fp32 residual in, act out), the per-head L2 norm of q and k, and the gated
 * output RMSNorm. One warp per row; row sums in fp32 with a butterfly warp sum. Rows of 256, 512
 * or 1024 elements (the model's) are read from memory once and kept in registers between the
 * passes; other lengths are read once per pass. Both give the same bits for the same row length.
 *
 * Weight gradients: a block owns NORM_ROWS consecutive rows; each of its warps sums its rows'
 * terms in row order (in registers or in its own shared-memory row), the warps' rows are added
 * in warp order into the block's partial, and the partials are added in block order
 * (ops_reduce_partials). The result is the same on every run. */
#include "model/cuda/ops_util.cuh"

#define NORM_ROWS 64              /* rows per block in the backward passes */
#define NORM_FWD_WARPS 8
#define NORM_SMEM_FLOATS 12288    /* per-warp dw rows must fit in 48 KB of shared memory */
#define NORM_BWD_MAX_WARPS 8
/* Backward launch bounds (threads, blocks per multiprocessor): rows of up to 512 elements held in
 * registers fit two blocks without spills; rows of 1024 need about 190 registers (one block;
 * capping them at 128 spills); rows walked per pass keep three blocks. */
#define NORM_BWD_BOUNDS(NCH) 32 * NORM_BWD_MAX_WARPS, (NCH) == 0 ? 3 : (NCH) == 4 ? 1 : 2
#define NORM_L2_EPS 1e-6f

/* Warps per backward block for rows of length D (their dw rows share 48 KB). */
static int norm_bwd_warps(int D, const char *what) {
    if (D > NORM_SMEM_FLOATS)
        GDN_CUDA_DIE("%s: rows of %d elements are not supported (at most %d)", what, D, NORM_SMEM_FLOATS);
    int w = NORM_SMEM_FLOATS / D;
    return w > NORM_BWD_MAX_WARPS ? NORM_BWD_MAX_WARPS : w;
}

extern "C" size_t gdn_cuda_norm_workspace(int N, int D) {
    return (size_t)((N + NORM_ROWS - 1) / NORM_ROWS) * (size_t)D * sizeof(float);
}

/* Rows are walked VW elements per lane at a time: VW = 8 (16-byte accesses) when D is a multiple
 * of 256 and the pointers are aligned, else 1. Rows of NCH * 256 elements (NCH = 1, 2, 4) are
 * held in registers (norm_row below); other lengths walk the row once per pass (NCH = 0). */
#define ROW_LOOP(j) for (int j = lane * VW; j < D; j += 32 * VW)

/* The lane's first element of its chunk c when the row is held in registers: the same j, in the
 * same order, as ROW_LOOP's c-th step. */
static __device__ __forceinline__ int norm_chunk_j(int c, int lane) { return c * 256 + lane * 8; }

/* Calls f(c, j) for each of the lane's accesses of a row of D elements in ROW_LOOP's order (the
 * per-lane sums keep their order whichever path runs); c is the chunk index (0 when NCH = 0). */
template <int VW, int NCH, typename F>
static __device__ __forceinline__ void norm_for_row(int D, int lane, F f) {
    if constexpr (NCH > 0) {
        static_assert(VW == 8 && (NCH == 1 || NCH == 2 || NCH == 4), "rows in registers: 8-wide, D = 256 NCH");
#pragma unroll
        for (int c = 0; c < NCH; c++) f(c, norm_chunk_j(c, lane));
    } else {
        ROW_LOOP(j) f(0, j);
    }
}

/* One operand of a warp's row (p + o, D elements; p of type S) as the lane sees it: at(c, j) gives
 * the VW values at element j. With NCH > 0 the whole row is loaded once into registers when the
 * operand is made, all loads issued together (several 16-byte loads in flight per lane), and
 * every pass reads the registers, so the row crosses the memory bus once. With NCH = 0 each at()
 * loads from memory. A NULL p is an operand this call does not read (at() must not be called). */
template <int VW, int NCH, typename S> struct norm_row {
    float v[NCH][VW];
    __device__ __forceinline__ norm_row(const S *p, size_t o, int lane) {
        if (!p) return;
#pragma unroll
        for (int c = 0; c < NCH; c++) ops_ldv<VW>(p, o + norm_chunk_j(c, lane), v[c]);
    }
    __device__ __forceinline__ const float *at(int c, int) const { return v[c]; }
};
template <int VW, typename S> struct norm_row<VW, 0, S> {
    const S *p;
    size_t o;
    float v[VW];
    __device__ __forceinline__ norm_row(const S *p_, size_t o_, int) : p(p_), o(o_) {}
    __device__ __forceinline__ const float *at(int, int j) {
        ops_ldv<VW>(p, o + j, v);
        return v;
    }
};

/* Forward kernels (and the L2 backward): one warp per row. */
static __device__ __forceinline__ int norm_fwd_row() {
    return blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
}
static unsigned norm_fwd_grid(int N) { return (unsigned)((N + NORM_FWD_WARPS - 1) / NORM_FWD_WARPS); }

/* Sum of squares of the row x (length D), on every lane of the warp. */
template <int VW, int NCH, typename S>
static __device__ __forceinline__ float norm_row_sumsq(norm_row<VW, NCH, S> &x, int D, int lane) {
    float ss = 0.0f;
    norm_for_row<VW, NCH>(D, lane, [&](int ch, int j) {
        const float *a = x.at(ch, j);
#pragma unroll
        for (int e = 0; e < VW; e++) ss += a[e] * a[e];
    });
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

/* A warp's dw terms over its rows: add(c, j, e, t) adds t to dw[j + e]. With NCH > 0 a lane owns
 * the same elements in every row, so the sums stay in registers (starting from 0 and adding in
 * row order, as the shared-memory row does) and reach shared memory once; with NCH = 0 they are
 * added into the warp's shared-memory row. finish() writes the block's partial. */
template <int VW, int NCH> struct norm_dw {
    float acc[NCH][VW];
    __device__ __forceinline__ norm_dw(int) {
#pragma unroll
        for (int c = 0; c < NCH; c++)
#pragma unroll
            for (int e = 0; e < VW; e++) acc[c][e] = 0.0f;
    }
    __device__ __forceinline__ void add(int c, int, int e, float t) { acc[c][e] += t; }
    __device__ __forceinline__ void finish(float *part, int D) {
        extern __shared__ float norm_sdw[];
        const int lane = threadIdx.x & 31;
        float *sdw = norm_sdw + (size_t)(threadIdx.x >> 5) * D;
#pragma unroll
        for (int c = 0; c < NCH; c++) ops_stv<VW>(sdw, norm_chunk_j(c, lane), acc[c]);
        norm_block_partial(part, D);
    }
};
template <int VW> struct norm_dw<VW, 0> {
    float *sdw;
    __device__ __forceinline__ norm_dw(int D) : sdw(norm_warp_dw(D)) {}
    __device__ __forceinline__ void add(int, int j, int e, float t) { sdw[j + e] += t; }
    __device__ __forceinline__ void finish(float *part, int D) { norm_block_partial(part, D); }
};

/* Launches kernel<T, 8, D / 256> for rows held in registers, else kernel<T, 8, 0> or
 * kernel<T, 1, 0> (vec: 8-wide accesses suit the row length and the pointers). */
#define NORM_LAUNCH(kernel, T, vec, D, grid, threads, smem, ...)                                      \
    do {                                                                                              \
        const cudaStream_t st_ = OPS_STREAM(stream);                                                  \
        if (vec && (D) == 256) kernel<T, 8, 1><<<(grid), (threads), (smem), st_>>>(__VA_ARGS__);       \
        else if (vec && (D) == 512) kernel<T, 8, 2><<<(grid), (threads), (smem), st_>>>(__VA_ARGS__);  \
        else if (vec && (D) == 1024) kernel<T, 8, 4><<<(grid), (threads), (smem), st_>>>(__VA_ARGS__); \
        else if (vec) kernel<T, 8, 0><<<(grid), (threads), (smem), st_>>>(__VA_ARGS__);                \
        else kernel<T, 1, 0><<<(grid), (threads), (smem), st_>>>(__VA_ARGS__);                         \
    } while (0)

static int norm_vec(int D, const void *a, const void *b, const void *c = NULL, const void *d = NULL,
                    const void *e = NULL) {
    return D % 256 == 0 && ops_vec8((size_t)D, a, b, c, d, e);
}

/* ---- RMSNorm --------------------------------------------------------------------------------- */
template <typename T, int VW, int NCH>
__global__ void k_rmsnorm_fwd(T *y, float *rstd, const float *x, const float *w, int N, int D, float eps) {
    const int lane = threadIdx.x & 31, n = norm_fwd_row();
    if (n >= N) return;
    const size_t o = (size_t)n * D;
    norm_row<VW, NCH, float> xr(x, o, lane), wr(w, 0, lane);
    const float ss = norm_row_sumsq(xr, D, lane);
    const float r = 1.0f / sqrtf(ss / (float)D + eps);
    if (lane == 0) rstd[n] = r;
    norm_for_row<VW, NCH>(D, lane, [&](int ch, int j) {
        const float *a = xr.at(ch, j), *ww = wr.at(ch, j);
        float v[VW];
#pragma unroll
        for (int e = 0; e < VW; e++) v[e] = a[e] * r * ww[e];
        ops_stv<VW>(y, o + j, v);
    });
}

/* dx_j = r w_j dy_j - x_j r^3 / D sum_i dy_i w_i x_i,  dw_j += sum_n dy_j x_j r. */
template <typename T, int VW, int NCH>
__global__ void __launch_bounds__(NORM_BWD_BOUNDS(NCH))
k_rmsnorm_bwd(float *dx, int accumulate, T *dx_act, float *part, const float *dy, const float *x, const float *w,
              const float *rstd, int N, int D) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    norm_dw<VW, NCH> dw(D);
    norm_row<VW, 0, float> wr(w, 0, lane); /* the same in every row: read from cache in each pass */
    const int n0 = blockIdx.x * NORM_ROWS, n1 = min(n0 + NORM_ROWS, N);
    for (int n = n0 + warp; n < n1; n += nw) {
        const size_t o = (size_t)n * D;
        const float r = rstd[n];
        norm_row<VW, NCH, float> dyr(dy, o, lane), xr(x, o, lane), dxr(accumulate ? dx : NULL, o, lane);
        float dot = 0.0f;
        norm_for_row<VW, NCH>(D, lane, [&](int ch, int j) {
            const float *g = dyr.at(ch, j), *a = xr.at(ch, j), *ww = wr.at(ch, j);
#pragma unroll
            for (int e = 0; e < VW; e++) dot += g[e] * ww[e] * a[e];
        });
        dot = ops_warp_sum(dot);
        const float c = r * r * r * dot / (float)D;
        norm_for_row<VW, NCH>(D, lane, [&](int ch, int j) {
            const float *g = dyr.at(ch, j), *a = xr.at(ch, j), *ww = wr.at(ch, j);
            float d[VW] = {}; /* defined when !accumulate too: nothing carried from row to row */
            if (accumulate) {
                const float *d0 = dxr.at(ch, j);
#pragma unroll
                for (int e = 0; e < VW; e++) d[e] = d0[e];
            }
#pragma unroll
            for (int e = 0; e < VW; e++) {
                const float v = r * ww[e] * g[e] - a[e] * c;
                d[e] = accumulate ? d[e] + v : v;
                dw.add(ch, j, e, g[e] * a[e] * r);
            }
            ops_stv<VW>(dx, o + j, d);
            if (dx_act) ops_stv<VW>(dx_act, o + j, d);
        });
    }
    dw.finish(part, D);
}

extern "C" void gdn_cuda_rmsnorm_fwd(gdn_cuda_precision p, void *y, float *rstd, const float *x,
                                     const float *w, int N, int D, float eps, void *stream) {
    if (N <= 0 || D <= 0) return;
    const unsigned grid = norm_fwd_grid(N);
    const int vec = norm_vec(D, y, x, w);
    OPS_DISPATCH(p, T, NORM_LAUNCH(k_rmsnorm_fwd, T, vec, D, grid, 32 * NORM_FWD_WARPS, 0,
                                   (T *)y, rstd, x, w, N, D, eps));
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
    OPS_DISPATCH(p, T, NORM_LAUNCH(k_rmsnorm_bwd, T, vec, D, nblk, 32 * warps, smem,
                                   dx, accumulate, (T *)dx_act, part, dy, x, w, rstd, N, D));
    GDN_CUDA_CHECK_LAUNCH();
    ops_reduce_partials(dw, part, nblk, D, OPS_STREAM(stream));
}

/* ---- L2 norm ----------------------------------------------------------------------------------- */
template <typename T, int VW, int NCH>
__global__ void k_l2norm_fwd(T *y, float *r, const T *x, int N, int D) {
    const int lane = threadIdx.x & 31, n = norm_fwd_row();
    if (n >= N) return;
    const size_t o = (size_t)n * D;
    norm_row<VW, NCH, T> xr(x, o, lane);
    const float ss = norm_row_sumsq(xr, D, lane);
    const float rn = 1.0f / sqrtf(ss + NORM_L2_EPS);
    if (lane == 0) r[n] = rn;
    norm_for_row<VW, NCH>(D, lane, [&](int ch, int j) {
        const float *a = xr.at(ch, j);
        float v[VW];
#pragma unroll
        for (int e = 0; e < VW; e++) v[e] = a[e] * rn;
        ops_stv<VW>(y, o + j, v);
    });
}

/* dx = r (dy - y (dy . y)). */
template <typename T, int VW, int NCH>
__global__ void k_l2norm_bwd(T *dx, const T *dy, const T *y, const float *r, int N, int D) {
    const int lane = threadIdx.x & 31, n = norm_fwd_row();
    if (n >= N) return;
    const size_t o = (size_t)n * D;
    norm_row<VW, NCH, T> dyr(dy, o, lane), yr(y, o, lane);
    float dot = 0.0f;
    norm_for_row<VW, NCH>(D, lane, [&](int ch, int j) {
        const float *g = dyr.at(ch, j), *a = yr.at(ch, j);
#pragma unroll
        for (int e = 0; e < VW; e++) dot += g[e] * a[e];
    });
    dot = ops_warp_sum(dot);
    const float rn = r[n];
    norm_for_row<VW, NCH>(D, lane, [&](int ch, int j) {
        const float *g = dyr.at(ch, j), *a = yr.at(ch, j);
        float v[VW];
#pragma unroll
        for (int e = 0; e < VW; e++) v[e] = rn * (g[e] - a[e] * dot);
        ops_stv<VW>(dx, o + j, v);
    });
}

extern "C" void gdn_cuda_l2norm_fwd(gdn_cuda_precision p, void *y, float *r, const void *x, int N, int D,
                                    void *stream) {
    if (N <= 0 || D <= 0) return;
    const unsigned grid = norm_fwd_grid(N);
    const int vec = norm_vec(D, y, x);
    OPS_DISPATCH(p, T, NORM_LAUNCH(k_l2norm_fwd, T, vec, D, grid, 32 * NORM_FWD_WARPS, 0,
                                   (T *)y, r, (const T *)x, N, D));
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" void gdn_cuda_l2norm_bwd(gdn_cuda_precision p, void *dx, const void *dy, const void *y,
                                    const float *r, int N, int D, void *stream) {
    if (N <= 0 || D <= 0) return;
    const unsigned grid = norm_fwd_grid(N);
    const int vec = norm_vec(D, dx, dy, y);
    OPS_DISPATCH(p, T, NORM_LAUNCH(k_l2norm_bwd, T, vec, D, grid, 32 * NORM_FWD_WARPS, 0,
                                   (T *)dx, (const T *)dy, (const T *)y, r, N, D));
    GDN_CUDA_CHECK_LAUNCH();
}

/* ---- gated output RMSNorm ------------------------------------------------------------------------ */
template <typename T, int VW, int NCH>
__global__ void k_gated_fwd(T *y, float *rstd, const T *x, const T *z, const float *w, int N, int D,
                            float eps) {
    const int lane = threadIdx.x & 31, n = norm_fwd_row();
    if (n >= N) return;
    const size_t o = (size_t)n * D;
    norm_row<VW, NCH, T> xr(x, o, lane), zr(z, o, lane);
    norm_row<VW, NCH, float> wr(w, 0, lane);
    const float ss = norm_row_sumsq(xr, D, lane);
    const float r = 1.0f / sqrtf(ss / (float)D + eps);
    if (lane == 0) rstd[n] = r;
    norm_for_row<VW, NCH>(D, lane, [&](int ch, int j) {
        const float *a = xr.at(ch, j), *zz = zr.at(ch, j), *ww = wr.at(ch, j);
        float v[VW];
#pragma unroll
        for (int e = 0; e < VW; e++) v[e] = a[e] * r * ww[e] * ops_silu(zz[e]);
        ops_stv<VW>(y, o + j, v);
    });
}

/* y = u s, u = x r w, s = silu(z): dz = dy u silu'(z); du = dy s goes through the RMSNorm
 * backward: dx = r w du - x r^3 / D sum(du w x), dw += sum du x r. y (optional) gets the forward's
 * output again, the same expression on the same values (bitwise k_gated_fwd's), so the model
 * need not keep it. */
template <typename T, int VW, int NCH>
__global__ void __launch_bounds__(NORM_BWD_BOUNDS(NCH))
k_gated_bwd(T *dx, T *dz, T *y, float *part, const T *dy, const T *x, const T *z, const float *w,
            const float *rstd, int N, int D) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    norm_dw<VW, NCH> dw(D);
    norm_row<VW, 0, float> wr(w, 0, lane); /* the same in every row: read from cache in each pass */
    const int n0 = blockIdx.x * NORM_ROWS, n1 = min(n0 + NORM_ROWS, N);
    for (int n = n0 + warp; n < n1; n += nw) {
        const size_t o = (size_t)n * D;
        const float r = rstd[n];
        norm_row<VW, NCH, T> dyr(dy, o, lane), xr(x, o, lane), zr(z, o, lane);
        float dot = 0.0f;
        norm_for_row<VW, NCH>(D, lane, [&](int ch, int j) {
            const float *g = dyr.at(ch, j), *a = xr.at(ch, j), *zz = zr.at(ch, j), *ww = wr.at(ch, j);
            float d[VW];
#pragma unroll
            for (int e = 0; e < VW; e++) {
                const float s = ops_sigmoid(zz[e]);
                dot += g[e] * zz[e] * s * ww[e] * a[e];
                d[e] = g[e] * a[e] * r * ww[e] * s * (1.0f + zz[e] * (1.0f - s));
            }
            ops_stv<VW>(dz, o + j, d);
        });
        dot = ops_warp_sum(dot);
        const float c = r * r * r * dot / (float)D;
        norm_for_row<VW, NCH>(D, lane, [&](int ch, int j) {
            const float *g = dyr.at(ch, j), *a = xr.at(ch, j), *zz = zr.at(ch, j), *ww = wr.at(ch, j);
            float d[VW];
#pragma unroll
            for (int e = 0; e < VW; e++) {
                const float du = g[e] * zz[e] * ops_sigmoid(zz[e]);
                d[e] = r * ww[e] * du - a[e] * c;
                dw.add(ch, j, e, du * a[e] * r);
            }
            ops_stv<VW>(dx, o + j, d);
            if (y) {
#pragma unroll
                for (int e = 0; e < VW; e++) d[e] = a[e] * r * ww[e] * ops_silu(zz[e]);
                ops_stv<VW>(y, o + j, d);
            }
        });
    }
    dw.finish(part, D);
}

extern "C" void gdn_cuda_gated_rmsnorm_fwd(gdn_cuda_precision p, void *y, float *rstd, const void *x,
                                           const void *z, const float *w, int N, int D, float eps,
                                           void *stream) {
    if (N <= 0 || D <= 0) return;
    const unsigned grid = norm_fwd_grid(N);
    const int vec = norm_vec(D, y, x, z, w);
    OPS_DISPATCH(p, T, NORM_LAUNCH(k_gated_fwd, T, vec, D, grid, 32 * NORM_FWD_WARPS, 0,
                                   (T *)y, rstd, (const T *)x, (const T *)z, w, N, D, eps));
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" void gdn_cuda_gated_rmsnorm_bwd(gdn_cuda_precision p, void *dx, void *dz, void *y, float *dw,
                                           const void *dy, const void *x, const void *z,
                                           const float *w, const float *rstd, int N, int D, void *ws,
                                           void *stream) {
    if (N <= 0 || D <= 0) return;
    const int warps = norm_bwd_warps(D, "gated rmsnorm backward"), nblk = (N + NORM_ROWS - 1) / NORM_ROWS;
    const size_t smem = (size_t)warps * D * sizeof(float);
    float *part = (float *)ws;
    const int vec = norm_vec(D, dx, dz, dy, x, z) && ops_vec8((size_t)D, w) && (!y || norm_vec(D, y, y));
    OPS_DISPATCH(p, T, NORM_LAUNCH(k_gated_bwd, T, vec, D, nblk, 32 * warps, smem,
                                   (T *)dx, (T *)dz, (T *)y, part, (const T *)dy, (const T *)x, (const T *)z, w, rstd, N, D));
    GDN_CUDA_CHECK_LAUNCH();
    ops_reduce_partials(dw, part, nblk, D, OPS_STREAM(stream));
}
