/* Fused softmax + cross-entropy: one block per row finds the row max, the sum of exponentials
 * and writes the gradient in the same launch (the row stays in L1/L2 between the passes). Row
 * losses go to a buffer and are summed by one block in a fixed order. */
#include "model/cuda/ops_util.cuh"

#define CE_THREADS 512
#define CE_SUM_THREADS 1024

extern "C" size_t gdn_cuda_cross_entropy_workspace(int N) { return (size_t)(N > 0 ? N : 1) * sizeof(double); }

/* loss = m + log sum_i e^(l_i - m) - l_t with m the row max; d = e^(l_i - m) / sum * scale
 * minus scale at the target. */
template <typename T>
__global__ void k_cross_entropy(T *dlogits, const T *logits, const int *targets, int V, float grad_scale,
                                double *row_loss) {
    __shared__ float red[32];
    const size_t n = blockIdx.x;
    const int tgt = targets[n];
    const T *l = logits + n * V;
    T *d = dlogits ? dlogits + n * V : NULL;
    if (tgt < 0) {
        if (d)
            for (int i = threadIdx.x; i < V; i += blockDim.x) ops_st(d, i, 0.0f);
        if (threadIdx.x == 0) row_loss[n] = 0.0;
        return;
    }
    const float lt = ops_ld(l, tgt); /* read before d (which may be l) is written */
    float m = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, ops_ld(l, i));
    m = ops_block_max(m, red);
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(ops_ld(l, i) - m);
    s = ops_block_sum(s, red);
    if (threadIdx.x == 0) row_loss[n] = (double)m + log((double)s) - (double)lt;
    if (!d) return;
    const float scale = grad_scale / s;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float e = expf(ops_ld(l, i) - m) * scale;
        if (i == tgt) e -= grad_scale;
        ops_st(d, i, e);
    }
}

/* One block: thread t adds rows t, t + blockDim, ... in order; then a fixed tree. */
__global__ void k_loss_sum(double *loss_sum, int *n_valid, const double *row_loss, const int *targets, int N) {
    __shared__ double red[32];
    double s = 0.0, c = 0.0;
    for (int n = threadIdx.x; n < N; n += blockDim.x) {
        s += row_loss[n];
        c += targets[n] >= 0 ? 1.0 : 0.0;
    }
    s = ops_block_sum_d(s, red);
    c = ops_block_sum_d(c, red);
    if (threadIdx.x == 0) {
        *loss_sum = s;
        *n_valid = (int)c;
    }
}

extern "C" void gdn_cuda_cross_entropy(gdn_cuda_precision p, void *dlogits, const void *logits, const int *targets,
                                       int N, int V, float grad_scale, double *loss_sum, int *n_valid, void *ws,
                                       void *stream) {
    double *row_loss = (double *)ws;
    if (N > 0 && V > 0) {
        OPS_DISPATCH(p, T, k_cross_entropy<T><<<N, CE_THREADS, 0, OPS_STREAM(stream)>>>(
                               (T *)dlogits, (const T *)logits, targets, V, grad_scale, row_loss));
        GDN_CUDA_CHECK_LAUNCH();
    }
    k_loss_sum<<<1, CE_SUM_THREADS, 0, OPS_STREAM(stream)>>>(loss_sum, n_valid, row_loss, targets, N > 0 ? N : 0);
    GDN_CUDA_CHECK_LAUNCH();
}
