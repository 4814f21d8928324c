/* The CUDA gated delta rule against the fp64 CPU path (gdn_delta_fwd_f64 / gdn_delta_bwd_f64):
 * every output and gradient, both precisions, several shapes (T not a multiple of 64, head dims
 * 64/128/256, K != V, with and without h0/dht, strong decay). Relative error ||x - ref|| / ||ref||
 * must stay under 1e-4 in fp32 mode and 1e-2 in bf16 mode. Host outputs are filled with NaN
 * before each call and the device outputs are NaN-poisoned by the wrappers, so an element the
 * kernels skip fails the comparison.
 *
 * Grouped value heads (qk_heads < H: value head h reads q, k head h / (H / qk_heads)): the
 * reference is the CPU op on q, k expanded to H heads on the host, its dq, dk summed over each
 * group. Besides, the grouped GPU run must give the same bits as the GPU run on the expanded
 * q, k (the kernels read the same values): o, ht, dv, dg, dbeta, dh0 always, dq and dk where the
 * group sum can be redone here exactly (fp32: the fixed-order fp32 sum of the expanded run's
 * per-head dq, dk; or one value head per q/k head). A bad qk_heads must stop the CUDA shape
 * check and the CPU op with a message naming the field.
 *
 * Two ways in: the host-array wrappers (forward, then the backward recomputing the forward
 * intermediates), and the device-pointer launchers on a stream (forward, then
 * gdn_cuda_delta_bwd_saved reusing the forward's workspace).
 *
 * Repeatability: on larger shapes (T not a multiple of 64 among them) both ways in run twice on
 * the same inputs and every output of the forward and the backward must be bitwise identical
 * (the training is required to repeat bit for bit; an order-dependent float reduction, such as
 * float atomics, breaks this).
 *
 * Every check runs for each mixer of the family (model/mixer.h, docs/design.md section 2.6): G, D
 * (no decay), M (no delta term), L (neither), the CPU op of the same variant being the reference.
 * The host wrappers get NULL for the inputs a variant ignores (g for D and L, beta for M and L),
 * the device path gets them present; either way their gradients must come back as exact zeros
 * (the reference is zero, so the relative error of anything else is huge, and the outputs start
 * as NaN). The CUDA shape check refuses an unknown variant, and the launchers a NULL input that
 * the variant reads.
 *
 * Documents (docs/design.md section 3.8): rows packed with documents (gdn_cuda_delta_in.doc)
 * against the fp64 CPU op with the same doc, same limits, for starts at chunk edges, inside
 * chunks, at 0 and 1, documents of length 1, random packings up to 64 documents in T = 4096, with
 * h0 and dht; and a packed row against its documents run one by one on the GPU (equal as floats
 * where the documents fall on the same chunks either way).
 *
 * Plain C (the GPU machine has no CMocka). Exit 0: pass, 1: fail, 77: no CUDA device (skip).
 * `--small` runs small cases per precision and variant (for compute-sanitizer); `--repeat` runs
 * only the repeatability checks, `--docs` only the documents. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "model/cpu/doc.h"
#include "model/cpu/ops_cpu.h"
#include "model/mixer.h"
#include "model/cuda/delta_cuda.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/ref/fd.h"

typedef struct {
    int B, T, H, K, V;
    int with_h0, with_dht;
    double gmin; /* g uniform in [gmin, 0) */
    const char *what;
    int qk_heads; /* 0: q, k per value head; else value head h reads q, k head h / (H / qk_heads) */
} gpu_case;

static const gpu_case cases[] = {
    {1, 64, 1, 64, 64, 1, 1, -0.2, "one full chunk", 0},
    {2, 100, 2, 64, 64, 0, 0, -0.2, "T=100, no h0/dht", 0},
    {1, 200, 2, 128, 128, 1, 1, -0.2, "K=V=128, T=200", 0},
    {1, 150, 1, 256, 256, 1, 1, -0.2, "K=V=256, T=150", 0},
    {2, 77, 1, 64, 128, 0, 1, -0.2, "K=64 V=128, dht only", 0},
    {1, 130, 2, 128, 64, 1, 0, -0.2, "K=128 V=64, h0 only", 0},
    {1, 100, 2, 64, 64, 1, 1, -20.0, "strong decay (g down to -20)", 0},
    {1, 333, 1, 256, 64, 1, 1, -0.1, "K=256 V=64, T=333", 0},
};
static const gpu_case small_case = {1, 70, 1, 64, 64, 1, 1, -0.2, "sanitizer case", 0};
static const gpu_case small_gva_case = {1, 70, 2, 64, 64, 1, 1, -0.2, "sanitizer case, GVA", 1};
/* grouped value heads (fp64 reference on q, k expanded to H heads, and the bitwise comparison
 * with the GPU run on the expanded q, k) */
static const gpu_case gva_cases[] = {
    {2, 100, 4, 64, 64, 0, 1, -0.2, "GVA 2 per q/k head", 2},
    {1, 130, 2, 256, 256, 1, 1, -0.2, "GVA 2 per q/k head", 1},
    {1, 77, 6, 128, 64, 1, 0, -0.2, "GVA 2 per q/k head", 3},
    {2, 90, 6, 64, 128, 1, 1, -0.2, "GVA 3 per q/k head", 2},
    {1, 200, 4, 128, 128, 1, 1, -0.2, "GVA 4 per q/k head", 1},
    {1, 100, 2, 64, 64, 1, 1, -0.2, "qk_heads = H (no grouping)", 2},
};
/* through the device launchers with the saved-intermediates backward (marked * in the log) */
static const gpu_case device_cases[] = {
    {1, 200, 2, 128, 128, 1, 1, -0.2, "device path, saved fwd", 0},
    {2, 77, 1, 64, 128, 0, 1, -0.2, "device path, saved fwd", 0},
    {1, 140, 1, 256, 256, 1, 0, -0.2, "device path, saved fwd", 0},
    {2, 100, 4, 64, 64, 1, 1, -0.2, "device path, saved fwd, GVA", 2},
    {1, 130, 2, 256, 256, 0, 1, -0.2, "device path, saved fwd, GVA", 1},
};
/* repeatability shapes (no fp64 reference: larger, many blocks per launch) */
static const gpu_case repeat_cases[] = {
    {2, 1000, 4, 128, 128, 1, 1, -0.2, "repeat", 0},
    {3, 333, 3, 64, 64, 0, 1, -0.2, "repeat", 0},
    {1, 515, 2, 256, 256, 1, 1, -0.2, "repeat", 0},
    {2, 256, 2, 64, 128, 1, 0, -5.0, "repeat", 0},
    {2, 300, 4, 128, 128, 1, 1, -0.2, "repeat", 2},
    {1, 515, 2, 256, 256, 1, 1, -0.2, "repeat", 1},
};

/* q/k heads of a case */
static int case_qk_heads(const gpu_case *c) { return c->qk_heads ? c->qk_heads : c->H; }

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

/* x [N, Hq, D] -> [N, Hq*group, D] with head h a copy of head h / group (elements of es bytes). */
static void *expand_heads(const void *x, size_t N, int Hq, int group, int D, size_t es) {
    const size_t row = (size_t)D * es;
    unsigned char *y = malloc(N * Hq * group * row);
    if (!y) { fprintf(stderr, "out of memory\n"); exit(1); }
    for (size_t r = 0; r < N * Hq; r++)
        for (int j = 0; j < group; j++)
            memcpy(y + (r * group + j) * row, (const unsigned char *)x + r * row, row);
    return y;
}

/* x [N, Hq*group, D] -> [N, Hq, D]: the sum over the heads of each group. */
static double *sum_groups_d(const double *x, size_t N, int Hq, int group, int D) {
    double *y = alloc_d(N * Hq * D);
    for (size_t r = 0; r < N * Hq; r++)
        for (int j = 0; j < group; j++)
            for (int i = 0; i < D; i++) y[r * D + i] += x[(r * group + j) * D + i];
    return y;
}

/* The same in float, added in head order from the first head of the group: the order and the
 * precision of the GPU group sum. */
static float *sum_groups_f(const float *x, size_t N, int Hq, int group, int D) {
    float *y = malloc(N * Hq * D * sizeof(float));
    if (!y) { fprintf(stderr, "out of memory\n"); exit(1); }
    for (size_t r = 0; r < N * Hq; r++)
        for (int i = 0; i < D; i++) {
            float acc = x[r * group * D + i];
            for (int j = 1; j < group; j++) acc += x[(r * group + j) * D + i];
            y[r * D + i] = acc;
        }
    return y;
}

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

/* Random inputs of a case: fp64 (for the reference) and their float copies (for the GPU; q, k,
 * v, d_o rounded to bf16 when bf, the fp64 copies then holding the rounded values). h0 / dht
 * NULL when the case has none. */
typedef struct {
    double *q, *k, *v, *g, *beta, *d_o, *h0, *dht;
    float *qf, *kf, *vf, *gf, *bef, *dof, *h0f, *dhtf;
} case_inputs;

static case_inputs make_inputs(const gpu_case *c, int bf, unsigned long long seed) {
    const size_t ntok = (size_t)c->B * c->T * c->H, nv = ntok * c->V;
    const size_t nqtok = (size_t)c->B * c->T * case_qk_heads(c), nqk = nqtok * c->K; /* q, k rows */
    const size_t nst = (size_t)c->B * c->H * c->K * c->V;
    case_inputs in;
    in.q = alloc_d(nqk);
    in.k = alloc_d(nqk);
    in.v = alloc_d(nv);
    in.g = alloc_d(ntok);
    in.beta = alloc_d(ntok);
    in.d_o = alloc_d(nv);
    in.h0 = c->with_h0 ? alloc_d(nst) : NULL;
    in.dht = c->with_dht ? alloc_d(nst) : NULL;
    fd_fill_uniform(in.q, nqk, -1, 1, seed + 1);
    fd_fill_uniform(in.k, nqk, -1, 1, seed + 2);
    l2norm_rows(in.q, nqtok, c->K);
    l2norm_rows(in.k, nqtok, c->K);
    fd_fill_uniform(in.v, nv, -1, 1, seed + 3);
    fd_fill_uniform(in.g, ntok, c->gmin, 0, seed + 4);
    fd_fill_uniform(in.beta, ntok, 0.05, 0.95, seed + 5);
    fd_fill_uniform(in.d_o, nv, -1, 1, seed + 6);
    if (in.h0) fd_fill_uniform(in.h0, nst, -0.5, 0.5, seed + 7);
    if (in.dht) fd_fill_uniform(in.dht, nst, -0.5, 0.5, seed + 8);
    in.qf = as_f32(in.q, nqk, bf);
    in.kf = as_f32(in.k, nqk, bf);
    in.vf = as_f32(in.v, nv, bf);
    in.gf = as_f32(in.g, ntok, 0);
    in.bef = as_f32(in.beta, ntok, 0);
    in.dof = as_f32(in.d_o, nv, bf);
    in.h0f = as_f32(in.h0, nst, 0);
    in.dhtf = as_f32(in.dht, nst, 0);
    return in;
}

static void free_inputs(case_inputs *in) {
    free(in->q); free(in->k); free(in->v); free(in->g); free(in->beta); free(in->d_o); free(in->h0); free(in->dht);
    free(in->qf); free(in->kf); free(in->vf); free(in->gf); free(in->bef); free(in->dof); free(in->h0f); free(in->dhtf);
}

/* Forward then gdn_cuda_delta_bwd_saved through the device-pointer launchers on a stream (g and
 * beta uploaded as given, NULL or not). */
static void gpu_device_path(const gdn_delta_shape *s, gdn_cuda_precision p, const float *q,
                            const float *k, const float *v, const float *g, const float *beta,
                            float scale, const float *h0, const float *d_o, const float *dht,
                            float *o, float *ht, float *dq, float *dk, float *dv, float *dg,
                            float *db, float *dh0, const int *doc) {
    const int bf = p == GDN_CUDA_BF16;
    const size_t es = bf ? 2 : 4;
    const size_t ntok = (size_t)s->B * s->T * s->H, nst = (size_t)s->B * s->H * s->K * s->V;
    const int Hq = s->qk_heads ? s->qk_heads : s->H;
    const size_t nqk = (size_t)s->B * s->T * Hq * s->K, nv = ntok * s->V; /* q, k, dq, dk */
    void *q_d = dev_upload(q, nqk, bf), *k_d = dev_upload(k, nqk, bf), *v_d = dev_upload(v, nv, bf);
    void *g_d = dev_upload(g, ntok, 0), *b_d = dev_upload(beta, ntok, 0), *h0_d = dev_upload(h0, nst, 0);
    void *do_d = dev_upload(d_o, nv, bf), *dht_d = dev_upload(dht, nst, 0);
    void *o_d = dev_poisoned(nv, es), *ht_d = dev_poisoned(nst, 4);
    void *dq_d = dev_poisoned(nqk, es), *dk_d = dev_poisoned(nqk, es), *dv_d = dev_poisoned(nv, es);
    void *dg_d = dev_poisoned(ntok, 4), *db_d = dev_poisoned(ntok, 4), *dh0_d = dev_poisoned(nst, 4);
    void *ws = NULL, *doc_d = NULL;
    CK(cudaMalloc(&ws, gdn_cuda_delta_workspace_bytes(s, p)));
    if (doc) {
        CK(cudaMalloc(&doc_d, (size_t)s->B * s->T * sizeof(int)));
        CK(cudaMemcpy(doc_d, doc, (size_t)s->B * s->T * sizeof(int), cudaMemcpyHostToDevice));
    }
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    const gdn_cuda_delta_in in = {.shape = *s, .prec = p, .q = q_d, .k = k_d, .v = v_d, .g = g_d,
                                  .beta = b_d, .scale = scale, .h0 = h0_d, .workspace = ws,
                                  .stream = st, .doc = doc_d};
    gdn_cuda_delta_fwd(&(gdn_cuda_delta_fwd_args){.in = in, .o = o_d, .ht = ht_d});
    gdn_cuda_delta_bwd_saved(&(gdn_cuda_delta_bwd_args){.in = in, .d_o = do_d, .dht = dht_d,
                                                        .dq = dq_d, .dk = dk_d, .dv = dv_d,
                                                        .dg = dg_d, .dbeta = db_d, .dh0 = dh0_d});
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
    void *all[] = {q_d, k_d, v_d, g_d, b_d, h0_d, do_d, dht_d, o_d, ht_d, dq_d, dk_d, dv_d, dg_d, db_d, dh0_d, ws, doc_d};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i]) CK(cudaFree(all[i]));
}

/* Forward then backward (recomputing) through the host-array wrappers. */
static void gpu_host_path(const gdn_delta_shape *s, gdn_cuda_precision p, const float *q,
                          const float *k, const float *v, const float *g, const float *beta,
                          float scale, const float *h0, const float *d_o, const float *dht,
                          float *o, float *ht, float *dq, float *dk, float *dv, float *dg,
                          float *db, float *dh0, const int *doc) {
    const gdn_cuda_delta_in in = {.shape = *s, .prec = p, .q = q, .k = k, .v = v, .g = g,
                                  .beta = beta, .scale = scale, .h0 = h0, .doc = doc};
    gdn_cuda_delta_fwd_host(&(gdn_cuda_delta_fwd_args){.in = in, .o = o, .ht = ht});
    gdn_cuda_delta_bwd_host(&(gdn_cuda_delta_bwd_args){.in = in, .d_o = d_o, .dht = dht, .dq = dq,
                                                       .dk = dk, .dv = dv, .dg = dg, .dbeta = db,
                                                       .dh0 = dh0});
}

/* g and beta as the host path passes them: NULL where the variant ignores them. */
static const float *gate_or_null(const float *x, int variant, int is_beta) {
    const gdn_mixer_info *mx = gdn_mixer_get(variant);
    return (is_beta ? mx->has_beta : mx->has_decay) ? x : NULL;
}

/* The start of a case's log line. */
static void print_case(const gpu_case *c, int variant, int bf, int device_path, const char *what) {
    printf("%c %-4s%s B%d T%-4d H%d qk%d K%-3d V%-3d h0=%d dht=%d %-34s", gdn_mixer_get(variant)->kind,
           bf ? "bf16" : "fp32", device_path ? "*" : " ", c->B, c->T, c->H, case_qk_heads(c), c->K,
           c->V, c->with_h0, c->with_dht, what);
}

/* Runs one case of one variant in one precision (device_path: device launchers with the
 * saved-intermediates backward, every input present, instead of the host wrappers with NULL for
 * the ignored inputs); returns the number of failed comparisons. */
static int run_case_doc(const gpu_case *c, int variant, gdn_cuda_precision p, unsigned long long seed,
                        int device_path, const int *doc) {
    const int bf = p == GDN_CUDA_BF16;
    const double tol = bf ? 1e-2 : 1e-4;
    gdn_delta_shape s = {c->B, c->T, c->H, c->K, c->V, 64, c->qk_heads, variant, NULL};
    gdn_delta_shape sx = s; /* the CPU op: q, k expanded to one head per value head */
    sx.qk_heads = c->H;     /* (the CPU accepts qk_heads == H) */
    sx.doc = doc;           /* documents: the CPU reads them from the shape, the GPU from in.doc */
    const int Hq = case_qk_heads(c), grp = c->H / Hq;
    const size_t nbt = (size_t)c->B * c->T, ntok = nbt * c->H, nv = ntok * c->V;
    const size_t nqk = nbt * Hq * c->K, nqkx = ntok * c->K; /* q/k as given, expanded */
    const size_t nst = (size_t)c->B * c->H * c->K * c->V;
    const double scale = 1.0 / sqrt((double)c->K);

    case_inputs in = make_inputs(c, bf, seed);
    const double *v = in.v, *g = in.g, *beta = in.beta, *d_o = in.d_o;
    const double *h0 = in.h0, *dht = in.dht;
    const float *qf = in.qf, *kf = in.kf, *vf = in.vf, *gf = in.gf, *bef = in.bef, *dof = in.dof;
    const float *h0f = in.h0f, *dhtf = in.dhtf;

    /* reference: the H-head op on the expanded q, k; dq, dk summed over each group */
    double *qx = expand_heads(in.q, nbt, Hq, grp, c->K, sizeof(double));
    double *kx = expand_heads(in.k, nbt, Hq, grp, c->K, sizeof(double));
    double *o = alloc_d(nv), *ht = alloc_d(nst);
    double *dqx = alloc_d(nqkx), *dkx = alloc_d(nqkx), *dv = alloc_d(nv), *dg = alloc_d(ntok);
    double *db = alloc_d(ntok), *dh0 = alloc_d(nst);
    gdn_delta_fwd_f64(&sx, qx, kx, v, g, beta, scale, h0, o, ht);
    gdn_delta_bwd_f64(&sx, qx, kx, v, g, beta, scale, h0, d_o, dht, dqx, dkx, dv, dg, db, dh0);
    double *dq = sum_groups_d(dqx, nbt, Hq, grp, c->K), *dk = sum_groups_d(dkx, nbt, Hq, grp, c->K);

    /* GPU */
    float *o_g = nan_f32(nv), *ht_g = nan_f32(nst);
    float *dq_g = nan_f32(nqk), *dk_g = nan_f32(nqk), *dv_g = nan_f32(nv), *dg_g = nan_f32(ntok);
    float *db_g = nan_f32(ntok), *dh0_g = nan_f32(nst);
    if (device_path)
        gpu_device_path(&s, p, qf, kf, vf, gf, bef, (float)scale, h0f, dof, dhtf, o_g, ht_g, dq_g,
                        dk_g, dv_g, dg_g, db_g, dh0_g, doc);
    else
        gpu_host_path(&s, p, qf, kf, vf, gate_or_null(gf, variant, 0), gate_or_null(bef, variant, 1),
                      (float)scale, h0f, dof, dhtf, o_g, ht_g, dq_g, dk_g, dv_g, dg_g, db_g, dh0_g, doc);

    struct { const char *name; const float *x; const double *ref; size_t n; } cmp[] = {
        {"o", o_g, o, nv},     {"ht", ht_g, ht, nst},   {"dq", dq_g, dq, nqk},
        {"dk", dk_g, dk, nqk}, {"dv", dv_g, dv, nv},    {"dg", dg_g, dg, ntok},
        {"dbeta", db_g, db, ntok}, {"dh0", dh0_g, dh0, nst},
    };
    int fails = 0;
    double worst = 0;
    print_case(c, variant, bf, device_path, c->what);
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

    free_inputs(&in);
    free(qx); free(kx); free(dqx); free(dkx);
    free(o); free(ht); free(dq); free(dk); free(dv); free(dg); free(db); free(dh0);
    free(o_g); free(ht_g); free(dq_g); free(dk_g); free(dv_g); free(dg_g); free(db_g); free(dh0_g);
    return fails;
}

static int run_case(const gpu_case *c, int variant, gdn_cuda_precision p, unsigned long long seed,
                    int device_path) {
    return run_case_doc(c, variant, p, seed, device_path, NULL);
}

/* Prints " name =" when x and y [n] hold the same bits and no NaN, else what differs; returns 0
 * or 1. */
static int bits_differ(const char *name, const float *x, const float *y, size_t n) {
    size_t nd = 0, nnan = 0;
    double dmax = 0;
    for (size_t j = 0; j < n; j++) {
        if (x[j] != x[j]) nnan++;
        if (memcmp(&x[j], &y[j], sizeof(float))) {
            nd++;
            const double d = fabs((double)x[j] - y[j]);
            if (!(d <= dmax)) dmax = d;
        }
    }
    if (nd) printf(" %s DIFF(%zu of %zu, max %.1e)", name, nd, n, dmax);
    else if (nnan) printf(" %s NaN(%zu of %zu)", name, nnan, n);
    else printf(" %s =", name);
    return nd || nnan;
}

/* Runs the forward and the backward of one case twice on the same inputs, through the host
 * wrappers (backward recomputing the intermediates) or the device launchers (saved backward);
 * every output must be bitwise identical. Returns the number of outputs that differ. */
static int repeat_case(const gpu_case *c, int variant, gdn_cuda_precision p, unsigned long long seed,
                       int device_path) {
    const int bf = p == GDN_CUDA_BF16;
    gdn_delta_shape s = {c->B, c->T, c->H, c->K, c->V, 64, c->qk_heads, variant, NULL};
    const size_t ntok = (size_t)c->B * c->T * c->H, nv = ntok * c->V;
    const size_t nqk = (size_t)c->B * c->T * case_qk_heads(c) * c->K;
    const size_t nst = (size_t)c->B * c->H * c->K * c->V;
    const float scale = (float)(1.0 / sqrt((double)c->K));

    case_inputs in = make_inputs(c, bf, seed);
    const float *qf = in.qf, *kf = in.kf, *vf = in.vf, *gf = in.gf, *bef = in.bef, *dof = in.dof;
    const float *h0f = in.h0f, *dhtf = in.dhtf;

    /* outputs of run r: o, ht, dq, dk, dv, dg, dbeta, dh0 */
    const size_t n[8] = {nv, nst, nqk, nqk, nv, ntok, ntok, nst};
    const char *name[8] = {"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0"};
    float *out[2][8];
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < 8; i++) out[r][i] = nan_f32(n[i]);
        float **x = out[r];
        if (device_path)
            gpu_device_path(&s, p, qf, kf, vf, gf, bef, scale, h0f, dof, dhtf, x[0], x[1], x[2], x[3],
                            x[4], x[5], x[6], x[7], NULL);
        else
            gpu_host_path(&s, p, qf, kf, vf, gate_or_null(gf, variant, 0), gate_or_null(bef, variant, 1),
                          scale, h0f, dof, dhtf, x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], NULL);
    }
    print_case(c, variant, bf, device_path, "twice: bitwise equal?");
    int fails = 0;
    for (int i = 0; i < 8; i++) {
        fails += bits_differ(name[i], out[0][i], out[1][i], n[i]);
        free(out[0][i]);
        free(out[1][i]);
    }
    printf("  %s\n", fails ? "FAIL" : "ok");
    free_inputs(&in);
    return fails;
}

/* Grouped value heads against the ungrouped op on q, k expanded to H heads on the host, both on
 * the GPU through the host wrappers. Every kernel reads the same values in both runs, so o, ht,
 * dv, dg, dbeta, dh0 must be the same bits; dq and dk must be the fp32 sum, in head order, of
 * the expanded run's per-head dq, dk, which is exactly comparable where those are the fp32
 * parts (fp32 mode) or where a group has one head. Returns the number of outputs that differ. */
static int equiv_case(const gpu_case *c, int variant, gdn_cuda_precision p, unsigned long long seed) {
    const int bf = p == GDN_CUDA_BF16;
    gdn_delta_shape s = {c->B, c->T, c->H, c->K, c->V, 64, c->qk_heads, variant, NULL};
    gdn_delta_shape sx = s;
    sx.qk_heads = 0;
    const int Hq = case_qk_heads(c), grp = c->H / Hq;
    const size_t nbt = (size_t)c->B * c->T, ntok = nbt * c->H, nv = ntok * c->V;
    const size_t nqk = nbt * Hq * c->K, nqkx = ntok * c->K;
    const size_t nst = (size_t)c->B * c->H * c->K * c->V;
    const float scale = (float)(1.0 / sqrt((double)c->K));

    case_inputs in = make_inputs(c, bf, seed);
    float *qx = expand_heads(in.qf, nbt, Hq, grp, c->K, sizeof(float));
    float *kx = expand_heads(in.kf, nbt, Hq, grp, c->K, sizeof(float));
    /* outputs o, ht, dq, dk, dv, dg, dbeta, dh0 of the grouped run [0] and the expanded run [1] */
    const size_t n[2][8] = {{nv, nst, nqk, nqk, nv, ntok, ntok, nst},
                            {nv, nst, nqkx, nqkx, nv, ntok, ntok, nst}};
    const char *name[8] = {"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0"};
    float *out[2][8];
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < 8; i++) out[r][i] = nan_f32(n[r][i]);
        float **x = out[r];
        const gdn_delta_shape *sr = r ? &sx : &s;
        const float *q = r ? qx : in.qf, *k = r ? kx : in.kf;
        gpu_host_path(sr, p, q, k, in.vf, gate_or_null(in.gf, variant, 0),
                      gate_or_null(in.bef, variant, 1), scale, in.h0f, in.dof, in.dhtf, x[0], x[1],
                      x[2], x[3], x[4], x[5], x[6], x[7], NULL);
    }
    const int sums_exact = !bf || grp == 1;
    float *dq_sum = sum_groups_f(out[1][2], nbt, Hq, grp, c->K);
    float *dk_sum = sum_groups_f(out[1][3], nbt, Hq, grp, c->K);
    print_case(c, variant, bf, 0, "same bits as expanded q, k?");
    int fails = 0;
    for (int i = 0; i < 8; i++) {
        if ((i == 2 || i == 3) && !sums_exact) {
            printf(" %s -", name[i]); /* bf16 parts: covered by the fp64 comparison */
            continue;
        }
        const float *ref = i == 2 ? dq_sum : i == 3 ? dk_sum : out[1][i];
        fails += bits_differ(name[i], out[0][i], ref, n[0][i]);
    }
    printf("  %s\n", fails ? "FAIL" : "ok");
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 8; i++) free(out[r][i]);
    free(dq_sum);
    free(dk_sum);
    free(qx);
    free(kx);
    free_inputs(&in);
    return fails;
}


/* ---- documents (docs/design.md section 3.8) ----------------------------------------------------
 * Rows holding several documents: the CUDA op with gdn_cuda_delta_in.doc against the fp64 CPU op
 * with the same doc (shape.doc), every output and gradient, same limits as above; then packed
 * against one by one on the GPU itself. */
typedef struct {
    gpu_case c;
    const int *starts; /* starts of every row (ascending, -1 ends; 0 need not be one); NULL: random */
    int ndocs;         /* with starts NULL: random starts per row (row 0 gets 0 among them, the
                          others may not, so h0 enters their first rows) */
} doc_case;

static const int st_edges[] = {0, 64, 128, -1};                /* at chunk edges */
static const int st_inside[] = {0, 5, 37, 100, 101, 150, -1};  /* inside chunks */
static const int st_one[] = {1, -1};                           /* at 1, h0 enters row 0 only */
static const int st_len1[] = {0, 1, 2, 3, 63, 64, 70, 71, 199, -1}; /* documents of length 1 */
static const int st_late[] = {130, -1};                        /* one start inside chunk 2 */
static const int st_mixed[] = {63, 65, 127, 128, 129, -1};     /* around chunk edges */

static const doc_case doc_cases[] = {
    {{1, 200, 2, 64, 64, 1, 1, -0.2, "docs at chunk edges", 0}, st_edges, 0},
    {{2, 200, 2, 128, 128, 1, 1, -0.2, "docs inside chunks", 0}, st_inside, 0},
    {{1, 100, 2, 64, 128, 1, 1, -0.2, "doc start at 1 (h0 enters row 0)", 0}, st_one, 0},
    {{1, 200, 1, 128, 64, 1, 1, -0.2, "docs of length 1", 0}, st_len1, 0},
    {{1, 150, 2, 256, 256, 1, 1, -0.2, "one start inside a chunk", 0}, st_late, 0},
    {{2, 180, 2, 64, 64, 1, 1, -20.0, "around chunk edges, strong decay", 0}, st_mixed, 0},
    {{3, 333, 2, 64, 64, 1, 1, -0.2, "random docs", 0}, NULL, 9},
    {{2, 300, 4, 64, 64, 1, 1, -0.2, "random docs, GVA 2 per q/k head", 2}, NULL, 7},
    {{2, 4096, 4, 128, 128, 1, 1, -0.2, "64 docs per row, T=4096", 0}, NULL, 64},
};
static const doc_case doc_device_cases[] = {
    {{2, 200, 2, 128, 128, 1, 1, -0.2, "device path, docs inside chunks", 0}, st_inside, 0},
    {{2, 1000, 2, 64, 64, 1, 1, -0.2, "device path, random docs", 0}, NULL, 20},
};
static const doc_case doc_small_case = {{1, 140, 1, 64, 64, 1, 1, -0.2, "sanitizer case, docs", 0}, st_len1, 0};

/* doc [B,T] of a case (model/cpu/doc.h), from its starts or random ones. */
static int *make_doc(const doc_case *dc, unsigned long long seed) {
    const int B = dc->c.B, T = dc->c.T;
    unsigned char *st = calloc((size_t)B * T, 1);
    int *doc = malloc((size_t)B * T * sizeof(int));
    double *u = alloc_d((size_t)dc->ndocs + 1);
    if (!st || !doc) { fprintf(stderr, "out of memory\n"); exit(1); }
    for (int b = 0; b < B; b++) {
        unsigned char *row = st + (size_t)b * T;
        if (dc->starts) {
            for (const int *x = dc->starts; *x >= 0; x++)
                if (*x < T) row[*x] = 1;
            continue;
        }
        fd_fill_uniform(u, (size_t)dc->ndocs, 0, 1, seed + 31 * (unsigned long long)b);
        if (b == 0) row[0] = 1;
        for (int i = 0; i < dc->ndocs; i++) row[(int)(u[i] * T) % T] = 1;
    }
    gdn_doc_build(doc, st, NULL, B, T);
    free(st);
    free(u);
    return doc;
}

static int doc_run(const doc_case *dc, int variant, gdn_cuda_precision p, unsigned long long seed,
                   int device_path) {
    int *doc = make_doc(dc, seed);
    const int f = run_case_doc(&dc->c, variant, p, seed, device_path, doc);
    free(doc);
    return f;
}

/* tol 0: x and y must be equal as floats (+0 == -0; a NaN differs); else their relative L2
 * error ||x - y|| / ||y|| must stay under tol. Prints the outcome; returns 0 or 1. */
static int packed_cmp(const char *name, const float *x, const float *y, size_t n, double tol) {
    if (tol == 0) {
        size_t nd = 0;
        for (size_t i = 0; i < n; i++) nd += !(x[i] == y[i]);
        if (nd) printf(" %s DIFF(%zu of %zu)", name, nd, n);
        else printf(" %s =", name);
        return nd != 0;
    }
    double *yd = alloc_d(n);
    for (size_t i = 0; i < n; i++) yd[i] = y[i];
    const double e = fd_rel_err_f32(x, yd, n);
    free(yd);
    printf(" %s %.1e%s", name, e, e < tol ? "" : "(FAIL)");
    return !(e < tol);
}

/* One row (B = 1) of documents of the given lengths (0 ends) packed, against each document run
 * alone (h0 entering the first, dht leaving the last), both on the GPU through the host
 * wrappers. With every length but the last a multiple of 64 the documents fall on the same
 * chunks either way, every product sees the same operands (the masked terms are exact zeros in
 * the packed run, products with a zero state alone) and the results must be equal as floats
 * (tol 0); otherwise within tol. Returns the number of outputs that differ. */
static int packed_case(const int *lens, int H, int K, int V, int variant, gdn_cuda_precision p,
                       double tol, unsigned long long seed) {
    int T = 0, nd = 0;
    while (lens[nd]) T += lens[nd++];
    const gpu_case c = {1, T, H, K, V, 1, 1, -0.2, "packed", 0};
    const int bf = p == GDN_CUDA_BF16;
    const size_t ntok = (size_t)T * H, nv = ntok * V, nqk = ntok * K, nst = (size_t)H * K * V;
    const float scale = (float)(1.0 / sqrt((double)K));
    case_inputs in = make_inputs(&c, bf, seed);
    unsigned char *st = calloc((size_t)T, 1);
    int *doc = malloc((size_t)T * sizeof(int));
    if (!st || !doc) { fprintf(stderr, "out of memory\n"); exit(1); }
    /* the later documents start; the first continues h0 (a start at 0 would drop it) */
    for (int d = 0, t = 0; d < nd; t += lens[d++]) st[t] = d > 0;
    gdn_doc_build(doc, st, NULL, 1, T);
    const size_t n[8] = {nv, nst, nqk, nqk, nv, ntok, ntok, nst};
    const char *name[8] = {"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0"};
    float *pk[8], *one[8];
    for (int i = 0; i < 8; i++) {
        pk[i] = nan_f32(n[i]);
        one[i] = nan_f32(n[i]);
    }
    const gdn_delta_shape s = {1, T, H, K, V, 64, 0, variant, NULL};
    const float *gf = gate_or_null(in.gf, variant, 0), *bef = gate_or_null(in.bef, variant, 1);
    gpu_host_path(&s, p, in.qf, in.kf, in.vf, gf, bef, scale, in.h0f, in.dof, in.dhtf, pk[0], pk[1],
                  pk[2], pk[3], pk[4], pk[5], pk[6], pk[7], doc);
    float *ht1 = nan_f32(nst), *dh01 = nan_f32(nst);
    for (int d = 0, t0 = 0; d < nd; t0 += lens[d++]) {
        /* B = 1: the document's rows are one contiguous slice of every [1,T,H,D] tensor */
        const gdn_delta_shape sd = {1, lens[d], H, K, V, 64, 0, variant, NULL};
        const size_t r = (size_t)t0 * H;
        gpu_host_path(&sd, p, in.qf + r * K, in.kf + r * K, in.vf + r * V, gf ? gf + r : NULL,
                      bef ? bef + r : NULL, scale, d == 0 ? in.h0f : NULL, in.dof + r * V,
                      d == nd - 1 ? in.dhtf : NULL, one[0] + r * V, ht1, one[2] + r * K,
                      one[3] + r * K, one[4] + r * V, one[5] + r, one[6] + r, dh01, NULL);
        if (d == 0) memcpy(one[7], dh01, nst * sizeof(float));
        if (d == nd - 1) memcpy(one[1], ht1, nst * sizeof(float));
    }
    printf("%c %-4s  T%-4d H%d K%-3d V%-3d %2d docs packed vs one by one %-9s",
           gdn_mixer_get(variant)->kind, bf ? "bf16" : "fp32", T, H, K, V, nd,
           tol == 0 ? "(equal)" : "(within)");
    int fails = 0;
    for (int i = 0; i < 8; i++) fails += packed_cmp(name[i], pk[i], one[i], n[i], tol);
    printf("  %s\n", fails ? "FAIL" : "ok");
    for (int i = 0; i < 8; i++) {
        free(pk[i]);
        free(one[i]);
    }
    free(ht1); free(dh01); free(st); free(doc);
    free_inputs(&in);
    return fails;
}

static const int packed_aligned[] = {128, 64, 192, 64, 70, 0};
static const int packed_free[] = {5, 1, 60, 3, 64, 1, 100, 37, 0};

static int doc_tests(int variant, gdn_cuda_precision p) {
    int fails = 0;
    for (size_t i = 0; i < sizeof(doc_cases) / sizeof(doc_cases[0]); i++)
        fails += doc_run(&doc_cases[i], variant, p, 11000 + 100 * i, 0);
    for (size_t i = 0; i < sizeof(doc_device_cases) / sizeof(doc_device_cases[0]); i++)
        fails += doc_run(&doc_device_cases[i], variant, p, 12000 + 100 * i, 1);
    fails += packed_case(packed_aligned, 2, 128, 128, variant, p, 0, 13000);
    fails += packed_case(packed_aligned, 1, 64, 256, variant, p, 0, 13100);
    if (p == GDN_CUDA_FP32) fails += packed_case(packed_free, 2, 64, 64, variant, p, 1e-4, 13200);
    return fails;
}

/* ---- qk_heads validation (host only: runs before any CUDA call, in child processes) ---------- */
static void cuda_check_call(const gdn_delta_shape *s) { gdn_cuda_delta_check_shape(s); }

/* The launchers with g NULL, or beta NULL (dummy pointers elsewhere: the launcher must stop
 * before it uses them, naming the missing input, when the variant reads it). */
static void cuda_fwd_null_gate(const gdn_delta_shape *s, int null_beta) {
    static float dummy[16];
    gdn_cuda_delta_fwd(&(gdn_cuda_delta_fwd_args){
        .in = {.shape = *s, .prec = GDN_CUDA_FP32, .q = dummy, .k = dummy, .v = dummy,
               .g = null_beta ? dummy : NULL, .beta = null_beta ? NULL : dummy, .scale = 1.f,
               .workspace = dummy},
        .o = dummy});
}
static void cuda_fwd_null_g(const gdn_delta_shape *s) { cuda_fwd_null_gate(s, 0); }
static void cuda_fwd_null_beta(const gdn_delta_shape *s) { cuda_fwd_null_gate(s, 1); }

/* gdn_delta_fwd_f64 / gdn_delta_bwd_f64 on zero inputs of shape s with q, k of H heads (the
 * backward only where the shape must be rejected: its outputs share buffers) */
static void cpu_fwd_call(const gdn_delta_shape *s) {
    const size_t ntok = (size_t)s->B * s->T * s->H, nst = (size_t)s->B * s->H * s->K * s->V;
    double *qk = alloc_d(ntok * s->K + 1), *v = alloc_d(ntok * s->V + 1), *gb = alloc_d(ntok + 1);
    double *o = alloc_d(ntok * s->V + 1), *ht = alloc_d(nst);
    gdn_delta_fwd_f64(s, qk, qk, v, gb, gb, 1.0, NULL, o, ht);
    free(qk); free(v); free(gb); free(o); free(ht);
}
static void cpu_bwd_call(const gdn_delta_shape *s) {
    const size_t ntok = (size_t)s->B * s->T * s->H, nst = (size_t)s->B * s->H * s->K * s->V;
    double *qk = alloc_d(ntok * s->K + 1), *v = alloc_d(ntok * s->V + 1), *gb = alloc_d(ntok + 1);
    double *dqk = alloc_d(ntok * s->K + 1), *dv = alloc_d(ntok * s->V + 1);
    double *dgb = alloc_d(ntok + 1), *dh0 = alloc_d(nst);
    gdn_delta_bwd_f64(s, qk, qk, v, gb, gb, 1.0, NULL, v, NULL, dqk, dqk, dv, dgb, dgb, dh0);
    free(qk); free(v); free(gb); free(dqk); free(dv); free(dgb); free(dh0);
}

/* Runs fn(s) in a child process with its stderr captured. Expected outcome: with `want` NULL
 * the call returns (the shape is accepted), else the child exits with status 1 and a message
 * containing `want`. Prints the outcome; returns 0 as expected, 1 otherwise. */
static int child_outcome(const char *what, void (*fn)(const gdn_delta_shape *),
                         const gdn_delta_shape *s, const char *want) {
    int fd[2];
    if (pipe(fd) != 0) { perror("pipe"); exit(1); }
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) { perror("fork"); exit(1); }
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        fn(s);
        fflush(NULL);
        _exit(0);
    }
    close(fd[1]);
    char msg[2048];
    size_t len = 0;
    ssize_t r;
    while (len + 1 < sizeof msg && (r = read(fd[0], msg + len, sizeof msg - 1 - len)) > 0)
        len += (size_t)r;
    msg[len] = 0;
    close(fd[0]);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) { perror("waitpid"); exit(1); }
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    const int ok = want ? code == 1 && strstr(msg, want) != NULL : code == 0;
    char *nl = strchr(msg, '\n');
    if (nl) *nl = 0;
    printf("shape check: %-44s %s  (exit %d%s%s)\n", what, ok ? "ok" : "FAIL", code,
           len ? ": " : "", msg);
    return !ok;
}

static int shape_checks(void) {
    const gdn_delta_shape g = {1, 64, 4, 64, 64, 64, 2, GDN_MIXER_G, NULL}; /* 4 value heads, 2 q/k heads */
    gdn_delta_shape bad3 = g, neg = g, more = g, all = g, zero = g;
    bad3.qk_heads = 3;
    neg.qk_heads = -1;
    more.qk_heads = 8;
    all.qk_heads = 4;
    zero.qk_heads = 0;
    const gdn_delta_shape cpu = {1, 5, 2, 8, 8, 16, 1, GDN_MIXER_G, NULL}; /* 2 value heads, 1 q/k head */
    gdn_delta_shape cpu_h = cpu;
    cpu_h.qk_heads = 2;
    int f = 0;
    f += child_outcome("cuda: H=4 qk_heads=3 rejected", cuda_check_call, &bad3, "qk_heads=3");
    f += child_outcome("cuda: H=4 qk_heads=-1 rejected", cuda_check_call, &neg, "qk_heads=-1");
    f += child_outcome("cuda: H=4 qk_heads=8 rejected", cuda_check_call, &more, "qk_heads=8");
    f += child_outcome("cuda: H=4 qk_heads=2 accepted", cuda_check_call, &g, NULL);
    f += child_outcome("cuda: H=4 qk_heads=4 accepted", cuda_check_call, &all, NULL);
    f += child_outcome("cuda: H=4 qk_heads=0 accepted", cuda_check_call, &zero, NULL);
    f += child_outcome("cpu fwd: H=2 qk_heads=1 rejected", cpu_fwd_call, &cpu, "qk_heads=1");
    f += child_outcome("cpu bwd: H=2 qk_heads=1 rejected", cpu_bwd_call, &cpu, "qk_heads=1");
    f += child_outcome("cpu fwd: H=2 qk_heads=2 accepted", cpu_fwd_call, &cpu_h, NULL);
    /* the CUDA calls take documents in gdn_cuda_delta_in.doc, never through the shape */
    static const int doc0[64] = {0};
    gdn_delta_shape with_doc = zero;
    with_doc.doc = doc0;
    f += child_outcome("cuda: shape.doc set rejected", cuda_check_call, &with_doc, "gdn_cuda_delta_in.doc");
    /* mixer variants (model/mixer.h): every one accepted, anything else refused by number */
    gdn_delta_shape var = zero;
    for (int v = 0; v < GDN_MIXER_DELTA_COUNT; v++) {
        char what[64];
        var.variant = v;
        snprintf(what, sizeof what, "cuda: variant %d (%s) accepted", v, gdn_mixer_get(v)->name);
        f += child_outcome(what, cuda_check_call, &var, NULL);
    }
    var.variant = GDN_MIXER_A; /* softmax attention: a mixer, but not of the delta-rule family */
    f += child_outcome("cuda: variant A (attention) rejected", cuda_check_call, &var, "not of the delta-rule family");
    var.variant = GDN_MIXER_COUNT;
    f += child_outcome("cuda: variant past the table rejected", cuda_check_call, &var, "not of the delta-rule family");
    var.variant = -1;
    f += child_outcome("cuda: variant -1 rejected", cuda_check_call, &var, "mixer variant -1");
    /* a NULL input that the variant reads stops the launcher (G and M read g, G and D beta) */
    var.variant = GDN_MIXER_G;
    f += child_outcome("cuda fwd: gdn with g NULL rejected", cuda_fwd_null_g, &var, "log decay g");
    f += child_outcome("cuda fwd: gdn with beta NULL rejected", cuda_fwd_null_beta, &var, "beta");
    var.variant = GDN_MIXER_M;
    f += child_outcome("cuda fwd: gla with g NULL rejected", cuda_fwd_null_g, &var, "log decay g");
    var.variant = GDN_MIXER_D;
    f += child_outcome("cuda fwd: deltanet with beta NULL rejected", cuda_fwd_null_beta, &var, "beta");
    return f;
}

int main(int argc, char **argv) {
    const int small = argc > 1 && strcmp(argv[1], "--small") == 0;
    const int repeat_only = argc > 1 && strcmp(argv[1], "--repeat") == 0;
    const int docs_only = argc > 1 && strcmp(argv[1], "--docs") == 0;
    int fails = 0;
    if (!small && !repeat_only) fails += shape_checks(); /* before any CUDA call (fork) */
    if (gdn_cuda_device_count() == 0) {
        printf("SKIP: no CUDA device%s\n", fails ? " (but a shape check FAILED)" : "");
        return fails ? 1 : 77;
    }
    for (int v = 0; v < GDN_MIXER_DELTA_COUNT; v++)
        for (int pi = 0; pi < 2; pi++) {
            const gdn_cuda_precision p = pi ? GDN_CUDA_BF16 : GDN_CUDA_FP32;
            if (small) {
                /* under the sanitizers: every kernel instance of every variant once (host and
                 * device paths, grouped heads); the repeat runs only for G (they add no kernel) */
                fails += run_case(&small_case, v, p, 1000, 0);
                fails += run_case(&small_case, v, p, 1001, 1);
                fails += run_case(&small_gva_case, v, p, 1004, 0);
                fails += doc_run(&doc_small_case, v, p, 1006, 0);
                fails += doc_run(&doc_small_case, v, p, 1007, 1);
                if (v != GDN_MIXER_G) continue;
                fails += repeat_case(&small_case, v, p, 1002, 0);
                fails += repeat_case(&small_case, v, p, 1003, 1);
                fails += run_case(&small_gva_case, v, p, 1005, 1);
                continue;
            }
            if (!repeat_only) fails += doc_tests(v, p);
            if (docs_only) continue;
            for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]) && !repeat_only; i++)
                fails += run_case(&cases[i], v, p, 100 * (i + 1), 0);
            for (size_t i = 0; i < sizeof(gva_cases) / sizeof(gva_cases[0]) && !repeat_only; i++) {
                fails += run_case(&gva_cases[i], v, p, 7000 + 100 * i, 0);
                fails += equiv_case(&gva_cases[i], v, p, 7000 + 100 * i);
            }
            for (size_t i = 0; i < sizeof(device_cases) / sizeof(device_cases[0]) && !repeat_only; i++)
                fails += run_case(&device_cases[i], v, p, 5000 + 100 * i, 1);
            for (size_t i = 0; i < sizeof(repeat_cases) / sizeof(repeat_cases[0]); i++)
                for (int dev = 0; dev < 2; dev++)
                    fails += repeat_case(&repeat_cases[i], v, p, 9000 + 100 * i, dev);
        }
    printf("%s: %d failed comparisons\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
