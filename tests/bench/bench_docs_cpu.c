/* The cost of document resets on the CPU kernels: the same fp32 inputs run as one sequence per
 * row and as `docs` packed documents per row (random lengths, the same in every row), for the
 * chunked gated delta rule (forward, forward + backward), the short convolution (forward +
 * backward over the H*K channels of q) and softmax attention (forward + backward, at its own
 * length Ta: attention is quadratic). The two variants alternate within each repeat, so a
 * loaded machine slows both alike; each line prints the median of `repeats` after a warm-up and
 * the ratio documents / one sequence.
 * Usage: bench_docs_cpu [B T H K V chunk docs repeats Ta]
 *        (defaults 1 4096 4 64 64 64 64 10 1024) */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/check.h"
#include "model/cpu/ops_cpu.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static unsigned long long mix(unsigned long long *s) {
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static float *filled(size_t n, float lo, float hi, unsigned long long seed) {
    float *x = GDN_MALLOC(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)((double)(mix(&seed) >> 11) / 9007199254740992.0);
    return x;
}

static void l2_rows(float *x, size_t rows, int D) {
    for (size_t r = 0; r < rows; r++) {
        float n2 = 0;
        for (int i = 0; i < D; i++) n2 += x[r * D + i] * x[r * D + i];
        for (int i = 0; i < D; i++) x[r * D + i] /= sqrtf(n2 + 1e-6f);
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* doc [B,T] of n documents per row: random cut points (distinct), the same in every row. */
static int *make_docs(int B, int T, int n) {
    unsigned char *st = GDN_CALLOC((size_t)B * T, 1);
    unsigned long long s = 42;
    for (int made = 1; made < n && made < T;) {
        int t = 1 + (int)(mix(&s) % (unsigned long long)(T - 1));
        if (st[t]) continue;
        st[t] = 1;
        made++;
    }
    for (int b = 1; b < B; b++) memcpy(st + (size_t)b * T, st, (size_t)T);
    int *doc = GDN_MALLOC(sizeof(int) * (size_t)B * T);
    gdn_doc_build(doc, st, NULL, B, T);
    free(st);
    return doc;
}

typedef struct {
    const char *what;
    double *t[2]; /* [repeats] one sequence, documents */
} timing;

static void report(timing *x, int reps) {
    qsort(x->t[0], reps, sizeof(double), cmp);
    qsort(x->t[1], reps, sizeof(double), cmp);
    const double a = x->t[0][reps / 2], b = x->t[1][reps / 2];
    printf("  %-22s one sequence %9.3f ms   documents %9.3f ms   ratio %.3f\n", x->what, a, b, b / a);
}

int main(int argc, char **argv) {
    int arg[9] = {1, 4096, 4, 64, 64, 64, 64, 10, 1024};
    const char *names[9] = {"B", "T", "H", "K", "V", "chunk", "docs", "repeats", "Ta"};
    if (argc > 10) {
        fprintf(stderr, "usage: %s [B T H K V chunk docs repeats Ta]\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        char *end;
        long x = strtol(argv[i], &end, 10);
        if (*end || x < 1 || x > (1L << 24)) {
            fprintf(stderr, "bench_docs_cpu: argument %d (%s) must be a positive integer, got '%s'\n", i,
                    names[i - 1], argv[i]);
            return 2;
        }
        arg[i - 1] = (int)x;
    }
    const int B = arg[0], T = arg[1], H = arg[2], K = arg[3], V = arg[4], C = arg[5], n_docs = arg[6];
    const int reps = arg[7], Ta = arg[8];
    gdn_delta_shape s = {.B = B, .T = T, .H = H, .K = K, .V = V, .chunk = C};
    const size_t nqk = (size_t)B * T * H * K, nv = (size_t)B * T * H * V, ng = (size_t)B * T * H;
    const size_t nst = (size_t)B * H * K * V;
    float *q = filled(nqk, -1, 1, 1), *k = filled(nqk, -1, 1, 2), *v = filled(nv, -1, 1, 3);
    l2_rows(q, ng, K);
    l2_rows(k, ng, K);
    float *g = filled(ng, -1, 0, 4), *beta = filled(ng, 0, 1, 5), *d_o = filled(nv, -1, 1, 7);
    float *o = filled(nv, 0, 0, 0), *dq = filled(nqk, 0, 0, 0), *dk = filled(nqk, 0, 0, 0);
    float *dv = filled(nv, 0, 0, 0), *dg = filled(ng, 0, 0, 0), *db = filled(ng, 0, 0, 0);
    float *ht = filled(nst, 0, 0, 0);
    const int W = 4, CH = H * K;
    float *cw = filled((size_t)CH * W, -1, 1, 9), *cdw = filled((size_t)CH * W, 0, 0, 0);
    int *doc = make_docs(B, T, n_docs), *doc_a = make_docs(B, Ta, n_docs);
    const int Ha = H, Da = K;
    const size_t na = (size_t)B * Ta * Ha * Da;
    float *aq = filled(na, -1, 1, 11), *ak = filled(na, -1, 1, 12), *av = filled(na, -1, 1, 13);
    float *ado = filled(na, -1, 1, 14), *ao = filled(na, 0, 0, 0), *alse = filled((size_t)B * Ha * Ta, 0, 0, 0);
    float *adq = filled(na, 0, 0, 0), *adk = filled(na, 0, 0, 0), *adv = filled(na, 0, 0, 0);
    const float scale = 1.0f / sqrtf((float)K);

    timing tm[4] = {{"delta rule fwd", {0}}, {"delta rule fwd+bwd", {0}}, {"convolution fwd+bwd", {0}},
                    {"attention fwd+bwd", {0}}};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++) tm[i].t[j] = GDN_MALLOC(sizeof(double) * reps);
    for (int r = -1; r < reps; r++) /* r = -1: warm-up */
        for (int j = 0; j < 2; j++) {
            s.doc = j ? doc : NULL;
            double t0 = now_ms();
            gdn_delta_fwd_f32(&s, q, k, v, g, beta, scale, NULL, o, ht);
            double t1 = now_ms();
            gdn_delta_bwd_f32(&s, q, k, v, g, beta, scale, NULL, d_o, NULL, dq, dk, dv, dg, db, NULL);
            double t2 = now_ms();
            gdn_conv_fwd_f32(dq, q, cw, NULL, s.doc, B, T, CH, W);
            gdn_conv_bwd_f32(dk, cdw, NULL, dq, q, cw, NULL, s.doc, B, T, CH, W);
            double t3 = now_ms();
            gdn_attn_shape as = {B, Ta, Ha, Ha, Da, j ? doc_a : NULL};
            gdn_attn_fwd_f32(&as, aq, ak, av, scale, ao, alse);
            gdn_attn_bwd_f32(&as, aq, ak, av, ao, alse, scale, ado, adq, adk, adv);
            double t4 = now_ms();
            if (r < 0) continue;
            tm[0].t[j][r] = t1 - t0;
            tm[1].t[j][r] = t2 - t0;
            tm[2].t[j][r] = t3 - t2;
            tm[3].t[j][r] = t4 - t3;
        }
    printf("document resets, fp32 CPU: B=%d T=%d H=%d K=%d V=%d chunk=%d, %d documents per row, attention "
           "T=%d D=%d; %d OpenMP threads, median of %d\n", B, T, H, K, V, C, n_docs, Ta, Da,
           omp_get_max_threads(), reps);
    for (int i = 0; i < 4; i++) report(&tm[i], reps);
    double sum = 0; /* keeps the results observable */
    for (size_t i = 0; i < nv; i++) sum += o[i] + dv[i];
    printf("  (checksum %.6e)\n", sum);
    float *all[] = {q, k, v, g, beta, d_o, o, dq, dk, dv, dg, db, ht, cw, cdw, aq, ak, av, ado, ao, alse, adq, adk, adv};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    for (int i = 0; i < 4; i++) free(tm[i].t[0]), free(tm[i].t[1]);
    free(doc);
    free(doc_a);
    return 0;
}
