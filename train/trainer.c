/* The training loop, on one rank or many, written once for both backends (model/backend.h;
 * train/train_backend.h chooses one): the CPU backend data and sequence parallel over comm/ (MPI),
 * the CUDA backend on one GPU or data and sequence parallel with one GPU per rank (gradients,
 * halos and states over NCCL; everything else over MPI). Every rank runs the same loop on its own
 * data; gradients, losses and stop
 * decisions are reduced so that all ranks keep identical parameters and take the same branches
 * (with --zero 1 each rank updates its block of the parameters and they are all-gathered,
 * train/zero.h).
 * Rank 0 alone prints, writes metrics and checkpoints. */
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "io/checkpoint.h"
#include "io/dataset.h"
#include "model/check.h"
#include "train/optim.h"
#include "train/metrics_log.h"
#include "train/run_dir.h"
#include "train/run_lock.h"
#include "train/run_summary.h"
#include "train/train_backend.h"
#include "train/train_dist.h"
#include "train/zero.h"

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
    gdn_train_opts opts;
    gdn_comm *comm;              /* world = dp x sp (control: MPI, host memory) */
    int T_seg;                   /* tokens per rank of each sequence: seq_len / sp */
    gdn_param_table table;
    gdn_zero zero;               /* the optimizer state's shard of this rank (--zero 1) */
    gdn_train_backend tb;        /* the model (B x T_seg), its data plane and sequence-parallel hooks */
    float *arena;                /* host copies for checkpoints: params [total] | m | v [zero.shard] */
    float *params, *m, *v;
    io_dataset data;
    int *window;                 /* [B, T+1] */
    int *inputs, *targets;       /* [B*T_seg] this rank's segment */
    int *doc_targets;            /* documents: [B, T] the window's targets (-1: not counted) */
    unsigned char *starts, *seg_starts; /* documents: [B, T] document starts, [B, T_seg] this rank's */
    int docs_refused;            /* documents: the backend refused a batch's starts */
    int64_t step;                /* optimizer steps done */
    int64_t tokens_seen;         /* over all ranks */
    uint64_t sample;             /* this rank's data sample counter (the same on every rank) */
    int accum;                   /* micro-batches per step */
    gdn_metrics_log metrics;     /* rank 0 */
    int lock_fd;                 /* rank 0: the run directory's lock (-1: none) */
    double *hook_stats;          /* [opts.hook->n_stats] this step's, summed over the job */
} trainer;

/* printf on rank 0 only. */
static void say(const trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const trainer *t, const char *fmt, ...) {
    if (t->comm->rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}

/* An error of this rank on stderr, naming the rank when there are several. */
static void complain(const trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void complain(const trainer *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (t->comm->size > 1) fprintf(stderr, "gdn train: rank %d: ", t->comm->rank);
    else fprintf(stderr, "gdn train: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Collective: 0 when no rank failed; else -1, with the first failing rank named by the others
 * (the failing rank printed its own cause). */
static int agree_ok(trainer *t, int failed, const char *what) {
    int r = gdn_comm_agree(t->comm, failed);
    if (r < 0) return 0;
    if (!failed && t->comm->rank == 0) fprintf(stderr, "gdn train: stopping: rank %d failed %s\n", r, what);
    return -1;
}

/* This rank's segment [sp_rank * T_seg, +T_seg) of the window's inputs and targets. */
static void split_window(trainer *t) {
    const int B = t->rc.batch_size, T = t->rc.seq_len, Ts = t->T_seg, t0 = t->comm->sp_rank * Ts;
    for (int b = 0; b < B; b++) {
        const int *w = t->window + (size_t)b * (T + 1) + t0;
        memcpy(t->inputs + (size_t)b * Ts, w, (size_t)Ts * sizeof(int));
        memcpy(t->targets + (size_t)b * Ts, w + 1, (size_t)Ts * sizeof(int));
    }
}

/* Documents: this rank's segment of the window's targets and starts (after split_window), the
 * starts to the model before its next pass. */
static void split_docs(trainer *t) {
    const int B = t->rc.batch_size, T = t->rc.seq_len, Ts = t->T_seg, t0 = t->comm->sp_rank * Ts;
    for (int b = 0; b < B; b++) {
        memcpy(t->targets + (size_t)b * Ts, t->doc_targets + (size_t)b * T + t0, (size_t)Ts * sizeof(int));
        memcpy(t->seg_starts + (size_t)b * Ts, t->starts + (size_t)b * T + t0, (size_t)Ts);
    }
    if (t->tb.be->set_doc_starts(t->tb.model, t->seg_starts)) t->docs_refused = 1;
}

/* This rank's micro-batch of training windows at its sample counter into inputs / targets. */
static void load_train(trainer *t) {
    if (t->rc.documents)
        io_dataset_train_docs(&t->data, t->sample, t->rc.batch_size, t->comm->dp_rank, t->comm->dp, t->window,
                              t->doc_targets, t->starts);
    else
        io_dataset_train_batch(&t->data, t->sample, t->rc.batch_size, t->comm->dp_rank, t->comm->dp, t->window);
    split_window(t);
    if (t->rc.documents) split_docs(t);
}

/* Collective, with documents: GDN_EXIT_ERROR when a rank's backend refused document starts. */
static int docs_refused(trainer *t) {
    if (!t->rc.documents || !agree_ok(t, t->docs_refused, "to run documents")) return 0;
    if (t->docs_refused) complain(t, "--documents: this backend cannot run these packed documents (see above)");
    return GDN_EXIT_ERROR;
}

/* The validation set is the first N = min(eval_batches x batch_size, validation windows) windows,
 * whatever the layout: batch j holds windows [jB, jB + B) (the last one padded with ignored
 * rows), the data-parallel ranks take batches j = dp_rank, dp_rank + dp, ..., and each batch's
 * loss sum goes to its own entry of a vector summed over the world and then in batch order. So
 * dp ranks give bitwise the value of one rank (the other entries add exact zeros) and sp ranks
 * the same to rounding (a batch's sum is formed from the sp segments). NAN without validation. */
static double evaluate(trainer *t) {
    const int B = t->rc.batch_size, T = t->rc.seq_len, Ts = t->T_seg, dp = t->comm->dp;
    uint64_t N = (uint64_t)t->rc.eval_batches * (uint64_t)B;
    if (N > t->data.n_val_windows) N = t->data.n_val_windows;
    if (N == 0) return NAN;
    const uint64_t nb = (N + (uint64_t)B - 1) / (uint64_t)B;
    double *acc = GDN_CALLOC(2 * nb, sizeof(double)); /* loss sums [nb], valid targets [nb] */
    for (uint64_t j = (uint64_t)t->comm->dp_rank; j < nb; j += (uint64_t)dp) {
        int rows = 0; /* real windows in this batch; the rest repeat the first with no targets */
        for (int b = 0; b < B; b++) {
            int *row = t->window + (size_t)b * (T + 1);
            if (j * (uint64_t)B + (uint64_t)b < N) {
                if (t->rc.documents)
                    io_dataset_val_docs(&t->data, j * (uint64_t)B + (uint64_t)b, row,
                                        t->doc_targets + (size_t)b * T, t->starts + (size_t)b * T);
                else
                    io_dataset_val_window(&t->data, j * (uint64_t)B + (uint64_t)b, row);
                rows++;
            } else {
                memcpy(row, t->window, (size_t)(T + 1) * sizeof(int));
                if (t->rc.documents) memcpy(t->starts + (size_t)b * T, t->starts, (size_t)T);
            }
        }
        split_window(t);
        if (t->rc.documents) split_docs(t);
        for (size_t i = (size_t)rows * Ts; i < (size_t)B * Ts; i++) t->targets[i] = -1;
        int nv = 0;
        acc[j] = t->tb.be->forward(t->tb.model, t->inputs, t->targets, 0.0f, &nv, NULL);
        acc[nb + j] = nv;
    }
    if (t->comm->size > 1)
        gdn_all_reduce(t->comm, GDN_WORLD, acc, 2 * nb, GDN_F64, GDN_SUM, "validation loss");
    double loss = 0.0, valid = 0.0;
    for (uint64_t j = 0; j < nb; j++) {
        loss += acc[j];
        valid += acc[nb + j];
    }
    free(acc);
    return loss / valid;
}

/* The mean loss of the current parameters on the next training micro-batch of every rank,
 * without consuming it: a finite number shows that the parameters about to be saved still
 * compute (an update can leave them finite but so large that the next forward overflows). */
static double probe_loss(trainer *t) {
    load_train(t);
    double acc[2] = {0.0, 0.0};
    int nv = 0;
    acc[0] = t->tb.be->forward(t->tb.model, t->inputs, t->targets, 0.0f, &nv, NULL);
    acc[1] = nv;
    if (t->comm->size > 1) gdn_all_reduce(t->comm, GDN_WORLD, acc, 2, GDN_F64, GDN_SUM, "probe loss");
    return acc[0] / acc[1];
}

/* "NaN", "+Inf" or "-Inf" for a non-finite x (printf's spelling varies: "-nan"). */
static const char *nonfinite_name(double x) { return isnan(x) ? "NaN" : x > 0 ? "+Inf" : "-Inf"; }

/* The index of the first non-finite value of x [n], or n. */
static size_t first_nonfinite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return n;
}

/* The name of the tensor holding flat index i of the parameter buffer. */
static const char *tensor_at(const gdn_param_table *tab, size_t i) {
    for (int k = 0; k < tab->n; k++)
        if (i >= tab->p[k].offset && i < tab->p[k].offset + tab->p[k].numel) return tab->p[k].name;
    return "?";
}

/* Collective: 0 when this rank's parameters and moments are finite and (known_loss, or else a
 * probe forward) give a finite loss; else GDN_EXIT_NONFINITE, with the cause printed. */
static int check_saveable(trainer *t, double known_loss) {
    const size_t n = t->table.total, ns = gdn_zero_state_len(&t->zero);
    size_t ip = first_nonfinite(t->params, n), im = first_nonfinite(t->m, ns), iv = first_nonfinite(t->v, ns);
    int bad = ip < n || im < ns || iv < ns;
    if (ip < n && t->comm->rank == 0) /* the same parameters on every rank */
        complain(t, "step %lld: parameter %s holds %s; not writing a checkpoint (the newest one "
                 "stays the last good state; try a lower --lr or --grad_clip)", (long long)t->step,
                 tensor_at(&t->table, ip), nonfinite_name(t->params[ip]));
    else if (im < ns || iv < ns)
        complain(t, "step %lld: the AdamW %s moment holds a non-finite value; not writing a checkpoint (try a "
                 "lower --lr)", (long long)t->step, im < ns ? "first" : "second");
    if (agree_ok(t, bad, "the finiteness check of the parameters")) return GDN_EXIT_NONFINITE;
    double loss = isfinite(known_loss) ? known_loss : probe_loss(t);
    if (!isfinite(loss)) { /* reduced: the same on every rank */
        if (t->comm->rank == 0)
            fprintf(stderr, "gdn train: step %lld: the parameters after this step give a loss of %s on the next "
                    "batch; not writing a checkpoint (the newest one stays the last good state; try a lower --lr)\n",
                    (long long)t->step, nonfinite_name(loss));
        return GDN_EXIT_NONFINITE;
    }
    return 0;
}

static void config_json(const gdn_run_config *rc, io_jw *w) {
    io_jw_init(w, 1);
    gdn_run_config_to_json(rc, w);
}

/* Rank 0 writes the checkpoint; collective (every rank learns whether it worked): 0,
 * GDN_EXIT_NONFINITE (the state is not finite: nothing written) or GDN_EXIT_ERROR. /state
 * records the grid, so that a resume on another world size can map the data position.
 * known_loss: a loss of the current parameters computed this step (validation), or NAN. */
static int save_checkpoint(trainer *t, double known_loss) {
    t->tb.be->download(t->tb.model, t->params, t->m, t->v);
    gdn_dist_check_same_params(t->comm, t->params, t->table.total);
    int bad = check_saveable(t, known_loss);
    if (bad) return bad;
    /* sharded moments: rank 0 gathers the blocks into full-size ones for the file */
    float *m = t->m, *v = t->v;
    if (t->zero.on) {
        const size_t n = t->table.total;
        m = v = NULL;
        if (t->comm->rank == 0) {
            m = GDN_MALLOC(2 * n * sizeof(float));
            v = m + n;
        }
        gdn_zero_gather(t->comm, &t->zero, t->m, m, "AdamW first moments");
        gdn_zero_gather(t->comm, &t->zero, t->v, v, "AdamW second moments");
    }
    int failed = 0;
    if (t->comm->rank == 0) {
        char path[GDN_PATH_MAX + 32], err[1024];
        if (ckpt_path_for_step(t->rc.out, t->step, path, sizeof path)) {
            complain(t, "run directory path too long: %s", t->rc.out);
            failed = 1;
        } else {
            io_jw w;
            config_json(&t->rc, &w);
            ckpt_kv state[7] = {{"data_position", (int64_t)t->sample},
                                {"schedule_step", t->step},
                                {"world_size", t->comm->size},
                                {"dp", t->comm->dp},
                                {"sp", t->comm->sp}};
            const gdn_train_hook *hk = t->opts.hook;
            const int n_state = 5 + (hk ? hk->n_state : 0);
            for (int i = 5; i < n_state; i++) {
                snprintf(state[i].name, sizeof state[i].name, "%s", hk->state_key[i - 5]);
                state[i].value = hk->state_value[i - 5];
            }
            ckpt_contents c = {.step = t->step, .tokens_seen = t->tokens_seen,
                               .config_json = io_jw_text(&w), .model = &t->rc.model, .table = &t->table,
                               .params = t->params, .m = m, .v = v, .rng = NULL, .n_rng = 0,
                               .state = state, .n_state = n_state};
            double t0 = now_s();
            int r = ckpt_save_atomic(path, &c, err, sizeof err);
            io_jw_free(&w);
            if (r != CKPT_OK) {
                complain(t, "checkpoint not written: %s", err);
                failed = 1;
            } else {
                printf("checkpoint %s (%.2f s)\n", path, now_s() - t0);
                if (ckpt_prune(t->rc.out, t->rc.keep, err, sizeof err) < 0)
                    complain(t, "warning: pruning old checkpoints failed: %s", err);
            }
        }
    }
    if (m != t->m) free(m);
    return agree_ok(t, failed, "to write a checkpoint") ? GDN_EXIT_ERROR : 0;
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

/* 0 when the checkpoint's run (its saved configuration) packed documents as this run does; else
 * -1 with the reason: a changed setting changes the windows and what the data position means. */
static int same_documents(const char *path, const char *saved_json, const gdn_run_config *rc) {
    static gdn_run_config old; /* large: off the stack */
    char err[512];
    if (!saved_json || gdn_run_config_from_json_text(&old, saved_json, err, sizeof err))
        return 0; /* unreadable: report_changed_settings says so; nothing to compare */
    if (old.documents == rc->documents && old.eod_token == rc->eod_token && old.mask_begin == rc->mask_begin &&
        old.mask_end == rc->mask_end && old.doc_fill == rc->doc_fill)
        return 0;
    fprintf(stderr, "gdn train: cannot resume from %s: it was trained with documents %s, eod_token %lld, "
            "mask_begin %lld, mask_end %lld, doc_fill %s, and this run asks for documents %s, eod_token %lld, "
            "mask_begin %lld, mask_end %lld, doc_fill %s: the windows and the data position would not continue "
            "the run; resume with the checkpoint's settings, or start a new run from its weights (--init_from "
            "%s)\n", path, old.documents ? "true" : "false", (long long)old.eod_token, (long long)old.mask_begin,
            (long long)old.mask_end, old.doc_fill ? "true" : "false", rc->documents ? "true" : "false",
            (long long)rc->eod_token, (long long)rc->mask_begin, (long long)rc->mask_end,
            rc->doc_fill ? "true" : "false", path);
    return -1;
}

/* Starts fresh, from --init-from weights, or resumes, into t->params and the full-size moments
 * m, v [total] (t->m, t->v unless they are sharded); returns 0 or -1 (message printed). Runs on
 * rank 0, which then hands the result to the others (restore_and_share). */
static int restore(trainer *t, float *m, float *v) {
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
        int r = ckpt_load(resume_path, &rc->model, &t->table, t->params, m, v, &info, err, sizeof err);
        if (r != CKPT_OK) {
            fprintf(stderr, "gdn train: cannot resume from %s: %s\n", resume_path, err);
            return -1;
        }
        int64_t pos = 0, world = 1, saved_sp = 1, saved_dp = 0;
        if (same_documents(resume_path, info.config_json, rc)) {
            ckpt_info_free(&info);
            return -1;
        }
        if (ckpt_info_get(&info, "data_position", &pos) || pos < 0) {
            fprintf(stderr, "gdn train: %s has no data_position in /state\n", resume_path);
            ckpt_info_free(&info);
            return -1;
        }
        ckpt_info_get(&info, "world_size", &world);
        ckpt_info_get(&info, "sp", &saved_sp);
        if (ckpt_info_get(&info, "dp", &saved_dp)) saved_dp = world / (saved_sp > 0 ? saved_sp : 1);
        uint64_t sample = 0;
        if (gdn_dist_map_data_position((uint64_t)pos, saved_dp, t->comm->dp, &sample, err, sizeof err)) {
            fprintf(stderr, "gdn train: cannot resume from %s: %s\n", resume_path, err);
            ckpt_info_free(&info);
            return -1;
        }
        t->step = info.step;
        t->tokens_seen = info.tokens_seen;
        t->sample = sample;
        printf("resuming from %s at step %lld (%lld tokens seen)\n", resume_path, (long long)t->step,
               (long long)t->tokens_seen);
        if (saved_dp != t->comm->dp || saved_sp != t->comm->sp)
            printf("  the checkpoint was written by %lld rank%s (dp %lld x sp %lld), this run has %d (dp %d x "
                   "sp %d): data position %lld samples per data-parallel rank -> %llu\n",
                   (long long)world, world == 1 ? "" : "s", (long long)saved_dp, (long long)saved_sp,
                   t->comm->size, t->comm->dp, t->comm->sp, (long long)pos, (unsigned long long)sample);
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

/* Restores on rank 0 (restore) and hands its weights, optimizer state and counters to every
 * rank; sharded moments go block by block, each rank receiving its own. Collective. */
static int restore_and_share(trainer *t) {
    gdn_comm *c = t->comm;
    const size_t n = t->table.total;
    float *m = t->m, *v = t->v; /* rank 0's full-size moments */
    if (t->zero.on && c->rank == 0) {
        m = GDN_CALLOC(2 * n, sizeof(float));
        v = m + n;
    }
    int failed = c->rank == 0 ? restore(t, m, v) != 0 : 0;
    int64_t head[4] = {failed, t->step, t->tokens_seen, (int64_t)t->sample};
    if (c->size > 1) gdn_broadcast(c, GDN_WORLD, head, 4, GDN_I64, 0, "resume state");
    if (!head[0] && c->size > 1) {
        t->step = head[1];
        t->tokens_seen = head[2];
        t->sample = (uint64_t)head[3];
        gdn_broadcast(c, GDN_WORLD, t->params, n, GDN_F32, 0, "parameters");
        if (t->zero.on) {
            gdn_zero_scatter(c, &t->zero, m, t->m, "AdamW first moments");
            gdn_zero_scatter(c, &t->zero, v, t->v, "AdamW second moments");
        } else {
            gdn_broadcast(c, GDN_WORLD, t->m, n, GDN_F32, 0, "AdamW first moments");
            gdn_broadcast(c, GDN_WORLD, t->v, n, GDN_F32, 0, "AdamW second moments");
        }
    }
    if (m != t->m) free(m);
    return head[0] ? -1 : 0;
}

/* What this job's grid sends per optimizer step, from the shapes. */
static void print_grid(const trainer *t) {
    const gdn_comm *c = t->comm;
    const gdn_run_config *rc = &t->rc;
    if (c->size == 1) {
        say(t, "distributed: one rank (start with mpiexec -n N for data / sequence parallelism)\n");
        return;
    }
    double grad_mb = (double)t->table.total * 4.0 / 1e6;
    double sp_mb = (double)gdn_train_backend_sp_bytes(&t->tb, rc, c->sp) * t->accum / 1e6;
    say(t, "distributed: %d ranks = dp %d x sp %d (%d per node, %d CPU thread%s each)", c->size, c->dp,
        c->sp, c->local_size, omp_get_max_threads(), omp_get_max_threads() == 1 ? "" : "s");
    if (c->sp > 1)
        say(t, "; %d tokens per rank of each sequence, sp_exchange %s", t->T_seg, rc->sp_exchange);
    if (t->zero.on) /* the padded buffer in equal blocks */
        say(t, "\ncommunication per step and rank: gradient reduce-scatter %.3f MB and parameter all-gather "
            "%.3f MB (payload: the whole buffer in, this rank's block out; a ring sends (n-1)/n of the buffer "
            "for each)", (double)t->zero.padded * 4.0 / 1e6, (double)t->zero.shard * 4.0 / 1e6);
    else
        say(t, "\ncommunication per step and rank: gradient all-reduce %.3f MB (payload; a ring moves "
            "2(n-1)/n of it each way)", grad_mb);
    if (c->sp > 1) say(t, ", sequence parallelism %.3f MB at most", sp_mb);
    say(t, "\n");
    char line[512];
    gdn_train_backend_data_line(&t->tb, t->zero.on, line, sizeof line);
    if (line[0]) say(t, "%s\n", line);
}

/* The AdamW moments each rank holds (on the GPU for the cuda backend, with host copies of the
 * same size for checkpoints). */
static void print_optimizer_state(const trainer *t) {
    const double mib = 2.0 * (double)gdn_zero_state_len(&t->zero) * sizeof(float) / 1048576.0;
    const double full = 2.0 * (double)t->table.total * sizeof(float) / 1048576.0;
    if (t->zero.on)
        say(t, "optimizer state: %.3f MiB per rank (AdamW m and v sharded over %d ranks, --zero 1; %.3f MiB "
            "unsharded)\n", mib, t->zero.size, full);
    else if (t->comm->size > 1)
        say(t, "optimizer state: %.3f MiB per rank (AdamW m and v, a full copy on every rank; --zero 1 shards "
            "it)\n", mib);
    else
        say(t, "optimizer state: %.3f MiB (AdamW m and v%s)\n", mib,
            t->rc.zero ? "; --zero 1 on one rank: nothing to shard, the same as --zero 0" : "");
    size_t pbytes = 0, abytes = 0;
    t->tb.be->memory(t->tb.model, &pbytes, &abytes);
    say(t, "%s memory per rank: parameters, gradients and optimizer state %.3f MiB, activations and scratch "
        "%.3f MiB\n", t->tb.be == &gdn_backend_cpu ? "host" : "GPU", (double)pbytes / 1048576.0,
        (double)abytes / 1048576.0);
}

/* Gradient buckets: the ranges the backward pass completes (from the end of the flat buffer down,
 * adjacent) gather until they hold grad_bucket elements; then their all-reduce starts (on GPUs on
 * the NCCL stream, while the backward goes on). The last range (lo = 0) flushes the rest. */
typedef struct {
    trainer *t;
    size_t lo, hi; /* pending [lo, hi) */
} grad_buckets;

static void on_grads_ready(void *ctx, float *grads, size_t lo, size_t hi) {
    grad_buckets *b = ctx;
    if (b->lo == b->hi) b->hi = hi;
    b->lo = lo;
    if (b->hi - b->lo >= b->t->tb.grad_bucket || lo == 0) {
        gdn_all_reduce_start(b->t->tb.data, GDN_WORLD, grads + b->lo, b->hi - b->lo, GDN_F32, GDN_SUM, "gradients");
        b->hi = b->lo;
    }
}

/* Collective: 0 when no rank failed, else the failing ranks' highest status (each printed its
 * cause; the others name the first failing rank). */
static int agree_status(trainer *t, int status, const char *what) {
    if (!agree_ok(t, status != 0, what)) return 0;
    int64_t s = status;
    if (t->comm->size > 1) gdn_all_reduce(t->comm, GDN_WORLD, &s, 1, GDN_I64, GDN_MAX, "exit status");
    return (int)s;
}

/* Rank 0, before anything in the run directory changes: creates it, takes its lock and checks
 * that it holds no other run (train/run_dir.h). Returns 0 or an exit status (cause printed). */
static int claim_run_dir(trainer *t) {
    const gdn_run_config *rc = &t->rc;
    char err[2048];
    struct stat st;
    if (mkdir_p(rc->out) || stat(rc->out, &st)) {
        complain(t, "cannot create run directory %s: %s", rc->out, strerror(errno));
        return GDN_EXIT_ERROR;
    }
    if (!S_ISDIR(st.st_mode)) {
        complain(t, "--out %s exists and is not a directory", rc->out);
        return GDN_EXIT_ERROR;
    }
    int r = gdn_run_lock(rc->out, &t->lock_fd, err, sizeof err);
    if (r != GDN_LOCK_OK) {
        complain(t, "%s", err);
        return r == GDN_LOCK_BUSY ? GDN_EXIT_LOCKED : GDN_EXIT_ERROR;
    }
    r = gdn_run_dir_check(rc->out, rc, rc->resume[0] == 0, t->opts.overwrite, err, sizeof err);
    if (r) {
        complain(t, "%s", err);
        return r == 2 ? GDN_EXIT_USAGE : GDN_EXIT_ERROR;
    }
    return 0;
}

/* Rank 0, once the run is set up: --overwrite's deletion, config.json (written whole or not
 * at all: a temp file renamed over it) and metrics.jsonl. 0 or -1 (cause printed). */
static int write_run_files(trainer *t) {
    const gdn_run_config *rc = &t->rc;
    char err[2048], path[GDN_PATH_MAX + 32], tmp[GDN_PATH_MAX + 48];
    if (t->opts.overwrite) {
        int removed = 0;
        if (gdn_run_dir_clear(rc->out, &removed, err, sizeof err)) {
            complain(t, "%s", err);
            return -1;
        }
        printf("--overwrite: deleted %d file%s of the previous run in %s\n", removed, removed == 1 ? "" : "s",
               rc->out);
    }
    io_jw w;
    config_json(rc, &w);
    snprintf(path, sizeof path, "%s/config.json", rc->out);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int bad = !f || fprintf(f, "%s\n", io_jw_text(&w)) < 0;
    if (f && fclose(f)) bad = 1;
    if (bad || rename(tmp, path)) {
        complain(t, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        io_jw_free(&w);
        return -1;
    }
    io_jw_free(&w);
    if (gdn_run_summary_remove(rc->out, err, sizeof err)) { /* not finished until it is written again */
        complain(t, "%s", err);
        return -1;
    }
    snprintf(path, sizeof path, "%s/metrics.jsonl", rc->out);
    if (gdn_metrics_open(&t->metrics, path, t->step > 0 ? t->step : -1, err, sizeof err)) {
        complain(t, "%s", err);
        return -1;
    }
    return 0;
}

/* Sets up the run (data, model, restored state, GPUs, run directory files); returns 0 or an
 * exit status. --eval_only reads the run directory and writes nothing there. */
static int open_run(trainer *t, const gdn_backend *be, int argc, char **argv) {
    const gdn_run_config *rc = &t->rc;
    gdn_comm *c = t->comm;
    char err[1024];
    int failed = 0;
    int status = c->rank == 0 && !t->opts.eval_only ? claim_run_dir(t) : 0;
    if ((status = agree_status(t, status, "to take the run directory"))) return status;
    io_dataset_opts opts = {.seq_len = rc->seq_len, .seed = (uint64_t)rc->seed,
                            .val_tokens = (size_t)rc->val_tokens, .val_fraction = 0.0,
                            .documents = rc->documents,
                            .docs = {rc->eod_token, rc->mask_begin, rc->mask_end, rc->doc_fill}};
    failed = io_dataset_open_files(&t->data, rc->data, NULL, rc->model.vocab_size, &opts, err,
                                   sizeof err) != 0;
    if (failed) complain(t, "%s", err);
    if (agree_ok(t, failed, "to open the data")) return GDN_EXIT_ERROR;
    gdn_param_table_build(&t->table, &rc->model);
    size_t n = t->table.total;
    gdn_zero_layout(&t->zero, n, rc->zero, c->rank, c->size);
    const size_t ns = gdn_zero_state_len(&t->zero);
    t->arena = GDN_CALLOC(n + 2 * ns, sizeof(float));
    t->params = t->arena;
    t->m = t->arena + n;
    t->v = t->m + ns;
    t->T_seg = rc->seq_len / c->sp; /* run_config checked that sp divides seq_len */
    size_t win = (size_t)rc->batch_size * (rc->seq_len + 1), bt = (size_t)rc->batch_size * t->T_seg;
    t->window = GDN_MALLOC(win * sizeof(int));
    t->inputs = GDN_MALLOC(bt * sizeof(int));
    t->targets = GDN_MALLOC(bt * sizeof(int));
    if (rc->documents) {
        t->doc_targets = GDN_MALLOC((size_t)rc->batch_size * rc->seq_len * sizeof(int));
        t->starts = GDN_MALLOC((size_t)rc->batch_size * rc->seq_len);
        t->seg_starts = GDN_MALLOC(bt);
    }
    /* batch_tokens counts every rank's tokens: one micro-batch of the job is dp x B x seq_len */
    int64_t micro = (int64_t)c->dp * rc->batch_size * rc->seq_len;
    t->accum = rc->batch_tokens ? (int)((rc->batch_tokens + micro - 1) / micro) : 1;
    if (restore_and_share(t)) return GDN_EXIT_ERROR;
    if (gdn_train_backend_open(&t->tb, be, rc, c, &t->table, &t->zero, t->T_seg, err, sizeof err)) {
        if (err[0]) complain(t, "%s", err);
        return GDN_EXIT_ERROR;
    }
    be->upload(t->tb.model, t->params, t->m, t->v);

    /* The resolved settings: printed, and saved with the run. */
    if (c->rank == 0 && !t->opts.eval_only) failed = write_run_files(t) != 0;
    if (!failed) {
        say(t, "backend: %s%s\n", gdn_train_backend_describe(&t->tb), !strcmp(rc->backend, "auto") ? " (auto)" : "");
        say(t, "gdn train:");
        for (int i = 1; i < argc; i++) say(t, " %s", argv[i]);
        say(t, "\nsettings:\n");
        if (c->rank == 0) gdn_run_config_print(rc, stdout);
        say(t, "model: %.3fM parameters (%zu tensors), %d x %d tokens per micro-batch and data-parallel "
            "rank, %d micro-batch%s per step\n", (double)n / 1e6, (size_t)t->table.n, rc->batch_size,
            rc->seq_len, t->accum, t->accum == 1 ? "" : "es");
        say(t, "data: %s: %zu training tokens, %llu validation windows; %d CPU threads\n", rc->data,
            t->data.train.n_tokens, (unsigned long long)t->data.n_val_windows, omp_get_max_threads());
        if (rc->documents) {
            const io_doc_layout *d = &t->data.train.docs;
            say(t, "documents: %llu in the training data (each opened by %s), packed into %llu windows of %d "
                "tokens; %.1f%% of their positions are counted targets (the rest: room after the last whole "
                "document, masked stretches, file ends)\n", (unsigned long long)d->n_docs,
                rc->eod_token >= 0 ? "eod_token" : "a file start", (unsigned long long)d->n, rc->seq_len,
                100.0 * (double)d->counted / ((double)d->n * rc->seq_len));
        }
        print_grid(t);
        print_optimizer_state(t);
    }
    return agree_ok(t, failed, "to write to the run directory") ? GDN_EXIT_ERROR : 0;
}

/* Releases everything open_run set up; 0, or -1 when closing metrics.jsonl failed (printed). */
static int close_run(trainer *t) {
    char err[1024];
    int r = gdn_metrics_close(&t->metrics, err, sizeof err);
    if (r) complain(t, "%s", err);
    gdn_run_unlock(t->lock_fd);
    t->lock_fd = -1;
    gdn_train_backend_close(&t->tb);
    free(t->arena);
    free(t->window);
    free(t->inputs);
    free(t->targets);
    free(t->hook_stats);
    free(t->doc_targets);
    free(t->starts);
    free(t->seg_starts);
    gdn_param_table_free(&t->table);
    io_dataset_close(&t->data);
    return r;
}

/* The next micro-batch of this rank's training windows into inputs / targets. */
static void next_train_batch(trainer *t) {
    load_train(t);
    t->sample += (uint64_t)t->rc.batch_size;
}

/* The counted targets of the job's next step: every position without documents; with them,
 * the windows' own counts (a pure function of the sample counter, the same on every rank). */
static double step_targets(const trainer *t) {
    const int B = t->rc.batch_size, dp = t->comm->dp;
    if (!t->rc.documents) return (double)t->accum * dp * B * t->rc.seq_len;
    uint64_t n = 0;
    for (uint64_t s = t->sample; s < t->sample + (uint64_t)t->accum * (uint64_t)B; s++)
        for (int r = 0; r < dp; r++) n += io_dataset_train_targets(&t->data, s * (uint64_t)dp + (uint64_t)r);
    return (double)n;
}

/* One optimizer step; returns the mean training loss over all ranks and sets *gnorm and *lr.
 * Every rank's gradient is its share of d(mean loss over the job's tokens)/dparams, so one sum
 * over the world gives the full gradient (dp averaging and the sp reduction at once). */
static double train_step(trainer *t, double *gnorm, double *lr) {
    const gdn_run_config *rc = &t->rc;
    gdn_comm *c = t->comm;
    const gdn_backend *be = t->tb.be;
    gdn_model *model = t->tb.model;
    const int B = rc->batch_size, T = rc->seq_len;
    const double tokens = step_targets(t); /* counted targets over the job */
    /* several ranks without sharding: the last micro-batch's backward pass starts the gradient
     * all-reduce range by range (sharded: reduce-scattered after it, train/zero.h) */
    const int all_reduce = c->size > 1 && !t->zero.on;
    *lr = gdn_lr_at(t->step, rc->decay_steps ? rc->decay_steps : rc->steps, rc->warmup_steps, rc->lr, rc->lr_min);
    be->zero_grads(model);
    double loss = 0.0;
    const gdn_train_hook *hook = t->opts.hook;
    if (hook) memset(t->hook_stats, 0, (size_t)hook->n_stats * sizeof(double));
    for (int a = 0; a < t->accum; a++) {
        next_train_batch(t);
        if (hook) { /* its loss; its gradients are complete on return */
            loss += hook->micro_batch(hook->ctx, model, t->inputs, t->targets, (float)(1.0 / tokens), t->hook_stats);
            grad_buckets gb = {t, 0, 0};
            if (all_reduce && a == t->accum - 1) on_grads_ready(&gb, be->grads(model), 0, t->table.total);
            continue;
        }
        int nv = 0;
        loss += be->forward(model, t->inputs, t->targets, (float)(1.0 / tokens), &nv, NULL);
        grad_buckets gb = {t, 0, 0};
        if (all_reduce && a == t->accum - 1) be->backward(model, on_grads_ready, &gb);
        else be->backward(model, NULL, NULL);
    }
    gdn_adamw_hparams h = {*lr, rc->beta1, rc->beta2, rc->adam_eps, rc->weight_decay};
    /* the loss over MPI (on GPUs while they finish), then the gradients' all-reduce */
    if (c->size > 1) gdn_all_reduce(c, GDN_WORLD, &loss, 1, GDN_F64, GDN_SUM, "training loss");
    if (c->size > 1 && hook && hook->n_stats)
        gdn_all_reduce(c, GDN_WORLD, t->hook_stats, (size_t)hook->n_stats, GDN_F64, GDN_SUM, "loss statistics");
    if (all_reduce) gdn_comm_wait(t->tb.data, "gradients");
    if (hook && hook->before_update) hook->before_update(hook->ctx, model);
    if (t->zero.on) /* reduce-scatter, norm, AdamW on this rank's block, all-gather (train/zero.h) */
        *gnorm = gdn_zero_adamw_step(t->tb.data, c, &t->zero, model, &h, t->step + 1, rc->grad_clip);
    else
        *gnorm = be->adamw_step(model, &h, t->step + 1, rc->grad_clip);
    if (hook && hook->after_update) hook->after_update(hook->ctx, model);
    t->step++;
    t->tokens_seen += (int64_t)t->accum * c->dp * B * T;
    return loss / tokens;
}

/* What one step reports. */
typedef struct {
    double loss, lr, gnorm, tok_s, time_s;
    int evaluated; /* val holds this step's validation loss (NAN without validation data) */
    double val;
} step_metrics;

/* Rank 0: appends step t->step's line to metrics.jsonl (non-finite values as null; stopped:
 * why the run stops at this step, or NULL). 0, or -1 with the failure printed. */
static int write_metrics(trainer *t, const step_metrics *m, const char *stopped) {
    io_jw w;
    char err[1024];
    io_jw_init(&w, 0);
    io_jw_begin_object(&w);
    io_jw_kv_int(&w, "step", t->step);
    io_jw_kv_number(&w, "loss", m->loss);
    io_jw_kv_number(&w, "lr", m->lr);
    io_jw_kv_number(&w, "grad_norm", m->gnorm);
    io_jw_kv_number(&w, "tokens_per_s", m->tok_s);
    io_jw_kv_int(&w, "tokens", t->tokens_seen);
    io_jw_kv_number(&w, "time_s", m->time_s);
    if (m->evaluated && (isfinite(m->val) || stopped)) io_jw_kv_number(&w, "val_loss", m->val);
    if (t->opts.hook && t->opts.hook->metrics) /* the step's tokens over the job, as train_step */
        t->opts.hook->metrics(t->opts.hook->ctx, &w, t->hook_stats,
                              (double)t->accum * t->comm->dp * t->rc.batch_size * t->rc.seq_len);
    if (stopped) io_jw_kv_string(&w, "stopped", stopped);
    io_jw_end_object(&w);
    int r = gdn_metrics_append(&t->metrics, io_jw_text(&w), err, sizeof err);
    if (r)
        fprintf(stderr, "gdn train: step %lld: %s%s\n", (long long)t->step, err,
                stopped ? "" : "; stopping without a checkpoint of this step (a resumed run repeats the steps "
                               "since the newest checkpoint and writes their lines again)");
    io_jw_free(&w);
    return r;
}

/* --eval_only: the validation loss of the restored checkpoint, printed by rank 0; 0, or
 * GDN_EXIT_ERROR when there was no checkpoint (checkpoints are written at steps >= 1). */
static int eval_only(trainer *t) {
    if (t->step == 0) {
        if (t->comm->rank == 0)
            fprintf(stderr, "gdn train: --eval_only: no checkpoint to evaluate (--resume %s)\n", t->rc.resume);
        return GDN_EXIT_ERROR;
    }
    if (t->data.n_val_windows == 0) {
        if (t->comm->rank == 0)
            fprintf(stderr, "gdn train: --eval_only: %s has no validation data (set --val_tokens)\n", t->rc.data);
        return GDN_EXIT_USAGE;
    }
    const double val = evaluate(t);
    if (docs_refused(t)) return GDN_EXIT_ERROR;
    uint64_t N = (uint64_t)t->rc.eval_batches * (uint64_t)t->rc.batch_size;
    if (N > t->data.n_val_windows) N = t->data.n_val_windows;
    say(t, "eval: step %lld, val_loss %.17g over %llu validation windows of %d tokens\n", (long long)t->step, val,
        (unsigned long long)N, t->rc.seq_len);
    return 0;
}

/* The process-wide settings of a run: threads and the stop signals. */
static void setup_process(const gdn_run_config *rc, gdn_comm *comm) {
    /* One thread pool: OpenMP splits the work, OpenBLAS runs single-threaded inside it. Ranks on
     * one node share its cores. */
    omp_set_num_threads(gdn_dist_threads(comm, rc->threads));
    openblas_set_num_threads(1);
    /* before anything slow: a signal during start-up stops the run after its first step */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

/* What the step loop measures from its start: time, steps, communication, the last validation. */
typedef struct {
    int tty; /* a live one-line progress on a terminal */
    double t_start;
    int64_t first_step;
    gdn_comm_bytes bytes0, data_bytes0; /* control and data plane (the same when one) */
    double wait0, data_wait0;
    double last_val; /* the newest finite validation loss (NAN: none yet) */
} run_progress;

static run_progress progress_start(const trainer *t) {
    const gdn_comm *c = t->comm;
    run_progress p;
    memset(&p, 0, sizeof p);
    /* launchers hand ranks a pseudo-terminal even when their own output is a file: the live
     * one-line progress is for plain runs */
    p.tty = c->size == 1 && isatty(STDOUT_FILENO);
    p.t_start = now_s();
    p.first_step = t->step;
    p.bytes0 = c->bytes;
    p.wait0 = c->wait_s;
    p.data_bytes0 = t->tb.data->bytes;
    p.data_wait0 = t->tb.data->wait_s;
    p.last_val = NAN;
    return p;
}

/* A non-finite value (what: "training loss", ...) at this step: rank 0 says so and writes the
 * step's metrics line marked stopped; returns GDN_EXIT_NONFINITE. The value was reduced, so
 * every rank comes here together; nothing is saved after it. */
static int stop_nonfinite(trainer *t, const run_progress *p, const step_metrics *m, const char *what, double x,
                          const char *stopped) {
    if (t->comm->rank == 0) {
        fprintf(stderr, "%sgdn train: step %lld: the %s is %s; stopping without writing a checkpoint (the "
                "newest checkpoint is the last good state; try a lower --lr, a --grad_clip or more "
                "--warmup_steps)\n", p->tty ? "\n" : "", (long long)t->step, what, nonfinite_name(x));
        write_metrics(t, m, stopped);
    }
    return GDN_EXIT_NONFINITE;
}

/* Rank 0: the step's progress line (every step on a terminal, else every --log_every steps, at
 * evaluations and at the last step). */
static void log_step(const trainer *t, const run_progress *p, const step_metrics *m) {
    const gdn_run_config *rc = &t->rc;
    double elapsed = now_s() - p->t_start;
    char eta[32];
    format_eta(elapsed / (double)(t->step - p->first_step) * (double)(rc->steps - t->step), eta, sizeof eta);
    if (p->tty || t->step % rc->log_every == 0 || m->evaluated || t->step == rc->steps) {
        say(t, "%sstep %lld/%lld | loss %.4f | lr %.2e | grad %.3f | %.0f tok/s | ETA %s", p->tty ? "\r\033[K" : "",
            (long long)t->step, (long long)rc->steps, m->loss, m->lr, m->gnorm, m->tok_s, eta);
        if (m->evaluated && isfinite(m->val)) say(t, " | val_loss %.4f", m->val);
        if (!p->tty || m->evaluated) say(t, "\n");
        fflush(stdout);
    }
}

/* One step of the loop: train, check, evaluate, record, log, checkpoint, honour a stop signal.
 * Returns 0 to go on, else the run's exit status. Every rank takes the same branches. */
static int run_step(trainer *t, run_progress *p) {
    const gdn_run_config *rc = &t->rc;
    gdn_comm *c = t->comm;
    double t0 = now_s(), gnorm = 0, lr = 0;
    double loss = train_step(t, &gnorm, &lr);
    if (docs_refused(t)) return GDN_EXIT_ERROR;
    double dt = now_s() - t0;
    step_metrics m = {loss, lr, gnorm, (double)t->accum * c->dp * rc->batch_size * rc->seq_len / dt,
                      now_s() - p->t_start, 0, NAN};
    /* the loss and the gradient norm are reduced: the same on every rank */
    if (!isfinite(loss))
        return stop_nonfinite(t, p, &m, "training loss", loss, "non-finite loss");
    if (!isfinite(gnorm))
        return stop_nonfinite(t, p, &m, "gradient norm", gnorm, "non-finite gradient norm");
    m.evaluated = (rc->eval_every > 0 && t->step % rc->eval_every == 0) || t->step == rc->steps;
    m.val = m.evaluated ? evaluate(t) : NAN;
    if (docs_refused(t)) return GDN_EXIT_ERROR;
    if (m.evaluated && !isfinite(m.val) && t->data.n_val_windows > 0)
        return stop_nonfinite(t, p, &m, "validation loss", m.val, "non-finite validation loss");
    if (m.evaluated) p->last_val = m.val;

    int metrics_failed = c->rank == 0 && write_metrics(t, &m, NULL);
    /* a signal may reach some ranks only, or between their checks, and metrics are written
     * by rank 0 alone: decide together (and name the signal the same way on every rank) */
    int64_t flags[2] = {stop_signal, metrics_failed};
    if (c->size > 1) gdn_all_reduce(c, GDN_WORLD, flags, 2, GDN_I64, GDN_MAX, "stop signal");
    const int64_t sig = flags[0];
    if (flags[1]) return GDN_EXIT_ERROR;

    log_step(t, p, &m);
    int do_ckpt = (rc->ckpt_every > 0 && t->step % rc->ckpt_every == 0) || t->step == rc->steps;
    if (do_ckpt || sig) {
        if (p->tty) printf("\n");
        int status = save_checkpoint(t, m.evaluated ? m.val : NAN);
        if (status) return status;
    }
    if (sig) {
        say(t, "stopped by signal %d at step %lld after writing a checkpoint; exit status %d (requeue)\n",
            (int)sig, (long long)t->step, GDN_EXIT_REQUEUE);
        return GDN_EXIT_REQUEUE;
    }
    return 0;
}

/* Collective: closes metrics.jsonl on rank 0 (a file that does not close cleanly may have lost
 * lines) and returns the run's status with a close failure folded in. */
static int finish_metrics(trainer *t, int status) {
    char err[1024];
    int closed = t->comm->rank == 0 && gdn_metrics_close(&t->metrics, err, sizeof err) ? GDN_EXIT_ERROR : 0;
    if (closed) complain(t, "%s", err);
    closed = agree_status(t, closed, "to close metrics.jsonl");
    if (closed && (status == 0 || status == GDN_EXIT_REQUEUE)) status = closed;
    return status;
}

/* Rank 0, several ranks: the measured communication per step (validation and checkpoint
 * traffic included; rank 0 is the first rank of its sequence group). */
static void print_comm_summary(const trainer *t, const run_progress *p, int64_t steps, double elapsed) {
    const gdn_comm *c = t->comm;
    const gdn_comm_bytes *b = &c->bytes, *b0 = &p->bytes0;
    say(t, "communication of rank 0 per step (measured, payload): all-reduce %.3f MB, "
        "reduce-scatter %.3f MB, all-gather %.3f MB, sends %.3f MB, broadcast %.3f MB\n",
        (double)(b->all_reduce - b0->all_reduce) / 1e6 / (double)steps,
        (double)(b->reduce_scatter - b0->reduce_scatter) / 1e6 / (double)steps,
        (double)(b->all_gather - b0->all_gather) / 1e6 / (double)steps,
        (double)(b->send - b0->send) / 1e6 / (double)steps,
        (double)(b->broadcast - b0->broadcast) / 1e6 / (double)steps);
    say(t, "rank 0 waited for other ranks %.1f%% of the time\n", 100.0 * (c->wait_s - p->wait0) / elapsed);
    const gdn_comm *d = t->tb.data;
    if (d != c) { /* a data plane of its own (NCCL) */
        const gdn_comm_bytes *g = &d->bytes, *g0 = &p->data_bytes0;
        if (t->zero.on)
            say(t, "%s on rank 0 per step: gradient reduce-scatter %.3f MB, parameter all-gather %.3f MB",
                d->ops->name, (double)(g->reduce_scatter - g0->reduce_scatter) / 1e6 / (double)steps,
                (double)(g->all_gather - g0->all_gather) / 1e6 / (double)steps);
        else
            say(t, "%s on rank 0 per step: gradient all-reduce %.3f MB", d->ops->name,
                (double)(g->all_reduce - g0->all_reduce) / 1e6 / (double)steps);
        if (t->tb.seqpar) /* validation passes included; rank 0 sends the forward pass's part */
            say(t, ", sequence-parallel sends %.3f MB", (double)(g->send - g0->send) / 1e6 / (double)steps);
        say(t, "; waited for %s %.1f%% of the time (%.1f ms per step)\n",
            t->zero.on ? "the reduce-scatter and all-gather" : "the gradients after the backward pass",
            100.0 * (d->wait_s - p->data_wait0) / elapsed, 1e3 * (d->wait_s - p->data_wait0) / (double)steps);
    }
}

/* Rank 0, after a run that ended well: steps, time, final validation loss, communication. */
static void print_summary(const trainer *t, const run_progress *p) {
    double elapsed = now_s() - p->t_start;
    int64_t steps = t->step - p->first_step;
    say(t, "done: %lld steps in %.1f s", (long long)steps, elapsed);
    if (isfinite(p->last_val)) say(t, ", final val_loss %.4f", p->last_val);
    say(t, "; run directory %s\n", t->rc.out);
    if (t->comm->size > 1 && steps > 0) print_comm_summary(t, p, steps, elapsed);
}

int gdn_train_run(const gdn_run_config *rc, const gdn_train_opts *opts, gdn_comm *comm, int argc, char **argv) {
    static trainer t; /* zero-initialised; one run per process */
    memset(&t, 0, sizeof t);
    t.rc = *rc;
    t.opts = *opts;
    t.comm = comm;
    t.metrics.fd = -1;
    t.lock_fd = -1;
    const gdn_backend *be = NULL;
    int status = gdn_train_backend_choose(rc, comm, &be);
    if (status) return status;
    if (opts->hook) t.hook_stats = GDN_CALLOC((size_t)opts->hook->n_stats + 1, sizeof(double));
    setup_process(rc, comm);
    status = open_run(&t, be, argc, argv);
    if (status || opts->eval_only) {
        if (!status) status = eval_only(&t);
        close_run(&t);
        return status;
    }
    run_progress p = progress_start(&t);
    while (t.step < rc->steps)
        if ((status = run_step(&t, &p))) break;
    status = finish_metrics(&t, status);
    if (status == 0) print_summary(&t, &p);
    if (status == 0 && comm->rank == 0) { /* summary.json: what a scaling analysis reads (run_summary.h) */
        char err[1024];
        gdn_hardware hw = {t.tb.be->name, gdn_train_backend_describe(&t.tb), comm->size, omp_get_max_threads()};
        if (gdn_run_summary_write(&t.rc, t.tokens_seen, &hw, err, sizeof err)) {
            complain(&t, "%s", err);
            status = GDN_EXIT_ERROR;
        }
    }
    close_run(&t);
    return status;
}
