/* Model configuration: the shape of a GDN language model. */
#ifndef GDN_CONFIG_H
#define GDN_CONFIG_H

#include <stddef.h>

/* The longest mixer pattern (letters; a longer one is a per-layer list of a very deep model). */
#define GDN_MAX_MIXERS 256

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
    /* Mixer of each layer (model/mixer.h): a pattern of kind letters repeated to n_layers, layer
     * l using mixers[l % strlen(mixers)]. "" (a zero-initialised config) means "G". */
    char mixers[GDN_MAX_MIXERS + 1];
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

/* The mixer pattern of c: c->mixers, or "G" when it is empty. */
static inline const char *gdn_config_mixers(const gdn_config *c) {
    return c->mixers[0] ? c->mixers : "G";
}

/* The mixer (gdn_mixer, model/mixer.h) of layer l; -1 when the pattern holds a letter that is no
 * mixer (gdn_config_validate refuses such a config). */
int gdn_config_layer_mixer(const gdn_config *c, int l);

/* Checks a mixer pattern for a model of n_layers layers: 1..min(n_layers, GDN_MAX_MIXERS) letters,
 * each the kind of a mixer. On error writes a message naming the bad letter and the valid ones to
 * err and returns -1. The empty pattern is refused here (settings must name one). */
int gdn_mixers_check(const char *pattern, int n_layers, char *err, int err_len);

/* 1 when a and b give every layer the same mixer (so "G" and "GG" are the same model), else 0;
 * *layer is set to the first layer that differs (-1 when they agree). */
int gdn_config_same_mixers(const gdn_config *a, const gdn_config *b, int *layer);

/* 1 when every layer of c uses the gated delta rule (G), the one mixer of the CUDA kernels
 * (inline: the CUDA sources call it too). */
static inline int gdn_config_all_gdn(const gdn_config *c) {
    for (const char *p = gdn_config_mixers(c); *p; p++)
        if (*p != 'G') return 0;
    return 1;
}

/* When a and b give some layer different mixers, writes "mixers: WHAT has \"A\", this run has
 * \"B\" (layer L: X vs Y)" to out and returns 1; else returns 0 and leaves out alone. */
int gdn_config_mixers_diff(const gdn_config *a, const gdn_config *b, const char *what, char *out,
                           size_t outlen);

/* Checks the fields (ranges above, then the tensor and model sizes, computed without
 * overflow); on error writes a message naming the field and the limit to err and returns -1. */
int gdn_config_validate(const gdn_config *c, char *err, int err_len);

#endif
