/* The 512M block's projection gradients on cuBLASLt, one GEMM pair per projection against the
 * groupings the model could use (docs/performance.md, "Projections with adjacent weights as one
 * GEMM"): bf16 operands, fp32 dh [N,D], N = 16 x 2048, D 1024, q/k 1536, v/g 3072, gates 6
 * columns each, MLP 2816. CUDA events, median of `reps` after 3 warm-up calls, each case in every
 * round. Usage: bench_gemm [reps [rounds]]. Exits 77 without a GPU. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/cuda/ops_cuda.h"

#define P GDN_CUDA_BF16
#define F32 GDN_CUDA_FP32
enum { N = 32768, D = 1024, HK = 1536, HV = 3072, H = 6, F = 2816, LDP = 6160, WIDE = 10000 };
static const int QKV = 2 * HK + HV; /* the columns before the gates, in the weights' order */
static const size_t ES = 2;
static gdn_cuda_blas *bl;
static void *h, *dh, *dy, *W, *G, *y; /* dy: [N, LDP] side by side, then dz [N, HV] */

static char *col(void *base, size_t c, size_t rows) { return (char *)base + c * rows * ES; }
static void dx(const void *d, int ld, size_t w_row, int out, float beta) {
    gdn_cuda_linear_bwd_dx(bl, P, F32, dh, d, ld, col(W, w_row, D), N, D, out, beta);
}
static void dw(const void *d, int ld, size_t w_row, int out) {
    gdn_cuda_linear_bwd_dw(bl, P, (float *)G + w_row * D, d, ld, h, N, D, out);
}

/* Six pairs, each dy a tensor of its own (q, k, v, g, a, b: the order before). */
static const int sep_out[6] = {HK, HK, HV, HV, H, H};
static void six_dx(void) {
    size_t o = 0;
    for (int i = 0; i < 6; i++) { dx(col(dy, o, N), sep_out[i], o, sep_out[i], i ? 1.0f : 0.0f); o += sep_out[i]; }
}
static void six_dw(void) {
    size_t o = 0;
    for (int i = 0; i < 6; i++) { dw(col(dy, o, N), sep_out[i], o, sep_out[i]); o += sep_out[i]; }
}
static void six(void) { /* each projection's dx, then its dW, as the model ran them */
    size_t o = 0;
    for (int i = 0; i < 6; i++) {
        dx(col(dy, o, N), sep_out[i], o, sep_out[i], i ? 1.0f : 0.0f);
        dw(col(dy, o, N), sep_out[i], o, sep_out[i]);
        o += sep_out[i];
    }
}
/* q, k, v, a, b as one product (inner width 6156), then g. */
static void wide_dx(void) {
    dx(dy, LDP, 0, QKV + 2 * H, 0.0f);
    dx(col(dy, LDP, N), HV, QKV + 2 * H, HV, 1.0f);
}
static void wide_dw(void) {
    dw(dy, LDP, 0, QKV + 2 * H);
    dw(col(dy, LDP, N), HV, QKV + 2 * H, HV);
}
static void wide(void) {
    dx(dy, LDP, 0, QKV + 2 * H, 0.0f);
    dw(dy, LDP, 0, QKV + 2 * H);
    dx(col(dy, LDP, N), HV, QKV + 2 * H, HV, 1.0f);
    dw(col(dy, LDP, N), HV, QKV + 2 * H, HV);
}
/* The model's grouping: the gates a, b first, then q, k, v, then g. */
static void three_dx(void) {
    dx((char *)dy + QKV * ES, LDP, QKV, 2 * H, 0.0f);
    dx(dy, LDP, 0, QKV, 1.0f);
    dx(col(dy, LDP, N), HV, QKV + 2 * H, HV, 1.0f);
}
static void three_dw(void) {
    dw((char *)dy + QKV * ES, LDP, QKV, 2 * H);
    dw(dy, LDP, 0, QKV);
    dw(col(dy, LDP, N), HV, QKV + 2 * H, HV);
}
static void three(void) {
    dx((char *)dy + QKV * ES, LDP, QKV, 2 * H, 0.0f);
    dw((char *)dy + QKV * ES, LDP, QKV, 2 * H);
    dx(dy, LDP, 0, QKV, 1.0f);
    dw(dy, LDP, 0, QKV);
    dx(col(dy, LDP, N), HV, QKV + 2 * H, HV, 1.0f);
    dw(col(dy, LDP, N), HV, QKV + 2 * H, HV);
}
/* The forward's input projections: six GEMMs, or q, k, v as one, g, and the gates as one. */
static void fwd_six(void) {
    size_t o = 0;
    for (int i = 0; i < 4; i++) {
        gdn_cuda_linear_fwd(bl, P, P, col(y, o, N), h, col(W, o, D), N, D, sep_out[i], 0.0f);
        o += sep_out[i];
    }
    gdn_cuda_linear_fwd(bl, P, F32, dh, h, col(W, o, D), N, D, H, 0.0f);
    gdn_cuda_linear_fwd(bl, P, F32, (float *)dh + (size_t)N * H, h, col(W, o + H, D), N, D, H, 0.0f);
}
static void fwd_three(void) {
    gdn_cuda_linear_fwd(bl, P, P, y, h, W, N, D, QKV, 0.0f);
    gdn_cuda_linear_fwd(bl, P, P, col(y, QKV, N), h, col(W, QKV, D), N, D, HV, 0.0f);
    gdn_cuda_linear_fwd(bl, P, F32, dh, h, col(W, QKV + HV, D), N, D, 2 * H, 0.0f);
}
/* The MLP's gate and up: two pairs, or one over dy [N, 2F]. */
static void mlp_two(void) {
    dx(dy, F, 0, F, 0.0f);
    dw(dy, F, 0, F);
    dx(col(dy, F, N), F, F, F, 1.0f);
    dw(col(dy, F, N), F, F, F);
}
static void mlp_one(void) {
    dx(dy, 2 * F, 0, 2 * F, 0.0f);
    dw(dy, 2 * F, 0, 2 * F);
}
static void mlp_fwd_two(void) {
    gdn_cuda_linear_fwd(bl, P, P, y, h, W, N, D, F, 0.0f);
    gdn_cuda_linear_fwd(bl, P, P, col(y, F, N), h, col(W, F, D), N, D, F, 0.0f);
}
static void mlp_fwd_one(void) { gdn_cuda_linear_fwd(bl, P, P, y, h, W, N, D, 2 * F, 0.0f); }

static int cmpf(const void *a, const void *b) {
    const float x = *(const float *)a, z = *(const float *)b;
    return (x > z) - (x < z);
}
static float time_ms(void (*f)(void), int reps, cudaEvent_t e0, cudaEvent_t e1) {
    float *t = malloc((size_t)reps * sizeof *t);
    for (int i = 0; i < 3; i++) f();
    for (int r = 0; r < reps; r++) {
        cudaEventRecord(e0, 0);
        f();
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&t[r], e0, e1);
    }
    qsort(t, (size_t)reps, sizeof *t, cmpf);
    const float m = t[reps / 2];
    free(t);
    return m;
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 21, rounds = argc > 2 ? atoi(argv[2]) : 2;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    if (reps < 1 || rounds < 1) {
        fprintf(stderr, "usage: bench_gemm [reps >= 1 [rounds >= 1]]\n");
        return 2;
    }
    bl = gdn_cuda_blas_create(NULL);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const size_t nh = (size_t)N * D, nw = (size_t)WIDE * D, ny = (size_t)N * WIDE;
    if (cudaMalloc(&h, nh * ES) || cudaMalloc(&dh, nh * 4) || cudaMalloc(&dy, ny * ES) || cudaMalloc(&W, nw * ES) ||
        cudaMalloc(&G, nw * 4) || cudaMalloc(&y, ny * ES)) {
        fprintf(stderr, "bench_gemm: out of device memory\n");
        return 1;
    }
    /* 0x3c3c: bf16 0.0115, finite sums at every size here */
    cudaMemset(h, 0x3c, nh * ES);
    cudaMemset(dy, 0x3c, ny * ES);
    cudaMemset(W, 0x3c, nw * ES);
    cudaMemset(G, 0, nw * 4);
    static const struct {
        const char *name;
        void (*f)(void);
    } c[] = {
        {"input bwd: six pairs", six},          {"  dx", six_dx},   {"  dW", six_dw},
        {"input bwd: q..b (6156) + g", wide},   {"  dx", wide_dx},  {"  dW", wide_dw},
        {"input bwd: ab | qkv | g", three},     {"  dx", three_dx}, {"  dW", three_dw},
        {"input fwd: six GEMMs", fwd_six},      {"input fwd: qkv | g | ab", fwd_three},
        {"MLP gate/up bwd: two pairs", mlp_two}, {"MLP gate/up bwd: one pair", mlp_one},
        {"MLP gate/up fwd: two", mlp_fwd_two},  {"MLP gate/up fwd: one", mlp_fwd_one},
    };
    printf("projection GEMMs of one gdn512m block, bf16, N %d D %d, median of %d (ms)\n", N, D, reps);
    for (int r = 0; r < rounds; r++)
        for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
            printf("round %d  %-32s %8.3f\n", r + 1, c[i].name, time_ms(c[i].f, reps, e0, e1));
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        fprintf(stderr, "bench_gemm: %s\n", cudaGetErrorString(e));
        return 1;
    }
    gdn_cuda_blas_free(bl);
    return 0;
}
