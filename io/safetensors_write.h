/* Writer of safetensors files (the format of Hugging Face checkpoints):
 *   8 bytes   little-endian uint64 N, the length of the header
 *   N bytes   JSON header: {"__metadata__": {"format": "pt"},
 *             "NAME": {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}, ...},
 *             padded with spaces to a multiple of 8 bytes
 *   the data  every tensor's little-endian values, row-major, back to back in the order added;
 *             offsets count from the start of this buffer
 * Tensors are given as fp32 and stored as F32 or BF16 (rounded to nearest even; NaN stays NaN).
 * Names must be unique. Functions return 0, or -1 with a message naming the file or tensor in
 * err; nothing here exits on bad input. */
#ifndef GDN_IO_SAFETENSORS_WRITE_H
#define GDN_IO_SAFETENSORS_WRITE_H

#include <stddef.h>
#include <stdint.h>

#define STW_MAX_NDIM 8
#define STW_NAME_MAX 256

typedef enum { STW_F32 = 0, STW_BF16 } stw_dtype;

typedef struct stw_writer stw_writer;

/* A writer storing every tensor as dtype; NULL when out of memory. */
stw_writer *stw_create(stw_dtype dtype);
void stw_free(stw_writer *w);

/* Adds a tensor of shape [ndim] (ndim 0 .. STW_MAX_NDIM; a dimension may be 0) whose
 * prod(shape) fp32 values are copied from data. */
int stw_add(stw_writer *w, const char *name, int ndim, const int64_t *shape, const float *data,
            char *err, size_t errlen);

/* Adds a tensor like stw_add, taking ownership of data (malloced): no copy. The writer frees
 * it, also on failure. */
int stw_add_owned(stw_writer *w, const char *name, int ndim, const int64_t *shape, float *data,
                  char *err, size_t errlen);

/* Number of tensors added. */
int stw_count(const stw_writer *w);

/* Writes the file to path (created or truncated; mode 0644) and fsyncs it. On failure the
 * partial file is removed. Atomic replacement is the caller's business (a temporary name in
 * the same directory, then rename). */
int stw_write(const stw_writer *w, const char *path, char *err, size_t errlen);

/* The bfloat16 bits of x, rounded to nearest even (NaN stays a quiet NaN). */
uint16_t stw_bf16_from_f32(float x);

#endif
