/* The distillation entries of the CPU model: the temperature KL + cross-entropy loss against a
 * naive reference and fp64 finite differences (aliased and separate gradient buffers, ignored
 * rows); forward_kl through the whole model against finite differences and against the plain
 * forward's logits with the naive loss; the teacher-forced mixer (mixer_mse) against the full
 * forward's own residual stream, its gradient against finite differences, confined to the
 * block's mixer and input norm. */
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

/* KL(softmax(z/tau) || softmax(l/tau)) and CE of one row, straight from the definitions. */
static void naive_row(const double *l, const double *z, int V, int tgt, double tau, double *kl, double *ce) {
    double st = 0, ss = 0, s1 = 0;
    for (int i = 0; i < V; i++) {
        st += exp(z[i] / tau);
        ss += exp(l[i] / tau);
        s1 += exp(l[i]);
    }
    *kl = 0;
    for (int i = 0; i < V; i++) {
        double pt = exp(z[i] / tau) / st, ps = exp(l[i] / tau) / ss;
        *kl += pt * log(pt / ps);
    }
    *ce = -log(exp(l[tgt]) / s1);
}

typedef struct {
    double *logits, *teacher;
    int *targets;
    int N, V;
    double tau, ce_w;
} loss_case;

static double loss_of(void *ctx) {
    loss_case *c = ctx;
    return gdn_distill_loss_f64(NULL, c->logits, c->teacher, c->targets, c->N, c->V, c->tau, c->ce_w, 0, NULL,
                                NULL, NULL);
}

static void check_loss(double tau, double ce_w) {
    enum { N = 7, V = 11 };
    double logits[N * V], teacher[N * V], d[N * V], alias[N * V];
    int targets[N];
    fd_fill_uniform(logits, N * V, -3, 3, 5);
    fd_fill_uniform(teacher, N * V, -4, 4, 6);
    for (int n = 0; n < N; n++) targets[n] = n == 2 ? -1 : (n * 5) % V;
    loss_case c = {logits, teacher, targets, N, V, tau, ce_w};
    double kl = 0, ce = 0;
    int nv = 0;
    double loss = gdn_distill_loss_f64(d, logits, teacher, targets, N, V, tau, ce_w, 1.0, &kl, &ce, &nv);
    assert_int_equal(nv, N - 1);
    double kl_ref = 0, ce_ref = 0;
    for (int n = 0; n < N; n++) {
        if (targets[n] < 0) continue;
        double k1, c1;
        naive_row(logits + n * V, teacher + n * V, V, targets[n], tau, &k1, &c1);
        kl_ref += k1;
        ce_ref += c1;
    }
    assert_true(fabs(kl - kl_ref) < 1e-12 * (1 + kl_ref));
    assert_true(fabs(ce - ce_ref) < 1e-12 * (1 + ce_ref));
    assert_true(fabs(loss - (tau * tau * kl_ref + ce_w * ce_ref)) < 1e-11 * (1 + loss));
    for (int i = 0; i < V; i++) assert_true(d[2 * V + i] == 0.0); /* the ignored row */
    double err = fd_check(loss_of, &c, logits, d, N * V, N * V, 1e-6);
    printf("distill loss (tau %g, ce_weight %g): gradient vs finite differences %.2e\n", tau, ce_w, err);
    assert_true(err < 1e-8);
    memcpy(alias, logits, sizeof alias); /* in place, as the model runs it */
    gdn_distill_loss_f64(alias, alias, teacher, targets, N, V, tau, ce_w, 1.0, NULL, NULL, NULL);
    assert_memory_equal(alias, d, sizeof d);
}

static void test_loss_tau1(void **state) {
    (void)state;
    check_loss(1.0, 0.0);
}

static void test_loss_tau2_ce(void **state) {
    (void)state;
    check_loss(2.0, 0.5);
}

static void test_loss_same_is_zero(void **state) {
    (void)state;
    enum { N = 3, V = 5 };
    double l[N * V], d[N * V];
    int targets[N] = {0, 1, 2};
    fd_fill_uniform(l, N * V, -2, 2, 9);
    double kl = 1;
    gdn_distill_loss_f64(d, l, l, targets, N, V, 3.0, 0.0, 1.0, &kl, NULL, NULL);
    assert_true(fabs(kl) < 1e-14);
    for (int i = 0; i < N * V; i++) assert_true(fabs(d[i]) < 1e-15);
}

/* ---- through the model --------------------------------------------------------------------- */

static gdn_config hybrid_config(void) {
    gdn_config c = tiny_config(0, 0);
    c.n_layers = 2;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.attn_head_dim = 8;
    c.rope_theta = 500.0;
    snprintf(c.mixers, sizeof c.mixers, "GA");
    return c;
}

typedef struct {
    model_case *m;
    double *teacher;
    double tau, ce_w;
} kl_case;

static double kl_model_loss(void *ctx) {
    kl_case *k = ctx;
    model_case *c = k->m;
    return gdn_cpu_forward_kl_f64(c->acts, &c->t, c->params, c->tokens, c->targets, k->teacher, k->tau, k->ce_w, 0,
                                  NULL, NULL, NULL) / (double)(c->B * c->T);
}

static void test_forward_kl_gradient(void **state) {
    (void)state;
    model_case c;
    case_init(&c, hybrid_config(), 2, 13, 3);
    const int N = c.B * c.T, V = c.t.cfg.vocab_size;
    double *teacher = malloc(sizeof(double) * (size_t)N * V);
    fd_fill_uniform(teacher, (size_t)N * V, -3, 3, 17);
    kl_case k = {&c, teacher, 2.0, 0.25};
    /* the naive loss on the plain forward's logits */
    gdn_cpu_forward_f64(c.acts, &c.t, c.params, c.tokens, NULL, 0, NULL, NULL, NULL);
    const double *lg = gdn_cpu_logits_f64(c.acts);
    double ref = 0;
    for (int n = 0; n < N; n++) {
        if (c.targets[n] < 0) continue;
        double k1, c1;
        naive_row(lg + (size_t)n * V, teacher + (size_t)n * V, V, c.targets[n], k.tau, &k1, &c1);
        ref += k.tau * k.tau * k1 + k.ce_w * c1;
    }
    assert_true(fabs(kl_model_loss(&k) * N - ref) < 1e-10 * ref);
    double *g = calloc(c.t.total, sizeof *g);
    int nv = 0;
    double kl = 0, ce = 0;
    gdn_cpu_forward_kl_f64(c.acts, &c.t, c.params, c.tokens, c.targets, teacher, k.tau, k.ce_w, 1.0 / N, &nv, &kl,
                           &ce);
    gdn_cpu_backward_f64(c.acts, &c.t, c.params, g);
    double worst = 0;
    for (int i = 0; i < c.t.n; i++) {
        const gdn_param *p = &c.t.p[i];
        double err = fd_check(kl_model_loss, &k, c.params + p->offset, g + p->offset, p->numel, 16, 1e-5);
        if (err >= 1e-6) fprintf(stderr, "  %s: relative error %.3e\n", p->name, err);
        assert_true(err < 1e-6);
        worst = err > worst ? err : worst;
    }
    printf("forward_kl gradient vs finite differences (mixers GA, %d tensors): max relative error %.2e\n", c.t.n,
           worst);
    free(g);
    free(teacher);
    case_free(&c);
}

typedef struct {
    model_case *m;
    int layer;
    double *x_in, *target;
} mse_case;

static double mse_loss(void *ctx) {
    mse_case *k = ctx;
    model_case *c = k->m;
    return gdn_cpu_mixer_mse_f64(c->acts, &c->t, c->params, NULL, k->layer, k->x_in, k->target, 0);
}

static void check_mixer_mse(int layer) {
    model_case c;
    case_init(&c, hybrid_config(), 2, 13, 4);
    const size_t n = (size_t)c.B * c.T * c.t.cfg.d_model;
    double *x_in = malloc(n * sizeof *x_in), *target = malloc(n * sizeof *target);
    /* the full forward's own stream: the mixer's output there is mid(l) - x(l - 1) */
    gdn_cpu_forward_f64(c.acts, &c.t, c.params, c.tokens, NULL, 0, NULL, NULL, NULL);
    memcpy(x_in, gdn_cpu_hidden_f64(c.acts, layer - 1), n * sizeof *x_in);
    const double *mid = gdn_cpu_hidden_mid_f64(c.acts, layer);
    fd_fill_uniform(target, n, -0.5, 0.5, 23);
    double ref = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (mid[i] - x_in[i]) - target[i];
        ref += e * e;
    }
    mse_case k = {&c, layer, x_in, target};
    double sse = mse_loss(&k);
    assert_true(fabs(sse - ref) < 1e-12 * ref);
    double *g = calloc(c.t.total, sizeof *g);
    gdn_cpu_mixer_mse_f64(c.acts, &c.t, c.params, g, layer, x_in, target, 1.0);
    char prefix[64], norm[64];
    snprintf(prefix, sizeof prefix, "model.layers.%d.attn.", layer);
    snprintf(norm, sizeof norm, "model.layers.%d.attn_norm.", layer);
    double worst = 0;
    for (int i = 0; i < c.t.n; i++) {
        const gdn_param *p = &c.t.p[i];
        const int mine = !strncmp(p->name, prefix, strlen(prefix)) || !strncmp(p->name, norm, strlen(norm));
        double gn = 0;
        for (size_t j = 0; j < p->numel; j++) gn += g[p->offset + j] * g[p->offset + j];
        if (!mine) { /* nothing outside the block's mixer moves */
            assert_true(gn == 0.0);
            continue;
        }
        assert_true(gn > 0);
        double err = fd_check(mse_loss, &k, c.params + p->offset, g + p->offset, p->numel, 16, 1e-5);
        if (err >= 1e-6) fprintf(stderr, "  %s: relative error %.3e\n", p->name, err);
        assert_true(err < 1e-6);
        worst = err > worst ? err : worst;
    }
    printf("mixer_mse layer %d (%s) gradient vs finite differences: max relative error %.2e\n", layer,
           layer ? "attention" : "gated delta rule", worst);
    free(g);
    free(x_in);
    free(target);
    case_free(&c);
}

static void test_mixer_mse_delta(void **state) {
    (void)state;
    check_mixer_mse(0);
}

static void test_mixer_mse_attention(void **state) {
    (void)state;
    check_mixer_mse(1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loss_tau1),
        cmocka_unit_test(test_loss_tau2_ce),
        cmocka_unit_test(test_loss_same_is_zero),
        cmocka_unit_test(test_forward_kl_gradient),
        cmocka_unit_test(test_mixer_mse_delta),
        cmocka_unit_test(test_mixer_mse_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
