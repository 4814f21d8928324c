/* The metadata checksum of a checkpoint (format_version >= 2): every attribute of /,
 * /model_config and /state and the /state/rng vector are covered, so that an edited step,
 * tokens_seen, config, model field or state value is reported instead of resumed from.
 *
 * Definition (reproducible with h5py and zlib, see tests/e2e/ckpt_h5py.py):
 *   items: each attribute A of / (except meta_checksums and meta_crc32) named "A", of
 *          /model_config named "model_config/A", of /state named "state/A", and the dataset
 *          /state/rng named "state/rng";
 *   value bytes: integer attribute -> int64 little-endian (8 bytes), float -> float64 LE,
 *          string -> its UTF-8 bytes, state/rng -> its uint64 values little-endian;
 *   item crc = zlib crc32 of (name UTF-8 bytes, one 0 byte, value bytes);
 *   meta_checksums (root, str) = concatenation over items sorted by name (bytewise) of
 *          "<name> <crc as 8 lowercase hex digits>\n";
 *   meta_crc32 (root, uint32) = zlib crc32 of meta_checksums' UTF-8 bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "io/checkpoint.h"
#include "io/ckpt_internal.h"
#include "io/h5util.h"

#define META_LIST "meta_checksums"
#define META_CRC "meta_crc32"

typedef struct {
    char name[CKPT_KV_NAME_MAX + 16];
    uint32_t crc;
} meta_item;

typedef struct {
    meta_item *v;
    int n, cap;
    const char *prefix; /* "", "model_config/", "state/" */
    char *reason;
    size_t rlen;
} meta_list;

/* zlib crc32 continued over len bytes (zlib takes uInt lengths). */
static uLong crc_more(uLong c, const void *p, size_t len) {
    const unsigned char *b = p;
    while (len > 0) {
        uInt k = len > (1u << 30) ? (1u << 30) : (uInt)len;
        c = crc32(c, b, k);
        b += k;
        len -= k;
    }
    return c;
}

static uint32_t text_crc(const char *s) { return (uint32_t)crc_more(crc32(0L, Z_NULL, 0), s, strlen(s)); }

static uint32_t item_crc(const char *name, const void *value, size_t len) {
    uLong c = crc_more(crc32(0L, Z_NULL, 0), name, strlen(name) + 1); /* the name and its 0 byte */
    return (uint32_t)crc_more(c, value, len);
}

static int add_item(meta_list *l, const char *name, const void *value, size_t len) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 32;
        meta_item *nv = realloc(l->v, (size_t)cap * sizeof *nv);
        if (!nv) {
            io_h5_errf(l->reason, l->rlen, "out of memory");
            return -1;
        }
        l->v = nv;
        l->cap = cap;
    }
    meta_item *it = &l->v[l->n];
    if ((size_t)snprintf(it->name, sizeof it->name, "%s%s", l->prefix, name) >= sizeof it->name ||
        strchr(name, '\n') || strchr(name, ' ')) {
        io_h5_errf(l->reason, l->rlen, "attribute name \"%.64s\" is too long or malformed", name);
        return -1;
    }
    it->crc = item_crc(it->name, value, len);
    l->n++;
    return 0;
}

/* One attribute as an item, its value encoded by type class (see the top of this file). */
static herr_t add_attr(hid_t obj, const char *name, const H5A_info_t *ainfo, void *data) {
    (void)ainfo;
    meta_list *l = data;
    char sub[256];
    if (l->prefix[0] == '\0' && (!strcmp(name, META_LIST) || !strcmp(name, META_CRC))) return 0;
    hid_t attr = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t type = attr < 0 ? -1 : H5Aget_type(attr);
    H5T_class_t cls = type < 0 ? H5T_NO_CLASS : H5Tget_class(type);
    io_h5_close(type);
    io_h5_close(attr);
    int rc = -1;
    if (cls == H5T_INTEGER) {
        int64_t v;
        if (io_h5_attr_read_i64(obj, name, &v, sub, sizeof sub) == 0)
            rc = add_item(l, name, &v, sizeof v);
    } else if (cls == H5T_FLOAT) {
        double v;
        if (io_h5_attr_read_f64(obj, name, &v, sub, sizeof sub) == 0)
            rc = add_item(l, name, &v, sizeof v);
    } else if (cls == H5T_STRING) {
        char *s = NULL;
        if (io_h5_attr_read_str(obj, name, &s, sub, sizeof sub) == 0)
            rc = add_item(l, name, s, strlen(s));
        free(s);
    } else {
        snprintf(sub, sizeof sub, "attribute %s is not a number or a string", name);
    }
    if (rc < 0 && !l->reason[0])
        io_h5_errf(l->reason, l->rlen, "%s%s%s", l->prefix[0] ? "/" : "", l->prefix, sub);
    return rc < 0 ? -1 : 0;
}

static int add_attrs_of(hid_t file, const char *group, const char *prefix, meta_list *l) {
    hid_t g = H5Oopen(file, group, H5P_DEFAULT);
    if (g < 0) {
        io_h5_errf(l->reason, l->rlen, "group %s is missing or unreadable", group);
        return -1;
    }
    l->prefix = prefix;
    hsize_t idx = 0;
    herr_t rc = H5Aiterate2(g, H5_INDEX_NAME, H5_ITER_INC, &idx, add_attr, l);
    H5Oclose(g);
    if (rc < 0 && !l->reason[0])
        io_h5_errf(l->reason, l->rlen, "cannot list the attributes of %s", group);
    return rc < 0 ? -1 : 0;
}

static int cmp_item(const void *a, const void *b) {
    return strcmp(((const meta_item *)a)->name, ((const meta_item *)b)->name);
}

/* The items of the open file, sorted by name. */
static int compute_items(hid_t file, meta_list *l) {
    if (add_attrs_of(file, "/", "", l) < 0 || add_attrs_of(file, "/model_config", "model_config/", l) < 0 ||
        add_attrs_of(file, "/state", "state/", l) < 0)
        return -1;
    hid_t g = H5Gopen2(file, "/state", H5P_DEFAULT);
    uint64_t *rng = NULL;
    int n = 0;
    char sub[256];
    int rc = g < 0 ? -1 : io_h5_read_u64_vec(g, "rng", &rng, &n, sub, sizeof sub);
    io_h5_close(g);
    l->prefix = "state/";
    if (rc < 0) {
        io_h5_errf(l->reason, l->rlen, "/state: %s", g < 0 ? "group missing" : sub);
        return -1;
    }
    rc = add_item(l, "rng", rng, (size_t)n * sizeof *rng);
    free(rng);
    if (rc < 0) return -1;
    qsort(l->v, (size_t)l->n, sizeof *l->v, cmp_item);
    return 0;
}

static char *items_text(const meta_list *l) {
    size_t cap = 1, len = 0;
    for (int i = 0; i < l->n; i++)
        cap += strlen(l->v[i].name) + 10;
    char *s = malloc(cap);
    if (!s) return NULL;
    s[0] = '\0';
    for (int i = 0; i < l->n; i++)
        len += (size_t)snprintf(s + len, cap - len, "%s %08x\n", l->v[i].name, l->v[i].crc);
    return s;
}

int ckpt_meta_write(hid_t file, char *reason, size_t rlen) {
    meta_list l = {.reason = reason, .rlen = rlen};
    reason[0] = '\0';
    char *text = NULL;
    int rc = -1;
    if (compute_items(file, &l) < 0) goto out;
    if (!(text = items_text(&l))) {
        io_h5_errf(reason, rlen, "out of memory");
        goto out;
    }
    if (io_h5_attr_write_str(file, META_LIST, text, reason, rlen) < 0 ||
        io_h5_attr_write_u32(file, META_CRC, text_crc(text), reason, rlen) < 0)
        goto out;
    rc = 0;
out:
    free(text);
    free(l.v);
    return rc;
}

/* "name crc\n" line of text for name, or NULL. */
static const char *find_line(const char *text, const char *name, uint32_t *crc) {
    size_t n = strlen(name);
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        if (!eol) break;
        if ((size_t)(eol - p) == n + 9 && !strncmp(p, name, n) && p[n] == ' ') {
            *crc = (uint32_t)strtoul(p + n + 1, NULL, 16);
            return p;
        }
        p = eol + 1;
    }
    return NULL;
}

/* Names every item that differs between the stored list and the file's contents. */
static void describe_diff(const char *stored, const meta_list *l, char *out, size_t outlen) {
    size_t len = 0;
    int n = 0;
    out[0] = '\0';
    for (int i = 0; i < l->n && len < outlen; i++) {
        uint32_t crc;
        if (!find_line(stored, l->v[i].name, &crc))
            len += (size_t)snprintf(out + len, outlen - len, "%s%s (not in the checksum list: added)",
                                    n++ ? ", " : "", l->v[i].name);
        else if (crc != l->v[i].crc)
            len += (size_t)snprintf(out + len, outlen - len, "%s%s", n++ ? ", " : "", l->v[i].name);
    }
    /* Listed items the file no longer has. */
    for (const char *p = stored; *p && len < outlen;) {
        const char *eol = strchr(p, '\n'), *sp = eol ? memchr(p, ' ', (size_t)(eol - p)) : NULL;
        if (!eol) break;
        int found = 0;
        for (int i = 0; sp && i < l->n && !found; i++)
            found = strlen(l->v[i].name) == (size_t)(sp - p) && !strncmp(l->v[i].name, p, (size_t)(sp - p));
        if (sp && !found)
            len += (size_t)snprintf(out + len, outlen - len, "%s%.*s (missing)", n++ ? ", " : "",
                                    (int)(sp - p), p);
        p = eol + 1;
    }
    if (n == 0) snprintf(out, outlen, "the list itself");
}

int ckpt_meta_verify(hid_t file, int64_t version, int *unprotected, char *reason, size_t rlen) {
    char sub[256];
    *unprotected = 0;
    reason[0] = '\0';
    htri_t there = H5Aexists(file, META_LIST);
    if (there == 0 && version < 2) {
        *unprotected = 1;
        return CKPT_OK;
    }
    char *stored = NULL;
    uint32_t stored_crc = 0;
    meta_list l = {.reason = reason, .rlen = rlen};
    int st = CKPT_E_META;
    if (there <= 0 || io_h5_attr_read_str(file, META_LIST, &stored, sub, sizeof sub) < 0 ||
        io_h5_attr_read_u32(file, META_CRC, &stored_crc, sub, sizeof sub) < 0) {
        io_h5_errf(reason, rlen,
                   "the metadata checksums (root attributes %s, %s) are missing or unreadable; "
                   "format_version %lld files must have them: the file was edited or is damaged",
                   META_LIST, META_CRC, (long long)version);
        goto out;
    }
    if (text_crc(stored) != stored_crc) {
        io_h5_errf(reason, rlen,
                   "the metadata checksum list does not match its crc32: the file is damaged; "
                   "use an older checkpoint");
        goto out;
    }
    if (compute_items(file, &l) < 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", reason);
        io_h5_errf(reason, rlen, "metadata unreadable: %s", why);
        st = CKPT_E_FORMAT;
        goto out;
    }
    char *text = items_text(&l);
    if (!text) {
        io_h5_errf(reason, rlen, "out of memory");
        goto out;
    }
    int same = strcmp(text, stored) == 0;
    free(text);
    if (same) {
        st = CKPT_OK;
        goto out;
    }
    char diff[768];
    describe_diff(stored, &l, diff, sizeof diff);
    io_h5_errf(reason, rlen,
               "metadata checksum mismatch in %s: the file was modified or damaged after it "
               "was written; use an older checkpoint",
               diff);
out:
    free(stored);
    free(l.v);
    return st;
}
