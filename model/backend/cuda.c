/* The CUDA backend of model/backend.h: the GPU model (model/cuda/model_cuda.h) behind the
 * backend table. Built only with CUDA. */
#include <stdio.h>
#include <stdlib.h>

#include "model/backend.h"
#include "model/check.h"
#include "model/cuda/model_cuda.h"

typedef struct {
    gdn_model base;
    gdn_cuda_model *gpu;
} cuda_model;

static gdn_cuda_model *gpu(gdn_model *m) { return ((cuda_model *)m)->gpu; }

static gdn_model *cuda_create(const gdn_param_table *t, const gdn_model_shape *shape) {
    cuda_model *c = GDN_CALLOC(1, sizeof *c);
    c->base.backend = gdn_backend_cuda();
    c->base.table = t;
    c->base.shape = *shape;
    if (!shape->padded) {
        c->base.shape.lo = 0;
        c->base.shape.hi = c->base.shape.padded = t->total;
    }
    const gdn_model_shape *s = &c->base.shape;
    c->gpu = gdn_cuda_model_create_sharded(t, s->B, s->T,
                                           s->precision == GDN_PRECISION_FP32 ? GDN_CUDA_FP32 : GDN_CUDA_BF16, s->lo,
                                           s->hi, s->padded);
    return &c->base;
}

static void cuda_free(gdn_model *m) {
    if (!m) return;
    gdn_cuda_model_free(gpu(m));
    free(m);
}

static void cuda_upload(gdn_model *m, const float *params, const float *adam_m, const float *adam_v) {
    gdn_cuda_model_upload(gpu(m), params, adam_m, adam_v);
}

static void cuda_download(gdn_model *m, float *params, float *adam_m, float *adam_v) {
    gdn_cuda_model_download(gpu(m), params, adam_m, adam_v);
}

static void cuda_download_grads(gdn_model *m, float *grads) { gdn_cuda_model_download_grads(gpu(m), grads); }

static void cuda_zero_grads(gdn_model *m) { gdn_cuda_model_zero_grads(gpu(m)); }

static double cuda_forward(gdn_model *m, const int *tokens, const int *targets, float grad_scale, int *n_valid,
                           const gdn_capture *capture) {
    double loss = gdn_cuda_model_forward(gpu(m), tokens, targets, grad_scale, n_valid);
    for (int i = 0; capture && i < capture->n; i++) {
        gdn_cuda_model_download_hidden(gpu(m), capture->layers[i], capture->out[i]);
        if (capture->mid && capture->mid[i]) gdn_cuda_model_download_mid(gpu(m), capture->layers[i], capture->mid[i]);
    }
    return loss;
}

static double cuda_forward_kl(gdn_model *m, const int *tokens, const int *targets, const gdn_soft_targets *soft,
                              float grad_scale, int *n_valid, double *kl_sum, double *ce_sum) {
    return gdn_cuda_model_forward_kl(gpu(m), tokens, targets, soft->logits, soft->teacher ? gpu(soft->teacher) : NULL,
                                     soft->tau, soft->ce_weight, grad_scale, n_valid, kl_sum, ce_sum);
}

static double cuda_mixer_mse(gdn_model *m, int layer, const gdn_mixer_targets *t, float grad_scale) {
    return gdn_cuda_model_mixer_mse(gpu(m), layer, t->x_in, t->target, t->teacher ? gpu(t->teacher) : NULL, grad_scale);
}

static void cuda_logits(gdn_model *m, float *out) { gdn_cuda_model_download_logits(gpu(m), out); }

static void cuda_backward(gdn_model *m, gdn_grads_ready_fn ready, void *ctx) {
    gdn_cuda_model_backward_ready(gpu(m), ready, ctx);
}

static float *cuda_params(gdn_model *m) { return gdn_cuda_model_params(gpu(m)); }
static float *cuda_grads(gdn_model *m) { return gdn_cuda_model_grads(gpu(m)); }
static double cuda_grad_sumsq(gdn_model *m) { return gdn_cuda_model_grad_sumsq(gpu(m)); }

static double cuda_adamw_step(gdn_model *m, const gdn_adamw_hparams *h, int64_t step, double grad_clip) {
    return gdn_cuda_model_adamw_step(gpu(m), h, step, grad_clip);
}

static void cuda_adamw_shard(gdn_model *m, const gdn_adamw_hparams *h, int64_t step, double gnorm,
                             double grad_clip) {
    gdn_cuda_model_adamw_shard(gpu(m), h, step, gnorm, grad_clip);
}

static void cuda_params_changed(gdn_model *m) { gdn_cuda_model_params_changed(gpu(m)); }

static void cuda_write_range(gdn_model *m, int grads, size_t lo, size_t hi, const float *src) {
    gdn_cuda_model_write_range(gpu(m), grads, lo, hi, src);
}

static void cuda_set_seq_hooks(gdn_model *m, const gdn_seq_hooks *hooks) {
    gdn_cuda_model_set_seq_hooks(gpu(m), hooks);
}

static int cuda_set_doc_starts(gdn_model *m, const unsigned char *starts) {
    return gdn_cuda_model_set_doc_starts(gpu(m), starts);
}

static void *cuda_stream(gdn_model *m) { return gdn_cuda_model_stream(gpu(m)); }

static void cuda_memory(const gdn_model *m, size_t *param_bytes, size_t *act_bytes) {
    gdn_cuda_model_memory(((const cuda_model *)m)->gpu, param_bytes, act_bytes);
}

static const gdn_backend backend = {
    .name = "cuda",
    .create = cuda_create,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .download_grads = cuda_download_grads,
    .zero_grads = cuda_zero_grads,
    .forward = cuda_forward,
    .logits = cuda_logits,
    .backward = cuda_backward,
    .forward_kl = cuda_forward_kl,
    .mixer_mse = cuda_mixer_mse,
    .params = cuda_params,
    .grads = cuda_grads,
    .grad_sumsq = cuda_grad_sumsq,
    .adamw_step = cuda_adamw_step,
    .adamw_shard = cuda_adamw_shard,
    .params_changed = cuda_params_changed,
    .write_range = cuda_write_range,
    .set_seq_hooks = cuda_set_seq_hooks,
    .set_doc_starts = cuda_set_doc_starts,
    .stream = cuda_stream,
    .memory = cuda_memory,
};

const gdn_backend *gdn_backend_cuda(void) { return &backend; }

int gdn_backend_gpu_count(void) { return gdn_cuda_device_count(); }
