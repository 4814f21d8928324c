/* AdamW over the flat parameter buffer (fp32 master weights and moments, plus the bf16 copy the
 * GEMMs read), the global gradient norm (double partials over fixed blocks, added in a fixed
 * order) and gradient scaling. */
#include <math.h>

#include "model/cuda/ops_util.cuh"

#define GN_CHUNK 16384 /* elements per partial of the gradient norm */
#define GN_THREADS 256
#define ADAM_THREADS 256

extern "C" size_t gdn_cuda_grad_norm_workspace(size_t n) {
    const size_t nb = (n + GN_CHUNK - 1) / GN_CHUNK;
    return (nb ? nb : 1) * sizeof(double);
}

__global__ void k_grad_norm_part(double *part, const float *g, size_t n) {
    __shared__ double red[32];
    const size_t lo = (size_t)blockIdx.x * GN_CHUNK, hi = lo + GN_CHUNK < n ? lo + GN_CHUNK : n;
    double s = 0.0;
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) s += (double)g[i] * g[i];
    s = ops_block_sum_d(s, red);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void k_grad_norm_final(double *out, const double *part, size_t nb, int root) {
    __shared__ double red[32];
    double s = 0.0;
    for (size_t b = threadIdx.x; b < nb; b += blockDim.x) s += part[b];
    s = ops_block_sum_d(s, red);
    if (threadIdx.x == 0) *out = root ? sqrt(s) : s;
}

/* *out = the sum of squares of g [n], or its root. */
static void grad_sumsq(double *out, const float *g, size_t n, void *ws, void *stream, int root) {
    const size_t nb = (n + GN_CHUNK - 1) / GN_CHUNK;
    double *part = (double *)ws;
    if (nb) {
        k_grad_norm_part<<<(unsigned)nb, GN_THREADS, 0, OPS_STREAM(stream)>>>(part, g, n);
        GDN_CUDA_CHECK_LAUNCH();
    }
    k_grad_norm_final<<<1, 1024, 0, OPS_STREAM(stream)>>>(out, part, nb, root);
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" void gdn_cuda_grad_norm(double *out, const float *g, size_t n, void *ws, void *stream) {
    grad_sumsq(out, g, n, ws, stream, 1);
}

extern "C" void gdn_cuda_grad_sumsq(double *out, const float *g, size_t n, void *ws, void *stream) {
    grad_sumsq(out, g, n, ws, stream, 0);
}

__global__ void k_grad_scale(float *g, size_t n, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        g[i] *= scale;
}

extern "C" void gdn_cuda_grad_scale(float *g, size_t n, float scale, void *stream) {
    if (!n) return;
    k_grad_scale<<<ops_grid(n, 256), 256, 0, OPS_STREAM(stream)>>>(g, n, scale);
    GDN_CUDA_CHECK_LAUNCH();
}

/* Scalars of one step, computed on the host exactly as train/optim.c does. */
typedef struct {
    float b1, b2, step_size, inv_sqrt_bc2, eps, decay;
    double clip;
} adam_consts;

/* Each thread's indices only grow, so its run index only moves forward. */
__global__ void k_adamw(float *w, const float *g, float *m, float *v, ops_bf16 *w_act, size_t n,
                        const uint64_t *run_end, const int *run_decay, const uint64_t *run_act, int n_runs,
                        adam_consts c, const double *gnorm) {
    float gscale = 1.0f;
    int clipping = 0;
    if (gnorm && c.clip > 0.0 && *gnorm > c.clip) {
        gscale = (float)(c.clip / *gnorm);
        clipping = 1;
    }
    int r = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        while (r < n_runs - 1 && i >= run_end[r]) r++;
        const float decay = run_decay[r] ? c.decay : 1.0f;
        const float gj = clipping ? g[i] * gscale : g[i];
        const float mm = c.b1 * m[i] + (1.0f - c.b1) * gj;
        const float vv = c.b2 * v[i] + (1.0f - c.b2) * gj * gj;
        const float denom = sqrtf(vv) * c.inv_sqrt_bc2 + c.eps;
        const float wj = w[i] * decay - c.step_size * mm / denom;
        m[i] = mm;
        v[i] = vv;
        w[i] = wj;
        if (w_act) w_act[run_act[r] + (i - (r ? run_end[r - 1] : 0))] = __float2bfloat16_rn(wj);
    }
}

extern "C" void gdn_cuda_adamw(float *params, const float *grads, float *m, float *v, void *p_act, size_t n,
                               const uint64_t *run_end, const int *run_decay, const uint64_t *run_act, int n_runs,
                               const gdn_adamw_hparams *h, int64_t step, const double *gnorm, double clip,
                               void *stream) {
    if (!n) return;
    if (step < 1) GDN_CUDA_DIE("AdamW: step must be >= 1 (1-based), got %lld", (long long)step);
    if (n_runs < 1) GDN_CUDA_DIE("AdamW: no runs given");
    if (p_act && !run_act) GDN_CUDA_DIE("AdamW: a bf16 copy needs run_act");
    const double bc1 = 1.0 - pow(h->beta1, (double)step), bc2 = 1.0 - pow(h->beta2, (double)step);
    adam_consts c;
    c.b1 = (float)h->beta1;
    c.b2 = (float)h->beta2;
    c.step_size = (float)(h->lr / bc1);
    c.inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    c.eps = (float)h->eps;
    c.decay = (float)(1.0 - h->lr * h->weight_decay);
    c.clip = clip;
    k_adamw<<<ops_grid(n, ADAM_THREADS), ADAM_THREADS, 0, OPS_STREAM(stream)>>>(
        params, grads, m, v, (ops_bf16 *)p_act, n, run_end, run_decay, run_act, n_runs, c, gnorm);
    GDN_CUDA_CHECK_LAUNCH();
}
