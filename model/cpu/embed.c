/* Token embedding lookup and its backward (a deterministic scatter-add). */
#include "model/real.h"
#include "model/cpu/ops_cpu.h"
#include "model/check.h"

#include <string.h>

/* Columns per task in the backward: threads own disjoint column ranges, so every element of
 * dtable is summed over n in ascending order whatever the thread count. */
#define EMBED_COL_BLOCK 64

/* Token ids index the table directly; a negative one would read or write outside it. */
static void embed_check_tokens(const int *tokens, int N) {
    for (int n = 0; n < N; n++)
        if (tokens[n] < 0)
            GDN_DIE("embedding: token id %d at position %d is negative; token ids must be in "
                    "[0, vocab_size)", tokens[n], n);
}

void R(gdn_embed_fwd)(real *out /* [N,D] */, const int *tokens /* [N] */,
                      const real *table /* [vocab,D] */, int N, int D) {
    embed_check_tokens(tokens, N);
#pragma omp parallel for schedule(static) if ((long)N * D > 32768)
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * D, table + (size_t)tokens[n] * D, (size_t)D * sizeof(real));
}

void R(gdn_embed_bwd)(real *dtable /* [vocab,D] */, const int *tokens /* [N] */,
                      const real *dout /* [N,D] */, int N, int D) {
    embed_check_tokens(tokens, N);
    int nblk = (D + EMBED_COL_BLOCK - 1) / EMBED_COL_BLOCK;
#pragma omp parallel for schedule(static) if ((long)N * D > 32768)
    for (int cb = 0; cb < nblk; cb++) {
        int c0 = cb * EMBED_COL_BLOCK;
        int c1 = c0 + EMBED_COL_BLOCK < D ? c0 + EMBED_COL_BLOCK : D;
        for (int n = 0; n < N; n++) {
            real *dst = dtable + (size_t)tokens[n] * D;
            const real *src = dout + (size_t)n * D;
            for (int c = c0; c < c1; c++) dst[c] += src[c];
        }
    }
}
