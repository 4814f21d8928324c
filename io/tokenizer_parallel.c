/* Encoding a large text on every core: the text is cut into chunks at places where the
 * tokenizer itself always splits, each chunk is encoded on its own (one encoder per thread),
 * and the ids are joined in order, so the result equals encoding the whole text at once. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer_internal.h"

#define CHUNK_BYTES (1u << 20)

/* A cut between '\n' and an ASCII letter is a split of every supported pre-tokenizer pattern:
 * letters never join a preceding newline (the patterns' letter runs take at most one non-letter,
 * non-newline character before them, the others end at or before a newline), normalization never
 * reaches across a newline, and the BPE pieces are the same on both sides. Two things end that:
 * a prefix space added to the whole text (ByteLevel add_prefix_space as the first step would be
 * added at every cut), an added token holding a newline (it could straddle the cut) and one
 * with lstrip (it takes the newline before it into its match). */
int io_tokenizer_can_cut(const io_tokenizer *t) {
    if (t->n_stages > 0 && t->stages[0].kind == TOK_STAGE_PREFIX_SPACE) return 0;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].lstrip || memchr(t->added[i].bytes, '\n', t->added[i].len)) return 0;
    return 1;
}

static int letter(unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }

/* The first cut at or after pos (n when none). */
static size_t next_cut(const unsigned char *text, size_t n, size_t pos) {
    for (size_t i = pos < 1 ? 1 : pos; i < n; i++) {
        const unsigned char *nl = memchr(text + i - 1, '\n', n - (i - 1));
        if (!nl) return n;
        i = (size_t)(nl - text) + 1;
        if (i < n && letter(text[i])) return i;
    }
    return n;
}

int io_tokenizer_encode_parallel(const io_tokenizer *t, const unsigned char *text, size_t n,
                                 int threads, io_ids *out, io_tok_progress progress, void *user,
                                 char *err, int err_len) {
    /* chunk boundaries */
    size_t n_chunks = 0, cap = 16;
    size_t *cut = malloc(cap * sizeof *cut);
    if (!cut) goto oom;
    cut[n_chunks++] = 0;
    if (io_tokenizer_can_cut(t))
        for (size_t pos = 0;;) {
            size_t c = pos + CHUNK_BYTES >= n ? n : next_cut(text, n, pos + CHUNK_BYTES);
            if (c >= n) break;
            if (n_chunks + 1 >= cap) {
                size_t *nc = realloc(cut, (cap *= 2) * sizeof *cut);
                if (!nc) goto oom;
                cut = nc;
            }
            cut[n_chunks++] = pos = c;
        }
    cut[n_chunks] = n;
    io_ids *parts = calloc(n_chunks, sizeof *parts);
    if (!parts) goto oom;
    int failed = 0;
    size_t done_bytes = 0;
    if (threads < 1) threads = omp_get_max_threads();
    if ((size_t)threads > n_chunks) threads = (int)n_chunks;
#pragma omp parallel num_threads(threads)
    {
        io_tok_enc *e = io_tok_enc_new(t);
        char my_err[512];
        if (!e) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (size_t c = 0; c < n_chunks; c++) {
            int stop;
#pragma omp atomic read
            stop = failed;
            if (stop || !e) continue;
            if (io_tok_encode(e, text + cut[c], cut[c + 1] - cut[c], &parts[c], my_err,
                              sizeof my_err)) {
#pragma omp critical(tok_err)
                {
                    if (!failed) snprintf(err, (size_t)err_len, "%s", my_err);
                    failed = 1;
                }
                continue;
            }
#pragma omp critical(tok_progress)
            {
                done_bytes += cut[c + 1] - cut[c];
                if (progress) progress(user, done_bytes, n);
            }
        }
        io_tok_enc_free(e);
    }
    size_t total = out->n;
    for (size_t c = 0; c < n_chunks; c++) total += parts[c].n;
    if (!failed && total > out->cap) {
        uint32_t *ids = realloc(out->ids, (total + 1) * sizeof *ids);
        if (ids) out->ids = ids, out->cap = total + 1;
        else {
            snprintf(err, (size_t)err_len, "out of memory for %zu token ids", total);
            failed = 1;
        }
    }
    for (size_t c = 0; c < n_chunks; c++) {
        if (!failed) {
            memcpy(out->ids + out->n, parts[c].ids, parts[c].n * sizeof *out->ids);
            out->n += parts[c].n;
        }
        io_ids_free(&parts[c]);
    }
    if (failed && !err[0]) snprintf(err, (size_t)err_len, "tokenizer: out of memory");
    free(parts);
    free(cut);
    return failed ? -1 : 0;
oom:
    free(cut);
    snprintf(err, (size_t)err_len, "tokenizer: out of memory");
    return -1;
}
