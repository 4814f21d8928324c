/* Element conversion between fp32 and the act type, fills, and the fixed-order reduction of
 * per-block partial sums that the parameter-gradient kernels share. */
#include "model/cuda/ops_util.cuh"

template <typename T>
__global__ void k_to_act(T *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        ops_st(dst, i, src[i]);
}

template <typename T>
__global__ void k_from_act(float *dst, const T *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = ops_ld(src, i);
}

__global__ void k_fill_f32(float *dst, float value, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = value;
}

template <typename T>
__global__ void k_add_strided(T *dst, size_t dst_stride, size_t ldd, const T *src, size_t C, size_t rows,
                              size_t total) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t br = i / C, c = i - br * C, b = br / rows, r = br - b * rows, d = b * dst_stride + r * ldd + c;
        ops_st(dst, d, ops_ld(dst, d) + ops_ld(src, i));
    }
}

/* One thread per column: consecutive threads read consecutive columns of each block's row. */
__global__ void k_reduce_partials(float *dw, const float *part, int nblk, int D) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= D) return;
    double s = 0.0;
    for (int b = 0; b < nblk; b++) s += part[(size_t)b * D + j];
    dw[j] += (float)s;
}

void ops_reduce_partials(float *dw, const float *part, int nblk, int D, cudaStream_t s) {
    if (D <= 0) return;
    k_reduce_partials<<<(D + 255) / 256, 256, 0, s>>>(dw, part, nblk, D);
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" size_t gdn_cuda_act_bytes(gdn_cuda_precision p) {
    return p == GDN_CUDA_BF16 ? sizeof(ops_bf16) : sizeof(float);
}

extern "C" void gdn_cuda_to_act(gdn_cuda_precision p, void *dst, const float *src, size_t n, void *stream) {
    if (!n) return;
    OPS_DISPATCH(p, T, k_to_act<T><<<ops_grid(n, 256), 256, 0, OPS_STREAM(stream)>>>((T *)dst, src, n));
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" void gdn_cuda_from_act(gdn_cuda_precision p, float *dst, const void *src, size_t n, void *stream) {
    if (!n) return;
    OPS_DISPATCH(p, T, k_from_act<T><<<ops_grid(n, 256), 256, 0, OPS_STREAM(stream)>>>(dst, (const T *)src, n));
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" void gdn_cuda_fill_f32(float *dst, float value, size_t n, void *stream) {
    if (!n) return;
    k_fill_f32<<<ops_grid(n, 256), 256, 0, OPS_STREAM(stream)>>>(dst, value, n);
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" void gdn_cuda_add_strided(gdn_cuda_precision p, void *dst, size_t dst_stride, size_t ldd, const void *src,
                                     size_t C, size_t rows, int B, void *stream) {
    const size_t total = C * rows * (size_t)(B > 0 ? B : 0);
    if (!total) return;
    if (ldd < C) GDN_CUDA_DIE("gdn_cuda_add_strided: rows %zu apart, fewer than their %zu elements", ldd, C);
    OPS_DISPATCH(p, T, k_add_strided<T><<<ops_grid(total, 256), 256, 0, OPS_STREAM(stream)>>>(
                           (T *)dst, dst_stride, ldd, (const T *)src, C, rows, total));
    GDN_CUDA_CHECK_LAUNCH();
}
