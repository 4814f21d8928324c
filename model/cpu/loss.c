/* Fused softmax + cross-entropy over the vocabulary, with ignored rows (target < 0). */
#include "model/real.h"
#include "model/cpu/ops_cpu.h"
#include "model/check.h"

#include <stdlib.h>

#define LOSS_PAR_MIN 32768L

/* Per row: loss = log sum_i e^(l_i) - l_t, computed with the row max m subtracted so no exp
 * overflows; the sum of exponentials and the loss are accumulated in double. Row losses go to
 * a buffer and are summed in row order, so the total does not depend on the thread count. */
double R(gdn_cross_entropy)(real *dlogits /* [N,V] or NULL; may alias logits */,
                            const real *logits /* [N,V] */, const int *targets /* [N] */, int N,
                            int V, real grad_scale, int *n_valid) {
    int valid = 0;
    for (int n = 0; n < N; n++) {
        if (targets[n] >= V)
            GDN_DIE("cross-entropy: target %d of row %d is outside the vocabulary [0, %d); "
                    "check that the data was tokenised with the model's vocab_size",
                    targets[n], n, V);
        valid += targets[n] >= 0;
    }
    double *row_loss = GDN_MALLOC((size_t)(N > 0 ? N : 1) * sizeof(double));
#pragma omp parallel for schedule(static) if ((long)N * V > LOSS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const real *l = logits + (size_t)n * V;
        real *d = dlogits ? dlogits + (size_t)n * V : NULL;
        int tgt = targets[n];
        row_loss[n] = 0;
        if (tgt < 0) {
            if (d)
                for (int i = 0; i < V; i++) d[i] = 0;
            continue;
        }
        real lt = l[tgt]; /* read before d (which may be l) is written */
        real m = l[0];
        for (int i = 1; i < V; i++) m = l[i] > m ? l[i] : m;
        double sum = 0;
        for (int i = 0; i < V; i++) {
            real e = REXP(l[i] - m);
            sum += e;
            if (d) d[i] = e;
        }
        row_loss[n] = (double)m + log(sum) - (double)lt;
        if (d) {
            real scale = (real)(grad_scale / sum);
            for (int i = 0; i < V; i++) d[i] *= scale;
            d[tgt] -= grad_scale;
        }
    }
    double total = 0;
    for (int n = 0; n < N; n++) total += row_loss[n];
    free(row_loss);
    if (n_valid) *n_valid = valid;
    return total;
}
