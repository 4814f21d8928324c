/* Finding and reading tokenizer files: tokenizer.json, or GPT-2's vocab.json + merges.txt. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json.h"
#include "io/tokenizer_internal.h"
#include "io/tokens.h"

static char *join(const char *dir, const char *file) {
    size_t n = strlen(dir) + strlen(file) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, file);
    return p;
}

static int exists(const char *p) {
    struct stat st;
    return p && stat(p, &st) == 0;
}

io_tokenizer *io_tokenizer_load(const char *path, char *err, int err_len) {
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, (size_t)err_len, "%s: no such tokenizer file or directory", path);
        return NULL;
    }
    io_tokenizer *t = NULL;
    if (S_ISDIR(st.st_mode)) {
        char *json = join(path, "tokenizer.json"), *vocab = join(path, "vocab.json"),
             *merges = join(path, "merges.txt");
        if (exists(json)) t = io_tokenizer_load(json, err, err_len);
        else if (exists(vocab) && exists(merges))
            t = io_tokenizer_load_gpt2(vocab, merges, err, err_len);
        else
            snprintf(err, (size_t)err_len,
                     "%s: the directory holds neither tokenizer.json nor vocab.json + merges.txt",
                     path);
        free(json), free(vocab), free(merges);
        return t;
    }
    unsigned char *text;
    size_t len;
    if (io_text_read(path, &text, &len, err, err_len)) return NULL;
    t = io_tokenizer_from_json((const char *)text, len, path, err, err_len);
    if (t) {
        t->file_hash = tok_fnv1a(0xcbf29ce484222325ull, text, len);
        snprintf(t->source, sizeof t->source, "%s", path);
    }
    free(text);
    return t;
}

static int gpt2_merges(io_tokenizer *t, const char *path, const unsigned char *text, size_t len,
                       char *err, int err_len) {
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    if (tok_merges_reserve(t, lines)) {
        snprintf(err, (size_t)err_len, "%s: out of memory", path);
        return -1;
    }
    uint32_t rank = 0;
    size_t pos = 0;
    for (size_t line = 1; pos < len; line++) {
        const unsigned char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len, next = nl ? end + 1 : len;
        if (end > pos && text[end - 1] == '\r') end--;
        const char *s = (const char *)text + pos;
        size_t n = end - pos;
        pos = next;
        if (n == 0 || (n >= 8 && memcmp(s, "#version", 8) == 0)) continue;
        const char *sp = memchr(s, ' ', n);
        char where[600];
        snprintf(where, sizeof where, "%s:%zu", path, line);
        if (!sp || sp == s || sp == s + n - 1 || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s))) {
            snprintf(err, (size_t)err_len,
                     "%s: a merge line must be two tokens separated by one space (\"a b\")", where);
            return -1;
        }
        if (tok_add_merge(t, s, (size_t)(sp - s), sp + 1, n - (size_t)(sp - s) - 1, rank++, where,
                          err, err_len))
            return -1;
    }
    return 0;
}

io_tokenizer *io_tokenizer_load_gpt2(const char *vocab_path, const char *merges_path, char *err,
                                     int err_len) {
    io_json *vocab = io_json_parse_file(vocab_path, err, err_len);
    if (!vocab) return NULL;
    io_tokenizer *t = calloc(1, sizeof *t);
    tok_vocab_builder b = {0};
    unsigned char *text = NULL;
    size_t len;
    int rc = -1;
    if (!t) {
        snprintf(err, (size_t)err_len, "%s: out of memory", vocab_path);
        goto done;
    }
    if (vocab->type != IO_JSON_OBJECT) {
        snprintf(err, (size_t)err_len, "%s: a vocab.json holds an object {\"token\": id, ...}",
                 vocab_path);
        goto done;
    }
    for (size_t i = 0; i < vocab->n_items; i++) {
        const io_json *e = &vocab->items[i];
        if (e->type != IO_JSON_NUMBER || e->number < 0 || e->number > 4294967293.0 ||
            e->number != (double)(uint32_t)e->number) {
            char where[512];
            io_json_where(e, where, sizeof where);
            snprintf(err, (size_t)err_len,
                     "%s: a token id must be a whole number from 0 to 4294967293", where);
            goto done;
        }
        if (tok_builder_add(&b, e->key, strlen(e->key), (uint32_t)e->number, 1)) {
            snprintf(err, (size_t)err_len, "%s: out of memory", vocab_path);
            goto done;
        }
    }
    {
        unsigned char *raw;
        size_t raw_len;
        if (io_text_read(vocab_path, &raw, &raw_len, err, err_len)) goto done;
        t->file_hash = tok_fnv1a(0xcbf29ce484222325ull, raw, raw_len);
        free(raw);
    }
    if (tok_build_vocab(t, &b, vocab_path, err, err_len) ||
        tok_check_bytes(t, vocab_path, err, err_len) ||
        io_text_read(merges_path, &text, &len, err, err_len) ||
        gpt2_merges(t, merges_path, text, len, err, err_len))
        goto done;
    t->file_hash = tok_fnv1a(t->file_hash, text, len);
    snprintf(t->source, sizeof t->source, "%s + %s", vocab_path, merges_path);
    /* GPT-2's ByteLevel split, no prefix space, no added tokens: no text is special */
    if (tok_add_split(t, tok_gpt2_pattern, strlen(tok_gpt2_pattern), 0, vocab_path, err, err_len))
        goto done;
    snprintf(t->describe, sizeof t->describe, "%u ids, %zu merges (vocab.json + merges.txt)",
             t->n_ids, t->merges.n);
    rc = 0;
done:
    free(text);
    tok_builder_free(&b);
    io_json_free(vocab);
    if (rc && t) {
        tok_free_tables(t);
        free(t);
        t = NULL;
    }
    return t;
}

void io_tokenizer_free(io_tokenizer *t) {
    if (!t) return;
    tok_free_tables(t);
    free(t);
}

uint32_t io_tokenizer_vocab_size(const io_tokenizer *t) { return t->n_ids; }

const char *io_tokenizer_describe(const io_tokenizer *t) { return t->describe; }

int io_tokenizer_lossless(const io_tokenizer *t) {
    if (t->n_norm) return 0;
    for (int i = 0; i < t->n_stages; i++)
        if (t->stages[i].kind == TOK_STAGE_PREFIX_SPACE) return 0;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].lstrip || t->added[i].rstrip) return 0;
    return 1;
}

const char *io_tokenizer_source(const io_tokenizer *t, uint64_t *hash) {
    if (hash) *hash = t->file_hash;
    return t->source;
}

int64_t io_tokenizer_token_id(const io_tokenizer *t, const char *bytes, size_t n) {
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && memcmp(t->added[i].bytes, bytes, n) == 0) return t->added[i].id;
    uint32_t id = tok_vocab_find(t, (const unsigned char *)bytes, n);
    return id == TOK_NO_ID ? -1 : (int64_t)id;
}
