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

void gdn_cuda_delta_fwd_host(const gdn_delta_shape *s, gdn_cuda_precision p, const float *q,
                             const float *k, const float *v, const float *g, const float *beta,
                             float scale, const float *h0, float *o, float *ht) {
    gdn_cuda_delta_check_shape(s);
    const size_t ntok = (size_t)s->B * s->T * s->H, nst = (size_t)s->B * s->H * s->K * s->V;
    const size_t nqk = ntok / gdn_delta_group(s) * s->K; /* q, k: [B,T,qk_heads,K] */
    const size_t es = gdn_delta_elem_size(p);
    void *dq = upload(q, nqk, p), *dk = upload(k, nqk, p), *dv = upload(v, ntok * s->V, p);
    void *dg = upload(g, ntok, GDN_CUDA_FP32), *db = upload(beta, ntok, GDN_CUDA_FP32);
    void *dh0 = upload(h0, nst, GDN_CUDA_FP32);
    void *dout = gdn_delta_alloc_poisoned(ntok * s->V, es);
    void *dht = ht ? gdn_delta_alloc_poisoned(nst, 4) : NULL;
    void *ws = alloc_workspace(s, p);
    gdn_cuda_delta_fwd(s, p, dq, dk, dv, (const float *)dg, (const float *)db, scale,
                       (const float *)dh0, dout, (float *)dht, ws, NULL);
    GDN_CUDA_CHECK(cudaDeviceSynchronize());
    download(o, dout, ntok * s->V, p);
    download(ht, dht, nst, GDN_CUDA_FP32);
    void *all[] = {dq, dk, dv, dg, db, dh0, dout, dht, ws};
    gdn_delta_free_all(all, (int)(sizeof(all) / sizeof(all[0])));
}

void gdn_cuda_delta_bwd_host(const gdn_delta_shape *s, gdn_cuda_precision p, const float *q,
                             const float *k, const float *v, const float *g, const float *beta,
                             float scale, const float *h0, const float *d_o, const float *dht,
                             float *dq, float *dk, float *dv, float *dg, float *dbeta, float *dh0) {
    gdn_cuda_delta_check_shape(s);
    const size_t ntok = (size_t)s->B * s->T * s->H, nst = (size_t)s->B * s->H * s->K * s->V;
    const size_t nqk = ntok / gdn_delta_group(s) * s->K; /* q, k, dq, dk: [B,T,qk_heads,K] */
    const size_t es = gdn_delta_elem_size(p);
    void *q_d = upload(q, nqk, p), *k_d = upload(k, nqk, p), *v_d = upload(v, ntok * s->V, p);
    void *g_d = upload(g, ntok, GDN_CUDA_FP32), *b_d = upload(beta, ntok, GDN_CUDA_FP32);
    void *h0_d = upload(h0, nst, GDN_CUDA_FP32);
    void *do_d = upload(d_o, ntok * s->V, p);
    void *dht_d = upload(dht, nst, GDN_CUDA_FP32);
    void *dq_d = gdn_delta_alloc_poisoned(nqk, es), *dk_d = gdn_delta_alloc_poisoned(nqk, es);
    void *dv_d = gdn_delta_alloc_poisoned(ntok * s->V, es);
    void *dg_d = gdn_delta_alloc_poisoned(ntok, 4), *db_d = gdn_delta_alloc_poisoned(ntok, 4);
    void *dh0_d = dh0 ? gdn_delta_alloc_poisoned(nst, 4) : NULL;
    void *ws = alloc_workspace(s, p);
    gdn_cuda_delta_bwd(s, p, q_d, k_d, v_d, (const float *)g_d, (const float *)b_d, scale,
                       (const float *)h0_d, do_d, (const float *)dht_d, dq_d, dk_d, dv_d,
                       (float *)dg_d, (float *)db_d, (float *)dh0_d, ws, NULL);
    GDN_CUDA_CHECK(cudaDeviceSynchronize());
    download(dq, dq_d, nqk, p);
    download(dk, dk_d, nqk, p);
    download(dv, dv_d, ntok * s->V, p);
    download(dg, dg_d, ntok, GDN_CUDA_FP32);
    download(dbeta, db_d, ntok, GDN_CUDA_FP32);
    download(dh0, dh0_d, nst, GDN_CUDA_FP32);
    void *all[] = {q_d, k_d, v_d, g_d, b_d, h0_d, do_d, dht_d, dq_d, dk_d, dv_d, dg_d, db_d, dh0_d, ws};
    gdn_delta_free_all(all, (int)(sizeof(all) / sizeof(all[0])));
}
