/* gdn bench: times the gated delta rule (forward, forward+backward) and whole training steps.
 * Every figure is the median of repeated runs after a warm-up. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/parse_num.h"
#include "model/check.h"
#include "model/cpu/model_cpu.h"
#include "model/cuda/cuda_mixers.h"
#include "train/commands.h"
#include "train/optim.h"
#include "train/run_config.h"
#ifdef GDN_HAVE_CUDA
#include "model/cuda/delta_cuda.h"
#include "model/cuda/model_cuda.h"
#endif


static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* FLOPs of the chunked delta rule forward at chunk C (matrix products only), per (b, h):
 * per chunk: K K^T (C^2 K), T via substitution (C^3/3), W (C^2 K), U (C^2 V), W S (C K V),
 * Q S (C K V), Q K^T (C^2 K), (..) Vnew (C^2 V), K^T Vnew (C K V), times 2 for multiply-add. */
static double delta_fwd_flops(const gdn_delta_shape *s, int C) {
    double K = s->K, V = s->V, c = C, chunks = ceil((double)s->T / C);
    double per = c * c * K * 3 + c * c * V * 2 + c * c * c / 3 + 3 * c * K * V;
    return 2.0 * per * chunks * s->B * s->H;
}

static void fill(float *x, size_t n, float lo, float hi, unsigned seed) {
    unsigned long long st = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = lo + (hi - lo) * (float)((st >> 40) * (1.0 / 16777216.0));
    }
}

static void l2rows(float *x, size_t rows, int d) {
    for (size_t r = 0; r < rows; r++) {
        double s = 0;
        for (int j = 0; j < d; j++) s += (double)x[r * d + j] * x[r * d + j];
        for (int j = 0; j < d; j++) x[r * d + j] = (float)(x[r * d + j] / sqrt(s + 1e-6));
    }
}

static void bench_delta_cpu(const gdn_delta_shape *s, int repeats, int json) {
    const size_t nqk = (size_t)s->B * s->T * s->H * s->K, nv = (size_t)s->B * s->T * s->H * s->V;
    const size_t ng = (size_t)s->B * s->T * s->H, nst = (size_t)s->B * s->H * s->K * s->V;
    float *q = GDN_MALLOC(nqk * 4), *k = GDN_MALLOC(nqk * 4), *v = GDN_MALLOC(nv * 4), *g = GDN_MALLOC(ng * 4);
    float *beta = GDN_MALLOC(ng * 4), *o = GDN_MALLOC(nv * 4), *ht = GDN_MALLOC(nst * 4), *d_o = GDN_MALLOC(nv * 4);
    float *dq = GDN_MALLOC(nqk * 4), *dk = GDN_MALLOC(nqk * 4), *dv = GDN_MALLOC(nv * 4), *dg = GDN_MALLOC(ng * 4);
    float *db = GDN_MALLOC(ng * 4);
    fill(q, nqk, -1, 1, 1); fill(k, nqk, -1, 1, 2); fill(v, nv, -1, 1, 3); fill(d_o, nv, -1, 1, 4);
    l2rows(q, nqk / s->K, s->K); l2rows(k, nqk / s->K, s->K);
    fill(g, ng, -0.1f, -0.001f, 5); fill(beta, ng, 0.1f, 0.9f, 6);
    const float scale = 1.0f / sqrtf((float)s->K);
    double *tf = GDN_MALLOC((size_t)repeats * 8), *tb = GDN_MALLOC((size_t)repeats * 8);
    for (int r = -1; r < repeats; r++) { /* r = -1: warm-up */
        double t0 = now_s();
        gdn_delta_fwd_f32(s, q, k, v, g, beta, scale, NULL, o, ht);
        double t1 = now_s();
        gdn_delta_bwd_f32(s, q, k, v, g, beta, scale, NULL, d_o, NULL, dq, dk, dv, dg, db, NULL);
        double t2 = now_s();
        if (r >= 0) { tf[r] = (t1 - t0) * 1e3; tb[r] = (t2 - t0) * 1e3; }
    }
    double mf = median(tf, repeats), mb = median(tb, repeats);
    double gf = delta_fwd_flops(s, s->chunk) / (mf * 1e-3) / 1e9;
    if (json)
        printf("{\"bench\":\"delta\",\"backend\":\"cpu\",\"B\":%d,\"T\":%d,\"H\":%d,\"K\":%d,\"V\":%d,\"chunk\":%d,"
               "\"threads\":%d,\"fwd_ms\":%.4f,\"fwdbwd_ms\":%.4f,\"fwd_gflops\":%.2f}\n",
               s->B, s->T, s->H, s->K, s->V, s->chunk, omp_get_max_threads(), mf, mb, gf);
    else
        printf("delta rule cpu fp32  B%d T%d H%d K%d V%d chunk %d, %d threads: fwd %.3f ms (%.1f GFLOP/s), "
               "fwd+bwd %.3f ms  [median of %d]\n",
               s->B, s->T, s->H, s->K, s->V, s->chunk, omp_get_max_threads(), mf, gf, mb, repeats);
    free(q); free(k); free(v); free(g); free(beta); free(o); free(ht); free(d_o);
    free(dq); free(dk); free(dv); free(dg); free(db); free(tf); free(tb);
}

#ifdef GDN_HAVE_CUDA
static void bench_delta_cuda(const gdn_delta_shape *s, int repeats, int json) {
    gdn_cuda_delta_timing tm;
    gdn_cuda_delta_time(s, GDN_CUDA_BF16, 5, repeats, &tm);
    double tfl = 3.0 * delta_fwd_flops(s, 64) / (tm.fwdbwd_ms * 1e-3) / 1e12; /* bwd ~ 2x fwd */
    if (json) {
        printf("{\"bench\":\"delta\",\"backend\":\"cuda\",\"precision\":\"bf16\",\"B\":%d,\"T\":%d,\"H\":%d,"
               "\"K\":%d,\"V\":%d,\"fwd_ms\":%.4f,\"fwdbwd_ms\":%.4f",
               s->B, s->T, s->H, s->K, s->V, tm.fwd_ms, tm.fwdbwd_ms);
        for (int p = 0; p < GDN_CUDA_PHASES; p++) printf(",\"%s_ms\":%.4f", gdn_cuda_delta_phase_name(p), tm.phase_ms[p]);
        printf("}\n");
    } else {
        printf("delta rule cuda bf16  B%d T%d H%d K%d V%d: fwd %.3f ms, fwd+bwd %.3f ms (~%.1f TFLOP/s)  [median of %d]\n",
               s->B, s->T, s->H, s->K, s->V, tm.fwd_ms, tm.fwdbwd_ms, tfl, repeats);
        for (int p = 0; p < GDN_CUDA_PHASES; p++)
            printf("    %-12s %.3f ms\n", gdn_cuda_delta_phase_name(p), tm.phase_ms[p]);
    }
}
#endif

#ifdef GDN_HAVE_CUDA
/* Whole training steps on the GPU (bf16), with the memory the model takes. */
static void bench_step_cuda(const gdn_run_config *rc, int repeats, int json) {
    gdn_param_table t;
    gdn_param_table_build(&t, &rc->model);
    float *p = GDN_MALLOC(t.total * sizeof(float));
    gdn_params_init(p, &t, 1);
    gdn_cuda_step_bench b;
    gdn_cuda_model_bench(&t, p, gdn_param_matmul_count(&t), rc->batch_size, rc->seq_len, GDN_CUDA_BF16, 3,
                         repeats, &b);
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (json)
        printf("{\"bench\":\"step\",\"backend\":\"cuda\",\"precision\":\"bf16\",\"params\":%zu,\"B\":%d,"
               "\"T\":%d,\"step_ms\":%.3f,\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,\"opt_ms\":%.3f,\"tokens_per_s\":%.1f,"
               "\"mfu\":%.4f,\"model_gib\":%.3f,\"device_used_gib\":%.3f}\n",
               t.total, rc->batch_size, rc->seq_len, b.step_ms, b.fwd_ms, b.bwd_ms, b.opt_ms, b.tokens_per_s, b.mfu,
               (double)(b.param_bytes + b.act_bytes) / gib, (double)b.device_used / gib);
    else
        printf("training step cuda bf16  %.1fM params, B%d x T%d: %.2f ms (fwd %.2f, bwd %.2f, optim %.2f), "
               "%.0f tokens/s, MFU %.1f%% (6 x %.1fM matmul params x tokens/s / 701 TFLOP/s); "
               "model %.2f GiB, device in use %.2f GiB  [median of %d]\n%s",
               (double)t.total / 1e6, rc->batch_size, rc->seq_len, b.step_ms, b.fwd_ms, b.bwd_ms, b.opt_ms,
               b.tokens_per_s, 100.0 * b.mfu, (double)b.matmul_params / 1e6,
               (double)(b.param_bytes + b.act_bytes) / gib, (double)b.device_used / gib, repeats, b.breakdown);
    free(p);
    gdn_param_table_free(&t);
}
#endif

/* Whole CPU training steps (forward, backward, AdamW) of a configuration. */
static void bench_step_cpu(const gdn_run_config *rc, int repeats, int json) {
    gdn_param_table t;
    gdn_param_table_build(&t, &rc->model);
    float *arena = GDN_CALLOC(4 * t.total, sizeof(float));
    float *p = arena, *gr = arena + t.total, *m = arena + 2 * t.total, *v = arena + 3 * t.total;
    gdn_params_init(p, &t, 1);
    const int B = rc->batch_size, T = rc->seq_len;
    int *tok = GDN_MALLOC((size_t)B * T * sizeof(int)), *tgt = GDN_MALLOC((size_t)B * T * sizeof(int));
    for (int i = 0; i < B * T; i++) { tok[i] = (i * 7919) % rc->model.vocab_size; tgt[i] = (i * 104729 + 1) % rc->model.vocab_size; }
    gdn_cpu_acts_f32 *a = gdn_cpu_acts_create_f32(&t, B, T);
    gdn_adamw_hparams h = {1e-4, 0.9, 0.95, 1e-8, 0.1};
    double *ts = GDN_MALLOC((size_t)repeats * 8);
    for (int r = -1; r < repeats; r++) {
        double t0 = now_s();
        int nv;
        memset(gr, 0, t.total * sizeof(float));
        gdn_cpu_forward_f32(a, &t, p, tok, tgt, 1.0f / (B * T), &nv, NULL, NULL);
        gdn_cpu_backward_f32(a, &t, p, gr);
        gdn_adamw_update(&t, p, gr, m, v, &h, r + 2);
        if (r >= 0) ts[r] = now_s() - t0;
    }
    double med = median(ts, repeats), tok_s = B * T / med;
    double flops = 6.0 * (double)gdn_param_matmul_count(&t) * tok_s;
    if (json)
        printf("{\"bench\":\"step\",\"backend\":\"cpu\",\"params\":%zu,\"B\":%d,\"T\":%d,\"threads\":%d,"
               "\"step_ms\":%.3f,\"tokens_per_s\":%.1f,\"gflops\":%.2f}\n",
               t.total, B, T, omp_get_max_threads(), med * 1e3, tok_s, flops / 1e9);
    else
        printf("training step cpu fp32  %.2fM params, B%d x T%d, %d threads: %.2f ms, %.0f tokens/s, "
               "%.2f GFLOP/s (6 x matmul params x tokens/s)  [median of %d]\n",
               (double)t.total / 1e6, B, T, omp_get_max_threads(), med * 1e3, tok_s, flops / 1e9, repeats);
    gdn_cpu_acts_free_f32(a);
    free(arena); free(tok); free(tgt); free(ts);
    gdn_param_table_free(&t);
}

/* --shape B,T,H,D[,V]: each a strict integer; the arrays (B T H max(D, V), and the states
 * B H D V) stay below 2^31 elements so every index fits an int. */
static int parse_shape(const char *text, int dims[5], int *count, char *err, size_t err_len) {
    static const char *names[5] = {"B", "T", "H", "D", "V"};
    static const int hi[5] = {1 << 20, 1 << 24, 4096, GDN_MAX_HEAD_DIM, GDN_MAX_HEAD_V};
    char buf[128], what[64];
    if (strlen(text) >= sizeof buf) {
        snprintf(err, err_len, "--shape expects B,T,H,D[,V], got a %zu-character value", strlen(text));
        return -1;
    }
    memcpy(buf, text, strlen(text) + 1);
    int n = 0;
    for (char *p = buf;; n++) {
        char *comma = strchr(p, ',');
        if (comma) *comma = 0;
        if (n == 5) {
            snprintf(err, err_len, "--shape expects B,T,H,D[,V] (at most 5 numbers), got '%s'", text);
            return -1;
        }
        snprintf(what, sizeof what, "--shape %s", names[n]);
        if (io_parse_int(what, p, 1, hi[n], &dims[n], err, err_len)) return -1;
        if (!comma) break;
        p = comma + 1;
    }
    *count = n + 1;
    if (*count < 4) {
        snprintf(err, err_len, "--shape expects B,T,H,D[,V] (at least 4 numbers), got '%s'", text);
        return -1;
    }
    const double V = *count == 5 ? dims[4] : dims[3], K = dims[3];
    const double big = (double)dims[0] * dims[1] * dims[2] * (K > V ? K : V);
    if (big > 2147483647.0 || (double)dims[0] * dims[2] * K * V > 2147483647.0) {
        snprintf(err, err_len, "--shape %s: the arrays would exceed 2^31 elements; use a smaller shape", text);
        return -1;
    }
    return 0;
}

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: gdn bench [--backend cpu|cuda] [--what delta|step|all] [--shape B,T,H,D[,V]]\n"
            "                 [--repeats N] [--json] [training settings for --what step, e.g. --preset tiny]\n\n"
            "delta: the gated delta rule forward and forward+backward. Default shapes: cpu B1,T2048,H4,D64;\n"
            "       cuda B4,T4096,H16,D128; B2,T16384,H16,D128; B1,T8192,H96,D128 (docs/design.md section 9).\n"
            "step:  whole training steps (forward, backward, AdamW) of a configuration (default: tiny);\n"
            "       --preset gdn512m is the 512M model of docs/design.md section 9 (B16 x T2048).\n");
}

int gdn_cmd_bench(int argc, char **argv) {
    const char *backend = "cpu", *what = "all", *shape = NULL;
    int repeats = 10, json = 0;
    char **rest = GDN_MALLOC((size_t)(argc + 4) * sizeof *rest);
    int nrest = 0;
    rest[nrest++] = "bench";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { bench_usage(stdout); free(rest); return 0; }
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (i + 1 < argc && !strcmp(a, "--backend")) backend = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--what")) what = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--shape")) shape = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--repeats")) {
            char err[256];
            if (io_parse_int("--repeats", argv[++i], 1, 1000000, &repeats, err, sizeof err)) {
                fprintf(stderr, "gdn bench: %s\n", err);
                free(rest);
                return 2;
            }
        } else if (!strcmp(a, "--backend") || !strcmp(a, "--what") || !strcmp(a, "--shape") ||
                   !strcmp(a, "--repeats")) {
            fprintf(stderr, "gdn bench: option '%s' needs a value\n", a);
            free(rest);
            return 2;
        } else rest[nrest++] = argv[i];
    }
    int cuda = !strcmp(backend, "cuda");
    if (!cuda && strcmp(backend, "cpu")) { fprintf(stderr, "gdn bench: --backend must be cpu or cuda\n"); free(rest); return 2; }
#ifndef GDN_HAVE_CUDA
    if (cuda) { fprintf(stderr, "gdn bench: this build has no CUDA backend\n"); free(rest); return 2; }
#else
    if (cuda && gdn_cuda_device_count() == 0) { fprintf(stderr, "gdn bench: no CUDA device is available\n"); free(rest); return 1; }
#endif
    int do_delta = !strcmp(what, "delta") || !strcmp(what, "all");
    int do_step = !strcmp(what, "step") || !strcmp(what, "all");
    if (!do_delta && !do_step) { fprintf(stderr, "gdn bench: --what must be delta, step or all\n"); free(rest); return 2; }
    if (do_delta) {
        gdn_delta_shape shapes[3];
        int n = 0;
        if (shape) {
            int dims[5], got = 0;
            char err[256];
            if (parse_shape(shape, dims, &got, err, sizeof err)) {
                fprintf(stderr, "gdn bench: %s\n", err);
                free(rest);
                return 2;
            }
            shapes[n++] = (gdn_delta_shape){dims[0], dims[1], dims[2], dims[3], got == 5 ? dims[4] : dims[3], 64, 0,
                                            GDN_MIXER_G, NULL};
        } else if (cuda) {
            shapes[n++] = (gdn_delta_shape){4, 4096, 16, 128, 128, 64, 0, GDN_MIXER_G, NULL};
            shapes[n++] = (gdn_delta_shape){2, 16384, 16, 128, 128, 64, 0, GDN_MIXER_G, NULL};
            shapes[n++] = (gdn_delta_shape){1, 8192, 96, 128, 128, 64, 0, GDN_MIXER_G, NULL};
        } else {
            shapes[n++] = (gdn_delta_shape){1, 2048, 4, 64, 64, 64, 0, GDN_MIXER_G, NULL};
        }
        for (int i = 0; i < n; i++) {
#ifdef GDN_HAVE_CUDA
            if (cuda) { bench_delta_cuda(&shapes[i], repeats, json); continue; }
#endif
            bench_delta_cpu(&shapes[i], repeats, json);
        }
    }
    if (do_step) {
        static gdn_run_config rc;
        char err[1024];
        int has_preset = 0;
        for (int i = 1; i < nrest; i++) has_preset |= !strncmp(rest[i], "--preset", 8) || !strncmp(rest[i], "--config", 8);
        if (!has_preset) { rest[nrest++] = "--preset"; rest[nrest++] = "tiny"; }
        rest[nrest++] = "--out=/dev/null";
        int r = gdn_run_config_parse(&rc, nrest, rest, err, sizeof err);
        if (r) {
            if (r < 0) fprintf(stderr, "gdn bench: %s\n", err);
            free(rest);
            return r < 0 ? 2 : 0;
        }
        if (cuda && gdn_cuda_unsupported_layer(&rc.model, err, sizeof err) >= 0) {
            fprintf(stderr, "gdn bench: --%s; use --backend cpu\n", err);
            free(rest);
            return 2;
        }
#ifdef GDN_HAVE_CUDA
        if (cuda) bench_step_cuda(&rc, repeats, json);
        else
#endif
            bench_step_cpu(&rc, repeats, json);
    }
    free(rest);
    return 0;
}
