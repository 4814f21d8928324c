/* gdn distill init's mapping: the student's mixers and configuration, and the teacher's tensors
 * copied or reshaped into it (train/distill_init.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/check.h"
#include "model/mixer.h"
#include "train/distill_init.h"

static char layer_kind(const gdn_config *c, int l) { return gdn_mixer_get(gdn_config_layer_mixer(c, l))->kind; }

/* Marks the layers of the comma-separated list keep as softmax in letters. */
static int keep_layers(const gdn_config *t, const char *keep, char *letters, char *err, int err_len) {
    const char *p = keep;
    if (!*p) {
        snprintf(err, (size_t)err_len, "--keep-softmax: empty list (give layer indices such as 5,11)");
        return -1;
    }
    for (;;) {
        char *end;
        errno = 0;
        long l = strtol(p, &end, 10);
        if (end == p || errno || (*end && *end != ',') || *p == '+' || *p == ' ') {
            snprintf(err, (size_t)err_len, "--keep-softmax '%.200s': '%.40s' is not a layer index "
                     "(give comma-separated integers such as 5,11)", keep, p);
            return -1;
        }
        if (l < 0 || l >= t->n_layers) {
            snprintf(err, (size_t)err_len, "--keep-softmax: layer %ld is out of range: the teacher has %d "
                     "layers (0..%d)", l, t->n_layers, t->n_layers - 1);
            return -1;
        }
        if (layer_kind(t, (int)l) != 'A') {
            snprintf(err, (size_t)err_len, "--keep-softmax: layer %ld of the teacher is a '%c' layer, not "
                     "softmax attention (A): only softmax layers can be kept", l, layer_kind(t, (int)l));
            return -1;
        }
        letters[l] = 'A';
        if (!*end) return 0;
        p = end + 1;
    }
}

int distill_student_mixers(const gdn_config *t, const char *pattern, const char *keep,
                           char *letters, char *err, int err_len) {
    const int nL = t->n_layers;
    int n_attn = 0;
    for (int l = 0; l < nL; l++) {
        letters[l] = layer_kind(t, l);
        if (letters[l] == 'A') {
            n_attn++;
            letters[l] = 'G';
        }
    }
    letters[nL] = 0;
    if (!n_attn) {
        snprintf(err, (size_t)err_len, "the teacher has no softmax-attention layer (mixers \"%.260s\"): "
                 "there is nothing to convert; distill from a model with A layers (gdn import, or "
                 "gdn train --mixers A)", gdn_config_mixers(t));
        return -1;
    }
    if (keep && keep_layers(t, keep, letters, err, err_len)) return -1;
    if (pattern) {
        char sub[512];
        if (gdn_mixers_check(pattern, nL, sub, sizeof sub)) {
            snprintf(err, (size_t)err_len, "--mixers: %s", sub);
            return -1;
        }
        const size_t n = strlen(pattern);
        for (int l = 0; l < nL; l++) {
            const char want = pattern[(size_t)l % n], was = layer_kind(t, l);
            if (was != 'A' && want != was) {
                snprintf(err, (size_t)err_len, "--mixers \"%.260s\": layer %d is '%c' in the teacher and '%c' "
                         "in the pattern: only the teacher's softmax layers (A) can change", pattern, l,
                         was, want);
                return -1;
            }
            letters[l] = want;
        }
    }
    int converted = 0;
    for (int l = 0; l < nL; l++) converted += layer_kind(t, l) == 'A' && letters[l] != 'A';
    if (!converted) {
        snprintf(err, (size_t)err_len, "the student keeps every softmax layer of the teacher: it would be "
                 "the teacher itself (convert at least one layer)");
        return -1;
    }
    return 0;
}

int distill_student_config(const gdn_config *t, const char *letters, gdn_config *s, char *err,
                           int err_len) {
    const int Da = gdn_config_attn_dim(t);
    int has_delta = 0;
    for (int l = 0; l < t->n_layers; l++) /* S layers carry attention's shapes, like A */
        has_delta |= gdn_mixer_get(gdn_config_layer_mixer(t, l))->is_delta;
    /* A delta-rule layer's q/k are [H*head_dim, D] and v/o carry H*head_dim*expand_v; the
     * attention layer's q and o carry H*Da: the same width only with head_dim = Da, expand_v = 1.
     * The config has one head_dim, so the teacher's own delta-rule layers must already be so. */
    if (has_delta && (t->head_dim != Da || gdn_config_head_v(t) != Da)) {
        snprintf(err, (size_t)err_len, "the teacher's shapes cannot map: its delta-rule layers have "
                 "head_dim %d and value head dim %d, but a converted layer needs both equal to the "
                 "attention head dim %d (q_proj [n_heads*%d, d_model] becomes the delta rule's q_proj "
                 "and o_proj [d_model, n_heads*%d] its o_proj), and all delta-rule layers share one "
                 "head shape", t->head_dim, gdn_config_head_v(t), Da, Da, Da);
        return -1;
    }
    const int nL = t->n_layers;
    /* the shortest pattern that repeats to the layers: one whose length divides n_layers reads
     * best ("GGAG" rather than "GGA"); any shorter one only where that is too long to store */
    int period = 0;
    for (int pass = 0; pass < 2 && !period; pass++)
        for (int p = 1; p <= nL && !period; p++) {
            if (pass == 0 && (nL % p || p > GDN_MAX_MIXERS)) continue;
            if (pass == 1 && p > GDN_MAX_MIXERS) break;
            int ok = 1;
            for (int l = p; ok && l < nL; l++) ok = letters[l] == letters[l % p];
            if (ok) period = p;
        }
    if (!period) period = nL;
    if (period > GDN_MAX_MIXERS) {
        snprintf(err, (size_t)err_len, "the student's mixers do not repeat with a period of at most %d "
                 "layers (the longest pattern a configuration holds): choose kept layers that repeat",
                 GDN_MAX_MIXERS);
        return -1;
    }
    *s = *t;
    s->head_dim = Da;
    s->expand_v = 1;
    memcpy(s->mixers, letters, (size_t)period);
    s->mixers[period] = 0;
    char sub[512];
    if (gdn_config_validate(s, sub, sizeof sub)) {
        snprintf(err, (size_t)err_len, "the student's configuration is out of range: %s", sub);
        return -1;
    }
    return 0;
}

/* Copies n floats, checking the sizes agree (a mismatch is a bug of the mapping). */
static void copy_tensor(float *dst, const gdn_param *d, const float *src, const gdn_param *s) {
    if (d->numel != s->numel) GDN_DIE("distill init: %s has %zu elements in the student, %zu in the teacher",
                                      d->name, d->numel, s->numel);
    memcpy(dst, src, d->numel * sizeof *dst);
}

/* The layer of a tensor name "model.layers.L....", or -1. */
static int name_layer(const char *name) {
    int l = -1, n = 0;
    if (sscanf(name, "model.layers.%d.%n", &l, &n) == 1 && n > 0) return l;
    return -1;
}

/* Rows [H*Da, D] of the student from the teacher's [Hkv*Da, D]: query head h reads the key/value
 * head h / (H / Hkv), as the attention kernels group them. */
static void repeat_heads(float *dst, const float *src, int H, int Hkv, int Da, int D) {
    const int group = H / Hkv;
    for (int h = 0; h < H; h++)
        memcpy(dst + (size_t)h * Da * D, src + (size_t)(h / group) * Da * D, sizeof *dst * (size_t)Da * D);
}

void distill_decay_params(double d, double *A_log, double *dt_bias) {
    if (!(d >= DISTILL_DIST_MIN)) d = DISTILL_DIST_MIN; /* NaN too */
    if (d > DISTILL_DIST_MAX) d = DISTILL_DIST_MAX;
    *A_log = 0.0;
    *dt_bias = -log(d); /* softplus^-1(ln(1 + 1/d)) = ln(expm1(ln(1 + 1/d))) = ln(1/d) */
}

void distill_map_params(const gdn_param_table *tt, const float *tp, const gdn_param_table *st,
                        float *sp, const distill_init_opts *o) {
    const gdn_config *tc = &tt->cfg, *sc = &st->cfg;
    /* unchanged layers and the tensors outside the layers: every tensor by name */
    for (int i = 0; i < st->n; i++) {
        const gdn_param *d = &st->p[i];
        const int l = name_layer(d->name);
        if (l >= 0 && st->layer[l].mixer != tt->layer[l].mixer) continue;
        const gdn_param *s = gdn_param_find(tt, d->name);
        if (!s) GDN_DIE("distill init: the teacher has no tensor %s", d->name);
        copy_tensor(sp + d->offset, d, tp + s->offset, s);
    }
    const int D = sc->d_model, H = sc->n_heads, Da = gdn_config_attn_dim(tc), Hkv = gdn_config_kv_heads(tc);
    const int W = sc->conv_width;
    for (int l = 0; l < sc->n_layers; l++) {
        const gdn_layer_offsets *so = &st->layer[l], *to = &tt->layer[l];
        if (so->mixer == to->mixer) continue;
        const size_t DD = (size_t)D, F = (size_t)sc->d_ff, HD = (size_t)H * Da;
        memcpy(sp + so->attn_norm, tp + to->attn_norm, sizeof *sp * DD);
        memcpy(sp + so->mlp_norm, tp + to->mlp_norm, sizeof *sp * DD);
        memcpy(sp + so->gate_proj, tp + to->gate_proj, sizeof *sp * F * DD);
        memcpy(sp + so->up_proj, tp + to->up_proj, sizeof *sp * F * DD);
        memcpy(sp + so->down_proj, tp + to->down_proj, sizeof *sp * F * DD);
        memcpy(sp + so->q_proj, tp + to->q_proj, sizeof *sp * HD * DD);
        memcpy(sp + so->o_proj, tp + to->o_proj, sizeof *sp * HD * DD);
        repeat_heads(sp + so->k_proj, tp + to->k_proj, H, Hkv, Da, D);
        repeat_heads(sp + so->v_proj, tp + to->v_proj, H, Hkv, Da, D);
        /* silu(0) = 0 in the gated norm: the mixer's output is exactly zero until g_proj learns */
        if (o->gate == DISTILL_GATE_ZERO) memset(sp + so->g_proj, 0, sizeof *sp * HD * DD);
        if (o->gate == DISTILL_GATE_VALUE) /* g_proj and v_proj are both [H*Da, D] here */
            for (size_t i = 0; i < HD * DD; i++) sp[so->g_proj + i] = DISTILL_GATE_VALUE_SCALE * sp[so->v_proj + i];
        /* identity short convolutions (tap W-1 reads the current token): the copied q, k, v
         * reach the delta rule unchanged rather than mixed with random neighbours */
        const size_t convs[3] = {so->q_conv, so->k_conv, so->v_conv};
        for (int c = 0; c < 3 && o->conv_identity; c++) {
            float *w = sp + convs[c];
            memset(w, 0, sizeof *w * HD * (size_t)W);
            for (size_t ch = 0; ch < HD; ch++) w[ch * (size_t)W + (size_t)(W - 1)] = 1.0f;
        }
        if (o->dist && so->A_log != GDN_NO_TENSOR) {
            /* a_proj = 0: every token starts with the measured decay; training makes it depend
             * on the input (its gradient is not zero) */
            memset(sp + so->a_proj, 0, sizeof *sp * (size_t)H * DD);
            for (int h = 0; h < H; h++) {
                double A_log, dt_bias;
                distill_decay_params(o->dist[(size_t)l * H + h], &A_log, &dt_bias);
                sp[so->A_log + (size_t)h] = (float)A_log;
                sp[so->dt_bias + (size_t)h] = (float)dt_bias;
            }
        }
    }
}
