/* Token sources: UTF-8 text (plain or gzip) through the byte-level tokenizer, and token shards
 * in the llm.c / modded-nanogpt .bin format.
 *
 * Shard format (little-endian): a header of 256 int32 {magic 20240520, version, token count,
 * 0...} followed by the tokens. Version 1 stores uint16 tokens (the llm.c format, vocabularies up
 * to 65536); version 2 stores uint32 tokens (this project's variant for larger vocabularies).
 * The count is an int32, so one shard holds at most 2^31 - 1 tokens.
 *
 * A token source spec is a comma-separated list of items; an item with a wildcard (* ? [) is
 * expanded with glob(3), sorted by name. An item ending in ".bin" is a shard (memory-mapped);
 * anything else is a text file read through the byte tokenizer (token = byte value, vocab 256),
 * decompressed when it starts with the gzip magic. Text and shards cannot be mixed in one spec.
 * Each file is a separate span: training windows never straddle two files. */
#ifndef GDN_IO_TOKENS_H
#define GDN_IO_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token shards are little-endian and are read in place: this needs a little-endian host"
#endif

#define IO_SHARD_MAGIC 20240520
#define IO_SHARD_HEADER_INTS 256
#define IO_SHARD_HEADER_BYTES (IO_SHARD_HEADER_INTS * 4)
#define IO_SHARD_U16 1 /* version: uint16 tokens */
#define IO_SHARD_U32 2 /* version: uint32 tokens */
#define IO_SHARD_MAX_TOKENS 2147483647u

#define IO_BYTE_VOCAB 256 /* the byte-level tokenizer: token = byte value */

/* A run of tokens from one file: width-byte unsigned little-endian integers. */
typedef struct {
    const char *name;          /* file path, for messages */
    const unsigned char *data; /* first token */
    int width;                 /* bytes per token: 1 (text), 2 (version 1), 4 (version 2) */
    size_t n;                  /* tokens */
} io_token_span;

/* The tokens of a source, in order, as spans over file contents (mapped or read). */
typedef struct {
    io_token_span *spans; /* [n_spans] */
    int n_spans;
    size_t n_tokens;       /* sum of the spans' n */
    int is_text;           /* 1: byte-tokenized text */
    /* owned storage, released by io_tokens_close */
    void **blocks;
    size_t *block_bytes; /* > 0: mmap'ed length; 0: malloc'ed */
    char **names;
    int n_blocks;
} io_tokens;

/* Token i of a span. */
static inline uint32_t io_span_at(const io_token_span *s, size_t i) {
    switch (s->width) {
    case 1: return s->data[i];
    case 2: return ((const uint16_t *)(const void *)s->data)[i];
    default: return ((const uint32_t *)(const void *)s->data)[i];
    }
}

/* Opens a source (see the spec grammar above) and checks every token id < vocab_size.
 * Returns 0, or -1 with a message naming the file in err (missing file, no glob match, bad
 * header, size mismatch, token outside the vocabulary with its position). */
int io_tokens_open(io_tokens *t, const char *spec, int vocab_size, char *err, int err_len);

/* A source over caller-owned memory (one span; no copy; close frees only the span table). */
void io_tokens_wrap(io_tokens *t, const void *data, int width, size_t n, const char *name);

/* The first token id >= vocab_size, reported in err with file and position: returns -1, or 0. */
int io_tokens_check_vocab(const io_tokens *t, int vocab_size, char *err, int err_len);

void io_tokens_close(io_tokens *t);

/* Copies tokens [pos, pos + n) of one span into out as int. */
void io_span_copy(const io_token_span *s, size_t pos, size_t n, int *out);

/* Reads a whole file into memory (*bytes, malloc'ed, NUL-terminated for convenience, *len
 * bytes), gunzipping it when it starts with the gzip magic 1f 8b. Returns 0, or -1 with the
 * message in err. */
int io_text_read(const char *path, unsigned char **bytes, size_t *len, char *err, int err_len);

/* Writes n tokens (width 1, 2 or 4 bytes each, e.g. text bytes) as a shard of the given
 * version. The file appears atomically (written to PATH.tmp, then renamed). Errors: a token
 * that does not fit the version's type, more than IO_SHARD_MAX_TOKENS, I/O failures. */
int io_shard_write(const char *path, int version, const void *tokens, int width, size_t n,
                   char *err, int err_len);

/* Byte tokenizer. Encoding is the identity on bytes; decoding rejects ids above 255. */
void io_byte_encode(const unsigned char *text, size_t n, int *tokens /* [n] */);
int io_byte_decode(const int *tokens /* [n] */, size_t n, unsigned char *text /* [n] */);

#endif
