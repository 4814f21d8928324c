/* Scaling sweeps: the FLOP formulas of train/run_summary.h on cases computed by hand, the
 * metrics.jsonl statistics behind summary.json, the expansion of sweep files (train/sweep.h)
 * into runs, the messages for malformed sweep files, job lists and the finished-run check. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "model/mixer.h"
#include "tests/io_fixture.h"
#include "train/run_dir.h"
#include "train/run_summary.h"
#include "train/sweep.h"

static gdn_config small_config(const char *mixers) {
    gdn_config c;
    gdn_config_defaults(&c);
    c.vocab_size = 10;
    c.d_model = 8;
    c.n_layers = 1;
    c.n_heads = 1;
    c.head_dim = 4;
    c.expand_v = 2;
    c.d_ff = 16;
    c.chunk_size = 16;
    snprintf(c.mixers, sizeof c.mixers, "%s", mixers);
    return c;
}

/* F of each kind at hand-computed values (run_summary.h). */
static void test_mixer_flops(void **state) {
    (void)state;
    gdn_config c = small_config("G");
    c.n_heads = 2;
    c.head_dim = 8;
    /* A: 2 H Da (T + 1) = 2 * 2 * 8 * 17 */
    assert_float_equal(gdn_mixer_fwd_flops_per_token(&c, GDN_MIXER_A, 16), 544.0, 1e-9);
    c.attn_head_dim = 4; /* Da = attn_head_dim when set: 2 * 2 * 4 * 17 */
    assert_float_equal(gdn_mixer_fwd_flops_per_token(&c, GDN_MIXER_A, 16), 272.0, 1e-9);
    /* G and D, H 1, K 2, V 4, C 16, T 16: one chunk of 16:
     * 3*256*2 + 2*256*4 + 4096/3 + 3*16*2*4 = 1536 + 2048 + 1365.33 + 384 = 5333.33; F = 2 * 5333.33 / 16 */
    c = small_config("G");
    c.head_dim = 2;
    assert_float_equal(gdn_mixer_fwd_flops_per_token(&c, GDN_MIXER_G, 16), 2.0 * (16000.0 / 3.0) / 16.0, 1e-9);
    assert_float_equal(gdn_mixer_fwd_flops_per_token(&c, GDN_MIXER_D, 16), 2.0 * (16000.0 / 3.0) / 16.0, 1e-9);
    /* T 20: chunks of 16 and 4; the 4: 3*16*2 + 2*16*4 + 64/3 + 3*4*2*4 = 96 + 128 + 21.33 + 96 */
    assert_float_equal(gdn_mixer_fwd_flops_per_token(&c, GDN_MIXER_G, 20),
                       2.0 * (16000.0 / 3.0 + 320.0 + 64.0 / 3.0) / 20.0, 1e-9);
    /* M and L: 256*2 + 256*4 + 2*16*2*4 = 512 + 1024 + 256 = 1792; F = 2 * 1792 / 16 = 224 */
    assert_float_equal(gdn_mixer_fwd_flops_per_token(&c, GDN_MIXER_M, 16), 224.0, 1e-9);
    assert_float_equal(gdn_mixer_fwd_flops_per_token(&c, GDN_MIXER_L, 16), 224.0, 1e-9);
    /* two heads: twice */
    c.n_heads = 2;
    assert_float_equal(gdn_mixer_fwd_flops_per_token(&c, GDN_MIXER_L, 16), 448.0, 1e-9);
    assert_float_equal(gdn_mixer_fwd_flops_per_token(&c, 99, 16), 0.0, 0);
    /* S (linearized): the delta rule's count with K = V = Da = 4, 2 heads, one chunk of 16:
     * 3*256*4 + 2*256*4 + 4096/3 + 3*16*4*4 = 3072 + 2048 + 1365.33 + 768; F = 2 * 2 * that / 16 */
    c.attn_head_dim = 4;
    assert_float_equal(gdn_mixer_fwd_flops_per_token(&c, GDN_MIXER_S, 16), 4.0 * (5888.0 + 4096.0 / 3.0) / 16.0, 1e-9);
}

/* Whole models: parameter counts and FLOPs per token by hand. */
static void test_model_flops(void **state) {
    (void)state;
    char err[512];
    gdn_flops f;
    /* attention, D 8, Da 4, one head, d_ff 16, vocab 10: q k v o 4 x 32, gate up down 3 x 128, LM head
     * 80 -> matmul 592; + embedding 80 + three norms of 8 = 696 */
    gdn_config c = small_config("A");
    assert_int_equal(gdn_flops_of(&c, 16, &f, err, sizeof err), 0);
    assert_int_equal(f.matmul, 592);
    assert_int_equal(f.total, 696);
    assert_int_equal(f.embedding, 160);
    assert_int_equal(f.non_embedding, 536);
    assert_float_equal(f.per_token_params, 6.0 * 592, 1e-9);
    assert_float_equal(f.per_token_mixers, 3.0 * 2 * 1 * 4 * 17, 1e-9); /* 3 x 2 H Da (T + 1) */
    assert_float_equal(f.per_token, 3552.0 + 408.0, 1e-9);
    /* tied: the head is the embedding table (counted once, multiplied by in the head) */
    c.tie_embeddings = 1;
    assert_int_equal(gdn_flops_of(&c, 16, &f, err, sizeof err), 0);
    assert_int_equal(f.total, 616);
    assert_int_equal(f.embedding, 80);
    assert_int_equal(f.matmul, 592);
    /* a hybrid: each layer its own term */
    c = small_config("GA");
    c.n_layers = 2;
    assert_int_equal(gdn_flops_of(&c, 16, &f, err, sizeof err), 0);
    assert_float_equal(f.per_token_mixers,
                       3.0 * (gdn_mixer_fwd_flops_per_token(&c, GDN_MIXER_G, 16) + gdn_mixer_fwd_flops_per_token(&c, GDN_MIXER_A, 16)),
                       1e-9);
    c.d_model = 0;
    assert_int_equal(gdn_flops_of(&c, 16, &f, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "d_model");
}

/* Restarts sum their times; best and final validation losses. */
static void test_metrics_stats(void **state) {
    (void)state;
    const char *text = "{\"step\":1,\"loss\":4,\"time_s\":1}\n"
                       "{\"step\":2,\"loss\":3.5,\"time_s\":2,\"val_loss\":3.0}\n"
                       "{\"step\":3,\"loss\":3.4,\"time_s\":3}\n"
                       "{\"step\":3,\"loss\":3.4,\"time_s\":0.5}\n"
                       "{\"step\":4,\"loss\":3.1,\"time_s\":1.0,\"val_loss\":2.5}\n"
                       "{\"step\":5,\"loss\":3.0,\"time_s\":1.5,\"val_loss\":2.7}\n";
    const char *path = tmp_path("metrics.jsonl");
    write_file(path, text, strlen(text));
    gdn_metrics_stats s;
    char err[512];
    assert_int_equal(gdn_metrics_stats_read(path, &s, err, sizeof err), 0);
    assert_int_equal(s.last_step, 5);
    assert_float_equal(s.wall_s, 4.5, 1e-12);
    assert_float_equal(s.best_val, 2.5, 0);
    assert_int_equal(s.best_step, 4);
    assert_float_equal(s.final_val, 2.7, 0);
    write_file(path, "{\"step\":1,\"time_s\":1}\n[1]\n", 25);
    assert_int_equal(gdn_metrics_stats_read(path, &s, err, sizeof err), -1);
    ASSERT_CONTAINS(err, ":2: not a JSON object");
    assert_int_equal(gdn_metrics_stats_read(tmp_path("none.jsonl"), &s, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "cannot read");
}

#define SWEEP_HEAD "{\"name\": \"t\", \"corpus\": {\"data\": \"x.txt\", \"val_tokens\": 1000},"                    \
                   "\"base\": {\"seq_len\": 16, \"batch_size\": 4},"

static int parse(gdn_sweep *sw, const char *text, char *err) {
    return gdn_sweep_parse(sw, text, strlen(text), "s.json", err, 1024);
}

static const gdn_sweep_run *find(const gdn_sweep *sw, const char *name) {
    for (int i = 0; i < sw->n_runs; i++)
        if (!strcmp(sw->runs[i].name, name)) return &sw->runs[i];
    fail_msg("no run %s", name);
    return NULL;
}

static void test_expand_rule(void **state) {
    (void)state;
    static gdn_sweep sw;
    char err[1024];
    const char *text = SWEEP_HEAD
        "\"sizes\": {\"d_model\": [32, 64], \"n_layers\": 2, \"head_dim\": 8, \"ffn_mult\": 2.5},"
        "\"tokens\": [640, 1000], \"mixers\": [\"G\", \"GA\"],"
        "\"lr\": {\"rule\": \"width\", \"base\": 4e-3, \"base_d_model\": 32, \"min_ratio\": 0.25},"
        "\"warmup\": 0.1, \"throughput\": {\"G\": 1000, \"GA\": 500}}";
    assert_int_equal(parse(&sw, text, err), 0);
    assert_int_equal(sw.n_runs, 8);
    for (int i = 1; i < sw.n_runs; i++) assert_true(sw.runs[i - 1].flops <= sw.runs[i].flops); /* cheapest first */
    /* 1000 tokens in steps of 64: 16 steps, 1024 tokens */
    const gdn_sweep_run *r = find(&sw, "GA_d64l2_t1.02k_s1");
    assert_int_equal(r->rc.steps, 16);
    assert_int_equal(r->tokens, 1024);
    assert_int_equal(r->rc.model.d_model, 64);
    assert_int_equal(r->rc.model.n_layers, 2);
    assert_int_equal(r->rc.model.n_heads, 4);   /* 64 / (8 x 2) */
    assert_int_equal(r->rc.model.d_ff, 160);    /* 2.5 x 64 */
    assert_string_equal(r->rc.model.mixers, "GA");
    assert_float_equal(r->rc.lr, 2e-3, 1e-15); /* 4e-3 x 32 / 64 */
    assert_float_equal(r->rc.lr_min, 5e-4, 1e-15);
    assert_int_equal(r->rc.warmup_steps, 2);   /* ceil(0.1 x 16) */
    assert_float_equal(r->flops, r->fl.per_token * 1024.0, 1e-3);
    /* hours: the run's FLOPs at the FLOP rate of its mixer's cheapest run (500 tokens/s there) */
    const gdn_sweep_run *ref = find(&sw, "GA_d32l2_t640_s1");
    assert_float_equal(r->hours, r->flops / (500.0 * ref->fl.per_token) / 3600.0, 1e-12);
    r = find(&sw, "G_d32l2_t640_s1");
    assert_int_equal(r->rc.steps, 10);
    assert_float_equal(r->rc.lr, 4e-3, 1e-15);
    assert_float_equal(r->hours, 640.0 / 1000.0 / 3600.0, 1e-12);
    gdn_sweep_free(&sw);
}

static void test_expand_explicit(void **state) {
    (void)state;
    static gdn_sweep sw;
    char err[1024];
    /* explicit sizes override base; budgets per parameter; an lr grid multiplies the runs */
    const char *text = "{\"name\": \"t\", \"corpus\": {\"data\": \"x.txt\"},"
        "\"base\": {\"seq_len\": 16, \"batch_size\": 4, \"d_ff\": 32, \"head_dim\": 8},"
        "\"sizes\": [{\"name\": \"xs\", \"d_model\": 16, \"n_layers\": 1, \"n_heads\": 1},"
        "            {\"name\": \"s\", \"d_model\": 32, \"n_layers\": 1, \"n_heads\": 2, \"d_ff\": 64}],"
        "\"tokens_per_param\": [2], \"mixers\": [\"L\"], \"seeds\": [3, 4],"
        "\"lr\": {\"rule\": \"grid\", \"values\": [1e-3, 3e-3]}}";
    assert_int_equal(parse(&sw, text, err), 0);
    assert_int_equal(sw.n_runs, 8);
    const gdn_sweep_run *r = find(&sw, "L_s_t21.2k_s4_lr0.003");
    assert_int_equal(r->rc.model.d_ff, 64);
    assert_int_equal(r->rc.model.head_dim, 8);
    assert_int_equal(r->rc.seed, 4);
    assert_float_equal(r->rc.lr, 3e-3, 0);
    assert_true(r->tokens >= 2 * r->fl.non_embedding && r->tokens < 2 * r->fl.non_embedding + 64);
    r = find(&sw, "L_xs_t5.5k_s3_lr0.001");
    assert_int_equal(r->rc.model.d_ff, 32);
    assert_false(sw.has_throughput);
    assert_true(isnan(r->hours));
    gdn_sweep_free(&sw);
}

/* Every malformed sweep is refused with a message naming the file, the field and the fix. */
static void test_sweep_errors(void **state) {
    (void)state;
    static gdn_sweep sw;
    struct {
        const char *text, *want;
    } cases[] = {
        {"{\"name\": \"t\",", "s.json:1:"},
        {"[1]", "must be a JSON object"},
        {"{\"corpus\": {\"data\": \"x\"}}", "field 'name': missing"},
        {"{\"name\": \"a/b\"}", "not a valid name"},
        {"{\"name\": \"t\", \"tokns\": 1}", "unknown field 'tokns'"},
        {"{\"name\": \"t\", \"corpus\": {\"data\": \"\"}}", "corpus.data"},
        {"{\"name\": \"t\", \"corpus\": {\"data\": \"x\", \"max_epochs\": -1}}", "max_epochs"},
        {SWEEP_HEAD "\"sizes\": {\"d_model\": [32, 64], \"n_layers\": [1, 2, 3]}, \"tokens\": [1]}", "'n_layers': has 3 entries"},
        {SWEEP_HEAD "\"sizes\": {\"d_model\": [32]}, \"tokens\": [1]}", "either n_layers"},
        {SWEEP_HEAD "\"sizes\": {\"d_model\": [32.5], \"n_layers\": 1}, \"tokens\": [1]}", "whole number"},
        {SWEEP_HEAD "\"sizes\": {\"d_model\": [], \"n_layers\": 1}}", "non-empty list"},
        {SWEEP_HEAD "\"sizes\": [{\"d_model\": 32}]}", "needs whole numbers d_model"},
        {SWEEP_HEAD "\"sizes\": [{\"d_model\": 32, \"n_layers\": 1, \"steps\": 5}]}", "set by the sweep, not by a size"},
        {SWEEP_HEAD "\"sizes\": 5}", "rule object or a list"},
        {SWEEP_HEAD "\"sizes\": [{\"d_model\": 32, \"n_layers\": 1, \"dmodel\": 5}]}", "unknown field 'dmodel'"},
        {"{\"name\": \"t\", \"corpus\": {\"data\": \"x\"}, \"base\": {\"steps\": 5}, \"sizes\": [{\"d_model\": 8, \"n_layers\": 1}]}",
         "'steps': is set by the sweep"},
        {"{\"name\": \"t\", \"corpus\": {\"data\": \"x\"}, \"base\": {\"d_model\": 5}, \"sizes\": {\"d_model\": [8], \"n_layers\": 1}}",
         "the sizes rule"},
        {SWEEP_HEAD "\"sizes\": {\"d_model\": [32], \"n_layers\": 1}, \"tokens\": [1], \"tokens_per_param\": [2]}", "exactly one"},
        {SWEEP_HEAD "\"sizes\": {\"d_model\": [32], \"n_layers\": 1}, \"tokens\": [0]}", "budgets must be"},
        {SWEEP_HEAD "\"sizes\": {\"d_model\": [32], \"n_layers\": 1}, \"tokens\": [64], \"mixers\": [\"GX\"]}", "mixers"},
        {SWEEP_HEAD "\"sizes\": {\"d_model\": [32], \"n_layers\": 1}, \"tokens\": [64], \"mixers\": [\"G\", \"G\"]}", "listed twice"},
        {SWEEP_HEAD "\"sizes\": {\"d_model\": [32], \"n_layers\": 1}, \"tokens\": [64], \"mixers\": [\"G\"]}", "'lr': missing"},
        {SWEEP_HEAD "\"sizes\": {\"d_model\": [32], \"n_layers\": 1}, \"tokens\": [64], \"mixers\": [\"G\"],"
                    "\"lr\": {\"rule\": \"mup\"}}", "\"width\" or \"grid\""},
        {SWEEP_HEAD "\"sizes\": {\"d_model\": [32], \"n_layers\": 1}, \"tokens\": [64], \"mixers\": [\"G\"],"
                    "\"lr\": {\"rule\": \"width\", \"base\": 1e-3}}", "needs base"},
        {SWEEP_HEAD "\"sizes\": {\"d_model\": [32], \"n_layers\": 1}, \"tokens\": [64], \"mixers\": [\"G\"],"
                    "\"lr\": {\"rule\": \"grid\", \"values\": [0]}}", "(0, 10]"},
        {SWEEP_HEAD "\"sizes\": {\"d_model\": [32], \"n_layers\": 1}, \"tokens\": [64], \"mixers\": [\"G\"], \"seeds\": [1, 1],"
                    "\"lr\": {\"rule\": \"grid\", \"values\": [1e-3]}}", "seed 1 is listed twice"},
        {SWEEP_HEAD "\"sizes\": [{\"name\": \"a\", \"d_model\": 32, \"n_layers\": 1}, {\"name\": \"a\", \"d_model\": 64, \"n_layers\": 1}],"
                    "\"tokens\": [64], \"mixers\": [\"G\"], \"lr\": {\"rule\": \"grid\", \"values\": [1e-3]}}", "both named"},
        {SWEEP_HEAD "\"sizes\": {\"d_model\": [32], \"n_layers\": 1, \"head_dim\": 8}, \"tokens\": [64], \"mixers\": [\"G\", \"A\"],"
                    "\"lr\": {\"rule\": \"grid\", \"values\": [1e-3]}, \"throughput\": {\"G\": 5}}", "no entry for mixer \"A\""},
        {SWEEP_HEAD "\"sizes\": {\"d_model\": [32], \"n_layers\": 1, \"head_dim\": 8}, \"tokens\": [64], \"mixers\": [\"G\"],"
                    "\"lr\": {\"rule\": \"grid\", \"values\": [1e-3]}, \"throughput\": {\"G\": 5, \"Q\": 1}}", "not one of the sweep's mixers"},
        {SWEEP_HEAD "\"sizes\": {\"d_model\": [32], \"n_layers\": 1, \"head_dim\": 300}, \"tokens\": [64]}", "head_dim"},
        /* a run gdn train would refuse: its message, naming the run */
        {"{\"name\": \"t\", \"corpus\": {\"data\": \"x\"}, \"base\": {\"seq_len\": 16, \"batch_size\": 4, \"lr_typo\": 1},"
         "\"sizes\": {\"d_model\": [32], \"n_layers\": 1, \"head_dim\": 8}, \"tokens\": [64], \"mixers\": [\"G\"],"
         "\"lr\": {\"rule\": \"grid\", \"values\": [1e-3]}}", "unknown field 'lr_typo'"},
        {"{\"name\": \"t\", \"corpus\": {\"data\": \"x\"}, \"base\": {\"seq_len\": 16, \"batch_size\": 4, \"n_kv_heads\": 3},"
         "\"sizes\": [{\"d_model\": 32, \"n_layers\": 1, \"n_heads\": 2}], \"tokens\": [64], \"mixers\": [\"A\"],"
         "\"lr\": {\"rule\": \"grid\", \"values\": [1e-3]}}", "run A_d32l1 (mixers \"A\", size d32l1): invalid model"},
        {SWEEP_HEAD "\"sizes\": {\"d_model\": [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18], \"n_layers\": 1, \"head_dim\": 4},"
                    "\"tokens\": [64, 128, 192, 256, 320, 384, 448, 512, 576, 640, 704, 768, 832, 896, 960, 1024, 1088, 1152, 1216, 1280],"
                    "\"mixers\": [\"G\", \"A\", \"L\", \"M\", \"D\"], \"seeds\": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],"
                    "\"lr\": {\"rule\": \"grid\", \"values\": [1e-3]}}", "runs (sizes x budgets"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[1024] = "";
        if (parse(&sw, cases[i].text, err) != -1) fail_msg("case %zu accepted: %s", i, cases[i].text);
        if (!strstr(err, cases[i].want)) fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err, cases[i].want);
        if (i > 1 && !strstr(err, "s.json")) fail_msg("case %zu: \"%s\" does not name the file", i, err);
        assert_null(sw.runs);
    }
}

static void test_jobs_and_finished(void **state) {
    (void)state;
    char dir[256], path[512], err[1024];
    snprintf(dir, sizeof dir, "%s/sw", g_dir);
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/jobs.txt", dir);
    const char *list = "# comment\n\n  configs/a.json a\nconfigs/b.json\n/abs/c.json c2 trailing\n";
    write_file(path, list, strlen(list));
    gdn_sweep_job *jobs;
    int n;
    assert_int_equal(gdn_sweep_read_jobs(path, &jobs, &n, err, sizeof err), 0);
    assert_int_equal(n, 3);
    snprintf(path, sizeof path, "%s/configs/a.json", dir);
    assert_string_equal(jobs[0].config, path);
    assert_string_equal(jobs[0].name, "a");
    assert_string_equal(jobs[1].name, "b");
    assert_string_equal(jobs[2].config, "/abs/c.json");
    assert_string_equal(jobs[2].name, "c2");
    free(jobs);
    snprintf(path, sizeof path, "%s/empty.txt", dir);
    write_file(path, "# nothing\n", 10);
    assert_int_equal(gdn_sweep_read_jobs(path, &jobs, &n, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "lists no runs");
    snprintf(path, sizeof path, "%s/missing.txt", dir);
    assert_int_equal(gdn_sweep_read_jobs(path, &jobs, &n, err, sizeof err), -1);
    ASSERT_CONTAINS(err, "gdn sweep plan");
    snprintf(path, sizeof path, "%s/bad.txt", dir);
    write_file(path, "cfg.json ..\n", 12);
    assert_int_equal(gdn_sweep_read_jobs(path, &jobs, &n, err, sizeof err), -1);
    ASSERT_CONTAINS(err, ":1:");

    /* finished: summary.json present, readable, with the config's steps */
    char run[300], cfg[300], why[1024];
    snprintf(run, sizeof run, "%s/run", dir);
    mkdir(run, 0777);
    snprintf(cfg, sizeof cfg, "%s/cfg.json", dir);
    write_file(cfg, "{\"steps\": 20}", 13);
    assert_int_equal(gdn_sweep_run_finished(run, cfg, why, sizeof why), 0);
    assert_string_equal(why, "");
    snprintf(path, sizeof path, "%s/summary.json", run);
    write_file(path, "{\"steps\": 10, \"tokens\": 5, \"flops\": 9}", 38);
    assert_int_equal(gdn_sweep_run_finished(run, cfg, why, sizeof why), 0);
    ASSERT_CONTAINS(why, "records 10 steps");
    write_file(path, "{\"steps\": 20, \"tok", 18);
    assert_int_equal(gdn_sweep_run_finished(run, cfg, why, sizeof why), 0);
    ASSERT_CONTAINS(why, "summary.json");
    write_file(path, "{\"steps\": 20, \"tokens\": 5, \"flops\": 9}", 38);
    assert_int_equal(gdn_sweep_run_finished(run, cfg, why, sizeof why), 1);
}

/* --overwrite deletes summary.json with the run's other files, and nothing it does not own;
 * gdn_run_summary_remove takes it away when a run (re)starts. */
static void test_summary_is_a_run_file(void **state) {
    (void)state;
    char dir[256], path[512], err[512];
    snprintf(dir, sizeof dir, "%s/rd", g_dir);
    mkdir(dir, 0777);
    const char *names[] = {"summary.json", "summary.json.tmp", "notes.txt"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        write_file(path, "{}", 2);
    }
    int removed = 0;
    assert_int_equal(gdn_run_dir_clear(dir, &removed, err, sizeof err), 0);
    assert_int_equal(removed, 2);
    struct stat st;
    snprintf(path, sizeof path, "%s/summary.json", dir);
    assert_int_not_equal(stat(path, &st), 0);
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    assert_int_equal(stat(path, &st), 0);
    snprintf(path, sizeof path, "%s/summary.json", dir);
    write_file(path, "{}", 2);
    assert_int_equal(gdn_run_summary_remove(dir, err, sizeof err), 0);
    assert_int_not_equal(stat(path, &st), 0);
    assert_int_equal(gdn_run_summary_remove(dir, err, sizeof err), 0); /* none: fine */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixer_flops),   cmocka_unit_test(test_model_flops),
        cmocka_unit_test(test_metrics_stats), cmocka_unit_test(test_expand_rule),
        cmocka_unit_test(test_expand_explicit), cmocka_unit_test(test_sweep_errors),
        cmocka_unit_test(test_jobs_and_finished), cmocka_unit_test(test_summary_is_a_run_file),
    };
    return cmocka_run_group_tests(tests, io_fixture_setup, io_fixture_teardown);
}
