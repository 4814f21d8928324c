/* The model configuration's field table (model/config_fields.h) walked field by field: each
 * field round-trips through config.json and through a checkpoint, a change to it is reported
 * naming it, and each value out of its range is refused naming it. A field added to the table
 * is covered here without an edit. Also the run setting precision (parse, refuse, round trip,
 * free to change on resume). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include <hdf5.h>

#include "io/checkpoint.h"
#include "io/ckpt_internal.h"
#include "io/json.h"
#include "model/config.h"
#include "model/params.h"
#include "train/run_config.h"
#include "train/run_dir.h"

#define ASSERT_CONTAINS(s, sub)                                                                    \
    do {                                                                                           \
        if (!strstr((s), (sub))) fail_msg("\"%s\" does not contain \"%s\"", (s), (sub));           \
    } while (0)

static char *member(gdn_config *c, const gdn_config_field *f) { return (char *)c + f->offset; }

static void set_number(gdn_config *c, const gdn_config_field *f, double v) {
    if (f->type == GDN_FIELD_DOUBLE) *(double *)member(c, f) = v;
    else *(int *)member(c, f) = (int)v;
}

/* The defaults with field f set to a value other than its default that passes the field's own
 * check: the first that does of a few candidates. */
static gdn_config changed(const gdn_config_field *f) {
    gdn_config c;
    gdn_config_defaults(&c);
    char err[512];
    if (f->type == GDN_FIELD_STR) {
        char twice[2 * GDN_MAX_MIXERS + 2];
        snprintf(twice, sizeof twice, "%s%s", f->def_str, f->def_str);
        const char *cand[] = {"D", "GD", twice};
        for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
            if (!strcmp(cand[i], f->def_str) || strlen(cand[i]) >= f->size) continue;
            gdn_config_defaults(&c);
            snprintf(member(&c, f), f->size, "%s", cand[i]);
            if (gdn_config_check_field(&c, f, err, sizeof err) == 0) return c;
        }
    } else {
        const double cand[] = {f->hi, f->lo, f->lo + 1, (f->lo + f->hi) / 2, f->hi - 1};
        for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
            if (cand[i] == f->def) continue;
            gdn_config_defaults(&c);
            set_number(&c, f, cand[i]);
            if (gdn_config_check_field(&c, f, err, sizeof err) == 0) return c;
        }
    }
    fail_msg("no valid value other than the default found for field %s", f->name);
    return c;
}

static void assert_field_equal(const gdn_config *a, const gdn_config *b, const gdn_config_field *f) {
    const char *x = (const char *)a + f->offset, *y = (const char *)b + f->offset;
    if (f->type == GDN_FIELD_STR) assert_string_equal(x, y);
    else if (memcmp(x, y, f->size)) fail_msg("field %s did not round-trip", f->name);
}

static void test_table_matches_struct(void **state) {
    (void)state;
    size_t covered = 0;
    for (int i = 0; i < GDN_CONFIG_N_FIELDS; i++) {
        const gdn_config_field *f = &gdn_config_fields[i];
        assert_true(f->offset + f->size <= sizeof(gdn_config));
        assert_true(f->lo <= f->hi);
        assert_non_null(f->help);
        covered += f->size;
        for (int j = 0; j < i; j++) assert_string_not_equal(f->name, gdn_config_fields[j].name);
    }
    assert_true(covered <= sizeof(gdn_config));
    /* the defaults are a valid model */
    gdn_config c;
    char err[512];
    gdn_config_defaults(&c);
    if (gdn_config_validate(&c, err, sizeof err)) fail_msg("defaults: %s", err);
}

/* Every field through config.json: a changed value comes back, and is reported as a change. */
static void test_fields_round_trip_json(void **state) {
    (void)state;
    static gdn_run_config rc, back;
    char err[1024], diff[1024];
    for (int i = 0; i < GDN_CONFIG_N_FIELDS; i++) {
        const gdn_config_field *f = &gdn_config_fields[i];
        if (gdn_run_config_from_json_text(&rc, "{}", err, sizeof err)) fail_msg("%s", err);
        rc.model = changed(f);
        io_jw w;
        io_jw_init(&w, 1);
        gdn_run_config_to_json(&rc, &w);
        if (gdn_run_config_from_json_text(&back, io_jw_text(&w), err, sizeof err))
            fail_msg("field %s: %s", f->name, err);
        char key[80];
        snprintf(key, sizeof key, "\"%s\":", f->name);
        ASSERT_CONTAINS(io_jw_text(&w), key);
        io_jw_free(&w);
        assert_field_equal(&rc.model, &back.model, f);
        assert_int_equal(gdn_config_diff(&rc.model, &back.model, "config.json", 0, diff, sizeof diff), 0);
        gdn_config d;
        gdn_config_defaults(&d);
        assert_int_equal(gdn_config_diff(&d, &rc.model, "config.json", 0, diff, sizeof diff), 1);
        ASSERT_CONTAINS(diff, f->name);
        ASSERT_CONTAINS(diff, "config.json has");
    }
}

static void tmp_file(char *out, size_t len, const char *what) {
    const char *dir = getenv("TMPDIR");
    snprintf(out, len, "%s/gdn_test_fields_%d_%s", dir && dir[0] ? dir : "/tmp", (int)getpid(), what);
}

/* Every field through a checkpoint's /model_config; a field that old files may lack reads as its
 * default when the attribute is gone. */
static void test_fields_round_trip_checkpoint(void **state) {
    (void)state;
    gdn_config small;
    gdn_config_defaults(&small);
    small.d_model = 16;
    small.head_dim = 8;
    small.d_ff = 16;
    gdn_param_table t;
    gdn_param_table_build(&t, &small);
    float *p = calloc(t.total, sizeof *p);
    char path[512], err[1024];
    tmp_file(path, sizeof path, "rt.h5");
    for (int i = 0; i < GDN_CONFIG_N_FIELDS; i++) {
        const gdn_config_field *f = &gdn_config_fields[i];
        gdn_config c = changed(f);
        ckpt_contents cc = {.step = 1, .config_json = "{}", .model = &c, .table = &t, .params = p};
        if (ckpt_save_atomic(path, &cc, err, sizeof err)) fail_msg("%s", err);
        ckpt_info info;
        if (ckpt_read_info(path, &info, err, sizeof err)) fail_msg("field %s: %s", f->name, err);
        assert_field_equal(&c, &info.model, f);
        char diff[1024];
        assert_int_equal(gdn_config_diff(&info.model, &c, "checkpoint", 0, diff, sizeof diff), 0);
        ckpt_info_free(&info);
        /* the attribute is there under the field's name, of the field's type */
        hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
        assert_true(file >= 0);
        hid_t g = H5Gopen2(file, "/model_config", H5P_DEFAULT);
        hid_t a = H5Aopen(g, f->name, H5P_DEFAULT);
        assert_true(a >= 0);
        hid_t type = H5Aget_type(a);
        H5T_class_t cls = H5Tget_class(type);
        assert_int_equal(cls, f->type == GDN_FIELD_STR      ? H5T_STRING
                              : f->type == GDN_FIELD_DOUBLE ? H5T_FLOAT
                                                            : H5T_INTEGER);
        if (cls != H5T_STRING) assert_int_equal(H5Tget_size(type), 8);
        H5Tclose(type);
        H5Aclose(a);
        if (f->optional) {
            assert_true(H5Adelete(g, f->name) >= 0);
            assert_true(H5Adelete(file, "meta_checksums") >= 0 && H5Adelete(file, "meta_crc32") >= 0);
            assert_int_equal(ckpt_meta_write(file, err, sizeof err), 0);
        }
        H5Gclose(g);
        H5Fclose(file);
        if (f->optional) {
            if (ckpt_read_info(path, &info, err, sizeof err)) fail_msg("field %s absent: %s", f->name, err);
            gdn_config d;
            gdn_config_defaults(&d);
            assert_field_equal(&d, &info.model, f);
            ckpt_info_free(&info);
        }
        remove(path);
    }
    free(p);
    gdn_param_table_free(&t);
}

/* Every value just outside a field's range (and a non-number, an over-long string) is refused
 * naming the field: by its check, by the model's validation and on the command line. */
static void test_fields_out_of_range_refused(void **state) {
    (void)state;
    static gdn_run_config rc;
    char err[1024], arg[600];
    for (int i = 0; i < GDN_CONFIG_N_FIELDS; i++) {
        const gdn_config_field *f = &gdn_config_fields[i];
        gdn_config c;
        if (f->type == GDN_FIELD_STR) {
            char s[GDN_MAX_MIXERS + 2];
            size_t n = (size_t)f->hi + 1 < sizeof s - 1 ? (size_t)f->hi + 1 : sizeof s - 1;
            for (size_t k = 0; k < n; k++) s[k] = f->def_str[k % strlen(f->def_str)];
            s[n] = 0;
            snprintf(arg, sizeof arg, "--%s=%s", f->name, s);
        } else {
            const double bad[] = {f->lo - 1, f->hi + 1, NAN};
            for (size_t k = 0; k < 3; k++) {
                if (isnan(bad[k]) && f->type != GDN_FIELD_DOUBLE) continue;
                gdn_config_defaults(&c);
                set_number(&c, f, bad[k]);
                err[0] = 0;
                if (gdn_config_check_field(&c, f, err, sizeof err) == 0)
                    fail_msg("%s = %g was accepted", f->name, bad[k]);
                ASSERT_CONTAINS(err, f->name);
                err[0] = 0;
                assert_int_equal(gdn_config_validate(&c, err, sizeof err), -1);
                ASSERT_CONTAINS(err, f->name);
            }
            snprintf(arg, sizeof arg, "--%s=%.17g", f->name, f->hi + 1);
        }
        char *argv[] = {"train", "--out=/nonexistent/never", arg};
        err[0] = 0;
        if (gdn_run_config_parse(&rc, 3, argv, err, sizeof err) != -1) fail_msg("%s was accepted", arg);
        ASSERT_CONTAINS(err, f->name);
    }
}

/* ---- the tensors of a block ------------------------------------------------------------------- */

static uint64_t fnv1a(uint64_t h, const char *s) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001B3ULL;
    return h;
}

/* The parameter table made from GDN_LAYER_TENSORS is the one checkpoints and every test were
 * written with: names, offsets, shapes, weight-decay flags and initial values of a model with
 * all four mixers, as fingerprints of the table that the list replaced. */
static void test_layer_tensors_unchanged(void **state) {
    (void)state;
    gdn_config c = {.vocab_size = 256, .d_model = 48, .n_layers = 5, .n_heads = 3, .head_dim = 8,
                    .expand_v = 2, .d_ff = 40, .conv_width = 4, .chunk_size = 16, .norm_eps = 1e-6,
                    .mixers = "GDML"};
    gdn_param_table t;
    gdn_param_table_build(&t, &c);
    assert_int_equal(t.n, 85);
    assert_int_equal(t.total, 102866);
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < t.n; i++) {
        const gdn_param *p = &t.p[i];
        char line[160];
        snprintf(line, sizeof line, "%s %zu %zu %d %d %d %d %d\n", p->name, p->offset, p->numel, p->ndim,
                 p->shape[0], p->shape[1], p->shape[2], p->no_decay);
        h = fnv1a(h, line);
    }
    assert_true(h == 0x32e1cbe4d160f341ULL);
    float *w = malloc(t.total * sizeof *w);
    gdn_params_init(w, &t, 7);
    unsigned v = 0;
    for (size_t i = 0; i < t.total; i++) {
        unsigned u;
        memcpy(&u, &w[i], sizeof u);
        v = v * 31 + u;
    }
    assert_int_equal(v, 455217311u);
    free(w);
    /* what each mixer has: a_proj, A_log, dt_bias with a decay; b_proj with beta */
    for (int l = 0; l < c.n_layers; l++) {
        const gdn_layer_offsets *o = &t.layer[l];
        int decay = l % 4 == 0 || l % 4 == 2, beta = l % 4 < 2; /* G D M L G */
        assert_int_equal(o->a_proj != GDN_NO_TENSOR, decay);
        assert_int_equal(o->A_log != GDN_NO_TENSOR, decay);
        assert_int_equal(o->dt_bias != GDN_NO_TENSOR, decay);
        assert_int_equal(o->b_proj != GDN_NO_TENSOR, beta);
    }
    gdn_param_table_free(&t);
}

/* ---- precision -------------------------------------------------------------------------------- */

static void test_precision_names(void **state) {
    (void)state;
    gdn_precision p = GDN_PRECISION_FP32;
    assert_int_equal(gdn_precision_parse("bf16", &p), 0);
    assert_int_equal(p, GDN_PRECISION_BF16);
    assert_int_equal(gdn_precision_parse("fp32", &p), 0);
    assert_int_equal(p, GDN_PRECISION_FP32);
    const char *bad[] = {"", "BF16", "fp16", "fp32 ", "bf", NULL};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = GDN_PRECISION_FP32;
        assert_int_equal(gdn_precision_parse(bad[i], &p), -1);
        assert_int_equal(p, GDN_PRECISION_FP32);
    }
    assert_string_equal(gdn_precision_name(GDN_PRECISION_BF16), "bf16");
    assert_string_equal(gdn_precision_name(GDN_PRECISION_FP32), "fp32");
}

static void test_precision_setting(void **state) {
    (void)state;
    static gdn_run_config rc, back;
    char err[1024];
    char *plain[] = {"train", "--out=/nonexistent/never"};
    assert_int_equal(gdn_run_config_parse(&rc, 2, plain, err, sizeof err), 0);
    assert_int_equal(rc.precision, GDN_PRECISION_BF16);
    char *fp32[] = {"train", "--out=/nonexistent/never", "--precision", "fp32"};
    assert_int_equal(gdn_run_config_parse(&rc, 4, fp32, err, sizeof err), 0);
    assert_int_equal(rc.precision, GDN_PRECISION_FP32);
    /* config.json: written as a string, read back */
    io_jw w;
    io_jw_init(&w, 1);
    gdn_run_config_to_json(&rc, &w);
    ASSERT_CONTAINS(io_jw_text(&w), "\"precision\": \"fp32\"");
    assert_int_equal(gdn_run_config_from_json_text(&back, io_jw_text(&w), err, sizeof err), 0);
    io_jw_free(&w);
    assert_int_equal(back.precision, GDN_PRECISION_FP32);
    /* a saved config from before the setting existed: the default */
    assert_int_equal(gdn_run_config_from_json_text(&back, "{\"d_model\": 64}", err, sizeof err), 0);
    assert_int_equal(back.precision, GDN_PRECISION_BF16);
    /* printed with the settings */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    gdn_run_config_print(&rc, f);
    fclose(f);
    ASSERT_CONTAINS(buf, "precision");
    ASSERT_CONTAINS(buf, "fp32");
    free(buf);
    /* refused: another name, on the command line and in a file; another type */
    char *fp16[] = {"train", "--out=/nonexistent/never", "--precision=fp16"};
    assert_int_equal(gdn_run_config_parse(&rc, 3, fp16, err, sizeof err), -1);
    assert_string_equal(err, "setting 'precision' must be bf16 or fp32 (got 'fp16')");
    assert_int_equal(gdn_run_config_from_json_text(&back, "{\"precision\": \"FP32\"}", err, sizeof err), -1);
    assert_string_equal(err, "setting 'precision' must be bf16 or fp32 (got 'FP32')");
    assert_int_equal(gdn_run_config_from_json_text(&back, "{\"precision\": 16}", err, sizeof err), -1);
    ASSERT_CONTAINS(err, "precision");
}

/* A run directory whose config.json differs in precision only holds the same run (a resume may
 * change it); one that differs in a model field does not. */
static void test_precision_may_change_on_resume(void **state) {
    (void)state;
    static gdn_run_config rc, other;
    char dir[512], path[600], err[2048];
    tmp_file(dir, sizeof dir, "run");
    assert_int_equal(mkdir(dir, 0700), 0);
    char *argv[] = {"train", "--out=/nonexistent/never", "--precision=fp32"};
    assert_int_equal(gdn_run_config_parse(&rc, 3, argv, err, sizeof err), 0);
    io_jw w;
    io_jw_init(&w, 1);
    gdn_run_config_to_json(&rc, &w);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(io_jw_text(&w), f);
    fclose(f);
    io_jw_free(&w);
    other = rc;
    other.precision = GDN_PRECISION_BF16;
    if (gdn_run_dir_check(dir, &other, 0, 0, err, sizeof err)) fail_msg("%s", err);
    other.model.d_model += 32;
    assert_int_equal(gdn_run_dir_check(dir, &other, 0, 0, err, sizeof err), 2);
    ASSERT_CONTAINS(err, "d_model: config.json has 128, this run has 160");
    remove(path);
    rmdir(dir);
}

int main(void) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_matches_struct),
        cmocka_unit_test(test_fields_round_trip_json),
        cmocka_unit_test(test_fields_round_trip_checkpoint),
        cmocka_unit_test(test_fields_out_of_range_refused),
        cmocka_unit_test(test_layer_tensors_unchanged),
        cmocka_unit_test(test_precision_names),
        cmocka_unit_test(test_precision_setting),
        cmocka_unit_test(test_precision_may_change_on_resume),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
