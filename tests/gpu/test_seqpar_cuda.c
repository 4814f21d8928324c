/* The CUDA model's sequence-parallel hooks over NCCL (comm/seqpar_cuda.h) on N ranks with one GPU
 * each, with the model's calls imitated on a stream: every hook in the model's order, for
 * forward + backward passes and a forward-only pass, in bf16 and fp32. The buffers a hook sends
 * from are shared by all layers and overwritten right after each call, as a model may do; every
 * received halo, state and gradient must be the neighbour's exactly (zeros at the ends of the
 * group), and the bytes sent must match gdn_seqpar_cuda_bytes. Also: all-reduces over the
 * sequence- and data-parallel groups and in bf16 (the split communicators of comm_nccl.c when a
 * group is neither one rank nor the world, or with GDN_NCCL_SPLIT=1).
 * Run: mpiexec -n N test_seqpar_cuda [SP] (SP: ranks per sequence, default N). Exits 77 (skip)
 * with fewer GPUs than ranks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "comm/comm.h"
#include "comm/comm_nccl.h"
#include "comm/seqpar_cuda.h"
#include "model/config.h"
#include "tests/gpu/nccl_test_util.h"

static void cuda_ok(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, what, cudaGetErrorString(e));
        exit(1);
    }
}

static void *dev_alloc(size_t bytes) {
    void *d = NULL;
    cuda_ok(cudaMalloc(&d, bytes), "cudaMalloc");
    return d;
}

/* What a tensor holds: kind, pass, sender's sp rank, layer, array (q, k, v or 0) -> small integers,
 * exact in bf16, that differ between any two of them. */
enum { TAIL, STATE, DSTATE, DHALO };
static float pattern(int kind, int pass, int from, int layer, int arr, size_t i) {
    return (float)((int)((i * 7 + (size_t)arr * 11 + (size_t)layer * 17 + (size_t)from * 29 + (size_t)pass * 37 +
                          (size_t)kind * 43) % 251) - 125);
}

/* bf16 of a float that is exact in bf16: its upper 16 bits. */
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

static float from_act(const void *buf, size_t i, size_t es) {
    if (es == 4) return ((const float *)buf)[i];
    uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Host pattern buffers stay alive until the pass's stream synchronisation. */
static void *pending[4096];
static int n_pending;

/* dst [n] (act of es bytes, or float when es = 4) = pattern, enqueued on stream. */
static void fill(cudaStream_t st, void *dst, size_t n, size_t es, int kind, int pass, int from, int layer, int arr) {
    void *h = malloc(n * es);
    for (size_t i = 0; i < n; i++) {
        float f = pattern(kind, pass, from, layer, arr, i);
        if (es == 4) ((float *)h)[i] = f;
        else ((uint16_t *)h)[i] = to_bf16(f);
    }
    cuda_ok(cudaMemcpyAsync(dst, h, n * es, cudaMemcpyHostToDevice, st), "upload");
    if (n_pending == (int)(sizeof pending / sizeof pending[0])) {
        fprintf(stderr, "rank %d: too many pending uploads\n", rank);
        exit(1);
    }
    pending[n_pending++] = h;
}

/* Overwrites dst [bytes] with 0xff (NaN in bf16 and fp32): what a model does to its scratch. */
static void poison(cudaStream_t st, void *dst, size_t bytes) {
    cuda_ok(cudaMemsetAsync(dst, 0xff, bytes, st), "poison");
}

/* dev [n] holds the pattern (from >= 0) or zeros (from < 0). */
static void expect(const void *dev, size_t n, size_t es, int kind, int pass, int from, int layer, int arr,
                   const char *what) {
    void *h = malloc(n * es);
    cuda_ok(cudaMemcpy(h, dev, n * es, cudaMemcpyDeviceToHost), "download");
    for (size_t i = 0; i < n; i++) {
        const float got = from_act(h, i, es), want = from >= 0 ? pattern(kind, pass, from, layer, arr, i) : 0.0f;
        if (!(got == want)) {
            CHECK(0, "%s (%s, pass %d, layer %d, array %d) element %zu is %g, want %g%s", what,
                  es == 2 ? "bf16" : "fp32", pass, layer, arr, i, got, want,
                  from >= 0 ? "" : " (zeros at the end of the group)");
            break;
        }
    }
    free(h);
}

typedef struct {
    void *halo[3], *dtail[3]; /* received, per layer */
    float *S_in, *dS_out;
    float *S_seen, *dS_seen;  /* S_in, dS_out as a kernel ordered after the hook's event reads them */
} layer_bufs;

/* What the model does with a state hook's result: the work that reads buf waits for the event
 * (when the hook returned one); here that work copies buf to seen on the model's stream. */
static void read_after(cudaStream_t st, void *ready, float *seen, const float *buf, size_t n) {
    if (ready) cuda_ok(cudaStreamWaitEvent(st, (cudaEvent_t)ready, 0), "wait for a received state");
    cuda_ok(cudaMemcpyAsync(seen, buf, n * sizeof(float), cudaMemcpyDeviceToDevice, st), "read a received state");
}

/* Forward (+ backward unless fwd_only) passes through the hooks, checked after each pass. */
static void test_hooks(gdn_comm *g, cudaStream_t st, gdn_cuda_precision prec) {
    const gdn_config cfg = {.vocab_size = 256, .d_model = 64, .n_layers = 3, .n_heads = 2, .head_dim = 8,
                            .expand_v = 2, .d_ff = 128, .conv_width = 4, .chunk_size = 64, .norm_eps = 1e-6};
    const int B = 2, L = cfg.n_layers, H = cfg.n_heads, K = cfg.head_dim, V = gdn_config_head_v(&cfg);
    const int Wm1 = cfg.conv_width - 1, sp_rank = g->sp_rank, sp = g->sp;
    const size_t es = prec == GDN_CUDA_BF16 ? 2 : 4;
    const size_t n_halo[3] = {(size_t)B * Wm1 * H * K, (size_t)B * Wm1 * H * K, (size_t)B * Wm1 * H * V};
    const size_t n_state = (size_t)B * H * K * V;
    const int prev = sp_rank > 0 ? sp_rank - 1 : -1, next = sp_rank + 1 < sp ? sp_rank + 1 : -1;

    gdn_seqpar_cuda *s = gdn_seqpar_cuda_create(g, &cfg, B, 16, prec, st);
    const gdn_seq_hooks h = gdn_seqpar_cuda_hooks(s);
    layer_bufs *lb = calloc((size_t)L, sizeof *lb);
    for (int l = 0; l < L; l++) {
        for (int i = 0; i < 3; i++) {
            lb[l].halo[i] = dev_alloc(n_halo[i] * es);
            lb[l].dtail[i] = dev_alloc(n_halo[i] * es);
        }
        lb[l].S_in = dev_alloc(n_state * 4);
        lb[l].dS_out = dev_alloc(n_state * 4);
        lb[l].S_seen = dev_alloc(n_state * 4);
        lb[l].dS_seen = dev_alloc(n_state * 4);
    }
    /* the model's scratch: one set for all layers, overwritten after every hook */
    void *tail[3], *dhalo[3];
    for (int i = 0; i < 3; i++) {
        tail[i] = dev_alloc(n_halo[i] * es);
        dhalo[i] = dev_alloc(n_halo[i] * es);
    }
    float *S_out = dev_alloc(n_state * 4), *dS_in = dev_alloc(n_state * 4);
    const uint64_t one_way = (uint64_t)L * ((n_halo[0] + n_halo[1] + n_halo[2]) * es + n_state * 4);

    const int passes = 3; /* forward + backward, forward + backward, forward only */
    for (int pass = 0; pass < passes; pass++) {
        const int fwd_only = pass == passes - 1;
        const uint64_t sent0 = g->bytes.send;
        for (int l = 0; l < L; l++) {
            for (int i = 0; i < 3; i++) {
                poison(st, lb[l].halo[i], n_halo[i] * es);
                poison(st, lb[l].dtail[i], n_halo[i] * es);
            }
            poison(st, lb[l].S_in, n_state * 4);
            poison(st, lb[l].dS_out, n_state * 4);
            poison(st, lb[l].S_seen, n_state * 4);
            poison(st, lb[l].dS_seen, n_state * 4);
        }
        for (int l = 0; l < L; l++) {
            for (int i = 0; i < 3; i++) fill(st, tail[i], n_halo[i], es, TAIL, pass, sp_rank, l, i);
            h.fwd_halo(h.user, l, lb[l].halo, (const void *const *)tail, n_halo);
            for (int i = 0; i < 3; i++) poison(st, tail[i], n_halo[i] * es);
            read_after(st, h.fwd_state_in(h.user, l, NULL, lb[l].S_in, n_state), lb[l].S_seen, lb[l].S_in, n_state);
            fill(st, S_out, n_state, 4, STATE, pass, sp_rank, l, 0);
            h.fwd_state_out(h.user, l, S_out, n_state);
            poison(st, S_out, n_state * 4);
        }
        for (int l = L - 1; l >= 0 && !fwd_only; l--) {
            read_after(st, h.bwd_state_out(h.user, l, NULL, lb[l].dS_out, n_state), lb[l].dS_seen, lb[l].dS_out,
                       n_state);
            fill(st, dS_in, n_state, 4, DSTATE, pass, sp_rank, l, 0);
            h.bwd_state_in(h.user, l, dS_in, n_state);
            poison(st, dS_in, n_state * 4);
            for (int i = 0; i < 3; i++) fill(st, dhalo[i], n_halo[i], es, DHALO, pass, sp_rank, l, i);
            h.bwd_halo(h.user, l, lb[l].dtail, (const void *const *)dhalo, n_halo);
            for (int i = 0; i < 3; i++) poison(st, dhalo[i], n_halo[i] * es);
        }
        cuda_ok(cudaStreamSynchronize(st), "end of pass");
        gdn_nccl_sync(g, "the test's transfers");
        while (n_pending) free(pending[--n_pending]);
        for (int l = 0; l < L; l++) {
            for (int i = 0; i < 3; i++) expect(lb[l].halo[i], n_halo[i], es, TAIL, pass, prev, l, i, "halo");
            expect(lb[l].S_in, n_state, 4, STATE, pass, prev, l, 0, "entering state");
            expect(lb[l].S_seen, n_state, 4, STATE, pass, prev, l, 0, "entering state read after its event");
            if (fwd_only) continue;
            expect(lb[l].dS_out, n_state, 4, DSTATE, pass, next, l, 0, "leaving state's gradient");
            expect(lb[l].dS_seen, n_state, 4, DSTATE, pass, next, l, 0, "leaving state's gradient read after its event");
            for (int i = 0; i < 3; i++) expect(lb[l].dtail[i], n_halo[i], es, DHALO, pass, next, l, i, "tail gradient");
        }
        const uint64_t want = (next >= 0 ? one_way : 0) + (prev >= 0 && !fwd_only ? one_way : 0);
        CHECK(g->bytes.send - sent0 == want, "pass %d (%s): sent %llu bytes, want %llu", pass,
              es == 2 ? "bf16" : "fp32", (unsigned long long)(g->bytes.send - sent0), (unsigned long long)want);
        /* the estimate is the most any rank of the group sends */
        CHECK(gdn_seqpar_cuda_bytes(&cfg, B, sp, es, !fwd_only) >= want, "gdn_seqpar_cuda_bytes below what was sent");
        if (sp_rank == (sp > 2 ? 1 : 0))
            CHECK(gdn_seqpar_cuda_bytes(&cfg, B, sp, es, !fwd_only) == want,
                  "gdn_seqpar_cuda_bytes %llu, rank %d sent %llu",
                  (unsigned long long)gdn_seqpar_cuda_bytes(&cfg, B, sp, es, !fwd_only), sp_rank,
                  (unsigned long long)want);
    }
    gdn_seqpar_cuda_free(s);
    for (int l = 0; l < L; l++) {
        for (int i = 0; i < 3; i++) {
            cudaFree(lb[l].halo[i]);
            cudaFree(lb[l].dtail[i]);
        }
        cudaFree(lb[l].S_in);
        cudaFree(lb[l].dS_out);
        cudaFree(lb[l].S_seen);
        cudaFree(lb[l].dS_seen);
    }
    for (int i = 0; i < 3; i++) {
        cudaFree(tail[i]);
        cudaFree(dhalo[i]);
    }
    cudaFree(S_out);
    cudaFree(dS_in);
    free(lb);
}

/* Sums over the groups: f32 over GDN_SP and GDN_DP, bf16 over the world. */
static void test_group_sums(gdn_comm *g) {
    const size_t n = 4099;
    float *h = malloc(n * sizeof *h);
    uint16_t *hb = malloc(n * sizeof *hb);
    const gdn_group groups[2] = {GDN_SP, GDN_DP};
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < n; i++) h[i] = (float)((int)(i % 13) + 100 * g->rank);
        float *d = dev_alloc(n * sizeof *d);
        cuda_ok(cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice), "upload");
        gdn_all_reduce(g, groups[k], d, n, GDN_F32, GDN_SUM, "group sum test");
        cuda_ok(cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost), "download");
        const int size = gdn_comm_group_size(g, groups[k]);
        double ranks = 0; /* the world ranks of this group's members */
        for (int r = 0; r < size; r++)
            ranks += groups[k] == GDN_SP ? g->dp_rank * g->sp + r : r * g->sp + g->sp_rank;
        for (size_t i = 0; i < n; i++) {
            const double want = (double)size * (double)(i % 13) + 100.0 * ranks;
            if (h[i] != (float)want) {
                CHECK(0, "sum over the %s group: element %zu is %g, want %g", k ? "data-parallel" : "sequence-parallel",
                      i, h[i], want);
                break;
            }
        }
        cudaFree(d);
    }
    /* bf16: small integers stay exact */
    for (size_t i = 0; i < n; i++) hb[i] = to_bf16((float)((int)(i % 5) + g->rank));
    uint16_t *db = dev_alloc(n * sizeof *db);
    cuda_ok(cudaMemcpy(db, hb, n * sizeof *hb, cudaMemcpyHostToDevice), "upload");
    gdn_all_reduce(g, GDN_WORLD, db, n, GDN_BF16, GDN_SUM, "bf16 sum test");
    cuda_ok(cudaMemcpy(hb, db, n * sizeof *hb, cudaMemcpyDeviceToHost), "download");
    const int P = g->size;
    for (size_t i = 0; i < n; i++) {
        const float want = (float)(P * (int)(i % 5) + P * (P - 1) / 2), got = from_act(hb, i, 2);
        if (got != want) {
            CHECK(0, "bf16 sum over the world: element %zu is %g, want %g", i, got, want);
            break;
        }
    }
    cudaFree(db);
    free(h);
    free(hb);
}

int main(int argc, char **argv) {
    char err[1024];
    int sp = 0;
    for (int i = 1; i < argc; i++) sp = atoi(argv[i]);
    gdn_comm *world = gdn_comm_init(&argc, &argv, 1, err, sizeof err);
    if (!world) {
        fprintf(stderr, "test_seqpar_cuda: %s\n", err);
        return 1;
    }
    rank = world->rank;
    if (sp <= 0) sp = world->size;
    gdn_comm *c = gdn_comm_init(NULL, NULL, sp, err, sizeof err); /* the grid: world = dp x sp */
    if (!c) {
        if (err[0]) fprintf(stderr, "test_seqpar_cuda: %s\n", err);
        gdn_comm_finalize(world);
        return 1;
    }
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess) n_dev = 0;
    if (gdn_comm_agree(c, n_dev < c->local_size && n_dev != 1) >= 0 || n_dev == 0 || c->size < 2) {
        if (rank == 0) printf("test_seqpar_cuda: skipped (%d GPUs for %d ranks on this node)\n", n_dev, c->local_size);
        gdn_comm_finalize(c);
        gdn_comm_finalize(world);
        return 77;
    }
    gdn_comm *g = gdn_nccl_init(c, err, sizeof err);
    if (!g) {
        if (err[0]) fprintf(stderr, "test_seqpar_cuda: rank %d: %s\n", rank, err);
        gdn_comm_finalize(c);
        gdn_comm_finalize(world);
        return 1;
    }
    cudaStream_t st;
    cuda_ok(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
    gdn_nccl_set_stream(g, st);
    test_group_sums(g);
    if (g->sp > 1) {
        test_hooks(g, st, GDN_CUDA_BF16);
        test_hooks(g, st, GDN_CUDA_FP32);
    }
    int bad = gdn_comm_agree(c, failures != 0);
    if (rank == 0)
        printf("test_seqpar_cuda: %d ranks = dp %d x sp %d on GPUs, NCCL %s%s: %s\n", c->size, c->dp, c->sp,
               gdn_nccl_version(g), getenv("GDN_NCCL_SPLIT") ? " (GDN_NCCL_SPLIT set)" : "",
               bad < 0 ? "all checks passed" : "FAILED");
    gdn_nccl_finalize(g);
    cudaStreamDestroy(st);
    gdn_comm_finalize(c);
    gdn_comm_finalize(world);
    return bad < 0 ? 0 : 1;
}
