/* A tiny model of any layer pattern for the fp64 model tests that compare two ways of running
 * it (documents packed or alone, one pass or segments): its config and random parameters.
 * Static inline: a test includes it and uses what it needs. */
#ifndef GDN_TESTS_MODEL_FIXTURE_H
#define GDN_TESTS_MODEL_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/params.h"
#include "tests/ref/fd.h"

/* mixers: the layer pattern (model/mixer.h), one layer per letter; attention layers with grouped
 * kv heads (2 query heads per kv head), q/k norms, q/k/v biases and RoPE turning visibly over the
 * sequence. */
static inline gdn_config fixture_config(const char *mixers, int allow_neg_eigval) {
    gdn_config c = {.vocab_size = 32, .d_model = 16, .n_layers = (int)strlen(mixers), .n_heads = 2,
                    .head_dim = 8, .expand_v = 2, .d_ff = 32, .conv_width = 4, .chunk_size = 16,
                    .tie_embeddings = 0, .allow_neg_eigval = allow_neg_eigval, .norm_eps = 1e-6,
                    .n_kv_heads = 1, .attn_head_dim = 6, .rope_theta = 300.0, .qk_norm = 1, .qkv_bias = 1};
    snprintf(c.mixers, sizeof c.mixers, "%s", mixers);
    return c;
}

/* The initial parameters times scale plus uniform noise in [-0.1, 0.1], except the decays
 * (A_log, dt_bias) kept as initialised: weak enough that a state carries far. */
static inline double *fixture_params(const gdn_param_table *t, uint64_t seed, double scale) {
    float *p32 = malloc(t->total * sizeof *p32);
    gdn_params_init(p32, t, seed);
    double *p = malloc(t->total * sizeof *p), *noise = malloc(t->total * sizeof *noise);
    fd_fill_uniform(noise, t->total, -1.0, 1.0, seed + 1);
    for (size_t i = 0; i < t->total; i++) p[i] = (double)p32[i] * scale + 0.1 * noise[i];
    for (int i = 0; i < t->n; i++) {
        const gdn_param *q = &t->p[i];
        int keep = strstr(q->name, "A_log") || strstr(q->name, "dt_bias");
        for (size_t j = 0; keep && j < q->numel; j++) p[q->offset + j] = (double)p32[q->offset + j];
    }
    free(noise);
    free(p32);
    return p;
}

#endif
