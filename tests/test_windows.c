/* Training and validation windows drawn from token sources (io/dataset): determinism, ranks,
 * the validation split, file boundaries, too-short data, and gdn data's split. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/dataset.h"
#include "io/tokens.h"
#include "train/commands.h"

#include "tests/io_fixture.h"

/* ---- windows -------------------------------------------------------------------------------- */

/* Tokens equal to their position (+ offset), so a window's content reveals where it starts. */
static uint32_t *iota(size_t n, uint32_t offset) {
    uint32_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = (uint32_t)i + offset;
    return t;
}

static void test_windows_deterministic(void **state) {
    (void)state;
    enum { N = 1000, T = 15, B = 8 };
    uint32_t *data = iota(N, 0);
    io_tokens src;
    io_tokens_wrap(&src, data, 4, N, "iota");
    io_dataset ds;
    char err[512];
    io_dataset_opts o = {.seq_len = T, .seed = 1234};
    if (io_dataset_open(&ds, &src, NULL, &o, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(ds.n_train_starts, N - T);
    assert_int_equal(ds.n_val_windows, 0);

    /* pinned: sample g starts at splitmix64 output g (state mix64(seed)) mod the start count,
     * values from an independent implementation; a change here breaks resuming old runs */
    const size_t want1234[6] = {576, 563, 79, 856, 244, 639};
    for (int g = 0; g < 6; g++)
        assert_int_equal(io_dataset_train_start(&ds, (uint64_t)g), want1234[g]);

    int a[B * (T + 1)], b[B * (T + 1)], one[T + 1];
    io_dataset_train_batch(&ds, 100, B, 0, 1, a);
    io_dataset_train_batch(&ds, 100, B, 0, 1, b);
    assert_memory_equal(a, b, sizeof a);
    for (int r = 0; r < B; r++) {
        size_t start = io_dataset_train_start(&ds, 100 + (uint64_t)r);
        for (int j = 0; j <= T; j++) assert_int_equal(a[r * (T + 1) + j], (int)(start + (size_t)j));
        io_dataset_train_batch(&ds, 100 + (uint64_t)r, 1, 0, 1, one); /* resume at any sample */
        assert_memory_equal(one, a + r * (T + 1), sizeof one);
    }

    io_dataset ds2;
    io_dataset_opts o0 = {.seq_len = T, .seed = 0};
    if (io_dataset_open(&ds2, &src, NULL, &o0, err, sizeof err)) fail_msg("%s", err);
    const size_t want0[6] = {295, 370, 304, 214, 132, 315};
    for (int g = 0; g < 6; g++)
        assert_int_equal(io_dataset_train_start(&ds2, (uint64_t)g), want0[g]);
    io_dataset_train_batch(&ds2, 100, B, 0, 1, b);
    assert_true(memcmp(a, b, sizeof a) != 0);
    io_dataset_close(&ds2);

    /* uniform over every start, ends included: counts over 200k draws within 5 sigma */
    enum { DRAWS = 200000 };
    static int count[N];
    memset(count, 0, sizeof count);
    for (uint64_t g = 0; g < DRAWS; g++) count[io_dataset_train_start(&ds, g)]++;
    double mean = (double)DRAWS / (N - T), sd = sqrt(mean);
    for (int s = 0; s < N; s++) {
        if (s >= N - T) {
            assert_int_equal(count[s], 0); /* would run past the end */
            continue;
        }
        if (fabs(count[s] - mean) > 5 * sd)
            fail_msg("start %d drawn %d times, expected %.0f +- %.0f", s, count[s], mean, sd);
    }
    io_dataset_close(&ds);
    io_tokens_close(&src);
    free(data);
}

static void test_windows_ranks_disjoint(void **state) {
    (void)state;
    enum { N = 100000, T = 31, B = 4, WORLD = 4, STEPS = 50 };
    uint32_t *data = iota(N, 0);
    io_tokens src;
    io_tokens_wrap(&src, data, 4, N, "iota");
    io_dataset ds;
    char err[512];
    io_dataset_opts o = {.seq_len = T, .seed = 7, .val_tokens = 5000};
    if (io_dataset_open(&ds, &src, NULL, &o, err, sizeof err)) fail_msg("%s", err);

    /* rank r's row b at step k is global sample (k*B + b)*WORLD + r: together the ranks take
     * samples [k*B*WORLD, (k+1)*B*WORLD) exactly once */
    static unsigned char seen[STEPS * B * WORLD];
    memset(seen, 0, sizeof seen);
    int batch[B * (T + 1)], ref[T + 1];
    for (int k = 0; k < STEPS; k++)
        for (int r = 0; r < WORLD; r++) {
            io_dataset_train_batch(&ds, (uint64_t)k * B, B, r, WORLD, batch);
            for (int b = 0; b < B; b++) {
                uint64_t g = ((uint64_t)k * B + (uint64_t)b) * WORLD + (uint64_t)r;
                assert_true(g < sizeof seen);
                assert_int_equal(seen[g], 0);
                seen[g] = 1;
                io_dataset_train_batch(&ds, g, 1, 0, 1, ref); /* same as the world-1 sample g */
                assert_memory_equal(batch + b * (T + 1), ref, sizeof ref);
            }
        }
    for (size_t g = 0; g < sizeof seen; g++) assert_int_equal(seen[g], 1);

    /* validation batches: windows split between ranks without overlap */
    uint64_t nb = io_dataset_n_val_batches(&ds, B, WORLD);
    assert_int_equal(ds.n_val_windows, (5000 - 1) / T);
    assert_int_equal(nb, ds.n_val_windows / (B * WORLD));
    static unsigned char vseen[200];
    memset(vseen, 0, sizeof vseen);
    for (uint64_t i = 0; i < nb; i++)
        for (int r = 0; r < WORLD; r++) {
            io_dataset_val_batch(&ds, i, B, r, WORLD, batch);
            for (int b = 0; b < B; b++) {
                size_t first = (size_t)batch[b * (T + 1)];
                size_t w = (first - (N - 5000)) / T;
                assert_int_equal(first, io_dataset_val_start(&ds, w));
                assert_int_equal(vseen[w], 0);
                vseen[w] = 1;
            }
        }
    io_dataset_close(&ds);
    io_tokens_close(&src);
    free(data);
}

static void test_windows_validation_split(void **state) {
    (void)state;
    enum { N = 20000, T = 63 };
    uint32_t *data = iota(N, 0);
    io_tokens src;
    io_tokens_wrap(&src, data, 4, N, "iota");
    char err[512];
    const double fractions[] = {0.01, 0.05};
    for (int f = 0; f < 2; f++) {
        io_dataset ds;
        io_dataset_opts o = {.seq_len = T, .seed = 3, .val_fraction = fractions[f]};
        if (io_dataset_open(&ds, &src, NULL, &o, err, sizeof err)) fail_msg("%s", err);
        size_t hold = (size_t)llround(fractions[f] * N), cut = N - hold;
        assert_int_equal(ds.val.n_tokens, hold);
        assert_int_equal(ds.train.n_tokens, cut);
        size_t max_end = 0;
        for (uint64_t g = 0; g < 100000; g++) {
            size_t end = io_dataset_train_start(&ds, g) + T + 1;
            if (end > max_end) max_end = end;
        }
        assert_int_equal(max_end, cut); /* reaches the hold-out boundary, never past it */
        assert_int_equal(ds.n_val_windows, (hold - 1) / T);
        int win[T + 1];
        for (uint64_t w = 0; w < ds.n_val_windows; w++) {
            size_t s = io_dataset_val_start(&ds, w);
            assert_int_equal(s, cut + w * T);
            assert_true(s + T + 1 <= N);
            io_dataset_val_window(&ds, w, win);
            for (int j = 0; j <= T; j++) assert_int_equal(win[j], (int)(s + (size_t)j));
        }
        io_dataset_close(&ds);
    }

    /* a separate validation source: training uses all of train */
    uint32_t *vdata = iota(1000, 500000);
    io_tokens vsrc;
    io_tokens_wrap(&vsrc, vdata, 4, 1000, "val");
    io_dataset ds;
    io_dataset_opts o = {.seq_len = T, .seed = 3, .val_fraction = 0.5 /* ignored */};
    if (io_dataset_open(&ds, &src, &vsrc, &o, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(ds.train.n_tokens, N);
    assert_int_equal(ds.n_val_windows, (1000 - 1) / T);
    int win[T + 1];
    io_dataset_val_window(&ds, 2, win);
    assert_int_equal(win[0], 500000 + 2 * T);
    io_dataset_close(&ds);
    io_tokens_close(&vsrc);
    free(vdata);
    io_tokens_close(&src);
    free(data);
}

/* Windows never straddle two files: shard 2's tokens jump by 100000. */
static void test_windows_stay_inside_files(void **state) {
    (void)state;
    enum { T = 20 };
    const size_t sizes[3] = {300, 15 /* shorter than a window: never used */, 500};
    char err[512], spec[1024] = "";
    uint32_t offset = 0;
    for (int i = 0; i < 3; i++) {
        uint32_t *d = iota(sizes[i], offset);
        char name[32];
        snprintf(name, sizeof name, "span_%d.bin", i);
        assert_int_equal(io_shard_write(tmp_path(name), IO_SHARD_U32, d, 4, sizes[i], err,
                                        sizeof err), 0);
        free(d);
        offset += 100000;
    }
    snprintf(spec, sizeof spec, "%s/span_*.bin", g_dir);
    io_dataset ds;
    io_dataset_opts o = {.seq_len = T, .seed = 11};
    if (io_dataset_open_files(&ds, spec, NULL, 300000, &o, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(ds.n_train_starts, (300 - T) + (500 - T));
    int hits[3] = {0, 0, 0}, win[T + 1];
    for (uint64_t g = 0; g < 20000; g++) {
        io_dataset_train_batch(&ds, g, 1, 0, 1, win);
        for (int j = 1; j <= T; j++) assert_int_equal(win[j], win[0] + j);
        hits[win[0] / 100000]++;
    }
    assert_int_equal(hits[1], 0);
    /* files are drawn in proportion to their window starts: 280 : 480 */
    double share = (double)hits[0] / 20000, want = 280.0 / 760.0;
    assert_true(fabs(share - want) < 5 * sqrt(want * (1 - want) / 20000));
    io_dataset_close(&ds);
}

static void test_windows_too_short(void **state) {
    (void)state;
    uint32_t *data = iota(1000, 0);
    io_tokens src;
    char err[512];
    io_dataset ds;

    io_tokens_wrap(&src, data, 4, 10, "short.bin");
    io_dataset_opts o = {.seq_len = 16, .seed = 1};
    assert_int_equal(io_dataset_open(&ds, &src, NULL, &o, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "short.bin: the training data has 10 tokens, fewer than one window of "
                         "seq_len + 1 = 17 tokens");
    io_tokens_close(&src);

    /* exactly one window fits: accepted, and every sample is that window */
    io_tokens_wrap(&src, data, 4, 17, "exact.bin");
    if (io_dataset_open(&ds, &src, NULL, &o, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(ds.n_train_starts, 1);
    assert_int_equal(io_dataset_train_start(&ds, 12345), 0);
    io_dataset_close(&ds);
    io_tokens_close(&src);

    io_tokens_wrap(&src, data, 4, 1000, "corpus.bin");
    o.val_tokens = 5;
    assert_int_equal(io_dataset_open(&ds, &src, NULL, &o, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "corpus.bin: the validation hold-out has 5 tokens, fewer than one window "
                         "of seq_len + 1 = 17 tokens");
    o.val_tokens = 990;
    assert_int_equal(io_dataset_open(&ds, &src, NULL, &o, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "the training data has 10 tokens after the validation hold-out");
    o.val_tokens = 1000;
    assert_int_equal(io_dataset_open(&ds, &src, NULL, &o, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "holding out 1000 tokens for validation leaves no training data");
    o.val_tokens = 0;
    o.val_fraction = 1.0;
    assert_int_equal(io_dataset_open(&ds, &src, NULL, &o, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "val_fraction must be in [0, 1), got 1");
    o.val_fraction = 0;
    o.seq_len = 0;
    assert_int_equal(io_dataset_open(&ds, &src, NULL, &o, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "seq_len must be at least 1, got 0");

    io_tokens vsrc;
    io_tokens_wrap(&vsrc, data, 4, 16, "val.bin");
    o.seq_len = 16;
    assert_int_equal(io_dataset_open(&ds, &src, &vsrc, &o, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "val.bin: the validation data has no part of at least seq_len + 1 = 17 "
                         "tokens (the longest has 16)");
    io_tokens_close(&vsrc);
    io_tokens_close(&src);
    free(data);

    /* several files, none long enough */
    char err2[512], spec[512];
    uint16_t few[12] = {1, 2, 3};
    assert_int_equal(io_shard_write(tmp_path("few_a.bin"), 1, few, 2, 12, err2, sizeof err2), 0);
    assert_int_equal(io_shard_write(tmp_path("few_b.bin"), 1, few, 2, 9, err2, sizeof err2), 0);
    snprintf(spec, sizeof spec, "%s/few_*.bin", g_dir);
    assert_int_equal(io_dataset_open_files(&ds, spec, NULL, 256, &o, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "few_a.bin (+1 more files): no file of the training data holds a whole "
                         "window of seq_len + 1 = 17 tokens (the longest part has 12)");
}

/* Shards from gdn data's default split give the same windows as holding out the same 1% of
 * the text directly, so either route trains on the same data. */
static void test_gdn_data_split_matches_holdout(void **state) {
    (void)state;
    enum { T = 32 };
    static unsigned char text[60000];
    size_t n = sample_text(text, sizeof text);
    write_file(tmp_path("same.txt"), text, n);
    char in[256], out[256], err[512], train[300], val[300];
    snprintf(in, sizeof in, "%s", tmp_path("same.txt"));
    snprintf(out, sizeof out, "%s/same", g_dir);
    char *argv[] = {"data", "--in", in, "--out", out, NULL};
    assert_int_equal(gdn_cmd_data(5, argv), 0);
    snprintf(train, sizeof train, "%s_train_*.bin", out);
    snprintf(val, sizeof val, "%s_val_*.bin", out);

    io_dataset a, b;
    io_dataset_opts o = {.seq_len = T, .seed = 99, .val_fraction = 0.01};
    if (io_dataset_open_files(&a, in, NULL, 256, &o, err, sizeof err)) fail_msg("%s", err);
    if (io_dataset_open_files(&b, train, val, 256, &o, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(a.n_train_starts, b.n_train_starts);
    assert_int_equal(a.n_val_windows, b.n_val_windows);
    assert_true(a.n_val_windows > 0);
    int wa[4 * (T + 1)], wb[4 * (T + 1)];
    for (uint64_t s = 0; s < 400; s += 4) {
        io_dataset_train_batch(&a, s, 4, 0, 1, wa);
        io_dataset_train_batch(&b, s, 4, 0, 1, wb);
        assert_memory_equal(wa, wb, sizeof wa);
    }
    for (uint64_t w = 0; w < a.n_val_windows; w++) {
        io_dataset_val_window(&a, w, wa);
        io_dataset_val_window(&b, w, wb);
        assert_memory_equal(wa, wb, (T + 1) * sizeof(int));
    }
    io_dataset_close(&a);
    io_dataset_close(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_windows_deterministic),
        cmocka_unit_test(test_windows_ranks_disjoint),
        cmocka_unit_test(test_windows_validation_split),
        cmocka_unit_test(test_windows_stay_inside_files),
        cmocka_unit_test(test_windows_too_short),
        cmocka_unit_test(test_gdn_data_split_matches_holdout),
    };
    return cmocka_run_group_tests(tests, io_fixture_setup, io_fixture_teardown);
}
