/* Validation of the model configuration. */
#include "model/config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "model/mixer.h"

#include "model/params.h"

/* ---- the field table ------------------------------------------------------------------------ */

#define GDN_FIELD_TYPE_INT GDN_FIELD_INT
#define GDN_FIELD_TYPE_BOOL GDN_FIELD_BOOL
#define GDN_FIELD_TYPE_DOUBLE GDN_FIELD_DOUBLE
#define GDN_FIELD_TYPE_STR GDN_FIELD_STR
#define DEF_NUM_INT(d) d, NULL
#define DEF_NUM_BOOL(d) d, NULL
#define DEF_NUM_DOUBLE(d) d, NULL
#define DEF_NUM_STR(d) 0, d
#define FILE_REQ 0
#define FILE_OLD 1
#define ROW(name, type, def, lo, hi, file, help)                                                   \
    {#name, GDN_FIELD_TYPE_##type, offsetof(gdn_config, name), sizeof(((gdn_config *)0)->name),     \
     DEF_NUM_##type(def), lo, hi, FILE_##file, help},

const gdn_config_field gdn_config_fields[GDN_CONFIG_N_FIELDS] = {GDN_CONFIG_FIELDS(ROW)};

void gdn_config_defaults(gdn_config *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < GDN_CONFIG_N_FIELDS; i++) {
        const gdn_config_field *f = &gdn_config_fields[i];
        char *dst = (char *)c + f->offset;
        switch (f->type) {
        case GDN_FIELD_INT:
        case GDN_FIELD_BOOL: *(int *)dst = (int)f->def; break;
        case GDN_FIELD_DOUBLE: *(double *)dst = f->def; break;
        case GDN_FIELD_STR: snprintf(dst, f->size, "%s", f->def_str); break;
        }
    }
}

double gdn_config_get_number(const gdn_config *c, const gdn_config_field *f) {
    const char *src = (const char *)c + f->offset;
    return f->type == GDN_FIELD_DOUBLE ? *(const double *)src
           : f->type == GDN_FIELD_STR  ? 0.0
                                       : (double)*(const int *)src;
}

const char *gdn_config_get_str(const gdn_config *c, const gdn_config_field *f) {
    const char *s = (const char *)c + f->offset;
    return s[0] ? s : f->def_str;
}

void gdn_config_format(const gdn_config *c, const gdn_config_field *f, int exact, char *out,
                       size_t outlen) {
    const char *src = (const char *)c + f->offset;
    switch (f->type) {
    case GDN_FIELD_INT:
    case GDN_FIELD_BOOL: snprintf(out, outlen, "%d", *(const int *)src); break;
    case GDN_FIELD_DOUBLE: snprintf(out, outlen, exact ? "%.17g" : "%g", *(const double *)src); break;
    case GDN_FIELD_STR: snprintf(out, outlen, "%.*s", (int)(f->size - 1), src); break;
    }
}

/* The finer rule of a field, where its range is not the whole story: 1 when f has one (its
 * verdict in *r, a message in err), 0 when the range decides. */
static int field_rule(const gdn_config *c, const gdn_config_field *f, int *r, char *err,
                      int err_len) {
    char sub[400];
    *r = -1;
    switch (f->offset) {
    case offsetof(gdn_config, expand_v):
        /* compared by division: head_dim * expand_v may overflow int */
        if (c->expand_v >= 1 && c->head_dim >= 1 && c->expand_v <= GDN_MAX_HEAD_V / c->head_dim)
            *r = 0;
        else
            snprintf(err, (size_t)err_len,
                     "expand_v must be >= 1 with head_dim*expand_v <= %d (got %d)", GDN_MAX_HEAD_V,
                     c->expand_v);
        return 1;
    case offsetof(gdn_config, chunk_size):
        if (c->chunk_size == 16 || c->chunk_size == 32 || c->chunk_size == 64) *r = 0;
        else snprintf(err, (size_t)err_len, "chunk_size must be 16, 32 or 64 (got %d)", c->chunk_size);
        return 1;
    case offsetof(gdn_config, norm_eps):
        if (c->norm_eps > 0 && c->norm_eps < 1) *r = 0;
        else snprintf(err, (size_t)err_len, "norm_eps must be in (0, 1) (got %g)", c->norm_eps);
        return 1;
    case offsetof(gdn_config, mixers):
        if (gdn_mixers_check(c->mixers, c->n_layers, sub, sizeof sub) == 0) *r = 0;
        else snprintf(err, (size_t)err_len, "%s", sub);
        return 1;
    default: return 0;
    }
}

int gdn_config_check_field(const gdn_config *c, const gdn_config_field *f, char *err, int err_len) {
    const char *src = (const char *)c + f->offset;
    if (f->type == GDN_FIELD_STR && memchr(src, 0, f->size) == NULL) {
        snprintf(err, (size_t)err_len, "%s is not terminated", f->name);
        return -1;
    }
    int r;
    if (field_rule(c, f, &r, err, err_len)) return r;
    if (f->type == GDN_FIELD_STR) {
        size_t n = strlen(src);
        if (n >= (size_t)f->lo && n <= (size_t)f->hi) return 0;
        snprintf(err, (size_t)err_len, "%s must have %.0f to %.0f characters (got %zu)", f->name,
                 f->lo, f->hi, n);
        return -1;
    }
    double v = gdn_config_get_number(c, f);
    if (v >= f->lo && v <= f->hi) return 0; /* false for NaN */
    if (f->type == GDN_FIELD_BOOL)
        snprintf(err, (size_t)err_len, "%s must be 0 or 1 (got %d)", f->name, *(const int *)src);
    else if (f->type == GDN_FIELD_INT)
        snprintf(err, (size_t)err_len, "%s must be in %.0f..%.0f (got %d)", f->name, f->lo, f->hi,
                 *(const int *)src);
    else
        snprintf(err, (size_t)err_len, "%s must be in [%g, %g] (got %g)", f->name, f->lo, f->hi, v);
    return -1;
}

int gdn_config_validate(const gdn_config *c, char *err, int err_len) {
    for (int i = 0; i < GDN_CONFIG_N_FIELDS; i++) {
        const gdn_config_field *f = &gdn_config_fields[i];
        /* a STR that is "" is the zero-initialised default */
        if (f->type == GDN_FIELD_STR && ((const char *)c + f->offset)[0] == '\0') continue;
        if (gdn_config_check_field(c, f, err, err_len)) return -1;
    }
    size_t total;
    return gdn_param_count(c, &total, err, err_len);
}

int gdn_config_diff(const gdn_config *a, const gdn_config *b, const char *what, int max_fields,
                    char *out, size_t outlen) {
    size_t len = 0;
    int n = 0;
    out[0] = '\0';
    for (int i = 0; i < GDN_CONFIG_N_FIELDS; i++) {
        const gdn_config_field *f = &gdn_config_fields[i];
        char item[700], va[300], vb[300];
        if (f->offset == offsetof(gdn_config, mixers)) {
            if (!gdn_config_mixers_diff(a, b, what, item, sizeof item)) continue;
        } else if (f->type == GDN_FIELD_STR) {
            if (!strcmp(gdn_config_get_str(a, f), gdn_config_get_str(b, f))) continue;
            snprintf(item, sizeof item, "%s: %s has \"%.250s\", this run has \"%.250s\"", f->name,
                     what, gdn_config_get_str(a, f), gdn_config_get_str(b, f));
        } else {
            if (!memcmp((const char *)a + f->offset, (const char *)b + f->offset, f->size)) continue;
            gdn_config_format(a, f, 1, va, sizeof va);
            gdn_config_format(b, f, 1, vb, sizeof vb);
            snprintf(item, sizeof item, "%s: %.64s has %s, this run has %s", f->name, what, va, vb);
        }
        if (max_fields <= 0 || n < max_fields) {
            if (len < outlen)
                len += (size_t)snprintf(out + len, outlen - len, "%s%s", n ? "; " : "", item);
        }
        n++;
    }
    return n;
}

int gdn_config_layer_mixer(const gdn_config *c, int l) {
    const char *p = gdn_config_mixers(c);
    size_t n = strnlen(p, GDN_MAX_MIXERS + 1);
    return l < 0 ? -1 : gdn_mixer_from_kind(p[(size_t)l % n]);
}

int gdn_config_count_mixer(const gdn_config *c, int mixer) {
    int n = 0;
    for (int l = 0; l < c->n_layers; l++) n += gdn_config_layer_mixer(c, l) == mixer;
    return n;
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
