/* The checkpoint file format: atomic save, load, header read, verification. See checkpoint.h;
 * folder-level logic (naming, resume, pruning) is in ckpt_dir.c. */
#include "io/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "io/ckpt_internal.h"
#include "io/h5util.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint crc32s are taken over little-endian fp32 bytes: add a byte swap for this host"
#endif

static atomic_int saves_in_flight;

int ckpt_saves_in_flight(void) { return atomic_load(&saves_in_flight); }

const char *ckpt_status_str(int status) {
    switch (status) {
    case CKPT_OK: return "ok";
    case CKPT_E_ARG: return "bad argument";
    case CKPT_E_IO: return "i/o error";
    case CKPT_E_OPEN: return "unreadable file";
    case CKPT_E_FORMAT: return "not a gdn checkpoint of a supported version";
    case CKPT_E_MODEL: return "model configuration mismatch";
    case CKPT_E_TENSOR: return "missing or malformed tensor";
    case CKPT_E_CHECKSUM: return "checksum mismatch";
    case CKPT_E_META: return "metadata checksum mismatch";
    case CKPT_E_DAMAGED: return "damaged file";
    default: return "unknown status";
    }
}

hid_t ckpt_fapl(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) return -1;
    if (H5Pset_fapl_sec2(fapl) < 0 || H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0 ||
        H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18) < 0)
        goto fail;
#if (H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7) || H5_VERSION_GE(1, 12, 1)
    if (H5Pset_file_locking(fapl, 0, 1) < 0) goto fail;
#endif
    return fapl;
fail:
    H5Pclose(fapl);
    return -1;
}

/* zlib crc32 of n fp32 values' bytes (little-endian on every supported host). */
static uint32_t crc_f32(const float *x, size_t n) {
    const unsigned char *b = (const unsigned char *)x;
    size_t bytes = n * sizeof(float);
    uLong crc = crc32(0L, Z_NULL, 0);
    while (bytes > 0) { /* zlib takes uInt lengths */
        uInt len = bytes > (1u << 30) ? (1u << 30) : (uInt)bytes;
        crc = crc32(crc, b, len);
        b += len;
        bytes -= len;
    }
    return (uint32_t)crc;
}

void ckpt_info_free(ckpt_info *info) {
    if (!info) return;
    free(info->config_json);
    free(info->rng);
    free(info->state);
    memset(info, 0, sizeof *info);
}

int ckpt_info_get(const ckpt_info *info, const char *name, int64_t *value) {
    for (int i = 0; i < info->n_state; i++)
        if (strcmp(info->state[i].name, name) == 0) {
            *value = info->state[i].value;
            return 0;
        }
    return -1;
}

/* ---- save ---------------------------------------------------------------------------------- */

static int check_contents(const ckpt_contents *c, char *err, size_t errlen) {
    if (!c || !c->table || !c->params || !c->config_json) {
        io_h5_errf(err, errlen, "nothing to save: table, params and config_json are required");
        return CKPT_E_ARG;
    }
    if ((c->m == NULL) != (c->v == NULL)) {
        io_h5_errf(err, errlen, "AdamW moments m and v must be given together (or both NULL)");
        return CKPT_E_ARG;
    }
    if (c->n_rng < 0 || (c->n_rng > 0 && !c->rng) || c->n_state < 0 ||
        c->n_state > CKPT_STATE_MAX || (c->n_state > 0 && !c->state)) {
        io_h5_errf(err, errlen, "bad rng/state arguments (n_rng %d, n_state %d, max %d)", c->n_rng,
                   c->n_state, CKPT_STATE_MAX);
        return CKPT_E_ARG;
    }
    const gdn_param_table *t = c->table;
    for (int i = 0; i < t->n; i++) {
        const gdn_param *p = &t->p[i];
        size_t numel = 1;
        for (int d = 0; d < p->ndim; d++)
            numel *= (size_t)(p->shape[d] > 0 ? p->shape[d] : 0);
        if (p->name[0] == '\0' || strchr(p->name, '/') || p->ndim < 1 || p->ndim > 3 ||
            numel != p->numel || p->offset + p->numel > t->total) {
            io_h5_errf(err, errlen, "parameter table entry %d (\"%s\") is inconsistent", i,
                       p->name);
            return CKPT_E_ARG;
        }
    }
    for (int i = 0; i < c->n_state; i++) {
        size_t len = strnlen(c->state[i].name, CKPT_KV_NAME_MAX);
        if (len == 0 || len == CKPT_KV_NAME_MAX || strchr(c->state[i].name, '/')) {
            io_h5_errf(err, errlen, "state value %d has an empty, unterminated or '/' name", i);
            return CKPT_E_ARG;
        }
    }
    return CKPT_OK;
}

/* A group whose links remember creation order (so tools list tensors in table order). */
static hid_t create_group(hid_t loc, const char *name, int ordered, char *err, size_t errlen) {
    hid_t gcpl = -1, g = -1;
    IO_H5_TRY(gcpl = io_h5_untimed_gcpl(), "group %s: cannot make a property list", name);
    if (ordered)
        IO_H5_TRY(H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED),
                  "group %s: cannot track creation order", name);
    IO_H5_TRY(g = H5Gcreate2(loc, name, H5P_DEFAULT, gcpl, H5P_DEFAULT), "cannot create group %s",
              name);
fail:
    io_h5_close(gcpl);
    return g;
}

/* One dataset per table tensor under group `where` (e.g. "/optim/m"), each with its crc32. */
static int write_tensors(hid_t file, const char *where, const gdn_param_table *t, const float *buf,
                         char *err, size_t errlen) {
    hid_t g = create_group(file, where, 1, err, errlen);
    if (g < 0) return -1;
    for (int i = 0; i < t->n; i++) {
        const gdn_param *p = &t->p[i];
        hsize_t shape[3];
        for (int d = 0; d < p->ndim; d++)
            shape[d] = (hsize_t)p->shape[d];
        const float *x = buf + p->offset;
        char what[GDN_PARAM_NAME_MAX + 64];
        snprintf(what, sizeof what, "%s/%s", where, p->name);
        hid_t dset = io_h5_write_f32(g, p->name, p->ndim, shape, x, err, errlen);
        if (dset < 0) {
            io_h5_errf(err, errlen, "cannot write dataset %s (disk full?)", what);
            goto fail;
        }
        int rc = io_h5_attr_write_u32(dset, "crc32", crc_f32(x, p->numel), err, errlen);
        if (H5Dclose(dset) < 0 || rc < 0) {
            io_h5_errf(err, errlen, "cannot write the crc32 of %s", what);
            goto fail;
        }
    }
    return H5Gclose(g) < 0 ? -1 : 0;
fail:
    H5Gclose(g);
    return -1;
}

/* One attribute per field of model/config_fields.h, named after it. */
static int write_model_config(hid_t file, const gdn_config *m, char *err, size_t errlen) {
    hid_t g = create_group(file, "/model_config", 0, err, errlen);
    if (g < 0) return -1;
    for (int i = 0; i < GDN_CONFIG_N_FIELDS; i++) {
        const gdn_config_field *f = &gdn_config_fields[i];
        const char *src = (const char *)m + f->offset;
        int r = f->type == GDN_FIELD_DOUBLE ? io_h5_attr_write_f64(g, f->name, *(const double *)src, err, errlen)
                : f->type == GDN_FIELD_STR
                    ? io_h5_attr_write_str(g, f->name, gdn_config_get_str(m, f), err, errlen)
                    : io_h5_attr_write_i64(g, f->name, (int64_t)*(const int *)src, err, errlen);
        if (r < 0) {
            H5Gclose(g);
            return -1;
        }
    }
    return H5Gclose(g) < 0 ? -1 : 0;
}

static int write_state(hid_t file, const ckpt_contents *c, char *err, size_t errlen) {
    hid_t g = create_group(file, "/state", 0, err, errlen);
    if (g < 0) return -1;
    if (io_h5_write_u64_vec(g, "rng", c->rng, c->n_rng, err, errlen) < 0) goto fail;
    for (int i = 0; i < c->n_state; i++)
        if (io_h5_attr_write_i64(g, c->state[i].name, c->state[i].value, err, errlen) < 0) {
            io_h5_errf(err, errlen, "cannot write state value \"%s\" (a duplicate name?)",
                       c->state[i].name);
            goto fail;
        }
    return H5Gclose(g) < 0 ? -1 : 0;
fail:
    H5Gclose(g);
    return -1;
}

static int write_all(hid_t file, const ckpt_contents *c, char *err, size_t errlen) {
    const gdn_config *model = c->model ? c->model : &c->table->cfg;
    if (io_h5_attr_write_str(file, "format", CKPT_FORMAT, err, errlen) < 0 ||
        io_h5_attr_write_i64(file, "format_version", CKPT_FORMAT_VERSION, err, errlen) < 0 ||
        io_h5_attr_write_i64(file, "step", c->step, err, errlen) < 0 ||
        io_h5_attr_write_i64(file, "tokens_seen", c->tokens_seen, err, errlen) < 0 ||
        io_h5_attr_write_str(file, "config", c->config_json, err, errlen) < 0 ||
        write_model_config(file, model, err, errlen) < 0 ||
        write_tensors(file, "/params", c->table, c->params, err, errlen) < 0)
        return -1;
    if (c->m) {
        hid_t g = create_group(file, "/optim", 0, err, errlen);
        if (g < 0 || H5Gclose(g) < 0) return -1;
        if (write_tensors(file, "/optim/m", c->table, c->m, err, errlen) < 0 ||
            write_tensors(file, "/optim/v", c->table, c->v, err, errlen) < 0)
            return -1;
    }
    if (write_state(file, c, err, errlen) < 0) return -1;
    return ckpt_meta_write(file, err, errlen);
}

/* fsync of a file or directory by path; errno is kept on failure. */
static int fsync_path(const char *path, int directory) {
    int fd = open(path, O_RDONLY | (directory ? O_DIRECTORY : 0) | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* The directory part of path ("." when there is none). */
static void dir_of(const char *path, char *out, size_t outlen) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, outlen, ".");
    else if (slash == path)
        snprintf(out, outlen, "/");
    else
        snprintf(out, outlen, "%.*s", (int)(slash - path), path);
}

/* The core driver's memory goes through these callbacks so that the buffer it would free at
 * close, the finished file, is kept instead: H5Fget_file_image before the close returns the
 * superblock with a stale checksum in HDF5 1.10. One save at a time (HDF5 is not thread-safe
 * here either). */
static struct {
    void *kept;
    size_t cap;
} core_image;

static void *img_malloc(size_t size, H5FD_file_image_op_t op, void *udata) {
    (void)op, (void)udata;
    void *p = malloc(size);
    if (p) core_image.cap = size;
    return p;
}
static void *img_memcpy(void *dest, const void *src, size_t size, H5FD_file_image_op_t op,
                        void *udata) {
    (void)op, (void)udata;
    return memcpy(dest, src, size);
}
static void *img_realloc(void *ptr, size_t size, H5FD_file_image_op_t op, void *udata) {
    (void)op, (void)udata;
    void *p = realloc(ptr, size);
    if (p) core_image.cap = size;
    return p;
}
static herr_t img_free(void *ptr, H5FD_file_image_op_t op, void *udata) {
    (void)udata;
    if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE && !core_image.kept)
        core_image.kept = ptr;
    else
        free(ptr);
    return 0;
}

/* Access properties for building a file in memory: nothing reaches the disk through HDF5. */
static hid_t memory_fapl(size_t increment) {
    H5FD_file_image_callbacks_t cb = {img_malloc, img_memcpy, img_realloc, img_free,
                                      NULL,       NULL,       NULL};
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) return -1;
    if (H5Pset_fapl_core(fapl, increment, 0) < 0 ||
        H5Pset_file_image_callbacks(fapl, &cb) < 0 ||
        H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0 ||
        H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18) < 0) {
        H5Pclose(fapl);
        return -1;
    }
    return fapl;
}

/* Builds the whole file in memory; *image is malloced, *size its length. */
static int build_image(const ckpt_contents *c, void **image, size_t *size, char *reason,
                       size_t rlen) {
    *image = NULL;
    size_t tensors = c->table->total * sizeof(float) * (c->m ? 3 : 1);
    hid_t fapl = memory_fapl(tensors + (1u << 20)), file = -1;
    ssize_t n = -1;
    int rc = -1;
    if (fapl < 0) {
        io_h5_errf(reason, rlen, "cannot set up HDF5 file access");
        return -1;
    }
    free(core_image.kept);
    core_image.kept = NULL;
    /* The name only labels HDF5's messages: with no backing store the core driver opens no file. */
    file = H5Fcreate("checkpoint-in-memory.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (file < 0) {
        char h5[256];
        io_h5_errf(reason, rlen, "cannot create an HDF5 file in memory (%s)",
                   io_h5_last_error(h5, sizeof h5));
        goto out;
    }
    if (write_all(file, c, reason, rlen) < 0) goto out;
    if (H5Fflush(file, H5F_SCOPE_GLOBAL) < 0 || (n = H5Fget_file_image(file, NULL, 0)) <= 0) {
        io_h5_errf(reason, rlen, "cannot finish the HDF5 file in memory");
        goto out;
    }
    rc = 0;
out:
    /* Closing a file in memory writes nothing, so it cannot fail on a full disk. */
    if (file >= 0 && H5Fclose(file) < 0 && rc == 0) {
        io_h5_errf(reason, rlen, "cannot close the HDF5 file in memory");
        rc = -1;
    }
    io_h5_close(fapl);
    if (rc == 0 && (!core_image.kept || core_image.cap < (size_t)n)) {
        io_h5_errf(reason, rlen, "the HDF5 file image was not kept at close");
        rc = -1;
    }
    if (rc == 0) {
        *image = core_image.kept;
        *size = (size_t)n;
    } else {
        free(core_image.kept);
    }
    core_image.kept = NULL;
    return rc;
}

/* Writes n bytes to fd and fsyncs it; does not close it. */
static int write_fd(int fd, const char *tmp, const void *data, size_t n, char *reason, size_t rlen) {
    const char *b = data;
    size_t left = n;
    while (left > 0) {
        ssize_t k = write(fd, b, left > (1u << 30) ? (1u << 30) : left);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = k < 0 ? errno : ENOSPC;
            io_h5_errf(reason, rlen, "cannot write %s after %zu of %zu bytes: %s (disk full?)", tmp,
                       n - left, n, strerror(e));
            return -1;
        }
        b += k;
        left -= (size_t)k;
    }
    if (fsync(fd) < 0) {
        io_h5_errf(reason, rlen, "fsync of %s failed: %s", tmp, strerror(errno));
        return -1;
    }
    return 0;
}

int ckpt_save_atomic(const char *path, const ckpt_contents *c, char *err, size_t errlen) {
    char reason[1024] = "", tmp[PATH_MAX], dir[PATH_MAX];
    io_h5_quiet();
    if (!path || !*path) {
        io_h5_errf(err, errlen, "ckpt_save_atomic: no path given");
        return CKPT_E_ARG;
    }
    int st = check_contents(c, reason, sizeof reason);
    if (st != CKPT_OK) {
        io_h5_errf(err, errlen, "cannot save checkpoint %s: %s", path, reason);
        return st;
    }
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        io_h5_errf(err, errlen, "cannot save checkpoint %s: path too long", path);
        return CKPT_E_ARG;
    }
    dir_of(path, dir, sizeof dir);

    atomic_fetch_add(&saves_in_flight, 1);
    void *image = NULL;
    size_t size = 0;
    int renamed = 0, fd = -1;
    st = CKPT_E_IO;
    unlink(tmp); /* a leftover of an earlier process that had our pid */
    /* The temp file first: an unwritable directory is reported before any work. */
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        io_h5_errf(reason, sizeof reason,
                   "cannot create temp file %s (%s); check that %s exists and is writable", tmp,
                   strerror(errno), dir);
        goto fail;
    }
    if (build_image(c, &image, &size, reason, sizeof reason) < 0 ||
        write_fd(fd, tmp, image, size, reason, sizeof reason) < 0)
        goto fail;
    free(image);
    image = NULL;
    int closed = close(fd);
    fd = -1;
    if (closed < 0) {
        io_h5_errf(reason, sizeof reason, "cannot close %s: %s (disk full?)", tmp, strerror(errno));
        goto fail;
    }
    if (rename(tmp, path) < 0) {
        io_h5_errf(reason, sizeof reason, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        goto fail;
    }
    renamed = 1;
    /* rename is atomic but only durable once the directory entry is on disk. */
    if (fsync_path(dir, 1) < 0) {
        io_h5_errf(reason, sizeof reason,
                   "the file is complete, but fsync of directory %s failed (%s): it may not "
                   "survive a power loss",
                   dir, strerror(errno));
        goto fail;
    }
    atomic_fetch_sub(&saves_in_flight, 1);
    return CKPT_OK;
fail:
    free(image);
    if (fd >= 0) close(fd);
    if (!renamed) unlink(tmp);
    atomic_fetch_sub(&saves_in_flight, 1);
    io_h5_errf(err, errlen, "cannot save checkpoint %s: %s%s", path, reason,
               renamed ? "" : "; the previous checkpoints are untouched");
    return st;
}

/* ---- open, header, state --------------------------------------------------------------------- */

/* Opens path read-only and checks format and version. reason gets the bare cause. */
static int open_checkpoint(const char *path, hid_t *file_out, int64_t *version, char *reason,
                           size_t rlen) {
    *file_out = -1;
    io_h5_quiet();
    if (access(path, R_OK) != 0) {
        io_h5_errf(reason, rlen, "cannot read the file: %s", strerror(errno));
        return CKPT_E_OPEN;
    }
    htri_t is_h5 = H5Fis_hdf5(path);
    if (is_h5 == 0) {
        io_h5_errf(reason, rlen, "not an HDF5 file");
        return CKPT_E_OPEN;
    }
    hid_t fapl = ckpt_fapl();
    hid_t file = fapl < 0 ? -1 : H5Fopen(path, H5F_ACC_RDONLY, fapl);
    char h5[256];
    io_h5_last_error(h5, sizeof h5); /* before the next API call clears the stack */
    io_h5_close(fapl);
    if (file < 0) {
        io_h5_errf(reason, rlen,
                   "the HDF5 file is truncated or damaged (HDF5: %s); it was probably cut short "
                   "by a killed writer or a partial copy: use an older checkpoint",
                   h5);
        return CKPT_E_OPEN;
    }
    char *format = NULL, sub[256];
    int st = CKPT_E_FORMAT;
    if (io_h5_attr_read_str(file, "format", &format, sub, sizeof sub) < 0) {
        io_h5_errf(reason, rlen, "an HDF5 file but not a gdn checkpoint (root %s)", sub);
        goto fail;
    }
    if (strcmp(format, CKPT_FORMAT) != 0) {
        io_h5_errf(reason, rlen, "root attribute format is \"%.64s\", expected \"%s\"", format,
                   CKPT_FORMAT);
        goto fail;
    }
    if (io_h5_attr_read_i64(file, "format_version", version, sub, sizeof sub) < 0) {
        io_h5_errf(reason, rlen, "a gdn checkpoint without a readable format_version (root %s)",
                   sub);
        goto fail;
    }
    if (*version < 1 || *version > CKPT_FORMAT_VERSION) {
        io_h5_errf(reason, rlen,
                   "format_version is %lld but this gdn reads versions 1 to %d: use a gdn "
                   "release that reads it",
                   (long long)*version, CKPT_FORMAT_VERSION);
        goto fail;
    }
    int unprotected = 0;
    st = ckpt_meta_verify(file, *version, &unprotected, reason, rlen);
    if (st != CKPT_OK) goto fail;
    if (unprotected) ckpt_meta_unprotected_seen = 1;
    free(format);
    *file_out = file;
    return CKPT_OK;
fail:
    free(format);
    H5Fclose(file);
    return st;
}

/* /state: the rng vector and every int64 attribute. */
typedef struct {
    ckpt_info *info;
    char *reason;
    size_t rlen;
} state_ctx;

static herr_t read_state_attr(hid_t g, const char *name, const H5A_info_t *ainfo, void *data) {
    (void)ainfo;
    state_ctx *ctx = data;
    ckpt_info *info = ctx->info;
    if (info->n_state >= CKPT_STATE_MAX || strlen(name) >= CKPT_KV_NAME_MAX) {
        io_h5_errf(ctx->reason, ctx->rlen, "/state holds too many values or too long a name (%s)",
                   name);
        return -1;
    }
    ckpt_kv *kv = &info->state[info->n_state];
    char sub[256];
    if (io_h5_attr_read_i64(g, name, &kv->value, sub, sizeof sub) < 0) {
        io_h5_errf(ctx->reason, ctx->rlen, "/state: %s", sub);
        return -1;
    }
    snprintf(kv->name, sizeof kv->name, "%s", name);
    info->n_state++;
    return 0;
}

/* Field f of /model_config into m. A field the file lacks is an error, unless checkpoints
 * written before it existed lack it (optional): then it is the default. A string must pass its
 * field's check (n_layers, read before, decides the mixer pattern's length). */
static int read_model_field(hid_t g, const gdn_config_field *f, gdn_config *m, char *sub,
                            size_t sublen) {
    char *dst = (char *)m + f->offset;
    if (f->optional) {
        int there = H5Aexists(g, f->name);
        if (there < 0) {
            snprintf(sub, sublen, "cannot check for attribute %s", f->name);
            return -1;
        }
        if (!there) {
            gdn_config d;
            gdn_config_defaults(&d);
            memcpy(dst, (const char *)&d + f->offset, f->size);
            return 0;
        }
    }
    if (f->type == GDN_FIELD_DOUBLE) return io_h5_attr_read_f64(g, f->name, (double *)dst, sub, sublen);
    if (f->type == GDN_FIELD_STR) {
        char *s = NULL, why[400];
        if (io_h5_attr_read_str(g, f->name, &s, sub, sublen) < 0) return -1;
        gdn_config one = *m;
        int rc = 0;
        if (strlen(s) >= f->size) {
            snprintf(sub, sublen, "attribute %s is longer than %zu characters", f->name, f->size - 1);
            rc = -1;
        } else {
            memcpy((char *)&one + f->offset, s, strlen(s) + 1);
            rc = gdn_config_check_field(&one, f, why, sizeof why);
            if (rc < 0) snprintf(sub, sublen, "attribute %.230s", why);
            else memcpy(dst, s, strlen(s) + 1);
        }
        free(s);
        return rc;
    }
    int64_t iv;
    if (io_h5_attr_read_i64(g, f->name, &iv, sub, sublen) < 0) return -1;
    if (iv < INT_MIN || iv > INT_MAX) {
        snprintf(sub, sublen, "attribute %s is out of range (%lld)", f->name, (long long)iv);
        return -1;
    }
    *(int *)dst = (int)iv;
    return 0;
}

static int read_info_open(hid_t file, int64_t version, ckpt_info *info, char *reason, size_t rlen) {
    char sub[256];
    hid_t g = -1;
    memset(info, 0, sizeof *info);
    info->format_version = version;
    if (io_h5_attr_read_i64(file, "step", &info->step, sub, sizeof sub) < 0 ||
        io_h5_attr_read_i64(file, "tokens_seen", &info->tokens_seen, sub, sizeof sub) < 0 ||
        io_h5_attr_read_str(file, "config", &info->config_json, sub, sizeof sub) < 0) {
        io_h5_errf(reason, rlen, "root %s", sub);
        goto fail;
    }
    if ((g = H5Gopen2(file, "/model_config", H5P_DEFAULT)) < 0) {
        io_h5_errf(reason, rlen, "group /model_config is missing");
        goto fail;
    }
    for (int i = 0; i < GDN_CONFIG_N_FIELDS; i++)
        if (read_model_field(g, &gdn_config_fields[i], &info->model, sub, sizeof sub) < 0)
            goto model_fail;
    H5Gclose(g);

    if ((g = H5Gopen2(file, "/state", H5P_DEFAULT)) < 0) {
        io_h5_errf(reason, rlen, "group /state is missing");
        goto fail;
    }
    if (io_h5_read_u64_vec(g, "rng", &info->rng, &info->n_rng, sub, sizeof sub) < 0) {
        io_h5_errf(reason, rlen, "/state: %s", sub);
        goto fail;
    }
    info->state = calloc(CKPT_STATE_MAX, sizeof *info->state);
    if (!info->state) {
        io_h5_errf(reason, rlen, "out of memory");
        goto fail;
    }
    state_ctx ctx = {info, reason, rlen};
    hsize_t idx = 0;
    if (H5Aiterate2(g, H5_INDEX_NAME, H5_ITER_INC, &idx, read_state_attr, &ctx) < 0) {
        if (!reason[0]) io_h5_errf(reason, rlen, "cannot list the attributes of /state");
        goto fail;
    }
    H5Gclose(g);
    g = -1;
    htri_t m = H5Lexists(file, "/optim", H5P_DEFAULT);
    info->has_optim = m > 0 && H5Lexists(file, "/optim/m", H5P_DEFAULT) > 0 &&
                      H5Lexists(file, "/optim/v", H5P_DEFAULT) > 0;
    return CKPT_OK;
model_fail:
    io_h5_errf(reason, rlen, "/model_config: %s", sub);
fail:
    io_h5_close(g);
    ckpt_info_free(info);
    return CKPT_E_FORMAT;
}

static int read_info_direct(const char *path, ckpt_info *info, char *err, size_t errlen) {
    char reason[1024] = "";
    hid_t file;
    int64_t version;
    memset(info, 0, sizeof *info);
    int st = open_checkpoint(path, &file, &version, reason, sizeof reason);
    if (st == CKPT_OK) {
        st = read_info_open(file, version, info, reason, sizeof reason);
        H5Fclose(file);
    }
    if (st != CKPT_OK) io_h5_errf(err, errlen, "%s: %s", path, reason);
    return st;
}

/* ---- load -------------------------------------------------------------------------------------
 */

/* Reads every table tensor from group `where` into buf and checks shape and crc32. */
static int load_tensors(hid_t file, const char *where, const gdn_param_table *t, float *buf,
                        char *reason, size_t rlen) {
    char sub[512];
    hid_t g = H5Gopen2(file, where, H5P_DEFAULT);
    if (g < 0) {
        io_h5_errf(reason, rlen, "group %s is missing", where);
        return CKPT_E_TENSOR;
    }
    int st = CKPT_E_TENSOR;
    for (int i = 0; i < t->n; i++) {
        const gdn_param *p = &t->p[i];
        if (io_h5_exists(g, p->name) != 1) {
            io_h5_errf(reason, rlen,
                       "dataset %s/%s is missing: the checkpoint was written for a different "
                       "model definition",
                       where, p->name);
            goto fail;
        }
        hsize_t shape[3];
        for (int d = 0; d < p->ndim; d++)
            shape[d] = (hsize_t)p->shape[d];
        float *x = buf + p->offset;
        hid_t dset = io_h5_read_f32(g, p->name, p->ndim, shape, x, sub, sizeof sub);
        if (dset < 0) {
            io_h5_errf(reason, rlen, "%s: %s", where, sub);
            goto fail;
        }
        uint32_t stored;
        int rc = io_h5_attr_read_u32(dset, "crc32", &stored, sub, sizeof sub);
        H5Dclose(dset);
        if (rc < 0) {
            io_h5_errf(reason, rlen, "dataset %s/%s: %s", where, p->name, sub);
            goto fail;
        }
        uint32_t actual = crc_f32(x, p->numel);
        if (actual != stored) {
            io_h5_errf(reason, rlen,
                       "checksum mismatch in %s/%s (stored crc32 0x%08x, data 0x%08x): the file is "
                       "corrupt; use an older checkpoint",
                       where + 1, p->name, stored, actual);
            st = CKPT_E_CHECKSUM;
            goto fail;
        }
    }
    H5G_info_t gi;
    if (H5Gget_info(g, &gi) < 0) {
        io_h5_errf(reason, rlen, "cannot list group %s", where);
        goto fail;
    }
    if (gi.nlinks != (hsize_t)t->n) {
        /* All table tensors are present, so at least one link is not in the table. */
        for (hsize_t k = 0; k < gi.nlinks; k++) {
            char name[GDN_PARAM_NAME_MAX + 1] = "";
            if (H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, k, name, sizeof name,
                                   H5P_DEFAULT) < 0)
                break;
            int known = 0;
            for (int i = 0; i < t->n && !known; i++)
                known = strcmp(t->p[i].name, name) == 0;
            if (!known) {
                io_h5_errf(reason, rlen,
                           "%s/%s is not a tensor of this run's model: the checkpoint was written "
                           "for a different model definition",
                           where, name);
                goto fail;
            }
        }
        io_h5_errf(reason, rlen, "group %s holds %llu objects, this model has %d tensors", where,
                   (unsigned long long)gi.nlinks, t->n);
        goto fail;
    }
    H5Gclose(g);
    return CKPT_OK;
fail:
    H5Gclose(g);
    return st;
}

static int load_direct(const char *path, const gdn_config *expect_model,
                       const gdn_param_table *table, float *params, float *m, float *v,
                       ckpt_info *info, char *err, size_t errlen) {
    char reason[2048] = "";
    ckpt_info local;
    ckpt_info *inf = info ? info : &local;
    memset(inf, 0, sizeof *inf);
    if (!path || !table || !params || (m == NULL) != (v == NULL)) {
        io_h5_errf(err, errlen,
                   "ckpt_load: path, table and params are required; m and v go "
                   "together");
        return CKPT_E_ARG;
    }
    hid_t file;
    int64_t version;
    int st = open_checkpoint(path, &file, &version, reason, sizeof reason);
    if (st != CKPT_OK) goto out;
    st = read_info_open(file, version, inf, reason, sizeof reason);
    if (st != CKPT_OK) goto close;
    if (expect_model) {
        char diff[1536];
        if (gdn_config_diff(&inf->model, expect_model, "checkpoint", 0, diff, sizeof diff) > 0) {
            io_h5_errf(reason, sizeof reason,
                       "model configuration differs from this run: %s. Use the checkpoint's model "
                       "settings, or a new run directory for a new model",
                       diff);
            st = CKPT_E_MODEL;
            goto close;
        }
    }
    if (m && !inf->has_optim) {
        io_h5_errf(reason, sizeof reason,
                   "it holds no optimizer state (/optim): it is weights-only; initialise from it "
                   "instead of resuming");
        st = CKPT_E_TENSOR;
        goto close;
    }
    st = load_tensors(file, "/params", table, params, reason, sizeof reason);
    if (st == CKPT_OK && m) st = load_tensors(file, "/optim/m", table, m, reason, sizeof reason);
    if (st == CKPT_OK && m) st = load_tensors(file, "/optim/v", table, v, reason, sizeof reason);
close:
    H5Fclose(file);
out:
    if (st != CKPT_OK) {
        ckpt_info_free(inf);
        io_h5_errf(err, errlen, "%s: %s", path, reason);
    } else if (!info) {
        ckpt_info_free(&local);
    }
    return st;
}

/* ---- verify -----------------------------------------------------------------------------------
 */

typedef struct {
    char **names;
    int n, cap;
} name_list;

static void names_free(name_list *l) {
    for (int i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
    memset(l, 0, sizeof *l);
}

static herr_t collect_name(hid_t g, const char *name, const H5L_info_t *li, void *data) {
    (void)g;
    (void)li;
    name_list *l = data;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        char **nn = realloc(l->names, (size_t)cap * sizeof *nn);
        if (!nn) return -1;
        l->names = nn;
        l->cap = cap;
    }
    if (!(l->names[l->n] = strdup(name))) return -1;
    l->n++;
    return 0;
}

/* Link names of g in creation order when tracked, else by name. */
static int list_links(hid_t g, name_list *l) {
    hsize_t idx = 0;
    if (H5Literate(g, H5_INDEX_CRT_ORDER, H5_ITER_INC, &idx, collect_name, l) >= 0) return 0;
    names_free(l);
    idx = 0;
    return H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_name, l) < 0 ? -1 : 0;
}

typedef struct {
    ckpt_tensor_fn fn;
    void *user;
    float *buf;
    size_t cap;
    int n_bad;
    int first_status;
    char first[1024];
    int stopped;
} verify_ctx;

/* Reads and checks one dataset, hands it to the callback, records a failure. */
static void verify_one(hid_t g, const char *where, const char *name, verify_ctx *ctx) {
    char path[GDN_PARAM_NAME_MAX + 80], problem[512] = "";
    ckpt_tensor_view tv;
    memset(&tv, 0, sizeof tv);
    snprintf(path, sizeof path, "%s/%s", where, name);
    tv.name = path;
    tv.status = CKPT_E_TENSOR;
    hid_t dset = -1, type = -1, space = -1;
    if ((dset = H5Dopen2(g, name, H5P_DEFAULT)) < 0) {
        snprintf(problem, sizeof problem, "not a readable dataset");
        goto report;
    }
    type = H5Dget_type(dset);
    space = H5Dget_space(dset);
    int rank = space < 0 ? -1 : H5Sget_simple_extent_ndims(space);
    hsize_t dims[H5S_MAX_RANK];
    if (type < 0 || H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != 4 || rank < 0 ||
        rank > CKPT_MAX_NDIM || H5Sget_simple_extent_dims(space, dims, NULL) < 0) {
        snprintf(problem, sizeof problem, "not an fp32 tensor of rank <= %d", CKPT_MAX_NDIM);
        goto report;
    }
    tv.ndim = rank;
    tv.numel = 1;
    for (int d = 0; d < rank; d++) {
        tv.shape[d] = (int64_t)dims[d];
        tv.numel *= (size_t)dims[d];
    }
    if (tv.numel > ctx->cap) {
        float *nb = realloc(ctx->buf, tv.numel * sizeof(float));
        if (!nb) {
            snprintf(problem, sizeof problem, "out of memory for %zu values", tv.numel);
            goto report;
        }
        ctx->buf = nb;
        ctx->cap = tv.numel;
    }
    if (tv.numel > 0 &&
        H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, ctx->buf) < 0) {
        snprintf(problem, sizeof problem, "its data cannot be read (file truncated or damaged)");
        goto report;
    }
    char sub[256];
    if (io_h5_attr_read_u32(dset, "crc32", &tv.crc_stored, sub, sizeof sub) < 0) {
        snprintf(problem, sizeof problem, "%s", sub);
        goto report;
    }
    tv.data = ctx->buf;
    tv.crc_actual = crc_f32(ctx->buf, tv.numel);
    if (tv.crc_actual != tv.crc_stored) {
        tv.status = CKPT_E_CHECKSUM;
        snprintf(problem, sizeof problem, "checksum mismatch (stored crc32 0x%08x, data 0x%08x)",
                 tv.crc_stored, tv.crc_actual);
    } else {
        tv.status = CKPT_OK;
    }
report:
    io_h5_close(space);
    io_h5_close(type);
    io_h5_close(dset);
    tv.problem = problem;
    if (tv.status != CKPT_OK) {
        if (ctx->n_bad++ == 0) {
            ctx->first_status = tv.status;
            if (tv.status == CKPT_E_CHECKSUM)
                snprintf(ctx->first, sizeof ctx->first,
                         "checksum mismatch in %s (stored crc32 "
                         "0x%08x, data 0x%08x)",
                         path, tv.crc_stored, tv.crc_actual);
            else
                snprintf(ctx->first, sizeof ctx->first, "%s: %s", path, problem);
        }
    }
    if (ctx->fn && ctx->fn(&tv, ctx->user) != 0) ctx->stopped = 1;
}

static int verify_direct(const char *path, ckpt_tensor_fn fn, void *user, char *err,
                         size_t errlen) {
    static const char *groups[] = {"params", "optim/m", "optim/v"};
    char reason[1536] = "";
    hid_t file;
    int64_t version;
    ckpt_info info;
    verify_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.fn = fn;
    ctx.user = user;
    int st = open_checkpoint(path, &file, &version, reason, sizeof reason);
    if (st != CKPT_OK) goto out;
    st = read_info_open(file, version, &info, reason, sizeof reason);
    if (st != CKPT_OK) goto close;
    ckpt_info_free(&info);
    for (int k = 0; k < 3 && !ctx.stopped; k++) {
        if (k > 0 && H5Lexists(file, "optim", H5P_DEFAULT) <= 0) break; /* weights-only */
        hid_t g = H5Lexists(file, groups[k], H5P_DEFAULT) > 0
                      ? H5Gopen2(file, groups[k], H5P_DEFAULT)
                      : -1;
        name_list names = {0};
        if (g < 0 || list_links(g, &names) < 0) {
            io_h5_close(g);
            names_free(&names);
            io_h5_errf(reason, sizeof reason, "group /%s is missing or unreadable", groups[k]);
            st = k == 0 ? CKPT_E_FORMAT : CKPT_E_TENSOR;
            goto close;
        }
        for (int i = 0; i < names.n && !ctx.stopped; i++)
            verify_one(g, groups[k], names.names[i], &ctx);
        names_free(&names);
        H5Gclose(g);
    }
    if (ctx.n_bad > 0) {
        st = ctx.first_status;
        if (ctx.n_bad > 1)
            io_h5_errf(reason, sizeof reason, "%s (and %d more bad tensors)", ctx.first,
                       ctx.n_bad - 1);
        else
            io_h5_errf(reason, sizeof reason, "%s", ctx.first);
    }
close:
    H5Fclose(file);
out:
    free(ctx.buf);
    if (st != CKPT_OK) io_h5_errf(err, errlen, "%s: %s", path, reason);
    return st;
}

/* ---- the public readers: each runs first in a child process (see ckpt_guard.c) ------------ */

typedef struct {
    const char *path;
    ckpt_info *info;
    const gdn_config *expect_model;
    const gdn_param_table *table;
    float *params, *m, *v;
    ckpt_tensor_fn fn; /* ckpt_verify's callback (the child runs it too, output discarded) */
    void *user;
} reader_args;

static int read_info_job(void *arg, char *err, size_t errlen) {
    reader_args *a = arg;
    int st = read_info_direct(a->path, a->info, err, errlen);
    if (st == CKPT_OK) ckpt_info_free(a->info);
    return st;
}

int ckpt_read_info(const char *path, ckpt_info *info, char *err, size_t errlen) {
    memset(info, 0, sizeof *info);
    if (!path) {
        io_h5_errf(err, errlen, "ckpt_read_info: no path given");
        return CKPT_E_ARG;
    }
    reader_args a = {.path = path, .info = info};
    int st = ckpt_guard_run(path, read_info_job, &a, err, errlen);
    return st != CKPT_OK ? st : read_info_direct(path, info, err, errlen);
}

static int load_job(void *arg, char *err, size_t errlen) {
    reader_args *a = arg;
    ckpt_info info;
    return load_direct(a->path, a->expect_model, a->table, a->params, a->m, a->v, &info, err,
                       errlen);
}

int ckpt_load(const char *path, const gdn_config *expect_model, const gdn_param_table *table,
              float *params, float *m, float *v, ckpt_info *info, char *err, size_t errlen) {
    if (info) memset(info, 0, sizeof *info);
    if (!path || !table || !params || (m == NULL) != (v == NULL))
        return load_direct(path, expect_model, table, params, m, v, info, err, errlen);
    reader_args a = {.path = path, .expect_model = expect_model, .table = table,
                     .params = params, .m = m, .v = v};
    int st = ckpt_guard_run(path, load_job, &a, err, errlen);
    return st != CKPT_OK ? st : load_direct(path, expect_model, table, params, m, v, info, err, errlen);
}

static int verify_job(void *arg, char *err, size_t errlen) {
    reader_args *a = arg;
    return verify_direct(a->path, a->fn, a->user, err, errlen);
}

int ckpt_verify(const char *path, ckpt_tensor_fn fn, void *user, char *err, size_t errlen) {
    if (!path) {
        io_h5_errf(err, errlen, "ckpt_verify: no path given");
        return CKPT_E_ARG;
    }
    reader_args a = {.path = path, .fn = fn, .user = user};
    int st = ckpt_guard_run(path, verify_job, &a, err, errlen);
    /* A failed child already said what is wrong. Only a child that read everything is repeated
     * here (with the callback, for its per-tensor report): one that succeeded, or one that read
     * every tensor and found a checksum that differs. A child that met damaged metadata may have
     * taken a path this process would not (its memory is bounded, so a corrupt size fails there
     * and would be allocated here), so its answer is all. */
    if ((st != CKPT_OK && st != CKPT_E_CHECKSUM) || !fn) return st;
    return verify_direct(path, fn, user, err, errlen);
}
