/* Which mixers (model/mixer.h) the CUDA model runs: the delta-rule family G, D, M, L and softmax
 * attention A (with an attention head dim the CUDA kernels take: 64 or 128). Plain C without CUDA
 * headers, so that every build can refuse a pattern before choosing the backend. */
#ifndef GDN_CUDA_MIXERS_H
#define GDN_CUDA_MIXERS_H

#include <stdio.h>
#include <string.h>

#include "model/config.h"
#include "model/mixer.h"

/* 1 when the CUDA model runs mixer v (a gdn_mixer), else 0. A kind added to model/mixer.h is
 * refused here until the CUDA model implements it. */
static inline int gdn_cuda_has_mixer(int v) {
    return v == GDN_MIXER_G || v == GDN_MIXER_D || v == GDN_MIXER_M || v == GDN_MIXER_L || v == GDN_MIXER_A;
}

/* The attention head dims of the CUDA attention kernels (model/cuda/attention_cuda.h). */
static inline int gdn_cuda_attn_dim_ok(int d) { return d == 64 || d == 128; }

/* The first layer of c whose mixer the CUDA model does not run (or an attention layer whose head
 * dim it does not take), or -1; with a message naming the layer and its kind in err (err_len > 0)
 * when there is one. */
static inline int gdn_cuda_unsupported_layer(const gdn_config *c, char *err, size_t err_len) {
    for (int l = 0; l < c->n_layers; l++) {
        const int v = gdn_config_layer_mixer(c, l);
        if (v == GDN_MIXER_A && !gdn_cuda_attn_dim_ok(gdn_config_attn_dim(c))) {
            if (err && err_len)
                snprintf(err, err_len, "mixers %.48s: layer %d is A (attention) with attn_head_dim %d, which the CUDA "
                         "model does not implement (its attention kernels take 64 or 128)", gdn_config_mixers(c), l,
                         gdn_config_attn_dim(c));
            return l;
        }
        if (gdn_cuda_has_mixer(v)) continue;
        const gdn_mixer_info *mx = gdn_mixer_get(v);
        const char *pat = gdn_config_mixers(c);
        if (err && err_len)
            snprintf(err, err_len, "mixers %.48s: layer %d is %c (%s), which the CUDA model does not implement", pat,
                     l, pat[l % (int)strlen(pat)], mx ? mx->name : "not a mixer");
        return l;
    }
    return -1;
}

#endif
