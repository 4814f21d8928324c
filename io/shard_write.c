/* Writing token shards (llm.c .bin format; version 1 uint16, version 2 uint32), atomically. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/tokens.h"

int io_shard_write(const char *path, int version, const void *tokens, int width, size_t n,
                   char *err, int err_len) {
    if (version != IO_SHARD_U16 && version != IO_SHARD_U32) {
        snprintf(err, (size_t)err_len, "%s: unknown shard version %d (1 = uint16, 2 = uint32)",
                 path, version);
        return -1;
    }
    if (n > IO_SHARD_MAX_TOKENS) {
        snprintf(err, (size_t)err_len,
                 "%s: %zu tokens is more than one shard holds (%u): use smaller shards", path, n,
                 IO_SHARD_MAX_TOKENS);
        return -1;
    }
    io_token_span in = {path, tokens, width, n};
    if (version == IO_SHARD_U16 && width == 4) /* check before creating anything */
        for (size_t i = 0; i < n; i++)
            if (io_span_at(&in, i) > 0xFFFF) {
                snprintf(err, (size_t)err_len,
                         "%s: token id %u at position %zu does not fit a uint16 shard "
                         "(version 1): write a uint32 shard (version 2)",
                         path, (unsigned)io_span_at(&in, i), i);
                return -1;
            }

    size_t tmp_len = strlen(path) + 5;
    char *tmp = malloc(tmp_len);
    if (!tmp) {
        snprintf(err, (size_t)err_len, "%s: out of memory", path);
        return -1;
    }
    snprintf(tmp, tmp_len, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        snprintf(err, (size_t)err_len, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    int32_t header[IO_SHARD_HEADER_INTS] = {IO_SHARD_MAGIC, version, (int32_t)n};
    int ok = fwrite(header, sizeof header, 1, f) == 1;

    /* convert in blocks so a large source needs no second full-size copy */
    enum { BLOCK = 1 << 16 };
    uint16_t *b16 = malloc(BLOCK * sizeof *b16);
    uint32_t *b32 = malloc(BLOCK * sizeof *b32);
    ok = ok && b16 && b32;
    for (size_t i = 0; ok && i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        if (version == IO_SHARD_U16) {
            for (size_t j = 0; j < m; j++) b16[j] = (uint16_t)io_span_at(&in, i + j);
            ok = fwrite(b16, sizeof *b16, m, f) == m;
        } else {
            for (size_t j = 0; j < m; j++) b32[j] = io_span_at(&in, i + j);
            ok = fwrite(b32, sizeof *b32, m, f) == m;
        }
    }
    free(b16);
    free(b32);
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved = errno;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        if (ok) saved = errno;
        snprintf(err, (size_t)err_len, "%s: write failed: %s", path, strerror(saved));
        unlink(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}
