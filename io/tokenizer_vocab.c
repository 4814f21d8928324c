/* Tokenizer tables: the byte-level mapping, id -> bytes, bytes -> id and the merge ranks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer_internal.h"
#include "io/utf8.h"

/* GPT-2 maps each byte to a printable code point: the printable Latin-1 bytes to themselves,
 * the rest (controls, space, 0x7F-0xA0, 0xAD) to 256, 257, ... in byte order. */
static int printable(unsigned b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

uint32_t tok_byte_to_cp(unsigned char b) {
    if (printable(b)) return b;
    uint32_t k = 0;
    for (unsigned i = 0; i < b; i++) k += !printable(i);
    return 256 + k;
}

int tok_cp_to_byte(uint32_t cp) {
    if (cp < 256) return printable(cp) ? (int)cp : -1;
    uint32_t k = 256;
    for (unsigned i = 0; i < 256; i++)
        if (!printable(i) && k++ == cp) return (int)i;
    return -1;
}

uint64_t tok_hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
        p += 8, n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 32);
}

uint64_t tok_fnv1a(uint64_t h, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

int tok_builder_add(tok_vocab_builder *b, const char *s, size_t len, uint32_t id, int bytelevel) {
    if (b->n + 1 >= b->cap) {
        size_t c = b->cap ? b->cap * 2 : 1024;
        uint32_t *ids = realloc(b->ids, c * sizeof *ids);
        if (ids) b->ids = ids;
        size_t *off = realloc(b->off, (c + 1) * sizeof *off);
        if (off) b->off = off;
        unsigned char *bl = realloc(b->is_bl, c);
        if (bl) b->is_bl = bl;
        if (!ids || !off || !bl) return -1;
        if (b->cap == 0) b->off[0] = 0;
        b->cap = c;
    }
    if (b->n_bytes + len + 1 > b->cap_bytes) {
        size_t c = b->cap_bytes ? b->cap_bytes : 1 << 16;
        while (c < b->n_bytes + len + 1) c *= 2;
        unsigned char *nb = realloc(b->bytes, c);
        if (!nb) return -1;
        b->bytes = nb, b->cap_bytes = c;
    }
    /* byte-level text -> bytes, when every code point is in the mapping */
    size_t start = b->n_bytes, k = 0;
    int ok = bytelevel == 1;
    while (ok && k < len) {
        uint32_t cp;
        int l = io_utf8_decode((const unsigned char *)s + k, len - k, &cp);
        int byte = l ? tok_cp_to_byte(cp) : -1;
        if (byte < 0) ok = 0;
        else b->bytes[b->n_bytes++] = (unsigned char)byte, k += (size_t)l;
    }
    if (!ok) { /* not byte-level: the text's own UTF-8 (as the byte-level decoder does) */
        b->n_bytes = start;
        memcpy(b->bytes + start, s, len);
        b->n_bytes += len;
    }
    b->ids[b->n] = id;
    b->is_bl[b->n] = (unsigned char)(bytelevel == 2 ? 2 : ok);
    b->off[++b->n] = b->n_bytes;
    if (b->n == 1 || id > b->max_id) b->max_id = id;
    return 0;
}

void tok_builder_free(tok_vocab_builder *b) {
    free(b->ids), free(b->off), free(b->bytes), free(b->is_bl);
    memset(b, 0, sizeof *b);
}

static void map_insert(io_tokenizer *t, uint32_t id) {
    const unsigned char *p = t->text + t->off[id];
    size_t n = t->off[id + 1] - t->off[id];
    uint64_t h = tok_hash_bytes(p, n);
    for (uint64_t i = h;; i++) {
        tok_bytes_slot *s = &t->vocab.slots[i & t->vocab.mask];
        if (s->id == TOK_NO_ID) {
            s->id = id, s->tag = (uint32_t)(h >> 32);
            return;
        }
    }
}

uint32_t tok_vocab_find(const io_tokenizer *t, const unsigned char *p, size_t n) {
    uint64_t h = tok_hash_bytes(p, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint64_t i = h;; i++) {
        const tok_bytes_slot *s = &t->vocab.slots[i & t->vocab.mask];
        if (s->id == TOK_NO_ID) return TOK_NO_ID;
        if (s->tag == tag && t->off[s->id + 1] - t->off[s->id] == n &&
            memcmp(t->text + t->off[s->id], p, n) == 0)
            return s->id;
    }
}

/* Whether some added entry of b has this id. */
static int added_at(const tok_vocab_builder *b, uint32_t id) {
    for (size_t i = 0; i < b->n; i++)
        if (b->ids[i] == id && b->is_bl[i] == 2) return 1;
    return 0;
}

int tok_build_vocab(io_tokenizer *t, tok_vocab_builder *b, const char *name, char *err,
                    int err_len) {
    if (b->n == 0) {
        snprintf(err, (size_t)err_len, "%s: the vocabulary is empty", name);
        return -1;
    }
    /* ids index tables of max_id + 1 entries: a few holes are fine, a lone huge id is not */
    if (b->max_id > 2 * b->n + (1u << 20)) {
        snprintf(err, (size_t)err_len,
                 "%s: id %u is far beyond the %zu entries: the ids must number the tokens from 0 "
                 "with few gaps", name, b->max_id, b->n);
        return -1;
    }
    uint32_t n_ids = b->max_id + 1;
    size_t cap = 64;
    while (cap < 2 * (size_t)b->n) cap *= 2;
    t->n_ids = n_ids;
    t->off = calloc((size_t)n_ids + 1, sizeof *t->off);
    t->has = calloc(n_ids, 1);
    t->bytelevel = calloc(n_ids, 1);
    t->text = malloc(b->n_bytes + 1);
    t->vocab.slots = malloc(cap * sizeof *t->vocab.slots);
    t->vocab.mask = cap - 1;
    size_t *len = calloc(n_ids, sizeof *len);
    size_t *src = calloc(n_ids, sizeof *src);
    if (!t->off || !t->has || !t->bytelevel || !t->text || !t->vocab.slots || !len || !src) {
        free(len), free(src);
        snprintf(err, (size_t)err_len, "%s: out of memory for %u ids", name, n_ids);
        return -1;
    }
    for (size_t i = 0; i < b->n; i++) {
        uint32_t id = b->ids[i];
        if (t->has[id]) {
            /* an added token may reuse a vocabulary id (GPT-2's <|endoftext|>): it wins */
            if (b->is_bl[i] != 2 && !added_at(b, id)) {
                snprintf(err, (size_t)err_len, "%s: id %u is given to two vocabulary entries",
                         name, id);
                free(len), free(src);
                return -1;
            }
            if (b->is_bl[i] != 2) continue;
        }
        t->has[id] = 1;
        t->bytelevel[id] = b->is_bl[i] == 1;
        len[id] = b->off[i + 1] - b->off[i];
        src[id] = b->off[i];
    }
    size_t o = 0;
    for (uint32_t id = 0; id < n_ids; id++) {
        t->off[id] = o;
        if (t->has[id]) memcpy(t->text + o, b->bytes + src[id], len[id]);
        o += len[id];
    }
    t->off[n_ids] = o;
    free(len), free(src);
    for (size_t i = 0; i < cap; i++) t->vocab.slots[i].id = TOK_NO_ID;
    for (uint32_t id = 0; id < n_ids; id++)
        if (t->has[id] && t->bytelevel[id] && tok_vocab_find(t, t->text + t->off[id],
                                                             t->off[id + 1] - t->off[id]) == TOK_NO_ID)
            map_insert(t, id);
    tok_builder_free(b);
    return 0;
}

int tok_check_bytes(io_tokenizer *t, const char *name, char *err, int err_len) {
    for (int c = 0; c < 256; c++) {
        unsigned char byte = (unsigned char)c;
        t->byte_id[c] = tok_vocab_find(t, &byte, 1);
        if (t->byte_id[c] == TOK_NO_ID) {
            unsigned char u[4];
            int l = io_utf8_encode(tok_byte_to_cp(byte), u);
            snprintf(err, (size_t)err_len,
                     "%s: not a byte-level vocabulary: byte 0x%02X (the token \"%.*s\") has no id",
                     name, c, l, (const char *)u);
            return -1;
        }
    }
    return 0;
}

int tok_merges_reserve(io_tokenizer *t, size_t n) {
    size_t cap = 64;
    while (cap < 2 * n + 2) cap *= 2;
    free(t->merges.slots);
    t->merges.slots = malloc(cap * sizeof *t->merges.slots);
    if (!t->merges.slots) return -1;
    for (size_t i = 0; i < cap; i++) t->merges.slots[i].key = UINT64_MAX;
    t->merges.mask = cap - 1;
    t->merges.n = 0;
    return 0;
}

/* byte-level text -> bytes into buf (which holds at least len bytes); -1 when not byte-level */
static long to_bytes(const char *s, size_t len, unsigned char *buf) {
    size_t k = 0, o = 0;
    while (k < len) {
        uint32_t cp;
        int l = io_utf8_decode((const unsigned char *)s + k, len - k, &cp);
        int byte = l ? tok_cp_to_byte(cp) : -1;
        if (byte < 0) return -1;
        buf[o++] = (unsigned char)byte;
        k += (size_t)l;
    }
    return (long)o;
}

/* Doubles the merge table (rehashing what it holds). */
static int merges_grow(io_tokenizer *t) {
    tok_merge_map old = t->merges;
    size_t cap = (old.mask + 1) * 2;
    t->merges.slots = malloc(cap * sizeof *t->merges.slots);
    if (!t->merges.slots) {
        t->merges = old;
        return -1;
    }
    for (size_t i = 0; i < cap; i++) t->merges.slots[i].key = UINT64_MAX;
    t->merges.mask = cap - 1;
    for (size_t i = 0; i <= old.mask; i++) {
        if (old.slots[i].key == UINT64_MAX) continue;
        for (uint64_t j = (old.slots[i].key * 0x9E3779B97F4A7C15ull) >> 20;; j++) {
            tok_merge *m = &t->merges.slots[j & t->merges.mask];
            if (m->key == UINT64_MAX) {
                *m = old.slots[i];
                break;
            }
        }
    }
    free(old.slots);
    return 0;
}

int tok_add_merge(io_tokenizer *t, const char *a, size_t na, const char *b, size_t nb,
                  uint32_t rank, const char *where, char *err, int err_len) {
    unsigned char stack[512], *buf = na + nb <= sizeof stack ? stack : malloc(na + nb);
    if (!buf) {
        snprintf(err, (size_t)err_len, "%s: out of memory", where);
        return -1;
    }
    long la = to_bytes(a, na, buf), lb = la < 0 ? -1 : to_bytes(b, nb, buf + la);
    uint32_t ia = TOK_NO_ID, ib = TOK_NO_ID, im = TOK_NO_ID;
    if (la >= 0 && lb >= 0) {
        ia = tok_vocab_find(t, buf, (size_t)la);
        ib = tok_vocab_find(t, buf + la, (size_t)lb);
        im = tok_vocab_find(t, buf, (size_t)(la + lb));
    }
    if (buf != stack) free(buf);
    const char *which = ia == TOK_NO_ID ? "its left part" : ib == TOK_NO_ID ? "its right part"
                        : "the merged token";
    if (ia == TOK_NO_ID || ib == TOK_NO_ID || im == TOK_NO_ID) {
        snprintf(err, (size_t)err_len, "%s: merge \"%.*s\" + \"%.*s\": %s is not in the vocabulary",
                 where, (int)(na > 100 ? 100 : na), a, (int)(nb > 100 ? 100 : nb), b, which);
        return -1;
    }
    if (2 * (t->merges.n + 1) > t->merges.mask + 1 && merges_grow(t)) {
        snprintf(err, (size_t)err_len, "%s: out of memory", where);
        return -1;
    }
    uint64_t key = (uint64_t)ia << 32 | ib;
    for (uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> 20;; i++) {
        tok_merge *m = &t->merges.slots[i & t->merges.mask];
        if (m->key == key) { /* a repeated merge takes the later rank, as tokenizers' map does */
            m->rank = rank, m->id = im;
            return 0;
        }
        if (m->key == UINT64_MAX) {
            m->key = key, m->rank = rank, m->id = im;
            t->merges.n++;
            return 0;
        }
    }
}

void tok_free_tables(io_tokenizer *t) {
    free(t->text), free(t->off), free(t->has), free(t->bytelevel), free(t->vocab.slots);
    free(t->merges.slots);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].bytes);
    free(t->added);
    for (int i = 0; i < t->n_stages; i++) pcre2_code_free(t->stages[i].re);
}
