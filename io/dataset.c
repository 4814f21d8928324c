/* Training and validation windows: hold-out split, counter-based sampling, rank sharding. */
#include "io/dataset.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/check.h"

/* splitmix64's output function: a bijective 64-bit mixer. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Output g of a splitmix64 stream whose state starts at mix64(seed): random access by index. */
static uint64_t sample_hash(uint64_t seed, uint64_t g) {
    return mix64(mix64(seed) + (g + 1) * 0x9E3779B97F4A7C15ull);
}

/* Describes a source for messages: "data/kjv.txt.gz" or "a.bin (+3 more files)". */
static void source_name(const io_tokens *t, char *buf, size_t n) {
    if (t->n_spans == 0) snprintf(buf, n, "(empty source)");
    else if (t->n_spans == 1) snprintf(buf, n, "%s", t->spans[0].name);
    else snprintf(buf, n, "%s (+%d more files)", t->spans[0].name, t->n_spans - 1);
}

/* The tokens [lo, hi) of src as a region; cum is filled by count(span length). */
static void make_region(io_region *r, const io_tokens *src, size_t lo, size_t hi, int T,
                        uint64_t (*count)(size_t n, int T)) {
    memset(r, 0, sizeof *r);
    r->spans = GDN_CALLOC((size_t)src->n_spans, sizeof *r->spans);
    r->span_start = GDN_CALLOC((size_t)src->n_spans, sizeof *r->span_start);
    r->cum = GDN_CALLOC((size_t)src->n_spans + 1, sizeof *r->cum);
    r->file_off = GDN_CALLOC((size_t)src->n_spans, sizeof *r->file_off);
    r->tail_cut = GDN_CALLOC((size_t)src->n_spans, 1);
    size_t pos = 0;
    for (int s = 0; s < src->n_spans; s++) {
        const io_token_span *sp = &src->spans[s];
        size_t a = lo > pos ? lo : pos, b = hi < pos + sp->n ? hi : pos + sp->n;
        if (a < b) {
            int k = r->n_spans++;
            r->spans[k] = (io_token_span){sp->name, sp->data + (a - pos) * (size_t)sp->width,
                                          sp->width, b - a};
            r->span_start[k] = a;
            r->file_off[k] = a - pos;
            r->tail_cut[k] = b < pos + sp->n;
            r->cum[k + 1] = r->cum[k] + count(b - a, T);
            r->n_tokens += b - a;
        }
        pos += sp->n;
    }
}

static uint64_t count_starts(size_t n, int T) { return n > (size_t)T ? n - (size_t)T : 0; }

static uint64_t count_val_windows(size_t n, int T) {
    return n > (size_t)T ? 1 + (n - (size_t)T - 1) / (size_t)T : 0;
}

static void free_region(io_region *r) {
    free(r->spans);
    free(r->span_start);
    free(r->cum);
    free(r->file_off);
    free(r->tail_cut);
    io_doc_layout_free(&r->docs);
    memset(r, 0, sizeof *r);
}

/* The span holding index u of the region's cumulative count, and u's offset inside it. */
static int locate(const io_region *r, uint64_t u, uint64_t *within) {
    int lo = 0, hi = r->n_spans - 1; /* find the last s with cum[s] <= u */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (r->cum[mid] <= u) lo = mid;
        else hi = mid - 1;
    }
    *within = u - r->cum[lo];
    return lo;
}

static size_t longest_span(const io_region *r) {
    size_t m = 0;
    for (int s = 0; s < r->n_spans; s++)
        if (r->spans[s].n > m) m = r->spans[s].n;
    return m;
}

/* The document layouts of both regions (the training region is made); 0 or -1 with err. */
static int open_docs(io_dataset *ds, const io_tokens *train, const io_tokens *val, size_t hold,
                     const char *name, char *err, int err_len) {
    const io_dataset_opts *o = &ds->opts;
    const int T = o->seq_len;
    io_region *tr = &ds->train, *va = &ds->val;
    if (io_doc_opts_check(&o->docs, 0, err, err_len) ||
        io_doc_layout_build(&tr->docs, tr->spans, tr->n_spans, tr->file_off, tr->tail_cut, T,
                            &o->docs, err, err_len))
        goto fail;
    ds->n_train_starts = tr->docs.n;
    if (ds->n_train_starts == 0) {
        snprintf(err, (size_t)err_len,
                 "%s: the training data%s have no target to train on (every file has at most one "
                 "token, or every target is inside a masked stretch)",
                 name, hold ? " (after the validation hold-out)" : "");
        goto fail;
    }
    if (val) make_region(va, val, 0, val->n_tokens, T, count_val_windows);
    else if (hold) make_region(va, train, train->n_tokens - hold, train->n_tokens, T, count_val_windows);
    else va->cum = GDN_CALLOC(1, sizeof *va->cum);
    if ((val || hold) &&
        io_doc_layout_build(&va->docs, va->spans, va->n_spans, va->file_off, va->tail_cut, T,
                            &o->docs, err, err_len))
        goto fail;
    ds->n_val_windows = va->docs.n;
    if ((val || hold) && ds->n_val_windows == 0) {
        char vname[512];
        source_name(val ? val : train, vname, sizeof vname);
        snprintf(err, (size_t)err_len,
                 "%s: the validation data (%zu tokens) have no target to evaluate (every file "
                 "has at most one token, or every target is masked): use more validation data",
                 vname, va->n_tokens);
        goto fail;
    }
    return 0;
fail:
    io_dataset_close(ds);
    return -1;
}

int io_dataset_open(io_dataset *ds, const io_tokens *train, const io_tokens *val,
                    const io_dataset_opts *opts, char *err, int err_len) {
    memset(ds, 0, sizeof *ds);
    ds->opts = *opts;
    const int T = opts->seq_len;
    const size_t W = (size_t)T + 1;
    if (T < 1) {
        snprintf(err, (size_t)err_len, "seq_len must be at least 1, got %d", T);
        return -1;
    }
    if (!(opts->val_fraction >= 0.0 && opts->val_fraction < 1.0)) {
        snprintf(err, (size_t)err_len, "val_fraction must be in [0, 1), got %g",
                 opts->val_fraction);
        return -1;
    }
    char name[512];
    source_name(train, name, sizeof name);
    const size_t N = train->n_tokens;

    size_t hold = 0; /* tokens held out from the end of train */
    if (!val) {
        hold = opts->val_tokens ? opts->val_tokens
                                : (size_t)llround(opts->val_fraction * (double)N);
        if (hold >= N) {
            snprintf(err, (size_t)err_len,
                     "%s: holding out %zu tokens for validation leaves no training data (the "
                     "source has %zu tokens)",
                     name, hold, N);
            return -1;
        }
    }
    make_region(&ds->train, train, 0, N - hold, T, count_starts);
    if (opts->documents) return open_docs(ds, train, val, hold, name, err, err_len);
    ds->n_train_starts = ds->train.cum[ds->train.n_spans];
    if (ds->n_train_starts == 0) {
        if (ds->train.n_spans > 1)
            snprintf(err, (size_t)err_len,
                     "%s: no file of the training data holds a whole window of seq_len + 1 = %zu "
                     "tokens (the longest part has %zu): use longer files or a smaller seq_len",
                     name, W, longest_span(&ds->train));
        else
            snprintf(err, (size_t)err_len,
                     "%s: the training data has %zu tokens%s, fewer than one window of "
                     "seq_len + 1 = %zu tokens: use a longer corpus or a smaller seq_len",
                     name, ds->train.n_tokens, hold ? " after the validation hold-out" : "", W);
        io_dataset_close(ds);
        return -1;
    }

    if (val) {
        make_region(&ds->val, val, 0, val->n_tokens, T, count_val_windows);
    } else if (hold) {
        make_region(&ds->val, train, N - hold, N, T, count_val_windows);
    } else {
        ds->val.cum = GDN_CALLOC(1, sizeof *ds->val.cum); /* no validation */
    }
    ds->n_val_windows = ds->val.cum[ds->val.n_spans];
    if ((val || hold) && ds->n_val_windows == 0) {
        char vname[512];
        source_name(val ? val : train, vname, sizeof vname);
        if (val)
            snprintf(err, (size_t)err_len,
                     "%s: the validation data has no part of at least seq_len + 1 = %zu tokens "
                     "(the longest has %zu): use more validation data or a smaller seq_len",
                     vname, W, longest_span(&ds->val));
        else
            snprintf(err, (size_t)err_len,
                     "%s: the validation hold-out has %zu tokens, fewer than one window of "
                     "seq_len + 1 = %zu tokens: hold out at least %zu tokens (val_tokens) or a "
                     "larger val_fraction",
                     vname, hold, W, W);
        io_dataset_close(ds);
        return -1;
    }
    return 0;
}

int io_dataset_open_files(io_dataset *ds, const char *train_spec, const char *val_spec,
                          int vocab_size, const io_dataset_opts *opts, char *err, int err_len) {
    io_tokens src[2];
    int n = val_spec ? 2 : 1;
    if (io_tokens_open(&src[0], train_spec, vocab_size, err, err_len)) return -1;
    if (val_spec && io_tokens_open(&src[1], val_spec, vocab_size, err, err_len)) {
        io_tokens_close(&src[0]);
        return -1;
    }
    /* the regions copy the spans (pointers into the mapped files), not the io_tokens structs,
     * so the structs can move into the dataset afterwards */
    if (io_dataset_open(ds, &src[0], val_spec ? &src[1] : NULL, opts, err, err_len)) {
        for (int i = 0; i < n; i++) io_tokens_close(&src[i]);
        return -1;
    }
    memcpy(ds->owned, src, (size_t)n * sizeof *src);
    ds->n_owned = n;
    return 0;
}

void io_dataset_close(io_dataset *ds) {
    free_region(&ds->train);
    free_region(&ds->val);
    for (int i = 0; i < ds->n_owned; i++) io_tokens_close(&ds->owned[i]);
    ds->n_owned = 0;
}

/* Span and offset of global training sample g. Uniform over window starts; the modulo bias is
 * below n_train_starts / 2^64, far under anything measurable. */
static int train_locate(const io_dataset *ds, uint64_t g, uint64_t *off) {
    if (ds->opts.documents) {
        uint64_t k = io_doc_permute(ds->opts.seed, g, ds->n_train_starts);
        *off = ds->train.docs.off[k];
        return ds->train.docs.span[k];
    }
    uint64_t u = sample_hash(ds->opts.seed, g) % ds->n_train_starts;
    return locate(&ds->train, u, off);
}

size_t io_dataset_train_start(const io_dataset *ds, uint64_t g) {
    uint64_t off;
    int s = train_locate(ds, g, &off);
    return ds->train.span_start[s] + (size_t)off;
}

/* Window k of a region's document layout; targets and starts may be NULL (tokens only). */
static void window_docs(const io_dataset *ds, const io_region *r, uint64_t k, int *tokens,
                        int *targets, unsigned char *starts) {
    const int T = ds->opts.seq_len;
    int *tg = targets ? targets : GDN_MALLOC((size_t)T * sizeof *tg);
    unsigned char *st = starts ? starts : GDN_MALLOC((size_t)T);
    io_doc_window(&r->docs, r->spans, k, T, &ds->opts.docs, tokens, tg, st);
    if (!targets) free(tg);
    if (!starts) free(st);
}

/* Without documents: targets are the next tokens, one document per row. */
static void plain_view(int T, const int *tokens, int *targets, unsigned char *starts) {
    memcpy(targets, tokens + 1, (size_t)T * sizeof *targets);
    memset(starts, 0, (size_t)T);
    starts[0] = 1;
}

void io_dataset_train_docs(const io_dataset *ds, uint64_t sample, int B, int rank, int world,
                           int *tokens, int *targets, unsigned char *starts) {
    GDN_ASSERT(B >= 1 && world >= 1 && rank >= 0 && rank < world);
    const int T = ds->opts.seq_len;
    const size_t W = (size_t)T + 1;
    for (int b = 0; b < B; b++) {
        uint64_t g = (sample + (uint64_t)b) * (uint64_t)world + (uint64_t)rank;
        int *tok = tokens + (size_t)b * W, *tg = targets + (size_t)b * T;
        unsigned char *st = starts + (size_t)b * T;
        if (ds->opts.documents) {
            window_docs(ds, &ds->train, io_doc_permute(ds->opts.seed, g, ds->n_train_starts), tok,
                        tg, st);
        } else {
            io_dataset_train_batch(ds, sample + (uint64_t)b, 1, rank, world, tok);
            plain_view(T, tok, tg, st);
        }
    }
}

void io_dataset_val_docs(const io_dataset *ds, uint64_t w, int *tokens, int *targets,
                         unsigned char *starts) {
    GDN_ASSERT(w < ds->n_val_windows);
    if (ds->opts.documents) {
        window_docs(ds, &ds->val, w, tokens, targets, starts);
    } else {
        io_dataset_val_window(ds, w, tokens);
        plain_view(ds->opts.seq_len, tokens, targets, starts);
    }
}

uint64_t io_dataset_train_targets(const io_dataset *ds, uint64_t g) {
    if (!ds->opts.documents) return (uint64_t)ds->opts.seq_len;
    return ds->train.docs.count[io_doc_permute(ds->opts.seed, g, ds->n_train_starts)];
}

void io_dataset_train_batch(const io_dataset *ds, uint64_t sample, int B, int rank, int world,
                            int *tokens) {
    GDN_ASSERT(B >= 1 && world >= 1 && rank >= 0 && rank < world);
    const size_t W = (size_t)ds->opts.seq_len + 1;
    for (int b = 0; b < B; b++) {
        uint64_t off;
        uint64_t g = (sample + (uint64_t)b) * (uint64_t)world + (uint64_t)rank;
        if (ds->opts.documents) {
            window_docs(ds, &ds->train, io_doc_permute(ds->opts.seed, g, ds->n_train_starts),
                        tokens + (size_t)b * W, NULL, NULL);
            continue;
        }
        int s = train_locate(ds, g, &off);
        io_span_copy(&ds->train.spans[s], (size_t)off, W, tokens + (size_t)b * W);
    }
}

uint64_t io_dataset_n_val_batches(const io_dataset *ds, int B, int world) {
    GDN_ASSERT(B >= 1 && world >= 1);
    return ds->n_val_windows / ((uint64_t)B * (uint64_t)world);
}

static int val_locate(const io_dataset *ds, uint64_t w, uint64_t *off) {
    GDN_ASSERT(w < ds->n_val_windows);
    if (ds->opts.documents) {
        *off = ds->val.docs.off[w];
        return ds->val.docs.span[w];
    }
    uint64_t k;
    int s = locate(&ds->val, w, &k);
    *off = k * (uint64_t)ds->opts.seq_len;
    return s;
}

size_t io_dataset_val_start(const io_dataset *ds, uint64_t w) {
    uint64_t off;
    int s = val_locate(ds, w, &off);
    return ds->val.span_start[s] + (size_t)off;
}

void io_dataset_val_window(const io_dataset *ds, uint64_t w, int *tokens) {
    if (ds->opts.documents) {
        GDN_ASSERT(w < ds->n_val_windows);
        window_docs(ds, &ds->val, w, tokens, NULL, NULL);
        return;
    }
    uint64_t off;
    int s = val_locate(ds, w, &off);
    io_span_copy(&ds->val.spans[s], (size_t)off, (size_t)ds->opts.seq_len + 1, tokens);
}

void io_dataset_val_batch(const io_dataset *ds, uint64_t batch, int B, int rank, int world,
                          int *tokens) {
    GDN_ASSERT(B >= 1 && world >= 1 && rank >= 0 && rank < world);
    const size_t W = (size_t)ds->opts.seq_len + 1;
    for (int b = 0; b < B; b++)
        io_dataset_val_window(ds, (batch * (uint64_t)world + (uint64_t)rank) * (uint64_t)B + b,
                              tokens + (size_t)b * W);
}
