/* Timing of the fp32 chunked gated delta rule on the CPU: forward, and forward + backward.
 * Usage: bench_delta_cpu [B T H K V chunk repeats]   (defaults 1 2048 4 64 64 64 10)
 * Prints the shape, the OpenMP thread count and the median of `repeats` runs after a warm-up. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/check.h"
#include "model/cpu/ops_cpu.h"

static double bench_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Uniform in [lo, hi) from a splitmix64 stream. */
static void bench_fill(float *x, size_t n, float lo, float hi, unsigned long long seed) {
    unsigned long long s = seed;
    for (size_t i = 0; i < n; i++) {
        unsigned long long z = (s += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        x[i] = lo + (hi - lo) * (float)((double)(z >> 11) / 9007199254740992.0);
    }
}

/* Rows of length D scaled to unit norm, like the model's L2-normalised q and k. */
static void bench_l2_rows(float *x, size_t rows, int D) {
    for (size_t r = 0; r < rows; r++) {
        float n2 = 0;
        for (int i = 0; i < D; i++) n2 += x[r * D + i] * x[r * D + i];
        for (int i = 0; i < D; i++) x[r * D + i] /= sqrtf(n2 + 1e-6f);
    }
}

static int bench_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int arg[7] = {1, 2048, 4, 64, 64, 64, 10};
    const char *names[7] = {"B", "T", "H", "K", "V", "chunk", "repeats"};
    if (argc > 8) {
        fprintf(stderr, "usage: %s [B T H K V chunk repeats]\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        char *end;
        long x = strtol(argv[i], &end, 10);
        if (*end || x < 1 || x > (1L << 24)) {
            fprintf(stderr,
                    "bench_delta_cpu: argument %d (%s) must be a positive integer, got '%s'\n", i,
                    names[i - 1], argv[i]);
            return 2;
        }
        arg[i - 1] = (int)x;
    }
    gdn_delta_shape s = {
        .B = arg[0], .T = arg[1], .H = arg[2], .K = arg[3], .V = arg[4], .chunk = arg[5]};
    const int reps = arg[6];
    size_t nqk = (size_t)s.B * s.T * s.H * s.K, nv = (size_t)s.B * s.T * s.H * s.V;
    size_t ng = (size_t)s.B * s.T * s.H, nst = (size_t)s.B * s.H * s.K * s.V;
    float *q = GDN_MALLOC(sizeof(float) * nqk), *k = GDN_MALLOC(sizeof(float) * nqk);
    float *v = GDN_MALLOC(sizeof(float) * nv), *o = GDN_MALLOC(sizeof(float) * nv);
    float *d_o = GDN_MALLOC(sizeof(float) * nv), *dv = GDN_MALLOC(sizeof(float) * nv);
    float *dq = GDN_MALLOC(sizeof(float) * nqk), *dk = GDN_MALLOC(sizeof(float) * nqk);
    float *g = GDN_MALLOC(sizeof(float) * ng), *beta = GDN_MALLOC(sizeof(float) * ng);
    float *dg = GDN_MALLOC(sizeof(float) * ng), *dbeta = GDN_MALLOC(sizeof(float) * ng);
    float *h0 = GDN_MALLOC(sizeof(float) * nst), *ht = GDN_MALLOC(sizeof(float) * nst);
    float *dht = GDN_MALLOC(sizeof(float) * nst), *dh0 = GDN_MALLOC(sizeof(float) * nst);
    bench_fill(q, nqk, -1, 1, 1);
    bench_fill(k, nqk, -1, 1, 2);
    bench_l2_rows(q, ng, s.K);
    bench_l2_rows(k, ng, s.K);
    bench_fill(v, nv, -1, 1, 3);
    bench_fill(g, ng, -1, 0, 4);
    bench_fill(beta, ng, 0, 1, 5);
    bench_fill(h0, nst, -1, 1, 6);
    bench_fill(d_o, nv, -1, 1, 7);
    bench_fill(dht, nst, -1, 1, 8);
    const float scale = 1.0f / sqrtf((float)s.K);

    double *t_fwd = GDN_MALLOC(sizeof(double) * reps), *t_all = GDN_MALLOC(sizeof(double) * reps);
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        double t0 = bench_now_ms();
        gdn_delta_fwd_f32(&s, q, k, v, g, beta, scale, h0, o, ht);
        double t1 = bench_now_ms();
        gdn_delta_bwd_f32(&s, q, k, v, g, beta, scale, h0, d_o, dht, dq, dk, dv, dg, dbeta, dh0);
        double t2 = bench_now_ms();
        if (r >= 0) {
            t_fwd[r] = t1 - t0;
            t_all[r] = t2 - t0;
        }
    }
    qsort(t_fwd, reps, sizeof(double), bench_cmp);
    qsort(t_all, reps, sizeof(double), bench_cmp);
    double sum = 0; /* keeps the results observable */
    for (size_t i = 0; i < nv; i++) sum += o[i] + dv[i];
    printf("gdn_delta f32: B=%d T=%d H=%d K=%d V=%d chunk=%d, %d OpenMP threads, median of %d\n",
           s.B, s.T, s.H, s.K, s.V, s.chunk, omp_get_max_threads(), reps);
    printf("  fwd       %9.3f ms\n", t_fwd[reps / 2]);
    printf("  fwd+bwd   %9.3f ms\n", t_all[reps / 2]);
    printf("  (checksum %.6e)\n", sum);
    float *all[] = {q, k, v, o, d_o, dv, dq, dk, g, beta, dg, dbeta, h0, ht, dht, dh0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    free(t_fwd);
    free(t_all);
    return 0;
}
