/* The CUDA model's backward pass: the blocks in reverse, reporting completed gradient ranges. */
#include <math.h>

#include "model/cuda/model_cuda_internal.cuh"

/* ---- backward ------------------------------------------------------------------------------------------ */
/* The delta rule backward of layer l: dqn, dkn, dv (act), dg, dbeta from d_o (and the gradient of
 * the leaving state from the next segment under sequence parallelism); v as recomputed. */
static void delta_backward(gdn_cuda_model *m, const layer_acts *L, int l, const void *v_in) {
    const gdn_config *c = &m->cfg;
    const int N = m->N, H = c->n_heads, K = c->head_dim, V = gdn_config_head_v(c);
    const float scale = (float)(1.0 / sqrt((double)K));
    const delta_plan *d = &m->dp;
    const void *q = L->q, *k = L->k, *v = v_in, *d_o = m->d_o;
    const float *g = L->g, *beta = L->beta; /* NULL where the layer's mixer has none: no gradient */
    void *dq = m->dqn, *dk = m->dkn, *dv = m->dv;
    float *dg = g ? m->dg : NULL, *dbeta = beta ? m->dbeta : NULL;
    if (d->packed) {
        if (!d->qk_shared) { /* repacked: cheaper than keeping the padded copies of every layer */
            PF(PR_PACK, gdn_cuda_heads_pack(m->p, m->pq, L->q, N, H, K, d->S, K, d->Kp, 0, m->stream);
                        gdn_cuda_heads_pack(m->p, m->pk, L->k, N, H, K, d->S, K, d->Kp, 0, m->stream));
            q = m->pq;
            k = m->pk;
            dq = m->pdq;
            dk = m->pdk;
        }
        if (!d->v_same) {
            PF(PR_PACK, gdn_cuda_heads_pack(m->p, m->pv, v_in, N, H, V, d->S, d->Vs, d->Vp, 1, m->stream);
                        gdn_cuda_heads_pack(m->p, m->po, m->d_o, N, H, V, d->S, d->Vs, d->Vp, 1, m->stream));
            v = m->pv;
            d_o = m->po;
            dv = m->pdv;
        }
        g = L->pg; /* packed gates: saved by the forward */
        beta = L->pbeta;
        dg = g ? m->pdg : NULL;
        dbeta = beta ? m->pdbeta : NULL;
    }
    void *dS_out_ready = m->seq ? m->hooks.bwd_state_out(m->hooks.user, l, NULL, m->dS_out, m->n_state) : NULL;
    gdn_cuda_delta_bwd_args da = {};
    da.in = gdn_cuda_delta_in{layer_shape(m, l), m->p, q, k, v, g, beta, scale, m->seq ? L->S_in : NULL,
                              m->delta_ws, m->stream, m->doc_d};
    da.d_o = d_o;
    da.dht = m->seq ? m->dS_out : NULL;
    da.dht_ready = dS_out_ready;
    da.dq = dq;
    da.dk = dk;
    da.dv = dv;
    da.dg = dg;
    da.dbeta = dbeta;
    da.dh0 = m->seq ? L->dS_in : NULL;
    PF(PR_DELTA, gdn_cuda_delta_bwd(&da));
    if (m->seq) m->hooks.bwd_state_in(m->hooks.user, l, L->dS_in, m->n_state);
    if (!d->packed) return;
    PF(PR_PACK, if (!d->qk_shared) {
                    gdn_cuda_heads_unpack(m->p, m->dqn, m->pdq, N, H, K, d->S, K, d->Kp, 0, m->stream);
                    gdn_cuda_heads_unpack(m->p, m->dkn, m->pdk, N, H, K, d->S, K, d->Kp, 0, m->stream);
                }
                if (!d->v_same) gdn_cuda_heads_unpack(m->p, m->dv, m->pdv, N, H, V, d->S, d->Vs, d->Vp, 1, m->stream);
                if (dg) gdn_cuda_heads_unpack(FP32, m->dg, m->pdg, N, H, 1, d->S, 1, 1, 0, m->stream);
                if (dbeta) gdn_cuda_heads_unpack(FP32, m->dbeta, m->pdbeta, N, H, 1, d->S, 1, 1, 0, m->stream));
}

/* Sequence parallelism, backward: the gradients of the halo rows go to the hooks, and those of
 * this segment's tail rows (from the next segment) are added to dqp, dkp, dvp (rows ld apart). */
static void seq_halo_backward(gdn_cuda_model *m, const layer_acts *L, int l, void *const dx[3], int ld) {
    const int W1 = m->cfg.conv_width - 1;
    m->hooks.bwd_halo(m->hooks.user, l, L->dtail, L->dhalo, m->n_halo);
    for (int i = 0; i < 3 && W1 > 0; i++) {
        const size_t C = m->n_halo[i] / ((size_t)m->B * W1), es = gdn_cuda_act_bytes(m->p);
        PF(PR_COPY, gdn_cuda_add_strided(m->p, (char *)dx[i] + (size_t)(m->T - W1) * ld * es, (size_t)m->T * ld,
                                         (size_t)ld, L->dtail[i], C, (size_t)W1, m->B, m->stream));
    }
}

static void block_backward(gdn_cuda_model *m, int l) {
    const auto [c, p, N, D, H, K, B, T, V, F, W, HK, HV, off, mx, L] = block_ctx_of(m, l);
    const float *P = m->params;
    float *G = m->grads;
    const float *xm = m->x_mid + (size_t)l * N * D;
    gdn_cuda_blas *bl = m->blas;
    void *s = m->stream, *ws = m->op_ws;
    const void *dres = m->dx_act ? m->dx_act : (const void *)m->dx; /* the residual gradient as act */

    /* MLP: dx holds dL/dx_in[l+1] = dL/dx_mid through the residual. mm = silu(gp) up and h2 are
     * recomputed (bitwise as in the forward) into scratch. */
    void *mm = m->dgu, *hs = m->hs;
    PF(PR_ACT, gdn_cuda_swiglu_fwd(p, mm, L->gp, L->up, (size_t)N * F, s));
    PF(PR_GEMM, gdn_cuda_linear_bwd_dx(bl, p, p, m->dm, dres, D, wgt(m, off->down_proj), N, F, D, 0.0f);
                gdn_cuda_linear_bwd_dw(bl, p, G + off->down_proj, dres, D, mm, N, F, D));
    /* the gradients of gate_proj's and up_proj's outputs side by side in the rows of dgu [N,2F]:
     * their weights are adjacent, so the input gradient is one product of inner width 2F */
    char *dgp = (char *)m->dgu, *dup = dgp + (size_t)F * gdn_cuda_act_bytes(p);
    PF(PR_ACT, gdn_cuda_swiglu_bwd(p, dgp, dup, 2 * F, m->dm, L->gp, L->up, N, F, s));
    PF(PR_NORM, gdn_cuda_rmsnorm_fwd(p, hs, L->rstd2, xm, P + off->mlp_norm, N, D, (float)c->norm_eps, s));
    const block_proj proj[2] = {{dgp, 2 * F, off->gate_proj, F, 0}, {dup, 2 * F, off->up_proj, F, 1}};
    gdn_cuda_model_proj_backward(m, proj, 2, hs);
    PF(PR_NORM, gdn_cuda_rmsnorm_bwd(p, m->dx, 1, m->dx_act, G + off->mlp_norm, m->dh, xm, P + off->mlp_norm,
                                     L->rstd2, N, D, ws, s));
    gdn_cuda_model_mixer_backward(m, l);
}

void gdn_cuda_model_mixer_backward(gdn_cuda_model *m, int l) {
    const auto [c, p, N, D, H, K, B, T, V, F, W, HK, HV, off, mx, L] = block_ctx_of(m, l);
    const float *P = m->params;
    float *G = m->grads;
    gdn_cuda_blas *bl = m->blas;
    void *s = m->stream, *ws = m->op_ws;
    const void *dres = m->dx_act ? m->dx_act : (const void *)m->dx; /* dL/dx_mid as act */
    if (layer_is_attn(m, l)) { /* the attention mixer (model_cuda_attn.cu), then the same input backward */
        gdn_cuda_model_attn_backward(m, l);
        return;
    }

    /* v = silu(conv(vp)) again, bitwise as the forward computed it, into dvp (free since the
     * previous block's input GEMMs read it): on the side stream, a memory-bound kernel beside
     * o_proj's GEMMs, except while a step is profiled (then every launch is timed alone). */
    const int sq = m->seq;
    cudaStream_t vs = m->prof_on ? m->stream : m->side;
    if (vs != m->stream) {
        GDN_CUDA_CHECK(cudaEventRecord(m->side_ev[0], m->stream));
        GDN_CUDA_CHECK(cudaStreamWaitEvent(vs, m->side_ev[0], 0));
    }
    PF(PR_CONV, gdn_cuda_conv_fwd(p, GDN_CUDA_CONV_SILU, m->dvp, L->vp, P + off->v_conv, sq ? L->halo[2] : NULL,
                                  m->doc_d, B, T, HV, W, vs));
    if (vs != m->stream) GDN_CUDA_CHECK(cudaEventRecord(m->side_ev[1], vs));

    /* Mixer output: o_proj, gated norm. The gated norm's backward writes its forward output y
     * again (into dv, free until the delta rule's backward), for o_proj's weight gradient. */
    PF(PR_GEMM, gdn_cuda_linear_bwd_dx(bl, p, p, m->dyo, dres, D, wgt(m, off->o_proj), N, HV, D, 0.0f));
    PF(PR_NORM, gdn_cuda_gated_rmsnorm_bwd(p, m->d_o, m->dz, m->dv, G + off->o_norm, m->dyo, L->o, L->zp,
                                           P + off->o_norm, L->rstd_o, N * H, V, ws, s));
    PF(PR_GEMM, gdn_cuda_linear_bwd_dw(bl, p, G + off->o_proj, dres, D, m->dv, N, HV, D));

    if (vs != m->stream) GDN_CUDA_CHECK(cudaStreamWaitEvent(m->stream, m->side_ev[1], 0));
    delta_backward(m, L, l, m->dvp);

    /* The output gradients of the projections q, k, v, a, b go side by side into dproj (columns in
     * their weights' order), so that their input gradient is one GEMM below. */
    const size_t es = gdn_cuda_act_bytes(p);
    const int ld = m->ldp;
    char *dqp = (char *)m->dproj, *dkp = dqp + (size_t)HK * es, *dvp = dkp + (size_t)HK * es;
    char *dap = dvp + (size_t)HV * es, *dbp = dap + (mx->has_decay ? (size_t)H * es : 0);

    /* q, k: L2 norm, then SiLU and convolution (one op, recomputing the convolution); v: SiLU and
     * convolution; then the gates. */
    PF(PR_NORM, gdn_cuda_l2norm_bwd(p, m->dq1, m->dqn, L->q, L->rq, N * H, K, s));
    PF(PR_CONV, gdn_cuda_conv_bwd(p, GDN_CUDA_CONV_SILU, dqp, ld, G + off->q_conv, sq ? L->dhalo[0] : NULL, m->dq1,
                                  L->qp, P + off->q_conv, sq ? L->halo[0] : NULL, m->doc_d, B, T, HK, W, ws, s));
    PF(PR_NORM, gdn_cuda_l2norm_bwd(p, m->dk1, m->dkn, L->k, L->rk, N * H, K, s));
    PF(PR_CONV, gdn_cuda_conv_bwd(p, GDN_CUDA_CONV_SILU, dkp, ld, G + off->k_conv, sq ? L->dhalo[1] : NULL, m->dk1,
                                  L->kp, P + off->k_conv, sq ? L->halo[1] : NULL, m->doc_d, B, T, HK, W, ws, s));
    PF(PR_CONV, gdn_cuda_conv_bwd(p, GDN_CUDA_CONV_SILU, dvp, ld, G + off->v_conv, sq ? L->dhalo[2] : NULL, m->dv,
                                  L->vp, P + off->v_conv, sq ? L->halo[2] : NULL, m->doc_d, B, T, HV, W, ws, s));
    if (sq) {
        void *const dx[3] = {dqp, dkp, dvp};
        seq_halo_backward(m, L, l, dx, ld);
    }
    if (mx->has_decay || mx->has_beta)
        PF(PR_ACT, if (mx->has_decay)
                       gdn_cuda_decay_gate_bwd(p, dap, ld, G + off->A_log, G + off->dt_bias, m->dg, L->ap,
                                               P + off->A_log, P + off->dt_bias, N, H, ws, s);
                   if (mx->has_beta) gdn_cuda_beta_bwd(p, dbp, ld, m->dbeta, L->beta, beta_scale(c), N, H, s));

    /* The projections of h1 (four to six, by mixer) as three products: the gates a, b first (the
     * first product writes dh without reading it, which saves most where the product reads little
     * else), then q, k, v (inner width 2 HK + HV: with the gates' columns it would not be a multiple
     * of 8, which cuBLASLt runs on slower kernels), then g; then the block's input norm. */
    block_proj proj[6];
    int n_proj = 0;
    if (mx->has_decay) proj[n_proj++] = {dap, ld, off->a_proj, H, 0};
    if (mx->has_beta) proj[n_proj++] = {dbp, ld, off->b_proj, H, n_proj > 0};
    proj[n_proj++] = {dqp, ld, off->q_proj, HK, 0};
    proj[n_proj++] = {dkp, ld, off->k_proj, HK, 1};
    proj[n_proj++] = {dvp, ld, off->v_proj, HV, 1};
    proj[n_proj++] = {m->dz, HV, off->g_proj, HV, 0};
    gdn_cuda_model_input_backward(m, l, proj, n_proj);
}

void gdn_cuda_model_input_backward(gdn_cuda_model *m, int l, const block_proj *proj, int n_proj) {
    const gdn_config *c = &m->cfg;
    const gdn_cuda_precision p = m->p;
    const int N = m->N, D = c->d_model;
    const gdn_layer_offsets *off = &m->t->layer[l];
    const layer_acts *L = &m->L[l];
    const float *P = m->params, *x = m->x + (size_t)l * N * D;
    float *G = m->grads;
    void *s = m->stream, *ws = m->op_ws, *hs = m->hs;
    PF(PR_NORM, gdn_cuda_rmsnorm_fwd(p, hs, L->rstd1, x, P + off->attn_norm, N, D, (float)c->norm_eps, s));
    gdn_cuda_model_proj_backward(m, proj, n_proj, hs);
    PF(PR_NORM, gdn_cuda_rmsnorm_bwd(p, m->dx, 1, m->dx_act, G + off->attn_norm, m->dh, x, P + off->attn_norm,
                                     L->rstd1, N, D, ws, s));
}

void gdn_cuda_model_proj_backward(gdn_cuda_model *m, const block_proj *proj, int n_proj, const void *h) {
    const int N = m->N, D = m->cfg.d_model;
    const gdn_cuda_precision p = m->p;
    const size_t es = gdn_cuda_act_bytes(p);
    for (int i = 0, j; i < n_proj; i = j) {
        /* proj[i .. j) as one product: each next weight starts where the previous one ends, in the
         * flat buffer and in its GEMM copy, and each next dy where the previous one's columns end */
        int out = proj[i].out;
        for (j = i + 1; j < n_proj && proj[j].join; j++) {
            const block_proj *a = &proj[j - 1], *b = &proj[j];
            const size_t wn = (size_t)a->out * D;
            if (b->ld != a->ld || b->dy != (const char *)a->dy + (size_t)a->out * es || b->w != a->w + wn ||
                wgt(m, b->w) != (const char *)wgt(m, a->w) + wn * (m->wact ? 2 : sizeof(float)))
                break;
            out += b->out;
        }
        PF(PR_GEMM, gdn_cuda_linear_bwd_dx(m->blas, p, FP32, m->dh, proj[i].dy, proj[i].ld, wgt(m, proj[i].w), N, D,
                                           out, i ? 1.0f : 0.0f);
                    gdn_cuda_linear_bwd_dw(m->blas, p, m->grads + proj[i].w, proj[i].dy, proj[i].ld, h, N, D, out));
    }
}

/* Where block l's tensors start in the flat buffer (the table adds a block's tensors together);
 * the tensors its mixer has not (GDN_NO_TENSOR) are skipped. */
#define LAYER_OFFSET_(field, ...) o->field,
static size_t layer_start(const gdn_param_table *t, int l) {
    const gdn_layer_offsets *o = &t->layer[l];
    const size_t f[] = {GDN_LAYER_TENSORS(LAYER_OFFSET_)};
    size_t lo = GDN_NO_TENSOR;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i] != GDN_NO_TENSOR && f[i] < lo) lo = f[i];
    if (lo == GDN_NO_TENSOR) GDN_CUDA_DIE("parameter table: block %d has no tensors", l);
    return lo;
}
#undef LAYER_OFFSET_

/* Whether the table is laid out as embedding | block 0 | ... | block L-1 | final norm [| head],
 * which the backward's completed ranges assume (otherwise all of it is reported at the end). */
static int grads_in_order(const gdn_param_table *t) {
    size_t prev = 0;
    if (t->embed != 0) return 0;
    for (int l = 0; l < t->cfg.n_layers; l++) {
        size_t s = layer_start(t, l);
        if (s <= prev) return 0;
        prev = s;
    }
    return t->final_norm > prev && (t->lm_head == t->embed || t->lm_head > t->final_norm);
}

extern "C" void gdn_cuda_model_backward(gdn_cuda_model *m) { gdn_cuda_model_backward_ready(m, NULL, NULL); }

extern "C" void gdn_cuda_model_backward_ready(gdn_cuda_model *m, gdn_cuda_grads_ready_fn ready, void *ctx) {
    if (!m->has_grad) GDN_CUDA_DIE("gdn_cuda_model_backward needs a forward pass run with targets and grad_scale != 0");
    const gdn_config *c = &m->cfg;
    const int N = m->N, D = c->d_model;
    const gdn_param_table *t = m->t;
    const int ordered = grads_in_order(t);
    size_t done = t->total; /* [done, total) is complete */
    m->prof_phase = 1;
    const int Vv = c->vocab_size;
    PF(PR_GEMM, gdn_cuda_linear_bwd_dx(m->blas, m->p, FP32, m->dh, m->logits, Vv, wgt(m, m->t->lm_head), N, D, Vv, 0.0f);
                gdn_cuda_linear_bwd_dw(m->blas, m->p, m->grads + m->t->lm_head, m->logits, Vv, m->hf, N, D, Vv));
    PF(PR_NORM, gdn_cuda_rmsnorm_bwd(m->p, m->dx, 0, m->dx_act, m->grads + m->t->final_norm, m->dh,
                                     m->x + (size_t)c->n_layers * N * D, m->params + m->t->final_norm, m->rstdf, N, D,
                                     m->op_ws, m->stream));
    /* a tied head is the embedding, which the last op adds to: only the final norm (and an untied
     * head) are complete here */
    if (ready && ordered) {
        ready(ctx, m->grads, t->final_norm, done);
        done = t->final_norm;
    }
    for (int l = c->n_layers - 1; l >= 0; l--) {
        block_backward(m, l);
        if (ready && ordered) {
            ready(ctx, m->grads, layer_start(t, l), done);
            done = layer_start(t, l);
        }
    }
    PF(PR_EMBED, gdn_cuda_embed_bwd(m->grads + m->t->embed, m->perm_d, m->seg_start_d, m->seg_token_d, m->n_seg,
                                    m->dx, D, m->stream));
    if (ready) ready(ctx, m->grads, 0, done);
    m->has_grad = 0;
}

