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

/* Limits of the model settings: generous for any model this trainer can hold, and small enough
 * that every size derived from them fits its type. Each tensor stays below 2^31 elements because
 * kernels and BLAS calls index a tensor with int; the whole model below 2^36 parameters
 * (256 GiB in fp32) so an absurd setting is refused before any allocation is tried. */
#define GDN_MAX_VOCAB (1 << 24)
#define GDN_MAX_D_MODEL 65536
#define GDN_MAX_LAYERS 4096
#define GDN_MAX_HEADS 4096
#define GDN_MAX_HEAD_DIM 256
#define GDN_MAX_HEAD_V 512
#define GDN_MAX_D_FF (1 << 20)
#define GDN_MAX_TENSOR_ELEMS 2147483647ull
#define GDN_MAX_PARAMS (1ull << 36)

/* Value head dimension V. */
static inline int gdn_config_head_v(const gdn_config *c) { return c->head_dim * c->expand_v; }

/* Checks the fields (ranges above, then the tensor and model sizes, computed without
 * overflow); on error writes a message naming the field and the limit to err and returns -1. */
int gdn_config_validate(const gdn_config *c, char *err, int err_len);

#endif
