/* Checkpoint folders: file naming, choosing the checkpoint to resume from, pruning. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "io/ckpt_internal.h"
#include "io/h5util.h"

int ckpt_path_for_step(const char *dir, int64_t step, char *out, size_t outlen) {
    int n = snprintf(out, outlen, "%s/ckpt_%08lld.h5", dir, (long long)step);
    return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

/* "ckpt_<digits>.h5" -> 1 and *step; also accepts what follows in *rest (for temp names). */
static int parse_name(const char *name, int64_t *step, const char **rest) {
    if (strncmp(name, "ckpt_", 5) != 0) return 0;
    const char *p = name + 5, *q = p;
    while (*q >= '0' && *q <= '9')
        q++;
    if (q == p || q - p > 18 || strncmp(q, ".h5", 3) != 0) return 0;
    *step = strtoll(p, NULL, 10);
    *rest = q + 3;
    return 1;
}

typedef struct {
    int64_t step;
    char name[256];
} ckpt_entry;

int ckpt_name_kind(const char *name, int64_t *step) {
    const char *rest;
    if (!parse_name(name, step, &rest)) return CKPT_NAME_OTHER;
    if (*rest == '\0') return CKPT_NAME_FILE;
    return strncmp(rest, ".tmp.", 5) == 0 ? CKPT_NAME_TEMP : CKPT_NAME_OTHER;
}

static int cmp_step_desc(const void *a, const void *b) {
    int64_t x = ((const ckpt_entry *)a)->step, y = ((const ckpt_entry *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Final-named checkpoints of dir, newest first. Returns the count, or -1 with errno set
 * (ENOENT when dir does not exist). *out is malloced. */
static int list_checkpoints(const char *dir, ckpt_entry **out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0, cap = 0;
    ckpt_entry *v = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t step;
        const char *rest;
        if (!parse_name(e->d_name, &step, &rest) || *rest != '\0' || strlen(e->d_name) >= 256)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            ckpt_entry *nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) {
                free(v);
                closedir(d);
                errno = ENOMEM;
                return -1;
            }
            v = nv;
        }
        v[n].step = step;
        snprintf(v[n].name, sizeof v[n].name, "%s", e->d_name);
        n++;
    }
    closedir(d);
    if (n > 1) qsort(v, (size_t)n, sizeof *v, cmp_step_desc);
    *out = v;
    return n;
}

int ckpt_find_resume(const char *dir, char *path, size_t pathlen, int64_t *step, char *err,
                     size_t errlen) {
    ckpt_entry *v;
    int n = list_checkpoints(dir, &v);
    if (n < 0) {
        if (errno == ENOENT) return 0;
        io_h5_errf(err, errlen, "cannot list checkpoint directory %s: %s", dir, strerror(errno));
        return CKPT_E_IO;
    }
    int last = CKPT_OK;
    char why[1536] = "";
    for (int i = 0; i < n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, v[i].name);
        last = ckpt_verify(p, NULL, NULL, why, sizeof why);
        if (last == CKPT_OK) {
            if ((size_t)snprintf(path, pathlen, "%s", p) >= pathlen) {
                io_h5_errf(err, errlen, "checkpoint path %s does not fit the caller's buffer", p);
                free(v);
                return CKPT_E_ARG;
            }
            if (step) *step = v[i].step;
            free(v);
            return 1;
        }
        fprintf(stderr, "gdn: skipping %s\n", why);
    }
    free(v);
    if (n == 0) return 0;
    io_h5_errf(err, errlen,
               "none of the %d checkpoints in %s is usable (the oldest: %s); move them away to "
               "start afresh, or fix the directory",
               n, dir, why);
    return last;
}

/* A temp file "ckpt_<step>.h5.tmp.<pid>" is stale when its writer cannot be writing it. */
static int temp_is_stale(const char *rest) {
    if (strncmp(rest, ".tmp.", 5) != 0) return 0;
    char *end;
    long pid = strtol(rest + 5, &end, 10);
    if (*end != '\0' || end == rest + 5 || pid <= 0) return 0;
    if (pid == (long)getpid()) return ckpt_saves_in_flight() == 0;
    return kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

int ckpt_prune(const char *dir, int keep, char *err, size_t errlen) {
    ckpt_entry *v;
    int n = list_checkpoints(dir, &v);
    if (n < 0) {
        io_h5_errf(err, errlen, "cannot list checkpoint directory %s: %s", dir, strerror(errno));
        return CKPT_E_IO;
    }
    int removed = 0, st = CKPT_OK;
    char p[4096];
    for (int i = keep < 1 ? n : keep; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, v[i].name);
        if (unlink(p) == 0)
            removed++;
        else if (errno != ENOENT) {
            io_h5_errf(err, errlen, "cannot remove old checkpoint %s: %s", p, strerror(errno));
            st = CKPT_E_IO;
        }
    }
    free(v);

    DIR *d = opendir(dir);
    if (!d) {
        io_h5_errf(err, errlen, "cannot list checkpoint directory %s: %s", dir, strerror(errno));
        return CKPT_E_IO;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t step;
        const char *rest;
        if (!parse_name(e->d_name, &step, &rest) || !temp_is_stale(rest)) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) == 0)
            removed++;
        else if (errno != ENOENT) {
            io_h5_errf(err, errlen, "cannot remove stale temp file %s: %s", p, strerror(errno));
            st = CKPT_E_IO;
        }
    }
    closedir(d);
    return st != CKPT_OK ? st : removed;
}
