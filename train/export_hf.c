/* The mapping of gdn checkpoints onto transformers' Llama, Qwen2, Qwen3 and Qwen3-Next (tables
 * and reasons in docs/interop.md, "Export"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/mixer.h"
#include "train/export_hf.h"

/* Written as max_position_embeddings: gdn models have no position limit, and RoPE of the
 * default type does not read it. */
#define EXPORT_MAX_POSITIONS 4096

static const char *const arch_model_type[] = {"llama", "qwen2", "qwen3", "qwen3_next"};
static const char *const arch_class[] = {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                                         "Qwen3NextForCausalLM"};

/* ---- which architecture ------------------------------------------------------------------- */

/* The architecture model c exports as: 0, or -1 with the reason in err. */
int export_choose_arch(const gdn_config *c, export_arch *arch, char *err, size_t errlen) {
    const char *pat = gdn_config_mixers(c);
    int n_a = gdn_config_count_mixer(c, GDN_MIXER_A);
    if (n_a == c->n_layers) {
        /* Qwen2 derives head_dim from hidden_size / num_attention_heads; with another head_dim,
         * Llama's attention_bias carries the q/k/v biases (and a zero o_proj bias) instead */
        int std_dim = gdn_config_attn_dim(c) * c->n_heads == c->d_model;
        *arch = c->qk_norm ? EXPORT_QWEN3 : c->qkv_bias && std_dim ? EXPORT_QWEN2 : EXPORT_LLAMA;
        return 0;
    }
    for (int l = 0; l < c->n_layers; l++) {
        int m = gdn_config_layer_mixer(c, l);
        if (m == GDN_MIXER_A || m == GDN_MIXER_G) continue;
        const gdn_mixer_info *mx = gdn_mixer_get(m);
        snprintf(err, errlen,
                 "layer %d is '%c' (%s) (mixers \"%s\"): transformers has no model with this mixer; "
                 "only layers of G (gated delta rule, exported as Qwen3-Next) and A (softmax "
                 "attention, exported as Llama/Qwen2/Qwen3, or Qwen3-Next in a hybrid) can be exported",
                 l, mx ? mx->kind : '?', mx ? mx->name : "unknown", pat);
        return -1;
    }
    if (n_a > 0 && !c->qk_norm) {
        snprintf(err, errlen,
                 "mixers \"%s\" mixes gated delta rule (G) and softmax attention (A) layers, and "
                 "the attention layers have no q/k norms (qk_norm = 0): Qwen3-Next's attention "
                 "layers always RMS-normalise q and k, and no weight makes that the identity; "
                 "hybrids are exported only with qk_norm (docs/interop.md, \"Export\")", pat);
        return -1;
    }
    if (c->allow_neg_eigval) {
        snprintf(err, errlen,
                 "allow_neg_eigval = 1 (beta = 2 sigmoid(b)): Qwen3-Next computes beta = sigmoid(b) "
                 "and no weight can double it, so the exported model would compute other logits");
        return -1;
    }
    *arch = EXPORT_QWEN3_NEXT; /* every layer G, or G and A with qk_norm (a hybrid) */
    return 0;
}

/* ---- tensors ------------------------------------------------------------------------------- */

typedef struct {
    stw_writer *w;
    const gdn_param_table *t;
    const float *P;
    char *err;
    size_t errlen;
} export_ctx;

static const gdn_param *need(export_ctx *x, const char *name) {
    const gdn_param *p = gdn_param_find(x->t, name);
    if (!p) snprintf(x->err, x->errlen, "the checkpoint's parameter table has no tensor %s", name);
    return p;
}

static void shape_of(const gdn_param *p, int64_t *shape) {
    for (int d = 0; d < p->ndim; d++) shape[d] = p->shape[d];
}

/* hf = ours, or with minus_one hf = ours - 1 (the zero-centred (1 + w) RMSNorm weights). */
static int put(export_ctx *x, const char *hf, const char *ours, int minus_one) {
    const gdn_param *p = need(x, ours);
    if (!p) return -1;
    int64_t shape[3];
    shape_of(p, shape);
    if (!minus_one) return stw_add(x->w, hf, p->ndim, shape, x->P + p->offset, x->err, x->errlen);
    float *d = malloc(p->numel * sizeof *d);
    if (!d) {
        snprintf(x->err, x->errlen, "out of memory converting %s", ours);
        return -1;
    }
    for (size_t i = 0; i < p->numel; i++) d[i] = x->P[p->offset + i] - 1.0f;
    return stw_add_owned(x->w, hf, p->ndim, shape, d, x->err, x->errlen);
}

static int put_layer(export_ctx *x, int l, const char *hf, const char *ours, int minus_one) {
    char a[2 * GDN_PARAM_NAME_MAX], b[2 * GDN_PARAM_NAME_MAX];
    snprintf(a, sizeof a, "model.layers.%d.%s", l, hf);
    snprintf(b, sizeof b, "model.layers.%d.%s", l, ours);
    return put(x, a, b, minus_one);
}

static int put_zeros(export_ctx *x, int l, const char *hf, int64_t n) {
    char a[2 * GDN_PARAM_NAME_MAX];
    snprintf(a, sizeof a, "model.layers.%d.%s", l, hf);
    float *d = calloc((size_t)n ? (size_t)n : 1, sizeof *d);
    if (!d) {
        snprintf(x->err, x->errlen, "out of memory for %s", a);
        return -1;
    }
    return stw_add_owned(x->w, a, 1, &n, d, x->err, x->errlen);
}

/* The embeddings, final norm and (untied) head, and every block's MLP and norms. */
static int put_shared(export_ctx *x, int zero_centred) {
    const gdn_config *c = &x->t->cfg;
    if (put(x, "model.embed_tokens.weight", "model.embeddings.weight", 0) ||
        put(x, "model.norm.weight", "model.norm.weight", zero_centred))
        return -1;
    if (!c->tie_embeddings && put(x, "lm_head.weight", "lm_head.weight", 0)) return -1;
    for (int l = 0; l < c->n_layers; l++)
        if (put_layer(x, l, "input_layernorm.weight", "attn_norm.weight", zero_centred) ||
            put_layer(x, l, "post_attention_layernorm.weight", "mlp_norm.weight", zero_centred) ||
            put_layer(x, l, "mlp.gate_proj.weight", "mlp.gate_proj.weight", 0) ||
            put_layer(x, l, "mlp.up_proj.weight", "mlp.up_proj.weight", 0) ||
            put_layer(x, l, "mlp.down_proj.weight", "mlp.down_proj.weight", 0))
            return -1;
    return 0;
}

/* Llama / Qwen2 / Qwen3 attention: the same tensors under self_attn. */
static int put_attention(export_ctx *x, export_arch arch) {
    const gdn_config *c = &x->t->cfg;
    static const char *const proj[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    for (int l = 0; l < c->n_layers; l++) {
        char hf[64], ours[64];
        for (int i = 0; i < 4; i++) {
            snprintf(hf, sizeof hf, "self_attn.%s.weight", proj[i]);
            snprintf(ours, sizeof ours, "attn.%s.weight", proj[i]);
            if (put_layer(x, l, hf, ours, 0)) return -1;
        }
        for (int i = 0; c->qkv_bias && i < 3; i++) {
            snprintf(hf, sizeof hf, "self_attn.%s.bias", proj[i]);
            snprintf(ours, sizeof ours, "attn.%s.bias", proj[i]);
            if (put_layer(x, l, hf, ours, 0)) return -1;
        }
        /* Llama's and Qwen3's attention_bias also gives o_proj a bias: zeros keep the output */
        if (arch != EXPORT_QWEN2 && c->qkv_bias && put_zeros(x, l, "self_attn.o_proj.bias", c->d_model))
            return -1;
        if (c->qk_norm && (put_layer(x, l, "self_attn.q_norm.weight", "attn.q_norm.weight", 0) ||
                           put_layer(x, l, "self_attn.k_norm.weight", "attn.k_norm.weight", 0)))
            return -1;
    }
    return 0;
}

/* Qwen3-Next's gated DeltaNet layer from ours (per key head h, one value head per key head):
 *   in_proj_qkvz rows  [q_h (K); k_h (K); v_h (V); z_h (V)] for h = 0..H-1
 *   in_proj_ba rows    [b_h; a_h] for h = 0..H-1
 *   conv1d.weight      [q_conv; k_conv; v_conv]  ([2HK + HV, 1, W])
 *   A_log, dt_bias, norm.weight (= o_norm, plain weights), out_proj.weight (= o_proj) */
static int put_gdn_layer(export_ctx *x, int l) {
    const gdn_config *c = &x->t->cfg;
    const int H = c->n_heads, K = c->head_dim, V = gdn_config_head_v(c), D = c->d_model;
    const gdn_layer_offsets *o = &x->t->layer[l];
    const float *P = x->P;
    char name[GDN_PARAM_NAME_MAX + 32];

    const size_t row = (size_t)D, per_head = (size_t)(2 * K + 2 * V);
    float *qkvz = malloc((size_t)H * per_head * row * sizeof *qkvz);
    if (!qkvz) goto oom;
    for (int h = 0; h < H; h++) {
        float *dst = qkvz + (size_t)h * per_head * row;
        memcpy(dst, P + o->q_proj + (size_t)h * K * row, (size_t)K * row * sizeof *dst);
        dst += (size_t)K * row;
        memcpy(dst, P + o->k_proj + (size_t)h * K * row, (size_t)K * row * sizeof *dst);
        dst += (size_t)K * row;
        memcpy(dst, P + o->v_proj + (size_t)h * V * row, (size_t)V * row * sizeof *dst);
        dst += (size_t)V * row;
        memcpy(dst, P + o->g_proj + (size_t)h * V * row, (size_t)V * row * sizeof *dst);
    }
    snprintf(name, sizeof name, "model.layers.%d.linear_attn.in_proj_qkvz.weight", l);
    int64_t s_qkvz[2] = {(int64_t)H * (int64_t)per_head, D};
    if (stw_add_owned(x->w, name, 2, s_qkvz, qkvz, x->err, x->errlen)) return -1;

    float *ba = malloc((size_t)2 * H * row * sizeof *ba);
    if (!ba) goto oom;
    for (int h = 0; h < H; h++) {
        memcpy(ba + (size_t)(2 * h) * row, P + o->b_proj + (size_t)h * row, row * sizeof *ba);
        memcpy(ba + (size_t)(2 * h + 1) * row, P + o->a_proj + (size_t)h * row, row * sizeof *ba);
    }
    snprintf(name, sizeof name, "model.layers.%d.linear_attn.in_proj_ba.weight", l);
    int64_t s_ba[2] = {2 * (int64_t)H, D};
    if (stw_add_owned(x->w, name, 2, s_ba, ba, x->err, x->errlen)) return -1;

    const size_t W = (size_t)c->conv_width, nqk = (size_t)H * K * W, nv = (size_t)H * V * W;
    float *conv = malloc((2 * nqk + nv) * sizeof *conv);
    if (!conv) goto oom;
    memcpy(conv, P + o->q_conv, nqk * sizeof *conv);
    memcpy(conv + nqk, P + o->k_conv, nqk * sizeof *conv);
    memcpy(conv + 2 * nqk, P + o->v_conv, nv * sizeof *conv);
    snprintf(name, sizeof name, "model.layers.%d.linear_attn.conv1d.weight", l);
    int64_t s_conv[3] = {2 * (int64_t)H * K + (int64_t)H * V, 1, (int64_t)W};
    if (stw_add_owned(x->w, name, 3, s_conv, conv, x->err, x->errlen)) return -1;

    if (put_layer(x, l, "linear_attn.A_log", "attn.A_log", 0) ||
        put_layer(x, l, "linear_attn.dt_bias", "attn.dt_bias", 0) ||
        put_layer(x, l, "linear_attn.norm.weight", "attn.o_norm.weight", 0) ||
        put_layer(x, l, "linear_attn.out_proj.weight", "attn.o_proj.weight", 0))
        return -1;
    return 0;
oom:
    snprintf(x->err, x->errlen, "out of memory building the fused projections of layer %d", l);
    return -1;
}

/* Qwen3-Next's gated attention layer computing ours: q_proj yields per head h the query rows
 * and then head_dim gate rows; the gate rows are zero with bias EXPORT_GATE_BIAS, so the
 * output gate sigmoid(gate) is exactly 1.0 (in fp32, bf16 and fp16). attention_bias gives every
 * projection a bias: ours with qkv_bias, else zeros (o_proj: zeros). q_norm and k_norm are
 * zero-centred there: w - 1. RoPE is full (partial_rotary_factor 1, build_config). */
#define EXPORT_GATE_BIAS 1e4f
static int put_gated_attention_layer(export_ctx *x, int l) {
    const gdn_config *c = &x->t->cfg;
    const int H = c->n_heads, Hkv = gdn_config_kv_heads(c), Da = gdn_config_attn_dim(c), D = c->d_model;
    const gdn_layer_offsets *o = &x->t->layer[l];
    char name[2 * GDN_PARAM_NAME_MAX];
    const size_t row = (size_t)D;
    float *qw = calloc((size_t)2 * H * Da * row, sizeof *qw), *qb = calloc((size_t)2 * H * Da, sizeof *qb);
    if (!qw || !qb) {
        free(qw);
        free(qb);
        snprintf(x->err, x->errlen, "out of memory building the gated q_proj of layer %d", l);
        return -1;
    }
    for (int h = 0; h < H; h++) {
        memcpy(qw + (size_t)2 * h * Da * row, x->P + o->q_proj + (size_t)h * Da * row, (size_t)Da * row * sizeof *qw);
        for (int i = 0; i < Da; i++) {
            qb[(size_t)2 * h * Da + i] = c->qkv_bias ? x->P[o->q_bias + (size_t)h * Da + i] : 0.0f;
            qb[(size_t)(2 * h + 1) * Da + i] = EXPORT_GATE_BIAS;
        }
    }
    int64_t sw[2] = {2 * (int64_t)H * Da, D}, sb[1] = {2 * (int64_t)H * Da};
    snprintf(name, sizeof name, "model.layers.%d.self_attn.q_proj.weight", l);
    if (stw_add_owned(x->w, name, 2, sw, qw, x->err, x->errlen)) {
        free(qb);
        return -1;
    }
    snprintf(name, sizeof name, "model.layers.%d.self_attn.q_proj.bias", l);
    if (stw_add_owned(x->w, name, 1, sb, qb, x->err, x->errlen)) return -1;
    if (put_layer(x, l, "self_attn.k_proj.weight", "attn.k_proj.weight", 0) ||
        put_layer(x, l, "self_attn.v_proj.weight", "attn.v_proj.weight", 0) ||
        put_layer(x, l, "self_attn.o_proj.weight", "attn.o_proj.weight", 0) ||
        put_layer(x, l, "self_attn.q_norm.weight", "attn.q_norm.weight", 1) ||
        put_layer(x, l, "self_attn.k_norm.weight", "attn.k_norm.weight", 1))
        return -1;
    if (c->qkv_bias) {
        if (put_layer(x, l, "self_attn.k_proj.bias", "attn.k_proj.bias", 0) ||
            put_layer(x, l, "self_attn.v_proj.bias", "attn.v_proj.bias", 0))
            return -1;
    } else if (put_zeros(x, l, "self_attn.k_proj.bias", (int64_t)Hkv * Da) ||
               put_zeros(x, l, "self_attn.v_proj.bias", (int64_t)Hkv * Da)) {
        return -1;
    }
    return put_zeros(x, l, "self_attn.o_proj.bias", D);
}

/* ---- config.json --------------------------------------------------------------------------- */

static void kv_int_list(io_jw *j, const char *key, int n) {
    io_jw_key(j, key);
    io_jw_begin_array(j);
    for (int i = 0; i < n; i++) io_jw_int(j, i);
    io_jw_end_array(j);
}

static void kv_str_list(io_jw *j, const char *key, const char *s, int n) {
    io_jw_key(j, key);
    io_jw_begin_array(j);
    for (int i = 0; i < n; i++) io_jw_string(j, s);
    io_jw_end_array(j);
}

void export_config(io_jw *j, const gdn_config *c, export_arch arch, stw_dtype dtype) {
    io_jw_begin_object(j);
    io_jw_key(j, "architectures");
    io_jw_begin_array(j);
    io_jw_string(j, arch_class[arch]);
    io_jw_end_array(j);
    io_jw_kv_string(j, "model_type", arch_model_type[arch]);
    io_jw_kv_string(j, "dtype", dtype == STW_BF16 ? "bfloat16" : "float32");
    io_jw_kv_int(j, "vocab_size", c->vocab_size);
    io_jw_kv_int(j, "hidden_size", c->d_model);
    io_jw_kv_int(j, "intermediate_size", c->d_ff);
    io_jw_kv_int(j, "num_hidden_layers", c->n_layers);
    io_jw_kv_string(j, "hidden_act", "silu");
    io_jw_key(j, "rms_norm_eps");
    io_jw_float(j, c->norm_eps);
    io_jw_kv_bool(j, "tie_word_embeddings", c->tie_embeddings);
    io_jw_kv_int(j, "max_position_embeddings", EXPORT_MAX_POSITIONS);
    io_jw_key(j, "initializer_range");
    io_jw_float(j, 0.02);
    io_jw_kv_bool(j, "use_cache", 1);
    io_jw_key(j, "bos_token_id");
    io_jw_null(j);
    io_jw_key(j, "eos_token_id");
    io_jw_null(j);
    io_jw_key(j, "pad_token_id");
    io_jw_null(j);
    io_jw_key(j, "attention_dropout");
    io_jw_float(j, 0.0);
    io_jw_key(j, "rope_parameters");
    io_jw_begin_object(j);
    io_jw_key(j, "rope_theta");
    io_jw_float(j, gdn_config_rope_theta(c));
    io_jw_kv_string(j, "rope_type", "default");
    if (arch == EXPORT_QWEN3_NEXT && gdn_config_count_mixer(c, GDN_MIXER_A)) {
        io_jw_key(j, "partial_rotary_factor");
        io_jw_float(j, 1.0);
    }
    io_jw_end_object(j);
    if (arch == EXPORT_QWEN3_NEXT) {
        io_jw_kv_int(j, "linear_num_key_heads", c->n_heads);
        io_jw_kv_int(j, "linear_num_value_heads", c->n_heads);
        io_jw_kv_int(j, "linear_key_head_dim", c->head_dim);
        io_jw_kv_int(j, "linear_value_head_dim", gdn_config_head_v(c));
        io_jw_kv_int(j, "linear_conv_kernel_dim", c->conv_width);
        io_jw_key(j, "layer_types");
        io_jw_begin_array(j);
        for (int l = 0; l < c->n_layers; l++)
            io_jw_string(j, gdn_config_layer_mixer(c, l) == GDN_MIXER_A ? "full_attention" : "linear_attention");
        io_jw_end_array(j);
        /* every layer listed: a dense MLP of intermediate_size whatever the MoE settings */
        kv_int_list(j, "mlp_only_layers", c->n_layers);
        io_jw_kv_int(j, "decoder_sparse_step", 1);
        if (gdn_config_count_mixer(c, GDN_MIXER_A)) {
            /* the full_attention layers: gated attention with a constant gate (its bias) */
            io_jw_kv_int(j, "num_attention_heads", c->n_heads);
            io_jw_kv_int(j, "num_key_value_heads", gdn_config_kv_heads(c));
            io_jw_kv_int(j, "head_dim", gdn_config_attn_dim(c));
            io_jw_kv_bool(j, "attention_bias", 1);
            /* full RoPE; written at the top level too, where Qwen3NextConfig defaults it to 0.25 */
            io_jw_key(j, "partial_rotary_factor");
            io_jw_float(j, 1.0);
        } else {
            /* the softmax-attention settings, unused (no full_attention layer); head_dim a
             * multiple of 8 so that the partial RoPE transformers sets up has an even width */
            io_jw_kv_int(j, "num_attention_heads", c->n_heads);
            io_jw_kv_int(j, "num_key_value_heads", c->n_heads);
            io_jw_kv_int(j, "head_dim", (c->head_dim + 7) / 8 * 8);
            io_jw_kv_bool(j, "attention_bias", 0);
        }
    } else {
        io_jw_kv_int(j, "num_attention_heads", c->n_heads);
        io_jw_kv_int(j, "num_key_value_heads", gdn_config_kv_heads(c));
        /* Qwen2 has no head_dim setting: it is hidden_size / num_attention_heads (choose_arch) */
        if (arch != EXPORT_QWEN2) io_jw_kv_int(j, "head_dim", gdn_config_attn_dim(c));
        if (arch != EXPORT_QWEN2) io_jw_kv_bool(j, "attention_bias", c->qkv_bias);
        if (arch == EXPORT_LLAMA) {
            io_jw_kv_bool(j, "mlp_bias", 0);
            io_jw_kv_int(j, "pretraining_tp", 1);
        } else {
            io_jw_kv_bool(j, "use_sliding_window", 0);
            io_jw_key(j, "sliding_window");
            io_jw_null(j);
            io_jw_kv_int(j, "max_window_layers", c->n_layers);
            kv_str_list(j, "layer_types", "full_attention", c->n_layers);
        }
    }
    io_jw_end_object(j);
}

static int put_all(export_ctx *x, export_arch arch) {
    if (arch != EXPORT_QWEN3_NEXT) return put_shared(x, 0) || put_attention(x, arch) ? -1 : 0;
    if (put_shared(x, 1)) return -1;
    for (int l = 0; l < x->t->cfg.n_layers; l++)
        if (gdn_config_layer_mixer(&x->t->cfg, l) == GDN_MIXER_A ? put_gated_attention_layer(x, l)
                                                                 : put_gdn_layer(x, l))
            return -1;
    return 0;
}

int export_tensors(stw_writer *w, const gdn_param_table *t, const float *P, export_arch arch, char *err,
                   size_t errlen) {
    export_ctx x = {w, t, P, err, errlen};
    return put_all(&x, arch);
}

const char *export_model_type(export_arch arch) { return arch_model_type[arch]; }
