/* metrics.jsonl writer (see metrics_log.h). */
#include "train/metrics_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* write(2) until done; -1 with errno on failure (a short write with no error: ENOSPC). */
static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = ENOSPC;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Copies the complete lines of steps <= step from path to path.tmp and renames it over path
 * (a missing file is an empty one). 0, or -1 with err set. */
static int keep_lines_through(const char *path, int64_t step, char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return 0;
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int o = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (o < 0) {
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        fclose(f);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int failed = 0;
    while (!failed && (len = getline(&line, &cap, f)) > 0) {
        if (line[len - 1] != '\n') break; /* the last line of a writer that died mid-write */
        const char *s = strstr(line, "\"step\":");
        if (s && strtoll(s + 7, NULL, 10) <= step && write_all(o, line, (size_t)len)) {
            snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
            failed = 1;
        }
    }
    if (!failed && ferror(f)) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        failed = 1;
    }
    free(line);
    fclose(f);
    if (close(o) && !failed) {
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        failed = 1;
    }
    if (!failed && rename(tmp, path)) {
        snprintf(err, errlen, "cannot replace %s: %s", path, strerror(errno));
        failed = 1;
    }
    if (failed) unlink(tmp);
    return failed ? -1 : 0;
}

int gdn_metrics_open(gdn_metrics_log *m, const char *path, int64_t keep_through, char *err, size_t errlen) {
    m->fd = -1;
    if ((size_t)snprintf(m->path, sizeof m->path, "%s", path) >= sizeof m->path) {
        snprintf(err, errlen, "path too long: %s", path);
        return -1;
    }
    if (keep_through >= 0 && keep_lines_through(path, keep_through, err, errlen)) return -1;
    int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (keep_through < 0 ? O_TRUNC : 0);
    m->fd = open(path, flags, 0644);
    if (m->fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int gdn_metrics_append(gdn_metrics_log *m, const char *line, char *err, size_t errlen) {
    size_t n = strlen(line);
    char *buf = malloc(n + 1);
    if (!buf) {
        snprintf(err, errlen, "cannot write %s: out of memory", m->path);
        return -1;
    }
    memcpy(buf, line, n);
    buf[n] = '\n';
    off_t before = lseek(m->fd, 0, SEEK_END);
    int r = write_all(m->fd, buf, n + 1);
    int e = errno;
    free(buf);
    if (r) {
        /* cut a partial line off (a no-op for devices and pipes) */
        if (before >= 0 && ftruncate(m->fd, before)) { /* the message below is what matters */ }
        snprintf(err, errlen, "cannot write %s: %s", m->path, strerror(e));
        return -1;
    }
    return 0;
}

int gdn_metrics_close(gdn_metrics_log *m, char *err, size_t errlen) {
    if (m->fd < 0) return 0;
    int r = close(m->fd);
    m->fd = -1;
    if (r) {
        snprintf(err, errlen, "cannot write %s: %s", m->path, strerror(errno));
        return -1;
    }
    return 0;
}
