/* The training loop: data -> model -> loss -> gradients -> AdamW -> metrics and checkpoints. */
#ifndef GDN_TRAINER_H
#define GDN_TRAINER_H

#include "comm/comm.h"
#include "io/json.h"
#include "model/backend.h"
#include "train/run_config.h"

/* Exit statuses of gdn train (every rank of a job returns the same one). */
#define GDN_EXIT_ERROR 1     /* an error: data, run directory, checkpoint or metrics write, ... */
#define GDN_EXIT_USAGE 2     /* bad settings, or a run directory that holds a different run */
#define GDN_EXIT_NONFINITE 3 /* the loss, gradient or parameters became NaN/Inf; nothing saved */
#define GDN_EXIT_LOCKED 4    /* another gdn train holds the run directory's lock */
/* Stopped by SIGTERM or SIGUSR1 after writing its checkpoint: the batch script requeues the
 * job on this status (sysexits' EX_TEMPFAIL). */
#define GDN_EXIT_REQUEUE 75

/* Another loss for the same loop (gdn distill train, train/distill_train.c): the trainer keeps
 * data, schedule, gradient reduction, AdamW, validation (the model's own next-token loss),
 * metrics, checkpoints, signals and resume, and asks the hook for each micro-batch's loss and
 * gradients. Every rank calls the hook in the same order. */
typedef struct {
    void *ctx;
    int n_stats; /* per-step statistics: summed over micro-batches and ranks */
    /* One micro-batch: forward and backward on model, ACCUMULATING d(loss_sum * grad_scale) into its
     * gradients (complete on return); returns loss_sum (the trainer reports the step's sum
     * times grad_scale) and adds its statistics into stats. */
    double (*micro_batch)(void *ctx, gdn_model *model, const int *inputs, const int *targets, float grad_scale,
                          double *stats);
    /* Before the update, with the gradients reduced (may zero frozen ones), and after it (may put
     * frozen parameters back); NULL: nothing. */
    void (*before_update)(void *ctx, gdn_model *model);
    void (*after_update)(void *ctx, gdn_model *model);
    /* Rank 0: the step's extra fields of metrics.jsonl from stats (summed over the job) and the
     * step's tokens. */
    void (*metrics)(void *ctx, io_jw *w, const double *stats, double tokens);
    /* Extra integer entries of each checkpoint's /state (e.g. the distillation stage). */
    int n_state;
    const char *state_key[2];
    int64_t state_value[2];
} gdn_train_hook;

/* Options of gdn train that are not run settings (never saved with the run). */
typedef struct {
    int overwrite; /* --overwrite: delete the run's own files in --out, then start fresh */
    int eval_only; /* --eval_only: evaluate the --resume checkpoint and write nothing */
    const gdn_train_hook *hook; /* NULL: next-token cross-entropy */
} gdn_train_opts;

/* Runs the whole training described by rc (already resolved and validated) on the ranks of
 * comm (one rank for a plain run). Collective: every rank returns the same status: 0 when all
 * steps are done, else one of GDN_EXIT_* above (the failing rank printed the cause). */
int gdn_train_run(const gdn_run_config *rc, const gdn_train_opts *opts, gdn_comm *comm, int argc, char **argv);

#endif
