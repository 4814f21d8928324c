/* The NCCL data plane (comm/comm_nccl.h) on N ranks with one GPU each, against values every
 * rank can compute: all-reduce (sum, average, max, min; f32, f64, i64; blocking and started +
 * waited), all-gather (in place and not), reduce-scatter (the four operations, in place and
 * not), broadcast, send/receive along a ring, and that the gradient ranges a backward pass
 * reports (gdn_cuda_model_backward_ready) cover the flat buffer once, from the end down; then
 * the ZeRO-1 step (train/zero.h) of a sharded model against the unsharded step of the same
 * model and gradients. Run: mpiexec -n 2 test_nccl_ops. Exits 77 (skip) with fewer GPUs than
 * ranks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "comm/comm.h"
#include "comm/comm_nccl.h"
#include "model/config.h"
#include "model/cuda/model_cuda.h"
#include "model/params.h"
#include "train/zero.h"
#include "tests/gpu/nccl_test_util.h"

static void *dev_copy(const void *h, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes) != cudaSuccess || cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        fprintf(stderr, "rank %d: cudaMalloc/cudaMemcpy of %zu bytes failed\n", rank, bytes);
        exit(1);
    }
    return d;
}

static void host_copy(void *h, const void *d, size_t bytes) {
    if (cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
        fprintf(stderr, "rank %d: cudaMemcpy back failed\n", rank);
        exit(1);
    }
}

/* Value i of rank r's buffer: distinct per rank and element, exact in fp32. */
static double val(int r, size_t i) { return (double)((int)(i % 97) - 40) * 0.25 + (double)r * 3.0; }

static void test_all_reduce(gdn_comm *g, size_t n, int started) {
    const int P = g->size;
    float *hf = malloc(n * sizeof *hf);
    double *hd = malloc(n * sizeof *hd);
    int64_t *hi = malloc(n * sizeof *hi);
    const gdn_redop ops[] = {GDN_SUM, GDN_AVG, GDN_MAX, GDN_MIN};
    const char *names[] = {"sum", "avg", "max", "min"};
    for (int o = 0; o < 4; o++) {
        for (size_t i = 0; i < n; i++) {
            hf[i] = (float)val(rank, i);
            hd[i] = val(rank, i) / 3.0;
            hi[i] = (int64_t)(i % 1000) * 1000000007LL + rank;
        }
        float *df = dev_copy(hf, n * sizeof *hf);
        double *dd = dev_copy(hd, n * sizeof *hd);
        int64_t *di = dev_copy(hi, n * sizeof *hi);
        if (started) {
            gdn_nccl_all_reduce_start(g, GDN_WORLD, df, n, GDN_F32, ops[o], "f32 test");
            gdn_nccl_all_reduce_start(g, GDN_DP, dd, n, GDN_F64, ops[o], "f64 test");
            gdn_nccl_wait(g, "started reductions");
        } else {
            gdn_all_reduce(g, GDN_WORLD, df, n, GDN_F32, ops[o], "f32 test");
            gdn_all_reduce(g, GDN_DP, dd, n, GDN_F64, ops[o], "f64 test");
        }
        if (ops[o] != GDN_AVG) gdn_all_reduce(g, GDN_WORLD, di, n, GDN_I64, ops[o], "i64 test");
        host_copy(hf, df, n * sizeof *hf);
        host_copy(hd, dd, n * sizeof *hd);
        host_copy(hi, di, n * sizeof *hi);
        int bad = 0;
        for (size_t i = 0; i < n && bad < 3; i++) {
            double s = 0, mx = -1e300, mn = 1e300;
            int64_t si = 0, mxi = INT64_MIN, mni = INT64_MAX;
            for (int r = 0; r < P; r++) {
                double v = val(r, i);
                s += v;
                mx = fmax(mx, v);
                mn = fmin(mn, v);
                int64_t w = (int64_t)(i % 1000) * 1000000007LL + r;
                si += w;
                mxi = w > mxi ? w : mxi;
                mni = w < mni ? w : mni;
            }
            double want = o == 0 ? s : o == 1 ? s / P : o == 2 ? mx : mn;
            int64_t want_i = o == 0 ? si : o == 2 ? mxi : mni;
            if (fabs(hf[i] - want) > 1e-5 * (1 + fabs(want)) || fabs(hd[i] - want / 3.0) > 1e-12 * (1 + fabs(want)) ||
                (o != 1 && hi[i] != want_i)) {
                CHECK(0, "all-reduce %s%s n=%zu element %zu: f32 %g f64 %.17g i64 %lld, want %g %.17g %lld", names[o],
                      started ? " (started)" : "", n, i, hf[i], hd[i], (long long)hi[i], want, want / 3.0,
                      (long long)want_i);
                bad++;
            }
        }
        cudaFree(df);
        cudaFree(dd);
        cudaFree(di);
    }
    free(hf);
    free(hd);
    free(hi);
}

static void test_gather_broadcast_ring(gdn_comm *g) {
    const int P = g->size;
    const size_t n = 1000;
    float *h = malloc(n * P * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = (float)val(rank, i);
    float *send = dev_copy(h, n * sizeof *h);
    float *recv = dev_copy(h, n * P * sizeof *h);
    gdn_all_gather(g, GDN_WORLD, send, recv, n, GDN_F32, "gather test");
    host_copy(h, recv, n * P * sizeof *h);
    for (int r = 0; r < P; r++)
        for (size_t i = 0; i < n; i++)
            if (h[r * n + i] != (float)val(r, i)) {
                CHECK(0, "all-gather: block %d element %zu is %g, want %g", r, i, h[r * n + i], val(r, i));
                r = P;
                break;
            }
    /* broadcast from the last rank */
    for (size_t i = 0; i < n; i++) h[i] = (float)val(rank, i);
    float *b = dev_copy(h, n * sizeof *h);
    gdn_broadcast(g, GDN_WORLD, b, n, GDN_F32, P - 1, "broadcast test");
    host_copy(h, b, n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        if (h[i] != (float)val(P - 1, i)) {
            CHECK(0, "broadcast: element %zu is %g, want %g", i, h[i], val(P - 1, i));
            break;
        }
    /* a pipeline along the ranks: rank r receives from r-1, then sends to r+1 */
    for (size_t i = 0; i < n; i++) h[i] = (float)val(rank, i);
    float *m = dev_copy(h, n * sizeof *h);
    if (rank > 0) gdn_recv(g, GDN_WORLD, rank - 1, m, n, GDN_F32, 1, "pipeline test");
    if (rank < P - 1) gdn_send(g, GDN_WORLD, rank + 1, m, n, GDN_F32, 1, "pipeline test");
    gdn_wait_sends(g);
    host_copy(h, m, n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        if (h[i] != (float)val(0, i)) {
            CHECK(0, "send/receive: element %zu on rank %d is %g, want rank 0's %g", i, rank, h[i], val(0, i));
            break;
        }
    cudaFree(send);
    cudaFree(recv);
    cudaFree(b);
    cudaFree(m);
    free(h);
}

/* Reduce-scatter and all-gather of blocks of n floats over the world, in place and not. */
static void test_reduce_scatter_gather(gdn_comm *g, size_t n) {
    const int P = g->size;
    const size_t total = n * (size_t)P;
    float *h = malloc(total * sizeof *h), *hb = malloc(n * sizeof *hb);
    const gdn_redop ops[] = {GDN_SUM, GDN_AVG, GDN_MAX, GDN_MIN};
    const char *names[] = {"sum", "avg", "max", "min"};
    for (int in_place = 0; in_place < 2; in_place++) {
        for (int o = 0; o < 4; o++) {
            for (size_t i = 0; i < total; i++) h[i] = (float)val(rank, i);
            float *d = dev_copy(h, total * sizeof *h), *out = dev_copy(h, n * sizeof *h);
            float *dst = in_place ? d + (size_t)rank * n : out;
            gdn_reduce_scatter(g, GDN_WORLD, d, dst, n, GDN_F32, ops[o], "reduce-scatter test");
            host_copy(hb, dst, n * sizeof *hb);
            for (size_t j = 0; j < n; j++) {
                const size_t i = (size_t)rank * n + j;
                double s = 0, mx = -1e300, mn = 1e300;
                for (int r = 0; r < P; r++) {
                    s += val(r, i);
                    mx = fmax(mx, val(r, i));
                    mn = fmin(mn, val(r, i));
                }
                const double want = o == 0 ? s : o == 1 ? s / P : o == 2 ? mx : mn;
                if (fabs(hb[j] - want) > 1e-6 * (1 + fabs(want))) {
                    CHECK(0, "reduce-scatter %s (%s, blocks of %zu) element %zu: %g, want %g", names[o],
                          in_place ? "in place" : "out of place", n, j, hb[j], want);
                    break;
                }
            }
            cudaFree(d);
            cudaFree(out);
        }
        /* all-gather */
        for (size_t i = 0; i < total; i++) h[i] = -1.0f;
        for (size_t j = 0; j < n; j++) h[(size_t)rank * n + j] = (float)val(rank, j);
        float *all = dev_copy(h, total * sizeof *h), *mine = dev_copy(h + (size_t)rank * n, n * sizeof *h);
        gdn_all_gather(g, GDN_WORLD, in_place ? all + (size_t)rank * n : mine, all, n, GDN_F32, "all-gather test");
        host_copy(h, all, total * sizeof *h);
        for (size_t i = 0; i < total; i++)
            if (h[i] != (float)val((int)(i / n), i % n)) {
                CHECK(0, "all-gather (%s, blocks of %zu): element %zu is %g, want %g", in_place ? "in place" : "out of place",
                      n, i, h[i], val((int)(i / n), i % n));
                break;
            }
        cudaFree(all);
        cudaFree(mine);
    }
    free(h);
    free(hb);
}

/* The ZeRO-1 step of a sharded model (z.padded buffers, moments of [lo, hi)) against the
 * unsharded one (gradient all-reduce, gdn_cuda_model_adamw_step) after the same backward pass of
 * this rank's tokens, two steps (the second clipping): parameters and moments equal to 1e-6 (the
 * norms are summed in other blocks), and the bf16 copy refreshed (the next forward's loss). */
static void test_zero_step(gdn_comm *g, gdn_comm *c) {
    gdn_config cfg = {.vocab_size = 256, .d_model = 64, .n_layers = 2, .n_heads = 2, .head_dim = 64,
                      .expand_v = 1, .d_ff = 128, .conv_width = 4, .chunk_size = 64,
                      .tie_embeddings = 0, .allow_neg_eigval = 0, .norm_eps = 1e-6};
    gdn_param_table t;
    gdn_param_table_build(&t, &cfg);
    const size_t n = t.total;
    gdn_zero z;
    gdn_zero_layout(&z, n, 1, g->rank, g->size);
    float *p = malloc(n * sizeof *p), *p1 = malloc(n * sizeof *p1), *p2 = malloc(n * sizeof *p2);
    float *m1 = malloc(n * sizeof *m1), *v1 = malloc(n * sizeof *v1);
    float *m2 = malloc((z.hi - z.lo + 1) * sizeof *m2), *v2 = malloc((z.hi - z.lo + 1) * sizeof *v2);
    gdn_params_init(p, &t, 1);
    const int B = 2, T = 64;
    int tok[2 * 64], tgt[2 * 64];
    for (int i = 0; i < B * T; i++) {
        tok[i] = (i * 7 + 13 * rank) % cfg.vocab_size;
        tgt[i] = (i * 5 + 3 + rank) % cfg.vocab_size;
    }
    gdn_cuda_model *a = gdn_cuda_model_create(&t, B, T, GDN_CUDA_BF16);
    /* the sharded model through the backend table, as the trainer makes it */
    const gdn_backend *be = gdn_backend_cuda();
    gdn_model_shape shape = {.B = B, .T = T, .precision = GDN_PRECISION_BF16, .lo = z.lo, .hi = z.hi,
                             .padded = z.padded};
    gdn_model *bm = be->create(&t, &shape);
    gdn_cuda_model_upload(a, p, NULL, NULL);
    be->upload(bm, p, NULL, NULL);
    gdn_adamw_hparams h = {1e-2, 0.9, 0.95, 1e-8, 0.1};
    double worst = 0, loss_a = 0, loss_b = 0;
    for (int k = 1; k <= 2; k++) {
        const float gs = 1.0f / (float)(B * T * g->size);
        gdn_cuda_model_zero_grads(a);
        loss_a = gdn_cuda_model_forward(a, tok, tgt, gs, NULL);
        gdn_cuda_model_backward(a);
        be->zero_grads(bm);
        loss_b = be->forward(bm, tok, tgt, gs, NULL, NULL);
        be->backward(bm, NULL, NULL);
        CHECK(fabs(loss_a - loss_b) <= 1e-5 * fabs(loss_a), "step %d: loss %.9g (sharded model) vs %.9g", k, loss_b,
              loss_a);
        const double clip = k == 2 ? 1e-3 : 0.0;
        gdn_nccl_set_stream(g, gdn_cuda_model_stream(a));
        gdn_all_reduce(g, GDN_WORLD, gdn_cuda_model_grads(a), n, GDN_F32, GDN_SUM, "gradients");
        const double na = gdn_cuda_model_adamw_step(a, &h, k, clip);
        gdn_nccl_set_stream(g, be->stream(bm));
        const double nb = gdn_zero_adamw_step(g, c, &z, bm, &h, k, clip);
        CHECK(fabs(na - nb) <= 1e-9 * na, "step %d: gradient norm %.17g (sharded) vs %.17g", k, nb, na);
        gdn_cuda_model_download(a, p1, m1, v1);
        be->download(bm, p2, m2, v2);
        double dp = 0, rp = 0, dm = 0, rm = 0;
        for (size_t i = 0; i < n; i++) {
            dp += ((double)p2[i] - p1[i]) * ((double)p2[i] - p1[i]);
            rp += (double)p1[i] * p1[i];
        }
        for (size_t i = z.lo; i < z.hi; i++) {
            dm += ((double)m2[i - z.lo] - m1[i]) * ((double)m2[i - z.lo] - m1[i]) +
                  ((double)v2[i - z.lo] - v1[i]) * ((double)v2[i - z.lo] - v1[i]);
            rm += (double)m1[i] * m1[i] + (double)v1[i] * v1[i];
        }
        const double e = fmax(sqrt(dp / rp), sqrt(dm / (rm > 0 ? rm : 1)));
        CHECK(e < 1e-6, "step %d: sharded step differs from the unsharded one: relative %.2e", k, e);
        worst = fmax(worst, e);
    }
    /* the next forward reads the bf16 copy: refreshed after the all-gather */
    const double la = gdn_cuda_model_forward(a, tok, tgt, 0.0f, NULL), lb = be->forward(bm, tok, tgt, 0.0f, NULL, NULL);
    CHECK(fabs(la - lb) <= 1e-6 * fabs(la), "forward after the steps: %.9g (sharded) vs %.9g", lb, la);
    if (rank == 0)
        printf("ZeRO-1 step on %d GPUs (%zu parameters, blocks of %zu): parameters and moments within %.1e of the "
               "unsharded step, loss after it %.9g vs %.9g\n", g->size, n, z.shard, worst, lb, la);
    gdn_nccl_set_stream(g, NULL);
    gdn_cuda_model_free(a);
    be->free(bm);
    gdn_param_table_free(&t);
    free(p);
    free(p1);
    free(p2);
    free(m1);
    free(v1);
    free(m2);
    free(v2);
}

typedef struct {
    size_t next_hi, calls, covered;
    int order_ok;
} ranges;

static void record(void *ctx, float *grads, size_t lo, size_t hi) {
    (void)grads;
    ranges *r = ctx;
    if (hi != r->next_hi || lo >= hi) r->order_ok = 0;
    r->next_hi = lo;
    r->covered += hi - lo;
    r->calls++;
}

/* The backward's completed ranges, on a tiny model (tied and untied head). */
static void test_ready_ranges(void) {
    for (int tied = 0; tied < 2; tied++) {
        gdn_config cfg = {.vocab_size = 256, .d_model = 64, .n_layers = 2, .n_heads = 2, .head_dim = 64,
                          .expand_v = 1, .d_ff = 128, .conv_width = 4, .chunk_size = 64,
                          .tie_embeddings = tied, .allow_neg_eigval = 0, .norm_eps = 1e-6};
        gdn_param_table t;
        gdn_param_table_build(&t, &cfg);
        float *p = malloc(t.total * sizeof *p);
        gdn_params_init(p, &t, 1);
        const int B = 2, T = 64;
        int tok[2 * 64], tgt[2 * 64];
        for (int i = 0; i < B * T; i++) tok[i] = tgt[i] = (i * 7) % cfg.vocab_size;
        gdn_cuda_model *m = gdn_cuda_model_create(&t, B, T, GDN_CUDA_BF16);
        gdn_cuda_model_upload(m, p, NULL, NULL);
        gdn_cuda_model_zero_grads(m);
        gdn_cuda_model_forward(m, tok, tgt, 1.0f / (B * T), NULL);
        ranges r = {t.total, 0, 0, 1};
        gdn_cuda_model_backward_ready(m, record, &r);
        CHECK(r.order_ok && r.next_hi == 0 && r.covered == t.total && r.calls == (size_t)cfg.n_layers + 2,
              "backward ranges (tied %d): %zu calls covering %zu of %zu, in order %d, ending at %zu", tied, r.calls,
              r.covered, t.total, r.order_ok, r.next_hi);
        gdn_cuda_model_free(m);
        gdn_param_table_free(&t);
        free(p);
    }
}

int main(int argc, char **argv) {
    char err[1024];
    gdn_comm *c = gdn_comm_init(&argc, &argv, 1, err, sizeof err);
    if (!c) {
        fprintf(stderr, "test_nccl_ops: %s\n", err);
        return 1;
    }
    rank = c->rank;
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess) n_dev = 0;
    if (gdn_comm_agree(c, n_dev < c->local_size && n_dev != 1) >= 0 || n_dev == 0) {
        if (rank == 0) printf("test_nccl_ops: skipped (%d GPUs for %d ranks on this node)\n", n_dev, c->local_size);
        gdn_comm_finalize(c);
        return 77;
    }
    gdn_comm *g = gdn_nccl_init(c, err, sizeof err);
    if (!g) {
        if (err[0]) fprintf(stderr, "test_nccl_ops: rank %d: %s\n", rank, err);
        gdn_comm_finalize(c);
        return 1;
    }
    gdn_nccl_set_stream(g, NULL);
    test_all_reduce(g, 1, 0);
    test_all_reduce(g, 12345, 0);
    test_all_reduce(g, 3000001, 1);
    if (g->size > 1) test_gather_broadcast_ring(g);
    test_reduce_scatter_gather(g, 1);
    test_reduce_scatter_gather(g, 4097);
    test_ready_ranges();
    if (g->size > 1) test_zero_step(g, c);
    int bad = gdn_comm_agree(c, failures != 0);
    if (rank == 0)
        printf("test_nccl_ops: %d ranks on GPUs, NCCL %s: %s\n", c->size, gdn_nccl_version(g),
               bad < 0 ? "all checks passed" : "FAILED");
    gdn_nccl_finalize(g);
    gdn_comm_finalize(c);
    return bad < 0 ? 0 : 1;
}
