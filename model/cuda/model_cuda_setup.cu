/* The CUDA model's memory: the layout of its device allocations, create / free, the parameter
 * copies between host and device, and the sequence-parallel boundary buffers. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/cpu/doc.h"

#include "model/cuda/cuda_mixers.h"
#include "model/cuda/model_cuda_internal.cuh"

#define ALIGN 256

/* ---- layout ------------------------------------------------------------------------------------ */
/* Carves `bytes` from base (aligned); with base == NULL only counts. */
static void *take(char *base, size_t *used, size_t bytes) {
    void *p = base ? base + *used : NULL;
    *used += (bytes + ALIGN - 1) / ALIGN * ALIGN;
    return p;
}

static size_t params_layout(gdn_cuda_model *m, char *base) {
    size_t used = 0;
    m->params = (float *)take(base, &used, m->padded * 4);
    m->grads = (float *)take(base, &used, m->padded * 4);
    m->adam_m = (float *)take(base, &used, (m->hi - m->lo) * 4);
    m->adam_v = (float *)take(base, &used, (m->hi - m->lo) * 4);
    m->wact = m->p == GDN_CUDA_BF16 ? take(base, &used, m->wact_n * 2) : NULL;
    if (!base) m->wact = NULL;
    m->run_end = (uint64_t *)take(base, &used, (size_t)m->n_runs * sizeof(uint64_t));
    m->run_decay = (int *)take(base, &used, (size_t)m->n_runs * sizeof(int));
    m->run_act = (uint64_t *)take(base, &used, (size_t)m->n_runs * sizeof(uint64_t));
    m->shard_end = (uint64_t *)take(base, &used, (size_t)m->n_runs * sizeof(uint64_t));
    m->shard_decay = (int *)take(base, &used, (size_t)m->n_runs * sizeof(int));
    return used;
}

static size_t acts_layout(gdn_cuda_model *m, char *base) {
    const gdn_config *c = &m->cfg;
    const size_t N = (size_t)m->N, D = (size_t)c->d_model, H = (size_t)c->n_heads, K = (size_t)c->head_dim;
    const size_t V = (size_t)gdn_config_head_v(c), F = (size_t)c->d_ff, HK = H * K, HV = H * V;
    const size_t es = gdn_cuda_act_bytes(m->p), f4 = sizeof(float);
    const int bf = m->p == GDN_CUDA_BF16;
    size_t used = 0;
#define A(ptr, n) (ptr) = take(base, &used, (n) * es)
#define F32(ptr, n) (ptr) = (float *)take(base, &used, (n) * f4)
    F32(m->x, (size_t)(c->n_layers + 1) * N * D);
    F32(m->x_mid, (size_t)c->n_layers * N * D);
    /* attention layers (model_cuda_attn.cu): widths QW = H*Da (queries, output) >= KW = Hkv*Da */
    const size_t Hkv = (size_t)gdn_config_kv_heads(c), Da = (size_t)gdn_config_attn_dim(c);
    const size_t QW = H * Da, KW = Hkv * Da;
    const int has_attn = table_has_attn(m->t);
    /* the backward scratch serves both kinds of layer */
    const size_t HKs = has_attn && QW > HK ? QW : HK, HVs = has_attn && QW > HV ? QW : HV;
    for (int l = 0; l < c->n_layers; l++) {
        layer_acts *L = &m->L[l];
        if (m->t->layer[l].mixer == GDN_MIXER_A) {
            /* saved: the projections qp, kp before bias / norm / RoPE (q and k are recomputed in
             * the backward: one elementwise pass, cheaper than keeping N*(QW+KW) more), v with
             * its bias, the attention output o and its log-sum-exp, the q/k norms' r; see
             * model_cuda_attn.cu */
            F32(L->rstd1, N); /* every other field stays NULL (calloc) */
            A(L->qp, N * QW); A(L->kp, N * KW); A(L->v, N * KW); A(L->o, N * QW);
            F32(L->lse, N * (size_t)c->n_heads);
            if (c->qk_norm) {
                F32(L->rq, N * H); F32(L->rk, N * Hkv);
            }
            F32(L->rstd2, N);
            A(L->gp, N * F); A(L->up, N * F);
            continue;
        }
        F32(L->rstd1, N);
        const gdn_mixer_info *mx = layer_mixer(m, l);
        const size_t HS = m->dp.packed ? H * (size_t)m->dp.S : 0;
        L->ap = L->bp = L->g = L->beta = L->pg = L->pbeta = NULL; /* the gates this mixer has not */
        A(L->qp, N * HK); A(L->kp, N * HK); A(L->vp, N * HV); A(L->zp, N * HV);
        if (mx->has_decay) F32(L->ap, N * H);
        if (mx->has_beta) F32(L->bp, N * H);
        A(L->q, N * HK); A(L->k, N * HK); F32(L->rq, N * H); F32(L->rk, N * H);
        if (mx->has_decay) F32(L->g, N * H);
        if (mx->has_beta) F32(L->beta, N * H);
        A(L->o, N * HV); F32(L->rstd_o, N * H);
        F32(L->rstd2, N);
        A(L->gp, N * F); A(L->up, N * F);
        if (HS && mx->has_decay) F32(L->pg, N * HS);
        if (HS && mx->has_beta) F32(L->pbeta, N * HS);
    }
    A(m->hs, N * D);
    F32(m->rstdf, N); A(m->hf, N * D); A(m->logits, N * (size_t)c->vocab_size);
    F32(m->dx, N * D);
    if (bf) A(m->dx_act, N * D);
    else m->dx_act = NULL;
    F32(m->dh, N * D);
    { /* dm, dgu and dproj: one region (model_cuda_internal.cuh) */
        const size_t fb = (N * F * es + 255) / 256 * 256;
        m->ldp = (int)(((2 * HK + HV + 2 * H) * es + 15) / 16 * 16 / es);
        const size_t pb = N * (size_t)m->ldp * es;
        char *r = (char *)take(base, &used, fb + 2 * N * F * es > pb ? fb + 2 * N * F * es : pb);
        m->dm = r;
        m->dgu = r ? r + fb : NULL;
        m->dproj = r;
    }
    A(m->dyo, N * HV); A(m->d_o, N * HVs); A(m->dz, N * HV);
    A(m->dqn, N * HKs); A(m->dkn, N * HKs); A(m->dq1, N * HKs); A(m->dk1, N * HKs);
    A(m->dv, N * HVs); A(m->dvp, N * HV);
    F32(m->dg, N * H); F32(m->dbeta, N * H);
    if (m->dp.packed) {
        const size_t HS = H * (size_t)m->dp.S, nk = N * HS * (size_t)m->dp.Kp, nv = N * HS * (size_t)m->dp.Vp;
        if (!m->dp.qk_shared) {
            A(m->pq, nk); A(m->pk, nk); A(m->pdq, nk); A(m->pdk, nk);
        }
        if (!m->dp.v_same) {
            A(m->pv, nv); A(m->po, nv); A(m->pdv, nv);
        }
        F32(m->pdg, N * HS); F32(m->pdbeta, N * HS);
    }
#undef A
#undef F32
    m->rope = has_attn ? (float *)take(base, &used, (size_t)m->T * Da * f4) : NULL; /* [2,T,Da/2] */
    m->delta_ws = take(base, &used, gdn_cuda_delta_workspace_bytes(&m->dp.shape, m->p));
    size_t ws = gdn_cuda_norm_workspace(m->N, c->d_model);
    size_t w2 = gdn_cuda_norm_workspace(m->N * c->n_heads, (int)V);
    if (w2 > ws) ws = w2;
    w2 = gdn_cuda_conv_workspace(m->B, m->T, (int)(HK > HV ? HK : HV), c->conv_width);
    if (w2 > ws) ws = w2;
    w2 = gdn_cuda_decay_gate_workspace(m->N, c->n_heads);
    if (w2 > ws) ws = w2;
    w2 = gdn_cuda_cross_entropy_workspace(m->N);
    if (w2 > ws) ws = w2;
    w2 = gdn_cuda_distill_loss_workspace(m->N);
    if (w2 > ws) ws = w2;
    w2 = gdn_cuda_grad_norm_workspace(m->t->total);
    if (w2 > ws) ws = w2;
    if (has_attn) {
        w2 = gdn_cuda_model_attn_workspace(m);
        if (w2 > ws) ws = w2;
    }
    m->op_ws = take(base, &used, ws);
    m->tokens_d = (int *)take(base, &used, N * sizeof(int));
    m->targets_d = (int *)take(base, &used, N * sizeof(int));
    m->perm_d = (int *)take(base, &used, N * sizeof(int));
    m->seg_start_d = (int *)take(base, &used, (N + 1) * sizeof(int));
    m->seg_token_d = (int *)take(base, &used, N * sizeof(int));
    m->loss_d = (double *)take(base, &used, sizeof(double));
    m->gnorm_d = (double *)take(base, &used, sizeof(double));
    m->nvalid_d = (int *)take(base, &used, sizeof(int));
    return used;
}

/* ---- setup ---------------------------------------------------------------------------------------- */
static int delta_dim_ok(int d) { return d == 64 || d == 128 || d == 256; }
static int delta_pad(int d) { return d <= 64 ? 64 : d <= 128 ? 128 : 256; }

/* Direct call when K and V are kernel sizes; else zero-pad K and split V into the fewest padded
 * columns (S sub-heads of Vs <= 256 columns each). */
static delta_plan plan_delta(const gdn_config *c, int B, int T) {
    const int K = c->head_dim, V = gdn_config_head_v(c), H = c->n_heads;
    if (K > 256)
        GDN_CUDA_DIE("model: head_dim %d is not supported by the CUDA delta rule (at most 256)", K);
    delta_plan d;
    memset(&d, 0, sizeof d);
    d.Kp = delta_pad(K);
    int best = -1;
    for (int S = (V + 255) / 256; S <= (V + 63) / 64; S++) {
        const int Vs = (V + S - 1) / S, Vp = delta_pad(Vs);
        if (best < 0 || S * Vp < best) {
            best = S * Vp;
            d.S = S;
            d.Vs = Vs;
            d.Vp = Vp;
        }
    }
    d.packed = !(delta_dim_ok(K) && d.S == 1 && delta_dim_ok(V));
    d.v_same = d.Vp == d.Vs && d.S * d.Vs == V;
    d.qk_shared = d.packed && d.Kp == K;
    d.shape.B = B;
    d.shape.T = T;
    d.shape.H = d.packed ? H * d.S : H;
    d.shape.qk_heads = d.qk_shared ? H : 0;
    d.shape.K = d.packed ? d.Kp : K;
    d.shape.V = d.packed ? d.Vp : V;
    d.shape.chunk = c->chunk_size;
    gdn_cuda_delta_check_shape(&d.shape);
    return d;
}

/* One AdamW run per tensor, in buffer order: where it ends in the flat buffer, whether it
 * decays, and where it starts in the bf16 copy (every tensor on a 128-byte boundary, so the GEMMs
 * get aligned operands). Returns the elements of the copy. */
#define WACT_ALIGN 64
static size_t build_runs(const gdn_param_table *t, uint64_t *end, int *decay, uint64_t *act) {
    size_t at = 0;
    for (int i = 0; i < t->n; i++) {
        const gdn_param *p = &t->p[i];
        if (p->offset != (i ? end[i - 1] : 0))
            GDN_CUDA_DIE("parameter table: tensor %s starts at %zu, not where the previous one ends", p->name,
                         p->offset);
        end[i] = p->offset + p->numel;
        decay[i] = !p->no_decay;
        act[i] = at;
        at += (p->numel + WACT_ALIGN - 1) / WACT_ALIGN * WACT_ALIGN;
    }
    if (t->n < 1 || end[t->n - 1] != t->total) GDN_CUDA_DIE("parameter table: tensors do not cover the flat buffer");
    return at;
}

/* The runs of [lo, hi) (ZeRO-1 shard): each tensor's part inside it, ends relative to lo, with
 * its tensor's decay. Returns the number of runs (0 for an empty shard). */
static int build_shard_runs(const uint64_t *end, const int *decay, int n_runs, size_t lo, size_t hi,
                            uint64_t *s_end, int *s_decay) {
    int k = 0;
    for (int i = 0; i < n_runs; i++) {
        const size_t a = i ? end[i - 1] : 0, b = end[i];
        if (b <= lo || a >= hi) continue;
        s_end[k] = (b < hi ? b : hi) - lo;
        s_decay[k] = decay[i];
        k++;
    }
    return k;
}

extern "C" gdn_cuda_model *gdn_cuda_model_create(const gdn_param_table *t, int B, int T, gdn_cuda_precision p) {
    return gdn_cuda_model_create_sharded(t, B, T, p, 0, t->total, t->total);
}

extern "C" gdn_cuda_model *gdn_cuda_model_create_sharded(const gdn_param_table *t, int B, int T, gdn_cuda_precision p,
                                                         size_t lo, size_t hi, size_t padded) {
    if (B < 1 || T < 1) GDN_CUDA_DIE("model: batch %d x length %d (both must be >= 1)", B, T);
    for (int l = 0; l < t->cfg.n_layers; l++) { /* every layer's mixer (and attention head dim) runs here */
        const int v = t->layer[l].mixer;
        const gdn_mixer_info *mx = gdn_mixer_get(v);
        if (!gdn_cuda_has_mixer(v))
            GDN_CUDA_DIE("model: mixers \"%s\": layer %d is %c (%s), which the CUDA model does not implement; "
                         "use the cpu backend", gdn_config_mixers(&t->cfg), l, mx ? mx->kind : '?',
                         mx ? mx->name : "not a mixer");
        if (v == GDN_MIXER_A && !gdn_cuda_attn_dim_ok(gdn_config_attn_dim(&t->cfg)))
            GDN_CUDA_DIE("model: mixers \"%s\": layer %d is A (attention) with attn_head_dim %d, which the CUDA "
                         "model does not implement (its attention kernels take 64 or 128); use the cpu backend",
                         gdn_config_mixers(&t->cfg), l, gdn_config_attn_dim(&t->cfg));
    }
    if (lo > hi || hi > t->total || padded < t->total)
        GDN_CUDA_DIE("model: optimizer shard [%zu, %zu) with buffers of %zu elements does not fit %zu parameters", lo,
                     hi, padded, t->total);
    if ((long long)B * T > 0x7fffffffLL / 64) GDN_CUDA_DIE("model: %d x %d tokens per micro-batch is too many", B, T);
    gdn_cuda_model *m = (gdn_cuda_model *)calloc(1, sizeof *m);
    if (!m) GDN_CUDA_DIE("out of host memory");
    m->t = t;
    m->cfg = t->cfg;
    m->B = B;
    m->T = T;
    m->N = B * T;
    m->p = p;
    m->lo = lo;
    m->hi = hi;
    m->padded = padded;
    m->dp = plan_delta(&m->cfg, B, T);
    m->L = (layer_acts *)calloc((size_t)m->cfg.n_layers, sizeof *m->L);
    uint64_t *end = (uint64_t *)malloc((size_t)t->n * sizeof *end);
    int *decay = (int *)malloc((size_t)t->n * sizeof *decay);
    uint64_t *s_end = (uint64_t *)malloc((size_t)t->n * sizeof *s_end);
    int *s_decay = (int *)malloc((size_t)t->n * sizeof *s_decay);
    m->act_off_h = (uint64_t *)malloc((size_t)t->n * sizeof *m->act_off_h);
    m->perm_h = (int *)malloc((size_t)m->N * sizeof(int));
    m->seg_start_h = (int *)malloc(((size_t)m->N + 1) * sizeof(int));
    m->seg_token_h = (int *)malloc((size_t)m->N * sizeof(int));
    if (!m->L || !end || !decay || !s_end || !s_decay || !m->act_off_h || !m->perm_h || !m->seg_start_h || !m->seg_token_h)
        GDN_CUDA_DIE("out of host memory");
    m->wact_n = build_runs(t, end, decay, m->act_off_h);
    m->n_runs = t->n;
    m->n_shard_runs = build_shard_runs(end, decay, m->n_runs, lo, hi, s_end, s_decay);

    GDN_CUDA_CHECK(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking));
    GDN_CUDA_CHECK(cudaStreamCreateWithFlags(&m->side, cudaStreamNonBlocking));
    for (int i = 0; i < 2; i++) GDN_CUDA_CHECK(cudaEventCreateWithFlags(&m->side_ev[i], cudaEventDisableTiming));
    m->blas = gdn_cuda_blas_create(m->stream);
    m->pbytes = params_layout(m, NULL);
    m->abytes = acts_layout(m, NULL);
    cudaError_t e1 = cudaMalloc((void **)&m->pbuf, m->pbytes);
    cudaError_t e2 = e1 == cudaSuccess ? cudaMalloc((void **)&m->abuf, m->abytes) : e1;
    if (e1 != cudaSuccess || e2 != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        (void)cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        GDN_CUDA_DIE("model: cannot allocate %.2f GiB for parameters/optimizer and %.2f GiB for activations "
                     "(B=%d, T=%d); the device has %.2f GiB free of %.2f GiB: use a smaller batch or sequence",
                     m->pbytes / 1073741824.0, m->abytes / 1073741824.0, B, T, free_b / 1073741824.0,
                     total_b / 1073741824.0);
    }
    params_layout(m, m->pbuf);
    acts_layout(m, m->abuf);
    gdn_cuda_model_attn_setup(m);
    GDN_CUDA_CHECK(cudaMemsetAsync(m->pbuf, 0, (size_t)((char *)m->run_end - m->pbuf), m->stream));
    GDN_CUDA_CHECK(cudaMemcpyAsync(m->run_end, end, (size_t)m->n_runs * sizeof *end, cudaMemcpyHostToDevice,
                                   m->stream));
    GDN_CUDA_CHECK(cudaMemcpyAsync(m->run_decay, decay, (size_t)m->n_runs * sizeof *decay, cudaMemcpyHostToDevice,
                                   m->stream));
    GDN_CUDA_CHECK(cudaMemcpyAsync(m->run_act, m->act_off_h, (size_t)m->n_runs * sizeof *m->act_off_h,
                                   cudaMemcpyHostToDevice, m->stream));
    if (m->n_shard_runs) {
        GDN_CUDA_CHECK(cudaMemcpyAsync(m->shard_end, s_end, (size_t)m->n_shard_runs * sizeof *s_end,
                                       cudaMemcpyHostToDevice, m->stream));
        GDN_CUDA_CHECK(cudaMemcpyAsync(m->shard_decay, s_decay, (size_t)m->n_shard_runs * sizeof *s_decay,
                                       cudaMemcpyHostToDevice, m->stream));
    }
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
    free(end);
    free(decay);
    free(s_end);
    free(s_decay);
    return m;
}

extern "C" void gdn_cuda_model_free(gdn_cuda_model *m) {
    if (!m) return;
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
    gdn_cuda_blas_free(m->blas);
    GDN_CUDA_CHECK(cudaFree(m->pbuf));
    GDN_CUDA_CHECK(cudaFree(m->abuf));
    if (m->sbuf) GDN_CUDA_CHECK(cudaFree(m->sbuf));
    if (m->kvbuf) GDN_CUDA_CHECK(cudaFree(m->kvbuf));
    if (m->distill) GDN_CUDA_CHECK(cudaFree(m->distill));
    if (m->doc_d) GDN_CUDA_CHECK(cudaFree(m->doc_d)); /* one allocation with keylo_d, rpos_d */
    if (m->prof_ev) {
        for (int i = 0; i < 2 * PROF_MAX; i++) GDN_CUDA_CHECK(cudaEventDestroy(m->prof_ev[i]));
        free(m->prof_ev);
    }
    for (int i = 0; i < 2; i++) GDN_CUDA_CHECK(cudaEventDestroy(m->side_ev[i]));
    GDN_CUDA_CHECK(cudaStreamDestroy(m->side));
    GDN_CUDA_CHECK(cudaStreamDestroy(m->stream));
    free(m->L);
    free(m->act_off_h);
    free(m->perm_h);
    free(m->seg_start_h);
    free(m->seg_token_h);
    free(m);
}

extern "C" void *gdn_cuda_model_stream(gdn_cuda_model *m) { return (void *)m->stream; }

extern "C" void gdn_cuda_model_memory(const gdn_cuda_model *m, size_t *param_bytes, size_t *act_bytes) {
    if (param_bytes) *param_bytes = m->pbytes;
    if (act_bytes) *act_bytes = m->abytes;
}

/* ---- parameters ------------------------------------------------------------------------------------- */
void gdn_cuda_model_refresh_act(gdn_cuda_model *m) {
    if (m->wact)
        for (int i = 0; i < m->t->n; i++)
            gdn_cuda_to_act(GDN_CUDA_BF16, (char *)m->wact + m->act_off_h[i] * 2, m->params + m->t->p[i].offset,
                            m->t->p[i].numel, m->stream);
}

extern "C" void gdn_cuda_model_upload(gdn_cuda_model *m, const float *params, const float *adam_m,
                                      const float *adam_v) {
    const size_t bytes = m->t->total * sizeof(float), mbytes = (m->hi - m->lo) * sizeof(float);
    GDN_CUDA_CHECK(cudaMemcpyAsync(m->params, params, bytes, cudaMemcpyHostToDevice, m->stream));
    if (adam_m) GDN_CUDA_CHECK(cudaMemcpyAsync(m->adam_m, adam_m, mbytes, cudaMemcpyHostToDevice, m->stream));
    else GDN_CUDA_CHECK(cudaMemsetAsync(m->adam_m, 0, mbytes, m->stream));
    if (adam_v) GDN_CUDA_CHECK(cudaMemcpyAsync(m->adam_v, adam_v, mbytes, cudaMemcpyHostToDevice, m->stream));
    else GDN_CUDA_CHECK(cudaMemsetAsync(m->adam_v, 0, mbytes, m->stream));
    gdn_cuda_model_refresh_act(m);
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

extern "C" void gdn_cuda_model_download(gdn_cuda_model *m, float *params, float *adam_m, float *adam_v) {
    const size_t bytes = m->t->total * sizeof(float), mbytes = (m->hi - m->lo) * sizeof(float);
    if (params) GDN_CUDA_CHECK(cudaMemcpyAsync(params, m->params, bytes, cudaMemcpyDeviceToHost, m->stream));
    if (adam_m) GDN_CUDA_CHECK(cudaMemcpyAsync(adam_m, m->adam_m, mbytes, cudaMemcpyDeviceToHost, m->stream));
    if (adam_v) GDN_CUDA_CHECK(cudaMemcpyAsync(adam_v, m->adam_v, mbytes, cudaMemcpyDeviceToHost, m->stream));
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

extern "C" void gdn_cuda_model_download_grads(gdn_cuda_model *m, float *grads) {
    GDN_CUDA_CHECK(cudaMemcpyAsync(grads, m->grads, m->t->total * sizeof(float), cudaMemcpyDeviceToHost, m->stream));
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

extern "C" void gdn_cuda_model_write_range(gdn_cuda_model *m, int grads, size_t lo, size_t hi, const float *src) {
    if (lo > hi || hi > m->padded)
        GDN_CUDA_DIE("gdn_cuda_model_write_range: [%zu, %zu) is outside the buffer of %zu floats", lo, hi, m->padded);
    float *dst = (grads ? m->grads : m->params) + lo;
    if (src) GDN_CUDA_CHECK(cudaMemcpyAsync(dst, src, (hi - lo) * sizeof(float), cudaMemcpyHostToDevice, m->stream));
    else GDN_CUDA_CHECK(cudaMemsetAsync(dst, 0, (hi - lo) * sizeof(float), m->stream));
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

extern "C" void gdn_cuda_model_zero_grads(gdn_cuda_model *m) {
    GDN_CUDA_CHECK(cudaMemsetAsync(m->grads, 0, m->padded * sizeof(float), m->stream));
}

/* ---- sequence parallelism ------------------------------------------------------------------------- */
/* The boundary buffers of every layer (allocation 3, made once). */
static void seq_alloc(gdn_cuda_model *m) {
    const gdn_config *c = &m->cfg;
    const delta_plan *d = &m->dp;
    const size_t W1 = (size_t)c->conv_width - 1, B = (size_t)m->B, es = gdn_cuda_act_bytes(m->p);
    const size_t HK = (size_t)c->n_heads * c->head_dim, HV = (size_t)c->n_heads * gdn_config_head_v(c);
    m->n_state = B * (size_t)d->shape.H * (size_t)d->shape.K * (size_t)d->shape.V;
    m->n_halo[0] = m->n_halo[1] = B * W1 * HK;
    m->n_halo[2] = B * W1 * HV;
    const size_t halo_bytes = (m->n_halo[0] + m->n_halo[1] + m->n_halo[2]) * es;
    for (int pass = 0; pass < 2; pass++) { /* count, then carve */
        size_t used = 0;
        char *base = pass ? m->sbuf : NULL;
        for (int l = 0; l < c->n_layers; l++) {
            layer_acts *L = &m->L[l];
            void **sets[4] = {L->halo, L->tail, L->dhalo, L->dtail};
            for (int k = 0; k < 4; k++)
                for (int i = 0; i < 3; i++) sets[k][i] = take(base, &used, m->n_halo[i] * es);
            L->S_in = (float *)take(base, &used, m->n_state * sizeof(float));
            L->S_out = (float *)take(base, &used, m->n_state * sizeof(float));
            L->dS_in = (float *)take(base, &used, m->n_state * sizeof(float));
        }
        m->dS_out = (float *)take(base, &used, m->n_state * sizeof(float));
        if (!pass && cudaMalloc((void **)&m->sbuf, used) != cudaSuccess) {
            (void)cudaGetLastError();
            GDN_CUDA_DIE("sequence parallelism: cannot allocate %.2f GiB for the boundary states and halos "
                         "(%d layers x (3 states of %zu floats + 4 x %zu bytes of halos))",
                         used / 1073741824.0, c->n_layers, m->n_state, halo_bytes);
        }
    }
}

extern "C" int gdn_cuda_model_set_doc_starts(gdn_cuda_model *m, const unsigned char *starts) {
    const size_t N = (size_t)m->N;
    /* Starts only at t = 0 change nothing in a whole-sequence pass (no state, tap or key comes
     * from before row 0), so they keep the plain kernels (wgmma attention); under sequence
     * parallelism they cut what a later segment receives, which is not supported yet. */
    int any = 0;
    m->doc_row0 = 0;
    for (size_t i = 0; starts && i < N; i++)
        if (starts[i]) {
            if (i % (size_t)m->T) any = 1;
            else m->doc_row0 = 1;
        }
    if (!any && m->seq && m->doc_row0 && m->hooks.pos0 > 0) {
        fprintf(stderr, "gdn: the cuda backend cannot combine documents with sequence parallelism yet; "
                        "run documents without --sp, or on the cpu backend\n");
        return -1;
    }
    if (!any) {
        if (m->doc_d) {
            GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream)); /* no pass still reads them */
            GDN_CUDA_CHECK(cudaFree(m->doc_d));
        }
        m->doc_d = m->keylo_d = m->rpos_d = NULL;
        return 0;
    }
    if (m->seq) {
        fprintf(stderr, "gdn: the cuda backend cannot combine documents with sequence parallelism yet; "
                        "run documents without --sp, or on the cpu backend\n");
        return -1;
    }
    int *h = (int *)malloc(3 * N * sizeof(int));
    if (!h) GDN_CUDA_DIE("out of host memory");
    int *doc = h, *keylo = h + N, *rpos = h + 2 * N;
    gdn_doc_build(doc, starts, NULL, m->B, m->T);
    for (int b = 0; b < m->B; b++)
        for (int t = 0; t < m->T; t++) {
            const size_t i = (size_t)b * m->T + t;
            keylo[i] = doc[i] > 0 ? doc[i] : 0;
            rpos[i] = gdn_doc_pos(doc, b, t, m->T, 0); /* in [0, T): the table's rows */
        }
    if (!m->doc_d) {
        GDN_CUDA_CHECK(cudaMalloc((void **)&m->doc_d, 3 * N * sizeof(int)));
        m->keylo_d = m->doc_d + N;
        m->rpos_d = m->doc_d + 2 * N;
    }
    /* ordered before every later pass on the stream; synchronous, so h may go */
    GDN_CUDA_CHECK(cudaMemcpyAsync(m->doc_d, h, 3 * N * sizeof(int), cudaMemcpyHostToDevice, m->stream));
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
    free(h);
    return 0;
}

extern "C" void gdn_cuda_model_set_seq_hooks(gdn_cuda_model *m, const gdn_seq_hooks *hooks) {
    if (!hooks) {
        m->seq = 0;
        gdn_cuda_model_attn_seq(m);
        return;
    }
    if (m->T < m->cfg.conv_width - 1)
        GDN_CUDA_DIE("sequence parallelism: segments of %d tokens are shorter than the convolution halo (%d rows)",
                     m->T, m->cfg.conv_width - 1);
    if (table_has_attn(m->t) && (!hooks->attn_kv_fwd || !hooks->attn_kv_bwd))
        GDN_CUDA_DIE("sequence parallelism: mixers \"%s\" has attention layers; the hooks attn_kv_fwd and "
                     "attn_kv_bwd must be set", gdn_config_mixers(&m->cfg));
    if (hooks->pos0 < 0 || hooks->pos0 > INT_MAX - m->T)
        GDN_CUDA_DIE("sequence parallelism: segment position pos0 = %d (must be >= 0, with pos0 + T in int range)",
                     hooks->pos0);
    if (!hooks->fwd_halo || !hooks->fwd_state_in || !hooks->fwd_state_out || !hooks->bwd_state_out ||
        !hooks->bwd_state_in || !hooks->bwd_halo)
        GDN_CUDA_DIE("sequence parallelism: every hook must be set");
    if (!m->sbuf) seq_alloc(m);
    m->hooks = *hooks;
    m->seq = 1;
    gdn_cuda_model_attn_seq(m); /* RoPE at the segment's positions, the prefix buffers */
}

