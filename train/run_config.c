/* Settings table, presets, and resolution of a run's configuration. */
#include "train/run_config.h"

#include <ctype.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/check.h"

#include "io/checkpoint.h"
#include "io/docs.h"
#include "io/parse_num.h"
#include "io/tokenizer.h"
#include "model/mixer.h"
#include "model/params.h"

typedef enum { F_INT, F_I64, F_DOUBLE, F_BOOL, F_STRING, F_ENUM } field_type;

/* A setting with a few named values, held as an enum (int-sized) in the struct. */
typedef struct {
    int (*parse)(const char *name, int *value); /* 0, or -1 for no such name */
    const char *(*name)(int value);
    const char *choices;                        /* for messages: "bf16 or fp32" */
} enum_names;

typedef struct {
    const char *key;
    field_type type;
    size_t offset;
    size_t size; /* strings: buffer size */
    const char *help;
    double lo, hi; /* numbers: the allowed range (inclusive; finer rules are checked later) */
    const enum_names *names; /* F_ENUM */
} field;

_Static_assert(sizeof(gdn_precision) == sizeof(int), "enum settings are stored as int");
static int precision_parse(const char *name, int *value) {
    gdn_precision p;
    if (gdn_precision_parse(name, &p)) return -1;
    *value = (int)p;
    return 0;
}
static const char *precision_name(int value) { return gdn_precision_name((gdn_precision)value); }
static const enum_names precision_names = {precision_parse, precision_name, "bf16 or fp32"};

/* Ranges: every count is bounded so that products of settings (tokens per step, steps x
 * tokens) fit an int64 and nothing absurd reaches an allocation. */
#define BIG 1e12          /* steps and step intervals */
#define I53 9007199254740992.0
/* Model settings: one per line of model/config_fields.h, in its order. */
#define F_TYPE_INT F_INT
#define F_TYPE_BOOL F_BOOL
#define F_TYPE_DOUBLE F_DOUBLE
#define F_TYPE_STR F_STRING
#define FM(k, t, def, lo, hi, file, h)                                                             \
    {#k, F_TYPE_##t, offsetof(gdn_run_config, model.k), sizeof(((gdn_config *)0)->k), h,          \
     F_TYPE_##t == F_STRING ? 0 : (lo), F_TYPE_##t == F_STRING ? 0 : (hi), NULL},
#define FR(k, t, lo, hi, h) {#k, t, offsetof(gdn_run_config, k), 0, h, lo, hi, NULL}
#define FS(k, h) {#k, F_STRING, offsetof(gdn_run_config, k), sizeof(((gdn_run_config *)0)->k), h, 0, 0, NULL}
#define FE(k, names, h) {#k, F_ENUM, offsetof(gdn_run_config, k), sizeof(int), h, 0, 0, names}

static const field fields[] = {
    GDN_CONFIG_FIELDS(FM)
    FS(data, "training text (.txt, .gz) or token shards (.bin, comma list)"),
    FR(val_tokens, F_I64, 0, I53, "tokens held out at the end of the corpus for validation"),
    FR(documents, F_BOOL, 0, 1, "pack whole documents into windows; every mixer resets at each "
                                "document start (README, \"Data format\"); --documents alone = true"),
    FR(eod_token, F_I64, -1, 4294967295.0, "with documents: the token that opens each document "
                                           "(llm.c shards: 50256); -1 = each file is a document"),
    FR(mask_begin, F_I64, -1, 4294967295.0, "with documents: targets from this token through "
                                            "mask_end are not trained on (-1 = none)"),
    FR(mask_end, F_I64, -1, 4294967295.0, "with documents: the token that closes a masked stretch"),
    FR(doc_fill, F_BOOL, 0, 1, "with documents: fill every window, splitting the document that does not "
                               "fit at the window's end, instead of leaving the room after the last "
                               "whole document unused"),
    FS(tokenizer, "BPE tokenizer the shards were made with (gdn data --tokenizer): recorded in "
                  "the run and its checkpoints for gdn sample; \"\" = byte-level"),
    FS(out, "run directory (required)"),
    FR(steps, F_I64, 1, BIG, "optimizer steps"),
    FR(seed, F_I64, -I53, I53, "random seed (initialisation and data order)"),
    FS(backend, "auto, cpu or cuda"),
    FE(precision, &precision_names,
       "training precision on the GPU: bf16 (bf16 activations and matrix inputs, fp32 master "
       "weights) or fp32; the CPU computes in fp32 either way"),
    FR(threads, F_INT, 0, 65536, "CPU threads (0 = all cores)"),
    FR(batch_size, F_INT, 1, 1 << 20, "sequences per micro-batch per rank"),
    FR(seq_len, F_INT, 1, 1 << 24, "tokens per sequence"),
    FR(batch_tokens, F_I64, 0, 1e15, "tokens per optimizer step over all ranks (0 = one micro-batch)"),
    FR(lr, F_DOUBLE, 0, DBL_MAX, "peak learning rate"),
    FR(lr_min, F_DOUBLE, 0, DBL_MAX, "learning-rate floor at the end of the cosine decay"),
    FR(warmup_steps, F_I64, 0, BIG, "linear warm-up steps"),
    FR(decay_steps, F_I64, 0, BIG, "length of the warm-up + cosine schedule (0 = steps)"),
    FR(weight_decay, F_DOUBLE, 0, DBL_MAX, "AdamW decoupled weight decay (not on norms, A_log, dt_bias)"),
    FR(beta1, F_DOUBLE, 0, 1, "AdamW beta1"),
    FR(beta2, F_DOUBLE, 0, 1, "AdamW beta2"),
    FR(adam_eps, F_DOUBLE, 0, DBL_MAX, "AdamW epsilon"),
    FR(grad_clip, F_DOUBLE, 0, DBL_MAX, "global gradient-norm clip (0 = off)"),
    FR(eval_every, F_I64, 0, BIG, "steps between validation passes (0 = at the end only)"),
    FR(eval_batches, F_INT, 1, 1 << 20, "validation micro-batches per pass"),
    FR(log_every, F_I64, 1, BIG, "steps between progress updates"),
    FR(ckpt_every, F_I64, 0, BIG, "steps between checkpoints (0 = at the end only)"),
    FR(keep, F_INT, 1, 1000000, "newest checkpoints to keep"),
    FS(resume, "'auto' (newest readable checkpoint in out) or a checkpoint path"),
    FS(init_from, "start from a checkpoint's weights with a fresh optimizer"),
    FR(sp, F_INT, 1, 65536, "sequence-parallel group size (ranks per sequence; dp = ranks / sp)"),
    FS(sp_exchange, "sequence parallelism: 'pass' the state rank to rank or 'gather' affine maps"),
    FR(zero, F_INT, 0, 1, "1: shard the AdamW moments over the ranks (ZeRO-1, see below); 0: every rank holds them"),
};
#define N_FIELDS (sizeof fields / sizeof fields[0])

typedef struct {
    const char *name;
    const char *json;
    const char *help;
} preset;

static const preset presets[] = {
    {"tiny",
     "{\"d_model\":128,\"n_layers\":4,\"n_heads\":2,\"head_dim\":32,\"expand_v\":2,\"d_ff\":384,"
     "\"seq_len\":128,\"batch_size\":16,\"steps\":800,\"lr\":3e-3,\"lr_min\":3e-4,"
     "\"warmup_steps\":60,\"eval_every\":200,\"eval_batches\":8,\"ckpt_every\":400}",
     "~0.9M parameters, byte-level; the quickstart (minutes on 2 CPU cores)"},
    {"small",
     "{\"d_model\":384,\"n_layers\":6,\"n_heads\":3,\"head_dim\":64,\"expand_v\":2,\"d_ff\":1024,"
     "\"seq_len\":512,\"batch_size\":8,\"steps\":5000,\"lr\":1.5e-3,\"lr_min\":1.5e-4,"
     "\"warmup_steps\":200,\"eval_every\":250}",
     "~11M parameters, byte-level"},
    {"gdn512m",
     "{\"vocab_size\":32000,\"d_model\":1024,\"n_layers\":21,\"n_heads\":6,\"head_dim\":256,"
     "\"expand_v\":2,\"d_ff\":2816,\"seq_len\":2048,\"batch_size\":16,\"lr\":4e-4,\"lr_min\":4e-5,"
     "\"warmup_steps\":1000}",
     "512M parameters, vocabulary 32000; needs token shards (docs/design.md section 9)"},
    {"attn-small",
     "{\"d_model\":384,\"n_layers\":6,\"n_heads\":3,\"head_dim\":64,\"expand_v\":2,\"d_ff\":1024,"
     "\"mixers\":\"A\",\"seq_len\":512,\"batch_size\":8,\"steps\":5000,\"lr\":1.5e-3,"
     "\"lr_min\":1.5e-4,\"warmup_steps\":200,\"eval_every\":250}",
     "small's shape with softmax attention in every layer (the baseline)"},
    {"gdn512m-hybrid",
     "{\"vocab_size\":32000,\"d_model\":1024,\"n_layers\":21,\"n_heads\":6,\"head_dim\":256,"
     "\"expand_v\":2,\"d_ff\":2816,\"mixers\":\"GGGA\",\"attn_head_dim\":128,\"n_kv_heads\":2,"
     "\"seq_len\":2048,\"batch_size\":16,\"lr\":4e-4,\"lr_min\":4e-5,\"warmup_steps\":1000}",
     "gdn512m with every fourth layer softmax attention (GGGA)"},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

static void set_defaults(gdn_run_config *rc) {
    memset(rc, 0, sizeof *rc);
    gdn_config_defaults(&rc->model);
    snprintf(rc->data, sizeof rc->data, "data/kjv.txt.gz");
    rc->val_tokens = 65536;
    rc->eod_token = rc->mask_begin = rc->mask_end = -1;
    rc->steps = 1000;
    rc->seed = 1;
    snprintf(rc->backend, sizeof rc->backend, "auto");
    rc->precision = GDN_PRECISION_BF16;
    rc->batch_size = 8;
    rc->seq_len = 128;
    rc->lr = 1e-3;
    rc->lr_min = 1e-4;
    rc->warmup_steps = 100;
    rc->weight_decay = 0.1;
    rc->beta1 = 0.9;
    rc->beta2 = 0.95;
    rc->adam_eps = 1e-8;
    rc->grad_clip = 1.0;
    rc->eval_every = 100;
    rc->eval_batches = 8;
    rc->log_every = 10;
    rc->ckpt_every = 0;
    rc->keep = 3;
    rc->sp = 1;
    snprintf(rc->sp_exchange, sizeof rc->sp_exchange, "pass");
    rc->zero = 0;
}

/* Reads every known key present in obj into rc. */
static int apply_json(gdn_run_config *rc, const io_json *obj, char *err, int err_len) {
    static const char *allowed[N_FIELDS + 1];
    for (size_t i = 0; i < N_FIELDS; i++) allowed[i] = fields[i].key;
    allowed[N_FIELDS] = NULL;
    if (obj->type != IO_JSON_OBJECT) {
        char where[256];
        io_json_where(obj, where, sizeof where);
        snprintf(err, (size_t)err_len, "%s: the configuration must be a JSON object", where);
        return -1;
    }
    if (io_json_check_keys(obj, allowed, err, err_len) != 0) return -1;
    for (size_t i = 0; i < N_FIELDS; i++) {
        const field *f = &fields[i];
        char *dst = (char *)rc + f->offset;
        int rcode = 0;
        switch (f->type) {
        case F_INT: rcode = io_json_get_int(obj, f->key, (int *)dst, err, err_len); break;
        case F_BOOL: rcode = io_json_get_bool(obj, f->key, (int *)dst, err, err_len); break;
        case F_I64: rcode = io_json_get_i64(obj, f->key, (int64_t *)dst, err, err_len); break;
        case F_DOUBLE: rcode = io_json_get_number(obj, f->key, (double *)dst, err, err_len); break;
        case F_STRING: {
            const char *s = NULL;
            rcode = io_json_get_string(obj, f->key, &s, err, err_len);
            if (rcode == 1) {
                if (strlen(s) >= f->size) {
                    snprintf(err, (size_t)err_len, "setting '%s' is too long (at most %zu bytes)",
                             f->key, f->size - 1);
                    return -1;
                }
                memcpy(dst, s, strlen(s) + 1);
            }
            break;
        }
        case F_ENUM: {
            const char *s = NULL;
            rcode = io_json_get_string(obj, f->key, &s, err, err_len);
            if (rcode == 1 && f->names->parse(s, (int *)dst)) {
                snprintf(err, (size_t)err_len, "setting '%s' must be %s (got '%.80s')", f->key,
                         f->names->choices, s);
                return -1;
            }
            break;
        }
        }
        if (rcode < 0) return -1;
    }
    return 0;
}

/* Every number setting inside its range and finite, whatever its source (preset, file, command
 * line, saved config): a JSON file may say 1e400 (read as infinity) or a count beyond any use. */
static int check_ranges(const gdn_run_config *rc, char *err, int err_len) {
    for (size_t i = 0; i < N_FIELDS; i++) {
        const field *f = &fields[i];
        const char *src = (const char *)rc + f->offset;
        double v;
        switch (f->type) {
        case F_INT: v = *(const int *)src; break;
        case F_I64: v = (double)*(const int64_t *)src; break;
        case F_DOUBLE: v = *(const double *)src; break;
        default: continue;
        }
        if (!isfinite(v) || v < f->lo || v > f->hi) {
            if (f->type == F_DOUBLE)
                snprintf(err, (size_t)err_len, "setting '%s' must be a finite number from %g to %g (got %g)",
                         f->key, f->lo, f->hi, v);
            else
                snprintf(err, (size_t)err_len, "setting '%s' must be an integer from %.0f to %.0f (got %.0f)",
                         f->key, f->lo, f->hi, v);
            return -1;
        }
    }
    return 0;
}

/* A command-line value of a number or boolean setting, parsed strictly (the whole string, in
 * range) and rewritten as JSON text for the override tree. */
static int cli_value(const field *f, const char *value, char *out, size_t out_len, char *err,
                     int err_len) {
    char what[64];
    snprintf(what, sizeof what, "--%s", f->key);
    if (f->type == F_BOOL) {
        if (!strcmp(value, "true") || !strcmp(value, "1")) snprintf(out, out_len, "true");
        else if (!strcmp(value, "false") || !strcmp(value, "0")) snprintf(out, out_len, "false");
        else {
            snprintf(err, (size_t)err_len, "%s expects true, false, 1 or 0, got '%.80s'", what, value);
            return -1;
        }
        return 0;
    }
    if (f->type == F_DOUBLE) {
        double d;
        if (io_parse_f64(what, value, f->lo, f->hi, &d, err, (size_t)err_len)) return -1;
        io_jw w;
        io_jw_init(&w, 0);
        io_jw_number(&w, d);
        snprintf(out, out_len, "%s", io_jw_text(&w));
        io_jw_free(&w);
        return 0;
    }
    int64_t v;
    if (io_parse_i64(what, value, (int64_t)f->lo, (int64_t)f->hi, &v, err, (size_t)err_len)) return -1;
    snprintf(out, out_len, "%lld", (long long)v);
    return 0;
}

/* Sizes that follow from several settings together. */
static int check_sizes(const gdn_run_config *rc, char *err, int err_len) {
    const int64_t micro = (int64_t)rc->batch_size * rc->seq_len; /* < 2^44 */
    if (micro > (INT64_C(1) << 30)) {
        snprintf(err, (size_t)err_len,
                 "batch_size x seq_len = %lld tokens per micro-batch; at most 2^30 = 1073741824 are "
                 "supported: reduce batch_size or seq_len", (long long)micro);
        return -1;
    }
    const double per_step = (double)(rc->batch_tokens > micro ? rc->batch_tokens : micro);
    if ((double)rc->steps * per_step > I53) {
        snprintf(err, (size_t)err_len,
                 "steps x tokens per step = %g tokens exceeds 2^53 (the token counters would lose "
                 "precision): reduce steps or the batch", (double)rc->steps * per_step);
        return -1;
    }
    size_t params;
    if (gdn_param_count(&rc->model, &params, err, err_len)) return -1;
    /* one fp32 copy of the parameters is the least any backend holds in host memory */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double host = pages > 0 && page > 0 ? (double)pages * (double)page : 0.0;
    if (host > 0 && 4.0 * (double)params > host) {
        snprintf(err, (size_t)err_len,
                 "the model has %zu parameters: %.1f GiB in fp32, more than this machine's %.1f GiB "
                 "of memory: reduce the model dimensions", params, 4.0 * (double)params / 1073741824.0,
                 host / 1073741824.0);
        return -1;
    }
    return 0;
}

static int apply_json_text(gdn_run_config *rc, const char *text, const char *name, char *err,
                           int err_len) {
    io_json *j = io_json_parse(text, strlen(text), name, err, err_len);
    if (!j) return -1;
    int r = apply_json(rc, j, err, err_len);
    io_json_free(j);
    return r;
}

static const field *find_field(const char *key, size_t len) {
    for (size_t i = 0; i < N_FIELDS; i++)
        if (strlen(fields[i].key) == len && !strncmp(fields[i].key, key, len)) return &fields[i];
    return NULL;
}

void gdn_run_config_usage(FILE *f) {
    fprintf(f, "usage: gdn train --out DIR [--preset NAME] [--model_from FILE.h5] [--config FILE.json]\n"
               "                 [--KEY=VALUE ...]\n\n"
               "Settings are resolved in order: defaults, --preset, --model_from (every model setting\n"
               "of a checkpoint, e.g. one gdn import wrote; with --init_from FILE.h5 to start from its\n"
               "weights), --config, then --KEY=VALUE (or --KEY VALUE) overrides. Every resolved setting\n"
               "is printed at the start and saved to DIR/config.json.\n\npresets:\n");
    for (size_t i = 0; i < N_PRESETS; i++) fprintf(f, "  %-14s %s\n", presets[i].name, presets[i].help);
    fprintf(f, "\nsettings:\n");
    for (size_t i = 0; i < N_FIELDS; i++) fprintf(f, "  --%-18s %s\n", fields[i].key, fields[i].help);
    fprintf(f, "\n--zero 1 (ZeRO-1, several ranks): the flat parameter buffer is split into one contiguous\n"
               "block per rank of the world and each rank keeps the AdamW moments of its block only\n"
               "(optimizer state / ranks per rank). A step reduce-scatters the gradients (each rank gets\n"
               "the sum of its block), takes the global gradient norm from the blocks' sums of squares\n"
               "(clipping as usual), runs AdamW on its block and all-gathers the parameters. Results equal\n"
               "--zero 0 up to the summation order. Checkpoints hold the full moments either way and\n"
               "resume under any --zero and world size. On one rank --zero 1 is the same as 0.\n");
}

/* A tokenizer setting: it loads, the model's vocabulary holds its ids, the data are shards (text
 * is read byte by byte), and the path is made absolute so that sampling finds it from anywhere. */
static int check_tokenizer(gdn_run_config *rc, char *err, int err_len) {
    char terr[1024], abs[PATH_MAX];
    io_tokenizer *t = io_tokenizer_load(rc->tokenizer, terr, sizeof terr);
    if (!t) {
        snprintf(err, (size_t)err_len, "tokenizer: %s", terr);
        return -1;
    }
    uint32_t v = io_tokenizer_vocab_size(t);
    io_tokenizer_free(t);
    if ((uint32_t)rc->model.vocab_size < v) {
        snprintf(err, (size_t)err_len, "tokenizer %s has %u ids but vocab_size is %d: set "
                 "vocab_size to at least %u", rc->tokenizer, v, rc->model.vocab_size, v);
        return -1;
    }
    if (!strstr(rc->data, ".bin")) {
        snprintf(err, (size_t)err_len, "tokenizer %s needs token shards as data (gdn data "
                 "--tokenizer makes them); '%s' is text, which is read byte by byte",
                 rc->tokenizer, rc->data);
        return -1;
    }
    if (realpath(rc->tokenizer, abs)) {
        if (strlen(abs) >= sizeof rc->tokenizer) {
            snprintf(err, (size_t)err_len, "tokenizer: the path %s is too long", abs);
            return -1;
        }
        memcpy(rc->tokenizer, abs, strlen(abs) + 1);
    }
    return 0;
}

int gdn_run_config_parse(gdn_run_config *rc, int argc, char **argv, char *err, int err_len) {
    set_defaults(rc);
    const char *preset_name = NULL, *config_path = NULL, *model_from = NULL;
    /* First pass: --help, --preset, --model_from and --config, which apply before the overrides. */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            gdn_run_config_usage(stdout);
            return 1;
        }
        if (!strcmp(argv[i], "--preset") || !strcmp(argv[i], "--config") || !strcmp(argv[i], "--model_from")) {
            if (i + 1 >= argc) {
                snprintf(err, (size_t)err_len, "'%s' needs a value", argv[i]);
                return -1;
            }
            if (argv[i][2] == 'p') preset_name = argv[++i];
            else if (argv[i][2] == 'm') model_from = argv[++i];
            else config_path = argv[++i];
        } else if (!strncmp(argv[i], "--preset=", 9)) {
            preset_name = argv[i] + 9;
        } else if (!strncmp(argv[i], "--config=", 9)) {
            config_path = argv[i] + 9;
        } else if (!strncmp(argv[i], "--model_from=", 13)) {
            model_from = argv[i] + 13;
        }
    }
    if (preset_name) {
        size_t p = 0;
        while (p < N_PRESETS && strcmp(presets[p].name, preset_name)) p++;
        if (p == N_PRESETS) {
            int n = snprintf(err, (size_t)err_len, "unknown preset '%s'; presets:", preset_name);
            for (size_t q = 0; q < N_PRESETS && n < err_len; q++)
                n += snprintf(err + n, (size_t)(err_len - n), " %s", presets[q].name);
            return -1;
        }
        if (apply_json_text(rc, presets[p].json, presets[p].name, err, err_len)) return -1;
    }
    if (model_from) { /* every model setting from a checkpoint (e.g. one gdn import wrote) */
        ckpt_info info;
        char cerr[512];
        if (ckpt_read_info(model_from, &info, cerr, sizeof cerr)) {
            snprintf(err, (size_t)err_len, "--model_from %s: %s", model_from, cerr);
            return -1;
        }
        rc->model = info.model;
        ckpt_info_free(&info);
    }
    io_json *over = io_json_parse("{}", 2, "command line", err, err_len);
    if (!over) return -1;
    int result = -1;
    if (config_path) {
        io_json *file = io_json_parse_file(config_path, err, err_len);
        if (!file || apply_json(rc, file, err, err_len)) {
            io_json_free(file);
            goto done;
        }
        io_json_free(file);
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--preset") || !strcmp(a, "--config") || !strcmp(a, "--model_from")) {
            i++;
            continue;
        }
        if (!strncmp(a, "--preset=", 9) || !strncmp(a, "--config=", 9) || !strncmp(a, "--model_from=", 13))
            continue;
        if (strncmp(a, "--", 2) != 0) {
            snprintf(err, (size_t)err_len, "unexpected argument '%s' (settings are --KEY=VALUE)", a);
            goto done;
        }
        const char *key = a + 2, *eq = strchr(key, '=');
        size_t klen = eq ? (size_t)(eq - key) : strlen(key);
        const field *f = find_field(key, klen);
        if (!f) {
            snprintf(err, (size_t)err_len, "unknown setting '--%.*s' ('gdn train --help' lists them)",
                     (int)klen, key);
            goto done;
        }
        const char *value = eq ? eq + 1 : NULL;
        /* a bare switch (--documents): nothing follows, or the next argument is a setting */
        if (!value && f->type == F_BOOL &&
            (i + 1 >= argc || (!strncmp(argv[i + 1], "--", 2) && isalpha((unsigned char)argv[i + 1][2]))))
            value = "true";
        if (!value) {
            if (i + 1 >= argc) {
                snprintf(err, (size_t)err_len, "setting '--%s' needs a value", f->key);
                goto done;
            }
            value = argv[++i];
        }
        /* Strings are taken literally; numbers and booleans are parsed strictly here (JSON
         * would take " 5" or 1e3 for an integer) and passed on as JSON. */
        char quoted[GDN_PATH_MAX + 8];
        if (f->type != F_STRING && f->type != F_ENUM) {
            if (cli_value(f, value, quoted, sizeof quoted, err, err_len)) goto done;
            value = quoted;
        } else {
            io_jw w;
            io_jw_init(&w, 0);
            io_jw_string(&w, value);
            snprintf(quoted, sizeof quoted, "%s", io_jw_text(&w));
            io_jw_free(&w);
            value = quoted;
        }
        if (io_json_set_path(over, f->key, value, a, err, err_len)) goto done;
    }
    if (apply_json(rc, over, err, err_len) || check_ranges(rc, err, err_len)) goto done;
    /* every model field as given (settings must name each; "" is no mixer pattern), then the
     * sizes that follow from them together */
    char merr[512];
    int bad = 0;
    for (int i = 0; i < GDN_CONFIG_N_FIELDS && !bad; i++)
        bad = gdn_config_check_field(&rc->model, &gdn_config_fields[i], merr, sizeof merr);
    if (bad || gdn_config_validate(&rc->model, merr, sizeof merr)) {
        snprintf(err, (size_t)err_len, "invalid model: %s", merr);
        goto done;
    }
    if (check_sizes(rc, err, err_len)) goto done;
#define CHECK(cond, ...)                                 \
    if (!(cond)) {                                       \
        snprintf(err, (size_t)err_len, __VA_ARGS__);     \
        goto done;                                       \
    }
    CHECK(rc->out[0], "--out DIR is required (the run directory)");
    CHECK(rc->steps >= 1, "steps must be >= 1 (got %lld)", (long long)rc->steps);
    CHECK(rc->batch_size >= 1, "batch_size must be >= 1 (got %d)", rc->batch_size);
    CHECK(rc->seq_len >= 1, "seq_len must be >= 1 (got %d)", rc->seq_len);
    CHECK(rc->batch_tokens >= 0, "batch_tokens must be >= 0");
    CHECK(rc->lr > 0 && rc->lr_min >= 0 && rc->lr_min <= rc->lr,
          "need lr > 0 and 0 <= lr_min <= lr (got lr %g, lr_min %g)", rc->lr, rc->lr_min);
    CHECK(rc->warmup_steps >= 0, "warmup_steps must be >= 0");
    CHECK(rc->decay_steps >= 0, "decay_steps must be >= 0 (0 = steps)");
    CHECK(rc->beta1 >= 0 && rc->beta1 < 1 && rc->beta2 >= 0 && rc->beta2 < 1,
          "beta1 and beta2 must be in [0, 1)");
    CHECK(rc->adam_eps > 0, "adam_eps must be > 0");
    CHECK(rc->weight_decay >= 0, "weight_decay must be >= 0");
    CHECK(rc->grad_clip >= 0, "grad_clip must be >= 0 (0 = off)");
    CHECK(rc->eval_every >= 0 && rc->eval_batches >= 1, "need eval_every >= 0 and eval_batches >= 1");
    CHECK(rc->log_every >= 1, "log_every must be >= 1");
    CHECK(rc->ckpt_every >= 0 && rc->keep >= 1, "need ckpt_every >= 0 and keep >= 1");
    CHECK(!strcmp(rc->backend, "auto") || !strcmp(rc->backend, "cpu") || !strcmp(rc->backend, "cuda"),
          "backend must be auto, cpu or cuda (got '%s')", rc->backend);
    CHECK(rc->threads >= 0, "threads must be >= 0");
    CHECK(rc->sp >= 1, "sp must be >= 1");
    CHECK(!strcmp(rc->sp_exchange, "pass") || !strcmp(rc->sp_exchange, "gather"),
          "sp_exchange must be pass or gather (got '%s')", rc->sp_exchange);
    CHECK(rc->sp == 1 || rc->seq_len % rc->sp == 0,
          "seq_len %d does not split into sp = %d equal segments: choose a seq_len divisible by sp",
          rc->seq_len, rc->sp);
    CHECK(rc->sp == 1 || rc->seq_len / rc->sp >= rc->model.conv_width - 1,
          "sp = %d leaves %d tokens per rank; sequence parallelism needs at least conv_width - 1 = %d: "
          "use a smaller sp or a longer seq_len", rc->sp, rc->seq_len / rc->sp, rc->model.conv_width - 1);
    /* --backend auto never picks the GPU for a run of several ranks (train/train_backend.c) */
    CHECK(rc->sp == 1 || strcmp(rc->backend, "cuda") || gdn_config_count_mixer(&rc->model, GDN_MIXER_A) == 0,
          "sp = %d with --backend cuda: sequence parallelism of attention layers (mixer A in mixers "
          "\"%.64s\") runs on the CPU backend only for now; use --backend cpu, or sp = 1 on the GPU",
          rc->sp, gdn_config_mixers(&rc->model));
    CHECK(rc->sp == 1 || gdn_config_count_mixer(&rc->model, GDN_MIXER_S) == 0,
          "sp = %d: the model has linearized layers (mixer S in mixers \"%.64s\"), which run on whole "
          "sequences only: use sp = 1", rc->sp, gdn_config_mixers(&rc->model));
    CHECK(rc->val_tokens >= 0, "val_tokens must be >= 0");
    if (rc->tokenizer[0] && check_tokenizer(rc, err, err_len)) goto done;
    CHECK(rc->documents || (rc->eod_token < 0 && rc->mask_begin < 0 && rc->mask_end < 0 && !rc->doc_fill),
          "eod_token, mask_begin, mask_end and doc_fill take effect with documents: add --documents (or "
          "leave them at -1 and false)");
    if (rc->documents) {
        io_doc_opts d = {rc->eod_token, rc->mask_begin, rc->mask_end, rc->doc_fill};
        if (io_doc_opts_check(&d, rc->model.vocab_size, err, err_len)) goto done;
    }
    CHECK(rc->zero == 0 || rc->zero == 1,
          "zero must be 0 (every rank holds the optimizer state) or 1 (sharded over the ranks); got %d",
          rc->zero);
#undef CHECK
    result = 0;
done:
    io_json_free(over);
    return result;
}

void gdn_run_config_to_json(const gdn_run_config *rc, io_jw *w) {
    io_jw_begin_object(w);
    for (size_t i = 0; i < N_FIELDS; i++) {
        const field *f = &fields[i];
        const char *src = (const char *)rc + f->offset;
        switch (f->type) {
        case F_INT: io_jw_kv_int(w, f->key, *(const int *)src); break;
        case F_BOOL: io_jw_kv_bool(w, f->key, *(const int *)src); break;
        case F_I64: io_jw_kv_int(w, f->key, (long long)*(const int64_t *)src); break;
        case F_DOUBLE: io_jw_kv_number(w, f->key, *(const double *)src); break;
        case F_STRING: io_jw_kv_string(w, f->key, src); break;
        case F_ENUM: io_jw_kv_string(w, f->key, f->names->name(*(const int *)src)); break;
        }
    }
    io_jw_end_object(w);
}

int gdn_run_config_from_json_text(gdn_run_config *rc, const char *text, char *err, int err_len) {
    set_defaults(rc);
    if (apply_json_text(rc, text, "saved config", err, err_len)) return -1;
    return check_ranges(rc, err, err_len);
}

void gdn_run_config_print(const gdn_run_config *rc, FILE *f) {
    for (size_t i = 0; i < N_FIELDS; i++) {
        const field *fd = &fields[i];
        const char *src = (const char *)rc + fd->offset;
        fprintf(f, "  %-18s ", fd->key);
        switch (fd->type) {
        case F_INT: fprintf(f, "%d\n", *(const int *)src); break;
        case F_BOOL: fprintf(f, "%s\n", *(const int *)src ? "true" : "false"); break;
        case F_I64: fprintf(f, "%lld\n", (long long)*(const int64_t *)src); break;
        case F_DOUBLE: fprintf(f, "%g\n", *(const double *)src); break;
        case F_STRING: fprintf(f, "%s\n", src[0] ? src : "(none)"); break;
        case F_ENUM: fprintf(f, "%s\n", fd->names->name(*(const int *)src)); break;
        }
    }
}

char *gdn_run_config_json_with_model(const char *base_json, const gdn_config *model, const char *tokenizer) {
    gdn_run_config rc;
    char err[512];
    if (!base_json || gdn_run_config_from_json_text(&rc, base_json, err, sizeof err))
        if (gdn_run_config_from_json_text(&rc, "{}", err, sizeof err)) GDN_DIE("default run config: %s", err);
    rc.model = *model;
    if (tokenizer) snprintf(rc.tokenizer, sizeof rc.tokenizer, "%s", tokenizer);
    io_jw jw;
    io_jw_init(&jw, 1);
    gdn_run_config_to_json(&rc, &jw);
    char *s = strdup(io_jw_text(&jw));
    io_jw_free(&jw);
    if (!s) GDN_DIE("out of memory");
    return s;
}
