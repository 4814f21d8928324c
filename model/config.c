/* Validation of the model configuration. */
#include "model/config.h"

#include <stdio.h>

int gdn_config_validate(const gdn_config *c, char *err, int err_len) {
#define GDN_REQUIRE(cond, ...)                   \
    do {                                         \
        if (!(cond)) {                           \
            snprintf(err, (size_t)err_len, __VA_ARGS__); \
            return -1;                           \
        }                                        \
    } while (0)
    GDN_REQUIRE(c->vocab_size >= 2, "vocab_size must be >= 2 (got %d)", c->vocab_size);
    GDN_REQUIRE(c->d_model >= 1, "d_model must be >= 1 (got %d)", c->d_model);
    GDN_REQUIRE(c->n_layers >= 1, "n_layers must be >= 1 (got %d)", c->n_layers);
    GDN_REQUIRE(c->n_heads >= 1, "n_heads must be >= 1 (got %d)", c->n_heads);
    GDN_REQUIRE(c->head_dim >= 1 && c->head_dim <= 256, "head_dim must be in 1..256 (got %d)",
                c->head_dim);
    GDN_REQUIRE(c->expand_v >= 1 && c->head_dim * c->expand_v <= 512,
                "expand_v must be >= 1 with head_dim*expand_v <= 512 (got %d)", c->expand_v);
    GDN_REQUIRE(c->d_ff >= 1, "d_ff must be >= 1 (got %d)", c->d_ff);
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
    return 0;
}
