/* The CUDA model's forward pass: block by block (model_cuda_internal.cuh), the loss and the
 * logits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/cuda/model_cuda_internal.cuh"

/* The delta rule forward of layer l: o from q, k, v ([N,HV] act, not kept), g, beta (and the
 * entering state from the previous segment under sequence parallelism). */
static void delta_forward(gdn_cuda_model *m, const layer_acts *L, int l, const void *v) {
    const gdn_config *c = &m->cfg;
    const int N = m->N, H = c->n_heads, K = c->head_dim, V = gdn_config_head_v(c);
    const float scale = (float)(1.0 / sqrt((double)K));
    const delta_plan *d = &m->dp;
    const void *q = L->q, *k = L->k, *v_in = v;
    const float *g = L->g, *beta = L->beta; /* NULL where the layer's mixer has none */
    void *o = L->o;
    if (d->packed) {
        if (!d->qk_shared) {
            PF(PR_PACK, gdn_cuda_heads_pack(m->p, m->pq, L->q, N, H, K, d->S, K, d->Kp, 0, m->stream);
                        gdn_cuda_heads_pack(m->p, m->pk, L->k, N, H, K, d->S, K, d->Kp, 0, m->stream));
            q = m->pq;
            k = m->pk;
        }
        if (!d->v_same) {
            PF(PR_PACK, gdn_cuda_heads_pack(m->p, m->pv, v_in, N, H, V, d->S, d->Vs, d->Vp, 1, m->stream));
            v_in = m->pv;
            o = m->po;
        }
        if (g || beta)
            PF(PR_PACK, if (g) gdn_cuda_heads_pack(FP32, L->pg, L->g, N, H, 1, d->S, 1, 1, 0, m->stream);
                        if (beta) gdn_cuda_heads_pack(FP32, L->pbeta, L->beta, N, H, 1, d->S, 1, 1, 0, m->stream));
        g = L->pg;
        beta = L->pbeta;
    }
    void *S_in_ready = m->seq ? m->hooks.fwd_state_in(m->hooks.user, l, NULL, L->S_in, m->n_state) : NULL;
    gdn_cuda_delta_fwd_args da = {};
    da.in = gdn_cuda_delta_in{layer_shape(m, l), m->p, q, k, v_in, g, beta, scale, m->seq ? L->S_in : NULL,
                              m->delta_ws, m->stream, m->doc_d};
    da.h0_ready = S_in_ready;
    da.o = o;
    da.ht = m->seq ? L->S_out : NULL;
    PF(PR_DELTA, gdn_cuda_delta_fwd(&da));
    if (m->seq) m->hooks.fwd_state_out(m->hooks.user, l, L->S_out, m->n_state);
    if (d->packed && !d->v_same)
        PF(PR_PACK, gdn_cuda_heads_unpack(m->p, L->o, m->po, N, H, V, d->S, d->Vs, d->Vp, 1, m->stream));
}

/* Sequence parallelism, forward: this segment's last W-1 pre-convolution rows of q, k, v go to
 * the hooks, the previous segment's come back as the convolution halo. */
static void seq_halo_forward(gdn_cuda_model *m, const layer_acts *L, int l) {
    const int W1 = m->cfg.conv_width - 1, T = m->T;
    const size_t es = gdn_cuda_act_bytes(m->p);
    const void *src[3] = {L->qp, L->kp, L->vp};
    for (int i = 0; i < 3 && W1 > 0; i++) {
        const size_t row = m->n_halo[i] / ((size_t)m->B * W1) * es; /* one row of C elements */
        PF(PR_COPY, GDN_CUDA_CHECK(cudaMemcpy2DAsync(L->tail[i], W1 * row, (const char *)src[i] + (size_t)(T - W1) * row,
                                                     (size_t)T * row, W1 * row, (size_t)m->B,
                                                     cudaMemcpyDeviceToDevice, m->stream)));
    }
    m->hooks.fwd_halo(m->hooks.user, l, L->halo, L->tail, m->n_halo);
}

static void delta_mixer_forward(gdn_cuda_model *m, int l);
static void mlp_forward(gdn_cuda_model *m, int l);

/* Block l: the input norm h1 = rmsnorm(x_in) (into m->hs), the layer's mixer, the MLP. */
static void block_forward(gdn_cuda_model *m, int l) {
    const auto [c, p, N, D, H, K, B, T, V, F, W, HK, HV, off, mx, L] = block_ctx_of(m, l);
    const float *x = m->x + (size_t)l * N * D;
    PF(PR_NORM, gdn_cuda_rmsnorm_fwd(p, m->hs, L->rstd1, x, m->params + off->attn_norm, N, D, (float)c->norm_eps,
                                     m->stream));
    if (layer_is_attn(m, l)) gdn_cuda_model_attn_forward(m, l); /* model_cuda_attn.cu */
    else delta_mixer_forward(m, l);
    mlp_forward(m, l);
}

/* The delta-rule mixer of layer l: from h1 (in m->hs) and x_in to x_mid. */
static void delta_mixer_forward(gdn_cuda_model *m, int l) {
    const auto [c, p, N, D, H, K, B, T, V, F, W, HK, HV, off, mx, L] = block_ctx_of(m, l);
    const float *P = m->params, eps = (float)c->norm_eps;
    const float *x = m->x + (size_t)l * N * D;
    float *xm = m->x_mid + (size_t)l * N * D;
    gdn_cuda_blas *bl = m->blas;
    void *s = m->stream, *h1 = m->hs;
    PF(PR_GEMM, gdn_cuda_linear_fwd(bl, p, p, L->qp, h1, wgt(m, off->q_proj), N, D, HK, 0.0f);
                gdn_cuda_linear_fwd(bl, p, p, L->kp, h1, wgt(m, off->k_proj), N, D, HK, 0.0f);
                gdn_cuda_linear_fwd(bl, p, p, L->vp, h1, wgt(m, off->v_proj), N, D, HV, 0.0f);
                gdn_cuda_linear_fwd(bl, p, p, L->zp, h1, wgt(m, off->g_proj), N, D, HV, 0.0f);
                /* the gate projections this layer's mixer has (model/mixer.h) */
                if (mx->has_decay) gdn_cuda_linear_fwd(bl, p, FP32, L->ap, h1, wgt(m, off->a_proj), N, D, H, 0.0f);
                if (mx->has_beta) gdn_cuda_linear_fwd(bl, p, FP32, L->bp, h1, wgt(m, off->b_proj), N, D, H, 0.0f));

    if (m->seq) seq_halo_forward(m, L, l);
    const void *const *halo = m->seq ? (const void *const *)L->halo : NULL;
    void *tmp = m->dq1, *vy = m->dvp; /* backward scratch, free during the forward pass; vy holds v,
                                          then y (neither is kept: the backward recomputes both) */
    PF(PR_CONV, gdn_cuda_conv_fwd(p, GDN_CUDA_CONV_SILU, tmp, L->qp, P + off->q_conv, halo ? halo[0] : NULL, m->doc_d, B, T, HK, W, s));
    PF(PR_NORM, gdn_cuda_l2norm_fwd(p, L->q, L->rq, tmp, N * H, K, s));
    PF(PR_CONV, gdn_cuda_conv_fwd(p, GDN_CUDA_CONV_SILU, tmp, L->kp, P + off->k_conv, halo ? halo[1] : NULL, m->doc_d, B, T, HK, W, s));
    PF(PR_NORM, gdn_cuda_l2norm_fwd(p, L->k, L->rk, tmp, N * H, K, s));
    PF(PR_CONV, gdn_cuda_conv_fwd(p, GDN_CUDA_CONV_SILU, vy, L->vp, P + off->v_conv, halo ? halo[2] : NULL, m->doc_d, B, T, HV, W, s));
    if (mx->has_decay || mx->has_beta)
        PF(PR_ACT, if (mx->has_decay) gdn_cuda_decay_gate_fwd(L->g, L->ap, P + off->A_log, P + off->dt_bias, N, H, s);
                   if (mx->has_beta) gdn_cuda_beta_fwd(L->beta, L->bp, beta_scale(c), (size_t)N * H, s));

    delta_forward(m, L, l, vy);

    PF(PR_NORM, gdn_cuda_gated_rmsnorm_fwd(p, vy, L->rstd_o, L->o, L->zp, P + off->o_norm, N * H, V, eps, s));
    PF(PR_GEMM, gdn_cuda_linear_fwd_add(bl, p, FP32, xm, vy, wgt(m, off->o_proj), x, N, HV, D));
}

/* The MLP of block l (every mixer): x_in[l+1] = x_mid + down(silu(gate(h2)) * up(h2)). */
static void mlp_forward(gdn_cuda_model *m, int l) {
    const auto [c, p, N, D, H, K, B, T, V, F, W, HK, HV, off, mx, L] = block_ctx_of(m, l);
    const float *P = m->params, eps = (float)c->norm_eps;
    const float *xm = m->x_mid + (size_t)l * N * D;
    float *xo = m->x + (size_t)(l + 1) * N * D;
    gdn_cuda_blas *bl = m->blas;
    void *s = m->stream;
    void *h2 = m->hs, *mm = m->dgu; /* mm: backward scratch, free during the forward pass */
    PF(PR_NORM, gdn_cuda_rmsnorm_fwd(p, h2, L->rstd2, xm, P + off->mlp_norm, N, D, eps, s));
    PF(PR_GEMM, gdn_cuda_linear_fwd(bl, p, p, L->gp, h2, wgt(m, off->gate_proj), N, D, F, 0.0f);
                gdn_cuda_linear_fwd(bl, p, p, L->up, h2, wgt(m, off->up_proj), N, D, F, 0.0f));
    PF(PR_ACT, gdn_cuda_swiglu_fwd(p, mm, L->gp, L->up, (size_t)N * F, s));
    PF(PR_GEMM, gdn_cuda_linear_fwd_add(bl, p, FP32, xo, mm, wgt(m, off->down_proj), xm, N, F, D));
}

/* The forward pass to the logits: tokens checked and uploaded, every block, final norm, head;
 * with targets, their upload and (grad_scale != 0) the embedding backward's plan. */
static void forward_logits(gdn_cuda_model *m, const int *tokens, const int *targets, float grad_scale) {
    const gdn_config *c = &m->cfg;
    const int N = m->N, D = c->d_model, nL = c->n_layers, Vv = c->vocab_size;
    for (int i = 0; i < N; i++) {
        if (tokens[i] < 0 || tokens[i] >= Vv)
            GDN_CUDA_DIE("token id %d at position %d is outside the vocabulary [0, %d)", tokens[i], i, Vv);
        if (targets && targets[i] >= Vv)
            GDN_CUDA_DIE("cross-entropy: target %d of row %d is outside the vocabulary [0, %d); check that the "
                         "data was tokenised with the model's vocab_size", targets[i], i, Vv);
    }
    if (m->seq && (m->doc_d || (m->doc_row0 && m->hooks.pos0 > 0)))
        GDN_CUDA_DIE("the cuda backend cannot combine documents with sequence parallelism yet; run documents "
                     "without sequence parallelism, or on the cpu backend");
    m->has_grad = 0;
    m->has_logits = 0;
    m->has_fwd = 1; /* x is overwritten from here on: whatever follows, it is this pass's */
    GDN_CUDA_CHECK(cudaMemcpyAsync(m->tokens_d, tokens, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, m->stream));
    m->prof_phase = 0;
    PF(PR_EMBED, gdn_cuda_embed_fwd(m->x, m->tokens_d, m->params + m->t->embed, N, D, m->stream));
    for (int l = 0; l < nL; l++) block_forward(m, l);
    const float *xf = m->x + (size_t)nL * N * D;
    PF(PR_NORM, gdn_cuda_rmsnorm_fwd(m->p, m->hf, m->rstdf, xf, m->params + m->t->final_norm, N, D,
                                     (float)c->norm_eps, m->stream));
    PF(PR_GEMM, gdn_cuda_linear_fwd(m->blas, m->p, m->p, m->logits, m->hf, wgt(m, m->t->lm_head), N, D, Vv, 0.0f));
    if (!targets) return;
    GDN_CUDA_CHECK(cudaMemcpyAsync(m->targets_d, targets, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, m->stream));
    if (grad_scale != 0.0f) { /* the embedding backward's plan, while the GPU runs */
        m->n_seg = gdn_cuda_embed_plan(tokens, N, Vv, m->perm_h, m->seg_start_h, m->seg_token_h);
        GDN_CUDA_CHECK(cudaMemcpyAsync(m->perm_d, m->perm_h, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, m->stream));
        GDN_CUDA_CHECK(cudaMemcpyAsync(m->seg_start_d, m->seg_start_h, ((size_t)m->n_seg + 1) * sizeof(int),
                                       cudaMemcpyHostToDevice, m->stream));
        GDN_CUDA_CHECK(cudaMemcpyAsync(m->seg_token_d, m->seg_token_h, (size_t)m->n_seg * sizeof(int),
                                       cudaMemcpyHostToDevice, m->stream));
    }
}

extern "C" double gdn_cuda_model_forward(gdn_cuda_model *m, const int *tokens, const int *targets, float grad_scale,
                                         int *n_valid) {
    const int N = m->N, Vv = m->cfg.vocab_size;
    forward_logits(m, tokens, targets, grad_scale);
    if (n_valid) *n_valid = 0;
    if (!targets) {
        GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
        m->has_logits = 1;
        return 0.0;
    }
    PF(PR_LOSS, gdn_cuda_cross_entropy(m->p, grad_scale != 0.0f ? m->logits : NULL, m->logits, m->targets_d, N, Vv,
                                       grad_scale, m->loss_d, m->nvalid_d, m->op_ws, m->stream));
    double loss = 0.0;
    int nv = 0;
    GDN_CUDA_CHECK(cudaMemcpyAsync(&loss, m->loss_d, sizeof loss, cudaMemcpyDeviceToHost, m->stream));
    GDN_CUDA_CHECK(cudaMemcpyAsync(&nv, m->nvalid_d, sizeof nv, cudaMemcpyDeviceToHost, m->stream));
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
    if (n_valid) *n_valid = nv;
    m->has_grad = grad_scale != 0.0f;
    m->has_logits = !m->has_grad;
    return loss;
}

/* The distillation scratch (device floats, made at the first use): the teacher's logits [N,V]
 * or a mixer's target [N,D]. */
static float *distill_buf(gdn_cuda_model *m) {
    if (!m->distill) {
        const size_t V = (size_t)m->cfg.vocab_size, D = (size_t)m->cfg.d_model;
        const size_t n = (size_t)m->N * (V > D ? V : D);
        if (cudaMalloc((void **)&m->distill, n * sizeof(float)) != cudaSuccess) {
            (void)cudaGetLastError();
            GDN_CUDA_DIE("distillation: cannot allocate %.2f GiB for the teacher's logits (%d tokens x %zu)",
                         n * 4.0 / 1073741824.0, m->N, V > D ? V : D);
        }
    }
    return m->distill;
}

extern "C" double gdn_cuda_model_forward_kl(gdn_cuda_model *m, const int *tokens, const int *targets,
                                            const float *teacher, gdn_cuda_model *teacher_model, double tau,
                                            double ce_weight, float grad_scale, int *n_valid, double *kl_sum,
                                            double *ce_sum) {
    const int N = m->N, Vv = m->cfg.vocab_size;
    if (!targets) GDN_CUDA_DIE("gdn_cuda_model_forward_kl needs targets (the rows to distil)");
    if (!(tau > 0)) GDN_CUDA_DIE("distillation loss: the temperature must be > 0 (got %g)", tau);
    if (!teacher == !teacher_model) GDN_CUDA_DIE("gdn_cuda_model_forward_kl: give the teacher's logits or its model");
    float *zt = distill_buf(m);
    if (teacher) {
        GDN_CUDA_CHECK(cudaMemcpyAsync(zt, teacher, (size_t)N * Vv * sizeof(float), cudaMemcpyHostToDevice, m->stream));
    } else { /* widen the teacher's logits in place on the GPU, after its forward */
        const gdn_cuda_model *t = teacher_model;
        if (t->N != N || t->cfg.vocab_size != Vv)
            GDN_CUDA_DIE("distillation loss: the teacher has %d tokens x %d ids per micro-batch, the student %d x %d",
                         t->N, t->cfg.vocab_size, N, Vv);
        if (!t->has_logits) GDN_CUDA_DIE("distillation loss: the teacher has no logits (run its forward with grad_scale 0)");
        GDN_CUDA_CHECK(cudaStreamSynchronize(t->stream));
        gdn_cuda_from_act(t->p, zt, t->logits, (size_t)N * Vv, m->stream);
    }
    forward_logits(m, tokens, targets, grad_scale);
    double *kl_d = m->loss_d, *ce_d = m->gnorm_d; /* two device doubles free during a forward */
    PF(PR_LOSS, gdn_cuda_distill_loss(m->p, grad_scale != 0.0f ? m->logits : NULL, m->logits, zt, m->targets_d, N, Vv,
                                      (float)tau, (float)ce_weight, grad_scale, kl_d, ce_d, m->nvalid_d, m->op_ws,
                                      m->stream));
    double kl = 0.0, ce = 0.0;
    int nv = 0;
    GDN_CUDA_CHECK(cudaMemcpyAsync(&kl, kl_d, sizeof kl, cudaMemcpyDeviceToHost, m->stream));
    GDN_CUDA_CHECK(cudaMemcpyAsync(&ce, ce_d, sizeof ce, cudaMemcpyDeviceToHost, m->stream));
    GDN_CUDA_CHECK(cudaMemcpyAsync(&nv, m->nvalid_d, sizeof nv, cudaMemcpyDeviceToHost, m->stream));
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
    if (n_valid) *n_valid = nv;
    if (kl_sum) *kl_sum = kl;
    if (ce_sum) *ce_sum = ce;
    m->has_grad = grad_scale != 0.0f;
    m->has_logits = !m->has_grad;
    return tau * tau * kl + ce_weight * ce;
}

extern "C" void gdn_cuda_model_download_mid(gdn_cuda_model *m, int layer, float *out) {
    if (layer < 0 || layer >= m->cfg.n_layers)
        GDN_CUDA_DIE("gdn_cuda_model_download_mid: layer %d requested; the model has 0 to %d", layer,
                     m->cfg.n_layers - 1);
    if (!m->has_fwd) GDN_CUDA_DIE("gdn_cuda_model_download_mid needs a forward pass first");
    const size_t n = (size_t)m->N * m->cfg.d_model;
    GDN_CUDA_CHECK(cudaMemcpyAsync(out, m->x_mid + (size_t)layer * n, n * sizeof(float), cudaMemcpyDeviceToHost,
                                   m->stream));
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

/* Block l's input norm and mixer alone (no MLP): x_mid from x_in (m->x + l*N*D). */
static void mixer_forward(gdn_cuda_model *m, int l) {
    const auto [c, p, N, D, H, K, B, T, V, F, W, HK, HV, off, mx, L] = block_ctx_of(m, l);
    const float *x = m->x + (size_t)l * N * D;
    PF(PR_NORM, gdn_cuda_rmsnorm_fwd(p, m->hs, L->rstd1, x, m->params + off->attn_norm, N, D, (float)c->norm_eps,
                                     m->stream));
    if (layer_is_attn(m, l)) gdn_cuda_model_attn_forward(m, l);
    else delta_mixer_forward(m, l);
}

extern "C" double gdn_cuda_model_mixer_mse(gdn_cuda_model *m, int l, const float *x_in, const float *target,
                                           const gdn_cuda_model *teacher, float grad_scale) {
    const int nL = m->cfg.n_layers;
    if (l < 0 || l >= nL) GDN_CUDA_DIE("gdn_cuda_model_mixer_mse: layer %d (the model has 0 to %d)", l, nL - 1);
    if (m->seq)
        GDN_CUDA_DIE("gdn_cuda_model_mixer_mse: a teacher-forced mixer runs on whole sequences, not under "
                     "sequence-parallel hooks");
    const size_t n = (size_t)m->N * m->cfg.d_model;
    float *x = m->x + (size_t)l * n, *xm = m->x_mid + (size_t)l * n;
    float *tg = teacher ? NULL : distill_buf(m); /* the target through the host */
    m->has_grad = 0;
    m->has_logits = 0;
    m->has_fwd = 1;
    const float *t_mid = NULL, *t_in = NULL; /* with a teacher model: its mixer output and input */
    if (teacher) {
        if (x_in || target)
            GDN_CUDA_DIE("teacher-forced mixer: give either the stream x_in and the target or the teacher's model");
        if (teacher->N != m->N || teacher->cfg.d_model != m->cfg.d_model || l >= teacher->cfg.n_layers)
            GDN_CUDA_DIE("teacher-forced mixer: the teacher has %d tokens of width %d and %d layers, the student %d "
                         "tokens of width %d (layer %d)", teacher->N, teacher->cfg.d_model, teacher->cfg.n_layers,
                         m->N, m->cfg.d_model, l);
        if (!teacher->has_fwd) GDN_CUDA_DIE("teacher-forced mixer: the teacher has not run a forward pass");
        t_in = teacher->x + (size_t)l * n;
        t_mid = teacher->x_mid + (size_t)l * n;
        GDN_CUDA_CHECK(cudaStreamSynchronize(teacher->stream));
        GDN_CUDA_CHECK(cudaMemcpyAsync(x, t_in, n * sizeof(float), cudaMemcpyDeviceToDevice, m->stream));
    } else {
        if (!x_in || !target)
            GDN_CUDA_DIE("teacher-forced mixer: give either the stream x_in and the target or the teacher's model");
        GDN_CUDA_CHECK(cudaMemcpyAsync(x, x_in, n * sizeof(float), cudaMemcpyHostToDevice, m->stream));
        GDN_CUDA_CHECK(cudaMemcpyAsync(tg, target, n * sizeof(float), cudaMemcpyHostToDevice, m->stream));
    }
    mixer_forward(m, l);
    /* e = (x_mid - x_in) - target, target = t_mid - t_in with a teacher model */
    gdn_cuda_mixer_error(m->dx, xm, x, tg, t_mid, t_in, n, m->stream);
    gdn_cuda_grad_sumsq(m->loss_d, m->dx, n, m->op_ws, m->stream);
    double sse = 0.0;
    GDN_CUDA_CHECK(cudaMemcpyAsync(&sse, m->loss_d, sizeof sse, cudaMemcpyDeviceToHost, m->stream));
    if (grad_scale != 0.0f) { /* dL/dx_mid = 2 grad_scale e, then the mixer's backward */
        gdn_cuda_grad_scale(m->dx, n, 2.0f * grad_scale, m->stream);
        if (m->dx_act) gdn_cuda_to_act(m->p, m->dx_act, m->dx, n, m->stream);
        gdn_cuda_model_mixer_backward(m, l);
    }
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
    return sse;
}

extern "C" void gdn_cuda_model_download_logits(gdn_cuda_model *m, float *logits) {
    if (!m->has_logits) GDN_CUDA_DIE("gdn_cuda_model_download_logits needs a forward pass run with grad_scale = 0");
    const size_t n = (size_t)m->N * m->cfg.vocab_size;
    if (m->p == FP32) {
        GDN_CUDA_CHECK(cudaMemcpy(logits, m->logits, n * sizeof(float), cudaMemcpyDeviceToHost));
        return;
    }
    /* widen bf16 on the host: a bf16 is the top half of a float */
    uint16_t *tmp = (uint16_t *)malloc(n * sizeof(uint16_t));
    if (!tmp) GDN_CUDA_DIE("out of host memory");
    GDN_CUDA_CHECK(cudaMemcpy(tmp, m->logits, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)tmp[i] << 16;
        memcpy(&logits[i], &u, sizeof u);
    }
    free(tmp);
}

extern "C" void gdn_cuda_model_download_hidden(gdn_cuda_model *m, int layer, float *out) {
    const int nL = m->cfg.n_layers;
    if (layer < -1 || layer >= nL)
        GDN_CUDA_DIE("gdn_cuda_model_download_hidden: layer %d requested; the model has -1 (the embedding's "
                     "output) to %d", layer, nL - 1);
    if (!m->has_fwd) GDN_CUDA_DIE("gdn_cuda_model_download_hidden needs a forward pass first");
    const size_t n = (size_t)m->N * m->cfg.d_model; /* x[layer + 1]: the stream after block `layer` */
    GDN_CUDA_CHECK(cudaMemcpyAsync(out, m->x + (size_t)(layer + 1) * n, n * sizeof(float), cudaMemcpyDeviceToHost,
                                   m->stream));
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
}
