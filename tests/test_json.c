/* io/json reader: parsing, error positions, typed getters, overrides, limits on size and depth. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"

#include "tests/io_fixture.h"

/* ---- JSON reader ---------------------------------------------------------------------------- */

static void test_json_parse_nested(void **state) {
    (void)state;
    const char *text =
        "{\n"
        "  \"model\": {\"d_model\": 256, \"n_layers\": 4, \"layers\": \"GGGA\"},\n"
        "  \"train\": {\"lr\": 3e-4, \"betas\": [0.9, 0.95], \"steps\": 1200000000,\n"
        "            \"clip\": null, \"bf16\": true, \"resume\": false},\n"
        "  \"name\": \"caf\\u00e9 \\\"q\\\" \\ud83d\\ude00 tab\\tnl\\n\\/\",\n"
        "  \"neg\": -0.5E+2, \"zero\": 0, \"empty\": {}, \"none\": []\n"
        "}\n";
    char err[512];
    io_json *root = io_json_parse(text, strlen(text), "cfg.json", err, sizeof err);
    if (!root) fail_msg("%s", err);
    assert_int_equal(root->type, IO_JSON_OBJECT);
    assert_int_equal(root->n_items, 7);

    const io_json *model = io_json_get(root, "model");
    int d = 0, layers = 0;
    assert_int_equal(io_json_get_int(model, "d_model", &d, err, sizeof err), 1);
    assert_int_equal(d, 256);
    assert_int_equal(io_json_get_int(model, "n_layers", &layers, err, sizeof err), 1);
    assert_int_equal(layers, 4);
    const char *pattern = NULL;
    assert_int_equal(io_json_get_string(model, "layers", &pattern, err, sizeof err), 1);
    assert_string_equal(pattern, "GGGA");
    assert_int_equal(model->line, 2);
    assert_int_equal(model->column, 12);

    const io_json *train = io_json_get(root, "train");
    double lr = 0;
    assert_int_equal(io_json_get_number(train, "lr", &lr, err, sizeof err), 1);
    assert_true(lr == 3e-4);
    int64_t steps = 0;
    assert_int_equal(io_json_get_i64(train, "steps", &steps, err, sizeof err), 1);
    assert_true(steps == 1200000000);
    const io_json *betas = io_json_get(train, "betas");
    assert_int_equal(betas->type, IO_JSON_ARRAY);
    assert_int_equal(betas->n_items, 2);
    assert_true(betas->items[1].number == 0.95);
    assert_int_equal(betas->items[1].line, 3);
    assert_int_equal(betas->items[1].column, 40);
    assert_int_equal(io_json_get(train, "clip")->type, IO_JSON_NULL);
    int b = -1;
    assert_int_equal(io_json_get_bool(train, "bf16", &b, err, sizeof err), 1);
    assert_int_equal(b, 1);
    assert_int_equal(io_json_get_bool(train, "resume", &b, err, sizeof err), 1);
    assert_int_equal(b, 0);

    const io_json *name = io_json_get(root, "name");
    const char *want = "caf\xC3\xA9 \"q\" \xF0\x9F\x98\x80 tab\tnl\n/";
    assert_string_equal(name->string, want);
    assert_int_equal(name->string_len, strlen(want));
    assert_true(io_json_get(root, "neg")->number == -50.0);
    assert_true(io_json_get(root, "zero")->number == 0.0);
    assert_int_equal(io_json_get(root, "empty")->n_items, 0);
    assert_int_equal(io_json_get(root, "none")->type, IO_JSON_ARRAY);

    /* absent keys leave the default alone */
    int absent = 7;
    assert_int_equal(io_json_get_int(root, "missing", &absent, err, sizeof err), 0);
    assert_int_equal(absent, 7);
    assert_null(io_json_get(root, "missing"));
    assert_null(io_json_get(io_json_get(root, "zero"), "x")); /* not an object */
    io_json_free(root);
}

typedef struct {
    const char *text;
    const char *message; /* must appear in the error, with the position */
} bad_json;

static void test_json_error_positions(void **state) {
    (void)state;
    static const bad_json cases[] = {
        {"{\n  \"a\": 1,\n  \"b\": 2\n  \"c\": 3\n}",
         "c.json:4:3: expected ',' or '}' after an object member, found '\"'"},
        {"{\"a\": [1, 2,]}", "c.json:1:13: expected a value"},
        {"{\"a\": 1,}", "c.json:1:9: expected a member name in double quotes, found '}'"},
        {"{\"a\" 1}", "c.json:1:6: expected ':' after the member name, found '1'"},
        {"{\"a\": \"abc", "c.json:1:7: unterminated string"},
        {"[tru]", "c.json:1:2: invalid literal (expected true)"},
        {"[nullx]", "c.json:1:2: invalid literal (expected null)"},
        {"[01]", "c.json:1:2: numbers may not have leading zeros"},
        {"[1.]", "c.json:1:4: expected a digit after the decimal point, found ']'"},
        {"[1e]", "c.json:1:4: expected a digit in the exponent"},
        {"[-]", "c.json:1:3: expected a digit, found ']'"},
        {"[1e999]", "c.json:1:2: number 1e999 is too large"},
        {"[\"a\tb\"]", "c.json:1:4: raw control character 0x09"},
        {"[\"\\x\"]", "c.json:1:4: invalid escape '\\x'"},
        {"[\"\\u12G4\"]", "c.json:1:7: expected 4 hex digits after \\u, found 'G'"},
        {"[\"\\udc00\"]", "c.json:1:3: unpaired low surrogate \\uDC00"},
        {"[\"\\ud800x\"]", "c.json:1:3: high surrogate \\uD800 is not followed"},
        {"{\"a\": 1,\n \"a\": 2}", "c.json:2:2: duplicate member \"a\" (first at line 1)"},
        {"{} x", "c.json:1:4: expected end of input after the JSON value, found 'x'"},
        {"", "c.json:1:1: expected a value (object, array, string, number, true, false or "
             "null), found end of input"},
        {"  \n\n   ", "c.json:3:4: expected a value"},
        {"[NaN]", "c.json:1:2: expected a value (object"},
        {"['a']", "c.json:1:2: strings take double quotes"},
        {"{\"\xC3\xA9\": 1 x}", "c.json:1:9: expected ',' or '}'"}, /* columns count characters */
        {"[\"\xFF\"]", "c.json:1:3: invalid UTF-8 (byte 0xff)"},
        {"[\"\xC0\xAF\"]", "c.json:1:3: invalid UTF-8"},          /* overlong '/' */
        {"[\"\xED\xA0\x80\"]", "c.json:1:3: invalid UTF-8"},      /* encoded surrogate */
        {"{\"a\": 1 // comment\n}", "c.json:1:9: expected ',' or '}'"},
    };
    char err[512];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        err[0] = 0;
        io_json *v = io_json_parse(cases[i].text, strlen(cases[i].text), "c.json", err, sizeof err);
        if (v) fail_msg("case %zu parsed but should fail: %s", i, cases[i].text);
        ASSERT_CONTAINS(err, cases[i].message);
    }

    /* nesting limit: the parser recurses, so depth is bounded rather than the stack */
    char deep[2 * IO_JSON_MAX_DEPTH + 8];
    int n = IO_JSON_MAX_DEPTH + 1;
    memset(deep, '[', (size_t)n);
    memset(deep + n, ']', (size_t)n);
    assert_null(io_json_parse(deep, 2 * (size_t)n, "deep.json", err, sizeof err));
    ASSERT_CONTAINS(err, "nesting deeper than 128 levels");
    io_json *ok = io_json_parse(deep + 1, 2 * (size_t)n - 2, "deep.json", err, sizeof err);
    if (!ok) fail_msg("depth %d should parse: %s", n - 1, err);
    io_json_free(ok);
}

static void test_json_file_and_typed_errors(void **state) {
    (void)state;
    char err[1024];
    const char *path = tmp_path("config.json");
    assert_null(io_json_parse_file(path, err, sizeof err));
    ASSERT_CONTAINS(err, "config.json: cannot open: No such file or directory");

    const char *text = "\xEF\xBB\xBF{\"lr\": \"fast\",\n \"d_model\": 512.5, \"layers\": 1e10,\n"
                       " \"steps\": 1e17, \"bf16\": 1, \"data\": 3, \"nul\": \"a\\u0000b\",\n"
                       " \"lrr\": 1}";
    write_file(path, text, strlen(text));
    io_json *root = io_json_parse_file(path, err, sizeof err);
    if (!root) fail_msg("%s", err);
    double lr = 1.0;
    assert_int_equal(io_json_get_number(root, "lr", &lr, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "config.json:1:8: field 'lr' must be a number, found a string");
    assert_true(lr == 1.0);
    int d = 0;
    assert_int_equal(io_json_get_int(root, "d_model", &d, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "config.json:2:13: field 'd_model' must be an integer in the int range, "
                         "found 512.5");
    assert_int_equal(io_json_get_int(root, "layers", &d, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "found 10000000000");
    int64_t steps = 0;
    assert_int_equal(io_json_get_i64(root, "steps", &steps, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "field 'steps' must be an integer of magnitude at most 2^53");
    int b = 0;
    assert_int_equal(io_json_get_bool(root, "bf16", &b, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "config.json:3:25: field 'bf16' must be true or false, found 1");
    const char *s = NULL;
    assert_int_equal(io_json_get_string(root, "data", &s, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "field 'data' must be a string, found 3");
    assert_int_equal(io_json_get_string(root, "nul", &s, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "without \\u0000");
    assert_int_equal(io_json_get(root, "nul")->string_len, 3);

    static const char *const known[] = {"lr", "d_model", "layers", "steps", "bf16", "data",
                                        "nul", NULL};
    assert_int_equal(io_json_check_keys(root, known, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "config.json:4:9: unknown field 'lrr' (known: lr d_model layers");
    static const char *const all[] = {"lr", "d_model", "layers", "steps", "bf16", "data", "nul",
                                      "lrr", NULL};
    assert_int_equal(io_json_check_keys(root, all, err, sizeof err), 0);
    io_json_free(root);
}

static void test_json_overrides(void **state) {
    (void)state;
    const char *text = "{\"model\": {\"d_model\": 256}, \"lr\": 0.001, \"name\": \"x\"}";
    char err[512];
    io_json *root = io_json_parse(text, strlen(text), "cfg.json", err, sizeof err);
    assert_non_null(root);
    assert_int_equal(io_json_set_path(root, "model.d_model", "512", "--model.d_model=512", err,
                                      sizeof err), 0);
    assert_int_equal(io_json_set_path(root, "lr", "3e-4", "--lr=3e-4", err, sizeof err), 0);
    assert_int_equal(io_json_set_path(root, "data", "data/kjv.txt.gz", "--data=data/kjv.txt.gz",
                                      err, sizeof err), 0);
    assert_int_equal(io_json_set_path(root, "name", "\"123\"", "--name=\"123\"", err, sizeof err),
                     0);
    assert_int_equal(io_json_set_path(root, "sched.warmup.steps", "100", "--sched.warmup.steps=100",
                                      err, sizeof err), 0);
    assert_int_equal(io_json_set_path(root, "model.tie", "true", "--model.tie=true", err,
                                      sizeof err), 0);

    int d = 0;
    const io_json *model = io_json_get(root, "model");
    assert_int_equal(io_json_get_int(model, "d_model", &d, err, sizeof err), 1);
    assert_int_equal(d, 512);
    assert_int_equal(model->n_items, 2); /* replaced in place, tie appended */
    double lr = 0;
    assert_int_equal(io_json_get_number(root, "lr", &lr, err, sizeof err), 1);
    assert_true(lr == 3e-4);
    const char *s = NULL;
    assert_int_equal(io_json_get_string(root, "data", &s, err, sizeof err), 1);
    assert_string_equal(s, "data/kjv.txt.gz");
    assert_int_equal(io_json_get_string(root, "name", &s, err, sizeof err), 1);
    assert_string_equal(s, "123");
    int steps = 0;
    assert_int_equal(io_json_get_int(io_json_get(io_json_get(root, "sched"), "warmup"), "steps",
                                     &steps, err, sizeof err), 1);
    assert_int_equal(steps, 100);

    /* a bad override is named by its argument, not by a file position */
    assert_int_equal(io_json_set_path(root, "lr", "[1,2]", "--lr=[1,2]", err, sizeof err), 0);
    assert_int_equal(io_json_get_number(root, "lr", &lr, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "--lr=[1,2]: field 'lr' must be a number, found an array");

    assert_int_equal(io_json_set_path(root, "lr.x", "1", "--lr.x=1", err, sizeof err), -1);
    ASSERT_CONTAINS(err, "--lr.x=1: 'lr' is an array (--lr=[1,2]), not an object");
    assert_int_equal(io_json_set_path(root, "name.first", "1", "--name.first=1", err, sizeof err),
                     -1);
    ASSERT_CONTAINS(err, "'name' is a string (--name=\"123\"), not an object");
    assert_int_equal(io_json_set_path(root, "model..x", "1", "--model..x=1", err, sizeof err), -1);
    ASSERT_CONTAINS(err, "--model..x=1: empty name in the setting path 'model..x'");
    io_json_free(root);

    text = "{\"a\": {\"b\": 1}}";
    root = io_json_parse(text, strlen(text), "c.json", err, sizeof err);
    assert_int_equal(io_json_set_path(root, "a.b.c", "1", "--a.b.c=1", err, sizeof err), -1);
    ASSERT_CONTAINS(err, "'a.b' is a number (c.json:1:13), not an object");
    io_json_free(root);
}

/* An override could build a tree deeper than any parsed document (a dotted path of 128 names,
 * or a deeply nested value under a path), which the writer then refused with an internal-check
 * exit: overrides are held to the parser's limit, and whatever they build can be written. */
static void test_json_override_depth_limit(void **state) {
    (void)state;
    char err[512], path[2 * IO_JSON_MAX_DEPTH + 8], value[2 * IO_JSON_MAX_DEPTH + 8];
    for (int k = IO_JSON_MAX_DEPTH - 1; k <= IO_JSON_MAX_DEPTH; k++) {
        io_json *root = io_json_parse("{\"a\": 1}", 8, "c.json", err, sizeof err);
        assert_non_null(root);
        size_t m = 0;
        for (int i = 0; i < k; i++) m += (size_t)sprintf(path + m, "%sb", i ? "." : "");
        int rc = io_json_set_path(root, path, "1", "--deep", err, sizeof err);
        if (k == IO_JSON_MAX_DEPTH) { /* the value would sit at depth 129 */
            assert_int_equal(rc, -1);
            ASSERT_CONTAINS(err, "--deep: the setting 'b.b.b.b");
            ASSERT_CONTAINS(err, "nests deeper than 128 levels");
            assert_int_equal(root->n_items, 1); /* nothing changed */
        } else {
            if (rc) fail_msg("%s", err);
            io_jw w;
            io_jw_init(&w, 0);
            io_jw_value(&w, root);
            io_json *back = io_json_parse(io_jw_text(&w), w.len, "back", err, sizeof err);
            if (!back) fail_msg("%s", err);
            io_json_free(back);
            io_jw_free(&w);
        }
        io_json_free(root);
    }
    /* a nested value under a one-name path: 127 levels fit, 128 do not */
    for (int d = IO_JSON_MAX_DEPTH - 1; d <= IO_JSON_MAX_DEPTH; d++) {
        io_json *root = io_json_parse("{}", 2, "c.json", err, sizeof err);
        memset(value, '[', (size_t)d);
        memset(value + d, ']', (size_t)d);
        value[2 * d] = 0;
        int rc = io_json_set_path(root, "x", value, "--x", err, sizeof err);
        assert_int_equal(rc, d == IO_JSON_MAX_DEPTH ? -1 : 0);
        assert_int_equal(root->n_items, d == IO_JSON_MAX_DEPTH ? 0 : 1);
        io_jw w;
        io_jw_init(&w, 1);
        io_jw_value(&w, root);
        io_jw_free(&w);
        io_json_free(root);
    }
}

/* ---- input sizes ---------------------------------------------------------------------------- */

/* JSON text of an object with n distinct members "k0".."k{n-1}"; when dup_of >= 0 one more
 * member repeats key dup_of on its own last line. */
static char *many_keys(size_t n, long dup_of, size_t *len) {
    char *t = malloc(n * 24 + 64);
    assert_non_null(t);
    size_t m = 0;
    t[m++] = '{';
    for (size_t i = 0; i < n; i++) m += (size_t)sprintf(t + m, "%s\"k%zu\":%zu", i ? "," : "", i, i);
    if (dup_of >= 0) m += (size_t)sprintf(t + m, ",\n\"k%ld\":0", dup_of);
    t[m++] = '}';
    *len = m;
    return t;
}

/* Duplicate detection used to compare each key with every earlier one: n^2 / 2 comparisons
 * (2 * 10^10 here, minutes). The work is counted, not timed: it must stay linear. */
static void test_json_many_keys_linear(void **state) {
    (void)state;
    char err[512];
    const size_t n = 200000;
    size_t len;
    char *text = many_keys(n, -1, &len);
    unsigned long long c0 = io_json_key_compares();
    io_json *root = io_json_parse(text, len, "big.json", err, sizeof err);
    unsigned long long compares = io_json_key_compares() - c0;
    if (!root) fail_msg("%s", err);
    assert_int_equal(root->n_items, n);
    for (size_t i = 0; i < n; i += 997) {
        char k[32];
        snprintf(k, sizeof k, "k%zu", i);
        const io_json *v = io_json_get(root, k);
        assert_non_null(v);
        assert_true(v->type == IO_JSON_NUMBER && v->number == (double)i);
    }
    io_json_free(root);
    if (compares > 2 * n) fail_msg("%llu key comparisons for %zu keys: not linear", compares, n);
    free(text);

    /* a duplicate is still found, wherever its first occurrence is */
    const long firsts[] = {0, 7, 8, 9, 1000, (long)n - 1};
    for (size_t f = 0; f < sizeof firsts / sizeof *firsts; f++) {
        text = many_keys(n, firsts[f], &len);
        assert_null(io_json_parse(text, len, "big.json", err, sizeof err));
        char want[128];
        snprintf(want, sizeof want, "big.json:2:1: duplicate member \"k%ld\" (first at line 1)",
                 firsts[f]);
        ASSERT_CONTAINS(err, want);
        free(text);
    }
}

/* Duplicate detection against the plain definition on objects of every small size: keys drawn
 * from a small alphabet so that repeats (and hash collisions) are common. */
static void test_json_duplicate_keys_exhaustive(void **state) {
    (void)state;
    char err[512], text[4096];
    uint64_t r = 12345;
    for (int trial = 0; trial < 3000; trial++) {
        int n = 1 + trial % 60, first_dup = -1, first_of = -1;
        int keys[64];
        size_t m = 0;
        text[m++] = '{';
        for (int i = 0; i < n; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            keys[i] = (int)((r >> 33) % (uint64_t)(trial % 3 == 0 ? 40 : 4000));
            for (int j = 0; j < i && first_dup < 0; j++)
                if (keys[j] == keys[i]) first_dup = i, first_of = j;
            m += (size_t)sprintf(text + m, "%s\"%d\":\n%d", i ? "," : "", keys[i], i);
        }
        text[m++] = '}';
        io_json *root = io_json_parse(text, m, "t.json", err, sizeof err);
        if (first_dup < 0) {
            if (!root) fail_msg("trial %d: %s", trial, err);
            assert_int_equal(root->n_items, (size_t)n);
            io_json_free(root);
        } else {
            assert_null(root);
            /* member i's key is on line i + 1, its value on line i + 2 */
            char want[128];
            snprintf(want, sizeof want, "t.json:%d:", first_dup + 1);
            ASSERT_CONTAINS(err, want);
            snprintf(want, sizeof want, ": duplicate member \"%d\" (first at line %d)",
                     keys[first_dup], first_of + 2);
            ASSERT_CONTAINS(err, want);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_parse_nested),
        cmocka_unit_test(test_json_error_positions),
        cmocka_unit_test(test_json_file_and_typed_errors),
        cmocka_unit_test(test_json_overrides),
        cmocka_unit_test(test_json_override_depth_limit),
        cmocka_unit_test(test_json_many_keys_linear),
        cmocka_unit_test(test_json_duplicate_keys_exhaustive),
    };
    return cmocka_run_group_tests(tests, io_fixture_setup, io_fixture_teardown);
}
