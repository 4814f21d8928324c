/* The run directory's lock: one `gdn train` at a time writes a run directory. Rank 0 holds an
 * exclusive flock on DIR/.lock for the whole run; the file says who holds it (pid, host, start
 * time) so that a second trainer can name the owner. The kernel drops the lock when the holder
 * exits or dies, so a requeued job after a crash or SIGKILL takes it again at once; the file
 * itself stays (its stale text is overwritten by the next holder). */
#ifndef GDN_RUN_LOCK_H
#define GDN_RUN_LOCK_H

#include <stddef.h>

#define GDN_RUN_LOCK_NAME ".lock"

typedef enum {
    GDN_LOCK_OK = 0,       /* held (fd >= 0), or not available on this file system (fd = -1, warned) */
    GDN_LOCK_BUSY = 1,     /* another process holds it: err names the directory and the owner */
    GDN_LOCK_ERROR = -1,   /* the lock file cannot be created or written: err says why */
} gdn_lock_status;

/* Takes the lock of run directory dir (which exists) without waiting. *fd receives the lock's
 * descriptor (close it, or exit, to release) or -1. On file systems without flock support
 * (some Lustre or NFS mounts) a warning goes to stderr and the run goes on unprotected. */
int gdn_run_lock(const char *dir, int *fd, char *err, size_t errlen);

/* Releases a lock taken by gdn_run_lock (fd -1: nothing). */
void gdn_run_unlock(int fd);

#endif
