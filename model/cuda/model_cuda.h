/* The GDN language model on one NVIDIA GPU: forward (+ loss), hand-written backward and AdamW,
 * mirroring the CPU model (model/cpu/model_cpu.h) block for block, with any pattern of the
 * delta-rule mixers G, D, M, L and softmax attention A (model/mixer.h; model/cuda/cuda_mixers.h
 * says which kinds run here). Sequence parallelism (gdn_cuda_model_set_seq_hooks) runs every kind;
 * attention layers need the hooks attn_kv_fwd / attn_kv_bwd and pos0 (model/seq_hooks.h).
 *
 * Device memory: one allocation holds the fp32 parameters, gradients and AdamW moments (each a
 * flat buffer with the offsets of the parameter table; the moments of a sharded model cover its
 * shard only) and, in BF16 mode, the bf16 copy of the
 * parameters that the GEMMs read (refreshed by every upload and AdamW step); a second one holds
 * the saved activations and every scratch buffer for B x T tokens.
 *
 * Precision (docs/design.md section 4.2): GDN_CUDA_FP32 runs every tensor in fp32 (for tests); GDN_CUDA_BF16
 * stores activations and matrix inputs in bf16 with fp32 accumulation, and keeps the residual
 * stream, norm statistics, gates, delta-rule states, parameters, gradients and moments in fp32.
 *
 * Every op here reduces in a fixed order (no float atomics), so a step is bitwise repeatable
 * whenever the delta-rule kernels are. Every CUDA / cuBLAS failure is fatal through gdn_die_at
 * (model/check.h: file:line, then exit status 1 or the installed handler). No carried state across
 * sequence boundaries (each sequence starts from a zero state and zero convolution history). */
#ifndef GDN_MODEL_CUDA_H
#define GDN_MODEL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "model/cuda/ops_cuda.h"
#include "model/params.h"
#include "model/seq_hooks.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gdn_cuda_model gdn_cuda_model;

/* A model for the table's configuration and micro-batches of B x T tokens on the current device.
 * Parameters start at zero: upload them. The table must outlive the model. */
gdn_cuda_model *gdn_cuda_model_create(const gdn_param_table *t, int B, int T, gdn_cuda_precision p);
/* The same model with the optimizer state sharded (ZeRO-1, train/zero.h): the AdamW moments cover
 * only the elements [lo, hi) of the flat buffer, and the parameter and gradient buffers hold
 * padded >= t->total elements (the tail stays zero) so that equal blocks of a reduce-scatter and
 * an all-gather tile them. Such a model steps with gdn_cuda_model_adamw_shard, not
 * gdn_cuda_model_adamw_step. create(t, B, T, p) is create_sharded(t, B, T, p, 0, total, total). */
gdn_cuda_model *gdn_cuda_model_create_sharded(const gdn_param_table *t, int B, int T, gdn_cuda_precision p,
                                              size_t lo, size_t hi, size_t padded);
void gdn_cuda_model_free(gdn_cuda_model *m);

/* Host <-> device copies of the flat fp32 buffers: params [t->total], adam_m / adam_v the moments
 * the model holds ([hi - lo] of a sharded model, else [t->total]). Upload: adam_m / adam_v may be
 * NULL (zeros). Download: any pointer may be NULL (skipped). Synchronous. */
void gdn_cuda_model_upload(gdn_cuda_model *m, const float *params, const float *adam_m, const float *adam_v);
void gdn_cuda_model_download(gdn_cuda_model *m, float *params, float *adam_m, float *adam_v);
void gdn_cuda_model_download_grads(gdn_cuda_model *m, float *grads);
/* Sets the gradients to zero (before the first micro-batch of a step). */
void gdn_cuda_model_zero_grads(gdn_cuda_model *m);

/* Forward over HOST tokens [B,T] with next-token targets [B,T] (target < 0: ignored; targets may
 * be NULL to only compute logits). Returns the SUM of the token losses and sets *n_valid (may be
 * NULL). grad_scale != 0 prepares the backward pass: d(loss_sum * grad_scale)/dlogits is kept.
 * Dies naming the position when a token or target is outside the vocabulary. Synchronous. */
double gdn_cuda_model_forward(gdn_cuda_model *m, const int *tokens, const int *targets, float grad_scale,
                              int *n_valid);
/* Logits [B,T,vocab] of the last forward run with grad_scale = 0, widened to fp32, to the host. */
void gdn_cuda_model_download_logits(gdn_cuda_model *m, float *logits);
/* The fp32 residual stream [B,T,d_model] after block `layer` of the last forward (layer -1: the
 * embedding's output; up to n_layers - 1), to the host (for distillation). Dies on any other layer
 * or before the first forward. Synchronous. */
void gdn_cuda_model_download_hidden(gdn_cuda_model *m, int layer, float *out);
/* Distillation (model/backend.h forward_kl, mixer_mse, gdn_capture.mid; docs/distillation.md):
 * the forward above with the loss tau^2 KL(softmax(teacher/tau) || softmax(logits/tau)) +
 * ce_weight CE per row with target >= 0; the teacher's logits are teacher (HOST [B,T,vocab] fp32)
 * or, with teacher NULL, those of the last forward of teacher_model (a model of the same B, T and
 * vocabulary run with grad_scale 0), read on the GPU. Returns the loss sum and the unweighted KL
 * and CE sums. Synchronous. */
double gdn_cuda_model_forward_kl(gdn_cuda_model *m, const int *tokens, const int *targets, const float *teacher,
                                 gdn_cuda_model *teacher_model, double tau, double ce_weight, float grad_scale,
                                 int *n_valid, double *kl_sum, double *ce_sum);
/* The residual stream [B,T,d_model] after block `layer`'s mixer (before its MLP) of the last
 * forward, to the host. Synchronous. */
void gdn_cuda_model_download_mid(gdn_cuda_model *m, int layer, float *out);
/* Block `layer`'s input norm and mixer alone on x_in [B,T,d_model] (HOST): returns the sum of
 * squared errors of its output x_mid - x_in against target (HOST), and with grad_scale != 0
 * ACCUMULATES d(sse * grad_scale) into the gradients of that block's mixer and input norm only.
 * With teacher (x_in and target NULL): x_in and target from the teacher model's last forward (its
 * stream entering the block; its mixer output minus that), read on the device. Replaces the
 * activations of the last forward; whole sequences only (no hooks). Synchronous. */
double gdn_cuda_model_mixer_mse(gdn_cuda_model *m, int layer, const float *x_in, const float *target,
                                const gdn_cuda_model *teacher, float grad_scale);
/* Backward of the last forward (run with grad_scale != 0): ACCUMULATES into the device gradients.
 * Asynchronous. */
void gdn_cuda_model_backward(gdn_cuda_model *m);

/* Told on the host, while a backward pass is being enqueued, that the gradients [lo, hi) of the
 * flat buffer grads (device, [total]) are complete for this pass: their last writes are enqueued
 * on the model's stream (gdn_cuda_model_stream), so work ordered after it may read them while
 * the rest of the pass runs. The ranges come from the end of the buffer to its start, adjacent,
 * and cover [0, total) once per pass (one per block, the head and final norm first, the
 * embedding last). For data parallelism: reducing a range overlaps the rest of the backward. */
typedef void (*gdn_cuda_grads_ready_fn)(void *ctx, float *grads, size_t lo, size_t hi);
/* gdn_cuda_model_backward, calling ready (NULL: none) for each range as it completes. */
void gdn_cuda_model_backward_ready(gdn_cuda_model *m, gdn_cuda_grads_ready_fn ready, void *ctx);
/* The stream every op of the model runs on (a cudaStream_t). Work of other streams that the model
 * must wait for (e.g. a gradient reduction before gdn_cuda_model_adamw_step) is ordered before
 * the model's next op with cudaStreamWaitEvent on it. */
void *gdn_cuda_model_stream(gdn_cuda_model *m);

/* Clips the gradients to grad_clip in global L2 norm (when grad_clip > 0) and applies one AdamW
 * update (train/optim.c semantics; step is 1-based; norms, A_log and dt_bias get no weight decay).
 * Returns the gradient norm before clipping. Synchronous. Not for a sharded model. */
double gdn_cuda_model_adamw_step(gdn_cuda_model *m, const gdn_adamw_hparams *h, int64_t step,
                                 double grad_clip);

/* ZeRO-1 (a sharded model; the trainer's order): reduce-scatter the device gradients
 * (gdn_cuda_model_grads) so that [lo, hi) holds the job's sum; gdn_cuda_model_grad_sumsq, added
 * over the ranks, gives the global norm; gdn_cuda_model_adamw_shard updates the parameters
 * [lo, hi); all-gather the parameters (gdn_cuda_model_params); gdn_cuda_model_params_changed.
 * The device buffers [padded]: */
float *gdn_cuda_model_params(gdn_cuda_model *m);
float *gdn_cuda_model_grads(gdn_cuda_model *m);
/* Sum of the squares of the gradients [lo, hi). Synchronous. */
double gdn_cuda_model_grad_sumsq(gdn_cuda_model *m);
/* AdamW on the parameters [lo, hi) with the model's moments, the gradient first multiplied by
 * grad_clip / gnorm when grad_clip > 0 and gnorm > grad_clip (gnorm: the global norm); per element
 * exactly gdn_cuda_model_adamw_step's update. The bf16 copy is not refreshed. Synchronous. */
void gdn_cuda_model_adamw_shard(gdn_cuda_model *m, const gdn_adamw_hparams *h, int64_t step, double gnorm,
                                double grad_clip);
/* Refreshes the bf16 copy of the parameters (BF16 mode) after the fp32 ones were changed in place
 * on the device (an all-gather); ordered on the model's stream. */
void gdn_cuda_model_params_changed(gdn_cuda_model *m);
/* [lo, hi) of the device parameters (grads = 0; then gdn_cuda_model_params_changed) or gradients
 * (grads = 1) from HOST src (hi - lo floats), or zeros where src is NULL. Synchronous. */
void gdn_cuda_model_write_range(gdn_cuda_model *m, int grads, size_t lo, size_t hi, const float *src);

/* Device bytes of the two allocations (parameters and optimizer state; activations and scratch). */
void gdn_cuda_model_memory(const gdn_cuda_model *m, size_t *param_bytes, size_t *act_bytes);

/* ---- sequence parallelism (docs/design.md section 5) -------------------------------------------------
 * Runs every later forward/backward as one segment of longer sequences through hooks
 * (model/seq_hooks.h; copied; NULL switches back to whole sequences). Needs T >= conv_width - 1.
 * Allocates the boundary buffers on first use. The hooks see DEVICE buffers: halos of the
 * activation type (bf16 in BF16 mode), states of n_state floats in the delta kernels' layout;
 * `delta` is NULL. They are called on the host while the model enqueues its work on its stream
 * (gdn_cuda_model_stream): a fill is enqueued so that the stream's next work sees it (e.g.
 * cudaMemsetAsync on the stream, or a receive on another stream followed by cudaStreamWaitEvent);
 * fwd_state_in / bwd_state_out may instead return a cudaEvent_t recorded after the fill, and then
 * only the delta rule's state pass waits for it (gdn_cuda_delta_fwd_args.h0_ready / gdn_cuda_delta_bwd_args.dht_ready): the
 * intra-chunk work runs while the state crosses. dS_out is one buffer shared by the layers,
 * written in stream order. */
void gdn_cuda_model_set_seq_hooks(gdn_cuda_model *m, const gdn_seq_hooks *hooks);

/* ---- documents (docs/design.md section 3.8) -------------------------------------------------
 * Document starts for every later pass: starts [B,T] (host, copied to the device), 1 where a
 * document begins; NULL: none (starts only at t = 0 run as none: nothing of a whole-sequence
 * pass comes from before row 0, and attention keeps its fastest kernels). Every mixer resets at a start: the
 * delta-rule state, the convolution taps, attention (a query sees its document's keys) and RoPE
 * (positions counted from the document's start), as the CPU model does. Sequence parallelism
 * with documents is not supported on CUDA: returns -1 with the reason printed (also when hooks
 * are set later, the forward stops with the reason). Returns 0 otherwise. */
int gdn_cuda_model_set_doc_starts(gdn_cuda_model *m, const unsigned char *starts);

/* ---- training-step benchmark (for `gdn bench --backend cuda --what step`) -------------------- */
typedef struct {
    double step_ms;          /* median of whole steps: zero grads, forward + loss, backward, AdamW */
    double fwd_ms, bwd_ms, opt_ms; /* medians of the parts (CUDA events) */
    double delta_ms;         /* the delta-rule kernels alone at the layer shape, fwd + bwd, summed over the
                                layers (each with its mixer) */
    double tokens_per_s;     /* B*T / step */
    double mfu;              /* 6 x matmul params x tokens/s / 701e12 (docs/design.md section 9) */
    size_t matmul_params;
    size_t param_bytes, act_bytes; /* the model's two allocations */
    size_t device_used, device_total; /* cudaMemGetInfo after the steps */
    double first_loss, last_loss; /* mean token loss of the first and last timed step */
    double gemm_ms;          /* cuBLAS time of one step (events around each launch) */
    char breakdown[4096];    /* tables: ms per kind of work in forward, backward, optim; top launch sites */
} gdn_cuda_step_bench;
/* Builds a model from the host parameters [t->total] (e.g. gdn_params_init), trains `warmup` +
 * `repeats` steps (AdamW, clip 1) on fixed pseudo-random tokens and times the repeats; then times
 * the delta-rule kernels alone at the layer shape. matmul_params: gdn_param_matmul_count(t), for
 * the MFU. */
void gdn_cuda_model_bench(const gdn_param_table *t, const float *params, size_t matmul_params, int B,
                          int T, gdn_cuda_precision p, int warmup, int repeats,
                          gdn_cuda_step_bench *out);

#ifdef __cplusplus
}
#endif

#endif
