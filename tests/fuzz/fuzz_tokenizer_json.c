/* libFuzzer harness: the tokenizer.json loader (io/tokenizer_load.c and the tables behind it).
 *
 * Every input is loaded as a tokenizer.json; a rejected input must come with a message naming
 * the file. An accepted one encodes a few fixed texts and the input itself; every id must decode,
 * and when nothing is normalized, prefixed or stripped decoding must give the text back byte
 * for byte. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer.h"
#include "model/check.h"
#include "tests/fuzz/fuzz_common.h"

FUZZ_PLAIN_INIT

static void round_trip(const io_tokenizer *t, io_tok_enc *e, const unsigned char *text, size_t n) {
    char err[512];
    io_ids ids = {0};
    err[0] = 0;
    if (io_tok_encode(e, text, n, &ids, err, sizeof err)) {
        CHECK(err[0] != 0); /* a regex engine limit: a message, no ids promised */
        io_ids_free(&ids);
        return;
    }
    unsigned char *back;
    size_t len;
    CHECK(io_tokenizer_decode(t, ids.ids, ids.n, &back, &len, err, sizeof err) == 0);
    if (io_tokenizer_lossless(t)) {
        CHECK(len == n);
        CHECK(memcmp(back, text, n) == 0);
    }
    free(back);
    io_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[1024];
    err[0] = 0;
    io_tokenizer *t = io_tokenizer_from_json((const char *)data, size, "fuzz.json", err, sizeof err);
    if (!t) {
        CHECK(strncmp(err, "fuzz.json", 9) == 0);
        return 0;
    }
    io_tok_enc *e = io_tok_enc_new(t);
    CHECK(e != NULL);
    static const char *const texts[] = {"", "a", "Hello, world! It's 12345.\n\n  x",
                                        "<|endoftext|> caf\xC3\xA9 e\xCC\x81 \xFF\xC3"};
    for (int i = 0; i < 4; i++) round_trip(t, e, (const unsigned char *)texts[i], strlen(texts[i]));
    round_trip(t, e, data, size);
    io_tok_enc_free(e);
    io_tokenizer_free(t);
    return 0;
}
