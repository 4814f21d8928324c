/* gdn distill train: a Gated DeltaNet student trained against its softmax teacher in two stages
 * (docs/distillation.md "Training"), each a run of the training loop (train/trainer.h) with a
 * loss hook, in its own run directory OUT/stage1, OUT/stage2:
 *   stage 1: sum over the converted layers of the mean squared error between the student's and
 *            the teacher's mixer outputs, each student mixer fed the teacher's input to its
 *            layer (teacher-forced); only the converted layers' mixer tensors train;
 *   stage 2: tau^2 KL(teacher || student) on the logits at temperature tau, plus ce_weight times
 *            the next-token cross-entropy; the mixers or every tensor train.
 * The teacher runs forward only, on the student's backend and ranks, with the same tokens. */
#ifndef GDN_TRAIN_DISTILL_TRAIN_H
#define GDN_TRAIN_DISTILL_TRAIN_H

#include <stdint.h>

#include "comm/comm.h"
#include "train/run_config.h"

typedef struct {
    const char *teacher;   /* the teacher checkpoint (the student comes from rc->model / init_from) */
    const char *student;   /* the student's starting checkpoint (gdn distill init) */
    int64_t steps[2];      /* steps of stage 1 and 2 (0: skip that stage) */
    double lr[2];          /* peak learning rate of each stage */
    double tau, ce_weight; /* stage 2 */
    int train_all;         /* stage 2: every tensor trains (else the converted mixers) */
} distill_train_opts;

/* Runs the stages not yet complete in rc->out (resuming the newest checkpoint of the current
 * one), with rc's other settings. Collective; returns 0 or a GDN_EXIT_* status (75: stopped by
 * a signal after a checkpoint; run it again to continue). */
int distill_train_run(const gdn_run_config *rc, const distill_train_opts *o, gdn_comm *comm, int argc,
                      char **argv);

#endif
