/* The parameter table: every tensor of the model in one flat fp32 (or fp64) allocation, with
 * Hugging Face / flash-linear-attention style dotted names, natural shapes and a flag for
 * tensors that take no weight decay. Offsets are the same for parameters, gradients and the
 * AdamW moments, so each of those is one flat buffer too. */
#ifndef GDN_PARAMS_H
#define GDN_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "model/config.h"

#define GDN_PARAM_NAME_MAX 64

typedef struct {
    char name[GDN_PARAM_NAME_MAX]; /* e.g. "model.layers.3.attn.q_proj.weight" */
    size_t offset;                 /* elements from the start of the flat buffer */
    size_t numel;
    int ndim;
    int shape[3];
    int no_decay;                  /* norms, A_log, dt_bias (and biases) */
    int init;                      /* gdn_param_init: how gdn_params_init fills it */
} gdn_param;

/* How a tensor is initialised (gdn_params_init): N(0, 0.02); N(0, 0.02 / sqrt(2 n_layers)) for
 * outputs into the residual stream; ones (norms); U(-1/sqrt(W), 1/sqrt(W)) (convolutions);
 * log U(1, 16) (A_log); softplus^-1 of dt ~ logU(1e-3, 1e-1) (dt_bias); zeros (biases). */
typedef enum {
    GDN_INIT_NORMAL = 0,
    GDN_INIT_RESID,
    GDN_INIT_ONES,
    GDN_INIT_CONV,
    GDN_INIT_A_LOG,
    GDN_INIT_DT_BIAS,
    GDN_INIT_ZEROS
} gdn_param_init;

/* Offset of a tensor the layer's mixer does not have (see gdn_layer_offsets). */
#define GDN_NO_TENSOR ((size_t)-1)

/* The tensors of one block, in the order of the flat buffer: adding a tensor is one line here.
 * X(field, name, ndim, d0, d1, d2, no_decay, needs, init)
 *   field     its member of gdn_layer_offsets
 *   name      after "model.layers.L." (Hugging Face / flash-linear-attention names)
 *   d0..d2    shape (the first ndim count) in the block's sizes: D d_model, H n_heads,
 *             HK n_heads x head_dim, HV n_heads x V, V the value head dim, F d_ff,
 *             W conv_width, ONE 1; and the widths of the mixer's projections, which depend on
 *             its kind: QW (queries), KW (keys), VW (values), OW (into o_proj) are HK, HK, HV, HV
 *             for the delta-rule kinds and H x Da, Hkv x Da, Hkv x Da, H x Da for attention
 *             (Hkv n_kv_heads, Da attn_head_dim, model/config.h); DA is Da
 *   no_decay  1: AdamW applies no weight decay (norms, biases, A_log, dt_bias, log_lambda)
 *   needs     ALL: every mixer has it; DELTA: the delta-rule kinds (is_delta, model/mixer.h);
 *             DECAY: mixers with a decay (has_decay); BETA: mixers with a write strength
 *             (has_beta); ATTN: attention's layout (A and S); BIAS: those with qkv_bias;
 *             QKNORM: those with qk_norm; LIN: the linearized mixer (S) only. A layer
 *             whose mixer lacks it has offset GDN_NO_TENSOR and no entry
 *             in the table, so adding a row another kind lacks leaves that kind's table as it was.
 *   init      how gdn_params_init fills it: GDN_INIT_<init> (gdn_param_init above) */
/* clang-format off */
#define GDN_LAYER_TENSORS(X)                                                  \
    X(attn_norm, "attn_norm.weight",     1, D,  ONE, ONE, 1, ALL, ONES)       \
    X(q_proj,    "attn.q_proj.weight",   2, QW, D,   ONE, 0, ALL, NORMAL)     \
    X(k_proj,    "attn.k_proj.weight",   2, KW, D,   ONE, 0, ALL, NORMAL)     \
    X(v_proj,    "attn.v_proj.weight",   2, VW, D,   ONE, 0, ALL, NORMAL)     \
    X(q_bias,    "attn.q_proj.bias",     1, QW, ONE, ONE, 1, BIAS, ZEROS)     \
    X(k_bias,    "attn.k_proj.bias",     1, KW, ONE, ONE, 1, BIAS, ZEROS)     \
    X(v_bias,    "attn.v_proj.bias",     1, VW, ONE, ONE, 1, BIAS, ZEROS)     \
    X(q_norm,    "attn.q_norm.weight",   1, DA, ONE, ONE, 1, QKNORM, ONES)    \
    X(k_norm,    "attn.k_norm.weight",   1, DA, ONE, ONE, 1, QKNORM, ONES)    \
    X(log_lambda,"attn.log_lambda",      1, H,  ONE, ONE, 1, LIN, ZEROS)      \
    X(a_proj,    "attn.a_proj.weight",   2, H,  D,   ONE, 0, DECAY, NORMAL)   \
    X(b_proj,    "attn.b_proj.weight",   2, H,  D,   ONE, 0, BETA, NORMAL)    \
    X(g_proj,    "attn.g_proj.weight",   2, HV, D,   ONE, 0, DELTA, NORMAL)   \
    X(q_conv,    "attn.q_conv1d.weight", 3, HK, ONE, W,   0, DELTA, CONV)     \
    X(k_conv,    "attn.k_conv1d.weight", 3, HK, ONE, W,   0, DELTA, CONV)     \
    X(v_conv,    "attn.v_conv1d.weight", 3, HV, ONE, W,   0, DELTA, CONV)     \
    X(A_log,     "attn.A_log",           1, H,  ONE, ONE, 1, DECAY, A_LOG)    \
    X(dt_bias,   "attn.dt_bias",         1, H,  ONE, ONE, 1, DECAY, DT_BIAS)  \
    X(o_norm,    "attn.o_norm.weight",   1, V,  ONE, ONE, 1, DELTA, ONES)     \
    X(o_proj,    "attn.o_proj.weight",   2, D,  OW,  ONE, 0, ALL, RESID)      \
    X(mlp_norm,  "mlp_norm.weight",      1, D,  ONE, ONE, 1, ALL, ONES)       \
    X(gate_proj, "mlp.gate_proj.weight", 2, F,  D,   ONE, 0, ALL, NORMAL)     \
    X(up_proj,   "mlp.up_proj.weight",   2, F,  D,   ONE, 0, ALL, NORMAL)     \
    X(down_proj, "mlp.down_proj.weight", 2, D,  F,   ONE, 0, ALL, RESID)
/* clang-format on */

/* Offset of a tensor the layer's mixer does not have. */
#define GDN_NO_TENSOR ((size_t)-1)

/* Offsets of one block's tensors inside the flat buffer (GDN_LAYER_TENSORS). */
#define GDN_LAYER_MEMBER_(field, ...) size_t field;
typedef struct {
    int mixer; /* gdn_mixer of this layer */
    GDN_LAYER_TENSORS(GDN_LAYER_MEMBER_)
} gdn_layer_offsets;

typedef struct {
    gdn_config cfg;
    int n;                     /* number of tensors */
    gdn_param *p;              /* [n] */
    size_t total;              /* elements in the flat buffer */
    size_t embed;              /* [vocab, D] */
    size_t final_norm;         /* [D] */
    size_t lm_head;            /* [vocab, D]; equals embed when tied */
    gdn_layer_offsets *layer;  /* [n_layers] */
} gdn_param_table;

/* Builds the table of config c. A configuration whose sizes exceed the limits of model/config.h
 * (or overflow) is a fatal error naming the tensor: validate input with gdn_config_validate
 * first, which reports the same problems as a message. */
void gdn_param_table_build(gdn_param_table *t, const gdn_config *c);
/* The number of parameters of config c, computed with overflow checks: 0 and *total set, or -1
 * with a message naming the tensor or setting and the limit in err. */
int gdn_param_count(const gdn_config *c, size_t *total, char *err, int err_len);
void gdn_param_table_free(gdn_param_table *t);
/* The tensor of that name, or NULL. */
const gdn_param *gdn_param_find(const gdn_param_table *t, const char *name);
/* Parameters used in matrix products (LM head included, embedding lookup excluded): for MFU. */
size_t gdn_param_matmul_count(const gdn_param_table *t);

/* Initialise all parameters from a seed (deterministic, independent of threads), each tensor as
 * its init says (gdn_param_init; dt is clamped at 1e-4). */
void gdn_params_init(float *params, const gdn_param_table *t, uint64_t seed);

#endif
