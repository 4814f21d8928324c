/* Pre-tokenizer patterns (PCRE2) and normalization (utf8proc). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "io/tokenizer_internal.h"

/* ByteLevel's own split (use_regex: true), as tokenizers and GPT-2 define it. */
const char tok_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

int tok_add_split(io_tokenizer *t, const char *pattern, size_t len, int literal, const char *where,
                  char *err, int err_len) {
    if (t->n_stages == TOK_MAX_STAGES) {
        snprintf(err, (size_t)err_len, "%s: more than %d pre-tokenizer steps", where,
                 TOK_MAX_STAGES);
        return -1;
    }
    /* UCP: \s \d \w and POSIX classes by Unicode properties, as the Oniguruma patterns mean;
     * MATCH_INVALID_UTF: invalid UTF-8 never matches instead of failing the match. */
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : 0);
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &code, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        snprintf(err, (size_t)err_len, "%s: the pattern does not compile at offset %zu: %s",
                 where, (size_t)at, (const char *)msg);
        return -1;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* when JIT is unavailable it interprets */
    t->stages[t->n_stages].kind = TOK_STAGE_SPLIT;
    t->stages[t->n_stages++].re = re;
    return 0;
}

int tok_normalize(const io_tokenizer *t, const unsigned char *text, size_t n, unsigned char **out,
                  size_t *out_len) {
    if (t->n_norm == 0) return 0;
    size_t i = 0;
    while (i < n && text[i] < 0x80) i++;
    if (i == n) return 0; /* ASCII is unchanged by every Unicode normal form */
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    /* line by line: a normal form never reaches across '\n' (a starter that composes with
     * nothing), and a line that is not valid UTF-8 stays as it is */
    size_t start = 0;
    while (start < n) {
        const unsigned char *nl = memchr(text + start, '\n', n - start);
        size_t end = nl ? (size_t)(nl - text) + 1 : n;
        const unsigned char *line = text + start;
        size_t line_len = end - start, k = 0;
        while (k < line_len && line[k] < 0x80) k++;
        unsigned char *norm = NULL;
        utf8proc_ssize_t m = (utf8proc_ssize_t)line_len;
        int owned = 0;
        if (k < line_len) {
            const unsigned char *cur = line;
            for (int s = 0; s < t->n_norm; s++) {
                utf8proc_uint8_t *o = NULL;
                utf8proc_ssize_t r = utf8proc_map(cur, m, &o, (utf8proc_option_t)t->norm[s]);
                if (r < 0) { /* invalid UTF-8 (or out of memory): the line as it was */
                    free(o);
                    if (owned) free(norm);
                    norm = NULL, owned = 0, m = (utf8proc_ssize_t)line_len;
                    break;
                }
                if (owned) free(norm);
                norm = o, owned = 1, cur = o, m = r;
            }
        }
        const unsigned char *src = owned ? norm : line;
        if (len + (size_t)m + 1 > cap) {
            size_t c = cap ? cap : n + 16;
            while (c < len + (size_t)m + 1) c *= 2;
            unsigned char *nb = realloc(buf, c);
            if (!nb) {
                if (owned) free(norm);
                free(buf);
                return -1;
            }
            buf = nb, cap = c;
        }
        memcpy(buf + len, src, (size_t)m);
        len += (size_t)m;
        if (owned) free(norm);
        start = end;
    }
    *out = buf;
    *out_len = len;
    return 1;
}
