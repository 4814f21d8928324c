/* Training and validation windows over token sources.
 *
 * A window is T+1 consecutive tokens of one span (inputs 0..T-1, targets 1..T).
 *
 * Training: global sample g starts at a position drawn uniformly (with replacement) from every
 * start that fits a whole window inside the training region, by a counter-based hash of
 * (seed, g). A sample's window is a pure function of (seed, g), so the loader's whole state is a
 * sample counter: resuming needs only that number, and no state is shared between ranks.
 * Data parallelism: rank r of `world` takes global samples g = s * world + r for its own sample
 * counter s = 0, 1, 2, ..., so ranks never draw the same sample, and at step k (every rank having
 * consumed s = k*B samples) the ranks together cover g in [k*B*world, (k+1)*B*world).
 *
 * Validation: either a separate source, or the last tokens of the training source held out
 * (training windows then end before the held-out part begins). Validation windows are fixed:
 * starts 0, T, 2T, ... of each validation span, so consecutive windows share one boundary token
 * and every held-out token after the first of a span is a target exactly once.
 *
 * Documents (opts.documents, io/docs.h): each region's documents are packed into a fixed list of
 * windows (whole documents where they fit, long ones split), with document starts and ignored
 * targets per position. Training: global sample g takes window perm_e(g mod n) of epoch
 * e = g / n (a keyed permutation of (seed, e)), so every window is drawn once per epoch and the
 * state is still the sample counter; ranks take g = s * world + r as above, never sharing a
 * sample. Validation: the validation region's windows in order. Without documents nothing
 * here changes. */
#ifndef GDN_IO_DATASET_H
#define GDN_IO_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "io/docs.h"
#include "io/tokens.h"

typedef struct {
    int seq_len;         /* T: windows hold T+1 tokens */
    uint64_t seed;       /* training sample order */
    size_t val_tokens;   /* without a validation source: hold out this many final tokens... */
    double val_fraction; /* ...or, when val_tokens is 0, this fraction of them (0: no validation) */
    int documents;       /* 1: pack documents (below); 0: windows at any position, as always */
    io_doc_opts docs;    /* with documents: the delimiter and mask ids (-1: none) */
} io_dataset_opts;

/* One region (training or validation) as spans, with prefix sums for locating positions. */
typedef struct {
    io_token_span *spans; /* [n_spans], views into an io_tokens */
    int n_spans;
    size_t n_tokens;
    size_t *span_start;   /* [n_spans] position of each span's first token in the source */
    uint64_t *cum;        /* [n_spans + 1] windows (or window starts) before each span */
    size_t *file_off;     /* [n_spans] position of each span's first token in its file */
    unsigned char *tail_cut; /* [n_spans] 1: the region ends inside the span's file */
    io_doc_layout docs;   /* with documents: the packed windows */
} io_region;

typedef struct {
    io_dataset_opts opts;
    io_region train;      /* cum: training window starts */
    io_region val;        /* cum: validation windows; n_tokens 0 when there is no validation */
    uint64_t n_train_starts; /* with documents: packed training windows */
    uint64_t n_val_windows;
    io_tokens owned[2];   /* sources opened by io_dataset_open_files */
    int n_owned;
} io_dataset;

/* Builds windows over train (and val, or NULL to hold out the end of train per opts). The
 * sources must outlive the dataset. Returns 0, or -1 with the message in err: a training region
 * or validation part shorter than one window (naming the sizes), a hold-out that leaves no
 * training data, bad options. */
int io_dataset_open(io_dataset *ds, const io_tokens *train, const io_tokens *val,
                    const io_dataset_opts *opts, char *err, int err_len);

/* Opens the sources (io_tokens_open spec grammar; val_spec may be NULL) and builds the dataset,
 * which owns them. */
int io_dataset_open_files(io_dataset *ds, const char *train_spec, const char *val_spec,
                          int vocab_size, const io_dataset_opts *opts, char *err, int err_len);

void io_dataset_close(io_dataset *ds);

/* Training batch for rank `rank` of `world`: row b holds the window of global sample
 * (sample + b) * world + rank, where sample is this rank's sample counter. */
void io_dataset_train_batch(const io_dataset *ds, uint64_t sample, int B, int rank, int world,
                            int *tokens /* [B, T+1] */);

/* Position (in the training source) of the first token of global sample g's window. */
size_t io_dataset_train_start(const io_dataset *ds, uint64_t g);

/* Validation: windows w = (batch * world + rank) * B + b; batches 0 .. n_val_batches-1 exist on
 * every rank (the remainder of n_val_windows / (B * world) windows is not used). */
uint64_t io_dataset_n_val_batches(const io_dataset *ds, int B, int world);
void io_dataset_val_batch(const io_dataset *ds, uint64_t batch, int B, int rank, int world,
                          int *tokens /* [B, T+1] */);
void io_dataset_val_window(const io_dataset *ds, uint64_t w, int *tokens /* [T+1] */);

/* Position (in the validation source) of the first token of validation window w. */
size_t io_dataset_val_start(const io_dataset *ds, uint64_t w);

/* Windows with their document view, with or without documents: tokens [.., T+1], targets
 * [.., T] (-1: not counted: padding after the last whole document, masked stretches),
 * starts [.., T] (1 where a document begins; without documents only position 0). Training rows
 * are those of io_dataset_train_batch; validation window w as io_dataset_val_window. */
void io_dataset_train_docs(const io_dataset *ds, uint64_t sample, int B, int rank, int world,
                           int *tokens, int *targets, unsigned char *starts);
void io_dataset_val_docs(const io_dataset *ds, uint64_t w, int *tokens, int *targets,
                         unsigned char *starts);
/* Counted targets of global training sample g's window (seq_len without documents). */
uint64_t io_dataset_train_targets(const io_dataset *ds, uint64_t g);

#endif
