/* Documents (io/docs.h, io/dataset.h): packing into windows, document starts, masked
 * stretches, the per-epoch order, ranks, resuming, malformed data, and gdn data's delimiters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/dataset.h"
#include "io/docs.h"
#include "io/json.h"
#include "io/tokens.h"
#include "train/commands.h"
#include "train/run_config.h"

#include "tests/io_fixture.h"

#define EOD 1
#define MB 2
#define ME 3

static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* A corpus of documents: each opens with EOD then len - 1 ordinary tokens (>= 10); lens[i] = 0
 * writes nothing (used to start a file without a delimiter). */
static size_t build(uint32_t *out, const int *lens, int n, uint32_t first) {
    size_t k = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < lens[i]; j++, k++) out[k] = j == 0 ? EOD : first + (uint32_t)k;
    return k;
}

static io_dataset_opts doc_opts(int T, uint64_t seed) {
    io_dataset_opts o = {.seq_len = T, .seed = seed, .documents = 1};
    o.docs = (io_doc_opts){.eod = EOD, .mask_begin = -1, .mask_end = -1};
    return o;
}

/* ds over src (no validation stream) with o, or the test fails with the reason. */
static void open_docs(io_dataset *ds, const io_tokens *src, const io_dataset_opts *o) {
    char err[512];
    if (io_dataset_open(ds, src, NULL, o, err, sizeof err)) fail_msg("%s", err);
}

/* Checks every training window of ds against the stream: tokens, targets (the next token or
 * -1), starts exactly at document starts, and counts how often each stream position is a
 * counted target over samples [0, n_samples) (hits, per span, indexed by span offsets). */
static void check_windows(const io_dataset *ds, const io_tokens *src, uint64_t n_samples,
                          int world, unsigned *hits) {
    const int T = ds->opts.seq_len;
    int *tok = malloc((size_t)(T + 1) * sizeof *tok), *tg = malloc((size_t)T * sizeof *tg);
    unsigned char *st = malloc((size_t)T);
    size_t *base = calloc((size_t)src->n_spans + 1, sizeof *base);
    for (int s = 0; s < src->n_spans; s++) base[s + 1] = base[s] + src->spans[s].n;
    for (uint64_t sample = 0; sample * (uint64_t)world < n_samples; sample++)
        for (int r = 0; r < world; r++) {
            uint64_t g = sample * (uint64_t)world + (uint64_t)r;
            if (g >= n_samples) break;
            io_dataset_train_docs(ds, sample, 1, r, world, tok, tg, st);
            uint64_t k = io_doc_permute(ds->opts.seed, g, ds->n_train_starts);
            const int s = ds->train.docs.span[k];
            const io_token_span *sp = &ds->train.spans[s];
            const uint64_t off = ds->train.docs.off[k];
            unsigned counted = 0;
            for (int i = 0; i < T; i++) {
                const uint64_t q = off + (uint64_t)i;
                if (q < sp->n) {
                    assert_int_equal(tok[i], (int)io_span_at(sp, q));
                    /* a start exactly where a document begins: no input position continues
                     * another document without one */
                    const int64_t eod = ds->opts.docs.eod;
                    assert_int_equal(st[i], i == 0 || (eod >= 0 && io_span_at(sp, q) == (uint32_t)eod));
                } else {
                    assert_int_equal(tg[i], -1); /* past the file: filler */
                    assert_int_equal(st[i], q == sp->n);
                }
                if (tg[i] >= 0) {
                    assert_true(q + 1 < sp->n);
                    assert_int_equal(tg[i], (int)io_span_at(sp, q + 1));
                    hits[base[s] + q + 1]++;
                    counted++;
                }
            }
            assert_int_equal(counted, io_dataset_train_targets(ds, g));
        }
    free(tok), free(tg), free(st), free(base);
}

/* Every token after a file's first is a counted target exactly E times over E epochs; whole
 * documents that fit are never split; documents longer than a window are, at multiples of T.
 * With fill every window is full (documents are cut at window ends) and the same holds. */
static void test_docs_epoch_coverage(void **state) {
    (void)state;
    enum { T = 16, E = 3 };
    const int lens[] = {5, 1, 1, 16, 17, 40, 3, 9, 2, 33, 16, 1, 7, 64, 4};
    const int n = (int)(sizeof lens / sizeof lens[0]);
    uint32_t *data = malloc(512 * sizeof *data);
    size_t N = build(data, lens, n, 10);
    io_tokens src;
    io_tokens_wrap(&src, data, 4, N, "docs");
    for (int fill = 0; fill <= 1; fill++) {
        io_dataset ds;
        io_dataset_opts o = doc_opts(T, 99);
        o.docs.fill = fill;
        open_docs(&ds, &src, &o);
        assert_int_equal(ds.train.docs.n_docs, (uint64_t)n);
        const uint64_t W = ds.n_train_starts;
        unsigned *hits = calloc(N, sizeof *hits);
        check_windows(&ds, &src, E * W, 1, hits);
        assert_int_equal(hits[0], 0);
        for (size_t q = 1; q < N; q++) assert_int_equal(hits[q], E);
        assert_int_equal(ds.train.docs.counted, N - 1);
        for (uint64_t k = 0; k < W; k++) {
            uint64_t off = ds.train.docs.off[k];
            if (fill) /* every window full but the last: ceil((N - 1) / T) of them */
                assert_int_equal(ds.train.docs.len[k], k + 1 < W ? T : (N - 1) - (W - 1) * T);
            /* whole: documents that fit a window start one: every window starts at a document
             * start unless the previous window was full (a split document) */
            else if (data[off] != EOD)
                assert_int_equal(ds.train.docs.len[k - 1], T);
        }
        if (fill) assert_int_equal(W, (N - 1 + T - 1) / T);
        free(hits);
        io_dataset_close(&ds);
    }
    io_tokens_close(&src);
    free(data);
}

/* One document, longer than several windows: windows at 0, T, 2T, ..., each from a clean state
 * (a start at 0 only), the last one ending at the last token. */
static void test_docs_one_long_document(void **state) {
    (void)state;
    enum { T = 8 };
    const int lens[] = {45};
    uint32_t data[45];
    size_t N = build(data, lens, 1, 10);
    io_tokens src;
    io_tokens_wrap(&src, data, 4, N, "long");
    io_dataset ds;
    io_dataset_opts o = doc_opts(T, 1);
    open_docs(&ds, &src, &o);
    assert_int_equal(ds.n_train_starts, 6); /* 44 targets: 5 full windows and 4 */
    for (uint64_t k = 0; k < 6; k++) {
        assert_int_equal(ds.train.docs.off[k], k * T);
        assert_int_equal(ds.train.docs.len[k], k < 5 ? T : 4);
    }
    unsigned hits[45] = {0};
    check_windows(&ds, &src, 12, 1, hits);
    for (size_t q = 1; q < N; q++) assert_int_equal(hits[q], 2);
    io_dataset_close(&ds);
    io_tokens_close(&src);

    /* shorter than a window: one window, padded with ignored targets */
    io_tokens_wrap(&src, data, 4, 5, "short");
    open_docs(&ds, &src, &o);
    assert_int_equal(ds.n_train_starts, 1);
    int tok[T + 1], tg[T];
    unsigned char st[T];
    io_dataset_train_docs(&ds, 7, 1, 0, 1, tok, tg, st);
    for (int i = 0; i < T; i++) {
        assert_int_equal(tg[i], i < 4 ? (int)data[i + 1] : -1);
        assert_int_equal(st[i], i == 0 || i == 5);
        if (i >= 5) assert_int_equal(tok[i], EOD);
    }
    io_dataset_close(&ds);
    io_tokens_close(&src);
}

/* Empty documents (delimiters back to back), files as documents (no delimiter at a file's
 * start; eod -1), several files: the coverage and start flags still hold. */
static void test_docs_files_and_empty(void **state) {
    (void)state;
    enum { T = 6 };
    uint32_t a[] = {50, 51, EOD, EOD, EOD, 52, 53, EOD, 54, 55, 56, 57, 58, 59, 60, 61, EOD};
    uint32_t b[] = {70, 71, 72};
    const char *path_a = tmp_path("docs_a.bin"), *path_b = tmp_path("docs_b.bin");
    char err[512], spec[300];
    assert_int_equal(io_shard_write(path_a, IO_SHARD_U32, a, 4, 17, err, sizeof err), 0);
    assert_int_equal(io_shard_write(path_b, IO_SHARD_U16, b, 4, 3, err, sizeof err), 0);
    snprintf(spec, sizeof spec, "%s,%s", path_a, path_b);
    io_tokens src;
    if (io_tokens_open(&src, spec, 100, err, sizeof err)) fail_msg("%s", err);
    for (int eod = EOD; eod >= -1; eod -= 2) {
        io_dataset ds;
        io_dataset_opts o = doc_opts(T, 5);
        o.docs.eod = eod;
        open_docs(&ds, &src, &o);
        unsigned hits[20] = {0};
        check_windows(&ds, &src, 2 * ds.n_train_starts, 1, hits);
        for (size_t q = 0; q < 20; q++) assert_int_equal(hits[q], q == 0 || q == 17 ? 0 : 2);
        assert_int_equal(ds.train.docs.n_docs, eod < 0 ? 2 : 7);
        io_dataset_close(&ds);
    }
    io_tokens_close(&src);
}

/* Ranks of a data-parallel job draw disjoint windows that together make each epoch; a batch
 * is a pure function of the sample counter (resume), and a different seed a different order. */
static void test_docs_ranks_and_resume(void **state) {
    (void)state;
    enum { T = 12, WORLD = 3, B = 4 };
    int lens[60];
    uint64_t r = 7;
    for (int i = 0; i < 60; i++) lens[i] = 1 + (int)(rng_next(&r) % 30);
    uint32_t *data = malloc(2000 * sizeof *data);
    size_t N = build(data, lens, 60, 10);
    io_tokens src;
    io_tokens_wrap(&src, data, 4, N, "ranks");
    io_dataset ds;
    io_dataset_opts o = doc_opts(T, 3);
    open_docs(&ds, &src, &o);
    const uint64_t W = ds.n_train_starts;
    unsigned char *seen = calloc(W, 1);
    /* one epoch: samples s of every rank, global g = s * WORLD + rank */
    for (uint64_t g = 0; g < W; g++) {
        uint64_t k = io_doc_permute(o.seed, g, W);
        assert_true(k < W);
        assert_int_equal(seen[k], 0);
        seen[k] = 1;
    }
    /* batches: row b of rank r at sample s is global sample (s + b) * WORLD + r, resumable */
    int tok[B * (T + 1)], tg[B * T], one_tok[T + 1], one_tg[T];
    unsigned char st[B * T], one_st[T];
    for (int rank = 0; rank < WORLD; rank++) {
        io_dataset_train_docs(&ds, 20, B, rank, WORLD, tok, tg, st);
        for (int b = 0; b < B; b++) {
            io_dataset_train_docs(&ds, 20 + (uint64_t)b, 1, rank, WORLD, one_tok, one_tg, one_st);
            assert_memory_equal(one_tok, tok + b * (T + 1), sizeof one_tok);
            assert_memory_equal(one_tg, tg + b * T, sizeof one_tg);
            assert_memory_equal(one_st, st + b * T, sizeof one_st);
        }
    }
    int same = 1;
    for (uint64_t g = 0; g < W && same; g++) same = io_doc_permute(3, g, W) == io_doc_permute(4, g, W);
    assert_false(same);
    /* the next epoch is another order of the same windows */
    same = 1;
    for (uint64_t g = 0; g < W && same; g++) same = io_doc_permute(3, g, W) == io_doc_permute(3, g + W, W);
    assert_false(same);
    free(seen);
    io_dataset_close(&ds);
    io_tokens_close(&src);
    free(data);
}

/* The permutation is a bijection of [0, n) for awkward n. */
static void test_docs_permutation(void **state) {
    (void)state;
    const uint64_t ns[] = {1, 2, 3, 5, 17, 64, 65, 1000, 4097};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        const uint64_t n = ns[i];
        unsigned char *seen = calloc(n, 1);
        for (uint64_t g = 5 * n; g < 6 * n; g++) {
            uint64_t k = io_doc_permute(11, g, n);
            assert_true(k < n);
            assert_int_equal(seen[k], 0);
            seen[k] = 1;
        }
        free(seen);
    }
}

/* Validation windows: the layout in order, fixed; the hold-out's first window starts clean. */
static void test_docs_validation(void **state) {
    (void)state;
    enum { T = 10 };
    int lens[30];
    for (int i = 0; i < 30; i++) lens[i] = 3 + (i * 7) % 13;
    uint32_t data[600];
    size_t N = build(data, lens, 30, 10);
    io_tokens src;
    io_tokens_wrap(&src, data, 4, N, "val");
    io_dataset ds;
    io_dataset_opts o = doc_opts(T, 3);
    o.val_tokens = 50;
    open_docs(&ds, &src, &o);
    assert_true(ds.n_val_windows >= 5);
    int tok[T + 1], tg[T], tok2[T + 1];
    unsigned char st[T];
    uint64_t counted = 0;
    for (uint64_t w = 0; w < ds.n_val_windows; w++) {
        io_dataset_val_docs(&ds, w, tok, tg, st);
        io_dataset_val_window(&ds, w, tok2);
        assert_memory_equal(tok, tok2, sizeof tok);
        size_t pos = io_dataset_val_start(&ds, w);
        assert_true(pos >= N - 50);
        for (int i = 0; i < T && pos + (size_t)i < N; i++) {
            assert_int_equal(tok[i], (int)data[pos + (size_t)i]);
            assert_int_equal(st[i], i == 0 || data[pos + (size_t)i] == EOD);
        }
        for (int i = 0; i < T; i++) counted += tg[i] >= 0;
    }
    assert_int_equal(counted, 49); /* every held-out token after the first */
    /* training windows end before the hold-out */
    for (uint64_t k = 0; k < ds.n_train_starts; k++)
        assert_true(ds.train.docs.off[k] + ds.train.docs.len[k] < N - 50);
    io_dataset_close(&ds);
    io_tokens_close(&src);
}

/* Masked stretches: from mask_begin through mask_end no target counts; the tokens stay inputs. */
static void test_docs_mask(void **state) {
    (void)state;
    enum { T = 8 };
    /* doc 1: EOD MB p p ME r r ; doc 2: EOD MB p p p p p p p p p p ME r (the stretch spans two
     * windows) */
    uint32_t data[] = {EOD, MB, 20, 21, ME, 30, 31, EOD, MB, 22, 23, 24, 25, 26, 27, 28, 29, 40,
                       41, ME, 32};
    const size_t N = sizeof data / sizeof data[0];
    io_tokens src;
    io_tokens_wrap(&src, data, 4, N, "mask");
    io_dataset ds;
    io_dataset_opts o = doc_opts(T, 3);
    o.docs.mask_begin = MB, o.docs.mask_end = ME;
    open_docs(&ds, &src, &o);
    unsigned hits[32] = {0};
    check_windows(&ds, &src, ds.n_train_starts, 1, hits);
    for (size_t q = 1; q < N; q++) {
        int masked = (q >= 1 && q <= 4) || (q >= 8 && q <= 19);
        assert_int_equal(hits[q], masked ? 0 : 1);
    }
    assert_int_equal(ds.train.docs.counted, 4); /* 30, 31, EOD, 32 */
    io_dataset_close(&ds);

    /* a hold-out that cuts a stretch: each part continues it to the cut */
    o.val_tokens = 8; /* the cut falls inside the second stretch, before 26 */
    open_docs(&ds, &src, &o);
    assert_int_equal(ds.train.docs.counted, 3);
    assert_int_equal(ds.n_val_windows, 1);
    int tok[T + 1], tg[T];
    unsigned char st[T];
    io_dataset_val_docs(&ds, 0, tok, tg, st);
    for (int i = 0; i < 7; i++) assert_int_equal(tg[i], i == 6 ? 32 : -1);
    io_dataset_close(&ds);
    io_tokens_close(&src);
}

static void expect_open_error(const uint32_t *data, size_t n, io_doc_opts d, const char *want) {
    io_tokens src;
    io_tokens_wrap(&src, data, 4, n, "bad.bin");
    io_dataset ds;
    char err[512] = "";
    io_dataset_opts o = doc_opts(4, 1);
    o.docs = d;
    assert_int_equal(io_dataset_open(&ds, &src, NULL, &o, err, sizeof err), -1);
    ASSERT_CONTAINS(err, want);
    io_tokens_close(&src);
}

/* Malformed data and settings: clear errors naming the file, position and fix. */
static void test_docs_errors(void **state) {
    (void)state;
    const io_doc_opts m = {.eod = EOD, .mask_begin = MB, .mask_end = ME};
    const uint32_t unclosed[] = {EOD, 9, MB, 9, 9, 9};
    expect_open_error(unclosed, 6, m, "bad.bin: the masked stretch opened at token 2");
    expect_open_error(unclosed, 6, m, "before the end of the file");
    const uint32_t cross[] = {EOD, MB, 9, EOD, 9, ME, 9};
    expect_open_error(cross, 7, m, "before the document that starts at token 3");
    const uint32_t unopened[] = {EOD, 9, 9, ME, 9};
    expect_open_error(unopened, 5, m, "token 3 closes a masked stretch");
    const uint32_t nested[] = {EOD, MB, 9, MB, 9, ME};
    expect_open_error(nested, 6, m, "do not nest");
    const uint32_t fine[] = {EOD, 9, 9, 9, 9, 9};
    expect_open_error(fine, 6, (io_doc_opts){EOD, MB, -1, 0}, "mask_begin and mask_end go together");
    expect_open_error(fine, 6, (io_doc_opts){EOD, EOD, ME, 0}, "each needs its own id");
    expect_open_error(fine, 1, (io_doc_opts){EOD, -1, -1, 0}, "no target to train on");
    const uint32_t all_masked[] = {EOD, MB, 9, 9, ME};
    expect_open_error(all_masked, 5, m, "no target to train on");
    char err[256];
    assert_int_equal(io_doc_opts_check(&(io_doc_opts){50256, -1, -1, 0}, 256, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "eod_token 50256 is outside the vocabulary (ids 0 to 255");
    assert_int_equal(io_doc_opts_check(&(io_doc_opts){-2, -1, -1, 0}, 256, err, sizeof err), -1);
    assert_int_equal(io_doc_opts_check(&(io_doc_opts){50256, -1, -1, 0}, 50257, err, sizeof err), 0);
}

/* Without documents the document view is the plain window: targets the next tokens, a start
 * at 0 only, and the same windows as io_dataset_train_batch. */
static void test_docs_off_is_plain(void **state) {
    (void)state;
    enum { N = 300, T = 9, B = 3 };
    uint32_t data[N];
    for (int i = 0; i < N; i++) data[i] = (uint32_t)(i % 50 == 0 ? EOD : i);
    io_tokens src;
    io_tokens_wrap(&src, data, 4, N, "plain");
    io_dataset ds;
    io_dataset_opts o = {.seq_len = T, .seed = 8, .val_tokens = 40};
    open_docs(&ds, &src, &o);
    int a[B * (T + 1)], b[B * (T + 1)], tg[B * T];
    unsigned char st[B * T];
    io_dataset_train_batch(&ds, 4, B, 1, 2, a);
    io_dataset_train_docs(&ds, 4, B, 1, 2, b, tg, st);
    assert_memory_equal(a, b, sizeof a);
    for (int r = 0; r < B; r++)
        for (int i = 0; i < T; i++) {
            assert_int_equal(tg[r * T + i], b[r * (T + 1) + i + 1]);
            assert_int_equal(st[r * T + i], i == 0);
        }
    assert_int_equal(io_dataset_train_targets(&ds, 5), T);
    io_dataset_close(&ds);
    io_tokens_close(&src);
}

/* ---- gdn data writes the delimiters ------------------------------------------------------ */

static int run_data(int n, const char **args) {
    char *argv[16];
    argv[0] = (char *)"data";
    for (int i = 0; i < n; i++) argv[i + 1] = (char *)args[i];
    fflush(stdout);
    return gdn_cmd_data(n + 1, argv);
}

/* Reads PREFIX_train_000000.bin into out; returns the count. */
static size_t read_shard(const char *prefix, const char *part, uint32_t *out, size_t cap) {
    char path[300], err[512];
    snprintf(path, sizeof path, "%s_%s_000000.bin", prefix, part);
    io_tokens t;
    if (io_tokens_open(&t, path, 70000, err, sizeof err)) fail_msg("%s", err);
    assert_true(t.n_tokens <= cap);
    for (size_t i = 0; i < t.n_tokens; i++) out[i] = io_span_at(&t.spans[0], i);
    size_t n = t.n_tokens;
    io_tokens_close(&t);
    return n;
}

static void test_data_documents(void **state) {
    (void)state;
    const char *f1 = tmp_path("d1.txt"), *f2 = tmp_path("d2.txt");
    write_file(f1, "ab\n", 3);
    write_file(f2, "cd\n---\nef\n---\n", 14);
    char in[300], prefix[300];
    snprintf(in, sizeof in, "%s,%s", f1, f2);
    snprintf(prefix, sizeof prefix, "%s", tmp_path("docs"));
    uint32_t got[64];

    /* each file a document: 256 (the byte vocabulary's delimiter) before each */
    const char *a1[] = {"--in", in, "--out", prefix, "--val-tokens", "0", "--documents"};
    assert_int_equal(run_data(7, a1), 0);
    size_t n = read_shard(prefix, "train", got, 64);
    const char *want1 = "\x01" "ab\n" "\x01" "cd\n---\nef\n---\n";
    assert_int_equal(n, 19);
    for (size_t i = 0; i < n; i++) assert_int_equal(got[i], want1[i] == 1 ? 256u : (uint32_t)(unsigned char)want1[i]);

    /* a separator line: the line goes, a document starts after it (and at each file) */
    const char *a2[] = {"--in", in, "--out", prefix, "--val-tokens", "0", "--doc_sep", "---"};
    assert_int_equal(run_data(8, a2), 0);
    n = read_shard(prefix, "train", got, 64);
    const char *want2 = "\x01" "ab\n" "\x01" "cd\n" "\x01" "ef\n";
    assert_int_equal(n, strlen(want2));
    for (size_t i = 0; i < n; i++) assert_int_equal(got[i], want2[i] == 1 ? 256u : (uint32_t)(unsigned char)want2[i]);
    /* the validation part starts at a document: 5 tokens asked, the last document's 4 held */
    const char *a7[] = {"--in", in, "--out", prefix, "--val-tokens", "5", "--doc_sep", "---"};
    assert_int_equal(run_data(8, a7), 0);
    assert_int_equal(read_shard(prefix, "train", got, 64), 8);
    assert_int_equal(read_shard(prefix, "val", got, 64), 4);
    assert_int_equal(got[0], 256);

    /* a separator line may end in \r\n; a line that only starts with the separator is text */
    const char *f3 = tmp_path("d3.txt");
    write_file(f3, "x\r\n---\r\n---x\n", 13);
    const char *a6[] = {"--in", f3, "--out", prefix, "--val-tokens", "0", "--doc_sep", "---"};
    assert_int_equal(run_data(8, a6), 0);
    n = read_shard(prefix, "train", got, 64);
    const char *want3 = "\x01" "x\r\n" "\x01" "---x\n";
    assert_int_equal(n, strlen(want3));
    for (size_t i = 0; i < n; i++) assert_int_equal(got[i], want3[i] == 1 ? 256u : (uint32_t)(unsigned char)want3[i]);
    assert_int_equal(run_data(8, a2), 0); /* back to the two files for the record below */

    /* the record says how documents are delimited */
    char json_path[320];
    snprintf(json_path, sizeof json_path, "%s_data.json", prefix);
    FILE *f = fopen(json_path, "r");
    assert_non_null(f);
    char buf[4096];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    ASSERT_CONTAINS(buf, "\"eod_token\": 256");
    ASSERT_CONTAINS(buf, "\"vocab_size\": 257");
    ASSERT_CONTAINS(buf, "\"documents\": 3");
    ASSERT_CONTAINS(buf, "\"bytes\": 9"); /* the text's bytes, not the delimiters */

    /* with a tokenizer: its <|endoftext|> (GPT-2's vocab.json + merges.txt, ids = bytes) */
    char tokdir[300], vocab[32768];
    snprintf(tokdir, sizeof tokdir, "%s", tmp_path("tok"));
    assert_int_equal(mkdir(tokdir, 0700), 0);
    size_t vn = (size_t)snprintf(vocab, sizeof vocab, "{");
    for (unsigned b = 0; b < 256; b++) {
        int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        unsigned cp = b, k = 0;
        if (!keep) {
            for (unsigned i = 0; i < b; i++)
                k += !((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255));
            cp = 256 + k;
        }
        if (cp == '"' || cp == '\\') vn += (size_t)snprintf(vocab + vn, sizeof vocab - vn, "\"\\%c\": %u, ", cp, b);
        else vn += (size_t)snprintf(vocab + vn, sizeof vocab - vn, "\"\\u%04x\": %u, ", cp, b);
    }
    snprintf(vocab + vn, sizeof vocab - vn, "\"<|endoftext|>\": 256}");
    char vpath[340], mpath[340];
    snprintf(vpath, sizeof vpath, "%s/vocab.json", tokdir);
    snprintf(mpath, sizeof mpath, "%s/merges.txt", tokdir);
    write_file(vpath, vocab, strlen(vocab));
    write_file(mpath, "#version: 0.2\n", 14);
    const char *a5[] = {"--in", in, "--out", prefix, "--val-tokens", "0", "--doc_sep", "---",
                        "--tokenizer", tokdir, "--threads", "1"};
    assert_int_equal(run_data(12, a5), 0);
    n = read_shard(prefix, "train", got, 64);
    assert_int_equal(n, strlen(want2));
    for (size_t i = 0; i < n; i++) assert_int_equal(got[i], want2[i] == 1 ? 256u : (uint32_t)(unsigned char)want2[i]);

    /* an eod id outside a byte vocabulary's u16 range and a bad combination are refused */
    const char *a3[] = {"--in", in, "--out", prefix, "--eod_token", "70000"};
    assert_int_equal(run_data(6, a3), 2);
    const char *a4[] = {"--in", in, "--out", prefix, "--doc_sep", ""};
    assert_int_equal(run_data(6, a4), 2);
}

/* The run settings: --documents as a bare switch, ids checked against the vocabulary, the ids
 * only with documents; saved configurations without the keys read as no documents. */
static void test_docs_settings(void **state) {
    (void)state;
    static gdn_run_config rc;
    char err[512];
    char *a1[] = {"train", "--out=x", "--documents", "--eod_token", "50256", "--vocab_size", "50304"};
    assert_int_equal(gdn_run_config_parse(&rc, 7, a1, err, sizeof err), 0);
    assert_true(rc.documents == 1 && rc.eod_token == 50256 && rc.mask_begin == -1 && rc.mask_end == -1);
    char *a2[] = {"train", "--out=x", "--documents"};
    assert_int_equal(gdn_run_config_parse(&rc, 3, a2, err, sizeof err), 0);
    assert_true(rc.documents == 1 && rc.eod_token == -1);
    char *a3[] = {"train", "--out=x", "--documents", "--"}; /* not a setting: the switch's value */
    assert_int_equal(gdn_run_config_parse(&rc, 4, a3, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "--documents expects true, false, 1 or 0");
    char *a4[] = {"train", "--out=x", "--eod_token=50256"}; /* vocabulary 256 */
    assert_int_equal(gdn_run_config_parse(&rc, 3, a4, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "take effect with documents");
    char *a5[] = {"train", "--out=x", "--documents", "--eod_token=50256"};
    assert_int_equal(gdn_run_config_parse(&rc, 4, a5, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "eod_token 50256 is outside the vocabulary (ids 0 to 255");
    char *a6[] = {"train", "--out=x", "--documents", "--mask_begin=3"};
    assert_int_equal(gdn_run_config_parse(&rc, 4, a6, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "mask_begin and mask_end go together");
    char *a7[] = {"train", "--out=x", "--documents=false", "--tie_embeddings", "--seed=2"};
    assert_int_equal(gdn_run_config_parse(&rc, 5, a7, err, sizeof err), 0);
    assert_true(rc.documents == 0 && rc.model.tie_embeddings == 1 && rc.seed == 2);
    char *a8[] = {"train", "--out=x", "--doc_fill"};
    assert_int_equal(gdn_run_config_parse(&rc, 3, a8, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "take effect with documents");
    char *a9[] = {"train", "--out=x", "--documents", "--doc_fill"};
    assert_int_equal(gdn_run_config_parse(&rc, 4, a9, err, sizeof err), 0);
    assert_true(rc.documents == 1 && rc.doc_fill == 1);
    assert_int_equal(gdn_run_config_from_json_text(&rc, "{\"seq_len\": 64}", err, sizeof err), 0);
    assert_true(rc.documents == 0 && rc.eod_token == -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_docs_epoch_coverage),
        cmocka_unit_test(test_docs_one_long_document),
        cmocka_unit_test(test_docs_files_and_empty),
        cmocka_unit_test(test_docs_ranks_and_resume),
        cmocka_unit_test(test_docs_permutation),
        cmocka_unit_test(test_docs_validation),
        cmocka_unit_test(test_docs_mask),
        cmocka_unit_test(test_docs_errors),
        cmocka_unit_test(test_docs_off_is_plain),
        cmocka_unit_test(test_data_documents),
        cmocka_unit_test(test_docs_settings),
    };
    return cmocka_run_group_tests(tests, io_fixture_setup, io_fixture_teardown);
}
