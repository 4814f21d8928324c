/* The training loop: data -> model -> loss -> gradients -> AdamW -> metrics and checkpoints. */
#ifndef GDN_TRAINER_H
#define GDN_TRAINER_H

#include "comm/comm.h"
#include "train/run_config.h"

/* Exit statuses of gdn train (every rank of a job returns the same one). */
#define GDN_EXIT_ERROR 1     /* an error: data, run directory, checkpoint or metrics write, ... */
#define GDN_EXIT_USAGE 2     /* bad settings, or a run directory that holds a different run */
#define GDN_EXIT_NONFINITE 3 /* the loss, gradient or parameters became NaN/Inf; nothing saved */
#define GDN_EXIT_LOCKED 4    /* another gdn train holds the run directory's lock */
/* Stopped by SIGTERM or SIGUSR1 after writing its checkpoint: the batch script requeues the
 * job on this status (sysexits' EX_TEMPFAIL). */
#define GDN_EXIT_REQUEUE 75

/* Options of gdn train that are not run settings (never saved with the run). */
typedef struct {
    int overwrite; /* --overwrite: delete the run's own files in --out, then start fresh */
    int eval_only; /* --eval_only: evaluate the --resume checkpoint and write nothing */
} gdn_train_opts;

/* Runs the whole training described by rc (already resolved and validated) on the ranks of
 * comm (one rank for a plain run). Collective: every rank returns the same status: 0 when all
 * steps are done, else one of GDN_EXIT_* above (the failing rank printed the cause). */
int gdn_train_run(const gdn_run_config *rc, const gdn_train_opts *opts, gdn_comm *comm, int argc, char **argv);

#endif
