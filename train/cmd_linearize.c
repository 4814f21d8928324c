/* gdn linearize: how well the training-free linearisations of softmax attention
 * (model/cpu/linearize.h; docs/distillation.md, "Training-free linearisation") approximate a
 * teacher's attention layers, measured on held-out windows in fp64 on the CPU: the relative
 * error of each approximation per layer and query head, and the teacher's loss with one layer or
 * all of them replaced by each approximation. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint.h"
#include "io/dataset.h"
#include "io/json.h"
#include "io/parse_num.h"
#include "model/check.h"
#include "model/cpu/linearize.h"
#include "model/cpu/model_cpu.h"
#include "model/mixer.h"
#include "train/commands.h"
#include "train/linearize_student.h"
#include "train/model_load.h"
#include "train/op_io.h"
#include "train/run_config.h"

static void lin_usage(FILE *f) {
    fprintf(f,
            "usage: gdn linearize --teacher MODEL.h5 --data SPEC [--layers L,L,...] [--windows N]\n"
            "                     [--seq_len T] [--val_tokens N] [--json]\n"
            "                     [--out STUDENT.h5 [--keep-softmax L,L,...]]\n\n"
            "Measures the training-free linearisations of the teacher's softmax attention layers\n"
            "(mixer A) on held-out windows, in fp64 on the CPU (docs/distillation.md):\n"
            "  gdn       the gated-delta-rule form as derived: centred keys k - kbar_t, decay 1 - 1/t,\n"
            "            write strength 1/(t-1), values (1 - 1/t)(v_t - vbar_{t-1}), vbar_t added\n"
            "  balanced  the same with q scaled up and k down by one factor per head (softmax is\n"
            "            unchanged) so that |q| and |k - kbar| have equal root-mean-square norms\n"
            "  vala      the first-order baseline vbar_t + mean_i (v_i - vbar_t)(k_i - kbar_t)^T q_t\n"
            "It prints the relative error ||approx - exact|| / ||exact|| of each attention output per\n"
            "layer and query head (and means), and the teacher's held-out loss exact, with each\n"
            "measured layer replaced alone, and with all of them replaced, by each approximation.\n"
            "A form whose state overflowed is printed as 'diverged' (null in JSON), never as a number.\n"
            "  --teacher FILE.h5  a checkpoint with attention layers (trained or gdn import-ed)\n"
            "  --data SPEC        text (.txt, .gz: byte-level tokens) or token shards, as for gdn eval\n"
            "  --layers L,L,...   the attention layers to measure (default: every one)\n"
            "  --windows N        held-out windows (default 8)\n"
            "  --seq_len T        window length (default: the checkpoint's run setting)\n"
            "  --val_tokens N     take the windows from the last N tokens of SPEC, the part gdn train\n"
            "                     --val_tokens N holds out; 0 (default): from all of SPEC\n"
            "  --json             one JSON object instead of the tables\n"
            "  --out FILE.h5      also write a student: the teacher with every measured layer whose best\n"
            "                     approximation (lowest loss with that layer alone replaced) is the\n"
            "                     gated-delta-rule form (balanced, or as derived) turned into a linearized\n"
            "                     layer (mixer S) with the measured balance factors; the other layers stay\n"
            "                     softmax. Its loss with those layers replaced is printed: gdn eval of the\n"
            "                     student on the same windows gives it. CPU backend only.\n"
            "  --keep-softmax L,L keep these softmax layers in the student whatever was measured\n");
}

typedef struct {
    const char *teacher, *data, *layers, *out, *keep;
    int seq_len, windows, json;
    int64_t val_tokens;
} lin_opts;

static int parse_args(int argc, char **argv, lin_opts *o) {
    char err[512];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            lin_usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gdn linearize: option '%s' needs a value (see gdn linearize --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--teacher")) o->teacher = v;
        else if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--layers")) o->layers = v;
        else if (!strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--keep-softmax")) o->keep = v;
        else if (!strcmp(a, "--seq_len")) bad = io_parse_int(a, v, 1, 1 << 20, &o->seq_len, err, sizeof err);
        else if (!strcmp(a, "--windows")) bad = io_parse_int(a, v, 1, 1 << 20, &o->windows, err, sizeof err);
        else if (!strcmp(a, "--val_tokens")) bad = io_parse_i64(a, v, 0, INT64_MAX, &o->val_tokens, err, sizeof err);
        else {
            fprintf(stderr, "gdn linearize: unknown option '%s'\n\n", a);
            lin_usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "gdn linearize: %s\n", err);
            return 2;
        }
    }
    if (!o->teacher || !o->data) {
        fprintf(stderr, "gdn linearize: --teacher and --data are required (see gdn linearize --help)\n");
        return 2;
    }
    if (o->keep && !o->out) {
        fprintf(stderr, "gdn linearize: --keep-softmax chooses the layers of the student: give --out too\n");
        return 2;
    }
    if (o->out && op_same_file(o->teacher, o->out)) {
        fprintf(stderr, "gdn linearize: --out %s is the teacher; writing it would destroy it\n", o->out);
        return 2;
    }
    return 0;
}

/* sel[l] = 1 for each layer of spec ("0,3"; NULL: every attention layer). Returns 0, or -1
 * with a message. */
static int parse_layers(const char *spec, const gdn_param_table *t, unsigned char *sel, char *err, size_t n) {
    const gdn_config *c = &t->cfg;
    if (!spec) {
        for (int l = 0; l < c->n_layers; l++) sel[l] = t->layer[l].mixer == GDN_MIXER_A;
        return 0;
    }
    const char *p = spec;
    for (;;) {
        char item[32];
        const size_t len = strcspn(p, ",");
        int l;
        char rerr[256];
        if (len == 0 || len >= sizeof item) {
            snprintf(err, n, "--layers '%s': expected layer numbers separated by commas, e.g. 0,3", spec);
            return -1;
        }
        memcpy(item, p, len);
        item[len] = 0;
        if (io_parse_int("--layers", item, 0, c->n_layers - 1, &l, rerr, sizeof rerr)) {
            snprintf(err, n, "%s (the teacher has layers 0..%d)", rerr, c->n_layers - 1);
            return -1;
        }
        if (t->layer[l].mixer != GDN_MIXER_A) {
            snprintf(err, n, "--layers: layer %d is not a softmax attention layer (mixers %s: the A layers can "
                     "be linearised)", l, gdn_config_mixers(c));
            return -1;
        }
        if (sel[l]) {
            snprintf(err, n, "--layers: layer %d is given twice", l);
            return -1;
        }
        sel[l] = 1;
        if (!p[len]) return 0;
        p += len + 1;
    }
}

/* What is measured, per layer l and query head h (H heads). */
typedef struct {
    int n_layers, H;
    unsigned char *sel;   /* [n_layers] measured layers */
    double *sq, *sk;      /* [n_layers*H] sums of |q|^2 and |k - kbar|^2 */
    double *lambda;       /* [n_layers*H] balance factors */
    double *err2;         /* [n_layers][GDN_LIN_COUNT][H] */
    double *ref2;         /* [n_layers*H] */
    double loss_exact;    /* mean over targets */
    double *loss_one;     /* [n_layers][GDN_LIN_COUNT] one layer replaced */
    double loss_all[GDN_LIN_COUNT];
    int diverged[GDN_LIN_COUNT]; /* (head, window) pairs whose output was not finite */
    uint64_t tokens;
    /* --out: the student's layers made S, the form each starts from (-1: stays as it is), the
     * balance factors they get [n_layers*H] (1 for the form as derived) and the loss with
     * those layers replaced */
    unsigned char *to_s;
    int *from;
    double *lambda_s;
    double loss_student;
} lin_result;

static double rel_err(const lin_result *r, int l, int m, int h) {
    const double e = r->err2[((size_t)l * GDN_LIN_COUNT + m) * r->H + h], d = r->ref2[(size_t)l * r->H + h];
    return d > 0 ? sqrt(e / d) : (e > 0 ? INFINITY : 0);
}

static double layer_mean(const lin_result *r, int l, int m) {
    double s = 0;
    for (int h = 0; h < r->H; h++) s += rel_err(r, l, m, h);
    return s / r->H;
}

static double overall_mean(const lin_result *r, int m) {
    double s = 0;
    int n = 0;
    for (int l = 0; l < r->n_layers; l++)
        if (r->sel[l]) {
            s += layer_mean(r, l, m);
            n++;
        }
    return n ? s / n : NAN;
}

/* The windows, one per forward pass. */
typedef struct {
    const io_dataset *ds;
    const gdn_param_table *t;
    const double *params;
    gdn_cpu_acts_f64 *a;
    int T, n;
    int *row, *in, *tg;
} lin_run;

static void load_window(lin_run *w, int i) {
    io_dataset_val_window(w->ds, (uint64_t)i, w->row);
    memcpy(w->in, w->row, sizeof(int) * (size_t)w->T);
    memcpy(w->tg, w->row + 1, sizeof(int) * (size_t)w->T);
}

/* Mean loss over the windows with the layers of replace (NULL: none) replaced by method m. */
static double replaced_loss(lin_run *w, const unsigned char *replace, int m, const double *lambda,
                            uint64_t *tokens) {
    double loss = 0, valid = 0;
    for (int i = 0; i < w->n; i++) {
        load_window(w, i);
        int nv = 0;
        loss += replace ? gdn_lin_forward_replaced_f64(w->a, w->t, w->params, w->in, w->tg, &nv, replace, m, lambda)
                        : gdn_cpu_forward_f64(w->a, w->t, w->params, w->in, w->tg, 0, &nv, NULL, NULL);
        valid += nv;
    }
    if (tokens) *tokens = (uint64_t)valid;
    return loss / valid;
}

static void measure(lin_run *w, lin_result *r) {
    const int nL = r->n_layers, H = r->H;
    /* pass 1: the exact loss and the norms that fix the balance factors */
    r->loss_exact = replaced_loss(w, NULL, 0, NULL, &r->tokens);
    for (int i = 0; i < w->n; i++) {
        load_window(w, i);
        gdn_cpu_forward_f64(w->a, w->t, w->params, w->in, NULL, 0, NULL, NULL, NULL);
        for (int l = 0; l < nL; l++)
            if (r->sel[l]) gdn_lin_layer_norms_f64(w->a, w->t, l, r->sq + (size_t)l * H, r->sk + (size_t)l * H);
    }
    for (size_t i = 0; i < (size_t)nL * H; i++) r->lambda[i] = gdn_lin_balance_factor(r->sq[i], r->sk[i]);
    /* pass 2: each approximation against the exact output */
    for (int i = 0; i < w->n; i++) {
        load_window(w, i);
        gdn_cpu_forward_f64(w->a, w->t, w->params, w->in, NULL, 0, NULL, NULL, NULL);
        for (int l = 0; l < nL; l++)
            if (r->sel[l])
                gdn_lin_layer_errors_f64(w->a, w->t, l, r->lambda + (size_t)l * H,
                                         r->err2 + (size_t)l * GDN_LIN_COUNT * H, r->ref2 + (size_t)l * H,
                                         r->diverged);
    }
    /* the loss with one layer, then every measured layer, replaced */
    unsigned char *one = GDN_CALLOC((size_t)nL, 1);
    for (int m = 0; m < GDN_LIN_COUNT; m++) {
        for (int l = 0; l < nL; l++) {
            if (!r->sel[l]) continue;
            one[l] = 1;
            r->loss_one[(size_t)l * GDN_LIN_COUNT + m] = replaced_loss(w, one, m, r->lambda, NULL);
            one[l] = 0;
        }
        r->loss_all[m] = replaced_loss(w, r->sel, m, r->lambda, NULL);
    }
    free(one);
}

/* The student's layers: each measured layer not kept whose lowest one-layer loss is a form the
 * linearized mixer holds (the balanced form, or the form as derived: lambda = 1); then its loss
 * with those layers replaced. Returns the number of such layers. */
static int choose_student(lin_run *w, lin_result *r, const unsigned char *kept) {
    const int H = r->H;
    int n = 0;
    for (int l = 0; l < r->n_layers; l++) {
        r->from[l] = -1;
        for (int h = 0; h < H; h++) r->lambda_s[(size_t)l * H + h] = 1.0;
        if (!r->sel[l] || kept[l]) continue;
        int best = -1;
        for (int m = 0; m < GDN_LIN_COUNT; m++) {
            const double x = r->loss_one[(size_t)l * GDN_LIN_COUNT + m];
            if (isfinite(x) && (best < 0 || x < r->loss_one[(size_t)l * GDN_LIN_COUNT + best])) best = m;
        }
        if (best != GDN_LIN_BALANCED && best != GDN_LIN_GDN) continue; /* nothing the kind holds helps most */
        r->from[l] = best;
        r->to_s[l] = 1;
        n++;
        if (best == GDN_LIN_BALANCED)
            for (int h = 0; h < H; h++) r->lambda_s[(size_t)l * H + h] = r->lambda[(size_t)l * H + h];
    }
    /* the balanced form with lambda 1 is the form as derived: one pass covers both */
    r->loss_student = n ? replaced_loss(w, r->to_s, GDN_LIN_BALANCED, r->lambda_s, NULL) : NAN;
    return n;
}

static void print_student_text(const lin_opts *o, const lin_result *r, const char *mixers) {
    printf("\nstudent %s (mixers \"%s\"):\n", o->out, mixers);
    for (int l = 0; l < r->n_layers; l++) {
        if (!r->sel[l] && !r->to_s[l]) continue;
        if (r->to_s[l]) printf("  layer %d: A -> S from the %s form\n", l, gdn_lin_method_name(r->from[l]));
        else printf("  layer %d: stays A\n", l);
    }
    printf("held-out loss with those layers replaced (gdn eval of the student on these windows): %.6f\n",
           r->loss_student);
}

/* A number of the tables: "diverged" when it is not finite. */
static void put(double x, const char *fmt) {
    if (isfinite(x)) printf(fmt, x);
    else printf(" %10s", "diverged");
}

static void print_text(const lin_opts *o, const lin_result *r) {
    printf("gdn linearize: %s on %s: %d windows of %d tokens, %llu targets, fp64\n", o->teacher, o->data,
           o->windows, o->seq_len, (unsigned long long)r->tokens);
    printf("relative error ||approx - exact|| / ||exact|| of the attention output per query head\n");
    printf("(lambda: the balance factor; the balanced form uses lambda q and (k - kbar) / lambda)\n\n");
    printf("%5s %5s %9s", "layer", "head", "lambda");
    for (int m = 0; m < GDN_LIN_COUNT; m++) printf(" %10s", gdn_lin_method_name(m));
    printf("\n");
    for (int l = 0; l < r->n_layers; l++) {
        if (!r->sel[l]) continue;
        for (int h = 0; h < r->H; h++) {
            printf("%5d %5d %9.4g", l, h, r->lambda[(size_t)l * r->H + h]);
            for (int m = 0; m < GDN_LIN_COUNT; m++) put(rel_err(r, l, m, h), " %10.4g");
            printf("\n");
        }
        printf("%5d %5s %9s", l, "mean", "");
        for (int m = 0; m < GDN_LIN_COUNT; m++) put(layer_mean(r, l, m), " %10.4g");
        printf("\n");
    }
    printf("%5s %5s %9s", "all", "mean", "");
    for (int m = 0; m < GDN_LIN_COUNT; m++) put(overall_mean(r, m), " %10.4g");
    printf("\n\nheld-out loss (nats/token): exact %.6f; with attention replaced by\n", r->loss_exact);
    printf("%-11s", "replaced");
    for (int m = 0; m < GDN_LIN_COUNT; m++) printf(" %10s", gdn_lin_method_name(m));
    printf("\n");
    for (int l = 0; l < r->n_layers; l++) {
        if (!r->sel[l]) continue;
        printf("layer %-5d", l);
        for (int m = 0; m < GDN_LIN_COUNT; m++) put(r->loss_one[(size_t)l * GDN_LIN_COUNT + m], " %10.6f");
        printf("\n");
    }
    printf("%-11s", "all");
    for (int m = 0; m < GDN_LIN_COUNT; m++) put(r->loss_all[m], " %10.6f");
    printf("\n");
    for (int m = 0; m < GDN_LIN_COUNT; m++)
        if (r->diverged[m])
            printf("\n%s: %d (head, window) outputs diverged (the state overflowed; see docs/distillation.md)",
                   gdn_lin_method_name(m), r->diverged[m]);
    if (r->diverged[0] || r->diverged[1] || r->diverged[2]) printf("\n");
}

/* {"gdn": x, "balanced": y, "vala": z} from f(m) */
static void json_methods(io_jw *w, const char *key, const lin_result *r, int l,
                         double (*f)(const lin_result *, int, int)) {
    io_jw_key(w, key);
    io_jw_begin_object(w);
    for (int m = 0; m < GDN_LIN_COUNT; m++) io_jw_kv_number(w, gdn_lin_method_name(m), f(r, l, m));
    io_jw_end_object(w);
}

static double loss_one(const lin_result *r, int l, int m) { return r->loss_one[(size_t)l * GDN_LIN_COUNT + m]; }
static double loss_all(const lin_result *r, int l, int m) { (void)l; return r->loss_all[m]; }
static double mean_all(const lin_result *r, int l, int m) { (void)l; return overall_mean(r, m); }

static void print_json(const lin_opts *o, const lin_result *r, const char *mixers) {
    io_jw w;
    io_jw_init(&w, 0);
    io_jw_begin_object(&w);
    io_jw_kv_string(&w, "teacher", o->teacher);
    io_jw_kv_string(&w, "data", o->data);
    io_jw_kv_int(&w, "seq_len", o->seq_len);
    io_jw_kv_int(&w, "windows", o->windows);
    io_jw_kv_int(&w, "tokens", (long long)r->tokens);
    io_jw_kv_string(&w, "precision", "fp64");
    io_jw_key(&w, "methods");
    io_jw_begin_array(&w);
    for (int m = 0; m < GDN_LIN_COUNT; m++) io_jw_string(&w, gdn_lin_method_name(m));
    io_jw_end_array(&w);
    io_jw_kv_number(&w, "loss_exact", r->loss_exact);
    io_jw_key(&w, "layers");
    io_jw_begin_array(&w);
    for (int l = 0; l < r->n_layers; l++) {
        if (!r->sel[l]) continue;
        io_jw_begin_object(&w);
        io_jw_kv_int(&w, "layer", l);
        io_jw_key(&w, "lambda");
        io_jw_begin_array(&w);
        for (int h = 0; h < r->H; h++) io_jw_number(&w, r->lambda[(size_t)l * r->H + h]);
        io_jw_end_array(&w);
        io_jw_key(&w, "rel_err");
        io_jw_begin_object(&w);
        for (int m = 0; m < GDN_LIN_COUNT; m++) {
            io_jw_key(&w, gdn_lin_method_name(m));
            io_jw_begin_array(&w);
            for (int h = 0; h < r->H; h++) io_jw_number(&w, rel_err(r, l, m, h)); /* null: diverged */
            io_jw_end_array(&w);
        }
        io_jw_end_object(&w);
        json_methods(&w, "mean_rel_err", r, l, layer_mean);
        json_methods(&w, "loss_replaced", r, l, loss_one);
        io_jw_end_object(&w);
    }
    io_jw_end_array(&w);
    json_methods(&w, "mean_rel_err", r, 0, mean_all);
    json_methods(&w, "loss_all_replaced", r, 0, loss_all);
    io_jw_key(&w, "diverged"); /* (head, window) outputs that were not finite, per method */
    io_jw_begin_object(&w);
    for (int m = 0; m < GDN_LIN_COUNT; m++) io_jw_kv_int(&w, gdn_lin_method_name(m), r->diverged[m]);
    io_jw_end_object(&w);
    if (o->out) { /* the student: its mixers, the layers made S (and the form each starts from) */
        io_jw_key(&w, "student");
        io_jw_begin_object(&w);
        io_jw_kv_string(&w, "out", o->out);
        io_jw_kv_string(&w, "mixers", mixers);
        io_jw_key(&w, "layers");
        io_jw_begin_array(&w);
        for (int l = 0; l < r->n_layers; l++) {
            if (!r->to_s[l]) continue;
            io_jw_begin_object(&w);
            io_jw_kv_int(&w, "layer", l);
            io_jw_kv_string(&w, "from", gdn_lin_method_name(r->from[l]));
            io_jw_key(&w, "lambda");
            io_jw_begin_array(&w);
            for (int h = 0; h < r->H; h++) io_jw_number(&w, r->lambda_s[(size_t)l * r->H + h]);
            io_jw_end_array(&w);
            io_jw_end_object(&w);
        }
        io_jw_end_array(&w);
        io_jw_kv_number(&w, "loss", r->loss_student);
        io_jw_end_object(&w);
    }
    io_jw_end_object(&w);
    printf("%s\n", io_jw_text(&w));
    io_jw_free(&w);
}

/* seq_len from the checkpoint's stored run configuration unless given. */
static void run_defaults(const char *config_json, lin_opts *o) {
    gdn_run_config rc;
    char err[512];
    if (!config_json || gdn_run_config_from_json_text(&rc, config_json, err, sizeof err)) {
        if (gdn_run_config_from_json_text(&rc, "{}", err, sizeof err)) GDN_DIE("default run config: %s", err);
    }
    if (!o->seq_len) o->seq_len = rc.seq_len;
}

/* Writes the student of r to o->out (step 0, weights only). Returns 0, or 1 with a message. */
static int write_student(const lin_opts *o, const gdn_param_table *tt, const float *tp, const gdn_config *sc,
                         const lin_result *r, const char *teacher_json) {
    gdn_param_table st;
    gdn_param_table_build(&st, sc);
    float *sp = GDN_MALLOC(sizeof *sp * st.total);
    lin_student_params(tt, tp, &st, sp, r->lambda_s);
    char *config_json = gdn_run_config_json_with_model(teacher_json, sc, NULL);
    ckpt_contents c = {.step = 0, .tokens_seen = 0, .config_json = config_json, .model = sc, .table = &st,
                       .params = sp};
    char err[1024];
    int status = 0;
    if (ckpt_save_atomic(o->out, &c, err, sizeof err)) {
        fprintf(stderr, "gdn linearize: --out: %s\n", err);
        status = 1;
    }
    free(config_json);
    free(sp);
    gdn_param_table_free(&st);
    return status;
}

int gdn_cmd_linearize(int argc, char **argv) {
    lin_opts o = {.windows = 8};
    int r = parse_args(argc, argv, &o);
    if (r) return r == 1 ? 0 : r;
    char err[2048];
    gdn_param_table t;
    float *p32;
    ckpt_info info;
    if (gdn_model_load(o.teacher, &t, &p32, &info, err, sizeof err)) {
        fprintf(stderr, "gdn linearize: %s\n", err);
        return 1;
    }
    run_defaults(info.config_json, &o);
    const gdn_config *c = &t.cfg;
    int status = 1, have_ds = 0, have_tok = 0;
    io_tokens tok;
    io_dataset ds;
    double *params = NULL;
    lin_result res = {.n_layers = c->n_layers, .H = c->n_heads};
    lin_run run = {0};
    gdn_config sc;
    res.sel = GDN_CALLOC(3 * (size_t)c->n_layers, 1);
    res.to_s = res.sel + c->n_layers;
    unsigned char *kept = res.to_s + c->n_layers;
    res.from = GDN_CALLOC((size_t)c->n_layers, sizeof(int));
    if (gdn_config_count_mixer(c, GDN_MIXER_A) == 0) {
        fprintf(stderr, "gdn linearize: %s has no softmax attention layer (mixers %s): there is nothing to "
                "linearise\n", o.teacher, gdn_config_mixers(c));
        goto done;
    }
    if (parse_layers(o.layers, &t, res.sel, err, sizeof err) ||
        (o.keep && lin_student_keep(c, o.keep, kept, err, sizeof err))) {
        fprintf(stderr, "gdn linearize: %s\n", err);
        status = 2;
        goto done;
    }
    if (io_tokens_open(&tok, o.data, c->vocab_size, err, sizeof err)) {
        fprintf(stderr, "gdn linearize: %s\n", err);
        goto done;
    }
    have_tok = 1;
    io_dataset_opts dopts = {.seq_len = o.seq_len, .seed = 1, .val_tokens = (size_t)o.val_tokens};
    if (io_dataset_open(&ds, &tok, o.val_tokens ? NULL : &tok, &dopts, err, sizeof err)) {
        fprintf(stderr, "gdn linearize: --data %s: %s\n", o.data, err);
        goto done;
    }
    have_ds = 1;
    if (ds.n_val_windows == 0) {
        fprintf(stderr, "gdn linearize: --data %s holds no window of seq_len + 1 = %d tokens\n", o.data, o.seq_len + 1);
        goto done;
    }
    if ((uint64_t)o.windows > ds.n_val_windows) {
        fprintf(stderr, "gdn linearize: --data %s holds %llu windows of %d tokens; using all of them (not %d)\n",
                o.data, (unsigned long long)ds.n_val_windows, o.seq_len + 1, o.windows);
        o.windows = (int)ds.n_val_windows;
    }
    params = GDN_MALLOC(sizeof(double) * t.total);
    for (size_t i = 0; i < t.total; i++) params[i] = p32[i];
    const size_t LH = (size_t)c->n_layers * c->n_heads;
    res.sq = GDN_CALLOC(LH * (5 + GDN_LIN_COUNT) + (size_t)c->n_layers * GDN_LIN_COUNT, sizeof(double));
    res.sk = res.sq + LH;
    res.lambda = res.sk + LH;
    res.ref2 = res.lambda + LH;
    res.lambda_s = res.ref2 + LH;
    res.err2 = res.lambda_s + LH;
    res.loss_one = res.err2 + LH * GDN_LIN_COUNT;
    run = (lin_run){&ds, &t, params, gdn_cpu_acts_create_f64(&t, 1, o.seq_len), o.seq_len, o.windows,
                    GDN_MALLOC(sizeof(int) * (3 * (size_t)o.seq_len + 1)), NULL, NULL};
    run.in = run.row + o.seq_len + 1;
    run.tg = run.in + o.seq_len;
    measure(&run, &res);
    if (!isfinite(res.loss_exact)) {
        fprintf(stderr, "gdn linearize: %s: the teacher's own loss is not finite (%g): its parameters have "
                "diverged or are damaged\n", o.teacher, res.loss_exact);
        goto done;
    }
    if (o.out) {
        if (!choose_student(&run, &res, kept)) {
            fprintf(stderr, "gdn linearize: --out %s: no measured layer%s has the gated-delta-rule form (balanced or "
                    "as derived) as its best approximation, so the student would be the teacher; nothing "
                    "written\n", o.out, o.keep ? " outside --keep-softmax" : "");
            goto done;
        }
        if (lin_student_config(c, res.to_s, &sc, err, sizeof err)) {
            fprintf(stderr, "gdn linearize: --out %s: %s\n", o.out, err);
            goto done;
        }
    }
    if (o.json) print_json(&o, &res, o.out ? sc.mixers : "");
    else {
        print_text(&o, &res);
        if (o.out) print_student_text(&o, &res, sc.mixers);
    }
    if (o.out && write_student(&o, &t, p32, &sc, &res, info.config_json)) goto done;
    status = fflush(stdout) ? 1 : 0;
done:
    if (run.a) gdn_cpu_acts_free_f64(run.a);
    free(run.row);
    free(res.sq);
    free(res.sel);
    free(res.from);
    free(params);
    if (have_ds) io_dataset_close(&ds);
    if (have_tok) io_tokens_close(&tok);
    free(p32);
    ckpt_info_free(&info);
    gdn_param_table_free(&t);
    return status;
}
