/* Softmax attention layers (mixer A) in the whole model: the tensors of an attention layer (and
 * the unchanged ones of the other layers), the gradient of patterns with attention against fp64
 * finite differences (grouped kv heads, q/k norm and biases on and off), an attention block
 * against a naive composition of the ops, decoding with a KV cache equal to the full forward,
 * the new fields in checkpoints, and the refusals (bad shapes, sequence parallelism, a cache
 * that is too short, a backward pass through a cache). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <hdf5.h>

#include "io/checkpoint.h"
#include "io/ckpt_internal.h"
#include "model/check.h"
#include "model/cpu/model_cpu.h"
#include "model/mixer.h"
#include "tests/model_case.h"
#include "tests/ref/attention_ref.h"
#include "tests/ref/fd.h"
#include "train/run_config.h"

/* tiny_config with 4 query heads over 2 kv heads of dimension 6 (the GDN layers keep K = 8). */
static gdn_config attn_config(const char *mixers, int n_layers, int qk_norm, int qkv_bias) {
    gdn_config c = tiny_config(0, 0);
    c.n_layers = n_layers;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.attn_head_dim = 6;
    c.rope_theta = 500.0; /* angles that turn visibly over 21 positions */
    c.qk_norm = qk_norm;
    c.qkv_bias = qkv_bias;
    snprintf(c.mixers, sizeof c.mixers, "%s", mixers);
    return c;
}

static jmp_buf die_jump;
static char die_message[1024];

static void die_to_test(const char *message) {
    snprintf(die_message, sizeof die_message, "%s", message);
    longjmp(die_jump, 1);
}

/* ---- parameters ---------------------------------------------------------------------------- */

static const gdn_param *layer_tensor(const gdn_param_table *t, int l, const char *suffix) {
    char name[GDN_PARAM_NAME_MAX];
    snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);
    return gdn_param_find(t, name);
}

static void assert_shape(const gdn_param *p, int ndim, int d0, int d1) {
    assert_non_null(p);
    assert_int_equal(p->ndim, ndim);
    assert_int_equal(p->shape[0], d0);
    if (ndim > 1) assert_int_equal(p->shape[1], d1);
}

/* An attention layer has its projections in the attention shape, biases and q/k norms only when
 * asked, none of the delta-rule tensors; the G layers around it are those of an all-G model. */
static void test_param_table(void **state) {
    (void)state;
    static const char *const delta_only[] = {"attn.a_proj.weight", "attn.b_proj.weight",
                                             "attn.g_proj.weight", "attn.q_conv1d.weight",
                                             "attn.k_conv1d.weight", "attn.v_conv1d.weight",
                                             "attn.A_log", "attn.dt_bias", "attn.o_norm.weight"};
    for (int flags = 0; flags < 4; flags++) {
        const int qk_norm = flags & 1, bias = flags >> 1;
        gdn_config c = attn_config("GA", 4, qk_norm, bias), g = attn_config("G", 4, 0, 0);
        gdn_param_table t, tg;
        gdn_param_table_build(&t, &c);
        gdn_param_table_build(&tg, &g);
        const int D = c.d_model, F = c.d_ff;
        for (int l = 1; l < 4; l += 2) {
            assert_int_equal(t.layer[l].mixer, GDN_MIXER_A);
            assert_shape(layer_tensor(&t, l, "attn.q_proj.weight"), 2, 4 * 6, D);
            assert_shape(layer_tensor(&t, l, "attn.k_proj.weight"), 2, 2 * 6, D);
            assert_shape(layer_tensor(&t, l, "attn.v_proj.weight"), 2, 2 * 6, D);
            assert_shape(layer_tensor(&t, l, "attn.o_proj.weight"), 2, D, 4 * 6);
            assert_shape(layer_tensor(&t, l, "attn_norm.weight"), 1, D, 0);
            assert_shape(layer_tensor(&t, l, "mlp.down_proj.weight"), 2, D, F);
            assert_int_equal(layer_tensor(&t, l, "attn.q_proj.bias") != NULL, bias);
            assert_int_equal(layer_tensor(&t, l, "attn.q_norm.weight") != NULL, qk_norm);
            if (bias) {
                assert_shape(layer_tensor(&t, l, "attn.q_proj.bias"), 1, 24, 0);
                assert_shape(layer_tensor(&t, l, "attn.k_proj.bias"), 1, 12, 0);
                assert_shape(layer_tensor(&t, l, "attn.v_proj.bias"), 1, 12, 0);
                assert_true(layer_tensor(&t, l, "attn.v_proj.bias")->no_decay);
            }
            if (qk_norm) {
                assert_shape(layer_tensor(&t, l, "attn.q_norm.weight"), 1, 6, 0);
                assert_shape(layer_tensor(&t, l, "attn.k_norm.weight"), 1, 6, 0);
                assert_true(layer_tensor(&t, l, "attn.k_norm.weight")->no_decay);
            }
            for (size_t j = 0; j < sizeof delta_only / sizeof *delta_only; j++)
                assert_null(layer_tensor(&t, l, delta_only[j]));
            assert_true(t.layer[l].g_proj == GDN_NO_TENSOR && t.layer[l].q_conv == GDN_NO_TENSOR);
            assert_true((t.layer[l].q_bias == GDN_NO_TENSOR) == !bias);
            assert_true((t.layer[l].k_norm == GDN_NO_TENSOR) == !qk_norm);
        }
        /* the G layers: same names, shapes and flags as in the all-G model, no attention extras */
        for (int i = 0; i < t.n; i++) {
            int l;
            if (sscanf(t.p[i].name, "model.layers.%d.", &l) != 1 || l % 2) continue;
            const gdn_param *q = gdn_param_find(&tg, t.p[i].name);
            assert_non_null(q);
            assert_int_equal(q->numel, t.p[i].numel);
            assert_int_equal(q->no_decay, t.p[i].no_decay);
            assert_true(t.layer[l].q_bias == GDN_NO_TENSOR && t.layer[l].q_norm == GDN_NO_TENSOR);
        }
        /* initial values: ones for the q/k norms, zeros for the biases */
        float *w = malloc(t.total * sizeof *w);
        gdn_params_init(w, &t, 5);
        if (qk_norm) assert_true(w[t.layer[1].q_norm] == 1.0f && w[t.layer[1].k_norm + 5] == 1.0f);
        if (bias) assert_true(w[t.layer[1].q_bias] == 0.0f && w[t.layer[1].v_bias + 11] == 0.0f);
        free(w);
        gdn_param_table_free(&t);
        gdn_param_table_free(&tg);
    }
}

/* Shapes that attention layers cannot take are refused by validation with a message; a model
 * without attention layers is not held to them. */
static void test_shape_errors(void **state) {
    (void)state;
    char err[512];
    gdn_config c = attn_config("GA", 2, 0, 0);
    c.n_kv_heads = 3;
    assert_int_equal(gdn_config_validate(&c, err, sizeof err), -1);
    printf("n_kv_heads 3 of 4 heads: %s\n", err);
    assert_non_null(strstr(err, "n_kv_heads = 3 does not divide n_heads = 4"));
    c = attn_config("A", 2, 0, 0);
    c.attn_head_dim = 7;
    assert_int_equal(gdn_config_validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "even head dimension"));
    c = attn_config("A", 2, 0, 0);
    c.attn_head_dim = 0;
    c.head_dim = 5; /* Da = head_dim when attn_head_dim is 0 */
    assert_int_equal(gdn_config_validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "got 5"));
    c = attn_config("G", 2, 0, 0);
    c.n_kv_heads = 3;
    c.attn_head_dim = 7;
    assert_int_equal(gdn_config_validate(&c, err, sizeof err), 0);
    c = attn_config("A", 2, 0, 0);
    c.n_kv_heads = 0; /* = n_heads */
    c.rope_theta = 0; /* = 10000 */
    assert_int_equal(gdn_config_validate(&c, err, sizeof err), 0);
}

/* ---- gradients ------------------------------------------------------------------------------ */

/* Step 2e-6 and 16 probes per tensor, as the mixer tests (tests/test_model_mixers.c). */
static void check_attn(const char *pattern, int n_layers, int qk_norm, int bias) {
    char label[64];
    snprintf(label, sizeof label, "%s qk_norm=%d qkv_bias=%d", pattern, qk_norm, bias);
    check_model_gradient_at(attn_config(pattern, n_layers, qk_norm, bias), label, 21, 16, 2e-6);
}

/* Both switches off and on in the softmax-only model; one on, one off in each hybrid. */
static void test_gradient_a(void **state) {
    (void)state;
    check_attn("A", 2, 0, 0);
    check_attn("A", 2, 1, 1);
}

static void test_gradient_ga(void **state) {
    (void)state;
    check_attn("GA", 2, 1, 0);
}

static void test_gradient_agdm(void **state) {
    (void)state;
    check_attn("AGDM", 4, 0, 1);
}

/* ---- one block against the ops composed by hand --------------------------------------------- */

static void rmsnorm_rows(double *y, const double *x, const double *w, int n, int d, double eps) {
    for (int r = 0; r < n; r++) {
        double ss = 0;
        for (int i = 0; i < d; i++) ss += x[(size_t)r * d + i] * x[(size_t)r * d + i];
        double rs = 1.0 / sqrt(ss / d + eps);
        for (int i = 0; i < d; i++) y[(size_t)r * d + i] = x[(size_t)r * d + i] * rs * w[i];
    }
}

/* y [n, o] = x [n, i] W^T (+ b) */
static void matmul_t(double *y, const double *x, const double *W, const double *b, int n, int in, int out) {
    for (int r = 0; r < n; r++)
        for (int j = 0; j < out; j++) {
            double acc = b ? b[j] : 0.0;
            for (int k = 0; k < in; k++) acc += x[(size_t)r * in + k] * W[(size_t)j * in + k];
            y[(size_t)r * out + j] = acc;
        }
}

/* The residual stream after block 0 of an "A" model: rmsnorm, projections with biases, q/k norm,
 * RoPE (tests/ref/attention_ref.c), naive attention, o_proj, residual, then the SwiGLU MLP. */
static void test_block_vs_naive(void **state) {
    (void)state;
    model_case c;
    case_init(&c, attn_config("A", 1, 1, 1), 2, 19, 31);
    const gdn_config *cfg = &c.t.cfg;
    const gdn_layer_offsets *o = &c.t.layer[0];
    const double *P = c.params;
    const int B = c.B, T = c.T, N = B * T, D = cfg->d_model, H = 4, Hkv = 2, Da = 6, F = cfg->d_ff;
    int nv;
    gdn_cpu_forward_f64(c.acts, &c.t, P, c.tokens, NULL, 0.0, &nv, NULL, NULL);
    const double *got = gdn_cpu_hidden_f64(c.acts, 0);

    double *x = calloc((size_t)N * D, sizeof(double)), *h = calloc((size_t)N * D, sizeof(double));
    double *q = malloc(sizeof(double) * N * H * Da), *k = malloc(sizeof(double) * N * Hkv * Da);
    double *v = malloc(sizeof(double) * N * Hkv * Da), *tmp = malloc(sizeof(double) * N * H * Da);
    double *att = malloc(sizeof(double) * N * H * Da), *xm = malloc(sizeof(double) * N * D);
    double *gp = malloc(sizeof(double) * N * F), *up = malloc(sizeof(double) * N * F);
    double *want = malloc(sizeof(double) * N * D);
    for (int n = 0; n < N; n++) memcpy(x + (size_t)n * D, P + c.t.embed + (size_t)c.tokens[n] * D, sizeof(double) * D);
    rmsnorm_rows(h, x, P + o->attn_norm, N, D, cfg->norm_eps);
    matmul_t(tmp, h, P + o->q_proj, P + o->q_bias, N, D, H * Da);
    rmsnorm_rows(q, tmp, P + o->q_norm, N * H, Da, cfg->norm_eps);
    rope_ref(q, q, B, T, H, Da, 0, cfg->rope_theta);
    matmul_t(tmp, h, P + o->k_proj, P + o->k_bias, N, D, Hkv * Da);
    rmsnorm_rows(k, tmp, P + o->k_norm, N * Hkv, Da, cfg->norm_eps);
    rope_ref(k, k, B, T, Hkv, Da, 0, cfg->rope_theta);
    matmul_t(v, h, P + o->v_proj, P + o->v_bias, N, D, Hkv * Da);
    gdn_attn_shape s = {B, T, H, Hkv, Da, NULL};
    attn_ref_fwd(&s, q, k, v, 1.0 / sqrt((double)Da), att, NULL);
    matmul_t(xm, att, P + o->o_proj, NULL, N, H * Da, D);
    for (int i = 0; i < N * D; i++) xm[i] += x[i];
    rmsnorm_rows(h, xm, P + o->mlp_norm, N, D, cfg->norm_eps);
    matmul_t(gp, h, P + o->gate_proj, NULL, N, D, F);
    matmul_t(up, h, P + o->up_proj, NULL, N, D, F);
    for (int i = 0; i < N * F; i++) gp[i] = gp[i] / (1.0 + exp(-gp[i])) * up[i];
    matmul_t(want, gp, P + o->down_proj, NULL, N, F, D);
    for (int i = 0; i < N * D; i++) want[i] += xm[i];
    double err = fd_rel_err(got, want, (size_t)N * D);
    printf("attention block vs the ops composed by hand: relative error %.2e\n", err);
    assert_true(err < 1e-13);
    free(x); free(h); free(q); free(k); free(v); free(tmp); free(att); free(xm); free(gp); free(up); free(want);
    case_free(&c);
}

/* ---- decoding with a KV cache ----------------------------------------------------------------- */

/* A prompt of P tokens in one pass, then segments of `step` tokens with the state, halos and
 * KV cache carried give the logits of one pass over the whole sequence. */
static double decode_vs_full(const char *pattern, int n_layers, int P, int step, int shared) {
    const int B = 2, T = 40;
    model_case c;
    case_init(&c, attn_config(pattern, n_layers, 1, 1), B, T, 23);
    const size_t Vo = (size_t)c.t.cfg.vocab_size;
    const double *full = case_logits(&c);
    case_carries k;
    case_carries_make(&k, &c.t.cfg, B, T, shared);
    double *rec = malloc((size_t)B * T * Vo * sizeof *rec);
    int cur = 0;
    for (int t0 = 0; t0 < T;) {
        const int n = t0 == 0 ? P : (T - t0 < step ? T - t0 : step);
        case_decode_segment(&c, t0, n, t0 ? &k.c[cur] : NULL, &k.c[1 - cur], rec);
        assert_int_equal(k.c[1 - cur].pos, t0 + n);
        cur = 1 - cur;
        t0 += n;
    }
    double err = fd_rel_err(rec, full, (size_t)B * T * Vo);
    printf("decoding %s (prompt %d, then %d at a time, %s cache) vs one pass: relative error %.2e\n",
           pattern, P, step, shared ? "shared" : "copied", err);
    case_carries_free(&k);
    free(rec);
    case_free(&c);
    return err;
}

static void test_decoding(void **state) {
    (void)state;
    assert_true(decode_vs_full("A", 2, 1, 1, 1) < 1e-12);
    assert_true(decode_vs_full("GA", 2, 7, 1, 1) < 1e-12);
    assert_true(decode_vs_full("AGDM", 4, 5, 3, 0) < 1e-12);
    assert_true(decode_vs_full("AGDM", 4, 17, 1, 1) < 1e-12);
}

/* The float build that `gdn sample` runs: decoding token by token picks the tokens that the
 * full forward's logits give (greedy), and the logits agree to fp32 rounding. */
static void test_decoding_f32_greedy(void **state) {
    (void)state;
    const int T = 48;
    gdn_config cfg = attn_config("GGGA", 4, 1, 1);
    gdn_param_table t;
    gdn_param_table_build(&t, &cfg);
    float *p = malloc(t.total * sizeof *p);
    gdn_params_init(p, &t, 12);
    for (size_t i = 0; i < t.total; i++) p[i] *= 8.0f; /* logits far from uniform */
    const size_t Vo = (size_t)cfg.vocab_size, L = 4, H = 4, K = 8, Vh = 16, W1 = 3;
    const size_t nkv = 1 * (size_t)T * 2 * 6;
    float *kv = calloc(2 * nkv, sizeof *kv);
    gdn_cpu_carry_f32 c[2];
    for (int i = 0; i < 2; i++)
        c[i] = (gdn_cpu_carry_f32){.S = calloc(L * H * K * Vh, 4), .halo_q = calloc(L * W1 * H * K, 4),
                                   .halo_k = calloc(L * W1 * H * K, 4), .halo_v = calloc(L * W1 * H * Vh, 4),
                                   .kv_k = kv, .kv_v = kv + nkv, .kv_len = T};
    int tok[48];
    tok[0] = 3;
    gdn_cpu_acts_f32 *a = gdn_cpu_acts_create_f32(&t, 1, 1);
    float *rec = malloc(sizeof(float) * T * Vo);
    int nv, cur = 0;
    for (int i = 0; i < T; i++) { /* greedy decoding */
        gdn_cpu_forward_f32(a, &t, p, &tok[i], NULL, 0.0f, &nv, i ? &c[cur] : NULL, &c[1 - cur]);
        cur = 1 - cur;
        const float *lg = gdn_cpu_logits_f32(a);
        memcpy(rec + (size_t)i * Vo, lg, sizeof(float) * Vo);
        int best = 0;
        for (int j = 1; j < (int)Vo; j++)
            if (lg[j] > lg[best]) best = j;
        if (i + 1 < T) tok[i + 1] = best;
    }
    gdn_cpu_acts_f32 *fa = gdn_cpu_acts_create_f32(&t, 1, T);
    gdn_cpu_forward_f32(fa, &t, p, tok, NULL, 0.0f, &nv, NULL, NULL);
    const float *full = gdn_cpu_logits_f32(fa);
    double num = 0, den = 0;
    int same = 0;
    for (int i = 0; i < T; i++) {
        int best = 0;
        for (int j = 0; j < (int)Vo; j++) {
            double d = (double)full[(size_t)i * Vo + j] - rec[(size_t)i * Vo + j];
            num += d * d;
            den += (double)full[(size_t)i * Vo + j] * full[(size_t)i * Vo + j];
            if (full[(size_t)i * Vo + j] > full[(size_t)i * Vo + best]) best = j;
        }
        same += i + 1 == T || best == tok[i + 1];
    }
    printf("fp32 greedy decoding of GGGA: %d of %d tokens as the full forward picks, logits "
           "relative error %.2e\n", same, T, sqrt(num / den));
    assert_int_equal(same, T);
    assert_true(sqrt(num / den) < 1e-5);
    gdn_cpu_acts_free_f32(a);
    gdn_cpu_acts_free_f32(fa);
    for (int i = 0; i < 2; i++) { free(c[i].S); free(c[i].halo_q); free(c[i].halo_k); free(c[i].halo_v); }
    free(kv);
    free(rec);
    free(p);
    gdn_param_table_free(&t);
}

/* ---- refusals --------------------------------------------------------------------------------- */

/* A cache shorter than the text, a backward pass through a cache and sequence-parallel hooks on
 * a model with attention layers die with a message naming the problem. */
/* Delta-rule sequence-parallel hooks that are never called (the refusal comes first). */
static void no_halo(void *user, int l, void *const halo[3], const void *const tail[3], const size_t n[3]) {
    (void)user, (void)l, (void)halo, (void)tail, (void)n;
}
static void *no_state_in(void *user, int l, const void *delta, void *S, size_t n) {
    (void)user, (void)l, (void)delta, (void)S, (void)n;
    return NULL;
}
static void no_state(void *user, int l, const void *S, size_t n) { (void)user, (void)l, (void)S, (void)n; }

static void test_refusals(void **state) {
    (void)state;
    model_case c;
    case_init(&c, attn_config("GA", 2, 0, 0), 1, 4, 3);
    case_carries k;
    case_carries_make(&k, &c.t.cfg, 1, 6, 1);
    int nv;
    gdn_set_die_handler(die_to_test);
    gdn_cpu_forward_f64(c.acts, &c.t, c.params, c.tokens, NULL, 0.0, &nv, NULL, &k.c[0]);
    if (setjmp(die_jump) == 0) { /* positions 4..7 do not fit 6 */
        gdn_cpu_forward_f64(c.acts, &c.t, c.params, c.tokens, NULL, 0.0, &nv, &k.c[0], &k.c[1]);
        fail_msg("a cache of 6 positions took 8");
    }
    assert_non_null(strstr(die_message, "KV cache holds 6 positions"));
    double *g = calloc(c.t.total, sizeof *g);
    if (setjmp(die_jump) == 0) { /* a forward from a cache, then the backward */
        gdn_cpu_forward_f64(c.acts, &c.t, c.params, c.tokens, c.targets, 1.0, &nv, &k.c[0], NULL);
        gdn_cpu_backward_f64(c.acts, &c.t, c.params, g);
        fail_msg("a backward pass through a KV cache ran");
    }
    free(g);
    assert_non_null(strstr(die_message, "KV cache"));
    if (setjmp(die_jump) == 0) { /* the delta-rule hooks alone do not serve an attention layer */
        gdn_seq_hooks h = {.fwd_halo = no_halo, .fwd_state_in = no_state_in, .fwd_state_out = no_state,
                           .bwd_state_out = no_state_in, .bwd_state_in = no_state, .bwd_halo = no_halo};
        gdn_cpu_acts_set_seq_hooks_f64(c.acts, &h);
        fail_msg("sequence-parallel hooks without the attention hooks were accepted with an attention layer");
    }
    printf("sequence parallelism: %s\n", die_message);
    assert_non_null(strstr(die_message, "the hooks attn_kv_fwd and attn_kv_bwd must be set"));
    gdn_set_die_handler(NULL);
    case_carries_free(&k);
    case_free(&c);

    /* the trainer's settings: sp > 1 with an attention layer runs on the CPU backend only; on the
     * GPU it is refused before anything runs */
    static gdn_run_config rc;
    char err[1024];
    char *argv[] = {"train", "--out=/nonexistent/never", "--mixers=GA", "--sp=2", "--backend=cuda"};
    assert_int_equal(gdn_run_config_parse(&rc, 5, argv, err, sizeof err), -1);
    printf("sp 2 with GA on cuda: %s\n", err);
    assert_non_null(strstr(err, "sequence parallelism of attention layers (mixer A in mixers \"GA\") runs on the "
                                "CPU backend only"));
    char *cpu[] = {"train", "--out=/nonexistent/never", "--mixers=GA", "--sp=2", "--backend=cpu"};
    assert_int_equal(gdn_run_config_parse(&rc, 5, cpu, err, sizeof err), 0);
    char *ok[] = {"train", "--out=/nonexistent/never", "--mixers=GA", "--sp=1", "--backend=cuda"};
    assert_int_equal(gdn_run_config_parse(&rc, 5, ok, err, sizeof err), 0);
}

/* ---- presets ---------------------------------------------------------------------------------- */

/* The attention presets resolve to valid models of the documented shape. */
static void test_presets(void **state) {
    (void)state;
    static gdn_run_config rc, ref;
    char err[1024];
    char *small[] = {"train", "--out=/nonexistent/never", "--preset=small"};
    char *attn[] = {"train", "--out=/nonexistent/never", "--preset=attn-small"};
    char *big[] = {"train", "--out=/nonexistent/never", "--preset=gdn512m"};
    char *hyb[] = {"train", "--out=/nonexistent/never", "--preset=gdn512m-hybrid"};
    size_t n_ref, n;
    assert_int_equal(gdn_run_config_parse(&ref, 3, small, err, sizeof err), 0);
    assert_int_equal(gdn_run_config_parse(&rc, 3, attn, err, sizeof err), 0);
    assert_int_equal(gdn_config_validate(&rc.model, err, sizeof err), 0);
    assert_string_equal(rc.model.mixers, "A");
    assert_int_equal(rc.model.d_model, ref.model.d_model);
    assert_int_equal(rc.model.n_layers, ref.model.n_layers);
    assert_int_equal(rc.seq_len, ref.seq_len);
    assert_int_equal(gdn_config_count_mixer(&rc.model, GDN_MIXER_A), 6);

    assert_int_equal(gdn_run_config_parse(&ref, 3, big, err, sizeof err), 0);
    assert_int_equal(gdn_run_config_parse(&rc, 3, hyb, err, sizeof err), 0);
    assert_string_equal(rc.model.mixers, "GGGA");
    assert_int_equal(gdn_param_count(&ref.model, &n_ref, err, sizeof err), 0);
    assert_int_equal(gdn_param_count(&rc.model, &n, err, sizeof err), 0);
    printf("gdn512m %zu parameters, gdn512m-hybrid %zu\n", n_ref, n);
    assert_int_equal(n, 459656384);
    assert_int_equal(gdn_config_count_mixer(&rc.model, GDN_MIXER_A), 5); /* layers 3, 7, .., 19 */
    ref.model.n_kv_heads = rc.model.n_kv_heads; /* only the pattern and the attention shape differ */
    ref.model.attn_head_dim = rc.model.attn_head_dim;
    snprintf(ref.model.mixers, sizeof ref.model.mixers, "GGGA");
    assert_memory_equal(&ref.model, &rc.model, sizeof rc.model);
}

/* ---- checkpoints ------------------------------------------------------------------------------ */

static void tmp_path(char *out, size_t len, const char *what) {
    const char *dir = getenv("TMPDIR");
    snprintf(out, len, "%s/gdn_test_attn_%d_%s.h5", dir && dir[0] ? dir : "/tmp", (int)getpid(), what);
}

/* The attention fields of m: n_kv_heads, attn_head_dim, rope_theta, and qk_norm = qkv_bias = on. */
static void assert_attn_fields(const gdn_config *m, int kv, int da, double theta, int on) {
    assert_int_equal(m->n_kv_heads, kv);
    assert_int_equal(m->attn_head_dim, da);
    assert_true(m->rope_theta == theta);
    assert_int_equal(m->qk_norm, on);
    assert_int_equal(m->qkv_bias, on);
}

/* The attention fields are stored, read back and compared on load (naming the field); the
 * tensors of a hybrid round-trip exactly; a file without the fields reads as the defaults. */
static void test_checkpoint(void **state) {
    (void)state;
    char path[512], err[1024];
    tmp_path(path, sizeof path, "rt");
    gdn_config c = attn_config("GA", 2, 1, 1);
    c.rope_theta = 123456.5;
    gdn_param_table t;
    gdn_param_table_build(&t, &c);
    float *p = malloc(t.total * sizeof *p), *q = malloc(t.total * sizeof *q);
    gdn_params_init(p, &t, 9);
    ckpt_contents cc = {.step = 5, .tokens_seen = 100, .config_json = "{}", .table = &t, .params = p};
    if (ckpt_save_atomic(path, &cc, err, sizeof err)) fail_msg("save: %s", err);
    ckpt_info info;
    assert_int_equal(ckpt_read_info(path, &info, err, sizeof err), CKPT_OK);
    assert_attn_fields(&info.model, 2, 6, 123456.5, 1);
    assert_string_equal(info.model.mixers, "GA");
    ckpt_info_free(&info);
    assert_int_equal(ckpt_load(path, &c, &t, q, NULL, NULL, NULL, err, sizeof err), CKPT_OK);
    assert_memory_equal(p, q, t.total * sizeof *p);
    gdn_config other = c;
    other.n_kv_heads = 4;
    gdn_param_table to;
    gdn_param_table_build(&to, &other);
    float *r = malloc(to.total * sizeof *r);
    assert_int_equal(ckpt_load(path, &other, &to, r, NULL, NULL, NULL, err, sizeof err), CKPT_E_MODEL);
    printf("other n_kv_heads: %s\n", err);
    assert_non_null(strstr(err, "n_kv_heads"));
    free(r);
    gdn_param_table_free(&to);
    remove(path);

    /* a G model written before the fields existed: they read as the defaults, and it loads */
    gdn_config g = tiny_config(1, 0);
    g.rope_theta = 10000.0; /* what the defaults give a new run */
    gdn_param_table tg;
    gdn_param_table_build(&tg, &g);
    float *pg = calloc(tg.total, sizeof *pg), *qg = calloc(tg.total, sizeof *qg);
    gdn_params_init(pg, &tg, 2);
    ckpt_contents cg = {.step = 1, .config_json = "{}", .model = &g, .table = &tg, .params = pg};
    if (ckpt_save_atomic(path, &cg, err, sizeof err)) fail_msg("save: %s", err);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t grp = H5Gopen2(f, "/model_config", H5P_DEFAULT);
    static const char *const fields[] = {"n_kv_heads", "attn_head_dim", "rope_theta", "qk_norm", "qkv_bias"};
    for (int i = 0; i < 5; i++) assert_true(H5Adelete(grp, fields[i]) >= 0);
    H5Gclose(grp);
    assert_true(H5Adelete(f, "meta_checksums") >= 0 && H5Adelete(f, "meta_crc32") >= 0);
    assert_int_equal(ckpt_meta_write(f, err, sizeof err), 0);
    H5Fclose(f);
    assert_int_equal(ckpt_read_info(path, &info, err, sizeof err), CKPT_OK);
    assert_attn_fields(&info.model, 0, 0, 10000.0, 0);
    ckpt_info_free(&info);
    assert_int_equal(ckpt_load(path, &g, &tg, qg, NULL, NULL, NULL, err, sizeof err), CKPT_OK);
    assert_memory_equal(pg, qg, tg.total * sizeof *pg);
    remove(path);
    free(pg);
    free(qg);
    gdn_param_table_free(&tg);
    free(p);
    free(q);
    gdn_param_table_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_param_table),
        cmocka_unit_test(test_shape_errors),
        cmocka_unit_test(test_block_vs_naive),
        cmocka_unit_test(test_decoding),
        cmocka_unit_test(test_decoding_f32_greedy),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_checkpoint),
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_gradient_a),
        cmocka_unit_test(test_gradient_ga),
        cmocka_unit_test(test_gradient_agdm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
