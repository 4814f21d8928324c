/* Reading input files: plain and gzip text, the byte tokenizer, refusing what is not a regular file. */
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

#include "io/json.h"
#include "io/tokens.h"

#include "tests/io_fixture.h"

static void test_text_plain_and_gzip(void **state) {
    (void)state;
    static unsigned char text[50000];
    size_t n = sample_text(text, sizeof text);
    write_file(tmp_path("t.txt"), text, n);
    write_gzip(tmp_path("t.txt.gz"), text, n);
    write_gzip(tmp_path("t_gz_no_suffix"), text, n);

    char err[512];
    const char *paths[] = {tmp_path("t.txt"), tmp_path("t.txt.gz"), tmp_path("t_gz_no_suffix")};
    for (int i = 0; i < 3; i++) {
        unsigned char *got;
        size_t len;
        if (io_text_read(paths[i], &got, &len, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(len, n);
        assert_memory_equal(got, text, n);
        free(got);
    }

    /* a gzip file cut short is an error, not a short corpus */
    FILE *f = fopen(tmp_path("t.txt.gz"), "rb");
    static unsigned char gz[60000];
    size_t gz_len = fread(gz, 1, sizeof gz, f);
    fclose(f);
    write_file(tmp_path("cut.txt.gz"), gz, gz_len / 2);
    unsigned char *got = NULL;
    size_t len;
    assert_int_equal(io_text_read(tmp_path("cut.txt.gz"), &got, &len, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "cut.txt.gz: ");
    ASSERT_CONTAINS(err, "gzip");
    gz[gz_len / 2] ^= 0xFF; /* corrupt the deflate stream in the middle */
    write_file(tmp_path("bad.txt.gz"), gz, gz_len);
    assert_int_equal(io_text_read(tmp_path("bad.txt.gz"), &got, &len, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "bad.txt.gz: ");

    assert_int_equal(io_text_read(tmp_path("absent.txt"), &got, &len, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "absent.txt: cannot open: No such file or directory");

    /* byte tokenizer */
    int toks[300];
    unsigned char back[300];
    io_byte_encode(text, 300, toks);
    for (int i = 0; i < 256; i++) assert_int_equal(toks[i], i);
    assert_int_equal(io_byte_decode(toks, 300, back), 0);
    assert_memory_equal(back, text, 300);
    toks[5] = 256;
    assert_int_equal(io_byte_decode(toks, 300, back), -1);
}

/* Inputs that are not regular files are refused before anything waits on them: a named pipe
 * without a writer used to block open() forever. alarm turns such a hang into a failure. */
static void test_inputs_must_be_regular_files(void **state) {
    (void)state;
    char err[512];
    io_tokens t;
    unsigned char *bytes;
    size_t n;
    assert_int_equal(mkfifo(tmp_path("fifo.bin"), 0600), 0);
    assert_int_equal(mkfifo(tmp_path("fifo.txt"), 0600), 0);
    alarm(60);
    assert_int_equal(io_tokens_open(&t, tmp_path("fifo.bin"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "fifo.bin: not a regular file (a named pipe (FIFO))");
    assert_int_equal(io_tokens_open(&t, tmp_path("fifo.txt"), 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "fifo.txt: not a regular file (a named pipe (FIFO))");
    assert_int_equal(io_text_read(tmp_path("fifo.txt"), &bytes, &n, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "fifo.txt: not a regular file (a named pipe (FIFO))");
    assert_null(io_json_parse_file(tmp_path("fifo.txt"), err, sizeof err));
    ASSERT_CONTAINS(err, "fifo.txt: not a regular file (a named pipe (FIFO))");
    /* a character device read as text used to give an empty corpus */
    assert_int_equal(io_tokens_open(&t, "/dev/null", 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "/dev/null: not a regular file (a character device)");
    assert_null(io_json_parse_file("/dev/null", err, sizeof err));
    ASSERT_CONTAINS(err, "/dev/null: not a regular file (a character device)");
    /* and /dev/zero read as text never ended */
    assert_int_equal(io_text_read("/dev/zero", &bytes, &n, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "/dev/zero: not a regular file (a character device)");
    assert_null(io_json_parse_file(g_dir, err, sizeof err));
    ASSERT_CONTAINS(err, "not a regular file (a directory)");
    alarm(0);
    /* regular files still open, the gzip path included */
    write_file(tmp_path("plain.txt"), "hello", 5);
    assert_int_equal(io_text_read(tmp_path("plain.txt"), &bytes, &n, err, sizeof err), 0);
    assert_int_equal(n, 5);
    free(bytes);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_plain_and_gzip),
        cmocka_unit_test(test_inputs_must_be_regular_files),
    };
    return cmocka_run_group_tests(tests, io_fixture_setup, io_fixture_teardown);
}
