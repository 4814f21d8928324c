/* gdn eval: a checkpoint's loss, perplexity and bits per byte on held-out data, computed as
 * gdn train computes its validation loss (the same windows, batches and sums, io/dataset.h and
 * train/trainer.c), on the CPU model. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/dataset.h"
#include "io/docs.h"
#include "io/json.h"
#include "io/parse_num.h"
#include "model/backend.h"
#include "model/check.h"
#include "model/cpu/model_cpu.h"
#include "train/commands.h"
#include "train/eval_bytes.h"
#include "train/model_load.h"
#include "train/run_config.h"

static void eval_usage(FILE *f) {
    fprintf(f,
            "usage: gdn eval --ckpt FILE.h5 --data SPEC [--seq_len T] [--batch_size B]\n"
            "                [--val_tokens N] [--max_windows N] [--bytes_per_token R] [--json]\n"
            "                [--documents true|false] [--eod_token ID] [--mask_begin ID --mask_end ID]\n"
            "                [--doc_fill true|false]\n\n"
            "Prints the mean next-token loss (nats per token), the perplexity exp(loss), bits per\n"
            "token and bits per byte of the checkpoint on held-out data.\n"
            "  --data SPEC          text (.txt, .gz: byte-level tokens) or token shards (.bin, globs,\n"
            "                       comma-separated), as for gdn train\n"
            "  --val_tokens N       evaluate the last N tokens of SPEC, the part gdn train --val_tokens N\n"
            "                       holds out; 0 (default) evaluates all of SPEC\n"
            "  --seq_len T          window length (default: the checkpoint's run setting)\n"
            "  --batch_size B       windows per forward pass (default: the checkpoint's run setting)\n"
            "  --max_windows N      at most the first N windows (0 = all, the default)\n"
            "  --bytes_per_token R  bytes of text per token of SPEC (overrides PREFIX_data.json)\n"
            "  --json               one JSON object instead of text\n"
            "  --documents, --eod_token, --mask_begin, --mask_end, --doc_fill\n"
            "                       documents as gdn train packs them (default: the checkpoint's run\n"
            "                       settings): the windows are the packed validation windows in order,\n"
            "                       every mixer resets at each document start, and padding and masked\n"
            "                       targets are not counted\n"
            "Windows are those of gdn train's validation: starts 0, T, 2T, ... of each file, so every\n"
            "token after a file's first is a target once. gdn train's val_loss of a run is\n"
            "--val_tokens V --seq_len T --batch_size B --max_windows eval_batches*B with the run's\n"
            "settings and data.\n"
            "Bits per byte = loss / ln 2 * tokens / bytes, so models with different tokenizers\n"
            "compare. Byte-level text has one byte per token. For token shards the bytes per token\n"
            "come from, in this order:\n"
            "  1. --bytes_per_token R (the text's bytes divided by its tokens);\n"
            "  2. PREFIX_data.json, written by gdn data beside its shards PREFIX_train_NNNNNN.bin\n"
            "     and PREFIX_val_NNNNNN.bin (every shard of SPEC must have one PREFIX): bytes /\n"
            "     tokens of the part(s) the shards belong to (train, val, or both summed). When\n"
            "     SPEC is every shard of the part and every window is evaluated, that is the ratio\n"
            "     of the evaluated text (up to the first token of each shard and the tail shorter\n"
            "     than a window); with only some of its shards, --val_tokens or fewer windows\n"
            "     (--max_windows) it is the part's average ratio, and the output says so\n"
            "     (split_average in JSON).\n"
            "A PREFIX_data.json that cannot be used (it does not parse, lacks a field, has a\n"
            "vocab_size above the model's, another dtype than the shards, or token counts or\n"
            "shard numbers the shards do not match) gives a warning on stderr naming the file and\n"
            "the problem; the evaluation still runs and exits 0. Without a ratio bits per byte is\n"
            "not printed (null in JSON) and bits per token stands in its place.\n");
}

typedef struct {
    const char *ckpt, *data;
    int seq_len, batch_size, json;
    int64_t val_tokens, max_windows;
    int documents, doc_fill;            /* -1: the checkpoint's setting */
    int64_t eod, mask_begin, mask_end;  /* -2: the checkpoint's setting */
    double bytes_per_token;
} eval_opts;

/* Defaults of seq_len and batch_size from the checkpoint's stored run configuration. */
static void run_defaults(const char *config_json, eval_opts *o) {
    gdn_run_config rc;
    char err[512];
    if (!config_json || gdn_run_config_from_json_text(&rc, config_json, err, sizeof err)) {
        if (gdn_run_config_from_json_text(&rc, "{}", err, sizeof err)) GDN_DIE("default run config: %s", err);
    }
    if (!o->seq_len) o->seq_len = rc.seq_len;
    if (!o->batch_size) o->batch_size = rc.batch_size;
    if (o->documents < 0) o->documents = rc.documents;
    if (o->doc_fill < 0) o->doc_fill = rc.doc_fill;
    if (o->eod == -2) o->eod = rc.eod_token;
    if (o->mask_begin == -2) o->mask_begin = rc.mask_begin;
    if (o->mask_end == -2) o->mask_end = rc.mask_end;
}

static int parse_args(int argc, char **argv, eval_opts *o) {
    char err[512];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            eval_usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gdn eval: option '%s' needs a value (see gdn eval --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--ckpt")) o->ckpt = v;
        else if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--seq_len")) bad = io_parse_int(a, v, 1, 1 << 24, &o->seq_len, err, sizeof err);
        else if (!strcmp(a, "--batch_size")) bad = io_parse_int(a, v, 1, 1 << 16, &o->batch_size, err, sizeof err);
        else if (!strcmp(a, "--val_tokens")) bad = io_parse_i64(a, v, 0, INT64_MAX, &o->val_tokens, err, sizeof err);
        else if (!strcmp(a, "--max_windows")) bad = io_parse_i64(a, v, 0, INT64_MAX, &o->max_windows, err, sizeof err);
        else if (!strcmp(a, "--documents")) {
            if (!strcmp(v, "true") || !strcmp(v, "1")) o->documents = 1;
            else if (!strcmp(v, "false") || !strcmp(v, "0")) o->documents = 0;
            else snprintf(err, sizeof err, "--documents expects true, false, 1 or 0, got '%.80s'", v), bad = 1;
        } else if (!strcmp(a, "--doc_fill")) {
            if (!strcmp(v, "true") || !strcmp(v, "1")) o->doc_fill = 1;
            else if (!strcmp(v, "false") || !strcmp(v, "0")) o->doc_fill = 0;
            else snprintf(err, sizeof err, "--doc_fill expects true, false, 1 or 0, got '%.80s'", v), bad = 1;
        } else if (!strcmp(a, "--eod_token")) bad = io_parse_i64(a, v, -1, INT32_MAX, &o->eod, err, sizeof err);
        else if (!strcmp(a, "--mask_begin")) bad = io_parse_i64(a, v, -1, INT32_MAX, &o->mask_begin, err, sizeof err);
        else if (!strcmp(a, "--mask_end")) bad = io_parse_i64(a, v, -1, INT32_MAX, &o->mask_end, err, sizeof err);
        else if (!strcmp(a, "--bytes_per_token"))
            bad = io_parse_f64(a, v, 1e-6, 1e6, &o->bytes_per_token, err, sizeof err);
        else {
            fprintf(stderr, "gdn eval: unknown option '%s'\n\n", a);
            eval_usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "gdn eval: %s\n", err);
            return 2;
        }
    }
    if (!o->ckpt || !o->data) {
        fprintf(stderr, "gdn eval: --ckpt and --data are required (see gdn eval --help)\n");
        return 2;
    }
    return 0;
}

/* The mean loss over the first n windows, in batches of B as gdn train's evaluate(): each
 * batch's loss sum, the last batch padded with ignored rows, summed in batch order. */
static double mean_loss(const io_dataset *ds, const gdn_param_table *t, const float *params,
                        uint64_t n, int B, int T, uint64_t *targets) {
    int *window = GDN_MALLOC((size_t)B * (T + 1) * sizeof *window);
    int *in = GDN_MALLOC((size_t)B * T * sizeof *in), *tg = GDN_MALLOC((size_t)B * T * sizeof *tg);
    gdn_cpu_acts_f32 *a = gdn_cpu_acts_create_f32(t, B, T);
    double loss = 0, valid = 0;
    for (uint64_t j = 0; j * (uint64_t)B < n; j++) {
        int rows = 0;
        for (int b = 0; b < B; b++) {
            int *row = window + (size_t)b * (T + 1);
            if (j * (uint64_t)B + (uint64_t)b < n) {
                io_dataset_val_window(ds, j * (uint64_t)B + (uint64_t)b, row);
                rows++;
            } else {
                memcpy(row, window, (size_t)(T + 1) * sizeof *row);
            }
            memcpy(in + (size_t)b * T, row, (size_t)T * sizeof *in);
            memcpy(tg + (size_t)b * T, row + 1, (size_t)T * sizeof *tg);
        }
        for (size_t i = (size_t)rows * T; i < (size_t)B * T; i++) tg[i] = -1;
        int nv = 0;
        loss += gdn_cpu_forward_f32(a, t, params, in, tg, 0.0f, &nv, NULL, NULL);
        valid += nv;
    }
    gdn_cpu_acts_free_f32(a);
    free(window);
    free(in);
    free(tg);
    *targets = (uint64_t)valid;
    return loss / valid;
}

/* mean_loss with documents: the packed validation windows with their targets, and the starts
 * handed to the CPU model before each pass (the backend interface, model/backend.h). Returns NAN
 * after a message when the model cannot run the documents. */
static double mean_loss_docs(const io_dataset *ds, const gdn_param_table *t, const float *params,
                             uint64_t n, int B, int T, uint64_t *targets) {
    int *window = GDN_MALLOC((size_t)B * (T + 1) * sizeof *window);
    int *in = GDN_MALLOC((size_t)B * T * sizeof *in), *tg = GDN_MALLOC((size_t)B * T * sizeof *tg);
    unsigned char *st = GDN_MALLOC((size_t)B * T);
    const gdn_model_shape shape = {.B = B, .T = T, .precision = GDN_PRECISION_FP32};
    gdn_model *m = gdn_backend_cpu.create(t, &shape);
    gdn_backend_cpu.upload(m, params, NULL, NULL);
    double loss = 0, valid = 0;
    for (uint64_t j = 0; j * (uint64_t)B < n; j++) {
        for (int b = 0; b < B; b++) {
            int *row = window + (size_t)b * (T + 1);
            if (j * (uint64_t)B + (uint64_t)b < n) {
                io_dataset_val_docs(ds, j * (uint64_t)B + (uint64_t)b, row, tg + (size_t)b * T,
                                    st + (size_t)b * T);
            } else { /* padding rows: the first row's inputs, nothing counted */
                memcpy(row, window, (size_t)(T + 1) * sizeof *row);
                memcpy(st + (size_t)b * T, st, (size_t)T);
                for (int i = 0; i < T; i++) tg[(size_t)b * T + i] = -1;
            }
            memcpy(in + (size_t)b * T, row, (size_t)T * sizeof *in);
        }
        if (gdn_backend_cpu.set_doc_starts(m, st)) {
            fprintf(stderr, "gdn eval: the CPU model cannot run these packed documents; evaluate "
                    "without them (--documents false)\n");
            valid = 0, loss = NAN;
            break;
        }
        int nv = 0;
        loss += gdn_backend_cpu.forward(m, in, tg, 0.0f, &nv, NULL);
        valid += nv;
    }
    gdn_backend_cpu.free(m);
    free(window), free(in), free(tg), free(st);
    *targets = (uint64_t)valid;
    return valid > 0 ? loss / valid : NAN;
}

int gdn_cmd_eval(int argc, char **argv) {
    eval_opts o = {0};
    o.documents = o.doc_fill = -1, o.eod = o.mask_begin = o.mask_end = -2;
    int r = parse_args(argc, argv, &o);
    if (r) return r == 1 ? 0 : r;
    char err[2048];
    gdn_param_table t;
    float *params;
    ckpt_info info;
    if (gdn_model_load(o.ckpt, &t, &params, &info, err, sizeof err)) {
        fprintf(stderr, "gdn eval: %s\n", err);
        return 1;
    }
    run_defaults(info.config_json, &o);
    const int64_t step = info.step;
    ckpt_info_free(&info);
    io_tokens tok;
    io_dataset ds;
    int status = 1, have_ds = 0;
    if (io_tokens_open(&tok, o.data, t.cfg.vocab_size, err, sizeof err)) {
        fprintf(stderr, "gdn eval: %s\n", err);
        goto done_params;
    }
    /* the held-out part as gdn train holds it out, or the whole source as validation data */
    io_dataset_opts dopts = {.seq_len = o.seq_len, .seed = 1, .val_tokens = (size_t)o.val_tokens,
                             .documents = o.documents,
                             .docs = {o.eod, o.mask_begin, o.mask_end, o.doc_fill}};
    if (o.documents && io_doc_opts_check(&dopts.docs, t.cfg.vocab_size, err, sizeof err)) {
        fprintf(stderr, "gdn eval: %s\n", err);
        goto done_tokens;
    }
    if (io_dataset_open(&ds, &tok, o.val_tokens ? NULL : &tok, &dopts, err, sizeof err)) {
        fprintf(stderr, "gdn eval: --data %s: %s\n", o.data, err);
        goto done_tokens;
    }
    have_ds = 1;
    uint64_t n = ds.n_val_windows;
    if (o.max_windows > 0 && (uint64_t)o.max_windows < n) n = (uint64_t)o.max_windows;
    if (n == 0) {
        fprintf(stderr, "gdn eval: --data %s holds no window of seq_len + 1 = %d tokens to evaluate\n",
                o.data, o.seq_len + 1);
        goto done_tokens;
    }
    uint64_t targets = 0;
    const double loss = o.documents ? mean_loss_docs(&ds, &t, params, n, o.batch_size, o.seq_len, &targets)
                                    : mean_loss(&ds, &t, params, n, o.batch_size, o.seq_len, &targets);
    if (o.documents && targets == 0) goto done_tokens; /* the model refused the documents */
    const double bpt = loss / log(2.0);
    /* where the bytes per token come from: text, the option, or gdn data's record */
    const char *from = NULL, *unknown_why = "give --bytes_per_token";
    char why[2048];
    gdn_eval_bytes rec;
    int have_rec = 0, split_average = 0;
    double bytes_per_token = 0; /* 0: unknown */
    if (tok.is_text) bytes_per_token = 1.0, from = "text";
    else if (o.bytes_per_token > 0) bytes_per_token = o.bytes_per_token, from = "option";
    else {
        int f = gdn_eval_bytes_find(&tok, t.cfg.vocab_size, &rec, why, sizeof why);
        if (f == 1) {
            have_rec = 1;
            bytes_per_token = rec.bytes_per_token, from = "data_json";
            split_average = !rec.whole || o.val_tokens > 0 || n < ds.n_val_windows ||
                            (o.documents && o.mask_begin >= 0);
        } else if (f < 0) {
            fprintf(stderr, "gdn eval: warning: %s; bits per byte is not computed (give "
                    "--bytes_per_token)\n", why);
            unknown_why = "the shards' data.json could not be used, see the warning; give "
                          "--bytes_per_token";
        }
    }
    const double bpb = bytes_per_token > 0 ? bpt / bytes_per_token : NAN;
    if (!isfinite(loss)) {
        fprintf(stderr, "gdn eval: %s: the loss is not finite (%g): the checkpoint's parameters have "
                "diverged or are damaged\n", o.ckpt, loss);
        goto done_tokens;
    }
    if (o.json) {
        io_jw w;
        io_jw_init(&w, 0);
        io_jw_begin_object(&w);
        io_jw_kv_string(&w, "ckpt", o.ckpt);
        io_jw_kv_int(&w, "step", (long long)step);
        io_jw_kv_string(&w, "data", o.data);
        io_jw_kv_int(&w, "seq_len", o.seq_len);
        io_jw_kv_bool(&w, "documents", o.documents);
        io_jw_kv_int(&w, "windows", (long long)n);
        io_jw_kv_int(&w, "tokens", (long long)targets);
        io_jw_kv_number(&w, "loss", loss);
        io_jw_kv_number(&w, "perplexity", exp(loss));
        io_jw_kv_number(&w, "bits_per_token", bpt);
        io_jw_kv_number(&w, "bytes_per_token", bytes_per_token > 0 ? bytes_per_token : NAN);
        io_jw_kv_number(&w, "bits_per_byte", bpb); /* null when unknown */
        io_jw_key(&w, "bytes_per_token_from"); /* text, option, data_json or null */
        if (from) io_jw_string(&w, from);
        else io_jw_null(&w);
        io_jw_key(&w, "data_json");
        if (have_rec) io_jw_string(&w, rec.path);
        else io_jw_null(&w);
        io_jw_key(&w, "data_part");
        if (have_rec) io_jw_string(&w, rec.part);
        else io_jw_null(&w);
        io_jw_kv_bool(&w, "split_average", split_average);
        io_jw_end_object(&w);
        printf("%s\n", io_jw_text(&w));
        io_jw_free(&w);
    } else {
        printf("gdn eval: %s (step %lld) on %s: %llu %swindows of %d tokens, %llu targets\n", o.ckpt,
               (long long)step, o.data, (unsigned long long)n, o.documents ? "packed-document " : "",
               o.seq_len, (unsigned long long)targets);
        printf("loss %.6f nats/token, perplexity %.4f, %.6f bits/token", loss, exp(loss), bpt);
        if (bytes_per_token > 0) printf(", %.6f bits/byte\n", bpb);
        else printf("\nbits per byte: unknown (token shards; %s)\n", unknown_why);
        if (have_rec)
            printf("bytes per token %.6f from %s ('%s': %lld bytes / %lld tokens)%s\n",
                   bytes_per_token, rec.path, rec.part, (long long)rec.bytes, (long long)rec.tokens,
                   split_average ? "; the split's average ratio: only part of it was evaluated" : "");
    }
    status = fflush(stdout) ? 1 : 0;
done_tokens:
    if (have_ds) io_dataset_close(&ds);
    io_tokens_close(&tok);
done_params:
    free(params);
    gdn_param_table_free(&t);
    return status;
}
