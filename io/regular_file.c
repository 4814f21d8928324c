/* Non-blocking, type-checked opening of input files. */
#include "io/regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a named pipe (FIFO)";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    return "a special file";
}

static int not_regular(const char *path, mode_t m, char *err, int err_len) {
    snprintf(err, (size_t)err_len, "%s: not a regular file (%s): give the path of a regular file%s",
             path, kind(m),
             S_ISDIR(m) ? " (the files inside, or a pattern such as DIR/*.bin)" : "");
    return -1;
}

/* "PATH: cannot open token shard: REASON" (what given) or "PATH: cannot open: REASON". */
static int cannot(const char *path, const char *verb, const char *what, char *err, int err_len) {
    snprintf(err, (size_t)err_len, "%s: cannot %s%s%s: %s", path, verb, what ? " " : "",
             what ? what : "", strerror(errno));
    return -1;
}

int io_open_regular(const char *path, const char *what, char *err, int err_len) {
    struct stat st;
    if (stat(path, &st) != 0) return cannot(path, "open", what, err, err_len);
    if (!S_ISREG(st.st_mode)) return not_regular(path, st.st_mode, err, err_len);
    /* O_NONBLOCK: should the path have become a FIFO since the stat, open returns at once */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return cannot(path, "open", what, err, err_len);
    if (fstat(fd, &st) != 0) {
        cannot(path, "read", what, err, err_len);
    } else if (!S_ISREG(st.st_mode)) {
        not_regular(path, st.st_mode, err, err_len);
    } else {
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0) return fd;
        cannot(path, "read", what, err, err_len);
    }
    close(fd);
    return -1;
}
