/* ZeRO-1: the shard layout, the moments' gather and scatter for checkpoints, and the sharded
 * AdamW step of a model of either backend (the four steps of train/zero.h). */
#include "train/zero.h"

#include <math.h>
#include <string.h>

#include "model/check.h"

#define ZERO_TAG 0x2e50 /* point-to-point tag of the moments' blocks */

void gdn_zero_layout(gdn_zero *z, size_t total, int zero, int rank, int size) {
    memset(z, 0, sizeof *z);
    z->on = zero >= 1 && size > 1;
    z->rank = rank;
    z->size = size;
    z->total = total;
    z->shard = z->on ? (total + (size_t)size - 1) / (size_t)size : total;
    z->padded = z->on ? z->shard * (size_t)size : total;
    if (z->on) gdn_zero_block(z, rank, &z->lo, &z->hi);
    else z->hi = total;
}

void gdn_zero_block(const gdn_zero *z, int r, size_t *lo, size_t *hi) {
    const size_t a = (size_t)r * z->shard;
    *lo = a < z->total ? a : z->total;
    *hi = a + z->shard < z->total ? a + z->shard : z->total;
}

size_t gdn_zero_state_len(const gdn_zero *z) { return z->shard; }

void gdn_zero_gather(gdn_comm *c, const gdn_zero *z, const float *mine, float *full, const char *what) {
    if (c->rank != 0) {
        if (z->hi > z->lo) gdn_send(c, GDN_WORLD, 0, mine, z->hi - z->lo, GDN_F32, ZERO_TAG, what);
        gdn_wait_sends(c);
        return;
    }
    memcpy(full + z->lo, mine, (z->hi - z->lo) * sizeof(float));
    for (int r = 1; r < c->size; r++) {
        size_t lo, hi;
        gdn_zero_block(z, r, &lo, &hi);
        if (hi > lo) gdn_recv(c, GDN_WORLD, r, full + lo, hi - lo, GDN_F32, ZERO_TAG, what);
    }
}

void gdn_zero_scatter(gdn_comm *c, const gdn_zero *z, const float *full, float *mine, const char *what) {
    if (c->rank != 0) {
        if (z->hi > z->lo) gdn_recv(c, GDN_WORLD, 0, mine, z->hi - z->lo, GDN_F32, ZERO_TAG, what);
        return;
    }
    for (int r = 1; r < c->size; r++) {
        size_t lo, hi;
        gdn_zero_block(z, r, &lo, &hi);
        if (hi > lo) gdn_send(c, GDN_WORLD, r, full + lo, hi - lo, GDN_F32, ZERO_TAG, what);
    }
    memcpy(mine, full + z->lo, (z->hi - z->lo) * sizeof(float));
    gdn_wait_sends(c);
}

double gdn_zero_adamw_step(gdn_comm *data, gdn_comm *ctl, const gdn_zero *z, gdn_model *m,
                           const gdn_adamw_hparams *h, int64_t step, double clip) {
    GDN_ASSERT(z->on && m->table->total == z->total && m->shape.lo == z->lo && m->shape.hi == z->hi &&
               m->shape.padded == z->padded);
    const gdn_backend *be = m->backend;
    const size_t block = (size_t)z->rank * z->shard;
    float *params = be->params(m), *grads = be->grads(m);
    gdn_reduce_scatter(data, GDN_WORLD, grads, grads + block, z->shard, GDN_F32, GDN_SUM, "gradients");
    double sumsq = be->grad_sumsq(m);
    gdn_all_reduce(ctl, GDN_WORLD, &sumsq, 1, GDN_F64, GDN_SUM, "gradient norm");
    const double gnorm = sqrt(sumsq);
    be->adamw_shard(m, h, step, gnorm, clip); /* clips as it reads the gradient */
    gdn_all_gather(data, GDN_WORLD, params + block, params, z->shard, GDN_F32, "parameters");
    be->params_changed(m);
    return gnorm;
}
