/* libFuzzer harness: encoding arbitrary bytes (invalid UTF-8 included) with byte-level BPE.
 *
 * Two small tokenizers in the Llama 3 / Qwen shape (the Split regex with lookahead and
 * case-insensitive contractions, ByteLevel, merges, added tokens), one without a normalizer
 * and one with NFC and added tokens that strip whitespace (lstrip, rstrip), built once. Every
 * input is encoded by both: no crash, every id decodes, and the first (nothing normalized or
 * stripped) decodes to the input byte for byte. Encoding the
 * input in two halves cut after a newline that precedes an ASCII letter must give the same ids
 * as encoding it whole (what gdn data's parallel chunks rely on). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer.h"
#include "model/check.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/tokenizer/byte_cp.h"

static io_tokenizer *tok[2];
static io_tok_enc *enc[2];

static io_tokenizer *build(const char *normalizer, const char *more_added) {
    static char s[65536];
    size_t n = (size_t)snprintf(
        s, sizeof s,
        "{\"normalizer\": %s, \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
        "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|"
        "[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|"
        "\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\"}, "
        "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}, "
        "\"added_tokens\": ["
        "{\"id\": 300, \"content\": \"<|e|>\", \"special\": true, \"normalized\": false},"
        "{\"id\": 302, \"content\": \"w\", \"single_word\": true, \"normalized\": true},"
        "{\"id\": 303, \"content\": \"\\u00e9t\", \"normalized\": true}%s], "
        "\"model\": {\"type\": \"BPE\", \"ignore_merges\": true, \"vocab\": {",
        normalizer, more_added);
    for (unsigned b = 0; b < 256; b++) {
        unsigned cp = byte_cp(b);
        if (cp == '"' || cp == '\\') n += (size_t)snprintf(s + n, sizeof s - n, "\"\\%c\": %u, ", cp, b);
        else n += (size_t)snprintf(s + n, sizeof s - n, "\"\\u%04x\": %u, ", cp, b);
    }
    snprintf(s + n, sizeof s - n,
             "\"th\": 256, \"the\": 257, \"\\u0120t\": 258, \"\\u0120th\": 259, \"\\u0120the\": 260, "
             "\"in\": 261, \"ing\": 262, \"\\u00c3\\u00a9\": 263, \"abc\": 264}, \"merges\": ["
             "\"t h\", \"th e\", \"\\u0120 t\", \"\\u0120t h\", \"\\u0120th e\", \"i n\", \"in g\", "
             "\"\\u00c3 \\u00a9\"]}}");
    char err[1024];
    io_tokenizer *t = io_tokenizer_from_json(s, strlen(s), "fuzz", err, sizeof err);
    if (!t) {
        fprintf(stderr, "fuzz_tokenizer_encode: %s\n", err);
        abort();
    }
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    gdn_set_die_handler(fuzz_die_abort);
    tok[0] = build("null", "");
    tok[1] = build("{\"type\": \"NFC\"}",
                   ", {\"id\": 301, \"content\": \"[L]\", \"rstrip\": true, \"normalized\": false}"
                   ", {\"id\": 304, \"content\": \"[R]\", \"lstrip\": true, \"normalized\": false}");
    for (int i = 0; i < 2; i++) enc[i] = io_tok_enc_new(tok[i]);
    return 0;
}

static void encode(int k, const uint8_t *data, size_t size, io_ids *ids) {
    char err[512];
    err[0] = 0;
    if (io_tok_encode(enc[k], data, size, ids, err, sizeof err)) {
        fprintf(stderr, "fuzz_tokenizer_encode: encode failed: %s\n", err);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int k = 0; k < 2; k++) {
        io_ids ids = {0};
        encode(k, data, size, &ids);
        unsigned char *back;
        size_t len;
        char err[512];
        CHECK(io_tokenizer_decode(tok[k], ids.ids, ids.n, &back, &len, err, sizeof err) == 0);
        CHECK(io_tokenizer_lossless(tok[k]) == (k == 0));
        if (k == 0) {
            CHECK(len == size);
            CHECK(memcmp(back, data, size) == 0);
        }
        free(back);
        /* the first cut gdn data could make: the halves encode to the same ids */
        size_t cut = 0;
        for (size_t i = 1; i < size && !cut; i++)
            if (data[i - 1] == '\n' && ((data[i] | 0x20) >= 'a' && (data[i] | 0x20) <= 'z')) cut = i;
        if (cut && io_tokenizer_can_cut(tok[k])) {
            io_ids two = {0};
            encode(k, data, cut, &two);
            encode(k, data + cut, size - cut, &two);
            CHECK(two.n == ids.n);
            CHECK(memcmp(two.ids, ids.ids, ids.n * sizeof *ids.ids) == 0);
            io_ids_free(&two);
        }
        io_ids_free(&ids);
    }
    return 0;
}
