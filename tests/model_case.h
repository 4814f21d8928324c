/* A tiny whole model in fp64 for the model tests: perturbed parameters, random tokens and
 * targets (some ignored), its mean loss, its analytic gradient, and the check of that gradient
 * against central finite differences tensor by tensor. Static functions: include once per test. */
#ifndef GDN_TESTS_MODEL_CASE_H
#define GDN_TESTS_MODEL_CASE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/cpu/model_cpu.h"
#include "tests/ref/fd.h"

typedef struct {
    gdn_param_table t;
    double *params;  /* [total] */
    int B, T;
    int *tokens, *targets;
    gdn_cpu_acts_f64 *acts;
} model_case;

static gdn_config tiny_config(int tie, int neg) {
    return (gdn_config){.vocab_size = 32, .d_model = 16, .n_layers = 2, .n_heads = 2, .head_dim = 8,
                        .expand_v = 2, .d_ff = 32, .conv_width = 4, .chunk_size = 16,
                        .tie_embeddings = tie, .allow_neg_eigval = neg, .norm_eps = 1e-6};
}

static void case_init(model_case *c, gdn_config cfg, int B, int T, uint64_t seed) {
    gdn_param_table_build(&c->t, &cfg);
    float *p32 = malloc(c->t.total * sizeof *p32);
    gdn_params_init(p32, &c->t, seed);
    c->params = malloc(c->t.total * sizeof *c->params);
    /* Perturb every tensor so norms, gates and convolutions are not at symmetric values, and
     * make the projections large enough that every path carries a visible gradient. */
    double *noise = malloc(c->t.total * sizeof *noise);
    fd_fill_uniform(noise, c->t.total, -1.0, 1.0, seed + 7);
    for (size_t i = 0; i < c->t.total; i++) c->params[i] = (double)p32[i] * 5.0 + 0.1 * noise[i];
    for (int i = 0; i < c->t.n; i++) {
        const gdn_param *p = &c->t.p[i];
        if (strstr(p->name, "norm.weight"))
            for (size_t j = 0; j < p->numel; j++) c->params[p->offset + j] = 1.0 + 0.3 * noise[p->offset + j];
        if (strstr(p->name, "A_log") || strstr(p->name, "dt_bias"))
            for (size_t j = 0; j < p->numel; j++) c->params[p->offset + j] = (double)p32[p->offset + j];
    }
    free(noise);
    free(p32);
    c->B = B;
    c->T = T;
    c->tokens = malloc((size_t)B * T * sizeof(int));
    c->targets = malloc((size_t)B * T * sizeof(int));
    double *r = malloc((size_t)B * T * 2 * sizeof *r);
    fd_fill_uniform(r, (size_t)B * T * 2, 0.0, 1.0, seed + 11);
    for (int i = 0; i < B * T; i++) {
        c->tokens[i] = (int)(r[i] * cfg.vocab_size);
        c->targets[i] = (i % 7 == 3) ? -1 : (int)(r[B * T + i] * cfg.vocab_size); /* some ignored */
    }
    free(r);
    c->acts = gdn_cpu_acts_create_f64(&c->t, B, T);
}

static void case_free(model_case *c) {
    gdn_cpu_acts_free_f64(c->acts);
    gdn_param_table_free(&c->t);
    free(c->params);
    free(c->tokens);
    free(c->targets);
}

static double case_loss(void *ctx) {
    model_case *c = ctx;
    int nv = 0;
    return gdn_cpu_forward_f64(c->acts, &c->t, c->params, c->tokens, c->targets, 0.0, &nv, NULL, NULL) /
           (double)(c->B * c->T);
}

/* Logits [B,T,V] of one pass over the case's tokens without targets (valid until its next pass). */
static inline const double *case_logits(model_case *c) {
    int nv = 0;
    gdn_cpu_forward_f64(c->acts, &c->t, c->params, c->tokens, NULL, 0.0, &nv, NULL, NULL);
    return gdn_cpu_logits_f64(c->acts);
}

/* Two carries for decoding (states, halos, and a KV cache of len positions for the attention and
 * linearized layers); with shared != 0 they share one KV cache, else each has its own. */
typedef struct {
    gdn_cpu_carry_f64 c[2];
    double *kv[2];
} case_carries;

static inline void case_carries_make(case_carries *k, const gdn_config *cfg, int B, int len, int shared) {
    const size_t L = (size_t)cfg->n_layers, H = (size_t)cfg->n_heads, K = (size_t)cfg->head_dim;
    const size_t Vh = (size_t)gdn_config_head_v(cfg), W1 = (size_t)cfg->conv_width - 1;
    const size_t ns = L * B * H * K * Vh, nk = L * B * W1 * H * K, nvh = L * B * W1 * H * Vh;
    const size_t n_kv = (size_t)(gdn_config_count_mixer(cfg, GDN_MIXER_A) + gdn_config_count_mixer(cfg, GDN_MIXER_S));
    const size_t nkv = n_kv * B * len * gdn_config_kv_heads(cfg) * gdn_config_attn_dim(cfg);
    for (int i = 0; i < 2; i++) {
        k->kv[i] = (i == 0 || !shared) ? calloc(2 * nkv + 1, 8) : NULL;
        double *kv = k->kv[shared ? 0 : i];
        k->c[i] = (gdn_cpu_carry_f64){.S = calloc(ns, 8), .halo_q = calloc(nk, 8), .halo_k = calloc(nk, 8),
                                      .halo_v = calloc(nvh, 8), .kv_k = kv, .kv_v = kv + nkv, .kv_len = len};
    }
}

static inline void case_carries_free(case_carries *k) {
    for (int i = 0; i < 2; i++) {
        free(k->c[i].S);
        free(k->c[i].halo_q);
        free(k->c[i].halo_k);
        free(k->c[i].halo_v);
        free(k->kv[i]);
    }
}

/* Positions [t0, t0+n) of every row in one pass that starts from carry `in` (NULL: none) and
 * leaves its state in `out`; their logits go to the same positions of rec [B,T,V]. */
static inline void case_decode_segment(model_case *c, int t0, int n, const gdn_cpu_carry_f64 *in,
                                       gdn_cpu_carry_f64 *out, double *rec) {
    const int B = c->B, T = c->T;
    const size_t Vo = (size_t)c->t.cfg.vocab_size;
    gdn_cpu_acts_f64 *a = gdn_cpu_acts_create_f64(&c->t, B, n);
    int *tok = malloc(sizeof(int) * B * n), nv = 0;
    for (int b = 0; b < B; b++) memcpy(tok + b * n, c->tokens + b * T + t0, sizeof(int) * n);
    gdn_cpu_forward_f64(a, &c->t, c->params, tok, NULL, 0.0, &nv, in, out);
    for (int b = 0; b < B; b++)
        memcpy(rec + ((size_t)b * T + t0) * Vo, gdn_cpu_logits_f64(a) + (size_t)b * n * Vo, n * Vo * sizeof *rec);
    gdn_cpu_acts_free_f64(a);
    free(tok);
}

/* Analytic gradient of case_loss. */
static double *case_grad(model_case *c) {
    double *g = calloc(c->t.total, sizeof *g);
    int nv = 0;
    gdn_cpu_forward_f64(c->acts, &c->t, c->params, c->tokens, c->targets, 1.0 / (c->B * c->T), &nv, NULL, NULL);
    gdn_cpu_backward_f64(c->acts, &c->t, c->params, g);
    return g;
}

/* Every tensor carries a gradient and matches finite differences (n_probe probes per tensor,
 * step eps) on 2 sequences of T tokens. */
static void check_model_gradient_at(gdn_config cfg, const char *label, int T, size_t n_probe, double eps) {
    model_case c;
    case_init(&c, cfg, 2, T, 42);
    double *g = case_grad(&c);
    double worst = 0.0;
    const char *worst_name = "";
    for (int i = 0; i < c.t.n; i++) {
        const gdn_param *p = &c.t.p[i];
        double gn = 0.0; /* every tensor must carry a gradient, or the check proves nothing */
        for (size_t j = 0; j < p->numel; j++) gn += g[p->offset + j] * g[p->offset + j];
        if (!(sqrt(gn) > 1e-6)) fprintf(stderr, "  %s: gradient norm %.3e\n", p->name, sqrt(gn));
        assert_true(sqrt(gn) > 1e-6);
        double err = fd_check(case_loss, &c, c.params + p->offset, g + p->offset, p->numel, n_probe, eps);
        if (err > worst) {
            worst = err;
            worst_name = p->name;
        }
        if (err >= 1e-6) fprintf(stderr, "  %s: relative error %.3e\n", p->name, err);
        assert_true(err < 1e-6);
    }
    printf("model gradient vs finite differences (%s, %zu parameters, %d tensors): max relative error %.2e (%s)\n",
           label, c.t.total, c.t.n, worst, worst_name);
    free(g);
    case_free(&c);
}

static inline void check_model_gradient(gdn_config cfg, const char *label) {
    check_model_gradient_at(cfg, label, 21, 64, 1e-5);
}

#endif
