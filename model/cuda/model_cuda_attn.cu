/* The attention layers (mixer A) of the CUDA model: the CPU model's model/cpu/model_attn.c on
 * the GPU, with the block's input norm, MLP and residuals shared with the delta-rule layers
 * (model_cuda_fwd.cu, model_cuda_bwd.cu).
 *
 *   qp, kp, v = h1 Wq^T, h1 Wk^T, h1 Wv^T + bv           (cuBLASLt; bv only with qkv_bias)
 *   q, k = rope(qknorm(qp + bq)), rope(qknorm(kp + bk))  (one fused launch, ops_rope.cu; the
 *                                                         norm only with qk_norm)
 *   o = causal GQA attention(q, k, v), scale 1/sqrt(Da)  (attention_cuda.h)
 *   x_mid = x_in + o Wo^T
 * Widths: queries and o H*Da, keys and values Hkv*Da (act, [B,T,heads,Da] rows: the attention
 * kernels' layout, so no copies).
 *
 * Activation memory. Saved per layer: qp and kp (the projections before bias, norm and RoPE),
 * v (with its bias), o, lse [B,H,T] and, with qk_norm, the norms' r. q and k themselves are not
 * kept: the backward recomputes them from qp, kp with the same launch (bitwise the forward's
 * values, so o and lse stay consistent with them), which costs one elementwise pass and saves
 * N*(H+Hkv)*Da act elements per layer. Scratch shared with the delta-rule layers (the model's
 * backward buffers, sized for both kinds): q -> dq1, k -> dk1 in the forward and, in the
 * backward, d_o -> m->d_o, attention's dq, dk, dv -> dqn, dkn, dv, the projections' gradients
 * dqp, dkp -> dq1, dk1 (over the recomputed q, k once the attention backward has read them).
 *
 * Sequence parallelism (hooks set): RoPE runs at the segment's positions pos0.., and the
 * attention reads the keys and values of positions 0 .. pos0+T-1, which attn_kv_fwd gathers into
 * k_all, v_all (kept per layer for the backward); the backward's gradients of all of them go to
 * attn_kv_bwd, which returns this segment's own rows summed over the segments that read them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/cuda/attention_cuda.h"
#include "model/cuda/model_cuda_internal.cuh"
#include "model/cuda/ops_cuda.h"

/* The attention sizes of the model. */
typedef struct {
    int H, Hkv, Da, QW, KW;
} attn_dims;
static attn_dims dims_of(const gdn_config *c) {
    attn_dims d;
    d.H = c->n_heads;
    d.Hkv = gdn_config_kv_heads(c);
    d.Da = gdn_config_attn_dim(c);
    d.QW = d.H * d.Da;
    d.KW = d.Hkv * d.Da;
    return d;
}

/* The q/k preparation of layer l (biases and norm weights from the fp32 parameters). */
static gdn_cuda_qk_prep prep_of(const gdn_cuda_model *m, int l) {
    const gdn_config *c = &m->cfg;
    const attn_dims d = dims_of(c);
    const gdn_layer_offsets *off = &m->t->layer[l];
    const float *P = m->params;
    gdn_cuda_qk_prep s;
    s.B = m->B;
    s.T = m->T;
    s.H = d.H;
    s.Hkv = d.Hkv;
    s.D = d.Da;
    s.norm = c->qk_norm != 0;
    s.eps = (float)c->norm_eps;
    s.rope = m->rope;
    s.pos = m->rpos_d; /* documents: positions from each document's start */
    s.bq = c->qkv_bias ? P + off->q_bias : NULL;
    s.bk = c->qkv_bias ? P + off->k_bias : NULL;
    s.wq = c->qk_norm ? P + off->q_norm : NULL;
    s.wk = c->qk_norm ? P + off->k_norm : NULL;
    return s;
}

/* The attention call of layer l on q, k (the rest from the saved activations). */
static gdn_cuda_attention_args attn_args(const gdn_cuda_model *m, int l, const void *q, const void *k) {
    const attn_dims d = dims_of(&m->cfg);
    const layer_acts *L = &m->L[l];
    gdn_cuda_attention_args a;
    memset(&a, 0, sizeof a);
    a.B = m->B;
    a.T = m->T;
    a.H = d.H;
    a.Hkv = d.Hkv;
    a.D = d.Da;
    a.scale = (float)(1.0 / sqrt((double)d.Da)); /* as the CPU model */
    a.precision = m->p;
    a.q = q;
    a.k = k;
    a.v = L->v;
    a.o = L->o;
    a.lse = L->lse;
    a.stream = m->stream;
    a.key_lo = m->keylo_d; /* documents: block-diagonal causal */
    return a;
}

size_t gdn_cuda_model_attn_workspace(const gdn_cuda_model *m) {
    const attn_dims d = dims_of(&m->cfg);
    gdn_cuda_attention_args a;
    memset(&a, 0, sizeof a);
    a.B = m->B;
    a.T = m->T;
    a.H = d.H;
    a.Hkv = d.Hkv;
    a.D = d.Da;
    size_t ws = gdn_cuda_attention_workspace_bytes(&a);
    gdn_cuda_qk_prep s;
    memset(&s, 0, sizeof s);
    s.B = m->B;
    s.T = m->T;
    s.H = d.H;
    s.Hkv = d.Hkv;
    s.D = d.Da;
    size_t w2 = gdn_cuda_qk_prep_workspace(&s);
    if (w2 > ws) ws = w2;
    w2 = gdn_cuda_bias_grad_workspace(m->N, d.QW); /* QW >= KW */
    return w2 > ws ? w2 : ws;
}

/* The RoPE table of positions pos0 .. pos0+T-1. */
static void rope_fill(gdn_cuda_model *m, int pos0) {
    const int Da = gdn_config_attn_dim(&m->cfg);
    const size_t n = (size_t)m->T * Da;
    float *h = (float *)malloc(n * sizeof(float));
    if (!h) GDN_CUDA_DIE("out of host memory");
    gdn_cuda_rope_table(h, m->T, Da, pos0, gdn_config_rope_theta(&m->cfg));
    GDN_CUDA_CHECK(cudaMemcpyAsync(m->rope, h, n * sizeof(float), cudaMemcpyHostToDevice, m->stream));
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
    free(h);
}

void gdn_cuda_model_attn_setup(gdn_cuda_model *m) {
    if (m->rope) rope_fill(m, 0);
}

void gdn_cuda_model_attn_seq(gdn_cuda_model *m) {
    if (!m->rope) return;
    rope_fill(m, m->seq ? m->hooks.pos0 : 0);
    if (!m->seq) return;
    const int len = m->hooks.pos0 + m->T;
    if (m->kvbuf && m->kv_len == len) return;
    if (m->kvbuf) GDN_CUDA_CHECK(cudaFree(m->kvbuf));
    m->kvbuf = NULL;
    const attn_dims d = dims_of(&m->cfg);
    const size_t n = (size_t)m->B * len * d.KW * gdn_cuda_act_bytes(m->p); /* a multiple of 128 bytes */
    int na = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) na += layer_is_attn(m, l);
    if (cudaMalloc((void **)&m->kvbuf, (2 * (size_t)na + 2) * n) != cudaSuccess) {
        (void)cudaGetLastError();
        GDN_CUDA_DIE("sequence parallelism: cannot allocate %.2f GiB for the keys and values of %d positions "
                     "(%d attention layers + their gradients, %zu bytes each)",
                     (2.0 * na + 2) * n / 1073741824.0, len, na, 2 * n);
    }
    char *p = m->kvbuf;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        if (!layer_is_attn(m, l)) continue;
        m->L[l].k_all = p;
        m->L[l].v_all = p + n;
        p += 2 * n;
    }
    m->dk_all = p;
    m->dv_all = p + n;
    m->kv_len = len;
}

void gdn_cuda_model_attn_forward(gdn_cuda_model *m, int l) {
    const gdn_config *c = &m->cfg;
    const gdn_cuda_precision p = m->p;
    const attn_dims d = dims_of(c);
    const int N = m->N, D = c->d_model;
    const gdn_layer_offsets *off = &m->t->layer[l];
    const layer_acts *L = &m->L[l];
    const float *x = m->x + (size_t)l * N * D;
    float *xm = m->x_mid + (size_t)l * N * D;
    gdn_cuda_blas *bl = m->blas;
    void *s = m->stream, *h1 = m->hs;
    PF(PR_GEMM, gdn_cuda_linear_fwd(bl, p, p, L->qp, h1, wgt(m, off->q_proj), N, D, d.QW, 0.0f);
                gdn_cuda_linear_fwd(bl, p, p, L->kp, h1, wgt(m, off->k_proj), N, D, d.KW, 0.0f);
                gdn_cuda_linear_fwd(bl, p, p, L->v, h1, wgt(m, off->v_proj), N, D, d.KW, 0.0f));
    if (c->qkv_bias) PF(PR_ACT, gdn_cuda_bias_add(p, L->v, m->params + off->v_bias, N, d.KW, s));
    const gdn_cuda_qk_prep qs = prep_of(m, l);
    void *q = m->dq1, *k = m->dk1; /* backward scratch, free during the forward pass */
    PF(PR_NORM, gdn_cuda_qk_prep_fwd(p, &qs, q, L->rq, k, L->rk, L->qp, L->kp, s));
    gdn_cuda_attention_args a = attn_args(m, l, q, k);
    if (m->seq) { /* a segment: the keys and values of the whole prefix */
        void *const all[2] = {L->k_all, L->v_all};
        const void *const own[2] = {k, L->v};
        m->hooks.attn_kv_fwd(m->hooks.user, l, all, own, (size_t)N * d.KW);
        a.Tk = m->kv_len;
        a.k = L->k_all;
        a.v = L->v_all;
    }
    PF(PR_ATTN, gdn_cuda_attention_fwd(&a));
    PF(PR_GEMM, gdn_cuda_linear_fwd_add(bl, p, FP32, xm, L->o, wgt(m, off->o_proj), x, N, d.QW, D));
}

void gdn_cuda_model_attn_backward(gdn_cuda_model *m, int l) {
    const gdn_config *c = &m->cfg;
    const gdn_cuda_precision p = m->p;
    const attn_dims d = dims_of(c);
    const int N = m->N, D = c->d_model;
    const gdn_layer_offsets *off = &m->t->layer[l];
    const layer_acts *L = &m->L[l];
    float *G = m->grads;
    gdn_cuda_blas *bl = m->blas;
    void *s = m->stream, *ws = m->op_ws;
    const void *dres = m->dx_act ? m->dx_act : (const void *)m->dx; /* dL/dx_mid as act */

    /* o_proj: d_o = dres Wo (act: the attention backward's input), dWo += dres^T o */
    PF(PR_GEMM, gdn_cuda_linear_bwd_dx(bl, p, p, m->d_o, dres, D, wgt(m, off->o_proj), N, d.QW, D, 0.0f);
                gdn_cuda_linear_bwd_dw(bl, p, G + off->o_proj, dres, D, L->o, N, d.QW, D));

    /* q, k again (the forward's bits), then the attention backward */
    const gdn_cuda_qk_prep qs = prep_of(m, l);
    PF(PR_NORM, gdn_cuda_qk_prep_fwd(p, &qs, m->dq1, NULL, m->dk1, NULL, L->qp, L->kp, s));
    gdn_cuda_attention_args a = attn_args(m, l, m->dq1, m->dk1);
    a.d_o = m->d_o;
    a.dq = m->dqn;
    a.dk = m->dkn;
    a.dv = m->dv;
    a.workspace = ws;
    if (m->seq) { /* the prefix's keys and values; their gradients summed over the segments */
        a.Tk = m->kv_len;
        a.k = L->k_all;
        a.v = L->v_all;
        a.dk = m->dk_all;
        a.dv = m->dv_all;
    }
    PF(PR_ATTN, gdn_cuda_attention_bwd(&a));
    if (m->seq) {
        void *const dkv[2] = {m->dkn, m->dv}, *const dall[2] = {m->dk_all, m->dv_all};
        m->hooks.attn_kv_bwd(m->hooks.user, l, dkv, dall, (size_t)N * d.KW);
    }

    /* RoPE and the norms backward: the projections' gradients dqp, dkp over the recomputed q, k;
     * the norm weights' gradients */
    PF(PR_NORM, gdn_cuda_qk_prep_bwd(p, &qs, m->dq1, m->dk1, c->qk_norm ? G + off->q_norm : NULL,
                                     c->qk_norm ? G + off->k_norm : NULL, m->dqn, m->dkn, L->qp, L->kp, L->rq, L->rk,
                                     ws, s));
    if (c->qkv_bias)
        PF(PR_ACT, gdn_cuda_bias_grad(p, G + off->q_bias, m->dq1, N, d.QW, ws, s);
                   gdn_cuda_bias_grad(p, G + off->k_bias, m->dk1, N, d.KW, ws, s);
                   gdn_cuda_bias_grad(p, G + off->v_bias, m->dv, N, d.KW, ws, s));

    /* the projections of h1 and the input norm, as every block */
    const block_proj proj[3] = {{m->dq1, d.QW, off->q_proj, d.QW, 0},
                                {m->dk1, d.KW, off->k_proj, d.KW, 0},
                                {m->dv, d.KW, off->v_proj, d.KW, 0}};
    gdn_cuda_model_input_backward(m, l, proj, 3);
}
