/* Run-directory checks (see run_dir.h). */
#include "train/run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint.h"

/* The first model field that differs between a (in file path, a "checkpoint" or "config.json")
 * and b (this run), into err: "PATH: d_model: checkpoint has 64, this run has 96". */
static int model_differs(const gdn_config *a, const gdn_config *b, const char *path, const char *what,
                         char *err, size_t errlen) {
    size_t n = (size_t)snprintf(err, errlen, "%s: ", path);
    return gdn_config_diff(a, b, what, 1, err + (n < errlen ? n : errlen - 1),
                           errlen - (n < errlen ? n : errlen - 1)) > 0;
}

/* The whole of a small text file, malloced; NULL with errno when it cannot be read. */
static char *read_text(const char *path, size_t max) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max, f) : 0;
    int e = !buf ? ENOMEM : ferror(f) ? EIO : !feof(f) ? EFBIG : 0;
    fclose(f);
    if (e) {
        free(buf);
        errno = e;
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

static const char *const advice =
    "continue it with --resume auto, start afresh there with --overwrite (deletes its config.json, "
    "metrics.jsonl and ckpt_*.h5), or train into another --out";
static const char *const advice_other =
    "train into another --out, use that run's model settings, or start afresh there with --overwrite "
    "(deletes its config.json, metrics.jsonl and ckpt_*.h5)";

int gdn_run_dir_check(const char *dir, const gdn_run_config *rc, int fresh, int overwrite, char *err,
                      size_t errlen) {
    char path[4200], why[1024], damage[1024];
    struct stat st;
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "cannot read run directory %s: %s", dir, strerror(errno));
        return 1;
    }
    int n_ckpt = 0;
    int64_t newest = -1, newest_other = -1; /* the newest checkpoint, of another shape */
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t step;
        if (ckpt_name_kind(e->d_name, &step) != CKPT_NAME_FILE) continue;
        n_ckpt++;
        if (step > newest) newest = step;
        if (overwrite) continue;
        /* the header first; another shape counts only if the whole file verifies (a damaged
         * file is left to --resume auto, which reports and skips it) */
        ckpt_info info;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (ckpt_read_info(path, &info, why, sizeof why) != CKPT_OK) continue;
        if (step > newest_other && model_differs(&info.model, &rc->model, path, "checkpoint", why, sizeof why) &&
            ckpt_verify(path, NULL, NULL, damage, sizeof damage) == CKPT_OK) {
            snprintf(err, errlen, "%s holds a different run: %s; %s", dir, why, advice_other);
            newest_other = step;
        }
        ckpt_info_free(&info);
    }
    closedir(d);
    if (newest_other >= 0) return 2;
    /* config.json: the run's resolved settings */
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!overwrite && stat(path, &st) == 0) {
        char *text = S_ISREG(st.st_mode) ? read_text(path, 1 << 20) : NULL;
        if (!text) {
            snprintf(err, errlen, "%s: cannot tell which run %s holds (%s); %s", path, dir,
                     S_ISREG(st.st_mode) ? strerror(errno) : "not a regular file", advice_other);
            return 2;
        }
        static gdn_run_config old; /* large: off the stack */
        int r = gdn_run_config_from_json_text(&old, text, why, sizeof why);
        free(text);
        if (r) {
            snprintf(err, errlen, "cannot tell which run %s holds: %s; %s", dir, why, advice_other);
            return 2;
        }
        if (model_differs(&old.model, &rc->model, path, "config.json", why, sizeof why)) {
            snprintf(err, errlen, "%s holds a different run: %s; %s", dir, why, advice_other);
            return 2;
        }
    }
    if (overwrite || !fresh) return 0;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    int has_metrics = stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
    if (n_ckpt > 0 || has_metrics) {
        if (n_ckpt > 0)
            snprintf(why, sizeof why, "%d checkpoint%s, the newest of step %lld", n_ckpt, n_ckpt == 1 ? "" : "s",
                     (long long)newest);
        else
            snprintf(why, sizeof why, "metrics.jsonl of %lld bytes", (long long)st.st_size);
        snprintf(err, errlen, "%s already holds a run (%s) and this one starts fresh (no --resume): %s", dir, why,
                 advice);
        return 2;
    }
    return 0;
}

int gdn_run_dir_clear(const char *dir, int *removed, char *err, size_t errlen) {
    *removed = 0;
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "cannot read run directory %s: %s", dir, strerror(errno));
        return -1;
    }
    char path[4200];
    struct dirent *e;
    int failed = 0;
    while (!failed && (e = readdir(d))) {
        const char *s = e->d_name;
        int64_t step;
        if (strcmp(s, "config.json") && strcmp(s, "metrics.jsonl") && strcmp(s, "metrics.jsonl.tmp") &&
            strcmp(s, "summary.json") && strcmp(s, "summary.json.tmp") && ckpt_name_kind(s, &step) == CKPT_NAME_OTHER)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, s);
        struct stat st;
        if (lstat(path, &st) || S_ISDIR(st.st_mode)) continue; /* only files (and links) of these names */
        if (unlink(path) && errno != ENOENT) {
            snprintf(err, errlen, "--overwrite: cannot delete %s: %s", path, strerror(errno));
            failed = 1;
        } else {
            (*removed)++;
        }
    }
    closedir(d);
    return failed ? -1 : 0;
}
