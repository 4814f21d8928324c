/* AdamW with decoupled weight decay, global gradient norm and clipping, and the learning-rate
 * schedule (linear warm-up, cosine decay to a floor). All deterministic: results do not depend
 * on the number of threads. */
#ifndef GDN_OPTIM_H
#define GDN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "model/adamw_hparams.h"
#include "model/params.h"


/* One AdamW update of every tensor in the table; step is 1-based (bias correction).
 * params, grads, m, v: flat [t->total]. Tensors flagged no_decay get no weight decay. */
void gdn_adamw_update(const gdn_param_table *t, float *params, const float *grads, float *m, float *v,
                      const gdn_adamw_hparams *h, int64_t step);
/* The same update of the elements [lo, hi) of the flat buffers only (a shard of the optimizer
 * state, train/zero.h; the range may cut tensors anywhere): every pointer is to element lo,
 * params, grads, m, v [hi - lo]. Each element gets exactly the arithmetic of gdn_adamw_update,
 * its tensor's weight decay included. */
void gdn_adamw_update_range(const gdn_param_table *t, size_t lo, size_t hi, float *params,
                            const float *grads, float *m, float *v, const gdn_adamw_hparams *h,
                            int64_t step);

/* L2 norm of a flat buffer, summed in fixed-size blocks in a fixed order (in double). */
double gdn_grad_norm(const float *grads, size_t n);
/* Its square, the sum of squares (what shards add up before the root). */
double gdn_grad_sumsq(const float *grads, size_t n);
/* Scales grads by scale (used for clipping). */
void gdn_grad_scale(float *grads, size_t n, float scale);

/* Learning rate at 0-based step: linear warm-up to lr over warmup steps, then cosine decay to
 * lr_min at total_steps. */
double gdn_lr_at(int64_t step, int64_t total_steps, int64_t warmup, double lr, double lr_min);

#endif
