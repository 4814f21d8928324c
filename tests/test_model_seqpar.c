/* The sequence-parallel hooks of the CPU model, without any communication: segments of one
 * sequence run one after another in this process, the hooks handing states, halos and their
 * gradients over through memory, in both ways docs/design.md section 5 describes (passing the state on, or
 * folding every earlier segment's affine map), and for attention layers every earlier segment's
 * keys and values and, backward, their gradients. Loss, logits and every parameter gradient must
 * equal one pass over the whole sequence (fp64). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/check.h"
#include "model/cpu/model_cpu.h"
#include "tests/model_fixture.h"
#include "tests/ref/fd.h"

#define MAX_SEG 4
#define MAX_LAYERS 4

enum { PASS_STATE, FOLD_MAPS };

/* What the segments hand each other, per segment boundary and layer. */
typedef struct {
    int mode, n_seg, B, H, K, V, Wm1, HK, HV;
    size_t n_state, n_map;
    int C, len[MAX_SEG], pos[MAX_SEG];        /* attention: kv row width; segment lengths, starts */
    int last[MAX_SEG][8];                     /* documents: each segment's last start per row */
    double *S[MAX_SEG + 1][MAX_LAYERS];       /* state entering segment i (passing) */
    double *M[MAX_SEG][MAX_LAYERS], *Hm[MAX_SEG][MAX_LAYERS], *E[MAX_SEG][MAX_LAYERS]; /* maps */
    double *dS[MAX_SEG + 1][MAX_LAYERS];      /* gradient of the state entering segment i */
    double *halo[MAX_SEG + 1][MAX_LAYERS][3]; /* tail rows of segment i-1 */
    double *dhalo[MAX_SEG + 1][MAX_LAYERS][3];/* gradient of those rows, from segment i */
    double *kv[MAX_SEG][MAX_LAYERS][2];       /* attention: segment i's keys and values [B,len,C] */
    double *dkv[MAX_SEG][MAX_LAYERS][2];      /* the later segments' gradients of them, summed */
} exchange;

typedef struct {
    exchange *x;
    int seg;
} seg_user;

static size_t halo_n(const exchange *x, int i) { return (size_t)x->B * x->Wm1 * (i < 2 ? x->HK : x->HV); }

/* A copy of n doubles that outlives the hook call (a buffer the model passes is its own). */
static double *kept_copy(const void *src, size_t n) {
    double *d = malloc(n * sizeof *d);
    memcpy(d, src, n * sizeof *d);
    return d;
}

static void copy_or_zero(double *dst, const double *src, size_t n) {
    if (src) memcpy(dst, src, n * sizeof *dst);
    else memset(dst, 0, n * sizeof *dst);
}

/* y = M x + c (transpose: M^T x + c) per (b, h); y may alias c but not x. */
static void map_apply(const exchange *x, const double *M, const double *in, int transpose, double *y) {
    const int K = x->K, V = x->V;
    double *t = malloc((size_t)K * V * sizeof *t);
    for (int bh = 0; bh < x->B * x->H; bh++) {
        const double *Mb = M + (size_t)bh * K * K, *xb = in + (size_t)bh * K * V;
        for (int i = 0; i < K; i++)
            for (int j = 0; j < V; j++) {
                double acc = 0;
                for (int l = 0; l < K; l++)
                    acc += (transpose ? Mb[(size_t)l * K + i] : Mb[(size_t)i * K + l]) *
                           xb[(size_t)l * V + j];
                t[(size_t)i * V + j] = acc;
            }
        for (size_t e = 0; e < (size_t)K * V; e++) y[(size_t)bh * K * V + e] += t[e];
    }
    free(t);
}

/* The affine maps of layer l folded from segment `from` towards segment `to` (excluded), starting
 * from a zero state: forward (transpose 0, from < to) S = c[j] + M[j] S, the state entering `to`;
 * backward (transpose 1, from > to) g = c[j] + M[j]^T g, the gradient leaving `to`. */
static void fold_maps(const exchange *x, int l, int from, int to, int transpose,
                      double *c[][MAX_LAYERS], double *out) {
    const int step = from < to ? 1 : -1;
    double *S = calloc(x->n_state, sizeof *S), *next = malloc(x->n_state * sizeof *next);
    for (int j = from; j != to; j += step) {
        memcpy(next, c[j][l], x->n_state * sizeof *next);
        map_apply(x, x->M[j][l], S, transpose, next);
        memcpy(S, next, x->n_state * sizeof *S);
    }
    memcpy(out, S, x->n_state * sizeof *S);
    free(S);
    free(next);
}

/* The hooks (model/seq_hooks.h) see double buffers here (the fp64 model) and check the sizes the
 * model passes. */
static void fwd_halo(void *user, int l, void *const halo[3], const void *const tail[3], const size_t n_halo[3]) {
    seg_user *u = user;
    exchange *x = u->x;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(n_halo[i], halo_n(x, i));
        copy_or_zero(halo[i], x->halo[u->seg][l][i], halo_n(x, i));
        x->halo[u->seg + 1][l][i] = kept_copy(tail[i], halo_n(x, i));
    }
}

static void *fwd_state_in(void *user, int l, const void *delta, void *S_in_v, size_t n_state) {
    seg_user *u = user;
    exchange *x = u->x;
    const gdn_cpu_delta_args_f64 *d = delta;
    double *S_in = S_in_v;
    assert_int_equal(n_state, x->n_state);
    if (x->mode == PASS_STATE) {
        copy_or_zero(S_in, x->S[u->seg][l], x->n_state);
        return NULL;
    }
    /* this segment's map, for the later segments; its own state folds the earlier maps */
    x->M[u->seg][l] = malloc(x->n_map * sizeof(double));
    x->Hm[u->seg][l] = malloc(x->n_state * sizeof(double));
    gdn_delta_transition_f64(d->shape, d->k, d->v, d->g, d->beta, x->M[u->seg][l], x->Hm[u->seg][l]);
    fold_maps(x, l, 0, u->seg, 0, x->Hm, S_in);
    return NULL;
}

static void fwd_state_out(void *user, int l, const void *S_out, size_t n_state) {
    seg_user *u = user;
    exchange *x = u->x;
    assert_int_equal(n_state, x->n_state);
    if (x->mode != PASS_STATE) return;
    x->S[u->seg + 1][l] = kept_copy(S_out, x->n_state);
}

static void *bwd_state_out(void *user, int l, const void *delta, void *dS_out_v, size_t n_state) {
    seg_user *u = user;
    exchange *x = u->x;
    const gdn_cpu_delta_args_f64 *d = delta;
    double *dS_out = dS_out_v;
    assert_int_equal(n_state, x->n_state);
    if (x->mode == PASS_STATE) {
        copy_or_zero(dS_out, x->dS[u->seg + 1][l], x->n_state);
        return NULL;
    }
    x->E[u->seg][l] = malloc(x->n_state * sizeof(double));
    gdn_delta_transition_adjoint_f64(d->shape, d->q, d->k, d->g, d->beta, d->scale, d->d_o,
                                     x->E[u->seg][l]);
    fold_maps(x, l, x->n_seg - 1, u->seg, 1, x->E, dS_out);
    return NULL;
}

static void bwd_state_in(void *user, int l, const void *dS_in, size_t n_state) {
    seg_user *u = user;
    exchange *x = u->x;
    assert_int_equal(n_state, x->n_state);
    if (x->mode != PASS_STATE) return;
    x->dS[u->seg][l] = kept_copy(dS_in, x->n_state);
}

static void bwd_halo(void *user, int l, void *const dtail[3], const void *const dhalo[3], const size_t n_halo[3]) {
    seg_user *u = user;
    exchange *x = u->x;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(n_halo[i], halo_n(x, i));
        copy_or_zero(dtail[i], x->dhalo[u->seg + 1][l][i], halo_n(x, i));
        x->dhalo[u->seg][l][i] = kept_copy(dhalo[i], halo_n(x, i));
    }
}

/* Attention: the prefix [B,pos+len,C] from the earlier segments' keys and values and this one's. */
static void attn_kv_fwd(void *user, int l, void *const all[2], const void *const kv[2], size_t n) {
    seg_user *u = user;
    exchange *x = u->x;
    const int me = u->seg, Tk = x->pos[me] + x->len[me];
    const size_t C = (size_t)x->C;
    assert_int_equal(n, (size_t)x->B * x->len[me] * C);
    for (int i = 0; i < 2; i++) {
        x->kv[me][l][i] = kept_copy(kv[i], n);
        for (int j = 0; j <= me; j++)
            for (int b = 0; b < x->B; b++)
                memcpy((double *)all[i] + ((size_t)b * Tk + x->pos[j]) * C,
                       x->kv[j][l][i] + (size_t)b * x->len[j] * C, (size_t)x->len[j] * C * sizeof(double));
    }
}

/* Backward, last segment first: this segment's rows of dkv_all plus what the later segments left
 * for it; its gradients of the earlier segments' rows are left for them. */
static void attn_kv_bwd(void *user, int l, void *const dkv[2], void *const dkv_all[2], size_t n) {
    seg_user *u = user;
    exchange *x = u->x;
    const int me = u->seg, Tk = x->pos[me] + x->len[me];
    const size_t C = (size_t)x->C;
    assert_int_equal(n, (size_t)x->B * x->len[me] * C);
    for (int i = 0; i < 2; i++) {
        const double *all = dkv_all[i];
        for (int j = 0; j <= me; j++) {
            const size_t nj = (size_t)x->B * x->len[j] * C;
            if (!x->dkv[j][l][i]) x->dkv[j][l][i] = calloc(nj, sizeof(double));
            for (int b = 0; b < x->B; b++)
                for (size_t e = 0; e < (size_t)x->len[j] * C; e++)
                    x->dkv[j][l][i][(size_t)b * x->len[j] * C + e] += all[((size_t)b * Tk + x->pos[j]) * C + e];
        }
        memcpy(dkv[i], x->dkv[me][l][i], n * sizeof(double));
    }
}

/* Documents: the largest last start of the earlier segments (they ran first). */
static void doc_prev(void *user, const int *last, int *prev, int B) {
    seg_user *u = user;
    exchange *x = u->x;
    assert_int_equal(B, x->B);
    for (int b = 0; b < B; b++) {
        x->last[u->seg][b] = last[b];
        prev[b] = -1;
        for (int j = 0; j < u->seg; j++)
            if (x->last[j][b] > prev[b]) prev[b] = x->last[j][b];
    }
}

/* Frees everything handed over and clears the pointers (the next pass starts empty). */
static void exchange_clear(exchange *x) {
    double **all = (double **)&x->S[0][0];
    /* every member from S to the end is a double pointer */
    size_t n = (sizeof *x - offsetof(exchange, S)) / sizeof(double *);
    for (size_t i = 0; i < n; i++) {
        free(all[i]);
        all[i] = NULL;
    }
}

/* Runs the segments [len[0], len[1], ...] of tokens [B,T] and compares loss, logits and the
 * gradient with one pass; returns the largest relative error. */
static double run_segments_docs(const char *mixers, int mode, const int *len, int n_seg,
                                const unsigned char *starts);

static double run_segments_of(const char *mixers, int mode, const int *len, int n_seg) {
    return run_segments_docs(mixers, mode, len, n_seg, NULL);
}

/* starts [B,T] (NULL: none): the document starts of the whole sequence, each segment given its
 * own rows of them. */
static double run_segments_docs(const char *mixers, int mode, const int *len, int n_seg,
                                const unsigned char *starts) {
    const gdn_config cfg = fixture_config(mixers, 0);
    gdn_param_table t;
    gdn_param_table_build(&t, &cfg);
    double *P = fixture_params(&t, 17, 5.0); /* decays weak enough to carry across segments */
    const int B = 2;
    int T = 0;
    for (int s = 0; s < n_seg; s++) T += len[s];
    int *tokens = malloc((size_t)B * T * sizeof(int)), *targets = malloc((size_t)B * T * sizeof(int));
    double *r = malloc((size_t)B * T * 2 * sizeof *r);
    fd_fill_uniform(r, (size_t)B * T * 2, 0.0, 1.0, 5);
    for (int i = 0; i < B * T; i++) {
        tokens[i] = (int)(r[i] * cfg.vocab_size);
        targets[i] = (i % 9 == 4) ? -1 : (int)(r[B * T + i] * cfg.vocab_size);
    }
    free(r);
    const double gs = 1.0 / (B * T);
    const size_t Vv = (size_t)cfg.vocab_size;

    /* one pass over the whole sequence */
    gdn_cpu_acts_f64 *whole = gdn_cpu_acts_create_f64(&t, B, T);
    gdn_cpu_acts_set_doc_starts_f64(whole, starts);
    double *g_ref = calloc(t.total, sizeof *g_ref);
    int nv_ref = 0;
    double loss_ref = gdn_cpu_forward_f64(whole, &t, P, tokens, targets, gs, &nv_ref, NULL, NULL);
    gdn_cpu_backward_f64(whole, &t, P, g_ref);
    int nv_none = 0;
    gdn_cpu_forward_f64(whole, &t, P, tokens, NULL, 0.0, &nv_none, NULL, NULL);
    const double *logits_ref = gdn_cpu_logits_f64(whole);

    /* the segments, forward in order, backward in reverse order */
    exchange x = {.mode = mode, .n_seg = n_seg, .B = B, .H = cfg.n_heads, .K = cfg.head_dim,
                  .V = gdn_config_head_v(&cfg), .Wm1 = cfg.conv_width - 1};
    x.HK = x.H * x.K;
    x.HV = x.H * x.V;
    x.n_state = (size_t)B * x.H * x.K * x.V;
    x.n_map = (size_t)B * x.H * x.K * x.K;
    x.C = gdn_config_kv_heads(&cfg) * gdn_config_attn_dim(&cfg);
    for (int s = 0, p = 0; s < n_seg; p += len[s], s++) {
        x.len[s] = len[s];
        x.pos[s] = p;
    }
    gdn_cpu_acts_f64 *acts[MAX_SEG];
    seg_user users[MAX_SEG];
    double *g = calloc(t.total, sizeof *g), loss = 0;
    double *logits = malloc((size_t)B * T * Vv * sizeof *logits);
    int nv = 0, t0 = 0;
    for (int s = 0; s < n_seg; s++) {
        const int Ts = len[s];
        int *tok = malloc((size_t)B * Ts * sizeof(int)), *tgt = malloc((size_t)B * Ts * sizeof(int));
        for (int b = 0; b < B; b++) {
            memcpy(tok + b * Ts, tokens + b * T + t0, (size_t)Ts * sizeof(int));
            memcpy(tgt + b * Ts, targets + b * T + t0, (size_t)Ts * sizeof(int));
        }
        users[s] = (seg_user){&x, s};
        const gdn_seq_hooks h = {&users[s], fwd_halo, fwd_state_in, fwd_state_out, bwd_state_out,
                                 bwd_state_in, bwd_halo, attn_kv_fwd, attn_kv_bwd, doc_prev, t0};
        acts[s] = gdn_cpu_acts_create_f64(&t, B, Ts);
        gdn_cpu_acts_set_seq_hooks_f64(acts[s], &h);
        if (starts) {
            unsigned char *st = malloc((size_t)B * Ts);
            for (int b = 0; b < B; b++) memcpy(st + b * Ts, starts + (size_t)b * T + t0, (size_t)Ts);
            gdn_cpu_acts_set_doc_starts_f64(acts[s], st);
            free(st);
        }
        int n = 0;
        loss += gdn_cpu_forward_f64(acts[s], &t, P, tok, tgt, gs, &n, NULL, NULL);
        nv += n;
        free(tok);
        free(tgt);
        t0 += Ts;
    }
    for (int s = n_seg - 1; s >= 0; s--) gdn_cpu_backward_f64(acts[s], &t, P, g);
    /* logits: a second forward without targets (the hooks hand over the same values again) */
    exchange_clear(&x);
    t0 = 0;
    for (int s = 0; s < n_seg; s++) {
        const int Ts = len[s];
        int *tok = malloc((size_t)B * Ts * sizeof(int));
        for (int b = 0; b < B; b++) memcpy(tok + b * Ts, tokens + b * T + t0, (size_t)Ts * sizeof(int));
        int n = 0;
        gdn_cpu_forward_f64(acts[s], &t, P, tok, NULL, 0.0, &n, NULL, NULL);
        for (int b = 0; b < B; b++)
            memcpy(logits + ((size_t)b * T + t0) * Vv, gdn_cpu_logits_f64(acts[s]) + (size_t)b * Ts * Vv,
                   (size_t)Ts * Vv * sizeof(double));
        free(tok);
        t0 += Ts;
    }
    assert_int_equal(nv, nv_ref);
    double e_loss = fabs(loss - loss_ref) / fabs(loss_ref);
    double e_logits = fd_rel_err(logits, logits_ref, (size_t)B * T * Vv);
    double e_grad = fd_rel_err(g, g_ref, t.total), worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < t.n; i++) {
        double e = fd_rel_err(g + t.p[i].offset, g_ref + t.p[i].offset, t.p[i].numel);
        if (e > worst) {
            worst = e;
            worst_name = t.p[i].name;
        }
    }
    printf("  %s, %s%s, segments", mixers, mode == PASS_STATE ? "state passed on" : "affine maps folded",
           starts ? ", documents" : "");
    for (int s = 0; s < n_seg; s++) printf(" %d", len[s]);
    printf(": loss %.1e logits %.1e gradient %.1e (worst tensor %.1e, %s)\n", e_loss, e_logits, e_grad,
           worst, worst_name);
    exchange_clear(&x);
    for (int s = 0; s < n_seg; s++) gdn_cpu_acts_free_f64(acts[s]);
    gdn_cpu_acts_free_f64(whole);
    gdn_param_table_free(&t);
    double m = e_loss;
    if (e_logits > m) m = e_logits;
    if (worst > m) m = worst;
    free(P);
    free(tokens);
    free(targets);
    free(g);
    free(g_ref);
    free(logits);
    return m;
}

static double run_segments(int mode, const int *len, int n_seg) {
    return run_segments_of("GG", mode, len, n_seg);
}

static const int split2[] = {20, 20}, split3[] = {14, 3, 23}, split4[] = {16, 16, 5, 3};

static void test_pass_state(void **state) {
    (void)state;
    assert_true(run_segments(PASS_STATE, split2, 2) < 1e-12);
    assert_true(run_segments(PASS_STATE, split3, 3) < 1e-12);
    assert_true(run_segments(PASS_STATE, split4, 4) < 1e-12);
}

static void test_fold_maps(void **state) {
    (void)state;
    assert_true(run_segments(FOLD_MAPS, split2, 2) < 1e-12);
    assert_true(run_segments(FOLD_MAPS, split3, 3) < 1e-12);
    assert_true(run_segments(FOLD_MAPS, split4, 4) < 1e-12);
}

/* Every mixer kind of model/mixer.h in one model, both exchanges. */
static void test_mixers_gdml(void **state) {
    (void)state;
    assert_true(run_segments_of("GDML", PASS_STATE, split2, 2) < 1e-12);
    assert_true(run_segments_of("GDML", FOLD_MAPS, split2, 2) < 1e-12);
    assert_true(run_segments_of("GDML", FOLD_MAPS, split3, 3) < 1e-12);
}

/* Hybrids with softmax-attention layers (grouped kv heads, q/k norms, biases): every segment
 * attends over the keys and values of the earlier ones, at their global RoPE positions; both
 * exchanges of the delta-rule layers; segments of unequal length, some shorter than a block. */
static void test_attention_layers(void **state) {
    (void)state;
    assert_true(run_segments_of("GA", PASS_STATE, split2, 2) < 1e-12);
    assert_true(run_segments_of("GA", FOLD_MAPS, split3, 3) < 1e-12);
    assert_true(run_segments_of("AGGA", PASS_STATE, split4, 4) < 1e-12);
    assert_true(run_segments_of("GGAA", FOLD_MAPS, split4, 4) < 1e-12);
    assert_true(run_segments_of("A", PASS_STATE, split3, 3) < 1e-12);
}

/* Documents: starts inside segments, exactly at segment edges (positions 20, 14, 17, 32, 37),
 * at 1, documents shorter than the convolution width and than a chunk, and rows that differ;
 * every mixer kind and attention, both exchanges, 2 to 4 segments. Exact against one pass over
 * the whole packed sequence (itself checked against documents run one by one in test_docs). */
static void test_documents(void **state) {
    (void)state;
    enum { B = 2, T = 40 };
    unsigned char st[B * T] = {0};
    const int row0[] = {1, 3, 5, 14, 20, 22, 37}, row1[] = {7, 16, 17, 18, 32, 33};
    for (size_t i = 0; i < sizeof row0 / sizeof *row0; i++) st[row0[i]] = 1;
    for (size_t i = 0; i < sizeof row1 / sizeof *row1; i++) st[T + row1[i]] = 1;
    st[0] = 1;
    assert_true(run_segments_docs("GDML", PASS_STATE, split2, 2, st) < 1e-12);
    assert_true(run_segments_docs("GDML", FOLD_MAPS, split2, 2, st) < 1e-12);
    assert_true(run_segments_docs("GDML", FOLD_MAPS, split3, 3, st) < 1e-12);
    assert_true(run_segments_docs("GA", PASS_STATE, split3, 3, st) < 1e-12);
    assert_true(run_segments_docs("AGGA", FOLD_MAPS, split4, 4, st) < 1e-12);
    assert_true(run_segments_docs("GGAA", PASS_STATE, split4, 4, st) < 1e-12);
    /* random packings: documents of 1 to 12 tokens, starts falling anywhere against the edges */
    const int *splits[3] = {split2, split3, split4}, n_split[3] = {2, 3, 4};
    const char *kinds[3] = {"GDML", "AG", "MA"};
    for (unsigned seed = 1; seed <= 6; seed++) {
        unsigned r = seed * 2654435761u;
        memset(st, 0, sizeof st);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T;) {
                r = r * 1103515245u + 12345u;
                t += 1 + (int)((r >> 16) % 12);
                if (t < T) st[b * T + t] = 1;
            }
        const int k = (int)(seed % 3);
        assert_true(run_segments_docs(kinds[k], seed & 1 ? FOLD_MAPS : PASS_STATE, splits[k], n_split[k], st) <
                    1e-12);
    }
}

/* ---- a CPU hook may not hand back a ready event (model/seq_hooks.h) ------------------------- */
static jmp_buf die_jump;
static char die_message[2048];
static int fake_event;

static void die_to_test(const char *message) {
    snprintf(die_message, sizeof die_message, "%s", message);
    longjmp(die_jump, 1);
}

static void zero_halo(void *user, int l, void *const halo[3], const void *const tail[3], const size_t n[3]) {
    (void)user, (void)l, (void)tail;
    for (int i = 0; i < 3; i++) memset(halo[i], 0, n[i] * sizeof(double));
}
static void *event_state_in(void *user, int l, const void *delta, void *S_in, size_t n) {
    (void)user, (void)l, (void)delta;
    memset(S_in, 0, n * sizeof(double));
    return &fake_event;
}
static void drop_state(void *user, int l, const void *S, size_t n) { (void)user, (void)l, (void)S, (void)n; }
static void *zero_state(void *user, int l, const void *delta, void *S, size_t n) {
    (void)user, (void)l, (void)delta;
    memset(S, 0, n * sizeof(double));
    return NULL;
}
static void zero_dtail(void *user, int l, void *const dtail[3], const void *const dhalo[3], const size_t n[3]) {
    zero_halo(user, l, dtail, (const void *const *)dhalo, n);
}

static void test_cpu_hook_event_refused(void **state) {
    (void)state;
    const gdn_config cfg = fixture_config("G", 0);
    static gdn_param_table t; /* static: kept across the longjmp */
    gdn_param_table_build(&t, &cfg);
    double *P = fixture_params(&t, 3, 5.0);
    const int B = 1, T = 8;
    int tokens[8] = {1, 2, 3, 4, 5, 6, 7, 8}, n = 0;
    static gdn_cpu_acts_f64 *a;
    a = gdn_cpu_acts_create_f64(&t, B, T);
    const gdn_seq_hooks h = {NULL, zero_halo, event_state_in, drop_state, zero_state, drop_state, zero_dtail,
                             NULL, NULL, NULL, 0};
    gdn_cpu_acts_set_seq_hooks_f64(a, &h);
    die_message[0] = 0;
    gdn_set_die_handler(die_to_test);
    const int died = setjmp(die_jump) != 0;
    if (!died) gdn_cpu_forward_f64(a, &t, P, tokens, NULL, 0.0, &n, NULL, NULL);
    gdn_set_die_handler(NULL);
    gdn_cpu_acts_free_f64(a);
    gdn_param_table_free(&t);
    free(P);
    if (!died) fail_msg("a ready event from the CPU model's fwd_state_in hook was accepted");
    assert_non_null(strstr(die_message, "returned a ready event"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pass_state),
        cmocka_unit_test(test_fold_maps),
        cmocka_unit_test(test_mixers_gdml),
        cmocka_unit_test(test_attention_layers),
        cmocka_unit_test(test_documents),
        cmocka_unit_test(test_cpu_hook_event_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
