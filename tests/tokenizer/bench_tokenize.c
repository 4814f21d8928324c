/* Encoding throughput of the BPE tokenizers on one core.
 *
 *   bench_tokenize TEXT_FILE [--repeats R] NAME=TOKENIZER_PATH...
 *
 * For each tokenizer: encodes the whole text R times (default 5) with a fresh encoder each time
 * (so its piece cache starts empty, as in gdn data) on one thread, and prints the median MB/s
 * (10^6 bytes of text per second) by the thread's CPU time (what one core does, even on a
 * machine shared with other work) and by the wall clock, and the token count. tests/tokenizer/bench_hf.py measures
 * Hugging Face tokenizers the same way on the same text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/tokenizer.h"
#include "io/tokens.h"

static double clock_s(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tokenize TEXT_FILE [--repeats R] NAME=TOKENIZER_PATH...\n");
        return 2;
    }
    char err[1024];
    unsigned char *text;
    size_t n;
    if (io_text_read(argv[1], &text, &n, err, sizeof err)) {
        fprintf(stderr, "bench_tokenize: %s\n", err);
        return 1;
    }
    int repeats = 5, rc = 0;
    printf("text: %s, %.2f MB\n", argv[1], (double)n / 1e6);
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--repeats") && i + 1 < argc) {
            repeats = atoi(argv[++i]);
            if (repeats < 1 || repeats > 1000) repeats = 5;
            continue;
        }
        char *eq = strchr(argv[i], '=');
        const char *name = argv[i], *path = eq ? eq + 1 : argv[i];
        if (eq) *eq = 0;
        double t0 = now_s();
        io_tokenizer *t = io_tokenizer_load(path, err, sizeof err);
        if (!t) {
            fprintf(stderr, "bench_tokenize: %s\n", err);
            rc = 1;
            continue;
        }
        double load = now_s() - t0;
        double *mbs = malloc((size_t)repeats * sizeof *mbs), *wall = malloc((size_t)repeats * sizeof *wall);
        size_t n_ids = 0;
        for (int r = 0; r < repeats; r++) {
            io_tok_enc *e = io_tok_enc_new(t);
            io_ids ids = {0};
            double s = now_s(), c = clock_s(CLOCK_THREAD_CPUTIME_ID);
            if (io_tok_encode(e, text, n, &ids, err, sizeof err)) {
                fprintf(stderr, "bench_tokenize: %s: %s\n", name, err);
                rc = 1;
            }
            double sec = now_s() - s, cpu = clock_s(CLOCK_THREAD_CPUTIME_ID) - c;
            mbs[r] = (double)n / 1e6 / (cpu > 0 ? cpu : 1e-9);
            wall[r] = (double)n / 1e6 / (sec > 0 ? sec : 1e-9);
            n_ids = ids.n;
            io_ids_free(&ids);
            io_tok_enc_free(e);
        }
        qsort(mbs, (size_t)repeats, sizeof *mbs, cmp_d);
        qsort(wall, (size_t)repeats, sizeof *wall, cmp_d);
        printf("%-8s %7.1f MB/s per core by CPU time (median of %d; min %.1f, max %.1f), "
               "%.1f MB/s by wall clock, %zu ids (%.2f bytes/id), load %.2f s\n",
               name, mbs[repeats / 2], repeats, mbs[0], mbs[repeats - 1], wall[repeats / 2], n_ids,
               (double)n / (double)(n_ids ? n_ids : 1), load);
        free(mbs), free(wall);
        io_tokenizer_free(t);
    }
    free(text);
    return rc;
}
