/* Reading untrusted checkpoints in a child process. libhdf5 trusts a file's metadata: a few
 * flipped bytes in a B-tree or heap can make it free a wild pointer or loop, which no check
 * of ours can prevent. So every reader first runs its own operation in a forked child; a child
 * that dies by a signal, exits without answering or hangs is reported as damage, and only
 * after the child succeeded does the caller repeat the operation itself. The child is an
 * exact copy of the caller at the moment of the call and runs the very same operation (the same
 * callbacks included, with its output discarded), so the caller's repetition on the same
 * (immutable, atomically renamed) file takes the same path through libhdf5. No operation is
 * excused because another one succeeded on the file before: a damaged file can pass one
 * reader's path and crash another's. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "io/ckpt_internal.h"
#include "io/h5util.h"

void (*ckpt_guard_child_hook)(void);
int ckpt_meta_unprotected_seen;

/* A sanitizer runtime reports errors in the child through its death callback; under
 * libFuzzer that callback would record the child's expected crash as the fuzzer's own. */
void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

#if defined(__SANITIZE_ADDRESS__)
#define GUARD_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define GUARD_SANITIZED 1
#endif
#endif

typedef struct {
    int32_t status;
    int32_t unprotected;
    char msg[2048];
} guard_answer;

static int write_all_fd(int fd, const void *p, size_t n) {
    const char *b = p;
    while (n > 0) {
        ssize_t k = write(fd, b, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Bounds the child's address space (corrupt sizes must not make it eat the machine's memory):
 * what the process maps now plus twice the file plus 2 GiB. Not under a sanitizer, whose
 * shadow memory needs the whole address space. */
static void limit_memory(off_t file_size) {
#ifndef GUARD_SANITIZED
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long pages = 0;
    if (!f) return;
    int ok = fscanf(f, "%llu", &pages) == 1;
    fclose(f);
    if (!ok) return;
    rlim_t lim = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + 2 * (rlim_t)file_size + (2ull << 30);
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > lim)) {
        rl.rlim_cur = lim;
        setrlimit(RLIMIT_AS, &rl);
    }
#else
    (void)file_size;
#endif
}

static void child_main(int answer_fd, int err_fd, off_t file_size, ckpt_guarded_fn fn, void *arg) {
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGSYS, SIGTRAP};
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
        signal(fatal[i], SIG_DFL);
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(NULL);
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core); /* an expected crash leaves no core file */
    limit_memory(file_size);
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO); /* libc's "free(): invalid pointer" goes to the caller */
    io_h5_quiet();
    if (ckpt_guard_child_hook) ckpt_guard_child_hook();
    guard_answer a;
    memset(&a, 0, sizeof a);
    ckpt_meta_unprotected_seen = 0;
    a.status = fn(arg, a.msg, sizeof a.msg);
    a.unprotected = ckpt_meta_unprotected_seen;
    _exit(write_all_fd(answer_fd, &a, sizeof a) == 0 ? 0 : 3);
}

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The bound on a child's run: generous, so that a slow shared file system is never mistaken
 * for a hang. */
static double time_bound(off_t file_size) {
    const char *env = getenv("GDN_CKPT_CHECK_TIMEOUT");
    if (env && *env) {
        char *end;
        double s = strtod(env, &end);
        if (*end == '\0' && s > 0) return s;
    }
    return 300.0 + (double)file_size / 10e6;
}

/* The last non-empty line of text (the child's stderr), trimmed, into out. */
static void last_line(const char *text, size_t n, char *out, size_t outlen) {
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ')) n--;
    size_t start = n;
    while (start > 0 && text[start - 1] != '\n') start--;
    size_t len = n - start;
    if (len >= outlen) len = outlen - 1;
    memcpy(out, text + start, len);
    out[len] = '\0';
    for (char *p = out; *p; p++)
        if ((unsigned char)*p < 0x20) *p = ' ';
}

/* Paths warned about, so that a file read several times warns once. */
static void warn_unprotected(const char *path) {
    static char last[4096];
    if (strcmp(last, path) == 0) return;
    snprintf(last, sizeof last, "%s", path);
    fprintf(stderr,
            "gdn: warning: %s has format_version 1: its metadata (step, tokens_seen, config, "
            "model_config, state) are not protected by a checksum; a newer save protects them\n",
            path);
}

int ckpt_guard_run(const char *path, ckpt_guarded_fn fn, void *arg, char *err, size_t errlen) {
    struct stat sb;
    off_t size = 0;
    if (stat(path, &sb) == 0) {
        /* a named pipe would block libhdf5's open (and the child) until a writer appears */
        if (!S_ISREG(sb.st_mode)) {
            io_h5_errf(err, errlen, "%s: not a regular file: give the path of a checkpoint file", path);
            return CKPT_E_OPEN;
        }
        size = sb.st_size;
    }
    int answer[2] = {-1, -1}, errp[2] = {-1, -1};
    if (pipe2(answer, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0) {
        io_h5_errf(err, errlen, "%s: cannot create a pipe to check it: %s", path, strerror(errno));
        for (int i = 0; i < 2; i++) {
            if (answer[i] >= 0) close(answer[i]);
            if (errp[i] >= 0) close(errp[i]);
        }
        return CKPT_E_IO;
    }
    fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(answer[0]), close(answer[1]), close(errp[0]), close(errp[1]);
        io_h5_errf(err, errlen, "%s: cannot start a process to check it: %s", path, strerror(e));
        return CKPT_E_IO;
    }
    if (pid == 0) {
        close(answer[0]);
        close(errp[0]);
        child_main(answer[1], errp[1], size, fn, arg);
    }
    close(answer[1]);
    close(errp[1]);

    guard_answer a;
    size_t got = 0;
    char tail[4096];
    size_t tail_n = 0;
    int open_fds = 2, timed_out = 0;
    double deadline = seconds_now() + time_bound(size);
    struct pollfd pf[2] = {{answer[0], POLLIN, 0}, {errp[0], POLLIN, 0}};
    while (open_fds > 0) {
        double left = deadline - seconds_now();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        int r = poll(pf, 2, left > 3600 ? 3600000 : (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        for (int i = 0; i < 2; i++) {
            if (pf[i].fd < 0 || !pf[i].revents) continue;
            char buf[4096];
            ssize_t k = read(pf[i].fd, buf, sizeof buf);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) {
                close(pf[i].fd);
                pf[i].fd = -1;
                open_fds--;
                continue;
            }
            if (i == 0) {
                size_t take = (size_t)k < sizeof a - got ? (size_t)k : sizeof a - got;
                memcpy((char *)&a + got, buf, take);
                got += take;
            } else { /* keep the end of the child's stderr */
                if ((size_t)k >= sizeof tail) {
                    memcpy(tail, buf + k - (ssize_t)sizeof tail + 1, sizeof tail - 1);
                    tail_n = sizeof tail - 1;
                } else {
                    if (tail_n + (size_t)k >= sizeof tail) {
                        size_t drop = tail_n + (size_t)k - (sizeof tail - 1);
                        memmove(tail, tail + drop, tail_n - drop);
                        tail_n -= drop;
                    }
                    memcpy(tail + tail_n, buf, (size_t)k);
                    tail_n += (size_t)k;
                }
            }
        }
    }
    for (int i = 0; i < 2; i++)
        if (pf[i].fd >= 0) close(pf[i].fd);
    if (timed_out) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            status = -1;
            break;
        }
    }
    char line[256];
    last_line(tail, tail_n, line, sizeof line);
    if (timed_out) {
        io_h5_errf(err, errlen,
                   "damaged: %s: reading it did not finish within %.0f s (HDF5 is probably looping "
                   "on damaged metadata; GDN_CKPT_CHECK_TIMEOUT sets the bound)",
                   path, time_bound(size));
        return CKPT_E_DAMAGED;
    }
    if (status != -1 && WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        io_h5_errf(err, errlen, "damaged: %s: reading it crashed the HDF5 library (signal %d, %s)%s%s",
                   path, sig, strsignal(sig), line[0] ? "; it said: " : "", line);
        return CKPT_E_DAMAGED;
    }
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || got != sizeof a) {
        io_h5_errf(err, errlen, "damaged: %s: the process reading it failed (exit status %d)%s%s",
                   path, status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                   line[0] ? "; it said: " : "", line);
        return CKPT_E_DAMAGED;
    }
    a.msg[sizeof a.msg - 1] = '\0';
    if (a.unprotected) warn_unprotected(path);
    if (a.status != CKPT_OK) io_h5_errf(err, errlen, "%s", a.msg);
    return a.status;
}
