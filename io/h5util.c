/* Small HDF5 helpers; see h5util.h. */
#include "io/h5util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void io_h5_errf(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

void io_h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

typedef struct {
    char *buf;
    size_t len;
} last_error_ctx;

static herr_t last_error_walk(unsigned n, const H5E_error2_t *e, void *data) {
    last_error_ctx *ctx = data;
    /* Upward walk: entry 0 is where the problem was detected, the most specific message. */
    if (n == 0 && e->desc) snprintf(ctx->buf, ctx->len, "%s", e->desc);
    return 0;
}

const char *io_h5_last_error(char *buf, size_t buflen) {
    if (!buf || buflen == 0) return buf;
    buf[0] = '\0';
    last_error_ctx ctx = {buf, buflen};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, last_error_walk, &ctx);
    return buf;
}

herr_t io_h5_close(hid_t id) {
    if (id < 0) return 0;
    switch (H5Iget_type(id)) {
    case H5I_FILE: return H5Fclose(id);
    case H5I_GROUP: return H5Gclose(id);
    case H5I_DATASET: return H5Dclose(id);
    case H5I_ATTR: return H5Aclose(id);
    case H5I_DATATYPE: return H5Tclose(id);
    case H5I_DATASPACE: return H5Sclose(id);
    case H5I_GENPROP_LST: return H5Pclose(id);
    default: return H5Idec_ref(id) < 0 ? -1 : 0;
    }
}

int io_h5_exists(hid_t loc, const char *name) {
    htri_t r = H5Lexists(loc, name, H5P_DEFAULT);
    return r < 0 ? -1 : (r > 0);
}

static hid_t untimed_plist(hid_t cls) {
    hid_t p = H5Pcreate(cls);
    if (p < 0) return -1;
    if (H5Pset_obj_track_times(p, 0) < 0) {
        H5Pclose(p);
        return -1;
    }
    return p;
}

hid_t io_h5_untimed_dcpl(void) { return untimed_plist(H5P_DATASET_CREATE); }
hid_t io_h5_untimed_gcpl(void) { return untimed_plist(H5P_GROUP_CREATE); }

static hid_t make_space(int ndim, const hsize_t *shape) {
    return ndim == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(ndim, shape, NULL);
}

hid_t io_h5_write_f32(hid_t loc, const char *name, int ndim, const hsize_t *shape,
                      const float *data, char *err, size_t errlen) {
    hid_t space = -1, dcpl = -1, dset = -1;
    IO_H5_TRY(space = make_space(ndim, shape), "dataset %s: cannot make a dataspace of rank %d",
              name, ndim);
    IO_H5_TRY(dcpl = io_h5_untimed_dcpl(), "dataset %s: cannot make a creation property list",
              name);
    IO_H5_TRY(dset = H5Dcreate2(loc, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
              "cannot create dataset %s (does it exist already?)", name);
    IO_H5_TRY(H5Dwrite(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
              "cannot write dataset %s (disk full?)", name);
    H5Pclose(dcpl);
    H5Sclose(space);
    return dset;
fail:
    io_h5_close(dset);
    io_h5_close(dcpl);
    io_h5_close(space);
    return -1;
}

hid_t io_h5_read_f32(hid_t loc, const char *name, int ndim, const hsize_t *shape, float *out,
                     char *err, size_t errlen) {
    hid_t dset = -1, type = -1, space = -1;
    IO_H5_TRY(dset = H5Dopen2(loc, name, H5P_DEFAULT), "cannot open dataset %s", name);
    IO_H5_TRY(type = H5Dget_type(dset), "dataset %s: cannot read its type", name);
    if (H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != 4) {
        io_h5_errf(err, errlen, "dataset %s is not fp32 (class %d, %zu bytes per element)", name,
                   (int)H5Tget_class(type), H5Tget_size(type));
        goto fail;
    }
    IO_H5_TRY(space = H5Dget_space(dset), "dataset %s: cannot read its shape", name);
    int rank = H5Sget_simple_extent_ndims(space);
    hsize_t dims[H5S_MAX_RANK];
    if (rank < 0 || H5Sget_simple_extent_dims(space, dims, NULL) < 0) {
        io_h5_errf(err, errlen, "dataset %s: cannot read its shape", name);
        goto fail;
    }
    int same = rank == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = dims[i] == shape[i];
    if (!same) {
        char got[128] = "", want[128] = "";
        size_t g = 0, w = 0;
        for (int i = 0; i < rank && g < sizeof got; i++)
            g += (size_t)snprintf(got + g, sizeof got - g, "%s%llu", i ? ", " : "",
                                  (unsigned long long)dims[i]);
        for (int i = 0; i < ndim && w < sizeof want; i++)
            w += (size_t)snprintf(want + w, sizeof want - w, "%s%llu", i ? ", " : "",
                                  (unsigned long long)shape[i]);
        io_h5_errf(err, errlen, "dataset %s has shape [%s], expected [%s]", name, got, want);
        goto fail;
    }
    IO_H5_TRY(H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out),
              "cannot read dataset %s (file truncated or damaged)", name);
    H5Sclose(space);
    H5Tclose(type);
    return dset;
fail:
    io_h5_close(space);
    io_h5_close(type);
    io_h5_close(dset);
    return -1;
}

/* Writes one scalar attribute of file type ftype from memory of type mtype. */
static int attr_write_scalar(hid_t obj, const char *name, hid_t ftype, hid_t mtype,
                             const void *value, char *err, size_t errlen) {
    hid_t space = -1, attr = -1;
    IO_H5_TRY(space = H5Screate(H5S_SCALAR), "attribute %s: cannot make a dataspace", name);
    IO_H5_TRY(attr = H5Acreate2(obj, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT),
              "cannot create attribute %s", name);
    IO_H5_TRY(H5Awrite(attr, mtype, value), "cannot write attribute %s", name);
    IO_H5_TRY(H5Aclose(attr), "cannot close attribute %s", name);
    H5Sclose(space);
    return 0;
fail:
    io_h5_close(attr);
    io_h5_close(space);
    return -1;
}

/* Opens attribute name on obj and checks it holds one element of the given type class. */
static hid_t attr_open_scalar(hid_t obj, const char *name, H5T_class_t cls, char *err,
                              size_t errlen) {
    hid_t attr = -1, type = -1, space = -1;
    htri_t there = H5Aexists(obj, name);
    if (there <= 0) {
        io_h5_errf(err, errlen, "attribute %s is missing", name);
        return -1;
    }
    IO_H5_TRY(attr = H5Aopen(obj, name, H5P_DEFAULT), "cannot open attribute %s", name);
    IO_H5_TRY(type = H5Aget_type(attr), "attribute %s: cannot read its type", name);
    IO_H5_TRY(space = H5Aget_space(attr), "attribute %s: cannot read its shape", name);
    if (H5Tget_class(type) != cls || H5Sget_simple_extent_npoints(space) != 1) {
        io_h5_errf(err, errlen, "attribute %s has the wrong type or is not a single value", name);
        goto fail;
    }
    H5Sclose(space);
    H5Tclose(type);
    return attr;
fail:
    io_h5_close(space);
    io_h5_close(type);
    io_h5_close(attr);
    return -1;
}

static int attr_read_scalar(hid_t obj, const char *name, H5T_class_t cls, hid_t mtype, void *value,
                            char *err, size_t errlen) {
    hid_t attr = attr_open_scalar(obj, name, cls, err, errlen);
    if (attr < 0) return -1;
    IO_H5_TRY(H5Aread(attr, mtype, value), "cannot read attribute %s", name);
    H5Aclose(attr);
    return 0;
fail:
    H5Aclose(attr);
    return -1;
}

int io_h5_attr_write_str(hid_t obj, const char *name, const char *value, char *err, size_t errlen) {
    hid_t type = -1;
    IO_H5_TRY(type = H5Tcopy(H5T_C_S1), "attribute %s: cannot make a string type", name);
    IO_H5_TRY(H5Tset_size(type, H5T_VARIABLE), "attribute %s: cannot make a string type", name);
    IO_H5_TRY(H5Tset_cset(type, H5T_CSET_UTF8), "attribute %s: cannot make a string type", name);
    /* A variable-length attribute is written from an array of char pointers. */
    const char *ptr = value ? value : "";
    if (attr_write_scalar(obj, name, type, type, &ptr, err, errlen) < 0) goto fail;
    H5Tclose(type);
    return 0;
fail:
    io_h5_close(type);
    return -1;
}

int io_h5_attr_read_str(hid_t obj, const char *name, char **value, char *err, size_t errlen) {
    hid_t attr = -1, ftype = -1, mtype = -1;
    *value = NULL;
    attr = attr_open_scalar(obj, name, H5T_STRING, err, errlen);
    if (attr < 0) return -1;
    IO_H5_TRY(ftype = H5Aget_type(attr), "attribute %s: cannot read its type", name);
    IO_H5_TRY(mtype = H5Tcopy(ftype), "attribute %s: cannot copy its type", name);
    htri_t vlen = H5Tis_variable_str(ftype);
    if (vlen > 0) {
        char *s = NULL;
        IO_H5_TRY(H5Aread(attr, mtype, &s), "cannot read attribute %s", name);
        *value = strdup(s ? s : "");
        H5free_memory(s);
    } else {
        size_t n = H5Tget_size(ftype);
        IO_H5_TRY(H5Tset_size(mtype, n + 1), "attribute %s: bad string size", name);
        IO_H5_TRY(H5Tset_strpad(mtype, H5T_STR_NULLTERM), "attribute %s: bad string type", name);
        char *s = calloc(n + 2, 1);
        if (!s) {
            io_h5_errf(err, errlen, "attribute %s: out of memory (%zu bytes)", name, n + 2);
            goto fail;
        }
        if (H5Aread(attr, mtype, s) < 0) {
            free(s);
            io_h5_errf(err, errlen, "cannot read attribute %s", name);
            goto fail;
        }
        *value = s;
    }
    if (!*value) {
        io_h5_errf(err, errlen, "attribute %s: out of memory", name);
        goto fail;
    }
    H5Tclose(mtype);
    H5Tclose(ftype);
    H5Aclose(attr);
    return 0;
fail:
    io_h5_close(mtype);
    io_h5_close(ftype);
    io_h5_close(attr);
    return -1;
}

int io_h5_attr_write_i64(hid_t obj, const char *name, int64_t value, char *err, size_t errlen) {
    return attr_write_scalar(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value, err, errlen);
}

int io_h5_attr_write_u32(hid_t obj, const char *name, uint32_t value, char *err, size_t errlen) {
    return attr_write_scalar(obj, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, &value, err, errlen);
}

int io_h5_attr_write_f64(hid_t obj, const char *name, double value, char *err, size_t errlen) {
    return attr_write_scalar(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value, err, errlen);
}

int io_h5_attr_read_i64(hid_t obj, const char *name, int64_t *value, char *err, size_t errlen) {
    return attr_read_scalar(obj, name, H5T_INTEGER, H5T_NATIVE_INT64, value, err, errlen);
}

int io_h5_attr_read_u32(hid_t obj, const char *name, uint32_t *value, char *err, size_t errlen) {
    return attr_read_scalar(obj, name, H5T_INTEGER, H5T_NATIVE_UINT32, value, err, errlen);
}

int io_h5_attr_read_f64(hid_t obj, const char *name, double *value, char *err, size_t errlen) {
    return attr_read_scalar(obj, name, H5T_FLOAT, H5T_NATIVE_DOUBLE, value, err, errlen);
}

int io_h5_write_u64_vec(hid_t loc, const char *name, const uint64_t *v, int n, char *err,
                        size_t errlen) {
    hid_t space = -1, dcpl = -1, dset = -1;
    hsize_t dim = (hsize_t)(n > 0 ? n : 0);
    IO_H5_TRY(space = H5Screate_simple(1, &dim, NULL), "dataset %s: cannot make a dataspace", name);
    IO_H5_TRY(dcpl = io_h5_untimed_dcpl(), "dataset %s: cannot make a property list", name);
    IO_H5_TRY(dset = H5Dcreate2(loc, name, H5T_STD_U64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
              "cannot create dataset %s", name);
    if (n > 0)
        IO_H5_TRY(H5Dwrite(dset, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v),
                  "cannot write dataset %s", name);
    IO_H5_TRY(H5Dclose(dset), "cannot close dataset %s", name);
    H5Pclose(dcpl);
    H5Sclose(space);
    return 0;
fail:
    io_h5_close(dset);
    io_h5_close(dcpl);
    io_h5_close(space);
    return -1;
}

int io_h5_read_u64_vec(hid_t loc, const char *name, uint64_t **out, int *n_out, char *err,
                       size_t errlen) {
    hid_t dset = -1, type = -1, space = -1;
    uint64_t *buf = NULL;
    *out = NULL;
    *n_out = 0;
    IO_H5_TRY(dset = H5Dopen2(loc, name, H5P_DEFAULT), "cannot open dataset %s", name);
    IO_H5_TRY(type = H5Dget_type(dset), "dataset %s: cannot read its type", name);
    IO_H5_TRY(space = H5Dget_space(dset), "dataset %s: cannot read its shape", name);
    hssize_t n = H5Sget_simple_extent_npoints(space);
    if (H5Tget_class(type) != H5T_INTEGER || H5Sget_simple_extent_ndims(space) != 1 || n < 0 ||
        n > (1 << 20)) {
        io_h5_errf(err, errlen, "dataset %s is not a vector of integers (at most 2^20)", name);
        goto fail;
    }
    if (n > 0) {
        buf = malloc((size_t)n * sizeof *buf);
        if (!buf) {
            io_h5_errf(err, errlen, "dataset %s: out of memory", name);
            goto fail;
        }
        IO_H5_TRY(H5Dread(dset, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf),
                  "cannot read dataset %s", name);
    }
    H5Sclose(space);
    H5Tclose(type);
    H5Dclose(dset);
    *out = buf;
    *n_out = (int)n;
    return 0;
fail:
    free(buf);
    io_h5_close(space);
    io_h5_close(type);
    io_h5_close(dset);
    return -1;
}
