/* The training loop on the CPU backend. */
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "io/checkpoint.h"
#include "io/dataset.h"
#include "model/check.h"
#include "model/cpu/model_cpu.h"
#include "train/optim.h"

/* Set by SIGTERM / SIGUSR1; the loop checkpoints and exits after the current step. */
static volatile sig_atomic_t stop_signal = 0;

static void on_stop_signal(int sig) { stop_signal = sig; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int mkdir_p(const char *path) {
    char buf[GDN_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0777) && errno != EEXIST ? -1 : 0;
}

typedef struct {
    gdn_run_config rc;
    gdn_param_table table;
    float *arena;                /* params | grads | m | v, each [table.total] */
    float *params, *grads, *m, *v;
    gdn_cpu_acts_f32 *acts;
    io_dataset data;
    int *window;                 /* [B, T+1] */
    int *inputs, *targets;       /* [B*T] */
    int64_t step;                /* optimizer steps done */
    int64_t tokens_seen;
    uint64_t sample;             /* this rank's data sample counter */
    int accum;                   /* micro-batches per step */
    FILE *metrics;
} trainer;

static void split_window(trainer *t) {
    const int B = t->rc.batch_size, T = t->rc.seq_len;
    for (int b = 0; b < B; b++) {
        memcpy(t->inputs + (size_t)b * T, t->window + (size_t)b * (T + 1), (size_t)T * sizeof(int));
        memcpy(t->targets + (size_t)b * T, t->window + (size_t)b * (T + 1) + 1, (size_t)T * sizeof(int));
    }
}

/* Mean validation loss over up to eval_batches batches (NAN when there is no validation). */
static double evaluate(trainer *t) {
    const int B = t->rc.batch_size;
    uint64_t n = io_dataset_n_val_batches(&t->data, B, 1);
    if ((uint64_t)t->rc.eval_batches < n) n = (uint64_t)t->rc.eval_batches;
    if (n == 0) return NAN;
    double sum = 0.0;
    long long count = 0;
    for (uint64_t i = 0; i < n; i++) {
        io_dataset_val_batch(&t->data, i, B, 0, 1, t->window);
        split_window(t);
        int nv = 0;
        sum += gdn_cpu_forward_f32(t->acts, &t->table, t->params, t->inputs, t->targets, 0.0f, &nv, NULL, NULL);
        count += nv;
    }
    return sum / (double)count;
}

static void config_json(const gdn_run_config *rc, io_jw *w) {
    io_jw_init(w, 1);
    gdn_run_config_to_json(rc, w);
}

static int save_checkpoint(trainer *t) {
    char path[GDN_PATH_MAX + 32], err[1024];
    if (ckpt_path_for_step(t->rc.out, t->step, path, sizeof path)) {
        fprintf(stderr, "gdn train: run directory path too long: %s\n", t->rc.out);
        return -1;
    }
    io_jw w;
    config_json(&t->rc, &w);
    ckpt_kv state[3] = {{"data_position", (int64_t)t->sample},
                        {"schedule_step", t->step},
                        {"world_size", 1}};
    ckpt_contents c = {.step = t->step, .tokens_seen = t->tokens_seen, .config_json = io_jw_text(&w),
                       .model = &t->rc.model, .table = &t->table, .params = t->params, .m = t->m,
                       .v = t->v, .rng = NULL, .n_rng = 0, .state = state, .n_state = 3};
    double t0 = now_s();
    int r = ckpt_save_atomic(path, &c, err, sizeof err);
    io_jw_free(&w);
    if (r != CKPT_OK) {
        fprintf(stderr, "gdn train: checkpoint not written: %s\n", err);
        return -1;
    }
    printf("checkpoint %s (%.2f s)\n", path, now_s() - t0);
    if (ckpt_prune(t->rc.out, t->rc.keep, err, sizeof err) < 0)
        fprintf(stderr, "gdn train: warning: pruning old checkpoints failed: %s\n", err);
    return 0;
}

/* Prints the settings that differ between a checkpoint's run and this one. */
static void report_changed_settings(const char *saved_json, const gdn_run_config *rc) {
    gdn_run_config old;
    char err[512];
    if (gdn_run_config_from_json_text(&old, saved_json, err, sizeof err)) {
        printf("  (the checkpoint's saved configuration could not be read: %s)\n", err);
        return;
    }
    io_jw a, b;
    config_json(&old, &a);
    config_json(rc, &b);
    char *sa = strdup(io_jw_text(&a)), *sb = strdup(io_jw_text(&b));
    char *save_a = NULL, *save_b = NULL;
    char *la = strtok_r(sa, "\n", &save_a), *lb = strtok_r(sb, "\n", &save_b);
    int changed = 0;
    while (la && lb) {
        if (strcmp(la, lb)) {
            printf("  changed on resume: %s  (was %s)\n", lb + strspn(lb, " "), la + strspn(la, " "));
            changed++;
        }
        la = strtok_r(NULL, "\n", &save_a);
        lb = strtok_r(NULL, "\n", &save_b);
    }
    if (!changed) printf("  settings unchanged since the checkpoint\n");
    free(sa);
    free(sb);
    io_jw_free(&a);
    io_jw_free(&b);
}

/* Keeps only the metrics lines of steps <= step (a resumed run rewrites what followed). */
static int truncate_metrics(const char *path, int64_t step) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char tmp[GDN_PATH_MAX + 64];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *o = fopen(tmp, "w");
    if (!o) {
        fclose(f);
        return -1;
    }
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        const char *s = strstr(line, "\"step\":");
        if (s && strtoll(s + 7, NULL, 10) <= step) fputs(line, o);
    }
    fclose(f);
    if (fclose(o)) return -1;
    return rename(tmp, path);
}

/* Starts fresh, from --init-from weights, or resumes; returns 0 or -1 (message printed). */
static int restore(trainer *t) {
    char err[1024], path[GDN_PATH_MAX + 32];
    const gdn_run_config *rc = &t->rc;
    const char *resume_path = NULL;
    if (!strcmp(rc->resume, "auto")) {
        int64_t step = 0;
        int r = ckpt_find_resume(rc->out, path, sizeof path, &step, err, sizeof err);
        if (r < 0) {
            fprintf(stderr, "gdn train: cannot resume from %s: %s\n", rc->out, err);
            return -1;
        }
        if (r == 1) resume_path = path;
        else printf("resume auto: no checkpoint in %s, starting fresh\n", rc->out);
    } else if (rc->resume[0]) {
        resume_path = rc->resume;
    }
    if (resume_path) {
        ckpt_info info;
        int r = ckpt_load(resume_path, &rc->model, &t->table, t->params, t->m, t->v, &info, err, sizeof err);
        if (r != CKPT_OK) {
            fprintf(stderr, "gdn train: cannot resume from %s: %s\n", resume_path, err);
            return -1;
        }
        int64_t pos = 0, world = 1;
        if (ckpt_info_get(&info, "data_position", &pos) || pos < 0) {
            fprintf(stderr, "gdn train: %s has no data_position in /state\n", resume_path);
            ckpt_info_free(&info);
            return -1;
        }
        ckpt_info_get(&info, "world_size", &world);
        t->step = info.step;
        t->tokens_seen = info.tokens_seen;
        t->sample = (uint64_t)pos;
        printf("resuming from %s at step %lld (%lld tokens seen)\n", resume_path, (long long)t->step,
               (long long)t->tokens_seen);
        report_changed_settings(info.config_json, rc);
        ckpt_info_free(&info);
        return 0;
    }
    gdn_params_init(t->params, &t->table, (uint64_t)rc->seed);
    if (rc->init_from[0]) {
        int r = ckpt_load(rc->init_from, &rc->model, &t->table, t->params, NULL, NULL, NULL, err, sizeof err);
        if (r != CKPT_OK) {
            fprintf(stderr, "gdn train: --init_from %s: %s\n", rc->init_from, err);
            return -1;
        }
        printf("initialised weights from %s (fresh optimizer state)\n", rc->init_from);
    }
    return 0;
}

static void format_eta(double s, char *buf, size_t n) {
    if (!(s >= 0) || s > 1e7) snprintf(buf, n, "--");
    else if (s >= 3600) snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(fmod(s, 3600) / 60));
    else if (s >= 60) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else snprintf(buf, n, "%ds", (int)s);
}

static int open_run(trainer *t, int argc, char **argv) {
    const gdn_run_config *rc = &t->rc;
    char err[1024], path[GDN_PATH_MAX + 32];
    if (mkdir_p(rc->out)) {
        fprintf(stderr, "gdn train: cannot create run directory %s: %s\n", rc->out, strerror(errno));
        return -1;
    }
    io_dataset_opts opts = {.seq_len = rc->seq_len, .seed = (uint64_t)rc->seed,
                            .val_tokens = (size_t)rc->val_tokens, .val_fraction = 0.0};
    if (io_dataset_open_files(&t->data, rc->data, NULL, rc->model.vocab_size, &opts, err, sizeof err)) {
        fprintf(stderr, "gdn train: %s\n", err);
        return -1;
    }
    gdn_param_table_build(&t->table, &rc->model);
    size_t n = t->table.total;
    t->arena = GDN_CALLOC(4 * n, sizeof(float));
    t->params = t->arena;
    t->grads = t->arena + n;
    t->m = t->arena + 2 * n;
    t->v = t->arena + 3 * n;
    t->acts = gdn_cpu_acts_create_f32(&t->table, rc->batch_size, rc->seq_len);
    size_t win = (size_t)rc->batch_size * (rc->seq_len + 1), bt = (size_t)rc->batch_size * rc->seq_len;
    t->window = GDN_MALLOC(win * sizeof(int));
    t->inputs = GDN_MALLOC(bt * sizeof(int));
    t->targets = GDN_MALLOC(bt * sizeof(int));
    int64_t micro = (int64_t)bt;
    t->accum = rc->batch_tokens ? (int)((rc->batch_tokens + micro - 1) / micro) : 1;
    if (restore(t)) return -1;

    /* The resolved settings: printed, and saved with the run. */
    io_jw w;
    config_json(rc, &w);
    snprintf(path, sizeof path, "%s/config.json", rc->out);
    FILE *f = fopen(path, "w");
    if (!f || fprintf(f, "%s\n", io_jw_text(&w)) < 0 || fclose(f)) {
        fprintf(stderr, "gdn train: cannot write %s: %s\n", path, strerror(errno));
        io_jw_free(&w);
        return -1;
    }
    io_jw_free(&w);
    printf("gdn train:");
    for (int i = 1; i < argc; i++) printf(" %s", argv[i]);
    printf("\nsettings:\n");
    gdn_run_config_print(rc, stdout);
    printf("model: %.3fM parameters (%zu tensors), %d x %d tokens per micro-batch, %d micro-batch%s per step\n",
           (double)n / 1e6, (size_t)t->table.n, rc->batch_size, rc->seq_len, t->accum,
           t->accum == 1 ? "" : "es");
    printf("data: %s: %zu training tokens, %llu validation windows; %d CPU threads\n", rc->data,
           t->data.train.n_tokens, (unsigned long long)t->data.n_val_windows, omp_get_max_threads());

    snprintf(path, sizeof path, "%s/metrics.jsonl", rc->out);
    if (t->step > 0 && truncate_metrics(path, t->step)) {
        fprintf(stderr, "gdn train: cannot rewrite %s: %s\n", path, strerror(errno));
        return -1;
    }
    t->metrics = fopen(path, t->step > 0 ? "a" : "w");
    if (!t->metrics) {
        fprintf(stderr, "gdn train: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

static void close_run(trainer *t) {
    if (t->metrics) fclose(t->metrics);
    gdn_cpu_acts_free_f32(t->acts);
    free(t->arena);
    free(t->window);
    free(t->inputs);
    free(t->targets);
    gdn_param_table_free(&t->table);
    io_dataset_close(&t->data);
}

/* One optimizer step; returns the mean training loss and sets *gnorm and *lr. */
static double train_step(trainer *t, double *gnorm, double *lr) {
    const gdn_run_config *rc = &t->rc;
    const int B = rc->batch_size, T = rc->seq_len;
    const size_t n = t->table.total;
    const double tokens = (double)t->accum * B * T;
    memset(t->grads, 0, n * sizeof(float));
    double loss = 0.0;
    for (int a = 0; a < t->accum; a++) {
        io_dataset_train_batch(&t->data, t->sample, B, 0, 1, t->window);
        t->sample += (uint64_t)B;
        split_window(t);
        int nv = 0;
        loss += gdn_cpu_forward_f32(t->acts, &t->table, t->params, t->inputs, t->targets,
                                    (float)(1.0 / tokens), &nv, NULL, NULL);
        gdn_cpu_backward_f32(t->acts, &t->table, t->params, t->grads);
    }
    *gnorm = gdn_grad_norm(t->grads, n);
    if (rc->grad_clip > 0 && *gnorm > rc->grad_clip) gdn_grad_scale(t->grads, n, (float)(rc->grad_clip / *gnorm));
    *lr = gdn_lr_at(t->step, rc->decay_steps ? rc->decay_steps : rc->steps, rc->warmup_steps, rc->lr, rc->lr_min);
    gdn_adamw_hparams h = {*lr, rc->beta1, rc->beta2, rc->adam_eps, rc->weight_decay};
    gdn_adamw_update(&t->table, t->params, t->grads, t->m, t->v, &h, t->step + 1);
    t->step++;
    t->tokens_seen += (int64_t)tokens;
    return loss / tokens;
}

int gdn_train_run(const gdn_run_config *rc, int argc, char **argv) {
    static trainer t; /* zero-initialised; one run per process */
    memset(&t, 0, sizeof t);
    t.rc = *rc;
    /* One thread pool: OpenMP splits the work, OpenBLAS runs single-threaded inside it. */
    if (rc->threads > 0) omp_set_num_threads(rc->threads);
    openblas_set_num_threads(1);
    if (open_run(&t, argc, argv)) {
        close_run(&t);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);

    const int tty = isatty(STDOUT_FILENO);
    const double t_start = now_s();
    const int64_t first_step = t.step;
    int status = 0, saved_at_step = -1;
    double last_val = NAN;
    while (t.step < rc->steps) {
        double t0 = now_s(), gnorm = 0, lr = 0;
        double loss = train_step(&t, &gnorm, &lr);
        double dt = now_s() - t0;
        double tok_s = (double)t.accum * rc->batch_size * rc->seq_len / dt;
        if (!isfinite(loss)) {
            fprintf(stderr, "\ngdn train: the loss is %g at step %lld; stopping (try a lower lr)\n", loss,
                    (long long)t.step);
            status = 1;
            break;
        }
        int do_eval = (rc->eval_every > 0 && t.step % rc->eval_every == 0) || t.step == rc->steps;
        double val = do_eval ? evaluate(&t) : NAN;
        if (do_eval) last_val = val;

        io_jw w;
        io_jw_init(&w, 0);
        io_jw_begin_object(&w);
        io_jw_kv_int(&w, "step", t.step);
        io_jw_kv_number(&w, "loss", loss);
        io_jw_kv_number(&w, "lr", lr);
        io_jw_kv_number(&w, "grad_norm", gnorm);
        io_jw_kv_number(&w, "tokens_per_s", tok_s);
        io_jw_kv_int(&w, "tokens", t.tokens_seen);
        io_jw_kv_number(&w, "time_s", now_s() - t_start);
        if (do_eval && isfinite(val)) io_jw_kv_number(&w, "val_loss", val);
        io_jw_end_object(&w);
        fprintf(t.metrics, "%s\n", io_jw_text(&w));
        fflush(t.metrics);
        io_jw_free(&w);

        double elapsed = now_s() - t_start;
        char eta[32];
        format_eta(elapsed / (double)(t.step - first_step) * (double)(rc->steps - t.step), eta, sizeof eta);
        if (tty || t.step % rc->log_every == 0 || do_eval || t.step == rc->steps) {
            printf("%sstep %lld/%lld | loss %.4f | lr %.2e | grad %.3f | %.0f tok/s | ETA %s", tty ? "\r\033[K" : "",
                   (long long)t.step, (long long)rc->steps, loss, lr, gnorm, tok_s, eta);
            if (do_eval && isfinite(val)) printf(" | val_loss %.4f", val);
            if (!tty || do_eval) printf("\n");
            fflush(stdout);
        }
        int do_ckpt = (rc->ckpt_every > 0 && t.step % rc->ckpt_every == 0) || t.step == rc->steps;
        if (do_ckpt || stop_signal) {
            if (tty) printf("\n");
            if (save_checkpoint(&t)) {
                status = 1;
                break;
            }
            saved_at_step = (int)t.step;
        }
        if (stop_signal) {
            printf("stopped by signal %d at step %lld after writing a checkpoint; exit status %d (requeue)\n",
                   (int)stop_signal, (long long)t.step, GDN_EXIT_REQUEUE);
            status = GDN_EXIT_REQUEUE;
            break;
        }
    }
    (void)saved_at_step;
    if (status == 0) {
        double elapsed = now_s() - t_start;
        printf("done: %lld steps in %.1f s", (long long)(t.step - first_step), elapsed);
        if (isfinite(last_val)) printf(", final val_loss %.4f", last_val);
        printf("; run directory %s\n", rc->out);
    }
    close_run(&t);
    return status;
}
