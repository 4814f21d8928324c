/* The files of a planned sweep (train/sweep.h): configs, the job list, the plan, and whether a
 * run of it has finished. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/json.h"
#include "train/sweep.h"

/* Writes text to path through path.tmp and a rename. 0, or -1 with err. */
static int write_atomic(const char *path, const char *text, size_t len, char *err, size_t errlen) {
    char tmp[GDN_PATH_MAX + 64];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int bad = !f || fwrite(text, 1, len, f) != len;
    if (f && fclose(f)) bad = 1;
    if (bad || rename(tmp, path)) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int make_dir(const char *path, char *err, size_t errlen) {
    char buf[GDN_PATH_MAX + 256];
    if (strlen(path) >= sizeof buf) {
        snprintf(err, errlen, "cannot create directory %.200s...: path too long", path);
        return -1;
    }
    memcpy(buf, path, strlen(path) + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) && errno != EEXIST) break;
        *p = '/';
    }
    struct stat st;
    if ((mkdir(buf, 0777) && errno != EEXIST) || stat(buf, &st) || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "cannot create directory %s: %s", path, errno ? strerror(errno) : "not a directory");
        return -1;
    }
    return 0;
}

/* data as the configs hold it: every relative element of the comma list made absolute from the
 * current directory (where gdn sweep plan resolved it), so a config trains from anywhere. */
static int absolute_data(const char *data, char *out, size_t n, char *err, size_t errlen) {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) {
        snprintf(err, errlen, "cannot read the current directory: %s", strerror(errno));
        return -1;
    }
    size_t len = 0;
    for (const char *p = data; *p;) {
        size_t m = strcspn(p, ",");
        int w = p[0] == '/' ? snprintf(out + len, n - len, "%s%.*s", len ? "," : "", (int)m, p)
                            : snprintf(out + len, n - len, "%s%s/%.*s", len ? "," : "", cwd, (int)m, p);
        if (w < 0 || (size_t)w >= n - len) {
            snprintf(err, errlen, "corpus.data made absolute is longer than %zu bytes", n - 1);
            return -1;
        }
        len += (size_t)w;
        p += m;
        if (*p == ',') p++;
    }
    return 0;
}

int gdn_sweep_write(const gdn_sweep *sw, const char *dir, const char *text, size_t len, char *err, size_t errlen) {
    char path[GDN_PATH_MAX + 256], abs_dir[PATH_MAX];
    if (strlen(dir) > GDN_PATH_MAX - 200) {
        snprintf(err, errlen, "--out %s: path too long", dir);
        return -1;
    }
    snprintf(path, sizeof path, "%s/configs", dir);
    if (make_dir(path, err, errlen)) return -1;
    if (!realpath(dir, abs_dir)) {
        snprintf(err, errlen, "cannot resolve %s: %s", dir, strerror(errno));
        return -1;
    }
    if (strlen(abs_dir) > GDN_PATH_MAX - 200) {
        snprintf(err, errlen, "%s: path too long for run directories", abs_dir);
        return -1;
    }
    snprintf(path, sizeof path, "%s/sweep.json", dir);
    if (write_atomic(path, text, len, err, errlen)) return -1;
    io_jw plan;
    io_jw_init(&plan, 1);
    io_jw_begin_object(&plan);
    io_jw_kv_string(&plan, "name", sw->name);
    io_jw_kv_string(&plan, "lr_rule", sw->lr_rule);
    io_jw_kv_int(&plan, "train_tokens", sw->train_tokens);
    io_jw_key(&plan, "runs");
    io_jw_begin_array(&plan);
    char line[GDN_SWEEP_NAME_MAX * 2 + 64];
    snprintf(line, sizeof line, "# gdn sweep %s: %d runs, cheapest first. One run per line: CONFIG NAME\n"
             "# (gdn sweep run, or sbatch --array=0-%d%%K jobs/sweep.sbatch DIR)\n", sw->name, sw->n_runs, sw->n_runs - 1);
    char *list = NULL;
    size_t list_len = 0, list_cap = 0;
    int failed = 0;
    for (int i = -1; i < sw->n_runs && !failed; i++) {
        if (i >= 0) snprintf(line, sizeof line, "configs/%s.json %s\n", sw->runs[i].name, sw->runs[i].name);
        size_t n = strlen(line);
        if (list_len + n + 1 > list_cap) {
            list_cap = (list_len + n + 1) * 2;
            char *p = realloc(list, list_cap);
            if (!p) {
                snprintf(err, errlen, "out of memory");
                failed = 1;
                break;
            }
            list = p;
        }
        memcpy(list + list_len, line, n + 1);
        list_len += n;
        if (i < 0) continue;
        gdn_sweep_run r = sw->runs[i]; /* the config names its absolute run directory */
        int w = snprintf(r.rc.out, sizeof r.rc.out, "%s/runs/%s", abs_dir, r.name);
        if (w < 0 || (size_t)w >= sizeof r.rc.out) {
            snprintf(err, errlen, "%s/runs/%s: path too long", abs_dir, r.name);
            failed = 1;
            break;
        }
        if (absolute_data(sw->runs[i].rc.data, r.rc.data, sizeof r.rc.data, err, errlen)) {
            failed = 1;
            break;
        }
        io_jw c;
        io_jw_init(&c, 1);
        gdn_run_config_to_json(&r.rc, &c);
        snprintf(path, sizeof path, "%s/configs/%s.json", dir, r.name);
        char *t = malloc(c.len + 2);
        if (!t) failed = 1;
        else {
            memcpy(t, io_jw_text(&c), c.len);
            t[c.len] = '\n';
            failed = write_atomic(path, t, c.len + 1, err, errlen) != 0;
            free(t);
        }
        io_jw_free(&c);
        io_jw_begin_object(&plan);
        io_jw_kv_string(&plan, "name", r.name);
        io_jw_kv_string(&plan, "mixers", gdn_config_mixers(&r.rc.model));
        io_jw_kv_string(&plan, "size", r.size);
        io_jw_kv_int(&plan, "d_model", r.rc.model.d_model);
        io_jw_kv_int(&plan, "n_layers", r.rc.model.n_layers);
        io_jw_kv_int(&plan, "seed", r.rc.seed);
        io_jw_kv_number(&plan, "lr", r.rc.lr);
        io_jw_kv_int(&plan, "steps", r.rc.steps);
        io_jw_kv_int(&plan, "tokens", r.tokens);
        io_jw_kv_int(&plan, "params_non_embedding", r.fl.non_embedding);
        io_jw_kv_int(&plan, "params_total", r.fl.total);
        io_jw_kv_number(&plan, "flops", r.flops);
        io_jw_kv_number(&plan, "est_hours", r.hours);
        io_jw_end_object(&plan);
    }
    io_jw_end_array(&plan);
    io_jw_end_object(&plan);
    if (!failed) {
        snprintf(path, sizeof path, "%s/plan.json", dir);
        failed = write_atomic(path, io_jw_text(&plan), plan.len, err, errlen) != 0;
    }
    if (!failed) {
        snprintf(path, sizeof path, "%s/jobs.txt", dir);
        failed = write_atomic(path, list, list_len, err, errlen) != 0;
    }
    free(list);
    io_jw_free(&plan);
    return failed ? -1 : 0;
}

int gdn_sweep_read_jobs(const char *path, gdn_sweep_job **jobs, int *n, char *err, size_t errlen) {
    *jobs = NULL;
    *n = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot read the job list %s: %s (plan the sweep first: gdn sweep plan SWEEP.json --out DIR)",
                 path, strerror(errno));
        return -1;
    }
    char dir[GDN_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, failed = 0, alloc = 0;
    while (!failed && getline(&line, &cap, f) >= 0) {
        lineno++;
        char *s = line + strspn(line, " \t");
        if (*s == '#' || *s == '\n' || *s == 0 || *s == '\r') continue;
        char cfg[GDN_PATH_MAX], name[GDN_SWEEP_NAME_MAX] = "";
        size_t c = strcspn(s, " \t\r\n");
        if (c >= sizeof cfg) {
            snprintf(err, errlen, "%s:%d: the config path is too long", path, lineno);
            failed = 1;
            break;
        }
        memcpy(cfg, s, c);
        cfg[c] = 0;
        s += c;
        s += strspn(s, " \t");
        size_t m = strcspn(s, " \t\r\n");
        if (m >= sizeof name) {
            snprintf(err, errlen, "%s:%d: the run name is too long", path, lineno);
            failed = 1;
            break;
        }
        memcpy(name, s, m);
        name[m] = 0;
        if (!name[0]) { /* the config's file name without .json */
            const char *b = strrchr(cfg, '/');
            snprintf(name, sizeof name, "%.*s", (int)sizeof name - 1, b ? b + 1 : cfg);
            size_t l = strlen(name);
            if (l > 5 && !strcmp(name + l - 5, ".json")) name[l - 5] = 0;
        }
        if (!name[0] || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..")) {
            snprintf(err, errlen, "%s:%d: '%s' is no run name (a file name without '/')", path, lineno, name);
            failed = 1;
            break;
        }
        if (*n == alloc) {
            alloc = alloc ? 2 * alloc : 64;
            gdn_sweep_job *p = realloc(*jobs, (size_t)alloc * sizeof *p);
            if (!p) {
                snprintf(err, errlen, "out of memory");
                failed = 1;
                break;
            }
            *jobs = p;
        }
        gdn_sweep_job *j = &(*jobs)[*n];
        int w = cfg[0] == '/' ? snprintf(j->config, sizeof j->config, "%s", cfg)
                              : snprintf(j->config, sizeof j->config, "%s/%s", dir, cfg);
        if (w < 0 || (size_t)w >= sizeof j->config) {
            snprintf(err, errlen, "%s:%d: the config path is too long", path, lineno);
            failed = 1;
            break;
        }
        snprintf(j->name, sizeof j->name, "%s", name);
        (*n)++;
    }
    free(line);
    fclose(f);
    if (!failed && *n == 0) {
        snprintf(err, errlen, "%s lists no runs", path);
        failed = 1;
    }
    if (failed) {
        free(*jobs);
        *jobs = NULL;
        *n = 0;
        return -1;
    }
    return 0;
}

int gdn_sweep_run_finished(const char *run_dir, const char *config, char *why, size_t whylen) {
    char path[GDN_PATH_MAX + 32], e[512];
    why[0] = 0;
    snprintf(path, sizeof path, "%s/summary.json", run_dir);
    struct stat st;
    if (stat(path, &st)) return 0;
    io_json *s = io_json_parse_file(path, e, sizeof e);
    io_json *c = s ? io_json_parse_file(config, e, sizeof e) : NULL;
    int64_t steps = -1, want = -2, tokens = 0;
    double flops = NAN;
    int ok = s && c && s->type == IO_JSON_OBJECT && c->type == IO_JSON_OBJECT &&
             io_json_get_i64(s, "steps", &steps, e, sizeof e) == 1 && io_json_get_i64(c, "steps", &want, e, sizeof e) == 1 &&
             io_json_get_i64(s, "tokens", &tokens, e, sizeof e) == 1 &&
             io_json_get_number(s, "flops", &flops, e, sizeof e) == 1;
    if (!s || !c) snprintf(why, whylen, "%s", e);
    else if (!ok) snprintf(why, whylen, "%s lacks steps, tokens or flops", path);
    else if (steps != want) {
        snprintf(why, whylen, "%s records %lld steps, the config asks for %lld", path, (long long)steps, (long long)want);
        ok = 0;
    } else if (!(tokens > 0 && flops > 0)) {
        snprintf(why, whylen, "%s records no tokens", path);
        ok = 0;
    }
    io_json_free(s);
    io_json_free(c);
    return ok;
}
