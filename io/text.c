/* Text input: whole files, plain or gzip-compressed, and the byte-level tokenizer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/regular_file.h"
#include "io/tokens.h"
#include "model/check.h"

/* Grows *buf so that at least `more` bytes fit after *len (keeping room for a terminator):
 * to len + more + 1 bytes when *cap is 0 (a size known in advance), else by doubling. */
static void reserve(unsigned char **buf, size_t *cap, size_t len, size_t more, const char *path) {
    if (len + more + 1 <= *cap) return;
    size_t c = *cap ? *cap : len + more + 1;
    while (c < len + more + 1) c *= 2;
    unsigned char *b = realloc(*buf, c);
    if (!b) GDN_DIE("out of memory reading %s (%zu bytes)", path, c);
    *buf = b;
    *cap = c;
}

/* zlib's message without the "PATH: " it puts in front. */
static const char *gz_message(gzFile gz, const char *path, int *code) {
    const char *msg = gzerror(gz, code);
    size_t n = strlen(path);
    if (strncmp(msg, path, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ') msg += n + 2;
    return msg;
}

/* Reads the gzip stream on fd (which it closes). */
static int read_gzip(int fd, const char *path, unsigned char **out, size_t *out_len, char *err,
                     int err_len) {
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        snprintf(err, (size_t)err_len, "%s: cannot read: out of memory", path);
        close(fd);
        return -1;
    }
    gzbuffer(gz, 1 << 17);
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        reserve(&buf, &cap, len, 1 << 16, path); /* doubling: reads grow with the output */
        size_t room = cap - len - 1;
        int n = gzread(gz, buf + len, room < (1u << 30) ? (unsigned)room : 1u << 30);
        if (n < 0) {
            int code;
            const char *msg = gz_message(gz, path, &code);
            snprintf(err, (size_t)err_len,
                     "%s: corrupt gzip data after %zu uncompressed bytes (%s)", path, len, msg);
            free(buf);
            gzclose(gz);
            return -1;
        }
        if (n == 0) break;
        len += (size_t)n;
    }
    /* zlib reports a stream cut short only as a non-fatal Z_BUF_ERROR at the end */
    int code;
    const char *msg = gz_message(gz, path, &code);
    if (code != Z_OK) {
        snprintf(err, (size_t)err_len,
                 "%s: the gzip stream ends early, after %zu uncompressed bytes (%s): the file is "
                 "truncated",
                 path, len, msg);
        free(buf);
        gzclose(gz);
        return -1;
    }
    gzclose(gz);
    reserve(&buf, &cap, len, 0, path);
    buf[len] = 0;
    *out = buf;
    *out_len = len;
    return 0;
}

int io_text_read(const char *path, unsigned char **bytes, size_t *len, char *err, int err_len) {
    int fd = io_open_regular(path, NULL, err, err_len);
    if (fd < 0) return -1;
    unsigned char magic[2];
    if (pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b)
        return read_gzip(fd, path, bytes, len, err, err_len);
    /* a regular file: one buffer of its size (plus one byte that finds out whether it grew) */
    struct stat st;
    size_t n = 0, cap = 0;
    unsigned char *buf = NULL;
    reserve(&buf, &cap, 0, fstat(fd, &st) == 0 && st.st_size > 0 ? (size_t)st.st_size + 1 : 1,
            path);
    for (;;) {
        if (n + 1 == cap) reserve(&buf, &cap, n, 1, path);
        size_t want = cap - n - 1;
        ssize_t got = read(fd, buf + n, want < (1u << 30) ? want : 1u << 30);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            snprintf(err, (size_t)err_len, "%s: read error after %zu bytes: %s", path, n,
                     strerror(errno));
            free(buf);
            close(fd);
            return -1;
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = 0;
    *bytes = buf;
    *len = n;
    return 0;
}

void io_byte_encode(const unsigned char *text, size_t n, int *tokens) {
    for (size_t i = 0; i < n; i++) tokens[i] = text[i];
}

int io_byte_decode(const int *tokens, size_t n, unsigned char *text) {
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= IO_BYTE_VOCAB) return -1;
        text[i] = (unsigned char)tokens[i];
    }
    return 0;
}
