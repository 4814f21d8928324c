/* Distributed training step against one rank, under mpiexec -n N: for a gated-delta-rule model
 * and a hybrid with softmax-attention layers, for every process grid
 * dp x sp = N the program can form (sp dividing N and the sequence length), and for both
 * sequence-parallel exchanges, the loss and every parameter gradient after the all-reduce must
 * equal those of a single-process step over the whole batch (computed on every rank) within a
 * relative error of 1e-5; both exchanges must agree with each other; every rank must end with
 * bitwise-identical gradients; the forward-only (validation) loss must match too; the most any
 * rank's hooks send in a step is what gdn_seqpar_bytes says. Two steps with different tokens run
 * on the same buffers. Every rank checks; rank 0 prints; the exit status is nonzero on every rank
 * when any check failed on any rank. With documents: starts inside segments, exactly at the
 * segment edges of sp 2 and 4, at 1 and documents shorter than the convolution width (the
 * reference is the one-process model with the same starts, itself checked against documents run
 * one by one in test_docs). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/seqpar.h"
#include "model/cpu/model_cpu.h"
#include "train/train_dist.h"
#include "tests/mpi/mpi_test_util.h"

#define TOL 1e-5


static double rel_err(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return sqrt(d) / (sqrt(r) > 1e-30 ? sqrt(r) : 1e-30);
}


enum { B_PER_DP = 2, T_FULL = 48, N_STEPS = 2 };

static gdn_config test_config(void) {
    /* chunk 16 with segments of 48 / sp tokens: partial chunks on every rank for sp = 2, 4 */
    return (gdn_config){.vocab_size = 48, .d_model = 32, .n_layers = 2, .n_heads = 2, .head_dim = 16,
                        .expand_v = 2, .d_ff = 64, .conv_width = 4, .chunk_size = 16,
                        .tie_embeddings = 0, .allow_neg_eigval = 0, .norm_eps = 1e-6};
}

/* A hybrid: softmax attention first and last (keys and values all-gathered, their gradients
 * reduce-scattered), with grouped kv heads, q/k norms, q/k/v biases and RoPE at global positions;
 * gated delta rule between. */
static gdn_config hybrid_config(void) {
    gdn_config c = test_config();
    c.n_layers = 4;
    c.n_heads = 4;
    c.head_dim = 8;
    c.n_kv_heads = 2;
    c.attn_head_dim = 8;
    c.rope_theta = 100.0; /* angles that turn visibly over 48 positions */
    c.qk_norm = 1;
    c.qkv_bias = 1;
    snprintf(c.mixers, sizeof c.mixers, "AGGA");
    return c;
}

/* Parameters: the initialiser's, each scaled by a factor in [1, 2) so that no two are alike.
 * (Larger factors make the model ill-conditioned: at [3, 4) fp32 rounding alone moves single
 * gradients by 1e-5, whatever the split.) */
static float *make_params(const gdn_param_table *t) {
    float *p = malloc(t->total * sizeof *p);
    gdn_params_init(p, t, 1234);
    rng_state = 99;
    for (size_t i = 0; i < t->total; i++) p[i] *= (float)(1.0 + uniform());
    return p;
}

/* The tokens and targets [Bg, T] of step k (some targets ignored). */
static void make_batch(int k, int Bg, int T, int vocab, int *tokens, int *targets) {
    rng_state = 1000 + (uint64_t)k;
    for (int i = 0; i < Bg * T; i++) {
        tokens[i] = (int)(uniform() * vocab);
        targets[i] = (i % 11 == 5) ? -1 : (int)(uniform() * vocab);
    }
}

/* Document starts [Bg, T] of step k: edges 12, 24, 36 (sp 4 and 2) in some rows, starts inside
 * segments, at 1, documents of one and two tokens; rows differ between steps. */
static void make_starts(int k, int Bg, int T, unsigned char *st) {
    memset(st, 0, (size_t)Bg * T);
    for (int b = 0; b < Bg; b++) {
        unsigned char *r = st + (size_t)b * T;
        switch ((b + k) % 4) {
        case 0: r[12] = r[24] = r[36] = 1; break;
        case 1: r[0] = r[1] = r[5] = r[23] = r[25] = r[26] = r[40] = 1; break;
        case 2: r[11] = r[13] = r[30] = r[47] = 1; break;
        default: r[24] = 1; break;
        }
    }
}

/* The fp32 rounding of one process: its gradient against the fp64 model's, for scale. */
static double f32_rounding(const gdn_param_table *t, const float *P, int Bg, int T) {
    int *tokens = malloc((size_t)Bg * T * sizeof(int)), *targets = malloc((size_t)Bg * T * sizeof(int));
    make_batch(0, Bg, T, t->cfg.vocab_size, tokens, targets);
    double *P64 = malloc(t->total * sizeof *P64), *g64 = calloc(t->total, sizeof *g64);
    float *g32 = calloc(t->total, sizeof *g32), *g64f = malloc(t->total * sizeof *g64f);
    for (size_t i = 0; i < t->total; i++) P64[i] = P[i];
    gdn_cpu_acts_f32 *a32 = gdn_cpu_acts_create_f32(t, Bg, T);
    gdn_cpu_acts_f64 *a64 = gdn_cpu_acts_create_f64(t, Bg, T);
    int nv;
    gdn_cpu_forward_f32(a32, t, P, tokens, targets, 1.0f / (float)(Bg * T), &nv, NULL, NULL);
    gdn_cpu_backward_f32(a32, t, P, g32);
    gdn_cpu_forward_f64(a64, t, P64, tokens, targets, 1.0 / (Bg * T), &nv, NULL, NULL);
    gdn_cpu_backward_f64(a64, t, P64, g64);
    for (size_t i = 0; i < t->total; i++) g64f[i] = (float)g64[i];
    double e = rel_err(g32, g64f, t->total);
    gdn_cpu_acts_free_f32(a32);
    gdn_cpu_acts_free_f64(a64);
    free(tokens);
    free(targets);
    free(P64);
    free(g64);
    free(g32);
    free(g64f);
    return e;
}

typedef struct {
    float *grads[N_STEPS]; /* after the all-reduce */
} case_result;

/* One grid (the world split into dp x sp) and exchange: N_STEPS steps checked against the
 * single-process reference. Returns the gradients for the comparison between exchanges. */
static case_result run_case(int sp, gdn_sp_exchange mode, const gdn_param_table *t, const float *P, int docs) {
    char err[512];
    gdn_comm *c = gdn_comm_init(NULL, NULL, sp, err, sizeof err);
    if (!c) {
        check(0, "grid with sp = %d: %s", sp, err);
        return (case_result){{NULL}};
    }
    const gdn_config *cfg = &t->cfg;
    const int dp = c->dp, Bg = dp * B_PER_DP, T = T_FULL, Ts = T / sp, b = B_PER_DP;
    const size_t n = t->total;
    const float gs = 1.0f / (float)(Bg * T);
    int *tokens = malloc((size_t)Bg * T * sizeof(int)), *targets = malloc((size_t)Bg * T * sizeof(int));
    int *tok = malloc((size_t)b * Ts * sizeof(int)), *tgt = malloc((size_t)b * Ts * sizeof(int));
    float *g_ref = malloc(n * sizeof(float)), *lo = malloc(n * sizeof(float));
    float *hi = malloc(n * sizeof(float));
    unsigned char *starts = malloc((size_t)Bg * T), *st = malloc((size_t)b * Ts);
    gdn_cpu_acts_f32 *whole = gdn_cpu_acts_create_f32(t, Bg, T);
    gdn_cpu_acts_f32 *mine = gdn_cpu_acts_create_f32(t, b, Ts);
    gdn_seqpar *s = NULL;
    if (sp > 1) {
        s = gdn_seqpar_create(c, cfg, b, Ts, mode);
        const gdn_seq_hooks hooks = gdn_seqpar_hooks(s);
        gdn_cpu_acts_set_seq_hooks_f32(mine, &hooks);
    }
    case_result res;
    double worst_loss = 0, worst_grad = 0, worst_eval = 0;
    const char *worst_name = "";
    int pending_first = 0;
    for (int k = 0; k < N_STEPS; k++) {
        make_batch(k, Bg, T, cfg->vocab_size, tokens, targets);
        if (docs) {
            make_starts(k, Bg, T, starts);
            gdn_cpu_acts_set_doc_starts_f32(whole, starts);
            for (int i = 0; i < b; i++)
                memcpy(st + (size_t)i * Ts, starts + (size_t)(c->dp_rank * b + i) * T + (size_t)c->sp_rank * Ts,
                       (size_t)Ts);
            gdn_cpu_acts_set_doc_starts_f32(mine, st);
        }
        /* the single-process step over the whole batch */
        memset(g_ref, 0, n * sizeof(float));
        int nv = 0;
        double loss_ref = gdn_cpu_forward_f32(whole, t, P, tokens, targets, gs, &nv, NULL, NULL) * gs;
        gdn_cpu_backward_f32(whole, t, P, g_ref);
        /* this rank's sequences [dp_rank * b, +b) and segment [sp_rank * Ts, +Ts) */
        for (int i = 0; i < b; i++) {
            size_t src = (size_t)(c->dp_rank * b + i) * T + (size_t)c->sp_rank * Ts;
            memcpy(tok + (size_t)i * Ts, tokens + src, (size_t)Ts * sizeof(int));
            memcpy(tgt + (size_t)i * Ts, targets + src, (size_t)Ts * sizeof(int));
        }
        float *g = calloc(n, sizeof(float));
        const gdn_comm_bytes b0 = c->bytes;
        double loss = gdn_cpu_forward_f32(mine, t, P, tok, tgt, gs, &nv, NULL, NULL) * gs;
        gdn_cpu_backward_f32(mine, t, P, g);
        /* what the hooks sent, at most over the ranks, is what gdn_seqpar_bytes says */
        double sent = (double)(c->bytes.send - b0.send) + (double)(c->bytes.all_gather - b0.all_gather) +
                      (double)(c->bytes.reduce_scatter - b0.reduce_scatter);
        gdn_all_reduce(c, GDN_WORLD, &sent, 1, GDN_F64, GDN_MAX, "sequence-parallel bytes");
        const double want = (double)gdn_seqpar_bytes(cfg, b, Ts, sp, mode, 1);
        check(sent == want, "dp %d x sp %d %s: the hooks sent %.0f bytes, gdn_seqpar_bytes says %.0f", dp, sp,
              gdn_sp_exchange_name(mode), sent, want);
        /* each pass completes the sends of the one before (the model's layer 0 is attention, which
         * sends nothing point to point): the pending sends do not pile up from step to step */
        if (k == 0) pending_first = c->pending_sends;
        check(c->pending_sends == pending_first, "dp %d x sp %d %s step %d: %d sends pending, %d after step 0", dp,
              sp, gdn_sp_exchange_name(mode), k, c->pending_sends, pending_first);
        gdn_all_reduce(c, GDN_WORLD, g, n, GDN_F32, GDN_SUM, "gradients");
        gdn_all_reduce(c, GDN_WORLD, &loss, 1, GDN_F64, GDN_SUM, "loss");
        double el = fabs(loss - loss_ref) / fabs(loss_ref);
        check(el < TOL, "dp %d x sp %d %s step %d: loss %.9g vs %.9g (relative error %.2e)", dp, sp,
              gdn_sp_exchange_name(mode), k, loss, loss_ref, el);
        if (el > worst_loss) worst_loss = el;
        for (int i = 0; i < t->n; i++) {
            const gdn_param *p = &t->p[i];
            double gn = 0;
            for (size_t j = 0; j < p->numel; j++)
                gn += (double)g_ref[p->offset + j] * g_ref[p->offset + j];
            check(sqrt(gn) > 1e-8, "%s has no reference gradient: the comparison would prove nothing",
                  p->name);
            double e = rel_err(g + p->offset, g_ref + p->offset, p->numel);
            check(e < TOL, "dp %d x sp %d %s step %d: gradient of %s relative error %.2e", dp, sp,
                  gdn_sp_exchange_name(mode), k, p->name, e);
            if (e > worst_grad) {
                worst_grad = e;
                worst_name = p->name;
            }
        }
        /* identical on every rank: max == min elementwise */
        memcpy(lo, g, n * sizeof(float));
        memcpy(hi, g, n * sizeof(float));
        gdn_all_reduce(c, GDN_WORLD, lo, n, GDN_F32, GDN_MIN, "gradient minima");
        gdn_all_reduce(c, GDN_WORLD, hi, n, GDN_F32, GDN_MAX, "gradient maxima");
        check(!memcmp(lo, hi, n * sizeof(float)), "dp %d x sp %d: the ranks hold different gradients",
              dp, sp);
        /* forward only, as validation runs it */
        double ev = gdn_cpu_forward_f32(mine, t, P, tok, tgt, 0.0f, &nv, NULL, NULL) * gs;
        gdn_all_reduce(c, GDN_WORLD, &ev, 1, GDN_F64, GDN_SUM, "validation loss");
        double ee = fabs(ev - loss_ref) / fabs(loss_ref);
        check(ee < TOL, "dp %d x sp %d %s: forward-only loss relative error %.2e", dp, sp,
              gdn_sp_exchange_name(mode), ee);
        if (ee > worst_eval) worst_eval = ee;
        res.grads[k] = g;
    }
    if (world->rank == 0)
        printf("  dp %d x sp %d%s%-7s%s loss %.1e, validation loss %.1e, gradients %.1e (worst tensor: %s)\n",
               dp, sp, sp > 1 ? ", " : "", sp > 1 ? gdn_sp_exchange_name(mode) : ":", docs ? " documents:" : "", worst_loss, worst_eval,
               worst_grad, worst_name);
    gdn_seqpar_free(s);
    gdn_cpu_acts_free_f32(whole);
    gdn_cpu_acts_free_f32(mine);
    free(tokens);
    free(targets);
    free(starts);
    free(st);
    free(tok);
    free(tgt);
    free(g_ref);
    free(lo);
    free(hi);
    gdn_comm_finalize(c);
    return res;
}

/* Every grid of the world and both exchanges for one model. */
static void run_model(const gdn_config *cfg, const char *what, int docs) {
    gdn_param_table t;
    gdn_param_table_build(&t, cfg);
    float *P = make_params(&t);
    if (world->rank == 0)
        printf("%s: one training step on %d ranks vs one process (batch %d per data-parallel rank, %d tokens, "
               "%zu parameters; fp32 rounding of one process against fp64: gradients %.1e): relative "
               "errors\n", what, world->size, B_PER_DP, T_FULL, t.total, f32_rounding(&t, P, B_PER_DP, T_FULL));
    for (int sp = 1; sp <= world->size; sp++) {
        if (world->size % sp || T_FULL % sp || T_FULL / sp < cfg->conv_width - 1) continue;
        if (sp == 1) {
            case_result r = run_case(1, GDN_SP_PASS, &t, P, docs);
            for (int k = 0; k < N_STEPS; k++) free(r.grads[k]);
            continue;
        }
        case_result a = run_case(sp, GDN_SP_PASS, &t, P, docs), g = run_case(sp, GDN_SP_GATHER, &t, P, docs);
        double worst = 0;
        for (int k = 0; k < N_STEPS; k++) {
            if (a.grads[k] && g.grads[k]) {
                double e = rel_err(g.grads[k], a.grads[k], t.total);
                check(e < TOL, "sp %d: the two exchanges differ (gradient relative error %.2e)", sp, e);
                if (e > worst) worst = e;
            }
            free(a.grads[k]);
            free(g.grads[k]);
        }
        if (world->rank == 0) printf("  sp %d: pass vs gather gradients %.1e\n", sp, worst);
    }
    free(P);
    gdn_param_table_free(&t);
}

int main(int argc, char **argv) {
    mpi_test_init(&argc, &argv);
    omp_set_num_threads(gdn_dist_threads(world, 0));
    const gdn_config cfg = test_config(), hybrid = hybrid_config();
    run_model(&cfg, "gated delta rule", 0);
    run_model(&hybrid, "hybrid AGGA (softmax attention, 4 heads on 2 kv heads, q/k norms, biases)", 0);
    run_model(&cfg, "gated delta rule, packed documents", 1);
    run_model(&hybrid, "hybrid AGGA, packed documents", 1);
    int bad = gdn_comm_agree(world, failures != 0);
    if (world->rank == 0) printf(bad < 0 ? "all checks passed\n" : "FAILED (first on rank %d)\n", bad);
    gdn_comm_finalize(world);
    return bad < 0 ? 0 : 1;
}
