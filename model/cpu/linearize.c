/* Three recurrent approximations of one head of causal softmax attention (docs/distillation.md,
 * "Training-free linearisation"): the gated-delta-rule form, run on the project's chunked delta
 * rule with per-token gates and write strengths, and the first-order baseline. Running means
 * are kept in double in both precisions: keys of a real teacher often have a mean far larger
 * than their spread, and the centred keys must not lose that spread to rounding. */
#include <stdlib.h>
#include <string.h>

#include "model/check.h"
#include "model/cpu/linearize.h"
#include "model/real.h"

static void lin_check(int T, int D, int Dv, const char *who) {
    if (T < 0 || D < 1 || Dv < 1)
        GDN_DIE("%s: bad shape T=%d D=%d Dv=%d (need T >= 0, D, Dv >= 1)", who, T, D, Dv);
}

int R(gdn_lin_gdn)(int T, int D, int Dv, const real *q, const real *k, const real *v, real lambda,
                   int chunk, real *o) {
    lin_check(T, D, Dv, "gdn_lin_gdn");
    if (!(lambda > 0) || !isfinite((double)lambda))
        GDN_DIE("gdn_lin_gdn: balance factor %g (need a finite value > 0)", (double)lambda);
    if (T == 0) return 0;
    const size_t TD = (size_t)T * D, TV = (size_t)T * Dv;
    real *qq = GDN_MALLOC(sizeof(real) * (2 * TD + TV + 2 * (size_t)T));
    real *kk = qq + TD, *vv = kk + TD, *g = vv + TV, *beta = g + T;
    double *kbar = GDN_CALLOC((size_t)D + Dv, sizeof(double)), *vbar = kbar + D;
    for (int t = 0; t < T; t++) {
        const double p = t + 1.0; /* 1-based position */
        const real *kt = k + (size_t)t * D, *qt = q + (size_t)t * D, *vt = v + (size_t)t * Dv;
        for (int i = 0; i < D; i++) {
            kbar[i] += ((double)kt[i] - kbar[i]) / p; /* exactly k_1 at t = 1: ktil_1 = 0 */
            kk[(size_t)t * D + i] = (real)(((double)kt[i] - kbar[i]) / (double)lambda);
            qq[(size_t)t * D + i] = qt[i] * lambda;
        }
        for (int j = 0; j < Dv; j++) { /* (1 - 1/t) (v_t - vbar_{t-1}); 0 at t = 1 */
            vv[(size_t)t * Dv + j] = (real)((1.0 - 1.0 / p) * ((double)vt[j] - vbar[j]));
            vbar[j] += ((double)vt[j] - vbar[j]) / p;
        }
        /* t = 1: the state is zero before and after (ktil_1 = 0), so any gate would do; 0
         * keeps log(1 - 1/t) = -inf and 1/(t - 1) = inf out of the kernel */
        g[t] = t ? (real)log1p(-1.0 / p) : 0;
        beta[t] = t ? (real)(1.0 / (p - 1.0)) : 0;
    }
    gdn_delta_shape s = {1, T, 1, D, Dv, chunk, 0, GDN_MIXER_G, NULL};
    R(gdn_delta_fwd)(&s, qq, kk, vv, g, beta, 1, NULL, o, NULL);
    memset(vbar, 0, sizeof(double) * (size_t)Dv);
    int bad = 0;
    for (int t = 0; t < T; t++) {
        const double p = t + 1.0;
        for (int j = 0; j < Dv; j++) {
            vbar[j] += ((double)v[(size_t)t * Dv + j] - vbar[j]) / p;
            real *oj = o + (size_t)t * Dv + j;
            *oj = (real)((double)*oj + vbar[j]);
            bad |= !isfinite((double)*oj);
        }
    }
    free(kbar);
    free(qq);
    return bad ? -1 : 0;
}

void R(gdn_lin_vala)(int T, int D, int Dv, const real *q, const real *k, const real *v, real *o) {
    lin_check(T, D, Dv, "gdn_lin_vala");
    /* M_t = sum_{i<=t} (v_i - vbar_t)(k_i - kbar_t)^T [Dv,D]; M_t = M_{t-1} +
     * (v_t - vbar_{t-1})(k_t - kbar_t)^T, and o_t = vbar_t + M_t q_t / t */
    double *M = GDN_CALLOC((size_t)Dv * D + D + Dv, sizeof(double)), *kbar = M + (size_t)Dv * D,
           *vbar = kbar + D;
    for (int t = 0; t < T; t++) {
        const double p = t + 1.0;
        const real *kt = k + (size_t)t * D, *qt = q + (size_t)t * D, *vt = v + (size_t)t * Dv;
        for (int i = 0; i < D; i++) kbar[i] += ((double)kt[i] - kbar[i]) / p;
        for (int j = 0; j < Dv; j++) {
            const double dv = (double)vt[j] - vbar[j]; /* v_t - vbar_{t-1} */
            double *Mj = M + (size_t)j * D, acc = 0;
            for (int i = 0; i < D; i++) {
                Mj[i] += dv * ((double)kt[i] - kbar[i]);
                acc += Mj[i] * (double)qt[i];
            }
            vbar[j] += dv / p;
            o[(size_t)t * Dv + j] = (real)(vbar[j] + acc / p);
        }
    }
    free(M);
}

void R(gdn_lin_norms)(int T, int D, const real *q, const real *k, double *sq, double *sk) {
    lin_check(T, D, 1, "gdn_lin_norms");
    double *kbar = GDN_CALLOC((size_t)D, sizeof(double)), aq = 0, ak = 0;
    for (int t = 0; t < T; t++) {
        const double p = t + 1.0;
        for (int i = 0; i < D; i++) {
            const double kv = k[(size_t)t * D + i], qv = q[(size_t)t * D + i];
            kbar[i] += (kv - kbar[i]) / p;
            ak += (kv - kbar[i]) * (kv - kbar[i]);
            aq += qv * qv;
        }
    }
    *sq += aq;
    *sk += ak;
    free(kbar);
}
