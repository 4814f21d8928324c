/* Timing of the CUDA gated delta rule (gdn_cuda_delta_time): random inputs on the device, the
 * forward, forward+backward (recomputing and on saved intermediates) and each kernel alone,
 * medians of CUDA-event timings. */
#include <math.h>
#include <stdlib.h>

#include "model/cuda/delta_common.cuh"
#include "model/mixer.h"

/* ---- timing ------------------------------------------------------------------------------------ */
static const char *const phase_names[GDN_CUDA_PHASES] = {
    "intra", "state_fwd", "output", "dv_local", "state_bwd", "dt_gate", "grad",
};

const char *gdn_cuda_delta_phase_name(int phase) {
    return (phase >= 0 && phase < GDN_CUDA_PHASES) ? phase_names[phase] : "?";
}

/* Deterministic pseudo-random fill: u in [0,1) from a hash of (seed, index). */
__device__ __forceinline__ float hash_u01(unsigned seed, size_t i) {
    unsigned x = (unsigned)i * 0x9E3779B1u ^ (unsigned)(i >> 32) * 0x85EBCA77u ^ seed * 0xC2B2AE3Du;
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return (x >> 8) * (1.0f / 16777216.0f);
}

/* kind 0: uniform(-a, a); 1: g = -a u (log decay); 2: beta = sigmoid(4u - 2) */
static __global__ void k_fill(float *dst, size_t n, unsigned seed, int kind, float amp) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float u = hash_u01(seed, i);
        dst[i] = kind == 0 ? amp * (2.f * u - 1.f) : kind == 1 ? -amp * u : 1.f / (1.f + expf(2.f - 4.f * u));
    }
}

/* L2-normalise rows of length D (one warp per row), like the model's q/k normalisation. */
static __global__ void k_l2norm_rows(float *x, size_t rows, int D) {
    const size_t row = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    float *r = x + row * D;
    float ss = 0.f;
    for (int i = threadIdx.x & 31; i < D; i += 32) ss += r[i] * r[i];
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = rsqrtf(ss + 1e-6f);
    for (int i = threadIdx.x & 31; i < D; i += 32) r[i] *= inv;
}

static void *random_tensor(size_t n, unsigned seed, int kind, float amp, int norm_D, gdn_cuda_precision p) {
    float *f = NULL;
    GDN_CUDA_CHECK(cudaMalloc((void **)&f, n * sizeof(float)));
    k_fill<<<1024, 256>>>(f, n, seed, kind, amp);
    GDN_CUDA_CHECK_LAUNCH();
    if (norm_D > 0) {
        const size_t rows = n / (size_t)norm_D;
        k_l2norm_rows<<<(unsigned)((rows + 7) / 8), 256>>>(f, rows, norm_D);
        GDN_CUDA_CHECK_LAUNCH();
    }
    if (p == GDN_CUDA_FP32) return f;
    bf16 *b = NULL;
    GDN_CUDA_CHECK(cudaMalloc((void **)&b, n * sizeof(bf16)));
    gdn_delta_to_bf16(b, f, n);
    GDN_CUDA_CHECK(cudaFree(f));
    return b;
}

static int cmp_float(const void *x, const void *y) {
    const float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

typedef struct {
    gdn_cuda_precision p;
    gdn_delta_args a;            /* the kernels' argument block (each phase alone) */
    gdn_cuda_delta_fwd_args fwd; /* the same tensors through the launchers */
    gdn_cuda_delta_bwd_args bwd;
} bench_ctx;

/* what: 0 = forward, 1 = forward + backward, 2 + phase = that kernel alone,
 * -1 = forward + backward on the saved intermediates */
static void bench_run(bench_ctx *c, int what) {
    gdn_delta_args *a = &c->a;
    if (what <= 1) {
        gdn_cuda_delta_fwd(&c->fwd);
        if (what == 1) gdn_cuda_delta_bwd(&c->bwd);
        else if (what == -1) gdn_cuda_delta_bwd_saved(&c->bwd);
        return;
    }
    switch (what - 2) {
    case GDN_CUDA_PHASE_INTRA: gdn_delta_launch_intra(a, c->p, NULL); break;
    case GDN_CUDA_PHASE_STATE_FWD: gdn_delta_launch_state_fwd(a, c->p, NULL, 0); break;
    case GDN_CUDA_PHASE_OUTPUT: gdn_delta_launch_output(a, c->p, NULL); break;
    case GDN_CUDA_PHASE_DV_LOCAL: gdn_delta_launch_dv_local(a, c->p, NULL, 1); break;
    case GDN_CUDA_PHASE_STATE_BWD: gdn_delta_launch_state_bwd(a, c->p, NULL, 1); break;
    case GDN_CUDA_PHASE_DT: gdn_delta_launch_dv_local(a, c->p, NULL, 2); break;
    default: gdn_delta_launch_grad(a, c->p, NULL); break;
    }
}

static double bench_median(bench_ctx *c, int what, int warmup, int repeats) {
    for (int i = 0; i < warmup; ++i) bench_run(c, what);
    cudaEvent_t *ev = (cudaEvent_t *)malloc(2 * (size_t)repeats * sizeof(cudaEvent_t));
    float *ms = (float *)malloc((size_t)repeats * sizeof(float));
    if (!ev || !ms) GDN_CUDA_DIE("out of host memory");
    for (int i = 0; i < 2 * repeats; ++i) GDN_CUDA_CHECK(cudaEventCreate(&ev[i]));
    for (int i = 0; i < repeats; ++i) {
        GDN_CUDA_CHECK(cudaEventRecord(ev[2 * i], NULL));
        bench_run(c, what);
        GDN_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], NULL));
    }
    GDN_CUDA_CHECK(cudaEventSynchronize(ev[2 * repeats - 1]));
    for (int i = 0; i < repeats; ++i) GDN_CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
    for (int i = 0; i < 2 * repeats; ++i) GDN_CUDA_CHECK(cudaEventDestroy(ev[i]));
    qsort(ms, (size_t)repeats, sizeof(float), cmp_float);
    const double med = repeats % 2 ? ms[repeats / 2] : 0.5 * (ms[repeats / 2 - 1] + ms[repeats / 2]);
    free(ev);
    free(ms);
    return med;
}

void gdn_cuda_delta_time(const gdn_delta_shape *s_in, gdn_cuda_precision p, int warmup, int repeats,
                         gdn_cuda_delta_timing *out) {
    /* s_in->doc: a host doc array, timed as documents (gdn_cuda_delta_in.doc) */
    gdn_delta_shape s_dev = *s_in;
    s_dev.doc = NULL;
    const gdn_delta_shape *s = &s_dev;
    gdn_cuda_delta_check_shape(s);
    if (repeats < 1) repeats = 1;
    const size_t ntok = (size_t)s->B * s->T * s->H, nst = (size_t)s->B * s->H * s->K * s->V;
    const size_t nqk = ntok / gdn_delta_group(s) * s->K; /* q, k, dq, dk: [B,T,qk_heads,K] */
    const size_t es = gdn_delta_elem_size(p);
    const gdn_mixer_info *mx = gdn_mixer_get(s->variant); /* checked above */
    bench_ctx c;
    c.p = p;
    const float scale = 1.f / sqrtf((float)s->K);
    void *ws = NULL;
    GDN_CUDA_CHECK(cudaMalloc(&ws, gdn_cuda_delta_workspace_bytes(s, p)));
    gdn_delta_args_init(&c.a, s, p, scale, ws);
    gdn_delta_args *a = &c.a;
    a->q = random_tensor(nqk, 1, 0, 1.f, s->K, p);
    a->k = random_tensor(nqk, 2, 0, 1.f, s->K, p);
    a->v = random_tensor(ntok * s->V, 3, 0, 1.f, 0, p);
    /* the gates only where the mixer reads them (the launchers pass on what it reads) */
    a->g = mx->has_decay ? (const float *)random_tensor(ntok, 4, 1, 0.1f, 0, GDN_CUDA_FP32) : NULL;
    a->beta = mx->has_beta ? (const float *)random_tensor(ntok, 5, 2, 1.f, 0, GDN_CUDA_FP32) : NULL;
    a->h0 = (const float *)random_tensor(nst, 6, 0, 0.1f, 0, GDN_CUDA_FP32);
    a->d_o = random_tensor(ntok * s->V, 7, 0, 1.f, 0, p);
    a->dht = (const float *)random_tensor(nst, 8, 0, 0.1f, 0, GDN_CUDA_FP32);
    a->o = gdn_delta_alloc_poisoned(ntok * s->V, es);
    a->ht = (float *)gdn_delta_alloc_poisoned(nst, 4);
    a->dq = gdn_delta_alloc_poisoned(nqk, es);
    a->dk = gdn_delta_alloc_poisoned(nqk, es);
    a->dv = gdn_delta_alloc_poisoned(ntok * s->V, es);
    a->dg = (float *)gdn_delta_alloc_poisoned(ntok, 4);
    a->dbeta = (float *)gdn_delta_alloc_poisoned(ntok, 4);
    a->dh0 = (float *)gdn_delta_alloc_poisoned(nst, 4);
    int *doc = NULL;
    if (s_in->doc) {
        const size_t nd = (size_t)s->B * s->T * sizeof(int);
        GDN_CUDA_CHECK(cudaMalloc((void **)&doc, nd));
        GDN_CUDA_CHECK(cudaMemcpy(doc, s_in->doc, nd, cudaMemcpyHostToDevice));
    }
    a->doc = doc;
    const gdn_cuda_delta_in in = {*s, p, a->q, a->k, a->v, a->g, a->beta, scale, a->h0, ws, NULL, doc};
    c.fwd = gdn_cuda_delta_fwd_args{in, NULL, a->o, a->ht};
    c.bwd = gdn_cuda_delta_bwd_args{in, a->d_o, a->dht, NULL, a->dq, a->dk, a->dv, a->dg, a->dbeta, a->dh0};

    out->fwd_ms = bench_median(&c, 0, warmup, repeats);
    out->fwdbwd_ms = bench_median(&c, 1, warmup, repeats);
    out->fwdbwd_saved_ms = bench_median(&c, -1, warmup, repeats);
    for (int ph = 0; ph < GDN_CUDA_PHASES; ++ph) out->phase_ms[ph] = bench_median(&c, 2 + ph, warmup, repeats);
    GDN_CUDA_CHECK(cudaDeviceSynchronize());

    void *all[] = {(void *)a->q, (void *)a->k, (void *)a->v, (void *)a->g, (void *)a->beta,
                   (void *)a->h0, (void *)a->d_o, (void *)a->dht, a->o, a->ht, a->dq, a->dk,
                   a->dv, a->dg, a->dbeta, a->dh0, ws, doc};
    gdn_delta_free_all(all, (int)(sizeof(all) / sizeof(all[0])));
}
