/* ZeRO-1 (`gdn train --zero 1`): the AdamW moments are sharded over the ranks of the world.
 *
 * Without it every rank holds the fp32 parameters, gradients and both moments in full, sums the
 * gradients over the world (one all-reduce) and runs the same AdamW. With it the flat parameter
 * buffer [0, total) is cut into `size` equal blocks of `shard` = ceil(total / size) elements (the
 * buffers of parameters and gradients are padded to size x shard with zeros, so that the blocks
 * of a collective tile them); rank r owns [lo, hi) = block r within [0, total) and keeps moments
 * for it only: 2 x shard floats instead of 2 x total. A step:
 *   1. reduce-scatter of the gradients over the world (in place): block r of every rank's
 *      gradient, summed, lands in block r of rank r (the dp averaging and the sp reduction at
 *      once, as the all-reduce did);
 *   2. global gradient norm = sqrt(all-reduce sum of the blocks' sums of squares); clipping as
 *      without sharding;
 *   3. AdamW on [lo, hi) with this rank's moments (per element the same arithmetic, weight
 *      decay exemptions included);
 *   4. all-gather of the parameters (in place): every rank has the full updated weights.
 * Results equal the unsharded step up to the summation order of the gradients and of the norm.
 *
 * Checkpoints keep the full-size moments: world rank 0 gathers the blocks when saving, and hands
 * each rank its block when resuming (whatever world size and --zero setting wrote the file).
 * A world of one has nothing to shard: the layout is then the unsharded one. */
#ifndef GDN_TRAIN_ZERO_H
#define GDN_TRAIN_ZERO_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "model/params.h"
#include "model/backend.h"

typedef struct {
    int on;         /* moments sharded: --zero 1 on a world of more than one rank */
    int rank, size; /* world */
    size_t total;   /* parameters */
    size_t shard;   /* elements of every rank's block (total when off) */
    size_t padded;  /* shard x size: elements of the parameter and gradient buffers (total when off) */
    size_t lo, hi;  /* this rank's parameters [lo, hi), block rank cut to [0, total) ([0, total) when off) */
} gdn_zero;

/* The layout of total parameters over a world of `size` ranks (zero: the --zero stage, 0 or 1). */
void gdn_zero_layout(gdn_zero *z, size_t total, int zero, int rank, int size);
/* Block r of the world cut to [0, total): [*lo, *hi) (empty on trailing ranks of a tiny model). */
void gdn_zero_block(const gdn_zero *z, int r, size_t *lo, size_t *hi);
/* Elements of this rank's moment buffers m and v: shard when on, else total. */
size_t gdn_zero_state_len(const gdn_zero *z);

/* Checkpoints, over c (host buffers): world rank 0 collects every rank's moments block
 * mine [hi - lo] into full [total] (full: rank 0 only; NULL elsewhere). Collective. */
void gdn_zero_gather(gdn_comm *c, const gdn_zero *z, const float *mine, float *full, const char *what);
/* Rank 0's full [total] to every rank's block mine [hi - lo] (full: rank 0 only). Collective. */
void gdn_zero_scatter(gdn_comm *c, const gdn_zero *z, const float *full, float *mine, const char *what);

/* One sharded AdamW step (steps 1-4 above) of a model made with z's lo, hi and padded
 * (model/backend.h): the gradients and parameters in the model's memory go through data (MPI for
 * the CPU backend, the NCCL grid for CUDA), the norm's sum through ctl. The gradient buffer is
 * clobbered. Returns the global gradient norm before clipping (the same on every rank).
 * Collective over the world. */
double gdn_zero_adamw_step(gdn_comm *data, gdn_comm *ctl, const gdn_zero *z, gdn_model *m,
                           const gdn_adamw_hparams *h, int64_t step, double clip);

#endif
