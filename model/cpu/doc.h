/* Documents packed into the rows of a batch, in the form every CPU kernel reads (docs/design.md
 * section 3.8): doc [B,T] int, doc[b,t] = the position where token t's document begins, relative
 * to position 0 of the call (doc[b,t] <= t). A value below 0 says the document began before the
 * call's first row: in the rows that reach it from outside (the entering state, a convolution
 * halo, the keys of earlier positions), of which those before doc[b,t] are not read;
 * GDN_DOC_BEFORE says nothing of the outside is cut. doc[b,t] == t (t = 0 included) starts a
 * document: the state there is zero, whatever enters the call.
 *
 * A NULL doc means every row is one stretch of text: the kernels run exactly as without
 * documents. */
#ifndef GDN_CPU_DOC_H
#define GDN_CPU_DOC_H

#include <stddef.h>

/* "The document began before everything this call sees" (far below any halo or key offset, and
 * safe to add to a position without overflow). */
#define GDN_DOC_BEFORE (-(1 << 29))

/* doc [B,T] from starts [B,T] (1 where a document begins; NULL: none) and, per row, the
 * position of the start of the document that is open before row 0, relative to row 0 (< 0), or
 * GDN_DOC_BEFORE (prev NULL: GDN_DOC_BEFORE for every row). */
static inline void gdn_doc_build(int *doc, const unsigned char *starts, const int *prev, int B, int T) {
    for (int b = 0; b < B; b++) {
        int cur = prev ? prev[b] : GDN_DOC_BEFORE;
        for (int t = 0; t < T; t++) {
            const size_t i = (size_t)b * T + t;
            if (starts && starts[i]) cur = t;
            doc[i] = cur;
        }
    }
}

/* RoPE position of token t of row b when the call's row 0 is at position pos0 of the stream:
 * counted from its document's start (from the stream's start for GDN_DOC_BEFORE). */
static inline int gdn_doc_pos(const int *doc, int b, int t, int T, int pos0) {
    if (!doc) return pos0 + t;
    const int d = doc[(size_t)b * T + t];
    return d <= -pos0 ? pos0 + t : t - d;
}

#endif
