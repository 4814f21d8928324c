/* The GDN language model on the CPU: forward pass with saved activations and the hand-written
 * backward pass, written once against the CPU ops and compiled for fp32 and fp64.
 *
 * Block l:  x_mid = x_in + o_proj(gated_norm(delta_rule(q, k, v, g, beta), z))
 *           (the layer's mixer, model/mixer.h, picks the rule and which of g, beta exist)
 *           x_in[l+1] = x_mid + down(silu(gate(h2)) * up(h2)),  h2 = rmsnorm(x_mid)
 * with q, k, v = silu(conv4(proj(h1))), q and k L2-normalised per head, h1 = rmsnorm(x_in).
 * An attention layer (mixer A) has its own mixer, model/cpu/model_attn.c, which also runs the
 * linearized layers (mixer S): they have attention's tensors and KV cache. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "model/check.h"
#include "model/cpu/model_acts.h"
#include "model/cpu/model_cpu.h"
#include "model/real.h"

/* Carves the arena; with base == NULL only counts. */
static size_t acts_layout(acts_t *a, real *base) {
    const gdn_config *c = &a->cfg;
    const size_t N = a->N, D = (size_t)c->d_model, H = (size_t)c->n_heads, K = (size_t)c->head_dim;
    const size_t V = (size_t)gdn_config_head_v(c), F = (size_t)c->d_ff, Bsz = (size_t)a->B;
    const size_t HK = H * K, HV = H * V, Wm1 = (size_t)(c->conv_width - 1);
    size_t used = 0;
#define TAKE(ptr, n)                              \
    do {                                          \
        (ptr) = base ? base + used : NULL;        \
        used += (n);                              \
    } while (0)
    TAKE(a->x, (size_t)(c->n_layers + 1) * N * D);
    TAKE(a->x_mid, (size_t)c->n_layers * N * D);
    const size_t QW = H * (size_t)gdn_config_attn_dim(c);
    const size_t KW = (size_t)gdn_config_kv_heads(c) * (size_t)gdn_config_attn_dim(c);
    const int n_attn = gdn_config_count_mixer(c, GDN_MIXER_A) + gdn_config_count_mixer(c, GDN_MIXER_S);
    for (int l = 0; l < c->n_layers; l++) {
        layer_acts *L = &a->L[l];
        TAKE(L->rstd1, N); TAKE(L->h1, N * D);
        TAKE(L->rstd2, N); TAKE(L->h2, N * D);
        TAKE(L->gp, N * F); TAKE(L->up, N * F); TAKE(L->m, N * F);
        if (!gdn_mixer_get(gdn_config_layer_mixer(c, l))->is_delta) {
            TAKE(L->qp, N * QW); TAKE(L->kp, N * KW); TAKE(L->vp, N * KW);
            TAKE(L->q, N * QW); TAKE(L->k, N * KW);
            TAKE(L->rq, N * H); TAKE(L->rk, N * (size_t)gdn_config_kv_heads(c));
            TAKE(L->o, N * QW); TAKE(L->lse, N * H);
            continue;
        }
        TAKE(L->qp, N * HK); TAKE(L->kp, N * HK); TAKE(L->vp, N * HV); TAKE(L->zp, N * HV);
        TAKE(L->ap, N * H); TAKE(L->bp, N * H);
        TAKE(L->qc, N * HK); TAKE(L->kc, N * HK); TAKE(L->vc, N * HV);
        TAKE(L->q, N * HK); TAKE(L->k, N * HK); TAKE(L->rq, N * H); TAKE(L->rk, N * H);
        TAKE(L->v, N * HV); TAKE(L->g, N * H); TAKE(L->beta, N * H);
        TAKE(L->S0, Bsz * H * K * V);
        TAKE(L->halo_q, Bsz * Wm1 * HK); TAKE(L->halo_k, Bsz * Wm1 * HK); TAKE(L->halo_v, Bsz * Wm1 * HV);
        TAKE(L->o, N * HV); TAKE(L->rstd_o, N * H); TAKE(L->y, N * HV);
    }
    TAKE(a->rstdf, N); TAKE(a->hf, N * D); TAKE(a->logits, N * (size_t)c->vocab_size);
    grad_scratch *s = &a->s;
    TAKE(s->dx, N * D); TAKE(s->dh, N * D); TAKE(s->dtmp, N * D); TAKE(s->dhf, N * D);
    TAKE(s->dm, N * F); TAKE(s->dgp, N * F); TAKE(s->dup, N * F);
    TAKE(s->dy, N * HV); TAKE(s->d_o, N * HV); TAKE(s->dz, N * HV);
    TAKE(s->dqn, N * HK); TAKE(s->dkn, N * HK); TAKE(s->dq1, N * HK); TAKE(s->dk1, N * HK);
    TAKE(s->dv, N * HV); TAKE(s->dvp, N * HV);
    TAKE(s->dg, N * H); TAKE(s->dbeta, N * H); TAKE(s->dap, N * H); TAKE(s->dbp, N * H);
    TAKE(s->S_out, Bsz * H * K * V); TAKE(s->dS_out, Bsz * H * K * V); TAKE(s->dS_in, Bsz * H * K * V);
    for (int i = 0; i < 3; i++) {
        TAKE(s->tail[i], Bsz * Wm1 * (i < 2 ? HK : HV));
        TAKE(s->dhalo[i], Bsz * Wm1 * (i < 2 ? HK : HV));
    }
    if (n_attn) {
        TAKE(s->ado, N * QW); TAKE(s->adq, N * QW); TAKE(s->adqp, N * QW);
        TAKE(s->adk, N * KW); TAKE(s->adv, N * KW); TAKE(s->adkp, N * KW);
    }
#undef TAKE
    return used;
}

acts_t *R(gdn_cpu_acts_create)(const gdn_param_table *t, int B, int T) {
    acts_t *a = GDN_CALLOC(1, sizeof *a);
    a->cfg = t->cfg;
    a->B = B;
    a->T = T;
    a->N = (size_t)B * (size_t)T;
    a->L = GDN_CALLOC((size_t)t->cfg.n_layers, sizeof *a->L);
    a->n_attn = gdn_config_count_mixer(&t->cfg, GDN_MIXER_A) + gdn_config_count_mixer(&t->cfg, GDN_MIXER_S);
    a->tokens = GDN_CALLOC(a->N, sizeof *a->tokens);
    a->doc = GDN_CALLOC(a->N ? a->N : 1, sizeof *a->doc);
    size_t n = acts_layout(a, NULL);
    a->arena_n = n;
    a->arena = GDN_CALLOC(n, sizeof(real));
    acts_layout(a, a->arena);
    return a;
}

void R(gdn_cpu_acts_free)(acts_t *a) {
    if (!a) return;
    free(a->arena);
    free(a->sp_kv);
    free(a->starts);
    free(a->doc);
    free(a->tokens);
    free(a->L);
    free(a);
}

const real *R(gdn_cpu_logits)(const acts_t *a) { return a->logits; }

const real *R(gdn_cpu_hidden)(const acts_t *a, int layer) {
    const int nL = a->cfg.n_layers;
    if (layer < -1 || layer >= nL)
        GDN_DIE("hidden state after layer %d requested; the model has -1 (the embedding) to %d", layer, nL - 1);
    return a->x + (size_t)(layer + 1) * a->N * (size_t)a->cfg.d_model;
}

const real *R(gdn_cpu_hidden_mid)(const acts_t *a, int layer) {
    if (layer < 0 || layer >= a->cfg.n_layers)
        GDN_DIE("hidden state after the mixer of layer %d requested; the model has layers 0 to %d", layer,
                a->cfg.n_layers - 1);
    return a->x_mid + (size_t)layer * a->N * (size_t)a->cfg.d_model;
}

size_t R(gdn_cpu_acts_bytes)(const acts_t *a) {
    const size_t sp_kv = a->sp_kv ? a->sp_kv_n * 2 * ((size_t)a->n_attn + 1) : 0;
    return (a->arena_n + sp_kv) * sizeof(real) + a->N * sizeof *a->tokens;
}

void R(gdn_cpu_acts_set_seq_hooks)(acts_t *a, const hooks_t *hooks) {
    a->seq_parallel = 0;
    free(a->sp_kv);
    a->sp_kv = NULL;
    a->sp_kv_n = 0;
    if (!hooks) return;
    if (!hooks->fwd_halo || !hooks->fwd_state_in || !hooks->fwd_state_out || !hooks->bwd_state_out ||
        !hooks->bwd_state_in || !hooks->bwd_halo)
        GDN_DIE("gdn_cpu_acts_set_seq_hooks: every sequence-parallel hook must be set");
    if (a->T < a->cfg.conv_width - 1)
        GDN_DIE("sequence parallelism needs at least conv_width - 1 = %d tokens per segment, got %d: "
                "use a smaller sp or a longer seq_len", a->cfg.conv_width - 1, a->T);
    if (a->n_attn) {
        if (!hooks->attn_kv_fwd || !hooks->attn_kv_bwd)
            GDN_DIE("gdn_cpu_acts_set_seq_hooks: the model has attention layers; the hooks attn_kv_fwd "
                    "and attn_kv_bwd must be set");
        if (hooks->pos0 < 0 || hooks->pos0 > INT_MAX - a->T)
            GDN_DIE("gdn_cpu_acts_set_seq_hooks: segment position pos0 = %d (must be >= 0, with pos0 + T "
                    "an int)", hooks->pos0);
        /* the prefix's keys and values per attention layer, and one layer's gradients of them */
        const size_t C = (size_t)gdn_config_kv_heads(&a->cfg) * (size_t)gdn_config_attn_dim(&a->cfg);
        a->sp_kv_n = (size_t)a->B * ((size_t)hooks->pos0 + (size_t)a->T) * C;
        a->sp_kv = GDN_CALLOC(a->sp_kv_n * 2 * ((size_t)a->n_attn + 1), sizeof(real));
    }
    a->hooks = *hooks;
    a->seq_parallel = 1;
}


/* Copies the carried rows (or zeros) into the saved halo. */
static void halo_load(real *dst, const real *carry, size_t n) {
    if (carry) memcpy(dst, carry, n * sizeof(real));
    else memset(dst, 0, n * sizeof(real));
}

void R(gdn_cpu_acts_set_doc_starts)(acts_t *a, const unsigned char *starts) {
    free(a->starts);
    a->starts = NULL;
    if (!starts) return;
    a->starts = GDN_MALLOC(a->N ? a->N : 1);
    memcpy(a->starts, starts, a->N);
}

/* The documents of this pass (a->doc_used): from the starts and, under sequence parallelism,
 * the document open before the segment (the doc_prev hook, called on every segment). */
static void docs_prepare(acts_t *a) {
    const int B = a->B, T = a->T;
    a->doc_used = NULL;
    int *prev = NULL, any = 0;
    if (a->seq_parallel && a->hooks.doc_prev) {
        const int pos0 = a->hooks.pos0;
        int *last = GDN_MALLOC(2 * (size_t)B * sizeof(int));
        prev = last + B;
        for (int b = 0; b < B; b++) {
            last[b] = -1;
            for (int t = 0; a->starts && t < T; t++)
                if (a->starts[(size_t)b * T + t]) last[b] = pos0 + t;
        }
        a->hooks.doc_prev(a->hooks.user, last, prev, B);
        for (int b = 0; b < B; b++) {
            if (prev[b] >= pos0 || prev[b] < -1)
                GDN_DIE("sequence parallelism: the doc_prev hook gave position %d for row %d, not an "
                        "earlier segment's (the segment starts at %d)", prev[b], b, pos0);
            any |= prev[b] > 0;
            prev[b] = prev[b] > 0 ? prev[b] - pos0 : GDN_DOC_BEFORE;
        }
        memmove(last, prev, (size_t)B * sizeof(int));
        prev = last;
    } else if (a->seq_parallel && a->starts) {
        GDN_DIE("document starts under sequence parallelism need hooks with doc_prev "
                "(model/seq_hooks.h)");
    }
    for (size_t i = 0; a->starts && i < a->N && !any; i++) any = a->starts[i] != 0;
    if (any) {
        if (a->n_attn && a->pos0 > 0)
            GDN_DIE("gdn_cpu_forward: document starts cannot be combined with a carried KV cache "
                    "(carry_in->pos = %d): decode each document from position 0", a->pos0);
        gdn_doc_build(a->doc, a->starts, prev, B, T);
        a->doc_used = a->doc;
    }
    free(prev);
}

/* The last W-1 rows of [halo; x] per sequence: the halo of the next segment.
 * halo, out: [B,W-1,C]; x: [B,T,C]. */
static void halo_next(real *out, const real *halo, const real *x, const int *doc, int B, int T, int C,
                      int Wm1) {
    for (int b = 0; b < B; b++) {
        for (int r = 0; r < Wm1; r++) {
            int t = T - Wm1 + r; /* position in x; negative means inside the old halo */
            const real *src = t >= 0 ? x + ((size_t)b * T + t) * C
                                     : halo + ((size_t)b * Wm1 + (Wm1 + t)) * C;
            real *dst = out + ((size_t)b * Wm1 + r) * C;
            /* rows of a document that ended before the row's last one began: zeros */
            if (doc && T > 0 && t < doc[(size_t)b * T + T - 1]) memset(dst, 0, (size_t)C * sizeof(real));
            else memcpy(dst, src, (size_t)C * sizeof(real));
        }
    }
}

/* The last Wm1 rows of each sequence of x [B,T,C] into tail [B,Wm1,C] (T >= Wm1); with
 * add != 0, tail is added into those rows instead. */
static void tail_rows(real *tail, real *x, int B, int T, int C, int Wm1, int add) {
    for (int b = 0; b < B; b++) {
        real *rows = x + ((size_t)b * T + (T - Wm1)) * C, *t = tail + (size_t)b * Wm1 * C;
        if (add) add_into(rows, t, (size_t)Wm1 * C);
        else memcpy(t, rows, (size_t)Wm1 * C * sizeof(real));
    }
}

static void delta_forward(acts_t *a, const gdn_param_table *t, const real *P, int l,
                          const carry_t *cin, carry_t *cout) {
    const gdn_config *c = &a->cfg;
    const int N = (int)a->N, D = c->d_model, H = c->n_heads, K = c->head_dim;
    const int V = gdn_config_head_v(c), W = c->conv_width, B = a->B, T = a->T;
    const int HK = H * K, HV = H * V;
    const gdn_layer_offsets *off = &t->layer[l];
    layer_acts *L = &a->L[l];
    const real *x = a->x + (size_t)l * N * D;
    real *xm = a->x_mid + (size_t)l * N * D;
    const real eps = (real)c->norm_eps;
    const size_t state_n = (size_t)B * H * K * V, hk_n = (size_t)B * (W - 1) * HK,
                 hv_n = (size_t)B * (W - 1) * HV;

    R(gdn_rmsnorm_fwd)(L->h1, L->rstd1, x, P + off->attn_norm, N, D, eps);
    R(gdn_linear_fwd)(L->qp, L->h1, P + off->q_proj, N, D, HK);
    R(gdn_linear_fwd)(L->kp, L->h1, P + off->k_proj, N, D, HK);
    R(gdn_linear_fwd)(L->vp, L->h1, P + off->v_proj, N, D, HV);
    R(gdn_linear_fwd)(L->zp, L->h1, P + off->g_proj, N, D, HV);
    /* the gates this layer's mixer reads (model/mixer.h); the others stay unset and unread */
    const gdn_mixer_info *mx = gdn_mixer_get(off->mixer);
    if (mx->has_decay) R(gdn_linear_fwd)(L->ap, L->h1, P + off->a_proj, N, D, H);
    if (mx->has_beta) R(gdn_linear_fwd)(L->bp, L->h1, P + off->b_proj, N, D, H);

    const grad_scratch *s = &a->s;
    if (a->seq_parallel) {
        tail_rows(s->tail[0], L->qp, B, T, HK, W - 1, 0);
        tail_rows(s->tail[1], L->kp, B, T, HK, W - 1, 0);
        tail_rows(s->tail[2], L->vp, B, T, HV, W - 1, 0);
        void *const halo[3] = {L->halo_q, L->halo_k, L->halo_v};
        const void *const tail[3] = {s->tail[0], s->tail[1], s->tail[2]};
        const size_t n_halo[3] = {hk_n, hk_n, hv_n};
        a->hooks.fwd_halo(a->hooks.user, l, halo, tail, n_halo);
    } else {
        halo_load(L->halo_q, cin && cin->halo_q ? cin->halo_q + l * hk_n : NULL, hk_n);
        halo_load(L->halo_k, cin && cin->halo_k ? cin->halo_k + l * hk_n : NULL, hk_n);
        halo_load(L->halo_v, cin && cin->halo_v ? cin->halo_v + l * hv_n : NULL, hv_n);
    }
    R(gdn_conv_fwd)(L->qc, L->qp, P + off->q_conv, L->halo_q, a->doc_used, B, T, HK, W);
    R(gdn_conv_fwd)(L->kc, L->kp, P + off->k_conv, L->halo_k, a->doc_used, B, T, HK, W);
    R(gdn_conv_fwd)(L->vc, L->vp, P + off->v_conv, L->halo_v, a->doc_used, B, T, HV, W);
    if (cout && cout->halo_q) halo_next(cout->halo_q + l * hk_n, L->halo_q, L->qp, a->doc_used, B, T, HK, W - 1);
    if (cout && cout->halo_k) halo_next(cout->halo_k + l * hk_n, L->halo_k, L->kp, a->doc_used, B, T, HK, W - 1);
    if (cout && cout->halo_v) halo_next(cout->halo_v + l * hv_n, L->halo_v, L->vp, a->doc_used, B, T, HV, W - 1);

    real *tmp = s->dq1; /* backward scratch, free during the forward pass */
    R(gdn_silu_fwd)(tmp, L->qc, (size_t)N * HK);
    R(gdn_l2norm_fwd)(L->q, L->rq, tmp, N * H, K);
    R(gdn_silu_fwd)(tmp, L->kc, (size_t)N * HK);
    R(gdn_l2norm_fwd)(L->k, L->rk, tmp, N * H, K);
    R(gdn_silu_fwd)(L->v, L->vc, (size_t)N * HV);
    if (mx->has_decay) R(gdn_decay_gate_fwd)(L->g, L->ap, P + off->A_log, P + off->dt_bias, N, H);
    if (mx->has_beta)
        R(gdn_beta_fwd)(L->beta, L->bp, c->allow_neg_eigval ? (real)2 : (real)1, (size_t)N * H);
    const real *g = mx->has_decay ? L->g : NULL, *beta = mx->has_beta ? L->beta : NULL;

    gdn_delta_shape shape = {B, T, H, K, V, c->chunk_size, 0, off->mixer, a->doc_used};
    const real scale = (real)(1.0 / sqrt((double)K));
    if (a->seq_parallel) {
        delta_args_t d = {&shape, L->q, L->k, L->v, g, beta, scale, NULL};
        if (a->hooks.fwd_state_in(a->hooks.user, l, &d, L->S0, state_n))
            GDN_DIE("sequence parallelism: the CPU model's fwd_state_in hook returned a ready event; "
                    "CPU hooks fill the state before they return (model/seq_hooks.h)");
        R(gdn_delta_fwd)(&shape, L->q, L->k, L->v, g, beta, scale, L->S0, L->o, s->S_out);
        a->hooks.fwd_state_out(a->hooks.user, l, s->S_out, state_n);
    } else {
        halo_load(L->S0, cin && cin->S ? cin->S + l * state_n : NULL, state_n);
        R(gdn_delta_fwd)(&shape, L->q, L->k, L->v, g, beta, scale, L->S0, L->o,
                         cout && cout->S ? cout->S + l * state_n : NULL);
    }

    R(gdn_gated_rmsnorm_fwd)(L->y, L->rstd_o, L->o, L->zp, P + off->o_norm, N * H, V, eps);
    R(gdn_linear_fwd)(xm, L->y, P + off->o_proj, N, HV, D);
    add_into(xm, x, (size_t)N * D);
}

/* The block's MLP on x_mid: x_in[l+1] = x_mid + down(silu(gate(h2)) * up(h2)). */
static void mlp_forward(acts_t *a, const gdn_param_table *t, const real *P, int l) {
    const gdn_config *c = &a->cfg;
    const int N = (int)a->N, D = c->d_model, F = c->d_ff;
    const gdn_layer_offsets *off = &t->layer[l];
    layer_acts *L = &a->L[l];
    const real *xm = a->x_mid + (size_t)l * N * D;
    real *xo = a->x + (size_t)(l + 1) * N * D;
    const real eps = (real)c->norm_eps;
    R(gdn_rmsnorm_fwd)(L->h2, L->rstd2, xm, P + off->mlp_norm, N, D, eps);
    R(gdn_linear_fwd)(L->gp, L->h2, P + off->gate_proj, N, D, F);
    R(gdn_linear_fwd)(L->up, L->h2, P + off->up_proj, N, D, F);
    R(gdn_swiglu_fwd)(L->m, L->gp, L->up, (size_t)N * F);
    R(gdn_linear_fwd)(xo, L->m, P + off->down_proj, N, F, D);
    add_into(xo, xm, (size_t)N * D);
}

double R(gdn_cpu_forward)(acts_t *a, const gdn_param_table *t, const real *P, const int *tokens,
                          const int *targets, real grad_scale, int *n_valid, const carry_t *cin,
                          carry_t *cout) {
    const gdn_config *c = &a->cfg;
    const int N = (int)a->N, D = c->d_model, nL = c->n_layers;
    if (a->seq_parallel && (cin || cout))
        GDN_DIE("gdn_cpu_forward: a carried state cannot be combined with sequence-parallel hooks");
    memcpy(a->tokens, tokens, a->N * sizeof *tokens);
    for (int i = 0; i < N; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            GDN_DIE("token id %d at position %d is outside the vocabulary [0, %d)", tokens[i], i,
                    c->vocab_size);
    R(gdn_embed_fwd)(a->x, tokens, P + t->embed, N, D);
    a->pos0 = cin ? cin->pos : 0;
    if (a->pos0 < 0) GDN_DIE("gdn_cpu_forward: carry_in->pos is %d; it must be >= 0", a->pos0);
    docs_prepare(a);
    for (int l = 0; l < nL; l++) {
        if (gdn_mixer_get(t->layer[l].mixer)->is_delta) delta_forward(a, t, P, l, cin, cout);
        else R(gdn_cpu_attn_forward)(a, t, P, l, cin, cout);
        mlp_forward(a, t, P, l);
    }
    if (cout) cout->pos = a->pos0 + a->T;
    const real *xf = a->x + (size_t)nL * N * D;
    R(gdn_rmsnorm_fwd)(a->hf, a->rstdf, xf, P + t->final_norm, N, D, (real)c->norm_eps);
    R(gdn_linear_fwd)(a->logits, a->hf, P + t->lm_head, N, D, c->vocab_size);
    a->has_grad = 0;
    if (n_valid) *n_valid = 0;
    if (!targets) return 0.0;
    double loss = R(gdn_cross_entropy)(grad_scale != 0 ? a->logits : NULL, a->logits, targets, N,
                                       c->vocab_size, grad_scale, n_valid);
    a->has_grad = grad_scale != 0;
    return loss;
}

/* The MLP's backward: s->dx holds dL/dx_in[l+1] on entry and dL/dx_mid on return. */
static void mlp_backward(acts_t *a, const gdn_param_table *t, const real *P, real *G, int l) {
    const gdn_config *c = &a->cfg;
    const int N = (int)a->N, D = c->d_model, F = c->d_ff;
    const gdn_layer_offsets *off = &t->layer[l];
    const layer_acts *L = &a->L[l];
    const grad_scratch *s = &a->s;
    const real *xm = a->x_mid + (size_t)l * N * D;

    R(gdn_linear_bwd)(s->dm, G + off->down_proj, s->dx, L->m, P + off->down_proj, N, F, D);
    R(gdn_swiglu_bwd)(s->dgp, s->dup, s->dm, L->gp, L->up, (size_t)N * F);
    R(gdn_linear_bwd)(s->dh, G + off->gate_proj, s->dgp, L->h2, P + off->gate_proj, N, D, F);
    R(gdn_linear_bwd)(s->dtmp, G + off->up_proj, s->dup, L->h2, P + off->up_proj, N, D, F);
    add_into(s->dh, s->dtmp, (size_t)N * D);
    R(gdn_rmsnorm_bwd)(s->dtmp, G + off->mlp_norm, s->dh, xm, P + off->mlp_norm, L->rstd2, N, D);
    add_into(s->dx, s->dtmp, (size_t)N * D);
}

static void delta_backward(acts_t *a, const gdn_param_table *t, const real *P, real *G, int l) {
    const gdn_config *c = &a->cfg;
    const int N = (int)a->N, D = c->d_model, H = c->n_heads, K = c->head_dim;
    const int V = gdn_config_head_v(c), W = c->conv_width, B = a->B, T = a->T;
    const int HK = H * K, HV = H * V;
    const gdn_layer_offsets *off = &t->layer[l];
    const layer_acts *L = &a->L[l];
    const grad_scratch *s = &a->s;
    const real *x = a->x + (size_t)l * N * D;

    /* Mixer output: o_proj, gated norm. */
    R(gdn_linear_bwd)(s->dy, G + off->o_proj, s->dx, L->y, P + off->o_proj, N, HV, D);
    R(gdn_gated_rmsnorm_bwd)(s->d_o, s->dz, G + off->o_norm, s->dy, L->o, L->zp, P + off->o_norm,
                             L->rstd_o, N * H, V);

    /* The layer's rule of the delta-rule family; gates it does not have are neither read nor
     * differentiated. */
    const gdn_mixer_info *mx = gdn_mixer_get(off->mixer);
    const real *g = mx->has_decay ? L->g : NULL, *beta = mx->has_beta ? L->beta : NULL;
    gdn_delta_shape shape = {B, T, H, K, V, c->chunk_size, 0, off->mixer, a->doc_used};
    const real scale = (real)(1.0 / sqrt((double)K));
    const int sp = a->seq_parallel;
    const size_t state_n = (size_t)B * H * K * V, hk_n = (size_t)B * (W - 1) * HK,
                 hv_n = (size_t)B * (W - 1) * HV;
    if (sp) {
        delta_args_t d = {&shape, L->q, L->k, L->v, g, beta, scale, s->d_o};
        if (a->hooks.bwd_state_out(a->hooks.user, l, &d, s->dS_out, state_n))
            GDN_DIE("sequence parallelism: the CPU model's bwd_state_out hook returned a ready event; "
                    "CPU hooks fill the state before they return (model/seq_hooks.h)");
    }
    R(gdn_delta_bwd)(&shape, L->q, L->k, L->v, g, beta, scale, L->S0, s->d_o, sp ? s->dS_out : NULL,
                     s->dqn, s->dkn, s->dv, mx->has_decay ? s->dg : NULL,
                     mx->has_beta ? s->dbeta : NULL, sp ? s->dS_in : NULL);
    if (sp) a->hooks.bwd_state_in(a->hooks.user, l, s->dS_in, state_n);

    /* q, k: L2 norm, SiLU, convolution; v: SiLU, convolution; then the gates. */
    R(gdn_l2norm_bwd)(s->dq1, s->dqn, L->q, L->rq, N * H, K);
    R(gdn_silu_bwd)(s->dq1, s->dq1, L->qc, (size_t)N * HK);
    R(gdn_conv_bwd)(s->dqn, G + off->q_conv, sp ? s->dhalo[0] : NULL, s->dq1, L->qp, P + off->q_conv,
                    L->halo_q, a->doc_used, B, T, HK, W);
    R(gdn_l2norm_bwd)(s->dk1, s->dkn, L->k, L->rk, N * H, K);
    R(gdn_silu_bwd)(s->dk1, s->dk1, L->kc, (size_t)N * HK);
    R(gdn_conv_bwd)(s->dkn, G + off->k_conv, sp ? s->dhalo[1] : NULL, s->dk1, L->kp, P + off->k_conv,
                    L->halo_k, a->doc_used, B, T, HK, W);
    R(gdn_silu_bwd)(s->dv, s->dv, L->vc, (size_t)N * HV);
    R(gdn_conv_bwd)(s->dvp, G + off->v_conv, sp ? s->dhalo[2] : NULL, s->dv, L->vp, P + off->v_conv,
                    L->halo_v, a->doc_used, B, T, HV, W);
    if (sp) { /* the next segment's convolution read this segment's last W-1 rows too */
        void *const dtail[3] = {s->tail[0], s->tail[1], s->tail[2]};
        const void *const dhalo[3] = {s->dhalo[0], s->dhalo[1], s->dhalo[2]};
        const size_t n_halo[3] = {hk_n, hk_n, hv_n};
        a->hooks.bwd_halo(a->hooks.user, l, dtail, dhalo, n_halo);
        tail_rows(s->tail[0], s->dqn, B, T, HK, W - 1, 1);
        tail_rows(s->tail[1], s->dkn, B, T, HK, W - 1, 1);
        tail_rows(s->tail[2], s->dvp, B, T, HV, W - 1, 1);
    }
    if (mx->has_decay)
        R(gdn_decay_gate_bwd)(s->dap, G + off->A_log, G + off->dt_bias, s->dg, L->ap, P + off->A_log,
                              P + off->dt_bias, N, H);
    if (mx->has_beta)
        R(gdn_beta_bwd)(s->dbp, s->dbeta, L->beta, c->allow_neg_eigval ? (real)2 : (real)1, (size_t)N * H);

    /* The projections of h1 (four to six, by mixer), then the block's input norm. */
    R(gdn_linear_bwd)(s->dh, G + off->q_proj, s->dqn, L->h1, P + off->q_proj, N, D, HK);
    R(gdn_linear_bwd)(s->dtmp, G + off->k_proj, s->dkn, L->h1, P + off->k_proj, N, D, HK);
    add_into(s->dh, s->dtmp, (size_t)N * D);
    R(gdn_linear_bwd)(s->dtmp, G + off->v_proj, s->dvp, L->h1, P + off->v_proj, N, D, HV);
    add_into(s->dh, s->dtmp, (size_t)N * D);
    R(gdn_linear_bwd)(s->dtmp, G + off->g_proj, s->dz, L->h1, P + off->g_proj, N, D, HV);
    add_into(s->dh, s->dtmp, (size_t)N * D);
    if (mx->has_decay) {
        R(gdn_linear_bwd)(s->dtmp, G + off->a_proj, s->dap, L->h1, P + off->a_proj, N, D, H);
        add_into(s->dh, s->dtmp, (size_t)N * D);
    }
    if (mx->has_beta) {
        R(gdn_linear_bwd)(s->dtmp, G + off->b_proj, s->dbp, L->h1, P + off->b_proj, N, D, H);
        add_into(s->dh, s->dtmp, (size_t)N * D);
    }
    R(gdn_rmsnorm_bwd)(s->dtmp, G + off->attn_norm, s->dh, x, P + off->attn_norm, L->rstd1, N, D);
    add_into(s->dx, s->dtmp, (size_t)N * D);
}

void R(gdn_cpu_backward)(acts_t *a, const gdn_param_table *t, const real *P, real *G) {
    if (!a->has_grad) GDN_DIE("gdn_cpu_backward needs a forward pass run with targets and grad_scale != 0");
    if (a->pos0 && a->n_attn)
        GDN_DIE("gdn_cpu_backward: the forward pass read a carried KV cache (pos %d); the backward "
                "pass of attention layers starts at position 0", a->pos0);
    const gdn_config *c = &a->cfg;
    const int N = (int)a->N, D = c->d_model;
    const grad_scratch *s = &a->s;
    R(gdn_linear_bwd)(s->dhf, G + t->lm_head, a->logits, a->hf, P + t->lm_head, N, D, c->vocab_size);
    R(gdn_rmsnorm_bwd)(s->dx, G + t->final_norm, s->dhf, a->x + (size_t)c->n_layers * N * D,
                       P + t->final_norm, a->rstdf, N, D);
    for (int l = c->n_layers - 1; l >= 0; l--) {
        mlp_backward(a, t, P, G, l);
        if (gdn_mixer_get(t->layer[l].mixer)->is_delta) delta_backward(a, t, P, G, l);
        else R(gdn_cpu_attn_backward)(a, t, P, G, l);
    }
    R(gdn_embed_bwd)(G + t->embed, a->tokens, s->dx, N, D);
    a->has_grad = 0;
}

double R(gdn_cpu_forward_kl)(acts_t *a, const gdn_param_table *t, const real *P, const int *tokens,
                             const int *targets, const real *teacher, double tau, double ce_weight,
                             real grad_scale, int *n_valid, double *kl_sum, double *ce_sum) {
    const gdn_config *c = &a->cfg;
    R(gdn_cpu_forward)(a, t, P, tokens, NULL, 0, NULL, NULL, NULL);
    double loss = R(gdn_distill_loss)(grad_scale != 0 ? a->logits : NULL, a->logits, teacher, targets, (int)a->N,
                                      c->vocab_size, tau, ce_weight, grad_scale, kl_sum, ce_sum, n_valid);
    a->has_grad = grad_scale != 0;
    return loss;
}

double R(gdn_cpu_mixer_mse)(acts_t *a, const gdn_param_table *t, const real *P, real *G, int l,
                            const real *x_in, const real *target, real grad_scale) {
    const gdn_config *c = &a->cfg;
    const size_t n = a->N * (size_t)c->d_model;
    if (l < 0 || l >= c->n_layers) GDN_DIE("gdn_cpu_mixer_mse: layer %d (the model has 0 to %d)", l, c->n_layers - 1);
    real *x = a->x + (size_t)l * n;
    const real *xm = a->x_mid + (size_t)l * n;
    memcpy(x, x_in, n * sizeof(real));
    a->pos0 = 0;
    a->has_grad = 0;
    /* under sequence-parallel hooks the mixer runs this rank's segment and exchanges layer l's
     * halo and state (or keys and values) as a whole pass does: every rank runs the same layers */
    const int delta = gdn_mixer_get(t->layer[l].mixer)->is_delta;
    if (delta) delta_forward(a, t, P, l, NULL, NULL);
    else R(gdn_cpu_attn_forward)(a, t, P, l, NULL, NULL);
    double sse = 0;
    real *dx = a->s.dx;
    for (size_t i = 0; i < n; i++) {
        const real e = (xm[i] - x[i]) - target[i];
        sse += (double)e * (double)e;
        dx[i] = 2 * grad_scale * e;
    }
    if (grad_scale == 0) return sse;
    if (delta) delta_backward(a, t, P, G, l);
    else R(gdn_cpu_attn_backward)(a, t, P, G, l);
    return sse;
}
