/* Added tokens (special and not): found in the text before pre-tokenization, leftmost-longest
 * as tokenizers' Aho-Corasick search finds them, with their single_word / lstrip / rstrip
 * flags. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "io/tokenizer_internal.h"
#include "io/utf8.h"

static int cmp_added(const void *pa, const void *pb) {
    const tok_added *a = pa, *b = pb;
    if (a->normalized != b->normalized) return a->normalized - b->normalized;
    if (a->bytes[0] != b->bytes[0]) return (int)a->bytes[0] - (int)b->bytes[0];
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return memcmp(a->bytes, b->bytes, a->len);
}

int tok_sort_added(io_tokenizer *t, const char *name, char *err, int err_len) {
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len == 0) {
            snprintf(err, (size_t)err_len, "%s: added token %u has empty content", name,
                     t->added[i].id);
            return -1;
        }
    if (t->n_added) qsort(t->added, (size_t)t->n_added, sizeof *t->added, cmp_added);
    memset(t->added_lo, 0, sizeof t->added_lo);
    memset(t->added_hi, 0, sizeof t->added_hi);
    t->n_added_kind[0] = t->n_added_kind[1] = 0;
    for (int i = t->n_added - 1; i >= 0; i--) {
        int k = t->added[i].normalized != 0, b = t->added[i].bytes[0];
        t->n_added_kind[k]++;
        if (t->added_hi[k][b] == 0) t->added_hi[k][b] = i + 1;
        t->added_lo[k][b] = i;
    }
    return 0;
}

/* The code point that ends at text[end) (scanning back over continuation bytes); -1 if none. */
static int32_t cp_before(const unsigned char *text, size_t end) {
    size_t s = end;
    while (s > 0 && end - s < 4 && (text[s - 1] & 0xC0) == 0x80) s--;
    if (s > 0) s--;
    uint32_t cp = 0;
    if (end == 0 || io_utf8_decode(text + s, end - s, &cp) != (int)(end - s)) return -1;
    return (int32_t)cp;
}

static int32_t cp_at(const unsigned char *text, size_t n, size_t pos, int *len) {
    uint32_t cp;
    *len = pos < n ? io_utf8_decode(text + pos, n - pos, &cp) : 0;
    return *len ? (int32_t)cp : -1;
}

static int32_t cp_after(const unsigned char *text, size_t n, size_t pos) {
    int len;
    return cp_at(text, n, pos, &len);
}

/* As Rust's char::is_whitespace (the White_Space property). */
static int is_space(int32_t cp) {
    if (cp < 0) return 0;
    if ((cp >= 9 && cp <= 13) || cp == 0x85) return 1;
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

/* A regex word character (\w): letters, marks, numbers, connector punctuation. */
static int is_word(int32_t cp) {
    if (cp < 0) return 0;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: case UTF8PROC_CATEGORY_PC: return 1;
    default: return 0;
    }
}

uint32_t tok_find_added(const io_tokenizer *t, int normalized, const unsigned char *text, size_t n,
                        size_t from, size_t *start, size_t *end) {
    const int k = normalized != 0;
    if (t->n_added_kind[k] == 0) return TOK_NO_ID;
    for (size_t pos = from; pos < n; pos++) {
        int b = text[pos];
        int lo = t->added_lo[k][b], hi = t->added_hi[k][b];
        if (lo == hi) continue;
        const tok_added *hit = NULL;
        for (int i = lo; i < hi && !hit; i++) /* longest first */
            if (t->added[i].len <= n - pos && memcmp(text + pos, t->added[i].bytes, t->added[i].len) == 0)
                hit = &t->added[i];
        if (!hit) continue;
        size_t s = pos, e = pos + hit->len;
        if (hit->single_word &&
            (is_word(cp_before(text, s)) || is_word(cp_after(text, n, e)))) {
            pos = e - 1; /* the search resumes after a rejected match, as tokenizers' does */
            continue;
        }
        if (hit->lstrip)
            for (int32_t cp; s > from && is_space(cp = cp_before(text, s));) {
                unsigned char u[4];
                s -= (size_t)io_utf8_encode((uint32_t)cp, u);
            }
        if (hit->rstrip)
            for (int l; is_space(cp_at(text, n, e, &l));) e += (size_t)l;
        *start = s, *end = e;
        return hit->id;
    }
    return TOK_NO_ID;
}
