/* gdn sweep plan SWEEP.json [--out DIR]: expands a sweep (train/sweep.h) into run configs and a
 * job list and prints its totals. gdn sweep run DIR [gdn train options]: trains the list's runs
 * one after another in child processes, skipping finished ones and resuming interrupted ones. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io/json.h"
#include "train/commands.h"
#include "train/sweep.h"
#include "train/trainer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: gdn sweep plan SWEEP.json [--out DIR] [--bench] [--replace]\n"
            "       gdn sweep run DIR [--keep-going] [gdn train options for every run, e.g. --threads 8]\n\n"
            "plan: expands the sweep file (docs/scaling.md) into DIR/configs/NAME.json (one gdn train\n"
            "      configuration per run), DIR/jobs.txt (one 'configs/NAME.json NAME' line per run,\n"
            "      cheapest first), DIR/plan.json and DIR/sweep.json, checks every budget against the\n"
            "      corpus, and prints the totals: runs, tokens, FLOPs and estimated device hours from\n"
            "      the sweep's measured throughput (\"throughput\"), or with --bench from gdn bench on\n"
            "      the cheapest run of each mixer, here. DIR defaults to sweeps/NAME. A DIR planned\n"
            "      from another sweep file is refused unless --replace.\n"
            "run:  trains each run of DIR/jobs.txt into DIR/runs/NAME (log: DIR/logs/NAME.log), one at\n"
            "      a time. A run whose summary.json is complete is skipped; an interrupted one resumes\n"
            "      from its newest checkpoint (--resume auto); one that another trainer holds is left\n"
            "      to it. SIGINT/SIGTERM stop the current run at a checkpoint (exit status 75: run the\n"
            "      same command again to continue). A failing run stops the sweep (exit 1) unless\n"
            "      --keep-going. On Slurm: jobs/sweep.sbatch (a job array over the same list).\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void human(double x, char *out, size_t n) {
    const char *s[] = {"", "k", "M", "G", "T", "P", "E", "Z"};
    int i = 0;
    while (fabs(x) >= 1000 && i < 7) {
        x /= 1000;
        i++;
    }
    snprintf(out, n, "%.3g%s", x, s[i]);
}

static int read_file(const char *path, char **text, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            if (cap >= ((size_t)64 << 20)) {
                snprintf(err, errlen, "%s: larger than 64 MiB; not a sweep file", path);
                free(buf);
                fclose(f);
                return -1;
            }
            char *p = realloc(buf, cap *= 2);
            if (!p) free(buf);
            buf = p;
        }
    }
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        snprintf(err, errlen, "cannot read %s", path);
        free(buf);
        return -1;
    }
    *text = buf;
    *len = n;
    return 0;
}

/* Training tokens/s of config cfg by `gdn bench --what step --json` in a child process (its
 * stderr passes through). 0, or -1 with err. */
static int bench_tokens_per_s(const char *cfg, const char *backend, double *tps, char *err, size_t errlen) {
    int fds[2];
    if (pipe(fds)) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        snprintf(err, errlen, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        char *argv[] = {"gdn", "bench", "--what", "step", "--json", "--repeats", "5", "--backend", (char *)backend,
                        "--config", (char *)cfg, NULL};
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(fds[1]);
    char buf[8192];
    size_t n = 0;
    ssize_t got;
    while (n + 1 < sizeof buf && ((got = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0 || (got < 0 && errno == EINTR)))
        if (got > 0) n += (size_t)got;
    buf[n] = 0;
    close(fds[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    const char *k = strstr(buf, "\"tokens_per_s\":");
    *tps = k ? strtod(k + 15, NULL) : 0.0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !(*tps > 0)) {
        snprintf(err, errlen, "gdn bench --what step --backend %s --config %s failed (status %d)", backend, cfg,
                 WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
        return -1;
    }
    return 0;
}

/* --bench: each mixer pattern's cheapest run timed with gdn bench; sets the estimates. */
static int measure_throughput(gdn_sweep *sw, const char *dir, char *err, size_t errlen) {
    for (int i = 0; i < sw->n_runs; i++) {
        const gdn_sweep_run *r = &sw->runs[i];
        const char *pat = gdn_config_mixers(&r->rc.model);
        int first = 1;
        for (int j = 0; j < i && first; j++) first = strcmp(gdn_config_mixers(&sw->runs[j].rc.model), pat) != 0;
        if (!first) continue;
        char cfg[GDN_PATH_MAX + 256];
        snprintf(cfg, sizeof cfg, "%s/configs/%s.json", dir, r->name);
#ifdef GDN_HAVE_CUDA
        const char *backend = strcmp(r->rc.backend, "cpu") ? "cuda" : "cpu";
#else
        const char *backend = "cpu";
#endif
        double tps = 0;
        printf("measuring %s (mixers %s) with gdn bench --what step --backend %s ...\n", r->name, pat, backend);
        fflush(stdout);
        if (bench_tokens_per_s(cfg, backend, &tps, err, errlen)) return -1;
        printf("  %.0f tokens/s\n", tps);
        gdn_sweep_set_throughput(sw, pat, tps);
    }
    sw->has_throughput = 1;
    return 0;
}

static int cmd_plan(int argc, char **argv) {
    const char *file = NULL, *out = NULL;
    int bench = 0, replace = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--bench")) bench = 1;
        else if (!strcmp(argv[i], "--replace")) replace = 1;
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strncmp(argv[i], "--out=", 6)) out = argv[i] + 6;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "gdn sweep plan: unknown option '%s' (gdn sweep --help)\n", argv[i]);
            return 2;
        } else if (file) {
            fprintf(stderr, "gdn sweep plan: one sweep file only (got '%s' and '%s')\n", file, argv[i]);
            return 2;
        } else file = argv[i];
    }
    if (!file) {
        fprintf(stderr, "gdn sweep plan: give the sweep file: gdn sweep plan SWEEP.json [--out DIR]\n");
        return 2;
    }
    char err[2048], *text = NULL;
    size_t len = 0;
    if (read_file(file, &text, &len, err, sizeof err)) {
        fprintf(stderr, "gdn sweep plan: %s\n", err);
        return 1;
    }
    static gdn_sweep sw;
    if (gdn_sweep_parse(&sw, text, len, file, err, sizeof err) || gdn_sweep_check_corpus(&sw, err, sizeof err)) {
        fprintf(stderr, "gdn sweep plan: %s\n", err);
        free(text);
        gdn_sweep_free(&sw);
        return 2;
    }
    char dir[GDN_PATH_MAX];
    if (out) snprintf(dir, sizeof dir, "%s", out);
    else snprintf(dir, sizeof dir, "sweeps/%s", sw.name);
    /* a directory planned from another sweep file: its run directories may hold runs of other
     * settings under the same names, which gdn sweep run would take as finished or resume */
    char old_path[GDN_PATH_MAX + 32], *old = NULL;
    size_t old_len = 0;
    snprintf(old_path, sizeof old_path, "%s/sweep.json", dir);
    if (!replace && access(old_path, F_OK) == 0) {
        if (read_file(old_path, &old, &old_len, err, sizeof err) == 0 && (old_len != len || memcmp(old, text, len))) {
            fprintf(stderr, "gdn sweep plan: %s holds the plan of another sweep file (%s differs from %s): plan into "
                    "a new --out, or pass --replace to plan over it (runs whose names stay keep their run "
                    "directories, finished or not, whatever their settings were)\n", dir, old_path, file);
            free(old);
            free(text);
            gdn_sweep_free(&sw);
            return 2;
        }
        free(old);
    }
    int r = gdn_sweep_write(&sw, dir, text, len, err, sizeof err);
    if (!r && bench) /* the configs exist now; then plan.json again, with the estimates */
        r = measure_throughput(&sw, dir, err, sizeof err) || gdn_sweep_write(&sw, dir, text, len, err, sizeof err);
    free(text);
    if (r) {
        fprintf(stderr, "gdn sweep plan: %s\n", err);
        gdn_sweep_free(&sw);
        return 1;
    }
    double tokens = 0, flops = 0, hours = 0, cmin = INFINITY, cmax = 0;
    for (int i = 0; i < sw.n_runs; i++) {
        const gdn_sweep_run *run = &sw.runs[i];
        tokens += (double)run->tokens;
        flops += run->flops;
        hours += run->hours;
        cmin = fmin(cmin, run->flops);
        cmax = fmax(cmax, run->flops);
    }
    printf("%-44s %8s %10s %10s %9s %10s %9s\n", "run", "N(M)", "tokens", "FLOPs", "tok/N", "epochs", "est h");
    for (int i = 0; i < sw.n_runs; i++) {
        const gdn_sweep_run *run = &sw.runs[i];
        char t[32], f[32];
        human((double)run->tokens, t, sizeof t);
        human(run->flops, f, sizeof f);
        char h[32] = "-";
        if (isfinite(run->hours)) snprintf(h, sizeof h, "%.3g", run->hours);
        printf("%-44s %8.3f %10s %10s %9.1f %10.3f %9s\n", run->name, (double)run->fl.non_embedding / 1e6, t, f,
               (double)run->tokens / (double)run->fl.non_embedding, (double)run->tokens / (double)sw.train_tokens, h);
    }
    char t[32], f[32], tt[32];
    human(tokens, t, sizeof t);
    human(flops, f, sizeof f);
    human((double)sw.train_tokens, tt, sizeof tt);
    printf("\nsweep %s: %d runs, %s tokens, %s FLOPs (%.2f decades of compute: %.3g to %.3g); corpus %s training "
           "tokens\n", sw.name, sw.n_runs, t, f, cmax > cmin ? log10(cmax / cmin) : 0.0, cmin, cmax, tt);
    if (sw.has_throughput)
        printf("estimated device time: %.3g hours (from the %s throughput)\n", hours,
               bench ? "measured" : "sweep file's");
    else
        printf("estimated device time: unknown; plan with --bench (times the cheapest run of each mixer here),\n"
               "or measure tokens/s on the target machine, e.g.\n"
               "  gdn bench --what step --backend cuda --config %s/configs/%s.json\n"
               "and give it as \"throughput\" in the sweep file\n", dir, sw.runs[0].name);
    printf("planned into %s: jobs.txt, configs/, plan.json\n"
           "run it here:  gdn sweep run %s\n"
           "on Slurm:     sbatch --array=0-%d%%4 jobs/sweep.sbatch %s   (%%4: at most 4 at a time)\n"
           "analyse:      python3 jobs/scaling/analyze.py %s\n", dir, dir, sw.n_runs - 1, dir, dir);
    gdn_sweep_free(&sw);
    return 0;
}

/* The child training now (0: none), for the signal handler. */
static volatile pid_t child_pid = 0;
static volatile sig_atomic_t stop_requested = 0;

static void on_signal(int sig) {
    stop_requested = sig;
    if (child_pid > 0) kill(child_pid, SIGTERM); /* the trainer checkpoints and exits 75 */
}

/* The last lines of a log, to stderr. */
static void tail_log(const char *path, int lines) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char *ring[64] = {0}, *line = NULL;
    size_t cap = 0;
    int n = 0;
    if (lines > 64) lines = 64;
    while (getline(&line, &cap, f) >= 0) {
        free(ring[n % lines]);
        ring[n % lines] = strdup(line);
        n++;
    }
    free(line);
    fclose(f);
    for (int i = n > lines ? n - lines : 0; i < n; i++) fprintf(stderr, "  | %s", ring[i % lines] ? ring[i % lines] : "\n");
    for (int i = 0; i < lines; i++) free(ring[i]);
}

/* Trains one run in a child process (its own process group, so a terminal's ^C reaches this
 * process alone and is passed on as SIGTERM), output appended to log. Returns its exit status,
 * 128 + signal when killed, or -1 when it could not start. */
static int train_child(const char *config, const char *run_dir, const char *log, int extra_n, char **extra) {
    char **argv = calloc((size_t)extra_n + 12, sizeof *argv);
    if (!argv) return -1;
    int a = 0;
    argv[a++] = "gdn";
    argv[a++] = "train";
    argv[a++] = "--config";
    argv[a++] = (char *)config;
    for (int i = 0; i < extra_n; i++) argv[a++] = extra[i];
    argv[a++] = "--out";
    argv[a++] = (char *)run_dir;
    argv[a++] = "--resume";
    argv[a++] = "auto";
    argv[a] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        free(argv);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0666);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execv("/proc/self/exe", argv);
        fprintf(stderr, "gdn sweep run: cannot start gdn train: %s\n", strerror(errno));
        _exit(127);
    }
    free(argv);
    child_pid = pid;
    if (stop_requested) kill(pid, SIGTERM);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    child_pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* "val_loss 3.21, 12.3 s" from a finished run's summary. */
static void summary_line(const char *run_dir, char *out, size_t n) {
    char path[GDN_PATH_MAX + 32], e[256];
    snprintf(path, sizeof path, "%s/summary.json", run_dir);
    io_json *s = io_json_parse_file(path, e, sizeof e);
    double v = NAN, w = NAN;
    if (s) {
        io_json_get_number(s, "final_val_loss", &v, e, sizeof e);
        io_json_get_number(s, "wall_s", &w, e, sizeof e);
    }
    io_json_free(s);
    snprintf(out, n, "val_loss %.4f, %.1f s of training", v, w);
}

/* gdn train options a sweep sets for each run (or that would make its runs never "finished"). */
static int is_owned_option(const char *a) {
    static const char *const owned[] = {"--out", "--config", "--overwrite", "--steps", "--resume", "--preset",
                                        "--model_from", "--eval_only", NULL};
    for (int i = 0; owned[i]; i++) {
        size_t n = strlen(owned[i]);
        if (!strncmp(a, owned[i], n) && (a[n] == 0 || a[n] == '=')) return 1;
    }
    return 0;
}

static int cmd_run(int argc, char **argv) {
    const char *dir = NULL;
    int keep_going = 0, extra_n = 0;
    char **extra = calloc((size_t)argc + 1, sizeof *extra);
    if (!extra) return 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            free(extra);
            return 0;
        }
        if (!strcmp(argv[i], "--keep-going")) keep_going = 1;
        else if (!dir && argv[i][0] != '-') dir = argv[i];
        else if (is_owned_option(argv[i])) {
            fprintf(stderr, "gdn sweep run: %s is set by the sweep (each run has its config and directory)\n", argv[i]);
            free(extra);
            return 2;
        } else extra[extra_n++] = argv[i];
    }
    if (!dir) {
        fprintf(stderr, "gdn sweep run: give the sweep directory: gdn sweep run DIR (made by gdn sweep plan)\n");
        free(extra);
        return 2;
    }
    char path[GDN_PATH_MAX + 64], err[2048];
    snprintf(path, sizeof path, "%s/jobs.txt", dir);
    gdn_sweep_job *jobs = NULL;
    int n = 0;
    if (gdn_sweep_read_jobs(path, &jobs, &n, err, sizeof err)) {
        fprintf(stderr, "gdn sweep run: %s\n", err);
        free(extra);
        return 2;
    }
    snprintf(path, sizeof path, "%s/logs", dir);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/runs", dir);
    mkdir(path, 0777);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    int skipped = 0, trained = 0, failed = 0, busy = 0, status = 0;
    const double t0 = now_s();
    printf("gdn sweep run %s: %d runs\n", dir, n);
    for (int i = 0; i < n && !stop_requested; i++) {
        const gdn_sweep_job *j = &jobs[i];
        char run_dir[GDN_PATH_MAX + 256], log[GDN_PATH_MAX + 256], why[1024], line[256];
        snprintf(run_dir, sizeof run_dir, "%s/runs/%s", dir, j->name);
        snprintf(log, sizeof log, "%s/logs/%s.log", dir, j->name);
        if (gdn_sweep_run_finished(run_dir, j->config, why, sizeof why)) {
            summary_line(run_dir, line, sizeof line);
            printf("[%d/%d] %s: finished before (%s), skipped\n", i + 1, n, j->name, line);
            skipped++;
            continue;
        }
        if (access(j->config, R_OK)) {
            fprintf(stderr, "gdn sweep run: [%d/%d] %s: cannot read %s: %s\n", i + 1, n, j->name, j->config, strerror(errno));
            failed++;
            if (!keep_going) break;
            continue;
        }
        printf("[%d/%d] %s: training%s%s (log %s)\n", i + 1, n, j->name, why[0] ? "; " : "", why, log);
        fflush(stdout);
        const double t1 = now_s();
        int r = train_child(j->config, run_dir, log, extra_n, extra);
        if (r == 0 && gdn_sweep_run_finished(run_dir, j->config, why, sizeof why)) {
            trained++;
            summary_line(run_dir, line, sizeof line);
            double el = now_s() - t0;
            printf("[%d/%d] %s: done in %.1f s (%s); sweep %.0f s so far\n", i + 1, n, j->name, now_s() - t1, line, el);
            continue;
        }
        if (r == GDN_EXIT_REQUEUE || stop_requested) {
            printf("[%d/%d] %s: stopped at a checkpoint; run 'gdn sweep run %s' again to continue\n", i + 1, n,
                   j->name, dir);
            status = GDN_EXIT_REQUEUE;
            break;
        }
        if (r == GDN_EXIT_LOCKED) {
            printf("[%d/%d] %s: another gdn train holds it; left to that one\n", i + 1, n, j->name);
            busy++;
            continue;
        }
        fprintf(stderr, "gdn sweep run: [%d/%d] %s failed (%s %d%s%s); the end of %s:\n", i + 1, n, j->name,
                r > 128 ? "signal" : "exit status", r > 128 ? r - 128 : r, r == 0 ? ": " : "", r == 0 ? why : "", log);
        tail_log(log, 12);
        failed++;
        if (!keep_going) break;
    }
    if (stop_requested && status == 0) status = GDN_EXIT_REQUEUE;
    printf("gdn sweep run %s: %d trained, %d finished before, %d failed, %d held by another trainer, %d not reached; "
           "%.1f s\n", dir, trained, skipped, failed, busy, n - trained - skipped - failed - busy, now_s() - t0);
    free(jobs);
    free(extra);
    if (status) return status;
    return failed ? GDN_EXIT_ERROR : 0;
}

int gdn_cmd_sweep(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "plan")) return cmd_plan(argc - 1, argv + 1);
    if (!strcmp(argv[1], "run")) return cmd_run(argc - 1, argv + 1);
    fprintf(stderr, "gdn sweep: unknown subcommand '%s' (plan or run)\n", argv[1]);
    usage(stderr);
    return 2;
}
