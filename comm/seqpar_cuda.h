/* Sequence parallelism for the CUDA model (docs/design.md section 5.4, the "pass" exchange of comm/seqpar.h):
 * the hooks of gdn_seq_hooks (model/seq_hooks.h) for the CUDA model over the NCCL grid's
 * sequence-parallel group. Rank sp_rank runs tokens [sp_rank * T_seg, (sp_rank + 1) * T_seg) of
 * every sequence of the batch. Per GDN layer, forward: the convolution halo (the last W-1
 * pre-convolution rows of q, k, v; act-typed, bf16 in BF16 mode) and the delta-rule state leaving
 * the segment (fp32) go to the next rank; backward: the state gradient and the halo gradient go
 * to the previous rank. The first rank's halo and entering state and the last rank's state and
 * tail gradients are zeros. The ranks form a pipeline over the layers.
 *
 * Everything is enqueued on the GPU without host waits (comm/comm_nccl.h transfer groups):
 * - what a hook sends is first copied, on the model's stream, into a buffer of this object (two
 *   per kind, used by alternate layers), so the model may overwrite its own buffers as soon as
 *   the hook returns; before a buffer is reused the model's stream waits for the send that read
 *   it two layers before;
 * - receives go straight into the model's buffers, after the model's work so far; the model's
 *   next work waits for the halos, while for the state and its gradient only the delta rule's
 *   state pass waits (the hooks return the receive's event): the intra-chunk kernels of the
 *   layer run while the state crosses;
 * - a hook that both sends and receives (the middle ranks when sp > 2) does so in one NCCL group.
 * The NCCL stream is the grid's (shared with the gradient all-reduce); all ranks enqueue their
 * transfers and collectives in the same order, so none can deadlock. Once per forward pass,
 * after the last layer's hooks, the host waits (with the GDN_COMM_TIMEOUT deadline) for the
 * NCCL stream, so a peer that stops responding ends the job with a message instead of a hang in
 * the model's synchronous end of the forward pass; the backward's transfers are waited for with
 * the gradients (gdn_nccl_wait). Built only with CUDA and NCCL (GDN_HAVE_NCCL).
 *
 * Attention layers (the hooks attn_kv_fwd / attn_kv_bwd, as comm/seqpar.h over MPI): the group
 * all-gathers every rank's keys and values (act-typed) and each rank lays out those of the ranks
 * up to itself as its prefix; backward, the gradients of every segment's keys and values (zeros
 * for the later segments) are reduce-scattered, each rank keeping its own. Both are NCCL
 * collectives that the host waits for. Written and compiled, not yet run: the CUDA model has no
 * attention layers under sequence parallelism, and gdn train refuses sp > 1 with attention
 * layers on the GPU (train/run_config.c). gdn_seqpar_cuda_bytes counts the delta-rule layers'
 * point-to-point transfers only. */
#ifndef GDN_COMM_SEQPAR_CUDA_H
#define GDN_COMM_SEQPAR_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "model/config.h"
#include "model/cuda/model_cuda.h"

typedef struct gdn_seqpar_cuda gdn_seqpar_cuda;

/* Hooks for a model of B x T_seg tokens per rank (T_seg >= conv_width - 1) in precision p, over
 * the NCCL grid nccl (comm/comm_nccl.h), whose compute stream becomes `stream` (the model's,
 * gdn_cuda_model_stream). The buffers are allocated at the first pass, with the sizes the model
 * passes to the hooks. nccl must outlive the result. */
gdn_seqpar_cuda *gdn_seqpar_cuda_create(gdn_comm *nccl, const gdn_config *cfg, int B, int T_seg,
                                        gdn_cuda_precision p, void *stream);
/* Waits for pending transfers (with the deadline) and frees; NULL is a no-op. */
void gdn_seqpar_cuda_free(gdn_seqpar_cuda *s);
/* The hooks for gdn_cuda_model_set_seq_hooks (user = s; s must outlive their use). */
gdn_seq_hooks gdn_seqpar_cuda_hooks(gdn_seqpar_cuda *s);

/* Payload bytes one rank sends per forward + backward pass of a micro-batch (forward only when
 * with_backward is 0), from the shapes: the most any rank of the group sends (a middle rank when
 * sp > 2). Halos have act_bytes per element (gdn_cuda_act_bytes), states 4. */
uint64_t gdn_seqpar_cuda_bytes(const gdn_config *cfg, int B, int sp, size_t act_bytes, int with_backward);

#endif
