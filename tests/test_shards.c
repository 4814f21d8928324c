/* Token shards: gdn data writes them, io_tokens reads them back; malformed shards are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/tokens.h"
#include "train/commands.h"

#include "tests/io_fixture.h"

/* Concatenates a source's tokens. */
static uint32_t *gather(const io_tokens *t) {
    uint32_t *all = malloc((t->n_tokens + 1) * sizeof *all);
    size_t k = 0;
    for (int s = 0; s < t->n_spans; s++)
        for (size_t i = 0; i < t->spans[s].n; i++) all[k++] = io_span_at(&t->spans[s], i);
    assert_int_equal(k, t->n_tokens);
    return all;
}

/* text -> gdn data -> shards -> tokens equal to the bytes; u16 and u32; several shards. */
static void test_shard_round_trip_via_gdn_data(void **state) {
    (void)state;
    static unsigned char text[40000];
    size_t n = sample_text(text, sizeof text);
    write_gzip(tmp_path("corpus.txt.gz"), text, n);
    const char *dtypes[] = {"u16", "u32"};
    for (int d = 0; d < 2; d++) {
        char in[256], out[256], val[64];
        snprintf(in, sizeof in, "--in=%s", tmp_path("corpus.txt.gz"));
        snprintf(out, sizeof out, "%s/rt_%s", g_dir, dtypes[d]);
        snprintf(val, sizeof val, "%d", 3001);
        char *argv[] = {"data", in, "--out", out, "--val-tokens", val, "--shard-tokens", "7000",
                        "--dtype", (char *)dtypes[d], NULL};
        assert_int_equal(gdn_cmd_data(10, argv), 0);

        char spec[600], err[512];
        snprintf(spec, sizeof spec, "%s_train_*.bin,%s_val_000000.bin", out, out);
        io_tokens t;
        if (io_tokens_open(&t, spec, 256, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(t.is_text, 0);
        assert_int_equal(t.n_spans, (int)((n - 3001 + 6999) / 7000) + 1);
        assert_int_equal(t.n_tokens, n);
        assert_int_equal(t.spans[0].width, d == 0 ? 2 : 4);
        assert_int_equal(t.spans[0].n, 7000);
        assert_int_equal(t.spans[t.n_spans - 1].n, 3001);
        uint32_t *all = gather(&t);
        for (size_t i = 0; i < n; i++)
            if (all[i] != text[i]) fail_msg("token %zu: %u, byte %u", i, all[i], text[i]);
        free(all);
        io_tokens_close(&t);
    }

    /* the text itself as a source: one width-1 span */
    io_tokens t;
    char err[512];
    if (io_tokens_open(&t, tmp_path("corpus.txt.gz"), 256, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(t.is_text, 1);
    assert_int_equal(t.n_tokens, n);
    assert_memory_equal(t.spans[0].data, text, n);
    io_tokens_close(&t);
}

static void test_shard_u32_round_trip(void **state) {
    (void)state;
    enum { N = 5000 };
    static uint32_t tok[N];
    for (uint32_t i = 0; i < N; i++) tok[i] = (i * 2654435761u) % 2147483647u; /* up to 2^31-2 */
    tok[0] = 0;
    tok[1] = 65536;
    tok[2] = 2147483646u;
    char err[512];
    const char *path = tmp_path("big_vocab.bin");
    assert_int_equal(io_shard_write(path, IO_SHARD_U32, tok, 4, N, err, sizeof err), 0);
    io_tokens t;
    if (io_tokens_open(&t, path, 2147483647, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(t.spans[0].width, 4);
    uint32_t *all = gather(&t);
    assert_memory_equal(all, tok, sizeof tok);
    free(all);
    io_tokens_close(&t);

    /* a vocabulary too small for them is caught at the first offending token */
    assert_int_equal(io_tokens_open(&t, path, 65536, err, sizeof err), -1);
    size_t first = 0;
    while (tok[first] < 65536) first++;
    char want[128];
    snprintf(want, sizeof want, "token id %u at position %zu is outside the vocabulary "
                                "(vocab_size 65536)", tok[first], first);
    ASSERT_CONTAINS(err, "big_vocab.bin: ");
    ASSERT_CONTAINS(err, want);

    /* uint16 shards cannot hold them, and nothing is written */
    const char *p16 = tmp_path("too_big_for_u16.bin");
    assert_int_equal(io_shard_write(p16, IO_SHARD_U16, tok, 4, N, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "token id 65536 at position 1 does not fit a uint16 shard");
    assert_int_equal(access(p16, F_OK), -1);

    /* uint16 shard of 16-bit tokens */
    static uint16_t t16[N];
    for (int i = 0; i < N; i++) t16[i] = (uint16_t)(i * 13);
    assert_int_equal(io_shard_write(p16, IO_SHARD_U16, t16, 2, N, err, sizeof err), 0);
    if (io_tokens_open(&t, p16, 65536, err, sizeof err)) fail_msg("%s", err);
    for (int i = 0; i < N; i++) assert_int_equal(io_span_at(&t.spans[0], (size_t)i), t16[i]);
    io_tokens_close(&t);
}

/* A hand-made shard: header fields as given, count_tokens uint16 tokens of value fill. */
static void raw_shard(const char *path, int32_t magic, int32_t version, int32_t count,
                      size_t n_tokens, uint16_t fill) {
    size_t bytes = IO_SHARD_HEADER_BYTES + 2 * n_tokens;
    unsigned char *b = calloc(1, bytes);
    int32_t h[3] = {magic, version, count};
    memcpy(b, h, sizeof h);
    for (size_t i = 0; i < n_tokens; i++) memcpy(b + IO_SHARD_HEADER_BYTES + 2 * i, &fill, 2);
    write_file(path, b, bytes);
    free(b);
}

static void test_shard_errors(void **state) {
    (void)state;
    char err[512];
    io_tokens t;
    raw_shard(tmp_path("magic.bin"), 20240326, 1, 10, 10, 1);
    assert_int_equal(io_tokens_open(&t, tmp_path("magic.bin"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "magic.bin: bad magic 20240326 in the shard header (expected 20240520)");

    raw_shard(tmp_path("version.bin"), IO_SHARD_MAGIC, 3, 10, 10, 1);
    assert_int_equal(io_tokens_open(&t, tmp_path("version.bin"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "version.bin: unsupported shard version 3 (expected 1 = uint16 tokens or "
                         "2 = uint32 tokens)");

    raw_shard(tmp_path("trunc.bin"), IO_SHARD_MAGIC, 1, 100, 60, 1);
    assert_int_equal(io_tokens_open(&t, tmp_path("trunc.bin"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "trunc.bin: the header says 100 tokens of 2 bytes (1224 bytes in all) "
                         "but the file has 1144 bytes: truncated");

    raw_shard(tmp_path("long.bin"), IO_SHARD_MAGIC, 1, 10, 11, 1);
    assert_int_equal(io_tokens_open(&t, tmp_path("long.bin"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "long.bin: the header says 10 tokens");
    ASSERT_CONTAINS(err, "trailing data");

    raw_shard(tmp_path("neg.bin"), IO_SHARD_MAGIC, 1, -5, 0, 1);
    assert_int_equal(io_tokens_open(&t, tmp_path("neg.bin"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "neg.bin: negative token count -5");

    write_file(tmp_path("tiny.bin"), "abc", 3);
    assert_int_equal(io_tokens_open(&t, tmp_path("tiny.bin"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "tiny.bin: 3 bytes, shorter than the 1024-byte token shard header");

    /* token id >= vocab: named with the file and its position */
    uint16_t toks[50];
    for (int i = 0; i < 50; i++) toks[i] = (uint16_t)(i * 5);
    assert_int_equal(io_shard_write(tmp_path("vocab.bin"), 1, toks, 2, 50, err, sizeof err), 0);
    assert_int_equal(io_tokens_open(&t, tmp_path("vocab.bin"), 200, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "vocab.bin: token id 200 at position 40 is outside the vocabulary "
                         "(vocab_size 200)");
    if (io_tokens_open(&t, tmp_path("vocab.bin"), 246, err, sizeof err)) fail_msg("%s", err);
    io_tokens_close(&t);

    /* text needs the byte vocabulary */
    write_file(tmp_path("hi.txt"), "ok \xC3\xA9", 5);
    assert_int_equal(io_tokens_open(&t, tmp_path("hi.txt"), 128, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "hi.txt: byte 195 at offset 3 is outside the vocabulary (vocab_size 128)");

    assert_int_equal(io_tokens_open(&t, tmp_path("absent.bin"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "absent.bin: cannot open token shard: No such file or directory");
    char spec[512];
    snprintf(spec, sizeof spec, "%s/nothing_*.bin", g_dir);
    assert_int_equal(io_tokens_open(&t, spec, 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "nothing_*.bin: no file matches this pattern");
    snprintf(spec, sizeof spec, "%s,%s", tmp_path("vocab.bin"), tmp_path("hi.txt"));
    assert_int_equal(io_tokens_open(&t, spec, 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "hi.txt: cannot mix text files and token shards");
    assert_int_equal(io_tokens_open(&t, ",", 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "empty token source");
    /* a shard that is not named .bin would be read as text: refused */
    FILE *f = fopen(tmp_path("vocab.bin"), "rb");
    static unsigned char raw[2048];
    size_t raw_n = fread(raw, 1, sizeof raw, f);
    fclose(f);
    write_gzip(tmp_path("vocab.bin.gz"), raw, raw_n);
    assert_int_equal(io_tokens_open(&t, tmp_path("vocab.bin.gz"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "vocab.bin.gz: starts with the token shard magic but is read as text");
    snprintf(spec, sizeof spec, "%s/adir.bin", g_dir);
    assert_int_equal(mkdir(spec, 0700), 0);
    assert_int_equal(io_tokens_open(&t, spec, 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "adir.bin: not a regular file");
    assert_int_equal(mkdir(tmp_path("adir.txt"), 0700), 0);
    assert_int_equal(io_tokens_open(&t, tmp_path("adir.txt"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "adir.txt: not a regular file (a directory)");

    /* a failed open leaves nothing to close, and a good file before a bad one is released */
    snprintf(spec, sizeof spec, "%s,%s", tmp_path("vocab.bin"), tmp_path("magic.bin"));
    assert_int_equal(io_tokens_open(&t, spec, 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "magic.bin: bad magic");
    assert_int_equal(t.n_spans, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_round_trip_via_gdn_data),
        cmocka_unit_test(test_shard_u32_round_trip),
        cmocka_unit_test(test_shard_errors),
    };
    return cmocka_run_group_tests(tests, io_fixture_setup, io_fixture_teardown);
}
