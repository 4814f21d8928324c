/* Validation of the model configuration. */
#include "model/config.h"

#include <stdio.h>
#include <string.h>

#include "model/mixer.h"

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
    /* "" is the zero-initialised default (G); anything else must be a valid pattern */
    if (c->mixers[0]) {
        char sub[400];
        if (memchr(c->mixers, 0, sizeof c->mixers) == NULL) {
            snprintf(err, (size_t)err_len, "mixers is not terminated");
            return -1;
        }
        if (gdn_mixers_check(c->mixers, c->n_layers, sub, sizeof sub)) {
            snprintf(err, (size_t)err_len, "%s", sub);
            return -1;
        }
    }
    size_t total;
    return gdn_param_count(c, &total, err, err_len);
}

int gdn_config_layer_mixer(const gdn_config *c, int l) {
    const char *p = gdn_config_mixers(c);
    size_t n = strnlen(p, GDN_MAX_MIXERS + 1);
    return l < 0 ? -1 : gdn_mixer_from_kind(p[(size_t)l % n]);
}

/* "G (gdn), D (deltanet), ..." */
static void list_kinds(char *out, size_t len) {
    size_t used = 0;
    out[0] = '\0';
    for (int v = 0; v < GDN_MIXER_COUNT && used < len; v++)
        used += (size_t)snprintf(out + used, len - used, "%s%c (%s)", v ? ", " : "",
                                 gdn_mixer_get(v)->kind, gdn_mixer_get(v)->name);
}

int gdn_mixers_check(const char *pattern, int n_layers, char *err, int err_len) {
    char kinds[128];
    list_kinds(kinds, sizeof kinds);
    size_t n = pattern ? strnlen(pattern, GDN_MAX_MIXERS + 1) : 0;
    if (n == 0) {
        snprintf(err, (size_t)err_len,
                 "mixers is empty: give a pattern of mixer letters such as \"G\" or \"GGGD\" "
                 "(repeated to n_layers); letters: %s", kinds);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (gdn_mixer_from_kind(pattern[i]) < 0) {
            unsigned char ch = (unsigned char)pattern[i];
            char shown[16];
            if (ch > 32 && ch < 127) snprintf(shown, sizeof shown, "'%c'", ch);
            else snprintf(shown, sizeof shown, "byte 0x%02x", ch);
            snprintf(err, (size_t)err_len,
                     "mixers: %s at position %zu is not a mixer; valid letters: %s", shown, i + 1,
                     kinds);
            return -1;
        }
    }
    if (n > GDN_MAX_MIXERS) {
        snprintf(err, (size_t)err_len, "mixers: the pattern is longer than %d letters",
                 GDN_MAX_MIXERS);
        return -1;
    }
    if (n_layers >= 1 && n > (size_t)n_layers) {
        snprintf(err, (size_t)err_len,
                 "mixers: the pattern has %zu letters but the model has only n_layers = %d: "
                 "give at most one letter per layer", n, n_layers);
        return -1;
    }
    return 0;
}

int gdn_config_same_mixers(const gdn_config *a, const gdn_config *b, int *layer) {
    int n = a->n_layers > b->n_layers ? a->n_layers : b->n_layers;
    if (n < 1) n = 1;
    *layer = -1;
    for (int l = 0; l < n; l++)
        if (gdn_config_layer_mixer(a, l) != gdn_config_layer_mixer(b, l)) {
            *layer = l;
            return 0;
        }
    return 1;
}

int gdn_config_mixers_diff(const gdn_config *a, const gdn_config *b, const char *what, char *out,
                           size_t outlen) {
    int l;
    if (gdn_config_same_mixers(a, b, &l)) return 0;
    const gdn_mixer_info *x = gdn_mixer_get(gdn_config_layer_mixer(a, l));
    const gdn_mixer_info *y = gdn_mixer_get(gdn_config_layer_mixer(b, l));
    snprintf(out, outlen, "mixers: %s has \"%.64s\", this run has \"%.64s\" (layer %d: %c vs %c)",
             what, gdn_config_mixers(a), gdn_config_mixers(b), l, x ? x->kind : '?',
             y ? y->kind : '?');
    return 1;
}
