/* The whole model on the CPU, declared per precision (included twice by model_cpu.h with
 * GDN_OPS_REAL / GDN_OPS_R set, like ops_cpu_decl.h). */
#define real_ GDN_OPS_REAL
#define R_ GDN_OPS_R

/* Saved activations of one forward pass at batch B x length T (opaque). */
typedef struct R_(gdn_cpu_acts) R_(gdn_cpu_acts);

/* State carried across a sequence boundary, per layer: the delta-rule state and the last
 * W-1 pre-convolution rows of q, k and v; for attention layers (mixer A) a KV cache and the
 * position. Used for recurrent decoding and sequence parallelism. Buffers are owned by the
 * caller; any pointer may be NULL (= zeros / not wanted).
 * The KV cache: the keys (after the q/k norm and RoPE) and values of every attention layer, in
 * the order of the layers, positions 0 .. pos-1 of each sequence filled. A forward pass with
 * carry_in starts at position carry_in->pos and reads those rows; with carry_out it writes
 * positions 0 .. pos+T-1 of carry_out's cache (the carried rows are copied unless the two
 * carries share the cache buffers, which they may) and sets carry_out->pos = pos + T. */
typedef struct {
    real_ *S;      /* [n_layers][B,H,K,V] */
    real_ *halo_q; /* [n_layers][B,W-1,H*K] */
    real_ *halo_k; /* [n_layers][B,W-1,H*K] */
    real_ *halo_v; /* [n_layers][B,W-1,H*V] */
    real_ *kv_k;   /* [attention layers][B,kv_len,n_kv_heads,attn_head_dim] */
    real_ *kv_v;   /* the same shape */
    int kv_len;    /* positions per sequence of kv_k and kv_v */
    int pos;       /* tokens of each sequence before the segment */
} R_(gdn_cpu_carry);

/* The delta-rule inputs of one layer, as the sequence-parallel hooks see them (their `delta`). */
typedef struct {
    const gdn_delta_shape *shape;
    const real_ *q, *k;       /* [B,T,H,K] */
    const real_ *v;           /* [B,T,H,V] */
    const real_ *g, *beta;    /* [B,T,H] */
    real_ scale;
    const real_ *d_o;         /* [B,T,H,V] gradient of the output (backward hooks only) */
} R_(gdn_cpu_delta_args);

R_(gdn_cpu_acts) *R_(gdn_cpu_acts_create)(const gdn_param_table *t, int B, int T);
void R_(gdn_cpu_acts_free)(R_(gdn_cpu_acts) *a);
/* Runs every later forward/backward on a as one segment of a longer sequence through hooks
 * (model/seq_hooks.h; copied; NULL switches back to whole sequences). Needs T >= conv_width - 1;
 * carry_in and carry_out must then be NULL. The hooks see host buffers of real_ (states
 * [B,H,K,V], n_state = B*H*K*V; halos n_halo = B*(W-1)*{H*K, H*K, H*V}; attention keys and
 * values n_kv = B*T*n_kv_heads*attn_head_dim, their prefix [B,pos0+T,...], held per attention
 * layer from set_seq_hooks on), `delta` is a const R_(gdn_cpu_delta_args) *, every call is
 * synchronous and the state hooks return NULL. */
void R_(gdn_cpu_acts_set_seq_hooks)(R_(gdn_cpu_acts) *a, const gdn_seq_hooks *hooks);

/* Document starts for every later pass (docs/design.md section 3.8): starts [B,T] (copied), 1
 * where a document begins at that position: every mixer resets there (no state, convolution
 * tap or attention crosses it; RoPE positions restart). NULL: none. Under sequence-parallel
 * hooks the starts are the segment's and the hooks must have doc_prev. A carried KV cache
 * (decoding) cannot be combined with starts. */
void R_(gdn_cpu_acts_set_doc_starts)(R_(gdn_cpu_acts) *a, const unsigned char *starts);

/* Forward over tokens [B,T] with next-token targets [B,T] (target < 0: ignored; targets may be
 * NULL to only compute logits). Returns the SUM of the token losses and sets *n_valid (may be NULL).
 * grad_scale != 0 prepares the backward pass: d(loss_sum * grad_scale)/dlogits is kept.
 * carry_in / carry_out may be NULL; they may not alias each other. */
double R_(gdn_cpu_forward)(R_(gdn_cpu_acts) *a, const gdn_param_table *t, const real_ *params,
                           const int *tokens, const int *targets, real_ grad_scale, int *n_valid,
                           const R_(gdn_cpu_carry) *carry_in, R_(gdn_cpu_carry) *carry_out);
/* Logits [B,T,vocab] of the last forward pass (valid when it was run with grad_scale = 0). */
const real_ *R_(gdn_cpu_logits)(const R_(gdn_cpu_acts) *a);
/* The residual stream [B,T,d_model] of the last forward pass after block `layer` (-1: the
 * embedding), fp32 or fp64 as the model. */
const real_ *R_(gdn_cpu_hidden)(const R_(gdn_cpu_acts) *a, int layer);
/* The residual stream [B,T,d_model] of the last forward pass after block `layer`'s mixer, before
 * its MLP (x_mid; 0 <= layer < n_layers). */
const real_ *R_(gdn_cpu_hidden_mid)(const R_(gdn_cpu_acts) *a, int layer);
/* Bytes held by a (activations and scratch). */
size_t R_(gdn_cpu_acts_bytes)(const R_(gdn_cpu_acts) *a);
/* Backward of the last forward (run with grad_scale != 0): ACCUMULATES into grads [total]. */
void R_(gdn_cpu_backward)(R_(gdn_cpu_acts) *a, const gdn_param_table *t, const real_ *params,
                          real_ *grads);

/* Distillation, end to end (docs/distillation.md "Training"): a forward pass whose loss per
 * token with target >= 0 is  tau^2 KL(softmax(z_t / tau) || softmax(z_s / tau)) + ce_weight CE,
 * z_t the teacher's logits teacher [B,T,vocab], z_s the model's, CE the next-token
 * cross-entropy. Returns its SUM over those tokens, sets *n_valid and the unweighted sums of KL
 * and CE (*kl_sum, *ce_sum; may be NULL); grad_scale != 0 prepares the backward pass of
 * d(loss_sum * grad_scale) (gdn_cpu_backward). Whole sequences only (no carry). */
double R_(gdn_cpu_forward_kl)(R_(gdn_cpu_acts) *a, const gdn_param_table *t, const real_ *params,
                              const int *tokens, const int *targets, const real_ *teacher, double tau,
                              double ce_weight, real_ grad_scale, int *n_valid, double *kl_sum,
                              double *ce_sum);
/* Distillation, teacher-forced (stage 1): block `layer`'s mixer alone on the residual input
 * x_in [B,T,d_model] (the teacher's input to that block), its output y = x_mid - x_in compared
 * with target [B,T,d_model]: returns the sum of squared errors sum (y - target)^2 and, with
 * grad_scale != 0, ACCUMULATES d(sse * grad_scale)/dparams of that block's mixer and input norm
 * into grads (nothing flows into x_in). Overwrites the activations of the last forward pass.
 * Under sequence-parallel hooks it runs this segment, the layer's halo and state (or keys and
 * values) and their gradients crossing the segments as in a whole pass: every segment calls it
 * for the same layers in the same order, and the segments' sums and gradients add up to the
 * whole sequence's. */
double R_(gdn_cpu_mixer_mse)(R_(gdn_cpu_acts) *a, const gdn_param_table *t, const real_ *params,
                             real_ *grads, int layer, const real_ *x_in, const real_ *target,
                             real_ grad_scale);

#undef real_
#undef R_
