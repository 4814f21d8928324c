/* io/safetensors_write: the file layout byte for byte, bf16 rounding, refused tensors, write
 * errors; and io_jw_float, which config.json's float fields go through. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/json.h"
#include "io/safetensors_write.h"

#include "tests/io_fixture.h"

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    b[len] = 0;
    *n = (size_t)len;
    return b;
}

/* w written to name in the test directory and freed; the file's bytes (n of them) and the
 * length of its JSON header (the first 8 bytes, little-endian). */
static unsigned char *write_read_back(stw_writer *w, const char *name, size_t *n, uint64_t *hlen) {
    char err[256];
    const char *path = tmp_path(name);
    if (stw_write(w, path, err, sizeof err)) fail_msg("write %s: %s", path, err);
    stw_free(w);
    unsigned char *f = read_all(path, n);
    *hlen = 0;
    for (int i = 0; i < 8; i++) *hlen |= (uint64_t)f[i] << (8 * i);
    return f;
}

static void test_layout_f32(void **state) {
    (void)state;
    char err[256];
    stw_writer *w = stw_create(STW_F32);
    const float a[6] = {1, -2, 0.5f, 3, 4, 5}, b[1] = {-0.0f};
    const int64_t sa[2] = {2, 3};
    assert_int_equal(stw_add(w, "a.weight", 2, sa, a, err, sizeof err), 0);
    assert_int_equal(stw_add(w, "b", 0, NULL, b, err, sizeof err), 0); /* a scalar */
    const int64_t sz[1] = {0};
    assert_int_equal(stw_add(w, "empty", 1, sz, NULL, err, sizeof err), 0);
    assert_int_equal(stw_count(w), 3);
    size_t n;
    uint64_t hlen;
    unsigned char *f = write_read_back(w, "a.safetensors", &n, &hlen);
    assert_int_equal(hlen % 8, 0);
    assert_int_equal(n, 8 + hlen + 6 * 4 + 4);
    char *header = malloc(hlen + 1);
    memcpy(header, f + 8, hlen);
    header[hlen] = 0;
    const char *want = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[24,28]},"
                       "\"empty\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[28,28]}}";
    assert_int_equal(strncmp(header, want, strlen(want)), 0);
    for (size_t i = strlen(want); i < hlen; i++) assert_int_equal(header[i], ' ');
    float got[7];
    memcpy(got, f + 8 + hlen, sizeof got); /* little-endian host */
    assert_memory_equal(got, a, sizeof a);
    assert_true(got[6] == 0.0f && signbit(got[6]));
    free(header);
    free(f);
}

static void test_bf16(void **state) {
    (void)state;
    assert_int_equal(stw_bf16_from_f32(1.0f), 0x3f80);
    assert_int_equal(stw_bf16_from_f32(-2.0f), 0xc000);
    /* halfway cases round to even: 1 + 2^-8 -> 1, 1 + 3 * 2^-8 -> 1 + 2^-6 */
    assert_int_equal(stw_bf16_from_f32(1.0f + 0x1p-8f), 0x3f80);
    assert_int_equal(stw_bf16_from_f32(1.0f + 3 * 0x1p-8f), 0x3f82);
    assert_int_equal(stw_bf16_from_f32(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81); /* above half: up */
    assert_int_equal(stw_bf16_from_f32(INFINITY), 0x7f80);
    assert_int_equal(stw_bf16_from_f32(-INFINITY), 0xff80);
    assert_int_equal(stw_bf16_from_f32(3.4028235e38f), 0x7f80); /* FLT_MAX rounds to inf */
    uint16_t nan = stw_bf16_from_f32(NAN);
    assert_true((nan & 0x7f80) == 0x7f80 && (nan & 0x7f) != 0);
    float tiny_nan; /* a NaN whose payload lives only in the low bits stays a NaN */
    uint32_t u = 0x7f800001u;
    memcpy(&tiny_nan, &u, 4);
    nan = stw_bf16_from_f32(tiny_nan);
    assert_true((nan & 0x7f80) == 0x7f80 && (nan & 0x7f) != 0);

    char err[256];
    stw_writer *w = stw_create(STW_BF16);
    const float x[3] = {1.0f, -3.0f, 0.1f};
    const int64_t s[1] = {3};
    assert_int_equal(stw_add(w, "x", 1, s, x, err, sizeof err), 0);
    size_t n;
    uint64_t hlen;
    unsigned char *f = write_read_back(w, "b.safetensors", &n, &hlen);
    assert_non_null(strstr((const char *)f + 8, "\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]"));
    assert_int_equal(n, 8 + hlen + 6);
    const unsigned char *d = f + 8 + hlen;
    assert_int_equal(d[0] | d[1] << 8, 0x3f80);
    assert_int_equal(d[2] | d[3] << 8, 0xc040);
    assert_int_equal(d[4] | d[5] << 8, 0x3dcd); /* 0.1 = 0x3dcccccd */
    free(f);
}

static void test_refused(void **state) {
    (void)state;
    char err[256];
    stw_writer *w = stw_create(STW_F32);
    const float x[2] = {1, 2};
    const int64_t s[1] = {2}, neg[1] = {-1};
    assert_int_equal(stw_add(w, "x", 1, s, x, err, sizeof err), 0);
    assert_int_equal(stw_add(w, "x", 1, s, x, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "tensor x added twice");
    assert_int_equal(stw_add(w, "__metadata__", 1, s, x, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "reserved");
    assert_int_equal(stw_add(w, "", 1, s, x, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "name");
    assert_int_equal(stw_add(w, "n", 1, neg, x, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "tensor n: dimension 0 is -1");
    assert_int_equal(stw_add(w, "r", STW_MAX_NDIM + 1, s, x, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "rank");
    assert_int_equal(stw_add(w, "d", 1, s, NULL, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "has no data");
    float *owned = malloc(2 * sizeof *owned); /* freed by the writer although refused */
    assert_int_equal(stw_add_owned(w, "x", 1, s, owned, err, sizeof err), -1);
    assert_int_equal(stw_count(w), 1);
    /* a directory that does not exist: an error naming the file, nothing left behind */
    const char *bad = tmp_path("no/such/dir/m.safetensors");
    assert_int_equal(stw_write(w, bad, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "no/such/dir/m.safetensors: cannot create");
    stw_free(w);
}

static void test_write_error_removes_file(void **state) {
    (void)state;
    if (access("/dev/full", W_OK)) skip();
    char err[256];
    stw_writer *w = stw_create(STW_F32);
    const float x[2] = {1, 2};
    const int64_t s[1] = {2};
    assert_int_equal(stw_add(w, "x", 1, s, x, err, sizeof err), 0);
    const char *link = tmp_path("full.safetensors");
    assert_int_equal(symlink("/dev/full", link), 0);
    assert_int_equal(stw_write(w, link, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "writing failed");
    assert_int_equal(access(link, F_OK), -1); /* the partial file (here the link) is removed */
    stw_free(w);
}

static void test_jw_float(void **state) {
    (void)state;
    io_jw w;
    io_jw_init(&w, 1);
    io_jw_begin_array(&w);
    const double v[] = {10000, 1e-6, 0.02, 0, -3, 1e21, 2.5};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) io_jw_float(&w, v[i]);
    io_jw_float(&w, NAN);
    io_jw_end_array(&w);
    assert_string_equal(io_jw_text(&w),
                        "[\n  10000.0,\n  1e-06,\n  0.02,\n  0.0,\n  -3.0,\n  1e+21,\n  2.5,\n  null\n]");
    io_jw_free(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_f32),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_write_error_removes_file),
        cmocka_unit_test(test_jw_float),
    };
    return cmocka_run_group_tests(tests, io_fixture_setup, io_fixture_teardown);
}
