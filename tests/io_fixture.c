/* The io tests' temporary directory and files (io_fixture.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "tests/io_fixture.h"

char g_dir[64];

const char *tmp_path(const char *name) {
    static char buf[8][256];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 256, "%s/%s", g_dir, name);
    return p;
}

void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

size_t sample_text(unsigned char *buf, size_t cap) {
    size_t n = 0;
    for (int c = 0; c < 256; c++) buf[n++] = (unsigned char)c;
    const char *verse = "In the beginning God created the heaven and the earth. ";
    while (n + strlen(verse) <= cap) {
        memcpy(buf + n, verse, strlen(verse));
        n += strlen(verse);
    }
    return n;
}

void write_gzip(const char *path, const void *data, size_t n) {
    gzFile gz = gzopen(path, "wb9");
    assert_non_null(gz);
    assert_int_equal(gzwrite(gz, data, (unsigned)n), (int)n);
    assert_int_equal(gzclose(gz), Z_OK);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int io_fixture_setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/gdn_test_io_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

int io_fixture_teardown(void **state) {
    (void)state;
    return nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
