/* gdn distill init's mapping pieces (train/distill_init.h): the decay of a distance (the rate
 * whose geometric weights have exactly that mean distance, dt_bias = -ln d, clamped), the
 * teacher's attention distance on a hand-checkable case (q_proj = 0: uniform attention over
 * the prefix, mean distance (T-1)/4), the student's mixers and its stored pattern. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "model/config.h"
#include "model/params.h"
#include "train/distill_init.h"

#define ASSERT_CONTAINS(s, sub)                                                                    \
    do {                                                                                           \
        if (!strstr((s), (sub))) fail_msg("\"%s\" does not contain \"%s\"", (s), (sub));           \
    } while (0)

/* With A_log = 0, a = 0: g = -softplus(dt_bias), r = e^g; the mean distance of the weights
 * (1 - r) r^k, k >= 0, is r / (1 - r), which must equal d. */
static void test_decay_matches_distance(void **state) {
    (void)state;
    const double ds[] = {0.05, 0.3, 1.0, 7.75, 100.0, 5000.0};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) {
        double A_log, dt;
        distill_decay_params(ds[i], &A_log, &dt);
        assert_true(A_log == 0.0);
        assert_true(fabs(dt + log(ds[i])) < 1e-12);
        const double g = -log1p(exp(dt)), r = exp(g);
        assert_true(fabs(r / (1 - r) - ds[i]) < 1e-9 * ds[i] + 1e-12);
    }
    double A_log, dt;
    distill_decay_params(0.0, &A_log, &dt); /* attends only to itself: clamped */
    assert_true(fabs(dt + log(DISTILL_DIST_MIN)) < 1e-12);
    distill_decay_params(NAN, &A_log, &dt);
    assert_true(isfinite(dt));
    distill_decay_params(1e9, &A_log, &dt);
    assert_true(fabs(dt + log(DISTILL_DIST_MAX)) < 1e-12);
}

static gdn_config small(const char *mixers, int n_layers) {
    gdn_config c;
    gdn_config_defaults(&c);
    c.d_model = 16;
    c.n_layers = n_layers;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 8;
    c.d_ff = 16;
    snprintf(c.mixers, sizeof c.mixers, "%s", mixers);
    return c;
}

/* q_proj = 0 makes every score 0: p(t, s) = 1/(t+1), E|t-s| = t/2, mean over t = (T-1)/4;
 * layer 1 (softmax too) sees other inputs but its heads are measured as well, and a G layer
 * has none (NaN). */
static void test_uniform_attention_distance(void **state) {
    (void)state;
    gdn_config c = small("AAG", 3);
    c.head_dim = 8;
    c.expand_v = 1;
    gdn_param_table t;
    gdn_param_table_build(&t, &c);
    float *P = malloc(t.total * sizeof *P);
    gdn_params_init(P, &t, 5);
    memset(P + t.layer[0].q_proj, 0, sizeof *P * (size_t)c.n_heads * 8 * 16);
    const int T = 13, n = 2;
    int tokens[26];
    for (int i = 0; i < n * T; i++) tokens[i] = (i * 37 + 11) % c.vocab_size;
    double dist[3 * 4];
    distill_attention_distance(&t, P, tokens, n, T, dist);
    for (int h = 0; h < 4; h++) {
        assert_true(fabs(dist[h] - (T - 1) / 4.0) < 1e-6);
        assert_true(isfinite(dist[4 + h]) && dist[4 + h] >= 0 && dist[4 + h] <= T - 1);
        assert_true(isnan(dist[8 + h]));
    }
    free(P);
    gdn_param_table_free(&t);
}

static void test_student_mixers(void **state) {
    (void)state;
    char letters[600], err[512];
    gdn_config c = small("A", 4), s;
    assert_int_equal(distill_student_mixers(&c, NULL, "1,3", letters, err, sizeof err), 0);
    assert_string_equal(letters, "GAGA");
    assert_int_equal(distill_student_config(&c, letters, &s, err, sizeof err), 0);
    assert_string_equal(s.mixers, "GA"); /* the shortest pattern whose length divides n_layers */
    assert_int_equal(s.head_dim, 8);
    assert_int_equal(s.expand_v, 1);
    assert_int_equal(distill_student_mixers(&c, "GGAG", NULL, letters, err, sizeof err), 0);
    assert_int_equal(distill_student_config(&c, letters, &s, err, sizeof err), 0);
    assert_string_equal(s.mixers, "GGAG");
    assert_int_equal(distill_student_mixers(&c, "MDLA", NULL, letters, err, sizeof err), 0);
    assert_string_equal(letters, "MDLA");
    assert_int_equal(distill_student_mixers(&c, NULL, "-1", letters, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "out of range");
    assert_int_equal(distill_student_mixers(&c, NULL, "", letters, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "empty list");
    assert_int_equal(distill_student_mixers(&c, NULL, "1,", letters, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "not a layer index");
    assert_int_equal(distill_student_mixers(&c, "A", NULL, letters, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "keeps every softmax layer");
    /* attn_head_dim differs from head_dim in an all-A teacher: the student takes the former */
    c.attn_head_dim = 16;
    assert_int_equal(distill_student_mixers(&c, NULL, NULL, letters, err, sizeof err), 0);
    assert_int_equal(distill_student_config(&c, letters, &s, err, sizeof err), 0);
    assert_int_equal(s.head_dim, 16);
    assert_int_equal(gdn_config_head_v(&s), 16);
}

/* 300 layers whose kept layers repeat with no period up to GDN_MAX_MIXERS: refused; a kept
 * layer every 100 layers repeats with period 100. */
static void test_long_patterns(void **state) {
    (void)state;
    char letters[400], err[512];
    gdn_config c = small("A", 300), s;
    assert_int_equal(distill_student_mixers(&c, NULL, "0,100,200", letters, err, sizeof err), 0);
    assert_int_equal(distill_student_config(&c, letters, &s, err, sizeof err), 0);
    assert_int_equal((int)strlen(s.mixers), 100);
    assert_int_equal(distill_student_mixers(&c, NULL, "7,299", letters, err, sizeof err), 0);
    assert_int_equal(distill_student_config(&c, letters, &s, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "period");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decay_matches_distance),
        cmocka_unit_test(test_uniform_attention_distance),
        cmocka_unit_test(test_student_mixers),
        cmocka_unit_test(test_long_patterns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
