/* Which mixer patterns the CUDA model takes (model/cuda/cuda_mixers.h): every kind of the
 * delta-rule family, and a layer of any other kind is named with its pattern letter. Plain C, no
 * GPU: the trainer and `gdn bench` refuse with it before choosing a device. */
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
    snprintf(c.mixers, sizeof c.mixers, "%s", pattern);
    return c;
}

static void test_family_runs(void **state) {
    (void)state;
    for (int v = 0; v < GDN_MIXER_COUNT; v++) {
        const gdn_mixer_info *mx = gdn_mixer_get(v);
        const int family = mx->kind == 'G' || mx->kind == 'D' || mx->kind == 'M' || mx->kind == 'L';
        assert_int_equal(gdn_cuda_has_mixer(v), family);
    }
    assert_false(gdn_cuda_has_mixer(-1));
    assert_false(gdn_cuda_has_mixer(GDN_MIXER_COUNT));
    const char *ok[] = {"G", "GDML", "MLLG", "LD", ""};
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_family_runs),
        cmocka_unit_test(test_other_kind_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
