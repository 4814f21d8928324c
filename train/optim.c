/* AdamW, gradient norm/clipping and the learning-rate schedule. */
#include "train/optim.h"

#include <math.h>
#include <stdlib.h>

#include "model/check.h"

void gdn_adamw_update(const gdn_param_table *t, float *params, const float *grads, float *m, float *v,
                      const gdn_adamw_hparams *h, int64_t step) {
    gdn_adamw_update_range(t, 0, t->total, params, grads, m, v, h, step);
}

void gdn_adamw_update_range(const gdn_param_table *t, size_t lo, size_t hi, float *params,
                            const float *grads, float *m, float *v, const gdn_adamw_hparams *h,
                            int64_t step) {
    GDN_ASSERT(lo <= hi && hi <= t->total);
    const double bc1 = 1.0 - pow(h->beta1, (double)step), bc2 = 1.0 - pow(h->beta2, (double)step);
    const float b1 = (float)h->beta1, b2 = (float)h->beta2;
    const float step_size = (float)(h->lr / bc1), inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    const float eps = (float)h->eps;
    for (int i = 0; i < t->n; i++) {
        const gdn_param *p = &t->p[i];
        /* the part of this tensor inside [lo, hi) */
        const size_t a = p->offset > lo ? p->offset : lo;
        const size_t b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (a >= b) continue;
        /* A tied LM head has no tensor of its own; every tensor appears once in the table. */
        const float decay = p->no_decay ? 1.0f : (float)(1.0 - h->lr * h->weight_decay);
        float *w = params + (a - lo), *mm = m + (a - lo), *vv = v + (a - lo);
        const float *g = grads + (a - lo);
        const long n = (long)(b - a);
#pragma omp parallel for schedule(static) if (n > 16384)
        for (long j = 0; j < n; j++) {
            float gj = g[j];
            mm[j] = b1 * mm[j] + (1.0f - b1) * gj;
            vv[j] = b2 * vv[j] + (1.0f - b2) * gj * gj;
            float denom = sqrtf(vv[j]) * inv_sqrt_bc2 + eps;
            w[j] = w[j] * decay - step_size * mm[j] / denom;
        }
    }
}

#define NORM_BLOCK 8192

double gdn_grad_norm(const float *grads, size_t n) { return sqrt(gdn_grad_sumsq(grads, n)); }

double gdn_grad_sumsq(const float *grads, size_t n) {
    size_t nb = (n + NORM_BLOCK - 1) / NORM_BLOCK;
    double *partial = GDN_CALLOC(nb ? nb : 1, sizeof *partial);
#pragma omp parallel for schedule(static)
    for (long b = 0; b < (long)nb; b++) {
        size_t lo = (size_t)b * NORM_BLOCK, hi = lo + NORM_BLOCK < n ? lo + NORM_BLOCK : n;
        double s = 0.0;
        for (size_t j = lo; j < hi; j++) s += (double)grads[j] * grads[j];
        partial[b] = s;
    }
    double total = 0.0;
    for (size_t b = 0; b < nb; b++) total += partial[b];
    free(partial);
    return total;
}

void gdn_grad_scale(float *grads, size_t n, float scale) {
#pragma omp parallel for schedule(static) if (n > 16384)
    for (long j = 0; j < (long)n; j++) grads[j] *= scale;
}

double gdn_lr_at(int64_t step, int64_t total_steps, int64_t warmup, double lr, double lr_min) {
    if (step < warmup) return lr * (double)(step + 1) / (double)warmup;
    int64_t decay_steps = total_steps - warmup;
    if (decay_steps <= 1) return lr;
    double progress = (double)(step - warmup) / (double)(decay_steps - 1);
    if (progress > 1.0) progress = 1.0;
    return lr_min + 0.5 * (lr - lr_min) * (1.0 + cos(3.141592653589793 * progress));
}
