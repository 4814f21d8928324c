/* HDF5 input and output of the gdn op operators (see op_io.h). */
#include "train/op_io.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "io/h5util.h"
#include "model/check.h"
#include "model/cpu/doc.h"

double *op_read_array(hid_t file, const char *path, const char *name, int rank,
                      const long long *expect, const char *expect_text, long long *dims,
                      int optional) {
    char err[512];
    int exists = io_h5_exists(file, name);
    if (exists <= 0) {
        if (optional) return NULL;
        GDN_DIE("%s: missing dataset '%s' (expected shape %s)", path, name, expect_text);
    }
    hid_t ds = H5Dopen2(file, name, H5P_DEFAULT), sp = -1, ty = -1;
    if (ds < 0) GDN_DIE("%s: cannot open dataset '%s': %s", path, name, io_h5_last_error(err, sizeof err));
    ty = H5Dget_type(ds);
    if (H5Tget_class(ty) != H5T_FLOAT)
        GDN_DIE("%s: dataset '%s' must hold fp32 or fp64 numbers", path, name);
    sp = H5Dget_space(ds);
    hsize_t hd[8];
    size_t idx_tmp[8];
    int nd = H5Sget_simple_extent_ndims(sp);
    if (nd != rank) GDN_DIE("%s: dataset '%s' has %d dimensions, expected shape %s", path, name, nd, expect_text);
    H5Sget_simple_extent_dims(sp, hd, NULL);
    size_t count = 1;
    for (int i = 0; i < rank; i++) {
        if (expect[i] >= 0 && (long long)hd[i] != expect[i]) {
            char got[128];
            int n = 0;
            for (int j = 0; j < rank; j++)
                n += snprintf(got + n, sizeof got - (size_t)n, "%s%llu", j ? "," : "[", (unsigned long long)hd[j]);
            snprintf(got + n, sizeof got - (size_t)n, "]");
            GDN_DIE("%s: dataset '%s' has shape %s, expected %s", path, name, got, expect_text);
        }
        if (hd[i] == 0) GDN_DIE("%s: dataset '%s' has an empty dimension", path, name);
        /* shapes travel as int and the copy is count doubles: refuse what would not fit */
        if (hd[i] > INT_MAX || __builtin_mul_overflow(count, (size_t)hd[i], &count) ||
            count > OP_MAX_ELEMS)
            GDN_DIE("%s: dataset '%s' is too large (dimension %d is %llu; at most %llu elements "
                    "in all)", path, name, i, (unsigned long long)hd[i], (unsigned long long)OP_MAX_ELEMS);
        dims[i] = (long long)hd[i];
    }
    double *out = GDN_MALLOC(count * sizeof *out);
    if (H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
        GDN_DIE("%s: cannot read dataset '%s': %s", path, name, io_h5_last_error(err, sizeof err));
    /* NaN or Inf in would give non-finite outputs that look like a result */
    for (size_t i = 0; i < count; i++)
        if (!isfinite(out[i])) {
            char at[128];
            size_t rest = i;
            int n = 0;
            for (int d = rank - 1; d >= 0; d--) { /* the multi-index, last dimension fastest */
                idx_tmp[d] = rest % (size_t)hd[d];
                rest /= (size_t)hd[d];
            }
            for (int d = 0; d < rank; d++)
                n += snprintf(at + n, sizeof at - (size_t)n, "%s%zu", d ? "," : "[", idx_tmp[d]);
            snprintf(at + n, sizeof at - (size_t)n, "]");
            GDN_DIE("%s: dataset '%s' holds %s at element %s (flat index %zu): the inputs must be "
                    "finite", path, name, isnan(out[i]) ? "NaN" : "an infinity", at, i);
        }
    io_h5_close(ty);
    io_h5_close(sp);
    io_h5_close(ds);
    return out;
}

int *op_read_cu_seqlens(hid_t file, const char *path, int B, int T) {
    char err[512];
    if (io_h5_exists(file, "cu_seqlens") <= 0) return NULL;
    hid_t ds = H5Dopen2(file, "cu_seqlens", H5P_DEFAULT);
    if (ds < 0) GDN_DIE("%s: cannot open dataset 'cu_seqlens': %s", path, io_h5_last_error(err, sizeof err));
    hid_t ty = H5Dget_type(ds), sp = H5Dget_space(ds);
    if (H5Tget_class(ty) != H5T_INTEGER)
        GDN_DIE("%s: dataset 'cu_seqlens' must hold integers (document offsets 0 ... T = %d)", path, T);
    hsize_t n = 0;
    if (H5Sget_simple_extent_ndims(sp) != 1)
        GDN_DIE("%s: dataset 'cu_seqlens' must be 1-D [n_docs + 1]", path);
    H5Sget_simple_extent_dims(sp, &n, NULL);
    if (n < 2 || n > (hsize_t)T + 1)
        GDN_DIE("%s: dataset 'cu_seqlens' has %llu entries; it needs 2 to T + 1 = %d (0, the ends of the "
                "documents, T)", path, (unsigned long long)n, T + 1);
    long long *cu = GDN_MALLOC((size_t)n * sizeof *cu);
    if (H5Dread(ds, H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, cu) < 0)
        GDN_DIE("%s: cannot read dataset 'cu_seqlens': %s", path, io_h5_last_error(err, sizeof err));
    if (cu[0] != 0 || cu[n - 1] != T)
        GDN_DIE("%s: dataset 'cu_seqlens' runs from %lld to %lld; it must run from 0 to T = %d", path, cu[0],
                cu[n - 1], T);
    for (hsize_t i = 1; i < n; i++)
        if (cu[i] <= cu[i - 1])
            GDN_DIE("%s: dataset 'cu_seqlens' is not increasing at entry %llu (%lld after %lld): every "
                    "document needs at least one token", path, (unsigned long long)i, cu[i], cu[i - 1]);
    unsigned char *starts = GDN_CALLOC((size_t)B * T, 1);
    for (int b = 0; b < B; b++)
        for (hsize_t i = 1; i + 1 < n; i++) starts[(size_t)b * T + cu[i]] = 1;
    int *doc = GDN_MALLOC((size_t)B * T * sizeof *doc);
    gdn_doc_build(doc, starts, NULL, B, T);
    free(starts);
    free(cu);
    io_h5_close(sp);
    io_h5_close(ty);
    io_h5_close(ds);
    return doc;
}

float *op_to_f32(const double *x, size_t n) {
    if (!x) return NULL;
    float *y = GDN_MALLOC(n * sizeof *y);
    for (size_t i = 0; i < n; i++) y[i] = (float)x[i];
    return y;
}

void op_write_f32(hid_t file, const char *path, const char *name, int rank, const long long *dims,
                  const float *data) {
    char err[512];
    hsize_t hd[4];
    for (int i = 0; i < rank; i++) hd[i] = (hsize_t)dims[i];
    hid_t ds = io_h5_write_f32(file, name, rank, hd, data, err, sizeof err);
    if (ds < 0) GDN_DIE("%s: %s", path, err);
    io_h5_close(ds);
}

int op_read_scale(hid_t file, const char *path, double *scale) {
    htri_t exists = H5Aexists(file, "scale");
    if (exists == 0) return 0;
    char err[512];
    hid_t at = exists > 0 ? H5Aopen(file, "scale", H5P_DEFAULT) : -1;
    if (at < 0) {
        fprintf(stderr, "gdn op: %s: cannot read attribute 'scale': %s\n", path, io_h5_last_error(err, sizeof err));
        return -1;
    }
    hid_t ty = H5Aget_type(at), sp = H5Aget_space(at);
    H5T_class_t cls = ty >= 0 ? H5Tget_class(ty) : H5T_NO_CLASS;
    H5S_class_t scls = sp >= 0 ? H5Sget_simple_extent_type(sp) : H5S_NO_CLASS;
    int rc = -1;
    double v = 0.0;
    if (cls != H5T_INTEGER && cls != H5T_FLOAT)
        fprintf(stderr, "gdn op: %s: attribute 'scale' must be a number (an integer or float), not %s\n", path,
                cls == H5T_STRING ? "a string"
                : cls == H5T_ENUM ? "an enumeration (h5py stores a bool so)"
                : cls == H5T_ARRAY ? "an array"
                                   : "a non-numeric type");
    else if (scls != H5S_SCALAR)
        fprintf(stderr, "gdn op: %s: attribute 'scale' must be a single number, not an array\n", path);
    else if (H5Aread(at, H5T_NATIVE_DOUBLE, &v) < 0)
        fprintf(stderr, "gdn op: %s: cannot read attribute 'scale': %s\n", path, io_h5_last_error(err, sizeof err));
    else if (!isfinite(v))
        fprintf(stderr, "gdn op: %s: attribute 'scale' is %s: it must be a finite number\n", path,
                isnan(v) ? "NaN" : "infinite");
    else {
        *scale = v;
        rc = 0;
    }
    io_h5_close(sp);
    io_h5_close(ty);
    io_h5_close(at);
    return rc;
}

int op_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

