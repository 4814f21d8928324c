/* Reading safetensors files (the Hugging Face weight format).
 *
 * Layout: an 8-byte little-endian unsigned header length N, N bytes of JSON, then the data
 * buffer. The JSON is an object whose members are tensors, {"dtype": "F32", "shape": [..],
 * "data_offsets": [begin, end]} with offsets into the data buffer, plus an optional
 * "__metadata__" object of strings. Everything the header says is checked against the file
 * before any tensor is read: the header fits in the file, every tensor's byte size is the
 * product of its shape times its element size (computed without overflow), its bytes lie inside
 * the data buffer, and no two tensors overlap; as in the reference implementation, the tensors
 * also cover the buffer exactly (no gaps, nothing after the last one).
 *
 * Errors return -1 with a message in err that names the file and, where one is at fault, the
 * tensor ("model.safetensors: tensor 'lm_head.weight': shape [256,64] is 65536 bytes of F32
 * but data_offsets give 1024"). Nothing here prints or exits. */
#ifndef GDN_IO_SAFETENSORS_H
#define GDN_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_NDIM 8
/* The reference implementation refuses larger headers; so does this reader. */
#define ST_MAX_HEADER (100u * 1000u * 1000u)

typedef enum {
    ST_BOOL, ST_U8, ST_I8, ST_F8_E5M2, ST_F8_E4M3, ST_I16, ST_U16, ST_F16, ST_BF16,
    ST_I32, ST_U32, ST_F32, ST_F64, ST_I64, ST_U64, ST_N_DTYPES
} st_dtype;

typedef struct {
    char *name;     /* the header's key */
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_NDIM];
    uint64_t numel;
    uint64_t begin, end; /* byte offsets into the data buffer */
} st_tensor;

typedef struct {
    char *path;          /* for messages (and reading) */
    int fd;              /* -1 for a header parsed from memory */
    uint64_t file_size;
    uint64_t data_start; /* 8 + header length */
    int n;               /* tensors, in header order */
    st_tensor *t;
} st_file;

/* "F32", "BF16", ...; element size in bytes. */
const char *st_dtype_name(st_dtype d);
size_t st_dtype_size(st_dtype d);

/* Parses and checks the header of a whole file image held in memory (data, size bytes: the
 * length prefix, the JSON and the data buffer); name labels messages. On success *f describes
 * it (fd -1; free with st_close). Used by st_open and by the fuzz harness. */
int st_parse(const uint8_t *data, size_t size, const char *name, st_file *f, char *err, int err_len);

/* Opens path and parses its header (the data buffer is not read). */
int st_open(const char *path, st_file *f, char *err, int err_len);

void st_close(st_file *f);

/* The tensor called name, or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);

/* Converts n elements of raw little-endian bytes of type d to float. Returns 0, or -1 when d
 * is not a floating-point type this reader converts (F32, F16, BF16, F64). */
int st_convert_f32(st_dtype d, const uint8_t *raw, uint64_t n, float *out);

/* Reads tensor t of an opened file into out [t->numel] as float (F32, F16, BF16, F64 in the
 * file). Errors: another dtype, a short read (the file shrank), a value that is NaN or
 * infinite. */
int st_read_f32(const st_file *f, const st_tensor *t, float *out, char *err, int err_len);

#endif
