/* The CUDA gated delta rule against the fp64 CPU path (gdn_delta_fwd_f64 / gdn_delta_bwd_f64):
 * every output and gradient, both precisions, several shapes (T not a multiple of 64, head dims
 * 64/128/256, K != V, with and without h0/dht, strong decay). Relative error ||x - ref|| / ||ref||
 * must stay under 1e-4 in fp32 mode and 1e-2 in bf16 mode. Host outputs are filled with NaN
 * before each call and the device outputs are NaN-poisoned by the wrappers, so an element the
 * kernels skip fails the comparison.
 *
 * Two ways in: the host-array wrappers (forward, then the backward recomputing the forward
 * intermediates), and the device-pointer launchers on a stream (forward, then
 * gdn_cuda_delta_bwd_saved reusing the forward's workspace).
 *
 * Plain C (the GPU machine has no CMocka). Exit 0: pass, 1: fail, 77: no CUDA device (skip).
 * `--small` runs one small case per precision (for compute-sanitizer). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "model/cpu/ops_cpu.h"
#include "model/cuda/delta_cuda.h"
#include "tests/ref/fd.h"

typedef struct {
    int B, T, H, K, V;
    int with_h0, with_dht;
    double gmin; /* g uniform in [gmin, 0) */
    const char *what;
} gpu_case;

static const gpu_case cases[] = {
    {1, 64, 1, 64, 64, 1, 1, -0.2, "one full chunk"},
    {2, 100, 2, 64, 64, 0, 0, -0.2, "T=100, no h0/dht"},
    {1, 200, 2, 128, 128, 1, 1, -0.2, "K=V=128, T=200"},
    {1, 150, 1, 256, 256, 1, 1, -0.2, "K=V=256, T=150"},
    {2, 77, 1, 64, 128, 0, 1, -0.2, "K=64 V=128, dht only"},
    {1, 130, 2, 128, 64, 1, 0, -0.2, "K=128 V=64, h0 only"},
    {1, 100, 2, 64, 64, 1, 1, -20.0, "strong decay (g down to -20)"},
    {1, 333, 1, 256, 64, 1, 1, -0.1, "K=256 V=64, T=333"},
};
static const gpu_case small_case = {1, 70, 1, 64, 64, 1, 1, -0.2, "sanitizer case"};
/* through the device launchers with the saved-intermediates backward (marked * in the log) */
static const gpu_case device_cases[] = {
    {1, 200, 2, 128, 128, 1, 1, -0.2, "device path, saved fwd"},
    {2, 77, 1, 64, 128, 0, 1, -0.2, "device path, saved fwd"},
    {1, 140, 1, 256, 256, 1, 0, -0.2, "device path, saved fwd"},
};

static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7FFFu + ((u >> 16) & 1u); /* round to nearest even */
    u &= 0xFFFF0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* rows of length D scaled to unit L2 norm (as the model normalises q and k) */
static void l2norm_rows(double *x, size_t rows, int D) {
    for (size_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < D; i++) ss += x[r * D + i] * x[r * D + i];
        const double inv = 1.0 / sqrt(ss + 1e-6);
        for (int i = 0; i < D; i++) x[r * D + i] *= inv;
    }
}

/* float copy of x (rounded to bf16 when bf) written back into x, so the fp64 reference sees
 * exactly the values the GPU sees. */
static float *as_f32(double *x, size_t n, int bf) {
    if (!x) return NULL;
    float *f = malloc(n * sizeof(float));
    if (!f) { fprintf(stderr, "out of memory\n"); exit(1); }
    for (size_t i = 0; i < n; i++) {
        f[i] = bf ? bf16_round((float)x[i]) : (float)x[i];
        x[i] = f[i];
    }
    return f;
}

static float *nan_f32(size_t n) {
    float *f = malloc(n * sizeof(float));
    if (!f) { fprintf(stderr, "out of memory\n"); exit(1); }
    for (size_t i = 0; i < n; i++) f[i] = NAN;
    return f;
}

static double *alloc_d(size_t n) {
    double *d = calloc(n, sizeof(double));
    if (!d) { fprintf(stderr, "out of memory\n"); exit(1); }
    return d;
}

#define CK(call)                                                                             \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* Device copy of x (float, or bf16 bits when bf; x already holds bf16-representable values). */
static void *dev_upload(const float *x, size_t n, int bf) {
    if (!x) return NULL;
    void *d = NULL;
    if (!bf) {
        CK(cudaMalloc(&d, n * 4));
        CK(cudaMemcpy(d, x, n * 4, cudaMemcpyHostToDevice));
        return d;
    }
    uint16_t *h = malloc(n * 2);
    if (!h) { fprintf(stderr, "out of memory\n"); exit(1); }
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        h[i] = (uint16_t)(u >> 16);
    }
    CK(cudaMalloc(&d, n * 2));
    CK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

/* Device output buffer filled with NaN bits (0xFF.. is NaN in fp32 and bf16). */
static void *dev_poisoned(size_t n, size_t es) {
    void *d = NULL;
    CK(cudaMalloc(&d, n * es));
    CK(cudaMemset(d, 0xFF, n * es));
    return d;
}

static void dev_download(float *x, const void *d, size_t n, int bf) {
    if (!bf) {
        CK(cudaMemcpy(x, d, n * 4, cudaMemcpyDeviceToHost));
        return;
    }
    uint16_t *h = malloc(n * 2);
    if (!h) { fprintf(stderr, "out of memory\n"); exit(1); }
    CK(cudaMemcpy(h, d, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)h[i] << 16;
        memcpy(&x[i], &u, 4);
    }
    free(h);
}

/* Forward then gdn_cuda_delta_bwd_saved through the device-pointer launchers on a stream. */
static void gpu_device_path(const gdn_delta_shape *s, gdn_cuda_precision p, const float *q,
                            const float *k, const float *v, const float *g, const float *beta,
                            float scale, const float *h0, const float *d_o, const float *dht,
                            float *o, float *ht, float *dq, float *dk, float *dv, float *dg,
                            float *db, float *dh0) {
    const int bf = p == GDN_CUDA_BF16;
    const size_t es = bf ? 2 : 4;
    const size_t ntok = (size_t)s->B * s->T * s->H, nst = (size_t)s->B * s->H * s->K * s->V;
    const size_t nqk = ntok * s->K, nv = ntok * s->V;
    void *q_d = dev_upload(q, nqk, bf), *k_d = dev_upload(k, nqk, bf), *v_d = dev_upload(v, nv, bf);
    void *g_d = dev_upload(g, ntok, 0), *b_d = dev_upload(beta, ntok, 0), *h0_d = dev_upload(h0, nst, 0);
    void *do_d = dev_upload(d_o, nv, bf), *dht_d = dev_upload(dht, nst, 0);
    void *o_d = dev_poisoned(nv, es), *ht_d = dev_poisoned(nst, 4);
    void *dq_d = dev_poisoned(nqk, es), *dk_d = dev_poisoned(nqk, es), *dv_d = dev_poisoned(nv, es);
    void *dg_d = dev_poisoned(ntok, 4), *db_d = dev_poisoned(ntok, 4), *dh0_d = dev_poisoned(nst, 4);
    void *ws = NULL;
    CK(cudaMalloc(&ws, gdn_cuda_delta_workspace_bytes(s, p)));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    gdn_cuda_delta_fwd(s, p, q_d, k_d, v_d, g_d, b_d, scale, h0_d, o_d, ht_d, ws, st);
    gdn_cuda_delta_bwd_saved(s, p, q_d, k_d, v_d, g_d, b_d, scale, h0_d, do_d, dht_d, dq_d, dk_d,
                             dv_d, dg_d, db_d, dh0_d, ws, st);
    CK(cudaStreamSynchronize(st));
    CK(cudaStreamDestroy(st));
    dev_download(o, o_d, nv, bf);
    dev_download(ht, ht_d, nst, 0);
    dev_download(dq, dq_d, nqk, bf);
    dev_download(dk, dk_d, nqk, bf);
    dev_download(dv, dv_d, nv, bf);
    dev_download(dg, dg_d, ntok, 0);
    dev_download(db, db_d, ntok, 0);
    dev_download(dh0, dh0_d, nst, 0);
    void *all[] = {q_d, k_d, v_d, g_d, b_d, h0_d, do_d, dht_d, o_d, ht_d, dq_d, dk_d, dv_d, dg_d, db_d, dh0_d, ws};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i]) CK(cudaFree(all[i]));
}

/* Runs one case in one precision (device_path: device launchers with the saved-intermediates
 * backward instead of the host wrappers); returns the number of failed comparisons. */
static int run_case(const gpu_case *c, gdn_cuda_precision p, unsigned long long seed, int device_path) {
    const int bf = p == GDN_CUDA_BF16;
    const double tol = bf ? 1e-2 : 1e-4;
    gdn_delta_shape s = {c->B, c->T, c->H, c->K, c->V, 64};
    const size_t ntok = (size_t)c->B * c->T * c->H, nqk = ntok * c->K, nv = ntok * c->V;
    const size_t nst = (size_t)c->B * c->H * c->K * c->V;
    const double scale = 1.0 / sqrt((double)c->K);

    double *q = alloc_d(nqk), *k = alloc_d(nqk), *v = alloc_d(nv), *g = alloc_d(ntok);
    double *beta = alloc_d(ntok), *d_o = alloc_d(nv);
    double *h0 = c->with_h0 ? alloc_d(nst) : NULL, *dht = c->with_dht ? alloc_d(nst) : NULL;
    fd_fill_uniform(q, nqk, -1, 1, seed + 1);
    fd_fill_uniform(k, nqk, -1, 1, seed + 2);
    l2norm_rows(q, ntok, c->K);
    l2norm_rows(k, ntok, c->K);
    fd_fill_uniform(v, nv, -1, 1, seed + 3);
    fd_fill_uniform(g, ntok, c->gmin, 0, seed + 4);
    fd_fill_uniform(beta, ntok, 0.05, 0.95, seed + 5);
    fd_fill_uniform(d_o, nv, -1, 1, seed + 6);
    if (h0) fd_fill_uniform(h0, nst, -0.5, 0.5, seed + 7);
    if (dht) fd_fill_uniform(dht, nst, -0.5, 0.5, seed + 8);
    float *qf = as_f32(q, nqk, bf), *kf = as_f32(k, nqk, bf), *vf = as_f32(v, nv, bf);
    float *gf = as_f32(g, ntok, 0), *bef = as_f32(beta, ntok, 0), *dof = as_f32(d_o, nv, bf);
    float *h0f = as_f32(h0, nst, 0), *dhtf = as_f32(dht, nst, 0);

    /* reference */
    double *o = alloc_d(nv), *ht = alloc_d(nst);
    double *dq = alloc_d(nqk), *dk = alloc_d(nqk), *dv = alloc_d(nv), *dg = alloc_d(ntok);
    double *db = alloc_d(ntok), *dh0 = alloc_d(nst);
    gdn_delta_fwd_f64(&s, q, k, v, g, beta, scale, h0, o, ht);
    gdn_delta_bwd_f64(&s, q, k, v, g, beta, scale, h0, d_o, dht, dq, dk, dv, dg, db, dh0);

    /* GPU */
    float *o_g = nan_f32(nv), *ht_g = nan_f32(nst);
    float *dq_g = nan_f32(nqk), *dk_g = nan_f32(nqk), *dv_g = nan_f32(nv), *dg_g = nan_f32(ntok);
    float *db_g = nan_f32(ntok), *dh0_g = nan_f32(nst);
    if (device_path) {
        gpu_device_path(&s, p, qf, kf, vf, gf, bef, (float)scale, h0f, dof, dhtf, o_g, ht_g, dq_g,
                        dk_g, dv_g, dg_g, db_g, dh0_g);
    } else {
        gdn_cuda_delta_fwd_host(&s, p, qf, kf, vf, gf, bef, (float)scale, h0f, o_g, ht_g);
        gdn_cuda_delta_bwd_host(&s, p, qf, kf, vf, gf, bef, (float)scale, h0f, dof, dhtf, dq_g,
                                dk_g, dv_g, dg_g, db_g, dh0_g);
    }

    struct { const char *name; const float *x; const double *ref; size_t n; } cmp[] = {
        {"o", o_g, o, nv},     {"ht", ht_g, ht, nst},   {"dq", dq_g, dq, nqk},
        {"dk", dk_g, dk, nqk}, {"dv", dv_g, dv, nv},    {"dg", dg_g, dg, ntok},
        {"dbeta", db_g, db, ntok}, {"dh0", dh0_g, dh0, nst},
    };
    int fails = 0;
    double worst = 0;
    printf("%-4s%s B%d T%-4d H%d K%-3d V%-3d h0=%d dht=%d %-30s", bf ? "bf16" : "fp32",
           device_path ? "*" : " ", c->B, c->T, c->H, c->K, c->V, c->with_h0, c->with_dht, c->what);
    for (size_t i = 0; i < sizeof(cmp) / sizeof(cmp[0]); i++) {
        const double e = fd_rel_err_f32(cmp[i].x, cmp[i].ref, cmp[i].n);
        printf(" %s %.1e", cmp[i].name, e);
        if (!(e < tol)) { /* NaN fails too */
            printf("(FAIL)");
            fails++;
        }
        if (e > worst || e != e) worst = e;
    }
    printf("  max %.1e %s\n", worst, fails ? "FAIL" : "ok");

    free(q); free(k); free(v); free(g); free(beta); free(d_o); free(h0); free(dht);
    free(qf); free(kf); free(vf); free(gf); free(bef); free(dof); free(h0f); free(dhtf);
    free(o); free(ht); free(dq); free(dk); free(dv); free(dg); free(db); free(dh0);
    free(o_g); free(ht_g); free(dq_g); free(dk_g); free(dv_g); free(dg_g); free(db_g); free(dh0_g);
    return fails;
}

int main(int argc, char **argv) {
    if (gdn_cuda_device_count() == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    const int small = argc > 1 && strcmp(argv[1], "--small") == 0;
    int fails = 0;
    for (int pi = 0; pi < 2; pi++) {
        const gdn_cuda_precision p = pi ? GDN_CUDA_BF16 : GDN_CUDA_FP32;
        if (small) {
            fails += run_case(&small_case, p, 1000, 0);
            fails += run_case(&small_case, p, 1001, 1);
            continue;
        }
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
            fails += run_case(&cases[i], p, 100 * (i + 1), 0);
        for (size_t i = 0; i < sizeof(device_cases) / sizeof(device_cases[0]); i++)
            fails += run_case(&device_cases[i], p, 5000 + 100 * i, 1);
    }
    printf("%s: %d failed comparisons\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
