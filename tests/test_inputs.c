/* Input handling: strict number parsing (io/parse_num), setting ranges and model sizes without
 * overflow, and sampling from logits that are NaN or infinite (the sampler and gdn sample on a
 * checkpoint whose weights are NaN or overflow). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "io/parse_num.h"
#include "model/config.h"
#include "model/params.h"
#include "train/commands.h"
#include "train/run_config.h"
#include "train/sample.h"

#define ASSERT_CONTAINS(hay, needle)                                                  \
    do {                                                                              \
        if (!strstr((hay), (needle)))                                                 \
            fail_msg("message \"%s\"\n  does not contain \"%s\"", (hay), (needle));   \
    } while (0)

/* ---- io/parse_num ---------------------------------------------------------------------- */

static void test_parse_int_strict(void **state) {
    (void)state;
    static const char *bad[] = {"",    " 5",   "5 ",  "+5",  "16x", "0x10", "1e3", "5.0", "5.",
                                "-",   "--5",  "5-",  "nan", "inf", "1 2",  "\t5", "5\n", "٥",
                                "99999999999999999999", "-99999999999999999999", "9223372036854775808"};
    char err[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t v = 77;
        if (io_parse_i64("--x", bad[i], INT64_MIN, INT64_MAX, &v, err, sizeof err) == 0)
            fail_msg("'%s' was accepted as %lld", bad[i], (long long)v);
        assert_int_equal(v, 77); /* untouched */
        ASSERT_CONTAINS(err, "--x expects an integer");
    }
    int64_t v;
    assert_int_equal(io_parse_i64("--x", "9223372036854775807", INT64_MIN, INT64_MAX, &v, err, sizeof err), 0);
    assert_true(v == INT64_MAX);
    assert_int_equal(io_parse_i64("--x", "-9223372036854775808", INT64_MIN, INT64_MAX, &v, err, sizeof err), 0);
    assert_true(v == INT64_MIN);
    assert_int_equal(io_parse_i64("--x", "007", 0, 10, &v, err, sizeof err), 0);
    assert_int_equal(v, 7);
    assert_int_equal(io_parse_i64("--x", "-0", 0, 10, &v, err, sizeof err), 0);
    assert_int_equal(v, 0);
    /* range, both ends */
    int iv = 5;
    assert_int_equal(io_parse_int("--chunk", "65", 16, 64, &iv, err, sizeof err), -1);
    assert_string_equal(err, "--chunk expects an integer from 16 to 64, got '65'");
    assert_int_equal(io_parse_int("--chunk", "15", 16, 64, &iv, err, sizeof err), -1);
    assert_int_equal(io_parse_int("--n", "2147483648", INT_MIN, INT_MAX, &iv, err, sizeof err), -1);
    assert_int_equal(io_parse_int("--n", "-1", 0, 3, &iv, err, sizeof err), -1);
    assert_int_equal(iv, 5);
    assert_int_equal(io_parse_int("--chunk", "16", 16, 64, &iv, err, sizeof err), 0);
    assert_int_equal(iv, 16);
    assert_int_equal(io_parse_int("--n", NULL, 0, 3, &iv, err, sizeof err), -1);
    /* unsigned */
    uint64_t u;
    assert_int_equal(io_parse_u64("--seed", "18446744073709551615", UINT64_MAX, &u, err, sizeof err), 0);
    assert_true(u == UINT64_MAX);
    assert_int_equal(io_parse_u64("--seed", "18446744073709551616", UINT64_MAX, &u, err, sizeof err), -1);
    assert_int_equal(io_parse_u64("--seed", "-1", UINT64_MAX, &u, err, sizeof err), -1);
    assert_int_equal(io_parse_u64("--seed", "-0", UINT64_MAX, &u, err, sizeof err), 0);
    /* a long argument is quoted cut short */
    char longarg[400];
    memset(longarg, '7', sizeof longarg - 2);
    longarg[sizeof longarg - 2] = 'x';
    longarg[sizeof longarg - 1] = 0;
    assert_int_equal(io_parse_int("--n", longarg, 0, 3, &iv, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "...'");
    assert_true(strlen(err) < 200);
}

static void test_parse_real_strict(void **state) {
    (void)state;
    static const char *bad[] = {"",     " 1",   "1 ",   "+1",   "nan",  "NaN",  "inf",   "-inf",
                                "Infinity", "0x1p3", "1e",  "1e+",  ".",    "-.",   "e5",    "1.2.3",
                                "1,5",  "1e400", "-1e400", "1e-400", "1ee3", "--1", "1d", "0x10"};
    char err[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        double v = 77;
        if (io_parse_f64("--lr", bad[i], -DBL_MAX, DBL_MAX, &v, err, sizeof err) == 0)
            fail_msg("'%s' was accepted as %g", bad[i], v);
        assert_true(v == 77);
        ASSERT_CONTAINS(err, "--lr expects a finite number");
    }
    static const struct { const char *s; double v; } good[] = {
        {"1", 1}, {"-0.5", -0.5}, {".5", 0.5}, {"5.", 5}, {"1e-3", 1e-3}, {"1E+3", 1e3},
        {"0", 0}, {"3e-300", 3e-300}, {"1.7976931348623157e308", DBL_MAX}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        double v;
        assert_int_equal(io_parse_f64("--lr", good[i].s, -DBL_MAX, DBL_MAX, &v, err, sizeof err), 0);
        assert_true(v == good[i].v);
    }
    double v;
    assert_int_equal(io_parse_f64("--t", "2", 0, 1, &v, err, sizeof err), -1);
    assert_int_equal(io_parse_f64("--t", "-0.1", 0, 1, &v, err, sizeof err), -1);
}

/* ---- model sizes --------------------------------------------------------------------------- */

static gdn_config tiny_model(void) {
    return (gdn_config){.vocab_size = 256, .d_model = 16, .n_layers = 1, .n_heads = 2, .head_dim = 8,
                        .expand_v = 1, .d_ff = 32, .conv_width = 4, .chunk_size = 16,
                        .tie_embeddings = 0, .allow_neg_eigval = 0, .norm_eps = 1e-6};
}

/* Every integer model setting at extreme values: a clear error naming it, no overflow, no
 * allocation attempted (a wrapped product would make a short buffer). */
static void test_model_extremes(void **state) {
    (void)state;
    static const int extremes[] = {INT_MIN, -1, INT_MAX, INT_MAX / 2 + 1, 1 << 30, -(1 << 30), 0};
    size_t offs[] = {offsetof(gdn_config, vocab_size), offsetof(gdn_config, d_model),
                     offsetof(gdn_config, n_layers),   offsetof(gdn_config, n_heads),
                     offsetof(gdn_config, head_dim),   offsetof(gdn_config, expand_v),
                     offsetof(gdn_config, d_ff),       offsetof(gdn_config, conv_width),
                     offsetof(gdn_config, chunk_size), offsetof(gdn_config, tie_embeddings),
                     offsetof(gdn_config, allow_neg_eigval)};
    const char *names[] = {"vocab_size", "d_model", "n_layers", "n_heads", "head_dim", "expand_v",
                           "d_ff", "conv_width", "chunk_size", "tie_embeddings", "allow_neg_eigval"};
    char err[512];
    for (size_t f = 0; f < sizeof offs / sizeof offs[0]; f++)
        for (size_t e = 0; e < sizeof extremes / sizeof extremes[0]; e++) {
            if (extremes[e] == 0 && f >= 9) continue; /* the two flags may be 0 */
            gdn_config c = tiny_model();
            *(int *)((char *)&c + offs[f]) = extremes[e];
            err[0] = 0;
            int r = gdn_config_validate(&c, err, sizeof err);
            if (r == 0) fail_msg("%s = %d was accepted", names[f], extremes[e]);
            ASSERT_CONTAINS(err, names[f]);
        }
    /* n_heads = 2^31 - 1: the case that overflowed an int in the parameter table */
    gdn_config c = tiny_model();
    c.n_heads = INT_MAX;
    assert_int_equal(gdn_config_validate(&c, err, sizeof err), -1);
    assert_string_equal(err, "n_heads must be in 1..4096 (got 2147483647)");
    size_t total = 0;
    assert_int_equal(gdn_param_count(&c, &total, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "q_proj");
    ASSERT_CONTAINS(err, "2147483647 elements");
    /* each setting inside its range, together too large */
    c = tiny_model();
    c.vocab_size = GDN_MAX_VOCAB;
    c.d_model = GDN_MAX_D_MODEL;
    assert_int_equal(gdn_config_validate(&c, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "model.embeddings.weight would have more than 2147483647 elements");
    c = tiny_model();
    c.n_layers = GDN_MAX_LAYERS;
    c.d_model = 8192;
    c.d_ff = 32768;
    assert_int_equal(gdn_config_validate(&c, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "more than 68719476736 parameters");
    c = tiny_model();
    c.norm_eps = NAN;
    assert_int_equal(gdn_config_validate(&c, err, sizeof err), -1);
    /* a valid model: the count matches the table */
    c = tiny_model();
    assert_int_equal(gdn_param_count(&c, &total, err, sizeof err), 0);
    gdn_param_table t;
    gdn_param_table_build(&t, &c);
    assert_int_equal(total, t.total);
    gdn_param_table_free(&t);
}

/* Every numeric setting of gdn train on the command line at malformed and extreme values. */
static void test_run_config_extremes(void **state) {
    (void)state;
    static const char *keys[] = {
        "vocab_size", "d_model", "n_layers", "n_heads", "head_dim", "expand_v", "d_ff", "conv_width",
        "chunk_size", "norm_eps", "val_tokens", "steps", "seed", "threads", "batch_size", "seq_len",
        "batch_tokens", "lr", "lr_min", "warmup_steps", "decay_steps", "weight_decay", "beta1", "beta2",
        "adam_eps", "grad_clip", "eval_every", "eval_batches", "log_every", "ckpt_every", "keep", "sp",
        "zero", "tie_embeddings", "allow_neg_eigval"};
    static const char *always_bad[] = {"", " 1", "1 ", "16x", "0x10", "nan", "inf", "-inf", "1e400",
                                       "99999999999999999999999x", "abc", "+1", "1,5"};
    static const char *range_bad[] = {"-99999999999999999999999", "-99999999999999999999999.5"};
    static gdn_run_config rc;
    char err[1024], arg[128];
    int tried = 0;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        for (size_t v = 0; v < sizeof always_bad / sizeof always_bad[0]; v++) {
            snprintf(arg, sizeof arg, "--%s=%s", keys[k], always_bad[v]);
            char *argv[] = {"train", "--out=/nonexistent/never", arg};
            err[0] = 0;
            if (gdn_run_config_parse(&rc, 3, argv, err, sizeof err) != -1) fail_msg("%s was accepted", arg);
            ASSERT_CONTAINS(err, keys[k]);
            tried++;
        }
        for (size_t v = 0; v < sizeof range_bad / sizeof range_bad[0]; v++) {
            snprintf(arg, sizeof arg, "--%s=%s", keys[k], range_bad[v]);
            char *argv[] = {"train", "--out=/nonexistent/never", arg};
            if (gdn_run_config_parse(&rc, 3, argv, err, sizeof err) != -1) fail_msg("%s was accepted", arg);
            ASSERT_CONTAINS(err, keys[k]);
            tried++;
        }
    }
    assert_true(tried > 400);
    /* the reported cases */
    char *a1[] = {"train", "--out=x", "--n_heads=2147483647"};
    assert_int_equal(gdn_run_config_parse(&rc, 3, a1, err, sizeof err), -1);
    assert_string_equal(err, "--n_heads expects an integer from 1 to 4096, got '2147483647'");
    char *a2[] = {"train", "--out=x", "--lr", "nan"};
    assert_int_equal(gdn_run_config_parse(&rc, 4, a2, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "--lr expects a finite number");
    char *a3[] = {"train", "--out=x", "--steps=1e3"};
    assert_int_equal(gdn_run_config_parse(&rc, 3, a3, err, sizeof err), -1);
    char *a4[] = {"train", "--out=x", "--batch_size=1048576", "--seq_len=16777216"};
    assert_int_equal(gdn_run_config_parse(&rc, 4, a4, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "batch_size x seq_len");
    char *a5[] = {"train", "--out=x", "--preset"};
    assert_int_equal(gdn_run_config_parse(&rc, 3, a5, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "'--preset' needs a value");
    /* good values still parse, with the strict forms */
    char *ok[] = {"train", "--out=x", "--lr=2e-3", "--steps", "12", "--tie_embeddings=1", "--seed=-3",
                  "--norm_eps=.5"};
    assert_int_equal(gdn_run_config_parse(&rc, 8, ok, err, sizeof err), 0);
    assert_true(rc.lr == 2e-3 && rc.steps == 12 && rc.model.tie_embeddings == 1 && rc.seed == -3 &&
                rc.model.norm_eps == 0.5);
    /* a saved config out of range is refused as well */
    assert_int_equal(gdn_run_config_from_json_text(&rc, "{\"n_heads\": 100000}", err, sizeof err), -1);
    ASSERT_CONTAINS(err, "n_heads");
}

/* ---- sampling ------------------------------------------------------------------------------ */

static void test_sample_token_nonfinite(void **state) {
    (void)state;
    enum { V = 8 };
    double probs[V];
    uint64_t rng = 1;
    float x[V];
    const double temps[] = {0.0, 1e-300, 1e-6, 0.8, 1.0, 1e6, 1e300, INFINITY, NAN, -1.0};
    const int topks[] = {INT_MIN, -1, 0, 1, 2, V - 1, V, V + 1, INT_MAX};
    for (size_t ti = 0; ti < sizeof temps / sizeof temps[0]; ti++)
        for (size_t ki = 0; ki < sizeof topks / sizeof topks[0]; ki++) {
            const double T = temps[ti];
            const int k = topks[ki];
            /* all NaN, one NaN: no token */
            for (int i = 0; i < V; i++) x[i] = NAN;
            assert_int_equal(gdn_sample_token(x, V, T, k, &rng, probs), -1);
            for (int i = 0; i < V; i++) x[i] = (float)i;
            x[3] = NAN;
            assert_int_equal(gdn_sample_token(x, V, T, k, &rng, probs), -1);
            /* all -inf: no distribution */
            for (int i = 0; i < V; i++) x[i] = -INFINITY;
            assert_int_equal(gdn_sample_token(x, V, T, k, &rng, probs), -1);
            /* one finite among -inf: that one */
            x[5] = -1e30f;
            assert_int_equal(gdn_sample_token(x, V, T, k, &rng, probs), 5);
            /* +inf wins over everything finite; among several +inf, one of them */
            for (int i = 0; i < V; i++) x[i] = (float)i;
            x[2] = INFINITY;
            assert_int_equal(gdn_sample_token(x, V, T, k, &rng, probs), 2);
            x[6] = INFINITY;
            x[0] = -INFINITY;
            for (int r = 0; r < 20; r++) {
                int tok = gdn_sample_token(x, V, T, k, &rng, probs);
                assert_true(tok == 2 || tok == 6);
            }
            /* extreme finite logits: the large ones win unless the temperature is beyond all
             * scale (infinite: uniform) */
            for (int i = 0; i < V; i++) x[i] = (i % 2 ? 1 : -1) * 3.4e38f;
            int tok = gdn_sample_token(x, V, T, k, &rng, probs);
            assert_true(tok >= 0 && tok < V);
            if (!(T > 1e6)) assert_true(tok % 2 == 1);
        }
    /* greedy and top-k 1 pick the first largest */
    for (int i = 0; i < V; i++) x[i] = (float)(i % 4);
    assert_int_equal(gdn_sample_token(x, V, 0.0, 0, &rng, probs), 3);
    assert_int_equal(gdn_sample_token(x, V, 1.0, 1, &rng, probs) % 4, 3);
    /* top-k keeps the k largest only */
    for (int i = 0; i < V; i++) x[i] = (float)i;
    for (int r = 0; r < 200; r++) assert_true(gdn_sample_token(x, V, 100.0, 3, &rng, probs) >= 5);
    /* degenerate vocabularies */
    assert_int_equal(gdn_sample_token(x, 0, 1.0, 0, &rng, probs), -1);
    x[0] = 0.5f;
    assert_int_equal(gdn_sample_token(x, 1, 1.0, 5, &rng, probs), 0);
    assert_int_equal(gdn_first_nonfinite(x, V), -1);
    x[4] = -INFINITY;
    assert_int_equal(gdn_first_nonfinite(x, V), 4);
}

/* Random logits with NaN, infinities and huge values mixed in: the draw is a token or -1, and
 * -1 exactly when a NaN is present or nothing is above -inf. */
static void test_sample_token_random(void **state) {
    (void)state;
    enum { V = 37 };
    float x[V];
    double probs[V];
    uint64_t s = 12345, rng = 7;
    const float special[] = {NAN, INFINITY, -INFINITY, 3.4e38f, -3.4e38f, 1e-45f, 0.0f, -0.0f};
    for (int trial = 0; trial < 20000; trial++) {
        int has_nan = 0, any = 0;
        for (int i = 0; i < V; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            unsigned r = (unsigned)(s >> 33);
            x[i] = r % 5 == 0 ? special[(r / 5) % 8] : (float)((int)(r % 2001) - 1000) / 10.0f;
            if (trial % 7 == 0 && x[i] == x[i]) x[i] = -INFINITY; /* mostly -inf rows */
            has_nan |= isnan(x[i]);
            any |= x[i] > -INFINITY;
        }
        double T = trial % 3 == 0 ? 0.0 : pow(10.0, (double)(trial % 13) - 6.0);
        int k = (int)(s >> 20) % (V + 3) - 1;
        int tok = gdn_sample_token(x, V, T, k, &rng, probs);
        if (has_nan || !any) assert_int_equal(tok, -1);
        else {
            assert_true(tok >= 0 && tok < V);
            assert_true(x[tok] > -INFINITY);
        }
    }
}

/* gdn sample on a checkpoint whose parameters are NaN (checksums correct, as a diverged trainer
 * writes them) and on one whose finite weights overflow the logits: exit 1 with a message naming
 * the checkpoint, the step and the position, nothing sampled. */
static char g_dir[64];

static void write_ckpt(const char *path, float fill_value, int nan_tensor) {
    static gdn_run_config rc;
    char err[1024];
    char *argv[] = {"train", "--out=x", "--d_model=16", "--n_layers=1", "--n_heads=2", "--head_dim=8",
                    "--expand_v=1", "--d_ff=32", "--chunk_size=16"};
    assert_int_equal(gdn_run_config_parse(&rc, 9, argv, err, sizeof err), 0);
    gdn_param_table t;
    gdn_param_table_build(&t, &rc.model);
    float *p = malloc(t.total * sizeof *p);
    gdn_params_init(p, &t, 1);
    if (nan_tensor >= 0)
        for (size_t i = 0; i < t.p[nan_tensor].numel; i++) p[t.p[nan_tensor].offset + i] = fill_value;
    else
        for (size_t i = 0; i < t.total; i++) p[i] = fill_value;
    io_jw w;
    io_jw_init(&w, 1);
    gdn_run_config_to_json(&rc, &w);
    ckpt_contents c = {.step = 7, .tokens_seen = 7 * 128, .config_json = io_jw_text(&w), .table = &t,
                       .params = p};
    if (ckpt_save_atomic(path, &c, err, sizeof err)) fail_msg("saving %s: %s", path, err);
    io_jw_free(&w);
    free(p);
    gdn_param_table_free(&t);
}

static int run_sample(const char *ckpt, const char *errfile, char *msg, size_t msg_len) {
    char *argv[] = {"sample", "--ckpt", (char *)ckpt, "--bytes", "16", "--prompt", "In the", "--top-k", "5"};
    fflush(stderr);
    int saved = dup(2);
    FILE *f = freopen(errfile, "w", stderr);
    assert_non_null(f);
    int r = gdn_cmd_sample(9, argv);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *in = fopen(errfile, "r");
    size_t n = fread(msg, 1, msg_len - 1, in);
    msg[n] = 0;
    fclose(in);
    return r;
}

static void test_sample_nan_checkpoint(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/gdn_test_inputs_XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    char path[128], errfile[128], msg[4096], cmd[256];
    snprintf(errfile, sizeof errfile, "%s/stderr.txt", g_dir);
    /* all parameters NaN */
    snprintf(path, sizeof path, "%s/nan.h5", g_dir);
    write_ckpt(path, NAN, -1);
    assert_int_equal(run_sample(path, errfile, msg, sizeof msg), 1);
    ASSERT_CONTAINS(msg, path);
    ASSERT_CONTAINS(msg, "(step 7)");
    ASSERT_CONTAINS(msg, "logits are not finite (NaN");
    ASSERT_CONTAINS(msg, "at position 5");
    /* only the final norm NaN */
    write_ckpt(path, NAN, 0);
    assert_int_equal(run_sample(path, errfile, msg, sizeof msg), 1);
    ASSERT_CONTAINS(msg, "logits are not finite");
    /* finite weights so large the logits overflow */
    snprintf(path, sizeof path, "%s/huge.h5", g_dir);
    write_ckpt(path, 3e38f, -1);
    assert_int_equal(run_sample(path, errfile, msg, sizeof msg), 1);
    ASSERT_CONTAINS(msg, "logits are not finite");
    /* a healthy checkpoint samples */
    snprintf(path, sizeof path, "%s/ok.h5", g_dir);
    write_ckpt(path, 0, -2);
    assert_int_equal(run_sample(path, errfile, msg, sizeof msg), 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (!getenv("GDN_TEST_KEEP")) assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_int_strict),
        cmocka_unit_test(test_parse_real_strict),
        cmocka_unit_test(test_model_extremes),
        cmocka_unit_test(test_run_config_extremes),
        cmocka_unit_test(test_sample_token_nonfinite),
        cmocka_unit_test(test_sample_token_random),
        cmocka_unit_test(test_sample_nan_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
