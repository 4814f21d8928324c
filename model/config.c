/* Validation of the model configuration. */
#include "model/config.h"

#include <stdio.h>

#include "model/params.h"

int gdn_config_validate(const gdn_config *c, char *err, int err_len) {
#define GDN_REQUIRE(cond, ...)                   \
    do {                                         \
        if (!(cond)) {                           \
            snprintf(err, (size_t)err_len, __VA_ARGS__); \
            return -1;                           \
        }                                        \
    } while (0)
    GDN_REQUIRE(c->vocab_size >= 2 && c->vocab_size <= GDN_MAX_VOCAB,
                "vocab_size must be in 2..%d (got %d)", GDN_MAX_VOCAB, c->vocab_size);
    GDN_REQUIRE(c->d_model >= 1 && c->d_model <= GDN_MAX_D_MODEL,
                "d_model must be in 1..%d (got %d)", GDN_MAX_D_MODEL, c->d_model);
    GDN_REQUIRE(c->n_layers >= 1 && c->n_layers <= GDN_MAX_LAYERS,
                "n_layers must be in 1..%d (got %d)", GDN_MAX_LAYERS, c->n_layers);
    GDN_REQUIRE(c->n_heads >= 1 && c->n_heads <= GDN_MAX_HEADS,
                "n_heads must be in 1..%d (got %d)", GDN_MAX_HEADS, c->n_heads);
    GDN_REQUIRE(c->head_dim >= 1 && c->head_dim <= GDN_MAX_HEAD_DIM,
                "head_dim must be in 1..%d (got %d)", GDN_MAX_HEAD_DIM, c->head_dim);
    /* compared by division: head_dim * expand_v may overflow int */
    GDN_REQUIRE(c->expand_v >= 1 && c->expand_v <= GDN_MAX_HEAD_V / c->head_dim,
                "expand_v must be >= 1 with head_dim*expand_v <= %d (got %d)", GDN_MAX_HEAD_V,
                c->expand_v);
    GDN_REQUIRE(c->d_ff >= 1 && c->d_ff <= GDN_MAX_D_FF, "d_ff must be in 1..%d (got %d)",
                GDN_MAX_D_FF, c->d_ff);
    GDN_REQUIRE(c->conv_width >= 1 && c->conv_width <= 8, "conv_width must be in 1..8 (got %d)",
                c->conv_width);
    GDN_REQUIRE(c->chunk_size == 16 || c->chunk_size == 32 || c->chunk_size == 64,
                "chunk_size must be 16, 32 or 64 (got %d)", c->chunk_size);
    GDN_REQUIRE(c->tie_embeddings == 0 || c->tie_embeddings == 1,
                "tie_embeddings must be 0 or 1 (got %d)", c->tie_embeddings);
    GDN_REQUIRE(c->allow_neg_eigval == 0 || c->allow_neg_eigval == 1,
                "allow_neg_eigval must be 0 or 1 (got %d)", c->allow_neg_eigval);
    GDN_REQUIRE(c->norm_eps > 0 && c->norm_eps < 1, "norm_eps must be in (0, 1) (got %g)",
                c->norm_eps);
#undef GDN_REQUIRE
    size_t total;
    return gdn_param_count(c, &total, err, err_len);
}
