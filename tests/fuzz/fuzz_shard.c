/* libFuzzer harness: token sources as the trainer opens them (io/tokens.c, io/text.c,
 * io/dataset.c).
 *
 * The input is written to a file and opened twice: as a token shard (NAME.bin: header checks,
 * size check, mapping, vocabulary check) and as a text corpus (NAME.txt: plain or gzip, the byte
 * tokenizer). When a source opens, a dataset is built over it and training and validation
 * windows are read; every window must be the file's tokens at the position the dataset reports
 * and every token must be inside the vocabulary. Header words 3-5 (ignored by the reader) pick
 * seq_len, vocab_size and the hold-out, so inputs steer those too. Word 6 picks an end-of-document
 * token, mask markers and whole or filled windows: the documents dataset over the same source (io/docs.h) must open or
 * give a message, and its windows must hold the file's tokens, targets that are the next token
 * or -1, a start at every delimiter, and per-window counts that sum over an epoch to the
 * layout's. Any crash, leak, sanitizer report or wrong window is a failure. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/dataset.h"
#include "io/tokens.h"
#include "model/check.h"
#include "tests/fuzz/fuzz_common.h"

static char g_dir[64];

static void cleanup(void) {
    char p[128];
    snprintf(p, sizeof p, "%s/s.bin", g_dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/s.txt", g_dir);
    unlink(p);
    rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    gdn_set_die_handler(fuzz_die_abort); /* an internal check is a crash, not a clean exit */
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/gdn_fuzz_shard_XXXXXX", tmp && strlen(tmp) < 32 ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("fuzz_shard: mkdtemp");
        exit(1);
    }
    atexit(cleanup);
    return 0;
}

/* A new file each time: truncating one that has data makes ext4 flush it on close (its guard
 * for truncate-and-rewrite), which slows the harness a hundredfold. */
static void write_input(const char *path, const uint8_t *data, size_t size) {
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0);
    for (size_t done = 0; done < size;) {
        ssize_t n = write(fd, data + done, size - done);
        CHECK(n > 0);
        done += (size_t)n;
    }
    CHECK(close(fd) == 0);
}

static uint32_t word(const uint8_t *data, size_t size, int i) {
    uint32_t w = 0;
    if (size >= 4 * (size_t)i + 4) memcpy(&w, data + 4 * i, 4);
    return w;
}

/* Token i of the source as stored in the file: expected[i] (NULL: not checked, e.g. gzip). */
static uint32_t expected_at(const uint8_t *file, int width, size_t i) {
    uint32_t v = 0;
    memcpy(&v, file + i * (size_t)width, (size_t)width);
    return v;
}

/* Opens ds over src with o: 1, or 0 where it is refused, which must come with a message. */
static int opened(io_dataset *ds, const io_tokens *src, const io_dataset_opts *o) {
    char err[1024];
    err[0] = 0;
    if (io_dataset_open(ds, src, NULL, o, err, sizeof err)) {
        CHECK(err[0] != 0);
        return 0;
    }
    return 1;
}

/* Builds a dataset over an opened source and checks the windows it hands out. */
static void check_windows(const io_tokens *src, const uint8_t *tokens, int width, int T,
                          int vocab, size_t val_tokens, double val_fraction) {
    io_dataset_opts o = {.seq_len = T, .seed = 7, .val_tokens = val_tokens,
                         .val_fraction = val_fraction};
    io_dataset ds;
    if (!opened(&ds, src, &o)) return;
    const size_t W = (size_t)T + 1;
    int *win = malloc(2 * W * sizeof *win);
    CHECK(win);
    for (uint64_t s = 0; s < 4; s++)
        for (int rank = 0; rank < 2; rank++) {
            io_dataset_train_batch(&ds, s, 2, rank, 2, win);
            for (int b = 0; b < 2; b++) {
                size_t pos = io_dataset_train_start(&ds, (s + (uint64_t)b) * 2 + (uint64_t)rank);
                CHECK(pos + W <= ds.train.n_tokens);
                for (size_t j = 0; j < W; j++) {
                    CHECK(win[(size_t)b * W + j] >= 0 && win[(size_t)b * W + j] < vocab);
                    if (tokens)
                        CHECK((uint32_t)win[(size_t)b * W + j] == expected_at(tokens, width, pos + j));
                }
            }
        }
    uint64_t nb = io_dataset_n_val_batches(&ds, 1, 1);
    for (uint64_t w = 0; w < nb && w < 8; w++) {
        io_dataset_val_batch(&ds, w, 1, 0, 1, win);
        size_t pos = io_dataset_val_start(&ds, w); /* position in the source */
        for (size_t j = 0; j < W; j++) {
            CHECK(win[j] >= 0 && win[j] < vocab);
            if (tokens) CHECK((uint32_t)win[j] == expected_at(tokens, width, pos + j));
        }
    }
    free(win);
    io_dataset_close(&ds);
}

/* The documents view of the same source (see the header comment). */
static void check_documents(const io_tokens *src, const uint8_t *tokens, int width, int T,
                            int vocab, size_t val_tokens, uint32_t pick) {
    io_dataset_opts o = {.seq_len = T, .seed = 3, .val_tokens = val_tokens, .documents = 1};
    /* ids inside the vocabulary, as gdn train checks them */
    const int64_t eod = pick & 1 ? -1 : (int64_t)((pick >> 1) % 8) % vocab;
    const int masks = (pick >> 4) & 1 && vocab > 9;
    o.docs = (io_doc_opts){eod, masks ? 8 : -1, masks ? 9 : -1, (int)((pick >> 5) & 1)};
    io_dataset ds;
    if (!opened(&ds, src, &o)) return;
    int *tok = malloc(((size_t)T + 1) * sizeof *tok), *tg = malloc((size_t)T * sizeof *tg);
    unsigned char *st = malloc((size_t)T);
    CHECK(tok && tg && st);
    const uint64_t n = ds.n_train_starts;
    uint64_t total = 0;
    for (uint64_t g = 0; g < n && g < 64; g++) {
        io_dataset_train_docs(&ds, g, 1, 0, 1, tok, tg, st);
        const size_t pos = io_dataset_train_start(&ds, g);
        const size_t have = ds.train.n_tokens - pos; /* one file: the region is one span */
        uint64_t counted = 0;
        CHECK(st[0] == 1);
        for (int i = 0; i <= T; i++) {
            CHECK(tok[i] >= 0 && tok[i] < vocab);
            if (tokens && (size_t)i < have) CHECK((uint32_t)tok[i] == expected_at(tokens, width, pos + (size_t)i));
        }
        for (int i = 0; i < T; i++) {
            if (tg[i] < 0) continue;
            counted++;
            CHECK((size_t)i + 1 < have && tg[i] == tok[i + 1]);
            if (eod >= 0 && tok[i] == eod) CHECK(st[i] == 1);
            if (eod >= 0 && i > 0 && tok[i] != eod) CHECK(st[i] == 0);
        }
        CHECK(counted >= 1 && counted == io_dataset_train_targets(&ds, g));
        total += counted;
    }
    if (n <= 64) CHECK(total == ds.train.docs.counted);
    for (uint64_t w = 0; w < ds.n_val_windows && w < 8; w++) {
        io_dataset_val_docs(&ds, w, tok, tg, st);
        for (int i = 0; i < T; i++) CHECK(tg[i] < 0 || tg[i] == tok[i + 1]);
    }
    free(tok), free(tg), free(st);
    io_dataset_close(&ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const int T = 1 + (int)(word(data, size, 3) % 64);
    const uint32_t v = word(data, size, 4);
    const int vocab = v == 0 ? 65536 : 1 + (int)(v % 70000);
    const uint32_t hold = word(data, size, 5);
    const size_t val_tokens = hold & 0x8000 ? hold & 0x7FFF : 0;
    const double val_fraction = (double)(hold % 8) / 10.0;
    char path[128], err[1024];
    io_tokens t;

    /* as a token shard */
    snprintf(path, sizeof path, "%s/s.bin", g_dir);
    write_input(path, data, size);
    err[0] = 0;
    if (io_tokens_open(&t, path, vocab, err, sizeof err) == 0) {
        CHECK(t.n_spans == 1 && !t.is_text && size >= IO_SHARD_HEADER_BYTES);
        const int width = t.spans[0].width;
        CHECK(size == IO_SHARD_HEADER_BYTES + t.n_tokens * (size_t)width);
        check_windows(&t, data + IO_SHARD_HEADER_BYTES, width, T, vocab, val_tokens,
                      val_fraction);
        check_documents(&t, data + IO_SHARD_HEADER_BYTES, width, T, vocab, val_tokens,
                        word(data, size, 6));
        io_tokens_close(&t);
    } else {
        CHECK(strstr(err, path) != NULL); /* every message names the file */
    }

    /* as a text corpus */
    snprintf(path, sizeof path, "%s/s.txt", g_dir);
    write_input(path, data, size);
    err[0] = 0;
    if (io_tokens_open(&t, path, 256, err, sizeof err) == 0) {
        CHECK(t.n_spans == 1 && t.is_text);
        const int gz = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
        if (!gz) CHECK(t.n_tokens == size);
        check_windows(&t, gz ? NULL : data, 1, T, 256, val_tokens, val_fraction);
        check_documents(&t, gz ? NULL : data, 1, T, 256, val_tokens, word(data, size, 6));
        io_tokens_close(&t);
    } else {
        CHECK(strstr(err, path) != NULL);
    }
    return 0;
}
