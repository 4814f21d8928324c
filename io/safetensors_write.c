/* Safetensors writer: tensors are collected, then written with one header and one data buffer. */
#include "io/safetensors_write.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/json.h"

typedef struct {
    char name[STW_NAME_MAX];
    int ndim;
    int64_t shape[STW_MAX_NDIM];
    size_t numel;
    float *data; /* owned */
} stw_tensor;

struct stw_writer {
    stw_dtype dtype;
    stw_tensor *t;
    int n, cap;
};

stw_writer *stw_create(stw_dtype dtype) {
    stw_writer *w = calloc(1, sizeof *w);
    if (w) w->dtype = dtype;
    return w;
}

void stw_free(stw_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->t[i].data);
    free(w->t);
    free(w);
}

int stw_count(const stw_writer *w) { return w->n; }

uint16_t stw_bf16_from_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x0040); /* keep the sign, force a quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                     /* round half to even */
    return (uint16_t)(u >> 16);
}

static size_t elem_size(stw_dtype d) { return d == STW_BF16 ? 2 : 4; }

/* Checks name and shape and computes the element count; 0 or -1 with a message. */
static int check_tensor(const stw_writer *w, const char *name, int ndim, const int64_t *shape,
                        size_t *numel, char *err, size_t errlen) {
    if (!name || !*name || strlen(name) >= STW_NAME_MAX) {
        snprintf(err, errlen, "safetensors: a tensor name must have 1 to %d characters", STW_NAME_MAX - 1);
        return -1;
    }
    if (!strcmp(name, "__metadata__")) {
        snprintf(err, errlen, "safetensors: \"__metadata__\" is reserved and cannot name a tensor");
        return -1;
    }
    if (ndim < 0 || ndim > STW_MAX_NDIM || (ndim > 0 && !shape)) {
        snprintf(err, errlen, "safetensors: tensor %s: rank %d is outside 0..%d", name, ndim, STW_MAX_NDIM);
        return -1;
    }
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->t[i].name, name)) {
            snprintf(err, errlen, "safetensors: tensor %s added twice", name);
            return -1;
        }
    size_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] > 0 && n > SIZE_MAX / 8 / (size_t)shape[d])) {
            snprintf(err, errlen, "safetensors: tensor %s: dimension %d is %lld (negative or too large)",
                     name, d, (long long)shape[d]);
            return -1;
        }
        n *= (size_t)shape[d];
    }
    *numel = n;
    return 0;
}

int stw_add_owned(stw_writer *w, const char *name, int ndim, const int64_t *shape, float *data,
                  char *err, size_t errlen) {
    size_t numel = 0;
    if (check_tensor(w, name, ndim, shape, &numel, err, errlen)) {
        free(data);
        return -1;
    }
    if (numel && !data) {
        snprintf(err, errlen, "safetensors: tensor %s has no data", name);
        return -1;
    }
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 32;
        stw_tensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) {
            snprintf(err, errlen, "safetensors: out of memory adding tensor %s", name);
            free(data);
            return -1;
        }
        w->t = t;
        w->cap = cap;
    }
    stw_tensor *t = &w->t[w->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->numel = numel;
    t->data = data;
    return 0;
}

int stw_add(stw_writer *w, const char *name, int ndim, const int64_t *shape, const float *data,
            char *err, size_t errlen) {
    size_t numel = 0;
    if (check_tensor(w, name, ndim, shape, &numel, err, errlen)) return -1;
    if (numel && !data) {
        snprintf(err, errlen, "safetensors: tensor %s has no data", name);
        return -1;
    }
    float *copy = malloc(numel ? numel * sizeof *copy : 1);
    if (!copy) {
        snprintf(err, errlen, "safetensors: out of memory copying tensor %s (%zu values)", name, numel);
        return -1;
    }
    if (numel) memcpy(copy, data, numel * sizeof *copy);
    return stw_add_owned(w, name, ndim, shape, copy, err, errlen);
}

/* The header JSON, padded with spaces to a multiple of 8 bytes; malloced, length in *len. */
static char *build_header(const stw_writer *w, size_t *len) {
    io_jw j;
    io_jw_init(&j, 0);
    io_jw_begin_object(&j);
    io_jw_key(&j, "__metadata__");
    io_jw_begin_object(&j);
    io_jw_kv_string(&j, "format", "pt");
    io_jw_end_object(&j);
    size_t off = 0;
    for (int i = 0; i < w->n; i++) {
        const stw_tensor *t = &w->t[i];
        size_t bytes = t->numel * elem_size(w->dtype);
        io_jw_key(&j, t->name);
        io_jw_begin_object(&j);
        io_jw_kv_string(&j, "dtype", w->dtype == STW_BF16 ? "BF16" : "F32");
        io_jw_key(&j, "shape");
        io_jw_begin_array(&j);
        for (int d = 0; d < t->ndim; d++) io_jw_int(&j, (long long)t->shape[d]);
        io_jw_end_array(&j);
        io_jw_key(&j, "data_offsets");
        io_jw_begin_array(&j);
        io_jw_int(&j, (long long)off);
        io_jw_int(&j, (long long)(off + bytes));
        io_jw_end_array(&j);
        io_jw_end_object(&j);
        off += bytes;
    }
    io_jw_end_object(&j);
    const char *text = io_jw_text(&j);
    size_t n = strlen(text), padded = (n + 7) / 8 * 8;
    char *h = malloc(padded + 1);
    if (h) {
        memcpy(h, text, n);
        memset(h + n, ' ', padded - n);
        h[padded] = 0;
        *len = padded;
    }
    io_jw_free(&j);
    return h;
}

/* write() all of buf, retrying short writes and EINTR. */
static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* One tensor's bytes, little-endian, through a bounded staging buffer. */
static int write_tensor(int fd, const stw_tensor *t, stw_dtype dtype) {
    enum { STAGE = 1 << 16 };
    unsigned char stage[STAGE * 2];
    if (dtype == STW_F32) {
        for (size_t i = 0; i < t->numel; i += STAGE / 2) {
            size_t k = t->numel - i < STAGE / 2 ? t->numel - i : STAGE / 2;
            for (size_t j = 0; j < k; j++) {
                uint32_t u;
                memcpy(&u, &t->data[i + j], 4);
                for (int b = 0; b < 4; b++) stage[4 * j + (size_t)b] = (unsigned char)(u >> (8 * b));
            }
            if (write_all(fd, stage, 4 * k)) return -1;
        }
        return 0;
    }
    for (size_t i = 0; i < t->numel; i += STAGE) {
        size_t k = t->numel - i < STAGE ? t->numel - i : STAGE;
        for (size_t j = 0; j < k; j++) {
            uint16_t u = stw_bf16_from_f32(t->data[i + j]);
            stage[2 * j] = (unsigned char)(u & 0xff);
            stage[2 * j + 1] = (unsigned char)(u >> 8);
        }
        if (write_all(fd, stage, 2 * k)) return -1;
    }
    return 0;
}

int stw_write(const stw_writer *w, const char *path, char *err, size_t errlen) {
    size_t hlen = 0;
    char *header = build_header(w, &hlen);
    if (!header) {
        snprintf(err, errlen, "%s: out of memory building the safetensors header", path);
        return -1;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        free(header);
        return -1;
    }
    unsigned char len8[8];
    for (int b = 0; b < 8; b++) len8[b] = (unsigned char)((uint64_t)hlen >> (8 * b));
    int bad = write_all(fd, len8, 8) || write_all(fd, header, hlen);
    for (int i = 0; !bad && i < w->n; i++) bad = write_tensor(fd, &w->t[i], w->dtype);
    int saved = errno;
    if (!bad && fsync(fd)) {
        bad = 1;
        saved = errno;
    }
    if (close(fd) && !bad) {
        bad = 1;
        saved = errno;
    }
    free(header);
    if (bad) {
        snprintf(err, errlen, "%s: writing failed: %s (is the disk full?)", path,
                 saved ? strerror(saved) : "short write");
        unlink(path);
        return -1;
    }
    return 0;
}
