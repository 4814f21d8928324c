/* gdn import HF_DIR --out MODEL.h5: a Hugging Face Llama, Qwen2 or Qwen3 checkpoint
 * (config.json and model.safetensors, or shards listed by model.safetensors.index.json) as an
 * ordinary gdn checkpoint of softmax-attention layers. The configuration is read by
 * train/import_config.c; here every tensor of the gdn model is found under its Hugging Face name,
 * checked against the shape the configuration gives it and converted to fp32, and every tensor
 * of the files must be used (an unexpected one means a feature the import would drop). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/checkpoint.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "model/check.h"
#include "model/params.h"
#include "train/commands.h"
#include "train/import_hf.h"
#include "train/run_config.h"

static void import_usage(FILE *f) {
    fprintf(f,
            "usage: gdn import HF_DIR --out MODEL.h5\n\n"
            "Converts a Hugging Face Llama, Qwen2 or Qwen3 dense decoder (HF_DIR holds config.json and\n"
            "model.safetensors, or model-0000N-of-0000M.safetensors shards with\n"
            "model.safetensors.index.json; tensors in fp32, fp16 or bf16) into a gdn checkpoint whose\n"
            "layers are all softmax attention (mixer A): grouped-query attention, RoPE theta from\n"
            "rope_theta or rope_parameters, Qwen2's q/k/v biases, Qwen3's q/k norms, tied or untied\n"
            "embeddings. The result works with gdn inspect, sample, eval, op logits and train\n"
            "--init_from (its run configuration is stored in the checkpoint's 'config' attribute).\n"
            "Refused, with a message naming the field: other model types or architectures, rope\n"
            "scaling or a non-default rope_type, sliding windows, mixture-of-experts fields, other\n"
            "activations, o_proj or MLP biases, quantized weights, a head_dim above %d or odd, and\n"
            "missing, unexpected or misshapen tensors. docs/interop.md has the mapping.\n"
            "A tokenizer.json in HF_DIR that gdn's tokenizer loads (byte-level BPE, docs/tokenizers.md)\n"
            "and whose ids fit the model's vocabulary is recorded by its absolute path as the run's\n"
            "tokenizer setting, so gdn sample encodes and decodes with it; one that does not is\n"
            "reported in a warning that says why, and the checkpoint is written without it.\n",
            GDN_MAX_HEAD_DIM);
}

/* The opened weight files and, for each tensor name, where it lives. */
typedef struct {
    st_file *files;
    int n_files;
    int **used; /* per file, per tensor: taken by the model */
} weights;

static void weights_close(weights *w) {
    for (int i = 0; i < w->n_files; i++) {
        free(w->used[i]);
        st_close(&w->files[i]);
    }
    free(w->files);
    free(w->used);
    memset(w, 0, sizeof *w);
}

/* Opens dir/name as the next weight file (once). */
static int weights_add(weights *w, const char *dir, const char *name, char *err, int err_len) {
    char path[PATH_MAX];
    if (strchr(name, '/') || !strcmp(name, "..")) {
        snprintf(err, (size_t)err_len, "%s/model.safetensors.index.json: shard name '%.200s' must be a "
                 "file name in the same directory", dir, name);
        return -1;
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    for (int i = 0; i < w->n_files; i++)
        if (!strcmp(w->files[i].path, path)) return 0;
    w->files = realloc(w->files, sizeof *w->files * (size_t)(w->n_files + 1));
    w->used = realloc(w->used, sizeof *w->used * (size_t)(w->n_files + 1));
    if (!w->files || !w->used) GDN_DIE("out of memory");
    if (st_open(path, &w->files[w->n_files], err, err_len)) return -1;
    w->used[w->n_files] = GDN_CALLOC((size_t)w->files[w->n_files].n + 1, sizeof(int));
    w->n_files++;
    return 0;
}

/* The weight files of dir: those the index lists (each tensor of the index must be in the file
 * it names), or model.safetensors. */
static int weights_open(weights *w, const char *dir, char *err, int err_len) {
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (stat(path, &st) != 0) return weights_add(w, dir, "model.safetensors", err, err_len);
    io_json *idx = io_json_parse_file(path, err, err_len);
    if (!idx) return -1;
    const io_json *map = io_json_get(idx, "weight_map");
    int rc = 0;
    if (!map || map->type != IO_JSON_OBJECT) {
        snprintf(err, (size_t)err_len, "%.1500s: no weight_map object", path);
        rc = -1;
    }
    for (size_t i = 0; !rc && i < map->n_items; i++)
        if (map->items[i].type != IO_JSON_STRING) {
            snprintf(err, (size_t)err_len, "%.1500s: weight_map['%.200s'] must be a file name", path, map->items[i].key);
            rc = -1;
        } else {
            rc = weights_add(w, dir, map->items[i].string, err, err_len);
        }
    for (size_t i = 0; !rc && i < map->n_items; i++) {
        char shard[PATH_MAX];
        snprintf(shard, sizeof shard, "%s/%s", dir, map->items[i].string);
        for (int f = 0; f < w->n_files; f++)
            if (!strcmp(w->files[f].path, shard) && !st_find(&w->files[f], map->items[i].key)) {
                snprintf(err, (size_t)err_len, "%.1500s: the index puts tensor '%.200s' in this file, which "
                         "does not hold it", shard, map->items[i].key);
                rc = -1;
            }
    }
    io_json_free(idx);
    return rc;
}

/* The tensor called name in any of the files (a name in two files is an error). */
static const st_tensor *weights_find(weights *w, const char *name, int *file, char *err, int err_len) {
    const st_tensor *found = NULL;
    for (int i = 0; i < w->n_files; i++) {
        const st_tensor *t = st_find(&w->files[i], name);
        if (!t) continue;
        if (found) {
            snprintf(err, (size_t)err_len, "tensor '%.200s' is in both %s and %s", name,
                     w->files[*file].path, w->files[i].path);
            return NULL;
        }
        found = t;
        *file = i;
    }
    if (!found) snprintf(err, (size_t)err_len, "missing tensor '%.200s'", name);
    return found;
}

/* Reads every tensor of table t into params; marks what it used. */
static int load_tensors(weights *w, const gdn_param_table *t, float *params, const char *dir,
                        char *err, int err_len) {
    for (int i = 0; i < t->n; i++) {
        const gdn_param *p = &t->p[i];
        char hf[GDN_PARAM_NAME_MAX + 64], sub[768];
        gdn_hf_tensor_name(p->name, hf, sizeof hf);
        int f = 0;
        const st_tensor *s = weights_find(w, hf, &f, sub, sizeof sub);
        if (!s) {
            snprintf(err, (size_t)err_len, "%s: %s (for %s; the configuration needs it)", dir, sub, p->name);
            return -1;
        }
        int same = s->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = s->shape[d] == p->shape[d];
        if (!same) {
            char want[96], got[160];
            int n = 0, m = 0;
            for (int d = 0; d < p->ndim; d++) n += snprintf(want + n, sizeof want - (size_t)n, "%s%d", d ? "," : "", p->shape[d]);
            for (int d = 0; d < s->ndim && m < (int)sizeof got - 24; d++)
                m += snprintf(got + m, sizeof got - (size_t)m, "%s%lld", d ? "," : "", (long long)s->shape[d]);
            snprintf(err, (size_t)err_len, "%s: tensor '%.200s' has shape [%s]; config.json gives [%s]",
                     w->files[f].path, hf, got, want);
            return -1;
        }
        if (st_read_f32(&w->files[f], s, params + p->offset, err, err_len)) return -1;
        w->used[f][s - w->files[f].t] = 1;
    }
    return 0;
}

/* With tied embeddings a stored lm_head.weight is dropped, as transformers drops it; a warning
 * when it is not the embedding table. */
static int tied_head(weights *w, int f, const st_tensor *s, const gdn_param_table *t,
                     const float *params, char *err, int err_len) {
    const gdn_param *e = gdn_param_find(t, "model.embeddings.weight");
    if (s->numel == e->numel) {
        float *h = GDN_MALLOC(s->numel * sizeof *h);
        int rc = st_read_f32(&w->files[f], s, h, err, err_len);
        int same = !rc && !memcmp(h, params + e->offset, s->numel * sizeof *h);
        free(h);
        if (rc) return -1;
        if (same) return 0;
    }
    fprintf(stderr, "gdn import: warning: %s: lm_head.weight differs from the embedding table, but "
            "config.json ties them (tie_word_embeddings): the head is the embedding table, as in "
            "transformers, and lm_head.weight is not used\n", w->files[f].path);
    return 0;
}

/* Tensors of the files the model did not take: the rotary tables older checkpoints store and,
 * with tied embeddings, a stored copy of the head are dropped; anything else is refused. */
static int check_unused(weights *w, int tied, const gdn_param_table *t, const float *params,
                        char *err, int err_len) {
    for (int f = 0; f < w->n_files; f++)
        for (int i = 0; i < w->files[f].n; i++) {
            const char *name = w->files[f].t[i].name;
            size_t n = strlen(name);
            if (w->used[f][i]) continue;
            if (n >= 9 && !strcmp(name + n - 9, ".inv_freq")) continue;
            if (tied && !strcmp(name, "lm_head.weight")) {
                if (tied_head(w, f, &w->files[f].t[i], t, params, err, err_len)) return -1;
                continue;
            }
            snprintf(err, (size_t)err_len, "%s: tensor '%.200s' has no place in the gdn model (a feature "
                     "the import does not support, or a config.json that does not match the weights)",
                     w->files[f].path, name);
            return -1;
        }
    return 0;
}

/* HF_DIR/tokenizer.json as an absolute path into abs when gdn can use it with this model; a
 * warning saying why not otherwise (the import goes on without it). Returns 1 when recorded. */
static int find_tokenizer(const char *dir, const gdn_config *cfg, char *abs, size_t abs_len) {
    char path[PATH_MAX], err[1024], real[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (stat(path, &st) != 0) return 0;
    io_tokenizer *t = io_tokenizer_load(path, err, sizeof err);
    if (!t) {
        fprintf(stderr, "gdn import: warning: %s does not load (%s): the checkpoint records no "
                "tokenizer (gdn sample reads and writes bytes unless given --tokenizer)\n", path, err);
        return 0;
    }
    uint32_t v = io_tokenizer_vocab_size(t);
    io_tokenizer_free(t);
    if (v > (uint32_t)cfg->vocab_size) {
        fprintf(stderr, "gdn import: warning: %s has %u ids but the model's vocab_size is %d: the "
                "checkpoint records no tokenizer\n", path, v, cfg->vocab_size);
        return 0;
    }
    const int resolved = realpath(path, real) != NULL;
    if (!resolved || strlen(real) >= abs_len) {
        fprintf(stderr, "gdn import: warning: %s: cannot record its absolute path (%s): the "
                "checkpoint records no tokenizer\n", path, resolved ? "too long" : strerror(errno));
        return 0;
    }
    memcpy(abs, real, strlen(real) + 1);
    return 1;
}

int gdn_cmd_import(int argc, char **argv) {
    const char *dir = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            import_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--out")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "gdn import: --out needs a file name (MODEL.h5)\n");
                return 2;
            }
            out = argv[++i];
        } else if (argv[i][0] == '-' || dir) {
            fprintf(stderr, "gdn import: unexpected argument '%s' (see gdn import --help)\n", argv[i]);
            return 2;
        } else {
            dir = argv[i];
        }
    }
    if (!dir || !out) {
        fprintf(stderr, "gdn import: give the Hugging Face directory and --out MODEL.h5 (see gdn import --help)\n");
        return 2;
    }
    char err[2048], path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", dir);
    io_json *cfg_json = io_json_parse_file(path, err, sizeof err);
    if (!cfg_json) {
        fprintf(stderr, "gdn import: %s\n", err);
        return 1;
    }
    gdn_config cfg;
    gdn_hf_info info;
    int rc = gdn_hf_config(cfg_json, &cfg, &info, err, sizeof err);
    io_json_free(cfg_json);
    if (rc) {
        fprintf(stderr, "gdn import: %s: %s\n", dir, err);
        return 1;
    }
    weights w = {0};
    if (weights_open(&w, dir, err, sizeof err)) {
        fprintf(stderr, "gdn import: %s\n", err);
        weights_close(&w);
        return 1;
    }
    gdn_param_table t;
    gdn_param_table_build(&t, &cfg);
    float *params = GDN_MALLOC(t.total * sizeof *params);
    char *config_json = NULL;
    rc = 1;
    if (load_tensors(&w, &t, params, dir, err, sizeof err) || check_unused(&w, cfg.tie_embeddings, &t, params, err, sizeof err)) {
        fprintf(stderr, "gdn import: %s\n", err);
        goto done;
    }
    char tok[GDN_PATH_MAX];
    const int have_tok = find_tokenizer(dir, &cfg, tok, sizeof tok);
    config_json = gdn_run_config_json_with_model(NULL, &cfg, have_tok ? tok : NULL);
    ckpt_contents c = {.step = 0, .tokens_seen = 0, .config_json = config_json, .model = &cfg,
                       .table = &t, .params = params};
    if (ckpt_save_atomic(out, &c, err, sizeof err)) {
        fprintf(stderr, "gdn import: %s\n", err);
        goto done;
    }
    printf("gdn import: %s (%s, %d layers, d_model %d, %d heads / %d kv heads of %d, vocab %d%s%s%s, "
           "rope_theta %g) -> %s: %zu parameters in %d tensors%s%s\n",
           dir, info.model_type, cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim,
           cfg.vocab_size, cfg.tie_embeddings ? ", tied" : "", cfg.qkv_bias ? ", q/k/v biases" : "",
           cfg.qk_norm ? ", q/k norms" : "", cfg.rope_theta, out, t.total, t.n,
           have_tok ? "; tokenizer " : "", have_tok ? tok : "");
    rc = 0;
done:
    free(config_json);
    free(params);
    gdn_param_table_free(&t);
    weights_close(&w);
    return rc;
}
