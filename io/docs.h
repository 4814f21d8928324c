/* Documents in a token stream and their packing into windows (docs/design.md, "Documents").
 *
 * Format. A document begins at the first token of every file (span) and at every occurrence of
 * the end-of-document token `eod`: the delimiter is the FIRST token of the document it opens (the
 * llm.c FineWeb convention, <|endoftext|> before each document). So the last token of a document
 * is trained to predict the delimiter (where documents end), and the delimiter is the clean
 * first input of the next one. eod -1: every file is one document.
 * Masked stretches (prompts): from a `mask_begin` token through the next `mask_end` token, both
 * inclusive, targets are not counted (the tokens stay inputs). A stretch closes inside its
 * document; an unclosed, nested or unopened stretch is an error naming the file and position
 * (except where a region cuts a file: a stretch cut by the cut continues to it).
 *
 * Packing. The windows of a region are laid out greedily, file by file: a window starts at p
 * (first at a file's start), and its counted inputs run to the last document start d <= p + T,
 * so it holds whole documents while they fit; its remaining positions hold the beginning of the
 * next document as inputs with ignored targets (that document starts the next window whole).
 * When no document starts in (p, p + T] (the document is longer than the room), the window takes
 * T positions and the next window continues the document at p + T from a clean state (the state
 * is not carried between windows). A file's last window ends at its last token; positions past
 * the file are filled (eod, or 0) with ignored targets. With `fill`, every window but a file's
 * last takes T positions: the document that does not fit is split at the window's end and its
 * rest starts the next window from a clean state (no room is left unused; documents are cut).
 * Every token after a file's first is thus
 * the counted target of exactly one window (unless masked). Windows without a counted target are
 * left out. */
#ifndef GDN_IO_DOCS_H
#define GDN_IO_DOCS_H

#include <stddef.h>
#include <stdint.h>

#include "io/tokens.h"

typedef struct {
    int64_t eod;                  /* delimiter id (first token of each document); -1: files only */
    int64_t mask_begin, mask_end; /* masked stretches' marker ids; -1 (both): none */
    int fill;                     /* 1: fill every window (see Packing) */
} io_doc_opts;

typedef struct {
    uint64_t n;           /* windows */
    int *span;            /* [n] the span of each window */
    uint64_t *off;        /* [n] its first token's position in the span */
    uint32_t *len;        /* [n] positions 0..len-1 have targets inside the window's stretch */
    uint32_t *count;      /* [n] counted targets (len minus masked) */
    uint64_t counted;     /* sum of count */
    uint64_t n_docs;      /* document starts seen */
    /* masked target positions [lo, hi] within their span, in order; span s owns
     * [mfirst[s], mfirst[s + 1]) */
    uint64_t *mlo, *mhi;
    size_t *mfirst;
    size_t n_mask;
} io_doc_layout;

/* Checks opts (distinct ids, both mask ids or neither); 0 or -1 with the message in err. */
int io_doc_opts_check(const io_doc_opts *o, int vocab_size, char *err, int err_len);

/* Scans spans [n_spans] (file_off[s]: the span's first token's position in its file, > 0 when a
 * region cut the file's head; tail_cut[s]: the region cut the file's tail) and lays out windows
 * of T + 1 tokens. Returns 0, or -1 with a message naming the file and token position (a
 * malformed mask). */
int io_doc_layout_build(io_doc_layout *L, const io_token_span *spans, int n_spans,
                        const size_t *file_off, const unsigned char *tail_cut, int T,
                        const io_doc_opts *o, char *err, int err_len);
void io_doc_layout_free(io_doc_layout *L);

/* Window k: tokens [T+1] (inputs 0..T-1), targets [T] (-1: not counted), starts [T] (1 where a
 * document begins at that input position; always at 0). */
void io_doc_window(const io_doc_layout *L, const io_token_span *spans, uint64_t k, int T,
                   const io_doc_opts *o, int *tokens, int *targets, unsigned char *starts);

/* The window of global sample g over n windows: epoch g / n visits every window once, in an order
 * drawn from (seed, epoch) by a keyed permutation. */
uint64_t io_doc_permute(uint64_t seed, uint64_t g, uint64_t n);

#endif
