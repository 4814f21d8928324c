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
} gdn_param;

/* Offset of a tensor the layer's mixer does not have (see gdn_layer_offsets). */
#define GDN_NO_TENSOR ((size_t)-1)

/* Offsets of one block's tensors inside the flat buffer. A mixer without decay (model/mixer.h)
 * has no a_proj, A_log, dt_bias; one without beta no b_proj: those are GDN_NO_TENSOR. */
typedef struct {
    int mixer;                    /* gdn_mixer of this layer */
    size_t attn_norm;             /* [D] */
    size_t q_proj, k_proj;        /* [H*K, D] */
    size_t v_proj, g_proj;        /* [H*V, D] */
    size_t a_proj, b_proj;        /* [H, D] */
    size_t q_conv, k_conv;        /* [H*K, 1, W] */
    size_t v_conv;                /* [H*V, 1, W] */
    size_t A_log, dt_bias;        /* [H] */
    size_t o_norm;                /* [V] */
    size_t o_proj;                /* [D, H*V] */
    size_t mlp_norm;              /* [D] */
    size_t gate_proj, up_proj;    /* [F, D] */
    size_t down_proj;             /* [D, F] */
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

/* Initialise all parameters from a seed (deterministic, independent of threads):
 * embeddings and projections N(0, 0.02), residual outputs (o_proj, down_proj) scaled by
 * 1/sqrt(2 n_layers), norms 1, convs U(-1/sqrt(W), 1/sqrt(W)), A_log = log U(1,16),
 * dt_bias = softplus^-1(dt), dt ~ logU(1e-3, 1e-1) clamped at 1e-4. */
void gdn_params_init(float *params, const gdn_param_table *t, uint64_t seed);

#endif
