/* The mixers of the delta-rule family: one table row per kind, naming it (a letter for layer
 * patterns, a word for options) and saying which parts of the gated delta rule it keeps. With
 * S [K,V] the state and o_t = scale * S_t^T q_t in every kind:
 *   G gdn       S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T
 *   D deltanet  the same with g_t = 0
 *   M gla       S_t = exp(g_t) S_{t-1} + k_t v_t^T   (a scalar decay per head)
 *   L linear    S_t = S_{t-1} + k_t v_t^T
 * and one that is not of the family:
 *   A attention causal softmax attention with RoPE (docs/design.md section 2.7): no state,
 *               convolution or gates; its layers carry keys and values instead
 *   S linearized the training-free linearisation of softmax attention (docs/distillation.md,
 *               "The linearized mixer"): attention's tensors plus a balance factor per head,
 *               computed as a gated delta rule with centred keys and gates fixed by the position
 *               (model/cpu/linearized.c; CPU backend only)
 * The delta-rule kinds come first (0 .. GDN_MIXER_DELTA_COUNT - 1): they are the variants of the
 * delta-rule op (gdn_delta_shape.variant). The values are stable (0 = G, so a zero-initialised
 * shape is the gated delta rule); a new kind is one enum value and one table row. */
#ifndef GDN_MIXER_H
#define GDN_MIXER_H

#include <string.h>

typedef enum {
    GDN_MIXER_G = 0,
    GDN_MIXER_D,
    GDN_MIXER_M,
    GDN_MIXER_L,
    GDN_MIXER_A,
    GDN_MIXER_S,
    GDN_MIXER_COUNT
} gdn_mixer;

/* The kinds of the delta-rule family, the variants the delta-rule op takes: 0 .. this - 1. */
#define GDN_MIXER_DELTA_COUNT GDN_MIXER_A

typedef struct {
    char kind;        /* letter in a layer pattern such as "GGGD" */
    const char *name; /* word for options and files */
    int has_decay;    /* reads g (log-decay per token and head); else g = 0 */
    int has_beta;     /* reads beta (write strength); else the write is k v^T */
    int has_delta;    /* subtracts the state's prediction (I - beta k k^T); else adds k v^T */
    int is_delta;     /* of the delta-rule family (state, convolutions, output gate); 0: attention's
                       * tensors and layout (A and S) */
} gdn_mixer_info;

/* The row of mixer v, or NULL when v is not a mixer. */
static inline const gdn_mixer_info *gdn_mixer_get(int v) {
    static const gdn_mixer_info table[GDN_MIXER_COUNT] = {
        [GDN_MIXER_G] = {'G', "gdn", 1, 1, 1, 1},
        [GDN_MIXER_D] = {'D', "deltanet", 0, 1, 1, 1},
        [GDN_MIXER_M] = {'M', "gla", 1, 0, 0, 1},
        [GDN_MIXER_L] = {'L', "linear", 0, 0, 0, 1},
        [GDN_MIXER_A] = {'A', "attention", 0, 0, 0, 0},
        [GDN_MIXER_S] = {'S', "linearized", 0, 0, 0, 0},
    };
    return v >= 0 && v < GDN_MIXER_COUNT ? &table[v] : NULL;
}

/* The mixer with pattern letter kind, or -1. */
static inline int gdn_mixer_from_kind(char kind) {
    for (int v = 0; v < GDN_MIXER_COUNT; v++)
        if (gdn_mixer_get(v)->kind == kind) return v;
    return -1;
}

/* The mixer called name, or -1 (name may be NULL). */
static inline int gdn_mixer_from_name(const char *name) {
    for (int v = 0; name && v < GDN_MIXER_COUNT; v++)
        if (strcmp(gdn_mixer_get(v)->name, name) == 0) return v;
    return -1;
}

#endif
