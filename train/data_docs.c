/* gdn data's documents (train/data_docs.h). */
#include "train/data_docs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int push(io_ids *v, uint32_t id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 4096;
        uint32_t *p = realloc(v->ids, cap * sizeof *p);
        if (!p) return -1;
        v->ids = p, v->cap = cap;
    }
    v->ids[v->n++] = id;
    return 0;
}

/* Appends one document: eod, then the ids of text[0, n). */
static int append_doc(const io_tokenizer *tok, int threads, const unsigned char *text, size_t n,
                      uint32_t eod, io_ids *out, size_t *literal, char *err, int err_len) {
    if (push(out, eod)) goto oom;
    const size_t first = out->n;
    if (tok) {
        if (io_tokenizer_encode_parallel(tok, text, n, threads, out, NULL, NULL, err, err_len))
            return -1;
    } else {
        for (size_t i = 0; i < n; i++)
            if (push(out, text[i])) goto oom;
    }
    for (size_t i = first; i < out->n; i++) *literal += out->ids[i] == eod;
    return 0;
oom:
    snprintf(err, (size_t)err_len, "out of memory");
    return -1;
}

long long gdn_data_append_docs(const io_tokenizer *tok, int threads, const unsigned char *text,
                               size_t len, const char *sep, uint32_t eod, io_ids *out,
                               size_t *literal, char *err, int err_len) {
    long long docs = 0;
    const size_t sl = sep ? strlen(sep) : 0;
    size_t doc = 0; /* the current document's first byte */
    for (size_t line = 0; sep && line < len;) {
        const unsigned char *nl = memchr(text + line, '\n', len - line);
        size_t end = nl ? (size_t)(nl - text) : len, next = nl ? end + 1 : len;
        size_t body = end > line && text[end - 1] == '\r' ? end - 1 : end;
        if (body - line == sl && memcmp(text + line, sep, sl) == 0) {
            if (line > doc) {
                if (append_doc(tok, threads, text + doc, line - doc, eod, out, literal, err, err_len))
                    return -1;
                docs++;
            }
            doc = next;
        }
        line = next;
    }
    if (len > doc) {
        if (append_doc(tok, threads, text + doc, len - doc, eod, out, literal, err, err_len))
            return -1;
        docs++;
    }
    return docs;
}

int64_t gdn_data_default_eod(const io_tokenizer *tok) {
    static const char *const names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int64_t id = io_tokenizer_token_id(tok, names[i], strlen(names[i]));
        if (id >= 0) return id;
    }
    return -1;
}
