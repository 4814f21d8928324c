/* Documents packed into the rows of a batch (docs/design.md section 3.8): every CPU kernel and
 * the whole model, given document starts, must give exactly (fp64, to rounding) what the
 * documents give run one by one, forward and backward:
 * - the chunked delta rule of every mixer kind (starts at chunk edges, inside chunks, at 0 and
 *   1, documents of one token; an initial state entering a row's first document only when that
 *   row does not start one at 0), and its affine maps (a start zeroes the map of everything
 *   before it);
 * - the short convolution (documents shorter than its width), softmax attention
 *   (block-diagonal causal) and the whole model with every layer kind;
 * - finite differences of the gradients with resets;
 * - random packings (seeded: every case is reproducible from the printed seed, and the suite
 *   costs the same on every run, which a coverage-guided fuzzer of a numeric comparison would
 *   not improve on). */
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
#include "model/params.h"
#include "tests/model_fixture.h"
#include "tests/ref/fd.h"

#define TOL 1e-12

static double *rnd(size_t n, double lo, double hi, unsigned long long seed) {
    double *x = malloc((n ? n : 1) * sizeof *x);
    fd_fill_uniform(x, n, lo, hi, seed);
    return x;
}

static double *zeros(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

/* Rows [s, s+len) of row b of x [B,T,w] into dst [len,w], or back. */
static void rows_get(double *dst, const double *x, int b, int s, int len, int T, size_t w) {
    memcpy(dst, x + ((size_t)b * T + s) * w, (size_t)len * w * sizeof(double));
}
static void rows_put(double *x, const double *src, int b, int s, int len, int T, size_t w) {
    memcpy(x + ((size_t)b * T + s) * w, src, (size_t)len * w * sizeof(double));
}

/* Documents of row b: the next start after s (or T). Position 0 always begins one. */
static int doc_end(const unsigned char *starts, int b, int s, int T) {
    int e = s + 1;
    while (e < T && !starts[(size_t)b * T + e]) e++;
    return e;
}

static double worst(double a, double b) { return a > b ? a : b; }

/* ---- the delta rule ------------------------------------------------------------------------- */

typedef struct {
    gdn_delta_shape s;
    int *doc;
    double *q, *k, *v, *g, *beta, *h0, *d_o, *dht;
    size_t nqk, nv, ng, nst;
} delta_case;

static void delta_case_make(delta_case *c, int variant, int B, int T, int H, int K, int V, int chunk,
                            const unsigned char *starts, unsigned long long seed) {
    memset(c, 0, sizeof *c);
    c->s = (gdn_delta_shape){B, T, H, K, V, chunk, 0, variant, NULL};
    c->nqk = (size_t)B * T * H * K;
    c->nv = (size_t)B * T * H * V;
    c->ng = (size_t)B * T * H;
    c->nst = (size_t)B * H * K * V;
    c->q = rnd(c->nqk, -1, 1, seed);
    c->k = rnd(c->nqk, -1, 1, seed + 1);
    for (size_t r = 0; r < c->ng; r++) { /* unit keys keep the rule contractive */
        double n2 = 0;
        for (int i = 0; i < K; i++) n2 += c->k[r * K + i] * c->k[r * K + i];
        for (int i = 0; i < K; i++) c->k[r * K + i] /= sqrt(n2) + 1e-9;
    }
    c->v = rnd(c->nv, -1, 1, seed + 2);
    c->g = rnd(c->ng, -0.6, -0.01, seed + 3);
    c->beta = rnd(c->ng, 0.05, 1.0, seed + 4);
    c->h0 = rnd(c->nst, -0.5, 0.5, seed + 5);
    c->d_o = rnd(c->nv, -1, 1, seed + 6);
    c->dht = rnd(c->nst, -1, 1, seed + 7);
    c->doc = malloc(((size_t)B * T + 1) * sizeof(int));
    gdn_doc_build(c->doc, starts, NULL, B, T);
    c->s.doc = c->doc;
}

static void delta_case_free(delta_case *c) {
    double *all[] = {c->q, c->k, c->v, c->g, c->beta, c->h0, c->d_o, c->dht};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    free(c->doc);
}

/* Packed vs one by one: o, ht, dq, dk, dv, dg, dbeta, dh0. Row b's first document takes h0 (when
 * with_h0) unless starts marks position 0; the last one's leaving state is ht and takes dht. */
static double delta_packed_vs_docs(const delta_case *c, const unsigned char *starts, int with_h0) {
    const gdn_delta_shape *s = &c->s;
    const int B = s->B, T = s->T, H = s->H, K = s->K, V = s->V;
    const size_t wk = (size_t)H * K, wv = (size_t)H * V, wg = (size_t)H, KV = (size_t)H * K * V;
    const double scale = 1.0 / sqrt((double)K);
    const double *h0 = with_h0 ? c->h0 : NULL;
    double *o = zeros(c->nv), *ht = zeros(c->nst), *dq = zeros(c->nqk), *dk = zeros(c->nqk);
    double *dv = zeros(c->nv), *dg = zeros(c->ng), *dbeta = zeros(c->ng), *dh0 = zeros(c->nst);
    gdn_delta_fwd_f64(s, c->q, c->k, c->v, c->g, c->beta, scale, h0, o, ht);
    gdn_delta_bwd_f64(s, c->q, c->k, c->v, c->g, c->beta, scale, h0, c->d_o, c->dht, dq, dk, dv, dg, dbeta, dh0);

    double *ro = zeros(c->nv), *rht = zeros(c->nst), *rdq = zeros(c->nqk), *rdk = zeros(c->nqk);
    double *rdv = zeros(c->nv), *rdg = zeros(c->ng), *rdb = zeros(c->ng), *rdh0 = zeros(c->nst);
    double *b1[16];
    for (int i = 0; i < 16; i++) b1[i] = zeros((size_t)T * (wk > wv ? wk : wv) + KV);
    for (int b = 0; b < B; b++)
        for (int st = 0, en; st < T; st = en) {
            en = doc_end(starts, b, st, T);
            const int n = en - st;
            gdn_delta_shape one = *s;
            one.B = 1;
            one.T = n;
            one.doc = NULL;
            double *q = b1[0], *k = b1[1], *v = b1[2], *g = b1[3], *be = b1[4], *d_o = b1[5];
            rows_get(q, c->q, b, st, n, T, wk);
            rows_get(k, c->k, b, st, n, T, wk);
            rows_get(v, c->v, b, st, n, T, wv);
            rows_get(g, c->g, b, st, n, T, wg);
            rows_get(be, c->beta, b, st, n, T, wg);
            rows_get(d_o, c->d_o, b, st, n, T, wv);
            const int first = st == 0 && !starts[(size_t)b * T], last = en == T;
            const double *hin = first && h0 ? h0 + b * KV : NULL, *dhout = last ? c->dht + b * KV : NULL;
            double *oo = b1[6], *hh = b1[7];
            gdn_delta_fwd_f64(&one, q, k, v, g, be, scale, hin, oo, hh);
            rows_put(ro, oo, b, st, n, T, wv);
            if (last) memcpy(rht + b * KV, hh, KV * sizeof(double));
            double *xq = b1[8], *xk = b1[9], *xv = b1[10], *xg = b1[11], *xb = b1[12], *xh = b1[13];
            gdn_delta_bwd_f64(&one, q, k, v, g, be, scale, hin, d_o, dhout, xq, xk, xv, xg, xb, xh);
            rows_put(rdq, xq, b, st, n, T, wk);
            rows_put(rdk, xk, b, st, n, T, wk);
            rows_put(rdv, xv, b, st, n, T, wv);
            rows_put(rdg, xg, b, st, n, T, wg);
            rows_put(rdb, xb, b, st, n, T, wg);
            if (first) memcpy(rdh0 + b * KV, xh, KV * sizeof(double)); /* h0 NULL: still a zero state */
        }
    double e = fd_rel_err(o, ro, c->nv);
    e = worst(e, fd_rel_err(ht, rht, c->nst));
    e = worst(e, fd_rel_err(dq, rdq, c->nqk));
    e = worst(e, fd_rel_err(dk, rdk, c->nqk));
    e = worst(e, fd_rel_err(dv, rdv, c->nv));
    e = worst(e, fd_rel_err(dg, rdg, c->ng));
    e = worst(e, fd_rel_err(dbeta, rdb, c->ng));
    e = worst(e, fd_rel_err(dh0, rdh0, c->nst));
    double *all[] = {o, ht, dq, dk, dv, dg, dbeta, dh0, ro, rht, rdq, rdk, rdv, rdg, rdb, rdh0};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    for (int i = 0; i < 16; i++) free(b1[i]);
    return e;
}

/* The affine maps of a packed row agree with the packed rule: ht = M h0 + H, dh0 = M^T dht + E,
 * and M = 0 for a row with any start (a start cuts everything before it). */
static double delta_maps_vs_packed(const delta_case *c, const unsigned char *starts) {
    const gdn_delta_shape *s = &c->s;
    const int B = s->B, T = s->T, H = s->H, K = s->K, V = s->V;
    const double scale = 1.0 / sqrt((double)K);
    const size_t nM = (size_t)B * H * K * K;
    double *M = zeros(nM), *Hm = zeros(c->nst), *E = zeros(c->nst);
    gdn_delta_transition_f64(s, c->k, c->v, c->g, c->beta, M, Hm);
    gdn_delta_transition_adjoint_f64(s, c->q, c->k, c->g, c->beta, scale, c->d_o, E);
    double *o = zeros(c->nv), *ht = zeros(c->nst), *dh0 = zeros(c->nst), *gr = zeros(c->nv + 2 * c->nqk);
    gdn_delta_fwd_f64(s, c->q, c->k, c->v, c->g, c->beta, scale, c->h0, o, ht);
    gdn_delta_bwd_f64(s, c->q, c->k, c->v, c->g, c->beta, scale, c->h0, c->d_o, c->dht, gr, gr + c->nqk,
                      gr + 2 * c->nqk, NULL, NULL, dh0);
    double *ht2 = zeros(c->nst), *dh2 = zeros(c->nst);
    for (int bh = 0; bh < B * H; bh++) {
        const double *Mb = M + (size_t)bh * K * K;
        const int b = bh / H;
        int cut = 0;
        for (int t = 1; t < T; t++) cut |= starts[(size_t)b * T + t];
        cut |= T > 0 && starts[(size_t)b * T];
        for (int i = 0; i < K * K && cut; i++) assert_true(Mb[i] == 0.0);
        for (int i = 0; i < K; i++)
            for (int j = 0; j < V; j++) {
                double a = Hm[(size_t)bh * K * V + (size_t)i * V + j], d = E[(size_t)bh * K * V + (size_t)i * V + j];
                for (int l = 0; l < K; l++) {
                    a += Mb[(size_t)i * K + l] * c->h0[(size_t)bh * K * V + (size_t)l * V + j];
                    d += Mb[(size_t)l * K + i] * c->dht[(size_t)bh * K * V + (size_t)l * V + j];
                }
                ht2[(size_t)bh * K * V + (size_t)i * V + j] = a;
                dh2[(size_t)bh * K * V + (size_t)i * V + j] = d;
            }
    }
    double e = worst(fd_rel_err(ht2, ht, c->nst), fd_rel_err(dh2, dh0, c->nst));
    double *all[] = {M, Hm, E, o, ht, dh0, gr, ht2, dh2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    return e;
}

/* Row 0 continues an entering state into its first document, row 1 starts one at 0; starts at
 * the chunk edge 16, inside chunks, at 1, single-token documents, a document longer than two
 * chunks. */
static void fixed_starts(unsigned char *st, int T) {
    const int r0[] = {1, 2, 16, 21, 22, 23, 40}, r1[] = {0, 5, 32, 33, 47};
    memset(st, 0, 2 * (size_t)T);
    for (size_t i = 0; i < sizeof r0 / sizeof *r0; i++)
        if (r0[i] < T) st[r0[i]] = 1;
    for (size_t i = 0; i < sizeof r1 / sizeof *r1; i++)
        if (r1[i] < T) st[T + r1[i]] = 1;
}

static void test_delta_packed(void **state) {
    (void)state;
    enum { T = 75 };
    unsigned char st[2 * T];
    fixed_starts(st, T);
    for (int variant = 0; variant < GDN_MIXER_DELTA_COUNT; variant++)
        for (int chunk = 16; chunk <= 32; chunk += 16) {
            delta_case c;
            delta_case_make(&c, variant, 2, T, 2, 8, 6, chunk, st, 100 + variant);
            const double e0 = delta_packed_vs_docs(&c, st, 0), e1 = delta_packed_vs_docs(&c, st, 1);
            const double em = delta_maps_vs_packed(&c, st);
            printf("  %s chunk %d: packed vs one by one %.1e (with h0 %.1e), maps %.1e\n",
                   gdn_mixer_get(variant)->name, chunk, e0, e1, em);
            assert_true(e0 < TOL && e1 < TOL && em < TOL);
            delta_case_free(&c);
        }
    /* every token its own document (the most chunks a row can be cut into) */
    unsigned char ones[2 * T];
    memset(ones, 1, sizeof ones);
    delta_case c;
    delta_case_make(&c, GDN_MIXER_G, 2, T, 2, 8, 6, 64, ones, 99);
    const double e = worst(delta_packed_vs_docs(&c, ones, 1), delta_maps_vs_packed(&c, ones));
    printf("  gdn, one-token documents: %.1e\n", e);
    assert_true(e < TOL);
    delta_case_free(&c);
}

/* Without starts (doc of one document per row, or NULL) the result is the plain op's, bitwise. */
static void test_delta_no_starts_bitwise(void **state) {
    (void)state;
    enum { T = 40 };
    unsigned char st[2 * T] = {0};
    delta_case c;
    delta_case_make(&c, GDN_MIXER_G, 2, T, 2, 8, 8, 16, st, 7);
    const double scale = 1.0 / sqrt(8.0);
    double *o1 = zeros(c.nv), *o2 = zeros(c.nv);
    gdn_delta_fwd_f64(&c.s, c.q, c.k, c.v, c.g, c.beta, scale, c.h0, o1, NULL);
    c.s.doc = NULL;
    gdn_delta_fwd_f64(&c.s, c.q, c.k, c.v, c.g, c.beta, scale, c.h0, o2, NULL);
    assert_memory_equal(o1, o2, c.nv * sizeof(double));
    free(o1);
    free(o2);
    delta_case_free(&c);
}

/* Finite differences of <d_o, o> + <dht, ht> with resets, every input of every mixer kind. */
typedef struct {
    delta_case *c;
} delta_fd_ctx;

static double delta_fd_loss(void *ctx) {
    delta_case *c = ((delta_fd_ctx *)ctx)->c;
    double *o = zeros(c->nv), *ht = zeros(c->nst), L = 0;
    gdn_delta_fwd_f64(&c->s, c->q, c->k, c->v, c->g, c->beta, 1.0 / sqrt((double)c->s.K), c->h0, o, ht);
    for (size_t i = 0; i < c->nv; i++) L += c->d_o[i] * o[i];
    for (size_t i = 0; i < c->nst; i++) L += c->dht[i] * ht[i];
    free(o);
    free(ht);
    return L;
}

static void test_delta_fd(void **state) {
    (void)state;
    enum { T = 37 };
    unsigned char st[2 * T];
    fixed_starts(st, T);
    for (int variant = 0; variant < GDN_MIXER_DELTA_COUNT; variant++) {
        delta_case c;
        delta_case_make(&c, variant, 2, T, 1, 4, 3, 16, st, 300 + variant);
        const gdn_mixer_info *mx = gdn_mixer_get(variant);
        double *dq = zeros(c.nqk), *dk = zeros(c.nqk), *dv = zeros(c.nv), *dg = zeros(c.ng);
        double *db = zeros(c.ng), *dh0 = zeros(c.nst);
        gdn_delta_bwd_f64(&c.s, c.q, c.k, c.v, c.g, c.beta, 1.0 / sqrt(4.0), c.h0, c.d_o, c.dht, dq, dk, dv, dg,
                          db, dh0);
        delta_fd_ctx ctx = {&c};
        double e = fd_check(delta_fd_loss, &ctx, c.q, dq, c.nqk, 60, 1e-6);
        e = worst(e, fd_check(delta_fd_loss, &ctx, c.k, dk, c.nqk, 60, 1e-6));
        e = worst(e, fd_check(delta_fd_loss, &ctx, c.v, dv, c.nv, 60, 1e-6));
        e = worst(e, fd_check(delta_fd_loss, &ctx, c.h0, dh0, c.nst, 32, 1e-6));
        if (mx->has_decay) e = worst(e, fd_check(delta_fd_loss, &ctx, c.g, dg, c.ng, 74, 1e-6));
        if (mx->has_beta) e = worst(e, fd_check(delta_fd_loss, &ctx, c.beta, db, c.ng, 74, 1e-6));
        printf("  %s: finite differences with resets %.1e\n", mx->name, e);
        assert_true(e < 1e-7);
        double *all[] = {dq, dk, dv, dg, db, dh0};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
        delta_case_free(&c);
    }
}

/* ---- the short convolution ------------------------------------------------------------------ */

static double conv_packed_vs_docs(int B, int T, int C, int W, const unsigned char *starts,
                                  unsigned long long seed) {
    const size_t n = (size_t)B * T * C;
    double *x = rnd(n, -1, 1, seed), *w = rnd((size_t)C * W, -1, 1, seed + 1), *dy = rnd(n, -1, 1, seed + 2);
    int *doc = malloc(((size_t)B * T + 1) * sizeof(int));
    gdn_doc_build(doc, starts, NULL, B, T);
    double *y = zeros(n), *dx = zeros(n), *dw = zeros((size_t)C * W);
    gdn_conv_fwd_f64(y, x, w, NULL, doc, B, T, C, W);
    gdn_conv_bwd_f64(dx, dw, NULL, dy, x, w, NULL, doc, B, T, C, W);
    double *ry = zeros(n), *rdx = zeros(n), *rdw = zeros((size_t)C * W);
    double *a = zeros(4 * (size_t)T * C);
    for (int b = 0; b < B; b++)
        for (int st = 0, en; st < T; st = en) {
            en = doc_end(starts, b, st, T);
            const int len = en - st;
            double *xs = a, *ys = a + (size_t)T * C, *gs = ys + (size_t)T * C, *xd = gs + (size_t)T * C;
            rows_get(xs, x, b, st, len, T, C);
            rows_get(gs, dy, b, st, len, T, C);
            gdn_conv_fwd_f64(ys, xs, w, NULL, NULL, 1, len, C, W);
            gdn_conv_bwd_f64(xd, rdw, NULL, gs, xs, w, NULL, NULL, 1, len, C, W);
            rows_put(ry, ys, b, st, len, T, C);
            rows_put(rdx, xd, b, st, len, T, C);
        }
    double e = worst(worst(fd_rel_err(y, ry, n), fd_rel_err(dx, rdx, n)), fd_rel_err(dw, rdw, (size_t)C * W));
    double *all[] = {x, w, dy, y, dx, dw, ry, rdx, rdw, a};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    free(doc);
    return e;
}

static void test_conv_packed(void **state) {
    (void)state;
    enum { T = 50 };
    unsigned char st[2 * T];
    fixed_starts(st, T);
    const double e = worst(conv_packed_vs_docs(2, T, 5, 4, st, 11), conv_packed_vs_docs(2, T, 3, 2, st, 12));
    printf("  convolution: packed vs one by one %.1e\n", e);
    assert_true(e < TOL);
}

/* A halo (the previous segment's rows) is read only from the document's start on: a start at
 * relative position -1 (doc = -1) cuts the two older halo rows; row 0 of each sequence starting a
 * document cuts all of them; the gradient of a cut halo row is zero. */
static void test_conv_halo_cut(void **state) {
    (void)state;
    enum { B = 2, T = 6, C = 3, W = 4 };
    double *x = rnd(B * T * C, -1, 1, 1), *w = rnd(C * W, -1, 1, 2), *halo = rnd(B * (W - 1) * C, -1, 1, 3);
    double *dy = rnd(B * T * C, -1, 1, 4);
    int doc[B * T] = {-1, -1, -1, 3, 3, 3, 0, 0, 0, 0, 0, 0};
    double y[B * T * C], y2[B * T * C], dx[B * T * C], dw[C * W] = {0}, dh[B * (W - 1) * C];
    gdn_conv_fwd_f64(y, x, w, halo, doc, B, T, C, W);
    double *cut = malloc(sizeof(double) * B * (W - 1) * C);
    memcpy(cut, halo, sizeof(double) * B * (W - 1) * C);
    for (int r = 0; r < 2; r++) memset(cut + (size_t)r * C, 0, C * sizeof(double)); /* row 0: two oldest */
    memset(cut + (size_t)(W - 1) * C, 0, (W - 1) * C * sizeof(double));              /* row 1: all */
    int doc_rest[B * T] = {GDN_DOC_BEFORE, GDN_DOC_BEFORE, GDN_DOC_BEFORE, 3, 3, 3,
                           GDN_DOC_BEFORE, GDN_DOC_BEFORE, GDN_DOC_BEFORE, GDN_DOC_BEFORE,
                           GDN_DOC_BEFORE, GDN_DOC_BEFORE};
    gdn_conv_fwd_f64(y2, x, w, cut, doc_rest, B, T, C, W);
    assert_true(fd_rel_err(y, y2, B * T * C) < TOL);
    gdn_conv_bwd_f64(dx, dw, dh, dy, x, w, halo, doc, B, T, C, W);
    for (int i = 0; i < 2 * C; i++) assert_true(dh[i] == 0.0);
    for (int i = 0; i < (W - 1) * C; i++) assert_true(dh[(W - 1) * C + i] == 0.0);
    double nz = 0;
    for (int i = 2 * C; i < 3 * C; i++) nz += fabs(dh[i]);
    assert_true(nz > 0);
    free(x), free(w), free(halo), free(dy), free(cut);
}

/* ---- softmax attention ---------------------------------------------------------------------- */

static double attn_packed_vs_docs(int B, int T, int H, int Hkv, int D, const unsigned char *starts,
                                  unsigned long long seed) {
    const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D, wq = (size_t)H * D, wk = (size_t)Hkv * D;
    double *q = rnd(nq, -1.5, 1.5, seed), *k = rnd(nk, -1.5, 1.5, seed + 1), *v = rnd(nk, -1, 1, seed + 2);
    double *d_o = rnd(nq, -1, 1, seed + 3);
    int *doc = malloc(((size_t)B * T + 1) * sizeof(int));
    gdn_doc_build(doc, starts, NULL, B, T);
    gdn_attn_shape s = {B, T, H, Hkv, D, doc};
    const double scale = 1.0 / sqrt((double)D);
    double *o = zeros(nq), *lse = zeros((size_t)B * H * T), *dq = zeros(nq), *dk = zeros(nk), *dv = zeros(nk);
    gdn_attn_fwd_f64(&s, q, k, v, scale, o, lse);
    gdn_attn_bwd_f64(&s, q, k, v, o, lse, scale, d_o, dq, dk, dv);
    double *ro = zeros(nq), *rl = zeros((size_t)B * H * T), *rdq = zeros(nq), *rdk = zeros(nk), *rdv = zeros(nk);
    double *a = zeros(12 * (size_t)T * wq + 4 * (size_t)T * H);
    for (int b = 0; b < B; b++)
        for (int st = 0, en; st < T; st = en) {
            en = doc_end(starts, b, st, T);
            const int n = en - st;
            double *qs = a, *ks = qs + (size_t)T * wq, *vs = ks + (size_t)T * wq, *gs = vs + (size_t)T * wq;
            double *os = gs + (size_t)T * wq, *xq = os + (size_t)T * wq, *xk = xq + (size_t)T * wq;
            double *xv = xk + (size_t)T * wq, *ls = xv + (size_t)T * wq;
            rows_get(qs, q, b, st, n, T, wq);
            rows_get(ks, k, b, st, n, T, wk);
            rows_get(vs, v, b, st, n, T, wk);
            rows_get(gs, d_o, b, st, n, T, wq);
            gdn_attn_shape one = {1, n, H, Hkv, D, NULL};
            gdn_attn_fwd_f64(&one, qs, ks, vs, scale, os, ls);
            gdn_attn_bwd_f64(&one, qs, ks, vs, os, ls, scale, gs, xq, xk, xv);
            rows_put(ro, os, b, st, n, T, wq);
            rows_put(rdq, xq, b, st, n, T, wq);
            rows_put(rdk, xk, b, st, n, T, wk);
            rows_put(rdv, xv, b, st, n, T, wk);
            for (int h = 0; h < H; h++)
                memcpy(rl + ((size_t)b * H + h) * T + st, ls + (size_t)h * n, (size_t)n * sizeof(double));
        }
    double e = worst(fd_rel_err(o, ro, nq), fd_rel_err(lse, rl, (size_t)B * H * T));
    e = worst(e, worst(fd_rel_err(dq, rdq, nq), worst(fd_rel_err(dk, rdk, nk), fd_rel_err(dv, rdv, nk))));
    double *all[] = {q, k, v, d_o, o, lse, dq, dk, dv, ro, rl, rdq, rdk, rdv, a};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    free(doc);
    return e;
}

static void test_attention_packed(void **state) {
    (void)state;
    enum { T = 150 }; /* more than two query blocks */
    unsigned char st[2 * T];
    fixed_starts(st, T);
    st[70] = st[128] = st[T + 64] = st[T + 140] = 1;
    const double e = worst(attn_packed_vs_docs(2, T, 4, 2, 6, st, 21), attn_packed_vs_docs(2, 40, 2, 2, 4, st, 22));
    printf("  attention: packed vs one by one %.1e\n", e);
    assert_true(e < TOL);
}

/* ---- the whole model ------------------------------------------------------------------------ */

/* Loss, logits and every gradient of the packed batch vs the sum over the documents run alone. */
static double model_packed_vs_docs(const char *mixers, int B, int T, const unsigned char *starts,
                                   unsigned long long seed) {
    const gdn_config cfg = fixture_config(mixers, 1);
    gdn_param_table t;
    gdn_param_table_build(&t, &cfg);
    double *P = fixture_params(&t, seed, 4.0);
    const size_t Vv = (size_t)cfg.vocab_size, N = (size_t)B * T;
    int *tok = malloc(N * sizeof(int)), *tgt = malloc(N * sizeof(int));
    double *r = rnd(2 * N, 0, 1, seed + 2);
    for (size_t i = 0; i < N; i++) {
        tok[i] = (int)(r[i] * cfg.vocab_size);
        tgt[i] = i % 7 == 3 ? -1 : (int)(r[N + i] * cfg.vocab_size);
    }
    free(r);
    gdn_cpu_acts_f64 *a = gdn_cpu_acts_create_f64(&t, B, T);
    gdn_cpu_acts_set_doc_starts_f64(a, starts);
    double *g = calloc(t.total, sizeof *g), *rg = calloc(t.total, sizeof *rg);
    int nv = 0, rnv = 0;
    const double loss = gdn_cpu_forward_f64(a, &t, P, tok, tgt, 1.0, &nv, NULL, NULL);
    gdn_cpu_backward_f64(a, &t, P, g);
    gdn_cpu_forward_f64(a, &t, P, tok, NULL, 0.0, NULL, NULL, NULL);
    double *logits = malloc(N * Vv * sizeof *logits), *rlog = malloc(N * Vv * sizeof *rlog), rloss = 0;
    memcpy(logits, gdn_cpu_logits_f64(a), N * Vv * sizeof *logits);
    gdn_cpu_acts_free_f64(a);
    for (int b = 0; b < B; b++)
        for (int st = 0, en; st < T; st = en) {
            en = doc_end(starts, b, st, T);
            const int n = en - st;
            gdn_cpu_acts_f64 *one = gdn_cpu_acts_create_f64(&t, 1, n);
            int k = 0;
            rloss += gdn_cpu_forward_f64(one, &t, P, tok + (size_t)b * T + st, tgt + (size_t)b * T + st, 1.0, &k,
                                         NULL, NULL);
            rnv += k;
            gdn_cpu_backward_f64(one, &t, P, rg);
            gdn_cpu_forward_f64(one, &t, P, tok + (size_t)b * T + st, NULL, 0.0, NULL, NULL, NULL);
            memcpy(rlog + ((size_t)b * T + st) * Vv, gdn_cpu_logits_f64(one), (size_t)n * Vv * sizeof(double));
            gdn_cpu_acts_free_f64(one);
        }
    assert_int_equal(nv, rnv);
    double e = worst(fabs(loss - rloss) / fabs(rloss), fd_rel_err(logits, rlog, N * Vv));
    for (int i = 0; i < t.n; i++)
        e = worst(e, fd_rel_err(g + t.p[i].offset, rg + t.p[i].offset, t.p[i].numel));
    free(P), free(tok), free(tgt), free(g), free(rg), free(logits), free(rlog);
    gdn_param_table_free(&t);
    return e;
}

static void test_model_packed(void **state) {
    (void)state;
    enum { T = 45 };
    unsigned char st[2 * T];
    fixed_starts(st, T);
    const char *kinds[] = {"GDML", "GA", "AG", "A"};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        const double e = model_packed_vs_docs(kinds[i], 2, T, st, 40 + i);
        printf("  model %s: packed vs one by one %.1e\n", kinds[i], e);
        assert_true(e < 1e-11);
    }
}

/* ---- random packings ------------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int rng_int(uint64_t *s, int n) { return (int)(rng_next(s) % (uint64_t)n); }

/* Documents of random lengths (1 and 2 often, up to longer than two chunks), start 0 marked or
 * not. */
static void random_starts(unsigned char *st, int B, int T, uint64_t *s) {
    memset(st, 0, (size_t)B * T);
    for (int b = 0; b < B; b++) {
        st[(size_t)b * T] = (unsigned char)rng_int(s, 2);
        for (int t = 0; t < T;) {
            const int kind = rng_int(s, 4);
            int len = kind == 0 ? 1 + rng_int(s, 2) : kind == 1 ? 1 + rng_int(s, 8) : 1 + rng_int(s, 40);
            t += len;
            if (t < T) st[(size_t)b * T + t] = 1;
        }
    }
}

static void test_random_packings(void **state) {
    (void)state;
    double e_worst = 0;
    int cases = 0;
    for (uint64_t seed = 1; seed <= 120; seed++) {
        uint64_t s = seed * 7919;
        const int B = 1 + rng_int(&s, 2), T = 1 + rng_int(&s, 90), chunk = 16 << rng_int(&s, 2);
        const int variant = rng_int(&s, GDN_MIXER_DELTA_COUNT), H = 1 + rng_int(&s, 2);
        const int K = 2 + rng_int(&s, 6), V = 2 + rng_int(&s, 6);
        unsigned char *st = malloc((size_t)B * T);
        random_starts(st, B, T, &s);
        delta_case c;
        delta_case_make(&c, variant, B, T, H, K, V, chunk, st, seed * 13);
        double e = worst(delta_packed_vs_docs(&c, st, (int)(seed & 1)), delta_maps_vs_packed(&c, st));
        delta_case_free(&c);
        e = worst(e, conv_packed_vs_docs(B, T, 1 + rng_int(&s, 4), 2 + rng_int(&s, 3), st, seed));
        e = worst(e, attn_packed_vs_docs(B, T, 2, 1 + rng_int(&s, 2), 2 + 2 * rng_int(&s, 3), st, seed));
        if (seed % 12 == 0) {
            const char *kinds[] = {"GDML", "AG", "GA", "MA", "L"};
            e = worst(e, model_packed_vs_docs(kinds[rng_int(&s, 5)], B, T, st, seed) * 0.1);
        }
        if (!(e < TOL)) fail_msg("random packing seed %llu (B=%d T=%d chunk=%d %s): error %.1e",
                                 (unsigned long long)seed, B, T, chunk, gdn_mixer_get(variant)->name, e);
        e_worst = worst(e_worst, e);
        cases++;
        free(st);
    }
    printf("  %d random packings: worst %.1e\n", cases, e_worst);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delta_packed),
        cmocka_unit_test(test_delta_no_starts_bitwise),
        cmocka_unit_test(test_delta_fd),
        cmocka_unit_test(test_conv_packed),
        cmocka_unit_test(test_conv_halo_cut),
        cmocka_unit_test(test_attention_packed),
        cmocka_unit_test(test_model_packed),
        cmocka_unit_test(test_random_packings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
