/* Strict JSON parser into an io_json tree, with positions for error messages. */
#include "io/json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/regular_file.h"
#include "io/utf8.h"

/* A parsed document: the root value and a copy of the name every node's source points to. */
typedef struct {
    io_json v; /* first member: an io_json * to the root is a json_doc * */
    char name[];
} json_doc;

typedef struct {
    const unsigned char *p, *end;
    const char *name;
    int line, col; /* of *p */
    char *err;
    int err_len;
} parser;

static void free_contents(io_json *v) {
    free(v->string);
    free(v->key);
    for (size_t i = 0; i < v->n_items; i++) free_contents(&v->items[i]);
    free(v->items);
}

void io_json_free(io_json *root) {
    if (!root) return;
    free_contents(root);
    free((json_doc *)root);
}

const char *io_json_type_name(io_json_type t) {
    switch (t) {
    case IO_JSON_NULL: return "null";
    case IO_JSON_BOOL: return "a boolean";
    case IO_JSON_NUMBER: return "a number";
    case IO_JSON_STRING: return "a string";
    case IO_JSON_ARRAY: return "an array";
    case IO_JSON_OBJECT: return "an object";
    }
    return "?";
}

/* ---- parser ---------------------------------------------------------------------------- */

static void advance(parser *ps) {
    if (*ps->p == '\n') {
        ps->line++;
        ps->col = 1;
    } else if ((*ps->p & 0xC0) != 0x80) { /* continuation bytes do not start a character */
        ps->col++;
    }
    ps->p++;
}

/* Describes the character at the cursor, for "found ..." in messages. */
static void describe_here(const parser *ps, char *buf, size_t n) {
    if (ps->p >= ps->end) snprintf(buf, n, "end of input");
    else if (*ps->p >= 0x20 && *ps->p < 0x7F) snprintf(buf, n, "'%c'", *ps->p);
    else if (*ps->p == '\n') snprintf(buf, n, "end of line");
    else snprintf(buf, n, "byte 0x%02x", *ps->p);
}

static int fail_at(parser *ps, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_at(parser *ps, int line, int col, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(ps->err, (size_t)ps->err_len, "%s:%d:%d: %s", ps->name, line, col, msg);
    return -1;
}

/* "expected X, found Y" at the cursor. */
static int fail_expected(parser *ps, const char *what) {
    char found[32];
    describe_here(ps, found, sizeof found);
    return fail_at(ps, ps->line, ps->col, "expected %s, found %s", what, found);
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end &&
           (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        advance(ps);
}

typedef struct {
    char *s;
    size_t len, cap;
} strbuf;

static void sb_put(strbuf *b, const void *src, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 32;
        while (cap < b->len + n + 1) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            fprintf(stderr, "gdn: out of memory parsing JSON\n");
            exit(1);
        }
        b->s = s;
        b->cap = cap;
    }
    memcpy(b->s + b->len, src, n);
    b->len += n;
    b->s[b->len] = 0;
}

static int hex4(parser *ps, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        if (ps->p >= ps->end) return fail_expected(ps, "4 hex digits after \\u");
        unsigned c = *ps->p;
        unsigned d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return fail_expected(ps, "4 hex digits after \\u");
        v = v * 16 + d;
        advance(ps);
    }
    *out = v;
    return 0;
}

/* One escape sequence; the cursor is on the backslash. */
static int parse_escape(parser *ps, strbuf *b) {
    int line = ps->line, col = ps->col;
    advance(ps);
    if (ps->p >= ps->end) return fail_expected(ps, "an escape character after '\\'");
    char c = (char)*ps->p;
    const char *simple = strchr("\"\\/bfnrt", c);
    if (c && simple) {
        static const char out[] = "\"\\/\b\f\n\r\t";
        sb_put(b, &out[simple - "\"\\/bfnrt"], 1);
        advance(ps);
        return 0;
    }
    if (c != 'u')
        return fail_at(ps, ps->line, ps->col,
                       "invalid escape '\\%c' (valid: \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)",
                       c >= 0x20 && c < 0x7F ? c : '?');
    advance(ps);
    uint32_t cp;
    if (hex4(ps, &cp)) return -1;
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return fail_at(ps, line, col, "unpaired low surrogate \\u%04X in a string", (unsigned)cp);
    if (cp >= 0xD800 && cp <= 0xDBFF) { /* needs a low surrogate: "\uD83D\uDE00" */
        if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u')
            return fail_at(ps, line, col,
                           "high surrogate \\u%04X is not followed by a \\u low surrogate",
                           (unsigned)cp);
        advance(ps);
        advance(ps);
        uint32_t lo;
        if (hex4(ps, &lo)) return -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return fail_at(ps, line, col,
                           "high surrogate \\u%04X is followed by \\u%04X, not a low surrogate",
                           (unsigned)cp, (unsigned)lo);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    unsigned char u[4];
    const int n = io_utf8_encode(cp, u);
    sb_put(b, u, (size_t)n);
    return 0;
}

/* A string; the cursor is on the opening quote. */
static int parse_string(parser *ps, char **out, size_t *out_len) {
    int line = ps->line, col = ps->col;
    strbuf b = {0};
    sb_put(&b, "", 0);
    advance(ps);
    for (;;) {
        if (ps->p >= ps->end) {
            free(b.s);
            return fail_at(ps, line, col, "unterminated string (no closing '\"')");
        }
        unsigned c = *ps->p;
        if (c == '"') {
            advance(ps);
            break;
        }
        if (c < 0x20) {
            free(b.s);
            return fail_at(ps, ps->line, ps->col,
                           "raw control character 0x%02x in a string (write it as an escape, "
                           "e.g. \\n or \\u%04x)",
                           c, c);
        }
        if (c == '\\') {
            if (parse_escape(ps, &b)) {
                free(b.s);
                return -1;
            }
            continue;
        }
        uint32_t cp;
        int n = io_utf8_decode(ps->p, (size_t)(ps->end - ps->p), &cp);
        if (n == 0) {
            free(b.s);
            return fail_at(ps, ps->line, ps->col, "invalid UTF-8 (byte 0x%02x) in a string", c);
        }
        sb_put(&b, ps->p, (size_t)n);
        for (int i = 0; i < n; i++) advance(ps);
    }
    *out = b.s;
    *out_len = b.len;
    return 0;
}

static int is_digit(const parser *ps) { return ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9'; }

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int parse_number(parser *ps, io_json *v) {
    const unsigned char *start = ps->p;
    int line = ps->line, col = ps->col;
    if (*ps->p == '-') advance(ps);
    if (!is_digit(ps)) return fail_expected(ps, "a digit");
    if (*ps->p == '0') {
        advance(ps);
        if (is_digit(ps))
            return fail_at(ps, line, col, "numbers may not have leading zeros");
    } else {
        while (is_digit(ps)) advance(ps);
    }
    if (ps->p < ps->end && *ps->p == '.') {
        advance(ps);
        if (!is_digit(ps)) return fail_expected(ps, "a digit after the decimal point");
        while (is_digit(ps)) advance(ps);
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        advance(ps);
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-')) advance(ps);
        if (!is_digit(ps)) return fail_expected(ps, "a digit in the exponent");
        while (is_digit(ps)) advance(ps);
    }
    size_t n = (size_t)(ps->p - start);
    char small[64];
    char *text = n < sizeof small ? small : malloc(n + 1);
    if (!text) return fail_at(ps, line, col, "out of memory");
    memcpy(text, start, n);
    text[n] = 0;
    v->number = strtod(text, NULL);
    if (text != small) free(text);
    if (isinf(v->number))
        return fail_at(ps, line, col, "number %.*s is too large for a double",
                       (int)(n > 40 ? 40 : n), (const char *)start);
    v->type = IO_JSON_NUMBER;
    return 0;
}

static int parse_value(parser *ps, io_json *v, int depth);

static io_json *append_item(io_json *v, size_t *cap) {
    if (v->n_items == *cap) {
        size_t c = *cap ? 2 * *cap : 4;
        io_json *items = realloc(v->items, c * sizeof *items);
        if (!items) {
            fprintf(stderr, "gdn: out of memory parsing JSON\n");
            exit(1);
        }
        v->items = items;
        *cap = c;
    }
    io_json *it = &v->items[v->n_items++];
    memset(it, 0, sizeof *it);
    it->source = v->source;
    return it;
}

static int parse_array(parser *ps, io_json *v, int depth) {
    size_t cap = 0;
    v->type = IO_JSON_ARRAY;
    advance(ps);
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        advance(ps);
        return 0;
    }
    for (;;) {
        if (parse_value(ps, append_item(v, &cap), depth + 1)) return -1;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            advance(ps);
            continue;
        }
        if (ps->p < ps->end && *ps->p == ']') {
            advance(ps);
            return 0;
        }
        return fail_expected(ps, "',' or ']' after an array element");
    }
}

/* Duplicate-key detection in O(1) per member: an open-addressing table of member indices,
 * built once an object outgrows a short linear scan, so an object of n members parses in O(n)
 * (a config with 100,000 keys took minutes with a scan per member). */
typedef struct {
    size_t *slots; /* member index + 1; 0: empty */
    size_t mask;   /* table size - 1 (a power of two), 0 while there is no table */
} key_set;

#define KEY_SCAN_MAX 8 /* members compared one by one before a table pays off */

static _Thread_local unsigned long long key_compares;

unsigned long long io_json_key_compares(void) { return key_compares; }

static size_t key_hash(const char *k) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then a final mix so low bits depend on all */
    for (const unsigned char *p = (const unsigned char *)k; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (size_t)h;
}

/* Looks for items[i] among the members in the table; inserts it when absent (returns 0). */
static int table_probe(key_set *ks, const io_json *obj, size_t i, size_t *first) {
    for (size_t s = key_hash(obj->items[i].key) & ks->mask;; s = (s + 1) & ks->mask) {
        if (!ks->slots[s]) {
            ks->slots[s] = i + 1;
            return 0;
        }
        key_compares++;
        if (strcmp(obj->items[ks->slots[s] - 1].key, obj->items[i].key) == 0) {
            *first = ks->slots[s] - 1;
            return 1;
        }
    }
}

/* Is the key of member i also the key of a member before it (its index in *first)? */
static int key_seen(key_set *ks, const io_json *obj, size_t i, size_t *first) {
    if (i < KEY_SCAN_MAX) {
        for (size_t j = 0; j < i; j++) {
            key_compares++;
            if (strcmp(obj->items[j].key, obj->items[i].key) == 0) {
                *first = j;
                return 1;
            }
        }
        return 0;
    }
    if (2 * (i + 1) > ks->mask) { /* keep the table at most half full: rebuild it twice as big */
        size_t cap = ks->mask ? 2 * (ks->mask + 1) : 4 * KEY_SCAN_MAX;
        while (2 * (i + 1) > cap - 1) cap *= 2;
        free(ks->slots);
        ks->slots = calloc(cap, sizeof *ks->slots);
        if (!ks->slots) {
            fprintf(stderr, "gdn: out of memory parsing JSON\n");
            exit(1);
        }
        ks->mask = cap - 1;
        for (size_t j = 0; j < i; j++) table_probe(ks, obj, j, first); /* distinct already */
    }
    return table_probe(ks, obj, i, first);
}

static int parse_members(parser *ps, io_json *v, int depth, key_set *seen) {
    size_t cap = 0;
    v->type = IO_JSON_OBJECT;
    advance(ps);
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        advance(ps);
        return 0;
    }
    for (;;) {
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != '"')
            return fail_expected(ps, v->n_items ? "a member name in double quotes"
                                                : "a member name in double quotes or '}'");
        int line = ps->line, col = ps->col;
        char *key;
        size_t key_len;
        if (parse_string(ps, &key, &key_len)) return -1;
        io_json *m = append_item(v, &cap);
        m->key = key;
        if (strlen(key) != key_len)
            return fail_at(ps, line, col, "member name contains \\u0000");
        size_t first;
        if (key_seen(seen, v, v->n_items - 1, &first))
            return fail_at(ps, line, col, "duplicate member \"%s\" (first at line %d)", key,
                           v->items[first].line);
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != ':')
            return fail_expected(ps, "':' after the member name");
        advance(ps);
        if (parse_value(ps, m, depth + 1)) return -1;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            advance(ps);
            continue;
        }
        if (ps->p < ps->end && *ps->p == '}') {
            advance(ps);
            return 0;
        }
        return fail_expected(ps, "',' or '}' after an object member");
    }
}

static int parse_object(parser *ps, io_json *v, int depth) {
    key_set seen = {0};
    int rc = parse_members(ps, v, depth, &seen);
    free(seen.slots);
    return rc;
}

static int is_alnum(const parser *ps) {
    unsigned c = ps->p < ps->end ? *ps->p : 0;
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* true / false / null; "tru" and "trueish" are one bad word, not a value followed by junk. */
static int parse_literal(parser *ps, io_json *v, const char *word) {
    size_t n = strlen(word);
    int ok = (size_t)(ps->end - ps->p) >= n && memcmp(ps->p, word, n) == 0;
    if (ok)
        for (size_t i = 0; i < n; i++) advance(ps);
    if (!ok || is_alnum(ps))
        return fail_at(ps, v->line, v->column, "invalid literal (expected %s)", word);
    return 0;
}

static int parse_value(parser *ps, io_json *v, int depth) {
    skip_ws(ps);
    v->line = ps->line;
    v->column = ps->col;
    if (depth > IO_JSON_MAX_DEPTH)
        return fail_at(ps, ps->line, ps->col, "nesting deeper than %d levels", IO_JSON_MAX_DEPTH);
    static const char want[] = "a value (object, array, string, number, true, false or null)";
    if (ps->p >= ps->end) return fail_expected(ps, want);
    switch (*ps->p) {
    case '{': return parse_object(ps, v, depth);
    case '[': return parse_array(ps, v, depth);
    case '"':
        v->type = IO_JSON_STRING;
        return parse_string(ps, &v->string, &v->string_len);
    case 't':
    case 'f':
        v->type = IO_JSON_BOOL;
        v->boolean = *ps->p == 't';
        return parse_literal(ps, v, v->boolean ? "true" : "false");
    case 'n':
        v->type = IO_JSON_NULL;
        return parse_literal(ps, v, "null");
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) return parse_number(ps, v);
        break;
    }
    if (*ps->p == '\'') return fail_at(ps, ps->line, ps->col, "strings take double quotes, not '");
    return fail_expected(ps, want);
}

io_json *io_json_parse(const char *text, size_t len, const char *name, char *err, int err_len) {
    size_t name_len = strlen(name);
    json_doc *doc = calloc(1, sizeof *doc + name_len + 1);
    if (!doc) {
        snprintf(err, (size_t)err_len, "%s: out of memory", name);
        return NULL;
    }
    memcpy(doc->name, name, name_len + 1);
    doc->v.source = doc->name;
    parser ps = {(const unsigned char *)text, (const unsigned char *)text + len, doc->name, 1, 1,
                 err, err_len};
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) ps.p += 3; /* byte-order mark */
    int rc = parse_value(&ps, &doc->v, 1);
    if (rc == 0) {
        skip_ws(&ps);
        if (ps.p < ps.end) rc = fail_expected(&ps, "end of input after the JSON value");
    }
    if (rc) {
        io_json_free(&doc->v);
        return NULL;
    }
    return &doc->v;
}

io_json *io_json_parse_file(const char *path, char *err, int err_len) {
    int fd = io_open_regular(path, NULL, err, err_len);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        snprintf(err, (size_t)err_len, "%s: cannot read: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    strbuf b = {0};
    char chunk[65536];
    size_t n;
    sb_put(&b, "", 0);
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) sb_put(&b, chunk, n);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b.s);
        snprintf(err, (size_t)err_len, "%s: read error", path);
        return NULL;
    }
    io_json *root = io_json_parse(b.s, b.len, path, err, err_len);
    free(b.s);
    return root;
}

/* ---- lookups ------------------------------------------------------------------------------ */

const io_json *io_json_get(const io_json *obj, const char *key) {
    if (!obj || obj->type != IO_JSON_OBJECT) return NULL;
    for (size_t i = 0; i < obj->n_items; i++)
        if (strcmp(obj->items[i].key, key) == 0) return &obj->items[i];
    return NULL;
}

void io_json_where(const io_json *v, char *buf, int buf_len) {
    if (v->line > 0) snprintf(buf, (size_t)buf_len, "%s:%d:%d", v->source, v->line, v->column);
    else snprintf(buf, (size_t)buf_len, "%s", v->source ? v->source : "(value)");
}

static int wrong(const io_json *v, const char *key, const char *want, char *err, int err_len) {
    char where[512];
    io_json_where(v, where, sizeof where);
    if (v->type == IO_JSON_NUMBER)
        snprintf(err, (size_t)err_len, "%s: field '%s' must be %s, found %.17g", where, key, want,
                 v->number);
    else
        snprintf(err, (size_t)err_len, "%s: field '%s' must be %s, found %s", where, key, want,
                 io_json_type_name(v->type));
    return -1;
}

int io_json_get_number(const io_json *obj, const char *key, double *out, char *err, int err_len) {
    const io_json *v = io_json_get(obj, key);
    if (!v) return 0;
    if (v->type != IO_JSON_NUMBER) return wrong(v, key, "a number", err, err_len);
    *out = v->number;
    return 1;
}

int io_json_get_int(const io_json *obj, const char *key, int *out, char *err, int err_len) {
    const io_json *v = io_json_get(obj, key);
    if (!v) return 0;
    if (v->type != IO_JSON_NUMBER || v->number != floor(v->number) || v->number < -2147483648.0 ||
        v->number > 2147483647.0)
        return wrong(v, key, "an integer in the int range", err, err_len);
    *out = (int)v->number;
    return 1;
}

int io_json_get_i64(const io_json *obj, const char *key, int64_t *out, char *err, int err_len) {
    const io_json *v = io_json_get(obj, key);
    if (!v) return 0;
    /* beyond 2^53 a double no longer holds every integer: the value may not be what was written */
    if (v->type != IO_JSON_NUMBER || v->number != floor(v->number) ||
        fabs(v->number) > 9007199254740992.0)
        return wrong(v, key, "an integer of magnitude at most 2^53", err, err_len);
    *out = (int64_t)v->number;
    return 1;
}

int io_json_get_bool(const io_json *obj, const char *key, int *out, char *err, int err_len) {
    const io_json *v = io_json_get(obj, key);
    if (!v) return 0;
    if (v->type != IO_JSON_BOOL) return wrong(v, key, "true or false", err, err_len);
    *out = v->boolean;
    return 1;
}

int io_json_get_string(const io_json *obj, const char *key, const char **out, char *err,
                       int err_len) {
    const io_json *v = io_json_get(obj, key);
    if (!v) return 0;
    if (v->type != IO_JSON_STRING) return wrong(v, key, "a string", err, err_len);
    if (strlen(v->string) != v->string_len)
        return wrong(v, key, "a string without \\u0000", err, err_len);
    *out = v->string;
    return 1;
}

int io_json_check_keys(const io_json *obj, const char *const *allowed, char *err, int err_len) {
    if (!obj || obj->type != IO_JSON_OBJECT) return 0;
    for (size_t i = 0; i < obj->n_items; i++) {
        int ok = 0;
        for (const char *const *a = allowed; *a && !ok; a++)
            ok = strcmp(*a, obj->items[i].key) == 0;
        if (ok) continue;
        char where[512];
        io_json_where(&obj->items[i], where, sizeof where);
        int n = snprintf(err, (size_t)err_len, "%s: unknown field '%s' (known:", where,
                         obj->items[i].key);
        for (const char *const *a = allowed; *a && n >= 0 && n < err_len; a++)
            n += snprintf(err + n, (size_t)(err_len - n), " %s", *a);
        if (n >= 0 && n < err_len) snprintf(err + n, (size_t)(err_len - n), ")");
        return -1;
    }
    return 0;
}

/* ---- overrides ---------------------------------------------------------------------------- */

static void set_origin(io_json *v, const char *origin) {
    v->source = origin;
    v->line = v->column = 0;
    for (size_t i = 0; i < v->n_items; i++) set_origin(&v->items[i], origin);
}

/* Levels of nesting in v: 1 for a scalar or an empty container. */
static int depth_of(const io_json *v) {
    int d = 0;
    for (size_t i = 0; i < v->n_items; i++) {
        int di = depth_of(&v->items[i]);
        if (di > d) d = di;
    }
    return d + 1;
}

/* obj[key]; when absent, a new null member (*created = 1). */
static io_json *member(io_json *obj, const char *key, size_t key_len, int *created) {
    *created = 0;
    for (size_t i = 0; i < obj->n_items; i++)
        if (strlen(obj->items[i].key) == key_len && memcmp(obj->items[i].key, key, key_len) == 0)
            return &obj->items[i];
    *created = 1;
    io_json *items = realloc(obj->items, (obj->n_items + 1) * sizeof *items);
    char *k = malloc(key_len + 1);
    if (!items || !k) {
        fprintf(stderr, "gdn: out of memory\n");
        exit(1);
    }
    obj->items = items;
    io_json *m = &items[obj->n_items++];
    memset(m, 0, sizeof *m);
    memcpy(k, key, key_len);
    k[key_len] = 0;
    m->key = k;
    m->type = IO_JSON_NULL;
    return m;
}

int io_json_set_path(io_json *root, const char *path, const char *value_text, const char *origin,
                     char *err, int err_len) {
    if (!root || root->type != IO_JSON_OBJECT) {
        snprintf(err, (size_t)err_len, "%s: the configuration is not a JSON object", origin);
        return -1;
    }
    /* validate the path and the value's depth first so a bad one changes nothing */
    int levels = 1; /* the root, then one per path component */
    for (const char *s = path;; s++) {
        const char *dot = strchr(s, '.');
        size_t n = dot ? (size_t)(dot - s) : strlen(s);
        if (n == 0) {
            snprintf(err, (size_t)err_len, "%s: empty name in the setting path '%s'", origin, path);
            return -1;
        }
        if (levels <= IO_JSON_MAX_DEPTH) levels++;
        if (!dot) break;
        s = dot;
    }
    char perr[8];
    io_json *val = io_json_parse(value_text, strlen(value_text), origin, perr, sizeof perr);
    /* the same limit as parsed documents, so that every tree can be written back */
    if (levels - 1 + (val ? depth_of(val) : 1) > IO_JSON_MAX_DEPTH) {
        snprintf(err, (size_t)err_len,
                 "%s: the setting '%.40s%s' nests deeper than %d levels", origin, path,
                 strlen(path) > 40 ? "..." : "", IO_JSON_MAX_DEPTH);
        io_json_free(val);
        return -1;
    }
    io_json *obj = root;
    const char *s = path;
    for (const char *dot; (dot = strchr(s, '.')) != NULL; s = dot + 1) {
        int created;
        io_json *m = member(obj, s, (size_t)(dot - s), &created);
        if (created) {
            m->type = IO_JSON_OBJECT;
            m->source = origin;
        } else if (m->type != IO_JSON_OBJECT) {
            char where[512];
            io_json_where(m, where, sizeof where);
            snprintf(err, (size_t)err_len, "%s: '%.*s' is %s (%s), not an object", origin,
                     (int)(dot - path), path, io_json_type_name(m->type), where);
            io_json_free(val);
            return -1;
        }
        obj = m;
    }
    int created;
    io_json *m = member(obj, s, strlen(s), &created);
    char *key = m->key;
    m->key = NULL;
    free_contents(m);
    memset(m, 0, sizeof *m);
    if (val) {
        *m = *val;
        free((json_doc *)val); /* the contents now belong to m */
    } else { /* not JSON: the text itself, as a string */
        m->type = IO_JSON_STRING;
        m->string_len = strlen(value_text);
        m->string = malloc(m->string_len + 1);
        if (!m->string) {
            fprintf(stderr, "gdn: out of memory\n");
            exit(1);
        }
        memcpy(m->string, value_text, m->string_len + 1);
    }
    m->key = key;
    set_origin(m, origin);
    return 0;
}
