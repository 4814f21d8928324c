/* The tokenizer interface (io/tokenizer.h) in a build without PCRE2 or utf8proc (CMakeLists.txt
 * compiles this file in place of io/tokenizer_*.c then): every load fails with a message that
 * says how to get BPE tokenizers, so no io_tokenizer ever exists and the functions that take one
 * are never reached. Training, evaluation and sampling on token shards need none of it. */
#include <stdio.h>
#include <stdlib.h>

#include "io/tokenizer.h"

static io_tokenizer *unavailable(char *err, int err_len) {
    snprintf(err, (size_t)err_len,
             "this gdn was built without BPE tokenizers (PCRE2 and utf8proc were not found when it "
             "was configured): install libpcre2-dev and libutf8proc-dev (jobs/install_deps.sh does) "
             "and rebuild");
    return NULL;
}

io_tokenizer *io_tokenizer_load(const char *path, char *err, int err_len) {
    (void)path;
    return unavailable(err, err_len);
}

io_tokenizer *io_tokenizer_from_json(const char *text, size_t len, const char *name, char *err, int err_len) {
    (void)text, (void)len, (void)name;
    return unavailable(err, err_len);
}

io_tokenizer *io_tokenizer_load_gpt2(const char *vocab_path, const char *merges_path, char *err, int err_len) {
    (void)vocab_path, (void)merges_path;
    return unavailable(err, err_len);
}

void io_tokenizer_free(io_tokenizer *t) { (void)t; }
void io_tok_enc_free(io_tok_enc *e) { (void)e; }

void io_ids_free(io_ids *v) {
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

/* Unreachable: they take a tokenizer, and none can be made. */
static void never(const char *fn) {
    fprintf(stderr, "gdn: %s called in a build without tokenizers\n", fn);
    abort();
}

uint32_t io_tokenizer_vocab_size(const io_tokenizer *t) { (void)t; never(__func__); return 0; }
int io_tokenizer_lossless(const io_tokenizer *t) { (void)t; never(__func__); return 0; }
const char *io_tokenizer_describe(const io_tokenizer *t) { (void)t; never(__func__); return NULL; }

const char *io_tokenizer_source(const io_tokenizer *t, uint64_t *hash) {
    (void)t, (void)hash;
    never(__func__);
    return NULL;
}

int64_t io_tokenizer_token_id(const io_tokenizer *t, const char *bytes, size_t n) {
    (void)t, (void)bytes, (void)n;
    never(__func__);
    return -1;
}

io_tok_enc *io_tok_enc_new(const io_tokenizer *t) { (void)t; never(__func__); return NULL; }

int io_tok_encode(io_tok_enc *e, const unsigned char *text, size_t n, io_ids *out, char *err, int err_len) {
    (void)e, (void)text, (void)n, (void)out, (void)err, (void)err_len;
    never(__func__);
    return -1;
}

int io_tokenizer_encode_parallel(const io_tokenizer *t, const unsigned char *text, size_t n, int threads,
                                 io_ids *out, io_tok_progress progress, void *user, char *err, int err_len) {
    (void)t, (void)text, (void)n, (void)threads, (void)out, (void)progress, (void)user, (void)err, (void)err_len;
    never(__func__);
    return -1;
}

int io_tokenizer_can_cut(const io_tokenizer *t) { (void)t; never(__func__); return 0; }

int io_tokenizer_decode(const io_tokenizer *t, const uint32_t *ids, size_t n, unsigned char **out,
                        size_t *out_len, char *err, int err_len) {
    (void)t, (void)ids, (void)n, (void)out, (void)out_len, (void)err, (void)err_len;
    never(__func__);
    return -1;
}

const unsigned char *io_tokenizer_id_bytes(const io_tokenizer *t, uint32_t id, size_t *len) {
    (void)t, (void)id, (void)len;
    never(__func__);
    return NULL;
}
