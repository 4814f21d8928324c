/* tokenizer.json: the normalizer, pre-tokenizer, BPE model and added tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "io/json.h"
#include "io/tokenizer_internal.h"

/* "tokenizer.json:12:5: " + message. */
static int fail(const io_json *v, char *err, int err_len, const char *what) {
    char where[512];
    io_json_where(v, where, sizeof where);
    snprintf(err, (size_t)err_len, "%s: %s", where, what);
    return -1;
}

static const char *type_of(const io_json *v) {
    const io_json *t = io_json_get(v, "type");
    return t && t->type == IO_JSON_STRING ? t->string : NULL;
}

/* A boolean member (absent: def); -1 when it is another type. */
static int flag(const io_json *obj, const char *key, int def, int *out, char *err, int err_len) {
    *out = def;
    const io_json *v = io_json_get(obj, key);
    if (!v || v->type == IO_JSON_NULL) return 0;
    if (v->type != IO_JSON_BOOL) {
        char m[128];
        snprintf(m, sizeof m, "'%s' must be true or false", key);
        return fail(v, err, err_len, m);
    }
    *out = v->boolean;
    return 0;
}

static int normalizer(io_tokenizer *t, const io_json *n, char *err, int err_len) {
    if (!n || n->type == IO_JSON_NULL) return 0;
    const char *type = n->type == IO_JSON_OBJECT ? type_of(n) : NULL;
    if (!type) return fail(n, err, err_len, "the normalizer must be an object with a \"type\"");
    if (strcmp(type, "Sequence") == 0) {
        const io_json *list = io_json_get(n, "normalizers");
        if (!list || list->type != IO_JSON_ARRAY)
            return fail(n, err, err_len, "a Sequence normalizer needs a \"normalizers\" array");
        for (size_t i = 0; i < list->n_items; i++)
            if (normalizer(t, &list->items[i], err, err_len)) return -1;
        return 0;
    }
    static const char *const names[] = {"NFC", "NFD", "NFKC", "NFKD"};
    static const int opts[] = {UTF8PROC_STABLE | UTF8PROC_COMPOSE, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE,
                               UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
                               UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT};
    for (int i = 0; i < 4; i++)
        if (strcmp(type, names[i]) == 0) {
            if (t->n_norm == TOK_MAX_NORM)
                return fail(n, err, err_len, "more than 4 normalizer steps");
            t->norm[t->n_norm++] = opts[i];
            return 0;
        }
    char m[256];
    snprintf(m, sizeof m, "normalizer type '%.64s' is not supported (supported: NFC, NFD, NFKC, "
             "NFKD, Sequence of them)", type);
    return fail(n, err, err_len, m);
}

static int pre_tokenizer(io_tokenizer *t, const io_json *p, int *byte_level, char *err,
                         int err_len) {
    const char *type = p->type == IO_JSON_OBJECT ? type_of(p) : NULL;
    char where[512], m[256];
    io_json_where(p, where, sizeof where);
    if (!type) return fail(p, err, err_len, "a pre-tokenizer must be an object with a \"type\"");
    if (*byte_level)
        return fail(p, err, err_len, "a pre-tokenizer step after ByteLevel is not supported");
    if (strcmp(type, "Sequence") == 0) {
        const io_json *list = io_json_get(p, "pretokenizers");
        if (!list || list->type != IO_JSON_ARRAY)
            return fail(p, err, err_len, "a Sequence pre-tokenizer needs a \"pretokenizers\" array");
        for (size_t i = 0; i < list->n_items; i++)
            if (pre_tokenizer(t, &list->items[i], byte_level, err, err_len)) return -1;
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        int prefix, regex;
        if (flag(p, "add_prefix_space", 1, &prefix, err, err_len) ||
            flag(p, "use_regex", 1, &regex, err, err_len))
            return -1;
        if (prefix) {
            if (t->n_stages == TOK_MAX_STAGES) return fail(p, err, err_len, "too many steps");
            t->stages[t->n_stages++] = (tok_stage){TOK_STAGE_PREFIX_SPACE, NULL};
        }
        if (regex && tok_add_split(t, tok_gpt2_pattern, strlen(tok_gpt2_pattern), 0, where, err,
                                   err_len))
            return -1;
        *byte_level = 1;
        return 0;
    }
    if (strcmp(type, "Split") == 0) {
        const io_json *pat = io_json_get(p, "pattern"), *beh = io_json_get(p, "behavior");
        int invert;
        if (flag(p, "invert", 0, &invert, err, err_len)) return -1;
        if (!beh || beh->type != IO_JSON_STRING || strcmp(beh->string, "Isolated") != 0 || invert)
            return fail(p, err, err_len, "only Split with behavior \"Isolated\" and invert false "
                                         "is supported");
        const io_json *re = pat && pat->type == IO_JSON_OBJECT ? io_json_get(pat, "Regex") : NULL;
        const io_json *lit = pat && pat->type == IO_JSON_OBJECT ? io_json_get(pat, "String") : NULL;
        const io_json *s = re ? re : lit;
        if (!s || s->type != IO_JSON_STRING || pat->n_items != 1)
            return fail(p, err, err_len, "a Split needs \"pattern\": {\"Regex\": \"...\"} or "
                                         "{\"String\": \"...\"}");
        return tok_add_split(t, s->string, s->string_len, s == lit, where, err, err_len);
    }
    snprintf(m, sizeof m, "pre-tokenizer type '%.64s' is not supported (supported: ByteLevel, "
             "Split, Sequence of them)", type);
    return fail(p, err, err_len, m);
}

/* An id: a whole number in 0 .. 2^32 - 3. */
static int id_of(const io_json *v, uint32_t *id, char *err, int err_len) {
    if (v->type != IO_JSON_NUMBER || v->number < 0 || v->number > 4294967293.0 ||
        v->number != (double)(uint32_t)v->number)
        return fail(v, err, err_len, "a token id must be a whole number from 0 to 4294967293");
    *id = (uint32_t)v->number;
    return 0;
}

static int model(io_tokenizer *t, const io_json *m, tok_vocab_builder *b, const io_json **merges,
                 char *err, int err_len) {
    if (m->type != IO_JSON_OBJECT) return fail(m, err, err_len, "\"model\" must be an object");
    const char *type = type_of(m);
    if (type && strcmp(type, "BPE") != 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "model type '%.64s' is not supported (only BPE)", type);
        return fail(m, err, err_len, msg);
    }
    int fallback;
    if (flag(m, "ignore_merges", 0, &t->ignore_merges, err, err_len) ||
        flag(m, "byte_fallback", 0, &fallback, err, err_len))
        return -1;
    if (fallback) return fail(m, err, err_len, "byte_fallback BPE is not supported");
    const io_json *d = io_json_get(m, "dropout");
    if (d && d->type != IO_JSON_NULL && !(d->type == IO_JSON_NUMBER && d->number == 0))
        return fail(d, err, err_len, "BPE dropout is not supported");
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const io_json *a = io_json_get(m, affixes[i]);
        if (a && a->type != IO_JSON_NULL && !(a->type == IO_JSON_STRING && a->string_len == 0)) {
            char msg[128];
            snprintf(msg, sizeof msg, "a non-empty %s is not supported", affixes[i]);
            return fail(a, err, err_len, msg);
        }
    }
    const io_json *vocab = io_json_get(m, "vocab");
    *merges = io_json_get(m, "merges");
    if (!vocab || vocab->type != IO_JSON_OBJECT)
        return fail(m, err, err_len, "the BPE model needs a \"vocab\" object");
    if (!*merges || (*merges)->type != IO_JSON_ARRAY)
        return fail(m, err, err_len, "the BPE model needs a \"merges\" array");
    for (size_t i = 0; i < vocab->n_items; i++) {
        const io_json *e = &vocab->items[i];
        uint32_t id;
        if (id_of(e, &id, err, err_len)) return -1;
        if (tok_builder_add(b, e->key, strlen(e->key), id, 1))
            return fail(e, err, err_len, "out of memory");
    }
    return 0;
}

static int add_merges(io_tokenizer *t, const io_json *merges, const char *name, char *err,
                      int err_len) {
    if (tok_merges_reserve(t, merges->n_items)) return fail(merges, err, err_len, "out of memory");
    for (size_t i = 0; i < merges->n_items; i++) {
        const io_json *e = &merges->items[i];
        const char *a, *b;
        size_t na, nb;
        if (e->type == IO_JSON_STRING) {
            const char *sp = memchr(e->string, ' ', e->string_len);
            if (!sp || memchr(sp + 1, ' ', e->string_len - (size_t)(sp + 1 - e->string)))
                return fail(e, err, err_len, "a merge string must be two tokens separated by "
                                             "one space (\"a b\")");
            a = e->string, na = (size_t)(sp - a), b = sp + 1, nb = e->string_len - na - 1;
        } else if (e->type == IO_JSON_ARRAY && e->n_items == 2 &&
                   e->items[0].type == IO_JSON_STRING && e->items[1].type == IO_JSON_STRING) {
            a = e->items[0].string, na = e->items[0].string_len;
            b = e->items[1].string, nb = e->items[1].string_len;
        } else {
            return fail(e, err, err_len, "a merge must be a string \"a b\" or a pair [\"a\", \"b\"]");
        }
        char where[600];
        io_json_where(e, where, sizeof where);
        size_t wl = strlen(where);
        snprintf(where + wl, sizeof where - wl, " (merge %zu of %s)", i, name);
        if (tok_add_merge(t, a, na, b, nb, (uint32_t)i, where, err, err_len)) return -1;
    }
    return 0;
}

static int added_tokens(io_tokenizer *t, const io_json *list, tok_vocab_builder *b, char *err,
                        int err_len) {
    if (!list || list->type == IO_JSON_NULL) return 0;
    if (list->type != IO_JSON_ARRAY) return fail(list, err, err_len, "\"added_tokens\" must be an array");
    t->added = calloc(list->n_items + 1, sizeof *t->added);
    if (!t->added) return fail(list, err, err_len, "out of memory");
    for (size_t i = 0; i < list->n_items; i++) {
        const io_json *a = &list->items[i], *c = io_json_get(a, "content"),
                      *id = io_json_get(a, "id");
        if (a->type != IO_JSON_OBJECT || !c || c->type != IO_JSON_STRING || !id)
            return fail(a, err, err_len, "an added token needs \"id\" and \"content\"");
        if (c->string_len == 0) return fail(c, err, err_len, "an added token's content is empty");
        tok_added *x = &t->added[t->n_added];
        int def_norm = 1, special;
        if (flag(a, "special", 0, &special, err, err_len)) return -1;
        if (special) def_norm = 0;
        if (id_of(id, &x->id, err, err_len) || flag(a, "single_word", 0, &x->single_word, err, err_len) ||
            flag(a, "lstrip", 0, &x->lstrip, err, err_len) ||
            flag(a, "rstrip", 0, &x->rstrip, err, err_len) ||
            flag(a, "normalized", def_norm, &x->normalized, err, err_len))
            return -1;
        x->bytes = malloc(c->string_len);
        if (!x->bytes) return fail(a, err, err_len, "out of memory");
        memcpy(x->bytes, c->string, c->string_len);
        x->len = c->string_len;
        t->n_added++;
        if (tok_builder_add(b, c->string, c->string_len, x->id, 2))
            return fail(a, err, err_len, "out of memory");
    }
    return 0;
}

io_tokenizer *io_tokenizer_from_json(const char *text, size_t len, const char *name, char *err,
                                     int err_len) {
    io_json *root = io_json_parse(text, len, name, err, err_len);
    if (!root) return NULL;
    io_tokenizer *t = calloc(1, sizeof *t);
    tok_vocab_builder b = {0};
    const io_json *merges = NULL;
    int byte_level = 0, rc = -1;
    if (!t) {
        snprintf(err, (size_t)err_len, "%s: out of memory", name);
        goto done;
    }
    if (root->type != IO_JSON_OBJECT) {
        fail(root, err, err_len, "a tokenizer.json holds an object");
        goto done;
    }
    const io_json *pre = io_json_get(root, "pre_tokenizer");
    if (normalizer(t, io_json_get(root, "normalizer"), err, err_len)) goto done;
    if (pre && pre->type != IO_JSON_NULL && pre_tokenizer(t, pre, &byte_level, err, err_len))
        goto done;
    if (!byte_level) {
        snprintf(err, (size_t)err_len, "%s: not a byte-level BPE tokenizer: the pre_tokenizer has "
                 "no ByteLevel step (only byte-level BPE is supported)", name);
        goto done;
    }
    const io_json *m = io_json_get(root, "model");
    if (!m) {
        snprintf(err, (size_t)err_len, "%s: no \"model\"", name);
        goto done;
    }
    if (model(t, m, &b, &merges, err, err_len) ||
        added_tokens(t, io_json_get(root, "added_tokens"), &b, err, err_len) ||
        tok_build_vocab(t, &b, name, err, err_len) || tok_check_bytes(t, name, err, err_len) ||
        add_merges(t, merges, name, err, err_len) || tok_sort_added(t, name, err, err_len))
        goto done;
    snprintf(t->describe, sizeof t->describe, "%u ids, %zu merges, %d added tokens%s", t->n_ids,
             t->merges.n, t->n_added, t->n_norm ? ", normalized" : "");
    rc = 0;
done:
    tok_builder_free(&b);
    io_json_free(root);
    if (rc && t) {
        tok_free_tables(t);
        free(t);
        t = NULL;
    }
    return t;
}
