/* Checkpoint save/load timings and file size for a model configuration (not a test).
 *   bench_ckpt [--preset tiny|100m] [--vocab N] [--d-model N] [--layers N] [--heads N]
 *              [--head-dim N] [--d-ff N] [--tie 0|1] [--dir DIR] [--repeat R]
 * Builds the model's parameter table, fills parameters and AdamW moments, then times
 * ckpt_save_atomic (write + fsync + rename), ckpt_load (read + every crc32) and ckpt_verify,
 * each the best of R runs. The page cache is warm for loads: the numbers show the library's
 * cost, not the disk's cold-read speed. Prints a table and one JSON line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "model/params.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static gdn_config preset(const char *name) {
    gdn_config c = {.vocab_size = 256,
                    .d_model = 64,
                    .n_layers = 2,
                    .n_heads = 2,
                    .head_dim = 32,
                    .expand_v = 2,
                    .d_ff = 128,
                    .conv_width = 4,
                    .chunk_size = 64,
                    .tie_embeddings = 1,
                    .allow_neg_eigval = 0,
                    .norm_eps = 1e-6};
    if (strcmp(name, "100m") == 0) {
        c.vocab_size = 32000;
        c.d_model = 768;
        c.n_layers = 8;
        c.n_heads = 6;
        c.head_dim = 128;
        c.d_ff = 2048;
    } else if (strcmp(name, "tiny") != 0) {
        fprintf(stderr, "bench_ckpt: unknown preset \"%s\" (tiny, 100m)\n", name);
        exit(2);
    }
    return c;
}

static void fill(float *x, size_t n, uint32_t seed) {
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(int32_t)s * 0x1p-40f;
    }
}

int main(int argc, char **argv) {
    gdn_config c = preset("tiny");
    const char *dir = "/tmp";
    int repeat = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (strcmp(k, "--preset") == 0)
            c = preset(v);
        else if (strcmp(k, "--vocab") == 0)
            c.vocab_size = atoi(v);
        else if (strcmp(k, "--d-model") == 0)
            c.d_model = atoi(v);
        else if (strcmp(k, "--layers") == 0)
            c.n_layers = atoi(v);
        else if (strcmp(k, "--heads") == 0)
            c.n_heads = atoi(v);
        else if (strcmp(k, "--head-dim") == 0)
            c.head_dim = atoi(v);
        else if (strcmp(k, "--d-ff") == 0)
            c.d_ff = atoi(v);
        else if (strcmp(k, "--tie") == 0)
            c.tie_embeddings = atoi(v);
        else if (strcmp(k, "--dir") == 0)
            dir = v;
        else if (strcmp(k, "--repeat") == 0)
            repeat = atoi(v);
        else {
            fprintf(stderr, "bench_ckpt: unknown option %s\n", k);
            return 2;
        }
    }
    gdn_param_table t;
    gdn_param_table_build(&t, &c);
    size_t n = t.total;
    float *p = malloc(n * sizeof *p), *m = malloc(n * sizeof *m), *v = malloc(n * sizeof *v);
    if (!p || !m || !v) {
        fprintf(stderr, "bench_ckpt: out of memory for %zu parameters\n", n);
        return 1;
    }
    fill(p, n, 1);
    fill(m, n, 2);
    fill(v, n, 3);
    uint64_t rng[4] = {1, 2, 3, 4};
    ckpt_kv kv[2] = {{"data_position", 123}, {"schedule_step", 45}};
    ckpt_contents cc = {.step = 45,
                        .tokens_seen = 45 * 4096,
                        .config_json = "{}",
                        .model = &c,
                        .table = &t,
                        .params = p,
                        .m = m,
                        .v = v,
                        .rng = rng,
                        .n_rng = 4,
                        .state = kv,
                        .n_state = 2};
    char path[4096], err[2048];
    snprintf(path, sizeof path, "%s/bench_ckpt_%ld.h5", dir, (long)getpid());
    double best_save = 1e30, best_load = 1e30, best_verify = 1e30;
    for (int r = 0; r < repeat; r++) {
        double t0 = now_s();
        if (ckpt_save_atomic(path, &cc, err, sizeof err) != CKPT_OK) {
            fprintf(stderr, "bench_ckpt: %s\n", err);
            return 1;
        }
        double t1 = now_s();
        if (ckpt_load(path, &c, &t, p, m, v, NULL, err, sizeof err) != CKPT_OK) {
            fprintf(stderr, "bench_ckpt: %s\n", err);
            return 1;
        }
        double t2 = now_s();
        if (ckpt_verify(path, NULL, NULL, err, sizeof err) != CKPT_OK) {
            fprintf(stderr, "bench_ckpt: %s\n", err);
            return 1;
        }
        double t3 = now_s();
        if (t1 - t0 < best_save) best_save = t1 - t0;
        if (t2 - t1 < best_load) best_load = t2 - t1;
        if (t3 - t2 < best_verify) best_verify = t3 - t2;
    }
    struct stat sb;
    stat(path, &sb);
    unlink(path);
    double payload = 3.0 * (double)n * sizeof(float);
    printf("params %zu in %d tensors; file %.3f MB (payload %.3f MB, overhead %.2f%%)\n", n, t.n,
           (double)sb.st_size / 1e6, payload / 1e6,
           100.0 * ((double)sb.st_size - payload) / payload);
    printf("save %.4f s (%.0f MB/s)  load+crc %.4f s (%.0f MB/s)  verify %.4f s   best of %d\n",
           best_save, (double)sb.st_size / 1e6 / best_save, best_load,
           (double)sb.st_size / 1e6 / best_load, best_verify, repeat);
    printf("{\"params\": %zu, \"tensors\": %d, \"file_bytes\": %lld, \"save_s\": %.6f, "
           "\"load_s\": %.6f, \"verify_s\": %.6f}\n",
           n, t.n, (long long)sb.st_size, best_save, best_load, best_verify);
    gdn_param_table_free(&t);
    free(p);
    free(m);
    free(v);
    return 0;
}
