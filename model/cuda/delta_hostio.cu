/* Host-array convenience wrappers of the CUDA gated delta rule (copy in, run, copy out; the CPU
 * op's semantics), and the small device-memory helpers they share with the timing code. */
#include "model/cuda/delta_common.cuh"

/* ---- host-array wrappers ---------------------------------------------------------------------- */
static __global__ void k_f32_to_bf16(bf16 *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}
static __global__ void k_bf16_to_f32(float *dst, const bf16 *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

void gdn_delta_to_bf16(bf16 *dst, const float *src, size_t n) {
    k_f32_to_bf16<<<1024, 256>>>(dst, src, n);
    GDN_CUDA_CHECK_LAUNCH();
}

/* Device copy of a host float array in the element type of precision p (NULL stays NULL). */
static void *upload(const float *host, size_t n, gdn_cuda_precision p) {
    if (!host) return NULL;
    float *stage = NULL;
    GDN_CUDA_CHECK(cudaMalloc((void **)&stage, n * sizeof(float)));
    GDN_CUDA_CHECK(cudaMemcpy(stage, host, n * sizeof(float), cudaMemcpyHostToDevice));
    if (p == GDN_CUDA_FP32) return stage;
    bf16 *d = NULL;
    GDN_CUDA_CHECK(cudaMalloc((void **)&d, n * sizeof(bf16)));
    gdn_delta_to_bf16(d, stage, n);
    GDN_CUDA_CHECK(cudaFree(stage));
    return d;
}

/* Device output buffer filled with NaN (all-ones bits in fp32 and bf16), so an element the
 * kernels fail to write cannot pass as a result. */
void *gdn_delta_alloc_poisoned(size_t n, size_t es) {
    void *d = NULL;
    GDN_CUDA_CHECK(cudaMalloc(&d, n * es));
    GDN_CUDA_CHECK(cudaMemset(d, 0xFF, n * es));
    return d;
}

/* Device copy of the host doc [B,T] int array (NULL stays NULL). */
static const int *upload_doc(const int *host, size_t n) {
    if (!host) return NULL;
    int *d = NULL;
    GDN_CUDA_CHECK(cudaMalloc((void **)&d, n * sizeof(int)));
    GDN_CUDA_CHECK(cudaMemcpy(d, host, n * sizeof(int), cudaMemcpyHostToDevice));
    return d;
}

static void download(float *host, const void *dev, size_t n, gdn_cuda_precision p) {
    if (!host || !dev) return;
    if (p == GDN_CUDA_FP32) {
        GDN_CUDA_CHECK(cudaMemcpy(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost));
        return;
    }
    float *stage = NULL;
    GDN_CUDA_CHECK(cudaMalloc((void **)&stage, n * sizeof(float)));
    k_bf16_to_f32<<<1024, 256>>>(stage, (const bf16 *)dev, n);
    GDN_CUDA_CHECK_LAUNCH();
    GDN_CUDA_CHECK(cudaMemcpy(host, stage, n * sizeof(float), cudaMemcpyDeviceToHost));
    GDN_CUDA_CHECK(cudaFree(stage));
}

static void *alloc_workspace(const gdn_delta_shape *s, gdn_cuda_precision p) {
    void *ws = NULL;
    GDN_CUDA_CHECK(cudaMalloc(&ws, gdn_cuda_delta_workspace_bytes(s, p)));
    return ws;
}

void gdn_delta_free_all(void **ptrs, int n) {
    for (int i = 0; i < n; ++i)
        if (ptrs[i]) GDN_CUDA_CHECK(cudaFree(ptrs[i]));
}

/* Element counts of a host call: per-token scalars (ntok), one state (nst), q or k (nqk: q, k,
 * dq, dk are [B,T,qk_heads,K]), and the element size of the precision (es). */
typedef struct {
    size_t ntok, nst, nqk, es;
} host_sizes;

/* Checks the shape of *in and returns its device copy: q, k, v in the element type of its
 * precision, g, beta, h0 fp32 (NULL stays NULL), a fresh workspace, the default stream. */
static gdn_cuda_delta_in upload_in(const gdn_cuda_delta_in *in, host_sizes *n) {
    const gdn_delta_shape *s = &in->shape;
    const gdn_cuda_precision p = in->prec;
    gdn_cuda_delta_check_shape(s);
    n->ntok = (size_t)s->B * s->T * s->H;
    n->nst = (size_t)s->B * s->H * s->K * s->V;
    n->nqk = n->ntok / gdn_delta_group(s) * s->K;
    n->es = gdn_delta_elem_size(p);
    gdn_cuda_delta_in d = *in;
    d.q = upload((const float *)in->q, n->nqk, p);
    d.k = upload((const float *)in->k, n->nqk, p);
    d.v = upload((const float *)in->v, n->ntok * s->V, p);
    d.g = (const float *)upload(in->g, n->ntok, GDN_CUDA_FP32);
    d.beta = (const float *)upload(in->beta, n->ntok, GDN_CUDA_FP32);
    d.h0 = (const float *)upload(in->h0, n->nst, GDN_CUDA_FP32);
    d.doc = upload_doc(in->doc, (size_t)s->B * s->T);
    d.workspace = alloc_workspace(s, p);
    d.stream = NULL;
    return d;
}

void gdn_cuda_delta_fwd_host(const gdn_cuda_delta_fwd_args *fa) {
    const gdn_delta_shape *s = &fa->in.shape;
    const gdn_cuda_precision p = fa->in.prec;
    host_sizes n;
    gdn_cuda_delta_fwd_args d = {};
    d.in = upload_in(&fa->in, &n);
    const size_t ntok = n.ntok, nst = n.nst, es = n.es;
    d.o = gdn_delta_alloc_poisoned(ntok * s->V, es);
    d.ht = fa->ht ? (float *)gdn_delta_alloc_poisoned(nst, 4) : NULL;
    gdn_cuda_delta_fwd(&d);
    GDN_CUDA_CHECK(cudaDeviceSynchronize());
    download((float *)fa->o, d.o, ntok * s->V, p);
    download(fa->ht, d.ht, nst, GDN_CUDA_FP32);
    void *all[] = {(void *)d.in.q, (void *)d.in.k, (void *)d.in.v, (void *)d.in.g,
                   (void *)d.in.beta, (void *)d.in.h0, d.o, d.ht, d.in.workspace, (void *)d.in.doc};
    gdn_delta_free_all(all, (int)(sizeof(all) / sizeof(all[0])));
}

void gdn_cuda_delta_bwd_host(const gdn_cuda_delta_bwd_args *ba) {
    const gdn_delta_shape *s = &ba->in.shape;
    const gdn_cuda_precision p = ba->in.prec;
    host_sizes n;
    gdn_cuda_delta_bwd_args d = {};
    d.in = upload_in(&ba->in, &n);
    const size_t ntok = n.ntok, nst = n.nst, nqk = n.nqk, es = n.es;
    d.d_o = upload((const float *)ba->d_o, ntok * s->V, p);
    d.dht = (const float *)upload(ba->dht, nst, GDN_CUDA_FP32);
    d.dq = gdn_delta_alloc_poisoned(nqk, es);
    d.dk = gdn_delta_alloc_poisoned(nqk, es);
    d.dv = gdn_delta_alloc_poisoned(ntok * s->V, es);
    /* dg, dbeta, dh0 only where asked for: the launcher writes the ones it is given */
    d.dg = ba->dg ? (float *)gdn_delta_alloc_poisoned(ntok, 4) : NULL;
    d.dbeta = ba->dbeta ? (float *)gdn_delta_alloc_poisoned(ntok, 4) : NULL;
    d.dh0 = ba->dh0 ? (float *)gdn_delta_alloc_poisoned(nst, 4) : NULL;
    gdn_cuda_delta_bwd(&d);
    GDN_CUDA_CHECK(cudaDeviceSynchronize());
    download((float *)ba->dq, d.dq, nqk, p);
    download((float *)ba->dk, d.dk, nqk, p);
    download((float *)ba->dv, d.dv, ntok * s->V, p);
    download(ba->dg, d.dg, ntok, GDN_CUDA_FP32);
    download(ba->dbeta, d.dbeta, ntok, GDN_CUDA_FP32);
    download(ba->dh0, d.dh0, nst, GDN_CUDA_FP32);
    void *all[] = {(void *)d.in.q, (void *)d.in.k, (void *)d.in.v, (void *)d.in.g,
                   (void *)d.in.beta, (void *)d.in.h0, d.in.workspace, (void *)d.d_o,
                   (void *)d.dht, d.dq, d.dk, d.dv, d.dg, d.dbeta, d.dh0, (void *)d.in.doc};
    gdn_delta_free_all(all, (int)(sizeof(all) / sizeof(all[0])));
}
