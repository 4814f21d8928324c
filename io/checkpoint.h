/* HDF5 checkpoints: one file per saved step, written atomically, every tensor checksummed.
 *
 * Layout (format "gdn-checkpoint", format_version 2), readable by h5py with no special code:
 *   /                 attrs format (UTF-8 str), format_version, step, tokens_seen (int64),
 *                     config (UTF-8 str: JSON of the full resolved run configuration),
 *                     meta_checksums (str), meta_crc32 (uint32): crc32s over every other
 *                     attribute of /, /model_config and /state and /state/rng, defined in
 *                     io/ckpt_meta.c (version 1 files lack them: read with a warning)
 *   /model_config     attrs: one per gdn_config field (model/config_fields.h): ints as int64,
 *                     doubles (norm_eps) as float64, strings (mixers) as UTF-8 str
 *   /params/<name>    fp32, natural shape, contiguous; attr crc32 (uint32) = zlib crc32 of
 *                     the little-endian fp32 bytes, i.e. zlib.crc32(arr.tobytes()) in Python
 *   /optim/m/<name>, /optim/v/<name>   AdamW moments, same shapes and checksums (optional)
 *   /state            dataset rng (uint64 [n]); attrs: caller-named int64 values such as
 *                     data_position and schedule_step
 * Tensor groups track creation order, so tools list tensors in parameter-table order.
 *
 * Atomic save: the file is built in memory (HDF5's core driver), written with plain write()s
 * as PATH.tmp.<pid> in the same directory, fsync'ed, renamed to PATH and the directory
 * fsync'ed. Building in memory keeps libhdf5 away from disk errors: a failed write of the
 * HDF5 file itself left the library holding a half-closed file that crashed the process at
 * exit. A full disk is a plain write error: the temp file is removed and nothing stays open. A writer killed at any moment leaves
 * the previous checkpoints untouched and at worst a stale temp file that ckpt_prune removes.
 * Files are written with library-version bounds 1.8..1.8, so any HDF5 >= 1.8 reads them and
 * metadata carries HDF5's own checksums.
 *
 * File locking: correctness never depends on HDF5 file locks (temp names are unique and
 * final files are never opened for writing), so files are opened with locking off; this also
 * avoids "file locking disabled on this file system" failures on Lustre/NFS. HDF5's rule
 * still applies: HDF5_USE_FILE_LOCKING=TRUE|FALSE|BEST_EFFORT in the environment overrides.
 * h5py readers on such filesystems need HDF5_USE_FILE_LOCKING=FALSE themselves.
 *
 * Untrusted files: libhdf5 can crash or loop on damaged metadata, so every reader (read_info,
 * load, verify, find_resume) first runs its own operation on the file in a forked child
 * process (io/ckpt_guard.c) and reports a child's death or hang as CKPT_E_DAMAGED,
 * "damaged: PATH: reason"; only after the child succeeded does the caller open the file.
 *
 * Errors: functions return a ckpt_status (negative on failure) and write a message naming
 * the file, the dataset or field, and what to do into err; nothing here exits. HDF5's own
 * error-stack printing is turned off by these calls (per thread). The Debian HDF5 build is
 * not thread-safe: call these from one thread at a time. */
#ifndef GDN_IO_CHECKPOINT_H
#define GDN_IO_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "model/params.h"

#define CKPT_FORMAT "gdn-checkpoint"
#define CKPT_FORMAT_VERSION 2 /* 1 is still read (no metadata checksum) */
#define CKPT_KV_NAME_MAX 48 /* a /state value's name, NUL included */
#define CKPT_STATE_MAX 64   /* /state values per file */
#define CKPT_MAX_NDIM 8     /* tensor rank that ckpt_verify reports */

/* X(name) for every integer (INT and BOOL) field of gdn_config, in the order of
 * model/config_fields.h, which is where a field is added. */
#define CKPT_MODEL_INT_FIELDS(X) GDN_CONFIG_FIELDS_WITH(CKPT_INT_FIELD_, X)
#define CKPT_INT_FIELD_(X, name, type, ...) CKPT_INT_FIELD_##type(X, name)
#define CKPT_INT_FIELD_INT(X, name) X(name)
#define CKPT_INT_FIELD_BOOL(X, name) X(name)
#define CKPT_INT_FIELD_DOUBLE(X, name)
#define CKPT_INT_FIELD_STR(X, name)

typedef enum {
    CKPT_OK = 0,
    CKPT_E_ARG = -1,      /* bad arguments (inconsistent table, NULL buffer, long name) */
    CKPT_E_IO = -2,       /* creating, writing, syncing or renaming failed (disk, permissions) */
    CKPT_E_OPEN = -3,     /* missing, not an HDF5 file, or truncated/damaged beyond opening */
    CKPT_E_FORMAT = -4,   /* HDF5, but not a gdn checkpoint or an unsupported format_version */
    CKPT_E_MODEL = -5,    /* its model configuration differs from this run's */
    CKPT_E_TENSOR = -6,   /* a tensor is missing, unreadable, unexpected, or has a wrong shape */
    CKPT_E_CHECKSUM = -7, /* a tensor's data do not match its crc32 */
    CKPT_E_META = -8,     /* an attribute or /state value does not match the metadata checksum */
    CKPT_E_DAMAGED = -9,  /* reading the file crashed or hung libhdf5 (in the checking child) */
} ckpt_status;

/* "ok", "bad argument", "i/o error", ...: a short name of a status for logs. */
const char *ckpt_status_str(int status);

/* One named int64 in /state, e.g. {"data_position", 123456}. */
typedef struct {
    char name[CKPT_KV_NAME_MAX];
    int64_t value;
} ckpt_kv;

/* Everything one checkpoint holds; the caller owns all pointers. */
typedef struct {
    int64_t step, tokens_seen;
    const char *config_json;      /* resolved run configuration, JSON text (required) */
    const gdn_config *model;      /* NULL: table->cfg */
    const gdn_param_table *table; /* names, offsets and shapes of the tensors */
    const float *params;          /* [table->total] */
    const float *m, *v;           /* [table->total] each, or both NULL (weights-only file) */
    const uint64_t *rng;          /* [n_rng] trainer RNG state words (NULL when n_rng == 0) */
    int n_rng;
    const ckpt_kv *state; /* [n_state] e.g. data_position, schedule_step */
    int n_state;
} ckpt_contents;

/* What a checkpoint says besides its tensors. Release with ckpt_info_free. */
typedef struct {
    int64_t format_version, step, tokens_seen;
    char *config_json; /* malloced */
    gdn_config model;  /* from /model_config */
    uint64_t *rng;     /* malloced [n_rng], NULL when n_rng == 0 */
    int n_rng;
    ckpt_kv *state; /* malloced [n_state] */
    int n_state;
    int has_optim; /* 1 when /optim/m and /optim/v are present */
} ckpt_info;

void ckpt_info_free(ckpt_info *info);
/* The /state value called name: 0 and *value set, or -1 when absent. */
int ckpt_info_get(const ckpt_info *info, const char *name, int64_t *value);

/* Writes c to path atomically (see the top of this file); replaces an existing file at path
 * only once the new one is complete and synced. On failure the temp file is removed and
 * whatever was at path is unchanged. */
int ckpt_save_atomic(const char *path, const ckpt_contents *c, char *err, size_t errlen);

/* Reads the header, model configuration and /state of path (no tensors): enough to build the
 * parameter table of a checkpoint before loading it. Checks format and version. */
int ckpt_read_info(const char *path, ckpt_info *info, char *err, size_t errlen);

/* Loads path into params (and m, v when not NULL; the file must then hold /optim), verifying
 * every tensor's shape and crc32. expect_model: compared field by field with /model_config
 * (CKPT_E_MODEL names each differing field and both values); NULL skips the comparison.
 * Every tensor of table must be in the file and the file may hold no other /params tensor.
 * info (may be NULL) receives the header and state; on failure nothing in it needs freeing.
 * On failure the buffers may be partly overwritten. */
int ckpt_load(const char *path, const gdn_config *expect_model, const gdn_param_table *table,
              float *params /* [table->total] */, float *m /* [table->total] or NULL */,
              float *v /* [table->total] or NULL */, ckpt_info *info, char *err, size_t errlen);

/* One tensor as ckpt_verify reads it. */
typedef struct {
    const char *name; /* path in the file: "params/<name>", "optim/m/<name>", ... */
    int ndim;
    int64_t shape[CKPT_MAX_NDIM];
    size_t numel;
    const float *data; /* [numel], valid during the callback; NULL when unreadable */
    uint32_t crc_stored, crc_actual;
    int status;          /* CKPT_OK, CKPT_E_CHECKSUM or CKPT_E_TENSOR */
    const char *problem; /* what is wrong when status != CKPT_OK, else "" */
} ckpt_tensor_view;

/* Called per tensor; returning nonzero stops the walk. */
typedef int (*ckpt_tensor_fn)(const ckpt_tensor_view *t, void *user);

/* Checks the header and reads every tensor under /params and /optim (in table order),
 * comparing each with its crc32; fn (may be NULL) sees each tensor. Does not need the model
 * definition. Returns CKPT_OK, or the first failure's status with err naming the tensor. */
int ckpt_verify(const char *path, ckpt_tensor_fn fn, void *user, char *err, size_t errlen);

/* What a file name in a run directory is: CKPT_NAME_FILE for "ckpt_<step>.h5" (*step set),
 * CKPT_NAME_TEMP for a writer's temp file "ckpt_<step>.h5.tmp.<pid>", else CKPT_NAME_OTHER. */
enum { CKPT_NAME_OTHER = 0, CKPT_NAME_FILE, CKPT_NAME_TEMP };
int ckpt_name_kind(const char *name, int64_t *step);

/* "DIR/ckpt_%08lld.h5" into out. Returns 0, or -1 when it does not fit. */
int ckpt_path_for_step(const char *dir, int64_t step, char *out, size_t outlen);

/* The newest checkpoint in dir that passes ckpt_verify. Unusable newer ones are reported on
 * stderr ("gdn: skipping DIR/ckpt_00000200.h5: checksum mismatch in params/...") and skipped.
 * Returns 1 with path/step set; 0 when dir does not exist or holds no checkpoint; a negative
 * status when checkpoints exist but none is usable (starting afresh would silently lose the
 * run, so the caller should stop and tell the user) or dir cannot be read. */
int ckpt_find_resume(const char *dir, char *path, size_t pathlen, int64_t *step, char *err,
                     size_t errlen);

/* Keeps the newest `keep` checkpoints (by step) in dir and deletes older ones; keep < 1 keeps
 * all. Also deletes temp files left by killed writers: ckpt_*.h5.tmp.<pid> whose pid is not a
 * live process on this host, or is this process while no save of it is in flight. Assumes
 * the directory is written from one host (a live writer on another host is invisible).
 * Returns the number of files removed, or a negative status. */
int ckpt_prune(const char *dir, int keep, char *err, size_t errlen);

#endif
