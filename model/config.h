/* Model configuration: the shape of a GDN language model. */
#ifndef GDN_CONFIG_H
#define GDN_CONFIG_H

#include <stddef.h>

#include "model/config_fields.h"

/* The longest mixer pattern (letters; a longer one is a per-layer list of a very deep model). */
#define GDN_MAX_MIXERS 256

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

#define GDN_CONFIG_MEMBER_(name, type, def, lo, hi, file, help) \
    GDN_CONFIG_CTYPE_##type name GDN_CONFIG_DIM_##type(hi);

/* The shape of the model, one member per line of model/config_fields.h (the help column says
 * what each is). mixers is the mixer of each layer (model/mixer.h): a pattern of kind letters
 * repeated to n_layers, layer l using mixers[l % strlen(mixers)]; "" means "G". */
typedef struct {
    GDN_CONFIG_FIELDS(GDN_CONFIG_MEMBER_)
} gdn_config;

/* The table of the fields, made from model/config_fields.h: what code that walks every field
 * reads (offset into gdn_config, default, range). */
typedef enum { GDN_FIELD_INT, GDN_FIELD_BOOL, GDN_FIELD_DOUBLE, GDN_FIELD_STR } gdn_field_type;

typedef struct {
    const char *name;
    gdn_field_type type;
    size_t offset;       /* in gdn_config */
    size_t size;         /* bytes of the member (STR: the buffer, terminator included) */
    double def;          /* default of a number */
    const char *def_str; /* default of a STR */
    double lo, hi;       /* range of a number; of a STR, its length */
    int optional;        /* checkpoints may lack it (file column OLD): then it is the default */
    const char *help;
} gdn_config_field;

#define GDN_CONFIG_COUNT_(...) +1
#define GDN_CONFIG_N_FIELDS (0 GDN_CONFIG_FIELDS(GDN_CONFIG_COUNT_))
extern const gdn_config_field gdn_config_fields[GDN_CONFIG_N_FIELDS];

/* A new run's model: every field at its default. */
void gdn_config_defaults(gdn_config *c);

/* The value of number field f of c as a double. */
double gdn_config_get_number(const gdn_config *c, const gdn_config_field *f);
/* The value of STR field f of c: its default when it is "". */
const char *gdn_config_get_str(const gdn_config *c, const gdn_config_field *f);
/* Field f of c as text: "%d", a double as "%.17g" (exact) or "%g", a STR as it is. */
void gdn_config_format(const gdn_config *c, const gdn_config_field *f, int exact, char *out,
                       size_t outlen);

/* Checks one field: its rule (model/config.c), else its range. On error writes a message
 * naming the field to err and returns -1. A STR that is "" is checked as it is (refused where
 * the field's rule or range needs letters). */
int gdn_config_check_field(const gdn_config *c, const gdn_config_field *f, char *err, int err_len);

/* Lists the fields that differ between a (in WHAT: "checkpoint", "config.json") and b (this
 * run) as "NAME: WHAT has A, this run has B", joined by "; ", at most max_fields of them (0: no
 * limit), into out. Returns how many fields differ (0: the same model). Numbers compare exactly
 * (a double bit for bit); mixers layer by layer ("G" and "GG" are the same model). */
int gdn_config_diff(const gdn_config *a, const gdn_config *b, const char *what, int max_fields,
                    char *out, size_t outlen);

/* Value head dimension V. */
static inline int gdn_config_head_v(const gdn_config *c) { return c->head_dim * c->expand_v; }

/* The shape of the attention layers (mixer A): key/value heads, head dimension, RoPE base, each
 * with 0 meaning its default (n_heads, head_dim, 10000). Query heads are n_heads. */
static inline int gdn_config_kv_heads(const gdn_config *c) {
    return c->n_kv_heads > 0 ? c->n_kv_heads : c->n_heads;
}
static inline int gdn_config_attn_dim(const gdn_config *c) {
    return c->attn_head_dim > 0 ? c->attn_head_dim : c->head_dim;
}
static inline double gdn_config_rope_theta(const gdn_config *c) {
    return c->rope_theta > 0 ? c->rope_theta : 10000.0;
}

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

/* The number of layers of c whose mixer is `mixer` (gdn_mixer). */
int gdn_config_count_mixer(const gdn_config *c, int mixer);

/* When a and b give some layer different mixers, writes "mixers: WHAT has \"A\", this run has
 * \"B\" (layer L: X vs Y)" to out and returns 1; else returns 0 and leaves out alone. */
int gdn_config_mixers_diff(const gdn_config *a, const gdn_config *b, const char *what, char *out,
                           size_t outlen);

/* Checks the fields (ranges above, then the tensor and model sizes, computed without
 * overflow); on error writes a message naming the field and the limit to err and returns -1. */
int gdn_config_validate(const gdn_config *c, char *err, int err_len);

#endif
