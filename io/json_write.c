/* JSON writer: builds text in a growable buffer (metrics lines, the saved configuration). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "io/utf8.h"
#include "model/check.h"

static void put(io_jw *w, const char *s, size_t n) {
    if (w->len + n + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n + 1) cap *= 2;
        char *b = realloc(w->buf, cap);
        if (!b) GDN_DIE("out of memory writing JSON (%zu bytes)", cap);
        w->buf = b;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = 0;
}

static void puts_(io_jw *w, const char *s) { put(w, s, strlen(s)); }

static void newline_indent(io_jw *w) {
    if (!w->pretty) return;
    put(w, "\n", 1);
    for (int i = 0; i < w->depth; i++) put(w, "  ", 2);
}

void io_jw_init(io_jw *w, int pretty) {
    memset(w, 0, sizeof *w);
    w->pretty = pretty;
    put(w, "", 0);
}

void io_jw_free(io_jw *w) {
    free(w->buf);
    memset(w, 0, sizeof *w);
}

const char *io_jw_text(const io_jw *w) { return w->buf; }

void io_jw_reset(io_jw *w) {
    GDN_ASSERT(w->depth == 0);
    w->len = 0;
    w->buf[0] = 0;
    w->after_key = 0;
}

/* Separator and indentation before a value: arrays need them here, objects got them in key. */
static void before_value(io_jw *w) {
    if (w->depth == 0) {
        GDN_ASSERT(w->len == 0 && "one top-level value per document (io_jw_reset between)");
        return;
    }
    if (w->is_object[w->depth - 1]) {
        GDN_ASSERT(w->after_key && "an object member needs io_jw_key first");
        w->after_key = 0;
        return;
    }
    if (w->has_items[w->depth - 1]) put(w, ",", 1);
    w->has_items[w->depth - 1] = 1;
    newline_indent(w);
}

static void begin(io_jw *w, int is_object) {
    before_value(w);
    GDN_ASSERT(w->depth < IO_JSON_MAX_DEPTH);
    put(w, is_object ? "{" : "[", 1);
    w->is_object[w->depth] = (unsigned char)is_object;
    w->has_items[w->depth] = 0;
    w->depth++;
}

static void end(io_jw *w, int is_object) {
    GDN_ASSERT(w->depth > 0 && w->is_object[w->depth - 1] == is_object && !w->after_key);
    int had_items = w->has_items[w->depth - 1];
    w->depth--;
    if (had_items) newline_indent(w);
    put(w, is_object ? "}" : "]", 1);
}

void io_jw_begin_object(io_jw *w) { begin(w, 1); }
void io_jw_end_object(io_jw *w) { end(w, 1); }
void io_jw_begin_array(io_jw *w) { begin(w, 0); }
void io_jw_end_array(io_jw *w) { end(w, 0); }

static void put_escaped(io_jw *w, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    put(w, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        const char *esc = NULL;
        char buf[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (c < 0x20) {
                snprintf(buf, sizeof buf, "\\u%04x", c);
                esc = buf;
            }
        }
        if (esc) {
            puts_(w, esc);
            i++;
            continue;
        }
        uint32_t cp;
        int len = io_utf8_decode(p + i, n - i, &cp);
        if (len == 0) { /* not UTF-8: U+FFFD keeps the document valid */
            puts_(w, "\xEF\xBF\xBD");
            i++;
        } else {
            put(w, s + i, (size_t)len);
            i += (size_t)len;
        }
    }
    put(w, "\"", 1);
}

void io_jw_key(io_jw *w, const char *key) {
    GDN_ASSERT(w->depth > 0 && w->is_object[w->depth - 1] && !w->after_key);
    if (w->has_items[w->depth - 1]) put(w, ",", 1);
    w->has_items[w->depth - 1] = 1;
    newline_indent(w);
    put_escaped(w, key, strlen(key));
    puts_(w, w->pretty ? ": " : ":");
    w->after_key = 1;
}

void io_jw_string_n(io_jw *w, const char *s, size_t n) {
    before_value(w);
    put_escaped(w, s, n);
}

void io_jw_string(io_jw *w, const char *s) { io_jw_string_n(w, s, strlen(s)); }

void io_jw_number(io_jw *w, double x) {
    before_value(w);
    if (!isfinite(x)) {
        puts_(w, "null");
        return;
    }
    char buf[40];
    for (int digits = 15; digits <= 17; digits++) { /* 17 always round-trips */
        snprintf(buf, sizeof buf, "%.*g", digits, x);
        if (strtod(buf, NULL) == x) break;
    }
    puts_(w, buf);
}

void io_jw_float(io_jw *w, double x) {
    io_jw_number(w, x);
    if (!isfinite(x)) return;
    size_t start = w->len; /* the number is the tail after its separator and indentation */
    while (start > 0 && strchr("0123456789-+.eE", w->buf[start - 1])) start--;
    if (!strpbrk(w->buf + start, ".eE")) puts_(w, ".0"); /* 10000 -> 10000.0 */
}

void io_jw_int(io_jw *w, long long x) {
    before_value(w);
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", x);
    puts_(w, buf);
}

void io_jw_bool(io_jw *w, int b) {
    before_value(w);
    puts_(w, b ? "true" : "false");
}

void io_jw_null(io_jw *w) {
    before_value(w);
    puts_(w, "null");
}

void io_jw_value(io_jw *w, const io_json *v) {
    switch (v->type) {
    case IO_JSON_NULL: io_jw_null(w); break;
    case IO_JSON_BOOL: io_jw_bool(w, v->boolean); break;
    case IO_JSON_NUMBER: io_jw_number(w, v->number); break;
    case IO_JSON_STRING: io_jw_string_n(w, v->string, v->string_len); break;
    case IO_JSON_ARRAY:
        io_jw_begin_array(w);
        for (size_t i = 0; i < v->n_items; i++) io_jw_value(w, &v->items[i]);
        io_jw_end_array(w);
        break;
    case IO_JSON_OBJECT:
        io_jw_begin_object(w);
        for (size_t i = 0; i < v->n_items; i++) {
            io_jw_key(w, v->items[i].key);
            io_jw_value(w, &v->items[i]);
        }
        io_jw_end_object(w);
        break;
    }
}

void io_jw_kv_string(io_jw *w, const char *key, const char *s) {
    io_jw_key(w, key);
    io_jw_string(w, s);
}

void io_jw_kv_number(io_jw *w, const char *key, double x) {
    io_jw_key(w, key);
    io_jw_number(w, x);
}

void io_jw_kv_int(io_jw *w, const char *key, long long x) {
    io_jw_key(w, key);
    io_jw_int(w, x);
}

void io_jw_kv_bool(io_jw *w, const char *key, int b) {
    io_jw_key(w, key);
    io_jw_bool(w, b);
}
