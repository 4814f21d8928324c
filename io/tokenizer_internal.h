/* The tokenizer's tables, shared by the io/tokenizer*.c files (internal to io/). */
#ifndef GDN_IO_TOKENIZER_INTERNAL_H
#define GDN_IO_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "io/tokenizer.h"

#define TOK_NO_ID UINT32_MAX
#define TOK_MAX_STAGES 8 /* pre-tokenizer steps */
#define TOK_MAX_NORM 4   /* normalizer steps */

/* bytes -> id, for vocabulary entries whose text is byte-level (open addressing over ids). */
typedef struct {
    uint32_t id, tag; /* id or TOK_NO_ID; tag: high hash bits, to skip most mismatches */
} tok_bytes_slot;

typedef struct {
    tok_bytes_slot *slots;
    uint64_t mask;
} tok_bytes_map;

/* (left id, right id) -> merge rank and the merged id. */
typedef struct {
    uint64_t key; /* left << 32 | right; UINT64_MAX: empty */
    uint32_t rank, id;
} tok_merge;

typedef struct {
    tok_merge *slots;
    uint64_t mask;
    size_t n;
} tok_merge_map;

typedef struct {
    unsigned char *bytes;
    size_t len;
    uint32_t id;
    int single_word, lstrip, rstrip, normalized;
} tok_added;

typedef enum { TOK_STAGE_SPLIT, TOK_STAGE_PREFIX_SPACE } tok_stage_kind;

typedef struct {
    tok_stage_kind kind;
    pcre2_code *re; /* SPLIT: matches and the text between them become pieces (Isolated) */
} tok_stage;

struct io_tokenizer {
    char describe[256];
    char source[2100];  /* the file(s) read, for records */
    uint64_t file_hash; /* FNV-1a 64 of their bytes, in order */
    uint32_t n_ids;      /* one more than the largest id */
    unsigned char *text; /* every id's bytes, back to back */
    size_t *off;         /* [n_ids + 1]: id i is text[off[i], off[i+1]) */
    unsigned char *has;  /* [n_ids]: 1 when the id exists */
    unsigned char *bytelevel; /* [n_ids]: 1 when the id is a model vocabulary entry in byte-level text */
    tok_bytes_map vocab;
    tok_merge_map merges;
    uint32_t byte_id[256]; /* the id of each single byte */
    int ignore_merges;
    int norm[TOK_MAX_NORM]; /* utf8proc option sets, applied in order */
    int n_norm;
    tok_stage stages[TOK_MAX_STAGES];
    int n_stages;
    tok_added *added;
    int n_added;
    /* added[lo..hi) are the tokens of a normalized kind starting with a byte, longest first */
    int added_lo[2][256], added_hi[2][256];
    int n_added_kind[2]; /* added tokens of each normalized kind */
};

/* ---- tokenizer_vocab.c -------------------------------------------------------------------- */
/* GPT-2's byte <-> printable code point mapping. */
uint32_t tok_byte_to_cp(unsigned char b);
int tok_cp_to_byte(uint32_t cp); /* -1 when cp is not in the mapping */

/* Collects (id, text) entries before the tables are built. */
typedef struct {
    uint32_t *ids;
    size_t *off; /* entry i: bytes[off[i], off[i+1]) */
    unsigned char *bytes;
    unsigned char *is_bl;
    size_t n, cap, n_bytes, cap_bytes;
    uint32_t max_id;
} tok_vocab_builder;

/* Adds a vocabulary entry. kind 1: a model entry in byte-level text (decoded to its bytes when
 * every code point is in the mapping, kept as UTF-8 otherwise); kind 2: an added token (its
 * UTF-8 as it is; it takes the id over from a model entry). 0, or -1 when out of memory. */
int tok_builder_add(tok_vocab_builder *b, const char *s, size_t len, uint32_t id, int kind);
void tok_builder_free(tok_vocab_builder *b);
/* Builds t's id tables and the bytes -> id map from b (which it empties). name: for messages. */
int tok_build_vocab(io_tokenizer *t, tok_vocab_builder *b, const char *name, char *err,
                    int err_len);
/* Looks up the id of byte-level vocabulary bytes; TOK_NO_ID when none. */
uint32_t tok_vocab_find(const io_tokenizer *t, const unsigned char *p, size_t n);
/* Adds merge (left text, right text) with the next rank; the texts are byte-level strings.
 * where: the position for messages ("merges.txt:12" or "tokenizer.json: model.merges[11]"). */
int tok_add_merge(io_tokenizer *t, const char *a, size_t na, const char *b, size_t nb,
                  uint32_t rank, const char *where, char *err, int err_len);
int tok_merges_reserve(io_tokenizer *t, size_t n);
static inline const tok_merge *tok_merge_find(const io_tokenizer *t, uint32_t a, uint32_t b) {
    uint64_t key = (uint64_t)a << 32 | b;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    for (uint64_t i = h >> 20;; i++) {
        const tok_merge *m = &t->merges.slots[i & t->merges.mask];
        if (m->key == key) return m;
        if (m->key == UINT64_MAX) return NULL;
    }
}
uint64_t tok_hash_bytes(const unsigned char *p, size_t n);
/* FNV-1a 64 (the recorded file hash), continuing from h (start: 0xcbf29ce484222325). */
uint64_t tok_fnv1a(uint64_t h, const unsigned char *p, size_t n);
/* Checks that every byte has an id (a byte-level vocabulary). */
int tok_check_bytes(io_tokenizer *t, const char *name, char *err, int err_len);
void tok_free_tables(io_tokenizer *t);

/* ---- tokenizer_pretok.c ------------------------------------------------------------------- */
/* Compiles a Split pattern (literal: a String pattern). */
int tok_add_split(io_tokenizer *t, const char *pattern, size_t len, int literal, const char *where,
                  char *err, int err_len);
/* GPT-2's pattern, used by ByteLevel with use_regex. */
extern const char tok_gpt2_pattern[];
/* Normalizes text[0, n) into *out (malloc'ed) when t has a normalizer and text is not plain
 * ASCII; returns 1 then, 0 when the text is used as it is, -1 when out of memory. */
int tok_normalize(const io_tokenizer *t, const unsigned char *text, size_t n, unsigned char **out,
                  size_t *out_len);

/* ---- tokenizer_added.c -------------------------------------------------------------------- */
/* The next added token (of the given normalized kind) in text[from, n): its id, with the span
 * it covers (lstrip/rstrip whitespace included) in [*start, *end). TOK_NO_ID when none. */
uint32_t tok_find_added(const io_tokenizer *t, int normalized, const unsigned char *text, size_t n,
                        size_t from, size_t *start, size_t *end);
int tok_sort_added(io_tokenizer *t, const char *name, char *err, int err_len);

/* ---- tokenizer_bpe.c ---------------------------------------------------------------------- */
typedef struct tok_bpe_scratch tok_bpe_scratch;
tok_bpe_scratch *tok_bpe_new(void);
void tok_bpe_free(tok_bpe_scratch *s);
/* Appends the ids of one pre-tokenized piece (raw bytes). 0, or -1 when out of memory. */
int tok_bpe_piece(const io_tokenizer *t, tok_bpe_scratch *s, const unsigned char *p, size_t n,
                  io_ids *out);
int tok_ids_push(io_ids *v, uint32_t id);

#endif
