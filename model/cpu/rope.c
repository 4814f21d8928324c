/* Rotary position embedding, full rotary with half-split pairs (i, i + D/2) (docs/design.md
 * section 2.7). The backward is the inverse rotation. Angles are computed in double in both
 * builds: p * w_i reaches 1e5 radians at long contexts, where a float angle would be off by
 * several milliradians. With documents positions restart at each document's start (one
 * document packed with others is rotated as it would be alone). */
#include <math.h>
#include <stdlib.h>

#include "model/check.h"
#include "model/cpu/ops_cpu.h"
#include "model/real.h"

/* Below this many elements a thread team costs more than it saves. */
#define ROPE_PAR_MIN 32768L

/* y = rotation of x by the angles of positions gdn_doc_pos(doc, b, t, T, pos0) (pos0 + t without
 * documents), sign +1 (forward) or -1 (inverse). */
static void rope_apply(real *y, const real *x, int B, int T, int H, int D, int pos0, const int *doc,
                       double theta, int sign, const char *who) {
    if (B < 0 || T < 0 || H < 0 || D < 2 || D % 2 || pos0 < 0 || !(theta > 0) || !isfinite(theta))
        GDN_DIE("%s: bad arguments B=%d T=%d H=%d D=%d pos0=%d theta=%g (need an even D >= 2, "
                "pos0 >= 0 and a finite theta > 0)", who, B, T, H, D, pos0, theta);
    const int half = D / 2;
    if (B == 0 || T == 0 || H == 0) return;
    /* cos and sin per (position, i) over the positions in use, shared by the heads */
    int p_lo = pos0, p_hi = pos0 + T - 1;
    if (doc) {
        p_lo = p_hi = gdn_doc_pos(doc, 0, 0, T, pos0);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const int p = gdn_doc_pos(doc, b, t, T, pos0);
                if (p < p_lo) p_lo = p;
                if (p > p_hi) p_hi = p;
            }
    }
    const size_t np = (size_t)(p_hi - p_lo) + 1;
    real *cs = GDN_MALLOC(sizeof(real) * 2 * np * half), *sn = cs + np * half;
    for (int i = 0; i < half; i++) {
        double w = pow(theta, -2.0 * i / D);
        for (size_t p = 0; p < np; p++) {
            double a = (double)(p_lo + (long)p) * w;
            cs[p * half + i] = (real)cos(a);
            sn[p * half + i] = (real)(sign * sin(a));
        }
    }
    const long rows = (long)B * T * H;
#pragma omp parallel for schedule(static) if (rows * D > ROPE_PAR_MIN)
    for (long r = 0; r < rows; r++) {
        const int t = (int)((r / H) % T), b = (int)(r / H / T);
        const size_t p = (size_t)(gdn_doc_pos(doc, b, t, T, pos0) - p_lo);
        const real *c = cs + p * half, *s = sn + p * half, *xr = x + (size_t)r * D;
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
    rope_apply(y, x, B, T, H, D, pos0, NULL, theta, 1, "gdn_rope_fwd");
}

void R(gdn_rope_bwd)(real *dx, const real *dy, int B, int T, int H, int D, int pos0,
                     double theta) {
    rope_apply(dx, dy, B, T, H, D, pos0, NULL, theta, -1, "gdn_rope_bwd");
}

void R(gdn_rope_fwd_doc)(real *y, const real *x, int B, int T, int H, int D, int pos0, const int *doc,
                         double theta) {
    rope_apply(y, x, B, T, H, D, pos0, doc, theta, 1, "gdn_rope_fwd");
}

void R(gdn_rope_bwd_doc)(real *dx, const real *dy, int B, int T, int H, int D, int pos0, const int *doc,
                         double theta) {
    rope_apply(dx, dy, B, T, H, D, pos0, doc, theta, -1, "gdn_rope_bwd");
}
