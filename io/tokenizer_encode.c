/* Encoding: added tokens, normalization, the pre-tokenizer steps, then BPE on each piece. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer_internal.h"

struct io_tok_enc {
    const io_tokenizer *t;
    tok_bpe_scratch *bpe;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
    unsigned char *prefix[TOK_MAX_STAGES]; /* per step: " " + piece for add_prefix_space */
    size_t prefix_cap[TOK_MAX_STAGES];
    char *err;
    int err_len;
};

io_tok_enc *io_tok_enc_new(const io_tokenizer *t) {
    io_tok_enc *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->t = t;
    e->bpe = tok_bpe_new();
    e->md = pcre2_match_data_create(1, NULL);
    e->mctx = pcre2_match_context_create(NULL);
    /* long runs (whitespace, one letter repeated) can need more than the default 32 KiB */
    e->jit = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    if (!e->bpe || !e->md || !e->mctx) {
        io_tok_enc_free(e);
        return NULL;
    }
    if (e->jit) pcre2_jit_stack_assign(e->mctx, NULL, e->jit);
    return e;
}

void io_tok_enc_free(io_tok_enc *e) {
    if (!e) return;
    tok_bpe_free(e->bpe);
    pcre2_match_data_free(e->md);
    pcre2_match_context_free(e->mctx);
    pcre2_jit_stack_free(e->jit);
    for (int i = 0; i < TOK_MAX_STAGES; i++) free(e->prefix[i]);
    free(e);
}

static int oom(io_tok_enc *e) {
    snprintf(e->err, (size_t)e->err_len, "tokenizer: out of memory");
    return -1;
}

/* Pre-tokenizer step `stage` on one piece (then the later steps on its pieces; BPE last). */
static int pretok(io_tok_enc *e, int stage, const unsigned char *p, size_t n, io_ids *out) {
    const io_tokenizer *t = e->t;
    if (n == 0) return 0;
    if (stage == t->n_stages) return tok_bpe_piece(t, e->bpe, p, n, out) ? oom(e) : 0;
    const tok_stage *st = &t->stages[stage];
    if (st->kind == TOK_STAGE_PREFIX_SPACE) {
        if (p[0] == ' ') return pretok(e, stage + 1, p, n, out);
        if (n + 1 > e->prefix_cap[stage]) {
            size_t c = n + 64;
            unsigned char *b = realloc(e->prefix[stage], c);
            if (!b) return oom(e);
            e->prefix[stage] = b, e->prefix_cap[stage] = c;
        }
        e->prefix[stage][0] = ' ';
        memcpy(e->prefix[stage] + 1, p, n);
        return pretok(e, stage + 1, e->prefix[stage], n + 1, out);
    }
    size_t last = 0, off = 0;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
    while (off < n) {
        int rc = pcre2_match(st->re, p, n, off, 0, e->md, e->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            snprintf(e->err, (size_t)e->err_len,
                     "tokenizer: pre-tokenizer pattern %d failed on a piece of %zu bytes: %s",
                     stage + 1, n, (const char *)msg);
            return -1;
        }
        size_t s = ov[0], f = ov[1];
        if (f == s) { /* an empty match splits nothing: look again one character on */
            off = s + 1;
            while (off < n && (p[off] & 0xC0) == 0x80) off++;
            continue;
        }
        if (s > last && pretok(e, stage + 1, p + last, s - last, out)) return -1;
        if (pretok(e, stage + 1, p + s, f - s, out)) return -1;
        last = off = f;
    }
    return last < n ? pretok(e, stage + 1, p + last, n - last, out) : 0;
}

/* Text between raw-matched added tokens: normalized, then normalized added tokens, then the
 * pre-tokenizer. */
static int segment(io_tok_enc *e, const unsigned char *p, size_t n, io_ids *out) {
    if (n == 0) return 0;
    unsigned char *norm = NULL;
    size_t len = n;
    int r = tok_normalize(e->t, p, n, &norm, &len);
    if (r < 0) return oom(e);
    const unsigned char *q = r ? norm : p;
    size_t pos = 0, s, f;
    int rc = 0;
    for (;;) {
        uint32_t id = tok_find_added(e->t, 1, q, len, pos, &s, &f);
        if (id == TOK_NO_ID) break;
        if ((rc = pretok(e, 0, q + pos, s - pos, out))) break;
        if ((rc = tok_ids_push(out, id) ? oom(e) : 0)) break;
        pos = f;
    }
    if (rc == 0) rc = pretok(e, 0, q + pos, len - pos, out);
    free(norm);
    return rc;
}

int io_tok_encode(io_tok_enc *e, const unsigned char *text, size_t n, io_ids *out, char *err,
                  int err_len) {
    e->err = err, e->err_len = err_len;
    size_t pos = 0, s, f;
    for (;;) {
        uint32_t id = tok_find_added(e->t, 0, text, n, pos, &s, &f);
        if (id == TOK_NO_ID) break;
        if (segment(e, text + pos, s - pos, out)) return -1;
        if (tok_ids_push(out, id)) return oom(e);
        pos = f;
    }
    return segment(e, text + pos, n - pos, out);
}

const unsigned char *io_tokenizer_id_bytes(const io_tokenizer *t, uint32_t id, size_t *len) {
    if (id >= t->n_ids || !t->has[id]) return NULL;
    *len = t->off[id + 1] - t->off[id];
    return t->text + t->off[id];
}

int io_tokenizer_decode(const io_tokenizer *t, const uint32_t *ids, size_t n, unsigned char **out,
                        size_t *out_len, char *err, int err_len) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= t->n_ids || !t->has[ids[i]]) {
            snprintf(err, (size_t)err_len,
                     "id %u (at position %zu) is not in the vocabulary (ids 0..%u)", ids[i], i,
                     t->n_ids - 1);
            return -1;
        }
        total += t->off[ids[i] + 1] - t->off[ids[i]];
    }
    unsigned char *buf = malloc(total + 1);
    if (!buf) {
        snprintf(err, (size_t)err_len, "out of memory decoding %zu ids", n);
        return -1;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = t->off[ids[i] + 1] - t->off[ids[i]];
        memcpy(buf + o, t->text + t->off[ids[i]], l);
        o += l;
    }
    buf[o] = 0;
    *out = buf;
    *out_len = o;
    return 0;
}
