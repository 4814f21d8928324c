/* The safetensors reader (io/safetensors.c): a well-formed file reads back in every float dtype,
 * and malformed files are refused with a message naming the file and the tensor at fault. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

#include "tests/io_fixture.h"

/* Writes 8-byte length + header + data bytes to g_dir/name; returns its path. hlen_override
 * (when not 0) replaces the true header length. */
static const char *make(const char *name, const char *header, const void *data, size_t n,
                        uint64_t hlen_override) {
    size_t h = strlen(header);
    uint64_t len = hlen_override ? hlen_override : h;
    unsigned char *buf = malloc(8 + h + n + 1);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(len >> (8 * i));
    memcpy(buf + 8, header, h);
    if (n) memcpy(buf + 8 + h, data, n);
    const char *p = tmp_path(name);
    write_file(p, buf, 8 + h + n);
    free(buf);
    return p;
}

/* st_open of path must fail with a message holding each of the given words (NULL-terminated). */
static void refused(const char *path, ...) {
    st_file f;
    char err[1024] = "";
    assert_int_equal(st_open(path, &f, err, sizeof err), -1);
    ASSERT_CONTAINS(err, path);
    va_list ap;
    va_start(ap, path);
    for (const char *w; (w = va_arg(ap, const char *));) ASSERT_CONTAINS(err, w);
    va_end(ap);
}

static void test_reads_every_float_dtype(void **state) {
    (void)state;
    /* 1.5 and -2 in F32, BF16, F16, F64; a half subnormal (2^-24) and 65504 (the largest half) */
    unsigned char data[8 + 4 + 8 + 16];
    float f32[2] = {1.5f, -2.0f};
    double f64[2] = {0.25, 3.0};
    memcpy(data, f32, 8);
    const unsigned char bf[4] = {0xc0, 0x3f, 0x00, 0xc0}; /* 1.5, -2 */
    memcpy(data + 8, bf, 4);
    const unsigned char hf[8] = {0x00, 0x3e, 0x00, 0xc0, 0x01, 0x00, 0xff, 0x7b}; /* 1.5, -2, 2^-24, 65504 */
    memcpy(data + 12, hf, 8);
    memcpy(data + 20, f64, 16);
    const char *p = make("ok.safetensors",
                         "{\"__metadata__\":{\"format\":\"pt\"},"
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                         "\"b\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[8,12]},"
                         "\"c\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[12,20]},"
                         "\"d\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[20,36]},"
                         "\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[36,36]}}  ",
                         data, sizeof data, 0);
    st_file f;
    char err[1024];
    assert_int_equal(st_open(p, &f, err, sizeof err), 0);
    assert_int_equal(f.n, 5);
    float out[4];
    const st_tensor *t = st_find(&f, "a");
    assert_non_null(t);
    assert_int_equal(st_read_f32(&f, t, out, err, sizeof err), 0);
    assert_true(out[0] == 1.5f && out[1] == -2.0f);
    t = st_find(&f, "b");
    assert_int_equal(t->ndim, 2);
    assert_int_equal(st_read_f32(&f, t, out, err, sizeof err), 0);
    assert_true(out[0] == 1.5f && out[1] == -2.0f);
    t = st_find(&f, "c");
    assert_int_equal(st_read_f32(&f, t, out, err, sizeof err), 0);
    assert_true(out[0] == 1.5f && out[1] == -2.0f && out[2] == ldexpf(1.0f, -24) && out[3] == 65504.0f);
    t = st_find(&f, "d");
    assert_int_equal(st_read_f32(&f, t, out, err, sizeof err), 0);
    assert_true(out[0] == 0.25f && out[1] == 3.0f);
    t = st_find(&f, "e");
    assert_int_equal(t->numel, 0);
    assert_int_equal(st_read_f32(&f, t, out, err, sizeof err), 0);
    assert_null(st_find(&f, "__metadata__"));
    st_close(&f);
}

static void test_refuses_malformed_files(void **state) {
    (void)state;
    unsigned char data[64] = {0};
    const char *T1 = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    /* header length past the end of the file */
    refused(make("hlen.st", T1, data, 16, 1000), "header length 1000", "past the end", NULL);
    /* shorter than the length prefix */
    write_file(tmp_path("tiny.st"), "abc", 3);
    refused(tmp_path("tiny.st"), "too short", NULL);
    /* truncated data: the tensor runs past the end */
    refused(make("trunc.st", T1, data, 10, 0), "tensor 'w'", "past the end of the data", "truncated", NULL);
    /* shape and size disagree */
    refused(make("size.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", data, 16, 0),
            "tensor 'w'", "shape [3] is 12 bytes of F32", "give 16", NULL);
    /* overlapping tensors */
    refused(make("overlap.st",
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", data, 16, 0),
            "'a' and 'b' overlap", NULL);
    /* unknown dtype */
    refused(make("dtype.st", "{\"w\":{\"dtype\":\"F12\",\"shape\":[4],\"data_offsets\":[0,16]}}", data, 16, 0),
            "tensor 'w'", "unknown dtype 'F12'", NULL);
    /* a gap, and bytes after the last tensor */
    refused(make("gap.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", data, 16, 0),
            "bytes 0..8", "belong to no tensor", NULL);
    refused(make("tail.st", T1, data, 20, 0), "holds 20 bytes", "end at byte 16", NULL);
    /* begin after end, offsets and shapes that are not integers, overflow */
    refused(make("rev.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,0]}}", data, 16, 0),
            "tensor 'w'", "end before they begin", NULL);
    refused(make("neg.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", data, 16, 0),
            "tensor 'w'", "shape[0]", NULL);
    refused(make("frac.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16.5]}}", data, 16, 0),
            "tensor 'w'", "data_offsets", NULL);
    refused(make("ovf.st", "{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,16]}}",
                 data, 16, 0),
            "tensor 'w'", "overflows", NULL);
    /* not JSON, not an object, fields missing or unknown, metadata not strings */
    refused(make("json.st", "{\"w\":", data, 0, 0), "(in the header)", NULL);
    refused(make("arr.st", "[1, 2]", data, 0, 0), "not a JSON object", NULL);
    refused(make("nofield.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4]}}", data, 16, 0),
            "tensor 'w'", "missing field 'data_offsets'", NULL);
    refused(make("extra.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16],\"x\":1}}", data, 16, 0),
            "tensor 'w'", "unknown field 'x'", NULL);
    refused(make("meta.st", "{\"__metadata__\":{\"a\":1}}", data, 0, 0), "__metadata__", NULL);
    /* a missing file */
    refused(tmp_path("missing.st"), "No such file", NULL);
}

/* A dtype the reader does not convert, and a NaN, are refused when read, naming the tensor. */
static void test_read_refusals(void **state) {
    (void)state;
    unsigned char data[8] = {1, 0, 0, 0, 0, 0, 0xc0, 0x7f};
    const char *p = make("read.st",
                         "{\"i\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                         "\"n\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", data, 8, 0);
    st_file f;
    char err[1024];
    float out[1];
    assert_int_equal(st_open(p, &f, err, sizeof err), 0);
    assert_int_equal(st_read_f32(&f, st_find(&f, "i"), out, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "tensor 'i' has dtype I32");
    assert_int_equal(st_read_f32(&f, st_find(&f, "n"), out, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "tensor 'n' holds NaN");
    st_close(&f);
    /* the same image parsed from memory (what the fuzz harness does) */
    unsigned char img[8 + 200];
    const char *h = "{\"n\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    size_t hl = strlen(h);
    memset(img, 0, sizeof img);
    img[0] = (unsigned char)hl;
    memcpy(img + 8, h, hl);
    assert_int_equal(st_parse(img, 8 + hl + 4, "mem", &f, err, sizeof err), 0);
    assert_int_equal(f.n, 1);
    st_close(&f);
    assert_int_equal(st_parse(img, 8 + hl + 3, "mem", &f, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "mem: tensor 'n'");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_every_float_dtype),
        cmocka_unit_test(test_refuses_malformed_files),
        cmocka_unit_test(test_read_refusals),
    };
    return cmocka_run_group_tests(tests, io_fixture_setup, io_fixture_teardown);
}
