/* libFuzzer harness: the safetensors header parser and its checks (io/safetensors.c).
 *
 * The input is a whole file image (8-byte header length, JSON header, data). A rejected input
 * must come with a message naming the source. An accepted one must describe the image exactly:
 * every tensor's bytes inside the data buffer, its size the product of its shape times its
 * element size, no two tensors overlapping, the tensors covering the buffer; and every float
 * tensor converts from the image without reading outside it. Any crash, leak, sanitizer report
 * or broken invariant is a failure. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "model/check.h"
#include "tests/fuzz/fuzz_common.h"

FUZZ_PLAIN_INIT

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_file f;
    char err[1024];
    err[0] = 0;
    if (st_parse(data, size, "fuzz.safetensors", &f, err, sizeof err)) {
        CHECK(strncmp(err, "fuzz.safetensors", 16) == 0);
        return 0;
    }
    CHECK(f.data_start >= 8 && f.data_start <= size && f.file_size == size);
    const uint64_t data_len = size - f.data_start;
    uint64_t covered = 0;
    for (int i = 0; i < f.n; i++) {
        const st_tensor *t = &f.t[i];
        CHECK(t->begin <= t->end && t->end <= data_len);
        CHECK(t->numel * st_dtype_size(t->dtype) == t->end - t->begin);
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= (uint64_t)t->shape[d];
        CHECK(numel == t->numel);
        CHECK(st_find(&f, t->name) != NULL);
        covered += t->end - t->begin;
        for (int j = 0; j < i; j++) /* no overlap (only tensors with bytes can overlap) */
            CHECK(t->begin == t->end || f.t[j].begin == f.t[j].end || t->end <= f.t[j].begin ||
                  f.t[j].end <= t->begin);
        float *out = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *out);
        CHECK(out != NULL);
        int rc = st_convert_f32(t->dtype, data + f.data_start + t->begin, t->numel, out);
        CHECK(rc == 0 || !(t->dtype == ST_F32 || t->dtype == ST_F16 || t->dtype == ST_BF16 || t->dtype == ST_F64));
        free(out);
    }
    CHECK(covered == data_len);
    st_close(&f);
    return 0;
}
