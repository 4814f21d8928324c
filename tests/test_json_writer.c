/* io/json writer: compact and pretty output, numbers that read back exactly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"

#include "tests/io_fixture.h"

/* ---- JSON writer ---------------------------------------------------------------------------- */

static void test_json_writer_compact_and_pretty(void **state) {
    (void)state;
    io_jw w;
    io_jw_init(&w, 0);
    io_jw_begin_object(&w);
    io_jw_kv_int(&w, "step", 12);
    io_jw_kv_number(&w, "loss", 2.5);
    io_jw_kv_number(&w, "lr", 0.1);
    io_jw_kv_number(&w, "nan", NAN);
    io_jw_kv_number(&w, "inf", -INFINITY);
    io_jw_kv_bool(&w, "ok", 1);
    io_jw_key(&w, "xs");
    io_jw_begin_array(&w);
    io_jw_null(&w);
    io_jw_begin_object(&w);
    io_jw_end_object(&w);
    io_jw_begin_array(&w);
    io_jw_end_array(&w);
    io_jw_end_array(&w);
    io_jw_kv_string(&w, "q", "a\"b\\c\n");
    io_jw_end_object(&w);
    assert_string_equal(io_jw_text(&w),
                        "{\"step\":12,\"loss\":2.5,\"lr\":0.1,\"nan\":null,\"inf\":null,"
                        "\"ok\":true,\"xs\":[null,{},[]],\"q\":\"a\\\"b\\\\c\\n\"}");

    io_jw_reset(&w);
    io_jw_begin_array(&w);
    io_jw_int(&w, -3);
    io_jw_end_array(&w);
    assert_string_equal(io_jw_text(&w), "[-3]");
    io_jw_free(&w);

    io_jw_init(&w, 1);
    io_jw_begin_object(&w);
    io_jw_key(&w, "model");
    io_jw_begin_object(&w);
    io_jw_kv_int(&w, "d_model", 256);
    io_jw_kv_string(&w, "layers", "GGGA");
    io_jw_end_object(&w);
    io_jw_key(&w, "betas");
    io_jw_begin_array(&w);
    io_jw_number(&w, 0.9);
    io_jw_number(&w, 0.95);
    io_jw_end_array(&w);
    io_jw_end_object(&w);
    assert_string_equal(io_jw_text(&w), "{\n"
                                        "  \"model\": {\n"
                                        "    \"d_model\": 256,\n"
                                        "    \"layers\": \"GGGA\"\n"
                                        "  },\n"
                                        "  \"betas\": [\n"
                                        "    0.9,\n"
                                        "    0.95\n"
                                        "  ]\n"
                                        "}");
    io_jw_free(&w);
}

static void test_json_writer_round_trip(void **state) {
    (void)state;
    /* every control character, quote, backslash, multi-byte UTF-8, an embedded NUL */
    char s[64];
    size_t n = 0;
    for (int c = 1; c < 0x20; c++) s[n++] = (char)c;
    memcpy(s + n, "\"\\/\x7f\xC3\xA9\xF0\x9F\x98\x80", 11);
    n += 11;
    s[n++] = 0;
    s[n++] = 'z';
    const double xs[] = {0.1, 1.0 / 3.0, 1e300, -0.0, 5e-324, DBL_MAX, -DBL_MIN, 3e-4, 123456789.0,
                         9007199254740993.0, 2.5e-17, -1.7976931348623157e308};
    const size_t nx = sizeof xs / sizeof *xs;

    for (int pretty = 0; pretty <= 1; pretty++) {
        io_jw w;
        io_jw_init(&w, pretty);
        io_jw_begin_object(&w);
        io_jw_key(&w, s); /* keys are escaped too (up to the NUL) */
        io_jw_string_n(&w, s, n);
        io_jw_key(&w, "xs");
        io_jw_begin_array(&w);
        for (size_t i = 0; i < nx; i++) io_jw_number(&w, xs[i]);
        io_jw_end_array(&w);
        io_jw_kv_string(&w, "bad utf8", "a\xFF" "b\xC3");
        io_jw_end_object(&w);

        char err[256];
        io_json *v = io_json_parse(io_jw_text(&w), w.len, "written", err, sizeof err);
        if (!v) fail_msg("writer output does not parse: %s\n%s", err, io_jw_text(&w));
        assert_int_equal(v->n_items, 3);
        assert_string_equal(v->items[0].key, s);
        assert_int_equal(v->items[0].string_len, n);
        assert_memory_equal(v->items[0].string, s, n);
        const io_json *a = io_json_get(v, "xs");
        assert_int_equal(a->n_items, nx);
        for (size_t i = 0; i < nx; i++) {
            if (memcmp(&a->items[i].number, &xs[i], sizeof(double)) != 0)
                fail_msg("number %zu: wrote %.17g, read back %.17g", i, xs[i], a->items[i].number);
        }
        assert_string_equal(io_json_get(v, "bad utf8")->string, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");

        /* a parsed tree written again gives the same text */
        io_jw w2;
        io_jw_init(&w2, pretty);
        io_jw_value(&w2, v);
        assert_string_equal(io_jw_text(&w2), io_jw_text(&w));
        io_jw_free(&w2);
        io_json_free(v);
        io_jw_free(&w);
    }

    /* the shortest round-tripping form is used */
    io_jw w;
    io_jw_init(&w, 0);
    io_jw_begin_array(&w);
    io_jw_number(&w, 0.1);
    io_jw_number(&w, 1.0 / 3.0);
    io_jw_number(&w, 1e21);
    io_jw_end_array(&w);
    assert_string_equal(io_jw_text(&w), "[0.1,0.3333333333333333,1e+21]");
    io_jw_free(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_writer_compact_and_pretty),
        cmocka_unit_test(test_json_writer_round_trip),
    };
    return cmocka_run_group_tests(tests, io_fixture_setup, io_fixture_teardown);
}
