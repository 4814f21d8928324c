/* The mixer of an attention layer (mixer A, docs/design.md section 2.8) in the CPU model:
 *   x_mid = x_in + o_proj(attention(rope(qnorm(q)), rope(knorm(k)), v)),
 * q, k, v = proj(rmsnorm(x_in)) (+ bias), the norms optional, causal grouped-query attention,
 * and its backward; with a carry, RoPE starts at the carried position and the keys and values
 * go through the carried KV cache (decoding); under sequence parallelism RoPE starts at the
 * segment's position and the earlier segments' keys and values come through the hooks
 * (model/seq_hooks.h). With documents (a->doc_used) a query reads only its document's keys and
 * RoPE counts positions from the document's start. A linearized layer (mixer S) is the same
 * mixer with the attention replaced by its linearisation (model/cpu/linearized.c): it shares the
 * projections, norms, RoPE and KV cache (decoding recomputes its state from the cached keys and
 * values), and runs on whole sequences only. */
#include <stdlib.h>
#include <string.h>

#include "model/check.h"
#include "model/cpu/linearize.h"
#include "model/cpu/model_acts.h"
#include "model/mixer.h"

/* y[n, :] += b for every row n of y [N, C]. */
static void add_bias(real *y, const real *b, int N, int C) {
    for (int n = 0; n < N; n++)
        for (int j = 0; j < C; j++) y[(size_t)n * C + j] += b[j];
}

/* db[j] += sum over rows of dy [N, C] (in double: one sum over every token). */
static void bias_grad(real *db, const real *dy, int N, int C) {
    for (int j = 0; j < C; j++) {
        double acc = 0;
        for (int n = 0; n < N; n++) acc += dy[(size_t)n * C + j];
        db[j] += (real)acc;
    }
}

/* Which of the layers with a KV cache (A and S) l is (its slice of a carried KV cache). */
static int attn_index(const gdn_param_table *t, int l) {
    int i = 0;
    for (int j = 0; j < l; j++) i += t->layer[j].mixer == GDN_MIXER_A || t->layer[j].mixer == GDN_MIXER_S;
    return i;
}

/* The attention layer's keys and values of positions 0 .. pos0+T-1 in cache rows [B,len,Hkv,Da]:
 * the carried rows (copied unless carry_in and carry_out share the buffers) and this segment's.
 * Returns the cache to read: carry_out's, or a fresh buffer in *own when there is none. */
static real *kv_cache_fill(const acts_t *a, const gdn_param_table *t, int l, const carry_t *cin,
                           carry_t *cout, int which, real **own) {
    const gdn_config *c = &a->cfg;
    const int B = a->B, T = a->T, p0 = a->pos0;
    const size_t row = (size_t)gdn_config_kv_heads(c) * gdn_config_attn_dim(c);
    const layer_acts *L = &a->L[l];
    const real *cur = which ? L->vp : L->k;
    const int ai = attn_index(t, l);
    if (p0 > 0 && (!cin->kv_k || !cin->kv_v))
        GDN_DIE("gdn_cpu_forward: carry_in->pos = %d but the carry has no KV cache for the model's "
                "attention layers (kv_k, kv_v)", p0);
    if (p0 > 0 && p0 > cin->kv_len)
        GDN_DIE("gdn_cpu_forward: carry_in->pos = %d is beyond its KV cache of %d rows", p0, cin->kv_len);
    real *dst = NULL;
    int len = p0 + T;
    *own = NULL;
    if (cout && (which ? cout->kv_v : cout->kv_k)) {
        if ((long)p0 + T > cout->kv_len)
            GDN_DIE("gdn_cpu_forward: the KV cache holds %d positions per sequence; this segment "
                    "ends at %ld: allocate a longer cache (kv_len)", cout->kv_len, (long)p0 + T);
        len = cout->kv_len;
        dst = (which ? cout->kv_v : cout->kv_k) + (size_t)ai * B * len * row;
    } else {
        dst = *own = GDN_MALLOC(sizeof(real) * (size_t)B * (size_t)len * row);
    }
    if (p0 > 0) {
        const real *src = (which ? cin->kv_v : cin->kv_k) + (size_t)ai * B * cin->kv_len * row;
        for (int b = 0; b < B; b++)
            if (src + (size_t)b * cin->kv_len * row != dst + (size_t)b * len * row)
                memmove(dst + (size_t)b * len * row, src + (size_t)b * cin->kv_len * row,
                        sizeof(real) * (size_t)p0 * row);
    }
    for (int b = 0; b < B; b++)
        memcpy(dst + ((size_t)b * len + p0) * row, cur + (size_t)b * T * row, sizeof(real) * (size_t)T * row);
    return dst;
}

/* Position of the segment's first token: a carried KV cache's, or under sequence parallelism the
 * segment's place in the sequence. */
static int rope_pos0(const acts_t *a) { return a->seq_parallel ? a->hooks.pos0 : a->pos0; }

/* Sequence parallelism: layer l's keys and values of the prefix [B,pos0+T,C], kept from the
 * forward for the backward. */
static void sp_prefix(const acts_t *a, const gdn_param_table *t, int l, real *kv_all[2]) {
    const size_t ai = (size_t)attn_index(t, l);
    kv_all[0] = a->sp_kv + 2 * ai * a->sp_kv_n;
    kv_all[1] = kv_all[0] + a->sp_kv_n;
}

/* The linearized layer's output L->o from its q, k, v: from position 0, or after the carried KV
 * cache's positions, whose keys and values rebuild the state. */
static void linz_forward(acts_t *a, const gdn_param_table *t, const real *P, int l, const carry_t *cin,
                         carry_t *cout, real scale) {
    const gdn_config *c = &a->cfg;
    layer_acts *L = &a->L[l];
    if (a->seq_parallel)
        GDN_DIE("gdn_cpu_forward: layer %d is a linearized layer (mixer S), which runs on whole sequences "
                "only, not under sequence parallelism: use sp = 1", l);
    const gdn_linz_shape ls = {a->B, a->T, c->n_heads, gdn_config_kv_heads(c), gdn_config_attn_dim(c),
                               c->chunk_size, a->doc_used};
    const real *log_lambda = P + t->layer[l].log_lambda;
    if (a->pos0 == 0) {
        R(gdn_linz_fwd)(&ls, 0, a->T, L->q, L->k, L->vp, log_lambda, scale, L->o);
        real *own_k = NULL, *own_v = NULL;
        if (cout && cout->kv_k) {
            kv_cache_fill(a, t, l, cin, cout, 0, &own_k);
            kv_cache_fill(a, t, l, cin, cout, 1, &own_v);
        }
        return;
    }
    real *own_k, *own_v;
    real *kc = kv_cache_fill(a, t, l, cin, cout, 0, &own_k);
    real *vc = kv_cache_fill(a, t, l, cin, cout, 1, &own_v);
    const int len = own_k ? a->pos0 + a->T : cout->kv_len;
    R(gdn_linz_fwd)(&ls, a->pos0, len, L->q, kc, vc, log_lambda, scale, L->o);
    free(own_k);
    free(own_v);
}

void R(gdn_cpu_attn_forward)(acts_t *a, const gdn_param_table *t, const real *P, int l,
                             const carry_t *cin, carry_t *cout) {
    const gdn_config *c = &a->cfg;
    const int N = (int)a->N, D = c->d_model, H = c->n_heads, B = a->B, T = a->T;
    const int Hkv = gdn_config_kv_heads(c), Da = gdn_config_attn_dim(c), QW = H * Da, KW = Hkv * Da;
    const double theta = gdn_config_rope_theta(c);
    const gdn_layer_offsets *off = &t->layer[l];
    layer_acts *L = &a->L[l];
    const real *x = a->x + (size_t)l * N * D;
    real *xm = a->x_mid + (size_t)l * N * D;
    const real eps = (real)c->norm_eps;

    R(gdn_rmsnorm_fwd)(L->h1, L->rstd1, x, P + off->attn_norm, N, D, eps);
    R(gdn_linear_fwd)(L->qp, L->h1, P + off->q_proj, N, D, QW);
    R(gdn_linear_fwd)(L->kp, L->h1, P + off->k_proj, N, D, KW);
    R(gdn_linear_fwd)(L->vp, L->h1, P + off->v_proj, N, D, KW);
    if (c->qkv_bias) {
        add_bias(L->qp, P + off->q_bias, N, QW);
        add_bias(L->kp, P + off->k_bias, N, KW);
        add_bias(L->vp, P + off->v_bias, N, KW);
    }
    if (c->qk_norm) { /* Qwen3: RMSNorm per (token, head) before RoPE */
        R(gdn_rmsnorm_fwd)(L->q, L->rq, L->qp, P + off->q_norm, N * H, Da, eps);
        R(gdn_rmsnorm_fwd)(L->k, L->rk, L->kp, P + off->k_norm, N * Hkv, Da, eps);
    } else {
        memcpy(L->q, L->qp, sizeof(real) * (size_t)N * QW);
        memcpy(L->k, L->kp, sizeof(real) * (size_t)N * KW);
    }
    const int p0 = rope_pos0(a);
    R(gdn_rope_fwd_doc)(L->q, L->q, B, T, H, Da, p0, a->doc_used, theta);
    R(gdn_rope_fwd_doc)(L->k, L->k, B, T, Hkv, Da, p0, a->doc_used, theta);

    gdn_attn_shape shape = {B, T, H, Hkv, Da, a->doc_used};
    const real scale = (real)(1.0 / sqrt((double)Da));
    if (cout && !cout->kv_k != !cout->kv_v)
        GDN_DIE("gdn_cpu_forward: carry_out has only one of kv_k, kv_v; give both or neither");
    if (off->mixer == GDN_MIXER_S) {
        linz_forward(a, t, P, l, cin, cout, scale);
    } else if (a->seq_parallel) { /* the earlier segments' keys and values through the hooks */
        real *kv_all[2];
        sp_prefix(a, t, l, kv_all);
        void *const all[2] = {kv_all[0], kv_all[1]};
        const void *const own[2] = {L->k, L->vp};
        a->hooks.attn_kv_fwd(a->hooks.user, l, all, own, (size_t)N * KW);
        R(gdn_attn_fwd_kv)(&shape, p0 + T, L->q, kv_all[0], kv_all[1], scale, L->o, L->lse);
    } else if (a->pos0 == 0) { /* the whole sequence so far is this segment: the blocked op */
        R(gdn_attn_fwd)(&shape, L->q, L->k, L->vp, scale, L->o, L->lse);
        real *own_k = NULL, *own_v = NULL;
        if (cout && cout->kv_k) {
            kv_cache_fill(a, t, l, cin, cout, 0, &own_k);
            kv_cache_fill(a, t, l, cin, cout, 1, &own_v);
        }
    } else {
        real *own_k, *own_v;
        real *kc = kv_cache_fill(a, t, l, cin, cout, 0, &own_k);
        real *vc = kv_cache_fill(a, t, l, cin, cout, 1, &own_v);
        const int len = own_k ? a->pos0 + T : cout->kv_len;
        R(gdn_attn_fwd_cached)(&shape, L->q, kc, vc, len, a->pos0, scale, L->o, L->lse);
        free(own_k);
        free(own_v);
    }
    if (a->attn_out_hook) a->attn_out_hook(a->attn_out_user, a, l);
    R(gdn_linear_fwd)(xm, L->o, P + off->o_proj, N, QW, D);
    add_into(xm, x, (size_t)N * D);
}

/* Backward of gdn_cpu_attn_forward; s->dx holds dL/dx_mid on entry, dL/dx_in on return. */
void R(gdn_cpu_attn_backward)(acts_t *a, const gdn_param_table *t, const real *P, real *G, int l) {
    const gdn_config *c = &a->cfg;
    const int N = (int)a->N, D = c->d_model, H = c->n_heads, B = a->B, T = a->T;
    const int Hkv = gdn_config_kv_heads(c), Da = gdn_config_attn_dim(c), QW = H * Da, KW = Hkv * Da;
    const double theta = gdn_config_rope_theta(c);
    const gdn_layer_offsets *off = &t->layer[l];
    const layer_acts *L = &a->L[l];
    const grad_scratch *s = &a->s;
    const real *x = a->x + (size_t)l * N * D;

    R(gdn_linear_bwd)(s->ado, G + off->o_proj, s->dx, L->o, P + off->o_proj, N, QW, D);
    gdn_attn_shape shape = {B, T, H, Hkv, Da, a->doc_used};
    const real scale = (real)(1.0 / sqrt((double)Da));
    const int p0 = rope_pos0(a); /* 0 without hooks: gdn_cpu_backward refuses a carried cache */
    if (off->mixer == GDN_MIXER_S) {
        const gdn_linz_shape ls = {B, T, H, Hkv, Da, c->chunk_size, a->doc_used};
        R(gdn_linz_bwd)(&ls, L->q, L->k, L->vp, P + off->log_lambda, scale, s->ado, s->adq, s->adk, s->adv,
                        G + off->log_lambda);
    } else if (a->seq_parallel) { /* gradients of the prefix's keys and values; the hooks sum our rows' */
        real *kv_all[2];
        sp_prefix(a, t, l, kv_all);
        real *dk_all = a->sp_kv + 2 * (size_t)a->n_attn * a->sp_kv_n, *dv_all = dk_all + a->sp_kv_n;
        R(gdn_attn_bwd_kv)(&shape, p0 + T, L->q, kv_all[0], kv_all[1], L->o, L->lse, scale, s->ado, s->adq,
                           dk_all, dv_all);
        void *const dkv[2] = {s->adk, s->adv}, *const dkv_all[2] = {dk_all, dv_all};
        a->hooks.attn_kv_bwd(a->hooks.user, l, dkv, dkv_all, (size_t)N * KW);
    } else {
        R(gdn_attn_bwd)(&shape, L->q, L->k, L->vp, L->o, L->lse, scale, s->ado, s->adq, s->adk, s->adv);
    }
    R(gdn_rope_bwd_doc)(s->adq, s->adq, B, T, H, Da, p0, a->doc_used, theta);
    R(gdn_rope_bwd_doc)(s->adk, s->adk, B, T, Hkv, Da, p0, a->doc_used, theta);
    const real *dqp = s->adq, *dkp = s->adk;
    if (c->qk_norm) {
        R(gdn_rmsnorm_bwd)(s->adqp, G + off->q_norm, s->adq, L->qp, P + off->q_norm, L->rq, N * H, Da);
        R(gdn_rmsnorm_bwd)(s->adkp, G + off->k_norm, s->adk, L->kp, P + off->k_norm, L->rk, N * Hkv, Da);
        dqp = s->adqp;
        dkp = s->adkp;
    }
    if (c->qkv_bias) {
        bias_grad(G + off->q_bias, dqp, N, QW);
        bias_grad(G + off->k_bias, dkp, N, KW);
        bias_grad(G + off->v_bias, s->adv, N, KW);
    }
    R(gdn_linear_bwd)(s->dh, G + off->q_proj, dqp, L->h1, P + off->q_proj, N, D, QW);
    R(gdn_linear_bwd)(s->dtmp, G + off->k_proj, dkp, L->h1, P + off->k_proj, N, D, KW);
    add_into(s->dh, s->dtmp, (size_t)N * D);
    R(gdn_linear_bwd)(s->dtmp, G + off->v_proj, s->adv, L->h1, P + off->v_proj, N, D, KW);
    add_into(s->dh, s->dtmp, (size_t)N * D);
    R(gdn_rmsnorm_bwd)(s->dtmp, G + off->attn_norm, s->dh, x, P + off->attn_norm, L->rstd1, N, D);
    add_into(s->dx, s->dtmp, (size_t)N * D);
}
