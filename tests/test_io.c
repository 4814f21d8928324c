/* io: JSON reader/writer, text and token shards, training/validation windows, gdn data. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/dataset.h"
#include "io/json.h"
#include "io/tokens.h"
#include "train/commands.h"

#define ASSERT_CONTAINS(hay, needle)                                                  \
    do {                                                                              \
        if (!strstr((hay), (needle)))                                                 \
            fail_msg("message \"%s\"\n  does not contain \"%s\"", (hay), (needle));   \
    } while (0)

static char g_dir[64]; /* per-run temporary directory */

static const char *tmp_path(const char *name) {
    static char buf[8][256];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 256, "%s/%s", g_dir, name);
    return p;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/gdn_test_io_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

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

/* ---- text and shards ------------------------------------------------------------------------ */

/* Every byte value, then some text, so the tokenizer sees 0 and 255 too. */
static size_t sample_text(unsigned char *buf, size_t cap) {
    size_t n = 0;
    for (int c = 0; c < 256; c++) buf[n++] = (unsigned char)c;
    const char *verse = "In the beginning God created the heaven and the earth. ";
    while (n + strlen(verse) <= cap) {
        memcpy(buf + n, verse, strlen(verse));
        n += strlen(verse);
    }
    return n;
}

static void write_gzip(const char *path, const void *data, size_t n) {
    gzFile gz = gzopen(path, "wb9");
    assert_non_null(gz);
    assert_int_equal(gzwrite(gz, data, (unsigned)n), (int)n);
    assert_int_equal(gzclose(gz), Z_OK);
}

static void test_text_plain_and_gzip(void **state) {
    (void)state;
    static unsigned char text[50000];
    size_t n = sample_text(text, sizeof text);
    write_file(tmp_path("t.txt"), text, n);
    write_gzip(tmp_path("t.txt.gz"), text, n);
    write_gzip(tmp_path("t_gz_no_suffix"), text, n);

    char err[512];
    const char *paths[] = {tmp_path("t.txt"), tmp_path("t.txt.gz"), tmp_path("t_gz_no_suffix")};
    for (int i = 0; i < 3; i++) {
        unsigned char *got;
        size_t len;
        if (io_text_read(paths[i], &got, &len, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(len, n);
        assert_memory_equal(got, text, n);
        free(got);
    }

    /* a gzip file cut short is an error, not a short corpus */
    FILE *f = fopen(tmp_path("t.txt.gz"), "rb");
    static unsigned char gz[60000];
    size_t gz_len = fread(gz, 1, sizeof gz, f);
    fclose(f);
    write_file(tmp_path("cut.txt.gz"), gz, gz_len / 2);
    unsigned char *got = NULL;
    size_t len;
    assert_int_equal(io_text_read(tmp_path("cut.txt.gz"), &got, &len, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "cut.txt.gz: ");
    ASSERT_CONTAINS(err, "gzip");
    gz[gz_len / 2] ^= 0xFF; /* corrupt the deflate stream in the middle */
    write_file(tmp_path("bad.txt.gz"), gz, gz_len);
    assert_int_equal(io_text_read(tmp_path("bad.txt.gz"), &got, &len, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "bad.txt.gz: ");

    assert_int_equal(io_text_read(tmp_path("absent.txt"), &got, &len, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "absent.txt: cannot open: No such file or directory");

    /* byte tokenizer */
    int toks[300];
    unsigned char back[300];
    io_byte_encode(text, 300, toks);
    for (int i = 0; i < 256; i++) assert_int_equal(toks[i], i);
    assert_int_equal(io_byte_decode(toks, 300, back), 0);
    assert_memory_equal(back, text, 300);
    toks[5] = 256;
    assert_int_equal(io_byte_decode(toks, 300, back), -1);
}

/* Concatenates a source's tokens. */
static uint32_t *gather(const io_tokens *t) {
    uint32_t *all = malloc((t->n_tokens + 1) * sizeof *all);
    size_t k = 0;
    for (int s = 0; s < t->n_spans; s++)
        for (size_t i = 0; i < t->spans[s].n; i++) all[k++] = io_span_at(&t->spans[s], i);
    assert_int_equal(k, t->n_tokens);
    return all;
}

/* text -> gdn data -> shards -> tokens equal to the bytes; u16 and u32; several shards. */
static void test_shard_round_trip_via_gdn_data(void **state) {
    (void)state;
    static unsigned char text[40000];
    size_t n = sample_text(text, sizeof text);
    write_gzip(tmp_path("corpus.txt.gz"), text, n);
    const char *dtypes[] = {"u16", "u32"};
    for (int d = 0; d < 2; d++) {
        char in[256], out[256], val[64];
        snprintf(in, sizeof in, "--in=%s", tmp_path("corpus.txt.gz"));
        snprintf(out, sizeof out, "%s/rt_%s", g_dir, dtypes[d]);
        snprintf(val, sizeof val, "%d", 3001);
        char *argv[] = {"data", in, "--out", out, "--val-tokens", val, "--shard-tokens", "7000",
                        "--dtype", (char *)dtypes[d], NULL};
        assert_int_equal(gdn_cmd_data(10, argv), 0);

        char spec[600], err[512];
        snprintf(spec, sizeof spec, "%s_train_*.bin,%s_val_000000.bin", out, out);
        io_tokens t;
        if (io_tokens_open(&t, spec, 256, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(t.is_text, 0);
        assert_int_equal(t.n_spans, (int)((n - 3001 + 6999) / 7000) + 1);
        assert_int_equal(t.n_tokens, n);
        assert_int_equal(t.spans[0].width, d == 0 ? 2 : 4);
        assert_int_equal(t.spans[0].n, 7000);
        assert_int_equal(t.spans[t.n_spans - 1].n, 3001);
        uint32_t *all = gather(&t);
        for (size_t i = 0; i < n; i++)
            if (all[i] != text[i]) fail_msg("token %zu: %u, byte %u", i, all[i], text[i]);
        free(all);
        io_tokens_close(&t);
    }

    /* the text itself as a source: one width-1 span */
    io_tokens t;
    char err[512];
    if (io_tokens_open(&t, tmp_path("corpus.txt.gz"), 256, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(t.is_text, 1);
    assert_int_equal(t.n_tokens, n);
    assert_memory_equal(t.spans[0].data, text, n);
    io_tokens_close(&t);
}

static void test_shard_u32_round_trip(void **state) {
    (void)state;
    enum { N = 5000 };
    static uint32_t tok[N];
    for (uint32_t i = 0; i < N; i++) tok[i] = (i * 2654435761u) % 2147483647u; /* up to 2^31-2 */
    tok[0] = 0;
    tok[1] = 65536;
    tok[2] = 2147483646u;
    char err[512];
    const char *path = tmp_path("big_vocab.bin");
    assert_int_equal(io_shard_write(path, IO_SHARD_U32, tok, 4, N, err, sizeof err), 0);
    io_tokens t;
    if (io_tokens_open(&t, path, 2147483647, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(t.spans[0].width, 4);
    uint32_t *all = gather(&t);
    assert_memory_equal(all, tok, sizeof tok);
    free(all);
    io_tokens_close(&t);

    /* a vocabulary too small for them is caught at the first offending token */
    assert_int_equal(io_tokens_open(&t, path, 65536, err, sizeof err), -1);
    size_t first = 0;
    while (tok[first] < 65536) first++;
    char want[128];
    snprintf(want, sizeof want, "token id %u at position %zu is outside the vocabulary "
                                "(vocab_size 65536)", tok[first], first);
    ASSERT_CONTAINS(err, "big_vocab.bin: ");
    ASSERT_CONTAINS(err, want);

    /* uint16 shards cannot hold them, and nothing is written */
    const char *p16 = tmp_path("too_big_for_u16.bin");
    assert_int_equal(io_shard_write(p16, IO_SHARD_U16, tok, 4, N, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "token id 65536 at position 1 does not fit a uint16 shard");
    assert_int_equal(access(p16, F_OK), -1);

    /* uint16 shard of 16-bit tokens */
    static uint16_t t16[N];
    for (int i = 0; i < N; i++) t16[i] = (uint16_t)(i * 13);
    assert_int_equal(io_shard_write(p16, IO_SHARD_U16, t16, 2, N, err, sizeof err), 0);
    if (io_tokens_open(&t, p16, 65536, err, sizeof err)) fail_msg("%s", err);
    for (int i = 0; i < N; i++) assert_int_equal(io_span_at(&t.spans[0], (size_t)i), t16[i]);
    io_tokens_close(&t);
}

/* A hand-made shard: header fields as given, count_tokens uint16 tokens of value fill. */
static void raw_shard(const char *path, int32_t magic, int32_t version, int32_t count,
                      size_t n_tokens, uint16_t fill) {
    size_t bytes = IO_SHARD_HEADER_BYTES + 2 * n_tokens;
    unsigned char *b = calloc(1, bytes);
    int32_t h[3] = {magic, version, count};
    memcpy(b, h, sizeof h);
    for (size_t i = 0; i < n_tokens; i++) memcpy(b + IO_SHARD_HEADER_BYTES + 2 * i, &fill, 2);
    write_file(path, b, bytes);
    free(b);
}

static void test_shard_errors(void **state) {
    (void)state;
    char err[512];
    io_tokens t;
    raw_shard(tmp_path("magic.bin"), 20240326, 1, 10, 10, 1);
    assert_int_equal(io_tokens_open(&t, tmp_path("magic.bin"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "magic.bin: bad magic 20240326 in the shard header (expected 20240520)");

    raw_shard(tmp_path("version.bin"), IO_SHARD_MAGIC, 3, 10, 10, 1);
    assert_int_equal(io_tokens_open(&t, tmp_path("version.bin"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "version.bin: unsupported shard version 3 (expected 1 = uint16 tokens or "
                         "2 = uint32 tokens)");

    raw_shard(tmp_path("trunc.bin"), IO_SHARD_MAGIC, 1, 100, 60, 1);
    assert_int_equal(io_tokens_open(&t, tmp_path("trunc.bin"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "trunc.bin: the header says 100 tokens of 2 bytes (1224 bytes in all) "
                         "but the file has 1144 bytes: truncated");

    raw_shard(tmp_path("long.bin"), IO_SHARD_MAGIC, 1, 10, 11, 1);
    assert_int_equal(io_tokens_open(&t, tmp_path("long.bin"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "long.bin: the header says 10 tokens");
    ASSERT_CONTAINS(err, "trailing data");

    raw_shard(tmp_path("neg.bin"), IO_SHARD_MAGIC, 1, -5, 0, 1);
    assert_int_equal(io_tokens_open(&t, tmp_path("neg.bin"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "neg.bin: negative token count -5");

    write_file(tmp_path("tiny.bin"), "abc", 3);
    assert_int_equal(io_tokens_open(&t, tmp_path("tiny.bin"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "tiny.bin: 3 bytes, shorter than the 1024-byte token shard header");

    /* token id >= vocab: named with the file and its position */
    uint16_t toks[50];
    for (int i = 0; i < 50; i++) toks[i] = (uint16_t)(i * 5);
    assert_int_equal(io_shard_write(tmp_path("vocab.bin"), 1, toks, 2, 50, err, sizeof err), 0);
    assert_int_equal(io_tokens_open(&t, tmp_path("vocab.bin"), 200, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "vocab.bin: token id 200 at position 40 is outside the vocabulary "
                         "(vocab_size 200)");
    if (io_tokens_open(&t, tmp_path("vocab.bin"), 246, err, sizeof err)) fail_msg("%s", err);
    io_tokens_close(&t);

    /* text needs the byte vocabulary */
    write_file(tmp_path("hi.txt"), "ok \xC3\xA9", 5);
    assert_int_equal(io_tokens_open(&t, tmp_path("hi.txt"), 128, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "hi.txt: byte 195 at offset 3 is outside the vocabulary (vocab_size 128)");

    assert_int_equal(io_tokens_open(&t, tmp_path("absent.bin"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "absent.bin: cannot open token shard: No such file or directory");
    char spec[512];
    snprintf(spec, sizeof spec, "%s/nothing_*.bin", g_dir);
    assert_int_equal(io_tokens_open(&t, spec, 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "nothing_*.bin: no file matches this pattern");
    snprintf(spec, sizeof spec, "%s,%s", tmp_path("vocab.bin"), tmp_path("hi.txt"));
    assert_int_equal(io_tokens_open(&t, spec, 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "hi.txt: cannot mix text files and token shards");
    assert_int_equal(io_tokens_open(&t, ",", 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "empty token source");
    /* a shard that is not named .bin would be read as text: refused */
    FILE *f = fopen(tmp_path("vocab.bin"), "rb");
    static unsigned char raw[2048];
    size_t raw_n = fread(raw, 1, sizeof raw, f);
    fclose(f);
    write_gzip(tmp_path("vocab.bin.gz"), raw, raw_n);
    assert_int_equal(io_tokens_open(&t, tmp_path("vocab.bin.gz"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "vocab.bin.gz: starts with the token shard magic but is read as text");
    snprintf(spec, sizeof spec, "%s/adir.bin", g_dir);
    assert_int_equal(mkdir(spec, 0700), 0);
    assert_int_equal(io_tokens_open(&t, spec, 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "adir.bin: not a regular file");
    assert_int_equal(mkdir(tmp_path("adir.txt"), 0700), 0);
    assert_int_equal(io_tokens_open(&t, tmp_path("adir.txt"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "adir.txt: not a regular file (a directory)");

    /* a failed open leaves nothing to close, and a good file before a bad one is released */
    snprintf(spec, sizeof spec, "%s,%s", tmp_path("vocab.bin"), tmp_path("magic.bin"));
    assert_int_equal(io_tokens_open(&t, spec, 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "magic.bin: bad magic");
    assert_int_equal(t.n_spans, 0);
}

/* ---- windows -------------------------------------------------------------------------------- */

/* Tokens equal to their position (+ offset), so a window's content reveals where it starts. */
static uint32_t *iota(size_t n, uint32_t offset) {
    uint32_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = (uint32_t)i + offset;
    return t;
}

static void test_windows_deterministic(void **state) {
    (void)state;
    enum { N = 1000, T = 15, B = 8 };
    uint32_t *data = iota(N, 0);
    io_tokens src;
    io_tokens_wrap(&src, data, 4, N, "iota");
    io_dataset ds;
    char err[512];
    io_dataset_opts o = {.seq_len = T, .seed = 1234};
    if (io_dataset_open(&ds, &src, NULL, &o, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(ds.n_train_starts, N - T);
    assert_int_equal(ds.n_val_windows, 0);

    /* pinned: sample g starts at splitmix64 output g (state mix64(seed)) mod the start count,
     * values from an independent implementation; a change here breaks resuming old runs */
    const size_t want1234[6] = {576, 563, 79, 856, 244, 639};
    for (int g = 0; g < 6; g++)
        assert_int_equal(io_dataset_train_start(&ds, (uint64_t)g), want1234[g]);

    int a[B * (T + 1)], b[B * (T + 1)], one[T + 1];
    io_dataset_train_batch(&ds, 100, B, 0, 1, a);
    io_dataset_train_batch(&ds, 100, B, 0, 1, b);
    assert_memory_equal(a, b, sizeof a);
    for (int r = 0; r < B; r++) {
        size_t start = io_dataset_train_start(&ds, 100 + (uint64_t)r);
        for (int j = 0; j <= T; j++) assert_int_equal(a[r * (T + 1) + j], (int)(start + (size_t)j));
        io_dataset_train_batch(&ds, 100 + (uint64_t)r, 1, 0, 1, one); /* resume at any sample */
        assert_memory_equal(one, a + r * (T + 1), sizeof one);
    }

    io_dataset ds2;
    io_dataset_opts o0 = {.seq_len = T, .seed = 0};
    if (io_dataset_open(&ds2, &src, NULL, &o0, err, sizeof err)) fail_msg("%s", err);
    const size_t want0[6] = {295, 370, 304, 214, 132, 315};
    for (int g = 0; g < 6; g++)
        assert_int_equal(io_dataset_train_start(&ds2, (uint64_t)g), want0[g]);
    io_dataset_train_batch(&ds2, 100, B, 0, 1, b);
    assert_true(memcmp(a, b, sizeof a) != 0);
    io_dataset_close(&ds2);

    /* uniform over every start, ends included: counts over 200k draws within 5 sigma */
    enum { DRAWS = 200000 };
    static int count[N];
    memset(count, 0, sizeof count);
    for (uint64_t g = 0; g < DRAWS; g++) count[io_dataset_train_start(&ds, g)]++;
    double mean = (double)DRAWS / (N - T), sd = sqrt(mean);
    for (int s = 0; s < N; s++) {
        if (s >= N - T) {
            assert_int_equal(count[s], 0); /* would run past the end */
            continue;
        }
        if (fabs(count[s] - mean) > 5 * sd)
            fail_msg("start %d drawn %d times, expected %.0f +- %.0f", s, count[s], mean, sd);
    }
    io_dataset_close(&ds);
    io_tokens_close(&src);
    free(data);
}

static void test_windows_ranks_disjoint(void **state) {
    (void)state;
    enum { N = 100000, T = 31, B = 4, WORLD = 4, STEPS = 50 };
    uint32_t *data = iota(N, 0);
    io_tokens src;
    io_tokens_wrap(&src, data, 4, N, "iota");
    io_dataset ds;
    char err[512];
    io_dataset_opts o = {.seq_len = T, .seed = 7, .val_tokens = 5000};
    if (io_dataset_open(&ds, &src, NULL, &o, err, sizeof err)) fail_msg("%s", err);

    /* rank r's row b at step k is global sample (k*B + b)*WORLD + r: together the ranks take
     * samples [k*B*WORLD, (k+1)*B*WORLD) exactly once */
    static unsigned char seen[STEPS * B * WORLD];
    memset(seen, 0, sizeof seen);
    int batch[B * (T + 1)], ref[T + 1];
    for (int k = 0; k < STEPS; k++)
        for (int r = 0; r < WORLD; r++) {
            io_dataset_train_batch(&ds, (uint64_t)k * B, B, r, WORLD, batch);
            for (int b = 0; b < B; b++) {
                uint64_t g = ((uint64_t)k * B + (uint64_t)b) * WORLD + (uint64_t)r;
                assert_true(g < sizeof seen);
                assert_int_equal(seen[g], 0);
                seen[g] = 1;
                io_dataset_train_batch(&ds, g, 1, 0, 1, ref); /* same as the world-1 sample g */
                assert_memory_equal(batch + b * (T + 1), ref, sizeof ref);
            }
        }
    for (size_t g = 0; g < sizeof seen; g++) assert_int_equal(seen[g], 1);

    /* validation batches: windows split between ranks without overlap */
    uint64_t nb = io_dataset_n_val_batches(&ds, B, WORLD);
    assert_int_equal(ds.n_val_windows, (5000 - 1) / T);
    assert_int_equal(nb, ds.n_val_windows / (B * WORLD));
    static unsigned char vseen[200];
    memset(vseen, 0, sizeof vseen);
    for (uint64_t i = 0; i < nb; i++)
        for (int r = 0; r < WORLD; r++) {
            io_dataset_val_batch(&ds, i, B, r, WORLD, batch);
            for (int b = 0; b < B; b++) {
                size_t first = (size_t)batch[b * (T + 1)];
                size_t w = (first - (N - 5000)) / T;
                assert_int_equal(first, io_dataset_val_start(&ds, w));
                assert_int_equal(vseen[w], 0);
                vseen[w] = 1;
            }
        }
    io_dataset_close(&ds);
    io_tokens_close(&src);
    free(data);
}

static void test_windows_validation_split(void **state) {
    (void)state;
    enum { N = 20000, T = 63 };
    uint32_t *data = iota(N, 0);
    io_tokens src;
    io_tokens_wrap(&src, data, 4, N, "iota");
    char err[512];
    const double fractions[] = {0.01, 0.05};
    for (int f = 0; f < 2; f++) {
        io_dataset ds;
        io_dataset_opts o = {.seq_len = T, .seed = 3, .val_fraction = fractions[f]};
        if (io_dataset_open(&ds, &src, NULL, &o, err, sizeof err)) fail_msg("%s", err);
        size_t hold = (size_t)llround(fractions[f] * N), cut = N - hold;
        assert_int_equal(ds.val.n_tokens, hold);
        assert_int_equal(ds.train.n_tokens, cut);
        size_t max_end = 0;
        for (uint64_t g = 0; g < 100000; g++) {
            size_t end = io_dataset_train_start(&ds, g) + T + 1;
            if (end > max_end) max_end = end;
        }
        assert_int_equal(max_end, cut); /* reaches the hold-out boundary, never past it */
        assert_int_equal(ds.n_val_windows, (hold - 1) / T);
        int win[T + 1];
        for (uint64_t w = 0; w < ds.n_val_windows; w++) {
            size_t s = io_dataset_val_start(&ds, w);
            assert_int_equal(s, cut + w * T);
            assert_true(s + T + 1 <= N);
            io_dataset_val_window(&ds, w, win);
            for (int j = 0; j <= T; j++) assert_int_equal(win[j], (int)(s + (size_t)j));
        }
        io_dataset_close(&ds);
    }

    /* a separate validation source: training uses all of train */
    uint32_t *vdata = iota(1000, 500000);
    io_tokens vsrc;
    io_tokens_wrap(&vsrc, vdata, 4, 1000, "val");
    io_dataset ds;
    io_dataset_opts o = {.seq_len = T, .seed = 3, .val_fraction = 0.5 /* ignored */};
    if (io_dataset_open(&ds, &src, &vsrc, &o, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(ds.train.n_tokens, N);
    assert_int_equal(ds.n_val_windows, (1000 - 1) / T);
    int win[T + 1];
    io_dataset_val_window(&ds, 2, win);
    assert_int_equal(win[0], 500000 + 2 * T);
    io_dataset_close(&ds);
    io_tokens_close(&vsrc);
    free(vdata);
    io_tokens_close(&src);
    free(data);
}

/* Windows never straddle two files: shard 2's tokens jump by 100000. */
static void test_windows_stay_inside_files(void **state) {
    (void)state;
    enum { T = 20 };
    const size_t sizes[3] = {300, 15 /* shorter than a window: never used */, 500};
    char err[512], spec[1024] = "";
    uint32_t offset = 0;
    for (int i = 0; i < 3; i++) {
        uint32_t *d = iota(sizes[i], offset);
        char name[32];
        snprintf(name, sizeof name, "span_%d.bin", i);
        assert_int_equal(io_shard_write(tmp_path(name), IO_SHARD_U32, d, 4, sizes[i], err,
                                        sizeof err), 0);
        free(d);
        offset += 100000;
    }
    snprintf(spec, sizeof spec, "%s/span_*.bin", g_dir);
    io_dataset ds;
    io_dataset_opts o = {.seq_len = T, .seed = 11};
    if (io_dataset_open_files(&ds, spec, NULL, 300000, &o, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(ds.n_train_starts, (300 - T) + (500 - T));
    int hits[3] = {0, 0, 0}, win[T + 1];
    for (uint64_t g = 0; g < 20000; g++) {
        io_dataset_train_batch(&ds, g, 1, 0, 1, win);
        for (int j = 1; j <= T; j++) assert_int_equal(win[j], win[0] + j);
        hits[win[0] / 100000]++;
    }
    assert_int_equal(hits[1], 0);
    /* files are drawn in proportion to their window starts: 280 : 480 */
    double share = (double)hits[0] / 20000, want = 280.0 / 760.0;
    assert_true(fabs(share - want) < 5 * sqrt(want * (1 - want) / 20000));
    io_dataset_close(&ds);
}

static void test_windows_too_short(void **state) {
    (void)state;
    uint32_t *data = iota(1000, 0);
    io_tokens src;
    char err[512];
    io_dataset ds;

    io_tokens_wrap(&src, data, 4, 10, "short.bin");
    io_dataset_opts o = {.seq_len = 16, .seed = 1};
    assert_int_equal(io_dataset_open(&ds, &src, NULL, &o, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "short.bin: the training data has 10 tokens, fewer than one window of "
                         "seq_len + 1 = 17 tokens");
    io_tokens_close(&src);

    /* exactly one window fits: accepted, and every sample is that window */
    io_tokens_wrap(&src, data, 4, 17, "exact.bin");
    if (io_dataset_open(&ds, &src, NULL, &o, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(ds.n_train_starts, 1);
    assert_int_equal(io_dataset_train_start(&ds, 12345), 0);
    io_dataset_close(&ds);
    io_tokens_close(&src);

    io_tokens_wrap(&src, data, 4, 1000, "corpus.bin");
    o.val_tokens = 5;
    assert_int_equal(io_dataset_open(&ds, &src, NULL, &o, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "corpus.bin: the validation hold-out has 5 tokens, fewer than one window "
                         "of seq_len + 1 = 17 tokens");
    o.val_tokens = 990;
    assert_int_equal(io_dataset_open(&ds, &src, NULL, &o, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "the training data has 10 tokens after the validation hold-out");
    o.val_tokens = 1000;
    assert_int_equal(io_dataset_open(&ds, &src, NULL, &o, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "holding out 1000 tokens for validation leaves no training data");
    o.val_tokens = 0;
    o.val_fraction = 1.0;
    assert_int_equal(io_dataset_open(&ds, &src, NULL, &o, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "val_fraction must be in [0, 1), got 1");
    o.val_fraction = 0;
    o.seq_len = 0;
    assert_int_equal(io_dataset_open(&ds, &src, NULL, &o, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "seq_len must be at least 1, got 0");

    io_tokens vsrc;
    io_tokens_wrap(&vsrc, data, 4, 16, "val.bin");
    o.seq_len = 16;
    assert_int_equal(io_dataset_open(&ds, &src, &vsrc, &o, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "val.bin: the validation data has no part of at least seq_len + 1 = 17 "
                         "tokens (the longest has 16)");
    io_tokens_close(&vsrc);
    io_tokens_close(&src);
    free(data);

    /* several files, none long enough */
    char err2[512], spec[512];
    uint16_t few[12] = {1, 2, 3};
    assert_int_equal(io_shard_write(tmp_path("few_a.bin"), 1, few, 2, 12, err2, sizeof err2), 0);
    assert_int_equal(io_shard_write(tmp_path("few_b.bin"), 1, few, 2, 9, err2, sizeof err2), 0);
    snprintf(spec, sizeof spec, "%s/few_*.bin", g_dir);
    assert_int_equal(io_dataset_open_files(&ds, spec, NULL, 256, &o, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "few_a.bin (+1 more files): no file of the training data holds a whole "
                         "window of seq_len + 1 = 17 tokens (the longest part has 12)");
}

/* Shards from gdn data's default split give the same windows as holding out the same 1% of
 * the text directly, so either route trains on the same data. */
static void test_gdn_data_split_matches_holdout(void **state) {
    (void)state;
    enum { T = 32 };
    static unsigned char text[60000];
    size_t n = sample_text(text, sizeof text);
    write_file(tmp_path("same.txt"), text, n);
    char in[256], out[256], err[512], train[300], val[300];
    snprintf(in, sizeof in, "%s", tmp_path("same.txt"));
    snprintf(out, sizeof out, "%s/same", g_dir);
    char *argv[] = {"data", "--in", in, "--out", out, NULL};
    assert_int_equal(gdn_cmd_data(5, argv), 0);
    snprintf(train, sizeof train, "%s_train_*.bin", out);
    snprintf(val, sizeof val, "%s_val_*.bin", out);

    io_dataset a, b;
    io_dataset_opts o = {.seq_len = T, .seed = 99, .val_fraction = 0.01};
    if (io_dataset_open_files(&a, in, NULL, 256, &o, err, sizeof err)) fail_msg("%s", err);
    if (io_dataset_open_files(&b, train, val, 256, &o, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(a.n_train_starts, b.n_train_starts);
    assert_int_equal(a.n_val_windows, b.n_val_windows);
    assert_true(a.n_val_windows > 0);
    int wa[4 * (T + 1)], wb[4 * (T + 1)];
    for (uint64_t s = 0; s < 400; s += 4) {
        io_dataset_train_batch(&a, s, 4, 0, 1, wa);
        io_dataset_train_batch(&b, s, 4, 0, 1, wb);
        assert_memory_equal(wa, wb, sizeof wa);
    }
    for (uint64_t w = 0; w < a.n_val_windows; w++) {
        io_dataset_val_window(&a, w, wa);
        io_dataset_val_window(&b, w, wb);
        assert_memory_equal(wa, wb, (T + 1) * sizeof(int));
    }
    io_dataset_close(&a);
    io_dataset_close(&b);
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

/* ---- regressions: input sizes and file types ----------------------------------------------- */

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

/* Inputs that are not regular files are refused before anything waits on them: a named pipe
 * without a writer used to block open() forever. alarm turns such a hang into a failure. */
static void test_inputs_must_be_regular_files(void **state) {
    (void)state;
    char err[512];
    io_tokens t;
    unsigned char *bytes;
    size_t n;
    assert_int_equal(mkfifo(tmp_path("fifo.bin"), 0600), 0);
    assert_int_equal(mkfifo(tmp_path("fifo.txt"), 0600), 0);
    alarm(60);
    assert_int_equal(io_tokens_open(&t, tmp_path("fifo.bin"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "fifo.bin: not a regular file (a named pipe (FIFO))");
    assert_int_equal(io_tokens_open(&t, tmp_path("fifo.txt"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "fifo.txt: not a regular file (a named pipe (FIFO))");
    assert_int_equal(io_text_read(tmp_path("fifo.txt"), &bytes, &n, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "fifo.txt: not a regular file (a named pipe (FIFO))");
    assert_null(io_json_parse_file(tmp_path("fifo.txt"), err, sizeof err));
    ASSERT_CONTAINS(err, "fifo.txt: not a regular file (a named pipe (FIFO))");
    /* a character device read as text used to give an empty corpus */
    assert_int_equal(io_tokens_open(&t, "/dev/null", 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "/dev/null: not a regular file (a character device)");
    assert_null(io_json_parse_file("/dev/null", err, sizeof err));
    ASSERT_CONTAINS(err, "/dev/null: not a regular file (a character device)");
    /* and /dev/zero read as text never ended */
    assert_int_equal(io_text_read("/dev/zero", &bytes, &n, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "/dev/zero: not a regular file (a character device)");
    assert_null(io_json_parse_file(g_dir, err, sizeof err));
    ASSERT_CONTAINS(err, "not a regular file (a directory)");
    alarm(0);
    /* regular files still open, the gzip path included */
    write_file(tmp_path("plain.txt"), "hello", 5);
    assert_int_equal(io_text_read(tmp_path("plain.txt"), &bytes, &n, err, sizeof err), 0);
    assert_int_equal(n, 5);
    free(bytes);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_parse_nested),
        cmocka_unit_test(test_json_error_positions),
        cmocka_unit_test(test_json_file_and_typed_errors),
        cmocka_unit_test(test_json_overrides),
        cmocka_unit_test(test_json_writer_compact_and_pretty),
        cmocka_unit_test(test_json_writer_round_trip),
        cmocka_unit_test(test_text_plain_and_gzip),
        cmocka_unit_test(test_shard_round_trip_via_gdn_data),
        cmocka_unit_test(test_shard_u32_round_trip),
        cmocka_unit_test(test_shard_errors),
        cmocka_unit_test(test_windows_deterministic),
        cmocka_unit_test(test_windows_ranks_disjoint),
        cmocka_unit_test(test_windows_validation_split),
        cmocka_unit_test(test_windows_stay_inside_files),
        cmocka_unit_test(test_windows_too_short),
        cmocka_unit_test(test_gdn_data_split_matches_holdout),
        cmocka_unit_test(test_json_override_depth_limit),
        cmocka_unit_test(test_json_many_keys_linear),
        cmocka_unit_test(test_json_duplicate_keys_exhaustive),
        cmocka_unit_test(test_inputs_must_be_regular_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
