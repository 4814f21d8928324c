/* Shared between the checkpoint sources: io/checkpoint.c (the file format), io/ckpt_dir.c
 * (checkpoint folders), io/ckpt_meta.c (the metadata checksum) and io/ckpt_guard.c (reading
 * untrusted files in a child process). */
#ifndef GDN_IO_CKPT_INTERNAL_H
#define GDN_IO_CKPT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <hdf5.h>

/* Saves of this process between creating their temp file and renaming or removing it:
 * ckpt_prune must not delete this process's own temp file while one is in flight. */
int ckpt_saves_in_flight(void);

/* File-access properties for every checkpoint open: sec2 driver, strong close, format
 * bounds 1.8..1.8, file locking off (the environment variable still overrides). */
hid_t ckpt_fapl(void);

/* Stores the metadata checksum attributes (meta_checksums, meta_crc32) on the root of a file
 * whose other metadata are all written. 0 or -1 with reason set. */
int ckpt_meta_write(hid_t file, char *reason, size_t rlen);

/* Checks the metadata checksums of an open checkpoint of the given format_version: CKPT_OK,
 * or CKPT_E_META naming every differing item. A version-1 file has none: CKPT_OK with
 * *unprotected = 1. */
int ckpt_meta_verify(hid_t file, int64_t version, int *unprotected, char *reason, size_t rlen);

/* Set by the checkpoint readers when a file they read has no metadata checksum (old format);
 * ckpt_guard_run reports it once per file as a warning. */
extern int ckpt_meta_unprotected_seen;

/* An operation on an untrusted checkpoint file: returns a ckpt_status, message in err. */
typedef int (*ckpt_guarded_fn)(void *arg, char *err, size_t errlen);

/* Runs fn(arg) in a forked child process and returns its status and message. A child killed
 * by a signal (libhdf5 crashing on damaged metadata), exiting without an answer, or running
 * longer than the bound (GDN_CKPT_CHECK_TIMEOUT seconds, default 300 + 1 per 10 MB of path)
 * gives CKPT_E_DAMAGED with "damaged: PATH: <reason>". The child shares nothing with the
 * caller (its writes to memory are its own), so fn may fill the caller's buffers freely. */
int ckpt_guard_run(const char *path, ckpt_guarded_fn fn, void *arg, char *err, size_t errlen);


/* Tests only: called in the child before fn (to simulate a crash or a hang). */
extern void (*ckpt_guard_child_hook)(void);

#endif
