/* The distillation losses on the GPU (docs/distillation.md "Training"), as model/cpu/loss_distill.c
 * and gdn_cpu_mixer_mse: the temperature-scaled KL to a teacher's distribution plus a weighted
 * next-token cross-entropy, fused with its gradient (one block per row, the row statistics in
 * fp32 from an fp32 max, the row sums in double added in a fixed order), and the teacher-forced
 * mixer's squared error. */
#include "model/cuda/ops_util.cuh"

#define KL_THREADS 512
#define KL_SUM_THREADS 1024

extern "C" size_t gdn_cuda_distill_loss_workspace(int N) { return (size_t)2 * (N > 0 ? N : 1) * sizeof(double); }

/* Row max and log-sum-exp of x / tau (x in act type T or float). */
template <typename T>
static __device__ void row_lse(const T *x, int V, float tau, float *red, float *mx, float *lse) {
    float m = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, ops_ld(x, i));
    m = ops_block_max(m, red);
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf((ops_ld(x, i) - m) / tau);
    s = ops_block_sum(s, red);
    *mx = m;
    *lse = logf(s);
}

/* Per valid row (target >= 0): KL = sum p_t (log p_t - log p_s) at temperature tau and CE of the
 * logits; d = grad_scale (tau (p_s - p_t) + ce_weight (softmax - onehot)); ignored rows: 0. */
template <typename T>
__global__ void k_distill_loss(T *dlogits, const T *logits, const float *teacher, const int *targets, int V,
                               float tau, float ce_weight, float grad_scale, double *row /* [2N] */, int N) {
    __shared__ float red[32];
    const size_t n = blockIdx.x;
    const int tgt = targets[n];
    const T *l = logits + n * V;
    const float *z = teacher + n * V;
    T *d = dlogits ? dlogits + n * V : NULL;
    if (tgt < 0) {
        if (d)
            for (int i = threadIdx.x; i < V; i += blockDim.x) ops_st(d, i, 0.0f);
        if (threadIdx.x == 0) row[n] = row[N + n] = 0.0;
        return;
    }
    float ms, lses, mt, lset, m1, lse1;
    row_lse(l, V, tau, red, &ms, &lses);
    row_lse(z, V, tau, red, &mt, &lset);
    row_lse(l, V, 1.0f, red, &m1, &lse1);
    const float lt = ops_ld(l, tgt); /* read before d (which may be l) is written */
    float kl = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        const float lpt = (z[i] - mt) / tau - lset, lps = (ops_ld(l, i) - ms) / tau - lses;
        kl += expf(lpt) * (lpt - lps);
    }
    kl = ops_block_sum(kl, red);
    if (threadIdx.x == 0) {
        row[n] = (double)kl;
        row[N + n] = (double)m1 + (double)lse1 - (double)lt;
    }
    if (!d) return;
    __syncthreads(); /* every thread has read the row before any writes its gradient */
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        const float li = ops_ld(l, i);
        const float ps = expf((li - ms) / tau - lses), pt = expf((z[i] - mt) / tau - lset);
        const float p1 = expf(li - m1 - lse1);
        ops_st(d, i, grad_scale * (tau * (ps - pt) + ce_weight * (p1 - (i == tgt ? 1.0f : 0.0f))));
    }
}

/* One block: the KL and CE sums and the valid count, rows added in a fixed order. */
__global__ void k_distill_sum(double *kl_sum, double *ce_sum, int *n_valid, const double *row, const int *targets,
                              int N) {
    __shared__ double red[32];
    double a = 0.0, b = 0.0, c = 0.0;
    for (int n = threadIdx.x; n < N; n += blockDim.x) {
        a += row[n];
        b += row[N + n];
        c += targets[n] >= 0 ? 1.0 : 0.0;
    }
    a = ops_block_sum_d(a, red);
    b = ops_block_sum_d(b, red);
    c = ops_block_sum_d(c, red);
    if (threadIdx.x == 0) {
        *kl_sum = a;
        *ce_sum = b;
        *n_valid = (int)c;
    }
}

extern "C" void gdn_cuda_distill_loss(gdn_cuda_precision p, void *dlogits, const void *logits, const float *teacher,
                                      const int *targets, int N, int V, float tau, float ce_weight, float grad_scale,
                                      double *kl_sum, double *ce_sum, int *n_valid, void *ws, void *stream) {
    double *row = (double *)ws;
    if (N > 0 && V > 0) {
        OPS_DISPATCH(p, T, k_distill_loss<T><<<N, KL_THREADS, 0, OPS_STREAM(stream)>>>(
                               (T *)dlogits, (const T *)logits, teacher, targets, V, tau, ce_weight, grad_scale, row, N));
        GDN_CUDA_CHECK_LAUNCH();
    }
    k_distill_sum<<<1, KL_SUM_THREADS, 0, OPS_STREAM(stream)>>>(kl_sum, ce_sum, n_valid, row, targets, N > 0 ? N : 0);
    GDN_CUDA_CHECK_LAUNCH();
}

/* e = (x_mid - x_in) - target, target[i] given or (target NULL) t_mid[i] - t_in[i], rounded to
 * fp32 as the host rounds it */
__global__ void k_mixer_error(float *e, const float *x_mid, const float *x_in, const float *target, const float *t_mid,
                              const float *t_in, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float tg = target ? target[i] : t_mid[i] - t_in[i];
        e[i] = (x_mid[i] - x_in[i]) - tg;
    }
}

extern "C" void gdn_cuda_mixer_error(float *e, const float *x_mid, const float *x_in, const float *target,
                                     const float *t_mid, const float *t_in, size_t n, void *stream) {
    if (!n) return;
    if (!target && (!t_mid || !t_in)) GDN_CUDA_DIE("gdn_cuda_mixer_error: give target or the teacher's t_mid and t_in");
    const unsigned blocks = (unsigned)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
    k_mixer_error<<<blocks, 256, 0, OPS_STREAM(stream)>>>(e, x_mid, x_in, target, t_mid, t_in, n);
    GDN_CUDA_CHECK_LAUNCH();
}
