/* Depthwise causal short convolution (width W <= CONV_MAX_W, no bias) with the activation fused:
 * y = act(u), u = conv(x), act = identity or SiLU, computed in fp32 and stored once. Rows before
 * t = 0 come from the halo (the previous segment's last W-1 rows) or are zero.
 *
 * Backward: with SiLU the pre-activation u is recomputed from x (and the halo) for every row a
 * tap needs, and du = dy silu'(u) stays in fp32. A block owns CONV_ROWS consecutive rows (b, t)
 * and a tile of channels; each thread walks its rows in order, writing dx and summing its
 * channels' dw taps in registers, then stores them as the block's partial. Partials are added in
 * block order, so dw is the same on every run. The halo gradient (W-1 rows per sequence) is a
 * separate small kernel.
 *
 * Aliasing: a block reads rows of dy, x and the halo that neighbouring blocks own, so dx must not
 * alias dy, x or halo, and dhalo must alias none of the inputs. */
#include "model/cuda/ops_util.cuh"

#define CONV_MAX_W 8
#define CONV_ROWS 128
#define CONV_THREADS 128

static void conv_check(gdn_cuda_conv_act act, int W) {
    if (W < 1 || W > CONV_MAX_W)
        GDN_CUDA_DIE("short convolution: width %d is not supported (1..%d)", W, CONV_MAX_W);
    if (act != GDN_CUDA_CONV_LINEAR && act != GDN_CUDA_CONV_SILU)
        GDN_CUDA_DIE("short convolution: activation %d is not GDN_CUDA_CONV_LINEAR or GDN_CUDA_CONV_SILU", (int)act);
}

extern "C" size_t gdn_cuda_conv_workspace(int B, int T, int C, int W) {
    const size_t nblk = ((size_t)B * T + CONV_ROWS - 1) / CONV_ROWS;
    return nblk * (size_t)W * (size_t)C * sizeof(float);
}

/* ---- generic path: any W, one channel per thread ---------------------------------------------- */

/* Input row t (-(W-1) <= t < T) of sequence b, channel c: the halo for t < 0 (zero without one). */
template <typename T>
static __device__ __forceinline__ float conv_x(const T *x, const T *halo, int b, int t, int T_, int C, int W, int c) {
    if (t >= 0) return ops_ld(x, ((size_t)b * T_ + t) * C + c);
    if (!halo) return 0.0f;
    return ops_ld(halo, ((size_t)b * (W - 1) + (W - 1) + t) * C + c);
}

/* u[b,t,c] = sum_j w[c,j] x[b, t-(W-1)+j, c]  (0 <= t < T). */
template <typename T>
static __device__ __forceinline__ float conv_u(const T *x, const T *halo, const float *w, int b, int t, int T_, int C,
                                               int W, int c) {
    float a = 0.0f;
    for (int j = 0; j < W; j++) a += w[(size_t)c * W + j] * conv_x(x, halo, b, t - (W - 1) + j, T_, C, W, c);
    return a;
}

/* du[b,t,c]: dy, times silu'(u) with SiLU (0 <= t < T). */
template <typename T, bool SILU>
static __device__ __forceinline__ float conv_du(const T *dy, const T *x, const T *halo, const float *w, int b, int t,
                                                int T_, int C, int W, int c) {
    const float g = ops_ld(dy, ((size_t)b * T_ + t) * C + c);
    if constexpr (SILU) return g * ops_dsilu(conv_u(x, halo, w, b, t, T_, C, W, c));
    return g;
}

template <typename T, bool SILU>
__global__ void k_conv_fwd(T *y, const T *x, const float *w, const T *halo, int T_, int C, int W, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % C);
        const size_t bt = i / C;
        const int t = (int)(bt % T_), b = (int)(bt / T_);
        const float u = conv_u(x, halo, w, b, t, T_, C, W, c);
        ops_st(y, i, SILU ? ops_silu(u) : u);
    }
}

/* dx[t] = sum_j w[j] du[t+(W-1)-j] (t+(W-1)-j < T);  dw[j] += sum_t du[t] x[t-(W-1)+j].
 * grid (row blocks, channel tiles) */
template <typename T, bool SILU>
__global__ void k_conv_bwd(T *dx, float *part, const T *dy, const T *x, const float *w, const T *halo, int BT,
                           int T_, int C, int W) {
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc[CONV_MAX_W];
#pragma unroll
    for (int j = 0; j < CONV_MAX_W; j++) acc[j] = 0.0f;
    const int r0 = blockIdx.x * CONV_ROWS, r1 = min(r0 + CONV_ROWS, BT);
    for (int bt = r0; bt < r1; bt++) {
        const int t = bt % T_, b = bt / T_;
        float d = 0.0f, g0 = 0.0f; /* g0 = du[t], from tap W-1 */
#pragma unroll
        for (int j = 0; j < CONV_MAX_W; j++) {
            if (j >= W) break;
            const int to = t + (W - 1) - j; /* output time that reads x[t] through tap j */
            if (to < T_) {
                const float g = conv_du<T, SILU>(dy, x, halo, w, b, to, T_, C, W, c);
                d += w[(size_t)c * W + j] * g;
                if (j == W - 1) g0 = g;
            }
        }
#pragma unroll
        for (int j = 0; j < CONV_MAX_W; j++) {
            if (j >= W) break;
            acc[j] += g0 * conv_x(x, halo, b, t - (W - 1) + j, T_, C, W, c);
        }
        ops_st(dx, (size_t)bt * C + c, d);
    }
    float *pb = part + (size_t)blockIdx.x * W * C;
#pragma unroll
    for (int j = 0; j < CONV_MAX_W; j++)
        if (j < W) pb[(size_t)j * C + c] = acc[j];
}

/* dhalo[b,r,c] (input time r-(W-1)) = sum_j w[c,j] du[b, r-j, c] over 0 <= r-j < T. */
template <typename T, bool SILU>
__global__ void k_conv_dhalo(T *dhalo, const T *dy, const T *x, const float *w, const T *halo, int T_, int C, int W,
                             size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % C);
        const size_t br = i / C;
        const int r = (int)(br % (W - 1)), b = (int)(br / (W - 1));
        float d = 0.0f;
        for (int j = 0; j <= r; j++)
            if (r - j < T_) d += w[(size_t)c * W + j] * conv_du<T, SILU>(dy, x, halo, w, b, r - j, T_, C, W, c);
        ops_st(dhalo, i, d);
    }
}

/* ---- the common case, vectorised: W = 4 and C a multiple of VW = 8 or 4 ----------------------
 * A thread owns VW channels over a block of rows, holds their taps in registers and slides a
 * window of rows, so each row is read once (re-read only where a block or a sequence starts).
 * The SiLU backward uses VW = 4: its windows of 8 channels need ~180 registers, which starves
 * occupancy; the per-element arithmetic does not depend on VW. grid (row blocks, channel-group tiles). */
#define CONV_FWD_ROWS 32

/* VW = 4 consecutive elements as floats (i a multiple of 4, p 16-byte aligned): 16 or 8 bytes. */
static __device__ __forceinline__ void conv_ld4(const float *p, size_t i, float *o) {
    const float4 a = *(const float4 *)(p + i);
    o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w;
}
static __device__ __forceinline__ void conv_ld4(const ops_bf16 *p, size_t i, float *o) {
    const uint2 u = *(const uint2 *)(p + i);
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
    const float2 f0 = __bfloat1622float2(h[0]), f1 = __bfloat1622float2(h[1]);
    o[0] = f0.x; o[1] = f0.y; o[2] = f1.x; o[3] = f1.y;
}
static __device__ __forceinline__ void conv_st4(float *p, size_t i, const float *v) {
    *(float4 *)(p + i) = make_float4(v[0], v[1], v[2], v[3]);
}
static __device__ __forceinline__ void conv_st4(ops_bf16 *p, size_t i, const float *v) {
    uint2 u;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&u;
    h[0] = __floats2bfloat162_rn(v[0], v[1]);
    h[1] = __floats2bfloat162_rn(v[2], v[3]);
    *(uint2 *)(p + i) = u;
}

template <int VW, typename T>
static __device__ __forceinline__ void conv_ldv(const T *p, size_t i, float *o) {
    static_assert(VW == 8 || VW == 4, "conv vector width is 8 or 4");
    if constexpr (VW == 8) ops_ldv<8>(p, i, o);
    else conv_ld4(p, i, o);
}
template <int VW, typename T>
static __device__ __forceinline__ void conv_stv(T *p, size_t i, const float *v) {
    static_assert(VW == 8 || VW == 4, "conv vector width is 8 or 4");
    if constexpr (VW == 8) ops_stv<8>(p, i, v);
    else conv_st4(p, i, v);
}

/* Whether VW-wide accesses suit C channels at these pointers (NULL ignored; 16-byte alignment). */
static int conv_vec(int VW, size_t C, const void *a, const void *b = NULL, const void *c = NULL,
                    const void *d = NULL, const void *e = NULL, const void *f = NULL) {
    const void *p[6] = {a, b, c, d, e, f};
    if (C % (size_t)VW) return 0;
    for (int i = 0; i < 6; i++)
        if (((size_t)p[i]) & 15) return 0;
    return 1;
}

/* v = row `row` (global b*T + t) at channels c..c+VW-1, or zeros when !valid. */
template <int VW, typename T>
static __device__ __forceinline__ void conv_rowv(float *v, const T *p, int row, int C, int c, bool valid) {
    if (valid) {
        conv_ldv<VW>(p, (size_t)row * C + c, v);
    } else {
#pragma unroll
        for (int k = 0; k < VW; k++) v[k] = 0.0f;
    }
}

/* v = input row t (t >= -3) of sequence b: x for 0 <= t < T, the halo for t < 0, else zeros. */
template <int VW, typename T>
static __device__ __forceinline__ void conv_inv(float *v, const T *x, const T *halo, int b, int t, int T_, int C,
                                                int c) {
    if (t >= 0) conv_rowv<VW>(v, x, b * T_ + t, C, c, t < T_);
    else conv_rowv<VW>(v, halo, b * 3 + 3 + t, C, c, halo != NULL);
}

template <int VW>
static __device__ __forceinline__ void conv_tapsv(float *wv, const float *w, int c) {
#pragma unroll
    for (int q = 0; q < 4; q++)
        conv_ldv<VW>(w, (size_t)c * 4 + VW * q, wv + VW * q); /* wv[k*4+j] = w[c+k, j] */
}

/* u = sum_j w[j] xr[j] for input rows xr[0..3] = t-3 .. t (the forward's order of terms). */
template <int VW>
static __device__ __forceinline__ void conv_uv(float *u, const float *wv, const float (*xr)[VW]) {
#pragma unroll
    for (int k = 0; k < VW; k++) {
        float a = 0.0f;
        a += wv[k * 4] * xr[0][k];
        a += wv[k * 4 + 1] * xr[1][k];
        a += wv[k * 4 + 2] * xr[2][k];
        a += wv[k * 4 + 3] * xr[3][k];
        u[k] = a;
    }
}

template <typename T, bool SILU>
__global__ void k_conv4_fwd8(T *y, const T *x, const float *w, const T *halo, int BT, int T_, int C) {
    const int c = (blockIdx.y * blockDim.x + threadIdx.x) * 8;
    if (c >= C) return;
    float wv[32], xw[4][8]; /* xw[i]: input row t-3+i */
    conv_tapsv<8>(wv, w, c);
    const int r0 = blockIdx.x * CONV_FWD_ROWS, r1 = min(r0 + CONV_FWD_ROWS, BT);
    for (int bt = r0, t = r0 % T_; bt < r1; bt++, t = t + 1 == T_ ? 0 : t + 1) {
        if (bt == r0 || t == 0) { /* rows t-3 .. t-1: this sequence's, or its halo */
            const int b = bt / T_;
#pragma unroll
            for (int i = 0; i < 3; i++) conv_inv<8>(xw[i], x, halo, b, t - 3 + i, T_, C, c);
        } else {
#pragma unroll
            for (int i = 0; i < 3; i++)
#pragma unroll
                for (int k = 0; k < 8; k++) xw[i][k] = xw[i + 1][k];
        }
        conv_ldv<8>(x, (size_t)bt * C + c, xw[3]);
        float u[8];
        conv_uv<8>(u, wv, xw);
        if constexpr (SILU)
#pragma unroll
            for (int k = 0; k < 8; k++) u[k] = ops_silu(u[k]);
        conv_stv<8>(y, (size_t)bt * C + c, u);
    }
}

/* g = du of row bt (zero when !valid); xr[0..3]: input rows bt-3 .. bt (read with SiLU only). */
template <int VW, typename T, bool SILU>
static __device__ __forceinline__ void conv_duv(float *g, const T *dy, int bt, int C, int c, bool valid,
                                                const float *wv, const float (*xr)[VW]) {
    conv_rowv<VW>(g, dy, bt, C, c, valid);
    if constexpr (SILU) {
        if (!valid) return;
        float u[VW];
        conv_uv<VW>(u, wv, xr);
#pragma unroll
        for (int k = 0; k < VW; k++) g[k] *= ops_dsilu(u[k]);
    }
}

/* Channels per thread of the backward: 4 with SiLU (fewer registers), else 8. */
template <bool SILU> struct conv_bwd_vw { static constexpr int value = SILU ? 4 : 8; };

/* Backward with two windows: du rows t .. t+3 (zero past the sequence end) and input rows
 * t-3 .. t-3+NX-1: t-3 .. t for dw, and with SiLU also t+1 .. t+3, the inputs of u[t+3].
 * grid (row blocks of CONV_ROWS, channel-group tiles); at most CONV_BWD_THREADS threads a block. */
#define CONV_BWD_THREADS 64
template <typename T, bool SILU>
__global__ void __launch_bounds__(CONV_BWD_THREADS)
k_conv4_bwdv(T *dx, float *part, const T *dy, const T *x, const float *w, const T *halo, int BT, int T_, int C) {
    constexpr int NX = SILU ? 7 : 4, VW = conv_bwd_vw<SILU>::value;
    const int c = (blockIdx.y * blockDim.x + threadIdx.x) * VW;
    if (c >= C) return;
    float wv[4 * VW], acc[4 * VW]; /* acc[j * VW + k]: tap j, channel c + k */
    conv_tapsv<VW>(wv, w, c);
#pragma unroll
    for (int k = 0; k < 4 * VW; k++) acc[k] = 0.0f;
    float g[4][VW];  /* g[m]: du row t+m */
    float xw[7][VW]; /* xw[i]: input row t-3+i, i < NX */
    const int r0 = blockIdx.x * CONV_ROWS, r1 = min(r0 + CONV_ROWS, BT);
    for (int bt = r0, t = r0 % T_; bt < r1; bt++, t = t + 1 == T_ ? 0 : t + 1) {
        if (bt == r0 || t == 0) { /* (re)fill both windows inside this sequence */
            const int b = bt / T_;
#pragma unroll
            for (int i = 0; i < NX; i++) conv_inv<VW>(xw[i], x, halo, b, t - 3 + i, T_, C, c);
#pragma unroll
            for (int m = 0; m < 4; m++)
                conv_duv<VW, T, SILU>(g[m], dy, bt + m, C, c, t + m < T_, wv, xw + m);
        } else {
#pragma unroll
            for (int i = 0; i + 1 < NX; i++)
#pragma unroll
                for (int k = 0; k < VW; k++) xw[i][k] = xw[i + 1][k];
            conv_rowv<VW>(xw[NX - 1], x, bt + NX - 4, C, c, t + NX - 4 < T_);
#pragma unroll
            for (int m = 0; m < 3; m++)
#pragma unroll
                for (int k = 0; k < VW; k++) g[m][k] = g[m + 1][k];
            conv_duv<VW, T, SILU>(g[3], dy, bt + 3, C, c, t + 3 < T_, wv, xw + 3);
        }
        float d[VW];
#pragma unroll
        for (int k = 0; k < VW; k++) {
            float a = 0.0f; /* dx[t] = sum_j w[j] du[t+3-j] */
            a += wv[k * 4] * g[3][k];
            a += wv[k * 4 + 1] * g[2][k];
            a += wv[k * 4 + 2] * g[1][k];
            a += wv[k * 4 + 3] * g[0][k];
            d[k] = a;
#pragma unroll
            for (int j = 0; j < 4; j++) acc[j * VW + k] += g[0][k] * xw[j][k]; /* dw[j] += du[t] x[t-3+j] */
        }
        conv_stv<VW>(dx, (size_t)bt * C + c, d);
    }
    float *pb = part + (size_t)blockIdx.x * 4 * C;
#pragma unroll
    for (int j = 0; j < 4; j++) conv_stv<VW>(pb, (size_t)j * C + c, acc + j * VW);
}

/* dw[c,j] += sum_b part[b, j, c], in block order. */
__global__ void k_conv_reduce(float *dw, const float *part, int nblk, int C, int W) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x; /* i = j*C + c */
    if (i >= C * W) return;
    const int j = i / C, c = i % C;
    double s = 0.0;
    for (int b = 0; b < nblk; b++) s += part[(size_t)b * W * C + i];
    dw[(size_t)c * W + j] += (float)s;
}

/* Threads per block for `groups` channel groups: whole warps, at most CONV_BWD_THREADS (64). */
static int conv_threads(int groups) {
    return groups < CONV_BWD_THREADS ? ((groups + 31) / 32) * 32 : CONV_BWD_THREADS;
}

template <typename E, bool SILU>
static void conv_fwd_launch(void *y, const void *x, const float *w, const void *halo, int B, int T, int C, int W,
                            cudaStream_t s) {
    const size_t n = (size_t)B * T * C;
    if (W == 4 && ops_vec8((size_t)C, y, x, w, halo)) {
        const int BT = B * T, groups = C / 8, threads = conv_threads(groups);
        dim3 grid((unsigned)((BT + CONV_FWD_ROWS - 1) / CONV_FWD_ROWS), (unsigned)((groups + threads - 1) / threads));
        k_conv4_fwd8<E, SILU><<<grid, threads, 0, s>>>((E *)y, (const E *)x, w, (const E *)halo, BT, T, C);
    } else {
        k_conv_fwd<E, SILU><<<ops_grid(n, 256), 256, 0, s>>>((E *)y, (const E *)x, w, (const E *)halo, T, C, W, n);
    }
    GDN_CUDA_CHECK_LAUNCH();
}

template <typename E, bool SILU>
static void conv_bwd_launch(void *dx, float *dw, void *dhalo, const void *dy, const void *x, const float *w,
                            const void *halo, int B, int T, int C, int W, float *part, cudaStream_t s) {
    const size_t nh = (size_t)B * (W - 1) * C;
    if (dhalo && nh) { /* also for T = 0: zeros */
        k_conv_dhalo<E, SILU><<<ops_grid(nh, 256), 256, 0, s>>>((E *)dhalo, (const E *)dy, (const E *)x, w,
                                                                (const E *)halo, T, C, W, nh);
        GDN_CUDA_CHECK_LAUNCH();
    }
    const int BT = B * T;
    if (BT <= 0 || C <= 0) return;
    const int nblk = (BT + CONV_ROWS - 1) / CONV_ROWS;
    constexpr int VW = conv_bwd_vw<SILU>::value;
    if (W == 4 && conv_vec(VW, (size_t)C, dx, dy, x, w, part, halo)) {
        const int groups = C / VW, threads = conv_threads(groups);
        dim3 grid((unsigned)nblk, (unsigned)((groups + threads - 1) / threads));
        k_conv4_bwdv<E, SILU><<<grid, threads, 0, s>>>((E *)dx, part, (const E *)dy, (const E *)x, w,
                                                       (const E *)halo, BT, T, C);
    } else {
        dim3 grid((unsigned)nblk, (unsigned)((C + CONV_THREADS - 1) / CONV_THREADS));
        k_conv_bwd<E, SILU><<<grid, CONV_THREADS, 0, s>>>((E *)dx, part, (const E *)dy, (const E *)x, w,
                                                          (const E *)halo, BT, T, C, W);
    }
    GDN_CUDA_CHECK_LAUNCH();
    k_conv_reduce<<<(C * W + 255) / 256, 256, 0, s>>>(dw, part, nblk, C, W);
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" void gdn_cuda_conv_fwd(gdn_cuda_precision p, gdn_cuda_conv_act act, void *y, const void *x,
                                  const float *w, const void *halo, int B, int T, int C, int W, void *stream) {
    conv_check(act, W);
    if ((size_t)B * T * C == 0) return;
    const bool silu = act == GDN_CUDA_CONV_SILU;
    OPS_DISPATCH(p, E,
                 if (silu) conv_fwd_launch<E, true>(y, x, w, halo, B, T, C, W, OPS_STREAM(stream));
                 else conv_fwd_launch<E, false>(y, x, w, halo, B, T, C, W, OPS_STREAM(stream)));
}

extern "C" void gdn_cuda_conv_bwd(gdn_cuda_precision p, gdn_cuda_conv_act act, void *dx, float *dw, void *dhalo,
                                  const void *dy, const void *x, const float *w, const void *halo, int B, int T,
                                  int C, int W, void *ws, void *stream) {
    conv_check(act, W);
    const bool silu = act == GDN_CUDA_CONV_SILU;
    float *part = (float *)ws;
    OPS_DISPATCH(p, E,
                 if (silu) conv_bwd_launch<E, true>(dx, dw, dhalo, dy, x, w, halo, B, T, C, W, part, OPS_STREAM(stream));
                 else conv_bwd_launch<E, false>(dx, dw, dhalo, dy, x, w, halo, B, T, C, W, part, OPS_STREAM(stream)));
}
