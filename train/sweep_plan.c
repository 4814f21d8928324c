/* A sweep file expanded into runs (train/sweep.h): read, check, expand, resolve each run's
 * settings exactly as gdn train resolves them. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/dataset.h"
#include "io/json.h"
#include "model/mixer.h"
#include "train/sweep.h"

/* A message "WHERE: field 'F': WHAT" for the value v (or its object). */
static int bad(char *err, size_t errlen, const io_json *v, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int bad(char *err, size_t errlen, const io_json *v, const char *field, const char *fmt, ...) {
    char where[512];
    io_json_where(v, where, sizeof where);
    int n = snprintf(err, errlen, "%s: field '%s': ", where, field);
    if (n < 0 || (size_t)n >= errlen) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

/* A list of numbers (a lone number counts as a list of one): count in *n, at most max. */
static int get_numbers(const io_json *obj, const char *key, double *out, int max, int *n, int required,
                       char *err, size_t errlen) {
    const io_json *v = io_json_get(obj, key);
    *n = 0;
    if (!v) {
        if (required) return bad(err, errlen, obj, key, "missing; give a list of numbers, e.g. [1, 2]");
        return 0;
    }
    if (v->type == IO_JSON_NUMBER) {
        out[0] = v->number;
        *n = 1;
        return 0;
    }
    if (v->type != IO_JSON_ARRAY || v->n_items == 0)
        return bad(err, errlen, v, key, "must be a non-empty list of numbers, found %s%s",
                   v->type == IO_JSON_ARRAY ? "an empty " : "a ", v->type == IO_JSON_ARRAY ? "list" : io_json_type_name(v->type));
    if (v->n_items > (size_t)max)
        return bad(err, errlen, v, key, "has %zu entries; at most %d", v->n_items, max);
    for (size_t i = 0; i < v->n_items; i++) {
        if (v->items[i].type != IO_JSON_NUMBER || !isfinite(v->items[i].number))
            return bad(err, errlen, &v->items[i], key, "entry %zu must be a finite number, found %s", i,
                       io_json_type_name(v->items[i].type));
        out[i] = v->items[i].number;
    }
    *n = (int)v->n_items;
    return 0;
}

static int is_positive_int(double x, double hi) { return x >= 1 && x <= hi && x == floor(x); }

/* A number field in [lo, hi] (absent: *out keeps its default). */
static int get_range(const io_json *obj, const char *key, double lo, double hi, double *out, char *err,
                     size_t errlen) {
    const io_json *v = io_json_get(obj, key);
    if (!v) return 0;
    if (v->type != IO_JSON_NUMBER || !(v->number >= lo && v->number <= hi))
        return bad(err, errlen, v, key, "must be a number from %g to %g", lo, hi);
    *out = v->number;
    return 0;
}

/* Sets key of the JSON object being built (text) from one parsed value. */
static void jw_member(io_jw *w, const char *key, const io_json *v) {
    io_jw_key(w, key);
    io_jw_value(w, v);
}

/* One size: its name and its model settings as JSON members (written into w). */
typedef struct {
    char name[64];
    const io_json *explicit_obj; /* an explicit size, or NULL */
    int d_model, n_layers, n_heads, head_dim, expand_v, d_ff;
} size_spec;

static const char *const sweep_keys[] = {"name", "corpus", "base", "sizes", "tokens", "tokens_per_param",
                                         "mixers", "seeds", "lr", "warmup", "throughput", NULL};
static const char *const corpus_keys[] = {"data", "val_tokens", "tokenizer", "vocab_size", "max_epochs", NULL};
static const char *const rule_keys[] = {"d_model", "n_layers", "aspect", "head_dim", "expand_v", "ffn_mult", NULL};
static const char *const lr_keys[] = {"rule", "base", "base_d_model", "values", "min_ratio", NULL};
/* run settings the sweep itself sets: refused in base (and in explicit sizes, but for the model's) */
static const char *const owned_keys[] = {"out", "steps", "seed", "lr", "lr_min", "warmup_steps", "decay_steps",
                                         "mixers", "data", "val_tokens", "tokenizer", "vocab_size", "resume",
                                         "init_from", NULL};
static const char *const size_model_keys[] = {"d_model", "n_layers", "n_heads", "head_dim", "expand_v", "d_ff", NULL};

static int in_list(const char *k, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(k, list[i])) return 1;
    return 0;
}

/* Every key of obj a gdn train setting (the keys of a resolved configuration). */
static int check_run_keys(const io_json *obj, const char *extra, char *err, size_t errlen) {
    static gdn_run_config rc;
    char e[512];
    if (gdn_run_config_from_json_text(&rc, "{}", e, sizeof e)) {
        snprintf(err, errlen, "%s", e);
        return -1;
    }
    io_jw w;
    io_jw_init(&w, 0);
    gdn_run_config_to_json(&rc, &w);
    io_json *all = io_json_parse(io_jw_text(&w), w.len, "settings", e, sizeof e);
    io_jw_free(&w);
    const char *keys[128];
    size_t n = 0;
    for (size_t i = 0; all && i < all->n_items && n < 126; i++) keys[n++] = all->items[i].key;
    if (extra) keys[n++] = extra;
    keys[n] = NULL;
    int r = all ? io_json_check_keys(obj, keys, err, (int)errlen) : -1;
    if (!all) snprintf(err, errlen, "%s", e);
    io_json_free(all);
    return r;
}

static int check_name(const char *s, size_t max) {
    size_t n = strlen(s);
    if (n == 0 || n >= max) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.') return 0;
    return s[0] != '.';
}

static int check_run_keys(const io_json *obj, const char *extra, char *err, size_t errlen);

static int parse_sizes(const io_json *root, size_spec **out, int *n_out, char *err, size_t errlen) {
    const io_json *s = io_json_get(root, "sizes");
    *out = NULL;
    *n_out = 0;
    if (!s) return bad(err, errlen, root, "sizes", "missing; give a rule {\"d_model\": [..], \"n_layers\": [..]} or a list of model settings");
    if (s->type == IO_JSON_ARRAY) {
        if (s->n_items == 0 || s->n_items > GDN_SWEEP_MAX_LIST)
            return bad(err, errlen, s, "sizes", "must list 1 to %d sizes (found %zu)", GDN_SWEEP_MAX_LIST, s->n_items);
        size_spec *z = calloc(s->n_items, sizeof *z);
        if (!z) return bad(err, errlen, s, "sizes", "out of memory");
        for (size_t i = 0; i < s->n_items; i++) {
            const io_json *e = &s->items[i];
            if (e->type != IO_JSON_OBJECT) {
                free(z);
                return bad(err, errlen, e, "sizes", "entry %zu must be an object of model settings, found %s", i, io_json_type_name(e->type));
            }
            z[i].explicit_obj = e;
            if (check_run_keys(e, "name", err, errlen)) {
                free(z);
                return -1;
            }
            const char *name = NULL;
            const io_json *nm = io_json_get(e, "name");
            if (nm && (nm->type != IO_JSON_STRING || !check_name(nm->string, 40))) {
                free(z);
                return bad(err, errlen, nm, "sizes.name", "must be 1 to 39 letters, digits, '-', '_' or '.'");
            }
            if (nm) name = nm->string;
            for (size_t k = 0; k < e->n_items; k++) {
                const char *key = e->items[k].key;
                if (!strcmp(key, "name")) continue;
                if (in_list(key, owned_keys)) {
                    free(z);
                    return bad(err, errlen, &e->items[k], key, "is set by the sweep, not by a size (see docs/scaling.md)");
                }
            }
            double dm = 0, nl = 0;
            const io_json *v = io_json_get(e, "d_model"), *l = io_json_get(e, "n_layers");
            if (v && v->type == IO_JSON_NUMBER) dm = v->number;
            if (l && l->type == IO_JSON_NUMBER) nl = l->number;
            if (!is_positive_int(dm, GDN_MAX_D_MODEL) || !is_positive_int(nl, GDN_MAX_LAYERS)) {
                free(z);
                return bad(err, errlen, e, "sizes", "entry %zu needs whole numbers d_model (1..%d) and n_layers (1..%d)",
                           i, GDN_MAX_D_MODEL, GDN_MAX_LAYERS);
            }
            z[i].d_model = (int)dm;
            z[i].n_layers = (int)nl;
            if (name) snprintf(z[i].name, sizeof z[i].name, "%s", name);
            else snprintf(z[i].name, sizeof z[i].name, "d%dl%d", z[i].d_model, z[i].n_layers);
        }
        *out = z;
        *n_out = (int)s->n_items;
        return 0;
    }
    if (s->type != IO_JSON_OBJECT)
        return bad(err, errlen, s, "sizes", "must be a rule object or a list of model settings, found %s", io_json_type_name(s->type));
    if (io_json_check_keys(s, rule_keys, err, (int)errlen)) return -1;
    double dm[GDN_SWEEP_MAX_LIST], nl[GDN_SWEEP_MAX_LIST];
    int ndm = 0, nnl = 0;
    if (get_numbers(s, "d_model", dm, GDN_SWEEP_MAX_LIST, &ndm, 1, err, errlen)) return -1;
    if (get_numbers(s, "n_layers", nl, GDN_SWEEP_MAX_LIST, &nnl, 0, err, errlen)) return -1;
    double aspect = 0, head_dim = 32, expand_v = 2, ffn_mult = 3;
    if (get_range(s, "aspect", 1, GDN_MAX_D_MODEL, &aspect, err, errlen) ||
        get_range(s, "head_dim", 1, GDN_MAX_HEAD_DIM, &head_dim, err, errlen) ||
        get_range(s, "expand_v", 1, 16, &expand_v, err, errlen) ||
        get_range(s, "ffn_mult", 0.25, 64, &ffn_mult, err, errlen))
        return -1;
    if (head_dim != floor(head_dim) || expand_v != floor(expand_v))
        return bad(err, errlen, s, "sizes", "head_dim and expand_v must be whole numbers");
    if ((nnl > 0) == (aspect > 0))
        return bad(err, errlen, s, "sizes", "give either n_layers (a list as long as d_model, or one number) or aspect (d_model per layer)");
    if (nnl > 1 && nnl != ndm)
        return bad(err, errlen, s, "n_layers", "has %d entries but d_model has %d; give one per width or a single number", nnl, ndm);
    size_spec *z = calloc((size_t)ndm, sizeof *z);
    if (!z) return bad(err, errlen, s, "sizes", "out of memory");
    for (int i = 0; i < ndm; i++) {
        double layers = aspect > 0 ? fmax(1.0, round(dm[i] / aspect)) : nl[nnl > 1 ? i : 0];
        if (!is_positive_int(dm[i], GDN_MAX_D_MODEL) || !is_positive_int(layers, GDN_MAX_LAYERS)) {
            free(z);
            return bad(err, errlen, s, "sizes", "width %g with %g layers: d_model must be a whole number from 1 to %d and "
                       "n_layers from 1 to %d", dm[i], layers, GDN_MAX_D_MODEL, GDN_MAX_LAYERS);
        }
        z[i].d_model = (int)dm[i];
        z[i].n_layers = (int)layers;
        z[i].head_dim = (int)head_dim;
        z[i].expand_v = (int)expand_v;
        /* value heads span the width: n_heads x head_dim x expand_v = d_model (at least one head) */
        z[i].n_heads = (int)fmax(1.0, floor(dm[i] / (head_dim * expand_v)));
        z[i].d_ff = 8 * (int)ceil(ffn_mult * dm[i] / 8.0); /* a multiple of 8 */
        snprintf(z[i].name, sizeof z[i].name, "d%dl%d", z[i].d_model, z[i].n_layers);
    }
    *out = z;
    *n_out = ndm;
    return 0;
}

/* "20k", "1.5M", "3G": a budget for names (no '+' or 'e'). */
static void tokens_label(int64_t t, char *out, size_t n) {
    const char *suffix[] = {"", "k", "M", "G", "T", "P"};
    double x = (double)t;
    int s = 0;
    while (x >= 1000 && s < 5) {
        x /= 1000;
        s++;
    }
    snprintf(out, n, "%.3g%s", x, suffix[s]);
    if (strchr(out, 'e')) snprintf(out, n, "%lld", (long long)t);
}

/* Resolves one run's settings: the JSON object text through gdn train's own reader (unknown
 * keys, ranges), then every setting through its command-line resolution (the model's rules). */
static int resolve(gdn_run_config *rc, const char *text, const char *source, const char *run, char *err,
                   size_t errlen) {
    char e[1024];
    if (gdn_run_config_from_json_text(rc, text, e, sizeof e)) {
        snprintf(err, errlen, "%s: run %s: %s", source, run, e);
        return -1;
    }
    io_jw w;
    io_jw_init(&w, 0);
    gdn_run_config_to_json(rc, &w);
    io_json *all = io_json_parse(io_jw_text(&w), w.len, "resolved", e, sizeof e);
    io_jw_free(&w);
    if (!all) {
        snprintf(err, errlen, "%s: run %s: %s", source, run, e);
        return -1;
    }
    char **argv = calloc(all->n_items + 2, sizeof *argv);
    int argc = 0, failed = !argv;
    if (argv) argv[argc++] = strdup("train");
    for (size_t i = 0; i < all->n_items && !failed; i++) {
        const io_json *v = &all->items[i];
        io_jw t; /* numbers and booleans as JSON text (exact), strings as they are */
        io_jw_init(&t, 0);
        if (v->type != IO_JSON_STRING) io_jw_value(&t, v);
        const char *val = v->type == IO_JSON_STRING ? v->string : io_jw_text(&t);
        size_t need = strlen(v->key) + strlen(val) + 4;
        argv[argc] = malloc(need);
        if (!argv[argc]) failed = 1;
        else snprintf(argv[argc++], need, "--%s=%s", v->key, val);
        io_jw_free(&t);
    }
    int r = failed ? -1 : gdn_run_config_parse(rc, argc, argv, e, sizeof e);
    if (r != 0) {
        snprintf(err, errlen, "%s: run %s: %s", source, run, failed ? "out of memory" : r == 1 ? "unexpected --help" : e);
        failed = 1;
    }
    for (int i = 0; i < argc; i++) free(argv[i]);
    free(argv);
    io_json_free(all);
    return failed ? -1 : 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static int cmp_runs(const void *a, const void *b) {
    const gdn_sweep_run *x = a, *y = b;
    if (x->flops != y->flops) return x->flops < y->flops ? -1 : 1;
    return strcmp(x->name, y->name);
}

typedef struct {
    const char *source;
    const io_json *root, *corpus, *base, *lr;
    size_spec *sizes;
    int n_sizes;
    double budgets[GDN_SWEEP_MAX_LIST], seeds[GDN_SWEEP_MAX_LIST], lrs[GDN_SWEEP_MAX_LIST];
    int n_budgets, per_param, n_seeds, n_lrs;
    const io_json *mixers;
    double lr_base, lr_base_d, min_ratio, warmup;
} plan_in;

/* The settings text of one run. */
static void run_text(const plan_in *p, const size_spec *z, const char *mixer, double seed, double lr, int64_t steps,
                     const char *name, io_jw *w) {
    io_jw_init(w, 0);
    io_jw_begin_object(w);
    if (p->base) /* an explicit size's own settings win over base's */
        for (size_t i = 0; i < p->base->n_items; i++)
            if (!z->explicit_obj || !io_json_get(z->explicit_obj, p->base->items[i].key))
                jw_member(w, p->base->items[i].key, &p->base->items[i]);
    if (p->corpus)
        for (size_t i = 0; i < p->corpus->n_items; i++)
            if (strcmp(p->corpus->items[i].key, "max_epochs")) jw_member(w, p->corpus->items[i].key, &p->corpus->items[i]);
    if (z->explicit_obj) {
        for (size_t i = 0; i < z->explicit_obj->n_items; i++)
            if (strcmp(z->explicit_obj->items[i].key, "name"))
                jw_member(w, z->explicit_obj->items[i].key, &z->explicit_obj->items[i]);
    } else {
        io_jw_kv_int(w, "d_model", z->d_model);
        io_jw_kv_int(w, "n_layers", z->n_layers);
        io_jw_kv_int(w, "n_heads", z->n_heads);
        io_jw_kv_int(w, "head_dim", z->head_dim);
        io_jw_kv_int(w, "expand_v", z->expand_v);
        io_jw_kv_int(w, "d_ff", z->d_ff);
    }
    io_jw_kv_string(w, "mixers", mixer);
    io_jw_kv_int(w, "seed", (long long)seed);
    io_jw_kv_number(w, "lr", lr);
    io_jw_kv_number(w, "lr_min", lr * p->min_ratio);
    io_jw_kv_int(w, "steps", steps);
    io_jw_kv_int(w, "warmup_steps", (long long)ceil(p->warmup * (double)steps));
    char out[GDN_SWEEP_NAME_MAX + 8];
    snprintf(out, sizeof out, "runs/%s", name);
    io_jw_kv_string(w, "out", out);
    io_jw_end_object(w);
}

static int read_top(plan_in *p, gdn_sweep *sw, char *err, size_t errlen) {
    const io_json *root = p->root;
    if (root->type != IO_JSON_OBJECT) return bad(err, errlen, root, "(top)", "the sweep must be a JSON object");
    if (io_json_check_keys(root, sweep_keys, err, (int)errlen)) return -1;
    const io_json *nm = io_json_get(root, "name");
    if (!nm || nm->type != IO_JSON_STRING || !check_name(nm->string, 64))
        return bad(err, errlen, nm ? nm : root, "name", "%s; give 1 to 63 letters, digits, '-', '_' or '.'",
                   nm ? "is not a valid name" : "missing");
    snprintf(sw->name, sizeof sw->name, "%s", nm->string);
    p->corpus = io_json_get(root, "corpus");
    if (!p->corpus || p->corpus->type != IO_JSON_OBJECT)
        return bad(err, errlen, p->corpus ? p->corpus : root, "corpus",
                   "missing or not an object; give {\"data\": SHARDS, \"val_tokens\": N, ...}");
    if (io_json_check_keys(p->corpus, corpus_keys, err, (int)errlen)) return -1;
    const io_json *data = io_json_get(p->corpus, "data");
    if (!data || data->type != IO_JSON_STRING || !data->string[0])
        return bad(err, errlen, data ? data : p->corpus, "corpus.data", "must name the training text or token shards");
    sw->max_epochs = 1.0;
    if (get_range(p->corpus, "max_epochs", 1e-6, 1e6, &sw->max_epochs, err, errlen)) return -1;
    p->base = io_json_get(root, "base");
    if (p->base) {
        if (p->base->type != IO_JSON_OBJECT)
            return bad(err, errlen, p->base, "base", "must be an object of gdn train settings");
        if (check_run_keys(p->base, NULL, err, errlen)) return -1;
    }
    if (parse_sizes(root, &p->sizes, &p->n_sizes, err, errlen)) return -1;
    /* a size rule sets the model's shape; explicit sizes override base's values */
    for (size_t i = 0; p->base && i < p->base->n_items; i++) {
        const char *k = p->base->items[i].key;
        if (in_list(k, owned_keys) || (!p->sizes[0].explicit_obj && in_list(k, size_model_keys)))
            return bad(err, errlen, &p->base->items[i], k, "is set by the sweep (%s), not in base",
                       in_list(k, size_model_keys) ? "the sizes rule" : "corpus, mixers, seeds, lr or tokens");
    }
    const io_json *tk = io_json_get(root, "tokens"), *tpp = io_json_get(root, "tokens_per_param");
    if ((tk != NULL) == (tpp != NULL))
        return bad(err, errlen, root, "tokens", "give exactly one of tokens (budgets) and tokens_per_param (multiples of N)");
    p->per_param = tpp != NULL;
    if (get_numbers(root, p->per_param ? "tokens_per_param" : "tokens", p->budgets, GDN_SWEEP_MAX_LIST,
                    &p->n_budgets, 1, err, errlen))
        return -1;
    for (int i = 0; i < p->n_budgets; i++)
        if (!(p->budgets[i] > 0 && p->budgets[i] <= 1e15))
            return bad(err, errlen, tk ? tk : tpp, p->per_param ? "tokens_per_param" : "tokens",
                       "entry %d is %g; budgets must be from 1 to 1e15", i, p->budgets[i]);
    p->mixers = io_json_get(root, "mixers");
    if (!p->mixers || p->mixers->type != IO_JSON_ARRAY || p->mixers->n_items == 0 || p->mixers->n_items > 64)
        return bad(err, errlen, p->mixers ? p->mixers : root, "mixers",
                   "must be a list of 1 to 64 mixer patterns, e.g. [\"G\", \"A\", \"GGGA\"]");
    for (size_t i = 0; i < p->mixers->n_items; i++) {
        const io_json *m = &p->mixers->items[i];
        char e[256];
        if (m->type != IO_JSON_STRING || strlen(m->string) != m->string_len ||
            gdn_mixers_check(m->string, GDN_MAX_MIXERS, e, sizeof e))
            return bad(err, errlen, m, "mixers", "entry %zu: %s", i,
                       m->type != IO_JSON_STRING ? "must be a string of mixer letters (G, D, M, L, A)" : e);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(p->mixers->items[j].string, m->string))
                return bad(err, errlen, m, "mixers", "pattern \"%s\" is listed twice", m->string);
    }
    p->seeds[0] = 1;
    p->n_seeds = 1;
    if (io_json_get(root, "seeds") && get_numbers(root, "seeds", p->seeds, 64, &p->n_seeds, 1, err, errlen)) return -1;
    for (int i = 0; i < p->n_seeds; i++) {
        if (!(fabs(p->seeds[i]) < 9e15 && p->seeds[i] == floor(p->seeds[i])))
            return bad(err, errlen, root, "seeds", "entry %d must be a whole number", i);
        for (int j = 0; j < i; j++)
            if (p->seeds[j] == p->seeds[i]) return bad(err, errlen, root, "seeds", "seed %g is listed twice", p->seeds[i]);
    }
    p->warmup = 0.02;
    if (get_range(root, "warmup", 0, 1, &p->warmup, err, errlen)) return -1;
    return 0;
}

static int read_lr(plan_in *p, gdn_sweep *sw, char *err, size_t errlen) {
    const io_json *lr = io_json_get(p->root, "lr");
    if (!lr || lr->type != IO_JSON_OBJECT)
        return bad(err, errlen, lr ? lr : p->root, "lr",
                   "missing or not an object; give {\"rule\": \"width\", \"base\": 3e-3, \"base_d_model\": 128} or "
                   "{\"rule\": \"grid\", \"values\": [1e-3, 3e-3]}");
    if (io_json_check_keys(lr, lr_keys, err, (int)errlen)) return -1;
    const io_json *rule = io_json_get(lr, "rule");
    if (!rule || rule->type != IO_JSON_STRING || (strcmp(rule->string, "width") && strcmp(rule->string, "grid")))
        return bad(err, errlen, rule ? rule : lr, "lr.rule", "must be \"width\" or \"grid\"");
    snprintf(sw->lr_rule, sizeof sw->lr_rule, "%s", rule->string);
    p->min_ratio = 0.1;
    if (get_range(lr, "min_ratio", 0, 1, &p->min_ratio, err, errlen)) return -1;
    if (!strcmp(rule->string, "width")) {
        if (io_json_get(lr, "values")) return bad(err, errlen, lr, "lr.values", "belongs to rule \"grid\"");
        p->lr_base = 0;
        p->lr_base_d = 0;
        if (get_range(lr, "base", 1e-12, 10, &p->lr_base, err, errlen) ||
            get_range(lr, "base_d_model", 1, GDN_MAX_D_MODEL, &p->lr_base_d, err, errlen))
            return -1;
        if (p->lr_base <= 0 || p->lr_base_d <= 0)
            return bad(err, errlen, lr, "lr", "rule \"width\" needs base (the lr at base_d_model) and base_d_model");
        p->n_lrs = 1;
        return 0;
    }
    if (io_json_get(lr, "base") || io_json_get(lr, "base_d_model"))
        return bad(err, errlen, lr, "lr", "base and base_d_model belong to rule \"width\"; rule \"grid\" takes values");
    if (get_numbers(lr, "values", p->lrs, 32, &p->n_lrs, 1, err, errlen)) return -1;
    for (int i = 0; i < p->n_lrs; i++)
        if (!(p->lrs[i] > 0 && p->lrs[i] <= 10))
            return bad(err, errlen, lr, "lr.values", "entry %d is %g; learning rates must be in (0, 10]", i, p->lrs[i]);
    return 0;
}

int gdn_sweep_set_throughput(gdn_sweep *sw, const char *mixers, double tokens_per_s) {
    const gdn_sweep_run *ref = NULL; /* runs are sorted: the first of the pattern is its cheapest */
    for (int i = 0; i < sw->n_runs && !ref; i++)
        if (!strcmp(gdn_config_mixers(&sw->runs[i].rc.model), mixers)) ref = &sw->runs[i];
    if (!ref || !(tokens_per_s > 0)) return -1;
    const double flops_per_s = tokens_per_s * ref->fl.per_token;
    for (int i = 0; i < sw->n_runs; i++)
        if (!strcmp(gdn_config_mixers(&sw->runs[i].rc.model), mixers))
            sw->runs[i].hours = sw->runs[i].flops / flops_per_s / 3600.0;
    return 0;
}

/* Throughput: tokens/s of each mixer's cheapest run -> FLOP/s -> hours of every run. */
static int apply_throughput(const plan_in *p, gdn_sweep *sw, char *err, size_t errlen) {
    const io_json *tp = io_json_get(p->root, "throughput");
    for (int i = 0; i < sw->n_runs; i++) sw->runs[i].hours = NAN;
    if (!tp) return 0;
    if (tp->type != IO_JSON_NUMBER && tp->type != IO_JSON_OBJECT)
        return bad(err, errlen, tp, "throughput", "must be tokens/s (a number) or {\"PATTERN\": tokens/s, ...}");
    if (tp->type == IO_JSON_OBJECT)
        for (size_t k = 0; k < tp->n_items; k++) {
            int found = 0;
            for (size_t m = 0; m < p->mixers->n_items; m++) found |= !strcmp(tp->items[k].key, p->mixers->items[m].string);
            if (!found) return bad(err, errlen, &tp->items[k], "throughput", "'%s' is not one of the sweep's mixers", tp->items[k].key);
        }
    for (size_t m = 0; m < p->mixers->n_items; m++) {
        const char *pat = p->mixers->items[m].string;
        const io_json *v = tp->type == IO_JSON_NUMBER ? tp : io_json_get(tp, pat);
        if (!v) return bad(err, errlen, tp, "throughput", "has no entry for mixer \"%s\"", pat);
        if (v->type != IO_JSON_NUMBER || !(v->number > 0 && v->number < 1e15))
            return bad(err, errlen, v, "throughput", "must be a positive number of tokens/s");
        gdn_sweep_set_throughput(sw, pat, v->number);
    }
    sw->has_throughput = 1;
    return 0;
}

static int expand(plan_in *p, gdn_sweep *sw, char *err, size_t errlen) {
    const int64_t total = (int64_t)p->n_sizes * p->n_budgets * (int64_t)p->mixers->n_items * p->n_seeds * p->n_lrs;
    if (total > GDN_SWEEP_MAX_RUNS)
        return bad(err, errlen, p->root, "(top)", "%lld runs (sizes x budgets x mixers x seeds x learning rates); at most %d",
                   (long long)total, GDN_SWEEP_MAX_RUNS);
    sw->runs = calloc((size_t)total, sizeof *sw->runs);
    if (!sw->runs) return bad(err, errlen, p->root, "(top)", "out of memory for %lld runs", (long long)total);
    for (int z = 0; z < p->n_sizes; z++)
        for (size_t m = 0; m < p->mixers->n_items; m++) {
            const char *mixer = p->mixers->items[m].string;
            /* the model of this size and mixer (steps 1) gives the parameters for tokens_per_param */
            io_jw w;
            double lr0 = p->n_lrs == 1 && !strcmp(sw->lr_rule, "width") ? p->lr_base * p->lr_base_d / p->sizes[z].d_model : p->lrs[0];
            run_text(p, &p->sizes[z], mixer, p->seeds[0], lr0, 1, "probe", &w);
            gdn_run_config probe;
            char what[256];
            snprintf(what, sizeof what, "%.40s_%s (mixers \"%.40s\", size %s)", mixer, p->sizes[z].name, mixer, p->sizes[z].name);
            int r = resolve(&probe, io_jw_text(&w), p->source, what, err, errlen);
            io_jw_free(&w);
            if (r) return -1;
            gdn_flops fl;
            if (gdn_flops_of(&probe.model, probe.seq_len, &fl, err, errlen)) return -1;
            int64_t micro = (int64_t)probe.batch_size * probe.seq_len;
            int64_t per_step = probe.batch_tokens > 0 ? (probe.batch_tokens + micro - 1) / micro * micro : micro;
            for (int b = 0; b < p->n_budgets; b++)
                for (int s = 0; s < p->n_seeds; s++)
                    for (int l = 0; l < p->n_lrs; l++) {
                        double want = p->per_param ? p->budgets[b] * (double)fl.non_embedding : p->budgets[b];
                        double steps_d = ceil(want / (double)per_step);
                        if (!(steps_d >= 1 && steps_d <= 1e12))
                            return bad(err, errlen, p->root, p->per_param ? "tokens_per_param" : "tokens",
                                       "size %s: %g tokens is %g steps of %lld tokens; runs need 1 to 1e12 steps",
                                       p->sizes[z].name, want, steps_d, (long long)per_step);
                        int64_t steps = (int64_t)steps_d;
                        double lr = !strcmp(sw->lr_rule, "width") ? lr0 : p->lrs[l];
                        gdn_sweep_run *run = &sw->runs[sw->n_runs];
                        run->tokens = steps * per_step;
                        snprintf(run->size, sizeof run->size, "%s", p->sizes[z].name);
                        char tl[32];
                        tokens_label(run->tokens, tl, sizeof tl);
                        int n = snprintf(run->name, sizeof run->name, "%s_%s_t%s_s%lld", mixer, p->sizes[z].name, tl,
                                         (long long)p->seeds[s]);
                        if (p->n_lrs > 1 && n > 0 && (size_t)n < sizeof run->name)
                            n += snprintf(run->name + n, sizeof run->name - (size_t)n, "_lr%.3g", lr);
                        if (n < 0 || (size_t)n >= sizeof run->name || strchr(run->name, '+'))
                            return bad(err, errlen, p->root, "mixers", "run name of pattern \"%.40s\" is too long for a file name", mixer);
                        run_text(p, &p->sizes[z], mixer, p->seeds[s], lr, steps, run->name, &w);
                        r = resolve(&run->rc, io_jw_text(&w), p->source, run->name, err, errlen);
                        io_jw_free(&w);
                        if (r) return -1;
                        run->fl = fl;
                        run->flops = fl.per_token * (double)run->tokens;
                        sw->n_runs++;
                    }
        }
    qsort(sw->runs, (size_t)sw->n_runs, sizeof *sw->runs, cmp_runs);
    /* distinct names: sorted, neighbours differ */
    const char **names = malloc((size_t)sw->n_runs * sizeof *names);
    if (!names) return bad(err, errlen, p->root, "(top)", "out of memory");
    for (int i = 0; i < sw->n_runs; i++) names[i] = sw->runs[i].name;
    qsort(names, (size_t)sw->n_runs, sizeof *names, cmp_names);
    for (int i = 1; i < sw->n_runs; i++)
        if (!strcmp(names[i - 1], names[i])) {
            bad(err, errlen, p->root, "sizes", "two runs are both named %s: give the sizes distinct names "
                "(or budgets that differ in their first 3 digits)", names[i]);
            free(names);
            return -1;
        }
    free(names);
    return 0;
}

int gdn_sweep_parse(gdn_sweep *sw, const char *text, size_t len, const char *source, char *err, size_t errlen) {
    memset(sw, 0, sizeof *sw);
    io_json *root = io_json_parse(text, len, source, err, (int)errlen);
    if (!root) return -1;
    plan_in p;
    memset(&p, 0, sizeof p);
    p.root = root;
    p.source = source;
    int r = read_top(&p, sw, err, errlen) || read_lr(&p, sw, err, errlen) || expand(&p, sw, err, errlen) ||
            apply_throughput(&p, sw, err, errlen);
    free(p.sizes);
    io_json_free(root);
    if (r) {
        gdn_sweep_free(sw);
        return -1;
    }
    return 0;
}

void gdn_sweep_free(gdn_sweep *sw) {
    free(sw->runs);
    sw->runs = NULL;
    sw->n_runs = 0;
}

int gdn_sweep_check_corpus(gdn_sweep *sw, char *err, size_t errlen) {
    if (sw->n_runs == 0) return 0;
    /* the runs share the corpus; the largest seq_len leaves the fewest windows */
    const gdn_run_config *rc = &sw->runs[0].rc;
    int T = 0;
    for (int i = 0; i < sw->n_runs; i++)
        if (sw->runs[i].rc.seq_len > T) {
            T = sw->runs[i].rc.seq_len;
            rc = &sw->runs[i].rc;
        }
    io_dataset ds;
    io_dataset_opts o = {.seq_len = T, .seed = 1, .val_tokens = (size_t)rc->val_tokens, .val_fraction = 0.0};
    char e[1024];
    if (io_dataset_open_files(&ds, rc->data, NULL, rc->model.vocab_size, &o, e, sizeof e)) {
        snprintf(err, errlen, "corpus.data %s: %s", rc->data, e);
        return -1;
    }
    sw->train_tokens = (int64_t)ds.train.n_tokens;
    const uint64_t val_windows = ds.n_val_windows;
    io_dataset_close(&ds);
    if (val_windows == 0) {
        snprintf(err, errlen, "corpus: %s holds out no validation windows of %d tokens (val_tokens %lld): a scaling "
                 "sweep needs held-out loss; set corpus.val_tokens", rc->data, T, (long long)rc->val_tokens);
        return -1;
    }
    for (int i = 0; i < sw->n_runs; i++) {
        double epochs = (double)sw->runs[i].tokens / (double)sw->train_tokens;
        if (epochs > sw->max_epochs) {
            snprintf(err, errlen, "run %s trains on %lld tokens, %.2f passes over the corpus's %lld training tokens "
                     "(corpus.max_epochs %g): use a larger corpus (jobs/scaling/make_corpus.sh), smaller budgets, or "
                     "raise max_epochs if repeating data is intended", sw->runs[i].name, (long long)sw->runs[i].tokens,
                     epochs, (long long)sw->train_tokens, sw->max_epochs);
            return -1;
        }
    }
    return 0;
}
