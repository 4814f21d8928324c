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
#include "tests/model_case.h"
#include "tests/ref/fd.h"

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
    gdn_cpu_carry_f64 mid = {.S = calloc(ns, 8), .halo_q = calloc(nk, 8), .halo_k = calloc(nk, 8), .halo_v = calloc(nvh, 8)};
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
