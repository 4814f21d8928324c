/* Per-layer mixers in the whole model (model/mixer.h, the `mixers` setting): the parameter table
 * of each kind, the gradient of mixed patterns against fp64 finite differences, pattern "G"
 * bitwise equal to the default model, recurrent decoding equal to the chunked forward, the
 * pattern in checkpoints (and its absence read as G), and the errors of bad patterns. */
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
#include "io/json.h"
#include "io/ckpt_internal.h"
#include "model/cpu/model_cpu.h"
#include "model/mixer.h"
#include "tests/model_case.h"
#include "tests/ref/fd.h"
#include "train/run_config.h"

static gdn_config mixed_config(const char *mixers, int n_layers) {
    gdn_config c = tiny_config(0, 0);
    c.n_layers = n_layers;
    snprintf(c.mixers, sizeof c.mixers, "%s", mixers);
    return c;
}

/* ---- parameters ---------------------------------------------------------------------------- */

static int has_tensor(const gdn_param_table *t, int l, const char *suffix) {
    char name[GDN_PARAM_NAME_MAX];
    snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);
    return gdn_param_find(t, name) != NULL;
}

/* Each kind keeps the tensors of the gates it reads and nothing else changes. */
static void test_param_table_per_mixer(void **state) {
    (void)state;
    static const char *const common[] = {
        "attn_norm.weight", "attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight",
        "attn.g_proj.weight", "attn.q_conv1d.weight", "attn.k_conv1d.weight", "attn.v_conv1d.weight",
        "attn.o_norm.weight", "attn.o_proj.weight", "mlp_norm.weight", "mlp.gate_proj.weight",
        "mlp.up_proj.weight", "mlp.down_proj.weight"};
    const int n_common = (int)(sizeof common / sizeof common[0]);
    gdn_param_table ref;
    gdn_config rc = mixed_config("G", 4);
    gdn_param_table_build(&ref, &rc);
    /* layer l of "GDML" has mixer l */
    gdn_config c = mixed_config("GDML", 4);
    gdn_param_table t;
    gdn_param_table_build(&t, &c);
    int per_layer[4] = {0};
    for (int i = 0; i < t.n; i++) {
        int l;
        if (sscanf(t.p[i].name, "model.layers.%d.", &l) == 1) per_layer[l]++;
    }
    for (int l = 0; l < 4; l++) {
        const gdn_mixer_info *mx = gdn_mixer_get(l);
        assert_int_equal(t.layer[l].mixer, l);
        for (int j = 0; j < n_common; j++) assert_true(has_tensor(&t, l, common[j]));
        assert_int_equal(has_tensor(&t, l, "attn.a_proj.weight"), mx->has_decay);
        assert_int_equal(has_tensor(&t, l, "attn.A_log"), mx->has_decay);
        assert_int_equal(has_tensor(&t, l, "attn.dt_bias"), mx->has_decay);
        assert_int_equal(has_tensor(&t, l, "attn.b_proj.weight"), mx->has_beta);
        assert_true((t.layer[l].a_proj == GDN_NO_TENSOR) == !mx->has_decay);
        assert_true((t.layer[l].A_log == GDN_NO_TENSOR) == !mx->has_decay);
        assert_true((t.layer[l].dt_bias == GDN_NO_TENSOR) == !mx->has_decay);
        assert_true((t.layer[l].b_proj == GDN_NO_TENSOR) == !mx->has_beta);
        assert_int_equal(per_layer[l], n_common + 3 * mx->has_decay + mx->has_beta);
    }
    /* the tensors that remain: same shapes and weight-decay flags as in the G model */
    for (int i = 0; i < t.n; i++) {
        const gdn_param *p = &t.p[i], *q = gdn_param_find(&ref, p->name);
        assert_non_null(q);
        assert_int_equal(p->ndim, q->ndim);
        assert_memory_equal(p->shape, q->shape, sizeof p->shape);
        assert_int_equal(p->no_decay, q->no_decay);
    }
    /* the pattern repeats: "GD" over 4 layers is G D G D */
    gdn_config c2 = mixed_config("GD", 4);
    gdn_param_table t2;
    gdn_param_table_build(&t2, &c2);
    for (int l = 0; l < 4; l++) assert_int_equal(t2.layer[l].mixer, l % 2 ? GDN_MIXER_D : GDN_MIXER_G);
    assert_true(has_tensor(&t2, 2, "attn.A_log") && !has_tensor(&t2, 3, "attn.A_log"));
    printf("parameters: G %zu, GDML %zu, GDGD %zu\n", ref.total, t.total, t2.total);
    gdn_param_table_free(&t2);
    gdn_param_table_free(&t);
    gdn_param_table_free(&ref);
}

/* ---- gradients ----------------------------------------------------------------------------- */

/* Two chunks (16 + 5 tokens), 16 probes per tensor. The step is 2e-6: the loss of a
 * layer without beta is curved enough along k_proj that the O(eps^2) truncation error of the
 * default 1e-5 reaches 4e-6 (it falls 100-fold per 10-fold smaller step, so it is the
 * difference formula, not the gradient). */
static void check_mixers(const char *pattern, int n_layers) {
    check_model_gradient_at(mixed_config(pattern, n_layers), pattern, 21, 16, 2e-6);
}

static void test_gradient_gdml(void **state) {
    (void)state;
    check_mixers("GDML", 4);
}

static void test_gradient_single_kinds(void **state) {
    (void)state;
    check_mixers("D", 2);
    check_mixers("M", 2);
    check_mixers("L", 2);
}

/* ---- "G" is today's model ------------------------------------------------------------------ */

/* Loss and gradient of a config with mixers = "G" (and "GG") equal bit for bit those of the
 * default (zero-initialised) config, in the fp32 training precision. */
static void test_pattern_g_is_default(void **state) {
    (void)state;
    const char *const patterns[] = {"", "G", "GG"};
    float loss[3];
    float *grad[3];
    size_t total = 0;
    for (int k = 0; k < 3; k++) {
        gdn_config c = mixed_config(patterns[k], 2);
        gdn_param_table t;
        gdn_param_table_build(&t, &c);
        if (k) assert_int_equal(t.total, total);
        total = t.total;
        float *p = malloc(t.total * sizeof *p);
        grad[k] = calloc(t.total, sizeof(float));
        gdn_params_init(p, &t, 3);
        const int B = 2, T = 37;
        int tok[2 * 37], tgt[2 * 37];
        for (int i = 0; i < B * T; i++) {
            tok[i] = (i * 7 + 3) % c.vocab_size;
            tgt[i] = (i * 11 + 5) % c.vocab_size;
        }
        gdn_cpu_acts_f32 *a = gdn_cpu_acts_create_f32(&t, B, T);
        int nv;
        loss[k] = (float)gdn_cpu_forward_f32(a, &t, p, tok, tgt, 1.0f / (B * T), &nv, NULL, NULL);
        gdn_cpu_backward_f32(a, &t, p, grad[k]);
        gdn_cpu_acts_free_f32(a);
        free(p);
        gdn_param_table_free(&t);
    }
    for (int k = 1; k < 3; k++) {
        assert_memory_equal(&loss[k], &loss[0], sizeof(float));
        assert_memory_equal(grad[k], grad[0], total * sizeof(float));
    }
    for (int k = 0; k < 3; k++) free(grad[k]);
}

/* ---- recurrent decoding ---------------------------------------------------------------------- */

/* Token-by-token forward passes (T = 1) with the state and halos carried, as `gdn sample`
 * decodes, give the logits of one chunked pass over the whole sequence, for every kind. */
static void test_recurrent_decoding(void **state) {
    (void)state;
    const int B = 2, T = 40; /* more than one chunk of 16 */
    model_case c;
    case_init(&c, mixed_config("GDML", 4), B, T, 23);
    const size_t Vo = (size_t)c.t.cfg.vocab_size;
    const double *full = case_logits(&c);
    case_carries k;
    case_carries_make(&k, &c.t.cfg, B, T, 1);
    double *rec = malloc((size_t)B * T * Vo * sizeof *rec);
    int cur = 0;
    for (int t = 0; t < T; t++) {
        case_decode_segment(&c, t, 1, t ? &k.c[cur] : NULL, &k.c[1 - cur], rec);
        cur = 1 - cur;
    }
    double err = fd_rel_err(rec, full, (size_t)B * T * Vo);
    printf("recurrent decoding vs chunked forward (GDML): relative error %.2e\n", err);
    assert_true(err < 1e-12);
    case_carries_free(&k);
    free(rec);
    case_free(&c);
}

/* ---- checkpoints ----------------------------------------------------------------------------- */

static void tmp_path(char *out, size_t len, const char *what) {
    const char *dir = getenv("TMPDIR");
    snprintf(out, len, "%s/gdn_test_mixers_%d_%s.h5", dir && dir[0] ? dir : "/tmp", (int)getpid(), what);
}

static void save_model(const char *path, const gdn_param_table *t, const float *p) {
    ckpt_contents cc = {.step = 5, .tokens_seen = 100, .config_json = "{}", .table = t, .params = p};
    char err[512];
    int st = ckpt_save_atomic(path, &cc, err, sizeof err);
    if (st) fail_msg("save: %s", err);
}

/* c's table into t and its initial parameters (seed), saved at path; returns the parameters. */
static float *save_new_model(const char *path, const gdn_config *c, gdn_param_table *t, uint64_t seed) {
    gdn_param_table_build(t, c);
    float *p = malloc(t->total * sizeof *p);
    gdn_params_init(p, t, seed);
    save_model(path, t, p);
    return p;
}

/* The checkpoint at path reports the pattern `mixers`, and its tensors load into q (c's model)
 * equal to the saved p. */
static void check_reload(const char *path, const gdn_config *c, const gdn_param_table *t, const float *p, float *q,
                         const char *mixers) {
    char err[1024];
    ckpt_info info;
    assert_int_equal(ckpt_read_info(path, &info, err, sizeof err), CKPT_OK);
    assert_string_equal(info.model.mixers, mixers);
    ckpt_info_free(&info);
    assert_int_equal(ckpt_load(path, c, t, q, NULL, NULL, NULL, err, sizeof err), CKPT_OK);
    assert_memory_equal(p, q, t->total * sizeof *p);
}

/* The pattern is stored, read back, compared on load (naming `mixers`), and the tensors of a
 * mixed model round-trip exactly. */
static void test_checkpoint_round_trip(void **state) {
    (void)state;
    char path[512], err[1024];
    tmp_path(path, sizeof path, "rt");
    gdn_config c = mixed_config("GDML", 4);
    gdn_param_table t;
    float *p = save_new_model(path, &c, &t, 9), *q = malloc(t.total * sizeof *q);

    check_reload(path, &c, &t, p, q, "GDML");

    /* "GDMLGDML" over 4 layers is the same model; "GDLM" is not */
    gdn_config same = mixed_config("GDML", 4), other = mixed_config("GDLM", 4);
    assert_int_equal(ckpt_load(path, &same, &t, q, NULL, NULL, NULL, err, sizeof err), CKPT_OK);
    assert_int_equal(ckpt_load(path, &other, &t, q, NULL, NULL, NULL, err, sizeof err), CKPT_E_MODEL);
    printf("different pattern: %s\n", err);
    assert_non_null(strstr(err, "mixers: checkpoint has \"GDML\", this run has \"GDLM\" (layer 2: M vs L)"));
    gdn_config plain = mixed_config("G", 4);
    assert_int_equal(ckpt_load(path, &plain, &t, q, NULL, NULL, NULL, err, sizeof err), CKPT_E_MODEL);
    assert_non_null(strstr(err, "mixers:"));
    remove(path);
    free(p);
    free(q);
    gdn_param_table_free(&t);
}

/* A checkpoint written before the mixer family (no /model_config/mixers, metadata checksum
 * recomputed without it) reads as "G" and loads into the G model; its pattern in the run is
 * also what a zero-initialised config means. */
static void test_checkpoint_without_mixers_is_g(void **state) {
    (void)state;
    char path[512], err[1024];
    tmp_path(path, sizeof path, "old");
    gdn_config c = mixed_config("G", 2);
    gdn_param_table t;
    float *p = save_new_model(path, &c, &t, 4), *q = malloc(t.total * sizeof *q);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(f >= 0);
    hid_t g = H5Gopen2(f, "/model_config", H5P_DEFAULT);
    assert_true(g >= 0);
    assert_true(H5Aexists(g, "mixers") > 0);
    assert_true(H5Adelete(g, "mixers") >= 0);
    H5Gclose(g);
    assert_true(H5Adelete(f, "meta_checksums") >= 0 && H5Adelete(f, "meta_crc32") >= 0);
    assert_int_equal(ckpt_meta_write(f, err, sizeof err), 0);
    H5Fclose(f);

    check_reload(path, &c, &t, p, q, "G");
    gdn_config zero = mixed_config("", 2);
    assert_int_equal(ckpt_load(path, &zero, &t, q, NULL, NULL, NULL, err, sizeof err), CKPT_OK);
    gdn_config d = mixed_config("GD", 2);
    assert_int_equal(ckpt_load(path, &d, &t, q, NULL, NULL, NULL, err, sizeof err), CKPT_E_MODEL);
    assert_non_null(strstr(err, "mixers: checkpoint has \"G\", this run has \"GD\" (layer 1: G vs D)"));
    remove(path);
    free(p);
    free(q);
    gdn_param_table_free(&t);
}

/* A stored pattern that is no valid pattern is refused with the file's reason, not used. */
static void test_checkpoint_bad_mixers_refused(void **state) {
    (void)state;
    const char *const bad[] = {"GX", "", "GGG"}; /* bad letter, empty, longer than n_layers 2 */
    for (int k = 0; k < 3; k++) {
        char path[512], err[1024];
        tmp_path(path, sizeof path, "bad");
        gdn_config c = mixed_config("G", 2);
        gdn_param_table t;
        gdn_param_table_build(&t, &c);
        float *p = calloc(t.total, sizeof *p);
        save_model(path, &t, p);
        hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
        hid_t g = H5Gopen2(f, "/model_config", H5P_DEFAULT);
        assert_true(H5Adelete(g, "mixers") >= 0);
        hid_t st = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
        H5Tset_size(st, H5T_VARIABLE);
        H5Tset_cset(st, H5T_CSET_UTF8);
        hid_t a = H5Acreate2(g, "mixers", st, sp, H5P_DEFAULT, H5P_DEFAULT);
        const char *v = bad[k];
        assert_true(H5Awrite(a, st, &v) >= 0);
        H5Aclose(a);
        H5Sclose(sp);
        H5Tclose(st);
        H5Gclose(g);
        assert_true(H5Adelete(f, "meta_checksums") >= 0 && H5Adelete(f, "meta_crc32") >= 0);
        assert_int_equal(ckpt_meta_write(f, err, sizeof err), 0);
        H5Fclose(f);
        ckpt_info info;
        assert_int_equal(ckpt_read_info(path, &info, err, sizeof err), CKPT_E_FORMAT);
        printf("stored mixers \"%s\": %s\n", bad[k], err);
        assert_non_null(strstr(err, "/model_config: attribute mixers"));
        remove(path);
        free(p);
        gdn_param_table_free(&t);
    }
}

/* ---- settings -------------------------------------------------------------------------------- */

static void test_pattern_errors(void **state) {
    (void)state;
    char err[512];
    assert_int_equal(gdn_mixers_check("GDML", 4, err, sizeof err), 0);
    assert_int_equal(gdn_mixers_check("G", 1, err, sizeof err), 0);
    assert_int_equal(gdn_mixers_check("GDXL", 4, err, sizeof err), -1);
    assert_non_null(strstr(err, "'X' at position 3 is not a mixer"));
    assert_non_null(strstr(err, "G (gdn), D (deltanet), M (gla), L (linear)"));
    assert_int_equal(gdn_mixers_check("g", 4, err, sizeof err), -1);
    assert_non_null(strstr(err, "'g'"));
    assert_int_equal(gdn_mixers_check("G D", 4, err, sizeof err), -1);
    assert_non_null(strstr(err, "byte 0x20"));
    assert_int_equal(gdn_mixers_check("", 4, err, sizeof err), -1);
    assert_non_null(strstr(err, "mixers is empty"));
    assert_int_equal(gdn_mixers_check("GDMLG", 4, err, sizeof err), -1);
    assert_non_null(strstr(err, "n_layers = 4"));
    char longp[GDN_MAX_MIXERS + 2];
    memset(longp, 'G', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    assert_int_equal(gdn_mixers_check(longp, GDN_MAX_LAYERS, err, sizeof err), -1);
    assert_non_null(strstr(err, "longer than"));

    /* the config: "" is the default (G); a bad letter is refused */
    gdn_config c = mixed_config("", 2);
    assert_int_equal(gdn_config_validate(&c, err, sizeof err), 0);
    c = mixed_config("GZ", 2);
    assert_int_equal(gdn_config_validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "'Z'"));

    /* the settings: --mixers, JSON, and the default */
    gdn_run_config rc;
    char *ok[] = {"gdn", "--out", "x", "--n_layers", "4", "--mixers", "GDML"};
    assert_int_equal(gdn_run_config_parse(&rc, 7, ok, err, sizeof err), 0);
    assert_string_equal(rc.model.mixers, "GDML");
    char *dflt[] = {"gdn", "--out", "x"};
    assert_int_equal(gdn_run_config_parse(&rc, 3, dflt, err, sizeof err), 0);
    assert_string_equal(rc.model.mixers, "G");
    char *bad[] = {"gdn", "--out", "x", "--mixers=GQ"};
    assert_int_equal(gdn_run_config_parse(&rc, 4, bad, err, sizeof err), -1);
    printf("--mixers=GQ: %s\n", err);
    assert_non_null(strstr(err, "'Q'"));
    char *empty[] = {"gdn", "--out", "x", "--mixers="};
    assert_int_equal(gdn_run_config_parse(&rc, 4, empty, err, sizeof err), -1);
    printf("--mixers=: %s\n", err);
    assert_non_null(strstr(err, "mixers is empty"));
    char *toolong[] = {"gdn", "--out", "x", "--n_layers", "2", "--mixers", "GDM"};
    assert_int_equal(gdn_run_config_parse(&rc, 7, toolong, err, sizeof err), -1);
    assert_non_null(strstr(err, "n_layers = 2"));
    assert_int_equal(gdn_run_config_from_json_text(&rc, "{\"mixers\": \"GM\"}", err, sizeof err), 0);
    assert_string_equal(rc.model.mixers, "GM");
    /* config.json carries the pattern */
    io_jw w;
    io_jw_init(&w, 0);
    gdn_run_config_to_json(&rc, &w);
    assert_non_null(strstr(io_jw_text(&w), "\"mixers\""));
    assert_non_null(strstr(io_jw_text(&w), "\"GM\""));
    io_jw_free(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_param_table_per_mixer),
        cmocka_unit_test(test_pattern_g_is_default),
        cmocka_unit_test(test_recurrent_decoding),
        cmocka_unit_test(test_checkpoint_round_trip),
        cmocka_unit_test(test_checkpoint_without_mixers_is_g),
        cmocka_unit_test(test_checkpoint_bad_mixers_refused),
        cmocka_unit_test(test_pattern_errors),
        cmocka_unit_test(test_gradient_gdml),
        cmocka_unit_test(test_gradient_single_kinds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
