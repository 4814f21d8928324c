/* Run-directory lock (see run_lock.h). */
#include "train/run_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

/* The holder's description from the lock file, one line without the newline ("" if none). */
static void read_owner(int fd, char *buf, size_t n) {
    ssize_t r = pread(fd, buf, n - 1, 0);
    buf[r > 0 ? r : 0] = 0;
    buf[strcspn(buf, "\n")] = 0;
}

int gdn_run_lock(const char *dir, int *fd, char *err, size_t errlen) {
    char path[4200];
    *fd = -1;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, GDN_RUN_LOCK_NAME) >= sizeof path) {
        snprintf(err, errlen, "run directory path too long: %s", dir);
        return GDN_LOCK_ERROR;
    }
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (f < 0) {
        snprintf(err, errlen, "cannot create the lock file %s: %s", path, strerror(errno));
        return GDN_LOCK_ERROR;
    }
    if (flock(f, LOCK_EX | LOCK_NB)) {
        int e = errno;
        if (e == EWOULDBLOCK) {
            char owner[256];
            read_owner(f, owner, sizeof owner);
            close(f);
            snprintf(err, errlen,
                     "run directory %s is in use by another gdn train (%s; lock file %s): wait for it to "
                     "finish or stop it, or train into another --out",
                     dir, owner[0] ? owner : "owner unknown: it is just starting", path);
            return GDN_LOCK_BUSY;
        }
        close(f);
        /* ENOLCK, ENOSYS, EOPNOTSUPP, EINVAL: the file system has no flock (Lustre without
         * -o flock, NFS without lockd); nothing to hold, but say so */
        fprintf(stderr, "gdn train: warning: cannot lock %s (%s): this file system has no file locks, so "
                "nothing stops a second trainer from writing the same run directory\n", path, strerror(e));
        return GDN_LOCK_OK;
    }
    char host[256] = "?", when[64] = "?", line[512];
    gethostname(host, sizeof host);
    host[sizeof host - 1] = 0;
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    int len = snprintf(line, sizeof line, "pid %ld on host %s since %s\n", (long)getpid(), host, when);
    if (ftruncate(f, 0) || write(f, line, (size_t)len) != len) {
        snprintf(err, errlen, "cannot write the lock file %s: %s", path, strerror(errno));
        close(f);
        return GDN_LOCK_ERROR;
    }
    *fd = f;
    return GDN_LOCK_OK;
}

void gdn_run_unlock(int fd) {
    if (fd >= 0) close(fd);
}
