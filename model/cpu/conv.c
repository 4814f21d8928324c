/* Depthwise causal short convolution (width W, no bias) with an optional halo: the last W-1
 * input rows of the previous segment, so a sequence can be processed in pieces. With documents
 * (model/cpu/doc.h) a tap that would read a row before the output row's document start reads
 * zero instead, in the halo as well. */
#include "model/real.h"
#include "model/cpu/ops_cpu.h"
#include "model/check.h"

#include <stdlib.h>

/* Channels per task in the backward. A thread owns whole channels, so dw[c, :] is summed over
 * (b, t) in one fixed order whatever the thread count. */
#define CONV_CH_BLOCK 32
#define CONV_PAR_MIN 32768L

/* Input row t of sequence b; t < 0 reads the halo (oldest first); NULL stands for zeros. */
static inline const real *conv_row(const real *x /* [B,T,C] */, const real *halo /* [B,W-1,C] */,
                                   int b, int t, int T, int C, int W) {
    if (t >= 0) return x + ((size_t)b * T + t) * C;
    if (!halo) return NULL;
    return halo + ((size_t)b * (W - 1) + (W - 1) + t) * C;
}

/* Output row t of sequence b may read input row p (doc: model/cpu/doc.h; NULL: every row). */
static inline int conv_sees(const int *doc, int b, int t, int p, int T) {
    return !doc || p >= doc[(size_t)b * T + t];
}

/* wt[j, c] = w[c, j], so the inner loops over channels are contiguous. */
static real *conv_transpose_weight(const real *w /* [C,W] */, int C, int W) {
    real *wt = GDN_MALLOC((size_t)C * W * sizeof(real));
    for (int c = 0; c < C; c++)
        for (int j = 0; j < W; j++) wt[(size_t)j * C + c] = w[(size_t)c * W + j];
    return wt;
}

void R(gdn_conv_fwd)(real *y /* [B,T,C] */, const real *x /* [B,T,C] */, const real *w /* [C,W] */,
                     const real *halo /* [B,W-1,C] or NULL */, const int *doc /* [B,T] or NULL */,
                     int B, int T, int C, int W) {
    GDN_ASSERT(W >= 1);
    real *wt = conv_transpose_weight(w, C, W);
    long rows = (long)B * T;
#pragma omp parallel for schedule(static) if (rows * C * W > CONV_PAR_MIN)
    for (long bt = 0; bt < rows; bt++) {
        int b = (int)(bt / T), t = (int)(bt % T);
        real *yr = y + (size_t)bt * C;
        for (int c = 0; c < C; c++) yr[c] = 0;
        for (int j = 0; j < W; j++) {
            const real *src = conv_row(x, halo, b, t - (W - 1) + j, T, C, W);
            if (!src || !conv_sees(doc, b, t, t - (W - 1) + j, T)) continue;
            const real *wj = wt + (size_t)j * C;
            for (int c = 0; c < C; c++) yr[c] += wj[c] * src[c];
        }
    }
    free(wt);
}

/* With y[t] = sum_j w[j] x[t-(W-1)+j]:
 *   dx[t] = sum_j w[j] dy[t+(W-1)-j] over t+(W-1)-j < T,
 *   dhalo[r] (input time r-(W-1)) = sum_j w[j] dy[r-j] over 0 <= r-j < T,
 *   dw[j] += sum_t dy[t] x[t-(W-1)+j]. */
void R(gdn_conv_bwd)(real *dx /* [B,T,C] */, real *dw /* [C,W] */,
                     real *dhalo /* [B,W-1,C] or NULL */, const real *dy /* [B,T,C] */,
                     const real *x /* [B,T,C] */, const real *w /* [C,W] */,
                     const real *halo /* [B,W-1,C] or NULL */, const int *doc /* [B,T] or NULL */,
                     int B, int T, int C, int W) {
    GDN_ASSERT(W >= 1);
    real *wt = conv_transpose_weight(w, C, W);
    double *part = GDN_CALLOC((size_t)W * C, sizeof(double)); /* [W,C] */
    int nblk = (C + CONV_CH_BLOCK - 1) / CONV_CH_BLOCK;
#pragma omp parallel for schedule(static) if ((long)B * T * C * W > CONV_PAR_MIN)
    for (int cb = 0; cb < nblk; cb++) {
        int c0 = cb * CONV_CH_BLOCK;
        int c1 = c0 + CONV_CH_BLOCK < C ? c0 + CONV_CH_BLOCK : C;
        for (int b = 0; b < B; b++) {
            const real *dyb = dy + (size_t)b * T * C;
            for (int t = 0; t < T; t++) {
                const real *dyr = dyb + (size_t)t * C;
                real *dxr = dx + ((size_t)b * T + t) * C;
                for (int c = c0; c < c1; c++) dxr[c] = 0;
                for (int j = 0; j < W; j++) {
                    int to = t + (W - 1) - j; /* output time that reads x[t] through tap j */
                    if (to >= T || !conv_sees(doc, b, to, t, T)) continue;
                    const real *wj = wt + (size_t)j * C, *g = dyb + (size_t)to * C;
                    for (int c = c0; c < c1; c++) dxr[c] += wj[c] * g[c];
                }
                for (int j = 0; j < W; j++) {
                    const real *src = conv_row(x, halo, b, t - (W - 1) + j, T, C, W);
                    if (!src || !conv_sees(doc, b, t, t - (W - 1) + j, T)) continue;
                    double *pj = part + (size_t)j * C;
                    for (int c = c0; c < c1; c++) pj[c] += (double)dyr[c] * src[c];
                }
            }
            if (!dhalo) continue;
            for (int r = 0; r < W - 1; r++) {
                real *dhr = dhalo + ((size_t)b * (W - 1) + r) * C;
                for (int c = c0; c < c1; c++) dhr[c] = 0;
                for (int j = 0; j < W; j++) {
                    int to = r - j;
                    if (to < 0 || to >= T || !conv_sees(doc, b, to, r - (W - 1), T)) continue;
                    const real *wj = wt + (size_t)j * C, *g = dyb + (size_t)to * C;
                    for (int c = c0; c < c1; c++) dhr[c] += wj[c] * g[c];
                }
            }
        }
        for (int c = c0; c < c1; c++)
            for (int j = 0; j < W; j++) dw[(size_t)c * W + j] += (real)part[(size_t)j * C + c];
    }
    free(part);
    free(wt);
}
