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
 * Documents (docs/design.md section 3.8; doc [B,T] int device array as in model/cpu/doc.h, NULL:
 * none): output row t reads input row p only where p >= doc[b,t] (halo rows included), the
 * backward drops the same taps from dx, dw and dhalo. Calls with documents take the generic
 * kernels (one channel per thread); without, the vectorised ones as before.
 *
 * Aliasing: a block reads rows of dy, x and the halo that neighbouring blocks own, so dx must not
 * alias dy, x or halo, and dhalo must alias none of the inputs. */
#include <limits.h>

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

/* The first input row output row t of sequence b reads (doc NULL: any, the halo included). */
static __device__ __forceinline__ int conv_first(const int *doc, int b, int t, int T_) {
    return doc ? doc[(size_t)b * T_ + t] : INT_MIN;
}

/* u[b,t,c] = sum_j w[c,j] x[b, t-(W-1)+j, c] over the taps that read rows >= doc[b,t] (0 <= t < T). */
template <typename T>
static __device__ __forceinline__ float conv_u(const T *x, const T *halo, const float *w, const int *doc, int b, int t,
                                               int T_, int C, int W, int c) {
    const int lo = conv_first(doc, b, t, T_);
    float a = 0.0f;
    for (int j = 0; j < W; j++)
        if (t - (W - 1) + j >= lo) a += w[(size_t)c * W + j] * conv_x(x, halo, b, t - (W - 1) + j, T_, C, W, c);
    return a;
}

/* du[b,t,c]: dy, times silu'(u) with SiLU (0 <= t < T). */
template <typename T, bool SILU>
static __device__ __forceinline__ float conv_du(const T *dy, const T *x, const T *halo, const float *w, const int *doc,
                                                int b, int t, int T_, int C, int W, int c) {
    const float g = ops_ld(dy, ((size_t)b * T_ + t) * C + c);
    if constexpr (SILU) return g * ops_dsilu(conv_u(x, halo, w, doc, b, t, T_, C, W, c));
    return g;
}

template <typename T, bool SILU>
__global__ void k_conv_fwd(T *y, const T *x, const float *w, const T *halo, const int *doc, int T_, int C, int W,
                           size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % C);
        const size_t bt = i / C;
        const int t = (int)(bt % T_), b = (int)(bt / T_);
        const float u = conv_u(x, halo, w, doc, b, t, T_, C, W, c);
        ops_st(y, i, SILU ? ops_silu(u) : u);
    }
}

/* dx[t] = sum_j w[j] du[t+(W-1)-j] (t+(W-1)-j < T, x[t] visible from that row: t >= its doc);
 * dw[j] += sum_t du[t] x[t-(W-1)+j] (t-(W-1)+j >= doc[t]). grid (row blocks, channel tiles) */
template <typename T, bool SILU>
__global__ void k_conv_bwd(T *dx, int ldx, float *part, const T *dy, const T *x, const float *w, const T *halo,
                           const int *doc, int BT, int T_, int C, int W) {
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
            if (to < T_ && t >= conv_first(doc, b, to, T_)) {
                const float g = conv_du<T, SILU>(dy, x, halo, w, doc, b, to, T_, C, W, c);
                d += w[(size_t)c * W + j] * g;
                if (j == W - 1) g0 = g;
            }
        }
        const int lo = conv_first(doc, b, t, T_);
#pragma unroll
        for (int j = 0; j < CONV_MAX_W; j++) {
            if (j >= W) break;
            if (t - (W - 1) + j >= lo) acc[j] += g0 * conv_x(x, halo, b, t - (W - 1) + j, T_, C, W, c);
        }
        ops_st(dx, (size_t)bt * ldx + c, d);
    }
    float *pb = part + (size_t)blockIdx.x * W * C;
#pragma unroll
    for (int j = 0; j < CONV_MAX_W; j++)
        if (j < W) pb[(size_t)j * C + c] = acc[j];
}

/* dhalo[b,r,c] (input time r-(W-1)) = sum_j w[c,j] du[b, r-j, c] over 0 <= r-j < T where row
 * r-j sees input time r-(W-1) (>= its doc). */
template <typename T, bool SILU>
__global__ void k_conv_dhalo(T *dhalo, const T *dy, const T *x, const float *w, const T *halo, const int *doc,
                             int T_, int C, int W, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % C);
        const size_t br = i / C;
        const int r = (int)(br % (W - 1)), b = (int)(br / (W - 1));
        float d = 0.0f;
        for (int j = 0; j <= r; j++)
            if (r - j < T_ && r - (W - 1) >= conv_first(doc, b, r - j, T_))
                d += w[(size_t)c * W + j] * conv_du<T, SILU>(dy, x, halo, w, doc, b, r - j, T_, C, W, c);
        ops_st(dhalo, i, d);
    }
}

/* ---- the common case, vectorised: W = 4 and C a multiple of VW (8 forward, 4 backward) -------
 * A thread owns VW channels over a block of rows, holds their taps in registers and slides a
 * window of rows, so each row is read once (re-read only where a block or a sequence starts).
 * The loads of a thread's rows run CONV_AHEAD rows ahead of its arithmetic (a ring of raw rows
 * in registers; the loop is unrolled by the ring's length so every slot is a fixed register):
 * a thread that loads a row and then computes on it keeps too few bytes in flight for the
 * memory bandwidth, and with SiLU the arithmetic is as long as the load's latency.
 * The backward uses VW = 4: its windows of 8 channels need ~180 registers, which starves
 * occupancy; the per-element arithmetic does not depend on VW. grid (row blocks, channel-group tiles). */
#define CONV_FWD_ROWS 32
#define CONV_AHEAD 4
#define CONV_BWD_THREADS 64 /* most threads a block, forward and backward */

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

/* Blocks of CONV_BWD_THREADS a multiprocessor is held to: with bf16 at most 128 registers a thread,
 * so 8 blocks (16 warps) keep 8 x 64 x CONV_AHEAD rows of loads in flight. fp32 is left unbounded. */
template <typename T> struct conv_min_blocks { static constexpr int value = sizeof(T) == 2 ? 8 : 1; };

/* VW elements of T as loaded, not yet converted: 8, 16 or 32 bytes in 8-byte pieces. */
template <typename T, int VW>
struct conv_raw {
    static constexpr int N = (int)sizeof(T) * VW / 8;
    uint2 u[N];
};

/* r = p[i .. i+VW-1] (i a multiple of VW, p 16-byte aligned), or zeros when !valid. */
template <typename T, int VW>
static __device__ __forceinline__ void conv_ldraw(conv_raw<T, VW> &r, const T *p, size_t i, bool valid) {
    constexpr int N = conv_raw<T, VW>::N;
    if constexpr (N == 1) {
        r.u[0] = valid ? *(const uint2 *)(p + i) : make_uint2(0u, 0u);
    } else {
#pragma unroll
        for (int q = 0; q < N / 2; q++) {
            const uint4 a = valid ? ((const uint4 *)(p + i))[q] : make_uint4(0u, 0u, 0u, 0u);
            r.u[2 * q] = make_uint2(a.x, a.y);
            r.u[2 * q + 1] = make_uint2(a.z, a.w);
        }
    }
}

/* o = r as floats (bf16 -> fp32 is exact: the bf16 bits are the float's upper half). */
template <int VW>
static __device__ __forceinline__ void conv_cvt(float *o, const conv_raw<ops_bf16, VW> &r) {
#pragma unroll
    for (int q = 0; q < conv_raw<ops_bf16, VW>::N; q++) {
        o[4 * q] = __uint_as_float(r.u[q].x << 16);
        o[4 * q + 1] = __uint_as_float(r.u[q].x & 0xffff0000u);
        o[4 * q + 2] = __uint_as_float(r.u[q].y << 16);
        o[4 * q + 3] = __uint_as_float(r.u[q].y & 0xffff0000u);
    }
}
template <int VW>
static __device__ __forceinline__ void conv_cvt(float *o, const conv_raw<float, VW> &r) {
#pragma unroll
    for (int q = 0; q < conv_raw<float, VW>::N; q++) {
        o[2 * q] = __uint_as_float(r.u[q].x);
        o[2 * q + 1] = __uint_as_float(r.u[q].y);
    }
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

/* Calls f(b, ta, tb) for each sequence b that rows [r0, r1) touch: its rows ta .. tb, in order. */
template <typename F>
static __device__ __forceinline__ void conv_segments(int r0, int r1, int T_, F f) {
    for (int r = r0; r < r1;) {
        const int b = r / T_, ta = r - b * T_, tb = min(T_ - 1, ta + (r1 - r) - 1);
        f(b, ta, tb);
        r += tb - ta + 1;
    }
}

/* y = act(u) for rows ta .. tb of sequence b; xw[i]: input row t-3+i. */
template <typename T, bool SILU>
static __device__ __forceinline__ void conv_fwd_rows(T *y, const T *x, const float *wv, const T *halo, int b,
                                                     int ta, int tb, int T_, int C, int c) {
    constexpr int VW = 8, D = CONV_AHEAD;
    const size_t s0 = (size_t)b * T_; /* row of t = 0 */
    float xw[4][VW];
#pragma unroll
    for (int i = 0; i < 3; i++) conv_inv<VW>(xw[i], x, halo, b, ta - 3 + i, T_, C, c);
    conv_raw<T, VW> rx[D]; /* rx[(t - ta) % D]: x row t, loaded D rows ahead */
#pragma unroll
    for (int i = 0; i < D; i++) conv_ldraw(rx[i], x, (s0 + ta + i) * C + c, ta + i <= tb);
    for (int t0 = ta; t0 <= tb; t0 += D) {
#pragma unroll
        for (int i = 0; i < D; i++) {
            const int t = t0 + i;
            if (t > tb) break;
            conv_cvt(xw[3], rx[i]);
            if (t + D <= tb) conv_ldraw(rx[i], x, (s0 + t + D) * C + c, true);
            float u[VW];
            conv_uv<VW>(u, wv, xw);
            if constexpr (SILU)
#pragma unroll
                for (int k = 0; k < VW; k++) u[k] = ops_silu(u[k]);
            conv_stv<VW>(y, (s0 + t) * C + c, u);
#pragma unroll
            for (int j = 0; j < 3; j++)
#pragma unroll
                for (int k = 0; k < VW; k++) xw[j][k] = xw[j + 1][k];
        }
    }
}

template <typename T, bool SILU>
__global__ void __launch_bounds__(CONV_BWD_THREADS, conv_min_blocks<T>::value)
k_conv4_fwd8(T *y, const T *x, const float *w, const T *halo, int BT, int T_, int C) {
    const int c = (blockIdx.y * blockDim.x + threadIdx.x) * 8;
    if (c >= C) return;
    float wv[32];
    conv_tapsv<8>(wv, w, c);
    const int r0 = blockIdx.x * CONV_FWD_ROWS, r1 = min(r0 + CONV_FWD_ROWS, BT);
    conv_segments(r0, r1, T_, [&](int b, int ta, int tb) {
        conv_fwd_rows<T, SILU>(y, x, wv, halo, b, ta, tb, T_, C, c);
    });
}

/* The backward of rows ta .. tb of sequence b, lagged by 3 rows: step t forms du[t] (dy[t], times
 * silu'(u[t]) from input rows t-3 .. t with SiLU; zero past the sequence end), adds its dw terms
 * du[t] x[t-3+j] while t <= tb, and completes dx[t-3] = sum_j w[j] du[t-j] once t-3 >= ta. So
 * both windows hold 4 rows: xw[i] input row t-3+i, gw[i] du row t-3+i. The terms and their order
 * are those of the row-at-a-time form: the same dx and dw bits. */
template <typename T, bool SILU>
static __device__ __forceinline__ void conv_bwd_rows(T *dx, int ldx, float *acc, const T *dy, const T *x,
                                                     const float *wv, const T *halo, int b, int ta, int tb, int T_,
                                                     int C, int c) {
    constexpr int VW = 4, D = CONV_AHEAD;
    const size_t s0 = (size_t)b * T_; /* row of t = 0 */
    const int te = tb + 3;            /* the last step: du[tb+3] feeds dx[tb] */
    float xw[4][VW], gw[4][VW];
#pragma unroll
    for (int i = 0; i < 3; i++) conv_inv<VW>(xw[i], x, halo, b, ta - 3 + i, T_, C, c);
#pragma unroll
    for (int i = 0; i < 3; i++)
#pragma unroll
        for (int k = 0; k < VW; k++) gw[i][k] = 0.0f; /* rows before ta: feed no dx written here */
    conv_raw<T, VW> rx[D], rg[D]; /* slot (t - ta) % D: x and dy row t, loaded D rows ahead; zeros for t >= T */
#pragma unroll
    for (int i = 0; i < D; i++) {
        const size_t o = (s0 + ta + i) * C + c;
        conv_ldraw(rx[i], x, o, ta + i < T_);
        conv_ldraw(rg[i], dy, o, ta + i < T_);
    }
    for (int t0 = ta; t0 <= te; t0 += D) {
#pragma unroll
        for (int i = 0; i < D; i++) {
            const int t = t0 + i;
            if (t > te) break;
            conv_cvt(xw[3], rx[i]);
            conv_cvt(gw[3], rg[i]); /* dy[t], zero for t >= T */
            if (t + D <= te) {
                const size_t o = (s0 + t + D) * C + c;
                conv_ldraw(rx[i], x, o, t + D < T_);
                conv_ldraw(rg[i], dy, o, t + D < T_);
            }
            if constexpr (SILU) {
                if (t < T_) {
                    float u[VW];
                    conv_uv<VW>(u, wv, xw);
#pragma unroll
                    for (int k = 0; k < VW; k++) gw[3][k] *= ops_dsilu(u[k]);
                }
            }
            if (t <= tb)
#pragma unroll
                for (int k = 0; k < VW; k++)
#pragma unroll
                    for (int j = 0; j < 4; j++) acc[j * VW + k] += gw[3][k] * xw[j][k]; /* dw[j] += du[t] x[t-3+j] */
            if (t - 3 >= ta) {
                float d[VW];
#pragma unroll
                for (int k = 0; k < VW; k++) {
                    float a = 0.0f; /* dx[t-3] = sum_j w[j] du[t-j] */
                    a += wv[k * 4] * gw[3][k];
                    a += wv[k * 4 + 1] * gw[2][k];
                    a += wv[k * 4 + 2] * gw[1][k];
                    a += wv[k * 4 + 3] * gw[0][k];
                    d[k] = a;
                }
                conv_stv<VW>(dx, (s0 + t - 3) * ldx + c, d);
            }
#pragma unroll
            for (int j = 0; j < 3; j++)
#pragma unroll
                for (int k = 0; k < VW; k++) {
                    xw[j][k] = xw[j + 1][k];
                    gw[j][k] = gw[j + 1][k];
                }
        }
    }
}

/* Each thread walks its CONV_ROWS rows in order, summing its channels' dw taps in registers, then
 * stores them as the block's partial. grid (row blocks of CONV_ROWS, channel-group tiles). */
template <typename T, bool SILU>
__global__ void __launch_bounds__(CONV_BWD_THREADS, conv_min_blocks<T>::value)
k_conv4_bwdv(T *dx, int ldx, float *part, const T *dy, const T *x, const float *w, const T *halo, int BT, int T_,
             int C) {
    constexpr int VW = 4;
    const int c = (blockIdx.y * blockDim.x + threadIdx.x) * VW;
    if (c >= C) return;
    float wv[4 * VW], acc[4 * VW]; /* acc[j * VW + k]: tap j, channel c + k */
    conv_tapsv<VW>(wv, w, c);
#pragma unroll
    for (int k = 0; k < 4 * VW; k++) acc[k] = 0.0f;
    const int r0 = blockIdx.x * CONV_ROWS, r1 = min(r0 + CONV_ROWS, BT);
    conv_segments(r0, r1, T_, [&](int b, int ta, int tb) {
        conv_bwd_rows<T, SILU>(dx, ldx, acc, dy, x, wv, halo, b, ta, tb, T_, C, c);
    });
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
static void conv_fwd_launch(void *y, const void *x, const float *w, const void *halo, const int *doc, int B, int T,
                            int C, int W, cudaStream_t s) {
    const size_t n = (size_t)B * T * C;
    if (W == 4 && !doc && ops_vec8((size_t)C, y, x, w, halo)) {
        const int BT = B * T, groups = C / 8, threads = conv_threads(groups);
        dim3 grid((unsigned)((BT + CONV_FWD_ROWS - 1) / CONV_FWD_ROWS), (unsigned)((groups + threads - 1) / threads));
        k_conv4_fwd8<E, SILU><<<grid, threads, 0, s>>>((E *)y, (const E *)x, w, (const E *)halo, BT, T, C);
    } else {
        k_conv_fwd<E, SILU><<<ops_grid(n, 256), 256, 0, s>>>((E *)y, (const E *)x, w, (const E *)halo, doc, T, C, W, n);
    }
    GDN_CUDA_CHECK_LAUNCH();
}

template <typename E, bool SILU>
static void conv_bwd_launch(void *dx, int ldx, float *dw, void *dhalo, const void *dy, const void *x, const float *w,
                            const void *halo, const int *doc, int B, int T, int C, int W, float *part, cudaStream_t s) {
    const size_t nh = (size_t)B * (W - 1) * C;
    if (dhalo && nh) { /* also for T = 0: zeros */
        k_conv_dhalo<E, SILU><<<ops_grid(nh, 256), 256, 0, s>>>((E *)dhalo, (const E *)dy, (const E *)x, w,
                                                                (const E *)halo, doc, T, C, W, nh);
        GDN_CUDA_CHECK_LAUNCH();
    }
    const int BT = B * T;
    if (BT <= 0 || C <= 0) return;
    const int nblk = (BT + CONV_ROWS - 1) / CONV_ROWS;
    /* dx's rows start 16-byte aligned for the vector path */
    if (W == 4 && !doc && ldx % (16 / (int)sizeof(E)) == 0 && conv_vec(4, (size_t)C, dx, dy, x, w, part, halo)) {
        const int groups = C / 4, threads = conv_threads(groups);
        dim3 grid((unsigned)nblk, (unsigned)((groups + threads - 1) / threads));
        k_conv4_bwdv<E, SILU><<<grid, threads, 0, s>>>((E *)dx, ldx, part, (const E *)dy, (const E *)x, w,
                                                       (const E *)halo, BT, T, C);
    } else {
        dim3 grid((unsigned)nblk, (unsigned)((C + CONV_THREADS - 1) / CONV_THREADS));
        k_conv_bwd<E, SILU><<<grid, CONV_THREADS, 0, s>>>((E *)dx, ldx, part, (const E *)dy, (const E *)x, w,
                                                          (const E *)halo, doc, BT, T, C, W);
    }
    GDN_CUDA_CHECK_LAUNCH();
    k_conv_reduce<<<(C * W + 255) / 256, 256, 0, s>>>(dw, part, nblk, C, W);
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" void gdn_cuda_conv_fwd(gdn_cuda_precision p, gdn_cuda_conv_act act, void *y, const void *x,
                                  const float *w, const void *halo, const int *doc, int B, int T, int C, int W,
                                  void *stream) {
    conv_check(act, W);
    if ((size_t)B * T * C == 0) return;
    const bool silu = act == GDN_CUDA_CONV_SILU;
    OPS_DISPATCH(p, E,
                 if (silu) conv_fwd_launch<E, true>(y, x, w, halo, doc, B, T, C, W, OPS_STREAM(stream));
                 else conv_fwd_launch<E, false>(y, x, w, halo, doc, B, T, C, W, OPS_STREAM(stream)));
}

extern "C" void gdn_cuda_conv_bwd(gdn_cuda_precision p, gdn_cuda_conv_act act, void *dx, int ldx, float *dw,
                                  void *dhalo, const void *dy, const void *x, const float *w, const void *halo,
                                  const int *doc, int B, int T, int C, int W, void *ws, void *stream) {
    conv_check(act, W);
    if (ldx < C) GDN_CUDA_DIE("short convolution backward: dx's rows are %d apart, fewer than its %d channels", ldx, C);
    const bool silu = act == GDN_CUDA_CONV_SILU;
    float *part = (float *)ws;
    OPS_DISPATCH(p, E,
                 if (silu) conv_bwd_launch<E, true>(dx, ldx, dw, dhalo, dy, x, w, halo, doc, B, T, C, W, part,
                                                    OPS_STREAM(stream));
                 else conv_bwd_launch<E, false>(dx, ldx, dw, dhalo, dy, x, w, halo, doc, B, T, C, W, part,
                                                OPS_STREAM(stream)));
}
