/* The linearized mixer (mixer S, model/cpu/linearized.c and its layer in model/cpu/model_attn.c):
 * the core's forward against a naive fp64 per-token recurrence with an explicit state (grouped
 * query heads, lengths 1, 2, 37 and 70 at chunk sizes 16 and 32, documents, several balance
 * factors), against the single-head form gdn linearize measures (gdn_lin_gdn), fp32 against
 * fp64, and decoding after earlier positions against one pass; its backward against fp64 central
 * finite differences of every input (q, k, v, log_lambda) in the same cases; and in the model:
 * the parameter table, whole-model gradients against finite differences for patterns with S
 * layers (q/k norm and biases on and off, grouped heads, documents), decoding through the KV
 * cache against one pass, and the refusal under sequence parallelism. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/check.h"
#include "model/cpu/doc.h"
#include "model/cpu/linearize.h"
#include "model/mixer.h"
#include "tests/model_case.h"

/* ---- the naive reference --------------------------------------------------------------------- */

/* The form token by token in fp64 with an explicit state S [D,D] per (sequence, query head):
 * positions restart at every document start (starts [B,T], 1 where a document begins). */
static void naive_linz(int B, int T, int H, int Hkv, int D, const double *q, const double *k, const double *v,
                       const double *log_lambda, double scale, const unsigned char *starts, double *o) {
    const int group = H / Hkv;
    double *S = malloc(sizeof(double) * (size_t)D * D), *kbar = malloc(sizeof(double) * 4 * (size_t)D);
    double *vbar = kbar + D, *kt = vbar + D, *u = kt + D;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int j = h / group;
            const double lam = exp(log_lambda[h]);
            int p = 0;
            for (int t = 0; t < T; t++) {
                const size_t r = (size_t)b * T + t;
                p = (starts && starts[r]) || t == 0 ? 1 : p + 1;
                if (p == 1) {
                    memset(S, 0, sizeof(double) * (size_t)D * D);
                    memset(kbar, 0, sizeof(double) * 2 * (size_t)D);
                }
                const double *kr = k + (r * Hkv + j) * D, *vr = v + (r * Hkv + j) * D;
                for (int i = 0; i < D; i++) {
                    kbar[i] += (kr[i] - kbar[i]) / p;
                    kt[i] = (kr[i] - kbar[i]) / lam;
                    u[i] = (1.0 - 1.0 / p) * (vr[i] - vbar[i]); /* vbar_{t-1} */
                    vbar[i] += (vr[i] - vbar[i]) / p;
                }
                if (p > 1) { /* S = (1 - 1/p)(S - beta kt (kt^T S)) + beta kt u^T, beta = 1/(p-1) */
                    const double beta = 1.0 / (p - 1), gam = 1.0 - 1.0 / p;
                    for (int c = 0; c < D; c++) {
                        double ks = 0;
                        for (int i = 0; i < D; i++) ks += kt[i] * S[(size_t)i * D + c];
                        for (int i = 0; i < D; i++)
                            S[(size_t)i * D + c] = gam * (S[(size_t)i * D + c] - beta * kt[i] * ks) + beta * kt[i] * u[c];
                    }
                }
                const double *qr = q + (r * H + h) * D;
                double *orow = o + (r * H + h) * D;
                for (int c = 0; c < D; c++) {
                    double acc = 0;
                    for (int i = 0; i < D; i++) acc += S[(size_t)i * D + c] * lam * scale * qr[i];
                    orow[c] = acc + vbar[c];
                }
            }
        }
    free(S);
    free(kbar);
}

static double rel(const double *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1e-300));
}

/* One problem: inputs of the core with keys whose mean is larger than their spread (as trained
 * keys are), and optional documents. */
typedef struct {
    int B, T, H, Hkv, D, chunk;
    double *q, *k, *v, *ll, scale;
    unsigned char *starts;
    int *doc;
} problem;

static void problem_make(problem *p, int B, int T, int H, int Hkv, int D, int chunk, int docs, unsigned long long seed) {
    *p = (problem){B, T, H, Hkv, D, chunk, NULL, NULL, NULL, NULL, 1.0 / sqrt((double)D), NULL, NULL};
    const size_t nq = (size_t)B * T * H * D + 1, nk = (size_t)B * T * Hkv * D + 1;
    p->q = malloc(sizeof(double) * nq);
    p->k = malloc(sizeof(double) * nk);
    p->v = malloc(sizeof(double) * nk);
    p->ll = malloc(sizeof(double) * (size_t)H);
    fd_fill_uniform(p->q, nq, -1, 1, seed);
    fd_fill_uniform(p->k, nk, -1, 1, seed + 1);
    fd_fill_uniform(p->v, nk, -1, 1, seed + 2);
    fd_fill_uniform(p->ll, (size_t)H, -0.7, 0.7, seed + 3);
    for (size_t i = 0; i < nk; i++) p->k[i] += 1.5 * (double)(i % (size_t)D % 3) - 1.0; /* a mean per channel */
    if (docs) {
        p->starts = calloc((size_t)B * T + 1, 1);
        p->doc = malloc(sizeof(int) * ((size_t)B * T + 1));
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                p->starts[(size_t)b * T + t] = t > 0 && (t * (b + 2)) % 13 == 5; /* several, differing per row */
        gdn_doc_build(p->doc, p->starts, NULL, B, T);
    }
}

static void problem_free(problem *p) {
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->ll);
    free(p->starts);
    free(p->doc);
}

static gdn_linz_shape problem_shape(const problem *p) {
    return (gdn_linz_shape){p->B, p->T, p->H, p->Hkv, p->D, p->chunk, p->doc};
}

/* ---- forward ---------------------------------------------------------------------------------- */

static const struct {
    int B, T, H, Hkv, D, chunk, docs;
} cases[] = {
    {2, 1, 4, 2, 6, 16, 0},  {2, 2, 4, 2, 6, 16, 0},  {2, 37, 4, 2, 6, 16, 0}, {1, 70, 2, 2, 8, 32, 0},
    {2, 37, 4, 2, 6, 16, 1}, {2, 70, 4, 1, 4, 32, 1}, {3, 1, 2, 1, 4, 16, 1},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static void case_problem(problem *p, size_t c, unsigned long long seed) {
    problem_make(p, cases[c].B, cases[c].T, cases[c].H, cases[c].Hkv, cases[c].D, cases[c].chunk, cases[c].docs, seed);
}

static void test_forward_vs_naive(void **state) {
    (void)state;
    double worst = 0;
    for (size_t c = 0; c < N_CASES; c++) {
        problem p;
        case_problem(&p, c, 100 + c);
        const size_t no = (size_t)p.B * p.T * p.H * p.D;
        double *o = malloc(sizeof(double) * (no + 1)), *ref = malloc(sizeof(double) * (no + 1));
        const gdn_linz_shape s = problem_shape(&p);
        gdn_linz_fwd_f64(&s, 0, p.T, p.q, p.k, p.v, p.ll, p.scale, o);
        naive_linz(p.B, p.T, p.H, p.Hkv, p.D, p.q, p.k, p.v, p.ll, p.scale, p.starts, ref);
        const double e = rel(o, ref, no);
        if (e > worst) worst = e;
        if (e >= 1e-12) fprintf(stderr, "  case %zu: relative error %.3e\n", c, e);
        assert_true(e < 1e-12);
        /* fp32 follows fp64 */
        float *q32 = malloc(sizeof(float) * (no + 1)), *o32 = malloc(sizeof(float) * (no + 1));
        const size_t nk = (size_t)p.B * p.T * p.Hkv * p.D;
        float *k32 = malloc(sizeof(float) * (nk + 1)), *v32 = malloc(sizeof(float) * (nk + 1)), ll32[8];
        for (size_t i = 0; i < no; i++) q32[i] = (float)p.q[i];
        for (size_t i = 0; i < nk; i++) {
            k32[i] = (float)p.k[i];
            v32[i] = (float)p.v[i];
        }
        for (int h = 0; h < p.H; h++) ll32[h] = (float)p.ll[h];
        gdn_linz_fwd_f32(&s, 0, p.T, q32, k32, v32, ll32, (float)p.scale, o32);
        const double e32 = fd_rel_err_f32(o32, ref, no);
        assert_true(e32 < 1e-5);
        free(q32);
        free(o32);
        free(k32);
        free(v32);
        free(o);
        free(ref);
        problem_free(&p);
    }
    printf("linearized core vs naive recurrence: max relative error %.2e over %zu cases\n", worst, N_CASES);
}

/* One head without documents is the form gdn linearize measures (model/cpu/linearize.c, an
 * implementation of its own): q there is already scaled. */
static void test_forward_vs_linearize(void **state) {
    (void)state;
    problem p;
    problem_make(&p, 1, 45, 1, 1, 8, 16, 0, 7);
    const size_t n = (size_t)p.T * p.D;
    double *o = malloc(sizeof(double) * n), *ref = malloc(sizeof(double) * n), *qs = malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++) qs[i] = p.q[i] * p.scale;
    const gdn_linz_shape s = problem_shape(&p);
    gdn_linz_fwd_f64(&s, 0, p.T, p.q, p.k, p.v, p.ll, p.scale, o);
    assert_int_equal(gdn_lin_gdn_f64(p.T, p.D, p.D, qs, p.k, p.v, exp(p.ll[0]), 16, ref), 0);
    const double e = rel(o, ref, n);
    printf("linearized core vs gdn_lin_gdn (lambda %.3f): relative error %.2e\n", exp(p.ll[0]), e);
    assert_true(e < 1e-12);
    free(o);
    free(ref);
    free(qs);
    problem_free(&p);
}

/* Decoding: the queries of the last T - p0 positions with the earlier keys and values in front
 * (kv rows [B,kv_len,...], kv_len beyond what is filled) equal those rows of one pass. */
static void test_forward_after_prefix(void **state) {
    (void)state;
    problem p;
    problem_make(&p, 2, 40, 4, 2, 6, 16, 0, 11);
    const int T = p.T, H = p.H, Hkv = p.Hkv, D = p.D, len = 50;
    const size_t no = (size_t)p.B * T * H * D;
    double *full = malloc(sizeof(double) * no);
    const gdn_linz_shape s = problem_shape(&p);
    gdn_linz_fwd_f64(&s, 0, T, p.q, p.k, p.v, p.ll, p.scale, full);
    const int p0s[] = {1, 17, 39};
    for (int i = 0; i < 3; i++) {
        const int p0 = p0s[i], n = T - p0;
        double *kc = calloc((size_t)p.B * len * Hkv * D, sizeof(double)), *vc = calloc((size_t)p.B * len * Hkv * D, 8);
        double *qs = malloc(sizeof(double) * (size_t)p.B * n * H * D), *o = malloc(sizeof(double) * (size_t)p.B * n * H * D);
        for (int b = 0; b < p.B; b++) {
            memcpy(kc + (size_t)b * len * Hkv * D, p.k + (size_t)b * T * Hkv * D, sizeof(double) * (size_t)T * Hkv * D);
            memcpy(vc + (size_t)b * len * Hkv * D, p.v + (size_t)b * T * Hkv * D, sizeof(double) * (size_t)T * Hkv * D);
            memcpy(qs + (size_t)b * n * H * D, p.q + ((size_t)b * T + p0) * H * D, sizeof(double) * (size_t)n * H * D);
        }
        const gdn_linz_shape sn = {p.B, n, H, Hkv, D, 16, NULL};
        gdn_linz_fwd_f64(&sn, p0, len, qs, kc, vc, p.ll, p.scale, o);
        double worst = 0;
        for (int b = 0; b < p.B; b++) {
            const double e = rel(o + (size_t)b * n * H * D, full + ((size_t)b * T + p0) * H * D, (size_t)n * H * D);
            if (e > worst) worst = e;
        }
        printf("linearized core after %d earlier positions vs one pass: relative error %.2e\n", p0, worst);
        assert_true(worst < 1e-12);
        free(kc);
        free(vc);
        free(qs);
        free(o);
    }
    free(full);
    problem_free(&p);
}

/* ---- backward --------------------------------------------------------------------------------- */

typedef struct {
    problem *p;
    const double *w; /* loss = sum w . o */
    double *o;
} bwd_ctx;

static double core_loss(void *ctx) {
    bwd_ctx *c = ctx;
    const gdn_linz_shape s = problem_shape(c->p);
    gdn_linz_fwd_f64(&s, 0, c->p->T, c->p->q, c->p->k, c->p->v, c->p->ll, c->p->scale, c->o);
    double acc = 0;
    for (size_t i = 0; i < (size_t)c->p->B * c->p->T * c->p->H * c->p->D; i++) acc += c->w[i] * c->o[i];
    return acc;
}

static void test_backward_vs_fd(void **state) {
    (void)state;
    double worst = 0;
    for (size_t c = 0; c < N_CASES; c++) {
        problem p;
        case_problem(&p, c, 200 + c);
        const size_t no = (size_t)p.B * p.T * p.H * p.D, nk = (size_t)p.B * p.T * p.Hkv * p.D;
        double *w = malloc(sizeof(double) * (no + 1)), *o = malloc(sizeof(double) * (no + 1));
        double *dq = malloc(sizeof(double) * (no + 1)), *dk = malloc(sizeof(double) * (nk + 1));
        double *dv = malloc(sizeof(double) * (nk + 1)), *dl = calloc((size_t)p.H, sizeof(double));
        fd_fill_uniform(w, no, -1, 1, 300 + c);
        const gdn_linz_shape s = problem_shape(&p);
        gdn_linz_bwd_f64(&s, p.q, p.k, p.v, p.ll, p.scale, w, dq, dk, dv, dl);
        bwd_ctx ctx = {&p, w, o};
        /* up to two positions per document the form does not depend on lambda (the state is
         * c u^T / lambda, read by lambda q): the gradient is exactly 0 and the differences noise */
        const int ni = p.T > 2 ? 4 : 3;
        const double e[4] = {fd_check(core_loss, &ctx, p.q, dq, no, no, 1e-6),
                             fd_check(core_loss, &ctx, p.k, dk, nk, nk, 1e-6),
                             fd_check(core_loss, &ctx, p.v, dv, nk, nk, 1e-6),
                             ni > 3 ? fd_check(core_loss, &ctx, p.ll, dl, (size_t)p.H, (size_t)p.H, 1e-6) : 0};
        for (int h = 0; ni == 3 && h < p.H; h++) assert_true(fabs(dl[h]) < 1e-12);
        for (int i = 0; i < ni; i++) {
            if (e[i] > worst) worst = e[i];
            if (e[i] >= 1e-6) fprintf(stderr, "  case %zu input %d: relative error %.3e\n", c, i, e[i]);
            assert_true(e[i] < 1e-6); /* as the model gradient tests */
        }
        free(w);
        free(o);
        free(dq);
        free(dk);
        free(dv);
        free(dl);
        problem_free(&p);
    }
    printf("linearized core backward vs finite differences: max relative error %.2e over %zu cases\n", worst,
           N_CASES);
}

/* ---- in the model ----------------------------------------------------------------------------- */

static gdn_config lin_config(const char *mixers, int n_layers, int qk_norm, int qkv_bias) {
    gdn_config c = tiny_config(0, 0);
    c.n_layers = n_layers;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.attn_head_dim = 6;
    c.rope_theta = 500.0;
    c.qk_norm = qk_norm;
    c.qkv_bias = qkv_bias;
    snprintf(c.mixers, sizeof c.mixers, "%s", mixers);
    return c;
}

/* An S layer has attention's tensors and a balance factor per query head, which no other kind has. */
static void test_param_table(void **state) {
    (void)state;
    gdn_config c = lin_config("SA", 2, 1, 1), a = lin_config("AA", 2, 1, 1);
    gdn_param_table t, ta;
    gdn_param_table_build(&t, &c);
    gdn_param_table_build(&ta, &a);
    const gdn_param *ll = gdn_param_find(&t, "model.layers.0.attn.log_lambda");
    assert_non_null(ll);
    assert_int_equal(ll->ndim, 1);
    assert_int_equal(ll->shape[0], 4);
    assert_true(ll->no_decay);
    assert_null(gdn_param_find(&t, "model.layers.1.attn.log_lambda"));
    assert_int_equal(t.n, ta.n + 1);
    assert_int_equal(t.total, ta.total + 4);
    for (int i = 0; i < ta.n; i++) { /* every attention tensor, same shape */
        const gdn_param *p = gdn_param_find(&t, ta.p[i].name);
        assert_non_null(p);
        assert_int_equal(p->numel, ta.p[i].numel);
    }
    float *p32 = malloc(sizeof(float) * t.total);
    gdn_params_init(p32, &t, 1);
    for (int h = 0; h < 4; h++) assert_true(p32[ll->offset + (size_t)h] == 0.0f); /* lambda 1: the form as derived */
    free(p32);
    assert_int_equal(gdn_mixer_from_kind('S'), GDN_MIXER_S);
    assert_int_equal(gdn_mixer_from_name("linearized"), GDN_MIXER_S);
    assert_false(gdn_mixer_get(GDN_MIXER_S)->is_delta);
    gdn_param_table_free(&t);
    gdn_param_table_free(&ta);
}

/* Whole-model gradient against finite differences, optionally with documents in each row. */
static void check_grad(const char *pattern, int n_layers, int qk_norm, int bias, int docs) {
    model_case c;
    case_init(&c, lin_config(pattern, n_layers, qk_norm, bias), 2, 21, 42);
    unsigned char starts[42] = {0};
    if (docs) {
        starts[6] = starts[13] = starts[21 + 9] = 1;
        gdn_cpu_acts_set_doc_starts_f64(c.acts, starts);
    }
    double *g = case_grad(&c), worst = 0;
    for (int i = 0; i < c.t.n; i++) {
        const gdn_param *p = &c.t.p[i];
        double gn = 0;
        for (size_t j = 0; j < p->numel; j++) gn += g[p->offset + j] * g[p->offset + j];
        if (!(sqrt(gn) > 1e-6)) fprintf(stderr, "  %s: gradient norm %.3e\n", p->name, sqrt(gn));
        assert_true(sqrt(gn) > 1e-6);
        const double err = fd_check(case_loss, &c, c.params + p->offset, g + p->offset, p->numel, 16, 2e-6);
        if (err > worst) worst = err;
        if (err >= 1e-6) fprintf(stderr, "  %s: relative error %.3e\n", p->name, err);
        assert_true(err < 1e-6);
    }
    printf("model gradient vs finite differences (%s qk_norm=%d qkv_bias=%d%s): max relative error %.2e\n", pattern,
           qk_norm, bias, docs ? ", documents" : "", worst);
    free(g);
    case_free(&c);
}

static void test_model_gradient(void **state) {
    (void)state;
    check_grad("S", 2, 0, 0, 0);
    check_grad("S", 2, 1, 1, 0);
    check_grad("GSA", 3, 1, 0, 0);
    check_grad("SG", 2, 0, 1, 1);
}

/* Decoding a prompt, then segments, through carries with the KV cache equals one pass. */
static double decode_vs_full(const char *pattern, int n_layers, int P, int step) {
    const int B = 2, T = 30;
    model_case c;
    case_init(&c, lin_config(pattern, n_layers, 1, 1), B, T, 23);
    const size_t Vo = (size_t)c.t.cfg.vocab_size;
    const double *full = case_logits(&c);
    case_carries k;
    case_carries_make(&k, &c.t.cfg, B, T, 1);
    double *rec = malloc((size_t)B * T * Vo * sizeof *rec);
    int cur = 0;
    for (int t0 = 0; t0 < T;) {
        const int n = t0 == 0 ? P : (T - t0 < step ? T - t0 : step);
        case_decode_segment(&c, t0, n, t0 ? &k.c[cur] : NULL, &k.c[1 - cur], rec);
        cur = 1 - cur;
        t0 += n;
    }
    const double err = fd_rel_err(rec, full, (size_t)B * T * Vo);
    printf("decoding %s (prompt %d, then %d at a time) vs one pass: relative error %.2e\n", pattern, P, step, err);
    case_carries_free(&k);
    free(rec);
    case_free(&c);
    return err;
}

static void test_model_decoding(void **state) {
    (void)state;
    assert_true(decode_vs_full("S", 2, 1, 1) < 1e-12);
    assert_true(decode_vs_full("GSA", 3, 7, 1) < 1e-12);
    assert_true(decode_vs_full("SAG", 3, 5, 4) < 1e-12);
}

static jmp_buf die_jump;
static char die_message[1024];

static void die_to_test(const char *message) {
    snprintf(die_message, sizeof die_message, "%s", message);
    longjmp(die_jump, 1);
}

static void *noop_state(void *u, int l, const void *d, void *s, size_t n) {
    (void)u, (void)l, (void)d, (void)s, (void)n;
    return NULL;
}
static void noop_halo(void *u, int l, void *const *x, const void *const *y, const size_t *n) {
    (void)u, (void)l, (void)x, (void)y, (void)n;
}
static void noop_state_out(void *u, int l, const void *s, size_t n) { (void)u, (void)l, (void)s, (void)n; }
static void noop_state_in(void *u, int l, const void *s, size_t n) { (void)u, (void)l, (void)s, (void)n; }
static void noop_kv_fwd(void *u, int l, void *const *x, const void *const *y, size_t n) {
    (void)u, (void)l, (void)x, (void)y, (void)n;
}
static void noop_kv_bwd(void *u, int l, void *const *x, void *const *y, size_t n) {
    (void)u, (void)l, (void)x, (void)y, (void)n;
}

/* Under sequence-parallel hooks an S layer refuses to run, naming the layer. */
static void test_refuses_sequence_parallel(void **state) {
    (void)state;
    model_case c;
    case_init(&c, lin_config("GS", 2, 0, 0), 1, 8, 3);
    gdn_seq_hooks h = {0};
    h.fwd_halo = noop_halo;
    h.bwd_halo = noop_halo;
    h.fwd_state_in = noop_state;
    h.bwd_state_out = noop_state;
    h.fwd_state_out = noop_state_out;
    h.bwd_state_in = noop_state_in;
    h.attn_kv_fwd = noop_kv_fwd;
    h.attn_kv_bwd = noop_kv_bwd;
    gdn_cpu_acts_set_seq_hooks_f64(c.acts, &h);
    gdn_set_die_handler(die_to_test);
    if (setjmp(die_jump) == 0) {
        int nv;
        gdn_cpu_forward_f64(c.acts, &c.t, c.params, c.tokens, c.targets, 0, &nv, NULL, NULL);
        gdn_set_die_handler(NULL);
        fail_msg("a linearized layer ran under sequence-parallel hooks");
    }
    gdn_set_die_handler(NULL);
    assert_non_null(strstr(die_message, "linearized layer (mixer S)"));
    assert_non_null(strstr(die_message, "layer 1"));
    case_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_vs_naive),      cmocka_unit_test(test_forward_vs_linearize),
        cmocka_unit_test(test_forward_after_prefix),  cmocka_unit_test(test_backward_vs_fd),
        cmocka_unit_test(test_param_table),           cmocka_unit_test(test_model_gradient),
        cmocka_unit_test(test_model_decoding),        cmocka_unit_test(test_refuses_sequence_parallel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
