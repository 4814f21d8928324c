/* The sequence-parallel hooks every backend's model calls (docs/design.md section 5): one struct
 * for the CPU model (host buffers) and the CUDA model (device buffers, work ordered on the
 * model's stream).
 *
 * The model runs one contiguous segment of longer sequences and asks the hooks, per delta-rule
 * layer, for what crosses the segment boundaries: the last W-1 pre-convolution rows of q, k, v
 * (the halo) and the delta-rule state entering the segment; in the backward pass the gradients
 * of this segment's last W-1 rows and of its leaving state. The model stays free of any
 * communication library (comm/seqpar.c implements the hooks over MPI, comm/seqpar_cuda.c over
 * NCCL). The six delta-rule hooks must be set; the two attention hooks and pos0 are read only by
 * a model with attention layers (mixer A).
 *
 * Attention layers need every key and value before the segment's own rows: per layer the hooks
 * hand the model those of the whole prefix, positions 0 .. pos0+T-1 (an all-gather over the
 * segments), and in the backward pass take the gradient the segment computed for all of them,
 * returning the gradient of its own rows summed over every segment that read them (a
 * reduce-scatter). Keys are after the k norm and RoPE at their global positions.
 *
 * Buffers are the model's: element type float (or double for the CPU model's fp64 build) for
 * states, the model's activation type for halos (bf16 for the CUDA model in bf16 mode). Arrays of
 * three are q, k, v: halos and tails [B,W-1,H*K] for q and k and [B,W-1,H*V] for v, n_halo[i]
 * elements each; states n_state elements in the backend's delta-rule layout (opaque to the hooks:
 * both ends of a boundary are the same model).
 *
 * Ordering (CUDA): hooks are called on the host while the model enqueues its work on its stream;
 * a hook that fills a buffer enqueues the fill so that the stream's next work sees it, a hook that
 * reads a buffer orders its reads after the work enqueued so far. Buffers a hook reads (tail,
 * S_out, dS_in, dhalo) are per layer and stay unchanged until the same hook is called for the same
 * layer in the next pass, so sends may complete late. On the CPU every call is synchronous.
 *
 * Attention arrays of two are k, v: this segment's [B,T,C] (n_kv elements each, C = n_kv_heads *
 * attn_head_dim, the model's activation type) and the prefix's [B,pos0+T,C].
 *
 * delta: the backend's description of the layer's delta-rule inputs, for exchanges that need
 * more than the state (the CPU "gather" exchange computes the segment's affine map from it): a
 * gdn_cpu_delta_args_f32 / _f64 (model/cpu/model_cpu_decl.h) on the CPU, NULL on the GPU. */
#ifndef GDN_MODEL_SEQ_HOOKS_H
#define GDN_MODEL_SEQ_HOOKS_H

#include <stddef.h>

typedef struct {
    void *user;
    /* Forward, after the projections: tail holds this segment's last W-1 rows; fill halo with
     * the previous segment's (zeros for the first segment). */
    void (*fwd_halo)(void *user, int layer, void *const halo[3], const void *const tail[3], const size_t n_halo[3]);
    /* Forward, before the delta rule: fill S_in with the state entering this segment. Returns
     * NULL when the fill is done (CPU) or ordered on the model's stream, or a ready event (a
     * cudaEvent_t recorded after a fill on another stream): then only the delta rule's state
     * pass waits for it. The model waits for the event's current record before the next hook
     * call. */
    void *(*fwd_state_in)(void *user, int layer, const void *delta, void *S_in, size_t n_state);
    /* Forward, after the delta rule: the state leaving this segment. */
    void (*fwd_state_out)(void *user, int layer, const void *S_out, size_t n_state);
    /* Backward, before the delta rule: fill dS_out with the gradient of the leaving state
     * (zeros for the last segment). Returns NULL or a ready event, as fwd_state_in. */
    void *(*bwd_state_out)(void *user, int layer, const void *delta, void *dS_out, size_t n_state);
    /* Backward, after the delta rule: the gradient of the entering state. */
    void (*bwd_state_in)(void *user, int layer, const void *dS_in, size_t n_state);
    /* Backward, after the convolutions: dhalo is the gradient of the halo rows (they belong to
     * the previous segment); fill dtail with the gradient of this segment's tail rows from the
     * next segment (zeros for the last), which the model adds to its own. */
    void (*bwd_halo)(void *user, int layer, void *const dtail[3], const void *const dhalo[3], const size_t n_halo[3]);
    /* Attention layer, forward, after RoPE: kv holds this segment's keys and values; fill kv_all
     * with those of positions 0 .. pos0+T-1 of the sequence (this segment's included, at pos0). */
    void (*attn_kv_fwd)(void *user, int layer, void *const kv_all[2], const void *const kv[2], size_t n_kv);
    /* Attention layer, backward, after the attention op: dkv_all is this segment's gradient of the
     * keys and values of positions 0 .. pos0+T-1; fill dkv with the gradient of this segment's own
     * rows, summed over this segment and every later one (each read them). dkv_all may be
     * overwritten. */
    void (*attn_kv_bwd)(void *user, int layer, void *const dkv[2], void *const dkv_all[2], size_t n_kv);
    /* Documents (optional; a model given document starts needs it): forward, once per pass
     * before the first layer, on every segment whether or not it has starts. last[b] is the
     * position in the sequence of this segment's last document start in row b, or -1 for none;
     * fill prev[b] with the largest last[b] of the segments before this one, or -1 for none
     * (the first segment: -1). The model cuts the convolution halo and masks the attention
     * prefix with it (a reset inside a segment needs nothing more: the state the segment hands
     * on is already the open document's). */
    void (*doc_prev)(void *user, const int *last, int *prev, int B);
    /* Position of this segment's first token in the sequence: RoPE and the causal mask of the
     * attention layers (for the delta-rule layers the halo and state carry the position). */
    int pos0;
} gdn_seq_hooks;

#endif
