/* Model configuration: the shape of a GDN language model. */
#ifndef GDN_CONFIG_H
#define GDN_CONFIG_H

typedef struct {
    int vocab_size;      /* tokens in the vocabulary */
    int d_model;         /* hidden size D */
    int n_layers;        /* decoder blocks */
    int n_heads;         /* GDN heads H */
    int head_dim;        /* key head dimension K (q and k) */
    int expand_v;        /* value head dimension V = expand_v * K */
    int d_ff;            /* SwiGLU inner size F */
    int conv_width;      /* short convolution width (4) */
    int chunk_size;      /* delta-rule chunk: 16, 32 or 64 */
    int tie_embeddings;  /* 1: LM head shares the embedding table */
    int allow_neg_eigval;/* 1: beta = 2*sigmoid (eigenvalues of the transition may be negative) */
    double norm_eps;     /* RMSNorm epsilon */
} gdn_config;

/* Value head dimension V. */
static inline int gdn_config_head_v(const gdn_config *c) { return c->head_dim * c->expand_v; }

/* Checks the fields; on error writes a message naming the field to err and returns -1. */
int gdn_config_validate(const gdn_config *c, char *err, int err_len);

#endif
