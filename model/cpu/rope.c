/* Rotary position embedding, full rotary with half-split pairs (i, i + D/2) (docs/design.md
 * section 2.7). The backward is the inverse rotation. Angles are computed in double in both
 * builds: p * w_i reaches 1e5 radians at long contexts, where a float angle would be off by
 * several milliradians. */
#include <math.h>
#include <stdlib.h>

#include "model/check.h"
#include "model/cpu/ops_cpu.h"
#include "model/real.h"

/* Below this many elements a thread team costs more than it saves. */
#define ROPE_PAR_MIN 32768L

/* y = rotation of x by the angles of positions pos0.., sign +1 (forward) or -1 (inverse). */
static void rope_apply(real *y, const real *x, int B, int T, int H, int D, int pos0, double theta,
                       int sign, const char *who) {
    if (B < 0 || T < 0 || H < 0 || D < 2 || D % 2 || pos0 < 0 || !(theta > 0) || !isfinite(theta))
        GDN_DIE("%s: bad arguments B=%d T=%d H=%d D=%d pos0=%d theta=%g (need an even D >= 2, "
                "pos0 >= 0 and a finite theta > 0)", who, B, T, H, D, pos0, theta);
    const int half = D / 2;
    if (B == 0 || T == 0 || H == 0) return;
    /* cos and sin per (t, i), shared by the batch and the heads */
    real *cs = GDN_MALLOC(sizeof(real) * 2 * (size_t)T * half), *sn = cs + (size_t)T * half;
    for (int i = 0; i < half; i++) {
        double w = pow(theta, -2.0 * i / D);
        for (int t = 0; t < T; t++) {
            double a = (double)(pos0 + (long)t) * w;
            cs[(size_t)t * half + i] = (real)cos(a);
            sn[(size_t)t * half + i] = (real)(sign * sin(a));
        }
    }
    const long rows = (long)B * T * H;
#pragma omp parallel for schedule(static) if (rows * D > ROPE_PAR_MIN)
    for (long r = 0; r < rows; r++) {
        const int t = (int)((r / H) % T);
        const real *c = cs + (size_t)t * half, *s = sn + (size_t)t * half, *xr = x + (size_t)r * D;
        real *yr = y + (size_t)r * D;
        for (int i = 0; i < half; i++) {
            real x1 = xr[i], x2 = xr[i + half]; /* read both first: y may alias x */
            yr[i] = x1 * c[i] - x2 * s[i];
            yr[i + half] = x2 * c[i] + x1 * s[i];
        }
    }
    free(cs);
}

void R(gdn_rope_fwd)(real *y, const real *x, int B, int T, int H, int D, int pos0, double theta) {
    rope_apply(y, x, B, T, H, D, pos0, theta, 1, "gdn_rope_fwd");
}

void R(gdn_rope_bwd)(real *dx, const real *dy, int B, int T, int H, int D, int pos0,
                     double theta) {
    rope_apply(dx, dy, B, T, H, D, pos0, theta, -1, "gdn_rope_bwd");
}
