/* One interface to the language model on either backend (docs/design.md section 7.1): a table of
 * functions that the CPU model (model/cpu/backend_cpu.c) and the CUDA model
 * (model/cuda/backend_cuda.c) implement, so that training, evaluation, sampling, checkpoints and
 * ZeRO are written once.
 *
 * Memory: a model owns its parameters, gradients and AdamW moments in the backend's memory (host
 * for the CPU, device for CUDA) as flat fp32 buffers with the offsets of the parameter table.
 * params() and grads() return those buffers, for collectives over a gdn_comm whose data plane
 * works on that memory (MPI for the CPU, NCCL for CUDA). upload / download copy them from / to the
 * host (for the CPU they are plain copies).
 *
 * Sharded optimizer state (ZeRO-1, train/zero.h): a model made with shard [lo, hi) of a buffer of
 * `padded` elements keeps moments for [lo, hi) only, and its parameter and gradient buffers hold
 * `padded` elements (the tail past the table's total stays zero). Unsharded: lo = 0,
 * hi = padded = total. */
#ifndef GDN_MODEL_BACKEND_H
#define GDN_MODEL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "model/adamw_hparams.h"
#include "model/params.h"
#include "model/seq_hooks.h"

typedef enum { GDN_PRECISION_BF16, GDN_PRECISION_FP32 } gdn_precision;

/* "bf16" / "fp32" <-> the enum; parse returns 0, or -1 for another name. */
int gdn_precision_parse(const char *name, gdn_precision *out);
const char *gdn_precision_name(gdn_precision p);

typedef struct {
    int B, T;                /* micro-batch: B sequences (or segments) of T tokens */
    gdn_precision precision; /* the CPU model computes in fp32 whatever is asked */
    size_t lo, hi, padded;   /* optimizer shard; all 0: unsharded */
} gdn_model_shape;

/* Hidden states a forward pass copies out (for distillation): the residual stream after the
 * blocks listed in layers ([n] block indices from -1 = the embedding's output to n_layers - 1),
 * each [B,T,d_model] fp32, to out[i] (host). mid (NULL: not wanted): mid[i] (host, or NULL) receives the residual stream after block layers[i]'s
 * mixer, before its MLP (x_mid; layers[i] >= 0), so the block's mixer output is
 * mid[i] - (the stream after block layers[i] - 1). */
typedef struct {
    int n;
    const int *layers;
    float *const *out;
    float *const *mid;
} gdn_capture;

typedef struct gdn_model gdn_model;

/* The teacher's side of the end-to-end distillation loss (forward_kl): its logits on the same
 * tokens, either on the host or left where the teacher computed them. */
typedef struct {
    const float *logits;   /* [B,T,vocab] the teacher's logits (host), or NULL with teacher */
    gdn_model *teacher;    /* or: a model on the same backend and micro-batch shape whose last
                            * forward (grad_scale 0) ran on these tokens: its logits are read in
                            * its own memory (no copy through the host: a GPU teacher's
                            * [B,T,vocab] stays on the GPU) */
    double tau;            /* temperature (> 0) of both distributions */
    double ce_weight;      /* weight of the next-token cross-entropy added to the loss (>= 0) */
} gdn_soft_targets;

/* What a teacher-forced mixer fits (mixer_mse): the residual stream entering the block and the
 * teacher's mixer output there, either on the host or left where the teacher computed them. */
typedef struct {
    const float *x_in;       /* [B,T,d_model] the stream entering the block (host), or NULL with teacher */
    const float *target;     /* [B,T,d_model] the teacher's mixer output x_mid - x_in (host), or NULL */
    gdn_model *teacher;      /* or: a model on the same backend, micro-batch shape and d_model whose
                              * last forward (grad_scale 0) ran on these tokens: its stream entering
                              * the block and its output after the block's mixer are read in its own
                              * memory (no copy through the host: a GPU teacher's stays on the GPU) */
} gdn_mixer_targets;

/* Told, while a backward pass runs, that the gradients [lo, hi) of the flat buffer grads (the
 * model's memory) are complete for this pass. The ranges come from the end of the buffer to its
 * start, adjacent, and cover [0, total) once per pass: a reduction of a range may overlap the
 * rest of the pass (CUDA: ordered after the model's stream; the CPU calls it once, at the end). */
typedef void (*gdn_grads_ready_fn)(void *ctx, float *grads, size_t lo, size_t hi);

typedef struct gdn_backend gdn_backend;

/* A model of one backend. Each backend's own state follows this header in a larger struct (the
 * header first), reached by a cast inside the backend. */
struct gdn_model {
    const gdn_backend *backend;
    const gdn_param_table *table;
    gdn_model_shape shape; /* lo, hi, padded resolved (unsharded: 0, total, total) */
};

struct gdn_backend {
    const char *name; /* "cpu", "cuda" */
    /* A model for the table's configuration (the table must outlive it); parameters zero.
     * shape's lo = hi = padded = 0 means unsharded. */
    gdn_model *(*create)(const gdn_param_table *t, const gdn_model_shape *shape);
    void (*free)(gdn_model *m);
    /* Host <-> model copies of the flat fp32 buffers: params [total]; m, v the moments the model
     * holds ([hi - lo]). upload: m, v may be NULL (zeros); download: any pointer may be NULL. */
    void (*upload)(gdn_model *m, const float *params, const float *adam_m, const float *adam_v);
    void (*download)(gdn_model *m, float *params, float *adam_m, float *adam_v);
    void (*download_grads)(gdn_model *m, float *grads);
    void (*zero_grads)(gdn_model *m);
    /* Forward over host tokens [B,T] with next-token targets [B,T] (target < 0 ignored; NULL:
     * logits only). Returns the SUM of the token losses, sets *n_valid (may be NULL). grad_scale
     * != 0 prepares the backward pass of d(loss_sum * grad_scale). capture may be NULL. */
    double (*forward)(gdn_model *m, const int *tokens, const int *targets, float grad_scale, int *n_valid,
                      const gdn_capture *capture);
    /* Logits [B,T,vocab] of the last forward run with grad_scale = 0, to the host. */
    void (*logits)(gdn_model *m, float *out);
    /* Backward of the last forward (grad_scale != 0), ACCUMULATING into the gradients; ready
     * (NULL: none) is told as ranges complete. Returns with the gradients complete (CUDA:
     * enqueued on the model's stream; anything reading them is ordered after it). */
    void (*backward)(gdn_model *m, gdn_grads_ready_fn ready, void *ctx);
    /* Distillation (docs/distillation.md "Training"; NULL where a backend has none). forward_kl: forward as above whose loss per token with target >= 0 is
     * tau^2 KL(softmax(z_t/tau) || softmax(z/tau)) + ce_weight CE (z_t: soft's logits, z the
     * model's logits); returns its SUM, sets *n_valid and the unweighted sums *kl_sum, *ce_sum
     * (any may be NULL); grad_scale != 0 prepares backward() as forward does. mixer_mse: block
     * layer's mixer alone, teacher-forced on the residual input x_in, against target (the
     * teacher's mixer output; gdn_mixer_targets): returns the sum of
     * squared errors of its output x_mid - x_in, and with grad_scale != 0 ACCUMULATES
     * d(sse * grad_scale) into the gradients of that block's mixer and input norm (no
     * gradient reaches anything else). The CPU runs both under sequence-parallel hooks (each
     * segment's part; the CUDA model whole sequences only); mixer_mse replaces the activations
     * of the last forward. */
    double (*forward_kl)(gdn_model *m, const int *tokens, const int *targets, const gdn_soft_targets *soft,
                         float grad_scale, int *n_valid, double *kl_sum, double *ce_sum);
    double (*mixer_mse)(gdn_model *m, int layer, const gdn_mixer_targets *t, float grad_scale);
    /* The flat buffers [padded] in the model's memory. */
    float *(*params)(gdn_model *m);
    float *(*grads)(gdn_model *m);
    /* Sum of squares of the gradients [lo, hi). */
    double (*grad_sumsq)(gdn_model *m);
    /* Clip (grad_clip > 0) to the global norm and one AdamW update of an unsharded model;
     * returns the gradient norm before clipping. */
    double (*adamw_step)(gdn_model *m, const gdn_adamw_hparams *h, int64_t step, double grad_clip);
    /* AdamW on [lo, hi) with the model's moments, the gradient first multiplied by
     * grad_clip / gnorm when grad_clip > 0 and gnorm > grad_clip (gnorm: the global norm). */
    void (*adamw_shard)(gdn_model *m, const gdn_adamw_hparams *h, int64_t step, double gnorm, double grad_clip);
    /* The parameters changed in place in the model's memory (an all-gather): refresh copies. */
    void (*params_changed)(gdn_model *m);
    /* Overwrites [lo, hi) of the flat parameter buffer (grads = 0; call params_changed after the
     * last write) or gradient buffer (grads = 1) with src (host, hi - lo floats), or with zeros
     * where src is NULL. Synchronous. */
    void (*write_range)(gdn_model *m, int grads, size_t lo, size_t hi, const float *src);
    /* Every later pass runs as one segment through hooks (copied; NULL: whole sequences). */
    void (*set_seq_hooks)(gdn_model *m, const gdn_seq_hooks *hooks);
    /* Document starts for every later pass: starts [B,T] (host, copied), 1 where a document
     * begins at that position (every mixer resets there: no state, convolution tap or attention
     * crosses it), 0 elsewhere; NULL: none (each row is one stretch of text). Returns 0, or -1
     * with the reason printed when this backend cannot run documents. */
    int (*set_doc_starts)(gdn_model *m, const unsigned char *starts);
    /* The stream the model's work runs on (a cudaStream_t), or NULL (CPU: synchronous). */
    void *(*stream)(gdn_model *m);
    /* Bytes of the parameter / optimizer allocation and of activations and scratch. */
    void (*memory)(const gdn_model *m, size_t *param_bytes, size_t *act_bytes);
};

extern const gdn_backend gdn_backend_cpu;
/* The CUDA backend, or NULL in a build without CUDA (model/backends.c). */
const gdn_backend *gdn_backend_cuda(void);
/* GPUs visible to the CUDA backend (0 without CUDA). */
int gdn_backend_gpu_count(void);

#endif
