/* libFuzzer harness: the JSON configuration parser (io/json.c) and writer (io/json_write.c).
 *
 * Every input is parsed; a rejected input must come with a message naming the source. An
 * accepted one is walked with every typed lookup, written back (compact and pretty) and parsed
 * again, which must give the same tree (the writer's numbers and escapes round-trip exactly),
 * and a few dotted-path overrides taken from its own strings are applied. Any crash, leak,
 * sanitizer report or mismatch is a failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "model/check.h"
#include "tests/fuzz/fuzz_common.h"

FUZZ_PLAIN_INIT

static int same(const io_json *a, const io_json *b) {
    if (a->type != b->type || a->n_items != b->n_items) return 0;
    if ((a->key == NULL) != (b->key == NULL) || (a->key && strcmp(a->key, b->key) != 0)) return 0;
    switch (a->type) {
    case IO_JSON_NULL: break;
    case IO_JSON_BOOL: return a->boolean == b->boolean;
    case IO_JSON_NUMBER: return a->number == b->number && !signbit(a->number) == !signbit(b->number);
    case IO_JSON_STRING:
        return a->string_len == b->string_len && memcmp(a->string, b->string, a->string_len) == 0;
    case IO_JSON_ARRAY:
    case IO_JSON_OBJECT:
        for (size_t i = 0; i < a->n_items; i++)
            if (!same(&a->items[i], &b->items[i])) return 0;
        break;
    }
    return 1;
}

/* Typed lookups of every member: each answers found / absent / wrong type, never anything else,
 * and a wrong type comes with a message. */
static void walk(const io_json *v, int *strings_left, const char **strings) {
    char err[1024], where[512];
    io_json_where(v, where, sizeof where);
    if (v->type == IO_JSON_STRING && *strings_left > 0 && strlen(v->string) == v->string_len)
        strings[--*strings_left] = v->string;
    if (v->type == IO_JSON_OBJECT) {
        static const char *const allowed[] = {"lr", "model", "d_model", "steps", "data", NULL};
        err[0] = 0;
        if (io_json_check_keys(v, allowed, err, sizeof err)) CHECK(err[0] != 0);
        for (size_t i = 0; i < v->n_items; i++) {
            const char *k = v->items[i].key;
            CHECK(k != NULL && io_json_get(v, k) == &v->items[i]); /* keys are unique */
            double d;
            int n, b, r;
            int64_t l;
            const char *s;
            err[0] = 0;
            r = io_json_get_number(v, k, &d, err, sizeof err);
            CHECK(r == 1 || (r == -1 && err[0]));
            r = io_json_get_int(v, k, &n, err, sizeof err);
            CHECK(r == 1 || r == -1);
            if (r == 1) CHECK((double)n == v->items[i].number);
            r = io_json_get_i64(v, k, &l, err, sizeof err);
            CHECK(r == 1 || r == -1);
            if (r == 1) CHECK((double)l == v->items[i].number);
            r = io_json_get_bool(v, k, &b, err, sizeof err);
            CHECK(r == 1 || r == -1);
            r = io_json_get_string(v, k, &s, err, sizeof err);
            CHECK(r == 1 || r == -1);
            if (r == 1) CHECK(strlen(s) == v->items[i].string_len);
        }
    }
    for (size_t i = 0; i < v->n_items; i++) walk(&v->items[i], strings_left, strings);
}

static void round_trip(const io_json *root, int pretty) {
    io_jw w;
    io_jw_init(&w, pretty);
    io_jw_value(&w, root);
    char err[512];
    io_json *back = io_json_parse(io_jw_text(&w), w.len, "written", err, sizeof err);
    if (!back) {
        fprintf(stderr, "fuzz_json: the writer's output does not parse: %s\n%s\n", err,
                io_jw_text(&w));
        abort();
    }
    CHECK(same(root, back));
    io_json_free(back);
    io_jw_free(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    err[0] = 0;
    io_json *root = io_json_parse((const char *)data, size, "fuzz.json", err, sizeof err);
    if (!root) {
        CHECK(strncmp(err, "fuzz.json:", 10) == 0);
        return 0;
    }
    const char *strings[4];
    int left = 4;
    walk(root, &left, strings);
    round_trip(root, 0);
    round_trip(root, 1);
    /* overrides: paths and values from the document's own strings (copied: an override may
     * replace the very member they came from, while the command line's strings outlive it) */
    if (root->type == IO_JSON_OBJECT) {
        char *copies[4] = {0};
        for (int i = 3; i >= left; i--) copies[i] = strdup(strings[i]);
        for (int i = 3; i > left; i -= 2) {
            err[0] = 0;
            int r = io_json_set_path(root, copies[i], copies[i - 1], "--fuzz", err, sizeof err);
            CHECK(r == 0 || (r == -1 && err[0]));
        }
        round_trip(root, 0);
        for (int i = 0; i < 4; i++) free(copies[i]);
    }
    io_json_free(root);
    return 0;
}
