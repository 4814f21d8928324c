/* The parameter table (names, shapes, offsets) and deterministic initialisation. */
#include "model/params.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/check.h"
#include "model/mixer.h"

typedef struct {
    gdn_param_table *t;
    int cap;
    char *err; /* the first size error; later tensors are skipped */
    int err_len, failed;
} table_builder;

/* Sizes are computed in size_t with overflow checks: a setting such as n_heads = 2^31 - 1 must
 * give a clear error, never a wrapped product and a short allocation. */
static size_t add_tensor(table_builder *b, const char *name, int ndim, size_t d0, size_t d1,
                         size_t d2, int no_decay, gdn_param_init init) {
    gdn_param_table *t = b->t;
    if (b->failed) return 0;
    size_t numel = d0, total;
    if ((ndim > 1 && __builtin_mul_overflow(numel, d1, &numel)) ||
        (ndim > 2 && __builtin_mul_overflow(numel, d2, &numel)) || numel > GDN_MAX_TENSOR_ELEMS) {
        snprintf(b->err, (size_t)b->err_len,
                 "tensor %s would have more than %llu elements (shape %zu x %zu x %zu): "
                 "reduce the model dimensions", name, GDN_MAX_TENSOR_ELEMS, d0,
                 ndim > 1 ? d1 : 1, ndim > 2 ? d2 : 1);
        b->failed = 1;
        return 0;
    }
    if (__builtin_add_overflow(t->total, numel, &total) || total > GDN_MAX_PARAMS) {
        snprintf(b->err, (size_t)b->err_len,
                 "the model would have more than %llu parameters (at tensor %s): reduce the "
                 "model dimensions", GDN_MAX_PARAMS, name);
        b->failed = 1;
        return 0;
    }
    if (t->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        gdn_param *np = realloc(t->p, (size_t)b->cap * sizeof *np);
        if (!np) GDN_DIE("out of memory building the parameter table");
        t->p = np;
    }
    gdn_param *p = &t->p[t->n++];
    memset(p, 0, sizeof *p);
    if (snprintf(p->name, sizeof p->name, "%s", name) >= (int)sizeof p->name)
        GDN_DIE("parameter name too long: %s", name);
    /* every factor is at most numel <= GDN_MAX_TENSOR_ELEMS, so it fits an int */
    p->ndim = ndim;
    p->shape[0] = (int)d0;
    p->shape[1] = ndim > 1 ? (int)d1 : 0;
    p->shape[2] = ndim > 2 ? (int)d2 : 0;
    p->numel = numel;
    p->offset = t->total;
    p->no_decay = no_decay;
    p->init = (int)init;
    t->total = total;
    return p->offset;
}

/* The sizes a block's shapes are written in (GDN_LAYER_TENSORS). */
enum { DIM_D, DIM_H, DIM_HK, DIM_HV, DIM_V, DIM_F, DIM_W, DIM_ONE, DIM_QW, DIM_KW, DIM_VW, DIM_OW,
       DIM_DA, N_DIMS };
enum { NEEDS_ALL, NEEDS_DELTA, NEEDS_DECAY, NEEDS_BETA, NEEDS_ATTN, NEEDS_BIAS, NEEDS_QKNORM, NEEDS_LIN };

typedef struct {
    const char *name;
    size_t field; /* offsetof(gdn_layer_offsets, ...) */
    int ndim, dim[3], no_decay, needs;
    gdn_param_init init;
} layer_tensor;

#define LAYER_ROW(f, name, nd, d0, d1, d2, nodecay, need, ini)                                     \
    {name, offsetof(gdn_layer_offsets, f), nd, {DIM_##d0, DIM_##d1, DIM_##d2}, nodecay, NEEDS_##need, \
     GDN_INIT_##ini},
static const layer_tensor layer_tensors[] = {GDN_LAYER_TENSORS(LAYER_ROW)};
#define N_LAYER_TENSORS (sizeof layer_tensors / sizeof layer_tensors[0])

static int mixer_has(const gdn_mixer_info *mx, const gdn_config *c, int needs) {
    switch (needs) {
    case NEEDS_ALL: return 1;
    case NEEDS_DELTA: return mx->is_delta;
    case NEEDS_DECAY: return mx->has_decay;
    case NEEDS_BETA: return mx->has_beta;
    case NEEDS_ATTN: return !mx->is_delta;
    case NEEDS_BIAS: return !mx->is_delta && c->qkv_bias;
    case NEEDS_QKNORM: return !mx->is_delta && c->qk_norm;
    case NEEDS_LIN: return mx == gdn_mixer_get(GDN_MIXER_S);
    default: return 0;
    }
}

/* The attention layers' shape (A, and S which has their tensors): n_heads a multiple of the kv
 * heads, an even head dimension. */
static int check_attention(const gdn_config *c, char *err, int err_len) {
    if (gdn_config_count_mixer(c, GDN_MIXER_A) + gdn_config_count_mixer(c, GDN_MIXER_S) == 0) return 0;
    const int hkv = gdn_config_kv_heads(c), da = gdn_config_attn_dim(c);
    if (c->n_kv_heads < 0 || c->attn_head_dim < 0) {
        snprintf(err, (size_t)err_len, "n_kv_heads and attn_head_dim must be >= 0 (0: n_heads, head_dim)");
        return -1;
    }
    if (c->n_heads % hkv) {
        snprintf(err, (size_t)err_len,
                 "n_kv_heads = %d does not divide n_heads = %d: attention layers need n_heads a "
                 "multiple of n_kv_heads", hkv, c->n_heads);
        return -1;
    }
    if (da % 2) {
        snprintf(err, (size_t)err_len,
                 "attention layers need an even head dimension for RoPE (attn_head_dim, or head_dim "
                 "when it is 0), got %d", da);
        return -1;
    }
    return 0;
}

static int build(gdn_param_table *t, const gdn_config *c, char *err, int err_len) {
    memset(t, 0, sizeof *t);
    t->cfg = *c;
    table_builder b = {t, 0, err, err_len, 0};
#define POSITIVE(field)                                                                    \
    if (c->field < 1) {                                                                    \
        snprintf(err, (size_t)err_len, #field " must be >= 1 (got %d)", c->field);          \
        return -1;                                                                         \
    }
    POSITIVE(vocab_size) POSITIVE(d_model) POSITIVE(n_layers) POSITIVE(n_heads)
    POSITIVE(head_dim) POSITIVE(expand_v) POSITIVE(d_ff) POSITIVE(conv_width)
#undef POSITIVE
    if (check_attention(c, err, err_len)) return -1;
    if (c->n_layers > GDN_MAX_LAYERS) {
        snprintf(err, (size_t)err_len, "n_layers must be at most %d (got %d)", GDN_MAX_LAYERS,
                 c->n_layers);
        return -1;
    }
    const size_t D = (size_t)c->d_model, H = (size_t)c->n_heads, K = (size_t)c->head_dim;
    const size_t V = (size_t)c->head_dim * (size_t)c->expand_v; /* < 2^62: both are ints */
    const size_t VOC = (size_t)c->vocab_size;
    size_t dims[N_DIMS] = {[DIM_D] = D, [DIM_H] = H, [DIM_V] = V, [DIM_F] = (size_t)c->d_ff,
                           [DIM_W] = (size_t)c->conv_width, [DIM_ONE] = 1};
    if (__builtin_mul_overflow(H, K, &dims[DIM_HK]) || __builtin_mul_overflow(H, V, &dims[DIM_HV])) {
        snprintf(err, (size_t)err_len, "n_heads x head_dim x expand_v overflows");
        return -1;
    }
    /* attention widths: every factor is at most GDN_MAX_HEADS x GDN_MAX_HEAD_DIM, no overflow */
    const size_t DA = (size_t)gdn_config_attn_dim(c), HKV = (size_t)gdn_config_kv_heads(c);
    dims[DIM_DA] = DA;
    char name[GDN_PARAM_NAME_MAX];
    t->embed = add_tensor(&b, "model.embeddings.weight", 2, VOC, D, 0, 0, GDN_INIT_NORMAL);
    if (b.failed) return -1;
    t->layer = GDN_CALLOC((size_t)c->n_layers, sizeof *t->layer);
    for (int l = 0; l < c->n_layers && !b.failed; l++) {
        gdn_layer_offsets *o = &t->layer[l];
        const gdn_mixer_info *mx = gdn_mixer_get(gdn_config_layer_mixer(c, l));
        if (!mx) {
            snprintf(err, (size_t)err_len, "mixers \"%.64s\" holds a letter that is no mixer",
                     c->mixers);
            return -1;
        }
        o->mixer = gdn_config_layer_mixer(c, l);
        dims[DIM_QW] = mx->is_delta ? dims[DIM_HK] : H * DA;
        dims[DIM_KW] = mx->is_delta ? dims[DIM_HK] : HKV * DA;
        dims[DIM_VW] = mx->is_delta ? dims[DIM_HV] : HKV * DA;
        dims[DIM_OW] = mx->is_delta ? dims[DIM_HV] : H * DA;
        for (size_t i = 0; i < N_LAYER_TENSORS; i++) {
            const layer_tensor *r = &layer_tensors[i];
            size_t *off = (size_t *)((char *)o + r->field);
            if (!mixer_has(mx, c, r->needs)) {
                *off = GDN_NO_TENSOR;
                continue;
            }
            snprintf(name, sizeof name, "model.layers.%d.%s", l, r->name);
            *off = add_tensor(&b, name, r->ndim, dims[r->dim[0]], dims[r->dim[1]], dims[r->dim[2]],
                              r->no_decay, r->init);
        }
    }
    t->final_norm = add_tensor(&b, "model.norm.weight", 1, D, 0, 0, 1, GDN_INIT_ONES);
    t->lm_head = c->tie_embeddings ? t->embed
                                   : add_tensor(&b, "lm_head.weight", 2, VOC, D, 0, 0, GDN_INIT_NORMAL);
    return b.failed ? -1 : 0;
}

int gdn_param_count(const gdn_config *c, size_t *total, char *err, int err_len) {
    gdn_param_table t;
    int r = build(&t, c, err, err_len);
    if (r == 0) *total = t.total;
    gdn_param_table_free(&t);
    return r;
}

void gdn_param_table_build(gdn_param_table *t, const gdn_config *c) {
    char err[512];
    if (build(t, c, err, sizeof err)) {
        gdn_param_table_free(t);
        GDN_DIE("invalid model: %s", err);
    }
}

void gdn_param_table_free(gdn_param_table *t) {
    free(t->p);
    free(t->layer);
    memset(t, 0, sizeof *t);
}

const gdn_param *gdn_param_find(const gdn_param_table *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->p[i].name, name) == 0) return &t->p[i];
    return NULL;
}

size_t gdn_param_matmul_count(const gdn_param_table *t) {
    size_t n = 0;
    for (int i = 0; i < t->n; i++) {
        const gdn_param *p = &t->p[i];
        if (p->ndim == 2 && p->offset != t->embed) n += p->numel;
    }
    /* A tied head multiplies by the embedding table. */
    if (t->cfg.tie_embeddings) n += (size_t)t->cfg.vocab_size * (size_t)t->cfg.d_model;
    return n;
}

/* ---- initialisation: a counter-based generator, so each tensor's values depend only on the
 * seed and the tensor index, never on threads or on the other tensors. ---------------------- */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) { /* in (0, 1) */
    return ((double)(splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double normal(uint64_t *s) {
    double u1 = uniform01(s), u2 = uniform01(s);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void gdn_params_init(float *params, const gdn_param_table *t, uint64_t seed) {
    const double std = 0.02, resid_std = 0.02 / sqrt(2.0 * t->cfg.n_layers);
    for (int i = 0; i < t->n; i++) {
        const gdn_param *p = &t->p[i];
        float *w = params + p->offset;
        uint64_t s = seed * 0x100000001B3ULL + (uint64_t)i * 0x9E3779B97F4A7C15ULL;
        switch ((gdn_param_init)p->init) {
        case GDN_INIT_ONES:
            for (size_t j = 0; j < p->numel; j++) w[j] = 1.0f;
            break;
        case GDN_INIT_ZEROS:
            for (size_t j = 0; j < p->numel; j++) w[j] = 0.0f;
            break;
        case GDN_INIT_CONV: {
            double bound = 1.0 / sqrt((double)t->cfg.conv_width);
            for (size_t j = 0; j < p->numel; j++) w[j] = (float)(bound * (2.0 * uniform01(&s) - 1.0));
            break;
        }
        case GDN_INIT_A_LOG:
            for (size_t j = 0; j < p->numel; j++) w[j] = (float)log(1.0 + 15.0 * uniform01(&s));
            break;
        case GDN_INIT_DT_BIAS:
            for (size_t j = 0; j < p->numel; j++) {
                double dt = exp(log(1e-3) + (log(1e-1) - log(1e-3)) * uniform01(&s));
                if (dt < 1e-4) dt = 1e-4;
                w[j] = (float)(dt + log(-expm1(-dt))); /* softplus^-1(dt) */
            }
            break;
        case GDN_INIT_NORMAL:
        case GDN_INIT_RESID: {
            double sd = p->init == GDN_INIT_RESID ? resid_std : std;
            for (size_t j = 0; j < p->numel; j++) w[j] = (float)(sd * normal(&s));
            break;
        }
        }
    }
}
