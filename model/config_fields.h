/* The fields of the model configuration (gdn_config), in one list: adding a model setting is one
 * line here. Everything that holds, reads, writes, checks, prints or compares a model
 * configuration is made from this list or from the table model/config.c builds from it: the
 * struct (model/config.h), the defaults, the ranges that validation checks, the run settings and
 * config.json (train/run_config.c), the /model_config attributes of checkpoints
 * (io/checkpoint.c), `gdn inspect`, and the comparison of two configurations.
 *
 * X(name, type, default, min, max, file, help)
 *   type      INT: int; BOOL: int, 0 or 1 (a JSON boolean); DOUBLE: double; STR: char[max + 1]
 *   default   the value of a new run
 *   min, max  the inclusive range of a number; of a STR, its length in characters. Finer rules
 *             (a set of values, a limit that depends on other fields) are written out in
 *             model/config.c (field_rule) and take the place of the range check.
 *   file      REQ: every checkpoint has the attribute; OLD: checkpoints written before the field
 *             existed lack it, and such a file means the default (which must be their behaviour)
 *   help      one line for `gdn train --help`
 * Checkpoints store INT and BOOL as int64 attributes, DOUBLE as float64, STR as a UTF-8 string,
 * each named after its field. A STR field that is "" (a zero-initialised config) means its
 * default. The order is the order of the struct, of config.json and of every listing. */
#ifndef GDN_CONFIG_FIELDS_H
#define GDN_CONFIG_FIELDS_H

/* clang-format off */
#define GDN_CONFIG_FIELDS(X) GDN_CONFIG_FIELDS_WITH(GDN_CONFIG_FIELD_PLAIN_, X)
#define GDN_CONFIG_FIELD_PLAIN_(X, ...) X(__VA_ARGS__)

/* The list itself; W(A, ...) is called for every field with A passed through, so that a user
 * such as CKPT_MODEL_INT_FIELDS can hand its own macro along. */
#define GDN_CONFIG_FIELDS_WITH(W, A)                                                                   \
    W(A, vocab_size, INT, 256, 2, GDN_MAX_VOCAB, REQ, "tokens in the vocabulary (256 for byte-level text)") \
    W(A, d_model, INT, 128, 1, GDN_MAX_D_MODEL, REQ, "hidden size")                                    \
    W(A, n_layers, INT, 2, 1, GDN_MAX_LAYERS, REQ, "decoder blocks")                                   \
    W(A, n_heads, INT, 2, 1, GDN_MAX_HEADS, REQ, "GDN heads")                                          \
    W(A, head_dim, INT, 32, 1, GDN_MAX_HEAD_DIM, REQ, "key head dimension")                            \
    W(A, expand_v, INT, 2, 1, GDN_MAX_HEAD_V, REQ, "value head dimension = expand_v * head_dim")      \
    W(A, d_ff, INT, 384, 1, GDN_MAX_D_FF, REQ, "SwiGLU inner size")                                    \
    W(A, conv_width, INT, 4, 1, 8, REQ, "short convolution width")                                     \
    W(A, chunk_size, INT, 64, 16, 64, REQ, "delta-rule chunk size (16, 32, 64)")                       \
    W(A, tie_embeddings, BOOL, 0, 0, 1, REQ, "LM head shares the embedding table")                     \
    W(A, allow_neg_eigval, BOOL, 0, 0, 1, REQ, "beta = 2*sigmoid instead of sigmoid")                  \
    W(A, norm_eps, DOUBLE, 1e-6, 0, 1, REQ, "RMSNorm epsilon")                                         \
    W(A, mixers, STR, "G", 1, GDN_MAX_MIXERS, OLD,                                                     \
      "mixer of each layer: letters G (gated delta rule), D (DeltaNet), M (gated linear "             \
      "attention), L (linear attention), A (softmax attention), repeated to n_layers (e.g. GGGA)") \
    W(A, n_kv_heads, INT, 0, 0, GDN_MAX_HEADS, OLD,                                                  \
      "key/value heads of attention layers (0 = n_heads; n_heads must be a multiple)")               \
    W(A, attn_head_dim, INT, 0, 0, GDN_MAX_HEAD_DIM, OLD,                                            \
      "head dimension of attention layers (0 = head_dim; even, for RoPE)")                           \
    W(A, rope_theta, DOUBLE, 10000, 0, 1e12, OLD, "RoPE base of attention layers (0 = 10000)")       \
    W(A, qk_norm, BOOL, 0, 0, 1, OLD, "attention layers: per-head RMSNorm of q and k (Qwen3)")       \
    W(A, qkv_bias, BOOL, 0, 0, 1, OLD, "attention layers: biases on the q, k, v projections (Qwen2)")
/* clang-format on */

/* The C type of a field: GDN_CONFIG_CTYPE_##type name GDN_CONFIG_DIM_##type(max). */
#define GDN_CONFIG_CTYPE_INT int
#define GDN_CONFIG_CTYPE_BOOL int
#define GDN_CONFIG_CTYPE_DOUBLE double
#define GDN_CONFIG_CTYPE_STR char
#define GDN_CONFIG_DIM_INT(max)
#define GDN_CONFIG_DIM_BOOL(max)
#define GDN_CONFIG_DIM_DOUBLE(max)
#define GDN_CONFIG_DIM_STR(max) [(max) + 1]

#endif
