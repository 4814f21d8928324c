/* BPE tokenizers on small hand-made vocabularies: merges by rank (strings and pairs),
 * ignore_merges, added tokens and their flags, normalization, prefix space, invalid UTF-8,
 * parallel encoding, GPT-2 vocab.json + merges.txt, and the messages for bad files. The real
 * vocabularies are checked against Hugging Face's ids by tokenizer_reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer.h"
#include "tests/io_fixture.h"
#include "tests/tokenizer/byte_cp.h"

/* A tokenizer.json: ids 0..255 are the single bytes (id = byte value), then `vocab` (more
 * "token": id members, or ""), merges (a JSON array body), added (array body). */
static char *make_json(const char *normalizer, const char *pre, const char *vocab,
                       const char *merges, const char *added, int ignore_merges) {
    size_t cap = 65536;
    char *s = malloc(cap);
    size_t n = (size_t)snprintf(s, cap, "{\"normalizer\": %s, \"pre_tokenizer\": %s, "
                                        "\"added_tokens\": [%s], \"model\": {\"type\": \"BPE\", "
                                        "\"ignore_merges\": %s, \"vocab\": {",
                                normalizer, pre, added, ignore_merges ? "true" : "false");
    for (unsigned b = 0; b < 256; b++) {
        unsigned cp = byte_cp(b);
        if (cp == '"' || cp == '\\') n += (size_t)snprintf(s + n, cap - n, "\"\\%c\": %u, ", cp, b);
        else n += (size_t)snprintf(s + n, cap - n, "\"\\u%04x\": %u, ", cp, b);
    }
    n += (size_t)snprintf(s + n, cap - n, "%s%s\"zzzz\": 9999}, \"merges\": [%s]}}",
                          vocab, *vocab ? ", " : "", merges);
    return s;
}

static io_tokenizer *load_json(const char *json) {
    char err[1024];
    io_tokenizer *t = io_tokenizer_from_json(json, strlen(json), "t.json", err, sizeof err);
    if (!t) fail_msg("%s", err);
    return t;
}

/* Encodes text; the ids (at most 64) go to ids, the count is returned; decoding must give
 * `back` (NULL: the text itself). */
static size_t enc(const io_tokenizer *t, const char *text, size_t len, uint32_t *ids,
                  const char *back) {
    char err[512];
    io_tok_enc *e = io_tok_enc_new(t);
    io_ids v = {0};
    if (io_tok_encode(e, (const unsigned char *)text, len, &v, err, sizeof err)) fail_msg("%s", err);
    assert_true(v.n <= 64);
    memcpy(ids, v.ids, v.n * sizeof *ids);
    unsigned char *out;
    size_t out_len;
    if (io_tokenizer_decode(t, v.ids, v.n, &out, &out_len, err, sizeof err)) fail_msg("%s", err);
    if (!back) back = text;
    else len = strlen(back);
    assert_int_equal(out_len, len);
    assert_memory_equal(out, back, len);
    free(out);
    size_t n = v.n;
    io_ids_free(&v);
    io_tok_enc_free(e);
    return n;
}

#define BYTELEVEL_NOSPLIT "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}"
#define EXPECT_IDS(got, n, ...)                                                    \
    do {                                                                           \
        const uint32_t want_[] = {__VA_ARGS__};                                    \
        assert_int_equal((n), sizeof want_ / sizeof want_[0]);                     \
        for (size_t i_ = 0; i_ < (n); i_++) assert_int_equal((got)[i_], want_[i_]); \
    } while (0)

static void test_merges_by_rank(void **state) {
    (void)state;
    uint32_t ids[64];
    /* "b c" has the lower rank, so "abc" becomes a + bc, then abc; the same as pairs */
    const char *vocab = "\"ab\": 256, \"bc\": 257, \"abc\": 258";
    const char *forms[] = {"\"b c\", \"a b\", \"a bc\"", "[\"b\", \"c\"], [\"a\", \"b\"], [\"a\", \"bc\"]"};
    for (int f = 0; f < 2; f++) {
        char *json = make_json("null", BYTELEVEL_NOSPLIT, vocab, forms[f], "", 0);
        io_tokenizer *t = load_json(json);
        assert_true(io_tokenizer_lossless(t));
        size_t n = enc(t, "abc", 3, ids, NULL);
        EXPECT_IDS(ids, n, 258);
        n = enc(t, "abab", 4, ids, NULL);
        EXPECT_IDS(ids, n, 256, 256);
        n = enc(t, "cab", 3, ids, NULL);
        EXPECT_IDS(ids, n, 'c', 256);
        io_tokenizer_free(t);
        free(json);
    }
    /* "a b" first: ab + c, and no "ab c" merge */
    char *json = make_json("null", BYTELEVEL_NOSPLIT, vocab, "\"a b\", \"b c\", \"a bc\"", "", 0);
    io_tokenizer *t = load_json(json);
    size_t n = enc(t, "abc", 3, ids, NULL);
    EXPECT_IDS(ids, n, 256, 'c');
    /* three equal pairs: leftmost first */
    n = enc(t, "aaa", 3, ids, NULL);
    EXPECT_IDS(ids, n, 'a', 'a', 'a');
    io_tokenizer_free(t);
    free(json);
}

static void test_ignore_merges(void **state) {
    (void)state;
    uint32_t ids[64];
    /* "abcd" is in the vocabulary but no merge makes it */
    const char *vocab = "\"ab\": 256, \"cd\": 257, \"abcd\": 258";
    for (int ignore = 0; ignore < 2; ignore++) {
        char *json = make_json("null", BYTELEVEL_NOSPLIT, vocab, "\"a b\", \"c d\"", "", ignore);
        io_tokenizer *t = load_json(json);
        size_t n = enc(t, "abcd", 4, ids, NULL);
        if (ignore) EXPECT_IDS(ids, n, 258);
        else EXPECT_IDS(ids, n, 256, 257);
        io_tokenizer_free(t);
        free(json);
    }
}

static void test_added_tokens(void **state) {
    (void)state;
    uint32_t ids[64];
    const char *added =
        "{\"id\": 300, \"content\": \"<s>\", \"special\": true, \"normalized\": false},"
        "{\"id\": 301, \"content\": \"<s>x\", \"special\": true, \"normalized\": false},"
        "{\"id\": 302, \"content\": \"[L]\", \"lstrip\": true, \"rstrip\": true, \"normalized\": false},"
        "{\"id\": 303, \"content\": \"w\", \"single_word\": true, \"normalized\": false}";
    char *json = make_json("null", BYTELEVEL_NOSPLIT, "", "", added, 0);
    io_tokenizer *t = load_json(json);
    assert_false(io_tokenizer_lossless(t)); /* [L] strips the spaces beside it */
    size_t n = enc(t, "a<s>b", 5, ids, NULL);
    EXPECT_IDS(ids, n, 'a', 300, 'b');
    n = enc(t, "<s>x<s>", 7, ids, NULL); /* leftmost-longest */
    EXPECT_IDS(ids, n, 301, 300);
    n = enc(t, "a  [L]  b", 9, ids, "a[L]b"); /* the spaces go with [L] */
    EXPECT_IDS(ids, n, 'a', 302, 'b');
    n = enc(t, "aw w wa", 7, ids, NULL); /* "w" alone only between non-word characters */
    EXPECT_IDS(ids, n, 'a', 'w', ' ', 303, ' ', 'w', 'a');
    assert_int_equal(io_tokenizer_token_id(t, "<s>x", 4), 301);
    assert_int_equal(io_tokenizer_vocab_size(t), 10000);
    io_tokenizer_free(t);
    free(json);
}

static void test_normalize_and_prefix(void **state) {
    (void)state;
    uint32_t ids[64];
    /* NFC composes e + U+0301 to U+00E9 (bytes C3 A9); added tokens with normalized=false are
     * found before normalization */
    char *json = make_json("{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}]}",
                           BYTELEVEL_NOSPLIT, "", "",
                           "{\"id\": 300, \"content\": \"<s>\", \"special\": true}", 0);
    io_tokenizer *t = load_json(json);
    assert_false(io_tokenizer_lossless(t));
    size_t n = enc(t, "e\xCC\x81<s>", 6, ids, "\xC3\xA9<s>");
    EXPECT_IDS(ids, n, 0xC3, 0xA9, 300);
    io_tokenizer_free(t);
    free(json);
    /* ByteLevel add_prefix_space with its own split: " hi" " you" */
    json = make_json("null", "{\"type\": \"ByteLevel\", \"add_prefix_space\": true}",
                     "\"\\u0120h\": 256, \"\\u0120hi\": 257", "\"\\u0120 h\", \"\\u0120h i\"", "", 0);
    t = load_json(json);
    assert_false(io_tokenizer_lossless(t));
    n = enc(t, "hi hi", 5, ids, " hi hi");
    EXPECT_IDS(ids, n, 257, 257);
    io_tokenizer_free(t);
    free(json);
}

static void test_split_regex(void **state) {
    (void)state;
    uint32_t ids[64];
    /* Llama 3's pattern shape: digits in groups of 3, case-insensitive contractions, the
     * lookahead on whitespace; a merge never crosses a piece */
    const char *pre =
        "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
        "\"(?i:'s|'t)|\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+|\\\\s+(?!\\\\S)|\\\\s+\"}, "
        "\"behavior\": \"Isolated\", \"invert\": false}, " BYTELEVEL_NOSPLIT "]}";
    char *json = make_json("null", pre, "\"12\": 256, \"123\": 257, \"41\": 258, \"'S\": 259",
                           "\"1 2\", \"12 3\", \"4 1\", \"' S\"", "", 0);
    io_tokenizer *t = load_json(json);
    size_t n = enc(t, "12341", 5, ids, NULL);
    EXPECT_IDS(ids, n, 257, 258);
    n = enc(t, "IT'S", 4, ids, NULL);
    EXPECT_IDS(ids, n, 'I', 'T', 259);
    io_tokenizer_free(t);
    free(json);
}

/* Invalid UTF-8 is encoded byte by byte and decodes to the same bytes, whatever the regex or
 * normalizer. */
static void test_invalid_utf8(void **state) {
    (void)state;
    uint32_t ids[64];
    char *json = make_json("{\"type\": \"NFC\"}",
                           "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}", "", "", "", 0);
    io_tokenizer *t = load_json(json);
    const char text[] = "a\xFF\xFE b\xC3 \xE2\x82 e\xCC\x81\xED\xA0\x80";
    size_t n = enc(t, text, sizeof text - 1, ids, NULL);
    assert_int_equal(n, sizeof text - 1);
    io_tokenizer_free(t);
    free(json);
}

/* Encoding on several threads in chunks equals encoding the whole text at once: with a
 * tokenizer that allows cuts, and with one whose lstrip added token would take the newline of a
 * cut into its match (it must not be cut). */
static void parallel_case(const char *added, int can_cut) {
    char *json = make_json("null", "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}",
                           "\"th\": 256, \"the\": 257, \"\\u0120t\": 258, \"\\u0120th\": 259, "
                           "\"\\u0120the\": 260",
                           "\"t h\", \"th e\", \"\\u0120 t\", \"\\u0120t h\", \"\\u0120th e\"", added,
                           0);
    io_tokenizer *t = load_json(json);
    assert_int_equal(io_tokenizer_can_cut(t), can_cut);
    size_t n = 3u << 20;
    unsigned char *text = malloc(n);
    uint64_t s = 1;
    static const char *const words[] = {"the", " the", "\n", "\n\n", " x", "\r\n", "  ", "é",
                                        "Xy"};
    for (size_t i = 0; i < n;) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const char *w = words[(s >> 33) % 9];
        for (size_t k = 0; w[k] && i < n; k++) text[i++] = (unsigned char)w[k];
    }
    char err[512];
    io_ids one = {0}, many = {0};
    io_tok_enc *e = io_tok_enc_new(t);
    if (io_tok_encode(e, text, n, &one, err, sizeof err)) fail_msg("%s", err);
    if (io_tokenizer_encode_parallel(t, text, n, 3, &many, NULL, NULL, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(one.n, many.n);
    assert_memory_equal(one.ids, many.ids, one.n * sizeof *one.ids);
    io_ids_free(&one), io_ids_free(&many);
    io_tok_enc_free(e);
    free(text);
    io_tokenizer_free(t);
    free(json);
}

static void test_parallel(void **state) {
    (void)state;
    parallel_case("", 1);
    parallel_case("{\"id\": 300, \"content\": \"Xy\", \"lstrip\": true, \"normalized\": false}", 0);
}

static void expect_error(const char *json, const char *needle) {
    char err[1024] = "";
    io_tokenizer *t = io_tokenizer_from_json(json, strlen(json), "t.json", err, sizeof err);
    if (t) fail_msg("accepted a file that should fail with \"%s\"", needle);
    ASSERT_CONTAINS(err, "t.json");
    ASSERT_CONTAINS(err, needle);
}

/* make_json's file (merges not ignored) fails to load with a message naming needle. */
static void expect_json_error(const char *normalizer, const char *pre, const char *vocab, const char *merges,
                              const char *added, const char *needle) {
    char *j = make_json(normalizer, pre, vocab, merges, added, 0);
    expect_error(j, needle);
    free(j);
}

static void test_bad_files(void **state) {
    (void)state;
    expect_error("{\"model\": ", "t.json:1:");
    expect_error("[]", "a tokenizer.json holds an object");
    expect_json_error("{\"type\": \"Lowercase\"}", BYTELEVEL_NOSPLIT, "", "", "",
                      "normalizer type 'Lowercase' is not supported");
    expect_json_error("null", "{\"type\": \"Whitespace\"}", "", "", "",
                      "pre-tokenizer type 'Whitespace' is not supported");
    expect_json_error("null", "null", "", "", "", "not a byte-level BPE tokenizer");
    expect_json_error("null", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                      "\"pattern\": {\"Regex\": \"(a\"}, \"behavior\": \"Isolated\"}, "
                      BYTELEVEL_NOSPLIT "]}", "", "", "",
                      "the pattern does not compile");
    expect_json_error("null", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                      "\"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Removed\"}, "
                      BYTELEVEL_NOSPLIT "]}", "", "", "",
                      "behavior \"Isolated\"");
    expect_json_error("null", BYTELEVEL_NOSPLIT, "", "\"a zz\"", "",
                      "merge \"a\" + \"zz\": its right part is not in the vocabulary");
    expect_json_error("null", BYTELEVEL_NOSPLIT, "", "\"a b c\"", "", "two tokens separated by one space");
    expect_json_error("null", BYTELEVEL_NOSPLIT, "\"zz\": 5", "", "",
                      "id 5 is given to two vocabulary entries");
    expect_json_error("null", BYTELEVEL_NOSPLIT, "\"zz\": 4000000000", "", "",
                      "id 4000000000 is far beyond the 258 entries");
    expect_json_error("null", BYTELEVEL_NOSPLIT, "\"zz\": -1", "", "", "a token id must be a whole number");
    expect_json_error("null", BYTELEVEL_NOSPLIT, "", "", "{\"id\": 300}",
                      "an added token needs \"id\" and \"content\"");
    expect_error("{\"pre_tokenizer\": " BYTELEVEL_NOSPLIT ", \"model\": 5}", "\"model\" must be an object");
    expect_error("{\"pre_tokenizer\": " BYTELEVEL_NOSPLIT "}", "t.json: no \"model\"");
    expect_error("{\"pre_tokenizer\": " BYTELEVEL_NOSPLIT ", \"model\": {\"type\": \"WordPiece\"}}",
                 "model type 'WordPiece' is not supported");
    expect_error("{\"pre_tokenizer\": " BYTELEVEL_NOSPLIT ", \"model\": {\"vocab\": {\"a\": 0}, "
                 "\"merges\": []}}", "not a byte-level vocabulary: byte 0x00");
}

static void test_gpt2_files(void **state) {
    (void)state;
    char vocab[32768];
    size_t n = (size_t)snprintf(vocab, sizeof vocab, "{");
    for (unsigned b = 0; b < 256; b++) {
        unsigned cp = byte_cp(b);
        if (cp == '"' || cp == '\\') n += (size_t)snprintf(vocab + n, sizeof vocab - n, "\"\\%c\": %u, ", cp, b);
        else n += (size_t)snprintf(vocab + n, sizeof vocab - n, "\"\\u%04x\": %u, ", cp, b);
    }
    snprintf(vocab + n, sizeof vocab - n, "\"\\u0120t\": 256, \"<|endoftext|>\": 257}");
    write_file(tmp_path("vocab.json"), vocab, strlen(vocab));
    const char merges[] = "#version: 0.2\n\xC4\xA0 t\n";
    write_file(tmp_path("merges.txt"), merges, sizeof merges - 1);
    char err[1024];
    io_tokenizer *t = io_tokenizer_load(g_dir, err, sizeof err);
    if (!t) fail_msg("%s", err);
    uint32_t ids[64];
    /* no text is special, no prefix space */
    size_t k = enc(t, "<|endoftext|> t", 15, ids, NULL);
    EXPECT_IDS(ids, k, '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>', 256);
    io_tokenizer_free(t);
    const char bad[] = "#version: 0.2\n\xC4\xA0 t\nq\n";
    write_file(tmp_path("merges.txt"), bad, sizeof bad - 1);
    assert_null(io_tokenizer_load(g_dir, err, sizeof err));
    ASSERT_CONTAINS(err, "merges.txt:3: a merge line must be two tokens");
    assert_null(io_tokenizer_load(tmp_path("nothing_here"), err, sizeof err));
    ASSERT_CONTAINS(err, "nothing_here: no such tokenizer file or directory");
}

static void test_decode_errors(void **state) {
    (void)state;
    char *json = make_json("null", BYTELEVEL_NOSPLIT, "", "", "", 0);
    io_tokenizer *t = load_json(json);
    uint32_t ids[] = {'a', 5000};
    unsigned char *out;
    size_t len;
    char err[512];
    assert_int_equal(io_tokenizer_decode(t, ids, 2, &out, &len, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "id 5000 (at position 1) is not in the vocabulary");
    io_tokenizer_free(t);
    free(json);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merges_by_rank),     cmocka_unit_test(test_ignore_merges),
        cmocka_unit_test(test_added_tokens),       cmocka_unit_test(test_normalize_and_prefix),
        cmocka_unit_test(test_split_regex),        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_parallel),           cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_gpt2_files),         cmocka_unit_test(test_decode_errors),
    };
    return cmocka_run_group_tests(tests, io_fixture_setup, io_fixture_teardown);
}
