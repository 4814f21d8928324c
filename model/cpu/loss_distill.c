/* The distillation loss over the vocabulary: temperature-scaled KL to a teacher's distribution
 * plus a weighted next-token cross-entropy, fused with its gradient (docs/distillation.md). */
#include "model/real.h"
#include "model/cpu/ops_cpu.h"
#include "model/check.h"

#include <stdlib.h>

#define DISTILL_PAR_MIN 32768L

/* Row statistics in double: the max and log of the sum of exp((x_i - max) / tau). */
static void row_lse(const real *x, int V, double tau, double *mx, double *lse) {
    double m = (double)x[0];
    for (int i = 1; i < V; i++) m = (double)x[i] > m ? (double)x[i] : m;
    double s = 0;
    for (int i = 0; i < V; i++) s += exp(((double)x[i] - m) / tau);
    *mx = m;
    *lse = log(s);
}

/* Per row: log p_s(i) = (l_i - m_s)/tau - lse_s, log p_t(i) likewise, KL = sum p_t (log p_t -
 * log p_s); the loss's gradient with respect to l_i is tau^2 * (1/tau) (p_s - p_t) from the KL
 * and (softmax(l)_i - [i = target]) from the CE. Each row's statistics are taken before its
 * gradient is written (dlogits may alias logits); rows go to a buffer summed in order, so the
 * totals do not depend on the thread count. */
double R(gdn_distill_loss)(real *dlogits, const real *logits, const real *teacher, const int *targets, int N,
                           int V, double tau, double ce_weight, real grad_scale, double *kl_sum, double *ce_sum,
                           int *n_valid) {
    if (!(tau > 0)) GDN_DIE("distillation loss: the temperature must be > 0 (got %g)", tau);
    int valid = 0;
    for (int n = 0; n < N; n++) {
        if (targets[n] >= V)
            GDN_DIE("distillation loss: target %d of row %d is outside the vocabulary [0, %d)", targets[n], n, V);
        valid += targets[n] >= 0;
    }
    double *row = GDN_MALLOC((size_t)(N > 0 ? N : 1) * 2 * sizeof(double)); /* KL | CE per row */
#pragma omp parallel for schedule(static) if ((long)N * V > DISTILL_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const real *l = logits + (size_t)n * V, *z = teacher + (size_t)n * V;
        real *d = dlogits ? dlogits + (size_t)n * V : NULL;
        const int tgt = targets[n];
        row[n] = row[N + n] = 0;
        if (tgt < 0) {
            if (d)
                for (int i = 0; i < V; i++) d[i] = 0;
            continue;
        }
        double ms, lses, mt, lset, m1, lse1;
        row_lse(l, V, tau, &ms, &lses);
        row_lse(z, V, tau, &mt, &lset);
        row_lse(l, V, 1.0, &m1, &lse1);
        double kl = 0;
        for (int i = 0; i < V; i++) {
            const double lpt = ((double)z[i] - mt) / tau - lset, lps = ((double)l[i] - ms) / tau - lses;
            kl += exp(lpt) * (lpt - lps);
        }
        row[n] = kl;
        row[N + n] = m1 + lse1 - (double)l[tgt];
        if (!d) continue;
        for (int i = 0; i < V; i++) {
            const double li = (double)l[i];
            const double ps = exp((li - ms) / tau - lses), pt = exp(((double)z[i] - mt) / tau - lset);
            const double p1 = exp(li - m1 - lse1);
            d[i] = (real)((double)grad_scale * (tau * (ps - pt) + ce_weight * (p1 - (i == tgt))));
        }
    }
    double kl = 0, ce = 0;
    for (int n = 0; n < N; n++) {
        kl += row[n];
        ce += row[N + n];
    }
    free(row);
    if (kl_sum) *kl_sum = kl;
    if (ce_sum) *ce_sum = ce;
    if (n_valid) *n_valid = valid;
    return tau * tau * kl + ce_weight * ce;
}
