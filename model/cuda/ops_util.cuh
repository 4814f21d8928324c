/* Device helpers shared by the ops_*.cu files: typed loads and stores (fp32 arithmetic on float
 * or bf16 storage), overflow-free sigmoid / SiLU / softplus, deterministic warp and block sums,
 * the precision dispatch and launch-size helpers. */
#ifndef GDN_OPS_UTIL_CUH
#define GDN_OPS_UTIL_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>

#include "model/cuda/cuda_check.h"
#include "model/cuda/ops_cuda.h"

typedef __nv_bfloat16 ops_bf16;

#define OPS_STREAM(s) ((cudaStream_t)(s))

/* Runs the statements with T the act type of precision p (float or bf16). */
#define OPS_DISPATCH(p, T, ...)                   \
    do {                                          \
        if ((p) == GDN_CUDA_BF16) {               \
            typedef ops_bf16 T;                   \
            __VA_ARGS__;                          \
        } else {                                  \
            typedef float T;                      \
            __VA_ARGS__;                          \
        }                                         \
    } while (0)

static __device__ __forceinline__ float ops_ld(const float *p, size_t i) { return p[i]; }
static __device__ __forceinline__ float ops_ld(const ops_bf16 *p, size_t i) { return __bfloat162float(p[i]); }
static __device__ __forceinline__ void ops_st(float *p, size_t i, float x) { p[i] = x; }
static __device__ __forceinline__ void ops_st(ops_bf16 *p, size_t i, float x) { p[i] = __float2bfloat16_rn(x); }

/* VW consecutive elements (VW = 1, or 8 with i a multiple of 8 and p 16-byte aligned: one or two
 * 16-byte accesses), as floats. */
template <int VW>
static __device__ __forceinline__ void ops_ldv(const float *p, size_t i, float *o) {
    if constexpr (VW == 8) {
        const float4 a = *(const float4 *)(p + i), b = *(const float4 *)(p + i + 4);
        o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w; o[4] = b.x; o[5] = b.y; o[6] = b.z; o[7] = b.w;
    } else {
        o[0] = p[i];
    }
}
template <int VW>
static __device__ __forceinline__ void ops_ldv(const ops_bf16 *p, size_t i, float *o) {
    if constexpr (VW == 8) {
        const uint4 u = *(const uint4 *)(p + i);
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float2 f = __bfloat1622float2(h[k]);
            o[2 * k] = f.x;
            o[2 * k + 1] = f.y;
        }
    } else {
        o[0] = __bfloat162float(p[i]);
    }
}
template <int VW>
static __device__ __forceinline__ void ops_stv(float *p, size_t i, const float *v) {
    if constexpr (VW == 8) {
        *(float4 *)(p + i) = make_float4(v[0], v[1], v[2], v[3]);
        *(float4 *)(p + i + 4) = make_float4(v[4], v[5], v[6], v[7]);
    } else {
        p[i] = v[0];
    }
}
template <int VW>
static __device__ __forceinline__ void ops_stv(ops_bf16 *p, size_t i, const float *v) {
    if constexpr (VW == 8) {
        uint4 u;
        __nv_bfloat162 *h = (__nv_bfloat162 *)&u;
#pragma unroll
        for (int k = 0; k < 4; k++) h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
        *(uint4 *)(p + i) = u;
    } else {
        p[i] = __float2bfloat16_rn(v[0]);
    }
}

/* Whether 8-wide accesses suit n elements at these pointers (NULL pointers are ignored). */
static inline int ops_vec8(size_t n, const void *a, const void *b = NULL, const void *c = NULL,
                           const void *d = NULL, const void *e = NULL) {
    const void *p[5] = {a, b, c, d, e};
    if (n % 8) return 0;
    for (int i = 0; i < 5; i++)
        if (((size_t)p[i]) & 15) return 0;
    return 1;
}

/* exp of a non-positive argument never overflows, and no 1 - sigmoid cancels for x << 0. */
static __device__ __forceinline__ float ops_sigmoid(float x) {
    float e = expf(x >= 0.0f ? -x : x);
    return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}
static __device__ __forceinline__ float ops_silu(float x) { return x * ops_sigmoid(x); }
/* silu'(x) = s (1 + x (1 - s)). */
static __device__ __forceinline__ float ops_dsilu(float x) {
    float s = ops_sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}
/* softplus(x) = max(x, 0) + log1p(e^-|x|). */
static __device__ __forceinline__ float ops_softplus(float x) {
    return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
}

/* Butterfly sums: every lane ends with the same value, added in the same order every run. */
static __device__ __forceinline__ float ops_warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
static __device__ __forceinline__ double ops_warp_sum_d(double x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
static __device__ __forceinline__ float ops_warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

/* Block-wide reductions for blockDim.x a multiple of 32 (<= 1024); `red` is __shared__ [32].
 * All threads get the result. Warp partials are combined in warp order. */

/* Warp w's reduced value x into red[w], visible to the whole block; returns the warp count. */
template <typename T> static __device__ __forceinline__ int ops_block_stage(T x, T *red) {
    __syncthreads(); /* red may still be read by a previous call */
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = x;
    __syncthreads();
    return blockDim.x >> 5;
}
static __device__ __forceinline__ float ops_block_sum(float x, float *red) {
    const int nw = ops_block_stage(ops_warp_sum(x), red);
    float s = 0.0f;
    for (int w = 0; w < nw; w++) s += red[w];
    return s;
}
static __device__ __forceinline__ double ops_block_sum_d(double x, double *red) {
    const int nw = ops_block_stage(ops_warp_sum_d(x), red);
    double s = 0.0;
    for (int w = 0; w < nw; w++) s += red[w];
    return s;
}
static __device__ __forceinline__ float ops_block_max(float x, float *red) {
    const int nw = ops_block_stage(ops_warp_max(x), red);
    float m = red[0];
    for (int w = 1; w < nw; w++) m = fmaxf(m, red[w]);
    return m;
}

/* Blocks for a grid-stride loop over n elements: enough to fill the device, no more. */
static inline unsigned ops_grid(size_t n, int threads) {
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    const size_t cap = 132 * 16; /* multiprocessors x resident blocks, generously */
    if (b > cap) b = cap;
    return b ? (unsigned)b : 1u;
}

/* dw[j] += sum over b < nblk of part[b, j], in block order (double), for j < D. */
void ops_reduce_partials(float *dw, const float *part, int nblk, int D, cudaStream_t s);

#endif
