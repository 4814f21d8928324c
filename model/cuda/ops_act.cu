/* Elementwise activations (SwiGLU; SiLU is fused into the convolution, ops_conv.cu) and the
 * per-head gates of the GDN mixer (decay gate, write strength). The decay gate's parameter
 * gradients are sums over tokens: per-block partials in double, added in block order. */
#include "model/cuda/ops_util.cuh"

#define ACT_THREADS 256
#define GATE_ROWS 256 /* token rows per partial of the decay-gate parameter gradients */

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* Elementwise kernels take VW = 8 (16-byte accesses, n a multiple of 8) or VW = 1. */
template <typename T, int VW>
__global__ void k_swiglu_fwd(T *h, const T *a, const T *b, size_t n) {
    GRID_STRIDE(k, n / VW) {
        float x[VW], y[VW];
        ops_ldv<VW>(a, k * VW, x);
        ops_ldv<VW>(b, k * VW, y);
#pragma unroll
        for (int e = 0; e < VW; e++) x[e] = ops_silu(x[e]) * y[e];
        ops_stv<VW>(h, k * VW, x);
    }
}

/* da, db [rows, F] with rows ldd apart; dh, a, b contiguous (F a multiple of VW). */
template <typename T, int VW>
__global__ void k_swiglu_bwd(T *da, T *db, size_t ldd, const T *dh, const T *a, const T *b, size_t F, size_t n) {
    GRID_STRIDE(k, n / VW) {
        const size_t r = k * VW / F, o = r * ldd + (k * VW - r * F);
        float g[VW], x[VW], y[VW], ra[VW], rb[VW];
        ops_ldv<VW>(dh, k * VW, g);
        ops_ldv<VW>(a, k * VW, x);
        ops_ldv<VW>(b, k * VW, y);
#pragma unroll
        for (int e = 0; e < VW; e++) {
            const float s = ops_sigmoid(x[e]);
            ra[e] = g[e] * y[e] * s * (1.0f + x[e] * (1.0f - s));
            rb[e] = g[e] * x[e] * s;
        }
        ops_stv<VW>(da, o, ra);
        ops_stv<VW>(db, o, rb);
    }
}

__global__ void k_decay_gate_fwd(float *g, const float *a, const float *A_log, const float *dt_bias, int H,
                                 size_t n) {
    GRID_STRIDE(i, n) {
        const int h = (int)(i % H);
        g[i] = -expf(A_log[h]) * ops_softplus(a[i] + dt_bias[h]);
    }
}

/* g = -e^A softplus(a + dt):  da = -dg e^A sigmoid(a + dt),  dA += dg g,  ddt += da.
 * grid: row blocks; thread h < H of a block walks the block's rows in order.
 * part: [nblk][2][H] (dA, ddt). */
template <typename T>
__global__ void k_decay_gate_bwd(T *da, int ldd, double *part, const float *dg, const float *a, const float *A_log,
                                 const float *dt_bias, int N, int H) {
    const int n0 = blockIdx.x * GATE_ROWS, n1 = min(n0 + GATE_ROWS, N);
    for (int h = threadIdx.x; h < H; h += blockDim.x) {
        const float eA = expf(A_log[h]), dt = dt_bias[h];
        double sA = 0.0, sdt = 0.0;
        for (int n = n0; n < n1; n++) {
            const size_t i = (size_t)n * H + h;
            const float x = a[i] + dt, d = -dg[i] * eA * ops_sigmoid(x);
            sA -= (double)(dg[i] * eA * ops_softplus(x));
            sdt += (double)d;
            ops_st(da, (size_t)n * ldd + h, d);
        }
        part[((size_t)blockIdx.x * 2) * H + h] = sA;
        part[((size_t)blockIdx.x * 2 + 1) * H + h] = sdt;
    }
}

__global__ void k_decay_gate_reduce(float *dA_log, float *ddt_bias, const double *part, int nblk, int H) {
    const int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= H) return;
    double sA = 0.0, sdt = 0.0;
    for (int b = 0; b < nblk; b++) {
        sA += part[((size_t)b * 2) * H + h];
        sdt += part[((size_t)b * 2 + 1) * H + h];
    }
    dA_log[h] += (float)sA;
    ddt_bias[h] += (float)sdt;
}

__global__ void k_beta_fwd(float *beta, const float *b, float scale, size_t n) {
    GRID_STRIDE(i, n) beta[i] = scale * ops_sigmoid(b[i]);
}

/* dbeta/db = scale s (1 - s) = beta (1 - beta / scale); db[n, h] at n * ldd + h. */
template <typename T>
__global__ void k_beta_bwd(T *db, int ldd, const float *dbeta, const float *beta, float scale, int H, size_t n) {
    GRID_STRIDE(i, n) {
        const size_t r = i / H;
        ops_st(db, r * ldd + (i - r * H), dbeta[i] * beta[i] * (1.0f - beta[i] / scale));
    }
}

#define ACT_LAUNCH(n) <<<ops_grid((n), ACT_THREADS), ACT_THREADS, 0, OPS_STREAM(stream)>>>
/* Launches kernel<T, 8> on n/8 vectors when every pointer allows it, else kernel<T, 1>. */
#define ACT_VEC_LAUNCH(kernel, T, vec, n, ...)                                   \
    do {                                                                          \
        if (vec) kernel<T, 8> ACT_LAUNCH((n) / 8)(__VA_ARGS__);                  \
        else kernel<T, 1> ACT_LAUNCH(n)(__VA_ARGS__);                             \
    } while (0)

extern "C" void gdn_cuda_swiglu_fwd(gdn_cuda_precision p, void *h, const void *a, const void *b, size_t n,
                                    void *stream) {
    if (!n) return;
    const int vec = ops_vec8(n, h, a, b);
    OPS_DISPATCH(p, T, ACT_VEC_LAUNCH(k_swiglu_fwd, T, vec, n, (T *)h, (const T *)a, (const T *)b, n));
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" void gdn_cuda_swiglu_bwd(gdn_cuda_precision p, void *da, void *db, int ldd, const void *dh, const void *a,
                                    const void *b, int rows, int F, void *stream) {
    const size_t n = (size_t)(rows > 0 ? rows : 0) * (F > 0 ? F : 0);
    if (!n) return;
    if (ldd < F) GDN_CUDA_DIE("SwiGLU backward: da's and db's rows are %d apart, fewer than their %d columns", ldd, F);
    const int vec = ops_vec8((size_t)F, da, db, dh, a, b) && ldd % 8 == 0;
    OPS_DISPATCH(p, T, ACT_VEC_LAUNCH(k_swiglu_bwd, T, vec, n, (T *)da, (T *)db, (size_t)ldd, (const T *)dh,
                                      (const T *)a, (const T *)b, (size_t)F, n));
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" void gdn_cuda_decay_gate_fwd(float *g, const float *a, const float *A_log, const float *dt_bias,
                                        int N, int H, void *stream) {
    const size_t n = (size_t)N * H;
    if (!n) return;
    k_decay_gate_fwd ACT_LAUNCH(n)(g, a, A_log, dt_bias, H, n);
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" size_t gdn_cuda_decay_gate_workspace(int N, int H) {
    return (size_t)((N + GATE_ROWS - 1) / GATE_ROWS) * 2 * (size_t)H * sizeof(double);
}

extern "C" void gdn_cuda_decay_gate_bwd(gdn_cuda_precision p, void *da, int ldd, float *dA_log, float *ddt_bias,
                                        const float *dg, const float *a, const float *A_log,
                                        const float *dt_bias, int N, int H, void *ws, void *stream) {
    if (N <= 0 || H <= 0) return;
    if (ldd < H) GDN_CUDA_DIE("decay gate backward: da's rows are %d apart, fewer than its %d heads", ldd, H);
    const int nblk = (N + GATE_ROWS - 1) / GATE_ROWS, threads = H < 128 ? ((H + 31) / 32) * 32 : 128;
    double *part = (double *)ws;
    OPS_DISPATCH(p, T, k_decay_gate_bwd<T><<<nblk, threads, 0, OPS_STREAM(stream)>>>(
                           (T *)da, ldd, part, dg, a, A_log, dt_bias, N, H));
    GDN_CUDA_CHECK_LAUNCH();
    k_decay_gate_reduce<<<(H + 127) / 128, 128, 0, OPS_STREAM(stream)>>>(dA_log, ddt_bias, part, nblk, H);
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" void gdn_cuda_beta_fwd(float *beta, const float *b, float scale, size_t n, void *stream) {
    if (!n) return;
    k_beta_fwd ACT_LAUNCH(n)(beta, b, scale, n);
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" void gdn_cuda_beta_bwd(gdn_cuda_precision p, void *db, int ldd, const float *dbeta, const float *beta,
                                  float scale, int N, int H, void *stream) {
    const size_t n = (size_t)(N > 0 ? N : 0) * (H > 0 ? H : 0);
    if (!n) return;
    if (scale == 0.0f) GDN_CUDA_DIE("beta backward: scale must not be 0");
    if (ldd < H) GDN_CUDA_DIE("beta backward: db's rows are %d apart, fewer than its %d heads", ldd, H);
    OPS_DISPATCH(p, T, k_beta_bwd<T> ACT_LAUNCH(n)((T *)db, ldd, dbeta, beta, scale, H, n));
    GDN_CUDA_CHECK_LAUNCH();
}
