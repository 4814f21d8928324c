/* Reading safetensors files: the header and its checks, and tensors converted to float (see
 * safetensors.h). */
#include "io/safetensors.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/json.h"
#include "io/regular_file.h"

static const struct {
    const char *name;
    size_t size;
} st_dtypes[ST_N_DTYPES] = {
    [ST_BOOL] = {"BOOL", 1}, [ST_U8] = {"U8", 1},     [ST_I8] = {"I8", 1},
    [ST_F8_E5M2] = {"F8_E5M2", 1}, [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_I16] = {"I16", 2},
    [ST_U16] = {"U16", 2},   [ST_F16] = {"F16", 2},   [ST_BF16] = {"BF16", 2},
    [ST_I32] = {"I32", 4},   [ST_U32] = {"U32", 4},   [ST_F32] = {"F32", 4},
    [ST_F64] = {"F64", 8},   [ST_I64] = {"I64", 8},   [ST_U64] = {"U64", 8},
};

/* JSON numbers are doubles: offsets and dimensions above 2^53 could not be exact. */
#define ST_MAX_INT 9007199254740992.0

const char *st_dtype_name(st_dtype d) { return (unsigned)d < ST_N_DTYPES ? st_dtypes[d].name : "?"; }
size_t st_dtype_size(st_dtype d) { return (unsigned)d < ST_N_DTYPES ? st_dtypes[d].size : 0; }

static int st_fail(char *err, int err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int st_fail(char *err, int err_len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, (size_t)err_len, fmt, ap);
    va_end(ap);
    return -1;
}

void st_close(st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    free(f->path);
    if (f->fd >= 0) close(f->fd);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

const st_tensor *st_find(const st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

/* A non-negative integer JSON number that is exact as a double. */
static int st_uint(const io_json *v, uint64_t *out) {
    if (v->type != IO_JSON_NUMBER || !(v->number >= 0) || v->number > ST_MAX_INT ||
        floor(v->number) != v->number)
        return -1;
    *out = (uint64_t)v->number;
    return 0;
}

/* "[2,3]" into buf. */
static void st_shape_text(const st_tensor *t, char *buf, size_t n) {
    size_t u = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && u < n; i++)
        u += (size_t)snprintf(buf + u, n - u, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    if (u < n) snprintf(buf + u, n - u, "]");
}

/* One tensor entry: its dtype, shape and offsets, each checked; the byte size against the
 * offsets and the data buffer. */
static int st_parse_tensor(const io_json *m, uint64_t data_len, const char *name, st_tensor *t,
                           char *err, int err_len) {
    const char *key = m->key;
    if (m->type != IO_JSON_OBJECT)
        return st_fail(err, err_len, "%s: tensor '%.200s': expected an object with dtype, shape and "
                       "data_offsets, found %s", name, key, io_json_type_name(m->type));
    const io_json *dt = NULL, *sh = NULL, *off = NULL;
    for (size_t i = 0; i < m->n_items; i++) {
        const io_json *v = &m->items[i];
        if (!strcmp(v->key, "dtype")) dt = v;
        else if (!strcmp(v->key, "shape")) sh = v;
        else if (!strcmp(v->key, "data_offsets")) off = v;
        else
            return st_fail(err, err_len, "%s: tensor '%.200s': unknown field '%.100s' (a tensor has "
                           "dtype, shape and data_offsets)", name, key, v->key);
    }
    if (!dt || !sh || !off)
        return st_fail(err, err_len, "%s: tensor '%.200s': missing field '%s'", name, key,
                       !dt ? "dtype" : !sh ? "shape" : "data_offsets");
    if (dt->type != IO_JSON_STRING)
        return st_fail(err, err_len, "%s: tensor '%.200s': dtype must be a string", name, key);
    int d = -1;
    for (int i = 0; i < ST_N_DTYPES; i++)
        if (strlen(dt->string) == dt->string_len && !strcmp(dt->string, st_dtypes[i].name)) d = i;
    if (d < 0)
        return st_fail(err, err_len, "%s: tensor '%.200s': unknown dtype '%.40s' (known: BOOL, U8, I8, "
                       "F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64)",
                       name, key, dt->string);
    t->dtype = (st_dtype)d;
    if (sh->type != IO_JSON_ARRAY)
        return st_fail(err, err_len, "%s: tensor '%.200s': shape must be an array of integers", name, key);
    if (sh->n_items > ST_MAX_NDIM)
        return st_fail(err, err_len, "%s: tensor '%.200s': shape has %zu dimensions; at most %d are read",
                       name, key, sh->n_items, ST_MAX_NDIM);
    t->ndim = (int)sh->n_items;
    uint64_t numel = 1;
    int overflow = 0;
    for (int i = 0; i < t->ndim; i++) {
        uint64_t v;
        if (st_uint(&sh->items[i], &v))
            return st_fail(err, err_len, "%s: tensor '%.200s': shape[%d] is not a non-negative integer "
                           "below 2^53", name, key, i);
        t->shape[i] = (int64_t)v;
        if (__builtin_mul_overflow(numel, v, &numel)) overflow = 1;
    }
    uint64_t bytes = 0;
    if (!overflow && __builtin_mul_overflow(numel, (uint64_t)st_dtypes[d].size, &bytes)) overflow = 1;
    char shape[200];
    st_shape_text(t, shape, sizeof shape);
    if (overflow)
        return st_fail(err, err_len, "%s: tensor '%.200s': shape %s overflows a 64-bit byte count",
                       name, key, shape);
    t->numel = numel;
    if (off->type != IO_JSON_ARRAY || off->n_items != 2 || st_uint(&off->items[0], &t->begin) ||
        st_uint(&off->items[1], &t->end))
        return st_fail(err, err_len, "%s: tensor '%.200s': data_offsets must be [begin, end], two "
                       "non-negative integers", name, key);
    if (t->begin > t->end)
        return st_fail(err, err_len, "%s: tensor '%.200s': data_offsets [%llu, %llu] end before they begin",
                       name, key, (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end - t->begin != bytes)
        return st_fail(err, err_len, "%s: tensor '%.200s': shape %s is %llu bytes of %s but data_offsets "
                       "[%llu, %llu] give %llu", name, key, shape, (unsigned long long)bytes,
                       st_dtypes[d].name, (unsigned long long)t->begin, (unsigned long long)t->end,
                       (unsigned long long)(t->end - t->begin));
    if (t->end > data_len)
        return st_fail(err, err_len, "%s: tensor '%.200s': data_offsets [%llu, %llu] run past the end "
                       "of the data (%llu bytes after the header): the file is truncated or damaged",
                       name, key, (unsigned long long)t->begin, (unsigned long long)t->end,
                       (unsigned long long)data_len);
    return 0;
}

static int st_cmp_begin(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* No two tensors share a byte, and together they cover the data buffer. */
static int st_check_layout(const st_file *f, uint64_t data_len, const char *name, char *err, int err_len) {
    const st_tensor **s = malloc(sizeof *s * (size_t)(f->n ? f->n : 1));
    if (!s) return st_fail(err, err_len, "%s: out of memory", name);
    for (int i = 0; i < f->n; i++) s[i] = &f->t[i];
    qsort(s, (size_t)f->n, sizeof *s, st_cmp_begin);
    uint64_t at = 0;
    int rc = 0;
    for (int i = 0; i < f->n && !rc; i++) {
        if (s[i]->begin < at)
            rc = st_fail(err, err_len, "%s: tensors '%.200s' and '%.200s' overlap (bytes %llu..%llu and "
                         "%llu..%llu of the data)", name, s[i - 1]->name, s[i]->name,
                         (unsigned long long)s[i - 1]->begin, (unsigned long long)s[i - 1]->end,
                         (unsigned long long)s[i]->begin, (unsigned long long)s[i]->end);
        else if (s[i]->begin > at)
            rc = st_fail(err, err_len, "%s: bytes %llu..%llu of the data belong to no tensor (before "
                         "'%.200s'): the header does not describe the file", name,
                         (unsigned long long)at, (unsigned long long)s[i]->begin, s[i]->name);
        at = s[i]->end;
    }
    if (!rc && at != data_len)
        rc = st_fail(err, err_len, "%s: the data holds %llu bytes but the tensors end at byte %llu: "
                     "the header does not describe the file", name, (unsigned long long)data_len,
                     (unsigned long long)at);
    free(s);
    return rc;
}

/* The JSON header (text, len bytes) of a file whose data buffer holds data_len bytes. */
static int st_parse_header(const char *text, size_t len, uint64_t data_len, const char *name,
                           st_file *f, char *err, int err_len) {
    char sub[768];
    io_json *root = io_json_parse(text, len, name, sub, sizeof sub);
    if (!root) return st_fail(err, err_len, "%s (in the header)", sub);
    int rc = 0;
    if (root->type != IO_JSON_OBJECT) {
        rc = st_fail(err, err_len, "%s: the header is %s, not a JSON object", name, io_json_type_name(root->type));
        goto done;
    }
    f->t = calloc(root->n_items ? root->n_items : 1, sizeof *f->t);
    if (!f->t) {
        rc = st_fail(err, err_len, "%s: out of memory", name);
        goto done;
    }
    for (size_t i = 0; i < root->n_items && !rc; i++) {
        const io_json *m = &root->items[i];
        if (!strcmp(m->key, "__metadata__")) {
            if (m->type != IO_JSON_OBJECT)
                rc = st_fail(err, err_len, "%s: __metadata__ must be an object of strings", name);
            for (size_t j = 0; j < m->n_items && !rc; j++)
                if (m->items[j].type != IO_JSON_STRING)
                    rc = st_fail(err, err_len, "%s: __metadata__ entry '%.100s' must be a string", name,
                                 m->items[j].key);
            continue;
        }
        st_tensor *t = &f->t[f->n];
        rc = st_parse_tensor(m, data_len, name, t, err, err_len);
        if (rc) break;
        t->name = strdup(m->key);
        if (!t->name) {
            rc = st_fail(err, err_len, "%s: out of memory", name);
            break;
        }
        f->n++;
    }
    if (!rc) rc = st_check_layout(f, data_len, name, err, err_len);
done:
    io_json_free(root);
    return rc;
}

static uint64_t st_le64(const uint8_t *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

/* The header length read from the first 8 bytes, checked against the file size. */
static int st_header_len(const uint8_t *b, uint64_t file_size, const char *name, uint64_t *n,
                         char *err, int err_len) {
    if (file_size < 8)
        return st_fail(err, err_len, "%s: %llu bytes: too short for a safetensors file (8-byte header "
                       "length, then the header)", name, (unsigned long long)file_size);
    *n = st_le64(b);
    if (*n > file_size - 8)
        return st_fail(err, err_len, "%s: the header length %llu runs past the end of the file (%llu "
                       "bytes): truncated, or not a safetensors file", name, (unsigned long long)*n,
                       (unsigned long long)file_size);
    if (*n > ST_MAX_HEADER)
        return st_fail(err, err_len, "%s: the header length %llu exceeds the limit of %u bytes", name,
                       (unsigned long long)*n, ST_MAX_HEADER);
    if (*n < 2)
        return st_fail(err, err_len, "%s: the header length is %llu: too short for a JSON object", name,
                       (unsigned long long)*n);
    return 0;
}

int st_parse(const uint8_t *data, size_t size, const char *name, st_file *f, char *err, int err_len) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    uint64_t n;
    if (st_header_len(data, size, name, &n, err, err_len)) return -1;
    f->file_size = size;
    f->data_start = 8 + n;
    f->path = strdup(name);
    if (!f->path || st_parse_header((const char *)data + 8, (size_t)n, size - 8 - n, name, f, err, err_len)) {
        if (!f->path) st_fail(err, err_len, "%s: out of memory", name);
        st_close(f);
        return -1;
    }
    return 0;
}

/* Reads n bytes at offset off; -1 on an error or end of file. */
static int st_pread_all(int fd, void *buf, size_t n, uint64_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

int st_open(const char *path, st_file *f, char *err, int err_len) {
    memset(f, 0, sizeof *f);
    f->fd = io_open_regular(path, "safetensors file", err, err_len);
    if (f->fd < 0) return -1;
    struct stat st;
    uint8_t len8[8] = {0};
    uint64_t n;
    char *text = NULL;
    if (fstat(f->fd, &st)) {
        st_fail(err, err_len, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    f->file_size = (uint64_t)st.st_size;
    if (f->file_size >= 8 && st_pread_all(f->fd, len8, 8, 0)) {
        st_fail(err, err_len, "%s: cannot read the header length: %s", path, errno ? strerror(errno) : "end of file");
        goto fail;
    }
    if (st_header_len(len8, f->file_size, path, &n, err, err_len)) goto fail;
    f->data_start = 8 + n;
    text = malloc((size_t)n);
    f->path = strdup(path);
    if (!text || !f->path) {
        st_fail(err, err_len, "%s: out of memory for a %llu-byte header", path, (unsigned long long)n);
        goto fail;
    }
    if (st_pread_all(f->fd, text, (size_t)n, 8)) {
        st_fail(err, err_len, "%s: cannot read the %llu-byte header: %s", path, (unsigned long long)n,
                errno ? strerror(errno) : "end of file");
        goto fail;
    }
    if (st_parse_header(text, (size_t)n, f->file_size - 8 - n, path, f, err, err_len)) goto fail;
    free(text);
    return 0;
fail:
    free(text);
    st_close(f);
    return -1;
}

/* IEEE half to float, subnormals, infinities and NaN included. */
static float st_half(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023u, bits;
    if (e == 31) bits = sign | 0x7f800000u | (m << 13);
    else if (e) bits = sign | ((e + 112) << 23) | (m << 13);
    else {
        float v = ldexpf((float)m, -24);
        return sign ? -v : v;
    }
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

int st_convert_f32(st_dtype d, const uint8_t *raw, uint64_t n, float *out) {
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *b = raw + i * st_dtype_size(d);
        uint32_t bits;
        switch (d) {
        case ST_F32:
            bits = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
            memcpy(&out[i], &bits, 4);
            break;
        case ST_BF16:
            bits = ((uint32_t)b[0] | (uint32_t)b[1] << 8) << 16;
            memcpy(&out[i], &bits, 4);
            break;
        case ST_F16: out[i] = st_half((uint16_t)(b[0] | b[1] << 8)); break;
        case ST_F64: {
            uint64_t v = st_le64(b);
            double x;
            memcpy(&x, &v, 8);
            out[i] = (float)x;
            break;
        }
        default: return -1;
        }
    }
    return 0;
}

int st_read_f32(const st_file *f, const st_tensor *t, float *out, char *err, int err_len) {
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16 && t->dtype != ST_F64)
        return st_fail(err, err_len, "%s: tensor '%.200s' has dtype %s; weights must be F32, F16, BF16 "
                       "or F64", f->path, t->name, st_dtype_name(t->dtype));
    if (f->fd < 0) return st_fail(err, err_len, "%s: not opened from a file", f->path);
    const size_t bytes = (size_t)(t->end - t->begin);
    uint8_t *raw = malloc(bytes ? bytes : 1);
    if (!raw) return st_fail(err, err_len, "%s: tensor '%.200s': out of memory for %zu bytes", f->path, t->name, bytes);
    errno = 0;
    if (st_pread_all(f->fd, raw, bytes, f->data_start + t->begin)) {
        free(raw);
        return st_fail(err, err_len, "%s: tensor '%.200s': cannot read its %zu bytes: %s", f->path,
                       t->name, bytes, errno ? strerror(errno) : "the file ends early (truncated?)");
    }
    st_convert_f32(t->dtype, raw, t->numel, out);
    free(raw);
    for (uint64_t i = 0; i < t->numel; i++)
        if (!isfinite(out[i]))
            return st_fail(err, err_len, "%s: tensor '%.200s' holds %s at element %llu (in fp32): the "
                           "weights must be finite", f->path, t->name, isnan(out[i]) ? "NaN" : "an infinity",
                           (unsigned long long)i);
    return 0;
}
