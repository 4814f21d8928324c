/* The CUDA model's AdamW step: over the whole buffer, or over one ZeRO-1 shard. */
#include "model/cuda/model_cuda_internal.cuh"

/* ---- optimizer ------------------------------------------------------------------------------------------ */
extern "C" double gdn_cuda_model_adamw_step(gdn_cuda_model *m, const gdn_adamw_hparams *h, int64_t step,
                                            double grad_clip) {
    const size_t n = m->t->total;
    if (m->lo != 0 || m->hi != n)
        GDN_CUDA_DIE("gdn_cuda_model_adamw_step on a model with a sharded optimizer state: use "
                     "gdn_cuda_model_adamw_shard");
    m->prof_phase = 2;
    PF(PR_OPT, gdn_cuda_grad_norm(m->gnorm_d, m->grads, n, m->op_ws, m->stream);
               gdn_cuda_adamw(m->params, m->grads, m->adam_m, m->adam_v, m->wact, n, m->run_end, m->run_decay,
                              m->run_act, m->n_runs, h, step, m->gnorm_d, grad_clip, m->stream));
    double gnorm = 0.0;
    GDN_CUDA_CHECK(cudaMemcpyAsync(&gnorm, m->gnorm_d, sizeof gnorm, cudaMemcpyDeviceToHost, m->stream));
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
    return gnorm;
}

/* ---- ZeRO-1: the optimizer step of a shard ------------------------------------------------------------- */
extern "C" float *gdn_cuda_model_params(gdn_cuda_model *m) { return m->params; }

extern "C" float *gdn_cuda_model_grads(gdn_cuda_model *m) { return m->grads; }

extern "C" double gdn_cuda_model_grad_sumsq(gdn_cuda_model *m) {
    gdn_cuda_grad_sumsq(m->gnorm_d, m->grads + m->lo, m->hi - m->lo, m->op_ws, m->stream);
    double s = 0.0;
    GDN_CUDA_CHECK(cudaMemcpyAsync(&s, m->gnorm_d, sizeof s, cudaMemcpyDeviceToHost, m->stream));
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
    return s;
}

extern "C" void gdn_cuda_model_adamw_shard(gdn_cuda_model *m, const gdn_adamw_hparams *h, int64_t step,
                                           double gnorm, double grad_clip) {
    /* the kernel reads the norm from the device, as gdn_cuda_model_adamw_step's */
    GDN_CUDA_CHECK(cudaMemcpyAsync(m->gnorm_d, &gnorm, sizeof gnorm, cudaMemcpyHostToDevice, m->stream));
    gdn_cuda_adamw(m->params + m->lo, m->grads + m->lo, m->adam_m, m->adam_v, NULL, m->hi - m->lo, m->shard_end,
                   m->shard_decay, NULL, m->n_shard_runs, h, step, m->gnorm_d, grad_clip, m->stream);
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

extern "C" void gdn_cuda_model_params_changed(gdn_cuda_model *m) { gdn_cuda_model_refresh_act(m); }

