/* The backend of a training run (model/backend.h): which one the run takes, its model, the data
 * plane that reduces the model's buffers and the sequence-parallel exchange. The one place in the
 * trainer where the backends differ: everything else goes through the backend table. */
#ifndef GDN_TRAIN_BACKEND_H
#define GDN_TRAIN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "model/backend.h"
#include "train/run_config.h"
#include "train/zero.h"

typedef struct {
    const gdn_backend *be;
    gdn_precision precision;
    gdn_model *model;
    gdn_comm *data;     /* collectives over the model's buffers: the control comm (CPU: MPI, host) or
                           the NCCL grid (CUDA on several ranks, device buffers) */
    int own_data;       /* data is the NCCL grid made here */
    size_t grad_bucket; /* elements per gradient all-reduce overlapping the backward pass (SIZE_MAX:
                           one, when the backward pass ends) */
    void *seqpar;       /* the sequence-parallel exchange (sp > 1) */
} gdn_train_backend;

/* Which backend the run takes: cuda for one process on one GPU, or data and sequence parallel
 * with one GPU per rank over NCCL (sequence parallel: the pass exchange); auto takes the GPU when
 * there is one and the job is a single process. Collective: 0, or GDN_EXIT_USAGE on every rank
 * when some rank cannot run the chosen backend (the lowest such rank says why). */
int gdn_train_backend_choose(const gdn_run_config *rc, gdn_comm *comm, const gdn_backend **be);

/* Makes the model for micro-batches of B x T_seg tokens with z's optimizer shard, the data plane
 * (NCCL on several GPU ranks) and the sequence-parallel hooks (sp > 1); uploads nothing.
 * Collective. 0, or -1 with the reason in err (every rank fails together). */
int gdn_train_backend_open(gdn_train_backend *tb, const gdn_backend *be, const gdn_run_config *rc, gdn_comm *comm,
                           const gdn_param_table *t, const gdn_zero *z, int T_seg, char *err, size_t errlen);
void gdn_train_backend_close(gdn_train_backend *tb);

/* "cuda (bf16 activations and matrix inputs, fp32 master weights)", "cpu", ... */
const char *gdn_train_backend_describe(const gdn_train_backend *tb);
/* Payload bytes a rank sends for sequence parallelism per forward + backward pass of a micro-batch
 * (the most any rank of the group sends). */
uint64_t gdn_train_backend_sp_bytes(const gdn_train_backend *tb, const gdn_run_config *rc, int sp);
/* One line on the data plane when it is not the control one ("GPUs: one per rank ..."), or "". */
void gdn_train_backend_data_line(const gdn_train_backend *tb, int zero, char *out, size_t n);

#endif
