/* The CPU backend of model/backend.h: the fp32 CPU model (model/cpu/model_cpu.h) with its
 * parameters, gradients and AdamW moments in one host allocation and the CPU optimizer
 * (train/optim.h). Every call is synchronous. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/backend.h"
#include "model/check.h"
#include "model/cpu/model_cpu.h"
#include "train/optim.h"

typedef struct {
    gdn_model base;
    float *arena;                /* params | grads [padded] | m | v [hi - lo] */
    float *params, *grads, *m, *v;
    gdn_cpu_acts_f32 *acts;      /* B x T */
} cpu_model;

static cpu_model *cpu(gdn_model *m) { return (cpu_model *)m; }

static size_t state_len(const gdn_model *m) { return m->shape.hi - m->shape.lo; }

static gdn_model *cpu_create(const gdn_param_table *t, const gdn_model_shape *shape) {
    cpu_model *c = GDN_CALLOC(1, sizeof *c);
    c->base.backend = &gdn_backend_cpu;
    c->base.table = t;
    c->base.shape = *shape;
    if (!shape->padded) {
        c->base.shape.lo = 0;
        c->base.shape.hi = c->base.shape.padded = t->total;
    }
    const size_t np = c->base.shape.padded, ns = state_len(&c->base);
    GDN_ASSERT(np >= t->total && c->base.shape.hi <= t->total && c->base.shape.lo <= c->base.shape.hi);
    c->arena = GDN_CALLOC(2 * np + 2 * ns, sizeof(float));
    c->params = c->arena;
    c->grads = c->arena + np;
    c->m = c->arena + 2 * np;
    c->v = c->m + ns;
    c->acts = gdn_cpu_acts_create_f32(t, shape->B, shape->T);
    return &c->base;
}

static void cpu_free(gdn_model *m) {
    if (!m) return;
    gdn_cpu_acts_free_f32(cpu(m)->acts);
    free(cpu(m)->arena);
    free(m);
}

static void cpu_upload(gdn_model *m, const float *params, const float *adam_m, const float *adam_v) {
    cpu_model *c = cpu(m);
    const size_t ns = state_len(m);
    memcpy(c->params, params, m->table->total * sizeof(float));
    if (adam_m) memcpy(c->m, adam_m, ns * sizeof(float));
    else memset(c->m, 0, ns * sizeof(float));
    if (adam_v) memcpy(c->v, adam_v, ns * sizeof(float));
    else memset(c->v, 0, ns * sizeof(float));
}

static void cpu_download(gdn_model *m, float *params, float *adam_m, float *adam_v) {
    cpu_model *c = cpu(m);
    const size_t ns = state_len(m);
    if (params) memcpy(params, c->params, m->table->total * sizeof(float));
    if (adam_m) memcpy(adam_m, c->m, ns * sizeof(float));
    if (adam_v) memcpy(adam_v, c->v, ns * sizeof(float));
}

static void cpu_download_grads(gdn_model *m, float *grads) {
    memcpy(grads, cpu(m)->grads, m->table->total * sizeof(float));
}

static void cpu_zero_grads(gdn_model *m) { memset(cpu(m)->grads, 0, m->shape.padded * sizeof(float)); }

static double cpu_forward(gdn_model *m, const int *tokens, const int *targets, float grad_scale, int *n_valid,
                          const gdn_capture *capture) {
    cpu_model *c = cpu(m);
    int nv = 0;
    double loss = gdn_cpu_forward_f32(c->acts, m->table, c->params, tokens, targets, grad_scale, &nv, NULL, NULL);
    if (n_valid) *n_valid = nv;
    if (capture) {
        const size_t n = (size_t)m->shape.B * (size_t)m->shape.T * (size_t)m->table->cfg.d_model;
        for (int i = 0; i < capture->n; i++)
            memcpy(capture->out[i], gdn_cpu_hidden_f32(c->acts, capture->layers[i]), n * sizeof(float));
        for (int i = 0; capture->mid && i < capture->n; i++)
            if (capture->mid[i])
                memcpy(capture->mid[i], gdn_cpu_hidden_mid_f32(c->acts, capture->layers[i]), n * sizeof(float));
    }
    return loss;
}

static double cpu_forward_kl(gdn_model *m, const int *tokens, const int *targets, const gdn_soft_targets *soft,
                             float grad_scale, int *n_valid, double *kl_sum, double *ce_sum) {
    cpu_model *c = cpu(m);
    int nv = 0;
    const gdn_model *t = soft->teacher;
    if (t && (t->shape.B != m->shape.B || t->shape.T != m->shape.T ||
              t->table->cfg.vocab_size != m->table->cfg.vocab_size))
        GDN_DIE("distillation loss: the teacher has micro-batches of %d x %d tokens over %d ids, the student %d x %d "
                "over %d", t->shape.B, t->shape.T, t->table->cfg.vocab_size, m->shape.B, m->shape.T,
                m->table->cfg.vocab_size);
    const float *zt = t ? gdn_cpu_logits_f32(cpu(soft->teacher)->acts) : soft->logits;
    double loss = gdn_cpu_forward_kl_f32(c->acts, m->table, c->params, tokens, targets, zt, soft->tau,
                                         soft->ce_weight, grad_scale, &nv, kl_sum, ce_sum);
    if (n_valid) *n_valid = nv;
    return loss;
}

static double cpu_mixer_mse(gdn_model *m, int layer, const gdn_mixer_targets *t, float grad_scale) {
    cpu_model *c = cpu(m);
    if (t->teacher ? t->x_in || t->target : !t->x_in || !t->target)
        GDN_DIE("teacher-forced mixer: give either the stream x_in and the target or the teacher's model");
    if (!t->teacher)
        return gdn_cpu_mixer_mse_f32(c->acts, m->table, c->params, c->grads, layer, t->x_in, t->target, grad_scale);
    const gdn_model *tm = t->teacher;
    if (tm->shape.B != m->shape.B || tm->shape.T != m->shape.T || tm->table->cfg.d_model != m->table->cfg.d_model ||
        layer < 0 || layer >= tm->table->cfg.n_layers)
        GDN_DIE("teacher-forced mixer: the teacher has micro-batches of %d x %d tokens of width %d and %d layers, the "
                "student %d x %d of width %d (layer %d)", tm->shape.B, tm->shape.T, tm->table->cfg.d_model,
                tm->table->cfg.n_layers, m->shape.B, m->shape.T, m->table->cfg.d_model, layer);
    /* the teacher's stream entering the block and its mixer output, as the mid-block capture reads them */
    const gdn_cpu_acts_f32 *ta = cpu(t->teacher)->acts;
    const float *x = gdn_cpu_hidden_f32(ta, layer - 1), *xm = gdn_cpu_hidden_mid_f32(ta, layer);
    const size_t n = (size_t)m->shape.B * (size_t)m->shape.T * (size_t)m->table->cfg.d_model;
    float *target = GDN_MALLOC(n * sizeof(float));
    for (size_t i = 0; i < n; i++) target[i] = xm[i] - x[i];
    const double sse = gdn_cpu_mixer_mse_f32(c->acts, m->table, c->params, c->grads, layer, x, target, grad_scale);
    free(target);
    return sse;
}

static void cpu_logits(gdn_model *m, float *out) {
    const size_t n = (size_t)m->shape.B * (size_t)m->shape.T * (size_t)m->table->cfg.vocab_size;
    memcpy(out, gdn_cpu_logits_f32(cpu(m)->acts), n * sizeof(float));
}

static void cpu_backward(gdn_model *m, gdn_grads_ready_fn ready, void *ctx) {
    cpu_model *c = cpu(m);
    gdn_cpu_backward_f32(c->acts, m->table, c->params, c->grads);
    if (ready) ready(ctx, c->grads, 0, m->table->total);
}

static float *cpu_params(gdn_model *m) { return cpu(m)->params; }
static float *cpu_grads(gdn_model *m) { return cpu(m)->grads; }

static double cpu_grad_sumsq(gdn_model *m) {
    return gdn_grad_sumsq(cpu(m)->grads + m->shape.lo, state_len(m));
}

static double cpu_adamw_step(gdn_model *m, const gdn_adamw_hparams *h, int64_t step, double grad_clip) {
    cpu_model *c = cpu(m);
    const size_t n = m->table->total;
    GDN_ASSERT(m->shape.lo == 0 && m->shape.hi == n);
    double gnorm = gdn_grad_norm(c->grads, n);
    if (grad_clip > 0 && gnorm > grad_clip) gdn_grad_scale(c->grads, n, (float)(grad_clip / gnorm));
    gdn_adamw_update(m->table, c->params, c->grads, c->m, c->v, h, step);
    return gnorm;
}

static void cpu_adamw_shard(gdn_model *m, const gdn_adamw_hparams *h, int64_t step, double gnorm,
                            double grad_clip) {
    cpu_model *c = cpu(m);
    const size_t lo = m->shape.lo, hi = m->shape.hi;
    if (grad_clip > 0 && gnorm > grad_clip) gdn_grad_scale(c->grads + lo, hi - lo, (float)(grad_clip / gnorm));
    gdn_adamw_update_range(m->table, lo, hi, c->params + lo, c->grads + lo, c->m, c->v, h, step);
}

static void cpu_params_changed(gdn_model *m) { (void)m; }

static void cpu_write_range(gdn_model *m, int grads, size_t lo, size_t hi, const float *src) {
    GDN_ASSERT(lo <= hi && hi <= m->shape.padded);
    float *dst = (grads ? cpu(m)->grads : cpu(m)->params) + lo;
    if (src) memcpy(dst, src, (hi - lo) * sizeof(float));
    else memset(dst, 0, (hi - lo) * sizeof(float));
}

static void cpu_set_seq_hooks(gdn_model *m, const gdn_seq_hooks *hooks) {
    gdn_cpu_acts_set_seq_hooks_f32(cpu(m)->acts, hooks);
}

static int cpu_set_doc_starts(gdn_model *m, const unsigned char *starts) {
    gdn_cpu_acts_set_doc_starts_f32(cpu(m)->acts, starts);
    return 0;
}

static void *cpu_stream(gdn_model *m) {
    (void)m;
    return NULL;
}

static void cpu_memory(const gdn_model *m, size_t *param_bytes, size_t *act_bytes) {
    *param_bytes = (2 * m->shape.padded + 2 * state_len(m)) * sizeof(float);
    *act_bytes = gdn_cpu_acts_bytes_f32(((const cpu_model *)m)->acts);
}

const gdn_backend gdn_backend_cpu = {
    .name = "cpu",
    .create = cpu_create,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .download_grads = cpu_download_grads,
    .zero_grads = cpu_zero_grads,
    .forward = cpu_forward,
    .logits = cpu_logits,
    .backward = cpu_backward,
    .forward_kl = cpu_forward_kl,
    .mixer_mse = cpu_mixer_mse,
    .params = cpu_params,
    .grads = cpu_grads,
    .grad_sumsq = cpu_grad_sumsq,
    .adamw_step = cpu_adamw_step,
    .adamw_shard = cpu_adamw_shard,
    .params_changed = cpu_params_changed,
    .write_range = cpu_write_range,
    .set_seq_hooks = cpu_set_seq_hooks,
    .set_doc_starts = cpu_set_doc_starts,
    .stream = cpu_stream,
    .memory = cpu_memory,
};
