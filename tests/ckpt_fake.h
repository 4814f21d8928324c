/* Test-only parameter tables for the checkpoint tests: the tensor names, ranks and shapes of a
 * GDN model built by hand, so the checkpoint code is tested on its own, and deterministic
 * tensor contents that a verifier can recompute for any step. */
#ifndef GDN_TESTS_CKPT_FAKE_H
#define GDN_TESTS_CKPT_FAKE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/params.h"

static inline gdn_config ckpt_fake_config(int vocab, int d_model, int n_layers) {
    gdn_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = vocab;
    c.d_model = d_model;
    c.n_layers = n_layers;
    c.n_heads = 2;
    c.head_dim = d_model / 4;
    c.expand_v = 2;
    c.d_ff = 2 * d_model;
    c.conv_width = 4;
    c.chunk_size = 16;
    c.tie_embeddings = 0;
    c.allow_neg_eigval = 0;
    c.norm_eps = 1e-6;
    return c;
}

static inline void ckpt_fake_add(gdn_param_table *t, int ndim, int s0, int s1, int s2,
                                 const char *fmt, int layer) {
    gdn_param *p = &t->p[t->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, fmt, layer);
    p->ndim = ndim;
    p->shape[0] = s0;
    p->shape[1] = s1;
    p->shape[2] = s2;
    p->numel = (size_t)s0 * (size_t)(ndim > 1 ? s1 : 1) * (size_t)(ndim > 2 ? s2 : 1);
    p->offset = t->total;
    p->no_decay = ndim == 1;
    t->total += p->numel;
}

/* A table with the layout of a GDN model of config c (release with ckpt_fake_free). */
static inline void ckpt_fake_table(gdn_param_table *t, const gdn_config *c) {
    memset(t, 0, sizeof *t);
    t->cfg = *c;
    t->p = calloc((size_t)(3 + 18 * c->n_layers), sizeof *t->p);
    const int D = c->d_model, H = c->n_heads, K = c->head_dim, V = K * c->expand_v;
    const int F = c->d_ff, W = c->conv_width;
    ckpt_fake_add(t, 2, c->vocab_size, D, 0, "model.embed_tokens.weight", 0);
    for (int l = 0; l < c->n_layers; l++) {
        ckpt_fake_add(t, 1, D, 0, 0, "model.layers.%d.attn_norm.weight", l);
        ckpt_fake_add(t, 2, H * K, D, 0, "model.layers.%d.attn.q_proj.weight", l);
        ckpt_fake_add(t, 2, H * K, D, 0, "model.layers.%d.attn.k_proj.weight", l);
        ckpt_fake_add(t, 2, H * V, D, 0, "model.layers.%d.attn.v_proj.weight", l);
        ckpt_fake_add(t, 2, H * V, D, 0, "model.layers.%d.attn.g_proj.weight", l);
        ckpt_fake_add(t, 2, H, D, 0, "model.layers.%d.attn.a_proj.weight", l);
        ckpt_fake_add(t, 2, H, D, 0, "model.layers.%d.attn.b_proj.weight", l);
        ckpt_fake_add(t, 3, H * K, 1, W, "model.layers.%d.attn.q_conv1d.weight", l);
        ckpt_fake_add(t, 3, H * K, 1, W, "model.layers.%d.attn.k_conv1d.weight", l);
        ckpt_fake_add(t, 3, H * V, 1, W, "model.layers.%d.attn.v_conv1d.weight", l);
        ckpt_fake_add(t, 1, H, 0, 0, "model.layers.%d.attn.A_log", l);
        ckpt_fake_add(t, 1, H, 0, 0, "model.layers.%d.attn.dt_bias", l);
        ckpt_fake_add(t, 1, V, 0, 0, "model.layers.%d.attn.o_norm.weight", l);
        ckpt_fake_add(t, 2, D, H * V, 0, "model.layers.%d.attn.o_proj.weight", l);
        ckpt_fake_add(t, 1, D, 0, 0, "model.layers.%d.mlp_norm.weight", l);
        ckpt_fake_add(t, 2, F, D, 0, "model.layers.%d.mlp.gate_proj.weight", l);
        ckpt_fake_add(t, 2, F, D, 0, "model.layers.%d.mlp.up_proj.weight", l);
        ckpt_fake_add(t, 2, D, F, 0, "model.layers.%d.mlp.down_proj.weight", l);
    }
    ckpt_fake_add(t, 1, D, 0, 0, "model.norm.weight", 0);
    ckpt_fake_add(t, 2, c->vocab_size, D, 0, "lm_head.weight", 0);
}

static inline void ckpt_fake_free(gdn_param_table *t) {
    free(t->p);
    memset(t, 0, sizeof *t);
}

static inline uint64_t ckpt_fake_mix(uint64_t x) { /* splitmix64 finaliser */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* n values in [-1, 1) determined by (step, salt) alone. */
static inline void ckpt_fake_fill(float *x, size_t n, int64_t step, uint64_t salt) {
    uint64_t base = ckpt_fake_mix((uint64_t)step * 0x100000001B3ull + salt);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)(ckpt_fake_mix(base + i) >> 40) * 0x1p-23 - 1.0);
}

#endif
