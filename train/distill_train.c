/* gdn distill train: the two stages as runs of the training loop with a loss hook (see
 * distill_train.h). The hook owns the teacher (a forward-only model: no optimizer state), its
 * captured activations or logits, and the frozen tensors (their gradients zeroed before the
 * update, their values put back after it, so that weight decay cannot move them either). */
#include "train/distill_train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "comm/seqpar.h"
#include "io/checkpoint.h"
#include "io/json.h"
#include "model/check.h"
#include "train/model_load.h"
#include "train/trainer.h"

typedef struct {
    int stage;
    const gdn_param_table *tt; /* the teacher */
    const float *tp;
    gdn_model *teacher;        /* made on the first micro-batch, on the student's backend and shape */
    gdn_comm *comm;
    gdn_sp_exchange sp_mode;   /* sp > 1: the teacher's exchange, the student's (--sp_exchange) */
    gdn_seqpar *teacher_sp;    /* sp > 1: the teacher's own hooks (its buffers are per model) */
    const int *converted;      /* [n_layers] 1: the student's mixer differs from the teacher's */
    int n_layers;
    double tau, ce_weight;
    size_t *frozen;            /* [2 n_frozen] ranges [lo, hi) of the flat buffer that do not train */
    int n_frozen;
    float *frozen_vals;        /* their values at the start (the same on every rank) */
    gdn_train_hook hook;
} distill_hook;

/* The teacher on the student's backend, with the student's micro-batch shape and an empty
 * optimizer shard (it never runs an update). */
static void teacher_open(distill_hook *h, const gdn_model *student) {
    if (h->teacher) return;
    const gdn_backend *be = student->backend;
    gdn_model_shape shape = {.B = student->shape.B, .T = student->shape.T, .precision = student->shape.precision,
                             .lo = 0, .hi = 0, .padded = h->tt->total};
    h->teacher = be->create(h->tt, &shape);
    be->upload(h->teacher, h->tp, NULL, NULL);
    if (h->comm->sp > 1) { /* the teacher runs this rank's segment of each sequence, as the student */
        if (be != &gdn_backend_cpu) /* gdn distill train refuses this first */
            GDN_DIE("gdn distill train: sequence parallelism for distillation runs on the CPU backend only");
        h->teacher_sp = gdn_seqpar_create(h->comm, &h->tt->cfg, shape.B, shape.T, h->sp_mode);
        const gdn_seq_hooks hooks = gdn_seqpar_hooks(h->teacher_sp);
        be->set_seq_hooks(h->teacher, &hooks);
    }
}

/* Stage 1, one micro-batch: the teacher's forward, then per converted layer the student's mixer
 * on the teacher's stream x_l entering block l against the teacher's mixer output x_mid_l - x_l,
 * both read in the teacher model's memory (gdn_mixer_targets.teacher: a GPU teacher's stay on
 * the GPU). stats[l] += sse_l; the loss sum is sum_l sse_l / d_model, so that the trainer's
 * division by the step's tokens gives sum_l MSE_l (MSE_l: mean over tokens and d_model). */
static double stage1_micro(distill_hook *h, gdn_model *model, const int *inputs, float grad_scale, double *stats) {
    const gdn_backend *be = model->backend;
    be->forward(h->teacher, inputs, NULL, 0.0f, NULL, NULL);
    const gdn_mixer_targets fit = {.teacher = h->teacher};
    const double D = (double)h->tt->cfg.d_model;
    double loss = 0;
    for (int l = 0; l < h->n_layers; l++) {
        if (!h->converted[l]) continue;
        double sse = be->mixer_mse(model, l, &fit, (float)(grad_scale / D));
        stats[l] += sse;
        loss += sse / D;
    }
    return loss;
}

/* Stage 2, one micro-batch: the teacher's logits, then the student's KL + CE and its backward.
 * stats: KL sum, CE sum, tokens. */
static double stage2_micro(distill_hook *h, gdn_model *model, const int *inputs, const int *targets,
                           float grad_scale, double *stats) {
    const gdn_backend *be = model->backend;
    be->forward(h->teacher, inputs, NULL, 0.0f, NULL, NULL);
    const gdn_soft_targets soft = {.teacher = h->teacher, .tau = h->tau, .ce_weight = h->ce_weight};
    int nv = 0;
    double kl = 0, ce = 0;
    double loss = be->forward_kl(model, inputs, targets, &soft, grad_scale, &nv, &kl, &ce);
    be->backward(model, NULL, NULL);
    stats[0] += kl;
    stats[1] += ce;
    stats[2] += nv;
    return loss;
}

static double hook_micro(void *ctx, gdn_model *model, const int *inputs, const int *targets, float grad_scale,
                         double *stats) {
    distill_hook *h = ctx;
    if (!model->backend->forward_kl || !model->backend->mixer_mse) /* gdn distill train refuses these first */
        GDN_DIE("gdn distill train: the %s backend has no distillation entries (forward_kl, mixer_mse)",
                model->backend->name);
    if (!h->frozen_vals) { /* the starting values of the frozen tensors (restored or initial) */
        float *p = GDN_MALLOC(sizeof(float) * model->table->total);
        model->backend->download(model, p, NULL, NULL); /* host or device memory alike */
        size_t total = 0;
        for (int i = 0; i < h->n_frozen; i++) total += h->frozen[2 * i + 1] - h->frozen[2 * i];
        h->frozen_vals = GDN_MALLOC(sizeof(float) * (total ? total : 1));
        float *dst = h->frozen_vals;
        for (int i = 0; i < h->n_frozen; i++) {
            const size_t lo = h->frozen[2 * i], len = h->frozen[2 * i + 1] - lo;
            memcpy(dst, p + lo, len * sizeof(float));
            dst += len;
        }
        free(p);
    }
    teacher_open(h, model);
    /* sp > 1: the point-to-point sends of the last micro-batch (teacher's and student's) complete
     * before their per-layer buffers are written again. The hooks wait for them only at a pass's
     * first delta-rule layer (forward) or last one (backward), which stage 1's single mixers, one
     * converted layer at a time, may never call. */
    if (h->comm->sp > 1) gdn_wait_sends(h->comm);
    return h->stage == 1 ? stage1_micro(h, model, inputs, grad_scale, stats)
                         : stage2_micro(h, model, inputs, targets, grad_scale, stats);
}

static void hook_before_update(void *ctx, gdn_model *model) {
    distill_hook *h = ctx;
    for (int i = 0; i < h->n_frozen; i++)
        model->backend->write_range(model, 1, h->frozen[2 * i], h->frozen[2 * i + 1], NULL);
}

static void hook_after_update(void *ctx, gdn_model *model) {
    distill_hook *h = ctx;
    const float *src = h->frozen_vals;
    for (int i = 0; i < h->n_frozen; i++) {
        const size_t lo = h->frozen[2 * i], hi = h->frozen[2 * i + 1];
        model->backend->write_range(model, 0, lo, hi, src);
        src += hi - lo;
    }
    model->backend->params_changed(model);
}

static void hook_metrics(void *ctx, io_jw *w, const double *stats, double tokens) {
    distill_hook *h = ctx;
    io_jw_kv_int(w, "stage", h->stage);
    if (h->stage == 1) { /* MSE per converted layer: mean over the step's tokens and d_model */
        const double D = (double)h->tt->cfg.d_model;
        io_jw_key(w, "mse_layer");
        io_jw_begin_array(w);
        for (int l = 0; l < h->n_layers; l++)
            if (h->converted[l]) io_jw_number(w, stats[l] / (tokens * D));
            else io_jw_null(w);
        io_jw_end_array(w);
    } else {
        io_jw_kv_number(w, "kl", stats[2] > 0 ? stats[0] / stats[2] : NAN);
        io_jw_kv_number(w, "ce", stats[2] > 0 ? stats[1] / stats[2] : NAN);
    }
}

/* The ranges of the flat buffer that do not train: with trained_mixers, everything but the
 * "model.layers.L.attn." tensors of converted layers L; else nothing. */
static void frozen_ranges(distill_hook *h, const gdn_param_table *st, int trained_mixers) {
    h->frozen = GDN_MALLOC(sizeof(size_t) * 2 * (size_t)(st->n ? st->n : 1));
    h->n_frozen = 0;
    if (!trained_mixers) return;
    for (int i = 0; i < st->n; i++) {
        const gdn_param *p = &st->p[i];
        int l = -1, off = 0;
        int trains = sscanf(p->name, "model.layers.%d.attn.%n", &l, &off) == 1 && off > 0 && l >= 0 &&
                     l < h->n_layers && h->converted[l];
        if (trains) continue;
        if (h->n_frozen && h->frozen[2 * h->n_frozen - 1] == p->offset) { /* adjacent: one range */
            h->frozen[2 * h->n_frozen - 1] = p->offset + p->numel;
            continue;
        }
        h->frozen[2 * h->n_frozen] = p->offset;
        h->frozen[2 * h->n_frozen + 1] = p->offset + p->numel;
        h->n_frozen++;
    }
}

static void hook_free(distill_hook *h) {
    gdn_seqpar_free(h->teacher_sp); /* completes its sends first */
    if (h->teacher) h->teacher->backend->free(h->teacher);
    free(h->frozen);
    free(h->frozen_vals);
    memset(h, 0, sizeof *h);
}

/* Rank 0 decides, every rank learns: 1 when dir's newest checkpoint is at step >= steps (its
 * path in path), 0 when the stage has work left, -1 on an unreadable directory (printed). */
static int stage_done(gdn_comm *comm, const char *dir, int64_t steps, char *path, size_t path_len) {
    int64_t r[2] = {0, 0};
    if (comm->rank == 0) {
        char err[1024];
        int64_t step = 0;
        int f = ckpt_find_resume(dir, path, path_len, &step, err, sizeof err);
        if (f < 0) fprintf(stderr, "gdn distill train: %s: %s\n", dir, err);
        r[0] = f < 0 ? -1 : f == 1 && step >= steps;
        r[1] = f == 1 ? step : 0;
    }
    if (comm->size > 1) gdn_broadcast(comm, GDN_WORLD, r, 2, GDN_I64, 0, "distillation stage");
    return (int)r[0];
}

/* Rank 0: OUT/distill.json, the distillation's own settings (the stages' run settings are in
 * OUT/stageN/config.json). */
static int write_distill_json(const gdn_run_config *rc, const distill_train_opts *o) {
    char path[GDN_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/distill.json", rc->out);
    io_jw w;
    io_jw_init(&w, 1);
    io_jw_begin_object(&w);
    io_jw_kv_string(&w, "teacher", o->teacher);
    io_jw_kv_string(&w, "student", o->student);
    io_jw_kv_int(&w, "stage1_steps", o->steps[0]);
    io_jw_kv_int(&w, "stage2_steps", o->steps[1]);
    io_jw_kv_number(&w, "stage1_lr", o->lr[0]);
    io_jw_kv_number(&w, "stage2_lr", o->lr[1]);
    io_jw_kv_number(&w, "tau", o->tau);
    io_jw_kv_number(&w, "ce_weight", o->ce_weight);
    io_jw_kv_string(&w, "train", o->train_all ? "all" : "mixers");
    io_jw_end_object(&w);
    FILE *f = fopen(path, "w");
    int bad = !f || fprintf(f, "%s\n", io_jw_text(&w)) < 0;
    if (f && fclose(f)) bad = 1;
    if (bad) fprintf(stderr, "gdn distill train: cannot write %s: %s\n", path, strerror(errno));
    io_jw_free(&w);
    return bad ? -1 : 0;
}

/* The teacher and the student must share vocabulary, width and depth; returns the converted
 * layers in converted [n_layers], their count, or -1 with the reason printed. */
static int match_models(const gdn_config *tc, const gdn_config *sc, int *converted, const char *teacher) {
    if (tc->vocab_size != sc->vocab_size || tc->d_model != sc->d_model || tc->n_layers != sc->n_layers) {
        fprintf(stderr, "gdn distill train: the teacher %s (vocab %d, d_model %d, %d layers) and the student "
                "(vocab %d, d_model %d, %d layers) differ in shape; make the student with gdn distill init "
                "--teacher %s\n", teacher, tc->vocab_size, tc->d_model, tc->n_layers, sc->vocab_size, sc->d_model,
                sc->n_layers, teacher);
        return -1;
    }
    int n = 0;
    for (int l = 0; l < tc->n_layers; l++)
        n += converted[l] = gdn_config_layer_mixer(tc, l) != gdn_config_layer_mixer(sc, l);
    return n;
}

/* sp > 1: the teacher runs segments of seq_len / sp tokens too (gdn_run_config_parse checked
 * the student's side). 0, or -1 with the reason printed. */
static int teacher_sp_check(const gdn_config *tc, const gdn_run_config *rc, const gdn_comm *comm,
                            const char *teacher) {
    const int sp = comm->sp;
    if (sp <= 1) return 0;
    const int T_seg = rc->seq_len / sp;
    if (T_seg < tc->conv_width - 1) {
        if (comm->rank == 0)
            fprintf(stderr, "gdn distill train: sp = %d leaves %d tokens per rank; the teacher %s needs at least "
                    "its conv_width - 1 = %d: use a smaller sp or a longer seq_len\n", sp, T_seg, teacher,
                    tc->conv_width - 1);
        return -1;
    }
    if (gdn_config_count_mixer(tc, GDN_MIXER_S)) {
        if (comm->rank == 0)
            fprintf(stderr, "gdn distill train: sp = %d: the teacher %s has linearized layers (mixer S in mixers "
                    "\"%s\"), which run on whole sequences only: use --sp 1\n", sp, teacher, gdn_config_mixers(tc));
        return -1;
    }
    return 0;
}

int distill_train_run(const gdn_run_config *base, const distill_train_opts *o, gdn_comm *comm, int argc,
                      char **argv) {
    char err[2048];
    gdn_param_table tt;
    float *tp = NULL;
    if (gdn_model_load(o->teacher, &tt, &tp, NULL, err, sizeof err)) {
        fprintf(stderr, "gdn distill train: --teacher: %s\n", err);
        return GDN_EXIT_USAGE;
    }
    int *converted = GDN_CALLOC((size_t)tt.cfg.n_layers, sizeof(int));
    int status = GDN_EXIT_USAGE;
    gdn_param_table st;
    gdn_param_table_build(&st, &base->model);
    int n_conv = match_models(&tt.cfg, &base->model, converted, o->teacher);
    if (n_conv < 0 || teacher_sp_check(&tt.cfg, base, comm, o->teacher)) goto done;
    if (n_conv == 0 && o->steps[0] > 0) {
        fprintf(stderr, "gdn distill train: the student's mixers \"%s\" are the teacher's: no layer to fit in "
                "stage 1 (give --stage1_steps 0, or make the student with gdn distill init)\n",
                gdn_config_mixers(&base->model));
        goto done;
    }
    if (comm->rank == 0) {
        struct stat sb;
        if ((mkdir(base->out, 0777) && errno != EEXIST) || stat(base->out, &sb) || !S_ISDIR(sb.st_mode)) {
            fprintf(stderr, "gdn distill train: cannot create the directory --out %s: %s\n", base->out,
                    errno ? strerror(errno) : "not a directory");
            status = GDN_EXIT_ERROR;
        } else if (write_distill_json(base, o)) {
            status = GDN_EXIT_ERROR;
        } else status = 0;
    } else status = 0;
    int64_t s64 = status;
    if (comm->size > 1) gdn_all_reduce(comm, GDN_WORLD, &s64, 1, GDN_I64, GDN_MAX, "distill setup");
    if ((status = (int)s64)) goto done;
    char prev[GDN_PATH_MAX + 32] = "";
    for (int s = 0; s < 2 && !status; s++) {
        static gdn_run_config rc; /* large: off the stack */
        rc = *base;
        if (snprintf(rc.out, sizeof rc.out, "%s/stage%d", base->out, s + 1) >= (int)sizeof rc.out) {
            if (comm->rank == 0) fprintf(stderr, "gdn distill train: --out %s is too long a path\n", base->out);
            status = GDN_EXIT_USAGE;
            break;
        }
        char done_path[GDN_PATH_MAX + 32] = "";
        if (o->steps[s] == 0) continue;
        int d = stage_done(comm, rc.out, o->steps[s], done_path, sizeof done_path);
        if (d < 0) {
            status = GDN_EXIT_ERROR;
            break;
        }
        if (d == 1) {
            if (comm->rank == 0) printf("gdn distill train: stage %d is complete (%s)\n", s + 1, done_path);
            snprintf(prev, sizeof prev, "%s", done_path);
            continue;
        }
        rc.steps = o->steps[s];
        rc.lr = o->lr[s];
        if (rc.lr_min > rc.lr) rc.lr_min = rc.lr;
        snprintf(rc.resume, sizeof rc.resume, "auto");
        if (snprintf(rc.init_from, sizeof rc.init_from, "%s", prev[0] ? prev : o->student) >= (int)sizeof rc.init_from) {
            if (comm->rank == 0) fprintf(stderr, "gdn distill train: the path %s is too long\n", prev[0] ? prev : o->student);
            status = GDN_EXIT_USAGE;
            break;
        }
        if (comm->rank == 0)
            printf("gdn distill train: stage %d of 2 (%s), %lld steps from %s, run directory %s\n", s + 1,
                   s == 0 ? "teacher-forced mixer MSE" : "KL to the teacher's logits", (long long)rc.steps,
                   rc.init_from, rc.out);
        static distill_hook h;
        memset(&h, 0, sizeof h);
        h.stage = s + 1;
        h.tt = &tt;
        h.tp = tp;
        h.comm = comm;
        h.sp_mode = GDN_SP_PASS;
        gdn_sp_exchange_parse(rc.sp_exchange, &h.sp_mode); /* checked by gdn_run_config_parse */
        h.converted = converted;
        h.n_layers = tt.cfg.n_layers;
        h.tau = o->tau;
        h.ce_weight = o->ce_weight;
        frozen_ranges(&h, &st, s == 0 || !o->train_all);
        h.hook = (gdn_train_hook){.ctx = &h, .n_stats = s == 0 ? tt.cfg.n_layers : 3, .micro_batch = hook_micro,
                                  .before_update = hook_before_update, .after_update = hook_after_update,
                                  .metrics = hook_metrics, .n_state = 1, .state_key = {"distill_stage"},
                                  .state_value = {s + 1}};
        gdn_train_opts topts = {.hook = &h.hook};
        status = gdn_train_run(&rc, &topts, comm, argc, argv);
        hook_free(&h);
        if (!status && stage_done(comm, rc.out, o->steps[s], prev, sizeof prev) != 1) {
            if (comm->rank == 0) fprintf(stderr, "gdn distill train: stage %d ended without its final checkpoint "
                                         "in %s\n", s + 1, rc.out);
            status = GDN_EXIT_ERROR;
        }
    }
    if (!status && comm->rank == 0)
        printf("gdn distill train: done; the student is %s\n", prev[0] ? prev : o->student);
done:
    gdn_param_table_free(&st);
    free(converted);
    free(tp);
    gdn_param_table_free(&tt);
    return status;
}
