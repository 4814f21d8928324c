/* The collectives of ZeRO-1 and its optimizer step, under mpiexec -n N (N = 2, 3: an odd world
 * pads the buffers) or alone (the world of one without MPI, comm/comm_self.c):
 *  1. reduce-scatter (sum, average, max, min; f32, f64, i64; in place and not) and all-gather (in
 *     place and not) over the world and, for every grid dp x sp the world allows, over the data-
 *     and sequence-parallel groups, against values every rank computes exactly; the byte counters;
 *  2. the sharded AdamW step (train/zero.h) against the unsharded one run on every rank: with
 *     gradients whose sums are exact in any order, parameters and moments must be bitwise equal
 *     (two steps, the second clipping; shards cut tensors with and without weight decay); the
 *     moments gathered to rank 0 equal the unsharded ones and scatter back to the same shards.
 * Every rank checks; rank 0 prints; the exit status is nonzero on every rank when any check
 * failed on any rank. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "model/params.h"
#include "train/optim.h"
#include "train/zero.h"
#include "tests/mpi/mpi_test_util.h"


/* Element i of group rank r's input: distinct per rank and element, small integers and
 * quarters, so that every sum and average below is exact. */
static double val(int r, size_t i) { return (double)((int)(i % 97) - 40) * 0.25 + (double)r * 3.0; }
static int64_t ival(int r, size_t i) { return (int64_t)(i % 1000) * 1000000007LL + r; }

static const char *const op_names[] = {"sum", "average", "max", "min"};
static const char *const group_names[] = {"world", "dp group", "sp group"};

/* The reduction over the group's ranks of element i (the average divided in float for f32). */
static float want_f32(gdn_redop op, int size, size_t i) {
    float s = 0, mx = -1e30f, mn = 1e30f;
    for (int r = 0; r < size; r++) {
        s += (float)val(r, i);
        mx = fmaxf(mx, (float)val(r, i));
        mn = fminf(mn, (float)val(r, i));
    }
    return op == GDN_SUM ? s : op == GDN_AVG ? s / (float)size : op == GDN_MAX ? mx : mn;
}

static double want_f(gdn_redop op, int size, size_t i) {
    double s = 0, mx = -1e300, mn = 1e300;
    for (int r = 0; r < size; r++) {
        s += val(r, i);
        mx = fmax(mx, val(r, i));
        mn = fmin(mn, val(r, i));
    }
    return op == GDN_SUM ? s : op == GDN_AVG ? s / size : op == GDN_MAX ? mx : mn;
}

static int64_t want_i(gdn_redop op, int size, size_t i) {
    int64_t s = 0, mx = INT64_MIN, mn = INT64_MAX;
    for (int r = 0; r < size; r++) {
        int64_t w = ival(r, i);
        s += w;
        mx = w > mx ? w : mx;
        mn = w < mn ? w : mn;
    }
    return op == GDN_SUM ? s : op == GDN_MAX ? mx : mn;
}

/* Reduce-scatter of blocks of n over group g, every type and operation, in place and not. */
static void test_reduce_scatter(gdn_comm *c, gdn_group g, size_t n) {
    const int size = gdn_comm_group_size(c, g), me = gdn_comm_group_rank(c, g);
    const size_t total = n * (size_t)size;
    float *f = malloc((total ? total : 1) * sizeof *f), *fr = malloc((n ? n : 1) * sizeof *fr);
    double *d = malloc((total ? total : 1) * sizeof *d), *dr = malloc((n ? n : 1) * sizeof *dr);
    int64_t *q = malloc((total ? total : 1) * sizeof *q), *qr = malloc((n ? n : 1) * sizeof *qr);
    for (int in_place = 0; in_place < 2; in_place++)
        for (int o = 0; o < 4; o++) {
            const gdn_redop op = (gdn_redop)o;
            for (size_t i = 0; i < total; i++) {
                f[i] = (float)val(me, i);
                d[i] = val(me, i) / 4.0;
                q[i] = ival(me, i);
            }
            float *fo = in_place ? f + (size_t)me * n : fr;
            double *dout = in_place ? d + (size_t)me * n : dr;
            int64_t *qo = in_place ? q + (size_t)me * n : qr;
            const uint64_t before = c->bytes.reduce_scatter;
            gdn_reduce_scatter(c, g, f, fo, n, GDN_F32, op, "f32 test");
            gdn_reduce_scatter(c, g, d, dout, n, GDN_F64, op, "f64 test");
            check(c->bytes.reduce_scatter - before == total * 12,
                  "reduce-scatter byte counter: %llu bytes for two inputs of %zu elements (f32, f64)",
                  (unsigned long long)(c->bytes.reduce_scatter - before), total);
            if (op != GDN_AVG) gdn_reduce_scatter(c, g, q, qo, n, GDN_I64, op, "i64 test");
            for (size_t j = 0; j < n; j++) {
                const size_t i = (size_t)me * n + j; /* this rank's block */
                const double w = want_f(op, size, i);
                const int ok = fo[j] == want_f32(op, size, i) && dout[j] == w / 4.0 &&
                               (op == GDN_AVG || qo[j] == want_i(op, size, i));
                if (!ok) {
                    check(0, "reduce-scatter %s over the %s (%d ranks, %s, blocks of %zu) element %zu: f32 %.9g "
                          "f64 %.17g i64 %lld, want %.9g %.17g %lld", op_names[o], group_names[g], size,
                          in_place ? "in place" : "out of place", n, j, fo[j], dout[j], (long long)qo[j],
                          want_f32(op, size, i), w / 4.0, (long long)want_i(op, size, i));
                    break;
                }
            }
        }
    free(f);
    free(fr);
    free(d);
    free(dr);
    free(q);
    free(qr);
}

/* All-gather of blocks of n over group g, in place and not. */
static void test_all_gather(gdn_comm *c, gdn_group g, size_t n) {
    const int size = gdn_comm_group_size(c, g), me = gdn_comm_group_rank(c, g);
    const size_t total = n * (size_t)size;
    float *all = malloc((total ? total : 1) * sizeof *all), *mine = malloc((n ? n : 1) * sizeof *mine);
    for (int in_place = 0; in_place < 2; in_place++) {
        for (size_t i = 0; i < total; i++) all[i] = -1.0f;
        float *src = in_place ? all + (size_t)me * n : mine;
        for (size_t j = 0; j < n; j++) src[j] = (float)val(me, j);
        const uint64_t before = c->bytes.all_gather;
        gdn_all_gather(c, g, src, all, n, GDN_F32, "gather test");
        check(c->bytes.all_gather - before == n * 4, "all-gather byte counter: %llu bytes for a block of %zu floats",
              (unsigned long long)(c->bytes.all_gather - before), n);
        for (size_t i = 0; i < total; i++)
            if (all[i] != (float)val((int)(i / n), i % n)) {
                check(0, "all-gather over the %s (%d ranks, %s, blocks of %zu): element %zu is %g, want %g",
                      group_names[g], size, in_place ? "in place" : "out of place", n, i, all[i],
                      val((int)(i / n), i % n));
                break;
            }
    }
    free(all);
    free(mine);
}

static void test_collectives(int sp) {
    char err[512];
    gdn_comm *c = world->size == 1 ? world : gdn_comm_init(NULL, NULL, sp, err, sizeof err);
    if (!c) {
        check(0, "grid with sp = %d: %s", sp, err);
        return;
    }
    const size_t sizes[] = {1, 7, 1000, 0};
    for (int g = 0; g < 3; g++) /* groups of one rank included */
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            test_reduce_scatter(c, (gdn_group)g, sizes[k]);
            test_all_gather(c, (gdn_group)g, sizes[k]);
        }
    if (world->rank == 0)
        printf("  dp %d x sp %d: reduce-scatter and all-gather over the world and both groups exact\n", c->dp, c->sp);
    if (c != world) gdn_comm_finalize(c);
}

/* ---- the sharded optimizer step ---- */

static gdn_config test_config(void) {
    return (gdn_config){.vocab_size = 48, .d_model = 32, .n_layers = 2, .n_heads = 2, .head_dim = 16,
                        .expand_v = 2, .d_ff = 64, .conv_width = 4, .chunk_size = 16,
                        .tie_embeddings = 0, .allow_neg_eigval = 0, .norm_eps = 1e-6};
}


/* Rank r's gradient at step k: multiples of 2^-12 below 2^-2, so that sums over ranks and the
 * sums of squares are exact in any order (fp32 and double). */
static void make_grad(int r, int k, float *g, size_t n) {
    rng_state = 7000 + (uint64_t)r * 131 + (uint64_t)k;
    for (size_t i = 0; i < n; i++) g[i] = (float)(floor(uniform() * 2048.0) - 1024.0) / 4096.0f;
}

/* AdamW over pieces of the flat buffer cut in the middle of every tensor (those without weight
 * decay included), piece by piece, against one update of the whole buffer: bitwise equal. */
static void test_adamw_ranges(void) {
    const gdn_config cfg = test_config();
    gdn_param_table t;
    gdn_param_table_build(&t, &cfg);
    const size_t n = t.total;
    float *P = malloc(n * sizeof *P), *G = malloc(n * sizeof *G), *M = malloc(n * sizeof *M);
    float *V = malloc(n * sizeof *V), *p = malloc(n * sizeof *p), *m = malloc(n * sizeof *m);
    float *v = malloc(n * sizeof *v);
    gdn_params_init(P, &t, 9);
    rng_state = 5;
    for (size_t i = 0; i < n; i++) {
        G[i] = (float)(uniform() - 0.5);
        M[i] = (float)(0.1 * (uniform() - 0.5));
        V[i] = (float)(0.01 * uniform());
    }
    memcpy(p, P, n * sizeof *P);
    memcpy(m, M, n * sizeof *M);
    memcpy(v, V, n * sizeof *V);
    const gdn_adamw_hparams h = {3e-3, 0.9, 0.95, 1e-8, 0.1};
    gdn_adamw_update(&t, P, G, M, V, &h, 3);
    size_t lo = 0;
    int no_decay = 0;
    for (int i = 0; i <= t.n; i++) {
        const size_t hi = i < t.n ? t.p[i].offset + t.p[i].numel / 2 : n;
        if (i < t.n) no_decay += t.p[i].no_decay && t.p[i].numel > 1;
        gdn_adamw_update_range(&t, lo, hi, p + lo, G + lo, m + lo, v + lo, &h, 3);
        lo = hi;
    }
    check(no_decay > 0, "the test table has no tensor without weight decay: the cuts would prove nothing");
    check(!memcmp(p, P, n * sizeof *P) && !memcmp(m, M, n * sizeof *M) && !memcmp(v, V, n * sizeof *V),
          "AdamW piece by piece (cut inside every tensor) differs from the whole update");
    if (world->rank == 0)
        printf("  AdamW over %d pieces cut inside every tensor (%d without weight decay) bitwise equal to one update\n",
               t.n + 1, no_decay);
    free(P);
    free(G);
    free(M);
    free(V);
    free(p);
    free(m);
    free(v);
    gdn_param_table_free(&t);
}

static void test_zero_step(void) {
    const gdn_config cfg = test_config();
    gdn_param_table t;
    gdn_param_table_build(&t, &cfg);
    const size_t n = t.total;
    gdn_zero z;
    gdn_zero_layout(&z, n, 1, world->rank, world->size);
    check(z.padded % (size_t)world->size == 0 && z.padded >= n && z.padded - n < (size_t)world->size,
          "layout: %zu parameters padded to %zu over %d ranks", n, z.padded, world->size);
    /* the unsharded reference, run on every rank */
    float *P = malloc(n * sizeof *P), *G = malloc(n * sizeof *G), *M = calloc(n, sizeof *M), *V = calloc(n, sizeof *V);
    float *g = malloc(n * sizeof *g);
    /* the sharded state of this rank: a CPU model of the backend table, and host copies */
    gdn_model_shape shape = {.B = 1, .T = 4, .precision = GDN_PRECISION_FP32, .lo = z.lo, .hi = z.hi,
                             .padded = z.padded};
    gdn_model *model = gdn_backend_cpu.create(&t, &shape);
    float *p = calloc(z.padded, sizeof *p), *gs = gdn_backend_cpu.grads(model);
    float *m = calloc(z.shard, sizeof *m), *v = calloc(z.shard, sizeof *v);
    gdn_params_init(P, &t, 42);
    gdn_backend_cpu.upload(model, P, NULL, NULL);
    gdn_adamw_hparams h = {1e-2, 0.9, 0.95, 1e-8, 0.1};
    double clip = 0.0;
    for (int k = 1; k <= 2; k++) {
        memset(G, 0, n * sizeof *G);
        for (int r = 0; r < world->size; r++) {
            make_grad(r, k, g, n);
            for (size_t i = 0; i < n; i++) G[i] += g[i];
        }
        const double norm = gdn_grad_norm(G, n);
        clip = k == 2 ? 0.5 * norm : 0.0; /* step 2 clips */
        if (clip > 0 && norm > clip) gdn_grad_scale(G, n, (float)(clip / norm));
        gdn_adamw_update(&t, P, G, M, V, &h, k);

        memset(gs, 0, z.padded * sizeof *gs);
        make_grad(world->rank, k, gs, n);
        const double gn = gdn_zero_adamw_step(world, world, &z, model, &h, k, clip);
        memcpy(p, gdn_backend_cpu.params(model), z.padded * sizeof *p);
        gdn_backend_cpu.download(model, NULL, m, v);
        check(gn == norm, "step %d: gradient norm %.17g, unsharded %.17g", k, gn, norm);
        check(!memcmp(p, P, n * sizeof *P), "step %d: parameters differ from the unsharded step", k);
        for (size_t i = n; i < z.padded; i++)
            check(p[i] == 0.0f, "step %d: padding element %zu of the parameters is %g", k, i, p[i]);
        check(!memcmp(m, M + z.lo, (z.hi - z.lo) * sizeof *m) && !memcmp(v, V + z.lo, (z.hi - z.lo) * sizeof *v),
              "step %d: the moments of [%zu, %zu) differ from the unsharded step's", k, z.lo, z.hi);
    }
    /* checkpoints: gather to rank 0, scatter back */
    float *full = world->rank == 0 ? malloc(n * sizeof *full) : NULL;
    gdn_zero_gather(world, &z, m, full, "first moments");
    if (world->rank == 0) {
        check(!memcmp(full, M, n * sizeof *M), "gathered first moments differ from the unsharded ones");
        memcpy(full, V, n * sizeof *V);
    }
    memset(v, 0, z.shard * sizeof *v);
    gdn_zero_scatter(world, &z, full, v, "second moments");
    check(!memcmp(v, V + z.lo, (z.hi - z.lo) * sizeof *v), "scattered second moments differ from their block");
    if (world->rank == 0)
        printf("  sharded AdamW over %d ranks (%zu parameters, blocks of %zu, padding %zu): two steps (the second "
               "clipped) bitwise equal to the unsharded step; moments gathered and scattered exactly\n",
               world->size, n, z.shard, z.padded - n);
    free(full);
    free(P);
    free(G);
    free(M);
    free(V);
    free(g);
    free(p);
    gdn_backend_cpu.free(model);
    free(m);
    free(v);
    gdn_param_table_free(&t);
}

int main(int argc, char **argv) {
    mpi_test_init(&argc, &argv);
    if (world->rank == 0) printf("ZeRO-1 on %d rank%s (%s data plane):\n", world->size, world->size == 1 ? "" : "s",
                                 world->ops->name);
    for (int sp = 1; sp <= world->size; sp++)
        if (world->size % sp == 0) test_collectives(sp);
    test_adamw_ranges();
    if (world->size > 1) {
        test_zero_step();
    } else { /* a world of one has nothing to shard */
        gdn_zero z;
        gdn_zero_layout(&z, 1000, 1, 0, 1);
        check(!z.on && z.shard == 1000 && z.padded == 1000 && z.lo == 0 && z.hi == 1000,
              "--zero 1 on one rank: layout on %d, shard %zu, padded %zu, [%zu, %zu)", z.on, z.shard, z.padded, z.lo,
              z.hi);
    }
    int bad = gdn_comm_agree(world, failures != 0);
    if (world->rank == 0) printf(bad < 0 ? "all checks passed\n" : "FAILED (first on rank %d)\n", bad);
    gdn_comm_finalize(world);
    return bad < 0 ? 0 : 1;
}
