/* Byte-level BPE tokenizers (the GPT-2, Llama 3 and Qwen2/3 families), encoding id for id as
 * Hugging Face `tokenizers` does with add_special_tokens=False.
 *
 * Sources: a tokenizer.json (normalizer: none, NFC/NFD/NFKC/NFKD or a Sequence of them;
 * pre_tokenizer: ByteLevel, or a Sequence of Split(Regex|String, behavior Isolated) and
 * ByteLevel; model: BPE with merges as "a b" strings or [a, b] pairs, ignore_merges; added
 * tokens), or GPT-2's vocab.json + merges.txt (no special text, no prefix space: as tiktoken's
 * encode_ordinary). Anything else is refused with a message that names it.
 *
 * Encoding pipeline: added tokens are found in the text first (those with normalized=false in
 * the raw text, the others after normalization), the text between them is normalized, split by
 * the pre-tokenizer regexes (PCRE2, Unicode properties), and each piece's bytes are merged by
 * rank. Invalid UTF-8 is not an error: its bytes never match a regex (nor a normalization),
 * so they fall into the pieces between matches and are encoded byte by byte like any other
 * piece; decoding returns them unchanged.
 *
 * Decoding concatenates each id's bytes, so decode(encode(text)) == text whenever the
 * normalizer leaves the text unchanged (for NFC: when the text is already NFC) and no added
 * token with lstrip/rstrip takes whitespace into its match (the Llama 3, Qwen2/3 and GPT-2
 * vocabularies have none). */
#ifndef GDN_IO_TOKENIZER_H
#define GDN_IO_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct io_tokenizer io_tokenizer;
typedef struct io_tok_enc io_tok_enc;

/* path: a tokenizer.json, or a directory holding tokenizer.json or vocab.json + merges.txt.
 * Returns the tokenizer, or NULL with a message naming the file and what is wrong in err. */
io_tokenizer *io_tokenizer_load(const char *path, char *err, int err_len);

/* From tokenizer.json text in memory (name: for messages). */
io_tokenizer *io_tokenizer_from_json(const char *text, size_t len, const char *name, char *err,
                                     int err_len);

/* From GPT-2's vocab.json and merges.txt files. */
io_tokenizer *io_tokenizer_load_gpt2(const char *vocab_path, const char *merges_path, char *err,
                                     int err_len);

void io_tokenizer_free(io_tokenizer *t);

/* One more than the largest id (model vocabulary and added tokens). */
uint32_t io_tokenizer_vocab_size(const io_tokenizer *t);

/* 1 when decode(encode(text)) == text for every text: no normalizer, no prefix space, no added
 * token that strips whitespace. */
int io_tokenizer_lossless(const io_tokenizer *t);

/* A short description ("tokenizer.json: 128256 ids, 280147 merges, 256 added tokens"). */
const char *io_tokenizer_describe(const io_tokenizer *t);

/* The file(s) it was read from ("DIR/vocab.json + DIR/merges.txt" for GPT-2's pair) and, in
 * *hash when not NULL, the FNV-1a 64 hash of their bytes in that order (to record in data
 * made with it). */
const char *io_tokenizer_source(const io_tokenizer *t, uint64_t *hash);

/* The id of an added token or vocabulary entry with exactly these bytes; -1 when none. */
int64_t io_tokenizer_token_id(const io_tokenizer *t, const char *bytes, size_t n);

/* Encoding state (scratch buffers, the regex match data, a cache of encoded pieces): one per
 * thread; the tokenizer itself is read-only and shared. NULL when out of memory. */
io_tok_enc *io_tok_enc_new(const io_tokenizer *t);
void io_tok_enc_free(io_tok_enc *e);

/* A growable array of ids. */
typedef struct {
    uint32_t *ids;
    size_t n, cap;
} io_ids;

void io_ids_free(io_ids *v);

/* Appends the ids of text[0, n) to out. Returns 0, or -1 with a message in err (out of memory,
 * or a regex engine error such as its match limit). */
int io_tok_encode(io_tok_enc *e, const unsigned char *text, size_t n, io_ids *out, char *err,
                  int err_len);

/* Encodes text[0, n) on `threads` threads (0: OpenMP's default), appending to out; equal to
 * io_tok_encode on the whole text. progress (may be NULL) is called with the bytes encoded so
 * far after each chunk (from one thread at a time). Returns 0, or -1 with a message in err. */
typedef void (*io_tok_progress)(void *user, size_t done, size_t total);
int io_tokenizer_encode_parallel(const io_tokenizer *t, const unsigned char *text, size_t n,
                                 int threads, io_ids *out, io_tok_progress progress, void *user,
                                 char *err, int err_len);
/* 1 when a text may be cut into chunks encoded separately (see io/tokenizer_parallel.c). */
int io_tokenizer_can_cut(const io_tokenizer *t);

/* The bytes of ids[0, n) into *out (malloc'ed, NUL-terminated, *out_len bytes). Returns 0, or -1
 * with a message naming the first id outside the vocabulary. */
int io_tokenizer_decode(const io_tokenizer *t, const uint32_t *ids, size_t n, unsigned char **out,
                        size_t *out_len, char *err, int err_len);

/* The bytes of one id (NULL when the id has none), for streaming output. */
const unsigned char *io_tokenizer_id_bytes(const io_tokenizer *t, uint32_t id, size_t *len);

#endif
