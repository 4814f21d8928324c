/* Training-free linearisation of softmax attention (model/cpu/linearize*.c): the gated-delta-rule
 * form on the chunked kernel against a direct evaluation of the sum it unrolls to and against the
 * token-by-token recurrence; the balance factor leaves softmax attention unchanged and equalises
 * the norms it is defined by; the first-order baseline against its O(T^2) formula (also with keys
 * whose mean is 1e3 times their spread); a diverging raw form is reported, not silent; and in the
 * model, the attention-output hook changes nothing when it replaces no layer, and every
 * approximation is exact at T = 1. Every measured error is printed. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/check.h"
#include "model/cpu/linearize.h"
#include "model/cpu/ops_cpu.h"
#include "model/mixer.h"
#include "tests/model_case.h"
#include "tests/ref/arrays.h"

/* fp64 kernel vs the fp64 references: only the order of the sums differs (measured ~1e-15). */
#define TOL 1e-12

static double rel_err(const double *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* Prefix means: m[t] = mean of x rows 0..t, x [T,D] (sums divided, not the running update). */
static double *prefix_means(const double *x, int T, int D) {
    double *m = calloc((size_t)T * D + 1, sizeof *m), *s = calloc((size_t)D, sizeof *s);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < D; i++) {
            s[i] += x[(size_t)t * D + i];
            m[(size_t)t * D + i] = s[i] / (t + 1);
        }
    free(s);
    return m;
}

/* The sum the gated-delta-rule form unrolls to, evaluated per query without any state:
 *   o_t = vbar_t + sum_{s<=t} (1/s) (v_s - vbar_{s-1}) ktil_s^T M_{s+1} ... M_t (lambda q_t),
 *   M_s = (1 - 1/s) I - (1/s) ktil_s ktil_s^T,  ktil_s = (k_s - kbar_s) / lambda. */
static void gdn_direct(int T, int D, int Dv, const double *q, const double *k, const double *v, double lam,
                       double *o) {
    double *kbar = prefix_means(k, T, D), *vbar = prefix_means(v, T, Dv);
    double *kt = malloc(sizeof(double) * (size_t)T * D), *x = malloc(sizeof(double) * (size_t)D);
    for (size_t i = 0; i < (size_t)T * D; i++) kt[i] = (k[i] - kbar[i]) / lam;
    for (int t = 0; t < T; t++) {
        double *ot = o + (size_t)t * Dv;
        for (int j = 0; j < Dv; j++) ot[j] = vbar[(size_t)t * Dv + j];
        for (int i = 0; i < D; i++) x[i] = lam * q[(size_t)t * D + i];
        for (int s = t; s >= 0; s--) {
            const double p = s + 1.0, *ks = kt + (size_t)s * D;
            double c = 0;
            for (int i = 0; i < D; i++) c += ks[i] * x[i];
            for (int j = 0; j < Dv; j++) {
                const double vprev = s ? vbar[(size_t)(s - 1) * Dv + j] : 0;
                ot[j] += (v[(size_t)s * Dv + j] - vprev) * c / p;
            }
            for (int i = 0; i < D; i++) x[i] = (1 - 1 / p) * x[i] - ks[i] * c / p;
        }
    }
    free(kbar);
    free(vbar);
    free(kt);
    free(x);
}

/* The recurrence as written, state A [Dv,D] (the transpose of the kernel's):
 *   A_t = A_{t-1} ((1 - 1/t) I - (1/t) ktil_t ktil_t^T) + (1/t) (v_t - vbar_{t-1}) ktil_t^T,
 *   o_t = A_t (lambda q_t) + vbar_t. */
static void gdn_recurrent(int T, int D, int Dv, const double *q, const double *k, const double *v, double lam,
                          double *o) {
    double *A = calloc((size_t)Dv * D, sizeof *A), *kbar = calloc((size_t)D, sizeof *kbar);
    double *vbar = calloc((size_t)Dv, sizeof *vbar), *kt = malloc(sizeof(double) * D);
    double *Ak = malloc(sizeof(double) * Dv);
    for (int t = 0; t < T; t++) {
        const double p = t + 1.0;
        for (int i = 0; i < D; i++) {
            kbar[i] += (k[(size_t)t * D + i] - kbar[i]) / p;
            kt[i] = (k[(size_t)t * D + i] - kbar[i]) / lam;
        }
        for (int j = 0; j < Dv; j++) {
            Ak[j] = 0;
            for (int i = 0; i < D; i++) Ak[j] += A[(size_t)j * D + i] * kt[i];
        }
        for (int j = 0; j < Dv; j++) {
            const double w = (v[(size_t)t * Dv + j] - vbar[j]) / p;
            for (int i = 0; i < D; i++)
                A[(size_t)j * D + i] = (1 - 1 / p) * A[(size_t)j * D + i] - Ak[j] * kt[i] / p + w * kt[i];
            vbar[j] += (v[(size_t)t * Dv + j] - vbar[j]) / p;
        }
        for (int j = 0; j < Dv; j++) {
            double acc = vbar[j];
            for (int i = 0; i < D; i++) acc += A[(size_t)j * D + i] * lam * q[(size_t)t * D + i];
            o[(size_t)t * Dv + j] = acc;
        }
    }
    free(A);
    free(kbar);
    free(vbar);
    free(kt);
    free(Ak);
}

/* The first-order baseline as a formula: o_t = vbar_t + (1/t) sum_{i<=t} v_i ((k_i - kbar_t) . q_t). */
static void vala_direct(int T, int D, int Dv, const double *q, const double *k, const double *v, double *o) {
    double *kbar = prefix_means(k, T, D), *vbar = prefix_means(v, T, Dv);
    for (int t = 0; t < T; t++) {
        double *ot = o + (size_t)t * Dv;
        for (int j = 0; j < Dv; j++) ot[j] = vbar[(size_t)t * Dv + j];
        for (int i = 0; i <= t; i++) {
            double c = 0;
            for (int d = 0; d < D; d++) c += (k[(size_t)i * D + d] - kbar[(size_t)t * D + d]) * q[(size_t)t * D + d];
            for (int j = 0; j < Dv; j++) ot[j] += v[(size_t)i * Dv + j] * c / (t + 1);
        }
    }
    free(kbar);
    free(vbar);
}

typedef struct {
    int T, D, Dv;
    double *q, *k, *v;
} head_case;

/* Keys around offset (spread ka), queries of size qa, values in [-1, 1). */
static head_case head_make(int T, int D, int Dv, double qa, double ka, double offset, unsigned long long seed) {
    head_case h = {T, D, Dv, ref_uniform((size_t)T * D, -qa, qa, seed),
                   ref_uniform((size_t)T * D, offset - ka, offset + ka, seed + 1),
                   ref_uniform((size_t)T * Dv, -1, 1, seed + 2)};
    return h;
}

static void head_free(head_case *h) {
    free(h->q);
    free(h->k);
    free(h->v);
}

/* The chunked form equals the direct sum and the recurrence, at every chunk size, T not a
 * multiple of the chunk, as derived (lambda 1) and scaled (lambda 2.7 and 0.4). */
static void test_gdn_form(void **state) {
    (void)state;
    const int Ts[] = {1, 2, 37, 150};
    const double lams[] = {1.0, 2.7, 0.4};
    double worst = 0;
    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
        head_case h = head_make(Ts[ti], 8, 6, 0.6, 0.5, 0.8, 100 + ti);
        const size_t n = (size_t)h.T * h.Dv;
        double *o = ref_nan_array(n), *od = ref_nan_array(n), *orc = ref_nan_array(n);
        for (size_t li = 0; li < sizeof lams / sizeof *lams; li++) {
            gdn_direct(h.T, h.D, h.Dv, h.q, h.k, h.v, lams[li], od);
            gdn_recurrent(h.T, h.D, h.Dv, h.q, h.k, h.v, lams[li], orc);
            const double e_ref = rel_err(orc, od, n);
            printf("T=%3d lambda=%.1f: recurrence vs direct %.2e\n", h.T, lams[li], e_ref);
            assert_true(e_ref < TOL);
            for (int chunk = 16; chunk <= 64; chunk *= 2) {
                assert_int_equal(gdn_lin_gdn_f64(h.T, h.D, h.Dv, h.q, h.k, h.v, lams[li], chunk, o), 0);
                const double e1 = rel_err(o, od, n), e2 = rel_err(o, orc, n);
                printf("  chunk %2d: vs direct %.2e, vs recurrence %.2e\n", chunk, e1, e2);
                assert_true(e1 < TOL && e2 < TOL);
                worst = fmax(worst, fmax(e1, e2));
            }
        }
        /* at t = 1 every form is exact: o_1 = v_1 */
        for (int j = 0; j < h.Dv; j++) assert_true(fabs(o[j] - h.v[j]) <= 1e-15);
        free(o);
        free(od);
        free(orc);
        head_free(&h);
    }
    printf("gdn form: worst %.2e (limit %.0e)\n", worst, TOL);
}

/* fp32 follows fp64 on the same inputs (balanced, where the state stays bounded). */
static void test_gdn_form_f32(void **state) {
    (void)state;
    head_case h = head_make(130, 8, 8, 0.6, 0.5, 3.0, 7);
    const size_t nk = (size_t)h.T * h.D, n = (size_t)h.T * h.Dv;
    ref_round_f32(h.q, nk);
    ref_round_f32(h.k, nk);
    ref_round_f32(h.v, n);
    double sq = 0, sk = 0;
    gdn_lin_norms_f64(h.T, h.D, h.q, h.k, &sq, &sk);
    const double lam = (float)gdn_lin_balance_factor(sq, sk);
    double *o = ref_nan_array(n);
    float *q = ref_to_f32(h.q, nk), *k = ref_to_f32(h.k, nk), *v = ref_to_f32(h.v, n), *o32 = ref_nan_f32(n);
    assert_int_equal(gdn_lin_gdn_f64(h.T, h.D, h.Dv, h.q, h.k, h.v, lam, 32, o), 0);
    assert_int_equal(gdn_lin_gdn_f32(h.T, h.D, h.Dv, q, k, v, (float)lam, 32, o32), 0);
    double *o32d = malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++) o32d[i] = o32[i];
    const double e = rel_err(o32d, o, n);
    printf("gdn form fp32 vs fp64: %.2e (limit 1e-5)\n", e);
    assert_true(e < 1e-5);
    float *a32 = ref_nan_f32(n);
    gdn_lin_vala_f32(h.T, h.D, h.Dv, q, k, v, a32);
    gdn_lin_vala_f64(h.T, h.D, h.Dv, h.q, h.k, h.v, o);
    for (size_t i = 0; i < n; i++) o32d[i] = a32[i];
    const double ev = rel_err(o32d, o, n);
    printf("vala fp32 vs fp64: %.2e (limit 1e-5)\n", ev);
    assert_true(ev < 1e-5);
    free(o);
    free(o32d);
    free(q);
    free(k);
    free(v);
    free(o32);
    free(a32);
    head_free(&h);
}

/* The first-order baseline against its formula, with keys centred near 0 and keys whose mean is
 * 1e3 (the co-moment update must not cancel); it does not change under balancing. */
static void test_vala(void **state) {
    (void)state;
    const double offsets[] = {0.0, 1e3};
    for (int oi = 0; oi < 2; oi++) {
        head_case h = head_make(97, 8, 6, 0.5, 1.0, offsets[oi], 300 + oi);
        const size_t nk = (size_t)h.T * h.D, n = (size_t)h.T * h.Dv;
        double *o = ref_nan_array(n), *od = ref_nan_array(n), *ob = ref_nan_array(n);
        gdn_lin_vala_f64(h.T, h.D, h.Dv, h.q, h.k, h.v, o);
        vala_direct(h.T, h.D, h.Dv, h.q, h.k, h.v, od);
        const double e = rel_err(o, od, n);
        /* balanced inputs: lambda q and k / lambda give the same output */
        double *qs = malloc(sizeof(double) * nk), *ks = malloc(sizeof(double) * nk);
        for (size_t i = 0; i < nk; i++) {
            qs[i] = 3.1 * h.q[i];
            ks[i] = h.k[i] / 3.1;
        }
        gdn_lin_vala_f64(h.T, h.D, h.Dv, qs, ks, h.v, ob);
        const double eb = rel_err(ob, o, n);
        printf("vala, key mean %g: vs formula %.2e, balanced vs not %.2e\n", offsets[oi], e, eb);
        assert_true(e < 1e-11 && eb < 1e-11);
        free(o);
        free(od);
        free(ob);
        free(qs);
        free(ks);
        head_free(&h);
    }
}

/* The balance factor: equal root-mean-square norms of lambda q and (k - kbar) / lambda, softmax
 * attention unchanged, and the gdn form's lambda argument is that same rescaling. */
static void test_balance(void **state) {
    (void)state;
    head_case h = head_make(80, 8, 8, 0.05, 2.0, 4.0, 500);
    const size_t nk = (size_t)h.T * h.D;
    double sq = 0, sk = 0;
    gdn_lin_norms_f64(h.T, h.D, h.q, h.k, &sq, &sk);
    const double lam = gdn_lin_balance_factor(sq, sk);
    double *qs = malloc(sizeof(double) * nk), *ks = malloc(sizeof(double) * nk);
    for (size_t i = 0; i < nk; i++) {
        qs[i] = lam * h.q[i];
        ks[i] = h.k[i] / lam;
    }
    double sq2 = 0, sk2 = 0;
    gdn_lin_norms_f64(h.T, h.D, qs, ks, &sq2, &sk2);
    printf("balance: lambda %.4f, |q|^2 %.4e -> %.6e, |k - kbar|^2 %.4e -> %.6e\n", lam, sq, sq2, sk, sk2);
    assert_true(lam > 1.5);
    assert_true(fabs(sq2 - sk2) <= 1e-13 * sk2);
    /* softmax attention (scale 1: q already scaled) */
    gdn_attn_shape s = {1, h.T, 1, 1, h.D, NULL};
    double *o = ref_nan_array(nk), *ob = ref_nan_array(nk);
    gdn_attn_fwd_f64(&s, h.q, h.k, h.v, 1.0, o, NULL);
    gdn_attn_fwd_f64(&s, qs, ks, h.v, 1.0, ob, NULL);
    const double ea = rel_err(ob, o, nk);
    printf("balance: softmax attention changed by %.2e\n", ea);
    assert_true(ea < 1e-14);
    /* gdn_lin_gdn(q, k, lambda) is gdn_lin_gdn(lambda q, k / lambda, 1) */
    assert_int_equal(gdn_lin_gdn_f64(h.T, h.D, h.D, h.q, h.k, h.v, lam, 16, o), 0);
    assert_int_equal(gdn_lin_gdn_f64(h.T, h.D, h.D, qs, ks, h.v, 1.0, 16, ob), 0);
    const double eg = rel_err(ob, o, nk);
    printf("balance: gdn form, lambda argument vs rescaled inputs %.2e\n", eg);
    assert_true(eg < TOL);
    /* degenerate sums give 1 */
    assert_true(gdn_lin_balance_factor(0, 1) == 1.0 && gdn_lin_balance_factor(1, 0) == 1.0);
    assert_true(gdn_lin_balance_factor(NAN, 1) == 1.0 && gdn_lin_balance_factor(1, INFINITY) == 1.0);
    assert_true(fabs(gdn_lin_balance_factor(1, 16) - 2.0) < 1e-15);
    free(o);
    free(ob);
    free(qs);
    free(ks);
    head_free(&h);
}

/* Keys far larger than sqrt(t): the raw form's transition has eigenvalues far below -1 and the
 * state overflows; the call says so (-1) instead of returning NaN as if it were a result. The
 * balanced form of the same head stays finite. */
static void test_gdn_diverges_loudly(void **state) {
    (void)state;
    head_case h = head_make(300, 8, 8, 0.01, 60.0, 0.0, 900);
    const size_t n = (size_t)h.T * h.Dv;
    double *o = ref_nan_array(n);
    const int r = gdn_lin_gdn_f64(h.T, h.D, h.Dv, h.q, h.k, h.v, 1.0, 64, o);
    int finite = 1;
    for (size_t i = 0; i < n; i++) finite &= isfinite(o[i]) != 0;
    printf("raw form with |k| ~ 100: returned %d, all finite %d\n", r, finite);
    assert_int_equal(r, -1);
    assert_false(finite);
    double sq = 0, sk = 0;
    gdn_lin_norms_f64(h.T, h.D, h.q, h.k, &sq, &sk);
    assert_int_equal(gdn_lin_gdn_f64(h.T, h.D, h.Dv, h.q, h.k, h.v, gdn_lin_balance_factor(sq, sk), 64, o), 0);
    free(o);
    head_free(&h);
}

/* ---- in the model ---------------------------------------------------------------------------- */

static gdn_config attn_model(void) {
    gdn_config c = tiny_config(0, 0);
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.attn_head_dim = 6;
    c.qk_norm = 1;
    snprintf(c.mixers, sizeof c.mixers, "AA");
    return c;
}

/* No layer replaced: the loss is bitwise the plain forward's. A replaced layer changes it. */
static void test_model_hook(void **state) {
    (void)state;
    model_case c;
    case_init(&c, attn_model(), 2, 21, 41);
    int nv = 0, nv2 = 0;
    const double exact = gdn_cpu_forward_f64(c.acts, &c.t, c.params, c.tokens, c.targets, 0, &nv, NULL, NULL);
    double lambda[8];
    for (int i = 0; i < 8; i++) lambda[i] = 1.3;
    unsigned char none[2] = {0, 0}, last[2] = {0, 1};
    for (int m = 0; m < GDN_LIN_COUNT; m++) {
        const double l0 = gdn_lin_forward_replaced_f64(c.acts, &c.t, c.params, c.tokens, c.targets, &nv2, none, m,
                                                       lambda);
        assert_true(l0 == exact);
        assert_int_equal(nv2, nv);
        const double l1 = gdn_lin_forward_replaced_f64(c.acts, &c.t, c.params, c.tokens, c.targets, &nv2, last, m,
                                                       lambda);
        printf("model: exact loss %.6f, layer 1 replaced by %s %.6f\n", exact / nv, gdn_lin_method_name(m), l1 / nv);
        assert_true(isfinite(l1) && l1 != exact);
    }
    /* the hook is gone afterwards: a plain forward is the exact one again */
    assert_true(gdn_cpu_forward_f64(c.acts, &c.t, c.params, c.tokens, c.targets, 0, &nv, NULL, NULL) == exact);
    case_free(&c);
}

/* At T = 1 every approximation is exact: one key means softmax weight 1 and every form gives v_1
 * (and the centred keys are zero). */
static void test_model_short(void **state) {
    (void)state;
    model_case c;
    case_init(&c, attn_model(), 3, 1, 43);
    int nv = 0, nv2 = 0;
    const double exact = gdn_cpu_forward_f64(c.acts, &c.t, c.params, c.tokens, c.targets, 0, &nv, NULL, NULL);
    double err2[3 * 4] = {0}, ref2[4] = {0}, sq[4] = {0}, sk[4] = {0}, lambda[8];
    int div[GDN_LIN_COUNT] = {0};
    for (int l = 0; l < 2; l++) {
        gdn_lin_layer_norms_f64(c.acts, &c.t, l, sq, sk);
        for (int h = 0; h < 4; h++) lambda[l * 4 + h] = 2.0;
        gdn_lin_layer_errors_f64(c.acts, &c.t, l, lambda + l * 4, err2, ref2, div);
        assert_true(div[0] == 0 && div[1] == 0 && div[2] == 0);
    }
    for (int i = 0; i < 12; i++) assert_true(err2[i] <= 1e-28 * ref2[i % 4]);
    for (int h = 0; h < 4; h++) assert_true(ref2[h] > 0 && sk[h] == 0 && sq[h] > 0);
    unsigned char all[2] = {1, 1};
    for (int m = 0; m < GDN_LIN_COUNT; m++) {
        const double l = gdn_lin_forward_replaced_f64(c.acts, &c.t, c.params, c.tokens, c.targets, &nv2, all, m, lambda);
        assert_true(fabs(l - exact) <= 1e-13 * fabs(exact));
    }
    case_free(&c);
}

/* Keys of norm ~500 (k_norm weights of 200): the raw form's state overflows in the model too. The
 * measurement counts it and marks its error infinite while the balanced form and the baseline
 * stay finite, and the loss with that layer replaced by it is not finite (never a number that
 * looks like a result). */
static void test_model_diverged(void **state) {
    (void)state;
    model_case c;
    case_init(&c, attn_model(), 1, 200, 47);
    for (int i = 0; i < c.t.n; i++)
        if (strstr(c.t.p[i].name, "k_norm.weight"))
            for (size_t j = 0; j < c.t.p[i].numel; j++) c.params[c.t.p[i].offset + j] = 200.0;
    gdn_cpu_forward_f64(c.acts, &c.t, c.params, c.tokens, c.targets, 0, NULL, NULL, NULL);
    double sq[4] = {0}, sk[4] = {0}, lambda[8], err2[12] = {0}, ref2[4] = {0};
    gdn_lin_layer_norms_f64(c.acts, &c.t, 0, sq, sk);
    for (int h = 0; h < 4; h++) lambda[h] = lambda[4 + h] = gdn_lin_balance_factor(sq[h], sk[h]);
    int div[GDN_LIN_COUNT] = {0};
    gdn_lin_layer_errors_f64(c.acts, &c.t, 0, lambda, err2, ref2, div);
    printf("model with |k| ~ 500: %d diverged heads as derived, %d balanced, %d first-order; lambda %.3g\n",
           div[0], div[1], div[2], lambda[0]);
    assert_true(div[GDN_LIN_GDN] == 4 && div[GDN_LIN_BALANCED] == 0 && div[GDN_LIN_VALA] == 0);
    for (int h = 0; h < 4; h++) {
        assert_true(isinf(err2[GDN_LIN_GDN * 4 + h]));
        assert_true(isfinite(err2[GDN_LIN_BALANCED * 4 + h]) && isfinite(err2[GDN_LIN_VALA * 4 + h]));
    }
    unsigned char first[2] = {1, 0};
    int nv = 0;
    assert_false(isfinite(gdn_lin_forward_replaced_f64(c.acts, &c.t, c.params, c.tokens, c.targets, &nv, first,
                                                      GDN_LIN_GDN, lambda)));
    assert_true(isfinite(gdn_lin_forward_replaced_f64(c.acts, &c.t, c.params, c.tokens, c.targets, &nv, first,
                                                     GDN_LIN_BALANCED, lambda)));
    case_free(&c);
}

/* Refusals: a layer that is not attention. */
static jmp_buf die_jump;
static void die_to_test(const char *message) {
    printf("refused: %s\n", message);
    longjmp(die_jump, 1);
}

static void test_refusals(void **state) {
    (void)state;
    model_case c;
    gdn_config cfg = attn_model();
    snprintf(cfg.mixers, sizeof cfg.mixers, "GA");
    case_init(&c, cfg, 1, 5, 45);
    gdn_cpu_forward_f64(c.acts, &c.t, c.params, c.tokens, c.targets, 0, NULL, NULL, NULL);
    double sq[4] = {0}, sk[4] = {0};
    gdn_set_die_handler(die_to_test);
    int died = 0;
    if (!setjmp(die_jump)) gdn_lin_layer_norms_f64(c.acts, &c.t, 0, sq, sk);
    else died = 1;
    assert_true(died);
    died = 0;
    if (!setjmp(die_jump)) gdn_lin_layer_norms_f64(c.acts, &c.t, 2, sq, sk);
    else died = 1;
    assert_true(died);
    gdn_set_die_handler(NULL);
    gdn_lin_layer_norms_f64(c.acts, &c.t, 1, sq, sk);
    assert_true(sq[0] > 0);
    case_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gdn_form),
        cmocka_unit_test(test_gdn_form_f32),
        cmocka_unit_test(test_vala),
        cmocka_unit_test(test_balance),
        cmocka_unit_test(test_gdn_diverges_loudly),
        cmocka_unit_test(test_model_hook),
        cmocka_unit_test(test_model_short),
        cmocka_unit_test(test_model_diverged),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
