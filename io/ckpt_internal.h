/* Shared between io/checkpoint.c (the file format) and io/ckpt_dir.c (checkpoint folders). */
#ifndef GDN_IO_CKPT_INTERNAL_H
#define GDN_IO_CKPT_INTERNAL_H

#include <hdf5.h>

/* Saves of this process between creating their temp file and renaming or removing it:
 * ckpt_prune must not delete this process's own temp file while one is in flight. */
int ckpt_saves_in_flight(void);

/* File-access properties for every checkpoint open: sec2 driver, strong close, format
 * bounds 1.8..1.8, file locking off (the environment variable still overrides). */
hid_t ckpt_fapl(void);

#endif
