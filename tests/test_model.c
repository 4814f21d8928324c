/* Whole-model tests: the hand-written backward of the full GDN language model against central
 * finite differences in fp64, fp32 against fp64, and segment-by-segment forward passes with a
 * carried state against one pass over the whole sequence. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

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

/* Analytic gradient of case_loss. */
static double *case_grad(model_case *c) {
    double *g = calloc(c->t.total, sizeof *g);
    int nv = 0;
    gdn_cpu_forward_f64(c->acts, &c->t, c->params, c->tokens, c->targets, 1.0 / (c->B * c->T), &nv, NULL, NULL);
    gdn_cpu_backward_f64(c->acts, &c->t, c->params, g);
    return g;
}

static void check_model_gradient(gdn_config cfg, const char *label) {
    model_case c;
    case_init(&c, cfg, 2, 21, 42);
    double *g = case_grad(&c);
    double worst = 0.0;
    const char *worst_name = "";
    for (int i = 0; i < c.t.n; i++) {
        const gdn_param *p = &c.t.p[i];
        double gn = 0.0; /* every tensor must carry a gradient, or the check proves nothing */
        for (size_t j = 0; j < p->numel; j++) gn += g[p->offset + j] * g[p->offset + j];
        if (!(sqrt(gn) > 1e-6)) fprintf(stderr, "  %s: gradient norm %.3e\n", p->name, sqrt(gn));
        assert_true(sqrt(gn) > 1e-6);
        double err = fd_check(case_loss, &c, c.params + p->offset, g + p->offset, p->numel, 64, 1e-5);
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

static void test_model_gradient_untied(void **state) {
    (void)state;
    check_model_gradient(tiny_config(0, 0), "untied");
}

static void test_model_gradient_tied_negeig(void **state) {
    (void)state;
    check_model_gradient(tiny_config(1, 1), "tied, beta = 2 sigmoid");
}

/* The fp32 model agrees with the fp64 one: loss and every gradient. */
static void test_model_f32_vs_f64(void **state) {
    (void)state;
    model_case c;
    case_init(&c, tiny_config(0, 0), 2, 40, 5);
    double *g64 = case_grad(&c);
    double loss64 = case_loss(&c);
    float *p32 = malloc(c.t.total * sizeof *p32), *g32 = calloc(c.t.total, sizeof *g32);
    for (size_t i = 0; i < c.t.total; i++) p32[i] = (float)c.params[i];
    gdn_cpu_acts_f32 *a32 = gdn_cpu_acts_create_f32(&c.t, c.B, c.T);
    int nv = 0;
    double loss32 = gdn_cpu_forward_f32(a32, &c.t, p32, c.tokens, c.targets, 1.0f / (c.B * c.T), &nv, NULL, NULL) /
                    (double)(c.B * c.T);
    gdn_cpu_backward_f32(a32, &c.t, p32, g32);
    double lerr = fabs(loss32 - loss64) / fabs(loss64), gerr = fd_rel_err_f32(g32, g64, c.t.total);
    printf("model fp32 vs fp64: loss relative error %.2e, gradient relative error %.2e\n", lerr, gerr);
    assert_true(lerr < 1e-5);
    assert_true(gerr < 1e-4);
    gdn_cpu_acts_free_f32(a32);
    free(p32);
    free(g32);
    free(g64);
    case_free(&c);
}

/* Forward over [0, T1) then [T1, T) with the carried delta-rule state and convolution halos
 * gives the same logits as one pass over [0, T): what recurrent decoding and sequence
 * parallelism rely on. */
static void test_model_carry_segments(void **state) {
    (void)state;
    const int B = 2, T = 23, T1 = 14, T2 = T - T1;
    model_case c;
    case_init(&c, tiny_config(0, 0), B, T, 9);
    const gdn_config *cfg = &c.t.cfg;
    int nv;
    gdn_cpu_forward_f64(c.acts, &c.t, c.params, c.tokens, NULL, 0.0, &nv, NULL, NULL);
    const size_t V = (size_t)cfg->vocab_size;
    double *full = malloc((size_t)B * T * V * sizeof *full);
    memcpy(full, gdn_cpu_logits_f64(c.acts), (size_t)B * T * V * sizeof *full);

    const size_t L = (size_t)cfg->n_layers, H = (size_t)cfg->n_heads, K = (size_t)cfg->head_dim;
    const size_t Vh = (size_t)gdn_config_head_v(cfg), W1 = (size_t)cfg->conv_width - 1;
    const size_t ns = L * B * H * K * Vh, nk = L * B * W1 * H * K, nvh = L * B * W1 * H * Vh;
    gdn_cpu_carry_f64 mid = {calloc(ns, 8), calloc(nk, 8), calloc(nk, 8), calloc(nvh, 8)};
    gdn_cpu_acts_f64 *a1 = gdn_cpu_acts_create_f64(&c.t, B, T1), *a2 = gdn_cpu_acts_create_f64(&c.t, B, T2);
    int *tok1 = malloc((size_t)B * T1 * sizeof(int)), *tok2 = malloc((size_t)B * T2 * sizeof(int));
    for (int b = 0; b < B; b++) {
        memcpy(tok1 + b * T1, c.tokens + b * T, (size_t)T1 * sizeof(int));
        memcpy(tok2 + b * T2, c.tokens + b * T + T1, (size_t)T2 * sizeof(int));
    }
    gdn_cpu_forward_f64(a1, &c.t, c.params, tok1, NULL, 0.0, &nv, NULL, &mid);
    gdn_cpu_forward_f64(a2, &c.t, c.params, tok2, NULL, 0.0, &nv, &mid, NULL);
    double *seg = malloc((size_t)B * T * V * sizeof *seg);
    for (int b = 0; b < B; b++) {
        memcpy(seg + (size_t)b * T * V, gdn_cpu_logits_f64(a1) + (size_t)b * T1 * V, (size_t)T1 * V * 8);
        memcpy(seg + ((size_t)b * T + T1) * V, gdn_cpu_logits_f64(a2) + (size_t)b * T2 * V, (size_t)T2 * V * 8);
    }
    double err = fd_rel_err(seg, full, (size_t)B * T * V);
    printf("segmented forward with carried state vs one pass: relative error %.2e\n", err);
    assert_true(err < 1e-12);
    gdn_cpu_acts_free_f64(a1);
    gdn_cpu_acts_free_f64(a2);
    free(mid.S); free(mid.halo_q); free(mid.halo_k); free(mid.halo_v);
    free(tok1); free(tok2); free(full); free(seg);
    case_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_gradient_untied),
        cmocka_unit_test(test_model_gradient_tied_negeig),
        cmocka_unit_test(test_model_f32_vs_f64),
        cmocka_unit_test(test_model_carry_segments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
