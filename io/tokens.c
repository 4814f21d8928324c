/* Token sources: spec expansion (comma lists, globs), shard mapping and validation, text files. */
#include "io/tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/regular_file.h"
#include "model/check.h"

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Registers owned storage (mmap'ed when bytes > 0, else malloc'ed) and a span over it. */
static void add_span(io_tokens *t, const char *path, void *block, size_t map_bytes,
                     const unsigned char *data, int width, size_t n) {
    int k = t->n_blocks++;
    t->blocks = realloc(t->blocks, (size_t)t->n_blocks * sizeof *t->blocks);
    t->block_bytes = realloc(t->block_bytes, (size_t)t->n_blocks * sizeof *t->block_bytes);
    t->names = realloc(t->names, (size_t)t->n_blocks * sizeof *t->names);
    t->spans = realloc(t->spans, (size_t)(t->n_spans + 1) * sizeof *t->spans);
    if (!t->blocks || !t->block_bytes || !t->names || !t->spans)
        GDN_DIE("out of memory opening %s", path);
    t->blocks[k] = block;
    t->block_bytes[k] = map_bytes;
    t->names[k] = strdup(path);
    if (!t->names[k]) GDN_DIE("out of memory opening %s", path);
    t->spans[t->n_spans++] = (io_token_span){t->names[k], data, width, n};
    t->n_tokens += n;
}

/* Maps one shard after checking its header and its size against the header's count. */
static int open_shard(io_tokens *t, const char *path, char *err, int err_len) {
    int fd = io_open_regular(path, "token shard", err, err_len);
    if (fd < 0) return -1;
    struct stat st;
    int32_t h[IO_SHARD_HEADER_INTS];
    if (fstat(fd, &st) != 0) {
        snprintf(err, (size_t)err_len, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    size_t size = (size_t)st.st_size;
    if (size < IO_SHARD_HEADER_BYTES ||
        pread(fd, h, IO_SHARD_HEADER_BYTES, 0) != IO_SHARD_HEADER_BYTES) {
        snprintf(err, (size_t)err_len,
                 "%s: %zu bytes, shorter than the %d-byte token shard header: not a token shard "
                 "(or truncated)",
                 path, size, IO_SHARD_HEADER_BYTES);
        goto fail;
    }
    if (h[0] != IO_SHARD_MAGIC) {
        snprintf(err, (size_t)err_len,
                 "%s: bad magic %d in the shard header (expected %d): not a token shard in the "
                 "llm.c .bin format",
                 path, h[0], IO_SHARD_MAGIC);
        goto fail;
    }
    if (h[1] != IO_SHARD_U16 && h[1] != IO_SHARD_U32) {
        snprintf(err, (size_t)err_len,
                 "%s: unsupported shard version %d (expected %d = uint16 tokens or %d = uint32 "
                 "tokens)",
                 path, h[1], IO_SHARD_U16, IO_SHARD_U32);
        goto fail;
    }
    if (h[2] < 0) {
        snprintf(err, (size_t)err_len, "%s: negative token count %d in the shard header", path,
                 h[2]);
        goto fail;
    }
    int width = h[1] == IO_SHARD_U16 ? 2 : 4;
    size_t n = (size_t)h[2];
    size_t want = IO_SHARD_HEADER_BYTES + n * (size_t)width;
    if (size != want) {
        snprintf(err, (size_t)err_len,
                 "%s: the header says %zu tokens of %d bytes (%zu bytes in all) but the file has "
                 "%zu bytes: %s",
                 path, n, width, want, size,
                 size < want ? "truncated (an interrupted copy or write?)" : "trailing data");
        goto fail;
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        snprintf(err, (size_t)err_len, "%s: cannot map %zu bytes: %s", path, size,
                 strerror(errno));
        goto fail;
    }
    close(fd);
    add_span(t, path, map, size, (const unsigned char *)map + IO_SHARD_HEADER_BYTES, width, n);
    return 0;
fail:
    close(fd);
    return -1;
}

static int open_text(io_tokens *t, const char *path, char *err, int err_len) {
    unsigned char *bytes;
    size_t n;
    if (io_text_read(path, &bytes, &n, err, err_len)) return -1;
    int32_t magic = 0;
    if (n >= sizeof magic) memcpy(&magic, bytes, sizeof magic);
    if (magic == IO_SHARD_MAGIC) { /* e.g. a renamed or compressed shard: its bytes are not text */
        snprintf(err, (size_t)err_len,
                 "%s: starts with the token shard magic but is read as text because its name "
                 "does not end in .bin: rename (or decompress) it to NAME.bin",
                 path);
        free(bytes);
        return -1;
    }
    add_span(t, path, bytes, 0, bytes, 1, n);
    return 0;
}

static int open_item(io_tokens *t, const char *path, int *kind, char *err, int err_len) {
    int is_shard = ends_with(path, ".bin");
    if (*kind >= 0 && *kind != is_shard) {
        snprintf(err, (size_t)err_len,
                 "%s: cannot mix text files and token shards (.bin) in one token source", path);
        return -1;
    }
    *kind = is_shard;
    return is_shard ? open_shard(t, path, err, err_len) : open_text(t, path, err, err_len);
}

int io_tokens_open(io_tokens *t, const char *spec, int vocab_size, char *err, int err_len) {
    memset(t, 0, sizeof *t);
    char *copy = strdup(spec);
    if (!copy) GDN_DIE("out of memory");
    int kind = -1, rc = 0;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item && rc == 0;
         item = strtok_r(NULL, ",", &save)) {
        if (!strpbrk(item, "*?[")) {
            rc = open_item(t, item, &kind, err, err_len);
            continue;
        }
        glob_t g;
        int gr = glob(item, 0, NULL, &g);
        if (gr == GLOB_NOMATCH) {
            snprintf(err, (size_t)err_len, "%s: no file matches this pattern", item);
            rc = -1;
        } else if (gr != 0) {
            snprintf(err, (size_t)err_len, "%s: cannot expand the pattern (read error)", item);
            rc = -1;
        }
        for (size_t i = 0; gr == 0 && i < g.gl_pathc && rc == 0; i++)
            rc = open_item(t, g.gl_pathv[i], &kind, err, err_len);
        if (gr == 0 || gr == GLOB_NOMATCH) globfree(&g);
    }
    free(copy);
    if (rc == 0 && kind < 0) {
        snprintf(err, (size_t)err_len, "empty token source '%s': give a file, a pattern or a list",
                 spec);
        rc = -1;
    }
    t->is_text = kind == 0;
    if (rc == 0) rc = io_tokens_check_vocab(t, vocab_size, err, err_len);
    if (rc) io_tokens_close(t);
    return rc;
}

void io_tokens_wrap(io_tokens *t, const void *data, int width, size_t n, const char *name) {
    GDN_ASSERT(width == 1 || width == 2 || width == 4);
    memset(t, 0, sizeof *t);
    t->spans = GDN_MALLOC(sizeof *t->spans);
    t->spans[0] = (io_token_span){name, data, width, n};
    t->n_spans = 1;
    t->n_tokens = n;
    t->is_text = width == 1;
}

int io_tokens_check_vocab(const io_tokens *t, int vocab_size, char *err, int err_len) {
    for (int s = 0; s < t->n_spans; s++) {
        const io_token_span *sp = &t->spans[s];
        uint64_t type_max = sp->width == 4 ? 0xFFFFFFFFu : (1u << (8 * sp->width)) - 1;
        if (vocab_size > 0 && (uint64_t)vocab_size > type_max) continue; /* every value fits */
        for (size_t i = 0; i < sp->n; i++) {
            uint32_t id = io_span_at(sp, i);
            if (vocab_size > 0 && id < (uint32_t)vocab_size) continue;
            if (sp->width == 1)
                snprintf(err, (size_t)err_len,
                         "%s: byte %u at offset %zu is outside the vocabulary (vocab_size %d): "
                         "text goes through the byte tokenizer, which needs vocab_size >= %d",
                         sp->name, (unsigned)id, i, vocab_size, IO_BYTE_VOCAB);
            else
                snprintf(err, (size_t)err_len,
                         "%s: token id %u at position %zu is outside the vocabulary "
                         "(vocab_size %d): the shard was made with another tokenizer, or "
                         "vocab_size is too small",
                         sp->name, (unsigned)id, i, vocab_size);
            return -1;
        }
    }
    return 0;
}

void io_tokens_close(io_tokens *t) {
    for (int k = 0; k < t->n_blocks; k++) {
        if (t->block_bytes[k]) munmap(t->blocks[k], t->block_bytes[k]);
        else free(t->blocks[k]);
        free(t->names[k]);
    }
    free(t->blocks);
    free(t->block_bytes);
    free(t->names);
    free(t->spans);
    memset(t, 0, sizeof *t);
}

void io_span_copy(const io_token_span *s, size_t pos, size_t n, int *out) {
    GDN_ASSERT(pos <= s->n && n <= s->n - pos);
    for (size_t i = 0; i < n; i++) out[i] = (int)io_span_at(s, pos + i);
}
