/* Small HDF5 helpers: fp32 datasets with a shape, scalar attributes (variable-length UTF-8
 * strings, int64, uint32, double) and uint64 vectors. Every function returns 0 on success and
 * -1 on failure with a message in err (naming the object); none of them prints or exits.
 * Files written with these helpers open in h5py with no special code: strings come back as
 * str (variable-length UTF-8, not fixed-length bytes), numbers as NumPy scalars. */
#ifndef GDN_IO_H5UTIL_H
#define GDN_IO_H5UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <hdf5.h>

/* Evaluates an HDF5 call (herr_t or hid_t); on a negative result formats the message into
 * err/errlen (which must be in scope) and jumps to the enclosing function's `fail` label.
 * (HDF5 itself defines H5CHECK, hence the prefix.) */
#define IO_H5_TRY(expr, ...)                                                                       \
    do {                                                                                           \
        if ((expr) < 0) {                                                                          \
            io_h5_errf(err, errlen, __VA_ARGS__);                                                  \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* snprintf into err when err is not NULL; never overflows, always NUL-terminates. */
void io_h5_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Turns off HDF5's automatic error-stack printing for this thread, so that callers report
 * their own messages (a failed open of a truncated file would otherwise dump ~20 lines). */
void io_h5_quiet(void);

/* The innermost message of HDF5's current error stack (e.g. "truncated file: eof = ..."),
 * or "" when there is none. Returns buf. */
const char *io_h5_last_error(char *buf, size_t buflen);

/* Closes an id if it is valid (>= 0); ignores -1. Returns the close status. */
herr_t io_h5_close(hid_t id);

/* Link `name` exists directly under loc (no error stack noise). 1 yes, 0 no, -1 error. */
int io_h5_exists(hid_t loc, const char *name);

/* Creates dataset loc/name as little-endian fp32, contiguous, with dims shape[0..ndim) and
 * writes data (C order). ndim 0 writes a scalar. Object times are not stored, so equal
 * contents give equal bytes. Returns the open dataset id (caller closes) or -1. */
hid_t io_h5_write_f32(hid_t loc, const char *name, int ndim, const hsize_t *shape,
                      const float *data /* [prod(shape)] */, char *err, size_t errlen);

/* Opens dataset loc/name, checks it holds 4-byte IEEE floats with exactly dims shape[0..ndim),
 * reads it into out. Returns the open dataset id (caller closes) or -1. */
hid_t io_h5_read_f32(hid_t loc, const char *name, int ndim, const hsize_t *shape,
                     float *out /* [prod(shape)] */, char *err, size_t errlen);

/* Scalar attributes on obj (a file, group or dataset). Writing replaces nothing: the attribute
 * must not exist yet. Reading converts from any stored integer/float type of the same class. */
int io_h5_attr_write_str(hid_t obj, const char *name, const char *value, char *err, size_t errlen);
int io_h5_attr_write_i64(hid_t obj, const char *name, int64_t value, char *err, size_t errlen);
int io_h5_attr_write_u32(hid_t obj, const char *name, uint32_t value, char *err, size_t errlen);
int io_h5_attr_write_f64(hid_t obj, const char *name, double value, char *err, size_t errlen);
/* Reads a string attribute (variable- or fixed-length) into a malloced NUL-terminated copy. */
int io_h5_attr_read_str(hid_t obj, const char *name, char **value, char *err, size_t errlen);
int io_h5_attr_read_i64(hid_t obj, const char *name, int64_t *value, char *err, size_t errlen);
int io_h5_attr_read_u32(hid_t obj, const char *name, uint32_t *value, char *err, size_t errlen);
int io_h5_attr_read_f64(hid_t obj, const char *name, double *value, char *err, size_t errlen);

/* A 1-D uint64 dataset loc/name of length n (n may be 0), and its reader: *out is malloced
 * (NULL when n == 0), *n_out its length. */
int io_h5_write_u64_vec(hid_t loc, const char *name, const uint64_t *v /* [n] */, int n, char *err,
                        size_t errlen);
int io_h5_read_u64_vec(hid_t loc, const char *name, uint64_t **out, int *n_out, char *err,
                       size_t errlen);

/* Object-creation property list for groups/datasets that records no access/modify times. */
hid_t io_h5_untimed_dcpl(void);
hid_t io_h5_untimed_gcpl(void);

#endif
