/* gdn import: a Hugging Face config.json (Llama, Qwen2, Qwen3) as a gdn model configuration,
 * refusing whatever the gdn model would compute differently (see import_hf.h). The defaults of
 * absent fields are those of transformers' configuration classes. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "train/import_hf.h"

static int fail(char *err, int err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, int err_len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, (size_t)err_len, fmt, ap);
    va_end(ap);
    return -1;
}

/* obj[key] when present and not null (transformers writes unset options as null). */
static const io_json *field(const io_json *obj, const char *key) {
    const io_json *v = io_json_get(obj, key);
    return v && v->type != IO_JSON_NULL ? v : NULL;
}

/* A value that switches a feature on: true, a non-zero number, a non-empty string, array or
 * object. */
static int truthy(const io_json *v) {
    if (!v) return 0;
    switch (v->type) {
    case IO_JSON_BOOL: return v->boolean;
    case IO_JSON_NUMBER: return v->number != 0;
    case IO_JSON_STRING: return v->string_len > 0;
    case IO_JSON_ARRAY:
    case IO_JSON_OBJECT: return v->n_items > 0;
    default: return 0;
    }
}

/* An integer field: required (no default) or with default def. */
static int get_int(const io_json *root, const char *key, int required, int def, int lo, int *out,
                   char *err, int err_len) {
    char sub[512];
    *out = def;
    if (!field(root, key)) {
        if (required) return fail(err, err_len, "config.json has no '%s'", key);
        return 0;
    }
    if (io_json_get_int(root, key, out, sub, sizeof sub) < 0) return fail(err, err_len, "%s", sub);
    if (*out < lo) return fail(err, err_len, "config.json: %s is %d; it must be at least %d", key, *out, lo);
    return 0;
}

static int get_bool(const io_json *root, const char *key, int def, int *out, char *err, int err_len) {
    char sub[512];
    *out = def;
    if (field(root, key) && io_json_get_bool(root, key, out, sub, sizeof sub) < 0)
        return fail(err, err_len, "%s", sub);
    return 0;
}

/* The RoPE base: rope_parameters {rope_theta, rope_type} (transformers 5) or the older top-level
 * rope_theta (and rope_scaling); only the default (unscaled, full) rotary embedding is taken. */
static int rope(const io_json *root, double *theta, char *err, int err_len) {
    const io_json *rs = field(root, "rope_scaling");
    if (rs) {
        const io_json *ty = rs->type == IO_JSON_OBJECT ? field(rs, "rope_type") : NULL;
        if (!ty && rs->type == IO_JSON_OBJECT) ty = field(rs, "type");
        if (!(ty && ty->type == IO_JSON_STRING && !strcmp(ty->string, "default") && rs->n_items <= 2))
            return fail(err, err_len, "config.json: rope_scaling (%s) is not supported: the attention "
                        "layers use the default rotary embedding only",
                        ty && ty->type == IO_JSON_STRING ? ty->string : "set");
    }
    const io_json *pf = field(root, "partial_rotary_factor");
    if (pf && !(pf->type == IO_JSON_NUMBER && pf->number == 1.0))
        return fail(err, err_len, "config.json: partial_rotary_factor is not supported: the attention "
                    "layers rotate the whole head");
    double top = 0;
    int has_top = 0;
    const io_json *rt = field(root, "rope_theta");
    if (rt) {
        if (rt->type != IO_JSON_NUMBER || !(rt->number > 0) || !isfinite(rt->number))
            return fail(err, err_len, "config.json: rope_theta must be a positive number");
        top = rt->number;
        has_top = 1;
    }
    *theta = has_top ? top : 10000.0;
    const io_json *rp = field(root, "rope_parameters");
    if (!rp) return 0;
    if (rp->type != IO_JSON_OBJECT)
        return fail(err, err_len, "config.json: rope_parameters must be an object");
    for (size_t i = 0; i < rp->n_items; i++) {
        const io_json *v = &rp->items[i];
        if (!strcmp(v->key, "rope_type")) {
            if (v->type != IO_JSON_STRING || strcmp(v->string, "default"))
                return fail(err, err_len, "config.json: rope_parameters.rope_type '%.40s' is not "
                            "supported: the attention layers use the default rotary embedding only",
                            v->type == IO_JSON_STRING ? v->string : "?");
        } else if (!strcmp(v->key, "rope_theta")) {
            if (v->type != IO_JSON_NUMBER || !(v->number > 0) || !isfinite(v->number))
                return fail(err, err_len, "config.json: rope_parameters.rope_theta must be a positive number");
            if (has_top && v->number != top)
                return fail(err, err_len, "config.json: rope_theta %g and rope_parameters.rope_theta %g "
                            "disagree", top, v->number);
            *theta = v->number;
        } else if (!(!strcmp(v->key, "partial_rotary_factor") && v->type == IO_JSON_NUMBER &&
                     v->number == 1.0)) {
            return fail(err, err_len, "config.json: rope_parameters.%.60s is not supported: the "
                        "attention layers use the default rotary embedding only", v->key);
        }
    }
    return 0;
}

/* Fields of mixture-of-experts configurations; any of them set is refused. */
static const char *const moe_fields[] = {
    "num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok",
    "moe_intermediate_size", "shared_expert_intermediate_size", "n_shared_experts", NULL};

int gdn_hf_config(const io_json *root, gdn_config *c, gdn_hf_info *info, char *err, int err_len) {
    static const char *const types[][2] = {
        {"llama", "LlamaForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"}};
    if (root->type != IO_JSON_OBJECT) return fail(err, err_len, "config.json is not a JSON object");
    const io_json *mt = field(root, "model_type");
    if (!mt || mt->type != IO_JSON_STRING)
        return fail(err, err_len, "config.json has no model_type (a string such as \"llama\")");
    int k = -1;
    for (int i = 0; i < 3; i++)
        if (!strcmp(mt->string, types[i][0])) k = i;
    if (k < 0)
        return fail(err, err_len, "config.json: model_type '%.60s' is not supported (gdn import reads "
                    "dense Llama, Qwen2 and Qwen3 decoders: llama, qwen2, qwen3)", mt->string);
    memset(info, 0, sizeof *info);
    snprintf(info->model_type, sizeof info->model_type, "%s", types[k][0]);
    const io_json *ar = field(root, "architectures");
    if (ar) {
        if (ar->type != IO_JSON_ARRAY) return fail(err, err_len, "config.json: architectures must be an array");
        for (size_t i = 0; i < ar->n_items; i++)
            if (ar->items[i].type != IO_JSON_STRING || strcmp(ar->items[i].string, types[k][1]))
                return fail(err, err_len, "config.json: architecture '%.60s' is not supported (a %s "
                            "checkpoint is read as %s)",
                            ar->items[i].type == IO_JSON_STRING ? ar->items[i].string : "?",
                            types[k][0], types[k][1]);
    }
    for (int i = 0; moe_fields[i]; i++)
        if (truthy(field(root, moe_fields[i])))
            return fail(err, err_len, "config.json: %s is set: mixture-of-experts models are not "
                        "supported (dense MLPs only)", moe_fields[i]);
    if (field(root, "quantization_config"))
        return fail(err, err_len, "config.json: quantization_config is set: quantized weights are not "
                    "supported (import an fp32, fp16 or bf16 checkpoint)");
    const io_json *act = field(root, "hidden_act");
    if (act && (act->type != IO_JSON_STRING || strcmp(act->string, "silu")))
        return fail(err, err_len, "config.json: hidden_act '%.40s' is not supported (the MLP is SwiGLU: silu)",
                    act->type == IO_JSON_STRING ? act->string : "?");
    int flag;
    if (get_bool(root, "use_sliding_window", 0, &flag, err, err_len)) return -1;
    if (flag)
        return fail(err, err_len, "config.json: use_sliding_window is true: sliding-window attention "
                    "is not supported (every layer attends to the whole context)");
    const io_json *lt = field(root, "layer_types");
    if (lt && lt->type == IO_JSON_ARRAY)
        for (size_t i = 0; i < lt->n_items; i++)
            if (lt->items[i].type != IO_JSON_STRING || strcmp(lt->items[i].string, "full_attention"))
                return fail(err, err_len, "config.json: layer_types[%zu] is '%.40s': only full_attention "
                            "layers are supported", i,
                            lt->items[i].type == IO_JSON_STRING ? lt->items[i].string : "?");
    if (get_bool(root, "mlp_bias", 0, &flag, err, err_len)) return -1;
    if (flag) return fail(err, err_len, "config.json: mlp_bias is true: MLP biases are not supported");
    if (k != 1) { /* Qwen2 always has q/k/v biases; attention_bias also gives o_proj one */
        if (get_bool(root, "attention_bias", 0, &flag, err, err_len)) return -1;
        if (flag)
            return fail(err, err_len, "config.json: attention_bias is true: the o_proj bias it adds is "
                        "not supported (only Qwen2's q/k/v biases are)");
    }

    gdn_config_defaults(c);
    int heads = 0, kv = 0, hd = 0, eps_given = 0;
    if (get_int(root, "vocab_size", 1, 0, 2, &c->vocab_size, err, err_len) ||
        get_int(root, "hidden_size", 1, 0, 1, &c->d_model, err, err_len) ||
        get_int(root, "num_hidden_layers", 1, 0, 1, &c->n_layers, err, err_len) ||
        get_int(root, "intermediate_size", 1, 0, 1, &c->d_ff, err, err_len) ||
        get_int(root, "num_attention_heads", 1, 0, 1, &heads, err, err_len) ||
        get_int(root, "num_key_value_heads", 0, heads, 1, &kv, err, err_len))
        return -1;
    /* head_dim: Qwen3's default is 128; Llama's and Qwen2's hidden_size / heads */
    if (get_int(root, "head_dim", 0, k == 2 ? 128 : c->d_model / heads, 1, &hd, err, err_len)) return -1;
    if (hd < 2 || hd % 2 || hd > GDN_MAX_HEAD_DIM)
        return fail(err, err_len, "config.json: head_dim %d cannot run here: attention layers need an "
                    "even head dimension of at most %d", hd, GDN_MAX_HEAD_DIM);
    if (heads % kv)
        return fail(err, err_len, "config.json: num_attention_heads %d is not a multiple of "
                    "num_key_value_heads %d", heads, kv);
    const io_json *eps = field(root, "rms_norm_eps");
    if (eps) {
        if (eps->type != IO_JSON_NUMBER || !(eps->number > 0 && eps->number < 1))
            return fail(err, err_len, "config.json: rms_norm_eps must be a number in (0, 1)");
        eps_given = 1;
    }
    c->norm_eps = eps_given ? eps->number : 1e-6;
    if (get_bool(root, "tie_word_embeddings", 0, &c->tie_embeddings, err, err_len)) return -1;
    double theta = 10000.0;
    if (rope(root, &theta, err, err_len)) return -1;
    c->n_heads = heads;
    c->n_kv_heads = kv;
    c->head_dim = hd;
    c->attn_head_dim = hd;
    c->expand_v = 1; /* unused by attention layers; keeps head_dim * expand_v in range */
    c->rope_theta = theta;
    c->qk_norm = k == 2;
    c->qkv_bias = k == 1;
    snprintf(c->mixers, sizeof c->mixers, "A");
    char sub[512];
    if (gdn_config_validate(c, sub, sizeof sub))
        return fail(err, err_len, "config.json describes a model gdn cannot hold: %s", sub);
    return 0;
}

void gdn_hf_tensor_name(const char *name, char *out, size_t out_len) {
    static const char *const map[][2] = {
        {"attn_norm.", "input_layernorm."}, {"attn.", "self_attn."}, {"mlp_norm.", "post_attention_layernorm."}};
    if (!strcmp(name, "model.embeddings.weight")) {
        snprintf(out, out_len, "model.embed_tokens.weight");
        return;
    }
    const char *pre = "model.layers.";
    const char *rest = !strncmp(name, pre, strlen(pre)) ? strchr(name + strlen(pre), '.') : NULL;
    if (rest) {
        rest++;
        for (int i = 0; i < 3; i++) {
            size_t n = strlen(map[i][0]);
            if (!strncmp(rest, map[i][0], n)) {
                snprintf(out, out_len, "%.*s%s%s", (int)(rest - name), name, map[i][1], rest + n);
                return;
            }
        }
    }
    snprintf(out, out_len, "%s", name);
}
