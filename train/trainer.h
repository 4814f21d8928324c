/* The training loop: data -> model -> loss -> gradients -> AdamW -> metrics and checkpoints. */
#ifndef GDN_TRAINER_H
#define GDN_TRAINER_H

#include "comm/comm.h"
#include "train/run_config.h"

/* Exit status of a run stopped by SIGTERM or SIGUSR1 after writing its checkpoint: the batch
 * script requeues the job on this status (sysexits' EX_TEMPFAIL). */
#define GDN_EXIT_REQUEUE 75

/* Runs the whole training described by rc (already resolved and validated) on the ranks of
 * comm (one rank for a plain run). Collective: every rank returns the same status: 0 when all
 * steps are done, GDN_EXIT_REQUEUE when stopped by a signal after a checkpoint, 1 on error
 * (the failing rank printed the cause). */
int gdn_train_run(const gdn_run_config *rc, gdn_comm *comm, int argc, char **argv);

#endif
