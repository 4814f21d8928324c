/* Which mixer patterns the CUDA model takes (model/cuda/cuda_mixers.h): every kind of the
 * delta-rule family and attention with a head dim of 64 or 128; a layer of any other kind (or an
 * attention layer of another head dim) is named with its pattern letter. Plain C, no GPU: the
 * trainer and `gdn bench` refuse with it before choosing a device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "model/cuda/cuda_mixers.h"

static gdn_config config(const char *pattern, int n_layers) {
    gdn_config c;
    memset(&c, 0, sizeof c);
    c.n_layers = n_layers;
    c.head_dim = 64; /* also the attention head dim (attn_head_dim 0) */
    snprintf(c.mixers, sizeof c.mixers, "%s", pattern);
    return c;
}

static void test_family_runs(void **state) {
    (void)state;
    for (int v = 0; v < GDN_MIXER_COUNT; v++) {
        const gdn_mixer_info *mx = gdn_mixer_get(v);
        const int runs = mx->kind == 'G' || mx->kind == 'D' || mx->kind == 'M' || mx->kind == 'L' || mx->kind == 'A';
        assert_int_equal(gdn_cuda_has_mixer(v), runs);
    }
    assert_false(gdn_cuda_has_mixer(-1));
    assert_false(gdn_cuda_has_mixer(GDN_MIXER_COUNT));
    const char *ok[] = {"G", "GDML", "MLLG", "LD", "", "GGGA", "A", "GDAM"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        gdn_config c = config(ok[i], 8);
        char err[256] = "untouched";
        assert_int_equal(gdn_cuda_unsupported_layer(&c, err, sizeof err), -1);
        assert_string_equal(err, "untouched");
    }
}

static void test_other_kind_named(void **state) {
    (void)state;
    gdn_config c = config("GDX", 6); /* X: no kind of model/mixer.h (validation refuses it earlier) */
    char err[256];
    assert_int_equal(gdn_cuda_unsupported_layer(&c, err, sizeof err), 2);
    assert_non_null(strstr(err, "mixers GDX: layer 2 is X"));
    assert_non_null(strstr(err, "does not implement"));
    assert_int_equal(gdn_cuda_unsupported_layer(&c, NULL, 0), 2);
}

/* The linearized mixer (S) runs on the CPU only: a pattern with it is refused naming the layer,
 * whatever its head dims. */
static void test_linearized_refused(void **state) {
    (void)state;
    gdn_config c = config("GS", 4);
    c.head_dim = 64;
    char err[256];
    assert_int_equal(gdn_cuda_unsupported_layer(&c, err, sizeof err), 1);
    assert_non_null(strstr(err, "mixers GS: layer 1 is S (linearized)"));
    assert_non_null(strstr(err, "does not implement"));
}

/* Attention layers run with the head dims of the CUDA attention kernels only (64, 128); another
 * one is named (head_dim, or attn_head_dim when set) before any GPU memory is touched. */
static void test_attention_head_dim(void **state) {
    (void)state;
    const int dims[][3] = {/* head_dim, attn_head_dim, runs */
                           {64, 0, 1}, {128, 0, 1}, {32, 64, 1}, {32, 128, 1}, {32, 0, 0}, {64, 96, 0}, {64, 256, 0}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        gdn_config c = config("GGA", 6);
        c.head_dim = dims[i][0];
        c.attn_head_dim = dims[i][1];
        char err[256] = "";
        const int bad = gdn_cuda_unsupported_layer(&c, err, sizeof err);
        if (dims[i][2]) {
            assert_int_equal(bad, -1);
            continue;
        }
        assert_int_equal(bad, 2);
        char want[64];
        snprintf(want, sizeof want, "attn_head_dim %d", dims[i][1] ? dims[i][1] : dims[i][0]);
        assert_non_null(strstr(err, "mixers GGA: layer 2 is A"));
        assert_non_null(strstr(err, want));
        assert_non_null(strstr(err, "64 or 128"));
    }
    gdn_config c = config("GGGG", 4); /* no attention layer: the attention head dim does not matter */
    c.head_dim = 32;
    assert_int_equal(gdn_cuda_unsupported_layer(&c, NULL, 0), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_family_runs),
        cmocka_unit_test(test_other_kind_named),
        cmocka_unit_test(test_attention_head_dim),
        cmocka_unit_test(test_linearized_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
