/* Depthwise causal short convolution (width W <= CONV_MAX_W, no bias), zeros before t = 0.
 *
 * Backward: a block owns CONV_ROWS consecutive rows (b, t) and CONV_THREADS channels; each
 * thread walks its rows in order, writing dx and summing its channel's dw taps in registers,
 * then stores them as the block's partial. Partials are added in block order, so dw is the same
 * on every run. */
#include "model/cuda/ops_util.cuh"

#define CONV_MAX_W 8
#define CONV_ROWS 128
#define CONV_THREADS 128

static void conv_check(int W) {
    if (W < 1 || W > CONV_MAX_W)
        GDN_CUDA_DIE("short convolution: width %d is not supported (1..%d)", W, CONV_MAX_W);
}

extern "C" size_t gdn_cuda_conv_workspace(int B, int T, int C, int W) {
    const size_t nblk = ((size_t)B * T + CONV_ROWS - 1) / CONV_ROWS;
    return nblk * (size_t)W * (size_t)C * sizeof(float);
}

/* y[b,t,c] = sum_j w[c,j] x[b, t-(W-1)+j, c]. */
template <typename T>
__global__ void k_conv_fwd(T *y, const T *x, const float *w, int T_, int C, int W, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % C);
        const size_t bt = i / C;
        const int t = (int)(bt % T_);
        float acc = 0.0f;
        for (int j = 0; j < W; j++) {
            const int ti = t - (W - 1) + j;
            if (ti >= 0) acc += w[(size_t)c * W + j] * ops_ld(x, i - (size_t)(W - 1 - j) * C);
        }
        ops_st(y, i, acc);
    }
}

/* dx[t] = sum_j w[j] dy[t+(W-1)-j] (t+(W-1)-j < T);  dw[j] += sum_t dy[t] x[t-(W-1)+j].
 * grid (row blocks, channel tiles) */
template <typename T>
__global__ void k_conv_bwd(T *dx, float *part, const T *dy, const T *x, const float *w, int BT, int T_,
                           int C, int W) {
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float wc[CONV_MAX_W], acc[CONV_MAX_W];
#pragma unroll
    for (int j = 0; j < CONV_MAX_W; j++) {
        wc[j] = j < W ? w[(size_t)c * W + j] : 0.0f;
        acc[j] = 0.0f;
    }
    const int r0 = blockIdx.x * CONV_ROWS, r1 = min(r0 + CONV_ROWS, BT);
    for (int bt = r0; bt < r1; bt++) {
        const int t = bt % T_;
        const size_t i = (size_t)bt * C + c;
        const float g = ops_ld(dy, i);
        float d = 0.0f;
#pragma unroll
        for (int j = 0; j < CONV_MAX_W; j++) {
            if (j >= W) break;
            const int to = t + (W - 1) - j; /* output time that reads x[t] through tap j */
            if (to < T_) d += wc[j] * ops_ld(dy, i + (size_t)(W - 1 - j) * C);
            const int ti = t - (W - 1) + j; /* input time tap j of output t reads */
            if (ti >= 0) acc[j] += g * ops_ld(x, i - (size_t)(W - 1 - j) * C);
        }
        ops_st(dx, i, d);
    }
    float *pb = part + (size_t)blockIdx.x * W * C;
#pragma unroll
    for (int j = 0; j < CONV_MAX_W; j++)
        if (j < W) pb[(size_t)j * C + c] = acc[j];
}

/* The common case, 8-wide: W = 4 and C a multiple of 8 (16-byte accesses). A thread owns 8
 * channels over a block of rows, holds their taps in registers and slides a window of rows, so
 * each row is read once. grid (row blocks, channel-group tiles). */
#define CONV_FWD_ROWS 32

template <typename T>
static __device__ __forceinline__ void conv_row8(float *v, const T *p, int row, int C, int c, bool valid) {
    if (valid) {
        ops_ldv<8>(p, (size_t)row * C + c, v);
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = 0.0f;
    }
}

static __device__ __forceinline__ void conv_taps8(float *wv, const float *w, int c) {
#pragma unroll
    for (int q = 0; q < 4; q++) ops_ldv<8>(w, (size_t)c * 4 + 8 * q, wv + 8 * q); /* wv[k*4+j] = w[c+k, j] */
}

template <typename T>
__global__ void k_conv4_fwd8(T *y, const T *x, const float *w, int BT, int T_, int C) {
    const int c = (blockIdx.y * blockDim.x + threadIdx.x) * 8;
    if (c >= C) return;
    float wv[32], x0[8], x1[8], x2[8]; /* x0, x1, x2: rows t-3, t-2, t-1 */
    conv_taps8(wv, w, c);
    const int r0 = blockIdx.x * CONV_FWD_ROWS, r1 = min(r0 + CONV_FWD_ROWS, BT), t0 = r0 % T_;
    conv_row8(x0, x, r0 - 3, C, c, t0 >= 3);
    conv_row8(x1, x, r0 - 2, C, c, t0 >= 2);
    conv_row8(x2, x, r0 - 1, C, c, t0 >= 1);
    for (int bt = r0, t = t0; bt < r1; bt++, t = t + 1 == T_ ? 0 : t + 1) {
        if (t == 0) /* a new sequence: nothing before it */
#pragma unroll
            for (int k = 0; k < 8; k++) x0[k] = x1[k] = x2[k] = 0.0f;
        float xc[8], acc[8];
        ops_ldv<8>(x, (size_t)bt * C + c, xc);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float a = 0.0f;
            a += wv[k * 4] * x0[k];
            a += wv[k * 4 + 1] * x1[k];
            a += wv[k * 4 + 2] * x2[k];
            a += wv[k * 4 + 3] * xc[k];
            acc[k] = a;
            x0[k] = x1[k];
            x1[k] = x2[k];
            x2[k] = xc[k];
        }
        ops_stv<8>(y, (size_t)bt * C + c, acc);
    }
}

/* Backward with two windows: dy rows t .. t+3 (zero past the sequence end) and x rows t-3 .. t
 * (zero before its start). grid (row blocks of CONV_ROWS, channel-group tiles). */
template <typename T>
__global__ void k_conv4_bwd8(T *dx, float *part, const T *dy, const T *x, const float *w, int BT, int T_, int C) {
    const int c = (blockIdx.y * blockDim.x + threadIdx.x) * 8;
    if (c >= C) return;
    float wv[32], acc[32]; /* acc[j * 8 + k]: tap j, channel c + k */
    conv_taps8(wv, w, c);
#pragma unroll
    for (int k = 0; k < 32; k++) acc[k] = 0.0f;
    float g0[8], g1[8], g2[8], g3[8]; /* dy rows t, t+1, t+2, t+3 */
    float x0[8], x1[8], x2[8], x3[8]; /* x rows t-3, t-2, t-1, t */
    const int r0 = blockIdx.x * CONV_ROWS, r1 = min(r0 + CONV_ROWS, BT), t0 = r0 % T_;
    conv_row8(x0, x, r0 - 3, C, c, t0 >= 3);
    conv_row8(x1, x, r0 - 2, C, c, t0 >= 2);
    conv_row8(x2, x, r0 - 1, C, c, t0 >= 1);
    for (int bt = r0, t = t0; bt < r1; bt++, t = t + 1 == T_ ? 0 : t + 1) {
        if (bt == r0 || t == 0) { /* (re)fill the dy window inside this sequence */
            conv_row8(g0, dy, bt, C, c, true);
            conv_row8(g1, dy, bt + 1, C, c, t + 1 < T_);
            conv_row8(g2, dy, bt + 2, C, c, t + 2 < T_);
            conv_row8(g3, dy, bt + 3, C, c, t + 3 < T_);
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) {
                g0[k] = g1[k];
                g1[k] = g2[k];
                g2[k] = g3[k];
            }
            conv_row8(g3, dy, bt + 3, C, c, t + 3 < T_);
        }
        if (t == 0)
#pragma unroll
            for (int k = 0; k < 8; k++) x0[k] = x1[k] = x2[k] = 0.0f;
        ops_ldv<8>(x, (size_t)bt * C + c, x3);
        float d[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float a = 0.0f; /* dx[t] = sum_j w[j] dy[t+3-j] */
            a += wv[k * 4] * g3[k];
            a += wv[k * 4 + 1] * g2[k];
            a += wv[k * 4 + 2] * g1[k];
            a += wv[k * 4 + 3] * g0[k];
            d[k] = a;
            acc[k] += g0[k] * x0[k]; /* dw[j] += dy[t] x[t-3+j] */
            acc[8 + k] += g0[k] * x1[k];
            acc[16 + k] += g0[k] * x2[k];
            acc[24 + k] += g0[k] * x3[k];
            x0[k] = x1[k];
            x1[k] = x2[k];
            x2[k] = x3[k];
        }
        ops_stv<8>(dx, (size_t)bt * C + c, d);
    }
    float *pb = part + (size_t)blockIdx.x * 4 * C;
#pragma unroll
    for (int j = 0; j < 4; j++) ops_stv<8>(pb, (size_t)j * C + c, acc + j * 8);
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

extern "C" void gdn_cuda_conv_fwd(gdn_cuda_precision p, gdn_cuda_conv_act act, void *y, const void *x,
                                  const float *w, const void *halo, int B, int T, int C, int W, void *stream) {
    conv_check(W);
    if (act != GDN_CUDA_CONV_LINEAR || halo) GDN_CUDA_DIE("short convolution: SiLU and halo are not implemented yet");
    const size_t n = (size_t)B * T * C;
    if (!n) return;
    if (W == 4 && ops_vec8((size_t)C, y, x, w)) {
        const int BT = B * T, groups = C / 8, threads = groups < 64 ? ((groups + 31) / 32) * 32 : 64;
        dim3 grid((unsigned)((BT + CONV_FWD_ROWS - 1) / CONV_FWD_ROWS), (unsigned)((groups + threads - 1) / threads));
        OPS_DISPATCH(p, E, k_conv4_fwd8<E><<<grid, threads, 0, OPS_STREAM(stream)>>>((E *)y, (const E *)x, w, BT, T, C));
    } else {
        OPS_DISPATCH(p, E, k_conv_fwd<E><<<ops_grid(n, 256), 256, 0, OPS_STREAM(stream)>>>((E *)y, (const E *)x, w, T, C, W, n));
    }
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" void gdn_cuda_conv_bwd(gdn_cuda_precision p, gdn_cuda_conv_act act, void *dx, float *dw, void *dhalo,
                                  const void *dy, const void *x, const float *w, const void *halo, int B, int T,
                                  int C, int W, void *ws, void *stream) {
    conv_check(W);
    if (act != GDN_CUDA_CONV_LINEAR || halo || dhalo)
        GDN_CUDA_DIE("short convolution: SiLU and halo are not implemented yet");
    const int BT = B * T;
    if (BT <= 0 || C <= 0) return;
    const int nblk = (BT + CONV_ROWS - 1) / CONV_ROWS;
    float *part = (float *)ws;
    if (W == 4 && ops_vec8((size_t)C, dx, dy, x, w, part)) {
        const int groups = C / 8, threads = groups < 64 ? ((groups + 31) / 32) * 32 : 64;
        dim3 grid((unsigned)nblk, (unsigned)((groups + threads - 1) / threads));
        OPS_DISPATCH(p, E, k_conv4_bwd8<E><<<grid, threads, 0, OPS_STREAM(stream)>>>(
                               (E *)dx, part, (const E *)dy, (const E *)x, w, BT, T, C));
    } else {
        dim3 grid((unsigned)nblk, (unsigned)((C + CONV_THREADS - 1) / CONV_THREADS));
        OPS_DISPATCH(p, E, k_conv_bwd<E><<<grid, CONV_THREADS, 0, OPS_STREAM(stream)>>>(
                               (E *)dx, part, (const E *)dy, (const E *)x, w, BT, T, C, W));
    }
    GDN_CUDA_CHECK_LAUNCH();
    k_conv_reduce<<<(C * W + 255) / 256, 256, 0, OPS_STREAM(stream)>>>(dw, part, nblk, C, W);
    GDN_CUDA_CHECK_LAUNCH();
}
