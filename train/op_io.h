/* HDF5 input and output of the `gdn op` operators (train/cmd_op.c, train/cmd_op_attention.c):
 * checked reads of the input arrays and the 'scale' attribute, fp32 writes of the results. */
#ifndef GDN_OP_IO_H
#define GDN_OP_IO_H

#include <stddef.h>

#include <hdf5.h>

/* The largest input dataset read (elements), far above any test shape: an absurd shape in a
 * file is refused instead of attempting the allocation. */
#define OP_MAX_ELEMS (1ull << 32)

/* Reads dataset `name` of file `path` into a malloced double array, checking its rank and the
 * dimensions that are known (expect[i] >= 0); every dimension read is returned in dims. Returns
 * NULL when the dataset is absent and optional; any other problem (absent and required, not
 * floating point, wrong rank or shape, empty, too large, NaN or Inf) is a fatal error naming
 * the dataset, the expected shape (expect_text) and, for a bad value, its index. */
double *op_read_array(hid_t file, const char *path, const char *name, int rank,
                      const long long *expect, const char *expect_text, long long *dims,
                      int optional);

/* The optional dataset 'cu_seqlens' (integers [n+1]: 0 = c_0 < c_1 < ... < c_n = T, the
 * documents [c_i, c_{i+1}) of every batch row, the layout of packed varlen kernels with B = 1)
 * as the kernels' doc array [B,T] (model/cpu/doc.h), malloced; NULL when absent. The first
 * document of a row continues the entering state (h0), the later ones start from zero. Any
 * problem (not integer, not 1-D, not from 0 to T, not increasing) is a fatal error naming the
 * dataset. */
int *op_read_cu_seqlens(hid_t file, const char *path, int B, int T);

/* A malloced float copy of x [n]; NULL for NULL. */
float *op_to_f32(const double *x, size_t n);

/* Writes data (rank <= 4, shape dims) as the fp32 dataset `name`; fatal on failure. */
void op_write_f32(hid_t file, const char *path, const char *name, int rank, const long long *dims,
                  const float *data);

/* The optional root attribute 'scale': a scalar of any integer or float type (h5py writes a
 * Python int as int64), converted to double, and finite. 0: read (into *scale) or absent
 * (*scale untouched); -1: a problem, reported on stderr. */
int op_read_scale(hid_t file, const char *path, double *scale);

/* Whether the two paths name the same file (same device and inode: the same path, another
 * spelling of it, a symbolic or a hard link). Writing the output would truncate the input. */
int op_same_file(const char *a, const char *b);

#endif
